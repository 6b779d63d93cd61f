/*
 * cmd-nodes.c - `dtctl nodes [--json]`: the node table of dtsched (never
 * started here: cli/setup.h).  Taking a node out of placement and back is
 * `dtctl drain` / `dtctl resume` (cmd-drain.c).
 */
#include "builtin.h"
#include "head.h"
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

/*
 * `dtctl nodes --json`: dtsched's reply printed as it comes, re-indented
 * without a parse (1000 nodes are ~300 KB: parsing and re-printing them with
 * jansson was most of the command's time).
 */
static int print_nodes_json(void)
{
	struct dt_httpc c;
	struct strbuf out = STRBUF_INIT, err = STRBUF_INIT;
	int code, st;

	if ((code = head_connect(&c)))
		return code;
	st = dt_httpc_request_raw(&c, "GET", DT_PATH_NODES, NULL, 0, &out, &err);
	dt_httpc_release(&c);
	if (st == 200 && json_print_text(out.buf, out.len, "nodes refused", "\"schema\": 1") == 0) {
		json_printed = 1;
		code = 0;
	} else if (st < 0) {
		error("cannot reach dtsched at %s:%d: %s", the_cluster.head_address,
		      the_cluster.head_port, err.buf);
		code = DT_EXIT_UNREACH;
	} else {
		json_t *reply = json_parse(out.buf, out.len, NULL);

		error("dtsched: %s (HTTP %d)", st == 200 ? "reply is not a JSON object" :
		      dt_httpc_reply_error(reply, st), st);
		json_decref(reply);
		code = st == 401 || st == DT_HTTP_PROTOCOL_MISMATCH ? DT_EXIT_UNREACH : DT_EXIT_FAIL;
	}
	strbuf_release(&out);
	strbuf_release(&err);
	return code;
}

static void human_bytes(char *buf, size_t len, long long b)
{
	if (b >= 1LL << 30)
		snprintf(buf, len, "%.0fG", (double)b / (1LL << 30));
	else
		snprintf(buf, len, "%.0fM", (double)b / (1LL << 20));
}

static void age_str(char *buf, size_t len, const json_t *n)
{
	const json_t *a = json_object_get(n, "heartbeat_age_ms");

	if (json_is_integer(a))
	{
		struct strbuf d = STRBUF_INIT;

		format_duration_human(&d, json_integer_value(a));
		snprintf(buf, len, "%s ago", d.buf);
		strbuf_release(&d);
	}
	else if (json_get_str(n, "last_heartbeat", NULL))
		snprintf(buf, len, "%s", term_str(json_get_str(n, "last_heartbeat", "")));
	else
		snprintf(buf, len, "never");
}

/* HEALTH: ok, "degraded: why", "bad: why" (agent/health.h), why it is drained or down */
static void print_health(const json_t *n)
{
	const char *h = json_get_str(n, "health", ""), *why = json_get_str(n, "health_reason", NULL);
	const char *drain = json_get_str(n, "drain_reason", NULL);

	printf("%s", *h ? term_str(h) : "-");
	if (why && strcmp(h, "ok"))
		printf(": %s", term_str(why));
	if (json_is_true(json_object_get(n, "drained")))
		printf(" (drained: %s)", term_str(drain ? drain : "no reason recorded"));
	if (json_get_str(n, "down_reason", NULL))
		printf(" (down: %s)", term_str(json_get_str(n, "down_reason", "")));
	putchar('\n');
}

/*
 * `dtctl nodes --gpus`: one line per GPU of every node that is UP (the agents'
 * inventory: NVML where there is a GPU, "fake" for configured GPUs without one),
 * with its model and UUID -- what `nvidia-smi -L` says on each node.
 */
static int print_gpus(json_t *nodes, int json)
{
	json_t *all = json_array(), *n, *g;
	size_t i, k;
	int code = 0;

	json_array_foreach(nodes, i, n) {
		const char *name = json_get_str(n, "name", "");
		json_t *reply = NULL;

		if (!json_get_int(n, "gpus_total", 0))
			continue;
		if ((code = head_api_id("GET", DT_PATH_NODE_PREFIX, name, "", NULL, &reply, NULL)))
			break;
		json_array_foreach(json_object_get(json_object_get(reply, "node"), "gpus"), k, g) {
			json_t *o = json_pack("{s:s,s:I,s:s,s:s,s:I,s:I,s:I,s:I}", "node", name,
				"index", (json_int_t)json_get_int(g, "index", (long long)k),
				"name", json_get_str(g, "name", ""), "uuid", json_get_str(g, "uuid", ""),
				"utilization", (json_int_t)json_get_int(g, "utilization", 0),
				"memory_used", (json_int_t)json_get_int(g, "memory_used", 0),
				"memory_total", (json_int_t)json_get_int(g, "memory_total", 0),
				"processes", (json_int_t)json_array_size(json_object_get(g, "processes")));

			if (o)
				json_array_append_new(all, o);
		}
		json_decref(reply);
	}
	if (!code && json) {
		json_t *o = json_pack("{s:i,s:O}", "schema", 1, "gpus", all);

		json_print(o);
		json_decref(o);
	} else if (!code) {
		printf("%-16s %3s  %-28s %-40s %5s %-17s %s\n", "NODE", "GPU", "MODEL", "UUID",
		       "UTIL", "MEMORY (MiB)", "PROCS");
		json_array_foreach(all, i, g) {
			char mem[48];

			snprintf(mem, sizeof(mem), "%lld/%lld", json_get_int(g, "memory_used", 0) >> 20,
				 json_get_int(g, "memory_total", 0) >> 20);
			printf("%-16s %3lld  %-28s %-40s %4lld%% %-17s %lld\n",
			       term_str(json_get_str(g, "node", "")), json_get_int(g, "index", 0),
			       term_str(json_get_str(g, "name", "")),
			       *json_get_str(g, "uuid", "") ? term_str(json_get_str(g, "uuid", "")) : "-",
			       json_get_int(g, "utilization", 0), mem, json_get_int(g, "processes", 0));
		}
		if (!json_array_size(all))
			printf("(no GPUs: no node that is up reports one)\n");
	}
	json_decref(all);
	return code;
}

int cmd_nodes(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl nodes [--gpus] [--json]", NULL };
	int json = 0, gpus_only = 0, code, color = dt_want_color(1), refused = 0;
	struct option opts[] = {
		OPT_BOOL(0, "gpus", &gpus_only, "one line per GPU: model, UUID, use (from the agents)"),
		OPT_BOOL(0, "json", &json, "print the node table as JSON"),
		OPT_END(),
	};
	json_t *reply, *nodes, *n;
	size_t i;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (argc) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (json && !gpus_only)
		return print_nodes_json();
	if ((code = head_api("GET", DT_PATH_NODES, NULL, &reply, NULL)))
		return json_decref(reply), code;
	nodes = json_object_get(reply, "nodes");
	if (gpus_only) {
		code = print_gpus(nodes, json);
		json_decref(reply);
		return code;
	}
	printf("%-16s %-8s %-9s %5s %-13s %5s  %-12s %s\n", "NODE", "STATE", "GPUS", "UTIL",
	       "MEMORY", "TASKS", "HEARTBEAT", "HEALTH");
	json_array_foreach(nodes, i, n) {
		const char *st = json_get_str(n, "state", "?");
		char gpus[32], mem[48], total[16], used[16], age[48];
		const char *on = "", *off = "";
		long long mt = json_get_int(n, "mem_total", 0), ma = json_get_int(n, "mem_available", 0);

		snprintf(gpus, sizeof(gpus), "%lld/%lld", json_get_int(n, "gpus_used", 0),
			 json_get_int(n, "gpus_total", 0));
		/* used/total, read like GPUS next to it */
		human_bytes(total, sizeof(total), mt);
		human_bytes(used, sizeof(used), ma < mt ? mt - ma : 0);
		snprintf(mem, sizeof(mem), "%s/%s", used, total);
		age_str(age, sizeof(age), n);
		if (color) {
			on = !strcmp(st, DT_NODE_UP) ? "\033[32m" : !strcmp(st, DT_NODE_DOWN) ?
				"\033[31m" : "\033[33m";
			off = "\033[0m";
		}
		printf("%-16s %s%-8s%s %-9s %4.0f%% %-13s %5lld  %-12s ",
		       term_str(json_get_str(n, "name", "?")), on, term_str(st), off, gpus,
		       json_get_real(n, "gpu_util", 0), mem, json_get_int(n, "tasks_running", 0), age);
		print_health(n);
	}
	/* agents dtsched refused for another protocol version (protocol.h) */
	json_array_foreach(json_object_get(reply, "refused"), i, n) {
		printf("%-16s %-8s its dtagent (%s) speaks protocol %lld, dtsched %d\n",
		       term_str(json_get_str(n, "name", "?")), "REFUSED",
		       term_str(json_get_str(n, "address", "?")), json_get_int(n, "protocol", 0),
		       DT_PROTOCOL_VERSION);
		refused++;
	}
	if (refused)
		printf("hint: %s\n", DT_PROTOCOL_FIX);
	if (!json_array_size(nodes) && !refused)
		printf("(no nodes yet: agents appear here after their first heartbeat; "
		       "see 'dtctl agents start')\n");
	json_decref(reply);
	return 0;
}
