/*
 * config-notify.c - a `notify:` list from YAML (cluster.yaml, job.yaml, a
 * sweep's job and sweep.yaml) into its JSON form (notify-spec.h), every
 * error at file:line:col.  The rules themselves are notify-spec.c's, which
 * dtsched applies again to what it is sent.
 */
#include "config-int.h"
#include "notify-spec.h"

#include <string.h>

struct notify_walk {
	json_t *t;   /* the target being read */
};

/* a scalar, or a list of scalars (one scalar is a list of one) */
static json_t *scalar_list(struct ctx *c, struct ynode *v, const char *path,
			   const char *expected)
{
	json_t *a = json_array();
	const char *s;

	if (v->type != Y_SEQ) {
		if (!(s = want_scalar(c, v, path, expected)))
			goto bad;
		json_array_append_new(a, json_string(s));
		return a;
	}
	for (size_t i = 0; i < v->nr; i++) {
		if (!(s = want_scalar(c, v->kids[i], path, expected)))
			goto bad;
		json_array_append_new(a, json_string(s));
	}
	return a;
bad:
	json_decref(a);
	return NULL;
}

static int notify_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
		      void *data)
{
	struct notify_walk *w = data;
	const char *why, *s;
	json_t *val;

	if (!strcmp(key, "timeout")) {
		long long ms;

		if (get_duration(c, v, path, &ms) < 0)
			return -1;
		key = "timeout_ms";
		val = json_integer(ms);
	} else if (!strcmp(key, "exec") || !strcmp(key, "on")) {
		val = scalar_list(c, v, path, !strcmp(key, "on") ? "a list of events" :
				  "a command: an absolute path, or a list [/path/cmd, arg, ...]");
		if (!val)
			return -1;
	} else {
		if (!(s = want_scalar(c, v, path, "a string")))
			return -1;
		val = json_string(s);
	}
	if (!strcmp(key, "on") && v->type == Y_SEQ) {
		/* name the item that is wrong, at its own line:col */
		for (size_t i = 0; i < v->nr; i++) {
			json_t *one = json_pack("[O]", json_array_get(val, i));

			why = notify_value_invalid(key, one);
			json_decref(one);
			if (why) {
				json_decref(val);
				return bad_value(c, v->kids[i], path, why);
			}
		}
	}
	why = notify_value_invalid(key, val);
	if (why && !strcmp(key, "webhook")) {
		/* never quote a webhook URL back: its path is the secret */
		struct strbuf red = STRBUF_INIT;

		notify_redact_url(&red, json_string_value(val));
		fail(c, v, "key '%s': expected %s, found '%s'", path, why, red.buf);
		strbuf_release(&red);
		json_decref(val);
		return -1;
	}
	if (why) {
		json_decref(val);
		return bad_value(c, v, path, why);
	}
	json_object_set_new(w->t, key, val);
	return 0;
}

int notify_from_tree(struct ctx *c, struct ynode *v, const char *path, json_t **out)
{
	struct strbuf sub = STRBUF_INIT;
	json_t *list;

	if (v->type != Y_SEQ || v->nr > NOTIFY_MAX_TARGETS)
		return bad_value(c, v, path, "a list of at most 16 targets such as "
				 "[{webhook: https://..., on: [fail, done]}, {email: me@lab, "
				 "on: [fail]}]");
	list = json_array();
	for (size_t i = 0; i < v->nr; i++) {
		struct notify_walk w = { json_object() };
		const char *why;

		strbuf_reset(&sub);
		strbuf_addf(&sub, "%s[%zu]", path, i);
		json_array_append_new(list, w.t);
		if (walk_map(c, v->kids[i], sub.buf, notify_keys, NULL, notify_key, &w) < 0)
			goto bad;
		if ((why = notify_target_invalid(w.t))) {
			fail(c, v->kids[i], "key '%s': %s", sub.buf, why);
			goto bad;
		}
	}
	strbuf_release(&sub);
	json_decref(*out);
	*out = list;
	return 0;
bad:
	strbuf_release(&sub);
	json_decref(list);
	return -1;
}
