/*
 * gpu.h - the CUDA side as seen from C (implemented in kernels.cu).
 *
 * Without CUDA (NO_CUDA=1, the asan build, no nvcc) gpu_stub.c provides the
 * same functions: gpu_count() returns 0 and the rest are never reached.
 * Kernels take device pointers and run on the one compute stream,
 * gpu_stream(); the *_gpu functions are twins of the *_cpu ones in kernels.h.
 */
#ifndef DT_TRAINER_GPU_H
#define DT_TRAINER_GPU_H

#include <stddef.h>
#include <stdint.h>
#include "trainer/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Visible devices: 0 without CUDA, without a driver or without a device; -1
 * with a message in err for any other CUDA error (a driver too old for the
 * runtime, ...), which the caller reports, and fails on where it expected GPUs.
 */
int gpu_count(char *err, size_t errlen);
/*
 * DT_REQUIRE_GPU set to anything but "" or "0": a GPU test or benchmark that
 * finds no usable GPU fails instead of skipping (make trainer-gpu-test sets
 * it where nvidia-smi sees a GPU).  Same answer in every build.
 */
int gpu_required(void);
/* Select device `dev`, create the compute stream and cuBLAS handles. */
int gpu_init(int dev, char *err, size_t errlen);
void gpu_shutdown(void);
void *gpu_stream(void);
void gpu_sync(void);

void *gpu_malloc(size_t bytes);
void gpu_free(void *p);
void gpu_h2d(void *dst, const void *src, size_t bytes);
void gpu_d2h(void *dst, const void *src, size_t bytes);
void gpu_memset0(void *p, size_t bytes);

/* Twins of kernels.h, device pointers. */
void gemm_gpu(int trans_a, int trans_b, int m, int n, int k, float alpha,
	      const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
/* Mixed precision GEMM: A and B stored as bf16 (prec 1) or fp16 (prec 2), C fp32. */
void gemm_mixed_gpu(int prec, int trans_a, int trans_b, int m, int n, int k, float alpha,
		    const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta,
		    float *c, int ldc);
void bias_act_forward_gpu(float *y, float *pre, const float *bias, int n, int d, enum act_kind act);
void act_backward_gpu(float *dy, const float *saved, size_t count, enum act_kind act);
void bias_grad_gpu(float *db, const float *dy, int n, int d, float beta);
/* Loss sum and correct count come back to the host (synchronises). */
double softmax_xent_gpu(float *dlogits, const float *logits, const int *labels, int n, int c,
			float grad_scale, int *correct);
double softmax_xent_eval_gpu(const float *logits, const int *labels, int n, int c, int *correct);
void sgd_update_gpu(float *p, const float *g, float *mom, size_t n, float lr, float mu, float wd);
void adamw_update_gpu(float *p, const float *g, float *m, float *v, size_t n, float lr,
		      float beta1, float beta2, float eps, float wd, long long t);
double sumsq_gpu(const float *x, size_t n);
void scale_gpu(float *x, size_t n, float s);
int all_finite_gpu(const float *x, size_t n);
/* prec 1 = bf16, 2 = fp16 */
void cast_half_gpu(int prec, uint16_t *dst, const float *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif
