/*
 * sched-int.h - dtsched's internals shared by sched.c (nodes, heartbeats,
 * SQLite) and jobs.c (the job queue, placement, launch and lifecycle).
 * Not a public API: only scheduler/ includes it.
 *
 * Locking: s->lock guards everything below except the fields marked
 * "main thread", which only the thread running sched_run()'s loop touches.
 */
#ifndef DT_SCHED_INT_H
#define DT_SCHED_INT_H

#include <jansson.h>
#include <pthread.h>
#include <sqlite3.h>
#include "auth.h"
#include "config.h"
#include "httpd.h"
#include "sched.h"

struct node {
	char *name;
	char *address;
	int port;
	const char *state;          /* DT_NODE_* */
	int drained;
	int down_latched;           /* DOWN when loaded: stays DOWN until it heartbeats */
	long long last_hb_us;       /* wall clock, 0 = never */
	long long last_hb_mono;     /* 0 = not since this dtsched started */
	json_t *inventory;
	json_t *tasks;              /* id -> last known TASK (as in the database) */
	int gpus_total, gpus_used, cpus, tasks_running;
	double gpu_util;
	long long mem_total, mem_available;
	char *agent_version;
	char *agent_started;
	int want_full;
	int dirty;
	char *bin_dir;              /* the agent's bin dir (dtagent, dttrain) */
	char *home;                 /* the agent's home */
	char *ssh_config;           /* <home>/ssh_config when the agent has one */
};

struct sched {
	struct sched_opts o;
	pthread_mutex_t lock;
	struct node **nodes;        /* sorted by name */
	size_t nr, alloc;
	sqlite3 *db;
	sqlite3_stmt *st_node, *st_task;
	struct dt_httpd *srv;
	struct dt_auth_key key;
	long long started_mono, started_us;
	unsigned long long heartbeats, nodes_failed;
	pthread_t main_thread;
	/* jobs (jobs.c) */
	struct job **jobs;          /* in submission order */
	size_t nr_jobs, alloc_jobs;
	struct hold **holds;        /* slots held by launched attempts */
	size_t nr_holds, alloc_holds;
	sqlite3_stmt *st_job;
	struct cluster_config *cc;  /* <home>/cluster.yaml: labels, slots, interface */
	long long cc_mtime_ns, cc_checked_ms;
	json_t *orphans;            /* main thread: task id -> mono ms of the last stop sent */
	struct jobs_clients *clients;  /* main thread: HTTP clients to agents */
};


struct node *node_find(struct sched *s, const char *name);
int db_exec(struct sched *s, const char *sql);
json_t *ts_json(long long us);
/* Make the main loop run jobs_step() now instead of at its next tick. */
void sched_wake(struct sched *s);

/* jobs.c */
int jobs_init(struct sched *s);          /* tables, prepared statements, load; lock not needed */
void jobs_release(struct sched *s);
void jobs_step(struct sched *s);         /* main thread, lock NOT held: schedule, launch, check */
extern const struct dt_http_route jobs_routes[];
extern const size_t jobs_nr_routes;

#endif
