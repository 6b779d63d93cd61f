/*
 * nodes-api.c - the nodes' HTTP API of dtsched (protocol.h: GET /v1/nodes,
 * GET /v1/nodes/<name>, .../drain, .../resume, GET /v1/tasks), thin over the
 * node table (nodes.c).  The node list, the hot one (dtctl nodes on a big
 * cluster), is written without jansson.
 */
#include "sched-int.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "units.h"
#include "usage.h"
#include "users.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * GET /v1/nodes on a big cluster: the list is written straight into the
 * reply, without building 1000 jansson objects under the lock, and without
 * printf (vfprintf per field was most of the 4 ms a 1000-node list took).
 * It is the one writer of a node's fields: GET /v1/nodes/<name> parses its
 * output and adds the GPUs and tasks (node_detail_json).
 */
struct node_list_ctx {
	long long now_mono;
	time_t ts_sec;              /* last_heartbeat seconds already formatted ... */
	char ts_text[64];           /* ... as "YYYY-MM-DDTHH:MM:SS" (most nodes share it) */
};


/* Append str at p (NUL-terminated there, the next put overwrites it); the end. */
static char *put_str(char *p, const char *str)
{
	return stpcpy(p, str);
}

static char *put_ll(char *p, long long v)
{
	char tmp[24];
	int n = 0;
	unsigned long long u = v < 0 ? 0 - (unsigned long long)v : (unsigned long long)v;

	do {
		tmp[n++] = (char)('0' + u % 10);
	} while (u /= 10);
	if (v < 0)
		*p++ = '-';
	while (n)
		*p++ = tmp[--n];
	return p;
}

/* a JSON string; the common case (nothing to escape) in one copy */
static void add_json_str(struct strbuf *sb, const char *str)
{
	const unsigned char *c = (const unsigned char *)str;

	while (*c >= 0x20 && *c != '"' && *c != '\\' && *c != 0x7f)
		c++;
	if (*c) {
		json_append_str(sb, str);
		return;
	}
	strbuf_addch(sb, '"');
	strbuf_add(sb, str, (size_t)(c - (const unsigned char *)str));
	strbuf_addch(sb, '"');
}

/* ,"key":<integer> (key given with its quotes and colon) */
static char *put_key_ll(char *p, const char *key, long long v)
{
	return put_ll(put_str(p, key), v);
}

static void node_list_append(struct strbuf *sb, const struct node *n, struct node_list_ctx *lc)
{
	char buf[640], *p = buf;   /* the fixed fields: at most 500 bytes */

	strbuf_addstr(sb, "{\"name\":");
	add_json_str(sb, n->name);
	strbuf_addstr(sb, ",\"state\":");
	add_json_str(sb, n->state);
	strbuf_addstr(sb, ",\"address\":");
	add_json_str(sb, n->address ? n->address : "");
	p = put_key_ll(p, ",\"port\":", n->port);
	p = put_key_ll(p, ",\"gpus_total\":", n->gpus_total);
	p = put_key_ll(p, ",\"gpus_used\":", n->gpus_used);
	/* a real, as jansson writes it (never a bare integer: clients see a float) */
	p = put_str(p, ",\"gpu_util\":");
	if (n->gpu_util == 0 && !signbit(n->gpu_util)) {
		p = put_str(p, "0.0");
	} else {
		struct strbuf num = STRBUF_INIT;

		format_number_exact(&num, n->gpu_util);
		if (!strpbrk(num.buf, ".eEni"))
			strbuf_addstr(&num, ".0");
		p = put_str(p, num.buf);
		strbuf_release(&num);
	}
	p = put_key_ll(p, ",\"cpus\":", n->cpus);
	p = put_key_ll(p, ",\"mem_total\":", n->mem_total);
	p = put_key_ll(p, ",\"mem_available\":", n->mem_available);
	p = put_key_ll(p, ",\"tasks_running\":", n->tasks_running);
	p = put_str(p, ",\"last_heartbeat\":");
	if (n->last_hb_us) {
		time_t sec = (time_t)(n->last_hb_us / 1000000);
		long long us = n->last_hb_us % 1000000;

		if (sec != lc->ts_sec || !lc->ts_text[0]) {
			struct tm tm;

			gmtime_r(&sec, &tm);
			snprintf(lc->ts_text, sizeof(lc->ts_text), "%04d-%02d-%02dT%02d:%02d:%02d",
				 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
				 tm.tm_min, tm.tm_sec);
			lc->ts_sec = sec;
		}
		*p++ = '"';
		p = put_str(p, lc->ts_text);
		*p++ = '.';
		for (long long d = 100000; d; d /= 10)
			*p++ = (char)('0' + us / d % 10);
		p = put_str(p, "Z\"");
	} else {
		p = put_str(p, "null");
	}
	p = put_str(p, ",\"heartbeat_age_ms\":");
	if (n->last_hb_mono)
		p = put_ll(p, lc->now_mono - n->last_hb_mono);
	else
		p = put_str(p, "null");
	p = put_str(p, n->drained ? ",\"drained\":true" : ",\"drained\":false");
	p = put_str(p, ",\"health\":\"");
	p = put_str(p, n->health);
	p = put_str(p, "\",\"agent_version\":");
	strbuf_add(sb, buf, (size_t)(p - buf));
	if (n->agent_version)
		add_json_str(sb, n->agent_version);
	else
		strbuf_addstr(sb, "null");
	/* rare, and free text: through the escaping writer */
	strbuf_addstr(sb, ",\"health_reason\":");
	if (n->health_reason)
		add_json_str(sb, n->health_reason);
	else
		strbuf_addstr(sb, "null");
	strbuf_addstr(sb, ",\"drain_reason\":");
	if (n->drain_reason)
		add_json_str(sb, n->drain_reason);
	else
		strbuf_addstr(sb, "null");
	strbuf_addstr(sb, n->stopped ? ",\"down_reason\":\"agent stopped\"}" :
		      ",\"down_reason\":null}");
}

/* One node with its GPUs and tasks (GET /v1/nodes/<name>); lock held. */
static json_t *node_detail_json(struct node *n)
{
	struct node_list_ctx lc = { dt_mono_ms(), 0, "" };
	struct strbuf sb = STRBUF_INIT;
	json_t *j, *gpus = json_object_get(n->inventory, "gpus"), *tasks = json_array(), *t;
	const char *id;

	node_list_append(&sb, n, &lc);
	j = json_loadb(sb.buf, sb.len, 0, NULL);
	strbuf_release(&sb);
	if (!j)
		j = json_object();   /* cannot happen: node_list_append writes valid JSON */
	json_object_set_new(j, "gpus", gpus ? json_incref(gpus) : json_array());
	json_object_set_new(j, "beacons", json_pack("{s:I,s:I}",
		"accepted", (json_int_t)n->beacons_accepted, "refused", (json_int_t)n->beacons_refused));
	json_object_foreach(n->tasks, id, t)
		json_array_append(tasks, t);
	json_object_set_new(j, "tasks", tasks);
	return j;
}

/* ,"refused":[{name, address, protocol, version, at}...] (protocol.h); lock held */
static void refused_list_append(struct sched *s, struct strbuf *sb)
{
	long long now = dt_mono_ms();
	const char *name;
	json_t *r;
	int n = 0;

	strbuf_addstr(sb, ",\"refused\":[");
	json_object_foreach(s->refused, name, r) {
		json_t *o;

		if (!refused_recent(s, r, now))
			continue;
		o = json_deep_copy(r);
		json_object_del(o, "mono");
		if (n++)
			strbuf_addch(sb, ',');
		json_append(sb, o);
		json_decref(o);
	}
	strbuf_addch(sb, ']');
}

void h_nodes(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct node_list_ctx lc = { dt_mono_ms(), 0, "" };

	/* a hand-built JSON body: httpd sends resp->text as it is */
	pthread_mutex_lock(&s->lock);
	strbuf_grow(&resp->text, 440 * s->nr + 64);
	strbuf_addf(&resp->text, "{\"protocol\":%d,\"nodes\":[", DT_PROTOCOL_VERSION);
	for (size_t i = 0; i < s->nr; i++) {
		if (i)
			strbuf_addch(&resp->text, ',');
		node_list_append(&resp->text, s->nodes[i], &lc);
	}
	strbuf_addstr(&resp->text, "]");
	refused_list_append(s, &resp->text);
	pthread_mutex_unlock(&s->lock);
	strbuf_addstr(&resp->text, "}\n");
	resp->content_type = "application/json";
}

/* GET /v1/nodes/<name>, and drain/resume (drain: 1, 0; -1 = only show it) */
static void node_reply(struct sched *s, struct dt_http_request *req,
		       struct dt_http_response *resp, int drain)
{
	const char *name = dt_http_arg(req, "name");
	struct node *n;
	struct caller c;

	pthread_mutex_lock(&s->lock);
	n = node_find(s, name);
	if (caller_of(s, req, &c, resp) < 0 ||
	    (drain >= 0 && caller_need_admin(&c, resp, drain ? "draining a node" :
					     "resuming a node") < 0)) {
		;
	} else if (!n) {
		dt_http_error(resp, 404, "no node '%s' (known nodes are those whose agent has sent a heartbeat)", name);
	} else {
		if (drain >= 0 && n->drained != drain) {
			dtlog(DTLOG_INFO, "node '%s' %s by '%s'", name, drain ? "drained" : "resumed",
			      c.name);
			node_set_drained(s, n, drain ? "by dtctl drain" : NULL);
		}
		json_t *d = node_detail_json(n);

		/* a user sees the node's tasks, not what they run (users.h): their own
		 * jobs' argv and paths are in `dtctl show` */
		if (!c.admin) {
			json_t *t;
			size_t i;

			json_array_foreach(json_object_get(d, "tasks"), i, t) {
				static const char *const private_keys[] = { "argv", "cwd", "log",
									    "env_keys", "error" };

				/* a copy: the array holds the node table's own objects */
				json_t *cp = json_deep_copy(t);

				for (size_t k = 0; k < ARRAY_SIZE(private_keys); k++)
					json_object_del(cp, private_keys[k]);
				json_array_set_new(json_object_get(d, "tasks"), i, cp);
			}
		}
		dt_http_json(resp, 200, json_pack("{s:o}", "node", d));
	}
	pthread_mutex_unlock(&s->lock);
}

void h_node(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	node_reply(data, req, resp, -1);
}

void h_node_drain(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	node_reply(data, req, resp, 1);
}

void h_node_resume(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	node_reply(data, req, resp, 0);
}

/*
 * POST /v1/nodes/<name>/stopped: the agent stops on purpose (protocol.h).  The
 * node is DOWN at once, so no job is placed there in the dead_after it would
 * otherwise take to notice; its tasks keep running under their supervisors
 * and are kept until dead_after, for an agent restart to adopt.
 */
void h_node_stopped(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	const char *name = dt_http_arg(req, "name"), *started;
	struct node *n;

	/* the body was parsed by the dispatcher (lib/httpd.c): a second parse leaked the first */
	started = json_get_str(req->json, "agent_started_at", NULL);
	pthread_mutex_lock(&s->lock);
	n = node_find(s, name);
	if (!n) {
		dt_http_error(resp, 404, "no node '%s'", name);
	} else if (!started || !n->agent_started || strcmp(started, n->agent_started)) {
		/* an older agent's late word: the node's agent now is another one */
		dt_http_json(resp, 200, json_pack("{s:o}", "node", node_detail_json(n)));
	} else {
		dtlog(DTLOG_WARN, "node '%s': %s -> DOWN (agent stopped)", n->name, n->state);
		n->stopped = 1;
		n->stop_grace = strcmp(n->state, DT_NODE_DOWN) != 0;
		if (n->stop_grace)
			events_add(s, "node.down", json_pack("{s:s,s:s,s:s}", "node", n->name, "from",
				   n->state, "reason", "agent stopped"), NULL);
		n->last_hb_mono = dt_mono_ms();   /* dead_after counts from now */
		n->state = DT_NODE_DOWN;
		db_save_node(s, n);
		dt_http_json(resp, 200, json_pack("{s:o}", "node", node_detail_json(n)));
		sched_wake(s);
	}
	pthread_mutex_unlock(&s->lock);
}

void h_tasks(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	json_t *arr = json_array();
	sqlite3_stmt *st;

	pthread_mutex_lock(&s->lock);
	if (sqlite3_prepare_v2(s->db, "SELECT node, id, state, exit_code, job_id, rank, reason, "
			       "updated_us FROM tasks ORDER BY node, id", -1, &st, NULL) == SQLITE_OK) {
		while (sqlite3_step(st) == SQLITE_ROW) {
			json_t *t = json_object();

			json_object_set_new(t, "node", json_string((const char *)sqlite3_column_text(st, 0)));
			json_object_set_new(t, "id", json_string((const char *)sqlite3_column_text(st, 1)));
			json_object_set_new(t, "state", json_string((const char *)sqlite3_column_text(st, 2)));
			json_object_set_new(t, "exit_code", sqlite3_column_type(st, 3) == SQLITE_NULL ?
					    json_null() : json_integer(sqlite3_column_int(st, 3)));
			json_object_set_new(t, "job_id", sqlite3_column_type(st, 4) == SQLITE_NULL ?
					    json_null() : json_string((const char *)sqlite3_column_text(st, 4)));
			json_object_set_new(t, "rank", sqlite3_column_type(st, 5) == SQLITE_NULL ?
					    json_null() : json_integer(sqlite3_column_int(st, 5)));
			json_object_set_new(t, "lost", json_boolean(!strcmp(
				(const char *)sqlite3_column_text(st, 2), DT_TASK_LOST)));
			json_object_set_new(t, "reason", sqlite3_column_type(st, 6) == SQLITE_NULL ?
					    json_null() : json_string((const char *)sqlite3_column_text(st, 6)));
			json_object_set_new(t, "updated_at", json_timestamp(sqlite3_column_int64(st, 7)));
			json_array_append_new(arr, t);
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	dt_http_json(resp, 200, json_pack("{s:o}", "tasks", arr));
}
