/*
 * kernels.h - the trainer's compute kernels, CPU reference versions.
 *
 * Every function here is the readable reference ("CPU twin") of a CUDA kernel
 * in kernels.cu with the same name minus "_cpu"; tests/unit/test_trainer_gpu.c
 * runs both on the same inputs and compares.  Layout is row-major throughout:
 * activations are [n, d] (n samples), a linear layer's weight is [out, in] and
 * its bias [out], as in PyTorch, so y = x W^T + b.
 *
 * The CPU versions use OpenBLAS (cblas_sgemm) when built with DT_HAVE_BLAS and
 * OpenMP for the elementwise loops; nothing here allocates or fails.
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
 * C[M,N] = alpha * op(A) op(B) + beta * C, row-major; op(X) is X^T when the
 * matching trans flag is set.  A is [M,K] (or [K,M] transposed), B [K,N]
 * (or [N,K]).
 */
void gemm_cpu(int trans_a, int trans_b, int m, int n, int k, float alpha,
	      const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* Fused epilogue of a linear layer: y[i,j] = act(y[i,j] + bias[j]); when pre
 * is not NULL it receives the pre-activation y[i,j] + bias[j], for every
 * activation (GELU's backward needs it; the CUDA twin writes the same). */
void bias_act_forward_cpu(float *y, float *pre, const float *bias, int n, int d, enum act_kind act);

/* dpre = dy * act'(.) in place on dy; `saved` is the pre-activation for GELU
 * and the output for ReLU (out > 0 iff pre > 0). */
void act_backward_cpu(float *dy, const float *saved, size_t count, enum act_kind act);

/* db[j] = beta * db[j] + sum_i dy[i,j] */
void bias_grad_cpu(float *db, const float *dy, int n, int d, float beta);

/*
 * Softmax cross-entropy over logits [n, c] with integer labels, fused with its
 * gradient: dlogits = (softmax - onehot) * grad_scale (dlogits may alias
 * logits).  Returns the summed loss (natural log) over the n rows; *correct
 * (if not NULL) gets the number of rows whose argmax equals the label.
 */
double softmax_xent_cpu(float *dlogits, const float *logits, const int *labels,
			int n, int c, float grad_scale, int *correct);

/* Forward only (validation): summed loss and correct count, logits untouched. */
double softmax_xent_eval_cpu(const float *logits, const int *labels, int n, int c, int *correct);

/* GELU, tanh approximation, and its derivative (exposed for tests). */
float gelu_cpu(float x);
float gelu_grad_cpu(float x);

/* SGD with momentum (PyTorch semantics, dampening 0): g += wd p;
 * buf = mu buf + g; p -= lr buf.  mom may be NULL when mu == 0. */
void sgd_update_cpu(float *p, const float *g, float *mom, size_t n, float lr, float mu, float wd);

/* AdamW (decoupled weight decay); t is the 1-based step number. */
void adamw_update_cpu(float *p, const float *g, float *m, float *v, size_t n, float lr,
		      float beta1, float beta2, float eps, float wd, long long t);

/* Sum of squares in double (gradient norm, clipping). */
double sumsq_cpu(const float *x, size_t n);
void scale_cpu(float *x, size_t n, float s);
/* 1 if every value is finite. */
int all_finite_cpu(const float *x, size_t n);

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

#ifdef __cplusplus
}
#endif

#endif
