/*
 * units.h - durations and sizes as people write them in configuration files.
 *
 * Durations: one or more <number><unit> parts with units in decreasing order,
 * "90s", "2h", "500ms", "1h30m", "1.5h"; units d, h, m, s, ms.  A bare
 * number is refused (a unit is always required), except "0".  Sizes: "4G",
 * "512M", "1.5K", "4GiB", "4GB" (binary multiples: K = 1024), or a bare byte
 * count.  Both parsers accept the whole string or nothing and return 0 or -1.
 */
#ifndef DT_UNITS_H
#define DT_UNITS_H

#include "strbuf.h"

/* Largest duration accepted: 100 years, far beyond any timeout. */
#define DURATION_MAX_MS (100LL * 365 * 24 * 3600 * 1000)

int parse_duration_ms(const char *s, long long *ms);
int parse_size_bytes(const char *s, unsigned long long *bytes);

/* Append ms in the shortest form parse_duration_ms() reads back:
 * "1h30m", "10s", "250ms", "2d", "0s".  Exact: for configuration values
 * (validate's output, JSON, errors quoting a configured value). */
void format_duration(struct strbuf *sb, long long ms);
/* "USR1", "SIGUSR1" or "10" -> 10; -1 when it names no signal 1 .. 64 */
int parse_signal(const char *arg);

/*
 * Append ms for people, rounded to three or four significant figures:
 * "250ms", "33.8s", "2m05s", "1h02m", "3d04h", "0s".  Lossy, so never for
 * values a program or a config file reads back (use format_duration()).
 * parse_duration_ms() still reads every form it makes.
 */
void format_duration_human(struct strbuf *sb, long long ms);

/*
 * Numbers.  format_number_human(): "%.6g", for people ("0.000217853").
 * format_number_exact(): the shortest of "%.15g", "%.16g", "%.17g" that
 * strtod() reads back as the same double, for CSV and JSON ("2.320964403",
 * not "2.3209644030000001"); "nan", "inf" and "-inf" as printf writes them.
 */
void format_number_human(struct strbuf *sb, double v);
void format_number_exact(struct strbuf *sb, double v);

/* A number text ("0.00021785297075753034") for people: format_number_human()
 * of it when all of it is a finite number, else the text unchanged. */
void format_number_text_human(struct strbuf *sb, const char *s);

/* "1 node", "2 nodes": one when n == 1, else many (plural(n, "process", "processes")). */
const char *plural(long long n, const char *one, const char *many);
#endif
