/*
 * goodput.h - what restarts cost a job (docs/run.md, "Restarts"): pure
 * functions, unit-tested (tests/unit/test_goodput.c); jobs.c keeps the sums.
 *
 * When an attempt fails and the job is requeued, the work since its last
 * checkpoint is lost (it is done again), and so is the time until the next
 * attempt starts: both times the attempt's GPUs (or CPU slots) are the
 * GPU-hours lost.  The effective training time ratio is the share of the
 * wall time since the first start that was not lost.
 */
#ifndef DT_GOODPUT_H
#define DT_GOODPUT_H

/*
 * The work an attempt started at start_us loses when it fails at fail_us,
 * its newest checkpoint written at ckpt_us (0: none): from the later of
 * start and checkpoint to the failure, never negative.
 */
long long goodput_lost_work_us(long long start_us, long long ckpt_us, long long fail_us);

/*
 * 1 - lost / (end - first_start), in [0, 1]; 1 when no time has passed
 * (nothing lost yet), -1 when the job never started (first_start_us 0).
 */
double goodput_ratio(long long first_start_us, long long end_us, long long lost_us);

#endif
