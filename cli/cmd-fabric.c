/*
 * cmd-fabric.c - `dtctl doctor --fabric`: the fabric test of the cluster's
 * nodes (docs/agents.md, "Fabric test").
 *
 * It runs as a job through dtsched, one rank per node under mpirun
 * (`dttrain --fabric full|quick`, trainer/fabric.h), so it takes the same
 * path as any job: the agents start it, the head judges the document it
 * writes against its baselines in state.db (scheduler/fabric-head.c) and
 * keeps the verdict in the job.  This prints that verdict per node and per
 * link, and exits 1 when a node or a link failed.  The job says burn_in, so
 * a drained node named by --nodes takes part too (`dtctl resume --burn-in`).
 */
#include "builtin.h"
#include "cluster-ssh.h"
#include "head.h"
#include "json.h"
#include "protocol.h"
#include "setup.h"
#include "term.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>

#define FABRIC_PENDING_MS (60 * 1000)
#define FABRIC_TIMEOUT_MS (3 * 60 * 1000)

/*
 * The nodes to test: those of spec (host-range syntax), which must be UP or
 * DRAINED, or without spec every UP node.  -1 after saying why.
 */
static int fabric_nodes(const char *spec, struct strvec *names)
{
	struct cluster_config *c = &the_cluster.config;
	json_t *reply = NULL, *n;
	size_t *idx = NULL, nr = 0, i;
	int code = 0;

	if (spec && cluster_select(c, spec, &idx, &nr) < 0) {
		free(idx);
		return DT_EXIT_USAGE;
	}
	if ((code = head_api("GET", DT_PATH_NODES, NULL, &reply, NULL))) {
		free(idx);
		return code;
	}
	if (spec) {
		for (size_t k = 0; k < nr && !code; k++) {
			const char *name = c->nodes[idx[k]].name, *st = NULL;

			json_array_foreach(json_object_get(reply, "nodes"), i, n)
				if (!strcmp(json_get_str(n, "name", ""), name))
					st = json_get_str(n, "state", "?");
			if (!st || (strcmp(st, DT_NODE_UP) && strcmp(st, DT_NODE_DRAINED))) {
				error("node '%s' is %s: the fabric test needs its agent (dtctl agents "
				      "start)", term_str(name), st ? term_str(st) : "unknown to dtsched");
				code = DT_EXIT_FAIL;
			}
			strvec_push(names, name);
		}
	} else {
		json_array_foreach(json_object_get(reply, "nodes"), i, n)
			if (!strcmp(json_get_str(n, "state", ""), DT_NODE_UP))
				strvec_push(names, json_get_str(n, "name", "?"));
	}
	json_decref(reply);
	free(idx);
	if (!code && names->nr < 2) {
		error("the fabric test needs at least 2 nodes (%s %zu)", spec ? "--nodes names" :
		      "UP nodes:", names->nr);
		code = DT_EXIT_USAGE;
	}
	return code;
}

static void print_mbps(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	if (json_is_number(v))
		printf(" %10.4g", json_number_value(v));
	else
		printf(" %10s", "-");
}

/* the VERDICT column */
static void print_ok(const json_t *x)
{
	if (json_is_true(json_object_get(x, "ok")))
		printf("  ok\n");
	else
		printf("  FAIL: %s\n", term_str(json_get_str(x, "why", "?")));
}

static void print_verdict(const json_t *v)
{
	const json_t *x, *ar = json_object_get(v, "allreduce");
	size_t i;

	printf("%-20s %10s %10s %10s %10s  %s\n", "NODE", "RX MB/s", "TX MB/s", "BASE RX",
	       "BASE TX", "VERDICT");
	json_array_foreach(json_object_get(v, "nodes"), i, x) {
		printf("%-20s", term_str(json_get_str(x, "node", "?")));
		print_mbps(x, "rx_MBps");
		print_mbps(x, "tx_MBps");
		print_mbps(x, "base_rx");
		print_mbps(x, "base_tx");
		print_ok(x);
	}
	printf("%-41s %10s %10s %10s  %s\n", "LINK", "LAT us", "A>B MB/s", "B>A MB/s", "VERDICT");
	json_array_foreach(json_object_get(v, "links"), i, x) {
		struct strbuf name = STRBUF_INIT;

		strbuf_addf(&name, "%s<->%s", json_get_str(x, "a", "?"), json_get_str(x, "b", "?"));
		printf("%-41s", term_str(name.buf));
		print_mbps(x, "lat_us");
		print_mbps(x, "bw_ab_MBps");
		print_mbps(x, "bw_ba_MBps");
		print_ok(x);
		strbuf_release(&name);
	}
	if (json_is_object(ar)) {
		if (json_is_true(json_object_get(ar, "ok")))
			printf("all-reduce: %.4g us, bus bandwidth %.4g MB/s\n",
			       json_get_real(ar, "time_us", 0), json_get_real(ar, "busbw_MBps", 0));
		else
			printf("all-reduce: did not finish in time\n");
	}
}

int doctor_fabric(const char *spec, int quick, int json)
{
	struct strvec names = STRVEC_INIT;
	struct strbuf include = STRBUF_INIT, id = STRBUF_INIT;
	struct job_config job;
	json_t *j = NULL, *v;
	int code;

	if ((code = cluster_setup(NEED_CLUSTER | NEED_SHARED)))
		return code;
	if ((code = fabric_nodes(spec, &names)))
		goto out;
	for (size_t i = 0; i < names.nr; i++)
		strbuf_addf(&include, "%s%s", i ? "," : "", names.v[i]);
	job_config_init(&job);
	job.name = xstrdup("fabric-test");
	job.has_trainer = 1;
	job.launcher = LAUNCHER_MPI;
	job.preflight = PREFLIGHT_NONE;   /* the test is the check: no connectivity check first */
	job.nodes = (int)names.nr;
	job.procs_per_node = 1;
	job.node_include = xstrdup(include.buf);
	job.timeout_ms = FABRIC_TIMEOUT_MS;
	job.burn_in = 1;      /* a drained node named by --nodes takes part */
	kvlist_set(&job.trainer, "fabric", quick ? "quick" : "full");
	code = head_job_submit(&job, &id);
	job_config_release(&job);
	if (code)
		goto out;
	if (!json) {
		printf("fabric test (%s): job %s on %zu nodes: %s\n", quick ? "quick" : "full",
		       term_str(id.buf), names.nr, term_str(include.buf));
		fflush(stdout);
	}
	if ((code = head_job_wait(id.buf, FABRIC_PENDING_MS, "fabric test", &j)))
		goto out;
	v = json_object_get(j, "fabric");
	if (!json_is_object(v) || json_object_get(v, "error")) {
		error("fabric test job %s ended %s without a verdict: %s (dtctl logs %s)",
		      term_str(id.buf), term_str(json_get_str(j, "state", "?")),
		      term_str(json_get_str(j, "reason", json_get_str(v, "error", "?"))),
		      term_str(id.buf));
		code = DT_EXIT_FAIL;
		goto out;
	}
	if (json) {
		json_t *o = json_pack("{s:b,s:s,s:O}", "ok", json_is_true(json_object_get(v, "ok")),
				      "job", id.buf, "fabric", v);

		json_doc_print(o);
		json_decref(o);
	} else {
		print_verdict(v);
		printf("measured in %.0f ms\n", json_get_real(v, "elapsed_ms", 0));
		if (json_is_true(json_object_get(v, "ok")))
			printf("fabric: every node and link passed (job %s)\n", term_str(id.buf));
		else
			printf("fabric: FAILED: %s\n", term_str(json_get_str(j, "reason", "?")));
	}
	code = json_is_true(json_object_get(v, "ok")) ? 0 : DT_EXIT_FAIL;
out:
	json_decref(j);
	strvec_clear(&names);
	strbuf_release(&include);
	strbuf_release(&id);
	return code;
}
