/*
 * log.c - timestamps and the daemon log writer.
 */
#include "log.h"
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

static FILE *logfp;
static char *log_path;
static size_t log_max;
static int log_min = -1;

void dt_timestamp_format(char *buf, size_t len, long long us)
{
	time_t sec = (time_t)(us / 1000000);
	struct tm tm;

	gmtime_r(&sec, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", (tm.tm_year + 1900) % 10000,
		 (tm.tm_mon + 1) % 100, tm.tm_mday % 100, tm.tm_hour % 100, tm.tm_min % 100,
		 tm.tm_sec % 100, (int)(us % 1000000));
}

void dt_timestamp(char *buf, size_t len)
{
	dt_timestamp_format(buf, len, dt_now_us());
}

long long dt_timestamp_parse(const char *s)
{
	struct tm tm;
	int us_digits = 0;
	long us = 0;
	const char *p;

	memset(&tm, 0, sizeof(tm));
	p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!p)
		return -1;
	if (*p == '.') {
		for (p++; *p >= '0' && *p <= '9' && us_digits < 6; p++, us_digits++)
			us = us * 10 + (*p - '0');
		while (us_digits++ < 6)
			us *= 10;
	}
	if (*p != 'Z')
		return -1;
	return (long long)timegm(&tm) * 1000000LL + us;
}

/* The n decimal digits at s, or -1 if one is not a digit. */
static int digits(const char *s, int n)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/*
 * Days from 1970-01-01 to y-m-d (y >= 1970).  Years are counted from March so
 * that February, the month of the leap day, ends the year: the days before
 * month m of such a year are then (153 * m + 2) / 5 (the months from March go
 * 31 30 31 30 31, 31 30 31 30 31, 31 28/29), and the leap days before year y
 * are y/4 - y/100 + y/400.  719468 is the number of days from 0000-03-01 to
 * 1970-01-01.  Like timegm(), a day past the month's end runs into the next.
 */
static long long days_from_civil(long long y, int m, int d)
{
	int mar = (m + 9) % 12;   /* March = 0 .. February = 11 */

	y -= m <= 2;
	return y * 365 + y / 4 - y / 100 + y / 400 + (153 * mar + 2) / 5 + d - 1 - 719468;
}

long long dt_timestamp_parse_next(struct dt_minute *m, const char *s)
{
	int sec = digits(s + 17, 2), us = digits(s + 20, 6);

	if (s[19] != '.' || s[26] != 'Z' || sec < 0 || sec > 61 || us < 0)
		return -1;
	if (!m->set || memcmp(s, m->text, sizeof(m->text))) {
		int y = digits(s, 4), mo = digits(s + 5, 2), d = digits(s + 8, 2);
		int h = digits(s + 11, 2), mi = digits(s + 14, 2);

		if (s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':')
			return -1;
		/* the ranges strptime() takes for %m %d %H %M */
		if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 ||
		    mi < 0 || mi > 59)
			return -1;
		memcpy(m->text, s, sizeof(m->text));
		m->set = 1;
		m->us = ((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60000000LL;
	}
	return m->us + sec * 1000000LL + us;
}

long long dt_timestamp_parse_fixed(const char *s)
{
	struct dt_minute m = { { 0 }, 0, 0 };

	return dt_timestamp_parse_next(&m, s);
}

long long dt_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

long long dt_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void rotate_if_needed(void)
{
	struct stat st;
	struct strbuf old = STRBUF_INIT;

	if (!log_path || !log_max || stat(log_path, &st) < 0 || (size_t)st.st_size < log_max)
		return;
	strbuf_addf(&old, "%s.1", log_path);
	rename(log_path, old.buf);
	strbuf_release(&old);
	if (logfp)
		fclose(logfp);
	logfp = fopen(log_path, "a");
}

int dtlog_open(const char *path, size_t max_bytes)
{
	FILE *fp = fopen(path, "a");

	if (!fp)
		return error_errno("cannot open log '%s'", path);
	if (logfp)
		fclose(logfp);
	logfp = fp;
	free(log_path);
	log_path = xstrdup(path);
	log_max = max_bytes;
	setvbuf(logfp, NULL, _IOLBF, 0);
	return 0;
}

static int min_level(void)
{
	if (log_min < 0) {
		const char *e = getenv("DT_LOG");

		log_min = DTLOG_INFO;
		if (e && !strcasecmp(e, "debug"))
			log_min = DTLOG_DEBUG;
		else if (e && !strcasecmp(e, "warn"))
			log_min = DTLOG_WARN;
		else if (e && !strcasecmp(e, "error"))
			log_min = DTLOG_ERROR;
	}
	return log_min;
}

void dtlog(enum dtlog_level level, const char *fmt, ...)
{
	static const char *names[] = { "DEBUG", "INFO", "WARN", "ERROR" };
	char ts[DT_TIMESTAMP_LEN];
	FILE *out;
	va_list ap;

	if ((int)level < min_level())
		return;
	rotate_if_needed();
	out = logfp ? logfp : stderr;
	dt_timestamp(ts, sizeof(ts));
	fprintf(out, "%s %s ", ts, names[level]);
	va_start(ap, fmt);
	vfprintf(out, fmt, ap);
	va_end(ap);
	fputc('\n', out);
}
