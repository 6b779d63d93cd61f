/*
 * goodput-head.c - the head's side of goodput (goodput.h has the rules): a
 * subscriber of ATTEMPT_ENDED and PLACED (jobstate.h) that keeps what a
 * job's restarts cost in its JSON (lost_us, lost_slot_s: docs/run.md,
 * "Restarts"), instead of the lifecycle doing it in the middle of a retry.
 */
#include "jobs-int.h"
#include "goodput.h"
#include "log.h"

/*
 * An attempt that is retried lost the work since its last checkpoint (the
 * ckpt dir changes with every one: a rename into it), and the time until
 * the next attempt starts begins now.  The retry's transition right after
 * writes the row.  Lock held.
 */
static void goodput_attempt_ended(struct sched *s, struct job *j, enum job_event ev,
				  const struct job_event_info *info, void *data)
{
	long long now = dt_now_us(), lost;

	if (!info->retry)
		return;
	lost = goodput_lost_work_us(j->started_us, job_mtime_ns(j, "ckpt") / 1000, now);
	j->lost_us += lost;
	j->lost_slot_s += (double)lost / 1e6 * j->world;
	j->restart_from_us = now;
	j->restart_world = j->world;
}

/* The next attempt is placed: the wait since the retry was lost too.  Lock held. */
static void goodput_placed(struct sched *s, struct job *j, enum job_event ev,
			   const struct job_event_info *info, void *data)
{
	long long now = dt_now_us(), wait;

	if (!j->restart_from_us)
		return;
	wait = now > j->restart_from_us ? now - j->restart_from_us : 0;
	j->lost_us += wait;
	j->lost_slot_s += (double)wait / 1e6 * j->restart_world;
	j->restart_from_us = 0;
	job_save(s, j);   /* the transition's row was written before its events */
}

void goodput_subscribe(struct sched *s)
{
	job_events_on(&s->events, JOB_EV_ATTEMPT_ENDED, goodput_attempt_ended, NULL);
	job_events_on(&s->events, JOB_EV_PLACED, goodput_placed, NULL);
}
