/*
 * pyfmt.c - Python's str(), repr() and json.dumps() of JSON values (pyfmt.h).
 *
 * The rules followed are CPython 3's: float repr is the shortest string that
 * round-trips, in fixed notation for exponents -4..15 (with at least one
 * digit after the point) and otherwise d.ddde±XX; a string's repr is quoted
 * with ' unless it holds ' and no ", escaping \\, the quote, \t \n \r and
 * other control characters as \xNN; json.dumps escapes non-ASCII as \uXXXX
 * (surrogate pairs above U+FFFF).
 */
#include "pyfmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void py_float(struct strbuf *sb, double v)
{
	char buf[40], digits[24];
	int prec, exp10, nd = 0;
	char *e;

	if (isnan(v)) {
		strbuf_addstr(sb, "nan");
		return;
	}
	if (isinf(v)) {
		strbuf_addstr(sb, v < 0 ? "-inf" : "inf");
		return;
	}
	if (v == 0) {
		strbuf_addstr(sb, signbit(v) ? "-0.0" : "0.0");
		return;
	}
	for (prec = 0; prec < 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*e", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	/* buf: [-]d[.ddd]e±XX */
	e = strchr(buf, 'e');
	exp10 = atoi(e + 1);
	for (const char *c = buf; c < e; c++)
		if (*c >= '0' && *c <= '9')
			digits[nd++] = *c;
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = '\0';
	if (v < 0)
		strbuf_addch(sb, '-');
	if (exp10 >= -4 && exp10 < 16) {
		if (exp10 < 0) {
			strbuf_addstr(sb, "0.");
			for (int i = -1; i > exp10; i--)
				strbuf_addch(sb, '0');
			strbuf_addstr(sb, digits);
		} else if (nd <= exp10 + 1) {
			strbuf_addstr(sb, digits);
			for (int i = nd; i <= exp10; i++)
				strbuf_addch(sb, '0');
			strbuf_addstr(sb, ".0");
		} else {
			strbuf_add(sb, digits, (size_t)exp10 + 1);
			strbuf_addch(sb, '.');
			strbuf_addstr(sb, digits + exp10 + 1);
		}
		return;
	}
	strbuf_addch(sb, digits[0]);
	if (nd > 1)
		strbuf_addf(sb, ".%s", digits + 1);
	strbuf_addf(sb, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
}

static void py_repr_str(struct strbuf *sb, const char *s)
{
	char q = strchr(s, '\'') && !strchr(s, '"') ? '"' : '\'';

	strbuf_addch(sb, q);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '\\' || *c == (unsigned char)q)
			strbuf_addf(sb, "\\%c", *c);
		else if (*c == '\n')
			strbuf_addstr(sb, "\\n");
		else if (*c == '\r')
			strbuf_addstr(sb, "\\r");
		else if (*c == '\t')
			strbuf_addstr(sb, "\\t");
		else if (*c < 0x20 || *c == 0x7f)
			strbuf_addf(sb, "\\x%02x", *c);
		else
			strbuf_addch(sb, (char)*c);
	}
	strbuf_addch(sb, q);
}

/* One UTF-8 sequence at *p as a code point (advancing *p); U+FFFD for bad bytes. */
static unsigned long utf8_next(const unsigned char **p)
{
	const unsigned char *c = *p;
	unsigned long cp;
	int n;

	if (c[0] < 0x80) {
		*p = c + 1;
		return c[0];
	}
	n = c[0] >= 0xf0 ? 3 : c[0] >= 0xe0 ? 2 : 1;
	cp = c[0] & (0x3f >> n);
	for (int i = 1; i <= n; i++) {
		if ((c[i] & 0xc0) != 0x80) {
			*p = c + i;
			return 0xfffd;
		}
		cp = cp << 6 | (c[i] & 0x3f);
	}
	*p = c + n + 1;
	return cp;
}

static void py_json_str(struct strbuf *sb, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	strbuf_addch(sb, '"');
	while (*p) {
		unsigned long cp = utf8_next(&p);

		if (cp == '"' || cp == '\\')
			strbuf_addf(sb, "\\%c", (char)cp);
		else if (cp == '\n')
			strbuf_addstr(sb, "\\n");
		else if (cp == '\r')
			strbuf_addstr(sb, "\\r");
		else if (cp == '\t')
			strbuf_addstr(sb, "\\t");
		else if (cp == '\b')
			strbuf_addstr(sb, "\\b");
		else if (cp == '\f')
			strbuf_addstr(sb, "\\f");
		else if (cp < 0x20 || (cp >= 0x7f && cp < 0x10000))
			strbuf_addf(sb, "\\u%04lx", cp);   /* outside ' '..'~' */
		else if (cp >= 0x10000)
			strbuf_addf(sb, "\\u%04lx\\u%04lx", 0xd800 + ((cp - 0x10000) >> 10),
				    0xdc00 + ((cp - 0x10000) & 0x3ff));
		else
			strbuf_addch(sb, (char)cp);
	}
	strbuf_addch(sb, '"');
}

static void py_json_str(struct strbuf *sb, const char *s);

/*
 * repr() of v (json 0: top-level strings quoted, so str() differs only
 * there) or json.dumps() of v (json 1): the same walk, other spellings.
 */
static void py_emit(struct strbuf *sb, const json_t *v, int json)
{
	const char *key;
	json_t *kid;
	size_t i;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		strbuf_addch(sb, '{');
		i = 0;
		json_object_foreach((json_t *)v, key, kid) {
			if (i++)
				strbuf_addstr(sb, ", ");
			(json ? py_json_str : py_repr_str)(sb, key);
			strbuf_addstr(sb, ": ");
			py_emit(sb, kid, json);
		}
		strbuf_addch(sb, '}');
		break;
	case JSON_ARRAY:
		strbuf_addch(sb, '[');
		json_array_foreach(v, i, kid) {
			if (i)
				strbuf_addstr(sb, ", ");
			py_emit(sb, kid, json);
		}
		strbuf_addch(sb, ']');
		break;
	case JSON_STRING:
		(json ? py_json_str : py_repr_str)(sb, json_string_value(v));
		break;
	case JSON_INTEGER:
		strbuf_addf(sb, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		break;
	case JSON_REAL: {
		double d = json_real_value(v);

		if (json && isnan(d))
			strbuf_addstr(sb, "NaN");
		else if (json && isinf(d))
			strbuf_addstr(sb, d < 0 ? "-Infinity" : "Infinity");
		else
			py_float(sb, d);
		break;
	}
	case JSON_TRUE:
		strbuf_addstr(sb, json ? "true" : "True");
		break;
	case JSON_FALSE:
		strbuf_addstr(sb, json ? "false" : "False");
		break;
	case JSON_NULL:
		strbuf_addstr(sb, json ? "null" : "None");
		break;
	}
}

void py_str(struct strbuf *sb, const json_t *v)
{
	if (json_is_string(v))
		strbuf_addstr(sb, json_string_value(v));
	else
		py_emit(sb, v, 0);
}

void py_json(struct strbuf *sb, const json_t *v)
{
	py_emit(sb, v, 1);
}
