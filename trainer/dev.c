/*
 * dev.c - the two device tables of kernels.h, side by side: dev_cpu (host
 * memory, the *_cpu kernels of kernels_cpu.c) and dev_gpu (CUDA memory, the
 * *_gpu kernels of kernels.cu).  Twins differ only here: the model walk
 * (model_mlp.c, model_gpt.c) and the loop (train.c) are one code path over either table.
 */
#include "trainer/gpu.h"
#include "strbuf.h"

#include <stdlib.h>
#include <string.h>

static void *host_alloc(size_t bytes)
{
	return xcalloc(1, bytes ? bytes : 1);
}

static void host_copy(void *dst, const void *src, size_t bytes)
{
	if (dst != src)
		memcpy(dst, src, bytes);
}

static void host_memset0(void *p, size_t bytes)
{
	memset(p, 0, bytes);
}

/* The kernels a device has twins of: NAME_cpu on the host, NAME_gpu on CUDA. */
#define DEV_TWINS(sfx) \
	.gemm = gemm_##sfx, \
	.bias_act = bias_act_forward_##sfx, \
	.act_backward = act_backward_##sfx, \
	.bias_grad = bias_grad_##sfx, \
	.xent = softmax_xent_##sfx, \
	.xent_eval = softmax_xent_eval_##sfx, \
	.gemm_batched = gemm_batched_##sfx, \
	.layernorm = layernorm_forward_##sfx, \
	.layernorm_backward = layernorm_backward_##sfx, \
	.softmax_causal = softmax_causal_##sfx, \
	.softmax_causal_backward = softmax_causal_backward_##sfx, \
	.embed = embed_forward_##sfx, \
	.embed_backward = embed_backward_##sfx, \
	.next_tokens = next_tokens_##sfx, \
	.add = add_##sfx, \
	.sgd = sgd_update_##sfx, \
	.adamw = adamw_update_##sfx, \
	.sumsq = sumsq_##sfx, \
	.scale = scale_##sfx, \
	.finite = all_finite_##sfx

/* no gemm_mixed, no cast_half: the CPU path is fp32 only */
const struct dev dev_cpu = {
	.gpu = 0, .alloc = host_alloc, .release = free, .h2d = host_copy, .d2h = host_copy,
	.memset0 = host_memset0, DEV_TWINS(cpu),
};

#ifdef DT_HAVE_CUDA
static void *gpu_alloc0(size_t bytes)
{
	void *p = gpu_malloc(bytes ? bytes : 1);

	gpu_memset0(p, bytes ? bytes : 1);
	return p;
}

const struct dev dev_gpu = {
	.gpu = 1, .alloc = gpu_alloc0, .release = gpu_free, .h2d = gpu_h2d, .d2h = gpu_d2h,
	.memset0 = gpu_memset0, .gemm_mixed = gemm_mixed_gpu, .cast_half = cast_half_gpu,
	DEV_TWINS(gpu),
};
#else
/* gpu_count() says 0 and model_create() refuses the GPU: never used */
const struct dev dev_gpu = { .gpu = 1 };
#endif
