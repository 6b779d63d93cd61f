/*
 * hang.c - hang attribution (see hang.h): the summary, the collection from
 * the agents and POST /v1/jobs/<id>/debug.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "hang.h"
#include "jobs-int.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "safefile.h"
#include "strbuf.h"
#include "usage.h"
#include "users.h"

#define HANG_SAMPLE_MS 1000
#define HANG_AGENT_TIMEOUT_MS 15000
#define IDLE_CPU_PCT 5.0      /* a rank below this while the others spin is idle */
#define SPIN_CPU_PCT 10.0      /* the others' median: a loaded node gives spinners less */
#define SLOW_MIN_MS 1000
#define HANG_RETRY_MIN_MS 15000      /* a slow rank made the others wait at least this much more */

/* ------------------------------------------------------------ summary */

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* "rank 3" / "ranks 0-2,5" of the ranks v[0..n) (sorted here). */
static void add_ranks(struct strbuf *sb, int *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_int);
	strbuf_addstr(sb, n == 1 ? "rank " : "ranks ");
	for (size_t i = 0; i < n;) {
		size_t k = i;

		while (k + 1 < n && v[k + 1] == v[k] + 1)
			k++;
		strbuf_addf(sb, "%s%d", i ? "," : "", v[i]);
		if (k > i)
			strbuf_addf(sb, "%s%d", k == i + 1 ? "," : "-", v[k]);
		i = k + 1;
	}
}

static const char *rstr(const json_t *r, const char *key)
{
	return json_get_str(r, key, "");
}

static double rcpu(const json_t *r)
{
	return json_number_value(json_object_get(r, "cpu_pct"));
}

/* "all-reduce #12" (dttrain), or the phase as the agent named it */
static void add_where(struct strbuf *sb, const json_t *r)
{
	const char *ph = rstr(r, "phase");
	long long seq = json_get_int(r, "seq", -1);

	strbuf_addstr(sb, *ph ? ph : "an unknown phase");
	if (seq >= 0 && json_is_true(json_object_get(r, "in_collective")))
		strbuf_addf(sb, " #%lld", seq);
}

/* The same group: same phase and collective number. */
static int same_place(const json_t *a, const json_t *b)
{
	return !strcmp(rstr(a, "phase"), rstr(b, "phase")) &&
	       json_get_int(a, "seq", -1) == json_get_int(b, "seq", -1) &&
	       json_is_true(json_object_get(a, "in_collective")) ==
	       json_is_true(json_object_get(b, "in_collective"));
}

static json_t *culprit(const json_t *r, const char *why)
{
	struct strbuf d = STRBUF_INIT;
	long long step = json_get_int(r, "step", -1);
	const char *wchan = rstr(r, "wchan"), *state = rstr(r, "state");
	json_t *frames = json_object_get(r, "frames"), *o;

	strbuf_addf(&d, "rank %lld on node %s is in ", json_get_int(r, "rank", -1), rstr(r, "node"));
	add_where(&d, r);
	strbuf_addf(&d, " (%s", why);
	if (step >= 0)
		strbuf_addf(&d, "; step %lld", step);
	strbuf_addf(&d, "; %.0f%% CPU", rcpu(r));
	for (size_t i = 0; i < json_array_size(json_object_get(r, "gpus")); i++) {
		const json_t *g = json_array_get(json_object_get(r, "gpus"), i);

		strbuf_addf(&d, ", GPU %lld %lld%%", json_get_int(g, "index", -1),
			    json_get_int(g, "utilization", 0));
	}
	strbuf_addf(&d, ", state %s%s%s)", state, *wchan ? " in " : "", wchan);
	if (json_array_size(frames)) {
		strbuf_addstr(&d, "; stack: ");
		for (size_t i = 0; i < json_array_size(frames) && i < 3; i++)
			strbuf_addf(&d, "%s%s", i ? " < " : "",
				    json_string_value(json_array_get(frames, i)));
	}
	o = json_pack("{s:I,s:s,s:O,s:s,s:s,s:O}", "rank", json_get_int(r, "rank", -1),
		      "node", rstr(r, "node"), "pid", json_object_get(r, "pid") ?
		      json_object_get(r, "pid") : json_null(), "phase", rstr(r, "phase"),
		      "why", d.buf, "frames", frames ? frames : json_null());
	strbuf_release(&d);
	return o;
}

/* ranks of arr whose flag is set, as text */
static void add_group(struct strbuf *sb, const json_t *ranks, const char *mark)
{
	size_t n = json_array_size(ranks), k = 0, i;
	int *v = xcalloc(n ? n : 1, sizeof(int));
	json_t *r;

	json_array_foreach(ranks, i, r)
		if (mark[i])
			v[k++] = (int)json_get_int(r, "rank", -1);
	add_ranks(sb, v, k);
	free(v);
}

static double median(double *v, size_t n)
{
	for (size_t i = 1; i < n; i++)
		for (size_t k = i; k > 0 && v[k - 1] > v[k]; k--) {
			double t = v[k];

			v[k] = v[k - 1];
			v[k - 1] = t;
		}
	return n ? (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : 0;
}

/* Ranks that progress: the ones the others wait for (least time blocked). */
static json_t *slow_summary(const json_t *ranks, struct strbuf *text)
{
	size_t n = json_array_size(ranks), i, nr_slow = 0;
	char *slow = xcalloc(n ? n : 1, 1);
	double *w = xcalloc(n ? n : 1, sizeof(double));
	json_t *r, *culprits = json_array();
	long long lo = -1, hi = -1;

	json_array_foreach(ranks, i, r) {
		long long s = json_get_int(r, "step", -1), wi = json_get_int(r, "wait_ms", -1);
		double med;
		size_t k = 0, m;
		json_t *o;

		if (s >= 0 && (lo < 0 || s < lo))
			lo = s;
		if (s > hi)
			hi = s;
		if (wi < 0)
			continue;
		json_array_foreach(ranks, m, o)
			if (m != i && json_get_int(o, "wait_ms", -1) >= 0)
				w[k++] = (double)json_get_int(o, "wait_ms", -1);
		med = median(w, k);
		if (k && wi * 2 < med && med - wi >= SLOW_MIN_MS) {
			slow[i] = 1;
			nr_slow++;
		}
	}
	strbuf_addstr(text, "no hang: ranks progress");
	if (lo >= 0)
		strbuf_addf(text, lo == hi ? " (step %lld)" : " (steps %lld-%lld)", lo, hi);
	json_array_foreach(ranks, i, r) {
		struct strbuf why = STRBUF_INIT;
		double med;
		size_t k = 0, m;
		json_t *o;

		if (!slow[i])
			continue;
		json_array_foreach(ranks, m, o)
			if (m != i && json_get_int(o, "wait_ms", -1) >= 0)
				w[k++] = (double)json_get_int(o, "wait_ms", -1);
		med = median(w, k);
		strbuf_addf(&why, "slow: the others waited %.1f s for collectives, it %.1f s",
			    med / 1000, json_get_int(r, "wait_ms", 0) / 1000.0);
		json_array_append_new(culprits, culprit(r, why.buf));
		strbuf_addf(text, "; rank %lld on node %s is slow (the others waited %.1f s in "
			    "collectives, it %.1f s)", json_get_int(r, "rank", -1), rstr(r, "node"),
			    med / 1000, json_get_int(r, "wait_ms", 0) / 1000.0);
		strbuf_release(&why);
	}
	free(slow);
	free(w);
	return json_pack("{s:s,s:o}", "verdict", nr_slow ? "slow" : "progressing", "culprits",
			 culprits);
}

static size_t first_marked(const char *mark, size_t n)
{
	size_t i = 0;

	while (i < n && !mark[i])
		i++;
	return i;
}

/* The distinct places of the marked ranks: "all-reduce #16, scalar-sum #17". */
static void add_places(struct strbuf *sb, const json_t *ranks, const char *mark)
{
	size_t i, m;
	json_t *r, *o;

	json_array_foreach(ranks, i, r) {
		int seen = 0;

		if (!mark[i])
			continue;
		json_array_foreach(ranks, m, o)
			if (m < i && mark[m] && same_place(r, o))
				seen = 1;
		if (seen)
			continue;
		if (json_array_size(ranks) && i != first_marked(mark, json_array_size(ranks)))
			strbuf_addstr(sb, ", ");
		add_where(sb, r);
	}
}

/* A minority of ranks at a lower collective number than the rest. */
static size_t mark_behind(const json_t *ranks, char *odd)
{
	size_t n = json_array_size(ranks), i, k = 0;
	long long min_seq = -1, max_seq = -1;
	json_t *r;

	json_array_foreach(ranks, i, r) {
		long long s = json_get_int(r, "seq", -1);

		if (min_seq < 0 || s < min_seq)
			min_seq = s;
		if (s > max_seq)
			max_seq = s;
	}
	if (min_seq == max_seq)
		return 0;
	json_array_foreach(ranks, i, r)
		k += json_get_int(r, "seq", -1) == min_seq;
	if (k * 2 > n)
		return 0;
	json_array_foreach(ranks, i, r)
		odd[i] = json_get_int(r, "seq", -1) == min_seq;
	return k;
}

/* Everyone outside the largest group of one place, when that group is a majority. */
static size_t mark_minority(const json_t *ranks, char *odd)
{
	size_t n = json_array_size(ranks), i, best = 0, best_n = 0, k = 0;
	json_t *r;

	json_array_foreach(ranks, i, r) {
		size_t cnt = 0, m;
		json_t *o;

		json_array_foreach(ranks, m, o)
			cnt += same_place(r, o);
		if (cnt > best_n) {
			best_n = cnt;
			best = i;
		}
	}
	if (best_n == n || best_n * 2 <= n)
		return 0;
	json_array_foreach(ranks, i, r) {
		odd[i] = !same_place(json_array_get(ranks, best), r);
		k += odd[i];
	}
	return k;
}

/* Ranks idle (asleep, ~0 % CPU) while the others spin (busy-polling MPI). */
static size_t mark_idle(const json_t *ranks, char *odd)
{
	size_t n = json_array_size(ranks), i, k = 0;
	double *c = xcalloc(n ? n : 1, sizeof(double));
	json_t *r;

	json_array_foreach(ranks, i, r) {
		size_t nc = 0, m;
		const char *st = rstr(r, "state");
		json_t *o;

		json_array_foreach(ranks, m, o)
			if (m != i)
				c[nc++] = rcpu(o);
		odd[i] = nc && rcpu(r) < IDLE_CPU_PCT && (!strcmp(st, "S") || !strcmp(st, "D")) &&
			 median(c, nc) >= SPIN_CPU_PCT;
		k += odd[i];
	}
	free(c);
	if (k * 2 > n) {
		memset(odd, 0, n);
		k = 0;
	}
	return k;
}

/* The odd ones out when every rank is in a collective (or none is); why. */
static const char *mark_all_in(const json_t *ranks, char *odd, int seqs)
{
	static const char idle[] = "idle while the others spin";

	if (seqs) {
		if (mark_idle(ranks, odd))
			return idle;
		if (mark_behind(ranks, odd))
			return "behind: the others have gone on to a later collective";
		return "";
	}
	if (mark_minority(ranks, odd))
		return "not where the others are";
	return mark_idle(ranks, odd) ? idle : "";
}

json_t *hang_summarise(const json_t *ranks)
{
	size_t n = json_array_size(ranks), i, nr_in = 0, nr_odd = 0;
	struct strbuf text = STRBUF_INIT;
	char *odd = xcalloc(n ? n : 1, 1), *rest = xcalloc(n ? n : 1, 1);
	json_t *r, *culprits = json_array(), *out;
	const json_t *wait_at = NULL;
	const char *why = "";

	if (!n) {
		out = json_pack("{s:s,s:s,s:o}", "verdict", "unknown", "text",
				"no rank process found (is the job running?)", "culprits", culprits);
		goto done;
	}
	json_array_foreach(ranks, i, r)
		if (json_is_true(json_object_get(r, "progressed"))) {
			json_decref(culprits);
			out = slow_summary(ranks, &text);
			json_object_set_new(out, "text", json_string(text.buf));
			goto done;
		}
	json_array_foreach(ranks, i, r)
		nr_in += json_is_true(json_object_get(r, "in_collective"));
	if (nr_in && nr_in < n) {
		/* some wait in a collective: the ranks outside it keep them waiting */
		json_array_foreach(ranks, i, r)
			odd[i] = !json_is_true(json_object_get(r, "in_collective"));
		why = "not in the collective the others wait in";
	} else {
		/*
		 * All in collectives (or none).  With collective numbers (dttrain):
		 * the rank idle while the others spin (MPI busy-polls; a non-blocking
		 * all-reduce may let some go on to the next collective, so half
		 * the ranks can be "behind" and only one of them is stuck), else
		 * a minority behind the others.  Without: a minority in another
		 * place, else the idle one.
		 */
		int seqs = nr_in > 0;

		json_array_foreach(ranks, i, r)
			seqs &= json_get_int(r, "seq", -1) >= 0;
		why = mark_all_in(ranks, odd, seqs);
	}
	nr_odd = 0;
	json_array_foreach(ranks, i, r) {
		nr_odd += odd[i];
		rest[i] = !odd[i];
		if (rest[i] && !wait_at)
			wait_at = r;
	}
	if (wait_at) {
		add_group(&text, ranks, rest);
		strbuf_addstr(&text, nr_odd ? " wait in " : n - nr_odd == 1 ? " is in " : " are in ");
		add_places(&text, ranks, rest);
		if (nr_odd == 0 && n - nr_odd > 1) {
			int same = 1;

			json_array_foreach(ranks, i, r)
				same &= same_place(wait_at, r);
			if (!same) {
				strbuf_reset(&text);
				strbuf_addstr(&text, "no rank stands out");
			}
		}
	}
	json_array_foreach(ranks, i, r) {
		json_t *c;

		if (!odd[i])
			continue;
		c = culprit(r, why);
		strbuf_addf(&text, "%s%s", text.len ? "; " : "", json_get_str(c, "why", ""));
		json_array_append_new(culprits, c);
	}
	if (!nr_odd)
		strbuf_addstr(&text, "; no single rank stands out");
	out = json_pack("{s:s,s:s,s:o}", "verdict", "hung", "text", text.buf, "culprits", culprits);
done:
	free(odd);
	free(rest);
	strbuf_release(&text);
	return out;
}

/* ------------------------------------------------------- collection */

struct hang_run {
	struct sched *s;
	char job[16];
	char *job_dir;
	int automatic;
	long long gen, stalled_mono;
	struct agent_call *n;     /* POST /v1/debug to each node of the job */
	size_t nr;
};

static void hang_run_free(struct hang_run *h)
{
	for (size_t i = 0; i < h->nr; i++)
		agent_call_release(&h->n[i]);
	free(h->n);
	free(h->job_dir);
	free(h);
}

/* ms since rank r's log or the metrics last changed (-1 unknown) */
static long long idle_ms(const char *job_dir, int rank, long long now_us)
{
	struct strbuf rel = STRBUF_INIT;
	struct stat st;
	long long last = -1;

	strbuf_addf(&rel, "logs/%d.log", rank);
	if (!sf_stat(job_dir, rel.buf, &st, NULL))
		last = st.st_mtim.tv_sec * 1000000LL + st.st_mtim.tv_nsec / 1000;
	if (!sf_stat(job_dir, "metrics.jsonl", &st, NULL) &&
	    st.st_mtim.tv_sec * 1000000LL + st.st_mtim.tv_nsec / 1000 > last)
		last = st.st_mtim.tv_sec * 1000000LL + st.st_mtim.tv_nsec / 1000;
	strbuf_release(&rel);
	return last < 0 ? -1 : (now_us - last) / 1000;
}

static int cmp_rank(const void *a, const void *b)
{
	long long x = json_get_int(*(json_t *const *)a, "rank", -1);
	long long y = json_get_int(*(json_t *const *)b, "rank", -1);

	return (x > y) - (x < y);
}

static void *hang_thread(void *arg)
{
	struct hang_run *h = arg;
	struct sched *s = h->s;
	long long t0 = dt_mono_ms(), now_us;
	json_t *ranks = json_array(), *errors = json_array(), *sum, *res, **v, *r;
	struct job *j;
	size_t i, nv;

	agent_calls(h->n, h->nr);
	for (i = 0; i < h->nr; i++) {
		const struct agent_call *x = &h->n[i];
		size_t k;

		if (!x->reply) {
			json_array_append_new(errors, json_sprintf("node %s: %s", x->name,
								   x->err.buf));
			continue;
		}
		json_array_foreach(json_object_get(x->reply, "ranks"), k, r)
			if (json_is_object(r) && json_integer_value(json_object_get(r, "rank")) >= 0)
				json_array_append(ranks, r);
	}
	/* by rank, and each rank's silence as stall detection sees it */
	nv = json_array_size(ranks);
	v = xcalloc(nv ? nv : 1, sizeof(*v));
	for (i = 0; i < nv; i++)
		v[i] = json_incref(json_array_get(ranks, i));
	qsort(v, nv, sizeof(*v), cmp_rank);
	json_array_clear(ranks);
	now_us = dt_now_us();
	for (i = 0; i < nv; i++) {
		json_object_set_new(v[i], "idle_ms", json_integer(idle_ms(h->job_dir,
			(int)json_get_int(v[i], "rank", 0), now_us)));
		json_array_append_new(ranks, v[i]);
	}
	free(v);
	sum = hang_summarise(ranks);
	res = json_pack("{s:I,s:o,s:b,s:I,s:O,s:O,s:O,s:o,s:o}", "gen", (json_int_t)h->gen,
			"at", json_timestamp(dt_now_us()), "auto", h->automatic, "elapsed_ms",
			(json_int_t)(dt_mono_ms() - t0), "verdict", json_object_get(sum, "verdict"),
			"text", json_object_get(sum, "text"), "culprits",
			json_object_get(sum, "culprits"), "ranks", ranks, "errors", errors);
	if (h->stalled_mono)
		json_object_set_new(res, "after_stall_ms",
				    json_integer(dt_mono_ms() - h->stalled_mono));
	json_decref(sum);

	pthread_mutex_lock(&s->lock);
	j = job_find(s, h->job);
	if (j) {
		json_decref(j->hang);
		j->hang = json_incref(res);
		j->hang_done = h->gen;
		j->hang_busy = 0;
		events_add(s, "job.hang", json_pack("{s:s,s:s,s:s,s:O?,s:O?,s:b,s:O?}", "job", j->id,
			   "name", j->name ? j->name : "", "user", j->user ? j->user : "", "verdict",
			   json_object_get(res, "verdict"), "reason", json_object_get(res, "text"),
			   "auto", h->automatic, "culprits", json_object_get(res, "culprits")),
			   j->cfg.notify);
		if (h->automatic) {
			struct strbuf ev = STRBUF_INIT, rel = STRBUF_INIT, why = STRBUF_INIT;
			char ts[DT_TIMESTAMP_LEN];

			dt_timestamp(ts, sizeof(ts));
			strbuf_addf(&ev, "%s ATTRIBUTION %s\n", ts, json_get_str(res, "text", ""));
			job_rel(j, "events.log", &rel);
			if (sf_append(j->shared_dir, rel.buf, ev.buf, ev.len, 0644, SF_OWNER, &why) < 0)
				dtlog(DTLOG_WARN, "job %s: cannot append to events.log: %s", j->id,
				      why.buf);
			dtlog(DTLOG_WARN, "job %s: %s", j->id, json_get_str(res, "text", ""));
			strbuf_release(&ev);
			strbuf_release(&rel);
			strbuf_release(&why);
		}
		job_save(s, j);
	}
	/* last: once this is 0 (and the lock free) jobs_release may free s */
	s->clients->launches--;
	pthread_mutex_unlock(&s->lock);

	json_decref(res);
	hang_run_free(h);
	return NULL;
}

long long hang_start(struct sched *s, struct job *j, int automatic)
{
	struct hang_run *h;
	pthread_attr_t at;
	pthread_t t;
	json_t *p;
	size_t i;

	if (j->hang_busy)
		return j->hang_gen;
	h = xcalloc(1, sizeof(*h));
	h->s = s;
	snprintf(h->job, sizeof(h->job), "%s", j->id);
	h->job_dir = xstrdup(j->job_dir);
	h->automatic = automatic;
	h->gen = ++j->hang_gen;
	h->stalled_mono = automatic ? dt_mono_ms() : 0;
	h->n = xcalloc(json_array_size(j->placement) + 1, sizeof(*h->n));
	json_array_foreach(j->placement, i, p) {
		const char *name = json_get_str(p, "node", "");
		struct node *n = node_find(s, name);
		struct agent_call *x = &h->n[h->nr];

		if (!n || !n->address)
			continue;
		agent_call_init(x, s, n, DT_PATH_DEBUG, HANG_AGENT_TIMEOUT_MS);
		x->body = json_pack("{s:s,s:s,s:i}", "job_id", h->job, "job_dir", h->job_dir,
				    "sample_ms", HANG_SAMPLE_MS);
		h->nr++;
	}
	j->hang_busy = 1;
	s->clients->launches++;   /* jobs_release() waits for it */
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &at, hang_thread, h)) {
		dtlog(DTLOG_WARN, "job %s: cannot start the hang attribution thread", j->id);
		j->hang_busy = 0;
		s->clients->launches--;
		hang_run_free(h);
	}
	pthread_attr_destroy(&at);
	return j->hang_gen;
}

static void hang_at_stall(struct sched *s, struct job *j, enum job_event ev,
			  const struct job_event_info *info, void *data)
{
	long long now = dt_mono_ms(), every = info->stall_after_ms > HANG_RETRY_MIN_MS ?
					     info->stall_after_ms : HANG_RETRY_MIN_MS;
	int first = info->first;

	/* a stall found while the ranks still start up (no records yet) names
	 * nobody; try again while it lasts, at most every max(stall_after, 15 s) */
	if (!first && (j->hang_busy || now - j->hang_auto_ms < every ||
		       json_array_size(json_object_get(j->hang, "culprits"))))
		return;
	j->hang_auto_ms = now;
	hang_start(s, j, 1);
}

void hang_subscribe(struct sched *s)
{
	job_events_on(&s->events, JOB_EV_STALLED, hang_at_stall, NULL);
}

/*
 * POST /v1/jobs/<id>/debug
 *   <- {}                     start an attribution (or join the one running)
 *   -> 202 {protocol, gen}
 *   <- {wait: gen, timeout_ms}  park until attribution gen is done
 *   -> 200 {protocol, hang: HANG, done, running}  (done false: the latest after
 *      timeout_ms while it runs, or at once when none runs: dtsched restarted)
 */
void h_job_debug(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	const char *id = dt_http_arg(req, "id");
	long long wait = json_get_int(req->json, "wait", -1);
	long long timeout = json_get_int(req->json, "timeout_ms", 0);
	struct job *j;
	struct caller c;

	if (timeout < 0 || timeout > DT_JOB_WAIT_MAX_MS) {
		dt_http_error(resp, 400, "timeout_ms must be 0..%d", DT_JOB_WAIT_MAX_MS);
		return;
	}
	pthread_mutex_lock(&s->lock);
	j = job_find(s, id);
	if (caller_of(s, req, &c, resp) < 0) {
		;
	} else if (!j) {
		dt_http_error(resp, 404, "no job '%s'", id);
	} else if (!caller_may_read(&c, j->user, j->cfg.share_group)) {
		struct strbuf what = STRBUF_INIT;

		/* its stacks show its code and data */
		strbuf_addf(&what, "job %s", j->id);
		caller_deny(resp, &c, what.buf, j->user, "debugging");
		strbuf_release(&what);
	} else if (wait < 0) {
		if (strcmp(j->state, DT_JOB_RUNNING) || !j->hold)
			dt_http_error(resp, 409, "job %s is %s, not running: nothing to debug", j->id,
				      j->state);
		else
			dt_http_json(resp, 202, json_pack("{s:I}", "gen",
							  (json_int_t)hang_start(s, j, 0)));
	} else if (j->hang_done < wait && j->hang_busy && timeout > 0 && req->may_park) {
		resp->park_ms = timeout;
	} else {
		dt_http_json(resp, 200, json_pack("{s:O,s:b,s:b}", "hang", j->hang ? j->hang :
						  json_null(), "done", j->hang_done >= wait,
						  "running", j->hang_busy));
	}
	pthread_mutex_unlock(&s->lock);
}
