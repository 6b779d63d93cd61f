/*
 * math-dl.h - the few libm functions of dtctl's sweep code (the report's SVG
 * axes and colours, the sweep file's log-scale bounds), loaded with dlopen() on
 * first use instead of linked.
 *
 * Why: dtctl is exec'd once per command, and mapping libm.so.6 cost every one of
 * them ~0.06 ms of CPU (10 page faults, ~8 % of `dtctl --version`; bench/bench_start.py,
 * docs/BENCHMARKS.md "client start") though only `sweep report` and the sweep file's
 * checks use it.
 * tests/e2e/test_client_start.py checks that dtctl needs libc.so.6 alone.
 *
 * How (as ssh-dl.h): a file includes this header after <math.h> and all others;
 * each function below becomes a call through dt_libm()'s table, typed from libm's
 * own declaration, so the call sites stay as written.  dt_libm() loads libm once
 * (thread-safe) and dies naming it if it cannot.  Programs that link libm anyway
 * (dtsched, dtagent) get the copy already loaded.
 */
#ifndef DT_MATH_DL_H
#define DT_MATH_DL_H

#include <math.h>

#define DT_LIBM_FUNCS(X) X(exp) X(fmax) X(fmin) X(log10) X(lround) X(pow) X(round)

#define DT_LIBM_FIELD(f) __typeof__(f) *f##_fn;
struct dt_libm {
	DT_LIBM_FUNCS(DT_LIBM_FIELD)
};
#undef DT_LIBM_FIELD

/* the loaded table; dies if libm cannot be loaded */
const struct dt_libm *dt_libm(void);

#ifndef DT_MATH_DL_IMPL
#define exp(...) (dt_libm()->exp_fn(__VA_ARGS__))
#define fmax(...) (dt_libm()->fmax_fn(__VA_ARGS__))
#define fmin(...) (dt_libm()->fmin_fn(__VA_ARGS__))
#define log10(...) (dt_libm()->log10_fn(__VA_ARGS__))
#define lround(...) (dt_libm()->lround_fn(__VA_ARGS__))
#define pow(...) (dt_libm()->pow_fn(__VA_ARGS__))
#define round(...) (dt_libm()->round_fn(__VA_ARGS__))
#endif

#endif
