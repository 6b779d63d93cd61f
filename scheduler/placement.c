/*
 * placement.c - best-fit placement of a job's ranks on nodes (see placement.h).
 */
#include "placement.h"
#include "hostrange.h"

#include <stdlib.h>
#include <string.h>

static int in_list(const struct strvec *v, const char *name)
{
	return strvec_find(v, name) >= 0;
}

static int labels_match(const struct place_node *n, const struct kvlist *want)
{
	if (!want)
		return 1;
	for (size_t i = 0; i < want->nr; i++) {
		const char *have = n->labels ? kvlist_get(n->labels, want->items[i].key) : NULL;

		if (!have || strcmp(have, want->items[i].value))
			return 0;
	}
	return 1;
}

static int free_slots(const struct place_node *n)
{
	int f = 0;

	for (int i = 0; i < n->total && i < PLACE_MAX_SLOTS; i++)
		f += !n->used[i];
	return f;
}

struct cand {
	int idx;
	int free;
};

/* best fit: fewest free slots first, then by name */
static int cmp_fit(const void *a, const void *b, void *nodes)
{
	const struct cand *x = a, *y = b;
	const struct place_node *n = nodes;

	if (x->free != y->free)
		return x->free < y->free ? -1 : 1;
	return strcmp(n[x->idx].name, n[y->idx].name);
}

static int cmp_name(const void *a, const void *b, void *nodes)
{
	const struct cand *x = a, *y = b;
	const struct place_node *n = nodes;

	return strcmp(n[x->idx].name, n[y->idx].name);
}

/* "; no node named a, b in the cluster" for the names of inc no node has */
static void add_unknown(struct strbuf *reason, const struct strvec *inc,
			const struct place_node *nodes, size_t nr)
{
	size_t shown = 0, unknown = 0;

	for (size_t k = 0; k < inc->nr; k++) {
		size_t i;

		for (i = 0; i < nr && strcmp(nodes[i].name, inc->v[k]); i++)
			;
		if (i < nr)
			continue;
		if (!unknown++)
			strbuf_addstr(reason, "; no node named ");
		if (shown < 5)
			strbuf_addf(reason, "%s'%s'", shown++ ? ", " : "", inc->v[k]);
	}
	if (unknown > shown)
		strbuf_addf(reason, " and %zu more", unknown - shown);
	if (unknown)
		strbuf_addstr(reason, " in the cluster");
}

enum place_status placement_try(const struct place_node *nodes, size_t nr,
				const struct place_req *req, struct place_result *res,
				struct strbuf *reason)
{
	struct strvec inc = STRVEC_INIT, exc = STRVEC_INIT;
	struct strbuf err = STRBUF_INIT;
	struct cand *cand = NULL;
	int nr_cand = 0, big_enough = 0, fits_now = 0, eligible = 0, down = 0, drained = 0;
	enum place_status st;

	res->nr = 0;   /* not a memset: 66 KB, and only the first nr entries are read */
	if (req->nodes < 1 || req->per_node < 1 || req->nodes > 256 || req->per_node > 64) {
		strbuf_addf(reason, "job asks for %d node(s) x %d slot(s); allowed are 1-256 nodes "
			    "and 1-64 slots per node", req->nodes, req->per_node);
		return PLACE_ERROR;
	}
	if ((req->include && hostrange_expand(req->include, &inc, &err) < 0) ||
	    (req->exclude && hostrange_expand(req->exclude, &exc, &err) < 0)) {
		strbuf_addf(reason, "bad node selection: %s", err.buf);
		st = PLACE_ERROR;
		goto out;
	}
	cand = xcalloc(nr ? nr : 1, sizeof(*cand));
	for (size_t i = 0; i < nr; i++) {
		const struct place_node *n = &nodes[i];
		int avoided = 0;

		if (req->include && !in_list(&inc, n->name))
			continue;
		if (req->exclude && in_list(&exc, n->name))
			continue;
		if (!labels_match(n, req->labels))
			continue;
		for (const char *const *a = req->avoid; a && *a; a++)
			if (!strcmp(*a, n->name))
				avoided = 1;
		if (avoided)
			continue;
		eligible++;
		if (n->total < req->per_node)
			continue;
		big_enough++;
		if (!n->up || (n->drained && !req->burn_in)) {
			down += !n->up;
			drained += n->up;
			continue;
		}
		if (free_slots(n) >= req->per_node) {
			cand[nr_cand].idx = (int)i;
			cand[nr_cand].free = free_slots(n);
			nr_cand++;
			fits_now++;
		}
	}
	if (big_enough < req->nodes) {
		strbuf_addf(reason, "job needs %d node(s) with %d slot(s) each, but only %d of the "
			    "%d selected node(s) have that many (%zu node(s) in the cluster)",
			    req->nodes, req->per_node, big_enough, eligible, nr);
		add_unknown(reason, &inc, nodes, nr);
		st = PLACE_NEVER;
		goto out;
	}
	if (fits_now < req->nodes) {
		/* why the others are not: a user waiting wants to know that nodes are DOWN */
		int busy = big_enough - fits_now - down - drained;

		strbuf_addf(reason, "waiting for %d node(s) with %d free slot(s); %d available now",
			    req->nodes, req->per_node, fits_now);
		if (down)
			strbuf_addf(reason, "; %d DOWN", down);
		if (drained)
			strbuf_addf(reason, "; %d DRAINED", drained);
		if (busy)
			strbuf_addf(reason, "; %d busy", busy);
		st = PLACE_WAIT;
		goto out;
	}
	qsort_r(cand, (size_t)nr_cand, sizeof(*cand), cmp_fit, (void *)nodes);
	/* the chosen nodes in name order, so rank order is stable and readable */
	qsort_r(cand, (size_t)req->nodes, sizeof(*cand), cmp_name, (void *)nodes);
	for (int k = 0; k < req->nodes; k++) {
		const struct place_node *n = &nodes[cand[k].idx];
		int got = 0;

		res->node[k] = cand[k].idx;
		for (int s = 0; s < n->total && got < req->per_node; s++)
			if (!n->used[s])
				res->slots[k][got++] = s;
	}
	res->nr = req->nodes;
	st = PLACE_OK;
out:
	free(cand);
	strvec_clear(&inc);
	strvec_clear(&exc);
	strbuf_release(&err);
	return st;
}

void placement_commit(struct place_node *nodes, const struct place_result *res, int per_node)
{
	for (int k = 0; k < res->nr; k++)
		for (int s = 0; s < per_node; s++)
			nodes[res->node[k]].used[res->slots[k][s]] = 1;
}

void placement_format_slots(struct strbuf *sb, const struct place_result *res, int i,
			    int per_node)
{
	for (int s = 0; s < per_node; s++)
		strbuf_addf(sb, "%s%d", s ? "," : "", res->slots[i][s]);
}
