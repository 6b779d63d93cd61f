/*
 * test_notify.c - the rules of notify: targets and the redaction of webhook
 * URLs (lib/notify-spec.h), as dtsched applies them to a submitted job, and
 * the YAML loader's errors at file:line:col (lib/config-notify.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "config.h"
#include "notify-spec.h"
#include "strbuf.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_redact_url),
		cmocka_unit_test(test_redact_text_and_list),
		cmocka_unit_test(test_list_rules),
		cmocka_unit_test(test_on_bits),
		cmocka_unit_test(test_yaml),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
