/*
 * builtin.h - the dtctl subcommands.
 *
 * To add a command `dtctl foo`:
 *   1. write cli/cmd-foo.c exporting `int cmd_foo(int argc, const char **argv)`;
 *      argv[0] is "foo"; parse with parse_options(); return the exit code
 *      (enum dt_exit in lib/usage.h);
 *   2. declare it below and add a row to the table in cli/dtctl.c
 *      (name, function, one-line summary, what it needs: cli/setup.h flags;
 *      -c/--cluster is then parsed for it and the_cluster resolved before it
 *      runs; --json output goes through json_doc_print(), docs/json.md);
 *   3. document it in docs/ (the page of its area) and the README; its man page
 *      (`make man`: dtctl help --man foo) and its bash completion come from
 *      its option table, its usage lines and its summary in the table;
 *   4. test it: tests/e2e/test_foo.py runs the real binary.
 */
#ifndef DT_BUILTIN_H
#define DT_BUILTIN_H

int cmd_agents(int argc, const char **argv);
int cmd_api(int argc, const char **argv);
int cmd_cancel(int argc, const char **argv);
/* hidden: the words the bash completion offers (cli/dtctl.c) */
int cmd_complete(int argc, const char **argv);
int cmd_doctor(int argc, const char **argv);
int cmd_drain(int argc, const char **argv);
int cmd_head(int argc, const char **argv);
int cmd_nodes(int argc, const char **argv);
int cmd_resume(int argc, const char **argv);
int cmd_run(int argc, const char **argv);
int cmd_show(int argc, const char **argv);
int cmd_sweep(int argc, const char **argv);
/* hidden, test-only: render a sweep export file (cli/sweep-report.c) */
int cmd_sweep_report_file(int argc, const char **argv);
int cmd_exec(int argc, const char **argv);
int cmd_hosts(int argc, const char **argv);
int cmd_init(int argc, const char **argv);
int cmd_logs(int argc, const char **argv);
int cmd_ps(int argc, const char **argv);
int cmd_push(int argc, const char **argv);
int cmd_validate(int argc, const char **argv);
int cmd_version(int argc, const char **argv);

#endif
