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
	/* Logits of the last forward ([n, classes], host or device memory). */
	const float *(*logits)(const struct model *m);
	void (*release)(struct model *m);
};

struct model {
	const struct model_ops *ops;
	struct model_spec spec;
	size_t nr_params;
	struct param_seg segs[MODEL_MAX_SEGS];
	int nr_segs;
	struct grad_bucket buckets[MODEL_MAX_LAYERS + 2];
	int nr_buckets;
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
