/*
 * acct.c - accounting and the fair-share usage (docs/fairshare.md): a
 * subscriber of the job events (jobstate.h) that adds each attempt's GPU
 * time to the decayed usage fairshare.c ranks users by, and writes every
 * ended job's row into the acct table of state.db (user, project, shape,
 * nodes, times, final state, GPU-hours used and lost); the API behind
 * `dtctl acct` (POST /v1/acct) and `dtctl share` (GET /v1/share), and the
 * per-user and per-project families of /metrics.
 */
#include "jobs-int.h"
#include "json.h"
#include "log.h"
#include "promtext.h"
#include "protocol.h"
#include "usage.h"

#include <stdlib.h>
#include <string.h>

static const char acct_schema[] =
	"CREATE TABLE IF NOT EXISTS acct("
	"  id TEXT PRIMARY KEY, seq INTEGER, user TEXT NOT NULL, project TEXT NOT NULL,"
	"  name TEXT, state TEXT NOT NULL, nodes INTEGER, per_node INTEGER, gpus INTEGER,"
	"  slots INTEGER, node_list TEXT, submit_us INTEGER, start_us INTEGER, end_us INTEGER,"
	"  attempts INTEGER, gpu_s_used REAL, gpu_s_lost REAL, slot_s_used REAL, reason TEXT);"
	"CREATE INDEX IF NOT EXISTS acct_end ON acct(end_us);";

static void add_seconds(const struct job *j, long long a, long long b, void *d)
{
	*(double *)d += (double)(b - a) / 1e6 * j->world;
}

void acct_release(struct sched *s)
{
	if (s->fair_usage)
		fs_usage_release(s->fair_usage);
	free(s->fair_usage);
	s->fair_usage = NULL;
}

static void usage_attempt_ended(struct sched *s, struct job *j, enum job_event ev,
				const struct job_event_info *info, void *data)
{
	fair_usage_sync(s);   /* its history has this attempt open: not counted twice */
	if (j->gpu && j->started_us)
		fs_usage_add(s->fair_usage, j->user, j->project, j->world, j->started_us,
			     dt_now_us());
}

/* INSERT OR REPLACE j's row (or OR IGNORE: the rows of jobs that ended before accounting). */
static void acct_write(struct sched *s, const struct job *j, int replace)
{
	static const char sql[] =
		"INSERT OR %s INTO acct(id, seq, user, project, name, state, nodes, per_node,"
		" gpus, slots, node_list, submit_us, start_us, end_us, attempts, gpu_s_used,"
		" gpu_s_lost, slot_s_used, reason) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
	struct strbuf q = STRBUF_INIT, nodes = STRBUF_INIT;
	sqlite3_stmt *st;
	double used = 0;
	int nr_nodes = j->per_node > 0 ? j->world / j->per_node : j->cfg.nodes;
	size_t i;
	json_t *p;

	run_intervals(j, 1, add_seconds, &used);
	json_array_foreach(j->placement, i, p)
		strbuf_addf(&nodes, "%s%s", i ? "," : "", json_get_str(p, "node", ""));
	strbuf_addf(&q, sql, replace ? "REPLACE" : "IGNORE");
	if (sqlite3_prepare_v2(s->db, q.buf, -1, &st, NULL) != SQLITE_OK) {
		dtlog(DTLOG_ERROR, "state.db: acct: %s", sqlite3_errmsg(s->db));
		goto out;
	}
	sqlite3_bind_text(st, 1, j->id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, j->seq);
	sqlite3_bind_text(st, 3, j->user ? j->user : "", -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, j->project ? j->project : j->user ? j->user : "", -1,
			  SQLITE_STATIC);
	sqlite3_bind_text(st, 5, j->name ? j->name : "", -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 6, j->state, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 7, nr_nodes);
	sqlite3_bind_int(st, 8, j->per_node);
	sqlite3_bind_int(st, 9, j->gpu ? j->world : 0);
	sqlite3_bind_int(st, 10, j->gpu ? 0 : j->world);
	sqlite3_bind_text(st, 11, nodes.buf, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 12, j->submitted_us);
	sqlite3_bind_int64(st, 13, j->first_started_us);
	sqlite3_bind_int64(st, 14, j->ended_us);
	sqlite3_bind_int(st, 15, j->first_started_us ? j->attempt + 1 : 0);
	sqlite3_bind_double(st, 16, j->gpu ? used : 0);
	sqlite3_bind_double(st, 17, j->gpu ? j->lost_slot_s : 0);
	sqlite3_bind_double(st, 18, j->gpu ? 0 : used);
	if (j->reason)
		sqlite3_bind_text(st, 19, j->reason, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		dtlog(DTLOG_ERROR, "state.db: acct row of %s: %s", j->id, sqlite3_errmsg(s->db));
	sqlite3_finalize(st);
out:
	strbuf_release(&q);
	strbuf_release(&nodes);
}

static void acct_ended(struct sched *s, struct job *j, enum job_event ev,
		       const struct job_event_info *info, void *data)
{
	acct_write(s, j, 1);
}

int acct_subscribe(struct sched *s)
{
	if (db_exec(s, acct_schema) < 0)
		return -1;
	job_events_on(&s->events, JOB_EV_ATTEMPT_ENDED, usage_attempt_ended, NULL);
	job_events_on(&s->events, JOB_EV_ENDED, acct_ended, NULL);
	return 0;
}

/* The rows of jobs that ended before this dtsched kept accounts (after jobs_init). */
void acct_backfill(struct sched *s)
{
	db_begin(s);
	for (size_t i = 0; i < s->nr_jobs; i++)
		if (state_final(s->jobs[i]->state))
			acct_write(s, s->jobs[i], 0);
	db_commit(s, NULL);
}

/* ------------------------------------------------------------- the API */

static void total_add(json_t *totals, const char *key, const char *name, double gpu_s,
		      double lost_s, double slot_s)
{
	json_t *by = json_object_get(totals, key), *t;

	if (!by) {
		by = json_object();
		json_object_set_new(totals, key, by);
	}
	t = name ? json_object_get(by, name) : by;
	if (!t) {
		t = json_pack("{s:i,s:f,s:f,s:f}", "jobs", 0, "gpu_hours", 0.0, "gpu_hours_lost",
			      0.0, "cpu_slot_hours", 0.0);
		json_object_set_new(by, name, t);
	}
	json_object_set_new(t, "jobs", json_integer(json_integer_value(json_object_get(t, "jobs"))
						    + 1));
	json_object_set_new(t, "gpu_hours", json_real(json_number_value(json_object_get(t,
			    "gpu_hours")) + gpu_s / 3600));
	json_object_set_new(t, "gpu_hours_lost", json_real(json_number_value(json_object_get(t,
			    "gpu_hours_lost")) + lost_s / 3600));
	json_object_set_new(t, "cpu_slot_hours", json_real(json_number_value(json_object_get(t,
			    "cpu_slot_hours")) + slot_s / 3600));
}

static const char *col_text(sqlite3_stmt *st, int i)
{
	const unsigned char *t = sqlite3_column_text(st, i);

	return t ? (const char *)t : "";
}

/*
 * POST /v1/acct {user?, project?, state?, since_us?, until_us?} -> {jobs:
 * [ROW], totals: {all, users: {name: T}, projects: {name: T}}}: the jobs that
 * ended in [since, until), oldest first.  T = {jobs, gpu_hours,
 * gpu_hours_lost, cpu_slot_hours}.
 */
static void h_acct(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	static const char sql[] =
		"SELECT id, user, project, name, state, nodes, per_node, gpus, slots, node_list,"
		" submit_us, start_us, end_us, attempts, gpu_s_used, gpu_s_lost, slot_s_used, reason"
		" FROM acct WHERE (?1 IS NULL OR user = ?1) AND (?2 IS NULL OR project = ?2)"
		" AND (?3 IS NULL OR state = ?3) AND end_us >= ?4 AND end_us < ?5 ORDER BY end_us, seq";
	const json_t *q = req->json;
	json_t *rows = json_array(), *totals = json_object();
	sqlite3_stmt *st;
	const char *keys[3] = { "user", "project", "state" };

	if (q && !json_is_object(q)) {
		dt_http_error(resp, 400, "an acct query is a JSON object");
		goto fail;
	}
	pthread_mutex_lock(&s->lock);
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
		dt_http_error(resp, 500, "state.db: %s", sqlite3_errmsg(s->db));
		pthread_mutex_unlock(&s->lock);
		goto fail;
	}
	for (int k = 0; k < 3; k++) {
		const char *v = json_get_str(q, keys[k], NULL);

		if (v)
			sqlite3_bind_text(st, k + 1, v, -1, SQLITE_TRANSIENT);
	}
	sqlite3_bind_int64(st, 4, json_get_int(q, "since_us", 0));
	sqlite3_bind_int64(st, 5, json_get_int(q, "until_us", 0) > 0 ?
			   json_get_int(q, "until_us", 0) : (json_int_t)(1LL << 62));
	total_add(totals, "all", NULL, 0, 0, 0);
	json_object_set_new(json_object_get(totals, "all"), "jobs", json_integer(0));
	while (sqlite3_step(st) == SQLITE_ROW) {
		double used = sqlite3_column_double(st, 14), lost = sqlite3_column_double(st, 15);
		double slot = sqlite3_column_double(st, 16);
		json_t *r = json_object();

		json_object_set_new(r, "id", json_string(col_text(st, 0)));
		json_object_set_new(r, "user", json_string(col_text(st, 1)));
		json_object_set_new(r, "project", json_string(col_text(st, 2)));
		json_object_set_new(r, "name", json_string(col_text(st, 3)));
		json_object_set_new(r, "state", json_string(col_text(st, 4)));
		json_object_set_new(r, "nodes", json_integer(sqlite3_column_int(st, 5)));
		json_object_set_new(r, "per_node", json_integer(sqlite3_column_int(st, 6)));
		json_object_set_new(r, "gpus", json_integer(sqlite3_column_int(st, 7)));
		json_object_set_new(r, "cpu_slots", json_integer(sqlite3_column_int(st, 8)));
		json_object_set_new(r, "node_list", json_string(col_text(st, 9)));
		json_object_set_new(r, "submitted_at", json_timestamp(sqlite3_column_int64(st, 10)));
		json_object_set_new(r, "started_at", json_timestamp(sqlite3_column_int64(st, 11)));
		json_object_set_new(r, "ended_at", json_timestamp(sqlite3_column_int64(st, 12)));
		json_object_set_new(r, "attempts", json_integer(sqlite3_column_int(st, 13)));
		json_object_set_new(r, "gpu_hours", json_real(used / 3600));
		json_object_set_new(r, "gpu_hours_lost", json_real(lost / 3600));
		json_object_set_new(r, "cpu_slot_hours", json_real(slot / 3600));
		json_object_set_new(r, "reason", sqlite3_column_type(st, 17) == SQLITE_NULL ?
				    json_null() : json_string(col_text(st, 17)));
		json_array_append_new(rows, r);
		total_add(totals, "all", NULL, used, lost, slot);
		total_add(totals, "users", col_text(st, 1), used, lost, slot);
		total_add(totals, "projects", col_text(st, 2), used, lost, slot);
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (!json_object_get(totals, "users"))
		json_object_set_new(totals, "users", json_object());
	if (!json_object_get(totals, "projects"))
		json_object_set_new(totals, "projects", json_object());
	dt_http_json(resp, 200, json_pack("{s:o,s:o}", "jobs", rows, "totals", totals));
	return;
fail:
	json_decref(rows);
	json_decref(totals);
}

static json_t *accts_json(const struct fs_acct *v, size_t nr, const struct fs_acct *projects)
{
	json_t *a = json_array();

	for (size_t i = 0; i < nr; i++) {
		json_t *o = json_pack("{s:s,s:f,s:f,s:f,s:f,s:i,s:i,s:i}", "name", v[i].name,
				      "share", v[i].share, "norm_share", v[i].norm_share,
				      "usage_gpu_hours", v[i].usage / 3600, "fairshare", v[i].factor,
				      "gpus_in_use", v[i].gpus, "cpu_slots_in_use", v[i].slots,
				      "pending", v[i].pending);

		if (projects)
			json_object_set_new(o, "project", json_string(projects[v[i].project].name));
		else
			json_object_set_new(o, "guaranteed_gpus", json_integer(v[i].guaranteed_gpus));
		json_array_append_new(a, o);
	}
	return a;
}

/* GET /v1/share -> {half_life_ms, total_usage_gpu_hours, users: [A], projects: [A]} */
static void h_share(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct fair_inputs in;
	json_t *o;

	pthread_mutex_lock(&s->lock);
	cluster_refresh(s);
	fair_inputs_prepare(s, &in);
	o = json_pack("{s:I,s:f,s:o,s:o}", "half_life_ms", (json_int_t)s->fair_usage_hl,
		      "total_usage_gpu_hours", in.pass.total_usage / 3600, "users",
		      accts_json(in.pass.users, in.pass.nr_users, in.pass.projects), "projects",
		      accts_json(in.pass.projects, in.pass.nr_projects, NULL));
	fair_inputs_release(&in);
	pthread_mutex_unlock(&s->lock);
	dt_http_json(resp, 200, o);
}

const struct dt_http_route acct_routes[] = {
	{ "POST", DT_PATH_ACCT, 0, h_acct },
	{ "GET", DT_PATH_SHARE, 0, h_share },
};
const size_t acct_nr_routes = ARRAY_SIZE(acct_routes);

/* ------------------------------------------------------------ /metrics */

static void acct_family(struct strbuf *o, const char *name, const char *help,
			const struct fs_acct *v, size_t nr, const char *label, int what)
{
	prom_family(o, name, "gauge", help);
	for (size_t i = 0; i < nr; i++) {
		const char *l[] = { label, v[i].name, NULL };

		prom_sample(o, name, l, what == 0 ? v[i].gpus : what == 1 ? v[i].slots :
			    v[i].pending);
	}
}

void acct_metrics(struct sched *s, struct strbuf *o)
{
	struct fair_inputs in;

	cluster_refresh(s);
	fair_inputs_prepare(s, &in);
	acct_family(o, "dtsched_user_gpus_in_use", "GPUs held by the user's running jobs.",
		    in.pass.users, in.pass.nr_users, "user", 0);
	acct_family(o, "dtsched_user_cpu_slots_in_use", "CPU slots held by the user's running jobs.",
		    in.pass.users, in.pass.nr_users, "user", 1);
	acct_family(o, "dtsched_user_jobs_pending", "The user's jobs waiting in the queue.",
		    in.pass.users, in.pass.nr_users, "user", 2);
	acct_family(o, "dtsched_project_gpus_in_use", "GPUs held by the project's running jobs.",
		    in.pass.projects, in.pass.nr_projects, "project", 0);
	acct_family(o, "dtsched_project_cpu_slots_in_use",
		    "CPU slots held by the project's running jobs.", in.pass.projects,
		    in.pass.nr_projects, "project", 1);
	acct_family(o, "dtsched_project_jobs_pending", "The project's jobs waiting in the queue.",
		    in.pass.projects, in.pass.nr_projects, "project", 2);
	fair_inputs_release(&in);
}
