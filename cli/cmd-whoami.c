/*
 * cmd-whoami.c - `dtctl whoami`: who dtsched takes you for (GET /v1/whoami):
 * your user name on the head, your roles (user, admin) and how you were
 * authenticated (the local socket's SO_PEERCRED in team mode, the cluster
 * secret in single-user mode).  docs/team.md.
 */
#include "builtin.h"
#include "head.h"
#include "json.h"
#include "parse-options.h"
#include "protocol.h"
#include "setup.h"
#include "term.h"
#include "usage.h"

#include <stdio.h>

int cmd_whoami(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl whoami [--json]", NULL };
	int json = 0, code;
	struct option opts[] = {
		OPT_BOOL(0, "json", &json, "print JSON"),
		OPT_END(),
	};
	json_t *reply = NULL, *r;
	size_t i;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (argc) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if ((code = head_api("GET", DT_PATH_WHOAMI, NULL, &reply, NULL)))
		return json_decref(reply), code;
	json_object_del(reply, "protocol");
	if (json) {
		json_doc_print(reply);
		json_decref(reply);
		return 0;
	}
	printf("user:   %s", term_str(json_get_str(reply, "user", "?")));
	if (json_is_integer(json_object_get(reply, "uid")))
		printf(" (uid %lld)", json_get_int(reply, "uid", -1));
	printf("\nroles: ");
	json_array_foreach(json_object_get(reply, "roles"), i, r)
		printf(" %s", term_str(json_string_value(r) ? json_string_value(r) : "?"));
	if (json_get_str(reply, "admin_because", NULL))
		printf(" (admin: %s)", term_str(json_get_str(reply, "admin_because", "")));
	printf("\nby:     %s\nmode:   %s\n", term_str(json_get_str(reply, "authenticated_by", "?")),
	       term_str(json_get_str(reply, "mode", "?")));
	if (json_get_str(reply, "head_key_fingerprint", NULL))
		printf("head:   %s\n", term_str(json_get_str(reply, "head_key_fingerprint", "")));
	json_decref(reply);
	return 0;
}
