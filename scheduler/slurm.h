/*
 * slurm.h - what dtsched says to Slurm and reads back from it, as pure
 * functions (unit-tested alone: tests/unit/test_slurm.c): the sbatch argv of
 * one attempt of a job, the batch script (fixed text: it quotes nothing from
 * the user, every value reaches it through the environment), squeue's and
 * sinfo's lines, Slurm's job states as the lifecycle sees them, whether a job
 * can ever fit the partition, and which option of cluster.yaml a refused
 * sbatch points at.  The backend that runs these commands is
 * backend-slurm.c; docs/slurm-backend.md says how it all fits.
 */
#ifndef DT_SLURM_H
#define DT_SLURM_H

#include "protocol.h"

#include <jansson.h>
#include "config.h"
#include "strbuf.h"
#include "strvec.h"

/* What one attempt asks Slurm for. */
struct slurm_request {
	const char *job_id;       /* dtctl's id, "j-000042" (--comment) */
	const char *name;         /* the job's name (--job-name) */
	int attempt;
	int nodes;                /* --nodes, one agent each (--ntasks-per-node=1) */
	int gpus_per_node;        /* --gres=gpu:N (0: a CPU job) */
	int cpus_per_node;        /* --cpus-per-task for a CPU job */
	long long timeout_ms;     /* the job's timeout (0: none: the partition's limit) */
	const char *output_dir;   /* --output=<it>/<job_id>.<attempt>-%j.out ('%' of the dir
				   * doubled: %j is Slurm's job id), or NULL */
	const char *include;      /* the job's include_nodes: (--nodelist), or NULL */
	const char *exclude;      /* its exclude_nodes: (--exclude), or NULL */
	const char *script;       /* the batch script's path, last */
	const char *head;         /* dtsched's head id (state.db), in --comment, or NULL */
	int no_warning;           /* no --signal (an allocation dtsched fills: pack:) */
};

/* The environment variables the batch script reads (sbatch passes them on). */
#define SLURM_ENV_DTCTL "DTCTL_SLURM_DTCTL"   /* dtctl's path on the nodes */
#define SLURM_ENV_HEAD "DTCTL_SLURM_HEAD"     /* addr:port of dtsched */
#define SLURM_ENV_JOB DT_ENV_SLURM_JOB       /* dtctl's job id: where the warning goes */
/*
 * Slurm's warning before the time limit (--signal=B:<sig>@<s>: cluster.yaml's
 * `slurm: {signal: USR1, warn_s: 120}`, those by default; warn_s 0: none),
 * a minute closer to the job's own timeout than warn_s (--time adds a minute
 * for the agents), to the batch shell only, which is `dtctl slurm-agents`; it
 * asks dtsched to signal the job's ranks (POST /v1/jobs/<id>/signal: the
 * backend's signal op), docs/slurm-backend.md.
 */
/* and DTCTL_AGENT_SECRET, the cluster secret, which dtagent --slurm takes out of
 * its environment before anything starts (agent/dtagent.c) */

/* sbatch's argv (argv[0] "sbatch") for request r on cluster cc. */
void slurm_sbatch_argv(const struct cluster_config *cc, const struct slurm_request *r,
		       struct strvec *argv);
/* The batch script, the same text for every job. */
const char *slurm_script(void);
/* --time's value for a timeout: minutes, rounded up, plus one for the agents */
long long slurm_time_minutes(long long timeout_ms);

/* Slurm's job states, as the lifecycle needs them. */
enum slurm_phase {
	SLURM_WAITING,        /* PENDING, CONFIGURING, REQUEUED, held, suspended */
	SLURM_RUNNING,        /* RUNNING */
	SLURM_ENDING,         /* COMPLETING, SIGNALING, STAGE_OUT: what runs is being killed */
	SLURM_DONE,           /* COMPLETED: the script exited 0 */
	SLURM_CANCELLED,      /* CANCELLED (scancel), REVOKED */
	SLURM_TIMEOUT,        /* TIMEOUT, DEADLINE */
	SLURM_NODE_FAIL,      /* NODE_FAIL, BOOT_FAIL */
	SLURM_PREEMPTED,      /* PREEMPTED */
	SLURM_FAILED,         /* FAILED, OUT_OF_MEMORY, SPECIAL_EXIT, anything unknown */
};
enum slurm_phase slurm_phase_of(const char *state);
/* a phase after which the Slurm job never runs again (unless requeued: RestartCnt) */
int slurm_phase_final(enum slurm_phase p);

/*
 * The format of squeue's lines that slurm_squeue_parse() reads (-O), and the
 * parse: {"<id>": {"state", "restarts", "nodes", "reason", "left_s"}} added to
 * jobs for every well-formed line; others are skipped.  Returns the number
 * read.  left_s: what is left of the job's time limit (TimeLeft) in seconds,
 * SLURM_UNLIMITED for none, absent when squeue's word was not a time.
 */
#define SLURM_SQUEUE_FORMAT "JobID:|,State:|,RestartCnt:|,NodeList:|,TimeLeft:|,Reason:"
#define SLURM_UNLIMITED (-2LL)
int slurm_squeue_parse(const char *out, json_t *jobs);
/* Slurm's time ("1-02:03:04", "2:03:04", "3:04", "UNLIMITED") in seconds,
 * SLURM_UNLIMITED, or -1 for anything else ("INVALID", "NOT_SET", junk) */
long long slurm_time_parse(const char *s);

/*
 * A retry after a rank failure in the Slurm job (sid) its attempt failed in:
 * whether what is left of that job's time limit (left_ms; SLURM_UNLIMITED:
 * none; -1: unknown) covers the job's timeout (0: none) with
 * SLURM_REUSE_MARGIN_MS to spare, so that dtctl's timeout, not Slurm's, ends
 * it.  1 or 0, why saying which either way.
 */
#define SLURM_REUSE_MARGIN_MS 10000
int slurm_time_covers(long long sid, long long left_ms, long long timeout_ms, struct strbuf *why);

/*
 * dtsched's own active Slurm jobs at its start (`squeue --me -h -O
 * SLURM_MINE_FORMAT`): {"<id>": {"state", "restarts", "nodes", "reason",
 * "command", "comment"}} added to jobs for every well-formed line (the comment
 * last: whatever it holds stays in it); the number read.
 */
#define SLURM_MINE_FORMAT "JobID:|,State:|,RestartCnt:|,NodeList:|,Reason:|,Command:|,Comment:"
int slurm_mine_parse(const char *out, json_t *jobs);
/*
 * An attempt's --comment, "dtctl <job> attempt <n> head <head id>": 0 with the
 * job's id in job (size len) and n in *attempt when comment is exactly that
 * for head `head`; -1 for anything else (another head's, a user's own job).
 */
int slurm_comment_parse(const char *comment, const char *head, char *job, size_t len,
			int *attempt);

/* sinfo's per-node lines: `sinfo -h -N -p P -o SLURM_SINFO_FORMAT` */
#define SLURM_SINFO_FORMAT "%N|%G|%c|%t"
struct slurm_capacity {
	int nodes;            /* nodes of the partition that are not down/drained */
	int all_nodes;        /* all of them */
	int max_gpus;         /* the most GPUs (gres gpu) one node has */
	int max_cpus;         /* the most CPUs one node has */
	int nodes_with_gpus;  /* nodes (not down) with at least one GPU */
};
int slurm_sinfo_parse(const char *out, struct slurm_capacity *c);
/*
 * 0 when a job of `nodes` x `gpus` GPUs (or x `cpus` CPUs when gpus is 0)
 * can ever run on capacity c; else -1 with why, with the numbers, in why.
 */
int slurm_fits(const struct slurm_capacity *c, const char *partition, int nodes, int gpus,
	       int cpus, struct strbuf *why);

/*
 * The allocation of `pack: allocation` (backend-slurm.c): *nodes x *per GPUs
 * per node (CPUs when !gpu) for `slots` jobs at once of job_nodes x per_node
 * each, on as few of the partition's nodes (c) as hold them; given
 * (alloc_nodes > 0): alloc_nodes x alloc_per (0: a whole node's, c's most).
 */
void slurm_pack_size(const struct slurm_capacity *c, int gpu, int job_nodes, int per_node,
		     int slots, int alloc_nodes, int alloc_per, int *nodes, int *per);

/*
 * sbatch refused r with message msg: the option of cluster.yaml (or of the
 * job) that caused it, where Slurm's message says, as "cluster.yaml:3:12:
 * key 'partition' ('gpux')"; nothing appended when the message names none.
 */
void slurm_refusal_source(const struct cluster_config *cc, const char *msg, struct strbuf *sb);

#endif
