/*
 * supervise.h - the per-task supervisor process.
 *
 * The agent never holds a task's pipes.  For each task it spawns
 * `dtagent --supervise <id> --home <home>` detached (double fork, own
 * session).  The supervisor starts the task in its own session and process
 * group (and cgroup where possible), writes its stdout/stderr line by line
 * into the task's log file, reaps it (it is the subreaper of the whole tree),
 * and records every state change in the task table (task.h).  A stop request
 * is SIGTERM to the supervisor, optionally sent with sigqueue() carrying the
 * grace period in milliseconds.  So the agent can be killed and restarted
 * at any time: tasks keep running and their logs and exit codes are kept.
 */
#ifndef DT_AGENT_SUPERVISE_H
#define DT_AGENT_SUPERVISE_H

#include <sys/types.h>

/* The supervisor itself; returns its exit code. */
int supervise_main(const char *home, const char *id);

/*
 * Spawn the supervisor of task `id` detached from the caller: `exe` is the
 * dtagent binary.  Async-signal-safe between fork and exec, so it may be
 * called from a threaded agent.  Returns the supervisor's pid or -1.
 */
pid_t supervisor_spawn(const char *exe, const char *home, const char *id);

#endif
