/*
 * kernels.h - the trainer's compute kernels: their signatures, the CPU
 * reference versions, and struct dev, the table through which the model walk
 * and the training loop reach one device's memory and kernels.
 *
 * Every *_cpu function here is the readable reference ("CPU twin") of a CUDA
 * kernel in kernels.cu with the same name ending in _gpu (gpu.h);
 * tests/unit/test_trainer_gpu.c runs both on the same inputs and compares.
 * Layout is row-major throughout: activations are [n, d] (n samples), a
 * linear layer's weight is [out, in] and its bias [out], as in PyTorch, so
 * y = x W^T + b.
 *
 * The CPU versions use OpenBLAS (cblas_sgemm) when built with DT_HAVE_BLAS and
 * OpenMP for the elementwise loops; no kernel allocates or fails.
 */
#ifndef DT_TRAINER_KERNELS_H
#define DT_TRAINER_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum act_kind { ACT_NONE, ACT_RELU, ACT_GELU };

/*
 * Each kernel's signature is written once, as a function type below; kernels.h
 * declares the *_cpu functions with it, gpu.h the *_gpu twins, and struct dev
 * holds pointers to one device's set.
 *
 * C[M,N] = alpha * op(A) op(B) + beta * C, row-major; op(X) is X^T when the
 * matching trans flag is set.  A is [M,K] (or [K,M] transposed), B [K,N]
 * (or [N,K]).
 */
typedef void kern_gemm_fn(int trans_a, int trans_b, int m, int n, int k, float alpha,
			  const float *a, int lda, const float *b, int ldb, float beta,
			  float *c, int ldc);
kern_gemm_fn gemm_cpu;

/* Mixed-precision GEMM (GPU only): A and B stored as bf16 (prec 1) or fp16
 * (prec 2), C and the accumulation fp32. */
typedef void kern_gemm_mixed_fn(int prec, int trans_a, int trans_b, int m, int n, int k,
				float alpha, const uint16_t *a, int lda, const uint16_t *b,
				int ldb, float beta, float *c, int ldc);

/* dst = src rounded to bf16 (prec 1) or fp16 (prec 2) (GPU only). */
typedef void kern_cast_half_fn(int prec, uint16_t *dst, const float *src, size_t n);

/* Fused epilogue of a linear layer: y[i,j] = act(y[i,j] + bias[j]); when pre
 * is not NULL it receives the pre-activation y[i,j] + bias[j], for every
 * activation (GELU's backward needs it; the CUDA twin writes the same). */
typedef void kern_bias_act_fn(float *y, float *pre, const float *bias, int n, int d,
			      enum act_kind act);
kern_bias_act_fn bias_act_forward_cpu;

/* dpre = dy * act'(.) in place on dy; `saved` is the pre-activation for GELU
 * and the output for ReLU (out > 0 iff pre > 0). */
typedef void kern_act_backward_fn(float *dy, const float *saved, size_t count, enum act_kind act);
kern_act_backward_fn act_backward_cpu;

/* db[j] = beta * db[j] + sum_i dy[i,j] */
typedef void kern_bias_grad_fn(float *db, const float *dy, int n, int d, float beta);
kern_bias_grad_fn bias_grad_cpu;

/*
 * Softmax cross-entropy over logits [n, c] with integer labels, fused with its
 * gradient: dlogits = (softmax - onehot) * grad_scale (dlogits may alias
 * logits).  Returns the summed loss (natural log) over the n rows; *correct
 * (if not NULL) gets the number of rows whose argmax equals the label.  The
 * GPU twin brings loss and count back to the host (it synchronises).
 */
typedef double kern_xent_fn(float *dlogits, const float *logits, const int *labels, int n, int c,
			    float grad_scale, int *correct);
kern_xent_fn softmax_xent_cpu;

/* Forward only (validation): summed loss and correct count, logits untouched. */
typedef double kern_xent_eval_fn(const float *logits, const int *labels, int n, int c,
				 int *correct);
kern_xent_eval_fn softmax_xent_eval_cpu;

/*
 * Transformer kernels (model_gpt.c).  Shapes: n sequences of t positions of
 * d channels, rows [n * t, d].  Tokens arrive as the batch rows the loop
 * copies (floats holding small integers, exact below 2^24): sequence s has
 * its tokens at tok[s * ld + 0 .. t], the inputs at 0 .. t-1 and the next-
 * token targets at 1 .. t.
 *
 * Strided batched GEMM: count GEMMs as gemm above, the i-th on a + i*stride_a,
 * b + i*stride_b, c + i*stride_c (attention's per-head products).
 */
typedef void kern_gemm_batched_fn(int trans_a, int trans_b, int m, int n, int k, float alpha,
				  const float *a, int lda, long long stride_a, const float *b,
				  int ldb, long long stride_b, float beta, float *c, int ldc,
				  long long stride_c, int count);
kern_gemm_batched_fn gemm_batched_cpu;

/* LayerNorm over the rows of x [n, d] (eps 1e-5, biased variance, as PyTorch):
 * out = (x - mean) * rstd * w + b; mean and rstd [n] are kept for backward. */
typedef void kern_layernorm_fn(float *out, float *mean, float *rstd, const float *x,
			       const float *w, const float *b, int n, int d);
kern_layernorm_fn layernorm_forward_cpu;

/* Its backward, ACCUMULATING into dx (the residual stream's gradient), dw and
 * db (the caller zeroes gradients once per step). */
typedef void kern_layernorm_backward_fn(float *dx, float *dw, float *db, const float *dout,
					const float *x, const float *w, const float *mean,
					const float *rstd, int n, int d);
kern_layernorm_backward_fn layernorm_backward_cpu;

/* Causal softmax in place over count matrices [t, t] of scores: row i keeps
 * columns 0..i, later columns become 0. */
typedef void kern_softmax_causal_fn(float *att, int count, int t);
kern_softmax_causal_fn softmax_causal_cpu;

/* Its backward in place on datt: dS = P * (dP - sum_j P dP), 0 above the diagonal. */
typedef void kern_softmax_causal_backward_fn(float *datt, const float *att, int count, int t);
kern_softmax_causal_backward_fn softmax_causal_backward_cpu;

/* out[s*t + i, :] = wte[tok[s*ld + i], :] + wpe[i, :] for n sequences. */
typedef void kern_embed_fn(float *out, const float *tok, int ld, const float *wte,
			   const float *wpe, int n, int t, int d);
kern_embed_fn embed_forward_cpu;

/* Its backward, accumulating: dwte[tok] += dout row, dwpe[i] += dout row.
 * Rows are summed in order (the CUDA twin too: no atomics, deterministic). */
typedef void kern_embed_backward_fn(float *dwte, float *dwpe, const float *dout, const float *tok,
				    int ld, int n, int t, int d);
kern_embed_backward_fn embed_backward_cpu;

/* labels[s*t + i] = tok[s*ld + i + 1]: the next-token targets as integers. */
typedef void kern_targets_fn(int *labels, const float *tok, int ld, int n, int t);
kern_targets_fn next_tokens_cpu;

/* out = a + b (the residual connection; out may alias a or b). */
typedef void kern_add_fn(float *out, const float *a, const float *b, size_t count);
kern_add_fn add_cpu;

/* GELU, tanh approximation, and its derivative (exposed for tests); the tanh
 * they use (vectorisable; within 2e-7 of tanhf). */
float gelu_cpu(float x);
float gelu_grad_cpu(float x);
float tanh_fast_cpu(float u);

/* SGD with momentum (PyTorch semantics, dampening 0): g += wd p;
 * buf = mu buf + g; p -= lr buf.  mom may be NULL when mu == 0. */
typedef void kern_sgd_fn(float *p, const float *g, float *mom, size_t n, float lr, float mu,
			 float wd);
kern_sgd_fn sgd_update_cpu;

/* AdamW (decoupled weight decay); t is the 1-based step number. */
typedef void kern_adamw_fn(float *p, const float *g, float *m, float *v, size_t n, float lr,
			   float beta1, float beta2, float eps, float wd, long long t);
kern_adamw_fn adamw_update_cpu;

/* Sum of squares in double (gradient norm, clipping). */
typedef double kern_sumsq_fn(const float *x, size_t n);
kern_sumsq_fn sumsq_cpu;
typedef void kern_scale_fn(float *x, size_t n, float s);
kern_scale_fn scale_cpu;
/* 1 if every value is finite. */
typedef int kern_finite_fn(const float *x, size_t n);
kern_finite_fn all_finite_cpu;

/* Reduced-precision storage formats of the mixed-precision path, round to
 * nearest even (NaN stays NaN). */
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_fp16(float f);
float fp16_to_float(uint16_t h);
void cast_to_bf16_cpu(uint16_t *dst, const float *src, size_t n);
void cast_to_fp16_cpu(uint16_t *dst, const float *src, size_t n);

/* Threads per rank for the CPU kernels: OpenBLAS's when built with it (our
 * loops then run on one thread), else OpenMP's.  0 leaves the defaults. */
void kernels_set_threads(int n);

/*
 * One device: its memory and its kernels.  model_mlp.c and model_gpt.c (forward, loss,
 * backward) and train.c (optimiser, clipping, loss scaling) are written once
 * against this table; the buffers they pass are the device's own (host memory
 * for dev_cpu, CUDA memory for dev_gpu) and opaque to them.  Defined in dev.c.
 */
struct dev {
	int gpu;
	void *(*alloc)(size_t bytes);           /* zeroed; release() frees it */
	void (*release)(void *p);
	void (*h2d)(void *dst, const void *src, size_t bytes);
	void (*d2h)(void *dst, const void *src, size_t bytes);
	void (*memset0)(void *p, size_t bytes);
	/* the model */
	kern_gemm_fn *gemm;
	kern_gemm_mixed_fn *gemm_mixed;         /* NULL: fp32 only (the CPU) */
	kern_cast_half_fn *cast_half;           /* NULL when gemm_mixed is */
	kern_bias_act_fn *bias_act;
	kern_act_backward_fn *act_backward;
	kern_bias_grad_fn *bias_grad;
	kern_xent_fn *xent;
	kern_xent_eval_fn *xent_eval;
	/* the transformer (model_gpt.c) */
	kern_gemm_batched_fn *gemm_batched;
	kern_layernorm_fn *layernorm;
	kern_layernorm_backward_fn *layernorm_backward;
	kern_softmax_causal_fn *softmax_causal;
	kern_softmax_causal_backward_fn *softmax_causal_backward;
	kern_embed_fn *embed;
	kern_embed_backward_fn *embed_backward;
	kern_targets_fn *next_tokens;
	kern_add_fn *add;
	/* the optimiser */
	kern_sgd_fn *sgd;
	kern_adamw_fn *adamw;
	kern_sumsq_fn *sumsq;
	kern_scale_fn *scale;
	kern_finite_fn *finite;
};

/* Host memory with the *_cpu kernels; CUDA memory with the *_gpu kernels
 * (without CUDA an empty table, never used: gpu_count() says 0). */
extern const struct dev dev_cpu, dev_gpu;

#ifdef __cplusplus
}
#endif

#endif
