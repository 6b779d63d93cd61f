/*
 * promtext.c - Prometheus text exposition (see promtext.h).
 */
#include "promtext.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void prom_family(struct strbuf *o, const char *name, const char *type, const char *help)
{
	strbuf_addf(o, "# HELP %s ", name);
	/* HELP text escapes only backslash and newline */
	for (const char *p = help; *p; p++) {
		if (*p == '\\')
			strbuf_addstr(o, "\\\\");
		else if (*p == '\n')
			strbuf_addstr(o, "\\n");
		else
			strbuf_addch(o, *p);
	}
	strbuf_addf(o, "\n# TYPE %s %s\n", name, type);
}

void prom_label_value(struct strbuf *o, const char *v)
{
	for (const char *p = v ? v : ""; *p; p++) {
		if (*p == '\\' || *p == '"')
			strbuf_addch(o, '\\');
		if (*p == '\n')
			strbuf_addstr(o, "\\n");
		else
			strbuf_addch(o, *p);
	}
}

static void add_labels(struct strbuf *o, const char *const *labels, const char *le)
{
	int n = 0;

	for (size_t i = 0; labels && labels[i]; i += 2) {
		strbuf_addf(o, "%s%s=\"", n++ ? "," : "{", labels[i]);
		prom_label_value(o, labels[i + 1]);
		strbuf_addch(o, '"');
	}
	if (le)
		strbuf_addf(o, "%sle=\"%s\"", n++ ? "," : "{", le);
	if (n)
		strbuf_addch(o, '}');
}

static void add_value(struct strbuf *o, double v)
{
	if (isinf(v))
		strbuf_addstr(o, v > 0 ? "+Inf" : "-Inf");
	else if (isnan(v))
		strbuf_addstr(o, "NaN");
	else if (v == (double)(long long)v && fabs(v) < 1e15)
		strbuf_addf(o, "%lld", (long long)v);
	else
		strbuf_addf(o, "%.17g", v);
}

void prom_sample(struct strbuf *o, const char *name, const char *const *labels, double value)
{
	strbuf_addstr(o, name);
	add_labels(o, labels, NULL);
	strbuf_addch(o, ' ');
	add_value(o, value);
	strbuf_addch(o, '\n');
}

void prom_hist_observe(struct prom_hist *h, double v)
{
	size_t i = 0;

	while (i < h->nr_bounds && v > h->bounds[i])
		i++;
	h->counts[i]++;
	h->count++;
	h->sum += v;
}

void prom_hist_write(struct strbuf *o, const char *name, const char *const *labels,
		     const struct prom_hist *h)
{
	unsigned long long cum = 0;
	char le[32];

	for (size_t i = 0; i <= h->nr_bounds; i++) {
		cum += h->counts[i];
		if (i < h->nr_bounds)
			snprintf(le, sizeof(le), "%g", h->bounds[i]);
		else
			snprintf(le, sizeof(le), "+Inf");
		strbuf_addf(o, "%s_bucket", name);
		add_labels(o, labels, le);
		strbuf_addf(o, " %llu\n", cum);
	}
	strbuf_addf(o, "%s_sum", name);
	add_labels(o, labels, NULL);
	strbuf_addch(o, ' ');
	add_value(o, h->sum);
	strbuf_addf(o, "\n%s_count", name);
	add_labels(o, labels, NULL);
	strbuf_addf(o, " %llu\n", h->count);
}
