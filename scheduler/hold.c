/*
 * hold.c - holds: the slots of one attempt of a job (struct hold, jobs-int.h),
 * reserved the moment the attempt is placed (jobs-queue.c) and kept until
 * everything of that attempt is gone (its backend says when: hold_drop()), so
 * no two jobs ever share a GPU.  Their JSON (state.db keeps them with the
 * job), the tasks an attempt runs as, and their list in s->holds.
 */
#include "jobs-int.h"
#include "json.h"
#include "log.h"
#include "usage.h"

#include <stdlib.h>
#include <string.h>

json_t *hold_json(const struct hold *h)
{
	json_t *tasks = json_array();

	for (size_t i = 0; i < h->nr_tasks; i++)
		json_array_append_new(tasks, json_pack("{s:s,s:s,s:i,s:b}", "node", h->tasks[i].node,
						       "id", h->tasks[i].id, "rank", h->tasks[i].rank,
						       "gone", h->tasks[i].gone));
	return json_pack("{s:s,s:b,s:o,s:o,s:b}", "job", h->job, "gpu", h->gpu,
			 "placement", placement_json(h), "tasks", tasks, "released", h->released);
}

void hold_free(struct hold *h)
{
	for (int k = 0; k < h->nr; k++) {
		free(h->place[k].node);
		free(h->place[k].address);
	}
	for (size_t i = 0; i < h->nr_tasks; i++) {
		free(h->tasks[i].node);
		free(h->tasks[i].id);
	}
	free(h->place);
	free(h->tasks);
	free(h);
}

void hold_drop(struct sched *s, struct hold *h)
{
	for (size_t i = 0; i < s->nr_holds; i++) {
		if (s->holds[i] == h) {
			memmove(&s->holds[i], &s->holds[i + 1], (s->nr_holds - i - 1) * sizeof(*s->holds));
			s->nr_holds--;
			break;
		}
	}
	hold_free(h);
}

void hold_add_task(struct hold *h, const char *node, const char *id, int rank, int gone)
{
	struct htask *t;

	ALLOC_GROW(h->tasks, h->nr_tasks + 1, h->alloc_tasks);
	t = &h->tasks[h->nr_tasks++];
	t->node = xstrdup(node);
	t->id = xstrdup(id);
	t->rank = rank;
	t->gone = gone;
}

struct hold *hold_from_json(const json_t *o)
{
	struct hold *h = xcalloc(1, sizeof(*h));
	json_t *p, *t;
	size_t i;

	snprintf(h->job, sizeof(h->job), "%s", json_get_str(o, "job", ""));
	h->gpu = json_is_true(json_object_get(o, "gpu"));
	h->released = json_is_true(json_object_get(o, "released"));
	h->released_ms = dt_mono_ms();
	h->launched_ms = dt_mono_ms();
	p = json_object_get(o, "placement");
	h->nr = (int)json_array_size(p);
	h->place = xcalloc(h->nr ? (size_t)h->nr : 1, sizeof(*h->place));
	json_array_foreach(p, i, t) {
		const char *sl = json_get_str(t, "slots", "");

		h->place[i].node = xstrdup(json_get_str(t, "node", "?"));
		h->place[i].address = xstrdup(json_get_str(t, "address", ""));
		while (*sl && h->place[i].nslots < 64) {
			char *end;
			long v = strtol(sl, &end, 10);

			if (end == sl)
				break;
			h->place[i].slot[h->place[i].nslots++] = (int)v;
			sl = *end == ',' ? end + 1 : end;
		}
	}
	json_array_foreach(json_object_get(o, "tasks"), i, t)
		hold_add_task(h, json_get_str(t, "node", "?"), json_get_str(t, "id", "?"),
			      (int)json_get_int(t, "rank", -1), json_is_true(json_object_get(t, "gone")));
	return h;
}

void jslot_format(struct strbuf *sb, const struct jslot *p)
{
	for (int i = 0; i < p->nslots; i++)
		strbuf_addf(sb, "%s%d", i ? "," : "", p->slot[i]);
}

int hold_has_task(struct sched *s, const char *id)
{
	for (size_t h = 0; h < s->nr_holds; h++)
		for (size_t i = 0; i < s->holds[h]->nr_tasks; i++)
			if (!strcmp(s->holds[h]->tasks[i].id, id))
				return 1;
	return 0;
}

json_t *placement_json(const struct hold *h)
{
	json_t *a = json_array();

	for (int k = 0; h && k < h->nr; k++) {
		struct strbuf sl = STRBUF_INIT;

		jslot_format(&sl, &h->place[k]);
		json_array_append_new(a, json_pack("{s:s,s:s,s:s}", "node", h->place[k].node,
						   "address", h->place[k].address, "slots", sl.buf));
		strbuf_release(&sl);
	}
	return a;
}

int hold_of_job(struct sched *s, const char *job)
{
	for (size_t h = 0; h < s->nr_holds; h++)
		if (!strcmp(s->holds[h]->job, job))
			return 1;
	return 0;
}
