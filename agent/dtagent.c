/*
 * dtagent.c - the node agent: starts, watches and stops task processes,
 * reports its node to dtsched (agent/agent.c), and the per-task supervisor
 * mode (agent/supervise.c).
 *
 *   dtagent [--daemon] --port P --name N --head ADDR:PORT [--gpus N]  serve
 *   dtagent --stop | --status                                         manage
 *   dtagent --slurm --head ADDR:PORT [--secret FILE]    one node of a Slurm step
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
 *
 * --slurm is the agent started on every node of a Slurm allocation as one
 * step (cli/slurm.h builds that srun line; docs/slurm.md): it names itself
 * after $SLURMD_NODENAME, takes a fresh node-local home it removes at exit,
 * an ephemeral port, the cluster secret from --secret FILE or from
 * $DTCTL_AGENT_SECRET (taken out of the environment before anything starts,
 * never argv), the GPUs Slurm gave the step, and on SIGTERM (the step or the
 * allocation ends) stops every task before it exits.
 */
#include "agent.h"
#include "sanitize.h"
#include "daemon.h"
#include "dthome.h"
#include "parse-options.h"
#include "protocol.h"
#include "ranklog.h"
#include "rsh.h"
#include "secret.h"
#include "strbuf.h"
#include "supervise.h"
#include "usage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct daemon_args args = { .port = DT_AGENT_PORT_DEFAULT };
static int gpus = -1, simulate, hb_ms = 2000, duration_s, keep_h = 24, slurm;
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
	OPT_BOOL(0, "slurm", &slurm, "one node of a Slurm step: join --head, stop all at SIGTERM"),
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

static struct strbuf slurm_home = STRBUF_INIT;

/*
 * --slurm: the node name, a fresh home of ours (mkdtemp: a fixed path in the
 * sticky /tmp could have been planted by another user; still checked to be a
 * real directory of ours, 0700), the secret from the environment and the
 * step's GPUs.  Dies with DT_EXIT_USAGE naming what is missing.
 */
static void slurm_prepare(void)
{
	const char *node = getenv_nonempty("SLURMD_NODENAME");
	const char *job = getenv_nonempty("SLURM_JOB_ID");
	const char *step = getenv_nonempty("SLURM_STEP_ID");
	const char *tmp = getenv_nonempty("TMPDIR");
	const char *hex = getenv_nonempty("DTCTL_AGENT_SECRET");
	struct stat st;

	if (!head)
		die_code(DT_EXIT_USAGE, "--slurm needs --head ADDR:PORT (the head to join)");
	if (!job)
		die_code(DT_EXIT_USAGE, "--slurm: no $SLURM_JOB_ID: start it with srun inside an "
			 "allocation (dtctl slurm-agents)");
	if (!name)
		name = node;
	if (!args.home) {
		char host[256] = "node";

		gethostname(host, sizeof(host) - 1);
		/* a random tail: the name is guessable (job ids come in order), and
		 * another user's dir made there first must not stop us */
		strbuf_addf(&slurm_home, "%s/dtagent-slurm-%s.%s-%s-XXXXXX", tmp ? tmp : "/tmp", job,
			    step ? step : "0", name ? name : host);
		if (!mkdtemp(slurm_home.buf))
			die_code(DT_EXIT_USAGE, "--slurm: cannot create '%s': %s", slurm_home.buf,
				 strerror(errno));
		if (lstat(slurm_home.buf, &st) < 0 || !S_ISDIR(st.st_mode) ||
		    st.st_uid != geteuid() || (st.st_mode & 077))
			die_code(DT_EXIT_USAGE, "--slurm: '%s' is not a private directory of ours",
				 slurm_home.buf);
		setenv("DTCTL_HOME", slurm_home.buf, 1);
		dt_home_reset();
	}
	if (hex) {
		struct strbuf path = STRBUF_INIT;
		int fd;

		if (strspn(hex, "0123456789abcdef") != 2 * DT_SECRET_BYTES || hex[2 * DT_SECRET_BYTES])
			die_code(DT_EXIT_USAGE, "$DTCTL_AGENT_SECRET: expected %d hex digits",
				 2 * DT_SECRET_BYTES);
		dt_home_path(&path, "secret");
		fd = open(path.buf, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 || write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex) ||
		    write(fd, "\n", 1) != 1 || close(fd) < 0)
			die_code(DT_EXIT_USAGE, "--slurm: cannot write '%s': %s", path.buf,
				 strerror(errno));
		strbuf_release(&path);
		/* the ranks inherit our environment: the secret leaves it now */
		unsetenv("DTCTL_AGENT_SECRET");
	} else if (!secret) {
		die_code(DT_EXIT_USAGE, "--slurm needs the cluster secret: --secret FILE (0600) or "
			 "$DTCTL_AGENT_SECRET");
	}
	if (gpus < 0) {
		/* the GPUs Slurm gave this step; none: a CPU node */
		const char *cvd = getenv_nonempty("CUDA_VISIBLE_DEVICES");

		gpus = 0;
		if (cvd && strcmp(cvd, "NoDevFiles") && strcmp(cvd, "-1")) {
			ao.gpu_map = cvd;
			/* for the mpi launcher's rank loggers under our tasks */
			setenv(DT_GPU_MAP_ENV, cvd, 1);
			for (gpus = 1; *cvd; cvd++)
				gpus += *cvd == ',';
		}
	}
	/*
	 * Open MPI in our tasks (the mpi launcher's mpirun) would take the
	 * step's SLURM_* for its allocation and launch with srun, refusing
	 * dtsched's hostfile ("node not present in the allocation"): the
	 * hostfile and our agents (plm rsh through `dtagent rsh`) decide, as
	 * on dtctl's own nodes.  A job's own settings win.
	 */
	setenv("OMPI_MCA_plm", "rsh", 0);
	setenv("OMPI_MCA_ras", "^slurm", 0);
	if (args.port == DT_AGENT_PORT_DEFAULT)
		args.port = 0;      /* several allocations may share a node */
	ao.stop_tasks_on_exit = 1;
	ao.stop_grace_ms = 2000;
	ao.beat_at_start = 1;       /* the head waits for every node to join */
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
	if (slurm)
		slurm_prepare();
	if (args.port < (slurm ? 0 : 1) || args.port > 65535 || hb_ms < 50 || keep_h < 0)
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
	ao.home = dt_home();
	ao.secret = secret;
	ao.exe = self_exe(argv[0]);
	ao.keep_finished_ms = keep_h * 3600LL * 1000;
	ao.fake_health = fake_health;
	ao.gpu_map = slurm ? ao.gpu_map : NULL;
	return DAEMON_GO;
}

static int agent_serve(int *ready_fd)
{
	return agent_run(&ao, *ready_fd);
}

/* a clean exit under LeakSanitizer */
static void agent_release(void)
{
	if (slurm_home.len && rm_tree(slurm_home.buf) < 0)
		warning("cannot remove '%s': %s", slurm_home.buf, strerror(errno));
	strbuf_release(&slurm_home);
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
