/*
 * run-command.h - the one child-process API.
 *
 * Fill a struct child_process (argv in .args, extra environment in .env),
 * then start_command() and finish_command(), or run_command() for both.
 * Never goes through a shell: args are passed to execvp() verbatim.
 *
 * Descriptor fields: 0 = inherit, -1 = make a pipe and store the parent's end
 * there after start_command(), >0 = dup that descriptor.  An exec failure
 * (missing program, permission) is reported by start_command() itself, not
 * as a mysterious exit code 127.
 *
 * run_processes_parallel() keeps up to `jobs` children running, captures each
 * one's stdout+stderr, and calls back as tasks finish (git's parallel runner).
 */
#ifndef DT_RUN_COMMAND_H
#define DT_RUN_COMMAND_H

#include <sys/types.h>
#include "strbuf.h"
#include "strvec.h"

struct child_process {
	struct strvec args;
	struct strvec env;          /* NAME=value entries added to (or replacing) environ */
	const char *dir;            /* working directory, or NULL */
	int in, out, err;
	unsigned no_stdin : 1;
	unsigned no_stdout : 1;
	unsigned no_stderr : 1;
	unsigned stdout_to_stderr : 1;
	unsigned err_to_out : 1;    /* stderr goes where stdout goes */
	unsigned new_session : 1;   /* setsid(): own session and process group */
	unsigned clean_env : 1;     /* start from an empty environment */
	pid_t pid;
};

#define CHILD_PROCESS_INIT { STRVEC_INIT, STRVEC_INIT, NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1 }

void child_process_init(struct child_process *cp);
void child_process_clear(struct child_process *cp);
int start_command(struct child_process *cp);
/* Wait; returns the exit code, 128+signal for a signal, -1 on error. */
int finish_command(struct child_process *cp);
int run_command(struct child_process *cp);
/* Run argv, capture stdout (limit bytes) into out; returns exit code or -1. */
int capture_command(struct child_process *cp, struct strbuf *out, size_t limit);

/* Wait status to the conventional exit code (128+sig for signals). */
int wait_status_to_code(int status);

/*
 * Where execvp() would find program `name` with PATH `path` (NULL or empty:
 * execvp's default), as the shell would: the first executable regular file
 * among PATH's dirs; a name with a '/' as it is, against `dir` when relative
 * (NULL: the current dir).  0 with the path in *found, or -1 when there is
 * none.  Nothing runs.
 */
int locate_program(const char *name, const char *path, const char *dir, struct strbuf *found);
/*
 * The index of the argv word that names the program a command runs: 0, or
 * through env(1) (`/usr/bin/env [-i] [NAME=VALUE...] prog`, W&B's ${env})
 * the first word after env's options and assignments; -1 when none.
 */
int argv_program_index(const char *const *argv, size_t nr);

struct parallel_opts {
	int jobs;                  /* at most this many at once (>= 1) */
	int timeout_ms;            /* per child, 0 = none; expiry kills its process group */
	/* Fill cp for the next task; return 1 if there is one, 0 when done. *task
	 * may be set to anything the caller wants back in done(). */
	int (*next)(struct child_process *cp, void *data, void **task);
	/* Called once per task with its exit code (-1 if it could not start,
	 * 124 on timeout) and everything it printed. */
	void (*done)(int code, struct strbuf *output, void *data, void *task);
	void *data;
};

/* Returns 0 when every task ran (whatever their exit codes), -1 on error. */
int run_processes_parallel(const struct parallel_opts *opts);

#endif
