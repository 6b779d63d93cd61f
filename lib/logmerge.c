/*
 * logmerge.c - merged, streaming reading of rank log files (see logmerge.h).
 *
 * Why it is shaped this way: `dtctl logs` of a large job reads gigabytes, so
 * nothing here touches a line more than it must.  Each source has one block
 * buffer; a line is found with memchr(), its timestamp read at fixed
 * positions, and a line that term_clean_len() finds clean is handed out in
 * place (its newline becomes the NUL); only lines with control bytes, bad
 * UTF-8 or carriage returns are copied, through log_sanitize().
 */
#include "logmerge.h"
#include "safefile.h"
#include "log.h"
#include "term.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

/*
 * Block buffers: a round holds one per source it reads, so their sizes share
 * a budget, and never drop below two maximal lines (a line must fit).
 */
#define READ_BUDGET (16 << 20)
#define BLOCK_MAX (1 << 20)
#define BLOCK_MIN (2 * LOG_MAX_LINE)
/* past this many open sources, a source is reopened for each block */
#define MAX_OPEN 256

/* following: a file written within HOT_MS is polled every FAST_MS */
#define FAST_MS 10
#define HOT_MS 1000
/*
 * following a running job by polling: a silent file is still read every
 * LIVE_MS, so that the next line of a job that logs every few seconds is seen
 * within LIVE_MS (not after a backed-off idle_ms); with many files the step
 * grows so that all of them together cost at most LIVE_RATE reads a second
 */
#define LIVE_MS 20
#define LIVE_RATE 500
/* with inotify, every file is still read this often, in case a write was missed */
#define WATCHED_MS 1000

/* logline_parse(), with the minute of the source's last timestamp (log.h) */
static int parse_line(struct dt_minute *m, const char *line, size_t len, long long *ts,
		      char *stream, const char **text)
{
	/* "YYYY-MM-DDTHH:MM:SS.ffffffZ S " is 30 bytes */
	if (len < 29 || line[26] != 'Z' || line[27] != ' ')
		return -1;
	if (line[28] != 'O' && line[28] != 'E' && line[28] != 'A' && line[28] != 'Z')
		return -1;
	if (len > 29 && line[29] != ' ')
		return -1;
	*ts = dt_timestamp_parse_next(m, line);
	if (*ts < 0)
		return -1;
	*stream = line[28];
	*text = len > 30 ? line + 30 : line + len;
	return 0;
}

int logline_parse(const char *line, size_t len, long long *ts, char *stream,
		  const char **text)
{
	struct dt_minute m = { { 0 }, 0, 0 };

	return parse_line(&m, line, len, ts, stream, text);
}

void log_sanitize(struct strbuf *out, const char *text, size_t len)
{
	size_t start = 0;

	/* a progress bar: keep the last non-empty segment after a carriage return */
	for (const char *cr = text; (cr = memchr(cr, '\r', len - (size_t)(cr - text))); cr++)
		if ((size_t)(cr - text) + 1 < len)
			start = (size_t)(cr - text) + 1;
	while (len > start && (text[len - 1] == '\r' || text[len - 1] == '\n'))
		len--;   /* a line end is not part of the text */
	term_sanitize(out, text + start, len - start, TERM_KEEP_TAB);
}

void logline_source(struct strbuf *sb, const char *node, int rank, int attempt)
{
	strbuf_addf(sb, "%s %d", node, rank);
	if (attempt > 0)
		strbuf_addf(sb, " retry %d", attempt);
}

void logset_init(struct logset *ls)
{
	memset(ls, 0, sizeof(*ls));
	strbuf_init(&ls->text, 0);
	strvec_init(&ls->names);
	ls->ifd = ls->wd_logs = ls->wd_job = -1;
	ls->idle_ms = 200;
}

/* The one copy of a node name in ls (logmerge.h: names). */
static const char *intern_node(struct logset *ls, const char *name)
{
	int i = strvec_find(&ls->names, name);

	if (i >= 0)
		return ls->names.v[i];
	/* a real job has a node per rank at most: a file full of invented names
	 * (a rank can write its own log) costs neither memory nor time */
	if (ls->names.nr >= 4096)
		return "?";
	return strvec_push(&ls->names, name);
}

void logset_add(struct logset *ls, const char *path, int rank, const char *node)
{
	struct logsrc *s;
	const char *slash;

	ALLOC_GROW(ls->src, ls->nr_src + 1, ls->alloc_src);
	s = &ls->src[ls->nr_src++];
	memset(s, 0, sizeof(*s));
	s->path = xstrdup(path);
	slash = strrchr(s->path, '/');
	s->name = slash ? slash + 1 : s->path;
	s->rank = rank;
	s->node = s->added_node = intern_node(ls, node ? node : "?");
	s->attempt = -1;
	s->fd = -1;
	s->due = 1;
	s->step_ms = FAST_MS;
	s->changed_ms = dt_mono_ms();   /* a file that just appeared is about to be written */
}

static void src_close(struct logset *ls, struct logsrc *s)
{
	if (s->fd < 0)
		return;
	close(s->fd);
	s->fd = -1;
	ls->nr_open--;
}

/*
 * Open s for reading; 1 if open, 0 if there is nothing to read, -1 on error.
 * At the start of a round a replaced or truncated file is read from its
 * start; in the middle of one (a reopen for the next block) it ends the
 * source's round instead, and the next round starts it over.
 */
static int src_open(struct logset *ls, struct logsrc *s, int round_start)
{
	struct stat st;
	struct strbuf why = STRBUF_INIT;
	/* a rank can leave anything at its log's path: a FIFO must not hang us */
	int fd = sf_open_path_read(s->path, &st, &why);

	if (fd < 0) {
		int ret = errno == ENOENT ? 0 : error("cannot read log: %s", why.buf);

		strbuf_release(&why);
		if (ret < 0)
			ls->failed = 1;
		return ret;
	}
	strbuf_release(&why);
	if (st.st_ino != s->ino || st.st_size < s->offset) {
		if (!round_start) {
			close(fd);
			return 0;
		}
		if (s->ino) {
			s->offset = 0;
			/* read from its start again: its markers too */
			s->node = s->added_node;
			s->attempt = -1;
			s->open_attempt = 0;
		}
		s->ino = st.st_ino;
		s->start = s->end = 0;   /* a partial line of the old file is gone */
	}
	s->fd = fd;
	ls->nr_open++;
	return 1;
}

static size_t block_size(const struct logset *ls)
{
	size_t n = ls->block ? ls->block : READ_BUDGET / (ls->nr_src ? ls->nr_src : 1);

	return n > BLOCK_MAX ? BLOCK_MAX : n < BLOCK_MIN ? BLOCK_MIN : n;
}

/* Read the next block of s behind what is left of the last one; sets eof. */
static void src_fill(struct logset *ls, struct logsrc *s)
{
	ssize_t n;

	if (!s->buf) {
		s->cap = block_size(ls);
		s->buf = xmalloc(s->cap);
	}
	if (s->start) {
		memmove(s->buf, s->buf + s->start, s->end - s->start);
		s->end -= s->start;
		s->start = 0;
	}
	if (s->fd < 0 && src_open(ls, s, 0) <= 0) {
		s->eof = 1;
		return;
	}
	do
		n = pread(s->fd, s->buf + s->end, s->cap - s->end, s->offset);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		error_errno("cannot read log '%s'", s->path);
		ls->failed = 1;
	}
	if (n <= 0) {
		s->eof = 1;
	} else {
		s->end += (size_t)n;
		s->offset += n;
		s->grew = 1;
	}
	if (ls->nr_open > MAX_OPEN)
		src_close(ls, s);
}

/* Parse the line buf[start..start+piece) as the source's next one. */
static void parse_head(struct logsrc *s, size_t piece, size_t skip)
{
	const char *raw = s->buf + s->start, *body;
	size_t len = piece;
	long long ts;
	char stream;

	if (len && raw[len - 1] == '\r')
		len--;
	if (parse_line(&s->minute, raw, len, &ts, &stream, &body) == 0) {
		if (ts < s->last_ts)
			ts = s->last_ts;   /* a clock stepped back: keep file order */
		s->last_ts = ts;
	} else {
		ts = s->last_ts;
		stream = '?';
		body = raw;
	}
	s->head.ts = ts;
	s->head.stream = stream;
	s->body = (size_t)(body - raw);
	s->body_len = len - s->body;
	s->skip = skip;
}

/*
 * A marker line's "<attempt> <node>" (logmerge.h, Attribution): the lines
 * after it are theirs.  A malformed one is ignored.
 */
static void apply_marker(struct logset *ls, struct logsrc *s, const char *text, size_t len)
{
	char *end;
	long att = strtol(text, &end, 10);
	size_t at = (size_t)(end - text);

	if (end == text || att < 0 || att > 1000000 || at + 1 >= len || text[at] != ' ' ||
	    len - at - 1 > 255)
		return;
	{
		char *name = xstrndup(text + at + 1, len - at - 1);

		s->node = intern_node(ls, name);
		free(name);
	}
	s->attempt = (int)att;
}

/*
 * Find the source's next line, reading more when the buffer holds no
 * complete one; 0 when there is none this round (a partial line stays until
 * its newline arrives, or the round is final).
 */
static int src_next_raw(struct logset *ls, struct logsrc *s)
{
	size_t piece, skip;

	for (;;) {
		size_t avail = s->end - s->start;
		const char *p = avail ? s->buf + s->start : NULL;
		const char *nl = avail ? memchr(p, '\n', avail < LOG_MAX_LINE + 1 ?
						avail : LOG_MAX_LINE + 1) : NULL;

		if (nl) {
			piece = (size_t)(nl - p);
			skip = piece + 1;
			break;
		}
		if (avail > LOG_MAX_LINE) {
			piece = skip = LOG_MAX_LINE;
			break;
		}
		if (!s->eof) {
			src_fill(ls, s);
			continue;
		}
		if (ls->final && avail) {
			piece = skip = avail;
			break;
		}
		return 0;
	}
	parse_head(s, piece, skip);
	return 1;
}

/* The source's next line that is not a marker (markers are applied on the way). */
static int src_advance(struct logset *ls, struct logsrc *s)
{
	while (src_next_raw(ls, s)) {
		if (s->head.stream == 'A') {
			apply_marker(ls, s, s->buf + s->start + s->body, s->body_len);
			s->open_attempt = 1;
		} else if (s->head.stream == 'Z') {
			s->open_attempt = 0;
		} else {
			return 1;
		}
		s->start += s->skip;
	}
	return 0;
}

/*
 * Earlier time first; equal times in rank order, then in the order added.
 * The keys live in the heap itself: a pop costs no look into the sources.
 */
static int key_before(const struct logkey *x, const struct logkey *y)
{
	if (x->ts != y->ts)
		return x->ts < y->ts;
	if (x->rank != y->rank)
		return x->rank < y->rank;
	return x->src < y->src;
}

static void heap_down(struct logset *ls, size_t i)
{
	struct logkey *h = ls->heap, k = h[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= ls->nr_heap)
			break;
		if (c + 1 < ls->nr_heap && key_before(&h[c + 1], &h[c]))
			c++;
		if (!key_before(&h[c], &k))
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = k;
}

static void heap_push(struct logset *ls, size_t src)
{
	struct logkey *h = ls->heap, k = { ls->src[src].head.ts, ls->src[src].rank, src };
	size_t i = ls->nr_heap++;

	while (i && key_before(&k, &h[(i - 1) / 2])) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = k;
}

/*
 * The first line start at or after pos in a file of `size` bytes (size if
 * none); a line longer than LOG_MAX_LINE is cut there, as the reader does.
 */
static off_t line_start_at(int fd, off_t pos, off_t size)
{
	char buf[8192];
	off_t at;

	if (pos <= 0)
		return 0;
	for (at = pos - 1; at < size && at - pos < LOG_MAX_LINE;) {
		ssize_t n = pread(fd, buf, sizeof(buf), at);
		const char *nl;

		if (n <= 0)
			return size;
		if ((nl = memchr(buf, '\n', (size_t)n)))
			return at + (nl - buf) + 1;
		at += n;
	}
	return at < size ? at : size;
}

/* The stamp of the line at pos; -1 if it has none */
static long long stamp_at(int fd, off_t pos)
{
	char buf[64];
	ssize_t n = pread(fd, buf, sizeof(buf), pos);
	const char *text;
	long long ts;
	char stream;

	if (n <= 0 || logline_parse(buf, (size_t)n, &ts, &stream, &text) < 0)
		return -1;
	return ts;
}

/* Where source s's round starts (logset_seek), with its markers just before it applied */
static void src_seek(struct logset *ls, struct logsrc *s, long long after, size_t tail)
{
	struct strbuf why = STRBUF_INIT, win = STRBUF_INIT;
	struct stat st;
	int fd = sf_open_path_read(s->path, &st, &why);
	off_t lo = 0, hi, from;

	strbuf_release(&why);
	if (fd < 0)
		return;
	hi = st.st_size;
	if (!after) {
		lo = line_start_at(fd, st.st_size > (off_t)tail ? st.st_size - (off_t)tail : 0,
				   st.st_size);
	} else {
		/* the line at lo is stamped <= after (or is the file's first) */
		while (hi - lo > LOG_SEEK_SLACK) {
			off_t mid = lo + (hi - lo) / 2, m = line_start_at(fd, mid, hi);
			long long ts = m < hi ? stamp_at(fd, m) : -1;

			if (ts >= 0 && ts <= after)
				lo = m;
			else
				hi = mid;
		}
	}
	s->node = s->added_node;
	s->attempt = -1;
	s->open_attempt = 0;
	/* the markers in the slack before lo: the last one is this attempt's */
	from = line_start_at(fd, lo > LOG_SEEK_SLACK ? lo - LOG_SEEK_SLACK : 0, lo);
	strbuf_grow(&win, (size_t)(lo - from));
	if (lo > from && pread(fd, win.buf, (size_t)(lo - from), from) == lo - from) {
		strbuf_setlen(&win, (size_t)(lo - from));
		for (char *p = win.buf, *nl; (nl = memchr(p, '\n', win.buf + win.len - p)); p = nl + 1) {
			long long ts;
			char stream;
			const char *text;

			if (logline_parse(p, (size_t)(nl - p), &ts, &stream, &text) < 0)
				continue;
			if (stream == 'A') {
				apply_marker(ls, s, text, (size_t)(nl - text));
				s->open_attempt = 1;
			} else if (stream == 'Z') {
				s->open_attempt = 0;
			}
		}
	}
	strbuf_release(&win);
	close(fd);
	s->ino = st.st_ino;
	s->offset = lo;
	s->start = s->end = 0;
	s->last_ts = 0;
	s->due = 1;
}

void logset_seek(struct logset *ls, long long after, size_t tail)
{
	for (size_t i = 0; i < ls->nr_src; i++)
		src_seek(ls, &ls->src[i], after, tail);
}

void logset_begin(struct logset *ls, unsigned flags)
{
	ls->final = !!(flags & LOGSET_FINAL);
	ls->failed = 0;
	ls->have_top = 0;
	ls->nr_heap = 0;
	ALLOC_GROW(ls->heap, ls->nr_src, ls->alloc_heap);
	for (size_t i = 0; i < ls->nr_src; i++) {
		struct logsrc *s = &ls->src[i];

		s->read_now = (flags & LOGSET_ALL) || s->due;
		if (!s->read_now)
			continue;
		s->due = s->grew = 0;
		s->eof = src_open(ls, s, 1) <= 0;
		if (src_advance(ls, s))
			heap_push(ls, i);
	}
}

/* The line handed out last is consumed: move its source on to the next one. */
static void consume_top(struct logset *ls)
{
	struct logsrc *s = &ls->src[ls->top];

	ls->have_top = 0;
	s->start += s->skip;
	if (src_advance(ls, s))
		ls->heap[0].ts = s->head.ts;
	else
		ls->heap[0] = ls->heap[--ls->nr_heap];
	if (ls->nr_heap)
		heap_down(ls, 0);
}

const struct logline *logset_next(struct logset *ls)
{
	struct logsrc *s;
	char *body;

	if (ls->have_top)
		consume_top(ls);
	if (!ls->nr_heap)
		return NULL;
	ls->top = ls->heap[0].src;
	ls->have_top = 1;
	s = &ls->src[ls->top];
	body = s->buf + s->start + s->body;
	/*
	 * A clean line ended by its own \r or \n is shown where it lies, that
	 * byte becoming its NUL (the line is consumed before the buffer moves).
	 */
	if (s->body + s->body_len < s->skip &&
	    term_clean_len(body, s->body_len, TERM_KEEP_TAB) == s->body_len) {
		body[s->body_len] = '\0';
		s->head.text = body;
		s->head.len = s->body_len;
	} else {
		strbuf_reset(&ls->text);
		log_sanitize(&ls->text, body, s->body_len);
		s->head.text = ls->text.buf;
		s->head.len = ls->text.len;
	}
	s->head.rank = s->rank;
	s->head.node = s->node;
	s->head.attempt = s->attempt;
	s->head.src = ls->top;
	return &s->head;
}

/* When to read s again: soon while it is being written, less often once idle. */
static void schedule(struct logset *ls, struct logsrc *s, long long now)
{
	int slowest = ls->idle_ms;

	if (ls->live) {
		long long live = (long long)ls->nr_src * 1000 / LIVE_RATE;

		live = live < LIVE_MS ? LIVE_MS : live;
		if (live < slowest)
			slowest = (int)live;
	}
	if (s->grew)
		s->changed_ms = now;
	if (now - s->changed_ms < HOT_MS)
		s->step_ms = FAST_MS;
	else if (s->step_ms > slowest)
		s->step_ms = slowest;   /* the job started running again (or more files came) */
	else if (s->step_ms < slowest)
		s->step_ms = s->step_ms * 2 < slowest ? s->step_ms * 2 : slowest;
	s->next_ms = now + (ls->ifd >= 0 ? WATCHED_MS : s->step_ms);
}

int logset_end(struct logset *ls)
{
	long long now = dt_mono_ms();

	if (ls->have_top) {
		struct logsrc *s = &ls->src[ls->top];

		s->start += s->skip;
		ls->have_top = 0;
	}
	ls->nr_heap = 0;
	for (size_t i = 0; i < ls->nr_src; i++) {
		struct logsrc *s = &ls->src[i];

		if (!s->read_now)
			continue;
		s->read_now = 0;
		src_close(ls, s);
		if (s->start == s->end) {
			/* between rounds a source holds at most a partial line */
			free(s->buf);
			s->buf = NULL;
			s->start = s->end = s->cap = 0;
		}
		schedule(ls, s, now);
	}
	return ls->failed ? -1 : 0;
}

/*
 * File systems whose writes from other machines inotify does not see
 * (statfs(2) f_type): NFS, SMB/CIFS, FUSE (sshfs, GlusterFS...), Ceph, 9p,
 * AFS, Lustre, GPFS, and the shared-disk OCFS2 and GFS2.
 */
static int fs_is_remote(unsigned long type)
{
	static const unsigned long remote[] = {
		0x6969, 0x517b, 0xff534d42, 0xfe534d42, 0x65735546, 0x00c36400,
		0x01021997, 0x5346414f, 0x6b414653, 0x0bd00bd0, 0x47504653, 0x7461636f,
		0x01161970,
	};

	for (size_t i = 0; i < sizeof(remote) / sizeof(remote[0]); i++)
		if ((type & 0xffffffffUL) == remote[i])
			return 1;
	return 0;
}

int logset_watch(struct logset *ls, const char *jobdir, int idle_ms)
{
	const char *force = getenv("DTCTL_LOGS_POLL");
	struct strbuf dir = STRBUF_INIT;
	struct statfs sf;

	ls->idle_ms = idle_ms;
	if ((force && *force && strcmp(force, "0")) || statfs(jobdir, &sf) < 0 ||
	    fs_is_remote((unsigned long)sf.f_type))
		return 0;
	ls->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (ls->ifd < 0)
		return 0;
	/* the job dir first, so that a logs dir made after the look below is seen */
	ls->wd_job = inotify_add_watch(ls->ifd, jobdir, IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE);
	if (ls->wd_job < 0) {
		close(ls->ifd);
		ls->ifd = -1;
		return 0;
	}
	strbuf_addf(&dir, "%s/logs", jobdir);
	ls->logdir = strbuf_detach(&dir, NULL);
	ls->wd_logs = inotify_add_watch(ls->ifd, ls->logdir, IN_MODIFY | IN_CREATE | IN_MOVED_TO);
	return 1;
}

static void mark_due(struct logset *ls, const char *name)
{
	for (size_t i = 0; i < ls->nr_src; i++)
		if (!name || !strcmp(ls->src[i].name, name))
			ls->src[i].due = 1;
}

static void take_events(struct logset *ls)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n;

	while ((n = read(ls->ifd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;
			const char *name = ev->len ? ev->name : "";

			p += sizeof(*ev) + ev->len;
			if (ev->mask & IN_Q_OVERFLOW) {
				mark_due(ls, NULL);   /* events were lost: read everything */
				ls->rescan = ls->state_changed = 1;
			} else if (ev->wd == ls->wd_logs) {
				mark_due(ls, name);
				if (ev->mask & (IN_CREATE | IN_MOVED_TO))
					ls->rescan = 1;
			} else if (ev->wd == ls->wd_job) {
				if (!strcmp(name, "state"))
					ls->state_changed = 1;
				else if (!strcmp(name, "logs") && ls->wd_logs < 0) {
					ls->wd_logs = inotify_add_watch(ls->ifd, ls->logdir,
									IN_MODIFY | IN_CREATE | IN_MOVED_TO);
					ls->rescan = 1;
				}
			}
		}
	}
}

void logset_wait(struct logset *ls, int max_ms)
{
	long long now = dt_mono_ms(), until = now + max_ms;

	for (size_t i = 0; i < ls->nr_src; i++) {
		if (ls->src[i].due)
			until = now;
		else if (ls->src[i].next_ms < until)
			until = ls->src[i].next_ms;
	}
	if (ls->ifd >= 0) {
		struct pollfd p = { .fd = ls->ifd, .events = POLLIN };

		if (poll(&p, 1, until > now ? (int)(until - now) : 0) > 0)
			take_events(ls);
	} else if (until > now) {
		struct timespec t = { (until - now) / 1000, (until - now) % 1000 * 1000000 };

		nanosleep(&t, NULL);   /* a signal ends it early, as it should */
	}
	now = dt_mono_ms();
	for (size_t i = 0; i < ls->nr_src; i++)
		if (ls->src[i].next_ms <= now)
			ls->src[i].due = 1;
}

void logset_release(struct logset *ls)
{
	for (size_t i = 0; i < ls->nr_src; i++) {
		src_close(ls, &ls->src[i]);
		free(ls->src[i].path);
		free(ls->src[i].buf);
	}
	free(ls->src);
	free(ls->heap);
	free(ls->logdir);
	strbuf_release(&ls->text);
	strvec_clear(&ls->names);
	if (ls->ifd >= 0)
		close(ls->ifd);
	logset_init(ls);
}

size_t logset_unsettled(const struct logset *ls, size_t *first)
{
	size_t n = 0;

	for (size_t i = 0; i < ls->nr_src; i++) {
		if (!ls->src[i].open_attempt)
			continue;
		if (!n++ && first)
			*first = i;
	}
	return n;
}
