/*
 * jobdir.h - finding a job's directory on the shared dir from the CLI.
 *
 * A job is named by its id (j-000042) or by the path of its directory.  The
 * shared dir comes from --shared-dir, $DTCTL_SHARED_DIR, or the cluster file
 * (-c FILE, $DTCTL_CLUSTER, ~/.dtctl/cluster.yaml, in that order).
 */
#ifndef DT_JOBDIR_H
#define DT_JOBDIR_H

#include "strbuf.h"

/*
 * Resolve `job` to its directory in `out`.  `cluster_file` and `shared_dir`
 * may be NULL.  Returns 0, or the exit code (2: no cluster file or bad config,
 * 1: no such job) after printing why.
 */
int jobdir_resolve(struct strbuf *out, const char *job, const char *cluster_file,
		   const char *shared_dir);
/* The default cluster file path (see above) into sb. */
void cluster_file_default(struct strbuf *sb, const char *given);
/* Read <jobdir>/state into sb (trimmed); -1 when it does not exist yet. */
int jobdir_read_state(const char *jobdir, struct strbuf *sb);
/* 1 if state names a terminal job state. */
int job_state_is_final(const char *state);

#endif
