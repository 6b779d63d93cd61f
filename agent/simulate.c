/*
 * simulate.c - `dtagent --simulate-nodes N`: a benchmark driver that plays N
 * agents heartbeating to dtsched, so dtsched's cost per node can be measured
 * without N machines.  One keep-alive connection per simulated node (like
 * real agents), the heartbeats spread evenly over the period.  Real agents do
 * not wait for each other, so the nodes are split over SIM_THREADS threads:
 * one slow reply delays only the nodes of its thread, not all N.
 * Like a real agent a node sends its inventory only when dtsched does not
 * have it (the first heartbeat, or when the reply says want_inventory); the
 * others carry its inventory_hash.
 */
#include "agent.h"
#include "auth.h"
#include "httpc.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "usage.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SIM_THREADS 16

struct sim {
	const char *host;
	int port, n, gpus;
	long long heartbeat_ms, duration_ms, start;
	const struct dt_auth_key *key;
	const json_t *inv;           /* collected once: each thread works on a copy */
};

struct sim_thread {
	pthread_t th;
	const struct sim *sim;
	int first, step;             /* nodes first, first + step, ... */
	long long sent, failed;
};

static void *sim_run(void *data)
{
	struct sim_thread *t = data;
	const struct sim *sm = t->sim;
	int count = (sm->n - t->first + t->step - 1) / t->step;
	struct dt_httpc *c = xcalloc((size_t)count, sizeof(*c));
	unsigned char *have = xcalloc((size_t)count, 1);   /* dtsched has node k's inventory */
	json_t *inv = json_deep_copy(sm->inv);
	char hash[DT_SHA256_HEX];
	long long seq = 0;
	struct sched_param sp = { 0 };

	/*
	 * Real agents run on other machines; here they share dtsched's cores.
	 * A woken SCHED_NORMAL thread preempts the thread that woke it, so each
	 * reply dtsched sent cost it two context switches that would not exist
	 * with real nodes (a tenth of its measured CPU).  As SCHED_BATCH the
	 * simulator still gets its share of the CPU but does not preempt on
	 * wake-up.  (If refused, the threads simply stay SCHED_NORMAL.)
	 */
	pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
	for (int k = 0; k < count; k++) {
		dt_httpc_init(&c[k], sm->host, sm->port, sm->key);
		c[k].timeout_ms = 5000;
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

			if (due > now)
				usleep((useconds_t)(due - now) * 1000);
			snprintf(name, sizeof(name), "sim%04d", i);
			json_object_set_new(inv, "node", json_string(name));
			json_append(&ib, inv);
			dt_sha256_hex(ib.buf, ib.len, hash);
			strbuf_release(&ib);
			body = json_pack("{s:s,s:i,s:i,s:s,s:s,s:[],s:I}", "node", name, "port", 7070 + i,
					 "agent_pid", (int)getpid(), "version", DT_VERSION,
					 "inventory_hash", hash, "tasks", "seq", (json_int_t)seq);
			if (!have[k])
				json_object_set(body, "inventory", inv);
			if (dt_httpc_request(&c[k], "POST", DT_PATH_HEARTBEAT, body, &reply, &err) == 200) {
				t->sent++;
				have[k] = !json_is_true(json_object_get(reply, "want_inventory"));
			} else if (t->failed++ < 5) {
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
	free(c);
	free(have);
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
	long long sent = 0, failed = 0;
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
	for (int i = 0; i < nr; i++) {
		th[i].sim = &sm;
		th[i].first = i;
		th[i].step = nr;
		th[i].sent = th[i].failed = 0;
		if (pthread_create(&th[i].th, NULL, sim_run, &th[i]))
			die("simulate: cannot start a thread");
	}
	for (int i = 0; i < nr; i++) {
		pthread_join(th[i].th, NULL);
		sent += th[i].sent;
		failed += th[i].failed;
	}
	json_decref(inv);
	printf("{\"nodes\": %d, \"heartbeats\": %lld, \"failed\": %lld}\n", n, sent, failed);
	return failed ? 1 : 0;
}
