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
 *
 * Pipeline parallelism (--pipeline P): comm_split() groups the world into
 * replicas of P consecutive ranks, rank = replica * P + stage.  Gradient
 * buckets are then all-reduced within the data-parallel group of a stage (the
 * same stage of every replica: an MPI communicator split, or ncclCommSplit);
 * comm_send()/comm_recv() move activations and their gradients between
 * neighbouring stages (MPI point-to-point on host memory, staged through the
 * host for a GPU without NCCL; ncclSend/ncclRecv with NCCL).  comm_sum() and
 * comm_any() stay world-wide.
 *
 * --sync async rounds are paced by rank 0 (comm_round_*): it tells the others
 * when it has done its local steps; they test for that message after each of
 * theirs.  That needs MPI (comm_can_pace); without it every rank counts its
 * own steps.
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
	/* pipeline (comm_split): stage of replica; world = pipe_stages * replicas */
	int pipe_stage, pipe_stages, replica, replicas;
	void *dp;                    /* MPI_Comm * of the stage's data-parallel group, or NULL: world */
	void *nccl_dp;               /* ncclComm_t of the same group, or NULL: nccl */
	/* pipeline sends in flight (MPI: request + host copy each) */
	void *sends;
	int nr_sends, alloc_sends;
	/* async rounds: rank 0's end-of-round message in flight */
	void *round_req;             /* MPI_Request * */
	long long round_msg;
};

/* Find out how we were started; 0, or -1 with err (exit DT_EXIT_USAGE). */
int comm_startup(struct comm *c, int *argc, char ***argv, struct strbuf *err);
/* Pick and initialise the collective library; 0, or -1 with err. */
int comm_setup(struct comm *c, enum backend b, int on_gpu, int timeout_s, struct strbuf *err);
const char *comm_name(const struct comm *c);

void comm_bucket_start(struct comm *c, float *buf, size_t n);
void comm_wait(struct comm *c);
/* Let the buckets and pipeline sends in flight progress (MPI has no progress
 * thread: a large message moves only while its sender is inside MPI); never blocks. */
void comm_progress(struct comm *c);
/* Blocking sum of n host doubles across ranks. */
void comm_sum(struct comm *c, double *v, int n);
/* Every rank must call: 1 if any rank passed a nonzero flag. */
int comm_any(struct comm *c, int flag);

/*
 * Group the ranks into world / stages replicas of `stages` pipeline stages
 * (rank = replica * stages + stage) and make the data-parallel group of each
 * stage.  Every rank calls it, after comm_setup(); 0, or -1 with err when the
 * world is not a multiple of stages.
 */
int comm_split(struct comm *c, int stages, struct strbuf *err);
/*
 * Point-to-point of n floats (device memory on a GPU) with world rank `peer`;
 * n == 0 sends nothing (both sides know the count).  comm_recv() blocks;
 * comm_send() returns once buf may be reused: MPI sends a copy in the
 * background (so a schedule whose neighbours both send first, as 1F1B's, does
 * not deadlock) and comm_p2p_flush() completes them; NCCL's send is waited for
 * (GPipe only).
 */
void comm_send(struct comm *c, const float *buf, size_t n, int peer);
void comm_recv(struct comm *c, float *buf, size_t n, int peer);
void comm_p2p_flush(struct comm *c);

/* Async rounds paced by rank 0 (needs MPI and several ranks). */
int comm_can_pace(const struct comm *c);
/* Rank 0: the round ended at `step`; tells every other rank. */
void comm_round_end(struct comm *c, long long step);
/* Other ranks: 1 when rank 0 ended the round (its step in *step); with block
 * set, waits for it.  The first call of a round posts the receive. */
int comm_round_test(struct comm *c, long long *step, int block);

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
