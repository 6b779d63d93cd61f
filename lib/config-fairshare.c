/*
 * config-fairshare.c - the fairshare: section of cluster.yaml (config.h's
 * struct fairshare_config): the shares and quotas of users and projects and
 * the weights of the multifactor priority that scheduler/fairshare.c
 * computes.  docs/fairshare.md has the reference; config-cluster.c calls
 * fairshare_value() for the key.
 *
 *   fairshare:
 *     half_life: 7d
 *     max_age: 7d
 *     weights: {fairshare: 10000, age: 1000, size: 100}
 *     user_limits: {max_gpus: 8, max_pending: 200}
 *     users:
 *       alice: {share: 2, project: vision, max_gpus: 4, max_time: 24h}
 *     projects:
 *       vision: {share: 3, max_gpus: 16, guaranteed_gpus: 8}
 *     classes:
 *       scavenger: {preemptible: true, signal: USR1, grace: 2m}
 *     preempt_over_share: true
 *     preempt_min_run: 10m
 */
#include "config-int.h"
#include "units.h"

#include <signal.h>
#include <string.h>

int fairshare_name_ok(const char *s)
{
	return name_chars_ok(s, 64, "._-");
}

static const char *const limit_keys[] = { "max_gpus", "max_slots", "max_pending", "max_time",
					   NULL };
static const char *const user_keys[] = { "share", "project", "max_gpus", "max_slots",
					  "max_pending", "max_time", NULL };
static const char *const project_keys[] = { "share", "max_gpus", "max_slots", "max_pending",
					     "max_time", "guaranteed_gpus", NULL };
static const char *const weight_keys[] = { "fairshare", "age", "size", NULL };
static const char *const fairshare_keys[] = { "half_life", "max_age", "weights", "user_limits",
					       "users", "projects", "classes", "preempt_over_share",
					       "preempt_min_run", NULL };
static const char *const class_keys[] = { "preemptible", "priority", "signal", "grace", NULL };

static int class_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
		     void *data)
{
	struct fs_class *k = data;

	if (!strcmp(key, "preemptible"))
		return get_bool(c, v, path, &k->preemptible);
	if (!strcmp(key, "priority"))
		return get_int(c, v, path, -1000, 1000, "an integer from -1000 to 1000", &k->rank);
	if (!strcmp(key, "signal")) {
		const char *t = want_scalar(c, v, path, "a signal, e.g. USR1");

		if (!t)
			return -1;
		k->signal = parse_signal(t);
		return k->signal > 0 ? 0 : bad_value(c, v, path, "a signal: a name (USR1, SIGUSR1) "
						     "or a number from 1 to 64");
	}
	if (get_duration(c, v, path, &k->grace_ms) < 0)   /* grace */
		return -1;
	return k->grace_ms >= 0 ? 0 : bad_value(c, v, path, "a duration, e.g. 60s");
}

static int class_pair(struct ctx *c, struct ynode *k, struct ynode *v, const char *path,
		      void *data)
{
	struct fairshare_config *f = data;
	struct fs_class *e;

	if (!fairshare_name_ok(k->text))
		return fail(c, k, "key '%s': expected a name of letters, digits, '.', '-' and '_'",
			    path);
	f->classes = xrealloc(f->classes, (f->nr_classes + 1) * sizeof(*f->classes));
	e = &f->classes[f->nr_classes++];
	memset(e, 0, sizeof(*e));
	e->name = xstrdup(k->text);
	e->signal = SIGUSR1;
	e->grace_ms = 60 * 1000;
	e->pos.line = k->line;
	e->pos.col = k->col;
	if (is_null(v))
		return 0;
	return walk_map(c, v, path, class_keys, NULL, class_key, e);
}

#define LIMIT_EXPECTED "a number from 0 (no limit) to 1000000"

static int limit_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
		     struct fs_limits *l)
{
	if (!strcmp(key, "max_gpus"))
		return get_int(c, v, path, 0, 1000000, LIMIT_EXPECTED, &l->max_gpus);
	if (!strcmp(key, "max_slots"))
		return get_int(c, v, path, 0, 1000000, LIMIT_EXPECTED, &l->max_slots);
	if (!strcmp(key, "max_pending"))
		return get_int(c, v, path, 0, 1000000, LIMIT_EXPECTED, &l->max_pending);
	if (get_duration(c, v, path, &l->max_time_ms) < 0)   /* max_time */
		return -1;
	if (l->max_time_ms < 0)
		return bad_value(c, v, path, "a duration (0: no limit), e.g. 24h");
	return 0;
}

static int limits_only_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
			   void *data)
{
	return limit_key(c, key, v, path, data);
}

static int entity_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
		      void *data)
{
	struct fs_entity *e = data;

	if (!strcmp(key, "share")) {
		if (get_double(c, v, path, &e->share) < 0)
			return -1;
		if (!(e->share > 0 && e->share <= 1e9))
			return bad_value(c, v, path, "a number above 0, e.g. 2");
		e->has_share = 1;
		return 0;
	}
	if (!strcmp(key, "guaranteed_gpus"))   /* projects only (project_keys) */
		return get_int(c, v, path, 0, 1000000, "a number of GPUs from 0 (none) to 1000000",
			       &e->guaranteed_gpus);
	if (!strcmp(key, "project")) {
		if (get_str(c, v, path, &e->project) < 0)
			return -1;
		return fairshare_name_ok(e->project) ? 0 :
			bad_value(c, v, path, "a name of letters, digits, '.', '-' and '_'");
	}
	return limit_key(c, key, v, path, &e->lim);
}

struct entity_list {
	struct fs_entity **v;
	size_t *nr;
	const char *const *keys;
	const struct fs_limits *dflt;
};

static int entity_pair(struct ctx *c, struct ynode *k, struct ynode *v, const char *path,
		       void *data)
{
	struct entity_list *l = data;
	struct fs_entity *e;

	if (!fairshare_name_ok(k->text))
		return fail(c, k, "key '%s': expected a name of letters, digits, '.', '-' and '_'",
			    path);
	*l->v = xrealloc(*l->v, (*l->nr + 1) * sizeof(**l->v));
	e = &(*l->v)[(*l->nr)++];
	memset(e, 0, sizeof(*e));
	e->name = xstrdup(k->text);
	e->share = 1;
	if (l->dflt)
		e->lim = *l->dflt;
	e->pos.line = k->line;
	e->pos.col = k->col;
	if (is_null(v))
		return 0;
	return walk_map(c, v, path, l->keys, NULL, entity_key, e);
}

static int fairshare_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
			 void *data)
{
	struct fairshare_config *f = data;

	if (!strcmp(key, "half_life") || !strcmp(key, "max_age")) {
		long long *ms = key[0] == 'h' ? &f->half_life_ms : &f->max_age_ms;

		if (get_duration(c, v, path, ms) < 0)
			return -1;
		if (*ms < 1000)
			return bad_value(c, v, path, "a duration of 1s or more, e.g. 7d");
		return 0;
	}
	if (!strcmp(key, "preempt_over_share"))
		return get_bool(c, v, path, &f->preempt_over_share);
	if (!strcmp(key, "preempt_min_run")) {
		if (get_duration(c, v, path, &f->preempt_min_run_ms) < 0)
			return -1;
		return f->preempt_min_run_ms >= 0 ? 0 : bad_value(c, v, path, "a duration, e.g. 10m");
	}
	if (!strcmp(key, "weights") || !strcmp(key, "user_limits"))
		return 0;   /* read first, by fairshare_value() */
	if (!strcmp(key, "classes"))
		return each_pair(c, v, path, "a mapping of class names", class_pair, f);
	if (!strcmp(key, "users")) {
		struct entity_list l = { &f->users, &f->nr_users, user_keys, &f->user_default };

		return each_pair(c, v, path, "a mapping of user names", entity_pair, &l);
	}
	{
		struct entity_list l = { &f->projects, &f->nr_projects, project_keys, NULL };

		return each_pair(c, v, path, "a mapping of project names", entity_pair, &l);
	}
}

static int weight_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
		      void *data)
{
	struct fairshare_config *f = data;
	double *w = !strcmp(key, "fairshare") ? &f->w_fairshare :
		!strcmp(key, "age") ? &f->w_age : &f->w_size;

	if (get_double(c, v, path, w) < 0)
		return -1;
	if (!(*w >= 0 && *w <= 1e9))
		return bad_value(c, v, path, "a number from 0 to 1e9");
	return 0;
}

void fairshare_defaults(struct fairshare_config *f)
{
	memset(f, 0, sizeof(*f));
	f->half_life_ms = 7LL * 24 * 3600 * 1000;
	f->max_age_ms = 7LL * 24 * 3600 * 1000;
	f->w_fairshare = 10000;
	f->w_age = 1000;
	f->w_size = 100;
	f->preempt_min_run_ms = 10 * 60 * 1000;
}

int fairshare_value(struct ctx *c, struct ynode *v, const char *path, struct fairshare_config *f)
{
	struct ynode *w = v && v->type == Y_MAP ? map_get(v, "weights") : NULL;
	struct ynode *ul = v && v->type == Y_MAP ? map_get(v, "user_limits") : NULL;
	struct strbuf sub = STRBUF_INIT;
	int ret;

	/* user_limits first: the users' entries start from it whatever the order */
	child_path(&sub, path, "user_limits");
	ret = ul ? walk_map(c, ul, sub.buf, limit_keys, NULL, limits_only_key,
			    &f->user_default) : 0;
	strbuf_reset(&sub);
	child_path(&sub, path, "weights");
	if (!ret && w)
		ret = walk_map(c, w, sub.buf, weight_keys, NULL, weight_key, f);
	strbuf_release(&sub);
	if (ret < 0)
		return -1;
	return walk_map(c, v, path, fairshare_keys, NULL, fairshare_key, f);
}

void fairshare_release(struct fairshare_config *f)
{
	for (size_t i = 0; i < f->nr_users; i++) {
		free(f->users[i].name);
		free(f->users[i].project);
	}
	for (size_t i = 0; i < f->nr_projects; i++)
		free(f->projects[i].name);
	for (size_t i = 0; i < f->nr_classes; i++)
		free(f->classes[i].name);
	free(f->classes);
	free(f->users);
	free(f->projects);
	fairshare_defaults(f);
}

static const struct fs_entity *find(const struct fs_entity *v, size_t nr, const char *name)
{
	for (size_t i = 0; name && i < nr; i++)
		if (!strcmp(v[i].name, name))
			return &v[i];
	return NULL;
}

const struct fs_class *fairshare_class(const struct fairshare_config *f, const char *name)
{
	for (size_t i = 0; name && i < f->nr_classes; i++)
		if (!strcmp(f->classes[i].name, name))
			return &f->classes[i];
	return NULL;
}

const struct fs_entity *fairshare_user(const struct fairshare_config *f, const char *name)
{
	return find(f->users, f->nr_users, name);
}

const struct fs_entity *fairshare_project(const struct fairshare_config *f, const char *name)
{
	return find(f->projects, f->nr_projects, name);
}

static json_t *limits_json(json_t *o, const struct fs_limits *l)
{
	if (l->max_gpus)
		json_object_set_new(o, "max_gpus", json_integer(l->max_gpus));
	if (l->max_slots)
		json_object_set_new(o, "max_slots", json_integer(l->max_slots));
	if (l->max_pending)
		json_object_set_new(o, "max_pending", json_integer(l->max_pending));
	if (l->max_time_ms)
		set_duration(o, "max_time", l->max_time_ms);
	return o;
}

static json_t *entities_json(const struct fs_entity *v, size_t nr)
{
	json_t *o = json_object();

	for (size_t i = 0; i < nr; i++) {
		json_t *e = json_pack("{s:f}", "share", v[i].share);

		if (v[i].project)
			json_object_set_new(e, "project", json_string(v[i].project));
		if (v[i].guaranteed_gpus)
			json_object_set_new(e, "guaranteed_gpus", json_integer(v[i].guaranteed_gpus));
		json_object_set_new(o, v[i].name, limits_json(e, &v[i].lim));
	}
	return o;
}

json_t *fairshare_to_json(const struct fairshare_config *f)
{
	json_t *o = json_object();

	set_duration(o, "half_life", f->half_life_ms);
	set_duration(o, "max_age", f->max_age_ms);
	json_object_set_new(o, "weights", json_pack("{s:f,s:f,s:f}", "fairshare", f->w_fairshare,
						    "age", f->w_age, "size", f->w_size));
	json_object_set_new(o, "user_limits", limits_json(json_object(), &f->user_default));
	json_object_set_new(o, "users", entities_json(f->users, f->nr_users));
	json_object_set_new(o, "projects", entities_json(f->projects, f->nr_projects));
	{
		json_t *cl = json_object();

		for (size_t i = 0; i < f->nr_classes; i++) {
			json_t *k = json_pack("{s:b,s:i,s:s}", "preemptible",
					      f->classes[i].preemptible, "priority", f->classes[i].rank,
					      "signal", sigabbrev_np(f->classes[i].signal) ?
					      sigabbrev_np(f->classes[i].signal) : "?");

			set_duration(k, "grace", f->classes[i].grace_ms);
			json_object_set_new(cl, f->classes[i].name, k);
		}
		json_object_set_new(o, "classes", cl);
	}
	return o;
}
