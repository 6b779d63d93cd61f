/*
 * test_rsh.c - `dtagent rsh` (agent/rsh.h): finding a node's agent port in
 * DT_ORTED_AGENTS, the orted task's id, the remote command line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agent/rsh.h"

static void test_agent_port(void **state)
{
	const char *map = "10.88.0.11=7070,10.88.0.12=7071,gpu3.cluster.local=7072,fe80::1=7073";

	assert_int_equal(rsh_agent_port(map, "10.88.0.11"), 7070);
	assert_int_equal(rsh_agent_port(map, "10.88.0.12"), 7071);
	assert_int_equal(rsh_agent_port(map, "fe80::1"), 7073);
	/* Open MPI strips the domain of a host name ... */
	assert_int_equal(rsh_agent_port(map, "gpu3"), 7072);
	assert_int_equal(rsh_agent_port(map, "gpu3.cluster.local"), 7072);
	/* ... but an address is never matched by its prefix */
	assert_int_equal(rsh_agent_port(map, "10.88"), -1);
	assert_int_equal(rsh_agent_port(map, "10.88.0.1"), -1);
	assert_int_equal(rsh_agent_port(map, "gpu"), -1);
	assert_int_equal(rsh_agent_port(map, ""), -1);
	assert_int_equal(rsh_agent_port(NULL, "10.88.0.11"), -1);
	/* bad entries are skipped, good ones after them still found */
	assert_int_equal(rsh_agent_port("a=,b=x,c=0,d=70000,e,f=12", "f"), 12);
	assert_int_equal(rsh_agent_port("a=,b=x,c=0,d=70000,e,f=12", "b"), -1);
	assert_int_equal(rsh_agent_port("a=,b=x,c=0,d=70000,e,f=12", "c"), -1);
	assert_int_equal(rsh_agent_port("a=,b=x,c=0,d=70000,e,f=12", "d"), -1);
	assert_int_equal(rsh_agent_port("a=12x", "a"), -1);
	assert_int_equal(rsh_agent_port(",,a=5,", "a"), 5);
}

static void test_task_id(void **state)
{
	struct strbuf sb = STRBUF_INIT;

	rsh_task_id(&sb, "j-000042.1.mpirun", "10.88.0.12");
	assert_string_equal(sb.buf, "j-000042.1.orted-10.88.0.12");
	strbuf_reset(&sb);
	rsh_task_id(&sb, "rsh-77", "fe80::1%eth0");
	assert_string_equal(sb.buf, "rsh-77.orted-fe80--1-eth0");
	strbuf_reset(&sb);
	rsh_task_id(&sb, NULL, "gpu 3;$(x)");
	assert_string_equal(sb.buf, "orted-gpu-3---x-");
	strbuf_reset(&sb);
	/* long: cut to 64 bytes, kept unique by a hash of the whole */
	{
		struct strbuf other = STRBUF_INIT;
		char host[200];

		memset(host, 'h', sizeof(host) - 1);
		host[sizeof(host) - 1] = '\0';
		rsh_task_id(&sb, "j-000042.1.mpirun", host);
		host[150] = 'x';
		rsh_task_id(&other, "j-000042.1.mpirun", host);
		assert_int_equal(sb.len, 64);
		assert_int_equal(other.len, 64);
		assert_string_not_equal(sb.buf, other.buf);
		assert_int_equal(strspn(sb.buf, "abcdefghijklmnopqrstuvwxyz0123456789.-_"), 64);
		assert_memory_equal(sb.buf, "j-000042.1.orted-hhh", 20);
		strbuf_release(&other);
	}
	strbuf_release(&sb);
}

static void test_join(void **state)
{
	struct strbuf sb = STRBUF_INIT;
	const char *words[] = { " orted", "-mca", "ess", "\"env\"", "-mca", "orte_hnp_uri",
				"\"1.0;tcp://10.88.0.11:4000\"" };

	rsh_join(&sb, 7, words);
	assert_string_equal(sb.buf, " orted -mca ess \"env\" -mca orte_hnp_uri \"1.0;tcp://10.88.0.11:4000\"");
	strbuf_reset(&sb);
	rsh_join(&sb, 0, words);
	assert_string_equal(sb.buf, "");
	strbuf_release(&sb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_agent_port),
		cmocka_unit_test(test_task_id),
		cmocka_unit_test(test_join),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
