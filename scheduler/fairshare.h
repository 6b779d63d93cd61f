/*
 * fairshare.h - the queue's policy when several users share the cluster
 * (docs/fairshare.md): decayed usage per user and project, the multifactor
 * priority (Slurm's classic fair share F = 2^(-U/S), age, size, and the
 * job's own priority: among its user's jobs), quotas, and one scheduling
 * pass that places pending jobs in priority order with EASY backfill: the
 * first job that cannot start gets a reservation (the slots it will take
 * when enough running jobs have ended, and when that is), and a later job
 * starts only where it cannot delay it.
 *
 * Pure: no locks, no clock, no dtsched state.  jobs-queue.c feeds it the
 * jobs, pools and running holds and acts on its answers through struct
 * fs_ops; tests/unit/test_fairshare.c runs it on simulated time.
 */
#ifndef DT_FAIRSHARE_H
#define DT_FAIRSHARE_H

#include <stddef.h>
#include "config.h"
#include "placement.h"
#include "strbuf.h"

/* ------------------------------------------------------------ usage */

/*
 * GPU-seconds used per user and per project, decayed with a half-life:
 * usage from t seconds ago counts 2^(-t/half_life).  Kept as a value at an
 * epoch (the latest end added), so adding is O(1) and old intervals can be
 * added late (the history, when dtsched starts).
 */
struct fs_usage_ent {
	char *name;
	int project;              /* 0: a user, 1: a project */
	double v;                 /* decayed GPU-seconds at u->epoch_us */
};

struct fs_usage {
	struct fs_usage_ent *v;
	size_t nr, alloc;
	long long epoch_us;
	double half_life_s;
};

void fs_usage_init(struct fs_usage *u, long long half_life_ms);
void fs_usage_release(struct fs_usage *u);
/* gpus GPUs were used from start_us to end_us by user (and project, may be NULL) */
void fs_usage_add(struct fs_usage *u, const char *user, const char *project, double gpus,
		  long long start_us, long long end_us);
/* the decayed GPU-seconds of a user (project 0) or project (1) at now_us */
double fs_usage_get(const struct fs_usage *u, int project, const char *name, long long now_us);
/* the same decay over [start_us, end_us] for gpus GPUs, as of now_us (a running attempt) */
double fs_decayed(const struct fs_usage *u, double gpus, long long start_us, long long end_us,
		  long long now_us);

/* ------------------------------------------------------------ the pass */

/* A user or project as one pass sees it (fs_pass_prepare fills these). */
struct fs_acct {
	const char *name;
	int project;              /* index into pass->projects (users only) */
	double share;             /* as configured (or the default) */
	double norm_share;        /* users: the project's part times the user's part in it */
	double usage;             /* decayed GPU-seconds, running attempts included */
	double factor;            /* users: 2^(-usage/total / norm_share) */
	struct fs_limits lim;
	int gpus, slots;          /* in use now (quotas) */
	int pending;
};

/* One job as the pass sees it: the caller fills the inputs. */
struct fs_job {
	void *job;                /* the caller's */
	const char *user, *project;   /* project NULL: the user's default */
	int gpu;                  /* 1: takes GPUs, 0: CPU slots */
	int size;                 /* GPUs (or CPU slots) of all its nodes */
	int per_node;             /* ... on each */
	long long submit_us;
	long long limit_ms;       /* its timeout; 0: none (it cannot backfill into a reservation) */
	int prio;                 /* priority: (among its user's own jobs) */
	int preemptible, cls_rank;   /* its class: preemptible jobs come after all others,
				      * then higher class priority first */
	unsigned long long *wait_fp;  /* the pool it last waited on (the caller's), or NULL */
	/* what its placement depends on besides the pool, when that is all of it
	 * (its size, per node, no node lists: the caller's hash), else 0: jobs of
	 * one shape that wait, all wait on a pool that did not change since */
	unsigned long long shape;
	/* outputs */
	int u, p;                 /* indices into pass->users / projects */
	double f_fs, f_age, f_size, priority;
	int position;             /* 1 = first in the queue */
	long long expected_start_us;  /* the top job of its pool: when its reservation frees */
	int top;                  /* it holds its pool's reservation */
};

/* A running attempt: where it is (node indices into its pool, slots) and when it ends. */
struct fs_running {
	int gpu;
	long long start_us;       /* this attempt's start */
	long long end_us;         /* start + timeout; 0: unknown */
	int nr;
	const int *node;          /* nr node indices */
	const int *nslots;        /* slots per node */
	const int *const *slot;   /* slot indices per node */
	const char *user, *project;
	int size;
	void *job;                /* the caller's */
	int preemptible, cls_rank;   /* its class */
	int preempting;           /* being preempted already (its slots free soon) */
};

struct fs_pool {
	struct place_node *n;     /* the caller's pool: committed placements are marked in it */
	size_t nr;
	int total;                /* slots of its UP nodes (the size factor's denominator) */
};

struct fs_ops {
	/* PLACE_OK with res, or WAIT/NEVER with reason; plan 0: for a start now (the
	 * backend's gate included), 1: only where it would go (a reservation) */
	enum place_status (*try_place)(void *ctx, struct fs_job *j, struct place_node *n,
				       size_t nr, int plan, struct place_result *res,
				       struct strbuf *reason);
	/* j starts on res (the pass has marked it in the pool) */
	void (*start)(void *ctx, struct fs_job *j, const struct place_result *res);
	/* j waits, for reason */
	void (*wait)(void *ctx, struct fs_job *j, const char *reason);
	/* a hash of what try_place reads from a pool, or NULL (then every job is tried) */
	unsigned long long (*fingerprint)(void *ctx, int gpu, const struct place_node *n,
					  size_t nr);
	/* preempt victim (signal, grace, requeue) so that `by` can start; NULL: never */
	void (*preempt)(void *ctx, const struct fs_running *victim, const struct fs_job *by);
};

struct fs_pass {
	const struct fairshare_config *cfg;   /* NULL: the defaults, no shares, no limits */
	long long now_us;
	struct fs_acct *users, *projects;
	size_t nr_users, nr_projects;
	struct fs_job **order;    /* the pending jobs, highest priority first */
	size_t nr;
	double total_usage;
	/* after fs_pass_place: each pool's reservation (the top job's slots), or NULL */
	struct place_result *reserved[2];
	int reserved_per_node[2];
	long long shadow_us[2];   /* ... which frees then (0: unknown) */
};

/*
 * Compute every job's factors and priority and the queue's order.  jobs:
 * the pending ones (nr); run: the running attempts (their usage and quota
 * use; they start at end_us - timeout, so their fs_running carries start_us);
 * usage may be NULL; totals: the slots of the CPU and GPU pools (size factor).  Then fs_pass_place() once at most, then
 * fs_pass_release().
 */
void fs_pass_prepare(struct fs_pass *p, const struct fairshare_config *cfg,
		     const struct fs_usage *usage, long long now_us, struct fs_job *jobs,
		     size_t nr, const struct fs_running *run, size_t nr_run, const int totals[2]);
/*
 * Place the jobs in order on pools[0] (CPU slots) and pools[1] (GPUs):
 * quotas first (a job over one waits, and others go on), then the pool; the
 * first job of a pool that waits gets the reservation, later ones start
 * only on slots it does not need, or when their timeout ends before it is
 * expected to start.  When the top job may preempt (it is not preemptible,
 * or its class ranks above theirs) and preemptible jobs hold the slots it
 * needs (or, with cfg->preempt_over_share, over-share users' jobs that ran
 * preempt_min_run, when the top job's user is under their share), the
 * fewest of them, youngest first, are preempted (ops->preempt)
 * unless those being preempted already free enough.  Returns how many started.
 */
int fs_pass_place(struct fs_pass *p, struct fs_pool pools[2], const struct fs_running *run,
		  size_t nr_run, const struct fs_ops *ops, void *ctx);
void fs_pass_release(struct fs_pass *p);

/* The user's effective project: the job's, else the user's default, else the user. */
const char *fs_project_of(const struct fairshare_config *cfg, const char *user,
			  const char *project);
/* A user's (project 0) or project's limits, with the defaults applied. */
struct fs_limits fs_limits_of(const struct fairshare_config *cfg, int project, const char *name);
/*
 * At submission: 0, or -1 with why in err when the job can never run under
 * the limits (more GPUs than max_gpus, a timeout above max_time, max_pending
 * reached with `pending` jobs queued).  *timeout_ms is set to max_time when
 * the job has none and a max_time applies.
 */
int fs_check_submit(const struct fairshare_config *cfg, const char *user, const char *project,
		    int gpu, int size, long long *timeout_ms, int user_pending, int project_pending,
		    struct strbuf *err);

#endif
