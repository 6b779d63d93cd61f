/*
 * sweep-report.c - `dtctl sweep report`: one self-contained HTML page for a
 * hyperparameter sweep, rendered from the JSON of `dtctl sweep export --json`.
 *
 * The page has four parts: a header (sweep, state, counts, best), the metric
 * of every trial against its progress (epoch, step or report index) on one SVG
 * chart, a parallel-coordinates plot of parameters against the final value,
 * and two tables (the best ten, then every trial).  Everything is inline: no
 * network, no fonts, a few lines of optional script for hover highlighting;
 * SVG <title> elements give tooltips without it.
 *
 * How it works: load() checks the export and copies what the page needs into
 * a struct report (borrowed pointers into the JSON, which outlives it); then
 * each part is appended to the output in turn.  No clock, no locale, no
 * hash-order iteration: the same export gives the same bytes.  Coordinates
 * are rounded to 0.1 px to keep 200 trials x 30 points well under 300 KB.
 */
#include "protocol.h"
#include "builtin.h"
#include "sweep-report.h"
#include "parse-options.h"
#include "units.h"
#include "usage.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "math-dl.h"   /* last: exp, log10, pow... load libm on first use */

/* Chart geometry, in SVG user units (= CSS px: the SVGs are not scaled). */
#define CW 1160                 /* width of both charts */
#define CH 460                  /* height of the curves chart */
#define C_L 74                  /* curves plot area: left, right, top, bottom */
#define C_R 920
#define C_T 18
#define C_B (CH - 50)
#define PH 430                  /* height of the parallel-coordinates chart */
#define P_T 58
#define P_B (PH - 34)
#define P_L 70
#define P_R (CW - 130)
#define TOP_N 10                /* rows of the best-trials table */
#define CAT_LABELS 14           /* at most this many category labels per axis */

enum axis_kind { AX_NUM, AX_LOG, AX_CAT };

struct pt {
	double x, y;
};

struct trial {
	long long id;
	const char *state;
	const char *job;          /* NULL: none */
	const json_t *params;     /* object or NULL */
	double value;             /* NAN: none */
	long long resource;       /* -1: none */
	const char *created, *ended;
	struct pt *pts;
	size_t npts, apts;
	double shade;             /* 0 worst .. 1 best; < 0: no value (grey) */
};

struct axis {
	const char *name;
	const char *kind;         /* as in the export, "" when unknown */
	enum axis_kind type;
	int has_range;
	double lo, hi;
	const char **cats;
	size_t ncats, acats;
};

struct report {
	const json_t *sweep;
	const char *metric;
	int maximize;
	struct trial *tr;
	size_t ntr;
	struct axis *ax;
	size_t nax, aax;
	long long best_id;        /* -1: no best */
	double best_value;
	const char *xname;        /* "epoch", "step" or "report" */
	int ylog;
	struct strbuf *out;
	struct strbuf *err;
};

static int bad(struct strbuf *err, const char *fmt, ...) DT_PRINTF(2, 3);
static int bad(struct strbuf *err, const char *fmt, ...)
{
	va_list ap;

	strbuf_addstr(err, "sweep export: ");
	va_start(ap, fmt);
	strbuf_vaddf(err, fmt, ap);
	va_end(ap);
	return -1;
}

/* ------------------------------------------------------------ formatting */

/* HTML-escape s for text and for attribute values (quotes included); NULL: nothing. */
static void add_esc(struct strbuf *sb, const char *s)
{
	const char *run = s;

	if (!s)
		return;
	for (; *s; s++) {
		const char *rep;

		switch (*s) {
		case '&': rep = "&amp;"; break;
		case '<': rep = "&lt;"; break;
		case '>': rep = "&gt;"; break;
		case '"': rep = "&quot;"; break;
		case '\'': rep = "&#39;"; break;
		default: continue;
		}
		strbuf_add(sb, run, s - run);
		strbuf_addstr(sb, rep);
		run = s + 1;
	}
	strbuf_add(sb, run, s - run);
}

/* At most `max` bytes of s (cut on a UTF-8 boundary, "…" added), escaped. */
static void add_esc_short(struct strbuf *sb, const char *s, size_t max)
{
	size_t n = strlen(s);
	char *cut;

	if (n <= max) {
		add_esc(sb, s);
		return;
	}
	while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)
		max--;
	cut = xstrndup(s, max);
	add_esc(sb, cut);
	strbuf_addstr(sb, "\xe2\x80\xa6");
	free(cut);
}

/* A coordinate: one decimal, "12" rather than "12.0", never "-0". */
static void add_coord(struct strbuf *sb, double v)
{
	char b[40];
	int n;

	v = round(v * 10) / 10;
	if (v == 0 || !isfinite(v))
		v = 0;
	n = snprintf(b, sizeof(b), "%.1f", v);
	if (n >= 2 && b[n - 2] == '.' && b[n - 1] == '0')
		n -= 2;
	strbuf_add(sb, b, n);
}

static void add_value(struct strbuf *sb, double v, int digits)
{
	if (isfinite(v))
		strbuf_addf(sb, "%.*g", digits, v);
	else
		strbuf_addstr(sb, "\xe2\x80\x94");
}

/* A tick label for value v on a linear axis stepping by step. */
static void add_tick_label(struct strbuf *sb, double v, double step)
{
	int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);

	if (fabs(v) < step * 1e-6)
		v = 0;
	if (fabs(v) >= 1e6 || (v != 0 && dec > 6))
		strbuf_addf(sb, "%.3g", v);
	else
		strbuf_addf(sb, "%.*f", dec, v);
}

/* A label for 10^k. */
static void add_pow10_label(struct strbuf *sb, int k)
{
	if (k >= -4 && k <= 5)
		strbuf_addf(sb, "%.*f", k < 0 ? -k : 0, pow(10, k));
	else
		strbuf_addf(sb, "1e%d", k);
}

/* "2026-11-22T10:00:00.123456Z" -> seconds since the epoch; -1 if unreadable. */
static long long parse_ts(const char *s)
{
	struct tm tm = { 0 };
	int y, mo, d, h, mi, sec;

	if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &sec) != 6)
		return -1;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	return (long long)timegm(&tm);
}

/* A timestamp for people: "2026-11-22 10:00:00 UTC" (the raw text if odd). */
static void add_ts(struct strbuf *sb, const char *s)
{
	int y, mo, d, h, mi, sec;

	if (!s) {
		strbuf_addstr(sb, "\xe2\x80\x94");
		return;
	}
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &sec) == 6)
		strbuf_addf(sb, "%04d-%02d-%02d %02d:%02d:%02d UTC", y, mo, d, h, mi, sec);
	else
		add_esc(sb, s);
}

static void add_duration(struct strbuf *sb, const char *from, const char *to)
{
	long long a = parse_ts(from), b = parse_ts(to), s;

	if (a < 0 || b < 0 || b < a) {
		strbuf_addstr(sb, "\xe2\x80\x94");
		return;
	}
	s = b - a;
	if (s >= 86400)
		strbuf_addf(sb, "%lldd %02lldh", s / 86400, s % 86400 / 3600);
	else if (s >= 3600)
		strbuf_addf(sb, "%lldh %02lldm", s / 3600, s % 3600 / 60);
	else if (s >= 60)
		strbuf_addf(sb, "%lldm %02llds", s / 60, s % 60);
	else
		strbuf_addf(sb, "%llds", s);
}

/* A parameter value as text: strings as they are, numbers printed. */
static const char *param_text(const json_t *v, char *buf, size_t len)
{
	if (json_is_string(v))
		return json_string_value(v);
	if (json_is_number(v)) {
		struct strbuf sb = STRBUF_INIT;

		format_number_exact(&sb, json_number_value(v));
		snprintf(buf, len, "%s", sb.buf);
		strbuf_release(&sb);
		return buf;
	}
	return NULL;
}

/* Whole string s as a finite number. */
static int parse_num(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (*end || errno || !isfinite(v))
		return -1;
	*out = v;
	return 0;
}

/* --------------------------------------------------------------- loading */

static const char *const trial_states[] = {
	"PENDING", "RUNNING", "COMPLETED", "PRUNED", "FAILED", "CANCELLED",
};
static const char *const sweep_states[] = {
	"RUNNING", "PAUSED", "STOPPED", "COMPLETED", "FAILED",
};

static int known_state(const char *s, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(s, list[i]))
			return 1;
	return 0;
}

/* Optional string field: absent or null -> NULL; *bad set if another type. */
static const char *opt_str(const json_t *o, const char *key, int *wrong)
{
	const json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return NULL;
	if (!json_is_string(v)) {
		*wrong = 1;
		return NULL;
	}
	return json_string_value(v);
}

/*
 * A value that may be NaN: a number, null/absent (NAN), or one of the strings
 * JSON writers use for non-finite numbers (NAN).  -1 for anything else.
 */
static int opt_value(const json_t *v, double *out)
{
	*out = NAN;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_number(v)) {
		double d = json_number_value(v);

		*out = isfinite(d) ? d : NAN;
		return 0;
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);

		if (!strcasecmp(s, "nan") || !strcasecmp(s, "inf") || !strcasecmp(s, "-inf") ||
		    !strcasecmp(s, "infinity") || !strcasecmp(s, "-infinity"))
			return 0;
	}
	return -1;
}

static struct axis *axis_find(struct report *r, const char *name)
{
	for (size_t i = 0; i < r->nax; i++)
		if (!strcmp(r->ax[i].name, name))
			return &r->ax[i];
	return NULL;
}

static struct axis *axis_add(struct report *r, const char *name, const char *kind)
{
	struct axis *a;

	ALLOC_GROW(r->ax, r->nax + 1, r->aax);
	a = &r->ax[r->nax++];
	memset(a, 0, sizeof(*a));
	a->name = name;
	a->kind = kind ? kind : "";
	a->type = AX_NUM;
	return a;
}

static void axis_add_cat(struct axis *a, const char *s)
{
	for (size_t i = 0; i < a->ncats; i++)
		if (!strcmp(a->cats[i], s))
			return;
	ALLOC_GROW(a->cats, a->ncats + 1, a->acats);
	a->cats[a->ncats++] = s;
}

static int load_parameters(struct report *r, const json_t *params)
{
	size_t i;
	const json_t *p;

	if (!params || json_is_null(params))
		return 0;
	if (!json_is_array(params))
		return bad(r->err, "'sweep.parameters' is not an array");
	json_array_foreach(params, i, p) {
		const json_t *name = json_object_get(p, "name"), *vals, *mn, *mx;
		const char *kind;
		struct axis *a;
		int wrong = 0;

		if (!json_is_object(p))
			return bad(r->err, "'sweep.parameters[%zu]' is not an object", i);
		if (!json_is_string(name) || !*json_string_value(name))
			return bad(r->err, "'sweep.parameters[%zu].name' is missing or not a string", i);
		kind = opt_str(p, "kind", &wrong);
		if (wrong)
			return bad(r->err, "'sweep.parameters[%zu].kind' is not a string", i);
		if (axis_find(r, json_string_value(name)))
			return bad(r->err, "'sweep.parameters[%zu].name': '%s' appears twice",
				   i, json_string_value(name));
		a = axis_add(r, json_string_value(name), kind);
		vals = json_object_get(p, "values");
		mn = json_object_get(p, "min");
		mx = json_object_get(p, "max");
		if (vals) {
			size_t k;
			const json_t *v;

			if (!json_is_array(vals))
				return bad(r->err, "'sweep.parameters[%zu].values' is not an array", i);
			a->type = AX_CAT;
			json_array_foreach(vals, k, v) {
				if (!json_is_string(v))
					return bad(r->err, "'sweep.parameters[%zu].values[%zu]' is not a string",
						   i, k);
				axis_add_cat(a, json_string_value(v));
			}
		} else if (kind && (!strcmp(kind, "value") || !strcmp(kind, "values") ||
				    !strcmp(kind, "categorical"))) {
			const json_t *v = json_object_get(p, "value");

			a->type = AX_CAT;
			if (json_is_string(v))
				axis_add_cat(a, json_string_value(v));
		} else if (mn || mx) {
			if (!json_is_number(mn) || !isfinite(json_number_value(mn)))
				return bad(r->err, "'sweep.parameters[%zu].min' is not a number", i);
			if (!json_is_number(mx) || !isfinite(json_number_value(mx)))
				return bad(r->err, "'sweep.parameters[%zu].max' is not a number", i);
			a->lo = json_number_value(mn);
			a->hi = json_number_value(mx);
			if (a->lo > a->hi)
				return bad(r->err, "'sweep.parameters[%zu]': min %g > max %g", i, a->lo, a->hi);
			a->has_range = 1;
			if (kind && starts_with(kind, "log_uniform") && a->lo > 0)
				a->type = AX_LOG;
		}
	}
	return 0;
}

static int load_metrics(struct report *r, struct trial *t, size_t ti, const json_t *ms,
			int *n_with, int *n_epoch, int *n_step)
{
	size_t k;
	const json_t *m;

	if (!ms || json_is_null(ms))
		return 0;
	if (!json_is_array(ms))
		return bad(r->err, "'trials[%zu].metrics' is not an array", ti);
	json_array_foreach(ms, k, m) {
		const json_t *v;

		if (!json_is_object(m))
			return bad(r->err, "'trials[%zu].metrics[%zu]' is not an object", ti, k);
		v = json_object_get(m, r->metric);
		if (!json_is_number(v) || !isfinite(json_number_value(v)))
			continue;
		(*n_with)++;
		*n_epoch += json_is_number(json_object_get(m, "epoch"));
		*n_step += json_is_number(json_object_get(m, "step"));
	}
	return 0;
}

static int load_trials(struct report *r, const json_t *trials)
{
	size_t i;
	const json_t *tj;
	int n_with = 0, n_epoch = 0, n_step = 0;

	if (!json_is_array(trials))
		return bad(r->err, "'trials' is missing or not an array");
	r->tr = xcalloc(json_array_size(trials) + 1, sizeof(*r->tr));
	json_array_foreach(trials, i, tj) {
		struct trial *t = &r->tr[r->ntr++];
		const json_t *id, *st, *params, *res;
		int wrong = 0;

		if (!json_is_object(tj))
			return bad(r->err, "'trials[%zu]' is not an object", i);
		id = json_object_get(tj, "trial");
		if (!json_is_integer(id))
			return bad(r->err, "'trials[%zu].trial' is missing or not an integer", i);
		t->id = json_integer_value(id);
		for (size_t j = 0; j + 1 < r->ntr; j++)
			if (r->tr[j].id == t->id)
				return bad(r->err, "'trials[%zu].trial': %lld appears twice", i, t->id);
		st = json_object_get(tj, "state");
		if (!json_is_string(st))
			return bad(r->err, "'trials[%zu].state' is missing or not a string", i);
		t->state = json_string_value(st);
		t->job = opt_str(tj, "job_id", &wrong);
		if (wrong)
			return bad(r->err, "'trials[%zu].job_id' is not a string or null", i);
		t->created = opt_str(tj, "created_at", &wrong);
		if (wrong)
			return bad(r->err, "'trials[%zu].created_at' is not a string or null", i);
		t->ended = opt_str(tj, "ended_at", &wrong);
		if (wrong)
			return bad(r->err, "'trials[%zu].ended_at' is not a string or null", i);
		params = json_object_get(tj, "params");
		if (params && !json_is_null(params)) {
			const char *key;
			const json_t *v;

			if (!json_is_object(params))
				return bad(r->err, "'trials[%zu].params' is not an object", i);
			json_object_foreach((json_t *)params, key, v) {
				if (!json_is_string(v) && !json_is_number(v))
					return bad(r->err, "'trials[%zu].params.%s' is not a string", i, key);
			}
			t->params = params;
		}
		if (opt_value(json_object_get(tj, "value"), &t->value) < 0)
			return bad(r->err, "'trials[%zu].value' is not a number or null", i);
		res = json_object_get(tj, "resource");
		t->resource = -1;
		if (json_is_number(res))
			t->resource = (long long)json_number_value(res);
		else if (res && !json_is_null(res))
			return bad(r->err, "'trials[%zu].resource' is not a number or null", i);
		if (load_metrics(r, t, i, json_object_get(tj, "metrics"), &n_with, &n_epoch, &n_step))
			return -1;
	}
	/* the progress axis: what most reports carry */
	r->xname = n_epoch * 2 > n_with ? "epoch" : n_step * 2 > n_with ? "step" : "report";
	if (!n_with)
		r->xname = "epoch";
	return 0;
}

/* Points of every trial on the chosen progress axis; decides the y scale. */
static void collect_points(struct report *r, const json_t *trials)
{
	double lo = INFINITY, hi = -INFINITY;

	for (size_t i = 0; i < r->ntr; i++) {
		struct trial *t = &r->tr[i];
		const json_t *ms = json_object_get(json_array_get(trials, i), "metrics");
		size_t k;
		const json_t *m;

		if (!json_is_array(ms))
			continue;
		json_array_foreach(ms, k, m) {
			const json_t *v = json_object_get(m, r->metric), *x;
			struct pt p;

			if (!json_is_number(v) || !isfinite(json_number_value(v)))
				continue;
			p.y = json_number_value(v);
			if (!r->xname || !strcmp(r->xname, "report")) {
				p.x = (double)(k + 1);
			} else {
				x = json_object_get(m, r->xname);
				if (!json_is_number(x) || !isfinite(json_number_value(x)))
					continue;
				p.x = json_number_value(x);
			}
			ALLOC_GROW(t->pts, t->npts + 1, t->apts);
			t->pts[t->npts++] = p;
			lo = fmin(lo, p.y);
			hi = fmax(hi, p.y);
		}
	}
	r->ylog = lo > 0 && isfinite(hi) && hi / lo > 100;
}

static int better(const struct report *r, double a, double b)
{
	return r->maximize ? a > b : a < b;
}

static const struct report *rank_ctx;
static int cmp_value(const void *a, const void *b)
{
	const struct trial *x = *(const struct trial *const *)a, *y = *(const struct trial *const *)b;

	if (x->value != y->value)
		return better(rank_ctx, x->value, y->value) ? 1 : -1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * Shade of each trial with a value, by rank: 1 the best .. 0 the worst, equal
 * values equal shades.  Ranks rather than values because one diverged trial
 * would otherwise squeeze every good trial into the same dark blue; the
 * legend labels the best, median and worst values.
 */
static void shade_trials(struct report *r)
{
	const struct trial **v = xcalloc(r->ntr + 1, sizeof(*v));
	size_t n = 0;

	for (size_t i = 0; i < r->ntr; i++) {
		r->tr[i].shade = -1;
		if (isfinite(r->tr[i].value))
			v[n++] = &r->tr[i];
	}
	rank_ctx = r;
	qsort(v, n, sizeof(*v), cmp_value);     /* worst first */
	rank_ctx = NULL;
	for (size_t i = n, top = n - 1; i-- > 0;) {     /* ties: their group's best shade */
		if (i + 1 < n && v[i]->value != v[i + 1]->value)
			top = i;
		((struct trial *)v[i])->shade = n > 1 ? (double)top / (n - 1) : 1;
	}
	free(v);
}

/* The value of the trial at shade t (the first with shade >= t), NAN if none. */
static double value_at_shade(const struct report *r, double t)
{
	double best = NAN, bs = INFINITY;

	for (size_t i = 0; i < r->ntr; i++) {
		double s = r->tr[i].shade;

		if (s >= t - 1e-12 && s < bs) {
			bs = s;
			best = r->tr[i].value;
		}
	}
	return best;
}

static int load(struct report *r, const json_t *ex)
{
	const json_t *proto, *sw, *metric, *name, *goal, *best;
	int wrong = 0;

	if (!json_is_object(ex))
		return bad(r->err, "not a JSON object");
	proto = json_object_get(ex, "protocol");
	if (!json_is_integer(proto))
		return bad(r->err, "'protocol' is missing or not an integer");
	/* the export's format is the same since protocol 1 (protocol 2 changed only
	 * how dtsched starts tasks) */
	if (json_integer_value(proto) < 1 || json_integer_value(proto) > DT_PROTOCOL_VERSION)
		return bad(r->err, "'protocol' is %lld; this dtctl reads protocol 1 to %d",
			   (long long)json_integer_value(proto), DT_PROTOCOL_VERSION);
	sw = json_object_get(ex, "sweep");
	if (!json_is_object(sw))
		return bad(r->err, "'sweep' is missing or not an object");
	r->sweep = sw;
	if (!json_is_string(json_object_get(sw, "id")))
		return bad(r->err, "'sweep.id' is missing or not a string");
	opt_str(sw, "name", &wrong);
	if (wrong)
		return bad(r->err, "'sweep.name' is not a string or null");
	metric = json_object_get(sw, "metric");
	if (!json_is_object(metric))
		return bad(r->err, "'sweep.metric' is missing or not an object");
	name = json_object_get(metric, "name");
	if (json_is_null(name)) {
		/* a grid or random sweep without metric: (W&B allows it) */
		strbuf_addstr(r->err, "the sweep has no metric (its file gives no 'metric:'): "
			      "nothing to plot; 'dtctl sweep status' lists its trials");
		return -1;
	}
	if (!json_is_string(name) || !*json_string_value(name))
		return bad(r->err, "'sweep.metric.name' is missing or not a string");
	r->metric = json_string_value(name);
	goal = json_object_get(metric, "goal");
	if (!json_is_string(goal) || (strcmp(json_string_value(goal), "minimize") &&
				      strcmp(json_string_value(goal), "maximize")))
		return bad(r->err, "'sweep.metric.goal' must be \"minimize\" or \"maximize\"");
	r->maximize = !strcmp(json_string_value(goal), "maximize");
	if (!json_is_string(json_object_get(sw, "state")))
		return bad(r->err, "'sweep.state' is missing or not a string");
	opt_str(sw, "reason", &wrong);
	if (wrong)
		return bad(r->err, "'sweep.reason' is not a string or null");
	opt_str(sw, "method", &wrong);
	if (wrong)
		return bad(r->err, "'sweep.method' is not a string");
	opt_str(sw, "created_at", &wrong);
	if (wrong)
		return bad(r->err, "'sweep.created_at' is not a string");
	opt_str(sw, "ended_at", &wrong);
	if (wrong)
		return bad(r->err, "'sweep.ended_at' is not a string or null");
	if (load_parameters(r, json_object_get(sw, "parameters")) < 0)
		return -1;
	if (load_trials(r, json_object_get(ex, "trials")) < 0)
		return -1;
	best = json_object_get(ex, "best");
	r->best_id = -1;
	r->best_value = NAN;
	if (best && !json_is_null(best)) {
		if (!json_is_object(best))
			return bad(r->err, "'best' is not an object or null");
		if (!json_is_integer(json_object_get(best, "trial")))
			return bad(r->err, "'best.trial' is missing or not an integer");
		if (opt_value(json_object_get(best, "value"), &r->best_value) < 0)
			return bad(r->err, "'best.value' is not a number or null");
		r->best_id = json_integer_value(json_object_get(best, "trial"));
	}
	collect_points(r, json_object_get(ex, "trials"));
	shade_trials(r);
	return 0;
}

static void report_release(struct report *r)
{
	for (size_t i = 0; i < r->ntr; i++)
		free(r->tr[i].pts);
	free(r->tr);
	for (size_t i = 0; i < r->nax; i++)
		free(r->ax[i].cats);
	free(r->ax);
}

/* ---------------------------------------------------------- scales, colour */

struct scale {
	double d0, d1;            /* domain (log10 of it when log) */
	double r0, r1;            /* range, px */
	int log;
};

static double scale_map(const struct scale *s, double v)
{
	double t;

	if (s->log)
		v = v > 0 ? log10(v) : s->d0;
	t = s->d1 > s->d0 ? (v - s->d0) / (s->d1 - s->d0) : 0.5;
	return s->r0 + t * (s->r1 - s->r0);
}

/* 1, 2 or 5 times a power of ten, about span/target. */
static double nice_step(double span, int target)
{
	double raw = span / target, mag, f;

	if (!(raw > 0))
		return 1;
	mag = pow(10, floor(log10(raw)));
	f = raw / mag;
	return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

/* Widen [*lo, *hi] to whole steps (never empty); returns the step. */
static double nice_domain(double *lo, double *hi, int target)
{
	double step;

	if (!(*hi > *lo)) {
		double d = *lo ? fabs(*lo) * 0.1 : 1;

		*lo -= d;
		*hi += d;
	}
	step = nice_step(*hi - *lo, target);
	*lo = floor(*lo / step + 1e-9) * step;
	*hi = ceil(*hi / step - 1e-9) * step;
	return step;
}

/*
 * The sequential palette: light yellow-green (worst) to deep blue (best), after
 * ColorBrewer's YlGnBu without its palest steps, which vanish on white.
 */
static const unsigned char palette[][3] = {
	{ 199, 233, 180 }, { 127, 205, 187 }, { 65, 182, 196 },
	{ 29, 145, 192 }, { 34, 94, 168 }, { 12, 44, 132 },
};
#define GREY "#a9afb7"

static void add_color(struct strbuf *sb, double t)
{
	size_t n = ARRAY_SIZE(palette) - 1, i;
	double f;
	int c[3];

	if (t < 0) {
		strbuf_addstr(sb, GREY);
		return;
	}
	t = fmin(1, t) * n;
	i = (size_t)floor(t);
	if (i >= n)
		i = n - 1;
	f = t - i;
	for (int k = 0; k < 3; k++)
		c[k] = (int)lround(palette[i][k] + f * (palette[i + 1][k] - palette[i][k]));
	strbuf_addf(sb, "#%02x%02x%02x", c[0], c[1], c[2]);
}

/* Drawing order: no value first, then worst to best, the best trial last. */
static const struct report *order_ctx;
static int cmp_draw(const void *a, const void *b)
{
	const struct trial *x = *(const struct trial *const *)a, *y = *(const struct trial *const *)b;
	int xb = x->id == order_ctx->best_id, yb = y->id == order_ctx->best_id;

	if (xb != yb)
		return xb - yb;
	if (x->shade != y->shade)
		return x->shade < y->shade ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Ranking: by value for the goal, then trial number; no value last. */
static int cmp_rank(const void *a, const void *b)
{
	const struct trial *x = *(const struct trial *const *)a, *y = *(const struct trial *const *)b;
	int xv = isfinite(x->value), yv = isfinite(y->value);

	if (xv != yv)
		return yv - xv;
	if (xv && x->value != y->value)
		return better(order_ctx, x->value, y->value) ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static const struct trial **sorted(const struct report *r, int (*cmp)(const void *, const void *))
{
	const struct trial **v = xcalloc(r->ntr + 1, sizeof(*v));

	for (size_t i = 0; i < r->ntr; i++)
		v[i] = &r->tr[i];
	order_ctx = r;
	qsort(v, r->ntr, sizeof(*v), cmp);
	order_ctx = NULL;
	return v;
}

static const char *state_class(const char *s)
{
	return known_state(s, trial_states, ARRAY_SIZE(trial_states)) ||
		known_state(s, sweep_states, ARRAY_SIZE(sweep_states)) ? s : "OTHER";
}

/* One trial's line: class, data-t, colour, width, dashes, then points. */
static void add_trial_line_open(struct strbuf *sb, const struct report *r, const struct trial *t)
{
	int best = t->id == r->best_id;

	strbuf_addf(sb, "<polyline class=\"tr%s\" data-t=\"%lld\" stroke=\"", best ? " best" : "", t->id);
	add_color(sb, t->shade);
	strbuf_addf(sb, "\" stroke-width=\"%s\"", best ? "3.2" : t->shade < 0 ? "1.2" : "1.6");
	if (!strcmp(t->state, "PRUNED"))
		strbuf_addstr(sb, " stroke-dasharray=\"5 3\"");
	strbuf_addstr(sb, " points=\"");
}

static void add_trial_line_close(struct strbuf *sb, const struct report *r, const struct trial *t)
{
	strbuf_addf(sb, "\"><title>trial %lld \xc2\xb7 ", t->id);
	add_esc(sb, t->state);
	strbuf_addstr(sb, " \xc2\xb7 ");
	add_esc(sb, r->metric);
	strbuf_addch(sb, ' ');
	add_value(sb, t->value, 6);
	strbuf_addstr(sb, "</title></polyline>\n");
}

/* ---------------------------------------------------------------- header */

static const char style[] =
	"*{box-sizing:border-box}"
	"body{margin:0;background:#f3f5f8;color:#1f2933;font:14px/1.45 system-ui,-apple-system,"
	"'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif}"
	"main{max-width:1220px;margin:0 auto;padding:22px 24px 40px}"
	"header .kicker{font-size:12px;letter-spacing:.08em;text-transform:uppercase;color:#6b7785}"
	"h1{margin:2px 0 6px;font-size:26px;font-weight:650}"
	"h1 .id{font-family:ui-monospace,Menlo,Consolas,monospace;font-weight:500;color:#52606d;"
	"font-size:18px;margin-left:10px}"
	"h2{font-size:17px;margin:0 0 2px;font-weight:650}"
	".meta{color:#52606d;margin-bottom:14px}.meta b{color:#1f2933;font-weight:600}"
	".reason{color:#8a4b08}"
	".cards{display:grid;grid-template-columns:1.1fr 1.6fr 1.3fr;gap:14px}"
	".card,section{background:#fff;border:1px solid #e1e6ec;border-radius:10px}"
	".card{padding:12px 16px}"
	".card .k{font-size:12px;color:#6b7785;text-transform:uppercase;letter-spacing:.05em}"
	".card .v{font-size:24px;font-weight:650;font-variant-numeric:tabular-nums}"
	".card .v.sm{font-size:15px;font-weight:500;padding-top:6px}"
	".card .s{color:#52606d;font-size:13px}"
	"section{margin-top:18px;padding:16px 18px}"
	".cap{color:#6b7785;font-size:13px;margin-bottom:8px}"
	"svg{display:block;max-width:100%;height:auto;font:12px system-ui,-apple-system,"
	"'Segoe UI',Roboto,Arial,sans-serif}"
	".bg{fill:#fafbfd;stroke:#d5dbe3}.grid{stroke:#e6eaf0}.grid.minor{stroke:#f0f2f6}"
	".axis{stroke:#7b8794}.tick{fill:#52606d}.alab{fill:#323f4b;font-weight:600}"
	".lab{fill:#323f4b;paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}"
	".empty{fill:#9aa5b1;font-size:15px}"
	".tr{fill:none;stroke-linejoin:round;stroke-linecap:round}"
	".hov .tr{opacity:.13}.hov .tr.hl{opacity:1;stroke-width:3.6px}"
	".chip{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;"
	"font-weight:600;margin:2px 4px 2px 0;color:#fff;white-space:nowrap}"
	".st-PENDING{background:#8795a1}.st-RUNNING{background:#1c6fd1}"
	".st-COMPLETED{background:#2f8a46}.st-PRUNED{background:#d9730d}"
	".st-FAILED{background:#c9302c}.st-CANCELLED{background:#7a5c4f}"
	".st-PAUSED{background:#c08a00}.st-STOPPED{background:#616e7c}.st-OTHER{background:#9aa5b1}"
	".tw{overflow-x:auto}"
	"table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}"
	"th{text-align:left;font-size:12px;color:#6b7785;font-weight:600;border-bottom:1px solid #d5dbe3;"
	"padding:6px 10px;white-space:nowrap}"
	"td{padding:5px 10px;border-bottom:1px solid #eef1f5;white-space:nowrap}"
	"td.n,th.n{text-align:right}td.m{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}"
	"table.c td{padding:3px 10px;font-size:12.5px}"
	"tr.best td{background:#eef4ff;font-weight:600}"
	".sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;"
	"vertical-align:-1px}"
	".hov tr.hl td{background:#fff4c2}"
	"footer{color:#9aa5b1;font-size:12px;margin-top:16px;text-align:center}";

/* Highlight one trial everywhere (lines and table rows) on hover. */
static const char script[] =
	"(function(){var cur=null;function set(t){if(t===cur)return;cur=t;"
	"document.querySelectorAll('.hl').forEach(function(e){e.classList.remove('hl')});"
	"document.body.classList.toggle('hov',t!==null);if(t!==null)"
	"document.querySelectorAll('[data-t=\"'+t+'\"]').forEach(function(e){e.classList.add('hl')})}"
	"document.addEventListener('mouseover',function(e){var el=e.target.closest&&"
	"e.target.closest('[data-t]');set(el?el.getAttribute('data-t'):null)})})();";

static void add_chip(struct strbuf *sb, const char *state, const char *text)
{
	strbuf_addf(sb, "<span class=\"chip st-%s\">", state_class(state));
	add_esc(sb, text);
	strbuf_addstr(sb, "</span>");
}

static void render_header(struct report *r)
{
	struct strbuf *o = r->out;
	const json_t *sw = r->sweep;
	const char *id = json_string_value(json_object_get(sw, "id"));
	const char *name = json_string_value(json_object_get(sw, "name"));
	const char *method = json_string_value(json_object_get(sw, "method"));
	const char *state = json_string_value(json_object_get(sw, "state"));
	const char *reason = json_string_value(json_object_get(sw, "reason"));
	const char *created = json_string_value(json_object_get(sw, "created_at"));
	const char *ended = json_string_value(json_object_get(sw, "ended_at"));
	const json_t *mt = json_object_get(sw, "max_trials"), *par = json_object_get(sw, "parallel");
	const struct trial *bt = NULL;
	size_t other = 0;

	for (size_t i = 0; i < r->ntr; i++)
		if (r->tr[i].id == r->best_id)
			bt = &r->tr[i];
	strbuf_addstr(o, "<header>\n<div class=\"kicker\">dtctl sweep report</div>\n<h1>");
	add_esc(o, name && *name ? name : id);
	strbuf_addstr(o, "<span class=\"id\">");
	add_esc(o, id);
	strbuf_addstr(o, "</span></h1>\n<div class=\"meta\">");
	add_chip(o, state, state);
	if (reason) {
		strbuf_addstr(o, "<span class=\"reason\">");
		add_esc(o, reason);
		strbuf_addstr(o, "</span> \xc2\xb7 ");
	}
	strbuf_addstr(o, "method <b>");
	add_esc(o, method ? method : "?");
	strbuf_addstr(o, "</b> \xc2\xb7 metric <b>");
	add_esc(o, r->metric);
	strbuf_addf(o, "</b> (%s) \xc2\xb7 progress by <b>%s</b>", r->maximize ? "maximize" : "minimize",
		    r->xname);
	if (json_is_integer(mt))
		strbuf_addf(o, " \xc2\xb7 max_trials <b>%lld</b>", (long long)json_integer_value(mt));
	if (json_is_integer(par))
		strbuf_addf(o, " \xc2\xb7 parallel <b>%lld</b>", (long long)json_integer_value(par));
	strbuf_addstr(o, "</div>\n<div class=\"cards\">\n<div class=\"card\"><div class=\"k\">best ");
	add_esc(o, r->metric);
	strbuf_addstr(o, "</div><div class=\"v\">");
	if (r->best_id >= 0) {
		add_value(o, isfinite(r->best_value) ? r->best_value : bt ? bt->value : NAN, 6);
		strbuf_addf(o, "</div><div class=\"s\"><span class=\"sw\" style=\"background:");
		add_color(o, bt ? bt->shade : 1);
		strbuf_addf(o, "\"></span>trial #%lld", r->best_id);
		if (bt && bt->job) {
			strbuf_addstr(o, " \xc2\xb7 ");
			add_esc(o, bt->job);
		}
	} else {
		strbuf_addstr(o, "\xe2\x80\x94</div><div class=\"s\">no finished trial yet");
	}
	strbuf_addf(o, "</div></div>\n<div class=\"card\"><div class=\"k\">trials</div>"
		    "<div class=\"v\">%zu", r->ntr);
	if (json_is_integer(mt))
		strbuf_addf(o, " <span style=\"color:#9aa5b1;font-weight:500\">/ %lld</span>",
			    (long long)json_integer_value(mt));
	strbuf_addstr(o, "</div><div class=\"s\">");
	for (size_t k = 0; k < ARRAY_SIZE(trial_states); k++) {
		size_t n = 0;
		struct strbuf txt = STRBUF_INIT;

		for (size_t i = 0; i < r->ntr; i++)
			n += !strcmp(r->tr[i].state, trial_states[k]);
		if (!n)
			continue;
		strbuf_addf(&txt, "%zu %s", n, trial_states[k]);
		for (char *p = txt.buf; *p; p++)
			*p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
		add_chip(o, trial_states[k], txt.buf);
		strbuf_release(&txt);
	}
	for (size_t i = 0; i < r->ntr; i++)
		other += !known_state(r->tr[i].state, trial_states, ARRAY_SIZE(trial_states));
	if (other) {
		struct strbuf txt = STRBUF_INIT;

		strbuf_addf(&txt, "%zu other", other);
		add_chip(o, "OTHER", txt.buf);
		strbuf_release(&txt);
	}
	if (!r->ntr)
		strbuf_addstr(o, "none yet");
	strbuf_addstr(o, "</div></div>\n<div class=\"card\"><div class=\"k\">time</div>"
		    "<div class=\"v sm\">");
	add_ts(o, created);
	strbuf_addstr(o, "</div><div class=\"s\">");
	if (ended) {
		strbuf_addstr(o, "ended ");
		add_ts(o, ended);
		strbuf_addstr(o, " \xc2\xb7 ");
		add_duration(o, created, ended);
	} else {
		strbuf_addstr(o, "not ended");
	}
	strbuf_addstr(o, "</div></div>\n</div>\n</header>\n");
}

/* ---------------------------------------------------------------- curves */

static void add_svg_open(struct strbuf *o, const char *id, int w, int h, const char *label)
{
	strbuf_addf(o, "<svg id=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		    "viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"", id, w, h, w, h);
	add_esc(o, label);
	strbuf_addstr(o, "\">\n");
}

static void add_text(struct strbuf *o, const char *cls, double x, double y, const char *anchor,
		     const char *text)
{
	strbuf_addf(o, "<text class=\"%s\" x=\"", cls);
	add_coord(o, x);
	strbuf_addstr(o, "\" y=\"");
	add_coord(o, y);
	strbuf_addf(o, "\" text-anchor=\"%s\">", anchor);
	add_esc(o, text);
	strbuf_addstr(o, "</text>\n");
}

static void add_hline(struct strbuf *o, const char *cls, double x0, double x1, double y)
{
	strbuf_addf(o, "<line class=\"%s\" x1=\"", cls);
	add_coord(o, x0);
	strbuf_addstr(o, "\" x2=\"");
	add_coord(o, x1);
	strbuf_addstr(o, "\" y1=\"");
	add_coord(o, y);
	strbuf_addstr(o, "\" y2=\"");
	add_coord(o, y);
	strbuf_addstr(o, "\"/>\n");
}

static void add_vline(struct strbuf *o, const char *cls, double x, double y0, double y1)
{
	strbuf_addf(o, "<line class=\"%s\" x1=\"", cls);
	add_coord(o, x);
	strbuf_addstr(o, "\" x2=\"");
	add_coord(o, x);
	strbuf_addstr(o, "\" y1=\"");
	add_coord(o, y0);
	strbuf_addstr(o, "\" y2=\"");
	add_coord(o, y1);
	strbuf_addstr(o, "\"/>\n");
}

/* Y ticks, gridlines and labels for the curves chart. */
static void curves_yaxis(struct report *r, struct scale *ys, double lo, double hi, double step)
{
	struct strbuf *o = r->out, lab = STRBUF_INIT;

	if (ys->log) {
		int k0 = (int)floor(ys->d0), k1 = (int)ceil(ys->d1);

		for (int k = k0; k <= k1; k++) {
			for (int m = 1; m <= 9; m++) {
				double v = m * pow(10, k), y;

				if (log10(v) < ys->d0 - 1e-9 || log10(v) > ys->d1 + 1e-9)
					continue;
				y = scale_map(ys, v);
				add_hline(o, m == 1 ? "grid" : "grid minor", C_L, C_R, y);
				if (m != 1)
					continue;
				add_hline(o, "axis", C_L - 5, C_L, y);
				strbuf_reset(&lab);
				add_pow10_label(&lab, k);
				add_text(o, "tick", C_L - 8, y + 4, "end", lab.buf);
			}
		}
	} else {
		int n = (int)lround((hi - lo) / step);

		for (int i = 0; i <= n; i++) {
			double v = lo + i * step, y = scale_map(ys, v);

			add_hline(o, "grid", C_L, C_R, y);
			add_hline(o, "axis", C_L - 5, C_L, y);
			strbuf_reset(&lab);
			add_tick_label(&lab, v, step);
			add_text(o, "tick", C_L - 8, y + 4, "end", lab.buf);
		}
	}
	strbuf_release(&lab);
}

static void curves_legend(struct report *r, const struct trial *bt)
{
	struct strbuf *o = r->out, s = STRBUF_INIT;
	double x = C_R + 30, y = C_T + 8;
	int have_values = isfinite(value_at_shade(r, 0)), pruned = 0, novalue = 0;

	for (size_t i = 0; i < r->ntr; i++) {
		pruned += r->tr[i].npts && !strcmp(r->tr[i].state, "PRUNED");
		novalue += r->tr[i].npts && r->tr[i].shade < 0;
	}
	add_text(o, "alab", x, y + 4, "start", "final value, by rank");
	if (have_values) {
		/* the colour bar runs from the best (top) down to the worst */
		strbuf_addstr(o, "<defs><linearGradient id=\"cbar\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"1\">");
		size_t npal = ARRAY_SIZE(palette);

		for (size_t i = 0; i < npal; i++) {
			double t = (double)i / (double)(npal - 1);

			strbuf_addf(o, "<stop offset=\"%.2f\" stop-color=\"", t);
			add_color(o, 1 - t);
			strbuf_addstr(o, "\"/>");
		}
		strbuf_addstr(o, "</linearGradient></defs>\n");
		strbuf_addf(o, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"150\" rx=\"2\" "
			    "fill=\"url(#cbar)\"/>\n", (int)x, (int)y + 14);
		add_value(&s, value_at_shade(r, 1), 4);
		strbuf_addstr(&s, " best");
		add_text(o, "tick", x + 22, y + 24, "start", s.buf);
		strbuf_reset(&s);
		add_value(&s, value_at_shade(r, 0.5), 4);
		strbuf_addstr(&s, " median");
		add_text(o, "tick", x + 22, y + 94, "start", s.buf);
		strbuf_reset(&s);
		add_value(&s, value_at_shade(r, 0), 4);
		strbuf_addstr(&s, " worst");
		add_text(o, "tick", x + 22, y + 164, "start", s.buf);
		y += 190;
	} else {
		add_text(o, "tick", x, y + 24, "start", "no final values yet");
		y += 44;
	}
	if (bt && bt->npts) {
		strbuf_reset(&s);
		strbuf_addstr(o, "<line x1=\"");
		add_coord(o, x);
		strbuf_addstr(o, "\" x2=\"");
		add_coord(o, x + 26);
		strbuf_addf(o, "\" y1=\"%d\" y2=\"%d\" stroke-width=\"3.2\" stroke=\"", (int)y, (int)y);
		add_color(o, bt->shade);
		strbuf_addstr(o, "\"/>\n");
		strbuf_addf(&s, "best: trial %lld", bt->id);
		add_text(o, "tick", x + 34, y + 4, "start", s.buf);
		y += 22;
	}
	if (pruned) {
		strbuf_addf(o, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#52606d\" "
			    "stroke-width=\"1.6\" stroke-dasharray=\"5 3\"/>\n",
			    (int)x, (int)x + 26, (int)y, (int)y);
		add_text(o, "tick", x + 34, y + 4, "start", "pruned");
		y += 22;
	}
	if (novalue) {
		strbuf_addf(o, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"" GREY "\" "
			    "stroke-width=\"1.6\"/>\n", (int)x, (int)x + 26, (int)y, (int)y);
		add_text(o, "tick", x + 34, y + 4, "start", "no final value");
	}
	strbuf_release(&s);
}

static void render_curves(struct report *r)
{
	struct strbuf *o = r->out, s = STRBUF_INIT;
	double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
	double xstep, ystep = 0;
	size_t drawn = 0, empty = 0;
	struct scale xs, ys;
	const struct trial **ord, *bt = NULL;

	for (size_t i = 0; i < r->ntr; i++) {
		const struct trial *t = &r->tr[i];

		for (size_t k = 0; k < t->npts; k++) {
			xlo = fmin(xlo, t->pts[k].x);
			xhi = fmax(xhi, t->pts[k].x);
			ylo = fmin(ylo, t->pts[k].y);
			yhi = fmax(yhi, t->pts[k].y);
		}
		drawn += t->npts > 0;
		empty += !t->npts;
		if (t->id == r->best_id)
			bt = t;
	}
	strbuf_addstr(o, "<section id=\"curves-section\">\n<h2>");
	add_esc(o, r->metric);
	strbuf_addf(o, " by %s</h2>\n<div class=\"cap\">one line per trial, coloured by its final value's "
		    "rank (darker is better)%s; %zu trial%s drawn", r->xname,
		    r->ylog ? "; log scale" : "", drawn, drawn == 1 ? "" : "s");
	if (empty)
		strbuf_addf(o, ", %zu without reports yet", empty);
	strbuf_addstr(o, "</div>\n");
	strbuf_addf(&s, "%s by %s, one line per trial", r->metric, r->xname);
	add_svg_open(o, "curves", CW, CH, s.buf);
	strbuf_addf(o, "<rect class=\"bg\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>\n",
		    C_L, C_T, C_R - C_L, C_B - C_T);
	if (!drawn) {
		xlo = 0;
		xhi = 10;
		ylo = 0;
		yhi = 1;
	}
	if (xlo > 0)
		xlo = 0;
	xstep = nice_domain(&xlo, &xhi, 8);
	xs = (struct scale){ xlo, xhi, C_L, C_R, 0 };
	if (r->ylog) {
		double a = log10(ylo), b = log10(yhi), pad = (b - a) * 0.04;

		ys = (struct scale){ a - pad, b + pad, C_B, C_T, 1 };
	} else {
		ystep = nice_domain(&ylo, &yhi, 6);
		ys = (struct scale){ ylo, yhi, C_B, C_T, 0 };
	}
	curves_yaxis(r, &ys, ylo, yhi, ystep);
	for (int i = 0, n = (int)lround((xhi - xlo) / xstep); i <= n; i++) {
		double v = xlo + i * xstep, x = scale_map(&xs, v);

		if (i)
			add_vline(o, "grid", x, C_T, C_B);
		add_vline(o, "axis", x, C_B, C_B + 5);
		strbuf_reset(&s);
		add_tick_label(&s, v, xstep);
		add_text(o, "tick", x, C_B + 19, "middle", s.buf);
	}
	add_hline(o, "axis", C_L, C_R, C_B);
	add_vline(o, "axis", C_L, C_T, C_B);
	add_text(o, "alab", (C_L + C_R) / 2.0, CH - 8, "middle", r->xname);
	strbuf_reset(&s);
	strbuf_addstr(&s, r->metric);
	if (r->ylog)
		strbuf_addstr(&s, " (log)");
	strbuf_addf(o, "<text class=\"alab\" transform=\"translate(18 %d) rotate(-90)\" "
		    "text-anchor=\"middle\">", (C_T + C_B) / 2);
	add_esc(o, s.buf);
	strbuf_addstr(o, "</text>\n");
	if (!drawn)
		add_text(o, "empty", (C_L + C_R) / 2.0, (C_T + C_B) / 2.0, "middle",
			 "no metric reports yet");

	ord = sorted(r, cmp_draw);
	strbuf_addstr(o, "<g>\n");
	for (size_t i = 0; i < r->ntr; i++) {
		const struct trial *t = ord[i];

		if (!t->npts)
			continue;
		add_trial_line_open(o, r, t);
		for (size_t k = 0; k < t->npts; k++) {
			if (k)
				strbuf_addch(o, ' ');
			add_coord(o, scale_map(&xs, t->pts[k].x));
			strbuf_addch(o, ',');
			add_coord(o, scale_map(&ys, t->pts[k].y));
		}
		if (t->npts == 1) {   /* a round-capped zero-length segment: a dot */
			strbuf_addch(o, ' ');
			add_coord(o, scale_map(&xs, t->pts[0].x));
			strbuf_addch(o, ',');
			add_coord(o, scale_map(&ys, t->pts[0].y));
		}
		add_trial_line_close(o, r, t);
	}
	strbuf_addstr(o, "</g>\n");
	free(ord);
	if (bt && bt->npts) {
		const struct pt *p = &bt->pts[bt->npts - 1];
		double px = scale_map(&xs, p->x), py = scale_map(&ys, p->y);

		strbuf_addstr(o, "<circle cx=\"");
		add_coord(o, px);
		strbuf_addstr(o, "\" cy=\"");
		add_coord(o, py);
		strbuf_addstr(o, "\" r=\"4.5\" fill=\"#fff\" stroke-width=\"2.5\" stroke=\"");
		add_color(o, bt->shade);
		strbuf_addstr(o, "\"/>\n");
		strbuf_reset(&s);
		strbuf_addf(&s, "#%lld ", bt->id);
		add_value(&s, p->y, 4);
		/* away from the pack: below the end for minimize, above for maximize */
		add_text(o, "lab", px - 6, r->maximize ? (py - 11 < C_T + 14 ? py + 19 : py - 11) :
			 (py + 19 > C_B - 6 ? py - 11 : py + 19), "end", s.buf);
	}
	curves_legend(r, bt);
	strbuf_addstr(o, "</svg>\n</section>\n");
	strbuf_release(&s);
}

/* ------------------------------------------------------ parallel coordinates */

static int finished(const struct trial *t)
{
	return isfinite(t->value) && (!strcmp(t->state, "COMPLETED") || !strcmp(t->state, "PRUNED"));
}

/* Extra axes for params no parameter describes; data ranges and categories. */
static void fit_axes(struct report *r)
{
	for (size_t i = 0; i < r->ntr; i++) {
		const char *key;
		const json_t *v;

		if (!r->tr[i].params)
			continue;
		json_object_foreach((json_t *)r->tr[i].params, key, v) {
			if (!axis_find(r, key)) {
				struct axis *a = axis_add(r, key, NULL);

				/* numeric if every trial's value is */
				for (size_t j = 0; j < r->ntr; j++) {
					char buf[40];
					const json_t *w = json_object_get(r->tr[j].params, key);
					const char *s = w ? param_text(w, buf, sizeof(buf)) : NULL;
					double d;

					if (s && parse_num(s, &d) < 0)
						a->type = AX_CAT;
				}
			}
		}
	}
	for (size_t k = 0; k < r->nax; k++) {
		struct axis *a = &r->ax[k];

		for (size_t i = 0; i < r->ntr; i++) {
			char buf[40];
			const json_t *w = json_object_get(r->tr[i].params, a->name);
			const char *s = w ? param_text(w, buf, sizeof(buf)) : NULL;
			double d;

			if (!s || !finished(&r->tr[i]))
				continue;
			if (a->type == AX_CAT) {
				axis_add_cat(a, json_is_string(w) ? s : json_string_value(w));
				continue;
			}
			if (parse_num(s, &d) < 0 || (a->type == AX_LOG && d <= 0))
				continue;
			if (!a->has_range) {
				a->lo = a->hi = d;
				a->has_range = 1;
			}
			a->lo = fmin(a->lo, d);
			a->hi = fmax(a->hi, d);
		}
	}
}

/* y of trial t on axis a, or NAN when it has no usable value there. */
static double axis_y(const struct axis *a, const struct trial *t)
{
	char buf[40];
	const json_t *w = json_object_get(t->params, a->name);
	const char *s = w ? param_text(w, buf, sizeof(buf)) : NULL;
	double d;

	if (!s)
		return NAN;
	if (a->type == AX_CAT) {
		for (size_t i = 0; i < a->ncats; i++)
			if (!strcmp(a->cats[i], s))
				return a->ncats == 1 ? (P_T + P_B) / 2.0 :
					P_T + (double)i * (P_B - P_T) / (a->ncats - 1);
		return NAN;
	}
	if (parse_num(s, &d) < 0 || !a->has_range || (a->type == AX_LOG && d <= 0))
		return NAN;
	{
		struct scale sc = { a->lo, a->hi, P_B, P_T, a->type == AX_LOG };

		if (sc.log) {
			sc.d0 = log10(a->lo);
			sc.d1 = log10(a->hi);
		}
		return scale_map(&sc, d);
	}
}

static void render_axis(struct report *r, const struct axis *a, double x, int is_metric)
{
	struct strbuf *o = r->out, s = STRBUF_INIT;

	add_vline(o, "axis", x, P_T, P_B);
	add_text(o, "alab", x, P_T - 30, "middle", a->name);
	strbuf_addstr(&s, is_metric ? (r->maximize ? "maximize, best on top" : "minimize, best on top") :
		      a->type == AX_LOG ? "log" : a->type == AX_CAT ? "categorical" : a->kind);
	add_text(o, "tick", x, P_T - 14, "middle", s.buf);
	if (a->type == AX_CAT) {
		size_t every = (a->ncats + CAT_LABELS - 1) / CAT_LABELS;

		for (size_t i = 0; i < a->ncats; i++) {
			double y = a->ncats == 1 ? (P_T + P_B) / 2.0 :
				P_T + (double)i * (P_B - P_T) / (a->ncats - 1);

			add_hline(o, "axis", x - 4, x + 4, y);
			if (every && i % every)
				continue;
			strbuf_addstr(o, "<text class=\"lab\" x=\"");
			add_coord(o, x + 8);
			strbuf_addstr(o, "\" y=\"");
			add_coord(o, y + 4);
			strbuf_addstr(o, "\">");
			add_esc_short(o, a->cats[i], 18);
			strbuf_addstr(o, "<title>");
			add_esc(o, a->cats[i]);
			strbuf_addstr(o, "</title></text>\n");
		}
	} else if (a->has_range) {
		double top = is_metric && !r->maximize ? a->lo : a->hi;
		double bot = is_metric && !r->maximize ? a->hi : a->lo;

		add_hline(o, "axis", x - 4, x + 4, P_T);
		add_hline(o, "axis", x - 4, x + 4, P_B);
		strbuf_reset(&s);
		add_value(&s, top, 4);
		add_text(o, "lab", x + 8, P_T + 4, "start", s.buf);
		strbuf_reset(&s);
		add_value(&s, bot, 4);
		add_text(o, "lab", x + 8, P_B + 4, "start", s.buf);
	}
	strbuf_release(&s);
}

/* The metric axis's scale: best on top. */
static struct scale metric_scale(const struct report *r, const struct axis *m)
{
	struct scale sc = { m->lo, m->hi, P_B, P_T, m->type == AX_LOG };

	if (sc.log) {
		sc.d0 = log10(m->lo);
		sc.d1 = log10(m->hi);
	}
	if (!r->maximize) {
		sc.r0 = P_T;
		sc.r1 = P_B;
	}
	return sc;
}

/* y of t on every parameter axis into ys; 0, or -1 when one is missing. */
static int trial_ys(const struct report *r, const struct trial *t, double *ys)
{
	for (size_t j = 0; j < r->nax; j++) {
		ys[j] = axis_y(&r->ax[j], t);
		if (!isfinite(ys[j]))
			return -1;
	}
	return 0;
}

static void render_parallel(struct report *r)
{
	struct strbuf *o = r->out;
	struct axis m = { 0 };
	size_t nfin = 0, left_out = 0, k = r->nax + 1, drawn = 0;
	const struct trial **ord;
	double *xs = xcalloc(k, sizeof(*xs)), *ys = xcalloc(k, sizeof(*ys));
	struct scale msc;

	fit_axes(r);
	m.name = r->metric;
	m.kind = "";
	m.type = AX_NUM;
	for (size_t i = 0; i < r->ntr; i++) {
		const struct trial *t = &r->tr[i];

		if (!finished(t))
			continue;
		if (!nfin++)
			m.lo = m.hi = t->value;
		m.lo = fmin(m.lo, t->value);
		m.hi = fmax(m.hi, t->value);
		if (trial_ys(r, t, ys) < 0)
			left_out++;
		else
			drawn++;
	}
	m.has_range = nfin > 0;
	if (nfin && m.lo > 0 && m.hi / m.lo > 100)
		m.type = AX_LOG;
	msc = metric_scale(r, &m);
	for (size_t i = 0; i < k; i++)
		xs[i] = k == 1 ? (P_L + P_R) / 2.0 : P_L + (double)i * (P_R - P_L) / (k - 1);

	strbuf_addstr(o, "<section id=\"parallel-section\">\n<h2>Parameters and ");
	add_esc(o, r->metric);
	strbuf_addf(o, "</h2>\n<div class=\"cap\">parallel coordinates: one line per finished trial "
		    "(completed or pruned), coloured by its value's rank; the last axis is the metric; "
		    "%zu line%s", drawn, drawn == 1 ? "" : "s");
	if (left_out)
		strbuf_addf(o, ", %zu left out (a parameter missing or unreadable)", left_out);
	strbuf_addstr(o, "</div>\n");
	add_svg_open(o, "parallel", CW, PH, "parallel coordinates of the parameters and the metric");
	strbuf_addf(o, "<rect class=\"bg\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>\n",
		    P_L - 40, P_T, P_R - P_L + 120, P_B - P_T);
	ord = sorted(r, cmp_draw);
	/* lines first, axes and labels on top of them */
	strbuf_addstr(o, "<g>\n");
	for (size_t i = 0; i < r->ntr; i++) {
		const struct trial *t = ord[i];

		if (!finished(t) || trial_ys(r, t, ys) < 0)
			continue;
		ys[k - 1] = scale_map(&msc, t->value);
		add_trial_line_open(o, r, t);
		for (size_t j = 0; j < k; j++) {
			if (j)
				strbuf_addch(o, ' ');
			add_coord(o, xs[j]);
			strbuf_addch(o, ',');
			add_coord(o, ys[j]);
		}
		add_trial_line_close(o, r, t);
	}
	strbuf_addstr(o, "</g>\n");
	free(ord);
	for (size_t j = 0; j < r->nax; j++)
		render_axis(r, &r->ax[j], xs[j], 0);
	render_axis(r, &m, xs[k - 1], 1);
	if (!drawn)
		add_text(o, "empty", (P_L + P_R) / 2.0, (P_T + P_B) / 2.0 + 5, "middle",
			 "no finished trials yet");
	strbuf_addstr(o, "</svg>\n</section>\n");
	free(xs);
	free(ys);
}

/* ---------------------------------------------------------------- tables */

static void add_param_headers(struct report *r)
{
	for (size_t j = 0; j < r->nax; j++) {
		strbuf_addstr(r->out, "<th>");
		add_esc(r->out, r->ax[j].name);
		strbuf_addstr(r->out, "</th>");
	}
}

static void add_param_cells(struct report *r, const struct trial *t)
{
	for (size_t j = 0; j < r->nax; j++) {
		char buf[40];
		const json_t *w = json_object_get(t->params, r->ax[j].name);
		const char *s = w ? param_text(w, buf, sizeof(buf)) : NULL;

		strbuf_addstr(r->out, "<td class=\"m\">");
		if (s)
			add_esc_short(r->out, s, 40);
		strbuf_addstr(r->out, "</td>");
	}
}

static void add_row_open(struct report *r, const struct trial *t)
{
	strbuf_addf(r->out, "<tr data-t=\"%lld\"%s><td class=\"n\"><span class=\"sw\" style=\"background:",
		    t->id, t->id == r->best_id ? " class=\"best\"" : "");
	add_color(r->out, t->shade);
	strbuf_addf(r->out, "\"></span>%lld</td><td>", t->id);
	add_chip(r->out, t->state, t->state);
	strbuf_addstr(r->out, "</td><td class=\"n\">");
	add_value(r->out, t->value, 6);
	strbuf_addstr(r->out, "</td>");
}

static void add_job_cell(struct report *r, const struct trial *t)
{
	strbuf_addstr(r->out, "<td class=\"m\">");
	add_esc(r->out, t->job ? t->job : "\xe2\x80\x94");
	strbuf_addstr(r->out, "</td>");
}

static void render_tables(struct report *r)
{
	struct strbuf *o = r->out;
	const struct trial **rank = sorted(r, cmp_rank);
	size_t n = 0;

	/* the export's best leads (it is the controller's definition of best) */
	for (size_t i = 1; i < r->ntr; i++) {
		if (rank[i]->id == r->best_id) {
			const struct trial *b = rank[i];

			memmove(rank + 1, rank, i * sizeof(*rank));
			rank[0] = b;
			break;
		}
	}
	strbuf_addstr(o, "<section id=\"best-section\">\n<h2>Best trials</h2>\n<div class=\"cap\">top ");
	strbuf_addf(o, "%d by ", TOP_N);
	add_esc(o, r->metric);
	strbuf_addf(o, " (%s)</div>\n<div class=\"tw\"><table id=\"best\">\n<thead><tr><th>trial</th>"
		    "<th>state</th><th>", r->maximize ? "highest first" : "lowest first");
	add_esc(o, r->metric);
	strbuf_addstr(o, "</th>");
	add_param_headers(r);
	strbuf_addstr(o, "<th>job</th></tr></thead>\n<tbody>\n");
	for (size_t i = 0; i < r->ntr && n < TOP_N; i++) {
		if (!isfinite(rank[i]->value) && rank[i]->id != r->best_id)
			continue;
		add_row_open(r, rank[i]);
		add_param_cells(r, rank[i]);
		add_job_cell(r, rank[i]);
		strbuf_addstr(o, "</tr>\n");
		n++;
	}
	if (!n)
		strbuf_addf(o, "<tr><td colspan=\"%zu\">no trial has a value yet</td></tr>\n", r->nax + 4);
	strbuf_addstr(o, "</tbody></table></div>\n</section>\n");
	free(rank);

	strbuf_addstr(o, "<section id=\"trials-section\">\n<h2>All trials</h2>\n<div class=\"tw\">"
		    "<table id=\"trials\" class=\"c\">\n<thead><tr><th>trial</th><th>state</th><th>");
	add_esc(o, r->metric);
	strbuf_addstr(o, "</th><th>resource</th><th>reports</th><th>started</th><th>ran</th>");
	add_param_headers(r);
	strbuf_addstr(o, "<th>job</th></tr></thead>\n<tbody>\n");
	for (size_t i = 0; i < r->ntr; i++) {
		const struct trial *t = &r->tr[i];

		add_row_open(r, t);
		strbuf_addstr(o, "<td class=\"n\">");
		if (t->resource >= 0)
			strbuf_addf(o, "%lld", t->resource);
		strbuf_addf(o, "</td><td class=\"n\">%zu</td><td>", t->npts);
		add_ts(o, t->created);
		strbuf_addstr(o, "</td><td class=\"n\">");
		if (t->ended)
			add_duration(o, t->created, t->ended);
		strbuf_addstr(o, "</td>");
		add_param_cells(r, t);
		add_job_cell(r, t);
		strbuf_addstr(o, "</tr>\n");
	}
	if (!r->ntr)
		strbuf_addf(o, "<tr><td colspan=\"%zu\">no trials yet</td></tr>\n", r->nax + 8);
	strbuf_addstr(o, "</tbody></table></div>\n</section>\n");
}

/* ---------------------------------------------------------------- entry */

int sweep_report_html(const json_t *export, struct strbuf *out, struct strbuf *err)
{
	struct report r = { 0 };
	const char *id, *name;

	r.out = out;
	r.err = err;
	if (load(&r, export) < 0) {
		report_release(&r);
		return -1;
	}
	id = json_string_value(json_object_get(r.sweep, "id"));
	name = json_string_value(json_object_get(r.sweep, "name"));
	strbuf_addstr(out, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
		      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
		      "<title>sweep ");
	add_esc(out, id);
	if (name && *name) {
		strbuf_addstr(out, " \xc2\xb7 ");
		add_esc(out, name);
	}
	strbuf_addstr(out, "</title>\n<style>");
	strbuf_addstr(out, style);
	strbuf_addstr(out, "</style>\n</head>\n<body>\n<main>\n");
	render_header(&r);
	render_curves(&r);
	render_parallel(&r);
	render_tables(&r);
	strbuf_addf(out, "<footer>dtctl " DT_VERSION " \xc2\xb7 sweep report \xc2\xb7 protocol %d"
		    "</footer>\n</main>\n<script>", DT_PROTOCOL_VERSION);
	strbuf_addstr(out, script);
	strbuf_addstr(out, "</script>\n</body>\n</html>\n");
	report_release(&r);
	return 0;
}

const char *sweep_report_script(void)
{
	return script;
}

int cmd_sweep_report_file(int argc, const char **argv)
{
	const char *out_path = NULL, *path;
	struct option opts[] = {
		OPT_STRING('o', "output", &out_path, "file", "write the page here (default: stdout)"),
		OPT_END(),
	};
	static const char *const usage[] = {
		"dtctl sweep-report-file EXPORT.json [-o PAGE.html]",
		NULL,
	};
	struct strbuf in = STRBUF_INIT, html = STRBUF_INIT, err = STRBUF_INIT;
	json_t *ex;
	int rc = DT_EXIT_FAIL;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);   /* the file: argv[1] */
	if (argc != 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	path = argv[1];
	if (strbuf_read_file(&in, path, 256 << 20) < 0) {
		error_errno("cannot read '%s'", path);
		goto out;
	}
	ex = json_parse(in.buf, in.len, &err);
	if (!ex) {
		error("'%s': %s", path, err.buf);
		goto out;
	}
	if (sweep_report_html(ex, &html, &err) < 0) {
		error("'%s': %s", path, err.buf);
	} else if (out_path) {
		if (write_file_atomic(out_path, html.buf, html.len, 0644) < 0)
			error_errno("cannot write '%s'", out_path);
		else
			rc = 0;
	} else {
		fwrite(html.buf, 1, html.len, stdout);
		rc = 0;
	}
	json_decref(ex);
out:
	strbuf_release(&in);
	strbuf_release(&html);
	strbuf_release(&err);
	return rc;
}
