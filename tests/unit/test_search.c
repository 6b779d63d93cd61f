/*
 * test_search.c - unit tests for scheduler/search.c (grid, random, TPE) and
 * the double helpers of lib/rng.c.
 *
 * Sweep configs are built by hand (add_param) rather than loaded, so these
 * tests depend only on config.h's structs.  Statistical checks use fixed
 * seeds and bounds several standard errors wide: they are deterministic,
 * and would only start failing if the sampler's distribution changed.
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
#include "scheduler/search.h"

/* ------------------------------------------------------------ helpers */

static struct sweep_param *add_param(struct sweep_config *c, const char *name,
				     enum param_kind kind, double a, double b)
{
	struct sweep_param *p;

	c->params = xrealloc(c->params, (c->nr_params + 1) * sizeof(*c->params));
	p = &c->params[c->nr_params++];
	memset(p, 0, sizeof(*p));
	strvec_init(&p->values);
	p->name = xstrdup(name);
	p->kind = kind;
	p->q = 1;
	p->sigma = 1;
	if (kind == PARAM_NORMAL) {
		p->mu = a;
		p->sigma = b;
	} else {
		p->min = a;
		p->max = b;
	}
	p->pos.line = 3 + (int)c->nr_params;
	p->pos.col = 3;
	return p;
}

static void add_values(struct sweep_config *c, const char *name, const char *const *vals)
{
	struct sweep_param *p = add_param(c, name, PARAM_VALUES, 0, 0);

	for (; *vals; vals++)
		strvec_push(&p->values, *vals);
}

static void cfg_init(struct sweep_config *c, enum sweep_method m, enum sweep_goal goal)
{
	memset(c, 0, sizeof(*c));
	c->path = xstrdup("sweep.yaml");
	c->method = m;
	c->goal = goal;
}

static void cfg_release(struct sweep_config *c)
{
	for (size_t i = 0; i < c->nr_params; i++) {
		free(c->params[i].name);
		strvec_clear(&c->params[i].values);
	}
	free(c->params);
	free(c->path);
	memset(c, 0, sizeof(*c));
}

static struct search *must_new(const struct sweep_config *c, uint64_t seed)
{
	struct strbuf err = STRBUF_INIT;
	struct search *s = search_new(c, seed, &err);

	if (!s)
		fail_msg("search_new: %s", err.buf);
	strbuf_release(&err);
	return s;
}

static double num_of(const struct suggestion *sg, const char *name)
{
	const struct suggestion_item *it = suggestion_get(sg, name);

	assert_non_null(it);
	assert_true(it->is_num);
	return it->num;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(double), cmp_dbl);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ------------------------------------------------------------- format */

static void test_format_double(void **state)
{
	char buf[32];
	struct rng r;

	search_format_double(buf, sizeof(buf), 0.1);
	assert_string_equal(buf, "0.1");
	search_format_double(buf, sizeof(buf), 1e-5);
	assert_string_equal(buf, "1e-05");
	search_format_double(buf, sizeof(buf), 512);
	assert_string_equal(buf, "512");
	search_format_double(buf, sizeof(buf), -0.0);
	assert_string_equal(buf, "0");
	search_format_double(buf, sizeof(buf), 0.1 + 0.2);
	assert_string_equal(buf, "0.30000000000000004");
	rng_seed(&r, 1);
	for (int i = 0; i < 10000; i++) {
		double v = (rng_uniform01(&r) - 0.5) * pow(10, (double)rng_below(&r, 40) - 20);

		search_format_double(buf, sizeof(buf), v);
		assert_true(strtod(buf, NULL) == v || v == 0);
	}
}

/* --------------------------------------------------------------- rng */

static void test_rng_helpers(void **state)
{
	struct rng r, r2;
	double w[3] = { 1, 0, 3 }, sum = 0, sq = 0;
	int count[3] = { 0 };
	const int n = 40000;

	rng_seed(&r, 7);
	rng_seed(&r2, 7);
	for (int i = 0; i < 100; i++)
		assert_true(rng_u64(&r) == rng_u64(&r2));
	for (int i = 0; i < n; i++) {
		double u = rng_uniform01(&r), g = rng_gauss(&r);

		assert_true(u >= 0 && u < 1);
		sum += g;
		sq += g * g;
		count[rng_choice(&r, w, 3)]++;
	}
	assert_true(fabs(sum / n) < 0.03);
	assert_true(fabs(sq / n - 1) < 0.05);
	assert_int_equal(count[1], 0);
	assert_true(fabs(count[2] / (double)n - 0.75) < 0.02);
	assert_true(rng_mix(1, 2, 3) != rng_mix(1, 3, 2));
}

/* --------------------------------------------------------------- grid */

static void test_grid_order_and_exhaustion(void **state)
{
	static const char *const lr[] = { "0.1", "1e-3", NULL };
	static const char *const opt[] = { "sgd", "adam", "adamw", NULL };
	static const char *const expect[][4] = {
		{ "0.1", "sgd", "fixed", "1" }, { "0.1", "sgd", "fixed", "2" },
		{ "0.1", "adam", "fixed", "1" }, { "0.1", "adam", "fixed", "2" },
		{ "0.1", "adamw", "fixed", "1" }, { "0.1", "adamw", "fixed", "2" },
		{ "1e-3", "sgd", "fixed", "1" }, { "1e-3", "sgd", "fixed", "2" },
		{ "1e-3", "adam", "fixed", "1" }, { "1e-3", "adam", "fixed", "2" },
		{ "1e-3", "adamw", "fixed", "1" }, { "1e-3", "adamw", "fixed", "2" },
	};
	struct sweep_config c;
	struct suggestion sg = SUGGESTION_INIT;
	struct search *s;
	struct sweep_param *p;

	cfg_init(&c, SWEEP_GRID, GOAL_MINIMIZE);
	add_values(&c, "lr", lr);
	add_values(&c, "opt.name", opt);
	p = add_param(&c, "tag", PARAM_VALUE, 0, 0);
	strvec_push(&p->values, "fixed");
	add_param(&c, "layers", PARAM_INT_UNIFORM, 1, 2);
	s = must_new(&c, 1);
	assert_int_equal(search_grid_size(s), 12);
	for (size_t i = 0; i < ARRAY_SIZE(expect); i++) {
		assert_int_equal(search_suggest(s, &sg), 0);
		assert_int_equal(sg.seq, (long long)i);
		assert_int_equal(sg.nr, 4);
		assert_string_equal(sg.items[0].name, "lr");
		assert_string_equal(sg.items[1].name, "opt.name");
		for (int k = 0; k < 4; k++)
			assert_string_equal(sg.items[k].value, expect[i][k]);
	}
	assert_true(sg.items[0].is_num && sg.items[0].num == 1e-3);
	assert_false(sg.items[1].is_num);
	assert_int_equal(search_suggest(s, &sg), 1);
	assert_int_equal(sg.nr, 0);
	assert_int_equal(search_suggest(s, &sg), 1);
	suggestion_release(&sg);
	search_free(s);
	cfg_release(&c);
}

static void test_grid_refuses_continuous(void **state)
{
	struct sweep_config c;
	struct strbuf err = STRBUF_INIT;

	cfg_init(&c, SWEEP_GRID, GOAL_MINIMIZE);
	add_param(&c, "lr", PARAM_LOG_UNIFORM, 1e-4, 1e-1);
	assert_null(search_new(&c, 1, &err));
	assert_non_null(strstr(err.buf, "sweep.yaml:4:3: parameter 'lr': grid search needs"));
	strbuf_release(&err);
	cfg_release(&c);
}

static void test_bad_spaces(void **state)
{
	static const struct {
		enum param_kind kind;
		double a, b, q;
		const char *msg;
	} cases[] = {
		{ PARAM_LOG_UNIFORM, 0, 1, 1, "log_uniform_values needs 0 < min <= max" },
		{ PARAM_UNIFORM, 2, 1, 1, "uniform needs min <= max" },
		{ PARAM_Q_UNIFORM, 0.1, 0.2, 0.5, "no multiple of q=0.5 lies in [0.1, 0.2]" },
		{ PARAM_Q_UNIFORM, 0, 1, 0, "q_uniform needs q > 0" },
		{ PARAM_INT_UNIFORM, 1.5, 1.7, 1, "int_uniform needs an integer" },
		{ PARAM_NORMAL, 0, -1, 1, "normal needs a finite mu and sigma > 0" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct sweep_config c;
		struct strbuf err = STRBUF_INIT;

		cfg_init(&c, SWEEP_RANDOM, GOAL_MINIMIZE);
		add_param(&c, "x", cases[i].kind, cases[i].a, cases[i].b)->q = cases[i].q;
		assert_null(search_new(&c, 1, &err));
		if (!strstr(err.buf, cases[i].msg))
			fail_msg("case %zu: expected '%s' in '%s'", i, cases[i].msg, err.buf);
		assert_non_null(strstr(err.buf, "parameter 'x'"));
		strbuf_release(&err);
		cfg_release(&c);
	}
}

/* ------------------------------------------------------------- random */

static void test_random_semantics(void **state)
{
	static const char *const cat[] = { "a", "b", "c", NULL };
	struct sweep_config c;
	struct suggestion sg = SUGGESTION_INIT;
	struct search *s;
	const int n = 4000;
	double *logv = xcalloc(n, sizeof(double)), nsum = 0, nsq = 0, usum = 0;
	int int_seen[6] = { 0 }, q_seen[4] = { 0 }, cat_seen[3] = { 0 };

	cfg_init(&c, SWEEP_RANDOM, GOAL_MINIMIZE);
	add_param(&c, "u", PARAM_UNIFORM, -2, 3);
	add_param(&c, "i", PARAM_INT_UNIFORM, 2, 7);
	add_param(&c, "lr", PARAM_LOG_UNIFORM, 1e-5, 1e-1);
	add_param(&c, "q", PARAM_Q_UNIFORM, 0.1, 1.0)->q = 0.3;
	add_param(&c, "n", PARAM_NORMAL, 5, 2);
	add_values(&c, "cat", cat);
	add_param(&c, "const", PARAM_UNIFORM, 4, 4);
	s = must_new(&c, 42);
	for (int k = 0; k < n; k++) {
		double u, i, lr, q;
		char *end;

		assert_int_equal(search_suggest(s, &sg), 0);
		u = num_of(&sg, "u");
		i = num_of(&sg, "i");
		lr = num_of(&sg, "lr");
		q = num_of(&sg, "q");
		assert_true(u >= -2 && u <= 3);
		usum += u;
		assert_true(i >= 2 && i <= 7 && i == floor(i));
		assert_null(strchr(suggestion_get(&sg, "i")->value, '.'));
		int_seen[(int)i - 2]++;
		assert_true(lr >= 1e-5 && lr <= 1e-1);
		logv[k] = log10(lr);
		/* multiples of 0.3 inside [0.1, 1.0]: 0.3, 0.6, 0.9, printed exactly */
		assert_true(q >= 0.1 && q <= 1.0);
		assert_true(!strcmp(suggestion_get(&sg, "q")->value, "0.3") ||
			    !strcmp(suggestion_get(&sg, "q")->value, "0.6") ||
			    !strcmp(suggestion_get(&sg, "q")->value, "0.9"));
		q_seen[(int)lround(q / 0.3)]++;
		nsum += num_of(&sg, "n");
		nsq += num_of(&sg, "n") * num_of(&sg, "n");
		cat_seen[suggestion_get(&sg, "cat")->value[0] - 'a']++;
		assert_string_equal(suggestion_get(&sg, "const")->value, "4");
		/* values round-trip */
		assert_true(strtod(suggestion_get(&sg, "lr")->value, &end) == lr && !*end);
	}
	assert_true(fabs(usum / n - 0.5) < 0.1);
	for (int k = 0; k < 6; k++)   /* each of 6 integers ~ n/6 = 667 */
		assert_true(int_seen[k] > 550 && int_seen[k] < 790);
	for (int k = 0; k < 3; k++)
		assert_true(cat_seen[k] > 1200 && cat_seen[k] < 1470);
	assert_int_equal(q_seen[0], 0);
	assert_true(q_seen[1] > 0 && q_seen[2] > 0 && q_seen[3] > 0);
	/* log-uniform: median at the geometric mean 1e-3, uniform in log space */
	assert_true(fabs(median(logv, n) + 3) < 0.1);
	assert_true(logv[n / 4] > -4.15 && logv[n / 4] < -3.85);
	assert_true(fabs(nsum / n - 5) < 0.1);
	assert_true(fabs(sqrt(nsq / n - (nsum / n) * (nsum / n)) - 2) < 0.1);
	free(logv);
	suggestion_release(&sg);
	search_free(s);
	cfg_release(&c);
}

static void test_random_reproducible(void **state)
{
	static const char *const cat[] = { "x", "y", NULL };
	struct sweep_config c;
	struct search *a, *b, *d;
	struct suggestion sa = SUGGESTION_INIT, sb = SUGGESTION_INIT, sd = SUGGESTION_INIT;
	int differ = 0;

	cfg_init(&c, SWEEP_RANDOM, GOAL_MINIMIZE);
	add_param(&c, "lr", PARAM_LOG_UNIFORM, 1e-5, 1);
	add_values(&c, "cat", cat);
	a = must_new(&c, 123);
	b = must_new(&c, 123);
	d = must_new(&c, 124);
	for (int k = 0; k < 50; k++) {
		search_suggest(a, &sa);
		search_suggest(b, &sb);
		search_suggest(d, &sd);
		for (size_t i = 0; i < sa.nr; i++)
			assert_string_equal(sa.items[i].value, sb.items[i].value);
		differ += strcmp(sa.items[0].value, sd.items[0].value) != 0;
		/* observations must not change random suggestions */
		search_observe(a, &sa, 1.0, SEARCH_COMPLETED);
	}
	assert_true(differ > 45);
	suggestion_release(&sa);
	suggestion_release(&sb);
	suggestion_release(&sd);
	search_free(a);
	search_free(b);
	search_free(d);
	cfg_release(&c);
}

/* ---------------------------------------------------------------- TPE */

static double quad2(double x, double y)
{
	return (x - 1.3) * (x - 1.3) + 4 * (y + 0.7) * (y + 0.7);
}

/* Best value of quad2 after `n` trials of `method` with `seed`. */
static double run_quad(enum sweep_method method, uint64_t seed, int n, int multivariate)
{
	struct tpe_options o;
	struct sweep_config c;
	struct suggestion sg = SUGGESTION_INIT;
	struct search *s;
	double best = INFINITY;

	cfg_init(&c, method, GOAL_MINIMIZE);
	add_param(&c, "x", PARAM_UNIFORM, -5, 5);
	add_param(&c, "y", PARAM_UNIFORM, -5, 5);
	s = must_new(&c, seed);
	search_get_tpe_options(s, &o);
	o.multivariate = multivariate;
	search_set_tpe_options(s, &o);
	for (int k = 0; k < n; k++) {
		double x, y, v;

		assert_int_equal(search_suggest(s, &sg), 0);
		x = num_of(&sg, "x");
		y = num_of(&sg, "y");
		assert_true(x >= -5 && x <= 5 && y >= -5 && y <= 5);
		v = quad2(x, y);
		best = fmin(best, v);
		assert_int_equal(search_observe(s, &sg, v, SEARCH_COMPLETED), 0);
	}
	suggestion_release(&sg);
	search_free(s);
	cfg_release(&c);
	return best;
}

static void test_tpe_beats_random(void **state)
{
	for (int mv = 0; mv <= 1; mv++) {
		double tpe[10], rnd[10], mt, mr;

		for (int seed = 0; seed < 10; seed++) {
			tpe[seed] = run_quad(SWEEP_BAYES, (uint64_t)seed + 1, 60, mv);
			rnd[seed] = run_quad(SWEEP_RANDOM, (uint64_t)seed + 1, 60, mv);
		}
		mt = median(tpe, 10);
		mr = median(rnd, 10);
		print_message("quadratic, 60 trials, median best of 10 seeds: %s tpe %.4g, "
			      "random %.4g\n", mv ? "multivariate" : "univariate", mt, mr);
		if (!(mt < mr / 2))
			fail_msg("expected %s TPE's median best (%g) below half of random's (%g)",
				 mv ? "multivariate" : "univariate", mt, mr);
	}
}

/*
 * Mixed space: the objective prefers optimizer "adam", 3 layers, lr 1e-3 and
 * batch 128; TPE must stay inside the space and, after the startup phase,
 * pick the best choices most of the time.
 */
static void tpe_mixed_space(int multivariate)
{
	struct tpe_options to;
	static const char *const opt[] = { "sgd", "adam", "rmsprop", "adagrad", NULL };
	struct sweep_config c;
	struct suggestion sg = SUGGESTION_INIT;
	struct search *s;
	int adam_late = 0, layers_late = 0;
	const int n = 120, late = 60;

	cfg_init(&c, SWEEP_BAYES, GOAL_MAXIMIZE);
	add_values(&c, "opt", opt);
	add_param(&c, "layers", PARAM_INT_UNIFORM, 1, 8);
	add_param(&c, "lr", PARAM_LOG_UNIFORM, 1e-6, 1);
	add_param(&c, "batch", PARAM_Q_UNIFORM, 16, 512)->q = 16;
	add_param(&c, "wd", PARAM_NORMAL, 0, 1);
	s = must_new(&c, 5);
	search_get_tpe_options(s, &to);
	to.multivariate = multivariate;
	search_set_tpe_options(s, &to);
	for (int k = 0; k < n; k++) {
		const char *o;
		double layers, lr, batch, acc;

		assert_int_equal(search_suggest(s, &sg), 0);
		o = suggestion_get(&sg, "opt")->value;
		layers = num_of(&sg, "layers");
		lr = num_of(&sg, "lr");
		batch = num_of(&sg, "batch");
		assert_true(layers >= 1 && layers <= 8 && layers == floor(layers));
		assert_true(lr >= 1e-6 && lr <= 1);
		assert_true(batch >= 16 && batch <= 512 && fmod(batch, 16) == 0);
		assert_true(isfinite(num_of(&sg, "wd")));
		acc = (!strcmp(o, "adam") ? 1.0 : 0.0) - 0.1 * fabs(layers - 3) -
		      0.05 * pow(log10(lr) + 3, 2) - 0.01 * fabs(log2(batch) - 7) -
		      0.01 * pow(num_of(&sg, "wd"), 2);
		if (k >= n - late) {
			adam_late += !strcmp(o, "adam");
			layers_late += fabs(layers - 3) <= 1;
		}
		search_observe(s, &sg, acc, SEARCH_COMPLETED);
	}
	print_message("mixed space, %s, last %d of %d: adam %d, layers 2..4 %d\n",
		      multivariate ? "multivariate" : "univariate", late, n, adam_late, layers_late);
	assert_true(adam_late > late * 6 / 10);      /* random: 1/4 */
	assert_true(layers_late > late * 6 / 10);    /* random: 3/8 */
	suggestion_release(&sg);
	search_free(s);
	cfg_release(&c);
}

static void test_tpe_mixed_space(void **state)
{
	tpe_mixed_space(0);
	tpe_mixed_space(1);
}

/*
 * Pruned trials rank after completed ones: 12 completed trials near x = 2
 * with value 5 and 12 pruned trials near x = 8 with a better-looking 0.1
 * (a partial value).  TPE must model the completed ones as good.
 */
static void test_tpe_pruned_rank_after_completed(void **state)
{
	struct sweep_config c;
	struct suggestion sg = SUGGESTION_INIT;
	struct search *s;
	int near_completed = 0;

	cfg_init(&c, SWEEP_BAYES, GOAL_MINIMIZE);
	add_param(&c, "x", PARAM_UNIFORM, 0, 10);
	s = must_new(&c, 9);
	for (int k = 0; k < 24; k++) {
		char buf[32];

		assert_int_equal(search_suggest(s, &sg), 0);
		/* overwrite the value: a hand-built history */
		snprintf(buf, sizeof(buf), "%g", k % 2 ? 1.5 + 0.1 * k / 2 : 7.5 + 0.1 * k / 2);
		free(sg.items[0].value);
		sg.items[0].value = xstrdup(buf);
		sg.items[0].num = strtod(buf, NULL);
		if (k % 2)
			search_observe_at(s, &sg, 5.0 + 0.01 * k, SEARCH_COMPLETED, 27);
		else
			search_observe_at(s, &sg, 0.1 + 0.01 * k, SEARCH_PRUNED, 1);
	}
	for (int k = 0; k < 40; k++) {
		search_suggest(s, &sg);
		near_completed += num_of(&sg, "x") < 5;
	}
	assert_true(near_completed > 30);
	suggestion_release(&sg);
	search_free(s);
	cfg_release(&c);
}

/* for test_tpe_large_history: trial k's value and its rank order (value, then seq) */
static double big_vals[3000];

static int cmp_by_value(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	if (big_vals[x] != big_vals[y])
		return big_vals[x] < big_vals[y] ? -1 : 1;
	return (x > y) - (x < y);
}

/*
 * TPE with a long history (search.c, TPE_MAX_BAD): with 3000 observed trials
 * (and a few failed ones), observed in no particular order, the suggestion is
 * exactly the one of a search that saw only the 25 best and 1000 of the rest,
 * evenly spaced by rank: the same as TPE over all of them up to 1025.
 */
static void test_tpe_large_history(void **state)
{
	static const char *const opts[] = { "sgd", "adam", "adamw", NULL };
	enum { N = 3000, GOOD = 25, KEEP = 1000 };
	struct sweep_config c;
	struct suggestion *sg = xcalloc(N, sizeof(*sg)), a = SUGGESTION_INIT, b = SUGGESTION_INIT;
	struct search *big, *small;
	struct tpe_options o;
	int order[N];

	cfg_init(&c, SWEEP_BAYES, GOAL_MINIMIZE);
	add_param(&c, "x", PARAM_UNIFORM, 0, 1);
	add_param(&c, "lr", PARAM_LOG_UNIFORM, 1e-5, 1);
	add_values(&c, "opt", opts);
	big = must_new(&c, 17);
	small = must_new(&c, 17);
	search_get_tpe_options(big, &o);
	o.n_startup = N + 1;   /* the history: draws from the prior */
	search_set_tpe_options(big, &o);
	for (int k = 0; k < N; k++) {
		sg[k] = (struct suggestion)SUGGESTION_INIT;
		assert_int_equal(search_suggest(big, &sg[k]), 0);
		big_vals[k] = (num_of(&sg[k], "x") - 0.3) * (num_of(&sg[k], "x") - 0.3) +
			      0.01 * fabs(log10(num_of(&sg[k], "lr")) + 3) +
			      (strcmp(suggestion_get(&sg[k], "opt")->value, "adam") ? 0.05 : 0);
	}
	/* observed in batches of 64, each from its end, every 97th failed */
	for (int k = 0; k < N; k += 64)
		for (int i = (k + 64 < N ? k + 64 : N) - 1; i >= k; i--)
			assert_int_equal(search_observe(big, &sg[i], i % 97 ? big_vals[i] : NAN,
							i % 97 ? SEARCH_COMPLETED : SEARCH_FAILED), 0);
	for (int k = 0, n = 0; k < N; k++)
		if (k % 97)
			order[n++] = k;
	qsort(order, N - (N + 96) / 97, sizeof(int), cmp_by_value);
	/* small: the 25 best, then ranks 25 + k * nb / 1000 */
	for (int k = 0; k < GOOD + KEEP; k++) {
		int nb = N - (N + 96) / 97 - GOOD, r = k < GOOD ? k : GOOD + (k - GOOD) * nb / KEEP;

		assert_int_equal(search_observe(small, &sg[order[r]], big_vals[order[r]],
						SEARCH_COMPLETED), 0);
	}
	o.n_startup = 10;
	search_set_tpe_options(big, &o);
	search_set_tpe_options(small, &o);
	search_set_next_seq(small, N);
	for (int k = 0; k < 3; k++) {
		assert_int_equal(search_suggest(big, &a), 0);
		assert_int_equal(search_suggest(small, &b), 0);
		assert_int_equal(a.seq, b.seq);
		for (size_t i = 0; i < a.nr; i++)
			assert_string_equal(a.items[i].value, b.items[i].value);
	}
	for (int k = 0; k < N; k++)
		suggestion_release(&sg[k]);
	free(sg);
	suggestion_release(&a);
	suggestion_release(&b);
	search_free(big);
	search_free(small);
	cfg_release(&c);
}

static void test_observe_rejects_foreign(void **state)
{
	static const char *const cat[] = { "a", "b", NULL };
	struct sweep_config c;
	struct suggestion sg = SUGGESTION_INIT;
	struct search *s;

	cfg_init(&c, SWEEP_BAYES, GOAL_MINIMIZE);
	add_values(&c, "cat", cat);
	add_param(&c, "x", PARAM_UNIFORM, 0, 1);
	s = must_new(&c, 1);
	search_suggest(s, &sg);
	free(sg.items[0].value);
	sg.items[0].value = xstrdup("zzz");
	assert_int_equal(search_observe(s, &sg, 1, SEARCH_COMPLETED), -1);
	free(sg.items[0].value);
	sg.items[0].value = xstrdup("b");
	sg.items[1].num = 2;   /* outside [0, 1] */
	assert_int_equal(search_observe(s, &sg, 1, SEARCH_COMPLETED), -1);
	sg.items[1].num = 0.5;
	assert_int_equal(search_observe(s, &sg, 1, SEARCH_COMPLETED), 0);
	suggestion_release(&sg);
	search_free(s);
	cfg_release(&c);
}

/* ------------------------------------------------------------- replay */

static void build_tpe_cfg(struct sweep_config *c)
{
	static const char *const act[] = { "relu", "gelu", "tanh", NULL };

	cfg_init(c, SWEEP_BAYES, GOAL_MINIMIZE);
	add_param(c, "opt.lr", PARAM_LOG_UNIFORM, 1e-5, 1e-1);
	add_param(c, "layers", PARAM_INT_UNIFORM, 1, 6);
	add_values(c, "act", act);
	add_param(c, "drop", PARAM_Q_UNIFORM, 0, 0.5)->q = 0.05;
}

static double fake_loss(const struct suggestion *sg)
{
	return pow(log10(num_of(sg, "opt.lr")) + 3, 2) + fabs(num_of(sg, "layers") - 4) +
	       (strcmp(suggestion_get(sg, "act")->value, "gelu") ? 0.5 : 0) +
	       num_of(sg, "drop");
}

static void assert_same_suggestion(const struct suggestion *a, const struct suggestion *b)
{
	assert_int_equal(a->seq, b->seq);
	assert_int_equal(a->nr, b->nr);
	for (size_t i = 0; i < a->nr; i++) {
		assert_string_equal(a->items[i].name, b->items[i].name);
		assert_string_equal(a->items[i].value, b->items[i].value);
	}
}

static void test_state_roundtrip_and_replay(void **state)
{
	struct sweep_config c;
	struct suggestion sg = SUGGESTION_INIT, s2 = SUGGESTION_INIT, s3 = SUGGESTION_INIT;
	struct suggestion hist[40];
	double vals[40];
	struct search *s, *from_json, *replayed;
	struct strbuf dump = STRBUF_INIT, err = STRBUF_INIT, dump2 = STRBUF_INIT;
	json_t *j, *parsed, *j2;
	struct tpe_options o;

	build_tpe_cfg(&c);
	s = must_new(&c, 77);
	search_get_tpe_options(s, &o);
	o.n_startup = 8;
	search_set_tpe_options(s, &o);
	for (int k = 0; k < 40; k++) {
		hist[k] = (struct suggestion)SUGGESTION_INIT;
		search_suggest(s, &hist[k]);
		vals[k] = fake_loss(&hist[k]);
	}
	/* trials finish out of order; 3 are pruned, 2 fail, 1 still running (39) */
	for (int k = 38; k >= 0; k--) {
		int st = k % 13 == 5 ? SEARCH_PRUNED : k % 17 == 3 ? SEARCH_FAILED : SEARCH_COMPLETED;

		search_observe_at(s, &hist[k], st == SEARCH_FAILED ? NAN : vals[k], st,
				  st == SEARCH_PRUNED ? 3 : 27);
	}

	/* 1. through JSON text */
	j = search_state_to_json(s);
	json_append(&dump, j);
	parsed = json_parse(dump.buf, dump.len, &err);
	assert_non_null(parsed);
	from_json = search_state_from_json(&c, parsed, &err);
	if (!from_json)
		fail_msg("search_state_from_json: %s", err.buf);
	j2 = search_state_to_json(from_json);
	json_append(&dump2, j2);
	assert_string_equal(dump.buf, dump2.buf);

	/* 2. replay: new search, observations in another order, next seq */
	replayed = must_new(&c, 77);
	search_set_tpe_options(replayed, &o);
	for (int k = 0; k < 39; k++) {
		int st = k % 13 == 5 ? SEARCH_PRUNED : k % 17 == 3 ? SEARCH_FAILED : SEARCH_COMPLETED;

		search_observe_at(replayed, &hist[k], st == SEARCH_FAILED ? NAN : vals[k], st,
				  st == SEARCH_PRUNED ? 3 : 27);
	}
	search_set_next_seq(replayed, 40);

	for (int k = 0; k < 15; k++) {
		assert_int_equal(search_suggest(s, &sg), 0);
		assert_int_equal(search_suggest(from_json, &s2), 0);
		assert_int_equal(search_suggest(replayed, &s3), 0);
		assert_same_suggestion(&sg, &s2);
		assert_same_suggestion(&sg, &s3);
		search_observe(s, &sg, fake_loss(&sg), SEARCH_COMPLETED);
		search_observe(from_json, &s2, fake_loss(&s2), SEARCH_COMPLETED);
		search_observe(replayed, &s3, fake_loss(&s3), SEARCH_COMPLETED);
	}

	/* a state saved for another method is refused */
	c.method = SWEEP_RANDOM;
	assert_null(search_state_from_json(&c, parsed, &err));
	assert_non_null(strstr(err.buf, "saved for method 'bayes'"));

	for (int k = 0; k < 40; k++)
		suggestion_release(&hist[k]);
	suggestion_release(&sg);
	suggestion_release(&s2);
	suggestion_release(&s3);
	json_decref(j);
	json_decref(j2);
	json_decref(parsed);
	strbuf_release(&dump);
	strbuf_release(&dump2);
	strbuf_release(&err);
	search_free(s);
	search_free(from_json);
	search_free(replayed);
	cfg_release(&c);
}

/*
 * The multivariate kernels are Scott's rule times bandwidth_factor (0.7 by
 * default): with the same history, suggestions under the default sit closer
 * to the good region than with factor 1 (the former kernels) and farther
 * than with 0.4.  The option is recorded in the state JSON; a state written
 * before it existed is read with factor 1, so it replays as it was made.
 */
static double bandwidth_spread(double factor, struct tpe_options *got)
{
	struct tpe_options o;
	struct sweep_config c;
	struct suggestion sg = SUGGESTION_INIT;
	struct search *s;
	struct rng r;
	double spread = 0;

	cfg_init(&c, SWEEP_BAYES, GOAL_MINIMIZE);
	add_param(&c, "x", PARAM_UNIFORM, 0, 10);
	add_param(&c, "y", PARAM_UNIFORM, 0, 10);
	s = must_new(&c, 21);
	search_get_tpe_options(s, &o);
	if (got)
		*got = o;
	if (factor > 0)
		o.bandwidth_factor = factor;
	search_set_tpe_options(s, &o);
	rng_seed(&r, 4);
	for (int k = 0; k < 60; k++) {
		char buf[32];
		double x = 10 * rng_uniform01(&r), y = 10 * rng_uniform01(&r);

		/* a hand-built history: value = distance to (3, 7) */
		search_suggest(s, &sg);
		snprintf(buf, sizeof(buf), "%.6f", x);
		free(sg.items[0].value);
		sg.items[0].value = xstrdup(buf);
		snprintf(buf, sizeof(buf), "%.6f", y);
		free(sg.items[1].value);
		sg.items[1].value = xstrdup(buf);
		sg.items[0].num = strtod(sg.items[0].value, NULL);
		sg.items[1].num = strtod(sg.items[1].value, NULL);
		assert_int_equal(search_observe(s, &sg, hypot(x - 3, y - 7), SEARCH_COMPLETED), 0);
	}
	for (int k = 0; k < 300; k++) {   /* no observations: 300 draws from one model */
		search_suggest(s, &sg);
		spread += hypot(num_of(&sg, "x") - 3, num_of(&sg, "y") - 7) / 300;
	}
	suggestion_release(&sg);
	search_free(s);
	cfg_release(&c);
	return spread;
}

static void test_tpe_bandwidth_factor(void **state)
{
	struct tpe_options o;
	double narrow = bandwidth_spread(0.4, NULL), dflt = bandwidth_spread(-1, &o);
	double scott = bandwidth_spread(1.0, NULL);
	struct sweep_config c;
	struct search *s, *back;
	struct strbuf err = STRBUF_INIT;
	json_t *j;

	print_message("mean distance of suggestions to the optimum: factor 0.4 %.3f, "
		      "default %.3f, 1.0 %.3f\n", narrow, dflt, scott);
	assert_true(o.bandwidth_factor == 0.7);
	if (!(narrow < dflt && dflt < scott))
		fail_msg("expected narrower kernels to suggest closer to the good points: "
			 "0.4 -> %g, 0.7 -> %g, 1.0 -> %g", narrow, dflt, scott);

	build_tpe_cfg(&c);
	s = must_new(&c, 5);
	o.bandwidth_factor = 0.55;
	search_set_tpe_options(s, &o);
	j = search_state_to_json(s);
	assert_true(json_real_value(json_object_get(json_object_get(j, "tpe"),
						    "bandwidth_factor")) == 0.55);
	back = search_state_from_json(&c, j, &err);
	assert_non_null(back);
	search_get_tpe_options(back, &o);
	assert_true(o.bandwidth_factor == 0.55);
	search_free(back);
	json_object_del(json_object_get(j, "tpe"), "bandwidth_factor");
	back = search_state_from_json(&c, j, &err);
	assert_non_null(back);
	search_get_tpe_options(back, &o);
	assert_true(o.bandwidth_factor == 1.0);   /* the rule the old state was made under */
	search_free(back);
	o.bandwidth_factor = -3;                  /* refused: back to the default */
	search_set_tpe_options(s, &o);
	search_get_tpe_options(s, &o);
	assert_true(o.bandwidth_factor == 0.7);
	json_decref(j);
	strbuf_release(&err);
	search_free(s);
	cfg_release(&c);
}

/*
 * Categorical kernels of the multivariate estimator.  By default (cat_beta
 * < 0) a trial's kernel smooths its choice by prior_weight / (m + 1) per
 * choice, m the trials in its group, so g (most of the trials) is sharp
 * and l (a few) is broad: a choice that nobody tried scores high, a choice
 * tried and found bad scores low.  With the former fixed beta 0.5, g was as
 * smooth as l and an untried choice looked no better than a failed one.
 *
 * History: 60 trials; "a" near x = 3 is good, "a" elsewhere and all of "b"
 * are bad, "c" was never tried.  Returns how many of 300 suggestions from
 * that one model pick "c" and "b".
 */
static void cat_kernel_counts(double cat_beta, struct tpe_options *got, int *n_c, int *n_b)
{
	static const char *const opt[] = { "a", "b", "c", NULL };
	struct tpe_options o;
	struct sweep_config c;
	struct suggestion sg = SUGGESTION_INIT;
	struct search *s;
	struct rng r;

	cfg_init(&c, SWEEP_BAYES, GOAL_MINIMIZE);
	add_values(&c, "opt", opt);
	add_param(&c, "x", PARAM_UNIFORM, 0, 10);
	s = must_new(&c, 17);
	search_get_tpe_options(s, &o);
	if (got)
		*got = o;
	if (!isnan(cat_beta))
		o.cat_beta = cat_beta;
	search_set_tpe_options(s, &o);
	rng_seed(&r, 8);
	for (int k = 0; k < 60; k++) {
		char buf[32];
		double x = 10 * rng_uniform01(&r);
		int is_a = k % 2 == 0;

		search_suggest(s, &sg);
		free(sg.items[0].value);
		sg.items[0].value = xstrdup(is_a ? "a" : "b");
		snprintf(buf, sizeof(buf), "%.6f", x);
		free(sg.items[1].value);
		sg.items[1].value = xstrdup(buf);
		sg.items[1].num = strtod(buf, NULL);
		assert_int_equal(search_observe(s, &sg, fabs(x - 3) + (is_a ? 0 : 5),
						SEARCH_COMPLETED), 0);
	}
	*n_c = *n_b = 0;
	for (int k = 0; k < 300; k++) {   /* no observations: 300 draws from one model */
		const char *v;

		search_suggest(s, &sg);
		v = suggestion_get(&sg, "opt")->value;
		*n_c += !strcmp(v, "c");
		*n_b += !strcmp(v, "b");
	}
	suggestion_release(&sg);
	search_free(s);
	cfg_release(&c);
}

static void test_tpe_categorical_kernel(void **state)
{
	struct tpe_options o;
	struct sweep_config c;
	struct search *s, *back;
	struct strbuf err = STRBUF_INIT;
	int dflt_c, dflt_b, fixed_c, fixed_b;
	json_t *j;

	cat_kernel_counts(NAN, &o, &dflt_c, &dflt_b);
	cat_kernel_counts(0.5, NULL, &fixed_c, &fixed_b);
	print_message("of 300 suggestions, untried 'c' / failed 'b': default %d / %d, "
		      "fixed beta 0.5 %d / %d\n", dflt_c, dflt_b, fixed_c, fixed_b);
	assert_true(o.cat_beta < 0);
	if (!(dflt_c > 2 * fixed_c && dflt_c > 30))
		fail_msg("expected the shared-prior kernels to try the untried choice more often "
			 "than fixed beta 0.5: %d vs %d of 300", dflt_c, fixed_c);
	if (!(dflt_b < dflt_c && dflt_b < 30))
		fail_msg("expected the failed choice to stay rare: %d of 300 ('c': %d)", dflt_b, dflt_c);

	build_tpe_cfg(&c);
	s = must_new(&c, 5);
	o.cat_beta = 0.25;
	search_set_tpe_options(s, &o);
	j = search_state_to_json(s);
	assert_true(json_real_value(json_object_get(json_object_get(j, "tpe"), "cat_beta")) == 0.25);
	back = search_state_from_json(&c, j, &err);
	assert_non_null(back);
	search_get_tpe_options(back, &o);
	assert_true(o.cat_beta == 0.25);
	search_free(back);
	json_object_del(json_object_get(j, "tpe"), "cat_beta");
	back = search_state_from_json(&c, j, &err);
	assert_non_null(back);
	search_get_tpe_options(back, &o);
	assert_true(o.cat_beta == 0.5);    /* the rule the old state was made under */
	search_free(back);
	o.cat_beta = -7;                   /* any negative: the shared prior */
	search_set_tpe_options(s, &o);
	search_get_tpe_options(s, &o);
	assert_true(o.cat_beta == -1);
	o.cat_beta = NAN;                  /* refused: back to the default */
	search_set_tpe_options(s, &o);
	search_get_tpe_options(s, &o);
	assert_true(o.cat_beta == -1);
	json_decref(j);
	strbuf_release(&err);
	search_free(s);
	cfg_release(&c);
}

/*
 * W&B's other distributions, drawn by random search from a file as W&B
 * users write it: each value in its support and the draws following the
 * distribution (medians and means within a few standard errors of 4000
 * draws); bayes then proposes inside the same space.
 */
static void test_wandb_distributions(void **state)
{
	static const char yaml[] =
		"method: random\n"
		"max_trials: 4000\n"
		"job: {command: [x]}\n"
		"parameters:\n"
		"  lu: {distribution: log_uniform, min: -4.605170186, max: 0}\n"
		"  ilu: {distribution: inv_log_uniform_values, min: 0.01, max: 1}\n"
		"  qlu: {distribution: q_log_uniform_values, min: 16, max: 512, q: 16}\n"
		"  qn: {distribution: q_normal, mu: 10, sigma: 3, q: 2}\n"
		"  ln: {distribution: log_normal, mu: 0, sigma: 1}\n"
		"  qln: {distribution: q_log_normal, mu: 2, sigma: 1, q: 1}\n"
		"  be: {distribution: beta, a: 2, b: 5}\n"
		"  qb: {distribution: q_beta, a: 2, b: 5, q: 0.1}\n"
		"  cat: {values: [a, b], probabilities: [0.2, 0.8]}\n";
	enum { N = 4000 };
	struct sweep_config c;
	struct strbuf err = STRBUF_INIT;
	struct search *s;
	struct suggestion sg = SUGGESTION_INIT;
	double *lu = xcalloc(N, sizeof(double)), *ilu = xcalloc(N, sizeof(double));
	double *ln = xcalloc(N, sizeof(double)), qn_sum = 0, be_sum = 0;
	int cat_b = 0;

	(void)state;
	assert_int_equal(sweep_config_parse(&c, yaml, strlen(yaml), "w.yaml", &err), 0);
	s = search_new(&c, 7, &err);
	assert_non_null(s);
	for (int i = 0; i < N; i++) {
		double v;

		assert_int_equal(search_suggest(s, &sg), 0);
		lu[i] = suggestion_get(&sg, "lu")->num;
		assert_true(lu[i] >= 0.01 * (1 - 1e-9) && lu[i] <= 1);
		ilu[i] = suggestion_get(&sg, "ilu")->num;
		assert_true(ilu[i] >= 0.01 && ilu[i] <= 1);
		v = suggestion_get(&sg, "qlu")->num;
		assert_true(v >= 16 && v <= 512 && fmod(v, 16) == 0);
		v = suggestion_get(&sg, "qn")->num;
		assert_true(fmod(v, 2) == 0);
		qn_sum += v;
		ln[i] = suggestion_get(&sg, "ln")->num;
		assert_true(ln[i] > 0);
		v = suggestion_get(&sg, "qln")->num;
		assert_true(v >= 0 && v == floor(v));
		v = suggestion_get(&sg, "be")->num;
		assert_true(v >= 0 && v <= 1);
		be_sum += v;
		v = suggestion_get(&sg, "qb")->num;
		assert_true(v >= 0 && v <= 1 && fabs(v * 10 - round(v * 10)) < 1e-9);
		cat_b += !strcmp(suggestion_get(&sg, "cat")->value, "b");
	}
	qsort(lu, N, sizeof(double), cmp_dbl);
	qsort(ilu, N, sizeof(double), cmp_dbl);
	qsort(ln, N, sizeof(double), cmp_dbl);
	/* log-uniform on [0.01, 1]: median 0.1 (both spellings); log-normal(0, 1): median 1 */
	assert_true(fabs(log10(lu[N / 2]) + 1) < 0.05);
	assert_true(fabs(log10(ilu[N / 2]) + 1) < 0.05);
	assert_true(fabs(log(ln[N / 2])) < 0.06);
	assert_true(fabs(qn_sum / N - 10) < 0.2);
	assert_true(fabs(be_sum / N - 2.0 / 7) < 0.01);   /* beta(2, 5): mean 2/7, sd 0.16 */
	assert_true(fabs((double)cat_b / N - 0.8) < 0.03);
	search_free(s);

	/* bayes over the same space: proposals stay in it */
	c.method = SWEEP_BAYES;
	s = search_new(&c, 7, &err);
	assert_non_null(s);
	for (int i = 0; i < 30; i++) {
		assert_int_equal(search_suggest(s, &sg), 0);
		assert_int_equal(search_observe(s, &sg, suggestion_get(&sg, "be")->num, SEARCH_COMPLETED), 0);
	}
	search_free(s);
	suggestion_release(&sg);
	sweep_config_release(&c);
	free(lu);
	free(ilu);
	free(ln);
	strbuf_release(&err);
}

static void test_suggestion_json(void **state)
{
	struct suggestion sg = SUGGESTION_INIT, back = SUGGESTION_INIT;
	struct strbuf err = STRBUF_INIT;
	struct sweep_config c;
	struct search *s;
	json_t *j, *bad;

	build_tpe_cfg(&c);
	s = must_new(&c, 3);
	search_suggest(s, &sg);
	search_suggest(s, &sg);
	j = suggestion_to_json(&sg);
	assert_int_equal(suggestion_from_json(&back, j, &err), 0);
	assert_same_suggestion(&sg, &back);
	assert_true(back.items[0].is_num && back.items[0].num == sg.items[0].num);
	bad = json_pack("{s:i, s:{s:[]}}", "seq", 1, "params", "x");
	assert_int_equal(suggestion_from_json(&back, bad, &err), -1);
	assert_non_null(strstr(err.buf, "parameter 'x'"));
	json_decref(bad);
	json_decref(j);
	suggestion_release(&sg);
	suggestion_release(&back);
	strbuf_release(&err);
	search_free(s);
	cfg_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_double),
		cmocka_unit_test(test_rng_helpers),
		cmocka_unit_test(test_grid_order_and_exhaustion),
		cmocka_unit_test(test_grid_refuses_continuous),
		cmocka_unit_test(test_bad_spaces),
		cmocka_unit_test(test_random_semantics),
		cmocka_unit_test(test_random_reproducible),
		cmocka_unit_test(test_tpe_beats_random),
		cmocka_unit_test(test_tpe_mixed_space),
		cmocka_unit_test(test_tpe_pruned_rank_after_completed),
		cmocka_unit_test(test_tpe_large_history),
		cmocka_unit_test(test_tpe_bandwidth_factor),
		cmocka_unit_test(test_tpe_categorical_kernel),
		cmocka_unit_test(test_observe_rejects_foreign),
		cmocka_unit_test(test_state_roundtrip_and_replay),
		cmocka_unit_test(test_suggestion_json),
		cmocka_unit_test(test_wandb_distributions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
