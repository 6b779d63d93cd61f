/*
 * dtsched.c - the head service: node table and heartbeats, the job queue,
 * placement and lifecycle, and sweeps (scheduler/sched.c, sched_run).
 *
 *   dtsched [--daemon] [--port 7071] [--bind ADDR] [--dead-after-ms N]
 *   dtsched --stop | --status
 *
 * Started on demand by dtctl (cli/head.c).  One per home: <home>/dtsched.pid
 * is locked for its whole life; its log is <home>/dtsched.log.  That
 * skeleton (options, pid file, --stop, --status, logging) is lib/daemon.h's,
 * shared with dtagent; this file declares what is dtsched's own.
 */
#include "daemon.h"
#include "sanitize.h"
#include "dthome.h"
#include "parse-options.h"
#include "protocol.h"
#include "sched.h"
#include "usage.h"

static struct daemon_args args = { .port = DT_HEAD_PORT_DEFAULT };
static int dead_after = 10000, heartbeat = 2000;
static const char *db, *sock;

static const struct option opts[] = {
	DAEMON_OPTIONS(&args, "dtsched.log", "dtsched", "dtsched", DT_HEAD_PORT_DEFAULT),
	OPT_INT(0, "dead-after-ms", &dead_after, "DOWN after this long without heartbeat (10000)"),
	OPT_INT(0, "heartbeat-ms", &heartbeat, "agents' heartbeat period (2000), for reference"),
	OPT_STRING(0, "home", &args.home, "dir", "home (default $DTCTL_HOME or ~/.dtctl)"),
	OPT_STRING(0, "db", &db, "file", "state database (default <home>/state.db)"),
	OPT_STRING(0, "socket", &sock, "path", "users' local socket (default from cluster.yaml: "
		   "head.socket, <home>/dtsched.sock)"),
	OPT_END(),
};

static int sched_prepare(int argc, const char **argv)
{
	if (args.port <= 0 || args.port > 65535 || dead_after < 100 || heartbeat < 10)
		die_code(DT_EXIT_USAGE, "bad --port, --dead-after-ms or --heartbeat-ms");
	return DAEMON_GO;
}

static int sched_serve(int *ready_fd)
{
	struct sched_opts so = { 0 };

	so.home = dt_home();
	so.db_path = db;
	so.socket = sock;
	so.bind = args.bind;
	so.port = args.port;
	so.dead_after_ms = dead_after;
	so.heartbeat_ms = heartbeat;
	return sched_run(&so, ready_fd);
}

/* `dtctl head stop` speaks for it: --stop says nothing */
static const struct daemon_def sched_daemon = {
	.name = "dtsched",
	.usage = "dtsched [--daemon] [--port N] [--bind ADDR] [--dead-after-ms N] [--heartbeat-ms N]",
	.options = opts,
	.args = &args,
	.pidfile = "dtsched.pid",
	.logfile = "dtsched.log",
	.prepare = sched_prepare,
	.run = sched_serve,
};

DT_LSAN_DEFAULTS("")

int main(int argc, const char **argv)
{
	return daemon_main(&sched_daemon, argc, argv);
}
