/*
 * dashboard.c - the live dashboard's first page (issue 32, item 3; docs/dashboard.md):
 * the nodes with each GPU's allocation, utilisation and memory, the queue with
 * why each job waits, and the newest events, refreshed every 2 s.
 *
 * Its own listener, on 127.0.0.1 and a free port, never the address the
 * agents reach dtsched on.  Every page and API request names a session, a
 * random 256-bit id in the path (/ui/s/<session>/...), made from a one-time
 * login token that only a signed request (POST /v1/dashboard/login, what
 * `dtctl dashboard` sends: a user of the cluster) can mint: the token works
 * once and for DASH_TOKEN_S, the session for DASH_SESSION_S.  No cookie is
 * needed, so the server stays lib/httpd.c as it is; the page asks browsers
 * not to send the URL on (referrer policy) and builds every cell with
 * textContent, never HTML from data.
 *
 * The data are the API's own answers: the handlers of GET /v1/nodes, GET
 * /v1/jobs, /v1/sweeps and POST /v1/events, found in the route table sched.c
 * hands over (so this file calls into no feature's file), are called as they
 * are, asked as the session's user (users.h: whom the login request proved),
 * plus each node's GPUs from its inventory.  A job's page, logs and metrics
 * need caller_may_read, its cancel caller_may_steer, as in the API.
 */
#include "jobs-int.h"
#include "json.h"
#include "log.h"
#include "logmerge.h"
#include "protocol.h"
#include "safefile.h"
#include "users.h"
#include "sha256.h"
#include "cli/sweep-report.h"

#include <nettle/base64.h>

#include <string.h>
#include <sys/random.h>

#define DASH_TOKEN_S 600          /* a login link: once, within 10 minutes */
#define DASH_SESSION_S (12 * 3600)
#define DASH_MAX 64               /* tokens and sessions kept (the oldest give way) */
#define DASH_PER_USER 8           /* of them one user's: a ninth takes their own oldest's place */

struct dash_secret {
	char id[65];              /* 64 hex digits; "" = free */
	struct caller who;        /* who asked for the link (users.h): the session is theirs */
	long long expires_ms;     /* dt_mono_ms() */
};

static struct {
	struct dt_httpd *srv;
	struct dash_secret tokens[DASH_MAX], sessions[DASH_MAX];
	char url[320];            /* http://ADDRESS:PORT (127.0.0.1 unless configured) */
	const struct dt_http_route *api;   /* dtsched's route table (sched.c's) */
	size_t nr_api;
	char csp[1024];           /* Content-Security-Policy (dashboard_start) */
	const char *headers[13];  /* sent with every reply (httpd.h headers) */
} dash;

static int random_hex(char out[65])
{
	unsigned char b[32];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return -1;
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
	return 0;
}

/*
 * A slot for a new one of who's: their own soonest to expire once they hold
 * DASH_PER_USER (so no one user can push everyone else's links and sessions
 * out), else a free or expired one, else the soonest to expire.
 */
static struct dash_secret *slot(struct dash_secret *v, const struct caller *who)
{
	struct dash_secret *best = NULL, *own = NULL, *free_one = NULL;
	long long now = dt_mono_ms();
	int mine = 0;

	for (int i = 0; i < DASH_MAX; i++) {
		if (!v[i].id[0] || v[i].expires_ms <= now) {
			if (!free_one)
				free_one = &v[i];
			continue;
		}
		if (!strcmp(v[i].who.name, who->name)) {
			mine++;
			if (!own || v[i].expires_ms < own->expires_ms)
				own = &v[i];
		}
		if (!best || v[i].expires_ms < best->expires_ms)
			best = &v[i];
	}
	if (own && mine >= DASH_PER_USER)
		return own;
	return free_one ? free_one : best;
}

/* the live entry with this id, in constant time per entry; NULL when none */
static struct dash_secret *lookup(struct dash_secret *v, const char *id)
{
	long long now = dt_mono_ms();

	if (strlen(id) != 64)
		return NULL;
	for (int i = 0; i < DASH_MAX; i++) {
		unsigned char diff = 0;

		if (!v[i].id[0] || v[i].expires_ms <= now)
			continue;
		for (int k = 0; k < 64; k++)
			diff |= (unsigned char)(v[i].id[k] ^ id[k]);
		if (!diff)
			return &v[i];
	}
	return NULL;
}

/* POST /v1/dashboard/login {user?} (signed): a one-time login URL */
static void h_login_mint(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct dash_secret *t;
	struct caller c;
	char id[65];

	if (!dash.srv) {
		dt_http_error(resp, 503, "the dashboard is not running (see dtsched.log)");
		return;
	}
	if (random_hex(id) < 0) {
		dt_http_error(resp, 500, "no random bytes for a login token");
		return;
	}
	pthread_mutex_lock(&s->lock);
	/* the session is the caller's, as the request proves it (never a "user" it names) */
	if (caller_of(s, req, &c, resp) < 0) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	t = slot(dash.tokens, &c);
	memcpy(t->id, id, sizeof(t->id));
	t->who = c;
	t->expires_ms = dt_mono_ms() + DASH_TOKEN_S * 1000LL;
	pthread_mutex_unlock(&s->lock);
	dt_http_json(resp, 200, json_pack("{s:s+++,s:i}", "url", dash.url, "/ui/login/", id, "",
					  "expires_in_s", DASH_TOKEN_S));
}

static void html(struct dt_http_response *resp, int status, const char *body)
{
	resp->status = status;
	strbuf_addstr(&resp->text, body);
	resp->content_type = "text/html; charset=utf-8";
}

static const char refused_page[] =
	"<!doctype html><html><head><meta charset=utf-8><meta name=referrer content=no-referrer>"
	"<title>dtctl</title></head><body><h1>Not signed in</h1><p>This link was used already, "
	"has expired or is wrong. Run <code>dtctl dashboard</code> for a new one.</p></body></html>";

/* GET /ui/login/{token}: the token for a session, once */
static void h_login(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct dash_secret *t, *sess;
	char id[65];
	struct strbuf page = STRBUF_INIT;

	if (random_hex(id) < 0) {
		html(resp, 500, refused_page);
		return;
	}
	pthread_mutex_lock(&s->lock);
	t = lookup(dash.tokens, dt_http_arg(req, "token"));
	if (t) {
		sess = slot(dash.sessions, &t->who);
		memcpy(sess->id, id, sizeof(sess->id));
		sess->who = t->who;
		sess->expires_ms = dt_mono_ms() + DASH_SESSION_S * 1000LL;
		t->id[0] = '\0';   /* once */
	}
	pthread_mutex_unlock(&s->lock);
	if (!t) {
		html(resp, 403, refused_page);
		return;
	}
	/* no script: the policy allows only the pages' own (dashboard_start) */
	strbuf_addf(&page, "<!doctype html><html><head><meta charset=utf-8>"
		    "<meta name=referrer content=no-referrer>"
		    "<meta http-equiv=refresh content='0;url=/ui/s/%s/'><title>dtctl</title></head>"
		    "<body><p><a href='/ui/s/%s/'>open the dashboard</a></p></body></html>", id, id);
	html(resp, 200, page.buf);
	strbuf_release(&page);
}

/* Is the request's session live?  Whose it is into *who when not NULL. */
static int session_ok(struct sched *s, struct dt_http_request *req, struct caller *who)
{
	struct dash_secret *d;

	pthread_mutex_lock(&s->lock);
	d = lookup(dash.sessions, dt_http_arg(req, "session"));
	if (d && who)
		*who = d->who;
	pthread_mutex_unlock(&s->lock);
	return d != NULL;
}

/* The handler of method + pattern in dtsched's route table, NULL when none. */
static dt_http_handler *route_handler(const char *method, const char *pattern)
{
	for (size_t i = 0; i < dash.nr_api; i++)
		if (!strcmp(dash.api[i].method, method) && !strcmp(dash.api[i].pattern, pattern))
			return dash.api[i].fn;
	return NULL;
}

/* One handler of the API, called as the server would (lock not held): its reply, parsed. */
static json_t *call_api_id(struct sched *s, const struct caller *who, dt_http_handler *fn,
			   const char *method, const char *path, json_t *body, const char *id,
			   int *status)
{
	struct dt_http_request req;
	struct dt_http_response r;
	json_t *out = NULL;

	if (!fn)
		return NULL;
	memset(&req, 0, sizeof(req));
	if (id) {   /* the route's {id} */
		req.args.nr = 1;
		req.args.name[0] = "id";
		req.args.name_len[0] = 2;
		snprintf(req.args.value[0], sizeof(req.args.value[0]), "%s", id);
	}
	memset(&r, 0, sizeof(r));
	strbuf_init(&r.text, 0);
	req.method = method;
	req.path = path;
	req.body = "";
	req.json = body;
	req.protocol = DT_PROTOCOL_VERSION;
	/* asked as the session's user, so the API's own rules apply (users.h) */
	req.peer_uid = req.peer_gid = req.peer_pid = -1;
	if (who->uid >= 0) {
		req.via = DT_VIA_PEERCRED;
		req.peer_uid = who->uid;
	} else if (strcmp(who->how, "cluster secret")) {
		req.via = DT_VIA_USERKEY;
		snprintf(req.user, sizeof(req.user), "%s", who->name);
	} else {
		req.via = DT_VIA_SECRET;
	}
	fn(&req, &r, s);
	if (status)
		*status = r.status ? r.status : 200;
	if (r.json)
		out = r.json;
	else if (r.text.len)
		out = json_loadb(r.text.buf, r.text.len, 0, NULL);
	strbuf_release(&r.text);
	return out;
}

static json_t *call_api(struct sched *s, const struct caller *who, dt_http_handler *fn,
			const char *method, const char *path, json_t *body)
{
	return call_api_id(s, who, fn, method, path, body, NULL, NULL);
}

/* each node's GPUs: index, name, utilisation, memory, allocated to a task (lock held) */
static json_t *gpus_json(struct sched *s)
{
	json_t *out = json_object();

	for (size_t i = 0; i < s->nr; i++) {
		struct node *n = s->nodes[i];
		json_t *arr = json_array(), *g, *t;
		const char *id;
		size_t k;
		unsigned char used[1024] = { 0 };

		json_object_foreach(n->tasks, id, t) {
			const char *cvd = json_get_str(t, "cuda_visible_devices", NULL);

			if (task_state_final_str(json_get_str(t, "state", NULL)))
				continue;
			while (cvd && *cvd) {
				char *end;
				long d = strtol(cvd, &end, 10);

				if (end == cvd)
					break;
				if (d >= 0 && d < (long)sizeof(used))
					used[d] = 1;
				cvd = *end == ',' ? end + 1 : end;
			}
		}
		json_array_foreach(json_object_get(n->inventory, "gpus"), k, g)
			json_array_append_new(arr, json_pack("{s:I,s:s,s:O?,s:O?,s:O?,s:b}", "index",
				(json_int_t)json_get_int(g, "index", (long long)k), "name",
				json_get_str(g, "name", ""), "utilization", json_object_get(g, "utilization"),
				"memory_used", json_object_get(g, "memory_used"), "memory_total",
				json_object_get(g, "memory_total"), "allocated", k < sizeof(used) && used[k]));
		json_object_set_new(out, n->name, arr);
	}
	return out;
}

/* GET /ui/s/{session}/api/state: nodes (with GPUs), jobs, the newest events */
static void h_state(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	json_t *nodes, *jobs, *sweeps, *evs, *gpus, *n, *q;
	long long last;
	size_t i;

	struct caller who;

	if (!session_ok(s, req, &who)) {
		dt_http_error(resp, 403, "not signed in: run 'dtctl dashboard' for a login link");
		return;
	}
	nodes = call_api(s, &who, route_handler("GET", DT_PATH_NODES), "GET", DT_PATH_NODES, NULL);
	jobs = call_api(s, &who, route_handler("GET", DT_PATH_JOBS), "GET",
			DT_PATH_JOBS, NULL);
	sweeps = call_api(s, &who, route_handler("GET", DT_PATH_SWEEPS),
			  "GET", DT_PATH_SWEEPS, NULL);
	pthread_mutex_lock(&s->lock);
	last = s->events_last;
	gpus = gpus_json(s);
	pthread_mutex_unlock(&s->lock);
	q = json_pack("{s:I,s:i}", "after_id", (json_int_t)(last > 30 ? last - 30 : 0), "limit", 30);
	evs = call_api(s, &who, route_handler("POST", DT_PATH_EVENTS),
		       "POST", DT_PATH_EVENTS, q);
	json_decref(q);
	json_array_foreach(json_object_get(nodes, "nodes"), i, n) {
		json_t *g = json_object_get(gpus, json_get_str(n, "name", ""));

		json_object_set(n, "gpus", g ? g : json_array());
	}
	dt_http_json(resp, 200, json_pack("{s:s,s:O?,s:O?,s:O?,s:O?}", "user", who.name, "nodes",
					  json_object_get(nodes, "nodes"), "jobs",
					  json_object_get(jobs, "jobs"), "sweeps",
					  json_object_get(sweeps, "sweeps"), "events",
					  json_object_get(evs, "events")));
	json_decref(sweeps);
	json_decref(nodes);
	json_decref(jobs);
	json_decref(evs);
	json_decref(gpus);
}

static const char page[] =
#include "dashboard-page.h"
	;

/* GET /ui/s/{session}/: the page */
static void h_page(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	int ok = session_ok(data, req, NULL);

	html(resp, ok ? 200 : 403, ok ? page : refused_page);
}

/*
 * POST /ui/s/{session}/api/jobs/{id}/cancel: for the job's owner only (the
 * user the session was made for; docs/dashboard.md).  The session id in the
 * path is what another site cannot know, so a forged form cannot post here.
 */
static void h_cancel(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	const char *id = dt_http_arg(req, "id");
	struct caller who;
	struct job *j;

	if (!session_ok(s, req, &who)) {
		dt_http_error(resp, 403, "not signed in: run 'dtctl dashboard' for a login link");
		return;
	}
	pthread_mutex_lock(&s->lock);
	j = job_find(s, id);
	if (!j) {
		dt_http_error(resp, 404, "no job '%s'", id);
	} else if (!caller_may_steer(&who, j->user ? j->user : "")) {
		dt_http_error(resp, 403, "job %s is %s's: only its owner (or an admin) may cancel "
			      "it", j->id, j->user ? j->user : "?");
	} else {
		struct strbuf why = STRBUF_INIT;

		strbuf_addf(&why, "cancelled from the dashboard by %s", who.name);
		jobs_cancel(s, id, why.buf);
		strbuf_release(&why);
		dt_http_json(resp, 200, json_pack("{s:s,s:s}", "job", j->id, "state", j->state));
	}
	pthread_mutex_unlock(&s->lock);
}

/* GET /ui/s/{session}/api/jobs/{id}: the job as `dtctl show --json` has it, its events */
static void h_job(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	const char *id = dt_http_arg(req, "id");
	struct caller who;
	int may = 0;
	struct job *j;
	json_t *job = NULL, *q, *evs;

	if (!session_ok(s, req, &who)) {
		dt_http_error(resp, 403, "not signed in: run 'dtctl dashboard' for a login link");
		return;
	}
	pthread_mutex_lock(&s->lock);
	if ((j = job_find(s, id)) && (may = caller_may_read(&who, j->user, j->cfg.share_group)))
		job = job_json_shown(s, j);
	pthread_mutex_unlock(&s->lock);
	if (j && !may) {
		dt_http_error(resp, 403, "job %s belongs to %s: its page is its owner's (or an "
			      "admin's; share: group opens it to the owner's group)", id, j->user);
		return;
	}
	if (!job) {
		dt_http_error(resp, 404, "no job '%s'", id);
		return;
	}
	q = json_pack("{s:I,s:s,s:i}", "after_id", (json_int_t)0, "job", id, "limit", 1000);
	evs = call_api(s, &who, route_handler("POST", DT_PATH_EVENTS),
		       "POST", DT_PATH_EVENTS, q);
	json_decref(q);
	dt_http_json(resp, 200, json_pack("{s:s,s:o,s:O?}", "user", who.name, "job", job, "events",
					  json_object_get(evs, "events")));
	json_decref(evs);
}

#define LOG_FIRST 500             /* lines a first look gets: the newest */
#define LOG_MAX 2000              /* lines one follow-up gets */
#define LOG_TAIL_BUDGET (4 << 20)  /* bytes a first look reads, over all ranks */

/*
 * The job {id} of a page's API request, if the session's user may read it:
 * returned with s->lock held (the caller copies what it needs and unlocks);
 * else NULL, the lock not held, and 403 or 404 answered.
 */
static struct job *job_of_page(struct sched *s, struct dt_http_request *req,
			       struct dt_http_response *resp)
{
	const char *id = dt_http_arg(req, "id");
	struct caller who;
	struct job *j;

	if (!session_ok(s, req, &who)) {
		dt_http_error(resp, 403, "not signed in: run 'dtctl dashboard' for a login link");
		return NULL;
	}
	pthread_mutex_lock(&s->lock);
	j = job_find(s, id);
	if (j && caller_may_read(&who, j->user, j->cfg.share_group))
		return j;
	pthread_mutex_unlock(&s->lock);
	if (j)
		dt_http_error(resp, 403, "job %s is not yours: its logs and metrics are its "
			      "owner's (or an admin's)", id);
	else
		dt_http_error(resp, 404, "no job '%s'", id);
	return NULL;
}

/*
 * GET /ui/s/{session}/api/jobs/{id}/logs/{after}: the job's rank logs merged
 * in time order (lib/logmerge.h, read through lib/safefile.h), the lines
 * stamped after `after` (microseconds; 0: the newest LOG_FIRST), at most
 * LOG_MAX; "last" is the cursor of the next request.  Each rank's file is
 * entered near its end (logset_seek: a first look reads its last
 * LOG_TAIL_BUDGET/ranks bytes, a follow-up bisects to its cursor's stamp),
 * so a request costs bounded bytes on the dashboard's thread however large
 * a log grew, and is not offloaded.  Partial last lines wait
 * for their newline.  (Two ranks' lines of the same microsecond split across
 * two requests would lose the second: the stamps are the agents' clocks in
 * microseconds.)
 */
static void h_job_logs(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	const char *a = dt_http_arg(req, "after");
	long long after = 0, last = 0;
	struct logset ls;
	const struct logline *l;
	struct job *j;
	json_t *lines;
	int final;

	for (const char *p = a; *p; p++)
		after = *p >= '0' && *p <= '9' && after < 1000000000000000000LL / 10 ?
			after * 10 + (*p - '0') : -1;
	if (after < 0) {
		dt_http_error(resp, 400, "the cursor must be a number of microseconds");
		return;
	}
	if (!(j = job_of_page(s, req, resp)))
		return;
	final = jobstate_final(j->state);
	job_logset(j, &ls);
	pthread_mutex_unlock(&s->lock);
	lines = json_array();
	/* a page's look reads bounded bytes, however long the logs grew: this
	 * runs on the dashboard's one thread, every user's pages wait on it */
	logset_seek(&ls, after, ls.nr_src ? LOG_TAIL_BUDGET / ls.nr_src > LOG_MAX_LINE ?
		    LOG_TAIL_BUDGET / ls.nr_src : LOG_MAX_LINE + 1 : 0);
	logset_begin(&ls, LOGSET_ALL | (final ? LOGSET_FINAL : 0));
	while ((l = logset_next(&ls))) {
		char ts[DT_TIMESTAMP_LEN];

		if (l->ts <= after)
			continue;
		dt_timestamp_format(ts, sizeof(ts), l->ts);
		json_array_append_new(lines, json_pack("{s:I,s:s,s:i,s:s,s:s,s:i,s:s}", "ts",
			(json_int_t)l->ts, "time", ts, "rank", l->rank, "node", l->node ? l->node : "?",
			"stream", l->stream == 'E' ? "stderr" : "stdout", "attempt", l->attempt,
			"text", l->text));
		last = l->ts;
		if (after && json_array_size(lines) >= LOG_MAX)
			break;
		if (!after && json_array_size(lines) > LOG_FIRST)
			json_array_remove(lines, 0);
	}
	logset_end(&ls);
	logset_release(&ls);
	dt_http_json(resp, 200, json_pack("{s:o,s:I,s:b}", "lines", lines, "last",
					  (json_int_t)(last ? last : after), "final", final));
}

#define METRICS_MAX_BYTES (8 << 20)   /* of metrics.jsonl read for the plots */
#define METRICS_MAX_POINTS 5000
#define CHART_JS "/usr/share/javascript/chart.js/chart.min.js"   /* Debian's libjs-chart.js */

/*
 * GET /ui/s/{session}/api/jobs/{id}/metrics: the job's metrics file
 * (<job_dir>/metrics.jsonl, read through lib/safefile.h, at most 8 MiB) as
 * points: each line's numeric fields, the last METRICS_MAX_POINTS lines.
 */
static void h_job_metrics(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct strbuf root = STRBUF_INIT, rel = STRBUF_INIT, text = STRBUF_INIT, why = STRBUF_INIT;
	json_t *points;
	struct job *j;

	if (!(j = job_of_page(s, req, resp)))
		return;
	strbuf_addstr(&root, j->shared_dir);
	job_rel(j, "metrics.jsonl", &rel);
	pthread_mutex_unlock(&s->lock);
	points = json_array();
	if (sf_read(root.buf, rel.buf, &text, METRICS_MAX_BYTES, &why) >= 0) {
		for (char *line = text.buf, *nl; line && *line; line = nl ? nl + 1 : NULL) {
			json_t *o, *pt, *v;
			const char *k;

			nl = strchr(line, '\n');
			if (nl)
				*nl = '\0';
			else if (line + strlen(line) == text.buf + text.len)
				break;   /* a line still being written */
			o = json_loads(line, 0, NULL);
			pt = json_object();
			json_object_foreach(o, k, v)
				if (json_is_number(v))
					json_object_set(pt, k, v);
			if (json_object_size(pt))
				json_array_append(points, pt);
			json_decref(pt);
			json_decref(o);
			if (json_array_size(points) > METRICS_MAX_POINTS)
				json_array_remove(points, 0);
		}
	}
	dt_http_json(resp, 200, json_pack("{s:o}", "points", points));
	strbuf_release(&root);
	strbuf_release(&rel);
	strbuf_release(&text);
	strbuf_release(&why);
}

/* GET /ui/s/{session}/chart.js: Debian's Chart.js, from its package (no CDN) */
static void h_chart_js(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct strbuf why = STRBUF_INIT;

	if (!session_ok(data, req, NULL)) {
		html(resp, 403, refused_page);
		return;
	}
	if (sf_read_path(CHART_JS, &resp->text, 4 << 20, &why) < 0) {
		strbuf_reset(&resp->text);
		strbuf_addf(&resp->text, "/* %s: %s (install Debian's libjs-chart.js) */\n", CHART_JS,
			    why.buf);
		resp->status = 404;
	}
	resp->content_type = "text/javascript; charset=utf-8";
	strbuf_release(&why);
}

/*
 * GET /ui/s/{session}/sweeps/{id}: the sweep's report (cli/sweep-report.h: its
 * trials, the best, the curves and parallel coordinates, self-contained
 * HTML with SVG) made from what `dtctl sweep export --json` prints.
 */
static void h_sweep_page(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct strbuf out = STRBUF_INIT, err = STRBUF_INIT;
	json_t *export;
	int status = 0;
	struct caller who;

	if (!session_ok(s, req, &who)) {
		html(resp, 403, refused_page);
		return;
	}
	export = call_api_id(s, &who, route_handler("GET",
					      DT_PATH_SWEEP), "GET", DT_PATH_SWEEP, NULL,
			     dt_http_arg(req, "id"), &status);
	if (export && !json_object_get(export, "protocol"))   /* as the server sends it */
		json_object_set_new(export, "protocol", json_integer(DT_PROTOCOL_VERSION));
	if (status != 200 || !export) {
		html(resp, status == 200 ? 500 : status, "<!doctype html><title>dtctl</title>"
		     "<p>No such sweep.</p>");
	} else if (sweep_report_html(export, &out, &err) < 0) {
		strbuf_reset(&out);
		strbuf_addstr(&out, "<!doctype html><title>dtctl</title><p>No report: ");
		for (const char *p = err.buf; *p; p++)   /* escaped: it may quote the sweep */
			if (*p == '<')
				strbuf_addstr(&out, "&lt;");
			else if (*p == '&')
				strbuf_addstr(&out, "&amp;");
			else
				strbuf_addch(&out, *p);
		html(resp, 500, out.buf);
	} else {
		html(resp, 200, out.buf);
	}
	json_decref(export);
	strbuf_release(&out);
	strbuf_release(&err);
}

static const char job_page[] =
#include "dashboard-job.h"
	;

/* GET /ui/s/{session}/jobs/{id}: one job's page */
static void h_job_page(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	int ok = session_ok(data, req, NULL);

	html(resp, ok ? 200 : 403, ok ? job_page : refused_page);
}

static const struct dt_http_route ui_routes[] = {
	{ "GET", "/ui/s/{session}/jobs/{id}", DT_ROUTE_PUBLIC, h_job_page },
	{ "GET", "/ui/s/{session}/sweeps/{id}", DT_ROUTE_PUBLIC, h_sweep_page },
	{ "GET", "/ui/s/{session}/api/jobs/{id}", DT_ROUTE_PUBLIC, h_job },
	{ "GET", "/ui/s/{session}/api/jobs/{id}/logs/{after}", DT_ROUTE_PUBLIC, h_job_logs },
	{ "GET", "/ui/s/{session}/api/jobs/{id}/metrics", DT_ROUTE_PUBLIC, h_job_metrics },
	{ "GET", "/ui/s/{session}/chart.js", DT_ROUTE_PUBLIC, h_chart_js },
	{ "GET", "/ui/login/{token}", DT_ROUTE_PUBLIC, h_login },
	{ "GET", "/ui/s/{session}/", DT_ROUTE_PUBLIC, h_page },
	{ "GET", "/ui/s/{session}/api/state", DT_ROUTE_PUBLIC, h_state },
	{ "POST", "/ui/s/{session}/api/jobs/{id}/cancel", DT_ROUTE_PUBLIC, h_cancel },
};

const struct dt_http_route dashboard_routes[] = {
	{ "POST", DT_PATH_DASHBOARD_LOGIN, 0, h_login_mint },
};
const size_t dashboard_nr_routes = ARRAY_SIZE(dashboard_routes);

/* " 'sha256-<base64>'" of each inline <script> in text (CSP's hash source) */
static void add_script_hashes(struct strbuf *csp, const char *text)
{
	for (const char *p = text; (p = strstr(p, "<script>")); ) {
		const char *body = p + strlen("<script>"), *end = strstr(body, "</script>");
		unsigned char md[DT_SHA256_LEN];
		char b64[BASE64_ENCODE_RAW_LENGTH(DT_SHA256_LEN) + 1];

		if (!end)
			break;
		dt_sha256(body, (size_t)(end - body), md);
		base64_encode_raw(b64, DT_SHA256_LEN, md);
		b64[BASE64_ENCODE_RAW_LENGTH(DT_SHA256_LEN)] = '\0';
		strbuf_addf(csp, " 'sha256-%s'", b64);
		p = end;
	}
}

/*
 * The headers of every reply: scripts only from the dashboard itself and the
 * pages' own inline scripts, by their hashes (a job name, log line or sweep
 * parameter that ever got into a page as markup could run nothing), requests
 * only to the dashboard, no framing (clickjacking the cancel button), no MIME
 * sniffing, no Referer (the session is in the path), nothing cached.
 */
static void security_headers(void)
{
	struct strbuf csp = STRBUF_INIT, report = STRBUF_INIT;
	const char *const h[] = {
		"Content-Security-Policy", dash.csp, "X-Content-Type-Options", "nosniff",
		"X-Frame-Options", "DENY", "Referrer-Policy", "no-referrer",
		"Cache-Control", "no-store", "Cross-Origin-Opener-Policy", "same-origin", NULL,
	};

	strbuf_addstr(&csp, "default-src 'none'; script-src 'self'");
	add_script_hashes(&csp, page);
	add_script_hashes(&csp, job_page);
	strbuf_addf(&report, "<script>%s</script>", sweep_report_script());
	add_script_hashes(&csp, report.buf);
	strbuf_addstr(&csp, "; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
		      "connect-src 'self'; base-uri 'none'; form-action 'none'; "
		      "frame-ancestors 'none'");
	snprintf(dash.csp, sizeof(dash.csp), "%s", csp.buf);
	memcpy(dash.headers, h, sizeof(h));
	strbuf_release(&csp);
	strbuf_release(&report);
}

int dashboard_start(struct sched *s, const struct dt_http_route *api, size_t nr_api)
{
	struct dt_httpd_opts ho = DT_HTTPD_OPTS_INIT;
	struct strbuf err = STRBUF_INIT;

	dash.api = api;
	dash.nr_api = nr_api;
	/* 127.0.0.1 unless cluster.yaml says otherwise (head.dashboard_address), never
	 * where the agents reach dtsched; a free port unless head.dashboard_port */
	ho.bind = s->cc && s->cc->head.dashboard_address ? s->cc->head.dashboard_address :
		"127.0.0.1";
	ho.port = s->cc ? s->cc->head.dashboard_port : 0;
	ho.routes = ui_routes;
	ho.nr_routes = ARRAY_SIZE(ui_routes);
	ho.data = s;
	ho.key = &s->key;
	ho.max_body = 4096;
	ho.conn_limit = 256;
	security_headers();
	ho.headers = dash.headers;
	dash.srv = dt_httpd_start(&ho, &err);
	if (!dash.srv) {
		dtlog(DTLOG_WARN, "dashboard not started: %s", err.buf);
		strbuf_release(&err);
		return -1;
	}
	snprintf(dash.url, sizeof(dash.url), strchr(ho.bind, ':') ? "http://[%s]:%d" :
		 "http://%s:%d", ho.bind, dt_httpd_port(dash.srv));
	dtlog(DTLOG_INFO, "dashboard on %s ('dtctl dashboard' for a login link)", dash.url);
	strbuf_release(&err);
	return 0;
}

void dashboard_stop(struct sched *s)
{
	if (dash.srv)
		dt_httpd_stop(dash.srv);
	memset(&dash, 0, sizeof(dash));
}
