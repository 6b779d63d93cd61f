/*
 * db.c - dtsched's SQLite database (state.db): opening it on the head's local
 * disk, private, in WAL mode; the schema of every table; the one transaction
 * helper (db_begin/db_commit, which nest) every writer of dtsched uses; and
 * the node table's rows (nodes, tasks).  The other rows are written next to
 * the JSON they hold: job.c (jobs), sweeps-state.c (sweeps, trials,
 * reports); nodes.c (drains, node_failures) and fabric-head.c (baselines)
 * keep their small tables.
 */
#include "sched-int.h"
#include "json.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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


/* the jobs (job.c writes their rows) */
static const char jobs_schema[] =
	"CREATE TABLE IF NOT EXISTS jobs("
	"  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, state TEXT NOT NULL,"
	"  updated_us INTEGER, data TEXT);"
	"CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);";

/* sweeps, their trials and reports (sweeps-state.c) */
static const char sweeps_schema[] =
	"CREATE TABLE IF NOT EXISTS sweeps("
	"  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, state TEXT, data TEXT);"
	"CREATE TABLE IF NOT EXISTS sweep_trials("
	"  sweep TEXT NOT NULL, trial INTEGER NOT NULL, job_id TEXT, state TEXT, data TEXT,"
	"  PRIMARY KEY(sweep, trial));"
	"CREATE TABLE IF NOT EXISTS sweep_reports("
	"  sweep TEXT NOT NULL, trial INTEGER NOT NULL, n INTEGER NOT NULL, data TEXT,"
	"  PRIMARY KEY(sweep, trial, n));";

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

/*
 * This state.db's random id, made with it: the tasks it starts carry it, so
 * that an agent tells a finished task of an earlier head (whose state.db was
 * lost) from a retried start of this one's (agent.c, task_start).
 */
int head_id_load(struct sched *s)
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

int db_open(struct sched *s, const char *path, struct strbuf *err)
{
	db_make_private(path);
	if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
			    SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		strbuf_addf(err, "cannot open '%s': %s", path, sqlite3_errmsg(s->db));
		return -1;
	}
	sqlite3_busy_timeout(s->db, 5000);
	return 0;
}

int db_schema(struct sched *s)
{
	if (db_exec(s, schema) < 0 || db_exec(s, jobs_schema) < 0)
		return -1;
	return db_exec(s, sweeps_schema);
}

void db_save_node(struct sched *s, struct node *n)
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

void db_save_task(struct sched *s, const char *node, json_t *t, const char *reason)
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
