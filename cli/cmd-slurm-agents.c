/*
 * cmd-slurm-agents.c - `dtctl slurm-agents --head ADDR:PORT [--secret FILE]`:
 * inside a Slurm allocation, our agent on every allocated node as one Slurm
 * step (slurm.h), joining a head that runs elsewhere; for sbatch scripts
 * that bring their own head (the Slurm backend's, docs/slurm.md).  It
 * becomes that srun (exec), so the step ends when the script's job does and
 * `kill` of it ends the step; --dry-run prints the line instead.  Under the
 * Slurm backend's batch script ($DTCTL_SLURM_JOB, or $DTCTL_SLURM_PACK for a
 * sweep's allocation) srun is its child instead, so that Slurm's warning
 * before the time limit reaches the ranks of the job, or of every job running
 * in the allocation (run_step_forwarding_warning()).
 */
#include "builtin.h"
#include "auth.h"
#include "head.h"
#include "httpc.h"
#include "json.h"
#include "parse-options.h"
#include "protocol.h"
#include "slurm.h"
#include "strbuf.h"
#include "usage.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* POST /v1/jobs/<job>/signal {sig} through c; what became of it on stderr */
static int signal_job(struct dt_httpc *c, const char *head, const char *job, int sig)
{
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;
	json_t *body = json_pack("{s:i}", "signal", sig), *reply = NULL;
	int status;

	strbuf_addf(&path, "%s%s%s", DT_PATH_JOB_PREFIX, job, DT_PATH_SIGNAL_SUFFIX);
	status = dt_httpc_request(c, "POST", path.buf, body, &reply, &err);
	if (status == 200)
		fprintf(stderr, "dtctl slurm-agents: Slurm's warning (signal %d, %s) passed on to "
			"the ranks of job %s\n", sig, strsignal(sig), job);
	else
		error("Slurm's warning (signal %d) not passed on to job %s: dtsched at %s: %s", sig,
		      job, head, status < 0 ? err.buf : dt_httpc_reply_error(reply, status));
	json_decref(body);
	json_decref(reply);
	strbuf_release(&path);
	strbuf_release(&err);
	return status == 200 ? 0 : -1;
}

/*
 * The jobs dtsched runs in this Slurm job ($SLURM_JOB_ID: Slurm's own word in
 * the batch shell, never a file a job can write): a packed sweep's
 * allocation (pack: allocation) holds several trials at once.  Each RUNNING
 * one whose "slurm" names this Slurm job gets the warning.
 */
static void signal_jobs_in(struct dt_httpc *c, const char *head, const char *what, int sig)
{
	const char *sid = getenv_nonempty("SLURM_JOB_ID");
	json_t *body = json_pack("{s:b}", "all", 1), *reply = NULL, *o;
	struct strbuf err = STRBUF_INIT;
	long long want = sid ? strtoll(sid, NULL, 10) : 0;
	int status, n = 0;
	size_t i;

	status = want > 0 ? dt_httpc_request(c, "POST", DT_PATH_JOBLIST, body, &reply, &err) : -1;
	if (status != 200) {
		error("Slurm's warning (signal %d) not passed on to the jobs of %s: %s", sig, what,
		      want <= 0 ? "no $SLURM_JOB_ID" : status < 0 ? err.buf :
		      dt_httpc_reply_error(reply, status));
		goto out;
	}
	json_array_foreach(json_object_get(reply, "jobs"), i, o)
		if (!strcmp(json_get_str(o, "state", ""), DT_JOB_RUNNING) &&
		    json_get_int(json_object_get(o, "slurm"), "job_id", 0) == want &&
		    json_get_str(o, "id", NULL))
			n += signal_job(c, head, json_get_str(o, "id", ""), sig) == 0;
	fprintf(stderr, "dtctl slurm-agents: Slurm's warning (signal %d) passed on to %d job(s) "
		"of %s running in Slurm job %lld\n", sig, n, what, want);
out:
	json_decref(body);
	json_decref(reply);
	strbuf_release(&err);
}

/*
 * Slurm's warning (signal sig) passed on to the ranks of dtctl's job `job`
 * (or, for a pack's allocation, `pack`: of every job running in it) through
 * dtsched at head: POST /v1/jobs/<job>/signal, signed with the cluster secret
 * (the backend's signal op then reaches every rank through its agent).  Says
 * what became of it on stderr (Slurm's output file).
 */
static void warn_ranks(const char *head, const char *secret, const char *job, const char *pack,
		       int sig)
{
	const char *colon = strrchr(head, ':');
	const char *hex = getenv_nonempty("DTCTL_AGENT_SECRET");
	struct strbuf host = STRBUF_INIT;
	struct dt_auth_key key;
	struct dt_httpc c;

	if (secret ? dt_auth_key_load(&key, secret) < 0 : !hex || dt_auth_key_from_hex(&key, hex) < 0) {
		error("Slurm's warning (signal %d) not passed on to %s %s: no cluster secret", sig,
		      job ? "job" : "the Slurm job of", job ? job : pack);
		return;
	}
	strbuf_add(&host, head, (size_t)(colon - head));
	dt_httpc_init(&c, host.buf, atoi(colon + 1), &key);
	if (job)
		signal_job(&c, head, job, sig);
	else
		signal_jobs_in(&c, head, pack, sig);
	dt_httpc_release(&c);
	strbuf_release(&host);
}

/*
 * srun (args) as our child; Slurm's warning before the time limit
 * (--signal=B:USR1@120 or as slurm: {signal, warn_s} says, scheduler/slurm.h:
 * only the batch shell, us, gets it)
 * goes to the ranks of `job`, or of every job running in `pack`'s allocation
 * (warn_ranks()), SIGTERM/SIGINT/SIGHUP go on to
 * srun as they would have reached it had we exec'd it.  srun's exit status.
 */
static int run_step_forwarding_warning(const struct strvec *args, const char *head,
				       const char *secret, const char *job, const char *pack)
{
	sigset_t set, old;
	int status = 0;
	pid_t pid;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, &old);
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return error_errno("cannot fork for '%s'", args->v[0]), DT_EXIT_FAIL;
	if (!pid) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		execvp(args->v[0], (char *const *)args->v);
		error_errno("cannot run '%s'", args->v[0]);
		_exit(127);
	}
	for (;;) {
		int sig = sigwaitinfo(&set, NULL);

		if (sig == SIGUSR1 || sig == SIGUSR2)
			warn_ranks(head, secret, job, pack, sig);
		else if (sig > 0 && sig != SIGCHLD)
			kill(pid, sig);
		if (waitpid(pid, &status, WNOHANG) == pid)
			break;
	}
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

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
		"the allocation ends.  No SSH: dtagent is taken from beside this dtctl.  Under the",
		"Slurm backend's batch script ($DTCTL_SLURM_JOB, or $DTCTL_SLURM_PACK in a sweep's",
		"allocation) it stays srun's parent and passes SIGUSR1/SIGUSR2 (Slurm's --signal",
		"warning, cluster.yaml's slurm: {signal, warn_s}) to the ranks of that job, or of",
		"every job running in the allocation.",
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
	if (getenv_nonempty(DT_ENV_SLURM_JOB) || getenv_nonempty(DT_ENV_SLURM_PACK)) {
		int code = run_step_forwarding_warning(&args, head, secret,
						       getenv_nonempty(DT_ENV_SLURM_JOB),
						       getenv_nonempty(DT_ENV_SLURM_PACK));

		strvec_clear(&args);
		strbuf_release(&bin);
		return code;
	}
	fflush(NULL);
	execvp(args.v[0], (char *const *)args.v);
	error_errno("cannot run '%s'", args.v[0]);
	strvec_clear(&args);
	strbuf_release(&bin);
	return DT_EXIT_FAIL;
}
