/*
 * builtin.h - the dtctl commands: one function each, and the row that the
 * command table (`commands[]` in cli/dtctl.c, the only table) holds for it.
 *
 * The rule: `dtctl foo` is `int cmd_foo(int argc, const char **argv)` in
 * cli/cmd-foo.c, alone.  A command with verbs (`dtctl head start`, `dtctl
 * sweep status`, `dtctl agents stop`, `dtctl hosts forget`) is one command:
 * its verbs are dispatched in its own file.  The exceptions are named at
 * their declarations below: `resume` lives with `drain`, the commands that
 * read the table itself live in cli/dtctl.c, and a test-only one beside the
 * code it tests.  Code two commands share goes into a small file of its own
 * (cli/head.h: talking to dtsched; cli/jobdir.h: jobs; cli/cluster-ssh.h: the
 * SSH fan-out over the cluster's nodes).
 *
 * To add a command `dtctl foo`:
 *   1. write cli/cmd-foo.c, opening with a comment that says what `dtctl foo`
 *      does and what it talks to; `cmd_foo()` gets argv[0] = "foo", parses
 *      with parse_options() (its usage lines and option table are also its
 *      --help, its man page and its bash completion), and returns the exit
 *      code (enum dt_exit in lib/usage.h: 2 for bad usage, 3 when the cluster
 *      cannot be reached); it prints with --json through json_doc_print()
 *      (cli/setup.h, docs/json.md) if it shows state;
 *   2. declare `int cmd_foo(int argc, const char **argv);` below, in order;
 *   3. add its row to `commands[]` in cli/dtctl.c, in order:
 *	{ "foo", cmd_foo, "one-line summary", NEED_HEAD, FRONT },
 *      the summary is what `dtctl --help` lists and what the man page says
 *      (NULL hides the command); the flags column (enum setup_flags in
 *      cli/setup.h) says what the command needs before it runs, and the
 *      table resolves it right after the command's parse_options(), the same
 *      way for every command (-c/--cluster, $DTCTL_CLUSTER, the home):
 *	0             nothing (picks its file itself, like init and validate)
 *	USE_CLUSTER   reads the cluster file when there is one
 *	NEED_CLUSTER  needs it (the SSH commands: agents, doctor, exec, hosts, push)
 *	NEED_HEAD     talks to dtsched and never starts it (read-only commands)
 *	START_HEAD    with NEED_HEAD: may start dtsched (run)
 *	NEED_SHARED   needs the shared dir (shared_dir: or $DTCTL_SHARED_DIR)
 *      the last column, FRONT, lets the static front (cli/front.c) run it: only
 *      for a command whose every path needs no SSH, libcrypto or user/host
 *      database lookup (else 0: it runs in dtctl-full);
 *      a command that needs more only for some verbs or arguments asks for
 *      it itself with cluster_setup(FLAGS): `sweep` submitting (START_HEAD),
 *      `logs` given a job id rather than a directory (NEED_SHARED);
 *   4. document it in the docs/ page of its area and in README.md; `make man`
 *      renders its page (dtctl help --man foo) from step 1 and the summary;
 *   5. test it: tests/e2e/test_foo.py (or the test of its area) runs the real
 *      dtctl; tests/e2e/test_cli_conventions.py checks every --json output,
 *      tests/e2e/test_docs.py the man page and the completion words.
 */
#ifndef DT_BUILTIN_H
#define DT_BUILTIN_H

#include <stdnoreturn.h>

/* A row of the command table (cli/dtctl.c). */
struct cmd_struct {
	const char *name;       /* dtctl NAME */
	int (*fn)(int argc, const char **argv);   /* argv[0] is NAME; returns the exit code */
	const char *summary;    /* one line for --help and the man page; NULL: hidden */
	int flags;              /* what it needs before it runs: enum setup_flags, cli/setup.h */
	int front;              /* FRONT: the static dtctl runs it itself (cli/front.c) */
};

/*
 * The static front (cli/front.c, in bin/dtctl only): a row marked FRONT needs
 * neither SSH, libcrypto nor the user or host databases in its every mode;
 * any other row, and the modes front_needs_full() names, run in dtctl-full
 * (execv, before the command starts).  Mark a row FRONT only when its code
 * reaches none of them (tests/e2e/test_client_start.py runs the front's paths).
 */
#define FRONT 1
void front_init(int argc, char *const *argv);
const char *front_needs_full(const struct cmd_struct *cmd);
noreturn void front_exec_full(const char *why);

int cmd_acct(int argc, const char **argv);
int cmd_agents(int argc, const char **argv);
int cmd_api(int argc, const char **argv);
int cmd_cancel(int argc, const char **argv);
/* hidden: the words the bash completion offers; in cli/dtctl.c (reads the table) */
int cmd_complete(int argc, const char **argv);
int cmd_dashboard(int argc, const char **argv);
int cmd_debug(int argc, const char **argv);
int cmd_doctor(int argc, const char **argv);
/* `dtctl doctor --fabric`: the fabric test through dtsched (cmd-fabric.c) */
int doctor_fabric(const char *spec, int quick, int json);
int cmd_drain(int argc, const char **argv);
int cmd_events(int argc, const char **argv);
int cmd_exec(int argc, const char **argv);
int cmd_export(int argc, const char **argv);
int cmd_head(int argc, const char **argv);
int cmd_hosts(int argc, const char **argv);
int cmd_image(int argc, const char **argv);
int cmd_init(int argc, const char **argv);
int cmd_logs(int argc, const char **argv);
int cmd_nodes(int argc, const char **argv);
int cmd_ps(int argc, const char **argv);
int cmd_push(int argc, const char **argv);
/* drain's undo: in cli/cmd-drain.c */
int cmd_resume(int argc, const char **argv);
int cmd_run(int argc, const char **argv);
int cmd_share(int argc, const char **argv);
int cmd_show(int argc, const char **argv);
/* inside a Slurm allocation: the agents' step (slurm.h) */
int cmd_slurm_agents(int argc, const char **argv);
int cmd_sweep(int argc, const char **argv);
/* hidden, test-only: render a sweep export file; in cli/sweep-report.c */
int cmd_sweep_report_file(int argc, const char **argv);
int cmd_user(int argc, const char **argv);
int cmd_validate(int argc, const char **argv);
/* in cli/dtctl.c, beside `dtctl --version` and `dtctl help` (which lists the table) */
int cmd_version(int argc, const char **argv);
int cmd_why(int argc, const char **argv);
int cmd_whoami(int argc, const char **argv);

/*
 * 1 when standard output is a pipe or socket whose reader has gone (`dtctl
 * logs -f JOB | head`): the kernel says so (POLLERR on the write end), so a
 * command can stop quietly, with exit 0, as `tail -f | head` does.
 */
int stdout_reader_gone(void);

#endif
