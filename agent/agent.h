/*
 * agent.h - the dtagent service: HTTP API, task table, heartbeats.
 *
 * agent_run() serves until SIGTERM/SIGINT.  Threads: libmicrohttpd's
 * internal thread runs the handlers; a heartbeat thread posts to dtsched;
 * the calling thread watches the task table (supervisors write it, see
 * supervise.h) and the supervisors' liveness.  One mutex guards the table.
 */
#ifndef DT_AGENT_AGENT_H
#define DT_AGENT_AGENT_H

#include <jansson.h>

struct agent_opts {
	const char *name;           /* node name (default: hostname) */
	const char *bind;           /* listen address (default: all) */
	int port;
	const char *head;           /* "ADDR:PORT" of dtsched, or NULL: no heartbeats */
	const char *advertise;      /* address dtsched should use for us (default: as seen) */
	long long heartbeat_ms;
	int gpus;                   /* -1: NVML; N >= 0: report N GPUs (fake where NVML has fewer) */
	const char *home;
	const char *secret;         /* secret file (default <home>/secret) */
	const char *exe;            /* this binary, for supervisors */
	long long keep_finished_ms; /* forget final tasks this long after they ended */
	const char *fake_health;    /* test only: the fake GPUs' faults (health.h), or NULL */
	/*
	 * Inside a Slurm step (dtagent --slurm, docs/slurm.md): on SIGTERM stop
	 * every task (grace stop_grace_ms) and wait for their supervisors before
	 * returning, since Slurm ends the step and nothing of it may stay.
	 */
	int stop_tasks_on_exit;
	long long stop_grace_ms;
	int beat_at_start;          /* first heartbeat at once, not after heartbeat_ms (a join) */
	/*
	 * The devices our GPU i stands for, "2,3" (Slurm's CUDA_VISIBLE_DEVICES
	 * for the step), or NULL: a task's cuda_visible_devices "0,1" becomes
	 * "2,3" when another job on the node holds GPUs 0 and 1.
	 */
	const char *gpu_map;
};

/* Write "ok\n" (or an error line) to ready_fd once serving (-1: none). */
int agent_run(const struct agent_opts *o, int ready_fd);

/* Inventory of this node (protocol.h GET /v1/inventory, without protocol). */
json_t *inventory_collect(const char *node, int gpus);

/* Hidden benchmark mode: n simulated agents heartbeating to head every
 * heartbeat_ms, for `bench/bench_sched`.  Runs for duration_ms (0 = forever). */
int agent_simulate(const char *head, const char *secret, int n, long long heartbeat_ms,
		   long long duration_ms, int gpus);

#endif
