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
