/*
 * test_notify.c - the rules of notify: targets and the redaction of webhook
 * URLs (lib/notify-spec.h), as dtsched applies them to a submitted job, and
 * the YAML loader's errors at file:line:col (lib/config-notify.c); and what
 * the queue owes after a restart (scheduler/notify.c: cursor and progress in
 * state.db, recomputed from the event stream).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"
#include "json.h"
#include "log.h"
#include "notify-spec.h"
#include "safefile.h"
#include "strbuf.h"
#include "scheduler/sched-int.h"

static const char *redact(const char *url)
{
	static struct strbuf sb = STRBUF_INIT;

	strbuf_reset(&sb);
	notify_redact_url(&sb, url);
	return sb.buf;
}

static void test_redact_url(void **state)
{
	assert_string_equal(redact("https://hooks.slack.com/services/T0/B0/XYZ"),
			    "https://hooks.slack.com/***");
	assert_string_equal(redact("https://h.example:8443/x?token=s3cret"),
			    "https://h.example:8443/***");
	assert_string_equal(redact("https://user:pw@h.example/p"), "https://h.example/***");
	assert_string_equal(redact("https://h.example"), "https://h.example");
	assert_string_equal(redact("https://h.example?k=v"), "https://h.example/***");
	assert_string_equal(redact("no scheme at all"), "***");
}

static void test_redact_text_and_list(void **state)
{
	json_t *list = json_pack("[{s:s,s:[s]},{s:s,s:[s]}]", "webhook",
				 "https://a.example/T/secret1", "on", "fail", "email", "me@lab",
				 "on", "done");
	json_t *shown = notify_list_redacted(list);
	struct strbuf sb = STRBUF_INIT;

	assert_string_equal(json_string_value(json_object_get(json_array_get(shown, 0),
							      "webhook")), "https://a.example/***");
	assert_string_equal(json_string_value(json_object_get(json_array_get(shown, 1),
							      "email")), "me@lab");
	/* the original is untouched: it is what is delivered to */
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0),
							      "webhook")), "https://a.example/T/secret1");
	strbuf_addstr(&sb, "Failed to connect to https://a.example/T/secret1 twice: "
		      "https://a.example/T/secret1");
	notify_redact_text(&sb, list);
	assert_string_equal(sb.buf, "Failed to connect to https://a.example/*** twice: "
			    "https://a.example/***");
	strbuf_release(&sb);
	json_decref(shown);
	json_decref(list);
}

static void check(const char *json, const char *want_err)
{
	json_t *v = json_loads(json, 0, NULL);
	struct strbuf err = STRBUF_INIT;
	int rc;

	assert_non_null(v);
	rc = notify_list_check(v, &err);
	if (!want_err) {
		if (rc)
			fail_msg("%s: %s", json, err.buf);
	} else {
		assert_int_equal(rc, -1);
		if (!strstr(err.buf, want_err))
			fail_msg("%s: expected '%s' in '%s'", json, want_err, err.buf);
	}
	strbuf_release(&err);
	json_decref(v);
}

static void test_list_rules(void **state)
{
	check("[{\"webhook\": \"https://h.example/x\", \"on\": [\"fail\", \"done\"]}]", NULL);
	check("[{\"webhook\": \"https://h.example/x\", \"format\": \"slack\", \"ca_file\": "
	      "\"/etc/ca.pem\", \"match\": \"NaN|CUDA error\", \"timeout_ms\": 5000}]", NULL);
	check("[{\"email\": \"me@lab.example\", \"on\": [\"best\"]}]", NULL);
	check("[{\"exec\": [\"/bin/cat\", \"-\"], \"on\": [\"drain\"]}]", NULL);
	check("[{\"webhook\": \"http://h.example/x\", \"on\": [\"fail\"]}]",
	      "notify[0].webhook: expected an https:// URL");
	check("[{\"webhook\": \"https://u:p@h.example/x\", \"on\": [\"fail\"]}]",
	      "no user:password@");
	check("[{\"webhook\": \"https:///x\", \"on\": [\"fail\"]}]", "with a host");
	check("[{\"email\": \"-oQ/tmp/x@lab\", \"on\": [\"fail\"]}]", "notify[0].email");
	check("[{\"email\": \"a@b@c\", \"on\": [\"fail\"]}]", "notify[0].email");
	check("[{\"email\": \"me@lab\", \"on\": [\"sometimes\"]}]", "notify[0].on");
	check("[{\"email\": \"me@lab\", \"on\": []}]", "notify[0].on");
	check("[{\"exec\": [\"cmd\"], \"on\": [\"done\"]}]", "notify[0].exec");
	check("[{\"exec\": \"/bin/true\", \"on\": [\"done\"]}]", "notify[0].exec");
	check("[{\"email\": \"me@lab\", \"match\": \"(\"}]", "notify[0].match");
	check("[{\"email\": \"me@lab\", \"match\": \"(a*)*\\\\1\"}]", "without back-references");
	check("[{\"email\": \"me@lab\", \"match\": \"a\\\\\\\\1\"}]", NULL);   /* \\1: a backslash, then 1 */
	check("[{\"email\": \"me@lab\", \"on\": [\"fail\"], \"timeout_ms\": 0}]",
	      "notify[0].timeout_ms");
	check("[{\"email\": \"me@lab\", \"on\": [\"fail\"], \"insecure\": true}]",
	      "notify[0].insecure");
	check("[{\"email\": \"me@lab\", \"format\": \"slack\", \"on\": [\"fail\"]}]",
	      "'format' and 'ca_file' go with a 'webhook' target only");
	check("[{\"email\": \"me@lab\", \"exec\": [\"/bin/true\"], \"on\": [\"fail\"]}]",
	      "not several");
	check("[{\"email\": \"me@lab\"}]", "needs 'on'");
	check("[{}]", "needs 'webhook', 'email' or 'exec'");
	check("[1]", "notify[0]: expected a mapping");
	check("{}", "a list of at most 16 targets");
}

static void test_on_bits(void **state)
{
	json_t *t = json_pack("{s:[s,s,s]}", "on", "fail", "best", "drain");

	assert_int_equal(notify_on_bits(t), (1u << NOTIFY_ON_FAIL) | (1u << NOTIFY_ON_BEST) |
			 (1u << NOTIFY_ON_DRAIN));
	json_decref(t);
}

/* the loader: every error at file:line:col, a webhook URL never quoted whole */
static void yaml_err(const char *yaml, const char *want)
{
	struct job_config j;
	struct strbuf err = STRBUF_INIT;

	assert_int_equal(job_config_parse(&j, yaml, strlen(yaml), "job.yaml", &err), -1);
	if (strcmp(err.buf, want))
		fail_msg("expected [%s] found [%s]", want, err.buf);
	strbuf_release(&err);
}

static void test_yaml(void **state)
{
	struct job_config j;
	struct strbuf err = STRBUF_INIT;
	static const char ok[] = "command: [true]\nnotify:\n"
		"  - {webhook: 'https://h.example/T/x', on: fail, timeout: 30s}\n"
		"  - {exec: /usr/bin/logger, match: 'NaN'}\n";

	assert_int_equal(job_config_parse(&j, ok, strlen(ok), "job.yaml", &err), 0);
	assert_int_equal(json_array_size(j.notify), 2);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(j.notify, 0),
							    "timeout_ms")), 30000);
	assert_string_equal(json_string_value(json_array_get(json_object_get(
		json_array_get(j.notify, 0), "on"), 0)), "fail");
	assert_string_equal(json_string_value(json_array_get(json_object_get(
		json_array_get(j.notify, 1), "exec"), 0)), "/usr/bin/logger");
	job_config_release(&j);
	strbuf_release(&err);

	yaml_err("command: [true]\nnotify:\n  - {webhook: 'ftp://h.example/T/secret', on: [fail]}\n",
		 "job.yaml:3:15: key 'notify[0].webhook': expected an https:// URL (certificates "
		 "are always verified; give 'ca_file' for a private CA), found 'ftp://h.example/***'");
	yaml_err("command: [true]\nnotify:\n  - {email: me@lab, on: [fail, often]}\n",
		 "job.yaml:3:32: key 'notify[0].on': expected a list of events: fail, done, "
		 "preempt, stall, hang, drain, best, start, retry, found 'often'");
	yaml_err("command: [true]\nnotify:\n  - {email: me@lab}\n",
		 "job.yaml:3:5: key 'notify[0]': a target needs 'on' (which events) or 'match' "
		 "(a log pattern), or both");
	yaml_err("command: [true]\nnotify: {email: me@lab}\n",
		 "job.yaml:2:9: key 'notify': expected a list of at most 16 targets such as "
		 "[{webhook: https://..., on: [fail, done]}, {email: me@lab, on: [fail]}], found a "
		 "mapping");
	yaml_err("command: [true]\nnotify:\n  - {email: me@lab, on: [fail], timeout: 11m}\n",
		 "job.yaml:3:42: key 'notify[0].timeout': expected a duration from 1ms to 10m, "
		 "found '11m'");
}

/* ------------------------------------------ the queue across a restart */

static void ended(struct sched *s, const char *job, const char *state)
{
	pthread_mutex_lock(&s->lock);
	assert_true(events_add(s, "job.ended", json_pack("{s:s,s:s}", "job", job, "state", state),
			       NULL) > 0);
	pthread_mutex_unlock(&s->lock);
}

static long long db_int(struct sched *s, const char *sql)
{
	sqlite3_stmt *st = NULL;
	long long v = -1;

	assert_int_equal(sqlite3_prepare_v2(s->db, sql, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

static void progress(struct sched *s, long long id, const char *key, int tries, int done)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "INSERT OR REPLACE INTO notify_progress(event_id, target, tries, "
		 "done) VALUES(%lld, '%s', %d, %d)", id, key, tries, done);
	assert_int_equal(db_exec(s, sql), 0);
}

static size_t queue_len(struct sched *s)
{
	json_t *q = notify_queue_json(s);
	size_t n = json_array_size(q);

	json_decref(q);
	return n;
}

/* the queue as "ID:exec|web:TRIES ..." */
static const char *queued(struct sched *s, const char *kexec)
{
	static char buf[256];
	json_t *q = notify_queue_json(s), *it;
	size_t i, off = 0;

	buf[0] = 0;
	json_array_foreach(q, i, it)
		if (i < 8)
			off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%lld:%s:%lld", i ? " " : "",
						json_get_int(it, "event_id", 0),
						!strcmp(json_get_str(it, "target", ""), kexec) ? "exec" : "web",
						json_get_int(it, "tries", -1));
	json_decref(q);
	return buf;
}

/* A head whose events are in memory, with cluster.yaml's notify: list `ops`. */
static struct sched *notify_head(json_t *ops)
{
	struct sched *s = xcalloc(1, sizeof(*s));

	pthread_mutex_init(&s->lock, NULL);
	assert_int_equal(sqlite3_open(":memory:", &s->db), SQLITE_OK);
	assert_int_equal(events_init(s), 0);
	s->cc = xcalloc(1, sizeof(*s->cc));
	s->cc->notify = ops;
	return s;
}

static void notify_head_free(struct sched *s)
{
	events_release(s);
	sqlite3_close(s->db);
	json_decref(s->cc->notify);
	free(s->cc);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/*
 * What a stopped (or killed) dtsched owed is queued again at its start: the
 * events after the cursor that a target asks for, less the deliveries state.db
 * says are settled, with the tries they had; the cursor stops before the
 * oldest owed; what exceeds the queue is dropped, counted and not owed again.
 */
static void test_queue_recomputed_at_start(void **state)
{
	struct sched *s = notify_head(json_pack("[{s:[s],s:[s]},{s:s,s:[s]}]", "exec", "/bin/true",
						"on", "done", "webhook", "https://h.example/T/secret",
						"on", "fail"));
	char kexec[DT_SHA256_HEX], kweb[DT_SHA256_HEX];
	struct strbuf m = STRBUF_INIT;

	notify_target_key(json_array_get(s->cc->notify, 0), kexec);
	notify_target_key(json_array_get(s->cc->notify, 1), kweb);
	assert_string_not_equal(kexec, kweb);

	/* a first start owes nothing from before: the cursor starts at the stream's end */
	ended(s, "j-0", "COMPLETED");
	assert_int_equal(notify_open(s), 0);
	assert_string_equal(queued(s, kexec), "");
	notify_stop(s);
	assert_int_equal(db_int(s, "SELECT upto FROM notify_cursor"), 1);

	/* stopped: events 2..7 happen (the hook is gone, as in a crash) */
	ended(s, "j-2", "COMPLETED");
	ended(s, "j-3", "COMPLETED");
	ended(s, "j-4", "COMPLETED");
	ended(s, "j-5", "FAILED");
	pthread_mutex_lock(&s->lock);
	events_add(s, "node.down", json_pack("{s:s}", "node", "n1"), NULL);
	events_add(s, "notify.failed", json_pack("{s:s,s:I}", "type", "exec", "event_id",
						  (json_int_t)2), NULL);
	pthread_mutex_unlock(&s->lock);
	progress(s, 3, kexec, 4, 1);   /* settled (failed for good) before the stop */
	progress(s, 4, kexec, 2, 0);   /* two failed tries */
	assert_int_equal(notify_open(s), 0);
	assert_string_equal(queued(s, kexec), "2:exec:0 4:exec:2 5:web:0");
	assert_int_equal(db_int(s, "SELECT upto FROM notify_cursor"), 1);
	notify_stop(s);
	assert_int_equal(db_int(s, "SELECT upto FROM notify_cursor"), 1);

	/* all settled now: nothing owed, the cursor at the end, its progress forgotten */
	progress(s, 2, kexec, 1, 1);
	progress(s, 4, kexec, 3, 1);
	progress(s, 5, kweb, 1, 1);
	assert_int_equal(notify_open(s), 0);
	assert_string_equal(queued(s, kexec), "");
	notify_stop(s);
	assert_int_equal(db_int(s, "SELECT upto FROM notify_cursor"), 7);
	assert_int_equal(db_int(s, "SELECT COUNT(*) FROM notify_progress"), 0);

	/* more than an owner's share of the queue (the operator's here: a quarter of
	 * 1,024): the rest dropped, counted, and not owed again */
	for (int i = 0; i < 262; i++)
		ended(s, "j-9", "COMPLETED");
	assert_int_equal(notify_open(s), 0);
	assert_int_equal(queue_len(s), 256);
	notify_metrics(s, &m);
	assert_non_null(strstr(m.buf, "\ndtsched_notifications_dropped_total 6\n"));
	notify_stop(s);
	assert_int_equal(db_int(s, "SELECT upto FROM notify_cursor"), 7);
	assert_int_equal(notify_open(s), 0);
	strbuf_reset(&m);
	notify_metrics(s, &m);
	assert_non_null(strstr(m.buf, "\ndtsched_notifications_dropped_total 0\n"));
	assert_int_equal(queue_len(s), 256);
	notify_stop(s);

	strbuf_release(&m);
	notify_head_free(s);
}

/*
 * One owner's targets (a job's own: its user's) hold at most a quarter of the
 * queue: a user whose receivers are dead cannot fill it so that another's
 * deliveries are dropped.
 */
static void test_one_owner_cannot_fill_the_queue(void **state)
{
	struct sched *s = xcalloc(1, sizeof(*s));
	json_t *mine = json_pack("[{s:s,s:[s]}]", "webhook", "https://dead.example/x", "on", "done");
	json_t *hers = json_pack("[{s:[s],s:[s]}]", "exec", "/bin/true", "on", "done");
	json_t *q, *it;
	size_t i, by_mal = 0, by_eve = 0;

	pthread_mutex_init(&s->lock, NULL);
	assert_int_equal(sqlite3_open(":memory:", &s->db), SQLITE_OK);
	assert_int_equal(events_init(s), 0);
	assert_int_equal(notify_open(s), 0);   /* the hook, no worker: nothing leaves */
	pthread_mutex_lock(&s->lock);
	for (int n = 0; n < 1100; n++)
		events_add(s, "job.ended", json_pack("{s:s,s:s,s:s}", "job", "j-1", "user", "mal",
						     "state", "COMPLETED"), mine);
	events_add(s, "job.ended", json_pack("{s:s,s:s,s:s}", "job", "j-2", "user", "eve",
					     "state", "COMPLETED"), hers);
	pthread_mutex_unlock(&s->lock);
	q = notify_queue_json(s);
	json_array_foreach(q, i, it)
		if (json_get_int(it, "event_id", 0) == 1101)
			by_eve++;
		else
			by_mal++;
	json_decref(q);
	assert_int_equal(by_mal, 256);
	assert_int_equal(by_eve, 1);
	notify_stop(s);
	events_release(s);
	sqlite3_close(s->db);
	json_decref(mine);
	json_decref(hers);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* ------------------------------------ many owners' receivers hanging */

/*
 * A local server that never answers: the kernel completes each TCP handshake
 * (the listen backlog) and nobody ever reads, so a webhook's TLS handshake
 * waits for its timeout.  Its port in *port; the socket to close.
 */
static int dead_server(int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 256), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* n users' jobs ended, each with its own webhook to the dead server (10 minutes a try) */
static void hanging_owners(struct sched *s, int n, int port)
{
	char url[64];
	json_t *mine;

	snprintf(url, sizeof(url), "https://127.0.0.1:%d/hook", port);
	mine = json_pack("[{s:s,s:[s],s:i}]", "webhook", url, "on", "done", "timeout_ms", 600000);
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < n; i++) {
		char user[32];

		snprintf(user, sizeof(user), "user%d", i);
		assert_true(events_add(s, "job.ended", json_pack("{s:s,s:s,s:s}", "job", "j-1",
				       "user", user, "state", "COMPLETED"), mine) > 0);
	}
	pthread_mutex_unlock(&s->lock);
	json_decref(mine);
}

/* a sample of /metrics, or -1 */
static double notify_metric(struct sched *s, const char *sample)
{
	struct strbuf m = STRBUF_INIT;
	char *p;
	double v = -1;

	notify_metrics(s, &m);
	p = strstr(m.buf, sample);
	if (p)
		v = strtod(p + strlen(sample), NULL);
	strbuf_release(&m);
	return v;
}

static void nap(void)
{
	struct timespec ts = { 0, 50 * 1000000L };   /* between polls of a condition */

	nanosleep(&ts, NULL);
}

/*
 * Eight users whose webhooks accept and never answer (10 minutes a try) hold
 * eight deliveries; the operator's target, queued after them all, is still
 * delivered at once: each owner with a due delivery gets a thread of its
 * own.  (With four threads for everyone, the four first held them all.)  A
 * stop ends the hanging tries at once and leaves them owed.
 */
static void test_hanging_owners_hold_nobody_else(void **state)
{
	char out[] = "/tmp/dt-notify-XXXXXX", path[64], ev[64];
	struct strbuf got = STRBUF_INIT, err = STRBUF_INIT;
	struct sched *s;
	long long deadline, t0;
	int port, fd = dead_server(&port);

	assert_non_null(mkdtemp(out));
	snprintf(path, sizeof(path), "%s/got", out);
	/* the operator's target: on a failure only, so the 8 completed jobs are not its */
	s = notify_head(json_pack("[{s:[s,s],s:[s]}]", "exec", "/usr/bin/tee", path, "on", "fail"));
	assert_int_equal(notify_open(s), 0);
	hanging_owners(s, 8, port);
	pthread_mutex_lock(&s->lock);
	assert_true(events_add(s, "job.ended", json_pack("{s:s,s:s,s:s}", "job", "j-2", "user",
			       "eve", "state", "FAILED"), NULL) == 9);
	pthread_mutex_unlock(&s->lock);
	assert_int_equal(queue_len(s), 9);
	assert_int_equal(notify_run(s), 0);

	deadline = dt_mono_ms() + 30000;
	snprintf(ev, sizeof(ev), "\"id\":%d", 9);
	while (dt_mono_ms() < deadline) {
		strbuf_reset(&got);
		strbuf_reset(&err);
		if (sf_read_named(path, &got, 1 << 20, &err) >= 0 && strstr(got.buf, "\n"))
			break;
		nap();
	}
	if (!strstr(got.buf, ev))
		fail_msg("the operator's target got [%s] within 30 s, expected the event with %s: "
			 "8 hanging owners held every delivery thread", got.buf, ev);
	/* the eight still hang, each in a try of its own */
	deadline = dt_mono_ms() + 30000;
	while (notify_metric(s, "\ndtsched_notifications_in_progress ") != 8 &&
	       dt_mono_ms() < deadline)
		nap();
	assert_int_equal(notify_metric(s, "\ndtsched_notifications_in_progress "), 8);
	assert_int_equal(queue_len(s), 8);
	t0 = dt_mono_ms();
	notify_stop(s);
	if (dt_mono_ms() - t0 > 20000)
		fail_msg("notify_stop() took %lld ms with 8 tries in progress", dt_mono_ms() - t0);
	/* aborted by the stop, not failed: owed at the next start (the cursor stops
	 * before the oldest; only the operator's is settled) */
	assert_int_equal(db_int(s, "SELECT upto FROM notify_cursor"), 0);
	assert_int_equal(db_int(s, "SELECT COUNT(*) FROM notify_progress WHERE done"), 1);
	assert_int_equal(db_int(s, "SELECT COUNT(*) FROM events WHERE kind = 'notify.failed'"), 0);

	close(fd);
	unlink(path);
	rmdir(out);
	strbuf_release(&got);
	strbuf_release(&err);
	notify_head_free(s);
}

/*
 * Threads start on demand, one per owner with a due delivery, up to 64: 70
 * owners hanging at once take 64 threads, the other 6 wait their turn.
 */
static void test_delivery_threads_stop_at_the_cap(void **state)
{
	struct sched *s = notify_head(NULL);
	long long deadline;
	int port, fd = dead_server(&port), most = 0;

	assert_int_equal(notify_open(s), 0);
	assert_int_equal(notify_metric(s, "\ndtsched_notifications_threads "), 0);
	hanging_owners(s, 70, port);
	assert_int_equal(notify_run(s), 0);
	deadline = dt_mono_ms() + 60000;   /* ~1 s; 64 TLS clients starting under valgrind: ~40 s */
	while (dt_mono_ms() < deadline) {
		int n = (int)notify_metric(s, "\ndtsched_notifications_threads ");

		most = n > most ? n : most;
		if (notify_metric(s, "\ndtsched_notifications_in_progress ") == 64)
			break;
		nap();
	}
	assert_int_equal(notify_metric(s, "\ndtsched_notifications_in_progress "), 64);
	assert_int_equal(notify_metric(s, "\ndtsched_notifications_threads "), 64);
	assert_true(most <= 64);
	assert_int_equal(queue_len(s), 70);
	notify_stop(s);
	close(fd);
	notify_head_free(s);
}

/*
 * An idle delivery thread ends (here after 200 ms, 30 s in dtsched): a burst
 * of deliveries leaves no threads behind, and the next delivery starts one.
 */
static void test_idle_delivery_threads_end(void **state)
{
	struct sched *s = notify_head(json_pack("[{s:[s],s:[s]}]", "exec", "/bin/true", "on", "done"));
	const char *sent = "{type=\"exec\",result=\"sent\"} ";
	long long deadline;

	assert_int_equal(notify_open(s), 0);
	notify_idle_ms_set(s, 200);
	assert_int_equal(notify_run(s), 0);
	assert_int_equal(notify_metric(s, "\ndtsched_notifications_threads "), 0);
	for (int round = 1; round <= 2; round++) {
		ended(s, "j-1", "COMPLETED");
		deadline = dt_mono_ms() + 30000;
		while ((notify_metric(s, sent) != round ||
			notify_metric(s, "\ndtsched_notifications_threads ") != 0) &&
		       dt_mono_ms() < deadline)
			nap();
		assert_int_equal(notify_metric(s, sent), round);
		assert_int_equal(notify_metric(s, "\ndtsched_notifications_threads "), 0);
	}
	notify_stop(s);
	notify_head_free(s);
}

/*
 * A job's name, a log line or a reason reaches the operator's chat as text:
 * never a mention that pings the channel or a link showing another address
 * than it opens (Slack's <!channel>, <URL|text>; Discord's @everyone,
 * [text](URL)).  The generic payload keeps the words as they are.
 */
static void test_chat_payloads_are_text_only(void **state)
{
	json_t *ev = json_pack("{s:s,s:s,s:s,s:s}", "kind", "job.ended", "job", "j-7", "name",
			       "<!channel> <https://evil.example|log in> [log in](https://evil.example)"
			       " @everyone a&b *bold* _it_", "state", "FAILED");
	json_t *b, *none = json_pack("{s:[]}", "parse");
	const char *text;

	b = notify_webhook_body(ev, "slack");
	text = json_get_str(b, "text", "");
	assert_string_equal(text, "dtctl job.ended: job j-7 (&lt;!channel&gt; &lt;https://evil.example"
			    "|log in&gt; [log in](https://evil.example) @everyone a&amp;b *bold* "
			    "_it_) FAILED");
	assert_null(strchr(text, '<'));
	json_decref(b);

	b = notify_webhook_body(ev, "discord");
	assert_string_equal(json_get_str(b, "content", ""),
			    "dtctl job.ended: job j-7 \\(\\<!channel\\> \\<https://evil.example"
			    "\\|log in\\> \\[log in\\]\\(https://evil.example\\) \\@everyone "
			    "a&b \\*bold\\* \\_it\\_\\) FAILED");
	assert_true(json_equal(json_object_get(b, "allowed_mentions"), none));
	json_decref(b);

	b = notify_webhook_body(ev, "generic");
	assert_non_null(strstr(json_get_str(b, "text", ""), "(<!channel> <https://evil.example|"));
	assert_string_equal(json_get_str(json_object_get(b, "event"), "name", ""),
			    json_get_str(ev, "name", ""));
	json_decref(b);
	json_decref(ev);
	json_decref(none);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_redact_url),
		cmocka_unit_test(test_redact_text_and_list),
		cmocka_unit_test(test_list_rules),
		cmocka_unit_test(test_on_bits),
		cmocka_unit_test(test_yaml),
		cmocka_unit_test(test_queue_recomputed_at_start),
		cmocka_unit_test(test_one_owner_cannot_fill_the_queue),
		cmocka_unit_test(test_chat_payloads_are_text_only),
		cmocka_unit_test(test_hanging_owners_hold_nobody_else),
		cmocka_unit_test(test_delivery_threads_stop_at_the_cap),
		cmocka_unit_test(test_idle_delivery_threads_end),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
