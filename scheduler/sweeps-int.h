/*
 * sweeps-int.h - what the files of dtsched's sweep subsystem share: the sweep
 * and trial objects (sweeps-state.c: states, rows, load), the controller
 * (sweeps.c) and the HTTP API (sweeps-api.c).  A bounded unit on top of the
 * job API (sched-int.h: jobs_submit, jobs_cancel, jobs_view): nothing below
 * calls into it.  Locking: s->lock, as everywhere in dtsched.
 */
#ifndef DT_SWEEPS_INT_H
#define DT_SWEEPS_INT_H

#include "sched-int.h"
#include "sweeps.h"

struct trial {
	int no;                   /* 1-based; its suggestion's seq is no - 1 */
	char job[16];             /* "" while it has none */
	struct suggestion sg;
	const char *state;        /* DT_TRIAL_* */
	int has_value, no_metric;
	double value, resource;   /* last reported (PRUNED: the value it was pruned at) */
	long long created_us, ended_us;
	struct sweep_reader rd;   /* how far its job's sources are read (saved with the reports) */
	double reached;           /* resource of its last recorded report (-1: none) */
	int resubmits;
	int stop_pending;         /* PRUNED/PAUSED/CANCELLED: its job may still need stopping */
	char *resume;             /* promoted: DT_RESUME, the ckpt dir of the job it paused in */
	int nreports;
	json_t *metrics;          /* the reports, in order */
	long long scanned_ms;
	/* its job dir (sf_dir) while the job runs, of job scan_job: opened at the
	 * first scan, so a scan opens its two files and not the whole path again */
	int scan_dfd;             /* -1: none */
	char scan_job[16];
	char *reason;
	/* its job's state as last learnt: read from the job API once (a new job,
	 * and every trial after a head restart: NULL until then), then kept by
	 * the job events (sweeps_job_moved), which set job_moved for a look */
	const char *job_state;
	int job_moved;
};

struct sweep {
	long long seq;
	char id[16];
	char *name, *shared_dir, *user;
	char *submit_dir;         /* where `dtctl sweep` ran: the trials start there (or NULL) */
	json_t *spec;             /* SWEEPSPEC as received */
	struct sweep_config cfg;
	uint64_t seed;
	const char *state;        /* DT_SWEEP_* */
	char *reason;
	long long created_us, ended_us;
	struct search *search;
	struct asha *asha;
	struct trial **t;
	size_t nr, alloc;
	/* t[0 .. settled) are done for good (sweep_settle): the controller's
	 * per-step scans start past them, so a step costs what is live, not what
	 * a sweep of 10,000 trials has run */
	size_t settled;
	int failures, exhausted;
	int best_known;           /* best_value is set (the events' "new best": sweep.best) */
	double best_value;
	int target_hit;           /* the trial whose value reached metric.target, 0 = none */
	double target_value;
	struct sweep_report *replay;   /* while loading: the stored reports, in order */
	size_t nr_replay, alloc_replay;
};

struct sweeps {
	struct sweep **v;
	size_t nr, alloc;
	sqlite3_stmt *st_sweep, *st_trial, *st_report;
};

/* sweeps-state.c: a sweep event (events.c) of w, to its notify: list; ev taken over */
void sweep_event(struct sched *s, struct sweep *w, const char *kind, json_t *ev);

/* sweepspec.c */
struct asha *sweep_asha_new(const struct sweep_config *cfg);
/* v as a JSON real, or null when !has */
json_t *num_or_null(int has, double v);

/* sweeps-state.c: the sweep and trial objects */
#define NR_TRIAL_STATES 7
/* every trial state, in the order counts and metrics list them */
extern const char *const trial_states[NR_TRIAL_STATES];
int trial_final(const struct trial *t);
int sweep_final(const struct sweep *w);
void check_target(struct sweep *w, int trial, double v);
/* Close the job dir a live trial's scans hold (scan_dfd), if any. */
void trial_scan_close(struct trial *t);
void trial_free(struct trial *t);
void sweep_free(struct sweep *w);
int sweep_save(struct sched *s, struct sweep *w);   /* -1: not written (logged) */
void trial_save(struct sched *s, struct sweep *w, struct trial *t);
void report_save(struct sched *s, struct sweep *w, struct trial *t, int n, const json_t *r);
void sweep_set_reason(char **dst, const char *fmt, ...) DT_PRINTF(2, 3);
void sweep_end(struct sched *s, struct sweep *w, const char *state);
void trial_set(struct sched *s, struct sweep *w, struct trial *t, const char *state);
struct sweep *sweep_find(struct sched *s, const char *id);

/* sweeps.c: the controller */
void cancel_trial_job(struct sched *s, struct trial *t, const char *why);

#endif
