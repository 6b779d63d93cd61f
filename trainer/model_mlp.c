/*
 * model_mlp.c - the MLP classifier: one model walk (forward, softmax
 * cross-entropy, backward) over a device table (struct dev, kernels.h).
 * With dev_cpu it is the readable reference; with dev_gpu the same walk runs
 * the CUDA kernels, so CPU and GPU differ only in their kernels.
 *
 * Layers fc0..fcL: hidden layers are linear + activation, the last is linear
 * to logits, then softmax cross-entropy.  One GEMM per layer and direction
 * over the whole local batch (large GEMMs are what make a CPU fast), with the
 * bias + activation fused into one pass over the GEMM output.
 *
 * The walk is written as layer ranges (model.h): forward_range, loss and
 * backward_range over layers [a, b) and rows [row, row + n); train_step is
 * the range [0, L) on every row, a pipeline stage (train.c) a shorter range on
 * one micro-batch's rows at a time.
 *
 * Buffers (device memory, opaque here), [max_batch, width] each: the input of
 * a range's first layer is the caller's (not copied), act[l+1] the output of
 * layer l (the logits, then their gradient after loss()); pre[l] the
 * pre-activation when the activation is GELU (ReLU's backward only needs the
 * output); two gradient scratch buffers alternate while walking back.
 *
 * Mixed precision (--precision bf16|fp16, devices with gemm_mixed): the fp32
 * master weights stay in the flat parameter array the optimiser updates;
 * every forward casts them to 16 bits (w16), GEMM inputs (activations,
 * upstream gradients) are kept in 16 bits too, and every GEMM accumulates and
 * writes fp32.  Bias, activation, softmax/loss and weight gradients are fp32.
 * fp16 loss scaling is done by the loop (train.c) through grad_scale.
 */
#include "trainer/model.h"

#include <stdlib.h>

struct mlp {
	const struct dev *dev;
	int nr_layers, prec;                 /* prec: 0 fp32, 1 bf16, 2 fp16 */
	int dims[MODEL_MAX_LAYERS + 2];      /* dims[0] = input, dims[L] = classes */
	float *act[MODEL_MAX_LAYERS + 2];    /* act[0] unused: the input is the caller's */
	float *pre[MODEL_MAX_LAYERS + 1];
	float *dbuf[2];
	uint16_t *act16[MODEL_MAX_LAYERS + 2];   /* mixed precision only */
	uint16_t *w16, *d16;
};

static enum act_kind layer_act(const struct model *m, int l)
{
	struct mlp *p = m->priv;

	return l == p->nr_layers - 1 ? ACT_NONE : m->spec.act;
}

/* A 16-bit copy at an offset; NULL when there is none (fp32) */
static const uint16_t *half_at(const uint16_t *base, size_t off)
{
	return base ? base + off : NULL;
}

/*
 * C = op(A) op(B) + beta C: from the fp32 operands, or under mixed precision
 * from their 16-bit copies a16, b16.
 */
static void mm(const struct mlp *p, int ta, int tb, int m, int n, int k, const float *a,
	       const uint16_t *a16, int lda, const float *b, const uint16_t *b16, int ldb,
	       float beta, float *c, int ldc)
{
	if (!p->prec)
		p->dev->gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
	else
		p->dev->gemm_mixed(p->prec, ta, tb, m, n, k, 1.0f, a16, lda, b16, ldb, beta, c, ldc);
}

/* Rows [row, row + n) of a [max_batch, width] buffer. */
static float *rows_of(float *buf, int row, int width)
{
	return buf ? buf + (size_t)row * width : NULL;
}

static uint16_t *rows16_of(uint16_t *buf, int row, int width)
{
	return buf ? buf + (size_t)row * width : NULL;
}

static const float *mlp_forward_range(struct model *m, const float *params, int a, int b,
				      int row, int n, const float *in)
{
	struct mlp *p = m->priv;
	const struct dev *dev = p->dev;
	const float *x = in;
	const uint16_t *x16 = NULL;

	if (p->prec) {
		size_t lo = m->layer_off[a];
		uint16_t *in16 = rows16_of(p->act16[a], row, p->dims[a]);

		dev->cast_half(p->prec, p->w16 + lo, params + lo, m->layer_off[b] - lo);
		dev->cast_half(p->prec, in16, in, (size_t)n * p->dims[a]);
		x16 = in16;
	}
	for (int l = a; l < b; l++) {
		size_t woff = m->segs[2 * l].off;
		const float *bias = params + m->segs[2 * l + 1].off;
		int in_dim = p->dims[l], out = p->dims[l + 1];
		enum act_kind act = layer_act(m, l);
		float *y = rows_of(p->act[l + 1], row, out);

		/* y = x W^T */
		mm(p, 0, 1, n, out, in_dim, x, x16, in_dim, params + woff, half_at(p->w16, woff),
		   in_dim, 0.0f, y, out);
		dev->bias_act(y, act == ACT_GELU ? rows_of(p->pre[l], row, out) : NULL, bias, n, out,
			      act);
		x = y;
		x16 = NULL;
		if (p->prec && l + 1 < p->nr_layers) {
			uint16_t *y16 = rows16_of(p->act16[l + 1], row, out);

			dev->cast_half(p->prec, y16, y, (size_t)n * out);
			x16 = y16;
		}
	}
	return x;
}

static double mlp_loss(struct model *m, int row, int n, const float *x, const int *y,
		       float grad_scale, int *correct)
{
	struct mlp *p = m->priv;
	int classes = p->dims[p->nr_layers];
	float *logits = rows_of(p->act[p->nr_layers], row, classes);

	(void)x;   /* a classifier's labels are y */

	if (grad_scale == 0.0f)
		return p->dev->xent_eval(logits, y, n, classes, correct);
	return p->dev->xent(logits, logits, y, n, classes, grad_scale, correct);
}

/*
 * Walking back through layer l: dout (gradient w.r.t. its output) through its
 * activation to the pre-activation, then the weight and bias gradients, then
 * the gradient w.r.t. its input (the previous layer's output) into scratch.
 */
static const float *mlp_backward_range(struct model *m, const float *params, float *grads,
				       float grad_beta, int a, int b, int row, int n,
				       const float *in, float *dout, model_bucket_fn *ready,
				       void *data)
{
	struct mlp *p = m->priv;
	const struct dev *dev = p->dev;
	int cur = 0;
	float *d = dout ? dout : rows_of(p->act[p->nr_layers], row, p->dims[p->nr_layers]);

	for (int l = b - 1; l >= a; l--) {
		size_t woff = m->segs[2 * l].off;
		float *gw = grads + woff, *gb = grads + m->segs[2 * l + 1].off;
		int in_dim = p->dims[l], out = p->dims[l + 1];
		enum act_kind act = layer_act(m, l);
		const float *x = l == a ? in : rows_of(p->act[l], row, in_dim);

		if (act != ACT_NONE)
			dev->act_backward(d, act == ACT_GELU ? rows_of(p->pre[l], row, out) :
				rows_of(p->act[l + 1], row, out), (size_t)n * out, act);
		if (p->prec)
			dev->cast_half(p->prec, p->d16, d, (size_t)n * out);
		mm(p, 1, 0, out, in_dim, n, d, p->d16, out, x, rows16_of(p->act16[l], row, in_dim),
		   in_dim, grad_beta, gw, in_dim);
		dev->bias_grad(gb, d, n, out, grad_beta);
		if (ready)
			ready(l, data);
		if (l == 0)
			return NULL;
		/* gradient w.r.t. layer l's input */
		mm(p, 0, 0, n, in_dim, out, d, p->d16, out, params + woff, half_at(p->w16, woff),
		   in_dim, 0.0f, p->dbuf[cur], in_dim);
		d = p->dbuf[cur];
		cur = !cur;
	}
	return d;
}

/* One stage holding every layer, on rows [0, n). */
static double mlp_train_step(struct model *m, const float *params, float *grads, float grad_beta,
			     const float *x, const int *y, int n, float grad_scale, int *correct,
			     model_bucket_fn *ready, void *data)
{
	struct mlp *p = m->priv;
	int L = p->nr_layers;
	double loss;

	if (n == 0) {
		/* a rank with no rows in this (last, partial) batch still takes part */
		if (grad_beta == 0.0f)
			p->dev->memset0(grads, m->nr_params * sizeof(*grads));
		if (correct)
			*correct = 0;
		for (int l = L - 1; l >= 0; l--)
			if (ready)
				ready(l, data);
		return 0.0;
	}
	mlp_forward_range(m, params, 0, L, 0, n, x);
	loss = mlp_loss(m, 0, n, x, y, grad_scale, correct);
	mlp_backward_range(m, params, grads, grad_beta, 0, L, 0, n, x, NULL, ready, data);
	return loss;
}

static double mlp_evaluate(struct model *m, const float *params, const float *x, const int *y,
			   int n, int *correct)
{
	struct mlp *p = m->priv;

	if (n == 0) {
		*correct = 0;
		return 0.0;
	}
	mlp_forward_range(m, params, 0, p->nr_layers, 0, n, x);
	return mlp_loss(m, 0, n, x, y, 0.0f, correct);
}

static const float *mlp_logits(const struct model *m)
{
	struct mlp *p = m->priv;

	return p->act[p->nr_layers];
}

static void mlp_release(struct model *m)
{
	struct mlp *p = m->priv;

	if (!p)
		return;
	for (int l = 1; l <= p->nr_layers; l++)
		p->dev->release(p->act[l]);
	for (int l = 0; l <= p->nr_layers; l++)
		p->dev->release(p->act16[l]);
	for (int l = 0; l < p->nr_layers; l++)
		p->dev->release(p->pre[l]);
	p->dev->release(p->dbuf[0]);
	p->dev->release(p->dbuf[1]);
	p->dev->release(p->w16);
	p->dev->release(p->d16);
	free(p);
	m->priv = NULL;
}

static const struct model_ops mlp_ops = {
	model_init_params_default, mlp_train_step, mlp_evaluate, mlp_logits, mlp_release,
	mlp_forward_range, mlp_loss, mlp_backward_range,
};

int mlp_create(struct model *m, const struct dev *dev, struct strbuf *err)
{
	const struct model_spec *s = &m->spec;
	struct mlp *p;
	size_t nb = (size_t)s->max_batch;
	int widest;

	if (s->nr_hidden < 0 || s->nr_hidden >= MODEL_MAX_LAYERS) {
		strbuf_addf(err, "mlp supports 0 to %d hidden layers", MODEL_MAX_LAYERS - 1);
		return -1;
	}
	if (m->precision != 0 && !dev->gemm_mixed) {
		strbuf_addstr(err, "the CPU path computes in fp32 only (bf16/fp16 need a GPU)");
		return -1;
	}
	for (int l = 0; l < s->nr_hidden; l++)
		if (s->hidden[l] <= 0) {
			strbuf_addf(err, "hidden layer %d has width %d", l, s->hidden[l]);
			return -1;
		}
	p = xcalloc(1, sizeof(*p));
	p->dev = dev;
	p->prec = m->precision;
	p->nr_layers = s->nr_hidden + 1;
	p->dims[0] = s->input_dim;
	for (int l = 0; l < s->nr_hidden; l++)
		p->dims[l + 1] = s->hidden[l];
	p->dims[p->nr_layers] = s->classes;
	m->priv = p;
	m->ops = &mlp_ops;
	mlp_layout(m);
	widest = s->input_dim;
	for (int l = 1; l <= p->nr_layers; l++) {
		p->act[l] = dev->alloc(nb * p->dims[l] * sizeof(float));
		if (p->dims[l] > widest)
			widest = p->dims[l];
		if (l < p->nr_layers && s->act == ACT_GELU)
			p->pre[l - 1] = dev->alloc(nb * p->dims[l] * sizeof(float));
	}
	p->dbuf[0] = dev->alloc(nb * widest * sizeof(float));
	p->dbuf[1] = dev->alloc(nb * widest * sizeof(float));
	if (p->prec) {
		for (int l = 0; l < p->nr_layers; l++)
			p->act16[l] = dev->alloc(nb * p->dims[l] * sizeof(uint16_t));
		p->w16 = dev->alloc(m->nr_params * sizeof(uint16_t));
		p->d16 = dev->alloc(nb * widest * sizeof(uint16_t));
	}
	return 0;
}
