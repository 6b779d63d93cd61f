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
 * fp32 only: --precision bf16/fp16 is refused for this model.
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

struct gpt {
	const struct dev *dev;
	int L, H, C, T, V;
	struct gpt_layer *layer;
	float **res;                         /* L + 1 residual streams, [n T, C] */
	float *lnf, *lnf_mean, *lnf_rstd, *logits;
	int *labels;
	/* backward scratch */
	float *tmp, *dres, *dln, *dy, *dfc, *dqkv, *datt;
};

static const float *seg(const struct model *m, const float *base, int l, int which)
{
	return base + m->segs[FIRST_BLOCK_SEG + l * BLOCK_SEGS + which].off;
}

static float *gseg(const struct model *m, float *base, int l, int which)
{
	return base + m->segs[FIRST_BLOCK_SEG + l * BLOCK_SEGS + which].off;
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

/* out [n, o] = in [n, i] W^T + b, W [o, i] */
static void linear(const struct gpt *p, float *out, const float *in, const float *w,
		   const float *b, int n, int i, int o)
{
	p->dev->gemm(0, 1, n, o, i, 1.0f, in, i, w, i, 0.0f, out, o);
	p->dev->bias_act(out, NULL, b, n, o, ACT_NONE);
}

/* dW += dout^T in, db += colsum(dout), din = dout W (when din is not NULL) */
static void linear_backward(const struct gpt *p, float *din, float *dw, float *db,
			    const float *dout, const float *in, const float *w, int n, int i, int o)
{
	p->dev->gemm(1, 0, o, i, n, 1.0f, dout, o, in, i, 1.0f, dw, i);
	p->dev->bias_grad(db, dout, n, o, 1.0f);
	if (din)
		p->dev->gemm(0, 0, n, i, o, 1.0f, dout, o, w, i, 0.0f, din, i);
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

static void gpt_forward(struct model *m, const float *params, const float *x, int n)
{
	struct gpt *p = m->priv;
	const struct dev *dev = p->dev;
	int C = p->C, bt = n * p->T;
	const float *wte = params + m->segs[0].off, *lnf_w = params + m->segs[m->nr_segs - 2].off;

	dev->embed(p->res[0], x, p->T + 1, wte, params + m->segs[1].off, n, p->T, C);
	for (int l = 0; l < p->L; l++) {
		struct gpt_layer *a = &p->layer[l];

		dev->layernorm(a->ln1, a->mean1, a->rstd1, p->res[l], seg(m, params, l, LN1_W),
			       seg(m, params, l, LN1_B), bt, C);
		linear(p, a->qkv, a->ln1, seg(m, params, l, QKV_W), seg(m, params, l, QKV_B), bt, C,
		       3 * C);
		attention_forward(p, a->y, a->att, a->qkv, n);
		linear(p, p->tmp, a->y, seg(m, params, l, PROJ_W), seg(m, params, l, PROJ_B), bt, C, C);
		dev->add(a->res2, p->res[l], p->tmp, (size_t)bt * C);
		dev->layernorm(a->ln2, a->mean2, a->rstd2, a->res2, seg(m, params, l, LN2_W),
			       seg(m, params, l, LN2_B), bt, C);
		dev->gemm(0, 1, bt, 4 * C, C, 1.0f, a->ln2, C, seg(m, params, l, FC_W), C, 0.0f, a->fc,
			  4 * C);
		dev->bias_act(a->fc, a->fcpre, seg(m, params, l, FC_B), bt, 4 * C, ACT_GELU);
		linear(p, p->tmp, a->fc, seg(m, params, l, FCP_W), seg(m, params, l, FCP_B), bt, 4 * C,
		       C);
		dev->add(p->res[l + 1], a->res2, p->tmp, (size_t)bt * C);
	}
	dev->layernorm(p->lnf, p->lnf_mean, p->lnf_rstd, p->res[p->L], lnf_w, lnf_w + C, bt, C);
	dev->gemm(0, 1, bt, p->V, C, 1.0f, p->lnf, C, wte, C, 0.0f, p->logits, p->V);
	dev->next_tokens(p->labels, x, p->T + 1, n, p->T);
}

/* dres holds d loss / d res[l+1] on entry and d loss / d res[l] on return */
static void block_backward(struct model *m, const float *params, float *grads, int l, int n)
{
	struct gpt *p = m->priv;
	const struct dev *dev = p->dev;
	struct gpt_layer *a = &p->layer[l];
	int C = p->C, bt = n * p->T;

	/* res[l+1] = res2 + fcproj(gelu(fc(ln2(res2)))) */
	linear_backward(p, p->dfc, gseg(m, grads, l, FCP_W), gseg(m, grads, l, FCP_B), p->dres, a->fc,
			seg(m, params, l, FCP_W), bt, 4 * C, C);
	dev->act_backward(p->dfc, a->fcpre, (size_t)bt * 4 * C, ACT_GELU);
	linear_backward(p, p->dln, gseg(m, grads, l, FC_W), gseg(m, grads, l, FC_B), p->dfc, a->ln2,
			seg(m, params, l, FC_W), bt, C, 4 * C);
	dev->layernorm_backward(p->dres, gseg(m, grads, l, LN2_W), gseg(m, grads, l, LN2_B), p->dln,
				a->res2, seg(m, params, l, LN2_W), a->mean2, a->rstd2, bt, C);
	/* res2 = res[l] + proj(attn(qkv(ln1(res[l])))) */
	linear_backward(p, p->dy, gseg(m, grads, l, PROJ_W), gseg(m, grads, l, PROJ_B), p->dres, a->y,
			seg(m, params, l, PROJ_W), bt, C, C);
	attention_backward(p, p->dqkv, p->datt, p->dy, a->att, a->qkv, n);
	linear_backward(p, p->dln, gseg(m, grads, l, QKV_W), gseg(m, grads, l, QKV_B), p->dqkv, a->ln1,
			seg(m, params, l, QKV_W), bt, C, 3 * C);
	dev->layernorm_backward(p->dres, gseg(m, grads, l, LN1_W), gseg(m, grads, l, LN1_B), p->dln,
				p->res[l], seg(m, params, l, LN1_W), a->mean1, a->rstd1, bt, C);
}

static double gpt_train_step(struct model *m, const float *params, float *grads, float grad_beta,
			     const float *x, const int *y, int n, float grad_scale, int *correct,
			     model_bucket_fn *ready, void *data)
{
	struct gpt *p = m->priv;
	const struct dev *dev = p->dev;
	int C = p->C, V = p->V, bt = n * p->T, lnf = m->nr_segs - 2;
	float *dwte = grads + m->segs[0].off;
	double loss;

	(void)y;   /* the targets are the rows shifted by one */
	if (grad_beta == 0.0f)
		dev->memset0(grads, m->nr_params * sizeof(*grads));
	if (n == 0) {
		/* a rank with no rows in this (last, partial) batch still takes part */
		if (correct)
			*correct = 0;
		for (int b = m->nr_buckets - 1; b >= 0; b--)
			if (ready)
				ready(b, data);
		return 0.0;
	}
	gpt_forward(m, params, x, n);
	/* dlogits in place; per row the mean over its T positions */
	loss = dev->xent(p->logits, p->logits, p->labels, bt, V, grad_scale / (float)p->T, correct);
	dev->gemm(0, 0, bt, C, V, 1.0f, p->logits, V, params + m->segs[0].off, C, 0.0f, p->dln, C);
	dev->gemm(1, 0, V, C, bt, 1.0f, p->logits, V, p->lnf, C, 1.0f, dwte, C);
	dev->memset0(p->dres, (size_t)bt * C * sizeof(float));
	dev->layernorm_backward(p->dres, grads + m->segs[lnf].off, grads + m->segs[lnf + 1].off,
				p->dln, p->res[p->L], params + m->segs[lnf].off, p->lnf_mean,
				p->lnf_rstd, bt, C);
	if (ready)
		ready(p->L + 1, data);
	for (int l = p->L - 1; l >= 0; l--) {
		block_backward(m, params, grads, l, n);
		if (ready)
			ready(l + 1, data);
	}
	dev->embed_backward(dwte, grads + m->segs[1].off, p->dres, x, p->T + 1, n, p->T, C);
	if (ready)
		ready(0, data);
	return loss / p->T;
}

static double gpt_evaluate(struct model *m, const float *params, const float *x, const int *y,
			   int n, int *correct)
{
	struct gpt *p = m->priv;

	(void)y;
	if (n == 0) {
		*correct = 0;
		return 0.0;
	}
	gpt_forward(m, params, x, n);
	return p->dev->xent_eval(p->logits, p->labels, n * p->T, p->V, correct) / p->T;
}

static const float *gpt_logits(const struct model *m)
{
	struct gpt *p = m->priv;

	return p->logits;
}

/* Every activation buffer, for alloc and release alike. */
#define GPT_LAYER_BUFS(a) { &(a)->ln1, &(a)->mean1, &(a)->rstd1, &(a)->qkv, &(a)->att, &(a)->y, \
		&(a)->res2, &(a)->ln2, &(a)->mean2, &(a)->rstd2, &(a)->fcpre, &(a)->fc }

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
	free(p->layer);
	free(p->res);
	free(p);
	m->priv = NULL;
}

/* no layer-range ops: --pipeline refuses this model (see model.h) */
static const struct model_ops gpt_ops = {
	.init_params = gpt_init_params,
	.train_step = gpt_train_step,
	.evaluate = gpt_evaluate,
	.logits = gpt_logits,
	.release = gpt_release,
};

int gpt_create(struct model *m, const struct dev *dev, struct strbuf *err)
{
	const struct model_spec *s = &m->spec;
	struct gpt *p;
	size_t bt = (size_t)s->max_batch * s->context, C = (size_t)s->embd;
	size_t att = (size_t)s->max_batch * s->heads * s->context * s->context;

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
	if (m->precision != 0) {
		strbuf_addstr(err, "gpt computes in fp32 only (no --precision bf16/fp16 yet)");
		return -1;
	}
	p = xcalloc(1, sizeof(*p));
	p->dev = dev;
	p->L = s->layers;
	p->H = s->heads;
	p->C = s->embd;
	p->T = s->context;
	p->V = s->classes;
	m->priv = p;
	m->ops = &gpt_ops;
	m->tokens_per_row = s->context;
	gpt_layout(m);
	p->layer = xcalloc((size_t)p->L, sizeof(*p->layer));
	p->res = xcalloc((size_t)p->L + 1, sizeof(*p->res));
	for (int l = 0; l < p->L; l++) {
		struct gpt_layer *a = &p->layer[l];
		float **bufs[] = GPT_LAYER_BUFS(a);
		/* floats per row of each buffer above, in the same order */
		const size_t width[] = { C, 1, 1, 3 * C, 0, C, C, C, 1, 1, 4 * C, 4 * C };

		for (size_t i = 0; i < ARRAY_SIZE(bufs); i++)
			*bufs[i] = dev->alloc((width[i] ? bt * width[i] : att) * sizeof(float));
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
	p->datt = dev->alloc(att * sizeof(float));
	return 0;
}
