/*
 * json.h - the project's JSON conventions on top of jansson.
 *
 * Machine output (--json, the HTTP protocol) keeps insertion order so it is
 * stable between runs.  Parsing errors carry line and column.
 */
#ifndef DT_JSON_H
#define DT_JSON_H

#include <jansson.h>
#include "strbuf.h"
#include "strvec.h"

#define DT_JSON_FLAGS (JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII)

/* Append the compact serialisation of j to sb. */
void json_append(struct strbuf *sb, const json_t *j);
/*
 * Append s as a JSON string literal (quotes, escapes, control characters C0,
 * DEL and C1 as \u00XX so the text is safe on a terminal; other UTF-8 passed through):
 * for hand-built replies on hot paths where building jansson objects costs
 * more than the reply (dtsched's node list).  s must be valid UTF-8.
 */
void json_append_str(struct strbuf *sb, const char *s);
/*
 * Print the JSON object text buf[0..len) indented as json_print() does (2
 * spaces, "key": value, {} and [] when empty) without parsing it into a tree:
 * for big replies passed through (dtctl nodes --json, 1000 nodes).  With
 * `only` (keys separated by spaces: "nodes refused"), the top-level object
 * keeps just those members; `first` (raw member
 * text such as "\"schema\": 1", or NULL) goes before it.  Strings and numbers
 * are copied as they are.  -1 and nothing printed when buf is not one JSON
 * object (unbalanced, truncated, trailing bytes).
 */
int json_print_text(const char *buf, size_t len, const char *only, const char *first);
/* Print j indented to stdout with a trailing newline. */
void json_print(const json_t *j);
/* Parse len bytes; on failure return NULL and fill err ("line L col C: msg"). */
json_t *json_parse(const char *buf, size_t len, struct strbuf *err);

/* A dt_timestamp() string for `us` microseconds since the epoch; JSON null for 0. */
json_t *json_timestamp(long long us);
/* a JSON array of sv's strings (argv, a parameter's values) */
json_t *json_strvec(const struct strvec *sv);
/* 1 when the array a (or NULL) holds the string s; other elements are skipped */
int json_str_in(const json_t *a, const char *s);

/* v as an integer when whole (so readers of integers keep working), else a real. */
json_t *json_number(double v);

/* Typed getters with defaults; never crash on a missing or mistyped key. */
const char *json_get_str(const json_t *obj, const char *key, const char *def);
long long json_get_int(const json_t *obj, const char *key, long long def);
double json_get_real(const json_t *obj, const char *key, double def);

#endif
