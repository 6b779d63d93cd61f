/*
 * asha.h - asynchronous successive halving: early stopping for sweeps.
 *
 * From the sweep file's `early_terminate: {type: hyperband, min_iter, eta,
 * max_iter}`.  Rungs sit at resource levels min_iter * eta^k (k = 0, 1, ...)
 * below max_iter (no bound when max_iter is 0), or at the ones W&B's `s`
 * gives (asha_set_rungs()).  Resource is whatever the
 * metric's progress axis is: epoch or step.  One bracket, as in ASHA (Li et
 * al., "A System for Massively Parallel Hyperparameter Tuning", 2020) with
 * its stopping variant: a trial is not paused at a rung but told at once
 * whether to go on.
 *
 * The rule, at each rung a trial reaches: record its value there, n being
 * the number of values recorded at that rung so far (its own included);
 * the trial continues if fewer than max(1, floor(n / eta)) recorded values
 * are strictly better than its own AND at least min_peers (default 1) other
 * values are recorded there, else it is pruned.  So a trial goes on only
 * after beating (or tying) a peer: the first trial to reach a rung stops
 * there, its value still recorded for the later ones to be judged against;
 * until eta trials have reached a rung only the best so far goes on; from
 * the second arrival on, the best value at a rung is never pruned.
 * min_peers 0 is the former rule, where the first trial to reach a rung
 * always went on (so in a sequential sweep the first trial always ran to
 * the end); docs/sweep-search.md has the measurements behind the change.
 *
 * Grace (on by default since the sweep conformance issue; Ray Tune's and
 * W&B's hyperband behave so): a trial that reaches a rung holding fewer than
 * eta values (its own not counted) goes on, and so does the best value at a
 * rung, and so does any trial while fewer than floor(n / eta) of the rung's
 * trials have gone on past it (a quota, as promotion-based ASHA keeps; it
 * matters only when arrivals come in ever worse order).  Without it, in a parallel
 * sweep the first trial to reach a rung was judged alone and stopped, and a
 * sweep of templates/sweep.yaml ended with every trial pruned.  So with eta
 * 3 and max_iter = 9 * min_iter, a sweep of N trials in random order trains
 * at least floor(N / 9) of them to max_iter (tests/unit/test_asha.c).
 *
 * Determinism and recovery: the value a trial records at rung k is its
 * first report with resource >= rung k, and every crossed rung records it,
 * pruned or not.  So the rung tables - all that future decisions depend on -
 * are a function of the SET of reports: replaying the stored metric
 * reports through asha_report() (each trial's own reports in epoch order,
 * trials interleaved in any order) rebuilds the same object.
 * asha_to_json()/asha_from_json() do the same from a compact snapshot.
 *
 * Cost: O(log n) to rank, O(n) worst case to insert, per report.
 */
#ifndef DT_ASHA_H
#define DT_ASHA_H

#include <stddef.h>
#include <jansson.h>
#include "config.h"
#include "strbuf.h"

enum asha_decision {
	ASHA_CONTINUE = 0,
	ASHA_PRUNE = 1,
	ASHA_PAUSE = 2,     /* promotion: stop at this rung, keep the checkpoint */
};

struct asha;

/* NULL when min_iter < 1 or eta < 2 (the loader checks these first). */
struct asha *asha_new(int min_iter, int eta, int max_iter, enum sweep_goal goal);
void asha_free(struct asha *a);

/*
 * A real eta above 1 (W&B writes e.g. 1.5): the top floor(n / eta) of a
 * rung's n values go on, the grace rule counts eta arrivals, and rungs are
 * min_iter * eta^k.  -1 when eta <= 1 or after the first report.
 */
int asha_set_eta(struct asha *a, double eta);
double asha_get_eta(const struct asha *a);
/*
 * Rungs at these resources (n of them, increasing, positive) instead of
 * min_iter * eta^k: W&B's bands max_iter / eta^k with `s`, which are not such
 * a sequence when max_iter is not divisible by eta^s (100, s 3, eta 3: 3, 11,
 * 33).  max_iter stays the end of training, not a rung.  -1 when the list
 * is not so or after the first report.
 */
int asha_set_rungs(struct asha *a, const double *res, size_t n);

/*
 * How many other values a rung must hold before a trial may continue past
 * it (default ASHA_DEFAULT_MIN_PEERS = 1; 0: the first to arrive goes on).
 * Set it before the first report; asha_to_json() records it.
 */
#define ASHA_DEFAULT_MIN_PEERS 1
void asha_set_min_peers(struct asha *a, int min_peers);
int asha_get_min_peers(const struct asha *a);
/* The grace rule above: on (1) by asha_new(); 0 is the rule of older snapshots. */
void asha_set_grace(struct asha *a, int on);
int asha_get_grace(const struct asha *a);

/*
 * The rung check (off by default; an experiment after PASHA, Bohdal et al.
 * 2022): rung k's ranking is trusted only while it agrees with rung k + 1's.
 * Agreement is Goodman and Kruskal's gamma over the trials holding values at
 * both rungs, (concordant - discordant) / (concordant + discordant) pairs,
 * ties left out (1 with no untied pair).  While at least min_trials trials
 * hold both and gamma < min_gamma, rung k keeps the top floor(widen * n /
 * eta) instead of max(1, floor(n / eta)); widen >= eta lets every trial
 * through (still recorded).  The counts are a function of the rung values,
 * so replay and snapshots keep working.  Those trials are the ones that
 * passed rung k, a selected set, which lowers gamma even when rung k
 * predicts well; docs/sweep-search.md has the measurements (no gain on the
 * benchmark, hence off).  min_trials 0 turns it off.  Set it before the
 * first report; asha_to_json() records it.
 */
void asha_set_rung_check(struct asha *a, int min_trials, double min_gamma, double widen);
/* min_trials (0: off), and the other two settings where non-NULL. */
int asha_get_rung_check(const struct asha *a, double *min_gamma, double *widen);
/* gamma between rungs k and k + 1, and how many trials hold both. */
double asha_rung_agreement(const struct asha *a, size_t k, size_t *trials);

/*
 * Trial `trial_id` reported `value` at progress `resource` (epoch/step).
 * Returns ASHA_PRUNE if the trial should stop now (and for every later
 * report of a pruned trial), else ASHA_CONTINUE.  A NaN value counts as the
 * worst possible.  Reports below the first rung only register the trial.
 */
int asha_report(struct asha *a, int trial_id, double resource, double value);

/* Has trial_id been told to stop?  0 for unknown trials. */
int asha_is_pruned(const struct asha *a, int trial_id);
/* Resource level of rung k (grows the rung list if needed). */
double asha_rung_resource(struct asha *a, size_t k);
/* How many values rung k holds (0 for rungs nobody reached). */
size_t asha_rung_count(const struct asha *a, size_t k);
/* How many trials went on past rung k (reached a later rung, or are at k unpruned). */
size_t asha_rung_went_on(const struct asha *a, size_t k);

/*
 * Promotion (off by default; for trials that checkpoint): the paper's
 * promotion variant instead of stopping.  A trial runs to its next rung and
 * pauses there (asha_report() returns ASHA_PAUSE once it records a value at
 * the rung it was running to: the caller stops it, keeping its checkpoint);
 * asha_promote_next() names the paused trial to resume: from the highest
 * rung down, a paused trial among the top floor(n / eta) values of its rung,
 * the best first, and marks it running to the next rung (past the last rung:
 * to the end of training).  Nothing is pruned: a trial never promoted stays
 * paused.  `closing` (no trial is running and none will start) lets the top
 * max(1, floor(n / eta)) go on, so a rung's best always trains on and a
 * small sweep still trains one trial to the end.  Every report is recorded
 * at the rungs it crosses, paused or not, so the rung tables stay a function
 * of the set of reports; which trials are paused is the caller's to restore
 * after a replay, with asha_set_trial().  Set it before the first report.
 */
void asha_set_promotion(struct asha *a, int on);
int asha_get_promotion(const struct asha *a);
int asha_promote_next(struct asha *a, int closing);

enum asha_trial_state {
	ASHA_TRIAL_RUNNING = 0,  /* running to the rung after its last one (a promoted trial) */
	ASHA_TRIAL_PAUSED = 1,   /* stopped at its last rung, waiting to be promoted */
	ASHA_TRIAL_DONE = 2,     /* ended otherwise: never promoted */
};
/* After a replay: the trial's state as the caller knows it (promotion only). */
void asha_set_trial(struct asha *a, int trial_id, enum asha_trial_state st);
int asha_is_paused(const struct asha *a, int trial_id);

/*
 * {"version": 1, "min_iter": 1, "eta": 3, "max_iter": 27, "min_peers": 1,
 *  "rungs": [3.0, 11.0, 33.0] (only when set by asha_set_rungs()),
 *  "goal": "minimize", "trials": [{"id": 7, "values": [0.9, 0.5], "pruned": false}, ...]}
 * values[k] is the value recorded at rung k; null for NaN.  "eta" is an
 * integer when whole, else a real.  A snapshot
 * without "min_peers" (written before it existed) is read with min_peers 0,
 * one without "grace" with grace off: the rules it was made under.  "rung_check": {"min_trials", "min_gamma",
 * "widen"} is written only when the check is on; absent, it is off.
 * With promotion on, "promotion": true and each trial's "state" ("running",
 * "paused", "done") and "target" (the rung it runs to).
 */
json_t *asha_to_json(const struct asha *a);
struct asha *asha_from_json(const json_t *j, struct strbuf *err);

#endif
