/*
 * bias_act.c - bias + activation forward (bias_act_forward_gpu) and the
 * activation backward (act_backward_gpu) against their CPU twins, then timed:
 * memory-bound, so GB/s against the card's bandwidth is the figure to read.
 */
#include "bench/cuda/common.h"
#include "trainer/gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct run {
	float *y, *pre, *bias, *dy;
	int n, d;
	enum act_kind act;
};

static void forward(void *ctx)
{
	struct run *r = ctx;

	bias_act_forward_gpu(r->y, r->pre, r->bias, r->n, r->d, r->act);
}

static void backward(void *ctx)
{
	struct run *r = ctx;

	act_backward_gpu(r->dy, r->act == ACT_GELU ? r->pre : r->y, (size_t)r->n * r->d, r->act);
}

static void check(int n, int d, enum act_kind act, const char *name)
{
	size_t total = (size_t)n * d;
	float *y = bench_rand(total, 1, 2), *bias = bench_rand(d, 2, 1), *dy = bench_rand(total, 3, 1);
	float *pre = malloc(total * sizeof(float));
	struct run r = { bench_up(y, total * 4), gpu_malloc(total * 4), bench_up(bias, d * 4),
			 bench_up(dy, total * 4), n, d, act };
	char what[64];

	bias_act_forward_cpu(y, pre, bias, n, d, act);
	forward(&r);
	snprintf(what, sizeof(what), "forward %s y", name);
	bench_validate_dev(what, r.y, y, total, 1e-6, 1e-5);
	snprintf(what, sizeof(what), "forward %s pre", name);
	bench_validate_dev(what, r.pre, pre, total, 1e-6, 1e-6);
	act_backward_cpu(dy, act == ACT_GELU ? pre : y, total, act);
	backward(&r);
	snprintf(what, sizeof(what), "backward %s", name);
	bench_validate_dev(what, r.dy, dy, total, 1e-6, 1e-5);
	free(y);
	free(bias);
	free(dy);
	free(pre);
	gpu_free(r.y);
	gpu_free(r.pre);
	gpu_free(r.bias);
	gpu_free(r.dy);
}

static void timing(int n, int d, enum act_kind act, const char *name)
{
	size_t total = (size_t)n * d;
	struct run r = { gpu_malloc(total * 4), gpu_malloc(total * 4), gpu_malloc(d * 4),
			 gpu_malloc(total * 4), n, d, act };
	char what[96];

	gpu_memset0(r.y, total * 4);
	gpu_memset0(r.bias, d * 4);
	gpu_memset0(r.dy, total * 4);
	snprintf(what, sizeof(what), "forward  %s %dx%d", name, n, d);
	/* read y, bias; write y, pre */
	bench_report(what, bench_time_ms(forward, &r, 50), 3.0 * total * 4, 0);
	snprintf(what, sizeof(what), "backward %s %dx%d", name, n, d);
	/* read dy, saved; write dy */
	bench_report(what, bench_time_ms(backward, &r, 50), 3.0 * total * 4, 0);
	gpu_free(r.y);
	gpu_free(r.pre);
	gpu_free(r.bias);
	gpu_free(r.dy);
}

int main(void)
{
	static const char *const names[] = { "none", "relu", "gelu" };
	static const int sizes[][2] = { { 256, 1024 }, { 1024, 4096 }, { 8192, 4096 } };

	bench_init("bias_act");
	for (int act = ACT_NONE; act <= ACT_GELU; act++)
		check(333, 700, (enum act_kind)act, names[act]);
	for (int act = ACT_NONE; act <= ACT_GELU; act++)
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
			timing(sizes[s][0], sizes[s][1], (enum act_kind)act, names[act]);
	return bench_finish();
}
