/*
 * test_hostrange.c - pdsh/Slurm host ranges and integer range folding
 * (lib/hostrange.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "hostrange.h"
#include "strbuf.h"
#include "strvec.h"

/* Expand spec and compare with the space-separated hosts in want. */
static void check(const char *spec, const char *want)
{
	struct strvec out = STRVEC_INIT;
	struct strbuf err = STRBUF_INIT, got = STRBUF_INIT;

	if (hostrange_expand(spec, &out, &err) < 0)
		fail_msg("'%s': %s", spec, err.buf);
	for (size_t i = 0; i < out.nr; i++)
		strbuf_addf(&got, "%s%s", i ? " " : "", out.v[i]);
	assert_string_equal(got.buf, want);
	strvec_clear(&out);
	strbuf_release(&err);
	strbuf_release(&got);
}

static void check_error(const char *spec, const char *want)
{
	struct strvec out = STRVEC_INIT;
	struct strbuf err = STRBUF_INIT;

	strvec_push(&out, "kept");
	assert_int_equal(hostrange_expand(spec, &out, &err), -1);
	assert_string_equal(err.buf, want);
	assert_int_equal(out.nr, 1);   /* untouched on error */
	strvec_clear(&out);
	strbuf_release(&err);
}

static void test_plain(void **state)
{
	check("gpu01", "gpu01");
	check("10.0.0.21", "10.0.0.21");
	check("local", "local");
	check("a,b,c", "a b c");
}

static void test_ranges(void **state)
{
	check("gpu[1-3]", "gpu1 gpu2 gpu3");
	check("gpu[01-04]", "gpu01 gpu02 gpu03 gpu04");
	check("gpu[08-11]", "gpu08 gpu09 gpu10 gpu11");
	check("n[8-10]", "n8 n9 n10");
	check("n[001-003]", "n001 n002 n003");
	check("n[1-3,7].lab", "n1.lab n2.lab n3.lab n7.lab");
	check("n[5]", "n5");
	check("[1-2]x", "1x 2x");
}

static void test_groups_and_lists(void **state)
{
	check("r[1-2]n[1-2]", "r1n1 r1n2 r2n1 r2n2");
	check("r[1-2]-n[01-02].x", "r1-n01.x r1-n02.x r2-n01.x r2-n02.x");
	check("a[1-3],b5", "a1 a2 a3 b5");
	check("a[1,3],b[1-2],c", "a1 a3 b1 b2 c");
	check("n[1-2,5-6]", "n1 n2 n5 n6");
}

static void test_big(void **state)
{
	struct strvec out = STRVEC_INIT;
	struct strbuf err = STRBUF_INIT;

	assert_int_equal(hostrange_expand("n[1-256]x[1-256]", &out, &err), 0);
	assert_int_equal(out.nr, 65536);
	assert_string_equal(out.v[65535], "n256x256");
	strvec_clear(&out);
	strbuf_release(&err);
}

static void test_errors(void **state)
{
	check_error("", "empty host list");
	check_error("gpu[3-1]", "reversed range '3-1' at column 5");
	check_error("gpu[]", "empty brackets at column 4");
	check_error("gpu[1-3", "unclosed '[' at column 4");
	check_error("gpu1-3]", "unexpected ']' at column 7");
	check_error("gpu[1-[2]]", "expected a number at column 7, found '['");
	check_error("gpu[a-3]", "expected a number at column 5, found 'a'");
	check_error("gpu[1-]", "expected a number at column 7, found ']'");
	check_error("gpu[1-", "expected a number at column 7, found the end");
	check_error("gpu[1;2]", "expected ',', '-' or ']' at column 6, found ';'");
	check_error("a,,b", "empty host name at column 3");
	check_error("a,", "empty host name at column 3");
	check_error(",a", "empty host name at column 1");
	check_error("a b", "unexpected space at column 2");
	check_error("n[1234567890]", "number '1234567890' at column 3 is too long");
	check_error("n[1-65537]", "host range expands to more than 65536 hosts");
	check_error("n[1-300]x[1-300]", "host range expands to more than 65536 hosts");
	check_error("n[1-40000],m[1-40000]", "host range expands to more than 65536 hosts");
}

static void check_ranges(const int *v, size_t n, const char *want)
{
	struct strbuf sb = STRBUF_INIT;

	int_ranges_format(&sb, v, n);
	assert_string_equal(sb.buf, want);
	strbuf_release(&sb);
}

static void test_int_ranges(void **state)
{
	static const int a[] = { 0, 1, 2, 3, 5 };
	static const int b[] = { 7 };
	static const int c[] = { 1, 3, 5 };
	static const int d[] = { 0, 1, 1, 2, 4, 5, 9 };
	static const int e[] = { -2, -1, 0, 10, 11 };

	check_ranges(a, 5, "0-3,5");
	check_ranges(b, 1, "7");
	check_ranges(c, 3, "1,3,5");
	check_ranges(d, 7, "0-2,4-5,9");
	check_ranges(e, 5, "-2-0,10-11");
	check_ranges(a, 0, "");
}

static void test_is_range(void **state)
{
	assert_true(hostrange_is_range("gpu[1-2]"));
	assert_true(hostrange_is_range("a,b"));
	assert_false(hostrange_is_range("gpu01.lab"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain),
		cmocka_unit_test(test_ranges),
		cmocka_unit_test(test_groups_and_lists),
		cmocka_unit_test(test_big),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_int_ranges),
		cmocka_unit_test(test_is_range),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
