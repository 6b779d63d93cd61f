/*
 * cmd-logs.c - `dtctl logs JOB`: every rank's log, merged in time order.
 *
 * Reads <job>/logs/<rank>.log from the shared dir as one streaming merge
 * (lib/logmerge.h) and prints "[node rank] text", coloured per rank on a TTY,
 * filtered on the way.  With -f it follows (inotify on a local dir, adaptive
 * polling on NFS, where inotify cannot see other clients' writes) until
 * <job>/state holds a final state, picking up rank files that appear late.
 * --dedup folds a line that several ranks print alike within a couple of
 * seconds into one "[ranks 0-7]".
 * The rank -> node map comes from <job>/placement.json when it exists.
 */
#include "builtin.h"
#include "dthome.h"
#include "head.h"
#include "hostrange.h"
#include "jobdir.h"
#include "protocol.h"
#include "json.h"
#include "setup.h"
#include "log.h"
#include "logmerge.h"
#include "parse-options.h"
#include "term.h"
#include "units.h"

#include <dirent.h>
#include <errno.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEDUP_WINDOW_US 2000000LL
#define MAX_PENDING 256

struct group {
	struct logline line;   /* the first rank's line; its text is `text` */
	char *text;
	int *ranks;
	size_t nr, alloc;
	int same_node;
};

struct logs_opts {
	const char *ranks_spec, *node_spec, *grep, *since;
	int tail, follow, dedup, no_prefix, json, interval_ms;
	int color;
	regex_t re;
	int have_re;
	int *ranks;         /* allowed ranks (sorted), NULL = all */
	size_t nr_ranks;
	struct strvec nodes;
	long long since_us;
};

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	interrupted = 1;
}

static int parse_int_list(const char *spec, int **out, size_t *nr)
{
	size_t alloc = 0;
	const char *p = spec;

	*out = NULL;
	*nr = 0;
	while (*p) {
		char *end;
		long a = strtol(p, &end, 10), b;

		if (end == p || a < 0)
			return error("bad rank list '%s' at '%s'", spec, p);
		b = a;
		if (*end == '-') {
			p = end + 1;
			b = strtol(p, &end, 10);
			if (end == p || b < a)
				return error("bad rank range in '%s'", spec);
		}
		if (b - a > 1000000)
			return error("rank range too large in '%s'", spec);
		for (long r = a; r <= b; r++) {
			ALLOC_GROW(*out, *nr + 1, alloc);
			(*out)[(*nr)++] = (int)r;
		}
		if (*end == ',')
			end++;
		else if (*end)
			return error("bad rank list '%s' at '%s'", spec, end);
		p = end;
	}
	return 0;
}

static int rank_wanted(const struct logs_opts *o, int rank)
{
	if (!o->ranks)
		return 1;
	for (size_t i = 0; i < o->nr_ranks; i++)
		if (o->ranks[i] == rank)
			return 1;
	return 0;
}

static int node_wanted(const struct logs_opts *o, const char *node)
{
	return !o->nodes.nr || strvec_find(&o->nodes, node) >= 0;
}

static void load_placement(const char *jobdir, struct strvec *nodes_by_rank)
{
	struct strbuf path = STRBUF_INIT, buf = STRBUF_INIT;
	json_t *j, *ranks, *r;
	size_t i;

	strbuf_addf(&path, "%s/placement.json", jobdir);
	if (strbuf_read_file(&buf, path.buf, 16 << 20) < 0)
		goto out;
	j = json_parse(buf.buf, buf.len, NULL);
	ranks = json_object_get(j, "ranks");
	json_array_foreach(ranks, i, r) {
		long long rank = json_get_int(r, "rank", -1);
		const char *node = json_get_str(r, "node", "?");

		if (rank < 0 || rank > 1000000)
			continue;
		while (nodes_by_rank->nr <= (size_t)rank)
			strvec_push(nodes_by_rank, "?");
		free((char *)nodes_by_rank->v[rank]);
		nodes_by_rank->v[rank] = xstrdup(node);
	}
	json_decref(j);
out:
	strbuf_release(&path);
	strbuf_release(&buf);
}

/* Add rank files not yet in the set. */
static void scan_ranks(struct logset *ls, const char *jobdir, const struct logs_opts *o,
		       struct strvec *nodes_by_rank)
{
	struct strbuf dirpath = STRBUF_INIT, path = STRBUF_INIT;
	DIR *d;
	struct dirent *de;

	strbuf_addf(&dirpath, "%s/logs", jobdir);
	d = opendir(dirpath.buf);
	if (!d)
		goto out;
	while ((de = readdir(d))) {
		char *end;
		long rank = strtol(de->d_name, &end, 10);
		const char *node;
		int known = 0;

		if (end == de->d_name || strcmp(end, ".log") || rank < 0 || rank > 1000000)
			continue;
		for (size_t i = 0; i < ls->nr_src; i++)
			if (ls->src[i].rank == rank)
				known = 1;
		if (known || !rank_wanted(o, (int)rank))
			continue;
		if ((size_t)rank >= nodes_by_rank->nr)
			load_placement(jobdir, nodes_by_rank);
		node = (size_t)rank < nodes_by_rank->nr ? nodes_by_rank->v[rank] : "?";
		strbuf_reset(&path);
		strbuf_addf(&path, "%s/%s", dirpath.buf, de->d_name);
		logset_add(ls, path.buf, (int)rank, node);
	}
	closedir(d);
out:
	strbuf_release(&dirpath);
	strbuf_release(&path);
}

static const char *rank_color(const struct logs_opts *o, int rank)
{
	static const char *colors[] = { "\033[36m", "\033[33m", "\033[35m", "\033[32m",
					"\033[34m", "\033[91m" };

	return o->color ? colors[rank % 6] : "";
}

/*
 * Output goes to one buffer written out in blocks of OUT_BLOCK (and at the
 * end of each read when following), not through printf per line: at millions
 * of lines the formatting and the calls are what costs.
 */
#define OUT_BLOCK (64 * 1024)

static struct strbuf out = STRBUF_INIT;

static void out_flush(void)
{
	if (out.len && fwrite(out.buf, 1, out.len, stdout) != out.len) {
		if (stdout_reader_gone())
			exit(0);   /* | head has what it wanted: quietly, as tail does */
		die_errno("cannot write the logs to stdout");
	}
	strbuf_reset(&out);
}

/* "[node rank] " coloured, made once per source: the head of each of its lines */
struct head {
	char *source;      /* "node rank", the prefix's text */
	const char *node;  /* what it was made for (interned by the logset: logmerge.h) */
	int attempt;
	struct strbuf line;
};

static struct head *heads;
static size_t nr_heads, alloc_heads;

static void head_make(const struct logs_opts *o, struct strbuf *sb, const char *source,
		      int color_rank)
{
	/* the prefix holds node names from placement.json: sanitised too */
	strbuf_addf(sb, "%s[%s]%s ", rank_color(o, color_rank), term_str(source),
		    o->color ? "\033[0m" : "");
}

static const struct head *source_head(const struct logs_opts *o, const struct logline *l)
{
	struct head *h;

	while (nr_heads <= l->src) {
		ALLOC_GROW(heads, nr_heads + 1, alloc_heads);
		memset(&heads[nr_heads++], 0, sizeof(*heads));
	}
	h = &heads[l->src];
	/* again when a retry's marker moved the source to another node or attempt */
	if (!h->source || h->node != l->node || h->attempt != l->attempt) {
		struct strbuf sb = STRBUF_INIT;

		free(h->source);
		strbuf_release(&h->line);
		logline_source(&sb, l->node, l->rank, l->attempt);
		h->source = strbuf_detach(&sb, NULL);
		h->node = l->node;
		h->attempt = l->attempt;
		strbuf_init(&h->line, 0);
		head_make(o, &h->line, h->source, l->rank);
	}
	return h;
}

static void heads_release(void)
{
	for (size_t i = 0; i < nr_heads; i++) {
		free(heads[i].source);
		strbuf_release(&heads[i].line);
	}
	free(heads);
	heads = NULL;
	nr_heads = alloc_heads = 0;
}

/*
 * One line of output; `head` is "[source] " made by head_make().  With --json
 * one object per line (docs/json.md): node (NULL: ranks on several nodes),
 * rank (the first) and ranks (all the line stands for: several with --dedup).
 */
static void print_line(const struct logs_opts *o, const char *node, int attempt,
		       const int *ranks, size_t nr, const struct strbuf *head, char stream,
		       long long ts, const char *text, size_t len)
{
	/* the text is log_sanitize()d */
	if (o->json) {
		char tsbuf[DT_TIMESTAMP_LEN];
		json_t *j, *rs = json_array();

		for (size_t i = 0; i < nr; i++)
			json_array_append_new(rs, json_integer(ranks[i]));
		dt_timestamp_format(tsbuf, sizeof(tsbuf), ts);
		j = json_pack("{s:i, s:s, s:s?, s:i, s:o, s:o, s:s, s:s}", "schema", 1, "time",
			      tsbuf, "node", node, "rank", ranks[0], "ranks", rs, "attempt",
			      attempt >= 0 ? json_integer(attempt) : json_null(), "stream",
			      stream == 'E' ? "stderr" : "stdout", "text", text);
		json_append(&out, j);
		strbuf_addch(&out, '\n');
		json_decref(j);
	} else if (o->no_prefix) {
		strbuf_add(&out, text, len);
		strbuf_addch(&out, '\n');
	} else if (stream == 'E' && o->color) {
		strbuf_addf(&out, "%s\033[31m%s\n\033[0m", head->buf, text);
	} else {
		/* the common line: one grow, then copied in place */
		strbuf_grow(&out, head->len + len + 1);
		memcpy(out.buf + out.len, head->buf, head->len);
		memcpy(out.buf + out.len + head->len, text, len);
		out.buf[out.len + head->len + len] = '\n';
		strbuf_setlen(&out, out.len + head->len + len + 1);
	}
	if (out.len >= OUT_BLOCK)
		out_flush();
}

static int line_passes(const struct logs_opts *o, const struct logline *l)
{
	/* per line: a retry may have moved the rank to another node (its marker) */
	if (!node_wanted(o, l->node))
		return 0;
	if (o->since_us && l->ts < o->since_us)
		return 0;
	if (o->have_re && regexec(&o->re, l->text, 0, NULL, 0) != 0)
		return 0;
	return 1;
}

static void print_single(const struct logs_opts *o, const struct logline *l)
{
	const struct head *h = source_head(o, l);

	print_line(o, l->node, l->attempt, &l->rank, 1, &h->line, l->stream, l->ts, l->text,
		   l->len);
}

static void flush_group(const struct logs_opts *o, struct group *g)
{
	if (g->nr == 1) {
		print_single(o, &g->line);
	} else {
		struct strbuf p = STRBUF_INIT, head = STRBUF_INIT;

		strbuf_addstr(&p, "ranks ");
		int_ranges_format(&p, g->ranks, g->nr);
		if (g->same_node)
			strbuf_addf(&p, " %s", g->line.node);
		head_make(o, &head, p.buf, g->ranks[0]);
		print_line(o, g->same_node ? g->line.node : NULL, g->line.attempt, g->ranks, g->nr,
			   &head, g->line.stream, g->line.ts, g->text, strlen(g->text));
		strbuf_release(&p);
		strbuf_release(&head);
	}
	free(g->text);
	free(g->ranks);
}

struct dedup {
	struct group g[MAX_PENDING];
	size_t nr;
};

static void dedup_flush_before(const struct logs_opts *o, struct dedup *d, long long before)
{
	size_t keep = 0;

	for (size_t i = 0; i < d->nr; i++) {
		if (d->g[i].line.ts < before)
			flush_group(o, &d->g[i]);
		else
			d->g[keep++] = d->g[i];
	}
	d->nr = keep;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

static void dedup_add(const struct logs_opts *o, struct dedup *d, const struct logline *l)
{
	struct group *g;

	for (size_t i = 0; i < d->nr; i++) {
		int seen = 0;

		g = &d->g[i];
		if (g->line.stream != l->stream || l->ts - g->line.ts > DEDUP_WINDOW_US ||
		    strcmp(g->text, l->text))
			continue;
		for (size_t k = 0; k < g->nr; k++)
			if (g->ranks[k] == l->rank)
				seen = 1;
		if (seen)
			continue;
		ALLOC_GROW(g->ranks, g->nr + 1, g->alloc);
		g->ranks[g->nr++] = l->rank;
		qsort(g->ranks, g->nr, sizeof(int), cmp_int);
		if (strcmp(g->line.node, l->node))
			g->same_node = 0;
		return;
	}
	/* groups are kept in first-timestamp order, so flushing keeps time order */
	dedup_flush_before(o, d, l->ts - DEDUP_WINDOW_US);
	if (d->nr == MAX_PENDING) {
		flush_group(o, &d->g[0]);
		memmove(&d->g[0], &d->g[1], (--d->nr) * sizeof(d->g[0]));
	}
	g = &d->g[d->nr++];
	memset(g, 0, sizeof(*g));
	g->text = xstrdup(l->text);
	g->line = *l;
	g->line.text = g->text;
	g->same_node = 1;
	ALLOC_GROW(g->ranks, 1, g->alloc);
	g->ranks[g->nr++] = l->rank;
}

static void show_line(const struct logs_opts *o, struct dedup *d, const struct logline *l)
{
	if (o->dedup)
		dedup_add(o, d, l);
	else
		print_single(o, l);
}

/*
 * --tail N: the last N lines of the first read that pass the filters, kept in
 * a ring of N copies while the merge streams past (the filters need every
 * line, so reading the files' ends backwards would not save the read).
 */
struct tail_ring {
	struct logline *line;
	struct strbuf *text;
	size_t cap, nr, next, alloc_line, alloc_text;
};

static void tail_push(struct tail_ring *r, const struct logline *l)
{
	size_t i;

	if (!r->cap)
		return;
	if (r->nr < r->cap) {
		/* grown as lines come: --tail 1000000 of a short log stays small */
		ALLOC_GROW(r->line, r->nr + 1, r->alloc_line);
		ALLOC_GROW(r->text, r->nr + 1, r->alloc_text);
		strbuf_init(&r->text[r->nr], 0);
		i = r->nr++;
	} else {
		i = r->next;
		r->next = (r->next + 1) % r->cap;
	}
	strbuf_reset(&r->text[i]);
	strbuf_add(&r->text[i], l->text, l->len);
	r->line[i] = *l;
	r->line[i].text = r->text[i].buf;
}

static void tail_show(const struct logs_opts *o, struct dedup *d, struct tail_ring *r)
{
	for (size_t k = 0; k < r->nr; k++)
		show_line(o, d, &r->line[(r->next + k) % r->nr]);
	for (size_t k = 0; k < r->nr; k++)
		strbuf_release(&r->text[k]);
	free(r->line);
	free(r->text);
	memset(r, 0, sizeof(*r));
}

/*
 * The job as dtsched has it, asked quietly: NULL when there is no dtsched to
 * ask (no cluster, not running) or it does not know the job.
 */
static json_t *job_from_head(const char *id)
{
	struct dt_httpc hc;
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;
	json_t *reply = NULL, *job = NULL;

	/* no secret here: no dtsched to ask (and head_connect() would make one) */
	dt_home_path(&path, "secret");
	if (!the_cluster.file || !the_cluster.head_port || access(path.buf, R_OK) < 0 ||
	    head_connect(&hc)) {
		strbuf_release(&path);
		return NULL;
	}
	strbuf_reset(&path);
	hc.timeout_ms = 5000;
	strbuf_addf(&path, "%s%s", DT_PATH_JOB_PREFIX, id);
	if (dt_httpc_request(&hc, "GET", path.buf, NULL, &reply, &err) == 200)
		job = json_incref(json_object_get(reply, "job"));
	json_decref(reply);
	dt_httpc_release(&hc);
	strbuf_release(&path);
	strbuf_release(&err);
	return job;
}

/*
 * A job that has not started has no directory yet (scheduler/jobs.c,
 * job_id_free(): it comes with the job's first file), and one that has may
 * still be missing from this machine's cached view of an NFS shared dir
 * (negative lookups are cached for a while).  So a job dtsched knows is not
 * "no job": with -f it is waited for (the state asked every second, the dir
 * looked for every interval), without it there is nothing to show yet.
 * 0 when the dir is there, else the exit code after saying why.
 */
static int wait_job_dir(const struct logs_opts *o, const char *id, const char *jobdir)
{
	json_t *job = job_from_head(id);
	long long next_ask = dt_mono_ms() + 1000;
	int said = 0, code = DT_EXIT_USAGE;
	struct stat st;

	if (!job) {
		error("no job '%s' (looked in '%s')", id, jobdir);
		return DT_EXIT_USAGE;
	}
	while (!interrupted) {
		const char *state = json_get_str(job, "state", "?");

		if (stat(jobdir, &st) == 0 && S_ISDIR(st.st_mode)) {
			code = 0;
			break;
		}
		if (job_state_is_final(state) || !o->follow) {
			/* ended before it ran (cancelled while PENDING), or not following */
			fprintf(stderr, "dtctl: job %s is %s%s%s: no output %s\n", term_str(id),
				term_str(state), json_get_str(job, "reason", NULL) ? ": " : "",
				term_str(json_get_str(job, "reason", "")),
				job_state_is_final(state) ? "(it never ran)" : "yet");
			code = !job_state_is_final(state) || !strcmp(state, "COMPLETED") ? 0 : 1;
			break;
		}
		if (!said++)
			fprintf(stderr, "dtctl: job %s is %s%s%s; following its logs from its start\n",
				term_str(id), term_str(state),
				json_get_str(job, "reason", NULL) ? ": " : "",
				term_str(json_get_str(job, "reason", "")));
		usleep((useconds_t)o->interval_ms * 1000);
		if (dt_mono_ms() >= next_ask) {
			json_t *now = job_from_head(id);

			next_ask = dt_mono_ms() + 1000;
			if (now) {
				json_decref(job);
				job = now;
			}
		}
	}
	json_decref(job);
	return interrupted ? DT_EXIT_INTR : code;
}

static int run_logs(struct logs_opts *o, const char *jobdir)
{
	struct logset ls;
	struct strvec nodes_by_rank = STRVEC_INIT;
	struct strbuf state = STRBUF_INIT;
	struct dedup *d = xcalloc(1, sizeof(*d));
	struct tail_ring ring = { 0 };
	int ret = 0, first = 1, done = 0, rounds_done = 0;
	long long next_look = 0, settle_until = 0;

	logset_init(&ls);
	load_placement(jobdir, &nodes_by_rank);
	if (o->follow)
		logset_watch(&ls, jobdir, o->interval_ms);
	ring.cap = o->tail > 0 ? (size_t)o->tail : 0;
	for (;;) {
		const struct logline *l;
		long long now = dt_mono_ms();
		int last;

		/* the state and new ranks: every interval, or when inotify says so */
		if (!o->follow || now >= next_look || ls.state_changed || ls.rescan) {
			if (!done && jobdir_read_state(jobdir, &state) == 0 &&
			    job_state_is_final(state.buf)) {
				done = 1;
				settle_until = now + LOG_SETTLE_MS;
			}
			scan_ranks(&ls, jobdir, o, &nodes_by_rank);
			ls.live = !done;   /* running (or about to): polling keeps up */
			ls.state_changed = ls.rescan = 0;
			next_look = now + o->interval_ms;
		}
		/*
		 * The last round flushes partial lines.  Once the job has ended, a
		 * log whose writer has not put its end marker yet may have lines
		 * this machine cannot see yet (an NFS client's cached size): read on
		 * until every log has it, for LOG_SETTLE_MS at most.
		 */
		if (done)
			last = rounds_done++ && (!logset_unsettled(&ls, NULL) || now >= settle_until);
		else
			last = !o->follow;
		logset_begin(&ls, LOGSET_ALL * (done || last) | LOGSET_FINAL * last);
		while (!interrupted && (l = logset_next(&ls))) {
			if (!line_passes(o, l))
				continue;
			if (first && o->tail >= 0)
				tail_push(&ring, l);   /* --tail counts lines that pass the filters */
			else
				show_line(o, d, l);
		}
		if (logset_end(&ls) < 0)
			ret = 1;
		if (first && o->tail >= 0)
			tail_show(o, d, &ring);
		first = 0;
		if (last || interrupted)
			break;
		/* the reader went away while nothing was written: stop, as tail -f does */
		if (stdout_reader_gone())
			break;
		if (o->dedup)
			dedup_flush_before(o, d, dt_now_us() - DEDUP_WINDOW_US);
		out_flush();
		fflush(stdout);
		now = dt_mono_ms();
		if (done && !logset_unsettled(&ls, NULL))
			continue;   /* all there: the last round at once */
		if (done)   /* settling: the files' ends are due any moment */
			next_look = now + 50;
		logset_wait(&ls, next_look > now ? (int)(next_look - now) : 0);
	}
	{
		size_t i;

		if (done && !interrupted && logset_unsettled(&ls, &i))
			warning("the log of rank %d (node %s) has no end mark from its writer %d s "
				"after the job ended: its last lines may be missing here (read it "
				"again later)", ls.src[i].rank, ls.src[i].node, LOG_SETTLE_MS / 1000);
	}
	dedup_flush_before(o, d, 1LL << 62);
	out_flush();
	fflush(stdout);
	if (o->follow && !interrupted && state.len && strcmp(state.buf, "COMPLETED"))
		fprintf(stderr, "dtctl: job ended %s\n", term_str(state.buf));
	if (o->follow && state.len && strcmp(state.buf, "COMPLETED") &&
	    job_state_is_final(state.buf))
		ret = 1;
	free(d);
	heads_release();
	strbuf_release(&out);
	strbuf_release(&state);
	strvec_clear(&nodes_by_rank);
	logset_release(&ls);
	return interrupted ? DT_EXIT_INTR : ret;
}

int cmd_logs(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl logs [options] <job>",
		"",
		"Print every rank's log of a job, merged in time order, as [node rank] lines.",
		NULL,
	};
	const char *shared = NULL;
	struct logs_opts o;
	struct strbuf jobdir = STRBUF_INIT;
	int ret;
	struct option opts[] = {
		OPT_BOOL('f', "follow", &o.follow, "keep following until the job ends"),
		OPT_STRING('r', "rank", &o.ranks_spec, "list", "only these ranks (0,2-5)"),
		OPT_STRING(0, "node", &o.node_spec, "spec", "only ranks on these nodes (host range)"),
		OPT_STRING(0, "grep", &o.grep, "regex", "only lines matching (POSIX extended)"),
		OPT_STRING(0, "since", &o.since, "when", "only lines newer than 10m, or a timestamp"),
		OPT_INT(0, "tail", &o.tail, "only the last n lines (then follow)"),
		OPT_BOOL(0, "dedup", &o.dedup, "fold lines printed alike by several ranks"),
		OPT_BOOL(0, "no-prefix", &o.no_prefix, "print the text only"),
		OPT_BOOL(0, "json", &o.json, "one JSON object per line"),
		OPT_INT(0, "interval", &o.interval_ms, "poll interval in ms when following (max 500)"),
		OPT_STRING(0, "shared-dir", &shared, "dir", "the shared dir, instead of the cluster's"),
		OPT_END(),
	};

	memset(&o, 0, sizeof(o));
	o.tail = -1;
	o.interval_ms = 200;
	strvec_init(&o.nodes);
	argc = parse_options(argc - 1, ++argv, opts, usage, 0);
	if (argc != 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (o.interval_ms < 10 || o.interval_ms > 500)
		return error("--interval must be between 10 and 500 ms"), DT_EXIT_USAGE;
	if (o.ranks_spec && parse_int_list(o.ranks_spec, &o.ranks, &o.nr_ranks) < 0)
		return DT_EXIT_USAGE;
	if (o.node_spec) {
		struct strbuf err = STRBUF_INIT;

		if (hostrange_expand(o.node_spec, &o.nodes, &err) < 0) {
			error("--node: %s", err.buf);
			strbuf_release(&err);
			free(o.ranks);
			return DT_EXIT_USAGE;
		}
		strbuf_release(&err);
	}
	if (o.grep) {
		int rc = regcomp(&o.re, o.grep, REG_EXTENDED | REG_NOSUB);

		if (rc) {
			char msg[256];

			regerror(rc, &o.re, msg, sizeof(msg));
			free(o.ranks);
			strvec_clear(&o.nodes);
			return error("--grep '%s': %s", o.grep, msg), DT_EXIT_USAGE;
		}
		o.have_re = 1;
	}
	if (o.since) {
		long long ms;

		o.since_us = dt_timestamp_parse(o.since);
		if (o.since_us < 0) {
			if (parse_duration_ms(o.since, &ms) < 0) {
				error("--since '%s': expected a duration like 10m or a "
				      "timestamp like 2026-11-22T10:00:00Z", o.since);
				ret = DT_EXIT_USAGE;
				goto out;
			}
			o.since_us = dt_now_us() - ms * 1000;
		}
	}
	o.color = !o.json && !o.no_prefix && dt_want_color(1);
	if (shared)
		the_cluster.shared_dir = shared;
	if (o.follow) {
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_sigint;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	if (strchr(argv[0], '/')) {
		ret = jobdir_resolve(&jobdir, argv[0]);
	} else if (!(ret = cluster_setup(NEED_SHARED))) {
		struct stat st;

		strbuf_addf(&jobdir, "%s/jobs/%s", the_cluster.shared_dir, argv[0]);
		if (stat(jobdir.buf, &st) < 0 || !S_ISDIR(st.st_mode))
			ret = wait_job_dir(&o, argv[0], jobdir.buf);
	}
	/* a job with nothing to show yet (wait_job_dir() said so) ends here */
	if (ret || access(jobdir.buf, F_OK) < 0)
		goto out;
	/* another user's job in team mode (0700 dirs, docs/team.md): say so, not nothing */
	if (access(jobdir.buf, R_OK | X_OK) < 0) {
		ret = errno == EACCES ? DT_EXIT_FAIL : DT_EXIT_USAGE;
		error("cannot read the logs in '%s': %s%s", jobdir.buf, strerror(errno),
		      errno == EACCES ? " (another user's job? 'dtctl ps --all' names its "
		      "owner; job.yaml's share: group opens it to the owner's group)" : "");
		goto out;
	}
	ret = run_logs(&o, jobdir.buf);
out:
	if (o.have_re)
		regfree(&o.re);
	free(o.ranks);
	strvec_clear(&o.nodes);
	strbuf_release(&jobdir);
	return ret;
}
