/*
 * term.c - text made safe for a terminal (see term.h).
 */
#include "term.h"

#include <stdint.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
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

/*
 * Eight bytes at a time: the mask has bit 7 set in each byte below 0x20 (the
 * borrow of "byte - 0x20" reaches bit 7 of a byte that had it clear) or at
 * 0x7f and above (bit 7 set by "byte + 1" or already there).  A borrow or a
 * carry only runs on upwards from a byte that is itself flagged, so the lowest
 * flag is exact: on a little-endian machine it is the first such byte.
 */
#define BYTES(b) (0x0101010101010101ULL * (b))

static uint64_t unplain_mask(uint64_t w)
{
	return (((w - BYTES(0x20)) & ~w) | ((w + BYTES(0x01)) | w)) & BYTES(0x80);
}

/* The index in the word at s of its first byte that is not printable ASCII, or 8. */
static size_t word_plain(const unsigned char *s)
{
	uint64_t w, m;

	memcpy(&w, s, 8);
	m = unplain_mask(w);
	if (!m)
		return 8;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (size_t)__builtin_ctzll(m) / 8;
#else
	size_t i = 0;

	while (s[i] >= 0x20 && s[i] < 0x7f)
		i++;
	return i;
#endif
}

/*
 * The index of the first byte of s[0..len) that is not printable ASCII, or
 * len.  The last block is read where it ends at len, overlapping bytes found
 * plain already, so that no tail is read a byte at a time.
 */
static size_t plain_len(const unsigned char *s, size_t len)
{
	size_t i = 0, n;

#ifdef __SSE2__
	/* sixteen at a time: as signed bytes, 0x80-0xff are below 0x20 too */
	if (len >= 16) {
		for (;;) {
			__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
			int bad = _mm_movemask_epi8(_mm_or_si128(
				_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
				_mm_cmpeq_epi8(v, _mm_set1_epi8(0x7f))));

			if (bad)
				return i + (size_t)__builtin_ctz((unsigned)bad);
			if (i + 16 == len)
				return len;
			i = len - i >= 32 ? i + 16 : len - 16;
		}
	}
#endif
	if (len >= 8) {
		for (;;) {
			if ((n = word_plain(s + i)) < 8)
				return i + n;
			if (i + 8 == len)
				return len;
			i = len - i >= 16 ? i + 8 : len - 8;
		}
	}
	while (i < len && s[i] >= 0x20 && s[i] < 0x7f)
		i++;
	return i;
}

size_t term_clean_len(const char *text, size_t len, unsigned flags)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t i = 0;

	for (;;) {
		unsigned c, cp;
		size_t n;

		i += plain_len(s + i, len - i);
		if (i == len)
			return i;
		c = s[i];
		if ((c == '\t' && (flags & TERM_KEEP_TAB)) || (c == '\n' && (flags & TERM_KEEP_NL))) {
			i++;
			continue;
		}
		if (c < 0x80)
			return i;
		n = utf8_decode(s + i, len - i, &cp);
		if (!n || cp <= 0x9f)
			return i;   /* not UTF-8, or a C1 control */
		i += n;
	}
}

void term_sanitize(struct strbuf *out, const char *text, size_t len, unsigned flags)
{
	const unsigned char *s = (const unsigned char *)text;

	for (size_t i = 0; i < len;) {
		/* the common case, printable text, in one copy (rank logs are large) */
		size_t n = term_clean_len(text + i, len - i, flags);
		unsigned cp;

		strbuf_add(out, s + i, n);
		i += n;
		if (i == len)
			break;
		n = utf8_decode(s + i, len - i, &cp);
		if (!n) {
			add_hex(out, s + i, 1);   /* not UTF-8: one byte at a time */
			i++;
			continue;
		}
		if (cp == '\033')
			strbuf_addstr(out, "\\e");
		else if (cp == '\t')
			strbuf_addstr(out, "\\t");
		else if (cp == '\n')
			strbuf_addstr(out, "\\n");
		else if (cp == '\r')
			strbuf_addstr(out, "\\r");
		else
			add_hex(out, s + i, n);   /* C0, DEL, C1 (two bytes in UTF-8) */
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
