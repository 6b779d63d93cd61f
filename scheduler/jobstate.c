/*
 * jobstate.c - a job's state machine: the table of legal transitions (what
 * each persists, the events it emits), jobstate_set() which alone carries
 * one out, and the event bus features subscribe to (jobstate.h).  Unit-tested
 * alone: tests/unit/test_jobstate.c.
 */
#include "jobstate.h"
#include "jobs-int.h"
#include "protocol.h"
#include "log.h"

#include <string.h>

static const char *const names[NR_JOB_STATES] = {
	[JS_PENDING] = DT_JOB_PENDING, [JS_RUNNING] = DT_JOB_RUNNING,
	[JS_COMPLETED] = DT_JOB_COMPLETED, [JS_FAILED] = DT_JOB_FAILED,
	[JS_CANCELLED] = DT_JOB_CANCELLED, [JS_TIMEOUT] = DT_JOB_TIMEOUT,
	[JS_NODE_FAIL] = DT_JOB_NODE_FAIL,
};

static const char *const event_names[NR_JOB_EVENTS] = {
	[JOB_EV_SUBMITTED] = "submitted", [JOB_EV_PLACED] = "placed",
	[JOB_EV_STARTED] = "started", [JOB_EV_RANK_EXITED] = "rank_exited",
	[JOB_EV_STALLED] = "stalled", [JOB_EV_ATTEMPT_ENDED] = "attempt_ended",
	[JOB_EV_RETRIED] = "retried", [JOB_EV_CANCELLED] = "cancelled",
	[JOB_EV_ENDED] = "ended",
};

#define P_MOVE (JS_PERSIST_HISTORY | JS_PERSIST_ROW | JS_PERSIST_STATE_FILE)
#define P_END (JS_PERSIST_ENDED | P_MOVE)
#define END_RULE(st) { JS_RUNNING, st, P_END, { JOB_EV_ENDED }, 1 }

/*
 * Every legal transition; anything else is refused.  ATTEMPT_ENDED is not
 * here: the lifecycle emits it before RUNNING -> anything, while the attempt's
 * hold is still set (its subscribers read it), then releases the hold.
 */
static const struct jobstate_rule rules[] = {
	/* placed on a hold: the attempt starts */
	{ JS_PENDING, JS_RUNNING, P_MOVE, { JOB_EV_PLACED, JOB_EV_STARTED }, 2 },
	/* cancelled while queued: no attempt to end */
	{ JS_PENDING, JS_CANCELLED, P_END, { JOB_EV_CANCELLED, JOB_EV_ENDED }, 2 },
	/* its backend can never start it (Slurm refused its sbatch): no attempt ran */
	{ JS_PENDING, JS_FAILED, P_END, { JOB_EV_ENDED }, 1 },
	/* FAILED or NODE_FAIL with retries left: queued again (end_attempt) */
	{ JS_RUNNING, JS_PENDING, P_MOVE, { JOB_EV_RETRIED }, 1 },
	END_RULE(JS_COMPLETED), END_RULE(JS_FAILED), END_RULE(JS_TIMEOUT), END_RULE(JS_NODE_FAIL),
	{ JS_RUNNING, JS_CANCELLED, P_END, { JOB_EV_CANCELLED, JOB_EV_ENDED }, 2 },
};

const char *jobstate_name(enum job_state st)
{
	return (unsigned)st < NR_JOB_STATES ? names[st] : NULL;
}

int jobstate_of(const char *name)
{
	for (int i = 0; name && i < NR_JOB_STATES; i++)
		if (!strcmp(name, names[i]))
			return i;
	return -1;
}

const char *jobstate_intern(const char *name)
{
	int st = jobstate_of(name);

	return st < 0 ? NULL : names[st];
}

int jobstate_final(const char *name)
{
	int st = jobstate_of(name);

	return st > JS_RUNNING;
}

const char *job_event_name(enum job_event ev)
{
	return (unsigned)ev < NR_JOB_EVENTS ? event_names[ev] : "?";
}

const struct jobstate_rule *jobstate_rule(const char *from, const char *to)
{
	int f = jobstate_of(from), t = jobstate_of(to);

	for (size_t i = 0; f >= 0 && t >= 0 && i < sizeof(rules) / sizeof(rules[0]); i++)
		if ((int)rules[i].from == f && (int)rules[i].to == t)
			return &rules[i];
	return NULL;
}

int job_events_on(struct job_events *b, enum job_event ev, job_event_fn *fn, void *data)
{
	if ((unsigned)ev >= NR_JOB_EVENTS || b->nr[ev] >= JOB_EVENTS_MAX_SUBS)
		return -1;
	b->sub[ev][b->nr[ev]].fn = fn;
	b->sub[ev][b->nr[ev]].data = data;
	b->nr[ev]++;
	return 0;
}

void job_events_emit(const struct job_events *b, struct sched *s, struct job *j,
		     enum job_event ev, const struct job_event_info *info)
{
	static const struct job_event_info none = { .rank = -1 };

	if (!b || (unsigned)ev >= NR_JOB_EVENTS)
		return;
	for (int i = 0; i < b->nr[ev]; i++)
		b->sub[ev][i].fn(s, j, ev, info ? info : &none, b->sub[ev][i].data);
}

/* j became RUNNING: into s->running (sched-int.h) at its place in s->jobs' order, once;
 * here, below job.c, as jobstate_set() calls it */
void jobs_running_note(struct sched *s, struct job *j)
{
	size_t lo = 0, hi = s->nr_running;

	if (j->in_running)
		return;   /* it stopped and runs again before a compaction: still there */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (s->running[mid]->ord < j->ord)
			lo = mid + 1;
		else
			hi = mid;
	}
	ALLOC_GROW(s->running, s->nr_running + 1, s->alloc_running);
	memmove(s->running + lo + 1, s->running + lo, (s->nr_running - lo) * sizeof(*s->running));
	s->running[lo] = j;
	s->nr_running++;
	j->in_running = 1;
}

int jobstate_set(struct sched *s, struct job *j, const char *to,
		 const struct jobstate_persist *p, const struct job_events *bus)
{
	const struct jobstate_rule *r = jobstate_rule(j->state, to);
	struct job_event_info info = { .rank = -1 };

	if (!r)
		return -1;
	info.from = j->state;
	info.to = j->state = names[r->to];
	j->wait_fp = 0;           /* a requeue may avoid other nodes now: try it afresh */
	if (s)
		s->queue_gen++;   /* schedule_pending() scans the queue again */
	if (s && r->from == JS_RUNNING)
		s->running_stale = 1;   /* out of s->running at its next compaction */
	if (s && r->to == JS_RUNNING)
		jobs_running_note(s, j);
	if (r->persist & JS_PERSIST_ENDED) {
		j->ended_us = dt_now_us();
		if (s)
			s->live_stale = 1;   /* out of the live index at its next compaction */
	}
	if (r->persist & JS_PERSIST_HISTORY)
		p->history(j, j->state, j->reason);
	if (r->persist & JS_PERSIST_ROW)
		p->row(s, j);
	if (r->persist & JS_PERSIST_STATE_FILE)
		p->state_file(j);
	for (int i = 0; i < r->nr_ev; i++)
		job_events_emit(bus, s, j, r->ev[i], &info);
	return 0;
}
