/*
 * model.h - what the training loop needs from a model.
 *
 * A model owns its activation buffers; its parameters, gradients and
 * optimiser state live OUTSIDE it in flat float arrays of nr_params values
 * (one allocation each), so the optimiser, the gradient all-reduce and the
 * checkpoint code treat every model alike.  The model describes that flat
 * array with named segments (which ones get weight decay) and with gradient
 * buckets: contiguous ranges that backward finishes one after another and
 * announces through a callback, so the all-reduce of bucket i overlaps the
 * rest of backward.
 *
 * Models: "mlp" (model_mlp.c), a classifier over feature rows; "gpt"
 * (model_gpt.c), a decoder-only transformer language model whose rows are
 * context + 1 token ids (as floats) and whose y is unused: the targets are
 * the row shifted by one.
 *
 * Adding a model: write trainer/model_<name>.c with a create function filling
 * struct model, its walk written once against a device table (struct dev,
 * kernels.h; add kernels there, with CPU and CUDA twins, if it needs new
 * ones); add a row to the table in model.c.  The loop itself does not change.
 *
 * On the CUDA device every pointer handed to ops (params, grads, x, y) is a
 * device pointer; on the CPU host memory.
 *
 * Pipeline parallelism (--pipeline P, train.c) needs a model that can be run
 * layer by layer: the optional ops forward_range / loss / backward_range
 * below, and the layer table in struct model (nr_layers, layer_off,
 * act_width).  A model is a sequence of nr_layers layers; layer l owns the
 * parameters [layer_off[l], layer_off[l+1]) of the flat array (so a stage,
 * layers [a, b), owns one contiguous range) and reads act_width[l] floats per
 * row; act_width[nr_layers] is the logits' width.  Rows (samples, or
 * sequences for a language model) are independent, so several micro-batches
 * can be in flight at once: they are row ranges [row, row + n) of the model's
 * own activation buffers (max_batch rows), which keep a micro-batch's
 * activations alive until its backward.  The transformer fits the same way:
 * layer 0 = embeddings, 1..N = blocks, N+1 = final norm + head, a row = one
 * sequence (act_width = T * C).  Its head is tied to the token embedding: a
 * weight of layer 0 that the last layer reads and writes gradients to as
 * well, described by tied_off/tied_len.  Split over stages, the first and the
 * last stage both hold it; train.c sums their two gradients between them
 * before the data-parallel all-reduce (as Megatron-LM does) and both take the
 * same optimiser step on it, so the two copies stay identical.
 *
 * Stage boundaries balance layer_cost (relative compute per row of each
 * layer) when the model sets it, else the parameter counts.
 *
 * Order for one micro-batch on the stage owning [a, b): forward_range, then
 * (last stage only) loss, then backward_range; other micro-batches' calls may
 * come in between.  train_step is what a one-stage model does; a model may
 * implement it with the three range ops (model_mlp.c does).
 */
#ifndef DT_TRAINER_MODEL_H
#define DT_TRAINER_MODEL_H

#include <stddef.h>
#include "strbuf.h"
#include "trainer/kernels.h"
#include "rng.h"

#define MODEL_MAX_LAYERS 32
/* the GPT has 12 segments per block, plus embeddings and the final norm */
#define MODEL_MAX_SEGS (12 * MODEL_MAX_LAYERS + 4)

struct param_seg {
	char name[32];          /* "fc0.weight" */
	size_t off, len;        /* in floats, into the flat parameter array */
	int decay;              /* weight decay applies (weights yes, biases no) */
	int fan_in;             /* for initialisation */
};

struct grad_bucket {
	size_t off, len;
};

/* What to build; filled from the trainer options. */
struct model_spec {
	const char *name;               /* "mlp" */
	int hidden[MODEL_MAX_LAYERS];
	int nr_hidden;
	enum act_kind act;
	int input_dim, classes;
	int max_batch;                  /* largest local micro-batch */
	/* gpt: blocks, heads, embedding width, context (input_dim = context + 1,
	 * classes = the vocabulary) */
	int layers, heads, embd, context;
};

/* Called by backward when bucket `b` holds its final gradient. */
typedef void model_bucket_fn(int b, void *data);

struct model;

struct model_ops {
	/* Initialise the flat parameter array (host memory, always: the loop
	 * copies to the device) deterministically from r. */
	void (*init_params)(const struct model *m, float *params, struct rng *r);
	/*
	 * Forward, softmax cross-entropy and backward on n rows.  Gradients are
	 * scaled by grad_scale (1/global batch, times the loss scale) and written
	 * as grads = grad_beta * grads + new (grad_beta 0 or 1, for accumulation).
	 * Returns the summed (unscaled) loss; *correct counts argmax hits.
	 */
	double (*train_step)(struct model *m, const float *params, float *grads, float grad_beta,
			     const float *x, const int *y, int n, float grad_scale, int *correct,
			     model_bucket_fn *ready, void *data);
	/* Forward + loss only. */
	double (*evaluate)(struct model *m, const float *params, const float *x, const int *y,
			   int n, int *correct);
	/* Logits of the last evaluate ([n, classes], host or device memory;
	 * train_step leaves their gradient there). */
	const float *(*logits)(const struct model *m);
	void (*release)(struct model *m);

	/* ---- layer ranges, for pipeline stages (NULL: the model cannot be split) */
	/*
	 * Run layers [a, b) on rows [row, row + n): `in` is layer a's input
	 * ([n, act_width[a]]; the caller keeps it unchanged until backward_range of
	 * these rows).  Returns layer b-1's output rows, in the model's buffers
	 * (valid until the next forward of the same rows).
	 */
	const float *(*forward_range)(struct model *m, const float *params, int a, int b,
				      int row, int n, const float *in);
	/*
	 * Softmax cross-entropy of the logits rows [row, row + n) (forward_range to
	 * the last layer done) against y ([n]); summed loss, *correct argmax hits.
	 * x: the same rows of the batch (layer 0's input; a language model takes
	 * its targets from them and ignores y).  With grad_scale != 0 the gradient
	 * (scaled by it) replaces those logits, for backward_range; 0: forward
	 * only (validation), logits unchanged.
	 */
	double (*loss)(struct model *m, int row, int n, const float *x, const int *y,
		       float grad_scale, int *correct);
	/*
	 * Backward through layers [a, b) for rows [row, row + n).  dout is the
	 * gradient w.r.t. layer b-1's output ([n, act_width[b]]; overwritten), or
	 * NULL on the last stage: the gradient loss() left.  Parameter gradients of
	 * those layers: grads = grad_beta * grads + new; ready(bucket) as buckets
	 * finish (may be NULL).  Returns the gradient w.r.t. layer a's input
	 * ([n, act_width[a]], model scratch valid until the next call), NULL when a == 0.
	 */
	const float *(*backward_range)(struct model *m, const float *params, float *grads,
				       float grad_beta, int a, int b, int row, int n,
				       const float *in, float *dout, model_bucket_fn *ready,
				       void *data);
};

struct model {
	const struct model_ops *ops;
	struct model_spec spec;
	size_t nr_params;
	struct param_seg segs[MODEL_MAX_SEGS];
	int nr_segs;
	struct grad_bucket buckets[MODEL_MAX_LAYERS + 2];
	int nr_buckets;
	/* the layer sequence, for pipeline stages (see the top of this file); the
	 * gpt has MODEL_MAX_LAYERS blocks + 2 layers */
	int nr_layers;
	size_t layer_off[MODEL_MAX_LAYERS + 3];
	size_t act_width[MODEL_MAX_LAYERS + 3];
	double layer_cost[MODEL_MAX_LAYERS + 2];   /* all 0: balance parameters */
	/* a weight of layer 0 that the last layer uses too (the tied head); 0: none */
	size_t tied_off, tied_len;
	int on_gpu;
	void *priv;
	/* set by the mixed-precision GPU path: storage type of GEMM inputs */
	int precision;
	/* predictions per row: 1 for a classifier, the context for a language
	 * model (whose *correct counts tokens; throughput is rows x this) */
	int tokens_per_row;
};

/* Build a model; returns 0, or -1 with a message in err. */
int model_create(struct model *m, const struct model_spec *spec, int on_gpu, int precision,
		 struct strbuf *err);
void model_release(struct model *m);
/* Known model names, for --help and errors: "mlp, gpt". */
const char *model_names(void);

/* Per-model constructors (model_<name>.c), on dev_cpu or dev_gpu. */
int mlp_create(struct model *m, const struct dev *dev, struct strbuf *err);
int gpt_create(struct model *m, const struct dev *dev, struct strbuf *err);

/* Shared by every implementation of "mlp": the flat layout and the init. */
void mlp_layout(struct model *m);
void model_init_params_default(const struct model *m, float *params, struct rng *r);

#endif
