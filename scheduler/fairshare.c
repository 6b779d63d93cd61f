/*
 * fairshare.c - decayed usage, the multifactor priority, quotas and the
 * priority-ordered placement pass with EASY backfill (fairshare.h says what
 * and docs/fairshare.md why).  Pure: the caller gives the time, the pools
 * and what runs.
 */
#include "fairshare.h"
#include "units.h"
#include "usage.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ usage */

void fs_usage_init(struct fs_usage *u, long long half_life_ms)
{
	memset(u, 0, sizeof(*u));
	u->half_life_s = half_life_ms > 0 ? (double)half_life_ms / 1e3 : 7 * 24 * 3600.0;
}

void fs_usage_release(struct fs_usage *u)
{
	for (size_t i = 0; i < u->nr; i++)
		free(u->v[i].name);
	free(u->v);
	memset(u, 0, sizeof(*u));
}

/* 2^(-dt/half_life) for dt in microseconds */
static double decay(const struct fs_usage *u, long long dt_us)
{
	return exp2(-((double)dt_us / 1e6) / u->half_life_s);
}

double fs_decayed(const struct fs_usage *u, double gpus, long long start_us, long long end_us,
		  long long now_us)
{
	if (end_us <= start_us || gpus <= 0)
		return 0;
	/* the integral of gpus * 2^(-(now - t)/H) over [start, end] */
	return gpus * u->half_life_s / M_LN2 *
		(decay(u, now_us - end_us) - decay(u, now_us - start_us));
}

static struct fs_usage_ent *usage_ent(struct fs_usage *u, int project, const char *name)
{
	for (size_t i = 0; i < u->nr; i++)
		if (u->v[i].project == project && !strcmp(u->v[i].name, name))
			return &u->v[i];
	ALLOC_GROW(u->v, u->nr + 1, u->alloc);
	u->v[u->nr].name = xstrdup(name);
	u->v[u->nr].project = project;
	u->v[u->nr].v = 0;
	return &u->v[u->nr++];
}

void fs_usage_add(struct fs_usage *u, const char *user, const char *project, double gpus,
		  long long start_us, long long end_us)
{
	double add;

	if (end_us <= start_us || gpus <= 0 || !user)
		return;
	if (end_us > u->epoch_us) {
		/* a later epoch: what is kept decays to it */
		double f = u->epoch_us ? decay(u, end_us - u->epoch_us) : 1;

		for (size_t i = 0; i < u->nr; i++)
			u->v[i].v *= f;
		u->epoch_us = end_us;
	}
	add = fs_decayed(u, gpus, start_us, end_us, u->epoch_us);
	usage_ent(u, 0, user)->v += add;
	if (project)
		usage_ent(u, 1, project)->v += add;
}

double fs_usage_get(const struct fs_usage *u, int project, const char *name, long long now_us)
{
	for (size_t i = 0; u && i < u->nr; i++)
		if (u->v[i].project == project && !strcmp(u->v[i].name, name))
			return u->v[i].v * decay(u, now_us - u->epoch_us);
	return 0;
}

/* ------------------------------------------------------------ limits */

const char *fs_project_of(const struct fairshare_config *cfg, const char *user,
			  const char *project)
{
	const struct fs_entity *e;

	if (project && *project)
		return project;
	e = cfg ? fairshare_user(cfg, user) : NULL;
	return e && e->project ? e->project : user;
}

struct fs_limits fs_limits_of(const struct fairshare_config *cfg, int project, const char *name)
{
	const struct fs_entity *e;
	struct fs_limits none = { 0, 0, 0, 0 };

	if (!cfg)
		return none;
	e = project ? fairshare_project(cfg, name) : fairshare_user(cfg, name);
	if (e)
		return e->lim;
	return project ? none : cfg->user_default;
}

static const char *const kinds[2] = { "user", "project" };

int fs_check_submit(const struct fairshare_config *cfg, const char *user, const char *project,
		    int gpu, int size, long long *timeout_ms, int user_pending, int project_pending,
		    struct strbuf *err)
{
	const char *proj = fs_project_of(cfg, user, project);

	for (int k = 0; k < 2; k++) {
		const char *name = k ? proj : user;
		struct fs_limits l = fs_limits_of(cfg, k, name);
		int max = gpu ? l.max_gpus : l.max_slots;
		int pending = k ? project_pending : user_pending;

		if (max && size > max) {
			strbuf_addf(err, "the job needs %d %s at once, %s '%s' may use at most %d "
				    "(fairshare %s max_%s in cluster.yaml)", size,
				    gpu ? "GPUs" : "CPU slots", kinds[k], name, max, kinds[k],
				    gpu ? "gpus" : "slots");
			return -1;
		}
		if (l.max_pending && pending >= l.max_pending) {
			strbuf_addf(err, "%s '%s' has %d job(s) pending, the most max_pending allows: "
				    "wait for some to start, or cancel some", kinds[k], name, pending);
			return -1;
		}
		if (l.max_time_ms && *timeout_ms > l.max_time_ms) {
			struct strbuf a = STRBUF_INIT, b = STRBUF_INIT;

			format_duration(&a, *timeout_ms);
			format_duration(&b, l.max_time_ms);
			strbuf_addf(err, "the job's timeout %s is longer than %s '%s' may run a job "
				    "(max_time %s): give it 'timeout: %s' or less", a.buf, kinds[k],
				    name, b.buf, b.buf);
			strbuf_release(&a);
			strbuf_release(&b);
			return -1;
		}
		if (l.max_time_ms && !*timeout_ms)
			*timeout_ms = l.max_time_ms;
	}
	return 0;
}

/* ------------------------------------------------------------ the pass */

/* names to indices into a pass's users or projects: open addressing, index + 1 */
struct name_index {
	int *slot;
	size_t cap;
};

static unsigned long long name_hash(const char *s)
{
	unsigned long long h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static void index_put(struct name_index *ix, const char *name, int i)
{
	size_t h = (size_t)name_hash(name) & (ix->cap - 1);

	while (ix->slot[h])
		h = (h + 1) & (ix->cap - 1);
	ix->slot[h] = i + 1;
}

static size_t acct_find(struct fs_acct **v, size_t *nr, size_t *alloc, struct name_index *ix,
			const char *name)
{
	size_t h;

	if (!ix->slot || ix->cap < 2 * (*nr + 1)) {
		free(ix->slot);
		ix->cap = ix->cap ? ix->cap * 4 : 64;
		ix->slot = xcalloc(ix->cap, sizeof(*ix->slot));
		for (size_t i = 0; i < *nr; i++)
			index_put(ix, (*v)[i].name, (int)i);
	}
	for (h = (size_t)name_hash(name) & (ix->cap - 1); ix->slot[h]; h = (h + 1) & (ix->cap - 1))
		if (!strcmp((*v)[ix->slot[h] - 1].name, name))
			return (size_t)ix->slot[h] - 1;
	ALLOC_GROW(*v, *nr + 1, *alloc);
	memset(&(*v)[*nr], 0, sizeof(**v));
	(*v)[*nr].name = name;
	(*v)[*nr].project = -1;
	ix->slot[h] = (int)*nr + 1;
	return (*nr)++;
}

struct pass_build {
	struct fs_pass *p;
	size_t alloc_u, alloc_p;
	struct name_index iu, ip;
	const char *last_user;
	size_t last_u;
};

static size_t project_of(struct pass_build *b, const char *name)
{
	return acct_find(&b->p->projects, &b->p->nr_projects, &b->alloc_p, &b->ip, name);
}

/* the index of user `name` (added with its default project when new) */
static size_t user_of(struct pass_build *b, const char *name)
{
	struct fs_pass *p = b->p;
	size_t u;

	if (!name)
		name = "";
	if (b->last_user && !strcmp(b->last_user, name))
		return b->last_u;
	u = acct_find(&p->users, &p->nr_users, &b->alloc_u, &b->iu, name);
	if (p->users[u].project < 0)
		p->users[u].project = (int)project_of(b, fs_project_of(p->cfg, p->users[u].name,
									NULL));
	b->last_user = p->users[u].name;
	b->last_u = u;
	return u;
}

static int by_user_then_priority(const void *a, const void *b)
{
	const struct fs_job *x = *(struct fs_job *const *)a, *y = *(struct fs_job *const *)b;

	if (x->u != y->u)
		return x->u < y->u ? -1 : 1;
	if (x->priority != y->priority)
		return x->priority > y->priority ? -1 : 1;
	return x->submit_us < y->submit_us ? -1 : x->submit_us > y->submit_us;
}

static int by_user_then_prio(const void *a, const void *b)
{
	const struct fs_job *x = *(struct fs_job *const *)a, *y = *(struct fs_job *const *)b;

	if (x->u != y->u)
		return x->u < y->u ? -1 : 1;
	if (x->prio != y->prio)
		return x->prio > y->prio ? -1 : 1;
	return x->submit_us < y->submit_us ? -1 : x->submit_us > y->submit_us;
}

struct order_key {
	int cls;                  /* non-preemptible first, then the class's priority */
	double priority;
	long long submit_us;
	size_t i;
};

static int by_key(const void *a, const void *b)
{
	const struct order_key *x = a, *y = b;

	if (x->cls != y->cls)
		return x->cls > y->cls ? -1 : 1;
	if (x->priority != y->priority)
		return x->priority > y->priority ? -1 : 1;
	if (x->submit_us != y->submit_us)
		return x->submit_us < y->submit_us ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;   /* the caller's order */
}

static void shares(struct fs_pass *p)
{
	double total_p = 0;
	double *in_p = xcalloc(p->nr_projects ? p->nr_projects : 1, sizeof(double));

	for (size_t i = 0; i < p->nr_users; i++) {
		const struct fs_entity *e = p->cfg ? fairshare_user(p->cfg, p->users[i].name) : NULL;

		p->users[i].share = e ? e->share : 1;
		in_p[p->users[i].project] += p->users[i].share;
	}
	for (size_t i = 0; i < p->nr_projects; i++) {
		const struct fs_entity *e = p->cfg ? fairshare_project(p->cfg,
								      p->projects[i].name) : NULL;

		p->projects[i].share = e && e->has_share ? e->share : in_p[i] > 0 ? in_p[i] : 1;
		total_p += p->projects[i].share;
	}
	for (size_t i = 0; i < p->nr_projects; i++)
		p->projects[i].norm_share = p->projects[i].share / total_p;
	for (size_t i = 0; i < p->nr_users; i++) {
		struct fs_acct *a = &p->users[i];

		a->norm_share = p->projects[a->project].norm_share * a->share / in_p[a->project];
	}
	free(in_p);
}

void fs_pass_prepare(struct fs_pass *p, const struct fairshare_config *cfg,
		     const struct fs_usage *usage, long long now_us, struct fs_job *jobs,
		     size_t nr, const struct fs_running *run, size_t nr_run, const int totals[2])
{
	struct pass_build b;
	long long max_age_us = (cfg ? cfg->max_age_ms : 7LL * 24 * 3600 * 1000) * 1000;
	double w_fs = cfg ? cfg->w_fairshare : 10000, w_age = cfg ? cfg->w_age : 1000;
	double w_size = cfg ? cfg->w_size : 100;
	struct fs_job **tmp;
	int any_prio = 0;

	memset(p, 0, sizeof(*p));
	memset(&b, 0, sizeof(b));
	b.p = p;
	p->cfg = cfg;
	p->now_us = now_us;
	for (size_t i = 0; cfg && i < cfg->nr_users; i++)
		user_of(&b, cfg->users[i].name);
	for (size_t i = 0; cfg && i < cfg->nr_projects; i++)
		project_of(&b, cfg->projects[i].name);
	for (size_t i = 0; usage && i < usage->nr; i++)
		if (!usage->v[i].project)
			user_of(&b, usage->v[i].name);
	for (size_t i = 0; i < nr_run; i++) {
		/* the index first: user_of() and project_of() may move the arrays */
		size_t ui = user_of(&b, run[i].user);
		size_t pi = run[i].project && *run[i].project ? project_of(&b, run[i].project) :
			(size_t)p->users[ui].project;
		struct fs_acct *u = &p->users[ui], *pr = &p->projects[pi];

		if (run[i].gpu) {
			u->gpus += run[i].size;
			pr->gpus += run[i].size;
			if (usage)
				u->usage += fs_decayed(usage, run[i].size, run[i].start_us, now_us,
						       now_us);
		} else {
			u->slots += run[i].size;
			pr->slots += run[i].size;
		}
	}
	for (size_t i = 0; i < nr; i++) {
		struct fs_job *j = &jobs[i];

		j->u = (int)user_of(&b, j->user);
		j->p = j->project && *j->project ? (int)project_of(&b, j->project) :
			p->users[j->u].project;
		p->users[j->u].pending++;
		p->projects[j->p].pending++;
	}
	/* pointers into p->users are stable from here: nothing is added */
	for (size_t i = 0; i < p->nr_users; i++) {
		p->users[i].usage += fs_usage_get(usage, 0, p->users[i].name, now_us);
		p->users[i].lim = fs_limits_of(cfg, 0, p->users[i].name);
		p->total_usage += p->users[i].usage;
	}
	for (size_t i = 0; i < p->nr_projects; i++) {
		p->projects[i].usage = fs_usage_get(usage, 1, p->projects[i].name, now_us);
		p->projects[i].lim = fs_limits_of(cfg, 1, p->projects[i].name);
	}
	shares(p);
	for (size_t i = 0; i < p->nr_users; i++) {
		struct fs_acct *a = &p->users[i];
		double un = p->total_usage > 0 ? a->usage / p->total_usage : 0;

		a->factor = exp2(-un / a->norm_share);
	}
	for (size_t i = 0; i < p->nr_projects; i++) {
		struct fs_acct *a = &p->projects[i];
		double un = p->total_usage > 0 ? a->usage / p->total_usage : 0;

		a->factor = exp2(-un / a->norm_share);
	}

	p->nr = nr;
	p->order = xmalloc((nr ? nr : 1) * sizeof(*p->order));
	tmp = xmalloc((nr ? nr : 1) * sizeof(*tmp));
	for (size_t i = 0; i < nr; i++) {
		struct fs_job *j = &jobs[i];
		long long age = now_us - j->submit_us;
		int total = totals[j->gpu ? 1 : 0];

		j->f_fs = p->users[j->u].factor;
		j->f_age = age <= 0 ? 0 : age >= max_age_us ? 1 : (double)age / (double)max_age_us;
		j->f_size = total > 0 ? (j->size >= total ? 1 : (double)j->size / total) : 0;
		j->priority = w_fs * j->f_fs + w_age * j->f_age + w_size * j->f_size;
		j->expected_start_us = 0;
		j->top = 0;
		p->order[i] = tmp[i] = j;
	}
	/*
	 * priority: orders only among a user's own jobs: the user's jobs keep the
	 * set of priorities the factors gave them, handed out in priority: order
	 * (only when some job has one: two sorts of the queue otherwise saved)
	 */
	for (size_t i = 0; i < nr && !any_prio; i++)
		any_prio = jobs[i].prio != 0;
	if (any_prio) {
		double *pr = xmalloc((nr ? nr : 1) * sizeof(double));

		qsort(p->order, nr, sizeof(*p->order), by_user_then_priority);
		qsort(tmp, nr, sizeof(*tmp), by_user_then_prio);
		for (size_t i = 0; i < nr; i++)
			pr[i] = p->order[i]->priority;
		for (size_t i = 0; i < nr; i++)
			tmp[i]->priority = pr[i];
		free(pr);
	}
	free(tmp);
	{
		/* the queue's order on flat keys: no pointer chasing in the comparisons */
		struct order_key *k = xmalloc((nr ? nr : 1) * sizeof(*k));

		for (size_t i = 0; i < nr; i++) {
			k[i].cls = (jobs[i].preemptible ? 0 : 1 << 16) + jobs[i].cls_rank;
			k[i].priority = jobs[i].priority;
			k[i].submit_us = jobs[i].submit_us;
			k[i].i = i;
		}
		qsort(k, nr, sizeof(*k), by_key);
		for (size_t i = 0; i < nr; i++)
			p->order[i] = &jobs[k[i].i];
		free(k);
	}
	free(b.iu.slot);
	free(b.ip.slot);
	for (size_t i = 0; i < nr; i++)
		p->order[i]->position = (int)i + 1;
}

void fs_pass_release(struct fs_pass *p)
{
	free(p->reserved[0]);
	free(p->reserved[1]);
	free(p->users);
	free(p->projects);
	free(p->order);
	memset(p, 0, sizeof(*p));
}

/* Does j fit the quotas of its user and project?  0, or 1 with why. */
static int over_quota(const struct fs_pass *p, const struct fs_job *j, struct strbuf *why)
{
	const struct fs_acct *a[2] = { &p->users[j->u], &p->projects[j->p] };

	for (int k = 0; k < 2; k++) {
		int max = j->gpu ? a[k]->lim.max_gpus : a[k]->lim.max_slots;
		int used = j->gpu ? a[k]->gpus : a[k]->slots;

		if (max && used + j->size > max) {
			strbuf_addf(why, "quota: %s '%s' has %d of max_%s %d %s in use, this job "
				    "needs %d", kinds[k], a[k]->name, used, j->gpu ? "gpus" : "slots",
				    max, j->gpu ? "GPUs" : "CPU slots", j->size);
			return 1;
		}
	}
	return 0;
}

/* a shape's try on a pool (fs_job.shape), and what it gave: a queue of
 * 10,000 jobs of a few shapes is tried a few times per pool, not 10,000 */
#define SHAPE_MEMO 16
struct shape_try {
	unsigned long long shape, fp;
	enum place_status st;
	struct strbuf reason;
};

struct pool_state {
	struct place_node *masked;    /* the pool with the reservation's slots taken, or NULL */
	struct place_result *res;     /* those slots */
	long long shadow_us;          /* when the reservation frees (0: unknown) */
	unsigned long long fp;
	struct fs_job *top;
	struct shape_try memo[SHAPE_MEMO];   /* by shape % SHAPE_MEMO */
};

static void mark(struct place_node *n, const struct place_result *res, int per_node, int used)
{
	for (int k = 0; k < res->nr; k++)
		for (int x = 0; x < per_node; x++)
			n[res->node[k]].used[res->slots[k][x]] = (unsigned char)used;
}

static int by_end(const void *a, const void *b)
{
	const struct fs_running *x = *(const struct fs_running *const *)a;
	const struct fs_running *y = *(const struct fs_running *const *)b;
	long long ex = x->end_us ? x->end_us : LLONG_MAX, ey = y->end_us ? y->end_us : LLONG_MAX;

	return ex < ey ? -1 : ex > ey;
}

static void release_run(struct place_node *n, size_t nr, const struct fs_running *r, int used)
{
	for (int k = 0; k < r->nr; k++) {
		if (r->node[k] < 0 || (size_t)r->node[k] >= nr)
			continue;
		for (int x = 0; x < r->nslots[k]; x++)
			if (r->slot[k][x] >= 0 && r->slot[k][x] < PLACE_MAX_SLOTS)
				n[r->node[k]].used[r->slot[k][x]] = (unsigned char)used;
	}
}

/*
 * The reservation of j, the first job of its pool that waits: release the
 * running attempts in the order they end until j fits.  1 with the slots
 * taken in ps->masked and when in ps->shadow_us (0: an attempt without a
 * timeout must end first), 0 when it fits nowhere even then.
 */
static int reserve(const struct fs_ops *ops, void *ctx, struct fs_job *j, struct fs_pool *pool,
		   const struct fs_running *run, size_t nr_run, struct pool_state *ps)
{
	struct place_node *shadow = xmalloc((pool->nr ? pool->nr : 1) * sizeof(*shadow));
	const struct fs_running **v = xmalloc((nr_run ? nr_run : 1) * sizeof(*v));
	struct place_result *res = xmalloc(sizeof(*res));
	struct strbuf why = STRBUF_INIT;
	size_t n = 0;
	int found = 0;
	long long when = 0;

	memcpy(shadow, pool->n, pool->nr * sizeof(*shadow));
	for (size_t i = 0; i < nr_run; i++)
		if (run[i].gpu == j->gpu)
			v[n++] = &run[i];
	qsort(v, n, sizeof(*v), by_end);
	for (size_t i = 0; i < n && !found; i++) {
		release_run(shadow, pool->nr, v[i], 0);
		when = v[i]->end_us;
		/* attempts that end at the same time (or all those of unknown end) free together */
		if (i + 1 < n && v[i + 1]->end_us == when)
			continue;
		strbuf_reset(&why);
		found = ops->try_place(ctx, j, shadow, pool->nr, 1, res, &why) == PLACE_OK;
	}
	if (found) {
		ps->masked = xmalloc((pool->nr ? pool->nr : 1) * sizeof(*ps->masked));
		memcpy(ps->masked, pool->n, pool->nr * sizeof(*ps->masked));
		mark(ps->masked, res, j->per_node, 1);
		ps->res = xmalloc(sizeof(*ps->res));
		memcpy(ps->res, res, sizeof(*res));
		ps->shadow_us = when;
		ps->top = j;
		j->top = 1;
		j->expected_start_us = when;
	}
	strbuf_release(&why);
	free(res);
	free(v);
	free(shadow);
	return found;
}

static int by_start_desc(const void *a, const void *b)
{
	const struct fs_running *x = *(const struct fs_running *const *)a;
	const struct fs_running *y = *(const struct fs_running *const *)b;

	return x->start_us > y->start_us ? -1 : x->start_us < y->start_us;
}

/* the fair-share factor of user `name` in this pass (1: unknown, no usage) */
static double factor_of(const struct fs_pass *p, const char *name)
{
	for (size_t i = 0; i < p->nr_users; i++)
		if (!strcmp(p->users[i].name, name))
			return p->users[i].factor;
	return 1;
}

/*
 * May j preempt r?  1: r is preemptible and of a lower class (any
 * preemptible one when j is not); 2: fairshare.preempt_over_share, j (not
 * preemptible) is of an under-share user (factor above 0.5), r of another
 * user over their share (below 0.5), of no higher class, and r has run
 * preempt_min_run (unless it is being preempted already); 0: no.
 */
static int victim_kind(const struct fs_pass *p, const struct fs_job *j, double j_factor,
		       const struct fs_running *r)
{
	if (r->gpu != j->gpu || !r->job)
		return 0;
	if (r->preemptible && !(j->preemptible && r->cls_rank >= j->cls_rank))
		return 1;
	if (!p->cfg || !p->cfg->preempt_over_share || j->preemptible || !(j_factor > 0.5) ||
	    r->cls_rank > j->cls_rank || !strcmp(r->user, j->user))
		return 0;
	if (!r->preempting && p->now_us - r->start_us < p->cfg->preempt_min_run_ms * 1000)
		return 0;
	return factor_of(p, r->user) < 0.5 ? 2 : 0;
}

/*
 * j, its pool's top job, waits: free the slots it needs by preempting
 * running preemptible jobs of a lower class (all preemptible ones when j is
 * not), then over-share work (victim_kind), the fewest needed, youngest
 * first (the least work lost).
 */
static void try_preempt(const struct fs_pass *p, const struct fs_ops *ops, void *ctx,
			struct fs_job *j, struct fs_pool *pool, const struct fs_running *run,
			size_t nr_run)
{
	struct place_node *shadow = xmalloc((pool->nr ? pool->nr : 1) * sizeof(*shadow));
	const struct fs_running **v = xmalloc((nr_run ? nr_run : 1) * sizeof(*v));
	struct place_result *res = xmalloc(sizeof(*res));
	struct strbuf why = STRBUF_INIT;
	double jf = p->users[j->u].factor;
	size_t n = 0, n1 = 0, i;
	int fits = 0;

	memcpy(shadow, pool->n, pool->nr * sizeof(*shadow));
	/* the preemptible class's first, then the over-share ones */
	for (int kind = 1; kind <= 2; kind++) {
		if (kind == 2)
			n1 = n;
		for (i = 0; i < nr_run; i++) {
			const struct fs_running *r = &run[i];

			if (victim_kind(p, j, jf, r) != kind)
				continue;
			if (r->preempting)
				release_run(shadow, pool->nr, r, 0);   /* its slots free soon anyway */
			else
				v[n++] = r;
		}
	}
	if (ops->try_place(ctx, j, shadow, pool->nr, 1, res, &why) == PLACE_OK)
		goto out;   /* those being preempted make room: wait for them */
	qsort(v, n1, sizeof(*v), by_start_desc);
	qsort(v + n1, n - n1, sizeof(*v), by_start_desc);
	for (i = 0; i < n && !fits; i++) {
		release_run(shadow, pool->nr, v[i], 0);
		strbuf_reset(&why);
		fits = ops->try_place(ctx, j, shadow, pool->nr, 1, res, &why) == PLACE_OK;
	}
	if (!fits)
		goto out;
	n = i;
	/* the fewest: give back, last first, each victim j fits without */
	for (i = n; i-- > 0;) {
		release_run(shadow, pool->nr, v[i], 1);
		strbuf_reset(&why);
		if (ops->try_place(ctx, j, shadow, pool->nr, 1, res, &why) == PLACE_OK)
			v[i] = NULL;
		else
			release_run(shadow, pool->nr, v[i], 0);
	}
	for (i = 0; i < n; i++)
		if (v[i])
			ops->preempt(ctx, v[i], j);
out:
	strbuf_release(&why);
	free(res);
	free(v);
	free(shadow);
}

int fs_pass_place(struct fs_pass *p, struct fs_pool pools[2], const struct fs_running *run,
		  size_t nr_run, const struct fs_ops *ops, void *ctx)
{
	struct pool_state ps[2];
	struct place_result *res = xmalloc(sizeof(*res));
	struct strbuf reason = STRBUF_INIT;
	int started = 0;

	memset(ps, 0, sizeof(ps));
	for (int g = 0; g < 2; g++)
		for (int k = 0; k < SHAPE_MEMO; k++)
			strbuf_init(&ps[g].memo[k].reason, 0);
	for (int g = 0; g < 2; g++)
		ps[g].fp = ops->fingerprint ? ops->fingerprint(ctx, g, pools[g].n, pools[g].nr) : 0;
	for (size_t i = 0; i < p->nr; i++) {
		struct fs_job *j = p->order[i];
		int g = j->gpu ? 1 : 0;
		struct pool_state *s = &ps[g];
		struct place_node *cur = s->masked ? s->masked : pools[g].n;
		struct shape_try *m;
		enum place_status st;
		int per_node;

		strbuf_reset(&reason);
		if (over_quota(p, j, &reason)) {
			ops->wait(ctx, j, reason.buf);
			continue;
		}
		m = &s->memo[j->shape % SHAPE_MEMO];
		if (s->fp && j->wait_fp && *j->wait_fp == s->fp) {
			st = PLACE_WAIT;   /* it waited on this very pool: it would again */
		} else {
			if (s->fp && j->shape && m->shape == j->shape && m->fp == s->fp) {
				st = m->st;   /* its shape did not fit this very pool */
				strbuf_addbuf(&reason, &m->reason);
			} else {
				st = ops->try_place(ctx, j, cur, pools[g].nr, 0, res, &reason);
				if (st != PLACE_OK && s->fp && j->shape) {
					m->shape = j->shape;
					m->fp = s->fp;
					m->st = st;
					strbuf_reset(&m->reason);
					strbuf_addbuf(&m->reason, &reason);
				}
			}
			if (st == PLACE_WAIT && s->masked && s->shadow_us && j->limit_ms > 0 &&
			    p->now_us + j->limit_ms * 1000 <= s->shadow_us) {
				/* it ends before the reservation starts: the reserved slots too */
				struct strbuf r2 = STRBUF_INIT;

				if (ops->try_place(ctx, j, pools[g].n, pools[g].nr, 0, res,
						   &r2) == PLACE_OK)
					st = PLACE_OK;
				strbuf_release(&r2);
			}
			if (st != PLACE_OK && j->wait_fp)
				*j->wait_fp = s->fp;
		}
		if (st == PLACE_OK) {
			per_node = j->per_node;
			mark(pools[g].n, res, per_node, 1);
			if (s->masked)
				mark(s->masked, res, per_node, 1);
			if (g) {
				p->users[j->u].gpus += j->size;
				p->projects[j->p].gpus += j->size;
			} else {
				p->users[j->u].slots += j->size;
				p->projects[j->p].slots += j->size;
			}
			ops->start(ctx, j, res);
			started++;
			if (ops->fingerprint)
				s->fp = ops->fingerprint(ctx, g, s->masked ? s->masked :
							 pools[g].n, pools[g].nr);
			continue;
		}
		if (reason.len)
			ops->wait(ctx, j, reason.buf);
		if (st == PLACE_WAIT && !s->top && reserve(ops, ctx, j, &pools[g], run, nr_run, s)) {
			if (ops->fingerprint)
				s->fp = ops->fingerprint(ctx, g, s->masked, pools[g].nr);
			if (ops->preempt)
				try_preempt(p, ops, ctx, j, &pools[g], run, nr_run);
		}
	}
	for (int g = 0; g < 2; g++) {
		for (int k = 0; k < SHAPE_MEMO; k++)
			strbuf_release(&ps[g].memo[k].reason);
		free(ps[g].masked);
		free(p->reserved[g]);
		p->reserved[g] = ps[g].res;   /* the caller's until fs_pass_release() */
		p->reserved_per_node[g] = ps[g].top ? ps[g].top->per_node : 0;
		p->shadow_us[g] = ps[g].shadow_us;
	}
	free(res);
	strbuf_release(&reason);
	return started;
}
