/*
 * check.h - cudaCheck / cublasCheck / ncclCheck / mpiCheck.
 *
 * A failed CUDA, cuBLAS, NCCL or MPI call cannot be recovered from inside a
 * data-parallel job: the peers would wait for us in the next collective.  So
 * these macros print rank, host, file:line, the library's message and a hint,
 * then bring the WHOLE job down (MPI_Abort, or ncclCommAbort + exit) through
 * dt_fatal().  This is the one place in trainer/ core that exits, on purpose.
 * Usable from C and CUDA C++.
 */
#ifndef DT_TRAINER_CHECK_H
#define DT_TRAINER_CHECK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Print "rank R on HOST: FILE:LINE: what: detail" and the hint, abort the job. */
__attribute__((__noreturn__)) void dt_fatal(const char *file, int line, const char *what, const char *detail,
			const char *hint);

#define DT_HINT_NCCL "set NCCL_DEBUG=INFO for details; check NCCL_SOCKET_IFNAME names an " \
	"interface every node shares (ip -br addr) and that nodes reach each other"
#define DT_HINT_CUDA "check the GPU with nvidia-smi and that CUDA_VISIBLE_DEVICES matches the ranks"
#define DT_HINT_MPI "check that every node runs the same dttrain and Open MPI, and " \
	"--mca btl_tcp_if_include for the network"

#if defined(DT_HAVE_MPI) && !defined(__CUDACC__)
#include <mpi.h>
void dt_mpi_fatal(int err, const char *file, int line);
#define mpiCheck(call) do { \
		int dt_e_ = (call); \
		if (dt_e_ != MPI_SUCCESS) \
			dt_mpi_fatal(dt_e_, __FILE__, __LINE__); \
	} while (0)
#endif

#ifdef DT_HAVE_CUDA
#include <cuda_runtime.h>
#define cudaCheck(call) do { \
		cudaError_t dt_e_ = (call); \
		if (dt_e_ != cudaSuccess) \
			dt_fatal(__FILE__, __LINE__, "cuda", cudaGetErrorString(dt_e_), DT_HINT_CUDA); \
	} while (0)
#endif

#if defined(DT_HAVE_NCCL) && !defined(__CUDACC__)
#include <nccl.h>
#define ncclCheck(call) do { \
		ncclResult_t dt_e_ = (call); \
		if (dt_e_ != ncclSuccess && dt_e_ != ncclInProgress) \
			dt_fatal(__FILE__, __LINE__, "nccl", ncclGetErrorString(dt_e_), DT_HINT_NCCL); \
	} while (0)
#endif

#ifdef __cplusplus
}
#endif

#endif
