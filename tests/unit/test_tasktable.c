/*
 * test_tasktable.c - the agent's task table (agent/task.h): request
 * validation, the file and API forms, atomic save/load round trips, loading
 * a directory with junk in it; and the log line writer (agent/linelog.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/linelog.h"
#include "agent/task.h"
#include "json.h"
#include "log.h"

static json_t *parse(const char *s)
{
	json_t *j = json_parse(s, strlen(s), NULL);

	assert_non_null(j);
	return j;
}

static void expect_invalid(const char *req, const char *msg_part)
{
	struct strbuf err = STRBUF_INIT;
	json_t *j = parse(req), *spec = task_spec_validate(j, &err);

	if (spec)
		fail_msg("expected '%s' to be refused", req);
	if (!strstr(err.buf, msg_part))
		fail_msg("error for '%s' is '%s', expected it to mention '%s'", req, err.buf, msg_part);
	json_decref(j);
	strbuf_release(&err);
}

static void test_ids_and_states(void **state)
{
	enum task_state s;

	assert_true(task_id_valid("t-00ab"));
	assert_true(task_id_valid("j-000042.rank_3"));
	assert_false(task_id_valid(""));
	assert_false(task_id_valid(".hidden"));
	assert_false(task_id_valid("a/b"));
	assert_false(task_id_valid("a b"));
	assert_false(task_id_valid("x123456789x123456789x123456789x123456789x123456789x123456789x1234"));
	assert_int_equal(task_state_parse("stopping", &s), 0);
	assert_int_equal(s, TASK_STOPPING);
	assert_int_equal(task_state_parse("bogus", &s), -1);
	assert_true(task_state_final(TASK_EXITED) && task_state_final(TASK_LOST) &&
		    task_state_final(TASK_FAILED));
	assert_false(task_state_final(TASK_RUNNING) || task_state_final(TASK_STARTING));
}

static void test_validate(void **state)
{
	struct strbuf err = STRBUF_INIT;
	json_t *req = parse("{\"argv\":[\"python\",\"train.py\"],\"env\":{\"LR\":\"0.1\"},"
			    "\"cuda_visible_devices\":[0,2],\"limits\":{\"nofile\":1024},"
			    "\"log\":\"/tmp/x.log\",\"rank\":3,\"job_id\":\"j-1\"}");
	json_t *spec = task_spec_validate(req, &err);

	assert_non_null(spec);
	assert_string_equal(json_get_str(spec, "cuda_visible_devices", ""), "0,2");
	assert_int_equal(json_get_int(spec, "grace_ms", 0), 10000);
	assert_false(json_is_true(json_object_get(spec, "shell")));
	assert_int_equal(json_get_int(spec, "rank", -1), 3);
	json_decref(spec);
	json_decref(req);

	expect_invalid("{}", "argv");
	expect_invalid("{\"argv\":[]}", "argv");
	expect_invalid("{\"argv\":[1]}", "argv[0]");
	{
		/* jansson's parser refuses \u0000, but a built object may hold one */
		json_t *j = json_pack("{s:[o]}", "argv", json_stringn("a\0b", 3));

		assert_null(task_spec_validate(j, &err));
		assert_non_null(strstr(err.buf, "NUL"));
		json_decref(j);
		strbuf_reset(&err);
	}
	expect_invalid("{\"argv\":[\"x\"],\"shell\":\"yes\"}", "shell");
	expect_invalid("{\"argv\":[\"x\"],\"env\":{\"DT_TASK_ID\":\"y\"}}", "DT_TASK_ID");
	expect_invalid("{\"argv\":[\"x\"],\"env\":{\"DT_TASK_INSTANCE\":\"y\"}}", "DT_TASK_INSTANCE");
	expect_invalid("{\"argv\":[\"x\"],\"env\":{\"A\":1}}", "env.A");
	expect_invalid("{\"argv\":[\"x\"],\"cwd\":\"relative\"}", "cwd");
	expect_invalid("{\"argv\":[\"x\"],\"grace_ms\":-1}", "grace_ms");
	expect_invalid("{\"argv\":[\"x\"],\"limits\":{\"bogus\":1}}", "bogus");
	expect_invalid("{\"argv\":[\"x\"],\"argz\":1}", "argz");
	strbuf_release(&err);
}

static void test_roundtrip(void **state)
{
	char dir[] = "/tmp/dt-tasktable-XXXXXX";
	struct strbuf err = STRBUF_INIT, path = STRBUF_INIT;
	struct task t, back;
	json_t *req, *api;
	struct stat st;

	assert_non_null(mkdtemp(dir));
	req = parse("{\"argv\":[\"sleep\",\"1\"],\"env\":{\"SECRET_TOKEN\":\"hunter2\"}}");
	task_init(&t);
	strcpy(t.id, "t-1");
	t.spec = task_spec_validate(req, &err);
	assert_non_null(t.spec);
	t.state = TASK_EXITED;
	t.pid = 1234;
	t.pgid = 1234;
	t.sup_pid = 1233;
	t.sup_start = 987654321ULL;
	t.cgroup = strdup("/sys/fs/cgroup/dtctl/t-1");
	strcpy(t.marker, "0123456789abcdef0123456789abcdef");
	t.has_exit = 1;
	t.exit_code = 143;
	t.signal = 15;
	t.stop_requested = 1;
	t.vouches = 1;
	t.created_us = dt_timestamp_parse("2026-11-22T10:00:00.123456Z");
	t.ended_us = t.created_us + 1500000;
	assert_int_equal(task_save(dir, &t), 0);
	task_path(&path, dir, "t-1");
	assert_int_equal(stat(path.buf, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);

	assert_int_equal(task_load(dir, "t-1", &back, &err), 0);
	assert_string_equal(back.id, "t-1");
	assert_int_equal(back.state, TASK_EXITED);
	assert_int_equal(back.pid, 1234);
	assert_int_equal(back.sup_start, 987654321ULL);
	assert_string_equal(back.cgroup, "/sys/fs/cgroup/dtctl/t-1");
	assert_string_equal(back.marker, t.marker);
	{
		struct proc_tree pt = task_proc_tree(&back);

		assert_int_equal(pt.pgid, 1234);
		assert_string_equal(pt.cgroup, back.cgroup);
		assert_string_equal(pt.marker_name, "DT_TASK_INSTANCE");
		assert_string_equal(pt.marker, t.marker);
	}
	assert_true(back.has_exit);
	assert_int_equal(back.exit_code, 143);
	assert_int_equal(back.signal, 15);
	assert_true(back.stop_requested);
	assert_true(back.vouches);    /* its supervisor reports its end (agent/report.h) */
	assert_int_equal(back.created_us, t.created_us);
	assert_int_equal(back.ended_us, t.ended_us);
	assert_int_equal(back.started_us, 0);
	assert_string_equal(json_get_str(json_object_get(back.spec, "env"), "SECRET_TOKEN", ""), "hunter2");

	/* the API form names env variables but never shows their values */
	api = task_to_json(&back, 1);
	assert_null(json_object_get(api, "spec"));
	assert_string_equal(json_string_value(json_array_get(json_object_get(api, "env_keys"), 0)),
			    "SECRET_TOKEN");
	assert_string_equal(json_get_str(api, "created_at", ""), "2026-11-22T10:00:00.123456Z");
	assert_true(json_is_null(json_object_get(api, "started_at")));
	assert_null(json_object_get(api, "marker"));
	assert_null(json_object_get(api, "vouches"));
	{
		struct strbuf dump = STRBUF_INIT;

		json_append(&dump, api);
		assert_null(strstr(dump.buf, "hunter2"));
		strbuf_release(&dump);
	}
	json_decref(api);

	/* a missing exit code stays missing; an older supervisor's file does not vouch */
	back.has_exit = 0;
	back.state = TASK_RUNNING;
	back.vouches = 0;
	assert_int_equal(task_save(dir, &back), 0);
	task_release(&back);
	assert_int_equal(task_load(dir, "t-1", &back, &err), 0);
	assert_false(back.vouches);
	assert_false(back.has_exit);
	assert_int_equal(back.state, TASK_RUNNING);

	/* a task file from before markers (or with a damaged one) is matched by its id */
	back.marker[0] = '\0';
	assert_int_equal(task_save(dir, &back), 0);
	task_release(&back);
	assert_int_equal(task_load(dir, "t-1", &back, &err), 0);
	assert_string_equal(back.marker, "");
	{
		struct proc_tree pt = task_proc_tree(&back);

		assert_string_equal(pt.marker_name, "DT_TASK_ID");
		assert_string_equal(pt.marker, "t-1");
	}

	task_release(&back);
	task_release(&t);
	json_decref(req);
	unlink(path.buf);
	rmdir(dir);
	strbuf_release(&err);
	strbuf_release(&path);
}

static void write_str(const char *dir, const char *name, const char *s)
{
	char p[512];
	FILE *fp;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fp = fopen(p, "w");
	assert_non_null(fp);
	fputs(s, fp);
	fclose(fp);
}

static void test_load_dir(void **state)
{
	char dir[] = "/tmp/dt-tasktable-XXXXXX";
	struct strbuf err = STRBUF_INIT;
	struct task_table tt = TASK_TABLE_INIT;
	struct task *t;
	const char *names[] = { "a.json", "b.json", "junk.json", "other.json", "c.json.tmp.1",
				"notes.txt", "..json" };

	assert_non_null(mkdtemp(dir));
	for (int i = 0; i < 2; i++) {
		struct task x;

		task_init(&x);
		x.id[0] = (char)('a' + i);
		x.spec = json_pack("{s:[s]}", "argv", "true");
		x.state = i ? TASK_RUNNING : TASK_EXITED;
		assert_int_equal(task_save(dir, &x), 0);
		task_release(&x);
	}
	write_str(dir, "junk.json", "{not json");
	write_str(dir, "other.json", "{\"id\":\"zzz\",\"state\":\"running\",\"spec\":{\"argv\":[\"x\"]}}");
	write_str(dir, "c.json.tmp.1", "partial");
	write_str(dir, "notes.txt", "hello");
	write_str(dir, "..json", "{}");

	assert_int_equal(task_table_load_dir(&tt, dir, &err), 2);
	assert_non_null(strstr(err.buf, "junk.json"));
	assert_non_null(strstr(err.buf, "zzz"));     /* a file holding another id is refused */
	t = task_table_find(&tt, "b");
	assert_non_null(t);
	assert_int_equal(t->state, TASK_RUNNING);
	task_table_remove(&tt, "a");
	assert_null(task_table_find(&tt, "a"));
	assert_int_equal(tt.nr, 1);
	task_table_release(&tt);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char p[512];

		snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
		unlink(p);
	}
	rmdir(dir);
	strbuf_release(&err);
}

/* Strip the timestamps: "…Z O text\n" -> "O text\n". */
static void strip_ts(struct strbuf *in, struct strbuf *out)
{
	char *p = in->buf;

	while (*p) {
		char *nl = strchr(p, '\n');

		assert_non_null(nl);
		assert_true(nl - p >= DT_TIMESTAMP_LEN);
		assert_int_equal(p[DT_TIMESTAMP_LEN - 2], 'Z');
		strbuf_add(out, p + DT_TIMESTAMP_LEN, (size_t)(nl - p) - DT_TIMESTAMP_LEN + 1);
		p = nl + 1;
	}
}

static void test_linelog(void **state)
{
	struct linelog l;
	struct strbuf out = STRBUF_INIT, plain = STRBUF_INIT;
	const char input[] = "hello\nwor";
	const char more[] = "ld\r\n\rprog 10%\rprog 20%\r\nbin\x01\x7f\tok\n\ntail";

	linelog_init(&l, 'O', 0);
	linelog_feed(&l, input, sizeof(input) - 1, &out);
	linelog_feed(&l, more, sizeof(more) - 1, &out);
	linelog_flush(&l, &out);
	strip_ts(&out, &plain);
	assert_string_equal(plain.buf, "O hello\nO world\nO prog 10%\nO prog 20%\n"
			    "O bin\\x01\\x7f\tok\nO \nO tail\n");
	linelog_release(&l);
	strbuf_reset(&out);
	strbuf_reset(&plain);

	/* long lines are split, never inside a UTF-8 sequence */
	linelog_init(&l, 'E', 8);
	linelog_feed(&l, "abcdefg\xc3\xa9xyz\n", 13, &out);
	strip_ts(&out, &plain);
	assert_string_equal(plain.buf, "E abcdefg\nE \xc3\xa9xyz\n");
	linelog_release(&l);
	strbuf_release(&out);
	strbuf_release(&plain);
}

/* what cannot be written is counted: the rank's lines, never the writer's A/Z markers */
static void test_linelog_loss(void **state)
{
	struct linelog l;
	struct strbuf out = STRBUF_INIT;
	struct log_loss loss = { 0, 0, 0 };
	int fd = open("/dev/full", O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		skip();
	linelog_marker(&out, 1, "n1");
	linelog_init(&l, 'O', 0);
	linelog_feed(&l, "one\ntwo\n", 8, &out);
	linelog_end_marker(&out);
	assert_int_equal(linelog_write(fd, &out, &loss), ENOSPC);
	assert_int_equal(loss.lines, 2);
	assert_int_equal(loss.err, ENOSPC);
	assert_true(loss.bytes > 8);
	assert_int_equal(out.len, 0);
	linelog_release(&l);
	strbuf_release(&out);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ids_and_states),
		cmocka_unit_test(test_validate),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_load_dir),
		cmocka_unit_test(test_linelog),
		cmocka_unit_test(test_linelog_loss),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
