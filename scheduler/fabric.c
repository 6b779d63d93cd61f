/*
 * fabric.c - a fabric test's verdict against baselines and peers (fabric.h).
 */
#include "fabric.h"
#include "json.h"
#include "usage.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct fnode {
	const char *name;
	double rx, tx;            /* upper medians; -1 unknown */
	double base_rx, base_tx;
	int reported, links, failed;
	struct strbuf why;
};

struct flink {
	int a, b, ok;
	double lat, ab, ba;       /* -1 unknown */
	double base_ab, base_ba, base_lat;
	struct strbuf why;
};

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/* the upper median of the v[i] >= 0 (v is reordered); -1 when none */
static double upper_median(double *v, size_t nr)
{
	size_t k = 0;

	for (size_t i = 0; i < nr; i++)
		if (v[i] >= 0)
			v[k++] = v[i];
	if (!k)
		return -1;
	qsort(v, k, sizeof(*v), cmp_double);
	return v[k / 2];
}

/* baseline "<kind>:<x>" or "<kind>:<x><sep><y>", or -1 */
static double base_get(const json_t *b, const char *kind, const char *x, const char *sep,
		       const char *y)
{
	struct strbuf key = STRBUF_INIT;
	double v;

	strbuf_addf(&key, "%s:%s%s%s", kind, x, y ? sep : "", y ? y : "");
	v = json_get_real(b, key.buf, -1);
	strbuf_release(&key);
	return v > 0 ? v : -1;
}

static void add_why(struct strbuf *why, const char *fmt, ...) DT_PRINTF(2, 3);
static void add_why(struct strbuf *why, const char *fmt, ...)
{
	va_list ap;

	if (why->len)
		strbuf_addstr(why, "; ");
	va_start(ap, fmt);
	strbuf_vaddf(why, fmt, ap);
	va_end(ap);
}

/* A bandwidth figure against its baseline and the median: appends why it fails. */
static void judge_bw(struct strbuf *why, const char *what, double v, double base, double median,
		     int peers, double f)
{
	if (v < 0)
		return;
	if (base > 0 && v < f * base)
		add_why(why, "%s %.3g MB/s < %.2g x its baseline %.3g MB/s", what, v, f, base);
	else if (peers && median > 0 && v < f * median)
		add_why(why, "%s %.3g MB/s < %.2g x the peers' median %.3g MB/s", what, v, f, median);
}

static json_t *num(double v)
{
	return v >= 0 ? json_real(v) : json_null();
}

json_t *fabric_verdict(const json_t *doc, const char *const *names, size_t nr,
		       const json_t *baselines, double f, struct strbuf *err)
{
	const json_t *jn = json_object_get(doc, "nodes"), *jl = json_object_get(doc, "links"), *x;
	const char *mode = json_get_str(doc, "fabric", "");
	size_t n = json_array_size(jn), nl = json_array_size(jl), i;
	struct fnode *nodes;
	struct flink *links;
	double *tmp, med_rx, med_tx, med_bw, med_lat;
	int full = !strcmp(mode, "full"), peers, ok = 1;
	json_t *v, *vn, *vl, *bad_nodes, *bad_links;

	if ((!full && strcmp(mode, "quick")) || !json_is_array(jn) || !json_is_array(jl) ||
	    n < 1 || n > 100000 || nl != n * (n - 1) / 2 || (names && nr != n)) {
		strbuf_addf(err, "not a fabric test document for %zu node(s)", names ? nr : n);
		return NULL;
	}
	if (!(f > 0 && f <= 1))
		f = 0.5;
	nodes = xcalloc(n, sizeof(*nodes));
	links = xcalloc(nl ? nl : 1, sizeof(*links));
	tmp = xcalloc(2 * (nl + n) + 1, sizeof(*tmp));
	json_array_foreach(jn, i, x) {
		struct fnode *p = &nodes[i];

		p->name = names ? names[i] : json_get_str(x, "host", "?");
		p->reported = json_is_true(json_object_get(x, "reported"));
		p->rx = p->tx = -1;
		p->base_rx = base_get(baselines, "rx", p->name, "", NULL);
		p->base_tx = base_get(baselines, "tx", p->name, "", NULL);
		strbuf_init(&p->why, 0);
	}
	json_array_foreach(jl, i, x) {
		struct flink *l = &links[i];
		long long a = json_get_int(x, "a", -1), b = json_get_int(x, "b", -1);

		strbuf_init(&l->why, 0);
		l->a = a >= 0 && a < (long long)n ? (int)a : 0;
		l->b = b >= 0 && b < (long long)n ? (int)b : 0;
		if (l->a == l->b) {
			strbuf_addf(err, "fabric test document: link %zu names bad ranks", i);
			v = NULL;
			goto out;
		}
		l->ok = json_is_true(json_object_get(x, "ok"));
		l->lat = json_get_real(x, "lat_us", -1);
		l->ab = l->ok ? json_get_real(x, "bw_ab_MBps", -1) : -1;
		l->ba = l->ok ? json_get_real(x, "bw_ba_MBps", -1) : -1;
		l->base_ab = base_get(baselines, "bw", nodes[l->a].name, ">", nodes[l->b].name);
		l->base_ba = base_get(baselines, "bw", nodes[l->b].name, ">", nodes[l->a].name);
		l->base_lat = strcmp(nodes[l->a].name, nodes[l->b].name) < 0 ?
			base_get(baselines, "lat", nodes[l->a].name, "|", nodes[l->b].name) :
			base_get(baselines, "lat", nodes[l->b].name, "|", nodes[l->a].name);
	}
	/* node figures: upper medians of their links, each way */
	for (size_t k = 0; k < n; k++) {
		size_t in = 0, out = 0;

		for (i = 0; i < nl; i++) {
			if (links[i].a == (int)k) {
				tmp[out++] = links[i].ab;
				tmp[nl + in++] = links[i].ba;
			} else if (links[i].b == (int)k) {
				tmp[out++] = links[i].ba;
				tmp[nl + in++] = links[i].ab;
			} else {
				continue;
			}
			nodes[k].links++;
			nodes[k].failed += !links[i].ok;
		}
		nodes[k].tx = upper_median(tmp, out);
		nodes[k].rx = upper_median(tmp + nl, in);
	}
	peers = n >= 3;
	for (size_t k = 0; k < n; k++) {
		tmp[k] = nodes[k].rx;
		tmp[n + k] = nodes[k].tx;
	}
	med_rx = upper_median(tmp, n);
	med_tx = upper_median(tmp + n, n);
	for (i = 0; i < nl; i++) {
		tmp[2 * i] = links[i].ab;
		tmp[2 * i + 1] = links[i].ba;
	}
	med_bw = upper_median(tmp, 2 * nl);
	for (i = 0; i < nl; i++)
		tmp[i] = links[i].lat;
	med_lat = upper_median(tmp, nl);

	for (i = 0; i < nl; i++) {
		struct flink *l = &links[i];
		double lim;

		if (!l->ok) {
			add_why(&l->why, "%s", json_get_str(json_array_get(jl, i), "error",
							     "a transfer did not finish"));
			continue;
		}
		if (full) {
			judge_bw(&l->why, "a>b", l->ab, l->base_ab, med_bw, peers, f);
			judge_bw(&l->why, "b>a", l->ba, l->base_ba, med_bw, peers, f);
		}
		lim = FABRIC_LAT_FLOOR_US;
		if (l->base_lat > 0 && l->base_lat / f > lim)
			lim = l->base_lat / f;
		if (peers && med_lat > 0 && med_lat / f > lim)
			lim = med_lat / f;
		if (l->lat > lim)
			add_why(&l->why, "latency %.3g us > %.3g us (max(%g us, baseline or peers' "
				"median / %.2g))", l->lat, lim, FABRIC_LAT_FLOOR_US, f);
	}
	for (size_t k = 0; k < n; k++) {
		struct fnode *p = &nodes[k];
		int most = 0;

		if (!p->reported) {
			add_why(&p->why, "its rank never reported");
			continue;
		}
		/* the node with most failed links is the one to name */
		for (size_t m = 0; m < n; m++)
			if (nodes[m].failed > most)
				most = nodes[m].failed;
		if (p->failed && (p->failed == p->links || (p->failed == most && 2 * p->failed >= p->links)))
			add_why(&p->why, "%d of its %d link%s did not finish", p->failed, p->links,
				p->links == 1 ? "" : "s");
		if (full) {
			judge_bw(&p->why, "rx", p->rx, p->base_rx, med_rx, peers, f);
			judge_bw(&p->why, "tx", p->tx, p->base_tx, med_tx, peers, f);
		}
	}
	/* with 2 nodes nothing tells the ends of a slow link apart: both fail */
	if (n == 2 && links[0].why.len)
		for (size_t k = 0; k < 2; k++)
			if (!nodes[k].why.len)
				add_why(&nodes[k].why, "its only link fails (%s); with 2 nodes either "
					"end may be at fault", links[0].why.buf);

	v = json_object();
	vn = json_array();
	vl = json_array();
	bad_nodes = json_array();
	bad_links = json_array();
	for (size_t k = 0; k < n; k++) {
		struct fnode *p = &nodes[k];
		json_t *o = json_pack("{s:s,s:b}", "node", p->name, "ok", !p->why.len);

		json_object_set_new(o, "rx_MBps", num(p->rx));
		json_object_set_new(o, "tx_MBps", num(p->tx));
		json_object_set_new(o, "base_rx", num(p->base_rx));
		json_object_set_new(o, "base_tx", num(p->base_tx));
		json_object_set_new(o, "median_rx", num(peers ? med_rx : -1));
		json_object_set_new(o, "median_tx", num(peers ? med_tx : -1));
		if (p->why.len) {
			json_object_set_new(o, "why", json_string(p->why.buf));
			json_array_append_new(bad_nodes, json_string(p->name));
			ok = 0;
		}
		json_array_append_new(vn, o);
	}
	for (i = 0; i < nl; i++) {
		struct flink *l = &links[i];
		json_t *o = json_pack("{s:s,s:s,s:b}", "a", nodes[l->a].name, "b", nodes[l->b].name,
				      "ok", !l->why.len);

		json_object_set_new(o, "lat_us", num(l->lat));
		json_object_set_new(o, "bw_ab_MBps", num(l->ab));
		json_object_set_new(o, "bw_ba_MBps", num(l->ba));
		json_object_set_new(o, "base_ab", num(l->base_ab));
		json_object_set_new(o, "base_ba", num(l->base_ba));
		json_object_set_new(o, "base_lat", num(l->base_lat));
		if (l->why.len) {
			struct strbuf name = STRBUF_INIT;

			json_object_set_new(o, "why", json_string(l->why.buf));
			strbuf_addf(&name, "%s<->%s", nodes[l->a].name, nodes[l->b].name);
			json_array_append_new(bad_links, json_string(name.buf));
			strbuf_release(&name);
			ok = 0;
		}
		json_array_append_new(vl, o);
	}
	json_object_set_new(v, "ok", json_boolean(ok));
	json_object_set_new(v, "mode", json_string(mode));
	json_object_set_new(v, "fraction", json_real(f));
	json_object_set_new(v, "nodes", vn);
	json_object_set_new(v, "links", vl);
	json_object_set_new(v, "bad_nodes", bad_nodes);
	json_object_set_new(v, "bad_links", bad_links);
	if (json_is_number(json_object_get(doc, "elapsed_ms")))
		json_object_set(v, "elapsed_ms", json_object_get(doc, "elapsed_ms"));
	if (json_is_object(json_object_get(doc, "allreduce")))
		json_object_set(v, "allreduce", json_object_get(doc, "allreduce"));
out:
	for (size_t k = 0; k < n; k++)
		strbuf_release(&nodes[k].why);
	for (i = 0; i < nl; i++)
		strbuf_release(&links[i].why);
	free(nodes);
	free(links);
	free(tmp);
	return v;
}

/* baseline key follows v: the first value, then a moving average */
static void base_follow(json_t *b, const char *key, double v)
{
	double old = json_get_real(b, key, -1);

	if (!(v > 0))
		return;
	/* the document is its job's user's: one run moves a baseline at most 2x */
	if (old > 0 && v > 2 * old)
		v = 2 * old;
	else if (old > 0 && v < old / 2)
		v = old / 2;
	json_object_set_new(b, key, json_real(old > 0 ? old + FABRIC_BASE_WEIGHT * (v - old) : v));
}

void fabric_update_baselines(json_t *b, const json_t *v)
{
	const json_t *x;
	size_t i;
	struct strbuf key = STRBUF_INIT;

	json_array_foreach(json_object_get(v, "nodes"), i, x) {
		const char *name = json_get_str(x, "node", "?");

		if (!json_is_true(json_object_get(x, "ok")))
			continue;
		strbuf_reset(&key);
		strbuf_addf(&key, "rx:%s", name);
		base_follow(b, key.buf, json_get_real(x, "rx_MBps", -1));
		strbuf_reset(&key);
		strbuf_addf(&key, "tx:%s", name);
		base_follow(b, key.buf, json_get_real(x, "tx_MBps", -1));
	}
	json_array_foreach(json_object_get(v, "links"), i, x) {
		const char *a = json_get_str(x, "a", "?"), *bn = json_get_str(x, "b", "?");
		int lt = strcmp(a, bn) < 0;

		if (!json_is_true(json_object_get(x, "ok")))
			continue;
		strbuf_reset(&key);
		strbuf_addf(&key, "bw:%s>%s", a, bn);
		base_follow(b, key.buf, json_get_real(x, "bw_ab_MBps", -1));
		strbuf_reset(&key);
		strbuf_addf(&key, "bw:%s>%s", bn, a);
		base_follow(b, key.buf, json_get_real(x, "bw_ba_MBps", -1));
		strbuf_reset(&key);
		strbuf_addf(&key, "lat:%s|%s", lt ? a : bn, lt ? bn : a);
		base_follow(b, key.buf, json_get_real(x, "lat_us", -1));
	}
	strbuf_release(&key);
}

void fabric_summary(struct strbuf *sb, const json_t *v)
{
	const json_t *x;
	size_t i;
	int nodes = 0, links = 0;

	json_array_foreach(json_object_get(v, "nodes"), i, x)
		if (!json_is_true(json_object_get(x, "ok")))
			strbuf_addf(sb, "%s%s: %s", nodes++ ? "; " : "", json_get_str(x, "node", "?"),
				    json_get_str(x, "why", "?"));
	/* the links only when no node is to blame */
	json_array_foreach(json_object_get(v, "links"), i, x)
		if (!nodes && !json_is_true(json_object_get(x, "ok")))
			strbuf_addf(sb, "%s%s<->%s: %s", links++ ? "; " : "",
				    json_get_str(x, "a", "?"), json_get_str(x, "b", "?"),
				    json_get_str(x, "why", "?"));
}
