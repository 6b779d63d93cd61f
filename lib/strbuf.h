/*
 * strbuf.h - growable strings.
 *
 * A strbuf is never NULL-buffered and always NUL-terminated, even when empty
 * (it points at a shared empty string until first growth).  Ownership of the
 * bytes leaves only through strbuf_detach(); strbuf_release() frees and
 * re-initialises.
 */
#ifndef DT_STRBUF_H
#define DT_STRBUF_H

#include <stddef.h>
#include <stdio.h>
#include <stdarg.h>
#include <sys/types.h>
#include "usage.h"

struct strbuf {
	size_t alloc;
	size_t len;
	char *buf;
};

extern char strbuf_slopbuf[];
#define STRBUF_INIT { 0, 0, strbuf_slopbuf }

void strbuf_init(struct strbuf *sb, size_t hint);
void strbuf_release(struct strbuf *sb);
char *strbuf_detach(struct strbuf *sb, size_t *len);
void strbuf_grow(struct strbuf *sb, size_t extra);
void strbuf_setlen(struct strbuf *sb, size_t len);
#define strbuf_reset(sb) strbuf_setlen((sb), 0)

void strbuf_add(struct strbuf *sb, const void *data, size_t len);
void strbuf_addstr(struct strbuf *sb, const char *s);
void strbuf_addch(struct strbuf *sb, int c);
void strbuf_addf(struct strbuf *sb, const char *fmt, ...) DT_PRINTF(2, 3);
void strbuf_vaddf(struct strbuf *sb, const char *fmt, va_list ap) DT_PRINTF(2, 0);
void strbuf_addbuf(struct strbuf *sb, const struct strbuf *other);
void strbuf_trim(struct strbuf *sb);
void strbuf_rtrim(struct strbuf *sb);
/* Append `s` quoted for a POSIX shell: 'it'\''s' */
void strbuf_add_shell_quoted(struct strbuf *sb, const char *s);
int strbuf_starts_with(const struct strbuf *sb, const char *prefix);

/*
 * Read a whole file into sb (appending).  Refuses files over `limit` bytes
 * (0 = no limit) with errno EFBIG.  Returns bytes read or -1 with errno set.
 */
ssize_t strbuf_read_file(struct strbuf *sb, const char *path, size_t limit);
/* Read all of fd (appending); -1 on error. */
ssize_t strbuf_read_fd(struct strbuf *sb, int fd, size_t limit);
/* Read one line (without the newline) from fp; returns EOF at end. */
int strbuf_getline(struct strbuf *sb, FILE *fp);

/*
 * Write `len` bytes to `path` atomically: a temporary file beside it, fsync,
 * chmod to `mode`, rename over the target.  Never leaves a partial file.
 */
int write_file_atomic(const char *path, const void *data, size_t len, int mode);
/*
 * The same without the fsync: readers never see a partial file, but after a
 * power loss the file may be old or empty.  For state that is rewritten
 * often and is worthless after a crash of the machine anyway (a task file
 * describes processes that died with it; job-dir files dtsched rewrites
 * from its database).  An fsync costs milliseconds on a busy disk and a
 * COMMIT round trip on NFS.
 */
int write_file_replace(const char *path, const void *data, size_t len, int mode);

/* The value of hex digit c (either case), or -1. */
int hex_value(int c);
/* 1 when s has 1 to max characters, each an ASCII letter or digit or one of
 * extra (node names, task ids: extra "._-"). */
/* v as one CSV field (RFC 4180): as it is, or quoted with "" for a quote when it
 * holds a comma, quote or line break */
void strbuf_addcsv(struct strbuf *sb, const char *v);
/* someone's words (a job's name) as one CSV field: as strbuf_addcsv, with a leading
 * "'" when v begins with '=', '+', '-', '@', a tab or a carriage return, so that a
 * spreadsheet shows it as text and never runs it as a formula (CSV injection) */
void strbuf_addcsv_text(struct strbuf *sb, const char *v);
int name_chars_ok(const char *s, size_t max, const char *extra);

int starts_with(const char *s, const char *prefix);
int ends_with(const char *s, const char *suffix);
/* If s starts with prefix, set *out past it and return 1. */
int skip_prefix(const char *s, const char *prefix, const char **out);

#endif
