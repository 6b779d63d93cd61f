/*
 * sweeps.c - dtsched's sweep controller: `dtctl sweep` without a terminal.
 *
 * A sweep is a search (search.c: grid, random, TPE) whose suggestions run
 * as trials, and a trial is an ordinary job submitted through jobs.c's
 * internal API, so placement, launch, retries and NODE_FAIL are the job
 * queue's.  The main loop calls sweeps_step() before jobs_step(); it
 *
 *   - follows every live trial's job (its moves come from the job events,
 *     sweeps_job_moved; the job API is read once per new job and after a
 *     restart, and for the job's dirs when its reports are due), reads the
 *     metric reports its rank 0
 *     wrote since the last look ($DT_METRICS_FILE lines, or "DTCTL_METRIC
 *     {...}" lines in logs/0.log), stores them, and asks ASHA about each:
 *     a pruned trial's job is cancelled at once, which frees its slot;
 *   - ends trials with their job (COMPLETED with the last value or "no
 *     metric", FAILED, a NODE_FAIL requeued as a new job) and tells the
 *     search how they ended;
 *   - tops the sweep up to `parallel` live trials (0: as long as the queue
 *     has no trial waiting, i.e. every free slot), placing them at once.
 *
 * Durability: every suggestion (with the job it became, in one
 * transaction), trial state change and report is in SQLite before it is
 * acted on; a look at a trial's files stores its reports, the reader's
 * offsets past them and the decisions made on them in one transaction, so
 * a report is read exactly once across any crash.  After a restart the
 * search is rebuilt by replay
 * (search_new + observe finished trials + search_set_next_seq) and ASHA by
 * replaying the stored reports, in sweeps_init(); jobs.c re-adopts the
 * running jobs, so live trials go on and finished ones are never rerun.
 *
 * The sweep subsystem is a bounded unit on top of the job API: sweepspec.c
 * (pure: config, trial specs, metric reports, replay), sweeps-state.c (sweeps
 * and trials: states, rows, load), this controller, sweeps-api.c (HTTP).
 *
 * Locking: everything here is under s->lock; file reads of metric sources
 * are small and incremental (offsets kept per trial).
 */
#include "sweeps-int.h"
#include "safefile.h"
#include "promtext.h"
#include "sweeps.h"
#include "jobspec.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "pyfmt.h"
#include "usage.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SCAN_MS 200               /* metric sources of a live trial, at most this often */
#define MAX_RESUBMITS 3           /* NODE_FAIL requeues of one trial */

void cancel_trial_job(struct sched *s, struct trial *t, const char *why)
{
	struct job_view v;

	t->stop_pending = 1;

	if (t->job[0] && jobs_view(s, t->job, &v) == 0 && !v.cancelled &&
	    (!strcmp(v.state, DT_JOB_PENDING) || !strcmp(v.state, DT_JOB_RUNNING)))
		jobs_cancel(s, t->job, why);
}

/*
 * A value better than any the sweep's trials had: the event sweep.best (docs/
 * events.md), once per improvement.  After a restart the bar is the best of
 * the trials' last values.  Lock held.
 */
static void sweep_note_best(struct sched *s, struct sweep *w, const struct trial *t, double v,
			    double res)
{
	int max = w->cfg.goal == GOAL_MAXIMIZE;

	if (isnan(v))
		return;
	if (!w->best_known) {
		for (size_t i = 0; i < w->nr; i++) {
			const struct trial *o = w->t[i];

			if (o == t || !o->has_value || isnan(o->value))
				continue;
			if (!w->best_known || (max ? o->value > w->best_value : o->value < w->best_value))
				w->best_value = o->value;
			w->best_known = 1;
		}
	}
	if (w->best_known && !(max ? v > w->best_value : v < w->best_value))
		return;
	w->best_known = 1;
	w->best_value = v;
	sweep_event(s, w, "sweep.best", json_pack("{s:i,s:s,s:s,s:f,s:f}", "trial", t->no,
		    "job", t->job, "metric", w->cfg.metric_name ? w->cfg.metric_name : "",
		    "value", v, "step", res));
}

/*
 * Read what the trial reported since the last look; store, then ask ASHA.
 * The reader's offsets are saved in the same transaction as the reports and
 * the state they led to, so a restart reads on from there: never twice,
 * never lost.  A repeated report is logged and refused, never stored.
 */
static void scan_trial(struct sched *s, struct sweep *w, struct trial *t, const char *shared,
		       const char *job_dir, int force)
{
	long long now = dt_mono_ms();
	json_t *got = json_array(), *refused = json_array(), *r;
	const char *rel, *before;
	size_t i;

	if (!force && now - t->scanned_ms < SCAN_MS)
		goto out;
	t->scanned_ms = now;
	rel = sf_below(job_dir, shared);
	if (!rel || !*rel) {
		dtlog(DTLOG_WARN, "sweep %s trial %d: job dir '%s' is not below '%s'", w->id, t->no,
		      job_dir, shared);
		goto out;
	}
	if (t->scan_dfd >= 0 && strcmp(t->scan_job, t->job))
		trial_scan_close(t);     /* a new job of the trial: a new job dir */
	if (t->scan_dfd < 0 && !force) {
		/* none yet (ENOENT: not made yet; EMFILE): the walk below, again next time */
		t->scan_dfd = sf_dir(shared, rel, 0, NULL);
		snprintf(t->scan_job, sizeof(t->scan_job), "%s", t->job);
	}
	if (t->scan_dfd >= 0)
		sweep_reader_scan_at(&t->rd, t->scan_dfd, rel, w->cfg.metric_name, got, refused);
	else
		sweep_reader_scan(&t->rd, shared, rel, w->cfg.metric_name, got, refused);
	if (force)
		trial_scan_close(t);     /* its job is over: the last look */
	json_array_foreach(refused, i, r) {
		char *text = json_dumps(json_object_get(r, "report"), JSON_COMPACT);
		int by_epoch = json_is_number(json_object_get(r, "last_epoch"));

		dtlog(DTLOG_WARN, "sweep %s trial %d: %s/%s at byte %lld: report %s is not past "
		      "the last one recorded (%s %g); refused as a repeat", w->id, t->no, job_dir,
		      json_get_str(r, "file", "?"), (long long)json_get_int(r, "offset", 0),
		      text ? text : "?", by_epoch ? "epoch" : "step",
		      json_get_real(r, by_epoch ? "last_epoch" : "last_step", -1));
		free(text);
	}
	if (!json_array_size(got)) {
		if (json_array_size(refused))
			trial_save(s, w, t);   /* the offsets past them: refused once */
		goto out;
	}
	/* stored before ASHA hears of them */
	before = t->state;
	db_exec(s, "BEGIN");
	json_array_foreach(got, i, r) {
		report_save(s, w, t, t->nreports++, r);
		json_array_append(t->metrics, r);
	}
	json_array_foreach(got, i, r) {
		double v = NAN, res = -1;

		sweep_metric_value(r, w->cfg.metric_name, &v, &res);
		if (res < 0)
			res = (double)json_array_size(t->metrics) - (double)json_array_size(got) + (double)i + 1;
		t->reached = res;
		if (trial_final(t)) {
			/* pruned or paused earlier in this batch, or its job still stopping:
			 * ASHA still hears it, as a replay would */
			if (w->asha)
				asha_report(w->asha, t->no, res, v);
			continue;
		}
		t->has_value = 1;
		t->value = v;
		t->resource = res;
		sweep_note_best(s, w, t, v, res);
		if (!w->target_hit) {
			check_target(w, t->no, v);
			if (w->target_hit)
				dtlog(DTLOG_INFO, "sweep %s: trial %d reached the metric target (%s %g); "
				      "no new trials", w->id, t->no, w->cfg.metric_name, v);
		}
		switch (w->asha ? asha_report(w->asha, t->no, res, v) : ASHA_CONTINUE) {
		case ASHA_PRUNE:
			sweep_set_reason(&t->reason, "pruned by ASHA at %s %g (%s %g)",
				   json_object_get(r, "epoch") ? "epoch" : "step", res,
				   w->cfg.metric_name, v);
			t->state = DT_TRIAL_PRUNED;
			t->ended_us = dt_now_us();
			sweep_event(s, w, "sweep.pruned", json_pack("{s:i,s:s,s:s}", "trial", t->no,
				    "job", t->job, "reason", t->reason));
			break;
		case ASHA_PAUSE:
			sweep_set_reason(&t->reason, "paused by ASHA at %s %g (%s %g): resumes from its "
				   "checkpoint if promoted (top 1/eta of the rung)",
				   json_object_get(r, "epoch") ? "epoch" : "step", res,
				   w->cfg.metric_name, v);
			t->state = DT_TRIAL_PAUSED;
			break;
		}
	}
	trial_save(s, w, t);
	db_exec(s, "COMMIT");
	if (t->state != before &&
	    (!strcmp(t->state, DT_TRIAL_PRUNED) || !strcmp(t->state, DT_TRIAL_PAUSED))) {
		dtlog(DTLOG_INFO, "sweep %s trial %d (%s): %s", w->id, t->no, t->job, t->reason);
		/* TPE learns from a paused trial as from a pruned one, until it goes on */
		search_observe_at(w->search, &t->sg, t->value, SEARCH_PRUNED, t->resource);
		cancel_trial_job(s, t, !strcmp(t->state, DT_TRIAL_PRUNED) ? "pruned by the sweep" :
				 "paused by the sweep at a rung");
	}
out:
	json_decref(got);
	json_decref(refused);
}

/* ------------------------------------------------------------ trials */

/* Submit (or resubmit) trial t as a job; in one transaction with its row. */
static int trial_submit(struct sched *s, struct sweep *w, struct trial *t, struct strbuf *err)
{
	json_t *spec;
	char id[16];
	int rc;

	if (w->cfg.wandb) {
		/* W&B's command; ${args_json_file} is sweeps/<id>/args/t<N>.json on the shared dir */
		struct strvec argv = STRVEC_INIT;
		struct strbuf rel = STRBUF_INIT, path = STRBUF_INIT, json = STRBUF_INIT;

		strbuf_addf(&rel, "sweeps/%s/args", w->id);
		strbuf_addf(&path, "%s/%s/t%d.json", w->shared_dir, rel.buf, t->no);
		if (sweep_wandb_argv(&w->cfg, &t->sg, path.buf, &argv, &json)) {
			struct strbuf why = STRBUF_INIT;

			rc = sf_mkdirs(w->shared_dir, rel.buf, 0755, SF_OWNER, &why);
			strbuf_addf(&rel, "/t%d.json", t->no);
			if (rc == 0)
				rc = sf_write(w->shared_dir, rel.buf, json.buf, json.len, 0644,
					      SF_OWNER, &why);
			if (rc < 0)
				strbuf_addf(err, "cannot write '%s' for ${args_json_file}: %s; check "
					    "the shared dir", path.buf, why.buf);
			strbuf_release(&why);
			if (rc < 0) {
				strvec_clear(&argv);
				strbuf_release(&rel);
				strbuf_release(&path);
				strbuf_release(&json);
				return -1;
			}
		}
		spec = sweep_wandb_trial_spec(json_object_get(w->spec, "job"), &argv, &t->sg, t->no,
					      w->id, w->name, w->cfg.gpus_per_trial);
		/* the word ${interpreter} became: python3 where a node has no python (supervise.c) */
		if (strvec_find(&w->cfg.command, "${interpreter}") >= 0 &&
		    json_is_object(json_object_get(spec, "env")))
			json_object_set_new(json_object_get(spec, "env"), "DT_WANDB_INTERPRETER",
					    json_string("python"));
		strvec_clear(&argv);
		strbuf_release(&rel);
		strbuf_release(&path);
		strbuf_release(&json);
	} else {
		spec = sweep_trial_spec(json_object_get(w->spec, "job"), &t->sg, t->no, w->id,
					w->name, w->cfg.gpus_per_trial);
	}

	if (t->resume) {
		/* promoted: continue from the checkpoint it paused with */
		json_t *env = json_object_get(spec, "env");

		if (!json_is_object(env)) {
			env = json_object();
			json_object_set_new(spec, "env", env);
		}
		json_object_set_new(env, "DT_RESUME", json_string(t->resume));
	}
	db_exec(s, "BEGIN");
	rc = jobs_submit(s, spec, w->shared_dir, w->submit_dir, w->user, id, sizeof(id), err);
	json_decref(spec);
	if (rc < 0) {
		db_exec(s, "ROLLBACK");
		return rc;
	}
	if (w->cfg.pack == SWEEP_PACK_ALLOCATION)   /* the sweep's one allocation */
		jobs_pack(s, id, w->id, w->cfg.alloc_nodes, w->cfg.alloc_gpus, w->cfg.parallel);
	else if (w->cfg.pack == SWEEP_PACK_ARRAY && !t->resume)   /* a task of its job array */
		jobs_array(s, id, w->id, w->cfg.parallel);
	snprintf(t->job, sizeof(t->job), "%s", id);
	t->job_state = NULL;      /* read once at the next look */
	t->state = DT_TRIAL_PENDING;
	t->rd.mf_off = t->rd.log_off = 0;   /* a new job dir; the progress stays */
	trial_save(s, w, t);
	if (db_exec(s, "COMMIT") < 0) {
		/* not on disk, so not queued: nothing of it runs (jobs-api.c: job_enqueue) */
		strbuf_addf(err, "the head cannot record the job: %s", sqlite3_errmsg(s->db));
		if (!sqlite3_get_autocommit(s->db))
			db_exec(s, "ROLLBACK");
		jobs_unsubmit(s, id);
		t->job[0] = '\0';
		return -1;
	}
	return 0;
}

static void sweep_fail(struct sched *s, struct sweep *w, const char *why)
{
	sweep_set_reason(&w->reason, "%s", why);
	for (size_t i = 0; i < w->nr; i++)
		if (!trial_final(w->t[i])) {
			cancel_trial_job(s, w->t[i], "the sweep stopped");
			trial_set(s, w, w->t[i], DT_TRIAL_CANCELLED);
		}
	sweep_end(s, w, DT_SWEEP_FAILED);
}

/*
 * A paused trial whose job is over and gone: if it trained to max_iter, or
 * its job ended on its own before it could be stopped, there is nothing
 * left to resume; it is COMPLETED with its last report, never promoted.
 */
static void trial_settle_paused(struct sched *s, struct sweep *w, struct trial *t,
				int job_completed)
{
	int at_end = w->cfg.et_max_iter > 0 && t->reached >= w->cfg.et_max_iter;

	if (!at_end && !job_completed)
		return;
	if (json_array_size(t->metrics)) {
		json_t *last = json_array_get(t->metrics, json_array_size(t->metrics) - 1);
		double v = NAN, res = -1;

		sweep_metric_value(last, w->cfg.metric_name, &v, &res);
		t->has_value = 1;
		t->value = v;
		t->resource = t->reached;
	}
	sweep_set_reason(&t->reason, "%s before its job could be stopped at the rung: nothing to "
		   "promote", at_end ? "trained to max_iter" : "finished on its own");
	if (w->asha)
		asha_set_trial(w->asha, t->no, ASHA_TRIAL_DONE);
	search_observe_at(w->search, &t->sg, t->value, SEARCH_COMPLETED, t->resource);
	trial_set(s, w, t, DT_TRIAL_COMPLETED);
}

/*
 * A PRUNED, PAUSED or CANCELLED trial whose job may still run (after a
 * restart too): stop it, and read what it reports until its last process
 * is gone, so that what it wrote after the decision, or while dtsched was
 * down, is recorded like the rest.  Only then is a paused trial settled:
 * promotable, or COMPLETED (trial_settle_paused()).  Lock held.
 */
static void trial_stop(struct sched *s, struct sweep *w, struct trial *t)
{
	struct job_view v;
	char *job_dir, *shared;
	int over, completed;

	if (!t->job[0] || jobs_view(s, t->job, &v) < 0) {
		t->stop_pending = 0;
		if (!strcmp(t->state, DT_TRIAL_PAUSED))
			trial_settle_paused(s, w, t, 0);
		return;
	}
	over = strcmp(v.state, DT_JOB_PENDING) && strcmp(v.state, DT_JOB_RUNNING);
	if (!over && !v.cancelled)
		jobs_cancel(s, t->job, !strcmp(t->state, DT_TRIAL_PRUNED) ? "pruned by the sweep" :
			    !strcmp(t->state, DT_TRIAL_PAUSED) ? "paused by the sweep at a rung" :
			    "the sweep was stopped");
	if (jobs_view(s, t->job, &v) < 0)
		return;
	over = strcmp(v.state, DT_JOB_PENDING) && strcmp(v.state, DT_JOB_RUNNING);
	over = over && !v.tasks_left;
	completed = !strcmp(v.state, DT_JOB_COMPLETED);
	job_dir = xstrdup(v.job_dir);
	shared = xstrdup(v.shared_dir);
	scan_trial(s, w, t, shared, job_dir, over);   /* the last look once it is gone */
	free(job_dir);
	free(shared);
	if (!over)
		return;
	t->stop_pending = 0;
	if (!strcmp(t->state, DT_TRIAL_PAUSED))
		trial_settle_paused(s, w, t, completed);
}

/* Follow trial t's job; lock held. */
static void trial_follow(struct sched *s, struct sweep *w, struct trial *t)
{
	struct job_view v;
	struct strbuf err = STRBUF_INIT;

	if (!strcmp(t->state, DT_TRIAL_PRUNED) || !strcmp(t->state, DT_TRIAL_PAUSED) ||
	    !strcmp(t->state, DT_TRIAL_CANCELLED)) {
		if (t->stop_pending)
			trial_stop(s, w, t);
		return;
	}
	if (trial_final(t))
		return;
	/*
	 * Nothing moved since the last look (the job events would have said):
	 * a queued job needs none, a running one only when its reports are due.
	 */
	if (t->job[0] && t->job_state && !t->job_moved &&
	    (!strcmp(t->job_state, DT_JOB_PENDING) ||
	     (!strcmp(t->job_state, DT_JOB_RUNNING) && !strcmp(t->state, DT_TRIAL_RUNNING) &&
	      dt_mono_ms() - t->scanned_ms < SCAN_MS)))
		return;
	t->job_state = NULL;
	if (!t->job[0] || jobs_view(s, t->job, &v) < 0) {
		/* its job never made it to the database: submit it again */
		if (trial_submit(s, w, t, &err) < 0) {
			sweep_set_reason(&t->reason, "cannot submit: %s", err.buf);
			trial_set(s, w, t, DT_TRIAL_FAILED);
		}
		strbuf_release(&err);
		return;
	}
	t->job_state = v.state;
	t->job_moved = 0;
	if (!strcmp(v.state, DT_JOB_PENDING)) {
		strbuf_release(&err);
		return;
	}
	if (!strcmp(v.state, DT_JOB_RUNNING)) {
		trial_set(s, w, t, DT_TRIAL_RUNNING);
		scan_trial(s, w, t, v.shared_dir, v.job_dir, 0);
		strbuf_release(&err);
		return;
	}
	/* the job is over: what it reported last, then the verdict */
	{
		char *job_dir = xstrdup(v.job_dir), *shared = xstrdup(v.shared_dir), *jreason = v.reason ? xstrdup(v.reason) : NULL;
		const char *jst = v.state;

		scan_trial(s, w, t, shared, job_dir, 1);
		if (!trial_final(t)) {
			if (!strcmp(jst, DT_JOB_COMPLETED)) {
				if (!t->has_value && !w->cfg.metric_name) {
					/* a grid or random sweep without a metric: the trial ran */
					search_observe_at(w->search, &t->sg, NAN, SEARCH_COMPLETED, -1);
				} else if (!t->has_value) {
					t->no_metric = 1;
					sweep_set_reason(&t->reason, "no metric: the trial never reported '%s'",
						   w->cfg.metric_name);
					search_observe_at(w->search, &t->sg, NAN, SEARCH_FAILED, -1);
				} else {
					search_observe_at(w->search, &t->sg, t->value, SEARCH_COMPLETED,
							  t->resource);
				}
				trial_set(s, w, t, DT_TRIAL_COMPLETED);
			} else if (!strcmp(jst, DT_JOB_NODE_FAIL) && t->resubmits < MAX_RESUBMITS) {
				t->resubmits++;
				dtlog(DTLOG_WARN, "sweep %s trial %d: job %s ended NODE_FAIL; requeued",
				      w->id, t->no, t->job);
				if (trial_submit(s, w, t, &err) < 0) {
					sweep_set_reason(&t->reason, "cannot requeue: %s", err.buf);
					trial_set(s, w, t, DT_TRIAL_FAILED);
				}
			} else if (!strcmp(jst, DT_JOB_CANCELLED)) {
				sweep_set_reason(&t->reason, "its job %s was cancelled", t->job);
				search_observe_at(w->search, &t->sg, NAN, SEARCH_FAILED, -1);
				trial_set(s, w, t, DT_TRIAL_CANCELLED);
			} else {
				sweep_set_reason(&t->reason, "job %s %s%s%s", t->job, jst, jreason ? ": " : "",
					   jreason ? jreason : "");
				search_observe_at(w->search, &t->sg, NAN, SEARCH_FAILED, -1);
				w->failures++;
				trial_set(s, w, t, DT_TRIAL_FAILED);
				sweep_save(s, w);
				if (w->failures >= w->cfg.max_failures) {
					struct strbuf why = STRBUF_INIT;

					strbuf_addf(&why, "%d trial(s) failed (max_failures %d); last: trial %d: %s",
						    w->failures, w->cfg.max_failures, t->no, t->reason);
					sweep_fail(s, w, why.buf);
					strbuf_release(&why);
				}
			}
		}
		free(job_dir);
		free(shared);
		free(jreason);
	}
	strbuf_release(&err);
}

/*
 * Promotion: resume paused trial t as a new job, DT_RESUME being the
 * checkpoint dir of the job it paused in; lock held.
 */
static void trial_promote(struct sched *s, struct sweep *w, struct trial *t)
{
	struct strbuf err = STRBUF_INIT, dir = STRBUF_INIT;
	struct job_view v;

	if (t->job[0] && jobs_view(s, t->job, &v) == 0)
		strbuf_addf(&dir, "%s/ckpt", v.job_dir);
	free(t->resume);
	t->resume = dir.len ? strbuf_detach(&dir, NULL) : NULL;
	dtlog(DTLOG_INFO, "sweep %s trial %d: promoted at %g; resumes from %s", w->id, t->no,
	      t->resource, t->resume ? t->resume : "nothing (its job is gone)");
	free(t->reason);
	t->reason = NULL;
	t->ended_us = 0;
	if (trial_submit(s, w, t, &err) < 0) {
		sweep_set_reason(&t->reason, "cannot resume: %s", err.buf);
		trial_set(s, w, t, DT_TRIAL_FAILED);
	} else {
		jobs_schedule_now(s);
	}
	strbuf_release(&err);
	strbuf_release(&dir);
}

/*
 * The paused trials of an ended sweep: never promoted.  `state` PRUNED when
 * the sweep completed, CANCELLED when it was stopped or failed.
 */
static void sweep_end_paused(struct sched *s, struct sweep *w, const char *state)
{
	for (size_t i = 0; i < w->nr; i++) {
		struct trial *t = w->t[i];

		if (strcmp(t->state, DT_TRIAL_PAUSED))
			continue;
		sweep_set_reason(&t->reason, "not promoted past %g: %s", t->resource,
			   !strcmp(state, DT_TRIAL_PRUNED) ? "not in the top 1/eta of its rung" :
			   "the sweep ended");
		trial_set(s, w, t, state);
	}
}

/*
 * Move w->settled past the trials that are done for good: final, no job still
 * stopping, and not paused (ASHA may resume a paused trial).  Nothing makes
 * such a trial live again, and every per-step scan of the controller passes
 * them by (trial_follow does nothing for them, they are neither live, waiting
 * nor stopping, and their jobs' moves are no longer theirs).  Lock held.
 */
static void sweep_settle(struct sweep *w)
{
	while (w->settled < w->nr) {
		struct trial *t = w->t[w->settled];

		if (!trial_final(t) || t->stop_pending || !strcmp(t->state, DT_TRIAL_PAUSED))
			return;
		trial_scan_close(t);   /* done for good: no scan of it again */
		w->settled++;
	}
}

/*
 * pack: array on the Slurm backend: the trials of a grid or random sweep are
 * known up front, so all of them are made at once and go to Slurm as one job
 * array (jobs_array), which runs `parallel` at a time (--array=0-K%P) and
 * queues the rest itself.  A promoted trial (ASHA with checkpoint) or a retry
 * is its own Slurm job.
 */
static int array_mode(struct sched *s, const struct sweep *w)
{
	return w->cfg.pack == SWEEP_PACK_ARRAY && !strcmp(s->backend->name, "slurm");
}

/* Start new trials, or resume promoted ones first, while the sweep wants them; lock held. */
static void sweep_top_up(struct sched *s, struct sweep *w)
{
	for (;;) {
		size_t live = 0, waiting = 0, stopping = 0;
		struct trial *t;
		struct strbuf err = STRBUF_INIT;
		int rc, last, promoted;

		if (strcmp(w->state, DT_SWEEP_RUNNING) || w->target_hit)
			return;
		last = w->exhausted || w->nr >= (size_t)w->cfg.max_trials;
		if (last && !(w->asha && asha_get_promotion(w->asha)))
			return;
		for (size_t i = w->settled; i < w->nr; i++) {
			if (trial_final(w->t[i])) {
				stopping += w->t[i]->stop_pending &&
					    !strcmp(w->t[i]->state, DT_TRIAL_PAUSED);
				continue;
			}
			live++;
			/* its job's state as trial_follow and the job events left it */
			if (!w->t[i]->job[0] || !w->t[i]->job_state ||
			    !strcmp(w->t[i]->job_state, DT_JOB_PENDING))
				waiting++;
		}
		/* pack: array on Slurm: every trial at once, Slurm runs `parallel` of them */
		if (!array_mode(s, w) &&
		    (w->cfg.parallel ? live >= (size_t)w->cfg.parallel : waiting > 0))
			return;
		/* promotion: no decision while a paused trial's job is still stopping:
		 * what it reports until it is gone may reach a rung, or max_iter */
		if (stopping)
			return;
		/* promotions before new trials; closing (no trial runs or will start): a
		 * rung's best goes on even below floor(n / eta) */
		promoted = w->asha ? asha_promote_next(w->asha, last && !live) : 0;
		if (promoted >= 1 && (size_t)promoted <= w->nr) {
			trial_promote(s, w, w->t[promoted - 1]);
			continue;
		}
		if (last)
			return;
		t = xcalloc(1, sizeof(*t));
		t->sg.seq = -1;
		if (search_suggest(w->search, &t->sg) != 0) {
			trial_free(t);
			w->exhausted = 1;
			return;
		}
		t->no = (int)w->nr + 1;
		t->state = DT_TRIAL_PENDING;
		t->created_us = dt_now_us();
		t->metrics = json_array();
		t->resource = -1;
		t->reached = -1;
		t->rd = (struct sweep_reader)SWEEP_READER_INIT;
		t->scan_dfd = -1;
		rc = trial_submit(s, w, t, &err);
		if (rc < 0) {
			struct strbuf why = STRBUF_INIT;

			strbuf_addf(&why, "cannot start trial %d: %s", t->no, err.buf);
			trial_free(t);
			sweep_fail(s, w, why.buf);
			strbuf_release(&why);
			strbuf_release(&err);
			return;
		}
		ALLOC_GROW(w->t, w->nr + 1, w->alloc);
		w->t[w->nr++] = t;
		dtlog(DTLOG_INFO, "sweep %s: trial %d as job %s", w->id, t->no, t->job);
		jobs_schedule_now(s);
		strbuf_release(&err);
	}
}

/*
 * A trial's job moved (STARTED, RETRIED, ENDED: jobstate.h).  Its trial only
 * takes note; sweeps_step() acts on it at its next look, outside the
 * transition (a subscriber makes no transition, and a trial's end may lead
 * to one: a requeue, a cancel).  Lock held.
 */
static void sweeps_job_moved(struct sched *s, struct job *j, enum job_event ev,
			     const struct job_event_info *info, void *data)
{
	struct sweeps *sw = s->sweeps;
	const char *id = jobs_id(j);

	for (size_t i = 0; sw && i < sw->nr; i++) {
		struct sweep *w = sw->v[i];

		for (size_t k = w->settled; k < w->nr; k++) {
			struct trial *t = w->t[k];

			if ((!trial_final(t) || t->stop_pending) && !strcmp(t->job, id)) {
				t->job_state = info->to;
				t->job_moved = 1;
				return;
			}
		}
	}
}

void sweeps_subscribe(struct sched *s)
{
	job_events_on(&s->events, JOB_EV_STARTED, sweeps_job_moved, NULL);
	job_events_on(&s->events, JOB_EV_RETRIED, sweeps_job_moved, NULL);
	job_events_on(&s->events, JOB_EV_ENDED, sweeps_job_moved, NULL);
}

void sweeps_step(struct sched *s)
{
	struct sweeps *sw = s->sweeps;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; sw && i < sw->nr; i++) {
		struct sweep *w = sw->v[i];
		int live = 0;

		if (sweep_final(w)) {
			sweep_end_paused(s, w, DT_TRIAL_CANCELLED);   /* stopped or failed */
			/* trials of an ended sweep whose jobs still run (a restart) */
			for (size_t k = w->settled; k < w->nr; k++)
				if (!trial_final(w->t[k]) || w->t[k]->stop_pending)
					trial_follow(s, w, w->t[k]);
			sweep_settle(w);
			continue;
		}
		for (size_t k = w->settled; k < w->nr && !sweep_final(w); k++)
			trial_follow(s, w, w->t[k]);
		sweep_settle(w);
		if (sweep_final(w))
			continue;
		sweep_top_up(s, w);
		if (sweep_final(w))
			continue;
		/* a trial whose job is still stopping is not done reporting */
		for (size_t k = w->settled; k < w->nr; k++)
			live += !trial_final(w->t[k]) || w->t[k]->stop_pending;
		if (!live && strcmp(w->state, DT_SWEEP_PAUSED) &&
		    (w->exhausted || w->target_hit || w->nr >= (size_t)w->cfg.max_trials)) {
			sweep_end_paused(s, w, DT_TRIAL_PRUNED);
			free(w->reason);
			w->reason = NULL;
			if (w->target_hit)
				sweep_set_reason(&w->reason, "metric target reached: trial %d reported %s %g "
					   "(target %g)", w->target_hit, w->cfg.metric_name,
					   w->target_value, w->cfg.target);
			sweep_end(s, w, DT_SWEEP_COMPLETED);
		}
	}
	pthread_mutex_unlock(&s->lock);
}
