/*
 * backend.h - "where ranks run", as the job lifecycle asks it (issue 28).
 *
 * The lifecycle (jobs.c, jobs-queue.c) knows a job's states, its holds (the
 * slots of an attempt) and its launch plan; it does not know how ranks get
 * onto nodes, how they are stopped, or how their ends are learnt.  It asks
 * the backend chosen for the cluster, through this struct of operations
 * only (the shape of Slurm's plugins, torchx's schedulers): sched_run()
 * picks one (s->backend) and nothing else names it.  Today's agents
 * (backend-agents.c: pre-launch gates, one POST /v1/tasks per node,
 * heartbeats) are the first; a Slurm backend is meant to be the second
 * without touching the lifecycle.  What a backend cannot do it says
 * plainly (an operation may be NULL where noted).
 *
 * Locking as in sched-int.h: "lock held" means s->lock.
 */
#ifndef DT_BACKEND_H
#define DT_BACKEND_H

#include <jansson.h>
#include "placement.h"
#include "strbuf.h"

struct sched;
struct node;
struct job;
struct hold;
struct pool;
struct place_result;
struct actions;
struct action;

/* how an attempt stands, as the backend learnt it (attempt_poll) */
enum attempt_status {
	ATTEMPT_RUNNING,          /* not over (the lifecycle checks timeouts, stalls) */
	ATTEMPT_COMPLETED,        /* every rank exited 0 */
	ATTEMPT_FAILED,           /* a rank failed (or its node lost it: node_fail) */
	ATTEMPT_NODE_DOWN,        /* a node of the attempt is gone: node, why */
	ATTEMPT_SETTLING,         /* an end is being learnt: ask again at the next step */
	ATTEMPT_ENDED,            /* the resource manager under the backend ended it (Slurm:
				   * scancel, time limit, node failure, preemption): the job
				   * ends in e->state, or with e->requeue starts again */
};

struct attempt_end {
	int rank;                 /* the first failed rank, -1: mpirun (or none) */
	int code;                 /* its exit code */
	int signal;               /* the signal that killed it as its agent saw it (0: none,
				   * or known only from the job's own files): quarantine */
	int why_is_reason;        /* why is the whole reason (it names the nodes) */
	int node_fail;            /* FAILED: it was lost with its node (NODE_FAIL) */
	char *node;               /* the node it failed on (owned; NULL: none) */
	struct strbuf why;        /* "exited with code 3", "node 'n2' went down ..." */
	const char *state;        /* ENDED: DT_JOB_CANCELLED, _TIMEOUT, _NODE_FAIL, _FAILED;
				   * with requeue the history's word ("REQUEUED") */
	int requeue;              /* ENDED: queued again by the resource manager: a restart
				   * that costs no retry (resumes from the checkpoint) */
};

/* a rank of a running attempt that is still live (live_ranks) */
struct rank_live {
	int rank;                 /* its rank in the world */
	const char *node;         /* where it runs (the hold's; valid under the lock) */
	long long pid;            /* its process (or its task's) id, 0: not known */
};

struct sched_backend {
	const char *name;         /* "agents", "slurm" */
	/*
	 * Where an attempt of j runs, when the backend decides rather than
	 * placement.c on the node table (slurm: the nodes of the allocation Slurm
	 * granted, once their agents joined): PLACE_OK with res (indices into p),
	 * PLACE_WAIT or PLACE_NEVER with why in reason.  j->id is empty for a job
	 * being submitted (only: can it ever run?).  Lock held.  NULL: placement.c,
	 * then gate.
	 */
	enum place_status (*place)(struct sched *s, struct job *j, struct pool *p,
				   struct place_result *res, struct strbuf *reason);
	/*
	 * The steps before an attempt placed on res (in pool p) may start
	 * (agents: the fabric gate, the connectivity probe): 1 while it must
	 * wait (why in reason; nothing is held), 0 to launch now.  Lock held.
	 * NULL: no gate.
	 */
	int (*gate)(struct sched *s, struct job *j, const struct pool *p,
		    const struct place_result *res, struct strbuf *reason);
	/*
	 * Launch attempt j->attempt of j on hold h, the plan built by
	 * job_plan().  Runs on a thread of its own, lock NOT held; records
	 * the attempt's tasks on h and clears j->launch, or sets
	 * j->launch_error (under the lock), then wakes the main loop.
	 */
	void (*launch)(struct sched *s, struct job *j, struct hold *h);
	/* Stop one task (x: node, address, task id); lock NOT held. */
	void (*stop)(struct sched *s, const struct action *x);
	/*
	 * Where j's running attempt (launched, on j->hold) stands: RUNNING,
	 * or how it ended, with e filled for FAILED and NODE_DOWN.  Lock held.
	 */
	enum attempt_status (*attempt_poll)(struct sched *s, struct job *j, struct attempt_end *e);
	/* The ranks of j as `show` prints them (ending: the attempt is ending); lock held. */
	json_t *(*describe)(struct sched *s, const struct job *j, int ending);
	/*
	 * Once a step (lock held): free the holds of attempts that are over
	 * (hold_drop) once nothing of them runs, and add to a what to stop
	 * (their tasks, orphans).  NULL: nothing to do.
	 */
	void (*step)(struct sched *s, struct actions *a);
	/*
	 * The ranks of j's running attempt (launched, on j->hold) that have not
	 * ended, appended to *v (ALLOC_GROW with *alloc); their number.  Stall
	 * detection (jobs.c) scans only these.  Lock held.  NULL: the backend
	 * cannot tell; every rank of the world counts as live, on the node the
	 * placement gave it, pid not known.
	 */
	size_t (*live_ranks)(struct sched *s, const struct job *j, struct rank_live **v,
			     size_t *alloc);
	/*
	 * Output lines of j's attempt (on j->hold) that its ranks could not
	 * write to their logs, as the backend learnt them (agents: the tasks'
	 * log_lost_lines and log_error): added to *lost; *err (owned) set to the
	 * first write error when it is NULL.  Lock held.  NULL: the backend
	 * cannot tell; only the job's own records (mpi: ranks/<r>.json) count.
	 */
	void (*log_loss)(struct sched *s, const struct job *j, long long *lost, char **err);
	/*
	 * Send signal sig (1 .. 64) to every rank of j's running attempt, at
	 * once, without stopping it (agents: POST /v1/tasks/<id>/signal to each
	 * of its tasks, mpi jobs' orteds included, whose supervisors signal
	 * every process of the task's tree).  Lock NOT held: it takes it to read
	 * the attempt and makes its calls without it.  The number of tasks
	 * signalled, or -1 with why in err (no attempt running, or no task of
	 * it could be reached).  A stop (SIGTERM, grace, SIGKILL, verified gone)
	 * is not a signal: the lifecycle ends the attempt and the backend's
	 * step stops it.  NULL: the backend cannot signal ranks (the caller
	 * says so: 501).
	 */
	int (*signal)(struct sched *s, struct job *j, int sig, struct strbuf *err);
	/*
	 * The GPUs of node n (0 .. total-1) that work which is no job's holds
	 * (agents: tasks started through the agent API with CUDA_VISIBLE_DEVICES),
	 * set to 1 in used: the queue places no job there.  Lock held.  NULL:
	 * only jobs take GPUs.
	 */
	void (*gpus_taken)(struct sched *s, const struct node *n, unsigned char *used, int total);
	/* At exit, lock NOT held: stop what the backend started.  NULL: nothing. */
	void (*release)(struct sched *s);
};

/* job.c: an empty end (rank -1), and its release */
void attempt_end_init(struct attempt_end *e);
void attempt_end_release(struct attempt_end *e);

/* the agents backend (backend-agents.c) */
extern const struct sched_backend agents_backend;
/* the Slurm backend (backend-slurm.c): backend: slurm in cluster.yaml */
extern const struct sched_backend slurm_backend;

#endif
