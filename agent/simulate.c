/*
 * simulate.c - `dtagent --simulate-nodes N`: a benchmark driver that plays N
 * agents heartbeating to dtsched, so dtsched's cost per node can be measured
 * without N machines.  One keep-alive connection per simulated node (like
 * real agents), the heartbeats spread evenly over the period.  Real agents do
 * not wait for each other, so the nodes are split over SIM_THREADS threads:
 * one slow reply delays only the nodes of its thread, not all N.
 * Like a real agent a node sends its inventory only when dtsched does not
 * have it (the first heartbeat, or when the reply says want_inventory); the
 * others carry its inventory_hash.  And like a real agent, each node chooses
 * between a UDP beacon and an HTTP heartbeat with lib/beacon.h's rule (the
 * same code as agent.c): HTTP at least every dead_after/2, beacons between,
 * HTTP at once after a resync.  Each thread has one UDP socket for its nodes'
 * beacons and resyncs; a real agent has one of its own, which costs dtsched
 * nothing more.
 */
#include "agent.h"
#include "auth.h"
#include "beacon.h"
#include "httpc.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "usage.h"

#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SIM_THREADS 16

struct sim {
	const char *host;
	int port, n, gpus;
	long long heartbeat_ms, duration_ms, start;
	const struct dt_auth_key *key;
	const json_t *inv;           /* collected once: each thread works on a copy */
	char started[48];            /* agent_started_at of every simulated node */
	struct sockaddr_in head_sa;  /* dtsched's beacon address */
};

struct sim_thread {
	pthread_t th;
	const struct sim *sim;
	int first, step;             /* nodes first, first + step, ... */
	long long sent, failed, beacons;
};

/* Resyncs for this thread's nodes (sim<i>, i = first + k * step): mark them. */
static void sim_resyncs(struct sim_thread *t, int fd, unsigned char *resync,
			struct dt_beacon_policy *pol, int count)
{
	char node[256];
	long long seq;

	while (dt_resync_recv(fd, t->sim->key, (long long)time(NULL), node, &seq)) {
		int i, k;

		if (sscanf(node, "sim%d", &i) != 1)
			continue;
		k = (i - t->first) / t->step;
		if (i < t->first || (i - t->first) % t->step || k >= count)
			continue;
		resync[k] = 1;
		dt_beacon_policy_resynced(&pol[k]);
	}
}

static void *sim_run(void *data)
{
	struct sim_thread *t = data;
	const struct sim *sm = t->sim;
	int count = (sm->n - t->first + t->step - 1) / t->step;
	struct dt_httpc *c = xcalloc((size_t)count, sizeof(*c));
	unsigned char *have = xcalloc((size_t)count, 1);   /* dtsched has node k's inventory */
	unsigned char *full = xcalloc((size_t)count, 1);   /* it asked for the whole table */
	unsigned char *resync = xcalloc((size_t)count, 1); /* a resync came for node k */
	struct dt_beacon_policy *pol = xcalloc((size_t)count, sizeof(*pol));
	json_t *inv = json_deep_copy(sm->inv), *notasks = json_array();
	char hash[DT_SHA256_HEX], digest[DT_TASKS_DIGEST_HEX];
	long long seq = 0;
	struct sched_param sp = { 0 };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	/*
	 * Real agents run on other machines; here they share dtsched's cores.
	 * A woken SCHED_NORMAL thread preempts the thread that woke it, so each
	 * reply dtsched sent cost it two context switches that would not exist
	 * with real nodes (a tenth of its measured CPU).  As SCHED_BATCH the
	 * simulator still gets its share of the CPU but does not preempt on
	 * wake-up.  (If refused, the threads simply stay SCHED_NORMAL.)
	 */
	pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
	dt_tasks_digest(notasks, digest);
	for (int k = 0; k < count; k++) {
		struct dt_beacon_policy init = DT_BEACON_POLICY_INIT;

		dt_httpc_init(&c[k], sm->host, sm->port, sm->key);
		c[k].timeout_ms = 5000;
		pol[k] = init;
		full[k] = 1;      /* a real agent's first heartbeat carries its whole table */
	}
	while (!sm->duration_ms || dt_mono_ms() - sm->start < sm->duration_ms) {
		long long round = sm->start + seq * sm->heartbeat_ms;

		seq++;
		for (int k = 0; k < count; k++) {
			int i = t->first + k * t->step;
			char name[64];
			json_t *body, *reply = NULL;
			struct strbuf err = STRBUF_INIT, ib = STRBUF_INIT;
			long long due = round + sm->heartbeat_ms * i / sm->n, now = dt_mono_ms();
			int changed;

			if (due > now)
				usleep((useconds_t)(due - now) * 1000);
			if (fd >= 0)
				sim_resyncs(t, fd, resync, pol, count);
			snprintf(name, sizeof(name), "sim%04d", i);
			json_object_set_new(inv, "node", json_string(name));
			json_append(&ib, inv);
			dt_sha256_hex(ib.buf, ib.len, hash);
			strbuf_release(&ib);
			changed = !have[k] || full[k] || resync[k];
			resync[k] = 0;
			if (fd >= 0 && dt_beacon_policy_due(&pol[k], dt_mono_ms(), sm->heartbeat_ms,
							    changed, digest)) {
				struct dt_beacon b;

				memset(&b, 0, sizeof(b));
				memcpy(b.node, name, strlen(name) + 1);
				memcpy(b.started, sm->started, sizeof(b.started));
				b.seq = seq;
				b.time = (long long)time(NULL);
				memcpy(b.inventory_hash, hash, sizeof(hash));
				memcpy(b.tasks_digest, digest, sizeof(digest));
				if (dt_beacon_send(fd, &sm->head_sa, sm->key, &b) == 0) {
					dt_beacon_policy_sent(&pol[k]);
					t->beacons++;
					continue;
				}
			}
			body = json_pack("{s:s,s:i,s:i,s:s,s:s,s:s,s:s,s:[],s:I,s:b}", "node", name,
					 "port", 7070 + i, "agent_pid", (int)getpid(),
					 "agent_started_at", sm->started, "version", DT_VERSION,
					 "inventory_hash", hash, "tasks_digest", digest, "tasks",
					 "seq", (json_int_t)seq, "full", (int)full[k]);
			if (!have[k])
				json_object_set(body, "inventory", inv);
			if (dt_httpc_request(&c[k], "POST", DT_PATH_HEARTBEAT, body, &reply, &err) == 200) {
				t->sent++;
				have[k] = !json_is_true(json_object_get(reply, "want_inventory"));
				full[k] = json_is_true(json_object_get(reply, "want_full"));
				dt_beacon_policy_http_ok(&pol[k], dt_mono_ms(), reply, digest);
			} else {
				dt_beacon_policy_http_failed(&pol[k]);
				if (t->failed++ < 5)
					fprintf(stderr, "simulate: %s: %s\n", name, err.len ? err.buf : "refused");
			}
			json_decref(body);
			json_decref(reply);
			strbuf_release(&err);
		}
		while (dt_mono_ms() < round + sm->heartbeat_ms)
			usleep(1000);
	}
	for (int k = 0; k < count; k++)
		dt_httpc_release(&c[k]);
	if (fd >= 0)
		close(fd);
	free(c);
	free(have);
	free(full);
	free(resync);
	free(pol);
	json_decref(notasks);
	json_decref(inv);
	return NULL;
}

int agent_simulate(const char *head, const char *secret, int n, long long heartbeat_ms,
		   long long duration_ms, int gpus)
{
	struct dt_auth_key key;
	struct sim sm;
	struct sim_thread th[SIM_THREADS];
	char host[256];
	const char *colon = strrchr(head, ':');
	long long sent = 0, failed = 0, beacons = 0;
	json_t *ts;
	int nr = n < SIM_THREADS ? n : SIM_THREADS;
	json_t *inv;

	if (dt_auth_key_load(&key, secret) < 0)
		return 1;
	if (!colon || (size_t)(colon - head) >= sizeof(host))
		return error("--head '%s' is not ADDR:PORT", head), 2;
	memcpy(host, head, (size_t)(colon - head));
	host[colon - head] = '\0';
	sm.host = host;
	sm.port = atoi(colon + 1);
	sm.n = n;
	sm.gpus = gpus;
	sm.heartbeat_ms = heartbeat_ms;
	sm.duration_ms = duration_ms;
	sm.start = dt_mono_ms();
	sm.key = &key;
	sm.inv = inv = inventory_collect("sim", gpus);
	ts = json_timestamp(dt_now_us());
	snprintf(sm.started, sizeof(sm.started), "%.47s", json_string_value(ts));
	json_decref(ts);
	if (dt_beacon_addr(host, sm.port, &sm.head_sa) < 0)
		return error("simulate: cannot resolve '%s'", host), 2;
	for (int i = 0; i < nr; i++) {
		th[i].sim = &sm;
		th[i].first = i;
		th[i].step = nr;
		th[i].sent = th[i].failed = th[i].beacons = 0;
		if (pthread_create(&th[i].th, NULL, sim_run, &th[i]))
			die("simulate: cannot start a thread");
	}
	for (int i = 0; i < nr; i++) {
		pthread_join(th[i].th, NULL);
		sent += th[i].sent;
		failed += th[i].failed;
		beacons += th[i].beacons;
	}
	json_decref(inv);
	printf("{\"nodes\": %d, \"heartbeats\": %lld, \"beacons\": %lld, \"failed\": %lld}\n",
	       n, sent, beacons, failed);
	return failed ? 1 : 0;
}
