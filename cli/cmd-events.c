/*
 * cmd-events.c - `dtctl events [-f] [--json] [--job J] [--since T|ID]`: the
 * head's event stream (docs/events.md; POST /v1/events, scheduler/events.c),
 * oldest first.  -f follows it by long-poll (dtsched answers the moment an
 * event is added; no polling), and across a restart of dtsched (once it has
 * answered: one never reached is exit 3 at once) it waits and goes on from
 * the last id it printed, so nothing is lost or printed twice.
 * --json prints one JSON object per line, as `logs --json` does.
 */
#include "builtin.h"
#include "setup.h"
#include "head.h"
#include "httpc.h"
#include "json.h"
#include "log.h"
#include "parse-options.h"
#include "protocol.h"
#include "term.h"
#include "units.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define FOLLOW_POLL_MS 25000      /* one long-poll; dtsched answers at once when there is news */
#define RECONNECT_MS 1000         /* -f while dtsched is away (restarting) */

/* A line for people: id, time, kind, then what the event says. */
static void print_event(const json_t *ev)
{
	static const char *const keys[] = {
		"job", "name", "user", "state", "node", "health", "rank", "exit_code", "signal",
		"sweep", "trial", "metric", "value", "attempt", "verdict", "target", "event_kind",
		"pattern", "line", "error", "reason", NULL,
	};
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, "%-6lld %.23s %-16s", json_get_int(ev, "id", 0),
		    term_str(json_get_str(ev, "at", "")), term_str(json_get_str(ev, "kind", "")));
	for (size_t i = 0; keys[i]; i++) {
		json_t *v = json_object_get(ev, keys[i]);

		if (!v || json_is_null(v) || (json_is_string(v) && !*json_string_value(v)))
			continue;
		if (json_is_string(v))
			strbuf_addf(&sb, " %s=%s", keys[i], term_str(json_string_value(v)));
		else if (json_is_integer(v))
			strbuf_addf(&sb, " %s=%lld", keys[i], (long long)json_integer_value(v));
		else if (json_is_number(v))
			strbuf_addf(&sb, " %s=%.6g", keys[i], json_number_value(v));
	}
	puts(sb.buf);
	strbuf_release(&sb);
}

/* one request; 0 with *reply, DT_EXIT_UNREACH when dtsched is away, else the code printed */
static int fetch(struct dt_httpc *hc, json_t *body, long timeout_ms, json_t **reply, int quiet)
{
	struct strbuf err = STRBUF_INIT;
	int st, code = 0;

	hc->timeout_ms = timeout_ms + 10000;
	st = dt_httpc_request(hc, "POST", DT_PATH_EVENTS, body, reply, &err);
	if (st < 0 || st == 401 || st == DT_HTTP_PROTOCOL_MISMATCH) {
		if (!quiet)
			error("cannot read events from dtsched at %s:%d: %s", the_cluster.head_address,
			      the_cluster.head_port, st < 0 ? err.buf : dt_httpc_reply_error(*reply, st));
		code = DT_EXIT_UNREACH;
	} else if (st != 200) {
		error("dtsched: %s (HTTP %d)", dt_httpc_reply_error(*reply, st), st);
		code = st == 400 || st == 404 ? DT_EXIT_USAGE : DT_EXIT_FAIL;
	}
	strbuf_release(&err);
	return code;
}

int cmd_events(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl events [-f] [--json] [--job <id>] [--since <10m|timestamp|event id>]", NULL,
	};
	const char *job = NULL, *since = NULL;
	int follow = 0, json = 0, code = 0, waiting = 0, answered = 0;
	long long after = 0, since_us = 0;
	struct option opts[] = {
		OPT_BOOL('f', "follow", &follow, "wait for new events and print them as they come"),
		OPT_BOOL(0, "json", &json, "one JSON object per event and line"),
		OPT_STRING(0, "job", &job, "id", "only this job's events"),
		OPT_STRING(0, "since", &since, "when",
			   "events after this id (as printed), or newer than 10m or a timestamp"),
		OPT_END(),
	};
	struct dt_httpc hc;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (argc) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (since) {
		long long ms;

		if (strspn(since, "0123456789") == strlen(since) && *since && strlen(since) < 19) {
			after = atoll(since);
		} else if ((since_us = dt_timestamp_parse(since)) < 0) {
			if (parse_duration_ms(since, &ms) < 0) {
				error("--since '%s': expected an event id like 42, a duration like 10m or "
				      "a timestamp like 2026-11-22T10:00:00Z", since);
				return DT_EXIT_USAGE;
			}
			since_us = dt_now_us() - ms * 1000;
		}
	}
	memset(&hc, 0, sizeof(hc));
	if ((code = head_connect(&hc)))
		return code;
	for (;;) {
		json_t *body, *reply = NULL, *evs, *ev;
		size_t i;

		body = json_pack("{s:I,s:I,s:i,s:I}", "after_id", (json_int_t)after, "since_us",
				 (json_int_t)since_us, "limit", DT_EVENTS_MAX_LIMIT, "timeout_ms",
				 (json_int_t)(follow ? FOLLOW_POLL_MS : 0));
		if (job)
			json_object_set_new(body, "job", json_string(job));
		code = fetch(&hc, body, follow ? FOLLOW_POLL_MS : 0, &reply, waiting);
		json_decref(body);
		if (code == DT_EXIT_UNREACH && follow && answered) {
			/* dtsched restarting: wait for it, then go on after the last id printed */
			struct timespec ts = { RECONNECT_MS / 1000, 0 };

			if (!waiting)
				fprintf(stderr, "dtctl events: waiting for dtsched to come back "
					"(Ctrl-C to stop)\n");
			waiting = 1;
			json_decref(reply);
			fflush(stdout);
			nanosleep(&ts, NULL);
			continue;
		}
		if (code) {
			json_decref(reply);
			break;
		}
		waiting = 0;
		answered = 1;
		evs = json_object_get(reply, "events");
		json_array_foreach(evs, i, ev) {
			if (json) {
				struct strbuf sb = STRBUF_INIT;

				/* "schema" first, then id, at, kind, then the rest (sorted) */
				json_t *o = json_pack("{s:i,s:O?,s:O?,s:O?}", "schema", 1, "id",
						      json_object_get(ev, "id"), "at",
						      json_object_get(ev, "at"), "kind",
						      json_object_get(ev, "kind"));

				json_object_update_missing(o, ev);
				json_append(&sb, o);
				json_decref(o);
				puts(sb.buf);
				strbuf_release(&sb);
			} else {
				print_event(ev);
			}
			after = json_get_int(ev, "id", after);
		}
		fflush(stdout);
		if (!follow && json_array_size(evs) < DT_EVENTS_MAX_LIMIT) {
			json_decref(reply);
			break;
		}
		json_decref(reply);
	}
	dt_httpc_release(&hc);
	return code;
}
