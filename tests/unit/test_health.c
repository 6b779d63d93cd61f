/*
 * test_health.c - what a GPU's readings say about the node (agent/health.c):
 * severities per finding, application XIDs ignored, the worst one wins,
 * nothing from a healthy GPU or from readings NVML could not make.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agent/health.h"
#include "json.h"

static struct dt_gpu_health healthy(int index)
{
	struct dt_gpu_health g;

	memset(&g, 0, sizeof(g));
	g.index = index;
	g.ecc_volatile_dbe = g.ecc_aggregate_dbe = -1;     /* not supported: no finding */
	g.retired_pages_pending = g.remap_pending = g.remap_failure = g.temperature = -1;
	return g;
}

/* the events of g, as "severity kind gpu: detail" lines */
static char *events_of(const struct dt_gpu_health *g, const char **status)
{
	static char buf[2048];
	json_t *ev = json_array(), *e;
	size_t i;

	health_gpu_events(g, ev, "2026-11-24T10:00:00.000000Z");
	buf[0] = '\0';
	json_array_foreach(ev, i, e) {
		char line[256];

		snprintf(line, sizeof(line), "%s %s %lld: %s\n", json_get_str(e, "severity", ""),
			 json_get_str(e, "kind", ""), json_get_int(e, "gpu", -9),
			 json_get_str(e, "detail", ""));
		strncat(buf, line, sizeof(buf) - strlen(buf) - 1);
	}
	*status = health_status(ev);
	json_decref(ev);
	return buf;
}

static void test_healthy_gpu_says_nothing(void **state)
{
	struct dt_gpu_health g = healthy(0);
	const char *st;

	assert_string_equal(events_of(&g, &st), "");
	assert_string_equal(st, "ok");
	g.temperature = 89;
	g.throttle = 0x1 | 0x4;          /* idle, software power cap: normal operation */
	g.ecc_volatile_dbe = g.ecc_aggregate_dbe = 0;
	g.remap_pending = g.remap_failure = g.retired_pages_pending = 0;
	assert_string_equal(events_of(&g, &st), "");
	assert_string_equal(st, "ok");
}

static void test_findings_and_severities(void **state)
{
	struct dt_gpu_health g = healthy(3);
	const char *st;

	g.temperature = 93;
	g.throttle = DT_THROTTLE_HW_THERMAL;
	assert_string_equal(events_of(&g, &st),
			    "degraded throttle 3: GPU 3 is throttled by hardware (thermal)\n"
			    "degraded temperature 3: GPU 3 at 90 C or more\n");
	assert_string_equal(st, "degraded");

	g = healthy(1);
	g.ecc_aggregate_dbe = 2;
	g.remap_pending = 1;
	g.retired_pages_pending = 1;
	events_of(&g, &st);
	assert_string_equal(st, "degraded");

	/* the worst wins: one bad finding makes the node bad */
	g.ecc_volatile_dbe = 1;
	assert_non_null(strstr(events_of(&g, &st),
			       "bad ecc 1: GPU 1: 1 uncorrected ECC error since its last reset\n"));
	assert_string_equal(st, "bad");

	g = healthy(2);
	g.remap_failure = 1;
	g.remap_pending = 1;             /* the failure is what matters */
	assert_string_equal(events_of(&g, &st), "bad remap 2: GPU 2: row remapping failed\n");
	g = healthy(2);
	g.lost = 1;
	assert_string_equal(events_of(&g, &st), "bad gpu_lost 2: GPU 2 has fallen off the bus\n");
	assert_string_equal(st, "bad");
}

static void test_xids(void **state)
{
	struct dt_gpu_health g = healthy(0);
	const char *st;

	/* an application's faults (13, 31, 43, 45, 68) are not the node's */
	g.xid[g.nr_xid++] = 13;
	g.xid[g.nr_xid++] = 31;
	g.xid[g.nr_xid++] = 43;
	assert_string_equal(events_of(&g, &st), "");
	assert_string_equal(st, "ok");
	g.xid[g.nr_xid++] = 92;          /* high single-bit rate: watch it */
	assert_string_equal(events_of(&g, &st),
			    "degraded xid 0: XID 92 on GPU 0: high single-bit ECC error rate\n");
	assert_string_equal(st, "degraded");
	g.xid[g.nr_xid++] = 79;
	g.xid[g.nr_xid++] = 1234;        /* unknown to us: degraded, named by number */
	assert_non_null(strstr(events_of(&g, &st),
			       "bad xid 0: XID 79 on GPU 0: GPU has fallen off the bus\n"));
	assert_non_null(strstr(events_of(&g, &st), "degraded xid 0: XID 1234 on GPU 0\n"));
	assert_string_equal(st, "bad");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_healthy_gpu_says_nothing),
		cmocka_unit_test(test_findings_and_severities),
		cmocka_unit_test(test_xids),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
