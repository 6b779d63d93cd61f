/*
 * backend-agents.c - the agents backend (backend.h): ranks run as tasks of
 * our agents, one POST /v1/tasks per node (jobs-launch.c), stopped with
 * DELETE /v1/tasks/<id>, their ends learnt from the agents' heartbeats (the
 * node table's task states, nodes.c) and, for mpi jobs, from the rank
 * records in the job dir; before an attempt starts, the fabric gate and the
 * connectivity probe (fabric-head.c, probe.c) run.  The lifecycle reaches all
 * of it only through agents_backend.
 */
#include "jobs-int.h"
#include "hostrange.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "strvec.h"
#include "usage.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define ORPHAN_SCAN_MS 1000

/*
 * The node rank r of an mpi job ran on, by the plan (--map-by slot: hostfile
 * node r / per_node), as dtctl names it; what the rank's record says (the
 * host's name, which need not be the node's, nor resolve) only without one.
 */
static const char *rank_node(const struct job *j, int r, const char *recorded)
{
	const struct hold *h = j->hold;
	int k = j->per_node > 0 && r >= 0 ? r / j->per_node : -1;

	return h && k >= 0 && k < h->nr ? h->place[k].node : recorded;
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
			*node = xstrdup(rank_node(j, *rank, json_get_str(o, "node", "?")));
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

/* An orted task of `attempt` of j: "<job>.<attempt>.orted-<host>" (agent/rsh.c). */
static int is_orted_of(const char *id, const struct job *j, int attempt)
{
	char prefix[64];

	snprintf(prefix, sizeof(prefix), "%s.%d." DT_ORTED_TASK_TAG, j->id, attempt);
	return starts_with(id, prefix);
}

/*
 * For mpi jobs: the ranks' ends as their agents reported them (the
 * rank_exits of the attempt's mpirun task and of its orteds, protocol.h),
 * without waiting for Open MPI's own teardown.  1 when every rank of the
 * world has reported: *rank is then the first rank that failed (by its end;
 * -1 if none), with its exit *code and *sig.  Lock held.
 */
static int mpi_ranks_reported(struct sched *s, const struct job *j, int *rank, int *code, int *sig)
{
	const struct hold *h = j->hold;
	const char *best = NULL;
	char *seen;
	int n = 0;

	*rank = -1;
	if (j->cfg.launcher != LAUNCHER_MPI || !h || j->world <= 0)
		return 0;
	seen = xcalloc((size_t)j->world, 1);
	for (int k = 0; k < h->nr; k++) {
		struct node *nd = node_find(s, h->place[k].node);
		const char *id;
		json_t *t, *e;
		size_t i;

		json_object_foreach(nd ? nd->tasks : NULL, id, t) {
			int ours = is_orted_of(id, j, j->attempt);

			for (size_t x = 0; !ours && x < h->nr_tasks; x++)
				ours = !strcmp(h->tasks[x].id, id);
			if (!ours)
				continue;
			json_array_foreach(json_object_get(t, "rank_exits"), i, e) {
				long long r = json_get_int(e, "rank", -1);
				const char *ended = json_get_str(e, "ended_at", "");
				int c = (int)json_get_int(e, "exit_code", 1);

				if (r < 0 || r >= j->world || seen[r])
					continue;
				seen[r] = 1;
				n++;
				if (c && (!best || strcmp(ended, best) < 0)) {
					best = ended;
					*rank = (int)r;
					*code = c;
					*sig = (int)json_get_int(e, "signal", 0);
				}
			}
		}
	}
	free(seen);
	return n == j->world;
}

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
			hold_drop(s, h);
			sched_wake(s);
			continue;
		}
		k++;
	}
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

static void agents_stop(struct sched *s, const struct action *x)
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

static int node_lost(struct sched *s, const char *name)
{
	return node_gone(node_find(s, name));
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
 * A rank whose program is missing could not start (agent/supervise.c,
 * program_check: "'python' not found on PATH (...)"); the same is usually
 * true of every node of the job.  The nodes of the attempt whose task failed
 * with that same error, folded ("fcnode[1-4]"), into *folded; 1 while a task
 * has not got past its start yet (its node may be one more), for a moment.
 */
#define NOT_FOUND_ON_PATH "' not found on PATH"

static int nodes_with_error(struct sched *s, const struct hold *h, const char *err,
			    struct strbuf *folded)
{
	struct strvec names = STRVEC_INIT;
	int pending = 0;

	for (size_t i = 0; i < h->nr_tasks; i++) {
		struct node *n = node_find(s, h->tasks[i].node);
		json_t *ht = n ? json_object_get(n->tasks, h->tasks[i].id) : NULL;
		const char *st = json_get_str(ht, "state", DT_TASK_STARTING);

		if (!strcmp(st, DT_TASK_STARTING))
			pending = 1;
		else if (!strcmp(st, DT_TASK_FAILED) && !strcmp(json_get_str(ht, "error", ""), err) &&
			 strvec_find(&names, h->tasks[i].node) < 0)
			strvec_push(&names, h->tasks[i].node);
	}
	fold_names(folded, names.v, names.nr);
	strvec_clear(&names);
	return pending;
}

/* The ranks of the attempt on j->hold, from what the agents reported (backend.h). */
static json_t *agents_describe(struct sched *s, const struct job *j, int ending)
{
	json_t *a = json_array(), *r;
	const struct hold *h = j->hold;
	size_t i;

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
	return a;
}

/* Where the attempt on j->hold stands, from its tasks' states (backend.h). */
static enum attempt_status agents_attempt_poll(struct sched *s, struct job *j,
					       struct attempt_end *e)
{
	struct hold *h = j->hold;
	int all_ok = 1, fail = 0, nodefail = 0, fail_rank = -1, fail_code = 1, fail_sig = 0;
	const char *fail_node = NULL, *fail_at = NULL;
	struct strbuf *why = &e->why;

	for (int k = 0; k < h->nr; k++) {
		struct node *n = node_find(s, h->place[k].node);

		if (node_gone(n)) {
			e->node = xstrdup(h->place[k].node);
			strbuf_addf(why, "node '%s' went down (no heartbeat)", h->place[k].node);
			return ATTEMPT_NODE_DOWN;
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
					strbuf_reset(why);
					strbuf_addstr(why, "was never started (its agent does not know "
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
			fail_sig = (int)json_get_int(ht, "signal", 0);
			fail_node = t->node;
			strbuf_reset(why);
			if (!strcmp(st, DT_TASK_FAILED))
				strbuf_addf(why, "could not start: %s", json_get_str(ht, "error", "?"));
			else if (!strcmp(st, DT_TASK_LOST))
				strbuf_addf(why, "was lost: %s", json_get_str(ht, "reason", NULL) ?
					    json_get_str(ht, "reason", "") : json_get_str(ht, "error", "?"));
			else
				describe_code(why, code);
		}
	}
	if (!fail && !all_ok) {
		int rrank, rcode = 1, rsig = 0;

		if (mpi_ranks_reported(s, j, &rrank, &rcode, &rsig)) {
			/*
			 * Every rank has ended: the job is over now.  mpirun and
			 * its orteds finish their own teardown (~100 ms at 16
			 * nodes) while the hold keeps the slots; what is still
			 * running STOP_RESEND_MS later is stopped (check_holds).
			 */
			h->stop_sent_ms = dt_mono_ms();
			if (rrank < 0) {
				all_ok = 1;
			} else {
				fail = 1;
				fail_rank = rrank;
				fail_code = rcode;
				fail_sig = rsig;
				fail_node = rank_node(j, rrank, "?");
				strbuf_reset(why);
				describe_code(why, rcode);
			}
		}
	}
	if (fail && fail_rank >= 0 && starts_with(why->buf, "could not start: '") &&
	    strstr(why->buf, NOT_FOUND_ON_PATH)) {
		/* "'python' not found on fcnode[1-4] (Debian has python3): ..." */
		const char *err = why->buf + strlen("could not start: ");
		const char *at = strstr(err, NOT_FOUND_ON_PATH);
		struct strbuf folded = STRBUF_INIT, r = STRBUF_INIT;

		if (nodes_with_error(s, h, err, &folded) &&
		    dt_mono_ms() - h->launched_ms < LAUNCH_GONE_MS) {
			strbuf_release(&folded);
			return ATTEMPT_SETTLING;   /* the other nodes' answers are a moment away */
		}
		strbuf_addf(&r, "%.*s' not found on %s%s", (int)(at - err), err, folded.buf,
			    at + strlen(NOT_FOUND_ON_PATH));
		strbuf_reset(why);
		strbuf_addbuf(why, &r);
		strbuf_release(&r);
		strbuf_release(&folded);
		e->why_is_reason = 1;   /* the reason names the nodes, not one rank */
	}
	if (fail) {
		char *mnode = NULL;
		int mrank, mcode, counted_sig = fail_sig;

		if (fail_rank < 0 && mpi_first_failure(j, &mrank, &mcode, &mnode)) {
			fail_rank = mrank;
			fail_code = mcode;
			/*
			 * ranks/<r>.json is in the shared dir, which every job
			 * can write: good for the reason shown (describe_code:
			 * the logger records 128 + the signal), never for the
			 * node's quarantine, which counts only what an agent saw
			 * of processes it supervises (issue 26, B2)
			 */
			counted_sig = 0;
			strbuf_reset(why);
			describe_code(why, mcode);
		}
		e->rank = fail_rank;
		e->code = fail_code;
		e->signal = counted_sig;
		e->node_fail = nodefail;
		e->node = mnode ? mnode : xstrdup(fail_node);
		return ATTEMPT_FAILED;
	}
	return all_ok ? ATTEMPT_COMPLETED : ATTEMPT_RUNNING;
}

/* The ranks of the attempt on j->hold whose task is not final (backend.h). */
static size_t agents_live_ranks(struct sched *s, const struct job *j, struct rank_live **v,
				size_t *alloc)
{
	size_t nr = 0;

	for (size_t i = 0; j->hold && i < j->hold->nr_tasks; i++) {
		const struct htask *t = &j->hold->tasks[i];
		struct node *n = node_find(s, t->node);
		json_t *ht = n ? json_object_get(n->tasks, t->id) : NULL;
		int ranks = t->rank >= 0 ? 1 : j->world;

		if (ht && task_final(ht))
			continue;
		/* the mpirun task: every rank of the world, by its pid */
		for (int r = 0; r < ranks; r++) {
			ALLOC_GROW(*v, nr + 1, *alloc);
			(*v)[nr].rank = t->rank >= 0 ? t->rank : r;
			(*v)[nr].node = t->node;
			(*v)[nr].pid = json_get_int(ht, "pid", 0);
			nr++;
		}
	}
	return nr;
}

/* What the agents said of the attempt's log writes (backend.h). */
static void agents_log_loss(struct sched *s, const struct job *j, long long *lost, char **err)
{
	for (size_t i = 0; j->hold && i < j->hold->nr_tasks; i++) {
		struct node *n = node_find(s, j->hold->tasks[i].node);
		json_t *ht = n ? json_object_get(n->tasks, j->hold->tasks[i].id) : NULL;

		*lost += json_get_int(ht, "log_lost_lines", 0);
		if (!*err && json_get_str(ht, "log_error", NULL))
			*err = xstrdup(json_get_str(ht, "log_error", NULL));
	}
}

#define SIGNAL_TIMEOUT_MS 5000

/*
 * Signal sig to every rank of j's running attempt (backend.h): one POST
 * /v1/tasks/<id>/signal for each of its tasks (an mpi job's mpirun and the
 * orteds it started, whose trees hold the ranks), all at once; the
 * supervisors pass it on to every process of their tree.  Lock NOT held.
 */
static int agents_signal(struct sched *s, struct job *j, int sig, struct strbuf *err)
{
	struct agent_call *c = NULL;
	struct strvec paths = STRVEC_INIT;
	size_t nr = 0, alloc = 0;
	int ok = 0;
	json_t *body = json_pack("{s:i}", "signal", sig);

	pthread_mutex_lock(&s->lock);
	if (strcmp(j->state, DT_JOB_RUNNING) || !j->hold || j->launch || j->cancel) {
		strbuf_addf(err, "job %s is %s: no attempt of it is running", j->id,
			    strcmp(j->state, DT_JOB_RUNNING) ? j->state :
			    j->cancel ? "being cancelled" : "being launched");
		pthread_mutex_unlock(&s->lock);
		json_decref(body);
		return -1;
	}
	for (int k = 0; k < j->hold->nr; k++) {
		struct node *n = node_find(s, j->hold->place[k].node);
		const char *id;
		json_t *t;

		if (!n || node_gone(n))
			continue;
		json_object_foreach(n->tasks, id, t) {
			int ours = is_orted_of(id, j, j->attempt);

			for (size_t i = 0; !ours && i < j->hold->nr_tasks; i++)
				ours = !strcmp(j->hold->tasks[i].id, id) &&
					!strcmp(j->hold->tasks[i].node, n->name);
			if (!ours || task_final(t))
				continue;
			strvec_pushf(&paths, "%s%s%s", DT_PATH_TASK_PREFIX, id,
				     DT_PATH_SIGNAL_SUFFIX);
			ALLOC_GROW(c, nr + 1, alloc);
			agent_call_init(&c[nr], s, n, NULL, SIGNAL_TIMEOUT_MS);
			c[nr].body = json_incref(body);
			nr++;
		}
	}
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < nr; i++)
		c[i].path = paths.v[i];   /* paths.v moves while it grows: set once it is done */
	agent_calls(c, nr);
	for (size_t i = 0; i < nr; i++) {
		if (c[i].status == 200) {
			ok++;
		} else if (c[i].status != 409) {   /* 409: it ended meanwhile */
			dtlog(DTLOG_WARN, "job %s: cannot signal '%s' on '%s': %s", j->id,
			      c[i].path, c[i].name, c[i].err.buf);
			if (!err->len)
				strbuf_addf(err, "node '%s': %s", c[i].name, c[i].err.buf);
		}
		agent_call_release(&c[i]);
	}
	if (!ok && !err->len)
		strbuf_addf(err, "job %s: none of its ranks is running", j->id);
	free(c);
	strvec_clear(&paths);
	json_decref(body);
	return ok ? ok : -1;
}

/*
 * GPUs held by tasks that are no job's (started through the agent API):
 * backend.h.  node_derive() keeps them per node as the tasks change; reading
 * the tasks' JSON here, on every scheduling request, was a third of dtsched's
 * CPU in a long sweep.
 */
static void agents_gpus_taken(struct sched *s, const struct node *n, unsigned char *used,
			      int total)
{
	(void)s;
	for (int d = 0; d < total && d < NODE_MAX_GPUS; d++)
		if (n->nonjob_gpus[d / 64] >> (d % 64) & 1)
			used[d] = 1;
}

/* Once a step: stop what is left of attempts that are over, and orphans. */
static void agents_step(struct sched *s, struct actions *a)
{
	check_holds(s, a);
	check_orphans(s, a);
}

const struct sched_backend agents_backend = {
	.name = "agents",
	.gate = fabric_gate,
	.launch = agents_launch,
	.stop = agents_stop,
	.attempt_poll = agents_attempt_poll,
	.describe = agents_describe,
	.step = agents_step,
	.live_ranks = agents_live_ranks,
	.log_loss = agents_log_loss,
	.signal = agents_signal,
	.gpus_taken = agents_gpus_taken,
};
