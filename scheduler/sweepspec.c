/*
 * sweepspec.c - the pure side of sweeps (sweeps.h): a sweep's config from
 * JSON, each trial's job spec (placeholders, W&B-style arguments), metric
 * report lines, and rebuilding the search and ASHA from stored trials and
 * reports (replay).  No state, no locks: unit-tested (tests/unit/test_sweep*.c).
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

#define SCAN_CHUNK (256 * 1024)
#define SCAN_MAX_BYTES (8 * SCAN_CHUNK)   /* per look: a huge file is read over many looks */

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
	c->pack = !strcmp(json_get_str(o, "pack", "jobs"), "allocation") ? SWEEP_PACK_ALLOCATION :
		  !strcmp(json_get_str(o, "pack", "jobs"), "array") ? SWEEP_PACK_ARRAY :
		  SWEEP_PACK_JOBS;
	p = json_object_get(o, "allocation");
	c->alloc_nodes = (int)json_get_int(p, "nodes", 0);
	c->alloc_gpus = (int)json_get_int(p, "gpus", 0);
	if ((p && !json_is_object(p)) || c->alloc_nodes < 0 || c->alloc_nodes > 256 ||
	    c->alloc_gpus < 0 || c->alloc_gpus > 64 || (p && !c->alloc_nodes)) {
		strbuf_addstr(err, "sweep: allocation needs nodes (1 to 256) and gpus per node "
			      "(0 to 64)");
		goto fail;
	}
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
struct asha *sweep_asha_new(const struct sweep_config *cfg)
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

json_t *num_or_null(int has, double v)
{
	return has && isfinite(v) ? json_real(v) : json_null();
}

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

/* One source of sweep_reader_scan_at(): name in dfd (in its subdirectory dir when
 * given: name is then "dir/file"), `name` in what `refused` says. */
static void reader_scan_file(struct sweep_reader *rd, int dfd, const char *where,
			     const char *dir, const char *name, long long *off, int from_log,
			     const char *metric, json_t *got, json_t *refused)
{
	struct strbuf why = STRBUF_INIT;
	size_t total = 0;
	char *buf;
	ssize_t n;
	size_t start = 0;
	int fd = -1, sub = dir ? sf_dir_at(dfd, dir, &why) : dfd;

	if (sub >= 0)
		fd = sf_open_read_at(sub, dir ? name + strlen(dir) + 1 : name, NULL, &why);
	if (fd < 0 && errno != ENOENT)
		dtlog(DTLOG_WARN, "trial metrics: ignoring %s in '%s'", why.buf, where);
	strbuf_release(&why);
	if (sub >= 0 && sub != dfd)
		close(sub);
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

void sweep_reader_scan_at(struct sweep_reader *rd, int job_dfd, const char *where,
			  const char *metric, json_t *got, json_t *refused)
{
	reader_scan_file(rd, job_dfd, where, NULL, "metrics.jsonl", &rd->mf_off, 0, metric, got,
			 refused);
	reader_scan_file(rd, job_dfd, where, "logs", "logs/0.log", &rd->log_off, 1, metric, got,
			 refused);
}

void sweep_reader_scan(struct sweep_reader *rd, const char *root, const char *job_rel,
		       const char *metric, json_t *got, json_t *refused)
{
	struct strbuf why = STRBUF_INIT;
	int dfd = sf_dir(root, job_rel, 0, &why);

	if (dfd < 0 && errno != ENOENT)
		dtlog(DTLOG_WARN, "trial metrics: ignoring %s", why.buf);
	strbuf_release(&why);
	if (dfd < 0)
		return;
	sweep_reader_scan_at(rd, dfd, job_rel, metric, got, refused);
	close(dfd);
}
