/*
 * test_units.c - durations, sizes, numbers and plurals (lib/units.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
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

static void check_human(long long ms, const char *want)
{
	struct strbuf sb = STRBUF_INIT;
	long long back;

	format_duration_human(&sb, ms);
	assert_string_equal(sb.buf, want);
	/* lossy, but still a duration the config parser reads */
	if (ms >= 0)
		assert_int_equal(parse_duration_ms(sb.buf, &back), 0);
	strbuf_release(&sb);
}

static void test_format_human(void **state)
{
	check_human(0, "0s");
	check_human(250, "250ms");
	check_human(999, "999ms");
	check_human(1000, "1s");
	check_human(33795, "33.8s");
	check_human(59960, "1m00s");       /* rounds up into the next form */
	check_human(125000, "2m05s");
	check_human(3600000 + 2 * 60000 + 10000, "1h02m");
	check_human(3599600, "1h00m");
	check_human(86400000LL * 3 + 4 * 3600000LL, "3d04h");
	check_human(-1500, "-1.5s");
}

static void check_number(double v, const char *human, const char *exact)
{
	struct strbuf sb = STRBUF_INIT;

	format_number_human(&sb, v);
	assert_string_equal(sb.buf, human);
	strbuf_reset(&sb);
	format_number_exact(&sb, v);
	assert_string_equal(sb.buf, exact);
	assert_true(strtod(sb.buf, NULL) == v);
	strbuf_release(&sb);
}

static void test_numbers(void **state)
{
	struct strbuf sb = STRBUF_INIT;

	check_number(0.00021785297075753034, "0.000217853", "0.00021785297075753034");
	check_number(2.3209644030000001, "2.32096", "2.320964403");
	check_number(0.1 + 0.2, "0.3", "0.30000000000000004");
	check_number(512, "512", "512");
	check_number(1e-3, "0.001", "0.001");
	check_number(1.0 / 3, "0.333333", "0.3333333333333333");
	format_number_text_human(&sb, "0.00021785297075753034");
	format_number_text_human(&sb, " ");
	format_number_text_human(&sb, "adam");
	format_number_text_human(&sb, " 1e-3");
	format_number_text_human(&sb, "nan");
	assert_string_equal(sb.buf, "0.000217853 adam 1e-3nan");
	strbuf_release(&sb);
}

static void test_plural(void **state)
{
	assert_string_equal(plural(1, "node", "nodes"), "node");
	assert_string_equal(plural(0, "node", "nodes"), "nodes");
	assert_string_equal(plural(2, "process", "processes"), "processes");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_duration_good),
		cmocka_unit_test(test_duration_bad),
		cmocka_unit_test(test_size),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_format_human),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_plural),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
