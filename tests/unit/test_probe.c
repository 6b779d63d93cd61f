/*
 * test_probe.c - the connectivity check's culprits (scheduler/probe.c) and the
 * agent's connects (agent/probe.c) against real sockets on localhost.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "json.h"
#include "strbuf.h"
#include "agent/probe.h"
#include "scheduler/probe.h"

/* fail[] from a list of failed directions "i>k" */
static void culprits(size_t n, const char *failed, const char *want)
{
	unsigned char fail[64] = { 0 }, c[8];
	char got[9] = "";
	int nr;

	for (const char *p = failed; *p; p += 4)     /* "0>1 2>3 " */
		fail[(size_t)(p[0] - '0') * n + (size_t)(p[2] - '0')] = 1;
	nr = probe_culprits(n, fail, c);
	for (size_t i = 0; i < n; i++)
		got[i] = c[i] ? 'X' : '.';
	got[n] = 0;
	assert_string_equal(got, want);
	{
		int x = 0;

		for (const char *w = want; *w; w++)
			x += *w == 'X';
		assert_int_equal(nr, x);
	}
}

static void test_culprits(void **state)
{
	culprits(3, "", "...");
	/* node 2 reaches neither peer (one direction is enough for a pair to fail) */
	culprits(3, "2>0 2>1 ", "..X");
	culprits(3, "0>2 1>2 ", "..X");
	/* one pair failed out of three: no node fails with more than half of its peers */
	culprits(3, "0>1 ", "...");
	/* two nodes: nobody can tell which end: both */
	culprits(2, "1>0 ", "XX");
	/* four nodes, node 3 cut off from all, nodes 0-2 fine between them */
	culprits(4, "3>0 3>1 3>2 ", "...X");
	/* four nodes, node 3 fails with two peers of three: more than half */
	culprits(4, "3>0 1>3 ", "...X");
	/* half (one of two peers) is not more than half */
	culprits(3, "0>1 ", "...");
}

static void test_connect_real_sockets(void **state)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), closed_port;
	struct strbuf err = STRBUF_INIT;
	json_t *targets, *res;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	{
		/* a port nothing listens on: bound, then closed */
		int tfd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in tb = sa;

		tb.sin_port = 0;
		assert_int_equal(bind(tfd, (struct sockaddr *)&tb, sizeof(tb)), 0);
		len = sizeof(tb);
		getsockname(tfd, (struct sockaddr *)&tb, &len);
		closed_port = ntohs(tb.sin_port);
		close(tfd);
	}
	targets = json_pack("[{s:s,s:s,s:i},{s:s,s:s,s:i},{s:s,s:s,s:i}]",
			    "node", "up", "address", "127.0.0.1", "port", ntohs(sa.sin_port),
			    "node", "refused", "address", "127.0.0.1", "port", closed_port,
			    "node", "nowhere", "address", "no-such-host.invalid", "port", 22);
	res = probe_connect(targets, 1000, &err);
	assert_non_null(res);
	assert_int_equal(json_array_size(res), 3);
	assert_true(json_is_true(json_object_get(json_array_get(res, 0), "ok")));
	assert_true(json_is_false(json_object_get(json_array_get(res, 1), "ok")));
	assert_non_null(strstr(json_get_str(json_array_get(res, 1), "error", ""), "refused"));
	assert_true(json_is_false(json_object_get(json_array_get(res, 2), "ok")));
	assert_non_null(strstr(json_get_str(json_array_get(res, 2), "error", ""), "resolve"));
	json_decref(res);
	json_decref(targets);

	/* malformed lists are refused with the index */
	targets = json_pack("[{s:s,s:s,s:i}]", "node", "a", "address", "127.0.0.1", "port", 0);
	assert_null(probe_connect(targets, 1000, &err));
	assert_non_null(strstr(err.buf, "targets[0]"));
	json_decref(targets);
	strbuf_release(&err);
	close(lfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_culprits),
		cmocka_unit_test(test_connect_real_sockets),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
