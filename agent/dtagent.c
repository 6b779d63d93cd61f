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
 * returns only once the agent serves, or with its error.  That skeleton
 * (options, pid file, --stop, --status, logging) is lib/daemon.h's, shared
 * with dtsched; this file declares what is the agent's own.
 */
#include "agent.h"
#include "sanitize.h"
#include "daemon.h"
#include "dthome.h"
#include "parse-options.h"
#include "protocol.h"
#include "ranklog.h"
#include "rsh.h"
#include "strbuf.h"
#include "supervise.h"
#include "usage.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct daemon_args args = { .port = DT_AGENT_PORT_DEFAULT };
static int gpus = -1, simulate, hb_ms = 2000, duration_s, keep_h = 24;
static const char *name, *head, *secret, *supervise, *advertise, *fake_health;
static struct agent_opts ao;
static struct strbuf label = STRBUF_INIT;

static const struct option opts[] = {
	DAEMON_OPTIONS(&args, "agent.log", "agent", "an agent", DT_AGENT_PORT_DEFAULT),
	OPT_STRING('n', "name", &name, "node", "node name (default: hostname)"),
	OPT_STRING(0, "head", &head, "addr:port", "dtsched to send heartbeats to"),
	OPT_STRING(0, "advertise", &advertise, "addr", "address dtsched should reach us at"),
	OPT_INT(0, "heartbeat-ms", &hb_ms, "heartbeat period (default 2000)"),
	OPT_INT(0, "gpus", &gpus, "report N GPUs (fake ones beyond what NVML finds)"),
	OPT_STRING(0, "home", &args.home, "dir", "agent home (default $DTCTL_HOME or ~/.dtctl)"),
	OPT_STRING(0, "secret", &secret, "file", "cluster secret (default <home>/secret)"),
	OPT_INT(0, "keep-finished-hours", &keep_h, "forget finished tasks after this (24)"),
	OPT_STRING(0, "fake-health", &fake_health, "file", "(tests) faults of the fake GPUs"),
	OPT_STRING(0, "supervise", &supervise, "id", "(internal) supervise task ID"),
	OPT_INT(0, "simulate-nodes", &simulate, "(benchmark) simulate N agents heartbeating"),
	OPT_INT(0, "duration", &duration_s, "(benchmark) seconds to simulate (0 = forever)"),
	OPT_END(),
};

static char *self_exe(const char *argv0)
{
	char buf[4096];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);

	if (n <= 0)
		return xstrdup(argv0);
	buf[n] = '\0';
	return xstrdup(buf);
}

/* the modes that are no daemon (--supervise, --simulate-nodes), the checks, the settings */
static int agent_prepare(int argc, const char **argv)
{
	const char *home = dt_home();

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
	if (args.port <= 0 || args.port > 65535 || hb_ms < 50 || keep_h < 0)
		die_code(DT_EXIT_USAGE, "bad --port, --heartbeat-ms or --keep-finished-hours");
	if (fake_health && *fake_health != '/')
		die_code(DT_EXIT_USAGE, "--fake-health '%s': expected an absolute path", fake_health);
	strbuf_addf(&label, "dtagent on %s", name ? name : "this node");
	args.label = label.buf;
	ao.name = name;
	ao.bind = args.bind;
	ao.port = args.port;
	ao.head = head;
	ao.advertise = advertise;
	ao.heartbeat_ms = hb_ms;
	ao.gpus = gpus;
	ao.home = home;
	ao.secret = secret;
	ao.exe = self_exe(argv[0]);
	ao.keep_finished_ms = keep_h * 3600LL * 1000;
	ao.fake_health = fake_health;
	return DAEMON_GO;
}

static int agent_serve(int *ready_fd)
{
	return agent_run(&ao, *ready_fd);
}

/* a clean exit under LeakSanitizer */
static void agent_release(void)
{
	free((char *)ao.exe);
	strbuf_release(&label);
}

static const struct daemon_def agent_daemon = {
	.name = "dtagent",
	.usage = "dtagent [--daemon] [--port N] [--name NODE] [--head ADDR:PORT] [--gpus N]",
	.options = opts,
	.args = &args,
	.pidfile = "agent.pid",
	.logfile = "agent.log",
	.say_stopped = 1,
	.prepare = agent_prepare,
	.run = agent_serve,
	.release = agent_release,
};

DT_LSAN_DEFAULTS("")

int main(int argc, const char **argv)
{
	dt_set_progname("dtagent");
	if (argc >= 2 && !strcmp(argv[1], "rank-log"))
		return ranklog_main(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "rsh"))
		return rsh_main(argc - 1, argv + 1);
	return daemon_main(&agent_daemon, argc, argv);
}
