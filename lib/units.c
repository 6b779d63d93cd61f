/*
 * units.c - parse and format durations and sizes (see units.h).
 *
 * Written by hand rather than with strtod() so that "1e3s", "inf", " 5s",
 * hex and locale-dependent decimal points are all refused: configuration
 * values should mean one thing only.
 */
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/*
 * Read "<digits>[.<digits>]" at *sp into an integer part and a fraction
 * scaled to 1e9 (nanounits).  Returns 0 and advances *sp, or -1.
 */
static int read_decimal(const char **sp, unsigned long long *ip, unsigned long long *frac)
{
	const char *s = *sp;
	unsigned long long v = 0, f = 0, scale = 100000000ULL;
	int digits = 0;

	while (*s >= '0' && *s <= '9') {
		if (v > 100000000000000ULL)   /* 1e15: beyond anything sensible */
			return -1;
		v = v * 10 + (unsigned)(*s++ - '0');
		digits++;
	}
	if (*s == '.') {
		int fdigits = 0;

		s++;
		while (*s >= '0' && *s <= '9') {
			if (scale) {
				f += (unsigned)(*s - '0') * scale;
				scale /= 10;
			}
			s++;
			fdigits++;
		}
		if (!fdigits)
			return -1;
	}
	if (!digits)
		return -1;
	*ip = v;
	*frac = f;
	*sp = s;
	return 0;
}

static const struct {
	const char *name;
	long long ms;
} duration_units[] = {
	{ "d", 24LL * 3600 * 1000 },
	{ "h", 3600LL * 1000 },
	{ "ms", 1 },         /* before "m" so that "ms" wins */
	{ "m", 60LL * 1000 },
	{ "s", 1000 },
};

/* Rank of a unit for the "decreasing order" rule: d > h > m > s > ms. */
static int unit_rank(long long ms)
{
	switch (ms) {
	case 24LL * 3600 * 1000: return 5;
	case 3600LL * 1000: return 4;
	case 60LL * 1000: return 3;
	case 1000: return 2;
	default: return 1;
	}
}

int parse_duration_ms(const char *s, long long *ms)
{
	long long total = 0;
	int last_rank = 100;

	if (!s || !*s)
		return -1;
	if (!strcmp(s, "0")) {
		*ms = 0;
		return 0;
	}
	while (*s) {
		unsigned long long ip, frac;
		long long unit = 0;
		size_t ulen = 0;
		double part;

		if (read_decimal(&s, &ip, &frac) < 0)
			return -1;
		for (size_t i = 0; i < sizeof(duration_units) / sizeof(duration_units[0]); i++) {
			size_t n = strlen(duration_units[i].name);

			if (!strncmp(s, duration_units[i].name, n)) {
				unit = duration_units[i].ms;
				ulen = n;
				break;
			}
		}
		if (!unit || unit_rank(unit) >= last_rank)
			return -1;
		last_rank = unit_rank(unit);
		s += ulen;
		part = ((double)ip + (double)frac / 1e9) * (double)unit;
		if (part > (double)DURATION_MAX_MS)
			return -1;
		total += (long long)(part + 0.5);
		if (total > DURATION_MAX_MS)
			return -1;
	}
	*ms = total;
	return 0;
}

int parse_size_bytes(const char *s, unsigned long long *bytes)
{
	unsigned long long ip, frac, mult = 1;
	long double v;
	const char *suffix;

	if (!s || !*s)
		return -1;
	if (read_decimal(&s, &ip, &frac) < 0)
		return -1;
	suffix = s;
	switch (*suffix) {
	case '\0': break;
	case 'b': case 'B': mult = 1; suffix++; break;
	case 'k': case 'K': mult = 1ULL << 10; break;
	case 'm': case 'M': mult = 1ULL << 20; break;
	case 'g': case 'G': mult = 1ULL << 30; break;
	case 't': case 'T': mult = 1ULL << 40; break;
	case 'p': case 'P': mult = 1ULL << 50; break;
	default: return -1;
	}
	if (mult > 1) {
		suffix++;
		if (!strcmp(suffix, "iB") || !strcmp(suffix, "B") || !strcmp(suffix, "b"))
			suffix += strlen(suffix);
	}
	if (*suffix)
		return -1;
	if (mult == 1 && frac)
		return -1;   /* "1.5" bytes */
	v = ((long double)ip + (long double)frac / 1e9L) * (long double)mult;
	if (v >= 18446744073709551615.0L)
		return -1;
	*bytes = (unsigned long long)(v + 0.5L);
	return 0;
}

void format_duration(struct strbuf *sb, long long ms)
{
	static const struct {
		const char *name;
		long long ms;
	} parts[] = {
		{ "d", 24LL * 3600 * 1000 }, { "h", 3600LL * 1000 },
		{ "m", 60LL * 1000 }, { "s", 1000 }, { "ms", 1 },
	};

	if (ms < 0) {
		strbuf_addch(sb, '-');
		ms = ms == LLONG_MIN ? LLONG_MAX : -ms;
	}
	if (!ms) {
		strbuf_addstr(sb, "0s");
		return;
	}
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		if (ms >= parts[i].ms) {
			strbuf_addf(sb, "%lld%s", ms / parts[i].ms, parts[i].name);
			ms %= parts[i].ms;
		}
	}
}

void format_duration_human(struct strbuf *sb, long long ms)
{
	long long r;

	if (ms < 0) {
		strbuf_addch(sb, '-');
		ms = ms == LLONG_MIN ? LLONG_MAX : -ms;
	}
	/* each step rounds, then checks the rounded value, so 59.96s is "1m00s" */
	if (ms < 1000) {
		strbuf_addf(sb, ms ? "%lldms" : "0s", ms);
	} else if ((r = (ms + 50) / 100) < 600) {
		if (r % 10)
			strbuf_addf(sb, "%lld.%llds", r / 10, r % 10);
		else
			strbuf_addf(sb, "%llds", r / 10);
	} else if ((r = (ms + 500) / 1000) < 3600) {
		strbuf_addf(sb, "%lldm%02llds", r / 60, r % 60);
	} else if ((r = (ms + 30000) / 60000) < 24 * 60) {
		strbuf_addf(sb, "%lldh%02lldm", r / 60, r % 60);
	} else {
		r = (ms / 2 + 900000) / 1800000;   /* hours, rounded, without overflow */
		strbuf_addf(sb, "%lldd%02lldh", r / 24, r % 24);
	}
}

void format_number_human(struct strbuf *sb, double v)
{
	strbuf_addf(sb, "%.6g", v);
}

void format_number_exact(struct strbuf *sb, double v)
{
	char buf[40];

	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, v);
		if (!isfinite(v) || strtod(buf, NULL) == v)
			break;
	}
	strbuf_addstr(sb, buf);
}

void format_number_text_human(struct strbuf *sb, const char *s)
{
	char *end;
	double v;

	if (!s || !*s || isspace((unsigned char)*s)) {
		strbuf_addstr(sb, s ? s : "");
		return;
	}
	errno = 0;
	v = strtod(s, &end);
	if (*end || errno == ERANGE || !isfinite(v) || strpbrk(s, "xXnN"))
		strbuf_addstr(sb, s);   /* not a plain decimal number: "adam", "0x10", "nan" */
	else
		format_number_human(sb, v);
}

const char *plural(long long n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

int parse_signal(const char *arg)
{
	char *end;
	long n;

	if (!strncasecmp(arg, "SIG", 3))
		arg += 3;
	n = strtol(arg, &end, 10);
	if (end != arg && !*end)
		return n >= 1 && n <= 64 ? (int)n : -1;
	for (int sig = 1; sig < NSIG && sig <= 64; sig++) {
		const char *name = sigabbrev_np(sig);

		if (name && !strcasecmp(name, arg))
			return sig;
	}
	return -1;
}
