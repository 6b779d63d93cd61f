/*
 * logmerge.h - reading rank logs from the shared directory, merged in time order.
 *
 * A job's ranks write <job>/logs/<rank>.log, one writer per file, lines of the
 * form "2026-11-22T10:00:00.123456Z O text" (O = stdout, E = stderr).  A reader
 * cannot use inotify (writes from other NFS clients are invisible to it), so it
 * polls: logsrc_poll() reads whatever complete lines were appended since the
 * last call.  A partial last line is kept until its newline arrives.  A file
 * that shrinks (truncated, replaced) is read again from the start.
 *
 * Ownership: a logset owns its sources and the lines it returns until the next
 * logset_poll() or logset_release().
 */
#ifndef DT_LOGMERGE_H
#define DT_LOGMERGE_H

#include <stddef.h>
#include <sys/types.h>
#include "strbuf.h"

#define LOG_MAX_LINE (64 * 1024)   /* longer lines are split */

struct logline {
	long long ts;          /* microseconds since the epoch */
	char stream;           /* 'O', 'E', or '?' for a line without the header */
	int rank;
	const char *node;
	char *text;            /* sanitised: no control characters, valid UTF-8 */
	size_t seq;            /* arrival order, breaks timestamp ties */
};

struct logsrc {
	char *path;
	int rank;
	char *node;
	off_t offset;
	ino_t ino;
	struct strbuf partial;
	long long last_ts;
};

struct logset {
	struct logsrc *src;
	size_t nr_src, alloc_src;
	struct logline *lines;   /* the batch returned by the last logset_poll() */
	size_t nr_lines, alloc_lines;
	size_t seq;
};

/*
 * Parse one raw line.  Returns 0 and fills ts/stream/text for a well-formed
 * line; -1 for anything else (the caller shows it as is).
 */
int logline_parse(const char *line, size_t len, long long *ts, char *stream,
		  const char **text);
/*
 * Append `text` made safe for a terminal: a carriage return keeps only what
 * follows the last one (as a terminal would show a progress bar), the rest is
 * term_sanitize()d with tabs kept (term.h).
 */
void log_sanitize(struct strbuf *out, const char *text, size_t len);

void logset_init(struct logset *ls);
void logset_add(struct logset *ls, const char *path, int rank, const char *node);
/*
 * Read what was appended to every source; the new lines are in ls->lines sorted
 * by (timestamp, arrival).  With `final`, partial last lines are flushed too.
 * Returns the number of lines, or -1 on a read error (named on stderr).
 */
ssize_t logset_poll(struct logset *ls, int final);
void logset_release(struct logset *ls);

#endif
