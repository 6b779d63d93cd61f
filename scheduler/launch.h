/*
 * launch.h - the exact processes a placed job becomes: one pure function from
 * (job spec, placement, node addresses) to every rank's argv and environment,
 * or to the mpirun command line and hostfile, down to the agent request that
 * starts each task (launch_task_request()).  dtsched builds the plan once per
 * attempt and sends exactly those requests, and `dtctl run --dry-run` prints
 * the same plan (scheduler/jobs-launch.c job_plan() builds both), so what is
 * shown is what runs; the plan an attempt was started with is kept in
 * <job_dir>/plan.json.
 *
 * Agent launcher: every rank is a task on its node's agent with the
 * torchrun-compatible environment of docs/run.md (RANK, LOCAL_RANK, WORLD_SIZE,
 * LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK, MASTER_ADDR, MASTER_PORT,
 * CUDA_VISIBLE_DEVICES, DT_JOB_ID, DT_JOB_DIR, DT_METRICS_FILE, DT_RESUME,
 * DT_PREEMPT_SIGNAL).
 * A GPU task's CUDA_VISIBLE_DEVICES travels once, as the request's
 * cuda_visible_devices (the agent sets the variable from it and reports it,
 * which GPU accounting reads); it is not in the task's env.
 * Both: cluster.yaml's setup.env under the job's env; the tasks start in the
 * job's workdir, else in the submit directory where it exists on the node.
 * MPI launcher: one task, on the first node, runs mpirun over a generated
 * hostfile; each rank goes through `dtshim rank-log` so its output lands in
 * logs/<rank>.log like the agent launcher's.  mpirun starts the orted of
 * every other node through that node's agent (`dtagent rsh`, agent/rsh.h),
 * or over ssh with init's ssh configuration when mpi.orted_launch is ssh.
 *
 * Ownership: launch_plan_release() frees everything inside; the plan keeps
 * copies of what it was built from.
 */
#ifndef DT_LAUNCH_H
#define DT_LAUNCH_H

#include <jansson.h>
#include "config.h"
#include "strbuf.h"
#include "strvec.h"

struct launch_node {
	const char *name;
	const char *address;          /* how other nodes reach it (MASTER_ADDR) */
	const char *slots;            /* "0,1" GPU indices, or NULL for CPU slots */
	const char *host;             /* its name in the hostfile (default: name) */
	int agent_port;               /* its agent's port (mpi launcher, orted via agents) */
	const char *interface;        /* the interface its agent reaches dtsched on, or NULL */
	const char *cidr;             /* that interface's subnet ("10.88.0.0/24"), or NULL */
};

struct launch_task {
	int node;                     /* index into the plan's nodes */
	int rank;                     /* -1 for the mpirun task */
	int local_rank;
	char *id;                     /* the agent task id: <job>.<attempt>.r<rank> or .mpirun */
	struct strvec argv;
	struct strvec env;            /* NAME=value; never CUDA_VISIBLE_DEVICES of a GPU task */
	char *cuda_visible_devices;   /* NULL when not a GPU job */
	char *log;                    /* the log file it writes */
};

/* a node of the plan, as the launch reaches it */
struct launch_place {
	char *name;
	char *address;                /* its agent's address (and MASTER_ADDR for the first) */
	int agent_port;
	char *slots;                  /* "0,1", NULL for CPU slots */
};

struct launch_plan {
	char *job_id;
	char *job_dir;
	int nr_nodes;
	struct launch_place *place;   /* nr_nodes of them, in rank order */
	int per_node;
	int world;
	int gpu;                      /* 1 when slots are GPUs */
	enum launcher launcher;
	char *master_addr;
	int master_port;
	struct launch_task *tasks;    /* ranks (agent) or the single mpirun task */
	size_t nr_tasks;
	char *hostfile;               /* Open MPI hostfile text (every launcher, for the record) */
	char *cwd;                    /* every task's working directory (job workdir), or NULL */
	char *submit_dir;             /* without cwd: start there where it exists, or NULL */
	int attempt;
	int grace_ms;                 /* SIGTERM -> SIGKILL when a task is stopped */
	char *log_root;               /* the shared dir: the agents open logs below it */
	char *container;              /* the job's container: image (file or name), or NULL */
	char *container_digest;       /* "sha256:..." of an image file, or NULL */
	char *run_as;                 /* team mode: the user every task runs as, or NULL */
	long long run_uid, run_gid;   /* their ids on the head (the agents compare) */
	int umask;                    /* of the tasks' files; 0: dtsched's (job_files) */
};

struct launch_opts {
	const char *job_id;
	const char *job_dir;          /* <shared_dir>/jobs/<id> */
	int master_port;
	const char *resume;           /* checkpoint for DT_RESUME, or NULL */
	const char *ssh_config;       /* for mpirun's plm_rsh_args, or NULL */
	const char *net_interface;    /* cluster.yaml network.interface: btl/oob_tcp_if_include,
				       * NCCL/GLOO_SOCKET_IFNAME (else each node's interface) */
	const char *bin_dir;          /* node-side dir of dtagent/dttrain, or NULL (PATH) */
	const struct kvlist *extra_env;  /* e.g. DT_TRIAL_ID, DT_PARAM_* from sweeps */
	const struct kvlist *setup_env;  /* cluster.yaml setup.env (the job's env wins) */
	const char *submit_dir;       /* where `dtctl run` ran: the ranks' directory where it
				       * exists on their node, unless the job has a workdir */
	int attempt;                  /* 0 for the first run: TORCHELASTIC_RESTART_COUNT */
	int max_restarts;             /* the job's retries: TORCHELASTIC_MAX_RESTARTS */
	int orted_ssh;                /* mpi: start orted over ssh (mpi.orted_launch: ssh)
				       * instead of through the agents (agent/rsh.h) */
	int grace_ms;                 /* every task's grace_ms (its stop) */
	const char *run_as;           /* team mode: the job's user (docs/team.md), or NULL */
	long long run_uid, run_gid;
	int umask;                    /* 0: dtsched's (sf_umask) */
	const char *log_root;         /* the shared dir, below which the log files are */
	const char *preempt_signal;   /* a preemptible class's signal ("USR1"): DT_PREEMPT_SIGNAL,
				       * on which dttrain checkpoints (docs/fairshare.md), or NULL */
};

int launch_plan_build(struct launch_plan *p, const struct job_config *job,
		      const struct launch_node *nodes, int nr_nodes,
		      const struct launch_opts *o, struct strbuf *err);
void launch_plan_release(struct launch_plan *p);
/*
 * The POST /v1/tasks body (protocol.h) that starts task i of p on the agent
 * of p->place[p->tasks[i].node]: the only way a task of a plan is started.
 */
json_t *launch_task_request(const struct launch_plan *p, size_t i);
/*
 * The plan as JSON: {job_id, job_dir, launcher, nodes (a count), per_node,
 * world_size, master_addr, master_port, hostfile, cwd, submit_dir,
 * placement: [{node, address, port, slots}], tasks: [TASK]}, where TASK is
 * launch_task_request() with its node index and local_rank added and its env
 * as the process sees it (CUDA_VISIBLE_DEVICES included).  What --dry-run
 * shows and <job_dir>/plan.json holds.
 */
json_t *launch_plan_to_json(const struct launch_plan *p);
/* The program argv of one rank (dttrain flags from trainer:, or command:). */
void launch_job_argv(struct strvec *argv, const struct job_config *job, const char *bin_dir);

#endif
