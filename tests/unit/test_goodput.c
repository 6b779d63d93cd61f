/*
 * test_goodput.c - the lost time of restarts and the effective training time
 * ratio (scheduler/goodput.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "scheduler/goodput.h"

#define S 1000000LL

static void test_lost_work(void **state)
{
	/* started at 100 s, checkpoint at 160 s, failed at 190 s: 30 s lost */
	assert_int_equal(goodput_lost_work_us(100 * S, 160 * S, 190 * S), 30 * S);
	/* no checkpoint: all since the start */
	assert_int_equal(goodput_lost_work_us(100 * S, 0, 190 * S), 90 * S);
	/* the newest checkpoint is an older attempt's: from this attempt's start */
	assert_int_equal(goodput_lost_work_us(100 * S, 50 * S, 190 * S), 90 * S);
	/* a checkpoint written as it failed (or a clock step): nothing, never negative */
	assert_int_equal(goodput_lost_work_us(100 * S, 190 * S, 190 * S), 0);
	assert_int_equal(goodput_lost_work_us(100 * S, 200 * S, 190 * S), 0);
}

static void test_ratio(void **state)
{
	/* 1000 s since the first start, 30 s of work and 20 s of restart lost */
	assert_float_equal(goodput_ratio(100 * S, 1100 * S, 50 * S), 0.95, 1e-6);
	assert_float_equal(goodput_ratio(100 * S, 1100 * S, 0), 1.0, 1e-6);
	assert_float_equal(goodput_ratio(100 * S, 1100 * S, 2000 * S), 0.0, 1e-6);
	assert_float_equal(goodput_ratio(100 * S, 100 * S, 0), 1.0, 1e-6);
	assert_float_equal(goodput_ratio(0, 100 * S, 0), -1.0, 1e-6);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lost_work),
		cmocka_unit_test(test_ratio),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
