/*
 * debug.h - per-rank evidence for hang attribution (POST /v1/debug, dtctl debug).
 *
 * For the processes of one job's tasks on this node, debug_collect() finds
 * the rank processes (the innermost process carrying OMPI_COMM_WORLD_RANK,
 * RANK, PMI_RANK or PMIX_RANK in its environment) and samples each over
 * sample_ms: process state, wchan, CPU use, and what the rank says itself:
 *
 *   dttrain   <job_dir>/debug/<rank>.dttrain (trainer/progress.h): phase,
 *             collective sequence number, step, time blocked in collectives;
 *   Python    <job_dir>/debug/<rank>.py-stack: a faulthandler dump of every
 *             thread, armed by the sitecustomize.py debug_task_env() puts
 *             first on PYTHONPATH (see debug_install_python());
 *   else      the main thread's native stack from `gdb -batch -p PID -ex bt`
 *             (run as the agent's user, never through a shell, 8 s at most,
 *             after the CPU sample: gdb stops the process while it reads it).
 *
 * Either is asked for with SIGUSR2, and only when the file's header names
 * the process's pid and /proc/PID/status says the signal is caught: a
 * process that did not arm it never gets one.  Every file read is in the
 * job directory, which user code writes: read through lib/safefile with
 * size limits, everything kept printable ASCII.
 *
 * RANK = {rank, node, pid, comm, state, wchan, cpu_pct, source: "dttrain" |
 *         "python" | "native" | "none", phase, seq (-1 unknown), step (-1), in_collective,
 *         progressed (seq or step moved during the sample), wait_ms (-1),
 *         phase_ms (-1), frames: ["func (file:line)", ...] innermost first,
 *         native_error?: why gdb gave no stack, gpus: [{index, utilization,
 *         used_memory}] (the GPUs NVML lists the process on)}
 */
#ifndef DT_AGENT_DEBUG_H
#define DT_AGENT_DEBUG_H

#include <jansson.h>
#include <sys/types.h>
#include "strvec.h"

#define DEBUG_SAMPLE_MS_DEFAULT 1000
#define DEBUG_SAMPLE_MS_MAX 5000
/*
 * Bounds of one request (issue 26, B5): at most DEBUG_MAX_PROCS processes
 * carrying a rank variable are looked at (the rest are counted in
 * "skipped"), and at most DEBUG_MAX_NATIVE gdb attaches are made (all at
 * once, 8 s each, so the whole request stays within dtsched's 15 s:
 * scheduler/hang.c); ranks beyond that get native_error "not sampled: ...".
 * A node runs one rank per GPU, and dttrain and Python ranks need no gdb.
 */
#define DEBUG_MAX_PROCS 256
#define DEBUG_MAX_NATIVE 8

/* {node, ranks: [RANK...], skipped} for the processes pids (any order,
 * duplicates ok); skipped: rank processes left out over DEBUG_MAX_PROCS. */
json_t *debug_collect(const char *node, const pid_t *pids, size_t nr, const char *job_dir,
		      long sample_ms);
/* The same for processes pinned by the start time their scan read
 * (proctree.h proc_tree_procs): a process at such a number that started at
 * another time (the number freed and taken since) is left alone.
 * debug_collect() reads the start times when called. */
struct proc_id;
json_t *debug_collect_procs(const char *node, const struct proc_id *procs, size_t nr,
			    const char *job_dir, long sample_ms);
/* Each rank's GPUs from the node's inventory (NVML's per-GPU processes):
 * "gpus": [{index, utilization, used_memory}] ([] when it has none). */
void debug_add_gpus(json_t *reply, const json_t *inv);
/* Write <home>/python/sitecustomize.py (at agent start); 0 or -1. */
int debug_install_python(const char *home);
/* For a job's task (DT_JOB_DIR in env): PYTHONFAULTHANDLER=1 and
 * <home>/python first on PYTHONPATH. */
void debug_task_env(const char *home, struct strvec *env);
/* Parse gdb's backtrace into frames, innermost first; returns how many. */
int debug_parse_gdb(const char *text, size_t len, json_t *frames, int max);
/* Parse a faulthandler dump (the last one in text) into frames of the main
 * thread, innermost first (at most max); returns how many. */
int debug_parse_pystack(const char *text, size_t len, json_t *frames, int max);

#endif
