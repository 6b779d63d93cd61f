/*
 * fabric-head.c - dtsched's side of the fabric test (docs/agents.md,
 * "Fabric test"): when an attempt of a job whose trainer runs `dttrain
 * --fabric` ends, read the document its rank 0 wrote (<job dir>/fabric.json,
 * written by the job's user: read through lib/safefile with a size limit),
 * judge it against state.db's baselines (scheduler/fabric.h), keep the
 * verdict in the job ("fabric" in its JSON: what `dtctl doctor --fabric`
 * prints) and raise the baselines with what passed.
 */
#include "fabric.h"
#include "jobs-int.h"
#include "json.h"
#include "log.h"
#include "safefile.h"

#include <errno.h>
#include <string.h>

#define FABRIC_DOC_MAX (4 << 20)

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

void fabric_attempt_ended(struct sched *s, struct job *j)
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
	/* one rank per node, in placement order (the hostfile's) */
	if (j->per_node == 1 && json_get_int(doc, "world", 0) == h->nr) {
		nr = (size_t)h->nr;
		names = xcalloc(nr, sizeof(*names));
		for (size_t k = 0; k < nr; k++)
			names[k] = h->place[k].node;
	}
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
	json_decref(j->fabric);
	j->fabric = v;
	json_decref(doc);
	json_decref(base);
	free(names);
	strbuf_release(&rel);
	strbuf_release(&buf);
	strbuf_release(&why);
}
