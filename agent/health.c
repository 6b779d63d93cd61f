/*
 * health.c - the node's health, read every heartbeat cycle (see health.h).
 */
#include "health.h"
#include "json.h"
#include "log.h"
#include "safefile.h"
#include "strbuf.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

/* disk: degraded under 1 GiB or 2 % free, bad under 64 MiB */
#define DISK_LOW (1ULL << 30)
#define DISK_LOW_PCT 2.0
#define DISK_FULL (64ULL << 20)
/* memory: degraded when tasks stalled on memory > 10 % of the last 10 s */
#define MEM_FULL_AVG10 10.0
#define HOT_C 90

void health_init(struct health *h)
{
	h->sticky = json_object();
	h->states = json_object();
}

void health_release(struct health *h)
{
	json_decref(h->sticky);
	json_decref(h->states);
	h->sticky = h->states = NULL;
}

static json_t *event(const char *severity, const char *kind, int gpu, const char *now,
		     const char *fmt, ...) DT_PRINTF(5, 6);
static json_t *event(const char *severity, const char *kind, int gpu, const char *now,
		     const char *fmt, ...)
{
	struct strbuf d = STRBUF_INIT;
	va_list ap;
	json_t *e;

	va_start(ap, fmt);
	strbuf_vaddf(&d, fmt, ap);
	va_end(ap);
	e = json_pack("{s:s, s:s, s:i, s:s, s:s}", "severity", severity, "kind", kind, "gpu", gpu,
		      "detail", d.buf, "since", now);
	strbuf_release(&d);
	return e;
}

/* what an XID means, for the ones a node operator acts on (NVIDIA's XID catalog) */
static const char *xid_name(int x)
{
	switch (x) {
	case 48: return "double-bit ECC error";
	case 63: return "ECC page retirement or row remapping recorded";
	case 64: return "ECC page retirement or row remapping failed";
	case 74: return "NVLink error";
	case 79: return "GPU has fallen off the bus";
	case 92: return "high single-bit ECC error rate";
	case 94: return "contained ECC error";
	case 95: return "uncontained ECC error";
	case 119: case 120: return "GSP firmware error";
	default: return NULL;
	}
}

/* XIDs an application causes (bad kernel, illegal address, reset channel) */
static int xid_is_app(int x)
{
	return x == 13 || x == 31 || x == 43 || x == 45 || x == 68;
}

/* XIDs after which the GPU needs a reset before it can be trusted */
static int xid_is_bad(int x)
{
	return x == 48 || x == 64 || x == 74 || x == 79 || x == 94 || x == 95 || x == 119 ||
	       x == 120;
}

void health_gpu_events(const struct dt_gpu_health *g, json_t *events, const char *now)
{
	int i = g->index;

	if (g->lost)
		json_array_append_new(events, event("bad", "gpu_lost", i, now,
						    "GPU %d has fallen off the bus", i));
	if (g->reset_required)
		json_array_append_new(events, event("bad", "reset_required", i, now,
						    "GPU %d needs a reset", i));
	for (int k = 0; k < g->nr_xid; k++) {
		int x = g->xid[k];
		const char *name = xid_name(x);

		if (xid_is_app(x))
			continue;
		json_array_append_new(events, event(xid_is_bad(x) ? "bad" : "degraded", "xid", i, now,
						    "XID %d on GPU %d%s%s", x, i, name ? ": " : "",
						    name ? name : ""));
	}
	if (g->ecc_volatile_dbe > 0)
		json_array_append_new(events, event("bad", "ecc", i, now,
						    "GPU %d: %lld uncorrected ECC error%s since its "
						    "last reset", i, g->ecc_volatile_dbe,
						    g->ecc_volatile_dbe > 1 ? "s" : ""));
	else if (g->ecc_aggregate_dbe > 0)
		json_array_append_new(events, event("degraded", "ecc", i, now,
						    "GPU %d: %lld uncorrected ECC error%s in its life",
						    i, g->ecc_aggregate_dbe,
						    g->ecc_aggregate_dbe > 1 ? "s" : ""));
	if (g->remap_failure > 0)
		json_array_append_new(events, event("bad", "remap", i, now,
						    "GPU %d: row remapping failed", i));
	else if (g->remap_pending > 0)
		json_array_append_new(events, event("degraded", "remap", i, now,
						    "GPU %d: rows wait to be remapped at the next reset",
						    i));
	if (g->retired_pages_pending > 0)
		json_array_append_new(events, event("degraded", "retired_pages", i, now,
						    "GPU %d: pages wait to be retired at the next reset",
						    i));
	if (g->throttle & (DT_THROTTLE_HW_SLOWDOWN | DT_THROTTLE_HW_THERMAL |
			   DT_THROTTLE_POWER_BRAKE)) {
		struct strbuf why = STRBUF_INIT;

		if (g->throttle & DT_THROTTLE_HW_SLOWDOWN)
			strbuf_addstr(&why, "slowdown");
		if (g->throttle & DT_THROTTLE_HW_THERMAL)
			strbuf_addf(&why, "%sthermal", why.len ? ", " : "");
		if (g->throttle & DT_THROTTLE_POWER_BRAKE)
			strbuf_addf(&why, "%spower brake", why.len ? ", " : "");
		json_array_append_new(events, event("degraded", "throttle", i, now,
						    "GPU %d is throttled by hardware (%s)", i, why.buf));
		strbuf_release(&why);
	}
	if (g->temperature >= HOT_C)
		json_array_append_new(events, event("degraded", "temperature", i, now,
						    "GPU %d at %d C or more", i, HOT_C));
}

const char *health_status(const json_t *events)
{
	const json_t *e;
	size_t i;
	int worst = 0;

	json_array_foreach(events, i, e) {
		const char *s = json_get_str(e, "severity", "");

		if (!strcmp(s, "bad"))
			worst = 2;
		else if (!strcmp(s, "degraded") && worst < 1)
			worst = 1;
	}
	return worst == 2 ? "bad" : worst ? "degraded" : "ok";
}

/* a fake GPU's readings from the --fake-health file ({"gpus": {"1": {...}}}) */
static void fake_reading(const json_t *faults, int index, struct dt_gpu_health *g)
{
	char key[16];
	const json_t *f, *x, *t;
	size_t i;

	memset(g, 0, sizeof(*g));
	g->index = index;
	g->ecc_volatile_dbe = g->ecc_aggregate_dbe = -1;
	g->retired_pages_pending = g->remap_pending = g->remap_failure = g->temperature = -1;
	snprintf(key, sizeof(key), "%d", index);
	f = json_object_get(json_object_get(faults, "gpus"), key);
	if (!json_is_object(f))
		return;
	g->lost = json_is_true(json_object_get(f, "lost"));
	g->reset_required = json_is_true(json_object_get(f, "reset_required"));
	g->ecc_volatile_dbe = json_get_int(f, "ecc_volatile_dbe", -1);
	g->ecc_aggregate_dbe = json_get_int(f, "ecc_aggregate_dbe", -1);
	g->retired_pages_pending = json_is_true(json_object_get(f, "retired_pending"));
	g->remap_pending = json_is_true(json_object_get(f, "remap_pending"));
	g->remap_failure = json_is_true(json_object_get(f, "remap_failure"));
	g->temperature = (int)json_get_int(f, "temperature", -1);
	json_array_foreach(json_object_get(f, "xid"), i, x)
		if (json_is_integer(x) && g->nr_xid < (int)(sizeof(g->xid) / sizeof(*g->xid)))
			g->xid[g->nr_xid++] = (int)json_integer_value(x);
	json_array_foreach(json_object_get(f, "throttle"), i, t) {
		const char *s = json_string_value(t);

		if (!s)
			continue;
		if (!strcmp(s, "hw_slowdown"))
			g->throttle |= DT_THROTTLE_HW_SLOWDOWN;
		else if (!strcmp(s, "hw_thermal"))
			g->throttle |= DT_THROTTLE_HW_THERMAL;
		else if (!strcmp(s, "power_brake"))
			g->throttle |= DT_THROTTLE_POWER_BRAKE;
	}
}

static void disk_events(const char *path, const char *what, json_t *events, const char *now)
{
	struct statvfs v;
	unsigned long long avail, total;
	double pct;

	if (statvfs(path, &v) < 0 || !v.f_blocks)
		return;
	avail = (unsigned long long)v.f_bavail * v.f_frsize;
	total = (unsigned long long)v.f_blocks * v.f_frsize;
	pct = 100.0 * (double)avail / (double)total;
	/* no changing numbers in the text: the inventory changes only with the node */
	if (avail < DISK_FULL)
		json_array_append_new(events, event("bad", "disk", -1, now, "%s (%s) is full: under "
						    "%llu MiB free", what, path, DISK_FULL >> 20));
	else if (avail < DISK_LOW || pct < DISK_LOW_PCT)
		json_array_append_new(events, event("degraded", "disk", -1, now, "%s (%s) is nearly "
						    "full: under %llu MiB or %.0f %% free", what, path,
						    DISK_LOW >> 20, DISK_LOW_PCT));
}

static void memory_events(json_t *events, const char *now)
{
	struct strbuf sb = STRBUF_INIT;
	const char *full;
	double avg10;

	/* "full avg10=12.34 ...": all non-idle tasks stalled on memory */
	if (sf_read_path("/proc/pressure/memory", &sb, 4096, NULL) >= 0 &&
	    (full = strstr(sb.buf, "full avg10=")) && sscanf(full, "full avg10=%lf", &avg10) == 1 &&
	    avg10 > MEM_FULL_AVG10)
		json_array_append_new(events, event("degraded", "memory", -1, now, "memory pressure: "
						    "every task stalled over %.0f %% of the last 10 s",
						    MEM_FULL_AVG10));
	strbuf_release(&sb);
}

/* a key that says which sticky event this is (one per GPU and kind and XID) */
static void sticky_key(const json_t *e, struct strbuf *k)
{
	strbuf_reset(k);
	strbuf_addf(k, "%s/%lld/%s", json_get_str(e, "kind", ""), json_get_int(e, "gpu", -1),
		    json_get_str(e, "detail", ""));
}

json_t *health_collect(struct health *h, int gpus, int nvml_gpus, const char *home,
		       const char *fake_health)
{
	json_t *events = json_array(), *now_ev = json_array(), *faults = NULL, *e, *states;
	struct strbuf sb = STRBUF_INIT, key = STRBUF_INIT;
	char now[DT_TIMESTAMP_LEN];
	const char *k;
	size_t i;

	dt_timestamp(now, sizeof(now));
	if (gpus > nvml_gpus && fake_health && sf_read_path(fake_health, &sb, 64 * 1024, NULL) >= 0)
		faults = json_loadb(sb.buf, sb.len, 0, NULL);
	for (int g = 0; g < gpus; g++) {
		struct dt_gpu_health r;

		if (g >= nvml_gpus)
			fake_reading(faults, g, &r);
		else if (dt_nvml_health(g, &r) < 0)
			continue;
		health_gpu_events(&r, now_ev, now);
	}
	disk_events(home, "the agent's home", now_ev, now);
	disk_events("/tmp", "/tmp", now_ev, now);
	memory_events(now_ev, now);
	/*
	 * What happened stays (an XID, ECC errors, a lost GPU); states come and
	 * go.  Either keeps the time it was first seen, so the inventory (and
	 * its hash) changes only when the node's health does.
	 */
	states = json_object();
	json_array_foreach(now_ev, i, e) {
		const char *kind = json_get_str(e, "kind", "");
		json_t *old;

		sticky_key(e, &key);
		if (!strcmp(kind, "xid") || !strcmp(kind, "ecc") || !strcmp(kind, "gpu_lost") ||
		    !strcmp(kind, "reset_required") || !strcmp(kind, "remap")) {
			if (!json_object_get(h->sticky, key.buf)) {
				dtlog(!strcmp(json_get_str(e, "severity", ""), "bad") ? DTLOG_ERROR :
				      DTLOG_WARN, "health: %s", json_get_str(e, "detail", ""));
				json_object_set(h->sticky, key.buf, e);
			}
			continue;
		}
		old = json_object_get(h->states, key.buf);
		if (old)
			json_object_set(e, "since", json_object_get(old, "since"));
		else
			dtlog(DTLOG_WARN, "health: %s", json_get_str(e, "detail", ""));
		json_object_set(states, key.buf, e);
		json_array_append(events, e);
	}
	json_decref(h->states);
	h->states = states;
	json_object_foreach(h->sticky, k, e)
		json_array_append(events, e);
	json_decref(now_ev);
	json_decref(faults);
	strbuf_release(&sb);
	strbuf_release(&key);
	return json_pack("{s:s, s:o}", "status", health_status(events), "events", events);
}
