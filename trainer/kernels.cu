/*
 * kernels.cu - the CUDA kernels and device plumbing behind gpu.h.
 *
 * Every kernel here has a CPU twin in kernels_cpu.c with the same name
 * ending in _cpu; tests/unit/test_trainer_gpu.c runs both on the same input
 * and compares.  Conventions follow the twins: row-major, [n, d] activations,
 * [out, in] weights.  GEMMs go to cuBLAS (row-major mapped onto column-major
 * by swapping the operands: C^T = op(B)^T op(A)^T).  Reductions whose result
 * the host needs (loss, norms) write per-block partials that the host sums in
 * double, in a fixed order, so results do not depend on atomics' timing.
 *
 * Everything runs on one compute stream (gpu_stream()); NCCL's stream waits
 * on it (comm.c).  Errors go through cudaCheck/cublasCheck (check.h).
 */
#include "trainer/check.h"
#include "trainer/gpu.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define cublasCheck(call) do { \
		cublasStatus_t dt_s_ = (call); \
		if (dt_s_ != CUBLAS_STATUS_SUCCESS) \
			dt_fatal(__FILE__, __LINE__, "cublas", cublasGetStatusString(dt_s_), DT_HINT_CUDA); \
	} while (0)

static cudaStream_t stream;
static cublasHandle_t blas;
static int initialised;

/* host-side scratch for partial results */
static double *dev_partials, *host_partials;
static int *dev_flags, *host_flags;
static float *dev_rowloss, *host_rowloss;
static size_t rowloss_len;

#define THREADS 256
#define MAX_BLOCKS 1024

static unsigned blocks_for(size_t n)
{
	size_t b = (n + THREADS - 1) / THREADS;

	return (unsigned)(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

/*
 * Only "no device" and "no driver at all" (a CPU node: cudaDriverGetVersion
 * says 0) mean zero GPUs.  Anything else -- a driver older than this CUDA
 * runtime needs, a driver/module mismatch, a GPU fallen off the bus -- is an
 * error to report: taking it for "0 GPUs" trained silently on the CPU and let
 * the GPU tests "pass" by skipping everything.
 */
extern "C" int gpu_count(char *err, size_t errlen)
{
	int n = 0, drv = 0, rt = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e == cudaSuccess)
		return n;
	cudaGetLastError();   /* clear the sticky copy: the caller may go on on the CPU */
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	if (e == cudaErrorNoDevice || (e == cudaErrorInsufficientDriver && drv == 0))
		return 0;
	if (e == cudaErrorInsufficientDriver)
		snprintf(err, errlen, "the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d "
			 "runtime this dttrain was built with (update the driver, or build dttrain "
			 "with an older CUDA toolkit)", drv / 1000, drv % 1000 / 10, rt / 1000,
			 rt % 1000 / 10);
	else
		snprintf(err, errlen, "cannot count the GPUs: %s (%s); check the GPU with nvidia-smi",
			 cudaGetErrorName(e), cudaGetErrorString(e));
	return -1;
}

extern "C" void gpu_shutdown(void);

extern "C" int gpu_init(int dev, char *err, size_t errlen)
{
	cudaError_t e;

	gpu_shutdown();   /* idempotent: a second init starts afresh */
	e = cudaSetDevice(dev);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "cannot use GPU %d: %s", dev, cudaGetErrorString(e));
		return -1;
	}
	cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	cublasCheck(cublasCreate(&blas));
	cublasCheck(cublasSetStream(blas, stream));
	/* plain fp32 for the fp32 path (no TF32), so CPU twins agree */
	cublasCheck(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
	cudaCheck(cudaMalloc(&dev_partials, MAX_BLOCKS * sizeof(double)));
	cudaCheck(cudaMallocHost(&host_partials, MAX_BLOCKS * sizeof(double)));
	cudaCheck(cudaMalloc(&dev_flags, sizeof(int)));
	cudaCheck(cudaMallocHost(&host_flags, sizeof(int)));
	initialised = 1;
	return 0;
}

extern "C" void gpu_shutdown(void)
{
	if (!initialised)
		return;
	cudaStreamSynchronize(stream);
	cublasDestroy(blas);
	cudaFree(dev_partials);
	cudaFreeHost(host_partials);
	cudaFree(dev_flags);
	cudaFreeHost(host_flags);
	if (rowloss_len) {
		cudaFree(dev_rowloss);
		cudaFreeHost(host_rowloss);
		rowloss_len = 0;
	}
	cudaStreamDestroy(stream);
	initialised = 0;
}

extern "C" void *gpu_stream(void)
{
	return stream;
}

extern "C" void gpu_sync(void)
{
	cudaCheck(cudaStreamSynchronize(stream));
}

extern "C" void *gpu_malloc(size_t bytes)
{
	void *p = NULL;

	cudaCheck(cudaMalloc(&p, bytes ? bytes : 1));
	return p;
}

extern "C" void gpu_free(void *p)
{
	if (p)
		cudaCheck(cudaFree(p));
}

extern "C" void gpu_h2d(void *dst, const void *src, size_t bytes)
{
	cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
	cudaCheck(cudaStreamSynchronize(stream));   /* src may be reused right away */
}

extern "C" void gpu_d2h(void *dst, const void *src, size_t bytes)
{
	cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
	cudaCheck(cudaStreamSynchronize(stream));
}

extern "C" void gpu_memset0(void *p, size_t bytes)
{
	cudaCheck(cudaMemsetAsync(p, 0, bytes, stream));
}

/* ------------------------------------------------------------------ GEMM */

extern "C" void gemm_gpu(int trans_a, int trans_b, int m, int n, int k, float alpha,
			 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	cublasCheck(cublasSgemm(blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
				trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a, lda,
				&beta, c, ldc));
}

extern "C" void gemm_mixed_gpu(int prec, int trans_a, int trans_b, int m, int n, int k, float alpha,
			       const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta,
			       float *c, int ldc)
{
	cudaDataType_t t = prec == 1 ? CUDA_R_16BF : CUDA_R_16F;

	cublasCheck(cublasGemmEx(blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
				 trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, t, ldb, a, t,
				 lda, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
				 CUBLAS_GEMM_DEFAULT));
}

/* ------------------------------------------------------- activations */

__device__ static float gelu_dev(float x)
{
	const float k = 0.7978845608028654f;
	float u = k * (x + 0.044715f * x * x * x);

	return 0.5f * x * (1.0f + tanhf(u));
}

__device__ static float gelu_grad_dev(float x)
{
	const float k = 0.7978845608028654f;
	float u = k * (x + 0.044715f * x * x * x);
	float t = tanhf(u);
	float du = k * (1.0f + 3.0f * 0.044715f * x * x);

	return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

__global__ static void bias_act_forward_kernel(float *y, float *pre, const float *bias, size_t total,
					       int d, int act)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = y[i] + bias[i % d];

		if (pre)
			pre[i] = v;
		y[i] = act == ACT_RELU ? (v > 0.0f ? v : 0.0f) : act == ACT_GELU ? gelu_dev(v) : v;
	}
}

extern "C" void bias_act_forward_gpu(float *y, float *pre, const float *bias, int n, int d,
				     enum act_kind act)
{
	size_t total = (size_t)n * d;

	if (!total)
		return;
	bias_act_forward_kernel<<<blocks_for(total), THREADS, 0, stream>>>(y, pre, bias, total, d, act);
	cudaCheck(cudaGetLastError());
}

__global__ static void act_backward_kernel(float *dy, const float *saved, size_t count, int act)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x) {
		if (act == ACT_RELU)
			dy[i] = saved[i] > 0.0f ? dy[i] : 0.0f;
		else
			dy[i] *= gelu_grad_dev(saved[i]);
	}
}

extern "C" void act_backward_gpu(float *dy, const float *saved, size_t count, enum act_kind act)
{
	if (act == ACT_NONE || !count)
		return;
	act_backward_kernel<<<blocks_for(count), THREADS, 0, stream>>>(dy, saved, count, act);
	cudaCheck(cudaGetLastError());
}

/* One thread per column, walking the rows in order (same order as the twin). */
__global__ static void bias_grad_kernel(float *db, const float *dy, int n, int d, float beta)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	float acc = 0.0f;

	if (j >= d)
		return;
	for (int i = 0; i < n; i++)
		acc += dy[(size_t)i * d + j];
	db[j] = (beta == 0.0f ? 0.0f : beta * db[j]) + acc;
}

extern "C" void bias_grad_gpu(float *db, const float *dy, int n, int d, float beta)
{
	bias_grad_kernel<<<(d + THREADS - 1) / THREADS, THREADS, 0, stream>>>(db, dy, n, d, beta);
	cudaCheck(cudaGetLastError());
}

/* ------------------------------------------------------ softmax + loss */

/*
 * One warp per row: max, sum of exp, then the gradient; lane 0 writes the
 * row's loss and whether argmax == label.  dlogits may alias logits
 * (kernels.h allows it): each lane writes only the elements it read, and
 * the one element every lane's loss needs, x[label], is read by all lanes
 * before any write, with a __syncwarp() in between.  Without that, lanes are
 * scheduled independently (Volta and later) and the lane owning the label
 * column could overwrite it before lane 0 read it for the loss.
 */
__global__ static void softmax_xent_kernel(float *dlogits, const float *logits, const int *labels,
					   int n, int c, float grad_scale, float *rowloss, int want_grad)
{
	int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
	const float *x;
	float mx = -INFINITY, sum = 0.0f, xl;
	int am = 0, label;

	if (row >= n)
		return;
	x = logits + (size_t)row * c;
	label = labels[row];
	xl = x[label];
	for (int j = lane; j < c; j += 32)
		if (x[j] > mx) {
			mx = x[j];
			am = j;
		}
	for (int off = 16; off; off /= 2) {
		float omx = __shfl_xor_sync(0xffffffffu, mx, off);
		int oam = __shfl_xor_sync(0xffffffffu, am, off);

		if (omx > mx || (omx == mx && oam < am)) {
			mx = omx;
			am = oam;
		}
	}
	for (int j = lane; j < c; j += 32)
		sum += expf(x[j] - mx);
	for (int off = 16; off; off /= 2)
		sum += __shfl_xor_sync(0xffffffffu, sum, off);
	if (lane == 0) {
		rowloss[2 * row] = logf(sum) - (xl - mx);
		rowloss[2 * row + 1] = am == label ? 1.0f : 0.0f;
	}
	if (!want_grad)
		return;
	__syncwarp();   /* every lane's reads of x are done before any lane writes */
	for (int j = lane; j < c; j += 32) {
		float p = expf(x[j] - mx) / sum;

		dlogits[(size_t)row * c + j] = (p - (j == label ? 1.0f : 0.0f)) * grad_scale;
	}
}

static double xent_launch(float *dlogits, const float *logits, const int *labels, int n, int c,
			  float grad_scale, int *correct, int want_grad)
{
	double loss = 0.0;
	int good = 0, rows_per_block = THREADS / 32;

	if (n <= 0) {
		if (correct)
			*correct = 0;
		return 0.0;
	}
	if ((size_t)n > rowloss_len) {
		if (rowloss_len) {
			cudaCheck(cudaFree(dev_rowloss));
			cudaCheck(cudaFreeHost(host_rowloss));
		}
		cudaCheck(cudaMalloc(&dev_rowloss, 2 * (size_t)n * sizeof(float)));
		cudaCheck(cudaMallocHost(&host_rowloss, 2 * (size_t)n * sizeof(float)));
		rowloss_len = (size_t)n;
	}
	softmax_xent_kernel<<<(n + rows_per_block - 1) / rows_per_block, THREADS, 0, stream>>>(
		dlogits, logits, labels, n, c, grad_scale, dev_rowloss, want_grad);
	cudaCheck(cudaGetLastError());
	cudaCheck(cudaMemcpyAsync(host_rowloss, dev_rowloss, 2 * (size_t)n * sizeof(float),
				  cudaMemcpyDeviceToHost, stream));
	cudaCheck(cudaStreamSynchronize(stream));
	for (int i = 0; i < n; i++) {
		loss += host_rowloss[2 * i];
		good += host_rowloss[2 * i + 1] != 0.0f;
	}
	if (correct)
		*correct = good;
	return loss;
}

extern "C" double softmax_xent_gpu(float *dlogits, const float *logits, const int *labels, int n,
				   int c, float grad_scale, int *correct)
{
	return xent_launch(dlogits, logits, labels, n, c, grad_scale, correct, 1);
}

extern "C" double softmax_xent_eval_gpu(const float *logits, const int *labels, int n, int c,
					int *correct)
{
	return xent_launch(NULL, logits, labels, n, c, 0.0f, correct, 0);
}

/* ------------------------------------------------------------ optimisers */

__global__ static void sgd_kernel(float *p, const float *g, float *mom, size_t n, float lr, float mu,
				  float wd)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float d = g[i] + wd * p[i];

		if (mom) {
			mom[i] = mu * mom[i] + d;
			d = mom[i];
		}
		p[i] -= lr * d;
	}
}

extern "C" void sgd_update_gpu(float *p, const float *g, float *mom, size_t n, float lr, float mu,
			       float wd)
{
	if (!n)
		return;
	sgd_kernel<<<blocks_for(n), THREADS, 0, stream>>>(p, g, mom, n, lr, mu, wd);
	cudaCheck(cudaGetLastError());
}

__global__ static void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float lr,
				    float b1, float b2, float eps, float wd, float c1, float c2)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float mi = b1 * m[i] + (1.0f - b1) * g[i];
		float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];

		m[i] = mi;
		v[i] = vi;
		p[i] -= lr * (wd * p[i] + (mi / c1) / (sqrtf(vi / c2) + eps));
	}
}

extern "C" void adamw_update_gpu(float *p, const float *g, float *m, float *v, size_t n, float lr,
				 float beta1, float beta2, float eps, float wd, long long t)
{
	/* bias corrections computed on the host exactly as the twin does */
	float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);

	if (!n)
		return;
	adamw_kernel<<<blocks_for(n), THREADS, 0, stream>>>(p, g, m, v, n, lr, beta1, beta2, eps, wd,
							     c1, c2);
	cudaCheck(cudaGetLastError());
}

/* ---------------------------------------------------------- reductions */

__global__ static void sumsq_kernel(const float *x, size_t n, double *partials)
{
	__shared__ double s[THREADS];
	double acc = 0.0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		acc += (double)x[i] * x[i];
	s[threadIdx.x] = acc;
	__syncthreads();
	for (int off = THREADS / 2; off; off /= 2) {
		if ((int)threadIdx.x < off)
			s[threadIdx.x] += s[threadIdx.x + off];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		partials[blockIdx.x] = s[0];
}

extern "C" double sumsq_gpu(const float *x, size_t n)
{
	unsigned nb = blocks_for(n);
	double sum = 0.0;

	if (!n)
		return 0.0;
	if (nb > MAX_BLOCKS)
		nb = MAX_BLOCKS;
	sumsq_kernel<<<nb, THREADS, 0, stream>>>(x, n, dev_partials);
	cudaCheck(cudaGetLastError());
	cudaCheck(cudaMemcpyAsync(host_partials, dev_partials, nb * sizeof(double),
				  cudaMemcpyDeviceToHost, stream));
	cudaCheck(cudaStreamSynchronize(stream));
	for (unsigned i = 0; i < nb; i++)
		sum += host_partials[i];
	return sum;
}

__global__ static void scale_kernel(float *x, size_t n, float s)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		x[i] *= s;
}

extern "C" void scale_gpu(float *x, size_t n, float s)
{
	if (!n)
		return;
	scale_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, n, s);
	cudaCheck(cudaGetLastError());
}

__global__ static void finite_kernel(const float *x, size_t n, int *bad)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		if (!isfinite(x[i])) {
			*bad = 1;   /* any writer will do: the flag only goes 0 -> 1 */
			return;
		}
}

extern "C" int all_finite_gpu(const float *x, size_t n)
{
	if (!n)
		return 1;
	cudaCheck(cudaMemsetAsync(dev_flags, 0, sizeof(int), stream));
	finite_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, n, dev_flags);
	cudaCheck(cudaGetLastError());
	cudaCheck(cudaMemcpyAsync(host_flags, dev_flags, sizeof(int), cudaMemcpyDeviceToHost, stream));
	cudaCheck(cudaStreamSynchronize(stream));
	return !*host_flags;
}

/* ----------------------------------------------------------------- casts */

__global__ static void cast_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ static void cast_fp16_kernel(__half *dst, const float *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __float2half_rn(src[i]);
}

extern "C" void cast_half_gpu(int prec, uint16_t *dst, const float *src, size_t n)
{
	if (!n)
		return;
	if (prec == 1)
		cast_bf16_kernel<<<blocks_for(n), THREADS, 0, stream>>>((__nv_bfloat16 *)dst, src, n);
	else
		cast_fp16_kernel<<<blocks_for(n), THREADS, 0, stream>>>((__half *)dst, src, n);
	cudaCheck(cudaGetLastError());
}

/* ---------------------------------------------------------- transformer */

extern "C" void gemm_batched_gpu(int trans_a, int trans_b, int m, int n, int k, float alpha,
				 const float *a, int lda, long long stride_a, const float *b, int ldb,
				 long long stride_b, float beta, float *c, int ldc, long long stride_c,
				 int count)
{
	cublasCheck(cublasSgemmStridedBatched(blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
					      trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
					      b, ldb, stride_b, a, lda, stride_a, &beta, c, ldc,
					      stride_c, count));
}

/* A warp's sum, in every lane. */
__device__ static float warp_sum(float v)
{
	for (int off = 16; off; off /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, off);
	return v;
}

__device__ static float warp_max(float v)
{
	for (int off = 16; off; off /= 2)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
	return v;
}

#define WARPS_PER_BLOCK (THREADS / 32)

static unsigned warp_blocks(long long rows)
{
	return (unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
}

/* One warp per row: mean, variance (two passes over the row), normalise. */
__global__ static void layernorm_kernel(float *out, float *mean, float *rstd, const float *x,
					const float *w, const float *b, int n, int d)
{
	int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
	const float *xr;
	float mu = 0.0f, var = 0.0f, rs;

	if (row >= n)
		return;
	xr = x + (size_t)row * d;
	for (int j = lane; j < d; j += 32)
		mu += xr[j];
	mu = warp_sum(mu) / (float)d;
	for (int j = lane; j < d; j += 32)
		var += (xr[j] - mu) * (xr[j] - mu);
	rs = rsqrtf(warp_sum(var) / (float)d + 1e-5f);
	for (int j = lane; j < d; j += 32)
		out[(size_t)row * d + j] = (xr[j] - mu) * rs * w[j] + b[j];
	if (lane == 0) {
		mean[row] = mu;
		rstd[row] = rs;
	}
}

extern "C" void layernorm_forward_gpu(float *out, float *mean, float *rstd, const float *x,
				      const float *w, const float *b, int n, int d)
{
	if (n <= 0)
		return;
	layernorm_kernel<<<warp_blocks(n), THREADS, 0, stream>>>(out, mean, rstd, x, w, b, n, d);
	cudaCheck(cudaGetLastError());
}

/* dx: one warp per row.  dw, db: one thread per column over the rows in order. */
__global__ static void layernorm_dx_kernel(float *dx, const float *dout, const float *x,
					   const float *w, const float *mean, const float *rstd,
					   int n, int d)
{
	int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
	const float *xr, *dy;
	float mg = 0.0f, mgx = 0.0f, mu, rs;

	if (row >= n)
		return;
	xr = x + (size_t)row * d;
	dy = dout + (size_t)row * d;
	mu = mean[row];
	rs = rstd[row];
	for (int j = lane; j < d; j += 32) {
		float g = dy[j] * w[j];

		mg += g;
		mgx += g * (xr[j] - mu) * rs;
	}
	mg = warp_sum(mg) / (float)d;
	mgx = warp_sum(mgx) / (float)d;
	for (int j = lane; j < d; j += 32)
		dx[(size_t)row * d + j] += rs * (dy[j] * w[j] - mg - (xr[j] - mu) * rs * mgx);
}

__global__ static void layernorm_dw_kernel(float *dw, float *db, const float *dout, const float *x,
					   const float *mean, const float *rstd, int n, int d)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	float aw = 0.0f, ab = 0.0f;

	if (j >= d)
		return;
	for (int i = 0; i < n; i++) {
		float g = dout[(size_t)i * d + j];

		aw += g * (x[(size_t)i * d + j] - mean[i]) * rstd[i];
		ab += g;
	}
	dw[j] += aw;
	db[j] += ab;
}

extern "C" void layernorm_backward_gpu(float *dx, float *dw, float *db, const float *dout,
				       const float *x, const float *w, const float *mean,
				       const float *rstd, int n, int d)
{
	if (n <= 0)
		return;
	layernorm_dx_kernel<<<warp_blocks(n), THREADS, 0, stream>>>(dx, dout, x, w, mean, rstd, n, d);
	cudaCheck(cudaGetLastError());
	layernorm_dw_kernel<<<(d + THREADS - 1) / THREADS, THREADS, 0, stream>>>(dw, db, dout, x, mean,
										  rstd, n, d);
	cudaCheck(cudaGetLastError());
}

/* One warp per row of a [t, t] matrix; row i keeps columns 0..i. */
__global__ static void softmax_causal_kernel(float *att, long long rows, int t)
{
	long long r = blockIdx.x * (long long)WARPS_PER_BLOCK + threadIdx.x / 32;
	int lane = threadIdx.x % 32, i;
	float *row, mx = -INFINITY, sum = 0.0f;

	if (r >= rows)
		return;
	row = att + r * t;
	i = (int)(r % t);
	for (int j = lane; j <= i; j += 32)
		mx = fmaxf(mx, row[j]);
	mx = warp_max(mx);
	for (int j = lane; j <= i; j += 32)
		sum += expf(row[j] - mx);
	sum = warp_sum(sum);
	for (int j = lane; j < t; j += 32)
		row[j] = j <= i ? expf(row[j] - mx) / sum : 0.0f;
}

extern "C" void softmax_causal_gpu(float *att, int count, int t)
{
	long long rows = (long long)count * t;

	if (rows <= 0)
		return;
	softmax_causal_kernel<<<warp_blocks(rows), THREADS, 0, stream>>>(att, rows, t);
	cudaCheck(cudaGetLastError());
}

__global__ static void softmax_causal_backward_kernel(float *datt, const float *att, long long rows,
						      int t)
{
	long long r = blockIdx.x * (long long)WARPS_PER_BLOCK + threadIdx.x / 32;
	int lane = threadIdx.x % 32, i;
	const float *p;
	float *dp, dot = 0.0f;

	if (r >= rows)
		return;
	p = att + r * t;
	dp = datt + r * t;
	i = (int)(r % t);
	for (int j = lane; j <= i; j += 32)
		dot += p[j] * dp[j];
	dot = warp_sum(dot);
	for (int j = lane; j < t; j += 32)
		dp[j] = j <= i ? p[j] * (dp[j] - dot) : 0.0f;
}

extern "C" void softmax_causal_backward_gpu(float *datt, const float *att, int count, int t)
{
	long long rows = (long long)count * t;

	if (rows <= 0)
		return;
	softmax_causal_backward_kernel<<<warp_blocks(rows), THREADS, 0, stream>>>(datt, att, rows, t);
	cudaCheck(cudaGetLastError());
}

__global__ static void embed_kernel(float *out, const float *tok, int ld, const float *wte,
				    const float *wpe, size_t total, int t, int d)
{
	for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
	     e += (size_t)gridDim.x * blockDim.x) {
		size_t row = e / d;
		int j = (int)(e % d), i = (int)(row % t), s = (int)(row / t);
		int id = (int)tok[(size_t)s * ld + i];

		out[e] = wte[(size_t)id * d + j] + wpe[(size_t)i * d + j];
	}
}

extern "C" void embed_forward_gpu(float *out, const float *tok, int ld, const float *wte,
				  const float *wpe, int n, int t, int d)
{
	size_t total = (size_t)n * t * d;

	if (!total)
		return;
	embed_kernel<<<blocks_for(total), THREADS, 0, stream>>>(out, tok, ld, wte, wpe, total, t, d);
	cudaCheck(cudaGetLastError());
}

/*
 * No atomics: dwte has one thread per channel walking every position in
 * order (the twin's order; a token's rows only ever meet in its own
 * thread), dwpe one thread per (position, channel) walking the sequences.
 */
__global__ static void embed_dwte_kernel(float *dwte, const float *dout, const float *tok, int ld,
					 int n, int t, int d)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;

	if (j >= d)
		return;
	for (int s = 0; s < n; s++)
		for (int i = 0; i < t; i++)
			dwte[(size_t)tok[(size_t)s * ld + i] * d + j] +=
				dout[((size_t)s * t + i) * d + j];
}

__global__ static void embed_dwpe_kernel(float *dwpe, const float *dout, int n, int t, int d)
{
	size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
	float acc = 0.0f;

	if (e >= (size_t)t * d)
		return;
	for (int s = 0; s < n; s++)
		acc += dout[(size_t)s * t * d + e];
	dwpe[e] += acc;
}

extern "C" void embed_backward_gpu(float *dwte, float *dwpe, const float *dout, const float *tok,
				   int ld, int n, int t, int d)
{
	size_t td = (size_t)t * d;

	if (n <= 0 || !td)
		return;
	embed_dwte_kernel<<<(d + THREADS - 1) / THREADS, THREADS, 0, stream>>>(dwte, dout, tok, ld, n,
										t, d);
	cudaCheck(cudaGetLastError());
	embed_dwpe_kernel<<<(unsigned)((td + THREADS - 1) / THREADS), THREADS, 0, stream>>>(dwpe, dout,
											    n, t, d);
	cudaCheck(cudaGetLastError());
}

__global__ static void next_tokens_kernel(int *labels, const float *tok, int ld, size_t total, int t)
{
	for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
	     e += (size_t)gridDim.x * blockDim.x)
		labels[e] = (int)tok[(e / t) * ld + e % t + 1];
}

extern "C" void next_tokens_gpu(int *labels, const float *tok, int ld, int n, int t)
{
	size_t total = (size_t)n * t;

	if (!total)
		return;
	next_tokens_kernel<<<blocks_for(total), THREADS, 0, stream>>>(labels, tok, ld, total, t);
	cudaCheck(cudaGetLastError());
}

__global__ static void add_kernel(float *out, const float *a, const float *b, size_t count)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x)
		out[i] = a[i] + b[i];
}

extern "C" void add_gpu(float *out, const float *a, const float *b, size_t count)
{
	if (!count)
		return;
	add_kernel<<<blocks_for(count), THREADS, 0, stream>>>(out, a, b, count);
	cudaCheck(cudaGetLastError());
}
