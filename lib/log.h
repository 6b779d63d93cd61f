/*
 * log.h - timestamps and the daemons' log files.
 *
 * dt_timestamp() formats the UTC time with microseconds used everywhere:
 * the rank log line format (docs/architecture.md) is "<timestamp> O|E <text>".
 * dtlog() writes "<timestamp> LEVEL message" to the log opened with
 * dtlog_open() (stderr until then); DT_LOG=debug|info|warn|error filters.
 */
#ifndef DT_LOG_H
#define DT_LOG_H

#include <stddef.h>
#include "usage.h"

enum dtlog_level { DTLOG_DEBUG, DTLOG_INFO, DTLOG_WARN, DTLOG_ERROR };

#define DT_TIMESTAMP_LEN 28   /* "2026-11-22T10:00:00.123456Z" + NUL */

/* Format the current UTC time into buf (at least DT_TIMESTAMP_LEN bytes). */
void dt_timestamp(char *buf, size_t len);
/* Format a time given in microseconds since the epoch the same way. */
void dt_timestamp_format(char *buf, size_t len, long long us);
/* Parse a dt_timestamp string into microseconds since the epoch; -1 if bad. */
long long dt_timestamp_parse(const char *s);
/*
 * The same for exactly DT_TIMESTAMP_LEN - 1 bytes at s (no NUL needed), by
 * fixed positions and calendar arithmetic instead of strptime()/timegm(): the
 * log reader parses one per line.  Years before 1970 give -1.
 */
long long dt_timestamp_parse_fixed(const char *s);
/*
 * The same, remembering in *m the minute of the last timestamp it parsed
 * ("YYYY-MM-DDTHH:MM:"): a log's lines mostly share it, and then only the
 * seconds are read.  Start *m zeroed.
 */
struct dt_minute {
	char text[17];
	long long us;
	int set;
};
long long dt_timestamp_parse_next(struct dt_minute *m, const char *s);
/* Wall clock in microseconds since the epoch, and a monotonic clock in ms. */
long long dt_now_us(void);
long long dt_mono_ms(void);

/* Open (append) the log file; rotate it to path.1 when over max_bytes. */
int dtlog_open(const char *path, size_t max_bytes);
void dtlog(enum dtlog_level level, const char *fmt, ...) DT_PRINTF(2, 3);

#endif
