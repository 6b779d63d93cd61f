/*
 * test_sweep.c - unit tests for the pure parts of dtsched's sweep controller
 * (scheduler/sweeps.h): metric lines from metrics.jsonl and rank logs,
 * parameter -> argv/env substitution of a trial's job spec, the sweep spec
 * from its JSON form, and rebuilding the search and ASHA by replay after a
 * restart (the next suggestions and decisions equal the lost objects').
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "json.h"
#include "protocol.h"
#include "pyfmt.h"
#include "scheduler/sweeps.h"

static json_t *parse_jsonl(const char *line)
{
	return sweep_parse_metric_line(line, strlen(line), 0);
}

static void test_metric_lines(void **state)
{
	static const char *const log_ok[] = {
		"2026-11-22T10:00:00.123456Z O DTCTL_METRIC {\"epoch\": 2, \"val_loss\": 0.31}",
		"2026-11-22T10:00:00.123456Z O   DTCTL_METRIC{\"epoch\": 2, \"val_loss\": 0.31}  ",
	};
	static const char *const log_bad[] = {
		"2026-11-22T10:00:00.123456Z E DTCTL_METRIC {\"epoch\": 2}",   /* stderr */
		"2026-11-22T10:00:00.123456Z O DTCTL_METRICS {\"epoch\": 2}",
		"2026-11-22T10:00:00.123456Z O DTCTL_METRIC [1, 2]",
		"2026-11-22T10:00:00.123456Z O DTCTL_METRIC {\"epoch\": 2",    /* cut */
		"2026-11-22T10:00:00.123456Z O epoch 2 val_loss 0.31",
		"DTCTL_METRIC {\"epoch\": 2}",                                  /* no timestamp */
		"",
	};
	json_t *o;
	double v, r;

	for (size_t i = 0; i < sizeof(log_ok) / sizeof(*log_ok); i++) {
		o = sweep_parse_metric_line(log_ok[i], strlen(log_ok[i]), 1);
		assert_non_null(o);
		assert_int_equal(sweep_metric_value(o, "val_loss", &v, &r), 0);
		assert_true(v == 0.31 && r == 2);
		assert_int_equal(sweep_metric_value(o, "loss", &v, &r), -1);
		json_decref(o);
	}
	for (size_t i = 0; i < sizeof(log_bad) / sizeof(*log_bad); i++)
		assert_null(sweep_parse_metric_line(log_bad[i], strlen(log_bad[i]), 1));

	/* metrics.jsonl: the object itself; step when there is no epoch; null is NaN */
	o = parse_jsonl("{\"step\": 100, \"loss\": null}\r");
	assert_non_null(o);
	assert_int_equal(sweep_metric_value(o, "loss", &v, &r), 0);
	assert_true(isnan(v) && r == 100);
	json_decref(o);
	o = parse_jsonl("{\"loss\": 1.5, \"epoch\": 1.0, \"step\": 8}");
	assert_int_equal(sweep_metric_value(o, "loss", &v, &r), 0);
	assert_true(v == 1.5 && r == 1.0);
	json_decref(o);
	o = parse_jsonl("{\"loss\": \"high\"}");
	assert_int_equal(sweep_metric_value(o, "loss", &v, &r), 0);
	assert_true(isnan(v) && r == -1);
	json_decref(o);
	assert_null(parse_jsonl("not json"));
	assert_null(parse_jsonl("{\"a\": 1} trailing"));
}

static void make_sg(struct suggestion *sg, const char *const *kv, size_t n)
{
	sg->seq = 0;
	sg->nr = n;
	sg->items = calloc(n, sizeof(*sg->items));
	for (size_t i = 0; i < n; i++) {
		sg->items[i].name = strdup(kv[2 * i]);
		sg->items[i].value = strdup(kv[2 * i + 1]);
	}
}

static void test_trial_spec_command(void **state)
{
	static const char *const kv[] = { "lr", "0.001", "opt.name", "a b;$(x)" };
	struct suggestion sg;
	json_t *job = json_pack("{s:s,s:[s,s,s,s],s:{s:s},s:i,s:s}", "name", "train",
				"command", "python", "train.py", "--lr={lr}", "{opt.name}/{nope}",
				"env", "TAG", "run-{lr}", "retries", 0, "path", "/x/job.yaml");
	json_t *o, *cmd, *env;

	make_sg(&sg, kv, 2);
	o = sweep_trial_spec(job, &sg, 7, "s-000003", "mysweep", 0);
	cmd = json_object_get(o, "command");
	assert_int_equal(json_array_size(cmd), 4);
	assert_string_equal(json_string_value(json_array_get(cmd, 2)), "--lr=0.001");
	/* verbatim, never through a shell; unknown placeholders stay */
	assert_string_equal(json_string_value(json_array_get(cmd, 3)), "a b;$(x)/{nope}");
	env = json_object_get(o, "env");
	assert_string_equal(json_get_str(env, "DT_PARAM_LR", ""), "0.001");
	assert_string_equal(json_get_str(env, "DT_PARAM_OPT_NAME", ""), "a b;$(x)");
	assert_string_equal(json_get_str(env, "DT_TRIAL_ID", ""), "7");
	assert_string_equal(json_get_str(env, "DT_SWEEP_ID", ""), "s-000003");
	assert_string_equal(json_get_str(env, "TAG", ""), "run-0.001");
	assert_string_equal(json_get_str(o, "name", ""), "mysweep-t7");
	assert_int_equal(json_get_int(o, "retries", 0), 1);
	assert_null(json_object_get(o, "path"));
	/* the job template is untouched */
	assert_string_equal(json_string_value(json_array_get(json_object_get(job, "command"), 2)),
			    "--lr={lr}");
	json_decref(o);

	/* no placeholder anywhere: --name=value appended (the W&B convention) */
	json_object_set_new(job, "command", json_pack("[s,s]", "python", "train.py"));
	json_object_set_new(job, "env", json_object());
	o = sweep_trial_spec(job, &sg, 1, "s-1", NULL, 2);
	cmd = json_object_get(o, "command");
	assert_int_equal(json_array_size(cmd), 4);
	assert_string_equal(json_string_value(json_array_get(cmd, 2)), "--lr=0.001");
	assert_string_equal(json_string_value(json_array_get(cmd, 3)), "--opt.name=a b;$(x)");
	assert_int_equal(json_get_int(o, "gpus_per_node", 0), 2);
	assert_string_equal(json_get_str(o, "name", ""), "s-1-t1");
	json_decref(o);

	/* a placeholder in env: counts too: nothing appended */
	json_object_set_new(job, "env", json_pack("{s:s}", "LR", "{lr}"));
	o = sweep_trial_spec(job, &sg, 1, "s-1", NULL, 0);
	assert_int_equal(json_array_size(json_object_get(o, "command")), 2);
	assert_string_equal(json_get_str(json_object_get(o, "env"), "LR", ""), "0.001");
	json_decref(o);

	/* shell: true: nothing substituted or appended, env only */
	json_object_set_new(job, "shell", json_true());
	json_object_set_new(job, "command", json_pack("[s]", "echo {lr}"));
	o = sweep_trial_spec(job, &sg, 1, "s-1", NULL, 0);
	cmd = json_object_get(o, "command");
	assert_int_equal(json_array_size(cmd), 1);
	assert_string_equal(json_string_value(json_array_get(cmd, 0)), "echo {lr}");
	json_decref(o);
	json_decref(job);
	suggestion_release(&sg);
}

static void test_trial_spec_trainer(void **state)
{
	static const char *const kv[] = { "lr", "3e-4", "hidden", "512" };
	struct suggestion sg;
	json_t *job = json_pack("{s:{s:s,s:s,s:s},s:n,s:i}", "trainer", "model", "mlp", "hidden",
				"32", "epochs", "3", "command", "retries", 2);
	json_t *o, *tr;

	make_sg(&sg, kv, 2);
	o = sweep_trial_spec(job, &sg, 2, "s-1", "x", 0);
	tr = json_object_get(o, "trainer");
	assert_string_equal(json_get_str(tr, "lr", ""), "3e-4");
	assert_string_equal(json_get_str(tr, "hidden", ""), "512");   /* replaces the job's own */
	assert_string_equal(json_get_str(tr, "epochs", ""), "3");
	assert_true(json_is_null(json_object_get(o, "command")));
	assert_int_equal(json_get_int(o, "retries", 0), 2);
	assert_string_equal(json_get_str(json_object_get(o, "env"), "DT_PARAM_HIDDEN", ""), "512");
	json_decref(o);
	json_decref(job);
	suggestion_release(&sg);
}

static const char sweep_yaml[] =
	"method: bayes\n"
	"metric: {name: val_loss, goal: minimize}\n"
	"parameters:\n"
	"  lr: {distribution: log_uniform_values, min: 1.0e-4, max: 1.0e-1}\n"
	"  act: {values: [relu, gelu, 1e-3]}\n"
	"  layers: {min: 1, max: 4}\n"
	"early_terminate: {type: hyperband, min_iter: 1, eta: 3, max_iter: 27}\n"
	"job: {procs_per_node: 1, command: [python, t.py]}\n"
	"max_trials: 40\n"
	"seed: 42\n";

/* The sweep as dtctl sends it: sweep_config_to_json with values as written. */
static json_t *sent_form(const struct sweep_config *c)
{
	json_t *o = sweep_config_to_json(c);
	json_t *acts = json_pack("[s,s,s]", "relu", "gelu", "1e-3");

	json_object_set_new(json_object_get(json_object_get(o, "parameters"), "act"), "values", acts);
	return o;
}

static void test_config_from_json(void **state)
{
	struct sweep_config c, d;
	struct strbuf err = STRBUF_INIT;
	json_t *o;

	assert_int_equal(sweep_config_parse(&c, sweep_yaml, strlen(sweep_yaml), "t.yaml", &err), 0);
	o = sent_form(&c);
	assert_int_equal(sweep_config_from_json(&d, o, &err), 0);
	assert_int_equal(d.method, SWEEP_BAYES);
	assert_int_equal(d.nr_params, 3);
	assert_int_equal(d.params[0].kind, PARAM_LOG_UNIFORM);
	assert_true(d.params[0].min == 1e-4 && d.params[0].max == 0.1);
	assert_int_equal(d.params[1].kind, PARAM_VALUES);
	assert_string_equal(d.params[1].values.v[2], "1e-3");
	assert_int_equal(d.params[2].kind, PARAM_INT_UNIFORM);
	assert_int_equal(d.et_eta, 3);
	assert_int_equal(d.et_max_iter, 27);
	assert_int_equal(d.max_trials, 40);
	assert_true(d.seed == 42);
	assert_int_equal(d.pack, 0);
	sweep_config_release(&d);

	/* pack: allocation and its size reach dtsched; a size without nodes is refused */
	json_object_set_new(o, "pack", json_string("allocation"));
	json_object_set_new(o, "allocation", json_pack("{s:i,s:i}", "nodes", 2, "gpus", 4));
	assert_int_equal(sweep_config_from_json(&d, o, &err), 0);
	assert_true(d.pack == 1 && d.alloc_nodes == 2 && d.alloc_gpus == 4);
	sweep_config_release(&d);
	json_object_set_new(o, "allocation", json_pack("{s:i}", "gpus", 4));
	assert_int_equal(sweep_config_from_json(&d, o, &err), -1);
	assert_non_null(strstr(err.buf, "allocation needs nodes"));
	json_object_del(o, "allocation");
	json_object_del(o, "pack");

	json_object_set_new(o, "method", json_string("hillclimb"));
	assert_int_equal(sweep_config_from_json(&d, o, &err), -1);
	assert_non_null(strstr(err.buf, "hillclimb"));
	json_decref(o);
	sweep_config_release(&c);
	strbuf_release(&err);
}

/*
 * One checker: every sweep file the loader accepts (what `dtctl validate`
 * says) is accepted by dtsched in the form dtctl sends, with the same
 * max_trials; W&B's rule that grid and random need no metric holds in both
 * (W&B's examples/wandb-sweeps/sweeps-boolean-parameters/sweep-bool.yaml is
 * the first), and a bayes sweep without one is refused by both, in the same
 * words.
 */
static void test_config_one_checker(void **state)
{
	static const struct {
		const char *yaml;
		int max_trials;
	} ok[] = {
		{ "program: train-bool.py  \nmethod: grid\n# Parameters to search over\n"
		  "parameters:\n  optimizer:\n    values: [\"sgd\", \"adam\"]\n  flag1:\n"
		  "    values:\n    - false\n    - true\n  flag2:\n    values:\n    - false\n"
		  "    - true\n", 8 },
		{ "program: t.py\nmethod: random\nrun_cap: 3\nparameters: {lr: {min: 0.1, max: 1}}\n", 3 },
		{ "program: t.py\nmethod: grid\nrun_cap: 2\nparameters: {a: {values: [1, 2, 3]}}\n", 2 },
		{ "program: t.py\nmethod: grid\nmax_failures: 0\nparameters: {a: {values: [1, 2]}}\n", 2 },
		{ "method: grid\nparameters: {a: {min: 1, max: 4}}\n"
		  "job: {procs_per_node: 1, command: [t]}\n", 4 },
	};
	static const char bayes[] =
		"program: t.py\nmethod: bayes\nrun_cap: 3\nparameters: {lr: {min: 0.1, max: 1}}\n";
	struct sweep_config c, d;
	struct strbuf err = STRBUF_INIT, err2 = STRBUF_INIT;
	json_t *o;

	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		assert_int_equal(sweep_config_parse(&c, ok[i].yaml, strlen(ok[i].yaml), "t.yaml",
						    &err), 0);
		o = sweep_config_to_json(&c);
		if (sweep_config_from_json(&d, o, &err) < 0)
			fail_msg("file %zu: validate accepts it, dtsched says: %s", i, err.buf);
		assert_int_equal(d.max_trials, ok[i].max_trials);
		assert_int_equal(c.max_trials, ok[i].max_trials);
		assert_int_equal(!d.metric_name, !c.metric_name);
		sweep_config_release(&d);
		sweep_config_release(&c);
		json_decref(o);
	}
	assert_int_equal(sweep_config_parse(&c, bayes, strlen(bayes), "b.yaml", &err), -1);
	assert_string_equal(err.buf, "b.yaml:1:1: missing required key 'metric' (bayes search "
			    "needs a metric to optimise)");
	assert_int_equal(sweep_config_parse(&c, ok[1].yaml, strlen(ok[1].yaml), "t.yaml", &err2), 0);
	o = sweep_config_to_json(&c);
	json_object_set_new(o, "method", json_string("bayes"));
	strbuf_reset(&err2);
	assert_int_equal(sweep_config_from_json(&d, o, &err2), -1);
	assert_string_equal(err2.buf, "sweep: missing required key 'metric' (bayes search needs "
			    "a metric to optimise)");
	json_decref(o);
	sweep_config_release(&c);
	strbuf_release(&err);
	strbuf_release(&err2);
}

/*
 * W&B's bands (max_iter 100, s 3, eta 3: 3, 11, 33) and a fractional eta
 * reach dtsched: its config has them and its ASHA has its rungs there.
 */
static void test_config_from_json_bands(void **state)
{
	static const char yaml[] =
		"program: train.py\n"
		"method: random\n"
		"run_cap: 5\n"
		"metric: {name: loss}\n"
		"early_terminate: {type: hyperband, max_iter: 100, s: 3, eta: 1.5}\n"
		"parameters: {lr: {min: 0.0, max: 1.0}}\n";
	struct sweep_config c, d;
	struct strbuf err = STRBUF_INIT;
	struct asha *a;
	json_t *o;

	assert_int_equal(sweep_config_parse(&c, yaml, strlen(yaml), "t.yaml", &err), 0);
	o = sweep_config_to_json(&c);
	assert_int_equal(sweep_config_from_json(&d, o, &err), 0);
	assert_true(d.et_eta == 1.5);
	/* 100 / 1.5^k, truncated: 66, 44, 29 */
	assert_int_equal(d.et_nr_bands, 3);
	assert_int_equal(d.et_bands[0], 29);
	assert_int_equal(d.et_bands[2], 66);
	a = sweep_replay_asha(&d, NULL, 0);
	assert_non_null(a);
	assert_true(asha_rung_resource(a, 0) == 29);
	assert_true(asha_rung_resource(a, 1) == 44);
	assert_true(asha_rung_resource(a, 2) == 66);
	assert_true(isinf(asha_rung_resource(a, 3)));
	asha_free(a);
	sweep_config_release(&d);
	json_decref(o);
	sweep_config_release(&c);
	strbuf_release(&err);
}

/*
 * Run a sweep for a while: suggestions, ASHA reports, some trials ending;
 * then rebuild both objects from what dtsched stores (trials + reports)
 * and check the next suggestions and decisions are the same.
 */
static double objective(const struct suggestion *sg, int epoch)
{
	double lr = suggestion_get(sg, "lr")->num, layers = suggestion_get(sg, "layers")->num;

	return fabs(log10(lr) + 2.5) + 0.1 * layers + 1.0 / epoch;
}

static void test_replay(void **state)
{
	struct sweep_config c;
	struct strbuf err = STRBUF_INIT;
	struct search *live, *rebuilt;
	struct asha *alive, *arebuilt, *areversed;
	struct suggestion sg[30];
	struct sweep_replay_trial rt[30];
	struct sweep_report rep[400];
	size_t nrep = 0, n = 24;

	assert_int_equal(sweep_config_parse(&c, sweep_yaml, strlen(sweep_yaml), "t.yaml", &err), 0);
	live = search_new(&c, 42, &err);
	alive = sweep_replay_asha(&c, NULL, 0);
	assert_non_null(live);
	assert_non_null(alive);
	memset(rt, 0, sizeof(rt));
	for (size_t i = 0; i < n; i++) {
		int e, pruned = 0;
		double v = NAN;

		sg[i].items = NULL;
		sg[i].nr = 0;
		assert_int_equal(search_suggest(live, &sg[i]), 0);
		assert_int_equal(sg[i].seq, (long long)i);
		rt[i].sg = &sg[i];
		rt[i].state = DT_TRIAL_RUNNING;
		if (i % 5 == 4)
			continue;   /* still running when dtsched dies */
		for (e = 1; e <= 27 && !pruned; e *= 3) {
			v = objective(&sg[i], e);
			rep[nrep++] = (struct sweep_report){ (int)i + 1, e, v };
			pruned = asha_report(alive, (int)i + 1, e, v) == ASHA_PRUNE;
		}
		rt[i].has_value = 1;
		rt[i].value = v;
		rt[i].resource = e / 3;
		if (i % 7 == 6) {
			rt[i].state = DT_TRIAL_FAILED;
			search_observe_at(live, &sg[i], NAN, SEARCH_FAILED, -1);
		} else if (pruned) {
			rt[i].state = DT_TRIAL_PRUNED;
			search_observe_at(live, &sg[i], v, SEARCH_PRUNED, rt[i].resource);
		} else {
			rt[i].state = DT_TRIAL_COMPLETED;
			search_observe_at(live, &sg[i], v, SEARCH_COMPLETED, rt[i].resource);
		}
	}
	/* the stored order (dtsched replays by rowid): the same object, pruned flags too */
	arebuilt = sweep_replay_asha(&c, rep, nrep);
	/* another interleaving (trial order reversed, each trial's own in order) gives the
	 * same rung tables, so the same decisions for new trials */
	{
		struct sweep_report rev[400];
		size_t k = 0;

		for (int t = (int)n; t >= 1; t--)
			for (size_t i = 0; i < nrep; i++)
				if (rep[i].trial == t)
					rev[k++] = rep[i];
		areversed = sweep_replay_asha(&c, rev, k);
	}
	rebuilt = sweep_replay_search(&c, 42, rt, n, &err);
	assert_non_null(rebuilt);
	assert_int_equal(search_next_seq(rebuilt), (long long)n);
	for (int k = 0; k < 6; k++) {
		struct suggestion a = SUGGESTION_INIT, b = SUGGESTION_INIT;
		char *ja, *jb;

		assert_int_equal(search_suggest(live, &a), 0);
		assert_int_equal(search_suggest(rebuilt, &b), 0);
		{
			json_t *x = suggestion_to_json(&a), *y = suggestion_to_json(&b);

			ja = json_dumps(x, JSON_SORT_KEYS);
			jb = json_dumps(y, JSON_SORT_KEYS);
			json_decref(x);
			json_decref(y);
		}
		assert_string_equal(ja, jb);
		/* ASHA decides the same for new reports */
		for (int e = 1; e <= 9; e *= 3) {
			double v = objective(&a, e);

			int d = asha_report(alive, 100 + k, e, v);

			assert_int_equal(d, asha_report(arebuilt, 100 + k, e, v));
			assert_int_equal(d, asha_report(areversed, 100 + k, e, v));
		}
		free(ja);
		free(jb);
		suggestion_release(&a);
		suggestion_release(&b);
	}
	/* the running trials' pruned state survives too */
	for (size_t i = 0; i < n; i++)
		assert_int_equal(asha_is_pruned(alive, (int)i + 1), asha_is_pruned(arebuilt, (int)i + 1));
	for (size_t i = 0; i < n; i++)
		suggestion_release(&sg[i]);
	search_free(live);
	search_free(rebuilt);
	asha_free(alive);
	asha_free(arebuilt);
	asha_free(areversed);
	sweep_config_release(&c);
	strbuf_release(&err);
}

static void test_param_env(void **state)
{
	struct strbuf sb = STRBUF_INIT;

	sweep_param_env(&sb, "opt.lr-max");
	assert_string_equal(sb.buf, "DT_PARAM_OPT_LR_MAX");
	strbuf_release(&sb);
}

/* Python's str() and json.dumps() of numbers, as W&B's agent writes values. */
static void test_pyfmt(void **state)
{
	static const struct {
		double v;
		const char *want;
	} cases[] = {
		{ 0.1, "0.1" }, { 1e-05, "1e-05" }, { 0.0001, "0.0001" }, { 100.0, "100.0" },
		{ 1e16, "1e+16" }, { 123456.789, "123456.789" }, { 1.5e-07, "1.5e-07" },
		{ 0.30000000000000004, "0.30000000000000004" }, { -2.5, "-2.5" }, { 0.0, "0.0" },
		{ 1e15, "1000000000000000.0" }, { 2.5e+20, "2.5e+20" },
	};
	struct strbuf sb = STRBUF_INIT;
	json_t *j;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		strbuf_reset(&sb);
		py_float(&sb, cases[i].v);
		assert_string_equal(sb.buf, cases[i].want);
	}
	j = json_loads("{\"a\": true, \"b\": null, \"c\": [1, 0.5, \"it's\"], \"d\": \"\\u00e9\"}",
		       0, NULL);
	strbuf_reset(&sb);
	py_str(&sb, j);
	assert_string_equal(sb.buf, "{'a': True, 'b': None, 'c': [1, 0.5, \"it's\"], 'd': '\xc3\xa9'}");
	strbuf_reset(&sb);
	py_json(&sb, j);
	assert_string_equal(sb.buf, "{\"a\": true, \"b\": null, \"c\": [1, 0.5, \"it's\"], \"d\": \"\\u00e9\"}");
	json_decref(j);
	strbuf_release(&sb);
}

/* The argv W&B's agent builds, for a file with every macro and nested parameters. */
static void test_wandb_argv(void **state)
{
	static const char yaml[] =
		"program: train.py\n"
		"method: grid\n"
		"command:\n"
		"  - ${env}\n"
		"  - ${interpreter}\n"
		"  - ${program}\n"
		"  - ${args}\n"
		"  - ${args_no_boolean_flags}\n"
		"  - ${args_json_file}\n"
		"  - --x=${args}\n"
		"parameters:\n"
		"  zeta: {values: [1e-3]}\n"
		"  flag: {values: [false]}\n"
		"  opt:\n"
		"    parameters:\n"
		"      nadam: {parameters: {beta: {values: [0.9]}}}\n"
		"      lr: {values: [0.001]}\n"
		"  n: {distribution: int_uniform, min: 3, max: 3}\n";
	struct sweep_config c;
	struct strbuf err = STRBUF_INIT, js = STRBUF_INIT;
	struct strvec argv = STRVEC_INIT;
	struct suggestion sg = SUGGESTION_INIT;
	json_t *o;
	static const char *const want[] = {
		"/usr/bin/env", "python", "train.py",
		"--flag=False", "--n=3", "--opt={'lr': 0.001, 'nadam': {'beta': 0.9}}", "--zeta=1e-3",
		"--n=3", "--opt={'lr': 0.001, 'nadam': {'beta': 0.9}}", "--zeta=1e-3",
		"/sh/a.json", "--x=${args}", NULL,
	};

	(void)state;
	assert_int_equal(sweep_config_parse(&c, yaml, strlen(yaml), "w.yaml", &err), 0);
	o = json_pack("{s:i, s:{s:s, s:s, s:s, s:s, s:s}}", "seq", 0, "params", "zeta", "1e-3",
		      "flag", "false", "opt.lr", "0.001", "opt.nadam.beta", "0.9", "n", "3");
	assert_int_equal(suggestion_from_json(&sg, o, &err), 0);
	assert_int_equal(sweep_wandb_argv(&c, &sg, "/sh/a.json", &argv, &js), 1);
	for (size_t i = 0; want[i]; i++)
		assert_string_equal(argv.v[i], want[i]);
	assert_int_equal(argv.nr, 12);
	assert_string_equal(js.buf, "{\"flag\": false, \"n\": 3, \"opt\": {\"lr\": 0.001, "
			    "\"nadam\": {\"beta\": 0.9}}, \"zeta\": \"1e-3\"}");
	json_decref(o);
	strvec_clear(&argv);
	suggestion_release(&sg);
	sweep_config_release(&c);
	strbuf_release(&err);
	strbuf_release(&js);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metric_lines),
		cmocka_unit_test(test_trial_spec_command),
		cmocka_unit_test(test_trial_spec_trainer),
		cmocka_unit_test(test_config_from_json),
		cmocka_unit_test(test_config_from_json_bands),
		cmocka_unit_test(test_config_one_checker),
		cmocka_unit_test(test_replay),
		cmocka_unit_test(test_param_env),
		cmocka_unit_test(test_pyfmt),
		cmocka_unit_test(test_wandb_argv),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
