/*
 * sched.c - dtsched's node table, heartbeats, failure detection, SQLite
 * persistence and HTTP handlers (see sched.h).
 */
#include "sched.h"
#include "sched-int.h"
#include "promtext.h"
#include "auth.h"
#include "beacon.h"
#include "daemon.h"
#include "dthome.h"
#include "httpd.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "quarantine.h"
#include "units.h"
#include "usage.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS 100
#define FLUSH_MS 5000
/* a node's heartbeat time and inventory are written at most this often
 * (state changes, drain/resume and new agents at once) */
#define HB_SAVE_US (60 * 1000000LL)

int sched_fs_is_network(long f_type)
{
	switch ((unsigned long)f_type) {
	case 0x6969UL:        /* NFS */
	case 0xff534d42UL:    /* CIFS */
	case 0xfe534d42UL:    /* SMB2 */
	case 0x517bUL:        /* SMB */
	case 0x0bd00bd0UL:    /* Lustre */
	case 0x47504653UL:    /* GPFS */
	case 0x00c36400UL:    /* Ceph */
	case 0x01021997UL:    /* 9p */
	case 0x65735546UL:    /* FUSE (sshfs, ...): may be remote, refuse to be safe */
		return 1;
	}
	return 0;
}

static int task_state_final_str(const char *s)
{
	return s && (!strcmp(s, DT_TASK_EXITED) || !strcmp(s, DT_TASK_FAILED) ||
		     !strcmp(s, DT_TASK_LOST));
}

/* ---------------------------------------------------------------- SQLite */

static const char schema[] =
	"PRAGMA journal_mode=WAL;"
	"PRAGMA synchronous=NORMAL;"
	"CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);"
	"CREATE TABLE IF NOT EXISTS nodes("
	"  name TEXT PRIMARY KEY, address TEXT, port INTEGER, state TEXT,"
	"  drained INTEGER NOT NULL DEFAULT 0, last_heartbeat_us INTEGER,"
	"  inventory TEXT, agent_version TEXT, agent_started_at TEXT);"
	"CREATE TABLE IF NOT EXISTS tasks("
	"  node TEXT NOT NULL, id TEXT NOT NULL, state TEXT NOT NULL, exit_code INTEGER,"
	"  job_id TEXT, rank INTEGER, reason TEXT, updated_us INTEGER, data TEXT,"
	"  PRIMARY KEY(node, id));"
	"CREATE INDEX IF NOT EXISTS tasks_job ON tasks(job_id);"
	"CREATE TABLE IF NOT EXISTS drains(name TEXT PRIMARY KEY, reason TEXT NOT NULL);"
	"CREATE TABLE IF NOT EXISTS fabric_baselines(key TEXT PRIMARY KEY, value REAL NOT NULL);"
	/* failures counted against a node (quarantine.h), until it is resumed */
	"CREATE TABLE IF NOT EXISTS node_failures(node TEXT NOT NULL, at_us INTEGER NOT NULL,"
	"  node_fail INTEGER NOT NULL, what TEXT NOT NULL);"
	"CREATE INDEX IF NOT EXISTS node_failures_node ON node_failures(node, at_us);"
	"INSERT OR IGNORE INTO meta VALUES('schema', '1');";

int db_exec(struct sched *s, const char *sql)
{
	char *msg = NULL;

	if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		dtlog(DTLOG_ERROR, "state.db: %s: %s", sql, msg ? msg : "?");
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

/*
 * One transaction that nests: outside a transaction SAVEPOINT begins one and
 * RELEASE commits it; inside (a sweep submitting a trial, jobs_step() around
 * it) they only mark a point.  With journal_mode=WAL and synchronous=NORMAL a
 * commit appends to state.db-wal and returns without fsync: committed rows
 * survive dtsched being killed; a power loss can lose the commits made since
 * the last checkpoint (every 1000 WAL pages, which fsyncs).
 */
void db_begin(struct sched *s)
{
	db_exec(s, "SAVEPOINT dt");
}

/*
 * -1 when the commit cannot be written (full disk, I/O error): then err (may
 * be NULL) gets SQLite's reason and everything since db_begin() is rolled
 * back, so that nothing half-recorded stays in the connection's transaction.
 * Nested, RELEASE only marks a point: the outermost commit is what can fail.
 */
int db_commit(struct sched *s, struct strbuf *err)
{
	if (!db_exec(s, "RELEASE dt"))
		return 0;
	if (err)
		strbuf_addstr(err, sqlite3_errmsg(s->db));
	db_rollback(s);
	return -1;
}

void db_rollback(struct sched *s)
{
	if (sqlite3_get_autocommit(s->db))
		return;          /* SQLite rolled it back itself (SQLITE_FULL may) */
	if (db_exec(s, "ROLLBACK TO dt") < 0 || db_exec(s, "RELEASE dt") < 0)
		db_exec(s, "ROLLBACK");
}

static void db_save_node(struct sched *s, struct node *n)
{
	sqlite3_stmt *st = s->st_node;
	struct strbuf inv = STRBUF_INIT;

	if (n->inventory)
		json_append(&inv, n->inventory);
	sqlite3_reset(st);
	sqlite3_bind_text(st, 1, n->name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, n->address, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(st, 3, n->port);
	sqlite3_bind_text(st, 4, n->state, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 5, n->drained);
	sqlite3_bind_int64(st, 6, n->last_hb_us);
	if (n->inventory)
		sqlite3_bind_text(st, 7, inv.buf, (int)inv.len, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 7);
	sqlite3_bind_text(st, 8, n->agent_version, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 9, n->agent_started, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) != SQLITE_DONE)
		dtlog(DTLOG_ERROR, "state.db: cannot save node '%s': %s", n->name, sqlite3_errmsg(s->db));
	n->dirty = 0;
	n->saved_hb_us = n->last_hb_us;
	strbuf_release(&inv);
}

static void db_save_task(struct sched *s, const char *node, json_t *t, const char *reason)
{
	sqlite3_stmt *st = s->st_task;
	struct strbuf data = STRBUF_INIT;
	json_t *v;

	json_append(&data, t);
	sqlite3_reset(st);
	sqlite3_bind_text(st, 1, node, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, json_get_str(t, "id", ""), -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 3, json_get_str(t, "state", "?"), -1, SQLITE_TRANSIENT);
	v = json_object_get(t, "exit_code");
	if (json_is_integer(v))
		sqlite3_bind_int64(st, 4, json_integer_value(v));
	else
		sqlite3_bind_null(st, 4);
	if (json_get_str(t, "job_id", NULL))
		sqlite3_bind_text(st, 5, json_get_str(t, "job_id", NULL), -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 5);
	v = json_object_get(t, "rank");
	if (json_is_integer(v))
		sqlite3_bind_int64(st, 6, json_integer_value(v));
	else
		sqlite3_bind_null(st, 6);
	if (reason)
		sqlite3_bind_text(st, 7, reason, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 7);
	sqlite3_bind_int64(st, 8, dt_now_us());
	sqlite3_bind_text(st, 9, data.buf, (int)data.len, SQLITE_TRANSIENT);
	if (sqlite3_step(st) != SQLITE_DONE)
		dtlog(DTLOG_ERROR, "state.db: cannot save task '%s': %s",
		      json_get_str(t, "id", ""), sqlite3_errmsg(s->db));
	strbuf_release(&data);
}

/* ------------------------------------------------------------ node table */

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
static int set_str(char **dst, const char *v)
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
	set_str(&n->health_reason, why);
}

/*
 * Drain or resume n with a reason (kept in state.db's drains table, shown by
 * `dtctl nodes`); lock held.  reason NULL resumes.
 */
void node_set_drained(struct sched *s, struct node *n, const char *reason)
{
	sqlite3_stmt *st = NULL;

	n->drained = reason != NULL;
	set_str(&n->drain_reason, reason);
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
static void node_check_health(struct sched *s, struct node *n)
{
	struct strbuf why = STRBUF_INIT;
	char at[DT_TIMESTAMP_LEN];

	if (strcmp(n->health, "bad") || n->drained)
		return;
	dt_timestamp(at, sizeof(at));
	strbuf_addf(&why, "auto: %s (%.19s)", n->health_reason ? n->health_reason : "health bad", at);
	dtlog(DTLOG_WARN, "node '%s' drained: %s", n->name, why.buf);
	node_set_drained(s, n, why.buf);
	strbuf_release(&why);
}

/* gpus_total/used, utilisation and memory from the inventory and tasks. */
static void node_derive(struct node *n)
{
	json_t *gpus = json_object_get(n->inventory, "gpus"), *g, *t;
	size_t i;
	const char *id;
	unsigned char used[1024] = { 0 };
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
	json_object_foreach(n->tasks, id, t) {
		const char *cvd = json_get_str(t, "cuda_visible_devices", NULL);

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

static void node_set_state(struct sched *s, struct node *n, const char *state)
{
	if (!strcmp(n->state, state))
		return;
	dtlog(!strcmp(state, DT_NODE_DOWN) ? DTLOG_WARN : DTLOG_INFO, "node '%s': %s -> %s",
	      n->name, n->state, state);
	if (!strcmp(state, DT_NODE_DOWN))
		node_fail_tasks(s, n);
	n->state = state;
	db_save_node(s, n);
}

static void tick(struct sched *s)
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

static void flush_dirty(struct sched *s)
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

/*
 * This state.db's random id, made with it: the tasks it starts carry it, so
 * that an agent tells a finished task of an earlier head (whose state.db was
 * lost) from a retried start of this one's (agent.c, task_start).
 */
static int head_id_load(struct sched *s)
{
	char hex[sizeof(s->head_id)];
	sqlite3_stmt *st;
	int ret = -1;

	if (dt_random_hex(hex, sizeof(hex) / 2) < 0 ||
	    sqlite3_prepare_v2(s->db, "INSERT OR IGNORE INTO meta VALUES('head_id', ?)", -1, &st,
			       NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_text(st, 1, hex, -1, SQLITE_TRANSIENT);
	sqlite3_step(st);
	sqlite3_finalize(st);
	if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key='head_id'", -1, &st,
			       NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0)) {
		snprintf(s->head_id, sizeof(s->head_id), "%s",
			 (const char *)sqlite3_column_text(st, 0));
		ret = 0;
	}
	sqlite3_finalize(st);
	return ret;
}

/* "j-N.<attempt>.r<rank>" (launch.c): what the agents know raises the next job id */
static void note_task_id(struct sched *s, const char *id)
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

		set_str(&n->address, (const char *)sqlite3_column_text(st, 1));
		n->port = sqlite3_column_int(st, 2);
		n->drained = sqlite3_column_int(st, 4);
		n->last_hb_us = sqlite3_column_int64(st, 5);
		if (inv)
			n->inventory = json_loads(inv, 0, NULL);
		set_str(&n->agent_version, (const char *)sqlite3_column_text(st, 7));
		set_str(&n->agent_started, (const char *)sqlite3_column_text(st, 8));
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
				set_str(&n->drain_reason, (const char *)sqlite3_column_text(st, 1));
		}
		sqlite3_finalize(st);
	}
	for (size_t i = 0; i < s->nr; i++)
		node_derive(s->nodes[i]);
	return 0;
}

/* -------------------------------------------------------------- handlers */

static int node_name_ok(const char *s)
{
	return s && name_chars_ok(s, 255, "._-");
}

/* ------------------------------------------------------------ heartbeats */

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

/*
 * A thousand agents heartbeat every second, and jansson's parse of the small
 * body (a hash table and a dozen allocations) was a tenth of dtsched's CPU.
 * This reads only a strict subset of JSON; whatever is outside it -- escapes,
 * non-ASCII, reals, nesting, tasks, an inventory, a key twice, a known key
 * with an unexpected type, anything malformed -- returns -1 so that the
 * caller uses jansson, so behaviour (and every error message) stays jansson's.
 */
#define HB_MAX_KEYS 32

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

/* ------------------------------------------------- refused agents */

static int refused_recent(const struct sched *s, const json_t *r, long long now)
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

static void h_heartbeat(struct dt_http_request *req, struct dt_http_response *resp, void *data)
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
	dirty |= set_str(&n->address, hb.address ? hb.address : req->remote);
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
	dirty |= set_str(&n->agent_version, hb.version);
	set_str(&n->bin_dir, hb.bin_dir);
	set_str(&n->home, hb.home);
	set_str(&n->ssh_config, hb.ssh_config);
	set_str(&n->agent_started, hb.agent_started_at ? hb.agent_started_at : "");

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

/* ------------------------------------------------------------- beacons */

/*
 * May dtsched send a resync for n (NULL: an unknown node) now?  One per node
 * per DT_RESYNC_MIN_MS, and at most RESYNC_UNKNOWN_MAX a second in all for
 * unknown nodes (after a restart every beacon comes from one), so a replayed
 * beacon cannot make dtsched send more than it receives.  Lock held.
 */
#define RESYNC_UNKNOWN_MAX 2000

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

/*
 * The beacon socket's callback on the HTTP server's polling thread
 * (dt_httpd_add_fd): drain every datagram pending, BEACON_BATCH per
 * recvmmsg, and send the resyncs.  MSG_TRUNC in a message's flags means it
 * was longer than the buffer: sched_beacon() gets its real length and
 * refuses it as too large.
 */
#define BEACON_BATCH 32

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
static int beacon_open(struct sched *s)
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

static void h_nodes(struct dt_http_request *req, struct dt_http_response *resp, void *data)
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

	pthread_mutex_lock(&s->lock);
	n = node_find(s, name);
	if (!n) {
		dt_http_error(resp, 404, "no node '%s' (known nodes are those whose agent has sent a heartbeat)", name);
	} else {
		if (drain >= 0 && n->drained != drain) {
			dtlog(DTLOG_INFO, "node '%s' %s", name, drain ? "drained" : "resumed");
			node_set_drained(s, n, drain ? "by dtctl drain" : NULL);
		}
		dt_http_json(resp, 200, json_pack("{s:o}", "node", node_detail_json(n)));
	}
	pthread_mutex_unlock(&s->lock);
}

static void h_node(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	node_reply(data, req, resp, -1);
}

static void h_node_drain(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	node_reply(data, req, resp, 1);
}

static void h_node_resume(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	node_reply(data, req, resp, 0);
}

/*
 * POST /v1/nodes/<name>/stopped: the agent stops on purpose (protocol.h).  The
 * node is DOWN at once, so no job is placed there in the dead_after it would
 * otherwise take to notice; its tasks keep running under their supervisors
 * and are kept until dead_after, for an agent restart to adopt.
 */
static void h_node_stopped(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	const char *name = dt_http_arg(req, "name"), *started;
	struct node *n;

	if (dt_http_parse_body(req, resp) < 0)
		return;
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
		n->last_hb_mono = dt_mono_ms();   /* dead_after counts from now */
		n->state = DT_NODE_DOWN;
		db_save_node(s, n);
		dt_http_json(resp, 200, json_pack("{s:o}", "node", node_detail_json(n)));
		sched_wake(s);
	}
	pthread_mutex_unlock(&s->lock);
}

static void h_tasks(struct dt_http_request *req, struct dt_http_response *resp, void *data)
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

static void h_status(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;

	dt_http_json(resp, 200, json_pack("{s:s,s:s,s:i,s:s,s:o,s:I,s:I,s:I}",
		"program", "dtsched", "version", DT_VERSION, "pid", (int)getpid(), "name", "head",
		"started_at", json_timestamp(s->started_us),
		"uptime_ms", (json_int_t)(dt_mono_ms() - s->started_mono),
		"heartbeat_ms", (json_int_t)s->o.heartbeat_ms,
		"dead_after_ms", (json_int_t)s->o.dead_after_ms));
}

/* Sample name{key="value"} for a one-label family. */
static void sample1(struct strbuf *o, const char *name, const char *key, const char *value,
		    double v)
{
	const char *l[] = { key, value, NULL };

	prom_sample(o, name, key ? l : NULL, v);
}

static void h_metrics(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	static const char *const states[] = { DT_NODE_UP, DT_NODE_SUSPECT, DT_NODE_DOWN, DT_NODE_DRAINED };
	static const char *const why[NR_BEACON_COUNTS] = {
		[BEACON_ACCEPTED] = "accepted", [BEACON_TOO_LARGE] = "too_large",
		[BEACON_VERSION] = "version", [BEACON_MALFORMED] = "malformed",
		[BEACON_STALE] = "stale", [BEACON_BAD_MAC] = "bad_mac",
		[BEACON_REPLAY] = "replay", [BEACON_UNKNOWN_NODE] = "unknown_node",
		[BEACON_NODE_DOWN] = "node_down", [BEACON_MISMATCH] = "mismatch",
		[BEACON_IGNORED] = "ignored",
	};
	static const char *const refused[] = { "unauthorized", "too_large", "bad_request",
					       "not_found" };
	struct dt_httpd_stats st;
	struct strbuf *o = &resp->text;
	static const char *const healths[] = { "ok", "degraded", "bad" };
	int count[4] = { 0 }, health[3] = { 0 }, gpus = 0, used = 0, running = 0;

	memset(&st, 0, sizeof(st));
	pthread_mutex_lock(&s->lock);
	if (s->srv)   /* NULL once dtsched stops (the server is being freed) */
		dt_httpd_get_stats(s->srv, &st);
	for (size_t i = 0; i < s->nr; i++) {
		for (int k = 0; k < 4; k++)
			if (!strcmp(s->nodes[i]->state, states[k]))
				count[k]++;
		for (int k = 0; k < 3; k++)
			if (!strcmp(s->nodes[i]->health, healths[k]))
				health[k]++;
		gpus += s->nodes[i]->gpus_total;
		used += s->nodes[i]->gpus_used;
		running += s->nodes[i]->tasks_running;
	}
	prom_family(o, "dtsched_nodes", "gauge", "Nodes by state.");
	for (int k = 0; k < 4; k++)
		sample1(o, "dtsched_nodes", "state", states[k], count[k]);
	prom_family(o, "dtsched_nodes_health", "gauge",
		    "Nodes by the health their agent reports (agent/health.h).");
	for (int k = 0; k < 3; k++)
		sample1(o, "dtsched_nodes_health", "health", healths[k], health[k]);
	/* capacity and usage are two gauges, so sum() and ratios work */
	prom_family(o, "dtsched_gpus", "gauge", "GPUs of all nodes (capacity).");
	sample1(o, "dtsched_gpus", NULL, NULL, gpus);
	prom_family(o, "dtsched_gpus_used", "gauge", "GPUs reserved by running jobs.");
	sample1(o, "dtsched_gpus_used", NULL, NULL, used);
	prom_family(o, "dtsched_tasks_running", "gauge", "Tasks the agents report running.");
	sample1(o, "dtsched_tasks_running", NULL, NULL, running);
	prom_family(o, "dtsched_heartbeats_total", "counter", "HTTP heartbeats received.");
	sample1(o, "dtsched_heartbeats_total", NULL, NULL, (double)s->heartbeats);
	prom_family(o, "dtsched_node_failures_total", "counter",
		    "Nodes marked DOWN for missing heartbeats.");
	sample1(o, "dtsched_node_failures_total", NULL, NULL, (double)s->nodes_failed);
	prom_family(o, "dtsched_beacons_total", "counter",
		    "UDP beacons by result: accepted, or why refused.");
	for (int k = 0; k < NR_BEACON_COUNTS; k++)
		sample1(o, "dtsched_beacons_total", "result", why[k], (double)s->beacons[k]);
	prom_family(o, "dtsched_beacon_resyncs_total", "counter",
		    "Resyncs asked of agents whose beacon did not match their last heartbeat.");
	sample1(o, "dtsched_beacon_resyncs_total", NULL, NULL, (double)s->resyncs_sent);
	jobs_metrics(s, o);
	sweeps_metrics(s, o);
	pthread_mutex_unlock(&s->lock);
	prom_family(o, "dtsched_requests_total", "counter", "HTTP requests served.");
	sample1(o, "dtsched_requests_total", NULL, NULL, (double)st.requests);
	prom_family(o, "dtsched_requests_refused_total", "counter", "Requests refused, by reason.");
	{
		unsigned long long v[] = { st.unauthorized, st.too_large, st.bad_request,
					   st.not_found };

		for (size_t k = 0; k < ARRAY_SIZE(refused); k++)
			sample1(o, "dtsched_requests_refused_total", "reason", refused[k], (double)v[k]);
	}
	prom_family(o, "dtsched_connections", "gauge", "Open HTTP connections; unsigned: no "
		    "signed request yet (evictable in a flood).");
	sample1(o, "dtsched_connections", "kind", "all", (double)st.conns_open);
	sample1(o, "dtsched_connections", "kind", "unsigned", (double)st.conns_unsigned);
	prom_family(o, "dtsched_connections_closed_total", "counter", "Connections closed "
		    "without a signed request: no request in time, or evicted in a flood.");
	sample1(o, "dtsched_connections_closed_total", "reason", "no_request",
		(double)st.closed_no_request);
	sample1(o, "dtsched_connections_closed_total", "reason", "flood", (double)st.closed_flood);
	resp->content_type = "text/plain; version=0.0.4";
}

void sched_wake(struct sched *s)
{
	pthread_kill(s->main_thread, SIGUSR1);
}

static const struct dt_http_route base_routes[] = {
	{ "GET", DT_PATH_STATUS, 0, h_status },
	{ "POST", DT_PATH_HEARTBEAT, DT_ROUTE_RAW_BODY | DT_ROUTE_ANY_PROTOCOL, h_heartbeat },
	{ "GET", DT_PATH_NODES, 0, h_nodes },
	{ "GET", DT_PATH_NODE, 0, h_node },
	{ "POST", DT_PATH_NODE_DRAIN, 0, h_node_drain },
	{ "POST", DT_PATH_NODE_RESUME, 0, h_node_resume },
	{ "POST", DT_PATH_NODE_STOPPED, 0, h_node_stopped },
	{ "GET", DT_PATH_TASKS, 0, h_tasks },
	{ "GET", DT_PATH_METRICS, DT_ROUTE_PUBLIC, h_metrics },
};

/* ------------------------------------------------------------------ run */

/* The features that hear of a job's life (sched-int.h), before any job moves. */
static int subscribe(struct sched *s)
{
	jobs_metrics_subscribe(s);
	fabric_subscribe(s);
	quarantine_subscribe(s);
	hang_subscribe(s);
	return 0;
}

/*
 * state.db holds every job's spec and env: 0600, and so its -wal and -shm
 * (SQLite gives them the database file's mode).  An older install's 0644
 * files are narrowed too.
 */
static void db_make_private(const char *path)
{
	static const char *const suffix[] = { "", "-wal", "-shm" };
	struct strbuf p = STRBUF_INIT;

	for (size_t i = 0; i < ARRAY_SIZE(suffix); i++) {
		int fd;

		strbuf_reset(&p);
		strbuf_addf(&p, "%s%s", path, suffix[i]);
		fd = open(p.buf, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (i ? 0 : O_CREAT),
			  0600);
		if (fd < 0)
			continue;
		if (fchmod(fd, 0600) < 0)
			dtlog(DTLOG_WARN, "cannot make '%s' private (0600): %s", p.buf, strerror(errno));
		close(fd);
	}
	strbuf_release(&p);
}

int sched_run(const struct sched_opts *o, int *ready_fd)
{
	struct sched *s = xcalloc(1, sizeof(*s));
	struct dt_httpd_opts ho = DT_HTTPD_OPTS_INIT;
	struct strbuf err = STRBUF_INIT, path = STRBUF_INIT;
	struct statfs fs;
	sigset_t set;
	long long last_flush = dt_mono_ms(), last_tick = 0;
	int ret = 1;
	struct dt_http_route *routes = NULL;

	s->o = *o;
	s->backend = &agents_backend;   /* where ranks run (backend.h): the one choice of it */
	s->beacon_fd = -1;
	s->refused = json_object();
	pthread_mutex_init(&s->lock, NULL);
	s->started_mono = dt_mono_ms();
	s->started_us = dt_now_us();
	if (statfs(o->home, &fs) == 0 && sched_fs_is_network((long)fs.f_type)) {
		strbuf_addf(&err, "'%s' is on a network file system (statfs type 0x%lx): dtsched keeps "
			    "its SQLite state on the head's local disk only; set DTCTL_HOME to a "
			    "local directory", o->home, (unsigned long)fs.f_type);
		goto fail;
	}
	if (dt_daemon_key_load(&s->key, o->secret, o->home, &err) < 0)
		goto fail;
	if (o->db_path)
		strbuf_addstr(&path, o->db_path);
	else
		strbuf_addf(&path, "%s/state.db", o->home);
	db_make_private(path.buf);
	if (sqlite3_open_v2(path.buf, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
			    SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		strbuf_addf(&err, "cannot open '%s': %s", path.buf, sqlite3_errmsg(s->db));
		goto fail;
	}
	sqlite3_busy_timeout(s->db, 5000);
	if (db_exec(s, schema) < 0 ||
	    sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO nodes(name, address, port, state, "
			       "drained, last_heartbeat_us, inventory, agent_version, agent_started_at) "
			       "VALUES(?,?,?,?,?,?,?,?,?)", -1, &s->st_node, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO tasks(node, id, state, exit_code, "
			       "job_id, rank, reason, updated_us, data) VALUES(?,?,?,?,?,?,?,?,?)",
			       -1, &s->st_task, NULL) != SQLITE_OK ||
	    db_load(s) < 0 || head_id_load(s) < 0 || subscribe(s) < 0 || jobs_init(s) < 0 ||
	    sweeps_init(s) < 0) {
		strbuf_addf(&err, "cannot use the state database '%s': %s", path.buf,
			    sqlite3_errmsg(s->db));
		goto fail;
	}
	if (s->nr)
		dtlog(DTLOG_INFO, "loaded %zu node(s) from '%s'; waiting for their heartbeats",
		      s->nr, path.buf);

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1);     /* sched_wake() */
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	s->main_thread = pthread_self();
	ho.bind = o->bind;
	ho.port = o->port;
	routes = xcalloc(ARRAY_SIZE(base_routes) + jobs_nr_routes + sweeps_nr_routes, sizeof(*routes));
	memcpy(routes, base_routes, sizeof(base_routes));
	memcpy(routes + ARRAY_SIZE(base_routes), jobs_routes, jobs_nr_routes * sizeof(*routes));
	memcpy(routes + ARRAY_SIZE(base_routes) + jobs_nr_routes, sweeps_routes,
	       sweeps_nr_routes * sizeof(*routes));
	ho.routes = routes;
	ho.nr_routes = ARRAY_SIZE(base_routes) + jobs_nr_routes + sweeps_nr_routes;
	ho.data = s;
	ho.key = &s->key;
	ho.max_body = DT_MAX_BODY;
	ho.conn_limit = 4096;
	/* MHD zeroes a connection's whole pool between keep-alive requests: 8 KiB
	 * holds our headers (bodies stream through it) and is an eighth of the
	 * memset per heartbeat of the 64 KiB default */
	ho.conn_memory = 8 * 1024;
	ho.timeout_s = 60;
	s->srv = dt_httpd_start(&ho, &err);
	if (!s->srv)
		goto fail;
	/* test only: take beacons off the socket and drop them (a firewall that
	 * drops UDP), while still telling agents that beacons are taken */
	{
		const char *drop = getenv("DTSCHED_TEST_DROP_BEACONS");

		s->beacons_ignored = drop && *drop == '1';
	}
	s->beacon_fd = beacon_open(s);
	dtlog(DTLOG_INFO, "dtsched %s serving on %s:%d (pid %d, UDP beacons %s), DOWN after %lld ms "
	      "without heartbeat", DT_VERSION, o->bind ? o->bind : "0.0.0.0", dt_httpd_port(s->srv),
	      (int)getpid(), s->beacon_fd < 0 ? "off" : s->beacons_ignored ? "DROPPED (test)" : "on",
	      o->dead_after_ms);
	dt_daemon_ready(ready_fd, NULL);

	for (;;) {
		struct timespec ts = { 0, TICK_MS * 1000000L };
		siginfo_t si;
		long long park = dt_httpd_wake_expired(s->srv);   /* long-polls due */
		int sig;

		if (park >= 0 && park < TICK_MS)
			ts.tv_nsec = (park + 1) * 1000000L;
		sig = sigtimedwait(&set, &si, &ts);
		if (sig == SIGTERM || sig == SIGINT)
			break;
		if (sig == SIGHUP || dt_mono_ms() - last_tick >= TICK_MS) {
			last_tick = dt_mono_ms();
			pthread_mutex_lock(&s->lock);
			tick(s);
			if (dt_mono_ms() - last_flush >= FLUSH_MS) {
				last_flush = dt_mono_ms();
				flush_dirty(s);
			}
			pthread_mutex_unlock(&s->lock);
		}
		sweeps_step(s);
		jobs_step(s);
	}
	dtlog(DTLOG_INFO, "dtsched stopping");
	{
		/* threads still out (launches, hang attributions) call job_save(), which
		 * wakes s->srv under the lock: they see NULL, not a freed server */
		struct dt_httpd *srv;

		pthread_mutex_lock(&s->lock);
		srv = s->srv;
		s->srv = NULL;
		pthread_mutex_unlock(&s->lock);
		dt_httpd_stop(srv);
	}
	if (s->beacon_fd >= 0)
		close(s->beacon_fd);
	pthread_mutex_lock(&s->lock);
	flush_dirty(s);
	pthread_mutex_unlock(&s->lock);
	ret = 0;
	goto out;
fail:
	dtlog(DTLOG_ERROR, "%s", err.buf);
	if (*ready_fd >= 0)
		dt_daemon_ready(ready_fd, err.buf);
	else
		error("%s", err.buf);
out:
	for (size_t i = 0; i < s->nr; i++)
		node_free(s->nodes[i]);
	free(s->nodes);
	json_decref(s->refused);
	sweeps_release(s);
	jobs_release(s);
	free(routes);
	sqlite3_finalize(s->st_node);
	sqlite3_finalize(s->st_task);
	if (s->db)
		sqlite3_close(s->db);
	strbuf_release(&err);
	strbuf_release(&path);
	free(s);
	return ret;
}
