/*
 * jobs-metrics.c - the jobs' families of GET /metrics: jobs by state, jobs
 * finished, queue wait and run time.  A subscriber of the job events
 * (jobstate.h): it counts what it hears, nothing in the lifecycle calls it.
 */
#include "jobs-int.h"
#include "log.h"
#include "promtext.h"
#include "protocol.h"
#include "usage.h"

#include <stdlib.h>
#include <string.h>


static const char *const job_states[] = { DT_JOB_PENDING, DT_JOB_RUNNING, DT_JOB_COMPLETED,
					  DT_JOB_FAILED, DT_JOB_CANCELLED, DT_JOB_TIMEOUT,
					  DT_JOB_NODE_FAIL };
/* seconds: a queue wait or run of a training job spans ms to days */
static const double job_secs_bounds[] = { 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600,
					  24 * 3600 };
#define NR_SECS_BOUNDS ARRAY_SIZE(job_secs_bounds)

struct jobs_stats {
	unsigned long long finished[ARRAY_SIZE(job_states)];
	unsigned long long wait_counts[NR_SECS_BOUNDS + 1], run_counts[NR_SECS_BOUNDS + 1];
	struct prom_hist wait, run;
};

static struct jobs_stats *jobs_stats(struct sched *s)
{
	if (!s->jstats) {
		struct jobs_stats *js = xcalloc(1, sizeof(*js));

		js->wait.bounds = js->run.bounds = job_secs_bounds;
		js->wait.nr_bounds = js->run.nr_bounds = NR_SECS_BOUNDS;
		js->wait.counts = js->wait_counts;
		js->run.counts = js->run_counts;
		s->jstats = js;
	}
	return s->jstats;
}

/* Count a job's life: queue wait when its first attempt starts, run time and
 * final state at the end. */
static void jobs_observe(struct sched *s, struct job *j, enum job_event ev,
			 const struct job_event_info *info, void *data)
{
	struct jobs_stats *js = jobs_stats(s);
	long long now = dt_now_us();

	if (ev == JOB_EV_STARTED && j->submitted_us && j->attempt == 0)
		prom_hist_observe(&js->wait, (double)(now - j->submitted_us) / 1e6);
	if (ev != JOB_EV_ENDED)
		return;
	for (size_t k = 0; k < ARRAY_SIZE(job_states); k++)
		if (!strcmp(info->to, job_states[k]))
			js->finished[k]++;
	if (j->started_us)
		prom_hist_observe(&js->run, (double)(now - j->started_us) / 1e6);
}

void jobs_metrics_subscribe(struct sched *s)
{
	job_events_on(&s->events, JOB_EV_STARTED, jobs_observe, NULL);
	job_events_on(&s->events, JOB_EV_ENDED, jobs_observe, NULL);
}

void jobs_metrics(struct sched *s, struct strbuf *o)
{
	struct jobs_stats *js = jobs_stats(s);
	unsigned long long n[ARRAY_SIZE(job_states)] = { 0 };

	for (size_t i = 0; i < s->nr_jobs; i++)
		for (size_t k = 0; k < ARRAY_SIZE(job_states); k++)
			n[k] += !strcmp(s->jobs[i]->state, job_states[k]);
	prom_family(o, "dtsched_jobs", "gauge", "Jobs known to dtsched, by state.");
	for (size_t k = 0; k < ARRAY_SIZE(job_states); k++) {
		const char *l[] = { "state", job_states[k], NULL };

		prom_sample(o, "dtsched_jobs", l, (double)n[k]);
	}
	prom_family(o, "dtsched_jobs_finished_total", "counter",
		    "Jobs that ended since dtsched started, by final state.");
	for (size_t k = 2; k < ARRAY_SIZE(job_states); k++) {
		const char *l[] = { "state", job_states[k], NULL };

		prom_sample(o, "dtsched_jobs_finished_total", l, (double)js->finished[k]);
	}
	prom_family(o, "dtsched_job_queue_wait_seconds", "histogram",
		    "Time from submission to the start of a job's first attempt.");
	prom_hist_write(o, "dtsched_job_queue_wait_seconds", NULL, &js->wait);
	prom_family(o, "dtsched_job_run_seconds", "histogram",
		    "Run time of a job's last attempt, from its start to its end.");
	prom_hist_write(o, "dtsched_job_run_seconds", NULL, &js->run);
}

