/*
 * term.c - text made safe for a terminal (see term.h).
 */
#include "term.h"

#include <string.h>

size_t utf8_decode(const unsigned char *s, size_t left, unsigned *cp)
{
	unsigned c = s[0], min;
	size_t n;

	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if ((c & 0xe0) == 0xc0) {
		n = 2; min = 0x80; c &= 0x1f;
	} else if ((c & 0xf0) == 0xe0) {
		n = 3; min = 0x800; c &= 0x0f;
	} else if ((c & 0xf8) == 0xf0) {
		n = 4; min = 0x10000; c &= 0x07;
	} else {
		return 0;
	}
	if (left < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return n;
}

static void add_hex(struct strbuf *out, const unsigned char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		char esc[4] = { '\\', 'x', hex[s[i] >> 4], hex[s[i] & 15] };

		strbuf_add(out, esc, sizeof(esc));
	}
}

void term_sanitize(struct strbuf *out, const char *text, size_t len, unsigned flags)
{
	const unsigned char *s = (const unsigned char *)text;

	for (size_t i = 0; i < len;) {
		size_t plain = i;
		unsigned cp;
		size_t n;

		/* the common case, printable ASCII, in one copy (rank logs are large) */
		while (plain < len && s[plain] >= 0x20 && s[plain] < 0x7f)
			plain++;
		if (plain > i) {
			strbuf_add(out, s + i, plain - i);
			i = plain;
			continue;
		}
		n = utf8_decode(s + i, len - i, &cp);
		if (!n) {
			add_hex(out, s + i, 1);   /* not UTF-8: one byte at a time */
			i++;
			continue;
		}
		if (cp == '\033')
			strbuf_addstr(out, "\\e");
		else if (cp == '\t')
			strbuf_addstr(out, flags & TERM_KEEP_TAB ? "\t" : "\\t");
		else if (cp == '\n')
			strbuf_addstr(out, flags & TERM_KEEP_NL ? "\n" : "\\n");
		else if (cp == '\r')
			strbuf_addstr(out, "\\r");
		else if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f))
			add_hex(out, s + i, n);   /* C0, DEL, C1 (two bytes in UTF-8) */
		else
			strbuf_add(out, s + i, n);
		i += n;
	}
}

const char *term_str(const char *s)
{
	static struct strbuf slot[TERM_STR_SLOTS];
	static unsigned next;
	struct strbuf *sb;

	if (!s)
		return NULL;
	sb = &slot[next++ % TERM_STR_SLOTS];
	if (!sb->buf)
		strbuf_init(sb, 0);
	strbuf_reset(sb);
	term_sanitize(sb, s, strlen(s), 0);
	return sb->buf;
}
