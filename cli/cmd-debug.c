/*
 * cmd-debug.c - `dtctl debug JOB`: who a stalled job waits for.  Asks
 * dtsched for a hang attribution (POST /v1/jobs/<id>/debug, scheduler/hang.h):
 * dtsched has every node's agent sample the job's ranks (process state, CPU,
 * dttrain's phase and collective number, Python stacks; agent/debug.h) and
 * names the ranks the others wait for.  --last prints the latest attribution
 * without a new one (also the automatic one made at a stall).
 */
#include "builtin.h"
#include "head.h"
#include "json.h"
#include "parse-options.h"
#include "protocol.h"
#include "setup.h"
#include "term.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>

#define DEBUG_WAIT_STEP_MS 8000     /* one long-poll, below the client's timeout */
#define DEBUG_WAIT_MAX_MS 60000

static void print_hang(const char *id, const json_t *h)
{
	size_t i;
	json_t *r, *c;

	printf("job %s: %s%s (%s, took %.1f s)\n", term_str(id),
	       term_str(json_get_str(h, "verdict", "?")),
	       json_is_true(json_object_get(h, "auto")) ? ", found at a stall" : "",
	       term_str(json_get_str(h, "at", "?")), json_get_int(h, "elapsed_ms", 0) / 1000.0);
	printf("%s\n", term_str(json_get_str(h, "text", "")));
	json_array_foreach(json_object_get(h, "errors"), i, r)
		printf("warning: %s\n", term_str(json_string_value(r)));
	printf("  %5s %-16s %8s %-24s %6s %6s %5s %-2s %-18s %7s\n", "RANK", "NODE", "PID", "PHASE",
	       "SEQ", "STEP", "CPU%", "ST", "WCHAN", "SILENT");
	json_array_foreach(json_object_get(h, "ranks"), i, r) {
		char seq[24] = "-", step[24] = "-", idle[24] = "-";

		if (json_get_int(r, "seq", -1) >= 0)
			snprintf(seq, sizeof(seq), "%lld", json_get_int(r, "seq", -1));
		if (json_get_int(r, "step", -1) >= 0)
			snprintf(step, sizeof(step), "%lld", json_get_int(r, "step", -1));
		if (json_get_int(r, "idle_ms", -1) >= 0)
			snprintf(idle, sizeof(idle), "%llds", json_get_int(r, "idle_ms", 0) / 1000);
		printf("  %5lld %-16s %8lld %-24s %6s %6s %5.0f %-2s %-18s %7s\n",
		       json_get_int(r, "rank", -1), term_str(json_get_str(r, "node", "?")),
		       json_get_int(r, "pid", 0),
		       *json_get_str(r, "phase", "") ? term_str(json_get_str(r, "phase", "")) : "?",
		       seq, step, json_number_value(json_object_get(r, "cpu_pct")),
		       term_str(json_get_str(r, "state", "?")),
		       *json_get_str(r, "wchan", "") ? term_str(json_get_str(r, "wchan", "")) : "-",
		       idle);
	}
	json_array_foreach(json_object_get(h, "culprits"), i, c) {
		size_t k;
		json_t *f;

		if (!json_array_size(json_object_get(c, "frames")))
			continue;
		printf("rank %lld stack (innermost first):\n", json_get_int(c, "rank", -1));
		json_array_foreach(json_object_get(c, "frames"), k, f)
			printf("    %s\n", term_str(json_string_value(f)));
	}
}

int cmd_debug(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl debug [--json] [--last] <job>", NULL };
	int json = 0, last = 0, code, status = 0;
	struct option opts[] = {
		OPT_BOOL(0, "json", &json, "print the attribution as JSON"),
		OPT_BOOL(0, "last", &last, "print the latest attribution, do not make a new one"),
		OPT_END(),
	};
	json_t *reply = NULL, *h = NULL, *body;
	long long gen, waited = 0;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	if (argc != 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (last) {
		code = head_api_id("GET", DT_PATH_JOB_PREFIX, argv[0], "", NULL, &reply, NULL);
		if (code)
			return json_decref(reply), code;
		h = json_incref(json_object_get(json_object_get(reply, "job"), "hang"));
		json_decref(reply);
		if (!h) {
			fprintf(stderr, "dtctl debug: job %s has no attribution yet (run 'dtctl debug "
				"%s')\n", term_str(argv[0]), term_str(argv[0]));
			return DT_EXIT_FAIL;
		}
		goto print;
	}
	body = json_object();
	code = head_api_id("POST", DT_PATH_JOB_PREFIX, argv[0], DT_PATH_DEBUG_SUFFIX, body, &reply,
			   &status);
	json_decref(body);
	if (code)
		return json_decref(reply), code;
	gen = json_get_int(reply, "gen", 0);
	json_decref(reply);
	for (;;) {
		reply = NULL;
		body = json_pack("{s:I,s:i}", "wait", (json_int_t)gen, "timeout_ms", DEBUG_WAIT_STEP_MS);
		code = head_api_id("POST", DT_PATH_JOB_PREFIX, argv[0], DT_PATH_DEBUG_SUFFIX, body,
				   &reply, &status);
		json_decref(body);
		if (code)
			return json_decref(reply), code;
		if (json_is_true(json_object_get(reply, "done")) || waited >= DEBUG_WAIT_MAX_MS ||
		    !json_is_true(json_object_get(reply, "running")))
			break;
		json_decref(reply);
		waited += DEBUG_WAIT_STEP_MS;
	}
	h = json_incref(json_object_get(reply, "hang"));
	if (!json_is_true(json_object_get(reply, "done"))) {
		json_decref(reply);
		json_decref(h);
		if (waited >= DEBUG_WAIT_MAX_MS)
			fprintf(stderr, "dtctl debug: no attribution of job %s within %d s\n",
				term_str(argv[0]), DEBUG_WAIT_MAX_MS / 1000);
		else
			fprintf(stderr, "dtctl debug: the attribution of job %s was lost (dtsched "
				"restarted?); run 'dtctl debug %s' again\n", term_str(argv[0]),
				term_str(argv[0]));
		return DT_EXIT_FAIL;
	}
	json_decref(reply);
print:
	if (json)
		json_doc_print_key("hang", h);
	else
		print_hang(argv[0], h);
	json_decref(h);
	return 0;
}
