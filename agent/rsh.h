/*
 * rsh.h - `dtagent rsh HOST WORD...`: Open MPI's remote launcher, through
 * the node agents instead of ssh.
 *
 * The mpi launcher (scheduler/launch.c) gives mpirun
 *
 *	--mca plm_rsh_agent "<bin>/dtagent rsh" --mca plm_rsh_no_tree_spawn 1
 *	--mca orte_leave_session_attached 1
 *
 * so that mpirun, where it would run `ssh HOST orted ...` for each other
 * node, runs `dtagent rsh HOST orted ...`.  This mode starts that command
 * as a task of HOST's agent (POST /v1/tasks, signed with the cluster key
 * from $DTCTL_HOME/secret, which every task of an agent has), then waits for
 * the task to end and exits with its exit code, as ssh would.  On SIGTERM,
 * SIGINT or SIGHUP (mpirun tearing down, or the job's tree being stopped)
 * it stops the remote task (DELETE) before it exits, as a dropped ssh
 * session would hang up the remote side.
 *
 * Why: an ssh connection costs the head node 100-300 ms of CPU (key
 * exchange, authentication), the agents are already connected and
 * authenticated, and an orted started by an agent lives in that node's
 * task table and cgroup like every other process of the job (Slurm starts
 * orted through slurmd for the same reasons).
 *
 * The words are joined with spaces and run by /bin/sh -c, exactly what
 * sshd does with a remote command: they are Open MPI's own command line
 * (its orted and MCA arguments, quoted by Open MPI for a remote shell), never
 * a user's string.  orte_leave_session_attached keeps the orted from
 * daemonizing, so it stays the task's main process.
 *
 * Environment (set by dtsched on the mpirun task, inherited through mpirun):
 *	DT_ORTED_AGENTS  "host=port,host=port,..."  each node's agent port, by
 *	                 the host string of the hostfile
 *	DT_TASK_ID       the mpirun task's id "<job>.<attempt>.mpirun"; the
 *	                 orted task is "<job>.<attempt>.orted-<host>"
 *	DT_JOB_ID        the orted task's job_id label
 *	DT_JOB_DIR       the orted's output goes to <dir>/logs/orted-<host>.log
 *	DT_ORTED_CAP     team mode (set by the agent that starts a user's mpirun):
 *	DT_ORTED_KEY     the job's capability "JOB USER UID GID" and its key
 *	                 (auth.h dt_auth_cap), used instead of the secret, which
 *	                 the user cannot read (docs/team.md)
 * Failures to reach the agent or start the task exit 255, like ssh.
 */
#ifndef DT_AGENT_RSH_H
#define DT_AGENT_RSH_H

#include "strbuf.h"

/* argv[0] is "rsh"; returns the exit code. */
int rsh_main(int argc, const char **argv);

/*
 * The port for host in a DT_ORTED_AGENTS map, or -1.  An exact match first;
 * then, for a host name (not an address), the entry whose name up to its
 * first '.' equals it (Open MPI strips domains from host names).
 */
int rsh_agent_port(const char *map, const char *host);

/* The orted task's id for host, from the mpirun task's id (see above):
 * only [A-Za-z0-9._-], at most 64 bytes (a long one ends in a hash). */
void rsh_task_id(struct strbuf *out, const char *mpirun_id, const char *host);

/* words joined by single spaces (what ssh sends as the remote command) */
void rsh_join(struct strbuf *out, int n, const char **words);

#endif
