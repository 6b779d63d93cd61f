/*
 * cmd-acct.c - `dtctl acct`: the accounts of ended jobs, like Slurm's sacct
 * and sreport: each job's user, project, shape, nodes, times, final state
 * and GPU-hours used and lost, filtered by user, project, state and time,
 * with totals per user and project (--totals: only those).  From dtsched's
 * acct table (POST /v1/acct, scheduler/acct.c); --json and --csv for scripts.
 */
#include "builtin.h"
#include "head.h"
#include "jobdir.h"
#include "json.h"
#include "log.h"
#include "parse-options.h"
#include "protocol.h"
#include "setup.h"
#include "term.h"
#include "units.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>

/* --since/--until: a timestamp (2026-11-28T00:00:00Z, or a date), or a duration ago (7d) */
static int parse_when(const char *opt, const char *v, long long *us)
{
	struct strbuf t = STRBUF_INIT;
	long long ms;

	*us = 0;
	if (!v)
		return 0;
	if (parse_duration_ms(v, &ms) == 0 && ms >= 0) {
		*us = dt_now_us() - ms * 1000;
		return 0;
	}
	strbuf_addstr(&t, v);
	if (t.len == 10)
		strbuf_addstr(&t, "T00:00:00Z");   /* a date: its midnight, UTC */
	*us = dt_timestamp_parse(t.buf);
	strbuf_release(&t);
	if (*us > 0)
		return 0;
	return error("--%s '%s': expected a time (2026-11-28, 2026-11-28T12:00:00Z) or a "
		     "duration ago (90m, 7d)", opt, v);
}

static void print_csv(const json_t *jobs)
{
	static const char *const cols[] = { "id", "user", "project", "name", "state", "nodes",
					    "gpus", "cpu_slots", "node_list", "submitted_at",
					    "started_at", "ended_at", "attempts", "gpu_hours",
					    "gpu_hours_lost", "cpu_slot_hours", NULL };
	struct strbuf sb = STRBUF_INIT;
	json_t *r;
	size_t i;

	for (int c = 0; cols[c]; c++)
		strbuf_addf(&sb, "%s%s", c ? "," : "", cols[c]);
	strbuf_addch(&sb, '\n');
	json_array_foreach(jobs, i, r) {
		for (int c = 0; cols[c]; c++) {
			json_t *v = json_object_get(r, cols[c]);

			if (c)
				strbuf_addch(&sb, ',');
			if (json_is_integer(v))
				strbuf_addf(&sb, "%lld", (long long)json_integer_value(v));
			else if (json_is_real(v))
				strbuf_addf(&sb, "%.6f", json_real_value(v));
			else if (json_is_string(v))   /* names are anyone's words */
				strbuf_addcsv_text(&sb, json_string_value(v));
		}
		strbuf_addch(&sb, '\n');
	}
	fputs(sb.buf, stdout);
	strbuf_release(&sb);
}

static void print_totals(const char *what, const json_t *by)
{
	const char *name;
	json_t *t;

	json_object_foreach((json_t *)by, name, t)
		printf("%-8s %-16.16s %6lld %12.3f %12.3f %14.3f\n", what, term_str(name),
		       json_get_int(t, "jobs", 0), json_number_value(json_object_get(t, "gpu_hours")),
		       json_number_value(json_object_get(t, "gpu_hours_lost")),
		       json_number_value(json_object_get(t, "cpu_slot_hours")));
}

int cmd_acct(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl acct [--user U] [--project P] [--state S] [--since T] [--until T] "
		"[--totals] [--json | --csv]", NULL };
	const char *user = NULL, *project = NULL, *state = NULL, *since = NULL, *until = NULL;
	int json = 0, csv = 0, totals_only = 0, code;
	struct option opts[] = {
		OPT_STRING('u', "user", &user, "user", "only this user's jobs"),
		OPT_STRING('A', "project", &project, "project", "only this project's (account's) jobs"),
		OPT_STRING(0, "state", &state, "state", "only jobs that ended so (COMPLETED, FAILED, "
			   "CANCELLED, TIMEOUT, NODE_FAIL)"),
		OPT_STRING('S', "since", &since, "time", "jobs that ended since (2026-11-28, "
			   "2026-11-28T12:00:00Z, or a duration ago: 7d)"),
		OPT_STRING('E', "until", &until, "time", "... and before"),
		OPT_BOOL(0, "totals", &totals_only, "only the totals per user and project (sreport)"),
		OPT_BOOL(0, "json", &json, "print the jobs and totals as JSON"),
		OPT_BOOL(0, "csv", &csv, "print the jobs as CSV"),
		OPT_END(),
	};
	long long since_us, until_us;
	json_t *body, *reply = NULL, *jobs, *totals, *r;
	size_t i;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (argc || (json && csv)) {
		if (json && csv)
			error("--json and --csv cannot be used together");
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (parse_when("since", since, &since_us) < 0 || parse_when("until", until, &until_us) < 0)
		return DT_EXIT_USAGE;
	if (state && !job_state_is_final(state)) {
		error("--state '%s': expected one of COMPLETED, FAILED, CANCELLED, TIMEOUT, "
		      "NODE_FAIL", state);
		return DT_EXIT_USAGE;
	}
	body = json_pack("{s:s?,s:s?,s:s?,s:I,s:I}", "user", user, "project", project, "state",
			 state, "since_us", (json_int_t)since_us, "until_us", (json_int_t)until_us);
	code = head_api("POST", DT_PATH_ACCT, body, &reply, NULL);
	json_decref(body);
	if (code)
		return json_decref(reply), code;
	jobs = json_object_get(reply, "jobs");
	totals = json_object_get(reply, "totals");
	if (json) {
		json_t *o = json_pack("{s:O,s:O}", "jobs", jobs, "totals", totals);

		if (totals_only)
			json_object_set_new(o, "jobs", json_array());
		json_doc_print(o);
		json_decref(o);
	} else if (csv) {
		print_csv(jobs);
	} else {
		if (!totals_only) {
			printf("%-10s %-10s %-12s %-14s %-10s %5s %5s %12s %10s %10s\n", "JOBID", "USER",
			       "PROJECT", "NAME", "STATE", "NODES", "GPUS", "ELAPSED", "GPU-H",
			       "LOST-H");
			json_array_foreach(jobs, i, r) {
				long long s0 = dt_timestamp_parse(json_get_str(r, "started_at", ""));
				long long e0 = dt_timestamp_parse(json_get_str(r, "ended_at", ""));
				struct strbuf el = STRBUF_INIT;

				format_duration_human(&el, s0 > 0 && e0 > s0 ? (e0 - s0) / 1000 : 0);
				printf("%-10s %-10.10s %-12.12s %-14.14s %-10s %5lld %5lld %12s %10.3f "
				       "%10.3f\n", term_str(json_get_str(r, "id", "?")),
				       term_str(json_get_str(r, "user", "")),
				       term_str(json_get_str(r, "project", "")),
				       term_str(json_get_str(r, "name", "")),
				       term_str(json_get_str(r, "state", "")), json_get_int(r, "nodes", 0),
				       json_get_int(r, "gpus", 0), el.buf,
				       json_number_value(json_object_get(r, "gpu_hours")),
				       json_number_value(json_object_get(r, "gpu_hours_lost")));
				strbuf_release(&el);
			}
			printf("\n");
		}
		printf("%-8s %-16s %6s %12s %12s %14s\n", "TOTAL", "NAME", "JOBS", "GPU-HOURS",
		       "LOST-GPU-H", "CPU-SLOT-H");
		print_totals("user", json_object_get(totals, "users"));
		print_totals("project", json_object_get(totals, "projects"));
		{
			json_t *all = json_object_get(totals, "all");

			printf("%-8s %-16s %6lld %12.3f %12.3f %14.3f\n", "all", "",
			       json_get_int(all, "jobs", 0),
			       json_number_value(json_object_get(all, "gpu_hours")),
			       json_number_value(json_object_get(all, "gpu_hours_lost")),
			       json_number_value(json_object_get(all, "cpu_slot_hours")));
		}
	}
	json_decref(reply);
	return 0;
}
