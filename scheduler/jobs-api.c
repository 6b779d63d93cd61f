/*
 * jobs-api.c - the jobs HTTP API of dtsched (protocol.h: POST/GET /v1/jobs,
 * GET /v1/jobs/<id>, .../cancel, .../wait) and the internal API sweeps.c uses
 * (sched-int.h: jobs_submit, jobs_cancel, jobs_view, jobs_schedule_now).
 */
#include "jobs-int.h"
#include "jobspec.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "rowfmt.h"
#include "usage.h"
#include "users.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* -------------------------------------------------------------- handlers */

/*
 * Queue a checked job: its row first (the row's seq is the id), then the check
 * that its job dir is free on the shared dir, then PENDING with `reason`.  On
 * failure -1 with one message in err, the row removed again and the job still
 * the caller's.
 */
static int job_enqueue(struct sched *s, struct job *j, const char *shared, const char *reason,
		       struct strbuf *err)
{
	struct strbuf why = STRBUF_INIT;
	long long floor = 0;

	/*
	 * Ids never repeat for a cluster, even after state.db was lost or the head
	 * was set up again: an id whose job dir exists on the shared dir belongs
	 * to an earlier job, so the counter jumps past the highest one there; and
	 * when the shared dir was lost too, the agents' task files still name the
	 * old ids: their heartbeats raised agents_seq_max (nodes.c).  An id the
	 * agents' knowledge missed (a node that had not reported yet) is still no
	 * failure: the agent replaces a finished task of another head's
	 * (head_id) with the same id (agent/agent.c, task_start).
	 */
	if (s->agents_seq_max > s->jobs_seq_max) {
		floor = s->agents_seq_max + 1;
		dtlog(DTLOG_WARN, "the agents hold tasks of jobs up to j-%06lld from an earlier "
		      "head: job ids go on from j-%06lld", s->agents_seq_max, floor);
	}
	/* the row and its data in one commit, done before the reply is queued */
	db_begin(s);
	for (int tries = 0;; tries++) {
		sqlite3_stmt *st;
		int rc;

		if (floor)
			rc = sqlite3_prepare_v2(s->db, "INSERT INTO jobs(seq, state, updated_us) "
						"VALUES(?, 'PENDING', 0)", -1, &st, NULL);
		else
			rc = sqlite3_prepare_v2(s->db, "INSERT INTO jobs(state, updated_us) "
						"VALUES('PENDING', 0)", -1, &st, NULL);
		if (rc == SQLITE_OK) {
			if (floor)
				sqlite3_bind_int64(st, 1, floor);
			rc = sqlite3_step(st);
			sqlite3_finalize(st);
		}
		if (rc != SQLITE_DONE) {
			strbuf_addf(err, "the head cannot record the job: %s", sqlite3_errmsg(s->db));
			db_rollback(s);
			return -1;
		}
		j->seq = sqlite3_last_insert_rowid(s->db);
		if (j->seq > s->jobs_seq_max)
			s->jobs_seq_max = j->seq;
		snprintf(j->id, sizeof(j->id), "j-%06lld", j->seq);
		{
			struct strbuf d = STRBUF_INIT;

			strbuf_addf(&d, "%s/jobs/%s", shared, j->id);
			free(j->job_dir);
			j->job_dir = strbuf_detach(&d, NULL);
		}
		if (job_id_free(j, err) == 0)
			break;
		if (sqlite3_prepare_v2(s->db, "DELETE FROM jobs WHERE seq=?", -1, &st, NULL) == SQLITE_OK) {
			sqlite3_bind_int64(st, 1, j->seq);
			sqlite3_step(st);
			sqlite3_finalize(st);
		}
		if (errno != EEXIST || tries >= 3) {
			strbuf_addf(err, " (is shared_dir '%s' mounted on the head?)", shared);
			db_rollback(s);
			return -1;
		}
		strbuf_reset(err);
		floor = highest_job_dir(shared);
		floor = (floor > j->seq ? floor : j->seq) + 1;
		dtlog(DTLOG_WARN, "job dir '%s' exists from an earlier head: job ids go on from "
		      "j-%06lld", j->job_dir, floor);
	}
	j->submitted_us = dt_now_us();
	set_reason(j, "%s", reason);
	history_add(j, DT_JOB_PENDING, "submitted");
	/*
	 * Acknowledged only once on disk: a commit that cannot be written (full
	 * disk, I/O error) is the client's error and the job is not queued (no
	 * job dir exists yet).  Nested in a caller's transaction (a sweep's
	 * trial), that caller's COMMIT is the one to check.
	 */
	if (job_save(s, j) < 0) {
		strbuf_addf(err, "the head cannot record the job: %s", sqlite3_errmsg(s->db));
		db_rollback(s);
		return -1;
	}
	if (db_commit(s, &why) < 0) {
		strbuf_addf(err, "the head cannot record the job: %s", why.buf);
		strbuf_release(&why);
		return -1;
	}
	job_events_emit(&s->events, s, j, JOB_EV_SUBMITTED, NULL);
	/*
	 * No job dir and no <job_dir>/state yet: both come with the job's first
	 * transition (job_transition, job_file).  The state file's readers
	 * (dtctl logs -f, run without dtsched) look for a final state only, and
	 * each is an inode on the shared dir per submit (docs/BENCHMARKS.md,
	 * "submit rate").
	 */
	jobs_add(s, j);
	return 0;
}

/*
 * The reply to a dry run of j placed as res: the plan job_plan() makes for
 * the launch, of the job as it would be queued ("j-DRYRUN" in
 * <shared_dir>/jobs/<id>; master_port 0: a port is chosen at launch).
 * `waiting`: why it would not start now (NULL: it would).  Lock held.
 */
static void dry_run_reply(struct sched *s, struct job *j, const struct place_result *res,
			  const char *waiting, struct dt_http_response *resp)
{
	struct hold *h = hold_new(s, j, res);
	struct launch_plan plan;
	struct strbuf err = STRBUF_INIT;

	snprintf(j->id, sizeof(j->id), "j-DRYRUN");
	free(j->job_dir);
	strbuf_addf(&err, "%s/jobs/<id>", j->shared_dir);
	j->job_dir = strbuf_detach(&err, NULL);
	if (job_plan(s, j, h->place, h->nr, 0, NULL, &plan, &err) == 0) {
		json_t *o = json_pack("{s:b,s:s,s:s?,s:o,s:o,s:o}", "dry_run", 1, "state",
				      waiting ? DT_JOB_PENDING : DT_JOB_RUNNING, "reason", waiting,
				      "placement", placement_json(h), "plan",
				      launch_plan_to_json(&plan), "spec", spec_shown(j->spec));

		dt_http_json(resp, 200, o);
		launch_plan_release(&plan);
	} else {
		dt_http_error(resp, 422, "cannot plan the job: %s", err.buf);
	}
	hold_free(h);
	strbuf_release(&err);
}

static void h_submit(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct strbuf err = STRBUF_INIT, reason = STRBUF_INIT;
	const char *shared = json_get_str(req->json, "shared_dir", NULL);
	int dry = json_is_true(json_object_get(req->json, "dry_run"));
	struct job *j = job_new();
	struct pool p = { NULL, 0, 0 };
	struct place_result *res = xmalloc(sizeof(*res));
	enum place_status st;
	json_t *v;

	if (!req->json || !json_object_get(req->json, "job")) {
		dt_http_error(resp, 400, "a job request needs {\"job\": {...}, \"shared_dir\": \"...\"}");
		goto out_nolock;
	}
	if (job_config_from_json(&j->cfg, json_object_get(req->json, "job"), &err) < 0) {
		dt_http_error(resp, 400, "%s", err.buf);
		goto out_nolock;
	}
	if (!shared || shared[0] != '/') {
		dt_http_error(resp, 400, "'shared_dir' must be an absolute path (the cluster's shared dir)");
		goto out_nolock;
	}
	v = json_object_get(req->json, "submit_dir");
	if (v && !json_is_null(v) && (!json_is_string(v) || json_string_value(v)[0] != '/' ||
				      strlen(json_string_value(v)) != json_string_length(v) ||
				      json_string_length(v) >= 4096)) {
		dt_http_error(resp, 400, "'submit_dir' must be an absolute path (where dtctl ran)");
		goto out_nolock;
	}
	job_derive(j);
	j->spec = job_config_to_json(&j->cfg);
	j->name = xstrdup(j->cfg.name ? j->cfg.name : "job");
	j->shared_dir = xstrdup(shared);
	if (json_get_str(req->json, "submit_dir", NULL))
		j->submit_dir = xstrdup(json_get_str(req->json, "submit_dir", NULL));

	pthread_mutex_lock(&s->lock);
	cluster_refresh(s);
	{
		struct caller c;

		/* the owner is who the request proves to be (users.h), never its "user" */
		if (caller_of(s, req, &c, resp) < 0)
			goto out;
		j->user = xstrdup(c.name);
		/* team mode: dtsched (root) makes the job dir and hands it to the
		 * user, so only in the cluster's shared dir, never where a request says */
		if (s->cc && s->cc->team && strcmp(shared, s->cc->shared_dir)) {
			dt_http_error(resp, 400, "'shared_dir' must be the cluster's ('%s') in team mode",
				      s->cc->shared_dir);
			goto out;
		}
		/* the mpi launcher's ranks start their image from orted's logger, as
		 * the user: root's engine is not theirs (docs/team.md) */
		if (s->cc && s->cc->team && j->cfg.container && j->cfg.launcher == LAUNCHER_MPI) {
			dt_http_error(resp, 400, "container: an mpi job does not run in an image in "
				      "team mode (use the agent launcher, or the nodes' own MPI)");
			goto out;
		}
	}
	if (!s->nr && !s->backend->place) {
		static const char none[] = "no node has registered with dtsched yet";

		strbuf_addstr(&reason, none);
		sched_refused_note(s, &reason);   /* or say why */
		if (reason.len == sizeof(none) - 1)
			strbuf_addstr(&reason, ": start the agents ('dtctl agents start') and "
				      "check 'dtctl nodes'");
		dt_http_error(resp, 422, "%s", reason.buf);
		goto out;
	}
	if (job_admit(s, j, &reason) < 0) {
		dt_http_error(resp, 422, "%s", reason.buf);
		goto out;
	}
	pool_build(s, &p, j->gpu);
	st = job_try_place(s, j, &p, res, &reason);
	if (st == PLACE_NEVER || st == PLACE_ERROR) {
		dt_http_error(resp, 422, "%s", reason.buf);
		goto out;
	}
	if (dry && s->backend->place) {
		/* the backend places (Slurm): no plan exists before the allocation does */
		dt_http_error(resp, 422, "--dry-run: on a cluster with backend: %s the nodes are "
			      "only known once the allocation is granted; nothing to show "
			      "(docs/slurm-backend.md)", s->backend->name);
		goto out;
	}
	if (dry) {
		if (st == PLACE_WAIT) {
			/* show where it would go on an idle cluster */
			struct strbuf r2 = STRBUF_INIT;

			for (size_t i = 0; i < p.nr; i++) {
				memset(p.n[i].used, 0, sizeof(p.n[i].used));
				p.n[i].up = 1;
			}
			job_try_place(s, j, &p, res, &r2);
			strbuf_release(&r2);
		}
		dry_run_reply(s, j, res, st == PLACE_OK ? NULL : reason.buf, resp);
		goto out;
	}
	strbuf_reset(&err);
	if (job_enqueue(s, j, shared, st == PLACE_WAIT ? reason.buf : "placing", &err) < 0) {
		dt_http_error(resp, 500, "%s", err.buf);
		goto out;
	}
	dtlog(DTLOG_INFO, "job %s (%s): submitted by '%s', %d node(s) x %d %s", j->id, j->name,
	      j->user, j->cfg.nodes, j->per_node, j->gpu ? "GPU(s)" : "process(es)");
	/* "reply": "id" (`dtctl run --detach`): the id alone, not the whole job */
	if (!strcmp(json_get_str(req->json, "reply", ""), "id"))
		dt_http_json(resp, 201, json_pack("{s:{s:s}}", "job", "id", j->id));
	else
		dt_http_json(resp, 201, json_pack("{s:o}", "job", job_json_shown(s, j)));
	j = NULL;
	sched_wake(s);
out:
	pthread_mutex_unlock(&s->lock);
out_nolock:
	if (j)
		job_free(j);
	free(p.n);
	free(res);
	strbuf_release(&err);
	strbuf_release(&reason);
}

/*
 * j as c may see it (users.h): all of it for its owner, admins and (share:
 * group) the owner's group; of others' jobs what squeue shows (owner, state,
 * shape, nodes, times), never env, argv, paths or logs.  Lock held.
 */
static json_t *job_json_for(struct sched *s, const struct job *j, int detail,
			    const struct caller *c)
{
	static const char *const shown[] = {
		"id", "version", "name", "user", "state", "reason", "submitted_at", "started_at",
		"ended_at", "elapsed_ms", "nodes", "per_node", "gpu", "world_size", "launcher",
		"attempt", "exit_code", "placement", "warnings", NULL,
	};
	/* shown: a spec's webhook URLs redacted (job_json_shown) */
	json_t *all = detail ? job_json_shown(s, j) : job_json(s, j, 0), *o;

	if (caller_may_read(c, j->user, j->cfg.share_group))
		return all;
	o = json_object();
	for (size_t i = 0; shown[i]; i++) {
		json_t *v = json_object_get(all, shown[i]);

		if (v)
			json_object_set(o, shown[i], v);
	}
	json_object_set_new(o, "redacted", json_true());
	json_decref(all);
	return o;
}

/* j as `dtctl ps` prints it (DT_PATH_JOBLIST): the brief form; lock held */
static json_t *job_brief(const struct job *j)
{
	long long end = j->ended_us ? j->ended_us : dt_now_us();
	json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:o,s:I,s:i,s:i,s:I}", "id", j->id, "name", j->name,
			      "user", j->user ? j->user : "", "state", j->state, "reason",
			      j->reason ? json_string(j->reason) : json_null(), "elapsed_ms",
			      (json_int_t)(j->started_us ? (end - j->started_us) / 1000 : 0),
			      "nodes", j->per_node > 0 ? j->world / j->per_node : j->cfg.nodes,
			      "world_size", j->world, "log_lost_lines", (json_int_t)j->log_lost_lines);
	json_t *pl = json_array(), *p;
	size_t i;

	json_array_foreach(j->placement, i, p)
		json_array_append_new(pl, json_pack("{s:s}", "node", json_get_str(p, "node", "?")));
	json_object_set_new(o, "placement", pl);
	if (json_array_size(j->stalled))
		json_object_set_new(o, "stalled", json_pack("[O]", json_array_get(j->stalled, 0)));
	if (j->slurm)
		json_object_set_new(o, "slurm", json_pack("{s:I,s:s*}", "job_id",
					(json_int_t)json_get_int(j->slurm, "job_id", 0), "array_job",
					json_get_str(j->slurm, "array_job", NULL)));
	return o;
}

/* j as one row of DT_JOBLIST_FIELDS (rowfmt.h); what job_brief() holds, no more */
static void job_row(struct strbuf *sb, const struct job *j, int may_read)
{
	long long end = j->ended_us ? j->ended_us : dt_now_us();
	const json_t *s0 = may_read ? json_array_get(j->stalled, 0) : NULL, *p;
	size_t i, at;

	rowfmt_add(sb, j->id);
	rowfmt_add(sb, j->name);
	rowfmt_add(sb, j->user ? j->user : "");
	rowfmt_add(sb, j->state);
	rowfmt_add(sb, j->reason);
	rowfmt_add_int(sb, j->started_us ? (end - j->started_us) / 1000 : 0);
	rowfmt_add_int(sb, j->per_node > 0 ? j->world / j->per_node : j->cfg.nodes);
	rowfmt_add_int(sb, j->world);
	rowfmt_add_int(sb, may_read ? j->log_lost_lines : 0);
	rowfmt_add_int(sb, may_read && j->slurm ? json_get_int(j->slurm, "job_id", 0) : 0);
	/* nodelist: the placement's nodes, comma-separated (node names have no comma) */
	at = sb->len;
	json_array_foreach(j->placement, i, p) {
		if (i)
			strbuf_addch(sb, ',');
		strbuf_addstr(sb, json_get_str(p, "node", "?"));
	}
	if (memchr(sb->buf + at, '\\', sb->len - at) || strpbrk(sb->buf + at, "\t\n\r")) {
		/* a node name needing escapes (never in practice): the slow way */
		char *raw = xstrdup(sb->buf + at);

		strbuf_setlen(sb, at);
		rowfmt_add(sb, raw);
		free(raw);
	} else {
		strbuf_addch(sb, '\t');
	}
	if (s0) {
		rowfmt_add_int(sb, json_get_int(s0, "rank", -1));
		rowfmt_add(sb, json_get_str(s0, "node", "?"));
		rowfmt_add_int(sb, json_get_int(s0, "pid", 0));
		rowfmt_add_int(sb, json_get_int(s0, "idle_ms", 0));
	} else {
		for (int k = 0; k < 4; k++)
			rowfmt_add(sb, NULL);
	}
	rowfmt_add(sb, may_read ? NULL : "redacted");
	rowfmt_add(sb, may_read && j->slurm ? json_get_str(j->slurm, "array_job", NULL) : NULL);
	rowfmt_end(sb);
}

/* POST /v1/joblist {user?, all?, format?}: the jobs `dtctl ps` prints, brief
 * (protocol.h): user's, or with all every user's and finished ones too, else
 * the caller's; format "tsv": as text, rows of DT_JOBLIST_FIELDS (rowfmt.h) */
static void h_joblist(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	const char *user = json_get_str(req->json, "user", NULL);
	int all = json_is_true(json_object_get(req->json, "all"));
	int rows = !strcmp(json_get_str(req->json, "format", ""), "tsv");
	json_t *arr;
	struct strbuf sb = STRBUF_INIT;
	struct caller c;

	if (caller_of_locked(s, req, &c, resp) < 0)
		return;
	arr = json_array();
	if (!user && !all)   /* ps's default: the caller's own */
		user = c.name;
	if (rows) {   /* the first row: the columns' names */
		static const char *const fields[] = { DT_JOBLIST_FIELDS, NULL };

		for (size_t i = 0; fields[i]; i++)
			rowfmt_add(&sb, fields[i]);
		rowfmt_end(&sb);
	}
	for (size_t i = 0; i < s->nr_jobs; i++) {
		const struct job *j = s->jobs[i];
		json_t *b;

		if ((user && strcmp(j->user ? j->user : "", user)) ||
		    (!all && jobstate_final(j->state)))
			continue;
		if (rows) {
			job_row(&sb, j, caller_may_read(&c, j->user, j->cfg.share_group));
			continue;
		}
		b = job_brief(j);
		if (!caller_may_read(&c, j->user, j->cfg.share_group)) {
			/* of others' jobs what job_json_for() shows, no more */
			json_object_del(b, "stalled");
			json_object_del(b, "slurm");
			json_object_del(b, "log_lost_lines");
			json_object_set_new(b, "redacted", json_true());
		}
		json_array_append_new(arr, b);
	}
	pthread_mutex_unlock(&s->lock);
	if (rows) {
		json_decref(arr);
		strbuf_release(&resp->text);
		resp->text = sb;   /* no copy of a long list */
		resp->content_type = "text/tab-separated-values; charset=utf-8";
		return;
	}
	dt_http_json(resp, 200, json_pack("{s:o,s:s}", "jobs", arr, "you", c.name));
}

static void h_list(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	json_t *arr;
	struct caller c;

	if (caller_of_locked(s, req, &c, resp) < 0)
		return;
	arr = json_array();
	/* oldest first, as every list of dtctl (docs/json.md, "Lists") */
	for (size_t i = 0; i < s->nr_jobs; i++)
		json_array_append_new(arr, job_json_for(s, s->jobs[i], 0, &c));
	pthread_mutex_unlock(&s->lock);
	/* "you": whose jobs `dtctl ps` shows by default */
	dt_http_json(resp, 200, json_pack("{s:o,s:s}", "jobs", arr, "you", c.name));
}

/*
 * POST /v1/jobs/<id>/wait {since_version, timeout_ms}: the job as GET gives
 * it, as soon as its version differs from since_version (or it is final), or
 * after timeout_ms.  The request is parked in httpd meanwhile (no thread held);
 * job_save() wakes it.
 */
static void h_job_wait(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	const char *id = dt_http_arg(req, "id");
	long long since = json_get_int(req->json, "since_version", -1);
	long long timeout = json_get_int(req->json, "timeout_ms", 0);
	struct job *j;
	struct caller c;

	if (timeout < 0 || timeout > DT_JOB_WAIT_MAX_MS) {
		dt_http_error(resp, 400, "timeout_ms must be 0..%d", DT_JOB_WAIT_MAX_MS);
		return;
	}
	pthread_mutex_lock(&s->lock);
	j = job_find(s, id);
	if (caller_of(s, req, &c, resp) < 0)
		;
	else if (!j)
		dt_http_error(resp, 404, "no job '%s'", id);
	else if (j->version == since && !state_final(j->state) && timeout > 0 && req->may_park)
		resp->park_ms = timeout;
	else
		dt_http_json(resp, 200, json_pack("{s:o}", "job", job_json_for(s, j, 1, &c)));
	pthread_mutex_unlock(&s->lock);
}

/* GET /v1/jobs/<id>, and POST .../cancel (cancel: 1) */
static void job_reply(struct dt_http_request *req, struct dt_http_response *resp, void *data,
		      int cancel)
{
	struct sched *s = data;
	const char *id = dt_http_arg(req, "id");
	struct job *j;
	struct caller c;

	pthread_mutex_lock(&s->lock);
	j = job_find(s, id);
	if (caller_of(s, req, &c, resp) < 0) {
		;
	} else if (!j) {
		dt_http_error(resp, 404, "no job '%s'", id);
	} else if (cancel && !caller_may_steer(&c, j->user)) {
		struct strbuf what = STRBUF_INIT;

		strbuf_addf(&what, "job %s", j->id);
		caller_deny(resp, &c, what.buf, j->user, "cancelling");
		strbuf_release(&what);
	} else {
		if (cancel && !state_final(j->state) && strcmp(c.name, j->user)) {
			struct strbuf why = STRBUF_INIT;

			strbuf_addf(&why, "cancelled by %s (admin)", c.name);
			jobs_cancel(s, j->id, why.buf);
			strbuf_release(&why);
		} else if (cancel) {
			jobs_cancel(s, j->id, NULL);
		}
		dt_http_json(resp, 200, json_pack("{s:o}", "job", job_json_for(s, j, 1, &c)));
	}
	pthread_mutex_unlock(&s->lock);
}

static void h_job(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	job_reply(req, resp, data, 0);
}

static void h_job_cancel(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	job_reply(req, resp, data, 1);
}

/* one POST /v1/jobs/<id>/signal, off the server's thread */
struct signal_work {
	struct sched *s;
	struct job *j;            /* jobs are freed only at exit (jobs_release) */
	int sig;
};

static json_t *signal_work(void *arg, int *status)
{
	struct signal_work *w = arg;
	struct strbuf err = STRBUF_INIT;
	int n = w->s->backend->signal(w->s, w->j, w->sig, &err);
	json_t *reply;

	if (n >= 0) {
		dtlog(DTLOG_INFO, "job %s: signal %d (%s) sent to %d task(s)", w->j->id, w->sig,
		      strsignal(w->sig), n);
		reply = json_pack("{s:s,s:i,s:i}", "job", w->j->id, "signal", w->sig, "tasks", n);
	} else {
		pthread_mutex_lock(&w->s->lock);
		*status = strcmp(w->j->state, DT_JOB_RUNNING) || !w->j->hold || w->j->launch ||
			w->j->cancel ? 409 : 502;
		pthread_mutex_unlock(&w->s->lock);
		reply = json_pack("{s:s}", "error", err.buf);
	}
	strbuf_release(&err);
	return reply;
}

/*
 * POST /v1/jobs/<id>/signal {signal}: signal N to every rank of the job's
 * running attempt, through the backend (backend.h), which makes its calls
 * off the server's thread.
 */
static void h_job_signal(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	json_t *g = json_object_get(req->json, "signal");
	struct signal_work *w;
	struct job *j;
	struct caller c;

	if (dt_http_offloaded(req, resp))
		return;
	if (!json_is_integer(g) || json_integer_value(g) < 1 ||
	    json_integer_value(g) > DT_SIGNAL_MAX) {
		dt_http_error(resp, 400, "'signal' must be an integer from 1 to %d", DT_SIGNAL_MAX);
		return;
	}
	if (!s->backend->signal) {
		dt_http_error(resp, 501, "the '%s' backend cannot signal a job's ranks",
			      s->backend->name);
		return;
	}
	pthread_mutex_lock(&s->lock);
	j = job_find(s, dt_http_arg(req, "id"));
	if (caller_of(s, req, &c, resp) < 0) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	if (!j) {
		pthread_mutex_unlock(&s->lock);
		dt_http_error(resp, 404, "no job '%s'", dt_http_arg(req, "id"));
		return;
	}
	if (!caller_may_steer(&c, j->user)) {   /* its owner's, or an admin's (users.h) */
		struct strbuf what = STRBUF_INIT;

		strbuf_addf(&what, "job %s", j->id);
		caller_deny(resp, &c, what.buf, j->user, "signalling");
		strbuf_release(&what);
		pthread_mutex_unlock(&s->lock);
		return;
	}
	pthread_mutex_unlock(&s->lock);
	w = xcalloc(1, sizeof(*w));
	w->s = s;
	w->j = j;
	w->sig = (int)json_integer_value(g);
	dt_http_offload(s->srv, req, resp, signal_work, w, free, 30000);
}

/* ------------------------------------------- internal API (sweeps.c) */

/*
 * Queue a job from its JSON spec, as POST /v1/jobs does (no dry run).  Lock
 * held.  0 with the id in `id`; -1 (invalid, cannot store) or -2 (can never
 * fit) with one message in err.  The row and the job dir are written before
 * it returns, inside whatever transaction the caller has open.
 */
int jobs_submit(struct sched *s, const json_t *spec, const char *shared, const char *submit_dir,
		const char *user, char *id, size_t idlen, struct strbuf *err)
{
	struct job *j = job_new();
	struct pool p = { NULL, 0, 0 };
	struct place_result *res = xmalloc(sizeof(*res));
	struct strbuf reason = STRBUF_INIT;
	enum place_status st;
	int ret = -1;

	if (job_config_from_json(&j->cfg, spec, err) < 0)
		goto out;
	job_derive(j);
	j->spec = job_config_to_json(&j->cfg);
	j->name = xstrdup(j->cfg.name ? j->cfg.name : "job");
	j->user = xstrdup(user ? user : "");
	j->shared_dir = xstrdup(shared);
	if (submit_dir && *submit_dir)
		j->submit_dir = xstrdup(submit_dir);
	cluster_refresh(s);
	if (job_admit(s, j, err) < 0) {
		ret = -2;
		goto out;
	}
	pool_build(s, &p, j->gpu);
	st = job_try_place(s, j, &p, res, &reason);
	if (st == PLACE_NEVER || st == PLACE_ERROR) {
		strbuf_addbuf(err, &reason);
		ret = -2;
		goto out;
	}
	if (job_enqueue(s, j, shared, st == PLACE_WAIT ? reason.buf : "placing", err) < 0)
		goto out;
	snprintf(id, idlen, "%s", j->id);
	dtlog(DTLOG_INFO, "job %s (%s): submitted by '%s'", j->id, j->name, j->user);
	j = NULL;
	ret = 0;
	sched_wake(s);
out:
	if (j)
		job_free(j);
	free(p.n);
	free(res);
	strbuf_release(&reason);
	return ret;
}

void jobs_unsubmit(struct sched *s, const char *id)
{
	for (size_t i = s->nr_jobs; i > 0; i--) {
		struct job *j = s->jobs[i - 1];

		if (strcmp(j->id, id))
			continue;
		dtlog(DTLOG_WARN, "job %s: not recorded in state.db, dropped", id);
		jobs_remove(s, i - 1);
		job_free(j);
		return;
	}
}

/* Cancel as POST /v1/jobs/<id>/cancel does; lock held.  -1 if unknown. */
int jobs_cancel(struct sched *s, const char *id, const char *why)
{
	struct job *j = job_find(s, id);

	if (!j)
		return -1;
	if (!state_final(j->state) && !j->cancel) {
		j->cancel = 1;
		dtlog(DTLOG_INFO, "job %s: cancel requested%s%s", j->id, why ? ": " : "", why ? why : "");
		if (!strcmp(j->state, DT_JOB_PENDING)) {
			set_reason(j, "%s", why ? why : "cancelled by the user while pending");
			job_transition(s, j, DT_JOB_CANCELLED);
		} else {
			set_reason(j, "%s", why ? why : "cancelled by the user");
			job_save(s, j);
		}
		sched_wake(s);
	}
	return 0;
}

/* What a job is now; the pointers live while the lock is held.  -1 if unknown. */
int jobs_view(struct sched *s, const char *id, struct job_view *v)
{
	struct job *j = job_find(s, id);

	if (!j)
		return -1;
	v->state = j->state;
	v->reason = j->reason;
	v->job_dir = j->job_dir;
	v->shared_dir = j->shared_dir;
	v->attempt = j->attempt;
	v->cancelled = j->cancel;
	v->tasks_left = hold_of_job(s, j->id);
	v->started_us = j->started_us;
	v->ended_us = j->ended_us;
	return 0;
}

void jobs_pack(struct sched *s, const char *id, const char *pack, int nodes, int gpus,
	       int slots)
{
	struct job *j = job_find(s, id);

	if (!j || strcmp(s->backend->name, "slurm"))   /* only its backend has allocations */
		return;
	json_decref(j->slurm);
	j->slurm = json_pack("{s:s,s:i,s:i,s:i}", "pack", pack, "pack_nodes", nodes,
			     "pack_gpus", gpus, "pack_slots", slots);
	job_save(s, j);
}

void jobs_array(struct sched *s, const char *id, const char *key, int parallel)
{
	struct job *j = job_find(s, id);

	if (!j || strcmp(s->backend->name, "slurm"))   /* only its backend has arrays */
		return;
	json_decref(j->slurm);
	j->slurm = json_pack("{s:s,s:i}", "array", key, "array_parallel", parallel);
	job_save(s, j);
}

const char *jobs_id(const struct job *j)
{
	return j->id;
}

/* Place pending jobs now (a sweep just queued trials); lock held. */
void jobs_schedule_now(struct sched *s)
{
	schedule_pending(s);
}

const struct dt_http_route jobs_routes[] = {
	{ "POST", DT_PATH_JOBS, 0, h_submit },
	{ "GET", DT_PATH_JOBS, 0, h_list },
	{ "POST", DT_PATH_JOBLIST, 0, h_joblist },
	{ "GET", DT_PATH_JOB, 0, h_job },
	{ "POST", DT_PATH_JOB_CANCEL, 0, h_job_cancel },
	{ "POST", DT_PATH_JOB_WAIT, 0, h_job_wait },
	{ "POST", DT_PATH_JOB_DEBUG, 0, h_job_debug },   /* hang.c */
	{ "POST", DT_PATH_JOB_SIGNAL, 0, h_job_signal },
};
const size_t jobs_nr_routes = ARRAY_SIZE(jobs_routes);
