/*
 * test_trainer_gpu.c - every CUDA kernel against its CPU twin, and a whole
 * training step (model and loop) on the GPU against the CPU reference: the
 * MLP, and one step of the transformer (--model gpt) with its own kernels, in
 * fp32 and with bf16/fp16 GEMM inputs.
 *
 * Built twice: in the unit-test (ASan, no CUDA) build, where it only reports
 * that it skips; and by mk/trainer.mk as build/<tree>/gpu-tests/
 * test_trainer_gpu with CUDA, run by tests/e2e/test_trainer_gpu.py.  With
 * CUDA but no GPU it skips every test, saying so.  Tolerances: fp32 kernels
 * agree to rounding (cuBLAS sums in another order); 16-bit GEMMs are compared
 * with the CPU GEMM on the same rounded inputs; bf16 training is compared to
 * fp32 training loosely (relative to the gradient's norm).
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
#include "trainer/comm.h"
#include "trainer/config.h"
#include "trainer/gpu.h"
#include "trainer/kernels.h"
#include "trainer/model.h"
#include "trainer/train.h"

#ifndef DT_HAVE_CUDA
static void test_skipped(void **state)
{
	if (gpu_required())
		fail_msg("dttrain GPU twin tests: DT_REQUIRE_GPU is set, but this build has no CUDA "
			 "(build with nvcc on PATH or CUDA_HOME set, without NO_CUDA)");
	print_message("dttrain GPU twin tests: this build has no CUDA; skipped "
		      "(run tests/e2e/test_trainer_gpu.py on a machine with a GPU)\n");
	skip();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_skipped),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
#else

static int have_gpu;

static int setup(void **state)
{
	char err[256];
	int n = gpu_count(err, sizeof(err));

	if (n < 0) {
		/* a broken CUDA set-up is a failure, never a skip */
		print_message("dttrain GPU twin tests: %s\n", err);
		return -1;
	}
	if (n == 0 && gpu_required()) {
		print_message("dttrain GPU twin tests: DT_REQUIRE_GPU is set, but no CUDA device is "
			      "visible (nvidia-smi; CUDA_VISIBLE_DEVICES='%s')\n",
			      getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
		return -1;
	}
	if (n == 0) {
		print_message("dttrain GPU twin tests: no CUDA device visible; every test skips\n");
		return 0;
	}
	if (gpu_init(0, err, sizeof(err))) {
		print_message("gpu_init: %s\n", err);
		return -1;
	}
	have_gpu = 1;
	return 0;
}

static int teardown(void **state)
{
	if (have_gpu)
		gpu_shutdown();
	return 0;
}

#define NEED_GPU() do { if (!have_gpu) skip(); } while (0)

static float *rand_host(size_t n, uint64_t seed, float scale)
{
	struct rng r;
	float *x = malloc(n * sizeof(float));

	rng_seed(&r, seed);
	for (size_t i = 0; i < n; i++)
		x[i] = scale * rng_normal(&r);
	return x;
}

static void *up(const void *h, size_t bytes)
{
	void *d = gpu_malloc(bytes);

	gpu_h2d(d, h, bytes);
	return d;
}

static float *down(const float *d, size_t n)
{
	float *h = malloc(n * sizeof(float));

	gpu_d2h(h, d, n * sizeof(float));
	return h;
}

static void expect_close(const char *what, const float *got, const float *want, size_t n,
			 double atol, double rtol)
{
	for (size_t i = 0; i < n; i++)
		if (!(fabs((double)got[i] - want[i]) <= atol + rtol * fabs(want[i])))
			fail_msg("%s[%zu]: gpu %.9g, cpu %.9g", what, i, got[i], want[i]);
}

static void test_gemm(void **state)
{
	enum { M = 37, N = 29, K = 45 };
	float *a = rand_host(M * K, 1, 1), *b = rand_host(K * N, 2, 1), *c0 = rand_host(M * N, 3, 1);

	NEED_GPU();
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			float *c = malloc(sizeof(float) * M * N), *da = up(a, sizeof(float) * M * K);
			float *db = up(b, sizeof(float) * K * N), *dc = up(c0, sizeof(float) * M * N), *g;

			memcpy(c, c0, sizeof(float) * M * N);
			gemm_cpu(ta, tb, M, N, K, 1.5f, a, ta ? M : K, b, tb ? K : N, 0.5f, c, N);
			gemm_gpu(ta, tb, M, N, K, 1.5f, da, ta ? M : K, db, tb ? K : N, 0.5f, dc, N);
			g = down(dc, M * N);
			expect_close("gemm", g, c, M * N, 1e-4, 1e-4);
			free(g);
			free(c);
			gpu_free(da);
			gpu_free(db);
			gpu_free(dc);
		}
	free(a);
	free(b);
	free(c0);
}

static void test_gemm_mixed(void **state)
{
	enum { M = 16, N = 24, K = 40 };
	float *a = rand_host(M * K, 4, 1), *b = rand_host(K * N, 5, 1);

	NEED_GPU();
	for (int prec = 1; prec <= 2; prec++) {
		uint16_t a16[M * K], b16[K * N];
		float ar[M * K], br[K * N], c[M * N], *g;
		uint16_t *da, *db;
		float *dc = gpu_malloc(sizeof(float) * M * N);

		if (prec == 1) {
			cast_to_bf16_cpu(a16, a, M * K);
			cast_to_bf16_cpu(b16, b, K * N);
		} else {
			cast_to_fp16_cpu(a16, a, M * K);
			cast_to_fp16_cpu(b16, b, K * N);
		}
		for (int i = 0; i < M * K; i++)
			ar[i] = prec == 1 ? bf16_to_float(a16[i]) : fp16_to_float(a16[i]);
		for (int i = 0; i < K * N; i++)
			br[i] = prec == 1 ? bf16_to_float(b16[i]) : fp16_to_float(b16[i]);
		da = up(a16, sizeof(a16));
		db = up(b16, sizeof(b16));
		gemm_cpu(0, 0, M, N, K, 1.0f, ar, K, br, N, 0.0f, c, N);
		gemm_mixed_gpu(prec, 0, 0, M, N, K, 1.0f, da, K, db, N, 0.0f, dc, N);
		g = down(dc, M * N);
		expect_close(prec == 1 ? "gemm bf16" : "gemm fp16", g, c, M * N, 1e-3, 1e-3);
		free(g);
		gpu_free(da);
		gpu_free(db);
		gpu_free(dc);
	}
	free(a);
	free(b);
}

static void test_bias_act_and_backward(void **state)
{
	enum { N = 33, D = 70 };
	float *y = rand_host(N * D, 6, 2), *bias = rand_host(D, 7, 1), *dy = rand_host(N * D, 8, 1);

	NEED_GPU();
	for (int act = ACT_NONE; act <= ACT_GELU; act++) {
		float yc[N * D], pc[N * D], dc[N * D], *g, *gp, *gd;
		float *dyv = up(y, sizeof(yc)), *dpre = gpu_malloc(sizeof(pc)), *db = up(bias, D * 4);
		float *ddy = up(dy, sizeof(dc));

		memcpy(yc, y, sizeof(yc));
		memcpy(dc, dy, sizeof(dc));
		bias_act_forward_cpu(yc, pc, bias, N, D, (enum act_kind)act);
		bias_act_forward_gpu(dyv, dpre, db, N, D, (enum act_kind)act);
		g = down(dyv, N * D);
		gp = down(dpre, N * D);
		expect_close("bias_act_forward", g, yc, N * D, 1e-6, 1e-5);
		expect_close("bias_act_forward pre", gp, pc, N * D, 1e-6, 1e-6);
		act_backward_cpu(dc, act == ACT_GELU ? pc : yc, N * D, (enum act_kind)act);
		act_backward_gpu(ddy, act == ACT_GELU ? dpre : dyv, N * D, (enum act_kind)act);
		gd = down(ddy, N * D);
		expect_close("act_backward", gd, dc, N * D, 1e-6, 1e-5);
		free(g);
		free(gp);
		free(gd);
		gpu_free(dyv);
		gpu_free(dpre);
		gpu_free(db);
		gpu_free(ddy);
	}
	free(y);
	free(bias);
	free(dy);
}

static void test_bias_grad(void **state)
{
	enum { N = 50, D = 300 };
	float *dy = rand_host(N * D, 9, 1), *db0 = rand_host(D, 10, 1), db[D], *g;
	float *ddy, *ddb;

	NEED_GPU();
	ddy = up(dy, sizeof(float) * N * D);
	ddb = up(db0, sizeof(db));
	memcpy(db, db0, sizeof(db));
	bias_grad_cpu(db, dy, N, D, 1.0f);
	bias_grad_gpu(ddb, ddy, N, D, 1.0f);
	g = down(ddb, D);
	expect_close("bias_grad", g, db, D, 1e-5, 1e-5);
	free(g);
	bias_grad_cpu(db, dy, N, D, 0.0f);
	bias_grad_gpu(ddb, ddy, N, D, 0.0f);
	g = down(ddb, D);
	expect_close("bias_grad beta 0", g, db, D, 1e-5, 1e-5);
	free(g);
	gpu_free(ddy);
	gpu_free(ddb);
	free(dy);
	free(db0);
}

static void test_softmax_xent(void **state)
{
	enum { N = 45, C = 10 };
	float *x = rand_host(N * C, 11, 3), dc[N * C], *g;
	int y[N], cc, gc;
	double lc, lg;
	float *dx, *dd;
	int *dy;

	NEED_GPU();
	for (int i = 0; i < N; i++)
		y[i] = (i * 7) % C;
	dx = up(x, sizeof(dc));
	dd = gpu_malloc(sizeof(dc));
	dy = up(y, sizeof(y));
	lc = softmax_xent_cpu(dc, x, y, N, C, 0.125f, &cc);
	lg = softmax_xent_gpu(dd, dx, dy, N, C, 0.125f, &gc);
	assert_float_equal(lg, lc, 1e-4 * fabs(lc));
	assert_int_equal(gc, cc);
	g = down(dd, N * C);
	expect_close("softmax_xent grad", g, dc, N * C, 1e-7, 1e-4);
	lg = softmax_xent_eval_gpu(dx, dy, N, C, &gc);
	assert_float_equal(lg, lc, 1e-4 * fabs(lc));
	free(g);
	/* in place (dlogits == logits, as kernels.h allows): same loss and gradient */
	lg = softmax_xent_gpu(dx, dx, dy, N, C, 0.125f, &gc);
	assert_float_equal(lg, lc, 1e-4 * fabs(lc));
	assert_int_equal(gc, cc);
	g = down(dx, N * C);
	expect_close("softmax_xent grad in place", g, dc, N * C, 1e-7, 1e-4);
	free(g);
	gpu_free(dx);
	gpu_free(dd);
	gpu_free(dy);
	free(x);
}

static void test_optimizers(void **state)
{
	enum { P = 1000 };
	float *p = rand_host(P, 12, 1), *g = rand_host(P, 13, 1), *m = rand_host(P, 14, 0.1f);
	float *v = rand_host(P, 15, 0.1f), *gpv;

	NEED_GPU();
	for (int i = 0; i < P; i++)
		v[i] = fabsf(v[i]);
	{
		float *dp = up(p, P * 4), *dg = up(g, P * 4), *dm = up(m, P * 4), *dv = up(v, P * 4);

		sgd_update_cpu(p, g, m, P, 0.1f, 0.9f, 0.01f);
		sgd_update_gpu(dp, dg, dm, P, 0.1f, 0.9f, 0.01f);
		gpv = down(dp, P);
		expect_close("sgd p", gpv, p, P, 1e-6, 1e-6);
		free(gpv);
		adamw_update_cpu(p, g, m, v, P, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 3);
		adamw_update_gpu(dp, dg, dm, dv, P, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 3);
		gpv = down(dp, P);
		expect_close("adamw p", gpv, p, P, 1e-6, 1e-5);
		free(gpv);
		gpv = down(dv, P);
		expect_close("adamw v", gpv, v, P, 1e-9, 1e-5);
		free(gpv);
		assert_float_equal(sumsq_gpu(dg, P), sumsq_cpu(g, P), 1e-9 * sumsq_cpu(g, P));
		scale_cpu(g, P, 0.5f);
		scale_gpu(dg, P, 0.5f);
		gpv = down(dg, P);
		expect_close("scale", gpv, g, P, 0, 0);
		free(gpv);
		assert_true(all_finite_gpu(dg, P));
		g[P - 1] = NAN;
		gpu_h2d(dg, g, P * 4);
		assert_false(all_finite_gpu(dg, P));
		assert_false(all_finite_cpu(g, P));
		gpu_free(dp);
		gpu_free(dg);
		gpu_free(dm);
		gpu_free(dv);
	}
	free(p);
	free(g);
	free(m);
	free(v);
}

static void test_casts(void **state)
{
	enum { N = 4096 };
	float *x = rand_host(N, 16, 100);
	uint16_t want[N], got[N], *d;
	float *dx;

	NEED_GPU();
	x[0] = 65520.0f;
	x[1] = 1e-9f;
	x[2] = NAN;
	dx = up(x, sizeof(float) * N);
	d = gpu_malloc(sizeof(got));
	cast_to_bf16_cpu(want, x, N);
	cast_half_gpu(1, d, dx, N);
	gpu_d2h(got, d, sizeof(got));
	assert_memory_equal(got + 3, want + 3, sizeof(uint16_t) * (N - 3));
	assert_int_equal(got[0], want[0]);
	cast_to_fp16_cpu(want, x, N);
	cast_half_gpu(2, d, dx, N);
	gpu_d2h(got, d, sizeof(got));
	assert_memory_equal(got + 3, want + 3, sizeof(uint16_t) * (N - 3));
	assert_int_equal(got[0], 0x7c00);
	gpu_free(dx);
	gpu_free(d);
	free(x);
}

/* One train_step of the MLP on both devices: loss and every gradient. */
static void check_model_step(enum act_kind act, int prec)
{
	struct model_spec spec = { .name = "mlp", .hidden = { 64, 48 }, .nr_hidden = 2, .act = act,
				  .input_dim = 30, .classes = 7, .max_batch = 40 };
	struct model cpu, gpu;
	struct strbuf err = STRBUF_INIT;
	struct rng r;
	float *params, *grads, *x = rand_host(40 * 30, 17, 1), *dparams, *dgrads, *dx, *g;
	int y[40], *dy, cc, gc;
	double lc, lg, norm = 0, diff = 0;

	assert_int_equal(model_create(&cpu, &spec, 0, 0, &err), 0);
	assert_int_equal(model_create(&gpu, &spec, 1, prec, &err), 0);
	params = malloc(cpu.nr_params * 4);
	grads = malloc(cpu.nr_params * 4);
	rng_seed(&r, 5);
	cpu.ops->init_params(&cpu, params, &r);
	for (int i = 0; i < 40; i++)
		y[i] = i % 7;
	dparams = up(params, cpu.nr_params * 4);
	dgrads = gpu_malloc(cpu.nr_params * 4);
	dx = up(x, 40 * 30 * 4);
	dy = up(y, sizeof(y));
	lc = cpu.ops->train_step(&cpu, params, grads, 0.0f, x, y, 40, 1.0f / 40, &cc, NULL, NULL);
	lg = gpu.ops->train_step(&gpu, dparams, dgrads, 0.0f, dx, dy, 40, 1.0f / 40, &gc, NULL, NULL);
	g = down(dgrads, cpu.nr_params);
	for (size_t i = 0; i < cpu.nr_params; i++) {
		norm += (double)grads[i] * grads[i];
		diff += ((double)g[i] - grads[i]) * ((double)g[i] - grads[i]);
	}
	if (!prec) {
		assert_float_equal(lg, lc, 1e-4 * fabs(lc));
		expect_close("mlp grads", g, grads, cpu.nr_params, 1e-6, 1e-3);
	} else {
		assert_float_equal(lg, lc, 2e-2 * fabs(lc));
		if (sqrt(diff) > 3e-2 * sqrt(norm))
			fail_msg("16-bit gradients differ by %.3g of their norm", sqrt(diff / norm));
	}
	free(g);
	free(params);
	free(grads);
	free(x);
	gpu_free(dparams);
	gpu_free(dgrads);
	gpu_free(dx);
	gpu_free(dy);
	model_release(&cpu);
	model_release(&gpu);
	strbuf_release(&err);
}

static void test_model_step_fp32(void **state)
{
	NEED_GPU();
	check_model_step(ACT_RELU, 0);
	check_model_step(ACT_GELU, 0);
}

static void test_model_step_bf16(void **state)
{
	NEED_GPU();
	check_model_step(ACT_RELU, 1);
	check_model_step(ACT_GELU, 2);
}

/* ------------------------------------------------------- transformer */

/* The device array d [n] against the host's want (expect_close), then freed of its copy. */
static void expect_device_close(const char *what, const float *d, const float *want, size_t n,
				double atol, double rtol)
{
	float *g = down(d, n);

	expect_close(what, g, want, n, atol, rtol);
	free(g);
}

static void test_layernorm(void **state)
{
	enum { N = 37, D = 72 };
	float *x = rand_host(N * D, 30, 2), *w = rand_host(D, 31, 1), *b = rand_host(D, 32, 1);
	float *dout = rand_host(N * D, 33, 1), out[N * D], mean[N], rstd[N], dx[N * D], dw[D], db[D];
	float *dxv, *dwv, *dbv, *doutv, *outv, *meanv, *rstdv, *gdx, *gdw, *gdb;

	NEED_GPU();
	dxv = up(x, sizeof(dx));
	dwv = up(w, sizeof(dw));
	dbv = up(b, sizeof(db));
	doutv = up(dout, sizeof(dx));
	outv = gpu_malloc(sizeof(out));
	meanv = gpu_malloc(sizeof(mean));
	rstdv = gpu_malloc(sizeof(rstd));
	layernorm_forward_cpu(out, mean, rstd, x, w, b, N, D);
	layernorm_forward_gpu(outv, meanv, rstdv, dxv, dwv, dbv, N, D);
	expect_device_close("layernorm", outv, out, N * D, 1e-5, 1e-4);
	/* backward accumulates into what is there: start both from the same values */
	memcpy(dx, x, sizeof(dx));
	memcpy(dw, w, sizeof(dw));
	memcpy(db, b, sizeof(db));
	gdx = up(dx, sizeof(dx));
	gdw = up(dw, sizeof(dw));
	gdb = up(db, sizeof(db));
	layernorm_backward_cpu(dx, dw, db, dout, x, w, mean, rstd, N, D);
	layernorm_backward_gpu(gdx, gdw, gdb, doutv, dxv, dwv, meanv, rstdv, N, D);
	expect_device_close("layernorm dx", gdx, dx, N * D, 1e-5, 1e-4);
	expect_device_close("layernorm dw", gdw, dw, D, 1e-5, 1e-4);
	expect_device_close("layernorm db", gdb, db, D, 1e-5, 1e-4);
	gpu_free(gdx);
	gpu_free(gdw);
	gpu_free(gdb);
	gpu_free(dxv);
	gpu_free(dwv);
	gpu_free(dbv);
	gpu_free(doutv);
	gpu_free(outv);
	gpu_free(meanv);
	gpu_free(rstdv);
	free(x);
	free(w);
	free(b);
	free(dout);
}

static void test_softmax_causal(void **state)
{
	enum { CNT = 3, T = 45, N = CNT * T * T };
	float *s = rand_host(N, 34, 3), *dp = rand_host(N, 35, 1), p[N], ds[N], *sv, *dpv;

	NEED_GPU();
	sv = up(s, sizeof(p));
	dpv = up(dp, sizeof(ds));
	memcpy(p, s, sizeof(p));
	memcpy(ds, dp, sizeof(ds));
	softmax_causal_cpu(p, CNT, T);
	softmax_causal_gpu(sv, CNT, T);
	expect_device_close("softmax_causal", sv, p, N, 1e-6, 1e-4);
	softmax_causal_backward_cpu(ds, p, CNT, T);
	softmax_causal_backward_gpu(dpv, sv, CNT, T);
	expect_device_close("softmax_causal_backward", dpv, ds, N, 1e-6, 1e-4);
	gpu_free(sv);
	gpu_free(dpv);
	free(s);
	free(dp);
}

static void test_embed_and_add(void **state)
{
	enum { V = 11, T = 9, D = 40, NS = 5, LD = T + 1 };
	float tok[NS * LD], *wte = rand_host(V * D, 36, 1), *wpe = rand_host(T * D, 37, 1);
	float *dout = rand_host(NS * T * D, 38, 1), out[NS * T * D], dwte[V * D], dwpe[T * D];
	float *tokv, *wtev, *wpev, *doutv, *outv;
	int labels[NS * T], *labelsv, gl[NS * T];

	NEED_GPU();
	wtev = up(wte, sizeof(dwte));
	wpev = up(wpe, sizeof(dwpe));
	doutv = up(dout, sizeof(out));
	outv = gpu_malloc(sizeof(out));
	labelsv = gpu_malloc(sizeof(labels));
	for (int i = 0; i < NS * LD; i++)
		tok[i] = (float)((i * 7 + 3) % V);
	tokv = up(tok, sizeof(tok));
	embed_forward_cpu(out, tok, LD, wte, wpe, NS, T, D);
	embed_forward_gpu(outv, tokv, LD, wtev, wpev, NS, T, D);
	expect_device_close("embed", outv, out, NS * T * D, 0, 0);
	/* backward accumulates onto the tables themselves */
	memcpy(dwte, wte, sizeof(dwte));
	memcpy(dwpe, wpe, sizeof(dwpe));
	embed_backward_cpu(dwte, dwpe, dout, tok, LD, NS, T, D);
	embed_backward_gpu(wtev, wpev, doutv, tokv, LD, NS, T, D);
	expect_device_close("embed dwte", wtev, dwte, V * D, 1e-5, 1e-5);
	expect_device_close("embed dwpe", wpev, dwpe, T * D, 1e-5, 1e-5);
	next_tokens_cpu(labels, tok, LD, NS, T);
	next_tokens_gpu(labelsv, tokv, LD, NS, T);
	gpu_d2h(gl, labelsv, sizeof(gl));
	assert_memory_equal(gl, labels, sizeof(gl));
	add_cpu(out, out, dout, NS * T * D);
	add_gpu(outv, outv, doutv, NS * T * D);
	expect_device_close("add", outv, out, NS * T * D, 1e-6, 1e-6);
	gpu_free(tokv);
	gpu_free(wtev);
	gpu_free(wpev);
	gpu_free(doutv);
	gpu_free(outv);
	gpu_free(labelsv);
	free(wte);
	free(wpe);
	free(dout);
}

static void test_gemm_batched(void **state)
{
	enum { B = 4, M = 13, N = 11, K = 8, SA = M * K + 3, SB = N * K + 5, SC = M * N + 2 };
	float *a = rand_host(B * SA, 39, 1), *b = rand_host(B * SB, 40, 1), *c = rand_host(B * SC, 41, 1);
	float *av, *bv, *cv;

	NEED_GPU();
	av = up(a, B * SA * 4);
	bv = up(b, B * SB * 4);
	cv = up(c, B * SC * 4);
	/* A [M, K] and B^T [N, K]: the attention score shape, with gaps between matrices */
	gemm_batched_cpu(0, 1, M, N, K, 0.7f, a, K, SA, b, K, SB, 0.5f, c, N, SC, B);
	gemm_batched_gpu(0, 1, M, N, K, 0.7f, av, K, SA, bv, K, SB, 0.5f, cv, N, SC, B);
	expect_device_close("gemm_batched", cv, c, B * SC, 1e-5, 1e-4);
	gpu_free(av);
	gpu_free(bv);
	gpu_free(cv);
	free(a);
	free(b);
	free(c);
}

/*
 * One GPT step (forward, loss, backward) on each device from the same
 * parameters: fp32 to rounding per segment; bf16/fp16 (prec 1/2: the linear
 * layers' GEMMs on 16-bit inputs) loosely, relative to the gradient's norm.
 */
static void check_gpt_step(int prec)
{
	enum { NB = 6, T = 24, V = 50 };
	struct model_spec spec = { .name = "gpt", .layers = 2, .heads = 4, .embd = 32, .context = T,
				  .classes = V, .input_dim = T + 1, .max_batch = NB };
	struct model cpu, gpu;
	struct strbuf err = STRBUF_INIT;
	struct rng r;
	float *params, *grads, x[NB * (T + 1)], *dparams, *dgrads, *dx;
	int cc, gc;
	double lc, lg, norm = 0, diff = 0;

	assert_int_equal(model_create(&cpu, &spec, 0, 0, &err), 0);
	if (model_create(&gpu, &spec, 1, prec, &err))
		fail_msg("gpt on the GPU, precision %d: %s", prec, err.buf);
	params = malloc(cpu.nr_params * 4);
	grads = malloc(cpu.nr_params * 4);
	rng_seed(&r, 6);
	cpu.ops->init_params(&cpu, params, &r);
	for (size_t i = 0; i < cpu.nr_params; i++)
		params[i] += 0.1f * rng_normal(&r);
	for (int i = 0; i < NB * (T + 1); i++)
		x[i] = (float)rng_below(&r, V);
	dparams = up(params, cpu.nr_params * 4);
	dgrads = gpu_malloc(cpu.nr_params * 4);
	dx = up(x, sizeof(x));
	lc = cpu.ops->train_step(&cpu, params, grads, 0.0f, x, NULL, NB, 1.0f / NB, &cc, NULL, NULL);
	lg = gpu.ops->train_step(&gpu, dparams, dgrads, 0.0f, dx, NULL, NB, 1.0f / NB, &gc, NULL,
				 NULL);
	if (!prec) {
		assert_float_equal(lg, lc, 1e-4 * fabs(lc));
		for (int s = 0; s < cpu.nr_segs; s++)
			expect_device_close(cpu.segs[s].name, dgrads + cpu.segs[s].off,
					    grads + cpu.segs[s].off, cpu.segs[s].len, 1e-6, 1e-3);
	} else {
		float *g = down(dgrads, cpu.nr_params);

		assert_float_equal(lg, lc, 2e-2 * fabs(lc));
		for (size_t i = 0; i < cpu.nr_params; i++) {
			norm += (double)grads[i] * grads[i];
			diff += ((double)g[i] - grads[i]) * ((double)g[i] - grads[i]);
		}
		free(g);
		if (sqrt(diff) > 3e-2 * sqrt(norm))
			fail_msg("gpt %s gradients differ by %.3g of their norm",
				 prec == 1 ? "bf16" : "fp16", sqrt(diff / norm));
		assert_true(diff > 0);   /* the 16-bit path was taken */
	}
	free(params);
	free(grads);
	gpu_free(dparams);
	gpu_free(dgrads);
	gpu_free(dx);
	model_release(&cpu);
	model_release(&gpu);
	strbuf_release(&err);
}

static void test_gpt_step(void **state)
{
	NEED_GPU();
	check_gpt_step(0);
}

static void test_gpt_step_mixed(void **state)
{
	NEED_GPU();
	check_gpt_step(1);
	check_gpt_step(2);
}

/* The whole loop: 12 steps of SGD on each device end with close weights. */
static void test_train_loop(void **state)
{
	struct train_config c;
	struct train_result rc, rg;
	struct strbuf err = STRBUF_INIT;
	struct comm comm;

	NEED_GPU();
	for (int dev = 0; dev < 2; dev++) {
		train_config_init(&c);
		c.hidden = "64,32";
		c.input_dim = 20;
		c.classes = 5;
		c.train_size = 512;
		c.val_size = 64;
		c.batch = 64;
		c.steps = 12;
		c.lr = 0.05;
		c.quiet = 1;
		c.log_every = 0;
		c.device = dev ? "cuda" : "cpu";
		assert_int_equal(train_config_check(&c, &err), 0);
		memset(&comm, 0, sizeof(comm));
		comm.world = comm.local_world = 1;
		memset(dev ? &rg : &rc, 0, sizeof(rc));
		(dev ? &rg : &rc)->want_params = 1;
		if (train_run(&c, &comm, dev ? &rg : &rc, &err))
			fail_msg("train_run on %s: %s", c.device, err.buf);
		if (dev)   /* train_run released the device; the other tests need it */
			gpu_init(0, (char[64]){ 0 }, 64);
	}
	expect_close("params after 12 steps", rg.params, rc.params, rc.nr_params, 1e-5, 1e-3);
	assert_float_equal(rg.val_loss, rc.val_loss, 1e-3 * rc.val_loss);
	free(rc.params);
	free(rg.params);
	strbuf_release(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gemm),
		cmocka_unit_test(test_gemm_mixed),
		cmocka_unit_test(test_bias_act_and_backward),
		cmocka_unit_test(test_bias_grad),
		cmocka_unit_test(test_softmax_xent),
		cmocka_unit_test(test_optimizers),
		cmocka_unit_test(test_casts),
		cmocka_unit_test(test_model_step_fp32),
		cmocka_unit_test(test_model_step_bf16),
		cmocka_unit_test(test_layernorm),
		cmocka_unit_test(test_softmax_causal),
		cmocka_unit_test(test_embed_and_add),
		cmocka_unit_test(test_gemm_batched),
		cmocka_unit_test(test_gpt_step),
		cmocka_unit_test(test_gpt_step_mixed),
		cmocka_unit_test(test_train_loop),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
#endif
