/*
 * jobs-queue.c - dtsched's job queue and placement: the pools of free slots
 * (from the nodes, cluster.yaml and the holds), placing pending jobs oldest
 * first with backfill (placement.c decides) into holds (hold.c: the slots of
 * one attempt), after the backend's pre-launch gate (backend.h).  See jobs.c
 * for the lifecycle.
 */
#include "jobs-int.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "safefile.h"
#include "usage.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------ cluster.yaml */

/* <home>/cluster.yaml (labels, CPU slots, network interface), re-read when it changes. */
void cluster_refresh(struct sched *s)
{
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;
	struct stat st;
	long long now = dt_mono_ms(), m;

	if (s->cc_checked_ms && now - s->cc_checked_ms < 1000)
		return;
	s->cc_checked_ms = now;
	strbuf_addf(&path, "%s/cluster.yaml", s->o.home);
	if (stat(path.buf, &st) < 0)
		goto out;
	m = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
	if (m == s->cc_mtime_ns)
		goto out;
	s->cc_mtime_ns = m;
	if (!s->cc)
		s->cc = xcalloc(1, sizeof(*s->cc));
	else
		cluster_config_release(s->cc);
	memset(s->cc, 0, sizeof(*s->cc));
	if (cluster_config_load(s->cc, path.buf, &err) < 0) {
		dtlog(DTLOG_WARN, "ignoring %s", err.buf);
		free(s->cc);
		s->cc = NULL;
	} else {
		struct strbuf why = STRBUF_INIT;

		/* what dtsched writes in job dirs, and (task "umask") what the tasks write */
		sf_set_umask(s->cc->job_files_world ? 022 : 027);
		/* team mode: jobs/ open to every user (each job dir is its user's alone,
		 * 0700: job.c job_dir_give), dtsched's own files in it plain 0644 */
		if (s->cc->team)
			sf_set_umask(022);
		/* jobs/ follows the setting both ways (earlier builds made it 0775): with
		 * "group", other users cannot reach even the job dirs made before */
		if (sf_mkdirs(s->cc->shared_dir, "jobs", 0755, SF_OWNER, &why) < 0)
			dtlog(DTLOG_WARN, "cannot set the mode of '%s/jobs': %s", s->cc->shared_dir,
			      why.buf);
		strbuf_release(&why);
	}
out:
	strbuf_release(&path);
	strbuf_release(&err);
}

static const struct cluster_node *cc_node(struct sched *s, const char *name)
{
	int i = s->cc ? cluster_find_node(s->cc, name) : -1;

	return i >= 0 ? &s->cc->nodes[i] : NULL;
}

void pool_build(struct sched *s, struct pool *p, int gpu)
{
	p->nr = s->nr;
	p->gpu = gpu;
	p->n = xcalloc(s->nr ? s->nr : 1, sizeof(*p->n));
	for (size_t i = 0; i < s->nr; i++) {
		struct node *n = s->nodes[i];
		struct place_node *pn = &p->n[i];
		const struct cluster_node *cn = cc_node(s, n->name);
		json_t *t;
		const char *id;

		pn->name = n->name;
		pn->up = !strcmp(n->state, DT_NODE_UP) || !strcmp(n->state, DT_NODE_DRAINED);
		pn->drained = n->drained;
		pn->labels = cn ? &cn->labels : NULL;
		if (gpu)
			pn->total = n->gpus_total;
		else
			pn->total = cn && cn->slots > 0 ? cn->slots : n->cpus;
		if (pn->total > PLACE_MAX_SLOTS)
			pn->total = PLACE_MAX_SLOTS;
		if (!gpu)
			continue;
		/* GPUs held by tasks that are not ours (started through the agent API) */
		json_object_foreach(n->tasks, id, t) {
			const char *cvd = json_get_str(t, "cuda_visible_devices", NULL);

			if (task_final(t) || json_get_str(t, "job_id", NULL))
				continue;
			while (cvd && *cvd) {
				char *end;
				long d = strtol(cvd, &end, 10);

				if (end == cvd)
					break;
				if (d >= 0 && d < pn->total)
					pn->used[d] = 1;
				cvd = *end == ',' ? end + 1 : end;
			}
		}
	}
	for (size_t h = 0; h < s->nr_holds; h++) {
		struct hold *hd = s->holds[h];

		if (hd->gpu != gpu)
			continue;
		for (int k = 0; k < hd->nr; k++) {
			for (size_t i = 0; i < s->nr; i++) {
				if (strcmp(s->nodes[i]->name, hd->place[k].node))
					continue;
				for (int x = 0; x < hd->place[k].nslots; x++)
					if (hd->place[k].slot[x] < PLACE_MAX_SLOTS)
						p->n[i].used[hd->place[k].slot[x]] = 1;
			}
		}
	}
}

/*
 * A hash of everything placement_try() reads from a pool (and of the cluster
 * config its labels point into).  A pending job that had to wait on a pool
 * with this fingerprint waits on it again: schedule_pending() skips it, which
 * makes a step cost O(new jobs), not O(queue), while nothing is freed.  With
 * 1500 jobs queued, trying each one on every submit was most of dtsched's
 * CPU (a 66 KB place_result cleared per try).  Never 0.
 */
static unsigned long long pool_fingerprint(const struct sched *s, const struct pool *p)
{
	unsigned long long h = 1469598103934665603ULL;
	const unsigned long long prime = 1099511628211ULL;
#define FP_MIX(v) (h = (h ^ (unsigned long long)(v)) * prime)

	FP_MIX(p->gpu);
	FP_MIX((uintptr_t)s->cc);
	FP_MIX(s->cc_mtime_ns);
	FP_MIX(p->nr);
	for (size_t i = 0; i < p->nr; i++) {
		const struct place_node *n = &p->n[i];

		for (const char *c = n->name; *c; c++)
			FP_MIX((unsigned char)*c);
		FP_MIX((uintptr_t)n->labels);
		FP_MIX(n->up | n->drained << 1);
		FP_MIX(n->total);
		for (int k = 0; k < n->total; k++)
			if (n->used[k])
				FP_MIX(k + 1);
	}
#undef FP_MIX
	return h ? h : 1;
}

static void place_req_of(const struct job *j, struct place_req *r, const char **avoid,
			 size_t max_avoid, int with_avoid)
{
	size_t k = 0, i;
	json_t *a;

	memset(r, 0, sizeof(*r));
	r->nodes = j->cfg.nodes;
	r->per_node = j->per_node;
	r->include = j->cfg.node_include;
	r->exclude = j->cfg.node_exclude;
	r->labels = j->cfg.labels.nr ? &j->cfg.labels : NULL;
	r->burn_in = j->cfg.burn_in;
	if (with_avoid)
		json_array_foreach(j->avoid, i, a)
			if (k + 1 < max_avoid && json_is_string(a))
				avoid[k++] = json_string_value(a);
	avoid[k] = NULL;
	r->avoid = avoid;
}

enum place_status job_try_place(struct sched *s, const struct job *j, struct pool *p,
				struct place_result *res, struct strbuf *reason)
{
	const char *avoid[64];
	struct place_req r;
	enum place_status st;

	place_req_of(j, &r, avoid, ARRAY_SIZE(avoid), 1);
	st = placement_try(p->n, p->nr, &r, res, reason);
	/*
	 * An elastic job's restart with no spare node for the one it lost: on fewer
	 * healthy nodes, down to elastic.min_nodes, rather than wait (its world size
	 * follows: job_attempt_started()).
	 */
	for (int n = j->cfg.nodes - 1; st != PLACE_OK && j->attempt > 0 &&
	     j->cfg.elastic_min_nodes > 0 && n >= j->cfg.elastic_min_nodes; n--) {
		struct strbuf why = STRBUF_INIT;

		r.nodes = n;
		if (placement_try(p->n, p->nr, &r, res, &why) == PLACE_OK)
			st = PLACE_OK;
		strbuf_release(&why);
	}
	if (st == PLACE_NEVER && avoid[0]) {
		/* the nodes it failed on are the only ones left: use them after all */
		strbuf_reset(reason);
		place_req_of(j, &r, avoid, ARRAY_SIZE(avoid), 0);
		st = placement_try(p->n, p->nr, &r, res, reason);
	}
	if (st != PLACE_OK)
		sched_refused_note(s, reason);   /* agents of another version: the fix */
	return st;
}

struct hold *hold_new(struct sched *s, const struct job *j, const struct place_result *res)
{
	struct hold *h = xcalloc(1, sizeof(*h));

	snprintf(h->job, sizeof(h->job), "%s", j->id);
	h->gpu = j->gpu;
	h->nr = res->nr;
	h->place = xcalloc((size_t)res->nr, sizeof(*h->place));
	for (int k = 0; k < res->nr; k++) {
		struct node *n = s->nodes[res->node[k]];

		h->place[k].node = xstrdup(n->name);
		h->place[k].address = xstrdup(n->address && *n->address ? n->address : n->name);
		h->place[k].nslots = j->per_node;
		memcpy(h->place[k].slot, res->slots[k], sizeof(int) * (size_t)j->per_node);
	}
	return h;
}

static struct hold *hold_make(struct sched *s, struct job *j, struct pool *p,
			      const struct place_result *res)
{
	struct hold *h = hold_new(s, j, res);

	placement_commit(p->n, res, j->per_node);
	ALLOC_GROW(s->holds, s->nr_holds + 1, s->alloc_holds);
	s->holds[s->nr_holds++] = h;
	return h;
}

/* Place pending jobs, oldest first; later ones that fit start too (backfill). */
void schedule_pending(struct sched *s)
{
	struct pool gpu = { NULL, 0, 1 }, cpu = { NULL, 0, 0 };
	struct strbuf reason = STRBUF_INIT;
	unsigned long long fp[2];   /* [p->gpu] */
	int any = 0;

	for (size_t i = 0; i < s->nr_jobs; i++)
		if (!strcmp(s->jobs[i]->state, DT_JOB_PENDING) && !s->jobs[i]->cancel)
			any = 1;
	if (!any)
		return;
	pool_build(s, &gpu, 1);
	pool_build(s, &cpu, 0);
	fp[0] = pool_fingerprint(s, &cpu);
	fp[1] = pool_fingerprint(s, &gpu);
	for (size_t i = 0; i < s->nr_jobs; i++) {
		struct job *j = s->jobs[i];
		struct pool *p = j->gpu ? &gpu : &cpu;
		struct place_result *res;
		enum place_status st;

		if (strcmp(j->state, DT_JOB_PENDING) || j->cancel || j->wait_fp == fp[p->gpu])
			continue;
		res = xmalloc(sizeof(*res));
		strbuf_reset(&reason);
		st = job_try_place(s, j, p, res, &reason);
		if (st == PLACE_OK && s->backend->gate && s->backend->gate(s, j, p, res, &reason))
			st = PLACE_WAIT;   /* the backend's pre-launch steps first (backend.h) */
		if (st != PLACE_OK)
			j->wait_fp = fp[p->gpu];   /* the same pool gives the same answer */
		if (st == PLACE_OK) {
			j->hold = hold_make(s, j, p, res);
			job_attempt_started(j);
			fp[p->gpu] = pool_fingerprint(s, p);
			json_decref(j->placement);
			j->placement = placement_json(j->hold);
			j->started_us = dt_now_us();
			j->run_mono = dt_mono_ms();
			j->ended_us = 0;
			j->has_exit = 0;
			j->failed_rank = -1;
			free(j->failed_node);
			j->failed_node = NULL;
			free(j->launch_error);
			j->launch_error = NULL;
			json_array_clear(j->stalled);
			set_reason(j, NULL);
			j->launch = 1;
			job_transition(s, j, DT_JOB_RUNNING);
			write_placement_file(j);
		} else if (!j->reason || strcmp(j->reason, reason.buf)) {
			set_reason(j, "%s", reason.buf);
			job_save(s, j);
		}
		free(res);
	}
	free(gpu.n);
	free(cpu.n);
	strbuf_release(&reason);
}
