/*
 * common.c - the harness of the CUDA kernel micro-benchmarks (common.h).
 */
#include "bench/cuda/common.h"
#include "rng.h"
#include "trainer/gpu.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *bench_name;
static int failures;

void bench_init(const char *name)
{
	char err[256];
	struct cudaDeviceProp prop;
	int n = gpu_count(err, sizeof(err));

	bench_name = name;
	if (n < 0) {
		fprintf(stderr, "bench %s: %s\n", name, err);
		exit(1);
	}
	if (n == 0) {
		if (gpu_required()) {
			fprintf(stderr, "bench %s: DT_REQUIRE_GPU is set, but no CUDA device is visible "
				"(nvidia-smi; CUDA_VISIBLE_DEVICES)\n", name);
			exit(1);
		}
		printf("bench %s: no CUDA device visible; skipped\n", name);
		exit(0);
	}
	if (gpu_init(0, err, sizeof(err))) {
		fprintf(stderr, "bench %s: %s\n", name, err);
		exit(1);
	}
	if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
		printf("bench %s on %s (sm_%d%d, %d SMs)\n", name, prop.name, prop.major, prop.minor,
		       prop.multiProcessorCount);
}

float *bench_rand(size_t n, uint64_t seed, float scale)
{
	struct rng r;
	float *x = malloc((n ? n : 1) * sizeof(float));

	if (!x) {
		fprintf(stderr, "bench %s: out of memory for %zu floats\n", bench_name, n);
		exit(1);
	}
	rng_seed(&r, seed);
	for (size_t i = 0; i < n; i++)
		x[i] = scale * rng_normal(&r);
	return x;
}

void *bench_up(const void *host, size_t bytes)
{
	void *d = gpu_malloc(bytes);

	gpu_h2d(d, host, bytes);
	return d;
}

float *bench_down(const float *dev, size_t n)
{
	float *h = malloc((n ? n : 1) * sizeof(float));

	if (!h) {
		fprintf(stderr, "bench %s: out of memory for %zu floats\n", bench_name, n);
		exit(1);
	}
	gpu_d2h(h, dev, n * sizeof(float));
	return h;
}

int bench_validate(const char *what, const float *gpu, const float *cpu, size_t n, double atol,
		   double rtol)
{
	double worst = 0;
	size_t at = 0, bad = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)gpu[i] - cpu[i]);

		if (!(d <= atol + rtol * fabs(cpu[i])))
			bad++;
		if (!(d <= worst)) {
			worst = d;
			at = i;
		}
	}
	printf("  validate %-28s max |gpu - cpu| %.3g at [%zu] (gpu %.9g, cpu %.9g): %s\n", what,
	       worst, at, n ? gpu[at] : 0.0, n ? cpu[at] : 0.0, bad ? "FAILED" : "ok");
	if (!bad)
		return 0;
	printf("  %zu of %zu values differ by more than %g + %g |cpu|\n", bad, n, atol, rtol);
	failures++;
	return -1;
}

int bench_validate_dev(const char *what, const float *dev, const float *cpu, size_t n, double atol,
		       double rtol)
{
	float *host = bench_down(dev, n);
	int ret = bench_validate(what, host, cpu, n, atol, rtol);

	free(host);
	return ret;
}

double bench_time_ms(void (*fn)(void *ctx), void *ctx, int iters)
{
	cudaEvent_t t0, t1;
	float ms = 0;

	for (int i = 0; i < 3; i++)
		fn(ctx);
	cudaEventCreate(&t0);
	cudaEventCreate(&t1);
	cudaEventRecord(t0, (cudaStream_t)gpu_stream());
	for (int i = 0; i < iters; i++)
		fn(ctx);
	cudaEventRecord(t1, (cudaStream_t)gpu_stream());
	cudaEventSynchronize(t1);
	cudaEventElapsedTime(&ms, t0, t1);
	cudaEventDestroy(t0);
	cudaEventDestroy(t1);
	return ms / iters;
}

void bench_report(const char *what, double ms, double bytes, double flops)
{
	printf("  %-40s %9.4f ms", what, ms);
	if (bytes > 0)
		printf("  %8.1f GB/s", bytes / ms / 1e6);
	if (flops > 0)
		printf("  %7.2f TFLOP/s", flops / ms / 1e9);
	printf("\n");
}

int bench_finish(void)
{
	gpu_shutdown();
	printf("bench %s: %s\n", bench_name, failures ? "FAILED" : "OK");
	return failures ? 1 : 0;
}
