/*
 * gpu.h - the CUDA side as seen from C (implemented in kernels.cu).
 *
 * Without CUDA (NO_CUDA=1, the asan build, no nvcc) gpu_stub.c provides the
 * device plumbing: gpu_count() returns 0 and the rest is never reached; the
 * kernels exist only with CUDA.  Kernels take device pointers and run on the
 * one compute stream, gpu_stream(); the *_gpu functions are twins of the
 * *_cpu ones in kernels.h, and dev_gpu (dev.c) is the table of them.
 */
#ifndef DT_TRAINER_GPU_H
#define DT_TRAINER_GPU_H

#include <stddef.h>
#include <stdint.h>
#include "trainer/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 in a build with CUDA (whether or not this machine has a GPU) */
#ifdef DT_HAVE_CUDA
#define HAVE_CUDA_BUILD 1
#else
#define HAVE_CUDA_BUILD 0
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

/* Twins of kernels.h (same function types, documented there), device pointers. */
kern_gemm_fn gemm_gpu;
kern_gemm_mixed_fn gemm_mixed_gpu;
kern_cast_half_fn cast_half_gpu;
kern_bias_act_fn bias_act_forward_gpu;
kern_act_backward_fn act_backward_gpu;
kern_bias_grad_fn bias_grad_gpu;
kern_xent_fn softmax_xent_gpu;
kern_xent_eval_fn softmax_xent_eval_gpu;
kern_gemm_batched_fn gemm_batched_gpu;
kern_layernorm_fn layernorm_forward_gpu;
kern_layernorm_backward_fn layernorm_backward_gpu;
kern_softmax_causal_fn softmax_causal_gpu;
kern_softmax_causal_backward_fn softmax_causal_backward_gpu;
kern_embed_fn embed_forward_gpu;
kern_embed_backward_fn embed_backward_gpu;
kern_targets_fn next_tokens_gpu;
kern_add_fn add_gpu;
kern_sgd_fn sgd_update_gpu;
kern_adamw_fn adamw_update_gpu;
kern_sumsq_fn sumsq_gpu;
kern_scale_fn scale_gpu;
kern_finite_fn all_finite_gpu;

#ifdef __cplusplus
}
#endif

#endif
