/*
 * sweep_sim.c - drive dtctl's sweep search + ASHA on a simulated training
 * run and print the best metric found within a budget of trial-epochs.
 *
 * Used by bench/bench_sweep_quality.py, which runs Optuna on the very same
 * objectives (the formulas are written twice, here and there, and must stay
 * identical).  A trial is a learning curve over epochs 1..E:
 *
 *     loss(x, e) = f(x) + amp(x) * e^-rate(x) + noise * N(0, 1)
 *
 * so a trial's metric approaches f(x) as it trains and the early epochs
 * rank configurations imperfectly, which is what early stopping has to cope
 * with.
 *
 * Trials run on --workers W parallel workers (4), as in a sweep with
 * `parallel: 4`: a free worker takes the next suggestion, made from the
 * trials finished so far (TPE ignores running ones, as in dtsched), and
 * reports come in the order they would on a clock.  Each trial's epochs
 * take a time of its own, drawn once per trial from a lognormal
 * exp(sigma * N(0, 1)) (--duration-sigma, 0.5) by trial_epoch_time(),
 * which bench_sweep_quality.py repeats so that Optuna's k-th trial takes
 * as long as dtctl's.  So fast trials reach a rung before slow ones that
 * started earlier, several trials reach a rung close together, and ASHA
 * judges early arrivals against few peers, as in a real parallel sweep.
 * An epoch counts against the budget when it starts; once the budget is
 * spent no epoch starts, and the running ones finish.  The score is the
 * lowest metric reported by any trial at any epoch.  --workers 1 is the
 * sequential simulator of the earlier figures, bit for bit (the noise is
 * drawn in the order epochs end, which is then trial by trial).
 *
 *     sweep_sim branin --seed 3 --budget 810
 *     best=0.52 regret=0.122 trials=211 epochs=810 full=12 time=51.3
 *
 * full: trials trained to the last epoch; time: the simulated clock when
 * the last epoch ended (one epoch of a median trial takes 1).
 *
 * At scale (--epoch-seconds S: an epoch takes S seconds, and the controller's
 * own CPU time, measured, delays the trial it starts; one controller, as in
 * dtsched): the cost per trial, TPE's suggestion latency with ~N observations
 * and makespan/ideal, e.g. 10,000 trials of 0.1 s on 64 slots:
 *
 *     sweep_sim hartmann6 --no-asha --epochs 1 --duration-sigma 0 --workers 64 \
 *         --budget 10000 --epoch-seconds 0.1 [--method random]  --trace
 * prints every trial to stderr as it ends (epochs run, last value, f,
 * params), and the rung check's agreement between consecutive rungs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "parse-options.h"
#include "rng.h"
#include "scheduler/asha.h"
#include "scheduler/search.h"
#include "usage.h"

/* ---------------------------------------------------------- objectives */

static double branin(const double *x)
{
	double b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, t = 1 / (8 * M_PI);
	double u = x[1] - b * x[0] * x[0] + c * x[0] - 6;

	return u * u + 10 * (1 - t) * cos(x[0]) + 10;
}

static double hartmann6(const double *x)
{
	static const double alpha[4] = { 1.0, 1.2, 3.0, 3.2 };
	static const double A[4][6] = {
		{ 10, 3, 17, 3.5, 1.7, 8 }, { 0.05, 10, 17, 0.1, 8, 14 },
		{ 3, 3.5, 1.7, 10, 17, 8 }, { 17, 8, 0.05, 10, 0.1, 14 },
	};
	static const double P[4][6] = {
		{ 0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886 },
		{ 0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991 },
		{ 0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650 },
		{ 0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381 },
	};
	double sum = 0;

	for (int i = 0; i < 4; i++) {
		double inner = 0;

		for (int j = 0; j < 6; j++)
			inner += A[i][j] * (x[j] - P[i][j]) * (x[j] - P[i][j]);
		sum += alpha[i] * exp(-inner);
	}
	return -sum;
}

/* A DL-flavoured space: lr, batch, layers, dropout, optimizer. */
static const char *const mlp_batch[] = { "16", "32", "64", "128", "256", "512", NULL };
static const char *const mlp_opt[] = { "sgd", "adam", "adamw", NULL };

struct objective {
	const char *name;
	double f_star;       /* global minimum of the asymptote f, for regret */
	double noise;
	void (*space)(struct sweep_config *c);
	/* f, amp and rate of the curve for the trial's parameters */
	void (*curve)(const struct suggestion *sg, double *f, double *amp, double *rate);
};

static struct sweep_param *add_param(struct sweep_config *c, const char *name,
				     enum param_kind kind, double min, double max)
{
	struct sweep_param *p;

	c->params = xrealloc(c->params, (c->nr_params + 1) * sizeof(*c->params));
	p = &c->params[c->nr_params++];
	memset(p, 0, sizeof(*p));
	strvec_init(&p->values);
	p->name = xstrdup(name);
	p->kind = kind;
	p->min = min;
	p->max = max;
	p->q = 1;
	p->sigma = 1;
	return p;
}

static void add_values(struct sweep_config *c, const char *name, const char *const *v)
{
	struct sweep_param *p = add_param(c, name, PARAM_VALUES, 0, 0);

	strvec_pushv(&p->values, (const char **)v);
}

static double num(const struct suggestion *sg, const char *name)
{
	const struct suggestion_item *it = suggestion_get(sg, name);

	return it && it->is_num ? it->num : NAN;
}

static void branin_space(struct sweep_config *c)
{
	add_param(c, "x1", PARAM_UNIFORM, -5, 10);
	add_param(c, "x2", PARAM_UNIFORM, 0, 15);
}

static void branin_curve(const struct suggestion *sg, double *f, double *amp, double *rate)
{
	double x[2] = { num(sg, "x1"), num(sg, "x2") };

	*f = branin(x);
	*amp = 3 + 2 * sin(x[0] + x[1]);
	*rate = 0.7;
}

static void hartmann_space(struct sweep_config *c)
{
	static const char *const names[] = { "x1", "x2", "x3", "x4", "x5", "x6" };

	for (int i = 0; i < 6; i++)
		add_param(c, names[i], PARAM_UNIFORM, 0, 1);
}

static void hartmann_curve(const struct suggestion *sg, double *f, double *amp, double *rate)
{
	double x[6] = { num(sg, "x1"), num(sg, "x2"), num(sg, "x3"),
			num(sg, "x4"), num(sg, "x5"), num(sg, "x6") };

	*f = hartmann6(x);
	*amp = 1 + x[0];
	*rate = 0.7;
}

static void mlp_space(struct sweep_config *c)
{
	add_param(c, "lr", PARAM_LOG_UNIFORM, 1e-5, 1);
	add_values(c, "batch", mlp_batch);
	add_param(c, "layers", PARAM_INT_UNIFORM, 1, 6);
	add_param(c, "dropout", PARAM_UNIFORM, 0, 0.7);
	add_values(c, "optimizer", mlp_opt);
}

/*
 * Each optimizer has its best learning rate, shifted up for larger batches;
 * a larger lr learns faster (a steeper curve), so early epochs favour large
 * learning rates more than the final loss does.
 */
static void mlp_curve(const struct suggestion *sg, double *f, double *amp, double *rate)
{
	const char *opt = suggestion_get(sg, "optimizer")->value;
	double llr = log10(num(sg, "lr")), lb = log2(num(sg, "batch") / 128);
	double best = !strcmp(opt, "sgd") ? -1.0 : !strcmp(opt, "adam") ? -3.0 : -2.7;
	double bonus = !strcmp(opt, "sgd") ? 0.04 : !strcmp(opt, "adam") ? 0.01 : 0.0;
	double layers = num(sg, "layers"), drop = num(sg, "dropout");

	best += 0.15 * lb;
	*f = 0.10 + 0.2 * (llr - best) * (llr - best) + 0.02 * (layers - 4) * (layers - 4) +
	     0.4 * (drop - 0.25) * (drop - 0.25) + bonus;
	*amp = 1.0;
	*rate = fmin(fmax(0.5 + 0.25 * (llr + 3), 0.2), 1.2);
}

static const struct objective objectives[] = {
	{ "branin", 0.397887357729739, 0.02, branin_space, branin_curve },
	{ "hartmann6", -3.32236801141551, 0.01, hartmann_space, hartmann_curve },
	{ "mlp", 0.10, 0.01, mlp_space, mlp_curve },
};

static void cfg_release(struct sweep_config *c)
{
	for (size_t i = 0; i < c->nr_params; i++) {
		free(c->params[i].name);
		strvec_clear(&c->params[i].values);
	}
	free(c->params);
}

/* ------------------------------------------------------------- workers */

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/*
 * The time one epoch of the seed's trial-th trial (1, 2, ...) takes:
 * exp(sigma * z), z standard normal by Box-Muller from two splitmix64 draws.
 * bench_sweep_quality.py computes the same, so both searchers see the same
 * arrival pattern for their k-th trial.
 */
static double trial_epoch_time(int seed, int trial, double sigma)
{
	uint64_t base = (uint64_t)seed * 1000003ULL + 2 * (uint64_t)trial;
	double u1 = (double)((splitmix64(base) >> 11) + 1) * 0x1p-53;
	double u2 = (double)(splitmix64(base + 1) >> 11) * 0x1p-53;

	return exp(sigma * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
}

/* A trial: its suggestion, its curve, its epoch time, the epochs it ran. */
struct trial {
	struct suggestion sg;
	double f, amp, rate, epoch_time;
	int epoch;
};

/* A worker and the trial it runs (0: idle), whose running epoch ends at `end`. */
struct worker {
	int trial;
	double end;
};

/* The busy worker whose epoch ends first (the lowest index on a tie), or NULL. */
static struct worker *next_event(struct worker *w, int n)
{
	struct worker *first = NULL;

	for (int i = 0; i < n; i++)
		if (w[i].trial && (!first || w[i].end < first->end))
			first = &w[i];
	return first;
}

/* What starting a trial needs: the search, the objective, the budget, the trials. */
struct sim {
	struct search *search;
	const struct objective *obj;
	struct asha *asha;
	int budget, used, seed;
	double sigma;
	double epoch_s;      /* --epoch-seconds: the clock in seconds, the controller's CPU on it */
	double *suggest_s;   /* with it: each suggestion's CPU time, by trial */
	double work;         /* the epochs started, in clock time */
	struct trial *t;     /* t[id - 1] */
	size_t nr, alloc;
};

/* this thread's CPU time, seconds */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * Give an idle worker a trial and start its next epoch, if the budget
 * allows one (else, or when a grid is exhausted, it stays idle): with
 * promotion a paused trial ASHA promotes, else the next suggestion.
 */
static void worker_start(struct worker *w, struct sim *sim)
{
	struct trial *t;
	int id = 0;
	double c0;

	if (sim->used >= sim->budget)
		return;
	if (sim->asha && asha_get_promotion(sim->asha))
		id = asha_promote_next(sim->asha, 0);
	if (!id) {
		ALLOC_GROW(sim->t, sim->nr + 1, sim->alloc);
		t = &sim->t[sim->nr];
		memset(t, 0, sizeof(*t));
		t->sg = (struct suggestion)SUGGESTION_INIT;
		c0 = cpu_s();
		if (search_suggest(sim->search, &t->sg)) {
			suggestion_release(&t->sg);
			return;
		}
		id = (int)++sim->nr;
		if (sim->suggest_s)
			sim->suggest_s[id - 1] = cpu_s() - c0;
		sim->obj->curve(&t->sg, &t->f, &t->amp, &t->rate);
		t->epoch_time = trial_epoch_time(sim->seed, id, sim->sigma) *
				(sim->epoch_s > 0 ? sim->epoch_s : 1);
	}
	w->trial = id;
	w->end += sim->t[id - 1].epoch_time;   /* from the moment the worker freed */
	sim->work += sim->t[id - 1].epoch_time;
	sim->used++;
}

static void trace_trial(int id, const struct trial *t, double v, double best, double now)
{
	fprintf(stderr, "trial %d epochs %d value %.5g f %.5g best %.5g time %.4g", id,
		t->epoch, v, t->f, best, now);
	for (size_t i = 0; i < t->sg.nr; i++)
		fprintf(stderr, " %s=%s", t->sg.items[i].name, t->sg.items[i].value);
	fputc('\n', stderr);
}

int main(int argc, const char **argv)
{
	static const char *const usage[] = {
		"sweep_sim [options] (branin | hartmann6 | mlp)", NULL,
	};
	int budget = 810, seed = 0, epochs = 27, eta = 3, min_iter = 1, no_asha = 0;
	int n_startup = -1, candidates = -1, multivariate = -1, min_peers = -1, trace = 0;
	double gamma = -1, bandwidth = -1, cat_beta = NAN, check_gamma = 0.5, check_widen = 3;
	int check_trials = 0, grace = 1, nr_workers = 4, promote = 0;
	double sigma = 0.5, epoch_s = 0;
	const char *method = "bayes";
	struct option opts[] = {
		OPT_INT(0, "budget", &budget, "trial-epochs to spend (810)"),
		OPT_INT(0, "seed", &seed, "seed of the search and of the noise (0)"),
		OPT_INT(0, "epochs", &epochs, "epochs of a full trial, ASHA's max_iter (27)"),
		OPT_INT(0, "eta", &eta, "ASHA reduction factor (3)"),
		OPT_INT(0, "min-iter", &min_iter, "ASHA first rung (1)"),
		OPT_BOOL(0, "no-asha", &no_asha, "run every trial to the end"),
		OPT_INT(0, "workers", &nr_workers, "trials running at once (4; 1: one after another)"),
		OPT_DOUBLE(0, "duration-sigma", &sigma,
			   "spread of the trials' epoch times, lognormal sigma (0.5; 0: all equal)"),
		OPT_STRING(0, "method", &method, "m", "bayes or random (bayes)"),
		OPT_INT(0, "n-startup", &n_startup, "TPE random trials first"),
		OPT_INT(0, "candidates", &candidates, "TPE candidates per parameter"),
		OPT_DOUBLE(0, "gamma", &gamma, "TPE good fraction"),
		OPT_INT(0, "multivariate", &multivariate, "TPE joint (1) or per-parameter (0) densities"),
		OPT_DOUBLE(0, "bandwidth", &bandwidth, "TPE multivariate kernel width factor"),
		OPT_DOUBLE(0, "cat-beta", &cat_beta, "TPE multivariate categorical kernel: beta (< 0: shared prior)"),
		OPT_INT(0, "min-peers", &min_peers, "ASHA: other values a rung needs before a trial passes"),
		OPT_INT(0, "grace", &grace, "ASHA grace rule (1, the default; 0: the rule of the figures "
			"before the sweep conformance issue)"),
		OPT_BOOL(0, "promote", &promote, "ASHA's promotion variant (checkpoint: true): "
			 "a trial pauses at each rung and is resumed when promoted"),
		OPT_INT(0, "rung-check", &check_trials,
			"ASHA rung check: trials in rungs k and k+1 needed (0: off)"),
		OPT_DOUBLE(0, "rung-check-gamma", &check_gamma,
			   "ASHA rung check: widen rung k while its agreement is below this (0.5)"),
		OPT_DOUBLE(0, "rung-check-widen", &check_widen,
			   "ASHA rung check: keep widen * n / eta then (3: everyone)"),
		OPT_BOOL(0, "trace", &trace, "print every trial to stderr"),
		OPT_DOUBLE(0, "epoch-seconds", &epoch_s, "the clock in seconds of a median epoch, "
			   "and the controller's CPU (suggest, observe, ASHA) on it, one decision at "
			   "a time: prints its cost and makespan/ideal (0: off)"),
		OPT_END(),
	};
	const struct objective *obj = NULL;
	struct sweep_config cfg;
	struct strbuf err = STRBUF_INIT;
	struct search *s;
	struct asha *a = NULL;
	struct tpe_options to;
	struct rng noise;
	struct worker *workers, *w;
	struct sim sim;
	double best = INFINITY, now = 0, ctrl = 0, ctrl_cpu = 0;
	int full = 0;

	dt_set_progname("sweep_sim");
	argv++;   /* past the program name */
	argc = parse_options(argc - 1, argv, opts, usage, 0);
	for (size_t i = 0; argc == 1 && i < ARRAY_SIZE(objectives); i++)
		if (!strcmp(argv[0], objectives[i].name))
			obj = &objectives[i];
	if (!obj || budget < 1 || epochs < 1 || nr_workers < 1 || sigma < 0) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.method = !strcmp(method, "random") ? SWEEP_RANDOM : SWEEP_BAYES;
	cfg.goal = GOAL_MINIMIZE;
	obj->space(&cfg);
	s = search_new(&cfg, (uint64_t)seed, &err);
	if (!s)
		die_code(DT_EXIT_USAGE, "%s", err.buf);
	search_get_tpe_options(s, &to);
	if (n_startup >= 0)
		to.n_startup = n_startup;
	if (candidates > 0)
		to.n_ei_candidates = candidates;
	if (gamma > 0)
		to.gamma = gamma;
	if (multivariate >= 0)
		to.multivariate = multivariate;
	if (bandwidth > 0)
		to.bandwidth_factor = bandwidth;
	if (!isnan(cat_beta))
		to.cat_beta = cat_beta;
	search_set_tpe_options(s, &to);
	if (!no_asha && !(a = asha_new(min_iter, eta, epochs, GOAL_MINIMIZE)))
		die_code(DT_EXIT_USAGE, "bad ASHA settings: min_iter %d eta %d", min_iter, eta);
	if (a && min_peers >= 0)
		asha_set_min_peers(a, min_peers);
	if (a)
		asha_set_grace(a, grace);
	if (a)
		asha_set_promotion(a, promote);
	if (a && check_trials > 0)
		asha_set_rung_check(a, check_trials, check_gamma, check_widen);
	rng_seed(&noise, rng_mix((uint64_t)seed, 0x6e6f697365ULL, 0));

	sim = (struct sim){ .search = s, .obj = obj, .asha = a, .budget = budget, .seed = seed,
			    .sigma = sigma };
	workers = xcalloc(nr_workers, sizeof(*workers));
	if (epoch_s > 0) {
		sim.epoch_s = epoch_s;
		sim.suggest_s = xcalloc((size_t)budget + 1, sizeof(double));
	}
	for (int i = 0; i < nr_workers; i++) {
		double c0 = cpu_s();

		worker_start(&workers[i], &sim);
		if (epoch_s > 0) {
			ctrl += cpu_s() - c0;
			ctrl_cpu += cpu_s() - c0;
			workers[i].end += ctrl;
		}
	}
	while ((w = next_event(workers, nr_workers))) {
		struct trial *t = &sim.t[w->trial - 1];
		int e = ++t->epoch, end = 0;
		double c0 = cpu_s();
		double v = t->f + t->amp * pow(e, -t->rate) + obj->noise * rng_gauss(&noise);

		now = w->end;
		best = fmin(best, v);
		if (e == epochs) {
			search_observe_at(s, &t->sg, v, SEARCH_COMPLETED, e);
			full++;
			end = 1;
		} else if (a && asha_report(a, w->trial, e, v) != ASHA_CONTINUE) {
			/* pruned, or paused at a rung (it may be promoted later) */
			search_observe_at(s, &t->sg, v, SEARCH_PRUNED, e);
			end = 1;
		} else if (sim.used >= budget) {
			end = 1;   /* cut off: the budget is spent */
		}
		if (trace && end)
			trace_trial(w->trial, t, v, best, now);
		if (!end) {
			sim.used++;
			w->end += t->epoch_time;
			sim.work += t->epoch_time;
		} else {
			w->trial = 0;
			worker_start(w, &sim);
		}
		if (epoch_s > 0) {
			/* one controller: this end's decisions, then the next start, wait their turn */
			double c = cpu_s() - c0;

			ctrl = fmax(ctrl, now) + c;
			ctrl_cpu += c;
			if (end && w->trial)
				w->end += ctrl - now;
		}
	}
	for (size_t k = 0; trace && a && asha_rung_count(a, k + 1); k++) {
		size_t m;
		double g = asha_rung_agreement(a, k, &m);

		fprintf(stderr, "rung %zu/%zu agreement: gamma %.3f over %zu trials\n", k, k + 1, g, m);
	}
	printf("best=%.10g regret=%.10g trials=%d epochs=%d full=%d time=%.4g\n", best,
	       best - obj->f_star, (int)sim.nr, sim.used, full, now);
	if (epoch_s > 0 && sim.nr) {
		/* the last tenth's suggestions: made with ~nr observations */
		size_t from = sim.nr - (sim.nr + 9) / 10, m = sim.nr - from;
		/* the best any scheduler does: all work spread evenly, or with equal
		 * trials whole rounds of them */
		double ideal = sim.work / nr_workers;

		if (sigma == 0 && no_asha)
			ideal = ceil((double)sim.nr / nr_workers) * epochs * epoch_s;

		qsort(sim.suggest_s + from, m, sizeof(double), cmp_dbl);
		printf("controller: %.3f ms CPU per trial (suggest + observe), suggest at %zu "
		       "observations p50 %.3f ms p99 %.3f ms; makespan %.3f s, ideal %.3f s "
		       "(%d workers), makespan/ideal %.4f\n", 1000 * ctrl_cpu / (double)sim.nr, from,
		       1000 * sim.suggest_s[from + m / 2], 1000 * sim.suggest_s[from + m * 99 / 100],
		       now, ideal, nr_workers, now / ideal);
	}
	free(sim.suggest_s);
	for (size_t i = 0; i < sim.nr; i++)
		suggestion_release(&sim.t[i].sg);
	free(sim.t);
	free(workers);
	search_free(s);
	asha_free(a);
	cfg_release(&cfg);
	strbuf_release(&err);
	return 0;
}
