/*
 * dtctl.c - the dtctl command-line entry point: global options and the table
 * that maps subcommand names to their cmd_*() functions (see builtin.h).
 */
#include "builtin.h"
#include "sanitize.h"
#include "parse-options.h"
#include "usage.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cmd_struct {
	const char *name;
	int (*fn)(int argc, const char **argv);
	const char *summary;
};

static const struct cmd_struct commands[] = {
	{ "agents", cmd_agents, "start, stop, restart or check dtagent on the nodes" },
	{ "api", cmd_api, "(debug) send a signed request to dtsched or an agent" },
	{ "cancel", cmd_cancel, "cancel jobs (pending or running)" },
	{ "doctor", cmd_doctor, "pre-flight check of the whole cluster" },
	{ "drain", cmd_drain, "stop placing work on a node" },
	{ "exec", cmd_exec, "run a command on the nodes in parallel" },
	{ "hosts", cmd_hosts, "list, forget or import the nodes' host keys" },
	{ "head", cmd_head, "start, stop or check dtsched, the head service" },
	{ "init", cmd_init, "keys, verified host keys, setup and binaries on every node" },
	{ "logs", cmd_logs, "print a job's logs, every rank merged in time order" },
	{ "nodes", cmd_nodes, "the nodes: state, GPUs, utilisation, tasks, heartbeats" },
	{ "ps", cmd_ps, "queued and running jobs (--all: history too)" },
	{ "push", cmd_push, "copy a file to the nodes" },
	{ "resume", cmd_resume, "place work on a drained node again" },
	{ "run", cmd_run, "run a distributed job and stream its logs" },
	{ "show", cmd_show, "one job: placement, history, ranks, exit codes, logs" },
	{ "sweep", cmd_sweep, "hyperparameter sweep on free slots, with early stopping" },
	{ "sweep-report-file", cmd_sweep_report_file, NULL },   /* hidden: tests */
	{ "validate", cmd_validate, "check configuration files and print them resolved" },
	{ "version", cmd_version, "print the version" },
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
	"dtctl [--version] [--help] <command> [<args>]",
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
	if (json)
		printf("{\"version\": \"%s\"}\n", DT_VERSION);
	else
		printf("dtctl %s\n", DT_VERSION);
	return 0;
}

DT_LSAN_DEFAULTS("")

int main(int argc, const char **argv)
{
	int show_version = 0;
	struct option opts[] = {
		OPT_BOOL('V', "version", &show_version, "print the version and exit"),
		OPT_END(),
	};

	dt_set_progname("dtctl");
	signal(SIGPIPE, SIG_IGN);
	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
			  !strcmp(argv[1], "help"))) {
		if (argc >= 3 && strcmp(argv[1], "help") == 0) {
			const char *sub[] = { argv[2], "--help", NULL };

			for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
				if (!strcmp(commands[i].name, argv[2]))
					return commands[i].fn(2, sub);
		}
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
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		if (!strcmp(commands[i].name, argv[0])) {
			int code = commands[i].fn(argc, argv);

			if (fflush(stdout) || ferror(stdout))
				return error("cannot write to standard output"), DT_EXIT_FAIL;
			return code;
		}
	}
	error("'%s' is not a dtctl command; see 'dtctl --help'", argv[0]);
	return DT_EXIT_USAGE;
}
