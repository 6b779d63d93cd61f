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
 * "1h30m", "10s", "250ms", "2d", "0s". */
void format_duration(struct strbuf *sb, long long ms);

#endif
