/*
 * config-job.c - the schema of job.yaml (config.h's struct job_config): its
 * keys, trainer: or command:, the checks across keys, defaults and JSON.
 * A sweep's job (inline or a file) is read by the same job_from_tree().
 * The YAML tree and the getters are config-yaml.c's (config-int.h).
 */
#include "config-int.h"
#include "hostrange.h"
#include "json.h"

#include <ctype.h>
#include <string.h>

/* ----------------------------------------------------------------- job */

static const char *const launchers[] = { "agent", "mpi", NULL };
static const char *const job_keys[] = {
	"name", "nodes", "gpus_per_node", "procs_per_node", "launcher", "trainer", "command",
	"shell", "workdir", "env", "timeout", "stall_after", "retries", "strict_logging",
	"line_buffered", "include_nodes", "exclude_nodes", "labels", "elastic", "preflight",
	"container", "notify", "project", "priority", "class", "share", NULL,
};
static const char *const share_modes[] = { "none", "group", NULL };
static const char *const elastic_keys[] = { "min_nodes", NULL };

struct job_state {
	struct job_config *j;
	struct ynode *trainer, *command, *gpn, *ppn, *launcher, *min_nodes;
};

static int elastic_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
		       void *data)
{
	struct job_state *st = data;

	st->min_nodes = v;   /* min_nodes */
	return get_int(c, v, path, 1, HOSTRANGE_MAX, "a positive number of nodes",
		       &st->j->elastic_min_nodes);
}

/* trainer: values are scalars, or lists of scalars joined with ','. */
static int trainer_option(struct ctx *c, struct ynode *k, struct ynode *v, const char *path,
			  void *data)
{
	struct job_config *j = data;
	struct strbuf val = STRBUF_INIT;

	if (v->type == Y_SEQ) {
		if (!v->nr)
			return bad_value(c, v, path, "a value or a non-empty list of values");
		for (size_t e = 0; e < v->nr; e++) {
			const char *s = want_scalar(c, v->kids[e], path, "a list of single values");

			if (!s) {
				strbuf_release(&val);
				return -1;
			}
			strbuf_addf(&val, "%s%s", e ? "," : "", s);
		}
	} else {
		const char *s = want_scalar(c, v, path, "a value or a list of values");

		if (!s)
			return -1;
		strbuf_addstr(&val, s);
	}
	kvlist_set(&j->trainer, k->text, val.buf);
	strbuf_release(&val);
	return 0;
}

static int trainer_value(struct ctx *c, struct job_config *j, struct ynode *map, const char *path)
{
	j->has_trainer = 1;
	return each_pair(c, map, path, "a mapping of trainer options", trainer_option, j);
}

static int node_spec(struct ctx *c, struct ynode *v, const char *path, char **out)
{
	struct strvec hosts = STRVEC_INIT;
	struct strbuf herr = STRBUF_INIT;
	int ret = 0;

	if (get_str(c, v, path, out) < 0)
		return -1;
	if (hostrange_expand(*out, &hosts, &herr) < 0)
		ret = fail(c, v, "key '%s': invalid host range '%s': %s", path, *out, herr.buf);
	strvec_clear(&hosts);
	strbuf_release(&herr);
	return ret;
}

static int job_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct job_state *st = data;
	struct job_config *j = st->j;
	int l;

	if (!strcmp(key, "name"))
		return get_str(c, v, path, &j->name);
	if (!strcmp(key, "nodes"))
		return get_int(c, v, path, 1, HOSTRANGE_MAX, "a positive number of nodes", &j->nodes);
	if (!strcmp(key, "gpus_per_node")) {
		st->gpn = v;
		return get_int(c, v, path, 1, 1024, "a positive number of GPUs", &j->gpus_per_node);
	}
	if (!strcmp(key, "procs_per_node")) {
		st->ppn = v;
		return get_int(c, v, path, 1, 100000, "a positive number of processes",
			       &j->procs_per_node);
	}
	if (!strcmp(key, "launcher")) {
		st->launcher = v;
		if (get_enum(c, v, path, launchers, &l) < 0)
			return -1;
		j->launcher = l ? LAUNCHER_MPI : LAUNCHER_AGENT;
		return 0;
	}
	if (!strcmp(key, "trainer")) {
		st->trainer = v;
		return trainer_value(c, j, v, path);
	}
	if (!strcmp(key, "command")) {
		st->command = v;
		return 0;   /* read once 'shell:' is known */
	}
	if (!strcmp(key, "shell"))
		return get_bool(c, v, path, &j->shell);
	if (!strcmp(key, "strict_logging"))
		return get_bool(c, v, path, &j->strict_logging);
	if (!strcmp(key, "share"))
		return get_enum(c, v, path, share_modes, &j->share_group);
	if (!strcmp(key, "line_buffered"))
		return get_bool(c, v, path, &j->line_buffered);
	if (!strcmp(key, "preflight"))
		return get_bool(c, v, path, &j->preflight);
	if (!strcmp(key, "workdir"))
		return get_str(c, v, path, &j->workdir);
	if (!strcmp(key, "container")) {
		const char *why;

		if (get_str(c, v, path, &j->container) < 0)
			return -1;
		why = container_ref_invalid(j->container);
		return why ? bad_value(c, v, path, why) : 0;
	}
	if (!strcmp(key, "env"))
		return get_kvmap(c, v, path, &j->env, 1);
	if (!strcmp(key, "project")) {
		if (get_str(c, v, path, &j->project) < 0)
			return -1;
		return fairshare_name_ok(j->project) ? 0 :
			bad_value(c, v, path, "a name of letters, digits, '.', '-' and '_'");
	}
	if (!strcmp(key, "class")) {
		if (get_str(c, v, path, &j->job_class) < 0)
			return -1;
		return fairshare_name_ok(j->job_class) ? 0 :
			bad_value(c, v, path, "a class name of cluster.yaml's fairshare.classes");
	}
	if (!strcmp(key, "priority"))
		return get_int(c, v, path, -1000000, 1000000,
			       "an integer from -1000000 to 1000000", &j->priority);
	if (!strcmp(key, "timeout"))
		return get_duration(c, v, path, &j->timeout_ms);
	if (!strcmp(key, "stall_after"))
		return get_duration(c, v, path, &j->stall_after_ms);
	if (!strcmp(key, "retries"))
		return get_int(c, v, path, 0, 1000, "a number of retries (0 or more)", &j->retries);
	if (!strcmp(key, "include_nodes"))
		return node_spec(c, v, path, &j->node_include);
	if (!strcmp(key, "exclude_nodes"))
		return node_spec(c, v, path, &j->node_exclude);
	if (!strcmp(key, "elastic"))
		return walk_map(c, v, path, elastic_keys, NULL, elastic_key, st);
	if (!strcmp(key, "notify"))
		return notify_from_tree(c, v, path, &j->notify);
	return get_kvmap(c, v, path, &j->labels, 0);   /* labels */
}

static int command_value(struct ctx *c, struct job_config *j, struct ynode *v, const char *path)
{
	struct strbuf sub = STRBUF_INIT;

	if (v->type == Y_SCALAR && !is_null(v)) {
		const char *s;

		if (!j->shell)
			return fail(c, v, "key '%s': expected a list of arguments such as "
				    "[python, train.py], found a string; write it as a list, or set "
				    "'shell: true' to run it with /bin/sh -c", path);
		if (!(s = scalar_value(c, v, path)))
			return -1;
		strvec_push(&j->command, s);
		return 0;
	}
	if (v->type != Y_SEQ || !v->nr)
		return bad_value(c, v, path, "a non-empty list of arguments");
	for (size_t i = 0; i < v->nr; i++) {
		const char *s;

		strbuf_reset(&sub);
		strbuf_addf(&sub, "%s[%zu]", path, i);
		if (!(s = want_scalar(c, v->kids[i], sub.buf, "a string"))) {
			strbuf_release(&sub);
			return -1;
		}
		strvec_push(&j->command, s);
	}
	strbuf_release(&sub);
	return 0;
}

/* A default job name: the trainer's model, or the program's base name. */
static char *default_job_name(const struct job_config *j)
{
	const char *model = kvlist_get(&j->trainer, "model");
	const char *prog, *slash;
	size_t len;

	if (j->has_trainer)
		return xstrdup(model && *model ? model : "dttrain");
	if (!j->command.nr)
		return xstrdup("job");
	prog = j->command.v[0];
	while (*prog == ' ')
		prog++;
	len = strcspn(prog, " \t");
	slash = memrchr(prog, '/', len);
	if (slash) {
		len -= (size_t)(slash + 1 - prog);
		prog = slash + 1;
	}
	return len ? xstrndup(prog, len) : xstrdup("job");
}

/*
 * A job from a mapping.  shape_only: a W&B sweep's job, whose command comes
 * from the sweep's program:/command:, so it gives neither.
 */
int job_from_tree(struct ctx *c, struct job_config *j, struct ynode *top, const char *prefix,
		  int shape_only)
{
	struct job_state st;
	struct strbuf sub = STRBUF_INIT, other = STRBUF_INIT;
	int ret = -1;

	memset(&st, 0, sizeof(st));
	st.j = j;
	if (walk_map(c, top, prefix, job_keys, NULL, job_key, &st) < 0)
		goto out;
	if (st.trainer && st.command) {
		struct ynode *second = later(st.trainer, st.command);

		child_path(&sub, prefix, second == st.command ? "command" : "trainer");
		child_path(&other, prefix, second == st.command ? "trainer" : "command");
		fail(c, second, "key '%s': cannot be used together with '%s'; a job runs either "
		     "the built-in trainer or a command", sub.buf, other.buf);
		goto out;
	}
	if (shape_only && (st.trainer || st.command)) {
		child_path(&sub, prefix, st.trainer ? "trainer" : "command");
		fail(c, st.trainer ? st.trainer : st.command, "key '%s': cannot be used with the "
		     "sweep's 'program:'/'command:', which say what each trial runs; keep only "
		     "the job's shape (nodes, gpus_per_node, env, ...) here", sub.buf);
		goto out;
	}
	if (!st.trainer && !st.command && !shape_only) {
		child_path(&sub, prefix, "trainer");
		child_path(&other, prefix, "command");
		fail(c, top, "missing required key '%s' or '%s' (what the job runs)", sub.buf,
		     other.buf);
		goto out;
	}
	if (st.gpn && st.ppn) {
		struct ynode *second = later(st.gpn, st.ppn);

		child_path(&sub, prefix, second == st.ppn ? "procs_per_node" : "gpus_per_node");
		child_path(&other, prefix, second == st.ppn ? "gpus_per_node" : "procs_per_node");
		fail(c, second, "key '%s': cannot be used together with '%s'; use one of them",
		     sub.buf, other.buf);
		goto out;
	}
	if (st.gpn)
		j->procs_per_node = 0;
	if (st.min_nodes && j->elastic_min_nodes > j->nodes) {
		child_path(&sub, prefix, "elastic.min_nodes");
		fail(c, st.min_nodes, "key '%s': must be at most 'nodes' (%d), found '%d'", sub.buf,
		     j->nodes, j->elastic_min_nodes);
		goto out;
	}
	if (st.command) {
		child_path(&sub, prefix, "command");
		if (command_value(c, j, st.command, sub.buf) < 0)
			goto out;
	}
	if (!st.launcher)
		j->launcher = st.trainer ? LAUNCHER_MPI : LAUNCHER_AGENT;
	if (!j->name)
		j->name = default_job_name(j);
	ret = 0;
out:
	strbuf_release(&sub);
	strbuf_release(&other);
	return ret;
}

static void job_defaults(void *cfg)
{
	struct job_config *j = cfg;

	memset(j, 0, sizeof(*j));
	j->nodes = 1;
	j->procs_per_node = 1;
	j->launcher = LAUNCHER_AGENT;
	j->preflight = PREFLIGHT_CONNECT;
	strvec_init(&j->command);
}

/* A job.yaml: the whole file is the job. */
static int job_file_from_tree(struct ctx *c, void *cfg, struct ynode *top)
{
	return job_from_tree(c, cfg, top, "", 0);
}

static void job_release(void *cfg)
{
	struct job_config *j = cfg;

	free(j->path);
	free(j->name);
	kvlist_release(&j->trainer);
	strvec_clear(&j->command);
	free(j->workdir);
	free(j->container);
	free(j->container_digest);
	kvlist_release(&j->env);
	free(j->node_include);
	free(j->node_exclude);
	kvlist_release(&j->labels);
	json_decref(j->notify);
	free(j->project);
	free(j->job_class);
	job_defaults(j);
}

static const struct config_kind job_kind = {
	offsetof(struct job_config, path), job_defaults, job_file_from_tree, job_release,
};

/* job_config_parse(), job_config_load(), job_config_release() */
CONFIG_KIND_API(job)

void job_config_init(struct job_config *j)
{
	job_defaults(j);
}

/*
 * An image is a path (a file on the shared dir: absolute, or ./ ../ relative
 * to where dtctl runs, which makes it absolute) or a name as container
 * engines spell them (registry/name:tag@sha256:..., or one `dtctl image
 * import` made); never something an engine would read as an option.
 */
const char *container_ref_invalid(const char *ref)
{
	if (!*ref)
		return "an image: a file on the shared dir or an image name";
	if (strlen(ref) > 4096)
		return "an image name or path of at most 4096 bytes";
	if (ref[0] == '/')
		return NULL;
	if (ref[0] == '-' || ref[0] == ':' || ref[0] == '@' ||
	    (ref[0] == '.' && strncmp(ref, "./", 2) && strncmp(ref, "../", 3)))
		return "a path to an image file (absolute, or starting with ./ or ../) or an image "
		       "name (letters, digits, '/', ':', '@', '.', '_', '-'; not starting with '-')";
	for (const char *p = ref; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("/:@._-", *p))
			return "an absolute path to an image file or an image name (letters, "
			       "digits, '/', ':', '@', '.', '_', '-')";
	return NULL;
}

int container_digest_valid(const char *d)
{
	if (strncmp(d, "sha256:", 7) || strlen(d) != 7 + 64)
		return 0;
	for (const char *p = d + 7; *p; p++)
		if (!isdigit((unsigned char)*p) && (*p < 'a' || *p > 'f'))
			return 0;
	return 1;
}

json_t *job_config_to_json(const struct job_config *j)
{
	json_t *o = json_object();

	json_object_set_new(o, "path", str_or_null(j->path));
	json_object_set_new(o, "name", str_or_null(j->name));
	json_object_set_new(o, "nodes", json_integer(j->nodes));
	json_object_set_new(o, "gpus_per_node", json_integer(j->gpus_per_node));
	json_object_set_new(o, "procs_per_node", json_integer(j->procs_per_node));
	json_object_set_new(o, "launcher", json_string(launchers[j->launcher == LAUNCHER_MPI]));
	if (j->has_trainer) {
		json_object_set_new(o, "trainer", kvlist_json(&j->trainer));
		json_object_set_new(o, "command", json_null());
	} else {
		json_object_set_new(o, "trainer", json_null());
		json_object_set_new(o, "command", json_strvec(&j->command));
	}
	json_object_set_new(o, "shell", json_boolean(j->shell));
	json_object_set_new(o, "workdir", str_or_null(j->workdir));
	if (j->container) {
		json_object_set_new(o, "container", json_string(j->container));
		json_object_set_new(o, "container_digest", str_or_null(j->container_digest));
	}
	json_object_set_new(o, "env", kvlist_json(&j->env));
	set_duration(o, "timeout", j->timeout_ms);
	set_duration(o, "stall_after", j->stall_after_ms);
	json_object_set_new(o, "retries", json_integer(j->retries));
	json_object_set_new(o, "strict_logging", json_boolean(j->strict_logging));
	if (j->share_group)
		json_object_set_new(o, "share", json_string("group"));
	if (j->line_buffered)
		json_object_set_new(o, "line_buffered", json_true());
	json_object_set_new(o, "include_nodes", str_or_null(j->node_include));
	json_object_set_new(o, "exclude_nodes", str_or_null(j->node_exclude));
	json_object_set_new(o, "labels", kvlist_json(&j->labels));
	if (j->preflight != PREFLIGHT_CONNECT)
		json_object_set_new(o, "preflight", json_boolean(j->preflight == PREFLIGHT_FABRIC));
	if (j->burn_in)
		json_object_set_new(o, "burn_in", json_true());
	if (j->elastic_min_nodes)
		json_object_set_new(o, "elastic_min_nodes", json_integer(j->elastic_min_nodes));
	if (j->notify)
		json_object_set_new(o, "notify", json_deep_copy(j->notify));
	if (j->project)
		json_object_set_new(o, "project", json_string(j->project));
	if (j->priority)
		json_object_set_new(o, "priority", json_integer(j->priority));
	if (j->job_class)
		json_object_set_new(o, "class", json_string(j->job_class));
	return o;
}
