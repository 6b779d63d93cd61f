/*
 * beacon.h - signed one-way UDP heartbeats ("beacons") of an idle agent, the
 * "resync" datagram dtsched answers a refused one with, and the rule an agent
 * (and the benchmark's simulator) uses to choose between a beacon and an HTTP
 * heartbeat.  The wire format and the acceptance rules are in protocol.h
 * (DT_BEACON_*); docs/agents.md explains why.
 *
 * Encoding and checking are pure functions of their arguments (the key, the
 * clock passed in), so tests and fuzzers call them directly.  What dtsched
 * then does with a well-signed beacon (node known, same agent, seq not seen,
 * nothing changed) is scheduler/heartbeat.c's sched_beacon().
 */
#ifndef DT_BEACON_H
#define DT_BEACON_H

#include <stddef.h>
#include <jansson.h>
#include <netinet/in.h>
#include "auth.h"
#include "protocol.h"

#define DT_TASKS_DIGEST_HEX 17     /* 16 hex digits + NUL */

struct dt_beacon {
	char node[256];
	char started[48];              /* the agent's agent_started_at */
	long long seq;                 /* the agent's heartbeat seq, > 0 */
	long long time;                /* unix seconds when sent */
	char inventory_hash[DT_SHA256_HEX];
	char tasks_digest[DT_TASKS_DIGEST_HEX];
};

enum dt_beacon_result {
	DT_BEACON_OK = 0,
	DT_BEACON_TOO_LARGE,           /* over DT_BEACON_MAX bytes */
	DT_BEACON_VERSION,             /* "DTB<n>"/"DTR<n>" of another version */
	DT_BEACON_MALFORMED,           /* anything else not in the format */
	DT_BEACON_STALE,               /* time outside DT_AUTH_MAX_SKEW_S of ours */
	DT_BEACON_BAD_MAC,
};
const char *dt_beacon_result_str(enum dt_beacon_result r);

/* The datagram for b (time and all) into buf; its length, or -1 when a field
 * is out of the format or it does not fit in size (or DT_BEACON_MAX). */
int dt_beacon_encode(const struct dt_auth_key *key, const struct dt_beacon *b,
		     char *buf, size_t size);
/* Check one received datagram (len bytes, need not be NUL-terminated) at our
 * clock now_s: format, version, time, then MAC (constant time), in that
 * order; DT_BEACON_OK with *out filled, else out is unspecified. */
enum dt_beacon_result dt_beacon_verify(const struct dt_auth_key *key, const void *buf,
				       size_t len, long long now_s, struct dt_beacon *out);

/* dtsched's answer to a refused beacon of (node, seq): buf gets the resync
 * datagram, at most size bytes; its length or -1. */
int dt_resync_encode(const struct dt_auth_key *key, const char *node, long long seq,
		     long long now_s, char *buf, size_t size);
/* An agent checks a resync the same way: DT_BEACON_OK with node and seq. */
enum dt_beacon_result dt_resync_verify(const struct dt_auth_key *key, const void *buf,
				       size_t len, long long now_s, char node[256],
				       long long *seq);

/*
 * The socket side, shared by dtagent and its simulator.  dt_beacon_addr():
 * dtsched's beacon address, its host and the HTTP port's number over UDP
 * (IPv4); -1 if it does not resolve.  dt_beacon_send(): encode b and send it
 * on fd to sa; 0 when it went out whole.  dt_resync_recv(): the next resync
 * waiting on the non-blocking fd that verifies at now_s, skipping any other
 * datagram; 1 with node and seq, 0 when none is left.
 */
int dt_beacon_addr(const char *host, int port, struct sockaddr_in *sa);
int dt_beacon_send(int fd, const struct sockaddr_in *sa, const struct dt_auth_key *key,
		   const struct dt_beacon *b);
int dt_resync_recv(int fd, const struct dt_auth_key *key, long long now_s, char node[256],
		   long long *seq);

/* tasks_digest of a heartbeat's "tasks" array: the first 16 hex digits of the
 * SHA-256 of its compact JSON. */
void dt_tasks_digest(const json_t *tasks, char out[DT_TASKS_DIGEST_HEX]);

/*
 * Beacon or HTTP heartbeat?  One per agent (the simulator keeps one per
 * simulated node), touched only by the thread that sends its heartbeats.
 *
 *	struct dt_beacon_policy p = DT_BEACON_POLICY_INIT;
 *	each beat: if (dt_beacon_policy_due(&p, now, hb_ms, changed, digest))
 *			send a beacon, then dt_beacon_policy_sent(&p);
 *		   else POST the heartbeat (with digest) and on 200
 *			dt_beacon_policy_http_ok(&p, now, reply, digest),
 *		   on anything else dt_beacon_policy_http_failed(&p);
 *	on a valid resync: dt_beacon_policy_resynced(&p), then an HTTP heartbeat.
 */
struct dt_beacon_policy {
	int supported;                 /* the last 200 reply said "beacon": true */
	long long http_ok_ms;          /* dt_mono_ms() of that reply; 0 = none yet */
	long long dead_after_ms;       /* that reply's dead_after_ms */
	long long off_until_ms;        /* beacons paused until then (none arrived) */
	unsigned sent;                 /* beacons sent since that reply */
	unsigned unseen;               /* sent since dtsched last reported seeing one */
	char digest[DT_TASKS_DIGEST_HEX];   /* the tasks_digest that heartbeat carried */
};
#define DT_BEACON_POLICY_INIT { 0, 0, 10000, 0, 0, 0, "" }
#define DT_BEACON_UNSEEN_MAX 3           /* then HTTP only ... */
#define DT_BEACON_RETRY_MS (5 * 60 * 1000LL)   /* ... for this long */

/*
 * 1 when this beat may be a beacon: dtsched said it takes them, nothing
 * changed since the last heartbeat it answered 200 (changed: a task started,
 * changed or ended, a final task not yet acknowledged, the inventory (not
 * its usage numbers) changed, dtsched asked for the full table or the
 * inventory, a resync came;
 * digest: the tasks_digest now), beacons are not paused, and the next beat
 * will still be within dead_after/2 of that heartbeat (now - http_ok + hb_ms
 * <= dead_after/2), so an HTTP heartbeat goes out at least every dead_after/2
 * and a node whose beacons are all lost never even turns SUSPECT.
 */
int dt_beacon_policy_due(const struct dt_beacon_policy *p, long long now_ms, long long hb_ms,
			 int changed, const char *digest);
void dt_beacon_policy_sent(struct dt_beacon_policy *p);
/* 1 when beacons were just paused: DT_BEACON_UNSEEN_MAX or more sent and
 * dtsched reported none (the caller logs it once). */
int dt_beacon_policy_http_ok(struct dt_beacon_policy *p, long long now_ms, const json_t *reply,
			     const char *digest);
void dt_beacon_policy_http_failed(struct dt_beacon_policy *p);
/* A valid resync came: beacons do reach dtsched, whatever a restarted
 * dtsched's beacons_seen will say (call before the HTTP heartbeat it asks for). */
void dt_beacon_policy_resynced(struct dt_beacon_policy *p);

#endif
