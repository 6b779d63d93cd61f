/*
 * cmd-drain.c - `dtctl drain NODE` (dtsched stops placing work on it) and
 * its undo `dtctl resume NODE`: the same request to dtsched but for its last
 * word (POST /v1/nodes/<name>/drain, /resume), so both live here.
 */
#include "builtin.h"
#include "head.h"
#include "json.h"
#include "parse-options.h"
#include "protocol.h"
#include "term.h"
#include "usage.h"

#include <stdio.h>

static int drain_or_resume(int argc, const char **argv, const char *suffix, const char *verb)
{
	const char *const usage[] = { verb[0] == 'd' ? "dtctl drain <node>" : "dtctl resume <node>",
				      NULL };
	struct option opts[] = { OPT_END() };
	json_t *reply;
	int code;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	if (argc != 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	code = head_api_id("POST", DT_PATH_NODE_PREFIX, argv[0], suffix, NULL, &reply, NULL);
	if (!code) {
		json_t *n = json_object_get(reply, "node");

		printf("%s: %s (state %s)\n", term_str(argv[0]), verb,
		       term_str(json_get_str(n, "state", "?")));
	}
	json_decref(reply);
	return code;
}

int cmd_drain(int argc, const char **argv)
{
	return drain_or_resume(argc, argv, DT_PATH_DRAIN_SUFFIX, "drained");
}

int cmd_resume(int argc, const char **argv)
{
	return drain_or_resume(argc, argv, DT_PATH_RESUME_SUFFIX, "resumed");
}
