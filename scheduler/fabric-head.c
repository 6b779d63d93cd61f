/*
 * fabric-head.c - dtsched's side of the fabric test (docs/agents.md,
 * "Fabric test"): when an attempt of a job whose trainer runs `dttrain
 * --fabric` ends, read the document its rank 0 wrote (<job dir>/fabric.json,
 * written by the job's user: read through lib/safefile with a size limit),
 * judge it against state.db's baselines (scheduler/fabric.h), keep the
 * verdict in the job ("fabric" in its JSON: what `dtctl doctor --fabric`
 * prints) and move the baselines with what passed.
 *
 * The pre-flight gate: a job with `preflight: true` placed on 2 nodes or more
 * is not launched until a fabric test of exactly those nodes passed.  The
 * test is a job of its own (a gate job, "preflight-<job>": the same path as
 * `dtctl doctor --fabric`, queued behind nothing since its nodes are free at
 * that moment); the job waits PENDING meanwhile.  When the gate job ends, the
 * nodes its verdict names are suspects, tested again by the next gate (the
 * job is placed again, normally on the same nodes); those that fail twice in
 * a row are drained ("auto: fabric test failed twice ..."), and the job is
 * placed again: on other nodes, with a new gate, or, when the gate passed,
 * launched on nodes that all passed.  After FABRIC_GATE_ROUNDS gates
 * in a row without a pass it is launched without one (said in its history).
 */
#include "fabric.h"
#include "jobs-int.h"
#include "json.h"
#include "log.h"
#include "safefile.h"

#include <errno.h>
#include <string.h>

#define FABRIC_DOC_MAX (4 << 20)
#define FABRIC_GATE_TIMEOUT_MS (3 * 60 * 1000)

static json_t *baselines_load(struct sched *s)
{
	json_t *b = json_object();
	sqlite3_stmt *st = NULL;

	if (sqlite3_prepare_v2(s->db, "SELECT key, value FROM fabric_baselines", -1, &st,
			       NULL) != SQLITE_OK) {
		dtlog(DTLOG_ERROR, "state.db: cannot read the fabric baselines: %s",
		      sqlite3_errmsg(s->db));
		return b;
	}
	while (sqlite3_step(st) == SQLITE_ROW)
		json_object_set_new(b, (const char *)sqlite3_column_text(st, 0),
				    json_real(sqlite3_column_double(st, 1)));
	sqlite3_finalize(st);
	return b;
}

static void baselines_save(struct sched *s, const json_t *b)
{
	sqlite3_stmt *st = NULL;
	const char *key;
	json_t *v;

	if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO fabric_baselines VALUES(?, ?)", -1,
			       &st, NULL) != SQLITE_OK)
		return;
	json_object_foreach((json_t *)b, key, v) {
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
		sqlite3_bind_double(st, 2, json_number_value(v));
		if (sqlite3_step(st) != SQLITE_DONE)
			dtlog(DTLOG_ERROR, "state.db: cannot save fabric baseline '%s': %s", key,
			      sqlite3_errmsg(s->db));
	}
	sqlite3_finalize(st);
}

/* The job waiting for gate job g (preflight.job == g's id), or NULL. */
static struct job *gated_by(struct sched *s, const struct job *g)
{
	for (size_t i = 0; i < s->nr_jobs; i++) {
		const json_t *pf = s->jobs[i]->preflight;

		if (pf && !strcmp(json_get_str(pf, "job", ""), g->id))
			return s->jobs[i];
	}
	return NULL;
}

/* 1 when array a holds string name */
/*
 * Gate job g of job j ended with verdict v (NULL: no verdict, why says why):
 * the nodes it fails that the gate before it failed too are drained (a
 * second, confirming test: one slow run on a busy node must not drain it);
 * the others are suspects for the next gate.  Remember the nodes that
 * passed, let j be placed again.  Lock held.
 */
static void gate_ended(struct sched *s, struct job *j, const struct job *g, const json_t *v,
		       const char *why)
{
	const struct hold *h = g->hold;
	const json_t *was = json_object_get(j->preflight, "suspects");
	json_t *passed = json_array(), *suspects = json_array(), *x;
	struct strbuf sb = STRBUF_INIT;
	size_t i;
	int drained = 0;

	if (v && json_is_true(json_object_get(v, "ok"))) {
		for (int k = 0; k < h->nr; k++)
			json_array_append_new(passed, json_string(h->place[k].node));
		strbuf_addf(&sb, "pre-flight fabric test passed (job %s)", g->id);
		json_object_set_new(j->preflight, "rounds", json_integer(0));
	} else {
		strbuf_addf(&sb, "pre-flight fabric test failed (job %s): %s", g->id, why);
	}
	json_array_foreach(json_object_get(v, "nodes"), i, x) {
		const char *name = json_get_str(x, "node", "");
		struct node *n = node_find(s, name);
		struct strbuf r = STRBUF_INIT;

		if (json_is_true(json_object_get(x, "ok")) || !n || n->drained)
			continue;
		if (!json_str_in(was, name)) {
			json_array_append_new(suspects, json_string(name));
			continue;
		}
		strbuf_addf(&r, "auto: fabric test failed twice (pre-flight of %s, job %s): %s",
			    j->id, g->id, json_get_str(x, "why", "?"));
		dtlog(DTLOG_WARN, "node '%s' drained: %s", n->name, r.buf);
		node_set_drained(s, n, r.buf);
		drained++;
		strbuf_release(&r);
	}
	if (json_array_size(suspects))
		strbuf_addstr(&sb, drained ? "; the others failing it are tested again" :
			      "; tested again before any node is drained");
	json_object_set_new(j->preflight, "job", json_null());
	json_object_set_new(j->preflight, "passed", passed);
	json_object_set_new(j->preflight, "suspects", suspects);
	if (state_final(j->state)) {    /* cancelled meanwhile: the nodes were all it was for */
		job_save(s, j);
		strbuf_release(&sb);
		return;
	}
	history_add(j, DT_JOB_PENDING, sb.buf);
	set_reason(j, "%s", sb.buf);
	job_place_again(s, j);
	job_save(s, j);
	strbuf_release(&sb);
}

int fabric_gate(struct sched *s, struct job *j, const struct pool *p,
		const struct place_result *res, struct strbuf *reason)
{
	struct strbuf nodes = STRBUF_INIT, err = STRBUF_INIT;
	const struct job *g;
	json_t *spec;
	char id[16];
	int rounds;

	if (res->nr < 2 || j->cfg.preflight == PREFLIGHT_NONE)
		return 0;
	if (j->cfg.preflight == PREFLIGHT_CONNECT)
		return probe_gate(s, j, p, res, reason);
	if (!j->preflight)
		j->preflight = json_pack("{s:n,s:[],s:i}", "job", "passed", "rounds", 0);
	g = job_find(s, json_get_str(j->preflight, "job", ""));
	if (g && !state_final(g->state)) {
		strbuf_addf(reason, "pre-flight fabric test running (job %s)", g->id);
		return 1;
	}
	if (preflight_passed(j, p, res) || preflight_gave_up(j, "pre-flight fabric test"))
		return 0;
	rounds = (int)json_get_int(j->preflight, "rounds", 0);
	for (int k = 0; k < res->nr; k++)
		strbuf_addf(&nodes, "%s%s", k ? "," : "", p->n[res->node[k]].name);
	strbuf_addf(&err, "preflight-%s", j->id);
	spec = json_pack("{s:s,s:i,s:i,s:s,s:{s:s},s:s,s:I,s:b}", "name", err.buf,
			 "nodes", res->nr, "procs_per_node", 1, "launcher", "mpi", "trainer",
			 "fabric", "full", "include_nodes", nodes.buf, "timeout_ms",
			 (json_int_t)FABRIC_GATE_TIMEOUT_MS, "preflight", 0);
	strbuf_reset(&err);
	if (jobs_submit(s, spec, j->shared_dir, NULL, j->user, id, sizeof(id), &err) < 0) {
		/* cannot even be queued: launch without it, and say so */
		dtlog(DTLOG_WARN, "job %s: no pre-flight fabric test: %s", j->id, err.buf);
		history_add(j, DT_JOB_PENDING, "no pre-flight fabric test could be queued");
		json_object_set_new(j->preflight, "rounds", json_integer(FABRIC_GATE_ROUNDS + 1));
		json_decref(spec);
		strbuf_release(&nodes);
		strbuf_release(&err);
		return 0;
	}
	json_object_set_new(j->preflight, "job", json_string(id));
	json_object_set_new(j->preflight, "rounds", json_integer(rounds + 1));
	strbuf_addf(reason, "pre-flight fabric test of %s (job %s)", nodes.buf, id);
	dtlog(DTLOG_INFO, "job %s: pre-flight fabric test of %s: job %s", j->id, nodes.buf, id);
	json_decref(spec);
	strbuf_release(&nodes);
	strbuf_release(&err);
	return 1;
}

static void fabric_attempt_ended(struct sched *s, struct job *j, enum job_event ev,
				 const struct job_event_info *info, void *data)
{
	struct strbuf rel = STRBUF_INIT, buf = STRBUF_INIT, why = STRBUF_INIT;
	const struct hold *h = j->hold;
	const char **names = NULL;
	json_t *doc = NULL, *base = NULL, *v = NULL;
	size_t nr = 0;

	if (!j->cfg.has_trainer || !kvlist_get(&j->cfg.trainer, "fabric") || !h)
		return;
	job_rel(j, "fabric.json", &rel);
	if (sf_read(j->shared_dir, rel.buf, &buf, FABRIC_DOC_MAX, &why) < 0) {
		if (errno == ENOENT) {
			strbuf_reset(&why);
			strbuf_addstr(&why, "its rank 0 wrote no fabric.json (see dtctl logs)");
		}
		goto fail;
	}
	if (!(doc = json_parse(buf.buf, buf.len, &why)))
		goto fail;
	/* one rank per node, in placement order (the hostfile's): the node names come
	 * from the placement, never from the document (its user wrote it) */
	if (j->per_node != 1 || json_get_int(doc, "world", 0) != h->nr) {
		strbuf_addf(&why, "fabric.json is for %lld rank(s), the job has %d node(s) with one "
			    "rank each", json_get_int(doc, "world", 0), h->nr);
		goto fail;
	}
	nr = (size_t)h->nr;
	names = xcalloc(nr, sizeof(*names));
	for (size_t k = 0; k < nr; k++)
		names[k] = h->place[k].node;
	base = baselines_load(s);
	v = fabric_verdict(doc, names, nr, base, s->cc ? s->cc->health.fabric_fraction : 0.5, &why);
	if (!v)
		goto fail;
	fabric_update_baselines(base, v);
	baselines_save(s, base);
	if (!json_is_true(json_object_get(v, "ok"))) {
		strbuf_reset(&why);
		fabric_summary(&why, v);
		set_reason(j, "fabric test failed: %s", why.buf);
		dtlog(DTLOG_WARN, "job %s: fabric test failed: %s", j->id, why.buf);
	}
	goto out;
fail:
	v = json_pack("{s:b,s:s}", "ok", 0, "error", why.buf);
	set_reason(j, "fabric test: %s", why.buf);
out:
	{
		struct job *gated = gated_by(s, j);

		if (gated)
			gate_ended(s, gated, j, v, why.buf);
	}
	json_decref(j->fabric);
	j->fabric = v;
	json_decref(doc);
	json_decref(base);
	free(names);
	strbuf_release(&rel);
	strbuf_release(&buf);
	strbuf_release(&why);
}

void fabric_subscribe(struct sched *s)
{
	job_events_on(&s->events, JOB_EV_ATTEMPT_ENDED, fabric_attempt_ended, NULL);
}
