/*
 * test_trainer_gpt.c - the transformer language model (--model gpt) and its
 * text data (--data text:PATH) on the CPU.
 *
 * Gradients are checked against central finite differences of references
 * written here in double precision from the definitions: each new kernel on
 * its own (LayerNorm, causal softmax, embeddings), then the whole model
 * (embeddings, causal multi-head attention, GELU MLP, LayerNorms, the head
 * tied to the token embedding, cross-entropy) for every parameter of every
 * segment, so a failure names the layer.  Then: the layer ranges pipeline
 * stages run (three stages, micro-batches in flight, against train_step),
 * causality (a later token
 * does not change earlier logits), the loss at init near ln(vocab), data
 * parallelism's sum (two half batches = one batch, as 2 ranks all-reduce),
 * the text data set and its sampler shards, and a small model overfitting
 * a repeated string through the whole loop (train_run).
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
#include <unistd.h>

#include "rng.h"
#include "strbuf.h"
#include "trainer/comm.h"
#include "trainer/config.h"
#include "trainer/data.h"
#include "trainer/kernels.h"
#include "trainer/model.h"
#include "trainer/train.h"
#include "trainer_run.h"

static void fill(float *x, size_t n, struct rng *r, float scale)
{
	for (size_t i = 0; i < n; i++)
		x[i] = scale * rng_normal(r);
}

/* Central difference of f at x[i] in double; f reads x. */
#define FD(f, x, i, h) ({ \
	double save_ = (x)[i], p_, m_; \
	(x)[i] = save_ + (h); p_ = (f); \
	(x)[i] = save_ - (h); m_ = (f); \
	(x)[i] = save_; (p_ - m_) / (2 * (h)); })

static void expect_close(const char *what, size_t i, double got, double want, double tol)
{
	if (fabs(got - want) > tol + 1e-3 * fabs(want))
		fail_msg("%s[%zu]: analytic %g, finite difference %g", what, i, got, want);
}

/* ------------------------------------------------------ single kernels */

enum { LN_N = 3, LN_D = 6 };

/* sum_ij r_ij layernorm(x)_ij in double */
static double ref_layernorm_loss(const double *x, const double *w, const double *b,
				 const double *r)
{
	double s = 0;

	for (int i = 0; i < LN_N; i++) {
		double mu = 0, var = 0;

		for (int j = 0; j < LN_D; j++)
			mu += x[i * LN_D + j] / LN_D;
		for (int j = 0; j < LN_D; j++)
			var += (x[i * LN_D + j] - mu) * (x[i * LN_D + j] - mu) / LN_D;
		for (int j = 0; j < LN_D; j++)
			s += r[i * LN_D + j] *
			     ((x[i * LN_D + j] - mu) / sqrt(var + 1e-5) * w[j] + b[j]);
	}
	return s;
}

static void test_layernorm(void **state)
{
	float x[LN_N * LN_D], w[LN_D], b[LN_D], r[LN_N * LN_D], out[LN_N * LN_D], mean[LN_N],
	      rstd[LN_N], dx[LN_N * LN_D], dw[LN_D], db[LN_D];
	double xd[LN_N * LN_D], wd[LN_D], bd[LN_D], rd[LN_N * LN_D];
	struct rng g;

	rng_seed(&g, 3);
	fill(x, LN_N * LN_D, &g, 2.0f);
	fill(w, LN_D, &g, 1.0f);
	fill(b, LN_D, &g, 1.0f);
	fill(r, LN_N * LN_D, &g, 1.0f);
	for (int i = 0; i < LN_N * LN_D; i++) {
		xd[i] = x[i];
		rd[i] = r[i];
		dx[i] = 0.5f;   /* backward accumulates: start from something */
	}
	for (int j = 0; j < LN_D; j++) {
		wd[j] = w[j];
		bd[j] = b[j];
		dw[j] = db[j] = 0.25f;
	}
	layernorm_forward_cpu(out, mean, rstd, x, w, b, LN_N, LN_D);
	{
		double s = 0;

		for (int i = 0; i < LN_N * LN_D; i++)
			s += r[i] * out[i];
		assert_float_equal(s, ref_layernorm_loss(xd, wd, bd, rd), 1e-4);
	}
	layernorm_backward_cpu(dx, dw, db, r, x, w, mean, rstd, LN_N, LN_D);
	for (int i = 0; i < LN_N * LN_D; i++)
		expect_close("layernorm dx", (size_t)i, dx[i] - 0.5f,
			     FD(ref_layernorm_loss(xd, wd, bd, rd), xd, i, 1e-6), 1e-4);
	for (int j = 0; j < LN_D; j++) {
		expect_close("layernorm dw", (size_t)j, dw[j] - 0.25f,
			     FD(ref_layernorm_loss(xd, wd, bd, rd), wd, j, 1e-6), 1e-4);
		expect_close("layernorm db", (size_t)j, db[j] - 0.25f,
			     FD(ref_layernorm_loss(xd, wd, bd, rd), bd, j, 1e-6), 1e-4);
	}
}

enum { SM_COUNT = 2, SM_T = 5 };

static double ref_softmax_causal_loss(const double *s, const double *r)
{
	double total = 0;

	for (int m = 0; m < SM_COUNT; m++)
		for (int i = 0; i < SM_T; i++) {
			const double *row = s + (m * SM_T + i) * SM_T;
			double mx = row[0], sum = 0;

			for (int j = 1; j <= i; j++)
				mx = row[j] > mx ? row[j] : mx;
			for (int j = 0; j <= i; j++)
				sum += exp(row[j] - mx);
			for (int j = 0; j <= i; j++)
				total += r[(m * SM_T + i) * SM_T + j] * exp(row[j] - mx) / sum;
		}
	return total;
}

static void test_softmax_causal(void **state)
{
	enum { N = SM_COUNT * SM_T * SM_T };
	float s[N], p[N], r[N];
	double sd[N], rd[N];
	struct rng g;

	rng_seed(&g, 5);
	fill(s, N, &g, 2.0f);
	fill(r, N, &g, 1.0f);
	for (int i = 0; i < N; i++) {
		sd[i] = s[i];
		rd[i] = r[i];
		p[i] = s[i];
	}
	softmax_causal_cpu(p, SM_COUNT, SM_T);
	for (int m = 0; m < SM_COUNT; m++)
		for (int i = 0; i < SM_T; i++) {
			double sum = 0;

			for (int j = 0; j < SM_T; j++) {
				float v = p[(m * SM_T + i) * SM_T + j];

				if (j > i)
					assert_float_equal(v, 0.0f, 0);   /* masked: exactly zero */
				sum += v;
			}
			assert_float_equal(sum, 1.0, 1e-6);
		}
	{
		/* far-apart scores: exp of -1000 is ~0, not garbage; a tie splits evenly */
		float ext[9] = { 5, 0, 0, 1000, 0, 0, 3, 3, -1e30f };

		softmax_causal_cpu(ext, 1, 3);
		assert_float_equal(ext[0], 1.0f, 0);
		assert_float_equal(ext[3], 1.0f, 0);
		assert_true(ext[4] >= 0.0f && ext[4] < 1e-30f);
		assert_float_equal(ext[6], 0.5f, 1e-7);
		assert_float_equal(ext[7], 0.5f, 1e-7);
		assert_true(ext[8] >= 0.0f && ext[8] < 1e-30f);
	}
	/* the upper triangle of dP must not leak into dS */
	for (int i = 0; i < N; i++)
		if ((i % SM_T) > (i / SM_T) % SM_T)
			r[i] = 1e6f;
	softmax_causal_backward_cpu(r, p, SM_COUNT, SM_T);
	for (int i = 0; i < N; i++) {
		int row = (i / SM_T) % SM_T, col = i % SM_T;

		if (col > row) {
			assert_float_equal(r[i], 0.0f, 0);
			rd[i] = 0;
		}
	}
	for (int i = 0; i < N; i++)
		if (i % SM_T <= (i / SM_T) % SM_T)
			expect_close("softmax_causal dS", (size_t)i, r[i],
				     FD(ref_softmax_causal_loss(sd, rd), sd, i, 1e-6), 1e-5);
}

static void test_embed(void **state)
{
	enum { V = 5, T = 3, D = 4, NS = 2, LD = T + 1 };
	float tok[NS * LD] = { 1, 4, 1, 0, 3, 3, 2, 4 }, wte[V * D], wpe[T * D], out[NS * T * D];
	float dout[NS * T * D], dwte[V * D] = { 0 }, dwpe[T * D] = { 0 }, want_te[V * D] = { 0 };
	int labels[NS * T];
	struct rng g;

	rng_seed(&g, 9);
	fill(wte, V * D, &g, 1.0f);
	fill(wpe, T * D, &g, 1.0f);
	fill(dout, NS * T * D, &g, 1.0f);
	embed_forward_cpu(out, tok, LD, wte, wpe, NS, T, D);
	for (int s = 0; s < NS; s++)
		for (int i = 0; i < T; i++)
			for (int j = 0; j < D; j++)
				assert_float_equal(out[(s * T + i) * D + j],
						   wte[(int)tok[s * LD + i] * D + j] + wpe[i * D + j], 0);
	/* the loss sum(dout * out) is linear: its gradient is exact */
	embed_backward_cpu(dwte, dwpe, dout, tok, LD, NS, T, D);
	for (int s = 0; s < NS; s++)
		for (int i = 0; i < T; i++)
			for (int j = 0; j < D; j++)
				want_te[(int)tok[s * LD + i] * D + j] += dout[(s * T + i) * D + j];
	for (int i = 0; i < V * D; i++)
		assert_float_equal(dwte[i], want_te[i], 1e-6);
	for (int i = 0; i < T * D; i++)
		assert_float_equal(dwpe[i], dout[i] + dout[T * D + i], 1e-6);
	next_tokens_cpu(labels, tok, LD, NS, T);
	for (int s = 0; s < NS; s++)
		for (int i = 0; i < T; i++)
			assert_int_equal(labels[s * T + i], (int)tok[s * LD + i + 1]);
}

/* The vectorisable tanh behind GELU against libm's, over the whole line. */
static void test_tanh_fast(void **state)
{
	static const float special[] = { 0.0f, -0.0f, 1e-30f, 8.99f, 9.01f, 1e30f, -1e30f, INFINITY,
					 -INFINITY };
	double worst = 0;

	for (float u = -20.0f; u < 20.0f; u += 1.0f / 1024) {
		double d = fabs((double)tanh_fast_cpu(u) - tanh((double)u));

		worst = d > worst ? d : worst;
	}
	if (worst > 2e-7)
		fail_msg("tanh_fast_cpu is %g from tanh", worst);
	for (size_t i = 0; i < ARRAY_SIZE(special); i++)
		assert_float_equal(tanh_fast_cpu(special[i]), tanh((double)special[i]), 2e-7);
	assert_true(signbit(tanh_fast_cpu(-0.0f)));
}

static void test_gemm_batched(void **state)
{
	enum { B = 3, M = 2, N = 3, K = 4 };
	float a[B * M * K], b[B * N * K], c[B * M * N];
	struct rng g;

	rng_seed(&g, 13);
	fill(a, B * M * K, &g, 1.0f);
	fill(b, B * N * K, &g, 1.0f);
	gemm_batched_cpu(0, 1, M, N, K, 0.5f, a, K, M * K, b, K, N * K, 0.0f, c, N, M * N, B);
	for (int i = 0; i < B; i++)
		for (int m = 0; m < M; m++)
			for (int n = 0; n < N; n++) {
				double s = 0;

				for (int k = 0; k < K; k++)
					s += (double)a[i * M * K + m * K + k] * b[i * N * K + n * K + k];
				assert_float_equal(c[i * M * N + m * N + n], 0.5 * s, 1e-5);
			}
}

/* ------------------------------------------------- the whole model */

enum { GV = 7, GC = 8, GH = 2, GT = 5, GL = 2, GN = 3, GLD = GT + 1 };

static const double *pseg(const struct model *m, const double *p, const char *name)
{
	for (int i = 0; i < m->nr_segs; i++)
		if (!strcmp(m->segs[i].name, name))
			return p + m->segs[i].off;
	fail_msg("no segment '%s'", name);
	return NULL;
}

static const double *bseg(const struct model *m, const double *p, int l, const char *name)
{
	char full[32];

	snprintf(full, sizeof(full), "h%d.%s", l, name);
	return pseg(m, p, full);
}

static void ref_ln(double out[GT][GC], double in[GT][GC], const double *w, const double *b)
{
	for (int t = 0; t < GT; t++) {
		double mu = 0, var = 0;

		for (int c = 0; c < GC; c++)
			mu += in[t][c] / GC;
		for (int c = 0; c < GC; c++)
			var += (in[t][c] - mu) * (in[t][c] - mu) / GC;
		for (int c = 0; c < GC; c++)
			out[t][c] = (in[t][c] - mu) / sqrt(var + 1e-5) * w[c] + b[c];
	}
}

/* out[t][o] (+)= in[t] . W[o] + b[o], W [o, i] */
static void ref_linear(double *out, int ldo, const double *in, int ldi, const double *w,
		       const double *b, int i_dim, int o_dim, int accumulate)
{
	for (int t = 0; t < GT; t++)
		for (int o = 0; o < o_dim; o++) {
			double v = b[o];

			for (int i = 0; i < i_dim; i++)
				v += in[t * ldi + i] * w[o * i_dim + i];
			out[t * ldo + o] = (accumulate ? out[t * ldo + o] : 0) + v;
		}
}

/* Mean cross-entropy per token of the GPT of kernels.h's definitions, in double. */
static double ref_gpt_loss(const struct model *m, const double *p, const float *x, int n)
{
	const double *wte = pseg(m, p, "wte"), *wpe = pseg(m, p, "wpe");
	double total = 0;
	int hs = GC / GH;

	for (int s = 0; s < n; s++) {
		const float *tok = x + s * GLD;
		double h[GT][GC], a[GT][GC], qkv[GT][3 * GC], y[GT][GC], f[GT][4 * GC];

		for (int t = 0; t < GT; t++)
			for (int c = 0; c < GC; c++)
				h[t][c] = wte[(int)tok[t] * GC + c] + wpe[t * GC + c];
		for (int l = 0; l < GL; l++) {
			ref_ln(a, h, bseg(m, p, l, "ln1.weight"), bseg(m, p, l, "ln1.bias"));
			ref_linear(&qkv[0][0], 3 * GC, &a[0][0], GC, bseg(m, p, l, "attn.qkv.weight"),
				   bseg(m, p, l, "attn.qkv.bias"), GC, 3 * GC, 0);
			for (int hd = 0; hd < GH; hd++)
				for (int t = 0; t < GT; t++) {
					double sc[GT], mx = -INFINITY, sum = 0;

					for (int j = 0; j <= t; j++) {
						sc[j] = 0;
						for (int d = 0; d < hs; d++)
							sc[j] += qkv[t][hd * hs + d] * qkv[j][GC + hd * hs + d];
						sc[j] /= sqrt((double)hs);
						mx = sc[j] > mx ? sc[j] : mx;
					}
					for (int j = 0; j <= t; j++)
						sum += exp(sc[j] - mx);
					for (int d = 0; d < hs; d++) {
						double v = 0;

						for (int j = 0; j <= t; j++)
							v += exp(sc[j] - mx) / sum * qkv[j][2 * GC + hd * hs + d];
						y[t][hd * hs + d] = v;
					}
				}
			ref_linear(&h[0][0], GC, &y[0][0], GC, bseg(m, p, l, "attn.proj.weight"),
				   bseg(m, p, l, "attn.proj.bias"), GC, GC, 1);
			ref_ln(a, h, bseg(m, p, l, "ln2.weight"), bseg(m, p, l, "ln2.bias"));
			ref_linear(&f[0][0], 4 * GC, &a[0][0], GC, bseg(m, p, l, "mlp.fc.weight"),
				   bseg(m, p, l, "mlp.fc.bias"), GC, 4 * GC, 0);
			for (int t = 0; t < GT; t++)
				for (int c = 0; c < 4 * GC; c++) {
					double v = f[t][c];

					f[t][c] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
				}
			ref_linear(&h[0][0], GC, &f[0][0], 4 * GC, bseg(m, p, l, "mlp.proj.weight"),
				   bseg(m, p, l, "mlp.proj.bias"), 4 * GC, GC, 1);
		}
		ref_ln(a, h, pseg(m, p, "lnf.weight"), pseg(m, p, "lnf.bias"));
		for (int t = 0; t < GT; t++) {
			double logit[GV], mx = -INFINITY, sum = 0;

			for (int v = 0; v < GV; v++) {
				logit[v] = 0;
				for (int c = 0; c < GC; c++)
					logit[v] += a[t][c] * wte[v * GC + c];   /* tied head */
				mx = logit[v] > mx ? logit[v] : mx;
			}
			for (int v = 0; v < GV; v++)
				sum += exp(logit[v] - mx);
			total += log(sum) + mx - logit[(int)tok[t + 1]];
		}
	}
	return total / ((double)n * GT);
}

static void tiny_spec(struct model_spec *s, int max_batch)
{
	memset(s, 0, sizeof(*s));
	s->name = "gpt";
	s->layers = GL;
	s->heads = GH;
	s->embd = GC;
	s->context = GT;
	s->classes = GV;
	s->input_dim = GLD;
	s->max_batch = max_batch;
}

static void random_tokens(float *x, int n, struct rng *r)
{
	for (int i = 0; i < n * GLD; i++)
		x[i] = (float)rng_below(r, GV);
}

/*
 * The tiny model for up to max_batch rows, its parameters (returned, caller
 * frees) and n rows of random tokens in x.  GPT-2 init makes tiny gradients;
 * larger random parameters exercise every path.
 */
static float *tiny_model(struct model *m, int max_batch, uint64_t seed, float *x, int n)
{
	struct model_spec spec;
	struct strbuf err = STRBUF_INIT;
	struct rng r;
	float *p;

	tiny_spec(&spec, max_batch);
	if (model_create(m, &spec, 0, 0, &err))
		fail_msg("model_create: %s", err.buf);
	strbuf_release(&err);
	p = calloc(m->nr_params, sizeof(float));
	rng_seed(&r, seed);
	m->ops->init_params(m, p, &r);
	for (size_t i = 0; i < m->nr_params; i++)
		p[i] += 0.3f * rng_normal(&r);
	random_tokens(x, n, &r);
	return p;
}

struct bucket_log {
	int order[MODEL_MAX_LAYERS + 2];
	int nr;
};

static void log_bucket(int b, void *data)
{
	struct bucket_log *bl = data;

	bl->order[bl->nr++] = b;
}

static void test_gpt_grads(void **state)
{
	struct model m;
	struct bucket_log bl = { { 0 }, 0 };
	float x[GN * GLD], *params = tiny_model(&m, GN, 21, x, GN), *grads;
	double *pd, loss;
	int correct = -1;

	assert_int_equal(m.nr_segs, 2 + 12 * GL + 2);
	assert_int_equal(m.nr_buckets, GL + 2);
	assert_int_equal(m.tokens_per_row, GT);
	grads = calloc(m.nr_params, sizeof(float));
	pd = calloc(m.nr_params, sizeof(double));
	for (size_t i = 0; i < m.nr_params; i++)
		grads[i] = 123.0f;   /* grad_beta 0 must overwrite */
	loss = m.ops->train_step(&m, params, grads, 0.0f, x, NULL, GN, 1.0f / GN, &correct,
				 log_bucket, &bl);
	/* lnf first, the blocks from the top, the embeddings last */
	assert_int_equal(bl.nr, GL + 2);
	for (int i = 0; i < GL + 2; i++)
		assert_int_equal(bl.order[i], GL + 1 - i);
	assert_in_range(correct, 0, GN * GT);
	for (size_t i = 0; i < m.nr_params; i++)
		pd[i] = params[i];
	assert_float_equal(loss / GN, ref_gpt_loss(&m, pd, x, GN), 1e-5);
	for (int s = 0; s < m.nr_segs; s++)
		for (size_t i = m.segs[s].off; i < m.segs[s].off + m.segs[s].len; i++)
			expect_close(m.segs[s].name, i - m.segs[s].off, grads[i],
				     FD(ref_gpt_loss(&m, pd, x, GN), pd, i, 1e-6), 2e-5);
	model_release(&m);
	free(params);
	free(grads);
	free(pd);
}

/* What 2 ranks all-reduce (each half scaled by 1/global batch) is one batch's gradient. */
static void test_gpt_halves_sum(void **state)
{
	enum { N = 4 };
	struct model m;
	float x[N * GLD], *params = tiny_model(&m, N, 4, x, N), *g1, *g2;
	double l1, l2;

	g1 = calloc(m.nr_params, sizeof(float));
	g2 = calloc(m.nr_params, sizeof(float));
	l1 = m.ops->train_step(&m, params, g1, 0.0f, x, NULL, N, 1.0f / N, NULL, NULL, NULL);
	l2 = m.ops->train_step(&m, params, g2, 0.0f, x, NULL, N / 2, 1.0f / N, NULL, NULL, NULL);
	l2 += m.ops->train_step(&m, params, g2, 1.0f, x + N / 2 * GLD, NULL, N / 2, 1.0f / N, NULL,
				NULL, NULL);
	assert_float_equal(l1, l2, 1e-5);
	for (size_t i = 0; i < m.nr_params; i++)
		assert_float_equal(g1[i], g2[i], 1e-6 + 1e-4 * fabsf(g1[i]));
	model_release(&m);
	free(params);
	free(g1);
	free(g2);
}

/*
 * Pipeline stages: the layer table, then stages with boundaries cut[0..ns]
 * over micro-batches of mb rows in GPipe order (every forward, then the
 * backwards from the last stage down), activations and their gradients
 * copied between stages through buffers as between ranks.  Every stage
 * writes into one gradient array, so the tied wte gets the head's and the
 * embedding's parts as the loop's sum between ranks gives it.
 */
static double gpt_stages(struct model *m, const float *params, const float *x, int n, int mb,
			 const int *cut, int ns, float *grads)
{
	size_t w = m->act_width[1];
	float *act = calloc((size_t)ns * n * w, sizeof(float));
	float *dact = calloc((size_t)ns * n * w, sizeof(float));
	double loss = 0;

	memset(grads, 0, m->nr_params * sizeof(float));
	for (int row = 0; row < n; row += mb) {
		const float *in = x + row * GLD;

		for (int s = 0; s < ns; s++) {
			const float *out = m->ops->forward_range(m, params, cut[s], cut[s + 1], row,
								 mb, in);

			if (s == ns - 1)
				break;
			memcpy(act + ((size_t)s * n + row) * w, out, mb * w * sizeof(float));
			in = act + ((size_t)s * n + row) * w;
		}
		loss += m->ops->loss(m, row, mb, x + row * GLD, NULL, 1.0f / n, NULL);
	}
	for (int row = 0; row < n; row += mb)
		for (int s = ns - 1; s >= 0; s--) {
			const float *in = s ? act + ((size_t)(s - 1) * n + row) * w : x + row * GLD;
			float *dout = s < ns - 1 ? dact + ((size_t)s * n + row) * w : NULL;
			const float *d = m->ops->backward_range(m, params, grads, 1.0f, cut[s],
								cut[s + 1], row, mb, in, dout,
								NULL, NULL);

			if (s == 0) {
				assert_null(d);
				continue;
			}
			memcpy(dact + ((size_t)(s - 1) * n + row) * w, d, mb * w * sizeof(float));
		}
	free(act);
	free(dact);
	return loss;
}

static void test_gpt_stages(void **state)
{
	enum { N = 4 };
	struct model m;
	float x[N * GLD], *params = tiny_model(&m, N, 5, x, N), *ref, *got;
	/* embeddings | blocks | head; embeddings + block 0 | block 1 + head */
	const int three[] = { 0, 1, GL + 1, GL + 2 }, two[] = { 0, 2, GL + 2 };
	double ref_loss, loss;

	assert_int_equal(m.nr_layers, GL + 2);
	assert_int_equal(m.layer_off[GL + 2], m.nr_params);
	assert_int_equal(m.layer_off[1], GV * GC + GT * GC);
	assert_int_equal(m.act_width[0], GLD);
	assert_int_equal(m.act_width[1], GT * GC);
	assert_int_equal(m.act_width[GL + 2], GT * GV);
	assert_int_equal(m.tied_off, 0);
	assert_int_equal(m.tied_len, GV * GC);
	/* the head is costed, though it holds only lnf's parameters */
	assert_true(m.layer_cost[GL + 1] > m.layer_cost[0]);
	ref = calloc(m.nr_params, sizeof(float));
	got = calloc(m.nr_params, sizeof(float));
	ref_loss = m.ops->train_step(&m, params, ref, 0.0f, x, NULL, N, 1.0f / N, NULL, NULL, NULL);
	/* one micro-batch: train_step's operations in the same order, in pieces */
	loss = gpt_stages(&m, params, x, N, N, three, 3, got);
	assert_true(loss == ref_loss);
	assert_memory_equal(got, ref, m.nr_params * sizeof(float));
	/* micro-batches of one row and of two, several in flight: sums regrouped only */
	for (int mb = 1; mb <= 2; mb++) {
		loss = gpt_stages(&m, params, x, N, mb, mb == 1 ? three : two, mb == 1 ? 3 : 2, got);
		if (fabs(loss - ref_loss) > 1e-6 * fabs(ref_loss))
			fail_msg("loss over micro-batches of %d %.9g, one batch %.9g", mb, loss,
				 ref_loss);
		for (size_t i = 0; i < m.nr_params; i++)
			if (fabsf(got[i] - ref[i]) > 1e-6f + 1e-5f * fabsf(ref[i]))
				fail_msg("gradient %zu: %.9g over micro-batches of %d, %.9g in one",
					 i, got[i], mb, ref[i]);
	}
	model_release(&m);
	free(params);
	free(ref);
	free(got);
}

static void test_gpt_causal(void **state)
{
	struct model m;
	float x[GLD], *params = tiny_model(&m, 1, 8, x, 1), before[GT * GV];
	int correct, changed_last = 0;

	m.ops->evaluate(&m, params, x, NULL, 1, &correct);
	memcpy(before, m.ops->logits(&m), sizeof(before));
	/* the last input position; earlier positions must not see it */
	x[GT - 1] = (float)(((int)x[GT - 1] + 1) % GV);
	m.ops->evaluate(&m, params, x, NULL, 1, &correct);
	for (int t = 0; t < GT; t++)
		for (int v = 0; v < GV; v++) {
			float now = m.ops->logits(&m)[t * GV + v];

			if (t < GT - 1 && now != before[t * GV + v])
				fail_msg("logit [%d, %d] changed from %g to %g when token %d changed",
					 t, v, before[t * GV + v], now, GT - 1);
			if (t == GT - 1 && fabsf(now - before[t * GV + v]) > 1e-4f)
				changed_last = 1;
		}
	assert_true(changed_last);
	model_release(&m);
	free(params);
}

static void test_gpt_init_loss(void **state)
{
	enum { N = 4, T = 16 };
	struct model_spec spec;
	struct model m;
	struct strbuf err = STRBUF_INIT;
	float x[N * (T + 1)], *params;
	struct rng r;
	int correct;
	double loss;

	memset(&spec, 0, sizeof(spec));
	spec.name = "gpt";
	spec.layers = 2;
	spec.heads = 4;
	spec.embd = 32;
	spec.context = T;
	spec.classes = 256;
	spec.input_dim = T + 1;
	spec.max_batch = N;
	assert_int_equal(model_create(&m, &spec, 0, 0, &err), 0);
	params = calloc(m.nr_params, sizeof(float));
	rng_seed(&r, 1);
	m.ops->init_params(&m, params, &r);
	for (int i = 0; i < N * (T + 1); i++)
		x[i] = (float)rng_below(&r, 256);
	loss = m.ops->evaluate(&m, params, x, NULL, N, &correct) / N;
	assert_float_equal(loss, log(256.0), 0.05);
	/* segments: decay on matrices and embeddings, not on biases or LayerNorm */
	for (int i = 0; i < m.nr_segs; i++) {
		const char *n = m.segs[i].name;
		int want = !strstr(n, "ln") && !strstr(n, "bias");

		if (m.segs[i].decay != want)
			fail_msg("segment %s: decay %d, expected %d", n, m.segs[i].decay, want);
	}
	model_release(&m);
	free(params);
	strbuf_release(&err);
}

static void test_gpt_errors(void **state)
{
	struct model_spec spec;
	struct model m;
	struct strbuf err = STRBUF_INIT;

	tiny_spec(&spec, 2);
	spec.heads = 3;
	assert_int_equal(model_create(&m, &spec, 0, 0, &err), -1);
	assert_non_null(strstr(err.buf, "multiple of --heads"));
	strbuf_reset(&err);
	tiny_spec(&spec, 2);
	spec.input_dim = 10;
	assert_int_equal(model_create(&m, &spec, 0, 0, &err), -1);
	assert_non_null(strstr(err.buf, "text:PATH"));
	strbuf_reset(&err);
	tiny_spec(&spec, 2);
	assert_int_equal(model_create(&m, &spec, 0, 1, &err), -1);
	assert_non_null(strstr(err.buf, "fp32"));
	strbuf_release(&err);
}

/* ------------------------------------------------------------ text data */

/* Write len bytes to a new temporary file; its name goes to path (caller unlinks). */
static void temp_file(struct strbuf *path, const char *text, size_t len)
{
	char name[] = "/tmp/dttrain-gpt-XXXXXX";
	int fd = mkstemp(name);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	close(fd);
	strbuf_reset(path);
	strbuf_addstr(path, name);
}

/* A deterministic text: a few sentences repeated with a counter. */
static void make_text(struct strbuf *sb, int lines)
{
	static const char *const words[] = { "the", "cat", "sat", "on", "a", "mat", "and", "dog" };

	for (int i = 0; i < lines; i++)
		strbuf_addf(sb, "%s %s %s %s.\n", words[i % 8], words[(i * 3 + 1) % 8],
			    words[(i * 5 + 2) % 8], words[(i * 7 + 3) % 8]);
}

static void test_text_data(void **state)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT, spec = STRBUF_INIT, err = STRBUF_INIT;
	struct data_opts o = DATA_OPTS_INIT;
	struct dataset train, val;
	struct sampler one, two[2];
	float x[4 * 9];
	int y[4];

	make_text(&text, 50);
	temp_file(&path, text.buf, text.len);
	strbuf_addf(&spec, "text:%s", path.buf);
	o.spec = spec.buf;
	o.context = 8;
	o.val_fraction = 0.2;
	assert_int_equal(data_load(&train, &val, &o, &err), 0);
	{
		size_t nval = (size_t)((double)text.len * 0.2), ntrain = text.len - nval;

		assert_int_equal(train.n, (int)(ntrain - 9 + 1));
		assert_int_equal(train.dim, 9);
		assert_int_equal(train.classes, 256);
		/* validation: consecutive windows share one byte, from the tail */
		assert_int_equal(val.n, (int)((nval - 1) / 8));
		for (int i = 0; i < val.n; i++)
			for (int j = 0; j < 9; j++)
				assert_int_equal((int)val.x[i * 9 + j],
						 (unsigned char)text.buf[ntrain + (size_t)i * 8 + j]);
	}
	{
		int idx[2] = { 0, 17 };

		dataset_gather(&train, idx, 2, x, y);
		for (int j = 0; j < 9; j++) {
			assert_int_equal((int)x[j], (unsigned char)text.buf[j]);
			assert_int_equal((int)x[9 + j], (unsigned char)text.buf[17 + j]);
		}
	}
	/* 2 ranks: disjoint contexts that together are the 1-rank batch */
	sampler_init(&one, train.n, 8, 0, 1, 5);
	sampler_init(&two[0], train.n, 8, 0, 2, 5);
	sampler_init(&two[1], train.n, 8, 1, 2, 5);
	sampler_set_epoch(&one, 0);
	sampler_set_epoch(&two[0], 0);
	sampler_set_epoch(&two[1], 0);
	{
		const int *r1, *r0a, *r0b;
		int c1, ca, cb;

		sampler_slice(&one, 3, 0, 1, &r1, &c1);
		sampler_slice(&two[0], 3, 0, 1, &r0a, &ca);
		sampler_slice(&two[1], 3, 0, 1, &r0b, &cb);
		assert_int_equal(c1, 8);
		assert_int_equal(ca + cb, 8);
		assert_memory_equal(r1, r0a, ca * sizeof(int));
		assert_memory_equal(r1 + ca, r0b, cb * sizeof(int));
		assert_int_not_equal(r0a[0], r0b[0]);
	}
	sampler_release(&one);
	sampler_release(&two[0]);
	sampler_release(&two[1]);
	dataset_release(&train);
	dataset_release(&val);
	/* errors: too short; a byte above --vocab */
	o.context = 4096;
	assert_int_equal(data_load(&train, &val, &o, &err), -1);
	assert_non_null(strstr(err.buf, "need more than --context"));
	strbuf_reset(&err);
	o.context = 8;
	o.vocab = 100;
	assert_int_equal(data_load(&train, &val, &o, &err), -1);
	assert_non_null(strstr(err.buf, "0x74 at offset 0"));   /* the "t" of "the" */
	unlink(path.buf);
	strbuf_release(&err);
	strbuf_release(&spec);
	strbuf_release(&text);
	strbuf_release(&path);
}

static void test_config_gpt(void **state)
{
	struct train_config c;
	struct strbuf err = STRBUF_INIT;

	train_config_init(&c);
	c.model = "gpt";
	assert_int_equal(train_config_check(&c, &err), -1);
	assert_non_null(strstr(err.buf, "--data text:PATH"));
	strbuf_reset(&err);
	train_config_init(&c);
	c.data = "text:/x";
	assert_int_equal(train_config_check(&c, &err), -1);
	strbuf_reset(&err);
	c.model = "gpt";
	c.layers = 3;
	c.dim = 48;
	assert_int_equal(train_config_check(&c, &err), 0);
	assert_int_equal(c.spec.layers, 3);
	assert_int_equal(c.spec.embd, 48);
	assert_int_equal(c.spec.context, 64);
	strbuf_release(&err);
}

/* ---------------------------------------------------------- training */

/* A tiny model memorises a repeated sentence through the whole loop. */
static void test_gpt_overfits(void **state)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT, spec = STRBUF_INIT;
	struct train_config c;
	struct train_result res;

	for (int i = 0; i < 40; i++)
		strbuf_addstr(&text, "hello, transformer world! ");
	temp_file(&path, text.buf, text.len);
	strbuf_addf(&spec, "text:%s", path.buf);
	small_config(&c);
	c.model = "gpt";
	c.data = spec.buf;
	c.layers = 1;
	c.heads = 2;
	c.dim = 32;
	c.context = 16;
	c.batch = 16;
	c.steps = 150;
	c.optimizer = "adamw";
	c.lr = 1e-2;
	c.warmup = 10;
	assert_int_equal(run(&c, &res), 0);
	print_message("overfit: loss %.4f val_loss %.4f val_acc %.3f\n", res.loss, res.val_loss,
		      res.val_acc);
	/* ln(256) = 5.55 at init; the sentence is 26 bytes of which 13 distinct */
	assert_true(res.loss < 0.3);
	assert_true(res.val_loss < 0.3);
	assert_true(res.val_acc > 0.9 && res.val_acc <= 1.0);
	free(res.params);
	unlink(path.buf);
	strbuf_release(&spec);
	strbuf_release(&text);
	strbuf_release(&path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layernorm),
		cmocka_unit_test(test_softmax_causal),
		cmocka_unit_test(test_embed),
		cmocka_unit_test(test_tanh_fast),
		cmocka_unit_test(test_gemm_batched),
		cmocka_unit_test(test_gpt_grads),
		cmocka_unit_test(test_gpt_halves_sum),
		cmocka_unit_test(test_gpt_stages),
		cmocka_unit_test(test_gpt_causal),
		cmocka_unit_test(test_gpt_init_loss),
		cmocka_unit_test(test_gpt_errors),
		cmocka_unit_test(test_text_data),
		cmocka_unit_test(test_config_gpt),
		cmocka_unit_test(test_gpt_overfits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
