/*
 * cmd-ps.c - `dtctl ps` (queued and running jobs, Slurm-like columns; --all
 * for history), `dtctl show JOB` (placement, state history, per-rank exit
 * codes and log paths) and `dtctl cancel JOB...`, all from dtsched's job
 * table (GET /v1/jobs, GET /v1/jobs/<id>, POST /v1/jobs/<id>/cancel).
 */
#include "builtin.h"
#include "setup.h"
#include "head.h"
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

static const char *shown_state(const json_t *j)
{
	if (!strcmp(json_get_str(j, "state", ""), DT_JOB_RUNNING) &&
	    json_array_size(json_object_get(j, "stalled")))
		return "STALLED";
	return json_get_str(j, "state", "?");
}

int cmd_ps(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl ps [--all] [--json]", NULL };
	int all = 0, json = 0, code, shown = 0, color = dt_want_color(1);
	struct option opts[] = {
		OPT_BOOL('a', "all", &all, "finished jobs too (history)"),
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
	if ((code = head_api("GET", DT_PATH_JOBS, NULL, &reply, NULL)))
		return json_decref(reply), code;
	jobs = json_object_get(reply, "jobs");
	out = json_array();
	/* oldest first, like squeue */
	for (i = json_array_size(jobs); i > 0; i--) {
		j = json_array_get(jobs, i - 1);
		if (all || !is_final(json_get_str(j, "state", "")))
			json_array_append(out, j);
	}
	if (json) {
		json_t *o = json_pack("{s:o}", "jobs", out);

		json_doc_print(o);
		json_decref(o);
		json_decref(reply);
		return 0;
	}
	printf("%-10s %-16s %-10s %-10s %10s %5s %5s  %s\n", "JOBID", "NAME", "USER", "STATE",
	       "TIME", "NODES", "RANKS", "NODELIST(REASON)");
	json_array_foreach(out, i, j) {
		const char *st = shown_state(j), *on = "", *off = "";
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
		printf("(no %sjobs%s)\n", all ? "" : "queued or running ",
		       all ? "" : "; 'dtctl ps --all' shows finished ones");
	json_decref(out);
	json_decref(reply);
	return 0;
}

int cmd_show(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl show [--json] <job>", NULL };
	int json = 0, code;
	struct option opts[] = {
		OPT_BOOL(0, "json", &json, "print the job as JSON"),
		OPT_END(),
	};
	struct strbuf path = STRBUF_INIT, d = STRBUF_INIT;
	json_t *reply, *j, *x, *spec;
	size_t i;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	if (argc != 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	strbuf_addf(&path, "%s%s", DT_PATH_JOB_PREFIX, argv[0]);
	code = head_api("GET", path.buf, NULL, &reply, NULL);
	strbuf_release(&path);
	if (code)
		return json_decref(reply), code;
	j = json_object_get(reply, "job");
	if (json) {
		json_t *doc = json_pack("{s:O}", "job", j);

		json_doc_print(doc);
		json_decref(doc);
		json_decref(reply);
		return 0;
	}
	spec = json_object_get(j, "spec");
	printf("job:        %s (%s), submitted by %s\n", term_str(json_get_str(j, "id", "?")),
	       term_str(json_get_str(j, "name", "?")), term_str(json_get_str(j, "user", "?")));
	printf("state:      %s%s%s\n", term_str(shown_state(j)),
	       json_get_str(j, "reason", NULL) ? ": " : "", term_str(json_get_str(j, "reason", "")));
	if (json_is_integer(json_object_get(j, "exit_code")))
		printf("exit code:  %lld\n", json_get_int(j, "exit_code", 0));
	{
		size_t wi;
		json_t *w;

		json_array_foreach(json_object_get(j, "warnings"), wi, w)
			printf("warning:    %s\n", json_string_value(w));
	}
	if (json_get_str(j, "failed_node", NULL))
		printf("failed:     rank %lld on %s\n", json_get_int(j, "failed_rank", -1),
		       term_str(json_get_str(j, "failed_node", "?")));
	format_duration_human(&d, json_get_int(j, "elapsed_ms", 0));
	{
		long long nn = json_get_int(j, "nodes", 0), per = json_get_int(j, "per_node", 0);
		long long ws = json_get_int(j, "world_size", 0);

		printf("size:       %lld %s x %lld %s = %lld %s, launcher %s\n",
		       nn, plural(nn, "node", "nodes"), per,
		       json_is_true(json_object_get(j, "gpu")) ? plural(per, "GPU", "GPUs") :
		       plural(per, "process", "processes"), ws, plural(ws, "rank", "ranks"),
		       term_str(json_get_str(j, "launcher", "?")));
	}
	printf("times:      submitted %s, started %s, ended %s (ran %s)\n",
	       term_str(json_get_str(j, "submitted_at", "-")),
	       term_str(json_get_str(j, "started_at", "-")),
	       term_str(json_get_str(j, "ended_at", "-")), d.buf);
	/* the JSON's numbers as they are (docs/json.md): attempt 0 is the first run */
	printf("retried:    %lld of %lld time(s) (attempt %lld)\n", json_get_int(j, "attempt", 0),
	       json_get_int(j, "retries", 0), json_get_int(j, "attempt", 0));
	printf("job dir:    %s\n", term_str(json_get_str(j, "job_dir", "?")));
	if (json_get_int(j, "master_port", 0))
		printf("master:     %s:%lld\n", term_str(json_get_str(json_array_get(
		       json_object_get(j, "placement"), 0), "address", "?")),
		       json_get_int(j, "master_port", 0));
	if (json_array_size(json_object_get(j, "avoid"))) {
		printf("avoids:    ");
		json_array_foreach(json_object_get(j, "avoid"), i, x)
			printf(" %s", term_str(json_string_value(x)));
		printf("\n");
	}
	(void)spec;
	printf("placement:\n");
	json_array_foreach(json_object_get(j, "placement"), i, x)
		printf("  %-16s %-15s %s %s\n", term_str(json_get_str(x, "node", "?")),
		       term_str(json_get_str(x, "address", "?")),
		       json_is_true(json_object_get(j, "gpu")) ? "GPUs" : "slots",
		       term_str(json_get_str(x, "slots", "")));
	printf("history:\n");
	json_array_foreach(json_object_get(j, "history"), i, x)
		printf("  %s  %-10s %s\n", term_str(json_get_str(x, "at", "?")),
		       term_str(json_get_str(x, "state", "?")), term_str(json_get_str(x, "reason", "")));
	/* GPUS: the rank's CUDA_VISIBLE_DEVICES; HELD: its containment (cgroup or subreaper) */
	printf("ranks:\n  %5s %-16s %-15s %5s %8s %-8s %-9s  %s\n", "RANK", "NODE", "STATE", "EXIT",
	       "PID", "GPUS", "HELD", "LOG");
	json_array_foreach(json_object_get(j, "ranks"), i, x) {
		char rank[16], code_s[16], pid[16];

		snprintf(rank, sizeof(rank), json_get_int(x, "rank", -1) < 0 ? "mpi" : "%lld",
			 json_get_int(x, "rank", -1));
		snprintf(code_s, sizeof(code_s), json_is_integer(json_object_get(x, "exit_code")) ?
			 "%lld" : "-", json_get_int(x, "exit_code", 0));
		snprintf(pid, sizeof(pid), json_is_integer(json_object_get(x, "pid")) ? "%lld" : "-",
			 json_get_int(x, "pid", 0));
		/* "killed by dtctl", "lost with node": how a rank ended that did not end itself */
		printf("  %5s %-16s %-15s %5s %8s %-8s %-9s  %s\n", rank,
		       term_str(json_get_str(x, "node", "?")),
		       term_str(json_get_str(x, "reason", json_get_str(x, "state", "?"))), code_s, pid,
		       *json_get_str(x, "gpus", "") ? term_str(json_get_str(x, "gpus", "")) : "-",
		       term_str(json_get_str(x, "containment", "-")),
		       term_str(json_get_str(x, "log", "")));
	}
	json_array_foreach(json_object_get(j, "stalled"), i, x)
		printf("STALLED: rank %lld on %s, pid %lld, silent for %lld s\n",
		       json_get_int(x, "rank", -1), term_str(json_get_str(x, "node", "?")),
		       json_get_int(x, "pid", 0), json_get_int(x, "idle_ms", 0) / 1000);
	strbuf_release(&d);
	json_decref(reply);
	return 0;
}

int cmd_cancel(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl cancel <job>...", NULL };
	struct option opts[] = { OPT_END() };
	int ret = 0;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	if (argc < 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	for (int i = 0; i < argc; i++) {
		struct strbuf path = STRBUF_INIT;
		json_t *reply = NULL, *j;
		int code;

		strbuf_addf(&path, "%s%s%s", DT_PATH_JOB_PREFIX, argv[i], DT_PATH_CANCEL_SUFFIX);
		code = head_api("POST", path.buf, NULL, &reply, NULL);
		strbuf_release(&path);
		if (code) {
			ret = ret ? ret : code;
		} else {
			const char *st;

			j = json_object_get(reply, "job");
			st = json_get_str(j, "state", "?");
			if (!strcmp(st, DT_JOB_RUNNING))
				printf("%s: cancelling (its ranks are being stopped)\n",
				       term_str(argv[i]));
			else if (!strcmp(st, DT_JOB_CANCELLED))
				printf("%s: CANCELLED\n", term_str(argv[i]));
			else
				printf("%s: already %s\n", term_str(argv[i]), term_str(st));
		}
		json_decref(reply);
	}
	return ret;
}
