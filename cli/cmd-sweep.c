/*
 * cmd-sweep.c - `dtctl sweep`: hyperparameter sweeps run by dtsched.
 *
 *   dtctl sweep sweep.yaml [--detach]     submit (POST /v1/sweeps) and follow
 *   dtctl sweep list | status | best | export | report | pause | resume | stop
 *
 * The sweep file is loaded and checked here first (lib/config: an error is
 * exit 2 and nothing is sent); dtsched runs the sweep (scheduler/sweeps.c),
 * so following it is only a view: Ctrl-C detaches and the sweep goes on.
 * The live view polls GET /v1/sweeps/<id> (the export JSON) twice a second:
 * on a terminal a redrawn table with a progress bar and ETA, otherwise one
 * line per trial state change and a progress line every 10 s.
 */
#include "builtin.h"
#include "config.h"
#include "head.h"
#include "image.h"
#include "setup.h"
#include "slurm.h"
#include "jobdir.h"
#include "json.h"
#include "log.h"
#include "parse-options.h"
#include "protocol.h"
#include "strbuf.h"
#include "sweep-report.h"
#include "term.h"
#include "units.h"
#include "usage.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLL_MS 500
#define PLAIN_PROGRESS_MS 10000

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* Over (a PAUSED trial may still be promoted and resume). */
static int trial_final(const char *st)
{
	return strcmp(st, DT_TRIAL_PENDING) && strcmp(st, DT_TRIAL_RUNNING) &&
	       strcmp(st, DT_TRIAL_PAUSED);
}

static int get_export(const char *id, json_t **out)
{
	return head_api_id("GET", DT_PATH_SWEEP_PREFIX, id, "", NULL, out, NULL);
}

static void fmt_value(char *buf, size_t len, const json_t *v)
{
	if (json_is_number(v))
		snprintf(buf, len, "%.6g", json_number_value(v));
	else
		snprintf(buf, len, "-");
}

static void params_line(struct strbuf *sb, const json_t *params)
{
	const char *k;
	json_t *v;
	int first = 1;

	json_object_foreach((json_t *)params, k, v) {
		strbuf_addf(sb, "%s%s=", first ? "" : " ", term_str(k));
		/* the exact values are in `sweep best` and the export; people read 6 digits */
		format_number_text_human(sb, term_str(json_string_value(v) ? json_string_value(v) : "?"));
		first = 0;
	}
}

/* "12/50 done, 6 running; ETA 3m10s" from the export. */
static void progress(struct strbuf *sb, const json_t *ex, int bar)
{
	const json_t *sw = json_object_get(ex, "sweep"), *trials = json_object_get(ex, "trials"), *t;
	long long max = json_get_int(sw, "max_trials", 0), done = 0, running = 0;
	long long created = dt_timestamp_parse(json_get_str(sw, "created_at", ""));
	long long now = dt_now_us();
	size_t i;

	json_array_foreach((json_t *)trials, i, t) {
		const char *st = json_get_str(t, "state", "");

		if (trial_final(st))
			done++;
		else if (!strcmp(st, DT_TRIAL_RUNNING))
			running++;
	}
	if (bar && max > 0) {
		int w = 30, fill = (int)(done * w / max);

		strbuf_addch(sb, '[');
		for (int k = 0; k < w; k++)
			strbuf_addstr(sb, k < fill ? "#" : "-");
		strbuf_addstr(sb, "] ");
	}
	strbuf_addf(sb, "%lld/%lld done, %lld running", done, max, running);
	if (done > 0 && done < max && created > 0 && now > created) {
		long long per = (now - created) / done;

		strbuf_addstr(sb, "; ETA ");
		format_duration_human(sb, per * (max - done) / 1000);
	}
}

/* The table: trial, parameters, state, metric, best so far (in trial order). */
static void render_table(struct strbuf *sb, const json_t *ex)
{
	const json_t *sw = json_object_get(ex, "sweep"), *trials = json_object_get(ex, "trials"), *t;
	const char *metric = json_get_str(json_object_get(sw, "metric"), "name", "metric");
	int maximize = !strcmp(json_get_str(json_object_get(sw, "metric"), "goal", ""), "maximize");
	double best = NAN;
	size_t i, pw = 10;

	json_array_foreach((json_t *)trials, i, t) {
		struct strbuf p = STRBUF_INIT;

		params_line(&p, json_object_get(t, "params"));
		if (p.len > pw)
			pw = p.len > 60 ? 60 : p.len;
		strbuf_release(&p);
	}
	strbuf_addf(sb, "%-5s  %-*s  %-9s  %-12s  %-12s\n", "TRIAL", (int)pw, "PARAMETERS", "STATE",
		    term_str(metric), "BEST");
	json_array_foreach((json_t *)trials, i, t) {
		struct strbuf p = STRBUF_INIT;
		const json_t *v = json_object_get(t, "value");
		const char *st = json_get_str(t, "state", "?");
		char val[32], bs[32];

		params_line(&p, json_object_get(t, "params"));
		if (p.len > 60) {
			strbuf_setlen(&p, 57);
			strbuf_addstr(&p, "...");
		}
		if (!strcmp(st, DT_TRIAL_COMPLETED) && json_is_number(v) &&
		    (isnan(best) || (maximize ? json_number_value(v) > best : json_number_value(v) < best)))
			best = json_number_value(v);
		if (json_is_true(json_object_get(t, "no_metric")))
			snprintf(val, sizeof(val), "no metric");
		else
			fmt_value(val, sizeof(val), v);
		if (isnan(best))
			snprintf(bs, sizeof(bs), "-");
		else
			snprintf(bs, sizeof(bs), "%.6g", best);
		strbuf_addf(sb, "%-5lld  %-*s  %-9s  %-12s  %-12s\n", json_get_int(t, "trial", 0),
			    (int)pw, p.buf, term_str(st), val, bs);
		strbuf_release(&p);
	}
	/* why the first failed trial failed, so a broken command shows at once */
	json_array_foreach((json_t *)trials, i, t) {
		if (strcmp(json_get_str(t, "state", ""), DT_TRIAL_FAILED))
			continue;
		strbuf_addf(sb, "first failure: trial %lld: %s\n", json_get_int(t, "trial", 0),
			    term_str(json_get_str(t, "reason", "no reason recorded")));
		break;
	}
}

/* ", pruned (no trial completed)" when the best trial is a pruned one */
static const char *best_pruned_note(const json_t *b)
{
	return !strcmp(json_get_str(b, "state", DT_TRIAL_COMPLETED), DT_TRIAL_PRUNED) ?
	       ", pruned (no trial completed)" : "";
}

static void print_best_line(FILE *f, const json_t *ex)
{
	const json_t *b = json_object_get(ex, "best"), *sw = json_object_get(ex, "sweep");
	struct strbuf p = STRBUF_INIT;

	if (!json_is_object(b)) {
		fprintf(f, "best: none yet\n");
		return;
	}
	params_line(&p, json_object_get(b, "params"));
	fprintf(f, "best: trial %lld, %s = %.6g%s (%s)\n", json_get_int(b, "trial", 0),
		term_str(json_get_str(json_object_get(sw, "metric"), "name", "metric")),
		json_get_real(b, "value", NAN), best_pruned_note(b), p.buf);
	strbuf_release(&p);
}

static int sweep_exit_code(const json_t *ex)
{
	const char *st = json_get_str(json_object_get(ex, "sweep"), "state", "");

	return !strcmp(st, DT_SWEEP_COMPLETED) ? 0 : DT_EXIT_FAIL;
}

static int sweep_ended(const json_t *ex)
{
	const char *st = json_get_str(json_object_get(ex, "sweep"), "state", "");

	return strcmp(st, DT_SWEEP_RUNNING) && strcmp(st, DT_SWEEP_PAUSED);
}

/* Follow a sweep until it ends or Ctrl-C (detach). */
static int follow(const char *id)
{
	int tty = isatty(1) && isatty(2), lines = 0, code = 0;
	long long last_plain = 0;
	json_t *seen = json_object(), *ex = NULL;
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigint;
	sigaction(SIGINT, &sa, NULL);
	for (;;) {
		json_t *t;
		size_t i;

		json_decref(ex);
		ex = NULL;
		if (interrupted)
			break;
		code = get_export(id, &ex);
		if (code && code != DT_EXIT_UNREACH)
			break;
		if (code == DT_EXIT_UNREACH) {
			/* dtsched restarting: it is started again on the next request */
			usleep(1000 * 1000);
			continue;
		}
		if (tty) {
			struct strbuf sb = STRBUF_INIT;

			if (lines)
				printf("\033[%dA\033[J", lines);
			strbuf_addf(&sb, "sweep %s (%s) %s\n",
				    term_str(json_get_str(json_object_get(ex, "sweep"), "id", id)),
				    term_str(json_get_str(json_object_get(ex, "sweep"), "name", "")),
				    term_str(json_get_str(json_object_get(ex, "sweep"), "state", "?")));
			render_table(&sb, ex);
			progress(&sb, ex, 1);
			strbuf_addch(&sb, '\n');
			fputs(sb.buf, stdout);
			fflush(stdout);
			lines = 0;
			for (size_t k = 0; k < sb.len; k++)
				lines += sb.buf[k] == '\n';
			strbuf_release(&sb);
		} else {
			json_array_foreach(json_object_get(ex, "trials"), i, t) {
				char key[32], val[32];
				const char *st = json_get_str(t, "state", "?");
				struct strbuf p = STRBUF_INIT;

				snprintf(key, sizeof(key), "%lld", json_get_int(t, "trial", 0));
				if (!strcmp(json_get_str(seen, key, ""), st))
					continue;
				json_object_set_new(seen, key, json_string(st));
				params_line(&p, json_object_get(t, "params"));
				if (json_is_true(json_object_get(t, "no_metric")))
					snprintf(val, sizeof(val), "no metric");
				else
					fmt_value(val, sizeof(val), json_object_get(t, "value"));
				printf("trial %s %s %s (%s = %s)%s%s\n", key, term_str(st), p.buf,
				       term_str(json_get_str(json_object_get(json_object_get(ex, "sweep"),
						    "metric"), "name", "metric")), val,
				       json_get_str(t, "job_id", NULL) ? " job " : "",
				       term_str(json_get_str(t, "job_id", "")));
				if (!strcmp(st, DT_TRIAL_FAILED) && json_get_str(t, "reason", NULL))
					printf("  %s\n", term_str(json_get_str(t, "reason", "")));
				strbuf_release(&p);
			}
			if (dt_mono_ms() - last_plain >= PLAIN_PROGRESS_MS || sweep_ended(ex)) {
				struct strbuf sb = STRBUF_INIT;

				last_plain = dt_mono_ms();
				progress(&sb, ex, 0);
				printf("progress: %s\n", sb.buf);
				strbuf_release(&sb);
			}
			fflush(stdout);
		}
		if (sweep_ended(ex)) {
			const char *reason = json_get_str(json_object_get(ex, "sweep"), "reason", NULL);

			fprintf(stderr, "dtctl: sweep %s %s%s%s\n", term_str(id),
				term_str(json_get_str(json_object_get(ex, "sweep"), "state", "?")),
				reason ? ": " : "", reason ? term_str(reason) : "");
			print_best_line(stdout, ex);
			code = sweep_exit_code(ex);
			break;
		}
		for (int k = 0; k < POLL_MS / 50 && !interrupted; k++)
			usleep(50 * 1000);
	}
	if (interrupted) {
		fprintf(stderr, "\ndtctl: detached; sweep %s keeps running in dtsched "
			"('dtctl sweep status %s', 'dtctl sweep stop %s')\n", term_str(id), term_str(id),
			term_str(id));
		code = 0;
	}
	json_decref(ex);
	json_decref(seen);
	return code;
}

/* ------------------------------------------------------------ submit */

static int submit(const char *file, int detach, int json, const char *name)
{
	struct sweep_config cfg;
	struct strbuf err = STRBUF_INIT, nm = STRBUF_INIT;
	json_t *spec, *params, *req, *reply = NULL;
	int code, status;

	memset(&cfg, 0, sizeof(cfg));
	if (sweep_config_load(&cfg, file, &err) < 0) {
		error("%s", err.buf);
		fprintf(stderr, "hint: nothing was started; 'dtctl validate %s' checks the file\n",
			term_str(file));
		strbuf_release(&err);
		return DT_EXIT_USAGE;
	}
	/* every trial runs the image submitted now (its digest), loaded once per node */
	if ((code = image_resolve(&cfg.job, the_cluster.shared_dir))) {
		sweep_config_release(&cfg);
		return code;
	}
	spec = sweep_config_to_json(&cfg);
	json_object_del(spec, "path");
	json_object_del(json_object_get(spec, "job"), "path");
	/* values exactly as written ("1e-3" stays "1e-3"), not re-typed */
	params = json_object_get(spec, "parameters");
	for (size_t i = 0; i < cfg.nr_params; i++) {
		const struct sweep_param *p = &cfg.params[i];
		json_t *jp = json_object_get(params, p->name), *vals;

		if (!jp || (p->kind != PARAM_VALUE && p->kind != PARAM_VALUES))
			continue;
		vals = json_strvec(&p->values);
		if (p->kind == PARAM_VALUE) {
			json_object_set_new(jp, "value", json_string(p->values.v[0]));
			json_decref(vals);
		} else {
			json_object_set_new(jp, "values", vals);
		}
	}
	if (name || cfg.name) {
		strbuf_addstr(&nm, name ? name : cfg.name);
	} else {
		const char *b = strrchr(file, '/');

		strbuf_addstr(&nm, b ? b + 1 : file);
		if (strrchr(nm.buf, '.') && strrchr(nm.buf, '.') != nm.buf)
			strbuf_setlen(&nm, (size_t)(strrchr(nm.buf, '.') - nm.buf));
	}
	{
		/* the trials start here where it exists on their node, as `dtctl run`'s ranks */
		char *cwd = getcwd(NULL, 0);

		req = json_pack("{s:o,s:s,s:s,s:s,s:s?}", "sweep", spec, "shared_dir",
				the_cluster.shared_dir, "user", cli_whoami(), "name", nm.buf,
				"submit_dir", cwd);
		free(cwd);
	}
	code = head_api("POST", DT_PATH_SWEEPS, req, &reply, &status);
	json_decref(req);
	if (code) {
		if (status == 400 || status == 422)
			fprintf(stderr, "hint: nothing was started\n");
		goto out;
	}
	{
		const json_t *sw = json_object_get(reply, "sweep");
		char *id = xstrdup(json_get_str(sw, "id", "?"));

		if (detach) {
			if (json)
				json_doc_print(reply);
			else
				printf("%s\n", term_str(id));
		} else {
			long long max = json_get_int(sw, "max_trials", 0);

			fprintf(stderr, "dtctl: sweep %s submitted (%s, %s, %lld %s); Ctrl-C detaches\n",
				term_str(id), term_str(json_get_str(sw, "name", "?")),
				term_str(json_get_str(sw, "method", "?")), max, plural(max, "trial", "trials"));
			code = follow(id);
		}
		free(id);
	}
out:
	json_decref(reply);
	sweep_config_release(&cfg);
	strbuf_release(&err);
	strbuf_release(&nm);
	return code;
}

/* ------------------------------------------------------------ views */

static int cmd_list(int json)
{
	json_t *reply = NULL, *sw;
	size_t i;
	int code = head_api("GET", DT_PATH_SWEEPS, NULL, &reply, NULL);

	if (code)
		return json_decref(reply), code;
	if (json) {
		json_doc_print(reply);
	} else {
		printf("%-9s  %-16s  %-7s  %-10s  %-8s  %s\n", "SWEEP", "NAME", "METHOD", "STATE",
		       "TRIALS", "CREATED");
		json_array_foreach(json_object_get(reply, "sweeps"), i, sw) {
			char tr[32];

			snprintf(tr, sizeof(tr), "%lld/%lld", json_get_int(sw, "trials_started", 0),
				 json_get_int(sw, "max_trials", 0));
			printf("%-9s  %-16s  %-7s  %-10s  %-8s  %s\n", term_str(json_get_str(sw, "id", "?")),
			       term_str(json_get_str(sw, "name", "?")),
			       term_str(json_get_str(sw, "method", "?")),
			       term_str(json_get_str(sw, "state", "?")), tr,
			       term_str(json_get_str(sw, "created_at", "")));
		}
	}
	json_decref(reply);
	return 0;
}

static int cmd_status(const char *id, int json)
{
	json_t *ex = NULL;
	int code = get_export(id, &ex);
	struct strbuf sb = STRBUF_INIT;
	const json_t *sw;

	if (code)
		return json_decref(ex), code;
	json_object_del(ex, "protocol");
	if (json) {
		json_object_set_new(ex, "protocol", json_integer(DT_PROTOCOL_VERSION));
		json_doc_print(ex);
		json_decref(ex);
		return 0;
	}
	sw = json_object_get(ex, "sweep");
	printf("sweep %s (%s): %s, %s search, %s %s\n", term_str(json_get_str(sw, "id", "?")),
	       term_str(json_get_str(sw, "name", "?")), term_str(json_get_str(sw, "state", "?")),
	       term_str(json_get_str(sw, "method", "?")),
	       json_get_str(json_object_get(sw, "metric"), "name", NULL) ?
	       term_str(json_get_str(json_object_get(sw, "metric"), "goal", "?")) : "no",
	       term_str(json_get_str(json_object_get(sw, "metric"), "name", "metric")));
	if (json_get_str(sw, "reason", NULL))
		printf("reason: %s\n", term_str(json_get_str(sw, "reason", "")));
	render_table(&sb, ex);
	fputs(sb.buf, stdout);
	strbuf_reset(&sb);
	progress(&sb, ex, 0);
	printf("%s\n", sb.buf);
	{
		/* ASHA's rungs: "rungs: at 1: 12 reached, 5 went on; at 3: 5 reached, ..." */
		const char *mode = json_get_str(sw, "asha_mode", NULL);
		size_t k;
		json_t *r;

		if (mode)
			printf("ASHA: %s\n", !strcmp(mode, "promote") ?
			       "promote (checkpoint: true): a trial pauses at each rung and "
			       "resumes from its checkpoint when in the top 1/eta there" :
			       "stop: a trial not in the top 1/eta at a rung is pruned (grace for "
			       "the first eta there and the best)");

		json_array_foreach(json_object_get(sw, "rungs"), k, r) {
			struct strbuf v = STRBUF_INIT;

			format_number_human(&v, json_number_value(json_object_get(r, "resource")));
			printf("%sat %s: %lld reached, %lld went on", k ? "; " : "rungs: ", v.buf,
			       json_get_int(r, "reached", 0), json_get_int(r, "went_on", 0));
			strbuf_release(&v);
		}
		if (json_array_size(json_object_get(sw, "rungs")))
			printf("\n");
	}
	print_best_line(stdout, ex);
	strbuf_release(&sb);
	json_decref(ex);
	return 0;
}

static int cmd_best(const char *id, int json)
{
	json_t *ex = NULL, *b, *v;
	int code = get_export(id, &ex);
	const char *k;
	struct strbuf sb = STRBUF_INIT;

	if (code)
		return json_decref(ex), code;
	b = json_object_get(ex, "best");
	if (!json_is_object(b)) {
		struct strbuf msg = STRBUF_INIT;

		strbuf_addf(&msg, "sweep %s has no trial with a metric yet", id);
		if (json)
			json_error_print(msg.buf, DT_EXIT_FAIL);
		else
			error("%s", msg.buf);
		strbuf_release(&msg);
		json_decref(ex);
		return DT_EXIT_FAIL;
	}
	if (json) {
		json_t *doc = json_pack("{s:O,s:O}", "sweep", json_object_get(ex, "sweep"), "best", b);

		json_doc_print(doc);
		json_decref(doc);
		json_decref(ex);
		return 0;
	}
	/* the header is for reading; the parameters below are YAML, exact (escaped by its rules) */
	strbuf_addf(&sb, "# sweep %s (%s): best trial %lld, %s = %.6g%s\n",
		    term_str(json_get_str(json_object_get(ex, "sweep"), "id", "?")),
		    term_str(json_get_str(json_object_get(ex, "sweep"), "name", "?")),
		    json_get_int(b, "trial", 0),
		    term_str(json_get_str(json_object_get(json_object_get(ex, "sweep"), "metric"),
					  "name", "?")),
		    json_get_real(b, "value", NAN), best_pruned_note(b));
	json_object_foreach(json_object_get(b, "params"), k, v) {
		yaml_append_scalar(&sb, k, 0);
		strbuf_addstr(&sb, ": ");
		yaml_append_scalar(&sb, json_string_value(v) ? json_string_value(v) : "", 1);
		strbuf_addch(&sb, '\n');
	}
	fputs(sb.buf, stdout);
	strbuf_release(&sb);
	json_decref(ex);
	return 0;
}

static void csv_field(struct strbuf *sb, const char *v)
{
	if (!strpbrk(v, ",\"\n\r")) {
		strbuf_addstr(sb, v);
		return;
	}
	strbuf_addch(sb, '"');
	for (; *v; v++) {
		if (*v == '"')
			strbuf_addch(sb, '"');
		strbuf_addch(sb, *v);
	}
	strbuf_addch(sb, '"');
}

static int sweep_export(const char *id, int csv)
{
	json_t *ex = NULL, *t, *sw, *p;
	int code = get_export(id, &ex);
	struct strbuf sb = STRBUF_INIT;
	size_t i, k;

	if (code)
		return json_decref(ex), code;
	if (!csv) {
		json_t *o = json_object();

		json_object_set_new(o, "protocol", json_integer(DT_PROTOCOL_VERSION));
		json_object_set(o, "sweep", json_object_get(ex, "sweep"));
		json_object_set(o, "trials", json_object_get(ex, "trials"));
		json_object_set(o, "best", json_object_get(ex, "best"));
		json_doc_print(o);
		json_decref(o);
		json_decref(ex);
		return 0;
	}
	sw = json_object_get(ex, "sweep");
	strbuf_addstr(&sb, "trial,job_id,state,");
	csv_field(&sb, json_get_str(json_object_get(sw, "metric"), "name", "value"));
	strbuf_addstr(&sb, ",no_metric,resource");
	json_array_foreach(json_object_get(sw, "parameters"), k, p) {
		strbuf_addch(&sb, ',');
		csv_field(&sb, json_get_str(p, "name", "?"));
	}
	strbuf_addstr(&sb, ",created_at,ended_at\n");
	json_array_foreach(json_object_get(ex, "trials"), i, t) {
		const json_t *v = json_object_get(t, "value"), *r = json_object_get(t, "resource");

		strbuf_addf(&sb, "%lld,", json_get_int(t, "trial", 0));
		csv_field(&sb, json_get_str(t, "job_id", ""));
		strbuf_addch(&sb, ',');
		csv_field(&sb, json_get_str(t, "state", ""));
		strbuf_addch(&sb, ',');
		if (json_is_number(v))
			format_number_exact(&sb, json_number_value(v));
		strbuf_addf(&sb, ",%s,", json_is_true(json_object_get(t, "no_metric")) ? "true" : "false");
		if (json_is_number(r))
			format_number_exact(&sb, json_number_value(r));
		json_array_foreach(json_object_get(sw, "parameters"), k, p) {
			strbuf_addch(&sb, ',');
			csv_field(&sb, json_get_str(json_object_get(t, "params"), json_get_str(p, "name", ""), ""));
		}
		strbuf_addch(&sb, ',');
		csv_field(&sb, json_get_str(t, "created_at", ""));
		strbuf_addch(&sb, ',');
		csv_field(&sb, json_get_str(t, "ended_at", ""));
		strbuf_addch(&sb, '\n');
	}
	if (isatty(1)) {
		/*
		 * CSV is for files and programs, so its bytes are exact; on a
		 * terminal it is read by a person, so it is made safe (as ls does
		 * with file names).  Quoted fields keep their line breaks.
		 */
		struct strbuf safe = STRBUF_INIT;

		term_sanitize(&safe, sb.buf, sb.len, TERM_KEEP_NL);
		strbuf_release(&sb);
		sb = safe;
	}
	fputs(sb.buf, stdout);
	strbuf_release(&sb);
	json_decref(ex);
	return 0;
}

static int cmd_report(const char *id, const char *out)
{
	json_t *ex = NULL;
	int code = get_export(id, &ex);
	struct strbuf html = STRBUF_INIT, err = STRBUF_INIT;

	if (code)
		return json_decref(ex), code;
	json_object_set_new(ex, "protocol", json_integer(DT_PROTOCOL_VERSION));
	if (sweep_report_html(ex, &html, &err) < 0) {
		error("cannot make the report of sweep %s: %s", id, err.buf);
		code = DT_EXIT_FAIL;
	} else if (write_file_atomic(out, html.buf, html.len, 0644) < 0) {
		error("cannot write '%s': %s", out, strerror(errno));
		code = DT_EXIT_FAIL;
	} else {
		fprintf(stderr, "dtctl: report of sweep %s written to %s\n", term_str(id), term_str(out));
	}
	strbuf_release(&html);
	strbuf_release(&err);
	json_decref(ex);
	return code;
}

static int cmd_action(const char *id, const char *suffix)
{
	json_t *reply = NULL, *body = json_object();
	int code;

	code = head_api_id("POST", DT_PATH_SWEEP_PREFIX, id, suffix, body, &reply, NULL);
	json_decref(body);
	if (!code) {
		const json_t *sw = json_object_get(reply, "sweep");

		printf("sweep %s %s\n", term_str(json_get_str(sw, "id", id)),
		       term_str(json_get_str(sw, "state", "?")));
	}
	json_decref(reply);
	return code;
}

int cmd_sweep(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl sweep [--detach] [--json] [--name NAME] <sweep.yaml>",
		"dtctl sweep list [--json]",
		"dtctl sweep status [--json] <sweep>",
		"dtctl sweep best [--json] <sweep>",
		"dtctl sweep export (--csv | --json) <sweep>",
		"dtctl sweep report -o <report.html> <sweep>",
		"dtctl sweep (pause | resume | stop) <sweep>",
		"",
		"Run a hyperparameter sweep (W&B sweep schema) on the cluster's free slots.",
		"<sweep> is a sweep id (s-000001) or name.  Ctrl-C detaches; the sweep goes on.",
		NULL,
	};
	int detach = 0, json = 0, csv = 0, nargs;
	const char *name = NULL, *out = NULL, *sub = NULL;
	int code;
	struct option opts[] = {
		OPT_BOOL('d', "detach", &detach, "print the sweep id and return"),
		OPT_BOOL(0, "json", &json, "machine output"),
		OPT_BOOL(0, "csv", &csv, "export: CSV (one row per trial)"),
		OPT_STRING(0, "name", &name, "name", "sweep name (default: name: in the file, else the file's name)"),
		OPT_STRING('o', "output", &out, "file", "report: the HTML file to write"),
		OPT_BOOL(0, "in-allocation", &slurm_in_allocation_opt,
			 "inside a Slurm allocation: head + agents on its nodes (default with $SLURM_JOB_ID)"),
		OPT_END(),
	};
	static const char *const subs[] = { "list", "status", "best", "export", "report", "pause",
					    "resume", "stop" };

	if (argc >= 2)
		for (size_t i = 0; i < ARRAY_SIZE(subs); i++)
			if (!strcmp(argv[1], subs[i])) {
				sub = subs[i];
				argc--;
				argv++;
				break;
			}
	nargs = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	/* submitting starts dtsched when needed; the other subcommands only read or steer */
	if ((code = cluster_setup(sub ? NEED_HEAD : NEED_SHARED | NEED_HEAD | START_HEAD)))
		return code;
	if (!sub) {
		if (nargs != 1) {
			usage_with_options(usage, opts, 1);
			return DT_EXIT_USAGE;
		}
		if (detach && slurm_session_active())
			return error("--detach inside a Slurm allocation: the head there lives only "
				     "as long as this dtctl (docs/slurm.md)"), DT_EXIT_USAGE;
		return submit(argv[0], detach, json, name);
	}
	if (!strcmp(sub, "list")) {
		if (nargs) {
			usage_with_options(usage, opts, 1);
			return DT_EXIT_USAGE;
		}
		return cmd_list(json);
	}
	if (nargs != 1) {
		error("'dtctl sweep %s' needs one sweep id or name", sub);
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (!strcmp(sub, "status"))
		return cmd_status(argv[0], json);
	if (!strcmp(sub, "best"))
		return cmd_best(argv[0], json);
	if (!strcmp(sub, "export")) {
		if (csv == json)
			return error("export needs exactly one of --csv and --json"), DT_EXIT_USAGE;
		return sweep_export(argv[0], csv);
	}
	if (!strcmp(sub, "report")) {
		if (!out)
			return error("report needs -o <report.html>"), DT_EXIT_USAGE;
		return cmd_report(argv[0], out);
	}
	if (!strcmp(sub, "pause"))
		return cmd_action(argv[0], DT_PATH_PAUSE_SUFFIX);
	if (!strcmp(sub, "resume"))
		return cmd_action(argv[0], DT_PATH_RESUME_SUFFIX);
	return cmd_action(argv[0], DT_PATH_STOP_SUFFIX);
}
