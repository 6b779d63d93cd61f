/*
 * cmd-ps.c - `dtctl ps`: your queued and running jobs (Slurm-like columns;
 * --user NAME for another user's, --all for everyone's and the history) from
 * dtsched's job table (GET /v1/jobs: others' jobs come redacted, users.h).  One job in detail
 * is `dtctl show` (cmd-show.c).
 */
#include "builtin.h"
#include "setup.h"
#include "head.h"
#include "jobdir.h"
#include "json.h"
#include "log.h"
#include "parse-options.h"
#include "protocol.h"
#include "term.h"
#include "units.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>

static int is_final(const char *st)
{
	return strcmp(st, DT_JOB_PENDING) && strcmp(st, DT_JOB_RUNNING);
}

/* squeue's TIME: M:SS, H:MM:SS or D-HH:MM:SS */
static void fmt_time(char *buf, size_t len, long long ms)
{
	long long s = ms / 1000, d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;

	if (d)
		snprintf(buf, len, "%lld-%02lld:%02lld:%02lld", d, h, m, s % 60);
	else if (h)
		snprintf(buf, len, "%lld:%02lld:%02lld", h, m, s % 60);
	else
		snprintf(buf, len, "%lld:%02lld", m, s % 60);
}

static void nodelist(struct strbuf *sb, const json_t *job)
{
	json_t *p;
	size_t i;

	json_array_foreach(json_object_get(job, "placement"), i, p)
		strbuf_addf(sb, "%s%s", i ? "," : "", term_str(json_get_str(p, "node", "?")));
}

int cmd_ps(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl ps [--all] [--user <name>] [--json]", NULL };
	int all = 0, json = 0, code, shown = 0, color = dt_want_color(1);
	const char *user = NULL, *you;
	struct option opts[] = {
		OPT_BOOL('a', "all", &all, "every user's jobs, finished ones too (history)"),
		OPT_STRING('u', "user", &user, "name", "that user's jobs (default: yours)"),
		OPT_BOOL(0, "json", &json, "print the jobs as JSON"),
		OPT_END(),
	};
	json_t *reply, *jobs, *j, *out;
	size_t i;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (argc) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (json) {
		code = head_api("GET", DT_PATH_JOBS, NULL, &reply, NULL);
	} else {
		/* what the table prints, filtered by dtsched: a long queue is not sent whole */
		json_t *q = json_pack("{s:s?,s:b}", "user", user, "all", all);

		code = head_api("POST", DT_PATH_JOBLIST, q, &reply, NULL);
		json_decref(q);
	}
	if (code)
		return json_decref(reply), code;
	jobs = json_object_get(reply, "jobs");
	/* whose: --user's, everyone's with --all, else the caller's (docs/team.md) */
	you = json_get_str(reply, "you", NULL);
	if (!user && !all)
		user = you;
	out = json_array();
	/* oldest first, as dtsched lists them (docs/json.md, "Lists") */
	for (i = 0; i < json_array_size(jobs); i++) {
		j = json_array_get(jobs, i);
		if (user && strcmp(json_get_str(j, "user", ""), user))
			continue;
		if (all || !is_final(json_get_str(j, "state", "")))
			json_array_append(out, j);
	}
	if (json) {
		json_doc_print_key("jobs", out);
		json_decref(out);
		json_decref(reply);
		return 0;
	}
	printf("%-10s %-16s %-10s %-10s %10s %5s %5s  %s\n", "JOBID", "NAME", "USER", "STATE",
	       "TIME", "NODES", "RANKS", "NODELIST(REASON)");
	json_array_foreach(out, i, j) {
		const char *st = job_shown_state(j), *on = "", *off = "";
		struct strbuf where = STRBUF_INIT;
		char t[32];

		fmt_time(t, sizeof(t), json_get_int(j, "elapsed_ms", 0));
		if (!strcmp(json_get_str(j, "state", ""), DT_JOB_PENDING) ||
		    (json_get_str(j, "reason", NULL) && is_final(st) && strcmp(st, DT_JOB_COMPLETED)))
			strbuf_addf(&where, "(%s)", term_str(json_get_str(j, "reason", "queued")));
		else if (!strcmp(st, "STALLED")) {
			json_t *s0 = json_array_get(json_object_get(j, "stalled"), 0);

			nodelist(&where, j);
			strbuf_addf(&where, " (rank %lld on %s pid %lld silent %llds)",
				    json_get_int(s0, "rank", -1), term_str(json_get_str(s0, "node", "?")),
				    json_get_int(s0, "pid", 0), json_get_int(s0, "idle_ms", 0) / 1000);
		} else
			nodelist(&where, j);
		if (!strcmp(st, DT_JOB_RUNNING) &&
		    json_get_int(json_object_get(j, "slurm"), "job_id", 0))
			/* backend: slurm (docs/slurm-backend.md): the Slurm job beside ours */
			strbuf_addf(&where, " (slurm %lld)",
				    json_get_int(json_object_get(j, "slurm"), "job_id", 0));
		if (json_get_int(j, "log_lost_lines", 0) > 0)
			strbuf_addf(&where, " (log: %lld line%s lost)", json_get_int(j, "log_lost_lines", 0),
				    json_get_int(j, "log_lost_lines", 0) == 1 ? "" : "s");
		if (color) {
			on = !strcmp(st, DT_JOB_RUNNING) || !strcmp(st, DT_JOB_COMPLETED) ? "\033[32m" :
			     !strcmp(st, DT_JOB_PENDING) ? "\033[33m" : "\033[31m";
			off = "\033[0m";
		}
		printf("%-10s %-16.16s %-10.10s %s%-10s%s %10s %5lld %5lld  %s\n",
		       term_str(json_get_str(j, "id", "?")), term_str(json_get_str(j, "name", "?")),
		       term_str(json_get_str(j, "user", "")), on, term_str(st), off, t, json_get_int(j, "nodes", 0),
		       json_get_int(j, "world_size", 0), where.buf);
		strbuf_release(&where);
		shown++;
	}
	if (!shown)
		printf("(no %sjobs%s%s%s)\n", all ? "" : "queued or running ",
		       user ? " of " : "", user ? term_str(user) : "",
		       all ? "" : "; 'dtctl ps --all' shows finished ones and other users'");
	json_decref(out);
	json_decref(reply);
	return 0;
}
