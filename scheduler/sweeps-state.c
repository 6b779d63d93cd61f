/*
 * sweeps-state.c - the sweep and trial objects of dtsched (sweeps-int.h):
 * their states, their rows in state.db (sweeps, trials, reports) and loading
 * them at start, with the search and ASHA rebuilt by replay (sweepspec.c).
 * Every change is written before it is acted on.
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


/* Every trial state, in the order counts and metrics list them. */
const char *const trial_states[NR_TRIAL_STATES] = { DT_TRIAL_PENDING, DT_TRIAL_RUNNING,
					    DT_TRIAL_COMPLETED, DT_TRIAL_PRUNED, DT_TRIAL_FAILED,
					    DT_TRIAL_CANCELLED, DT_TRIAL_PAUSED };

int trial_final(const struct trial *t)
{
	return strcmp(t->state, DT_TRIAL_PENDING) && strcmp(t->state, DT_TRIAL_RUNNING);
}

int sweep_final(const struct sweep *w)
{
	return strcmp(w->state, DT_SWEEP_RUNNING) && strcmp(w->state, DT_SWEEP_PAUSED);
}

/*
 * W&B's metric.target: once a trial reports a value at or beyond it (by the
 * goal), no new trial starts; the running ones finish, then the sweep is
 * COMPLETED.
 */
void check_target(struct sweep *w, int trial, double v)
{
	if (!w->cfg.has_target || w->target_hit || !isfinite(v))
		return;
	if (w->cfg.goal == GOAL_MAXIMIZE ? v >= w->cfg.target : v <= w->cfg.target) {
		w->target_hit = trial;
		w->target_value = v;
	}
}

static const char *const_of(const char *s, const char *const *all, size_t n, const char *def)
{
	for (size_t i = 0; i < n; i++)
		if (s && !strcmp(s, all[i]))
			return all[i];
	return def;
}

static const char *trial_state_const(const char *s)
{
	return const_of(s, trial_states, ARRAY_SIZE(trial_states), DT_TRIAL_FAILED);
}

static const char *sweep_state_const(const char *s)
{
	static const char *const all[] = { DT_SWEEP_RUNNING, DT_SWEEP_PAUSED, DT_SWEEP_STOPPED,
					   DT_SWEEP_COMPLETED, DT_SWEEP_FAILED };

	return const_of(s, all, ARRAY_SIZE(all), DT_SWEEP_FAILED);
}

void trial_scan_close(struct trial *t)
{
	if (t->scan_dfd >= 0)
		close(t->scan_dfd);
	t->scan_dfd = -1;
}

void trial_free(struct trial *t)
{
	trial_scan_close(t);
	suggestion_release(&t->sg);
	json_decref(t->metrics);
	free(t->reason);
	free(t->resume);
	free(t);
}

void sweep_free(struct sweep *w)
{
	for (size_t i = 0; i < w->nr; i++)
		trial_free(w->t[i]);
	free(w->t);
	free(w->name);
	free(w->shared_dir);
	free(w->submit_dir);
	free(w->user);
	free(w->reason);
	free(w->replay);
	json_decref(w->spec);
	sweep_config_release(&w->cfg);
	if (w->search)
		search_free(w->search);
	if (w->asha)
		asha_free(w->asha);
	free(w);
}

int sweep_save(struct sched *s, struct sweep *w)
{
	sqlite3_stmt *st = s->sweeps->st_sweep;
	char seed[32];
	json_t *o;
	char *data;
	int rc;

	snprintf(seed, sizeof(seed), "%llu", (unsigned long long)w->seed);
	o = json_pack("{s:s,s:s,s:s?,s:s,s:O,s:s,s:s,s:s?,s:I,s:I,s:i}", "name", w->name,
		      "shared_dir", w->shared_dir, "submit_dir", w->submit_dir, "user", w->user, "spec", w->spec, "seed", seed,
		      "state", w->state, "reason", w->reason, "created_us", (json_int_t)w->created_us,
		      "ended_us", (json_int_t)w->ended_us, "failures", w->failures);
	data = json_dumps(o, JSON_COMPACT);
	sqlite3_reset(st);
	sqlite3_bind_text(st, 1, w->id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, w->state, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, data, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 4, w->seq);
	rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
	if (rc < 0)
		dtlog(DTLOG_ERROR, "state.db: cannot save sweep %s: %s", w->id, sqlite3_errmsg(s->db));
	free(data);
	json_decref(o);
	return rc;
}

void trial_save(struct sched *s, struct sweep *w, struct trial *t)
{
	sqlite3_stmt *st = s->sweeps->st_trial;
	json_t *o = json_pack("{s:o,s:b,s:f,s:f,s:b,s:I,s:I,s:I,s:I,s:i,s:s?}",
			      "params", suggestion_to_json(&t->sg), "has_value", t->has_value,
			      "value", isfinite(t->value) ? t->value : 0.0,
			      "resource", isfinite(t->resource) ? t->resource : -1.0,
			      "no_metric", t->no_metric, "created_us", (json_int_t)t->created_us,
			      "ended_us", (json_int_t)t->ended_us, "mf_off", (json_int_t)t->rd.mf_off,
			      "log_off", (json_int_t)t->rd.log_off, "resubmits", t->resubmits,
			      "reason", t->reason);
	char *data;

	if (t->has_value && !isfinite(t->value))
		json_object_set_new(o, "value_nan", json_true());
	if (t->resume)
		json_object_set_new(o, "resume", json_string(t->resume));
	data = json_dumps(o, JSON_COMPACT);
	sqlite3_reset(st);
	sqlite3_bind_text(st, 1, w->id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(st, 2, t->no);
	if (t->job[0])
		sqlite3_bind_text(st, 3, t->job, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 3);
	sqlite3_bind_text(st, 4, t->state, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, data, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) != SQLITE_DONE)
		dtlog(DTLOG_ERROR, "state.db: cannot save trial %d of %s: %s", t->no, w->id,
		      sqlite3_errmsg(s->db));
	free(data);
	json_decref(o);
}

void report_save(struct sched *s, struct sweep *w, struct trial *t, int n, const json_t *r)
{
	sqlite3_stmt *st = s->sweeps->st_report;
	char *data = json_dumps(r, JSON_COMPACT);

	sqlite3_reset(st);
	sqlite3_bind_text(st, 1, w->id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(st, 2, t->no);
	sqlite3_bind_int(st, 3, n);
	sqlite3_bind_text(st, 4, data, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) != SQLITE_DONE)
		dtlog(DTLOG_ERROR, "state.db: cannot save a report of trial %d of %s: %s", t->no,
		      w->id, sqlite3_errmsg(s->db));
	free(data);
}

void sweep_set_reason(char **dst, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	free(*dst);
	*dst = strbuf_detach(&sb, NULL);
}

void sweep_event(struct sched *s, struct sweep *w, const char *kind, json_t *ev)
{
	json_object_set_new(ev, "sweep", json_string(w->id));
	json_object_set_new(ev, "name", json_string(w->name ? w->name : ""));
	json_object_set_new(ev, "user", json_string(w->user ? w->user : ""));
	events_add(s, kind, ev, w->cfg.job.notify);
}

void sweep_end(struct sched *s, struct sweep *w, const char *state)
{
	w->state = state;
	w->ended_us = dt_now_us();
	sweep_save(s, w);
	sweep_event(s, w, "sweep.ended", json_pack("{s:s,s:s?}", "state", state, "reason",
						   w->reason));
	dtlog(!strcmp(state, DT_SWEEP_FAILED) ? DTLOG_WARN : DTLOG_INFO, "sweep %s (%s): %s%s%s",
	      w->id, w->name, state, w->reason ? ": " : "", w->reason ? w->reason : "");
}

/* A trial's state change: SQLite first, then whatever follows from it. */
void trial_set(struct sched *s, struct sweep *w, struct trial *t, const char *state)
{
	if (!strcmp(t->state, state))
		return;
	t->state = state;
	if (trial_final(t) && !t->ended_us)
		t->ended_us = dt_now_us();
	trial_save(s, w, t);
	dtlog(DTLOG_INFO, "sweep %s trial %d (%s): %s", w->id, t->no, t->job, state);
}

static struct sweep *sweep_from_row(const char *id, long long seq, const char *data)
{
	json_t *o = data ? json_loads(data, 0, NULL) : NULL;
	struct strbuf err = STRBUF_INIT;
	struct sweep *w;

	if (!o)
		return NULL;
	w = xcalloc(1, sizeof(*w));
	w->seq = seq;
	snprintf(w->id, sizeof(w->id), "%s", id);
	w->name = xstrdup(json_get_str(o, "name", id));
	w->shared_dir = xstrdup(json_get_str(o, "shared_dir", ""));
	if (json_get_str(o, "submit_dir", NULL))
		w->submit_dir = xstrdup(json_get_str(o, "submit_dir", NULL));
	w->user = xstrdup(json_get_str(o, "user", ""));
	w->spec = json_incref(json_object_get(o, "spec"));
	w->seed = strtoull(json_get_str(o, "seed", "1"), NULL, 10);
	w->state = sweep_state_const(json_get_str(o, "state", NULL));
	if (json_get_str(o, "reason", NULL))
		w->reason = xstrdup(json_get_str(o, "reason", NULL));
	w->created_us = json_get_int(o, "created_us", 0);
	w->ended_us = json_get_int(o, "ended_us", 0);
	w->failures = (int)json_get_int(o, "failures", 0);
	json_decref(o);
	if (sweep_config_from_json(&w->cfg, w->spec, &err) < 0) {
		dtlog(DTLOG_WARN, "state.db: sweep %s: %s; skipped", id, err.buf);
		strbuf_release(&err);
		json_decref(w->spec);
		w->spec = NULL;
		memset(&w->cfg, 0, sizeof(w->cfg));
		job_config_init(&w->cfg.job);
		sweep_free(w);
		return NULL;
	}
	strbuf_release(&err);
	return w;
}

struct sweep *sweep_find(struct sched *s, const char *id)
{
	struct sweeps *sw = s->sweeps;

	for (size_t i = 0; i < sw->nr; i++)
		if (!strcmp(sw->v[i]->id, id))
			return sw->v[i];
	for (size_t i = sw->nr; i > 0; i--)
		if (!strcmp(sw->v[i - 1]->name, id))
			return sw->v[i - 1];
	return NULL;
}

static void sweeps_load(struct sched *s)
{
	struct sweeps *sw = s->sweeps;
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(s->db, "SELECT seq, id, data FROM sweeps ORDER BY seq", -1, &st,
			       NULL) != SQLITE_OK)
		return;
	while (sqlite3_step(st) == SQLITE_ROW) {
		struct sweep *w = sweep_from_row((const char *)sqlite3_column_text(st, 1),
						 sqlite3_column_int64(st, 0),
						 (const char *)sqlite3_column_text(st, 2));

		if (!w)
			continue;
		ALLOC_GROW(sw->v, sw->nr + 1, sw->alloc);
		sw->v[sw->nr++] = w;
	}
	sqlite3_finalize(st);

	if (sqlite3_prepare_v2(s->db, "SELECT sweep, trial, job_id, state, data FROM sweep_trials "
			       "ORDER BY sweep, trial", -1, &st, NULL) != SQLITE_OK)
		return;
	while (sqlite3_step(st) == SQLITE_ROW) {
		struct sweep *w = sweep_find(s, (const char *)sqlite3_column_text(st, 0));
		const char *data = (const char *)sqlite3_column_text(st, 4);
		json_t *o = data ? json_loads(data, 0, NULL) : NULL;
		struct strbuf err = STRBUF_INIT;
		struct trial *t;

		if (!w || !o) {
			json_decref(o);
			continue;
		}
		t = xcalloc(1, sizeof(*t));
		t->no = sqlite3_column_int(st, 1);
		if (sqlite3_column_type(st, 2) != SQLITE_NULL)
			snprintf(t->job, sizeof(t->job), "%s", sqlite3_column_text(st, 2));
		t->state = trial_state_const((const char *)sqlite3_column_text(st, 3));
		t->sg.seq = -1;
		if (suggestion_from_json(&t->sg, json_object_get(o, "params"), &err) < 0)
			dtlog(DTLOG_WARN, "state.db: sweep %s trial %d: %s", w->id, t->no, err.buf);
		t->has_value = json_is_true(json_object_get(o, "has_value"));
		t->value = json_is_true(json_object_get(o, "value_nan")) ? NAN :
			   json_get_real(o, "value", 0);
		t->resource = json_get_real(o, "resource", -1);
		t->no_metric = json_is_true(json_object_get(o, "no_metric"));
		t->created_us = json_get_int(o, "created_us", 0);
		t->ended_us = json_get_int(o, "ended_us", 0);
		t->rd = (struct sweep_reader)SWEEP_READER_INIT;
		t->scan_dfd = -1;
		t->rd.mf_off = json_get_int(o, "mf_off", 0);
		t->rd.log_off = json_get_int(o, "log_off", 0);
		t->reached = -1;
		t->resubmits = (int)json_get_int(o, "resubmits", 0);
		t->stop_pending = !strcmp(t->state, DT_TRIAL_PRUNED) ||
				  !strcmp(t->state, DT_TRIAL_PAUSED) ||
				  !strcmp(t->state, DT_TRIAL_CANCELLED);
		if (json_get_str(o, "reason", NULL))
			t->reason = xstrdup(json_get_str(o, "reason", NULL));
		if (json_get_str(o, "resume", NULL))
			t->resume = xstrdup(json_get_str(o, "resume", NULL));
		t->metrics = json_array();
		ALLOC_GROW(w->t, w->nr + 1, w->alloc);
		w->t[w->nr++] = t;
		json_decref(o);
		strbuf_release(&err);
	}
	sqlite3_finalize(st);

	/* in the order they were stored, which is the order ASHA heard them in */
	if (sqlite3_prepare_v2(s->db, "SELECT sweep, trial, data FROM sweep_reports "
			       "ORDER BY rowid", -1, &st, NULL) != SQLITE_OK)
		return;
	while (sqlite3_step(st) == SQLITE_ROW) {
		struct sweep *w = sweep_find(s, (const char *)sqlite3_column_text(st, 0));
		int no = sqlite3_column_int(st, 1);
		const char *data = (const char *)sqlite3_column_text(st, 2);
		json_t *r = data ? json_loads(data, 0, NULL) : NULL;

		if (w && r && no >= 1 && (size_t)no <= w->nr && w->t[no - 1]->no == no) {
			struct trial *t = w->t[no - 1];
			double v, res;

			json_array_append(t->metrics, r);
			t->nreports++;
			sweep_reader_note(&t->rd, r);
			if (sweep_metric_value(r, w->cfg.metric_name, &v, &res) == 0) {
				t->reached = res >= 0 ? res : (double)t->nreports;
				ALLOC_GROW(w->replay, w->nr_replay + 1, w->alloc_replay);
				w->replay[w->nr_replay].trial = no;
				w->replay[w->nr_replay].resource = t->reached;
				w->replay[w->nr_replay].value = v;
				w->nr_replay++;
				check_target(w, no, v);
			}
		}
		json_decref(r);
	}
	sqlite3_finalize(st);

	/* rebuild the search and ASHA by replay */
	for (size_t i = 0; i < sw->nr; i++) {
		struct sweep *w = sw->v[i];
		struct sweep_replay_trial *rt = xcalloc(w->nr + 1, sizeof(*rt));
		size_t nrep = w->nr_replay;
		struct strbuf err = STRBUF_INIT;

		for (size_t k = 0; k < w->nr; k++) {
			struct trial *t = w->t[k];

			rt[k].sg = &t->sg;
			rt[k].state = t->state;
			rt[k].has_value = t->has_value;
			rt[k].value = t->value;
			rt[k].resource = t->resource;
			rt[k].no_metric = t->no_metric;
		}
		w->search = sweep_replay_search(&w->cfg, w->seed, rt, w->nr, &err);
		w->asha = sweep_replay_asha(&w->cfg, w->replay, w->nr_replay);
		/* promotion: which trials wait at a rung is the trials table's to say */
		for (size_t k = 0; w->asha && asha_get_promotion(w->asha) && k < w->nr; k++) {
			const struct trial *t = w->t[k];

			asha_set_trial(w->asha, t->no,
				       !strcmp(t->state, DT_TRIAL_PAUSED) ? ASHA_TRIAL_PAUSED :
				       !trial_final(t) ? ASHA_TRIAL_RUNNING : ASHA_TRIAL_DONE);
		}
		free(w->replay);
		w->replay = NULL;
		w->nr_replay = w->alloc_replay = 0;
		if (!w->search && !sweep_final(w)) {
			sweep_set_reason(&w->reason, "cannot rebuild the search: %s", err.buf);
			sweep_end(s, w, DT_SWEEP_FAILED);
		}
		if (!sweep_final(w))
			dtlog(DTLOG_INFO, "sweep %s (%s): resumed with %zu trial(s), %zu report(s) "
			      "replayed", w->id, w->name, w->nr, nrep);
		free(rt);
		strbuf_release(&err);
	}
}

int sweeps_init(struct sched *s)
{
	struct sweeps *sw = xcalloc(1, sizeof(*sw));

	s->sweeps = sw;
	if (sqlite3_prepare_v2(s->db, "UPDATE sweeps SET id=?1, state=?2, data=?3 WHERE seq=?4", -1,
			       &sw->st_sweep, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO sweep_trials(sweep, trial, job_id, "
			       "state, data) VALUES(?,?,?,?,?)", -1, &sw->st_trial, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO sweep_reports(sweep, trial, n, data) "
			       "VALUES(?,?,?,?)", -1, &sw->st_report, NULL) != SQLITE_OK)
		return -1;
	sweeps_load(s);
	return 0;
}

void sweeps_release(struct sched *s)
{
	struct sweeps *sw = s->sweeps;

	if (!sw)
		return;
	for (size_t i = 0; i < sw->nr; i++)
		sweep_free(sw->v[i]);
	free(sw->v);
	sqlite3_finalize(sw->st_sweep);
	sqlite3_finalize(sw->st_trial);
	sqlite3_finalize(sw->st_report);
	free(sw);
	s->sweeps = NULL;
}
