/*
 * jobspec.c - job_config from JSON, checked (see jobspec.h).
 */
#include "jobspec.h"
#include "notify-spec.h"
#include "hostrange.h"

#include <ctype.h>
#include <string.h>

static int env_name_ok(const char *s)
{
	if (!s || !(isalpha((unsigned char)*s) || *s == '_'))
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_')
			return 0;
	return 1;
}

static int get_int(const json_t *o, const char *key, long long lo, long long hi, int *out,
		   struct strbuf *err)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
		strbuf_addf(err, "job: '%s' must be an integer from %lld to %lld", key, lo, hi);
		return -1;
	}
	*out = (int)json_integer_value(v);
	return 0;
}

static int get_ms(const json_t *o, const char *key, long long *out, struct strbuf *err)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0) {
		strbuf_addf(err, "job: '%s' must be a duration in milliseconds (>= 0)", key);
		return -1;
	}
	*out = json_integer_value(v);
	return 0;
}

static int get_str(const json_t *o, const char *key, char **out, struct strbuf *err)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v) || !*json_string_value(v)) {
		strbuf_addf(err, "job: '%s' must be a non-empty string", key);
		return -1;
	}
	free(*out);
	*out = xstrdup(json_string_value(v));
	return 0;
}

static int get_map(const json_t *o, const char *key, struct kvlist *out, int env,
		   struct strbuf *err)
{
	json_t *v = json_object_get(o, key), *x;
	const char *k;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v)) {
		strbuf_addf(err, "job: '%s' must be a mapping of strings", key);
		return -1;
	}
	json_object_foreach(v, k, x) {
		if (!json_is_string(x)) {
			strbuf_addf(err, "job: '%s.%s' must be a string", key, k);
			return -1;
		}
		if (env && !env_name_ok(k)) {
			strbuf_addf(err, "job: '%s': '%s' is not a valid variable name", key, k);
			return -1;
		}
		kvlist_set(out, k, json_string_value(x));
	}
	return 0;
}

static int get_hosts(const json_t *o, const char *key, char **out, struct strbuf *err)
{
	struct strvec hosts = STRVEC_INIT;
	struct strbuf herr = STRBUF_INIT;
	int ret = 0;

	if (get_str(o, key, out, err) < 0)
		return -1;
	if (*out && hostrange_expand(*out, &hosts, &herr) < 0) {
		strbuf_addf(err, "job: '%s': invalid host range '%s': %s", key, *out, herr.buf);
		ret = -1;
	}
	strvec_clear(&hosts);
	strbuf_release(&herr);
	return ret;
}

/* An optional boolean: absent or null is false. */
static int get_bool(const json_t *o, const char *key, int *out, struct strbuf *err)
{
	json_t *v = json_object_get(o, key);

	if (v && !json_is_null(v) && !json_is_boolean(v)) {
		strbuf_addf(err, "job: '%s' must be true or false", key);
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

int job_config_from_json(struct job_config *j, const json_t *o, struct strbuf *err)
{
	static const char *const known[] = {
		"path", "name", "nodes", "gpus_per_node", "procs_per_node", "launcher", "trainer",
		"command", "shell", "workdir", "env", "timeout", "timeout_ms", "stall_after",
		"stall_after_ms", "retries", "strict_logging", "line_buffered", "include_nodes", "exclude_nodes",
		"labels", "burn_in", "elastic_min_nodes", "preflight", "container", "container_digest",
		"notify", "project", "priority", "class", "share", NULL,
	};
	json_t *v, *x;
	const char *k;
	size_t i;

	job_config_init(j);
	if (!json_is_object(o)) {
		strbuf_addstr(err, "'job' must be an object (a job spec)");
		goto fail;
	}
	json_object_foreach((json_t *)o, k, v) {
		int ok = 0;

		for (i = 0; known[i]; i++)
			if (!strcmp(k, known[i]))
				ok = 1;
		if (!ok) {
			strbuf_addf(err, "job: unknown key '%s'", k);
			goto fail;
		}
	}
	if (get_str(o, "path", &j->path, err) < 0 || get_str(o, "name", &j->name, err) < 0 ||
	    get_int(o, "nodes", 1, 256, &j->nodes, err) < 0 ||
	    get_int(o, "gpus_per_node", 0, 64, &j->gpus_per_node, err) < 0 ||
	    get_int(o, "procs_per_node", 0, 64, &j->procs_per_node, err) < 0 ||
	    get_str(o, "workdir", &j->workdir, err) < 0 ||
	    get_str(o, "container", &j->container, err) < 0 ||
	    get_str(o, "container_digest", &j->container_digest, err) < 0 ||
	    get_map(o, "env", &j->env, 1, err) < 0 ||
	    get_ms(o, "timeout_ms", &j->timeout_ms, err) < 0 ||
	    get_ms(o, "stall_after_ms", &j->stall_after_ms, err) < 0 ||
	    get_int(o, "retries", 0, 1000, &j->retries, err) < 0 ||
	    get_int(o, "elastic_min_nodes", 0, 256, &j->elastic_min_nodes, err) < 0 ||
	    get_hosts(o, "include_nodes", &j->node_include, err) < 0 ||
	    get_hosts(o, "exclude_nodes", &j->node_exclude, err) < 0 ||
	    get_map(o, "labels", &j->labels, 0, err) < 0 ||
	    get_str(o, "project", &j->project, err) < 0 ||
	    get_str(o, "class", &j->job_class, err) < 0 ||
	    get_int(o, "priority", -1000000, 1000000, &j->priority, err) < 0)
		goto fail;
	if (j->job_class && !fairshare_name_ok(j->job_class)) {
		strbuf_addstr(err, "job: 'class' must be a name of letters, digits, '.', '-' and '_'");
		goto fail;
	}
	if (j->project && !fairshare_name_ok(j->project)) {
		strbuf_addstr(err, "job: 'project' must be a name of letters, digits, '.', '-' and '_'");
		goto fail;
	}
	if (j->gpus_per_node > 0 && j->procs_per_node > 0 && json_object_get(o, "procs_per_node") &&
	    json_object_get(o, "gpus_per_node")) {
		/* the YAML form sets procs_per_node 0 when gpus_per_node is given */
		strbuf_addstr(err, "job: 'gpus_per_node' and 'procs_per_node' cannot be used together");
		goto fail;
	}
	if (j->gpus_per_node > 0)
		j->procs_per_node = 0;
	else if (j->procs_per_node < 1)
		j->procs_per_node = 1;
	if (get_bool(o, "shell", &j->shell, err) < 0 ||
	    get_bool(o, "strict_logging", &j->strict_logging, err) < 0 ||
	    get_bool(o, "line_buffered", &j->line_buffered, err) < 0 ||
	    get_bool(o, "burn_in", &j->burn_in, err) < 0 ||
	    get_bool(o, "preflight", &j->preflight, err) < 0)
		goto fail;
	v = json_object_get(o, "preflight");
	if (!v || json_is_null(v))
		j->preflight = PREFLIGHT_CONNECT;   /* not set: the connectivity check */
	v = json_object_get(o, "notify");
	if (v && !json_is_null(v)) {
		struct strbuf why = STRBUF_INIT;

		if (notify_list_check(v, &why) < 0) {
			strbuf_addf(err, "job: %s", why.buf);
			strbuf_release(&why);
			goto fail;
		}
		j->notify = json_deep_copy(v);
	}
	if (j->container && (container_ref_invalid(j->container) || j->container[0] == '.')) {
		strbuf_addf(err, "job: 'container' must be %s", j->container[0] == '.' ?
			    "an absolute path (dtctl resolves ./ and ../)" :
			    container_ref_invalid(j->container));
		goto fail;
	}
	if (j->container_digest && (!j->container || !container_digest_valid(j->container_digest))) {
		strbuf_addstr(err, "job: 'container_digest' must be sha256:<64 hex digits>, with "
			      "'container'");
		goto fail;
	}
	if (j->container && j->container[0] == '/' && !j->container_digest) {
		strbuf_addstr(err, "job: an image file in 'container' needs its 'container_digest'");
		goto fail;
	}
	v = json_object_get(o, "share");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v) || (strcmp(json_string_value(v), "group") &&
					   strcmp(json_string_value(v), "none"))) {
			strbuf_addstr(err, "job: 'share' must be \"none\" or \"group\"");
			goto fail;
		}
		j->share_group = !strcmp(json_string_value(v), "group");
	}
	if (j->elastic_min_nodes > j->nodes) {
		strbuf_addstr(err, "job: 'elastic_min_nodes' must be at most 'nodes'");
		goto fail;
	}
	v = json_object_get(o, "launcher");
	if (v && !json_is_null(v)) {
		const char *l = json_string_value(v);

		if (!l || (strcmp(l, "agent") && strcmp(l, "mpi"))) {
			strbuf_addstr(err, "job: 'launcher' must be 'agent' or 'mpi'");
			goto fail;
		}
		j->launcher = !strcmp(l, "mpi") ? LAUNCHER_MPI : LAUNCHER_AGENT;
	}
	v = json_object_get(o, "trainer");
	x = json_object_get(o, "command");
	if (v && !json_is_null(v)) {
		if (x && !json_is_null(x)) {
			strbuf_addstr(err, "job: 'trainer' and 'command' cannot be used together");
			goto fail;
		}
		j->has_trainer = 1;
		if (get_map(o, "trainer", &j->trainer, 0, err) < 0)
			goto fail;
		if (!v || !json_object_get(o, "launcher"))
			j->launcher = LAUNCHER_MPI;
	} else if (x && !json_is_null(x)) {
		if (!json_is_array(x) || !json_array_size(x)) {
			strbuf_addstr(err, "job: 'command' must be a non-empty list of strings");
			goto fail;
		}
		json_array_foreach(x, i, v) {
			if (!json_is_string(v)) {
				strbuf_addf(err, "job: 'command[%zu]' must be a string", i);
				goto fail;
			}
			strvec_push(&j->command, json_string_value(v));
		}
		if (!*j->command.v[0]) {
			strbuf_addstr(err, "job: 'command[0]' (the program) is empty");
			goto fail;
		}
	} else {
		strbuf_addstr(err, "job: missing 'trainer' or 'command' (what the job runs)");
		goto fail;
	}
	/* one node (its dttrain run), or it and its peers of the fabric test */
	if (j->burn_in && (!j->node_include || (j->nodes != 1 && !kvlist_get(&j->trainer,
									  "fabric")))) {
		strbuf_addstr(err, "job: 'burn_in' is for one node named by 'include_nodes' "
			      "(dtctl resume --burn-in NODE), or a fabric test of the nodes it "
			      "names");
		goto fail;
	}
	if (!j->name)
		j->name = xstrdup(j->has_trainer ? "dttrain" : "job");
	return 0;
fail:
	job_config_release(j);
	return -1;
}
