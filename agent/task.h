/*
 * task.h - the agent's task table: one JSON file per task in <home>/tasks/.
 *
 * The table is the only thing shared between the agent and the per-task
 * supervisors (supervise.c).  Each file has ONE writer at a time: the agent
 * creates it (state "starting"), then the task's supervisor owns it until the
 * task is final; only if the supervisor has vanished does the agent write the
 * final "lost" state.  Every write is atomic (temp file + rename), so a reader
 * sees either the old or the new version, and a kill -9 of anyone at any time
 * leaves a valid table.
 *
 * Ownership: a struct task owns its strings and spec; task_release() frees
 * them.  struct task_table owns its tasks.
 */
#ifndef DT_AGENT_TASK_H
#define DT_AGENT_TASK_H

#include <jansson.h>
#include <sys/types.h>
#include "proctree.h"
#include "strbuf.h"

#define TASK_ID_MAX 64

enum task_state {
	TASK_STARTING,
	TASK_RUNNING,
	TASK_STOPPING,
	TASK_EXITED,
	TASK_FAILED,
	TASK_LOST,
};

#define TASK_MARKER_HEX 32

struct task {
	char id[TASK_ID_MAX + 1];
	enum task_state state;
	json_t *spec;               /* the validated request (argv, env, cwd, log, ...) */
	long long pid, pgid;        /* the task's main process and its group (= pid) */
	long long sup_pid;          /* the supervisor */
	unsigned long long sup_start;  /* its start time (/proc/PID/stat field 22), against pid reuse */
	char *cgroup;               /* the task's cgroup directory, or NULL */
	char marker[TASK_MARKER_HEX + 1]; /* DT_TASK_INSTANCE of its processes; "" before
				     * the supervisor made one (or a pre-marker task file) */
	int has_exit;
	int exit_code;              /* 128+N when killed by signal N */
	int signal;
	char *error;                /* why it failed or was lost */
	int stop_requested;
	int leftovers_killed;       /* processes of the tree killed after the main one ended */
	char containment[16];       /* how its processes were held: "cgroup" or "subreaper" */
	long long log_lost_lines;   /* output lines that could not be written to its log */
	long long log_lost_bytes;
	char *log_error;            /* the first log write error (ENOSPC, EIO, ...), or NULL */
	long long created_us, started_us, ended_us;
	/* agent-side bookkeeping, not saved */
	long long file_mtime_ns;
	long long changed_ms;       /* dt_mono_ms() of the last state change seen */
	long long final_seq;        /* the heartbeat that first carried it final (0: none yet) */
	json_t *rank_exits;         /* mpi ranks that ended under it (protocol.h), or NULL */
	int vouches;                /* its supervisor reports its end on the agent's socket
				     * (report.h); saved; 0 for an older supervisor */
	int end_vouched;            /* its supervisor said it saved the end (report.h) */
	long long end_refused;      /* when a final state in its file was first refused
				     * (not vouched for); -1: logged */
};

const char *task_state_name(enum task_state s);
int task_state_parse(const char *name, enum task_state *out);
int task_state_final(enum task_state s);

/* [A-Za-z0-9._-]{1,64}, not starting with '.' */
int task_id_valid(const char *id);

/*
 * Check a POST /v1/tasks request and return the spec to store (a new
 * reference, with defaults filled in), or NULL with a message in err.
 */
json_t *task_spec_validate(const json_t *req, struct strbuf *err);

void task_init(struct task *t);
void task_release(struct task *t);
/* The file form (everything) or the API form (env values left out). */
json_t *task_to_json(const struct task *t, int api);
/* Fill t from the file form; -1 with a message if it is not a task. */
int task_from_json(struct task *t, const json_t *j, struct strbuf *err);

/*
 * The process tree of t for proctree.h: its group, cgroup and marker.  A task
 * file written before markers existed is matched by DT_TASK_ID=<id>, as then.
 */
struct proc_tree task_proc_tree(const struct task *t);

/* <dir>/<id>.json */
void task_path(struct strbuf *sb, const char *dir, const char *id);
/* Write atomically (mode 0600); -1 with errno set. */
int task_save(const char *dir, const struct task *t);
/* Read <dir>/<id>.json; -1 with a message. */
int task_load(const char *dir, const char *id, struct task *t, struct strbuf *err);

struct task_table {
	struct task **items;
	size_t nr, alloc;
};

#define TASK_TABLE_INIT { NULL, 0, 0 }

struct task *task_table_find(struct task_table *tt, const char *id);
/* Takes ownership of t (allocated with xmalloc). */
void task_table_add(struct task_table *tt, struct task *t);
void task_table_remove(struct task_table *tt, const char *id);
void task_table_release(struct task_table *tt);
/* Load every <dir>/<id>.json; bad files are skipped with a warning in err.
 * Returns the number loaded. */
int task_table_load_dir(struct task_table *tt, const char *dir, struct strbuf *err);

#endif
