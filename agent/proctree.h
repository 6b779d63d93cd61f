/*
 * proctree.h - finding and signalling every process of a task, and the
 * task's cgroup v2.
 *
 * A task's tree is the union of (1) its process group, (2) the processes in
 * its cgroup, when one could be made, and (3) every process whose
 * environment carries its marker (DT_TASK_INSTANCE=<random>, unique to the
 * task's run): that catches descendants that called setsid() or changed
 * their group where no cgroup is available, and (4) every descendant of
 * `parent`, the task's supervisor, which is a child subreaper: a daemon
 * that double-forked and cleared its environment is reparented to it.  The
 * calling process is never part of it.  Zombies count as gone.
 */
#ifndef DT_AGENT_PROCTREE_H
#define DT_AGENT_PROCTREE_H

#include <jansson.h>
#include <sys/types.h>
#include "strbuf.h"

struct proc_tree {
	pid_t pgid;              /* 0 if unknown */
	const char *cgroup;      /* cgroup directory or NULL */
	const char *marker_name; /* environment entry marker_name=marker, or NULL */
	const char *marker;
	pid_t parent;            /* every descendant of this process, or 0 */
	/* the start time (/proc/PID/stat's, clock ticks since boot) of the first
	 * process that can be the task's, or 0: one that started before it is
	 * matched by its group and parent alone, its environment not read (it
	 * cannot have inherited a marker made later; a read of every process's
	 * environment was most of the scan at every task's end) */
	unsigned long long since;
};

/* Send sig to every live process of the tree; returns how many there were. */
int proc_tree_signal(const struct proc_tree *t, int sig);
/*
 * Send sig to the ranks of an mpi launcher's task (mpirun's or an orted's)
 * once each, and to none of the launcher's own processes: every process of
 * the tree below a rank logger (agent/ranklog.h), the processes that run the
 * file logger_exe names (compared by inode through /proc/PID/exe, the
 * kernel's link, never a name the job could set) while their parent does
 * not.  mpirun, the orteds, `dtagent rsh` and the loggers get nothing: mpirun
 * and the loggers would pass the signal on a second time (Open MPI forwards
 * SIGUSR1/2, SIGTSTP, SIGCONT, SIGALRM, SIGABRT to every rank), and mpirun
 * ends the whole job on SIGTERM, SIGINT or SIGHUP.  Returns how many
 * processes were signalled (0 before the first rank started).
 */
int proc_tree_signal_ranks(const struct proc_tree *t, int sig, const char *logger_exe);
/* Count the live processes of the tree. */
int proc_tree_count(const struct proc_tree *t);
/*
 * 1 if the tree is certainly empty, known without walking /proc: the caller
 * is t->parent, a child subreaper with no child left, and t->cgroup (which
 * must be set) has no live process.  0 when it may not be empty: count it.
 */
int proc_tree_empty_quick(const struct proc_tree *t);
/* Append the tree's live processes to *pids (ALLOC_GROW'n, *nr of *alloc). */
void proc_tree_pids(const struct proc_tree *t, pid_t **pids, size_t *nr, size_t *alloc);
/*
 * The same, each with its start time (/proc/PID/stat field 22) read in the
 * same read that made it a member of the tree: a user of the number later
 * (a pidfd, a signal) checks that the process there still started then, so a
 * number freed and taken by another process since the scan is not it.
 */
struct proc_id {
	pid_t pid;
	unsigned long long start;
};
void proc_tree_procs(const struct proc_tree *t, struct proc_id **v, size_t *nr, size_t *alloc);

/* Start time of pid (clock ticks since boot, /proc/PID/stat field 22) and
 * its state letter; 0 if there is no such process. */
unsigned long long proc_start_time(pid_t pid, char *state);
/* pid exists, is not a zombie and (if start != 0) started at `start`. */
int proc_alive(pid_t pid, unsigned long long start);

/*
 * Whether pid is `ancestor` or one of its descendants (the parent chain in
 * /proc/PID/stat), where ancestor started at ancestor_start (0: any start,
 * else a recycled pid is not it).  How the agent knows that a report came
 * from inside a task (report.h): the task's supervisor is a subreaper, so
 * every process of its tree that has not been adopted by another subreaper
 * of that tree descends from it.
 */
int proc_descends_from(pid_t pid, pid_t ancestor, unsigned long long ancestor_start);

/*
 * Make <cgroup2 mount><our cgroup>/dtctl/<name> or else <mount>/dtctl/<name>;
 * 0 and the directory in dir, or -1 with the reason in why (no cgroup v2,
 * no permission, ...).  A directory that exists already is never used: it
 * belongs to another task.  Limits (memory_bytes, pids) are written where the
 * controllers are available; failures to set them are added to why.
 */
int cgroup_create(const char *name, const json_t *limits, struct strbuf *dir, struct strbuf *why);
int cgroup_add_pid(const char *dir, pid_t pid);
/* Remove the (empty) cgroup directory. */
void cgroup_remove(const char *dir);

#endif
