/*
 * jobs-queue.c - dtsched's job queue and placement: the pools of free slots
 * (from the nodes, cluster.yaml and the holds), placing pending jobs oldest
 * first with backfill (placement.c decides) into holds (hold.c: the slots of
 * one attempt), after the backend's pre-launch gate (backend.h).  See jobs.c
 * for the lifecycle.
 */
#include "jobs-int.h"
#include "fairshare.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "safefile.h"
#include "units.h"
#include "usage.h"

#include <signal.h>
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

/* n in cluster.yaml, or NULL: its index there last time first (every step
 * builds the pools: a search per node was O(nodes^2), ~1M strcmp at 1,000) */
static const struct cluster_node *cc_node(struct sched *s, struct node *n)
{
	int i;

	if (!s->cc)
		return NULL;
	i = n->cc_hint;
	if (i < 0 || (size_t)i >= s->cc->nr_nodes || strcmp(s->cc->nodes[i].name, n->name))
		i = n->cc_hint = cluster_find_node(s->cc, n->name);
	return i >= 0 ? &s->cc->nodes[i] : NULL;
}

static int node_index(const struct sched *s, const char *name)
{
	size_t lo = 0, hi = s->nr;

	while (lo < hi) {   /* s->nodes is sorted by name */
		size_t mid = (lo + hi) / 2;
		int c = strcmp(s->nodes[mid]->name, name);

		if (!c)
			return (int)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

void pool_build(struct sched *s, struct pool *p, int gpu)
{
	p->nr = s->nr;
	p->gpu = gpu;
	p->n = xcalloc(s->nr ? s->nr : 1, sizeof(*p->n));
	for (size_t i = 0; i < s->nr; i++) {
		struct node *n = s->nodes[i];
		struct place_node *pn = &p->n[i];
		const struct cluster_node *cn = cc_node(s, n);

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
		/* GPUs that work which is no job's holds (the backend's, backend.h) */
		if (gpu && s->backend && s->backend->gpus_taken)
			s->backend->gpus_taken(s, n, pn->used, pn->total);
	}
	for (size_t h = 0; h < s->nr_holds; h++) {
		struct hold *hd = s->holds[h];

		if (hd->gpu != gpu)
			continue;
		for (int k = 0; k < hd->nr; k++) {
			int i = node_index(s, hd->place[k].node);

			for (int x = 0; i >= 0 && x < hd->place[k].nslots; x++)
				if (hd->place[k].slot[x] < PLACE_MAX_SLOTS)
					p->n[i].used[hd->place[k].slot[x]] = 1;
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

	if (s->backend->place)   /* the backend places (slurm: Slurm does) */
		/* it notes its own progress (the Slurm job) in the job: not const there */
		return s->backend->place(s, (struct job *)j, p, res, reason);
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

/* ------------------------------------------------------- usage (acct.c adds to it) */

/*
 * The intervals j ran (RUNNING in its history until the next entry); an
 * interval still open ends at j->ended_us, or is left out (include_open 0:
 * the pass counts a running attempt).  Calls fn for each.
 */
void run_intervals(const struct job *j, int include_open,
			  void (*fn)(const struct job *j, long long a, long long b, void *d),
			  void *d)
{
	long long start = 0;
	size_t i;
	json_t *h;

	json_array_foreach(j->history, i, h) {
		long long at = dt_timestamp_parse(json_get_str(h, "at", ""));

		if (at <= 0)
			continue;
		if (start) {
			fn(j, start, at, d);
			start = 0;
		}
		if (!strcmp(json_get_str(h, "state", ""), DT_JOB_RUNNING))
			start = at;
	}
	if (start && include_open && j->ended_us > start)
		fn(j, start, j->ended_us, d);
}

static void add_usage(const struct job *j, long long a, long long b, void *d)
{
	fs_usage_add(d, j->user, j->project, j->world, a, b);
}

void fair_usage_sync(struct sched *s)
{
	long long hl = s->cc ? s->cc->fairshare.half_life_ms : 7LL * 24 * 3600 * 1000;

	if (s->fair_usage && s->fair_usage_hl == hl)
		return;
	if (!s->fair_usage)
		s->fair_usage = xmalloc(sizeof(*s->fair_usage));
	else
		fs_usage_release(s->fair_usage);
	fs_usage_init(s->fair_usage, hl);
	s->fair_usage_hl = hl;
	for (size_t i = 0; i < s->nr_jobs; i++)
		if (s->jobs[i]->gpu)
			run_intervals(s->jobs[i], 0, add_usage, s->fair_usage);
}

/* ------------------------------------------------------- the fair-share pass */

struct fair_ctx {
	struct sched *s;
	struct pool *pools[2];    /* [gpu] */
};

static enum place_status fair_try(void *ctx, struct fs_job *fj, struct place_node *n, size_t nr,
				  int plan, struct place_result *res, struct strbuf *reason)
{
	struct fair_ctx *c = ctx;
	struct job *j = fj->job;
	struct pool p = { n, nr, j->gpu };
	enum place_status st = job_try_place(c->s, j, &p, res, reason);

	if (st == PLACE_OK && !plan && c->s->backend->gate &&
	    c->s->backend->gate(c->s, j, &p, res, reason))
		st = PLACE_WAIT;   /* the backend's pre-launch steps first (backend.h) */
	return st;
}

static void fair_start(void *ctx, struct fs_job *fj, const struct place_result *res)
{
	struct fair_ctx *c = ctx;
	struct sched *s = c->s;
	struct job *j = fj->job;

	j->hold = hold_make(s, j, c->pools[j->gpu ? 1 : 0], res);
	job_attempt_started(j);
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
	j->prio_pos = 0;
	job_transition(s, j, DT_JOB_RUNNING);
	write_placement_file(j);
}

static void fair_wait(void *ctx, struct fs_job *fj, const char *reason)
{
	struct fair_ctx *c = ctx;
	struct job *j = fj->job;

	if (!j->reason || strcmp(j->reason, reason)) {
		set_reason(j, "%s", reason);
		job_save(c->s, j);
	}
}

static unsigned long long fair_fp(void *ctx, int gpu, const struct place_node *n, size_t nr)
{
	struct fair_ctx *c = ctx;
	struct pool p = { (struct place_node *)n, nr, gpu };

	return pool_fingerprint(c->s, &p);
}

/* j's class (cluster.yaml's fairshare.classes): preemptible, and its rank */
static const struct fs_class *fair_class(const struct sched *s, const struct job *j,
					 int *preemptible, int *rank)
{
	const struct fs_class *c = s->cc && j->cfg.job_class ?
		fairshare_class(&s->cc->fairshare, j->cfg.job_class) : NULL;

	*preemptible = c ? c->preemptible : 0;
	*rank = c ? c->rank : 0;
	return c;
}

/* one preemption's signal, off the main thread (the backend's signal takes the lock) */
struct preempt_signal {
	struct sched *s;
	struct job *j;            /* jobs are freed only at exit */
	int sig;
};

static void *preempt_signal_thread(void *arg)
{
	struct preempt_signal *w = arg;
	struct strbuf err = STRBUF_INIT;
	int n = w->s->backend->signal(w->s, w->j, w->sig, &err);

	if (n >= 0)
		dtlog(DTLOG_INFO, "job %s: preempted: SIG%s sent to %d task(s)", w->j->id,
		      sigabbrev_np(w->sig), n);
	else
		dtlog(DTLOG_WARN, "job %s: preempted, but its SIG%s was not sent: %s", w->j->id,
		      sigabbrev_np(w->sig), err.buf);
	strbuf_release(&err);
	free(w);
	return NULL;
}

/*
 * Preempt victim for `by` (fairshare.h): its class's signal now, its attempt
 * ends after the grace (check_running in jobs.c) or when its ranks exit, and
 * it is requeued under its id (end_attempt).  Lock held.
 */
static void fair_preempt(void *ctx, const struct fs_running *victim, const struct fs_job *by)
{
	struct fair_ctx *c = ctx;
	struct sched *s = c->s;
	struct job *v = victim->job, *b = by->job;
	int preemptible, rank;
	const struct fs_class *k = fair_class(s, v, &preemptible, &rank);
	int sig = k ? k->signal : SIGUSR1;
	long long grace = k ? k->grace_ms : 60000;
	struct strbuf g = STRBUF_INIT;

	if (v->preempting || strcmp(v->state, DT_JOB_RUNNING) || v->cancel)
		return;
	v->preempting = 1;
	v->preempt_deadline_ms = dt_mono_ms() + grace;
	free(v->preempted_by);
	v->preempted_by = xstrdup(b->id);
	format_duration_human(&g, grace);
	if (by->guaranteed && v->project && b->project && strcmp(v->project, b->project))   /* the GPUs v's project borrowed */
		strbuf_addf(&g, " unless it ends first; project '%s' reclaims its guaranteed GPUs",
			    b->project);
	else
		strbuf_addstr(&g, " unless it ends first");
	set_reason(v, "preempted by %s (%s's job): SIG%s, stopped after %s", b->id, b->user,
		   sigabbrev_np(sig) ? sigabbrev_np(sig) : "?", g.buf);
	dtlog(DTLOG_INFO, "job %s (%s): %s", v->id, v->name, v->reason);
	job_save(s, v);
	strbuf_release(&g);
	if (s->backend->signal) {
		struct preempt_signal *w = xmalloc(sizeof(*w));
		pthread_attr_t at;
		pthread_t t;

		w->s = s;
		w->j = v;
		w->sig = sig;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, preempt_signal_thread, w)) {
			free(w);
			v->preempt_deadline_ms = dt_mono_ms();   /* no signal: stop it now */
		}
		pthread_attr_destroy(&at);
	} else {
		v->preempt_deadline_ms = dt_mono_ms();   /* the backend cannot signal: stop it now */
	}
}

static void fair_running_build(struct sched *s, struct fair_running *r, long long now)
{
	size_t k = 0, slots = 0;

	for (size_t h = 0; h < s->nr_holds; h++)
		slots += (size_t)s->holds[h]->nr;
	r->v = xcalloc(s->nr_holds ? s->nr_holds : 1, sizeof(*r->v));
	r->node = xcalloc(slots ? slots : 1, sizeof(int));
	r->nslots = xcalloc(slots ? slots : 1, sizeof(int));
	r->slot = xcalloc(slots ? slots : 1, sizeof(int *));
	r->nr = 0;
	for (size_t i = 0; i < s->nr_running; i++) {   /* a pending or ended one has no hold */
		struct job *j = s->running[i];
		struct hold *h = j->hold;
		struct fs_running *f;

		if (!h || !strcmp(j->state, DT_JOB_PENDING) || r->nr >= s->nr_holds)
			continue;
		f = &r->v[r->nr++];
		f->gpu = h->gpu;
		/* its usage so far (none once it ended: acct.c counted it then) */
		f->start_us = h->released ? now : j->started_us;
		/* an attempt whose end is decided frees its slots soon */
		f->end_us = h->released ? now : j->cfg.timeout_ms > 0 && j->started_us ?
			j->started_us + j->cfg.timeout_ms * 1000 : 0;
		f->user = j->user;
		f->project = j->project;
		f->size = j->world;
		f->job = j;
		f->preempting = j->preempting;
		fair_class(s, j, &f->preemptible, &f->cls_rank);
		f->nr = h->nr;
		f->node = &r->node[k];
		f->nslots = &r->nslots[k];
		f->slot = &r->slot[k];
		for (int n = 0; n < h->nr && k < slots; n++, k++) {
			r->node[k] = node_index(s, h->place[n].node);
			r->nslots[k] = h->place[n].nslots;
			r->slot[k] = h->place[n].slot;
		}
	}
}

static void fair_running_release(struct fair_running *r)
{
	free(r->v);
	free(r->node);
	free(r->nslots);
	free(r->slot);
}

static int pool_total(const struct pool *p)
{
	int t = 0;

	for (size_t i = 0; i < p->nr; i++)
		if (p->n[i].up && !p->n[i].drained)
			t += p->n[i].total;
	return t;
}

int job_admit(struct sched *s, struct job *j, struct strbuf *err)
{
	const struct fairshare_config *cfg = s->cc ? &s->cc->fairshare : NULL;
	long long timeout = j->cfg.timeout_ms;
	int up = 0, pp = 0;

	if (j->cfg.job_class && (!cfg || !fairshare_class(cfg, j->cfg.job_class))) {
		strbuf_addf(err, "class '%s' is not one of cluster.yaml's fairshare.classes (",
			    j->cfg.job_class);
		for (size_t i = 0; cfg && i < cfg->nr_classes; i++)
			strbuf_addf(err, "%s'%s'", i ? ", " : "", cfg->classes[i].name);
		strbuf_addstr(err, cfg && cfg->nr_classes ? ")" : "there are none)");
		return -1;
	}
	free(j->project);
	j->project = xstrdup(fs_project_of(cfg, j->user, j->cfg.project));
	/* the pending jobs are counted only for a max_pending: a scan of the queue */
	if (fs_limits_of(cfg, 0, j->user).max_pending || fs_limits_of(cfg, 1, j->project).max_pending)
		for (size_t i = 0; i < s->nr_live; i++) {
			const struct job *o = s->live[i];

			if (strcmp(o->state, DT_JOB_PENDING) || o->cancel)
				continue;
			up += !strcmp(o->user, j->user);
			pp += o->project && !strcmp(o->project, j->project);
		}
	if (fs_check_submit(cfg, j->user, j->project, j->gpu, j->cfg.nodes * j->per_node, &timeout,
			    up, pp, err) < 0)
		return -1;
	if (timeout != j->cfg.timeout_ms) {
		/* max_time is its timeout: the spec says so, and a reservation can count on it */
		j->cfg.timeout_ms = timeout;
		json_decref(j->spec);
		j->spec = job_config_to_json(&j->cfg);
	}
	return 0;
}

static void fair_inputs_pools(struct sched *s, struct fair_inputs *in)
{
	memset(in, 0, sizeof(*in));
	in->gpu.gpu = 1;
	pool_build(s, &in->gpu, 1);
	pool_build(s, &in->cpu, 0);
}

/* the rest of fair_inputs_prepare(), on the pools fair_inputs_pools() built */
static void fair_inputs_rank(struct sched *s, struct fair_inputs *in)
{
	long long now = dt_now_us();
	size_t n = 0;

	for (size_t i = 0; i < s->nr_live; i++)
		if (!strcmp(s->live[i]->state, DT_JOB_PENDING) && !s->live[i]->cancel)
			n++;
	in->fj = xcalloc(n ? n : 1, sizeof(*in->fj));
	for (size_t i = 0; i < s->nr_live; i++) {
		struct job *j = s->live[i];
		struct fs_job *f;

		if (strcmp(j->state, DT_JOB_PENDING) || j->cancel)
			continue;
		f = &in->fj[in->n++];
		f->job = j;
		f->user = j->user;
		f->project = j->project;
		f->gpu = j->gpu;
		f->per_node = j->per_node;
		f->size = j->cfg.nodes * j->per_node;
		f->submit_us = j->submitted_us;
		f->limit_ms = j->cfg.timeout_ms;
		f->prio = j->cfg.priority;
		/* a backend that places itself (Slurm) answers anew each step */
		f->wait_fp = s->backend->place ? NULL : &j->wait_fp;
		/* job_try_place() of a plain job reads its size and the pool alone */
		if (!s->backend->place && !j->cfg.node_include && !j->cfg.node_exclude &&
		    !j->cfg.labels.nr && !j->cfg.burn_in && !json_array_size(j->avoid) &&
		    !(j->attempt > 0 && j->cfg.elastic_min_nodes > 0))
			f->shape = 1 + ((unsigned long long)j->cfg.nodes << 32 |
					(unsigned long long)j->per_node << 1 | (j->gpu ? 1 : 0));
		fair_class(s, j, &f->preemptible, &f->cls_rank);
	}
	fair_running_build(s, &in->run, now);
	fair_usage_sync(s);
	in->totals[0] = pool_total(&in->cpu);
	in->totals[1] = pool_total(&in->gpu);
	fs_pass_prepare(&in->pass, s->cc ? &s->cc->fairshare : NULL, s->fair_usage, now, in->fj,
			in->n, in->run.v, in->run.nr, in->totals);
}

void fair_inputs_prepare(struct sched *s, struct fair_inputs *in)
{
	fair_inputs_pools(s, in);
	fair_inputs_rank(s, in);
}

void fair_inputs_release(struct fair_inputs *in)
{
	fs_pass_release(&in->pass);
	fair_running_release(&in->run);
	free(in->fj);
	free(in->gpu.n);
	free(in->cpu.n);
}

void fair_cache_free(struct sched *s)
{
	if (!s->fair_cache)
		return;
	free(s->fair_cache->reserved[0]);
	free(s->fair_cache->reserved[1]);
	free(s->fair_cache);
	s->fair_cache = NULL;
}

#define FAIR_FULL_NEW_MS 1000     /* new jobs get their place in the queue this soon */
#define FAIR_FULL_IDLE_MS 5000    /* the factors (age, decay) are refreshed this often */

/* Do quotas apply to j (then only the full pass, which counts them, places it)? */
static int fair_limited(const struct sched *s, const struct job *j)
{
	const struct fairshare_config *cfg = s->cc ? &s->cc->fairshare : NULL;

	for (int k = 0; k < 2; k++) {
		struct fs_limits l = fs_limits_of(cfg, k, k ? j->project : j->user);

		if (j->gpu ? l.max_gpus : l.max_slots)
			return 1;
	}
	return 0;
}

/*
 * Between full passes, with the pools as the last one left them: place the
 * jobs never tried, on the slots the reservations leave (or on them, when the
 * job's timeout ends before the reservation starts), as the full pass would
 * after the top job.  0, or -1 when a full pass is needed now.
 */
static int fair_place_new(struct sched *s, struct fair_inputs *in, const struct fair_cache *c,
			  size_t first)
{
	struct fair_ctx ctx = { s, { &in->cpu, &in->gpu } };
	struct place_node *masked[2] = { NULL, NULL };
	struct place_result *res = xmalloc(sizeof(*res));
	struct strbuf reason = STRBUF_INIT;
	long long now = dt_now_us();
	int ret = 0;

	for (size_t i = first; i < s->nr_live && !ret; i++) {
		struct job *j = s->live[i];
		int g = j->gpu ? 1 : 0;
		struct pool *p = ctx.pools[g];
		struct fs_job fj;
		enum place_status st;

		if (strcmp(j->state, DT_JOB_PENDING) || j->cancel || j->wait_fp)
			continue;
		if (fair_limited(s, j)) {
			ret = -1;
			break;
		}
		if (!masked[g]) {
			masked[g] = xmalloc((p->nr ? p->nr : 1) * sizeof(*masked[g]));
			memcpy(masked[g], p->n, p->nr * sizeof(*masked[g]));
			if (c->reserved[g])
				placement_commit(masked[g], c->reserved[g], c->per_node[g]);
		}
		memset(&fj, 0, sizeof(fj));
		fj.job = j;
		strbuf_reset(&reason);
		st = fair_try(&ctx, &fj, masked[g], p->nr, 0, res, &reason);
		if (st == PLACE_WAIT && c->reserved[g] && c->shadow_us[g] && j->cfg.timeout_ms > 0 &&
		    now + j->cfg.timeout_ms * 1000 <= c->shadow_us[g]) {
			struct strbuf r2 = STRBUF_INIT;

			if (fair_try(&ctx, &fj, p->n, p->nr, 0, res, &r2) == PLACE_OK)
				st = PLACE_OK;
			strbuf_release(&r2);
		}
		if (st == PLACE_OK) {
			placement_commit(masked[g], res, j->per_node);
			fair_start(&ctx, &fj, res);   /* marks p: the next step makes a full pass */
			continue;
		}
		if (!s->backend->place)   /* the same pool gives the same answer */
			j->wait_fp = pool_fingerprint(s, &(struct pool){ masked[g], p->nr, g });
		fair_wait(&ctx, &fj, reason.buf);
	}
	free(masked[0]);
	free(masked[1]);
	free(res);
	strbuf_release(&reason);
	return ret;
}

/*
 * What schedule_pending() needs of the queue, in c: any pending job, the
 * first never tried, any never ranked.  A walk of the whole queue (10,000
 * pending jobs: most of dtsched's CPU per submit, and per idle step) only
 * after a change other than new jobs (s->queue_gen); otherwise the jobs
 * appended since the last walk alone.  A backend that places itself (Slurm)
 * leaves its jobs untried: walked each time, as it answers anew each step.
 */
static void queue_scan(struct sched *s, struct fair_cache *c)
{
	size_t i = 0;

	if (c->scan_valid && c->scan_gen == s->queue_gen && c->scan_nr <= s->nr_live &&
	    !s->backend->place) {
		i = c->scan_nr;
	} else {
		c->any = c->untried = c->unranked = 0;
		c->first = 0;
		c->walks++;
	}
	for (; i < s->nr_live; i++) {
		const struct job *j = s->live[i];

		if (strcmp(j->state, DT_JOB_PENDING) || j->cancel)
			continue;
		c->any = 1;
		if (!j->wait_fp && !c->untried++)
			c->first = i;
		c->unranked |= !j->prio_pos;
	}
	c->scan_valid = 1;
	c->scan_gen = s->queue_gen;
	c->scan_nr = s->nr_live;
}

/*
 * Place pending jobs in priority order (fairshare.h: fair share, age, size,
 * priority: among a user's own jobs), within the quotas; the first that
 * waits gets a reservation and later ones backfill around it.  The full pass
 * sorts the whole queue: it runs when the pools changed (an attempt started
 * or ended, a node came or went, cluster.yaml changed), every second while
 * new jobs arrive and every 5 s otherwise; in between, the new jobs are
 * placed as the full pass would place them behind the top job, and a step
 * in which nothing changed costs the pools' fingerprints (O(nodes)), not a
 * walk of the queue (queue_scan).
 */
void schedule_pending(struct sched *s)
{
	static const struct fs_ops ops = { fair_try, fair_start, fair_wait, fair_fp, fair_preempt };
	struct fair_inputs in;
	struct fair_ctx ctx;
	struct fs_pool pools[2];
	struct fair_cache *c;
	unsigned long long fp[2];
	long long now_ms = dt_mono_ms();

	if (!s->fair_cache)
		s->fair_cache = xcalloc(1, sizeof(*s->fair_cache));
	c = s->fair_cache;
	queue_scan(s, c);
	if (!c->any)
		return;
	fair_inputs_pools(s, &in);
	fp[0] = pool_fingerprint(s, &in.cpu);
	fp[1] = pool_fingerprint(s, &in.gpu);
	if (c->at_ms && fp[0] == c->fp[0] && fp[1] == c->fp[1] &&
	    now_ms - c->at_ms < (c->unranked ? FAIR_FULL_NEW_MS : FAIR_FULL_IDLE_MS) &&
	    (!c->untried || !fair_place_new(s, &in, c, c->first))) {
		/* each one tried: placed (a transition: the queue is walked again) or
		 * waiting on this pool */
		if (!s->backend->place)
			c->untried = 0;
		free(in.gpu.n);
		free(in.cpu.n);
		return;
	}
	fair_inputs_rank(s, &in);
	ctx.s = s;
	ctx.pools[0] = &in.cpu;
	ctx.pools[1] = &in.gpu;
	pools[0] = (struct fs_pool){ in.cpu.n, in.cpu.nr, in.totals[0] };
	pools[1] = (struct fs_pool){ in.gpu.n, in.gpu.nr, in.totals[1] };
	fs_pass_place(&in.pass, pools, in.run.v, in.run.nr, &ops, &ctx);
	if (!s->backend->place)   /* a backend that places itself (Slurm) says nothing of when */
		fs_pass_estimate(&in.pass, pools, in.run.v, in.run.nr, &ops, &ctx);
	for (size_t i = 0; i < in.n; i++) {
		struct fs_job *f = &in.fj[i];
		struct job *j = f->job;

		if (strcmp(j->state, DT_JOB_PENDING))
			continue;
		j->prio = f->priority;
		j->f_fs = f->f_fs;
		j->f_age = f->f_age;
		j->f_size = f->f_size;
		j->prio_pos = f->position;
		j->prio_top = f->top;
		j->expected_start_us = f->expected_start_us;
		j->expected_unknown = f->expected_unknown;
		j->prio_guaranteed = f->guaranteed;
		j->floor_gpus = in.pass.projects[f->p].guaranteed_gpus;
		j->floor_in_use = in.pass.projects[f->p].gpus;
	}
	c->at_ms = now_ms;
	c->scan_valid = 0;   /* ranked, tried, waiting: walk the queue once more */
	c->fp[0] = pool_fingerprint(s, &in.cpu);
	c->fp[1] = pool_fingerprint(s, &in.gpu);
	for (int g = 0; g < 2; g++) {
		free(c->reserved[g]);
		c->reserved[g] = in.pass.reserved[g];
		in.pass.reserved[g] = NULL;
		c->per_node[g] = in.pass.reserved_per_node[g];
		c->shadow_us[g] = in.pass.shadow_us[g];
	}
	fair_inputs_release(&in);
}
