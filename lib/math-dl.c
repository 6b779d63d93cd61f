/*
 * math-dl.c - load libm on first use (see math-dl.h).
 */
#define DT_MATH_DL_IMPL
#include "math-dl.h"
#include "usage.h"

#include <dlfcn.h>
#include <gnu/lib-names.h>
#include <pthread.h>
#include <stdio.h>

static struct dt_libm lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static char lib_err[256];                   /* dlerror() of the failed load, or "" */

static void lib_load(void)
{
	void *h = dlopen(LIBM_SO, RTLD_NOW | RTLD_LOCAL);

#define LOAD(f) \
	if (!(lib.f##_fn = h ? (__typeof__(f) *)dlsym(h, #f) : NULL) && !lib_err[0]) \
		snprintf(lib_err, sizeof(lib_err), "%s", dlerror());
	DT_LIBM_FUNCS(LOAD)
#undef LOAD
}

const struct dt_libm *dt_libm(void)
{
	pthread_once(&lib_once, lib_load);
	if (lib_err[0])
		die("cannot load the C math library (%s); reinstall libc6", lib_err);
	return &lib;
}
