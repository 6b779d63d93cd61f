/*
 * heartbeat.c - what the agents tell dtsched: POST /v1/heartbeat (the common
 * idle one read without jansson), the UDP beacons between them (protocol.h),
 * and the agents refused for another protocol version.  Each one updates the
 * node table (nodes.c).
 */
#include "sched-int.h"
#include "beacon.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "usage.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/*
 * A thousand agents heartbeat every second, and jansson's parse of the small
 * body (a hash table and a dozen allocations) was a tenth of dtsched's CPU.
 * This reads only a strict subset of JSON; whatever is outside it -- escapes,
 * non-ASCII, reals, nesting, tasks, an inventory, a key twice, a known key
 * with an unexpected type, anything malformed -- returns -1 so that the
 * caller uses jansson, so behaviour (and every error message) stays jansson's.
 */
#define HB_MAX_KEYS 32

/*
 * May dtsched send a resync for n (NULL: an unknown node) now?  One per node
 * per DT_RESYNC_MIN_MS, and at most RESYNC_UNKNOWN_MAX a second in all for
 * unknown nodes (after a restart every beacon comes from one), so a replayed
 * beacon cannot make dtsched send more than it receives.  Lock held.
 */
#define RESYNC_UNKNOWN_MAX 2000

/*
 * The beacon socket's callback on the HTTP server's polling thread
 * (dt_httpd_add_fd): drain every datagram pending, BEACON_BATCH per
 * recvmmsg, and send the resyncs.  MSG_TRUNC in a message's flags means it
 * was longer than the buffer: sched_beacon() gets its real length and
 * refuses it as too large.
 */
#define BEACON_BATCH 32


static int node_name_ok(const char *s)
{
	return s && name_chars_ok(s, 255, "._-");
}

void heartbeat_from_json(const json_t *j, struct heartbeat *hb)
{
	memset(hb, 0, sizeof(*hb));
	hb->node = json_get_str(j, "node", NULL);
	hb->address = json_get_str(j, "address", NULL);
	hb->version = json_get_str(j, "version", NULL);
	hb->inventory_hash = json_get_str(j, "inventory_hash", NULL);
	hb->agent_started_at = json_get_str(j, "agent_started_at", NULL);
	hb->bin_dir = json_get_str(j, "bin_dir", NULL);
	hb->home = json_get_str(j, "home", NULL);
	hb->ssh_config = json_get_str(j, "ssh_config", NULL);
	hb->tasks_digest = json_get_str(j, "tasks_digest", NULL);
	hb->port = json_get_int(j, "port", 0);
	hb->seq = json_get_int(j, "seq", 0);
	hb->full = json_is_true(json_object_get(j, "full"));
	hb->tasks = json_object_get(j, "tasks");
	hb->has_tasks = hb->tasks != NULL;
	hb->inventory = json_object_get(j, "inventory");
	hb->usage = json_object_get(j, "usage");
}

/*
 * A heartbeat's "usage" (protocol.h) into the inventory we hold: free memory,
 * load and each GPU's memory use, utilisation and processes travel without the
 * rest of the inventory.  Only values of the expected types are taken.
 */
static void inventory_apply_usage(json_t *inv, const json_t *usage)
{
	json_t *gpus = json_object_get(inv, "gpus"), *u, *g, *v;
	size_t i, k;

	if (json_is_integer(v = json_object_get(usage, "mem_available")))
		json_object_set(inv, "mem_available", v);
	if (json_is_number(v = json_object_get(usage, "load1")))
		json_object_set(inv, "load1", v);
	json_array_foreach(json_object_get(usage, "gpus"), i, u) {
		json_t *index = json_object_get(u, "index");

		if (!json_is_integer(index))
			continue;
		json_array_foreach(gpus, k, g) {
			if (!json_equal(json_object_get(g, "index"), index))
				continue;
			if (json_is_integer(v = json_object_get(u, "memory_used")))
				json_object_set(g, "memory_used", v);
			if (json_is_integer(v = json_object_get(u, "utilization")))
				json_object_set(g, "utilization", v);
			if (json_is_array(v = json_object_get(u, "processes")))
				json_object_set(g, "processes", v);
			break;
		}
	}
}

static size_t hb_ws(const char *b, size_t i, size_t n)
{
	while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r'))
		i++;
	return i;
}

/* A string at b[i] == '"': printable ASCII without escapes, NUL-terminated in
 * place; the index after it, 0 when it is outside the subset. */
static size_t hb_string(char *b, size_t i, size_t n, const char **out)
{
	size_t start = ++i;

	for (; i < n && b[i] != '"'; i++)
		if ((unsigned char)b[i] < 0x20 || (unsigned char)b[i] > 0x7e || b[i] == '\\')
			return 0;
	if (i >= n)
		return 0;
	b[i] = '\0';
	*out = b + start;
	return i + 1;
}

int heartbeat_parse_fast(char *b, size_t n, struct heartbeat *hb)
{
	static const struct { const char *key; size_t off; } str_keys[] = {
		{ "node", offsetof(struct heartbeat, node) },
		{ "address", offsetof(struct heartbeat, address) },
		{ "version", offsetof(struct heartbeat, version) },
		{ "inventory_hash", offsetof(struct heartbeat, inventory_hash) },
		{ "agent_started_at", offsetof(struct heartbeat, agent_started_at) },
		{ "bin_dir", offsetof(struct heartbeat, bin_dir) },
		{ "home", offsetof(struct heartbeat, home) },
		{ "ssh_config", offsetof(struct heartbeat, ssh_config) },
		{ "tasks_digest", offsetof(struct heartbeat, tasks_digest) },
	};
	const char *keys[HB_MAX_KEYS];
	size_t nr_keys = 0, i;

	memset(hb, 0, sizeof(*hb));
	i = hb_ws(b, 0, n);
	if (i >= n || b[i] != '{')
		return -1;
	i = hb_ws(b, i + 1, n);
	if (i < n && b[i] == '}') {
		i++;
		goto end;
	}
	for (;;) {
		const char *key, *str = NULL;
		enum { V_STR, V_INT, V_BOOL, V_NULL, V_EMPTY_ARRAY } type;
		long long num = 0;
		int truth = 0, known = 0;

		if (i >= n || b[i] != '"' || !(i = hb_string(b, i, n, &key)))
			return -1;
		/* jansson (JSON_REJECT_DUPLICATES) refuses a key twice */
		if (nr_keys == HB_MAX_KEYS)
			return -1;
		for (size_t k = 0; k < nr_keys; k++)
			if (!strcmp(keys[k], key))
				return -1;
		keys[nr_keys++] = key;
		i = hb_ws(b, i, n);
		if (i >= n || b[i] != ':')
			return -1;
		i = hb_ws(b, i + 1, n);
		if (i >= n)
			return -1;
		if (b[i] == '"') {
			if (!(i = hb_string(b, i, n, &str)))
				return -1;
			type = V_STR;
		} else if (b[i] == '-' || (b[i] >= '0' && b[i] <= '9')) {
			/* an integer as JSON writes it: no leading zero, no fraction,
			 * no exponent, small enough for jansson's json_int_t */
			int neg = b[i] == '-', digits = 0;

			if (neg)
				i++;
			if (i >= n || b[i] < '0' || b[i] > '9' ||
			    (b[i] == '0' && i + 1 < n && b[i + 1] >= '0' && b[i + 1] <= '9'))
				return -1;
			for (; i < n && b[i] >= '0' && b[i] <= '9'; i++) {
				if (++digits > 18)
					return -1;
				num = num * 10 + (b[i] - '0');
			}
			if (i < n && (b[i] == '.' || b[i] == 'e' || b[i] == 'E'))
				return -1;
			if (neg)
				num = -num;
			type = V_INT;
		} else if (n - i >= 4 && !memcmp(b + i, "true", 4)) {
			i += 4;
			truth = 1;
			type = V_BOOL;
		} else if (n - i >= 5 && !memcmp(b + i, "false", 5)) {
			i += 5;
			type = V_BOOL;
		} else if (n - i >= 4 && !memcmp(b + i, "null", 4)) {
			i += 4;
			type = V_NULL;
		} else if (b[i] == '[') {
			i = hb_ws(b, i + 1, n);
			if (i >= n || b[i] != ']')
				return -1;
			i++;
			type = V_EMPTY_ARRAY;
		} else {
			return -1;
		}
		/* the known keys, with the types the handler reads them as */
		for (size_t k = 0; k < ARRAY_SIZE(str_keys) && !known; k++) {
			if (strcmp(key, str_keys[k].key))
				continue;
			if (type != V_STR)
				return -1;
			*(const char **)((char *)hb + str_keys[k].off) = str;
			known = 1;
		}
		if (!known) {
			if (!strcmp(key, "port")) {
				if (type != V_INT)
					return -1;
				hb->port = num;
			} else if (!strcmp(key, "seq")) {
				if (type != V_INT)
					return -1;
				hb->seq = num;
			} else if (!strcmp(key, "full")) {
				if (type != V_BOOL)
					return -1;
				hb->full = truth;
			} else if (!strcmp(key, "tasks")) {
				if (type != V_EMPTY_ARRAY)
					return -1;
				hb->has_tasks = 1;
			} else if (!strcmp(key, "inventory")) {
				return -1;
			}
		}
		i = hb_ws(b, i, n);
		if (i < n && b[i] == ',') {
			i = hb_ws(b, i + 1, n);
			continue;
		}
		if (i < n && b[i] == '}') {
			i++;
			break;
		}
		return -1;
	}
end:
	/* nothing but white space after the object (a NUL is not white space) */
	return hb_ws(b, i, n) == n ? 0 : -1;
}

int refused_recent(const struct sched *s, const json_t *r, long long now)
{
	return now - json_get_int(r, "mono", 0) <= s->o.dead_after_ms;
}

/*
 * A heartbeat of another protocol version: refused (426) and remembered, so
 * `dtctl nodes` lists the node as REFUSED and a job that cannot be placed
 * says why.  The node's own entry, if any, is left alone: without heartbeats
 * it goes SUSPECT, then DOWN, as for any agent dtsched cannot talk to.
 */
static void heartbeat_refuse(struct sched *s, struct dt_http_request *req,
			     struct dt_http_response *resp)
{
	json_t *body = json_loadb(req->body, req->body_len, 0, NULL);
	const char *name = json_get_str(body, "node", NULL);
	struct strbuf who = STRBUF_INIT;
	char at[DT_TIMESTAMP_LEN];

	if (name && node_name_ok(name)) {
		dt_timestamp(at, sizeof(at));
		pthread_mutex_lock(&s->lock);
		if (!json_object_get(s->refused, name))
			dtlog(DTLOG_WARN, "node '%s' (%s): its dtagent speaks protocol %d, dtsched %d: "
			      "refused until 'dtctl init' re-pushes the agents", name, req->remote,
			      req->protocol, DT_PROTOCOL_VERSION);
		json_object_set_new(s->refused, name, json_pack("{s:s, s:s, s:i, s:s, s:s, s:I}",
			"name", name, "address", req->remote, "protocol", req->protocol,
			"version", json_get_str(body, "version", ""), "at", at,
			"mono", (json_int_t)dt_mono_ms()));
		pthread_mutex_unlock(&s->lock);
		strbuf_addf(&who, "the dtagent of node '%s'", name);
	} else {
		strbuf_addstr(&who, "this dtagent");
	}
	dt_http_protocol_refuse(resp, req->protocol, who.buf);
	strbuf_release(&who);
	json_decref(body);
}

void sched_refused_note(struct sched *s, struct strbuf *sb)
{
	long long now = dt_mono_ms();
	const char *name;
	json_t *r;
	int n = 0;

	json_object_foreach(s->refused, name, r)
		n += refused_recent(s, r, now);
	if (!n)
		return;
	strbuf_addf(sb, "; %d agent%s refused for another protocol version (", n, n > 1 ? "s" : "");
	n = 0;
	json_object_foreach(s->refused, name, r)
		if (refused_recent(s, r, now))
			strbuf_addf(sb, "%s%s: %lld", n++ ? ", " : "", name,
				    json_get_int(r, "protocol", 0));
	strbuf_addf(sb, "; dtsched speaks %d): %s", DT_PROTOCOL_VERSION, DT_PROTOCOL_FIX);
}

void h_heartbeat(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct heartbeat hb;
	char fast[4096];
	json_t *t;
	int changed = 0, dirty = 0, derive = 0, want_inv = 0, stale;
	struct node *n;
	size_t i;

	if (req->protocol != DT_PROTOCOL_VERSION) {
		heartbeat_refuse(s, req, resp);
		return;
	}
	/* the fast reader on a copy of a small body; else jansson */
	if (req->body_len >= sizeof(fast) ||
	    (memcpy(fast, req->body, req->body_len + 1),
	     heartbeat_parse_fast(fast, req->body_len, &hb) < 0)) {
		if (dt_http_parse_body(req, resp) < 0)
			return;
		heartbeat_from_json(req->json, &hb);
	}
	if (!node_name_ok(hb.node) || hb.port <= 0 || hb.port > 65535 ||
	    (hb.tasks && !json_is_array(hb.tasks))) {
		dt_http_error(resp, 400, "a heartbeat needs 'node' (a node name), 'port' and a 'tasks' array");
		return;
	}
	pthread_mutex_lock(&s->lock);
	if (json_object_size(s->refused) && json_object_get(s->refused, hb.node)) {
		json_object_del(s->refused, hb.node);
		dtlog(DTLOG_INFO, "node '%s': its dtagent speaks protocol %d now", hb.node,
		      DT_PROTOCOL_VERSION);
	}
	n = node_find(s, hb.node);
	if (!n) {
		n = node_add(s, hb.node);
		dtlog(DTLOG_INFO, "node '%s' joined from %s", hb.node, req->remote);
		changed = 1;
	}
	s->heartbeats++;
	dirty |= node_str_set(&n->address, hb.address ? hb.address : req->remote);
	dirty |= n->port != (int)hb.port;
	n->port = (int)hb.port;
	n->last_hb_us = dt_now_us();
	n->last_hb_mono = dt_mono_ms();
	n->down_latched = 0;
	n->stopped = n->stop_grace = 0;
	/*
	 * The inventory travels only when it changed (protocol.h, inventory_hash):
	 * keep ours when the hash matches, ask for it when we do not have it.
	 */
	if (json_is_object(hb.inventory)) {
		if (!hb.inventory_hash || strcmp(n->inv_hash, hb.inventory_hash) || !n->inventory) {
			json_decref(n->inventory);
			n->inventory = json_incref(hb.inventory);
			/* memory and load change every second on a real node: the
			 * database copy (for display while DOWN) follows coarsely */
			derive = 1;
			if (!n->saved_hb_us)
				dirty = 1;
		}
		snprintf(n->inv_hash, sizeof(n->inv_hash), "%s",
			 hb.inventory_hash ? hb.inventory_hash : "");
	} else if (hb.inventory_hash && (!n->inventory || strcmp(n->inv_hash, hb.inventory_hash))) {
		want_inv = 1;
	}
	if (json_is_object(hb.usage) && n->inventory && !want_inv) {
		inventory_apply_usage(n->inventory, hb.usage);
		derive = 1;
	}
	if (!n->agent_started || strcmp(n->agent_started, hb.agent_started_at ? hb.agent_started_at : "")) {
		changed = 1;
		n->last_seq = 0;      /* another agent: its own seq */
	}
	/*
	 * A heartbeat older than one already taken from this agent (issue 26,
	 * A1): sent before a network cut, given up by the agent, delivered by
	 * TCP after the cut behind the newer one that carried the task's end.
	 * Its tasks are the past: taken, they would turn an ended task back to
	 * "running" for good (the agent, answered, never sends that end again).
	 */
	stale = hb.seq > 0 && hb.seq <= n->last_seq;
	if (stale)
		dtlog(DTLOG_INFO, "node '%s': heartbeat %lld came after %lld (delayed in the "
		      "network): its tasks are not taken", n->name, hb.seq, n->last_seq);
	/* what a beacon must match (protocol.h): seq above this, same digest */
	if (hb.seq > n->last_seq)
		n->last_seq = hb.seq;
	if (!stale)
		snprintf(n->tasks_digest, sizeof(n->tasks_digest), "%s",
			 hb.tasks_digest && strlen(hb.tasks_digest) == 16 ? hb.tasks_digest : "");
	dirty |= node_str_set(&n->agent_version, hb.version);
	node_str_set(&n->bin_dir, hb.bin_dir);
	node_str_set(&n->home, hb.home);
	node_str_set(&n->ssh_config, hb.ssh_config);
	node_str_set(&n->agent_started, hb.agent_started_at ? hb.agent_started_at : "");

	/* task states: write what changed */
	if (hb.has_tasks && !stale) {
		json_t *tasks = hb.tasks;
		json_t *seen = json_object();
		const char *id;
		int in_txn = 0, job_change = 0;

		json_array_foreach(tasks, i, t) {
			const char *tid = json_get_str(t, "id", NULL);
			json_t *old;

			if (!tid)
				continue;
			note_task_id(s, tid);
			json_object_set_new(seen, tid, json_true());
			old = json_object_get(n->tasks, tid);
			if (old && json_equal(old, t))
				continue;
			if (!in_txn++)
				db_exec(s, "BEGIN");
			db_save_task(s, n->name, t, NULL);
			json_object_set(n->tasks, tid, t);
			derive = 1;
			if (json_get_str(t, "job_id", NULL))
				job_change = 1;
		}
		/* drop from memory final tasks the agent no longer reports, once
		 * they ended DT_HEARTBEAT_RECENT_S ago (agents send a final task
		 * until a heartbeat with it was answered, then stop: the job and
		 * sweep code still read it here); with a full table, a live task
		 * the agent does not know is lost */
		for (void *it = json_object_iter(n->tasks); it;) {
			void *next = json_object_iter_next(n->tasks, it);

			id = json_object_iter_key(it);
			t = json_object_iter_value(it);
			if (!json_object_get(seen, id)) {
				if (hb.full && !task_state_final_str(json_get_str(t, "state", NULL))) {
					if (!in_txn++)
						db_exec(s, "BEGIN");
					json_object_set_new(t, "state", json_string(DT_TASK_LOST));
					json_object_set_new(t, "reason", json_string("unknown to its agent"));
					db_save_task(s, n->name, t, "unknown to its agent");
					dtlog(DTLOG_WARN, "task '%s' on '%s': its agent does not know it; lost",
					      id, n->name);
					derive = 1;
				} else if (task_state_final_str(json_get_str(t, "state", NULL)) &&
					   dt_timestamp_parse(json_get_str(t, "ended_at", "")) <
					   dt_now_us() - DT_HEARTBEAT_RECENT_S * 1000000LL) {
					json_object_del(n->tasks, id);
					derive = 1;
				}
			}
			it = next;
		}
		if (in_txn)
			db_exec(s, "COMMIT");
		json_decref(seen);
		if (job_change)
			sched_wake(s);
	}
	if (hb.full && !stale)
		n->want_full = 0;
	if (derive || changed || hb.full) {
		node_derive(n);
		node_check_health(s, n);
	}
	/* heartbeat times reach the database coarsely: state changes are what matter */
	if (n->last_hb_us - n->saved_hb_us >= HB_SAVE_US)
		dirty = 1;
	if (dirty)
		n->dirty = 1;
	if (changed)
		db_save_node(s, n);
	if (!strcmp(n->state, DT_NODE_DOWN)) {
		/*
		 * Back from DOWN (a network cut, a frozen host): what we hold of
		 * its tasks is from before, and the agent sends only changes.  Its
		 * next heartbeat carries its whole table, and a task it does not
		 * have is lost (below): no task stays "running" that nothing runs.
		 */
		n->want_full = 1;
	}
	if (!strcmp(n->state, DT_NODE_DOWN) || !strcmp(n->state, DT_NODE_SUSPECT))
		node_set_state(s, n, n->drained ? DT_NODE_DRAINED : DT_NODE_UP);
	/* written by hand like h_nodes (1000 a second: a jansson object and a
	 * dump each were a tenth of dtsched's time); states are plain words */
	strbuf_addf(&resp->text, "{\"protocol\":%d,\"state\":\"%s\",\"heartbeat_ms\":%lld,"
		    "\"dead_after_ms\":%lld,\"want_full\":%s,\"want_inventory\":%s%s,"
		    "\"beacons_seen\":%u}\n",
		    DT_PROTOCOL_VERSION, n->state, s->o.heartbeat_ms, s->o.dead_after_ms,
		    n->want_full ? "true" : "false", want_inv ? "true" : "false",
		    s->beacon_fd >= 0 ? ",\"beacon\":true" : "", n->beacons_since_http);
	n->beacons_since_http = 0;
	resp->content_type = "application/json";
	pthread_mutex_unlock(&s->lock);
}

static int resync_allowed(struct sched *s, struct node *n, long long now)
{
	if (n) {
		if (n->resync_mono && now - n->resync_mono < DT_RESYNC_MIN_MS)
			return 0;
		n->resync_mono = now;
		return 1;
	}
	if (now - s->resync_window_ms >= 1000) {
		s->resync_window_ms = now;
		s->resyncs_in_window = 0;
	}
	return s->resyncs_in_window++ < RESYNC_UNKNOWN_MAX;
}

size_t sched_beacon(struct sched *s, const void *buf, size_t len, long long now_s,
		    char *reply, size_t reply_size)
{
	struct dt_beacon b;
	enum dt_beacon_result r = dt_beacon_verify(&s->key, buf, len, now_s, &b);
	enum beacon_count why;
	struct node *n;
	long long now = dt_mono_ms();
	int rlen;

	if (r != DT_BEACON_OK) {
		pthread_mutex_lock(&s->lock);
		s->beacons[(enum beacon_count)r]++;
		pthread_mutex_unlock(&s->lock);
		return 0;     /* never answer what is not ours */
	}
	pthread_mutex_lock(&s->lock);
	n = node_find(s, b.node);
	if (!n) {
		why = BEACON_UNKNOWN_NODE;
	} else if (!n->agent_started || strcmp(n->agent_started, b.started)) {
		why = BEACON_MISMATCH;        /* another agent start than we know */
	} else if (b.seq <= n->last_seq) {
		s->beacons[BEACON_REPLAY]++;
		n->beacons_refused++;
		pthread_mutex_unlock(&s->lock);
		return 0;
	} else {
		n->last_seq = b.seq;
		if (!strcmp(n->state, DT_NODE_DOWN) || n->down_latched)
			why = BEACON_NODE_DOWN;
		else if (!n->last_hb_mono || n->want_full || !n->inventory ||
			 strcmp(n->inv_hash, b.inventory_hash) || strcmp(n->tasks_digest, b.tasks_digest))
			why = BEACON_MISMATCH;
		else
			why = BEACON_ACCEPTED;
	}
	s->beacons[why]++;
	if (why == BEACON_ACCEPTED) {
		/* what an idle HTTP heartbeat does to the node, and nothing more */
		n->beacons_accepted++;
		n->beacons_since_http++;
		n->last_hb_us = dt_now_us();
		n->last_hb_mono = now;
		if (n->last_hb_us - n->saved_hb_us >= HB_SAVE_US)
			n->dirty = 1;
		if (!strcmp(n->state, DT_NODE_SUSPECT))
			node_set_state(s, n, n->drained ? DT_NODE_DRAINED : DT_NODE_UP);
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	if (n)
		n->beacons_refused++;
	rlen = resync_allowed(s, n, now) ?
		dt_resync_encode(&s->key, b.node, b.seq, now_s, reply, reply_size) : -1;
	if (rlen > 0 && (size_t)rlen < len)
		s->resyncs_sent++;
	pthread_mutex_unlock(&s->lock);
	return rlen > 0 && (size_t)rlen < len ? (size_t)rlen : 0;
}

static void beacon_read(int fd, void *data)
{
	struct sched *s = data;
	char bufs[BEACON_BATCH][DT_BEACON_MAX + 1];   /* 16 KiB of the loop's stack */
	struct mmsghdr msgs[BEACON_BATCH];
	struct iovec iov[BEACON_BATCH];
	struct sockaddr_in from[BEACON_BATCH];
	char reply[DT_BEACON_MAX + 1];
	int got;

	do {
		long long now_s = (long long)time(NULL);

		memset(msgs, 0, sizeof(msgs));
		for (int i = 0; i < BEACON_BATCH; i++) {
			iov[i].iov_base = bufs[i];
			iov[i].iov_len = DT_BEACON_MAX + 1;
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
			msgs[i].msg_hdr.msg_name = &from[i];
			msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
		}
		got = recvmmsg(fd, msgs, BEACON_BATCH, MSG_DONTWAIT, NULL);
		for (int i = 0; i < got; i++) {
			size_t len = msgs[i].msg_len, rlen;

			if (s->beacons_ignored) {
				pthread_mutex_lock(&s->lock);
				s->beacons[BEACON_IGNORED]++;
				pthread_mutex_unlock(&s->lock);
				continue;
			}
			if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC)
				len = DT_BEACON_MAX + 1;
			rlen = sched_beacon(s, bufs[i], len, now_s, reply, sizeof(reply));
			if (rlen && msgs[i].msg_hdr.msg_namelen == sizeof(from[i]))
				sendto(fd, reply, rlen, MSG_DONTWAIT, (struct sockaddr *)&from[i],
				       sizeof(from[i]));
		}
	} while (got == BEACON_BATCH);
}

/* The UDP socket on the HTTP port's number; -1 (and a warning) if not. */
int beacon_open(struct sched *s)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), size = 1 << 20;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((unsigned short)dt_httpd_port(s->srv));
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	if (s->o.bind && *s->o.bind)
		inet_pton(AF_INET, s->o.bind, &sa.sin_addr);   /* checked by dt_httpd_start */
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		dtlog(DTLOG_WARN, "no UDP beacons: cannot bind UDP port %d: %s (agents keep "
		      "sending HTTP heartbeats)", dt_httpd_port(s->srv), strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
	if (dt_httpd_add_fd(s->srv, fd, beacon_read, s) < 0) {
		dtlog(DTLOG_WARN, "no UDP beacons: the HTTP server cannot serve another fd");
		close(fd);
		return -1;
	}
	return fd;
}
