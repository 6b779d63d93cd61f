/*
 * cmd-cancel.c - `dtctl cancel JOB...`: ask dtsched to cancel each job
 * (POST /v1/jobs/<id>/cancel); a running job's ranks are then stopped by
 * their agents.  The exit code is the first failure's.
 */
#include "builtin.h"
#include "head.h"
#include "json.h"
#include "parse-options.h"
#include "protocol.h"
#include "term.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>

int cmd_cancel(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl cancel <job>...", NULL };
	struct option opts[] = { OPT_END() };
	int ret = 0;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	if (argc < 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	for (int i = 0; i < argc; i++) {
		json_t *reply = NULL, *j;
		int code = head_api_id("POST", DT_PATH_JOB_PREFIX, argv[i], DT_PATH_CANCEL_SUFFIX,
				       NULL, &reply, NULL);

		if (code) {
			ret = ret ? ret : code;
		} else {
			const char *st;

			j = json_object_get(reply, "job");
			st = json_get_str(j, "state", "?");
			if (!strcmp(st, DT_JOB_RUNNING))
				printf("%s: cancelling (its ranks are being stopped)\n",
				       term_str(argv[i]));
			else if (!strcmp(st, DT_JOB_CANCELLED))
				printf("%s: CANCELLED\n", term_str(argv[i]));
			else
				printf("%s: already %s\n", term_str(argv[i]), term_str(st));
		}
		json_decref(reply);
	}
	return ret;
}
