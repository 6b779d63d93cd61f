/*
 * dtagent.c - the node agent: starts, watches and stops task processes,
 * reports its node to dtsched (agent/agent.c), and the per-task supervisor
 * mode (agent/supervise.c).
 *
 *   dtagent [--daemon] --port P --name N --head ADDR:PORT [--gpus N]  serve
 *   dtagent --stop | --status                                         manage
 *   dtagent --supervise ID --home DIR                                 internal
 *   dtagent rank-log DIR -- PROG ARGS     one MPI rank's output to DIR/<rank>.log
 *   dtagent rsh HOST WORD...              mpirun's orted launcher via agents (rsh.h)
 *
 * One agent per home: the pid file <home>/agent.pid is locked (flock) for
 * the agent's whole life, so a second one refuses to start.  --daemon
 * detaches (double fork, setsid), logs to <home>/agent.log (rotated), and
 * returns only once the agent serves, or with its error.
 */
#include "agent.h"
#include "sanitize.h"
#include "daemon.h"
#include "dthome.h"
#include "log.h"
#include "parse-options.h"
#include "protocol.h"
#include "ranklog.h"
#include "rsh.h"
#include "strbuf.h"
#include "supervise.h"
#include "usage.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define AGENT_LOG_MAX (10 * 1024 * 1024)

static int do_status(const char *pidfile, const char *name)
{
	long long pid;

	if (dt_pidfile_running(pidfile, &pid)) {
		printf("dtagent on %s: running (pid %lld)\n", name, pid);
		return 0;
	}
	printf("dtagent on %s: not running\n", name);
	return 1;
}

static char *self_exe(const char *argv0)
{
	char buf[4096];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);

	if (n <= 0)
		return xstrdup(argv0);
	buf[n] = '\0';
	return xstrdup(buf);
}

DT_LSAN_DEFAULTS("")

int main(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtagent [--daemon] [--port N] [--name NODE] [--head ADDR:PORT] [--gpus N]",
		"dtagent --stop | --status",
		NULL,
	};
	int version = 0, daemonize = 0, stop = 0, status = 0, port = DT_AGENT_PORT_DEFAULT;
	int gpus = -1, simulate = 0, hb_ms = 2000, duration_s = 0, keep_h = 24;
	const char *name = NULL, *head = NULL, *home = NULL, *secret = NULL, *bind = NULL;
	const char *supervise = NULL, *advertise = NULL;
	struct option opts[] = {
		OPT_BOOL('V', "version", &version, "print the version and exit"),
		OPT_BOOL(0, "daemon", &daemonize, "detach and log to <home>/agent.log"),
		OPT_BOOL(0, "stop", &stop, "stop the running agent of this home"),
		OPT_BOOL(0, "status", &status, "say whether an agent runs (exit 0) or not (1)"),
		OPT_INT('p', "port", &port, "port to serve on (default 7070)"),
		OPT_STRING(0, "bind", &bind, "addr", "address to listen on (default all)"),
		OPT_STRING('n', "name", &name, "node", "node name (default: hostname)"),
		OPT_STRING(0, "head", &head, "addr:port", "dtsched to send heartbeats to"),
		OPT_STRING(0, "advertise", &advertise, "addr", "address dtsched should reach us at"),
		OPT_INT(0, "heartbeat-ms", &hb_ms, "heartbeat period (default 2000)"),
		OPT_INT(0, "gpus", &gpus, "report N GPUs (fake ones beyond what NVML finds)"),
		OPT_STRING(0, "home", &home, "dir", "agent home (default $DTCTL_HOME or ~/.dtctl)"),
		OPT_STRING(0, "secret", &secret, "file", "cluster secret (default <home>/secret)"),
		OPT_INT(0, "keep-finished-hours", &keep_h, "forget finished tasks after this (24)"),
		OPT_STRING(0, "supervise", &supervise, "id", "(internal) supervise task ID"),
		OPT_INT(0, "simulate-nodes", &simulate, "(benchmark) simulate N agents heartbeating"),
		OPT_INT(0, "duration", &duration_s, "(benchmark) seconds to simulate (0 = forever)"),
		OPT_END(),
	};
	struct agent_opts ao;
	struct strbuf pidfile = STRBUF_INIT, logfile = STRBUF_INIT;
	int lockfd, ready = -1, rc;
	long long holder;

	dt_set_progname("dtagent");
	if (argc >= 2 && !strcmp(argv[1], "rank-log"))
		return ranklog_main(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "rsh"))
		return rsh_main(argc - 1, argv + 1);
	parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (version) {
		printf("dtagent %s\n", DT_VERSION);
		return 0;
	}
	if (home)
		setenv("DTCTL_HOME", home, 1);
	home = dt_home();
	if (supervise)
		return supervise_main(home, supervise);
	if (simulate > 0) {
		struct strbuf s = STRBUF_INIT;

		if (!head)
			die_code(DT_EXIT_USAGE, "--simulate-nodes needs --head ADDR:PORT");
		if (!secret)
			dt_home_path(&s, "secret");
		return agent_simulate(head, secret ? secret : s.buf, simulate, hb_ms,
				      duration_s * 1000LL, gpus < 0 ? 8 : gpus);
	}
	if (port <= 0 || port > 65535 || hb_ms < 50 || keep_h < 0)
		die_code(DT_EXIT_USAGE, "bad --port, --heartbeat-ms or --keep-finished-hours");
	if (dt_home_ensure() < 0)
		return 1;
	dt_home_path(&pidfile, "agent.pid");
	if (status || stop) {
		if (status) {
			rc = do_status(pidfile.buf, name ? name : "this node");
		} else {
			rc = dt_daemon_stop(pidfile.buf, "dtagent", 10000) < 0 ? 1 : 0;
			if (!rc)
				printf("dtagent on %s: stopped\n", name ? name : "this node");
		}
		strbuf_release(&pidfile);
		return rc;
	}
	lockfd = dt_pidfile_lock(pidfile.buf, &holder);
	if (lockfd < 0) {
		strbuf_release(&pidfile);
		if (holder > 0) {
			printf("dtagent: already running (pid %lld)\n", holder);
			return daemonize ? 0 : 1;
		}
		return 1;
	}
	memset(&ao, 0, sizeof(ao));
	ao.name = name;
	ao.bind = bind;
	ao.port = port;
	ao.head = head;
	ao.advertise = advertise;
	ao.heartbeat_ms = hb_ms;
	ao.gpus = gpus;
	ao.home = home;
	ao.secret = secret;
	ao.exe = self_exe(argv[0]);
	ao.keep_finished_ms = keep_h * 3600LL * 1000;
	dt_home_path(&logfile, "agent.log");

	if (daemonize && dt_daemonize(logfile.buf, &ready) < 0)
		return 1;
	dt_pidfile_write(lockfd);
	if (dtlog_open(logfile.buf, AGENT_LOG_MAX) < 0 && daemonize)
		_exit(1);
	rc = agent_run(&ao, ready);
	/* a clean exit under LeakSanitizer */
	free((char *)ao.exe);
	strbuf_release(&pidfile);
	strbuf_release(&logfile);
	return rc;
}
