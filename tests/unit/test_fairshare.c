/*
 * test_fairshare.c - the fair-share policy (scheduler/fairshare.h) on
 * simulated time: cluster.yaml's fairshare: section and its errors, decayed
 * usage, the factors and priority: among a user's own jobs, quotas at
 * submission, and a simulated week of users who always have work queued on
 * a 32-GPU cluster: their GPU-hours follow their shares, quotas are never
 * exceeded, and backfill never makes the top job start later than it was
 * told.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/fairshare.h"

#define HOUR_US (3600LL * 1000000)
#define DAY_US (24 * HOUR_US)

static void load(struct cluster_config *cc, const char *fs, struct strbuf *err)
{
	struct strbuf y = STRBUF_INIT;

	strbuf_addf(&y, "shared_dir: /shared\nuser: dt\nnodes:\n  - host: n1\n%s", fs);
	assert_int_equal(cluster_config_parse(cc, y.buf, y.len, "c.yaml", err), 0);
	strbuf_release(&y);
}

static void expect_error(const char *fs, const char *msg)
{
	struct cluster_config cc;
	struct strbuf y = STRBUF_INIT, err = STRBUF_INIT;

	strbuf_addf(&y, "shared_dir: /shared\nuser: dt\nnodes:\n  - host: n1\n%s", fs);
	assert_int_equal(cluster_config_parse(&cc, y.buf, y.len, "c.yaml", &err), -1);
	if (!strstr(err.buf, msg))
		fail_msg("expected '%s' in: %s", msg, err.buf);
	strbuf_release(&y);
	strbuf_release(&err);
}

static void test_config(void **state)
{
	struct cluster_config cc;
	struct strbuf err = STRBUF_INIT;
	const struct fs_entity *e;
	struct fs_limits l;

	load(&cc, "fairshare:\n  half_life: 1d\n  weights: {fairshare: 500, age: 5}\n"
	     "  users:\n    alice: {share: 3, project: vision, max_gpus: 8}\n    bob:\n"
	     "  user_limits: {max_pending: 10, max_time: 2h}\n"
	     "  projects:\n    vision: {share: 2, max_gpus: 16}\n", &err);
	assert_int_equal(cc.fairshare.half_life_ms, 24LL * 3600 * 1000);
	assert_true(cc.fairshare.w_fairshare == 500 && cc.fairshare.w_age == 5 &&
		    cc.fairshare.w_size == 100);
	e = fairshare_user(&cc.fairshare, "alice");
	assert_non_null(e);
	assert_true(e->share == 3);
	assert_string_equal(e->project, "vision");
	/* user_limits (written after users:) is every user's default */
	assert_int_equal(e->lim.max_gpus, 8);
	assert_int_equal(e->lim.max_pending, 10);
	l = fs_limits_of(&cc.fairshare, 0, "carol");
	assert_int_equal(l.max_time_ms, 2 * 3600 * 1000);
	assert_true(fairshare_user(&cc.fairshare, "bob")->share == 1);
	assert_int_equal(fs_limits_of(&cc.fairshare, 1, "vision").max_gpus, 16);
	assert_string_equal(fs_project_of(&cc.fairshare, "alice", NULL), "vision");
	assert_string_equal(fs_project_of(&cc.fairshare, "bob", NULL), "bob");
	assert_string_equal(fs_project_of(&cc.fairshare, "alice", "nlp"), "nlp");
	assert_int_equal(cc.fairshare.preempt_over_share, 0);   /* off unless asked */
	assert_int_equal(cc.fairshare.preempt_min_run_ms, 10 * 60 * 1000);
	cluster_config_release(&cc);
	strbuf_release(&err);

	expect_error("fairshare:\n  users:\n    alice: {share: 0}\n",
		     "c.yaml:7:20: key 'fairshare.users.alice.share': expected a number above 0");
	expect_error("fairshare:\n  users:\n    alice: {max_gpu: 2}\n",
		     "c.yaml:7:13: unknown key 'fairshare.users.alice.max_gpu'; did you mean");
	expect_error("fairshare:\n  users:\n    'a b': {}\n", "c.yaml:7:5: key 'fairshare.users.a b'");
	expect_error("fairshare:\n  half_life: 7\n", "c.yaml:6:14: key 'fairshare.half_life'");
	expect_error("fairshare:\n  weights: {age: -1}\n", "c.yaml:6:18: key 'fairshare.weights.age'");
	expect_error("fairshare:\n  projects: [a, b]\n", "c.yaml:6:13: key 'fairshare.projects'");
	expect_error("fairshare:\n  preempt_over_share: maybe\n",
		     "c.yaml:6:23: key 'fairshare.preempt_over_share'");
	expect_error("fairshare:\n  preempt_min_run: soon\n",
		     "c.yaml:6:20: key 'fairshare.preempt_min_run'");
}

static void test_usage_decay(void **state)
{
	struct fs_usage u;
	double h = 3600;

	fs_usage_init(&u, 3600 * 1000);   /* half-life 1h */
	/* 2 GPUs for one hour that ended now: 2 * H/ln2 * (1 - 1/2) GPU-seconds */
	fs_usage_add(&u, "alice", "p", 2, 0, HOUR_US);
	assert_true(fabs(fs_usage_get(&u, 0, "alice", HOUR_US) - 2 * h / M_LN2 * 0.5) < 1e-6);
	assert_true(fabs(fs_usage_get(&u, 1, "p", HOUR_US) - 2 * h / M_LN2 * 0.5) < 1e-6);
	/* one half-life later: half of it */
	assert_true(fabs(fs_usage_get(&u, 0, "alice", 2 * HOUR_US) - h / M_LN2 * 0.5) < 1e-6);
	/* an older interval added later counts as if it had been added in time */
	fs_usage_add(&u, "bob", NULL, 1, 0, HOUR_US / 2);
	fs_usage_add(&u, "alice", NULL, 1, 3 * HOUR_US, 4 * HOUR_US);
	assert_true(fabs(fs_usage_get(&u, 0, "bob", 4 * HOUR_US) -
			 fs_decayed(&u, 1, 0, HOUR_US / 2, 4 * HOUR_US)) < 1e-6);
	assert_true(fs_usage_get(&u, 0, "nobody", 0) == 0);
	fs_usage_release(&u);
}

static void mkjob(struct fs_job *j, const char *user, int size, long long submit, int prio)
{
	memset(j, 0, sizeof(*j));
	j->user = user;
	j->gpu = 1;
	j->size = j->per_node = size;
	j->submit_us = submit;
	j->prio = prio;
}

static void test_priority_order(void **state)
{
	struct fs_usage u;
	struct fs_job j[4];
	struct fs_pass p;
	int totals[2] = { 0, 8 };

	fs_usage_init(&u, 3600 * 1000);
	fs_usage_add(&u, "heavy", NULL, 8, 0, HOUR_US);
	mkjob(&j[0], "heavy", 1, 0, 0);
	mkjob(&j[1], "heavy", 1, 1, 5);       /* priority: 5 puts it before heavy's older job */
	mkjob(&j[2], "light", 1, 2, -100);    /* ... but never before light's job */
	mkjob(&j[3], "light", 8, 3, 0);       /* bigger: the size factor */
	fs_pass_prepare(&p, NULL, &u, HOUR_US, j, 4, NULL, 0, totals);
	assert_true(j[2].f_fs == 1);          /* no usage: 2^0 */
	assert_true(fabs(j[0].f_fs - exp2(-1 / 0.5)) < 1e-9);   /* all the usage, half the share */
	assert_true(j[3].f_size == 1 && j[2].f_size == 1.0 / 8);
	assert_ptr_equal(p.order[0], &j[3]);
	assert_ptr_equal(p.order[1], &j[2]);
	assert_ptr_equal(p.order[2], &j[1]);
	assert_ptr_equal(p.order[3], &j[0]);
	assert_int_equal(j[1].position, 3);
	/* heavy's two jobs swapped priorities, the set is the same */
	assert_true(j[1].priority > j[0].priority);
	fs_pass_release(&p);
	fs_usage_release(&u);
}

/* What runs counts for the quotas (per user and project) and the usage, users first seen there. */
static void test_running_counts(void **state)
{
	static const int node[1] = { 0 }, nslots[1] = { 2 }, slot0[2] = { 0, 1 };
	static const int *const slot[1] = { slot0 };
	struct fs_running run[3];
	struct fs_usage u;
	struct fs_job j[1];
	struct fs_pass p;
	int totals[2] = { 8, 8 };

	fs_usage_init(&u, 3600 * 1000);
	memset(run, 0, sizeof(run));
	for (int i = 0; i < 3; i++) {
		run[i].gpu = i < 2;
		run[i].start_us = 0;
		run[i].nr = 1;
		run[i].node = node;
		run[i].nslots = nslots;
		run[i].slot = slot;
		run[i].size = 2;
	}
	run[0].user = "x";
	run[1].user = "y";
	run[1].project = "p";
	run[2].user = "x";
	mkjob(&j[0], "z", 1, 0, 0);
	fs_pass_prepare(&p, NULL, &u, HOUR_US, j, 1, run, 3, totals);
	assert_int_equal(p.nr_users, 3);
	assert_string_equal(p.users[0].name, "x");
	assert_int_equal(p.users[0].gpus, 2);
	assert_int_equal(p.users[0].slots, 2);
	assert_int_equal(p.users[1].gpus, 2);
	assert_string_equal(p.projects[p.users[0].project].name, "x");
	/* y's job counts to project p, y's own project has nothing */
	for (size_t i = 0; i < p.nr_projects; i++)
		assert_int_equal(p.projects[i].gpus, !strcmp(p.projects[i].name, "x") ||
				 !strcmp(p.projects[i].name, "p") ? 2 : 0);
	/* two GPUs for an hour so far, decayed as of now */
	assert_true(fabs(p.users[0].usage - fs_decayed(&u, 2, 0, HOUR_US, HOUR_US)) < 1e-6);
	assert_true(j[0].f_fs == 1 && p.users[2].factor == 1);
	fs_pass_release(&p);
	fs_usage_release(&u);
}

/* ------------------------------------------------ preemption */

struct pre_ctx {
	const struct fs_running *victims[8];
	int nr;
};

static void pre_start(void *ctx, struct fs_job *fj, const struct place_result *res)
{
}

static void pre_wait(void *ctx, struct fs_job *fj, const char *reason)
{
}

static void pre_preempt(void *ctx, const struct fs_running *v, const struct fs_job *by)
{
	struct pre_ctx *c = ctx;

	c->victims[c->nr++] = v;
}

static enum place_status pre_try(void *ctx, struct fs_job *fj, struct place_node *n, size_t nr,
				 int plan, struct place_result *res, struct strbuf *reason)
{
	struct place_req r = { .nodes = 1, .per_node = fj->per_node };

	return placement_try(n, nr, &r, res, reason);
}

/*
 * One node of 4 GPUs held by two preemptible 2-GPU jobs (started at 1 and 2
 * hours): a waiting 2-GPU job preempts the younger one only; none while one
 * is being preempted already; a preemptible job of the same class none.
 */
static void test_preempt_fewest_youngest(void **state)
{
	static const struct fs_ops ops = { pre_try, pre_start, pre_wait, NULL, pre_preempt };
	static const int node[1] = { 0 }, nslots[1] = { 2 }, s01[2] = { 0, 1 }, s23[2] = { 2, 3 };
	static const int *const slot_a[1] = { s01 }, *const slot_b[1] = { s23 };
	struct place_node n[1];
	struct fs_running run[2];
	struct fs_job j[1];
	struct fs_pass p;
	struct pre_ctx c;
	int totals[2] = { 0, 4 }, dummy[2];
	struct fs_pool pools[2] = { { NULL, 0, 0 }, { n, 1, 4 } };

	memset(run, 0, sizeof(run));
	for (int i = 0; i < 2; i++) {
		run[i].gpu = 1;
		run[i].start_us = (i + 1) * HOUR_US;
		run[i].nr = 1;
		run[i].node = node;
		run[i].nslots = nslots;
		run[i].slot = i ? slot_b : slot_a;
		run[i].user = "scav";
		run[i].size = 2;
		run[i].job = &dummy[i];
		run[i].preemptible = 1;
	}
	for (int round = 0; round < 3; round++) {
		memset(n, 0, sizeof(n));
		n[0].name = "n0";
		n[0].up = 1;
		n[0].total = 4;
		memset(n[0].used, 1, 4);
		mkjob(&j[0], "urgent", 2, 0, 0);
		j[0].preemptible = round == 2;   /* the same class as the running ones */
		memset(&c, 0, sizeof(c));
		fs_pass_prepare(&p, NULL, NULL, 3 * HOUR_US, j, 1, run, 2, totals);
		fs_pass_place(&p, pools, run, 2, &ops, &c);
		fs_pass_release(&p);
		if (round == 0) {
			assert_int_equal(c.nr, 1);
			assert_ptr_equal(c.victims[0], &run[1]);   /* the younger */
			run[1].preempting = 1;
		} else {
			assert_int_equal(c.nr, 0);
		}
	}
}

/*
 * Preemption on fair share, on simulated time (30 s steps over 6 hours):
 * one node of 4 GPUs; bob holds all of it with job A (from 0) and job B (from
 * 58 min), neither with an end; alice (no usage) submits a 2-GPU job at 1 h.
 * A victim stops `grace` after it is preempted and is requeued (a pending
 * job of bob's).  Returns when alice's job started (-1: never); *victims:
 * how many preemptions, *victim_start: the first victim's start.
 */
#define OS_STEP_US (30LL * 1000000)
#define OS_GRACE_US (60LL * 1000000)

struct os_job {
	const char *user;
	long long start_us, stop_us;  /* stop_us: preempted, stops then */
	int running, first_slot;      /* on slots first_slot, first_slot + 1 */
};

struct os_ctx {
	struct pre_ctx pc;            /* first: pre_preempt's */
	int alice_slot;               /* where alice's job started, or -1 */
};

static void os_start(void *ctx, struct fs_job *fj, const struct place_result *res)
{
	struct os_ctx *c = ctx;

	if (!strcmp(fj->user, "alice"))
		c->alice_slot = res->slots[0][0];
	else
		fail_msg("bob's requeued job started: he is over his share");
}

static long long over_share_run(const char *fs, int *victims, long long *victim_start)
{
	static const struct fs_ops ops = { pre_try, os_start, pre_wait, NULL, pre_preempt };
	static const int node[1] = { 0 }, nslots[1] = { 2 }, s01[2] = { 0, 1 }, s23[2] = { 2, 3 };
	static const int *const slot_a[1] = { s01 }, *const slot_b[1] = { s23 };
	struct cluster_config cc;
	struct strbuf err = STRBUF_INIT;
	struct place_node n[1];
	/* bob's A (from 0) and B (from 58 min), alice's once it starts */
	struct os_job jobs[3] = { { "bob", 0, 0, 1, 0 }, { "bob", 58 * 60 * 1000000LL, 0, 1, 2 },
				  { "alice", 0, 0, 0, 0 } };
	long long alice_start = -1;
	int bob_pending = 0, totals[2] = { 0, 4 };
	struct fs_pool pools[2] = { { NULL, 0, 0 }, { n, 1, 4 } };
	struct fs_usage usage;

	load(&cc, fs, &err);
	fs_usage_init(&usage, cc.fairshare.half_life_ms);
	memset(n, 0, sizeof(n));
	n[0].name = "n0";
	n[0].up = 1;
	n[0].total = 4;
	memset(n[0].used, 1, 4);
	*victims = 0;
	*victim_start = -1;
	for (long long now = HOUR_US; now <= 6 * HOUR_US; now += OS_STEP_US) {
		struct fs_running live[3];
		struct fs_job pend[4];
		struct os_ctx c;
		struct fs_pass p;
		size_t nl = 0, np = 0;

		memset(live, 0, sizeof(live));
		for (int i = 0; i < 3; i++) {
			struct os_job *j = &jobs[i];

			if (j->running && j->stop_us && now >= j->stop_us) {
				/* the victim stops after its grace: requeued, its usage counted */
				j->running = 0;
				n[0].used[j->first_slot] = n[0].used[j->first_slot + 1] = 0;
				fs_usage_add(&usage, j->user, NULL, 2, j->start_us, now);
				bob_pending++;
			}
			if (!j->running)
				continue;
			live[nl].gpu = 1;
			live[nl].start_us = j->start_us;
			live[nl].nr = 1;
			live[nl].node = node;
			live[nl].nslots = nslots;
			live[nl].slot = j->first_slot ? slot_b : slot_a;
			live[nl].user = j->user;
			live[nl].size = 2;
			live[nl].job = j;
			live[nl].preempting = j->stop_us != 0;
			nl++;
		}
		if (alice_start < 0)
			mkjob(&pend[np++], "alice", 2, HOUR_US, 0);
		for (int i = 0; i < bob_pending; i++)
			mkjob(&pend[np++], "bob", 2, now, 0);
		memset(&c, 0, sizeof(c));
		c.alice_slot = -1;
		fs_pass_prepare(&p, &cc.fairshare, &usage, now, pend, np, live, nl, totals);
		fs_pass_place(&p, pools, live, nl, &ops, &c);
		fs_pass_release(&p);
		for (int k = 0; k < c.pc.nr; k++) {
			struct os_job *v = c.pc.victims[k]->job;

			if (*victim_start < 0)
				*victim_start = v->start_us;
			(*victims)++;
			v->stop_us = now + OS_GRACE_US;
		}
		if (c.alice_slot >= 0) {
			alice_start = now;
			jobs[2].running = 1;
			jobs[2].start_us = now;
			jobs[2].first_slot = c.alice_slot;
		}
	}
	fs_usage_release(&usage);
	cluster_config_release(&cc);
	strbuf_release(&err);
	return alice_start;
}

/*
 * With fairshare.preempt_over_share, alice's job (under her share) starts
 * within the grace of arriving while bob (over his) holds every GPU: his
 * older job is preempted, not the younger one that has not run
 * preempt_min_run yet; nothing else is preempted in 5 more hours (bob's
 * requeued job, over his share, cannot take back her GPUs).  Without it,
 * alice waits the whole time.
 */
static void test_preempt_over_share(void **state)
{
	long long first;
	int victims;
	long long t;

	t = over_share_run("fairshare:\n  preempt_over_share: true\n  preempt_min_run: 10m\n",
			   &victims, &first);
	assert_int_equal(victims, 1);
	assert_true(first == 0);   /* A: B, the younger, has run 2 min only */
	assert_true(t >= HOUR_US && t <= HOUR_US + OS_GRACE_US);
	/* a longer minimum run time: nothing until A has run it */
	t = over_share_run("fairshare:\n  preempt_over_share: true\n  preempt_min_run: 2h\n",
			   &victims, &first);
	assert_int_equal(victims, 1);
	assert_true(first == 0);
	assert_true(t >= 2 * HOUR_US && t <= 2 * HOUR_US + OS_GRACE_US);
	t = over_share_run("fairshare:\n  preempt_min_run: 10m\n", &victims, &first);
	assert_int_equal(victims, 0);
	assert_true(t == -1);
}

struct quota_ctx {
	char reason[256];
	int started;
};

static void q_start(void *ctx, struct fs_job *fj, const struct place_result *res)
{
	((struct quota_ctx *)ctx)->started++;
}

static void q_wait(void *ctx, struct fs_job *fj, const char *reason)
{
	snprintf(((struct quota_ctx *)ctx)->reason, 256, "%s", reason);
}

/* A project's max_gpus holds across its users: b's job waits on a's GPUs, with the numbers. */
static void test_project_quota_waits(void **state)
{
	static const struct fs_ops ops = { pre_try, q_start, q_wait, NULL, NULL };
	static const int node[1] = { 0 }, nslots[1] = { 4 }, s0[4] = { 0, 1, 2, 3 };
	static const int *const slot[1] = { s0 };
	struct cluster_config cc;
	struct strbuf err = STRBUF_INIT;
	struct place_node n[1];
	struct fs_running run;
	struct fs_job j[1];
	struct fs_pass p;
	struct quota_ctx c;
	int totals[2] = { 0, 8 };
	struct fs_pool pools[2] = { { NULL, 0, 0 }, { n, 1, 8 } };

	load(&cc, "fairshare:\n  users:\n    a: {project: p}\n    b: {project: p}\n"
	     "  projects:\n    p: {max_gpus: 4}\n", &err);
	memset(n, 0, sizeof(n));
	n[0].name = "n0";
	n[0].up = 1;
	n[0].total = 8;
	memset(n[0].used, 1, 4);
	memset(&run, 0, sizeof(run));
	run.gpu = 1;
	run.nr = 1;
	run.node = node;
	run.nslots = nslots;
	run.slot = slot;
	run.user = "a";
	run.project = "p";
	run.size = 4;
	mkjob(&j[0], "b", 1, 0, 0);
	memset(&c, 0, sizeof(c));
	fs_pass_prepare(&p, &cc.fairshare, NULL, HOUR_US, j, 1, &run, 1, totals);
	fs_pass_place(&p, pools, &run, 1, &ops, &c);
	assert_int_equal(c.started, 0);   /* 4 GPUs are free, the project has none left */
	assert_string_equal(c.reason, "quota: project 'p' has 4 of max_gpus 4 GPUs in use, this "
			    "job needs 1");
	fs_pass_release(&p);
	run.size = 3;   /* one GPU of the project's free: it starts */
	memset(&c, 0, sizeof(c));
	fs_pass_prepare(&p, &cc.fairshare, NULL, HOUR_US, j, 1, &run, 1, totals);
	fs_pass_place(&p, pools, &run, 1, &ops, &c);
	assert_int_equal(c.started, 1);
	fs_pass_release(&p);
	cluster_config_release(&cc);
	strbuf_release(&err);
}

static void test_submit_limits(void **state)
{
	struct cluster_config cc;
	struct strbuf err = STRBUF_INIT;
	long long t = 0;

	load(&cc, "fairshare:\n  user_limits: {max_gpus: 8, max_pending: 2, max_time: 4h}\n"
	     "  projects:\n    big: {max_slots: 16}\n", &err);
	assert_int_equal(fs_check_submit(&cc.fairshare, "a", NULL, 1, 16, &t, 0, 0, &err), -1);
	assert_string_equal(err.buf, "the job needs 16 GPUs at once, user 'a' may use at most 8 "
			    "(fairshare user max_gpus in cluster.yaml)");
	strbuf_reset(&err);
	assert_int_equal(fs_check_submit(&cc.fairshare, "a", "big", 0, 32, &t, 0, 0, &err), -1);
	assert_non_null(strstr(err.buf, "project 'big' may use at most 16"));
	strbuf_reset(&err);
	assert_int_equal(fs_check_submit(&cc.fairshare, "a", NULL, 1, 8, &t, 2, 0, &err), -1);
	assert_non_null(strstr(err.buf, "user 'a' has 2 job(s) pending"));
	strbuf_reset(&err);
	t = 5 * 3600 * 1000LL;
	assert_int_equal(fs_check_submit(&cc.fairshare, "a", NULL, 1, 8, &t, 1, 0, &err), -1);
	assert_non_null(strstr(err.buf, "timeout 5h is longer than user 'a' may run a job (max_time 4h)"));
	strbuf_reset(&err);
	t = 0;
	assert_int_equal(fs_check_submit(&cc.fairshare, "a", NULL, 1, 8, &t, 1, 0, &err), 0);
	assert_int_equal(t, 4 * 3600 * 1000LL);   /* the job gets max_time as its timeout */
	cluster_config_release(&cc);
	strbuf_release(&err);
}

/* ------------------------------------------------ the simulated week */

#define NODES 4
#define GPUS 8
#define STEP_US (15LL * 60 * 1000000)   /* a pass every 15 minutes; durations are multiples */
#define MAXJ 20000

struct sjob {
	struct fs_job fj;
	int user;
	long long dur_us, start_us, end_us;
	int running, done;
	int nr, node[NODES], nslots[NODES], slot[NODES][GPUS];
	const int *slotp[NODES];
	unsigned long long wait_fp;
};

struct sim {
	struct place_node n[NODES];
	struct sjob *j;
	size_t nr;
	long long now;
	int nusers;
	const char **users;
	int *max_gpus;            /* per user, 0: none */
	double gpu_s[8];          /* received, per user */
	unsigned long long rng;
	int started_this_pass;
	long long top_violations, tops_checked;
	int shapes;               /* give the jobs their fs_job.shape */
	long long tries;          /* sim_try() calls */
};

static unsigned rnd(struct sim *s, unsigned n)
{
	s->rng = s->rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return (unsigned)(s->rng >> 33) % n;
}

static enum place_status sim_try(void *ctx, struct fs_job *fj, struct place_node *n, size_t nr,
				 int plan, struct place_result *res, struct strbuf *reason)
{
	struct place_req r = { .nodes = fj->size > GPUS ? fj->size / GPUS : 1,
			       .per_node = fj->size > GPUS ? GPUS : fj->size };

	((struct sim *)ctx)->tries++;
	return placement_try(n, nr, &r, res, reason);
}

static void sim_start(void *ctx, struct fs_job *fj, const struct place_result *res)
{
	struct sim *s = ctx;
	struct sjob *j = fj->job;

	j->running = 1;
	j->start_us = s->now;
	j->end_us = s->now + j->dur_us;
	j->nr = res->nr;
	for (int k = 0; k < res->nr; k++) {
		j->node[k] = res->node[k];
		j->nslots[k] = fj->per_node;
		memcpy(j->slot[k], res->slots[k], sizeof(int) * (size_t)fj->per_node);
		j->slotp[k] = j->slot[k];
	}
}

static void sim_wait(void *ctx, struct fs_job *fj, const char *reason)
{
}

static unsigned long long sim_fp(void *ctx, int gpu, const struct place_node *n, size_t nr)
{
	unsigned long long h = 1469598103934665603ULL;

	for (size_t i = 0; i < nr; i++)
		for (int k = 0; k < n[i].total; k++)
			h = (h ^ (unsigned long long)(n[i].used[k] + 2 * k + 1)) * 1099511628211ULL;
	return h ? h : 1;
}

static void submit(struct sim *s, int user)
{
	static const int sizes[] = { 1, 1, 2, 2, 4, 8, 16 };
	struct sjob *j = &s->j[s->nr++];
	int size = sizes[rnd(s, 7)];

	/* what can never run under a quota is refused at submission (fs_check_submit) */
	while (s->max_gpus && s->max_gpus[user] && size > s->max_gpus[user])
		size = sizes[rnd(s, 7)];

	assert_true(s->nr < MAXJ);
	memset(j, 0, sizeof(*j));
	j->user = user;
	mkjob(&j->fj, s->users[user], size, s->now, 0);
	j->fj.per_node = size > GPUS ? GPUS : size;
	j->fj.job = j;
	j->fj.wait_fp = &j->wait_fp;
	j->dur_us = STEP_US * (1 + rnd(s, 16));          /* 15 min to 4 h */
	/* its timeout: the duration, or up to an hour more (a timeout is an upper bound) */
	j->fj.limit_ms = (j->dur_us + STEP_US * rnd(s, 5)) / 1000;
	if (s->shapes)   /* sim_try() reads the size alone */
		j->fj.shape = 1 + (unsigned long long)size;
}

static void check_promise(struct sim *s, const struct fs_job *top)
{
	struct place_node shadow[NODES];
	struct place_result res;
	struct strbuf why = STRBUF_INIT;

	memcpy(shadow, s->n, sizeof(shadow));
	for (size_t i = 0; i < s->nr; i++) {
		struct sjob *j = &s->j[i];

		if (!j->running || j->start_us + j->fj.limit_ms * 1000 > top->expected_start_us)
			continue;
		for (int k = 0; k < j->nr; k++)
			for (int x = 0; x < j->nslots[k]; x++)
				shadow[j->node[k]].used[j->slot[k][x]] = 0;
	}
	s->tops_checked++;
	if (sim_try(s, (struct fs_job *)top, shadow, NODES, 1, &res, &why) != PLACE_OK)
		s->top_violations++;
	strbuf_release(&why);
}

/*
 * Run users (with shares in cfg) for a week: each keeps 6 jobs queued.
 * Returns nothing; s->gpu_s holds what each received.
 */
static void simulate(struct sim *s, const struct fairshare_config *cfg, long long span_us)
{
	static const struct fs_ops ops = { sim_try, sim_start, sim_wait, sim_fp, NULL };
	struct fs_usage usage;
	int totals[2] = { 0, NODES * GPUS };

	fs_usage_init(&usage, cfg->half_life_ms);
	s->j = calloc(MAXJ, sizeof(*s->j));
	for (int i = 0; i < NODES; i++) {
		memset(&s->n[i], 0, sizeof(s->n[i]));
		s->n[i].name = i == 0 ? "n0" : i == 1 ? "n1" : i == 2 ? "n2" : "n3";
		s->n[i].up = 1;
		s->n[i].total = GPUS;
	}
	for (s->now = 0; s->now < span_us; s->now += STEP_US) {
		struct fs_job **pend = NULL, *pjobs;
		struct fs_running *run;
		size_t np = 0, nrun = 0;
		int pending[8] = { 0 }, inuse[8] = { 0 };
		struct fs_pass p;
		struct fs_pool pools[2] = { { NULL, 0, 0 }, { s->n, NODES, NODES * GPUS } };

		/* attempts that ended free their slots and count as usage */
		for (size_t i = 0; i < s->nr; i++) {
			struct sjob *j = &s->j[i];

			if (!j->running || j->end_us > s->now)
				continue;
			j->running = 0;
			j->done = 1;
			for (int k = 0; k < j->nr; k++)
				for (int x = 0; x < j->nslots[k]; x++)
					s->n[j->node[k]].used[j->slot[k][x]] = 0;
			fs_usage_add(&usage, s->users[j->user], NULL, j->fj.size, j->start_us,
				     j->end_us);
		}
		for (size_t i = 0; i < s->nr; i++)
			if (!s->j[i].running && !s->j[i].done)
				pending[s->j[i].user]++;
		for (int u = 0; u < s->nusers; u++)
			while (pending[u]++ < 6)
				submit(s, u);
		pjobs = calloc(s->nr, sizeof(*pjobs));
		pend = calloc(s->nr, sizeof(*pend));
		run = calloc(s->nr, sizeof(*run));
		for (size_t i = 0; i < s->nr; i++) {
			struct sjob *j = &s->j[i];

			if (j->running) {
				struct fs_running *r = &run[nrun++];

				r->gpu = 1;
				r->start_us = j->start_us;
				r->end_us = j->start_us + j->fj.limit_ms * 1000;
				r->nr = j->nr;
				r->node = j->node;
				r->nslots = j->nslots;
				r->slot = j->slotp;
				r->user = s->users[j->user];
				r->size = j->fj.size;
			} else if (!j->done) {
				pjobs[np] = j->fj;
				pend[np++] = &s->j[i].fj;
			}
		}
		fs_pass_prepare(&p, cfg, &usage, s->now, pjobs, np, run, nrun, totals);
		fs_pass_place(&p, pools, run, nrun, &ops, s);
		/*
		 * The promise: after the pass, with everything that runs (the jobs it
		 * started included) ending at its timeout, the top job still fits when
		 * its reservation said.  Backfill started nothing that delays it.
		 */
		for (size_t i = 0; i < np; i++)
			if (pjobs[i].top && pjobs[i].expected_start_us)
				check_promise(s, &pjobs[i]);
		/* quotas hold after every pass */
		for (size_t i = 0; i < s->nr; i++)
			if (s->j[i].running)
				inuse[s->j[i].user] += s->j[i].fj.size;
		for (int u = 0; u < s->nusers; u++)
			if (s->max_gpus && s->max_gpus[u] && inuse[u] > s->max_gpus[u])
				fail_msg("user %s uses %d GPUs, over its max_gpus %d", s->users[u],
					 inuse[u], s->max_gpus[u]);
		/* GPU-hours received in this step, after the first day (the start, when
		 * nobody has used anything, is FIFO and equal for all) */
		for (size_t i = 0; i < s->nr && s->now >= DAY_US; i++)
			if (s->j[i].running)
				s->gpu_s[s->j[i].user] += s->j[i].fj.size * (double)STEP_US / 1e6;
		fs_pass_release(&p);
		free(pjobs);
		free(pend);
		free(run);
	}
	fs_usage_release(&usage);
	free(s->j);
}

static void check_shares(struct sim *s, const double *share, double tol, const char *what)
{
	double total = 0, stotal = 0;

	for (int u = 0; u < s->nusers; u++) {
		total += s->gpu_s[u];
		stotal += share[u];
	}
	for (int u = 0; u < s->nusers; u++) {
		double got = s->gpu_s[u] / total, want = share[u] / stotal;


		print_message("%s: %s received %.1f%% of %.0f GPU-hours, share %.1f%%\n", what,
			      s->users[u], 100 * got, total / 3600, 100 * want);
		if (fabs(got - want) > tol * want)
			fail_msg("%s: %s received %.3f of the GPU-hours, its share is %.3f (tolerance "
				 "%.0f%% of it)", what, s->users[u], got, want, 100 * tol);
	}
	print_message("%s: %lld top job(s) started as promised, %lld violation(s)\n", what,
		      s->tops_checked, s->top_violations);
	assert_int_equal(s->top_violations, 0);
	assert_true(s->tops_checked > 10);   /* reservations were made and kept */
}

/*
 * Tolerance: each user's fraction of the GPU-hours of days 2 to 7 within 20%
 * of its share (relative; the deviations are printed: two users within 4%,
 * five users within 18%).  What deviates is backfill: the slots the top
 * job's reservation leaves idle go to whoever's job fits them, which favours
 * users below the top with many small jobs, as in Slurm.  The first day is left
 * out: with no usage yet everyone's factor is 1 and the queue is FIFO, and a
 * half-life of a day forgets that head start before the week is over.
 */
/* A simulated week of users (fairshare: section fs) with the given seed and quotas. */
static void week_of(struct sim *s, const char *fs, const char **users, int n,
		    unsigned long long seed, int *max_gpus, int shapes)
{
	struct cluster_config cc;
	struct strbuf err = STRBUF_INIT;

	load(&cc, fs, &err);
	memset(s, 0, sizeof(*s));
	s->shapes = shapes;
	s->users = users;
	s->nusers = n;
	s->rng = seed;
	s->max_gpus = max_gpus;
	simulate(s, &cc.fairshare, 7 * DAY_US);
	cluster_config_release(&cc);
	strbuf_release(&err);
}

static void week(struct sim *s, const char *fs, const char **users, int n,
		 unsigned long long seed, int *max_gpus)
{
	week_of(s, fs, users, n, seed, max_gpus, 1);
}

/*
 * fs_job.shape: a pass tries one job of a shape on a pool that did not change
 * since it failed, not every one; what starts, and when, is the same.
 */
static void test_week_shapes_change_nothing(void **state)
{
	static const char *users[] = { "u1", "u2", "u3", "u4", "u5" };
	static const char *fs = "fairshare:\n  half_life: 1d\n  users:\n    u3: {share: 2}\n"
				"    u4: {share: 2}\n    u5: {share: 4}\n";
	struct sim a, b;

	week_of(&a, fs, users, 5, 3, NULL, 0);
	week_of(&b, fs, users, 5, 3, NULL, 1);
	for (int u = 0; u < 5; u++)
		assert_true(a.gpu_s[u] == b.gpu_s[u]);
	assert_int_equal(a.nr, b.nr);
	assert_int_equal(a.tops_checked, b.tops_checked);
	print_message("placement tries in a week: %lld without shapes, %lld with\n", a.tries,
		      b.tries);
	assert_true(b.tries < a.tries);
}

static void test_week_two_users(void **state)
{
	static const char *users[] = { "alice", "bob" };
	static const double share[] = { 3, 1 };
	struct sim s;

	week(&s, "fairshare:\n  half_life: 1d\n  users:\n    alice: {share: 3}\n"
	     "    bob: {share: 1}\n", users, 2, 1, NULL);
	check_shares(&s, share, 0.05, "two users");
}

static void test_week_five_users_quota(void **state)
{
	static const char *users[] = { "u1", "u2", "u3", "u4", "u5" };
	/* u5 is capped at 12 of 32 GPUs (37.5%); the others share the rest 1:1:2:2 */
	static const double capped[] = { 1, 1, 2, 2, 0 };
	int max_gpus[] = { 0, 0, 0, 0, 12 };
	double total = 0;
	struct sim s;

	/* u5's share (40%, 12.8 GPUs) is above its quota: it gets at most 12 */
	week(&s, "fairshare:\n  half_life: 1d\n  users:\n    u3: {share: 2}\n"
	     "    u4: {share: 2}\n    u5: {share: 4, max_gpus: 12}\n", users, 5, 7, max_gpus);
	for (int u = 0; u < 5; u++)
		total += s.gpu_s[u];
	assert_true(s.gpu_s[4] / total <= 12.0 / 32 + 1e-9);
	assert_true(s.gpu_s[4] / total > 0.30);
	s.nusers = 4;
	check_shares(&s, capped, 0.20, "five users, u5 at its quota");
}

static void test_week_five_users(void **state)
{
	static const char *users[] = { "u1", "u2", "u3", "u4", "u5" };
	static const double share[] = { 1, 1, 2, 2, 4 };
	struct sim s;

	week(&s, "fairshare:\n  half_life: 1d\n  users:\n    u3: {share: 2}\n"
	     "    u4: {share: 2}\n    u5: {share: 4}\n", users, 5, 3, NULL);
	check_shares(&s, share, 0.20, "five users");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config),
		cmocka_unit_test(test_usage_decay),
		cmocka_unit_test(test_priority_order),
		cmocka_unit_test(test_running_counts),
		cmocka_unit_test(test_preempt_fewest_youngest),
		cmocka_unit_test(test_preempt_over_share),
		cmocka_unit_test(test_project_quota_waits),
		cmocka_unit_test(test_submit_limits),
		cmocka_unit_test(test_week_two_users),
		cmocka_unit_test(test_week_shapes_change_nothing),
		cmocka_unit_test(test_week_five_users),
		cmocka_unit_test(test_week_five_users_quota),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
