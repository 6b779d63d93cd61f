/*
 * logmerge.h - reading rank logs from the shared directory, merged in time order.
 *
 * A job's ranks write <job>/logs/<rank>.log, one writer per file, lines of the
 * form "2026-11-22T10:00:00.123456Z O text" (O = stdout, E = stderr).  A read
 * is a round: logset_begin() opens the sources, logset_next() hands out their
 * complete lines one at a time in time order, logset_end() closes them.  The
 * round is a streaming k-way merge (a heap over each source's next line), each
 * file read in blocks, so memory grows with the number of files, never with
 * their size.  Each file is taken to be in time order, as its agent stamps the
 * lines as they arrive: a line stamped earlier than the one before it in its
 * file (a clock stepped back) takes that line's time and stays in file order.
 * Equal times come out in rank order.  A partial last line is kept until its
 * newline arrives; a line longer than LOG_MAX_LINE is split.  A file that
 * shrinks or is replaced is read again from the start.
 *
 * Following (logset_watch(), logset_wait()): writes from other NFS clients are
 * invisible to inotify, so a logs directory on a network file system (or any,
 * with DTCTL_LOGS_POLL=1 in the environment) is polled, each file on its own
 * clock: every 10 ms while it changed within the last second, backing off to
 * the caller's idle interval after that.  On a local file system inotify wakes
 * the reader on each write, and only the files written are read.
 *
 * Attribution: a writer starts each attempt's lines with a marker line
 * "<time> A <attempt> <node>" (agent/linelog.h); it is not handed out, and the
 * lines after it carry that node and attempt.  Before any marker (logs of an
 * older agent) a line has the node the source was added with, attempt -1.
 * The writer ends its lines with "<time> Z", after the rank's last line and
 * before its exit is recorded; a reader that saw the job end asks
 * logset_unsettled() whether a log may still have lines it cannot see yet (a
 * cached view of an NFS dir shows a file's end late) and reads on until
 * none has, or its own deadline passes.
 *
 * Ownership: a logset owns its sources; the line logset_next() returns, text
 * included, is valid until the next logset_next() or logset_end(), except its
 * node, which is valid until logset_release().
 */
#ifndef DT_LOGMERGE_H
#define DT_LOGMERGE_H

#include <stddef.h>
#include <sys/types.h>
#include "log.h"
#include "strbuf.h"
#include "strvec.h"

#define LOG_MAX_LINE (64 * 1024)   /* longer lines are split */

struct logline {
	long long ts;          /* microseconds since the epoch */
	char stream;           /* 'O', 'E', or '?' for a line without the header */
	int rank;
	const char *node;
	int attempt;           /* from the source's last marker; -1 before any */
	const char *text;      /* sanitised: no control characters, valid UTF-8 */
	size_t len;            /* strlen(text) */
	size_t src;            /* the source's index in logset.src */
};

struct logsrc {
	char *path;
	const char *name;      /* the file name in path, for inotify's events */
	int rank;
	const char *node;      /* the last marker's node, else the one added with */
	const char *added_node;
	int attempt;           /* the last marker's attempt, -1 before any */
	int open_attempt;      /* a start marker was read and no end marker after it */
	int fd;                /* open during a round, -1 otherwise */
	off_t offset;          /* how much of the file was read into buf */
	ino_t ino;
	char *buf;             /* bytes read, not yet handed out: buf[start..end) */
	size_t cap, start, end;
	int eof, read_now, grew;
	long long last_ts;
	struct dt_minute minute;   /* of the last timestamp parsed */
	/* the next line, while the source is in the round's heap */
	struct logline head;
	size_t body, body_len, skip;
	/* following: when to read this file again */
	int due, step_ms;
	long long next_ms, changed_ms;
};

struct logkey {            /* a source's place in the merge */
	long long ts;
	int rank;
	size_t src;
};

struct logset {
	struct logsrc *src;
	size_t nr_src, alloc_src;
	struct logkey *heap;   /* the sources with a line, earliest first */
	size_t nr_heap, alloc_heap;
	size_t top;            /* the source whose line was handed out last */
	int have_top, final, failed;
	size_t nr_open;
	size_t block;          /* the block size; 0: a share of the read budget (tests set it) */
	struct strbuf text;    /* a line that needed sanitising */
	struct strvec names;   /* every node name seen, so a line's node outlives the
				* line: it stays valid until logset_release() */
	/* following */
	int ifd;               /* inotify, or -1 when polling */
	int wd_logs, wd_job;
	char *logdir;
	int idle_ms;
	int live;              /* the job is running: polling does not back off (logset_watch) */
	int rescan;            /* a file appeared in the logs dir: look for new ranks */
	int state_changed;     /* <job>/state was written */
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

/*
 * A line's source as dtctl prints it before the text: "node rank", and
 * " retry N" for the lines of a retried attempt (N > 0).  Unsanitised.
 */
void logline_source(struct strbuf *sb, const char *node, int rank, int attempt);

void logset_init(struct logset *ls);
void logset_add(struct logset *ls, const char *path, int rank, const char *node);

enum {
	LOGSET_ALL = 1 << 0,     /* read every source, not only those due */
	LOGSET_FINAL = 1 << 1,   /* the writers are done: flush partial last lines */
};
/*
 * Start a round over the sources that are due (a source is due when added,
 * and then when logset_wait() says so), or all of them with LOGSET_ALL.
 * Then logset_next() until it returns NULL, then logset_end(), which returns
 * -1 if a file could not be read (named on stderr), else 0.
 */
void logset_begin(struct logset *ls, unsigned flags);
const struct logline *logset_next(struct logset *ls);
int logset_end(struct logset *ls);

/*
 * Before a round: start every source near the end of its file instead of
 * where the last round stopped, so that a look at a huge log reads bounded
 * bytes (the dashboard, scheduler/dashboard.c).  after == 0: at the first
 * line that begins in the file's last `tail` bytes; after > 0: at most one
 * bisection step (LOG_SEEK_SLACK bytes) before the first line stamped after
 * `after`, found by bisection on the lines' stamps (a file is in time order;
 * a clock stepped back can make the bisection start late, past lines that a
 * full read would have stamped after `after`).  Lines stamped <= after may
 * still come out: the caller skips them.  Attribution markers up to
 * LOG_SEEK_SLACK bytes before the start are applied; an older one is not
 * seen (node "?" or the one added with, attempt -1).  A file that cannot be
 * opened is left as it is (the round names it).
 */
#define LOG_SEEK_SLACK (256 * 1024)
void logset_seek(struct logset *ls, long long after, size_t tail);

/*
 * Follow <jobdir>/logs: inotify on a local file system, adaptive polling on a
 * network one or with DTCTL_LOGS_POLL=1; idle_ms is the slowest poll.  While
 * the caller sets ls->live (the job is running), a silent file is polled no
 * slower than every LIVE_MS (more slowly with many files, at most LIVE_RATE
 * reads a second in all), so that a line after a silence is seen within tens
 * of milliseconds; once the job has ended, polling backs off to idle_ms.
 * Returns 1 when inotify is used, 0 when polling.
 */
int logset_watch(struct logset *ls, const char *jobdir, int idle_ms);
/*
 * Sleep until a source may have new data (marked due), a file appears in the
 * logs dir (ls->rescan), <jobdir>/state is written (ls->state_changed), a
 * signal arrives, or max_ms pass.
 */
void logset_wait(struct logset *ls, int max_ms);
void logset_release(struct logset *ls);
/*
 * How many sources have an attempt's start marker and not yet its end one
 * (the first such source's index in *first, when not NULL): once the job has
 * ended, lines of theirs may still be on their way (logmerge.h, Attribution).
 */
size_t logset_unsettled(const struct logset *ls, size_t *first);
/* How long a reader waits for them once the job has ended (then it warns). */
#define LOG_SETTLE_MS 10000

#endif
