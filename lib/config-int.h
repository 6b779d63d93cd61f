/*
 * config-int.h - what the configuration loader's files share, private to
 * lib/config*.c (callers use config.h).
 *
 * config-yaml.c owns the YAML side: the raw-byte checks, the tree built from
 * libyaml's events (struct ynode, with every node's line and column), the
 * typed getters that turn a node into a value or one "file:line:col: key
 * 'a.b': expected ..., found ..." error, each_pair() and walk_map() for
 * every mapping, and the parse/load of a whole file through a struct
 * config_kind.  config-cluster.c, config-job.c and config-sweep.c each hold
 * one schema: the keys of their file, the checks across keys, defaults, JSON,
 * their kind's table and CONFIG_KIND_API() for config.h's entry points.
 *
 * Errors: every function that takes a struct ctx appends at most one line
 * to c->err and returns -1 (or NULL); nothing prints or exits.
 */
#ifndef DT_CONFIG_INT_H
#define DT_CONFIG_INT_H

#include "config.h"
#include "usage.h"

#include <jansson.h>
#include <stdarg.h>

#define MAX_DEPTH 64          /* nesting levels accepted in a file */

/* ------------------------------------------------------------ the tree */

enum ytype { Y_SCALAR, Y_MAP, Y_SEQ };

struct ynode {
	enum ytype type;
	int line, col;          /* 1-based */
	int plain;              /* scalar written without quotes */
	char *text;             /* scalar as written */
	char *expanded;         /* scalar after ${VAR} expansion, on first use */
	struct ynode **kids;    /* map: key, value, key, value...; seq: items */
	size_t nr, alloc;
};

/* Everything a walk needs to report errors and resolve relative paths. */
struct ctx {
	const char *name;       /* file name used in messages */
	char *dir;              /* directory relative paths are against, or NULL */
	struct strbuf *err;
};

/* Keys that W&B sweep files may hold but dtctl does not support, and why. */
struct foreign_key {
	const char *key;
	const char *hint;
};

typedef int (*key_fn)(struct ctx *c, const char *key, struct ynode *val, const char *path,
		      void *data);

/*
 * What differs between cluster.yaml, job.yaml and sweep.yaml for parsing and
 * loading: config_parse_kind() and config_load_kind() below do the rest.
 * cfg is the kind's struct (struct cluster_config for cluster.yaml), whose
 * char *path (the file it was loaded from) is at path_offset.
 */
struct config_kind {
	size_t path_offset;
	void (*defaults)(void *cfg);   /* the whole struct, before anything is read */
	int (*from_tree)(struct ctx *c, void *cfg, struct ynode *top);
	void (*release)(void *cfg);    /* what config.h's *_config_release() does */
};

void ynode_free(struct ynode *n);
/* "name:line:col: ..." into c->err; both return -1. */
int fail_at(struct ctx *c, int line, int col, const char *fmt, ...) DT_PRINTF(4, 5);
int fail(struct ctx *c, const struct ynode *n, const char *fmt, ...) DT_PRINTF(3, 4);
int is_null(const struct ynode *n);
/* The raw-byte checks and the tree of a whole file: a non-empty mapping. */
int load_tree(struct ctx *c, const char *buf, size_t len, struct ynode **rootp);

/* Values: `path` is the dotted key for messages ("ssh.port"). */
const char *scalar_value(struct ctx *c, struct ynode *n, const char *path);
int bad_value(struct ctx *c, const struct ynode *n, const char *path, const char *expected);
const char *want_scalar(struct ctx *c, struct ynode *n, const char *path,
			const char *expected);
int get_str(struct ctx *c, struct ynode *n, const char *path, char **out);
/* Strings that reach ssh_config, paths or a shell-like context (config-yaml.c):
 * a POSIX user name; a host name or address (<= 253 bytes, no range); a path
 * without control characters or a '..' component (and, no_quotes, without
 * quotes or backslashes). */
int get_user_name(struct ctx *c, struct ynode *n, const char *path, char **out);
int get_host_name(struct ctx *c, struct ynode *n, const char *path, char **out);
int host_name_ok(const char *s);
int get_safe_path(struct ctx *c, struct ynode *n, const char *path, int no_quotes, char **out);
int parse_long(const char *s, long long *v);
int get_int(struct ctx *c, struct ynode *n, const char *path, long long min, long long max,
	    const char *expected, int *out);
int get_bool(struct ctx *c, struct ynode *n, const char *path, int *out);
int is_number_text(const char *s);
int get_duration(struct ctx *c, struct ynode *n, const char *path, long long *ms);
int get_double(struct ctx *c, struct ynode *n, const char *path, double *out);
int get_enum(struct ctx *c, struct ynode *n, const char *path,
	     const char *const *names, int *out);

/* Walking mappings. */
void child_path(struct strbuf *sb, const char *parent, const char *key);
int find_duplicate(char **keys, size_t n, size_t *dup, size_t *first);
int check_keys(struct ctx *c, struct ynode *map, const char *path);
typedef int (*pair_fn)(struct ctx *c, struct ynode *key, struct ynode *val, const char *path,
		       void *data);
int each_pair(struct ctx *c, struct ynode *map, const char *path, const char *expected,
	      pair_fn fn, void *data);
int walk_map(struct ctx *c, struct ynode *map, const char *path, const char *const *keys,
	     const struct foreign_key *foreign, key_fn fn, void *data);
struct ynode *map_get(const struct ynode *map, const char *key);
int missing(struct ctx *c, const struct ynode *map, const char *path, const char *key,
	    const char *why);
int get_kvmap(struct ctx *c, struct ynode *map, const char *path, struct kvlist *l,
	      int env_names);
struct ynode *later(struct ynode *a, struct ynode *b);
/* config-fairshare.c: cluster.yaml's fairshare: section */
void fairshare_defaults(struct fairshare_config *f);
int fairshare_value(struct ctx *c, struct ynode *v, const char *path, struct fairshare_config *f);
void fairshare_release(struct fairshare_config *f);
json_t *fairshare_to_json(const struct fairshare_config *f);
char *resolve_path(const struct ctx *c, const char *rel);
char *dir_of(const char *path, int absolute);

/* config.h's *_config_parse() and *_config_load() for kind k (config-yaml.c). */
int config_parse_kind(const struct config_kind *k, void *cfg, const char *buf, size_t len,
		      const char *name, struct strbuf *err);
int config_load_kind(const struct config_kind *k, void *cfg, const char *path,
		     struct strbuf *err);

/*
 * config.h's typed entry points of one kind, the same for every kind but for
 * the struct: CONFIG_KIND_API(cluster) defines cluster_config_parse(),
 * cluster_config_load() and cluster_config_release() on the schema file's
 * table cluster_kind (struct config_kind) and struct cluster_config.
 */
#define CONFIG_KIND_API(kind)								\
	int kind##_config_parse(struct kind##_config *cfg, const char *buf, size_t len,	\
				const char *name, struct strbuf *err)			\
	{										\
		return config_parse_kind(&kind##_kind, cfg, buf, len, name, err);	\
	}										\
	int kind##_config_load(struct kind##_config *cfg, const char *path,		\
			       struct strbuf *err)					\
	{										\
		return config_load_kind(&kind##_kind, cfg, path, err);			\
	}										\
	void kind##_config_release(struct kind##_config *cfg)				\
	{										\
		kind##_kind.release(cfg);						\
	}

/* JSON pieces of the *_to_json() functions. */
json_t *str_or_null(const char *s);
void set_duration(json_t *obj, const char *key, long long ms);
json_t *kvlist_json(const struct kvlist *l);

/* config-job.c: a job from a mapping, also a sweep's inline job. */
int job_from_tree(struct ctx *c, struct job_config *j, struct ynode *top, const char *prefix,
		  int shape_only);

/* config-notify.c: a notify: list into its JSON form (notify-spec.h); *out
 * replaced (its old value freed) only on success */
int notify_from_tree(struct ctx *c, struct ynode *v, const char *path, json_t **out);

#endif
