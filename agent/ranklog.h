/*
 * ranklog.h - `dtagent rank-log DIR -- PROG ARGS...`: one MPI rank's output
 * into the job's log layout.
 *
 * The mpi launcher (scheduler/launch.c) runs every rank through this mode so
 * that mpirun jobs get the same files as agent-launched ones: the rank comes
 * from OMPI_COMM_WORLD_RANK (else PMIX_RANK, PMI_RANK, RANK), its stdout and
 * stderr go line by line, timestamped (agent/linelog.h), to DIR/<rank>.log,
 * signals sent to rank-log (SIGTERM from orted or mpirun, SIGINT, SIGHUP,
 * SIGQUIT, SIGUSR1/2) are forwarded to the program, and rank-log exits with
 * the program's exit code (128+N for signal N).  When the program ends,
 * DIR/../ranks/<rank>.json records {rank, node, pid, exit_code, signal,
 * started_at, ended_at}, which dtsched reads to name the first failing rank.
 * If rank-log itself is killed the program gets SIGKILL (PR_SET_PDEATHSIG).
 * rank-log is the subreaper of the program's orphans, so that the rank's
 * processes are the ones below it: a user's signal (dtctl cancel --signal)
 * goes from the supervisor of mpirun's or the orted's task to those
 * directly, not through rank-log (agent/proctree.h).
 */
#ifndef DT_AGENT_RANKLOG_H
#define DT_AGENT_RANKLOG_H

#include "strbuf.h"

/* argv[0] is "rank-log"; returns the exit code. */
int ranklog_main(int argc, const char **argv);

/*
 * GPU indexes "0,1" (an agent's GPU numbers) as the devices they stand for
 * in map ("2,3": the i-th entry is the agent's GPU i), appended to out.  An
 * index past the map or not a number stays as it is ("-1" for CPU tasks).
 * The agent maps its tasks' GPUs with it (agent.c), and the mpi rank logger
 * its rank's with the DT_GPU_MAP its agent put in the environment.
 */
void gpu_map_translate(const char *map, const char *indexes, struct strbuf *out);

#endif
