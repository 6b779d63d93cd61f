/*
 * json.c - jansson helpers with the project's defaults.
 */
#include "json.h"
#include "log.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static int dump_cb(const char *buf, size_t size, void *data)
{
	strbuf_add(data, buf, size);
	return 0;
}

void json_append(struct strbuf *sb, const json_t *j)
{
	json_dump_callback(j, dump_cb, sb, DT_JSON_FLAGS | JSON_COMPACT);
}

void json_append_str(struct strbuf *sb, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	strbuf_addch(sb, '"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': strbuf_addstr(sb, "\\\""); break;
		case '\\': strbuf_addstr(sb, "\\\\"); break;
		case '\n': strbuf_addstr(sb, "\\n"); break;
		case '\r': strbuf_addstr(sb, "\\r"); break;
		case '\t': strbuf_addstr(sb, "\\t"); break;
		default: {
			unsigned c = *p;

			if (c == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
				c = *++p;   /* a C1 control (U+0080-U+009F): a terminal may take it as CSI */
			} else if (c >= 0x20 && c != 0x7f) {
				strbuf_addch(sb, (char)c);
				break;
			}
			strbuf_addstr(sb, "\\u00");
			strbuf_addch(sb, hex[c >> 4]);
			strbuf_addch(sb, hex[c & 15]);
		}
		}
	}
	strbuf_addch(sb, '"');
}

/* ------------------------------------------------ printing JSON text */

static size_t skip_ws(const char *b, size_t i, size_t n)
{
	while (i < n && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t'))
		i++;
	return i;
}

/* End of the token at b[i] (a string with its quotes, a scalar or one
 * punctuation byte); 0 when malformed. */
static size_t token_end(const char *b, size_t i, size_t n)
{
	if (b[i] == '"') {
		for (i++; i < n; i++) {
			if (b[i] == '\\')
				i++;
			else if (b[i] == '"')
				return i + 1;
		}
		return 0;
	}
	if (strchr("{}[],:", b[i]))
		return i + 1;
	if (!isalnum((unsigned char)b[i]) && b[i] != '-')
		return 0;
	while (i < n && (isalnum((unsigned char)b[i]) || strchr("+-.", b[i])))
		i++;
	return i;
}

static void indent(struct strbuf *sb, int depth)
{
	strbuf_addch(sb, '\n');
	for (int d = 0; d < depth; d++)
		strbuf_addstr(sb, "  ");
}

/* Indent the one value starting at b[*pi] into sb at `depth`; -1 if malformed. */
static int print_value(struct strbuf *sb, const char *b, size_t *pi, size_t n, int depth)
{
	size_t i = skip_ws(b, *pi, n), e;
	int d = 0;

	do {
		i = skip_ws(b, i, n);
		if (i >= n || !(e = token_end(b, i, n)))
			return -1;
		switch (b[i]) {
		case '{':
		case '[': {
			size_t k = skip_ws(b, e, n);

			if (k < n && b[k] == (b[i] == '{' ? '}' : ']')) {
				strbuf_addch(sb, b[i]);
				strbuf_addch(sb, b[k]);
				e = k + 1;
				break;
			}
			strbuf_addch(sb, b[i]);
			d++;
			indent(sb, depth + d);
			break;
		}
		case '}':
		case ']':
			if (--d < 0)
				return -1;
			indent(sb, depth + d);
			strbuf_addch(sb, b[i]);
			break;
		case ',':
			strbuf_addch(sb, ',');
			indent(sb, depth + d);
			break;
		case ':':
			strbuf_addstr(sb, ": ");
			break;
		default:
			strbuf_add(sb, b + i, e - i);
		}
		i = e;
	} while (d > 0);
	*pi = i;
	return 0;
}

/* whether the key of k bytes is one of the space-separated words of list */
static int key_listed(const char *list, const char *k, size_t klen)
{
	while (*list) {
		size_t w = strcspn(list, " ");

		if (w == klen && !memcmp(list, k, klen))
			return 1;
		list += w;
		list += strspn(list, " ");
	}
	return 0;
}

int json_print_text(const char *buf, size_t len, const char *only, const char *first)
{
	struct strbuf sb = STRBUF_INIT, skip = STRBUF_INIT;
	size_t i = skip_ws(buf, 0, len);
	int members = 0, ret = -1;

	if (i >= len || buf[i] != '{')
		goto out;
	strbuf_addch(&sb, '{');
	if (first) {
		indent(&sb, 1);
		strbuf_addstr(&sb, first);
		members++;
	}
	i = skip_ws(buf, i + 1, len);
	if (i < len && buf[i] == '}') {
		i++;
	} else {
		for (;;) {
			size_t k = skip_ws(buf, i, len), e;
			int keep;

			if (k >= len || buf[k] != '"' || !(e = token_end(buf, k, len)))
				goto out;
			keep = !only || key_listed(only, buf + k + 1, e - k - 2);
			i = skip_ws(buf, e, len);
			if (i >= len || buf[i] != ':')
				goto out;
			i++;
			if (keep) {
				if (members++)
					strbuf_addch(&sb, ',');
				indent(&sb, 1);
				strbuf_add(&sb, buf + k, e - k);
				strbuf_addstr(&sb, ": ");
			}
			strbuf_reset(&skip);
			if (print_value(keep ? &sb : &skip, buf, &i, len, 1) < 0)
				goto out;
			i = skip_ws(buf, i, len);
			if (i < len && buf[i] == ',') {
				i++;
				continue;
			}
			if (i < len && buf[i] == '}') {
				i++;
				break;
			}
			goto out;
		}
	}
	if (members)
		indent(&sb, 0);
	strbuf_addch(&sb, '}');
	if (skip_ws(buf, i, len) != len)
		goto out;
	strbuf_addch(&sb, '\n');
	fwrite(sb.buf, 1, sb.len, stdout);
	ret = 0;
out:
	strbuf_release(&sb);
	strbuf_release(&skip);
	return ret;
}

void json_print(const json_t *j)
{
	json_dumpf(j, stdout, DT_JSON_FLAGS | JSON_INDENT(2) | JSON_REAL_PRECISION(15));
	fputc('\n', stdout);
}

json_t *json_parse(const char *buf, size_t len, struct strbuf *err)
{
	json_error_t e;
	json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &e);

	if (!j && err)
		strbuf_addf(err, "line %d col %d: %s", e.line, e.column, e.text);
	return j;
}

json_t *json_timestamp(long long us)
{
	char buf[DT_TIMESTAMP_LEN];

	if (!us)
		return json_null();
	dt_timestamp_format(buf, sizeof(buf), us);
	return json_string(buf);
}

const char *json_get_str(const json_t *obj, const char *key, const char *def)
{
	const json_t *v = json_object_get(obj, key);

	return json_is_string(v) ? json_string_value(v) : def;
}

long long json_get_int(const json_t *obj, const char *key, long long def)
{
	const json_t *v = json_object_get(obj, key);

	return json_is_integer(v) ? json_integer_value(v) : def;
}

double json_get_real(const json_t *obj, const char *key, double def)
{
	const json_t *v = json_object_get(obj, key);

	return json_is_number(v) ? json_number_value(v) : def;
}

json_t *json_number(double v)
{
	if (v == floor(v) && fabs(v) < 9007199254740992.0)   /* 2^53: exact in a double */
		return json_integer((json_int_t)v);
	return json_real(v);
}

int json_str_in(const json_t *a, const char *s)
{
	const json_t *x;
	size_t i;

	json_array_foreach(a, i, x)
		if (json_is_string(x) && !strcmp(json_string_value(x), s))
			return 1;
	return 0;
}

json_t *json_strvec(const struct strvec *sv)
{
	json_t *a = json_array();

	for (size_t i = 0; i < sv->nr; i++)
		json_array_append_new(a, json_string(sv->v[i]));
	return a;
}
