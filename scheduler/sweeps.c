/*
 * sweeps.c - dtsched's sweep controller: `dtctl sweep` without a terminal.
 *
 * A sweep is a search (search.c: grid, random, TPE) whose suggestions run
 * as trials, and a trial is an ordinary job submitted through jobs.c's
 * internal API, so placement, launch, retries and NODE_FAIL are the job
 * queue's.  The main loop calls sweeps_step() before jobs_step(); it
 *
 *   - follows every live trial's job, reads the metric reports its rank 0
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
 * Locking: everything here is under s->lock; file reads of metric sources
 * are small and incremental (offsets kept per trial).
 */
#include "sched-int.h"
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
#define SCAN_CHUNK (256 * 1024)

/* ============================================================ pure helpers */

json_t *sweep_parse_metric_line(const char *line, size_t len, int from_log)
{
	const char *p = line, *end = line + len;
	json_t *o;
	json_error_t e;

	if (from_log) {
		/* "<ts> O text": the timestamp, one space, the stream, one space */
		const char *sp = memchr(p, ' ', len);

		if (!sp || end - sp < 3 || sp[1] != 'O' || sp[2] != ' ')
			return NULL;
		p = sp + 3;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		if ((size_t)(end - p) < strlen(DT_METRIC_PREFIX) ||
		    memcmp(p, DT_METRIC_PREFIX, strlen(DT_METRIC_PREFIX)))
			return NULL;
		p += strlen(DT_METRIC_PREFIX);
		if (p < end && *p != ' ' && *p != '\t' && *p != '{')
			return NULL;
	}
	while (p < end && isspace((unsigned char)*p))
		p++;
	while (end > p && isspace((unsigned char)end[-1]))
		end--;
	if (p == end || *p != '{')
		return NULL;
	o = json_loadb(p, (size_t)(end - p), JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
	if (!json_is_object(o)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

int sweep_metric_value(const json_t *r, const char *metric, double *value, double *resource)
{
	json_t *v = json_object_get(r, metric), *x;

	if (!v)
		return -1;
	if (json_is_number(v))
		*value = json_number_value(v);
	else if (json_is_string(v) && !strcasecmp(json_string_value(v), "inf"))
		*value = INFINITY;
	else
		*value = NAN;
	*resource = -1;
	x = json_object_get(r, "epoch");
	if (!json_is_number(x))
		x = json_object_get(r, "step");
	if (json_is_number(x))
		*resource = json_number_value(x);
	return 0;
}

void sweep_param_env(struct strbuf *sb, const char *name)
{
	strbuf_addstr(sb, "DT_PARAM_");
	for (const char *c = name; *c; c++)
		strbuf_addch(sb, isalnum((unsigned char)*c) ? (char)toupper((unsigned char)*c) : '_');
}

/* Replace "{name}" of the suggestion's parameters in s; *used set when one was. */
static char *substitute(const char *s, const struct suggestion *sg, int *used)
{
	struct strbuf out = STRBUF_INIT;

	while (*s) {
		const char *close;

		if (*s == '{' && (close = strchr(s + 1, '}'))) {
			size_t n = (size_t)(close - s - 1);
			const struct suggestion_item *hit = NULL;

			for (size_t i = 0; i < sg->nr; i++)
				if (strlen(sg->items[i].name) == n && !memcmp(sg->items[i].name, s + 1, n))
					hit = &sg->items[i];
			if (hit) {
				strbuf_addstr(&out, hit->value);
				*used = 1;
				s = close + 1;
				continue;
			}
		}
		strbuf_addch(&out, *s++);
	}
	return strbuf_detach(&out, NULL);
}

/* sweep_trial_spec(), with argv (W&B's command, expanded) as the command when non-NULL */
static json_t *trial_spec(const json_t *job, const struct strvec *argv,
			  const struct suggestion *sg, int trial, const char *sweep_id,
			  const char *base, int gpus_per_trial)
{
	json_t *o = json_deep_copy(job), *cmd = json_object_get(o, "command"), *env, *tr, *v;
	int shell = json_is_true(json_object_get(o, "shell")), used = 0;
	struct strbuf sb = STRBUF_INIT;
	const char *k;
	size_t i;

	if (argv) {
		json_object_set_new(o, "command", json_strvec(argv));
		json_object_set_new(o, "shell", json_false());
		cmd = NULL;   /* W&B's macros said where the parameters go */
	}

	/* a placeholder in env: counts as the user choosing where parameters go */
	json_object_foreach(json_object_get(o, "env"), k, v) {
		char *w = json_is_string(v) ? substitute(json_string_value(v), sg, &used) : NULL;

		free(w);
	}
	if (json_is_array(cmd) && !shell) {
		json_t *neu = json_array();

		json_array_foreach(cmd, i, v) {
			char *w = substitute(json_string_value(v) ? json_string_value(v) : "", sg, &used);

			json_array_append_new(neu, json_string(w));
			free(w);
		}
		if (!used)
			for (i = 0; i < sg->nr; i++) {
				strbuf_reset(&sb);
				strbuf_addf(&sb, "--%s=%s", sg->items[i].name, sg->items[i].value);
				json_array_append_new(neu, json_string(sb.buf));
			}
		json_object_set_new(o, "command", neu);
	}
	tr = json_object_get(o, "trainer");
	if (json_is_object(tr))
		for (i = 0; i < sg->nr; i++)
			json_object_set_new(tr, sg->items[i].name, json_string(sg->items[i].value));
	env = json_object_get(o, "env");
	if (!json_is_object(env)) {
		env = json_object();
		json_object_set_new(o, "env", env);
	}
	json_object_foreach(env, k, v) {
		if (json_is_string(v)) {
			int u = 0;
			char *w = substitute(json_string_value(v), sg, &u);

			json_object_set_new(env, k, json_string(w));
			free(w);
		}
	}
	for (i = 0; i < sg->nr; i++) {
		strbuf_reset(&sb);
		sweep_param_env(&sb, sg->items[i].name);
		json_object_set_new(env, sb.buf, json_string(sg->items[i].value));
	}
	strbuf_reset(&sb);
	strbuf_addf(&sb, "%d", trial);
	json_object_set_new(env, "DT_TRIAL_ID", json_string(sb.buf));
	json_object_set_new(env, "DT_SWEEP_ID", json_string(sweep_id));
	strbuf_reset(&sb);
	strbuf_addf(&sb, "%s-t%d", base && *base ? base : sweep_id, trial);
	json_object_set_new(o, "name", json_string(sb.buf));
	if (json_get_int(o, "retries", 0) < 1)
		json_object_set_new(o, "retries", json_integer(1));
	if (gpus_per_trial > 0) {
		json_object_set_new(o, "gpus_per_node", json_integer(gpus_per_trial));
		json_object_set_new(o, "procs_per_node", json_integer(0));
	}
	json_object_del(o, "path");
	strbuf_release(&sb);
	return o;
}

json_t *sweep_trial_spec(const json_t *job, const struct suggestion *sg, int trial,
			 const char *sweep_id, const char *base, int gpus_per_trial)
{
	return trial_spec(job, NULL, sg, trial, sweep_id, base, gpus_per_trial);
}

json_t *sweep_wandb_trial_spec(const json_t *job, const struct strvec *argv,
			       const struct suggestion *sg, int trial, const char *sweep_id,
			       const char *base, int gpus_per_trial)
{
	return trial_spec(job, argv, sg, trial, sweep_id, base, gpus_per_trial);
}

/*
 * The value W&B's agent holds for a parameter: the typed value of a choice
 * (as W&B's YAML reader made it), else a number, an integer for int_uniform
 * and for quantized kinds with a whole q, a float otherwise.
 */
static json_t *wandb_value(const struct sweep_param *p, const struct suggestion_item *it)
{
	if (p->kind == PARAM_VALUE || p->kind == PARAM_VALUES) {
		for (size_t k = 0; k < p->values.nr && k < p->typed.nr; k++)
			if (!strcmp(p->values.v[k], it->value))
				return json_loads(p->typed.v[k], JSON_DECODE_ANY, NULL);
		return json_string(it->value);
	}
	if (!it->is_num)
		return json_string(it->value);
	if (p->kind == PARAM_INT_UNIFORM || (p->q_int && (p->kind == PARAM_Q_UNIFORM ||
	    p->kind == PARAM_Q_LOG_UNIFORM || p->kind == PARAM_Q_NORMAL ||
	    p->kind == PARAM_Q_LOG_NORMAL || p->kind == PARAM_Q_BETA)))
		return json_integer((json_int_t)llround(it->num));
	return json_real(it->num);
}

/* -1, 0, 1 comparing two parameters' paths part by part (W&B sorts each level by name) */
static int path_cmp(const struct sweep_param *a, const struct sweep_param *b)
{
	for (size_t i = 0; i < a->path.nr && i < b->path.nr; i++) {
		int c = strcmp(a->path.v[i], b->path.v[i]);

		if (c)
			return c;
	}
	return (a->path.nr > b->path.nr) - (a->path.nr < b->path.nr);
}

json_t *sweep_wandb_params(const struct sweep_config *cfg, const struct suggestion *sg)
{
	json_t *top = json_object();
	size_t *order = xcalloc(cfg->nr_params + 1, sizeof(*order)), n = 0;

	for (size_t i = 0; i < cfg->nr_params; i++)
		if (cfg->params[i].kind != PARAM_NESTED)
			order[n++] = i;
	/* insertion sort: a handful of parameters, and jansson keeps insertion order */
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && path_cmp(&cfg->params[order[j - 1]],
						     &cfg->params[order[j]]) > 0; j--) {
			size_t t = order[j];

			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	for (size_t i = 0; i < n; i++) {
		const struct sweep_param *p = &cfg->params[order[i]];
		const struct suggestion_item *it = suggestion_get(sg, p->name);
		json_t *obj = top;
		size_t depth = p->path.nr ? p->path.nr : 1;

		if (!it)
			continue;
		/* a nested group is one dict under its top-level name, as W&B renests it */
		for (size_t k = 0; k + 1 < depth; k++) {
			json_t *kid = json_object_get(obj, p->path.v[k]);

			if (!json_is_object(kid)) {
				kid = json_object();
				json_object_set_new(obj, p->path.v[k], kid);
			}
			obj = kid;
		}
		json_object_set_new(obj, p->path.nr ? p->path.v[depth - 1] : p->name,
				    wandb_value(p, it));
	}
	free(order);
	return top;
}

int sweep_wandb_argv(const struct sweep_config *cfg, const struct suggestion *sg,
		     const char *args_file, struct strvec *argv, struct strbuf *args_json)
{
	json_t *params = sweep_wandb_params(cfg, sg), *v;
	struct strbuf sb = STRBUF_INIT;
	const char *key;
	int used_file = 0;

	strbuf_reset(args_json);
	py_json(args_json, params);
	for (size_t i = 0; i < cfg->command.nr; i++) {
		const char *c = cfg->command.v[i];

		/* as W&B's agent: only an item that is a whole macro is replaced */
		if (!strcmp(c, "${env}")) {
			strvec_push(argv, "/usr/bin/env");
		} else if (!strcmp(c, "${interpreter}")) {
			strvec_push(argv, "python");
		} else if (!strcmp(c, "${program}")) {
			strvec_push(argv, cfg->program ? cfg->program : "");
		} else if (!strcmp(c, "${args_json}")) {
			strvec_push(argv, args_json->buf);
		} else if (!strcmp(c, "${args_json_file}")) {
			strvec_push(argv, args_file ? args_file : "");
			used_file = 1;
		} else if (!strcmp(c, "${args}") || !strcmp(c, "${args_no_hyphens}") ||
			   !strcmp(c, "${args_no_equals}") || !strcmp(c, "${args_no_boolean_flags}")) {
			json_object_foreach(params, key, v) {
				strbuf_reset(&sb);
				if (!strcmp(c, "${args_no_boolean_flags}") && json_is_boolean(v)) {
					if (json_is_true(v))
						strvec_pushf(argv, "--%s", key);
					continue;
				}
				if (!strcmp(c, "${args_no_equals}")) {
					strvec_pushf(argv, "--%s", key);
					py_str(&sb, v);
					strvec_push(argv, sb.buf);
					continue;
				}
				strbuf_addf(&sb, "%s%s=", strcmp(c, "${args_no_hyphens}") ? "--" : "", key);
				py_str(&sb, v);
				strvec_push(argv, sb.buf);
			}
		} else {
			strvec_push(argv, c);
		}
	}
	json_decref(params);
	strbuf_release(&sb);
	return used_file;
}

static const struct {
	const char *name;
	enum param_kind kind;
} kinds[] = {
	{ "constant", PARAM_VALUE }, { "categorical", PARAM_VALUES }, { "uniform", PARAM_UNIFORM },
	{ "int_uniform", PARAM_INT_UNIFORM }, { "log_uniform_values", PARAM_LOG_UNIFORM },
	{ "q_uniform", PARAM_Q_UNIFORM }, { "normal", PARAM_NORMAL }, { "parameters", PARAM_NESTED },
	{ "q_log_uniform_values", PARAM_Q_LOG_UNIFORM }, { "q_normal", PARAM_Q_NORMAL },
	{ "log_normal", PARAM_LOG_NORMAL }, { "q_log_normal", PARAM_Q_LOG_NORMAL },
	{ "beta", PARAM_BETA }, { "q_beta", PARAM_Q_BETA },
	/* the names the export uses */
	{ "value", PARAM_VALUE }, { "values", PARAM_VALUES }, { "log_uniform", PARAM_LOG_UNIFORM },
};

static char *scalar_string(const json_t *v)
{
	char buf[64];

	if (json_is_string(v))
		return xstrdup(json_string_value(v));
	if (json_is_integer(v)) {
		snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
		return xstrdup(buf);
	}
	if (json_is_real(v)) {
		search_format_double(buf, sizeof(buf), json_real_value(v));
		return xstrdup(buf);
	}
	if (json_is_true(v))
		return xstrdup("true");
	if (json_is_false(v))
		return xstrdup("false");
	return NULL;
}

int sweep_config_from_json(struct sweep_config *c, const json_t *o, struct strbuf *err)
{
	const char *m = json_get_str(o, "method", ""), *k;
	json_t *metric = json_object_get(o, "metric"), *params = json_object_get(o, "parameters");
	json_t *et = json_object_get(o, "early_terminate"), *p;

	memset(c, 0, sizeof(*c));
	job_config_init(&c->job);
	strvec_init(&c->command);
	strvec_init(&c->notes);
	if (!json_is_object(o)) {
		strbuf_addstr(err, "sweep: expected an object");
		goto fail;
	}
	if (!strcmp(m, "grid"))
		c->method = SWEEP_GRID;
	else if (!strcmp(m, "random"))
		c->method = SWEEP_RANDOM;
	else if (!strcmp(m, "bayes"))
		c->method = SWEEP_BAYES;
	else {
		strbuf_addf(err, "sweep: unknown method '%s' (grid, random or bayes)", m);
		goto fail;
	}
	/* grid and random need no metric (W&B's rule): sweep_config_check() decides */
	if (metric && !json_is_null(metric) &&
	    (!json_is_object(metric) || !json_get_str(metric, "name", NULL))) {
		strbuf_addstr(err, "sweep: key 'metric': expected a mapping with a 'name'");
		goto fail;
	}
	if (json_get_str(metric, "name", NULL))
		c->metric_name = xstrdup(json_get_str(metric, "name", ""));
	c->goal = !strcmp(json_get_str(metric, "goal", "minimize"), "maximize") ? GOAL_MAXIMIZE :
		  GOAL_MINIMIZE;
	if (!json_is_object(params) || !json_object_size(params)) {
		strbuf_addstr(err, "sweep: 'parameters' must be a non-empty object");
		goto fail;
	}
	c->params = xcalloc(json_object_size(params), sizeof(*c->params));
	json_object_foreach(params, k, p) {
		struct sweep_param *sp = &c->params[c->nr_params];
		const char *d = json_get_str(p, "distribution", json_get_str(p, "kind", NULL));
		json_t *vals = json_object_get(p, "values"), *v;
		size_t i;
		int found = 0;

		strvec_init(&sp->values);
		strvec_init(&sp->typed);
		strvec_init(&sp->path);
		sp->name = xstrdup(k);
		c->nr_params++;
		json_array_foreach(json_object_get(p, "path"), i, v)
			if (json_is_string(v))
				strvec_push(&sp->path, json_string_value(v));
		if (!sp->path.nr)
			strvec_push(&sp->path, k);
		json_array_foreach(json_object_get(p, "typed"), i, v) {
			char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(17));

			strvec_push(&sp->typed, t);
			free(t);
		}
		if (!d)
			d = json_object_get(p, "value") ? "constant" : vals ? "categorical" : "";
		for (i = 0; i < ARRAY_SIZE(kinds); i++)
			if (!strcmp(kinds[i].name, d)) {
				sp->kind = kinds[i].kind;
				found = 1;
			}
		if (!found) {
			strbuf_addf(err, "sweep: parameter '%s': unknown distribution '%s'", k, d);
			goto fail;
		}
		if (sp->kind == PARAM_VALUE) {
			char *s = scalar_string(json_object_get(p, "value"));

			if (!s && json_array_size(vals) == 1)
				s = scalar_string(json_array_get(vals, 0));
			if (!s) {
				strbuf_addf(err, "sweep: parameter '%s': needs a 'value'", k);
				goto fail;
			}
			strvec_push(&sp->values, s);
			free(s);
		} else if (sp->kind == PARAM_VALUES) {
			json_array_foreach(vals, i, v) {
				char *s = scalar_string(v);

				if (!s) {
					strbuf_addf(err, "sweep: parameter '%s': values[%zu] is not a scalar", k, i);
					goto fail;
				}
				strvec_push(&sp->values, s);
				free(s);
			}
			if (!sp->values.nr) {
				strbuf_addf(err, "sweep: parameter '%s': 'values' is empty", k);
				goto fail;
			}
		}
		sp->min = json_get_real(p, "min", 0);
		sp->max = json_get_real(p, "max", 0);
		sp->q = json_get_real(p, "q", 1);
		sp->mu = json_get_real(p, "mu", 0);
		sp->sigma = json_get_real(p, "sigma", 1);
		sp->a = json_get_real(p, "a", 1);
		sp->b = json_get_real(p, "b", 1);
		sp->q_int = json_is_true(json_object_get(p, "q_int"));
		if (sp->kind == PARAM_VALUES &&
		    json_array_size(json_object_get(p, "probabilities")) == sp->values.nr) {
			sp->probs = xcalloc(sp->values.nr, sizeof(*sp->probs));
			json_array_foreach(json_object_get(p, "probabilities"), i, v)
				sp->probs[i] = json_number_value(v);
		}
	}
	if (json_is_number(json_object_get(metric, "target"))) {
		c->has_target = 1;
		c->target = json_number_value(json_object_get(metric, "target"));
	}
	if (json_is_array(json_object_get(o, "command"))) {
		json_t *v;
		size_t i;

		c->wandb = 1;
		c->program = json_get_str(o, "program", NULL) ? xstrdup(json_get_str(o, "program", "")) : NULL;
		json_array_foreach(json_object_get(o, "command"), i, v)
			strvec_push(&c->command, json_string_value(v) ? json_string_value(v) : "");
	}
	c->run_cap = (int)json_get_int(o, "run_cap", 0);
	if (json_is_object(et)) {
		json_t *v;
		size_t i;

		c->early_terminate = 1;
		c->et_min_iter = (int)json_get_int(et, "min_iter", 1);
		c->et_eta = json_get_real(et, "eta", 3);
		c->et_max_iter = (int)json_get_int(et, "max_iter", 0);
		c->et_s = (int)json_get_int(et, "s", 0);
		if (c->et_min_iter < 1 || !(c->et_eta > 1)) {
			strbuf_addstr(err, "sweep: early_terminate needs min_iter >= 1 and eta above 1");
			goto fail;
		}
		json_array_foreach(json_object_get(et, "bands"), i, v) {
			if (c->et_nr_bands == (int)ARRAY_SIZE(c->et_bands) || !json_is_integer(v) ||
			    json_integer_value(v) < 1 || json_integer_value(v) > INT_MAX) {
				strbuf_addstr(err, "sweep: early_terminate.bands needs at most 64 "
					      "positive integers");
				goto fail;
			}
			c->et_bands[c->et_nr_bands++] = (int)json_integer_value(v);
		}
	}
	c->max_trials = (int)json_get_int(o, "max_trials", 0);
	c->parallel = (int)json_get_int(o, "parallel", 0);
	c->gpus_per_trial = (int)json_get_int(o, "gpus_per_trial", 0);
	c->seed = (unsigned long long)json_get_int(o, "seed", 0);
	c->max_failures = (int)json_get_int(o, "max_failures", 3);
	c->checkpoint = json_is_true(json_object_get(o, "checkpoint"));
	/* the loader's own rules, so that what `dtctl validate` accepts is accepted here */
	if (sweep_config_check(c, err) < 0)
		goto fail;
	job_config_release(&c->job);
	if (job_config_from_json(&c->job, json_object_get(o, "job"), err) < 0) {
		job_config_init(&c->job);
		goto fail;
	}
	return 0;
fail:
	sweep_config_release(c);
	memset(c, 0, sizeof(*c));
	return -1;
}

struct search *sweep_replay_search(const struct sweep_config *cfg, uint64_t seed,
				   const struct sweep_replay_trial *t, size_t nr,
				   struct strbuf *err)
{
	struct search *s = search_new(cfg, seed, err);

	if (!s)
		return NULL;
	for (size_t i = 0; i < nr; i++) {
		const char *st = t[i].state;

		if (!strcmp(st, DT_TRIAL_COMPLETED) && t[i].has_value && !t[i].no_metric)
			search_observe_at(s, t[i].sg, t[i].value, SEARCH_COMPLETED, t[i].resource);
		else if ((!strcmp(st, DT_TRIAL_PRUNED) || !strcmp(st, DT_TRIAL_PAUSED)) &&
			 t[i].has_value)
			search_observe_at(s, t[i].sg, t[i].value, SEARCH_PRUNED, t[i].resource);
		else if (!strcmp(st, DT_TRIAL_COMPLETED) || !strcmp(st, DT_TRIAL_FAILED) ||
			 !strcmp(st, DT_TRIAL_PRUNED))
			search_observe_at(s, t[i].sg, NAN, SEARCH_FAILED, -1);
	}
	search_set_next_seq(s, (long long)nr);
	return s;
}

/*
 * The sweep's ASHA: a real eta, W&B's bands as the rungs when the file
 * has `s`, promotion when the trials checkpoint.  NULL when the config is
 * out of range (the loader refuses that).
 */
static struct asha *sweep_asha_new(const struct sweep_config *cfg)
{
	struct asha *a = asha_new(cfg->et_min_iter, 2, cfg->et_max_iter, cfg->goal);
	double res[ARRAY_SIZE(cfg->et_bands)];

	for (int k = 0; k < cfg->et_nr_bands; k++)
		res[k] = cfg->et_bands[k];
	if (a && (asha_set_eta(a, cfg->et_eta) < 0 ||
		  (cfg->et_nr_bands && asha_set_rungs(a, res, (size_t)cfg->et_nr_bands) < 0))) {
		asha_free(a);
		return NULL;
	}
	if (a)
		asha_set_promotion(a, cfg->checkpoint);
	return a;
}

struct asha *sweep_replay_asha(const struct sweep_config *cfg, const struct sweep_report *r,
			       size_t nr)
{
	struct asha *a;

	if (!cfg->early_terminate)
		return NULL;
	a = sweep_asha_new(cfg);
	for (size_t i = 0; a && i < nr; i++)
		asha_report(a, r[i].trial, r[i].resource, r[i].value);
	return a;
}

/* ============================================================ the controller */

struct trial {
	int no;                   /* 1-based; its suggestion's seq is no - 1 */
	char job[16];             /* "" while it has none */
	struct suggestion sg;
	const char *state;        /* DT_TRIAL_* */
	int has_value, no_metric;
	double value, resource;   /* last reported (PRUNED: the value it was pruned at) */
	long long created_us, ended_us;
	struct sweep_reader rd;   /* how far its job's sources are read (saved with the reports) */
	double reached;           /* resource of its last recorded report (-1: none) */
	int resubmits;
	int stop_pending;         /* PRUNED/PAUSED/CANCELLED: its job may still need stopping */
	char *resume;             /* promoted: DT_RESUME, the ckpt dir of the job it paused in */
	int nreports;
	json_t *metrics;          /* the reports, in order */
	long long scanned_ms;
	char *reason;
};

struct sweep {
	long long seq;
	char id[16];
	char *name, *shared_dir, *user;
	char *submit_dir;         /* where `dtctl sweep` ran: the trials start there (or NULL) */
	json_t *spec;             /* SWEEPSPEC as received */
	struct sweep_config cfg;
	uint64_t seed;
	const char *state;        /* DT_SWEEP_* */
	char *reason;
	long long created_us, ended_us;
	struct search *search;
	struct asha *asha;
	struct trial **t;
	size_t nr, alloc;
	int failures, exhausted;
	int target_hit;           /* the trial whose value reached metric.target, 0 = none */
	double target_value;
	struct sweep_report *replay;   /* while loading: the stored reports, in order */
	size_t nr_replay, alloc_replay;
};

struct sweeps {
	struct sweep **v;
	size_t nr, alloc;
	sqlite3_stmt *st_sweep, *st_trial, *st_report;
};

static const char sweeps_schema[] =
	"CREATE TABLE IF NOT EXISTS sweeps("
	"  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, state TEXT, data TEXT);"
	"CREATE TABLE IF NOT EXISTS sweep_trials("
	"  sweep TEXT NOT NULL, trial INTEGER NOT NULL, job_id TEXT, state TEXT, data TEXT,"
	"  PRIMARY KEY(sweep, trial));"
	"CREATE TABLE IF NOT EXISTS sweep_reports("
	"  sweep TEXT NOT NULL, trial INTEGER NOT NULL, n INTEGER NOT NULL, data TEXT,"
	"  PRIMARY KEY(sweep, trial, n));";

static int trial_final(const struct trial *t)
{
	return strcmp(t->state, DT_TRIAL_PENDING) && strcmp(t->state, DT_TRIAL_RUNNING);
}

static int sweep_final(const struct sweep *w)
{
	return strcmp(w->state, DT_SWEEP_RUNNING) && strcmp(w->state, DT_SWEEP_PAUSED);
}

/*
 * W&B's metric.target: once a trial reports a value at or beyond it (by the
 * goal), no new trial starts; the running ones finish, then the sweep is
 * COMPLETED.
 */
static void check_target(struct sweep *w, int trial, double v)
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

/* Every trial state, in the order counts and metrics list them. */
static const char *const trial_states[] = { DT_TRIAL_PENDING, DT_TRIAL_RUNNING,
					    DT_TRIAL_COMPLETED, DT_TRIAL_PRUNED, DT_TRIAL_FAILED,
					    DT_TRIAL_CANCELLED, DT_TRIAL_PAUSED };

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

static json_t *num_or_null(int has, double v)
{
	return has && isfinite(v) ? json_real(v) : json_null();
}

static void trial_free(struct trial *t)
{
	suggestion_release(&t->sg);
	json_decref(t->metrics);
	free(t->reason);
	free(t->resume);
	free(t);
}

static void sweep_free(struct sweep *w)
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

/* ---------------------------------------------------------------- SQLite */

static int sweep_save(struct sched *s, struct sweep *w)
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

static void trial_save(struct sched *s, struct sweep *w, struct trial *t)
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

static void report_save(struct sched *s, struct sweep *w, struct trial *t, int n, const json_t *r)
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

static void set_reason(char **dst, const char *fmt, ...) DT_PRINTF(2, 3);
static void set_reason(char **dst, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	free(*dst);
	*dst = strbuf_detach(&sb, NULL);
}

static void sweep_end(struct sched *s, struct sweep *w, const char *state)
{
	w->state = state;
	w->ended_us = dt_now_us();
	sweep_save(s, w);
	dtlog(!strcmp(state, DT_SWEEP_FAILED) ? DTLOG_WARN : DTLOG_INFO, "sweep %s (%s): %s%s%s",
	      w->id, w->name, state, w->reason ? ": " : "", w->reason ? w->reason : "");
}

/* A trial's state change: SQLite first, then whatever follows from it. */
static void trial_set(struct sched *s, struct sweep *w, struct trial *t, const char *state)
{
	if (!strcmp(t->state, state))
		return;
	t->state = state;
	if (trial_final(t) && !t->ended_us)
		t->ended_us = dt_now_us();
	trial_save(s, w, t);
	dtlog(DTLOG_INFO, "sweep %s trial %d (%s): %s", w->id, t->no, t->job, state);
}

/* ------------------------------------------------------------ load */

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

static struct sweep *sweep_find(struct sched *s, const char *id)
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
			set_reason(&w->reason, "cannot rebuild the search: %s", err.buf);
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
	if (db_exec(s, sweeps_schema) < 0 ||
	    sqlite3_prepare_v2(s->db, "UPDATE sweeps SET id=?1, state=?2, data=?3 WHERE seq=?4", -1,
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

/* ------------------------------------------------------------ metrics */

#define SCAN_MAX_BYTES (8 * SCAN_CHUNK)   /* per look: a huge file is read over many looks */

/* r's epoch and step, -INFINITY where it has none */
static void report_progress(const json_t *r, double *epoch, double *step)
{
	json_t *e = json_object_get(r, "epoch"), *st = json_object_get(r, "step");

	*epoch = json_is_number(e) ? json_number_value(e) : -INFINITY;
	*step = json_is_number(st) ? json_number_value(st) : -INFINITY;
}

void sweep_reader_note(struct sweep_reader *rd, const json_t *r)
{
	double e, st;

	report_progress(r, &e, &st);
	if (e == -INFINITY && st == -INFINITY)
		return;   /* an ordinal report: says nothing of progress */
	rd->epoch = e;
	rd->step = st;
}

/* Does r repeat a recorded report: its (epoch, step) not past the last one's? */
static int reader_repeats(const struct sweep_reader *rd, const json_t *r)
{
	double e, st;

	report_progress(r, &e, &st);
	if (e == -INFINITY && st == -INFINITY)
		return 0;
	return e < rd->epoch || (e == rd->epoch && st <= rd->step);
}

/* One source of sweep_reader_scan(): root/rel, `name` in what `refused` says. */
static void reader_scan_file(struct sweep_reader *rd, const char *root, const char *rel,
			     const char *name, long long *off, int from_log, const char *metric,
			     json_t *got, json_t *refused)
{
	struct strbuf why = STRBUF_INIT;
	size_t total = 0;
	char *buf;
	ssize_t n;
	size_t start = 0;
	int fd = sf_open_read(root, rel, NULL, &why);

	if (fd < 0 && errno != ENOENT)
		dtlog(DTLOG_WARN, "trial metrics: ignoring %s", why.buf);
	strbuf_release(&why);
	if (fd < 0)
		return;
	buf = xmalloc(SCAN_CHUNK);
	while (total < SCAN_MAX_BYTES) {
		n = pread(fd, buf, SCAN_CHUNK, (off_t)*off);
		if (n <= 0)
			break;
		total += (size_t)n;
		start = 0;
		for (size_t i = 0; i < (size_t)n; i++) {
			json_t *r;
			double v, res;

			if (buf[i] != '\n')
				continue;
			r = sweep_parse_metric_line(buf + start, i - start, from_log);
			if (r && sweep_metric_value(r, metric, &v, &res) == 0) {
				if (reader_repeats(rd, r)) {
					json_array_append_new(refused, json_pack(
						"{s:s,s:I,s:O,s:o,s:o}", "file", name,
						"offset", (json_int_t)(*off + (long long)start),
						"report", r,
						"last_epoch", num_or_null(isfinite(rd->epoch), rd->epoch),
						"last_step", num_or_null(isfinite(rd->step), rd->step)));
				} else {
					sweep_reader_note(rd, r);
					json_array_append(got, r);
				}
			}
			json_decref(r);
			start = i + 1;
		}
		if (!start) {
			if (n == SCAN_CHUNK)      /* one line longer than a chunk: skip it */
				*off += n;
			break;
		}
		*off += (long long)start;
		if (n < SCAN_CHUNK)
			break;
	}
	free(buf);
	close(fd);
}

void sweep_reader_scan(struct sweep_reader *rd, const char *root, const char *job_rel,
		       const char *metric, json_t *got, json_t *refused)
{
	struct strbuf path = STRBUF_INIT;

	strbuf_addf(&path, "%s/metrics.jsonl", job_rel);
	reader_scan_file(rd, root, path.buf, "metrics.jsonl", &rd->mf_off, 0, metric, got,
			 refused);
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/logs/0.log", job_rel);
	reader_scan_file(rd, root, path.buf, "logs/0.log", &rd->log_off, 1, metric, got, refused);
	strbuf_release(&path);
}

static void cancel_trial_job(struct sched *s, struct trial *t, const char *why)
{
	struct job_view v;

	t->stop_pending = 1;

	if (t->job[0] && jobs_view(s, t->job, &v) == 0 && !v.cancelled &&
	    (!strcmp(v.state, DT_JOB_PENDING) || !strcmp(v.state, DT_JOB_RUNNING)))
		jobs_cancel(s, t->job, why);
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
	sweep_reader_scan(&t->rd, shared, rel, w->cfg.metric_name, got, refused);
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
		if (!w->target_hit) {
			check_target(w, t->no, v);
			if (w->target_hit)
				dtlog(DTLOG_INFO, "sweep %s: trial %d reached the metric target (%s %g); "
				      "no new trials", w->id, t->no, w->cfg.metric_name, v);
		}
		switch (w->asha ? asha_report(w->asha, t->no, res, v) : ASHA_CONTINUE) {
		case ASHA_PRUNE:
			set_reason(&t->reason, "pruned by ASHA at %s %g (%s %g)",
				   json_object_get(r, "epoch") ? "epoch" : "step", res,
				   w->cfg.metric_name, v);
			t->state = DT_TRIAL_PRUNED;
			t->ended_us = dt_now_us();
			break;
		case ASHA_PAUSE:
			set_reason(&t->reason, "paused by ASHA at %s %g (%s %g): resumes from its "
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
	snprintf(t->job, sizeof(t->job), "%s", id);
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
	set_reason(&w->reason, "%s", why);
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
	set_reason(&t->reason, "%s before its job could be stopped at the rung: nothing to "
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
	if (!t->job[0] || jobs_view(s, t->job, &v) < 0) {
		/* its job never made it to the database: submit it again */
		if (trial_submit(s, w, t, &err) < 0) {
			set_reason(&t->reason, "cannot submit: %s", err.buf);
			trial_set(s, w, t, DT_TRIAL_FAILED);
		}
		strbuf_release(&err);
		return;
	}
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
					set_reason(&t->reason, "no metric: the trial never reported '%s'",
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
					set_reason(&t->reason, "cannot requeue: %s", err.buf);
					trial_set(s, w, t, DT_TRIAL_FAILED);
				}
			} else if (!strcmp(jst, DT_JOB_CANCELLED)) {
				set_reason(&t->reason, "its job %s was cancelled", t->job);
				search_observe_at(w->search, &t->sg, NAN, SEARCH_FAILED, -1);
				trial_set(s, w, t, DT_TRIAL_CANCELLED);
			} else {
				set_reason(&t->reason, "job %s %s%s%s", t->job, jst, jreason ? ": " : "",
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
		set_reason(&t->reason, "cannot resume: %s", err.buf);
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
		set_reason(&t->reason, "not promoted past %g: %s", t->resource,
			   !strcmp(state, DT_TRIAL_PRUNED) ? "not in the top 1/eta of its rung" :
			   "the sweep ended");
		trial_set(s, w, t, state);
	}
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
		for (size_t i = 0; i < w->nr; i++) {
			struct job_view v;

			if (trial_final(w->t[i])) {
				stopping += w->t[i]->stop_pending &&
					    !strcmp(w->t[i]->state, DT_TRIAL_PAUSED);
				continue;
			}
			live++;
			if (!w->t[i]->job[0] || jobs_view(s, w->t[i]->job, &v) < 0 ||
			    !strcmp(v.state, DT_JOB_PENDING))
				waiting++;
		}
		if (w->cfg.parallel ? live >= (size_t)w->cfg.parallel : waiting > 0)
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
			for (size_t k = 0; k < w->nr; k++)
				if (!trial_final(w->t[k]) || w->t[k]->stop_pending)
					trial_follow(s, w, w->t[k]);
			continue;
		}
		for (size_t k = 0; k < w->nr && !sweep_final(w); k++)
			trial_follow(s, w, w->t[k]);
		if (sweep_final(w))
			continue;
		sweep_top_up(s, w);
		if (sweep_final(w))
			continue;
		/* a trial whose job is still stopping is not done reporting */
		for (size_t k = 0; k < w->nr; k++)
			live += !trial_final(w->t[k]) || w->t[k]->stop_pending;
		if (!live && strcmp(w->state, DT_SWEEP_PAUSED) &&
		    (w->exhausted || w->target_hit || w->nr >= (size_t)w->cfg.max_trials)) {
			sweep_end_paused(s, w, DT_TRIAL_PRUNED);
			free(w->reason);
			w->reason = NULL;
			if (w->target_hit)
				set_reason(&w->reason, "metric target reached: trial %d reported %s %g "
					   "(target %g)", w->target_hit, w->cfg.metric_name,
					   w->target_value, w->cfg.target);
			sweep_end(s, w, DT_SWEEP_COMPLETED);
		}
	}
	pthread_mutex_unlock(&s->lock);
}

/* ------------------------------------------------------------ JSON views */

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
	w->user = xstrdup(json_get_str(req->json, "user", ""));
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

static void h_list(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	json_t *arr = json_array();

	(void)req;
	pthread_mutex_lock(&s->lock);
	/* oldest first, as every list of dtctl (docs/json.md, "Lists") */
	for (size_t i = 0; i < s->sweeps->nr; i++)
		json_array_append_new(arr, sweep_json(s->sweeps->v[i]));
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

	pthread_mutex_lock(&s->lock);
	w = sweep_find(s, id);
	if (!w) {
		dt_http_error(resp, 404, "no sweep '%s' (see 'dtctl sweep list')", id);
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
		set_reason(&w->reason, "stopped by the user");
		w->state = DT_SWEEP_STOPPED;
		w->ended_us = dt_now_us();
		sweep_save(s, w);
		for (size_t i = 0; i < w->nr; i++)
			if (!trial_final(w->t[i])) {
				cancel_trial_job(s, w->t[i], "the sweep was stopped");
				set_reason(&w->t[i]->reason, "the sweep was stopped");
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
