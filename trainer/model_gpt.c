/*
 * model_gpt.c - a decoder-only transformer language model (GPT-2 shaped),
 * one model walk over a device table (struct dev, kernels.h), like
 * model_mlp.c: with dev_cpu it is the readable reference, with dev_gpu the
 * same walk runs the CUDA twins.
 *
 * A batch row is context + 1 token ids (floats holding integers: the loop's
 * batch buffers are float); positions 0..T-1 are the input, 1..T the
 * targets.  The walk, for n rows of T positions and C channels:
 *
 *   res[0] = wte[tok] + wpe[pos]
 *   block l: res2 = res[l] + proj(attn(qkv(ln1(res[l]))))
 *            res[l+1] = res2 + fcproj(gelu(fc(ln2(res2))))
 *   logits = lnf(res[L]) wte^T          (the head is tied to the embedding)
 *   loss   = cross-entropy of logits against the next tokens
 *
 * Attention is causal multi-head self-attention, written plainly: per
 * sequence, a strided batched GEMM over the heads for S = Q K^T / sqrt(hs)
 * (the [T, T] scores of every head are kept for backward), an in-place
 * causal softmax, and another batched GEMM for P V.  No flash attention.
 *
 * Loss: the model returns, per row, the MEAN over its T positions, so the
 * loop's "summed loss / rows" is nats per token; gradients are scaled to
 * match (grad_scale / T).  *correct counts tokens (tokens_per_row = T).
 *
 * Parameters (flat array): wte [V, C], wpe [T, C], then per block ln1, attn
 * qkv [3C, C] (+ bias), attn proj [C, C] (+ bias), ln2, mlp fc [4C, C] (+
 * bias), mlp proj [C, 4C] (+ bias), then lnf.  Weight decay as nanoGPT: on
 * every matrix, the embeddings included (2-D tensors), not on biases or
 * LayerNorm gains/biases.  Init as GPT-2: N(0, 0.02), the two residual
 * projections of each block N(0, 0.02 / sqrt(2 L)), biases 0, gains 1.
 *
 * Gradient buckets: 0 = embeddings, 1 + l = block l, L + 1 = lnf.  Backward
 * finishes lnf first, then the blocks from the top, and the embeddings last
 * (wte gets the head's gradient first and the embedding's last), so it
 * announces buckets L + 1 down to 0 and the all-reduce of each overlaps the
 * blocks below it.  Gradients are zeroed once per step (grad_beta 0) and
 * every kernel accumulates.
 *
 * Layer ranges (model.h), for pipeline stages: layer 0 = the embeddings, 1 + l
 * = block l, L + 1 = the final LayerNorm and the head; a row is a sequence.
 * The head's weight is wte, tied: tied_off/tied_len tell the loop, which sums
 * the first and last stage's gradients of it.  A stage's first layer reads
 * the caller's input rows (kept until its backward) instead of res[].
 *
 * Mixed precision (--precision bf16|fp16, GPU): as the MLP, fp32 master
 * weights cast to 16 bits (w16) at each forward_range, and every linear
 * layer's GEMMs (qkv, proj, fc, fc proj, the head; forward, input and weight
 * gradients) read 16-bit copies of their inputs and accumulate and write
 * fp32.  Attention's batched GEMMs, the softmax, LayerNorm, GELU, the loss
 * and every gradient buffer stay fp32.  fp16 loss scaling is the loop's.
 */
#include "trainer/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The 12 segments of a block, in layout order; suffixes of "h<l>." */
enum { LN1_W, LN1_B, QKV_W, QKV_B, PROJ_W, PROJ_B, LN2_W, LN2_B, FC_W, FC_B, FCP_W, FCP_B,
       BLOCK_SEGS };
/* Segments before the blocks: wte, wpe */
#define FIRST_BLOCK_SEG 2

struct gpt_layer {
	float *ln1, *mean1, *rstd1, *qkv, *att, *y, *res2, *ln2, *mean2, *rstd2, *fcpre, *fc;
};

/* Every activation buffer of a block, for alloc, release and row offsets. */
#define GPT_LAYER_BUFS(a) { &(a)->ln1, &(a)->mean1, &(a)->rstd1, &(a)->qkv, &(a)->att, &(a)->y, \
		&(a)->res2, &(a)->ln2, &(a)->mean2, &(a)->rstd2, &(a)->fcpre, &(a)->fc }

struct gpt {
	const struct dev *dev;
	int L, H, C, T, V;
	int prec;                            /* 0 fp32, 1 bf16, 2 fp16 (GEMM inputs) */
	struct gpt_layer *layer;
	float **res;                         /* L + 1 residual streams, [n T, C] */
	float *lnf, *lnf_mean, *lnf_rstd, *logits;
	int *labels;
	/* backward scratch (rows from 0: one micro-batch at a time) */
	float *tmp, *dres, *dln, *dy, *dfc, *dqkv, *datt;
	/* mixed precision: 16-bit weights, GEMM inputs (a) and upstream gradients (d) */
	uint16_t *w16, *a16, *d16;
};

/* Flat offset of segment `which` of block l. */
static size_t soff(const struct model *m, int l, int which)
{
	return m->segs[FIRST_BLOCK_SEG + l * BLOCK_SEGS + which].off;
}

static const float *seg(const struct model *m, const float *base, int l, int which)
{
	return base + soff(m, l, which);
}

static float *gseg(const struct model *m, float *base, int l, int which)
{
	return base + soff(m, l, which);
}

/* Floats per row (sequence) of each buffer of GPT_LAYER_BUFS, in its order. */
static void layer_widths(const struct gpt *p, size_t w[12])
{
	size_t T = (size_t)p->T, C = (size_t)p->C;
	const size_t v[12] = { T * C, T, T, 3 * T * C, (size_t)p->H * T * T, T * C, T * C, T * C,
			       T, T, 4 * T * C, 4 * T * C };

	memcpy(w, v, sizeof(v));
}

/* Block l's buffers at row `row` (sequence row of a micro-batch). */
static struct gpt_layer layer_rows(const struct gpt *p, int l, int row)
{
	struct gpt_layer a = p->layer[l];
	float **bufs[] = GPT_LAYER_BUFS(&a);
	size_t w[12];

	layer_widths(p, w);
	for (size_t i = 0; i < ARRAY_SIZE(bufs); i++)
		*bufs[i] += (size_t)row * w[i];
	return a;
}

/* Rows [row, ...) of a buffer with `w` floats per position. */
static float *at(const struct gpt *p, float *buf, int row, size_t w)
{
	return buf + (size_t)row * p->T * w;
}

static size_t add_seg(struct model *m, size_t off, const char *name, size_t len, int decay)
{
	struct param_seg *s = &m->segs[m->nr_segs++];

	snprintf(s->name, sizeof(s->name), "%s", name);
	s->off = off;
	s->len = len;
	s->decay = decay;
	s->fan_in = 0;
	return off + len;
}

static void gpt_layout(struct model *m)
{
	const struct model_spec *s = &m->spec;
	size_t C = (size_t)s->embd, off = 0, start;
	static const char *const names[BLOCK_SEGS] = {
		"ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
		"attn.proj.bias", "ln2.weight", "ln2.bias", "mlp.fc.weight", "mlp.fc.bias",
		"mlp.proj.weight", "mlp.proj.bias",
	};
	const size_t lens[BLOCK_SEGS] = {
		C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C,
	};

	m->nr_segs = 0;
	m->nr_buckets = 0;
	off = add_seg(m, off, "wte", (size_t)s->classes * C, 1);
	off = add_seg(m, off, "wpe", (size_t)s->context * C, 1);
	m->buckets[m->nr_buckets++] = (struct grad_bucket){ 0, off };
	for (int l = 0; l < s->layers; l++) {
		start = off;
		for (int i = 0; i < BLOCK_SEGS; i++) {
			char name[32];

			snprintf(name, sizeof(name), "h%d.%s", l, names[i]);
			/* matrices decay; biases and LayerNorm parameters do not */
			off = add_seg(m, off, name, lens[i], i == QKV_W || i == PROJ_W || i == FC_W ||
				      i == FCP_W);
		}
		m->buckets[m->nr_buckets++] = (struct grad_bucket){ start, off - start };
	}
	start = off;
	off = add_seg(m, off, "lnf.weight", C, 0);
	off = add_seg(m, off, "lnf.bias", C, 0);
	m->buckets[m->nr_buckets++] = (struct grad_bucket){ start, off - start };
	m->nr_params = off;
}

static void gpt_init_params(const struct model *m, float *params, struct rng *r)
{
	float std_resid = 0.02f / sqrtf(2.0f * (float)m->spec.layers);

	for (int i = 0; i < m->nr_segs; i++) {
		const struct param_seg *s = &m->segs[i];
		int is_ln = strstr(s->name, "ln") != NULL;

		for (size_t j = 0; j < s->len; j++) {
			float v;

			if (ends_with(s->name, "bias"))
				v = 0.0f;
			else if (is_ln)
				v = 1.0f;
			else if (ends_with(s->name, "proj.weight"))
				v = std_resid * rng_normal(r);
			else
				v = 0.02f * rng_normal(r);
			params[s->off + j] = v;
		}
	}
}

/* out [n, o] = in [n, i] W^T (+ b when not NULL); W [o, i] at flat offset woff */
static void linear(struct model *m, const float *params, float *out, const float *in,
		   size_t woff, const float *b, int n, int i, int o)
{
	struct gpt *p = m->priv;

	if (!p->prec) {
		p->dev->gemm(0, 1, n, o, i, 1.0f, in, i, params + woff, i, 0.0f, out, o);
	} else {
		p->dev->cast_half(p->prec, p->a16, in, (size_t)n * i);
		p->dev->gemm_mixed(p->prec, 0, 1, n, o, i, 1.0f, p->a16, i, p->w16 + woff, i, 0.0f,
				   out, o);
	}
	if (b)
		p->dev->bias_act(out, NULL, b, n, o, ACT_NONE);
}

/* dW += dout^T in, db += colsum(dout) (db NULL: no bias), din = dout W (din NULL: none) */
static void linear_backward(struct model *m, const float *params, float *grads, float *din,
			    size_t woff, float *db, const float *dout, const float *in, int n,
			    int i, int o)
{
	struct gpt *p = m->priv;
	const struct dev *dev = p->dev;

	if (!p->prec) {
		dev->gemm(1, 0, o, i, n, 1.0f, dout, o, in, i, 1.0f, grads + woff, i);
		if (din)
			dev->gemm(0, 0, n, i, o, 1.0f, dout, o, params + woff, i, 0.0f, din, i);
	} else {
		dev->cast_half(p->prec, p->d16, dout, (size_t)n * o);
		dev->cast_half(p->prec, p->a16, in, (size_t)n * i);
		dev->gemm_mixed(p->prec, 1, 0, o, i, n, 1.0f, p->d16, o, p->a16, i, 1.0f,
				grads + woff, i);
		if (din)
			dev->gemm_mixed(p->prec, 0, 0, n, i, o, 1.0f, p->d16, o, p->w16 + woff, i,
					0.0f, din, i);
	}
	if (db)
		dev->bias_grad(db, dout, n, o, 1.0f);
}

/* y [n T, C] from qkv [n T, 3C]; att [n, H, T, T] keeps the probabilities */
static void attention_forward(const struct gpt *p, float *y, float *att, const float *qkv, int n)
{
	const struct dev *dev = p->dev;
	int T = p->T, C = p->C, H = p->H, hs = C / H;
	long long tt = (long long)T * T;
	float scale = 1.0f / sqrtf((float)hs);

	for (int s = 0; s < n; s++) {
		const float *q = qkv + (size_t)s * T * 3 * C;

		dev->gemm_batched(0, 1, T, T, hs, scale, q, 3 * C, hs, q + C, 3 * C, hs, 0.0f,
				  att + s * H * tt, T, tt, H);
	}
	dev->softmax_causal(att, n * H, T);
	for (int s = 0; s < n; s++) {
		const float *v = qkv + (size_t)s * T * 3 * C + 2 * C;

		dev->gemm_batched(0, 0, T, hs, T, 1.0f, att + s * H * tt, T, tt, v, 3 * C, hs, 0.0f,
				  y + (size_t)s * T * C, C, hs, H);
	}
}

/* dqkv [n T, 3C] from dy [n T, C]; datt is scratch of att's size */
static void attention_backward(const struct gpt *p, float *dqkv, float *datt, const float *dy,
			       const float *att, const float *qkv, int n)
{
	const struct dev *dev = p->dev;
	int T = p->T, C = p->C, H = p->H, hs = C / H;
	long long tt = (long long)T * T;
	float scale = 1.0f / sqrtf((float)hs);

	for (int s = 0; s < n; s++) {
		const float *v = qkv + (size_t)s * T * 3 * C + 2 * C, *dys = dy + (size_t)s * T * C;
		float *dv = dqkv + (size_t)s * T * 3 * C + 2 * C;

		/* dP = dY V^T, dV = P^T dY */
		dev->gemm_batched(0, 1, T, T, hs, 1.0f, dys, C, hs, v, 3 * C, hs, 0.0f,
				  datt + s * H * tt, T, tt, H);
		dev->gemm_batched(1, 0, T, hs, T, 1.0f, att + s * H * tt, T, tt, dys, C, hs, 0.0f,
				  dv, 3 * C, hs, H);
	}
	dev->softmax_causal_backward(datt, att, n * H, T);
	for (int s = 0; s < n; s++) {
		const float *q = qkv + (size_t)s * T * 3 * C;
		float *dq = dqkv + (size_t)s * T * 3 * C;

		/* S = scale Q K^T: dQ = scale dS K, dK = scale dS^T Q */
		dev->gemm_batched(0, 0, T, hs, T, scale, datt + s * H * tt, T, tt, q + C, 3 * C, hs,
				  0.0f, dq, 3 * C, hs, H);
		dev->gemm_batched(1, 0, T, hs, T, scale, datt + s * H * tt, T, tt, q, 3 * C, hs,
				  0.0f, dq + C, 3 * C, hs, H);
	}
}

/* Block l on rows [row, row + n) whose input is `in`; returns res[l+1]'s rows. */
static const float *block_forward(struct model *m, const float *params, int l, int row, int n,
				  const float *in)
{
	struct gpt *p = m->priv;
	const struct dev *dev = p->dev;
	struct gpt_layer a = layer_rows(p, l, row);
	int C = p->C, bt = n * p->T;
	float *out = at(p, p->res[l + 1], row, C);

	dev->layernorm(a.ln1, a.mean1, a.rstd1, in, seg(m, params, l, LN1_W),
		       seg(m, params, l, LN1_B), bt, C);
	linear(m, params, a.qkv, a.ln1, soff(m, l, QKV_W), seg(m, params, l, QKV_B), bt, C, 3 * C);
	attention_forward(p, a.y, a.att, a.qkv, n);
	linear(m, params, p->tmp, a.y, soff(m, l, PROJ_W), seg(m, params, l, PROJ_B), bt, C, C);
	dev->add(a.res2, in, p->tmp, (size_t)bt * C);
	dev->layernorm(a.ln2, a.mean2, a.rstd2, a.res2, seg(m, params, l, LN2_W),
		       seg(m, params, l, LN2_B), bt, C);
	linear(m, params, a.fc, a.ln2, soff(m, l, FC_W), NULL, bt, C, 4 * C);
	dev->bias_act(a.fc, a.fcpre, seg(m, params, l, FC_B), bt, 4 * C, ACT_GELU);
	linear(m, params, p->tmp, a.fc, soff(m, l, FCP_W), seg(m, params, l, FCP_B), bt, 4 * C, C);
	dev->add(out, a.res2, p->tmp, (size_t)bt * C);
	return out;
}

/*
 * dres holds d loss / d res[l+1] on entry and d loss / d res[l] on return
 * (rows [row, row + n); in is res[l], the block's input).
 */
static void block_backward(struct model *m, const float *params, float *grads, int l, int row,
			   int n, const float *in, float *dres)
{
	struct gpt *p = m->priv;
	const struct dev *dev = p->dev;
	struct gpt_layer a = layer_rows(p, l, row);
	int C = p->C, bt = n * p->T;

	/* res[l+1] = res2 + fcproj(gelu(fc(ln2(res2)))) */
	linear_backward(m, params, grads, p->dfc, soff(m, l, FCP_W), gseg(m, grads, l, FCP_B), dres,
			a.fc, bt, 4 * C, C);
	dev->act_backward(p->dfc, a.fcpre, (size_t)bt * 4 * C, ACT_GELU);
	linear_backward(m, params, grads, p->dln, soff(m, l, FC_W), gseg(m, grads, l, FC_B), p->dfc,
			a.ln2, bt, C, 4 * C);
	dev->layernorm_backward(dres, gseg(m, grads, l, LN2_W), gseg(m, grads, l, LN2_B), p->dln,
				a.res2, seg(m, params, l, LN2_W), a.mean2, a.rstd2, bt, C);
	/* res2 = res[l] + proj(attn(qkv(ln1(res[l])))) */
	linear_backward(m, params, grads, p->dy, soff(m, l, PROJ_W), gseg(m, grads, l, PROJ_B), dres,
			a.y, bt, C, C);
	attention_backward(p, p->dqkv, p->datt, p->dy, a.att, a.qkv, n);
	linear_backward(m, params, grads, p->dln, soff(m, l, QKV_W), gseg(m, grads, l, QKV_B),
			p->dqkv, a.ln1, bt, C, 3 * C);
	dev->layernorm_backward(dres, gseg(m, grads, l, LN1_W), gseg(m, grads, l, LN1_B), p->dln,
				in, seg(m, params, l, LN1_W), a.mean1, a.rstd1, bt, C);
}

/* Layer l's input rows: the caller's for the range's first layer, else res[l-1]'s. */
static const float *layer_in(const struct gpt *p, int l, int a, int row, const float *in)
{
	return l == a ? in : at(p, p->res[l - 1], row, p->C);
}

static const float *gpt_forward_range(struct model *m, const float *params, int a, int b,
				      int row, int n, const float *in)
{
	struct gpt *p = m->priv;
	const struct dev *dev = p->dev;
	int C = p->C, bt = n * p->T, lnf = m->nr_segs - 2;
	const float *out = in;

	if (p->prec) {
		size_t lo = m->layer_off[a];

		dev->cast_half(p->prec, p->w16 + lo, params + lo, m->layer_off[b] - lo);
		if (a > 0 && b == m->nr_layers)   /* the head reads the tied wte */
			dev->cast_half(p->prec, p->w16 + m->tied_off, params + m->tied_off,
				       m->tied_len);
	}
	for (int l = a; l < b; l++) {
		const float *x = layer_in(p, l, a, row, in);

		if (l == 0) {
			float *res = at(p, p->res[0], row, C);

			dev->embed(res, in, p->T + 1, params + m->segs[0].off,
				   params + m->segs[1].off, n, p->T, C);
			out = res;
		} else if (l <= p->L) {
			out = block_forward(m, params, l - 1, row, n, x);
		} else {
			float *ln = at(p, p->lnf, row, C), *logits = at(p, p->logits, row, p->V);

			dev->layernorm(ln, p->lnf_mean + (size_t)row * p->T,
				       p->lnf_rstd + (size_t)row * p->T, x, params + m->segs[lnf].off,
				       params + m->segs[lnf + 1].off, bt, C);
			linear(m, params, logits, ln, m->tied_off, NULL, bt, C, p->V);
			out = logits;
		}
	}
	return out;
}

/* Per row the mean over its T positions; the targets are x shifted by one. */
static double gpt_loss(struct model *m, int row, int n, const float *x, const int *y,
		       float grad_scale, int *correct)
{
	struct gpt *p = m->priv;
	int *labels = p->labels + (size_t)row * p->T, bt = n * p->T;
	float *logits = at(p, p->logits, row, p->V);

	(void)y;
	if (correct)
		*correct = 0;
	if (!n)
		return 0.0;
	p->dev->next_tokens(labels, x, p->T + 1, n, p->T);
	if (grad_scale == 0.0f)
		return p->dev->xent_eval(logits, labels, bt, p->V, correct) / p->T;
	return p->dev->xent(logits, logits, labels, bt, p->V, grad_scale / (float)p->T, correct) /
	       p->T;
}

static const float *gpt_backward_range(struct model *m, const float *params, float *grads,
				       float grad_beta, int a, int b, int row, int n,
				       const float *in, float *dout, model_bucket_fn *ready,
				       void *data)
{
	struct gpt *p = m->priv;
	const struct dev *dev = p->dev;
	int C = p->C, bt = n * p->T, lnf = m->nr_segs - 2;
	float *d = dout;

	if (grad_beta == 0.0f) {
		/* every kernel accumulates: zero the range's gradients (and the tied head's) */
		size_t lo = m->layer_off[a];

		dev->memset0(grads + lo, (m->layer_off[b] - lo) * sizeof(*grads));
		if (a > 0 && b == m->nr_layers)
			dev->memset0(grads + m->tied_off, m->tied_len * sizeof(*grads));
	}
	for (int l = b - 1; l >= a; l--) {
		const float *x = layer_in(p, l, a, row, in);

		if (l == p->L + 1) {
			/* the head (dlogits where loss() left them), then the final LayerNorm */
			linear_backward(m, params, grads, p->dln, m->tied_off, NULL,
					at(p, p->logits, row, p->V), at(p, p->lnf, row, C), bt, C,
					p->V);
			d = p->dres;
			dev->memset0(d, (size_t)bt * C * sizeof(float));
			dev->layernorm_backward(d, grads + m->segs[lnf].off,
						grads + m->segs[lnf + 1].off, p->dln, x,
						params + m->segs[lnf].off,
						p->lnf_mean + (size_t)row * p->T,
						p->lnf_rstd + (size_t)row * p->T, bt, C);
		} else if (l >= 1) {
			block_backward(m, params, grads, l - 1, row, n, x, d);
		} else {
			dev->embed_backward(grads + m->segs[0].off, grads + m->segs[1].off, d, in,
					    p->T + 1, n, p->T, C);
		}
		if (ready)
			ready(l, data);
	}
	return a == 0 ? NULL : d;
}

/* One stage holding every layer, on rows [0, n). */
static double gpt_train_step(struct model *m, const float *params, float *grads, float grad_beta,
			     const float *x, const int *y, int n, float grad_scale, int *correct,
			     model_bucket_fn *ready, void *data)
{
	struct gpt *p = m->priv;
	double loss;

	if (grad_beta == 0.0f)
		p->dev->memset0(grads, m->nr_params * sizeof(*grads));
	if (n == 0) {
		/* a rank with no rows in this (last, partial) batch still takes part */
		if (correct)
			*correct = 0;
		for (int b = m->nr_buckets - 1; b >= 0; b--)
			if (ready)
				ready(b, data);
		return 0.0;
	}
	gpt_forward_range(m, params, 0, m->nr_layers, 0, n, x);
	loss = gpt_loss(m, 0, n, x, y, grad_scale, correct);
	gpt_backward_range(m, params, grads, 1.0f, 0, m->nr_layers, 0, n, x, NULL, ready, data);
	return loss;
}

static double gpt_evaluate(struct model *m, const float *params, const float *x, const int *y,
			   int n, int *correct)
{
	if (n == 0) {
		*correct = 0;
		return 0.0;
	}
	gpt_forward_range(m, params, 0, m->nr_layers, 0, n, x);
	return gpt_loss(m, 0, n, x, y, 0.0f, correct);
}

static const float *gpt_logits(const struct model *m)
{
	struct gpt *p = m->priv;

	return p->logits;
}

static void gpt_release(struct model *m)
{
	struct gpt *p = m->priv;
	float **top[] = { &p->lnf, &p->lnf_mean, &p->lnf_rstd, &p->logits, &p->tmp, &p->dres,
			  &p->dln, &p->dy, &p->dfc, &p->dqkv, &p->datt };

	if (!p)
		return;
	for (int l = 0; l < p->L; l++) {
		float **bufs[] = GPT_LAYER_BUFS(&p->layer[l]);

		for (size_t i = 0; i < ARRAY_SIZE(bufs); i++)
			p->dev->release(*bufs[i]);
	}
	for (int l = 0; l <= p->L; l++)
		p->dev->release(p->res[l]);
	for (size_t i = 0; i < ARRAY_SIZE(top); i++)
		p->dev->release(*top[i]);
	p->dev->release(p->labels);
	p->dev->release(p->w16);
	p->dev->release(p->a16);
	p->dev->release(p->d16);
	free(p->layer);
	free(p->res);
	free(p);
	m->priv = NULL;
}

static const struct model_ops gpt_ops = {
	.init_params = gpt_init_params,
	.train_step = gpt_train_step,
	.evaluate = gpt_evaluate,
	.logits = gpt_logits,
	.release = gpt_release,
	.forward_range = gpt_forward_range,
	.loss = gpt_loss,
	.backward_range = gpt_backward_range,
};

/*
 * The layer sequence: embeddings, blocks, final norm + head; per row the
 * input is T + 1 tokens, then T C floats between layers, T V logits.  Cost
 * (forward flops per row): a block 24 T C^2 (its four linears) + 4 T^2 C
 * (attention), the head 2 T C V (it holds lnf's parameters only: parameter
 * counts would put the head's work on no stage), the embeddings T C.
 */
static void gpt_layers(struct model *m)
{
	const struct gpt *p = m->priv;
	double T = p->T, C = p->C;

	m->nr_layers = p->L + 2;
	m->layer_off[0] = 0;
	m->act_width[0] = (size_t)p->T + 1;
	m->layer_cost[0] = T * C;
	for (int l = 0; l < p->L; l++) {
		m->layer_off[l + 1] = soff(m, l, 0);
		m->act_width[l + 1] = (size_t)p->T * p->C;
		m->layer_cost[l + 1] = 24.0 * T * C * C + 4.0 * T * T * C;
	}
	m->layer_off[p->L + 1] = m->segs[m->nr_segs - 2].off;
	m->act_width[p->L + 1] = (size_t)p->T * p->C;
	m->layer_cost[p->L + 1] = 2.0 * T * C * p->V;
	m->layer_off[p->L + 2] = m->nr_params;
	m->act_width[p->L + 2] = (size_t)p->T * p->V;
	m->tied_off = m->segs[0].off;
	m->tied_len = m->segs[0].len;
}

int gpt_create(struct model *m, const struct dev *dev, struct strbuf *err)
{
	const struct model_spec *s = &m->spec;
	struct gpt *p;
	size_t nb = (size_t)s->max_batch, bt = nb * s->context, C = (size_t)s->embd, w[12];

	if (s->layers < 1 || s->layers > MODEL_MAX_LAYERS || s->heads < 1 || s->embd < 1 ||
	    s->context < 1) {
		strbuf_addf(err, "gpt needs 1 to %d --layers, and --heads, --dim, --context >= 1 "
			    "(got %d, %d, %d, %d)", MODEL_MAX_LAYERS, s->layers, s->heads, s->embd,
			    s->context);
		return -1;
	}
	if (s->embd % s->heads) {
		strbuf_addf(err, "gpt: --dim %d is not a multiple of --heads %d", s->embd, s->heads);
		return -1;
	}
	if (s->input_dim != s->context + 1) {
		strbuf_addf(err, "gpt reads rows of --context + 1 = %d tokens, the data has %d "
			    "(use --data text:PATH)", s->context + 1, s->input_dim);
		return -1;
	}
	if (m->precision != 0 && !dev->gemm_mixed) {
		strbuf_addstr(err, "gpt: --precision bf16/fp16 needs a GPU (the CPU path is fp32)");
		return -1;
	}
	p = xcalloc(1, sizeof(*p));
	p->dev = dev;
	p->prec = m->precision;
	p->L = s->layers;
	p->H = s->heads;
	p->C = s->embd;
	p->T = s->context;
	p->V = s->classes;
	m->priv = p;
	m->ops = &gpt_ops;
	m->tokens_per_row = s->context;
	gpt_layout(m);
	gpt_layers(m);
	layer_widths(p, w);
	p->layer = xcalloc((size_t)p->L, sizeof(*p->layer));
	p->res = xcalloc((size_t)p->L + 1, sizeof(*p->res));
	for (int l = 0; l < p->L; l++) {
		float **bufs[] = GPT_LAYER_BUFS(&p->layer[l]);

		for (size_t i = 0; i < ARRAY_SIZE(bufs); i++)
			*bufs[i] = dev->alloc(nb * w[i] * sizeof(float));
	}
	for (int l = 0; l <= p->L; l++)
		p->res[l] = dev->alloc(bt * C * sizeof(float));
	p->lnf = dev->alloc(bt * C * sizeof(float));
	p->lnf_mean = dev->alloc(bt * sizeof(float));
	p->lnf_rstd = dev->alloc(bt * sizeof(float));
	p->logits = dev->alloc(bt * (size_t)p->V * sizeof(float));
	p->labels = dev->alloc(bt * sizeof(int));
	p->tmp = dev->alloc(bt * C * sizeof(float));
	p->dres = dev->alloc(bt * C * sizeof(float));
	p->dln = dev->alloc(bt * C * sizeof(float));
	p->dy = dev->alloc(bt * C * sizeof(float));
	p->dfc = dev->alloc(bt * 4 * C * sizeof(float));
	p->dqkv = dev->alloc(bt * 3 * C * sizeof(float));
	p->datt = dev->alloc(nb * w[4] * sizeof(float));
	if (p->prec) {
		size_t widest = 4 * C > (size_t)p->V ? 4 * C : (size_t)p->V;

		p->w16 = dev->alloc(m->nr_params * sizeof(uint16_t));
		p->a16 = dev->alloc(bt * 4 * C * sizeof(uint16_t));
		p->d16 = dev->alloc(bt * widest * sizeof(uint16_t));
	}
	return 0;
}
