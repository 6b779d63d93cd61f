/*
 * sweeps.h - the pure pieces of dtsched's sweep controller (sweeps.c), kept
 * apart from the daemon so the unit tests (tests/unit/test_sweep.c) can
 * check them: reading metric lines, turning a suggestion into a trial's job
 * spec, the sweep spec from its JSON form, and rebuilding the search and
 * ASHA state by replay after a restart.
 *
 * The controller itself (sweeps_init/step/routes) is declared in
 * sched-int.h with the rest of dtsched's internals.
 *
 * Ownership: functions returning json_t * or struct search * / struct asha *
 * give the caller a new reference / object.
 */
#ifndef DT_SWEEPS_H
#define DT_SWEEPS_H

#include <math.h>
#include <stdint.h>
#include <jansson.h>
#include "asha.h"
#include "config.h"
#include "search.h"
#include "strbuf.h"
#include "strvec.h"

/*
 * One line of a metric source, without its newline.  from_log: a rank log
 * line "<ts> O DTCTL_METRIC {...}" (stdout only; anything else is not a
 * report); else a $DT_METRICS_FILE line, a JSON object.  A new object, or
 * NULL when the line is no report.
 */
json_t *sweep_parse_metric_line(const char *line, size_t len, int from_log);

/*
 * From a report: *value (NaN for null, "nan" or a non-number) and *resource
 * (epoch if present, else step, else -1).  0 when the report carries
 * `metric`, -1 when it does not.
 */
int sweep_metric_value(const json_t *report, const char *metric, double *value,
		       double *resource);

/*
 * A trial's report reader: how far its metric sources have been read, and
 * the progress of the last report recorded.  sweeps.c keeps it in the
 * trial's row and saves it in the transaction that stores the reports it
 * returned (and the decisions made on them); after a restart it goes on
 * from that copy, so a report the trial wrote before, while or after
 * dtsched was down is read exactly once: what a lost process read but did
 * not commit is read again, what it committed never.
 */
struct sweep_reader {
	long long mf_off, log_off;   /* bytes of metrics.jsonl / logs/0.log consumed */
	double epoch, step;          /* of the last report recorded; -INFINITY: none */
};
#define SWEEP_READER_INIT { 0, 0, -INFINITY, -INFINITY }

/* Report r was recorded: the reader's progress is now r's (loading: each stored one in order). */
void sweep_reader_note(struct sweep_reader *rd, const json_t *r);

/*
 * The complete lines appended to <root>/<job_rel>/metrics.jsonl, then to
 * <root>/<job_rel>/logs/0.log (rank 0's stdout), since the last call.  Each
 * report carrying `metric` goes to `got` in order, and the reader's progress
 * moves to it; one that repeats a recorded report - its (epoch, step) not
 * past the last recorded one's, as when a trial resumed from an older
 * checkpoint runs an epoch again - goes to `refused` instead, as {"file":
 * "logs/0.log", "offset": <byte of its line>, "report": {...},
 * "last_epoch": e, "last_step": s} (the progress it was compared with, null
 * where none).  Reports
 * with neither epoch nor step are never repeats.  A line not yet ended
 * waits for the next call.  The files are the trial's own (hostile): no
 * link followed, no FIFO blocked on, regular files only, at most 2 MiB per
 * file and call.  A new job of the same trial (a new job dir) zeroes the
 * offsets and keeps the progress.
 */
void sweep_reader_scan(struct sweep_reader *rd, const char *root, const char *job_rel,
		       const char *metric, json_t *got, json_t *refused);
/* The same in the job dir the caller opened (sf_dir) and holds: a live trial's is
 * walked to once, not at every scan (where names it in warnings). */
void sweep_reader_scan_at(struct sweep_reader *rd, int job_dfd, const char *where,
			  const char *metric, json_t *got, json_t *refused);

/* DT_PARAM_<NAME>: upper-cased, every character but [A-Z0-9_] made '_'. */
void sweep_param_env(struct strbuf *sb, const char *name);

/*
 * The job spec (jobspec.h JSON form) trial `trial` of sweep `sweep_id` runs:
 *   - command: every "{name}" of a parameter in an argv word is replaced by
 *     its value; when no argv word or env value has a placeholder, "--name=value" is appended
 *     for every parameter (the W&B convention).  Never through a shell: with
 *     `shell: true` nothing is substituted or appended (env only);
 *   - trainer: every parameter becomes a trainer option (a dttrain flag
 *     --name=value), replacing the job's own;
 *   - env: DT_PARAM_<NAME>=value for every parameter, DT_TRIAL_ID=<trial>,
 *     DT_SWEEP_ID=<sweep_id>; "{name}" substituted in env values;
 *   - name "<base>-t<trial>", retries at least 1 (a failed trial is retried
 *     once), gpus_per_node = gpus_per_trial when that is set.
 */
json_t *sweep_trial_spec(const json_t *job, const struct suggestion *sg, int trial,
			 const char *sweep_id, const char *base, int gpus_per_trial);

/*
 * W&B's form (cfg->wandb: the sweep file has program:/command:).  The
 * parameters of sg as the agent holds them: one object, keys sorted at
 * every level as W&B's controller orders them, a nested group one object
 * under its name ({"optimizer": {"lr": 0.001, "nadam": {"beta": 0.9}}}),
 * each value typed as W&B types it (wandb_value() in sweeps.c).
 */
json_t *sweep_wandb_params(const struct sweep_config *cfg, const struct suggestion *sg);
/*
 * cfg->command with the agent's macros replaced, appended to argv, as
 * `wandb agent` builds it: an item that is exactly ${env} (/usr/bin/env),
 * ${interpreter} (python), ${program}, ${args} (--key=str(value) each),
 * ${args_no_hyphens} (key=value), ${args_no_equals} (--key value),
 * ${args_no_boolean_flags} (--key for True, nothing for False),
 * ${args_json} (json.dumps of the parameters) or ${args_json_file}
 * (args_file); every other item as it is.  args_json gets the JSON text.
 * Returns 1 when the command names ${args_json_file} (the caller writes
 * args_json there before the trial starts), else 0.
 */
int sweep_wandb_argv(const struct sweep_config *cfg, const struct suggestion *sg,
		     const char *args_file, struct strvec *argv, struct strbuf *args_json);
/* sweep_trial_spec() with argv (from sweep_wandb_argv()) as the command, nothing substituted */
json_t *sweep_wandb_trial_spec(const json_t *job, const struct strvec *argv,
			       const struct suggestion *sg, int trial, const char *sweep_id,
			       const char *base, int gpus_per_trial);

/* The sweep config from sweep_config_to_json()'s form (values may be strings). */
int sweep_config_from_json(struct sweep_config *c, const json_t *o, struct strbuf *err);

/* A finished or running trial, as stored, for the replay below. */
struct sweep_replay_trial {
	const struct suggestion *sg;
	const char *state;        /* DT_TRIAL_* */
	int has_value;
	double value, resource;
	int no_metric;
};

/*
 * The search after these trials (in trial order; trial i has seq i):
 * search_new(cfg, seed), search_observe_at() for every finished one,
 * search_set_next_seq(nr).  NULL + message on a bad space.
 */
struct search *sweep_replay_search(const struct sweep_config *cfg, uint64_t seed,
				   const struct sweep_replay_trial *t, size_t nr,
				   struct strbuf *err);

struct sweep_report {
	int trial;
	double resource, value;
};

/* ASHA after these reports (each trial's own in order), or NULL without early_terminate. */
struct asha *sweep_replay_asha(const struct sweep_config *cfg, const struct sweep_report *r,
			       size_t nr);

#endif
