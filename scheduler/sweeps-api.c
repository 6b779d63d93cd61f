/*
 * sweeps-api.c - the sweeps' HTTP API of dtsched (protocol.h: POST/GET
 * /v1/sweeps, GET /v1/sweeps/<id>, .../pause, .../resume, .../stop), the JSON
 * views of sweeps and trials, and their /metrics families; thin over the
 * controller (sweeps.c) and the objects (sweeps-state.c).
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
#include "users.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *kind_label(enum param_kind k)
{
	switch (k) {
	case PARAM_VALUE: return "value";
	case PARAM_VALUES: return "values";
	case PARAM_UNIFORM: return "uniform";
	case PARAM_INT_UNIFORM: return "int_uniform";
	case PARAM_LOG_UNIFORM: return "log_uniform";
	case PARAM_Q_UNIFORM: return "q_uniform";
	case PARAM_NORMAL: return "normal";
	case PARAM_NESTED: return "nested";
	default: return sweep_param_kind_name(k);
	}
}

/*
 * ASHA's rungs as a user reads them: the progress level of each and how many
 * trials reached it and went on past it ([] without early stopping).
 */
static json_t *rungs_json(struct sweep *w)
{
	json_t *a = json_array();

	for (size_t k = 0; w->asha && asha_rung_count(w->asha, k); k++)
		json_array_append_new(a, json_pack("{s:f,s:I,s:I}", "resource",
						   asha_rung_resource(w->asha, k), "reached",
						   (json_int_t)asha_rung_count(w->asha, k),
						   "went_on", (json_int_t)asha_rung_went_on(w->asha, k)));
	return a;
}

static json_t *sweep_json(struct sweep *w)
{
	json_t *params = json_array(), *counts = json_object(), *sj;

	for (size_t i = 0; i < w->cfg.nr_params; i++) {
		const struct sweep_param *p = &w->cfg.params[i];
		json_t *o;

		if (p->kind == PARAM_NESTED)
			continue;
		o = json_pack("{s:s,s:s}", "name", p->name, "kind", kind_label(p->kind));
		if (p->kind == PARAM_VALUE || p->kind == PARAM_VALUES) {
			json_object_set_new(o, "values", json_strvec(&p->values));
		} else if (p->kind == PARAM_NORMAL || p->kind == PARAM_Q_NORMAL ||
			   p->kind == PARAM_LOG_NORMAL || p->kind == PARAM_Q_LOG_NORMAL) {
			json_object_set_new(o, "mu", json_real(p->mu));
			json_object_set_new(o, "sigma", json_real(p->sigma));
		} else if (p->kind == PARAM_BETA || p->kind == PARAM_Q_BETA) {
			json_object_set_new(o, "a", json_real(p->a));
			json_object_set_new(o, "b", json_real(p->b));
		} else {
			json_object_set_new(o, "min", json_real(p->min));
			json_object_set_new(o, "max", json_real(p->max));
			if (p->kind == PARAM_Q_UNIFORM)
				json_object_set_new(o, "q", json_real(p->q));
		}
		json_array_append_new(params, o);
	}
	for (size_t k = 0; k < ARRAY_SIZE(trial_states); k++) {
		int n = 0;

		for (size_t i = 0; i < w->nr; i++)
			n += !strcmp(w->t[i]->state, trial_states[k]);
		json_object_set_new(counts, trial_states[k], json_integer(n));
	}
	sj = json_pack("{s:s,s:s,s:s,s:{s:s?,s:s},s:s,s:s?,s:i,s:i,s:o,s:o,s:o,s:o,s:i,s:i,s:s}",
		"id", w->id, "name", w->name,
		"method", w->cfg.method == SWEEP_GRID ? "grid" : w->cfg.method == SWEEP_RANDOM ?
			  "random" : "bayes",
		"metric", "name", w->cfg.metric_name, "goal",
			  w->cfg.goal == GOAL_MAXIMIZE ? "maximize" : "minimize",
		"state", w->state, "reason", w->reason, "max_trials", w->cfg.max_trials,
		"parallel", w->cfg.parallel, "created_at", json_timestamp(w->created_us),
		"ended_at", json_timestamp(w->ended_us), "parameters", params, "counts", counts,
		"trials_started", (int)w->nr, "failures", w->failures, "user", w->user);
	json_object_set_new(sj, "rungs", rungs_json(w));
	/* how ASHA ends a trial at a rung: "stop" (pruned) or "promote" (paused, resumed) */
	json_object_set_new(sj, "asha_mode", !w->asha ? json_null() :
			    json_string(asha_get_promotion(w->asha) ? "promote" : "stop"));
	return sj;
}

static json_t *params_json(const struct trial *t)
{
	json_t *o = json_object();

	for (size_t i = 0; i < t->sg.nr; i++)
		json_object_set_new(o, t->sg.items[i].name, json_string(t->sg.items[i].value));
	return o;
}

static json_t *trial_json(const struct trial *t)
{
	return json_pack("{s:i,s:o,s:o,s:s,s:o,s:b,s:o,s:o,s:o,s:s?,s:O}", "trial", t->no,
		"job_id", t->job[0] ? json_string(t->job) : json_null(), "params", params_json(t),
		"state", t->state, "value", num_or_null(t->has_value, t->value),
		"no_metric", t->no_metric,
		"resource", t->resource >= 0 ? json_real(t->resource) : json_null(),
		"created_at", json_timestamp(t->created_us), "ended_at", json_timestamp(t->ended_us),
		"reason", t->reason, "metrics", t->metrics);
}

/*
 * The best COMPLETED trial with a value; while there is none, the best PRUNED
 * one, ranked as the search ranks them (the furthest trained first, then by
 * value): a small sweep under ASHA can end with every trial pruned, and its
 * best trial is still worth naming.  A partial value never outranks a finished
 * one.
 */
static const struct trial *best_trial(const struct sweep *w)
{
	const struct trial *best = NULL;
	int maximize = w->cfg.goal == GOAL_MAXIMIZE;

	for (int pass = 0; pass < 2 && !best; pass++) {
		const char *state = pass ? DT_TRIAL_PRUNED : DT_TRIAL_COMPLETED;

		for (size_t i = 0; i < w->nr; i++) {
			const struct trial *t = w->t[i];

			if (strcmp(t->state, state) || !t->has_value || t->no_metric ||
			    !isfinite(t->value))
				continue;
			if (best && pass && t->resource != best->resource) {
				if (t->resource > best->resource)
					best = t;
				continue;
			}
			if (!best || (maximize ? t->value > best->value : t->value < best->value))
				best = t;
		}
	}
	return best;
}

static json_t *export_json(struct sweep *w)
{
	json_t *trials = json_array();
	const struct trial *b = best_trial(w);

	for (size_t i = 0; i < w->nr; i++)
		json_array_append_new(trials, trial_json(w->t[i]));
	return json_pack("{s:o,s:o,s:o}", "sweep", sweep_json(w), "trials", trials, "best",
			 b ? json_pack("{s:i,s:f,s:o,s:s,s:o}", "trial", b->no, "value", b->value,
				       "params", params_json(b), "state", b->state, "resource",
				       b->resource >= 0 ? json_real(b->resource) : json_null())
			   : json_null());
}

/* ------------------------------------------------------------ handlers */

static uint64_t draw_seed(void)
{
	uint64_t v = 0;
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
			v = 0;
		close(fd);
	}
	if (!v)
		v = (uint64_t)dt_now_us() ^ ((uint64_t)getpid() << 32);
	/* keep it a positive JSON integer */
	v &= 0x7fffffffffffffffULL;
	return v ? v : 1;
}

static void h_create(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	json_t *spec = json_object_get(req->json, "sweep");
	const char *shared = json_get_str(req->json, "shared_dir", NULL);
	struct strbuf err = STRBUF_INIT;
	struct sweep *w = xcalloc(1, sizeof(*w));
	struct sweeps *sw = s->sweeps;

	if (!json_is_object(spec) || !shared || shared[0] != '/') {
		dt_http_error(resp, 400, "a sweep request needs {\"sweep\": {...}, \"shared_dir\": \"/...\"}");
		free(w);
		return;
	}
	if (sweep_config_from_json(&w->cfg, spec, &err) < 0) {
		dt_http_error(resp, 400, "%s", err.buf);
		free(w);
		strbuf_release(&err);
		return;
	}
	{
		const char *sd = json_get_str(req->json, "submit_dir", NULL);

		if (sd && (sd[0] != '/' || strlen(sd) >= 4096)) {
			dt_http_error(resp, 400, "'submit_dir' must be an absolute path (where dtctl ran)");
			sweep_free(w);
			strbuf_release(&err);
			return;
		}
		if (sd)
			w->submit_dir = xstrdup(sd);
	}
	w->seed = w->cfg.seed ? w->cfg.seed : draw_seed();
	w->search = search_new(&w->cfg, w->seed, &err);
	if (!w->search) {
		dt_http_error(resp, 400, "%s", err.buf);
		sweep_free(w);
		strbuf_release(&err);
		return;
	}
	if (w->cfg.early_terminate)
		w->asha = sweep_asha_new(&w->cfg);
	if (w->cfg.method == SWEEP_GRID && search_grid_size(w->search) < w->cfg.max_trials)
		w->cfg.max_trials = (int)search_grid_size(w->search);
	w->spec = json_deep_copy(spec);
	{
		char seed[32];

		snprintf(seed, sizeof(seed), "%llu", (unsigned long long)w->seed);
		json_object_set_new(w->spec, "seed", json_integer((json_int_t)w->seed));
		json_object_set_new(w->spec, "max_trials", json_integer(w->cfg.max_trials));
		(void)seed;
	}
	w->shared_dir = xstrdup(shared);
	{
		struct caller c;
		int rc;

		/* its owner, and its trials' (users.h): who the request proves to be */
		pthread_mutex_lock(&s->lock);
		rc = caller_of(s, req, &c, resp);
		/* team mode: trials' dirs only in the cluster's shared dir (jobs-api.c) */
		if (!rc && s->cc && s->cc->team && strcmp(shared, s->cc->shared_dir)) {
			dt_http_error(resp, 400, "'shared_dir' must be the cluster's ('%s') in team "
				      "mode", s->cc->shared_dir);
			rc = -1;
		}
		pthread_mutex_unlock(&s->lock);
		if (rc < 0) {
			sweep_free(w);
			strbuf_release(&err);
			return;
		}
		w->user = xstrdup(c.name);
	}
	w->state = DT_SWEEP_RUNNING;
	w->created_us = dt_now_us();

	pthread_mutex_lock(&s->lock);
	/* acknowledged only once on disk, as a job's submit (jobs-api.c: job_enqueue) */
	db_begin(s);
	if (db_exec(s, "INSERT INTO sweeps(state) VALUES('RUNNING')") == 0) {
		w->seq = sqlite3_last_insert_rowid(s->db);
		snprintf(w->id, sizeof(w->id), "s-%06lld", w->seq);
		w->name = xstrdup(json_get_str(req->json, "name", NULL) ?
				  json_get_str(req->json, "name", NULL) : w->id);
	}
	if (!w->seq || sweep_save(s, w) < 0) {
		strbuf_addstr(&err, sqlite3_errmsg(s->db));
		db_rollback(s);
	} else if (db_commit(s, &err) == 0) {
		strbuf_reset(&err);
	}
	if (err.len) {
		dt_http_error(resp, 500, "the head cannot record the sweep: %s", err.buf);
		pthread_mutex_unlock(&s->lock);
		sweep_free(w);
		strbuf_release(&err);
		return;
	}
	ALLOC_GROW(sw->v, sw->nr + 1, sw->alloc);
	sw->v[sw->nr++] = w;
	dtlog(DTLOG_INFO, "sweep %s (%s): %s search, %d trial(s), parallel %d, seed %llu, by '%s'",
	      w->id, w->name, json_get_str(spec, "method", "?"), w->cfg.max_trials, w->cfg.parallel,
	      (unsigned long long)w->seed, w->user);
	dt_http_json(resp, 201, json_pack("{s:o}", "sweep", sweep_json(w)));
	sched_wake(s);
	pthread_mutex_unlock(&s->lock);
	strbuf_release(&err);
}

/* w as c may see it: others' sweeps show id, name, user, state, times only (users.h) */
static json_t *sweep_json_for(struct sweep *w, const struct caller *c)
{
	if (caller_may_read(c, w->user, w->cfg.job.share_group))
		return sweep_json(w);
	return json_pack("{s:s,s:s,s:s,s:s,s:s?,s:o,s:o,s:b}", "id", w->id, "name", w->name,
			 "user", w->user, "state", w->state, "reason", w->reason, "created_at",
			 json_timestamp(w->created_us), "ended_at", json_timestamp(w->ended_us),
			 "redacted", 1);
}

static void h_list(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	json_t *arr;
	struct caller c;

	if (caller_of_locked(s, req, &c, resp) < 0)
		return;
	arr = json_array();
	/* oldest first, as every list of dtctl (docs/json.md, "Lists") */
	for (size_t i = 0; i < s->sweeps->nr; i++)
		json_array_append_new(arr, sweep_json_for(s->sweeps->v[i], &c));
	pthread_mutex_unlock(&s->lock);
	dt_http_json(resp, 200, json_pack("{s:o}", "sweeps", arr));
}

/* GET /v1/sweeps/<id or name> (action NULL) and POST .../pause, /resume, /stop
 * (action DT_PATH_*_SUFFIX) */
static void sweep_reply(struct dt_http_request *req, struct dt_http_response *resp,
			struct sched *s, const char *action)
{
	const char *id = dt_http_arg(req, "id");
	struct sweep *w;
	struct caller c;

	pthread_mutex_lock(&s->lock);
	w = sweep_find(s, id);
	if (caller_of(s, req, &c, resp) < 0)
		goto out;
	if (!w) {
		dt_http_error(resp, 404, "no sweep '%s' (see 'dtctl sweep list')", id);
		goto out;
	}
	if (!action && !caller_may_read(&c, w->user, w->cfg.job.share_group)) {
		struct strbuf what = STRBUF_INIT;

		/* its export holds its parameters, metrics and job template */
		strbuf_addf(&what, "sweep %s", w->id);
		caller_deny(resp, &c, what.buf, w->user, "reading");
		strbuf_release(&what);
		goto out;
	}
	if (action && !caller_may_steer(&c, w->user)) {
		struct strbuf what = STRBUF_INIT;

		strbuf_addf(&what, "sweep %s", w->id);
		caller_deny(resp, &c, what.buf, w->user, !strcmp(action, DT_PATH_STOP_SUFFIX) ?
			    "stopping" : !strcmp(action, DT_PATH_PAUSE_SUFFIX) ? "pausing" :
			    "resuming");
		strbuf_release(&what);
		goto out;
	}
	if (!action) {
		dt_http_json(resp, 200, export_json(w));
		goto out;
	}
	/* stopping a finished sweep again is done already (like cancel, pause twice) */
	if (sweep_final(w) && strcmp(action, DT_PATH_STOP_SUFFIX)) {
		dt_http_error(resp, 409, "sweep %s is already %s", w->id, w->state);
		goto out;
	}
	if (!strcmp(action, DT_PATH_PAUSE_SUFFIX) && !strcmp(w->state, DT_SWEEP_RUNNING)) {
		w->state = DT_SWEEP_PAUSED;
		sweep_save(s, w);
		dtlog(DTLOG_INFO, "sweep %s: paused (running trials go on)", w->id);
	} else if (!strcmp(action, DT_PATH_RESUME_SUFFIX) && !strcmp(w->state, DT_SWEEP_PAUSED)) {
		w->state = DT_SWEEP_RUNNING;
		sweep_save(s, w);
		dtlog(DTLOG_INFO, "sweep %s: resumed", w->id);
	} else if (!strcmp(action, DT_PATH_STOP_SUFFIX) && !sweep_final(w)) {
		sweep_set_reason(&w->reason, "stopped by the user");
		w->state = DT_SWEEP_STOPPED;
		w->ended_us = dt_now_us();
		sweep_save(s, w);
		for (size_t i = 0; i < w->nr; i++)
			if (!trial_final(w->t[i])) {
				cancel_trial_job(s, w->t[i], "the sweep was stopped");
				sweep_set_reason(&w->t[i]->reason, "the sweep was stopped");
				trial_set(s, w, w->t[i], DT_TRIAL_CANCELLED);
			}
		dtlog(DTLOG_INFO, "sweep %s: stopped by the user", w->id);
	}
	sched_wake(s);
	dt_http_json(resp, 200, json_pack("{s:o}", "sweep", sweep_json(w)));
out:
	pthread_mutex_unlock(&s->lock);
}

static void h_sweep(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	sweep_reply(req, resp, data, NULL);
}

static void h_sweep_pause(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	sweep_reply(req, resp, data, DT_PATH_PAUSE_SUFFIX);
}

static void h_sweep_resume(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	sweep_reply(req, resp, data, DT_PATH_RESUME_SUFFIX);
}

static void h_sweep_stop(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	sweep_reply(req, resp, data, DT_PATH_STOP_SUFFIX);
}

const struct dt_http_route sweeps_routes[] = {
	{ "POST", DT_PATH_SWEEPS, 0, h_create },
	{ "GET", DT_PATH_SWEEPS, 0, h_list },
	{ "GET", DT_PATH_SWEEP, 0, h_sweep },
	{ "POST", DT_PATH_SWEEP_PAUSE, 0, h_sweep_pause },
	{ "POST", DT_PATH_SWEEP_RESUME, 0, h_sweep_resume },
	{ "POST", DT_PATH_SWEEP_STOP, 0, h_sweep_stop },
};
const size_t sweeps_nr_routes = ARRAY_SIZE(sweeps_routes);

void sweeps_metrics(struct sched *s, struct strbuf *o)
{
	static const char *const sweep_states[] = { DT_SWEEP_RUNNING, DT_SWEEP_PAUSED,
						    DT_SWEEP_STOPPED, DT_SWEEP_COMPLETED,
						    DT_SWEEP_FAILED };
	unsigned long long ns[ARRAY_SIZE(sweep_states)] = { 0 };
	unsigned long long nt[ARRAY_SIZE(trial_states)] = { 0 };
	struct sweeps *sw = s->sweeps;

	for (size_t i = 0; sw && i < sw->nr; i++) {
		const struct sweep *w = sw->v[i];

		for (size_t k = 0; k < ARRAY_SIZE(sweep_states); k++)
			ns[k] += !strcmp(w->state, sweep_states[k]);
		for (size_t t = 0; t < w->nr; t++)
			for (size_t k = 0; k < ARRAY_SIZE(trial_states); k++)
				nt[k] += !strcmp(w->t[t]->state, trial_states[k]);
	}
	prom_family(o, "dtsched_sweeps", "gauge", "Sweeps known to dtsched, by state.");
	for (size_t k = 0; k < ARRAY_SIZE(sweep_states); k++) {
		const char *l[] = { "state", sweep_states[k], NULL };

		prom_sample(o, "dtsched_sweeps", l, (double)ns[k]);
	}
	prom_family(o, "dtsched_sweep_trials", "gauge", "Trials of all sweeps, by state.");
	for (size_t k = 0; k < ARRAY_SIZE(trial_states); k++) {
		const char *l[] = { "state", trial_states[k], NULL };

		prom_sample(o, "dtsched_sweep_trials", l, (double)nt[k]);
	}
}
