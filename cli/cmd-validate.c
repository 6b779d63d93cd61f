/*
 * cmd-validate.c - `dtctl validate [--json] [--kind K] FILE...`: load each
 * configuration file with lib/config and print it resolved (every default
 * filled in), or print the loader's one-line error and exit 2.
 *
 * All files are loaded before anything is printed, so a bad file leaves
 * stdout empty.  Text output is YAML-like and meant for people; --json is
 * the stable machine form (one object, or an array for several files).
 */
#include "builtin.h"
#include "notify-spec.h"
#include "setup.h"
#include "config.h"
#include "json.h"
#include "parse-options.h"
#include "term.h"
#include "strbuf.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>

static int is_scalar(const json_t *j)
{
	return !json_is_object(j) && !json_is_array(j);
}

static void print_scalar(struct strbuf *out, const json_t *j)
{
	if (json_is_string(j)) {
		const char *s = json_string_value(j);

		/* quoted where a YAML reader would take it for something else */
		yaml_append_scalar(out, s, 0);
	} else if (json_is_null(j)) {
		strbuf_addstr(out, "~");
	} else if (json_is_integer(j)) {
		strbuf_addf(out, "%lld", (long long)json_integer_value(j));
	} else if (json_is_real(j)) {
		strbuf_addf(out, "%.15g", json_real_value(j));
	} else {
		strbuf_addstr(out, json_is_true(j) ? "true" : "false");
	}
}

static int is_flat_array(const json_t *a)
{
	size_t i;
	json_t *v;

	json_array_foreach(a, i, v)
		if (!is_scalar(v))
			return 0;
	return 1;
}

static void print_value(struct strbuf *out, const json_t *j, int indent);

/* "key: value" lines; *_ms twins of durations are left to --json. */
static void print_object(struct strbuf *out, const json_t *o, int indent, int first_inline)
{
	const char *key;
	json_t *v;
	int first = 1;

	json_object_foreach((json_t *)o, key, v) {
		if (ends_with(key, "_ms"))
			continue;
		if (!(first && first_inline))
			strbuf_addf(out, "%*s", indent, "");
		first = 0;
		/* user keys (env, labels, parameters) may hold what a YAML escape made */
		term_sanitize(out, key, strlen(key), 0);
		strbuf_addch(out, ':');
		if (is_scalar(v)) {
			strbuf_addch(out, ' ');
			print_scalar(out, v);
			strbuf_addch(out, '\n');
		} else if (json_is_object(v) && !json_object_size(v)) {
			strbuf_addstr(out, " {}\n");
		} else if (json_is_array(v) && is_flat_array(v)) {
			print_value(out, v, indent + 2);
		} else {
			strbuf_addch(out, '\n');
			print_value(out, v, indent + 2);
		}
	}
}

static void print_value(struct strbuf *out, const json_t *j, int indent)
{
	size_t i;
	json_t *v;

	if (json_is_object(j)) {
		print_object(out, j, indent, 0);
	} else if (is_flat_array(j)) {
		strbuf_addstr(out, " [");
		json_array_foreach(j, i, v) {
			if (i)
				strbuf_addstr(out, ", ");
			print_scalar(out, v);
		}
		strbuf_addstr(out, "]\n");
	} else {
		json_array_foreach(j, i, v) {
			strbuf_addf(out, "%*s- ", indent, "");
			if (json_is_object(v)) {
				print_object(out, v, indent + 2, 1);
			} else if (json_is_array(v)) {
				/* a list in a list (a sweep's values: [[64, 64], [128]]) */
				strbuf_setlen(out, out->len - 1);
				print_value(out, v, indent + 2);
			} else {
				print_scalar(out, v);
				strbuf_addch(out, '\n');
			}
		}
	}
}

/* Load one file as `kind` (NULL: detect) and return its resolved JSON. */
static json_t *load_one(const char *path, const char *kind, struct strbuf *err)
{
	json_t *j = NULL, *out;

	if (!kind && !(kind = config_detect_kind(path, err)))
		return NULL;
	if (!strcmp(kind, "cluster")) {
		struct cluster_config c;
		struct strbuf tpl = STRBUF_INIT;

		if (cluster_config_load(&c, path, err) < 0)
			return NULL;
		/* what init will read: a config naming a missing file is not valid */
		if (cluster_setup_template(&c, &tpl, err) < 0) {
			strbuf_release(&tpl);
			cluster_config_release(&c);
			return NULL;
		}
		strbuf_release(&tpl);
		j = cluster_config_to_json(&c);
		cluster_config_release(&c);
	} else if (!strcmp(kind, "job")) {
		struct job_config jc;

		if (job_config_load(&jc, path, err) < 0)
			return NULL;
		j = job_config_to_json(&jc);
		if (jc.notify)   /* shown: webhook URLs redacted (docs/notifications.md) */
			json_object_set_new(j, "notify", notify_list_redacted(jc.notify));
		job_config_release(&jc);
	} else {
		struct sweep_config s;
		struct strbuf warn = STRBUF_INIT;

		if (sweep_config_load(&s, path, err) < 0)
			return NULL;
		if (sweep_config_warnings(&s, &warn))
			for (char *l = warn.buf, *nl; (nl = strchr(l, '\n')); l = nl + 1) {
				*nl = '\0';
				warning("%s", term_str(l));
			}
		strbuf_release(&warn);
		j = sweep_config_to_json(&s);
		if (s.job.notify)
			json_object_set_new(json_object_get(j, "job"), "notify",
					    notify_list_redacted(s.job.notify));
		sweep_config_release(&s);
	}
	out = json_object();
	json_object_set_new(out, "kind", json_string(kind));
	json_object_update(out, j);
	json_decref(j);
	return out;
}

int cmd_validate(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl validate [--json] [--kind cluster|job|sweep] <file>...",
		NULL,
	};
	int json = 0, failed = 0;
	const char *kind = NULL;
	struct option opts[] = {
		OPT_BOOL(0, "json", &json, "print the resolved configuration as JSON"),
		OPT_STRING(0, "kind", &kind, "kind", "read the files as cluster, job or sweep files "
			   "(default: from their keys)"),
		OPT_END(),
	};
	json_t *all;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);   /* files: argv[1..argc] */
	if (argc < 1) {
		/* no file: the cluster's (-c, $DTCTL_CLUSTER, init's), checked by the setup */
		int code = cluster_setup(USE_CLUSTER);

		if (code)
			return code;
		if (!the_cluster.file) {
			usage_with_options(usage, opts, 1);
			return DT_EXIT_USAGE;
		}
		argv[1] = the_cluster.file;
		argc = 1;
	}
	if (kind && strcmp(kind, "cluster") != 0 && strcmp(kind, "job") != 0 &&
	    strcmp(kind, "sweep") != 0) {
		error("--kind: expected 'cluster', 'job' or 'sweep', found '%s'", kind);
		return DT_EXIT_USAGE;
	}
	all = json_array();
	for (int i = 0; i < argc; i++) {
		struct strbuf err = STRBUF_INIT;
		json_t *j = load_one(argv[i + 1], kind, &err);

		if (!j) {
			error("%s", err.buf);
			failed = 1;
		} else {
			json_array_append_new(all, j);
		}
		strbuf_release(&err);
	}
	if (!failed) {
		if (json) {
			json_doc_print_key("files", all);
		} else {
			size_t i;
			json_t *v;

			json_array_foreach(all, i, v) {
				struct strbuf out = STRBUF_INIT;

				strbuf_addf(&out, "%s# %s: %s file, valid\n", i ? "\n" : "",
					    term_str(json_string_value(json_object_get(v, "path"))),
					    term_str(json_string_value(json_object_get(v, "kind"))));
				print_object(&out, v, 0, 0);
				fputs(out.buf, stdout);
				strbuf_release(&out);
			}
		}
	}
	json_decref(all);
	return failed ? DT_EXIT_USAGE : DT_EXIT_OK;
}
