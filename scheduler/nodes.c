/*
 * nodes.c - dtsched's node table: the nodes (sorted by name) and their tasks
 * as the agents report them, the UP / SUSPECT / DOWN / DRAINED state machine
 * and its tick (failure detection), drains and node health, the failures
 * counted against a node (quarantine.h), and their rows in state.db.
 * Heartbeats and beacons feed it (heartbeat.c); its HTTP handlers are in
 * nodes-api.c.
 */
#include "sched-int.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "quarantine.h"
#include "usage.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>


int task_state_final_str(const char *s)
{
	return s && (!strcmp(s, DT_TASK_EXITED) || !strcmp(s, DT_TASK_FAILED) ||
		     !strcmp(s, DT_TASK_LOST));
}

static int node_cmp(const void *key, const void *elem)
{
	return strcmp(key, (*(struct node *const *)elem)->name);
}

struct node *node_find(struct sched *s, const char *name)
{
	struct node **p;

	if (!s->nr)
		return NULL;          /* s->nodes may be NULL: bsearch must not see it */
	p = bsearch(name, s->nodes, s->nr, sizeof(*s->nodes), node_cmp);
	return p ? *p : NULL;
}

struct node *node_add(struct sched *s, const char *name)
{
	struct node *n = xcalloc(1, sizeof(*n));
	size_t i = 0;

	n->name = xstrdup(name);
	n->address = xstrdup("");
	n->state = DT_NODE_UP;
	n->health = "";
	n->tasks = json_object();
	n->want_full = 1;
	while (i < s->nr && strcmp(s->nodes[i]->name, name) < 0)
		i++;
	ALLOC_GROW(s->nodes, s->nr + 1, s->alloc);
	memmove(&s->nodes[i + 1], &s->nodes[i], (s->nr - i) * sizeof(*s->nodes));
	s->nodes[i] = n;
	s->nr++;
	return n;
}

void node_free(struct node *n)
{
	free(n->name);
	free(n->address);
	free(n->agent_version);
	free(n->agent_started);
	free(n->bin_dir);
	free(n->home);
	free(n->ssh_config);
	free(n->health_reason);
	free(n->drain_reason);
	json_decref(n->inventory);
	json_decref(n->tasks);
	free(n);
}

/* 1 when *dst changed */
int node_str_set(char **dst, const char *v)
{
	if (*dst && v && !strcmp(*dst, v))
		return 0;
	if (!*dst && !v)
		return 0;
	free(*dst);
	*dst = v ? xstrdup(v) : NULL;
	return 1;
}

/* health and its reason from the inventory's "health" (agent/health.h) */
static void node_derive_health(struct node *n)
{
	const json_t *h = json_object_get(n->inventory, "health"), *e;
	const char *st = json_get_str(h, "status", "");
	const char *why = NULL;
	size_t i;

	n->health = !strcmp(st, "bad") ? "bad" : !strcmp(st, "degraded") ? "degraded" :
		    !strcmp(st, "ok") ? "ok" : "";
	json_array_foreach(json_object_get(h, "events"), i, e)
		if (!strcmp(json_get_str(e, "severity", ""), n->health) && !why)
			why = json_get_str(e, "detail", NULL);
	node_str_set(&n->health_reason, why);
}

/*
 * Drain or resume n with a reason (kept in state.db's drains table, shown by
 * `dtctl nodes`); lock held.  reason NULL resumes.
 */
void node_set_drained(struct sched *s, struct node *n, const char *reason)
{
	sqlite3_stmt *st = NULL;

	if (reason && (!n->drained || !n->drain_reason || strcmp(n->drain_reason, reason)))
		events_add(s, "node.drained", json_pack("{s:s,s:s}", "node", n->name, "reason",
							 reason), NULL);
	else if (!reason && n->drained)
		events_add(s, "node.resumed", json_pack("{s:s}", "node", n->name), NULL);
	n->drained = reason != NULL;
	node_str_set(&n->drain_reason, reason);
	if (!strcmp(n->state, DT_NODE_UP) || !strcmp(n->state, DT_NODE_DRAINED))
		n->state = reason ? DT_NODE_DRAINED : DT_NODE_UP;
	db_save_node(s, n);
	if (sqlite3_prepare_v2(s->db, reason ? "INSERT OR REPLACE INTO drains VALUES(?, ?)" :
			       "DELETE FROM drains WHERE name = ?", -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, n->name, -1, SQLITE_TRANSIENT);
		if (reason)
			sqlite3_bind_text(st, 2, reason, -1, SQLITE_TRANSIENT);
		if (sqlite3_step(st) != SQLITE_DONE)
			dtlog(DTLOG_ERROR, "state.db: cannot save the drain of '%s': %s", n->name,
			      sqlite3_errmsg(s->db));
	}
	sqlite3_finalize(st);
	/* resumed: the failures that drained it are forgiven, not counted again */
	if (!reason && sqlite3_prepare_v2(s->db, "DELETE FROM node_failures WHERE node = ?", -1,
					  &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, n->name, -1, SQLITE_TRANSIENT);
		sqlite3_step(st);
		sqlite3_finalize(st);
	}
}

/*
 * A job's failure on node `name` that counts against it (quarantine_counts()):
 * kept in state.db's node_failures table (so a restarted dtsched still counts
 * it), and the node is drained when health.max_failures of them fall within
 * health.failure_window.  Lock held.
 */
void node_record_failure(struct sched *s, const char *name, int node_fail, const char *what)
{
	struct node *n = node_find(s, name);
	int max = s->cc ? s->cc->health.max_failures : 3;
	long long window = s->cc ? s->cc->health.failure_window_ms : 60 * 60 * 1000LL;
	long long now = dt_now_us();
	struct qfailure *v = NULL;
	size_t nr = 0, alloc = 0;
	struct strbuf why = STRBUF_INIT;
	sqlite3_stmt *st = NULL;

	if (!n)
		return;
	dtlog(DTLOG_INFO, "node '%s': failure counted against it: %s", name, what);
	if (sqlite3_prepare_v2(s->db, "INSERT INTO node_failures VALUES(?, ?, ?, ?)", -1, &st,
			       NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, now);
		sqlite3_bind_int(st, 3, node_fail);
		sqlite3_bind_text(st, 4, what, -1, SQLITE_TRANSIENT);
		if (sqlite3_step(st) != SQLITE_DONE)
			dtlog(DTLOG_ERROR, "state.db: cannot save a failure of '%s': %s", name,
			      sqlite3_errmsg(s->db));
	}
	sqlite3_finalize(st);
	st = NULL;
	/* older ones never count again */
	if (sqlite3_prepare_v2(s->db, "DELETE FROM node_failures WHERE at_us < ?", -1, &st,
			       NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, now - window * 1000);
		sqlite3_step(st);
	}
	sqlite3_finalize(st);
	st = NULL;
	if (n->drained || sqlite3_prepare_v2(s->db, "SELECT at_us, node_fail, what FROM "
					     "node_failures WHERE node = ? ORDER BY at_us", -1,
					     &st, NULL) != SQLITE_OK)
		goto out;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	while (sqlite3_step(st) == SQLITE_ROW) {
		ALLOC_GROW(v, nr + 1, alloc);
		v[nr].at_us = sqlite3_column_int64(st, 0);
		v[nr].node_fail = sqlite3_column_int(st, 1);
		v[nr].what = xstrdup((const char *)sqlite3_column_text(st, 2));
		nr++;
	}
	if (quarantine_check(v, nr, now, window, max, &why) >= max && max > 0) {
		dtlog(DTLOG_WARN, "node '%s' drained: %s", name, why.buf);
		node_set_drained(s, n, why.buf);
	}
out:
	sqlite3_finalize(st);
	for (size_t i = 0; i < nr; i++)
		free((char *)v[i].what);
	free(v);
	strbuf_release(&why);
}

/*
 * A node whose health turned bad is drained with the reason, so no new work
 * lands there (docs/agents.md, "Node health"); it stays drained until
 * `dtctl resume` after the GPU is reset or replaced, never silently.  Lock held.
 */
void node_check_health(struct sched *s, struct node *n)
{
	struct strbuf why = STRBUF_INIT;
	char at[DT_TIMESTAMP_LEN];
	const char *was = n->health_evented ? n->health_evented : "";

	/* a health finding (or its end) is an event; the first "ok" of a node is not */
	if (strcmp(was, n->health) && (*was || (*n->health && strcmp(n->health, "ok"))))
		events_add(s, "node.health", json_pack("{s:s,s:s,s:s,s:s?}", "node", n->name,
			   "health", n->health, "from", was, "reason", n->health_reason), NULL);
	n->health_evented = n->health;
	if (strcmp(n->health, "bad") || n->drained)
		return;
	dt_timestamp(at, sizeof(at));
	strbuf_addf(&why, "auto: %s (%.19s)", n->health_reason ? n->health_reason : "health bad", at);
	dtlog(DTLOG_WARN, "node '%s' drained: %s", n->name, why.buf);
	node_set_drained(s, n, why.buf);
	strbuf_release(&why);
}

/* gpus_total/used, utilisation and memory from the inventory and tasks. */
void node_derive(struct node *n)
{
	json_t *gpus = json_object_get(n->inventory, "gpus"), *g, *t;
	size_t i;
	const char *id;
	unsigned char used[NODE_MAX_GPUS] = { 0 };
	double util = 0;

	n->gpus_total = (int)json_array_size(gpus);
	n->cpus = (int)json_get_int(n->inventory, "cpus", 0);
	n->mem_total = json_get_int(n->inventory, "mem_total", 0);
	n->mem_available = json_get_int(n->inventory, "mem_available", 0);
	json_array_foreach(gpus, i, g) {
		util += (double)json_get_int(g, "utilization", 0);
		if (i < sizeof(used) && json_array_size(json_object_get(g, "processes")))
			used[i] = 1;
	}
	n->gpu_util = n->gpus_total ? util / n->gpus_total : 0;
	node_derive_health(n);
	n->tasks_running = 0;
	memset(n->nonjob_gpus, 0, sizeof(n->nonjob_gpus));
	json_object_foreach(n->tasks, id, t) {
		const char *cvd = json_get_str(t, "cuda_visible_devices", NULL);

		int nonjob = !json_get_str(t, "job_id", NULL);

		if (task_state_final_str(json_get_str(t, "state", NULL)))
			continue;
		n->tasks_running++;
		while (cvd && *cvd) {
			char *end;
			long d = strtol(cvd, &end, 10);

			if (end == cvd)
				break;
			if (d >= 0 && d < (long)sizeof(used) && d < n->gpus_total)
				used[d] = 1;
			if (d >= 0 && d < NODE_MAX_GPUS && nonjob)   /* the reader bounds it */
				n->nonjob_gpus[d / 64] |= 1ULL << (d % 64);
			cvd = *end == ',' ? end + 1 : end;
			if (end == cvd && *cvd)
				break;
		}
	}
	n->gpus_used = 0;
	for (int k = 0; k < n->gpus_total && k < (int)sizeof(used); k++)
		n->gpus_used += used[k];
}

/* Mark every non-final task of n lost (NODE_FAIL or another reason). */
static int node_lose_tasks(struct sched *s, struct node *n, const char *reason)
{
	json_t *t;
	const char *id;
	int lost = 0;

	json_object_foreach(n->tasks, id, t) {
		if (task_state_final_str(json_get_str(t, "state", NULL)))
			continue;
		json_object_set_new(t, "state", json_string(DT_TASK_LOST));
		json_object_set_new(t, "reason", json_string(reason));
		db_save_task(s, n->name, t, reason);
		lost++;
	}
	return lost;
}

int node_gone(const struct node *n)
{
	return !n || (!strcmp(n->state, DT_NODE_DOWN) && !n->stop_grace);
}

/* The node's live tasks are lost (NODE_FAIL): it is down and nobody watches them. */
static void node_fail_tasks(struct sched *s, struct node *n)
{
	int lost = node_lose_tasks(s, n, "NODE_FAIL");

	s->nodes_failed++;
	if (lost)
		dtlog(DTLOG_WARN, "node '%s' is down: %d task(s) marked lost (NODE_FAIL)",
		      n->name, lost);
	node_derive(n);
}

void node_set_state(struct sched *s, struct node *n, const char *state)
{
	if (!strcmp(n->state, state))
		return;
	dtlog(!strcmp(state, DT_NODE_DOWN) ? DTLOG_WARN : DTLOG_INFO, "node '%s': %s -> %s",
	      n->name, n->state, state);
	if (!strcmp(state, DT_NODE_DOWN))
		node_fail_tasks(s, n);
	if (!strcmp(state, DT_NODE_DOWN) || !strcmp(n->state, DT_NODE_DOWN))
		events_add(s, !strcmp(state, DT_NODE_DOWN) ? "node.down" : "node.up",
			   json_pack("{s:s,s:s}", "node", n->name, "from", n->state), NULL);
	n->state = state;
	db_save_node(s, n);
}

void nodes_tick(struct sched *s)
{
	long long now = dt_mono_ms();

	for (size_t i = 0; i < s->nr; i++) {
		struct node *n = s->nodes[i];
		long long seen = n->last_hb_mono ? n->last_hb_mono : s->started_mono;
		long long age = now - seen;
		const char *st;

		if (n->stop_grace) {
			/* DOWN since its agent stopped; its tasks wait out dead_after */
			if (age <= s->o.dead_after_ms)
				continue;
			n->stop_grace = 0;
			node_fail_tasks(s, n);
			db_save_node(s, n);
			continue;
		}
		if (n->down_latched || age > s->o.dead_after_ms)
			st = DT_NODE_DOWN;
		else if (age > s->o.dead_after_ms / 2)
			st = DT_NODE_SUSPECT;
		else
			st = n->drained ? DT_NODE_DRAINED : DT_NODE_UP;
		node_set_state(s, n, st);
	}
}

void nodes_flush(struct sched *s)
{
	int any = 0;

	for (size_t i = 0; i < s->nr; i++)
		if (s->nodes[i]->dirty) {
			if (!any++)
				db_exec(s, "BEGIN");
			db_save_node(s, s->nodes[i]);
		}
	if (any)
		db_exec(s, "COMMIT");
}

/* "j-N.<attempt>.r<rank>" (launch.c): what the agents know raises the next job id */
void note_task_id(struct sched *s, const char *id)
{
	char *end;
	long long v;

	if (strncmp(id, "j-", 2) || !isdigit((unsigned char)id[2]))
		return;
	v = strtoll(id + 2, &end, 10);
	if (*end == '.' && v > s->agents_seq_max)
		s->agents_seq_max = v;
}

static int db_load(struct sched *s)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(s->db, "SELECT name, address, port, state, drained, "
			       "last_heartbeat_us, inventory, agent_version, agent_started_at "
			       "FROM nodes ORDER BY name", -1, &st, NULL) != SQLITE_OK)
		return -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		struct node *n = node_add(s, (const char *)sqlite3_column_text(st, 0));
		const char *state = (const char *)sqlite3_column_text(st, 3);
		const char *inv = (const char *)sqlite3_column_text(st, 6);

		node_str_set(&n->address, (const char *)sqlite3_column_text(st, 1));
		n->port = sqlite3_column_int(st, 2);
		n->drained = sqlite3_column_int(st, 4);
		n->last_hb_us = sqlite3_column_int64(st, 5);
		if (inv)
			n->inventory = json_loads(inv, 0, NULL);
		node_str_set(&n->agent_version, (const char *)sqlite3_column_text(st, 7));
		node_str_set(&n->agent_started, (const char *)sqlite3_column_text(st, 8));
		if (state && !strcmp(state, DT_NODE_DOWN)) {
			n->state = DT_NODE_DOWN;
			n->down_latched = 1;
		} else if (state && !strcmp(state, DT_NODE_SUSPECT)) {
			n->state = DT_NODE_SUSPECT;
		} else {
			n->state = n->drained ? DT_NODE_DRAINED : DT_NODE_UP;
		}
	}
	sqlite3_finalize(st);
	if (sqlite3_prepare_v2(s->db, "SELECT node, data FROM tasks", -1, &st, NULL) != SQLITE_OK)
		return -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		struct node *n = node_find(s, (const char *)sqlite3_column_text(st, 0));
		const char *data = (const char *)sqlite3_column_text(st, 1);
		json_t *t = data ? json_loads(data, 0, NULL) : NULL;

		if (n && t && json_get_str(t, "id", NULL))
			json_object_set(n->tasks, json_get_str(t, "id", NULL), t);
		json_decref(t);
	}
	sqlite3_finalize(st);
	if (sqlite3_prepare_v2(s->db, "SELECT name, reason FROM drains", -1, &st, NULL) == SQLITE_OK) {
		while (sqlite3_step(st) == SQLITE_ROW) {
			struct node *n = node_find(s, (const char *)sqlite3_column_text(st, 0));

			if (n && n->drained)
				node_str_set(&n->drain_reason, (const char *)sqlite3_column_text(st, 1));
		}
		sqlite3_finalize(st);
	}
	for (size_t i = 0; i < s->nr; i++) {
		node_derive(s->nodes[i]);
		/* what the stored inventory says was told before the restart: no event again */
		s->nodes[i]->health_evented = s->nodes[i]->health;
	}
	return 0;
}

int nodes_init(struct sched *s)
{
	if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO nodes(name, address, port, state, "
			       "drained, last_heartbeat_us, inventory, agent_version, agent_started_at) "
			       "VALUES(?,?,?,?,?,?,?,?,?)", -1, &s->st_node, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO tasks(node, id, state, exit_code, "
			       "job_id, rank, reason, updated_us, data) VALUES(?,?,?,?,?,?,?,?,?)",
			       -1, &s->st_task, NULL) != SQLITE_OK)
		return -1;
	return db_load(s);
}
