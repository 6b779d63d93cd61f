/*
 * sched.c - dtsched's top (see sched.h): sched_run() opens the database
 * (db.c), chooses where ranks run (s->backend: backend.h), subscribes the
 * features to the job events (jobstate.h), loads the nodes, jobs and sweeps,
 * serves the route table, GET /v1/status and /metrics, and runs the main
 * loop (the node tick, sweeps_step, jobs_step).  Everything else is below it.
 */
#include "sched.h"
#include "sched-int.h"
#include "jobs-int.h"
#include "sweeps-int.h"
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
#include "users.h"
#include "secret.h"

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
	acct_metrics(s, o);
	pthread_mutex_unlock(&s->lock);
	notify_metrics(s, o);
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

/* GET /v1/whoami: who dtsched takes the caller for (users.h) */
static void h_whoami(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct caller c;

	pthread_mutex_lock(&s->lock);
	if (caller_of(s, req, &c, resp) == 0) {
		json_t *o = caller_json(&c);

		json_object_set_new(o, "mode", json_string(s->cc && s->cc->team ? "team" :
							  "single-user"));
		head_key_json(s, o);
		dt_http_json(resp, 200, o);
	}
	pthread_mutex_unlock(&s->lock);
}

/*
 * The local socket (users.h): the path and mode cluster.yaml gives (or
 * --socket), its folder made when missing and refused when others may write
 * to it (a socket planted there would answer for dtsched).  NULL server when
 * it cannot be had: dtsched serves the port anyway, and says why.
 */
static struct dt_httpd *local_start(struct sched *s, struct dt_httpd_opts ho)
{
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT, dir = STRBUF_INIT;
	struct dt_httpd *srv = NULL;
	int team = s->cc && s->cc->team;
	struct stat st;

	if (s->o.socket)
		strbuf_addstr(&path, s->o.socket);
	else
		cluster_head_socket(s->cc, s->o.home, &path);
	strbuf_add(&dir, path.buf, strrchr(path.buf, '/') ? (size_t)(strrchr(path.buf, '/') -
								     path.buf) : 0);
	/* 0755 whatever the daemon's umask (027): users must reach the socket */
	if (dir.len && lstat(dir.buf, &st) < 0 && (mkdir(dir.buf, 0755) < 0 ||
						   chmod(dir.buf, 0755) < 0)) {
		dtlog(DTLOG_WARN, "no local socket: cannot make '%s': %s", dir.buf, strerror(errno));
		goto out;
	}
	if (dir.len && (lstat(dir.buf, &st) < 0 || !S_ISDIR(st.st_mode) ||
			(st.st_mode & 022) || (st.st_uid != 0 && st.st_uid != geteuid()))) {
		dtlog(DTLOG_WARN, "no local socket: its folder '%s' is not a folder of root or "
		      "dtsched's user that only its owner may write to", dir.buf);
		goto out;
	}
	ho.unix_path = path.buf;
	ho.unix_mode = team ? 0666 : 0600;
	srv = dt_httpd_start(&ho, &err);
	if (!srv)
		dtlog(DTLOG_WARN, "no local socket: %s", err.buf);
	else
		dtlog(DTLOG_INFO, "users on the head: '%s' (mode %04o, %s mode)", path.buf,
		      ho.unix_mode, team ? "team" : "single-user");
out:
	strbuf_release(&path);
	strbuf_release(&err);
	strbuf_release(&dir);
	return srv;
}

static const struct dt_http_route base_routes[] = {
	{ "GET", DT_PATH_STATUS, 0, h_status },
	{ "POST", DT_PATH_HEARTBEAT, DT_ROUTE_RAW_BODY | DT_ROUTE_ANY_PROTOCOL | DT_ROUTE_DAEMON,
	  h_heartbeat },
	{ "GET", DT_PATH_NODES, 0, h_nodes },
	{ "GET", DT_PATH_NODE, 0, h_node },
	{ "POST", DT_PATH_NODE_DRAIN, 0, h_node_drain },
	{ "POST", DT_PATH_NODE_RESUME, 0, h_node_resume },
	{ "POST", DT_PATH_NODE_STOPPED, DT_ROUTE_DAEMON, h_node_stopped },
	{ "GET", DT_PATH_TASKS, DT_ROUTE_DAEMON, h_tasks },
	{ "GET", DT_PATH_WHOAMI, 0, h_whoami },
	{ "GET", DT_PATH_METRICS, DT_ROUTE_PUBLIC, h_metrics },
};

/* ------------------------------------------------------------------ run */

/* The features that hear of a job's life (sched-int.h), before any job moves. */
static int subscribe(struct sched *s)
{
	events_jobs_subscribe(s);   /* first: the stream's order is the transitions' */
	jobs_metrics_subscribe(s);
	fabric_subscribe(s);
	quarantine_subscribe(s);
	hang_subscribe(s);
	goodput_subscribe(s);
	sweeps_subscribe(s);
	return acct_subscribe(s);
}

/*
 * dtsched's own ed25519 key: the seed in <home>/head_key (32 random bytes as
 * hex, 0600, made at the first start), so that users who sign with their own
 * key can check its replies (docs/team.md, "dtsched's key").  Without it
 * those replies go unsigned, as before; the log says why.
 */
static void head_key_load(struct sched *s, const char *home)
{
	struct strbuf path = STRBUF_INIT, hex = STRBUF_INIT;
	struct dt_auth_key seed;

	strbuf_addf(&path, "%s/head_key", home);
	if (dt_secret_ensure_file(path.buf, &hex) < 0 || dt_auth_key_from_hex(&seed, hex.buf) < 0 ||
	    seed.len != DT_ED25519_LEN) {
		dtlog(DTLOG_WARN, "no key of dtsched's own ('%s'): replies to users' key-signed "
		      "requests go unsigned", path.buf);
	} else {
		memcpy(s->head_key.seed, seed.bytes, DT_ED25519_LEN);
		s->have_head_key = dt_userkey_from_seed(&s->head_key) == 0;
	}
	memset(&seed, 0, sizeof(seed));
	if (hex.len)
		memset(hex.buf, 0, hex.len);
	strbuf_release(&hex);
	strbuf_release(&path);
}

/* The notify: list events_add() was given with ev: its sweep's (sweep_event()),
 * else its job's; notify.c asks it for the events it owes at a start. */
static const json_t *notify_list_of(struct sched *s, const json_t *ev)
{
	const char *sweep = json_get_str(ev, "sweep", NULL), *job = json_get_str(ev, "job", NULL);
	struct sweep *w;
	struct job *j;

	if (sweep)
		return (w = sweep_find(s, sweep)) ? w->cfg.job.notify : NULL;
	return job && (j = job_find(s, job)) ? j->cfg.notify : NULL;
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
	s->backend = &agents_backend;   /* the default; cluster.yaml may name another below */
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
	head_key_load(s, o->home);
	if (o->db_path)
		strbuf_addstr(&path, o->db_path);
	else
		strbuf_addf(&path, "%s/state.db", o->home);
	if (db_open(s, path.buf, &err) < 0)
		goto fail;
	if (db_schema(s) < 0 || events_init(s) < 0 ||
	    nodes_init(s) < 0 || head_id_load(s) < 0 || subscribe(s) < 0 || jobs_init(s) < 0 ||
	    sweeps_init(s) < 0 || users_init(s) < 0) {
		strbuf_addf(&err, "cannot use the state database '%s': %s", path.buf,
			    sqlite3_errmsg(s->db));
		goto fail;
	}
	/* where ranks run (backend.h): cluster.yaml's backend:, the one choice of it */
	pthread_mutex_lock(&s->lock);
	cluster_refresh(s);
	pthread_mutex_unlock(&s->lock);
	if (s->cc && s->cc->backend == BACKEND_SLURM)
		s->backend = &slurm_backend;
	if (s->backend != &agents_backend)
		dtlog(DTLOG_INFO, "backend: %s", s->backend->name);
	s->notify_list_of = notify_list_of;
	if (notify_start(s) < 0 || logwatch_start(s) < 0) {
		strbuf_addstr(&err, "cannot start the notifications' threads");
		goto fail;
	}
	acct_backfill(s);
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
	{
		const struct { const struct dt_http_route *r; size_t nr; } parts[] = {
			{ base_routes, ARRAY_SIZE(base_routes) }, { jobs_routes, jobs_nr_routes },
			{ sweeps_routes, sweeps_nr_routes }, { events_routes, events_nr_routes },
			{ dashboard_routes, dashboard_nr_routes }, { acct_routes, acct_nr_routes },
			{ users_routes, users_nr_routes },
		};
		size_t nr = 0;

		for (size_t i = 0; i < ARRAY_SIZE(parts); i++)
			nr += parts[i].nr;
		routes = xcalloc(nr, sizeof(*routes));
		nr = 0;
		for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
			memcpy(routes + nr, parts[i].r, parts[i].nr * sizeof(*routes));
			nr += parts[i].nr;
		}
		ho.routes = routes;
		ho.nr_routes = nr;
	}
	ho.user_key = users_key;
	ho.reply_userkey = s->have_head_key ? &s->head_key : NULL;
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
	pthread_mutex_lock(&s->lock);
	cluster_refresh(s);   /* mode and head.socket */
	pthread_mutex_unlock(&s->lock);
	s->srv_local = local_start(s, ho);
	/* test only: take beacons off the socket and drop them (a firewall that
	 * drops UDP), while still telling agents that beacons are taken */
	{
		const char *drop = getenv("DTSCHED_TEST_DROP_BEACONS");

		s->beacons_ignored = drop && *drop == '1';
	}
	s->beacon_fd = beacon_open(s);
	dashboard_start(s, routes, ho.nr_routes);   /* without it dtsched runs on; the log says why */
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
			nodes_tick(s);
			if (dt_mono_ms() - last_flush >= FLUSH_MS) {
				last_flush = dt_mono_ms();
				nodes_flush(s);
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
		struct dt_httpd *local = s->srv_local;

		srv = s->srv;
		s->srv = NULL;
		s->srv_local = NULL;
		pthread_mutex_unlock(&s->lock);
		dashboard_stop(s);   /* first: its handlers call the API's */
		dt_httpd_stop(srv);
		dt_httpd_stop(local);
	}
	if (s->beacon_fd >= 0)
		close(s->beacon_fd);
	pthread_mutex_lock(&s->lock);
	nodes_flush(s);
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
	logwatch_stop(s);   /* before the jobs: they may still add an event */
	notify_stop(s);
	json_decref(s->users);
	sweeps_release(s);
	jobs_release(s);
	events_release(s);
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
