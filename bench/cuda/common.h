/*
 * common.h - the harness of the CUDA kernel micro-benchmarks (every .c file in bench/cuda),
 * in the manner of llm.c's dev/cuda: each program takes one kernel of
 * trainer/kernels.cu, runs its CPU twin from trainer/kernels_cpu.c on the same
 * input, validates the GPU result against it, then times the GPU kernel at a
 * few sizes (CUDA events on the trainer's compute stream) and prints time,
 * memory bandwidth and, for GEMMs, FLOP/s.  An OK/FAILED footer ends the run
 * (exit 0/1), as in nccl-tests.
 *
 * Without a usable GPU a program says so and exits 0 (skipped), or 1 under
 * DT_REQUIRE_GPU; a CUDA error other than "no device" is always a failure.
 * Built by mk/bench-kernels.mk only when nvcc is found.
 */
#ifndef DT_BENCH_CUDA_COMMON_H
#define DT_BENCH_CUDA_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Pick GPU 0 and print the device; exits when there is none (see above). */
void bench_init(const char *name);
/* n normal floats times scale, seeded: host memory, free() it. */
float *bench_rand(size_t n, uint64_t seed, float scale);
/* Device copy of host memory; host copy of n device floats (free() it). */
void *bench_up(const void *host, size_t bytes);
float *bench_down(const float *dev, size_t n);
/* Compare GPU and CPU results elementwise; prints the worst difference and
 * counts a failure when one is over atol + rtol |cpu|.  0 ok, -1 not. */
int bench_validate(const char *what, const float *gpu, const float *cpu, size_t n, double atol,
		   double rtol);
/* The same for n floats in device memory (copied back, compared, freed). */
int bench_validate_dev(const char *what, const float *dev, const float *cpu, size_t n, double atol,
		       double rtol);
/* Mean time of fn(ctx) in ms over iters runs after a few warm-up runs. */
double bench_time_ms(void (*fn)(void *ctx), void *ctx, int iters);
/* One result line: time, bytes moved (GB/s) and flops (TFLOP/s) if not 0. */
void bench_report(const char *what, double ms, double bytes, double flops);
/* The OK/FAILED footer; the exit code. */
int bench_finish(void);

#endif
