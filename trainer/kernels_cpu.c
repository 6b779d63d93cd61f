/*
 * kernels_cpu.c - CPU reference kernels (see kernels.h).
 *
 * These are written to be read first and to be fast enough second: the CUDA
 * kernels in kernels.cu are checked against them.  GEMMs go to OpenBLAS when
 * available; the loops here are the memory-bound rest (bias + activation,
 * loss, optimiser), parallelised with OpenMP only above a size where that pays.
 */
#include "trainer/kernels.h"

#include <math.h>
#include <string.h>

#ifdef DT_HAVE_BLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/*
 * The elementwise loops that cost most in a transformer step (GELU and its
 * gradient, the softmax's exp) are built twice: for the baseline (SSE2: the
 * binary is copied to every node) and for x86-64-v3 (AVX2 + FMA), and the
 * loader picks one by the CPU (GCC's target_clones, an ifunc).  Not under
 * the sanitizers, whose start-up runs after ifunc resolvers.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
	!defined(__SANITIZE_ADDRESS__)
#define SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SIMD_CLONES
#endif

/* Below this many elements a loop is not worth waking the thread team. */
#define PAR_MIN 65536

/*
 * With OpenBLAS, its threads do the GEMMs and our loops run on the calling
 * thread alone: an OpenMP team would spin-wait while OpenBLAS's workers spin
 * too, more busy threads than cores (measured: 2 cores, half the speed).
 * The loops are memory-bound anyway.  Without BLAS, OpenMP runs everything.
 */
void kernels_set_threads(int n)
{
	if (n <= 0)
		return;
#ifdef DT_HAVE_BLAS
	openblas_set_num_threads(n);
#ifdef _OPENMP
	omp_set_num_threads(1);
#endif
#else
#ifdef _OPENMP
	omp_set_num_threads(n);
#endif
#endif
}

void gemm_cpu(int trans_a, int trans_b, int m, int n, int k, float alpha,
	      const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
#ifdef DT_HAVE_BLAS
	cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
		    trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
		    beta, c, ldc);
#else
	/* Plain loops; only builds without OpenBLAS use this. */
#pragma omp parallel for if ((long)m * n * k > PAR_MIN)
	for (int i = 0; i < m; i++) {
		for (int j = 0; j < n; j++) {
			float acc = 0.0f;

			for (int p = 0; p < k; p++) {
				float x = trans_a ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
				float y = trans_b ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];

				acc += x * y;
			}
			c[(size_t)i * ldc + j] = alpha * acc +
				(beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j]);
		}
	}
#endif
}

/*
 * tanh for GELU, written so that GCC vectorises the loops that call it (glibc's
 * tanhf is a scalar call, and was 40% of a transformer step): tanh(u) =
 * sign(u) (1 - e) / (1 + e) with e = exp(-2|u|), |u| clamped at 9 (tanh(9) is
 * 1 to float precision).  e^x = 2^k e^r with k = round(x / ln2) (the 1.5 * 2^23
 * trick: the sum's low mantissa bits are k) and e^r from its Taylor series to
 * r^6 (|r| <= ln2 / 2).  No float comparisons: with trapping maths GCC does
 * not if-convert them, so the clamp compares the bits (non-negative floats
 * order as integers).  Absolute error below 2e-7 (test_trainer_gpt.c).
 */
static inline float exp_nonpos(float x)
{
	const float log2e = 1.44269504f, ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-6f;
	const float shift = 12582912.0f;
	float t = x * log2e + shift, kf = t - shift, r, p, scale;
	uint32_t bits;

	r = x - kf * ln2_hi - kf * ln2_lo;
	p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
		r * (1.0f / 720))))));
	memcpy(&bits, &t, sizeof(bits));
	bits = (bits - 0x4b400000u + 127u) << 23;
	memcpy(&scale, &bits, sizeof(scale));
	return p * scale;
}

/* e^x for x <= 0 whatever its size (below -87 it is 0 to float precision). */
static inline float exp_nonpos_clamped(float x)
{
	const uint32_t b87 = 0x42ae0000u;   /* 87.0f */
	float a = fabsf(x);   /* not -x: -(+0) is -0, whose bits compare as huge */
	uint32_t ab;

	memcpy(&ab, &a, sizeof(ab));
	ab = ab < b87 ? ab : b87;
	memcpy(&a, &ab, sizeof(a));
	return exp_nonpos(-a);
}

static inline float tanh_fast(float u)
{
	const uint32_t nine = 0x41100000u;   /* 9.0f */
	float a = fabsf(u), e, t;
	uint32_t ab;

	memcpy(&ab, &a, sizeof(ab));
	ab = ab < nine ? ab : nine;
	memcpy(&a, &ab, sizeof(a));
	e = exp_nonpos(-2.0f * a);
	t = (1.0f - e) / (1.0f + e);
	return copysignf(t, u);
}

/* inline in the loops below (so they vectorise); the _cpu names are for tests */
static inline float gelu(float x)
{
	const float k = 0.7978845608028654f;  /* sqrt(2 / pi) */
	float u = k * (x + 0.044715f * x * x * x);

	return 0.5f * x * (1.0f + tanh_fast(u));
}

static inline float gelu_grad(float x)
{
	const float k = 0.7978845608028654f;
	float u = k * (x + 0.044715f * x * x * x);
	float t = tanh_fast(u);
	float du = k * (1.0f + 3.0f * 0.044715f * x * x);

	return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

float tanh_fast_cpu(float u)
{
	return tanh_fast(u);
}

float gelu_cpu(float x)
{
	return gelu(x);
}

float gelu_grad_cpu(float x)
{
	return gelu_grad(x);
}

/* row = gelu(row + bias), pre = row + bias (when not NULL); branch-free loops, so they vectorise */
SIMD_CLONES static void gelu_row(float *row, float *pre, const float *bias, int d)
{
	for (int j = 0; j < d; j++)
		row[j] += bias[j];
	if (pre)
		memcpy(pre, row, (size_t)d * sizeof(*row));
	for (int j = 0; j < d; j++)
		row[j] = gelu(row[j]);
}

SIMD_CLONES static void gelu_backward_span(float *dy, const float *pre, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dy[i] *= gelu_grad(pre[i]);
}

/*
 * pre gets y + bias for every activation, as kernels.h says and the CUDA twin
 * does: a caller may keep ReLU's pre-activation too (act_backward_cpu only
 * needs its sign, which the output shares).
 */
void bias_act_forward_cpu(float *y, float *pre, const float *bias, int n, int d, enum act_kind act)
{
#pragma omp parallel for if ((long)n * d > PAR_MIN)
	for (int i = 0; i < n; i++) {
		float *row = y + (size_t)i * d;
		float *prow = pre ? pre + (size_t)i * d : NULL;

		/* one loop per activation, so each vectorises (-O3) */
		switch (act) {
		case ACT_NONE:
			for (int j = 0; j < d; j++)
				row[j] += bias[j];
			if (prow)
				memcpy(prow, row, (size_t)d * sizeof(*row));
			break;
		case ACT_RELU:
			for (int j = 0; j < d; j++) {
				float v = row[j] + bias[j];

				if (prow)
					prow[j] = v;
				row[j] = v > 0.0f ? v : 0.0f;
			}
			break;
		case ACT_GELU:
			gelu_row(row, prow, bias, d);
			break;
		}
	}
}

void act_backward_cpu(float *dy, const float *saved, size_t count, enum act_kind act)
{
	if (act == ACT_NONE)
		return;
	if (act == ACT_RELU) {
#pragma omp parallel for if (count > PAR_MIN)
		for (size_t i = 0; i < count; i++)
			dy[i] = saved[i] > 0.0f ? dy[i] : 0.0f;
	} else {
		/* in spans, so OpenMP (without BLAS) still splits the work */
		const size_t span = 4096;

#pragma omp parallel for if (count > PAR_MIN)
		for (size_t i = 0; i < count; i += span)
			gelu_backward_span(dy + i, saved + i, count - i < span ? count - i : span);
	}
}

void bias_grad_cpu(float *db, const float *dy, int n, int d, float beta)
{
	if (beta == 0.0f)
		memset(db, 0, (size_t)d * sizeof(*db));
	else if (beta != 1.0f)
		for (int j = 0; j < d; j++)
			db[j] *= beta;
	for (int i = 0; i < n; i++) {
		const float *row = dy + (size_t)i * d;

		for (int j = 0; j < d; j++)
			db[j] += row[j];
	}
}

static double xent_row(const float *x, int c, int label, float *max_out, float *sum_out, int *argmax)
{
	float mx = x[0], sum = 0.0f;
	int am = 0;

	for (int j = 1; j < c; j++)
		if (x[j] > mx) {
			mx = x[j];
			am = j;
		}
	for (int j = 0; j < c; j++)
		sum += expf(x[j] - mx);
	*max_out = mx;
	*sum_out = sum;
	*argmax = am;
	/* sum >= 1: the max term is exp(0) */
	// cppcheck-suppress invalidFunctionArg
	return (double)logf(sum) - (double)(x[label] - mx);
}

double softmax_xent_cpu(float *dlogits, const float *logits, const int *labels,
			int n, int c, float grad_scale, int *correct)
{
	double loss = 0.0;
	int good = 0;

	for (int i = 0; i < n; i++) {
		const float *x = logits + (size_t)i * c;
		float *dx = dlogits + (size_t)i * c;
		float mx, sum;
		int am;

		loss += xent_row(x, c, labels[i], &mx, &sum, &am);
		good += am == labels[i];
		for (int j = 0; j < c; j++) {
			float p = expf(x[j] - mx) / sum;

			dx[j] = (p - (j == labels[i] ? 1.0f : 0.0f)) * grad_scale;
		}
	}
	if (correct)
		*correct = good;
	return loss;
}

double softmax_xent_eval_cpu(const float *logits, const int *labels, int n, int c, int *correct)
{
	double loss = 0.0;
	int good = 0;

	for (int i = 0; i < n; i++) {
		float mx, sum;
		int am;

		loss += xent_row(logits + (size_t)i * c, c, labels[i], &mx, &sum, &am);
		good += am == labels[i];
	}
	if (correct)
		*correct = good;
	return loss;
}

void sgd_update_cpu(float *p, const float *g, float *mom, size_t n, float lr, float mu, float wd)
{
#pragma omp parallel for if (n > PAR_MIN)
	for (size_t i = 0; i < n; i++) {
		float d = g[i] + wd * p[i];

		if (mom) {
			mom[i] = mu * mom[i] + d;
			d = mom[i];
		}
		p[i] -= lr * d;
	}
}

void adamw_update_cpu(float *p, const float *g, float *m, float *v, size_t n, float lr,
		      float beta1, float beta2, float eps, float wd, long long t)
{
	float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);

#pragma omp parallel for if (n > PAR_MIN)
	for (size_t i = 0; i < n; i++) {
		float mi = beta1 * m[i] + (1.0f - beta1) * g[i];
		float vi = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];

		m[i] = mi;
		v[i] = vi;
		p[i] -= lr * (wd * p[i] + (mi / c1) / (sqrtf(vi / c2) + eps));
	}
}

double sumsq_cpu(const float *x, size_t n)
{
	double s = 0.0;

#pragma omp parallel for reduction(+ : s) if (n > PAR_MIN)
	for (size_t i = 0; i < n; i++)
		s += (double)x[i] * x[i];
	return s;
}

void scale_cpu(float *x, size_t n, float s)
{
#pragma omp parallel for if (n > PAR_MIN)
	for (size_t i = 0; i < n; i++)
		x[i] *= s;
}

int all_finite_cpu(const float *x, size_t n)
{
	int ok = 1;

	for (size_t i = 0; i < n; i++)
		ok &= isfinite(x[i]) != 0;
	return ok;
}

static uint32_t f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float u2f(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

uint16_t float_to_bf16(float f)
{
	uint32_t x = f2u(f);

	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40);
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

float bf16_to_float(uint16_t h)
{
	return u2f((uint32_t)h << 16);
}

uint16_t float_to_fp16(float f)
{
	uint32_t x = f2u(f), ax = x & 0x7fffffffu;
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);

	if (ax >= 0x7f800000u)   /* Inf, NaN */
		return sign | (ax > 0x7f800000u ? 0x7e00 : 0x7c00);
	if (ax >= 0x477ff000u)   /* rounds past 65504 */
		return sign | 0x7c00;
	if (ax < 0x38800000u)    /* below 2^-14: subnormal, units of 2^-24 */
		return sign | (uint16_t)lrintf(u2f(ax) * 16777216.0f);
	ax += 0xfffu + ((ax >> 13) & 1u);
	return sign | (uint16_t)((ax - 0x38000000u) >> 13);
}

float fp16_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;

	if (e == 0) {
		float v = (float)m * (1.0f / 16777216.0f);

		return sign ? -v : v;
	}
	if (e == 31)
		return u2f(sign | 0x7f800000u | (m << 13));
	return u2f(sign | ((e + 112) << 23) | (m << 13));
}

void cast_to_bf16_cpu(uint16_t *dst, const float *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = float_to_bf16(src[i]);
}

void cast_to_fp16_cpu(uint16_t *dst, const float *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = float_to_fp16(src[i]);
}

/* ---------------------------------------------------------- transformer */

void gemm_batched_cpu(int trans_a, int trans_b, int m, int n, int k, float alpha,
		      const float *a, int lda, long long stride_a, const float *b, int ldb,
		      long long stride_b, float beta, float *c, int ldc, long long stride_c,
		      int count)
{
	for (int i = 0; i < count; i++)
		gemm_cpu(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb,
			 beta, c + i * stride_c, ldc);
}

#define LN_EPS 1e-5f

void layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *x, const float *w,
			   const float *b, int n, int d)
{
	for (int i = 0; i < n; i++) {
		const float *row = x + (size_t)i * d;
		float *o = out + (size_t)i * d, mu = 0.0f, var = 0.0f, rs;

		for (int j = 0; j < d; j++)
			mu += row[j];
		mu /= (float)d;
		for (int j = 0; j < d; j++)
			var += (row[j] - mu) * (row[j] - mu);
		rs = 1.0f / sqrtf(var / (float)d + LN_EPS);
		for (int j = 0; j < d; j++)
			o[j] = (row[j] - mu) * rs * w[j] + b[j];
		mean[i] = mu;
		rstd[i] = rs;
	}
}

/*
 * With xhat = (x - mean) rstd and g = dout * w:
 * dx = rstd (g - mean_j(g) - xhat mean_j(g xhat)), dw = sum dout xhat, db = sum dout.
 */
void layernorm_backward_cpu(float *dx, float *dw, float *db, const float *dout, const float *x,
			    const float *w, const float *mean, const float *rstd, int n, int d)
{
	for (int i = 0; i < n; i++) {
		const float *row = x + (size_t)i * d, *dy = dout + (size_t)i * d;
		float *dxr = dx + (size_t)i * d, mg = 0.0f, mgx = 0.0f;

		for (int j = 0; j < d; j++) {
			float xhat = (row[j] - mean[i]) * rstd[i], g = dy[j] * w[j];

			mg += g;
			mgx += g * xhat;
			dw[j] += dy[j] * xhat;
			db[j] += dy[j];
		}
		mg /= (float)d;
		mgx /= (float)d;
		for (int j = 0; j < d; j++) {
			float xhat = (row[j] - mean[i]) * rstd[i];

			dxr[j] += rstd[i] * (dy[j] * w[j] - mg - xhat * mgx);
		}
	}
}

/* row[j] = e^(row[j] - mx), j < n */
SIMD_CLONES static void exp_shifted(float *row, float mx, int n)
{
	for (int j = 0; j < n; j++)
		row[j] = exp_nonpos_clamped(row[j] - mx);
}

/* exp through exp_nonpos_clamped (x - max <= 0), in loops that vectorise */
void softmax_causal_cpu(float *att, int count, int t)
{
	for (long long r = 0; r < (long long)count * t; r++) {
		float *row = att + r * t, mx, sum = 0.0f, inv;
		int i = (int)(r % t);

		mx = row[0];
		for (int j = 1; j <= i; j++)
			mx = row[j] > mx ? row[j] : mx;
		exp_shifted(row, mx, i + 1);
		for (int j = 0; j <= i; j++)
			sum += row[j];
		inv = 1.0f / sum;
		for (int j = 0; j <= i; j++)
			row[j] *= inv;
		for (int j = i + 1; j < t; j++)
			row[j] = 0.0f;
	}
}

void softmax_causal_backward_cpu(float *datt, const float *att, int count, int t)
{
	for (long long r = 0; r < (long long)count * t; r++) {
		const float *p = att + r * t;
		float *dp = datt + r * t, dot = 0.0f;
		int i = (int)(r % t);

		for (int j = 0; j <= i; j++)
			dot += p[j] * dp[j];
		for (int j = 0; j <= i; j++)
			dp[j] = p[j] * (dp[j] - dot);
		for (int j = i + 1; j < t; j++)
			dp[j] = 0.0f;
	}
}

void embed_forward_cpu(float *out, const float *tok, int ld, const float *wte, const float *wpe,
		       int n, int t, int d)
{
	for (int s = 0; s < n; s++)
		for (int i = 0; i < t; i++) {
			const float *e = wte + (size_t)tok[(size_t)s * ld + i] * d, *pe = wpe + (size_t)i * d;
			float *o = out + ((size_t)s * t + i) * d;

			for (int j = 0; j < d; j++)
				o[j] = e[j] + pe[j];
		}
}

void embed_backward_cpu(float *dwte, float *dwpe, const float *dout, const float *tok, int ld,
			int n, int t, int d)
{
	for (int s = 0; s < n; s++)
		for (int i = 0; i < t; i++) {
			float *e = dwte + (size_t)tok[(size_t)s * ld + i] * d, *pe = dwpe + (size_t)i * d;
			const float *g = dout + ((size_t)s * t + i) * d;

			for (int j = 0; j < d; j++) {
				e[j] += g[j];
				pe[j] += g[j];
			}
		}
}

void next_tokens_cpu(int *labels, const float *tok, int ld, int n, int t)
{
	for (int s = 0; s < n; s++)
		for (int i = 0; i < t; i++)
			labels[(size_t)s * t + i] = (int)tok[(size_t)s * ld + i + 1];
}

void add_cpu(float *out, const float *a, const float *b, size_t count)
{
	for (size_t i = 0; i < count; i++)
		out[i] = a[i] + b[i];
}
