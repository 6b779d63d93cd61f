/*
 * test_trainer_parallel.c - the single-process parts of dttrain's other ways
 * to split work (docs/trainer.md): the model's layer ranges that pipeline
 * stages run (two stages and three micro-batches against one train_step), the
 * stage split and the GPipe/1F1B schedules, the flags' checks, and --sync
 * async on one rank (local SGD with one rank is plain SGD: bit-identical).
 *
 * Several ranks (async K=1 against sync, async converging with a slow rank,
 * pipelines of 2 and 4 stages and 2 x 2 against one rank) run under mpirun in
 * tests/e2e/test_trainer_async.py and test_trainer_pipeline.py: MPI stays out
 * of these ASan-built programs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "strbuf.h"
#include "trainer/comm.h"
#include "trainer/config.h"
#include "trainer/model.h"
#include "trainer/train.h"
#include "trainer_run.h"

/* ------------------------------------------------------- layer ranges */

#define ROWS 12
#define IN 6

struct net {
	struct model m;
	float *params, *x;
	int y[ROWS];
};

/* MLP 6-16-8-8-3 with `act` on ROWS random rows. */
static void net_init(struct net *t, enum act_kind act)
{
	struct model_spec spec = { .name = "mlp", .hidden = { 16, 8, 8 }, .nr_hidden = 3,
				   .act = act, .input_dim = IN, .classes = 3, .max_batch = ROWS };
	struct strbuf err = STRBUF_INIT;
	struct rng r;

	assert_int_equal(model_create(&t->m, &spec, 0, 0, &err), 0);
	assert_int_equal(t->m.nr_layers, 4);
	assert_int_equal(t->m.layer_off[4], t->m.nr_params);
	rng_seed(&r, 7);
	t->params = calloc(t->m.nr_params, sizeof(float));
	t->x = calloc(ROWS * IN, sizeof(float));
	t->m.ops->init_params(&t->m, t->params, &r);
	for (int i = 0; i < ROWS * IN; i++)
		t->x[i] = rng_normal(&r);
	for (int i = 0; i < ROWS; i++)
		t->y[i] = i % 3;
	strbuf_release(&err);
}

static void net_release(struct net *t)
{
	model_release(&t->m);
	free(t->params);
	free(t->x);
}

/*
 * Stages [0, 2) and [2, 4) over micro-batches of `mb` rows, GPipe order, the
 * "sent" activations and gradients copied through buffers of the caller's
 * as between ranks.  Returns the summed loss; grads get the gradients.
 */
static double two_stages(struct net *t, int mb, float *grads)
{
	struct model *m = &t->m;
	size_t w2 = m->act_width[2];
	float *mid = calloc(ROWS * w2, sizeof(float)), *dmid = calloc(ROWS * w2, sizeof(float));
	double loss = 0;
	float scale = 1.0f / ROWS;

	memset(grads, 0, m->nr_params * sizeof(float));
	for (int row = 0; row < ROWS; row += mb) {
		const float *out = m->ops->forward_range(m, t->params, 0, 2, row, mb,
							 t->x + row * IN);
		int correct;

		memcpy(mid + row * w2, out, mb * w2 * sizeof(float));
		m->ops->forward_range(m, t->params, 2, 4, row, mb, mid + row * w2);
		loss += m->ops->loss(m, row, mb, t->x + row * IN, t->y + row, scale, &correct);
	}
	for (int row = 0; row < ROWS; row += mb) {
		const float *d = m->ops->backward_range(m, t->params, grads, 1.0f, 2, 4, row, mb,
							mid + row * w2, NULL, NULL, NULL);

		assert_non_null(d);
		memcpy(dmid + row * w2, d, mb * w2 * sizeof(float));
		assert_null(m->ops->backward_range(m, t->params, grads, 1.0f, 0, 2, row, mb,
						   t->x + row * IN, dmid + row * w2, NULL, NULL));
	}
	free(mid);
	free(dmid);
	return loss;
}

static void check_ranges(enum act_kind act)
{
	struct net t;
	float *ref, *got;
	double ref_loss, loss;
	int correct;

	net_init(&t, act);
	ref = calloc(t.m.nr_params, sizeof(float));
	got = calloc(t.m.nr_params, sizeof(float));
	ref_loss = t.m.ops->train_step(&t.m, t.params, ref, 0.0f, t.x, t.y, ROWS, 1.0f / ROWS,
				       &correct, NULL, NULL);
	/* one micro-batch: the same operations as train_step, in two pieces */
	loss = two_stages(&t, ROWS, got);
	assert_true(loss == ref_loss);
	assert_memory_equal(got, ref, t.m.nr_params * sizeof(float));
	/* three micro-batches of 4 rows in flight at once: sums regrouped only */
	loss = two_stages(&t, 4, got);
	if (fabs(loss - ref_loss) > 1e-6 * fabs(ref_loss))
		fail_msg("loss over 3 micro-batches %.9g, one batch %.9g", loss, ref_loss);
	for (size_t i = 0; i < t.m.nr_params; i++)
		if (fabsf(got[i] - ref[i]) > 1e-6f + 1e-5f * fabsf(ref[i]))
			fail_msg("gradient %zu: %.9g over 3 micro-batches, %.9g in one", i, got[i],
				 ref[i]);
	free(ref);
	free(got);
	net_release(&t);
}

static void test_ranges_relu(void **state)
{
	check_ranges(ACT_RELU);
}

static void test_ranges_gelu(void **state)
{
	check_ranges(ACT_GELU);
}

/* ---------------------------------------------------- split, schedules */

static void test_stage_layers(void **state)
{
	struct model_spec spec = { .name = "mlp", .hidden = { 1024, 1024 }, .nr_hidden = 2,
				   .act = ACT_RELU, .input_dim = 784, .classes = 10, .max_batch = 1 };
	struct strbuf err = STRBUF_INIT;
	struct model m;
	int a, b;

	assert_int_equal(model_create(&m, &spec, 0, 0, &err), 0);
	/* 0.80M | 1.05M + 0.01M: the nearest boundary to half the parameters */
	train_stage_layers(&m, 2, 0, &a, &b);
	assert_int_equal(a, 0);
	assert_int_equal(b, 1);
	train_stage_layers(&m, 2, 1, &a, &b);
	assert_int_equal(a, 1);
	assert_int_equal(b, 3);
	/* as many stages as layers: one each, even the tiny last one */
	for (int s = 0; s < 3; s++) {
		train_stage_layers(&m, 3, s, &a, &b);
		assert_int_equal(a, s);
		assert_int_equal(b, s + 1);
	}
	model_release(&m);
	strbuf_release(&err);
}

static void check_schedule(enum pipe_sched kind, int M, int P, int stage, const int *want)
{
	int ops[16];

	train_pipe_schedule(kind, M, P, stage, ops);
	for (int k = 0; k < 2 * M; k++)
		if (ops[k] != want[k])
			fail_msg("%s, %d micro-batches, stage %d of %d: op %d is %d, expected %d",
				 kind == PIPE_GPIPE ? "gpipe" : "1f1b", M, stage, P, k, ops[k], want[k]);
}

static void test_schedules(void **state)
{
	static const int gpipe[] = { 0, 1, 2, 3, -1, -2, -3, -4 };
	static const int first[] = { 0, 1, -1, 2, -2, 3, -3, -4 };   /* 1f1b stage 0 of 2 */
	static const int last[] = { 0, -1, 1, -2, 2, -3, 3, -4 };    /* its last stage */
	static const int warm[] = { 0, 1, 2, -1, -2, -3 };           /* M < P - stage */

	check_schedule(PIPE_GPIPE, 4, 2, 0, gpipe);
	check_schedule(PIPE_GPIPE, 4, 2, 1, gpipe);
	check_schedule(PIPE_1F1B, 4, 2, 0, first);
	check_schedule(PIPE_1F1B, 4, 2, 1, last);
	check_schedule(PIPE_1F1B, 3, 8, 0, warm);
	/* 1F1B keeps at most P - stage micro-batches in flight */
	for (int P = 1; P <= 4; P++)
		for (int s = 0; s < P; s++) {
			int ops[16], live = 0, most = 0;

			train_pipe_schedule(PIPE_1F1B, 8, P, s, ops);
			for (int k = 0; k < 16; k++) {
				live += ops[k] >= 0 ? 1 : -1;
				most = live > most ? live : most;
			}
			assert_int_equal(live, 0);
			assert_true(most <= P - s);
		}
}

/* ---------------------------------------------------------------- flags */

static void check_flags_error(const char *what, void (*set)(struct train_config *),
			      const char *want)
{
	struct train_config c;
	struct strbuf err = STRBUF_INIT;

	train_config_init(&c);
	set(&c);
	assert_int_equal(train_config_check(&c, &err), -1);
	if (!strstr(err.buf, want))
		fail_msg("%s: error '%s' does not say '%s'", what, err.buf, want);
	strbuf_release(&err);
}

static void set_bad_slow(struct train_config *c)
{
	c->slow_rank = "1:";
}

static void set_bad_sync(struct train_config *c)
{
	c->sync = "semi";
}

static void set_async_pipeline(struct train_config *c)
{
	c->sync = "async";
	c->pipeline = 2;
}

static void set_pipeline_accum(struct train_config *c)
{
	c->pipeline = 2;
	c->accum = 2;
}

static void set_every_zero(struct train_config *c)
{
	c->sync = "async";
	c->sync_every = 0;
}

static void set_overlap_sync(struct train_config *c)
{
	c->sync_overlap = 1;
}

static void test_flags(void **state)
{
	struct train_config c;
	struct strbuf err = STRBUF_INIT;

	train_config_init(&c);
	c.slow_rank = "1:50";
	c.pipeline_schedule = "1f1b";
	if (train_config_check(&c, &err))
		fail_msg("valid flags refused: %s", err.buf);
	assert_int_equal(c.slow_rank_id, 1);
	assert_int_equal(c.slow_ms, 50);
	assert_int_equal(c.pipe_sched, PIPE_1F1B);
	assert_int_equal(c.sync_kind, SYNC_SYNC);
	check_flags_error("slow rank", set_bad_slow, "'--slow-rank' expects RANK:MS");
	check_flags_error("sync", set_bad_sync, "unknown sync mode 'semi' (expected sync, async)");
	check_flags_error("async + pipeline", set_async_pipeline, "cannot be combined");
	check_flags_error("pipeline + accum", set_pipeline_accum, "--accum must stay 1");
	check_flags_error("sync-every", set_every_zero, "'--sync-every' must be at least 1");
	check_flags_error("sync-overlap", set_overlap_sync, "--sync-overlap needs --sync async");
	strbuf_release(&err);
}

/* ------------------------------------------------------- one-rank runs */

/* Local SGD on one rank is SGD: every round length gives sync's weights. */
static void test_async_one_rank(void **state)
{
	struct train_config c;
	struct train_result sync, async;
	struct strbuf err = STRBUF_INIT;

	small_config(&c);
	c.train_size = 384;     /* whole batches */
	c.epochs = 4;
	c.weight_decay = 0.01;
	assert_int_equal(run_err(&c, &sync, &err), 0);
	if (!(sync.val_acc >= 0.6))
		fail_msg("sync: validation accuracy %.3f after 4 epochs, expected >= 0.6",
			 sync.val_acc);
	for (int k = 1; k <= 7; k += 6) {
		c.sync = "async";
		c.sync_every = k;
		assert_int_equal(run_err(&c, &async, &err), 0);
		assert_int_equal(async.steps, sync.steps);
		assert_memory_equal(async.params, sync.params, sync.nr_params * sizeof(float));
		assert_true(async.val_loss == sync.val_loss);
		assert_true(isnan(async.bubble));
		free(async.params);
	}
	free(sync.params);
	strbuf_release(&err);
}

static void test_pipeline_needs_ranks(void **state)
{
	struct train_config c;
	struct train_result res;
	struct strbuf err = STRBUF_INIT;

	small_config(&c);
	c.steps = 2;
	c.pipeline = 2;
	assert_int_equal(run_err(&c, &res, &err), DT_EXIT_USAGE);
	assert_non_null(strstr(err.buf, "--pipeline 2 needs a multiple of 2 ranks, got 1"));
	strbuf_release(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ranges_relu),
		cmocka_unit_test(test_ranges_gelu),
		cmocka_unit_test(test_stage_layers),
		cmocka_unit_test(test_schedules),
		cmocka_unit_test(test_flags),
		cmocka_unit_test(test_async_one_rank),
		cmocka_unit_test(test_pipeline_needs_ranks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
