/*
 * softmax_xent.c - the fused softmax + cross-entropy + gradient
 * (softmax_xent_gpu, one warp per row) against its CPU twin, out of place and
 * in place (dlogits == logits, which kernels.h allows), then timed over
 * class counts from an MNIST head to a vocabulary.
 */
#include "bench/cuda/common.h"
#include "trainer/gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct run {
	float *dlogits, *logits;
	int *labels, n, c;
};

static void xent(void *ctx)
{
	struct run *r = ctx;

	softmax_xent_gpu(r->dlogits, r->logits, r->labels, r->n, r->c, 1.0f / r->n, NULL);
}

static int *labels_for(int n, int c)
{
	int *y = malloc((size_t)n * sizeof(int));

	for (int i = 0; i < n; i++)
		y[i] = (int)(((long long)i * 7919) % c);
	return y;
}

static void check(int n, int c)
{
	size_t total = (size_t)n * c;
	float *x = bench_rand(total, 4, 3), *dc = malloc(total * sizeof(float));
	int *y = labels_for(n, c), cc, gc;
	struct run r = { gpu_malloc(total * 4), bench_up(x, total * 4), bench_up(y, n * sizeof(int)),
			 n, c };
	double lc = softmax_xent_cpu(dc, x, y, n, c, 1.0f / n, &cc), lg;
	float lcf = (float)lc, lgf;

	lg = softmax_xent_gpu(r.dlogits, r.logits, r.labels, n, c, 1.0f / n, &gc);
	lgf = (float)lg;
	bench_validate("loss", &lgf, &lcf, 1, 0, 1e-4);
	if (gc != cc)
		bench_validate("correct count", &(float){ (float)gc }, &(float){ (float)cc }, 1, 0, 0);
	bench_validate_dev("gradient", r.dlogits, dc, total, 1e-7, 1e-4);
	lg = softmax_xent_gpu(r.logits, r.logits, r.labels, n, c, 1.0f / n, &gc);
	lgf = (float)lg;
	bench_validate("loss in place", &lgf, &lcf, 1, 0, 1e-4);
	bench_validate_dev("gradient in place", r.logits, dc, total, 1e-7, 1e-4);
	free(x);
	free(dc);
	free(y);
	gpu_free(r.dlogits);
	gpu_free(r.logits);
	gpu_free(r.labels);
}

static void timing(int n, int c)
{
	size_t total = (size_t)n * c;
	int *y = labels_for(n, c);
	struct run r = { gpu_malloc(total * 4), gpu_malloc(total * 4), bench_up(y, n * sizeof(int)),
			 n, c };
	char what[64];

	gpu_memset0(r.logits, total * 4);
	snprintf(what, sizeof(what), "softmax_xent %dx%d", n, c);
	/* logits read three times (max, sum, gradient), gradient written once */
	bench_report(what, bench_time_ms(xent, &r, 20), 4.0 * total * 4, 0);
	free(y);
	gpu_free(r.dlogits);
	gpu_free(r.logits);
	gpu_free(r.labels);
}

int main(void)
{
	static const int sizes[][2] = { { 4096, 10 }, { 4096, 1000 }, { 1024, 50257 } };

	bench_init("softmax_xent");
	check(257, 10);
	check(64, 1000);
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		timing(sizes[s][0], sizes[s][1]);
	return bench_finish();
}
