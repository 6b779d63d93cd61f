/*
 * comm.h - start-up and gradient communication across ranks.
 *
 * Two ways to be started, one code path after:
 *
 *   under mpirun      MPI_Init; rank and size from MPI, local rank from
 *                     OMPI_COMM_WORLD_LOCAL_RANK (or a shared-memory split)
 *   under an agent    torchrun-style env: RANK, WORLD_SIZE, LOCAL_RANK,
 *                     MASTER_ADDR, MASTER_PORT; no MPI at all
 *   neither           one rank
 *
 * Then comm_setup() picks the collective library once the device is known:
 * NCCL on GPUs (the unique id is broadcast with MPI_Bcast, or through the TCP
 * rendezvous at MASTER_ADDR:MASTER_PORT), MPI on CPUs.  Several CPU ranks
 * need MPI; without mpirun comm_setup() fails with DT_EXIT_USAGE.
 *
 * Gradient buckets: comm_bucket_start() starts a sum all-reduce of one
 * bucket in place (MPI_Iallreduce, or ncclAllReduce on a separate stream
 * that waits for the compute stream), comm_wait() completes all of them.
 * Buffers hold pre-scaled gradients (each rank multiplies by 1/global batch),
 * so a sum is the mean.
 */
#ifndef DT_TRAINER_COMM_H
#define DT_TRAINER_COMM_H

#include <stddef.h>
#include "strbuf.h"
#include "trainer/config.h"

enum comm_kind { COMM_SINGLE, COMM_MPI, COMM_NCCL };

struct comm {
	enum comm_kind kind;
	int rank, world, local_rank, local_world;
	int have_mpi;                /* MPI_Init was called */
	int launched_by;             /* 0 alone, 1 mpirun, 2 torchrun-style env */
	char host[256];
	int on_gpu;
	int timeout_s;               /* NCCL: abort a collective stuck this long */
	/* MPI requests of the buckets in flight */
	void *reqs;
	int nr_reqs, alloc_reqs;
	/* GPU with MPI: host staging buffer */
	float *stage;
	size_t stage_len;
	/* NCCL */
	void *nccl;                  /* ncclComm_t */
	void *stream;                /* cudaStream_t of the collectives */
	void *done;                  /* cudaEvent_t recorded after the last bucket */
	double *dev_scratch;
};

/* Find out how we were started; 0, or -1 with err (exit DT_EXIT_USAGE). */
int comm_startup(struct comm *c, int *argc, char ***argv, struct strbuf *err);
/* Pick and initialise the collective library; 0, or -1 with err. */
int comm_setup(struct comm *c, enum backend b, int on_gpu, int timeout_s, struct strbuf *err);
const char *comm_name(const struct comm *c);

void comm_bucket_start(struct comm *c, float *buf, size_t n);
void comm_wait(struct comm *c);
/* Blocking sum of n host doubles across ranks. */
void comm_sum(struct comm *c, double *v, int n);
/* Every rank must call: 1 if any rank passed a nonzero flag. */
int comm_any(struct comm *c, int flag);

/* Bring down every rank (MPI_Abort / ncclCommAbort), exit `code`. */
__attribute__((__noreturn__)) void comm_abort(struct comm *c, int code);
/* Orderly end: ncclCommDestroy, MPI_Finalize. */
void comm_finish(struct comm *c);

/*
 * TCP rendezvous: rank 0 listens on port (dual-stack, or IPv4 where the
 * kernel has no IPv6) and hands `len` bytes to world-1 peers of the same
 * `job` (DT_JOB_ID; a peer of another job is refused and told whose port it
 * reached).  Everything, connects included, ends within timeout_ms; rank 0's
 * error names the ranks that never came.  0, or -1 with err.
 */
int rendezvous_bcast(const char *addr, int port, const char *job, int rank, int world, void *blob,
		     size_t len, int timeout_ms, struct strbuf *err);

/*
 * An operation that completes in the background (a non-blocking NCCL
 * communicator's init or finalize, a collective), waited for with a deadline.
 * poll() says 1 done, 0 not yet, -1 failed (with err); abort() releases what
 * the operation holds when it failed or ran out of time.
 */
struct pending_op {
	const char *what;            /* "NCCL init of 8 ranks", for the message */
	int (*poll)(void *ctx, struct strbuf *err);
	void (*abort)(void *ctx);
	void *ctx;
};

/*
 * Poll op until done; timeout_ms <= 0 waits for ever.  0 when done; -1 with
 * err (and op->abort called once) when it failed or did not finish in time.
 */
int comm_wait_op(const struct pending_op *op, int timeout_ms, struct strbuf *err);

#endif
