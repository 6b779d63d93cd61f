/*
 * jobs.c - dtsched's job queue: submit, place, launch, follow, end, retry.
 *
 * A job is PENDING until placement.c finds slots for it (FIFO, with
 * backfill: a later job that fits now starts while an earlier one waits),
 * then RUNNING on a *hold*: the slots of one attempt, reserved the moment
 * the placement is made, and kept until every task of that attempt is
 * final (or its node is DOWN), so no two jobs ever share a GPU even while
 * one is being torn down.  The main loop (jobs_step, on dtsched's main
 * thread, woken at once by sched_wake) does everything that talks to
 * agents, outside the lock:
 *
 *   lock:   end attempts (a rank failed -> FAILED, all exited 0 ->
 *           COMPLETED, a node DOWN -> NODE_FAIL, timeout -> TIMEOUT, cancel
 *           -> CANCELLED; FAILED/NODE_FAIL with retries left -> PENDING again,
 *           avoiding the failed node, resuming from the latest checkpoint);
 *           place pending jobs; decide which tasks to stop
 *   unlock: launch (free port on the master node, POST /v1/tasks per rank or
 *           one mpirun task), stop (DELETE /v1/tasks/<id>)
 *
 * Every state change is written to SQLite (jobs table) and to the job dir
 * (<job_dir>/state, placement.json) before anything is done about it.
 * Tasks the agents report for a job attempt that is over (a node that was
 * DOWN comes back with its ranks still running) are stopped too.
 */
#include "sched-int.h"
#include "safefile.h"
#include "promtext.h"
#include "jobspec.h"
#include "launch.h"
#include "placement.h"
#include "dthome.h"
#include "httpc.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "units.h"
#include "usage.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STOP_GRACE_MS 3000        /* fail fast: SIGTERM, SIGKILL 3 s later */
#define STOP_RESEND_MS 3000
#define ORPHAN_SCAN_MS 1000
#define STALL_SCAN_MS 1000
#define LAUNCH_GONE_MS 5000       /* a launched task never reported: gone after this */
/* an ended attempt's orteds exit by themselves once mpirun is gone: their exit
 * reports come with the next heartbeat, so they are not orphans before this */
#define ORTED_GRACE_MS 5000

struct jslot {
	char *node;
	char *address;
	int nslots;
	int slot[64];
};

struct htask {
	char *node;
	char *id;
	int rank;                 /* -1: the mpirun task */
	int gone;                 /* its agent said it is final or unknown */
};

struct hold {
	char job[16];
	int gpu;
	int nr;
	struct jslot *place;
	struct htask *tasks;
	size_t nr_tasks, alloc_tasks;
	int released;             /* the attempt is over: stop what is left */
	int busy;                 /* a launch thread uses it: keep it (check_holds) */
	long long released_ms, stop_sent_ms, launched_ms;
};

struct job {
	long long seq;
	char id[16];
	char *name, *user, *job_dir, *shared_dir;
	char *submit_dir;         /* where dtctl ran (the ranks start there if it exists) */
	json_t *spec;
	struct job_config cfg;
	const char *state;
	char *reason;
	int gpu, per_node, world;
	int attempt;
	struct hold *hold;
	json_t *history, *avoid, *stalled, *last_ranks, *placement;
	int master_port;
	long long submitted_us, started_us, ended_us, run_mono;
	int has_exit, exit_code, failed_rank;
	char *failed_node;
	int cancel;
	int launch;               /* placed: 1 = to launch, 2 = a launch thread is at it */
	long long version;        /* bumped by every job_save(): long-poll waiters compare it */
	char *launch_error;
	long long stall_checked_ms;
	long long log_lost_lines;  /* output lines of its ranks that could not be logged */
	char *log_error;          /* the first such write error, e.g. "No space left on device" */
	unsigned long long wait_fp;  /* pool_fingerprint() it last waited on; 0 = try it */
	int orted_attempt;        /* the attempt that ended last ... */
	long long orted_grace_ms; /* ... and until when (mono) its orteds may end by themselves */
};

struct jobs_clients {
	struct cli { char key[300]; struct dt_httpc c; } **v;
	size_t nr, alloc;
	int launches;             /* s->clients only: launch threads running (lock) */
};

#define LAUNCH_RUNNING 2      /* job->launch while its launch thread runs */

static void clients_release(struct jobs_clients *c)
{
	for (size_t i = 0; i < c->nr; i++) {
		dt_httpc_release(&c->v[i]->c);
		free(c->v[i]);
	}
	free(c->v);
	c->v = NULL;
	c->nr = c->alloc = 0;
}

static int state_final(const char *st)
{
	return strcmp(st, DT_JOB_PENDING) && strcmp(st, DT_JOB_RUNNING);
}

static int task_final(const json_t *t)
{
	const char *s = json_get_str(t, "state", "");

	return !strcmp(s, DT_TASK_EXITED) || !strcmp(s, DT_TASK_FAILED) || !strcmp(s, DT_TASK_LOST);
}

static struct job *job_find(struct sched *s, const char *id)
{
	for (size_t i = 0; i < s->nr_jobs; i++)
		if (!strcmp(s->jobs[i]->id, id))
			return s->jobs[i];
	return NULL;
}

/* --------------------------------------------------------------- files */

/*
 * Job dir files go through lib/safefile.h: every rank can write in its job
 * dir, and dtsched (maybe root) must never follow a link it planted, block
 * on its FIFO, or chown anything but what it just made.  As root on a shared
 * dir owned by someone else (NFS root_squash, the fake cluster), what
 * dtsched makes is handed to that owner (SF_OWNER: fchown on the fd) so
 * agents running as the cluster user can write their logs there.
 */

/* "jobs/<id>/<name>" below the shared dir ("jobs/<id>" for name NULL). */
static void job_rel(const struct job *j, const char *name, struct strbuf *rel)
{
	strbuf_reset(rel);
	strbuf_addf(rel, "jobs/%s%s%s", j->id, name ? "/" : "", name ? name : "");
}

static void job_file(const struct job *j, const char *name, const char *data, size_t len)
{
	struct strbuf rel = STRBUF_INIT, why = STRBUF_INIT;

	job_rel(j, name, &rel);
	if (sf_write(j->shared_dir, rel.buf, data, len, 0644, SF_OWNER, &why) < 0)
		dtlog(DTLOG_WARN, "job %s: cannot write the job file: %s", j->id, why.buf);
	strbuf_release(&rel);
	strbuf_release(&why);
}

/* Modification time (ns) of the regular file <job dir>/<name>, 0 if none. */
static long long job_mtime_ns(const struct job *j, const char *name)
{
	struct strbuf rel = STRBUF_INIT;
	struct stat st;
	long long ns = 0;

	job_rel(j, name, &rel);
	if (sf_stat(j->shared_dir, rel.buf, &st, NULL) == 0)
		ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
	strbuf_release(&rel);
	return ns;
}

/* The highest N of the jobs/j-N dirs on the shared dir (0 if none). */
static long long highest_job_dir(const char *shared)
{
	DIR *d = sf_opendir(shared, "jobs", NULL);
	struct dirent *de;
	long long max = 0;

	while (d && (de = readdir(d))) {
		char *end;
		long long v;

		if (strncmp(de->d_name, "j-", 2))
			continue;
		v = strtoll(de->d_name + 2, &end, 10);
		if (!*end && v > max)
			max = v;
	}
	if (d)
		closedir(d);
	return max;
}

/*
 * Make the job dir: jobs/<id> must be new (an id whose dir exists belongs to
 * a job of an earlier head: errno EEXIST), then its subdirs.
 */
static int job_mkdirs(const struct job *j, struct strbuf *err)
{
	static const char *const sub[] = { "logs", "ckpt", "ranks" };
	struct strbuf why = STRBUF_INIT;
	int dfd = sf_dir(j->shared_dir, "jobs", SF_MKDIRS | SF_OWNER, &why), fd = -1, e;

	if (dfd >= 0) {
		fd = sf_mkdir_new_at(dfd, j->id, 0775, SF_OWNER, &why);
		close(dfd);
	}
	for (size_t i = 0; fd >= 0 && i < ARRAY_SIZE(sub); i++) {
		int sfd = sf_mkdir_new_at(fd, sub[i], 0775, SF_OWNER, &why);

		if (sfd < 0) {
			e = errno;
			close(fd);
			fd = -1;
			errno = e;
		} else {
			close(sfd);
		}
	}
	if (fd >= 0) {
		close(fd);
		strbuf_release(&why);
		return 0;
	}
	e = errno;
	strbuf_addf(err, "cannot create the job directory in '%s/jobs': %s", j->shared_dir, why.buf);
	strbuf_release(&why);
	errno = e;
	return -1;
}

static void write_state_file(const struct job *j)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, "%s\n", j->state);
	job_file(j, "state", sb.buf, sb.len);
	strbuf_release(&sb);
}

static json_t *placement_json(const struct hold *h)
{
	json_t *a = json_array();

	for (int k = 0; h && k < h->nr; k++) {
		struct strbuf sl = STRBUF_INIT;

		for (int i = 0; i < h->place[k].nslots; i++)
			strbuf_addf(&sl, "%s%d", i ? "," : "", h->place[k].slot[i]);
		json_array_append_new(a, json_pack("{s:s,s:s,s:s}", "node", h->place[k].node,
						   "address", h->place[k].address, "slots", sl.buf));
		strbuf_release(&sl);
	}
	return a;
}

/* <job_dir>/placement.json: {"ranks":[{"rank":0,"node":"n1"},...], "nodes": [...]} */
static void write_placement_file(const struct job *j)
{
	json_t *ranks = json_array(), *o;
	struct strbuf sb = STRBUF_INIT;
	size_t k;
	json_t *p;

	json_array_foreach(j->placement, k, p)
		for (int l = 0; l < j->per_node; l++)
			json_array_append_new(ranks, json_pack("{s:i,s:s}", "rank",
				(int)k * j->per_node + l, "node", json_get_str(p, "node", "?")));
	o = json_pack("{s:s,s:i,s:o,s:O}", "job", j->id, "attempt", j->attempt, "ranks", ranks,
		      "nodes", j->placement);
	json_append(&sb, o);
	strbuf_addch(&sb, '\n');
	job_file(j, "placement.json", sb.buf, sb.len);
	json_decref(o);
	strbuf_release(&sb);
}

/*
 * DT_RESUME: the checkpoint dttrain's "latest" names, else the newest regular
 * file.  ckpt/ is the job's own: a link, FIFO or directory there is skipped.
 */
static char *latest_checkpoint(const struct job *j)
{
	struct strbuf rel = STRBUF_INIT, buf = STRBUF_INIT, why = STRBUF_INIT;
	char *best = NULL;
	long long best_ns = -1;
	struct stat st;
	DIR *d;
	struct dirent *de;

	job_rel(j, "ckpt", &rel);
	d = sf_opendir(j->shared_dir, rel.buf, &why);
	if (!d) {
		if (errno != ENOENT)
			dtlog(DTLOG_WARN, "job %s: no checkpoint to resume from: %s", j->id, why.buf);
		goto out;
	}
	if (sf_read_at(dirfd(d), "latest", &buf, 4096, &why) > 0) {
		strbuf_trim(&buf);
		if (buf.len && !strchr(buf.buf, '/') && sf_stat_at(dirfd(d), buf.buf, &st) == 0 &&
		    S_ISREG(st.st_mode))
			best = xstrdup(buf.buf);
	} else if (errno != ENOENT) {
		dtlog(DTLOG_WARN, "job %s: ignoring ckpt/latest: %s", j->id, why.buf);
	}
	while (!best && (de = readdir(d))) {
		long long ns;

		if (de->d_name[0] == '.' || ends_with(de->d_name, ".tmp") ||
		    !strcmp(de->d_name, "latest") || sf_stat_at(dirfd(d), de->d_name, &st) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
		if (ns > best_ns) {
			best_ns = ns;
			strbuf_reset(&buf);
			strbuf_addstr(&buf, de->d_name);
		}
	}
	if (!best && best_ns >= 0)
		best = xstrdup(buf.buf);
	closedir(d);
	if (best) {
		char *name = best;

		strbuf_reset(&buf);
		strbuf_addf(&buf, "%s/ckpt/%s", j->job_dir, name);
		free(name);
		best = strbuf_detach(&buf, NULL);
	}
out:
	strbuf_release(&rel);
	strbuf_release(&buf);
	strbuf_release(&why);
	return best;
}

/* ------------------------------------------------------------ cluster.yaml */

/* <home>/cluster.yaml (labels, CPU slots, network interface), re-read when it changes. */
static void cluster_refresh(struct sched *s)
{
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;
	struct stat st;
	long long now = dt_mono_ms(), m;

	if (s->cc_checked_ms && now - s->cc_checked_ms < 1000)
		return;
	s->cc_checked_ms = now;
	strbuf_addf(&path, "%s/cluster.yaml", s->o.home);
	if (stat(path.buf, &st) < 0)
		goto out;
	m = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
	if (m == s->cc_mtime_ns)
		goto out;
	s->cc_mtime_ns = m;
	if (!s->cc)
		s->cc = xcalloc(1, sizeof(*s->cc));
	else
		cluster_config_release(s->cc);
	memset(s->cc, 0, sizeof(*s->cc));
	if (cluster_config_load(s->cc, path.buf, &err) < 0) {
		dtlog(DTLOG_WARN, "ignoring %s", err.buf);
		free(s->cc);
		s->cc = NULL;
	}
out:
	strbuf_release(&path);
	strbuf_release(&err);
}

static const struct cluster_node *cc_node(struct sched *s, const char *name)
{
	int i = s->cc ? cluster_find_node(s->cc, name) : -1;

	return i >= 0 ? &s->cc->nodes[i] : NULL;
}

/* ------------------------------------------------------------ job <-> JSON */

static void history_add(struct job *j, const char *state, const char *reason)
{
	json_array_append_new(j->history, json_pack("{s:s,s:o,s:s?}", "state", state,
						     "at", json_timestamp(dt_now_us()), "reason", reason));
}

static void set_reason(struct job *j, const char *fmt, ...) DT_PRINTF(2, 3);
static void set_reason(struct job *j, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	free(j->reason);
	j->reason = NULL;
	if (!fmt)
		return;
	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	j->reason = strbuf_detach(&sb, NULL);
}

/*
 * For mpi jobs: this attempt's <job_dir>/ranks/<r>.json records, which each
 * rank logger (agent/ranklog.c) writes when its rank ends, as an array
 * indexed by rank (null where none).  The shared dir is hostile: read
 * through the safe-file layer, bounded; files of an earlier attempt are
 * older than this one's start.
 */
static json_t *mpi_rank_records(const struct job *j)
{
	struct strbuf rel = STRBUF_INIT, buf = STRBUF_INIT;
	json_t *recs = json_array();
	DIR *d;
	struct dirent *de;

	for (int r = 0; r < j->world; r++)
		json_array_append_new(recs, json_null());
	job_rel(j, "ranks", &rel);
	d = sf_opendir(j->shared_dir, rel.buf, NULL);
	while (d && (de = readdir(d))) {
		json_t *o;
		long long r;

		if (!ends_with(de->d_name, ".json"))
			continue;
		strbuf_reset(&buf);
		if (sf_read_at(dirfd(d), de->d_name, &buf, 65536, NULL) < 0)
			continue;
		o = json_loads(buf.buf, 0, NULL);
		r = json_get_int(o, "rank", -1);
		if (json_is_object(o) && r >= 0 && r < j->world &&
		    dt_timestamp_parse(json_get_str(o, "ended_at", "")) >= j->started_us)
			json_array_set(recs, (size_t)r, o);
		json_decref(o);
	}
	if (d)
		closedir(d);
	strbuf_release(&rel);
	strbuf_release(&buf);
	return recs;
}

static int node_lost(struct sched *s, const char *name)
{
	struct node *n = node_find(s, name);

	return !n || !strcmp(n->state, DT_NODE_DOWN);
}

/*
 * The end of a rank that had not ended on its own when the attempt did:
 * dtsched stops it (another rank failed, cancel, timeout), or its node is
 * gone with it.  Without this, the last heartbeat's "running" would be the
 * rank's state forever.
 */
static void rank_set_end(json_t *r, int lost)
{
	json_object_set_new(r, "state", json_string(lost ? "lost" : "killed"));
	json_object_set_new(r, "reason", json_string(lost ? "lost with node" : "killed by dtctl"));
}

static int rank_state_final(const char *st)
{
	return !strcmp(st, DT_TASK_EXITED) || !strcmp(st, DT_TASK_FAILED) ||
		!strcmp(st, DT_TASK_LOST) || !strcmp(st, "killed") || !strcmp(st, "gone");
}

/*
 * Every rank of an mpi job after the mpirun task: its record where its rank
 * logger wrote one, else the mpirun task's state (the ranks run as long as
 * it does).  Records are read only when the attempt ends (`ending`): while
 * it runs, the shared dir is not read under the lock on every save.
 */
static void mpi_ranks(struct sched *s, const struct job *j, json_t *a, const json_t *mpirun,
		      int ending)
{
	const struct hold *h = j->hold;
	json_t *recs = ending ? mpi_rank_records(j) : json_array();
	const char *mst = json_get_str(mpirun, "state", "starting");

	for (int r = 0; r < j->world; r++) {
		const char *node = h->place[j->per_node > 0 ? r / j->per_node : 0].node;
		json_t *rec = json_array_get(recs, (size_t)r), *o;
		struct strbuf log = STRBUF_INIT;

		strbuf_addf(&log, "%s/logs/%d.log", j->job_dir, r);
		o = json_pack("{s:i,s:s,s:s,s:s,s:n,s:n,s:s}", "rank", r, "node", node,
			      "task", json_get_str(mpirun, "task", ""), "state",
			      rank_state_final(mst) ? DT_TASK_EXITED : mst, "exit_code", "pid",
			      "log", log.buf);
		if (json_is_object(rec)) {
			int sig = (int)json_get_int(rec, "signal", 0);

			json_object_set_new(o, "state", json_string(DT_TASK_EXITED));
			json_object_set(o, "exit_code", json_object_get(rec, "exit_code"));
			json_object_set(o, "pid", json_object_get(rec, "pid"));
			/* mpirun stopped it because another rank failed, or dtsched did */
			if ((sig == SIGTERM || sig == SIGKILL) && r != j->failed_rank)
				rank_set_end(o, 0);
		} else if (ending) {
			rank_set_end(o, node_lost(s, node));
		}
		json_array_append_new(a, o);
		strbuf_release(&log);
	}
	json_decref(recs);
}

/*
 * Per-rank view of the current attempt, from what the agents reported;
 * `ending`: the attempt is over (end_attempt keeps this as last_ranks), so
 * a rank still running is one dtsched stops now, or one lost with its node.
 */
static json_t *ranks_json(struct sched *s, const struct job *j, int ending)
{
	json_t *a = json_array(), *r;
	const struct hold *h = j->hold;
	size_t i;

	if (!h) {
		json_decref(a);
		if (!j->last_ranks)
			return json_array();
		/* a snapshot of an older dtsched may still say "running" */
		a = json_deep_copy(j->last_ranks);
		json_array_foreach(a, i, r)
			if (state_final(j->state) && !rank_state_final(json_get_str(r, "state", "")))
				rank_set_end(r, 0);
		return a;
	}
	for (i = 0; i < h->nr_tasks; i++) {
		const struct htask *t = &h->tasks[i];
		struct node *n = node_find(s, t->node);
		json_t *ht = n ? json_object_get(n->tasks, t->id) : NULL;
		json_t *code = ht ? json_object_get(ht, "exit_code") : NULL;
		struct strbuf log = STRBUF_INIT;

		if (t->rank >= 0)
			strbuf_addf(&log, "%s/logs/%d.log", j->job_dir, t->rank);
		else
			strbuf_addf(&log, "%s/logs/mpirun.log", j->job_dir);
		r = json_pack("{s:i,s:s,s:s,s:s,s:O,s:O,s:s,s:s?,s:I}",
			"rank", t->rank, "node", t->node, "task", t->id,
			"state", ht ? json_get_str(ht, "state", "?") : (t->gone ? "gone" : "starting"),
			"exit_code", code ? code : json_null(),
			"pid", ht && json_object_get(ht, "pid") ? json_object_get(ht, "pid") : json_null(),
			"log", log.buf,
			/* how its processes were held: "cgroup" or "subreaper" (agent/proctree.h) */
			"containment", ht ? json_get_str(ht, "containment", NULL) : NULL,
			"log_lost_lines", (json_int_t)(ht ? json_get_int(ht, "log_lost_lines", 0) : 0));
		if (ht && !strcmp(json_get_str(ht, "state", ""), DT_TASK_LOST) &&
		    !strcmp(json_get_str(ht, "reason", ""), "NODE_FAIL"))
			json_object_set_new(r, "reason", json_string("lost with node"));
		else if (ending && !rank_state_final(json_get_str(r, "state", "")))
			rank_set_end(r, node_lost(s, t->node));
		json_array_append_new(a, r);
		if (t->rank < 0 && j->cfg.launcher == LAUNCHER_MPI)
			mpi_ranks(s, j, a, r, ending);
		strbuf_release(&log);
	}
	/* each rank's GPUs: its node's reservation (launch.c binds both launchers so) */
	json_array_foreach(a, i, r) {
		json_int_t rank = json_get_int(r, "rank", -1);
		json_t *pl = json_array_get(j->placement, rank < 0 ? 0 :
					    (size_t)(rank / (j->per_node > 0 ? j->per_node : 1)));

		json_object_set_new(r, "gpus", json_string(j->gpu ? json_get_str(pl, "slots", "") : ""));
	}
	return a;
}

static json_t *job_json(struct sched *s, const struct job *j, int detail)
{
	json_t *o = json_object();
	long long end = j->ended_us ? j->ended_us : dt_now_us();

	json_object_set_new(o, "id", json_string(j->id));
	json_object_set_new(o, "version", json_integer(j->version));
	json_object_set_new(o, "name", json_string(j->name));
	json_object_set_new(o, "user", json_string(j->user ? j->user : ""));
	json_object_set_new(o, "state", json_string(j->state));
	json_object_set_new(o, "reason", j->reason ? json_string(j->reason) : json_null());
	json_object_set_new(o, "submitted_at", json_timestamp(j->submitted_us));
	json_object_set_new(o, "started_at", json_timestamp(j->started_us));
	json_object_set_new(o, "ended_at", json_timestamp(j->ended_us));
	json_object_set_new(o, "elapsed_ms", json_integer(j->started_us ?
							  (end - j->started_us) / 1000 : 0));
	json_object_set_new(o, "nodes", json_integer(j->cfg.nodes));
	json_object_set_new(o, "per_node", json_integer(j->per_node));
	json_object_set_new(o, "gpu", json_boolean(j->gpu));
	json_object_set_new(o, "world_size", json_integer(j->world));
	json_object_set_new(o, "launcher", json_string(j->cfg.launcher == LAUNCHER_MPI ? "mpi" : "agent"));
	json_object_set_new(o, "job_dir", json_string(j->job_dir));
	json_object_set_new(o, "attempt", json_integer(j->attempt));
	json_object_set_new(o, "retries", json_integer(j->cfg.retries));
	json_object_set_new(o, "exit_code", j->has_exit ? json_integer(j->exit_code) : json_null());
	json_object_set_new(o, "failed_rank", j->failed_rank >= 0 ? json_integer(j->failed_rank) : json_null());
	json_object_set_new(o, "failed_node", j->failed_node ? json_string(j->failed_node) : json_null());
	json_object_set_new(o, "stalled", json_incref(j->stalled));
	json_object_set_new(o, "placement", json_incref(j->placement));
	json_object_set_new(o, "log_lost_lines", json_integer(j->log_lost_lines));
	json_object_set_new(o, "log_error", j->log_error ? json_string(j->log_error) : json_null());
	{
		json_t *w = json_array();

		if (j->log_lost_lines || j->log_error) {
			struct strbuf m = STRBUF_INIT;

			strbuf_addf(&m, "%lld output line%s of its ranks could not be logged (%s)",
				    j->log_lost_lines, j->log_lost_lines == 1 ? "" : "s",
				    j->log_error ? j->log_error : "write error");
			json_array_append_new(w, json_string(m.buf));
			strbuf_release(&m);
		}
		json_object_set_new(o, "warnings", w);
	}
	if (detail) {
		json_object_set_new(o, "spec", json_incref(j->spec));
		json_object_set_new(o, "shared_dir", json_string(j->shared_dir));
		json_object_set_new(o, "submit_dir", j->submit_dir ? json_string(j->submit_dir) :
				    json_null());
		json_object_set_new(o, "master_port", json_integer(j->master_port));
		json_object_set_new(o, "history", json_incref(j->history));
		json_object_set_new(o, "ranks", ranks_json(s, j, 0));
		json_object_set_new(o, "avoid", json_incref(j->avoid));
	}
	return o;
}

static json_t *hold_json(const struct hold *h)
{
	json_t *tasks = json_array();

	for (size_t i = 0; i < h->nr_tasks; i++)
		json_array_append_new(tasks, json_pack("{s:s,s:s,s:i,s:b}", "node", h->tasks[i].node,
						       "id", h->tasks[i].id, "rank", h->tasks[i].rank,
						       "gone", h->tasks[i].gone));
	return json_pack("{s:s,s:b,s:o,s:o,s:b}", "job", h->job, "gpu", h->gpu,
			 "placement", placement_json(h), "tasks", tasks, "released", h->released);
}

/* Write the job (and the holds it has) to SQLite; lock held. */
static void job_save(struct sched *s, struct job *j)
{
	json_t *o, *holds = json_array();
	struct strbuf data = STRBUF_INIT;
	sqlite3_stmt *st = s->st_job;

	j->version++;
	dt_httpd_wake(s->srv);   /* answer the long-polls (POST /v1/jobs/<id>/wait) */
	o = job_json(s, j, 1);

	for (size_t i = 0; i < s->nr_holds; i++)
		if (!strcmp(s->holds[i]->job, j->id))
			json_array_append_new(holds, hold_json(s->holds[i]));
	json_object_set_new(o, "holds", holds);
	json_object_set_new(o, "current_hold", json_boolean(j->hold != NULL));
	json_object_set_new(o, "last_ranks", json_incref(j->last_ranks ? j->last_ranks : json_null()));
	json_object_set_new(o, "has_exit", json_boolean(j->has_exit));
	json_object_set_new(o, "cancel", json_boolean(j->cancel));
	json_append(&data, o);
	sqlite3_reset(st);
	sqlite3_bind_text(st, 1, j->id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, j->state, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, dt_now_us());
	sqlite3_bind_text(st, 4, data.buf, (int)data.len, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 5, j->seq);
	if (sqlite3_step(st) != SQLITE_DONE)
		dtlog(DTLOG_ERROR, "state.db: cannot save job %s: %s", j->id, sqlite3_errmsg(s->db));
	json_decref(o);
	strbuf_release(&data);
}

/* ------------------------------------------------------------- /metrics */

static const char *const job_states[] = { DT_JOB_PENDING, DT_JOB_RUNNING, DT_JOB_COMPLETED,
					  DT_JOB_FAILED, DT_JOB_CANCELLED, DT_JOB_TIMEOUT,
					  DT_JOB_NODE_FAIL };
/* seconds: a queue wait or run of a training job spans ms to days */
static const double job_secs_bounds[] = { 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600,
					  24 * 3600 };
#define NR_SECS_BOUNDS ARRAY_SIZE(job_secs_bounds)

struct jobs_stats {
	unsigned long long finished[ARRAY_SIZE(job_states)];
	unsigned long long wait_counts[NR_SECS_BOUNDS + 1], run_counts[NR_SECS_BOUNDS + 1];
	struct prom_hist wait, run;
};

static struct jobs_stats *jobs_stats(struct sched *s)
{
	if (!s->jstats) {
		struct jobs_stats *js = xcalloc(1, sizeof(*js));

		js->wait.bounds = js->run.bounds = job_secs_bounds;
		js->wait.nr_bounds = js->run.nr_bounds = NR_SECS_BOUNDS;
		js->wait.counts = js->wait_counts;
		js->run.counts = js->run_counts;
		s->jstats = js;
	}
	return s->jstats;
}

/* Count a transition: queue wait when an attempt starts, run time and final state at the end. */
static void jobs_observe(struct sched *s, const struct job *j, const char *state)
{
	struct jobs_stats *js = jobs_stats(s);
	long long now = dt_now_us();

	if (!strcmp(state, DT_JOB_RUNNING) && j->submitted_us && j->attempt == 0)
		prom_hist_observe(&js->wait, (double)(now - j->submitted_us) / 1e6);
	if (!state_final(state))
		return;
	for (size_t k = 0; k < ARRAY_SIZE(job_states); k++)
		if (!strcmp(state, job_states[k]))
			js->finished[k]++;
	if (j->started_us)
		prom_hist_observe(&js->run, (double)(now - j->started_us) / 1e6);
}

void jobs_metrics(struct sched *s, struct strbuf *o)
{
	struct jobs_stats *js = jobs_stats(s);
	unsigned long long n[ARRAY_SIZE(job_states)] = { 0 };

	for (size_t i = 0; i < s->nr_jobs; i++)
		for (size_t k = 0; k < ARRAY_SIZE(job_states); k++)
			n[k] += !strcmp(s->jobs[i]->state, job_states[k]);
	prom_family(o, "dtsched_jobs", "gauge", "Jobs known to dtsched, by state.");
	for (size_t k = 0; k < ARRAY_SIZE(job_states); k++) {
		const char *l[] = { "state", job_states[k], NULL };

		prom_sample(o, "dtsched_jobs", l, (double)n[k]);
	}
	prom_family(o, "dtsched_jobs_finished_total", "counter",
		    "Jobs that ended since dtsched started, by final state.");
	for (size_t k = 2; k < ARRAY_SIZE(job_states); k++) {
		const char *l[] = { "state", job_states[k], NULL };

		prom_sample(o, "dtsched_jobs_finished_total", l, (double)js->finished[k]);
	}
	prom_family(o, "dtsched_job_queue_wait_seconds", "histogram",
		    "Time from submission to the start of a job's first attempt.");
	prom_hist_write(o, "dtsched_job_queue_wait_seconds", NULL, &js->wait);
	prom_family(o, "dtsched_job_run_seconds", "histogram",
		    "Run time of a job's last attempt, from its start to its end.");
	prom_hist_write(o, "dtsched_job_run_seconds", NULL, &js->run);
}

/* A state change: SQLite, then <job_dir>/state, then the log. */
static void job_transition(struct sched *s, struct job *j, const char *state)
{
	const char *before = j->state;

	jobs_observe(s, j, state);
	j->state = state;
	j->wait_fp = 0;           /* a requeue may avoid other nodes now: try it afresh */
	history_add(j, state, j->reason);
	job_save(s, j);
	write_state_file(j);
	dtlog(!strcmp(state, DT_JOB_FAILED) || !strcmp(state, DT_JOB_NODE_FAIL) ? DTLOG_WARN :
	      DTLOG_INFO, "job %s (%s): %s -> %s%s%s", j->id, j->name, before, state,
	      j->reason ? ": " : "", j->reason ? j->reason : "");
}

static void job_free(struct job *j)
{
	free(j->name);
	free(j->user);
	free(j->job_dir);
	free(j->shared_dir);
	free(j->submit_dir);
	json_decref(j->spec);
	job_config_release(&j->cfg);
	free(j->reason);
	json_decref(j->history);
	json_decref(j->avoid);
	json_decref(j->stalled);
	json_decref(j->last_ranks);
	json_decref(j->placement);
	free(j->failed_node);
	free(j->launch_error);
	free(j->log_error);
	free(j);
}

static void hold_free(struct hold *h)
{
	for (int k = 0; k < h->nr; k++) {
		free(h->place[k].node);
		free(h->place[k].address);
	}
	for (size_t i = 0; i < h->nr_tasks; i++) {
		free(h->tasks[i].node);
		free(h->tasks[i].id);
	}
	free(h->place);
	free(h->tasks);
	free(h);
}

static void hold_remove(struct sched *s, struct hold *h)
{
	for (size_t i = 0; i < s->nr_holds; i++) {
		if (s->holds[i] == h) {
			memmove(&s->holds[i], &s->holds[i + 1], (s->nr_holds - i - 1) * sizeof(*s->holds));
			s->nr_holds--;
			break;
		}
	}
	hold_free(h);
}

static void hold_add_task(struct hold *h, const char *node, const char *id, int rank, int gone)
{
	struct htask *t;

	ALLOC_GROW(h->tasks, h->nr_tasks + 1, h->alloc_tasks);
	t = &h->tasks[h->nr_tasks++];
	t->node = xstrdup(node);
	t->id = xstrdup(id);
	t->rank = rank;
	t->gone = gone;
}

static struct hold *hold_from_json(const json_t *o)
{
	struct hold *h = xcalloc(1, sizeof(*h));
	json_t *p, *t;
	size_t i;

	snprintf(h->job, sizeof(h->job), "%s", json_get_str(o, "job", ""));
	h->gpu = json_is_true(json_object_get(o, "gpu"));
	h->released = json_is_true(json_object_get(o, "released"));
	h->released_ms = dt_mono_ms();
	h->launched_ms = dt_mono_ms();
	p = json_object_get(o, "placement");
	h->nr = (int)json_array_size(p);
	h->place = xcalloc(h->nr ? (size_t)h->nr : 1, sizeof(*h->place));
	json_array_foreach(p, i, t) {
		const char *sl = json_get_str(t, "slots", "");

		h->place[i].node = xstrdup(json_get_str(t, "node", "?"));
		h->place[i].address = xstrdup(json_get_str(t, "address", ""));
		while (*sl && h->place[i].nslots < 64) {
			char *end;
			long v = strtol(sl, &end, 10);

			if (end == sl)
				break;
			h->place[i].slot[h->place[i].nslots++] = (int)v;
			sl = *end == ',' ? end + 1 : end;
		}
	}
	json_array_foreach(json_object_get(o, "tasks"), i, t)
		hold_add_task(h, json_get_str(t, "node", "?"), json_get_str(t, "id", "?"),
			      (int)json_get_int(t, "rank", -1), json_is_true(json_object_get(t, "gone")));
	return h;
}

/* ------------------------------------------------------------------ init */

static const char jobs_schema[] =
	"CREATE TABLE IF NOT EXISTS jobs("
	"  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, state TEXT NOT NULL,"
	"  updated_us INTEGER, data TEXT);"
	"CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);";

static struct job *job_new(void)
{
	struct job *j = xcalloc(1, sizeof(*j));

	job_config_init(&j->cfg);
	j->history = json_array();
	j->avoid = json_array();
	j->stalled = json_array();
	j->placement = json_array();
	j->failed_rank = -1;
	j->state = DT_JOB_PENDING;
	return j;
}

static const char *state_const(const char *s)
{
	static const char *const all[] = { DT_JOB_PENDING, DT_JOB_RUNNING, DT_JOB_COMPLETED,
					   DT_JOB_FAILED, DT_JOB_CANCELLED, DT_JOB_TIMEOUT,
					   DT_JOB_NODE_FAIL };

	for (size_t i = 0; i < ARRAY_SIZE(all); i++)
		if (s && !strcmp(s, all[i]))
			return all[i];
	return DT_JOB_FAILED;
}

static void job_derive(struct job *j)
{
	j->gpu = j->cfg.gpus_per_node > 0;
	j->per_node = j->gpu ? j->cfg.gpus_per_node : j->cfg.procs_per_node;
	j->world = j->per_node * j->cfg.nodes;
}

static void jobs_load(struct sched *s)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(s->db, "SELECT seq, data FROM jobs ORDER BY seq", -1, &st, NULL) != SQLITE_OK)
		return;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *data = (const char *)sqlite3_column_text(st, 1);
		json_t *o = data ? json_loads(data, 0, NULL) : NULL, *h;
		struct strbuf err = STRBUF_INIT;
		struct job *j;
		size_t i;

		if (!o)
			continue;
		j = job_new();
		j->seq = sqlite3_column_int64(st, 0);
		snprintf(j->id, sizeof(j->id), "%s", json_get_str(o, "id", ""));
		if (job_config_from_json(&j->cfg, json_object_get(o, "spec"), &err) < 0) {
			dtlog(DTLOG_WARN, "state.db: job %s: %s; skipped", j->id, err.buf);
			strbuf_release(&err);
			job_free(j);
			json_decref(o);
			continue;
		}
		job_derive(j);
		j->spec = json_incref(json_object_get(o, "spec"));
		j->name = xstrdup(json_get_str(o, "name", "job"));
		j->user = xstrdup(json_get_str(o, "user", ""));
		j->job_dir = xstrdup(json_get_str(o, "job_dir", ""));
		j->shared_dir = xstrdup(json_get_str(o, "shared_dir", ""));
		if (json_get_str(o, "submit_dir", NULL))
			j->submit_dir = xstrdup(json_get_str(o, "submit_dir", NULL));
		j->state = state_const(json_get_str(o, "state", NULL));
		if (json_get_str(o, "reason", NULL))
			j->reason = xstrdup(json_get_str(o, "reason", NULL));
		j->attempt = (int)json_get_int(o, "attempt", 0);
		j->submitted_us = dt_timestamp_parse(json_get_str(o, "submitted_at", "")) ;
		j->started_us = dt_timestamp_parse(json_get_str(o, "started_at", ""));
		j->ended_us = dt_timestamp_parse(json_get_str(o, "ended_at", ""));
		if (j->submitted_us < 0) j->submitted_us = 0;
		if (j->started_us < 0) j->started_us = 0;
		if (j->ended_us < 0) j->ended_us = 0;
		j->run_mono = dt_mono_ms();
		j->master_port = (int)json_get_int(o, "master_port", 0);
		j->has_exit = json_is_true(json_object_get(o, "has_exit"));
		j->exit_code = (int)json_get_int(o, "exit_code", 0);
		j->failed_rank = (int)json_get_int(o, "failed_rank", -1);
		j->cancel = json_is_true(json_object_get(o, "cancel"));
		j->log_lost_lines = json_get_int(o, "log_lost_lines", 0);
		if (json_get_str(o, "log_error", NULL))
			j->log_error = xstrdup(json_get_str(o, "log_error", NULL));
		if (json_get_str(o, "failed_node", NULL))
			j->failed_node = xstrdup(json_get_str(o, "failed_node", NULL));
		if (json_is_array(json_object_get(o, "history"))) {
			json_decref(j->history);
			j->history = json_incref(json_object_get(o, "history"));
		}
		if (json_is_array(json_object_get(o, "avoid"))) {
			json_decref(j->avoid);
			j->avoid = json_incref(json_object_get(o, "avoid"));
		}
		if (json_is_array(json_object_get(o, "placement"))) {
			json_decref(j->placement);
			j->placement = json_incref(json_object_get(o, "placement"));
		}
		if (json_is_array(json_object_get(o, "last_ranks")))
			j->last_ranks = json_incref(json_object_get(o, "last_ranks"));
		json_array_foreach(json_object_get(o, "holds"), i, h) {
			struct hold *hd = hold_from_json(h);

			ALLOC_GROW(s->holds, s->nr_holds + 1, s->alloc_holds);
			s->holds[s->nr_holds++] = hd;
			if (!hd->released && !strcmp(j->state, DT_JOB_RUNNING))
				j->hold = hd;
			else
				hd->released = 1;
		}
		if (!strcmp(j->state, DT_JOB_RUNNING) && !j->hold) {
			/* placed but never launched before dtsched stopped: place again */
			j->state = DT_JOB_PENDING;
		} else if (!strcmp(j->state, DT_JOB_RUNNING) && !j->hold->nr_tasks) {
			/* placed, slots held, stopped before the launch recorded a task:
			 * launch on the same slots (else no task would ever end it) */
			j->launch = 1;
		}
		ALLOC_GROW(s->jobs, s->nr_jobs + 1, s->alloc_jobs);
		s->jobs[s->nr_jobs++] = j;
		json_decref(o);
	}
	sqlite3_finalize(st);
	if (s->nr_jobs)
		dtlog(DTLOG_INFO, "loaded %zu job(s), %zu slot hold(s)", s->nr_jobs, s->nr_holds);
}

int jobs_init(struct sched *s)
{
	if (db_exec(s, jobs_schema) < 0 ||
	    sqlite3_prepare_v2(s->db, "UPDATE jobs SET id=?1, state=?2, updated_us=?3, data=?4 "
			       "WHERE seq=?5", -1, &s->st_job, NULL) != SQLITE_OK)
		return -1;
	s->orphans = json_object();
	s->clients = xcalloc(1, sizeof(*s->clients));
	jobs_load(s);
	return 0;
}

void jobs_release(struct sched *s)
{
	free(s->jstats);
	s->jstats = NULL;
	/* launch threads still out (each request times out within seconds) */
	for (int waited = 0;; waited++) {
		int n;

		pthread_mutex_lock(&s->lock);
		n = s->clients ? s->clients->launches : 0;
		pthread_mutex_unlock(&s->lock);
		if (!n)
			break;
		if (waited == 3000) {
			dtlog(DTLOG_WARN, "%d launch(es) still running at exit; not freeing the jobs", n);
			return;
		}
		usleep(10000);
	}
	for (size_t i = 0; i < s->nr_jobs; i++)
		job_free(s->jobs[i]);
	free(s->jobs);
	for (size_t i = 0; i < s->nr_holds; i++)
		hold_free(s->holds[i]);
	free(s->holds);
	if (s->clients) {
		clients_release(s->clients);
		free(s->clients);
	}
	json_decref(s->orphans);
	sqlite3_finalize(s->st_job);
	if (s->cc) {
		cluster_config_release(s->cc);
		free(s->cc);
	}
}

/* ------------------------------------------------------------ placement */

struct pool {
	struct place_node *n;     /* one per known node, same order as s->nodes */
	size_t nr;
	int gpu;
};

static void pool_build(struct sched *s, struct pool *p, int gpu)
{
	p->nr = s->nr;
	p->gpu = gpu;
	p->n = xcalloc(s->nr ? s->nr : 1, sizeof(*p->n));
	for (size_t i = 0; i < s->nr; i++) {
		struct node *n = s->nodes[i];
		struct place_node *pn = &p->n[i];
		const struct cluster_node *cn = cc_node(s, n->name);
		json_t *t;
		const char *id;

		pn->name = n->name;
		pn->up = !strcmp(n->state, DT_NODE_UP);
		pn->drained = n->drained;
		pn->labels = cn ? &cn->labels : NULL;
		if (gpu)
			pn->total = n->gpus_total;
		else
			pn->total = cn && cn->slots > 0 ? cn->slots : n->cpus;
		if (pn->total > PLACE_MAX_SLOTS)
			pn->total = PLACE_MAX_SLOTS;
		if (!gpu)
			continue;
		/* GPUs held by tasks that are not ours (started through the agent API) */
		json_object_foreach(n->tasks, id, t) {
			const char *cvd = json_get_str(t, "cuda_visible_devices", NULL);

			if (task_final(t) || json_get_str(t, "job_id", NULL))
				continue;
			while (cvd && *cvd) {
				char *end;
				long d = strtol(cvd, &end, 10);

				if (end == cvd)
					break;
				if (d >= 0 && d < pn->total)
					pn->used[d] = 1;
				cvd = *end == ',' ? end + 1 : end;
			}
		}
	}
	for (size_t h = 0; h < s->nr_holds; h++) {
		struct hold *hd = s->holds[h];

		if (hd->gpu != gpu)
			continue;
		for (int k = 0; k < hd->nr; k++) {
			for (size_t i = 0; i < s->nr; i++) {
				if (strcmp(s->nodes[i]->name, hd->place[k].node))
					continue;
				for (int x = 0; x < hd->place[k].nslots; x++)
					if (hd->place[k].slot[x] < PLACE_MAX_SLOTS)
						p->n[i].used[hd->place[k].slot[x]] = 1;
			}
		}
	}
}

/*
 * A hash of everything placement_try() reads from a pool (and of the cluster
 * config its labels point into).  A pending job that had to wait on a pool
 * with this fingerprint waits on it again: schedule_pending() skips it, which
 * makes a step cost O(new jobs), not O(queue), while nothing is freed.  With
 * 1500 jobs queued, trying each one on every submit was most of dtsched's
 * CPU (a 66 KB place_result cleared per try).  Never 0.
 */
static unsigned long long pool_fingerprint(const struct sched *s, const struct pool *p)
{
	unsigned long long h = 1469598103934665603ULL;
	const unsigned long long prime = 1099511628211ULL;
#define FP_MIX(v) (h = (h ^ (unsigned long long)(v)) * prime)

	FP_MIX(p->gpu);
	FP_MIX((uintptr_t)s->cc);
	FP_MIX(s->cc_mtime_ns);
	FP_MIX(p->nr);
	for (size_t i = 0; i < p->nr; i++) {
		const struct place_node *n = &p->n[i];

		for (const char *c = n->name; *c; c++)
			FP_MIX((unsigned char)*c);
		FP_MIX((uintptr_t)n->labels);
		FP_MIX(n->up | n->drained << 1);
		FP_MIX(n->total);
		for (int k = 0; k < n->total; k++)
			if (n->used[k])
				FP_MIX(k + 1);
	}
#undef FP_MIX
	return h ? h : 1;
}

static void place_req_of(const struct job *j, struct place_req *r, const char **avoid,
			 size_t max_avoid, int with_avoid)
{
	size_t k = 0, i;
	json_t *a;

	memset(r, 0, sizeof(*r));
	r->nodes = j->cfg.nodes;
	r->per_node = j->per_node;
	r->include = j->cfg.node_include;
	r->exclude = j->cfg.node_exclude;
	r->labels = j->cfg.labels.nr ? &j->cfg.labels : NULL;
	if (with_avoid)
		json_array_foreach(j->avoid, i, a)
			if (k + 1 < max_avoid && json_is_string(a))
				avoid[k++] = json_string_value(a);
	avoid[k] = NULL;
	r->avoid = avoid;
}

static enum place_status job_try_place(struct sched *s, const struct job *j, struct pool *p,
				       struct place_result *res, struct strbuf *reason)
{
	const char *avoid[64];
	struct place_req r;
	enum place_status st;

	place_req_of(j, &r, avoid, ARRAY_SIZE(avoid), 1);
	st = placement_try(p->n, p->nr, &r, res, reason);
	if (st == PLACE_NEVER && avoid[0]) {
		/* the nodes it failed on are the only ones left: use them after all */
		strbuf_reset(reason);
		place_req_of(j, &r, avoid, ARRAY_SIZE(avoid), 0);
		st = placement_try(p->n, p->nr, &r, res, reason);
	}
	return st;
}

static struct hold *hold_make(struct sched *s, struct job *j, struct pool *p,
			      const struct place_result *res)
{
	struct hold *h = xcalloc(1, sizeof(*h));

	snprintf(h->job, sizeof(h->job), "%s", j->id);
	h->gpu = j->gpu;
	h->nr = res->nr;
	h->place = xcalloc((size_t)res->nr, sizeof(*h->place));
	for (int k = 0; k < res->nr; k++) {
		struct node *n = s->nodes[res->node[k]];

		h->place[k].node = xstrdup(n->name);
		h->place[k].address = xstrdup(n->address && *n->address ? n->address : n->name);
		h->place[k].nslots = j->per_node;
		memcpy(h->place[k].slot, res->slots[k], sizeof(int) * (size_t)j->per_node);
	}
	placement_commit(p->n, res, j->per_node);
	ALLOC_GROW(s->holds, s->nr_holds + 1, s->alloc_holds);
	s->holds[s->nr_holds++] = h;
	return h;
}

/* Place pending jobs, oldest first; later ones that fit start too (backfill). */
static void schedule_pending(struct sched *s)
{
	struct pool gpu = { NULL, 0, 1 }, cpu = { NULL, 0, 0 };
	struct strbuf reason = STRBUF_INIT;
	unsigned long long fp[2];   /* [p->gpu] */
	int any = 0;

	for (size_t i = 0; i < s->nr_jobs; i++)
		if (!strcmp(s->jobs[i]->state, DT_JOB_PENDING) && !s->jobs[i]->cancel)
			any = 1;
	if (!any)
		return;
	pool_build(s, &gpu, 1);
	pool_build(s, &cpu, 0);
	fp[0] = pool_fingerprint(s, &cpu);
	fp[1] = pool_fingerprint(s, &gpu);
	for (size_t i = 0; i < s->nr_jobs; i++) {
		struct job *j = s->jobs[i];
		struct pool *p = j->gpu ? &gpu : &cpu;
		struct place_result *res;
		enum place_status st;

		if (strcmp(j->state, DT_JOB_PENDING) || j->cancel || j->wait_fp == fp[p->gpu])
			continue;
		res = xmalloc(sizeof(*res));
		strbuf_reset(&reason);
		st = job_try_place(s, j, p, res, &reason);
		if (st != PLACE_OK)
			j->wait_fp = fp[p->gpu];   /* the same pool gives the same answer */
		if (st == PLACE_OK) {
			j->hold = hold_make(s, j, p, res);
			fp[p->gpu] = pool_fingerprint(s, p);
			json_decref(j->placement);
			j->placement = placement_json(j->hold);
			j->started_us = dt_now_us();
			j->run_mono = dt_mono_ms();
			j->ended_us = 0;
			j->has_exit = 0;
			j->failed_rank = -1;
			free(j->failed_node);
			j->failed_node = NULL;
			free(j->launch_error);
			j->launch_error = NULL;
			json_array_clear(j->stalled);
			set_reason(j, NULL);
			j->launch = 1;
			job_transition(s, j, DT_JOB_RUNNING);
			write_placement_file(j);
		} else if (!j->reason || strcmp(j->reason, reason.buf)) {
			set_reason(j, "%s", reason.buf);
			job_save(s, j);
		}
		free(res);
	}
	free(gpu.n);
	free(cpu.n);
	strbuf_release(&reason);
}

/* ------------------------------------------------------------- ending */

/* The attempt is over: release its slots (stopping what is left), then
 * requeue for a retry or end in `state`.  Lock held. */
/*
 * Output lines this attempt's ranks could not write to their logs (full or
 * failing shared disk): from the agents' task states, and for mpi jobs from
 * ranks/<r>.json, which each rank logger writes at its end.
 */
static void count_log_loss(struct sched *s, struct job *j)
{
	long long lost = 0;
	const char *err = NULL;
	char *mpi_err = NULL;
	json_t *recs, *o;
	size_t r;

	for (size_t i = 0; j->hold && i < j->hold->nr_tasks; i++) {
		struct node *n = node_find(s, j->hold->tasks[i].node);
		json_t *ht = n ? json_object_get(n->tasks, j->hold->tasks[i].id) : NULL;

		lost += json_get_int(ht, "log_lost_lines", 0);
		if (!err)
			err = json_get_str(ht, "log_error", NULL);
	}
	recs = j->cfg.launcher == LAUNCHER_MPI ? mpi_rank_records(j) : json_array();
	json_array_foreach(recs, r, o) {
		lost += json_get_int(o, "log_lost_lines", 0);
		if (!err && !mpi_err && json_get_str(o, "log_error", NULL))
			mpi_err = xstrdup(json_get_str(o, "log_error", NULL));
	}
	json_decref(recs);
	if (lost || err || mpi_err) {
		j->log_lost_lines += lost;
		if (!j->log_error)
			j->log_error = xstrdup(err ? err : mpi_err ? mpi_err : "write error");
		dtlog(DTLOG_WARN, "job %s: %lld output line(s) of its ranks could not be logged: %s",
		      j->id, lost, j->log_error);
	}
	free(mpi_err);
}

static void end_attempt(struct sched *s, struct job *j, const char *state)
{
	int retry;

	count_log_loss(s, j);
	if (j->log_lost_lines && j->cfg.strict_logging && !strcmp(state, DT_JOB_COMPLETED)) {
		state = DT_JOB_FAILED;
		j->exit_code = 1;
		set_reason(j, "%lld output line%s could not be logged (%s) and the job asks for "
			   "strict_logging", j->log_lost_lines, j->log_lost_lines == 1 ? "" : "s",
			   j->log_error);
	}
	retry = (!strcmp(state, DT_JOB_FAILED) || !strcmp(state, DT_JOB_NODE_FAIL)) &&
		j->attempt < j->cfg.retries && !j->cancel;
	j->orted_attempt = j->attempt;
	j->orted_grace_ms = dt_mono_ms() + ORTED_GRACE_MS;
	if (j->hold) {
		json_decref(j->last_ranks);
		j->last_ranks = ranks_json(s, j, 1);
		j->hold->released = 1;
		j->hold->released_ms = dt_mono_ms();
		j->hold = NULL;
	}
	j->launch = 0;
	if (retry) {
		struct strbuf why = STRBUF_INIT;

		strbuf_addf(&why, "%s%s%s", state, j->reason ? ": " : "", j->reason ? j->reason : "");
		history_add(j, state, j->reason);
		if (j->failed_node) {
			int seen = 0;
			size_t i;
			json_t *a;

			json_array_foreach(j->avoid, i, a)
				if (!strcmp(json_string_value(a), j->failed_node))
					seen = 1;
			if (!seen)
				json_array_append_new(j->avoid, json_string(j->failed_node));
		}
		j->attempt++;
		set_reason(j, "retry %d/%d after %s", j->attempt, j->cfg.retries, why.buf);
		strbuf_release(&why);
		j->started_us = 0;
		job_transition(s, j, DT_JOB_PENDING);
	} else {
		j->ended_us = dt_now_us();
		job_transition(s, j, state);
	}
	sched_wake(s);
}

/* For mpi jobs: the first rank that failed, from <job_dir>/ranks/<r>.json. */
static int mpi_first_failure(const struct job *j, int *rank, int *code, char **node)
{
	json_t *recs = mpi_rank_records(j), *o;
	const char *best = NULL;
	size_t r;

	json_array_foreach(recs, r, o) {
		const char *ended = json_get_str(o, "ended_at", "");

		if (json_get_int(o, "exit_code", 0) != 0 && (!best || strcmp(ended, best) < 0)) {
			best = ended;
			*rank = (int)json_get_int(o, "rank", -1);
			*code = (int)json_get_int(o, "exit_code", 1);
			free(*node);
			*node = xstrdup(json_get_str(o, "node", "?"));
		}
	}
	json_decref(recs);
	return best != NULL;
}

static void describe_code(struct strbuf *sb, int code)
{
	if (code > 128 && code < 128 + 65)
		strbuf_addf(sb, "was killed by signal %d (%s)", code - 128, strsignal(code - 128));
	else
		strbuf_addf(sb, "exited with code %d", code);
}

/* Stall detection: ranks whose log and the metrics file did not change for stall_after. */
static void check_stall(struct sched *s, struct job *j)
{
	long long now = dt_mono_ms(), now_us = dt_now_us(), metrics_ns = 0;
	struct strbuf path = STRBUF_INIT;
	json_t *stalled = json_array();

	if (!j->cfg.stall_after_ms || now - j->stall_checked_ms < STALL_SCAN_MS || !j->hold)
		goto out;
	j->stall_checked_ms = now;
	metrics_ns = job_mtime_ns(j, "metrics.jsonl");
	for (size_t i = 0; i < j->hold->nr_tasks; i++) {
		const struct htask *t = &j->hold->tasks[i];
		struct node *n = node_find(s, t->node);
		json_t *ht = n ? json_object_get(n->tasks, t->id) : NULL;
		long long last = j->started_us, idle;
		int ranks = t->rank >= 0 ? 1 : j->world;

		if (ht && task_final(ht))
			continue;
		if (metrics_ns / 1000 > last)
			last = metrics_ns / 1000;
		for (int r = 0; r < ranks; r++) {
			long long lr = last;
			int rank = t->rank >= 0 ? t->rank : r;

			long long log_ns;

			strbuf_reset(&path);
			strbuf_addf(&path, "logs/%d.log", rank);
			log_ns = job_mtime_ns(j, path.buf);
			if (log_ns / 1000 > lr)
				lr = log_ns / 1000;
			idle = (now_us - lr) / 1000;
			if (idle < j->cfg.stall_after_ms)
				continue;
			json_array_append_new(stalled, json_pack("{s:i,s:s,s:O,s:I}", "rank", rank,
				"node", t->node, "pid", ht && json_object_get(ht, "pid") ?
				json_object_get(ht, "pid") : json_null(), "idle_ms", (json_int_t)idle));
		}
	}
	if (json_array_size(stalled) && !json_array_size(j->stalled)) {
		json_t *f = json_array_get(stalled, 0);
		struct strbuf ev = STRBUF_INIT;
		char ts[DT_TIMESTAMP_LEN];

		dtlog(DTLOG_WARN, "job %s: STALLED: rank %lld on %s (pid %lld) has written no output "
		      "and no metric for %lld s", j->id, json_get_int(f, "rank", -1),
		      json_get_str(f, "node", "?"), json_get_int(f, "pid", 0),
		      json_get_int(f, "idle_ms", 0) / 1000);
		dt_timestamp(ts, sizeof(ts));
		strbuf_addf(&ev, "%s STALLED rank %lld on %s pid %lld: no output and no metric for %lld s\n",
			    ts, json_get_int(f, "rank", -1), json_get_str(f, "node", "?"),
			    json_get_int(f, "pid", 0), json_get_int(f, "idle_ms", 0) / 1000);
		{
			/* events.log: one line per event, appended by dtsched only */
			struct strbuf rel = STRBUF_INIT, why = STRBUF_INIT;

			job_rel(j, "events.log", &rel);
			if (sf_append(j->shared_dir, rel.buf, ev.buf, ev.len, 0644, SF_OWNER, &why) < 0)
				dtlog(DTLOG_WARN, "job %s: cannot append to events.log: %s", j->id,
				      why.buf);
			strbuf_release(&rel);
			strbuf_release(&why);
		}
		strbuf_release(&ev);
	}
	if (!json_equal(stalled, j->stalled) &&
	    (json_array_size(stalled) != json_array_size(j->stalled))) {
		json_decref(j->stalled);
		j->stalled = json_incref(stalled);
		job_save(s, j);
	} else {
		json_decref(j->stalled);
		j->stalled = json_incref(stalled);
	}
out:
	json_decref(stalled);
	strbuf_release(&path);
}

/* Is the running job's attempt over?  Lock held. */
static void check_running(struct sched *s, struct job *j)
{
	struct hold *h = j->hold;
	int all_ok = 1, fail = 0, nodefail = 0, fail_rank = -1, fail_code = 1;
	const char *fail_node = NULL, *fail_at = NULL;
	struct strbuf why = STRBUF_INIT;

	if (j->cancel) {
		if (!j->reason)   /* jobs_cancel() may have said why */
			set_reason(j, "cancelled by the user");
		end_attempt(s, j, DT_JOB_CANCELLED);
		return;
	}
	if (j->launch || !h)
		return;
	if (j->launch_error) {
		set_reason(j, "%s", j->launch_error);
		end_attempt(s, j, DT_JOB_FAILED);
		return;
	}
	for (int k = 0; k < h->nr; k++) {
		struct node *n = node_find(s, h->place[k].node);

		if (!n || !strcmp(n->state, DT_NODE_DOWN)) {
			free(j->failed_node);
			j->failed_node = xstrdup(h->place[k].node);
			set_reason(j, "node '%s' went down (no heartbeat)", h->place[k].node);
			end_attempt(s, j, DT_JOB_NODE_FAIL);
			return;
		}
	}
	for (size_t i = 0; i < h->nr_tasks; i++) {
		const struct htask *t = &h->tasks[i];
		struct node *n = node_find(s, t->node);
		json_t *ht = n ? json_object_get(n->tasks, t->id) : NULL;
		const char *st, *ended;
		int code;

		if (!ht) {
			all_ok = 0;
			/* recorded, but its agent has sent its whole table since and never
			 * had it: the POST never reached it (dtsched stopped mid-launch) */
			if (n && n->last_hb_mono && !n->want_full && !t->gone &&
			    dt_mono_ms() - h->launched_ms > 2 * LAUNCH_GONE_MS) {
				if (!fail || strcmp("~", fail_at) < 0) {
					fail = 1;
					fail_at = "~";
					fail_rank = t->rank;
					fail_code = 1;
					fail_node = t->node;
					strbuf_reset(&why);
					strbuf_addstr(&why, "was never started (its agent does not know "
						      "the task)");
				}
			}
			continue;
		}
		st = json_get_str(ht, "state", "");
		if (!task_final(ht)) {
			all_ok = 0;
			continue;
		}
		code = json_is_integer(json_object_get(ht, "exit_code")) ?
			(int)json_get_int(ht, "exit_code", 1) : -1;
		if (!strcmp(st, DT_TASK_EXITED) && code == 0)
			continue;
		all_ok = 0;
		if (!strcmp(st, DT_TASK_LOST) && !strcmp(json_get_str(ht, "reason", ""), "NODE_FAIL"))
			nodefail = 1;
		ended = json_get_str(ht, "ended_at", "~");
		if (!fail || strcmp(ended, fail_at) < 0) {
			fail = 1;
			fail_at = ended;
			fail_rank = t->rank;
			fail_code = code < 0 ? 1 : code;
			fail_node = t->node;
			strbuf_reset(&why);
			if (!strcmp(st, DT_TASK_FAILED))
				strbuf_addf(&why, "could not start: %s", json_get_str(ht, "error", "?"));
			else if (!strcmp(st, DT_TASK_LOST))
				strbuf_addf(&why, "was lost: %s", json_get_str(ht, "reason", NULL) ?
					    json_get_str(ht, "reason", "") : json_get_str(ht, "error", "?"));
			else
				describe_code(&why, code);
		}
	}
	if (fail) {
		char *mnode = NULL;
		int mrank, mcode;

		if (fail_rank < 0 && mpi_first_failure(j, &mrank, &mcode, &mnode)) {
			fail_rank = mrank;
			fail_code = mcode;
			strbuf_reset(&why);
			describe_code(&why, mcode);
		}
		j->has_exit = 1;
		j->exit_code = fail_code;
		j->failed_rank = fail_rank;
		free(j->failed_node);
		j->failed_node = xstrdup(mnode ? mnode : fail_node);
		if (fail_rank >= 0)
			set_reason(j, "rank %d on %s %s", fail_rank, j->failed_node, why.buf);
		else
			set_reason(j, "mpirun on %s %s", j->failed_node, why.buf);
		free(mnode);
		end_attempt(s, j, nodefail ? DT_JOB_NODE_FAIL : DT_JOB_FAILED);
	} else if (all_ok) {
		j->has_exit = 1;
		j->exit_code = 0;
		set_reason(j, NULL);
		end_attempt(s, j, DT_JOB_COMPLETED);
	} else if (j->cfg.timeout_ms && dt_mono_ms() - j->run_mono > j->cfg.timeout_ms) {
		struct strbuf d = STRBUF_INIT;

		format_duration_human(&d, j->cfg.timeout_ms);
		set_reason(j, "ran longer than its timeout of %s", d.buf);
		strbuf_release(&d);
		end_attempt(s, j, DT_JOB_TIMEOUT);
	} else {
		check_stall(s, j);
	}
	strbuf_release(&why);
}

/* ------------------------------------------------------------- actions */

struct action {
	int kind;                 /* 0 = stop task, 1 = launch job */
	char *addr;
	int port;
	char *node;
	char *task;
	struct job *job;
	struct hold *hold;
};

struct actions {
	struct action *v;
	size_t nr, alloc;
};

static void act_stop(struct actions *a, struct node *n, const char *task)
{
	struct action *x;

	ALLOC_GROW(a->v, a->nr + 1, a->alloc);
	x = &a->v[a->nr++];
	memset(x, 0, sizeof(*x));
	x->addr = xstrdup(n->address && *n->address ? n->address : n->name);
	x->port = n->port;
	x->node = xstrdup(n->name);
	x->task = xstrdup(task);
}

static int hold_has_task(struct sched *s, const char *id)
{
	for (size_t h = 0; h < s->nr_holds; h++)
		for (size_t i = 0; i < s->holds[h]->nr_tasks; i++)
			if (!strcmp(s->holds[h]->tasks[i].id, id))
				return 1;
	return 0;
}

/* Released holds: stop what is still running; drop the hold once all is gone. */
static void check_holds(struct sched *s, struct actions *a)
{
	long long now = dt_mono_ms();

	for (size_t k = 0; k < s->nr_holds;) {
		struct hold *h = s->holds[k];
		int live = 0, resend = now - h->stop_sent_ms >= STOP_RESEND_MS;

		if (!h->released || h->busy) {
			k++;
			continue;
		}
		for (size_t i = 0; i < h->nr_tasks; i++) {
			struct htask *t = &h->tasks[i];
			struct node *n = node_find(s, t->node);
			json_t *ht = n ? json_object_get(n->tasks, t->id) : NULL;

			if (!n || !strcmp(n->state, DT_NODE_DOWN))
				continue;     /* unreachable; stopped as an orphan if it returns */
			if (ht ? task_final(ht) : (t->gone || now - h->launched_ms > LAUNCH_GONE_MS))
				continue;
			live++;
			if (resend)
				act_stop(a, n, t->id);
		}
		if (resend && live)
			h->stop_sent_ms = now;
		if (!live) {
			dtlog(DTLOG_DEBUG, "job %s: slots of an attempt freed", h->job);
			hold_remove(s, h);
			sched_wake(s);
			continue;
		}
		k++;
	}
}

/* An orted task of `attempt` of j: "<job>.<attempt>.orted-<host>" (agent/rsh.c). */
static int is_orted_of(const char *id, const struct job *j, int attempt)
{
	char prefix[64];

	snprintf(prefix, sizeof(prefix), "%s.%d." DT_ORTED_TASK_TAG, j->id, attempt);
	return starts_with(id, prefix);
}

/* Tasks of jobs that no hold knows (a node back from DOWN, a restart), and
 * the orteds of an attempt that has ended. */
static void check_orphans(struct sched *s, struct actions *a)
{
	static long long last;
	long long now = dt_mono_ms();

	if (now - last < ORPHAN_SCAN_MS)
		return;
	last = now;
	for (size_t i = 0; i < s->nr; i++) {
		struct node *n = s->nodes[i];
		json_t *t;
		const char *id;

		if (strcmp(n->state, DT_NODE_UP) && strcmp(n->state, DT_NODE_DRAINED))
			continue;
		json_object_foreach(n->tasks, id, t) {
			const char *jid = json_get_str(t, "job_id", NULL);
			long long sent = json_get_int(s->orphans, id, 0);
			struct job *j;

			if (!jid || task_final(t) || !(j = job_find(s, jid)) || hold_has_task(s, id))
				continue;
			if (j->hold && is_orted_of(id, j, j->attempt))
				continue;     /* started by the attempt's mpirun (agent/rsh.h) */
			/*
			 * The attempt just ended with mpirun's exit: its orteds on the
			 * other nodes are exiting too, but their exit reports can be a
			 * heartbeat late.  Stopping them then made an orted of a job
			 * that ended normally exit 143 (SIGTERM) instead of 0.
			 */
			if (now < j->orted_grace_ms && is_orted_of(id, j, j->orted_attempt))
				continue;
			if (sent && now - sent < STOP_RESEND_MS)
				continue;
			dtlog(DTLOG_WARN, "task '%s' of job %s on '%s' belongs to no live attempt; "
			      "stopping it", id, jid, n->name);
			json_object_set_new(s->orphans, id, json_integer(now));
			act_stop(a, n, id);
		}
	}
}

/* A kept-alive client per agent, from cache c (one cache per thread). */
static struct dt_httpc *client_for(struct sched *s, struct jobs_clients *c, const char *addr,
				   int port)
{
	char key[300];
	struct cli *x;

	snprintf(key, sizeof(key), "%s:%d", addr, port);
	for (size_t i = 0; i < c->nr; i++)
		if (!strcmp(c->v[i]->key, key))
			return &c->v[i]->c;
	ALLOC_GROW(c->v, c->nr + 1, c->alloc);
	x = xcalloc(1, sizeof(*x));
	c->v[c->nr++] = x;
	snprintf(x->key, sizeof(x->key), "%s", key);
	dt_httpc_init(&x->c, addr, port, &s->key);
	x->c.timeout_ms = 5000;
	x->c.connect_timeout_ms = 2000;
	return &x->c;
}

static void do_stop(struct sched *s, struct action *x)
{
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;
	json_t *body = json_pack("{s:i}", "grace_ms", STOP_GRACE_MS), *reply = NULL;
	int code;

	strbuf_addf(&path, "%s%s", DT_PATH_TASK_PREFIX, x->task);
	code = dt_httpc_request(client_for(s, s->clients, x->addr, x->port), "DELETE", path.buf, body,
				&reply, &err);
	if (code < 0 || code >= 500)
		dtlog(DTLOG_WARN, "cannot stop task '%s' on '%s': %s", x->task, x->node,
		      code < 0 ? err.buf : dt_httpc_reply_error(reply, code));
	pthread_mutex_lock(&s->lock);
	if (code == 404 || code == 200) {
		/* final or unknown to its agent: gone */
		for (size_t h = 0; h < s->nr_holds; h++)
			for (size_t i = 0; i < s->holds[h]->nr_tasks; i++)
				if (!strcmp(s->holds[h]->tasks[i].id, x->task))
					s->holds[h]->tasks[i].gone = 1;
	}
	pthread_mutex_unlock(&s->lock);
	json_decref(body);
	json_decref(reply);
	strbuf_release(&path);
	strbuf_release(&err);
}

struct post {
	char *addr, *node, *id;
	int port, rank;
	json_t *body;
};

/*
 * What the plan of j takes from the cluster and the job besides its
 * placement, the same for the launch and for --dry-run; the master node's
 * ssh_config and bin_dir for the mpi launcher.  Lock held; lo points into
 * s->cc and j, so it is used before the lock is let go.
 */
static void launch_opts_from(struct sched *s, const struct job *j, struct launch_opts *lo,
			     const char *ssh_config, const char *bin_dir)
{
	memset(lo, 0, sizeof(*lo));
	lo->submit_dir = j->submit_dir;
	lo->attempt = j->attempt;
	lo->max_restarts = j->cfg.retries;
	if (s->cc)
		lo->setup_env = &s->cc->setup.env;
	if (j->cfg.launcher == LAUNCHER_MPI) {
		lo->ssh_config = ssh_config;
		lo->bin_dir = bin_dir;
		lo->orted_ssh = s->cc && s->cc->mpi.orted_ssh;
	}
}

/*
 * Launch a placed job: port, plan, files, one task per rank (or mpirun).  On
 * a launch thread (launch_thread), with its own clients `cc`; h is the hold
 * it was started for, pinned (busy) so check_holds keeps it.  The lock is
 * taken between the requests; if the attempt ended meanwhile (cancel, node
 * DOWN), j->hold is no longer h and nothing more is done for it.  The
 * caller (launch_thread) clears j->launch when it returns.
 */
static void do_launch(struct sched *s, struct job *j, struct hold *h, struct jobs_clients *cc)
{
	struct launch_node *ln;
	struct launch_opts lo;
	struct launch_plan plan;
	struct strbuf err = STRBUF_INIT, sb = STRBUF_INIT;
	char *maddr, *resume = NULL, *bin_dir = NULL, *ssh_config = NULL, *iface = NULL;
	int mport, port = 0, nr, code;
	struct post *posts = NULL;
	size_t nr_posts = 0;
	json_t *reply = NULL, *req;

	/* 1. what to ask the master node for */
	pthread_mutex_lock(&s->lock);
	if (j->hold != h || j->launch != LAUNCH_RUNNING) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	{
		struct node *m = node_find(s, h->place[0].node);

		maddr = xstrdup(m && m->address && *m->address ? m->address : h->place[0].node);
		mport = m ? m->port : 0;
		if (m && m->bin_dir)
			bin_dir = xstrdup(m->bin_dir);
		if (m && m->ssh_config)
			ssh_config = xstrdup(m->ssh_config);
		if (s->cc && s->cc->network.interface)
			iface = xstrdup(s->cc->network.interface);
	}
	pthread_mutex_unlock(&s->lock);

	/* 2. a free port on the master node (MASTER_PORT) */
	req = json_object();
	code = dt_httpc_request(client_for(s, cc, maddr, mport), "POST", DT_PATH_PORTS, req, &reply,
				&err);
	json_decref(req);
	if (code == 200)
		port = (int)json_get_int(reply, "port", 0);
	json_decref(reply);
	reply = NULL;

	pthread_mutex_lock(&s->lock);
	if (j->hold != h) {           /* ended while we asked: nothing started */
		pthread_mutex_unlock(&s->lock);
		goto out;
	}
	if (!port) {
		strbuf_reset(&sb);
		strbuf_addf(&sb, "cannot get a free port on master node '%s': %s", h->place[0].node,
			    code < 0 ? err.buf : "no free port in 29500-29999");
		j->launch_error = strbuf_detach(&sb, NULL);
		pthread_mutex_unlock(&s->lock);
		goto out;
	}
	j->master_port = port;
	if (j->attempt > 0)
		resume = latest_checkpoint(j);

	/* 3. the plan (what `dtctl run --dry-run` shows) and the job dir files */
	nr = h->nr;
	ln = xcalloc((size_t)nr, sizeof(*ln));
	{
		char **slots = xcalloc((size_t)nr, sizeof(char *));

		for (int k = 0; k < nr; k++) {
			struct strbuf sl = STRBUF_INIT;

			for (int i = 0; i < h->place[k].nslots; i++)
				strbuf_addf(&sl, "%s%d", i ? "," : "", h->place[k].slot[i]);
			slots[k] = strbuf_detach(&sl, NULL);
			ln[k].name = h->place[k].node;
			ln[k].address = h->place[k].address;
			ln[k].host = h->place[k].address;
			ln[k].slots = j->gpu ? slots[k] : NULL;
			{
				struct node *nk = node_find(s, h->place[k].node);

				ln[k].agent_port = nk ? nk->port : 0;
			}
		}
		launch_opts_from(s, j, &lo, ssh_config, bin_dir);
		lo.job_id = j->id;
		lo.job_dir = j->job_dir;
		lo.master_port = port;
		lo.resume = resume;
		lo.net_interface = iface;
		strbuf_reset(&err);
		if (launch_plan_build(&plan, &j->cfg, ln, nr, &lo, &err) < 0) {
			j->launch_error = xstrdup(err.buf);
			for (int k = 0; k < nr; k++)
				free(slots[k]);
			free(slots);
			free(ln);
			pthread_mutex_unlock(&s->lock);
			goto out;
		}
		for (int k = 0; k < nr; k++)
			free(slots[k]);
		free(slots);
	}
	strbuf_reset(&sb);
	json_append(&sb, j->spec);
	strbuf_addch(&sb, '\n');
	posts = xcalloc(plan.nr_tasks, sizeof(*posts));
	for (size_t i = 0; i < plan.nr_tasks; i++) {
		struct launch_task *t = &plan.tasks[i];
		struct post *p = &posts[nr_posts++];
		json_t *argv = json_array(), *env = json_object();
		struct strbuf id = STRBUF_INIT;
		struct node *n = node_find(s, h->place[t->node].node);

		for (size_t a = 0; a < t->argv.nr; a++)
			json_array_append_new(argv, json_string(t->argv.v[a]));
		for (size_t e = 0; e < t->env.nr; e++) {
			const char *eq = strchr(t->env.v[e], '=');
			char *name = xstrndup(t->env.v[e], (size_t)(eq - t->env.v[e]));

			json_object_set_new(env, name, json_string(eq + 1));
			free(name);
		}
		if (t->rank >= 0)
			strbuf_addf(&id, "%s.%d.r%d", j->id, j->attempt, t->rank);
		else
			strbuf_addf(&id, "%s.%d.mpirun", j->id, j->attempt);
		p->addr = xstrdup(h->place[t->node].address);
		p->port = n ? n->port : 0;
		p->node = xstrdup(h->place[t->node].node);
		p->id = strbuf_detach(&id, NULL);
		p->rank = t->rank;
		p->body = json_pack("{s:s,s:o,s:o,s:s,s:i,s:s,s:i}", "id", p->id, "argv", argv,
				    "env", env, "log", t->log, "grace_ms", STOP_GRACE_MS,
				    "job_id", j->id, "rank", t->rank);
		/* the agent walks the log's path below the shared dir without links */
		json_object_set_new(p->body, "log_root", json_string(j->shared_dir));
		if (plan.cwd)
			json_object_set_new(p->body, "cwd", json_string(plan.cwd));
		if (plan.submit_dir)
			json_object_set_new(p->body, "submit_dir", json_string(plan.submit_dir));
		if (t->cuda_visible_devices)
			json_object_set_new(p->body, "cuda_visible_devices",
					    json_string(t->cuda_visible_devices));
		/* recorded before it is started, so a restarted dtsched knows it */
		hold_add_task(h, p->node, p->id, p->rank, 0);
	}
	h->launched_ms = dt_mono_ms();
	job_save(s, j);
	free(ln);
	pthread_mutex_unlock(&s->lock);

	/* the job dir files, outside the lock (the shared dir may be slow NFS);
	 * job_dir and shared_dir never change once the job is queued */
	job_file(j, "hostfile", plan.hostfile, strlen(plan.hostfile));
	job_file(j, "job.yaml", sb.buf, sb.len);   /* JSON is YAML */
	launch_plan_release(&plan);

	/* 4. start every task */
	for (size_t i = 0; i < nr_posts; i++) {
		struct post *p = &posts[i];

		strbuf_reset(&err);
		code = dt_httpc_request(client_for(s, cc, p->addr, p->port), "POST", DT_PATH_TASKS,
					p->body, &reply, &err);
		if (code != 201) {
			pthread_mutex_lock(&s->lock);
			if (!j->launch_error && j->hold == h) {
				strbuf_reset(&sb);
				strbuf_addf(&sb, "cannot start %s%d on node '%s': %s",
					    p->rank >= 0 ? "rank " : "mpirun", p->rank >= 0 ? p->rank : 0,
					    p->node, code < 0 ? err.buf : dt_httpc_reply_error(reply, code));
				j->launch_error = strbuf_detach(&sb, NULL);
			}
			for (size_t k = 0; k < h->nr_tasks; k++)
				if (!strcmp(h->tasks[k].id, p->id))
					h->tasks[k].gone = 1;
			pthread_mutex_unlock(&s->lock);
		}
		json_decref(reply);
		reply = NULL;
	}
	dtlog(DTLOG_INFO, "job %s: launched %zu task(s) on %d node(s), master %s:%d%s%s", j->id,
	      nr_posts, nr, maddr, port, resume ? ", resuming from " : "", resume ? resume : "");
out:
	for (size_t i = 0; i < nr_posts; i++) {
		free(posts[i].addr);
		free(posts[i].node);
		free(posts[i].id);
		json_decref(posts[i].body);
	}
	free(posts);
	free(maddr);
	free(resume);
	free(bin_dir);
	free(ssh_config);
	free(iface);
	strbuf_release(&err);
	strbuf_release(&sb);
}

struct launch_arg {
	struct sched *s;
	struct job *j;
	struct hold *h;
};

/*
 * One placed job's launch, off the main thread: the main loop goes on
 * ending, placing and launching other jobs while this one waits for its
 * agents (in a sweep, eight trials ending together used to be launched one
 * after another, each behind the requests of the one before, and the ends
 * that arrived meanwhile waited too).
 */
static void *launch_thread(void *arg)
{
	struct launch_arg *la = arg;
	struct jobs_clients own = { NULL, 0, 0, 0 };

	do_launch(la->s, la->j, la->h, &own);
	clients_release(&own);
	pthread_mutex_lock(&la->s->lock);
	la->h->busy--;
	if (la->j->hold == la->h && la->j->launch == LAUNCH_RUNNING)
		la->j->launch = 0;
	sched_wake(la->s);     /* a launch error or an early exit is handled at once */
	/* last: once this is 0 (and the lock free) jobs_release may free s */
	la->s->clients->launches--;
	pthread_mutex_unlock(&la->s->lock);
	free(la);
	return NULL;
}

void jobs_step(struct sched *s)
{
	struct actions a = { NULL, 0, 0 };
	struct launch_arg **launch = NULL;
	size_t nr_launch = 0, alloc_launch = 0;

	pthread_mutex_lock(&s->lock);
	/* every write of this step (transitions, reasons, holds) in one commit */
	db_begin(s);
	cluster_refresh(s);
	for (size_t i = 0; i < s->nr_jobs; i++)
		if (!strcmp(s->jobs[i]->state, DT_JOB_RUNNING))
			check_running(s, s->jobs[i]);
	check_holds(s, &a);
	check_orphans(s, &a);
	schedule_pending(s);
	for (size_t i = 0; i < s->nr_jobs; i++) {
		struct job *j = s->jobs[i];
		struct launch_arg *la;

		if (j->launch != 1 || !j->hold)
			continue;
		la = xmalloc(sizeof(*la));
		la->s = s;
		la->j = j;
		la->h = j->hold;
		j->launch = LAUNCH_RUNNING;
		j->hold->busy++;
		s->clients->launches++;
		ALLOC_GROW(launch, nr_launch + 1, alloc_launch);
		launch[nr_launch++] = la;
	}
	db_commit(s);
	pthread_mutex_unlock(&s->lock);

	for (size_t i = 0; i < a.nr; i++) {
		do_stop(s, &a.v[i]);
		free(a.v[i].addr);
		free(a.v[i].node);
		free(a.v[i].task);
	}
	for (size_t i = 0; i < nr_launch; i++) {
		pthread_t t;
		pthread_attr_t at;
		int started;

		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		started = !pthread_create(&t, &at, launch_thread, launch[i]);
		pthread_attr_destroy(&at);
		if (!started)
			launch_thread(launch[i]);   /* no thread to be had: here, then */
	}
	free(a.v);
	free(launch);
}

/* -------------------------------------------------------------- handlers */

/*
 * Queue a checked job: its row first (the row's seq is the id), then the job
 * dir on the shared dir, then PENDING with `reason`.  On failure -1 with one
 * message in err, the row removed again and the job still the caller's.
 */
static int job_enqueue(struct sched *s, struct job *j, const char *shared, const char *reason,
		       struct strbuf *err)
{
	long long floor = 0;

	/*
	 * Ids never repeat for a cluster, even after state.db was lost or the head
	 * was set up again: an id whose job dir exists on the shared dir belongs
	 * to an earlier job, so the counter jumps past the highest one there.
	 */
	/* the row and its data in one commit, done before the reply is queued */
	db_begin(s);
	for (int tries = 0;; tries++) {
		sqlite3_stmt *st;
		int rc;

		if (floor)
			rc = sqlite3_prepare_v2(s->db, "INSERT INTO jobs(seq, state, updated_us) "
						"VALUES(?, 'PENDING', 0)", -1, &st, NULL);
		else
			rc = sqlite3_prepare_v2(s->db, "INSERT INTO jobs(state, updated_us) "
						"VALUES('PENDING', 0)", -1, &st, NULL);
		if (rc == SQLITE_OK) {
			if (floor)
				sqlite3_bind_int64(st, 1, floor);
			rc = sqlite3_step(st);
			sqlite3_finalize(st);
		}
		if (rc != SQLITE_DONE) {
			strbuf_addf(err, "cannot store the job: %s", sqlite3_errmsg(s->db));
			db_commit(s);
			return -1;
		}
		j->seq = sqlite3_last_insert_rowid(s->db);
		snprintf(j->id, sizeof(j->id), "j-%06lld", j->seq);
		{
			struct strbuf d = STRBUF_INIT;

			strbuf_addf(&d, "%s/jobs/%s", shared, j->id);
			free(j->job_dir);
			j->job_dir = strbuf_detach(&d, NULL);
		}
		if (job_mkdirs(j, err) == 0)
			break;
		if (sqlite3_prepare_v2(s->db, "DELETE FROM jobs WHERE seq=?", -1, &st, NULL) == SQLITE_OK) {
			sqlite3_bind_int64(st, 1, j->seq);
			sqlite3_step(st);
			sqlite3_finalize(st);
		}
		if (errno != EEXIST || tries >= 3) {
			strbuf_addf(err, " (is shared_dir '%s' mounted on the head?)", shared);
			db_commit(s);
			return -1;
		}
		strbuf_reset(err);
		floor = highest_job_dir(shared);
		floor = (floor > j->seq ? floor : j->seq) + 1;
		dtlog(DTLOG_WARN, "job dir '%s' exists from an earlier head: job ids go on from "
		      "j-%06lld", j->job_dir, floor);
	}
	j->submitted_us = dt_now_us();
	set_reason(j, "%s", reason);
	history_add(j, DT_JOB_PENDING, "submitted");
	job_save(s, j);
	db_commit(s);
	write_state_file(j);
	ALLOC_GROW(s->jobs, s->nr_jobs + 1, s->alloc_jobs);
	s->jobs[s->nr_jobs++] = j;
	return 0;
}

static void h_submit(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct strbuf err = STRBUF_INIT, reason = STRBUF_INIT;
	const char *shared = json_get_str(req->json, "shared_dir", NULL);
	int dry = json_is_true(json_object_get(req->json, "dry_run"));
	struct job *j = job_new();
	struct pool p = { NULL, 0, 0 };
	struct place_result *res = xmalloc(sizeof(*res));
	enum place_status st;
	json_t *v;

	if (!req->json || !json_object_get(req->json, "job")) {
		dt_http_error(resp, 400, "a job request needs {\"job\": {...}, \"shared_dir\": \"...\"}");
		goto out_nolock;
	}
	if (job_config_from_json(&j->cfg, json_object_get(req->json, "job"), &err) < 0) {
		dt_http_error(resp, 400, "%s", err.buf);
		goto out_nolock;
	}
	if (!shared || shared[0] != '/') {
		dt_http_error(resp, 400, "'shared_dir' must be an absolute path (the cluster's shared dir)");
		goto out_nolock;
	}
	v = json_object_get(req->json, "submit_dir");
	if (v && !json_is_null(v) && (!json_is_string(v) || json_string_value(v)[0] != '/' ||
				      strlen(json_string_value(v)) != json_string_length(v) ||
				      json_string_length(v) >= 4096)) {
		dt_http_error(resp, 400, "'submit_dir' must be an absolute path (where dtctl ran)");
		goto out_nolock;
	}
	job_derive(j);
	j->spec = job_config_to_json(&j->cfg);
	j->name = xstrdup(j->cfg.name ? j->cfg.name : "job");
	j->user = xstrdup(json_get_str(req->json, "user", ""));
	j->shared_dir = xstrdup(shared);
	if (json_get_str(req->json, "submit_dir", NULL))
		j->submit_dir = xstrdup(json_get_str(req->json, "submit_dir", NULL));

	pthread_mutex_lock(&s->lock);
	cluster_refresh(s);
	if (!s->nr) {
		dt_http_error(resp, 422, "no node has registered with dtsched yet: start the agents "
			      "('dtctl agents start') and check 'dtctl nodes'");
		goto out;
	}
	pool_build(s, &p, j->gpu);
	st = job_try_place(s, j, &p, res, &reason);
	if (st == PLACE_NEVER || st == PLACE_ERROR) {
		dt_http_error(resp, 422, "%s", reason.buf);
		goto out;
	}
	if (dry) {
		struct launch_node *ln;
		struct launch_opts lo;
		struct launch_plan plan;
		json_t *pl = json_array(), *o;
		char *slots[256];

		if (st == PLACE_WAIT) {
			/* show where it would go on an idle cluster */
			struct strbuf r2 = STRBUF_INIT;

			for (size_t i = 0; i < p.nr; i++) {
				memset(p.n[i].used, 0, sizeof(p.n[i].used));
				p.n[i].up = 1;
			}
			job_try_place(s, j, &p, res, &r2);
			strbuf_release(&r2);
		}
		ln = xcalloc((size_t)res->nr + 1, sizeof(*ln));
		for (int k = 0; k < res->nr; k++) {
			struct node *n = s->nodes[res->node[k]];
			struct strbuf sl = STRBUF_INIT;

			placement_format_slots(&sl, res, k, j->per_node);
			slots[k] = strbuf_detach(&sl, NULL);
			ln[k].name = n->name;
			ln[k].address = n->address && *n->address ? n->address : n->name;
			ln[k].host = ln[k].address;
			ln[k].slots = j->gpu ? slots[k] : NULL;
			ln[k].agent_port = n->port;
			json_array_append_new(pl, json_pack("{s:s,s:s,s:s}", "node", n->name,
							    "address", ln[k].address, "slots", slots[k]));
		}
		if (res->nr)
			launch_opts_from(s, j, &lo, s->nodes[res->node[0]]->ssh_config,
					 s->nodes[res->node[0]]->bin_dir);
		else
			memset(&lo, 0, sizeof(lo));
		lo.job_id = "j-DRYRUN";
		snprintf(j->id, sizeof(j->id), "j-DRYRUN");
		strbuf_reset(&err);
		strbuf_addf(&err, "%s/jobs/<id>", shared);
		lo.job_dir = err.buf;
		lo.master_port = 0;
		if (res->nr && s->cc && s->cc->network.interface)
			lo.net_interface = s->cc->network.interface;
		if (res->nr && launch_plan_build(&plan, &j->cfg, ln, res->nr, &lo, &reason) == 0) {
			o = json_pack("{s:b,s:s,s:s?,s:o,s:o,s:O}", "dry_run", 1, "state",
				      st == PLACE_OK ? DT_JOB_RUNNING : DT_JOB_PENDING, "reason",
				      st == PLACE_OK ? NULL : reason.buf, "placement", pl,
				      "plan", launch_plan_to_json(&plan), "spec", j->spec);
			launch_plan_release(&plan);
			dt_http_json(resp, 200, o);
		} else {
			json_decref(pl);
			dt_http_error(resp, 422, "cannot plan the job: %s", reason.buf);
		}
		for (int k = 0; k < res->nr; k++)
			free(slots[k]);
		free(ln);
		goto out;
	}
	strbuf_reset(&err);
	if (job_enqueue(s, j, shared, st == PLACE_WAIT ? reason.buf : "placing", &err) < 0) {
		dt_http_error(resp, 500, "%s", err.buf);
		goto out;
	}
	dtlog(DTLOG_INFO, "job %s (%s): submitted by '%s', %d node(s) x %d %s", j->id, j->name,
	      j->user, j->cfg.nodes, j->per_node, j->gpu ? "GPU(s)" : "process(es)");
	dt_http_json(resp, 201, json_pack("{s:o}", "job", job_json(s, j, 1)));
	j = NULL;
	sched_wake(s);
out:
	pthread_mutex_unlock(&s->lock);
out_nolock:
	if (j)
		job_free(j);
	free(p.n);
	free(res);
	strbuf_release(&err);
	strbuf_release(&reason);
}

static void h_list(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	json_t *arr = json_array();

	pthread_mutex_lock(&s->lock);
	for (size_t i = s->nr_jobs; i > 0; i--)
		json_array_append_new(arr, job_json(s, s->jobs[i - 1], 0));
	pthread_mutex_unlock(&s->lock);
	dt_http_json(resp, 200, json_pack("{s:o}", "jobs", arr));
}

/*
 * POST /v1/jobs/<id>/wait {since_version, timeout_ms}: the job as GET gives
 * it, as soon as its version differs from since_version (or it is final), or
 * after timeout_ms.  The request is parked in httpd meanwhile (no thread held);
 * job_save() wakes it.
 */
static void h_job_wait(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	const char *id = dt_http_arg(req, "id");
	long long since = json_get_int(req->json, "since_version", -1);
	long long timeout = json_get_int(req->json, "timeout_ms", 0);
	struct job *j;

	if (timeout < 0 || timeout > DT_JOB_WAIT_MAX_MS) {
		dt_http_error(resp, 400, "timeout_ms must be 0..%d", DT_JOB_WAIT_MAX_MS);
		return;
	}
	pthread_mutex_lock(&s->lock);
	j = job_find(s, id);
	if (!j)
		dt_http_error(resp, 404, "no job '%s'", id);
	else if (j->version == since && !state_final(j->state) && timeout > 0 && req->may_park)
		resp->park_ms = timeout;
	else
		dt_http_json(resp, 200, json_pack("{s:o}", "job", job_json(s, j, 1)));
	pthread_mutex_unlock(&s->lock);
}

/* GET /v1/jobs/<id>, and POST .../cancel (cancel: 1) */
static void job_reply(struct dt_http_request *req, struct dt_http_response *resp, void *data,
		      int cancel)
{
	struct sched *s = data;
	const char *id = dt_http_arg(req, "id");
	struct job *j;

	pthread_mutex_lock(&s->lock);
	j = job_find(s, id);
	if (!j) {
		dt_http_error(resp, 404, "no job '%s'", id);
	} else {
		if (cancel)
			jobs_cancel(s, j->id, NULL);
		dt_http_json(resp, 200, json_pack("{s:o}", "job", job_json(s, j, 1)));
	}
	pthread_mutex_unlock(&s->lock);
}

static void h_job(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	job_reply(req, resp, data, 0);
}

static void h_job_cancel(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	job_reply(req, resp, data, 1);
}

/* ------------------------------------------- internal API (sweeps.c) */

/*
 * Queue a job from its JSON spec, as POST /v1/jobs does (no dry run).  Lock
 * held.  0 with the id in `id`; -1 (invalid, cannot store) or -2 (can never
 * fit) with one message in err.  The row and the job dir are written before
 * it returns, inside whatever transaction the caller has open.
 */
int jobs_submit(struct sched *s, const json_t *spec, const char *shared, const char *submit_dir,
		const char *user, char *id, size_t idlen, struct strbuf *err)
{
	struct job *j = job_new();
	struct pool p = { NULL, 0, 0 };
	struct place_result *res = xmalloc(sizeof(*res));
	struct strbuf reason = STRBUF_INIT;
	enum place_status st;
	int ret = -1;

	if (job_config_from_json(&j->cfg, spec, err) < 0)
		goto out;
	job_derive(j);
	j->spec = job_config_to_json(&j->cfg);
	j->name = xstrdup(j->cfg.name ? j->cfg.name : "job");
	j->user = xstrdup(user ? user : "");
	j->shared_dir = xstrdup(shared);
	if (submit_dir && *submit_dir)
		j->submit_dir = xstrdup(submit_dir);
	cluster_refresh(s);
	pool_build(s, &p, j->gpu);
	st = job_try_place(s, j, &p, res, &reason);
	if (st == PLACE_NEVER || st == PLACE_ERROR) {
		strbuf_addbuf(err, &reason);
		ret = -2;
		goto out;
	}
	if (job_enqueue(s, j, shared, st == PLACE_WAIT ? reason.buf : "placing", err) < 0)
		goto out;
	snprintf(id, idlen, "%s", j->id);
	dtlog(DTLOG_INFO, "job %s (%s): submitted by '%s'", j->id, j->name, j->user);
	j = NULL;
	ret = 0;
	sched_wake(s);
out:
	if (j)
		job_free(j);
	free(p.n);
	free(res);
	strbuf_release(&reason);
	return ret;
}

/* Cancel as POST /v1/jobs/<id>/cancel does; lock held.  -1 if unknown. */
int jobs_cancel(struct sched *s, const char *id, const char *why)
{
	struct job *j = job_find(s, id);

	if (!j)
		return -1;
	if (!state_final(j->state) && !j->cancel) {
		j->cancel = 1;
		dtlog(DTLOG_INFO, "job %s: cancel requested%s%s", j->id, why ? ": " : "", why ? why : "");
		if (!strcmp(j->state, DT_JOB_PENDING)) {
			set_reason(j, "%s", why ? why : "cancelled by the user while pending");
			j->ended_us = dt_now_us();
			job_transition(s, j, DT_JOB_CANCELLED);
		} else {
			set_reason(j, "%s", why ? why : "cancelled by the user");
			job_save(s, j);
		}
		sched_wake(s);
	}
	return 0;
}

/* What a job is now; the pointers live while the lock is held.  -1 if unknown. */
int jobs_view(struct sched *s, const char *id, struct job_view *v)
{
	struct job *j = job_find(s, id);

	if (!j)
		return -1;
	v->state = j->state;
	v->reason = j->reason;
	v->job_dir = j->job_dir;
	v->shared_dir = j->shared_dir;
	v->attempt = j->attempt;
	v->cancelled = j->cancel;
	v->started_us = j->started_us;
	v->ended_us = j->ended_us;
	return 0;
}

/* Place pending jobs now (a sweep just queued trials); lock held. */
void jobs_schedule_now(struct sched *s)
{
	schedule_pending(s);
}

const struct dt_http_route jobs_routes[] = {
	{ "POST", DT_PATH_JOBS, 0, h_submit },
	{ "GET", DT_PATH_JOBS, 0, h_list },
	{ "GET", DT_PATH_JOB, 0, h_job },
	{ "POST", DT_PATH_JOB_CANCEL, 0, h_job_cancel },
	{ "POST", DT_PATH_JOB_WAIT, 0, h_job_wait },
};
const size_t jobs_nr_routes = ARRAY_SIZE(jobs_routes);
