/*
 * test_quarantine.c - which failures count against a node, and the failure
 * window that drains it (scheduler/quarantine.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>

#include "scheduler/quarantine.h"

#define S 1000000LL
#define HOUR (3600 * 1000LL)

static void test_counts(void **state)
{
	assert_true(quarantine_counts(1, 0));
	assert_true(quarantine_counts(0, SIGSEGV));
	assert_true(quarantine_counts(0, SIGBUS));
	assert_true(quarantine_counts(0, SIGILL));
	assert_false(quarantine_counts(0, 0));         /* exit 1: the user's bug */
	assert_false(quarantine_counts(0, SIGKILL));   /* OOM killer, or a stop */
	assert_false(quarantine_counts(0, SIGTERM));
	assert_false(quarantine_counts(0, SIGABRT));
}

static void test_window(void **state)
{
	struct qfailure v[] = {
		{ 1000 * S, 0, "j-1 rank 0 exit 139" },     /* out of the window */
		{ 5000 * S, 0, "j-12 rank 3 exit 139" },
		{ 5001 * S, 1, "j-15 NODE_FAIL" },
		{ 5002 * S, 0, "j-16 rank 1 exit 135" },
	};
	struct strbuf why = STRBUF_INIT;
	long long now = 5100 * S;

	assert_int_equal(quarantine_check(v, 4, now, HOUR, 3, &why), 3);
	assert_string_equal(why.buf, "auto: 3 failures in 1h (j-12 rank 3 exit 139, "
			    "j-15 NODE_FAIL, j-16 rank 1 exit 135)");
	/* the oldest falls in a window of 2h: 4, and 4 >= 3 */
	assert_int_equal(quarantine_check(v, 4, now, 2 * HOUR, 3, &why), 4);
	assert_string_equal(why.buf, "auto: 4 failures in 2h (j-1 rank 0 exit 139, j-12 rank 3 "
			    "exit 139, j-15 NODE_FAIL, j-16 rank 1 exit 135)");
	/* under max, or max 0 (never): no reason */
	strbuf_reset(&why);
	assert_int_equal(quarantine_check(v, 4, now, HOUR, 4, &why), 3);
	assert_int_equal(why.len, 0);
	assert_int_equal(quarantine_check(v, 4, now, 2 * HOUR, 0, &why), 4);
	assert_int_equal(why.len, 0);
	/* none in the future counts (a clock stepped back) */
	assert_int_equal(quarantine_check(v, 4, 4000 * S, HOUR, 3, &why), 1);
	strbuf_release(&why);
}

static void test_same_event_and_list(void **state)
{
	struct qfailure v[8];
	const char *names[8] = { "a", "b", "c", "d", "e", "f", "g", "h" };
	struct strbuf why = STRBUF_INIT;

	/* a node that went down ended three jobs at once: one NODE_FAIL */
	for (int i = 0; i < 3; i++)
		v[i] = (struct qfailure){ 100 * S + i * S, 1, names[i] };
	assert_int_equal(quarantine_check(v, 3, 200 * S, HOUR, 2, &why), 1);
	assert_int_equal(why.len, 0);
	/* ... but a second outage a minute later counts */
	v[3] = (struct qfailure){ 161 * S, 1, "d" };
	assert_int_equal(quarantine_check(v, 4, 200 * S, HOUR, 2, &why), 2);
	assert_string_equal(why.buf, "auto: 2 failures in 1h (a, d)");
	/* signals close together are separate failures; at most 5 listed */
	for (int i = 0; i < 8; i++)
		v[i] = (struct qfailure){ 100 * S + i * S, 0, names[i] };
	assert_int_equal(quarantine_check(v, 8, 200 * S, HOUR, 3, &why), 8);
	assert_string_equal(why.buf, "auto: 8 failures in 1h (a, b, c, d, e, ...)");
	strbuf_release(&why);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counts),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_same_event_and_list),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
