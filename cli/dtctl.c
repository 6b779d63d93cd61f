/*
 * dtctl.c - the dtctl command-line entry point: global options and the table
 * that maps command names to their cmd_*() functions (how to add one: builtin.h).
 *
 * Each row also says what the command needs (cli/setup.h): every command
 * accepts -c/--cluster (before or after its name), and the setup resolves
 * the cluster right after the command has parsed its options, before it does
 * anything, so -c means the same everywhere.  With --json, a failure is
 * reported as JSON on stdout too (docs/json.md).
 */
#include "builtin.h"
#include "auth.h"
#include "setup.h"
#include "sanitize.h"
#include "parse-options.h"
#include "usage.h"

#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the command table: one row per command (struct cmd_struct; how to add one: builtin.h) */
static const struct cmd_struct commands[] = {
	{ "acct", cmd_acct, "accounts of ended jobs: GPU-hours per user and project", NEED_HEAD, FRONT },
	{ "agents", cmd_agents, "start, stop, restart or check dtagent on the nodes", NEED_CLUSTER, 0 },
	{ "api", cmd_api, "(debug) send a signed request to dtsched or an agent", NEED_HEAD, FRONT },
	{ "cancel", cmd_cancel, "cancel jobs (pending or running)", NEED_HEAD, FRONT },
	{ "dashboard", cmd_dashboard, "a login link to the live dashboard (nodes, GPUs, queue, events)", NEED_HEAD, 0 },
	{ "debug", cmd_debug, "which rank a stalled job waits for: phase, stack, node", NEED_HEAD, 0 },
	{ "doctor", cmd_doctor, "pre-flight check of the whole cluster", USE_CLUSTER, 0 },   /* NEED_CLUSTER but --slurm */
	{ "drain", cmd_drain, "stop placing work on a node", NEED_HEAD, FRONT },
	{ "events", cmd_events, "the head's event stream: jobs, nodes, sweeps, notifications (-f)", NEED_HEAD, FRONT },
	{ "exec", cmd_exec, "run a command on the nodes in parallel", NEED_CLUSTER, 0 },
	{ "export", cmd_export, "print an sbatch script doing what 'dtctl run job.yaml' does", USE_CLUSTER, 0 },
	{ "hosts", cmd_hosts, "list, forget or import the nodes' host keys", NEED_CLUSTER, 0 },
	{ "head", cmd_head, "start, stop or check dtsched, the head service", USE_CLUSTER, 0 },
	{ "image", cmd_image, "container images on the shared dir: import, list, rm", NEED_SHARED, 0 },
	{ "init", cmd_init, "keys, verified host keys, setup and binaries on every node", 0, 0 },   /* picks its file itself */
	{ "logs", cmd_logs, "print a job's logs, every rank merged in time order", USE_CLUSTER, FRONT },
	{ "nodes", cmd_nodes, "the nodes: state, GPUs, utilisation, tasks, heartbeats", NEED_HEAD, FRONT },
	{ "ps", cmd_ps, "queued and running jobs (--all: history too)", NEED_HEAD, FRONT },
	{ "push", cmd_push, "copy a file to the nodes", NEED_CLUSTER, 0 },
	{ "resume", cmd_resume, "place work on a drained node again", NEED_HEAD, FRONT },
	{ "run", cmd_run, "run a distributed job and stream its logs", NEED_SHARED | NEED_HEAD | START_HEAD, FRONT },
	{ "share", cmd_share, "fair share: each user's and project's share, usage, factor", NEED_HEAD, FRONT },
	{ "show", cmd_show, "one job: placement, history, ranks, exit codes, logs", NEED_HEAD, FRONT },
	{ "slurm-agents", cmd_slurm_agents, "inside a Slurm allocation: our agent on every node, joining a head", 0, 0 },
	{ "sweep", cmd_sweep, "hyperparameter sweep on free slots, with early stopping", USE_CLUSTER, 0 },
	{ "sweep-report-file", cmd_sweep_report_file, NULL, 0, 0 },   /* hidden: tests */
	{ "__complete", cmd_complete, NULL, 0, 0 },   /* hidden: the bash completion's words */
	{ "user", cmd_user, "users with their own keys: add, list, remove (docs/team.md)", NEED_HEAD, 0 },
	{ "validate", cmd_validate, "check configuration files and print them resolved", 0, FRONT },   /* -c: when no file */
	{ "version", cmd_version, "print the version", 0, FRONT },
	{ "why", cmd_why, "why a pending job waits: its place, priority, expected start", NEED_HEAD, FRONT },
	{ "whoami", cmd_whoami, "who dtsched takes you for: user, roles, how", NEED_HEAD, FRONT },
};

static void list_commands(FILE *out)
{
	fprintf(out, "\ncommands:\n");
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (commands[i].summary)   /* NULL: hidden */
			fprintf(out, "    %-12s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\nrun 'dtctl <command> --help' for a command's options\n");
}

static const char *const dtctl_usage[] = {
	"dtctl [--version] [--help] [-c <cluster.yaml>] <command> [<args>]",
	NULL,
};

int cmd_version(int argc, const char **argv)
{
	int json = 0;
	struct option opts[] = {
		OPT_BOOL(0, "json", &json, "print JSON"),
		OPT_END(),
	};
	static const char *const usage[] = { "dtctl version [--json]", NULL };

	parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (json) {
		json_t *doc = json_pack("{s:s}", "version", DT_VERSION);

		json_doc_print(doc);
		json_decref(doc);
	} else {
		printf("dtctl %s\n", DT_VERSION);
	}
	return 0;
}

DT_LSAN_DEFAULTS("")

static const struct cmd_struct *current;

/* after the command's parse_options(): resolve its cluster (or say why not) */
static void run_setup(void)
{
	int code = current->flags ? cluster_setup(current->flags) : 0;

	if (code)
		dt_exit(code);
}

/* a --json command that failed without printing its own JSON error */
static void json_exit(int code)
{
	if (json_mode && code && !json_printed) {
		fflush(stdout);
		json_error_print(*dt_last_error() ? dt_last_error() : "failed", code);
	}
	fflush(stdout);
}

int stdout_reader_gone(void)
{
	struct pollfd p = { .fd = STDOUT_FILENO, .events = 0 };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLERR);
}

static int run_command_row(const struct cmd_struct *cmd, int argc, const char **argv)
{
	int code;

#ifdef DT_FRONT
	/* the static front: the row and the environment say which binary runs it */
	const char *why = front_needs_full(cmd);

	if (why)
		front_exec_full(why);
#endif
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--json"))
			json_mode = 1;
	current = cmd;
	parse_options_common(cluster_options, run_setup);
	dt_set_exit_hook(json_exit);
	code = cmd->fn(argc, argv);
	/* a reader that stopped reading (| head) ends the command quietly, as EPIPE
	 * ends tail; anything else (a full disk) is an error */
	if ((fflush(stdout) || ferror(stdout)) && !stdout_reader_gone())
		error("cannot write to standard output"), code = DT_EXIT_FAIL;
	json_exit(code);
	return code;
}

static int show_version;
static const struct option dtctl_opts[] = {
	OPT_BOOL('V', "version", &show_version, "print the version and exit"),
	OPT_STRING('c', "cluster", &the_cluster.given, "file",
		   "the cluster (default: $DTCTL_CLUSTER, else the one 'dtctl init' set up)"),
	OPT_END(),
};

static const struct cmd_struct *find_command(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

/* dtctl(1): the global options, then the command table */
static void dtctl_man(void)
{
	parse_options_help_format(HELP_MAN, "dtctl", "a job launcher for distributed training");
	usage_with_options(dtctl_usage, dtctl_opts, 0);
	printf(".SH COMMANDS\n");
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		if (!commands[i].summary)
			continue;
		printf(".TP\n.BR dtctl\\-%s (1)\n", commands[i].name);
		roff_escape(stdout, commands[i].summary);
		printf("\n");
	}
	printf(".SH FILES\n.TP\n.I ~/.dtctl\nthe dtctl home ($DTCTL_HOME): cluster.yaml, "
	       "secret, known_hosts, ssh_config, state.db, dtsched.log\n"
	       ".SH EXIT STATUS\n0 done; 1 the job or command failed; 2 usage or configuration "
	       "error, unknown id; 3 cannot reach the cluster; 130 interrupted\n");
}

/* CMD --help, in the format set (with -c/--cluster, as when CMD runs) */
static int command_help(const struct cmd_struct *cmd)
{
	const char *sub[] = { cmd->name, "--help", NULL };

	parse_options_common(cluster_options, NULL);
	return cmd->fn(2, sub);   /* --help exits */
}

/*
 * `dtctl help [--man] [CMD]`: the usage, or a man page rendered from the
 * same option tables (`make man`); a command's page comes from its own
 * --help, the common options and its summary in the table above.
 */
static int cmd_help(int argc, const char **argv)
{
	const struct cmd_struct *cmd;
	int man = argc >= 2 && !strcmp(argv[1], "--man");
	static struct strbuf name = STRBUF_INIT;   /* the page's title, until exit */

	if (man) {
		argc--;
		argv++;
	}
	if (argc < 2) {
		if (man) {
			dtctl_man();
			return 0;
		}
		usage_with_options(dtctl_usage, dtctl_opts, 0);
		list_commands(stdout);
		return 0;
	}
	cmd = find_command(argv[1]);
	if (!cmd || !cmd->summary) {
		error("'%s' is not a dtctl command; see 'dtctl --help'", argv[1]);
		return DT_EXIT_USAGE;
	}
	strbuf_addf(&name, "dtctl-%s", cmd->name);
	if (man)
		parse_options_help_format(HELP_MAN, name.buf, cmd->summary);
	return command_help(cmd);
}

/*
 * `dtctl __complete [CMD]` (hidden), for the bash completion: the commands
 * and global options, or what CMD's --help names (its subcommands and
 * options, lib/parse-options.h HELP_WORDS), one per line.
 */
int cmd_complete(int argc, const char **argv)
{
	const struct cmd_struct *cmd = argc >= 2 ? find_command(argv[1]) : NULL;

	parse_options_help_format(HELP_WORDS, NULL, NULL);
	if (argc < 2) {
		for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
			if (commands[i].summary)
				printf("%s\n", commands[i].name);
		printf("help\n");
		parse_options_common(NULL, NULL);   /* dtctl's own -c is in dtctl_opts */
		usage_with_options(dtctl_usage, dtctl_opts, 0);
		return 0;
	}
	if (!cmd || !cmd->summary)
		return DT_EXIT_USAGE;
	return command_help(cmd);
}

int main(int argc, const char **argv)
{
	const struct option *opts = dtctl_opts;
	uint32_t seed = 0;

	dt_set_progname("dtctl");
	/* jansson's hash seed from one getrandom() here, not its open/read/close of
	 * /dev/urandom at the first object */
	if (dt_random_bytes(&seed, sizeof(seed)) == 0 && seed)
		json_object_seed(seed);
#ifdef DT_FRONT
	front_init(argc, (char *const *)argv);
#endif
	signal(SIGPIPE, SIG_IGN);
	if (argc >= 2 && !strcmp(argv[1], "help"))
		return cmd_help(argc - 1, argv + 1);
	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage_with_options(dtctl_usage, opts, 0);
		list_commands(stdout);
		return 0;
	}
	argc = parse_options(argc - 1, argv + 1, opts, dtctl_usage, PARSE_OPT_STOP_AT_NON_OPTION);
	argv++;
	if (show_version) {
		printf("dtctl %s\n", DT_VERSION);
		return 0;
	}
	if (argc < 1) {
		usage_with_options(dtctl_usage, opts, 1);
		list_commands(stderr);
		return DT_EXIT_USAGE;
	}
	if (find_command(argv[0]))
		return run_command_row(find_command(argv[0]), argc, argv);
	error("'%s' is not a dtctl command; see 'dtctl --help'", argv[0]);
	return DT_EXIT_USAGE;
}
