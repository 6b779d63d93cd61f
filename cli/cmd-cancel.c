/*
 * cmd-cancel.c - `dtctl cancel JOB...`: ask dtsched to cancel each job
 * (POST /v1/jobs/<id>/cancel); a running job's ranks are then stopped by
 * their agents.  `--signal SIG` sends SIG to every rank of each running job
 * instead (POST /v1/jobs/<id>/signal) and cancels nothing, like Slurm's
 * `scancel --signal`.  The exit code is the first failure's.
 */
#include "builtin.h"
#include "head.h"
#include "json.h"
#include "parse-options.h"
#include "protocol.h"
#include "term.h"
#include "units.h"
#include "usage.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int send_signal(const char *id, int sig)
{
	json_t *body = json_pack("{s:i}", "signal", sig), *reply = NULL;
	int code = head_api_id("POST", DT_PATH_JOB_PREFIX, id, DT_PATH_SIGNAL_SUFFIX, body,
			       &reply, NULL);

	if (!code)
		printf("%s: SIG%s sent to its ranks (%lld task%s)\n", term_str(id),
		       sigabbrev_np(sig), json_get_int(reply, "tasks", 0),
		       json_get_int(reply, "tasks", 0) == 1 ? "" : "s");
	json_decref(body);
	json_decref(reply);
	return code;
}

static int cancel_one(const char *id)
{
	json_t *reply = NULL;
	int code = head_api_id("POST", DT_PATH_JOB_PREFIX, id, DT_PATH_CANCEL_SUFFIX, NULL,
			       &reply, NULL);

	if (!code) {
		const char *st = json_get_str(json_object_get(reply, "job"), "state", "?");

		if (!strcmp(st, DT_JOB_RUNNING))
			printf("%s: cancelling (its ranks are being stopped)\n", term_str(id));
		else if (!strcmp(st, DT_JOB_CANCELLED))
			printf("%s: CANCELLED\n", term_str(id));
		else
			printf("%s: already %s\n", term_str(id), term_str(st));
	}
	json_decref(reply);
	return code;
}

int cmd_cancel(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl cancel [--signal <sig>] <job>...", NULL };
	const char *sigarg = NULL;
	struct option opts[] = {
		OPT_STRING('s', "signal", &sigarg, "sig",
			   "send this signal (USR1, SIGUSR1 or 10) to every rank of each running job "
			   "instead; it goes on running"),
		OPT_END()
	};
	int ret = 0, sig = 0;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	if (argc < 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (sigarg && (sig = parse_signal(sigarg)) < 0) {
		error("--signal: '%s' is not a signal (a name such as USR1 or SIGUSR1, or a number "
		      "from 1 to %d)", sigarg, DT_SIGNAL_MAX);
		return DT_EXIT_USAGE;
	}
	for (int i = 0; i < argc; i++) {
		int code = sig ? send_signal(argv[i], sig) : cancel_one(argv[i]);

		ret = ret ? ret : code;
	}
	return ret;
}
