/*
 * slurm.h - dtctl inside a Slurm allocation (docs/slurm.md).
 *
 * The allocation becomes a short-lived dtctl cluster: a head (dtsched) where
 * dtctl runs, and our agent on every allocated node started as ONE Slurm step
 * (`srun --overlap -N n -n n --ntasks-per-node=1 dtagent --slurm --head A:P`),
 * so the ranks the agents start stay inside Slurm's step (accounting, kill on
 * cancel) while launch, rank env, GPU binding, logs, hang attribution and
 * health work as on dtctl's own cluster.  No SSH: dtagent comes from the
 * installation dtctl runs from, which the nodes see at the same path.
 *
 * Two uses:
 *   - the agents' step on its own, for a head that runs elsewhere (the Slurm
 *     backend's sbatch script, `dtctl export slurm`): slurm_agents_argv() or
 *     `dtctl slurm-agents --head A:P` (cmd-slurm-agents.c);
 *   - `dtctl run` / `dtctl sweep` in an sbatch script or an salloc shell
 *     ($SLURM_JOB_ID, or --in-allocation): cluster_setup() calls
 *     slurm_session_prepare() before it reads the cluster (a private home
 *     with a generated cluster.yaml) and slurm_session_start() after (head,
 *     agents' step, every node UP); a guard process tears it all down when
 *     dtctl exits for any reason or the step ends (allocation cancelled).
 */
#ifndef DT_CLI_SLURM_H
#define DT_CLI_SLURM_H

#include "strbuf.h"
#include "strvec.h"

struct slurm_alloc {
	char *job_id;               /* $SLURM_JOB_ID */
	struct strvec nodes;        /* $SLURM_JOB_NODELIST expanded by scontrol, in order */
	int cpus_min;               /* fewest CPUs of a node ($SLURM_JOB_CPUS_PER_NODE), 0: unknown */
	const char *step_name;      /* the agents' step's name; NULL: "dtctl-agents" */
};

/* --in-allocation of run and sweep: set by their option tables before the setup */
extern int slurm_in_allocation_opt;

/* The allocation of this process's environment; 0, or -1 with a message in err. */
int slurm_alloc_load(struct slurm_alloc *al, struct strbuf *err);
void slurm_alloc_release(struct slurm_alloc *al);

/*
 * The srun line starting one dtagent --slurm per node of al, joining the
 * head at head ("ADDR:PORT").  The secret travels as secret_file (--secret,
 * a 0600 file every node sees) or, when NULL, in $DTCTL_AGENT_SECRET of
 * srun's environment (srun exports it; the agent takes it out of its own).
 * dtagent is the program's path on the nodes.
 */
void slurm_agents_argv(struct strvec *argv, const struct slurm_alloc *al, const char *dtagent,
		       const char *head, const char *secret_file);

/*
 * Ask the agents' step named `name` in job `job_id` to end the way Slurm
 * ends a step at a job's end, but without the SIGKILL that follows srun's
 * own SIGTERM handling ("forcing job termination"): `scancel --signal=TERM`
 * of that step, so every agent stops its tasks and removes its home.  0 if
 * the step was found and signalled.
 */
int slurm_step_term(const char *job_id, const char *name);

/* Whether this command should run in an allocation of its own (see above). */
int slurm_session_wanted(void);
/* Make the session's home and cluster.yaml, point $DTCTL_HOME at it: 0 or an exit code. */
int slurm_session_prepare(void);
/* Head, agents' step and guard, nodes UP (after the cluster is loaded): 0 or an exit code. */
int slurm_session_start(void);
/* Whether slurm_session_prepare() made a session in this process. */
int slurm_session_active(void);
/*
 * Another shell of the allocation ($SLURM_JOB_ID, $DTCTL_SHARED_DIR; not a
 * rank of ours): the cluster.yaml of the head a `dtctl run`/`sweep` runs in
 * it, from the user's own record on the shared dir (only theirs and 0700:
 * see slurm.c).  1 and *file (malloc'd) when there is one, 0 when none,
 * -DT_EXIT_USAGE after saying why when there are several.
 */
int slurm_session_find(char **file);

#endif
