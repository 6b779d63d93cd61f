/*
 * gemm.c - the forward GEMM of a linear layer, y = x W^T, through cuBLAS
 * (gemm_gpu in fp32 with TF32 off, gemm_mixed_gpu with bf16/fp16 inputs and
 * fp32 accumulation) against the CPU GEMM, then timed in TFLOP/s.
 */
#include "bench/cuda/common.h"
#include "trainer/gpu.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* y[n,out] = x[n,in] W[out,in]^T, as the MLP's forward. */
struct run {
	int n, in, out, prec;
	float *x, *w, *y;
	uint16_t *x16, *w16;
};

static void forward(void *ctx)
{
	struct run *r = ctx;

	if (r->prec)
		gemm_mixed_gpu(r->prec, 0, 1, r->n, r->out, r->in, 1.0f, r->x16, r->in, r->w16, r->in,
			       0.0f, r->y, r->out);
	else
		gemm_gpu(0, 1, r->n, r->out, r->in, 1.0f, r->x, r->in, r->w, r->in, 0.0f, r->y, r->out);
}

/*
 * The timed layout (forward, NT) on odd sizes against gemm_cpu; 16-bit inputs
 * are compared with the CPU GEMM on the same rounded values.  (Every
 * transpose combination is the GPU twin tests' job: tests/unit/
 * test_trainer_gpu.c.)
 */
static void check(int prec)
{
	static const char *const what[] = { "gemm fp32 NT", "gemm bf16 NT", "gemm fp16 NT" };
	enum { M = 67, N = 45, K = 93 };
	float *a = bench_rand(M * K, 12, 1), *b = bench_rand(N * K, 13, 1), *c = bench_rand(M * N, 0, 0);
	uint16_t a16[M * K], b16[N * K];
	struct run r = { M, K, N, prec, NULL, NULL, gpu_malloc(M * N * 4), NULL, NULL };

	if (prec) {
		void (*cast)(uint16_t *, const float *, size_t) =
			prec == 1 ? cast_to_bf16_cpu : cast_to_fp16_cpu;
		float (*widen)(uint16_t) = prec == 1 ? bf16_to_float : fp16_to_float;

		cast(a16, a, M * K);
		cast(b16, b, N * K);
		for (int i = 0; i < M * K; i++)
			a[i] = widen(a16[i]);
		for (int i = 0; i < N * K; i++)
			b[i] = widen(b16[i]);
		r.x16 = bench_up(a16, sizeof(a16));
		r.w16 = bench_up(b16, sizeof(b16));
	} else {
		r.x = bench_up(a, M * K * 4);
		r.w = bench_up(b, N * K * 4);
	}
	gemm_cpu(0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
	forward(&r);
	bench_validate_dev(what[prec], r.y, c, M * N, prec ? 1e-3 : 1e-4, prec ? 1e-3 : 1e-4);
	free(a);
	free(b);
	free(c);
	gpu_free(prec ? (void *)r.x16 : r.x);
	gpu_free(prec ? (void *)r.w16 : r.w);
	gpu_free(r.y);
}

static void timing(int n, int in, int out, int prec)
{
	static const char *const names[] = { "fp32", "bf16", "fp16" };
	size_t es = prec ? 2 : 4;
	struct run r = { n, in, out, prec, NULL, NULL, gpu_malloc((size_t)n * out * 4), NULL, NULL };
	void *x = gpu_malloc((size_t)n * in * es), *w = gpu_malloc((size_t)out * in * es);
	char what[64];

	gpu_memset0(x, (size_t)n * in * es);
	gpu_memset0(w, (size_t)out * in * es);
	if (prec) {
		r.x16 = x;
		r.w16 = w;
	} else {
		r.x = x;
		r.w = w;
	}
	snprintf(what, sizeof(what), "forward %s %dx%d -> %d", names[prec], n, in, out);
	bench_report(what, bench_time_ms(forward, &r, 20), 0, 2.0 * n * in * out);
	gpu_free(x);
	gpu_free(w);
	gpu_free(r.y);
}

int main(void)
{
	static const int shapes[][3] = { { 512, 784, 1024 }, { 4096, 4096, 4096 }, { 8192, 8192, 8192 } };

	bench_init("gemm");
	for (int prec = 0; prec < 3; prec++)
		check(prec);
	for (int prec = 0; prec < 3; prec++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			timing(shapes[s][0], shapes[s][1], shapes[s][2], prec);
	return bench_finish();
}
