/*
 * test_asha.c - unit tests for scheduler/asha.c (asynchronous successive
 * halving): rung levels, a hand-built pruning scenario, a brute-force
 * reference of the rule on random reports, goal handling, replay in another
 * interleaving and the JSON snapshot, the optional rung check, and the
 * promotion variant (pause at each rung, promote the top 1/eta).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "rng.h"
#include "scheduler/asha.h"

static void test_rungs(void **state)
{
	struct asha *a = asha_new(1, 3, 27, GOAL_MINIMIZE), *u = asha_new(2, 4, 0, GOAL_MINIMIZE);

	assert_true(asha_rung_resource(a, 0) == 1);
	assert_true(asha_rung_resource(a, 1) == 3);
	assert_true(asha_rung_resource(a, 2) == 9);
	assert_true(isinf(asha_rung_resource(a, 3)));   /* 27 = max_iter: the end, not a rung */
	assert_true(asha_rung_resource(u, 5) == 2048);   /* unbounded: 2 * 4^5 */
	asha_free(a);
	asha_free(u);
	assert_null(asha_new(0, 3, 0, GOAL_MINIMIZE));
	assert_null(asha_new(1, 1, 0, GOAL_MINIMIZE));
}

/*
 * Nine trials reach epoch 1 with the values below, in this order.  With
 * eta 3 a trial goes on iff fewer than max(1, floor(n/3)) recorded values
 * beat it.  This is the former rule, min_peers 0, where the first trial to
 * reach a rung goes on; test_min_peers has the default.
 */
static void test_scenario(void **state)
{
	static const struct {
		int id;
		double value;
		int expect;
	} rung0[] = {
		{ 0, 5, ASHA_CONTINUE },   /* n=1 keep 1: first at the rung */
		{ 1, 3, ASHA_CONTINUE },   /* n=2 keep 1: best */
		{ 2, 7, ASHA_PRUNE },      /* n=3 keep 1: 2 better */
		{ 3, 1, ASHA_CONTINUE },   /* best */
		{ 4, 9, ASHA_PRUNE },
		{ 5, 2, ASHA_CONTINUE },   /* n=6 keep 2: only 1 better */
		{ 6, 4, ASHA_PRUNE },      /* n=7 keep 2: 3 better */
		{ 7, 6, ASHA_PRUNE },
		{ 8, 2.5, ASHA_CONTINUE }, /* n=9 keep 3: 2 better */
	};
	struct asha *a = asha_new(1, 3, 27, GOAL_MINIMIZE);

	asha_set_grace(a, 0);
	asha_set_min_peers(a, 0);
	for (size_t i = 0; i < ARRAY_SIZE(rung0); i++) {
		/* epoch 0.5 is below the first rung: nothing to decide */
		assert_int_equal(asha_report(a, rung0[i].id, 0.5, 100), ASHA_CONTINUE);
		if (asha_report(a, rung0[i].id, 1, rung0[i].value) != rung0[i].expect)
			fail_msg("trial %d value %g at epoch 1: expected %s", rung0[i].id,
				 rung0[i].value, rung0[i].expect == ASHA_PRUNE ? "prune" : "continue");
	}
	assert_int_equal(asha_rung_count(a, 0), 9);
	/* epoch 2 is between rungs: survivors go on, the pruned stay pruned */
	assert_int_equal(asha_report(a, 3, 2, 0.9), ASHA_CONTINUE);
	assert_int_equal(asha_report(a, 2, 2, 0.1), ASHA_PRUNE);
	assert_true(asha_is_pruned(a, 2) && !asha_is_pruned(a, 3) && !asha_is_pruned(a, 99));
	/* rung 1 (epoch 3): 0, 1, 3 arrive; 1 is worse than 3 and 0 ... */
	assert_int_equal(asha_report(a, 3, 3, 0.8), ASHA_CONTINUE);
	assert_int_equal(asha_report(a, 0, 3, 2.0), ASHA_PRUNE);
	assert_int_equal(asha_report(a, 1, 3, 1.5), ASHA_PRUNE);
	/* ... and 5 skips epoch 3, reporting epoch 4: recorded at rung 1 */
	assert_int_equal(asha_report(a, 5, 4, 0.7), ASHA_CONTINUE);
	assert_int_equal(asha_rung_count(a, 1), 4);
	/* epoch 27 is the end of training: no rung, no decision */
	assert_int_equal(asha_report(a, 5, 27, 50), ASHA_CONTINUE);
	assert_int_equal(asha_rung_count(a, 2), 1);   /* but it passed rung 2 (epoch 9) */
	asha_free(a);
}

/*
 * The default, min_peers 1: a trial passes a rung only with a peer to be
 * compared with, so the first to arrive stops there (its value recorded),
 * and the next ones are judged as before.
 */
static void test_min_peers(void **state)
{
	struct asha *a = asha_new(1, 3, 27, GOAL_MINIMIZE), *b = asha_new(1, 3, 27, GOAL_MINIMIZE);
	struct strbuf err = STRBUF_INIT;
	json_t *j;

	asha_set_grace(a, 0);
	asha_set_grace(b, 0);
	assert_int_equal(asha_get_min_peers(a), 1);
	assert_int_equal(asha_report(a, 0, 1, 5), ASHA_PRUNE);      /* alone at the rung */
	assert_int_equal(asha_report(a, 1, 1, 3), ASHA_CONTINUE);   /* n=2, best */
	assert_int_equal(asha_report(a, 2, 1, 4), ASHA_PRUNE);      /* n=3 keep 1 */
	assert_int_equal(asha_report(a, 1, 3, 2), ASHA_PRUNE);      /* first at rung 1 */
	assert_int_equal(asha_report(a, 3, 1, 1), ASHA_CONTINUE);
	assert_int_equal(asha_report(a, 3, 3, 1.5), ASHA_CONTINUE); /* beats trial 1 there */
	assert_int_equal(asha_report(a, 3, 9, 1.2), ASHA_PRUNE);    /* first at rung 2 */
	assert_int_equal(asha_rung_count(a, 0), 4);
	/* min_peers 2: the second arrival needs one more peer too */
	asha_set_min_peers(b, 2);
	assert_int_equal(asha_report(b, 0, 1, 5), ASHA_PRUNE);
	assert_int_equal(asha_report(b, 1, 1, 3), ASHA_PRUNE);
	assert_int_equal(asha_report(b, 2, 1, 1), ASHA_CONTINUE);
	/* the setting travels in the snapshot; one without it has the former rule */
	j = asha_to_json(b);
	assert_int_equal(json_integer_value(json_object_get(j, "min_peers")), 2);
	asha_free(b);
	b = asha_from_json(j, &err);
	assert_non_null(b);
	assert_int_equal(asha_get_min_peers(b), 2);
	asha_free(b);
	json_object_del(j, "min_peers");
	b = asha_from_json(j, &err);
	assert_non_null(b);
	assert_int_equal(asha_get_min_peers(b), 0);
	assert_int_equal(asha_report(b, 9, 3, 0.5), ASHA_CONTINUE);   /* alone at rung 1 */
	json_decref(j);
	strbuf_release(&err);
	asha_free(a);
	asha_free(b);
}

/*
 * Trials 0..n-1 report epoch 1 (rung 0) value 1 + i and epoch 3 (rung 1)
 * value at1[i]; then a trial worse than all of them reaches rung 0.
 */
static int rung_check_newcomer(struct asha *a, const double *at1, int n)
{
	for (int i = 0; i < n; i++) {
		asha_report(a, i, 1, 1 + i);
		asha_report(a, i, 3, at1[i]);
	}
	return asha_report(a, 100, 1, 50);
}

static struct asha *rung_check_new(int min_trials, double widen)
{
	struct asha *a = asha_new(1, 3, 27, GOAL_MINIMIZE);

	asha_set_rung_check(a, min_trials, 0.5, widen);
	return a;
}

/*
 * The rung check: while rung 0's ranking disagrees with rung 1's (gamma
 * below 0.5 over at least min_trials trials), rung 0 keeps widen * n / eta.
 */
static void test_rung_check(void **state)
{
	static const double reversed[] = { 4, 3, 2, 1 }, agree[] = { 1, 2, 3, 4 };
	static const double one_off[] = { 1, 3, 2 }, tied[] = { 1, 2, 2 };
	struct asha *a;
	size_t m;
	double g, w;

	/* off by default: the newcomer, worst of 5 at rung 0, stops */
	a = asha_new(1, 3, 27, GOAL_MINIMIZE);
	assert_int_equal(asha_get_rung_check(a, NULL, NULL), 0);
	assert_int_equal(rung_check_newcomer(a, reversed, 4), ASHA_PRUNE);
	assert_true(asha_rung_agreement(a, 0, &m) == -1 && m == 4);
	asha_free(a);
	/* on, rankings reversed: widen 3 lets everyone through, still recorded */
	a = rung_check_new(3, 3);
	assert_int_equal(asha_get_rung_check(a, &g, &w), 3);
	assert_true(g == 0.5 && w == 3);
	assert_int_equal(rung_check_newcomer(a, reversed, 4), ASHA_CONTINUE);
	assert_int_equal(asha_rung_count(a, 0), 5);
	asha_free(a);
	/* on, rankings agreeing: the rule as before */
	a = rung_check_new(3, 3);
	assert_int_equal(rung_check_newcomer(a, agree, 4), ASHA_PRUNE);
	assert_true(asha_rung_agreement(a, 0, NULL) == 1);
	asha_free(a);
	/* too few trials in both rungs to judge */
	a = rung_check_new(5, 3);
	assert_int_equal(rung_check_newcomer(a, reversed, 4), ASHA_PRUNE);
	asha_free(a);
	/* widen 1.5: keep floor(1.5 n / 3) instead of floor(n / 3) */
	a = rung_check_new(3, 1.5);
	assert_int_equal(rung_check_newcomer(a, reversed, 4), ASHA_PRUNE);   /* n=5 keep 2 */
	assert_int_equal(asha_report(a, 101, 1, 2.5), ASHA_CONTINUE);   /* n=6 keep 3 (not 2), 2 better */
	assert_int_equal(asha_report(a, 102, 1, 3.5), ASHA_PRUNE);      /* n=7 keep 3, 4 better */
	asha_free(a);
	/* gamma by hand: pairs (0,1) (0,2) concordant, (1,2) discordant; a tie counts neither */
	a = rung_check_new(3, 3);
	rung_check_newcomer(a, one_off, 3);
	g = asha_rung_agreement(a, 0, &m);
	assert_true(fabs(g - 1.0 / 3) < 1e-12 && m == 3);
	asha_free(a);
	a = rung_check_new(3, 3);
	rung_check_newcomer(a, tied, 3);
	assert_true(asha_rung_agreement(a, 0, NULL) == 1);
	asha_free(a);
}

/* The check's setting and pair counts survive a snapshot; one without it is off. */
static void test_rung_check_json(void **state)
{
	static const double reversed[] = { 4, 3, 2, 1 };
	struct asha *a = rung_check_new(3, 3), *b;
	struct strbuf err = STRBUF_INIT;
	json_t *j;
	double g, w;
	size_t m;

	asha_report(a, 0, 1, 1);
	asha_report(a, 0, 3, 4);
	for (int i = 1; i < 4; i++) {
		asha_report(a, i, 1, 1 + i);
		asha_report(a, i, 3, reversed[i]);
	}
	j = asha_to_json(a);
	b = asha_from_json(j, &err);
	if (!b)
		fail_msg("asha_from_json: %s", err.buf);
	assert_int_equal(asha_get_rung_check(b, &g, &w), 3);
	assert_true(g == 0.5 && w == 3);
	assert_true(asha_rung_agreement(b, 0, &m) == -1 && m == 4);
	assert_int_equal(asha_report(a, 100, 1, 50), ASHA_CONTINUE);
	assert_int_equal(asha_report(b, 100, 1, 50), ASHA_CONTINUE);
	asha_free(b);
	/* an old snapshot: no "rung_check", so the former rule prunes the newcomer */
	json_object_del(j, "rung_check");
	b = asha_from_json(j, &err);
	assert_non_null(b);
	assert_int_equal(asha_get_rung_check(b, NULL, NULL), 0);
	assert_int_equal(asha_report(b, 100, 1, 50), ASHA_PRUNE);
	asha_free(b);
	json_decref(j);
	/* off: nothing written */
	b = asha_new(1, 3, 27, GOAL_MINIMIZE);
	j = asha_to_json(b);
	assert_null(json_object_get(j, "rung_check"));
	json_decref(j);
	asha_free(b);
	asha_free(a);
	strbuf_release(&err);
}

/* gamma between rungs k and k+1 by brute force over a snapshot's values */
static double brute_gamma(const json_t *j, size_t k, size_t *m)
{
	const json_t *trials = json_object_get(j, "trials"), *ti, *tj;
	size_t i, jx;
	long c = 0, d = 0;

	*m = 0;
	json_array_foreach(trials, i, ti) {
		const json_t *vi = json_object_get(ti, "values");

		if (json_array_size(vi) < k + 2)
			continue;
		++*m;
		json_array_foreach(trials, jx, tj) {
			const json_t *vj = json_object_get(tj, "values");
			double dx, dy;

			if (jx >= i)
				break;
			if (json_array_size(vj) < k + 2)
				continue;
			dx = json_number_value(json_array_get(vi, k)) -
			     json_number_value(json_array_get(vj, k));
			dy = json_number_value(json_array_get(vi, k + 1)) -
			     json_number_value(json_array_get(vj, k + 1));
			c += dx * dy > 0;
			d += dx * dy < 0;
		}
	}
	return c + d ? (double)(c - d) / (double)(c + d) : 1;
}

/*
 * Curves whose rate differs between trials, so rung rankings disagree:
 * two interleavings give the same rung tables, pair counts and decisions,
 * and the counts match a brute-force gamma.
 */
static double crossing(int t, int e)
{
	double q = ((t * 7919) % 97) / 970.0;   /* 0 to 0.1: the rate matters more */

	return q + pow(e, -0.2 - 2 * ((t * 104729) % 89) / 89.0);
}

static void test_rung_check_replay(void **state)
{
	struct asha *a = rung_check_new(6, 3), *b = rung_check_new(6, 3);
	int stop[60], widened = 0;

	/* a: trials one after the other, each until it is pruned */
	for (int t = 0; t < 60; t++)
		for (stop[t] = 1; stop[t] <= 12; stop[t]++)
			if (asha_report(a, t, stop[t], crossing(t, stop[t])) == ASHA_PRUNE)
				break;
	/* b: the same reports, epoch-major */
	for (int e = 1; e <= 12; e++)
		for (int t = 59; t >= 0; t--)
			if (e <= stop[t])
				asha_report(b, t, e, crossing(t, e));
	for (size_t k = 0; k < 3; k++) {
		size_t ma, mb, mr;
		double ga = asha_rung_agreement(a, k, &ma), gb = asha_rung_agreement(b, k, &mb);
		json_t *j = asha_to_json(a);

		assert_int_equal(asha_rung_count(a, k), asha_rung_count(b, k));
		assert_true(ga == gb && ma == mb);
		assert_true(fabs(brute_gamma(j, k, &mr) - ga) < 1e-12 && mr == ma);
		json_decref(j);
	}
	/* the same decisions from here on, and the check does act: trials worse
	 * than every value at rung 0 still go on while the rankings disagree */
	for (int t = 200; t < 260; t++) {
		int d = asha_report(a, t, 1, 10 + t);

		assert_int_equal(asha_report(b, t, 1, 10 + t), d);
		widened += d == ASHA_CONTINUE;
	}
	assert_true(asha_rung_agreement(a, 0, NULL) < 0.5 && widened == 60);
	asha_free(a);
	asha_free(b);
}

static void test_maximize_and_nan(void **state)
{
	struct asha *a = asha_new(1, 2, 0, GOAL_MAXIMIZE);

	asha_set_grace(a, 0);
	assert_int_equal(asha_report(a, 1, 1, 0.9), ASHA_PRUNE);      /* no peer yet */
	asha_free(a);
	a = asha_new(1, 2, 0, GOAL_MAXIMIZE);
	asha_set_grace(a, 0);
	asha_set_min_peers(a, 0);
	assert_int_equal(asha_report(a, 1, 1, 0.9), ASHA_CONTINUE);
	assert_int_equal(asha_report(a, 2, 1, 0.5), ASHA_PRUNE);   /* lower accuracy */
	assert_int_equal(asha_report(a, 3, 1, 0.95), ASHA_CONTINUE);
	assert_int_equal(asha_report(a, 4, 1, NAN), ASHA_PRUNE);   /* diverged: worst */
	asha_free(a);
}

/* The rule, counted by brute force over every recorded value. */
struct ref_rung {
	double v[4096];
	size_t n;
};

static void random_against_reference(int min_peers, int grace)
{
	const int eta = 3, max_iter = 81, trials = 600;
	struct asha *a = asha_new(1, eta, max_iter, GOAL_MINIMIZE);
	static struct ref_rung ref[4];
	int *epoch = xcalloc(trials, sizeof(int)), *dead = xcalloc(trials, sizeof(int));
	double *quality = xcalloc(trials, sizeof(double));
	struct rng r;
	int live = trials, prunes = 0;
	size_t went_on[4] = { 0 };

	asha_set_min_peers(a, min_peers);
	asha_set_grace(a, grace);
	memset(ref, 0, sizeof(ref));
	rng_seed(&r, 2024);
	for (int t = 0; t < trials; t++)
		quality[t] = rng_uniform01(&r);
	while (live) {
		/* advance a random live trial by one epoch: an asynchronous interleaving */
		int t = (int)rng_below(&r, trials), dec, want = ASHA_CONTINUE, rung = -1;
		double v;

		if (dead[t])
			continue;
		epoch[t]++;
		v = quality[t] + 1.0 / epoch[t] + 0.05 * rng_uniform01(&r);
		for (int k = 0, res = 1; res < max_iter; k++, res *= eta)
			if (epoch[t] == res)
				rung = k;
		if (rung >= 0) {
			size_t better = 0, keep;

			for (size_t i = 0; i < ref[rung].n; i++)
				better += ref[rung].v[i] < v;
			ref[rung].v[ref[rung].n++] = v;
			keep = ref[rung].n / eta ? ref[rung].n / eta : 1;
			want = better < keep && ref[rung].n > (size_t)min_peers ?
			       ASHA_CONTINUE : ASHA_PRUNE;
			/* grace: fewer than eta values there before it, the best, or
			 * fewer than floor(n / eta) went on past the rung so far */
			if (grace && (ref[rung].n - 1 < (size_t)eta || better == 0 ||
				      went_on[rung] < ref[rung].n / eta))
				want = ASHA_CONTINUE;
			went_on[rung] += want == ASHA_CONTINUE;
			/* the best value at a rung with enough peers is never pruned */
			if (better == 0 && ref[rung].n > (size_t)min_peers)
				assert_int_equal(want, ASHA_CONTINUE);
		}
		dec = asha_report(a, t, epoch[t], v);
		if (dec != want)
			fail_msg("trial %d epoch %d value %g: asha says %d, reference %d",
				 t, epoch[t], v, dec, want);
		if (dec == ASHA_PRUNE || epoch[t] == max_iter) {
			dead[t] = 1;
			live--;
			prunes += dec == ASHA_PRUNE;
		}
	}
	for (int k = 0; k < 4; k++)
		assert_int_equal(asha_rung_count(a, k), ref[k].n);
	/* about 1/eta survive each rung */
	assert_true(ref[1].n > trials / 5 && ref[1].n < trials / 2);
	assert_true(prunes > trials * 9 / 10);
	free(epoch);
	free(dead);
	free(quality);
	asha_free(a);
}

static void test_random_against_reference(void **state)
{
	random_against_reference(0, 0);
	random_against_reference(1, 0);
	random_against_reference(3, 0);
	random_against_reference(1, 1);
}

/*
 * The default since the sweep conformance issue: the first eta trials to
 * reach a rung and the best one there go on, so trials that arrive together
 * in a parallel sweep are not judged alone.
 */
static void test_grace(void **state)
{
	struct asha *a = asha_new(1, 3, 9, GOAL_MINIMIZE), *b;
	struct strbuf err = STRBUF_INIT;
	json_t *j;

	assert_int_equal(asha_get_grace(a), 1);
	assert_int_equal(asha_report(a, 0, 1, 5), ASHA_CONTINUE);   /* alone at the rung */
	assert_int_equal(asha_report(a, 1, 1, 9), ASHA_CONTINUE);   /* 1 before it */
	assert_int_equal(asha_report(a, 2, 1, 8), ASHA_CONTINUE);   /* 2 before it */
	assert_int_equal(asha_report(a, 3, 1, 7), ASHA_PRUNE);      /* n=4 keep 1: 1 better */
	assert_int_equal(asha_report(a, 4, 1, 1), ASHA_CONTINUE);   /* the best */
	assert_int_equal(asha_report(a, 5, 1, 6), ASHA_PRUNE);
	assert_int_equal(asha_report(a, 0, 3, 4), ASHA_CONTINUE);   /* first at rung 1 */
	/* in the snapshot; one without it (older dtsched) keeps the old rule */
	j = asha_to_json(a);
	assert_true(json_is_true(json_object_get(j, "grace")));
	json_object_del(j, "grace");
	b = asha_from_json(j, &err);
	assert_non_null(b);
	assert_int_equal(asha_get_grace(b), 0);
	assert_int_equal(asha_report(b, 7, 3, 9), ASHA_PRUNE);      /* 1 better, keep 1 */
	json_decref(j);
	strbuf_release(&err);
	asha_free(a);
	asha_free(b);
}

/*
 * eta 3, max_iter 9: a sweep of N trials whose reports interleave at random
 * (parallel workers) trains at least floor(N / 9) of them to max_iter; with
 * the former rule (min_peers 1, no grace) and N small it often trained none.
 */
static void test_grace_trains_enough(void **state)
{
	for (int seed = 0; seed < 200; seed++) {
		const int n = 9 + seed % 40;
		struct asha *a = asha_new(1, 3, 9, GOAL_MINIMIZE);
		int epoch[64] = { 0 }, dead[64] = { 0 }, live = n, done = 0;
		double q[64];
		struct rng r;

		rng_seed(&r, (uint64_t)seed);
		for (int t = 0; t < n; t++)
			q[t] = rng_uniform01(&r);
		while (live) {
			int t = (int)rng_below(&r, (uint64_t)n);

			if (dead[t])
				continue;
			epoch[t]++;
			if (asha_report(a, t, epoch[t], q[t] + 1.0 / epoch[t]) == ASHA_PRUNE ||
			    epoch[t] == 9) {
				dead[t] = 1;
				live--;
				done += epoch[t] == 9 && !asha_is_pruned(a, t);
			}
		}
		if (done < n / 9)
			fail_msg("seed %d: %d trials, %d trained to max_iter, want >= %d", seed, n,
				 done, n / 9);
		asha_free(a);
	}
}

/* Reports of 40 trials, 10 epochs each, values from a seeded learning curve. */
static double curve(int t, int e)
{
	return 0.2 + 0.013 * ((t * 7919) % 97) + 1.0 / e;
}

static void test_replay_and_json(void **state)
{
	struct asha *a = asha_new(1, 3, 0, GOAL_MINIMIZE), *b = asha_new(1, 3, 0, GOAL_MINIMIZE);
	struct asha *c;
	struct strbuf s1 = STRBUF_INIT, s2 = STRBUF_INIT, err = STRBUF_INIT;
	json_t *j, *parsed, *j2;

	/* a: trials one after the other; b: epoch-major interleaving */
	for (int t = 0; t < 40; t++)
		for (int e = 1; e <= 10; e++)
			asha_report(a, t, e, curve(t, e));
	for (int e = 1; e <= 10; e++)
		for (int t = 39; t >= 0; t--)
			asha_report(b, t, e, curve(t, e));
	for (int k = 0; k < 3; k++)
		assert_int_equal(asha_rung_count(a, k), asha_rung_count(b, k));

	j = asha_to_json(a);
	json_append(&s1, j);
	parsed = json_parse(s1.buf, s1.len, &err);
	assert_non_null(parsed);
	c = asha_from_json(parsed, &err);
	if (!c)
		fail_msg("asha_from_json: %s", err.buf);
	j2 = asha_to_json(c);
	json_append(&s2, j2);
	assert_string_equal(s1.buf, s2.buf);

	/* the same future decisions from all three */
	for (int t = 100; t < 160; t++)
		for (int e = 1; e <= 10; e++) {
			double v = curve(t, e) - 0.1;
			int da = asha_report(a, t, e, v);

			assert_int_equal(asha_report(b, t, e, v), da);
			assert_int_equal(asha_report(c, t, e, v), da);
		}
	json_decref(j);
	json_decref(j2);
	json_decref(parsed);
	strbuf_release(&s1);
	strbuf_release(&s2);
	strbuf_release(&err);
	asha_free(a);
	asha_free(b);
	asha_free(c);
}

static void test_from_json_errors(void **state)
{
	struct strbuf err = STRBUF_INIT;
	json_t *j = json_pack("{s:i, s:i, s:i, s:i, s:[{s:i, s:[f, f, f]}]}", "version", 1,
			      "min_iter", 1, "eta", 3, "max_iter", 9, "trials", "id", 1, "values",
			      1.0, 2.0, 3.0);

	assert_null(asha_from_json(j, &err));
	assert_non_null(strstr(err.buf, "more values than rungs"));
	json_decref(j);
	strbuf_release(&err);
}

/*
 * W&B allows a fractional eta: with 1.5 the top floor(n / 1.5) go on, and
 * the grace rule gives way once more than 1.5 values are at a rung (an eta
 * truncated to 1 or rounded to 2 decides otherwise below).
 */
static void test_fractional_eta(void **state)
{
	struct asha *a = asha_new(1, 2, 0, GOAL_MINIMIZE);

	assert_int_equal(asha_set_eta(a, 1), -1);
	assert_int_equal(asha_set_eta(a, 1.5), 0);
	assert_true(asha_get_eta(a) == 1.5);
	assert_true(asha_rung_resource(a, 1) == 1.5);    /* 1 * 1.5^k */
	assert_true(asha_rung_resource(a, 2) == 2.25);
	asha_set_grace(a, 0);
	asha_set_min_peers(a, 0);
	assert_int_equal(asha_report(a, 0, 1, 5), ASHA_CONTINUE);   /* n=1 keep 1 */
	assert_int_equal(asha_report(a, 1, 1, 3), ASHA_CONTINUE);   /* n=2 keep 1: best */
	assert_int_equal(asha_report(a, 2, 1, 4), ASHA_CONTINUE);   /* n=3 keep 2: 1 better */
	assert_int_equal(asha_report(a, 3, 1, 6), ASHA_PRUNE);      /* n=4 keep 2: 3 better */
	assert_int_equal(asha_set_eta(a, 2), -1);                  /* after the first report */
	asha_free(a);

	a = asha_new(1, 2, 0, GOAL_MINIMIZE);   /* grace on, the default */
	asha_set_eta(a, 1.5);
	assert_int_equal(asha_report(a, 0, 1, 5), ASHA_CONTINUE);   /* alone */
	assert_int_equal(asha_report(a, 1, 1, 9), ASHA_PRUNE);      /* 2 > 1.5 values, worse */
	asha_free(a);
}

/*
 * W&B's bands for max_iter 100, s 3, eta 3 are 3, 11, 33: the rungs as
 * given, max_iter the end; a snapshot carries them and the real eta.
 */
static void test_explicit_rungs(void **state)
{
	static const double bands[] = { 3, 11, 33 }, bad[] = { 3, 3, 33 };
	struct asha *a = asha_new(3, 3, 100, GOAL_MINIMIZE), *b;
	struct strbuf err = STRBUF_INIT;
	json_t *j, *k;

	assert_int_equal(asha_set_rungs(a, bad, 3), -1);
	assert_int_equal(asha_set_rungs(a, bands, 3), 0);
	assert_int_equal(asha_set_eta(a, 1.5), 0);
	assert_true(asha_rung_resource(a, 0) == 3);
	assert_true(asha_rung_resource(a, 1) == 11);
	assert_true(asha_rung_resource(a, 2) == 33);
	assert_true(isinf(asha_rung_resource(a, 3)));
	assert_int_equal(asha_report(a, 0, 10, 5), ASHA_CONTINUE);
	assert_int_equal(asha_rung_count(a, 0), 1);
	assert_int_equal(asha_rung_count(a, 1), 0);   /* 10 < 11 */
	assert_int_equal(asha_report(a, 0, 11, 4), ASHA_CONTINUE);
	assert_int_equal(asha_rung_count(a, 1), 1);
	assert_int_equal(asha_report(a, 0, 99, 3), ASHA_CONTINUE);
	assert_int_equal(asha_rung_count(a, 2), 1);
	assert_int_equal(asha_report(a, 1, 3, 9), ASHA_PRUNE);
	assert_int_equal(asha_set_rungs(a, bands, 3), -1);           /* after the first report */

	j = asha_to_json(a);
	assert_true(json_number_value(json_object_get(j, "eta")) == 1.5);
	assert_int_equal(json_array_size(json_object_get(j, "rungs")), 3);
	assert_true(json_number_value(json_array_get(json_object_get(j, "rungs"), 1)) == 11);
	b = asha_from_json(j, &err);
	assert_non_null(b);
	assert_true(asha_get_eta(b) == 1.5);
	assert_true(asha_rung_resource(b, 1) == 11);
	assert_true(isinf(asha_rung_resource(b, 3)));
	assert_int_equal(asha_is_pruned(b, 1), 1);
	k = asha_to_json(b);
	assert_true(json_equal(j, k));
	json_decref(k);
	asha_free(b);

	/* rungs that are not increasing are refused */
	json_array_set_new(json_object_get(j, "rungs"), 2, json_real(2));
	assert_null(asha_from_json(j, &err));
	assert_non_null(strstr(err.buf, "'rungs'"));
	json_decref(j);
	strbuf_release(&err);
	asha_free(a);
}


/*
 * Promotion, by hand: eta 3, rungs at 1 and 3, max_iter 9.  Three trials
 * pause at epoch 1; only the best of the three (floor(3/3) = 1) is promoted,
 * pauses at 3, and while the sweep goes on nothing is promoted from a rung
 * holding one value; closing (nothing running, nothing new) lets the best
 * of each rung go on, so trial 3 trains to the end and 1 and 2 stay paused.
 */
static void test_promotion(void **state)
{
	struct asha *a = asha_new(1, 3, 9, GOAL_MINIMIZE), *b;
	json_t *j;
	struct strbuf err = STRBUF_INIT;

	asha_set_promotion(a, 1);
	assert_int_equal(asha_report(a, 1, 0.5, 9), ASHA_CONTINUE);   /* below the first rung */
	assert_int_equal(asha_report(a, 1, 1, 0.5), ASHA_PAUSE);
	assert_int_equal(asha_report(a, 2, 1, 0.9), ASHA_PAUSE);
	assert_int_equal(asha_promote_next(a, 0), 0);                 /* 2 values: none yet */
	assert_int_equal(asha_report(a, 3, 1, 0.2), ASHA_PAUSE);
	assert_true(asha_is_paused(a, 3));
	assert_int_equal(asha_promote_next(a, 0), 3);
	assert_false(asha_is_paused(a, 3));
	assert_int_equal(asha_promote_next(a, 0), 0);                 /* 3 was the one */
	assert_int_equal(asha_rung_went_on(a, 0), 1);
	assert_int_equal(asha_report(a, 3, 2, 0.15), ASHA_CONTINUE);
	assert_int_equal(asha_report(a, 3, 3, 0.1), ASHA_PAUSE);
	assert_int_equal(asha_promote_next(a, 0), 0);
	assert_false(asha_is_pruned(a, 1));

	/* a snapshot and a replay in another order, states restored, decide the same */
	j = asha_to_json(a);
	b = asha_from_json(j, &err);
	assert_non_null(b);
	assert_true(asha_get_promotion(b));
	assert_int_equal(asha_promote_next(b, 0), 0);
	assert_int_equal(asha_promote_next(b, 1), 3);
	asha_free(b);
	json_decref(j);
	b = asha_new(1, 3, 9, GOAL_MINIMIZE);
	asha_set_promotion(b, 1);
	asha_report(b, 3, 1, 0.2);
	asha_report(b, 2, 1, 0.9);
	asha_report(b, 3, 2, 0.15);
	asha_report(b, 1, 1, 0.5);
	asha_report(b, 3, 3, 0.1);
	assert_true(asha_is_paused(b, 1) && asha_is_paused(b, 2) && asha_is_paused(b, 3));
	assert_int_equal(asha_promote_next(b, 1), 3);
	asha_free(b);

	assert_int_equal(asha_promote_next(a, 1), 3);                 /* closing: on to the end */
	assert_int_equal(asha_report(a, 3, 9, 0.05), ASHA_CONTINUE);
	asha_set_trial(a, 3, ASHA_TRIAL_DONE);
	assert_int_equal(asha_promote_next(a, 1), 0);                 /* 1 and 2: not the best */
	assert_true(asha_is_paused(a, 1) && asha_is_paused(a, 2));
	asha_free(a);
	strbuf_release(&err);
}

/*
 * 27 trials on 4 workers whose epochs take different times, promotions
 * preferred over new trials, as dtsched runs them: every rung k ends with
 * at least floor(27 / 3^k) values, at least one trial trains to max_iter,
 * and every other trial ends paused.  200 random value and time draws.
 */
static void test_promotion_parallel(void **state)
{
	for (int round = 0; round < 200; round++) {
		struct asha *a = asha_new(1, 3, 27, GOAL_MINIMIZE);
		struct rng r;
		double f[28], speed[28], clock[4] = { 0 };
		int epoch[28] = { 0 }, slot[4] = { 0 }, started = 0, completed = 0;

		rng_seed(&r, (uint64_t)round);
		asha_set_promotion(a, 1);
		for (int i = 1; i <= 27; i++) {
			f[i] = rng_uniform01(&r);
			speed[i] = 0.5 + rng_uniform01(&r);
		}
		for (;;) {
			int w = -1, id;

			/* fill free workers: a promotion first, else a new trial */
			for (int k = 0; k < 4; k++) {
				int running = 0;

				for (int m = 0; m < 4; m++)
					running += slot[m] != 0;
				if (slot[k])
					continue;
				id = asha_promote_next(a, started == 27 && !running);
				if (!id && started < 27)
					id = ++started;
				slot[k] = id;
			}
			for (int k = 0; k < 4; k++)
				if (slot[k] && (w < 0 || clock[k] + speed[slot[k]] <
						  clock[w] + speed[slot[w]]))
					w = k;
			if (w < 0)
				break;
			id = slot[w];
			clock[w] += speed[id];
			epoch[id]++;
			if (epoch[id] == 27) {
				completed++;
				asha_set_trial(a, id, ASHA_TRIAL_DONE);
				slot[w] = 0;
			} else if (asha_report(a, id, epoch[id], f[id] + 1.0 / epoch[id]) ==
				   ASHA_PAUSE) {
				slot[w] = 0;
			}
		}
		assert_int_equal(asha_rung_count(a, 0), 27);
		assert_true(asha_rung_count(a, 1) >= 9);
		assert_true(asha_rung_count(a, 2) >= 3);
		assert_true(completed >= 1);
		for (int i = 1; i <= 27; i++)
			assert_true(epoch[i] == 27 || asha_is_paused(a, i));
		asha_free(a);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rungs),
		cmocka_unit_test(test_scenario),
		cmocka_unit_test(test_min_peers),
		cmocka_unit_test(test_grace),
		cmocka_unit_test(test_grace_trains_enough),
		cmocka_unit_test(test_rung_check),
		cmocka_unit_test(test_rung_check_json),
		cmocka_unit_test(test_rung_check_replay),
		cmocka_unit_test(test_maximize_and_nan),
		cmocka_unit_test(test_random_against_reference),
		cmocka_unit_test(test_replay_and_json),
		cmocka_unit_test(test_from_json_errors),
		cmocka_unit_test(test_fractional_eta),
		cmocka_unit_test(test_explicit_rungs),
		cmocka_unit_test(test_promotion),
		cmocka_unit_test(test_promotion_parallel),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
