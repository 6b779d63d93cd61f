/*
 * test_trainer_kernels.c - the trainer's CPU kernels and the MLP's gradients.
 *
 * Gradients are checked against central finite differences of a separate,
 * double-precision reference MLP written here from the definitions (so a
 * bug shared by forward and backward in trainer/ cannot hide), for every
 * parameter of every layer, with ReLU and GELU.  Each kernel is also checked
 * on its own: GEMM in all four transpose cases, bias + activation, softmax
 * cross-entropy, optimisers against hand-computed steps, the learning-rate
 * schedule and the bf16/fp16 conversions the GPU path relies on.
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
#include "trainer/config.h"
#include "trainer/kernels.h"
#include "trainer/model.h"
#include "trainer/train.h"

static void fill(float *x, size_t n, struct rng *r, float scale)
{
	for (size_t i = 0; i < n; i++)
		x[i] = scale * rng_normal(r);
}

static void test_gemm_transposes(void **state)
{
	enum { M = 5, N = 4, K = 3 };
	struct rng r;
	float a[M * K], b[K * N], at[K * M], bt[N * K], c[M * N], want[M * N];

	rng_seed(&r, 7);
	fill(a, M * K, &r, 1.0f);
	fill(b, K * N, &r, 1.0f);
	for (int i = 0; i < M; i++)
		for (int p = 0; p < K; p++)
			at[p * M + i] = a[i * K + p];
	for (int p = 0; p < K; p++)
		for (int j = 0; j < N; j++)
			bt[j * K + p] = b[p * N + j];
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double s = 0;

			for (int p = 0; p < K; p++)
				s += (double)a[i * K + p] * b[p * N + j];
			want[i * N + j] = (float)(2.0 * s + 0.5);   /* alpha 2, beta 0.5 on C = 1 */
		}
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			for (int i = 0; i < M * N; i++)
				c[i] = 1.0f;
			gemm_cpu(ta, tb, M, N, K, 2.0f, ta ? at : a, ta ? M : K, tb ? bt : b, tb ? K : N,
				 0.5f, c, N);
			for (int i = 0; i < M * N; i++)
				assert_float_equal(c[i], want[i], 1e-5);
		}
}

static void test_bias_act(void **state)
{
	float y[6] = { -1, 0.5f, 2, -0.25f, 3, -4 }, pre[6], b[3] = { 0.5f, -1, 1 }, y2[6];

	memcpy(y2, y, sizeof(y));
	bias_act_forward_cpu(y, NULL, b, 2, 3, ACT_RELU);
	assert_float_equal(y[0], 0.0f, 0);
	assert_float_equal(y[1], 0.0f, 0);
	assert_float_equal(y[2], 3.0f, 0);
	assert_float_equal(y[3], 0.25f, 0);
	assert_float_equal(y[4], 2.0f, 0);
	assert_float_equal(y[5], 0.0f, 0);
	bias_act_forward_cpu(y2, pre, b, 2, 3, ACT_GELU);
	for (int i = 0; i < 6; i++)
		assert_float_equal(y2[i], gelu_cpu(pre[i]), 1e-7);
	assert_float_equal(pre[2], 3.0f, 0);
	/* gelu'(x) against finite differences in double */
	for (double x = -4; x <= 4; x += 0.37) {
		double k = sqrt(2.0 / M_PI), h = 1e-5;
		double fp = 0.5 * (x + h) * (1 + tanh(k * ((x + h) + 0.044715 * pow(x + h, 3))));
		double fm = 0.5 * (x - h) * (1 + tanh(k * ((x - h) + 0.044715 * pow(x - h, 3))));

		assert_float_equal(gelu_grad_cpu((float)x), (fp - fm) / (2 * h), 2e-5);
	}
}

/*
 * The contract kernels.h states and the CUDA twin keeps: `pre` is y + bias
 * for EVERY activation, negative values of ReLU included, and y is act(pre).
 * (The reference once copied ReLU's output into pre, so the GPU twin test
 * disagreed on every negative pre-activation.)
 */
static void test_bias_act_pre_is_preactivation(void **state)
{
	enum { N = 3, D = 5 };
	float b[D] = { 0.5f, -1, 1, -0.25f, 2 };

	for (int act = ACT_NONE; act <= ACT_GELU; act++) {
		float y0[N * D], y[N * D], pre[N * D];

		for (int i = 0; i < N * D; i++)
			y0[i] = (float)(i % 7) - 3.5f;
		memcpy(y, y0, sizeof(y));
		memset(pre, 0xff, sizeof(pre));   /* NaN: a value never written shows */
		bias_act_forward_cpu(y, pre, b, N, D, (enum act_kind)act);
		for (int i = 0; i < N * D; i++) {
			float v = y0[i] + b[i % D];
			float want = act == ACT_RELU ? (v > 0 ? v : 0) : act == ACT_GELU ? gelu_cpu(v) : v;

			if (pre[i] != v)
				fail_msg("act %d: pre[%d] = %g, want the pre-activation %g", act, i, pre[i], v);
			assert_float_equal(y[i], want, 0);
		}
	}
}

static void test_bias_grad(void **state)
{
	float dy[6] = { 1, 2, 3, 4, 5, 6 }, db[3] = { 10, 10, 10 };

	bias_grad_cpu(db, dy, 2, 3, 1.0f);
	assert_float_equal(db[0], 15, 0);
	assert_float_equal(db[2], 19, 0);
	bias_grad_cpu(db, dy, 2, 3, 0.0f);
	assert_float_equal(db[1], 7, 0);
}

/* loss = sum over rows of -log softmax(x)[label]; gradient vs finite differences */
static void test_softmax_xent(void **state)
{
	enum { N = 3, C = 5 };
	struct rng r;
	float x[N * C], d[N * C];
	int y[N] = { 0, 4, 2 }, correct;
	double loss;

	rng_seed(&r, 3);
	fill(x, N * C, &r, 2.0f);
	loss = softmax_xent_cpu(d, x, y, N, C, 1.0f, &correct);
	assert_float_equal(loss, softmax_xent_eval_cpu(x, y, N, C, NULL), 1e-12);
	for (int i = 0; i < N * C; i++) {
		float save = x[i], h = 1e-2f;
		double lp, lm;

		x[i] = save + h;
		lp = softmax_xent_eval_cpu(x, y, N, C, NULL);
		x[i] = save - h;
		lm = softmax_xent_eval_cpu(x, y, N, C, NULL);
		x[i] = save;
		assert_float_equal(d[i], (lp - lm) / (2 * h), 2e-3);
	}
	/* large logits must not overflow */
	x[0] = 1000.0f;
	loss = softmax_xent_cpu(d, x, y, 1, C, 1.0f, &correct);
	assert_true(isfinite(loss));
	assert_int_equal(correct, 1);
	assert_float_equal(loss, 0.0, 1e-6);
}

/* ------------------------------------------------ whole-model gradients */

/* Double-precision reference MLP: mean cross-entropy over n rows. */
static double ref_loss(const struct model *m, const double *p, const float *x, const int *y, int n)
{
	const struct model_spec *s = &m->spec;
	int L = s->nr_hidden + 1, dims[MODEL_MAX_LAYERS + 2];
	double total = 0;

	dims[0] = s->input_dim;
	for (int l = 0; l < s->nr_hidden; l++)
		dims[l + 1] = s->hidden[l];
	dims[L] = s->classes;
	for (int i = 0; i < n; i++) {
		double h[64], o[64], mx, sum = 0;

		for (int j = 0; j < dims[0]; j++)
			h[j] = x[i * dims[0] + j];
		for (int l = 0; l < L; l++) {
			const double *w = p + m->segs[2 * l].off, *b = p + m->segs[2 * l + 1].off;

			for (int k = 0; k < dims[l + 1]; k++) {
				double v = b[k];

				for (int j = 0; j < dims[l]; j++)
					v += w[k * dims[l] + j] * h[j];
				if (l < L - 1) {
					if (s->act == ACT_RELU)
						v = v > 0 ? v : 0;
					else
						v = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
				}
				o[k] = v;
			}
			memcpy(h, o, sizeof(double) * dims[l + 1]);
		}
		mx = h[0];
		for (int k = 1; k < dims[L]; k++)
			mx = h[k] > mx ? h[k] : mx;
		for (int k = 0; k < dims[L]; k++)
			sum += exp(h[k] - mx);
		total += log(sum) - (h[y[i]] - mx);
	}
	return total / n;
}

struct bucket_log {
	int order[MODEL_MAX_LAYERS];
	int nr;
};

static void log_bucket(int b, void *data)
{
	struct bucket_log *bl = data;

	bl->order[bl->nr++] = b;
}

static void check_model_grads(enum act_kind act)
{
	struct model_spec spec = { .name = "mlp", .hidden = { 7, 6 }, .nr_hidden = 2, .act = act,
				  .input_dim = 5, .classes = 4, .max_batch = 8 };
	struct model m;
	struct strbuf err = STRBUF_INIT;
	struct rng r;
	float *params, *grads, x[8 * 5];
	double *pd;
	int y[8], correct;
	struct bucket_log bl = { { 0 }, 0 };
	double loss;

	assert_int_equal(model_create(&m, &spec, 0, 0, &err), 0);
	assert_int_equal(m.nr_buckets, 3);
	params = calloc(m.nr_params, sizeof(float));
	grads = calloc(m.nr_params, sizeof(float));
	pd = calloc(m.nr_params, sizeof(double));
	rng_seed(&r, 11);
	m.ops->init_params(&m, params, &r);
	fill(x, 8 * 5, &r, 1.0f);
	for (int i = 0; i < 8; i++)
		y[i] = (int)rng_below(&r, 4);
	loss = m.ops->train_step(&m, params, grads, 0.0f, x, y, 8, 1.0f / 8, &correct, log_bucket, &bl);
	/* buckets are announced last layer first, each once */
	assert_int_equal(bl.nr, 3);
	assert_int_equal(bl.order[0], 2);
	assert_int_equal(bl.order[2], 0);
	for (size_t i = 0; i < m.nr_params; i++)
		pd[i] = params[i];
	assert_float_equal(loss / 8, ref_loss(&m, pd, x, y, 8), 1e-5);
	for (int s = 0; s < m.nr_segs; s++) {
		for (size_t i = m.segs[s].off; i < m.segs[s].off + m.segs[s].len; i++) {
			double h = 1e-6, save = pd[i], lp, lm, fd;

			pd[i] = save + h;
			lp = ref_loss(&m, pd, x, y, 8);
			pd[i] = save - h;
			lm = ref_loss(&m, pd, x, y, 8);
			pd[i] = save;
			fd = (lp - lm) / (2 * h);
			if (fabs(grads[i] - fd) > 1e-4 + 1e-3 * fabs(fd))
				fail_msg("%s: %s[%zu] analytic %g, finite difference %g",
					 act == ACT_RELU ? "relu" : "gelu", m.segs[s].name,
					 i - m.segs[s].off, grads[i], fd);
		}
	}
	/* accumulation: grad_beta 1 adds a second, identical micro-batch */
	{
		float *g2 = calloc(m.nr_params, sizeof(float));

		memcpy(g2, grads, m.nr_params * sizeof(float));
		m.ops->train_step(&m, params, g2, 1.0f, x, y, 8, 1.0f / 8, NULL, NULL, NULL);
		for (size_t i = 0; i < m.nr_params; i++)
			assert_float_equal(g2[i], 2 * grads[i], 1e-6 + 1e-5 * fabsf(grads[i]));
		/* an empty micro-batch leaves zeros (beta 0) and still announces buckets */
		bl.nr = 0;
		m.ops->train_step(&m, params, g2, 0.0f, x, y, 0, 1.0f, NULL, log_bucket, &bl);
		assert_int_equal(bl.nr, 3);
		for (size_t i = 0; i < m.nr_params; i++)
			assert_float_equal(g2[i], 0.0f, 0);
		free(g2);
	}
	model_release(&m);
	free(params);
	free(grads);
	free(pd);
	strbuf_release(&err);
}

static void test_mlp_grads_relu(void **state)
{
	check_model_grads(ACT_RELU);
}

static void test_mlp_grads_gelu(void **state)
{
	check_model_grads(ACT_GELU);
}

static void test_model_errors(void **state)
{
	struct model_spec spec = { .name = "transformer", .hidden = { 8 }, .nr_hidden = 1,
				  .act = ACT_RELU, .input_dim = 4, .classes = 2, .max_batch = 4 };
	struct model m;
	struct strbuf err = STRBUF_INIT;

	assert_int_equal(model_create(&m, &spec, 0, 0, &err), -1);
	assert_non_null(strstr(err.buf, "unknown model 'transformer'"));
	strbuf_reset(&err);
	spec.name = "mlp";
	assert_int_equal(model_create(&m, &spec, 0, 1, &err), -1);
	assert_non_null(strstr(err.buf, "fp32"));
	strbuf_release(&err);
}

/* ---------------------------------------------------------- optimisers */

static void test_sgd(void **state)
{
	float p[2] = { 1, -2 }, g[2] = { 0.5f, 1 }, mom[2] = { 0, 0 };

	sgd_update_cpu(p, g, mom, 2, 0.1f, 0.9f, 0.0f);
	assert_float_equal(p[0], 0.95f, 1e-7);
	sgd_update_cpu(p, g, mom, 2, 0.1f, 0.9f, 0.0f);
	/* buf = 0.9 * 0.5 + 0.5 = 0.95 */
	assert_float_equal(mom[0], 0.95f, 1e-7);
	assert_float_equal(p[0], 0.95f - 0.095f, 1e-6);
	assert_float_equal(p[1], -2.29f, 1e-6);
	/* weight decay is added to the gradient (L2), no momentum */
	sgd_update_cpu(p + 1, g + 1, NULL, 1, 0.1f, 0.0f, 0.5f);
	assert_float_equal(p[1], -2.29f - 0.1f * (1 - 0.5f * 2.29f), 1e-6);
}

static void test_adamw(void **state)
{
	float p = 1.0f, g = 0.2f, m = 0, v = 0;
	double pd = 1.0, md = 0, vd = 0, b1 = 0.9, b2 = 0.999, eps = 1e-8, lr = 0.01, wd = 0.1;

	for (int t = 1; t <= 3; t++) {
		adamw_update_cpu(&p, &g, &m, &v, 1, (float)lr, (float)b1, (float)b2, (float)eps,
				 (float)wd, t);
		md = b1 * md + (1 - b1) * 0.2;
		vd = b2 * vd + (1 - b2) * 0.04;
		pd -= lr * (wd * pd + (md / (1 - pow(b1, t))) / (sqrt(vd / (1 - pow(b2, t))) + eps));
		assert_float_equal(p, pd, 1e-6);
	}
}

static void test_reductions(void **state)
{
	float x[4] = { 1, -2, 3, 0.5f };

	assert_float_equal(sumsq_cpu(x, 4), 14.25, 1e-12);
	scale_cpu(x, 4, 2.0f);
	assert_float_equal(x[1], -4.0f, 0);
	assert_true(all_finite_cpu(x, 4));
	x[2] = NAN;
	assert_false(all_finite_cpu(x, 4));
	x[2] = INFINITY;
	assert_false(all_finite_cpu(x, 4));
}

static void test_lr_schedule(void **state)
{
	struct train_config c;
	struct strbuf err = STRBUF_INIT;

	train_config_init(&c);
	c.lr = 1.0;
	c.warmup = 4;
	c.min_lr = 0.1;
	assert_int_equal(train_config_check(&c, &err), 0);
	assert_float_equal(train_lr_at(&c, 0, 14), 0.25, 1e-12);
	assert_float_equal(train_lr_at(&c, 3, 14), 1.0, 1e-12);
	assert_float_equal(train_lr_at(&c, 4, 14), 1.0, 1e-12);
	assert_float_equal(train_lr_at(&c, 13, 14), 0.1, 1e-12);
	assert_float_equal(train_lr_at(&c, 8, 14), 0.1 + 0.45 * (1 + cos(M_PI * 4 / 9)), 1e-12);
	c.sched = SCHED_CONSTANT;
	assert_float_equal(train_lr_at(&c, 13, 14), 1.0, 1e-12);
	strbuf_release(&err);
}

/* ------------------------------------------------------ 16-bit formats */

static void test_half_formats(void **state)
{
	assert_int_equal(float_to_bf16(1.0f), 0x3f80);
	assert_int_equal(float_to_bf16(-2.0f), 0xc000);
	/* 1 + 2^-8 is halfway between bf16 neighbours: ties to even (down) */
	assert_int_equal(float_to_bf16(1.00390625f), 0x3f80);
	assert_int_equal(float_to_bf16(1.01171875f), 0x3f82);   /* 1 + 3*2^-8: tie, up to even */
	assert_true(isnan(bf16_to_float(float_to_bf16(NAN))));
	assert_float_equal(bf16_to_float(float_to_bf16(3.140625f)), 3.140625f, 0);

	assert_int_equal(float_to_fp16(1.0f), 0x3c00);
	assert_int_equal(float_to_fp16(-2.0f), 0xc000);
	assert_int_equal(float_to_fp16(65504.0f), 0x7bff);
	assert_int_equal(float_to_fp16(65519.0f), 0x7bff);
	assert_int_equal(float_to_fp16(65520.0f), 0x7c00);      /* rounds to infinity */
	assert_int_equal(float_to_fp16(INFINITY), 0x7c00);
	assert_int_equal(float_to_fp16(5.9604645e-8f), 0x0001); /* 2^-24, smallest subnormal */
	assert_int_equal(float_to_fp16(2.9802322e-8f), 0x0000); /* 2^-25: tie, to even (0) */
	assert_int_equal(float_to_fp16(6.103515625e-5f), 0x0400); /* 2^-14, smallest normal */
	assert_int_equal(float_to_fp16(1.00048828125f), 0x3c00); /* 1 + 2^-11: tie, to even */
	assert_true(isnan(fp16_to_float(float_to_fp16(NAN))));
	for (int h = 0; h < 0x7c00; h += 7)   /* every finite positive half round-trips */
		assert_int_equal(float_to_fp16(fp16_to_float((uint16_t)h)), h);
	for (int h = 0; h < 0x7f80; h += 13)
		assert_int_equal(float_to_bf16(bf16_to_float((uint16_t)h)), h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gemm_transposes),
		cmocka_unit_test(test_bias_act),
		cmocka_unit_test(test_bias_act_pre_is_preactivation),
		cmocka_unit_test(test_bias_grad),
		cmocka_unit_test(test_softmax_xent),
		cmocka_unit_test(test_mlp_grads_relu),
		cmocka_unit_test(test_mlp_grads_gelu),
		cmocka_unit_test(test_model_errors),
		cmocka_unit_test(test_sgd),
		cmocka_unit_test(test_adamw),
		cmocka_unit_test(test_reductions),
		cmocka_unit_test(test_lr_schedule),
		cmocka_unit_test(test_half_formats),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
