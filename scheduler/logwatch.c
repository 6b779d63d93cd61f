/*
 * logwatch.c - log-pattern triggers (docs/notifications.md, `match:`): the
 * rank logs of every running job that has a notify: target with `match:`
 * (its own, or cluster.yaml's) are read as they grow, and each line that
 * matches a pattern is the event log.match, naming the job, rank, node,
 * pattern and line, which notify.c sends to the targets of that pattern.
 *
 * One thread of its own reads the logs (lib/logmerge.h: incremental, each
 * line handed out once, the shared dir read through lib/safefile.h), once a
 * second, never with s->lock held; the scheduler only lends it the list of
 * running jobs.  Each matching line fires once; at most MATCH_BURST events
 * per job and minute, the rest counted in the next one ("suppressed").
 * After a restart of dtsched, the lines written before it started are not
 * matched again (they were, by the dtsched before).
 */
#include "jobs-int.h"
#include "json.h"
#include "log.h"
#include "logmerge.h"
#include "notify-spec.h"

#include <regex.h>
#include <string.h>
#include <time.h>

#define WATCH_TICK_MS 1000
#define MATCH_BURST 10            /* events per job and minute */
#define MATCH_LINE_MAX 512        /* bytes of the line an event quotes */

struct pattern {
	char *text;
	regex_t re;
};

struct watch {
	char job[16];
	struct logset ls;
	size_t ranks;
	struct pattern *p;
	size_t nr_p;
	long long skip_before_us;     /* lines older than this were matched by an earlier dtsched */
	long long window_ms;          /* the minute MATCH_BURST counts in */
	int in_window;
	long long suppressed;
	int seen;                     /* still running at the last tick */
};

struct logwatch {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop, started;
	struct watch **w;
	size_t nr, alloc;
};

static struct logwatch the_watch;

void job_logset(const struct job *j, struct logset *ls)
{
	logset_init(ls);
	for (int r = 0; r < j->world; r++) {
		struct strbuf path = STRBUF_INIT;

		strbuf_addf(&path, "%s/logs/%d.log", j->job_dir, r);
		logset_add(ls, path.buf, r, "?");
		strbuf_release(&path);
	}
}

/* at most MATCH_LINE_MAX bytes of text, cut at a UTF-8 character's start */
static size_t cut_len(const char *text, size_t len)
{
	size_t n = len > MATCH_LINE_MAX ? MATCH_LINE_MAX : len;

	while (n > 0 && n < len && ((unsigned char)text[n] & 0xc0) == 0x80)
		n--;
	return n;
}

static void add_patterns(struct watch *w, const json_t *list)
{
	size_t i;
	json_t *t;

	json_array_foreach(list, i, t) {
		const char *m = json_get_str(t, "match", NULL);
		int dup = 0;

		if (!m)
			continue;
		for (size_t k = 0; k < w->nr_p; k++)
			dup |= !strcmp(w->p[k].text, m);
		if (dup)
			continue;
		w->p = xrealloc(w->p, (w->nr_p + 1) * sizeof(*w->p));
		if (regcomp(&w->p[w->nr_p].re, m, REG_EXTENDED | REG_NOSUB))
			continue;   /* notify-spec.c checked it: not reached */
		w->p[w->nr_p++].text = xstrdup(m);
	}
}

static void watch_free(struct watch *w)
{
	for (size_t k = 0; k < w->nr_p; k++) {
		regfree(&w->p[k].re);
		free(w->p[k].text);
	}
	free(w->p);
	logset_release(&w->ls);
	free(w);
}

static struct watch *watch_find(struct logwatch *lw, const char *job)
{
	for (size_t i = 0; i < lw->nr; i++)
		if (!strcmp(lw->w[i]->job, job))
			return lw->w[i];
	return NULL;
}

/* The running jobs with patterns: new watches made, ended ones marked (lock held). */
static void watch_sync(struct sched *s, struct logwatch *lw)
{
	const json_t *defaults = s->cc ? s->cc->notify : NULL;

	for (size_t i = 0; i < lw->nr; i++)
		lw->w[i]->seen = 0;
	for (size_t i = 0; i < s->nr_jobs; i++) {
		struct job *j = s->jobs[i];
		struct watch *w;

		/* a retried job keeps its watch (its logs go on after a marker): a new one
		 * would read the earlier attempts' lines again */
		if ((w = watch_find(lw, j->id))) {
			w->seen = !jobstate_final(j->state);
			continue;
		}
		if (strcmp(j->state, DT_JOB_RUNNING) || j->world <= 0)
			continue;
		w = xcalloc(1, sizeof(*w));
		add_patterns(w, j->cfg.notify);
		add_patterns(w, defaults);
		if (!w->nr_p) {
			free(w);
			continue;
		}
		snprintf(w->job, sizeof(w->job), "%s", j->id);
		job_logset(j, &w->ls);
		w->ranks = (size_t)j->world;
		w->skip_before_us = j->started_us < s->started_us ? s->started_us : 0;
		w->seen = 1;
		if (lw->nr == lw->alloc) {
			lw->alloc = lw->alloc ? 2 * lw->alloc : 8;
			lw->w = xrealloc(lw->w, lw->alloc * sizeof(*lw->w));
		}
		lw->w[lw->nr++] = w;
	}
}

/* A matching line, as an event (lock held). */
static void match_event(struct sched *s, struct watch *w, const struct logline *l,
			const char *pattern)
{
	struct job *j = job_find(s, w->job);
	json_t *ev;

	ev = json_pack("{s:s,s:s,s:s,s:i,s:s,s:s,s:s}", "job", w->job, "name",
		       j && j->name ? j->name : "", "user", j && j->user ? j->user : "", "rank",
		       l->rank, "node", l->node ? l->node : "?", "pattern", pattern, "line", l->text);
	if (w->suppressed) {
		json_object_set_new(ev, "suppressed", json_integer(w->suppressed));
		w->suppressed = 0;
	}
	events_add(s, "log.match", ev, j ? j->cfg.notify : NULL);
}

/* Read w's new lines (lock NOT held); the events under the lock, in order. */
static void watch_read(struct sched *s, struct watch *w, int final)
{
	const struct logline *l;
	json_t *hits = json_array();
	long long over = 0;
	size_t i;
	json_t *h;

	logset_begin(&w->ls, LOGSET_ALL | (final ? LOGSET_FINAL : 0));
	while ((l = logset_next(&w->ls))) {
		if (l->ts < w->skip_before_us)
			continue;
		for (size_t k = 0; k < w->nr_p; k++) {
			if (regexec(&w->p[k].re, l->text, 0, NULL, 0))
				continue;
			/* more than a burst would only be suppressed: counted, not kept (a
			 * job printing a pattern in a loop once cost dtsched GBs here) */
			if (json_array_size(hits) >= MATCH_BURST) {
				over++;
				continue;
			}
			json_array_append_new(hits, json_pack("{s:i,s:s,s:s%,s:I,s:i}", "rank",
				l->rank, "node", l->node ? l->node : "?", "text", l->text,
				cut_len(l->text, l->len),
				"ts", (json_int_t)l->ts, "p", (int)k));
		}
	}
	logset_end(&w->ls);
	if (!json_array_size(hits)) {
		json_decref(hits);
		return;
	}
	pthread_mutex_lock(&s->lock);
	json_array_foreach(hits, i, h) {
		struct logline l2 = { .rank = (int)json_get_int(h, "rank", -1),
				      .node = json_get_str(h, "node", "?"),
				      .text = json_get_str(h, "text", "") };
		long long now = dt_mono_ms();

		l2.len = strlen(l2.text);
		if (now - w->window_ms >= 60000) {
			w->window_ms = now;
			w->in_window = 0;
		}
		if (w->in_window >= MATCH_BURST) {
			w->suppressed++;
			continue;
		}
		w->in_window++;
		match_event(s, w, &l2, w->p[json_get_int(h, "p", 0)].text);
	}
	w->suppressed += over;   /* after these: the next event counts them */
	pthread_mutex_unlock(&s->lock);
	json_decref(hits);
}

static void *logwatch_thread(void *arg)
{
	struct sched *s = arg;
	struct logwatch *lw = &the_watch;

	pthread_mutex_lock(&lw->mu);
	while (!lw->stop) {
		struct timespec ts;

		pthread_mutex_unlock(&lw->mu);
		pthread_mutex_lock(&s->lock);
		watch_sync(s, lw);
		pthread_mutex_unlock(&s->lock);
		for (size_t i = 0; i < lw->nr; i++) {
			struct watch *w = lw->w[i];

			/* an ended job: its last lines, then the watch goes */
			watch_read(s, w, !w->seen);
			if (!w->seen) {
				watch_free(w);
				lw->w[i--] = lw->w[--lw->nr];
			}
		}
		pthread_mutex_lock(&lw->mu);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += WATCH_TICK_MS / 1000;
		if (!lw->stop)
			pthread_cond_timedwait(&lw->cv, &lw->mu, &ts);
	}
	pthread_mutex_unlock(&lw->mu);
	return NULL;
}

int logwatch_start(struct sched *s)
{
	struct logwatch *lw = &the_watch;
	pthread_condattr_t ca;
	sigset_t all, old;
	int rc;

	memset(lw, 0, sizeof(*lw));
	pthread_mutex_init(&lw->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&lw->cv, &ca);
	pthread_condattr_destroy(&ca);
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&lw->th, NULL, logwatch_thread, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	lw->started = rc == 0;
	return rc ? -1 : 0;
}

void logwatch_stop(struct sched *s)
{
	struct logwatch *lw = &the_watch;

	if (!lw->started)
		return;
	pthread_mutex_lock(&lw->mu);
	lw->stop = 1;
	pthread_cond_signal(&lw->cv);
	pthread_mutex_unlock(&lw->mu);
	pthread_join(lw->th, NULL);
	for (size_t i = 0; i < lw->nr; i++)
		watch_free(lw->w[i]);
	free(lw->w);
	pthread_mutex_destroy(&lw->mu);
	pthread_cond_destroy(&lw->cv);
	memset(lw, 0, sizeof(*lw));
}
