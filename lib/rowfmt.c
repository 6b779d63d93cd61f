/*
 * rowfmt.c - tab-separated rows with escapes (see rowfmt.h).
 */
#include "rowfmt.h"

#include <string.h>

void rowfmt_add(struct strbuf *sb, const char *field)
{
	const char *p = field, *run;

	if (!field) {
		strbuf_add(sb, "\\N\t", 3);
		return;
	}
	for (;;) {
		run = p;
		p += strcspn(p, "\\\t\n\r");
		strbuf_add(sb, run, (size_t)(p - run));
		if (!*p)
			break;
		strbuf_addch(sb, '\\');
		strbuf_addch(sb, *p == '\t' ? 't' : *p == '\n' ? 'n' : *p == '\r' ? 'r' : '\\');
		p++;
	}
	strbuf_addch(sb, '\t');
}

void rowfmt_add_int(struct strbuf *sb, long long v)
{
	strbuf_addf(sb, "%lld\t", v);
}

void rowfmt_end(struct strbuf *sb)
{
	if (sb->len && sb->buf[sb->len - 1] == '\t')
		sb->buf[sb->len - 1] = '\n';
	else
		strbuf_addch(sb, '\n');
}

int rowfmt_next(char **cursor, char **fields, int max)
{
	char *p = *cursor, *out;
	int n = 0;

	if (!*p)
		return 0;
	for (int i = 0; i < max; i++)
		fields[i] = NULL;
	for (;;) {
		char *start = p;
		int missing = p[0] == '\\' && p[1] == 'N' && (!p[2] || p[2] == '\t' || p[2] == '\n');

		/* unescape in place: out trails p */
		for (out = p; *p && *p != '\t' && *p != '\n'; p++) {
			if (*p == '\\' && p[1]) {
				p++;
				*out++ = *p == 't' ? '\t' : *p == 'n' ? '\n' : *p == 'r' ? '\r' : *p;
			} else {
				*out++ = *p;
			}
		}
		if (n < max)
			fields[n] = missing ? NULL : start;
		n++;
		if (*p == '\t') {
			*out = '\0';
			p++;
			continue;
		}
		if (*p == '\n')
			p++;
		*out = '\0';
		break;
	}
	*cursor = p;
	return n;
}
