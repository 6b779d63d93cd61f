/*
 * model_mlp_cuda.c - the MLP on a CUDA GPU, step for step the twin of
 * model_mlp.c (read that first): same buffers, same order, *_gpu kernels.
 *
 * Mixed precision (--precision bf16|fp16): the fp32 master weights stay in
 * the flat parameter array the optimiser updates; every forward casts them
 * to 16 bits (w16), GEMM inputs (activations, upstream gradients) are kept
 * in 16 bits too, and every GEMM accumulates and writes fp32 (cuBLAS compute
 * type 32F).  Bias, activation, softmax/loss and weight gradients are fp32.
 * fp16 loss scaling is done by the loop (train.c) through grad_scale.
 */
#include "trainer/model.h"

#ifdef DT_HAVE_CUDA
#include "trainer/gpu.h"

#include <stdlib.h>
#include <string.h>

struct mlp_gpu {
	int nr_layers, prec;
	int dims[MODEL_MAX_LAYERS + 2];
	float *act[MODEL_MAX_LAYERS + 2];        /* act[0] = the input (device) */
	float *pre[MODEL_MAX_LAYERS + 1];
	float *dbuf[2];
	uint16_t *act16[MODEL_MAX_LAYERS + 2];   /* mixed precision only */
	uint16_t *w16, *d16;
};

static enum act_kind layer_act(const struct model *m, int l)
{
	struct mlp_gpu *p = m->priv;

	return l == p->nr_layers - 1 ? ACT_NONE : m->spec.act;
}

/* y = x W^T, fp32 or 16-bit inputs */
static void linear_fwd(struct mlp_gpu *p, const struct model *m, const float *params, int l, int n)
{
	int in = p->dims[l], out = p->dims[l + 1];
	size_t woff = m->segs[2 * l].off;

	if (!p->prec)
		gemm_gpu(0, 1, n, out, in, 1.0f, p->act[l], in, params + woff, in, 0.0f,
			 p->act[l + 1], out);
	else
		gemm_mixed_gpu(p->prec, 0, 1, n, out, in, 1.0f, p->act16[l], in, p->w16 + woff, in,
			       0.0f, p->act[l + 1], out);
}

static void mlp_forward(struct model *m, const float *params, const float *x, int n)
{
	struct mlp_gpu *p = m->priv;

	p->act[0] = (float *)x;
	if (p->prec) {
		cast_half_gpu(p->prec, p->w16, params, m->nr_params);
		cast_half_gpu(p->prec, p->act16[0], x, (size_t)n * p->dims[0]);
	}
	for (int l = 0; l < p->nr_layers; l++) {
		const float *b = params + m->segs[2 * l + 1].off;
		int out = p->dims[l + 1];
		enum act_kind act = layer_act(m, l);

		linear_fwd(p, m, params, l, n);
		bias_act_forward_gpu(p->act[l + 1], act == ACT_GELU ? p->pre[l] : NULL, b, n, out, act);
		if (p->prec && l + 1 < p->nr_layers)
			cast_half_gpu(p->prec, p->act16[l + 1], p->act[l + 1], (size_t)n * out);
	}
}

static double mlp_train_step(struct model *m, const float *params, float *grads, float grad_beta,
			     const float *x, const int *y, int n, float grad_scale, int *correct,
			     model_bucket_fn *ready, void *data)
{
	struct mlp_gpu *p = m->priv;
	int L = p->nr_layers, cur = 0;
	double loss;

	if (n == 0) {
		if (grad_beta == 0.0f)
			gpu_memset0(grads, m->nr_params * sizeof(*grads));
		if (correct)
			*correct = 0;
		for (int l = L - 1; l >= 0; l--)
			if (ready)
				ready(l, data);
		return 0.0;
	}
	mlp_forward(m, params, x, n);
	loss = softmax_xent_gpu(p->dbuf[cur], p->act[L], y, n, p->dims[L], grad_scale, correct);
	for (int l = L - 1; l >= 0; l--) {
		float *gw = grads + m->segs[2 * l].off, *gb = grads + m->segs[2 * l + 1].off;
		int in = p->dims[l], out = p->dims[l + 1];
		float *d = p->dbuf[cur];

		if (!p->prec) {
			gemm_gpu(1, 0, out, in, n, 1.0f, d, out, p->act[l], in, grad_beta, gw, in);
		} else {
			cast_half_gpu(p->prec, p->d16, d, (size_t)n * out);
			gemm_mixed_gpu(p->prec, 1, 0, out, in, n, 1.0f, p->d16, out, p->act16[l], in,
				       grad_beta, gw, in);
		}
		bias_grad_gpu(gb, d, n, out, grad_beta);
		if (ready)
			ready(l, data);
		if (l == 0)
			break;
		if (!p->prec)
			gemm_gpu(0, 0, n, in, out, 1.0f, d, out, params + m->segs[2 * l].off, in, 0.0f,
				 p->dbuf[!cur], in);
		else
			gemm_mixed_gpu(p->prec, 0, 0, n, in, out, 1.0f, p->d16, out,
				       p->w16 + m->segs[2 * l].off, in, 0.0f, p->dbuf[!cur], in);
		cur = !cur;
		act_backward_gpu(p->dbuf[cur],
				 layer_act(m, l - 1) == ACT_GELU ? p->pre[l - 1] : p->act[l],
				 (size_t)n * in, layer_act(m, l - 1));
	}
	return loss;
}

static double mlp_evaluate(struct model *m, const float *params, const float *x, const int *y,
			   int n, int *correct)
{
	struct mlp_gpu *p = m->priv;

	if (n == 0) {
		*correct = 0;
		return 0.0;
	}
	mlp_forward(m, params, x, n);
	return softmax_xent_eval_gpu(p->act[p->nr_layers], y, n, p->dims[p->nr_layers], correct);
}

static const float *mlp_logits(const struct model *m)
{
	struct mlp_gpu *p = m->priv;

	return p->act[p->nr_layers];
}

static void mlp_release(struct model *m)
{
	struct mlp_gpu *p = m->priv;

	if (!p)
		return;
	for (int l = 1; l <= p->nr_layers; l++)
		gpu_free(p->act[l]);
	for (int l = 0; l <= p->nr_layers; l++)
		gpu_free(p->act16[l]);
	for (int l = 0; l < p->nr_layers; l++)
		gpu_free(p->pre[l]);
	gpu_free(p->dbuf[0]);
	gpu_free(p->dbuf[1]);
	gpu_free(p->w16);
	gpu_free(p->d16);
	free(p);
	m->priv = NULL;
}

static const struct model_ops mlp_gpu_ops = {
	model_init_params_default, mlp_train_step, mlp_evaluate, mlp_logits, mlp_release,
};

int mlp_create_cuda(struct model *m, struct strbuf *err)
{
	const struct model_spec *s = &m->spec;
	struct mlp_gpu *p;
	size_t nb = (size_t)s->max_batch;
	int widest;

	if (s->nr_hidden < 0 || s->nr_hidden >= MODEL_MAX_LAYERS) {
		strbuf_addf(err, "mlp supports 0 to %d hidden layers", MODEL_MAX_LAYERS - 1);
		return -1;
	}
	for (int l = 0; l < s->nr_hidden; l++)
		if (s->hidden[l] <= 0) {
			strbuf_addf(err, "hidden layer %d has width %d", l, s->hidden[l]);
			return -1;
		}
	p = xcalloc(1, sizeof(*p));
	p->prec = m->precision;
	p->nr_layers = s->nr_hidden + 1;
	p->dims[0] = s->input_dim;
	for (int l = 0; l < s->nr_hidden; l++)
		p->dims[l + 1] = s->hidden[l];
	p->dims[p->nr_layers] = s->classes;
	widest = s->input_dim;
	m->priv = p;
	m->ops = &mlp_gpu_ops;
	mlp_layout(m);
	for (int l = 1; l <= p->nr_layers; l++) {
		p->act[l] = gpu_malloc(nb * p->dims[l] * sizeof(float));
		if (p->dims[l] > widest)
			widest = p->dims[l];
		if (l < p->nr_layers && s->act == ACT_GELU)
			p->pre[l - 1] = gpu_malloc(nb * p->dims[l] * sizeof(float));
	}
	p->dbuf[0] = gpu_malloc(nb * widest * sizeof(float));
	p->dbuf[1] = gpu_malloc(nb * widest * sizeof(float));
	if (p->prec) {
		for (int l = 0; l < p->nr_layers; l++)
			p->act16[l] = gpu_malloc(nb * p->dims[l] * sizeof(uint16_t));
		p->w16 = gpu_malloc(m->nr_params * sizeof(uint16_t));
		p->d16 = gpu_malloc(nb * widest * sizeof(uint16_t));
	}
	return 0;
}
#endif
