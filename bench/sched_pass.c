/*
 * sched_pass.c - the cost of dtsched's scheduling with a deep queue: one pass
 * over 10,000 pending jobs of 50 users on 64 nodes (--nodes, up to 1000) x 8 GPUs
 * that are all busy,
 * by the fair-share pass (scheduler/fairshare.c: factors, the priority sort,
 * quotas, the reservation and backfill) and by the FIFO pass dtsched had
 * before it (the same placement_try() per job, oldest first, with the same
 * skip of jobs that waited on an unchanged pool), side by side in one run.
 *
 *   cold:   every job is tried (the pool changed: a job ended and freed 8 GPUs)
 *   warm:   nothing changed since the last pass (jobs that waited are skipped)
 *   new job: a job never tried joins a warm queue: its admission (fair:
 *           counting the user's pending jobs; FIFO: none) and a whole pass.
 *           dtsched runs the whole fair pass for that at most once a second
 *           while the pools stay the same (jobs-queue.c places new jobs behind
 *           the reservation in between): its submit rate is bench_fair.py's
 *
 * Prints one line per figure, median of --rounds, and the ratio fair/FIFO;
 * docs/BENCHMARKS.md has the figures.  Pure CPU, no daemons.
 *
 *   build/dev/bench/sched_pass [--pending 10000] [--users 50] [--nodes 64] [--rounds 21]
 *                              [--shapes 0|1]
 */
#include "scheduler/fairshare.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_NODES 1000
#define GPUS 8

struct bjob {
	struct fs_job fj;
	unsigned long long wait_fp;
	int running;
};

static struct place_node base[MAX_NODES];
static struct bjob *jobs;
static int npending, nusers, nnodes = 64;   /* --nodes, at most MAX_NODES */
static int shapes = 1;   /* --shapes 0: no fs_job.shape (the pass before it) */
static char names[64][16];
static struct fs_running *run;
static int nrun;
static int run_node[MAX_NODES * GPUS], run_nslots[MAX_NODES * GPUS];
static int run_slot[MAX_NODES * GPUS][GPUS];
static const int *run_slotp[MAX_NODES * GPUS];

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static unsigned long long rng = 12345;
static unsigned rnd(unsigned n)
{
	rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return (unsigned)(rng >> 33) % n;
}

static enum place_status try_place(void *ctx, struct fs_job *fj, struct place_node *n, size_t nr,
				   int plan, struct place_result *res, struct strbuf *reason)
{
	struct place_req r = { .nodes = fj->size / fj->per_node, .per_node = fj->per_node };

	return placement_try(n, nr, &r, res, reason);
}

static void start(void *ctx, struct fs_job *fj, const struct place_result *res)
{
	((struct bjob *)fj->job)->running = 1;
}

static void wait_(void *ctx, struct fs_job *fj, const char *reason)
{
}

/* as jobs-queue.c's pool_fingerprint: a hash of what placement reads */
static unsigned long long fingerprint(void *ctx, int gpu, const struct place_node *n, size_t nr)
{
	unsigned long long h = 1469598103934665603ULL;

	for (size_t i = 0; i < nr; i++) {
		for (const char *c = n[i].name; *c; c++)
			h = (h ^ (unsigned char)*c) * 1099511628211ULL;
		h = (h ^ (unsigned long long)(n[i].up | n[i].drained << 1)) * 1099511628211ULL;
		h = (h ^ (unsigned long long)n[i].total) * 1099511628211ULL;
		for (int k = 0; k < n[i].total; k++)
			if (n[i].used[k])
				h = (h ^ (unsigned long long)(k + 1)) * 1099511628211ULL;
	}
	return h ? h : 1;
}

static const struct fs_ops ops = { try_place, start, wait_, fingerprint, NULL };

/* dtsched's pass before fair share: oldest first, every job that fits starts */
static void fifo_pass(struct place_node *pool)
{
	struct place_result *res = xmalloc(sizeof(*res));
	struct strbuf reason = STRBUF_INIT;
	unsigned long long fp = fingerprint(NULL, 1, pool, nnodes);

	for (int i = 0; i < npending; i++) {
		struct bjob *j = &jobs[i];
		enum place_status st;

		if (j->running || j->wait_fp == fp)
			continue;
		strbuf_reset(&reason);
		st = try_place(NULL, &j->fj, pool, nnodes, 0, res, &reason);
		if (st == PLACE_OK) {
			placement_commit(pool, res, j->fj.per_node);
			j->running = 1;
			fp = fingerprint(NULL, 1, pool, nnodes);
		} else {
			j->wait_fp = fp;
		}
	}
	strbuf_release(&reason);
	free(res);
}

static void fair_pass(struct place_node *pool, const struct fs_usage *u, const struct fairshare_config *cfg)
{
	struct fs_job *fj = xmalloc(sizeof(*fj) * (size_t)npending);
	struct fs_pool pools[2] = { { NULL, 0, 0 }, { pool, nnodes, nnodes * GPUS } };
	int totals[2] = { 0, nnodes * GPUS }, n = 0;
	struct fs_pass p;

	for (int i = 0; i < npending; i++)
		if (!jobs[i].running)
			fj[n++] = jobs[i].fj;
	fs_pass_prepare(&p, cfg, u, 100LL * 3600 * 1000000, fj, (size_t)n, run, (size_t)nrun,
			totals);
	fs_pass_place(&p, pools, run, (size_t)nrun, &ops, NULL);
	fs_pass_release(&p);
	free(fj);
}

/* what job_admit() scans at a submission: the user's and project's pending jobs */
static int admit(const char *user)
{
	int c = 0;

	for (int i = 0; i < npending; i++)
		c += !jobs[i].running && !strcmp(jobs[i].fj.user, user);
	return c;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

static void reset(int fresh_fp)
{
	for (int i = 0; i < npending; i++) {
		jobs[i].running = 0;
		if (fresh_fp)
			jobs[i].wait_fp = 0;
	}
}

int main(int argc, char **argv)
{
	int rounds = 21;
	struct place_node *pool = xmalloc(sizeof(base));
	double *t = xmalloc(sizeof(double) * 1000);
	struct fs_usage usage;
	struct fairshare_config cfg;
	double fifo_cold, fair_cold, fifo_warm, fair_warm, fifo_sub, fair_sub;
	volatile int sink = 0;

	npending = 10000;
	nusers = 50;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--pending"))
			npending = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--users"))
			nusers = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--shapes"))
			shapes = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--nodes"))
			nnodes = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
	}
	if (npending < 1 || nusers < 1 || nusers > 64 || rounds < 1 || rounds > 1000 ||
	    nnodes < 1 || nnodes > MAX_NODES) {
		fprintf(stderr, "usage: sched_pass [--pending N] [--users 1-64] [--nodes 1-%d] "
			"[--rounds 1-1000]\n", MAX_NODES);
		return 2;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.half_life_ms = 7LL * 24 * 3600 * 1000;
	cfg.max_age_ms = cfg.half_life_ms;
	cfg.w_fairshare = 10000;
	cfg.w_age = 1000;
	cfg.w_size = 100;
	fs_usage_init(&usage, cfg.half_life_ms);
	for (int u = 0; u < nusers; u++) {
		snprintf(names[u], sizeof(names[u]), "user%02d", u);
		fs_usage_add(&usage, names[u], NULL, 1 + rnd(8), 0, 3600LL * 1000000 * (1 + rnd(50)));
	}
	/* every GPU busy: one job per node and 8 GPUs, ending at different times */
	for (int n = 0; n < nnodes; n++) {
		static char nm[MAX_NODES][8];

		snprintf(nm[n], sizeof(nm[n]), "n%02d", n);
		memset(&base[n], 0, sizeof(base[n]));
		base[n].name = nm[n];
		base[n].up = 1;
		base[n].total = GPUS;
		for (int k = 0; k < GPUS; k++)
			base[n].used[k] = 1;
	}
	run = xcalloc(nnodes, sizeof(*run));
	for (int n = 0; n < nnodes; n++) {
		struct fs_running *r = &run[nrun++];

		run_node[n] = n;
		run_nslots[n] = GPUS;
		for (int k = 0; k < GPUS; k++)
			run_slot[n][k] = k;
		run_slotp[n] = run_slot[n];
		r->gpu = 1;
		r->start_us = 90LL * 3600 * 1000000;
		r->end_us = r->start_us + 3600LL * 1000000 * (1 + n % 12);
		r->nr = 1;
		r->node = &run_node[n];
		r->nslots = &run_nslots[n];
		r->slot = &run_slotp[n];
		r->user = names[n % nusers];
		r->size = GPUS;
	}
	jobs = xcalloc((size_t)npending, sizeof(*jobs));
	for (int i = 0; i < npending; i++) {
		static const int sizes[] = { 1, 2, 4, 8, 16 };
		struct fs_job *f = &jobs[i].fj;

		f->job = &jobs[i];
		f->user = names[rnd((unsigned)nusers)];
		f->gpu = 1;
		f->size = sizes[rnd(5)];
		f->per_node = f->size > GPUS ? GPUS : f->size;
		f->submit_us = 50LL * 3600 * 1000000 + i * 1000000LL;
		f->limit_ms = 3600LL * 1000 * (1 + rnd(24));
		f->wait_fp = &jobs[i].wait_fp;
		if (shapes)   /* as jobs-queue.c: nodes, per node, GPU */
			f->shape = 1 + ((unsigned long long)(f->size / f->per_node) << 32 |
					(unsigned long long)f->per_node << 1 | 1);
	}
	/* cold: node n00's job ended (8 GPUs free), nobody has waited on that pool */
	for (int r = 0; r < rounds; r++) {
		double t0;

		memcpy(pool, base, sizeof(base));
		memset(pool[0].used, 0, sizeof(pool[0].used));
		reset(1);
		t0 = now_s();
		fifo_pass(pool);
		t[r] = now_s() - t0;
	}
	fifo_cold = median(t, rounds);
	for (int r = 0; r < rounds; r++) {
		double t0;

		memcpy(pool, base, sizeof(base));
		memset(pool[0].used, 0, sizeof(pool[0].used));
		reset(1);
		t0 = now_s();
		fair_pass(pool, &usage, &cfg);
		t[r] = now_s() - t0;
	}
	fair_cold = median(t, rounds);
	/* warm: all busy, every job already waited on this very pool */
	memcpy(pool, base, sizeof(base));
	reset(1);
	fifo_pass(pool);
	for (int r = 0; r < rounds; r++) {
		double t0 = now_s();

		fifo_pass(pool);
		t[r] = now_s() - t0;
	}
	fifo_warm = median(t, rounds);
	reset(1);
	fair_pass(pool, &usage, &cfg);
	for (int r = 0; r < rounds; r++) {
		double t0 = now_s();

		fair_pass(pool, &usage, &cfg);
		t[r] = now_s() - t0;
	}
	fair_warm = median(t, rounds);
	/* submit: a new job (never tried) joins a warm queue: admission + one pass */
	for (int r = 0; r < rounds; r++) {
		double t0;

		jobs[npending - 1].wait_fp = 0;
		t0 = now_s();
		fifo_pass(pool);
		t[r] = now_s() - t0;
	}
	fifo_sub = median(t, rounds);
	for (int r = 0; r < rounds; r++) {
		double t0;

		jobs[npending - 1].wait_fp = 0;
		t0 = now_s();
		sink += admit(jobs[npending - 1].fj.user);
		fair_pass(pool, &usage, &cfg);
		t[r] = now_s() - t0;
	}
	fair_sub = median(t, rounds);
	printf("sched_pass: %d pending jobs of %d users, %d nodes x %d GPUs all busy, median of %d\n",
	       npending, nusers, nnodes, GPUS, rounds);
	printf("%-34s %10s %10s %8s\n", "", "FIFO ms", "fair ms", "ratio");
	printf("%-34s %10.2f %10.2f %8.2f\n", "pass, cold (every job tried)", fifo_cold * 1e3,
	       fair_cold * 1e3, fair_cold / fifo_cold);
	printf("%-34s %10.2f %10.2f %8.2f\n", "pass, warm (nothing changed)", fifo_warm * 1e3,
	       fair_warm * 1e3, fair_warm / fifo_warm);
	printf("%-34s %10.2f %10.2f %8.2f\n", "new job (admission + whole pass)", fifo_sub * 1e3,
	       fair_sub * 1e3, fair_sub / fifo_sub);
	fs_usage_release(&usage);
	free(jobs);
	free(run);
	free(pool);
	free(t);
	return sink < 0;
}
