/*
 * jobstate.h - the one owner of a job's state machine, and the events it
 * emits (docs/architecture.md, "The job's state machine").
 *
 * A job is PENDING (queued), RUNNING (an attempt placed on a hold, launched
 * or being launched), then final: COMPLETED, FAILED, CANCELLED, TIMEOUT or
 * NODE_FAIL.  The table in jobstate.c lists every legal transition, what is
 * persisted at it (in the order written) and the events emitted after it
 * (in that order).  jobstate_set() is the only code that changes j->state
 * (jobs loaded from state.db excepted: they are put back as they were).
 *
 * Features that react to a job's life (metrics, goodput, quarantine, hang
 * attribution, the fabric test's verdict; later notifications, accounting)
 * subscribe to the events on the bus (job_events_on) instead of being called
 * from the middle of the lifecycle.  Subscribers run in the order they
 * subscribed, with s->lock held, on the thread that made the transition;
 * they must not make a transition of the same job themselves.
 */
#ifndef DT_JOBSTATE_H
#define DT_JOBSTATE_H

#include <stddef.h>

struct sched;
struct job;

enum job_state {
	JS_PENDING, JS_RUNNING, JS_COMPLETED, JS_FAILED, JS_CANCELLED, JS_TIMEOUT, JS_NODE_FAIL,
	NR_JOB_STATES
};

enum job_event {
	JOB_EV_SUBMITTED,         /* queued (PENDING) by jobs_submit */
	JOB_EV_PLACED,            /* an attempt's slots are held: PENDING -> RUNNING */
	JOB_EV_STARTED,           /* ... and it starts (its launch follows) */
	JOB_EV_RANK_EXITED,       /* the attempt's first failed rank (or NODE_FAIL) is known */
	JOB_EV_STALLED,           /* a stall scan found silent ranks */
	JOB_EV_ATTEMPT_ENDED,     /* an attempt is over, its hold and start still set
				   * (info->to: how it ended, before strict_logging and
				   * retries are applied; info->retry: it is requeued);
				   * emitted by end_attempt, subscribers may set j->reason */
	JOB_EV_RETRIED,           /* requeued for another attempt: RUNNING -> PENDING */
	JOB_EV_CANCELLED,         /* cancelled (pending or running) */
	JOB_EV_ENDED,             /* a final state */
	NR_JOB_EVENTS
};

/* what a transition persists, written in this order */
#define JS_PERSIST_ENDED 1u       /* j->ended_us = now */
#define JS_PERSIST_HISTORY 2u     /* a history entry {state, at, reason} */
#define JS_PERSIST_ROW 4u         /* the job's row in state.db (job_save) */
#define JS_PERSIST_STATE_FILE 8u  /* <job_dir>/state */

#define JOBSTATE_MAX_EVENTS 3
struct jobstate_rule {
	enum job_state from, to;
	unsigned persist;         /* JS_PERSIST_* */
	enum job_event ev[JOBSTATE_MAX_EVENTS];
	int nr_ev;
};

/* "PENDING" ... for a state, its enum (-1: not a job state) */
const char *jobstate_name(enum job_state st);
int jobstate_of(const char *name);
/* the interned name (the DT_JOB_* constant) of a state's name, NULL if none */
const char *jobstate_intern(const char *name);
int jobstate_final(const char *name);
const char *job_event_name(enum job_event ev);
/* The rule for from -> to, NULL when that transition is illegal. */
const struct jobstate_rule *jobstate_rule(const char *from, const char *to);

/* --------------------------------------------------------- the event bus */

/* what an event carries beyond the job (fields not set for it are 0 / NULL) */
struct job_event_info {
	const char *from, *to;    /* the transition, for the events a transition emits */
	int rank, code, signal;   /* RANK_EXITED: the first failed rank (-1: mpirun), its end */
	int node_fail;            /* RANK_EXITED: the node went down or lost the task */
	int first;                /* STALLED: the first scan that found silent ranks */
	long long stall_after_ms; /* STALLED */
	int retry;                /* ATTEMPT_ENDED: the job is requeued for another attempt */
};

typedef void job_event_fn(struct sched *s, struct job *j, enum job_event ev,
			  const struct job_event_info *info, void *data);

#define JOB_EVENTS_MAX_SUBS 8
struct job_events {
	struct { job_event_fn *fn; void *data; } sub[NR_JOB_EVENTS][JOB_EVENTS_MAX_SUBS];
	int nr[NR_JOB_EVENTS];
};

/* Subscribe fn to ev (at start-up, before any job moves); -1 when full. */
int job_events_on(struct job_events *b, enum job_event ev, job_event_fn *fn, void *data);
/* Call ev's subscribers in order (b NULL: none). */
void job_events_emit(const struct job_events *b, struct sched *s, struct job *j,
		     enum job_event ev, const struct job_event_info *info);

/*
 * How a transition's persistence is done: job.c gives the real writers
 * (history_add, job_save, write_state_file), the unit test recorders.
 */
struct jobstate_persist {
	void (*history)(struct job *j, const char *state, const char *reason);
	int (*row)(struct sched *s, struct job *j);   /* its result: logged there */
	void (*state_file)(const struct job *j);
};

/*
 * Move j to state `to` (a DT_JOB_* name): check the table, set j->state, do
 * what the rule persists in order, then emit its events in order.  0, or -1
 * when the transition is illegal (then nothing changes and nothing is
 * emitted; the caller logs it).  Lock held.
 */
int jobstate_set(struct sched *s, struct job *j, const char *to,
		 const struct jobstate_persist *p, const struct job_events *bus);

#endif
