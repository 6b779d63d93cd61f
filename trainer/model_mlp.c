/*
 * model_mlp.c - the MLP classifier on the CPU: the readable reference.
 *
 * Layers fc0..fcL: hidden layers are linear + activation, the last is linear
 * to logits, then softmax cross-entropy.  One GEMM per layer and direction
 * over the whole local batch (large GEMMs are what make a CPU fast), with the
 * bias + activation fused into one pass over the GEMM output.
 *
 * Buffers: act[0] is the caller's input (not copied), act[l+1] the output of
 * layer l; pre[l] the pre-activation when the activation is GELU (ReLU's
 * backward only needs the output); two gradient scratch buffers alternate
 * while walking back.  The model_mlp_cuda.cu twin keeps the same buffers on
 * the device.
 */
#include "trainer/model.h"

#include <stdlib.h>
#include <string.h>

struct mlp_cpu {
	int nr_layers;
	int dims[MODEL_MAX_LAYERS + 2];     /* dims[0] = input, dims[L] = classes */
	float *act[MODEL_MAX_LAYERS + 2];   /* act[0] points at the input */
	float *pre[MODEL_MAX_LAYERS + 1];
	float *dbuf[2];
};

static enum act_kind layer_act(const struct model *m, int l)
{
	struct mlp_cpu *p = m->priv;

	return l == p->nr_layers - 1 ? ACT_NONE : m->spec.act;
}

static void mlp_forward(struct model *m, const float *params, const float *x, int n)
{
	struct mlp_cpu *p = m->priv;

	p->act[0] = (float *)x;
	for (int l = 0; l < p->nr_layers; l++) {
		const float *w = params + m->segs[2 * l].off, *b = params + m->segs[2 * l + 1].off;
		int in = p->dims[l], out = p->dims[l + 1];
		enum act_kind act = layer_act(m, l);

		gemm_cpu(0, 1, n, out, in, 1.0f, p->act[l], in, w, in, 0.0f, p->act[l + 1], out);
		bias_act_forward_cpu(p->act[l + 1], act == ACT_GELU ? p->pre[l] : NULL, b, n, out, act);
	}
}

static double mlp_train_step(struct model *m, const float *params, float *grads, float grad_beta,
			     const float *x, const int *y, int n, float grad_scale, int *correct,
			     model_bucket_fn *ready, void *data)
{
	struct mlp_cpu *p = m->priv;
	int L = p->nr_layers, cur = 0;
	double loss;

	if (n == 0) {
		/* a rank with no rows in this (last, partial) batch still takes part */
		if (grad_beta == 0.0f)
			memset(grads, 0, m->nr_params * sizeof(*grads));
		if (correct)
			*correct = 0;
		for (int l = L - 1; l >= 0; l--)
			if (ready)
				ready(l, data);
		return 0.0;
	}
	mlp_forward(m, params, x, n);
	loss = softmax_xent_cpu(p->dbuf[cur], p->act[L], y, n, p->dims[L], grad_scale, correct);
	for (int l = L - 1; l >= 0; l--) {
		const float *w = params + m->segs[2 * l].off;
		float *gw = grads + m->segs[2 * l].off, *gb = grads + m->segs[2 * l + 1].off;
		int in = p->dims[l], out = p->dims[l + 1];
		float *d = p->dbuf[cur];

		gemm_cpu(1, 0, out, in, n, 1.0f, d, out, p->act[l], in, grad_beta, gw, in);
		bias_grad_cpu(gb, d, n, out, grad_beta);
		if (ready)
			ready(l, data);
		if (l == 0)
			break;
		/* gradient into layer l's input, through layer l-1's activation */
		gemm_cpu(0, 0, n, in, out, 1.0f, d, out, w, in, 0.0f, p->dbuf[!cur], in);
		cur = !cur;
		act_backward_cpu(p->dbuf[cur],
				 layer_act(m, l - 1) == ACT_GELU ? p->pre[l - 1] : p->act[l],
				 (size_t)n * in, layer_act(m, l - 1));
	}
	return loss;
}

static double mlp_evaluate(struct model *m, const float *params, const float *x, const int *y,
			   int n, int *correct)
{
	struct mlp_cpu *p = m->priv;

	if (n == 0) {
		*correct = 0;
		return 0.0;
	}
	mlp_forward(m, params, x, n);
	return softmax_xent_eval_cpu(p->act[p->nr_layers], y, n, p->dims[p->nr_layers], correct);
}

static const float *mlp_logits(const struct model *m)
{
	struct mlp_cpu *p = m->priv;

	return p->act[p->nr_layers];
}

static void mlp_release(struct model *m)
{
	struct mlp_cpu *p = m->priv;

	if (!p)
		return;
	for (int l = 1; l <= p->nr_layers; l++)
		free(p->act[l]);
	for (int l = 0; l < p->nr_layers; l++)
		free(p->pre[l]);
	free(p->dbuf[0]);
	free(p->dbuf[1]);
	free(p);
	m->priv = NULL;
}

static const struct model_ops mlp_cpu_ops = {
	model_init_params_default, mlp_train_step, mlp_evaluate, mlp_logits, mlp_release,
};

int mlp_create_cpu(struct model *m, struct strbuf *err)
{
	const struct model_spec *s = &m->spec;
	struct mlp_cpu *p;
	size_t nb = (size_t)s->max_batch;
	int widest;

	if (s->nr_hidden < 0 || s->nr_hidden >= MODEL_MAX_LAYERS) {
		strbuf_addf(err, "mlp supports 0 to %d hidden layers", MODEL_MAX_LAYERS - 1);
		return -1;
	}
	if (m->precision != 0) {
		strbuf_addstr(err, "the CPU path computes in fp32 only (bf16/fp16 need a GPU)");
		return -1;
	}
	p = xcalloc(1, sizeof(*p));
	p->nr_layers = s->nr_hidden + 1;
	p->dims[0] = s->input_dim;
	widest = s->input_dim;
	for (int l = 0; l < s->nr_hidden; l++) {
		if (s->hidden[l] <= 0) {
			free(p);
			strbuf_addf(err, "hidden layer %d has width %d", l, s->hidden[l]);
			return -1;
		}
		p->dims[l + 1] = s->hidden[l];
	}
	p->dims[p->nr_layers] = s->classes;
	for (int l = 1; l <= p->nr_layers; l++) {
		p->act[l] = xcalloc(nb * p->dims[l], sizeof(float));
		if (p->dims[l] > widest)
			widest = p->dims[l];
		if (l < p->nr_layers && s->act == ACT_GELU)
			p->pre[l - 1] = xcalloc(nb * p->dims[l], sizeof(float));
	}
	p->dbuf[0] = xcalloc(nb * widest, sizeof(float));
	p->dbuf[1] = xcalloc(nb * widest, sizeof(float));
	m->priv = p;
	m->ops = &mlp_cpu_ops;
	mlp_layout(m);
	return 0;
}
