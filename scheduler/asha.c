/*
 * asha.c - asynchronous successive halving (see asha.h for the rule).
 *
 * Each rung keeps its recorded values as "losses" (the metric, negated when
 * the goal is maximize, NaN mapped to +inf) in a sorted array, so ranking a
 * new value is a binary search.  Trials live in an array sorted by id; each
 * keeps the value it recorded at every rung it reached, for snapshots.
 * For the rung check, each rung k also counts the concordant and discordant
 * pairs of trials holding values at rungs k and k + 1, updated when a trial
 * records at rung k + 1 (compared with every trial already holding both).
 * With promotion on, each trial also has a state (running, paused, done)
 * and the rung it runs to; the rung tables are kept exactly as without it.
 */
#include "scheduler/asha.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

#define ASHA_MAX_RUNGS 62   /* min_iter * eta^k stays below 2^62 */

struct rung {
	double resource;
	double *loss;        /* sorted ascending: best first */
	size_t nr, alloc;
	/* trials holding values here and at the next rung, and their pairs */
	size_t nr_both;
	unsigned long long concordant, discordant;
};

struct asha_trial {
	int id;
	int pruned;
	int state;           /* promotion: enum asha_trial_state */
	int target;          /* promotion: the rung it runs to, and pauses at */
	double *values;      /* values[k]: the raw value recorded at rung k */
	size_t nr_values;    /* rungs reached */
};

struct asha {
	int min_iter, max_iter;
	double eta;          /* above 1; W&B allows a fraction such as 1.5 */
	int explicit_rungs;  /* rungs[] set by asha_set_rungs(), not min_iter * eta^k */
	int min_peers;       /* other values a rung must hold before a trial may pass it */
	int grace;           /* the first eta arrivals at a rung and its best always go on */
	int promotion;       /* pause at each rung and promote, instead of stopping */
	int check_trials;    /* rung check: trials in both rungs needed (0: off) */
	double check_gamma;  /* rung check: agreement below which the rung is widened */
	double check_widen;  /* rung check: keep floor(widen * n / eta) then */
	enum sweep_goal goal;
	struct rung *rungs;
	size_t nr_rungs;     /* rungs known so far (grown on demand when unbounded) */
	int rungs_complete;  /* every rung below max_iter is in rungs[] */
	struct asha_trial *trials;
	size_t nr_trials, alloc_trials;
};

struct asha *asha_new(int min_iter, int eta, int max_iter, enum sweep_goal goal)
{
	struct asha *a;

	if (min_iter < 1 || eta < 2 || max_iter < 0)
		return NULL;
	a = xcalloc(1, sizeof(*a));
	a->min_iter = min_iter;
	a->eta = eta;
	a->max_iter = max_iter;
	a->min_peers = ASHA_DEFAULT_MIN_PEERS;
	a->grace = 1;
	a->goal = goal;
	a->rungs = xcalloc(ASHA_MAX_RUNGS, sizeof(*a->rungs));
	return a;
}

void asha_free(struct asha *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->nr_rungs; i++)
		free(a->rungs[i].loss);
	free(a->rungs);
	for (size_t i = 0; i < a->nr_trials; i++)
		free(a->trials[i].values);
	free(a->trials);
	free(a);
}

int asha_set_eta(struct asha *a, double eta)
{
	if (!(eta > 1) || a->nr_trials)
		return -1;
	a->eta = eta;
	return 0;
}

double asha_get_eta(const struct asha *a)
{
	return a->eta;
}

int asha_set_rungs(struct asha *a, const double *res, size_t n)
{
	if (!n || n > ASHA_MAX_RUNGS || a->nr_trials)
		return -1;
	for (size_t k = 0; k < n; k++)
		if (!(res[k] > 0) || (k && !(res[k] > res[k - 1])) || isinf(res[k]))
			return -1;
	for (size_t k = 0; k < a->nr_rungs; k++)
		free(a->rungs[k].loss);
	memset(a->rungs, 0, ASHA_MAX_RUNGS * sizeof(*a->rungs));
	for (size_t k = 0; k < n; k++)
		a->rungs[k].resource = res[k];
	a->nr_rungs = n;
	a->rungs_complete = 1;   /* no rung past the last one given */
	a->explicit_rungs = 1;
	return 0;
}

void asha_set_min_peers(struct asha *a, int min_peers)
{
	a->min_peers = min_peers < 0 ? 0 : min_peers;
}

void asha_set_grace(struct asha *a, int on)
{
	a->grace = !!on;
}

int asha_get_grace(const struct asha *a)
{
	return a->grace;
}

void asha_set_promotion(struct asha *a, int on)
{
	a->promotion = !!on;
}

int asha_get_promotion(const struct asha *a)
{
	return a->promotion;
}

int asha_get_min_peers(const struct asha *a)
{
	return a->min_peers;
}

void asha_set_rung_check(struct asha *a, int min_trials, double min_gamma, double widen)
{
	a->check_trials = min_trials < 0 ? 0 : min_trials;
	a->check_gamma = min_gamma;
	a->check_widen = widen < 1 ? 1 : widen;
}

int asha_get_rung_check(const struct asha *a, double *min_gamma, double *widen)
{
	if (min_gamma)
		*min_gamma = a->check_gamma;
	if (widen)
		*widen = a->check_widen;
	return a->check_trials;
}

/* Append the next rung if there is one below max_iter; returns 1 if it did. */
static int rung_append(struct asha *a)
{
	double r;

	if (a->rungs_complete || a->nr_rungs == ASHA_MAX_RUNGS)
		return 0;
	r = a->nr_rungs ? a->rungs[a->nr_rungs - 1].resource * a->eta : a->min_iter;
	if (a->max_iter > 0 && r >= a->max_iter) {
		a->rungs_complete = 1;   /* max_iter itself is the end of training, not a rung */
		return 0;
	}
	a->rungs[a->nr_rungs++].resource = r;
	return 1;
}

/* Make rungs[] hold every rung at or below `resource`. */
static void rungs_cover(struct asha *a, double resource)
{
	while (!a->nr_rungs || a->rungs[a->nr_rungs - 1].resource * a->eta <= resource)
		if (!rung_append(a))
			break;
}

double asha_rung_resource(struct asha *a, size_t k)
{
	while (k >= a->nr_rungs)
		if (!rung_append(a))
			return INFINITY;
	return a->rungs[k].resource;
}

size_t asha_rung_count(const struct asha *a, size_t k)
{
	return k < a->nr_rungs ? a->rungs[k].nr : 0;
}

static double to_loss(const struct asha *a, double value)
{
	if (isnan(value))
		return INFINITY;
	return a->goal == GOAL_MAXIMIZE ? -value : value;
}

/* Number of values in the rung strictly better (smaller) than loss. */
static size_t rung_better(const struct rung *r, double loss)
{
	size_t lo = 0, hi = r->nr;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r->loss[mid] < loss)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void rung_insert(struct rung *r, double loss)
{
	size_t at = rung_better(r, loss);

	ALLOC_GROW(r->loss, r->nr + 1, r->alloc);
	memmove(&r->loss[at + 1], &r->loss[at], (r->nr - at) * sizeof(double));
	r->loss[at] = loss;
	r->nr++;
}

/* The trial with this id, created (in id order) when `create`. */
static struct asha_trial *trial_find(struct asha *a, int id, int create)
{
	size_t lo = 0, hi = a->nr_trials;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (a->trials[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < a->nr_trials && a->trials[lo].id == id)
		return &a->trials[lo];
	if (!create)
		return NULL;
	ALLOC_GROW(a->trials, a->nr_trials + 1, a->alloc_trials);
	memmove(&a->trials[lo + 1], &a->trials[lo], (a->nr_trials - lo) * sizeof(*a->trials));
	a->nr_trials++;
	memset(&a->trials[lo], 0, sizeof(a->trials[lo]));
	a->trials[lo].id = id;
	return &a->trials[lo];
}

static int sign(double x)
{
	return (x > 0) - (x < 0);
}

double asha_rung_agreement(const struct asha *a, size_t k, size_t *trials)
{
	const struct rung *r = k < a->nr_rungs ? &a->rungs[k] : NULL;
	unsigned long long c = r ? r->concordant : 0, d = r ? r->discordant : 0;

	if (trials)
		*trials = r ? r->nr_both : 0;
	return c + d ? ((double)c - (double)d) / (double)(c + d) : 1;
}

/*
 * t has just recorded its value at rung k + 1: count its pairs with every
 * trial holding values at both k and k + 1.  Each pair of trials is counted
 * once, by the later of the two to reach rung k + 1, so the counts depend
 * only on the values, not on the order they arrived in.
 */
static void rung_count_pairs(struct asha *a, const struct asha_trial *t, size_t k)
{
	struct rung *r = &a->rungs[k];
	double x = to_loss(a, t->values[k]), y = to_loss(a, t->values[k + 1]);

	for (size_t i = 0; i < a->nr_trials; i++) {
		const struct asha_trial *u = &a->trials[i];
		int c;

		if (u == t || u->nr_values < k + 2)
			continue;
		c = sign(x - to_loss(a, u->values[k])) * sign(y - to_loss(a, u->values[k + 1]));
		r->concordant += c > 0;
		r->discordant += c < 0;
	}
	r->nr_both++;
}

/* floor(n / eta): the share of a rung's n values that goes on */
static size_t rung_quota(const struct asha *a, size_t n)
{
	return (size_t)floor((double)n / a->eta);
}

/*
 * How many of the n values at rung k may go on: max(1, floor(n / eta)), or,
 * when the rung check finds rung k's ranking disagreeing with rung k + 1's,
 * floor(widen * n / eta).
 */
static size_t rung_keep(const struct asha *a, size_t k)
{
	size_t n = a->rungs[k].nr, keep = rung_quota(a, n), trials;

	if (a->check_trials && asha_rung_agreement(a, k, &trials) < a->check_gamma &&
	    trials >= (size_t)a->check_trials) {
		size_t wide = (size_t)floor(a->check_widen * (double)n / a->eta);

		if (wide > keep)
			keep = wide;
	}
	return keep < 1 ? 1 : keep;
}

/*
 * Trials other than `self` that went on past rung k: they reached a later
 * rung, or are at k unpruned (with promotion: promoted from k, running).  A
 * function of the trials' states, so replays and snapshots rebuild it.
 */
static size_t rung_went_on(const struct asha *a, size_t k, const struct asha_trial *self)
{
	size_t n = 0;

	for (size_t i = 0; i < a->nr_trials; i++) {
		const struct asha_trial *t = &a->trials[i];
		int on = a->promotion ? t->state == ASHA_TRIAL_RUNNING : !t->pruned;

		if (self && (size_t)(self - a->trials) == i)
			continue;
		if (t->nr_values > k + 1 || (t->nr_values == k + 1 && on))
			n++;
	}
	return n;
}

size_t asha_rung_went_on(const struct asha *a, size_t k)
{
	return k < a->nr_rungs ? rung_went_on(a, k, NULL) : 0;
}

/*
 * Record `value` for t at its next rung; returns 1 if t ranks to continue
 * there: in the top rung_keep() of the n values recorded (its own included),
 * and with at least min_peers other values to be compared with.
 */
static int trial_record(struct asha *a, struct asha_trial *t, double value)
{
	size_t k = t->nr_values;
	struct rung *r = &a->rungs[k];
	double loss = to_loss(a, value);
	size_t better;

	t->values = xrealloc(t->values, (t->nr_values + 1) * sizeof(double));
	t->values[t->nr_values++] = value;
	if (k)
		rung_count_pairs(a, t, k - 1);
	better = rung_better(r, loss);
	rung_insert(r, loss);
	if (better < rung_keep(a, k) && r->nr > (size_t)a->min_peers)
		return 1;
	/* grace: fewer than eta values there before it (nothing to rank it
	 * against yet, as when several trials arrive together), or the best one,
	 * or the rung has let fewer than floor(n / eta) go on so far (arrivals
	 * in ever worse order would otherwise starve the next rung) */
	return a->grace && ((double)r->nr <= a->eta || better == 0 ||
			    rung_went_on(a, k, t) < rung_quota(a, r->nr));
}

int asha_report(struct asha *a, int trial_id, double resource, double value)
{
	struct asha_trial *t = trial_find(a, trial_id, 1);

	if (isnan(resource))
		return t->pruned ? ASHA_PRUNE : ASHA_CONTINUE;
	rungs_cover(a, resource);
	while (t->nr_values < a->nr_rungs && a->rungs[t->nr_values].resource <= resource)
		if (!trial_record(a, t, value) && !a->promotion)
			t->pruned = 1;
	if (!a->promotion)
		return t->pruned ? ASHA_PRUNE : ASHA_CONTINUE;
	if (t->state == ASHA_TRIAL_RUNNING && (int)t->nr_values > t->target)
		t->state = ASHA_TRIAL_PAUSED;
	return t->state == ASHA_TRIAL_PAUSED ? ASHA_PAUSE : ASHA_CONTINUE;
}

int asha_promote_next(struct asha *a, int closing)
{
	for (size_t k = a->nr_rungs; k-- > 0;) {
		const struct rung *r = &a->rungs[k];
		size_t quota = rung_quota(a, r->nr);
		struct asha_trial *best = NULL;
		double best_loss = INFINITY;

		if (closing && quota < 1)
			quota = 1;
		for (size_t i = 0; i < a->nr_trials; i++) {
			struct asha_trial *t = &a->trials[i];
			double loss;

			if (t->state != ASHA_TRIAL_PAUSED || t->nr_values != k + 1)
				continue;
			loss = to_loss(a, t->values[k]);
			if (rung_better(r, loss) < quota && (!best || loss < best_loss)) {
				best = t;
				best_loss = loss;
			}
		}
		if (best) {
			best->state = ASHA_TRIAL_RUNNING;
			best->target = (int)k + 1;
			return best->id;
		}
	}
	return 0;
}

void asha_set_trial(struct asha *a, int trial_id, enum asha_trial_state st)
{
	struct asha_trial *t = trial_find(a, trial_id, 1);

	t->state = st;
	if (st == ASHA_TRIAL_RUNNING)
		t->target = (int)t->nr_values;   /* promoted from its last rung */
}

int asha_is_paused(const struct asha *a, int trial_id)
{
	struct asha_trial *t = trial_find((struct asha *)a, trial_id, 0);

	return t ? t->state == ASHA_TRIAL_PAUSED : 0;
}

int asha_is_pruned(const struct asha *a, int trial_id)
{
	struct asha_trial *t = trial_find((struct asha *)a, trial_id, 0);

	return t ? t->pruned : 0;
}

static const char *const trial_state_names[] = { "running", "paused", "done" };

json_t *asha_to_json(const struct asha *a)
{
	json_t *trials = json_array(), *j;

	for (size_t i = 0; i < a->nr_trials; i++) {
		const struct asha_trial *t = &a->trials[i];
		json_t *vals = json_array();

		for (size_t k = 0; k < t->nr_values; k++)
			json_array_append_new(vals, isfinite(t->values[k]) ?
					      json_real(t->values[k]) : json_null());
		json_t *tj = json_pack("{s:i, s:o, s:b}", "id", t->id, "values", vals,
				       "pruned", t->pruned);

		if (a->promotion) {
			json_object_set_new(tj, "state", json_string(trial_state_names[t->state]));
			json_object_set_new(tj, "target", json_integer(t->target));
		}
		json_array_append_new(trials, tj);
	}
	j = json_pack("{s:i, s:i, s:o, s:i, s:i, s:b, s:s, s:o}", "version", 1,
		      "min_iter", a->min_iter, "eta", json_number(a->eta), "max_iter", a->max_iter,
		      "min_peers", a->min_peers, "grace", a->grace,
		      "goal", a->goal == GOAL_MAXIMIZE ? "maximize" : "minimize",
		      "trials", trials);
	if (a->explicit_rungs) {
		json_t *rungs = json_array();

		for (size_t k = 0; k < a->nr_rungs; k++)
			json_array_append_new(rungs, json_real(a->rungs[k].resource));
		json_object_set_new(j, "rungs", rungs);
	}
	if (a->promotion)
		json_object_set_new(j, "promotion", json_true());
	if (a->check_trials)
		json_object_set_new(j, "rung_check", json_pack("{s:i, s:f, s:f}",
							       "min_trials", a->check_trials,
							       "min_gamma", a->check_gamma,
							       "widen", a->check_widen));
	return j;
}

struct asha *asha_from_json(const json_t *j, struct strbuf *err)
{
	const json_t *trials = json_object_get(j, "trials"), *tj;
	const json_t *check = json_object_get(j, "rung_check");
	const json_t *rungs = json_object_get(j, "rungs"), *rj;
	const char *goal = json_get_str(j, "goal", "minimize");
	struct asha *a;
	size_t i;

	if (json_get_int(j, "version", 0) != 1 || !json_is_array(trials)) {
		strbuf_addstr(err, "asha state: not a version 1 state object");
		return NULL;
	}
	a = asha_new((int)json_get_int(j, "min_iter", 0), 2, (int)json_get_int(j, "max_iter", 0),
		     !strcmp(goal, "maximize") ? GOAL_MAXIMIZE : GOAL_MINIMIZE);
	if (!a || asha_set_eta(a, json_get_real(j, "eta", 0)) < 0) {
		strbuf_addstr(err, "asha state: needs min_iter >= 1 and eta above 1");
		asha_free(a);
		return NULL;
	}
	/* absent: rungs at min_iter * eta^k, as in every snapshot from before them */
	if (json_is_array(rungs)) {
		double res[ASHA_MAX_RUNGS] = { 0 };   /* a hole reads as 0: refused */
		size_t n = json_array_size(rungs);

		json_array_foreach(rungs, i, rj)
			if (i < ASHA_MAX_RUNGS)
				res[i] = json_is_number(rj) ? json_number_value(rj) : NAN;
		if (asha_set_rungs(a, res, n) < 0) {
			strbuf_addstr(err, "asha state: 'rungs' needs 1 to 62 increasing positive "
				      "resources");
			asha_free(a);
			return NULL;
		}
	}
	/* absent: a snapshot from before the setting, whose rule was min_peers 0 */
	asha_set_min_peers(a, (int)json_get_int(j, "min_peers", 0));
	/* absent: a snapshot from before the grace rule, made without it */
	asha_set_grace(a, json_is_true(json_object_get(j, "grace")));
	asha_set_promotion(a, json_is_true(json_object_get(j, "promotion")));
	/* absent: no rung check, as in every snapshot from before it existed */
	if (json_is_object(check))
		asha_set_rung_check(a, (int)json_get_int(check, "min_trials", 0),
				    json_number_value(json_object_get(check, "min_gamma")),
				    json_number_value(json_object_get(check, "widen")));
	json_array_foreach(trials, i, tj) {
		const json_t *vals = json_object_get(tj, "values"), *vj;
		struct asha_trial *t;
		size_t k;

		if (!json_is_integer(json_object_get(tj, "id")) || !json_is_array(vals)) {
			strbuf_addf(err, "asha state: trial %zu needs an integer id and values", i);
			asha_free(a);
			return NULL;
		}
		t = trial_find(a, (int)json_get_int(tj, "id", 0), 1);
		json_array_foreach(vals, k, vj) {
			double v = json_is_number(vj) ? json_number_value(vj) : NAN;

			asha_rung_resource(a, t->nr_values);
			if (t->nr_values >= a->nr_rungs) {
				strbuf_addf(err, "asha state: trial %d has more values than rungs", t->id);
				asha_free(a);
				return NULL;
			}
			trial_record(a, t, v);
		}
		t->pruned = json_is_true(json_object_get(tj, "pruned"));
		for (size_t st = 0; st < ARRAY_SIZE(trial_state_names); st++)
			if (!strcmp(json_get_str(tj, "state", "running"), trial_state_names[st]))
				t->state = (int)st;
		t->target = (int)json_get_int(tj, "target", 0);
	}
	return a;
}
