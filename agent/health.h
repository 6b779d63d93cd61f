/*
 * health.h - is this node fit to run work: the agent's continuous check.
 *
 * Each heartbeat cycle the agent reads, per GPU (lib/nvml.h): critical XID
 * events, ECC error counts (volatile and aggregate, uncorrected), retired
 * pages pending, row remapping pending or failed, "reset required", a GPU
 * that fell off the bus, hardware throttling and temperature; and for the
 * node: free space where the agent writes (its home, /tmp) and memory
 * pressure (/proc/pressure/memory).  Each finding is a typed event with a
 * severity: "degraded" (works, watch it) or "bad" (do not place work here).
 * The node's health is the worst event: "ok", "degraded" or "bad".  Events
 * that record something that happened (an XID, a DBE) stay until the agent
 * restarts (a GPU reset or reboot restarts it); states (throttling,
 * temperature, a full disk) clear when they do.
 *
 * The inventory carries {"health": {"status", "events": [EVENT...]}} with
 * EVENT = {severity, kind, gpu (or -1), detail, since}; dtsched drains a
 * node whose health turns bad (scheduler/sched.c) and shows it in
 * `dtctl nodes` (HEALTH) and /metrics.
 *
 * Fake GPUs (an agent started with --gpus N on a node without NVML) read
 * their faults from the file the operator names for tests with
 * `dtagent --fake-health FILE` (cluster.yaml `agent: {fake_health: FILE}`),
 * so every path is tested without a GPU (docs/agents.md, "Node health").
 * Never from a file of the agent's home: a job can write there, and a node
 * whose GPU fell off the bus (NVML finds fewer than configured) would take
 * a forged XID from it (issue 26, B3).  Without the option fake GPUs are
 * healthy.  The file:
 *   {"gpus": {"1": {"xid": [79], "ecc_volatile_dbe": 2, "ecc_aggregate_dbe": 3,
 *                   "retired_pending": true, "remap_pending": true,
 *                   "remap_failure": true, "reset_required": true, "lost": true,
 *                   "throttle": ["hw_slowdown", "hw_thermal", "power_brake"],
 *                   "temperature": 95}}}
 */
#ifndef DT_AGENT_HEALTH_H
#define DT_AGENT_HEALTH_H

#include <jansson.h>
#include "nvml.h"

struct health {
	json_t *sticky;                 /* events that stay: {key: EVENT} */
	json_t *states;                 /* states now, with when each began: {key: EVENT} */
};

void health_init(struct health *h);
void health_release(struct health *h);

/*
 * Read everything and return {"status", "events"} (a new reference).  gpus:
 * the GPU count the agent reports, of which the first nvml_gpus are real
 * (the others fake: their faults come from the file fake_health, NULL: none);
 * home: the agent's home (its free space is checked).
 */
json_t *health_collect(struct health *h, int gpus, int nvml_gpus, const char *home,
		       const char *fake_health);

/*
 * The events of one GPU's readings, appended to `events` (pure: the unit
 * tests call it).  XIDs an application causes (13, 31, 43, 45, 68) are not
 * the node's fault and give none.
 */
void health_gpu_events(const struct dt_gpu_health *g, json_t *events, const char *now);

/* "ok", "degraded" or "bad": the worst severity in events. */
const char *health_status(const json_t *events);

#endif
