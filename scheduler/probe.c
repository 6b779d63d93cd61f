/*
 * probe.c - the connectivity check before a job on 2 nodes or more starts,
 * for every job that does not set `preflight:` (true runs the fabric test
 * instead, fabric-head.c; false skips both).
 *
 * Heartbeats prove that each node reaches the head, not that the chosen nodes
 * reach each other: a firewall, a wrong route or a dead link between two nodes
 * shows only as a rendezvous or an all-reduce that hangs until its timeout.
 * So each chosen node's agent connects to every other one's agent port, all at
 * once (POST /v1/probe, agent/probe.c): milliseconds when the network is
 * fine, DT_PROBE_TIMEOUT_MS at most when not.  The job waits PENDING meanwhile
 * ("connectivity check of a,b running"), as behind a fabric gate job.
 *
 * A pair failed when either direction failed.  From 3 nodes, a node failing
 * with more than half of its peers is the culprit: avoided by this job (it is
 * placed again, on others if it can), and drained when it was a culprit of the
 * previous check too (`auto: connectivity check failed twice ...`, like the
 * fabric gate: one refused connect on a loaded node is not enough).  With 2
 * nodes nobody can tell which end is at fault: both are avoided by this job,
 * neither is drained.  After FABRIC_GATE_ROUNDS checks without a pass the job
 * starts anyway and says so in its history.
 */
#include "jobs-int.h"
#include "fabric.h"
#include "json.h"
#include "log.h"
#include "probe.h"
#include "protocol.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int probe_culprits(size_t n, const unsigned char *fail, unsigned char *culprit)
{
	int found = 0;

	for (size_t i = 0; i < n; i++) {
		size_t bad = 0;

		for (size_t k = 0; k < n; k++)
			bad += k != i && (fail[i * n + k] || fail[k * n + i]);
		/* more than half of its peers (n - 1): with 2 nodes, both ends */
		culprit[i] = 2 * bad > n - 1;
		found += culprit[i];
	}
	return found;
}

struct probe_run {
	struct sched *s;
	char job[16];
	struct agent_call *n;     /* POST /v1/probe to each chosen node */
	size_t nr;
};

static void probe_run_free(struct probe_run *r)
{
	for (size_t i = 0; i < r->nr; i++)
		agent_call_release(&r->n[i]);
	free(r->n);
	free(r);
}

/* fail[i * n + k]: node i could not connect to node k; 1 when any node's agent
 * is older than the check (404: nothing was checked) */
static int fill_matrix(struct probe_run *r, unsigned char *fail, struct strbuf *why)
{
	size_t n = r->nr;

	for (size_t i = 0; i < n; i++) {
		const struct agent_call *x = &r->n[i];
		json_t *res;
		size_t k;

		if (x->status == 404)
			return 1;
		if (x->status != 200) {
			/* its agent did not answer the head: none of its pairs is known good */
			for (k = 0; k < n; k++)
				fail[i * n + k] = k != i;
			strbuf_addf(why, "%s%s: no answer (%s)", why->len ? "; " : "", x->name,
				    x->err.buf);
			continue;
		}
		for (k = 0; k < n; k++)
			fail[i * n + k] = k != i;   /* not in the reply: failed */
		json_array_foreach(json_object_get(x->reply, "results"), k, res) {
			const char *to = json_get_str(res, "node", "");

			for (size_t m = 0; m < n; m++) {
				if (m == i || strcmp(r->n[m].name, to))
					continue;
				fail[i * n + m] = !json_is_true(json_object_get(res, "ok"));
				if (fail[i * n + m])
					strbuf_addf(why, "%s%s -> %s: %s", why->len ? "; " : "", x->name,
						    to, json_get_str(res, "error", "failed"));
			}
		}
	}
	return 0;
}

/* the verdict, into j (lock held) */
static void probe_ended(struct sched *s, struct job *j, struct probe_run *r,
			const unsigned char *fail, int unsupported, const char *why)
{
	size_t n = r->nr;
	unsigned char *culprit = xcalloc(n, 1);
	const json_t *was = json_object_get(j->preflight, "suspects");
	json_t *passed = json_array(), *suspects = json_array();
	struct strbuf sb = STRBUF_INIT, names = STRBUF_INIT;
	int bad = unsupported ? 0 : probe_culprits(n, fail, culprit), failed = 0;

	for (size_t i = 0; i < n * n; i++)
		failed |= !unsupported && fail[i];
	for (size_t i = 0; i < n; i++) {
		struct node *nd = node_find(s, r->n[i].name);

		if (!culprit[i]) {
			if (!failed)
				json_array_append_new(passed, json_string(r->n[i].name));
			continue;
		}
		strbuf_addf(&names, "%s%s", names.len ? ", " : "", r->n[i].name);
		if (!json_str_in(j->avoid, r->n[i].name))
			json_array_append_new(j->avoid, json_string(r->n[i].name));
		if (n >= 3 && nd && !nd->drained && json_str_in(was, nd->name)) {
			struct strbuf d = STRBUF_INIT;

			strbuf_addf(&d, "auto: connectivity check failed twice (before job %s): %s",
				    j->id, why);
			dtlog(DTLOG_WARN, "node '%s' drained: %s", nd->name, d.buf);
			node_set_drained(s, nd, d.buf);
			strbuf_release(&d);
		} else if (n >= 3) {
			json_array_append_new(suspects, json_string(r->n[i].name));
		}
	}
	json_object_set_new(j->preflight, "probe", json_false());
	json_object_set_new(j->preflight, "passed", passed);
	json_object_set_new(j->preflight, "suspects", suspects);
	if (unsupported) {
		/* an agent older than the check: the nodes count as passed, as before it */
		json_decref(passed);
		passed = json_array();
		for (size_t i = 0; i < n; i++)
			json_array_append_new(passed, json_string(r->n[i].name));
		json_object_set_new(j->preflight, "passed", passed);
		dtlog(DTLOG_INFO, "job %s: connectivity check skipped: an agent is older than it",
		      j->id);
	} else if (failed) {
		if (bad)
			strbuf_addf(&sb, "connectivity check failed, placed again without %s: %s",
				    names.buf, why);
		else
			strbuf_addf(&sb, "connectivity check failed (no node to blame): %s", why);
		dtlog(DTLOG_WARN, "job %s: %s", j->id, sb.buf);
		if (!state_final(j->state)) {
			history_add(j, DT_JOB_PENDING, sb.buf);
			set_reason(j, "%s", sb.buf);
		}
	}
	job_place_again(s, j);   /* place it again: on the nodes that passed, or others */
	job_save(s, j);
	sched_wake(s);
	free(culprit);
	strbuf_release(&sb);
	strbuf_release(&names);
}

static void *probe_thread(void *arg)
{
	struct probe_run *r = arg;
	struct sched *s = r->s;
	size_t n = r->nr;
	unsigned char *fail = xcalloc(n * n, 1);
	struct strbuf why = STRBUF_INIT;
	struct job *j;
	int unsupported;

	agent_calls(r->n, n);
	unsupported = fill_matrix(r, fail, &why);

	pthread_mutex_lock(&s->lock);
	j = job_find(s, r->job);
	if (j && j->preflight)
		probe_ended(s, j, r, fail, unsupported, why.buf);
	/* last: once this is 0 (and the lock free) jobs_release may free s */
	s->clients->launches--;
	pthread_mutex_unlock(&s->lock);
	free(fail);
	strbuf_release(&why);
	probe_run_free(r);
	return NULL;
}

int probe_gate(struct sched *s, struct job *j, const struct pool *p,
	       const struct place_result *res, struct strbuf *reason)
{
	struct probe_run *r;
	struct strbuf nodes = STRBUF_INIT;
	pthread_attr_t at;
	pthread_t t;
	int rounds;

	if (!j->preflight)
		j->preflight = json_pack("{s:b,s:[],s:i}", "probe", 0, "passed", "rounds", 0);
	for (int k = 0; k < res->nr; k++)
		strbuf_addf(&nodes, "%s%s", k ? "," : "", p->n[res->node[k]].name);
	if (json_is_true(json_object_get(j->preflight, "probe"))) {
		strbuf_addf(reason, "connectivity check of %s running", nodes.buf);
		strbuf_release(&nodes);
		return 1;
	}
	if (preflight_passed(j, p, res) || preflight_gave_up(j, "connectivity check")) {
		strbuf_release(&nodes);
		return 0;
	}
	rounds = (int)json_get_int(j->preflight, "rounds", 0);
	r = xcalloc(1, sizeof(*r));
	r->s = s;
	snprintf(r->job, sizeof(r->job), "%s", j->id);
	r->n = xcalloc((size_t)res->nr, sizeof(*r->n));
	for (int k = 0; k < res->nr; k++) {
		struct node *nd = node_find(s, p->n[res->node[k]].name);
		if (!nd || !nd->address)
			continue;
		/* the agent gets DT_PROBE_TIMEOUT_MS for its connects, the call 3 s more */
		agent_call_init(&r->n[r->nr++], s, nd, DT_PATH_PROBE, DT_PROBE_TIMEOUT_MS + 3000);
	}
	for (size_t i = 0; i < r->nr; i++) {
		json_t *targets = json_array();

		for (size_t m = 0; m < r->nr; m++)
			if (m != i)
				json_array_append_new(targets, json_pack("{s:s,s:s,s:i}",
					"node", r->n[m].name, "address", r->n[m].addr,
					"port", r->n[m].port));
		r->n[i].body = json_pack("{s:o,s:i}", "targets", targets, "timeout_ms",
					 DT_PROBE_TIMEOUT_MS);
	}
	json_object_set_new(j->preflight, "probe", json_true());
	json_object_set_new(j->preflight, "rounds", json_integer(rounds + 1));
	s->clients->launches++;   /* jobs_release() waits for it */
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &at, probe_thread, r)) {
		/* no thread: launch without the check rather than never */
		s->clients->launches--;
		json_object_set_new(j->preflight, "probe", json_false());
		json_object_set_new(j->preflight, "rounds", json_integer(FABRIC_GATE_ROUNDS + 1));
		dtlog(DTLOG_WARN, "job %s: cannot start the connectivity check thread", j->id);
		probe_run_free(r);
		pthread_attr_destroy(&at);
		strbuf_release(&nodes);
		return 0;
	}
	pthread_attr_destroy(&at);
	strbuf_addf(reason, "connectivity check of %s running", nodes.buf);
	strbuf_release(&nodes);
	return 1;
}

/* 1 when every node of res is in j's passed list (of either check) */
int preflight_passed(const struct job *j, const struct pool *p, const struct place_result *res)
{
	const json_t *passed = json_object_get(j->preflight, "passed");

	for (int k = 0; k < res->nr; k++)
		if (!json_str_in(passed, p->n[res->node[k]].name))
			return 0;
	return 1;
}

int preflight_gave_up(struct job *j, const char *what)
{
	int rounds = (int)json_get_int(j->preflight, "rounds", 0);
	struct strbuf sb = STRBUF_INIT;

	if (rounds < FABRIC_GATE_ROUNDS)
		return 0;
	if (rounds == FABRIC_GATE_ROUNDS) {   /* said once */
		strbuf_addf(&sb, "%s gave up after %d tries without a pass: launched without one",
			    what, FABRIC_GATE_ROUNDS);
		history_add(j, DT_JOB_PENDING, sb.buf);
		json_object_set_new(j->preflight, "rounds", json_integer(rounds + 1));
		strbuf_release(&sb);
	}
	return 1;
}
