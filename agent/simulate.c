/*
 * simulate.c - `dtagent --simulate-nodes N`: a benchmark driver that plays N
 * agents heartbeating to dtsched, so dtsched's cost per node can be measured
 * without N machines.  One thread, one keep-alive connection per simulated
 * node (like real agents); the heartbeats are spread evenly over the period.
 * Like a real agent it sends its inventory only when dtsched does not have it
 * (the first heartbeat, or when the reply says want_inventory); the others
 * carry its inventory_hash.
 */
#include "agent.h"
#include "auth.h"
#include "httpc.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int agent_simulate(const char *head, const char *secret, int n, long long heartbeat_ms,
		   long long duration_ms, int gpus)
{
	struct dt_auth_key key;
	struct dt_httpc *c;
	char host[256];
	const char *colon = strrchr(head, ':');
	long long start = dt_mono_ms(), sent = 0, failed = 0, seq = 0;
	json_t *inv;
	unsigned char *have;         /* dtsched has node i's inventory */
	char hash[DT_SHA256_HEX];

	if (dt_auth_key_load(&key, secret) < 0)
		return 1;
	if (!colon || (size_t)(colon - head) >= sizeof(host))
		return error("--head '%s' is not ADDR:PORT", head), 2;
	memcpy(host, head, (size_t)(colon - head));
	host[colon - head] = '\0';
	c = xcalloc((size_t)n, sizeof(*c));
	for (int i = 0; i < n; i++) {
		dt_httpc_init(&c[i], host, atoi(colon + 1), &key);
		c[i].timeout_ms = 5000;
	}
	inv = inventory_collect("sim", gpus);
	have = xcalloc((size_t)n, 1);
	while (!duration_ms || dt_mono_ms() - start < duration_ms) {
		long long round = dt_mono_ms();

		seq++;
		for (int i = 0; i < n; i++) {
			char name[64];
			json_t *body, *reply = NULL;
			struct strbuf err = STRBUF_INIT;
			long long due = round + heartbeat_ms * i / n, now = dt_mono_ms();

			if (due > now)
				usleep((useconds_t)(due - now) * 1000);
			snprintf(name, sizeof(name), "sim%04d", i);
			json_object_set_new(inv, "node", json_string(name));
			{
				struct strbuf ib = STRBUF_INIT;

				json_append(&ib, inv);
				dt_sha256_hex(ib.buf, ib.len, hash);
				strbuf_release(&ib);
			}
			body = json_pack("{s:s,s:i,s:i,s:s,s:s,s:[],s:I}", "node", name, "port", 7070 + i,
					 "agent_pid", (int)getpid(), "version", DT_VERSION,
					 "inventory_hash", hash, "tasks", "seq", (json_int_t)seq);
			if (!have[i])
				json_object_set(body, "inventory", inv);
			if (dt_httpc_request(&c[i], "POST", DT_PATH_HEARTBEAT, body, &reply, &err) == 200) {
				sent++;
				have[i] = !json_is_true(json_object_get(reply, "want_inventory"));
			} else if (failed++ < 5)
				fprintf(stderr, "simulate: %s: %s\n", name, err.len ? err.buf : "refused");
			json_decref(body);
			json_decref(reply);
			strbuf_release(&err);
		}
		while (dt_mono_ms() - round < heartbeat_ms)
			usleep(1000);
	}
	printf("{\"nodes\": %d, \"heartbeats\": %lld, \"failed\": %lld}\n", n, sent, failed);
	for (int i = 0; i < n; i++)
		dt_httpc_release(&c[i]);
	free(c);
	free(have);
	json_decref(inv);
	return failed ? 1 : 0;
}
