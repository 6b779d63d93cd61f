/*
 * promtext.h - Prometheus text exposition (format 0.0.4) for /metrics of
 * dtsched and the agents.
 *
 * Every family is written with prom_family() first (HELP and TYPE, as
 * `promtool check metrics` requires), then its samples.  Label values are
 * escaped (\\, \", \n).  Units are base units in the name (_seconds,
 * _bytes, _ratio), counters end in _total.
 */
#ifndef DT_PROMTEXT_H
#define DT_PROMTEXT_H

#include <stddef.h>
#include "strbuf.h"

void prom_family(struct strbuf *o, const char *name, const char *type, const char *help);
/* Append a label value, escaped, without the quotes. */
void prom_label_value(struct strbuf *o, const char *v);
/* name{k1="v1",...} value: labels as NULL-terminated key, value pairs (may be NULL). */
void prom_sample(struct strbuf *o, const char *name, const char *const *labels, double value);

/*
 * A histogram of observations (cumulative buckets written at exposition).
 * bounds: upper bounds, ascending; counts has nr_bounds + 1 slots (+Inf last).
 */
struct prom_hist {
	const double *bounds;
	size_t nr_bounds;
	unsigned long long *counts;
	unsigned long long count;
	double sum;
};

void prom_hist_observe(struct prom_hist *h, double v);
void prom_hist_write(struct strbuf *o, const char *name, const char *const *labels,
		     const struct prom_hist *h);

#endif
