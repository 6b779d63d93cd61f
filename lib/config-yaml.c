/*
 * config-yaml.c - the YAML side of the configuration loader: from the bytes
 * of cluster.yaml, job.yaml or sweep.yaml to a checked tree, and the typed
 * getters and the map walker the schemas (config-cluster.c, config-job.c,
 * config-sweep.c) read that tree with.
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
#include "config-int.h"
#include "json.h"
#include "term.h"
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <yaml.h>

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

void ynode_free(struct ynode *n)
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

static void vfail(struct ctx *c, int line, int col, const char *fmt, va_list ap) DT_PRINTF(4, 0);
static void vfail(struct ctx *c, int line, int col, const char *fmt, va_list ap)
{
	struct strbuf msg = STRBUF_INIT;

	if (line > 0)
		strbuf_addf(&msg, "%s:%d:%d: ", c->name, line, col);
	else   /* not from a file (dtsched's JSON form of a sweep) */
		strbuf_addf(&msg, "%s: ", c->name);
	strbuf_vaddf(&msg, fmt, ap);
	/* a key or value holding "\n" (quoted YAML) cannot break the one-line contract */
	term_sanitize(c->err, msg.buf, msg.len, 0);
	strbuf_release(&msg);
}

int fail_at(struct ctx *c, int line, int col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(c, line, col, fmt, ap);
	va_end(ap);
	return -1;
}

int fail(struct ctx *c, const struct ynode *n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(c, n->line, n->col, fmt, ap);
	va_end(ap);
	return -1;
}

int is_null(const struct ynode *n)
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
			const char *tag = n->type == Y_SCALAR ? (const char *)ev.data.scalar.tag :
				n->type == Y_SEQ ? (const char *)ev.data.sequence_start.tag :
				(const char *)ev.data.mapping_start.tag;

			if (tag) {
				/* '!!binary aGk=' would otherwise be read as 'aGk=' */
				fail(c, n, "YAML tags ('%s%s') are not supported; write the value "
				     "without one", starts_with(tag, "tag:yaml.org,2002:") ? "!!" : "",
				     tag + (starts_with(tag, "tag:yaml.org,2002:") ? 18 : 0));
				ynode_free(n);
				yaml_event_delete(&ev);
				goto out;
			}
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
int load_tree(struct ctx *c, const char *buf, size_t len, struct ynode **rootp)
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
const char *scalar_value(struct ctx *c, struct ynode *n, const char *path)
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

int bad_value(struct ctx *c, const struct ynode *n, const char *path, const char *expected)
{
	struct strbuf found = STRBUF_INIT;

	describe(&found, n);
	fail(c, n, "key '%s': expected %s, found %s", path, expected, found.buf);
	strbuf_release(&found);
	return -1;
}

/* A non-null scalar's expanded text, or an error naming `expected`. */
const char *want_scalar(struct ctx *c, struct ynode *n, const char *path,
			const char *expected)
{
	if (n->type != Y_SCALAR || is_null(n)) {
		bad_value(c, n, path, expected);
		return NULL;
	}
	return scalar_value(c, n, path);
}

int get_str(struct ctx *c, struct ynode *n, const char *path, char **out)
{
	const char *s = want_scalar(c, n, path, "a string");

	if (!s)
		return -1;
	free(*out);
	*out = xstrdup(s);
	return 0;
}

/*
 * Values that reach ssh_config, file paths or a shell-like context are
 * checked where they are read, so that a newline cannot add an ssh_config
 * line (ProxyCommand) and a path cannot climb out of where it points.
 */
int get_user_name(struct ctx *c, struct ynode *n, const char *path, char **out)
{
	if (get_str(c, n, path, out) < 0)
		return -1;
	/* POSIX's portable user names (as useradd takes them): [A-Za-z0-9._-], no leading '-' */
	if (!name_chars_ok(*out, 32, "._-") || (*out)[0] == '-')
		return bad_value(c, n, path, "a user name of at most 32 letters, digits, '.', '_' "
				 "and '-' (not first)");
	return 0;
}

int get_host_name(struct ctx *c, struct ynode *n, const char *path, char **out)
{
	if (get_str(c, n, path, out) < 0)
		return -1;
	if (!host_name_ok(*out))
		return bad_value(c, n, path, "a host name or address (at most 253 letters, digits, "
				 "'.', '-', '_' or ':')");
	return 0;
}

int host_name_ok(const char *s)
{
	return name_chars_ok(s, 253, ".-_:");
}

int get_safe_path(struct ctx *c, struct ynode *n, const char *path, int no_quotes, char **out)
{
	const char *s;

	if (get_str(c, n, path, out) < 0)
		return -1;
	for (s = *out; *s; s++) {
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return bad_value(c, n, path, "a path without control characters (newline, tab)");
		if (no_quotes && (*s == '"' || *s == '\'' || *s == '\\'))
			return bad_value(c, n, path, "a path without quotes or backslashes");
	}
	for (s = *out; (s = strstr(s, "..")); s += 2)
		if ((s == *out || s[-1] == '/') && (!s[2] || s[2] == '/'))
			return bad_value(c, n, path, "a path without a '..' component");
	return 0;
}

int parse_long(const char *s, long long *v)
{
	char *end;

	if (!*s || !(isdigit((unsigned char)*s) || (*s == '-' && isdigit((unsigned char)s[1]))))
		return -1;
	errno = 0;
	*v = strtoll(s, &end, 10);
	return (*end || errno) ? -1 : 0;
}

int get_int(struct ctx *c, struct ynode *n, const char *path, long long min, long long max,
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

int get_bool(struct ctx *c, struct ynode *n, const char *path, int *out)
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

int is_number_text(const char *s)
{
	char *end;

	if (!*s || isspace((unsigned char)*s))
		return 0;
	strtod(s, &end);
	return !*end;
}

int get_duration(struct ctx *c, struct ynode *n, const char *path, long long *ms)
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

int get_double(struct ctx *c, struct ynode *n, const char *path, double *out)
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
int get_enum(struct ctx *c, struct ynode *n, const char *path,
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

void child_path(struct strbuf *sb, const char *parent, const char *key)
{
	strbuf_reset(sb);
	if (*parent)
		strbuf_addf(sb, "%s.%s", parent, key);
	else
		strbuf_addstr(sb, key);
}

/*
 * Every key of a mapping must be a scalar and appear once.  Reports the
 * first repeat in file order; large maps are checked by sorting.
 */
int check_keys(struct ctx *c, struct ynode *map, const char *path)
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

/*
 * Call fn for each key and value of a mapping, in file order, with the key's
 * dotted path; keys must be scalars and appear once.  A null value (a key
 * with nothing after it) is an empty mapping; anything else but a mapping is
 * an error naming `expected`.  Stops at the first fn that fails.
 */
int each_pair(struct ctx *c, struct ynode *map, const char *path, const char *expected,
	      pair_fn fn, void *data)
{
	struct strbuf sub = STRBUF_INIT;
	int ret = 0;

	if (is_null(map))
		return 0;
	if (map->type != Y_MAP)
		return bad_value(c, map, path, expected);
	if (check_keys(c, map, path) < 0)
		return -1;
	for (size_t i = 0; !ret && i + 1 < map->nr; i += 2) {
		child_path(&sub, path, map->kids[i]->text);
		ret = fn(c, map->kids[i], map->kids[i + 1], sub.buf, data) < 0 ? -1 : 0;
	}
	strbuf_release(&sub);
	return ret;
}

/* walk_map()'s arguments, for walk_pair(). */
struct walk {
	const char *path;
	const char *const *keys;
	const struct foreign_key *foreign;
	key_fn fn;
	void *data;
};

/* One key of a walk_map(): its handler, or why it is refused. */
static int walk_pair(struct ctx *c, struct ynode *k, struct ynode *v, const char *sub, void *data)
{
	const struct walk *w = data;
	const char *known;

	for (size_t j = 0; w->keys[j]; j++)
		if (!strcmp(w->keys[j], k->text))
			return w->fn(c, w->keys[j], v, sub, w->data);
	for (size_t j = 0; w->foreign && w->foreign[j].key; j++)
		if (!strcmp(w->foreign[j].key, k->text))
			return fail(c, k, "W&B key '%s' is unsupported by dtctl: %s", sub,
				    w->foreign[j].hint);
	known = suggest(k->text, w->keys);
	if (known) {
		struct strbuf want = STRBUF_INIT;

		child_path(&want, w->path, known);
		fail(c, k, "unknown key '%s'; did you mean '%s'?", sub, want.buf);
		strbuf_release(&want);
	} else {
		fail(c, k, "unknown key '%s'", sub);
		strbuf_addstr(c->err, " (expected ");
		for (size_t j = 0; w->keys[j]; j++)
			strbuf_addf(c->err, "%s'%s'", j ? ", " : "", w->keys[j]);
		strbuf_addch(c->err, ')');
	}
	return -1;
}

/*
 * Walk a mapping: refuse non-scalar, duplicate, foreign and unknown keys,
 * and call fn for each valid one in file order.  A null value (a key with
 * nothing after it) is an empty mapping.
 */
int walk_map(struct ctx *c, struct ynode *map, const char *path, const char *const *keys,
	     const struct foreign_key *foreign, key_fn fn, void *data)
{
	struct walk w = { path, keys, foreign, fn, data };

	return each_pair(c, map, path, "a mapping", walk_pair, &w);
}

/* The value of `key` in a mapping, or NULL. */
struct ynode *map_get(const struct ynode *map, const char *key)
{
	if (map->type != Y_MAP)
		return NULL;
	for (size_t i = 0; i + 1 < map->nr; i += 2)
		if (map->kids[i]->type == Y_SCALAR && !strcmp(map->kids[i]->text, key))
			return map->kids[i + 1];
	return NULL;
}

int missing(struct ctx *c, const struct ynode *map, const char *path, const char *key,
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

/* get_kvmap()'s arguments, for kv_pair(). */
struct kvmap {
	struct kvlist *l;
	int env_names;
};

static int kv_pair(struct ctx *c, struct ynode *k, struct ynode *v, const char *path, void *data)
{
	const struct kvmap *m = data;
	const char *val = "";

	if (m->env_names && !valid_env_name(k->text))
		return fail(c, k, "key '%s': '%s' is not a valid environment variable name", path,
			    k->text);
	if (!is_null(v)) {
		if (v->type != Y_SCALAR)
			return bad_value(c, v, path, "a single value");
		if (!(val = scalar_value(c, v, path)))
			return -1;
	}
	kvlist_set(m->l, k->text, val);
	return 0;
}

/*
 * A mapping of scalars into a kvlist (env:, labels:, vars:).  Null values
 * are empty strings.  env_names: keys must be environment variable names.
 */
int get_kvmap(struct ctx *c, struct ynode *map, const char *path, struct kvlist *l,
	      int env_names)
{
	struct kvmap m = { l, env_names };

	return each_pair(c, map, path, "a mapping", kv_pair, &m);
}

/* "dir/rel" unless rel is absolute or there is no dir; "~/x" is $HOME/x. */
char *resolve_path(const struct ctx *c, const char *rel)
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
char *dir_of(const char *path, int absolute)
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
int find_duplicate(char **keys, size_t n, size_t *dup, size_t *first)
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

/* The later of two nodes in the file, for "cannot be used together" errors. */
struct ynode *later(struct ynode *a, struct ynode *b)
{
	return (a->line > b->line || (a->line == b->line && a->col > b->col)) ? a : b;
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
static int parse_kind(const struct config_kind *k, void *cfg, const char *buf, size_t len,
		      const char *name, char *dir, struct strbuf *err)
{
	struct ctx c = { name, dir, err };
	struct ynode *top = NULL;
	int ret = -1;

	k->defaults(cfg);
	*(char **)((char *)cfg + k->path_offset) = xstrdup(name);
	if (load_tree(&c, buf, len, &top) == 0 && k->from_tree(&c, cfg, top) == 0)
		ret = 0;
	ynode_free(top);
	free(c.dir);
	if (ret < 0)
		k->release(cfg);
	return ret;
}

/* The same from a file: size limit, UTF-8 and a base dir for relative paths. */
int config_load_kind(const struct config_kind *k, void *cfg, const char *path,
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
	ret = parse_kind(k, cfg, buf.buf, buf.len, path, dir, err);
	strbuf_release(&buf);
	return ret;
}

/* From memory: relative paths are against the directory part of `name`. */
int config_parse_kind(const struct config_kind *k, void *cfg, const char *buf, size_t len,
		      const char *name, struct strbuf *err)
{
	return parse_kind(k, cfg, buf, len, name, dir_of(name, 0), err);
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

json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* "timeout": "10s", "timeout_ms": 10000 */
void set_duration(json_t *obj, const char *key, long long ms)
{
	struct strbuf sb = STRBUF_INIT, k = STRBUF_INIT;

	format_duration(&sb, ms);
	json_object_set_new(obj, key, json_string(sb.buf));
	strbuf_addf(&k, "%s_ms", key);
	json_object_set_new(obj, k.buf, json_integer(ms));
	strbuf_release(&sb);
	strbuf_release(&k);
}

json_t *kvlist_json(const struct kvlist *l)
{
	json_t *o = json_object();

	for (size_t i = 0; i < l->nr; i++)
		json_object_set_new(o, l->items[i].key, json_string(l->items[i].value));
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
