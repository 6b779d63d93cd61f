/*
 * fuzz_logline.c - libFuzzer target for the rank log reader behind
 * `dtctl logs` (lib/logmerge.c): logline_parse(), log_sanitize() and a whole
 * read round (logset_begin/next/end) over a file holding the input.
 *
 * Rank logs are written by whatever the user's program prints, so every byte
 * sequence must come out as lines a terminal can show safely.  Besides the
 * sanitizers, checked against an independent strict UTF-8 decoder:
 *   - sanitized text is valid UTF-8 (no overlong forms, no surrogates, nothing
 *     above U+10FFFF) and has no C0 control byte but TAB, no DEL and no C1
 *     control (lib/term.h);
 *   - a parsed line's text lies inside the line, its stream is O or E, and its
 *     timestamp is not negative;
 *   - the fixed-position timestamp parser gives what strptime()/timegm() give
 *     for every timestamp it accepts;
 *   - the reader returns the lines in time order, each with stream O, E or
 *     '?' and its length right (text handed out in place or sanitised), and
 *     never more lines than the input has newlines + 1 + one per split.
 * Built and run by `make fuzz` (mk/fuzz.mk).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "logmerge.h"

/* 1 if s[0..n) is strict UTF-8 (RFC 3629). */
static int utf8_strict(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned int c = s[i], cp, need, min;

		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xC2 && c <= 0xDF) {
			need = 1, cp = c & 0x1F, min = 0x80;
		} else if (c >= 0xE0 && c <= 0xEF) {
			need = 2, cp = c & 0x0F, min = 0x800;
		} else if (c >= 0xF0 && c <= 0xF4) {
			need = 3, cp = c & 0x07, min = 0x10000;
		} else {
			return 0;
		}
		if (n - i <= need)
			return 0;
		for (unsigned int k = 1; k <= need; k++) {
			if ((s[i + k] & 0xC0) != 0x80)
				return 0;
			cp = (cp << 6) | (s[i + k] & 0x3F);
		}
		if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		i += need + 1;
	}
	return 1;
}

static void check_safe(const char *t, size_t n)
{
	if (!utf8_strict((const unsigned char *)t, n))
		abort();
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)t[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			abort();
		/* a C1 control (U+0080-U+009F), which a terminal may take as CSI */
		if (c == 0xc2 && i + 1 < n && (unsigned char)t[i + 1] <= 0x9f)
			abort();
	}
}

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data, *text;
	struct strbuf out = STRBUF_INIT;
	const struct logline *l;
	struct logset ls;
	size_t newlines = 0, n = 0;
	long long ts, last_ts = 0;
	char stream;
	FILE *fp;

	/* the pure functions, on the whole input as one line */
	if (logline_parse(buf, size, &ts, &stream, &text) == 0) {
		if (text < buf || text > buf + size || (stream != 'O' && stream != 'E') || ts < 0)
			abort();
	}
	/* the fixed-position timestamp parser agrees with strptime()/timegm() */
	if (size >= DT_TIMESTAMP_LEN - 1) {
		char tsbuf[DT_TIMESTAMP_LEN];

		memcpy(tsbuf, buf, DT_TIMESTAMP_LEN - 1);
		tsbuf[DT_TIMESTAMP_LEN - 1] = '\0';
		ts = dt_timestamp_parse_fixed(tsbuf);
		if (ts >= 0 && ts != dt_timestamp_parse(tsbuf))
			abort();
	}
	log_sanitize(&out, buf, size);
	check_safe(out.buf, out.len);
	strbuf_release(&out);

	/* the reader, on the input as a log file */
	if (!path[0])
		snprintf(path, sizeof(path), "/tmp/fuzz_logline.%d.log", (int)getpid());
	fp = fopen(path, "w");
	if (!fp)
		abort();
	if (size && fwrite(data, 1, size, fp) != size)
		abort();
	fclose(fp);
	for (size_t i = 0; i < size; i++)
		newlines += data[i] == '\n';
	logset_init(&ls);
	logset_add(&ls, path, 3, "node1");
	logset_begin(&ls, LOGSET_ALL | LOGSET_FINAL);
	while ((l = logset_next(&ls))) {
		if (l->len != strlen(l->text))
			abort();
		check_safe(l->text, l->len);
		if (l->stream != 'O' && l->stream != 'E' && l->stream != '?')
			abort();
		if (l->rank != 3 || strcmp(l->node, "node1") || l->src != 0)
			abort();
		if (n && l->ts < last_ts)
			abort();
		last_ts = l->ts;
		n++;
	}
	if (logset_end(&ls) < 0 || n > newlines + 1 + size / LOG_MAX_LINE)
		abort();
	logset_release(&ls);
	return 0;
}
