/*
 * cmd-dashboard.c - `dtctl dashboard [--print-url] [--json]`: a one-time login link to
 * the live dashboard dtsched serves on 127.0.0.1 (scheduler/dashboard.c,
 * docs/dashboard.md), minted by a signed request (POST /v1/dashboard/login), so
 * only a user of the cluster gets one.  The link works once, for 10 minutes.
 */
#include "builtin.h"
#include "setup.h"
#include "head.h"
#include "json.h"
#include "parse-options.h"
#include "protocol.h"
#include "term.h"
#include "usage.h"

#include <stdio.h>

int cmd_dashboard(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl dashboard [--print-url] [--json]", NULL };
	int print_url = 0, json = 0, code;
	struct option opts[] = {
		OPT_BOOL(0, "print-url", &print_url, "print only the login URL"),
		OPT_BOOL(0, "json", &json, "print the URL and its lifetime as JSON"),
		OPT_END(),
	};
	json_t *body, *reply = NULL;
	const char *url;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (argc) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	body = json_pack("{s:s}", "user", cli_whoami());
	code = head_api("POST", DT_PATH_DASHBOARD_LOGIN, body, &reply, NULL);
	json_decref(body);
	if (code) {
		json_decref(reply);
		return code;
	}
	url = json_get_str(reply, "url", "");
	if (json) {
		json_t *doc = json_pack("{s:s,s:I}", "url", url, "expires_in_s",
					(json_int_t)json_get_int(reply, "expires_in_s", 0));

		json_doc_print(doc);
		json_decref(doc);
	} else if (print_url)
		printf("%s\n", term_str(url));
	else
		printf("dashboard: %s\n(the link signs you in once, within %lld minutes; the page is "
		       "served on this machine only)\n", term_str(url),
		       json_get_int(reply, "expires_in_s", 0) / 60);
	json_decref(reply);
	return 0;
}
