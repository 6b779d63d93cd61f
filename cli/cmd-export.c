/*
 * cmd-export.c - `dtctl export slurm [--partition P] [--account A] JOB.yaml`:
 * print one sbatch script that does the launch `dtctl run JOB.yaml` does, for
 * users who submit to Slurm themselves (docs/slurm.md).  The script asks for
 * the job's shape (nodes, one task per rank, GPUs through GRES, its timeout)
 * and runs `dtctl run --in-allocation` on the job file, embedded verbatim:
 * dtctl then makes the rank environment inside the allocation (slurm.h), so
 * nothing in the script is about RANK or MASTER_ADDR and nothing needs
 * hand-editing.  Talks to nothing; reads the job file and the cluster's
 * shared dir ($DTCTL_SHARED_DIR or shared_dir:).
 */
#include "builtin.h"
#include "config.h"
#include "head.h"
#include "parse-options.h"
#include "setup.h"
#include "strbuf.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EOF_MARK "DTCTL_JOB_EOF"

/* value for an #SBATCH line: shell-quoted, one line */
static int sbatch_value_ok(const char *s)
{
	return s && *s && !strpbrk(s, "\n\r");
}

/* a control byte (a newline ends a comment or an #SBATCH line: what follows would be a
 * command of the script, and ends sbatch's options), or NULL */
static const char *control_byte(const char *s)
{
	for (; s && *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return s;
	return NULL;
}

/* s for a comment line: control bytes as '?' */
static void add_comment_text(struct strbuf *sb, const char *s)
{
	for (; *s; s++)
		strbuf_addch(sb, (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s);
}

/* s for an #SBATCH line or the shell: as it is when that is safe, else quoted */
static void add_word(struct strbuf *sb, const char *s)
{
	if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
			 "._/+:@%=,-") == strlen(s))
		strbuf_addstr(sb, s);
	else
		strbuf_add_shell_quoted(sb, s);
}

static int export_slurm(const char *file, const char *partition, const char *account)
{
	struct job_config job;
	struct strbuf err = STRBUF_INIT, text = STRBUF_INIT, q = STRBUF_INIT, self = STRBUF_INIT;
	char *cwd = getcwd(NULL, 0), *abs = NULL;
	int per_node;

	job_config_init(&job);
	if (job_config_load(&job, file, &err) < 0) {
		error("%s", err.buf);
		goto usage_fail;
	}
	if (strbuf_read_file(&text, file, 1 << 20) < 0) {
		error_errno("cannot read '%s'", file);
		goto usage_fail;
	}
	if (strstr(text.buf, EOF_MARK)) {
		error("'%s' contains the line marker '%s' the script embeds it with", file, EOF_MARK);
		goto usage_fail;
	}
	if (!the_cluster.shared_dir) {
		error("no shared dir: set $DTCTL_SHARED_DIR (or shared_dir: in the cluster file) to "
		      "the directory every node of the Slurm cluster mounts");
		goto usage_fail;
	}
	if (job.name && control_byte(job.name)) {
		error("'%s': the job's name has a control character (byte 0x%02x), which an "
		      "#SBATCH line cannot hold: give 'name:' one line of text", file,
		      (unsigned char)*control_byte(job.name));
		goto usage_fail;
	}
	if ((partition && !sbatch_value_ok(partition)) || (account && !sbatch_value_ok(account)) ||
	    !cwd || strpbrk(cwd, "\n\r")) {
		error("--partition, --account and the current directory must be one line each");
		goto usage_fail;
	}
	per_node = job.gpus_per_node > 0 ? job.gpus_per_node :
		   job.procs_per_node > 0 ? job.procs_per_node : 1;
	dt_self_dir(&self);
	abs = realpath(file, NULL);
	add_comment_text(&q, abs ? abs : file);
	printf("#!/bin/sh\n"
	       "# sbatch script made by 'dtctl export slurm %s' (dtctl %s).\n"
	       "# Submit it with: sbatch <this file>.  It does what 'dtctl run' does with that job\n"
	       "# file: inside the allocation, dtctl starts its head on this first node and its\n"
	       "# agent on every allocated node as one srun step, then the ranks with the\n"
	       "# torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...), GPU\n"
	       "# binding and rank logs in the shared dir; all of it ends with the job\n"
	       "# (docs/slurm.md).  Nothing here is about ranks: edit the job file below.\n",
	       q.buf, DT_VERSION);
	strbuf_reset(&q);
	add_word(&q, job.name ? job.name : "dtctl");
	printf("#SBATCH --job-name=%s\n", q.buf);
	printf("#SBATCH --nodes=%d\n", job.nodes > 0 ? job.nodes : 1);
	printf("#SBATCH --ntasks-per-node=%d\n", per_node);
	if (job.gpus_per_node > 0)
		printf("#SBATCH --gres=gpu:%d\n", job.gpus_per_node);
	if (job.timeout_ms > 0)   /* minutes, rounded up, plus one for dtctl's own start and end */
		printf("#SBATCH --time=%lld\n", (job.timeout_ms + 59999) / 60000 + 1);
	if (partition)
		printf("#SBATCH --partition=%s\n", partition);
	if (account)
		printf("#SBATCH --account=%s\n", account);
	strbuf_reset(&q);
	add_word(&q, cwd);
	printf("#SBATCH --chdir=%s\n\n", q.buf);
	strbuf_reset(&q);
	add_word(&q, the_cluster.shared_dir);
	printf("export DTCTL_SHARED_DIR=%s\n", q.buf);
	printf("job=$(mktemp \"${TMPDIR:-/tmp}/dtctl-job-XXXXXX\") || exit 1\n");
	printf("trap 'rm -f \"$job\"' EXIT\n");
	printf("cat > \"$job\" <<'%s'\n%s%s%s\n", EOF_MARK, text.buf,
	       text.len && text.buf[text.len - 1] != '\n' ? "\n" : "", EOF_MARK);
	strbuf_reset(&q);
	strbuf_addf(&self, "/dtctl");
	add_word(&q, self.buf);
	printf("%s run --in-allocation \"$job\"\n", q.buf);
	free(cwd);
	free(abs);
	job_config_release(&job);
	strbuf_release(&err);
	strbuf_release(&text);
	strbuf_release(&q);
	strbuf_release(&self);
	return 0;
usage_fail:
	free(cwd);
	job_config_release(&job);
	strbuf_release(&err);
	strbuf_release(&text);
	strbuf_release(&q);
	strbuf_release(&self);
	return DT_EXIT_USAGE;
}

int cmd_export(int argc, const char **argv)
{
	const char *partition = NULL, *account = NULL;
	struct option opts[] = {
		OPT_STRING(0, "partition", &partition, "name", "slurm: #SBATCH --partition"),
		OPT_STRING(0, "account", &account, "name", "slurm: #SBATCH --account"),
		OPT_END(),
	};
	static const char *const usage[] = {
		"dtctl export slurm [--partition P] [--account A] <job.yaml>",
		"",
		"Print an sbatch script doing the launch 'dtctl run job.yaml' does, inside the",
		"allocation it gets (docs/slurm.md).",
		NULL,
	};
	int nargs = parse_options(argc - 1, argv + 1, opts, usage, 0);

	if (nargs != 2 || strcmp(argv[1], "slurm")) {
		if (nargs >= 1 && strcmp(argv[1], "slurm"))
			error("unknown export format '%s' (known: slurm)", argv[1]);
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	return export_slurm(argv[2], partition, account);
}
