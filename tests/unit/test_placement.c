/*
 * test_placement.c - best-fit placement: packing, exclusivity, selection,
 * waiting versus never-fitting, and the numbers in the reasons.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "scheduler/placement.h"

static void mknode(struct place_node *n, const char *name, int total)
{
	memset(n, 0, sizeof(*n));
	n->name = name;
	n->up = 1;
	n->total = total;
}

static void test_best_fit_and_slots(void **state)
{
	struct place_node n[3];
	struct place_req req = { .nodes = 1, .per_node = 2 };
	struct place_result res;
	struct strbuf why = STRBUF_INIT, sb = STRBUF_INIT;

	mknode(&n[0], "a", 8);
	mknode(&n[1], "b", 4);
	mknode(&n[2], "c", 8);
	n[1].used[0] = 1;  /* b has 3 free: the tightest fit */
	assert_int_equal(placement_try(n, 3, &req, &res, &why), PLACE_OK);
	assert_int_equal(res.nr, 1);
	assert_int_equal(res.node[0], 1);
	placement_format_slots(&sb, &res, 0, 2);
	assert_string_equal(sb.buf, "1,2");
	placement_commit(n, &res, 2);
	assert_int_equal(n[1].used[1] + n[1].used[2], 2);
	strbuf_release(&why);
	strbuf_release(&sb);
}

static void test_two_jobs_never_share(void **state)
{
	struct place_node n[2];
	struct place_req req = { .nodes = 2, .per_node = 2 };
	struct place_result r1, r2;
	struct strbuf why = STRBUF_INIT;

	mknode(&n[0], "n1", 2);
	mknode(&n[1], "n2", 2);
	assert_int_equal(placement_try(n, 2, &req, &r1, &why), PLACE_OK);
	assert_int_equal(r1.node[0], 0);
	assert_int_equal(r1.node[1], 1);
	placement_commit(n, &r1, 2);
	assert_int_equal(placement_try(n, 2, &req, &r2, &why), PLACE_WAIT);
	assert_string_equal(why.buf, "waiting for 2 node(s) with 2 free slot(s); 0 available now; "
			    "2 busy");
	/* why the others are not available: DOWN and DRAINED nodes counted apart */
	mknode(&n[0], "n1", 2);
	mknode(&n[1], "n2", 2);
	n[0].up = 0;
	n[1].drained = 1;
	strbuf_reset(&why);
	assert_int_equal(placement_try(n, 2, &req, &r2, &why), PLACE_WAIT);
	assert_string_equal(why.buf, "waiting for 2 node(s) with 2 free slot(s); 0 available now; "
			    "1 DOWN; 1 DRAINED");
	strbuf_release(&why);
}

static void test_never_fits_with_numbers(void **state)
{
	struct place_node n[2];
	struct place_req req = { .nodes = 2, .per_node = 8 };
	struct place_result res;
	struct strbuf why = STRBUF_INIT;

	mknode(&n[0], "n1", 8);
	mknode(&n[1], "n2", 4);
	assert_int_equal(placement_try(n, 2, &req, &res, &why), PLACE_NEVER);
	assert_string_equal(why.buf, "job needs 2 node(s) with 8 slot(s) each, but only 1 of the "
			    "2 selected node(s) have that many (2 node(s) in the cluster)");

	/* names that match no node are named (a typo, or a node never seen) */
	req.nodes = 1;
	req.per_node = 1;
	req.include = "n2,nosuch,gpu[1-7]";
	strbuf_reset(&why);
	assert_int_equal(placement_try(n, 2, &req, &res, &why), PLACE_OK);
	req.include = "nosuch,gpu[1-6]";
	assert_int_equal(placement_try(n, 2, &req, &res, &why), PLACE_NEVER);
	assert_string_equal(why.buf, "job needs 1 node(s) with 1 slot(s) each, but only 0 of the "
			    "0 selected node(s) have that many (2 node(s) in the cluster); no node "
			    "named 'nosuch', 'gpu1', 'gpu2', 'gpu3', 'gpu4' and 2 more in the cluster");
	strbuf_release(&why);
}

static void test_down_and_drained_wait(void **state)
{
	struct place_node n[2];
	struct place_req req = { .nodes = 2, .per_node = 1 };
	struct place_result res;
	struct strbuf why = STRBUF_INIT;

	mknode(&n[0], "n1", 1);
	mknode(&n[1], "n2", 1);
	n[1].up = 0;
	assert_int_equal(placement_try(n, 2, &req, &res, &why), PLACE_WAIT);
	n[1].up = 1;
	n[0].drained = 1;
	assert_int_equal(placement_try(n, 2, &req, &res, &why), PLACE_WAIT);
	/* the burn-in of a drained node (dtctl resume --burn-in) may use it */
	req.burn_in = 1;
	assert_int_equal(placement_try(n, 2, &req, &res, &why), PLACE_OK);
	req.burn_in = 0;
	n[0].drained = 0;
	assert_int_equal(placement_try(n, 2, &req, &res, &why), PLACE_OK);
	strbuf_release(&why);
}

static void test_selection(void **state)
{
	struct place_node n[4];
	struct kvlist la = { 0 }, want = { 0 };
	const char *avoid[] = { "gpu01", NULL };
	struct place_req req = { .nodes = 1, .per_node = 1, .include = "gpu[01-03]",
				 .exclude = "gpu02", .labels = &want, .avoid = avoid };
	struct place_result res;
	struct strbuf why = STRBUF_INIT;

	kvlist_set(&la, "rack", "a");
	kvlist_set(&want, "rack", "a");
	mknode(&n[0], "gpu01", 1);
	mknode(&n[1], "gpu02", 1);
	mknode(&n[2], "gpu03", 1);
	mknode(&n[3], "gpu04", 1);
	for (int i = 0; i < 4; i++)
		n[i].labels = &la;
	assert_int_equal(placement_try(n, 4, &req, &res, &why), PLACE_OK);
	assert_int_equal(res.node[0], 2);   /* 01 avoided, 02 excluded, 04 not included */
	n[2].labels = NULL;
	strbuf_reset(&why);
	assert_int_equal(placement_try(n, 4, &req, &res, &why), PLACE_NEVER);
	req.include = "gpu[3-1]";
	strbuf_reset(&why);
	assert_int_equal(placement_try(n, 4, &req, &res, &why), PLACE_ERROR);
	assert_true(strstr(why.buf, "bad node selection") != NULL);
	kvlist_release(&la);
	kvlist_release(&want);
	strbuf_release(&why);
}

static void test_bad_request(void **state)
{
	struct place_node n[1];
	struct place_req req = { .nodes = 0, .per_node = 1 };
	struct place_result res;
	struct strbuf why = STRBUF_INIT;

	mknode(&n[0], "n1", 1);
	assert_int_equal(placement_try(n, 1, &req, &res, &why), PLACE_ERROR);
	strbuf_release(&why);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_best_fit_and_slots),
		cmocka_unit_test(test_two_jobs_never_share),
		cmocka_unit_test(test_never_fits_with_numbers),
		cmocka_unit_test(test_down_and_drained_wait),
		cmocka_unit_test(test_selection),
		cmocka_unit_test(test_bad_request),
	};

	return cmocka_run_group_tests_name("placement", tests, NULL, NULL);
}
