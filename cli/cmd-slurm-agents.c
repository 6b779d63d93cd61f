/*
 * cmd-slurm-agents.c - `dtctl slurm-agents --head ADDR:PORT [--secret FILE]`:
 * inside a Slurm allocation, our agent on every allocated node as one Slurm
 * step (slurm.h), joining a head that runs elsewhere; for sbatch scripts
 * that bring their own head (the Slurm backend's, docs/slurm.md).  It
 * becomes that srun (exec), so the step ends when the script's job does and
 * `kill` of it ends the step; --dry-run prints the line instead.
 */
#include "builtin.h"
#include "head.h"
#include "parse-options.h"
#include "slurm.h"
#include "strbuf.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cmd_slurm_agents(int argc, const char **argv)
{
	const char *head = NULL, *secret = NULL;
	int dry_run = 0;
	struct option opts[] = {
		OPT_STRING(0, "head", &head, "addr:port", "the dtsched the agents join"),
		OPT_STRING(0, "secret", &secret, "file",
			   "the cluster secret, a 0600 file every node sees (default: "
			   "$DTCTL_AGENT_SECRET, passed on through srun's environment)"),
		OPT_BOOL(0, "dry-run", &dry_run, "print the srun command line; start nothing"),
		OPT_END(),
	};
	static const char *const usage[] = {
		"dtctl slurm-agents --head ADDR:PORT [--secret FILE] [--dry-run]",
		"",
		"Inside a Slurm allocation (sbatch script, salloc shell): start dtagent on every",
		"allocated node as one step (srun --overlap, one task per node), each joining the",
		"head under its Slurm node name; they stop their tasks and exit when the step or",
		"the allocation ends.  No SSH: dtagent is taken from beside this dtctl.",
		NULL,
	};
	struct slurm_alloc al;
	struct strvec args = STRVEC_INIT;
	struct strbuf err = STRBUF_INIT, bin = STRBUF_INIT;

	if (parse_options(argc - 1, argv + 1, opts, usage, 0)) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (!head || !strchr(head, ':'))
		return error("--head ADDR:PORT is needed (the dtsched to join)"), DT_EXIT_USAGE;
	if (!secret && !getenv_nonempty("DTCTL_AGENT_SECRET") && !dry_run)
		return error("the agents need the cluster secret: --secret FILE (0600, on a dir every "
			     "node sees) or $DTCTL_AGENT_SECRET"), DT_EXIT_USAGE;
	if (secret && access(secret, R_OK) < 0)
		return error_errno("--secret '%s'", secret), DT_EXIT_USAGE;
	if (slurm_alloc_load(&al, &err) < 0) {
		error("%s", err.buf);
		strbuf_release(&err);
		return DT_EXIT_USAGE;
	}
	dt_self_dir(&bin);
	strbuf_addstr(&bin, "/dtagent");
	slurm_agents_argv(&args, &al, bin.buf, head, secret);
	slurm_alloc_release(&al);
	if (dry_run) {
		struct strbuf line = STRBUF_INIT;

		for (size_t i = 0; i < args.nr; i++) {
			if (i)
				strbuf_addch(&line, ' ');
			strbuf_add_shell_quoted(&line, args.v[i]);
		}
		printf("%s\n", line.buf);
		strbuf_release(&line);
		strvec_clear(&args);
		strbuf_release(&bin);
		return 0;
	}
	fflush(NULL);
	execvp(args.v[0], (char *const *)args.v);
	error_errno("cannot run '%s'", args.v[0]);
	strvec_clear(&args);
	strbuf_release(&bin);
	return DT_EXIT_FAIL;
}
