/*
 * cmd-ps.c - `dtctl ps`: your queued and running jobs (Slurm-like columns;
 * --user NAME for another user's, --all for everyone's and the history) from
 * dtsched's job table (POST /v1/joblist as rows, lib/rowfmt.h; --json: GET /v1/jobs;
 * others' jobs come redacted, users.h).  One job in detail
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
#include "rowfmt.h"
#include "term.h"
#include "units.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* one line of the table, from either form of the reply */
struct ps_row {
	const char *id, *name, *user, *state, *reason, *nodelist, *stalled_node;
	const char *slurm_array_job;   /* a job array's task, "812_3", or NULL */
	long long elapsed_ms, nodes, world_size, log_lost_lines, slurm_job_id;
	long long stalled_rank, stalled_pid, stalled_idle_ms;
	int stalled;
};

static void print_row(const struct ps_row *r, int color, struct strbuf *where)
{
	const char *st = r->state, *on = "", *off = "";
	char t[32];

	if (!strcmp(st, DT_JOB_RUNNING) && r->stalled)
		st = "STALLED";   /* job_shown_state() */
	strbuf_reset(where);
	fmt_time(t, sizeof(t), r->elapsed_ms);
	if (!strcmp(r->state, DT_JOB_PENDING) ||
	    (r->reason && is_final(st) && strcmp(st, DT_JOB_COMPLETED)))
		strbuf_addf(where, "(%s)", term_str(r->reason ? r->reason : "queued"));
	else if (!strcmp(st, "STALLED"))
		strbuf_addf(where, "%s (rank %lld on %s pid %lld silent %llds)", term_str(r->nodelist),
			    r->stalled_rank, term_str(r->stalled_node ? r->stalled_node : "?"),
			    r->stalled_pid, r->stalled_idle_ms / 1000);
	else
		strbuf_addstr(where, term_str(r->nodelist));
	if (!strcmp(st, DT_JOB_RUNNING) && r->slurm_array_job)
		/* a task of a Slurm job array: Slurm's JOBID_TASKID */
		strbuf_addf(where, " (slurm %s)", term_str(r->slurm_array_job));
	else if (!strcmp(st, DT_JOB_RUNNING) && r->slurm_job_id)
		/* backend: slurm (docs/slurm-backend.md): the Slurm job beside ours */
		strbuf_addf(where, " (slurm %lld)", r->slurm_job_id);
	if (r->log_lost_lines > 0)
		strbuf_addf(where, " (log: %lld line%s lost)", r->log_lost_lines,
			    r->log_lost_lines == 1 ? "" : "s");
	if (color) {
		on = !strcmp(st, DT_JOB_RUNNING) || !strcmp(st, DT_JOB_COMPLETED) ? "\033[32m" :
		     !strcmp(st, DT_JOB_PENDING) ? "\033[33m" : "\033[31m";
		off = "\033[0m";
	}
	printf("%-10s %-16.16s %-10.10s %s%-10s%s %10s %5lld %5lld  %s\n", term_str(r->id),
	       term_str(r->name), term_str(r->user), on, term_str(st), off, t, r->nodes,
	       r->world_size, where->buf);
}

/* a job of GET /v1/jobs or the brief list as a row; nl holds its nodelist */
static void row_of_json(struct ps_row *r, const json_t *j, struct strbuf *nl)
{
	const json_t *s0 = json_array_get(json_object_get(j, "stalled"), 0), *p;
	size_t i;

	strbuf_reset(nl);
	json_array_foreach(json_object_get(j, "placement"), i, p)
		strbuf_addf(nl, "%s%s", i ? "," : "", json_get_str(p, "node", "?"));
	*r = (struct ps_row){
		.id = json_get_str(j, "id", "?"), .name = json_get_str(j, "name", "?"),
		.user = json_get_str(j, "user", ""), .state = json_get_str(j, "state", ""),
		.reason = json_get_str(j, "reason", NULL), .nodelist = nl->buf,
		.stalled_node = json_get_str(s0, "node", "?"),
		.elapsed_ms = json_get_int(j, "elapsed_ms", 0), .nodes = json_get_int(j, "nodes", 0),
		.world_size = json_get_int(j, "world_size", 0),
		.log_lost_lines = json_get_int(j, "log_lost_lines", 0),
		.slurm_job_id = json_get_int(json_object_get(j, "slurm"), "job_id", 0),
		.slurm_array_job = json_get_str(json_object_get(j, "slurm"), "array_job", NULL),
		.stalled_rank = json_get_int(s0, "rank", -1), .stalled_pid = json_get_int(s0, "pid", 0),
		.stalled_idle_ms = json_get_int(s0, "idle_ms", 0), .stalled = s0 != NULL,
	};
}

enum { F_ID, F_NAME, F_USER, F_STATE, F_REASON, F_ELAPSED, F_NODES, F_WORLD, F_LOST, F_SLURM,
       F_NODELIST, F_ST_RANK, F_ST_NODE, F_ST_PID, F_ST_IDLE, F_ARRAY, NR_F };

static long long num(const char *s)
{
	return s ? strtoll(s, NULL, 10) : 0;
}

/*
 * The rows form of the brief list (protocol.h, lib/rowfmt.h), printed as it is
 * parsed, in place (buf is changed): no allocation per row.  Columns found by
 * the names of the first row.  Returns the rows shown, or -1 when the reply is
 * not one (told on stderr).
 */
static int print_rows(char *buf, const char *user, int all, int color)
{
	static const char *const names[NR_F] = {
		"id", "name", "user", "state", "reason", "elapsed_ms", "nodes", "world_size",
		"log_lost_lines", "slurm_job_id", "nodelist", "stalled_rank", "stalled_node",
		"stalled_pid", "stalled_idle_ms", "slurm_array_job",
	};
	char *cur = buf, *head[64], **f;
	int col[NR_F], max = rowfmt_next(&cur, head, 64), n, shown = 0, line = 1;
	struct strbuf where = STRBUF_INIT;

	if (max < 1 || max > 64)
		return error("dtsched's job list: its first row names %d columns", max);
	for (int k = 0; k < NR_F; k++) {
		col[k] = -1;
		for (int i = 0; i < max; i++)
			if (head[i] && !strcmp(head[i], names[k]))
				col[k] = i;
	}
	f = xcalloc((size_t)max + 1, sizeof(*f));
	while ((n = rowfmt_next(&cur, f, max)) > 0) {
		struct ps_row r;

		line++;
		if (n < max) {
			error("dtsched's job list, row %d: %d fields, expected %d", line, n, max);
			shown = -1;
			break;
		}
#define COL(k) (col[k] >= 0 ? f[col[k]] : NULL)
		r = (struct ps_row){
			.id = COL(F_ID) ? COL(F_ID) : "?", .name = COL(F_NAME) ? COL(F_NAME) : "?",
			.user = COL(F_USER) ? COL(F_USER) : "", .state = COL(F_STATE) ? COL(F_STATE) : "",
			.reason = COL(F_REASON), .nodelist = COL(F_NODELIST) ? COL(F_NODELIST) : "",
			.stalled_node = COL(F_ST_NODE), .elapsed_ms = num(COL(F_ELAPSED)),
			.nodes = num(COL(F_NODES)), .world_size = num(COL(F_WORLD)),
			.log_lost_lines = num(COL(F_LOST)), .slurm_job_id = num(COL(F_SLURM)),
			.slurm_array_job = COL(F_ARRAY),
			.stalled_rank = COL(F_ST_RANK) ? num(COL(F_ST_RANK)) : -1,
			.stalled_pid = num(COL(F_ST_PID)), .stalled_idle_ms = num(COL(F_ST_IDLE)),
			.stalled = COL(F_ST_RANK) != NULL,
		};
#undef COL
		if ((user && strcmp(r.user, user)) || (!all && is_final(r.state)))
			continue;
		print_row(&r, color, &where);
		shown++;
	}
	strbuf_release(&where);
	free(f);
	return shown;
}

static void print_header(void)
{
	printf("%-10s %-16s %-10s %-10s %10s %5s %5s  %s\n", "JOBID", "NAME", "USER", "STATE",
	       "TIME", "NODES", "RANKS", "NODELIST(REASON)");
}

/* the table from the rows: its header, the rows; the rows shown or -1 */
static int print_rows_table(char *buf, const char *user, int all, int color)
{
	print_header();
	return print_rows(buf, user, all, color);
}

int cmd_ps(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl ps [--all] [--user <name>] [--json]", NULL };
	int all = 0, json = 0, code, shown = 0, tsv, color = dt_want_color(1);
	const char *user = NULL, *you;
	struct option opts[] = {
		OPT_BOOL('a', "all", &all, "every user's jobs, finished ones too (history)"),
		OPT_STRING('u', "user", &user, "name", "that user's jobs (default: yours)"),
		OPT_BOOL(0, "json", &json, "print the jobs as JSON"),
		OPT_END(),
	};
	json_t *reply, *jobs, *j, *out;
	struct strbuf rows = STRBUF_INIT;
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
		json_t *q = json_pack("{s:s?,s:b,s:s}", "user", user, "all", all, "format", "tsv");
		static char obuf[1 << 16];

		if (!isatty(STDOUT_FILENO))   /* a long list: 64 KiB writes */
			setvbuf(stdout, obuf, _IOFBF, sizeof(obuf));
		/* as text (an older dtsched: as JSON) */
		code = head_api_text("POST", DT_PATH_JOBLIST, q, &reply, &rows);
		json_decref(q);
	}
	if (code)
		return json_decref(reply), strbuf_release(&rows), code;
	if ((tsv = rows.len > 0)) {
		json_t *q;

		shown = print_rows_table(rows.buf, user, all, color);
		strbuf_release(&rows);
		if (shown < 0)
			return DT_EXIT_FAIL;
		if (shown)
			return 0;
		/* none: whose they would be, for the note (the JSON list's "you") */
		q = json_pack("{s:s?,s:b}", "user", user, "all", all);
		code = head_api("POST", DT_PATH_JOBLIST, q, &reply, NULL);
		json_decref(q);
		if (code)
			return json_decref(reply), code;
	}
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
	if (!tsv) {
		struct strbuf where = STRBUF_INIT, nl = STRBUF_INIT;

		print_header();
		json_array_foreach(out, i, j) {
			struct ps_row r;

			row_of_json(&r, j, &nl);
			print_row(&r, color, &where);
			shown++;
		}
		strbuf_release(&where);
		strbuf_release(&nl);
	}
	if (!shown)
		printf("(no %sjobs%s%s%s)\n", all ? "" : "queued or running ",
		       user ? " of " : "", user ? term_str(user) : "",
		       all ? "" : "; 'dtctl ps --all' shows finished ones and other users'");
	json_decref(out);
	json_decref(reply);
	return 0;
}
