/*
 * cmd-api.c - `dtctl api METHOD PATH [JSON]`: a signed request to dtsched
 * (default) or to an agent (--agent HOST:PORT), reply on stdout.  A debug
 * and test tool: it signs with <home>/secret like every dtctl command.
 * Exit 0 for a 2xx reply, 1 for another HTTP status, 3 if unreachable.
 */
#include "builtin.h"
#include "head.h"
#include "json.h"
#include "parse-options.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_api(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl api [--agent HOST:PORT] METHOD PATH [JSON]", NULL,
	};
	const char *agent = NULL;
	int status_only = 0;
	struct option opts[] = {
		OPT_STRING(0, "agent", &agent, "host:port", "talk to this dtagent instead of dtsched"),
		OPT_BOOL(0, "status", &status_only, "print the HTTP status first"),
		OPT_END(),
	};
	struct dt_httpc c;
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT;
	const char *body = NULL;
	int code, st;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	if (argc < 2 || argc > 3) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (argc == 3) {
		json_t *j = json_parse(argv[2], strlen(argv[2]), &err);

		if (!j) {
			error("the request body is not JSON: %s", err.buf);
			return DT_EXIT_USAGE;
		}
		json_decref(j);
		body = argv[2];
	}
	if (agent) {
		struct dt_auth_key key;
		const char *colon = strrchr(agent, ':');
		char *host;

		if (!colon || !atoi(colon + 1))
			return error("--agent '%s' is not HOST:PORT", agent), DT_EXIT_USAGE;
		if ((code = head_key(&key)))
			return code;
		host = xstrndup(agent, (size_t)(colon - agent));
		dt_httpc_init(&c, host, atoi(colon + 1), &key);
		free(host);
	} else if ((code = head_connect(&c))) {
		return code;
	}
	st = dt_httpc_request_raw(&c, argv[0], argv[1], body, body ? strlen(body) : 0, &out, &err);
	dt_httpc_release(&c);
	if (st < 0) {
		error("%s", err.buf);
		code = DT_EXIT_UNREACH;
	} else {
		if (status_only)
			printf("%d\n", st);
		fwrite(out.buf, 1, out.len, stdout);
		code = st >= 200 && st < 300 ? 0 : DT_EXIT_FAIL;
	}
	strbuf_release(&err);
	strbuf_release(&out);
	return code;
}
