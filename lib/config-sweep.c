/*
 * config-sweep.c - the schema of sweep.yaml (config.h's struct sweep_config),
 * W&B's sweep format included: method, metric, parameters (every W&B
 * distribution, nested groups flattened to dotted names), hyperband early
 * termination, the job each trial runs, W&B's program:/command:, the checks
 * across keys, defaults and JSON.
 * The YAML tree and the getters are config-yaml.c's (config-int.h).
 */
#include "config-int.h"
#include "json.h"
#include "pyfmt.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "math-dl.h"   /* last: exp, log10, pow... load libm on first use */

#define GRID_MAX 1000000LL    /* largest grid a sweep may enumerate */
#define INT_UNIFORM_MAX 1e15   /* |bound| of int_uniform: exact in a double */

/* --------------------------------------------------------------- sweep */

static const char *const methods[] = { "grid", "random", "bayes", NULL };
static const char *const goals[] = { "minimize", "maximize", NULL };
static const char *const sweep_keys[] = {
	"method", "metric", "parameters", "early_terminate", "job", "max_trials", "parallel",
	"gpus_per_trial", "seed", "max_failures", "name", "description", "program", "command",
	"run_cap", "project", "entity", "checkpoint", "notify", "pack", "allocation", NULL,
};
static const char *const packs[] = { "jobs", "allocation", NULL };
static const char *const allocation_keys[] = { "nodes", "gpus", NULL };
static const struct foreign_key sweep_foreign[] = {
	{ "controller", "dtsched is the controller; remove it" },
	{ "imports", "install packages in the node setup template; remove it" },
	{ "scheduler", "dtsched's search is grid, random or bayes (TPE); remove it" },
	{ "metrics", "dtctl optimises one metric; use 'metric:'" },
	{ "image_uri", "W&B Launch is not used; give 'program:' or 'job:'" },
	{ NULL, NULL },
};
static const char *const metric_keys[] = { "name", "goal", "target", NULL };
static const struct foreign_key metric_foreign[] = {
	{ "impute", "failed trials are left out of the bayes model; remove it" },
	{ "impute_while_running", "the bayes model sees finished trials only; remove it" },
	{ NULL, NULL },
};
static const char *const et_keys[] = { "type", "min_iter", "eta", "max_iter", "s", "strict", NULL };
static const char *const param_keys[] = {
	"value", "values", "distribution", "min", "max", "q", "mu", "sigma", "a", "b",
	"probabilities", "parameters", NULL,
};

/*
 * The distributions of W&B's sweep schema.  The first name of a kind is its
 * own (what the JSON form says); the others load as that kind with their
 * bounds turned into values: BOUNDS_EXP (log_uniform, q_log_uniform: min and
 * max are natural logs) and BOUNDS_NEG_EXP (inv_log_uniform: the value is
 * exp(-U(min, max)), log-uniform on [e^-max, e^-min]).
 */
enum { BOUNDS_VALUES, BOUNDS_EXP, BOUNDS_NEG_EXP };

static const struct {
	const char *name;
	enum param_kind kind;
	int bounds;
} distributions[] = {
	{ "constant", PARAM_VALUE, 0 },
	{ "categorical", PARAM_VALUES, 0 },
	{ "categorical_w_probabilities", PARAM_VALUES, 0 },
	{ "uniform", PARAM_UNIFORM, 0 },
	{ "int_uniform", PARAM_INT_UNIFORM, 0 },
	{ "log_uniform_values", PARAM_LOG_UNIFORM, BOUNDS_VALUES },
	{ "log_uniform", PARAM_LOG_UNIFORM, BOUNDS_EXP },
	/* exp(-U(-ln max, -ln min)) is log-uniform on [min, max] */
	{ "inv_log_uniform_values", PARAM_LOG_UNIFORM, BOUNDS_VALUES },
	{ "inv_log_uniform", PARAM_LOG_UNIFORM, BOUNDS_NEG_EXP },
	{ "q_uniform", PARAM_Q_UNIFORM, 0 },
	{ "q_log_uniform_values", PARAM_Q_LOG_UNIFORM, BOUNDS_VALUES },
	{ "q_log_uniform", PARAM_Q_LOG_UNIFORM, BOUNDS_EXP },
	{ "normal", PARAM_NORMAL, 0 },
	{ "q_normal", PARAM_Q_NORMAL, 0 },
	{ "log_normal", PARAM_LOG_NORMAL, 0 },
	{ "q_log_normal", PARAM_Q_LOG_NORMAL, 0 },
	{ "beta", PARAM_BETA, 0 },
	{ "q_beta", PARAM_Q_BETA, 0 },
};

const char *sweep_param_kind_name(enum param_kind k)
{
	for (size_t i = 0; i < ARRAY_SIZE(distributions); i++)
		if (distributions[i].kind == k)
			return distributions[i].name;
	return "parameters";
}

/* The keys of one parameter as written, before they are checked together. */
struct param_keys {
	struct ynode *value, *values, *dist, *min, *max, *q, *mu, *sigma, *a, *b, *probs, *nested;
};

static int param_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct param_keys *pk = data;
	struct {
		const char *key;
		struct ynode **slot;
	} slots[] = {
		{ "value", &pk->value }, { "values", &pk->values }, { "distribution", &pk->dist },
		{ "min", &pk->min }, { "max", &pk->max }, { "q", &pk->q }, { "mu", &pk->mu },
		{ "sigma", &pk->sigma }, { "a", &pk->a }, { "b", &pk->b },
		{ "probabilities", &pk->probs }, { "parameters", &pk->nested },
	};

	(void)c;
	(void)path;
	for (size_t i = 0; i < ARRAY_SIZE(slots); i++)
		if (!strcmp(key, slots[i].key))
			*slots[i].slot = v;
	return 0;
}

static int is_int_text(const char *s)
{
	long long v;

	return parse_long(s, &v) == 0;
}

/*
 * The JSON value a YAML 1.1 reader (PyYAML, which W&B uses) makes of a
 * plain scalar: null, booleans, decimal integers, floats with a '.'
 * (PyYAML reads 1e-3 as a string), else the string.  Quoted scalars are
 * strings.
 */
static json_t *yaml11_scalar(const char *s, int plain)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };
	static const char *const trues[] = { "true", "True", "TRUE", "yes", "Yes", "YES",
					     "on", "On", "ON", "y", "Y" };
	static const char *const falses[] = { "false", "False", "FALSE", "no", "No", "NO",
					      "off", "Off", "OFF", "n", "N" };
	const char *p = s;
	long long v;

	if (!plain)
		return json_string(s);
	for (size_t i = 0; i < ARRAY_SIZE(nulls); i++)
		if (!strcmp(s, nulls[i]))
			return json_null();
	/* PyYAML's bool resolver leaves y/n out (they stay strings) */
	for (size_t i = 0; i < ARRAY_SIZE(trues) - 2; i++) {
		if (!strcmp(s, trues[i]))
			return json_true();
		if (!strcmp(s, falses[i]))
			return json_false();
	}
	if (parse_long(s, &v) == 0 && strspn(s + (*s == '-' || *s == '+'), "0123456789") ==
	    strlen(s + (*s == '-' || *s == '+')))
		return json_integer(v);
	if (*p == '-' || *p == '+')
		p++;
	if (strchr(p, '.') && strspn(p, "0123456789.eE+-") == strlen(p) && is_number_text(s)) {
		const char *e = strpbrk(p, "eE");

		/* PyYAML: an exponent needs its sign (1.0e+3, not 1.0e3) */
		if (!e || e[1] == '+' || e[1] == '-')
			return json_real(strtod(s, NULL));
	}
	return json_string(s);
}

/* A value of values:/value: as JSON typed the YAML 1.1 way (lists and mappings too). */
static json_t *yaml11_value(struct ctx *c, struct ynode *v, const char *path, int depth)
{
	struct strbuf sub = STRBUF_INIT;
	json_t *o;

	if (depth > MAX_DEPTH) {
		fail(c, v, "key '%s': nested too deeply", path);
		return NULL;
	}
	if (v->type == Y_SCALAR) {
		const char *t = is_null(v) ? "" : scalar_value(c, v, path);

		return t ? yaml11_scalar(t, v->plain || is_null(v)) : NULL;
	}
	if (v->type == Y_MAP && check_keys(c, v, path) < 0)
		return NULL;
	o = v->type == Y_SEQ ? json_array() : json_object();
	for (size_t i = 0; i < v->nr; i += v->type == Y_SEQ ? 1 : 2) {
		json_t *kid;

		strbuf_reset(&sub);
		if (v->type == Y_SEQ) {
			strbuf_addf(&sub, "%s[%zu]", path, i);
			kid = yaml11_value(c, v->kids[i], sub.buf, depth + 1);
		} else {
			if (v->kids[i]->type != Y_SCALAR) {
				fail(c, v->kids[i], "key '%s': keys must be plain strings", path);
				goto fail;
			}
			child_path(&sub, path, v->kids[i]->text);
			kid = yaml11_value(c, v->kids[i + 1], sub.buf, depth + 1);
		}
		if (!kid)
			goto fail;
		if (v->type == Y_SEQ)
			json_array_append_new(o, kid);
		else
			json_object_set_new(o, v->kids[i]->text, kid);
	}
	strbuf_release(&sub);
	return o;
fail:
	strbuf_release(&sub);
	json_decref(o);
	return NULL;
}

/*
 * One value of values:/value: into p: the text as written (a list or
 * mapping as JSON) into values, its YAML 1.1 typed JSON into typed.
 */
static int param_value(struct ctx *c, struct sweep_param *p, struct ynode *v, const char *path)
{
	json_t *j = yaml11_value(c, v, path, 0);
	char *typed;

	if (!j)
		return -1;
	typed = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(17));
	if (v->type != Y_SCALAR) {
		struct strbuf text = STRBUF_INIT;

		/* as W&B's ${args_json} writes it: the text a trial is most likely to parse */
		py_json(&text, j);
		strvec_push(&p->values, text.buf);
		strbuf_release(&text);
	} else {
		strvec_push(&p->values, is_null(v) ? "null" : v->expanded);
	}
	strvec_push(&p->typed, typed);
	free(typed);
	json_decref(j);
	return 0;
}

/* bit per enum param_kind, for the keys each kind uses */
#define K(k) (1u << (k))
#define MINMAX_KINDS (K(PARAM_UNIFORM) | K(PARAM_INT_UNIFORM) | K(PARAM_LOG_UNIFORM) | \
		      K(PARAM_Q_UNIFORM) | K(PARAM_Q_LOG_UNIFORM))
#define NORMAL_KINDS (K(PARAM_NORMAL) | K(PARAM_Q_NORMAL) | K(PARAM_LOG_NORMAL) | \
		      K(PARAM_Q_LOG_NORMAL))
#define BETA_KINDS (K(PARAM_BETA) | K(PARAM_Q_BETA))
#define Q_KINDS (K(PARAM_Q_UNIFORM) | K(PARAM_Q_LOG_UNIFORM) | K(PARAM_Q_NORMAL) | \
		 K(PARAM_Q_LOG_NORMAL) | K(PARAM_Q_BETA))

/* What a number key of a parameter must be besides a finite number. */
enum number_check {
	NUM_ANY,
	NUM_POSITIVE,
	NUM_INT_BOUND,   /* int_uniform's min/max: an integer, |n| <= INT_UNIFORM_MAX */
};

/* A number key of a parameter into *out when given. */

static int param_number(struct ctx *c, struct ynode *n, const char *path, const char *key,
			enum number_check check, double *out)
{
	struct strbuf sub = STRBUF_INIT;
	int ret = 0;

	if (!n)
		return 0;
	child_path(&sub, path, key);
	if (get_double(c, n, sub.buf, out) < 0)
		ret = -1;
	else if (check == NUM_POSITIVE && *out <= 0)
		ret = bad_value(c, n, sub.buf, "a positive number");
	else if (check == NUM_INT_BOUND && (!is_int_text(n->expanded) || fabs(*out) > INT_UNIFORM_MAX))
		ret = bad_value(c, n, sub.buf, "an integer for int_uniform");
	strbuf_release(&sub);
	return ret;
}

/* probabilities: one non-negative number per value, summing to 1 */
static int param_probs(struct ctx *c, struct sweep_param *p, struct ynode *n, const char *path)
{
	struct strbuf sub = STRBUF_INIT;
	double sum = 0;
	int ret = -1;

	child_path(&sub, path, "probabilities");
	if (n->type != Y_SEQ || n->nr != p->values.nr) {
		fail(c, n, "key '%s': expected a list of %zu probabilities, one per value", sub.buf,
		     p->values.nr);
		goto out;
	}
	p->probs = xcalloc(n->nr, sizeof(*p->probs));
	for (size_t i = 0; i < n->nr; i++) {
		strbuf_reset(&sub);
		child_path(&sub, path, "probabilities");
		strbuf_addf(&sub, "[%zu]", i);
		if (get_double(c, n->kids[i], sub.buf, &p->probs[i]) < 0)
			goto out;
		if (p->probs[i] < 0) {
			bad_value(c, n->kids[i], sub.buf, "a probability of 0 or more");
			goto out;
		}
		sum += p->probs[i];
	}
	/* W&B draws from their running sum, so they must add up to 1 */
	if (fabs(sum - 1) > 1e-6) {
		child_path(&sub, path, "probabilities");
		fail(c, n, "key '%s': the probabilities add up to %g, not 1", sub.buf, sum);
		goto out;
	}
	ret = 0;
out:
	strbuf_release(&sub);
	return ret;
}

static int parse_param(struct ctx *c, struct sweep_config *s, struct ynode *m, const char *path,
		       const char *name, const struct strvec *segs, struct param_keys *pk)
{
	struct sweep_param *p;
	struct strbuf sub = STRBUF_INIT;
	const char *dname = NULL;
	int bounds = BOUNDS_VALUES, ret = -1;

	s->params = xrealloc(s->params, (s->nr_params + 1) * sizeof(*s->params));
	p = &s->params[s->nr_params++];
	memset(p, 0, sizeof(*p));
	strvec_init(&p->values);
	strvec_init(&p->typed);
	strvec_init(&p->path);
	strvec_pushv(&p->path, segs->v);
	p->name = xstrdup(name);
	p->pos.line = m->line;
	p->pos.col = m->col;
	p->q = 1.0;
	p->sigma = 1.0;
	p->a = p->b = 1.0;

	if (pk->value && pk->values) {
		struct ynode *second = later(pk->value, pk->values);

		child_path(&sub, path, second == pk->value ? "value" : "values");
		fail(c, second, "key '%s': cannot be used together with '%s'", sub.buf,
		     second == pk->value ? "values" : "value");
		goto out;
	}
	if (pk->dist) {
		size_t i;

		child_path(&sub, path, "distribution");
		if (!(dname = want_scalar(c, pk->dist, sub.buf, "a distribution name")))
			goto out;
		for (i = 0; i < ARRAY_SIZE(distributions); i++)
			if (!strcmp(dname, distributions[i].name))
				break;
		if (i == ARRAY_SIZE(distributions)) {
			struct strbuf names = STRBUF_INIT;

			for (size_t k = 0; k < ARRAY_SIZE(distributions); k++)
				strbuf_addf(&names, "%s%s", k ? ", " : "one of ",
					    distributions[k].name);
			bad_value(c, pk->dist, sub.buf, names.buf);
			strbuf_release(&names);
			goto out;
		}
		p->kind = distributions[i].kind;
		bounds = distributions[i].bounds;
		p->dist = xstrdup(dname);
	} else if (pk->value) {
		p->kind = PARAM_VALUE;
	} else if (pk->values) {
		p->kind = PARAM_VALUES;
	} else if (pk->min || pk->max) {
		struct ynode *given = pk->min ? pk->min : pk->max;
		const char *t;

		if (!pk->min || !pk->max) {
			missing(c, m, path, pk->min ? "max" : "min", NULL);
			goto out;
		}
		/* like W&B: int_uniform when both bounds are integers */
		child_path(&sub, path, given == pk->min ? "min" : "max");
		if (!(t = want_scalar(c, pk->min, sub.buf, "a number")))
			goto out;
		p->kind = PARAM_UNIFORM;
		if (is_int_text(t)) {
			child_path(&sub, path, "max");
			if (!(t = want_scalar(c, pk->max, sub.buf, "a number")))
				goto out;
			if (is_int_text(t))
				p->kind = PARAM_INT_UNIFORM;
		}
	} else if (pk->mu || pk->sigma || pk->q || pk->a || pk->b) {
		missing(c, m, path, "distribution", NULL);
		goto out;
	} else {
		fail(c, m, "key '%s': expected 'value', 'values', or 'min' and 'max'", path);
		goto out;
	}

	/* keys that do not belong to this kind */
	{
		const struct {
			struct ynode *n;
			const char *key;
			unsigned kinds;
		} uses[] = {
			{ pk->value, "value", K(PARAM_VALUE) },
			{ pk->values, "values", K(PARAM_VALUES) },
			{ pk->probs, "probabilities", K(PARAM_VALUES) },
			{ pk->min, "min", MINMAX_KINDS },
			{ pk->max, "max", MINMAX_KINDS },
			{ pk->q, "q", Q_KINDS },
			{ pk->mu, "mu", NORMAL_KINDS },
			{ pk->sigma, "sigma", NORMAL_KINDS },
			{ pk->a, "a", BETA_KINDS },
			{ pk->b, "b", BETA_KINDS },
		};

		for (size_t i = 0; i < ARRAY_SIZE(uses); i++) {
			if (uses[i].n && !(uses[i].kinds & K(p->kind))) {
				struct ynode *key = NULL;

				for (size_t k = 0; k + 1 < m->nr; k += 2)
					if (m->kids[k + 1] == uses[i].n)
						key = m->kids[k];
				child_path(&sub, path, uses[i].key);
				fail(c, key ? key : uses[i].n, "key '%s': not used by %s '%s'", sub.buf,
				     pk->dist ? "distribution" : "a parameter with",
				     pk->dist ? dname :
				     p->kind == PARAM_VALUE ? "value" : "values");
				goto out;
			}
		}
	}
	/* each given only where its kind uses it (checked above) */
	if (param_number(c, pk->q, path, "q", NUM_POSITIVE, &p->q) < 0 ||
	    param_number(c, pk->mu, path, "mu", NUM_ANY, &p->mu) < 0 ||
	    param_number(c, pk->sigma, path, "sigma", NUM_POSITIVE, &p->sigma) < 0 ||
	    param_number(c, pk->a, path, "a", NUM_POSITIVE, &p->a) < 0 ||
	    param_number(c, pk->b, path, "b", NUM_POSITIVE, &p->b) < 0)
		goto out;
	/* W&B: quantized values are integers when q is one (its default 1.0 is not) */
	p->q_int = pk->q && is_int_text(pk->q->expanded);

	switch (p->kind) {
	case PARAM_VALUE:
		if (!pk->value) {
			missing(c, m, path, "value", NULL);
			goto out;
		}
		child_path(&sub, path, "value");
		if (param_value(c, p, pk->value, sub.buf) < 0)
			goto out;
		break;
	case PARAM_VALUES:
		if (!pk->values) {
			missing(c, m, path, "values", NULL);
			goto out;
		}
		child_path(&sub, path, "values");
		if (pk->values->type != Y_SEQ || !pk->values->nr) {
			bad_value(c, pk->values, sub.buf, "a non-empty list of values");
			goto out;
		}
		for (size_t i = 0; i < pk->values->nr; i++) {
			strbuf_reset(&sub);
			child_path(&sub, path, "values");
			strbuf_addf(&sub, "[%zu]", i);
			if (param_value(c, p, pk->values->kids[i], sub.buf) < 0)
				goto out;
		}
		if (pk->probs && param_probs(c, p, pk->probs, path) < 0)
			goto out;
		if (!pk->probs && dname && !strcmp(dname, "categorical_w_probabilities")) {
			missing(c, m, path, "probabilities", NULL);
			goto out;
		}
		break;
	case PARAM_NORMAL:
	case PARAM_Q_NORMAL:
	case PARAM_LOG_NORMAL:
	case PARAM_Q_LOG_NORMAL:
	case PARAM_BETA:
	case PARAM_Q_BETA:
		break;   /* mu, sigma, a, b: read with q */
	default: {   /* the min/max kinds */
		enum number_check bound = p->kind == PARAM_INT_UNIFORM ? NUM_INT_BOUND : NUM_ANY;

		if (!pk->min || !pk->max) {
			missing(c, m, path, pk->min ? "max" : "min", NULL);
			goto out;
		}
		if (param_number(c, pk->min, path, "min", bound, &p->min) < 0 ||
		    param_number(c, pk->max, path, "max", bound, &p->max) < 0)
			goto out;
		if (p->min > p->max) {
			fail(c, pk->min, "key '%s': min (%s) is greater than max (%s)", path,
			     pk->min->expanded, pk->max->expanded);
			goto out;
		}
		if (bounds != BOUNDS_VALUES) {
			/* natural-log bounds: the values are e^min .. e^max (or e^-max .. e^-min) */
			double lo = bounds == BOUNDS_EXP ? exp(p->min) : exp(-p->max);
			double hi = bounds == BOUNDS_EXP ? exp(p->max) : exp(-p->min);

			if (!(lo > 0) || !isfinite(hi)) {
				fail(c, pk->min, "key '%s': %s takes natural logs as bounds; e^%s .. "
				     "e^%s is outside a double (use %s_values with the values "
				     "themselves)", path, dname, pk->min->expanded, pk->max->expanded,
				     dname);
				goto out;
			}
			p->min = lo;
			p->max = hi;
		} else if ((p->kind == PARAM_LOG_UNIFORM || p->kind == PARAM_Q_LOG_UNIFORM) &&
			   p->min <= 0) {
			child_path(&sub, path, "min");
			fail(c, pk->min, "key '%s': %s needs min > 0, found '%s'", sub.buf,
			     dname ? dname : sweep_param_kind_name(p->kind), pk->min->expanded);
			goto out;
		}
		break;
	}
	}
	for (size_t i = 0; i + 1 < s->nr_params; i++) {
		if (!strcmp(s->params[i].name, name)) {
			fail(c, m, "key '%s': parameter '%s' is given twice (also at line %d, "
			     "column %d)", path, name, s->params[i].pos.line, s->params[i].pos.col);
			goto out;
		}
	}
	ret = 0;
out:
	strbuf_release(&sub);
	return ret;
}
#undef K

/* parameters: {name: {...}, group: {parameters: {...}}}, flattened. */
static int parse_params(struct ctx *c, struct sweep_config *s, struct ynode *map, const char *path,
			const char *prefix, struct strvec *segs, int depth)
{
	struct strbuf sub = STRBUF_INIT, name = STRBUF_INIT;
	int ret = -1;

	if (map->type != Y_MAP || !map->nr) {
		if (map->type == Y_MAP || is_null(map))
			return fail(c, map, "key '%s': no parameters to search", path);
		return bad_value(c, map, path, "a mapping of parameters");
	}
	if (check_keys(c, map, path) < 0)
		return -1;
	for (size_t i = 0; i + 1 < map->nr; i += 2) {
		struct ynode *k = map->kids[i], *v = map->kids[i + 1];
		struct param_keys pk;
		int r;

		child_path(&sub, path, k->text);
		strbuf_reset(&name);
		strbuf_addf(&name, "%s%s", prefix, k->text);
		if (v->type != Y_MAP) {
			bad_value(c, v, sub.buf, "a mapping such as {values: [...]} or "
				  "{min: ..., max: ...}");
			goto out;
		}
		memset(&pk, 0, sizeof(pk));
		if (walk_map(c, v, sub.buf, param_keys, NULL, param_key, &pk) < 0)
			goto out;
		strvec_push(segs, k->text);
		if (pk.nested) {
			struct strbuf nsub = STRBUF_INIT;

			if (v->nr > 2) {
				fail(c, v, "key '%s': a parameter with 'parameters:' (a nested group) "
				     "has no other keys", sub.buf);
				goto out;
			}
			if (depth >= 8) {
				fail(c, v, "key '%s': parameters nested too deeply", sub.buf);
				goto out;
			}
			child_path(&nsub, sub.buf, "parameters");
			strbuf_addch(&name, '.');
			r = parse_params(c, s, pk.nested, nsub.buf, name.buf, segs, depth + 1);
			strbuf_release(&nsub);
		} else {
			r = parse_param(c, s, v, sub.buf, name.buf, segs, &pk);
		}
		strvec_pop(segs);
		if (r < 0)
			goto out;
	}
	ret = 0;
out:
	strbuf_release(&sub);
	strbuf_release(&name);
	return ret;
}

struct sweep_state {
	struct sweep_config *s;
	struct ynode *method, *metric, *params, *et, *job, *max_trials, *run_cap, *command;
	struct ynode *program;
	struct ynode *notify;     /* notify: of the sweep, read after its job */
	const char *params_path;
};

/* A "file:line:col: ..." line for a W&B key that is accepted and not used. */
static void sweep_note(struct ctx *c, struct sweep_config *s, const struct ynode *n,
		       const char *fmt, ...) DT_PRINTF(4, 5);
static void sweep_note(struct ctx *c, struct sweep_config *s, const struct ynode *n,
		       const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	strbuf_addf(&sb, "%s:%d:%d: ", c->name, n->line, n->col);
	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	strvec_push(&s->notes, sb.buf);
	strbuf_release(&sb);
}

static int metric_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct sweep_config *s = data;
	int g;

	if (!strcmp(key, "name"))
		return get_str(c, v, path, &s->metric_name);
	if (!strcmp(key, "target")) {
		s->has_target = 1;
		return get_double(c, v, path, &s->target);
	}
	if (get_enum(c, v, path, goals, &g) < 0)   /* goal */
		return -1;
	s->goal = g ? GOAL_MAXIMIZE : GOAL_MINIMIZE;
	return 0;
}

/* allocation: {nodes, gpus} of pack: allocation */
static int allocation_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
			  void *data)
{
	struct sweep_config *s = data;

	if (!strcmp(key, "nodes"))
		return get_int(c, v, path, 1, 256, "a number of nodes (1 to 256)", &s->alloc_nodes);
	return get_int(c, v, path, 0, 64, "a number of GPUs per node (0 to 64)", &s->alloc_gpus);
}

struct et_state {
	struct sweep_config *s;
	struct ynode *eta, *s_key, *min_iter, *max_iter;
	double eta_value;
};

static int et_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct et_state *et = data;
	struct sweep_config *s = et->s;

	if (!strcmp(key, "type")) {
		const char *t = want_scalar(c, v, path, "'hyperband'");

		if (!t)
			return -1;
		if (strcmp(t, "hyperband") != 0)
			return bad_value(c, v, path, "'hyperband' (the only early termination dtctl "
					 "has)");
		return 0;
	}
	if (!strcmp(key, "min_iter")) {
		et->min_iter = v;
		return get_int(c, v, path, 1, INT_MAX, "a positive integer", &s->et_min_iter);
	}
	if (!strcmp(key, "eta")) {
		et->eta = v;
		/* W&B: a number above 1 */
		if (get_double(c, v, path, &et->eta_value) < 0)
			return -1;
		if (!(et->eta_value > 1))
			return bad_value(c, v, path, "a number above 1");
		s->et_eta = et->eta_value;
		return 0;
	}
	if (!strcmp(key, "s")) {
		et->s_key = v;
		return get_int(c, v, path, 1, 62, "a number of bands (1 or more)", &s->et_s);
	}
	if (!strcmp(key, "strict")) {
		int b;

		if (get_bool(c, v, path, &b) < 0)
			return -1;
		/* W&B's hyperband does not read it either */
		sweep_note(c, s, v, "note: '%s' is accepted and ignored, as W&B's hyperband does", path);
		return 0;
	}
	et->max_iter = v;
	return get_int(c, v, path, 1, INT_MAX, "a positive integer", &s->et_max_iter);   /* max_iter */
}

/*
 * W&B's bands with max_iter and s: max_iter / eta^k for k = 1..s, each
 * truncated, while >= 1.  They become ASHA's rungs as they are (they need
 * not be min_iter * eta^k: max_iter 100, s 3, eta 3 gives 3, 11, 33), kept
 * in increasing order; a band a truncation repeats is one rung.  max_iter
 * stays the end of training, not a rung; min_iter = the smallest band.
 */
static int et_bands(struct ctx *c, struct sweep_config *s, struct et_state *et, const char *path)
{
	int bands[64];
	double band = s->et_max_iter;
	int n = 0;

	if (!et->max_iter)
		return fail(c, et->s_key, "key '%s.s': needs 'max_iter' (W&B's bands are max_iter / "
			    "eta^k for k = 1..s)", path);
	for (int k = 0; k < s->et_s; k++) {
		band /= s->et_eta;
		if (band < 1)
			break;
		if (!n || (int)band != bands[n - 1])
			bands[n++] = (int)band;
	}
	if (!n)
		return fail(c, et->s_key, "key '%s.s': max_iter %d / eta %g is below 1: no band to "
			    "stop trials at; raise max_iter or lower eta", path, s->et_max_iter,
			    s->et_eta);
	for (int k = 0; k < n; k++)
		s->et_bands[k] = bands[n - 1 - k];
	s->et_nr_bands = n;
	if (et->min_iter)
		sweep_note(c, s, et->min_iter, "note: '%s.min_iter' is ignored with 'max_iter' and "
			   "'s', as W&B does: the bands are max_iter / eta^k", path);
	s->et_min_iter = bands[n - 1];
	return 0;
}

/*
 * W&B's command: a list of strings; an item that is exactly one of the
 * agent's macros is replaced per trial (sweep_wandb_argv()), any other item
 * is passed as written but for ${envvar:NAME}, which W&B replaces by the
 * variable's value (the name itself when unset) when the sweep starts.
 */
static const char *const wandb_macros[] = {
	"${env}", "${interpreter}", "${program}", "${args}", "${args_no_hyphens}",
	"${args_no_equals}", "${args_no_boolean_flags}", "${args_json}", "${args_json_file}",
	NULL,
};

static int wandb_command(struct ctx *c, struct sweep_config *s, struct ynode *v, const char *path)
{
	struct strbuf sub = STRBUF_INIT, item = STRBUF_INIT;
	int ret = -1;

	if (v->type != Y_SEQ || !v->nr)
		return bad_value(c, v, path, "a non-empty list such as [${env}, ${interpreter}, "
				 "${program}, ${args}]");
	for (size_t i = 0; i < v->nr; i++) {
		struct ynode *n = v->kids[i];
		const char *t;
		size_t len;

		strbuf_reset(&sub);
		strbuf_addf(&sub, "%s[%zu]", path, i);
		if (n->type != Y_SCALAR || is_null(n)) {
			bad_value(c, n, sub.buf, "a string");
			goto out;
		}
		/* as written: ${...} here is W&B's, not an environment variable of dtctl's */
		t = n->text;
		len = strlen(t);
		if (len > 3 && !strncmp(t, "${", 2) && t[len - 1] == '}' && !strchr(t + 2, '$')) {
			size_t k;

			for (k = 0; wandb_macros[k]; k++)
				if (!strcmp(t, wandb_macros[k]))
					break;
			if (!wandb_macros[k] && strncmp(t, "${envvar:", 9)) {
				fail(c, n, "key '%s': macro '%s' is unsupported (W&B's agent knows "
				     "${env}, ${interpreter}, ${program}, ${args}, ${args_no_hyphens}, "
				     "${args_no_equals}, ${args_no_boolean_flags}, ${args_json}, "
				     "${args_json_file} and ${envvar:NAME})", sub.buf, t);
				goto out;
			}
		}
		strbuf_reset(&item);
		while (*t) {
			const char *end;

			if (!strncmp(t, "${envvar:", 9) && (end = strchr(t + 9, '}'))) {
				char *var = xstrndup(t + 9, (size_t)(end - t - 9));
				const char *val = getenv(var);

				strbuf_addstr(&item, val ? val : var);
				free(var);
				t = end + 1;
				continue;
			}
			strbuf_addch(&item, *t++);
		}
		strvec_push(&s->command, item.buf);
	}
	ret = 0;
out:
	strbuf_release(&sub);
	strbuf_release(&item);
	return ret;
}

static int sweep_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct sweep_state *st = data;
	struct sweep_config *s = st->s;
	int m;

	if (!strcmp(key, "method")) {
		st->method = v;
		if (get_enum(c, v, path, methods, &m) < 0)
			return -1;
		s->method = m == 0 ? SWEEP_GRID : m == 1 ? SWEEP_RANDOM : SWEEP_BAYES;
		return 0;
	}
	if (!strcmp(key, "metric")) {
		st->metric = v;
		if (walk_map(c, v, path, metric_keys, metric_foreign, metric_key, s) < 0)
			return -1;
		if (!s->metric_name)
			return missing(c, v, path, "name", NULL);
		return 0;
	}
	if (!strcmp(key, "parameters")) {
		struct strvec segs = STRVEC_INIT;
		int r;

		st->params = v;
		s->params_pos.line = v->line;
		s->params_pos.col = v->col;
		r = parse_params(c, s, v, path, "", &segs, 0);
		strvec_clear(&segs);
		return r;
	}
	if (!strcmp(key, "early_terminate")) {
		struct et_state et;

		memset(&et, 0, sizeof(et));
		et.s = s;
		st->et = v;
		s->early_terminate = 1;
		s->et_pos.line = v->line;
		s->et_pos.col = v->col;
		if (walk_map(c, v, path, et_keys, NULL, et_key, &et) < 0)
			return -1;
		if (!map_get(v, "type"))
			return missing(c, v, path, "type", " (type: hyperband)");
		if (s->et_s)
			return et_bands(c, s, &et, path);
		if (s->et_max_iter && s->et_max_iter < s->et_min_iter)
			return fail(c, map_get(v, "max_iter"), "key '%s.max_iter': must be at least "
				    "min_iter (%d), found '%d'", path, s->et_min_iter, s->et_max_iter);
		return 0;
	}
	if (!strcmp(key, "job")) {
		st->job = v;
		return 0;   /* read last, so the sweep's own errors come first */
	}
	if (!strcmp(key, "notify")) {
		st->notify = v;
		return 0;   /* after the job: one list for the sweep and its trials */
	}
	if (!strcmp(key, "max_trials")) {
		st->max_trials = v;
		s->max_trials_pos.line = v->line;
		s->max_trials_pos.col = v->col;
		return get_int(c, v, path, 1, INT_MAX, "a positive integer", &s->max_trials);
	}
	if (!strcmp(key, "run_cap")) {
		st->run_cap = v;
		return get_int(c, v, path, 1, INT_MAX, "a positive integer", &s->run_cap);
	}
	if (!strcmp(key, "program")) {
		st->program = v;
		s->wandb = 1;
		return get_str(c, v, path, &s->program);
	}
	if (!strcmp(key, "command")) {
		st->command = v;
		s->wandb = 1;
		return wandb_command(c, s, v, path);
	}
	if (!strcmp(key, "parallel"))
		return get_int(c, v, path, 0, 100000, "a number of trials (0 = as many as fit)",
			       &s->parallel);
	if (!strcmp(key, "gpus_per_trial"))
		return get_int(c, v, path, 0, 1024, "a number of GPUs", &s->gpus_per_trial);
	if (!strcmp(key, "pack")) {
		if (!s->pack_pos.line) {
			s->pack_pos.line = v->line;
			s->pack_pos.col = v->col;
		}
		return get_enum(c, v, path, packs, &s->pack);
	}
	if (!strcmp(key, "allocation")) {
		s->pack_pos.line = v->line;
		s->pack_pos.col = v->col;
		if (walk_map(c, v, path, allocation_keys, NULL, allocation_key, s) < 0)
			return -1;
		if (!s->alloc_nodes)
			return missing(c, v, path, "nodes", NULL);
		return 0;
	}
	if (!strcmp(key, "max_failures"))
		return get_int(c, v, path, 0, INT_MAX, "a number of failures (0 or more)",
			       &s->max_failures);
	/* the trials checkpoint and resume: ASHA pauses and promotes instead of stopping */
	if (!strcmp(key, "checkpoint"))
		return get_bool(c, v, path, &s->checkpoint);
	if (!strcmp(key, "seed")) {
		const char *t = want_scalar(c, v, path, "a non-negative integer");
		char *end;

		if (!t)
			return -1;
		errno = 0;
		if (!isdigit((unsigned char)*t) || (s->seed = strtoull(t, &end, 10), *end || errno))
			return bad_value(c, v, path, "a non-negative integer");
		return 0;
	}
	if (!strcmp(key, "name"))
		return get_str(c, v, path, &s->name);
	/* description, project, entity: W&B's, accepted for its files and not used */
	if (!want_scalar(c, v, path, "a string"))
		return -1;
	sweep_note(c, s, v, "note: '%s' is accepted and ignored%s", path,
		   strcmp(key, "description") ? ": dtctl keeps the results on the cluster, "
		   "nothing is sent to W&B" : "");
	return 0;
}

/*
 * Sweep placeholders: dtsched replaces "{name}" of a parameter in the job's
 * argv words and env values (scheduler/sweeps.c, substitute()).  A '{' that
 * starts a name must close and name a parameter, else the trial would get
 * "{y}", "{" or "{x!r}" verbatim; a '{' before anything else ('{"a": 1}') is
 * literal text.  One value n (at key `path`); -1 with the error.
 */
#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

static int check_placeholders(struct ctx *c, const struct sweep_config *s, struct ynode *n,
			      const char *path)
{
	const char *t = n->expanded ? n->expanded : n->text, *p, *q, *close;
	struct strbuf names = STRBUF_INIT;
	int ret = 0;

	for (p = strchr(t, '{'); p && !ret; p = strchr(p + 1, '{')) {
		size_t len, i;

		q = p + 1;
		if (*q && !isalpha((unsigned char)*q) && *q != '_')
			continue;
		close = strchr(q, '}');
		len = close ? (size_t)(close - q) : strlen(q);
		for (i = 0; i < s->nr_params; i++)
			if (strlen(s->params[i].name) == len && !memcmp(s->params[i].name, q, len))
				break;
		if (close && i < s->nr_params) {
			p = close;
			continue;
		}
		for (i = 0; i < s->nr_params; i++)
			strbuf_addf(&names, "%s%s", i ? ", " : "", s->params[i].name);
		if (!close)
			ret = fail(c, n, "key '%s': '%.40s' opens a placeholder that does not close: "
				   "write '{name}' of a parameter (%s)", path, p, names.buf);
		else if (strspn(q, NAME_CHARS) < len)
			ret = fail(c, n, "key '%s': placeholder '%.*s': only '{name}' of a parameter "
				   "is replaced, without conversion or format (%s)", path,
				   (int)(len > 40 ? 42 : len + 2), p, names.buf);
		else
			ret = fail(c, n, "key '%s': placeholder '%.*s' names no parameter "
				   "(parameters: %s)", path, (int)(len > 40 ? 42 : len + 2), p,
				   names.buf);
	}
	strbuf_release(&names);
	return ret;
}

/* Every placeholder of the job mapping `job` (at key prefix "job" or ""). */
static int job_placeholders(struct ctx *c, const struct sweep_config *s, struct ynode *job,
			    const char *prefix)
{
	struct ynode *cmd = map_get(job, "command"), *env = map_get(job, "env");
	struct strbuf path = STRBUF_INIT;
	int ret = 0;

	if (s->wandb || s->job.shell)
		return 0;    /* not substituted there (docs/sweep.md) */
	for (size_t i = 0; cmd && cmd->type == Y_SEQ && i < cmd->nr && !ret; i++) {
		strbuf_reset(&path);
		child_path(&path, prefix, "command");
		strbuf_addf(&path, "[%zu]", i);
		if (cmd->kids[i]->type == Y_SCALAR)
			ret = check_placeholders(c, s, cmd->kids[i], path.buf);
	}
	if (cmd && cmd->type == Y_SCALAR && !ret) {
		child_path(&path, prefix, "command");
		ret = check_placeholders(c, s, cmd, path.buf);
	}
	for (size_t i = 1; env && env->type == Y_MAP && i < env->nr && !ret; i += 2) {
		strbuf_reset(&path);
		child_path(&path, prefix, "env");
		strbuf_addf(&path, ".%s", env->kids[i - 1]->text);
		if (env->kids[i]->type == Y_SCALAR)
			ret = check_placeholders(c, s, env->kids[i], path.buf);
	}
	strbuf_release(&path);
	return ret;
}

static int sweep_job(struct ctx *c, struct sweep_config *s, struct ynode *v)
{
	if (v->type == Y_MAP) {
		job_config_release(&s->job);
		s->job.path = xstrdup(c->name);
		if (job_from_tree(c, &s->job, v, "job", s->wandb) < 0)
			return -1;
		return job_placeholders(c, s, v, "job");
	}
	{
		const char *rel = want_scalar(c, v, "job", "a job.yaml path or an inline job mapping");
		struct strbuf buf = STRBUF_INIT;
		struct ctx jc;
		struct ynode *top = NULL;
		char *path;
		int ret = -1;

		if (!rel)
			return -1;
#ifdef DT_FUZZING
		/* a fuzzer could name /dev/stdin or a FIFO and hang: read no files */
		return fail(c, v, "key 'job': job files are not read while fuzzing");
#endif
		path = resolve_path(c, rel);
		if (strbuf_read_file(&buf, path, CONFIG_MAX_BYTES) < 0) {
			fail(c, v, "key 'job': cannot read '%s': %s", path,
			     errno == EFBIG ? "file is too large" : strerror(errno));
			goto out;
		}
		jc.name = path;
		jc.dir = dir_of(path, 0);
		jc.err = c->err;
		job_config_release(&s->job);
		s->job.path = xstrdup(path);
		if (load_tree(&jc, buf.buf, buf.len, &top) == 0 &&
		    job_from_tree(&jc, &s->job, top, "", s->wandb) == 0 &&
		    job_placeholders(&jc, s, top, "") == 0)
			ret = 0;
		ynode_free(top);
		free(jc.dir);
out:
		free(path);
		strbuf_release(&buf);
		return ret;
	}
}

long long sweep_grid_size(const struct sweep_config *s)
{
	long long n = 1;

	for (size_t i = 0; i < s->nr_params; i++) {
		const struct sweep_param *p = &s->params[i];
		long long k;

		switch (p->kind) {
		case PARAM_VALUE:
		case PARAM_VALUES:
			k = (long long)p->values.nr;
			break;
		case PARAM_INT_UNIFORM:
			if (!(p->max - p->min < 1e15))   /* the loader keeps bounds within 1e15 */
				return LLONG_MAX / 4;
			k = (long long)(p->max - p->min) + 1;
			break;
		default:
			return -1;
		}
		if (k > 0 && n > LLONG_MAX / 4 / k)
			n = LLONG_MAX / 4;   /* saturate: far beyond GRID_MAX anyway */
		else
			n *= k;
	}
	return n;
}

/*
 * The rules across keys, on the struct alone: the one sweep checker, which the
 * loader runs on a file (messages at the keys' file:line:col) and dtsched runs
 * on the JSON form a sweep is submitted in (sweep_config_check()), so that
 * `dtctl validate` and `dtctl sweep` can never disagree.  W&B's rules for a
 * metric: grid and random search need none (the trials just run); bayes and
 * early termination compare values, so they do.  Sets the defaults that follow
 * from the rules (a grid's max_trials is its size; run_cap bounds max_trials).
 */
static int sweep_rules(struct ctx *c, struct sweep_config *s)
{
	if (!s->metric_name && s->method == SWEEP_BAYES)
		return fail_at(c, s->pos.line, s->pos.col, "missing required key 'metric' (bayes "
			       "search needs a metric to optimise)");
	if (!s->metric_name && s->early_terminate)
		return fail_at(c, s->pos.line, s->pos.col, "missing required key 'metric' "
			       "(early_terminate needs a metric to compare)");
	if (!s->nr_params)
		return fail_at(c, s->params_pos.line, s->params_pos.col, "key 'parameters': "
			       "expected at least one parameter");
	if (s->method == SWEEP_GRID) {
		long long n;

		for (size_t i = 0; i < s->nr_params; i++) {
			const struct sweep_param *p = &s->params[i];

			if (p->kind == PARAM_VALUE || p->kind == PARAM_VALUES ||
			    p->kind == PARAM_INT_UNIFORM)
				continue;
			return fail_at(c, p->pos.line, p->pos.col, "key 'parameters.%s': grid search "
				       "needs discrete values, but '%s' is continuous; use 'values:'",
				       p->name, p->dist ? p->dist : sweep_param_kind_name(p->kind));
		}
		n = sweep_grid_size(s);
		if (s->max_trials && n > s->max_trials && !(s->run_cap && s->run_cap <= s->max_trials))
			return fail_at(c, s->max_trials_pos.line, s->max_trials_pos.col,
				       "key 'max_trials': grid has %lld points but max_trials is %d",
				       n, s->max_trials);
		/* W&B's run_cap may stop a grid early */
		if (n > GRID_MAX && !(s->run_cap && s->run_cap <= GRID_MAX))
			return fail_at(c, s->params_pos.line, s->params_pos.col, "key 'parameters': "
				       "grid has %lld points, more than the limit of %lld", n, GRID_MAX);
		if (!s->max_trials)
			s->max_trials = (int)(n < INT_MAX ? n : INT_MAX);
	} else if (!s->max_trials && !s->run_cap) {
		return fail_at(c, s->pos.line, s->pos.col, "missing required key 'max_trials' (or "
			       "W&B's 'run_cap': random and bayes sweeps run until it is reached)");
	}
	if (s->run_cap && (!s->max_trials || s->run_cap < s->max_trials))
		s->max_trials = s->run_cap;
	if (s->max_trials < 1 || s->parallel < 0 || s->max_failures < 0 || s->gpus_per_trial < 0)
		return fail_at(c, s->pos.line, s->pos.col, "needs max_trials of 1 or more, parallel, "
			       "gpus_per_trial and max_failures of 0 or more");
	if (s->alloc_nodes && !s->pack)
		return fail_at(c, s->pack_pos.line, s->pack_pos.col, "key 'allocation': only with "
			       "'pack: allocation' (add it, or remove 'allocation:')");
	if (s->pack && !s->alloc_nodes && !s->parallel)
		return fail_at(c, s->pack_pos.line, s->pack_pos.col, "key 'pack': an allocation "
			       "needs a size: give 'parallel:' (trials at once) or 'allocation: "
			       "{nodes, gpus}'");
	if (s->wandb && !s->program &&
	    (!s->command.nr || strvec_find(&s->command, "${program}") >= 0))
		return fail_at(c, s->pos.line, s->pos.col, "missing required key 'program' (the "
			       "training script ${program} names in the command)");
	return 0;
}

int sweep_config_check(struct sweep_config *s, struct strbuf *err)
{
	struct ctx c = { s->path ? s->path : "sweep", NULL, err };

	return sweep_rules(&c, s);
}

/* What only a file can lack (the keys' presence, the job file), then the rules. */
static int sweep_checks(struct ctx *c, struct sweep_state *st, struct ynode *top)
{
	struct sweep_config *s = st->s;

	s->pos.line = top->line;
	s->pos.col = top->col;
	if (!st->method)
		return missing(c, top, "", "method", " (grid, random or bayes)");
	if (!st->params)
		return missing(c, top, "", "parameters", NULL);
	if (sweep_rules(c, s) < 0)
		return -1;
	if (!st->job && !s->wandb)
		return missing(c, top, "", "job", " (the job.yaml each trial runs, or W&B's "
			       "'program:')");
	if (s->wandb && !s->command.nr) {
		/* W&B's default command */
		for (size_t i = 0; i < 4; i++)
			strvec_push(&s->command, wandb_macros[i]);
	}
	if (!st->job) {
		free(s->job.name);
		s->job.name = xstrdup(s->program ? s->program : "job");
	} else if (sweep_job(c, s, st->job) < 0) {
		return -1;
	}
	if (!st->notify)
		return 0;
	/* the sweep's notify: is its trials' too (the job carries it to dtsched) */
	if (s->job.notify)
		return fail(c, st->notify, "key 'notify': the sweep's job has a 'notify:' too; "
			    "give one list, here (the sweep and its trials) or in the job");
	return notify_from_tree(c, st->notify, "notify", &s->job.notify);
}

static void sweep_defaults(void *cfg)
{
	struct sweep_config *s = cfg;

	memset(s, 0, sizeof(*s));
	s->et_min_iter = 1;
	s->et_eta = 3;
	s->max_failures = 3;
	strvec_init(&s->command);
	strvec_init(&s->notes);
	job_config_init(&s->job);
}

static int sweep_from_tree(struct ctx *c, void *cfg, struct ynode *top)
{
	struct sweep_state st;

	memset(&st, 0, sizeof(st));
	st.s = cfg;
	if (walk_map(c, top, "", sweep_keys, sweep_foreign, sweep_key, &st) < 0)
		return -1;
	return sweep_checks(c, &st, top);
}

static void sweep_release(void *cfg)
{
	struct sweep_config *s = cfg;

	free(s->path);
	free(s->name);
	free(s->metric_name);
	for (size_t i = 0; i < s->nr_params; i++) {
		free(s->params[i].name);
		free(s->params[i].dist);
		free(s->params[i].probs);
		strvec_clear(&s->params[i].values);
		strvec_clear(&s->params[i].typed);
		strvec_clear(&s->params[i].path);
	}
	free(s->params);
	free(s->program);
	strvec_clear(&s->command);
	strvec_clear(&s->notes);
	job_config_release(&s->job);
	sweep_defaults(s);
}

static const struct config_kind sweep_kind = {
	offsetof(struct sweep_config, path), sweep_defaults, sweep_from_tree, sweep_release,
};

/* sweep_config_parse(), sweep_config_load(), sweep_config_release() */
CONFIG_KIND_API(sweep)

int sweep_config_warnings(const struct sweep_config *s, struct strbuf *out)
{
	int n = 0;

	if (s->early_terminate && !s->et_max_iter) {
		strbuf_addf(out, "%s:%d:%d: early_terminate: hyperband without max_iter: the last "
			    "epoch a trial reports can be a rung, where ASHA stops the first trial to "
			    "reach it; set max_iter to the number of epochs (or steps) a trial runs\n",
			    s->path ? s->path : "sweep.yaml", s->et_pos.line, s->et_pos.col);
		n++;
	}
	for (size_t i = 0; i < s->notes.nr; i++, n++)
		strbuf_addf(out, "%s\n", s->notes.v[i]);
	return n;
}

/* A value as written, typed the way YAML would read it. */
static json_t *typed_scalar(const char *s)
{
	long long v;

	if (parse_long(s, &v) == 0)
		return json_integer(v);
	if (is_number_text(s) && strspn(s, "0123456789.eE+-") == strlen(s))
		return json_real(strtod(s, NULL));
	if (!strcmp(s, "true"))
		return json_true();
	if (!strcmp(s, "false"))
		return json_false();
	if (!strcmp(s, "null"))
		return json_null();
	return json_string(s);
}
json_t *sweep_config_to_json(const struct sweep_config *s)
{
	json_t *o = json_object(), *params = json_object();

	json_object_set_new(o, "path", str_or_null(s->path));
	json_object_set_new(o, "method", json_string(methods[s->method == SWEEP_GRID ? 0 :
							       s->method == SWEEP_RANDOM ? 1 : 2]));
	if (s->metric_name) {
		json_t *m = json_object();

		json_object_set_new(m, "name", json_string(s->metric_name));
		json_object_set_new(m, "goal", json_string(goals[s->goal == GOAL_MAXIMIZE]));
		if (s->has_target)
			json_object_set_new(m, "target", json_real(s->target));
		json_object_set_new(o, "metric", m);
	} else {
		json_object_set_new(o, "metric", json_null());
	}
	for (size_t i = 0; i < s->nr_params; i++) {
		const struct sweep_param *p = &s->params[i];
		json_t *jp = json_object();

		json_object_set_new(jp, "distribution", json_string(sweep_param_kind_name(p->kind)));
		if (p->dist && strcmp(p->dist, sweep_param_kind_name(p->kind)))
			json_object_set_new(jp, "as_written", json_string(p->dist));
		if (p->path.nr > 1)
			json_object_set_new(jp, "path", json_strvec(&p->path));
		switch (p->kind) {
		case PARAM_VALUE:
		case PARAM_VALUES: {
			json_t *vals = json_array(), *typed = json_array();

			for (size_t k = 0; k < p->values.nr; k++) {
				json_array_append_new(vals, typed_scalar(p->values.v[k]));
				json_array_append_new(typed, json_loads(p->typed.v[k],
									JSON_DECODE_ANY, NULL));
			}
			if (p->kind == PARAM_VALUE) {
				json_object_set(jp, "value", json_array_get(vals, 0));
				json_decref(vals);
			} else {
				json_object_set_new(jp, "values", vals);
			}
			/* the values as W&B's YAML reader types them, for its command */
			json_object_set_new(jp, "typed", typed);
			if (p->probs) {
				json_t *pr = json_array();

				for (size_t k = 0; k < p->values.nr; k++)
					json_array_append_new(pr, json_real(p->probs[k]));
				json_object_set_new(jp, "probabilities", pr);
			}
			break;
		}
		case PARAM_NORMAL:
		case PARAM_Q_NORMAL:
		case PARAM_LOG_NORMAL:
		case PARAM_Q_LOG_NORMAL:
			json_object_set_new(jp, "mu", json_real(p->mu));
			json_object_set_new(jp, "sigma", json_real(p->sigma));
			break;
		case PARAM_BETA:
		case PARAM_Q_BETA:
			json_object_set_new(jp, "a", json_real(p->a));
			json_object_set_new(jp, "b", json_real(p->b));
			break;
		case PARAM_INT_UNIFORM:
			json_object_set_new(jp, "min", json_integer((json_int_t)p->min));
			json_object_set_new(jp, "max", json_integer((json_int_t)p->max));
			break;
		default:
			json_object_set_new(jp, "min", json_real(p->min));
			json_object_set_new(jp, "max", json_real(p->max));
			break;
		}
		if (p->kind == PARAM_Q_UNIFORM || p->kind == PARAM_Q_LOG_UNIFORM ||
		    p->kind == PARAM_Q_NORMAL || p->kind == PARAM_Q_LOG_NORMAL ||
		    p->kind == PARAM_Q_BETA) {
			json_object_set_new(jp, "q", json_real(p->q));
			json_object_set_new(jp, "q_int", json_boolean(p->q_int));
		}
		json_object_set_new(params, p->name, jp);
	}
	json_object_set_new(o, "parameters", params);
	if (s->early_terminate) {
		json_t *et = json_object();

		json_object_set_new(et, "type", json_string("hyperband"));
		json_object_set_new(et, "min_iter", json_integer(s->et_min_iter));
		json_object_set_new(et, "eta", json_number(s->et_eta));
		json_object_set_new(et, "max_iter", json_integer(s->et_max_iter));
		json_object_set_new(et, "mode", json_string(s->checkpoint ? "promote" : "stop"));
		if (s->et_s)
			json_object_set_new(et, "s", json_integer(s->et_s));
		if (s->et_nr_bands) {
			json_t *bands = json_array();

			for (int k = 0; k < s->et_nr_bands; k++)
				json_array_append_new(bands, json_integer(s->et_bands[k]));
			json_object_set_new(et, "bands", bands);
		}
		json_object_set_new(o, "early_terminate", et);
	} else {
		json_object_set_new(o, "early_terminate", json_null());
	}
	json_object_set_new(o, "max_trials", json_integer(s->max_trials));
	if (s->run_cap)
		json_object_set_new(o, "run_cap", json_integer(s->run_cap));
	if (s->method == SWEEP_GRID)
		json_object_set_new(o, "grid_size", json_integer(sweep_grid_size(s)));
	json_object_set_new(o, "parallel", json_integer(s->parallel));
	json_object_set_new(o, "gpus_per_trial", json_integer(s->gpus_per_trial));
	json_object_set_new(o, "seed", json_integer((json_int_t)s->seed));
	json_object_set_new(o, "max_failures", json_integer(s->max_failures));
	json_object_set_new(o, "checkpoint", json_boolean(s->checkpoint));
	if (s->pack)
		json_object_set_new(o, "pack", json_string(packs[s->pack]));
	if (s->alloc_nodes)
		json_object_set_new(o, "allocation", json_pack("{s:i,s:i}", "nodes", s->alloc_nodes,
							       "gpus", s->alloc_gpus));
	if (s->wandb) {
		json_object_set_new(o, "program", str_or_null(s->program));
		json_object_set_new(o, "command", json_strvec(&s->command));
	}
	json_object_set_new(o, "job", job_config_to_json(&s->job));
	/* the job runs W&B's command, its macros replaced per trial by dtsched */
	if (s->wandb)
		json_object_set_new(json_object_get(o, "job"), "command", json_strvec(&s->command));
	return o;
}
