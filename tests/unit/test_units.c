/*
 * test_units.c - durations and sizes (lib/units.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "strbuf.h"
#include "units.h"

static long long dur(const char *s)
{
	long long ms = -42;

	assert_int_equal(parse_duration_ms(s, &ms), 0);
	return ms;
}

static void test_duration_good(void **state)
{
	assert_int_equal(dur("90s"), 90000);
	assert_int_equal(dur("2h"), 7200000);
	assert_int_equal(dur("500ms"), 500);
	assert_int_equal(dur("1h30m"), 5400000);
	assert_int_equal(dur("1.5h"), 5400000);
	assert_int_equal(dur("0.25s"), 250);
	assert_int_equal(dur("1d"), 86400000LL);
	assert_int_equal(dur("1m30s250ms"), 90250);
	assert_int_equal(dur("0"), 0);
	assert_int_equal(dur("0s"), 0);
	assert_int_equal(dur("10m"), 600000);
}

static void test_duration_bad(void **state)
{
	static const char *const bad[] = {
		"", "30", "1.5", "s", "10x", "1h1h", "30m1h", "1s 2ms", " 5s", "5s ", "-5s", "1e3s",
		"inf", "5.s", ".5s", "1m1", "1000000000000000000s", "0x10s", "5S",
	};
	long long ms = 7;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (parse_duration_ms(bad[i], &ms) == 0)
			fail_msg("'%s' should be refused", bad[i]);
	}
	assert_int_equal(ms, 7);
}

static void test_size(void **state)
{
	unsigned long long b = 0;

	assert_int_equal(parse_size_bytes("4G", &b), 0);
	assert_true(b == 4ULL << 30);
	assert_int_equal(parse_size_bytes("512M", &b), 0);
	assert_true(b == 512ULL << 20);
	assert_int_equal(parse_size_bytes("1.5K", &b), 0);
	assert_true(b == 1536);
	assert_int_equal(parse_size_bytes("4GiB", &b), 0);
	assert_true(b == 4ULL << 30);
	assert_int_equal(parse_size_bytes("2kb", &b), 0);
	assert_true(b == 2048);
	assert_int_equal(parse_size_bytes("100", &b), 0);
	assert_true(b == 100);
	assert_int_equal(parse_size_bytes("100B", &b), 0);
	assert_true(b == 100);
	assert_int_equal(parse_size_bytes("1T", &b), 0);
	assert_true(b == 1ULL << 40);
	assert_int_equal(parse_size_bytes("", &b), -1);
	assert_int_equal(parse_size_bytes("G", &b), -1);
	assert_int_equal(parse_size_bytes("4X", &b), -1);
	assert_int_equal(parse_size_bytes("4GX", &b), -1);
	assert_int_equal(parse_size_bytes("1.5", &b), -1);
	assert_int_equal(parse_size_bytes("-1K", &b), -1);
	assert_int_equal(parse_size_bytes("99999999999999P", &b), -1);
}

static void check_format(long long ms, const char *want)
{
	struct strbuf sb = STRBUF_INIT;
	long long back;

	format_duration(&sb, ms);
	assert_string_equal(sb.buf, want);
	if (ms >= 0) {
		assert_int_equal(parse_duration_ms(sb.buf, &back), 0);
		assert_int_equal(back, ms);
	}
	strbuf_release(&sb);
}

static void test_format(void **state)
{
	check_format(0, "0s");
	check_format(250, "250ms");
	check_format(10000, "10s");
	check_format(5400000, "1h30m");
	check_format(90250, "1m30s250ms");
	check_format(86400000LL * 2, "2d");
	check_format(3600000, "1h");
	check_format(-1500, "-1s500ms");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_duration_good),
		cmocka_unit_test(test_duration_bad),
		cmocka_unit_test(test_size),
		cmocka_unit_test(test_format),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
