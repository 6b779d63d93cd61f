/*
 * sched-int.h - dtsched's internals shared by its files: the database
 * (db.c), the node table (nodes.c, heartbeat.c, nodes-api.c), the jobs (what
 * only their files share is in jobs-int.h), the sweeps (sweeps-int.h) and
 * sched.c on top.  The files are layers (docs/architecture.md; make lint
 * checks that none calls up into one that calls it).  Not a public API: only
 * scheduler/ includes it.
 *
 * Locking: s->lock guards everything below except the fields marked
 * "main thread", which only the thread running sched_run()'s loop touches.
 */
#ifndef DT_SCHED_INT_H
#define DT_SCHED_INT_H

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include "auth.h"
#include "beacon.h"
#include "config.h"
#include "httpd.h"
#include "userkey.h"
#include "sched.h"
#include "backend.h"
#include "jobstate.h"

#define NODE_MAX_GPUS 1024     /* GPUs of one node the head counts (placement.h's slots) */

struct node {
	char *name;
	char *address;
	int port;
	const char *state;          /* DT_NODE_* */
	int drained;
	int down_latched;           /* DOWN when loaded: stays DOWN until it heartbeats */
	int stopped;                /* its agent said it stops (POST .../stopped): DOWN with
				     * "agent stopped" until it heartbeats again */
	int stop_grace;             /* and its tasks are kept until dead_after, as an agent
				     * restart adopts them again (they run on) */
	long long last_hb_us;       /* wall clock, 0 = never */
	long long last_hb_mono;     /* 0 = not since this dtsched started */
	json_t *inventory;
	char inv_hash[72];          /* the agent's inventory_hash for it ("" = unknown) */
	long long saved_hb_us;      /* last_hb_us as last written to the database */
	json_t *tasks;              /* id -> last known TASK (as in the database) */
	int gpus_total, gpus_used, cpus, tasks_running;
	/* bit d: GPU d is held by a live task that is no job's (started through the
	 * agent API): made by node_derive() whenever the tasks change, read by
	 * every scheduling request (backend-agents.c, agents_gpus_taken) */
	unsigned long long nonjob_gpus[NODE_MAX_GPUS / 64];
	double gpu_util;
	long long mem_total, mem_available;
	char *agent_version;
	char *agent_started;
	int want_full;
	int dirty;
	char *bin_dir;              /* the agent's bin dir (dtagent, dttrain) */
	char *home;                 /* the agent's home */
	char *ssh_config;           /* <home>/ssh_config when the agent has one */
	/* beacons (protocol.h): what the last HTTP heartbeat said, for comparing */
	long long last_seq;         /* highest seq seen from agent_started's agent */
	char tasks_digest[24];      /* its tasks_digest ("" = none: no beacons) */
	unsigned beacons_since_http;   /* accepted since the last HTTP heartbeat */
	unsigned long long beacons_accepted, beacons_refused;
	long long resync_mono;      /* when a resync was last sent for it */
	/* health (agent/health.h, from the inventory) and why it is drained */
	const char *health;         /* "ok", "degraded", "bad", or "" when the agent says nothing */
	char *health_reason;        /* the worst event's detail, or NULL */
	const char *health_evented; /* the health the last node.health event said (events.c) */
	char *drain_reason;         /* "auto: XID 79 on GPU 1 ... (2026-...)", "by dtctl drain" */
	int cc_hint;                /* where it last was in cluster.yaml's nodes (a guess:
				     * jobs-queue.c checks the name) */
};

/* why beacons were dropped or taken (GET /metrics); the first six are
 * dt_beacon_verify()'s results */
enum beacon_count {
	BEACON_ACCEPTED = DT_BEACON_OK,
	BEACON_TOO_LARGE = DT_BEACON_TOO_LARGE, BEACON_VERSION = DT_BEACON_VERSION,
	BEACON_MALFORMED = DT_BEACON_MALFORMED, BEACON_STALE = DT_BEACON_STALE,
	BEACON_BAD_MAC = DT_BEACON_BAD_MAC,
	BEACON_REPLAY, BEACON_UNKNOWN_NODE, BEACON_NODE_DOWN, BEACON_MISMATCH,
	BEACON_IGNORED,             /* DTSCHED_TEST_DROP_BEACONS: read and dropped */
	NR_BEACON_COUNTS
};

struct jobs_stats;
struct fs_usage;
struct fair_cache;
struct sched {
	struct sched_opts o;
	struct jobs_stats *jstats;  /* jobs-metrics.c: counters and histograms for /metrics */
	pthread_mutex_t lock;
	struct node **nodes;        /* sorted by name */
	size_t nr, alloc;
	sqlite3 *db;
	sqlite3_stmt *st_node, *st_task;
	struct dt_httpd *srv;
	struct dt_httpd *srv_local; /* the same routes on the local socket (users.h), or NULL */
	struct dt_auth_key key;
	/* dtsched's own ed25519 key (<home>/head_key, 0600): it signs the replies to
	 * users' key-signed requests (docs/team.md); have_head_key 0 if it could not be had */
	struct dt_userkey head_key;
	int have_head_key;
	long long started_mono, started_us;
	unsigned long long heartbeats, nodes_failed;
	int beacon_fd;              /* UDP beacons, -1 when not taken */
	int beacons_ignored;        /* test only: read beacons and drop them */
	unsigned long long beacons[NR_BEACON_COUNTS], resyncs_sent;
	long long resync_window_ms; /* global limit on resyncs for unknown nodes */
	unsigned resyncs_in_window;
	pthread_t main_thread;
	/* jobs (jobs.c) */
	struct job **jobs;          /* in submission order */
	/*
	 * Ids never repeat (jobs-api.c, job_enqueue): the highest job number
	 * ever given (sqlite_sequence), and the highest an agent reported in a
	 * task id ("j-N.<attempt>.r<rank>"): its task files outlive a lost
	 * state.db and shared dir, and raise the next id past theirs.
	 */
	long long jobs_seq_max, agents_seq_max;
	char head_id[33];           /* this state.db's random id: its tasks say it (agent.c) */
	size_t nr_jobs, alloc_jobs;
	/*
	 * The live jobs (PENDING, RUNNING), in s->jobs' order: what the per-step
	 * walks read (jobs_step, schedule_pending), so that a long history of
	 * ended jobs costs them nothing (job.c, jobs_live_*).  A job that ends
	 * stays in it until the next jobs_live_compact() (live_stale set);
	 * ended jobs never come back, new ones are appended.
	 */
	struct job **live;
	size_t nr_live, alloc_live;
	int live_stale;
	/*
	 * Bumped by every change to the live jobs that schedule_pending()'s scan
	 * of them reads, other than a job appended: a transition (jobstate_set),
	 * a compaction or removal, a job to be tried again (job_place_again).
	 * While it stays the same, a step scans only the jobs appended since.
	 */
	unsigned long long queue_gen;
	/* the RUNNING jobs among them, also in s->jobs' order (jobs_step's walks):
	 * joined by jobstate_set(), left at the compaction after they stop */
	struct job **running;
	size_t nr_running, alloc_running;
	int running_stale;
	long long jobs_ord;         /* the last job's ord (jobs_add) */
	struct hold **holds;        /* slots held by launched attempts */
	size_t nr_holds, alloc_holds;
	sqlite3_stmt *st_job;
	struct cluster_config *cc;  /* <home>/cluster.yaml: labels, slots, interface */
	long long cc_mtime_ns, cc_checked_ms;
	json_t *orphans;            /* main thread: task id -> mono ms of the last stop sent */
	struct jobs_clients *clients;  /* main thread: HTTP clients to agents */
	struct sweeps *sweeps;      /* sweeps.c */
	/* the seam (issue 28): where ranks run, and who hears of a job's life */
	const struct sched_backend *backend;   /* chosen by sched_run (backend.h) */
	void *backend_data;         /* the backend's own (backend-slurm.c), or NULL */
	struct job_events events;   /* subscribed at start-up (jobstate.h) */
	/* agents whose heartbeats were refused for another protocol version
	 * (protocol.h): node name -> {name, address, protocol, version, at, mono} */
	json_t *refused;
	/* the event stream (events.c): its statement, the newest id, and who
	 * hears of each event besides state.db (notify.c; NULL: nobody) */
	sqlite3_stmt *st_event;
	long long events_last;
	void (*event_hook)(struct sched *s, const json_t *ev, const json_t *notify, void *data);
	void *event_hook_data;
	/* the notify: list events_add() was given with ev (its sweep's or job's) or
	 * NULL, found again for what notify_open() re-queues (sched.c) */
	const json_t *(*notify_list_of)(struct sched *s, const json_t *ev);
	/* fair share (acct.c): decayed usage per user and project, rebuilt from the
	 * jobs' histories when the half-life it was made with changes */
	struct fs_usage *fair_usage;
	long long fair_usage_hl;
	struct fair_cache *fair_cache;   /* jobs-queue.c (jobs-int.h) */
	/* users with their own keys (users.c, `dtctl user add`): name -> {key, admin, added_us} */
	json_t *users;
};


/* jobs-queue.c: s->cc from <home>/cluster.yaml, re-read when it changed; lock held */
void cluster_refresh(struct sched *s);

/*
 * heartbeat.c: the fields of one heartbeat (protocol.h, POST /v1/heartbeat).
 * Strings and JSON values point into the parsed body and live as long as it.
 */
struct heartbeat {
	const char *node, *address, *version, *inventory_hash, *agent_started_at;
	const char *bin_dir, *home, *ssh_config, *tasks_digest;
	long long port;               /* 0 when absent or not an integer */
	long long seq;                /* 0 when absent or not an integer */
	int full;
	int has_tasks;                /* "tasks" is present (tasks NULL: an empty array) */
	json_t *tasks;                /* NULL, or not an array (a 400) */
	json_t *inventory;
	json_t *usage;                /* the inventory's changing numbers, when they changed */
};
/*
 * The common heartbeat (an idle node: flat, ASCII strings without escapes,
 * integers, booleans, "tasks": [], no inventory) read without jansson.  buf
 * (len bytes, NUL-terminated) is modified in place.  0 with *hb filled, or
 * -1 when the body is anything else (then parse it with jansson, which also
 * says what is wrong with a bad one): -1 is never an error by itself, and 0
 * is only returned for a body jansson reads the same way.
 */
int heartbeat_parse_fast(char *buf, size_t len, struct heartbeat *hb);
void heartbeat_from_json(const json_t *j, struct heartbeat *hb);

/* a node's heartbeat time and inventory are written at most this often
 * (state changes, drain/resume and new agents at once) */
#define HB_SAVE_US (60 * 1000000LL)

/* nodes.c: the node table (lock held unless said) */
int nodes_init(struct sched *s);            /* prepare its statements, load it */
void nodes_tick(struct sched *s);           /* failure detection: UP/SUSPECT/DOWN by age */
void nodes_flush(struct sched *s);          /* write the dirty nodes (one transaction) */
int task_state_final_str(const char *s);
/* *dst = a copy of v (NULL: none); 1 when it changed */
int node_str_set(char **dst, const char *v);
void node_derive(struct node *n);           /* its counts and health from inventory, tasks */
void node_check_health(struct sched *s, struct node *n);   /* drain a bad one */
void node_set_state(struct sched *s, struct node *n, const char *state);
/* a task id an agent reported: ids of new jobs never repeat it */
void note_task_id(struct sched *s, const char *id);
struct node *node_find(struct sched *s, const char *name);
/*
 * Are the jobs' tasks on n (NULL: unknown) gone?  DOWN, except while the
 * tasks of an agent that stopped on purpose wait out dead_after for its
 * restart (stop_grace): the node takes no new work then, but what runs there
 * goes on.
 */
int node_gone(const struct node *n);
/*
 * The agents refused for another protocol version lately (within
 * dead_after), for a message that says why a job cannot be placed:
 * "; 1 agent refused for another protocol version (node-2: 99, dtsched
 * speaks 2): <fix>".  Appends nothing when there are none.  Lock held.
 */
void sched_refused_note(struct sched *s, struct strbuf *sb);
struct node *node_add(struct sched *s, const char *name);   /* lock held */
/* drain n with a reason shown by `dtctl nodes`, or resume it (NULL); lock held */
void node_set_drained(struct sched *s, struct node *n, const char *reason);
/* a job failure that counts against node `name` (quarantine.h): may drain it; lock held */
void node_record_failure(struct sched *s, const char *name, int node_fail, const char *what);
void node_free(struct node *n);
/*
 * One UDP beacon datagram (protocol.h) received at unix time now_s; lock NOT
 * held.  Counts it in s->beacons; when it was well signed but is refused for
 * a reason its agent can fix with an HTTP heartbeat, writes the resync to
 * send back into reply (at most reply_size, never more than len) and returns
 * its length; else 0.
 */
size_t sched_beacon(struct sched *s, const void *buf, size_t len, long long now_s,
		    char *reply, size_t reply_size);
/* db.c: state.db made private and opened (-1: why in err); every table's schema */
int db_open(struct sched *s, const char *path, struct strbuf *err);
int db_schema(struct sched *s);
/* this state.db's random id (s->head_id), made with it */
int head_id_load(struct sched *s);
/* the node table's rows (s->st_node, s->st_task: prepared by nodes_init) */
void db_save_node(struct sched *s, struct node *n);
void db_save_task(struct sched *s, const char *node, json_t *t, const char *reason);
int db_exec(struct sched *s, const char *sql);
/* A transaction that may nest (SAVEPOINT / RELEASE); lock held, as for any write. */
void db_begin(struct sched *s);
int db_commit(struct sched *s, struct strbuf *err);
/* Undo the writes since db_begin() (and end its transaction). */
void db_rollback(struct sched *s);
/* Make the main loop run jobs_step() now instead of at its next tick. */
static inline void sched_wake(struct sched *s)
{
	pthread_kill(s->main_thread, SIGUSR1);
}

/*
 * events.c: the event stream (docs/events.md).  events_add() records one
 * event of `kind` ("job.ended", "node.drained", ...; ev: its fields, taken
 * over: job, name, user, node, sweep, ...), gives it the next id, passes it
 * to s->event_hook with `notify` (the job's or sweep's notify: list, or
 * NULL) and wakes the readers.  Its id, or -1 (logged).  Lock held.
 */
int events_init(struct sched *s);
void events_release(struct sched *s);
long long events_add(struct sched *s, const char *kind, json_t *ev, const json_t *notify);
/* The kept events after id `after` (at_us >= since_us; of `job` unless NULL),
 * at most `limit`, oldest first, each with its id.  Lock held. */
json_t *events_read(struct sched *s, long long after, long long since_us, const char *job,
		    long long limit);
extern const struct dt_http_route events_routes[];
extern const size_t events_nr_routes;
/* events-jobs.c: the job events (jobstate.h) into the stream */
void events_jobs_subscribe(struct sched *s);
/*
 * notify.c: the notifications' threads and queue, hooked to the stream; stopped
 * last.  notify_start() is notify_open() (the queue, hooked, refilled from the
 * stream with what was owed when dtsched last stopped, crash included: state.db's
 * notify_cursor and notify_progress) and then notify_run() (delivery threads may
 * start: one per owner with a due delivery, at most 64, on demand; notify_stop()
 * ends and joins them).
 * notify_queue_json() lists the queue ([{event_id, target, tries}], oldest first)
 * and notify_target_key() names a target in state.db (DT_SHA256_HEX bytes): tests.
 */
int notify_start(struct sched *s);
int notify_open(struct sched *s);
int notify_run(struct sched *s);
void notify_stop(struct sched *s);
json_t *notify_queue_json(struct sched *s);
/* tests: how long an idle delivery thread waits before it ends (30 s) */
void notify_idle_ms_set(struct sched *s, long long ms);
void notify_target_key(const json_t *t, char *out);
/* the JSON a webhook target of format ("generic", "slack", "discord") gets for ev;
 * a chat's text escaped for its markup (no mention, no disguised link) */
json_t *notify_webhook_body(const json_t *ev, const char *format);
void notify_metrics(struct sched *s, struct strbuf *o);
/* dashboard.c: the dashboard's listener (127.0.0.1) and its login route; api:
 * dtsched's whole route table, whose handlers give the pages their data (kept) */
int dashboard_start(struct sched *s, const struct dt_http_route *api, size_t nr_api);
void dashboard_stop(struct sched *s);
extern const struct dt_http_route dashboard_routes[];
extern const size_t dashboard_nr_routes;
/* logwatch.c: the thread matching running jobs' logs against notify: match: patterns */
int logwatch_start(struct sched *s);
void logwatch_stop(struct sched *s);

/* heartbeat.c: POST /v1/heartbeat; the UDP beacon socket (-1: none) */
void h_heartbeat(struct dt_http_request *req, struct dt_http_response *resp, void *data);
int beacon_open(struct sched *s);
/* r (an entry of s->refused) was refused within dead_after of now (mono ms) */
int refused_recent(const struct sched *s, const json_t *r, long long now);
/* nodes-api.c: GET /v1/nodes, /v1/nodes/<name>, .../drain, .../resume, /v1/tasks */
void h_nodes(struct dt_http_request *req, struct dt_http_response *resp, void *data);
void h_node(struct dt_http_request *req, struct dt_http_response *resp, void *data);
void h_node_drain(struct dt_http_request *req, struct dt_http_response *resp, void *data);
void h_node_resume(struct dt_http_request *req, struct dt_http_response *resp, void *data);
void h_node_stopped(struct dt_http_request *req, struct dt_http_response *resp, void *data);
void h_tasks(struct dt_http_request *req, struct dt_http_response *resp, void *data);

/* jobs.c */
/* jobs-queue.c: <home>/cluster.yaml (labels, slots, backend ...), re-read when it changes;
 * lock held */
void cluster_refresh(struct sched *s);
int jobs_init(struct sched *s);          /* tables, prepared statements, load; lock not needed */
void jobs_release(struct sched *s);
void jobs_step(struct sched *s);         /* main thread, lock NOT held: schedule, launch, check */
extern const struct dt_http_route jobs_routes[];     /* jobs-api.c */
extern const size_t jobs_nr_routes;

/* jobs-api.c, the internal API sweeps.c uses (lock held for all of them) */
struct job_view {
	const char *state, *reason, *job_dir, *shared_dir;
	int attempt, cancelled;
	int tasks_left;           /* its slots still held: a process of it may still run */
	long long started_us, ended_us;
};
int jobs_submit(struct sched *s, const json_t *spec, const char *shared_dir,
		const char *submit_dir, const char *user,
		char *id, size_t idlen, struct strbuf *err);   /* 0, -1 invalid, -2 never fits */
int jobs_cancel(struct sched *s, const char *id, const char *why);   /* -1: unknown job */
/* Forget a job jobs_submit() just queued whose transaction was rolled back
 * (the caller's COMMIT failed): nothing of it runs.  Lock held, not released since. */
void jobs_unsubmit(struct sched *s, const char *id);
int jobs_view(struct sched *s, const char *id, struct job_view *v);  /* -1: unknown job */
const char *jobs_id(const struct job *j);   /* the id of a job an event is about */
/*
 * Job `id` (just submitted) runs in the allocation `pack` shares with the
 * jobs given the same key (a sweep's trials, `pack: allocation`): nodes x
 * gpus per node, or, nodes 0, sized by the backend for `slots` such jobs at
 * once.  Only the Slurm backend has allocations (backend-slurm.c); others
 * ignore it.  Lock held.
 */
void jobs_pack(struct sched *s, const char *id, const char *pack, int nodes, int gpus,
	       int slots);
/*
 * Job `id` (just submitted) is one task of a Slurm job array with the jobs
 * given the same key that wait to be submitted with it (a sweep's trials,
 * `pack: array`), at most `parallel` tasks running at once (0: no limit).
 * Only the Slurm backend has arrays; others ignore it.  Lock held.
 */
void jobs_array(struct sched *s, const char *id, const char *key, int parallel);
void jobs_schedule_now(struct sched *s);

/*
 * The features that hear of a job's life (jobstate.h), subscribed by
 * sched_run() before the jobs are loaded, in this order:
 *   events-jobs.c   SUBMITTED, STARTED, RANK_EXITED, STALLED, RETRIED, ENDED: the
 *                   event stream (events.c), first, so its order is the transitions'
 *   jobs-metrics.c  STARTED, ENDED: the jobs' /metrics families
 *   fabric-head.c   ATTEMPT_ENDED (j->hold still set): a fabric test's verdict
 *                   into j->fabric and the baselines
 *   quarantine-head.c  RANK_EXITED: a failure that looks like its node's fault
 *                   counts against it (quarantine.h), which may drain it
 *   hang.c          STALLED: attribute a hang at the first stall scan that
 *                   finds silent ranks, again while the latest named nobody
 *   goodput-head.c  ATTEMPT_ENDED (retried), PLACED: what restarts cost
 *                   (lost work since the last checkpoint, the wait)
 *   sweeps.c        STARTED, RETRIED, ENDED: a trial's job moved (its next
 *                   look reads it), instead of a look at every trial's job
 *                   every step
 *   acct.c          ATTEMPT_ENDED: the attempt's GPU time into the fair-share
 *                   usage; ENDED: the job's row in the acct table (after
 *                   goodput: its lost GPU time)
 */
void jobs_metrics_subscribe(struct sched *s);
void fabric_subscribe(struct sched *s);
void quarantine_subscribe(struct sched *s);
void hang_subscribe(struct sched *s);
void goodput_subscribe(struct sched *s);
void sweeps_subscribe(struct sched *s);
/* acct.c: ATTEMPT_ENDED (its GPU time into the decayed usage), ENDED (the
 * job's accounting row); also makes the acct table */
int acct_subscribe(struct sched *s);
/* jobs-queue.c: the decayed usage, made (from every job's history) or remade
 * when the half-life changed */
void fair_usage_sync(struct sched *s);
void acct_release(struct sched *s);   /* jobs_release() calls it */
/* the acct rows of jobs that ended before accounting was kept (after jobs_init) */
void acct_backfill(struct sched *s);
/* /metrics: GPUs in use and jobs pending per user and project */
void acct_metrics(struct sched *s, struct strbuf *o);
extern const struct dt_http_route acct_routes[];
extern const size_t acct_nr_routes;

/* the sweep unit (sweeps-int.h): sweeps-state.c loads, sweeps.c steps, sweeps-api.c serves */
int sweeps_init(struct sched *s);        /* after jobs_init: tables, load, rebuild by replay */
void sweeps_release(struct sched *s);
void sweeps_step(struct sched *s);       /* main thread, lock NOT held */
/* /metrics families of jobs-metrics.c and sweeps-api.c (lock held) */
void jobs_metrics(struct sched *s, struct strbuf *o);
void sweeps_metrics(struct sched *s, struct strbuf *o);
extern const struct dt_http_route sweeps_routes[];
extern const size_t sweeps_nr_routes;

#endif
