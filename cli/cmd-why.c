/*
 * cmd-why.c - `dtctl why JOB`: why a pending job has not started (like
 * Slurm's sprio and squeue's reason): its place in the queue, its priority
 * and the factors it is made of (docs/fairshare.md), what it waits for (free
 * slots, a quota, the reservation of a job ahead), and when it is expected
 * to start.  From dtsched's GET /v1/jobs/<id>.
 */
#include "builtin.h"
#include "jobdir.h"
#include "json.h"
#include "parse-options.h"
#include "protocol.h"
#include "setup.h"
#include "term.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>

int cmd_why(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl why [--json] <job>", NULL };
	int json = 0, code;
	struct option opts[] = {
		OPT_BOOL(0, "json", &json, "print the job's state, reason and priority as JSON"),
		OPT_END(),
	};
	json_t *reply, *j;

	if ((code = job_fetch_cmd(argc, argv, opts, usage, &reply, &j)))
		return code;
	if (json) {
		json_t *o = json_pack("{s:O,s:O,s:O,s:O,s:O}", "id", json_object_get(j, "id"),
				      "state", json_object_get(j, "state"), "reason",
				      json_object_get(j, "reason"), "project",
				      json_object_get(j, "project"), "priority",
				      json_object_get(j, "priority") ? json_object_get(j, "priority") :
				      json_null());

		json_doc_print(o);
		json_decref(o);
		json_decref(reply);
		return 0;
	}
	job_print_header(j);
	if (strcmp(json_get_str(j, "state", ""), DT_JOB_PENDING))
		printf("why:        it is not waiting\n");
	job_print_priority(j);
	if (json_get_str(j, "reason", NULL) && !strcmp(json_get_str(j, "state", ""),
						     DT_JOB_PENDING) &&
	    !strncmp(json_get_str(j, "reason", ""), "quota:", 6))
		printf("hint:       it starts when the %s's running jobs free enough; "
		       "'dtctl share' shows what each uses\n",
		       strstr(json_get_str(j, "reason", ""), "project '") ? "project" : "user");
	json_decref(reply);
	return 0;
}
