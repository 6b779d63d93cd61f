/*
 * comm.c - start-up (mpirun or torchrun-style env), NCCL/MPI gradient
 * all-reduce, and bringing the whole job down on a fatal error.
 */
#include "trainer/comm.h"
#include "log.h"
#include "trainer/check.h"
#include "trainer/gpu.h"
#include "trainer/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* MPI tags of the pipeline's point-to-point messages and of async rounds. */
#define TAG_PIPE 1701
#define TAG_ROUND 1702

/* The job's communicator, for dt_fatal() (set by comm_startup). */
static struct comm *fatal_comm;

static int env_int(const char *name, int def)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return def;
	errno = 0;
	v = strtol(s, &end, 10);
	return errno || *end || v < 0 || v > 1 << 20 ? -1 : (int)v;
}

void dt_fatal(const char *file, int line, const char *what, const char *detail, const char *hint)
{
	struct comm *c = fatal_comm;

	fprintf(stderr, "dttrain: error: rank %d on %s: %s:%d: %s: %s\nhint: %s\n",
		c ? c->rank : 0, c ? c->host : "?", file, line, what, detail, hint);
	fflush(stderr);
	if (c)
		comm_abort(c, DT_EXIT_FAIL);
	exit(DT_EXIT_FAIL);
}

#ifdef DT_HAVE_MPI
void dt_mpi_fatal(int err, const char *file, int line)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	MPI_Error_string(err, msg, &len);
	msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
	dt_fatal(file, line, "mpi", msg, DT_HINT_MPI);
}

/* Where gradient buckets are summed: the stage's data-parallel group. */
static MPI_Comm dp_comm(const struct comm *c)
{
	return c->dp ? *(MPI_Comm *)c->dp : MPI_COMM_WORLD;
}

struct pending_send {
	MPI_Request req;
	float *copy;
};

/* Send a host copy of n floats (device memory on a GPU) in the background. */
static void mpi_send_copy(struct comm *c, const float *buf, size_t n, int peer)
{
	struct pending_send *ps;

	if (c->nr_sends + 1 > c->alloc_sends) {
		c->alloc_sends = c->alloc_sends ? 2 * c->alloc_sends : 16;
		c->sends = xrealloc(c->sends, (size_t)c->alloc_sends * sizeof(*ps));
	}
	ps = (struct pending_send *)c->sends + c->nr_sends++;
	ps->copy = xmalloc(n * sizeof(float));
	if (c->on_gpu)
		gpu_d2h(ps->copy, buf, n * sizeof(float));
	else
		memcpy(ps->copy, buf, n * sizeof(float));
	/* waited for in comm_p2p_flush(): the checker follows one function only */
	mpiCheck(MPI_Isend(ps->copy, (int)n, MPI_FLOAT, peer, TAG_PIPE, MPI_COMM_WORLD,
			   &ps->req)); // NOLINT(clang-analyzer-optin.mpi.MPI-Checker)
}

/* n floats through a host buffer of c's, grown as needed. */
static float *host_stage(struct comm *c, size_t n)
{
	if (c->stage_len < n) {
		free(c->stage);
		c->stage = xmalloc(n * sizeof(float));
		c->stage_len = n;
	}
	return c->stage;
}
#endif

static int launched_by_mpirun(void)
{
	return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

int comm_startup(struct comm *c, int *argc, char ***argv, struct strbuf *err)
{
	memset(c, 0, sizeof(*c));
	c->world = 1;
	c->local_world = 1;
	if (gethostname(c->host, sizeof(c->host) - 1))
		snprintf(c->host, sizeof(c->host), "unknown");
	fatal_comm = c;
	if (launched_by_mpirun()) {
#ifdef DT_HAVE_MPI
		MPI_Init(argc, argv);
		c->have_mpi = 1;
		c->launched_by = 1;
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
		mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
		mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &c->world));
		c->local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", -2);
		c->local_world = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", -2);
		if (c->local_rank < 0 || c->local_world <= 0) {
			MPI_Comm node;

			mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank,
						     MPI_INFO_NULL, &node));
			mpiCheck(MPI_Comm_rank(node, &c->local_rank));
			mpiCheck(MPI_Comm_size(node, &c->local_world));
			MPI_Comm_free(&node);
		}
		return 0;
#else
		strbuf_addstr(err, "started by mpirun, but this dttrain was built without MPI");
		return -1;
#endif
	}
	if (getenv("WORLD_SIZE") || getenv("RANK")) {
		c->launched_by = 2;
		c->rank = env_int("RANK", 0);
		c->world = env_int("WORLD_SIZE", 1);
		c->local_rank = env_int("LOCAL_RANK", c->rank);
		c->local_world = env_int("LOCAL_WORLD_SIZE", c->world);
		if (c->rank < 0 || c->world <= 0 || c->rank >= c->world || c->local_rank < 0 ||
		    c->local_world <= 0) {
			strbuf_addf(err, "bad rank environment: RANK='%s' WORLD_SIZE='%s' LOCAL_RANK='%s'",
				    getenv("RANK") ? getenv("RANK") : "",
				    getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "",
				    getenv("LOCAL_RANK") ? getenv("LOCAL_RANK") : "");
			return -1;
		}
	}
	return 0;
}

const char *comm_name(const struct comm *c)
{
	switch (c->kind) {
	case COMM_MPI: return c->on_gpu ? "mpi (host-staged)" : "mpi";
	case COMM_NCCL: return "nccl";
	default: return "none";
	}
}

/*
 * The one polling loop for everything that completes in the background: a
 * non-blocking NCCL communicator's init and finalize, and the collectives.
 * Polls every 50 us (a bucket's all-reduce is short, latency matters), every
 * 5 ms after the first second (an init of many ranks is not).
 */
int comm_wait_op(const struct pending_op *op, int timeout_ms, struct strbuf *err)
{
	long long start = dt_mono_ms();

	for (;;) {
		long long waited;
		struct timespec nap = { 0, 50000 };
		int r = op->poll(op->ctx, err);

		if (r > 0)
			return 0;
		if (r < 0)
			break;
		waited = dt_mono_ms() - start;
		if (timeout_ms > 0 && waited >= timeout_ms) {
			strbuf_addf(err, "%s did not finish in %.3g s", op->what, timeout_ms / 1000.0);
			break;
		}
		if (waited > 1000)
			nap.tv_nsec = 5000000;
		nanosleep(&nap, NULL);
	}
	if (op->abort)
		op->abort(op->ctx);
	return -1;
}

#ifdef DT_HAVE_NCCL
/* A non-blocking communicator's state: ncclInProgress until init/finalize is done. */
static int nccl_poll(void *ctx, struct strbuf *err)
{
	ncclResult_t r, state = ncclSuccess;

	r = ncclCommGetAsyncError((ncclComm_t)ctx, &state);
	if (r == ncclSuccess && state == ncclInProgress)
		return 0;
	if (r == ncclSuccess && state == ncclSuccess)
		return 1;
	strbuf_addf(err, "nccl: %s", ncclGetErrorString(r != ncclSuccess ? r : state));
	return -1;
}

static void nccl_abort(void *ctx)
{
	ncclCommAbort((ncclComm_t)ctx);
}

/*
 * ncclCommInitRank blocks until every rank joined: one rank that crashed
 * after the id exchange (or never got it) hung all the others for ever.  A
 * non-blocking communicator is polled instead, and aborted at the deadline.
 */
static int nccl_init_bounded(struct comm *c, ncclUniqueId id, struct strbuf *err)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclComm_t nc = NULL;
	ncclResult_t r;
	char what[96];
	struct pending_op op = { what, nccl_poll, nccl_abort, NULL };

	cfg.blocking = 0;
	r = ncclCommInitRankConfig(&nc, c->world, id, c->rank, &cfg);
	if (r != ncclSuccess && r != ncclInProgress) {
		strbuf_addf(err, "rank %d: ncclCommInitRankConfig: %s (%s)", c->rank,
			    ncclGetErrorString(r), DT_HINT_NCCL);
		if (nc)
			ncclCommAbort(nc);
		return -1;
	}
	snprintf(what, sizeof(what), "NCCL init of %d ranks", c->world);
	op.ctx = nc;
	if (comm_wait_op(&op, c->timeout_s * 1000, err)) {
		strbuf_addf(err, " on rank %d (%s): a rank that did not join (crashed, or stuck "
			    "before NCCL init: see the other ranks' logs) or nodes that cannot reach "
			    "each other; %s", c->rank, c->host, DT_HINT_NCCL);
		return -1;
	}
	c->nccl = nc;
	return 0;
}

static int nccl_setup(struct comm *c, struct strbuf *err)
{
	ncclUniqueId id;
	cudaStream_t s;
	cudaEvent_t ev;

	if (c->rank == 0)
		ncclCheck(ncclGetUniqueId(&id));
	if (c->have_mpi) {
#ifdef DT_HAVE_MPI
		mpiCheck(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
#endif
	} else {
		const char *addr = getenv("MASTER_ADDR");
		int port = env_int("MASTER_PORT", -1);

		if (!addr || port <= 0 || port > 65535) {
			strbuf_addstr(err, "several ranks without mpirun need MASTER_ADDR and MASTER_PORT");
			return -1;
		}
		if (rendezvous_bcast(addr, port, getenv("DT_JOB_ID"), c->rank, c->world, &id,
				     sizeof(id), env_int("DT_RENDEZVOUS_TIMEOUT", 120) * 1000, err))
			return -1;
	}
	cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	cudaCheck(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	if (nccl_init_bounded(c, id, err))
		return -1;
	c->stream = s;
	c->done = ev;
	c->dev_scratch = gpu_malloc(16 * sizeof(double));
	return 0;
}

/* The collectives' event, and NCCL's asynchronous error meanwhile. */
static int collective_poll(void *ctx, struct strbuf *err)
{
	struct comm *c = ctx;
	cudaError_t e = cudaEventQuery((cudaEvent_t)c->done);

	if (e == cudaSuccess)
		return 1;
	if (e != cudaErrorNotReady)
		cudaCheck(e);
	return nccl_poll(c->nccl, err) < 0 ? -1 : 0;
}

/*
 * Wait for the collectives stream without trusting it to finish: poll the
 * event and NCCL's asynchronous error state, give up after the timeout.  A
 * peer that died mid-collective would otherwise hang us for ever.
 */
static void nccl_wait(struct comm *c)
{
	struct pending_op op = { "all-reduce", collective_poll, NULL, c };
	struct strbuf err = STRBUF_INIT;

	cudaCheck(cudaEventRecord((cudaEvent_t)c->done, (cudaStream_t)c->stream));
	if (comm_wait_op(&op, c->timeout_s * 1000, &err)) {
		strbuf_addstr(&err, " (a peer died or hangs)");
		dt_fatal(__FILE__, __LINE__, "nccl", err.buf, DT_HINT_NCCL);
	}
	cudaCheck(cudaStreamWaitEvent((cudaStream_t)gpu_stream(), (cudaEvent_t)c->done, 0));
}

/* The stage's data-parallel group: a non-blocking split, polled like init. */
static int nccl_split_dp(struct comm *c, struct strbuf *err)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclComm_t dp = NULL;
	ncclResult_t r;
	struct pending_op op = { "NCCL split into data-parallel groups", nccl_poll, nccl_abort, NULL };

	cfg.blocking = 0;
	r = ncclCommSplit((ncclComm_t)c->nccl, c->pipe_stage, c->replica, &dp, &cfg);
	if (r != ncclSuccess && r != ncclInProgress) {
		strbuf_addf(err, "rank %d: ncclCommSplit: %s (%s)", c->rank, ncclGetErrorString(r),
			    DT_HINT_NCCL);
		return -1;
	}
	op.ctx = dp;
	if (comm_wait_op(&op, c->timeout_s * 1000, err))
		return -1;
	c->nccl_dp = dp;
	return 0;
}

/* ncclSend/ncclRecv after the compute stream's work, waited for (bounded). */
static void nccl_p2p(struct comm *c, float *buf, size_t n, int peer, int send)
{
	cudaCheck(cudaEventRecord((cudaEvent_t)c->done, (cudaStream_t)gpu_stream()));
	cudaCheck(cudaStreamWaitEvent((cudaStream_t)c->stream, (cudaEvent_t)c->done, 0));
	if (send)
		ncclCheck(ncclSend(buf, n, ncclFloat, peer, (ncclComm_t)c->nccl,
				   (cudaStream_t)c->stream));
	else
		ncclCheck(ncclRecv(buf, n, ncclFloat, peer, (ncclComm_t)c->nccl,
				   (cudaStream_t)c->stream));
	nccl_wait(c);
}
#endif

int comm_setup(struct comm *c, enum backend b, int on_gpu, int timeout_s, struct strbuf *err)
{
	c->on_gpu = on_gpu;
	c->timeout_s = timeout_s;
	if (b == BACKEND_NCCL && !on_gpu) {
		strbuf_addstr(err, "--backend nccl needs a GPU (use --backend mpi on CPUs)");
		return -1;
	}
	if (c->world == 1) {
		c->kind = COMM_SINGLE;
		return 0;
	}
	if (on_gpu && b != BACKEND_MPI) {
#ifdef DT_HAVE_NCCL
		c->kind = COMM_NCCL;
		return nccl_setup(c, err);
#else
		if (b == BACKEND_NCCL || !c->have_mpi) {
			strbuf_addstr(err, "this dttrain was built without NCCL");
			return -1;
		}
#endif
	}
	if (!c->have_mpi) {
		strbuf_addf(err, "%d CPU ranks need MPI's collectives: start dttrain with mpirun "
			    "(job.yaml: launcher: mpi), or run one rank", c->world);
		return -1;
	}
	c->kind = COMM_MPI;
	return 0;
}

void comm_bucket_start(struct comm *c, float *buf, size_t n)
{
	switch (c->kind) {
	case COMM_SINGLE:
		return;
	case COMM_MPI:
#ifdef DT_HAVE_MPI
		if (c->on_gpu) {
			/* no CUDA-aware MPI assumed: stage through the host, blocking */
			host_stage(c, n);
			gpu_d2h(c->stage, buf, n * sizeof(float));
			mpiCheck(MPI_Allreduce(MPI_IN_PLACE, c->stage, (int)n, MPI_FLOAT, MPI_SUM,
					       dp_comm(c)));
			gpu_h2d(buf, c->stage, n * sizeof(float));
			return;
		}
		{
			MPI_Request *r;

			if (c->nr_reqs + 1 > c->alloc_reqs) {
				c->alloc_reqs = c->alloc_reqs ? 2 * c->alloc_reqs : 16;
				c->reqs = xrealloc(c->reqs, (size_t)c->alloc_reqs * sizeof(MPI_Request));
			}
			r = (MPI_Request *)c->reqs + c->nr_reqs++;
			mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM,
						dp_comm(c), r));
			/* nudge progress of the earlier buckets (no progress thread) */
			if (c->nr_reqs > 1) {
				int flag;

				mpiCheck(MPI_Testall(c->nr_reqs - 1, c->reqs, &flag, MPI_STATUSES_IGNORE));
			}
		}
#endif
		return;
	case COMM_NCCL:
#ifdef DT_HAVE_NCCL
		/* the collectives stream waits for the bucket's backward on the compute stream */
		cudaCheck(cudaEventRecord((cudaEvent_t)c->done, (cudaStream_t)gpu_stream()));
		cudaCheck(cudaStreamWaitEvent((cudaStream_t)c->stream, (cudaEvent_t)c->done, 0));
		ncclCheck(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum,
					(ncclComm_t)(c->nccl_dp ? c->nccl_dp : c->nccl),
					(cudaStream_t)c->stream));
#endif
		return;
	}
}

static void comm_wait_(struct comm *c);

/* the blocking collectives are counted for hang attribution (progress.h) */
void comm_wait(struct comm *c)
{
	progress_coll_begin(PH_ALLREDUCE);
	comm_wait_(c);
	progress_coll_end();
}

static void comm_wait_(struct comm *c)
{
	switch (c->kind) {
	case COMM_SINGLE:
		return;
	case COMM_MPI:
#ifdef DT_HAVE_MPI
		if (c->nr_reqs)
			mpiCheck(MPI_Waitall(c->nr_reqs, c->reqs, MPI_STATUSES_IGNORE));
		c->nr_reqs = 0;
#endif
		return;
	case COMM_NCCL:
#ifdef DT_HAVE_NCCL
		nccl_wait(c);
#endif
		return;
	}
}

void comm_progress(struct comm *c)
{
#ifdef DT_HAVE_MPI
	struct pending_send *ps = c->sends;
	int flag;

	if (c->kind == COMM_MPI && c->nr_reqs)
		mpiCheck(MPI_Testall(c->nr_reqs, c->reqs, &flag, MPI_STATUSES_IGNORE));
	/* a message above the eager limit moves only while its sender is inside MPI */
	for (int i = 0; i < c->nr_sends; i++)
		mpiCheck(MPI_Test(&ps[i].req, &flag, MPI_STATUS_IGNORE));
#else
	(void)c;
#endif
}

int comm_split(struct comm *c, int stages, struct strbuf *err)
{
	if (stages < 1 || c->world % stages) {
		strbuf_addf(err, "--pipeline %d needs a multiple of %d ranks, got %d", stages, stages,
			    c->world);
		return -1;
	}
	c->pipe_stages = stages;
	c->replicas = c->world / stages;
	c->pipe_stage = c->rank % stages;
	c->replica = c->rank / stages;
	if (stages == 1)
		return 0;
	/* a group of one replica too: without it buckets would be summed world-wide */
	switch (c->kind) {
	case COMM_MPI:
#ifdef DT_HAVE_MPI
		c->dp = xmalloc(sizeof(MPI_Comm));
		mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, c->pipe_stage, c->replica, (MPI_Comm *)c->dp));
#endif
		return 0;
#ifdef DT_HAVE_NCCL
	case COMM_NCCL:
		return nccl_split_dp(c, err);
#endif
	default:
		return 0;
	}
}

/* One point-to-point transfer, either way (see comm_send/comm_recv). */
static void p2p(struct comm *c, float *buf, size_t n, int peer, int send)
{
	if (!n)
		return;
	switch (c->kind) {
	case COMM_SINGLE:
		dt_fatal(__FILE__, __LINE__, "pipeline", "one rank has no peer", "a dttrain bug");
	case COMM_MPI:
#ifdef DT_HAVE_MPI
		if (send) {
			mpi_send_copy(c, buf, n, peer);
		} else {
			float *h = c->on_gpu ? host_stage(c, n) : buf;

			mpiCheck(MPI_Recv(h, (int)n, MPI_FLOAT, peer, TAG_PIPE, MPI_COMM_WORLD,
					  MPI_STATUS_IGNORE));
			if (c->on_gpu)
				gpu_h2d(buf, h, n * sizeof(float));
		}
#endif
		return;
	case COMM_NCCL:
#ifdef DT_HAVE_NCCL
		nccl_p2p(c, buf, n, peer, send);
#endif
		return;
	}
}

void comm_send(struct comm *c, const float *buf, size_t n, int peer)
{
	p2p(c, (float *)buf, n, peer, 1);
} // NOLINT(clang-analyzer-optin.mpi.MPI-Checker): the send is waited for in comm_p2p_flush()

void comm_recv(struct comm *c, float *buf, size_t n, int peer)
{
	progress_coll_begin(PH_RECV);
	p2p(c, buf, n, peer, 0);
	progress_coll_end();
}

void comm_p2p_flush(struct comm *c)
{
#ifdef DT_HAVE_MPI
	struct pending_send *ps = c->sends;

	progress_coll_begin(PH_SEND);
	for (int i = 0; i < c->nr_sends; i++) {
		mpiCheck(MPI_Wait(&ps[i].req, MPI_STATUS_IGNORE)); // NOLINT(clang-analyzer-optin.mpi.MPI-Checker)
		free(ps[i].copy);
	}
	progress_coll_end();
#endif
	c->nr_sends = 0;
}

int comm_can_pace(const struct comm *c)
{
	return c->have_mpi && c->world > 1;
}

void comm_round_end(struct comm *c, long long step)
{
#ifdef DT_HAVE_MPI
	/* eager-sized: returns at once, whatever the others are doing */
	for (int r = 1; r < c->world; r++)
		mpiCheck(MPI_Send(&step, 1, MPI_LONG_LONG, r, TAG_ROUND, MPI_COMM_WORLD));
#else
	(void)c;
	(void)step;
#endif
}

int comm_round_test(struct comm *c, long long *step, int block)
{
	int flag = 1;
#ifdef DT_HAVE_MPI
	MPI_Request *req = c->round_req;

	if (!req) {
		req = c->round_req = xmalloc(sizeof(*req));
		*req = MPI_REQUEST_NULL;
	}
	if (*req == MPI_REQUEST_NULL)
		mpiCheck(MPI_Irecv(&c->round_msg, 1, MPI_LONG_LONG, 0, TAG_ROUND, MPI_COMM_WORLD, req));
	if (block)
		mpiCheck(MPI_Wait(req, MPI_STATUS_IGNORE));
	else
		mpiCheck(MPI_Test(req, &flag, MPI_STATUS_IGNORE));
	if (flag)
		*step = c->round_msg;
#else
	(void)c;
	(void)step;
	(void)block;
#endif
	return flag;
}

static void comm_sum_(struct comm *c, double *v, int n);

void comm_sum(struct comm *c, double *v, int n)
{
	progress_coll_begin(PH_SUM);
	comm_sum_(c, v, n);
	progress_coll_end();
}

static void comm_sum_(struct comm *c, double *v, int n)
{
	switch (c->kind) {
	case COMM_SINGLE:
		return;
	case COMM_MPI:
#ifdef DT_HAVE_MPI
		mpiCheck(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
#endif
		return;
	case COMM_NCCL:
#ifdef DT_HAVE_NCCL
		if (n > 16)
			dt_fatal(__FILE__, __LINE__, "comm_sum", "more than 16 values", "a dttrain bug");
		gpu_h2d(c->dev_scratch, v, (size_t)n * sizeof(double));
		cudaCheck(cudaStreamSynchronize((cudaStream_t)gpu_stream()));
		ncclCheck(ncclAllReduce(c->dev_scratch, c->dev_scratch, (size_t)n, ncclDouble, ncclSum,
					(ncclComm_t)c->nccl, (cudaStream_t)c->stream));
		nccl_wait(c);
		gpu_d2h(v, c->dev_scratch, (size_t)n * sizeof(double));
#endif
		return;
	}
}

int comm_any(struct comm *c, int flag)
{
	double v = flag ? 1.0 : 0.0;

	comm_sum(c, &v, 1);
	return v > 0.0;
}

void comm_abort(struct comm *c, int code)
{
	fflush(stdout);
	fflush(stderr);
#ifdef DT_HAVE_NCCL
	if (c->kind == COMM_NCCL && c->nccl) {
		ncclComm_t nc = (ncclComm_t)c->nccl;

		c->nccl = NULL;
		ncclCommAbort(nc);
	}
#endif
#ifdef DT_HAVE_MPI
	if (c->have_mpi && c->world > 1)
		MPI_Abort(MPI_COMM_WORLD, code);
#endif
	exit(code);
}

void comm_finish(struct comm *c)
{
#ifdef DT_HAVE_NCCL
	if (c->kind == COMM_NCCL && c->nccl) {
		/* non-blocking communicator: finalize is polled, bounded like init */
		struct pending_op op = { "NCCL finalize", nccl_poll, nccl_abort, c->nccl };
		struct strbuf err = STRBUF_INIT;

		ncclCommFinalize((ncclComm_t)c->nccl);
		if (comm_wait_op(&op, c->timeout_s * 1000, &err))
			warning("rank %d: %s; communicator aborted", c->rank, err.buf);
		else
			ncclCommDestroy((ncclComm_t)c->nccl);
		strbuf_release(&err);
		c->nccl = NULL;
		gpu_free(c->dev_scratch);
		cudaStreamDestroy((cudaStream_t)c->stream);
		cudaEventDestroy((cudaEvent_t)c->done);
	}
#endif
#ifdef DT_HAVE_NCCL
	if (c->nccl_dp) {
		ncclCommDestroy((ncclComm_t)c->nccl_dp);
		c->nccl_dp = NULL;
	}
#endif
#ifdef DT_HAVE_MPI
	if (c->dp) {
		MPI_Comm_free((MPI_Comm *)c->dp);
		free(c->dp);
		c->dp = NULL;
	}
	free(c->round_req);
	c->round_req = NULL;
	comm_p2p_flush(c);
	free(c->sends);
	c->sends = NULL;
	if (c->have_mpi) {
		MPI_Finalize();
		c->have_mpi = 0;
	}
#endif
	free(c->reqs);
	c->reqs = NULL;
	free(c->stage);
	c->stage = NULL;
	if (fatal_comm == c)
		fatal_comm = NULL;
}
