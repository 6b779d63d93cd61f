/*
 * debug.c - per-rank evidence for hang attribution (see debug.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "debug.h"
#include "proctree.h"
#include "json.h"
#include "log.h"
#include "run-command.h"
#include "safefile.h"
#include "strbuf.h"
#include "usage.h"

#define ENVIRON_MAX (256 * 1024)
#define DUMP_MAX (64 * 1024)
#define FRAMES_MAX 12
#define FIELD_MAX 160

static const char *const rank_vars[] = {
	"OMPI_COMM_WORLD_RANK", "RANK", "PMI_RANK", "PMIX_RANK", NULL
};

struct rproc {
	pid_t pid, ppid;
	int rank;
	char state;
	unsigned long long ticks0, ticks1;
	char comm[32];
	int src;                 /* 0 none, 1 dttrain, 2 python */
	off_t off0, off1;        /* the record file's size before each signal */
	json_t *native;          /* gdb's frames of the main thread, or NULL */
	char native_err[160];    /* why there are none (gdb's last line) */
	int pidfd;               /* the process itself, not its number, or -1 (pin_process) */
};

static long long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* Printable ASCII only, at most max bytes (hostile input). */
static void add_clean(struct strbuf *sb, const char *s, size_t len, size_t max)
{
	for (size_t i = 0; i < len && i < max; i++)
		strbuf_addch(sb, s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?');
}

static int read_proc(pid_t pid, const char *what, struct strbuf *sb, size_t limit)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
	strbuf_reset(sb);
	return strbuf_read_file(sb, path, limit) < 0 ? -1 : 0;
}

/* state, ppid and utime + stime of pid; -1 if it is gone. */
static int read_stat(pid_t pid, char *state, pid_t *ppid, unsigned long long *ticks, char *comm,
		     size_t comm_size)
{
	struct strbuf sb = STRBUF_INIT;
	char *open_p, *close_p;
	unsigned long long ut = 0, st = 0;
	int pp = 0, ret = -1;

	if (read_proc(pid, "stat", &sb, 4096) < 0)
		goto out;
	open_p = strchr(sb.buf, '(');
	close_p = strrchr(sb.buf, ')');
	if (!open_p || !close_p || close_p < open_p)
		goto out;
	if (comm) {
		struct strbuf c = STRBUF_INIT;

		add_clean(&c, open_p + 1, (size_t)(close_p - open_p - 1), comm_size - 1);
		snprintf(comm, comm_size, "%s", c.buf);
		strbuf_release(&c);
	}
	/* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt
	 * cmajflt utime stime */
	if (sscanf(close_p + 2, "%c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", state, &pp,
		   &ut, &st) != 4)
		goto out;
	*ppid = pp;
	*ticks = ut + st;
	ret = 0;
out:
	strbuf_release(&sb);
	return ret;
}

/*
 * The process as the task's tree listed it, held by a pidfd: the sampling
 * takes a second or more, and the agent (root in team mode) must not signal
 * or attach gdb to another user's process that got the number meanwhile.
 * The number names the same process while the pidfd's process lives (a
 * number is free again only once its process is reaped), so each use checks
 * that first (alive()); the fd is taken only when the process at the number
 * is still the one read before (its start time).  -1 without pidfds (then
 * the number is used as before).
 */
static int pin_process(pid_t pid, unsigned long long t0)
{
#ifdef SYS_pidfd_open
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);

	if (fd >= 0 && (!t0 || proc_start_time(pid, NULL) != t0)) {
		close(fd);
		return -2;   /* gone or replaced while we looked */
	}
	return fd;
#else
	(void)pid;
	(void)t0;
	return -1;
#endif
}

/* Is p's process (its pidfd's) still there?  Always yes without a pidfd. */
static int alive(const struct rproc *p)
{
#ifdef SYS_pidfd_send_signal
	if (p->pidfd >= 0)
		return syscall(SYS_pidfd_send_signal, p->pidfd, 0, NULL, 0) == 0;
#endif
	return 1;
}

/* sig to p's process, never to another that got its number */
static void signal_rank(const struct rproc *p, int sig)
{
#ifdef SYS_pidfd_send_signal
	if (p->pidfd >= 0) {
		syscall(SYS_pidfd_send_signal, p->pidfd, sig, NULL, 0);
		return;
	}
#endif
	kill(p->pid, sig);
}

/* The rank in pid's environment, or -1. */
static int env_rank(pid_t pid)
{
	struct strbuf sb = STRBUF_INIT;
	int rank = -1;

	if (read_proc(pid, "environ", &sb, ENVIRON_MAX) < 0)
		goto out;
	for (int v = 0; rank_vars[v] && rank < 0; v++) {
		size_t n = strlen(rank_vars[v]);

		for (size_t i = 0; i < sb.len; i += strlen(sb.buf + i) + 1) {
			char *end;
			long r;

			if (strncmp(sb.buf + i, rank_vars[v], n) || sb.buf[i + n] != '=')
				continue;
			errno = 0;
			r = strtol(sb.buf + i + n + 1, &end, 10);
			if (!errno && end != sb.buf + i + n + 1 && !*end && r >= 0 && r < 1 << 24)
				rank = (int)r;
			break;
		}
	}
out:
	strbuf_release(&sb);
	return rank;
}

static int catches(pid_t pid, int sig)
{
	struct strbuf sb = STRBUF_INIT;
	const char *p;
	int yes = 0;

	if (!read_proc(pid, "status", &sb, 64 * 1024) && (p = strstr(sb.buf, "\nSigCgt:\t"))) {
		unsigned long long mask = strtoull(p + 9, NULL, 16);

		yes = sig >= 1 && sig <= 64 && (mask >> (sig - 1)) & 1;
	}
	strbuf_release(&sb);
	return yes;
}

static void record_rel(struct strbuf *rel, int rank, int src)
{
	strbuf_reset(rel);
	strbuf_addf(rel, "debug/%d.%s", rank, src == 1 ? "dttrain" : "py-stack");
}

/*
 * Which record file the process armed: 1 dttrain, 2 python, 0 none (no file,
 * or its header names another pid); *size: the file's size now.
 */
static int armed_source(const char *job_dir, struct rproc *p, off_t *size)
{
	struct strbuf rel = STRBUF_INIT;
	static const char *const heads[] = { "dttrain pid=", "dtctl-faulthandler pid=" };
	int found = 0;

	for (int src = 1; src <= 2 && !found; src++) {
		struct stat st;
		char head[128];
		ssize_t n;
		int fd;

		record_rel(&rel, p->rank, src);
		fd = sf_open_read(job_dir, rel.buf, &st, NULL);
		if (fd < 0)
			continue;
		n = pread(fd, head, sizeof(head) - 1, 0);
		close(fd);
		if (n <= 0)
			continue;
		head[n] = '\0';
		if (starts_with(head, heads[src - 1]) &&
		    atoll(head + strlen(heads[src - 1])) == (long long)p->pid) {
			found = src;
			*size = st.st_size;
		}
	}
	strbuf_release(&rel);
	return found;
}

/* What was appended to the record file after off (at most DUMP_MAX). */
static void read_since(const char *job_dir, const struct rproc *p, off_t off, struct strbuf *out)
{
	struct strbuf rel = STRBUF_INIT;
	struct stat st;
	int fd;

	strbuf_reset(out);
	record_rel(&rel, p->rank, p->src);
	fd = sf_open_read(job_dir, rel.buf, &st, NULL);
	if (fd >= 0) {
		off_t len = st.st_size - off;

		if (len > DUMP_MAX) {
			off = st.st_size - DUMP_MAX;
			len = DUMP_MAX;
		}
		if (len > 0) {
			ssize_t n;

			strbuf_grow(out, (size_t)len);
			n = pread(fd, out->buf, (size_t)len, off);
			if (n > 0)
				strbuf_setlen(out, (size_t)n);
		}
		close(fd);
	}
	strbuf_release(&rel);
}

static off_t file_size(const char *job_dir, const struct rproc *p)
{
	struct strbuf rel = STRBUF_INIT;
	struct stat st;
	off_t size = -1;

	record_rel(&rel, p->rank, p->src);
	if (!sf_stat(job_dir, rel.buf, &st, NULL))
		size = st.st_size;
	strbuf_release(&rel);
	return size;
}

/* The last complete "key=value ..." line of a dttrain record into o. */
static void parse_record(const struct strbuf *text, json_t *o)
{
	const char *end = text->buf + text->len, *line, *p;
	struct strbuf phase = STRBUF_INIT;
	long long seq = -1, step = -1, in_coll = 0, phase_ms = -1, wait_ms = -1;

	while (end > text->buf && end[-1] == '\n')
		end--;
	if (end == text->buf)
		return;
	for (line = end; line > text->buf && line[-1] != '\n'; line--)
		;
	for (p = line; p < end;) {
		const char *k = p, *eq, *v;
		size_t kl;

		while (p < end && *p != ' ')
			p++;
		eq = memchr(k, '=', (size_t)(p - k));
		if (eq) {
			kl = (size_t)(eq - k);
			v = eq + 1;
			if (kl == 5 && !strncmp(k, "phase", 5))
				add_clean(&phase, v, (size_t)(p - v), 32);
			else if (kl == 3 && !strncmp(k, "seq", 3))
				seq = atoll(v);
			else if (kl == 4 && !strncmp(k, "step", 4))
				step = atoll(v);
			else if (kl == 7 && !strncmp(k, "in_coll", 7))
				in_coll = atoll(v);
			else if (kl == 8 && !strncmp(k, "phase_ms", 8))
				phase_ms = atoll(v);
			else if (kl == 7 && !strncmp(k, "wait_ms", 7))
				wait_ms = atoll(v);
		}
		while (p < end && *p == ' ')
			p++;
	}
	if (phase.len)
		json_object_set_new(o, "phase", json_string(phase.buf));
	json_object_set_new(o, "seq", json_integer(seq));
	json_object_set_new(o, "step", json_integer(step));
	json_object_set_new(o, "in_collective", json_boolean(in_coll));
	json_object_set_new(o, "phase_ms", json_integer(phase_ms));
	json_object_set_new(o, "wait_ms", json_integer(wait_ms));
	strbuf_release(&phase);
}

/*
 * faulthandler's format, per thread:
 *     Thread 0x00007f... (most recent call first):        ("Current thread ..." for one)
 *       File "/path/x.py", line 12 in func
 *     <blank>
 * The main thread is the one whose outermost frame is "<module>".
 */
static int is_thread_head(const char *s, size_t n)
{
	return (n > 7 && !strncmp(s, "Thread ", 7)) || (n > 15 && !strncmp(s, "Current thread ", 15));
}

int debug_parse_pystack(const char *text, size_t len, json_t *frames, int max)
{
	const char *end = text + len, *p, *best = NULL, *first = NULL;
	int nr = 0;

	/* one dump: the first thread header */
	for (const char *q = text; q < end && !first;) {
		const char *nl = memchr(q, '\n', (size_t)(end - q));

		if (is_thread_head(q, (size_t)((nl ? nl : end) - q)))
			first = q;
		q = nl ? nl + 1 : end;
	}
	if (!first)
		return 0;
	/* pick the thread with a "<module>" frame, else the first */
	for (p = first; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = (nl ? nl : end) - p;

		if (is_thread_head(p, n)) {
			if (!best)
				best = p;
		} else if (n > 11 && memmem(p, n, " in <module>", 12) && best) {
			/* the thread block containing this line */
			const char *h = p;

			while (h > first) {
				const char *ls = h - 1;

				while (ls > first && ls[-1] != '\n')
					ls--;
				if (is_thread_head(ls, (size_t)(end - ls))) {
					best = ls;
					break;
				}
				h = ls;
			}
			break;
		}
		p = nl ? nl + 1 : end;
	}
	p = best ? memchr(best, '\n', (size_t)(end - best)) : NULL;
	while (p && p < end && nr < max) {
		const char *ls = p + 1, *nl = memchr(ls, '\n', (size_t)(end - ls));
		size_t n = (nl ? nl : end) - ls;
		const char *q1, *q2, *ln, *in;
		struct strbuf f = STRBUF_INIT, file = STRBUF_INIT;

		if (ls >= end || n < 8 || strncmp(ls, "  File \"", 8))
			break;
		q1 = ls + 8;
		q2 = memchr(q1, '"', (size_t)(ls + n - q1));
		ln = q2 ? memmem(q2, (size_t)(ls + n - q2), ", line ", 7) : NULL;
		in = ln ? memmem(ln, (size_t)(ls + n - ln), " in ", 4) : NULL;
		if (!in)
			break;
		{
			/* the file's last two components are enough to tell */
			const char *base = q2, *slash = NULL;
			int seen = 0;

			while (base > q1 && seen < 2) {
				base--;
				if (*base == '/') {
					seen++;
					slash = base;
				}
			}
			if (seen == 2 && slash)
				base = base + 1;
			add_clean(&file, base, (size_t)(q2 - base), FIELD_MAX);
		}
		add_clean(&f, in + 4, (size_t)(ls + n - in - 4), 64);
		strbuf_addf(&f, " (%s:", file.buf);
		add_clean(&f, ln + 7, (size_t)(in - ln - 7), 10);
		strbuf_addch(&f, ')');
		json_array_append_new(frames, json_string(f.buf));
		strbuf_release(&f);
		strbuf_release(&file);
		nr++;
		p = nl;
	}
	return nr;
}

/* Python frames of a collective: torch.distributed's own (distributed_c10d.py). */
static const char *py_collective(json_t *frames)
{
	static char fn[64];
	size_t i;
	json_t *f;

	/* the outermost torch.distributed frame names the call (all_reduce, barrier) */
	fn[0] = '\0';
	json_array_foreach(frames, i, f) {
		const char *s = json_string_value(f), *sp = strchr(s, ' ');

		if (strstr(s, "distributed_c10d.py") && sp && (size_t)(sp - s) < sizeof(fn)) {
			memcpy(fn, s, (size_t)(sp - s));
			fn[sp - s] = '\0';
		}
	}
	return fn[0] ? fn : NULL;
}

static void add_rank(json_t *ranks, const char *node, const char *job_dir, struct rproc *p,
		     long long wall_ms, long hz)
{
	struct strbuf sb = STRBUF_INIT, w = STRBUF_INIT, text = STRBUF_INIT;
	json_t *o = json_object(), *frames = json_array();
	double cpu = wall_ms > 0 ? (double)(p->ticks1 - p->ticks0) * 1000.0 / (double)hz / wall_ms
				   * 100.0 : 0;

	if (!read_proc(p->pid, "wchan", &sb, 256))
		add_clean(&w, sb.buf, sb.len, 64);
	json_object_set_new(o, "rank", json_integer(p->rank));
	json_object_set_new(o, "node", json_string(node));
	json_object_set_new(o, "pid", json_integer(p->pid));
	json_object_set_new(o, "comm", json_string(p->comm));
	json_object_set_new(o, "state", json_stringn(&p->state, 1));
	json_object_set_new(o, "wchan", json_string(w.len && strcmp(w.buf, "0") ? w.buf : ""));
	/* to 0.1 (cpu >= 0; no round(): libm is one object more for ld.so to map
	 * in every dtshim, which runs per task) */
	json_object_set_new(o, "cpu_pct", json_real((double)(long long)(cpu * 10 + 0.5) / 10));
	json_object_set_new(o, "source", json_string(p->src == 1 ? "dttrain" : p->src == 2 ?
						     "python" : "none"));
	json_object_set_new(o, "seq", json_integer(-1));
	json_object_set_new(o, "step", json_integer(-1));
	json_object_set_new(o, "in_collective", json_false());
	json_object_set_new(o, "progressed", json_false());
	json_object_set_new(o, "wait_ms", json_integer(-1));
	json_object_set_new(o, "phase_ms", json_integer(-1));
	if (p->src == 1) {
		json_t *first = json_object();

		read_since(job_dir, p, p->off0, &text);
		/* the first record (after off0, before off1) and the last */
		if (p->off1 > p->off0) {
			struct strbuf a = STRBUF_INIT;

			strbuf_add(&a, text.buf, (size_t)(p->off1 - p->off0) < text.len ?
				   (size_t)(p->off1 - p->off0) : text.len);
			parse_record(&a, first);
			strbuf_release(&a);
		}
		parse_record(&text, o);
		if (json_object_get(first, "seq") &&
		    (json_get_int(first, "seq", -1) != json_get_int(o, "seq", -1) ||
		     json_get_int(first, "step", -1) != json_get_int(o, "step", -1)))
			json_object_set_new(o, "progressed", json_true());
		json_decref(first);
	} else if (p->src == 2) {
		const char *coll;

		read_since(job_dir, p, p->off0, &text);
		debug_parse_pystack(text.buf, text.len, frames, FRAMES_MAX);
		coll = py_collective(frames);
		strbuf_reset(&sb);
		if (coll) {
			strbuf_addf(&sb, "%s", coll);
			json_object_set_new(o, "in_collective", json_true());
		} else if (json_array_size(frames)) {
			const char *f0 = json_string_value(json_array_get(frames, 0));

			strbuf_addf(&sb, "python %s", f0);
		}
		if (sb.len)
			json_object_set_new(o, "phase", json_string(sb.buf));
	}
	if (p->native) {
		json_array_extend(frames, p->native);
		strbuf_reset(&sb);
		strbuf_addf(&sb, "native %s", json_string_value(json_array_get(frames, 0)));
		json_object_set_new(o, "source", json_string("native"));
		json_object_set_new(o, "phase", json_string(sb.buf));
	}
	if (p->native_err[0])
		json_object_set_new(o, "native_error", json_string(p->native_err));
	if (!json_object_get(o, "phase"))
		json_object_set_new(o, "phase", json_string(""));
	json_object_set_new(o, "frames", frames);
	json_array_append_new(ranks, o);
	strbuf_release(&sb);
	strbuf_release(&w);
	strbuf_release(&text);
}

/* ---------------------------------------------------------------- native */

#define GDB_TIMEOUT_MS 8000
#define GDB_FRAMES 12

/*
 * gdb's backtrace lines into frames, innermost first:
 *     #0  0x00007f... in clock_nanosleep () from /lib/x86_64-linux-gnu/libc.so.6
 *     #1  main (argc=1, argv=...) at x.c:12
 * as "clock_nanosleep (libc.so.6)" and "main (x.c:12)".
 */
int debug_parse_gdb(const char *text, size_t len, json_t *frames, int max)
{
	const char *end = text + len, *p = text;
	int nr = 0;

	while (p < end && nr < max) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
		const char *f = p, *fe, *at, *from;
		struct strbuf sb = STRBUF_INIT;

		p = nl ? nl + 1 : end;
		if (*f != '#' || le - f < 4)
			continue;
		while (f < le && *f != ' ')
			f++;
		while (f < le && *f == ' ')
			f++;
		if (le - f > 4 && !strncmp(f, "0x", 2)) {
			const char *in = memmem(f, (size_t)(le - f), " in ", 4);

			if (!in)
				continue;
			f = in + 4;
		}
		for (fe = f; fe < le && *fe != ' ' && *fe != '('; fe++)
			;
		if (fe == f)
			continue;
		add_clean(&sb, f, (size_t)(fe - f), 64);
		at = memmem(fe, (size_t)(le - fe), " at ", 4);
		from = memmem(fe, (size_t)(le - fe), " from ", 6);
		if (at || from) {
			const char *w = at ? at + 4 : from + 6, *slash = w;

			for (const char *q = w; q < le; q++)
				if (*q == '/')
					slash = q + 1;
			strbuf_addstr(&sb, " (");
			add_clean(&sb, slash, (size_t)(le - slash), FIELD_MAX);
			strbuf_addch(&sb, ')');
		}
		json_array_append_new(frames, json_string(sb.buf));
		strbuf_release(&sb);
		nr++;
	}
	return nr;
}

struct gdb_run {
	struct rproc *v;
	size_t n, next, started;
};

static int gdb_next(struct child_process *cp, void *data, void **task)
{
	struct gdb_run *g = data;

	while (g->next < g->n && (g->v[g->next].rank < 0 || g->v[g->next].src ||
				  g->v[g->next].state == 'X'))
		g->next++;
	if (g->next >= g->n)
		return 0;
	if (!alive(&g->v[g->next])) {
		snprintf(g->v[g->next].native_err, sizeof(g->v[g->next].native_err),
			 "the process ended while sampled");
		g->next++;
		return gdb_next(cp, data, task);
	}
	if (g->started >= DEBUG_MAX_NATIVE) {
		/* bounded: a job that forks a hundred "ranks" gets no hundred gdbs */
		for (; g->next < g->n; g->next++)
			snprintf(g->v[g->next].native_err, sizeof(g->v[g->next].native_err),
				 "not sampled: more than %d ranks without a record on this node",
				 DEBUG_MAX_NATIVE);
		return 0;
	}
	g->started++;
	/* gdb stops the process for the moment of the backtrace, then detaches */
	strvec_pushv(&cp->args, (const char *[]){ "gdb", "-batch", "-nx", "-q", "-p", NULL });
	strvec_pushf(&cp->args, "%d", (int)g->v[g->next].pid);
	strvec_pushv(&cp->args, (const char *[]){ "-ex", "bt " "12", NULL });
	cp->no_stdin = 1;
	cp->new_session = 1;
	*task = &g->v[g->next++];
	return 1;
}

static void gdb_done(int code, struct strbuf *output, void *data, void *task)
{
	struct rproc *p = task;
	json_t *frames = json_array();

	(void)data;
	if (!alive(p)) {
		/* gdb may have attached to whatever got the number since */
		snprintf(p->native_err, sizeof(p->native_err), "the process ended while sampled");
		json_decref(frames);
		return;
	}
	if (!debug_parse_gdb(output->buf, output->len, frames, GDB_FRAMES)) {
		/* gdb missing (-1), timed out (124), or refused: its last line says why */
		struct strbuf why = STRBUF_INIT;
		const char *e = output->buf + output->len, *b;

		while (e > output->buf && e[-1] == '\n')
			e--;
		for (b = e; b > output->buf && b[-1] != '\n'; b--)
			;
		strbuf_addf(&why, "gdb: exit %d: ", code);
		add_clean(&why, b, (size_t)(e - b), 120);
		snprintf(p->native_err, sizeof(p->native_err), "%s", why.buf);
		strbuf_release(&why);
		json_decref(frames);
		return;
	}
	p->native = frames;
}

/* Native stacks of the ranks that say nothing themselves (no record file). */
static void native_stacks(struct rproc *v, size_t n)
{
	struct gdb_run g = { v, n, 0, 0 };
	struct parallel_opts o = { DEBUG_MAX_NATIVE, GDB_TIMEOUT_MS, gdb_next, gdb_done, &g };

	run_processes_parallel(&o);
}

json_t *debug_collect(const char *node, const pid_t *pids, size_t nr, const char *job_dir,
		      long sample_ms)
{
	struct proc_id *procs = xcalloc(nr ? nr : 1, sizeof(*procs));
	json_t *reply;

	for (size_t i = 0; i < nr; i++) {
		procs[i].pid = pids[i];
		procs[i].start = proc_start_time(pids[i], NULL);   /* now: no scan to pin by */
	}
	reply = debug_collect_procs(node, procs, nr, job_dir, sample_ms);
	free(procs);
	return reply;
}

json_t *debug_collect_procs(const char *node, const struct proc_id *procs, size_t nr,
			    const char *job_dir, long sample_ms)
{
	struct rproc *v = xcalloc(nr ? (nr < DEBUG_MAX_PROCS ? nr : DEBUG_MAX_PROCS) : 1, sizeof(*v));
	size_t n = 0, skipped = 0;
	json_t *ranks = json_array();
	long long t0, t1, deadline;
	long hz = sysconf(_SC_CLK_TCK);

	if (sample_ms <= 0)
		sample_ms = DEBUG_SAMPLE_MS_DEFAULT;
	if (sample_ms > DEBUG_SAMPLE_MS_MAX)
		sample_ms = DEBUG_SAMPLE_MS_MAX;
	for (size_t i = 0; i < nr; i++) {
		struct rproc p;
		unsigned long long start;
		int dup = 0;

		memset(&p, 0, sizeof(p));
		p.pid = procs[i].pid;
		start = procs[i].start;   /* the process the tree listed, read as it was listed */
		for (size_t k = 0; k < n; k++)
			dup |= v[k].pid == p.pid;
		if (dup || read_stat(p.pid, &p.state, &p.ppid, &p.ticks0, p.comm, sizeof(p.comm)) < 0 ||
		    p.state == 'Z' || (p.rank = env_rank(p.pid)) < 0)
			continue;
		if (n >= DEBUG_MAX_PROCS) {
			skipped++;
			continue;
		}
		if ((p.pidfd = pin_process(p.pid, start)) == -2)
			continue;
		v[n++] = p;
	}
	/*
	 * One process per rank: the one that armed its record file, else the
	 * innermost (dtshim rank-log wraps dttrain; a Python rank's forked
	 * workers inherit its rank variable but leave its file alone).
	 */
	for (size_t i = 0; i < n; i++)
		if (job_dir && *job_dir)
			v[i].src = armed_source(job_dir, &v[i], &v[i].off0);
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < n; k++) {
			if (k == i || v[k].rank != v[i].rank || v[i].rank < 0)
				continue;
			if (!!v[k].src > !!v[i].src || (!!v[k].src == !!v[i].src && v[k].ppid == v[i].pid))
				v[i].rank = -1 - v[i].rank;
		}
	t0 = mono_ms();
	for (size_t i = 0; i < n; i++) {
		if (v[i].rank < 0)
			continue;
		read_stat(v[i].pid, &v[i].state, &v[i].ppid, &v[i].ticks0, NULL, 0);
		if (v[i].src && catches(v[i].pid, SIGUSR2) && alive(&v[i]))
			signal_rank(&v[i], SIGUSR2);
		else
			v[i].src = 0;
	}
	usleep((useconds_t)sample_ms * 1000);
	for (size_t i = 0; i < n; i++) {
		if (v[i].rank < 0)
			continue;
		if (!alive(&v[i]) ||
		    read_stat(v[i].pid, &v[i].state, &v[i].ppid, &v[i].ticks1, NULL, 0) < 0) {
			v[i].ticks1 = v[i].ticks0;
			v[i].state = 'X';
			v[i].src = 0;
			continue;
		}
		if (v[i].src == 1) {
			/* dttrain again: did it move? (one Python dump is enough) */
			v[i].off1 = file_size(job_dir, &v[i]);
			signal_rank(&v[i], SIGUSR2);
		}
	}
	t1 = mono_ms();
	/* wait (briefly) for the second records to land */
	deadline = t1 + 500;
	for (size_t i = 0; i < n; i++)
		while (v[i].rank >= 0 && v[i].src == 1 && file_size(job_dir, &v[i]) <= v[i].off1 &&
		       mono_ms() < deadline)
			usleep(10000);
	native_stacks(v, n);
	for (size_t i = 0; i < n; i++) {
		if (v[i].rank >= 0)
			add_rank(ranks, node, job_dir, &v[i], t1 - t0, hz > 0 ? hz : 100);
		json_decref(v[i].native);
		if (v[i].pidfd >= 0)
			close(v[i].pidfd);
	}
	free(v);
	return json_pack("{s:s,s:o,s:I}", "node", node, "ranks", ranks,
			 "skipped", (json_int_t)skipped);
}

void debug_add_gpus(json_t *reply, const json_t *inv)
{
	size_t i, g, k;
	json_t *r, *gpu, *proc;

	json_array_foreach(json_object_get(reply, "ranks"), i, r) {
		json_t *mine = json_array();
		long long pid = json_get_int(r, "pid", -1);

		json_array_foreach(json_object_get(inv, "gpus"), g, gpu)
			json_array_foreach(json_object_get(gpu, "processes"), k, proc)
				if (json_get_int(proc, "pid", -2) == pid)
					json_array_append_new(mine, json_pack("{s:I,s:I,s:I}",
						"index", json_get_int(gpu, "index", -1),
						"utilization", json_get_int(gpu, "utilization", 0),
						"used_memory", json_get_int(proc, "used_memory", 0)));
		json_object_set_new(r, "gpus", mine);
	}
}

/* ---------------------------------------------------------------- Python */

static const char sitecustomize[] =
"# Written by dtagent (agent/debug.c) for `dtctl debug`: in a rank of a dtctl\n"
"# job (DT_JOB_DIR and a rank in the environment) faulthandler dumps every\n"
"# thread's stack to <job_dir>/debug/<rank>.py-stack on SIGUSR2.  Then the\n"
"# sitecustomize this one hides, if there is one, runs as before.\n"
"import os, sys\n"
"\n"
"def _dtctl_arm():\n"
"    d = os.environ.get('DT_JOB_DIR')\n"
"    r = None\n"
"    for k in ('OMPI_COMM_WORLD_RANK', 'RANK', 'PMI_RANK', 'PMIX_RANK'):\n"
"        if os.environ.get(k, '').isdigit():\n"
"            r = os.environ[k]\n"
"            break\n"
"    if not d or r is None:\n"
"        return None\n"
"    try:\n"
"        import faulthandler, signal\n"
"        path = os.path.join(d, 'debug', r + '.py-stack')\n"
"        try:\n"
"            # a child Python of the rank (a spawned worker) leaves the rank's file alone\n"
"            with open(path, 'rb') as f:\n"
"                head = f.read(64).split(b'\\n')[0]\n"
"            pid = int(head.split(b'pid=')[1].split()[0])\n"
"            if pid != os.getpid():\n"
"                os.kill(pid, 0)\n"
"                return None\n"
"        except (OSError, IndexError, ValueError):\n"
"            pass\n"
"        os.makedirs(os.path.join(d, 'debug'), exist_ok=True)\n"
"        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND |\n"
"                     os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)\n"
"        f = os.fdopen(fd, 'w')\n"
"        f.write('dtctl-faulthandler pid=%d rank=%s\\n' % (os.getpid(), r))\n"
"        f.flush()\n"
"        faulthandler.register(signal.SIGUSR2, file=f, all_threads=True, chain=False)\n"
"        return f\n"
"    except Exception:\n"
"        return None\n"
"\n"
"_dtctl_file = _dtctl_arm()\n"
"\n"
"def _dtctl_chain():\n"
"    import importlib.machinery, importlib.util\n"
"    here = os.path.dirname(os.path.abspath(__file__))\n"
"    path = [p for p in sys.path if os.path.abspath(p or '.') != here]\n"
"    spec = importlib.machinery.PathFinder.find_spec('sitecustomize', path)\n"
"    if spec and spec.loader:\n"
"        m = importlib.util.module_from_spec(spec)\n"
"        spec.loader.exec_module(m)\n"
"\n"
"try:\n"
"    _dtctl_chain()\n"
"except Exception as e:\n"
"    sys.stderr.write('sitecustomize: %s\\n' % e)\n";

int debug_install_python(const char *home)
{
	struct strbuf path = STRBUF_INIT;
	int ret;

	strbuf_addf(&path, "%s/python", home);
	if (mkdir(path.buf, 0755) < 0 && errno != EEXIST) {
		strbuf_release(&path);
		return -1;
	}
	strbuf_addstr(&path, "/sitecustomize.py");
	ret = write_file_atomic(path.buf, sitecustomize, sizeof(sitecustomize) - 1, 0644);
	strbuf_release(&path);
	return ret;
}

void debug_task_env(const char *home, struct strvec *env)
{
	const char *old = NULL;
	int job = 0;
	struct strbuf path = STRBUF_INIT;

	for (size_t i = 0; i < env->nr; i++) {
		if (starts_with(env->v[i], "DT_JOB_DIR="))
			job = 1;
		if (starts_with(env->v[i], "PYTHONPATH="))
			old = env->v[i] + 11;
	}
	if (!job || !home)
		return;
	strbuf_addf(&path, "%s/python", home);
	if (old && *old)
		strbuf_addf(&path, ":%s", old);
	strvec_setenv(env, "PYTHONPATH", path.buf);
	strvec_setenv(env, "PYTHONFAULTHANDLER", "1");
	strbuf_release(&path);
}
