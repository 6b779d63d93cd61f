/*
 * linelog.h - turning a task's output bytes into rank log lines.
 *
 * Every line of the log files (docs/architecture.md, "Files and where they live") is
 *     2026-11-22T10:00:00.123456Z O text      (O = stdout, E = stderr)
 * whatever the program writes: "\r\n" and a lone "\r" (progress bars) end a
 * line, lines longer than max_line bytes are split (never inside a UTF-8
 * sequence), and the text is term_sanitize()d with tabs kept (ESC as \e,
 * other control bytes and invalid UTF-8 as \xHH: lib/term.h) so that nothing
 * can break the one-line-per-record format nor a terminal showing the file.
 */
#ifndef DT_AGENT_LINELOG_H
#define DT_AGENT_LINELOG_H

#include <stddef.h>
#include "strbuf.h"

#define LINELOG_MAX_LINE 16384

struct linelog {
	char tag;                /* 'O' or 'E' */
	size_t max_line;
	struct strbuf pending;   /* raw bytes of the unfinished line */
	int after_cr;            /* the last byte was '\r' */
};

void linelog_init(struct linelog *l, char tag, size_t max_line);
void linelog_release(struct linelog *l);
/* Append the complete lines in buf (formatted) to out. */
void linelog_feed(struct linelog *l, const char *buf, size_t n, struct strbuf *out);
/* At end of stream: append the unfinished line, if any. */
void linelog_flush(struct linelog *l, struct strbuf *out);
/*
 * Read what the non-blocking pipe *fd holds (a bounded number of reads, so one
 * chatty stream cannot starve the others) and append the complete lines to
 * out; at end of file or on an error flush the unfinished line, close *fd and
 * set it to -1.
 */
void linelog_read(struct linelog *l, int *fd, struct strbuf *out);

/* What could not be written to a log (ENOSPC, EIO on the shared dir). */
struct log_loss {
	long long lines, bytes;
	int err;                 /* the first write error, 0 while none */
};

/*
 * Write the formatted lines in sb to fd and empty sb; what a failed write
 * leaves is counted in loss (a line cut by a partial write counts as lost).
 * Returns 0, or the errno of a write error the first time one happens.
 */
int linelog_write(int fd, struct strbuf *sb, struct log_loss *loss);

/*
 * The marker line that starts an attempt's lines in a rank's log:
 * "<time> A <attempt> <node>" (protocol.h, DT_NODE_ENV), appended to out.
 */
void linelog_marker(struct strbuf *out, int attempt, const char *node);
/*
 * The end marker, "<time> Z": the writer has written the attempt's last line
 * (before its exit is recorded).  A reader that sees the job end keeps
 * reading a log that has a start marker until it finds this one (a cached
 * view of an NFS shared dir may show the end of the file late: logmerge.h).
 */
void linelog_end_marker(struct strbuf *out);

struct strvec;
/*
 * Line-buffered C stdio for a rank whose environment `env` (about to be
 * exec'd) says DT_LINE_BUFFERED=1 (protocol.h): what `stdbuf -oL` does, done
 * without a wrapper process: coreutils' libstdbuf.so first in LD_PRELOAD and
 * _STDBUF_O=L, so printf() from C, C++, awk, ... reaches the log pipe at each
 * newline instead of every 4 KiB.  Only a root-owned library that nobody
 * else may write is preloaded.  Returns 0 when not asked or done; -1 with
 * the reason in why when asked and no such library is on this node (the
 * rank then runs block-buffered: the caller notes it in the rank's log).
 */
int linelog_stdbuf_env(struct strvec *env, struct strbuf *why);

#endif
