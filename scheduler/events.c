/*
 * events.c - the head's one event stream (docs/events.md): every job and
 * sweep transition, node event, health finding, hang attribution, sweep
 * milestone, log-pattern match and notification failure, as one JSON object
 * each with an id that only grows.  Kept in state.db's `events` table
 * (AUTOINCREMENT: an id is never given twice, even after the oldest are
 * dropped), at most EVENTS_KEEP of them; POST /v1/events reads them from an
 * id on, long-polling while nothing is new (`dtctl events -f`).
 *
 * A layer low in dtsched: it calls only the database and the server, so the
 * node table (drains, DOWN), the job subscriber (events-jobs.c), hang.c and
 * the sweeps can all call events_add().  What else hears of an event (the
 * notifications, notify.c) is a hook set at start-up, not a call from here.
 */
#include "jobs-int.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "users.h"

#include <stdlib.h>
#include <string.h>

/*
 * The bound: the newest EVENTS_KEEP events are kept; the older are deleted
 * every EVENTS_TRIM_EVERY additions (so a trim costs one indexed DELETE per
 * thousand events).  100,000 events are about 30 MB of state.db at the
 * ~300 bytes an event takes.
 */
#define EVENTS_KEEP 100000
#define EVENTS_TRIM_EVERY 1000

/* the bound, and how often it is applied; DTSCHED_TEST_EVENTS_KEEP (tests only) lowers it */
static long long events_keep = EVENTS_KEEP, events_trim_every = EVENTS_TRIM_EVERY;

static const char events_schema[] =
	"CREATE TABLE IF NOT EXISTS events("
	"  id INTEGER PRIMARY KEY AUTOINCREMENT, at_us INTEGER NOT NULL, kind TEXT NOT NULL,"
	"  job TEXT, user TEXT, data TEXT NOT NULL);"
	"CREATE INDEX IF NOT EXISTS events_job ON events(job, id);";

int events_init(struct sched *s)
{
	sqlite3_stmt *st = NULL;

	const char *keep = getenv("DTSCHED_TEST_EVENTS_KEEP");

	if (keep && atoll(keep) > 0) {
		events_keep = atoll(keep);
		events_trim_every = events_keep / 10 > 0 ? events_keep / 10 : 1;
	}
	if (db_exec(s, events_schema) < 0)
		return -1;
	if (sqlite3_prepare_v2(s->db, "INSERT INTO events(at_us, kind, job, user, data) "
			       "VALUES(?, ?, ?, ?, ?)", -1, &s->st_event, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_prepare_v2(s->db, "SELECT COALESCE(MAX(id), 0) FROM events", -1, &st,
			       NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		s->events_last = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return 0;
}

void events_release(struct sched *s)
{
	sqlite3_finalize(s->st_event);
	s->st_event = NULL;
}

static void events_trim(struct sched *s)
{
	sqlite3_stmt *st = NULL;

	if (sqlite3_prepare_v2(s->db, "DELETE FROM events WHERE id <= ?", -1, &st, NULL) != SQLITE_OK)
		return;
	sqlite3_bind_int64(st, 1, s->events_last - events_keep);
	if (sqlite3_step(st) != SQLITE_DONE)
		dtlog(DTLOG_WARN, "state.db: cannot drop old events: %s", sqlite3_errmsg(s->db));
	sqlite3_finalize(st);
}

long long events_add(struct sched *s, const char *kind, json_t *ev, const json_t *notify)
{
	long long now = dt_now_us(), id;
	const char *job = json_get_str(ev, "job", NULL), *user = json_get_str(ev, "user", NULL);
	char *text;

	if (!s->st_event) {   /* unit tests of features that emit, without a stream */
		json_decref(ev);
		return 0;
	}
	json_object_set_new(ev, "kind", json_string(kind));
	json_object_set_new(ev, "at", json_timestamp(now));
	json_object_del(ev, "id");
	text = json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS);
	sqlite3_reset(s->st_event);
	sqlite3_bind_int64(s->st_event, 1, now);
	sqlite3_bind_text(s->st_event, 2, kind, -1, SQLITE_STATIC);
	if (job)
		sqlite3_bind_text(s->st_event, 3, job, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(s->st_event, 3);
	if (user)
		sqlite3_bind_text(s->st_event, 4, user, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(s->st_event, 4);
	sqlite3_bind_text(s->st_event, 5, text ? text : "{}", -1, SQLITE_TRANSIENT);
	free(text);
	if (sqlite3_step(s->st_event) != SQLITE_DONE) {
		dtlog(DTLOG_ERROR, "state.db: cannot record event %s: %s", kind, sqlite3_errmsg(s->db));
		sqlite3_reset(s->st_event);
		json_decref(ev);
		return -1;
	}
	sqlite3_reset(s->st_event);
	id = sqlite3_last_insert_rowid(s->db);
	s->events_last = id;
	if (id % events_trim_every == 0)
		events_trim(s);
	json_object_set_new(ev, "id", json_integer(id));
	if (s->event_hook)
		s->event_hook(s, ev, notify, s->event_hook_data);
	if (s->srv)
		dt_httpd_wake(s->srv);   /* the readers that wait (POST /v1/events) */
	json_decref(ev);
	return id;
}

/* The rows after `after` as events (id added), in id order. */
json_t *events_read(struct sched *s, long long after, long long since_us,
		    const char *job, long long limit)
{
	sqlite3_stmt *st = NULL;
	json_t *arr = json_array();

	if (sqlite3_prepare_v2(s->db, job ?
			       "SELECT id, data FROM events WHERE job = ?4 AND id > ?1 AND at_us >= ?2 "
			       "ORDER BY id LIMIT ?3" :
			       "SELECT id, data FROM events WHERE id > ?1 AND at_us >= ?2 "
			       "ORDER BY id LIMIT ?3", -1, &st, NULL) != SQLITE_OK)
		return arr;
	sqlite3_bind_int64(st, 1, after);
	sqlite3_bind_int64(st, 2, since_us);
	sqlite3_bind_int64(st, 3, limit);
	if (job)
		sqlite3_bind_text(st, 4, job, -1, SQLITE_TRANSIENT);
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *text = (const char *)sqlite3_column_text(st, 1);
		json_t *ev = text ? json_loads(text, 0, NULL) : NULL;

		if (!json_is_object(ev)) {
			json_decref(ev);
			continue;
		}
		json_object_set_new(ev, "id", json_integer(sqlite3_column_int64(st, 0)));
		json_array_append_new(arr, ev);
	}
	sqlite3_finalize(st);
	return arr;
}

static long long events_oldest(struct sched *s)
{
	sqlite3_stmt *st = NULL;
	long long id = 0;

	if (sqlite3_prepare_v2(s->db, "SELECT COALESCE(MIN(id), 0) FROM events", -1, &st,
			       NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		id = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return id;
}

/*
 * ev as c may see it (users.h), taking ev: whole when it is about no one's
 * (a node's) or about what c may read (their own job or sweep, an admin,
 * share: group through the event's job); of others' what `ps` shows of their
 * jobs and "redacted": true: never a log.match's line, a sweep's results, a
 * notification's target or error, a hang's culprits.  Lock held.
 */
static json_t *event_for(struct sched *s, const struct caller *c, json_t *ev)
{
	static const char *const shown[] = {
		"schema", "id", "at", "kind", "job", "sweep", "name", "user", "state", "attempt",
		"nodes", "node", "exit_code", "signal", "node_fail", NULL,
	};
	const char *owner = json_get_str(ev, "user", NULL), *kind = json_get_str(ev, "kind", "");
	const char *id = json_get_str(ev, "job", NULL);
	const struct job *j = id ? job_find(s, id) : NULL;
	json_t *o, *v;

	if (!owner || caller_may_read(c, owner, j ? j->cfg.share_group : 0))
		return ev;
	o = json_object();
	for (size_t i = 0; shown[i]; i++)
		if ((v = json_object_get(ev, shown[i])))
			json_object_set(o, shown[i], v);
	/* the job's reason, as ps shows it (a hang's is its analysis: not shown) */
	if (starts_with(kind, "job.") && strcmp(kind, "job.hang") &&
	    (v = json_object_get(ev, "reason")))
		json_object_set(o, "reason", v);
	json_object_set_new(o, "redacted", json_true());
	json_decref(ev);
	return o;
}

/*
 * POST /v1/events (protocol.h): the events after after_id, as the caller may
 * see them (event_for()); parked while there is none yet and timeout_ms > 0
 * (events_add() wakes it).
 */
static void h_events(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	long long after = json_get_int(req->json, "after_id", 0);
	long long since = json_get_int(req->json, "since_us", 0);
	long long limit = json_get_int(req->json, "limit", DT_EVENTS_MAX_LIMIT);
	long long timeout = json_get_int(req->json, "timeout_ms", 0);
	json_t *jv = json_object_get(req->json, "job");
	const char *job = json_is_string(jv) ? json_string_value(jv) : NULL;
	struct caller c;
	json_t *arr, *ev;
	size_t i;

	if (timeout < 0 || timeout > DT_JOB_WAIT_MAX_MS || limit < 1 ||
	    limit > DT_EVENTS_MAX_LIMIT || after < 0 || (jv && !job)) {
		dt_http_error(resp, 400, "after_id must be >= 0, limit 1..%d, timeout_ms 0..%d, "
			      "job a string", DT_EVENTS_MAX_LIMIT, DT_JOB_WAIT_MAX_MS);
		return;
	}
	if (caller_of_locked(s, req, &c, resp) < 0)
		return;
	arr = events_read(s, after, since, job, limit);
	for (i = 0; i < json_array_size(arr); i++) {
		ev = json_incref(json_array_get(arr, i));
		json_array_set_new(arr, i, event_for(s, &c, ev));
	}
	if (!json_array_size(arr) && timeout > 0 && req->may_park) {
		json_decref(arr);
		resp->park_ms = timeout;
	} else {
		dt_http_json(resp, 200, json_pack("{s:o,s:I,s:I}", "events", arr,
			     "last_id", (json_int_t)s->events_last,
			     "oldest_id", (json_int_t)events_oldest(s)));
	}
	pthread_mutex_unlock(&s->lock);
}

const struct dt_http_route events_routes[] = {
	{ "POST", DT_PATH_EVENTS, 0, h_events },
};
const size_t events_nr_routes = ARRAY_SIZE(events_routes);
