/*
 * search.h - hyperparameter search for `dtctl sweep`: grid, random and TPE.
 *
 * A pure, deterministic library: no I/O, no clock, no global state.  dtsched
 * owns the loop around it:
 *
 *     s = search_new(&sweep_cfg, seed, &err);        NULL + message on a bad space
 *     while (more trials wanted && search_suggest(s, &sg) == 0) {
 *             launch a trial with sg (DT_PARAM_<NAME>=sg.items[i].value);
 *             persist suggestion_to_json(&sg);
 *             ... later, when the trial ends or ASHA prunes it:
 *             search_observe_at(s, &sg, value, SEARCH_COMPLETED or SEARCH_PRUNED, epoch);
 *             suggestion_release(&sg);
 *     }
 *     search_free(s);
 *
 * State and recovery.  Suggestion number k (its `seq`, 0-based) is drawn
 * from its own random stream rng_mix(seed, k, ...) and depends only on the
 * seed, on k and on the SET of observations made before it was asked for.
 * So the whole state is (seed, number of suggestions made, observations),
 * which is exactly what search_state_to_json() writes; search_state_from_json()
 * rebuilds an identical object by replaying the observations (in any order:
 * they are kept sorted by seq).  dtsched can equally store only the trials
 * table (seq, params, value, state, resource) and replay it the same way:
 * search_new() + search_observe_at() for each finished trial +
 * search_set_next_seq().
 *
 * Ownership: a struct suggestion owns all its strings (it outlives the
 * search); release it with suggestion_release().  The search copies what it
 * needs from the config, so the config may be released after search_new().
 */
#ifndef DT_SEARCH_H
#define DT_SEARCH_H

#include <stdint.h>
#include <jansson.h>
#include "config.h"
#include "strbuf.h"

/* How a trial ended, for search_observe(). */
enum search_state {
	SEARCH_COMPLETED = 0,   /* ran to the end; value is its final metric */
	SEARCH_PRUNED = 1,      /* stopped by ASHA; value is its last reported metric */
	SEARCH_FAILED = 2,      /* crashed / no metric; ignored by the model */
};

/* One parameter of a suggestion. */
struct suggestion_item {
	char *name;      /* the parameter's (dotted) name */
	char *value;     /* as passed to the trial: "0.001", "512", "adam" */
	int is_num;      /* value is a number */
	double num;      /* that number (strtod(value) == num exactly), else 0 */
};

/* One assignment of every parameter, in the config's parameter order. */
struct suggestion {
	long long seq;                  /* 0 for the search's first suggestion, 1, ... */
	struct suggestion_item *items;
	size_t nr;
};

#define SUGGESTION_INIT { -1, NULL, 0 }

void suggestion_release(struct suggestion *sg);
/* The item called `name`, or NULL. */
const struct suggestion_item *suggestion_get(const struct suggestion *sg, const char *name);
/* {"seq": 3, "params": {"lr": "0.001", "hidden": "512"}} (values as strings). */
json_t *suggestion_to_json(const struct suggestion *sg);
/* The inverse; numbers are re-derived from the strings.  -1 + message on error. */
int suggestion_from_json(struct suggestion *sg, const json_t *j, struct strbuf *err);

/*
 * Format v the way suggestions carry numbers: the shortest "%.Ng" (N <= 17)
 * that strtod() reads back as exactly v, so "0.001" not "0.0010000000000000000",
 * integers without a decimal point, -0 as "0".  buf needs 32 bytes.
 */
void search_format_double(char *buf, size_t size, double v);

struct search;

/*
 * A search over cfg->params with cfg->method and cfg->goal.  Fails (NULL, one
 * message appended to err, "path:line:col: parameter 'lr': ...") on a space
 * it cannot sample: grid with a continuous distribution, min > max, log min <= 0,
 * q <= 0, sigma <= 0, no multiple of q in [min, max], a grid too large.
 */
struct search *search_new(const struct sweep_config *cfg, uint64_t seed, struct strbuf *err);
void search_free(struct search *s);

/*
 * The next assignment into *out (released first if it holds one).  Returns
 * 0, or 1 when the space is exhausted (grid only; *out is left empty).
 * Suggestions do not wait for observations: with `parallel` trials running,
 * TPE proposes from what has finished so far.
 */
int search_suggest(struct search *s, struct suggestion *out);

/*
 * Tell the search how a trial ended.  `value` is the metric as reported (the
 * goal is applied inside).  For SEARCH_PRUNED, `resource` is the epoch/step of
 * that last value: TPE ranks pruned trials after completed ones, deeper ones
 * first (resource < 0 or NaN: unknown, ranked by value alone).  Observing the
 * same seq again replaces the earlier observation.  Returns 0, or -1 when the
 * suggestion does not fit the space (a parameter missing or a value not among
 * its choices): the observation is then ignored.
 */
int search_observe_at(struct search *s, const struct suggestion *sg, double value,
		      int state, double resource);
/* search_observe_at() with the resource unknown. */
int search_observe(struct search *s, const struct suggestion *sg, double value, int state);

/* Number of suggestions made so far (the next seq). */
long long search_next_seq(const struct search *s);
/* For replay: the next suggestion gets seq `seq` (>= 0). */
void search_set_next_seq(struct search *s, long long seq);
/* Grid size (product of choice counts, an int_uniform counting its integers), -1 unless grid. */
long long search_grid_size(const struct search *s);

/*
 * {"version": 1, "method": "bayes", "seed": "42", "next_seq": 17,
 *  "tpe": {"n_startup": 10, ...},
 *  "observations": [{"seq": 0, "params": {...}, "value": 0.31,
 *                    "state": "completed", "resource": 27}, ...]}
 * Non-finite values are written as null.  The seed is a decimal string
 * because JSON integers stop at 2^63.
 */
json_t *search_state_to_json(const struct search *s);
/* A search over cfg in exactly the state `state` describes; NULL + message on error. */
struct search *search_state_from_json(const struct sweep_config *cfg, const json_t *state,
				      struct strbuf *err);

/*
 * Tuning knobs of the TPE sampler; defaults in docs/sweep-search.md.  Set
 * them before the first suggestion; search_state_to_json() records them.
 */
struct tpe_options {
	int n_startup;        /* random suggestions until this many trials are observed: 10 */
	int n_ei_candidates;  /* candidates drawn from l(x) per parameter: 24 */
	double gamma;         /* fraction of observed trials that are "good": 0.10 */
	int gamma_cap;        /* at most this many good trials: 25 */
	double prior_weight;  /* weight of the prior component in l and g: 1.0 */
	int multivariate;     /* joint densities over all parameters (1) or one per parameter */
	double bandwidth_factor;  /* multivariate: Scott's-rule kernel widths times this: 0.7 */
	/*
	 * multivariate: a categorical kernel keeps its trial's choice with
	 * probability 1 / (1 + beta), else is uniform.  < 0 (default -1): beta =
	 * K * prior_weight / (m + 1), K choices, m trials in the group (l or g);
	 * >= 0: this fixed beta (0.5 before the default changed).
	 */
	double cat_beta;
};
void search_get_tpe_options(const struct search *s, struct tpe_options *o);
void search_set_tpe_options(struct search *s, const struct tpe_options *o);

#endif
