/*
 * config.c - load cluster.yaml, job.yaml and sweep.yaml into the typed
 * structs of config.h.
 *
 * Three stages, each of which can fail with one "file:line:col: ..." line:
 *
 *   1. check the raw bytes: size limit, valid UTF-8, no control characters
 *      (libyaml's own reader errors carry no line, ours do);
 *   2. build a small tree from libyaml parser events (kept with the marks of
 *      every node; anchors, aliases and extra documents are refused);
 *   3. walk the tree with the schema of each file: every map goes through
 *      walk_map(), which refuses duplicate and unknown keys (with a
 *      "did you mean" from an edit distance over the keys valid there) and
 *      hands each known key to a handler that converts the value.
 *
 * ${VAR} and ${VAR:-default} are expanded in scalar values (never keys)
 * when a value is first read; "$${" stands for a literal "${".  Nothing here
 * prints or exits: every error is appended to the caller's strbuf and the
 * struct is released before returning -1.
 */
#include "config.h"
#include "dthome.h"
#include "json.h"
#include "hostrange.h"
#include "pyfmt.h"
#include "term.h"
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pwd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#define MAX_DEPTH 64          /* nesting levels accepted in a file */
#define GRID_MAX 1000000LL    /* largest grid a sweep may enumerate */
#define INT_UNIFORM_MAX 1e15   /* |bound| of int_uniform: exact in a double */
#define FOUND_MAX 40          /* characters of a bad value quoted in messages */

/* ---------------------------------------------------------------- kvlist */

void kvlist_set(struct kvlist *l, const char *key, const char *value)
{
	for (size_t i = 0; i < l->nr; i++) {
		if (!strcmp(l->items[i].key, key)) {
			free(l->items[i].value);
			l->items[i].value = xstrdup(value);
			return;
		}
	}
	ALLOC_GROW(l->items, l->nr + 1, l->alloc);
	l->items[l->nr].key = xstrdup(key);
	l->items[l->nr].value = xstrdup(value);
	l->nr++;
}

const char *kvlist_get(const struct kvlist *l, const char *key)
{
	for (size_t i = 0; i < l->nr; i++)
		if (!strcmp(l->items[i].key, key))
			return l->items[i].value;
	return NULL;
}

void kvlist_release(struct kvlist *l)
{
	for (size_t i = 0; i < l->nr; i++) {
		free(l->items[i].key);
		free(l->items[i].value);
	}
	free(l->items);
	memset(l, 0, sizeof(*l));
}

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

static void ynode_free(struct ynode *n)
{
	if (!n)
		return;
	for (size_t i = 0; i < n->nr; i++)
		ynode_free(n->kids[i]);
	free(n->kids);
	free(n->text);
	free(n->expanded);
	free(n);
}

/* setup.template: builtin:setup-node.sh is the template shipped with dtctl */
#define BUILTIN_PREFIX "builtin:"

/* Everything a walk needs to report errors and resolve relative paths. */
struct ctx {
	const char *name;       /* file name used in messages */
	char *dir;              /* directory relative paths are against, or NULL */
	struct strbuf *err;
};

static int fail_at(struct ctx *c, int line, int col, const char *fmt, ...) DT_PRINTF(4, 5);
static void vfail(struct ctx *c, int line, int col, const char *fmt, va_list ap) DT_PRINTF(4, 0);
static void vfail(struct ctx *c, int line, int col, const char *fmt, va_list ap)
{
	struct strbuf msg = STRBUF_INIT;

	strbuf_addf(&msg, "%s:%d:%d: ", c->name, line, col);
	strbuf_vaddf(&msg, fmt, ap);
	/* a key or value holding "\n" (quoted YAML) cannot break the one-line contract */
	term_sanitize(c->err, msg.buf, msg.len, 0);
	strbuf_release(&msg);
}

static int fail_at(struct ctx *c, int line, int col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(c, line, col, fmt, ap);
	va_end(ap);
	return -1;
}

static int fail(struct ctx *c, const struct ynode *n, const char *fmt, ...) DT_PRINTF(3, 4);
static int fail(struct ctx *c, const struct ynode *n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(c, n->line, n->col, fmt, ap);
	va_end(ap);
	return -1;
}

static int is_null(const struct ynode *n)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };

	if (n->type != Y_SCALAR || !n->plain)
		return 0;
	for (size_t i = 0; i < ARRAY_SIZE(nulls); i++)
		if (!strcmp(n->text, nulls[i]))
			return 1;
	return 0;
}

/* ------------------------------------------------ stage 1: the raw bytes */

/* Is code point cp a line break for libyaml (so our columns match its)? */
static int is_break(unsigned cp, const unsigned char *next, size_t left)
{
	if (cp == '\r')
		return !(left && *next == '\n');   /* CR LF counts once, at the LF */
	return cp == '\n' || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

/*
 * Refuse what libyaml would refuse without a line number: invalid UTF-8
 * and control characters.  Reports the first offender's line and column
 * (columns count characters, like libyaml's marks).
 */
static int check_text(struct ctx *c, const char *buf, size_t len)
{
	const unsigned char *s = (const unsigned char *)buf;
	int line = 1, col = 1;
	size_t i = 0;

	while (i < len) {
		unsigned cp;
		size_t n = utf8_decode(s + i, len - i, &cp);

		if (!n)
			return fail_at(c, line, col, "invalid UTF-8 byte 0x%02x; save the file as UTF-8",
				       s[i]);
		if ((cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0x7f ||
		    (cp >= 0x80 && cp <= 0x9f && cp != 0x85) || cp == 0xfffe || cp == 0xffff)
			return fail_at(c, line, col, "control character U+%04X is not allowed", cp);
		i += n;
		if (is_break(cp, s + i, len - i)) {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	return 0;
}

/* The character at a 0-based libyaml mark, or 0 when past the end. */
static unsigned char_at_mark(const char *buf, size_t len, size_t line0, size_t col0)
{
	const unsigned char *s = (const unsigned char *)buf;
	size_t i = 0, line = 0, col = 0;

	while (i < len) {
		unsigned cp;
		size_t n = utf8_decode(s + i, len - i, &cp);

		if (!n)
			return 0;
		if (line == line0 && col == col0)
			return cp;
		i += n;
		if (is_break(cp, s + i, len - i)) {
			if (line == line0)
				return 0;
			line++;
			col = 0;
		} else {
			col++;
		}
	}
	return 0;
}

/* Line and column (1-based) of a byte offset. */
static void offset_to_pos(const char *buf, size_t len, size_t off, int *line, int *col)
{
	const unsigned char *s = (const unsigned char *)buf;
	size_t i = 0;

	*line = *col = 1;
	while (i < len && i < off) {
		unsigned cp;
		size_t n = utf8_decode(s + i, len - i, &cp);

		if (!n)
			n = 1, cp = 0;
		i += n;
		if (is_break(cp, s + i, len - i)) {
			(*line)++;
			*col = 1;
		} else {
			(*col)++;
		}
	}
}

/* ---------------------------------------------- stage 2: events to a tree */

static int parser_error(struct ctx *c, yaml_parser_t *p, const char *buf, size_t len)
{
	int line, col;
	const char *problem = p->problem ? p->problem : "unknown problem";

	if (p->error == YAML_MEMORY_ERROR)
		return fail_at(c, 1, 1, "out of memory while parsing");
	if (p->error == YAML_READER_ERROR) {
		offset_to_pos(buf, len, p->problem_offset, &line, &col);
		return fail_at(c, line, col, "invalid YAML: %s", problem);
	}
	line = (int)p->problem_mark.line + 1;
	col = (int)p->problem_mark.column + 1;
	if (char_at_mark(buf, len, p->problem_mark.line, p->problem_mark.column) == '\t' ||
	    strstr(problem, "tab"))
		return fail_at(c, line, col, "tab character: YAML indentation must use spaces");
	if (p->context)
		return fail_at(c, line, col, "invalid YAML: %s (%s at line %d, column %d)", problem,
			       p->context, (int)p->context_mark.line + 1,
			       (int)p->context_mark.column + 1);
	return fail_at(c, line, col, "invalid YAML: %s", problem);
}

static struct ynode *ynode_new(enum ytype type, const yaml_mark_t *m)
{
	struct ynode *n = xcalloc(1, sizeof(*n));

	n->type = type;
	n->line = (int)m->line + 1;
	n->col = (int)m->column + 1;
	return n;
}

static void ynode_add(struct ynode *parent, struct ynode *kid)
{
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
	ALLOC_GROW(parent->kids, parent->nr + 1, parent->alloc);
	parent->kids[parent->nr++] = kid;
}

static int build_tree(struct ctx *c, const char *buf, size_t len, struct ynode **rootp)
{
	yaml_parser_t p;
	yaml_event_t ev;
	struct ynode *stack[MAX_DEPTH + 1];
	struct ynode *root = NULL;
	int depth = 0, docs = 0, ret = -1, done = 0;

	*rootp = NULL;
	if (!yaml_parser_initialize(&p))
		return fail_at(c, 1, 1, "out of memory while parsing");
	yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
	yaml_parser_set_encoding(&p, YAML_UTF8_ENCODING);

	while (!done) {
		struct ynode *n = NULL;
		const char *anchor = NULL;

		if (!yaml_parser_parse(&p, &ev)) {
			parser_error(c, &p, buf, len);
			goto out;
		}
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (++docs > 1) {
				fail_at(c, (int)ev.start_mark.line + 1, (int)ev.start_mark.column + 1,
					"a second YAML document; put one configuration per file");
				yaml_event_delete(&ev);
				goto out;
			}
			break;
		case YAML_ALIAS_EVENT:
			fail_at(c, (int)ev.start_mark.line + 1, (int)ev.start_mark.column + 1,
				"YAML aliases ('*%s') are not supported; write the value out",
				(const char *)ev.data.alias.anchor);
			yaml_event_delete(&ev);
			goto out;
		case YAML_SCALAR_EVENT:
			anchor = (const char *)ev.data.scalar.anchor;
			n = ynode_new(Y_SCALAR, &ev.start_mark);
			if (memchr(ev.data.scalar.value, 0, ev.data.scalar.length)) {
				fail(c, n, "a value contains a NUL character");
				ynode_free(n);
				yaml_event_delete(&ev);
				goto out;
			}
			n->text = xstrndup((const char *)ev.data.scalar.value, ev.data.scalar.length);
			n->plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
			break;
		case YAML_SEQUENCE_START_EVENT:
			anchor = (const char *)ev.data.sequence_start.anchor;
			n = ynode_new(Y_SEQ, &ev.start_mark);
			break;
		case YAML_MAPPING_START_EVENT:
			anchor = (const char *)ev.data.mapping_start.anchor;
			n = ynode_new(Y_MAP, &ev.start_mark);
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			if (depth > 0)
				depth--;
			break;
		default:
			break;
		}
		if (n) {
			if (anchor) {
				fail(c, n, "YAML anchors ('&%s') are not supported; write the value out",
				     anchor);
				ynode_free(n);
				yaml_event_delete(&ev);
				goto out;
			}
			if (depth)
				ynode_add(stack[depth - 1], n);
			else if (!root)
				root = n;
			else
				ynode_free(n);   /* cannot happen: one document, one root */
			if (n->type != Y_SCALAR) {
				if (depth == MAX_DEPTH) {
					fail(c, n, "nesting deeper than %d levels", MAX_DEPTH);
					yaml_event_delete(&ev);
					goto out;
				}
				stack[depth++] = n;
			}
		}
		yaml_event_delete(&ev);
	}
	*rootp = root;
	root = NULL;
	ret = 0;
out:
	ynode_free(root);
	yaml_parser_delete(&p);
	return ret;
}

/* Stages 1 and 2, and the checks every file shares: not empty, a mapping. */
static int load_tree(struct ctx *c, const char *buf, size_t len, struct ynode **rootp)
{
	struct ynode *root;

	*rootp = NULL;
	if (len > CONFIG_MAX_BYTES) {
		strbuf_addf(c->err, "%s: file is too large (%zu bytes; the limit is %d)",
			    c->name, len, CONFIG_MAX_BYTES);
		return -1;
	}
	if (check_text(c, buf, len) < 0 || build_tree(c, buf, len, &root) < 0)
		return -1;
	if (!root || (root->type == Y_SCALAR && root->plain && !*root->text)) {
		ynode_free(root);
		fail_at(c, 1, 1, "file is empty; expected a mapping of settings");
		return -1;
	}
	if (root->type != Y_MAP) {
		fail(c, root, "expected a mapping of settings at the top level, found %s",
		     root->type == Y_SEQ ? "a list" : "a single value");
		ynode_free(root);
		return -1;
	}
	*rootp = root;
	return 0;
}

/* --------------------------------------------------------- values */

static int valid_var_name(const char *s, size_t n)
{
	if (!n || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
			return 0;
	return 1;
}

/* Expand ${VAR}, ${VAR:-default} and the escape $${ in a scalar. */
static int expand_env(struct ctx *c, const struct ynode *n, const char *path, struct strbuf *out)
{
	const char *s = n->text;

	while (*s) {
		const char *end, *def;
		char *name;
		const char *val;
		size_t nlen;

		if (s[0] == '$' && s[1] == '$' && s[2] == '{') {
			strbuf_addstr(out, "${");
			s += 3;
			continue;
		}
		if (s[0] != '$' || s[1] != '{') {
			strbuf_addch(out, *s++);
			continue;
		}
		end = strchr(s + 2, '}');
		if (!end)
			return fail(c, n, "key '%s': unterminated '${' (write '$${' for a literal '${')",
				    path);
		def = strstr(s + 2, ":-");
		if (def && def > end)
			def = NULL;
		nlen = (size_t)((def ? def : end) - (s + 2));
		if (!valid_var_name(s + 2, nlen))
			return fail(c, n, "key '%s': invalid variable name '%.*s' in '${...}'", path,
				    (int)nlen, s + 2);
		name = xstrndup(s + 2, nlen);
		val = getenv(name);
		if (def && (!val || !*val)) {
			strbuf_add(out, def + 2, (size_t)(end - def - 2));
		} else if (!val) {
			fail(c, n, "key '%s': environment variable '%s' is not set "
			     "(use '${%s:-default}' for a default)", path, name, name);
			free(name);
			return -1;
		} else {
			strbuf_addstr(out, val);
		}
		free(name);
		s = end + 1;
	}
	return 0;
}

/* The value of a scalar node after expansion; NULL (error set) on failure. */
static const char *scalar_value(struct ctx *c, struct ynode *n, const char *path)
{
	if (!n->expanded) {
		struct strbuf sb = STRBUF_INIT;

		if (!strstr(n->text, "${")) {
			n->expanded = xstrdup(n->text);
		} else {
			if (expand_env(c, n, path, &sb) < 0) {
				strbuf_release(&sb);
				return NULL;
			}
			n->expanded = strbuf_detach(&sb, NULL);
		}
	}
	return n->expanded;
}

/* How a value appears in "found ..." messages. */
static void describe(struct strbuf *sb, const struct ynode *n)
{
	const char *s;
	size_t i = 0, chars = 0;

	if (n->type == Y_MAP) {
		strbuf_addstr(sb, "a mapping");
		return;
	}
	if (n->type == Y_SEQ) {
		strbuf_addstr(sb, n->nr ? "a list" : "an empty list");
		return;
	}
	if (is_null(n)) {
		strbuf_addstr(sb, "nothing");
		return;
	}
	s = n->expanded ? n->expanded : n->text;
	while (s[i] && s[i] != '\n' && chars < FOUND_MAX) {
		i++;
		while (((unsigned char)s[i] & 0xc0) == 0x80)
			i++;
		chars++;
	}
	strbuf_addf(sb, "'%.*s%s'", (int)i, s, s[i] ? "..." : "");
}

static int bad_value(struct ctx *c, const struct ynode *n, const char *path, const char *expected)
{
	struct strbuf found = STRBUF_INIT;

	describe(&found, n);
	fail(c, n, "key '%s': expected %s, found %s", path, expected, found.buf);
	strbuf_release(&found);
	return -1;
}

/* A non-null scalar's expanded text, or an error naming `expected`. */
static const char *want_scalar(struct ctx *c, struct ynode *n, const char *path,
			       const char *expected)
{
	if (n->type != Y_SCALAR || is_null(n)) {
		bad_value(c, n, path, expected);
		return NULL;
	}
	return scalar_value(c, n, path);
}

static int get_str(struct ctx *c, struct ynode *n, const char *path, char **out)
{
	const char *s = want_scalar(c, n, path, "a string");

	if (!s)
		return -1;
	free(*out);
	*out = xstrdup(s);
	return 0;
}

static int parse_long(const char *s, long long *v)
{
	char *end;

	if (!*s || !(isdigit((unsigned char)*s) || (*s == '-' && isdigit((unsigned char)s[1]))))
		return -1;
	errno = 0;
	*v = strtoll(s, &end, 10);
	return (*end || errno) ? -1 : 0;
}

static int get_int(struct ctx *c, struct ynode *n, const char *path, long long min, long long max,
		   const char *expected, int *out)
{
	const char *s = want_scalar(c, n, path, expected);
	long long v;

	if (!s)
		return -1;
	if (parse_long(s, &v) < 0 || v < min || v > max)
		return bad_value(c, n, path, expected);
	*out = (int)v;
	return 0;
}

static int get_bool(struct ctx *c, struct ynode *n, const char *path, int *out)
{
	static const char *const yes[] = { "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On" };
	static const char *const no[] = { "false", "False", "FALSE", "no", "No", "NO", "off", "Off" };
	const char *s = want_scalar(c, n, path, "true or false");

	if (!s)
		return -1;
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (!strcmp(s, yes[i]))
			return *out = 1, 0;
		if (!strcmp(s, no[i]))
			return *out = 0, 0;
	}
	return bad_value(c, n, path, "true or false");
}

static int is_number_text(const char *s)
{
	char *end;

	if (!*s || isspace((unsigned char)*s))
		return 0;
	strtod(s, &end);
	return !*end;
}

static int get_duration(struct ctx *c, struct ynode *n, const char *path, long long *ms)
{
	const char *s = want_scalar(c, n, path, "a duration such as '30s'");

	if (!s)
		return -1;
	if (parse_duration_ms(s, ms) == 0)
		return 0;
	if (is_number_text(s))
		return fail(c, n, "key '%s': expected a duration with a unit, found '%s'; "
			    "write '%ss' for seconds (units: ms, s, m, h, d)", path, s, s);
	return bad_value(c, n, path, "a duration such as '90s', '500ms' or '1h30m'");
}

static int get_double(struct ctx *c, struct ynode *n, const char *path, double *out)
{
	const char *s = want_scalar(c, n, path, "a number");
	char *end;

	if (!s)
		return -1;
	if (!is_number_text(s))
		return bad_value(c, n, path, "a number");
	*out = strtod(s, &end);
	if (!isfinite(*out))
		return bad_value(c, n, path, "a finite number");
	return 0;
}

/* One of `names` (NULL-terminated); *out gets its index. */
static int get_enum(struct ctx *c, struct ynode *n, const char *path,
		    const char *const *names, int *out)
{
	struct strbuf expected = STRBUF_INIT;
	const char *s;
	size_t nr = 0;
	int ret;

	while (names[nr])
		nr++;
	for (size_t i = 0; i < nr; i++)
		strbuf_addf(&expected, "%s'%s'", !i ? "" : i + 1 == nr ? " or " : ", ", names[i]);
	s = want_scalar(c, n, path, expected.buf);
	if (!s) {
		strbuf_release(&expected);
		return -1;
	}
	for (size_t i = 0; i < nr; i++) {
		if (!strcmp(s, names[i])) {
			*out = (int)i;
			strbuf_release(&expected);
			return 0;
		}
	}
	ret = bad_value(c, n, path, expected.buf);
	strbuf_release(&expected);
	return ret;
}

/* ------------------------------------------------------------ walking */

/* Damerau-Levenshtein (optimal string alignment) distance, case-blind. */
static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t *d, r;

	if (la > 64 || lb > 64)
		return SIZE_MAX;
	d = xcalloc((la + 1) * (lb + 1), sizeof(*d));
#define D(i, j) d[(i) * (lb + 1) + (j)]
	for (size_t i = 0; i <= la; i++)
		D(i, 0) = i;
	for (size_t j = 0; j <= lb; j++)
		D(0, j) = j;
	for (size_t i = 1; i <= la; i++) {
		for (size_t j = 1; j <= lb; j++) {
			int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
			size_t cost = ca != cb, v = D(i - 1, j) + 1;

			if (D(i, j - 1) + 1 < v)
				v = D(i, j - 1) + 1;
			if (D(i - 1, j - 1) + cost < v)
				v = D(i - 1, j - 1) + cost;
			if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == cb && D(i - 2, j - 2) + 1 < v)
				v = D(i - 2, j - 2) + 1;
			D(i, j) = v;
		}
	}
	r = D(la, lb);
#undef D
	free(d);
	return r;
}

/* The valid key closest to `key`, when close enough to be a typo. */
static const char *suggest(const char *key, const char *const *valid)
{
	const char *best = NULL;
	size_t best_d = SIZE_MAX;

	for (; *valid; valid++) {
		size_t d = edit_distance(key, *valid), len = strlen(*valid);
		size_t limit = len <= 3 ? 1 : len <= 8 ? 2 : 3;

		if (d <= limit && d < best_d) {
			best = *valid;
			best_d = d;
		}
	}
	return best;
}

static void child_path(struct strbuf *sb, const char *parent, const char *key)
{
	strbuf_reset(sb);
	if (*parent)
		strbuf_addf(sb, "%s.%s", parent, key);
	else
		strbuf_addstr(sb, key);
}

/* Keys that W&B sweep files may hold but dtctl does not support, and why. */
struct foreign_key {
	const char *key;
	const char *hint;
};

static int find_duplicate(char **keys, size_t n, size_t *dup, size_t *first);

/*
 * Every key of a mapping must be a scalar and appear once.  Reports the
 * first repeat in file order; large maps are checked by sorting.
 */
static int check_keys(struct ctx *c, struct ynode *map, const char *path)
{
	size_t n = map->nr / 2, dup = 0, first = 0;
	struct strbuf sub = STRBUF_INIT;
	int found = 0;

	for (size_t i = 0; i < n; i++) {
		struct ynode *k = map->kids[2 * i];

		if (k->type != Y_SCALAR)
			return fail(c, k, "%s%s%skeys must be plain strings, found %s",
				    *path ? "key '" : "", path, *path ? "': " : "",
				    k->type == Y_MAP ? "a mapping" : "a list");
	}
	if (n <= 32) {
		for (size_t i = 1; i < n && !found; i++) {
			for (size_t j = 0; j < i; j++) {
				if (!strcmp(map->kids[2 * i]->text, map->kids[2 * j]->text)) {
					dup = i;
					first = j;
					found = 1;
					break;
				}
			}
		}
	} else {
		char **keys = xcalloc(n, sizeof(*keys));

		for (size_t i = 0; i < n; i++)
			keys[i] = map->kids[2 * i]->text;
		found = find_duplicate(keys, n, &dup, &first);
		free(keys);
	}
	if (!found)
		return 0;
	child_path(&sub, path, map->kids[2 * dup]->text);
	fail(c, map->kids[2 * dup], "duplicate key '%s' (first at line %d, column %d)", sub.buf,
	     map->kids[2 * first]->line, map->kids[2 * first]->col);
	strbuf_release(&sub);
	return -1;
}

typedef int (*key_fn)(struct ctx *c, const char *key, struct ynode *val, const char *path,
		      void *data);

/*
 * Walk a mapping: refuse non-scalar, duplicate, foreign and unknown keys,
 * and call fn for each valid one in file order.  A null value (a key with
 * nothing after it) is an empty mapping.
 */
static int walk_map(struct ctx *c, struct ynode *map, const char *path, const char *const *keys,
		    const struct foreign_key *foreign, key_fn fn, void *data)
{
	struct strbuf sub = STRBUF_INIT;
	int ret = -1;

	if (is_null(map))
		return 0;
	if (map->type != Y_MAP)
		return bad_value(c, map, path, "a mapping");
	if (check_keys(c, map, path) < 0)
		goto out;
	for (size_t i = 0; i + 1 < map->nr; i += 2) {
		struct ynode *k = map->kids[i], *v = map->kids[i + 1];
		const char *known = NULL;

		child_path(&sub, path, k->text);
		for (size_t j = 0; keys[j]; j++)
			if (!strcmp(keys[j], k->text))
				known = keys[j];
		if (known) {
			if (fn(c, known, v, sub.buf, data) < 0)
				goto out;
			continue;
		}
		for (size_t j = 0; foreign && foreign[j].key; j++) {
			if (!strcmp(foreign[j].key, k->text)) {
				fail(c, k, "W&B key '%s' is unsupported by dtctl: %s", sub.buf,
				     foreign[j].hint);
				goto out;
			}
		}
		known = suggest(k->text, keys);
		if (known) {
			struct strbuf want = STRBUF_INIT;

			child_path(&want, path, known);
			fail(c, k, "unknown key '%s'; did you mean '%s'?", sub.buf, want.buf);
			strbuf_release(&want);
		} else {
			fail(c, k, "unknown key '%s'", sub.buf);
			strbuf_addstr(c->err, " (expected ");
			for (size_t j = 0; keys[j]; j++)
				strbuf_addf(c->err, "%s'%s'", j ? ", " : "", keys[j]);
			strbuf_addch(c->err, ')');
		}
		goto out;
	}
	ret = 0;
out:
	strbuf_release(&sub);
	return ret;
}

/* The value of `key` in a mapping, or NULL. */
static struct ynode *map_get(const struct ynode *map, const char *key)
{
	if (map->type != Y_MAP)
		return NULL;
	for (size_t i = 0; i + 1 < map->nr; i += 2)
		if (map->kids[i]->type == Y_SCALAR && !strcmp(map->kids[i]->text, key))
			return map->kids[i + 1];
	return NULL;
}

static int missing(struct ctx *c, const struct ynode *map, const char *path, const char *key,
		   const char *why)
{
	struct strbuf sub = STRBUF_INIT;

	child_path(&sub, path, key);
	fail(c, map, "missing required key '%s'%s", sub.buf, why ? why : "");
	strbuf_release(&sub);
	return -1;
}

static int valid_env_name(const char *s)
{
	return valid_var_name(s, strlen(s));
}

/*
 * A mapping of scalars into a kvlist (env:, labels:, vars:).  Null values
 * are empty strings.  env_names: keys must be environment variable names.
 */
static int get_kvmap(struct ctx *c, struct ynode *map, const char *path, struct kvlist *l,
		     int env_names)
{
	struct strbuf sub = STRBUF_INIT;
	int ret = -1;

	if (is_null(map))
		return 0;
	if (map->type != Y_MAP)
		return bad_value(c, map, path, "a mapping");
	if (check_keys(c, map, path) < 0)
		return -1;
	for (size_t i = 0; i + 1 < map->nr; i += 2) {
		struct ynode *k = map->kids[i], *v = map->kids[i + 1];
		const char *val;

		child_path(&sub, path, k->text);
		if (env_names && !valid_env_name(k->text)) {
			fail(c, k, "key '%s': '%s' is not a valid environment variable name",
			     sub.buf, k->text);
			goto out;
		}
		if (is_null(v)) {
			val = "";
		} else if (v->type != Y_SCALAR) {
			bad_value(c, v, sub.buf, "a single value");
			goto out;
		} else if (!(val = scalar_value(c, v, sub.buf))) {
			goto out;
		}
		kvlist_set(l, k->text, val);
	}
	ret = 0;
out:
	strbuf_release(&sub);
	return ret;
}

/* "dir/rel" unless rel is absolute or there is no dir; "~/x" is $HOME/x. */
static char *resolve_path(const struct ctx *c, const char *rel)
{
	const char *home = getenv("HOME");
	struct strbuf sb = STRBUF_INIT;

	if (rel[0] == '~' && rel[1] == '/' && home && *home)
		strbuf_addf(&sb, "%s/%s", home, rel + 2);
	else if (rel[0] == '/' || !c->dir)
		strbuf_addstr(&sb, rel);
	else
		strbuf_addf(&sb, "%s/%s", c->dir, rel);
	return strbuf_detach(&sb, NULL);
}

/*
 * The directory relative paths in `path` resolve against: absolute when
 * loading from a file (so the result survives a chdir or a copy of the
 * config), the name's own directory part when parsing from memory.
 */
static char *dir_of(const char *path, int absolute)
{
	const char *slash = strrchr(path, '/');
	struct strbuf sb = STRBUF_INIT;

	if (absolute && path[0] != '/') {
		char *cwd = getcwd(NULL, 0);

		if (cwd) {
			strbuf_addstr(&sb, cwd);
			free(cwd);
		}
		if (slash) {
			strbuf_addch(&sb, '/');
			strbuf_add(&sb, path, (size_t)(slash - path));
		}
		return sb.len ? strbuf_detach(&sb, NULL) : NULL;
	}
	if (!slash)
		return NULL;
	if (slash == path)
		return xstrdup("/");
	return xstrndup(path, (size_t)(slash - path));
}

static int read_config_file(const char *path, struct strbuf *buf, struct strbuf *err)
{
	if (strbuf_read_file(buf, path, CONFIG_MAX_BYTES) < 0) {
		if (errno == EFBIG)
			strbuf_addf(err, "%s: file is too large (more than %d bytes)", path,
				    CONFIG_MAX_BYTES);
		else
			strbuf_addf(err, "cannot read '%s': %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------- cluster */

static const char *const host_key_policies[] = { "tofu", "strict", NULL };
static const char *const install_modes[] = { "local", "shared", NULL };

#define PORT_EXPECTED "a port number (1-65535)"

static int ssh_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct cluster_config *cc = data;
	int pol;

	if (!strcmp(key, "port"))
		return get_int(c, v, path, 1, 65535, PORT_EXPECTED, &cc->ssh.port);
	if (!strcmp(key, "fanout"))
		return get_int(c, v, path, 1, 100000, "a positive integer", &cc->ssh.fanout);
	if (!strcmp(key, "connect_timeout"))
		return get_duration(c, v, path, &cc->ssh.connect_timeout_ms);
	if (!strcmp(key, "command_timeout"))
		return get_duration(c, v, path, &cc->ssh.command_timeout_ms);
	if (!strcmp(key, "host_key_policy")) {
		if (get_enum(c, v, path, host_key_policies, &pol) < 0)
			return -1;
		cc->ssh.host_key_policy = pol ? HOST_KEY_STRICT : HOST_KEY_TOFU;
		return 0;
	}
	if (get_str(c, v, path, &cc->ssh.identity) < 0)   /* identity */
		return -1;
	{
		char *p = resolve_path(c, cc->ssh.identity);

		free(cc->ssh.identity);
		cc->ssh.identity = p;
	}
	return 0;
}

static int setup_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct cluster_config *cc = data;

	if (!strcmp(key, "template")) {
		char *p;

		if (get_str(c, v, path, &cc->setup.template) < 0)
			return -1;
		cc->setup.template_pos.line = v->line;
		cc->setup.template_pos.col = v->col;
		if (starts_with(cc->setup.template, BUILTIN_PREFIX))
			return 0;
		p = resolve_path(c, cc->setup.template);
		free(cc->setup.template);
		cc->setup.template = p;
		return 0;
	}
	if (!strcmp(key, "timeout"))
		return get_duration(c, v, path, &cc->setup.timeout_ms);
	if (!strcmp(key, "env"))
		return get_kvmap(c, v, path, &cc->setup.env, 1);
	return get_kvmap(c, v, path, &cc->setup.vars, 0);   /* vars */
}

static int agent_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct cluster_config *cc = data;

	if (!strcmp(key, "port"))
		return get_int(c, v, path, 1, 65535, PORT_EXPECTED, &cc->agent.port);
	if (!strcmp(key, "heartbeat"))
		return get_duration(c, v, path, &cc->agent.heartbeat_ms);
	return get_duration(c, v, path, &cc->agent.dead_after_ms);   /* dead_after */
}

static int head_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct cluster_config *cc = data;

	if (!strcmp(key, "port"))
		return get_int(c, v, path, 1, 65535, PORT_EXPECTED, &cc->head.port);
	return get_str(c, v, path, &cc->head.address);   /* address */
}

static int network_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
		       void *data)
{
	struct cluster_config *cc = data;

	return get_str(c, v, path, &cc->network.interface);
}

static const char *const orted_launches[] = { "agent", "ssh", NULL };

static int mpi_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct cluster_config *cc = data;

	(void)key;   /* orted_launch, the only key */
	return get_enum(c, v, path, orted_launches, &cc->mpi.orted_ssh);
}

/* One nodes: entry before its host range is expanded. */
struct node_entry {
	char *host, *name, *user;
	int port, gpus, slots;
	struct kvlist labels;
	struct ynode *host_node, *name_node;
};

static int valid_node_name(const char *s)
{
	return name_chars_ok(s, SIZE_MAX, "._-");
}

static int valid_host_chars(const char *s)
{
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("._-:[],", *s))
			return 0;
	return 1;
}

static int node_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct node_entry *e = data;

	if (!strcmp(key, "host")) {
		e->host_node = v;
		if (get_str(c, v, path, &e->host) < 0)
			return -1;
		if (!valid_host_chars(e->host))
			return bad_value(c, v, path, "a host name, address or host range "
					 "(use 'user:' for the login name)");
		return 0;
	}
	if (!strcmp(key, "name")) {
		e->name_node = v;
		if (get_str(c, v, path, &e->name) < 0)
			return -1;
		if (!valid_node_name(e->name))
			return bad_value(c, v, path, "a node name of letters, digits, '.', '-' and '_'");
		return 0;
	}
	if (!strcmp(key, "user"))
		return get_str(c, v, path, &e->user);
	if (!strcmp(key, "port"))
		return get_int(c, v, path, 1, 65535, PORT_EXPECTED, &e->port);
	if (!strcmp(key, "gpus")) {
		if (v->type == Y_SCALAR && !strcmp(v->text, "auto")) {
			e->gpus = GPUS_AUTO;
			return 0;
		}
		return get_int(c, v, path, 0, 1024, "'auto' or a number of GPUs", &e->gpus);
	}
	if (!strcmp(key, "slots"))
		return get_int(c, v, path, 1, 1000000, "a positive integer", &e->slots);
	return get_kvmap(c, v, path, &e->labels, 0);   /* labels */
}

/* Per-node bookkeeping while loading, for messages naming both places. */
struct cluster_state {
	struct cluster_config *cc;
	struct ynode **origin;   /* per node: the name or host value it came from */
	char **origin_path;      /* per node: "nodes[2].name" or "nodes[2].host" */
	struct ynode **host_origin;   /* per node: its host value */
	char **host_path;             /* per node: "nodes[2].host" */
	size_t origin_alloc;
	struct ynode *nodes_node, *user_node;
	int saw_user;
};

static const char *const node_keys[] = {
	"host", "name", "user", "port", "gpus", "slots", "labels", NULL,
};

static int add_nodes(struct ctx *c, struct cluster_state *st, struct ynode *entry,
		     const char *path)
{
	struct cluster_config *cc = st->cc;
	struct node_entry e;
	struct strvec hosts = STRVEC_INIT;
	struct strbuf sub = STRBUF_INIT, herr = STRBUF_INIT;
	int ret = -1;

	memset(&e, 0, sizeof(e));
	e.gpus = GPUS_AUTO;
	if (entry->type == Y_SCALAR && !is_null(entry)) {
		/* "- gpu01" is short for "- host: gpu01" */
		e.host_node = entry;
		if (get_str(c, entry, path, &e.host) < 0)
			goto out;
	} else if (entry->type != Y_MAP) {
		bad_value(c, entry, path, "a mapping such as {host: gpu01}");
		goto out;
	} else if (walk_map(c, entry, path, node_keys, NULL, node_key, &e) < 0) {
		goto out;
	}
	if (!e.host) {
		missing(c, entry, path, "host", NULL);
		goto out;
	}
	child_path(&sub, path, "host");
	if (hostrange_expand(e.host, &hosts, &herr) < 0) {
		fail(c, e.host_node, "key '%s': invalid host range '%s': %s", sub.buf, e.host,
		     herr.buf);
		goto out;
	}
	if (e.name && hosts.nr > 1) {
		child_path(&sub, path, "name");
		fail(c, e.name_node, "key '%s': 'name' cannot be used when 'host' expands to %zu "
		     "hosts; node names are the host names", sub.buf, hosts.nr);
		goto out;
	}
	if (cc->nr_nodes + hosts.nr > HOSTRANGE_MAX) {
		fail(c, e.host_node, "key '%s': more than %d nodes in all", sub.buf, HOSTRANGE_MAX);
		goto out;
	}
	cc->nodes = xrealloc(cc->nodes, (cc->nr_nodes + hosts.nr) * sizeof(*cc->nodes));
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
	ALLOC_GROW(st->origin, cc->nr_nodes + hosts.nr, st->origin_alloc);
	st->origin_path = xrealloc(st->origin_path, st->origin_alloc * sizeof(*st->origin_path));
	st->host_origin = xrealloc(st->host_origin,
				   st->origin_alloc * sizeof(struct ynode *));
	st->host_path = xrealloc(st->host_path, st->origin_alloc * sizeof(*st->host_path));
	for (size_t i = 0; i < hosts.nr; i++) {
		struct cluster_node *n = &cc->nodes[cc->nr_nodes];

		memset(n, 0, sizeof(*n));
		n->host = xstrdup(hosts.v[i]);
		n->name = xstrdup(e.name ? e.name : hosts.v[i]);
		n->user = e.user ? xstrdup(e.user) : NULL;
		n->port = e.port;
		n->gpus = e.gpus;
		n->slots = e.slots;
		for (size_t k = 0; k < e.labels.nr; k++)
			kvlist_set(&n->labels, e.labels.items[k].key, e.labels.items[k].value);
		n->pos.line = entry->line;
		n->pos.col = entry->col;
		st->origin[cc->nr_nodes] = e.name ? e.name_node : e.host_node;
		child_path(&sub, path, e.name ? "name" : "host");
		st->origin_path[cc->nr_nodes] = xstrdup(entry->type == Y_SCALAR ? path : sub.buf);
		child_path(&sub, path, "host");
		st->host_origin[cc->nr_nodes] = e.host_node;
		st->host_path[cc->nr_nodes] = xstrdup(entry->type == Y_SCALAR ? path : sub.buf);
		cc->nr_nodes++;
	}
	ret = 0;
out:
	free(e.host);
	free(e.name);
	free(e.user);
	kvlist_release(&e.labels);
	strvec_clear(&hosts);
	strbuf_release(&sub);
	strbuf_release(&herr);
	return ret;
}

static int nodes_value(struct ctx *c, struct cluster_state *st, struct ynode *v, const char *path)
{
	struct strbuf sub = STRBUF_INIT;

	st->nodes_node = v;
	if (is_null(v))
		return 0;
	if (v->type != Y_SEQ)
		return bad_value(c, v, path, "a list of nodes");
	for (size_t i = 0; i < v->nr; i++) {
		strbuf_reset(&sub);
		strbuf_addf(&sub, "%s[%zu]", path, i);
		if (add_nodes(c, st, v->kids[i], sub.buf) < 0) {
			strbuf_release(&sub);
			return -1;
		}
	}
	strbuf_release(&sub);
	return 0;
}

static const char *const ssh_keys[] = {
	"port", "fanout", "connect_timeout", "command_timeout", "host_key_policy", "identity", NULL,
};
static const char *const setup_keys[] = { "template", "timeout", "env", "vars", NULL };
static const char *const agent_keys[] = { "port", "heartbeat", "dead_after", NULL };
static const char *const head_keys[] = { "address", "port", NULL };
static const char *const network_keys[] = { "interface", NULL };
static const char *const mpi_keys[] = { "orted_launch", NULL };
static const char *const cluster_keys[] = {
	"cluster", "user", "shared_dir", "ssh", "nodes", "setup", "install", "agent", "head",
	"network", "mpi", NULL,
};

static int cluster_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
		       void *data)
{
	struct cluster_state *st = data;
	struct cluster_config *cc = st->cc;

	if (!strcmp(key, "cluster")) {
		if (get_str(c, v, path, &cc->name) < 0)
			return -1;
		if (!valid_node_name(cc->name))
			return bad_value(c, v, path, "a name of letters, digits, '.', '-' and '_'");
		return 0;
	}
	if (!strcmp(key, "user")) {
		st->saw_user = 1;
		return get_str(c, v, path, &cc->user);
	}
	if (!strcmp(key, "shared_dir")) {
		size_t len;

		if (get_str(c, v, path, &cc->shared_dir) < 0)
			return -1;
		if (cc->shared_dir[0] != '/')
			return bad_value(c, v, path, "an absolute path (the same on every node)");
		len = strlen(cc->shared_dir);
		while (len > 1 && cc->shared_dir[len - 1] == '/')
			cc->shared_dir[--len] = '\0';
		return 0;
	}
	if (!strcmp(key, "ssh"))
		return walk_map(c, v, path, ssh_keys, NULL, ssh_key, cc);
	if (!strcmp(key, "nodes"))
		return nodes_value(c, st, v, path);
	if (!strcmp(key, "setup"))
		return walk_map(c, v, path, setup_keys, NULL, setup_key, cc);
	if (!strcmp(key, "install")) {
		int m;

		if (get_enum(c, v, path, install_modes, &m) < 0)
			return -1;
		cc->install = m ? INSTALL_SHARED : INSTALL_LOCAL;
		return 0;
	}
	if (!strcmp(key, "agent"))
		return walk_map(c, v, path, agent_keys, NULL, agent_key, cc);
	if (!strcmp(key, "head"))
		return walk_map(c, v, path, head_keys, NULL, head_key, cc);
	if (!strcmp(key, "mpi"))
		return walk_map(c, v, path, mpi_keys, NULL, mpi_key, cc);
	return walk_map(c, v, path, network_keys, NULL, network_key, cc);   /* network */
}

struct sort_item {
	const char *key;
	size_t idx;
};

static int cmp_sort_item(const void *a, const void *b)
{
	const struct sort_item *x = a, *y = b;
	int r = strcmp(x->key, y->key);

	return r ? r : (x->idx < y->idx ? -1 : x->idx > y->idx);
}

/*
 * Find the first (in file order) item whose key repeats an earlier one:
 * *dup gets its index, *first the earlier one.  Sorting keeps this
 * O(n log n) for clusters of thousands of nodes.
 */
static int find_duplicate(char **keys, size_t n, size_t *dup, size_t *first)
{
	struct sort_item *s = xcalloc(n ? n : 1, sizeof(*s));
	size_t best = SIZE_MAX, best_first = 0, group = 0;

	for (size_t i = 0; i < n; i++) {
		s[i].key = keys[i];
		s[i].idx = i;
	}
	qsort(s, n, sizeof(*s), cmp_sort_item);
	for (size_t i = 1; i < n; i++) {
		if (strcmp(s[i].key, s[i - 1].key) != 0) {
			group = i;
			continue;
		}
		if (s[i].idx < best) {
			best = s[i].idx;
			best_first = s[group].idx;
		}
	}
	free(s);
	if (best == SIZE_MAX)
		return 0;
	*dup = best;
	*first = best_first;
	return 1;
}

static int check_nodes(struct ctx *c, struct cluster_state *st, struct ynode *top)
{
	struct cluster_config *cc = st->cc;
	char **keys;
	size_t dup, first, local = SIZE_MAX;
	int ret = 0;

	if (!st->nodes_node)
		return missing(c, top, "", "nodes", NULL);
	if (!cc->nr_nodes)
		return fail(c, st->nodes_node, "key 'nodes': the node list is empty; "
			    "add at least one node (host: local for this machine)");
	for (size_t i = 0; i < cc->nr_nodes; i++) {
		if (strcmp(cc->nodes[i].host, "local") != 0)
			continue;
		if (local != SIZE_MAX)
			return fail(c, st->host_origin[i], "key '%s': 'host: local' may appear only "
				    "once (also at line %d, column %d)", st->host_path[i],
				    st->host_origin[local]->line, st->host_origin[local]->col);
		local = i;
	}
	keys = xcalloc(cc->nr_nodes, sizeof(*keys));
	for (size_t i = 0; i < cc->nr_nodes; i++)
		keys[i] = cc->nodes[i].name;
	if (find_duplicate(keys, cc->nr_nodes, &dup, &first)) {
		ret = fail(c, st->origin[dup], "key '%s': duplicate node name '%s' "
			   "(also at line %d, column %d)", st->origin_path[dup], cc->nodes[dup].name,
			   st->origin[first]->line, st->origin[first]->col);
		goto out;
	}
	for (size_t i = 0; i < cc->nr_nodes; i++) {
		struct strbuf sb = STRBUF_INIT;

		strbuf_addf(&sb, "%s:%d", cc->nodes[i].host, cc->nodes[i].port);
		keys[i] = strbuf_detach(&sb, NULL);
	}
	if (find_duplicate(keys, cc->nr_nodes, &dup, &first))
		ret = fail(c, st->host_origin[dup], "key '%s': duplicate host '%s' with port %d "
			   "(also at line %d, column %d)", st->host_path[dup], cc->nodes[dup].host,
			   cc->nodes[dup].port, st->host_origin[first]->line,
			   st->host_origin[first]->col);
	for (size_t i = 0; i < cc->nr_nodes; i++)
		free(keys[i]);
out:
	free(keys);
	return ret;
}

static char *login_name(void)
{
	const char *u = getenv("USER");
	struct passwd *pw;

	if (u && *u)
		return xstrdup(u);
	pw = getpwuid(getuid());
	return pw && pw->pw_name ? xstrdup(pw->pw_name) : NULL;
}

static void cluster_defaults(struct cluster_config *cc)
{
	memset(cc, 0, sizeof(*cc));
	cc->ssh.port = 22;
	cc->ssh.fanout = 32;
	cc->ssh.connect_timeout_ms = 10 * 1000;
	cc->ssh.command_timeout_ms = 10 * 60 * 1000;
	cc->ssh.host_key_policy = HOST_KEY_TOFU;
	cc->setup.timeout_ms = 10 * 60 * 1000;
	cc->install = INSTALL_LOCAL;
	cc->agent.port = 7070;
	cc->agent.heartbeat_ms = 2000;
	cc->agent.dead_after_ms = 10000;
	cc->head.port = 7071;
}

static int cluster_from_tree(struct ctx *c, struct cluster_config *cc, struct ynode *top)
{
	struct cluster_state st;
	int ret = -1;

	memset(&st, 0, sizeof(st));
	st.cc = cc;
	if (walk_map(c, top, "", cluster_keys, NULL, cluster_key, &st) < 0)
		goto out;
	if (!cc->shared_dir) {
		missing(c, top, "", "shared_dir", " (the directory all nodes share, e.g. an NFS mount)");
		goto out;
	}
	if (!cc->name)
		cc->name = xstrdup("dtctl");
	if (!cc->user && !(cc->user = login_name())) {
		missing(c, top, "", "user", " ($USER is not set)");
		goto out;
	}
	if (cc->agent.dead_after_ms <= cc->agent.heartbeat_ms) {
		struct ynode *agent = map_get(top, "agent");
		struct ynode *n = agent ? map_get(agent, "dead_after") : NULL;
		struct strbuf hb = STRBUF_INIT, da = STRBUF_INIT;

		format_duration(&hb, cc->agent.heartbeat_ms);
		format_duration(&da, cc->agent.dead_after_ms);
		fail(c, n ? n : agent ? agent : top, "key 'agent.dead_after': must be longer than "
		     "agent.heartbeat (%s), found '%s'", hb.buf, da.buf);
		strbuf_release(&hb);
		strbuf_release(&da);
		goto out;
	}
	for (size_t i = 0; i < cc->nr_nodes; i++) {
		if (!cc->nodes[i].user)
			cc->nodes[i].user = xstrdup(cc->user);
		if (!cc->nodes[i].port)
			cc->nodes[i].port = cc->ssh.port;
	}
	if (check_nodes(c, &st, top) < 0)
		goto out;
	ret = 0;
out:
	for (size_t i = 0; i < cc->nr_nodes; i++) {
		free(st.origin_path[i]);
		free(st.host_path[i]);
	}
	free(st.origin_path);
	free(st.origin);
	free(st.host_path);
	free(st.host_origin);
	return ret;
}

/*
 * What differs between cluster.yaml, job.yaml and sweep.yaml for parsing and
 * loading: config_parse_kind() and config_load_kind() below do the rest.
 */
struct config_kind {
	void (*defaults)(void *cfg);
	int (*from_tree)(struct ctx *c, void *cfg, struct ynode *top);
	void (*release)(void *cfg);
	char **(*path)(void *cfg);
};

static int config_parse_kind(const struct config_kind *k, void *cfg, const char *buf,
			     size_t len, const char *name, char *dir, struct strbuf *err);
static int config_load_kind(const struct config_kind *k, void *cfg, const char *path,
			    struct strbuf *err);

static void cluster_defaults_v(void *cfg) { cluster_defaults(cfg); }
static int cluster_from_tree_v(struct ctx *c, void *cfg, struct ynode *top)
{
	return cluster_from_tree(c, cfg, top);
}
static void cluster_release_v(void *cfg) { cluster_config_release(cfg); }
static char **cluster_path(void *cfg) { return &((struct cluster_config *)cfg)->path; }
static const struct config_kind cluster_kind = {
	cluster_defaults_v, cluster_from_tree_v, cluster_release_v, cluster_path
};

int cluster_config_parse(struct cluster_config *cc, const char *buf, size_t len, const char *name,
		     struct strbuf *err)
{
	return config_parse_kind(&cluster_kind, cc, buf, len, name, dir_of(name, 0), err);
}

/* Shared by the three *_load(): read, then parse with an absolute base dir. */
static int load_file(const char *path, struct strbuf *err, struct strbuf *buf, char **dir)
{
	if (read_config_file(path, buf, err) < 0)
		return -1;
	*dir = dir_of(path, 1);
	return 0;
}

/*
 * One parse for the three kinds: defaults, the YAML tree, the kind's own walk
 * over it; on error the struct is released (and stays valid to release again).
 * Takes ownership of dir.
 */
static int config_parse_kind(const struct config_kind *k, void *cfg, const char *buf,
			     size_t len, const char *name, char *dir, struct strbuf *err)
{
	struct ctx c = { name, dir, err };
	struct ynode *top = NULL;
	int ret = -1;

	k->defaults(cfg);
	*k->path(cfg) = xstrdup(name);
	if (load_tree(&c, buf, len, &top) == 0 && k->from_tree(&c, cfg, top) == 0)
		ret = 0;
	ynode_free(top);
	free(c.dir);
	if (ret < 0)
		k->release(cfg);
	return ret;
}

/* The same from a file: size limit, UTF-8 and a base dir for relative paths. */
static int config_load_kind(const struct config_kind *k, void *cfg, const char *path,
			    struct strbuf *err)
{
	struct strbuf buf = STRBUF_INIT;
	char *dir = NULL;
	int ret;

	if (load_file(path, err, &buf, &dir) < 0) {
		k->defaults(cfg);
		strbuf_release(&buf);
		return -1;
	}
	ret = config_parse_kind(k, cfg, buf.buf, buf.len, path, dir, err);
	strbuf_release(&buf);
	return ret;
}


int cluster_config_load(struct cluster_config *cc, const char *path, struct strbuf *err)
{
	return config_load_kind(&cluster_kind, cc, path, err);
}

void cluster_config_release(struct cluster_config *cc)
{
	free(cc->path);
	free(cc->name);
	free(cc->user);
	free(cc->shared_dir);
	free(cc->ssh.identity);
	for (size_t i = 0; i < cc->nr_nodes; i++) {
		free(cc->nodes[i].name);
		free(cc->nodes[i].host);
		free(cc->nodes[i].user);
		kvlist_release(&cc->nodes[i].labels);
	}
	free(cc->nodes);
	free(cc->setup.template);
	kvlist_release(&cc->setup.env);
	kvlist_release(&cc->setup.vars);
	free(cc->head.address);
	free(cc->network.interface);
	memset(cc, 0, sizeof(*cc));
}

int cluster_setup_template(const struct cluster_config *c, struct strbuf *path,
			   struct strbuf *err)
{
	const char *t = c->setup.template;
	const struct config_pos *pos = &c->setup.template_pos;
	struct strbuf where = STRBUF_INIT;
	struct stat st;
	int ret = 0, bad;

	if (!t)
		return 0;
	strbuf_addf(&where, "%s:%d:%d: key 'setup.template'", c->path ? c->path : "cluster.yaml",
		    pos->line, pos->col);
	if (starts_with(t, BUILTIN_PREFIX)) {
		struct strbuf found = STRBUF_INIT;

		if (dt_builtin_template(t + strlen(BUILTIN_PREFIX), &found) < 0) {
			strbuf_addf(err, "%s: no built-in template '%s' (looked for %s); the built-in "
				    "one is '%ssetup-node.sh', or name a file", where.buf,
				    t + strlen(BUILTIN_PREFIX), found.buf, BUILTIN_PREFIX);
			ret = -1;
		} else {
			strbuf_addbuf(path, &found);
		}
		strbuf_release(&found);
	} else if ((bad = stat(t, &st) < 0 || access(t, R_OK) < 0 ? errno :
			  !S_ISREG(st.st_mode) ? -1 : 0)) {
		const char *why = bad > 0 ? strerror(bad) : "not a regular file";

		strbuf_addf(err, "%s: cannot read '%s': %s; write 'template: %ssetup-node.sh' for "
			    "the one shipped with dtctl, or copy dtctl's templates/setup-node.sh there",
			    where.buf, t, why, BUILTIN_PREFIX);
		ret = -1;
	} else {
		strbuf_addstr(path, t);
	}
	strbuf_release(&where);
	return ret;
}

int cluster_find_node(const struct cluster_config *cc, const char *name)
{
	for (size_t i = 0; i < cc->nr_nodes; i++)
		if (!strcmp(cc->nodes[i].name, name))
			return (int)i;
	return -1;
}

/* ----------------------------------------------------------------- job */

static const char *const launchers[] = { "agent", "mpi", NULL };
static const char *const job_keys[] = {
	"name", "nodes", "gpus_per_node", "procs_per_node", "launcher", "trainer", "command",
	"shell", "workdir", "env", "timeout", "stall_after", "retries", "strict_logging",
	"include_nodes", "exclude_nodes", "labels", NULL,
};

struct job_state {
	struct job_config *j;
	struct ynode *trainer, *command, *gpn, *ppn, *launcher;
};

/* trainer: values are scalars, or lists of scalars joined with ','. */
static int trainer_value(struct ctx *c, struct job_config *j, struct ynode *map, const char *path)
{
	struct strbuf sub = STRBUF_INIT, val = STRBUF_INIT;
	int ret = -1;

	j->has_trainer = 1;
	if (is_null(map))
		return 0;
	if (map->type != Y_MAP)
		return bad_value(c, map, path, "a mapping of trainer options");
	if (check_keys(c, map, path) < 0)
		return -1;
	for (size_t i = 0; i + 1 < map->nr; i += 2) {
		struct ynode *k = map->kids[i], *v = map->kids[i + 1];

		child_path(&sub, path, k->text);
		strbuf_reset(&val);
		if (v->type == Y_SEQ) {
			if (!v->nr) {
				bad_value(c, v, sub.buf, "a value or a non-empty list of values");
				goto out;
			}
			for (size_t e = 0; e < v->nr; e++) {
				const char *s = want_scalar(c, v->kids[e], sub.buf, "a list of single values");

				if (!s)
					goto out;
				strbuf_addf(&val, "%s%s", e ? "," : "", s);
			}
		} else {
			const char *s = want_scalar(c, v, sub.buf, "a value or a list of values");

			if (!s)
				goto out;
			strbuf_addstr(&val, s);
		}
		kvlist_set(&j->trainer, k->text, val.buf);
	}
	ret = 0;
out:
	strbuf_release(&sub);
	strbuf_release(&val);
	return ret;
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
	if (!strcmp(key, "workdir"))
		return get_str(c, v, path, &j->workdir);
	if (!strcmp(key, "env"))
		return get_kvmap(c, v, path, &j->env, 1);
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

/* The later of two nodes in the file, for "cannot be used together" errors. */
static struct ynode *later(struct ynode *a, struct ynode *b)
{
	return (a->line > b->line || (a->line == b->line && a->col > b->col)) ? a : b;
}

/*
 * A job from a mapping.  shape_only: a W&B sweep's job, whose command comes
 * from the sweep's program:/command:, so it gives neither.
 */
static int job_from_tree(struct ctx *c, struct job_config *j, struct ynode *top, const char *prefix,
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

void job_config_init(struct job_config *j)
{
	memset(j, 0, sizeof(*j));
	j->nodes = 1;
	j->procs_per_node = 1;
	j->launcher = LAUNCHER_AGENT;
	strvec_init(&j->command);
}

void job_config_release(struct job_config *j)
{
	free(j->path);
	free(j->name);
	kvlist_release(&j->trainer);
	strvec_clear(&j->command);
	free(j->workdir);
	kvlist_release(&j->env);
	free(j->node_include);
	free(j->node_exclude);
	kvlist_release(&j->labels);
	job_config_init(j);
}

static void job_defaults_v(void *cfg) { job_config_init(cfg); }
static int job_from_tree_v(struct ctx *c, void *cfg, struct ynode *top)
{
	return job_from_tree(c, cfg, top, "", 0);
}
static void job_release_v(void *cfg) { job_config_release(cfg); }
static char **job_path(void *cfg) { return &((struct job_config *)cfg)->path; }
static const struct config_kind job_kind = {
	job_defaults_v, job_from_tree_v, job_release_v, job_path
};

int job_config_parse(struct job_config *j, const char *buf, size_t len, const char *name,
		 struct strbuf *err)
{
	return config_parse_kind(&job_kind, j, buf, len, name, dir_of(name, 0), err);
}

int job_config_load(struct job_config *j, const char *path, struct strbuf *err)
{
	return config_load_kind(&job_kind, j, path, err);
}

/* --------------------------------------------------------------- sweep */

static const char *const methods[] = { "grid", "random", "bayes", NULL };
static const char *const goals[] = { "minimize", "maximize", NULL };
static const char *const sweep_keys[] = {
	"method", "metric", "parameters", "early_terminate", "job", "max_trials", "parallel",
	"gpus_per_trial", "seed", "max_failures", "name", "description", "program", "command",
	"run_cap", "project", "entity", "checkpoint", NULL,
};
static const struct foreign_key sweep_foreign[] = {
	{ "controller", "dtsched is the controller; remove it" },
	{ "imports", "install packages in the node setup template; remove it" },
	{ "scheduler", "dtsched's search is grid, random or bayes (TPE); remove it" },
	{ "metrics", "dtctl optimises one metric; use 'metric:'" },
	{ "image_uri", "W&B Launch is not used; give 'program:' or 'job:'" },
	{ NULL, NULL },
};
static const char *const metric_keys[] = { "name", "goal", "target", NULL };
static const struct foreign_key metric_foreign[] = {
	{ "impute", "failed trials are left out of the bayes model; remove it" },
	{ "impute_while_running", "the bayes model sees finished trials only; remove it" },
	{ NULL, NULL },
};
static const char *const et_keys[] = { "type", "min_iter", "eta", "max_iter", "s", "strict", NULL };
static const char *const param_keys[] = {
	"value", "values", "distribution", "min", "max", "q", "mu", "sigma", "a", "b",
	"probabilities", "parameters", NULL,
};

/*
 * The distributions of W&B's sweep schema.  The first name of a kind is its
 * own (what the JSON form says); the others load as that kind with their
 * bounds turned into values: BOUNDS_EXP (log_uniform, q_log_uniform: min and
 * max are natural logs) and BOUNDS_NEG_EXP (inv_log_uniform: the value is
 * exp(-U(min, max)), log-uniform on [e^-max, e^-min]).
 */
enum { BOUNDS_VALUES, BOUNDS_EXP, BOUNDS_NEG_EXP };

static const struct {
	const char *name;
	enum param_kind kind;
	int bounds;
} distributions[] = {
	{ "constant", PARAM_VALUE, 0 },
	{ "categorical", PARAM_VALUES, 0 },
	{ "categorical_w_probabilities", PARAM_VALUES, 0 },
	{ "uniform", PARAM_UNIFORM, 0 },
	{ "int_uniform", PARAM_INT_UNIFORM, 0 },
	{ "log_uniform_values", PARAM_LOG_UNIFORM, BOUNDS_VALUES },
	{ "log_uniform", PARAM_LOG_UNIFORM, BOUNDS_EXP },
	/* exp(-U(-ln max, -ln min)) is log-uniform on [min, max] */
	{ "inv_log_uniform_values", PARAM_LOG_UNIFORM, BOUNDS_VALUES },
	{ "inv_log_uniform", PARAM_LOG_UNIFORM, BOUNDS_NEG_EXP },
	{ "q_uniform", PARAM_Q_UNIFORM, 0 },
	{ "q_log_uniform_values", PARAM_Q_LOG_UNIFORM, BOUNDS_VALUES },
	{ "q_log_uniform", PARAM_Q_LOG_UNIFORM, BOUNDS_EXP },
	{ "normal", PARAM_NORMAL, 0 },
	{ "q_normal", PARAM_Q_NORMAL, 0 },
	{ "log_normal", PARAM_LOG_NORMAL, 0 },
	{ "q_log_normal", PARAM_Q_LOG_NORMAL, 0 },
	{ "beta", PARAM_BETA, 0 },
	{ "q_beta", PARAM_Q_BETA, 0 },
};

const char *sweep_param_kind_name(enum param_kind k)
{
	for (size_t i = 0; i < ARRAY_SIZE(distributions); i++)
		if (distributions[i].kind == k)
			return distributions[i].name;
	return "parameters";
}

/* The keys of one parameter as written, before they are checked together. */
struct param_keys {
	struct ynode *value, *values, *dist, *min, *max, *q, *mu, *sigma, *a, *b, *probs, *nested;
};

static int param_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct param_keys *pk = data;
	struct {
		const char *key;
		struct ynode **slot;
	} slots[] = {
		{ "value", &pk->value }, { "values", &pk->values }, { "distribution", &pk->dist },
		{ "min", &pk->min }, { "max", &pk->max }, { "q", &pk->q }, { "mu", &pk->mu },
		{ "sigma", &pk->sigma }, { "a", &pk->a }, { "b", &pk->b },
		{ "probabilities", &pk->probs }, { "parameters", &pk->nested },
	};

	(void)c;
	(void)path;
	for (size_t i = 0; i < ARRAY_SIZE(slots); i++)
		if (!strcmp(key, slots[i].key))
			*slots[i].slot = v;
	return 0;
}

static int is_int_text(const char *s)
{
	long long v;

	return parse_long(s, &v) == 0;
}

/*
 * The JSON value a YAML 1.1 reader (PyYAML, which W&B uses) makes of a
 * plain scalar: null, booleans, decimal integers, floats with a '.'
 * (PyYAML reads 1e-3 as a string), else the string.  Quoted scalars are
 * strings.
 */
static json_t *yaml11_scalar(const char *s, int plain)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };
	static const char *const trues[] = { "true", "True", "TRUE", "yes", "Yes", "YES",
					     "on", "On", "ON", "y", "Y" };
	static const char *const falses[] = { "false", "False", "FALSE", "no", "No", "NO",
					      "off", "Off", "OFF", "n", "N" };
	const char *p = s;
	long long v;

	if (!plain)
		return json_string(s);
	for (size_t i = 0; i < ARRAY_SIZE(nulls); i++)
		if (!strcmp(s, nulls[i]))
			return json_null();
	/* PyYAML's bool resolver leaves y/n out (they stay strings) */
	for (size_t i = 0; i < ARRAY_SIZE(trues) - 2; i++) {
		if (!strcmp(s, trues[i]))
			return json_true();
		if (!strcmp(s, falses[i]))
			return json_false();
	}
	if (parse_long(s, &v) == 0 && strspn(s + (*s == '-' || *s == '+'), "0123456789") ==
	    strlen(s + (*s == '-' || *s == '+')))
		return json_integer(v);
	if (*p == '-' || *p == '+')
		p++;
	if (strchr(p, '.') && strspn(p, "0123456789.eE+-") == strlen(p) && is_number_text(s)) {
		const char *e = strpbrk(p, "eE");

		/* PyYAML: an exponent needs its sign (1.0e+3, not 1.0e3) */
		if (!e || e[1] == '+' || e[1] == '-')
			return json_real(strtod(s, NULL));
	}
	return json_string(s);
}

/* A value of values:/value: as JSON typed the YAML 1.1 way (lists and mappings too). */
static json_t *yaml11_value(struct ctx *c, struct ynode *v, const char *path, int depth)
{
	struct strbuf sub = STRBUF_INIT;
	json_t *o;

	if (depth > MAX_DEPTH) {
		fail(c, v, "key '%s': nested too deeply", path);
		return NULL;
	}
	if (v->type == Y_SCALAR) {
		const char *t = is_null(v) ? "" : scalar_value(c, v, path);

		return t ? yaml11_scalar(t, v->plain || is_null(v)) : NULL;
	}
	if (v->type == Y_MAP && check_keys(c, v, path) < 0)
		return NULL;
	o = v->type == Y_SEQ ? json_array() : json_object();
	for (size_t i = 0; i < v->nr; i += v->type == Y_SEQ ? 1 : 2) {
		json_t *kid;

		strbuf_reset(&sub);
		if (v->type == Y_SEQ) {
			strbuf_addf(&sub, "%s[%zu]", path, i);
			kid = yaml11_value(c, v->kids[i], sub.buf, depth + 1);
		} else {
			if (v->kids[i]->type != Y_SCALAR) {
				fail(c, v->kids[i], "key '%s': keys must be plain strings", path);
				goto fail;
			}
			child_path(&sub, path, v->kids[i]->text);
			kid = yaml11_value(c, v->kids[i + 1], sub.buf, depth + 1);
		}
		if (!kid)
			goto fail;
		if (v->type == Y_SEQ)
			json_array_append_new(o, kid);
		else
			json_object_set_new(o, v->kids[i]->text, kid);
	}
	strbuf_release(&sub);
	return o;
fail:
	strbuf_release(&sub);
	json_decref(o);
	return NULL;
}

/*
 * One value of values:/value: into p: the text as written (a list or
 * mapping as JSON) into values, its YAML 1.1 typed JSON into typed.
 */
static int param_value(struct ctx *c, struct sweep_param *p, struct ynode *v, const char *path)
{
	json_t *j = yaml11_value(c, v, path, 0);
	char *typed;

	if (!j)
		return -1;
	typed = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(17));
	if (v->type != Y_SCALAR) {
		struct strbuf text = STRBUF_INIT;

		/* as W&B's ${args_json} writes it: the text a trial is most likely to parse */
		py_json(&text, j);
		strvec_push(&p->values, text.buf);
		strbuf_release(&text);
	} else {
		strvec_push(&p->values, is_null(v) ? "null" : v->expanded);
	}
	strvec_push(&p->typed, typed);
	free(typed);
	json_decref(j);
	return 0;
}

/* bit per enum param_kind, for the keys each kind uses */
#define K(k) (1u << (k))
#define MINMAX_KINDS (K(PARAM_UNIFORM) | K(PARAM_INT_UNIFORM) | K(PARAM_LOG_UNIFORM) | \
		      K(PARAM_Q_UNIFORM) | K(PARAM_Q_LOG_UNIFORM))
#define NORMAL_KINDS (K(PARAM_NORMAL) | K(PARAM_Q_NORMAL) | K(PARAM_LOG_NORMAL) | \
		      K(PARAM_Q_LOG_NORMAL))
#define BETA_KINDS (K(PARAM_BETA) | K(PARAM_Q_BETA))
#define Q_KINDS (K(PARAM_Q_UNIFORM) | K(PARAM_Q_LOG_UNIFORM) | K(PARAM_Q_NORMAL) | \
		 K(PARAM_Q_LOG_NORMAL) | K(PARAM_Q_BETA))

/* A number key of a parameter into *out when given; > 0 when `positive`. */
static int param_number(struct ctx *c, struct ynode *n, const char *path, const char *key,
			int positive, double *out)
{
	struct strbuf sub = STRBUF_INIT;
	int ret = 0;

	if (!n)
		return 0;
	child_path(&sub, path, key);
	if (get_double(c, n, sub.buf, out) < 0)
		ret = -1;
	else if (positive && *out <= 0)
		ret = bad_value(c, n, sub.buf, "a positive number");
	strbuf_release(&sub);
	return ret;
}

/* probabilities: one non-negative number per value, summing to 1 */
static int param_probs(struct ctx *c, struct sweep_param *p, struct ynode *n, const char *path)
{
	struct strbuf sub = STRBUF_INIT;
	double sum = 0;
	int ret = -1;

	child_path(&sub, path, "probabilities");
	if (n->type != Y_SEQ || n->nr != p->values.nr) {
		fail(c, n, "key '%s': expected a list of %zu probabilities, one per value", sub.buf,
		     p->values.nr);
		goto out;
	}
	p->probs = xcalloc(n->nr, sizeof(*p->probs));
	for (size_t i = 0; i < n->nr; i++) {
		strbuf_reset(&sub);
		child_path(&sub, path, "probabilities");
		strbuf_addf(&sub, "[%zu]", i);
		if (get_double(c, n->kids[i], sub.buf, &p->probs[i]) < 0)
			goto out;
		if (p->probs[i] < 0) {
			bad_value(c, n->kids[i], sub.buf, "a probability of 0 or more");
			goto out;
		}
		sum += p->probs[i];
	}
	/* W&B draws from their running sum, so they must add up to 1 */
	if (fabs(sum - 1) > 1e-6) {
		child_path(&sub, path, "probabilities");
		fail(c, n, "key '%s': the probabilities add up to %g, not 1", sub.buf, sum);
		goto out;
	}
	ret = 0;
out:
	strbuf_release(&sub);
	return ret;
}

static int parse_param(struct ctx *c, struct sweep_config *s, struct ynode *m, const char *path,
		       const char *name, const struct strvec *segs, struct param_keys *pk)
{
	struct sweep_param *p;
	struct strbuf sub = STRBUF_INIT;
	const char *dname = NULL;
	int bounds = BOUNDS_VALUES, ret = -1;

	s->params = xrealloc(s->params, (s->nr_params + 1) * sizeof(*s->params));
	p = &s->params[s->nr_params++];
	memset(p, 0, sizeof(*p));
	strvec_init(&p->values);
	strvec_init(&p->typed);
	strvec_init(&p->path);
	strvec_pushv(&p->path, segs->v);
	p->name = xstrdup(name);
	p->pos.line = m->line;
	p->pos.col = m->col;
	p->q = 1.0;
	p->sigma = 1.0;
	p->a = p->b = 1.0;

	if (pk->value && pk->values) {
		struct ynode *second = later(pk->value, pk->values);

		child_path(&sub, path, second == pk->value ? "value" : "values");
		fail(c, second, "key '%s': cannot be used together with '%s'", sub.buf,
		     second == pk->value ? "values" : "value");
		goto out;
	}
	if (pk->dist) {
		size_t i;

		child_path(&sub, path, "distribution");
		if (!(dname = want_scalar(c, pk->dist, sub.buf, "a distribution name")))
			goto out;
		for (i = 0; i < ARRAY_SIZE(distributions); i++)
			if (!strcmp(dname, distributions[i].name))
				break;
		if (i == ARRAY_SIZE(distributions)) {
			struct strbuf names = STRBUF_INIT;

			for (size_t k = 0; k < ARRAY_SIZE(distributions); k++)
				strbuf_addf(&names, "%s%s", k ? ", " : "one of ",
					    distributions[k].name);
			bad_value(c, pk->dist, sub.buf, names.buf);
			strbuf_release(&names);
			goto out;
		}
		p->kind = distributions[i].kind;
		bounds = distributions[i].bounds;
		p->dist = xstrdup(dname);
	} else if (pk->value) {
		p->kind = PARAM_VALUE;
	} else if (pk->values) {
		p->kind = PARAM_VALUES;
	} else if (pk->min || pk->max) {
		struct ynode *given = pk->min ? pk->min : pk->max;
		const char *t;

		if (!pk->min || !pk->max) {
			missing(c, m, path, pk->min ? "max" : "min", NULL);
			goto out;
		}
		/* like W&B: int_uniform when both bounds are integers */
		child_path(&sub, path, given == pk->min ? "min" : "max");
		if (!(t = want_scalar(c, pk->min, sub.buf, "a number")))
			goto out;
		p->kind = PARAM_UNIFORM;
		if (is_int_text(t)) {
			child_path(&sub, path, "max");
			if (!(t = want_scalar(c, pk->max, sub.buf, "a number")))
				goto out;
			if (is_int_text(t))
				p->kind = PARAM_INT_UNIFORM;
		}
	} else if (pk->mu || pk->sigma || pk->q || pk->a || pk->b) {
		missing(c, m, path, "distribution", NULL);
		goto out;
	} else {
		fail(c, m, "key '%s': expected 'value', 'values', or 'min' and 'max'", path);
		goto out;
	}

	/* keys that do not belong to this kind */
	{
		const struct {
			struct ynode *n;
			const char *key;
			unsigned kinds;
		} uses[] = {
			{ pk->value, "value", K(PARAM_VALUE) },
			{ pk->values, "values", K(PARAM_VALUES) },
			{ pk->probs, "probabilities", K(PARAM_VALUES) },
			{ pk->min, "min", MINMAX_KINDS },
			{ pk->max, "max", MINMAX_KINDS },
			{ pk->q, "q", Q_KINDS },
			{ pk->mu, "mu", NORMAL_KINDS },
			{ pk->sigma, "sigma", NORMAL_KINDS },
			{ pk->a, "a", BETA_KINDS },
			{ pk->b, "b", BETA_KINDS },
		};

		for (size_t i = 0; i < ARRAY_SIZE(uses); i++) {
			if (uses[i].n && !(uses[i].kinds & K(p->kind))) {
				struct ynode *key = NULL;

				for (size_t k = 0; k + 1 < m->nr; k += 2)
					if (m->kids[k + 1] == uses[i].n)
						key = m->kids[k];
				child_path(&sub, path, uses[i].key);
				fail(c, key ? key : uses[i].n, "key '%s': not used by %s '%s'", sub.buf,
				     pk->dist ? "distribution" : "a parameter with",
				     pk->dist ? dname :
				     p->kind == PARAM_VALUE ? "value" : "values");
				goto out;
			}
		}
	}
	if (param_number(c, pk->q, path, "q", 1, &p->q) < 0)
		goto out;
	/* W&B: quantized values are integers when q is one (its default 1.0 is not) */
	p->q_int = pk->q && is_int_text(pk->q->expanded);

	switch (p->kind) {
	case PARAM_VALUE:
		if (!pk->value) {
			missing(c, m, path, "value", NULL);
			goto out;
		}
		child_path(&sub, path, "value");
		if (param_value(c, p, pk->value, sub.buf) < 0)
			goto out;
		break;
	case PARAM_VALUES:
		if (!pk->values) {
			missing(c, m, path, "values", NULL);
			goto out;
		}
		child_path(&sub, path, "values");
		if (pk->values->type != Y_SEQ || !pk->values->nr) {
			bad_value(c, pk->values, sub.buf, "a non-empty list of values");
			goto out;
		}
		for (size_t i = 0; i < pk->values->nr; i++) {
			strbuf_reset(&sub);
			child_path(&sub, path, "values");
			strbuf_addf(&sub, "[%zu]", i);
			if (param_value(c, p, pk->values->kids[i], sub.buf) < 0)
				goto out;
		}
		if (pk->probs && param_probs(c, p, pk->probs, path) < 0)
			goto out;
		if (!pk->probs && dname && !strcmp(dname, "categorical_w_probabilities")) {
			missing(c, m, path, "probabilities", NULL);
			goto out;
		}
		break;
	case PARAM_NORMAL:
	case PARAM_Q_NORMAL:
	case PARAM_LOG_NORMAL:
	case PARAM_Q_LOG_NORMAL:
		if (param_number(c, pk->mu, path, "mu", 0, &p->mu) < 0 ||
		    param_number(c, pk->sigma, path, "sigma", 1, &p->sigma) < 0)
			goto out;
		break;
	case PARAM_BETA:
	case PARAM_Q_BETA:
		if (param_number(c, pk->a, path, "a", 1, &p->a) < 0 ||
		    param_number(c, pk->b, path, "b", 1, &p->b) < 0)
			goto out;
		break;
	default: {   /* the min/max kinds */
		if (!pk->min || !pk->max) {
			missing(c, m, path, pk->min ? "max" : "min", NULL);
			goto out;
		}
		child_path(&sub, path, "min");
		if (get_double(c, pk->min, sub.buf, &p->min) < 0)
			goto out;
		if (p->kind == PARAM_INT_UNIFORM && (!is_int_text(pk->min->expanded) ||
						     fabs(p->min) > INT_UNIFORM_MAX)) {
			bad_value(c, pk->min, sub.buf, "an integer for int_uniform");
			goto out;
		}
		child_path(&sub, path, "max");
		if (get_double(c, pk->max, sub.buf, &p->max) < 0)
			goto out;
		if (p->kind == PARAM_INT_UNIFORM && (!is_int_text(pk->max->expanded) ||
						     fabs(p->max) > INT_UNIFORM_MAX)) {
			bad_value(c, pk->max, sub.buf, "an integer for int_uniform");
			goto out;
		}
		if (p->min > p->max) {
			fail(c, pk->min, "key '%s': min (%s) is greater than max (%s)", path,
			     pk->min->expanded, pk->max->expanded);
			goto out;
		}
		if (bounds != BOUNDS_VALUES) {
			/* natural-log bounds: the values are e^min .. e^max (or e^-max .. e^-min) */
			double lo = bounds == BOUNDS_EXP ? exp(p->min) : exp(-p->max);
			double hi = bounds == BOUNDS_EXP ? exp(p->max) : exp(-p->min);

			if (!(lo > 0) || !isfinite(hi)) {
				fail(c, pk->min, "key '%s': %s takes natural logs as bounds; e^%s .. "
				     "e^%s is outside a double (use %s_values with the values "
				     "themselves)", path, dname, pk->min->expanded, pk->max->expanded,
				     dname);
				goto out;
			}
			p->min = lo;
			p->max = hi;
		} else if ((p->kind == PARAM_LOG_UNIFORM || p->kind == PARAM_Q_LOG_UNIFORM) &&
			   p->min <= 0) {
			child_path(&sub, path, "min");
			fail(c, pk->min, "key '%s': %s needs min > 0, found '%s'", sub.buf,
			     dname ? dname : sweep_param_kind_name(p->kind), pk->min->expanded);
			goto out;
		}
		break;
	}
	}
	for (size_t i = 0; i + 1 < s->nr_params; i++) {
		if (!strcmp(s->params[i].name, name)) {
			fail(c, m, "key '%s': parameter '%s' is given twice (also at line %d, "
			     "column %d)", path, name, s->params[i].pos.line, s->params[i].pos.col);
			goto out;
		}
	}
	ret = 0;
out:
	strbuf_release(&sub);
	return ret;
}
#undef K

/* parameters: {name: {...}, group: {parameters: {...}}}, flattened. */
static int parse_params(struct ctx *c, struct sweep_config *s, struct ynode *map, const char *path,
			const char *prefix, struct strvec *segs, int depth)
{
	struct strbuf sub = STRBUF_INIT, name = STRBUF_INIT;
	int ret = -1;

	if (map->type != Y_MAP || !map->nr) {
		if (map->type == Y_MAP || is_null(map))
			return fail(c, map, "key '%s': no parameters to search", path);
		return bad_value(c, map, path, "a mapping of parameters");
	}
	if (check_keys(c, map, path) < 0)
		return -1;
	for (size_t i = 0; i + 1 < map->nr; i += 2) {
		struct ynode *k = map->kids[i], *v = map->kids[i + 1];
		struct param_keys pk;
		int r;

		child_path(&sub, path, k->text);
		strbuf_reset(&name);
		strbuf_addf(&name, "%s%s", prefix, k->text);
		if (v->type != Y_MAP) {
			bad_value(c, v, sub.buf, "a mapping such as {values: [...]} or "
				  "{min: ..., max: ...}");
			goto out;
		}
		memset(&pk, 0, sizeof(pk));
		if (walk_map(c, v, sub.buf, param_keys, NULL, param_key, &pk) < 0)
			goto out;
		strvec_push(segs, k->text);
		if (pk.nested) {
			struct strbuf nsub = STRBUF_INIT;

			if (v->nr > 2) {
				fail(c, v, "key '%s': a parameter with 'parameters:' (a nested group) "
				     "has no other keys", sub.buf);
				goto out;
			}
			if (depth >= 8) {
				fail(c, v, "key '%s': parameters nested too deeply", sub.buf);
				goto out;
			}
			child_path(&nsub, sub.buf, "parameters");
			strbuf_addch(&name, '.');
			r = parse_params(c, s, pk.nested, nsub.buf, name.buf, segs, depth + 1);
			strbuf_release(&nsub);
		} else {
			r = parse_param(c, s, v, sub.buf, name.buf, segs, &pk);
		}
		strvec_pop(segs);
		if (r < 0)
			goto out;
	}
	ret = 0;
out:
	strbuf_release(&sub);
	strbuf_release(&name);
	return ret;
}

struct sweep_state {
	struct sweep_config *s;
	struct ynode *method, *metric, *params, *et, *job, *max_trials, *run_cap, *command;
	struct ynode *program;
	const char *params_path;
};

/* A "file:line:col: ..." line for a W&B key that is accepted and not used. */
static void sweep_note(struct ctx *c, struct sweep_config *s, const struct ynode *n,
		       const char *fmt, ...) DT_PRINTF(4, 5);
static void sweep_note(struct ctx *c, struct sweep_config *s, const struct ynode *n,
		       const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	strbuf_addf(&sb, "%s:%d:%d: ", c->name, n->line, n->col);
	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	strvec_push(&s->notes, sb.buf);
	strbuf_release(&sb);
}

static int metric_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct sweep_config *s = data;
	int g;

	if (!strcmp(key, "name"))
		return get_str(c, v, path, &s->metric_name);
	if (!strcmp(key, "target")) {
		s->has_target = 1;
		return get_double(c, v, path, &s->target);
	}
	if (get_enum(c, v, path, goals, &g) < 0)   /* goal */
		return -1;
	s->goal = g ? GOAL_MAXIMIZE : GOAL_MINIMIZE;
	return 0;
}

struct et_state {
	struct sweep_config *s;
	struct ynode *eta, *s_key, *min_iter, *max_iter;
	double eta_value;
};

static int et_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct et_state *et = data;
	struct sweep_config *s = et->s;

	if (!strcmp(key, "type")) {
		const char *t = want_scalar(c, v, path, "'hyperband'");

		if (!t)
			return -1;
		if (strcmp(t, "hyperband") != 0)
			return bad_value(c, v, path, "'hyperband' (the only early termination dtctl "
					 "has)");
		return 0;
	}
	if (!strcmp(key, "min_iter")) {
		et->min_iter = v;
		return get_int(c, v, path, 1, INT_MAX, "a positive integer", &s->et_min_iter);
	}
	if (!strcmp(key, "eta")) {
		et->eta = v;
		/* W&B: a number above 1 */
		if (get_double(c, v, path, &et->eta_value) < 0)
			return -1;
		if (!(et->eta_value > 1))
			return bad_value(c, v, path, "a number above 1");
		s->et_eta = et->eta_value;
		return 0;
	}
	if (!strcmp(key, "s")) {
		et->s_key = v;
		return get_int(c, v, path, 1, 62, "a number of bands (1 or more)", &s->et_s);
	}
	if (!strcmp(key, "strict")) {
		int b;

		if (get_bool(c, v, path, &b) < 0)
			return -1;
		/* W&B's hyperband does not read it either */
		sweep_note(c, s, v, "note: '%s' is accepted and ignored, as W&B's hyperband does", path);
		return 0;
	}
	et->max_iter = v;
	return get_int(c, v, path, 1, INT_MAX, "a positive integer", &s->et_max_iter);   /* max_iter */
}

/*
 * W&B's bands with max_iter and s: max_iter / eta^k for k = 1..s, each
 * truncated, while >= 1.  They become ASHA's rungs as they are (they need
 * not be min_iter * eta^k: max_iter 100, s 3, eta 3 gives 3, 11, 33), kept
 * in increasing order; a band a truncation repeats is one rung.  max_iter
 * stays the end of training, not a rung; min_iter = the smallest band.
 */
static int et_bands(struct ctx *c, struct sweep_config *s, struct et_state *et, const char *path)
{
	int bands[64];
	double band = s->et_max_iter;
	int n = 0;

	if (!et->max_iter)
		return fail(c, et->s_key, "key '%s.s': needs 'max_iter' (W&B's bands are max_iter / "
			    "eta^k for k = 1..s)", path);
	for (int k = 0; k < s->et_s; k++) {
		band /= s->et_eta;
		if (band < 1)
			break;
		if (!n || (int)band != bands[n - 1])
			bands[n++] = (int)band;
	}
	if (!n)
		return fail(c, et->s_key, "key '%s.s': max_iter %d / eta %g is below 1: no band to "
			    "stop trials at; raise max_iter or lower eta", path, s->et_max_iter,
			    s->et_eta);
	for (int k = 0; k < n; k++)
		s->et_bands[k] = bands[n - 1 - k];
	s->et_nr_bands = n;
	if (et->min_iter)
		sweep_note(c, s, et->min_iter, "note: '%s.min_iter' is ignored with 'max_iter' and "
			   "'s', as W&B does: the bands are max_iter / eta^k", path);
	s->et_min_iter = bands[n - 1];
	return 0;
}

/*
 * W&B's command: a list of strings; an item that is exactly one of the
 * agent's macros is replaced per trial (sweep_wandb_argv()), any other item
 * is passed as written but for ${envvar:NAME}, which W&B replaces by the
 * variable's value (the name itself when unset) when the sweep starts.
 */
static const char *const wandb_macros[] = {
	"${env}", "${interpreter}", "${program}", "${args}", "${args_no_hyphens}",
	"${args_no_equals}", "${args_no_boolean_flags}", "${args_json}", "${args_json_file}",
	NULL,
};

static int wandb_command(struct ctx *c, struct sweep_config *s, struct ynode *v, const char *path)
{
	struct strbuf sub = STRBUF_INIT, item = STRBUF_INIT;
	int ret = -1;

	if (v->type != Y_SEQ || !v->nr)
		return bad_value(c, v, path, "a non-empty list such as [${env}, ${interpreter}, "
				 "${program}, ${args}]");
	for (size_t i = 0; i < v->nr; i++) {
		struct ynode *n = v->kids[i];
		const char *t;
		size_t len;

		strbuf_reset(&sub);
		strbuf_addf(&sub, "%s[%zu]", path, i);
		if (n->type != Y_SCALAR || is_null(n)) {
			bad_value(c, n, sub.buf, "a string");
			goto out;
		}
		/* as written: ${...} here is W&B's, not an environment variable of dtctl's */
		t = n->text;
		len = strlen(t);
		if (len > 3 && !strncmp(t, "${", 2) && t[len - 1] == '}' && !strchr(t + 2, '$')) {
			size_t k;

			for (k = 0; wandb_macros[k]; k++)
				if (!strcmp(t, wandb_macros[k]))
					break;
			if (!wandb_macros[k] && strncmp(t, "${envvar:", 9)) {
				fail(c, n, "key '%s': macro '%s' is unsupported (W&B's agent knows "
				     "${env}, ${interpreter}, ${program}, ${args}, ${args_no_hyphens}, "
				     "${args_no_equals}, ${args_no_boolean_flags}, ${args_json}, "
				     "${args_json_file} and ${envvar:NAME})", sub.buf, t);
				goto out;
			}
		}
		strbuf_reset(&item);
		while (*t) {
			const char *end;

			if (!strncmp(t, "${envvar:", 9) && (end = strchr(t + 9, '}'))) {
				char *var = xstrndup(t + 9, (size_t)(end - t - 9));
				const char *val = getenv(var);

				strbuf_addstr(&item, val ? val : var);
				free(var);
				t = end + 1;
				continue;
			}
			strbuf_addch(&item, *t++);
		}
		strvec_push(&s->command, item.buf);
	}
	ret = 0;
out:
	strbuf_release(&sub);
	strbuf_release(&item);
	return ret;
}

static int sweep_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct sweep_state *st = data;
	struct sweep_config *s = st->s;
	int m;

	if (!strcmp(key, "method")) {
		st->method = v;
		if (get_enum(c, v, path, methods, &m) < 0)
			return -1;
		s->method = m == 0 ? SWEEP_GRID : m == 1 ? SWEEP_RANDOM : SWEEP_BAYES;
		return 0;
	}
	if (!strcmp(key, "metric")) {
		st->metric = v;
		if (walk_map(c, v, path, metric_keys, metric_foreign, metric_key, s) < 0)
			return -1;
		if (!s->metric_name)
			return missing(c, v, path, "name", NULL);
		return 0;
	}
	if (!strcmp(key, "parameters")) {
		struct strvec segs = STRVEC_INIT;
		int r;

		st->params = v;
		r = parse_params(c, s, v, path, "", &segs, 0);
		strvec_clear(&segs);
		return r;
	}
	if (!strcmp(key, "early_terminate")) {
		struct et_state et;

		memset(&et, 0, sizeof(et));
		et.s = s;
		st->et = v;
		s->early_terminate = 1;
		s->et_pos.line = v->line;
		s->et_pos.col = v->col;
		if (walk_map(c, v, path, et_keys, NULL, et_key, &et) < 0)
			return -1;
		if (!map_get(v, "type"))
			return missing(c, v, path, "type", " (type: hyperband)");
		if (s->et_s)
			return et_bands(c, s, &et, path);
		if (s->et_max_iter && s->et_max_iter < s->et_min_iter)
			return fail(c, map_get(v, "max_iter"), "key '%s.max_iter': must be at least "
				    "min_iter (%d), found '%d'", path, s->et_min_iter, s->et_max_iter);
		return 0;
	}
	if (!strcmp(key, "job")) {
		st->job = v;
		return 0;   /* read last, so the sweep's own errors come first */
	}
	if (!strcmp(key, "max_trials")) {
		st->max_trials = v;
		return get_int(c, v, path, 1, INT_MAX, "a positive integer", &s->max_trials);
	}
	if (!strcmp(key, "run_cap")) {
		st->run_cap = v;
		return get_int(c, v, path, 1, INT_MAX, "a positive integer", &s->run_cap);
	}
	if (!strcmp(key, "program")) {
		st->program = v;
		s->wandb = 1;
		return get_str(c, v, path, &s->program);
	}
	if (!strcmp(key, "command")) {
		st->command = v;
		s->wandb = 1;
		return wandb_command(c, s, v, path);
	}
	if (!strcmp(key, "parallel"))
		return get_int(c, v, path, 0, 100000, "a number of trials (0 = as many as fit)",
			       &s->parallel);
	if (!strcmp(key, "gpus_per_trial"))
		return get_int(c, v, path, 0, 1024, "a number of GPUs", &s->gpus_per_trial);
	if (!strcmp(key, "max_failures"))
		return get_int(c, v, path, 0, INT_MAX, "a number of failures (0 or more)",
			       &s->max_failures);
	/* the trials checkpoint and resume: ASHA pauses and promotes instead of stopping */
	if (!strcmp(key, "checkpoint"))
		return get_bool(c, v, path, &s->checkpoint);
	if (!strcmp(key, "seed")) {
		const char *t = want_scalar(c, v, path, "a non-negative integer");
		char *end;

		if (!t)
			return -1;
		errno = 0;
		if (!isdigit((unsigned char)*t) || (s->seed = strtoull(t, &end, 10), *end || errno))
			return bad_value(c, v, path, "a non-negative integer");
		return 0;
	}
	if (!strcmp(key, "name"))
		return get_str(c, v, path, &s->name);
	/* description, project, entity: W&B's, accepted for its files and not used */
	if (!want_scalar(c, v, path, "a string"))
		return -1;
	sweep_note(c, s, v, "note: '%s' is accepted and ignored%s", path,
		   strcmp(key, "description") ? ": dtctl keeps the results on the cluster, "
		   "nothing is sent to W&B" : "");
	return 0;
}

static int sweep_job(struct ctx *c, struct sweep_config *s, struct ynode *v)
{
	if (v->type == Y_MAP) {
		job_config_release(&s->job);
		s->job.path = xstrdup(c->name);
		return job_from_tree(c, &s->job, v, "job", s->wandb);
	}
	{
		const char *rel = want_scalar(c, v, "job", "a job.yaml path or an inline job mapping");
		struct strbuf buf = STRBUF_INIT;
		struct ctx jc;
		struct ynode *top = NULL;
		char *path;
		int ret = -1;

		if (!rel)
			return -1;
#ifdef DT_FUZZING
		/* a fuzzer could name /dev/stdin or a FIFO and hang: read no files */
		return fail(c, v, "key 'job': job files are not read while fuzzing");
#endif
		path = resolve_path(c, rel);
		if (strbuf_read_file(&buf, path, CONFIG_MAX_BYTES) < 0) {
			fail(c, v, "key 'job': cannot read '%s': %s", path,
			     errno == EFBIG ? "file is too large" : strerror(errno));
			goto out;
		}
		jc.name = path;
		jc.dir = dir_of(path, 0);
		jc.err = c->err;
		job_config_release(&s->job);
		s->job.path = xstrdup(path);
		if (load_tree(&jc, buf.buf, buf.len, &top) == 0 &&
		    job_from_tree(&jc, &s->job, top, "", s->wandb) == 0)
			ret = 0;
		ynode_free(top);
		free(jc.dir);
out:
		free(path);
		strbuf_release(&buf);
		return ret;
	}
}

long long sweep_grid_size(const struct sweep_config *s)
{
	long long n = 1;

	for (size_t i = 0; i < s->nr_params; i++) {
		const struct sweep_param *p = &s->params[i];
		long long k;

		switch (p->kind) {
		case PARAM_VALUE:
		case PARAM_VALUES:
			k = (long long)p->values.nr;
			break;
		case PARAM_INT_UNIFORM:
			if (!(p->max - p->min < 1e15))   /* the loader keeps bounds within 1e15 */
				return LLONG_MAX / 4;
			k = (long long)(p->max - p->min) + 1;
			break;
		default:
			return -1;
		}
		if (k > 0 && n > LLONG_MAX / 4 / k)
			n = LLONG_MAX / 4;   /* saturate: far beyond GRID_MAX anyway */
		else
			n *= k;
	}
	return n;
}

static int sweep_checks(struct ctx *c, struct sweep_state *st, struct ynode *top)
{
	struct sweep_config *s = st->s;

	if (!st->method)
		return missing(c, top, "", "method", " (grid, random or bayes)");
	if (!st->params)
		return missing(c, top, "", "parameters", NULL);
	if (!st->metric && s->method == SWEEP_BAYES)
		return missing(c, top, "", "metric", " (bayes search needs a metric to optimise)");
	if (!st->metric && s->early_terminate)
		return missing(c, top, "", "metric", " (early_terminate needs a metric to compare)");
	if (s->method == SWEEP_GRID) {
		long long n;

		for (size_t i = 0; i < s->nr_params; i++) {
			const struct sweep_param *p = &s->params[i];

			if (p->kind == PARAM_VALUE || p->kind == PARAM_VALUES ||
			    p->kind == PARAM_INT_UNIFORM)
				continue;
			return fail_at(c, p->pos.line, p->pos.col, "key 'parameters.%s': grid search "
				       "needs discrete values, but '%s' is continuous; use 'values:'",
				       p->name, p->dist ? p->dist : sweep_param_kind_name(p->kind));
		}
		n = sweep_grid_size(s);
		if (st->max_trials && n > s->max_trials)
			return fail(c, st->max_trials, "key 'max_trials': grid has %lld points but "
				    "max_trials is %d", n, s->max_trials);
		/* W&B's run_cap may stop a grid early */
		if (n > GRID_MAX && !(s->run_cap && s->run_cap <= GRID_MAX))
			return fail(c, st->params, "key 'parameters': grid has %lld points, more than "
				    "the limit of %lld", n, GRID_MAX);
		if (!st->max_trials)
			s->max_trials = (int)(n < INT_MAX ? n : INT_MAX);
	} else if (!st->max_trials && !st->run_cap) {
		return missing(c, top, "", "max_trials", " (or W&B's 'run_cap': random and bayes "
			       "sweeps run until it is reached)");
	}
	if (s->run_cap && (!st->max_trials || s->run_cap < s->max_trials))
		s->max_trials = s->run_cap;
	if (s->wandb && !s->program &&
	    (!s->command.nr || strvec_find(&s->command, "${program}") >= 0))
		return missing(c, top, "", "program", " (the training script ${program} names in "
			       "the command)");
	if (!st->job && !s->wandb)
		return missing(c, top, "", "job", " (the job.yaml each trial runs, or W&B's "
			       "'program:')");
	if (s->wandb && !s->command.nr) {
		/* W&B's default command */
		for (size_t i = 0; i < 4; i++)
			strvec_push(&s->command, wandb_macros[i]);
	}
	if (!st->job) {
		free(s->job.name);
		s->job.name = xstrdup(s->program ? s->program : "job");
		return 0;
	}
	return sweep_job(c, s, st->job);
}

static void sweep_defaults(struct sweep_config *s)
{
	memset(s, 0, sizeof(*s));
	s->et_min_iter = 1;
	s->et_eta = 3;
	s->max_failures = 3;
	strvec_init(&s->command);
	strvec_init(&s->notes);
	job_config_init(&s->job);
}

static int sweep_from_tree(struct ctx *c, struct sweep_config *s, struct ynode *top)
{
	struct sweep_state st;

	memset(&st, 0, sizeof(st));
	st.s = s;
	if (walk_map(c, top, "", sweep_keys, sweep_foreign, sweep_key, &st) < 0)
		return -1;
	return sweep_checks(c, &st, top);
}

static void sweep_defaults_v(void *cfg) { sweep_defaults(cfg); }
static int sweep_from_tree_v(struct ctx *c, void *cfg, struct ynode *top)
{
	return sweep_from_tree(c, cfg, top);
}
static void sweep_release_v(void *cfg) { sweep_config_release(cfg); }
static char **sweep_path(void *cfg) { return &((struct sweep_config *)cfg)->path; }
static const struct config_kind sweep_kind = {
	sweep_defaults_v, sweep_from_tree_v, sweep_release_v, sweep_path
};

int sweep_config_parse(struct sweep_config *s, const char *buf, size_t len, const char *name,
		   struct strbuf *err)
{
	return config_parse_kind(&sweep_kind, s, buf, len, name, dir_of(name, 0), err);
}

int sweep_config_load(struct sweep_config *s, const char *path, struct strbuf *err)
{
	return config_load_kind(&sweep_kind, s, path, err);
}

int sweep_config_warnings(const struct sweep_config *s, struct strbuf *out)
{
	int n = 0;

	if (s->early_terminate && !s->et_max_iter) {
		strbuf_addf(out, "%s:%d:%d: early_terminate: hyperband without max_iter: the last "
			    "epoch a trial reports can be a rung, where ASHA stops the first trial to "
			    "reach it; set max_iter to the number of epochs (or steps) a trial runs\n",
			    s->path ? s->path : "sweep.yaml", s->et_pos.line, s->et_pos.col);
		n++;
	}
	for (size_t i = 0; i < s->notes.nr; i++, n++)
		strbuf_addf(out, "%s\n", s->notes.v[i]);
	return n;
}

void sweep_config_release(struct sweep_config *s)
{
	free(s->path);
	free(s->name);
	free(s->metric_name);
	for (size_t i = 0; i < s->nr_params; i++) {
		free(s->params[i].name);
		free(s->params[i].dist);
		free(s->params[i].probs);
		strvec_clear(&s->params[i].values);
		strvec_clear(&s->params[i].typed);
		strvec_clear(&s->params[i].path);
	}
	free(s->params);
	free(s->program);
	strvec_clear(&s->command);
	strvec_clear(&s->notes);
	job_config_release(&s->job);
	sweep_defaults(s);
}

/* --------------------------------------------------------- detection */

const char *config_detect_kind(const char *path, struct strbuf *err)
{
	static const char *const sweep_only[] = {
		"method", "parameters", "metric", "early_terminate", "max_trials", "program", NULL,
	};
	static const char *const cluster_only[] = {
		"shared_dir", "cluster", "ssh", "setup", "agent", "head", "install", "network", "mpi",
		NULL,
	};
	static const char *const job_only[] = {
		"trainer", "command", "gpus_per_node", "procs_per_node", "launcher", "retries",
		NULL,
	};
	struct strbuf buf = STRBUF_INIT;
	struct ctx c = { path, NULL, err };
	struct ynode *top = NULL;
	const char *kind = NULL;

	if (read_config_file(path, &buf, err) < 0)
		return NULL;
	if (load_tree(&c, buf.buf, buf.len, &top) == 0) {
		for (size_t i = 0; !kind && sweep_only[i]; i++)
			if (map_get(top, sweep_only[i]))
				kind = "sweep";
		for (size_t i = 0; !kind && cluster_only[i]; i++)
			if (map_get(top, cluster_only[i]))
				kind = "cluster";
		for (size_t i = 0; !kind && job_only[i]; i++)
			if (map_get(top, job_only[i]))
				kind = "job";
		if (!kind)
			fail(&c, top, "cannot tell whether this is a cluster, job or "
			     "sweep file from its keys; use --kind");
	}
	ynode_free(top);
	strbuf_release(&buf);
	return kind;
}

/* --------------------------------------------------------------- JSON */

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* "timeout": "10s", "timeout_ms": 10000 */
static void set_duration(json_t *obj, const char *key, long long ms)
{
	struct strbuf sb = STRBUF_INIT, k = STRBUF_INIT;

	format_duration(&sb, ms);
	json_object_set_new(obj, key, json_string(sb.buf));
	strbuf_addf(&k, "%s_ms", key);
	json_object_set_new(obj, k.buf, json_integer(ms));
	strbuf_release(&sb);
	strbuf_release(&k);
}

static json_t *kvlist_json(const struct kvlist *l)
{
	json_t *o = json_object();

	for (size_t i = 0; i < l->nr; i++)
		json_object_set_new(o, l->items[i].key, json_string(l->items[i].value));
	return o;
}

/* A value as written, typed the way YAML would read it. */
static json_t *typed_scalar(const char *s)
{
	long long v;

	if (parse_long(s, &v) == 0)
		return json_integer(v);
	if (is_number_text(s) && strspn(s, "0123456789.eE+-") == strlen(s))
		return json_real(strtod(s, NULL));
	if (!strcmp(s, "true"))
		return json_true();
	if (!strcmp(s, "false"))
		return json_false();
	if (!strcmp(s, "null"))
		return json_null();
	return json_string(s);
}

json_t *cluster_config_to_json(const struct cluster_config *cc)
{
	json_t *o = json_object(), *ssh = json_object(), *nodes = json_array();
	json_t *setup = json_object(), *agent = json_object(), *head = json_object();
	json_t *net = json_object();

	json_object_set_new(o, "path", str_or_null(cc->path));
	json_object_set_new(o, "cluster", str_or_null(cc->name));
	json_object_set_new(o, "user", str_or_null(cc->user));
	json_object_set_new(o, "shared_dir", str_or_null(cc->shared_dir));

	json_object_set_new(ssh, "port", json_integer(cc->ssh.port));
	json_object_set_new(ssh, "fanout", json_integer(cc->ssh.fanout));
	set_duration(ssh, "connect_timeout", cc->ssh.connect_timeout_ms);
	set_duration(ssh, "command_timeout", cc->ssh.command_timeout_ms);
	json_object_set_new(ssh, "host_key_policy",
			    json_string(host_key_policies[cc->ssh.host_key_policy == HOST_KEY_STRICT]));
	json_object_set_new(ssh, "identity", str_or_null(cc->ssh.identity));
	json_object_set_new(o, "ssh", ssh);

	for (size_t i = 0; i < cc->nr_nodes; i++) {
		const struct cluster_node *n = &cc->nodes[i];
		json_t *jn = json_object();

		json_object_set_new(jn, "name", str_or_null(n->name));
		json_object_set_new(jn, "host", str_or_null(n->host));
		json_object_set_new(jn, "user", str_or_null(n->user));
		json_object_set_new(jn, "port", json_integer(n->port));
		json_object_set_new(jn, "gpus", n->gpus == GPUS_AUTO ? json_string("auto") :
				    json_integer(n->gpus));
		json_object_set_new(jn, "slots", json_integer(n->slots));
		json_object_set_new(jn, "labels", kvlist_json(&n->labels));
		json_array_append_new(nodes, jn);
	}
	json_object_set_new(o, "nodes", nodes);

	json_object_set_new(setup, "template", str_or_null(cc->setup.template));
	set_duration(setup, "timeout", cc->setup.timeout_ms);
	json_object_set_new(setup, "env", kvlist_json(&cc->setup.env));
	json_object_set_new(setup, "vars", kvlist_json(&cc->setup.vars));
	json_object_set_new(o, "setup", setup);
	json_object_set_new(o, "install",
			    json_string(install_modes[cc->install == INSTALL_SHARED]));

	json_object_set_new(agent, "port", json_integer(cc->agent.port));
	set_duration(agent, "heartbeat", cc->agent.heartbeat_ms);
	set_duration(agent, "dead_after", cc->agent.dead_after_ms);
	json_object_set_new(o, "agent", agent);

	json_object_set_new(head, "address", str_or_null(cc->head.address));
	json_object_set_new(head, "port", json_integer(cc->head.port));
	json_object_set_new(o, "head", head);

	json_object_set_new(net, "interface", str_or_null(cc->network.interface));
	json_object_set_new(o, "network", net);
	json_object_set_new(o, "mpi", json_pack("{s:s}", "orted_launch",
						 orted_launches[cc->mpi.orted_ssh ? 1 : 0]));
	return o;
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
		json_t *cmd = json_array();

		for (size_t i = 0; i < j->command.nr; i++)
			json_array_append_new(cmd, json_string(j->command.v[i]));
		json_object_set_new(o, "trainer", json_null());
		json_object_set_new(o, "command", cmd);
	}
	json_object_set_new(o, "shell", json_boolean(j->shell));
	json_object_set_new(o, "workdir", str_or_null(j->workdir));
	json_object_set_new(o, "env", kvlist_json(&j->env));
	set_duration(o, "timeout", j->timeout_ms);
	set_duration(o, "stall_after", j->stall_after_ms);
	json_object_set_new(o, "retries", json_integer(j->retries));
	json_object_set_new(o, "strict_logging", json_boolean(j->strict_logging));
	json_object_set_new(o, "include_nodes", str_or_null(j->node_include));
	json_object_set_new(o, "exclude_nodes", str_or_null(j->node_exclude));
	json_object_set_new(o, "labels", kvlist_json(&j->labels));
	return o;
}

static json_t *strvec_json(const struct strvec *sv)
{
	json_t *a = json_array();

	for (size_t i = 0; i < sv->nr; i++)
		json_array_append_new(a, json_string(sv->v[i]));
	return a;
}

json_t *sweep_config_to_json(const struct sweep_config *s)
{
	json_t *o = json_object(), *params = json_object();

	json_object_set_new(o, "path", str_or_null(s->path));
	json_object_set_new(o, "method", json_string(methods[s->method == SWEEP_GRID ? 0 :
							       s->method == SWEEP_RANDOM ? 1 : 2]));
	if (s->metric_name) {
		json_t *m = json_object();

		json_object_set_new(m, "name", json_string(s->metric_name));
		json_object_set_new(m, "goal", json_string(goals[s->goal == GOAL_MAXIMIZE]));
		if (s->has_target)
			json_object_set_new(m, "target", json_real(s->target));
		json_object_set_new(o, "metric", m);
	} else {
		json_object_set_new(o, "metric", json_null());
	}
	for (size_t i = 0; i < s->nr_params; i++) {
		const struct sweep_param *p = &s->params[i];
		json_t *jp = json_object();

		json_object_set_new(jp, "distribution", json_string(sweep_param_kind_name(p->kind)));
		if (p->dist && strcmp(p->dist, sweep_param_kind_name(p->kind)))
			json_object_set_new(jp, "as_written", json_string(p->dist));
		if (p->path.nr > 1)
			json_object_set_new(jp, "path", strvec_json(&p->path));
		switch (p->kind) {
		case PARAM_VALUE:
		case PARAM_VALUES: {
			json_t *vals = json_array(), *typed = json_array();

			for (size_t k = 0; k < p->values.nr; k++) {
				json_array_append_new(vals, typed_scalar(p->values.v[k]));
				json_array_append_new(typed, json_loads(p->typed.v[k],
									JSON_DECODE_ANY, NULL));
			}
			if (p->kind == PARAM_VALUE) {
				json_object_set(jp, "value", json_array_get(vals, 0));
				json_decref(vals);
			} else {
				json_object_set_new(jp, "values", vals);
			}
			/* the values as W&B's YAML reader types them, for its command */
			json_object_set_new(jp, "typed", typed);
			if (p->probs) {
				json_t *pr = json_array();

				for (size_t k = 0; k < p->values.nr; k++)
					json_array_append_new(pr, json_real(p->probs[k]));
				json_object_set_new(jp, "probabilities", pr);
			}
			break;
		}
		case PARAM_NORMAL:
		case PARAM_Q_NORMAL:
		case PARAM_LOG_NORMAL:
		case PARAM_Q_LOG_NORMAL:
			json_object_set_new(jp, "mu", json_real(p->mu));
			json_object_set_new(jp, "sigma", json_real(p->sigma));
			break;
		case PARAM_BETA:
		case PARAM_Q_BETA:
			json_object_set_new(jp, "a", json_real(p->a));
			json_object_set_new(jp, "b", json_real(p->b));
			break;
		case PARAM_INT_UNIFORM:
			json_object_set_new(jp, "min", json_integer((json_int_t)p->min));
			json_object_set_new(jp, "max", json_integer((json_int_t)p->max));
			break;
		default:
			json_object_set_new(jp, "min", json_real(p->min));
			json_object_set_new(jp, "max", json_real(p->max));
			break;
		}
		if (p->kind == PARAM_Q_UNIFORM || p->kind == PARAM_Q_LOG_UNIFORM ||
		    p->kind == PARAM_Q_NORMAL || p->kind == PARAM_Q_LOG_NORMAL ||
		    p->kind == PARAM_Q_BETA) {
			json_object_set_new(jp, "q", json_real(p->q));
			json_object_set_new(jp, "q_int", json_boolean(p->q_int));
		}
		json_object_set_new(params, p->name, jp);
	}
	json_object_set_new(o, "parameters", params);
	if (s->early_terminate) {
		json_t *et = json_object();

		json_object_set_new(et, "type", json_string("hyperband"));
		json_object_set_new(et, "min_iter", json_integer(s->et_min_iter));
		json_object_set_new(et, "eta", json_number(s->et_eta));
		json_object_set_new(et, "max_iter", json_integer(s->et_max_iter));
		json_object_set_new(et, "mode", json_string(s->checkpoint ? "promote" : "stop"));
		if (s->et_s)
			json_object_set_new(et, "s", json_integer(s->et_s));
		if (s->et_nr_bands) {
			json_t *bands = json_array();

			for (int k = 0; k < s->et_nr_bands; k++)
				json_array_append_new(bands, json_integer(s->et_bands[k]));
			json_object_set_new(et, "bands", bands);
		}
		json_object_set_new(o, "early_terminate", et);
	} else {
		json_object_set_new(o, "early_terminate", json_null());
	}
	json_object_set_new(o, "max_trials", json_integer(s->max_trials));
	if (s->run_cap)
		json_object_set_new(o, "run_cap", json_integer(s->run_cap));
	if (s->method == SWEEP_GRID)
		json_object_set_new(o, "grid_size", json_integer(sweep_grid_size(s)));
	json_object_set_new(o, "parallel", json_integer(s->parallel));
	json_object_set_new(o, "gpus_per_trial", json_integer(s->gpus_per_trial));
	json_object_set_new(o, "seed", json_integer((json_int_t)s->seed));
	json_object_set_new(o, "max_failures", json_integer(s->max_failures));
	json_object_set_new(o, "checkpoint", json_boolean(s->checkpoint));
	if (s->wandb) {
		json_object_set_new(o, "program", str_or_null(s->program));
		json_object_set_new(o, "command", strvec_json(&s->command));
	}
	json_object_set_new(o, "job", job_config_to_json(&s->job));
	/* the job runs W&B's command, its macros replaced per trial by dtsched */
	if (s->wandb)
		json_object_set_new(json_object_get(o, "job"), "command", strvec_json(&s->command));
	return o;
}

static int yaml_plain_ok(const char *s, int numbers_plain)
{
	static const char *const words[] = {
		"true", "false", "null", "~", "yes", "no", "on", "off", "y", "n", NULL,
	};
	char *end;

	if (!*s)
		return 0;
	for (const char *c = s; *c; c++)
		if (!isalnum((unsigned char)*c) && !strchr("._-+/", *c))
			return 0;
	for (size_t i = 0; words[i]; i++)
		if (!strcasecmp(s, words[i]))
			return 0;
	(void)strtod(s, &end);
	if (!*end)      /* 1e3, -2, .5, 0x10, inf, nan: a number to a reader; plain
			 * only if asked and decimal (not 0x10, inf, nan) */
		return numbers_plain && !s[strspn(s, "0123456789.eE+-")];
	if (strchr("-+.", s[0]))        /* -x: a list item; .inf, +x */
		return 0;
	if (isdigit((unsigned char)s[0]) && strpbrk(s + 1, "-bBoOxX"))
		return 0;       /* 2026-11-22 (a date), 0b101, 0o17 */
	return 1;
}

void yaml_append_scalar(struct strbuf *sb, const char *s, int numbers_plain)
{
	if (yaml_plain_ok(s, numbers_plain))
		strbuf_addstr(sb, s);
	else
		json_append_str(sb, s);
}
