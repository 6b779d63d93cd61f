/*
 * cmd-head.c - `dtctl head start|stop|status`: the dtsched daemon of this
 * head.  Commands that submit work start it on demand (cli/head.c); these
 * manage it explicitly.  `start` also restarts a dtsched that runs with other
 * head settings than the cluster's (head.port changed in cluster.yaml).
 */
#include "builtin.h"
#include "daemon.h"
#include "dthome.h"
#include "head.h"
#include "json.h"
#include "parse-options.h"
#include "term.h"
#include "protocol.h"
#include "setup.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>

int cmd_head(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl head (start | stop | status) [--json]", NULL };
	int json = 0;
	struct option opts[] = {
		OPT_BOOL(0, "json", &json, "print JSON (status)"),
		OPT_END(),
	};
	struct strbuf pidfile = STRBUF_INIT;
	long long pid;
	int ret = 0;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	if (argc != 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	dt_home_path(&pidfile, "dtsched.pid");
	if (!strcmp(argv[0], "start")) {
		ret = head_start(0, 1);
		if (!ret && dt_pidfile_running(pidfile.buf, &pid))
			printf("dtsched: running (pid %lld)\n", pid);
	} else if (!strcmp(argv[0], "stop")) {
		ret = dt_daemon_stop(pidfile.buf, "dtsched", 10000) < 0 ? DT_EXIT_FAIL : 0;
		if (!ret)
			printf("dtsched: stopped\n");
	} else if (!strcmp(argv[0], "status")) {
		struct dt_httpc c;
		struct strbuf err = STRBUF_INIT;
		json_t *reply = NULL;
		int st = -1, port = 0;

		if (dt_pidfile_running(pidfile.buf, &pid) && !head_connect(&c)) {
			st = dt_httpc_request(&c, "GET", DT_PATH_STATUS, NULL, &reply, &err);
			port = the_cluster.head_port;
			dt_httpc_release(&c);
		}
		if (json) {
			json_t *o = st == 200 && reply ? json_incref(reply) : json_pack("{s:b}", "running", 0);

			json_object_set_new(o, "running", json_boolean(st == 200));
			json_doc_print(o);
			json_decref(o);
		} else if (st == 200) {
			printf("dtsched: running (pid %lld, port %d, up %lld s)\n", pid,
			       port, json_get_int(reply, "uptime_ms", 0) / 1000);
		} else if (pid) {
			printf("dtsched: running (pid %lld) but not answering: %s\n", pid,
			       err.len ? term_str(err.buf) : "bad reply");
		} else {
			printf("dtsched: not running\n");
		}
		ret = st == 200 ? 0 : DT_EXIT_FAIL;
		json_decref(reply);
		strbuf_release(&err);
	} else {
		error("unknown action '%s'; see 'dtctl head --help'", argv[0]);
		ret = DT_EXIT_USAGE;
	}
	strbuf_release(&pidfile);
	return ret;
}
