/*
 * test_fabric.c - the fabric test's round-robin pairing (trainer/fabric.c)
 * and its verdict against baselines and peers (scheduler/fabric.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "json.h"
#include "scheduler/fabric.h"
#include "trainer/fabric.h"

static const char *const names[] = { "n1", "n2", "n3", "n4", "n5" };

/* A full-mode document of n ranks: bw[a][b] MB/s from a to b (< 0: the link
 * failed), latency 50 us, every rank reported unless silent says so. */
static json_t *doc(int n, double bw[][5], int silent)
{
	json_t *d = json_pack("{s:s,s:i}", "fabric", "full", "world", n);
	json_t *nodes = json_array(), *links = json_array();

	for (int k = 0; k < n; k++)
		json_array_append_new(nodes, json_pack("{s:i,s:s,s:b}", "rank", k, "host", "h",
						       "reported", k != silent));
	for (int a = 0; a < n; a++)
		for (int b = a + 1; b < n; b++) {
			int ok = bw[a][b] >= 0 && bw[b][a] >= 0 && a != silent && b != silent;

			json_array_append_new(links, json_pack("{s:i,s:i,s:b,s:f,s:f,s:f}", "a", a,
							       "b", b, "ok", ok, "lat_us", 50.0,
							       "bw_ab_MBps", bw[a][b], "bw_ba_MBps",
							       bw[b][a]));
		}
	json_object_set_new(d, "nodes", nodes);
	json_object_set_new(d, "links", links);
	return d;
}

static void fill(double bw[][5], double v)
{
	for (int a = 0; a < 5; a++)
		for (int b = 0; b < 5; b++)
			bw[a][b] = v;
}

static json_t *verdict(int n, double bw[][5], int silent, const json_t *base)
{
	struct strbuf err = STRBUF_INIT;
	json_t *d = doc(n, bw, silent), *v = fabric_verdict(d, names, (size_t)n, base, 0.5, &err);

	assert_non_null(v);
	assert_int_equal(err.len, 0);
	json_decref(d);
	strbuf_release(&err);
	return v;
}

/* the names in array key of v, joined with ',' */
static void bad(const json_t *v, const char *key, struct strbuf *sb)
{
	const json_t *x;
	size_t i;

	strbuf_reset(sb);
	json_array_foreach(json_object_get(v, key), i, x)
		strbuf_addf(sb, "%s%s", i ? "," : "", json_string_value(x));
}

static void test_pairing(void **state)
{
	for (int n = 2; n <= 9; n++) {
		int met[9][9] = { { 0 } };

		for (int r = 0; r < fabric_rounds(n); r++)
			for (int me = 0; me < n; me++) {
				int p = fabric_partner(me, n, r);

				if (p < 0)
					continue;
				assert_true(p != me && p < n);
				/* symmetric: my partner's partner is me */
				assert_int_equal(fabric_partner(p, n, r), me);
				met[me][p]++;
			}
		for (int a = 0; a < n; a++)
			for (int b = 0; b < n; b++)
				assert_int_equal(met[a][b], a != b);
	}
	assert_int_equal(fabric_rounds(1), 0);
	assert_int_equal(fabric_partner(0, 1, 0), -1);
}

static void test_healthy(void **state)
{
	double bw[5][5];
	struct strbuf sb = STRBUF_INIT;
	json_t *v;

	fill(bw, 1000);
	bw[0][1] = 700;     /* noise well within a half of the median */
	v = verdict(4, bw, -1, NULL);
	assert_true(json_is_true(json_object_get(v, "ok")));
	fabric_summary(&sb, v);
	assert_int_equal(sb.len, 0);
	json_decref(v);
	strbuf_release(&sb);
}

/* node 3's ingress throttled (the tbf test): it, and only it, is named */
static void test_slow_node_by_peers(void **state)
{
	double bw[5][5];
	struct strbuf sb = STRBUF_INIT;
	json_t *v;

	fill(bw, 1000);
	for (int a = 0; a < 4; a++)
		bw[a][2] = 0.12;
	v = verdict(4, bw, -1, NULL);
	assert_false(json_is_true(json_object_get(v, "ok")));
	bad(v, "bad_nodes", &sb);
	assert_string_equal(sb.buf, "n3");
	bad(v, "bad_links", &sb);
	assert_string_equal(sb.buf, "n1<->n3,n2<->n3,n3<->n4");
	strbuf_reset(&sb);
	fabric_summary(&sb, v);
	assert_non_null(strstr(sb.buf, "n3: rx 0.12 MB/s < 0.5 x the peers' median 1e+03 MB/s"));
	json_decref(v);
	strbuf_release(&sb);
}

/* with 3 nodes, one slow peer of a good node does not fail it */
static void test_three_nodes(void **state)
{
	double bw[5][5];
	struct strbuf sb = STRBUF_INIT;
	json_t *v;

	fill(bw, 1000);
	bw[0][1] = bw[2][1] = 1;
	v = verdict(3, bw, -1, NULL);
	bad(v, "bad_nodes", &sb);
	assert_string_equal(sb.buf, "n2");
	json_decref(v);
	strbuf_release(&sb);
}

/* 2 nodes: no peers, so only baselines count, and both ends fail */
static void test_two_nodes_baseline(void **state)
{
	double bw[5][5];
	struct strbuf sb = STRBUF_INIT;
	json_t *v, *base = json_object();

	fill(bw, 1000);
	bw[0][1] = 1;
	v = verdict(2, bw, -1, base);    /* no baseline yet: nothing to compare with */
	assert_true(json_is_true(json_object_get(v, "ok")));
	json_decref(v);

	json_object_set_new(base, "bw:n1>n2", json_real(900));
	v = verdict(2, bw, -1, base);
	assert_false(json_is_true(json_object_get(v, "ok")));
	bad(v, "bad_nodes", &sb);
	assert_string_equal(sb.buf, "n1,n2");
	bad(v, "bad_links", &sb);
	assert_string_equal(sb.buf, "n1<->n2");
	assert_non_null(strstr(json_string_value(json_object_get(
		json_array_get(json_object_get(v, "links"), 0), "why")),
		"a>b 1 MB/s < 0.5 x its baseline 900 MB/s"));
	json_decref(v);
	json_decref(base);
	strbuf_release(&sb);
}

/* a node's own baseline: fails even when its peers are as slow */
static void test_node_baseline(void **state)
{
	double bw[5][5];
	struct strbuf sb = STRBUF_INIT;
	json_t *v, *base = json_pack("{s:f}", "rx:n4", 5000.0);

	fill(bw, 1000);
	v = verdict(4, bw, -1, base);
	bad(v, "bad_nodes", &sb);
	assert_string_equal(sb.buf, "n4");
	json_decref(v);
	json_decref(base);
	strbuf_release(&sb);
}

/* transfers that never finished, and a rank that never reported */
static void test_cut(void **state)
{
	double bw[5][5];
	struct strbuf sb = STRBUF_INIT;
	json_t *v;

	fill(bw, 1000);
	for (int a = 0; a < 5; a++)
		bw[a][3] = bw[3][a] = -1;
	v = verdict(5, bw, -1, NULL);
	bad(v, "bad_nodes", &sb);
	assert_string_equal(sb.buf, "n4");
	json_decref(v);

	fill(bw, 1000);
	v = verdict(4, bw, 1, NULL);
	bad(v, "bad_nodes", &sb);
	assert_string_equal(sb.buf, "n2");
	assert_non_null(strstr(json_string_value(json_object_get(
		json_array_get(json_object_get(v, "nodes"), 1), "why")), "never reported"));
	json_decref(v);
	strbuf_release(&sb);
}

static void test_baselines_update(void **state)
{
	double bw[5][5];
	json_t *v, *base = json_object();

	fill(bw, 1000);
	bw[1][0] = 800;
	v = verdict(3, bw, -1, NULL);
	fabric_update_baselines(base, v);
	json_decref(v);
	assert_true(json_get_real(base, "bw:n1>n2", 0) == 1000);
	assert_true(json_get_real(base, "bw:n2>n1", 0) == 800);
	assert_true(json_get_real(base, "rx:n1", 0) == 1000);   /* upper median of 800, 1000 */
	assert_true(json_get_real(base, "lat:n1|n2", 0) == 50);

	/* passing figures move it 0.3 of the way, a failing node's never move it */
	bw[1][0] = 1200;
	for (int a = 0; a < 3; a++)
		bw[a][2] = 1;
	v = verdict(3, bw, -1, base);
	fabric_update_baselines(base, v);
	json_decref(v);
	assert_true(json_get_real(base, "bw:n2>n1", 0) == 800 + 0.3 * 400);
	assert_true(json_get_real(base, "rx:n3", 0) == 1000);
	assert_true(json_get_real(base, "bw:n1>n3", 0) == 1000);

	/* one run moves a baseline at most 2x: 1000 + 0.3 x (2000 - 1000) */
	fill(bw, 1e9);
	v = verdict(3, bw, -1, base);
	fabric_update_baselines(base, v);
	json_decref(v);
	assert_true(json_get_real(base, "bw:n1>n3", 0) == 1300);
	json_decref(base);
}

static void test_bad_document(void **state)
{
	struct strbuf err = STRBUF_INIT;
	json_t *d = json_pack("{s:s,s:[],s:[]}", "fabric", "nonsense", "nodes", "links");

	assert_null(fabric_verdict(d, NULL, 0, NULL, 0.5, &err));
	assert_non_null(strstr(err.buf, "not a fabric test document"));
	json_decref(d);
	/* the names must match the ranks */
	{
		double bw[5][5];

		fill(bw, 1);
		d = doc(3, bw, -1);
		strbuf_reset(&err);
		assert_null(fabric_verdict(d, names, 2, NULL, 0.5, &err));
		json_decref(d);
	}
	strbuf_release(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pairing),
		cmocka_unit_test(test_healthy),
		cmocka_unit_test(test_slow_node_by_peers),
		cmocka_unit_test(test_three_nodes),
		cmocka_unit_test(test_two_nodes_baseline),
		cmocka_unit_test(test_node_baseline),
		cmocka_unit_test(test_cut),
		cmocka_unit_test(test_baselines_update),
		cmocka_unit_test(test_bad_document),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
