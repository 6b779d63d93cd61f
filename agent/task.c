/*
 * task.c - task records, their JSON forms and the on-disk table (task.h).
 */
#include "task.h"
#include "config.h"
#include "safefile.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "usage.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const char *const state_names[] = {
	[TASK_STARTING] = DT_TASK_STARTING,
	[TASK_RUNNING] = DT_TASK_RUNNING,
	[TASK_STOPPING] = DT_TASK_STOPPING,
	[TASK_EXITED] = DT_TASK_EXITED,
	[TASK_FAILED] = DT_TASK_FAILED,
	[TASK_LOST] = DT_TASK_LOST,
};

const char *task_state_name(enum task_state s)
{
	return (unsigned)s < ARRAY_SIZE(state_names) ? state_names[s] : "unknown";
}

int task_state_parse(const char *name, enum task_state *out)
{
	for (size_t i = 0; i < ARRAY_SIZE(state_names); i++) {
		if (name && !strcmp(name, state_names[i])) {
			*out = (enum task_state)i;
			return 0;
		}
	}
	return -1;
}

int task_state_final(enum task_state s)
{
	return s == TASK_EXITED || s == TASK_FAILED || s == TASK_LOST;
}

int task_id_valid(const char *id)
{
	return id && id[0] != '.' && name_chars_ok(id, TASK_ID_MAX, "._-");
}

static int env_name_valid(const char *s)
{
	if (!*s || isdigit((unsigned char)*s))
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_')
			return 0;
	return 1;
}

/* A JSON string without embedded NUL bytes (they cannot reach execve). */
static int plain_string(const json_t *v)
{
	return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

static const char *const limit_keys[] = { "nofile", "nproc", "core", "memory_bytes", "pids" };

json_t *task_spec_validate(const json_t *req, struct strbuf *err)
{
	static const char *const known[] = {
		"id", "argv", "shell", "env", "cwd", "submit_dir", "cuda_visible_devices", "log",
		"log_root", "grace_ms", "limits", "job_id", "rank", "umask", "head", "container",
		"run_as",
	};
	json_t *spec = json_object(), *v;
	const char *key;

	json_object_foreach((json_t *)req, key, v) {
		size_t i;

		for (i = 0; i < ARRAY_SIZE(known); i++)
			if (!strcmp(key, known[i]))
				break;
		if (i == ARRAY_SIZE(known)) {
			strbuf_addf(err, "unknown field '%s' in task request", key);
			goto fail;
		}
	}
	v = json_object_get(req, "argv");
	if (!json_is_array(v) || !json_array_size(v)) {
		strbuf_addstr(err, "'argv' must be a non-empty array of strings");
		goto fail;
	}
	if (json_array_size(v) > 65536) {
		strbuf_addstr(err, "'argv' has too many items");
		goto fail;
	}
	for (size_t i = 0; i < json_array_size(v); i++) {
		if (!plain_string(json_array_get(v, i))) {
			strbuf_addf(err, "'argv[%zu]' must be a string without NUL bytes", i);
			goto fail;
		}
	}
	json_object_set(spec, "argv", v);

	v = json_object_get(req, "shell");
	if (v && !json_is_boolean(v)) {
		strbuf_addstr(err, "'shell' must be true or false");
		goto fail;
	}
	json_object_set_new(spec, "shell", json_boolean(json_is_true(v)));

	v = json_object_get(req, "env");
	if (v) {
		json_t *ev;
		const char *name;

		if (!json_is_object(v)) {
			strbuf_addstr(err, "'env' must be an object of strings");
			goto fail;
		}
		json_object_foreach(v, name, ev) {
			if (!env_name_valid(name) || !strcmp(name, DT_TASK_ID_ENV) ||
			    !strcmp(name, DT_TASK_MARKER_ENV) || !strcmp(name, DT_AGENT_SOCKET_ENV)) {
				strbuf_addf(err, "'env': '%s' is not a settable variable name", name);
				goto fail;
			}
			if (!plain_string(ev)) {
				strbuf_addf(err, "'env.%s' must be a string without NUL bytes", name);
				goto fail;
			}
		}
		json_object_set(spec, "env", v);
	} else {
		json_object_set_new(spec, "env", json_object());
	}

	/* team mode (docs/team.md): the user the task runs as, and their ids on the
	 * head; the agent checks them against this node's (agent.c, task_start) */
	v = json_object_get(req, "run_as");
	if (v && !json_is_null(v)) {
		const char *u = json_get_str(v, "user", NULL);

		if (!json_is_object(v) || !u || !*u || strlen(u) > 64 || strchr(u, '/') ||
		    !json_is_integer(json_object_get(v, "uid")) ||
		    !json_is_integer(json_object_get(v, "gid")) || json_get_int(v, "uid", -1) <= 0 ||
		    json_get_int(v, "gid", -1) < 0) {
			strbuf_addstr(err, "'run_as' must be {\"user\": name, \"uid\": N > 0, "
				      "\"gid\": N}");
			goto fail;
		}
		json_object_set_new(spec, "run_as", json_pack("{s:s,s:I,s:I}", "user", u, "uid",
			(json_int_t)json_get_int(v, "uid", -1), "gid",
			(json_int_t)json_get_int(v, "gid", -1)));
	}

	/* the umask of the task's files (cluster.yaml job_files); absent: the agent's */
	v = json_object_get(req, "umask");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
		  json_integer_value(v) > 0777)) {
		strbuf_addstr(err, "'umask' must be an integer from 0 to 0777 (511)");
		goto fail;
	}
	if (v)
		json_object_set(spec, "umask", v);

	for (int i = 0; i < 4; i++) {
		static const char *const paths[] = { "cwd", "log", "log_root", "submit_dir" };
		const char *k = paths[i];

		v = json_object_get(req, k);
		if (!v || json_is_null(v))
			continue;
		if (!plain_string(v) || json_string_value(v)[0] != '/') {
			strbuf_addf(err, "'%s' must be an absolute path", k);
			goto fail;
		}
		json_object_set(spec, k, v);
	}
	if (json_get_str(spec, "log_root", NULL)) {
		const char *rel = json_get_str(spec, "log", NULL) ?
			sf_below(json_get_str(spec, "log", NULL), json_get_str(spec, "log_root", NULL)) : NULL;

		if (!rel || !*rel) {
			strbuf_addstr(err, "'log' must be below 'log_root'");
			goto fail;
		}
	}

	v = json_object_get(req, "cuda_visible_devices");
	if (json_is_array(v)) {
		struct strbuf sb = STRBUF_INIT;

		for (size_t i = 0; i < json_array_size(v); i++) {
			json_t *d = json_array_get(v, i);

			if (!json_is_integer(d) || json_integer_value(d) < 0) {
				strbuf_release(&sb);
				strbuf_addstr(err, "'cuda_visible_devices' must be a string or an array of GPU indexes");
				goto fail;
			}
			strbuf_addf(&sb, "%s%lld", i ? "," : "", (long long)json_integer_value(d));
		}
		json_object_set_new(spec, "cuda_visible_devices", json_string(sb.buf));
		strbuf_release(&sb);
	} else if (v && !json_is_null(v)) {
		if (!plain_string(v)) {
			strbuf_addstr(err, "'cuda_visible_devices' must be a string or an array of GPU indexes");
			goto fail;
		}
		json_object_set(spec, "cuda_visible_devices", v);
	}

	v = json_object_get(req, "grace_ms");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
		  json_integer_value(v) > 3600 * 1000)) {
		strbuf_addstr(err, "'grace_ms' must be an integer from 0 to 3600000");
		goto fail;
	}
	json_object_set_new(spec, "grace_ms",
			    json_integer(v ? json_integer_value(v) : DT_TASK_GRACE_MS_DEFAULT));

	v = json_object_get(req, "limits");
	if (v) {
		json_t *lv;
		const char *name;

		if (!json_is_object(v)) {
			strbuf_addstr(err, "'limits' must be an object");
			goto fail;
		}
		json_object_foreach(v, name, lv) {
			size_t i;

			for (i = 0; i < ARRAY_SIZE(limit_keys); i++)
				if (!strcmp(name, limit_keys[i]))
					break;
			if (i == ARRAY_SIZE(limit_keys)) {
				strbuf_addf(err, "unknown limit '%s' (known: nofile, nproc, core, memory_bytes, pids)", name);
				goto fail;
			}
			if (!json_is_integer(lv) || json_integer_value(lv) < 0) {
				strbuf_addf(err, "limit '%s' must be a non-negative integer", name);
				goto fail;
			}
		}
		json_object_set(spec, "limits", v);
	}

	v = json_object_get(req, "job_id");
	if (v && !json_is_null(v)) {
		if (!plain_string(v)) {
			strbuf_addstr(err, "'job_id' must be a string");
			goto fail;
		}
		json_object_set(spec, "job_id", v);
	}
	v = json_object_get(req, "rank");
	if (v && !json_is_null(v)) {
		if (!json_is_integer(v)) {
			strbuf_addstr(err, "'rank' must be an integer");
			goto fail;
		}
		json_object_set(spec, "rank", v);
	}
	/* the state.db of the dtsched that started it (db.c, head_id_load) */
	v = json_object_get(req, "head");
	if (v && !json_is_null(v)) {
		if (!plain_string(v) || json_string_length(v) > 64) {
			strbuf_addstr(err, "'head' must be a string of at most 64 bytes");
			goto fail;
		}
		json_object_set(spec, "head", v);
	}
	v = json_object_get(req, "container");
	if (v && !json_is_null(v)) {
		const char *image = json_get_str(v, "image", NULL);
		const char *digest = json_get_str(v, "digest", NULL);
		const char *node = json_get_str(v, "node", NULL);
		const char *root = json_get_str(spec, "log_root", NULL);
		const char *why = image ? container_ref_invalid(image) : "an image";

		if (!json_is_object(v) || why) {
			strbuf_addf(err, "'container.image' must be %s", why ? why : "an image");
			goto fail;
		}
		if (image[0] == '/' && (!digest || !container_digest_valid(digest))) {
			strbuf_addstr(err, "'container.digest' must be sha256:<64 hex digits> for an "
				      "image file");
			goto fail;
		}
		if (image[0] == '/' && (!root || !sf_below(image, root) || !*sf_below(image, root))) {
			strbuf_addstr(err, "'container.image' must be a file below 'log_root' (the "
				      "shared dir)");
			goto fail;
		}
		if (node && !task_id_valid(node)) {
			strbuf_addstr(err, "'container.node' must be a node name");
			goto fail;
		}
		json_object_set(spec, "container", v);
	}
	return spec;
fail:
	json_decref(spec);
	return NULL;
}

void task_init(struct task *t)
{
	memset(t, 0, sizeof(*t));
}

void task_release(struct task *t)
{
	json_decref(t->spec);
	free(t->cgroup);
	free(t->error);
	free(t->log_error);
	json_decref(t->rank_exits);
	task_init(t);
}

static long long ts_parse(const json_t *j, const char *key)
{
	const char *s = json_get_str(j, key, NULL);
	long long v = s ? dt_timestamp_parse(s) : 0;

	return v > 0 ? v : 0;
}

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

json_t *task_to_json(const struct task *t, int api)
{
	json_t *j = json_object(), *spec = t->spec ? t->spec : json_object();
	json_t *v;

	json_object_set_new(j, "id", json_string(t->id));
	json_object_set_new(j, "state", json_string(task_state_name(t->state)));
	if (api) {
		json_t *keys = json_array();
		const char *k;

		json_object_set(j, "argv", json_object_get(spec, "argv") ? json_object_get(spec, "argv") : json_array());
		json_object_set_new(j, "shell", json_boolean(json_is_true(json_object_get(spec, "shell"))));
		json_object_set_new(j, "cwd", str_or_null(json_get_str(spec, "cwd", NULL)));
		json_object_set_new(j, "log", str_or_null(json_get_str(spec, "log", NULL)));
		json_object_foreach(json_object_get(spec, "env"), k, v)
			json_array_append_new(keys, json_string(k));
		json_object_set_new(j, "env_keys", keys);
		json_object_set_new(j, "job_id", str_or_null(json_get_str(spec, "job_id", NULL)));
		v = json_object_get(spec, "rank");
		json_object_set_new(j, "rank", v ? json_incref(v) : json_null());
		json_object_set_new(j, "cuda_visible_devices",
				    str_or_null(json_get_str(spec, "cuda_visible_devices", NULL)));
	} else {
		json_object_set(j, "spec", spec);
	}
	json_object_set_new(j, "pid", t->pid ? json_integer(t->pid) : json_null());
	json_object_set_new(j, "pgid", t->pgid ? json_integer(t->pgid) : json_null());
	json_object_set_new(j, "supervisor_pid", t->sup_pid ? json_integer(t->sup_pid) : json_null());
	if (!api) {
		json_object_set_new(j, "supervisor_start", json_integer((json_int_t)t->sup_start));
		if (t->marker[0])
			json_object_set_new(j, "marker", json_string(t->marker));
		if (t->vouches)
			json_object_set_new(j, "vouches", json_true());
	}
	json_object_set_new(j, "cgroup", str_or_null(t->cgroup));
	json_object_set_new(j, "exit_code", t->has_exit ? json_integer(t->exit_code) : json_null());
	json_object_set_new(j, "signal", t->signal ? json_integer(t->signal) : json_null());
	json_object_set_new(j, "error", str_or_null(t->error));
	json_object_set_new(j, "stop_requested", json_boolean(t->stop_requested));
	json_object_set_new(j, "leftovers_killed", json_integer(t->leftovers_killed));
	json_object_set_new(j, "containment", str_or_null(t->containment[0] ? t->containment : NULL));
	if (t->log_lost_lines || t->log_lost_bytes || t->log_error) {
		json_object_set_new(j, "log_lost_lines", json_integer(t->log_lost_lines));
		json_object_set_new(j, "log_lost_bytes", json_integer(t->log_lost_bytes));
		json_object_set_new(j, "log_error", str_or_null(t->log_error));
	}
	json_object_set_new(j, "created_at", json_timestamp(t->created_us));
	json_object_set_new(j, "started_at", json_timestamp(t->started_us));
	json_object_set_new(j, "ended_at", json_timestamp(t->ended_us));
	if (api && t->rank_exits)
		json_object_set(j, "rank_exits", t->rank_exits);
	if (!t->spec)
		json_decref(spec);
	return j;
}

int task_from_json(struct task *t, const json_t *j, struct strbuf *err)
{
	const char *id = json_get_str(j, "id", NULL);
	json_t *spec = json_object_get(j, "spec");
	const char *s;

	task_init(t);
	if (!json_is_object(j) || !task_id_valid(id)) {
		strbuf_addstr(err, "not a task record (no valid 'id')");
		return -1;
	}
	if (task_state_parse(json_get_str(j, "state", NULL), &t->state) < 0) {
		strbuf_addf(err, "task '%s': unknown state", id);
		return -1;
	}
	if (!json_is_object(spec) || !json_is_array(json_object_get(spec, "argv"))) {
		strbuf_addf(err, "task '%s': no spec", id);
		return -1;
	}
	memcpy(t->id, id, strlen(id) + 1);
	t->spec = json_incref(spec);
	t->pid = json_get_int(j, "pid", 0);
	t->pgid = json_get_int(j, "pgid", 0);
	t->sup_pid = json_get_int(j, "supervisor_pid", 0);
	t->sup_start = (unsigned long long)json_get_int(j, "supervisor_start", 0);
	s = json_get_str(j, "cgroup", NULL);
	t->cgroup = s ? xstrdup(s) : NULL;
	s = json_get_str(j, "marker", "");
	if (strlen(s) == TASK_MARKER_HEX && strspn(s, "0123456789abcdef") == TASK_MARKER_HEX)
		memcpy(t->marker, s, TASK_MARKER_HEX + 1);
	t->has_exit = json_is_integer(json_object_get(j, "exit_code"));
	t->exit_code = (int)json_get_int(j, "exit_code", 0);
	t->signal = (int)json_get_int(j, "signal", 0);
	s = json_get_str(j, "error", NULL);
	t->error = s ? xstrdup(s) : NULL;
	t->stop_requested = json_is_true(json_object_get(j, "stop_requested"));
	t->vouches = json_is_true(json_object_get(j, "vouches"));
	t->leftovers_killed = (int)json_get_int(j, "leftovers_killed", 0);
	snprintf(t->containment, sizeof(t->containment), "%s", json_get_str(j, "containment", ""));
	t->log_lost_lines = json_get_int(j, "log_lost_lines", 0);
	t->log_lost_bytes = json_get_int(j, "log_lost_bytes", 0);
	s = json_get_str(j, "log_error", NULL);
	t->log_error = s ? xstrdup(s) : NULL;
	t->created_us = ts_parse(j, "created_at");
	t->started_us = ts_parse(j, "started_at");
	t->ended_us = ts_parse(j, "ended_at");
	return 0;
}

void task_path(struct strbuf *sb, const char *dir, const char *id)
{
	strbuf_addf(sb, "%s/%s.json", dir, id);
}

int task_save(const char *dir, const struct task *t)
{
	struct strbuf path = STRBUF_INIT, body = STRBUF_INIT;
	json_t *j = task_to_json(t, 0);
	int ret;

	json_append(&body, j);
	strbuf_addch(&body, '\n');
	task_path(&path, dir, t->id);
	ret = write_file_replace(path.buf, body.buf, body.len, 0600);
	json_decref(j);
	strbuf_release(&path);
	strbuf_release(&body);
	return ret;
}

int task_load(const char *dir, const char *id, struct task *t, struct strbuf *err)
{
	struct strbuf path = STRBUF_INIT, body = STRBUF_INIT;
	json_t *j;
	int ret = -1;

	task_init(t);
	task_path(&path, dir, id);
	if (strbuf_read_file(&body, path.buf, 16 * 1024 * 1024) < 0) {
		strbuf_addf(err, "cannot read '%s': %s", path.buf, strerror(errno));
		goto out;
	}
	j = json_parse(body.buf, body.len, err);
	if (!j) {
		strbuf_addf(err, " (in '%s')", path.buf);
		goto out;
	}
	ret = task_from_json(t, j, err);
	if (!ret && strcmp(t->id, id)) {
		strbuf_addf(err, "'%s' holds task '%s'", path.buf, t->id);
		task_release(t);
		ret = -1;
	}
	json_decref(j);
out:
	strbuf_release(&path);
	strbuf_release(&body);
	return ret;
}

struct task *task_table_find(struct task_table *tt, const char *id)
{
	for (size_t i = 0; i < tt->nr; i++)
		if (!strcmp(tt->items[i]->id, id))
			return tt->items[i];
	return NULL;
}

void task_table_add(struct task_table *tt, struct task *t)
{
	ALLOC_GROW(tt->items, tt->nr + 1, tt->alloc);
	tt->items[tt->nr++] = t;
}

void task_table_remove(struct task_table *tt, const char *id)
{
	for (size_t i = 0; i < tt->nr; i++) {
		if (!strcmp(tt->items[i]->id, id)) {
			task_release(tt->items[i]);
			free(tt->items[i]);
			memmove(&tt->items[i], &tt->items[i + 1], (tt->nr - i - 1) * sizeof(*tt->items));
			tt->nr--;
			return;
		}
	}
}

void task_table_release(struct task_table *tt)
{
	for (size_t i = 0; i < tt->nr; i++) {
		task_release(tt->items[i]);
		free(tt->items[i]);
	}
	free(tt->items);
	tt->items = NULL;
	tt->nr = tt->alloc = 0;
}

int task_table_load_dir(struct task_table *tt, const char *dir, struct strbuf *err)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d) {
		if (errno != ENOENT)
			strbuf_addf(err, "cannot open '%s': %s\n", dir, strerror(errno));
		return 0;
	}
	while ((de = readdir(d))) {
		struct strbuf id = STRBUF_INIT, e = STRBUF_INIT;
		struct task *t;
		size_t len = strlen(de->d_name);

		if (len <= 5 || !ends_with(de->d_name, ".json"))
			continue;
		strbuf_add(&id, de->d_name, len - 5);
		if (!task_id_valid(id.buf) || task_table_find(tt, id.buf)) {
			strbuf_release(&id);
			continue;
		}
		t = xmalloc(sizeof(*t));
		if (task_load(dir, id.buf, t, &e) < 0) {
			strbuf_addf(err, "skipping task file: %s\n", e.buf);
			free(t);
		} else {
			task_table_add(tt, t);
			n++;
		}
		strbuf_release(&id);
		strbuf_release(&e);
	}
	closedir(d);
	return n;
}

struct proc_tree task_proc_tree(const struct task *t)
{
	struct proc_tree pt = { (pid_t)t->pgid, t->cgroup, DT_TASK_MARKER_ENV, t->marker, 0, 0 };

	if (!t->marker[0]) {
		pt.marker_name = DT_TASK_ID_ENV;
		pt.marker = t->id;
	}
	return pt;
}
