/*
 * optimizer.c - the SGD and AdamW updates (sgd_update_gpu, adamw_update_gpu)
 * against their CPU twins, then timed at model sizes: pure streaming, so
 * GB/s is the figure (AdamW reads p, g, m, v and writes p, m, v).
 */
#include "bench/cuda/common.h"
#include "trainer/gpu.h"

#include <stdio.h>
#include <stdlib.h>

struct run {
	float *p, *g, *m, *v;
	size_t n;
};

static void sgd(void *ctx)
{
	struct run *r = ctx;

	sgd_update_gpu(r->p, r->g, r->m, r->n, 1e-3f, 0.9f, 0.01f);
}

static void adamw(void *ctx)
{
	struct run *r = ctx;

	adamw_update_gpu(r->p, r->g, r->m, r->v, r->n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 10);
}

static void check(size_t n)
{
	float *p = bench_rand(n, 5, 1), *g = bench_rand(n, 6, 1), *m = bench_rand(n, 7, 0.1f);
	float *v = bench_rand(n, 8, 0.1f);
	struct run r;

	for (size_t i = 0; i < n; i++)
		v[i] = v[i] < 0 ? -v[i] : v[i];
	r = (struct run){ bench_up(p, n * 4), bench_up(g, n * 4), bench_up(m, n * 4),
			  bench_up(v, n * 4), n };
	sgd_update_cpu(p, g, m, n, 1e-3f, 0.9f, 0.01f);
	sgd(&r);
	bench_validate_dev("sgd p", r.p, p, n, 1e-6, 1e-6);
	adamw_update_cpu(p, g, m, v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 10);
	adamw(&r);
	bench_validate_dev("adamw p", r.p, p, n, 1e-6, 1e-5);
	bench_validate_dev("adamw v", r.v, v, n, 1e-9, 1e-5);
	free(p);
	free(g);
	free(m);
	free(v);
	gpu_free(r.p);
	gpu_free(r.g);
	gpu_free(r.m);
	gpu_free(r.v);
}

static void timing(size_t n)
{
	struct run r = { gpu_malloc(n * 4), gpu_malloc(n * 4), gpu_malloc(n * 4), gpu_malloc(n * 4),
			 n };
	char what[64];

	gpu_memset0(r.p, n * 4);
	gpu_memset0(r.g, n * 4);
	gpu_memset0(r.m, n * 4);
	gpu_memset0(r.v, n * 4);
	snprintf(what, sizeof(what), "sgd   %zu params", n);
	bench_report(what, bench_time_ms(sgd, &r, 20), 5.0 * n * 4, 0);
	snprintf(what, sizeof(what), "adamw %zu params", n);
	bench_report(what, bench_time_ms(adamw, &r, 20), 7.0 * n * 4, 0);
	gpu_free(r.p);
	gpu_free(r.g);
	gpu_free(r.m);
	gpu_free(r.v);
}

int main(void)
{
	bench_init("optimizer");
	check(100003);
	timing(1 << 20);
	timing(25 << 20);
	timing(124 << 20);
	return bench_finish();
}
