/*
 * test_backend.c - the seam between a job's lifecycle and where its ranks
 * run (scheduler/backend.h):
 *
 *  - a test backend (here only) runs jobs end to end through the lifecycle
 *    (jobs_submit, jobs_step: gate, place, launch, poll, retry, end) with no
 *    agent: the lifecycle needs nothing but the struct of operations (stall
 *    detection and log loss included: live_ranks, log_loss, or neither);
 *  - the agents backend (backend-agents.c) against a fake lifecycle: a job,
 *    its hold and the node table as the heartbeats leave them, and what its
 *    attempt_poll, describe, live_ranks, log_loss, gpus_taken and step make
 *    of them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "scheduler/jobs-int.h"
#include "scheduler/sweeps-int.h"
#include "dthome.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "safefile.h"
#include "strbuf.h"
#include "usage.h"

/* ------------------------------------------------------------ fixture */

struct fx {
	char dir[64];
	struct sched *s;
	struct strbuf trace;      /* the events heard, in order */
};

static void hear(struct sched *s, struct job *j, enum job_event ev,
		 const struct job_event_info *info, void *data)
{
	struct fx *f = data;

	strbuf_addf(&f->trace, "%s%s ", job_event_name(ev),
		    ev == JOB_EV_RANK_EXITED ? (info->node_fail ? "(node)" : "(rank)") : "");
}

/* a dtsched without its HTTP server and main loop: state.db in memory, one node */
static struct sched *fx_sched(struct fx *f, const struct sched_backend *b, int cpus)
{
	struct sched *s = xcalloc(1, sizeof(*s));
	struct node *n;

	snprintf(f->dir, sizeof(f->dir), "/tmp/dt-test-backend-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	strbuf_init(&f->trace, 0);
	s->o.home = f->dir;
	s->backend = b;
	pthread_mutex_init(&s->lock, NULL);
	s->main_thread = pthread_self();     /* sched_wake(): SIGUSR1, ignored here */
	signal(SIGUSR1, SIG_IGN);
	assert_int_equal(sqlite3_open(":memory:", &s->db), SQLITE_OK);
	for (int ev = 0; ev < NR_JOB_EVENTS; ev++)
		assert_int_equal(job_events_on(&s->events, (enum job_event)ev, hear, f), 0);
	assert_int_equal(db_schema(s), 0);
	assert_int_equal(jobs_init(s), 0);
	n = node_add(s, "t1");
	n->cpus = cpus;
	f->s = s;
	return s;
}

static void fx_release(struct fx *f)
{
	struct sched *s = f->s;
	struct strbuf cmd = STRBUF_INIT;

	jobs_release(s);
	for (size_t i = 0; i < s->nr; i++)
		node_free(s->nodes[i]);
	free(s->nodes);
	sqlite3_close(s->db);
	pthread_mutex_destroy(&s->lock);
	free(s);
	strbuf_addf(&cmd, "rm -rf '%s'", f->dir);
	assert_int_equal(system(cmd.buf), 0);
	strbuf_release(&cmd);
	strbuf_release(&f->trace);
}

/* ------------------------------------------------- the test backend */

/* what the test backend is told to do, and what it was asked */
static struct {
	int gate_waits;           /* the gate holds the job back this many times */
	int gates, launches, polls, stops;
	int fail_attempts;        /* this many attempts fail (rank 1, exit 3) */
	int requeue_attempts;     /* this many are requeued by the resource manager */
	const char *end_state;    /* then the resource manager ends one in this state */
	int attempts_ended;
	int keep_running;         /* every poll: still running */
} tb;

static int tb_gate(struct sched *s, struct job *j, const struct pool *p,
		   const struct place_result *res, struct strbuf *reason)
{
	tb.gates++;
	if (tb.gate_waits > 0) {
		tb.gate_waits--;
		strbuf_addstr(reason, "the test gate is closed");
		return 1;
	}
	return 0;
}

/* on the lifecycle's launch thread, lock not held */
static void tb_launch(struct sched *s, struct job *j, struct hold *h)
{
	char id[64];

	pthread_mutex_lock(&s->lock);
	tb.launches++;
	snprintf(id, sizeof(id), "%s.%d.tb", j->id, j->attempt);
	hold_add_task(h, h->place[0].node, id, -1, 0);
	pthread_mutex_unlock(&s->lock);
}

static void tb_stop(struct sched *s, const struct action *x)
{
	tb.stops++;
}

/* the first poll of an attempt: still running; the second: over */
static enum attempt_status tb_poll(struct sched *s, struct job *j, struct attempt_end *e)
{
	if (++tb.polls % 2 || tb.keep_running)
		return ATTEMPT_RUNNING;
	tb.attempts_ended++;
	if (tb.attempts_ended <= tb.requeue_attempts) {
		strbuf_addstr(&e->why, "the manager requeued it");
		e->state = "REQUEUED";
		e->requeue = 1;
		return ATTEMPT_ENDED;
	}
	if (tb.end_state) {
		strbuf_addf(&e->why, "the manager ended it (%s)", tb.end_state);
		e->state = tb.end_state;
		return ATTEMPT_ENDED;
	}
	if (tb.attempts_ended <= tb.fail_attempts) {
		e->rank = 1;
		e->code = 3;
		e->node = xstrdup(j->hold->place[0].node);
		strbuf_addstr(&e->why, "exited with code 3");
		return ATTEMPT_FAILED;
	}
	return ATTEMPT_COMPLETED;
}

static json_t *tb_describe(struct sched *s, const struct job *j, int ending)
{
	return json_pack("[{s:i,s:s,s:s}]", "rank", -1, "node", j->hold->place[0].node,
			 "state", ending ? "exited" : "running");
}

static const struct sched_backend test_backend = {
	.name = "test", .gate = tb_gate, .launch = tb_launch, .stop = tb_stop,
	.attempt_poll = tb_poll, .describe = tb_describe,
};

/* one step of the main loop, and its launch threads done */
static void step(struct sched *s)
{
	jobs_step(s);
	for (;;) {
		int n;

		pthread_mutex_lock(&s->lock);
		n = s->clients->launches;
		pthread_mutex_unlock(&s->lock);
		if (!n)
			break;
		sched_yield();
	}
}

static const char *row_state(struct sched *s, const char *id, char *buf, size_t n)
{
	sqlite3_stmt *st;

	assert_int_equal(sqlite3_prepare_v2(s->db, "SELECT state FROM jobs WHERE id=?", -1, &st,
					    NULL), SQLITE_OK);
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	snprintf(buf, n, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	return buf;
}

static void submit(struct fx *f, const char *spec_text, char *id, size_t idlen)
{
	json_t *spec = json_loads(spec_text, 0, NULL);
	struct strbuf err = STRBUF_INIT;

	assert_non_null(spec);
	pthread_mutex_lock(&f->s->lock);
	assert_int_equal(jobs_submit(f->s, spec, f->dir, NULL, "tester", id, idlen, &err), 0);
	pthread_mutex_unlock(&f->s->lock);
	json_decref(spec);
	strbuf_release(&err);
}

/* A job fails once (retries: 1) and completes: every step through the interface. */
static void test_lifecycle_end_to_end(void **state)
{
	struct fx f;
	struct sched *s = fx_sched(&f, &test_backend, 4);
	char id[32], st[32];
	struct strbuf rel = STRBUF_INIT, buf = STRBUF_INIT, why = STRBUF_INIT;
	struct job *j;
	json_t *o;

	memset(&tb, 0, sizeof(tb));
	tb.gate_waits = 1;
	tb.fail_attempts = 1;
	submit(&f, "{\"name\": \"e2e\", \"nodes\": 1, \"procs_per_node\": 1, "
	       "\"retries\": 1, \"command\": [\"true\"]}", id, sizeof(id));
	j = job_find(s, id);
	assert_non_null(j);
	assert_string_equal(j->state, DT_JOB_PENDING);

	step(s);                  /* the gate says wait: still pending, nothing launched */
	assert_int_equal(tb.gates, 1);
	assert_string_equal(j->state, DT_JOB_PENDING);
	assert_string_equal(j->reason, "the test gate is closed");
	assert_int_equal(tb.launches, 0);

	pthread_mutex_lock(&s->lock);
	job_place_again(s, j);    /* the pool is the same: try it again anyway */
	pthread_mutex_unlock(&s->lock);
	step(s);                  /* placed, started, launched through the backend */
	assert_string_equal(j->state, DT_JOB_RUNNING);
	assert_int_equal(tb.launches, 1);
	assert_int_equal(j->launch, 0);
	assert_int_equal(j->hold->nr_tasks, 1);
	assert_string_equal(row_state(s, id, st, sizeof(st)), DT_JOB_RUNNING);

	step(s);                  /* poll 1: running */
	assert_string_equal(j->state, DT_JOB_RUNNING);
	step(s);                  /* poll 2: rank 1 failed -> retried, placed again, launched */
	assert_int_equal(j->attempt, 1);
	assert_string_equal(j->state, DT_JOB_RUNNING);
	assert_int_equal(tb.launches, 2);
	step(s);
	step(s);                  /* the second attempt completes */
	assert_string_equal(j->state, DT_JOB_COMPLETED);
	assert_int_equal(j->exit_code, 0);
	assert_null(j->hold);
	assert_true(j->ended_us > 0);

	assert_string_equal(f.trace.buf,
		"submitted placed started rank_exited(rank) attempt_ended retried "
		"placed started attempt_ended ended ");
	/* persisted: the row, <job_dir>/state, the history, the ranks as described */
	assert_string_equal(row_state(s, id, st, sizeof(st)), DT_JOB_COMPLETED);
	job_rel(j, "state", &rel);
	assert_int_equal(sf_read(j->shared_dir, rel.buf, &buf, 64, &why), 10);
	assert_string_equal(buf.buf, "COMPLETED\n");
	o = job_json(s, j, 1);
	assert_int_equal(json_array_size(json_object_get(o, "history")), 6);
	assert_string_equal(json_get_str(json_array_get(json_object_get(o, "history"), 2), "reason",
					 ""), "rank 1 on t1 exited with code 3");
	assert_string_equal(json_get_str(json_array_get(json_object_get(o, "ranks"), 0), "state",
					 ""), "exited");
	json_decref(o);
	assert_int_equal(tb.stops, 0);
	strbuf_release(&rel);
	strbuf_release(&buf);
	strbuf_release(&why);
	fx_release(&f);
}

static long long row_lost_us(struct sched *s, const char *id)
{
	sqlite3_stmt *st;
	json_t *o;
	long long v;

	assert_int_equal(sqlite3_prepare_v2(s->db, "SELECT data FROM jobs WHERE id=?", -1, &st,
					    NULL), SQLITE_OK);
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	o = json_loads((const char *)sqlite3_column_text(st, 0), 0, NULL);
	sqlite3_finalize(st);
	v = json_get_int(json_object_get(o, "restart"), "lost_us", -1);
	json_decref(o);
	return v;
}

/*
 * Goodput is a subscriber (goodput-head.c): a retried attempt's lost work
 * and the wait until the next one is placed are summed from ATTEMPT_ENDED
 * (info->retry) and PLACED, and the row has them; an attempt that is not
 * retried costs nothing.
 */
static void test_goodput_hears_retries(void **state)
{
	struct fx f;
	struct sched *s = fx_sched(&f, &test_backend, 2);   /* the test backend drops no hold */
	char id[32];
	struct job *j;

	goodput_subscribe(s);
	memset(&tb, 0, sizeof(tb));
	tb.fail_attempts = 1;
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"retries\": 1, "
	       "\"command\": [\"true\"]}", id, sizeof(id));
	step(s);
	j = job_find(s, id);
	j->started_us -= 2 * 1000 * 1000;   /* it ran 2 s, no checkpoint */
	step(s);
	assert_int_equal(j->lost_us, 0);
	step(s);                  /* failed, retried, placed again at once */
	assert_int_equal(j->attempt, 1);
	assert_string_equal(j->state, DT_JOB_RUNNING);
	assert_true(j->lost_us >= 2 * 1000 * 1000);
	assert_true(j->lost_slot_s >= 2.0);
	assert_int_equal(j->restart_from_us, 0);
	assert_int_equal(row_lost_us(s, id), j->lost_us);
	step(s);
	step(s);                  /* completes: nothing more lost */
	assert_string_equal(j->state, DT_JOB_COMPLETED);
	assert_int_equal(row_lost_us(s, id), j->lost_us);
	assert_true(j->lost_us < 3 * 1000 * 1000);
	fx_release(&f);
}

/*
 * The sweep unit learns its trials' jobs moving from the events (sweeps.c,
 * sweeps_job_moved): with no sweeps_step() at all, the trial's job_state
 * follows its job through a retry to its end, each move marked for the next
 * look; a job that is no trial's leaves the trial alone.
 */
static void test_sweep_trial_hears_its_job(void **state)
{
	struct fx f;
	struct sched *s = fx_sched(&f, &test_backend, 2);
	struct sweep *w = xcalloc(1, sizeof(*w));
	struct trial *t = xcalloc(1, sizeof(*t));
	char id[16], other[16];

	assert_int_equal(sweeps_init(s), 0);
	sweeps_subscribe(s);
	memset(&tb, 0, sizeof(tb));
	tb.fail_attempts = 1;
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"retries\": 1, "
	       "\"command\": [\"true\"]}", id, sizeof(id));
	t->no = 1;
	t->state = DT_TRIAL_RUNNING;
	snprintf(t->job, sizeof(t->job), "%s", id);
	w->t = &t;
	w->nr = 1;
	s->sweeps->v = &w;
	s->sweeps->nr = 1;

	step(s);                  /* placed: STARTED */
	assert_string_equal(t->job_state, DT_JOB_RUNNING);
	assert_int_equal(t->job_moved, 1);
	t->job_moved = 0;         /* as a look would */
	step(s);                  /* poll 1: nothing moved */
	assert_int_equal(t->job_moved, 0);
	step(s);                  /* failed: RETRIED, then STARTED again at once */
	assert_int_equal(tb.attempts_ended, 1);
	assert_string_equal(t->job_state, DT_JOB_RUNNING);
	assert_int_equal(t->job_moved, 1);
	t->job_moved = 0;
	step(s);
	step(s);                  /* COMPLETED: ENDED */
	assert_string_equal(t->job_state, DT_JOB_COMPLETED);
	assert_int_equal(t->job_moved, 1);

	t->job_moved = 0;         /* another job's end is not this trial's */
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"command\": [\"true\"]}", other,
	       sizeof(other));
	pthread_mutex_lock(&s->lock);
	assert_int_equal(jobs_cancel(s, other, NULL), 0);
	pthread_mutex_unlock(&s->lock);
	assert_string_equal(job_find(s, other)->state, DT_JOB_CANCELLED);
	assert_int_equal(t->job_moved, 0);
	assert_string_equal(t->job_state, DT_JOB_COMPLETED);

	s->sweeps->v = NULL;      /* not sweeps_init's to free */
	s->sweeps->nr = 0;
	sweeps_release(s);
	free(t);
	free(w);
	fx_release(&f);
}

/*
 * A step in which nothing changed does not walk the queue (jobs-queue.c,
 * queue_scan: 1,000s of pending jobs walked per step were most of dtsched's
 * CPU), yet each kind of change still places: a new job, a node's freed
 * slot (no job moved), a job to be tried again on the same pool, and the
 * periodic full pass (its timer).
 */
static void test_queue_cache_sees_changes(void **state)
{
	struct fx f;
	struct sched *s = fx_sched(&f, &test_backend, 2);
	char a[32], big[32], c[32], d[32], id[32];
	struct job *jbig, *jd;
	unsigned long long walks;

	memset(&tb, 0, sizeof(tb));
	tb.keep_running = 1;
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"command\": [\"a\"]}", a, sizeof(a));
	step(s);
	assert_string_equal(job_find(s, a)->state, DT_JOB_RUNNING);
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 2, \"command\": [\"big\"]}", big,
	       sizeof(big));
	for (int i = 0; i < 50; i++)   /* a queue behind big, which waits for 2 slots */
		submit(&f, "{\"nodes\": 1, \"procs_per_node\": 2, \"command\": [\"q\"]}", id,
		       sizeof(id));
	step(s);                  /* the full pass (the pool changed): all wait */
	step(s);                  /* the queue walked once after it */
	jbig = job_find(s, big);
	assert_string_equal(jbig->state, DT_JOB_PENDING);
	/* no whole pass falls due meanwhile, however slow the machine (5 s) */
	s->fair_cache->at_ms = dt_mono_ms() + 3600 * 1000;
	walks = s->fair_cache->walks;
	for (int i = 0; i < 5; i++)
		step(s);              /* nothing changed: no walk of the queue */
	assert_int_equal(s->fair_cache->walks, walks);

	/* a new job (1 slot: fits beside a) is placed, the queue not walked for it */
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"command\": [\"c\"]}", c, sizeof(c));
	step(s);
	assert_string_equal(job_find(s, c)->state, DT_JOB_RUNNING);

	/* a node's slots grow, no job moved: the pools' fingerprint places big */
	s->nodes[0]->cpus = 4;
	step(s);
	assert_string_equal(jbig->state, DT_JOB_RUNNING);

	/* a job to be tried again on the same pool (its avoid list changed) */
	tb.gate_waits = 1;
	s->nodes[0]->cpus = 5;
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"command\": [\"d\"]}", d, sizeof(d));
	step(s);                  /* the gate holds d back: it waits on this pool */
	jd = job_find(s, d);
	assert_string_equal(jd->state, DT_JOB_PENDING);
	assert_string_equal(jd->reason, "the test gate is closed");
	step(s);
	step(s);
	assert_string_equal(jd->state, DT_JOB_PENDING);
	pthread_mutex_lock(&s->lock);
	job_place_again(s, jd);
	pthread_mutex_unlock(&s->lock);
	step(s);
	assert_string_equal(jd->state, DT_JOB_RUNNING);

	/* the timer: the full pass every 5 s ranks the queue again */
	step(s);
	step(s);
	for (size_t i = 0; i < s->nr_live; i++)
		if (!strcmp(s->live[i]->state, DT_JOB_PENDING))
			s->live[i]->prio_pos = 0;
	s->fair_cache->at_ms = dt_mono_ms() + 3600 * 1000;
	step(s);
	assert_int_equal(job_find(s, id)->prio_pos, 0);   /* no pass: nothing changed */
	s->fair_cache->at_ms = dt_mono_ms() - 6000;   /* the last one 6 s ago */
	step(s);
	for (size_t i = 0; i < s->nr_live; i++)
		if (!strcmp(s->live[i]->state, DT_JOB_PENDING))
			assert_true(s->live[i]->prio_pos > 0);
	fx_release(&f);
}

/* A cancel while running ends the attempt through the lifecycle, not the backend. */
static void test_cancel_running(void **state)
{
	struct fx f;
	struct sched *s = fx_sched(&f, &test_backend, 1);
	char id[32], st[32];
	struct job *j;

	memset(&tb, 0, sizeof(tb));
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"command\": [\"sleep\", \"9\"]}",
	       id, sizeof(id));
	step(s);
	j = job_find(s, id);
	assert_string_equal(j->state, DT_JOB_RUNNING);
	pthread_mutex_lock(&s->lock);
	assert_int_equal(jobs_cancel(s, id, NULL), 0);
	pthread_mutex_unlock(&s->lock);
	step(s);
	assert_string_equal(j->state, DT_JOB_CANCELLED);
	assert_string_equal(row_state(s, id, st, sizeof(st)), DT_JOB_CANCELLED);
	assert_string_equal(f.trace.buf, "submitted placed started attempt_ended cancelled ended ");
	assert_int_equal(tb.polls, 0);
	fx_release(&f);
}

/* what the test backend says of its ranks' progress and log writes */
static size_t tb_live_ranks(struct sched *s, const struct job *j, struct rank_live **v,
			    size_t *alloc)
{
	ALLOC_GROW(*v, 1, *alloc);
	(*v)[0].rank = 0;
	(*v)[0].node = j->hold->place[0].node;
	(*v)[0].pid = 4242;
	return 1;
}

static void tb_log_loss(struct sched *s, const struct job *j, long long *lost, char **err)
{
	*lost += 5;
	if (!*err)
		*err = xstrdup("No space left on device");
}

static const struct sched_backend test_backend_full = {
	.name = "test-full", .launch = tb_launch, .stop = tb_stop, .attempt_poll = tb_poll,
	.describe = tb_describe, .live_ranks = tb_live_ranks, .log_loss = tb_log_loss,
};

/* a running attempt of j, silent for 10 s, with a stall_after of 1 ms */
static void make_silent(struct sched *s, struct job *j)
{
	assert_string_equal(j->state, DT_JOB_RUNNING);
	j->cfg.stall_after_ms = 1;
	j->started_us -= 10 * 1000 * 1000;
	j->stall_checked_ms = 0;
}

/*
 * Stall detection and log loss come from the backend (live_ranks, log_loss):
 * the lifecycle reads no node table (t1 has no task at all here), yet finds
 * the rank the backend says is live, with its pid, and the lost lines that
 * make a strict_logging job FAILED.
 */
static void test_backend_stall_and_log_loss(void **state)
{
	struct fx f;
	struct sched *s = fx_sched(&f, &test_backend_full, 1);
	char id[32];
	json_t *st;
	struct job *j;

	memset(&tb, 0, sizeof(tb));
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"strict_logging\": true, "
	       "\"command\": [\"true\"]}", id, sizeof(id));
	step(s);
	j = job_find(s, id);
	make_silent(s, j);
	step(s);                  /* poll 1: running; the stall scan */
	assert_string_equal(j->state, DT_JOB_RUNNING);
	assert_int_equal(json_array_size(j->stalled), 1);
	st = json_array_get(j->stalled, 0);
	assert_int_equal(json_get_int(st, "rank", -1), 0);
	assert_string_equal(json_get_str(st, "node", ""), "t1");
	assert_int_equal(json_get_int(st, "pid", 0), 4242);
	assert_true(json_get_int(st, "idle_ms", 0) >= 10000);
	step(s);                  /* poll 2: every rank exited 0, but 5 lines were lost */
	assert_string_equal(j->state, DT_JOB_FAILED);
	assert_int_equal(j->log_lost_lines, 5);
	assert_string_equal(j->log_error, "No space left on device");
	assert_string_equal(j->reason, "5 output lines could not be logged (No space left on "
			    "device) and the job asks for strict_logging");
	assert_string_equal(f.trace.buf, "submitted placed started stalled attempt_ended ended ");
	fx_release(&f);
}

/* A backend without live_ranks and log_loss: every rank counts as live, pid
 * not known; nothing is lost.  What the node table says of a task of that
 * name (final, lines lost) is the agents backend's business, not read here. */
static void test_backend_without_activity(void **state)
{
	struct fx f;
	struct sched *s = fx_sched(&f, &test_backend, 2);
	char id[32];
	struct job *j;

	memset(&tb, 0, sizeof(tb));
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 2, \"strict_logging\": true, "
	       "\"command\": [\"true\"]}", id, sizeof(id));
	step(s);
	j = job_find(s, id);
	{
		char task[64];

		snprintf(task, sizeof(task), "%s.0.tb", id);
		json_object_set_new(node_find(s, "t1")->tasks, task, json_pack(
			"{s:s,s:i,s:i}", "state", "exited", "exit_code", 0, "log_lost_lines", 9));
	}
	make_silent(s, j);
	step(s);
	assert_int_equal(json_array_size(j->stalled), 2);
	for (size_t r = 0; r < 2; r++) {
		json_t *o = json_array_get(j->stalled, r);

		assert_int_equal(json_get_int(o, "rank", -1), (int)r);
		assert_string_equal(json_get_str(o, "node", ""), "t1");
		assert_true(json_is_null(json_object_get(o, "pid")));
	}
	step(s);
	assert_string_equal(j->state, DT_JOB_COMPLETED);
	assert_int_equal(j->log_lost_lines, 0);
	fx_release(&f);
}

/*
 * A resource manager under the backend (Slurm) ends attempts itself: a requeue
 * restarts the job whatever its retries (0 here) and costs none of them; a
 * TIMEOUT it imposes is the job's TIMEOUT, not FAILED.
 */
static void test_manager_requeue_and_end(void **state)
{
	struct fx f;
	struct sched *s = fx_sched(&f, &test_backend, 4);   /* the test backend never frees a hold */
	char id[32], id2[32];
	struct job *j;
	json_t *o;

	memset(&tb, 0, sizeof(tb));
	tb.requeue_attempts = 2;
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"command\": [\"true\"]}", id,
	       sizeof(id));
	j = job_find(s, id);
	for (int i = 0; i < 8; i++)
		step(s);
	assert_string_equal(j->state, DT_JOB_COMPLETED);
	assert_int_equal(j->attempt, 2);
	assert_int_equal(j->requeues, 2);
	assert_int_equal(tb.launches, 3);
	o = job_json(s, j, 1);
	assert_int_equal(json_get_int(o, "restarts", -1), 2);
	assert_int_equal(json_get_int(o, "requeues", -1), 2);
	assert_string_equal(json_get_str(json_array_get(json_object_get(o, "history"), 2), "state",
					 ""), "REQUEUED");
	assert_string_equal(json_get_str(json_array_get(json_object_get(o, "history"), 2), "reason",
					 ""), "the manager requeued it");
	json_decref(o);
	assert_string_equal(f.trace.buf, "submitted placed started attempt_ended retried placed "
			    "started attempt_ended retried placed started attempt_ended ended ");

	/* retries: 1 and a requeue: the one retry is still there for a real failure */
	memset(&tb, 0, sizeof(tb));
	tb.end_state = DT_JOB_TIMEOUT;
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"retries\": 1, "
	       "\"command\": [\"true\"]}", id2, sizeof(id2));
	for (int i = 0; i < 3; i++)
		step(s);
	j = job_find(s, id2);
	assert_string_equal(j->state, DT_JOB_TIMEOUT);   /* not retried: not a failure */
	assert_string_equal(j->reason, "the manager ended it (TIMEOUT)");
	fx_release(&f);
}

/* ------------------------------------- the agents backend, fake lifecycle */

/* a running job j-1 on nodes a and b, one rank each, tasks as the agents report them */
static struct job *fake_job(struct sched *s)
{
	struct job *j = job_new();
	struct hold *h = xcalloc(1, sizeof(*h));
	const char *nodes[] = { "a", "b" };

	snprintf(j->id, sizeof(j->id), "j-1");
	j->job_dir = xstrdup("/nonexistent/jobs/j-1");
	j->shared_dir = xstrdup("/nonexistent");
	j->per_node = 1;
	j->world = 2;
	j->state = DT_JOB_RUNNING;
	h->nr = 2;
	h->place = xcalloc(2, sizeof(*h->place));
	snprintf(h->job, sizeof(h->job), "j-1");
	for (int k = 0; k < 2; k++) {
		char id[32];

		h->place[k].node = xstrdup(nodes[k]);
		node_add(s, nodes[k]);
		snprintf(id, sizeof(id), "j-1.0.r%d", k);
		hold_add_task(h, nodes[k], id, k, 0);
	}
	h->launched_ms = dt_mono_ms();
	j->hold = h;
	return j;
}

static void report(struct sched *s, const char *node, const char *id, const char *task_json)
{
	json_object_set_new(node_find(s, node)->tasks, id, json_loads(task_json, 0, NULL));
}

static enum attempt_status poll_once(struct sched *s, struct job *j, struct attempt_end *e)
{
	attempt_end_release(e);
	attempt_end_init(e);
	return agents_backend.attempt_poll(s, j, e);
}

static void test_agents_poll(void **state)
{
	struct sched *s = xcalloc(1, sizeof(*s));
	struct job *j = fake_job(s);
	struct attempt_end e;
	json_t *ranks;

	attempt_end_init(&e);
	/* no report yet, just launched: running */
	assert_int_equal(poll_once(s, j, &e), ATTEMPT_RUNNING);
	report(s, "a", "j-1.0.r0", "{\"state\": \"exited\", \"exit_code\": 0}");
	report(s, "b", "j-1.0.r1", "{\"state\": \"running\", \"pid\": 42}");
	assert_int_equal(poll_once(s, j, &e), ATTEMPT_RUNNING);
	ranks = agents_backend.describe(s, j, 0);
	assert_int_equal(json_array_size(ranks), 2);
	assert_string_equal(json_get_str(json_array_get(ranks, 1), "state", ""), "running");
	assert_int_equal(json_get_int(json_array_get(ranks, 1), "pid", 0), 42);
	json_decref(ranks);
	/* ending now: a rank still running is one dtsched stops */
	ranks = agents_backend.describe(s, j, 1);
	assert_string_equal(json_get_str(json_array_get(ranks, 1), "state", ""), "killed");
	json_decref(ranks);

	/* live: the rank whose task is not final, by its pid */
	{
		struct rank_live *v = NULL;
		size_t alloc = 0;
		long long lost = 0;
		char *err = NULL;

		assert_int_equal(agents_backend.live_ranks(s, j, &v, &alloc), 1);
		assert_int_equal(v[0].rank, 1);
		assert_string_equal(v[0].node, "b");
		assert_int_equal(v[0].pid, 42);
		free(v);
		/* what the agents said of the log writes: summed, the first error */
		report(s, "a", "j-1.0.r0", "{\"state\": \"exited\", \"exit_code\": 0, "
		       "\"log_lost_lines\": 3, \"log_error\": \"Input/output error\"}");
		report(s, "b", "j-1.0.r1", "{\"state\": \"running\", \"pid\": 42, "
		       "\"log_lost_lines\": 4, \"log_error\": \"No space left on device\"}");
		agents_backend.log_loss(s, j, &lost, &err);
		assert_int_equal(lost, 7);
		assert_string_equal(err, "Input/output error");
		free(err);
	}

	/* killed by SIGSEGV */
	report(s, "b", "j-1.0.r1", "{\"state\": \"exited\", \"exit_code\": 139, \"signal\": 11, "
	       "\"ended_at\": \"2026-01-01T00:00:01Z\"}");
	assert_int_equal(poll_once(s, j, &e), ATTEMPT_FAILED);
	assert_int_equal(e.rank, 1);
	assert_int_equal(e.code, 139);
	assert_int_equal(e.signal, 11);
	assert_int_equal(e.node_fail, 0);
	assert_string_equal(e.node, "b");
	assert_string_equal(e.why.buf, "was killed by signal 11 (Segmentation fault)");

	/* the first to fail wins: rank 0 failed earlier, and could not even start */
	report(s, "a", "j-1.0.r0", "{\"state\": \"failed\", \"error\": \"no such program\", "
	       "\"ended_at\": \"2026-01-01T00:00:00Z\"}");
	assert_int_equal(poll_once(s, j, &e), ATTEMPT_FAILED);
	assert_int_equal(e.rank, 0);
	assert_string_equal(e.node, "a");
	assert_string_equal(e.why.buf, "could not start: no such program");

	/* lost with its node */
	report(s, "a", "j-1.0.r0", "{\"state\": \"lost\", \"reason\": \"NODE_FAIL\", "
	       "\"ended_at\": \"2026-01-01T00:00:00Z\"}");
	assert_int_equal(poll_once(s, j, &e), ATTEMPT_FAILED);
	assert_int_equal(e.node_fail, 1);
	assert_string_equal(e.why.buf, "was lost: NODE_FAIL");

	/* both exited 0 */
	report(s, "a", "j-1.0.r0", "{\"state\": \"exited\", \"exit_code\": 0}");
	report(s, "b", "j-1.0.r1", "{\"state\": \"exited\", \"exit_code\": 0}");
	assert_int_equal(poll_once(s, j, &e), ATTEMPT_COMPLETED);

	/* a node of the attempt is DOWN: whatever its tasks said */
	node_find(s, "b")->state = DT_NODE_DOWN;
	assert_int_equal(poll_once(s, j, &e), ATTEMPT_NODE_DOWN);
	assert_string_equal(e.node, "b");
	assert_string_equal(e.why.buf, "node 'b' went down (no heartbeat)");

	attempt_end_release(&e);
	hold_free(j->hold);
	j->hold = NULL;
	job_free(j);
	for (size_t i = 0; i < s->nr; i++)
		node_free(s->nodes[i]);
	free(s->nodes);
	free(s);
}

/* GPUs that live tasks of no job hold (the agent API's own users) are taken;
 * a job's task, a final one, a garbled list are not. */
static void test_agents_gpus_taken(void **state)
{
	struct sched *s = xcalloc(1, sizeof(*s));
	unsigned char used[8] = { 0 };
	struct node *n = node_add(s, "a");

	report(s, "a", "mine", "{\"state\": \"running\", \"cuda_visible_devices\": \"1,3\"}");
	report(s, "a", "j-1.0.r0", "{\"state\": \"running\", \"job_id\": \"j-1\", "
	       "\"cuda_visible_devices\": \"0\"}");
	report(s, "a", "done", "{\"state\": \"exited\", \"exit_code\": 0, "
	       "\"cuda_visible_devices\": \"2\"}");
	report(s, "a", "odd", "{\"state\": \"running\", \"cuda_visible_devices\": \"5,x,9\"}");
	node_derive(n);   /* what the heartbeat does when the tasks change */
	agents_backend.gpus_taken(s, n, used, 6);
	assert_memory_equal(used, ((unsigned char[8]){ 0, 1, 0, 1, 0, 1, 0, 0 }), 8);
	/* kept per change, not re-read: "mine" ends, a task of no job starts on 2 */
	report(s, "a", "mine", "{\"state\": \"exited\", \"exit_code\": 0, "
	       "\"cuda_visible_devices\": \"1,3\"}");
	report(s, "a", "new", "{\"state\": \"running\", \"cuda_visible_devices\": \"2\"}");
	node_derive(n);
	memset(used, 0, sizeof(used));
	agents_backend.gpus_taken(s, n, used, 6);
	assert_memory_equal(used, ((unsigned char[8]){ 0, 0, 1, 0, 0, 1, 0, 0 }), 8);
	/* a node that lost its tasks (down: node_fail_tasks) takes none */
	json_object_clear(n->tasks);
	node_derive(n);
	memset(used, 0, sizeof(used));
	agents_backend.gpus_taken(s, n, used, 6);
	assert_memory_equal(used, ((unsigned char[8]){ 0 }), 8);
	for (size_t i = 0; i < s->nr; i++)
		node_free(s->nodes[i]);
	free(s->nodes);
	free(s);
}

/* A released hold: dropped once its tasks are final, else its live tasks
 * stopped; a task of a job that no hold knows (an orphan) stopped too. */
/* path's whole text ("" when absent) */
static char *slurp(const char *path)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_read_file(&sb, path, 1 << 16);
	return strbuf_detach(&sb, NULL);
}

static void write_exec(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	assert_int_equal(chmod(path, 0755), 0);
}

/*
 * A restarted dtsched's own Slurm jobs (backend-slurm.c, orphans_apply), with
 * squeue, sbatch and scancel stand-ins on PATH: squeue --me lists an unrecorded
 * Slurm job of the waiting job's attempt (adopted: no sbatch), a duplicate of
 * it, one naming a job state.db lacks and one of an ended job (cancelled), and
 * another head's, another script's and an older attempt's... left alone or
 * cancelled as the table in docs/slurm-backend.md says.
 */
static void test_slurm_orphans(void **state)
{
	struct fx f;
	struct sched *s = fx_sched(&f, &slurm_backend, 4);
	char a[32], b[32], c[32], path[512], *old_path = xstrdup(getenv("PATH"));
	struct strbuf sq = STRBUF_INIT, bin = STRBUF_INIT;
	struct job *ja, *jb, *jc;
	char *cancelled = NULL, *sbatched;
	long long deadline = dt_mono_ms() + 20000;
	int adopted = 0;

	(void)state;
	snprintf(s->head_id, sizeof(s->head_id), "abc123");
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"command\": [\"true\"]}", a, sizeof(a));
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"command\": [\"true\"]}", b, sizeof(b));
	submit(&f, "{\"nodes\": 1, \"procs_per_node\": 1, \"command\": [\"true\"]}", c, sizeof(c));
	ja = job_find(s, a);
	jb = job_find(s, b);
	jb->state = DT_JOB_COMPLETED;
	/* a trial of sweep s-000009 recorded in task 0 of its job array 110 (pack: array) */
	jc = job_find(s, c);
	json_decref(jc->slurm);
	jc->slurm = json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:s,s:i,s:i}", "array", "s-000009",
			      "array_parallel", 1, "array_id", 110, "array_task", 0, "job_id", 110,
			      "attempt", 0, "state", "PENDING", "restarts", 0, "restarts_at_start", 0);
	strbuf_addf(&bin, "%s/bin", f.dir);
	assert_int_equal(mkdir(bin.buf, 0700), 0);
	strbuf_addf(&sq, "#!/bin/sh\ncase \"$*\" in\n*--me*) /bin/cat <<'EOF'\n"
		    "101|PENDING|0||Resources|%s/slurm/job.sh|dtctl %s attempt 0 head abc123\n"
		    "102|PENDING|0||Resources|%s/slurm/job.sh|dtctl %s attempt 0 head abc123\n"
		    "103|RUNNING|0|t1|None|%s/slurm/job.sh|dtctl j-999999 attempt 0 head abc123\n"
		    "104|RUNNING|0|t1|None|%s/slurm/job.sh|dtctl %s attempt 0 head abc123\n"
		    "105|RUNNING|0|t1|None|%s/slurm/job.sh|dtctl %s attempt 0 head other\n"
		    "106|RUNNING|0|t1|None|/home/u/run.sh|dtctl %s attempt 0 head abc123\n"
		    "107|RUNNING|0|t1|None|%s/slurm/job.sh|dtctl %s attempt 3 head abc123\n"
		    "108|COMPLETED|0|t1|None|%s/slurm/job.sh|dtctl j-999998 attempt 0 head abc123\n"
		    "109|RUNNING|0|t1|None|%s/slurm/job.sh|my own | job\n"
		    /* job arrays: sweep s-000009's (recorded: its pending record and a task
		     * started since) kept; s-000008's (no live trial records it) cancelled */
		    "110|PENDING|0||JobArrayTaskLimit|%s/slurm/job.sh|dtctl s-000009 attempt 0 head abc123\n"
		    "112|RUNNING|0|t1|None|%s/slurm/job.sh|dtctl s-000009 attempt 0 head abc123\n"
		    "113|RUNNING|0|t1|None|%s/slurm/job.sh|dtctl s-000008 attempt 0 head abc123\n"
		    "EOF\n;;\n*) echo '101|PENDING|0||1:00:00|Resources' ;;\nesac\n",
		    f.dir, a, f.dir, a, f.dir, f.dir, b, f.dir, a, a, f.dir, a, f.dir, f.dir, f.dir,
		    f.dir, f.dir);
	snprintf(path, sizeof(path), "%s/squeue", bin.buf);
	write_exec(path, sq.buf);
	strbuf_reset(&sq);
	strbuf_addf(&sq, "#!/bin/sh\necho \"$*\" >> %s/scancelled\n", f.dir);
	snprintf(path, sizeof(path), "%s/scancel", bin.buf);
	write_exec(path, sq.buf);
	strbuf_reset(&sq);
	strbuf_addf(&sq, "#!/bin/sh\necho \"$*\" >> %s/sbatched\necho 999\n", f.dir);
	snprintf(path, sizeof(path), "%s/sbatch", bin.buf);
	write_exec(path, sq.buf);
	setenv("PATH", bin.buf, 1);

	/* the lifecycle wants A submitted: the worker looks for orphans first */
	step(s);
	while (dt_mono_ms() < deadline) {
		pthread_mutex_lock(&s->lock);
		adopted = json_get_int(ja->slurm, "job_id", 0) == 101;
		pthread_mutex_unlock(&s->lock);
		free(cancelled);
		snprintf(path, sizeof(path), "%s/scancelled", f.dir);
		cancelled = slurp(path);
		if (adopted && !strcmp(cancelled, "102\n103\n104\n107\n113\n"))
			break;
		usleep(20000);
	}
	setenv("PATH", old_path, 1);
	assert_true(adopted);
	pthread_mutex_lock(&s->lock);
	assert_int_equal(json_get_int(ja->slurm, "attempt", -1), 0);
	assert_null(json_object_get(ja->slurm, "submit"));
	pthread_mutex_unlock(&s->lock);
	/* scancel (not --signal=TERM) of each, in squeue's order; 105, 106, 108, 109, and
	 * the recorded array's 110 and 112 kept */
	assert_string_equal(cancelled, "102\n103\n104\n107\n113\n");
	slurm_backend.release(s);
	snprintf(path, sizeof(path), "%s/sbatched", f.dir);
	sbatched = slurp(path);
	assert_string_equal(sbatched, "");   /* the adopted job, not a second one */
	free(sbatched);
	free(cancelled);
	free(old_path);
	strbuf_release(&sq);
	strbuf_release(&bin);
	fx_release(&f);
}

/*
 * The Slurm backend's view of a running attempt (backend-slurm.c): what Slurm
 * says of its job wins over the agents' view, and PREEMPTED and TIMEOUT are
 * not FAILED; while Slurm runs it, the agents' view decides.
 */
struct poll_case {
	const char *slurm;
	int restarts;
	const char *want, *why;
	int requeue;
};

/* j's attempt, its Slurm job 77 in each case's state (of `pack`'s allocation, or its own) */
static void check_poll_cases(struct sched *s, struct job *j, const char *pack,
			     const struct poll_case *cases, size_t n)
{
	struct attempt_end e;

	for (size_t i = 0; i < n; i++) {
		json_decref(j->slurm);
		j->slurm = json_pack("{s:i,s:i,s:s,s:i,s:i}", "job_id", 77, "attempt", 0, "state",
				     cases[i].slurm, "restarts", cases[i].restarts,
				     "restarts_at_start", 0);
		if (pack)
			json_object_set_new(j->slurm, "pack", json_string(pack));
		attempt_end_init(&e);
		assert_int_equal(slurm_backend.attempt_poll(s, j, &e), ATTEMPT_ENDED);
		assert_string_equal(e.state, cases[i].want);
		assert_string_equal(e.why.buf, cases[i].why);
		assert_int_equal(e.requeue, cases[i].requeue);
		attempt_end_release(&e);
	}
}

static void test_slurm_poll(void **state)
{
	static const struct poll_case cases[] = {
		{ "CANCELLED", 0, DT_JOB_CANCELLED, "cancelled in Slurm (scancel of job 77)", 0 },
		{ "CANCELLED by 1001", 0, DT_JOB_CANCELLED, "cancelled in Slurm (scancel of job 77)",
		  0 },
		{ "TIMEOUT", 0, DT_JOB_TIMEOUT, "Slurm job 77 reached its time limit (TIMEOUT)", 0 },
		{ "DEADLINE", 0, DT_JOB_TIMEOUT, "Slurm job 77 reached its time limit (DEADLINE)", 0 },
		{ "NODE_FAIL", 0, DT_JOB_NODE_FAIL, "Slurm job 77 lost a node (NODE_FAIL)", 0 },
		{ "PREEMPTED", 0, DT_JOB_CANCELLED, "Slurm job 77 was preempted and not requeued", 0 },
		{ "OUT_OF_MEMORY", 0, DT_JOB_FAILED,
		  "Slurm job 77 ended OUT_OF_MEMORY before its ranks did", 0 },
		{ "GONE", 0, DT_JOB_FAILED, "Slurm job 77 ended GONE before its ranks did", 0 },
		/* requeued: back in the queue, or already running again */
		{ "PENDING", 1, "REQUEUED", "Slurm requeued job 77 (preempted, or a node failed)", 1 },
		{ "RUNNING", 1, "REQUEUED", "Slurm requeued job 77 (preempted, or a node failed)", 1 },
	};
	static const struct poll_case pack_cases[] = {
		{ "CANCELLED", 0, DT_JOB_CANCELLED,
		  "cancelled in Slurm (scancel of job 77, the allocation of s-000001)", 0 },
		{ "PREEMPTED", 0, "REQUEUED", "Slurm took the allocation of s-000001 back (job 77 "
		  "PREEMPTED: preempted, requeued, a node failed or its time ran out)", 1 },
		{ "NODE_FAIL", 0, "REQUEUED", "Slurm took the allocation of s-000001 back (job 77 "
		  "NODE_FAIL: preempted, requeued, a node failed or its time ran out)", 1 },
		{ "TIMEOUT", 0, "REQUEUED", "Slurm took the allocation of s-000001 back (job 77 "
		  "TIMEOUT: preempted, requeued, a node failed or its time ran out)", 1 },
		{ "COMPLETED", 0, "REQUEUED", "Slurm took the allocation of s-000001 back (job 77 "
		  "COMPLETED: preempted, requeued, a node failed or its time ran out)", 1 },
		{ "RUNNING", 1, "REQUEUED", "Slurm took the allocation of s-000001 back (job 77 "
		  "RUNNING: preempted, requeued, a node failed or its time ran out)", 1 },
	};
	struct sched *s = xcalloc(1, sizeof(*s));
	struct job *j;
	struct attempt_end e;
	char dir[] = "/tmp/dt-test-slurm-XXXXXX", path[64], *old_path = xstrdup(getenv("PATH"));

	/* the worker's orphan scan: a squeue that fails at once (a real one given a
	 * missing slurm.conf retries for 60 s) */
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/squeue", dir);
	write_exec(path, "#!/bin/sh\necho 'squeue: error: no Slurm here' >&2\nexit 1\n");
	setenv("PATH", dir, 1);
	setenv("SLURM_CONF", "/nonexistent/slurm.conf", 1);
	pthread_mutex_init(&s->lock, NULL);
	s->o.home = "/nonexistent";
	j = fake_job(s);
	check_poll_cases(s, j, NULL, cases, ARRAY_SIZE(cases));
	/*
	 * A trial packed into its sweep's allocation (pack: allocation): Slurm taking
	 * the allocation back, in any way but a scancel, is not the trial's doing: it
	 * starts again (a requeue, no retry); a scancel of it cancels the trial.
	 */
	check_poll_cases(s, j, "s-000001", pack_cases, ARRAY_SIZE(pack_cases));
	/* Slurm runs it (this run): the ranks decide, both exited 0 */
	json_decref(j->slurm);
	j->slurm = json_pack("{s:i,s:i,s:s,s:i,s:i}", "job_id", 77, "attempt", 0, "state", "RUNNING",
			     "restarts", 1, "restarts_at_start", 1);
	attempt_end_init(&e);
	assert_int_equal(slurm_backend.attempt_poll(s, j, &e), ATTEMPT_RUNNING);
	report(s, "a", "j-1.0.r0", "{\"state\": \"exited\", \"exit_code\": 0}");
	report(s, "b", "j-1.0.r1", "{\"state\": \"exited\", \"exit_code\": 0}");
	assert_int_equal(slurm_backend.attempt_poll(s, j, &e), ATTEMPT_COMPLETED);
	attempt_end_release(&e);
	slurm_backend.release(s);
	for (size_t i = 0; i < s->nr; i++)
		node_free(s->nodes[i]);
	free(s->nodes);
	hold_free(j->hold);
	j->hold = NULL;
	job_free(j);
	free(s);
	unsetenv("SLURM_CONF");
	setenv("PATH", old_path, 1);
	free(old_path);
	unlink(path);
	rmdir(dir);
}

/* a file of the fixture's dir, with text (mode: 0755 for a program) */
static void fx_file(struct fx *f, const char *name, const char *text, int mode)
{
	struct strbuf path = STRBUF_INIT;
	FILE *fp;

	strbuf_addf(&path, "%s/%s", f->dir, name);
	fp = fopen(path.buf, "w");
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
	assert_int_equal(chmod(path.buf, (mode_t)mode), 0);
	strbuf_release(&path);
}

/*
 * Stand-ins of Slurm's commands in f's dir, first on PATH (the old PATH
 * returned): sinfo (one node n1, 4 GPUs), sbatch (appends its argv and a
 * "job=... pack=..." line of its environment to sbatch.args, answers 77),
 * squeue (array.out when asked about job arrays, else squeue.out), scancel
 * (appends its argv to scancel.args); the secret and a cluster.yaml with
 * `backend: slurm`.
 */
static char *slurm_stubs(struct fx *f)
{
	struct strbuf text = STRBUF_INIT;
	char *old_path = xstrdup(getenv("PATH"));

	fx_file(f, "sinfo", "#!/bin/sh\necho 'n1|gpu:4|8|idle'\n", 0755);
	strbuf_addf(&text, "#!/bin/sh\necho \"$@\" >> '%s/sbatch.args'\n"
		    "echo \"job=$DTCTL_SLURM_JOB pack=$DTCTL_SLURM_PACK\" >> '%s/sbatch.args'\n"
		    "echo 77\n", f->dir, f->dir);
	fx_file(f, "sbatch", text.buf, 0755);
	strbuf_reset(&text);
	strbuf_addf(&text, "#!/bin/sh\ncase \"$*\" in *ArrayJobID*) cat '%s/array.out';; "
		    "*) cat '%s/squeue.out';; esac\n", f->dir, f->dir);
	fx_file(f, "squeue", text.buf, 0755);
	strbuf_reset(&text);
	strbuf_addf(&text, "#!/bin/sh\necho \"$@\" >> '%s/scancel.args'\n", f->dir);
	fx_file(f, "scancel", text.buf, 0755);
	fx_file(f, "secret", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n",
		0600);
	strbuf_reset(&text);
	strbuf_addf(&text, "cluster: t\nshared_dir: %s\nbackend: slurm\nhead: {address: 10.0.0.1}\n",
		    f->dir);
	fx_file(f, "cluster.yaml", text.buf, 0644);
	strbuf_reset(&text);
	strbuf_addf(&text, "%s:%s", f->dir, old_path);
	setenv("PATH", text.buf, 1);
	strbuf_release(&text);
	return old_path;
}

/* step s until scancel.args (path) is written (30 s at most: a loaded machine), its text in text */
static void slurm_stubs_scancel(struct sched *s, struct actions *a, const char *path,
				struct strbuf *text)
{
	long long deadline = dt_mono_ms() + 30000;

	while (dt_mono_ms() < deadline && access(path, F_OK) < 0) {
		pthread_mutex_lock(&s->lock);
		slurm_backend.step(s, a);
		pthread_mutex_unlock(&s->lock);
		usleep(10000);
	}
	strbuf_reset(text);
	assert_true(strbuf_read_file(text, path, 4096) > 0);
}

/* place j (lock held): its status, its reason in why */
static enum place_status pack_try(struct sched *s, struct job *j, struct pool *p,
				  struct place_result *res, struct strbuf *why)
{
	strbuf_reset(why);
	return slurm_backend.place(s, j, p, res, why);
}

/* place j until its reason holds `want` (the worker answers in its own time: 30 s at most) */
static void pack_until(struct sched *s, struct job *j, struct pool *p, struct place_result *res,
		       struct strbuf *why, const char *want)
{
	long long deadline = dt_mono_ms() + 30000;

	while (dt_mono_ms() < deadline) {
		pthread_mutex_lock(&s->lock);
		assert_int_equal(pack_try(s, j, p, res, why), PLACE_WAIT);
		pthread_mutex_unlock(&s->lock);
		if (strstr(why->buf, want))
			return;
		usleep(10000);
	}
	fail_msg("'%s' never came; the last reason: %s", want, why->buf);
}

/*
 * pack: allocation (backend-slurm.c), against stand-ins of sinfo, sbatch, squeue
 * and scancel on PATH: the first trial asks for the sweep's allocation, sized
 * for 3 one-GPU trials (one sbatch: 1 node x 3 GPUs, Slurm's warning passed on
 * to the trials in it: --signal and $DTCTL_SLURM_PACK); while Slurm
 * queues it the trials wait with its reason; once it runs and its agent joined,
 * three trials take its three GPUs and a fourth waits for one; once no trial
 * is left it is ended (SIGTERM to its agents), and only then.
 */
static void test_slurm_pack_place(void **state)
{
	struct fx f;
	struct sched *s = fx_sched(&f, &slurm_backend, 1);
	struct strbuf path = STRBUF_INIT, why = STRBUF_INIT, text = STRBUF_INIT;
	struct place_result *res = xcalloc(1, sizeof(*res));
	struct actions a = { NULL, 0, 0 };
	struct job *jobs[4];
	struct pool p;
	struct node *n;
	char *old_path = slurm_stubs(&f);
	int placed = 0;

	fx_file(&f, "squeue.out", "77|PENDING|0||UNLIMITED|Priority\n", 0644);
	pthread_mutex_lock(&s->lock);
	for (int k = 0; k < 4; k++) {
		json_t *spec = json_pack("{s:[s],s:i,s:s}", "command", "true", "gpus_per_node", 1,
					 "name", "trial");
		char id[16];

		strbuf_reset(&why);
		assert_int_equal(jobs_submit(s, spec, f.dir, NULL, "u", id, sizeof(id), &why), 0);
		jobs_pack(s, id, "s-000001", 0, 0, 3);
		jobs[k] = job_find(s, id);
		json_decref(spec);
	}
	pthread_mutex_unlock(&s->lock);
	pool_build(s, &p, 1);

	pack_until(s, jobs[0], &p, res, &why, "Slurm allocation 77 of s-000001 PENDING (Priority)");
	pack_until(s, jobs[1], &p, res, &why, "Slurm allocation 77 of s-000001 PENDING (Priority)");
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/sbatch.args", f.dir);
	strbuf_reset(&text);
	assert_true(strbuf_read_file(&text, path.buf, 4096) > 0);
	assert_non_null(strstr(text.buf, "--nodes=1 --ntasks-per-node=1 --exclusive --gres=gpu:3 "
			       "--job-name=s-000001 --comment=dtctl s-000001 attempt 0"));
	/* Slurm's warning before the partition's limit, for every trial running in it */
	assert_non_null(strstr(text.buf, " --requeue --signal=B:USR1@120 --output="));
	assert_non_null(strstr(text.buf, "\njob= pack=s-000001\n"));

	/* Slurm runs it: its agent joins under n1's name with 3 GPUs */
	fx_file(&f, "squeue.out", "77|RUNNING|0|n1|UNLIMITED|None\n", 0644);
	pack_until(s, jobs[0], &p, res, &why, "0 of 1 agent(s) joined");
	pthread_mutex_lock(&s->lock);
	n = node_add(s, "n1");
	n->state = DT_NODE_UP;
	n->gpus_total = 3;
	n->home = xstrdup("/tmp/dtagent-slurm-77.0-n1");
	pthread_mutex_unlock(&s->lock);
	free(p.n);
	pool_build(s, &p, 1);
	pthread_mutex_lock(&s->lock);
	for (int k = 0; k < 3; k++) {
		assert_int_equal(pack_try(s, jobs[k], &p, res, &why), PLACE_OK);
		assert_int_equal(res->nr, 1);
		assert_string_equal(p.n[res->node[0]].name, "n1");
		placement_commit(p.n, res, 1);
		assert_int_equal(json_get_int(jobs[k]->slurm, "job_id", 0), 77);
		placed |= 1 << res->slots[0][0];
	}
	assert_int_equal(placed, 7);                 /* GPUs 0, 1 and 2 */
	assert_int_equal(pack_try(s, jobs[3], &p, res, &why), PLACE_WAIT);
	assert_string_equal(why.buf, "Slurm allocation 77 of s-000001 on n1: every slot is taken "
			    "by its other jobs");

	/* every trial over: the allocation is ended once, not before */
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/scancel.args", f.dir);
	slurm_backend.step(s, &a);
	for (int k = 0; k < 3; k++)
		jobs[k]->state = DT_JOB_COMPLETED;
	slurm_backend.step(s, &a);
	pthread_mutex_unlock(&s->lock);
	assert_int_equal(access(path.buf, F_OK), -1);  /* the 4th still waits */
	pthread_mutex_lock(&s->lock);
	jobs[3]->state = DT_JOB_CANCELLED;
	pthread_mutex_unlock(&s->lock);
	slurm_stubs_scancel(s, &a, path.buf, &text);
	assert_string_equal(text.buf, "--signal=TERM 77\n");

	slurm_backend.release(s);
	setenv("PATH", old_path, 1);
	free(old_path);
	free(p.n);
	free(res);
	free(a.v);
	strbuf_release(&path);
	strbuf_release(&why);
	strbuf_release(&text);
	fx_release(&f);
}

/*
 * pack: array (backend-slurm.c), against stand-ins of sinfo, sbatch, squeue and
 * scancel: placing the first of a sweep's three trials submits all three as
 * one job array (one sbatch, --array=0-2%2); while Slurm queues them each
 * waits with its own task's reason; task 0, started as Slurm job 78, is placed
 * on the agent that joined for 78 and shown as 77_0; a waiting trial that is
 * cancelled is scancel'd alone, as task 77_2, never the array.
 */
static void test_slurm_array_place(void **state)
{
	struct fx f;
	struct sched *s = fx_sched(&f, &slurm_backend, 1);
	struct strbuf path = STRBUF_INIT, why = STRBUF_INIT, text = STRBUF_INIT;
	struct place_result *res = xcalloc(1, sizeof(*res));
	struct actions a = { NULL, 0, 0 };
	struct job *jobs[3];
	struct pool p;
	struct node *n;
	char *old_path = slurm_stubs(&f);

	(void)state;
	fx_file(&f, "squeue.out", "", 0644);
	fx_file(&f, "array.out", "77|77|0-2%2|PENDING|0||Priority\n", 0644);
	pthread_mutex_lock(&s->lock);
	for (int k = 0; k < 3; k++) {
		json_t *spec = json_pack("{s:[s],s:i,s:s}", "command", "true", "gpus_per_node", 1,
					 "name", "trial");
		char id[16];

		strbuf_reset(&why);
		assert_int_equal(jobs_submit(s, spec, f.dir, NULL, "u", id, sizeof(id), &why), 0);
		jobs_array(s, id, "s-000001", 2);
		jobs[k] = job_find(s, id);
		json_decref(spec);
	}
	pthread_mutex_unlock(&s->lock);
	pool_build(s, &p, 1);

	/* only the first is placed: all three go, as one array */
	pack_until(s, jobs[0], &p, res, &why, "Slurm job 77_0 PENDING (Priority)");
	pack_until(s, jobs[2], &p, res, &why, "Slurm job 77_2 PENDING (Priority)");
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/sbatch.args", f.dir);
	strbuf_reset(&text);
	assert_true(strbuf_read_file(&text, path.buf, 4096) > 0);
	assert_non_null(strstr(text.buf, " --comment=dtctl s-000001 attempt 0 "));
	assert_non_null(strstr(text.buf, " --array=0-2%2 --output="));
	assert_non_null(strstr(text.buf, "/s-000001.0-%A_%a.out "));
	/* one sbatch: its argv, then its environment's line */
	assert_non_null(strstr(text.buf, "\njob= pack=s-000001\n"));
	assert_ptr_equal(strstr(text.buf, "pack="), text.buf + text.len - strlen("pack=s-000001\n"));

	/* Slurm starts task 0 as its own job 78 on n1; its agent joins */
	fx_file(&f, "array.out", "78|77|0|RUNNING|0|n1|None\n"
		"77|77|1-2%2|PENDING|0||JobArrayTaskLimit\n", 0644);
	pack_until(s, jobs[0], &p, res, &why, "Slurm job 78 RUNNING on n1: waiting for the agent");
	pack_until(s, jobs[1], &p, res, &why, "Slurm job 77_1 PENDING (JobArrayTaskLimit)");
	pthread_mutex_lock(&s->lock);
	n = node_add(s, "n1");
	n->state = DT_NODE_UP;
	n->gpus_total = 4;
	n->home = xstrdup("/tmp/dtagent-slurm-78.0-n1");
	pthread_mutex_unlock(&s->lock);
	free(p.n);
	pool_build(s, &p, 1);
	pthread_mutex_lock(&s->lock);
	assert_int_equal(pack_try(s, jobs[0], &p, res, &why), PLACE_OK);
	assert_string_equal(p.n[res->node[0]].name, "n1");
	assert_int_equal(json_get_int(jobs[0]->slurm, "job_id", 0), 78);
	assert_string_equal(json_get_str(jobs[0]->slurm, "array_job", ""), "77_0");

	/* a waiting trial cancelled: its task alone */
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/scancel.args", f.dir);
	jobs[2]->state = DT_JOB_CANCELLED;
	pthread_mutex_unlock(&s->lock);
	slurm_stubs_scancel(s, &a, path.buf, &text);
	assert_string_equal(text.buf, "77_2\n");

	slurm_backend.release(s);
	setenv("PATH", old_path, 1);
	free(old_path);
	free(p.n);
	free(res);
	free(a.v);
	strbuf_release(&path);
	strbuf_release(&why);
	strbuf_release(&text);
	fx_release(&f);
}

/*
 * A Slurm job that Slurm requeued (this attempt is its restart) and then
 * ended before it ran again (FAILED, NonZeroExitCode: the first run's late
 * exit taken as its end): the restart is submitted as a new Slurm job, once.
 * Ended before its agents joined in its own run: the job fails, naming the
 * output file sbatch named for the attempt that submitted it.
 */
static void test_slurm_requeued_then_ended(void **state)
{
	struct fx f;
	struct sched *s = fx_sched(&f, &slurm_backend, 1);
	struct strbuf path = STRBUF_INIT, why = STRBUF_INIT, text = STRBUF_INIT;
	struct place_result *res = xcalloc(1, sizeof(*res));
	char *old_path = xstrdup(getenv("PATH")), id[16];
	json_t *spec = json_pack("{s:[s],s:i,s:i}", "command", "true", "nodes", 2,
				 "gpus_per_node", 1);
	struct job *j;
	struct pool p;

	fx_file(&f, "sinfo", "#!/bin/sh\necho 'n1|gpu:4|8|idle'\n", 0755);
	fx_file(&f, "sbatch", "#!/bin/sh\necho 78\n", 0755);
	fx_file(&f, "squeue", "#!/bin/sh\nexit 1\n", 0755);
	fx_file(&f, "scancel", "#!/bin/sh\nexit 0\n", 0755);
	strbuf_addf(&path, "%s:%s", f.dir, old_path);
	setenv("PATH", path.buf, 1);
	pthread_mutex_lock(&s->lock);
	assert_int_equal(jobs_submit(s, spec, f.dir, NULL, "u", id, sizeof(id), &why), 0);
	j = job_find(s, id);
	j->attempt = 1;
	pool_build(s, &p, 1);
	json_decref(j->slurm);
	j->slurm = json_pack("{s:i,s:i,s:i,s:s,s:s,s:i,s:i}", "job_id", 77, "attempt", 1,
			     "sbatch_attempt", 0, "state", "FAILED", "reason", "NonZeroExitCode",
			     "restarts", 1, "restarts_at_start", 0);
	strbuf_reset(&why);
	assert_int_equal(slurm_backend.place(s, j, &p, res, &why), PLACE_WAIT);
	assert_string_equal(why.buf, "Slurm ended job 77 after requeueing it, before it ran "
			    "again: submitting a new Slurm job (sbatch)");
	assert_true(json_is_true(json_object_get(j->slurm, "submitting")));
	assert_int_equal(json_get_int(j->slurm, "job_id", 0), 0);

	/* that new job (or a run that started) ended before its agents joined: failed */
	json_decref(j->slurm);
	j->slurm = json_pack("{s:i,s:i,s:i,s:s,s:s,s:i,s:i}", "job_id", 77, "attempt", 1,
			     "sbatch_attempt", 0, "state", "FAILED", "reason", "NonZeroExitCode",
			     "restarts", 1, "restarts_at_start", 1);
	strbuf_reset(&why);
	assert_int_equal(slurm_backend.place(s, j, &p, res, &why), PLACE_NEVER);
	strbuf_addf(&text, "Slurm job 77 ended FAILED before its agents joined (NonZeroExitCode; "
		    "see /slurm/%s.0-77.out)", id);
	assert_string_equal(why.buf, text.buf);
	pthread_mutex_unlock(&s->lock);

	slurm_backend.release(s);
	setenv("PATH", old_path, 1);
	free(old_path);
	free(p.n);
	free(res);
	json_decref(spec);
	strbuf_release(&path);
	strbuf_release(&why);
	strbuf_release(&text);
	fx_release(&f);
}

static void test_agents_step(void **state)
{
	struct sched *s = xcalloc(1, sizeof(*s));
	struct actions a = { NULL, 0, 0 };
	struct job *j3 = job_new();
	const char *jobs[] = { "j-1", "j-2" };

	s->main_thread = pthread_self();     /* sched_wake(): SIGUSR1, ignored here */
	signal(SIGUSR1, SIG_IGN);
	s->orphans = json_object();
	node_add(s, "a");
	for (int k = 0; k < 2; k++) {
		struct hold *h = xcalloc(1, sizeof(*h));
		char id[32];

		snprintf(h->job, sizeof(h->job), "%s", jobs[k]);
		snprintf(id, sizeof(id), "%s.0.r0", jobs[k]);
		hold_add_task(h, "a", id, 0, 0);
		h->released = 1;
		h->launched_ms = dt_mono_ms();
		ALLOC_GROW(s->holds, s->nr_holds + 1, s->alloc_holds);
		s->holds[s->nr_holds++] = h;
	}
	snprintf(j3->id, sizeof(j3->id), "j-3");
	j3->state = DT_JOB_COMPLETED;
	ALLOC_GROW(s->jobs, s->nr_jobs + 1, s->alloc_jobs);
	s->jobs[s->nr_jobs++] = j3;
	report(s, "a", "j-1.0.r0", "{\"state\": \"exited\", \"exit_code\": 0, \"job_id\": \"j-1\"}");
	report(s, "a", "j-2.0.r0", "{\"state\": \"running\", \"job_id\": \"j-2\"}");
	report(s, "a", "j-3.1.r0", "{\"state\": \"running\", \"job_id\": \"j-3\"}");

	agents_backend.step(s, &a);
	assert_int_equal(s->nr_holds, 1);          /* j-1's: all final, freed */
	assert_string_equal(s->holds[0]->job, "j-2");
	assert_int_equal(a.nr, 2);
	assert_string_equal(a.v[0].task, "j-2.0.r0");   /* still running on a released hold */
	assert_string_equal(a.v[0].node, "a");
	assert_string_equal(a.v[1].task, "j-3.1.r0");   /* an orphan: no hold knows it */
	assert_true(json_object_get(s->orphans, "j-3.1.r0") != NULL);

	for (size_t i = 0; i < a.nr; i++) {
		free(a.v[i].addr);
		free(a.v[i].node);
		free(a.v[i].task);
	}
	free(a.v);
	hold_free(s->holds[0]);
	free(s->holds);
	job_free(j3);
	free(s->jobs);
	json_decref(s->orphans);
	for (size_t i = 0; i < s->nr; i++)
		node_free(s->nodes[i]);
	free(s->nodes);
	free(s);
}

/*
 * A retry's DT_RESUME: ckpt/latest's name, else the newest regular file; a
 * ckpt/ of the job's with more entries than the bound is read only up to it
 * (do_launch calls this without s->lock: a huge ckpt/ stalls only that launch).
 */
static void test_latest_checkpoint_is_bounded(void **state)
{
	char dir[] = "/tmp/dt-test-ckpt-XXXXXX", path[256], jdir[128];
	struct job j = { .id = "j-7" };
	struct timespec ts[2] = { { 1000, 0 }, { 1000, 0 } };
	size_t nread = 0;
	char *got;
	int fd;

	assert_non_null(mkdtemp(dir));
	j.shared_dir = dir;
	snprintf(jdir, sizeof(jdir), "%s/jobs", dir);
	assert_int_equal(mkdir(jdir, 0700), 0);
	snprintf(jdir, sizeof(jdir), "%s/jobs/j-7", dir);
	j.job_dir = jdir;
	assert_int_equal(mkdir(jdir, 0700), 0);
	snprintf(path, sizeof(path), "%s/jobs/j-7/ckpt", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	fd = open(path, O_RDONLY | O_DIRECTORY);
	assert_true(fd >= 0);
	for (int i = 0; i < 3000; i++) {
		char name[32];
		int f;

		snprintf(name, sizeof(name), "step-%d.pt", i);
		f = openat(fd, name, O_WRONLY | O_CREAT | O_EXCL, 0600);
		assert_true(f >= 0);
		close(f);
		ts[0].tv_sec = ts[1].tv_sec = 1000 + i;   /* step-2999.pt the newest */
		assert_int_equal(utimensat(fd, name, ts, 0), 0);
	}
	snprintf(path, sizeof(path), "%s/jobs/j-7/ckpt/step-2999.pt", dir);
	got = job_latest_checkpoint(&j, 100000, 60000, &nread);
	assert_string_equal(got, path);
	assert_int_equal(nread, 3002);   /* and . and .. */
	free(got);
	/* more than the bound: 1,000 read, one of them */
	got = job_latest_checkpoint(&j, 1000, 60000, &nread);
	assert_non_null(got);
	assert_int_equal(nread, 1000);
	assert_non_null(strstr(got, "/ckpt/step-"));
	free(got);
	/* ckpt/latest names it: nothing scanned */
	assert_int_equal(sf_write_at(fd, "latest", "step-5.pt\n", 10, 0600, 0, NULL), 0);
	snprintf(path, sizeof(path), "%s/jobs/j-7/ckpt/step-5.pt", dir);
	got = job_latest_checkpoint(&j, 1000, 60000, &nread);
	assert_string_equal(got, path);
	assert_int_equal(nread, 0);
	free(got);
	close(fd);
	assert_int_equal(rm_tree(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lifecycle_end_to_end),
		cmocka_unit_test(test_latest_checkpoint_is_bounded),
		cmocka_unit_test(test_cancel_running),
		cmocka_unit_test(test_queue_cache_sees_changes),
		cmocka_unit_test(test_goodput_hears_retries),
		cmocka_unit_test(test_sweep_trial_hears_its_job),
		cmocka_unit_test(test_backend_stall_and_log_loss),
		cmocka_unit_test(test_backend_without_activity),
		cmocka_unit_test(test_agents_poll),
		cmocka_unit_test(test_agents_step),
		cmocka_unit_test(test_agents_gpus_taken),
		cmocka_unit_test(test_manager_requeue_and_end),
		cmocka_unit_test(test_slurm_poll),
		cmocka_unit_test(test_slurm_pack_place),
		cmocka_unit_test(test_slurm_array_place),
		cmocka_unit_test(test_slurm_requeued_then_ended),
		cmocka_unit_test(test_slurm_orphans),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
