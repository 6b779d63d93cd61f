/*
 * search.c - grid, random and TPE suggestions for sweeps (see search.h).
 *
 * The space is copied out of the sweep config into one `struct dim` per
 * parameter.  Fixed values and `values:` lists are categorical dimensions
 * (a fixed value is a list of one); the distributions are numeric
 * dimensions.  Observations keep one double per dimension: the numeric value
 * as suggested, or the index of the choice.
 *
 * TPE (Bergstra et al., "Algorithms for Hyper-Parameter Optimization", 2011):
 * after n_startup random trials, split the observed trials into the good
 * (best gamma fraction) and the rest, model each group with a Parzen
 * density, l(x) and g(x), draw n_ei_candidates points from l and keep the
 * one with the largest l(x)/g(x).  Numeric kernels are Gaussians truncated
 * to the space, in log space for log_uniform_values and on the continuous
 * hull of int and q parameters (values rounded afterwards); categorical
 * kernels are smoothed counts.  Two variants: multivariate (the default),
 * where l and g are joint mixtures of product kernels, one per trial, so
 * dependencies between parameters are kept; and univariate, one density
 * and one choice per parameter.  docs/sweep-search.md has the rules and
 * constants and why they were chosen.
 *
 * Everything a suggestion draws comes from the stream rng_mix(seed, seq, 0),
 * so suggestions are reproducible and the state can be rebuilt by replay.
 */
#include "scheduler/search.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "rng.h"

enum dim_type { DIM_CAT, DIM_NUM };

struct dim {
	char *name;
	enum param_kind kind;
	enum dim_type type;
	/* DIM_CAT: the choices as written, and their numbers where numeric */
	char **choices;
	double *choice_num;
	int *choice_is_num;
	double *choice_p;            /* the prior's probability of each choice */
	int weighted;                /* probabilities: given (else choice_p is uniform) */
	size_t nr_choices;
	/* DIM_NUM: the distribution as configured */
	double min, max, q, mu, sigma, a, b;
	long long kmin, kmax;        /* int: values kmin..kmax; q: multiples kmin*q..kmax*q */
	double lo, hi;               /* bounds of the internal space (±inf for normal) */
	double prior_mu, prior_sigma;
};

struct obs {
	long long seq;
	double *vals;                /* per dim: the number, or the choice index */
	double value;                /* as reported; NaN for failed trials */
	int state;
	double resource;             /* NaN when unknown */
};

struct ranked {
	double key1, key2;   /* sort keys, smaller is better */
	long long seq;
	size_t idx;
};

static int cmp_ranked(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;

	if (x->key1 != y->key1)
		return x->key1 < y->key1 ? -1 : 1;
	if (x->key2 != y->key2)
		return x->key2 < y->key2 ? -1 : 1;
	return (x->seq > y->seq) - (x->seq < y->seq);
}

struct search {
	enum sweep_method method;
	enum sweep_goal goal;
	uint64_t seed;
	long long next_seq;
	long long grid_size;         /* -1 unless grid */
	struct dim *dims;
	size_t nr_dims;
	struct obs *obs;             /* sorted by seq, seqs unique */
	size_t nr_obs, alloc_obs;
	/* the observations TPE ranks (rank_key), best first, kept in order by
	 * search_observe_at(): a suggestion sorts nothing */
	struct ranked *ranked;
	size_t nr_ranked, alloc_ranked;
	struct tpe_options tpe;
};

static const struct tpe_options tpe_defaults = {
	.n_startup = 10,
	.n_ei_candidates = 24,
	.gamma = 0.10,
	.gamma_cap = 25,
	.prior_weight = 1.0,
	.multivariate = 1,
	.bandwidth_factor = 0.7,
	.cat_beta = -1,
};

/* ------------------------------------------------------------- numbers */

void search_format_double(char *buf, size_t size, double v)
{
	if (v == 0) {
		snprintf(buf, size, "0");   /* also -0 */
		return;
	}
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, size, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

/* A whole string that is a finite number, as YAML or a user wrote it. */
static int parse_number(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s || strchr(" \t\n", *s))
		return 0;
	errno = 0;
	v = strtod(s, &end);
	if (*end || errno == ERANGE || !isfinite(v))
		return 0;
	/* strtod takes "nan", "inf", hex: only the first two are refused above, hex is fine */
	*out = v;
	return 1;
}

static double clampd(double v, double lo, double hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

static long long clampll(long long v, long long lo, long long hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/*
 * k*q with the binary noise of the product removed (3 * 0.1 is
 * 0.30000000000000004; the user meant 0.3): 15 significant digits are
 * exact for any decimal q a person writes.
 */
static double q_multiple(const struct dim *d, long long k)
{
	char buf[40];

	snprintf(buf, sizeof(buf), "%.15g", (double)k * d->q);
	return clampd(strtod(buf, NULL), d->min, d->max);
}

/* ----------------------------------------------------------- the space */

static const char *kind_name(enum param_kind k)
{
	switch (k) {
	case PARAM_VALUE: return "value";
	case PARAM_VALUES: return "values";
	case PARAM_UNIFORM: return "uniform";
	case PARAM_INT_UNIFORM: return "int_uniform";
	case PARAM_LOG_UNIFORM: return "log_uniform_values";
	case PARAM_Q_UNIFORM: return "q_uniform";
	case PARAM_NORMAL: return "normal";
	case PARAM_NESTED: return "parameters";
	default: return sweep_param_kind_name(k);   /* W&B's other distributions */
	}
}

static const char *method_name(enum sweep_method m)
{
	return m == SWEEP_GRID ? "grid" : m == SWEEP_RANDOM ? "random" : "bayes";
}

static void add_where(struct strbuf *err, const struct sweep_config *cfg,
		      const struct sweep_param *p)
{
	if (cfg->path && p->pos.line > 0)
		strbuf_addf(err, "%s:%d:%d: ", cfg->path, p->pos.line, p->pos.col);
	else if (cfg->path)
		strbuf_addf(err, "%s: ", cfg->path);
	strbuf_addf(err, "parameter '%s': ", p->name ? p->name : "?");
}

static void dim_release(struct dim *d)
{
	for (size_t i = 0; i < d->nr_choices; i++)
		free(d->choices[i]);
	free(d->choices);
	free(d->choice_num);
	free(d->choice_is_num);
	free(d->choice_p);
	free(d->name);
}

/* Fill d from p; 0, or -1 with the reason in err. */
static int dim_init(struct dim *d, const struct sweep_config *cfg,
		    const struct sweep_param *p, struct strbuf *err)
{
	memset(d, 0, sizeof(*d));
	d->name = xstrdup(p->name);
	d->kind = p->kind;
	d->min = p->min;
	d->max = p->max;
	d->q = p->q;
	d->mu = p->mu;
	d->sigma = p->sigma;
	d->a = p->a;
	d->b = p->b;

	if (p->kind == PARAM_VALUE || p->kind == PARAM_VALUES) {
		size_t n = p->kind == PARAM_VALUE && p->values.nr > 1 ? 1 : p->values.nr;

		d->type = DIM_CAT;
		if (!n) {
			add_where(err, cfg, p);
			strbuf_addstr(err, "'values' needs at least one value");
			return -1;
		}
		d->nr_choices = n;
		d->choices = xcalloc(n, sizeof(*d->choices));
		d->choice_num = xcalloc(n, sizeof(*d->choice_num));
		d->choice_is_num = xcalloc(n, sizeof(*d->choice_is_num));
		d->choice_p = xcalloc(n, sizeof(*d->choice_p));
		for (size_t i = 0; i < n; i++) {
			d->choices[i] = xstrdup(p->values.v[i]);
			d->choice_is_num[i] = parse_number(d->choices[i], &d->choice_num[i]);
			d->choice_p[i] = p->probs && p->kind == PARAM_VALUES ? p->probs[i] : 1.0 / (double)n;
		}
		d->weighted = p->probs && p->kind == PARAM_VALUES;
		return 0;
	}

	if ((p->kind == PARAM_UNIFORM || p->kind == PARAM_LOG_UNIFORM) && p->min == p->max &&
	    isfinite(p->min) && (p->kind == PARAM_UNIFORM || p->min > 0) &&
	    cfg->method != SWEEP_GRID) {
		char buf[40];

		/* min == max: a constant, which the Parzen estimators could not model (span 0) */
		search_format_double(buf, sizeof(buf), p->min);
		d->type = DIM_CAT;
		d->nr_choices = 1;
		d->choices = xcalloc(1, sizeof(*d->choices));
		d->choice_num = xcalloc(1, sizeof(*d->choice_num));
		d->choice_is_num = xcalloc(1, sizeof(*d->choice_is_num));
		d->choice_p = xcalloc(1, sizeof(*d->choice_p));
		d->choice_p[0] = 1;
		d->choices[0] = xstrdup(buf);
		d->choice_num[0] = p->min;
		d->choice_is_num[0] = 1;
		return 0;
	}
	d->type = DIM_NUM;
	if (cfg->method == SWEEP_GRID && p->kind != PARAM_INT_UNIFORM) {
		add_where(err, cfg, p);
		strbuf_addf(err, "grid search needs 'value', 'values' or int_uniform, found "
			    "distribution '%s'; list the values or use method random or bayes",
			    kind_name(p->kind));
		return -1;
	}
	switch (p->kind) {
	case PARAM_UNIFORM:
	case PARAM_LOG_UNIFORM:
		if (!isfinite(p->min) || !isfinite(p->max) || !(p->min < p->max) ||
		    (p->kind == PARAM_LOG_UNIFORM && !(p->min > 0))) {
			add_where(err, cfg, p);
			strbuf_addf(err, "%s needs %smin <= max, found min=%g max=%g",
				    kind_name(p->kind), p->kind == PARAM_LOG_UNIFORM ? "0 < " : "",
				    p->min, p->max);
			return -1;
		}
		d->lo = p->kind == PARAM_LOG_UNIFORM ? log(p->min) : p->min;
		d->hi = p->kind == PARAM_LOG_UNIFORM ? log(p->max) : p->max;
		break;
	case PARAM_INT_UNIFORM:
		d->kmin = isfinite(p->min) ? (long long)ceil(p->min) : 0;
		d->kmax = isfinite(p->max) ? (long long)floor(p->max) : -1;
		if (!isfinite(p->min) || !isfinite(p->max) || fabs(p->min) > 9e15 ||
		    fabs(p->max) > 9e15 || d->kmin > d->kmax) {
			add_where(err, cfg, p);
			strbuf_addf(err, "int_uniform needs an integer in [min, max], found min=%g max=%g",
				    p->min, p->max);
			return -1;
		}
		d->lo = (double)d->kmin - 0.5;
		d->hi = (double)d->kmax + 0.5;
		break;
	case PARAM_Q_UNIFORM:
	case PARAM_Q_LOG_UNIFORM:
		if (!isfinite(p->q) || !(p->q > 0) || !isfinite(p->min) || !isfinite(p->max) ||
		    !(p->min <= p->max) || fabs(p->min / p->q) > 9e15 || fabs(p->max / p->q) > 9e15 ||
		    (p->kind == PARAM_Q_LOG_UNIFORM && !(p->min > 0))) {
			add_where(err, cfg, p);
			strbuf_addf(err, "%s needs q > 0 and %smin <= max, found q=%g min=%g max=%g",
				    kind_name(p->kind), p->kind == PARAM_Q_LOG_UNIFORM ? "0 < " : "",
				    p->q, p->min, p->max);
			return -1;
		}
		/* tolerate binary noise: min 0.3 with q 0.1 includes 0.3 */
		d->kmin = (long long)ceil(p->min / p->q - 1e-9);
		d->kmax = (long long)floor(p->max / p->q + 1e-9);
		if (d->kmin > d->kmax) {
			add_where(err, cfg, p);
			strbuf_addf(err, "q_uniform: no multiple of q=%g lies in [%g, %g]",
				    p->q, p->min, p->max);
			return -1;
		}
		if (p->kind == PARAM_Q_LOG_UNIFORM) {
			/* log space, over the hull of the multiples (the smallest above 0) */
			d->lo = log(fmax((double)d->kmin - 0.5, 0.5) * p->q);
			d->hi = log(((double)d->kmax + 0.5) * p->q);
			if (d->kmin < 1)
				d->kmin = 1;
			break;
		}
		d->lo = ((double)d->kmin - 0.5) * p->q;
		d->hi = ((double)d->kmax + 0.5) * p->q;
		break;
	case PARAM_NORMAL:
	case PARAM_Q_NORMAL:
	case PARAM_LOG_NORMAL:
	case PARAM_Q_LOG_NORMAL:
		if (!isfinite(p->mu) || !isfinite(p->sigma) || !(p->sigma > 0) ||
		    (p->kind != PARAM_NORMAL && p->kind != PARAM_LOG_NORMAL &&
		     (!isfinite(p->q) || !(p->q > 0)))) {
			add_where(err, cfg, p);
			strbuf_addf(err, "%s needs a finite mu and sigma > 0%s, found mu=%g sigma=%g "
				    "q=%g", kind_name(p->kind), p->kind == PARAM_Q_NORMAL ||
				    p->kind == PARAM_Q_LOG_NORMAL ? " and q > 0" : "", p->mu, p->sigma,
				    p->q);
			return -1;
		}
		/* the log-normals are normal in log space, where TPE works for them */
		d->lo = -INFINITY;
		d->hi = INFINITY;
		d->prior_mu = p->mu;
		d->prior_sigma = p->sigma;
		return 0;
	case PARAM_BETA:
	case PARAM_Q_BETA:
		if (!(p->a > 0) || !(p->b > 0) || !isfinite(p->a) || !isfinite(p->b) ||
		    (p->kind == PARAM_Q_BETA && (!isfinite(p->q) || !(p->q > 0)))) {
			add_where(err, cfg, p);
			strbuf_addf(err, "%s needs a > 0 and b > 0 (and q > 0), found a=%g b=%g",
				    kind_name(p->kind), p->a, p->b);
			return -1;
		}
		/* TPE's prior here is uniform on [0, 1]; random draws follow beta(a, b) */
		d->min = 0;
		d->max = 1;
		d->kmin = 0;
		d->kmax = p->kind == PARAM_Q_BETA ? (long long)floor(1 / p->q + 1e-9) : 0;
		d->lo = 0;
		d->hi = 1;
		break;
	default:
		add_where(err, cfg, p);
		strbuf_addf(err, "cannot sample a '%s' parameter", kind_name(p->kind));
		return -1;
	}
	d->prior_mu = 0.5 * (d->lo + d->hi);
	d->prior_sigma = d->hi - d->lo;
	return 0;
}

static int dim_is_log(const struct dim *d)
{
	return d->kind == PARAM_LOG_UNIFORM || d->kind == PARAM_Q_LOG_UNIFORM ||
	       d->kind == PARAM_LOG_NORMAL || d->kind == PARAM_Q_LOG_NORMAL;
}

/* The internal coordinate TPE works in. */
static double dim_to_internal(const struct dim *d, double v)
{
	if (!dim_is_log(d))
		return v;
	/* a quantized log-normal can round to 0: keep it finite, below q */
	return log(d->kind == PARAM_Q_LOG_NORMAL ? fmax(v, 0.5 * d->q) : v);
}

/* round(v / q) * q without the binary noise of the product, k kept in [kmin, kmax] when bounded */
static double q_round(const struct dim *d, double v, int bounded)
{
	long long k = llround(v / d->q);
	char buf[40];

	if (bounded)
		k = clampll(k, d->kmin, d->kmax);
	snprintf(buf, sizeof(buf), "%.15g", (double)k * d->q);
	return strtod(buf, NULL);
}

/* The value of internal coordinate x: rounded, snapped and clamped into the space. */
static double dim_from_internal(const struct dim *d, double x)
{
	switch (d->kind) {
	case PARAM_INT_UNIFORM:
		return (double)clampll(llround(clampd(x, d->lo, d->hi)), d->kmin, d->kmax);
	case PARAM_Q_UNIFORM:
		return q_multiple(d, clampll(llround(clampd(x, d->lo, d->hi) / d->q), d->kmin, d->kmax));
	case PARAM_Q_LOG_UNIFORM:
		return q_round(d, exp(clampd(x, d->lo, d->hi)), 1);
	case PARAM_LOG_UNIFORM:
		return clampd(exp(x), d->min, d->max);
	case PARAM_NORMAL:
		return x;
	case PARAM_Q_NORMAL:
		return q_round(d, x, 0);
	case PARAM_LOG_NORMAL:
		return exp(x);
	case PARAM_Q_LOG_NORMAL:
		return q_round(d, exp(x), 0);
	case PARAM_Q_BETA:
		return q_round(d, clampd(x, 0, 1), 1);
	default:
		return clampd(x, d->min, d->max);
	}
}

/* Gamma(shape, 1) by Marsaglia and Tsang (2000); shape < 1 boosted by U^(1/shape). */
static double gamma_draw(struct rng *r, double shape)
{
	double boost = 1, dd, cc;

	if (shape < 1) {
		boost = pow(1 - rng_uniform01(r), 1 / shape);
		shape += 1;
	}
	dd = shape - 1.0 / 3;
	cc = 1 / sqrt(9 * dd);
	for (;;) {
		double x = rng_gauss(r), v = 1 + cc * x, u;

		if (v <= 0)
			continue;
		v = v * v * v;
		u = 1 - rng_uniform01(r);
		if (log(u) < 0.5 * x * x + dd - dd * v + dd * log(v))
			return boost * dd * v;
	}
}

/* A choice drawn from the prior (uniform draws kept as they were, for reproducibility). */
static size_t dim_draw_choice(const struct dim *d, struct rng *r)
{
	return d->weighted ? rng_choice(r, d->choice_p, d->nr_choices) : rng_below(r, d->nr_choices);
}

/* One value from the configured distribution itself. */
static double dim_sample_prior(const struct dim *d, struct rng *r)
{
	if (d->type == DIM_CAT)
		return (double)dim_draw_choice(d, r);
	switch (d->kind) {
	case PARAM_INT_UNIFORM:
		return (double)(d->kmin + (long long)rng_below(r, (uint64_t)(d->kmax - d->kmin) + 1));
	case PARAM_Q_UNIFORM:
		/* W&B's round(U(min, max) / q) * q, kept inside [min, max] */
		return dim_from_internal(d, d->min + (d->max - d->min) * rng_uniform01(r));
	case PARAM_LOG_UNIFORM:
		return dim_from_internal(d, d->lo + (d->hi - d->lo) * rng_uniform01(r));
	case PARAM_Q_LOG_UNIFORM:
		/* W&B's round(exp(U(ln min, ln max)) / q) * q */
		return q_round(d, exp(log(d->min) + (log(d->max) - log(d->min)) * rng_uniform01(r)), 1);
	case PARAM_NORMAL:
	case PARAM_Q_NORMAL:
	case PARAM_LOG_NORMAL:
	case PARAM_Q_LOG_NORMAL:
		return dim_from_internal(d, d->mu + d->sigma * rng_gauss(r));
	case PARAM_BETA:
	case PARAM_Q_BETA: {
		double x = gamma_draw(r, d->a), y = gamma_draw(r, d->b);

		return dim_from_internal(d, x + y > 0 ? x / (x + y) : 0.5);
	}
	default:
		return dim_from_internal(d, d->min + (d->max - d->min) * rng_uniform01(r));
	}
}

/* Points of d in a grid: its choices, or the integers of an int_uniform. */
static long long dim_grid_count(const struct dim *d)
{
	return d->type == DIM_CAT ? (long long)d->nr_choices : d->kmax - d->kmin + 1;
}

/* Is v (a number, or a choice index) a point of the space? */
static int dim_contains(const struct dim *d, double v)
{
	if (!isfinite(v))
		return 0;
	if (d->type == DIM_CAT)
		return v >= 0 && v < (double)d->nr_choices && v == floor(v);
	switch (d->kind) {
	case PARAM_NORMAL:
	case PARAM_Q_NORMAL:
		return 1;
	case PARAM_LOG_NORMAL:
		return v > 0;
	case PARAM_Q_LOG_NORMAL:
		return v >= 0;
	default:
		break;
	}
	return v >= d->min - 1e-12 * fabs(d->min) && v <= d->max + 1e-12 * fabs(d->max);
}

/* ---------------------------------------------------------- suggestions */

void suggestion_release(struct suggestion *sg)
{
	for (size_t i = 0; i < sg->nr; i++) {
		free(sg->items[i].name);
		free(sg->items[i].value);
	}
	free(sg->items);
	sg->items = NULL;
	sg->nr = 0;
	sg->seq = -1;
}

const struct suggestion_item *suggestion_get(const struct suggestion *sg, const char *name)
{
	for (size_t i = 0; i < sg->nr; i++)
		if (!strcmp(sg->items[i].name, name))
			return &sg->items[i];
	return NULL;
}

static void item_set(struct suggestion_item *it, const char *name, const char *value)
{
	it->name = xstrdup(name);
	it->value = xstrdup(value);
	it->num = 0;
	it->is_num = parse_number(value, &it->num);
}

json_t *suggestion_to_json(const struct suggestion *sg)
{
	json_t *params = json_object();

	for (size_t i = 0; i < sg->nr; i++)
		json_object_set_new(params, sg->items[i].name, json_string(sg->items[i].value));
	return json_pack("{s:I, s:o}", "seq", (json_int_t)sg->seq, "params", params);
}

int suggestion_from_json(struct suggestion *sg, const json_t *j, struct strbuf *err)
{
	const json_t *params = json_object_get(j, "params"), *v;
	const char *key;
	size_t i = 0;

	suggestion_release(sg);
	if (!json_is_object(params) || !json_is_integer(json_object_get(j, "seq"))) {
		strbuf_addstr(err, "suggestion: expected {\"seq\": N, \"params\": {...}}");
		return -1;
	}
	sg->seq = json_integer_value(json_object_get(j, "seq"));
	sg->items = xcalloc(json_object_size(params) + 1, sizeof(*sg->items));
	json_object_foreach((json_t *)params, key, v) {
		char buf[32];
		const char *s = buf;

		if (json_is_string(v))
			s = json_string_value(v);
		else if (json_is_integer(v))
			snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		else if (json_is_real(v))
			search_format_double(buf, sizeof(buf), json_real_value(v));
		else {
			strbuf_addf(err, "suggestion: parameter '%s' is neither a string nor a number", key);
			sg->nr = i;
			suggestion_release(sg);
			return -1;
		}
		item_set(&sg->items[i++], key, s);
	}
	sg->nr = i;
	return 0;
}

/* The suggestion for per-dimension values vals (numbers or choice indexes). */
static void make_suggestion(const struct search *s, long long seq, const double *vals,
			    struct suggestion *out)
{
	out->seq = seq;
	out->nr = s->nr_dims;
	out->items = xcalloc(s->nr_dims + 1, sizeof(*out->items));
	for (size_t i = 0; i < s->nr_dims; i++) {
		const struct dim *d = &s->dims[i];
		char buf[40];

		if (d->type == DIM_CAT) {
			item_set(&out->items[i], d->name, d->choices[(size_t)vals[i]]);
			continue;
		}
		if (d->kind == PARAM_INT_UNIFORM)
			snprintf(buf, sizeof(buf), "%lld", (long long)vals[i]);
		else
			search_format_double(buf, sizeof(buf), vals[i]);
		item_set(&out->items[i], d->name, buf);
	}
}

/* Per-dimension values of sg; 0, or -1 when it does not fit the space. */
static int read_suggestion(const struct search *s, const struct suggestion *sg, double *vals)
{
	for (size_t i = 0; i < s->nr_dims; i++) {
		const struct dim *d = &s->dims[i];
		const struct suggestion_item *it = suggestion_get(sg, d->name);
		double num;

		if (!it)
			return -1;
		num = it->is_num ? it->num : NAN;
		if (!it->is_num && !parse_number(it->value, &num))
			num = NAN;
		if (d->type == DIM_CAT) {
			size_t k;

			/* by the string as written, else by numeric value ("1e-3" is 0.001) */
			for (k = 0; k < d->nr_choices; k++)
				if (!strcmp(d->choices[k], it->value))
					break;
			if (k == d->nr_choices && isfinite(num))
				for (k = 0; k < d->nr_choices; k++)
					if (d->choice_is_num[k] && d->choice_num[k] == num)
						break;
			if (k == d->nr_choices)
				return -1;
			vals[i] = (double)k;
		} else {
			if (!dim_contains(d, num))
				return -1;
			vals[i] = num;
		}
	}
	return 0;
}

/* ------------------------------------------------------ search object */

struct search *search_new(const struct sweep_config *cfg, uint64_t seed, struct strbuf *err)
{
	struct search *s = xcalloc(1, sizeof(*s));

	s->method = cfg->method;
	s->goal = cfg->goal;
	s->seed = seed;
	s->tpe = tpe_defaults;
	s->grid_size = -1;
	s->dims = xcalloc(cfg->nr_params + 1, sizeof(*s->dims));
	for (size_t i = 0; i < cfg->nr_params; i++) {
		const struct sweep_param *p = &cfg->params[i];

		if (p->kind == PARAM_NESTED)
			continue;   /* a container; its children arrive flattened */
		if (dim_init(&s->dims[s->nr_dims], cfg, p, err) < 0) {
			dim_release(&s->dims[s->nr_dims]);
			search_free(s);
			return NULL;
		}
		for (size_t j = 0; j < s->nr_dims; j++)
			if (!strcmp(s->dims[j].name, p->name)) {
				add_where(err, cfg, p);
				strbuf_addstr(err, "defined twice");
				s->nr_dims++;
				search_free(s);
				return NULL;
			}
		s->nr_dims++;
	}
	if (s->method == SWEEP_GRID) {
		long long n = 1;

		for (size_t i = 0; i < s->nr_dims; i++) {
			long long k = dim_grid_count(&s->dims[i]);

			if (n > (1LL << 40) / k) {
				if (cfg->path)
					strbuf_addf(err, "%s: ", cfg->path);
				strbuf_addstr(err, "grid has more than 2^40 points; use method random or bayes");
				search_free(s);
				return NULL;
			}
			n *= k;
		}
		s->grid_size = n;
	}
	return s;
}

void search_free(struct search *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nr_dims; i++)
		dim_release(&s->dims[i]);
	free(s->dims);
	for (size_t i = 0; i < s->nr_obs; i++)
		free(s->obs[i].vals);
	free(s->obs);
	free(s->ranked);
	free(s);
}

long long search_next_seq(const struct search *s)
{
	return s->next_seq;
}

void search_set_next_seq(struct search *s, long long seq)
{
	s->next_seq = seq < 0 ? 0 : seq;
}

long long search_grid_size(const struct search *s)
{
	return s->grid_size;
}

void search_get_tpe_options(const struct search *s, struct tpe_options *o)
{
	*o = s->tpe;
}

void search_set_tpe_options(struct search *s, const struct tpe_options *o)
{
	s->tpe = *o;
	if (s->tpe.n_startup < 1)
		s->tpe.n_startup = 1;
	if (s->tpe.n_ei_candidates < 1)
		s->tpe.n_ei_candidates = 1;
	if (!(s->tpe.gamma > 0 && s->tpe.gamma <= 1))
		s->tpe.gamma = tpe_defaults.gamma;
	s->tpe.multivariate = !!s->tpe.multivariate;
	if (s->tpe.gamma_cap < 1)
		s->tpe.gamma_cap = 1;
	if (!(s->tpe.prior_weight >= 0) || !isfinite(s->tpe.prior_weight))
		s->tpe.prior_weight = tpe_defaults.prior_weight;
	if (!(s->tpe.bandwidth_factor > 0) || !isfinite(s->tpe.bandwidth_factor))
		s->tpe.bandwidth_factor = tpe_defaults.bandwidth_factor;
	if (!isfinite(s->tpe.cat_beta))
		s->tpe.cat_beta = tpe_defaults.cat_beta;
	else if (s->tpe.cat_beta < 0)
		s->tpe.cat_beta = -1;   /* the shared prior, whatever negative number asked for it */
}

/* s->obs[idx]'s place in s->ranked (rank_observations()'s order); 0: it has none */
static int rank_key(const struct search *s, size_t idx, struct ranked *r)
{
	const struct obs *o = &s->obs[idx];
	double loss = s->goal == GOAL_MAXIMIZE ? -o->value : o->value;

	if (o->state == SEARCH_FAILED || !isfinite(loss))
		return 0;
	r->seq = o->seq;
	r->idx = idx;
	if (o->state == SEARCH_COMPLETED) {
		r->key1 = -INFINITY;
		r->key2 = loss;
	} else {
		r->key1 = isnan(o->resource) ? 0 : -o->resource;
		r->key2 = loss;
		if (r->key1 == -INFINITY)
			r->key1 = -DBL_MAX;
	}
	return 1;
}

static void rank_remove(struct search *s, long long seq)
{
	for (size_t i = 0; i < s->nr_ranked; i++)
		if (s->ranked[i].seq == seq) {
			memmove(&s->ranked[i], &s->ranked[i + 1],
				(s->nr_ranked - i - 1) * sizeof(*s->ranked));
			s->nr_ranked--;
			return;
		}
}

static void rank_insert(struct search *s, size_t idx)
{
	struct ranked r;
	size_t lo = 0, hi = s->nr_ranked;

	if (!rank_key(s, idx, &r))
		return;
	while (lo < hi) {   /* first entry that sorts after r (keys are unique: seq) */
		size_t mid = lo + (hi - lo) / 2;

		if (cmp_ranked(&s->ranked[mid], &r) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	ALLOC_GROW(s->ranked, s->nr_ranked + 1, s->alloc_ranked);
	memmove(&s->ranked[lo + 1], &s->ranked[lo], (s->nr_ranked - lo) * sizeof(*s->ranked));
	s->ranked[lo] = r;
	s->nr_ranked++;
}

int search_observe_at(struct search *s, const struct suggestion *sg, double value,
		      int state, double resource)
{
	double *vals = xcalloc(s->nr_dims + 1, sizeof(*vals));
	size_t lo = 0, hi = s->nr_obs;
	struct obs *o;

	if (sg->seq < 0 || read_suggestion(s, sg, vals) < 0) {
		free(vals);
		return -1;
	}
	while (lo < hi) {   /* first obs with seq >= sg->seq */
		size_t mid = lo + (hi - lo) / 2;

		if (s->obs[mid].seq < sg->seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < s->nr_obs && s->obs[lo].seq == sg->seq) {
		free(s->obs[lo].vals);
		rank_remove(s, sg->seq);
	} else {
		ALLOC_GROW(s->obs, s->nr_obs + 1, s->alloc_obs);
		memmove(&s->obs[lo + 1], &s->obs[lo], (s->nr_obs - lo) * sizeof(*s->obs));
		s->nr_obs++;
		for (size_t i = 0; lo + 1 < s->nr_obs && i < s->nr_ranked; i++)
			s->ranked[i].idx += s->ranked[i].idx >= lo;
	}
	o = &s->obs[lo];
	o->seq = sg->seq;
	o->vals = vals;
	o->value = value;
	o->state = state == SEARCH_COMPLETED || state == SEARCH_PRUNED ? state : SEARCH_FAILED;
	o->resource = isfinite(resource) && resource >= 0 ? resource : NAN;
	rank_insert(s, lo);
	return 0;
}

int search_observe(struct search *s, const struct suggestion *sg, double value, int state)
{
	return search_observe_at(s, sg, value, state, NAN);
}

/* -------------------------------------------------------------- TPE */

/*
 * One draw of N(mu, sigma) inside [lo, hi], by rejection: mu lies inside and
 * sigma is at most the span, so at least a third of the draws land.
 */
static double truncated_gauss(struct rng *r, double mu, double sigma, double lo, double hi)
{
	for (int tries = 0; tries < 64; tries++) {
		double x = mu + sigma * rng_gauss(r);

		if (x >= lo && x <= hi)
			return x;
	}
	return clampd(mu, lo, hi);
}

/* log of the N(mu, sigma) density at x, divided by exp(logz), its mass inside the bounds */
static double gauss_logpdf(double x, double mu, double sigma, double logz)
{
	double z = (x - mu) / sigma;

	return -0.5 * z * z - log(sigma) - 0.5 * log(2 * M_PI) - logz;
}

/* A mixture of Gaussians truncated to [lo, hi]: one per point plus the prior. */
struct parzen {
	size_t n;
	double *mu, *sigma, *w, *logw, *logz;
	double lo, hi;
};

static double normal_cdf(double z)
{
	return 0.5 * erfc(-z * M_SQRT1_2);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * Bandwidths follow the 2011 paper: each point's sigma is the larger of
 * the distances to its neighbours (the bounds count as neighbours of the
 * extreme points), clipped to [span / min(100, m + 1), span] so a cluster of
 * equal points (int parameters) keeps a usable width and no kernel is wider
 * than the prior.
 */
static void parzen_build(struct parzen *pz, const struct dim *d, const double *pts, size_t m,
			 double prior_weight)
{
	double span = d->prior_sigma, smin, smax, lo_s, hi_s, total = 0;
	size_t n = m + (prior_weight > 0 ? 1 : 0);

	pz->n = n;
	pz->lo = d->lo;
	pz->hi = d->hi;
	pz->mu = xcalloc(n + 1, sizeof(double));
	pz->sigma = xcalloc(n + 1, sizeof(double));
	pz->w = xcalloc(n + 1, sizeof(double));
	pz->logw = xcalloc(n + 1, sizeof(double));
	pz->logz = xcalloc(n + 1, sizeof(double));
	memcpy(pz->mu, pts, m * sizeof(double));
	qsort(pz->mu, m, sizeof(double), cmp_double);

	smax = span;
	smin = span / (double)(m + 1 < 100 ? m + 1 : 100);
	lo_s = isfinite(d->lo) ? d->lo : fmin(m ? pz->mu[0] : d->mu, d->mu - 2 * d->sigma);
	hi_s = isfinite(d->hi) ? d->hi : fmax(m ? pz->mu[m - 1] : d->mu, d->mu + 2 * d->sigma);
	for (size_t i = 0; i < m; i++) {
		double left = i > 0 ? pz->mu[i - 1] : lo_s;
		double right = i + 1 < m ? pz->mu[i + 1] : hi_s;

		pz->sigma[i] = clampd(fmax(pz->mu[i] - left, right - pz->mu[i]), smin, smax);
		pz->w[i] = 1.0;
	}
	if (n > m) {
		pz->mu[m] = d->prior_mu;
		pz->sigma[m] = d->prior_sigma;
		pz->w[m] = prior_weight;
	}
	for (size_t i = 0; i < n; i++)
		total += pz->w[i];
	for (size_t i = 0; i < n; i++) {
		double z = 1.0;

		pz->w[i] /= total;
		pz->logw[i] = log(pz->w[i]);
		if (isfinite(pz->lo))
			z = normal_cdf((pz->hi - pz->mu[i]) / pz->sigma[i]) -
			    normal_cdf((pz->lo - pz->mu[i]) / pz->sigma[i]);
		pz->logz[i] = log(fmax(z, 1e-300));
	}
}

static void parzen_release(struct parzen *pz)
{
	free(pz->mu);
	free(pz->sigma);
	free(pz->w);
	free(pz->logw);
	free(pz->logz);
}

static double parzen_logpdf(const struct parzen *pz, double x)
{
	double best = -INFINITY, sum = 0;
	double *t = xcalloc(pz->n + 1, sizeof(double));

	for (size_t i = 0; i < pz->n; i++) {
		t[i] = pz->logw[i] + gauss_logpdf(x, pz->mu[i], pz->sigma[i], pz->logz[i]);
		best = fmax(best, t[i]);
	}
	if (isfinite(best))
		for (size_t i = 0; i < pz->n; i++)
			sum += exp(t[i] - best);
	free(t);
	return isfinite(best) ? best + log(sum) : best;
}

static double parzen_sample(const struct parzen *pz, struct rng *r)
{
	size_t i = rng_choice(r, pz->w, pz->n);

	return truncated_gauss(r, pz->mu[i], pz->sigma[i], pz->lo, pz->hi);
}

/*
 * Observed trials, best first: completed ones by value, then pruned ones
 * by how far they got (deepest first) and then by value, as a pruned trial
 * has only a partial-training value that should not outrank a finished
 * one.  Failed trials and non-finite values are left out.  Returns the count.
 */
static size_t rank_observations(const struct search *s, struct ranked *out)
{
	if (s->nr_ranked)
		memcpy(out, s->ranked, s->nr_ranked * sizeof(*out));
	return s->nr_ranked;
}
static double tpe_choose_numeric(const struct search *s, const struct dim *d, size_t di,
				 const struct ranked *rk, size_t n, size_t n_good, struct rng *r)
{
	double *good = xcalloc(n + 1, sizeof(double)), *bad = xcalloc(n + 1, sizeof(double));
	size_t ng = 0, nb = 0;
	struct parzen l, g;
	double best_x = 0, best_score = -INFINITY;

	for (size_t i = 0; i < n; i++) {
		double x = dim_to_internal(d, s->obs[rk[i].idx].vals[di]);

		if (i < n_good)
			good[ng++] = x;
		else
			bad[nb++] = x;
	}
	parzen_build(&l, d, good, ng, s->tpe.prior_weight);
	parzen_build(&g, d, bad, nb, s->tpe.prior_weight);
	if (!l.n || !g.n) {   /* prior_weight 0 and an empty side: nothing to model */
		parzen_release(&l);
		parzen_release(&g);
		free(good);
		free(bad);
		return dim_sample_prior(d, r);
	}
	for (int c = 0; c < s->tpe.n_ei_candidates; c++) {
		double x = parzen_sample(&l, r);
		double score = parzen_logpdf(&l, x) - parzen_logpdf(&g, x);

		if (score > best_score || c == 0) {
			best_score = score;
			best_x = x;
		}
	}
	parzen_release(&l);
	parzen_release(&g);
	free(good);
	free(bad);
	return dim_from_internal(d, best_x);
}

/*
 * Categorical: p(k) = (count(k) + w / K) / (m + w) with w the prior weight,
 * i.e. the empirical frequencies smoothed toward uniform.
 */
static double tpe_choose_categorical(const struct search *s, const struct dim *d, size_t di,
				     const struct ranked *rk, size_t n, size_t n_good,
				     struct rng *r)
{
	size_t K = d->nr_choices;
	double *cl = xcalloc(K, sizeof(double)), *cg = xcalloc(K, sizeof(double));
	double w = s->tpe.prior_weight > 0 ? s->tpe.prior_weight : 1e-6;
	double ml = 0, mg = 0, best_score = -INFINITY;
	size_t best = 0;

	for (size_t i = 0; i < n; i++) {
		size_t k = (size_t)s->obs[rk[i].idx].vals[di];

		if (i < n_good)
			cl[k] += 1, ml += 1;
		else
			cg[k] += 1, mg += 1;
	}
	for (size_t k = 0; k < K; k++) {
		cl[k] = (cl[k] + w * d->choice_p[k]) / (ml + w);
		cg[k] = (cg[k] + w * d->choice_p[k]) / (mg + w);
	}
	for (int c = 0; c < s->tpe.n_ei_candidates; c++) {
		size_t k = rng_choice(r, cl, K);
		double score = log(cl[k]) - log(cg[k]);

		if (score > best_score || c == 0) {
			best_score = score;
			best = k;
		}
	}
	free(cl);
	free(cg);
	return (double)best;
}

/*
 * Multivariate TPE: l and g are joint mixtures, one product kernel per
 * observed trial (plus a prior product), so that dependencies between
 * parameters (the best learning rate depends on the optimizer and the
 * batch) survive.  A joint kernel needs wider per-dimension bandwidths than
 * the 1-D neighbour rule gives, so each numeric dimension uses Scott's rule,
 * sigma = f * 1.06 * sd * m^(-1 / (D + 4)), clipped like the univariate one.
 * Scott's rule is tuned to estimate a smooth unimodal density; l(x) only
 * needs to say where to look next, and a narrower kernel (f =
 * bandwidth_factor, 0.7) searches closer to the good points: on the
 * benchmark's development seeds it lowered the median regret on branin and
 * hartmann6 and left mlp unchanged (docs/sweep-search.md).
 *
 * A categorical kernel puts weight 1 on its trial's choice and c on every
 * one of the K choices, normalised: it keeps its choice with probability
 * 1 / (1 + beta), beta = K * c, and is uniform otherwise.  By default
 * (cat_beta < 0) c = prior_weight / (m + 1), m the trials in the group: the
 * prior weight spread over the group's kernels, so the kernels sharpen as
 * the group grows.  g, made of most of the trials, then tells apart the
 * choices that were tried and failed from those hardly tried, and l, made
 * of few, still tries the other choices early on.  A fixed beta (cat_beta
 * >= 0; 0.5 was the former rule) smooths g as much as l, so with a
 * "good" choice found early (adam at a moderate lr) the other choices
 * looked no worse in g than in l and TPE stayed with it: on the benchmark's
 * mlp, 21 % of the development runs ended in the adam family instead of
 * sgd (regret > 0.1), against 8 % with the shared prior, and the median
 * regret fell from 0.066 to 0.058 (docs/sweep-search.md).
 */
#define JOINT_CAT_BETA_FORMER 0.5

struct joint {
	size_t m, D;          /* observed points, dimensions */
	size_t n;             /* components: m points (+ 1 prior, the last) */
	int has_prior;
	double *w;            /* [n] */
	double *x;            /* [m * D] the points: internal coordinates or choice indexes */
	double *sigma;        /* [D] per numeric dimension, shared by the points */
	double *logz;         /* [m * D] truncation normaliser per point and numeric dim */
	double *prior_logz;   /* [D] */
	double cat_c;         /* categorical kernels: weight of every choice besides 1 on the own */
	double cat_beta;      /* or, when cat_c < 0, a fixed beta for every dimension */
	/*
	 * For joint_logpdf(), computed once by joint_build(): per component
	 * what does not depend on the point (its log weight and every numeric
	 * kernel's normaliser: -log sigma - log sqrt(2 pi) - logz), the numeric
	 * and the categorical dimensions (one choice: none), the inverse
	 * bandwidths; scratch space for the terms and the categorical kernels'
	 * two values at a point (its choice, another).
	 */
	double *c;            /* [n] */
	size_t *num, *cat, nr_num, nr_cat;
	double *inv_sigma;    /* [D] */
	double *t, *lmatch, *lmiss;
};

/* beta = (weight off the own choice) / (weight on it) of a kernel of j over dm */
static double joint_cat_beta(const struct joint *j, const struct dim *dm)
{
	return j->cat_c >= 0 ? (double)dm->nr_choices * j->cat_c : j->cat_beta;
}

/* joint_logpdf()'s constants (struct joint); j built but for them */
static void joint_precompute(struct joint *j, const struct search *s)
{
	size_t D = j->D;
	const double log_sqrt_2pi = 0.5 * log(2 * M_PI);

	j->c = xcalloc(j->n + 1, sizeof(double));
	j->num = xcalloc(D + 1, sizeof(size_t));
	j->cat = xcalloc(D + 1, sizeof(size_t));
	j->inv_sigma = xcalloc(D + 1, sizeof(double));
	j->t = xcalloc(j->n + 1, sizeof(double));
	j->lmatch = xcalloc(D + 1, sizeof(double));
	j->lmiss = xcalloc(D + 1, sizeof(double));
	j->nr_num = j->nr_cat = 0;
	for (size_t d = 0; d < D; d++) {
		const struct dim *dm = &s->dims[d];

		if (dm->type == DIM_NUM) {
			j->num[j->nr_num++] = d;
			j->inv_sigma[d] = 1 / j->sigma[d];
		} else if (dm->nr_choices > 1) {
			j->cat[j->nr_cat++] = d;
		}
	}
	for (size_t i = 0; i < j->n; i++) {
		int prior = j->has_prior && i == j->m;
		double c = log(j->w[i]);

		for (size_t k = 0; k < j->nr_num; k++) {
			size_t d = j->num[k];

			c -= prior ? log(s->dims[d].prior_sigma) + log_sqrt_2pi + j->prior_logz[d] :
				     log(j->sigma[d]) + log_sqrt_2pi + j->logz[i * D + d];
		}
		j->c[i] = c;
	}
}

static void joint_build(struct joint *j, const struct search *s, const struct ranked *rk,
			size_t from, size_t to)
{
	size_t D = s->nr_dims, m = to - from, active = 0;
	double total = 0;

	memset(j, 0, sizeof(*j));
	j->m = m;
	j->D = D;
	j->has_prior = s->tpe.prior_weight > 0 || m == 0;
	j->n = m + (j->has_prior ? 1 : 0);
	j->w = xcalloc(j->n + 1, sizeof(double));
	j->x = xcalloc(m * D + 1, sizeof(double));
	j->sigma = xcalloc(D + 1, sizeof(double));
	j->logz = xcalloc(m * D + 1, sizeof(double));
	j->prior_logz = xcalloc(D + 1, sizeof(double));
	j->cat_beta = s->tpe.cat_beta;
	j->cat_c = s->tpe.cat_beta < 0 ? s->tpe.prior_weight / (double)(m + 1) : -1;
	for (size_t d = 0; d < D; d++)
		active += !(s->dims[d].type == DIM_CAT && s->dims[d].nr_choices == 1);
	for (size_t i = 0; i < m; i++)
		for (size_t d = 0; d < D; d++) {
			const struct dim *dm = &s->dims[d];
			double v = s->obs[rk[from + i].idx].vals[d];

			j->x[i * D + d] = dm->type == DIM_NUM ? dim_to_internal(dm, v) : v;
		}
	for (size_t d = 0; d < D; d++) {
		const struct dim *dm = &s->dims[d];
		double mean = 0, var = 0, span = dm->prior_sigma, sd;

		if (dm->type != DIM_NUM)
			continue;
		for (size_t i = 0; i < m; i++)
			mean += j->x[i * D + d];
		mean = m ? mean / (double)m : 0;
		for (size_t i = 0; i < m; i++)
			var += (j->x[i * D + d] - mean) * (j->x[i * D + d] - mean);
		sd = m > 1 ? sqrt(var / (double)(m - 1)) : span;
		j->sigma[d] = clampd(s->tpe.bandwidth_factor * 1.06 * sd * pow((double)(m ? m : 1), -1.0 / ((double)active + 4)),
				     span / (double)(m + 1 < 100 ? m + 1 : 100), span);
		for (size_t i = 0; i < m; i++) {
			double z = 1, mu = j->x[i * D + d];

			if (isfinite(dm->lo))
				z = normal_cdf((dm->hi - mu) / j->sigma[d]) -
				    normal_cdf((dm->lo - mu) / j->sigma[d]);
			j->logz[i * D + d] = log(fmax(z, 1e-300));
		}
		j->prior_logz[d] = 0;
		if (isfinite(dm->lo))
			j->prior_logz[d] = log(fmax(normal_cdf((dm->hi - dm->prior_mu) / dm->prior_sigma) -
						    normal_cdf((dm->lo - dm->prior_mu) / dm->prior_sigma),
						    1e-300));
	}
	for (size_t i = 0; i < m; i++)
		j->w[i] = 1;
	if (j->has_prior)
		j->w[m] = s->tpe.prior_weight > 0 ? s->tpe.prior_weight : 1;
	for (size_t i = 0; i < j->n; i++)
		total += j->w[i];
	for (size_t i = 0; i < j->n; i++)
		j->w[i] /= total;
	joint_precompute(j, s);
}

static void joint_release(struct joint *j)
{
	free(j->w);
	free(j->x);
	free(j->sigma);
	free(j->logz);
	free(j->prior_logz);
	free(j->c);
	free(j->num);
	free(j->cat);
	free(j->inv_sigma);
	free(j->t);
	free(j->lmatch);
	free(j->lmiss);
}

/*
 * log density of the point x (internal coordinates / choice indexes): the
 * log-sum-exp over the components of c[i] + the kernels' terms at x, each
 * numeric one -z^2 / 2, each categorical one the log of its kernel at x's
 * choice, which is one of two values per dimension (x's choice is the
 * component's own or not), or the prior's probability for the prior.  O(m D)
 * multiplications and m exp(): the constants are joint_build()'s.
 */
static double joint_logpdf(struct joint *j, const struct search *s, const double *x)
{
	size_t D = j->D;
	double best = -INFINITY, sum = 0, prior_cat = 0;

	for (size_t k = 0; k < j->nr_cat; k++) {
		size_t d = j->cat[k];
		const struct dim *dm = &s->dims[d];
		double pk = dm->choice_p[(size_t)x[d]], beta = joint_cat_beta(j, dm);

		j->lmatch[d] = log((1 + beta * pk) / (1 + beta));
		j->lmiss[d] = log((0 + beta * pk) / (1 + beta));
		prior_cat += log(pk);
	}
	for (size_t i = 0; i < j->m; i++) {
		const double *xi = &j->x[i * D];
		double lp = j->c[i];

		for (size_t k = 0; k < j->nr_cat; k++) {
			size_t d = j->cat[k];

			lp += x[d] == xi[d] ? j->lmatch[d] : j->lmiss[d];
		}
		for (size_t k = 0; k < j->nr_num; k++) {
			size_t d = j->num[k];
			double z = (x[d] - xi[d]) * j->inv_sigma[d];

			lp -= 0.5 * z * z;
		}
		j->t[i] = lp;
		best = fmax(best, lp);
	}
	if (j->has_prior) {
		double lp = j->c[j->m] + prior_cat;

		for (size_t k = 0; k < j->nr_num; k++) {
			size_t d = j->num[k];
			double z = (x[d] - s->dims[d].prior_mu) / s->dims[d].prior_sigma;

			lp -= 0.5 * z * z;
		}
		j->t[j->m] = lp;
		best = fmax(best, lp);
	}
	if (!isfinite(best))
		return best;
	for (size_t i = 0; i < j->n; i++)
		if (j->t[i] - best > -746)   /* exp() of less is 0 */
			sum += exp(j->t[i] - best);
	return best + log(sum);
}

static void joint_sample(const struct joint *j, const struct search *s, struct rng *r, double *x)
{
	size_t i = rng_choice(r, j->w, j->n);
	int prior = j->has_prior && i == j->m;

	for (size_t d = 0; d < j->D; d++) {
		const struct dim *dm = &s->dims[d];

		if (dm->type == DIM_CAT) {
			double beta = joint_cat_beta(j, dm);

			if (dm->nr_choices == 1)
				x[d] = 0;
			else if (prior || rng_uniform01(r) < beta / (1 + beta))
				x[d] = (double)dim_draw_choice(dm, r);
			else
				x[d] = j->x[i * j->D + d];
		} else if (prior) {
			x[d] = truncated_gauss(r, dm->prior_mu, dm->prior_sigma, dm->lo, dm->hi);
		} else {
			x[d] = truncated_gauss(r, j->x[i * j->D + d], j->sigma[d], dm->lo, dm->hi);
		}
	}
}

static void tpe_choose_joint(const struct search *s, const struct ranked *rk, size_t n,
			     size_t n_good, struct rng *r, double *vals)
{
	struct joint l, g;
	double *x = xcalloc(s->nr_dims + 1, sizeof(double));
	double best_score = -INFINITY;

	joint_build(&l, s, rk, 0, n_good);
	joint_build(&g, s, rk, n_good, n);
	for (int c = 0; c < s->tpe.n_ei_candidates; c++) {
		double score;

		joint_sample(&l, s, r, x);
		score = joint_logpdf(&l, s, x) - joint_logpdf(&g, s, x);
		if (score > best_score || c == 0) {
			best_score = score;
			memcpy(vals, x, s->nr_dims * sizeof(double));
		}
	}
	for (size_t d = 0; d < s->nr_dims; d++)
		if (s->dims[d].type == DIM_NUM)
			vals[d] = dim_from_internal(&s->dims[d], vals[d]);
	joint_release(&l);
	joint_release(&g);
	free(x);
}

/*
 * g, the density of the trials that are not among the best, is made of at
 * most this many of them: evenly spaced by rank, the best and every
 * (n - n_good) / TPE_MAX_BAD-th after it.  Each suggestion costs O(n) in
 * the points of l and g; without it a sweep of 10,000 trials spends ~17 ms
 * per suggestion (docs/sweep-search.md, "Cost with a long history").  Up to
 * n_good + 1000 observed trials nothing changes.
 */
#define TPE_MAX_BAD 1000

static void suggest_tpe(const struct search *s, struct rng *r, double *vals)
{
	struct ranked *rk = xcalloc(s->nr_obs + 1, sizeof(*rk));
	size_t n = rank_observations(s, rk), n_good;

	if (n < (size_t)s->tpe.n_startup) {
		for (size_t i = 0; i < s->nr_dims; i++)
			vals[i] = dim_sample_prior(&s->dims[i], r);
		free(rk);
		return;
	}
	n_good = (size_t)ceil(s->tpe.gamma * (double)n);
	if (n_good > (size_t)s->tpe.gamma_cap)
		n_good = (size_t)s->tpe.gamma_cap;
	if (n_good < 1)
		n_good = 1;
	if (n - n_good > TPE_MAX_BAD) {
		/* g from TPE_MAX_BAD of the rest, evenly spaced by rank (in place:
		 * the k-th comes from at or past k) */
		size_t nb = n - n_good;

		for (size_t k = 0; k < TPE_MAX_BAD; k++)
			rk[n_good + k] = rk[n_good + k * nb / TPE_MAX_BAD];
		n = n_good + TPE_MAX_BAD;
	}
	if (s->tpe.multivariate) {
		tpe_choose_joint(s, rk, n, n_good, r, vals);
		free(rk);
		return;
	}
	for (size_t i = 0; i < s->nr_dims; i++) {
		const struct dim *d = &s->dims[i];

		if (d->type == DIM_CAT && d->nr_choices == 1)
			vals[i] = 0;
		else if (d->type == DIM_CAT)
			vals[i] = tpe_choose_categorical(s, d, i, rk, n, n_good, r);
		else
			vals[i] = tpe_choose_numeric(s, d, i, rk, n, n_good, r);
	}
	free(rk);
}

/* ------------------------------------------------------------ suggest */

int search_suggest(struct search *s, struct suggestion *out)
{
	double *vals = xcalloc(s->nr_dims + 1, sizeof(*vals));
	long long seq = s->next_seq;
	struct rng r;

	suggestion_release(out);
	if (s->method == SWEEP_GRID) {
		long long rest = seq;

		if (seq >= s->grid_size) {
			free(vals);
			return 1;
		}
		/* odometer: the last parameter turns fastest, values in the order written */
		for (size_t i = s->nr_dims; i > 0; i--) {
			const struct dim *d = &s->dims[i - 1];
			long long k = dim_grid_count(d);

			vals[i - 1] = (double)(rest % k + (d->type == DIM_NUM ? d->kmin : 0));
			rest /= k;
		}
	} else {
		rng_seed(&r, rng_mix(s->seed, (uint64_t)seq, 0));
		if (s->method == SWEEP_BAYES)
			suggest_tpe(s, &r, vals);
		else
			for (size_t i = 0; i < s->nr_dims; i++)
				vals[i] = dim_sample_prior(&s->dims[i], &r);
	}
	make_suggestion(s, seq, vals, out);
	s->next_seq++;
	free(vals);
	return 0;
}

/* --------------------------------------------------------- state JSON */

static const char *state_name(int state)
{
	return state == SEARCH_COMPLETED ? "completed" : state == SEARCH_PRUNED ? "pruned" : "failed";
}

static json_t *json_number_or_null(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

json_t *search_state_to_json(const struct search *s)
{
	json_t *obs = json_array(), *j;
	char seed[32];

	for (size_t i = 0; i < s->nr_obs; i++) {
		const struct obs *o = &s->obs[i];
		struct suggestion sg = SUGGESTION_INIT;
		json_t *sj;

		make_suggestion(s, o->seq, o->vals, &sg);
		sj = suggestion_to_json(&sg);
		json_object_set_new(sj, "value", json_number_or_null(o->value));
		json_object_set_new(sj, "state", json_string(state_name(o->state)));
		json_object_set_new(sj, "resource", json_number_or_null(o->resource));
		json_array_append_new(obs, sj);
		suggestion_release(&sg);
	}
	snprintf(seed, sizeof(seed), "%" PRIu64, s->seed);
	j = json_pack("{s:i, s:s, s:s, s:I, s:{s:i, s:i, s:f, s:i, s:f, s:b, s:f, s:f}, s:o}",
		      "version", 1, "method", method_name(s->method), "seed", seed,
		      "next_seq", (json_int_t)s->next_seq,
		      "tpe", "n_startup", s->tpe.n_startup, "n_ei_candidates", s->tpe.n_ei_candidates,
		      "gamma", s->tpe.gamma, "gamma_cap", s->tpe.gamma_cap,
		      "prior_weight", s->tpe.prior_weight, "multivariate", s->tpe.multivariate,
		      "bandwidth_factor", s->tpe.bandwidth_factor, "cat_beta", s->tpe.cat_beta,
		      "observations", obs);
	return j;
}

static int state_from_name(const char *name)
{
	if (name && !strcmp(name, "completed"))
		return SEARCH_COMPLETED;
	if (name && !strcmp(name, "pruned"))
		return SEARCH_PRUNED;
	return SEARCH_FAILED;
}

struct search *search_state_from_json(const struct sweep_config *cfg, const json_t *state,
				      struct strbuf *err)
{
	const char *method = json_get_str(state, "method", NULL);
	const char *seed_str = json_get_str(state, "seed", NULL);
	const json_t *tpe = json_object_get(state, "tpe"), *obs = json_object_get(state, "observations");
	unsigned long long seed;
	struct tpe_options o = tpe_defaults;
	struct search *s;
	char *end;
	size_t i;
	const json_t *oj;
	size_t err_len = err->len;

	if (json_get_int(state, "version", 0) != 1 || !method || !seed_str || !json_is_array(obs)) {
		strbuf_addstr(err, "search state: not a version 1 state object");
		return NULL;
	}
	if (strcmp(method, method_name(cfg->method))) {
		strbuf_addf(err, "search state: saved for method '%s', the sweep says '%s'",
			    method, method_name(cfg->method));
		return NULL;
	}
	errno = 0;
	seed = strtoull(seed_str, &end, 10);
	if (*end || !*seed_str || errno) {
		strbuf_addf(err, "search state: bad seed '%s'", seed_str);
		return NULL;
	}
	s = search_new(cfg, (uint64_t)seed, err);
	if (!s)
		return NULL;
	if (json_is_object(tpe)) {
		o.n_startup = (int)json_get_int(tpe, "n_startup", o.n_startup);
		o.n_ei_candidates = (int)json_get_int(tpe, "n_ei_candidates", o.n_ei_candidates);
		o.gamma = json_get_real(tpe, "gamma", o.gamma);
		o.gamma_cap = (int)json_get_int(tpe, "gamma_cap", o.gamma_cap);
		o.prior_weight = json_get_real(tpe, "prior_weight", o.prior_weight);
		if (json_is_boolean(json_object_get(tpe, "multivariate")))
			o.multivariate = json_is_true(json_object_get(tpe, "multivariate"));
		/* absent: a state from before the option, whose kernels had factor 1 */
		o.bandwidth_factor = json_get_real(tpe, "bandwidth_factor", 1.0);
		/* absent: a state from before the option, whose categorical kernels had beta 0.5 */
		o.cat_beta = json_get_real(tpe, "cat_beta", JOINT_CAT_BETA_FORMER);
	}
	search_set_tpe_options(s, &o);
	search_set_next_seq(s, json_get_int(state, "next_seq", 0));
	json_array_foreach(obs, i, oj) {
		struct suggestion sg = SUGGESTION_INIT;
		const json_t *v = json_object_get(oj, "value"), *res = json_object_get(oj, "resource");

		if (suggestion_from_json(&sg, oj, err) < 0 ||
		    search_observe_at(s, &sg, json_is_number(v) ? json_number_value(v) : NAN,
				      state_from_name(json_get_str(oj, "state", NULL)),
				      json_is_number(res) ? json_number_value(res) : NAN) < 0) {
			if (err->len == err_len)
				strbuf_addf(err, "search state: observation %zu does not fit the sweep's "
					    "parameters (was the sweep file changed?)", i);
			suggestion_release(&sg);
			search_free(s);
			return NULL;
		}
		suggestion_release(&sg);
	}
	return s;
}
