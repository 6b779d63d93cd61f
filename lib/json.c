/*
 * json.c - jansson helpers with the project's defaults.
 */
#include "json.h"
#include "log.h"

#include <stdio.h>

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
		default:
			if (*p < 0x20 || *p == 0x7f) {
				strbuf_addstr(sb, "\\u00");
				strbuf_addch(sb, hex[*p >> 4]);
				strbuf_addch(sb, hex[*p & 15]);
			} else {
				strbuf_addch(sb, (char)*p);
			}
		}
	}
	strbuf_addch(sb, '"');
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
