/*
 * dtsched.c - the head service: node table and heartbeats now; job queue,
 * placement and sweeps build on it (scheduler/sched.c).
 *
 *   dtsched [--daemon] [--port 7071] [--bind ADDR] [--dead-after-ms N]
 *   dtsched --stop | --status
 *
 * Started on demand by dtctl (cli/head.c).  One per home: <home>/dtsched.pid
 * is locked for its whole life; its log is <home>/dtsched.log.
 */
#include "daemon.h"
#include "sanitize.h"
#include "dthome.h"
#include "log.h"
#include "parse-options.h"
#include "protocol.h"
#include "sched.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>

DT_LSAN_DEFAULTS("")

int main(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtsched [--daemon] [--port N] [--bind ADDR] [--dead-after-ms N] [--heartbeat-ms N]",
		"dtsched --stop | --status",
		NULL,
	};
	int version = 0, daemonize = 0, stop = 0, status = 0, port = DT_HEAD_PORT_DEFAULT;
	int dead_after = 10000, heartbeat = 2000, lockfd, ready = -1, ret;
	const char *bind = NULL, *home = NULL, *db = NULL;
	struct option opts[] = {
		OPT_BOOL('V', "version", &version, "print the version and exit"),
		OPT_BOOL(0, "daemon", &daemonize, "detach and log to <home>/dtsched.log"),
		OPT_BOOL(0, "stop", &stop, "stop the running dtsched of this home"),
		OPT_BOOL(0, "status", &status, "say whether dtsched runs (exit 0) or not (1)"),
		OPT_INT('p', "port", &port, "port to serve on (default 7071)"),
		OPT_STRING(0, "bind", &bind, "addr", "address to listen on (default all)"),
		OPT_INT(0, "dead-after-ms", &dead_after, "DOWN after this long without heartbeat (10000)"),
		OPT_INT(0, "heartbeat-ms", &heartbeat, "agents' heartbeat period (2000), for reference"),
		OPT_STRING(0, "home", &home, "dir", "home (default $DTCTL_HOME or ~/.dtctl)"),
		OPT_STRING(0, "db", &db, "file", "state database (default <home>/state.db)"),
		OPT_END(),
	};
	struct strbuf pidfile = STRBUF_INIT, logfile = STRBUF_INIT;
	struct sched_opts so = { 0 };
	long long holder;

	dt_set_progname("dtsched");
	parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (version) {
		printf("dtsched %s\n", DT_VERSION);
		return 0;
	}
	if (port <= 0 || port > 65535 || dead_after < 100 || heartbeat < 10)
		die_code(DT_EXIT_USAGE, "bad --port, --dead-after-ms or --heartbeat-ms");
	if (home)
		setenv("DTCTL_HOME", home, 1);
	if (dt_home_ensure() < 0)
		return 1;
	dt_home_path(&pidfile, "dtsched.pid");
	dt_home_path(&logfile, "dtsched.log");
	if (status) {
		if (dt_pidfile_running(pidfile.buf, &holder)) {
			printf("dtsched: running (pid %lld)\n", holder);
			return 0;
		}
		printf("dtsched: not running\n");
		return 1;
	}
	if (stop)
		return dt_daemon_stop(pidfile.buf, "dtsched", 10000) < 0 ? 1 : 0;
	lockfd = dt_pidfile_lock(pidfile.buf, &holder);
	if (lockfd < 0) {
		if (holder > 0) {
			printf("dtsched: already running (pid %lld)\n", holder);
			return daemonize ? 0 : 1;
		}
		return 1;
	}
	if (daemonize && dt_daemonize(logfile.buf, &ready) < 0)
		return 1;
	dt_pidfile_write(lockfd);
	if (dtlog_open(logfile.buf, 10 * 1024 * 1024) < 0 && daemonize)
		return 1;
	so.home = dt_home();
	so.db_path = db;
	so.bind = bind;
	so.port = port;
	so.dead_after_ms = dead_after;
	so.heartbeat_ms = heartbeat;
	ret = sched_run(&so, &ready);
	strbuf_release(&pidfile);
	strbuf_release(&logfile);
	return ret;
}
