/*
 * gpu_stub.c - gpu.h for builds without CUDA: no devices, nothing to run;
 * and gpu_required(), the same in every build.
 *
 * Only gpu_count() is reachable (it says 0, so the trainer stays on the CPU);
 * the rest exist so the one training loop and comm.c link in every build.
 * The kernels have no stubs: dev.c's dev_gpu is empty without CUDA.
 */
#include "trainer/gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Here rather than in kernels.cu: the answer must not depend on the build. */
int gpu_required(void)
{
	const char *v = getenv("DT_REQUIRE_GPU");

	return v && *v && strcmp(v, "0");
}

#ifndef DT_HAVE_CUDA

int gpu_count(char *err, size_t errlen)
{
	return 0;
}

int gpu_init(int dev, char *err, size_t errlen)
{
	snprintf(err, errlen, "this dttrain was built without CUDA");
	return -1;
}

__attribute__((__noreturn__)) static void unreachable(const char *fn)
{
	fprintf(stderr, "dttrain: BUG: %s called in a build without CUDA\n", fn);
	abort();
}

void gpu_shutdown(void) {}
void *gpu_stream(void) { return NULL; }
void gpu_sync(void) {}
void *gpu_malloc(size_t bytes) { unreachable(__func__); }
void gpu_free(void *p) { (void)p; }
void gpu_h2d(void *dst, const void *src, size_t bytes) { unreachable(__func__); }
void gpu_d2h(void *dst, const void *src, size_t bytes) { unreachable(__func__); }
void gpu_memset0(void *p, size_t bytes) { unreachable(__func__); }
#endif
