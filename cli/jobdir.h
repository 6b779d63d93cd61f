/*
 * jobdir.h - finding a job's directory on the shared dir from the CLI.
 *
 * A job is named by its id (j-000042) or by the path of its directory.  The
 * shared dir is the command's cluster's (the_cluster.shared_dir, cli/setup.h).
 */
#ifndef DT_JOBDIR_H
#define DT_JOBDIR_H

#include "strbuf.h"

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

#endif
