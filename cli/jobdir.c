/*
 * jobdir.c - job directories on the shared dir, job states (see jobdir.h).
 */
#include "jobdir.h"
#include "head.h"
#include "parse-options.h"
#include "protocol.h"
#include "safefile.h"
#include "setup.h"
#include "term.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int jobdir_resolve(struct strbuf *out, const char *job)
{
	int code;

	if (strchr(job, '/')) {
		if (!is_dir(job))
			return error("no job directory '%s'", job), DT_EXIT_USAGE;
		strbuf_addstr(out, job);
		return 0;
	}
	if ((code = cluster_setup(NEED_SHARED)))
		return code;
	strbuf_addf(out, "%s/jobs/%s", the_cluster.shared_dir, job);
	if (!is_dir(out->buf)) {
		error("no job '%s' (looked in '%s')", job, out->buf);
		return DT_EXIT_USAGE;
	}
	return 0;
}

int jobdir_read_state(const char *jobdir, struct strbuf *sb)
{
	struct strbuf path = STRBUF_INIT;
	ssize_t n;

	strbuf_addf(&path, "%s/state", jobdir);
	strbuf_reset(sb);
	n = sf_read_path(path.buf, sb, 4096, NULL);
	strbuf_release(&path);
	if (n < 0)
		return -1;
	strbuf_trim(sb);
	return 0;
}

int job_state_is_final(const char *state)
{
	static const char *final[] = { "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
				       "NODE_FAIL", "PRUNED" };

	for (size_t i = 0; i < ARRAY_SIZE(final); i++)
		if (!strcmp(state, final[i]))
			return 1;
	return 0;
}

const char *job_shown_state(const json_t *job)
{
	if (!strcmp(json_get_str(job, "state", ""), DT_JOB_RUNNING) &&
	    json_array_size(json_object_get(job, "stalled")))
		return "STALLED";
	return json_get_str(job, "state", "?");
}

void job_print_priority(const json_t *job)
{
	const json_t *p = json_object_get(job, "priority");
	const json_t *f = json_object_get(p, "factors"), *fl;

	if (strcmp(json_get_str(job, "state", ""), DT_JOB_PENDING))
		return;
	if (!p) {
		printf("queue:      not placed yet (dtsched orders the queue at its next pass)\n");
		return;
	}
	printf("queue:      position %lld, priority %.1f (project %s)\n",
	       json_get_int(p, "position", 0), json_number_value(json_object_get(p, "value")),
	       term_str(json_get_str(job, "project", "?")));
	printf("factors:    fairshare %.4f, age %.4f, size %.4f\n",
	       json_number_value(json_object_get(f, "fairshare")),
	       json_number_value(json_object_get(f, "age")),
	       json_number_value(json_object_get(f, "size")));
	printf("waits for:  %s\n", term_str(json_get_str(job, "reason", "its turn")));
	if ((fl = json_object_get(p, "floor")))
		printf("floor:      project %s is guaranteed %lld GPUs, %lld in use: this job is %s\n",
		       term_str(json_get_str(job, "project", "?")),
		       json_get_int(fl, "guaranteed_gpus", 0), json_get_int(fl, "gpus_in_use", 0),
		       json_is_true(json_object_get(fl, "within")) ?
		       "within it (first in the queue; GPUs lent to other projects are reclaimed "
		       "for it)" : "beyond it (it waits its turn)");
	if (json_get_str(p, "expected_start", NULL))
		printf("expected:   %s (%s)\n", term_str(json_get_str(p, "expected_start", "")),
		       json_is_true(json_object_get(p, "reserved")) ?
		       "the slots it needs are reserved for it; later jobs only backfill around "
		       "them" : "the queue simulated in priority order, each job running until "
		       "its timeout");
	else
		printf("expected:   unknown: %s\n",
		       term_str(json_get_str(p, "expected_unknown", "not estimated yet")));
}

int job_fetch_cmd(int argc, const char **argv, const struct option *opts,
		  const char *const *usage, json_t **reply, json_t **job)
{
	int code;

	*reply = NULL;
	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (argc != 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	code = head_api_id("GET", DT_PATH_JOB_PREFIX, argv[1], "", NULL, reply, NULL);
	if (code) {
		json_decref(*reply);
		*reply = NULL;
		return code;
	}
	*job = json_object_get(*reply, "job");
	return 0;
}

void job_print_header(const json_t *job)
{
	int queued = !strcmp(json_get_str(job, "state", ""), DT_JOB_PENDING) &&
		json_object_get(job, "priority");
	const char *reason = queued ? NULL : json_get_str(job, "reason", NULL);

	printf("job:        %s (%s), submitted by %s\n", term_str(json_get_str(job, "id", "?")),
	       term_str(json_get_str(job, "name", "?")), term_str(json_get_str(job, "user", "?")));
	printf("state:      %s%s%s\n", term_str(job_shown_state(job)), reason ? ": " : "",
	       reason ? term_str(reason) : "");
}
