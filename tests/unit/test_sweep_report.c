/*
 * test_sweep_report.c - unit tests for cli/sweep-report.c: the HTML page of a
 * sweep export.  Exports are built here (minimize and maximize, log scale,
 * categorical parameters, pruned trials, trials without reports, no trials at
 * all), rendered, and the page's structure checked: one <svg> per chart with
 * one <polyline> per drawn trial, the best trial first in the table, every
 * user string escaped, the same bytes twice, no URL but the SVG namespace;
 * malformed exports fail with one message naming the field.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "strbuf.h"
#include "cli/sweep-report.h"

/* ------------------------------------------------------------ building */

static json_t *export_new(const char *metric, const char *goal, const char *parameters)
{
	json_error_t e;
	json_t *params = json_loads(parameters, 0, &e);

	assert_non_null(params);
	return json_pack("{s:i, s:{s:s, s:s, s:s, s:{s:s, s:s}, s:s, s:n, s:i, s:i, s:s, s:n, s:o},"
			 " s:[], s:n}",
			 "protocol", 1,
			 "sweep", "id", "s-000042", "name", "unit sweep", "method", "random",
			 "metric", "name", metric, "goal", goal, "state", "RUNNING", "reason",
			 "max_trials", 40, "parallel", 4, "created_at", "2026-11-22T10:00:00.123456Z",
			 "ended_at", "parameters", params,
			 "trials", "best");
}

/*
 * A trial with npts reports of `metric` going geometrically from y0 to y1 on
 * epochs 1..npts; value NAN is null.  params is a JSON object text.
 */
static void trial_add(json_t *ex, const char *metric, int id, const char *state, double value,
		      const char *params, int npts, double y0, double y1)
{
	json_error_t e;
	json_t *p = json_loads(params, 0, &e), *ms = json_array(), *t;

	assert_non_null(p);
	for (int k = 1; k <= npts; k++) {
		double f = npts > 1 ? (double)(k - 1) / (npts - 1) : 1;
		json_t *m = json_pack("{s:i, s:i}", "epoch", k, "step", 100 * k);

		json_object_set_new(m, metric, json_real(y0 * pow(y1 / y0, f)));
		json_array_append_new(ms, m);
	}
	t = json_pack("{s:i, s:s, s:o, s:s, s:o, s:b, s:i, s:s, s:n, s:o}",
		      "trial", id, "job_id", "j-000100", "params", p, "state", state,
		      "value", isnan(value) ? json_null() : json_real(value),
		      "no_metric", 0, "resource", npts, "created_at", "2026-11-22T10:01:00Z",
		      "ended_at", "metrics", ms);
	json_array_append_new(json_object_get(ex, "trials"), t);
}

static void best_set(json_t *ex, int id, double value)
{
	json_object_set_new(ex, "best", json_pack("{s:i, s:f, s:{}}", "trial", id, "value", value,
						  "params"));
}

static const char params_std[] =
	"[{\"name\":\"lr\",\"kind\":\"log_uniform\",\"min\":0.0001,\"max\":0.1},"
	" {\"name\":\"hidden\",\"kind\":\"values\",\"values\":[\"256\",\"512\",\"1024\"]},"
	" {\"name\":\"opt\",\"kind\":\"values\",\"values\":[\"adam\",\"sgd\"]},"
	" {\"name\":\"drop\",\"kind\":\"uniform\",\"min\":0,\"max\":0.5}]";

/* Six trials: 3 completed, 1 pruned, 1 running (reports, no value), 1 pending. */
static json_t *export_minimize(void)
{
	json_t *ex = export_new("val_loss", "minimize", params_std);

	trial_add(ex, "val_loss", 1, "COMPLETED", 0.40,
		  "{\"lr\":\"0.001\",\"hidden\":\"512\",\"opt\":\"adam\",\"drop\":\"0.1\"}", 10, 2.0, 0.40);
	trial_add(ex, "val_loss", 2, "COMPLETED", 0.25,
		  "{\"lr\":\"0.003\",\"hidden\":\"1024\",\"opt\":\"adam\",\"drop\":\"0.2\"}", 10, 2.1, 0.25);
	trial_add(ex, "val_loss", 3, "PRUNED", 1.30,
		  "{\"lr\":\"0.08\",\"hidden\":\"256\",\"opt\":\"sgd\",\"drop\":\"0.4\"}", 3, 2.2, 1.30);
	trial_add(ex, "val_loss", 4, "COMPLETED", 0.55,
		  "{\"lr\":\"0.0002\",\"hidden\":\"256\",\"opt\":\"sgd\",\"drop\":\"0.3\"}", 10, 2.0, 0.55);
	trial_add(ex, "val_loss", 5, "RUNNING", NAN,
		  "{\"lr\":\"0.01\",\"hidden\":\"512\",\"opt\":\"sgd\",\"drop\":\"0.0\"}", 4, 2.0, 0.9);
	trial_add(ex, "val_loss", 6, "PENDING", NAN,
		  "{\"lr\":\"0.005\",\"hidden\":\"512\",\"opt\":\"adam\",\"drop\":\"0.25\"}", 0, 1, 1);
	best_set(ex, 2, 0.25);
	return ex;
}

/* ------------------------------------------------------------ checking */

static char *render(const json_t *ex)
{
	struct strbuf out = STRBUF_INIT, err = STRBUF_INIT;

	if (sweep_report_html(ex, &out, &err) < 0)
		fail_msg("expected a page, got: %s", err.buf);
	assert_int_equal(err.len, 0);
	strbuf_release(&err);
	return strbuf_detach(&out, NULL);
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* The text of the <svg id="id"> element (caller frees). */
static char *svg_of(const char *html, const char *id)
{
	char open[64];
	const char *a, *b;

	snprintf(open, sizeof(open), "<svg id=\"%s\"", id);
	a = strstr(html, open);
	if (!a)
		fail_msg("expected %s in the page", open);
	b = strstr(a, "</svg>");
	assert_non_null(b);
	return strndup(a, b - a + 6);
}

/* The data-t of the first row of <table id="id">. */
static long first_row(const char *html, const char *id)
{
	char open[64];
	const char *a;

	snprintf(open, sizeof(open), "<table id=\"%s\"", id);
	a = strstr(html, open);
	assert_non_null(a);
	a = strstr(a, "<tbody>");
	assert_non_null(a);
	a = strstr(a, "<tr data-t=\"");
	if (!a)
		return -1;
	return strtol(a + strlen("<tr data-t=\""), NULL, 10);
}

/* Every "http" in the page is the SVG namespace of one of the two charts. */
static void assert_offline(const char *html)
{
	assert_int_equal(count(html, "http"), count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
	assert_int_equal(count(html, "<svg"), 2);
	assert_null(strstr(html, "<link"));
	assert_null(strstr(html, "<img"));
	assert_null(strstr(html, "@import"));
	assert_int_equal(count(html, "<script"), 1);
}

/* ------------------------------------------------------------ tests */

static void test_minimize(void **state)
{
	json_t *ex = export_minimize();
	char *html = render(ex), *curves = svg_of(html, "curves"), *par = svg_of(html, "parallel");

	assert_true(strncmp(html, "<!DOCTYPE html>", 15) == 0);
	assert_non_null(strstr(html, "</html>\n"));
	assert_offline(html);
	assert_int_equal(count(html, "<svg id=\"curves\""), 1);
	assert_int_equal(count(html, "<svg id=\"parallel\""), 1);
	/* 5 trials have reports; 4 finished (completed or pruned) */
	assert_int_equal(count(curves, "<polyline"), 5);
	assert_int_equal(count(par, "<polyline"), 4);
	assert_int_equal(count(curves, "<polyline class=\"tr\" data-t=\"3\" stroke=\"#"), 1);
	assert_int_equal(count(curves, "stroke-dasharray=\"5 3\""), 1 + 1);   /* trial 3 + legend */
	/* the best is drawn last, thick, in the most saturated colour */
	assert_non_null(strstr(curves, "<polyline class=\"tr best\" data-t=\"2\" stroke=\"#0c2c84\" "
			       "stroke-width=\"3.2\""));
	assert_null(strstr(strstr(curves, "data-t=\"2\""), "<polyline"));
	assert_non_null(strstr(curves, ">val_loss<"));    /* linear: no "(log)" */
	assert_non_null(strstr(curves, ">epoch<"));
	assert_non_null(strstr(par, ">minimize, best on top<"));
	/* 0.25 is the best: first in the table, then 0.40, 0.55, 1.30 */
	assert_int_equal(first_row(html, "best"), 2);
	assert_true(strstr(html, "<tr data-t=\"1\"") < strstr(html, "<tr data-t=\"4\""));
	assert_int_equal(first_row(html, "trials"), 1);
	assert_non_null(strstr(html, "1 pending"));
	assert_non_null(strstr(html, "3 completed"));
	assert_non_null(strstr(html, "1 pruned"));
	free(curves);
	free(par);
	free(html);
	json_decref(ex);
}

static void test_maximize(void **state)
{
	json_t *ex = export_new("accuracy", "maximize", params_std);
	char *html, *curves, *par;

	trial_add(ex, "accuracy", 1, "COMPLETED", 0.71,
		  "{\"lr\":\"0.001\",\"hidden\":\"512\",\"opt\":\"adam\",\"drop\":\"0.1\"}", 8, 0.1, 0.71);
	trial_add(ex, "accuracy", 2, "COMPLETED", 0.93,
		  "{\"lr\":\"0.003\",\"hidden\":\"1024\",\"opt\":\"adam\",\"drop\":\"0.2\"}", 8, 0.1, 0.93);
	trial_add(ex, "accuracy", 3, "PRUNED", 0.35,
		  "{\"lr\":\"0.05\",\"hidden\":\"256\",\"opt\":\"sgd\",\"drop\":\"0.4\"}", 2, 0.1, 0.35);
	best_set(ex, 2, 0.93);
	html = render(ex);
	curves = svg_of(html, "curves");
	par = svg_of(html, "parallel");
	assert_int_equal(count(curves, "<polyline"), 3);
	assert_int_equal(count(par, "<polyline"), 3);
	assert_non_null(strstr(curves, "data-t=\"2\" stroke=\"#0c2c84\""));
	assert_non_null(strstr(par, ">maximize, best on top<"));
	assert_int_equal(first_row(html, "best"), 2);
	assert_true(strstr(html, "<tr data-t=\"1\"") < strstr(html, "<tr data-t=\"3\""));
	assert_non_null(strstr(html, "highest first"));
	free(curves);
	free(par);
	free(html);
	json_decref(ex);
}

static void test_log_scale(void **state)
{
	json_t *ex = export_new("val_loss", "minimize", params_std);
	char *html, *curves;

	trial_add(ex, "val_loss", 1, "COMPLETED", 0.002,
		  "{\"lr\":\"0.001\",\"hidden\":\"512\",\"opt\":\"adam\",\"drop\":\"0.1\"}", 20, 30, 0.002);
	trial_add(ex, "val_loss", 2, "COMPLETED", 0.05,
		  "{\"lr\":\"0.01\",\"hidden\":\"256\",\"opt\":\"sgd\",\"drop\":\"0.3\"}", 20, 25, 0.05);
	best_set(ex, 1, 0.002);
	html = render(ex);
	curves = svg_of(html, "curves");
	assert_non_null(strstr(curves, ">val_loss (log)<"));
	assert_non_null(strstr(curves, ">0.01<"));     /* decade ticks */
	assert_non_null(strstr(curves, ">10<"));
	assert_non_null(strstr(curves, "grid minor"));
	assert_int_equal(count(curves, "<polyline"), 2);
	/* values spanning 2 decades or less stay linear */
	json_decref(ex);
	free(curves);
	free(html);
	ex = export_minimize();
	html = render(ex);
	assert_null(strstr(html, "(log)"));
	free(html);
	json_decref(ex);
}

static void test_categorical_and_escaping(void **state)
{
	json_t *ex = export_new("val_loss", "minimize",
				"[{\"name\":\"opt<b>\",\"kind\":\"values\",\"values\":[\"adam\",\"<script>x</script>\","
				"\"sgd\"]}, {\"name\":\"layers\",\"kind\":\"int_uniform\",\"min\":1,\"max\":8}]");
	char *html, *par;

	json_object_set_new(json_object_get(ex, "sweep"), "name", json_string("a&b \"q\" 'x'"));
	trial_add(ex, "val_loss", 1, "COMPLETED", 0.5, "{\"opt<b>\":\"<script>x</script>\",\"layers\":\"3\"}",
		  5, 2, 0.5);
	trial_add(ex, "val_loss", 2, "COMPLETED", 0.3, "{\"opt<b>\":\"sgd\",\"layers\":\"6\"}", 5, 2, 0.3);
	/* a value outside the declared list still gets its category */
	trial_add(ex, "val_loss", 3, "COMPLETED", 0.7, "{\"opt<b>\":\"lion\",\"layers\":\"2\"}", 5, 2, 0.7);
	/* a param no parameter declares gets an axis of its own */
	json_object_set_new(json_object_get(json_array_get(json_object_get(ex, "trials"), 0), "params"),
			    "extra", json_string("7"));
	best_set(ex, 2, 0.3);
	html = render(ex);
	par = svg_of(html, "parallel");
	assert_null(strstr(html, "<script>x"));
	assert_null(strstr(html, "opt<b>"));
	assert_non_null(strstr(html, "&lt;script&gt;x&lt;/script&gt;"));
	assert_non_null(strstr(par, ">opt&lt;b&gt;<"));
	assert_non_null(strstr(html, "a&amp;b &quot;q&quot; &#39;x&#39;"));
	assert_offline(html);
	/* categories evenly spaced: adam, <script>, sgd, lion */
	assert_non_null(strstr(par, ">adam<title>"));
	assert_non_null(strstr(par, ">sgd<title>"));
	assert_non_null(strstr(par, ">lion<title>"));
	assert_non_null(strstr(par, ">categorical<"));
	assert_non_null(strstr(par, ">int_uniform<"));
	assert_non_null(strstr(par, ">extra<"));
	/* trials 2 and 3 lack "extra": left out of the parallel plot, said so */
	assert_int_equal(count(par, "<polyline"), 1);
	assert_non_null(strstr(html, "2 left out"));
	free(par);
	free(html);
	json_decref(ex);
}

static void test_empty_and_no_metrics(void **state)
{
	json_t *ex = export_new("val_loss", "minimize", params_std);
	char *html = render(ex), *curves = svg_of(html, "curves"), *par = svg_of(html, "parallel");

	assert_int_equal(count(curves, "<polyline"), 0);
	assert_int_equal(count(par, "<polyline"), 0);
	assert_non_null(strstr(curves, "no metric reports yet"));
	assert_non_null(strstr(par, "no finished trials yet"));
	assert_non_null(strstr(html, "no trials yet"));
	assert_int_equal(first_row(html, "best"), -1);
	assert_offline(html);
	free(curves);
	free(par);
	free(html);

	/* trials without reports, or whose reports lack the metric */
	trial_add(ex, "val_loss", 1, "FAILED", NAN, "{}", 0, 1, 1);
	trial_add(ex, "other", 2, "COMPLETED", NAN, "{}", 4, 1, 0.5);
	trial_add(ex, "val_loss", 3, "RUNNING", NAN, "{\"lr\":\"0.01\"}", 1, 0.8, 0.8);
	html = render(ex);
	curves = svg_of(html, "curves");
	assert_int_equal(count(curves, "<polyline"), 1);     /* trial 3: one point, a dot */
	assert_non_null(strstr(html, "2 without reports yet"));
	assert_int_equal(first_row(html, "trials"), 1);
	free(curves);
	free(html);
	json_decref(ex);
}

static void test_progress_axis(void **state)
{
	json_t *ex = export_minimize();
	json_t *trials = json_object_get(ex, "trials"), *t, *m;
	size_t i, k;
	char *html;

	json_array_foreach(trials, i, t)
		json_array_foreach(json_object_get(t, "metrics"), k, m)
			json_object_del(m, "epoch");
	html = render(ex);
	assert_non_null(strstr(html, "val_loss by step</h2>"));
	free(html);
	json_array_foreach(trials, i, t)
		json_array_foreach(json_object_get(t, "metrics"), k, m)
			json_object_del(m, "step");
	html = render(ex);
	assert_non_null(strstr(html, "val_loss by report</h2>"));
	free(html);
	json_decref(ex);
}

static void test_deterministic(void **state)
{
	json_t *ex = export_minimize(), *copy;
	char *a = render(ex), *b = render(ex), *c, *text = json_dumps(ex, JSON_PRESERVE_ORDER);
	json_error_t e;

	assert_string_equal(a, b);
	copy = json_loads(text, 0, &e);
	c = render(copy);
	assert_string_equal(a, c);
	free(a);
	free(b);
	free(c);
	free(text);
	json_decref(copy);
	json_decref(ex);
}

static void test_size(void **state)
{
	json_t *ex = export_new("val_loss", "minimize", params_std);
	char *html, *curves;
	char params[200];

	for (int i = 1; i <= 200; i++) {
		double v = 0.05 + (i % 37) * 0.03;

		snprintf(params, sizeof(params),
			 "{\"lr\":\"%.4g\",\"hidden\":\"%d\",\"opt\":\"%s\",\"drop\":\"%.3f\"}",
			 0.0001 * pow(1000, (i % 17) / 16.0), 256 << (i % 3), i % 2 ? "adam" : "sgd",
			 (i % 11) / 22.0);
		trial_add(ex, "val_loss", i, i % 4 ? "COMPLETED" : "PRUNED", v, params, 30, 2.5, v);
	}
	best_set(ex, 1, 0.08);
	html = render(ex);
	curves = svg_of(html, "curves");
	assert_int_equal(count(curves, "<polyline"), 200);
	if (strlen(html) >= 300 * 1024)
		fail_msg("expected < 300 KiB for 200 trials x 30 points, got %zu bytes", strlen(html));
	free(curves);
	free(html);
	json_decref(ex);
}

static void test_malformed(void **state)
{
	static const struct {
		const char *json;
		const char *field;
	} cases[] = {
		{ "[]", "not a JSON object" },
		{ "{\"sweep\":{}}", "'protocol'" },
		{ "{\"protocol\":99,\"sweep\":{}}", "'protocol' is 99" },
		{ "{\"protocol\":0,\"sweep\":{}}", "'protocol' is 0" },
		{ "{\"protocol\":1}", "'sweep'" },
		{ "{\"protocol\":1,\"sweep\":{\"metric\":{}}}", "'sweep.id'" },
		{ "{\"protocol\":1,\"sweep\":{\"id\":\"s\",\"metric\":{\"goal\":\"minimize\"}}}",
		  "'sweep.metric.name'" },
		{ "{\"protocol\":1,\"sweep\":{\"id\":\"s\",\"metric\":{\"name\":\"l\",\"goal\":\"lower\"}}}",
		  "'sweep.metric.goal'" },
		{ "{\"protocol\":1,\"sweep\":{\"id\":\"s\",\"state\":\"RUNNING\","
		  "\"metric\":{\"name\":\"l\",\"goal\":\"minimize\"}}}", "'trials'" },
		{ "{\"protocol\":1,\"sweep\":{\"id\":\"s\",\"state\":\"RUNNING\","
		  "\"metric\":{\"name\":\"l\",\"goal\":\"minimize\"},\"parameters\":[{\"kind\":\"uniform\"}]},"
		  "\"trials\":[]}", "'sweep.parameters[0].name'" },
		{ "{\"protocol\":1,\"sweep\":{\"id\":\"s\",\"state\":\"RUNNING\","
		  "\"metric\":{\"name\":\"l\",\"goal\":\"minimize\"},\"parameters\":[{\"name\":\"x\","
		  "\"kind\":\"uniform\",\"min\":\"0\",\"max\":1}]},\"trials\":[]}",
		  "'sweep.parameters[0].min'" },
		{ "{\"protocol\":1,\"sweep\":{\"id\":\"s\",\"state\":\"RUNNING\","
		  "\"metric\":{\"name\":\"l\",\"goal\":\"minimize\"}},\"trials\":[{\"state\":\"RUNNING\"}]}",
		  "'trials[0].trial'" },
		{ "{\"protocol\":1,\"sweep\":{\"id\":\"s\",\"state\":\"RUNNING\","
		  "\"metric\":{\"name\":\"l\",\"goal\":\"minimize\"}},\"trials\":[{\"trial\":1,"
		  "\"state\":\"RUNNING\"},{\"trial\":2,\"state\":\"RUNNING\",\"metrics\":{}}]}",
		  "'trials[1].metrics'" },
		{ "{\"protocol\":1,\"sweep\":{\"id\":\"s\",\"state\":\"RUNNING\","
		  "\"metric\":{\"name\":\"l\",\"goal\":\"minimize\"}},\"trials\":[{\"trial\":1,"
		  "\"state\":\"RUNNING\",\"metrics\":[{\"l\":1},7]}]}", "'trials[0].metrics[1]'" },
		{ "{\"protocol\":1,\"sweep\":{\"id\":\"s\",\"state\":\"RUNNING\","
		  "\"metric\":{\"name\":\"l\",\"goal\":\"minimize\"}},\"trials\":[{\"trial\":1,"
		  "\"state\":\"COMPLETED\",\"value\":\"low\"}]}", "'trials[0].value'" },
		{ "{\"protocol\":1,\"sweep\":{\"id\":\"s\",\"state\":\"RUNNING\","
		  "\"metric\":{\"name\":\"l\",\"goal\":\"minimize\"}},\"trials\":[{\"trial\":1,"
		  "\"state\":\"COMPLETED\",\"params\":{\"lr\":[1]}}]}", "'trials[0].params.lr'" },
		{ "{\"protocol\":1,\"sweep\":{\"id\":\"s\",\"state\":\"RUNNING\","
		  "\"metric\":{\"name\":\"l\",\"goal\":\"minimize\"}},\"trials\":[{\"trial\":1,"
		  "\"state\":\"COMPLETED\"},{\"trial\":1,\"state\":\"COMPLETED\"}]}", "'trials[1].trial'" },
		{ "{\"protocol\":1,\"sweep\":{\"id\":\"s\",\"state\":\"RUNNING\","
		  "\"metric\":{\"name\":\"l\",\"goal\":\"minimize\"}},\"trials\":[],\"best\":{\"value\":1}}",
		  "'best.trial'" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct strbuf out = STRBUF_INIT, err = STRBUF_INIT;
		json_error_t e;
		json_t *j = json_loads(cases[i].json, 0, &e);

		if (!j)
			fail_msg("case %zu: bad test JSON: %s", i, e.text);
		if (sweep_report_html(j, &out, &err) != -1)
			fail_msg("case %zu: expected -1 for %s", i, cases[i].json);
		if (!strstr(err.buf, cases[i].field))
			fail_msg("case %zu: expected the message to name %s, got: %s", i, cases[i].field,
				 err.buf);
		assert_true(starts_with(err.buf, "sweep export: "));
		assert_null(strchr(err.buf, '\n'));
		strbuf_release(&out);
		strbuf_release(&err);
		json_decref(j);
	}
}

/* NaN-ish values: null, absent, "NaN" strings: no value, never a crash. */
static void test_nan_values(void **state)
{
	json_t *ex = export_minimize(), *t0 = json_array_get(json_object_get(ex, "trials"), 0);
	json_t *m0 = json_array_get(json_object_get(t0, "metrics"), 0);
	char *html;

	json_object_set_new(t0, "value", json_string("NaN"));
	json_object_set_new(m0, "val_loss", json_string("NaN"));
	json_object_del(json_array_get(json_object_get(ex, "trials"), 1), "value");
	json_object_set_new(ex, "best", json_null());
	html = render(ex);
	assert_non_null(strstr(html, "no finished trial yet"));
	assert_int_equal(first_row(html, "best"), 4);    /* 0.55 beats 1.30 */
	free(html);
	json_decref(ex);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_minimize),
		cmocka_unit_test(test_maximize),
		cmocka_unit_test(test_log_scale),
		cmocka_unit_test(test_categorical_and_escaping),
		cmocka_unit_test(test_empty_and_no_metrics),
		cmocka_unit_test(test_progress_axis),
		cmocka_unit_test(test_deterministic),
		cmocka_unit_test(test_size),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_nan_values),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
