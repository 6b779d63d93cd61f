/*
 * jobs-int.h - what the files of dtsched's job machinery share, bottom up:
 * job.c (the job object, job_transition), hold.c (held slots), jobs-queue.c
 * (queue, placement), the agents backend (backend-agents.c, jobs-launch.c,
 * fabric-head.c, probe.c, agentcall.c), jobs.c (the lifecycle), the event
 * subscribers (jobs-metrics.c, quarantine-head.c, hang.c, goodput-head.c)
 * and jobs-api.c
 * (the HTTP API).  Private to them; sched-int.h is
 * what the rest of dtsched sees.  Locking as in sched-int.h: s->lock guards
 * all of it unless a function says otherwise.
 */
#ifndef DT_JOBS_INT_H
#define DT_JOBS_INT_H

#include "sched-int.h"
#include "httpc.h"
#include "launch.h"
#include "placement.h"
#include "fairshare.h"

struct jslot {
	char *node;
	char *address;
	int nslots;
	int slot[64];
};

struct htask {
	char *node;
	char *id;
	int rank;                 /* -1: the mpirun task */
	int gone;                 /* its agent said it is final or unknown */
};

struct hold {
	char job[16];
	int gpu;
	int nr;
	struct jslot *place;
	struct htask *tasks;
	size_t nr_tasks, alloc_tasks;
	int released;             /* the attempt is over: stop what is left */
	int busy;                 /* a launch thread uses it: keep it (check_holds) */
	long long released_ms, stop_sent_ms, launched_ms;
};

struct job {
	long long seq;
	char id[16];
	char *name, *user, *job_dir, *shared_dir;
	char *submit_dir;         /* where dtctl ran (the ranks start there if it exists) */
	json_t *spec;
	struct job_config cfg;
	const char *state;
	char *reason;
	int gpu, per_node, world;
	int attempt;
	struct hold *hold;
	json_t *history, *avoid, *stalled, *last_ranks, *placement;
	json_t *past_stalls;   /* stalls that cleared: stalled's entries + cleared_at, cleared_by */
	int master_port;
	long long submitted_us, started_us, ended_us, run_mono;
	int has_exit, exit_code, failed_rank;
	char *failed_node;
	int cancel;
	int launch;               /* placed: 1 = to launch, 2 = a launch thread is at it */
	long long version;        /* bumped by every job_save(): long-poll waiters compare it */
	char *launch_error;
	long long stall_checked_ms;
	long long log_lost_lines;  /* output lines of its ranks that could not be logged */
	char *log_error;          /* the first such write error, e.g. "No space left on device" */
	unsigned long long wait_fp;  /* pool_fingerprint() it last waited on; 0 = try it */
	long long ord;            /* its place in s->jobs' order (jobs_add; the live index) */
	int in_running;           /* it is in s->running (sched-int.h) */
	/* what restarts cost (goodput.h), kept in the job's JSON */
	long long first_started_us;  /* the first attempt's start */
	long long lost_us;        /* wall time lost: work since the last checkpoint + restarts */
	double lost_slot_s;       /* the same times each attempt's GPUs (or CPU slots) */
	long long restart_from_us;  /* a requeued attempt failed then (0: no restart pending) */
	int restart_world;        /* ... on this many GPUs (or CPU slots) */
	int orted_attempt;        /* the attempt that ended last ... */
	long long orted_grace_ms; /* ... and until when (mono) its orteds may end by themselves */
	json_t *fabric;           /* a fabric test's verdict (fabric-head.c), or NULL */
	json_t *preflight;        /* preflight: {job: the gate job running or null, passed:
				   * [nodes], rounds} (fabric-head.c), or NULL */
	/* hang attribution (hang.h): the latest HANG, attributions started and done */
	json_t *hang;
	long long hang_gen, hang_done;
	int hang_busy;
	long long hang_auto_ms;   /* dt_mono_ms() of the last automatic one */
	/* fair share (fairshare.h, docs/fairshare.md) */
	char *project;            /* the account its usage counts to, fixed at submission */
	double prio, f_fs, f_age, f_size;   /* the last pass's priority and factors (pending) */
	int prio_pos;             /* its place in the queue (1: first), 0: not computed */
	int prio_top;             /* it holds its pool's reservation ... */
	long long expected_start_us;   /* when it is expected to start (0: unknown) */
	const char *expected_unknown;  /* why that is unknown (static), or NULL */
	int floor_gpus, floor_in_use;  /* its project's guaranteed_gpus and GPUs in use */
	int prio_guaranteed;      /* it is within that floor (fs_job.guaranteed) */
	/* preemption (fairshare.h): its class's signal was sent, the attempt ends at
	 * preempt_deadline_ms (mono) and is requeued without counting as a retry */
	int preempting;
	long long preempt_deadline_ms;
	int preemptions;          /* how many times it was preempted (attempt counts them too) */
	char *preempted_by;       /* the job that preempted it last */
	/* the Slurm backend (backend-slurm.c): its Slurm job, as "slurm" in the job's
	 * JSON ({job_id, attempt, state, reason, nodes, restarts, ...}), or NULL */
	json_t *slurm;
	int requeues;             /* restarts a resource manager made (Slurm's requeue after
				   * preemption or node failure): they cost no retry */
};

struct jobs_clients {
	struct cli { char key[300]; struct dt_httpc c; } **v;
	size_t nr, alloc;
	int launches;             /* s->clients only: launch threads running (lock) */
};

#define LAUNCH_RUNNING 2      /* job->launch while its launch thread runs */

/* ------------------------------------------------------------ placement */

struct pool {
	struct place_node *n;     /* one per known node, same order as s->nodes */
	size_t nr;
	int gpu;
};

/* ------------------------------------------------------------- actions */

struct action {
	int kind;                 /* 0 = stop task, 1 = launch job */
	char *addr;
	int port;
	char *node;
	char *task;
	struct job *job;
	struct hold *hold;
};

struct actions {
	struct action *v;
	size_t nr, alloc;
};

struct launch_arg {
	struct sched *s;
	struct job *j;
	struct hold *h;
};

#define STOP_GRACE_MS 3000        /* fail fast: SIGTERM, SIGKILL 3 s later */
#define STOP_RESEND_MS 3000
#define LAUNCH_GONE_MS 5000       /* a launched task never reported: gone after this */

/* hang.c (its subscription: sched-int.h): start an attribution of running job j (lock held); its gen */
long long hang_start(struct sched *s, struct job *j, int automatic);
void h_job_debug(struct dt_http_request *req, struct dt_http_response *resp, void *data);

/* job.c: the job object, its files and JSON, its transitions */
/* the mtime of <job_dir>/<name> in ns (0: none), read safely */
long long job_mtime_ns(const struct job *j, const char *name);
/* the ranks of j's attempt (its backend's view; ending: it ends now), else the last one's */
json_t *ranks_json(struct sched *s, const struct job *j, int ending);
/* for mpi jobs: the attempt's ranks/<r>.json records, indexed by rank (null: none) */
json_t *mpi_rank_records(const struct job *j);
/* a rank's state that is over; mark a rank that had not ended as killed (or lost) */
int rank_state_final(const char *st);
void rank_set_end(json_t *r, int lost);
int state_final(const char *st);
int task_final(const json_t *t);
struct job *job_find(struct sched *s, const char *id);
/* s->jobs and its index of live jobs (sched-int.h, s->live): a job known
 * (appended to both unless it ended), the ended ones dropped from the index,
 * the index made anew from s->jobs (after a load), one taken out (freed next) */
void jobs_add(struct sched *s, struct job *j);
void jobs_live_compact(struct sched *s);
void jobs_live_rebuild(struct sched *s);
void jobs_running_note(struct sched *s, struct job *j);   /* j became RUNNING */
void jobs_remove(struct sched *s, size_t i);
void job_rel(const struct job *j, const char *name, struct strbuf *rel);
/* A new attempt of j starts on hold j->hold: its world size, the first start. */
void job_attempt_started(struct job *j);
void job_file(const struct job *j, const char *name, const char *data, size_t len);
void job_file_mode(const struct job *j, const char *name, const char *data, size_t len, mode_t mode);
long long highest_job_dir(const char *shared);
int job_id_free(const struct job *j, struct strbuf *err);
int job_subdirs(const struct job *j, struct strbuf *err);
#define CKPT_SCAN_MAX 100000   /* entries of ckpt/ read for DT_RESUME */
#define CKPT_SCAN_MS 5000      /* nor longer than this */
char *job_latest_checkpoint(const struct job *j, size_t max_entries, long long max_ms,
			    size_t *nread);
/* Team mode: the job dir and its logs/, ckpt/, ranks/ handed to uid:gid with
 * mode (fchown, fchmod on fds; docs/team.md); -1 with why in err. */
int job_dir_give(const struct job *j, long long uid, long long gid, int mode, struct strbuf *err);
void write_state_file(const struct job *j);
void write_placement_file(const struct job *j);
/* jobs.c: the lifecycle (jobs_init, jobs_step: sched-int.h) */
void history_add(struct job *j, const char *state, const char *reason);
void set_reason(struct job *j, const char *fmt, ...) DT_PRINTF(2, 3);
json_t *job_json(struct sched *s, const struct job *j, int detail);
/* logwatch.c: a logset (lib/logmerge.h) over j's rank logs, <job_dir>/logs/<rank>.log
 * (read through lib/safefile.h); lock held while j is read, not while the logs are */
struct logset;
void job_logset(const struct job *j, struct logset *ls);
/* what replies show: the spec with notify: webhook URLs redacted (notify-spec.h) */
json_t *spec_shown(json_t *spec);
json_t *job_json_shown(struct sched *s, const struct job *j);
int job_save(struct sched *s, struct job *j);
void job_transition(struct sched *s, struct job *j, const char *state);
void job_free(struct job *j);
struct job *job_new(void);
void job_derive(struct job *j);


/* hold.c */
json_t *hold_json(const struct hold *h);
/* [{node, slots}] of a hold (placement.json, job_json) */
json_t *placement_json(const struct hold *h);
void hold_free(struct hold *h);
/* out of s->holds, and freed: its backend knows nothing of it runs any more */
void hold_drop(struct sched *s, struct hold *h);
void hold_add_task(struct hold *h, const char *node, const char *id, int rank, int gone);
struct hold *hold_from_json(const json_t *o);
/* A node's slots of a hold as "0,1" (placement.json, the plan) */
void jslot_format(struct strbuf *sb, const struct jslot *p);
int hold_has_task(struct sched *s, const char *id);
/* Does job `job` still hold slots (an attempt running, or one whose processes are not all gone)? */
int hold_of_job(struct sched *s, const char *job);

/* jobs-queue.c */
/* What runs, for the quotas, the running usage and the reservations (fairshare.h). */
struct fair_running {
	struct fs_running *v;
	int *node, *nslots;
	const int **slot;
	size_t nr;
};
/* The fair-share pass's inputs (the pools, the pending jobs, what runs) and its
 * factors and order (in->pass): for the pass, GET /v1/share and /metrics.  Lock held. */
struct fair_inputs {
	struct pool gpu, cpu;
	struct fs_job *fj;
	size_t n;
	struct fair_running run;
	int totals[2];
	struct fs_pass pass;
};
void fair_inputs_prepare(struct sched *s, struct fair_inputs *in);
/*
 * The intervals j ran (RUNNING in its history until the next entry); an
 * interval still open ends at j->ended_us, or is left out (include_open 0).
 */
void run_intervals(const struct job *j, int include_open,
		   void (*fn)(const struct job *j, long long a, long long b, void *d), void *d);
/*
 * What the last full pass left (schedule_pending): the pools' fingerprints
 * after it and each pool's reservation.  While the pools stay as they were,
 * a step places only the jobs never tried (against the reservation) and the
 * full pass, which sorts the whole queue, runs at most every second.
 */
struct fair_cache {
	long long at_ms;          /* dt_mono_ms() of the last full pass, 0: none */
	unsigned long long fp[2];
	struct place_result *reserved[2];
	int per_node[2];
	long long shadow_us[2];
	/* the scan of s->live (queue_scan): valid while s->queue_gen == scan_gen;
	 * then jobs appended since (from scan_nr on) are all a step scans */
	int scan_valid;
	unsigned long long scan_gen;
	size_t scan_nr;
	int any, untried, unranked;   /* pending jobs, never tried, never ranked */
	size_t first;             /* in s->live, the first job never tried */
	unsigned long long walks; /* whole walks of the queue (tests, bench) */
};
void fair_cache_free(struct sched *s);
/* j is to be placed anew although the pools did not change (its nodes to
 * avoid did): the next step tries it.  Lock held. */
static inline void job_place_again(struct sched *s, struct job *j)
{
	j->wait_fp = 0;
	s->queue_gen++;
}
/*
 * At submission (lock held, cluster.yaml read): j's project, and the quotas
 * it can never get past (fairshare.h, fs_check_submit); a job without a
 * timeout gets max_time's.  0, or -1 with the numbers in err.
 */
int job_admit(struct sched *s, struct job *j, struct strbuf *err);
void fair_inputs_release(struct fair_inputs *in);
void pool_build(struct sched *s, struct pool *p, int gpu);
enum place_status job_try_place(struct sched *s, const struct job *j, struct pool *p,
				struct place_result *res, struct strbuf *reason);
void schedule_pending(struct sched *s);
/* The slots of placement res for j, as a hold that is not (yet) reserved:
 * hold_make() reserves it, --dry-run only plans on it (then hold_free()). */
struct hold *hold_new(struct sched *s, const struct job *j, const struct place_result *res);

/*
 * The agents backend's gate (backend.h): j was placed on res (in pool p).
 * 1 when its launch waits for a pre-flight fabric test of those nodes (a
 * gate job runs, or was just submitted; nothing is held; why in reason), 0
 * to launch now.  Lock held.
 */
int fabric_gate(struct sched *s, struct job *j, const struct pool *p,
		const struct place_result *res, struct strbuf *reason);
/* agentcall.c: one signed POST to each of several agents, all at once */
struct agent_call {
	char *name, *addr;        /* the node */
	int port;
	const struct dt_auth_key *key;
	const char *path;
	int timeout_ms;
	json_t *body;             /* the request (owned) */
	int status;               /* the reply's HTTP status, < 0: none */
	json_t *reply;            /* its JSON when 200, else NULL */
	struct strbuf err;        /* why not 200 */
};
void agent_call_init(struct agent_call *c, const struct sched *s, const struct node *n,
		     const char *path, int timeout_ms);
/* every call on a thread of its own; returns when all answered or timed out (no lock) */
void agent_calls(struct agent_call *c, size_t n);
void agent_call_release(struct agent_call *c);

/* probe.c: checks of either kind (fabric gate, connectivity) before a job starts anyway */
#define FABRIC_GATE_ROUNDS 4
/* 1 when j's pre-flight checks (of `what`) ran FABRIC_GATE_ROUNDS times without a
 * pass: it starts anyway, which its history says once.  Lock held. */
int preflight_gave_up(struct job *j, const char *what);
/* 1 when every node of res passed j's latest pre-flight check.  Lock held. */
int preflight_passed(const struct job *j, const struct pool *p, const struct place_result *res);
/*
 * probe.c: fabric_gate() for a job without `preflight:` -- the agents'
 * connectivity check of res's nodes, on a thread; 1 while it runs or must
 * run (why in reason), 0 once they passed.  Lock held.
 */
int probe_gate(struct sched *s, struct job *j, const struct pool *p,
	       const struct place_result *res, struct strbuf *reason);

/* jobs-launch.c */
void clients_release(struct jobs_clients *c);
struct dt_httpc *client_for(struct sched *s, struct jobs_clients *c, const char *addr,
			    int port);
/*
 * The launch plan of attempt j->attempt of j on `place` (nr nodes): the one
 * builder of what runs, for the launch (do_launch: the port the master node
 * gave, the checkpoint to resume from) and for --dry-run (the job as it
 * would be queued, master_port 0: a port is only chosen at launch), so what
 * dry-run shows is what runs.  Lock held.  -1 with a message in err.
 */
int job_plan(struct sched *s, const struct job *j, const struct jslot *place, int nr,
	     int master_port, const char *resume, struct launch_plan *plan, struct strbuf *err);
/* backend-agents.c's launch (backend.h): do_launch with clients of its own */
void agents_launch(struct sched *s, struct job *j, struct hold *h);

#endif
