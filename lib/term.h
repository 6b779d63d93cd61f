/*
 * term.h - text from users, ranks and agents made safe for a terminal.
 *
 * Job names, argv words, sweep values, node names, log lines, hostnames and
 * GPU names reported by agents reach dtctl's output unchanged; printed raw,
 * an ESC or C1 byte in one of them is a command to the terminal (set the
 * title, clear the screen, remap keys).  Everything dtctl prints for a person
 * goes through term_sanitize(); JSON output keeps the exact strings.
 *
 * Shown as: ESC "\e"; newline "\n", tab "\t", CR "\r" (unless a flag keeps
 * them); other C0 controls, DEL and C1 controls (U+0080-U+009F, also in their
 * two-byte UTF-8 form, which some terminals take as CSI) "\xNN" per byte;
 * bytes that are not valid UTF-8 "\xNN".  Valid UTF-8 is kept.  A backslash
 * is not doubled: the output is for reading (rank logs already hold "\xNN"
 * written by the agent), not for decoding; --json is exact.  Escapes are
 * ASCII, so a padded column counts the escaped width.
 */
#ifndef DT_TERM_H
#define DT_TERM_H

#include <stddef.h>
#include "strbuf.h"

enum {
	TERM_KEEP_TAB = 1 << 0,   /* a log line: a tab is layout, not a column break */
	TERM_KEEP_NL = 1 << 1,    /* a message of several lines */
};

/* Append s[0..len) made safe (a NUL inside is shown as \x00). */
void term_sanitize(struct strbuf *out, const char *s, size_t len, unsigned flags);
/*
 * How many bytes at the start of s[0..len) term_sanitize() would copy
 * unchanged (printable ASCII, valid UTF-8 that is no C1 control, and the
 * tabs or newlines `flags` keeps).  A reader of large logs uses it to show a
 * clean line in place instead of copying it through a strbuf.
 */
size_t term_clean_len(const char *s, size_t len, unsigned flags);

/*
 * term_sanitize(s, strlen(s), 0) into one of TERM_STR_SLOTS rotating buffers,
 * for printf arguments: printf("%-16s %s\n", term_str(a), term_str(b)).  The
 * result is valid until TERM_STR_SLOTS more calls (one thread only); NULL
 * gives NULL.
 */
#define TERM_STR_SLOTS 16
const char *term_str(const char *s);

/*
 * Decode one UTF-8 sequence (RFC 3629: no overlong forms, surrogates or code
 * points above U+10FFFF) of at most `left` bytes; returns its length and sets
 * *cp, or 0 when s does not start a valid sequence.
 */
size_t utf8_decode(const unsigned char *s, size_t left, unsigned *cp);

#endif
