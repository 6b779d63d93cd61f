/*
 * jobdir.h - a job seen from the CLI: finding its directory on the shared dir,
 * and the state the commands print for it.
 *
 * A job is named by its id (j-000042) or by the path of its directory.  The
 * shared dir is the command's cluster's (the_cluster.shared_dir, cli/setup.h).
 */
#ifndef DT_JOBDIR_H
#define DT_JOBDIR_H

#include "json.h"
#include "strbuf.h"

struct option;

/*
 * Resolve `job` to its directory in `out`: 0, or the exit code after
 * printing why (DT_EXIT_UNREACH: no cluster set up, DT_EXIT_USAGE: no such
 * job, as for every command: see lib/usage.h).
 */
int jobdir_resolve(struct strbuf *out, const char *job);
/* Read <jobdir>/state into sb (trimmed); -1 when it does not exist yet. */
int jobdir_read_state(const char *jobdir, struct strbuf *sb);
/* 1 if state names a terminal job state. */
int job_state_is_final(const char *state);
/*
 * The state `ps` and `show` print for a job of dtsched's reply: its "state",
 * or "STALLED" for a RUNNING job with silent ranks (its "stalled" list).
 */
const char *job_shown_state(const json_t *job);
/*
 * A pending job's place in the queue (its "priority", docs/fairshare.md):
 * position, priority and factors, what it waits for, its expected start.
 * Prints nothing for a job that is not pending.  `show` and `why` print it.
 */
void job_print_priority(const json_t *job);
/*
 * The start of a command about one job (`show`, `why`): parse argv (the
 * command's name first) against opts, which take one job argument, and GET
 * the job from dtsched.  0 with *reply (the caller's: json_decref) and *job
 * (a borrowed pointer into it), or the exit code (*reply is then NULL).
 */
int job_fetch_cmd(int argc, const char **argv, const struct option *opts,
		  const char *const *usage, json_t **reply, json_t **job);
/*
 * The two lines `show` and `why` open with: "job: ID (NAME), submitted by
 * USER" and "state: STATE: reason" (a pending job's reason only when it has
 * no place in the queue yet: job_print_priority() prints it as "waits for").
 */
void job_print_header(const json_t *job);

#endif
