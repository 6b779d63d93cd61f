/*
 * goodput.c - the lost-time accounting of restarts (goodput.h).
 */
#include "goodput.h"

long long goodput_lost_work_us(long long start_us, long long ckpt_us, long long fail_us)
{
	long long from = ckpt_us > start_us ? ckpt_us : start_us;

	return fail_us > from ? fail_us - from : 0;
}

double goodput_ratio(long long first_start_us, long long end_us, long long lost_us)
{
	double r;

	if (!first_start_us)
		return -1;
	if (end_us <= first_start_us)
		return 1;
	r = 1.0 - (double)lost_us / (double)(end_us - first_start_us);
	return r < 0 ? 0 : r > 1 ? 1 : r;
}
