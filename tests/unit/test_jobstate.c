/*
 * test_jobstate.c - a job's state machine alone (scheduler/jobstate.c): every
 * legal and illegal transition, what each persists (in order) and the events
 * it emits (in order), and the event bus.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "scheduler/jobs-int.h"
#include "scheduler/jobstate.h"
#include "protocol.h"
#include "strbuf.h"
#include "usage.h"

/* what the recorders saw, in order: "history:FAILED row state_file ev:attempt_ended ..." */
static struct strbuf trace = STRBUF_INIT;

static void rec_history(struct job *j, const char *state, const char *reason)
{
	strbuf_addf(&trace, "history:%s:%s ", state, reason ? reason : "-");
}

static int rec_row(struct sched *s, struct job *j)
{
	strbuf_addf(&trace, "row:%s ", j->state);
	return 0;
}

static void rec_state_file(const struct job *j)
{
	strbuf_addf(&trace, "state_file:%s ", j->state);
}

static const struct jobstate_persist recorders = { rec_history, rec_row, rec_state_file };

static void rec_event(struct sched *s, struct job *j, enum job_event ev,
		      const struct job_event_info *info, void *data)
{
	strbuf_addf(&trace, "%s%s:%s>%s ", (const char *)data, job_event_name(ev),
		    info->from ? info->from : "-", info->to ? info->to : "-");
}

static void subscribe_all(struct job_events *b, const char *tag)
{
	for (int ev = 0; ev < NR_JOB_EVENTS; ev++)
		assert_int_equal(job_events_on(b, (enum job_event)ev, rec_event, (void *)tag), 0);
}

static const char *const all[] = { DT_JOB_PENDING, DT_JOB_RUNNING, DT_JOB_COMPLETED,
				   DT_JOB_FAILED, DT_JOB_CANCELLED, DT_JOB_TIMEOUT,
				   DT_JOB_NODE_FAIL };

/* the expected trace of from -> to, or NULL when it must be refused */
static const char *expect(const char *from, const char *to)
{
	static char buf[512];
	const char *evs;

	if (!strcmp(from, DT_JOB_PENDING) && !strcmp(to, DT_JOB_RUNNING))
		evs = "e:placed e:started";
	else if (!strcmp(from, DT_JOB_PENDING) && !strcmp(to, DT_JOB_CANCELLED))
		evs = "e:cancelled e:ended";
	else if (!strcmp(from, DT_JOB_PENDING) && !strcmp(to, DT_JOB_FAILED))
		evs = "e:ended";      /* its backend can never start it (Slurm refused sbatch) */
	else if (!strcmp(from, DT_JOB_RUNNING) && !strcmp(to, DT_JOB_PENDING))
		evs = "e:retried";
	else if (!strcmp(from, DT_JOB_RUNNING) && !strcmp(to, DT_JOB_CANCELLED))
		evs = "e:cancelled e:ended";
	else if (!strcmp(from, DT_JOB_RUNNING) && strcmp(to, DT_JOB_RUNNING))
		evs = "e:ended";
	else
		return NULL;
	{
		struct strbuf sb = STRBUF_INIT;
		const char *p = evs;

		strbuf_addf(&sb, "history:%s:why row:%s state_file:%s ", to, to, to);
		while (*p) {          /* each "e:NAME" -> "e:NAME:FROM>TO " */
			const char *sp = strchr(p, ' ');
			size_t n = sp ? (size_t)(sp - p) : strlen(p);

			strbuf_add(&sb, p, n);
			strbuf_addf(&sb, ":%s>%s ", from, to);
			p += n + (sp ? 1 : 0);
		}
		snprintf(buf, sizeof(buf), "%s", sb.buf);
		strbuf_release(&sb);
	}
	return buf;
}

/* Every pair of states: legal ones persist and emit as the table says, in
 * order; illegal ones change, persist and emit nothing. */
static void test_every_transition(void **state)
{
	struct job_events bus;
	int legal = 0;

	memset(&bus, 0, sizeof(bus));
	subscribe_all(&bus, "e:");
	for (size_t f = 0; f < ARRAY_SIZE(all); f++) {
		for (size_t t = 0; t < ARRAY_SIZE(all); t++) {
			struct job *j = job_new();
			const char *want = expect(all[f], all[t]);
			int rc;

			j->state = all[f];
			j->reason = xstrdup("why");
			j->wait_fp = 42;
			strbuf_reset(&trace);
			rc = jobstate_set(NULL, j, all[t], &recorders, &bus);
			if (!want) {
				assert_int_equal(rc, -1);
				assert_string_equal(j->state, all[f]);
				assert_ptr_equal(j->state, all[f]);   /* untouched */
				assert_string_equal(trace.buf, "");
				assert_int_equal(j->wait_fp, 42);
				assert_null(jobstate_rule(all[f], all[t]));
			} else {
				legal++;
				assert_int_equal(rc, 0);
				assert_string_equal(j->state, all[t]);
				assert_ptr_equal(j->state, jobstate_intern(all[t]));
				assert_string_equal(trace.buf, want);
				assert_int_equal(j->wait_fp, 0);
				/* final states record when the job ended, others do not */
				if (jobstate_final(all[t]))
					assert_true(j->ended_us > 0);
				else
					assert_int_equal(j->ended_us, 0);
			}
			job_free(j);
		}
	}
	assert_int_equal(legal, 9);
}

static void test_unknown_states(void **state)
{
	struct job *j = job_new();

	assert_null(jobstate_rule("RUNNING", "BOGUS"));
	assert_null(jobstate_rule(NULL, DT_JOB_RUNNING));
	assert_int_equal(jobstate_of("running"), -1);   /* names are exact */
	assert_null(jobstate_intern("NOPE"));
	assert_ptr_equal(jobstate_intern("FAILED"), jobstate_name(JS_FAILED));
	assert_false(jobstate_final(DT_JOB_PENDING));
	assert_false(jobstate_final(DT_JOB_RUNNING));
	assert_false(jobstate_final("BOGUS"));
	assert_true(jobstate_final(DT_JOB_NODE_FAIL));
	strbuf_reset(&trace);
	assert_int_equal(jobstate_set(NULL, j, "BOGUS", &recorders, NULL), -1);
	assert_string_equal(j->state, DT_JOB_PENDING);
	assert_string_equal(trace.buf, "");
	job_free(j);
}

/* A job's whole life: submitted, placed, failed with a retry, completed. */
static void test_life_with_retry(void **state)
{
	struct job_events bus;
	struct job *j = job_new();

	memset(&bus, 0, sizeof(bus));
	assert_int_equal(job_events_on(&bus, JOB_EV_ENDED, rec_event, "a:"), 0);
	assert_int_equal(job_events_on(&bus, JOB_EV_ENDED, rec_event, "b:"), 0);
	assert_int_equal(job_events_on(&bus, JOB_EV_RETRIED, rec_event, "a:"), 0);
	strbuf_reset(&trace);
	assert_int_equal(jobstate_set(NULL, j, DT_JOB_RUNNING, &recorders, &bus), 0);
	assert_int_equal(jobstate_set(NULL, j, DT_JOB_PENDING, &recorders, &bus), 0);
	assert_int_equal(jobstate_set(NULL, j, DT_JOB_RUNNING, &recorders, &bus), 0);
	assert_int_equal(jobstate_set(NULL, j, DT_JOB_COMPLETED, &recorders, &bus), 0);
	/* over: nothing moves it again */
	assert_int_equal(jobstate_set(NULL, j, DT_JOB_RUNNING, &recorders, &bus), -1);
	assert_int_equal(jobstate_set(NULL, j, DT_JOB_FAILED, &recorders, &bus), -1);
	assert_string_equal(trace.buf,
		"history:RUNNING:- row:RUNNING state_file:RUNNING "
		"history:PENDING:- row:PENDING state_file:PENDING a:retried:RUNNING>PENDING "
		"history:RUNNING:- row:RUNNING state_file:RUNNING "
		"history:COMPLETED:- row:COMPLETED state_file:COMPLETED "
		"a:ended:RUNNING>COMPLETED b:ended:RUNNING>COMPLETED ");
	job_free(j);
}

static void test_bus(void **state)
{
	struct job_events bus;
	struct job_event_info info = { .rank = 3, .code = 139, .signal = 11 };

	memset(&bus, 0, sizeof(bus));
	for (int i = 0; i < JOB_EVENTS_MAX_SUBS; i++)
		assert_int_equal(job_events_on(&bus, JOB_EV_STALLED, rec_event, "s:"), 0);
	assert_int_equal(job_events_on(&bus, JOB_EV_STALLED, rec_event, "s:"), -1);
	assert_int_equal(job_events_on(&bus, NR_JOB_EVENTS, rec_event, "s:"), -1);
	strbuf_reset(&trace);
	job_events_emit(&bus, NULL, NULL, JOB_EV_RANK_EXITED, &info);   /* nobody listens */
	job_events_emit(NULL, NULL, NULL, JOB_EV_STALLED, &info);
	assert_string_equal(trace.buf, "");
	job_events_emit(&bus, NULL, NULL, JOB_EV_STALLED, NULL);
	assert_int_equal(strlen(trace.buf), (size_t)JOB_EVENTS_MAX_SUBS * strlen("s:stalled:->- "));
	assert_string_equal(job_event_name(JOB_EV_RANK_EXITED), "rank_exited");
	assert_string_equal(job_event_name(NR_JOB_EVENTS), "?");
	strbuf_release(&trace);
}

/* ------------------------------------------- the live index (s->live) */

static void quiet_history(struct job *j, const char *state, const char *reason) {}
static int quiet_row(struct sched *s, struct job *j) { return 0; }
static void quiet_state_file(const struct job *j) {}
static const struct jobstate_persist quiet = { quiet_history, quiet_row, quiet_state_file };

/* what a per-step walk decides from: the ids in `state`, in order, from a
 * scan of every job (0), of the live index (1) or of the running one (2) */
static void walk(struct sched *s, int index, const char *state, struct strbuf *out)
{
	struct job **v = index == 2 ? s->running : index ? s->live : s->jobs;
	size_t nr = index == 2 ? s->nr_running : index ? s->nr_live : s->nr_jobs;

	strbuf_reset(out);
	for (size_t i = 0; i < nr; i++)
		if (!strcmp(v[i]->state, state))
			strbuf_addf(out, "%s ", v[i]->id);
}

/* after a compaction: the indexes hold exactly the jobs of s->jobs that did
 * not end, and that run, in order */
static void assert_live_exact(struct sched *s)
{
	size_t k = 0, r = 0;

	for (size_t i = 0; i < s->nr_jobs; i++) {
		if (!jobstate_final(s->jobs[i]->state)) {
			assert_true(k < s->nr_live);
			assert_ptr_equal(s->live[k], s->jobs[i]);
			k++;
		}
		if (!strcmp(s->jobs[i]->state, DT_JOB_RUNNING)) {
			assert_true(r < s->nr_running);
			assert_ptr_equal(s->running[r], s->jobs[i]);
			assert_true(s->jobs[i]->in_running);
			r++;
		} else {
			assert_false(s->jobs[i]->in_running);
		}
	}
	assert_int_equal(k, s->nr_live);
	assert_int_equal(r, s->nr_running);
}

/*
 * A simulated head: jobs submitted, moved through their states by the state
 * machine (placed, retried, ended, cancelled), some unsubmitted, the index
 * compacted at random steps; at every step each walk (the RUNNING jobs, the
 * PENDING ones) decides the same from the index as from all jobs: nothing
 * skipped, nothing out of order.  Then a restart: the index made anew from
 * the jobs is the one kept all along.
 */
static void test_live_index(void **state)
{
	static const char *const to[] = { DT_JOB_RUNNING, DT_JOB_PENDING, DT_JOB_COMPLETED,
					   DT_JOB_FAILED, DT_JOB_CANCELLED, DT_JOB_TIMEOUT };
	struct sched *s = xcalloc(1, sizeof(*s));
	struct strbuf a = STRBUF_INIT, b = STRBUF_INIT;
	unsigned r = 12345;
	int seq = 0, compactions = 0, moved_out = 0;

	for (int step = 0; step < 20000; step++) {
		r = r * 1103515245u + 12345u;
		if ((r >> 16) % 4 == 0 || !s->nr_jobs) {
			struct job *j = job_new();

			snprintf(j->id, sizeof(j->id), "j-%d", ++seq);
			jobs_add(s, j);
		} else if ((r >> 16) % 97 == 1) {
			size_t i = (r >> 8) % s->nr_jobs;
			struct job *j = s->jobs[i];

			jobs_remove(s, i);   /* jobs_unsubmit */
			job_free(j);
		} else {
			struct job *j = s->jobs[(r >> 8) % s->nr_jobs];
			int was_live = !jobstate_final(j->state);

			if (jobstate_set(s, j, to[(r >> 20) % ARRAY_SIZE(to)], &quiet, NULL) == 0 &&
			    was_live && jobstate_final(j->state)) {
				moved_out++;
				assert_true(s->live_stale);
			}
		}
		if ((r >> 24) % 8 == 0) {
			jobs_live_compact(s);
			assert_false(s->live_stale);
			assert_live_exact(s);
			compactions++;
		}
		for (int k = 0; k < 2; k++) {
			const char *st = k ? DT_JOB_PENDING : DT_JOB_RUNNING;

			walk(s, 0, st, &a);
			walk(s, 1, st, &b);
			assert_string_equal(a.buf, b.buf);
		}
		/* the running walk (jobs_step): each running job once, in order */
		walk(s, 0, DT_JOB_RUNNING, &a);
		walk(s, 2, DT_JOB_RUNNING, &b);
		assert_string_equal(a.buf, b.buf);
	}
	assert_true(compactions > 1000 && moved_out > 1000);
	jobs_live_compact(s);
	{
		/* a restart: dtsched loads s->jobs, then makes the index */
		size_t nr = s->nr_live, nr_run = s->nr_running;
		struct job **kept = xmalloc((nr ? nr : 1) * sizeof(*kept));
		struct job **kept_run = xmalloc((nr_run ? nr_run : 1) * sizeof(*kept_run));

		assert_true(nr_run > 0 && nr_run < nr);
		memcpy(kept, s->live, nr * sizeof(*kept));
		memcpy(kept_run, s->running, nr_run * sizeof(*kept_run));
		s->nr_live = 0;
		jobs_live_rebuild(s);
		assert_int_equal(s->nr_live, nr);
		assert_memory_equal(s->live, kept, nr * sizeof(*kept));
		assert_int_equal(s->nr_running, nr_run);
		assert_memory_equal(s->running, kept_run, nr_run * sizeof(*kept_run));
		assert_live_exact(s);
		free(kept);
		free(kept_run);
	}
	for (size_t i = 0; i < s->nr_jobs; i++)
		job_free(s->jobs[i]);
	free(s->jobs);
	free(s->live);
	free(s->running);
	free(s);
	strbuf_release(&a);
	strbuf_release(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_transition),
		cmocka_unit_test(test_unknown_states),
		cmocka_unit_test(test_life_with_retry),
		cmocka_unit_test(test_bus),
		cmocka_unit_test(test_live_index),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
