/*
 * cmd-share.c - `dtctl share`: each user's and project's share, decayed
 * usage and current fair-share factor (like Slurm's sshare), with what they
 * hold and have queued now.  From dtsched's GET /v1/share (scheduler/acct.c);
 * docs/fairshare.md says how the numbers are made.
 */
#include "builtin.h"
#include "head.h"
#include "json.h"
#include "parse-options.h"
#include "protocol.h"
#include "setup.h"
#include "term.h"
#include "units.h"
#include "usage.h"

#include <stdio.h>

static void print_accts(const char *what, const json_t *v, int users)
{
	json_t *a;
	size_t i;

	/* FLOOR: a project's guaranteed_gpus (docs/fairshare.md, "Guaranteed floors") */
	printf("%-8s %-16s %-12s %8s %9s %12s %9s %6s %6s %8s%s\n", what, "NAME",
	       users ? "PROJECT" : "", "SHARE", "NORM", "USAGE-GPU-H", "FAIRSHARE", "GPUS",
	       "SLOTS", "PENDING", users ? "" : "  FLOOR");
	json_array_foreach(v, i, a) {
		printf("%-8s %-16.16s %-12.12s %8.2f %9.4f %12.3f %9.4f %6lld %6lld %8lld", "",
		       term_str(json_get_str(a, "name", "?")),
		       users ? term_str(json_get_str(a, "project", "")) : "",
		       json_number_value(json_object_get(a, "share")),
		       json_number_value(json_object_get(a, "norm_share")),
		       json_number_value(json_object_get(a, "usage_gpu_hours")),
		       json_number_value(json_object_get(a, "fairshare")),
		       json_get_int(a, "gpus_in_use", 0), json_get_int(a, "cpu_slots_in_use", 0),
		       json_get_int(a, "pending", 0));
		if (!users && json_get_int(a, "guaranteed_gpus", 0))
			printf("  %5lld", json_get_int(a, "guaranteed_gpus", 0));
		else if (!users)
			printf("  %5s", "-");
		printf("\n");
	}
}

int cmd_share(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl share [--json]", NULL };
	int json = 0, code;
	struct option opts[] = {
		OPT_BOOL(0, "json", &json, "print the users and projects as JSON"),
		OPT_END(),
	};
	json_t *reply = NULL;
	struct strbuf hl = STRBUF_INIT;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (argc) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if ((code = head_api("GET", DT_PATH_SHARE, NULL, &reply, NULL)))
		return json_decref(reply), code;
	if (json) {
		json_object_del(reply, "protocol");
		json_doc_print(reply);
		json_decref(reply);
		return 0;
	}
	format_duration(&hl, json_get_int(reply, "half_life_ms", 0));
	printf("usage decays by half in %s; total %.3f GPU-hours (decayed)\n", hl.buf,
	       json_number_value(json_object_get(reply, "total_usage_gpu_hours")));
	print_accts("USER", json_object_get(reply, "users"), 1);
	print_accts("PROJECT", json_object_get(reply, "projects"), 0);
	strbuf_release(&hl);
	json_decref(reply);
	return 0;
}
