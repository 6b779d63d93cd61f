/*
 * jobs.c - dtsched's job lifecycle: job files, job <-> JSON and SQLite, state
 * transitions, following running attempts (exits, stalls, timeouts, node
 * failures), ending and retrying them, stopping orphans, and the main step.
 * The queue and placement are in jobs-queue.c, the launch in jobs-launch.c,
 * the HTTP API in jobs-api.c; jobs-int.h holds what they share.  The whole
 * picture:
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
 *   unlock: launch (free port on the master node, one POST /v1/tasks per
 *           node with all of its ranks, or one mpirun task), stop
 *           (DELETE /v1/tasks/<id>)
 *
 * Every state change is written to SQLite (jobs table) and to the job dir
 * (<job_dir>/state, placement.json) before anything is done about it; the
 * job dir is made with the first of them (a job waiting since its submit
 * has none yet: job_id_free).
 * Tasks the agents report for a job attempt that is over (a node that was
 * DOWN comes back with its ranks still running) are stopped too.
 */
#include "jobs-int.h"
#include "jobspec.h"
#include "json.h"
#include "log.h"
#include "promtext.h"
#include "protocol.h"
#include "safefile.h"
#include "units.h"
#include "usage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define STALL_SCAN_MS 1000
/* an ended attempt's orteds exit by themselves once mpirun is gone: their exit
 * reports come with the next heartbeat, so they are not orphans before this */
#define ORTED_GRACE_MS 5000

/* --------------------------------------------------------------- files */

/*
 * Job dir files go through lib/safefile.h: every rank can write in its job
 * dir, and dtsched (maybe root) must never follow a link it planted, block
 * on its FIFO, or chown anything but what it just made.  As root on a shared
 * dir owned by someone else (NFS root_squash, the fake cluster), what
 * dtsched makes is handed to that owner (SF_OWNER: fchown on the fd) so
 * agents running as the cluster user can write their logs there.
 */

/* ------------------------------------------------------------ job <-> JSON */

/* ------------------------------------------------------------------ init */


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
		/* the attempt's, which an elastic restart may have made smaller */
		j->world = (int)json_get_int(o, "world_size", j->world);
		j->spec = json_incref(json_object_get(o, "spec"));
		j->name = xstrdup(json_get_str(o, "name", "job"));
		j->user = xstrdup(json_get_str(o, "user", ""));
		j->project = xstrdup(json_get_str(o, "project", j->user));
		j->preemptions = (int)json_get_int(o, "preemptions", 0);
		/* preempted when dtsched stopped: its grace is over */
		j->preempting = json_is_true(json_object_get(o, "preempting"));
		if (json_get_str(o, "preempted_by", NULL))
			j->preempted_by = xstrdup(json_get_str(o, "preempted_by", NULL));
		j->job_dir = xstrdup(json_get_str(o, "job_dir", ""));
		j->shared_dir = xstrdup(json_get_str(o, "shared_dir", ""));
		if (json_get_str(o, "submit_dir", NULL))
			j->submit_dir = xstrdup(json_get_str(o, "submit_dir", NULL));
		j->state = state_const(json_get_str(o, "state", NULL));
		if (json_get_str(o, "reason", NULL))
			j->reason = xstrdup(json_get_str(o, "reason", NULL));
		j->attempt = (int)json_get_int(o, "attempt", 0);
		{
			json_t *r = json_object_get(o, "restart");

			j->first_started_us = dt_timestamp_parse(json_get_str(o, "first_started_at",
									      ""));
			if (j->first_started_us < 0)
				j->first_started_us = 0;
			j->lost_us = json_get_int(r, "lost_us", 0);
			j->lost_slot_s = json_number_value(json_object_get(r, "lost_slot_s"));
			j->restart_from_us = json_get_int(r, "from_us", 0);
			j->restart_world = (int)json_get_int(r, "world", 0);
		}
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
		if (json_is_array(json_object_get(o, "past_stalls"))) {
			json_decref(j->past_stalls);
			j->past_stalls = json_incref(json_object_get(o, "past_stalls"));
		}
		if (json_is_array(json_object_get(o, "avoid"))) {
			json_decref(j->avoid);
			j->avoid = json_incref(json_object_get(o, "avoid"));
		}
		if (json_is_object(json_object_get(o, "fabric")))
			j->fabric = json_incref(json_object_get(o, "fabric"));
		if (json_is_object(json_object_get(o, "slurm")))
			j->slurm = json_deep_copy(json_object_get(o, "slurm"));
		j->requeues = (int)json_get_int(o, "requeues", 0);
		if (json_is_object(json_object_get(o, "preflight"))) {
			j->preflight = json_deep_copy(json_object_get(o, "preflight"));
			/* a connectivity check that was running died with the old dtsched */
			json_object_set_new(j->preflight, "probe", json_false());
		}
		if (json_is_array(json_object_get(o, "placement"))) {
			json_decref(j->placement);
			j->placement = json_incref(json_object_get(o, "placement"));
		}
		if (json_is_object(json_object_get(o, "hang")))
			j->hang = json_incref(json_object_get(o, "hang"));
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
	jobs_live_rebuild(s);
	if (s->nr_jobs)
		dtlog(DTLOG_INFO, "loaded %zu job(s), %zu slot hold(s)", s->nr_jobs, s->nr_holds);
}

int jobs_init(struct sched *s)
{
	if (sqlite3_prepare_v2(s->db, "UPDATE jobs SET id=?1, state=?2, updated_us=?3, data=?4 "
			       "WHERE seq=?5", -1, &s->st_job, NULL) != SQLITE_OK)
		return -1;
	s->orphans = json_object();
	s->clients = xcalloc(1, sizeof(*s->clients));
	jobs_load(s);
	{
		sqlite3_stmt *st;

		if (sqlite3_prepare_v2(s->db, "SELECT seq FROM sqlite_sequence WHERE name='jobs'",
				       -1, &st, NULL) == SQLITE_OK) {
			if (sqlite3_step(st) == SQLITE_ROW)
				s->jobs_seq_max = sqlite3_column_int64(st, 0);
			sqlite3_finalize(st);
		}
	}
	return 0;
}

void jobs_release(struct sched *s)
{
	if (s->backend && s->backend->release)
		s->backend->release(s);
	free(s->jstats);
	s->jstats = NULL;
	acct_release(s);
	fair_cache_free(s);
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
	free(s->live);
	free(s->running);
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

/* ------------------------------------------------------------- ending */

/* The attempt is over: release its slots (stopping what is left), then
 * requeue for a retry or end in `state`.  Lock held. */
/*
 * Output lines this attempt's ranks could not write to their logs (full or
 * failing shared disk): what the backend learnt (backend.h, log_loss; the
 * agents' task states), and for mpi jobs ranks/<r>.json, which each rank
 * logger writes at its end.
 */
static void count_log_loss(struct sched *s, struct job *j)
{
	long long lost = 0;
	char *err = NULL;
	json_t *recs, *o;
	size_t r;

	if (s->backend->log_loss && j->hold)
		s->backend->log_loss(s, j, &lost, &err);
	recs = j->cfg.launcher == LAUNCHER_MPI ? mpi_rank_records(j) : json_array();
	json_array_foreach(recs, r, o) {
		lost += json_get_int(o, "log_lost_lines", 0);
		if (!err && json_get_str(o, "log_error", NULL))
			err = xstrdup(json_get_str(o, "log_error", NULL));
	}
	json_decref(recs);
	if (lost || err) {
		j->log_lost_lines += lost;
		if (!j->log_error)
			j->log_error = xstrdup(err ? err : "write error");
		dtlog(DTLOG_WARN, "job %s: %lld output line(s) of its ranks could not be logged: %s",
		      j->id, lost, j->log_error);
	}
	free(err);
}

/*
 * The stalls in j->stalled that `now_stalled` no longer has (NULL: none, the
 * attempt ended) are over: they move to j->past_stalls with when they began
 * (the last scan's idle time before), when and how they cleared, so that a
 * finished job never shows a stall as current (docs/run.md, "stall").
 */
static void stalls_cleared(struct job *j, const json_t *now_stalled, const char *by)
{
	long long now = dt_now_us();
	char since[DT_TIMESTAMP_LEN], at[DT_TIMESTAMP_LEN];
	size_t i, k;
	json_t *o, *n;

	dt_timestamp_format(at, sizeof(at), now);
	json_array_foreach(j->stalled, i, o) {
		int still = 0;

		json_array_foreach(now_stalled, k, n)
			if (json_get_int(n, "rank", -1) == json_get_int(o, "rank", -2))
				still = 1;
		if (still)
			continue;
		dt_timestamp_format(since, sizeof(since), now - json_get_int(o, "idle_ms", 0) * 1000);
		n = json_deep_copy(o);
		json_object_set_new(n, "since", json_string(since));
		json_object_set_new(n, "cleared_at", json_string(at));
		json_object_set_new(n, "cleared_by", json_string(by));
		/* a rank silent just over stall_after again and again: the latest 100 */
		if (json_array_size(j->past_stalls) >= 100)
			json_array_remove(j->past_stalls, 0);
		json_array_append_new(j->past_stalls, n);
	}
	if (!now_stalled)
		json_array_clear(j->stalled);
}

/*
 * requeue: the backend's resource manager took the attempt back and queued
 * the job again (Slurm's requeue after preemption or a node failure): it
 * restarts whatever its retries, as restart j->attempt + 1, and `state` is
 * only what its history says ("REQUEUED").
 */
static void end_attempt_as(struct sched *s, struct job *j, const char *state, int requeue)
{
	const char *ended = state;
	int strict, retry, preempted;

	count_log_loss(s, j);
	strict = j->log_lost_lines && j->cfg.strict_logging && !strcmp(state, DT_JOB_COMPLETED);
	if (strict)
		state = DT_JOB_FAILED;
	/* preempted (fairshare.h): requeued however it ended, and not counted as a retry */
	preempted = j->preempting && !j->cancel;
	/* restarts the backend made (a requeue) and preemptions cost no retry */
	retry = !j->cancel && (preempted || requeue ||
			       ((!strcmp(state, DT_JOB_FAILED) || !strcmp(state, DT_JOB_NODE_FAIL)) &&
				j->attempt - j->preemptions - j->requeues < j->cfg.retries));
	{
		/* its subscribers (the fabric test's verdict, goodput's lost work)
		 * read the hold and the attempt's start, and may say why in j->reason */
		struct job_event_info info = { .rank = -1, .from = j->state, .to = ended,
					       .retry = retry };

		job_events_emit(&s->events, s, j, JOB_EV_ATTEMPT_ENDED, &info);
	}
	if (strict) {
		j->exit_code = 1;
		set_reason(j, "%lld output line%s could not be logged (%s) and the job asks for "
			   "strict_logging", j->log_lost_lines, j->log_lost_lines == 1 ? "" : "s",
			   j->log_error);
	}
	j->orted_attempt = j->attempt;
	j->orted_grace_ms = dt_mono_ms() + ORTED_GRACE_MS;
	stalls_cleared(j, NULL, retry ? "retry" : "end");
	if (j->hold) {
		json_decref(j->last_ranks);
		j->last_ranks = ranks_json(s, j, 1);
		j->hold->released = 1;
		j->hold->released_ms = dt_mono_ms();
		j->hold = NULL;
	}
	j->launch = 0;
	j->preempting = 0;
	j->preempt_deadline_ms = 0;
	if (retry && preempted) {
		history_add(j, "PREEMPTED", j->reason);
		j->preemptions++;
		j->attempt++;
		set_reason(j, "requeued after preemption by %s (restart %d; %d preemption%s)",
			   j->preempted_by ? j->preempted_by : "?", j->attempt, j->preemptions,
			   j->preemptions == 1 ? "" : "s");
		j->started_us = 0;
		job_transition(s, j, DT_JOB_PENDING);
	} else if (retry) {
		struct strbuf why = STRBUF_INIT;

		strbuf_addf(&why, "%s%s%s", state, j->reason ? ": " : "", j->reason ? j->reason : "");
		history_add(j, state, j->reason);
		if (j->failed_node && !json_str_in(j->avoid, j->failed_node))
			json_array_append_new(j->avoid, json_string(j->failed_node));
		j->attempt++;
		if (requeue) {
			j->requeues++;
			set_reason(j, "restart %d after %s", j->attempt, why.buf);
		} else {
			set_reason(j, "retry %d/%d after %s", j->attempt - j->preemptions - j->requeues,
				   j->cfg.retries, why.buf);
		}
		strbuf_release(&why);
		j->started_us = 0;
		job_transition(s, j, DT_JOB_PENDING);
	} else {
		job_transition(s, j, state);
	}
	sched_wake(s);
}

static void end_attempt(struct sched *s, struct job *j, const char *state)
{
	end_attempt_as(s, j, state, 0);
}

/*
 * Stall detection: live ranks (the backend's live_ranks) whose log and the
 * metrics file did not change for stall_after.
 */
static void check_stall(struct sched *s, struct job *j)
{
	long long now = dt_mono_ms(), now_us = dt_now_us(), metrics_ns = 0;
	struct strbuf path = STRBUF_INIT;
	json_t *stalled = json_array();
	struct rank_live *live = NULL;
	size_t nr = 0, alloc = 0;

	if (!j->cfg.stall_after_ms || now - j->stall_checked_ms < STALL_SCAN_MS || !j->hold)
		goto out;
	j->stall_checked_ms = now;
	metrics_ns = job_mtime_ns(j, "metrics.jsonl");
	if (s->backend->live_ranks) {
		nr = s->backend->live_ranks(s, j, &live, &alloc);
	} else {
		/* the backend cannot tell: every rank of the world, where it was placed */
		for (int r = 0; r < j->world; r++) {
			ALLOC_GROW(live, nr + 1, alloc);
			live[nr].rank = r;
			live[nr].node = j->hold->nr ? j->hold->place[j->per_node > 0 &&
				r / j->per_node < j->hold->nr ? r / j->per_node : 0].node : "?";
			live[nr].pid = 0;
			nr++;
		}
	}
	for (size_t i = 0; i < nr; i++) {
		long long lr = j->started_us, log_ns, idle;

		if (metrics_ns / 1000 > lr)
			lr = metrics_ns / 1000;
		strbuf_reset(&path);
		strbuf_addf(&path, "logs/%d.log", live[i].rank);
		log_ns = job_mtime_ns(j, path.buf);
		if (log_ns / 1000 > lr)
			lr = log_ns / 1000;
		idle = (now_us - lr) / 1000;
		if (idle < j->cfg.stall_after_ms)
			continue;
		json_array_append_new(stalled, json_pack("{s:i,s:s,s:o,s:I}", "rank", live[i].rank,
			"node", live[i].node, "pid", live[i].pid ? json_integer(live[i].pid) :
			json_null(), "idle_ms", (json_int_t)idle));
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
	if (json_array_size(stalled)) {   /* who the others wait for: hang.c listens */
		struct job_event_info info = { .rank = -1, .first = !json_array_size(j->stalled),
					       .stall_after_ms = j->cfg.stall_after_ms,
					       .stalled = stalled };

		job_events_emit(&s->events, s, j, JOB_EV_STALLED, &info);
	}
	stalls_cleared(j, stalled, "output");
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
	free(live);
	json_decref(stalled);
	strbuf_release(&path);
}

/*
 * The attempt failed on j->failed_node (j->failed_rank, j->exit_code set):
 * tell the subscribers (quarantine-head.c counts it against the node).
 * Lock held.
 */
static void rank_exited(struct sched *s, struct job *j, int nodefail, int sig)
{
	struct job_event_info info = { .rank = j->failed_rank, .code = j->exit_code,
				       .signal = sig, .node_fail = nodefail };

	job_events_emit(&s->events, s, j, JOB_EV_RANK_EXITED, &info);
}

/*
 * Is the running job's attempt over?  The backend says how it stands (rank
 * exits, node failures: backend.h); the lifecycle decides what that makes
 * the job.  Lock held.
 */
static void check_running(struct sched *s, struct job *j)
{
	struct attempt_end e;
	enum attempt_status st;

	if (j->cancel) {
		if (!j->reason)   /* jobs_cancel() may have said why */
			set_reason(j, "cancelled by the user");
		end_attempt(s, j, DT_JOB_CANCELLED);
		return;
	}
	if (j->preempting && dt_mono_ms() >= j->preempt_deadline_ms) {
		end_attempt(s, j, DT_JOB_CANCELLED);   /* its grace is over: requeued */
		return;
	}
	if (j->launch || !j->hold)
		return;
	if (j->launch_error) {
		set_reason(j, "%s", j->launch_error);
		end_attempt(s, j, DT_JOB_FAILED);
		return;
	}
	attempt_end_init(&e);
	st = s->backend->attempt_poll(s, j, &e);
	if (st == ATTEMPT_NODE_DOWN) {
		free(j->failed_node);
		j->failed_node = xstrdup(e.node);
		set_reason(j, "%s", e.why.buf);
		rank_exited(s, j, 1, 0);
		end_attempt(s, j, DT_JOB_NODE_FAIL);
	} else if (st == ATTEMPT_FAILED) {
		j->has_exit = 1;
		j->exit_code = e.code;
		j->failed_rank = e.rank;
		free(j->failed_node);
		j->failed_node = xstrdup(e.node ? e.node : "?");
		if (e.why_is_reason)
			set_reason(j, "%s", e.why.buf);
		else if (e.rank >= 0)
			set_reason(j, "rank %d on %s %s", e.rank, j->failed_node, e.why.buf);
		else
			set_reason(j, "mpirun on %s %s", j->failed_node, e.why.buf);
		rank_exited(s, j, e.node_fail, e.signal);
		end_attempt(s, j, e.node_fail ? DT_JOB_NODE_FAIL : DT_JOB_FAILED);
	} else if (st == ATTEMPT_COMPLETED) {
		j->has_exit = 1;
		j->exit_code = 0;
		set_reason(j, NULL);
		end_attempt(s, j, DT_JOB_COMPLETED);
	} else if (st == ATTEMPT_ENDED) {
		/* the backend's resource manager ended it (Slurm: scancel, its time
		 * limit, a node failure, preemption), or requeued it */
		set_reason(j, "%s", e.why.buf);
		if (e.node) {
			free(j->failed_node);
			j->failed_node = xstrdup(e.node);
		}
		end_attempt_as(s, j, e.state ? e.state : DT_JOB_FAILED, e.requeue);
	} else if (st == ATTEMPT_SETTLING) {
		;                 /* decided at the next step */
	} else if (j->cfg.timeout_ms && dt_mono_ms() - j->run_mono > j->cfg.timeout_ms) {
		struct strbuf d = STRBUF_INIT;

		format_duration_human(&d, j->cfg.timeout_ms);
		set_reason(j, "ran longer than its timeout of %s", d.buf);
		strbuf_release(&d);
		end_attempt(s, j, DT_JOB_TIMEOUT);
	} else {
		check_stall(s, j);
	}
	attempt_end_release(&e);
}

/*
 * One placed job's launch, off the main thread: the main loop goes on
 * ending, placing and launching other jobs while this one waits for where
 * its ranks run (in a sweep, eight trials ending together used to be
 * launched one after another, each behind the requests of the one before,
 * and the ends that arrived meanwhile waited too).
 */
static void *launch_thread(void *arg)
{
	struct launch_arg *la = arg;

	la->s->backend->launch(la->s, la->j, la->h);
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
	size_t nr_launch = 0, alloc_launch = 0, nr_run;
	struct job **run;

	pthread_mutex_lock(&s->lock);
	/* every write of this step (transitions, reasons, holds) in one commit */
	db_begin(s);
	cluster_refresh(s);
	/*
	 * The running jobs alone (sched-int.h, s->running: a queue of 10,000
	 * pending jobs walked twice a step was most of dtsched's CPU per submit).
	 * A copy: a job that starts meanwhile is put in its place in s->running.
	 */
	jobs_live_compact(s);
	run = xmalloc((s->nr_running ? s->nr_running : 1) * sizeof(*run));
	nr_run = s->nr_running;
	if (nr_run)   /* s->running is NULL until a job runs */
		memcpy(run, s->running, nr_run * sizeof(*run));
	for (size_t i = 0; i < nr_run; i++)
		if (!strcmp(run[i]->state, DT_JOB_RUNNING))
			check_running(s, run[i]);
	free(run);
	if (s->backend->step)
		s->backend->step(s, &a);
	schedule_pending(s);
	/* placed jobs (launch 1) are RUNNING: fair_start, jobs_load */
	for (size_t i = 0; i < s->nr_running; i++) {
		struct job *j = s->running[i];
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
	db_commit(s, NULL);
	pthread_mutex_unlock(&s->lock);

	for (size_t i = 0; i < a.nr; i++) {
		s->backend->stop(s, &a.v[i]);
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
