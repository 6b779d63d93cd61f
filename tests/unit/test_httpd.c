/*
 * test_httpd.c - routing in lib/httpd.c (patterns with {name} captures: the
 * captures, 404 against 405 with its Allow list, overlong and invalid
 * captures, trailing slashes, a longer path that a pattern must not take as
 * its prefix; and a real server's 405 with an Allow header), and the
 * connection flood defence of lib/httpd.c: the eviction
 * policy on its own (dt_httpd_pick_victims: the short timeout, the oldest
 * evicted per address then in all, the newest kept, 0 = no limit), and the
 * real server, one-thread and thread-pool, flooded with idle connections
 * from the same address as its signed client: the signed request is still
 * answered, the flood is evicted down to the limits, the rest is closed
 * after the short timeout, and signed keep-alive connections are never
 * evicted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "httpc.h"
#include "httpd.h"
#include "json.h"
#include "log.h"
#include "protocol.h"

#define SECRET "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* --- routing ---------------------------------------------------------------------- */

static void nop(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
}

static const struct dt_http_route jobish[] = {
	{ "POST", "/v1/jobs", 0, nop },
	{ "GET", "/v1/jobs", 0, nop },
	{ "GET", "/v1/jobs/{id}", 0, nop },
	{ "POST", "/v1/jobs/{id}/cancel", 0, nop },
	{ "POST", "/v1/jobs/{id}/wait", 0, nop },
	{ "DELETE", "/v1/jobs/{id}", 0, nop },
	{ "GET", "/v1/a/{x}/b/{y}", 0, nop },
	{ "GET", "/metrics", DT_ROUTE_PUBLIC, nop },
};

/* the index of the route found, -404 or -405 */
static int route(const char *method, const char *path, struct dt_http_request *req,
		 char *allow, size_t allow_size)
{
	const struct dt_http_route *r;
	int status = 0;

	memset(req, 0, sizeof(*req));
	r = dt_http_route_find(jobish, sizeof(jobish) / sizeof(jobish[0]), method, path,
			       &req->args, &status, allow, allow_size);
	if (!r) {
		assert_true(status == 404 || status == 405);
		assert_int_equal(req->args.nr, 0);
		return -status;
	}
	assert_int_equal(status, 200);
	return (int)(r - jobish);
}

static void test_route_captures(void **state)
{
	struct dt_http_request req;
	char allow[64];

	assert_int_equal(route("GET", "/v1/jobs", &req, allow, sizeof(allow)), 1);
	assert_int_equal(req.args.nr, 0);
	assert_string_equal(dt_http_arg(&req, "id"), "");
	assert_int_equal(route("POST", "/v1/jobs", &req, allow, sizeof(allow)), 0);
	assert_int_equal(route("GET", "/v1/jobs/j-000042", &req, allow, sizeof(allow)), 2);
	assert_string_equal(dt_http_arg(&req, "id"), "j-000042");
	assert_string_equal(dt_http_arg(&req, "i"), "");      /* a name is matched whole */
	assert_string_equal(dt_http_arg(&req, "idx"), "");
	assert_int_equal(route("POST", "/v1/jobs/5/cancel", &req, allow, sizeof(allow)), 3);
	assert_string_equal(dt_http_arg(&req, "id"), "5");
	assert_int_equal(route("POST", "/v1/jobs/5/wait", &req, allow, sizeof(allow)), 4);
	assert_int_equal(route("DELETE", "/v1/jobs/t.1_a-B~:@+=,", &req, allow, sizeof(allow)), 5);
	assert_string_equal(dt_http_arg(&req, "id"), "t.1_a-B~:@+=,");
	/* the rest of RFC 3986's segment characters, and UTF-8 (a sweep's name) */
	assert_int_equal(route("GET", "/v1/jobs/a!$&'()*;b", &req, allow, sizeof(allow)), 2);
	assert_string_equal(dt_http_arg(&req, "id"), "a!$&'()*;b");
	assert_int_equal(route("GET", "/v1/jobs/caf\xc3\xa9-\xe2\x82\xac", &req, allow,
			       sizeof(allow)), 2);
	assert_string_equal(dt_http_arg(&req, "id"), "caf\xc3\xa9-\xe2\x82\xac");
	/* two captures, in order */
	assert_int_equal(route("GET", "/v1/a/one/b/two", &req, allow, sizeof(allow)), 6);
	assert_int_equal(req.args.nr, 2);
	assert_string_equal(dt_http_arg(&req, "x"), "one");
	assert_string_equal(dt_http_arg(&req, "y"), "two");
	assert_int_equal(route("GET", "/metrics", &req, allow, sizeof(allow)), 7);
}

static void test_route_404_405(void **state)
{
	struct dt_http_request req;
	char allow[64];

	/* a known path with another method: 405 and every method it has */
	assert_int_equal(route("PUT", "/v1/jobs", &req, allow, sizeof(allow)), -405);
	assert_string_equal(allow, "POST, GET");
	assert_int_equal(route("POST", "/v1/jobs/7", &req, allow, sizeof(allow)), -405);
	assert_string_equal(allow, "GET, DELETE");
	assert_int_equal(route("GET", "/v1/jobs/7/cancel", &req, allow, sizeof(allow)), -405);
	assert_string_equal(allow, "POST");
	assert_int_equal(route("POST", "/metrics", &req, allow, sizeof(allow)), -405);
	assert_string_equal(allow, "GET");
	/* an allow buffer too small for all: the methods that fit */
	assert_int_equal(route("PUT", "/v1/jobs", &req, allow, 7), -405);
	assert_string_equal(allow, "POST");
	/* no pattern matches: 404, whatever the method */
	assert_int_equal(route("GET", "/v1/nope", &req, allow, sizeof(allow)), -404);
	assert_string_equal(allow, "");
	assert_int_equal(route("POST", "/v1/nope", &req, allow, sizeof(allow)), -404);
	assert_int_equal(route("GET", "/", &req, allow, sizeof(allow)), -404);
	assert_int_equal(route("GET", "", &req, allow, sizeof(allow)), -404);
	/* an action is matched whole, not as a prefix */
	assert_int_equal(route("POST", "/v1/jobs/5/cancelx", &req, allow, sizeof(allow)), -404);
	assert_int_equal(route("POST", "/v1/jobs/5/cance", &req, allow, sizeof(allow)), -404);
	assert_int_equal(route("POST", "/v1/jobs/5/cancel/x", &req, allow, sizeof(allow)), -404);
	assert_int_equal(route("GET", "/v1/jobsx", &req, allow, sizeof(allow)), -404);
	assert_int_equal(route("GET", "/v1/job", &req, allow, sizeof(allow)), -404);
	assert_int_equal(route("GET", "/metricsx", &req, allow, sizeof(allow)), -404);
	/* trailing slashes: another path */
	assert_int_equal(route("GET", "/v1/jobs/", &req, allow, sizeof(allow)), -404);
	assert_int_equal(route("GET", "/v1/jobs/5/", &req, allow, sizeof(allow)), -404);
	assert_int_equal(route("POST", "/v1/jobs/5/cancel/", &req, allow, sizeof(allow)), -404);
	/* an empty capture is none */
	assert_int_equal(route("POST", "/v1/jobs//cancel", &req, allow, sizeof(allow)), -404);
	assert_int_equal(route("GET", "/v1/a//b/two", &req, allow, sizeof(allow)), -404);
	assert_int_equal(route("GET", "/v1/a/one/b/", &req, allow, sizeof(allow)), -404);
}

static void test_route_bad_captures(void **state)
{
	static const char *const bad[] = {
		"/v1/jobs/a b", "/v1/jobs/a%2Fb", "/v1/jobs/a\\b", "/v1/jobs/a\"b", "/v1/jobs/<x>",
		"/v1/jobs/a\tb", "/v1/jobs/a\x1b[31m", "/v1/jobs/a?b=1", "/v1/jobs/a#b",
		"/v1/jobs/a\x7f", "/v1/jobs/a\r\nb", "/v1/jobs/a[b]", "/v1/jobs/a{b}", "/v1/jobs/a|b",
		"/v1/jobs/a^b", "/v1/jobs/a`b",
		/* invalid UTF-8: a lone lead byte, a stray continuation, overlong '/',
		 * a surrogate, and C1 controls (NEL, CSI) */
		"/v1/jobs/a\xc3", "/v1/jobs/a\xc3(", "/v1/jobs/\xa9", "/v1/jobs/\xff",
		"/v1/jobs/\xc0\xaf", "/v1/jobs/\xed\xa0\x80", "/v1/jobs/\xc2\x85", "/v1/jobs/\xc2\x9b",
	};
	struct dt_http_request req;
	char allow[64], path[600];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (route("GET", bad[i], &req, allow, sizeof(allow)) != -404)
			fail_msg("'%s' was routed", bad[i]);
	/* DT_HTTP_ARG_MAX characters, and one more */
	snprintf(path, sizeof(path), "/v1/jobs/");
	memset(path + 9, 'a', DT_HTTP_ARG_MAX);
	path[9 + DT_HTTP_ARG_MAX] = '\0';
	assert_int_equal(route("GET", path, &req, allow, sizeof(allow)), 2);
	assert_int_equal(strlen(dt_http_arg(&req, "id")), DT_HTTP_ARG_MAX);
	snprintf(path + 9 + DT_HTTP_ARG_MAX, sizeof(path) - 9 - DT_HTTP_ARG_MAX, "/cancel");
	assert_int_equal(route("POST", path, &req, allow, sizeof(allow)), 3);
	path[9 + DT_HTTP_ARG_MAX] = 'a';
	path[10 + DT_HTTP_ARG_MAX] = '\0';
	assert_int_equal(route("GET", path, &req, allow, sizeof(allow)), -404);
	snprintf(path + 10 + DT_HTTP_ARG_MAX, sizeof(path) - 10 - DT_HTTP_ARG_MAX, "/cancel");
	assert_int_equal(route("POST", path, &req, allow, sizeof(allow)), -404);
	/* the limit is in bytes: a 2-byte character may not straddle it */
	memset(path + 9, 'a', DT_HTTP_ARG_MAX);
	memcpy(path + 9 + DT_HTTP_ARG_MAX - 1, "\xc3\xa9", 3);
	assert_int_equal(route("GET", path, &req, allow, sizeof(allow)), -404);
	memcpy(path + 9 + DT_HTTP_ARG_MAX - 2, "\xc3\xa9", 3);
	assert_int_equal(route("GET", path, &req, allow, sizeof(allow)), 2);
	/* a pattern with more captures than DT_HTTP_MAX_ARGS, or an unclosed
	 * one, matches nothing */
	assert_false(dt_http_pattern_match("/{a}/{b}/{c}/{d}/{e}", "/1/2/3/4/5", &req.args));
	assert_true(dt_http_pattern_match("/{a}/{b}/{c}/{d}", "/1/2/3/4", &req.args));
	assert_false(dt_http_pattern_match("/x/{a", "/x/1", &req.args));
}

/* --- the policy ------------------------------------------------------------------ */

#define MAXC 16

struct set {
	struct dt_idle_conn c[MAXC];
	struct dt_idle_conn *v[MAXC];
	size_t n;
};

static void add(struct set *s, const char *peer, long long at, int requested)
{
	struct dt_idle_conn *c = &s->c[s->n];

	memset(c, 0, sizeof(*c));
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	c->accepted_ms = at;
	c->requested = requested;
	c->victim = DT_CONN_FLOOD;   /* must be reset by the policy */
	s->v[s->n] = c;
	s->n++;
}

/* the victims as a string: '.' kept, 't' timed out, 'f' evicted */
static const char *picked(struct set *s, const char *peer, unsigned idle, unsigned per_peer,
			  long long timeout, long long now, size_t *n)
{
	static char out[MAXC + 1];
	struct dt_conn_limits lim = { idle, per_peer, timeout };
	size_t count = dt_httpd_pick_victims(s->v, s->n, peer, &lim, now), k = 0;

	for (size_t i = 0; i < s->n; i++) {
		out[i] = ".tf"[s->v[i]->victim];
		k += s->v[i]->victim != DT_CONN_KEEP;
	}
	out[s->n] = '\0';
	assert_int_equal(count, k);
	if (n)
		*n = count;
	return out;
}

static void test_policy_under_limits(void **state)
{
	struct set s = { .n = 0 };
	size_t n;

	for (int i = 0; i < 4; i++)
		add(&s, "10.0.0.1", 1000 + i, 0);
	assert_string_equal(picked(&s, "10.0.0.1", 8, 4, 5000, 2000, &n), "....");
	assert_int_equal(n, 0);
	assert_string_equal(picked(&s, NULL, 8, 4, 5000, 2000, &n), "....");
	/* nothing at all */
	s.n = 0;
	assert_string_equal(picked(&s, "10.0.0.1", 8, 4, 5000, 2000, &n), "");
	assert_int_equal(n, 0);
}

static void test_policy_timeout(void **state)
{
	struct set s = { .n = 0 };

	add(&s, "a", 0, 0);        /* silent 6 s: closed */
	add(&s, "a", 0, 1);        /* as old, but it sent a request: kept */
	add(&s, "b", 1000, 0);     /* exactly 5 s: closed */
	add(&s, "b", 1001, 0);     /* 4.999 s */
	add(&s, "a", 5999, 0);
	assert_string_equal(picked(&s, NULL, 100, 100, 5000, 6000, NULL), "t.t..");
	/* a timeout of 0 is none */
	assert_string_equal(picked(&s, NULL, 100, 100, 0, 6000, NULL), ".....");
}

static void test_policy_peer_oldest_first(void **state)
{
	struct set s = { .n = 0 };

	add(&s, "a", 10, 0);
	add(&s, "b", 11, 0);
	add(&s, "a", 12, 1);
	add(&s, "a", 13, 0);
	add(&s, "b", 14, 0);
	add(&s, "a", 15, 0);       /* just accepted */
	/* a holds 4, 2 allowed: its 2 oldest go, b's and the newest stay */
	assert_string_equal(picked(&s, "a", 100, 2, 5000, 20, NULL), "f.f...");
	/* b arriving does not evict a's */
	assert_string_equal(picked(&s, "b", 100, 2, 5000, 20, NULL), "......");
	/* 0 is no per-address limit */
	assert_string_equal(picked(&s, "a", 100, 0, 5000, 20, NULL), "......");
	/* the newest is kept even with a limit of 1 */
	assert_string_equal(picked(&s, "a", 100, 1, 5000, 20, NULL), "f.ff..");
	assert_int_equal(s.v[5]->victim, DT_CONN_KEEP);
}

static void test_policy_total_oldest_first(void **state)
{
	struct set s = { .n = 0 };

	for (int i = 0; i < 8; i++)
		add(&s, i % 2 ? "b" : "a", 100 + i, 0);
	assert_string_equal(picked(&s, "a", 5, 8, 5000, 200, NULL), "fff.....");
	/* the timed out count against the total first */
	s.v[1]->accepted_ms = -10000;
	assert_string_equal(picked(&s, "a", 5, 8, 5000, 200, NULL), "ftf.....");
	/* per address, then in all: a's 4 -> 2, then 6 left -> 3 */
	s.v[1]->accepted_ms = 101;
	assert_string_equal(picked(&s, "a", 3, 2, 5000, 200, NULL), "fffff...");
	/* 0 is no total limit; a periodic check (no peer) applies the total */
	assert_string_equal(picked(&s, NULL, 0, 2, 5000, 200, NULL), "........");
	assert_string_equal(picked(&s, NULL, 6, 2, 5000, 200, NULL), "ff......");
}

/* --- the real server ------------------------------------------------------------- */

static void echo(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	dt_http_json(resp, 200, json_pack("{s:s}", "method", req->method));
}

static void pub(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	strbuf_addstr(&resp->text, "ok\n");
}

static void echo_arg(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	dt_http_json(resp, 200, json_pack("{s:s}", "x", dt_http_arg(req, "x")));
}

/* slow work off the server's thread (dt_http_offload): sleeps, then answers */
static struct dt_httpd *slow_srv;

static json_t *slow_work(void *arg, int *status)
{
	long ms = *(long *)arg;

	usleep((useconds_t)ms * 1000);
	*status = 201;
	return json_pack("{s:i}", "slept", (int)ms);
}

static void slow(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	long *ms;

	if (dt_http_offloaded(req, resp))
		return;
	ms = malloc(sizeof(*ms));
	*ms = (long)json_get_int(req->json, "ms", 0);
	dt_http_offload(slow_srv, req, resp, slow_work, ms, free, 10000);
}

static const struct dt_http_route routes[] = {
	{ "POST", "/v1/slow", 0, slow },
	{ "GET", "/v1/echo", 0, echo },
	{ "GET", "/v1/echo/{x}", 0, echo_arg },
	{ "DELETE", "/v1/echo", 0, echo },
	{ "GET", "/pub", DT_ROUTE_PUBLIC, pub },
};

#define CONN_LIMIT 128                /* idle_limit 64 */
#define PEER_LIMIT 32                 /* peer_idle_limit: idle_limit / 4, at least 32 */
#define FRESH_MS 400
#define FLOOD 300                     /* well over conn_limit */

/* the test routes on 127.0.0.1 with the options o sets besides */
static struct dt_httpd *start_with(struct dt_httpd_opts *o)
{
	struct strbuf err = STRBUF_INIT;
	struct dt_httpd *srv;

	o->bind = "127.0.0.1";
	o->routes = routes;
	o->nr_routes = sizeof(routes) / sizeof(routes[0]);
	srv = dt_httpd_start(o, &err);
	if (!srv)
		fail_msg("cannot start the test server: %s", err.buf);
	strbuf_release(&err);
	return srv;
}

static struct dt_httpd *start(const struct dt_auth_key *key, unsigned threads)
{
	struct dt_httpd_opts o = DT_HTTPD_OPTS_INIT;

	o.key = key;
	o.conn_limit = CONN_LIMIT;
	o.fresh_timeout_ms = FRESH_MS;
	o.threads = threads;
	return start_with(&o);
}

static int connect_idle(int port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((unsigned short)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	/* loopback: the handshake completes in the kernel, accepted or not */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		fail_msg("connect: %s", strerror(errno));
	return fd;
}

/* How many of fds the server closed (EOF or reset), without blocking. */
static int closed_by_server(const int *fds, int n)
{
	int closed = 0;

	for (int i = 0; i < n; i++) {
		struct pollfd p = { fds[i], POLLIN, 0 };
		char c;

		if (poll(&p, 1, 0) == 1 && recv(fds[i], &c, 1, MSG_DONTWAIT) <= 0)
			closed++;
	}
	return closed;
}

/* Read an HTTP reply to its end ("ok\n", the /pub body). */
static void read_reply(int fd)
{
	char buf[1024];
	size_t len = 0;
	long long deadline = now_ms() + 2000;

	while (now_ms() < deadline && len < sizeof(buf) - 1) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t n;

		if (poll(&p, 1, 100) != 1)
			continue;
		n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
		assert_true(n > 0);
		len += (size_t)n;
		buf[len] = '\0';
		if (strstr(buf, "\r\n\r\nok\n"))
			return;
	}
	fail_msg("no reply to GET /pub: '%s'", buf);
}

static void stats(struct dt_httpd *srv, struct dt_httpd_stats *st)
{
	dt_httpd_get_stats(srv, st);
}

static void signed_get(struct dt_httpc *c)
{
	struct strbuf err = STRBUF_INIT;
	json_t *reply = NULL;
	long long t0 = now_ms();
	int code = dt_httpc_request(c, "GET", "/v1/echo", NULL, &reply, &err);

	if (code != 200)
		fail_msg("signed request under a flood: %d %s", code, err.buf);
	assert_string_equal(json_get_str(reply, "method", ""), "GET");
	assert_true(now_ms() - t0 < 2000);
	json_decref(reply);
	strbuf_release(&err);
}

static void flood(unsigned threads)
{
	struct dt_auth_key key;
	struct dt_httpd *srv;
	struct dt_httpd_stats st;
	struct dt_httpc keep, fresh;
	static int fds[FLOOD];
	int port, pub_fd;
	long long deadline;

	assert_int_equal(dt_auth_key_from_hex(&key, SECRET), 0);
	srv = start(&key, threads);
	port = dt_httpd_port(srv);

	/* a signed keep-alive connection from before the flood */
	dt_httpc_init(&keep, "127.0.0.1", port, &key);
	signed_get(&keep);
	assert_true(keep.connected);

	/* one that sent only a public request: evictable like the silent ones */
	pub_fd = connect_idle(port);
	assert_int_equal(write(pub_fd, "GET /pub HTTP/1.1\r\nHost: x\r\n\r\n", 30), 30);
	read_reply(pub_fd);

	for (int i = 0; i < FLOOD; i++)
		fds[i] = connect_idle(port);

	/* a fresh signed client from the same address gets through, and so
	 * does the keep-alive one (never evicted) */
	dt_httpc_init(&fresh, "127.0.0.1", port, &key);
	signed_get(&fresh);
	signed_get(&keep);

	/* all but the newest peer_idle_limit of the flood were evicted, and
	 * the public-only one, the oldest, first */
	deadline = now_ms() + 3000;
	while (closed_by_server(fds, FLOOD) < FLOOD - PEER_LIMIT && now_ms() < deadline)
		sleep_ms(20);
	assert_true(closed_by_server(fds, FLOOD) >= FLOOD - PEER_LIMIT);
	assert_int_equal(closed_by_server(&pub_fd, 1), 1);
	stats(srv, &st);
	assert_true(st.closed_flood >= FLOOD - PEER_LIMIT);
	assert_true(st.conns_unsigned <= PEER_LIMIT);
	assert_true(st.conns_open <= CONN_LIMIT);

	/* the rest after FRESH_MS (one thread: the periodic check; a pool:
	 * the next connection) */
	deadline = now_ms() + FRESH_MS + 3000;
	while (closed_by_server(fds, FLOOD) < FLOOD && now_ms() < deadline) {
		if (threads > 1)
			close(connect_idle(port));
		sleep_ms(50);
	}
	assert_int_equal(closed_by_server(fds, FLOOD), FLOOD);
	stats(srv, &st);
	assert_true(st.closed_no_request > 0);

	/* the signed connections are still served */
	signed_get(&keep);
	signed_get(&fresh);
	assert_true(keep.connected);

	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);
	close(pub_fd);
	dt_httpc_release(&keep);
	dt_httpc_release(&fresh);
	dt_httpd_stop(srv);
}

/*
 * A signed request for path on a raw socket, sent as `sent` (NULL: path; MHD
 * decodes %XX before the server checks the signature); the reply's head and
 * body in buf.
 */
static void raw_signed_as(int port, const struct dt_auth_key *key, const char *method,
			  const char *path, const char *sent, char *buf, size_t size)
{
	char ts[DT_TS_LEN], nonce[DT_NONCE_HEX], sig[DT_SHA256_HEX], req[1024];
	long long deadline = now_ms() + 2000;
	size_t len = 0;
	int fd = connect_idle(port), n;

	assert_int_equal(dt_auth_sign_request(key, method, path, "", 0, ts, nonce, sig), 0);
	n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
		     "Connection: close\r\n" DT_HDR_TIMESTAMP ": %s\r\n" DT_HDR_NONCE ": %s\r\n"
		     DT_HDR_SIGNATURE ": %s\r\n" DT_HDR_PROTOCOL ": %d\r\n\r\n", method,
		     sent ? sent : path, ts, nonce, sig, DT_PROTOCOL_VERSION);
	assert_int_equal(write(fd, req, (size_t)n), n);
	buf[0] = '\0';
	while (now_ms() < deadline && len < size - 1) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t got;

		if (poll(&p, 1, 100) != 1)
			continue;
		got = recv(fd, buf + len, size - 1 - len, 0);
		if (got <= 0)
			break;
		len += (size_t)got;
		buf[len] = '\0';
	}
	close(fd);
}

static void raw_signed(int port, const struct dt_auth_key *key, const char *method,
		       const char *path, char *buf, size_t size)
{
	raw_signed_as(port, key, method, path, NULL, buf, size);
}

/* a real server: 405 with an Allow header, 404 without one */
static void test_server_405_allow(void **state)
{
	struct dt_auth_key key;
	struct dt_httpd *srv;
	char buf[2048];
	int port;

	assert_int_equal(dt_auth_key_from_hex(&key, SECRET), 0);
	srv = start(&key, 1);
	port = dt_httpd_port(srv);
	raw_signed(port, &key, "POST", "/v1/echo", buf, sizeof(buf));
	if (!strstr(buf, " 405 ") || !strcasestr(buf, "\r\nAllow: GET, DELETE\r\n"))
		fail_msg("POST /v1/echo: %s", buf);
	raw_signed(port, &key, "DELETE", "/v1/echo", buf, sizeof(buf));
	if (!strstr(buf, " 200 ") || strcasestr(buf, "\r\nAllow:"))
		fail_msg("DELETE /v1/echo: %s", buf);
	raw_signed(port, &key, "GET", "/v1/echo/", buf, sizeof(buf));
	if (!strstr(buf, " 404 ") || strcasestr(buf, "\r\nAllow:"))
		fail_msg("GET /v1/echo/: %s", buf);
	/* a capture as MHD hands it over: raw UTF-8 and sub-delims as they are,
	 * %XX decoded (so an encoded '/' is a '/', and no match) */
	raw_signed(port, &key, "GET", "/v1/echo/caf\xc3\xa9(1)", buf, sizeof(buf));
	if (!strstr(buf, " 200 ") || !strstr(buf, "\"x\":\"caf\\u00E9(1)\""))
		fail_msg("GET /v1/echo/caf\xc3\xa9(1): %s", buf);
	raw_signed_as(port, &key, "GET", "/v1/echo/caf\xc3\xa9", "/v1/echo/caf%C3%A9", buf,
		      sizeof(buf));
	if (!strstr(buf, " 200 ") || !strstr(buf, "\"x\":\"caf\\u00E9\""))
		fail_msg("GET /v1/echo/caf%%C3%%A9: %s", buf);
	raw_signed_as(port, &key, "GET", "/v1/echo/a/b", "/v1/echo/a%2Fb", buf, sizeof(buf));
	if (!strstr(buf, " 404 "))
		fail_msg("GET /v1/echo/a%%2Fb: %s", buf);
	dt_httpd_stop(srv);
}

struct slow_call {
	int port;
	const struct dt_auth_key *key;
	long ms;
	int code;
	json_t *reply;
};

static void *slow_call(void *p)
{
	struct slow_call *x = p;
	struct dt_httpc c;
	struct strbuf err = STRBUF_INIT;
	json_t *body = json_pack("{s:i}", "ms", (int)x->ms);

	dt_httpc_init(&c, "127.0.0.1", x->port, x->key);
	x->code = dt_httpc_request(&c, "POST", "/v1/slow", body, &x->reply, &err);
	json_decref(body);
	dt_httpc_release(&c);
	strbuf_release(&err);
	return NULL;
}

/*
 * A handler's slow work runs on a thread of its own while its request is
 * parked: the one-thread server answers other requests meanwhile, the slow
 * one gets the work's reply and status, and stopping the server waits for
 * work still running (ASan sees no use after free).
 */
static void test_offload(void **state)
{
	struct dt_auth_key key;
	struct dt_httpc c;
	struct slow_call x = { 0 }, y = { 0 };
	pthread_t th, th2;
	long long t0;

	assert_int_equal(dt_auth_key_from_hex(&key, SECRET), 0);
	slow_srv = start(&key, 1);
	x.port = y.port = dt_httpd_port(slow_srv);
	x.key = y.key = &key;
	x.ms = 600;
	t0 = now_ms();
	assert_int_equal(pthread_create(&th, NULL, slow_call, &x), 0);
	usleep(100 * 1000);              /* the slow one is in (no harm if not yet) */
	dt_httpc_init(&c, "127.0.0.1", x.port, &key);
	for (int i = 0; i < 5; i++) {
		long long t1 = now_ms();

		signed_get(&c);
		if (now_ms() - t1 > 300)
			fail_msg("GET /v1/echo took %lld ms while slow work ran", now_ms() - t1);
	}
	dt_httpc_release(&c);
	pthread_join(th, NULL);
	assert_int_equal(x.code, 201);
	assert_int_equal(json_get_int(x.reply, "slept", 0), 600);
	assert_true(now_ms() - t0 >= 600);
	json_decref(x.reply);

	/* stopped with work in flight: the client gets an answer, the server waits */
	y.ms = 300;
	assert_int_equal(pthread_create(&th2, NULL, slow_call, &y), 0);
	usleep(100 * 1000);
	dt_httpd_stop(slow_srv);
	pthread_join(th2, NULL);
	assert_true(y.code == 503 || y.code == 201 || y.code < 0);
	json_decref(y.reply);
	slow_srv = NULL;
}

/* the caller as the handler sees it on the local socket (httpd.h unix_path) */
static void h_who(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	(void)data;
	dt_http_json(resp, 200, json_pack("{s:i,s:I}", "via", (int)req->via, "uid",
					  (json_int_t)req->peer_uid));
}

static void h_daemon(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	(void)req;
	(void)data;
	dt_http_json(resp, 200, json_object());
}

/*
 * A server on a Unix socket: unsigned requests, each its kernel-named peer
 * (SO_PEERCRED); the socket made with its mode; a stale socket replaced, a
 * file there refused; the client trusts a socket only in a folder nobody
 * else may write to.
 */
static void test_unix_socket(void **state)
{
	static const struct dt_http_route who_routes[] = {
		{ "GET", "/v1/who", 0, h_who },
		{ "GET", "/v1/daemon", DT_ROUTE_DAEMON, h_daemon },
	};
	char dir[] = "/tmp/test_httpd.XXXXXX";
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;
	struct dt_httpd_opts o = DT_HTTPD_OPTS_INIT;
	struct dt_httpd *srv;
	struct dt_httpc c;
	struct stat st;
	json_t *reply = NULL;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	strbuf_addf(&path, "%s/d.sock", dir);
	o.routes = who_routes;
	o.nr_routes = 2;
	o.unix_path = path.buf;
	o.unix_mode = 0660;
	srv = dt_httpd_start(&o, &err);
	assert_non_null(srv);
	assert_int_equal(lstat(path.buf, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0660);
	assert_int_equal(dt_unix_socket_trusted(path.buf, (unsigned)geteuid(), &err), 0);
	dt_httpc_init_unix(&c, path.buf);
	assert_int_equal(dt_httpc_request(&c, "GET", "/v1/who", NULL, &reply, &err), 200);
	assert_int_equal(json_integer_value(json_object_get(reply, "via")), DT_VIA_PEERCRED);
	assert_int_equal(json_integer_value(json_object_get(reply, "uid")), (json_int_t)geteuid());
	json_decref(reply);
	/* the server's own user may call a daemon's route */
	assert_int_equal(dt_httpc_request(&c, "GET", "/v1/daemon", NULL, &reply, &err), 200);
	json_decref(reply);
	dt_httpc_release(&c);
	/* a folder others may write to: anyone could have made the socket */
	chmod(dir, 0777);
	strbuf_reset(&err);
	assert_int_equal(dt_unix_socket_trusted(path.buf, (unsigned)geteuid(), &err), -1);
	assert_non_null(strstr(err.buf, "others may write to it"));
	chmod(dir, 0700);
	dt_httpd_stop(srv);
	assert_int_equal(lstat(path.buf, &st), -1);   /* removed at stop */

	/* a regular file where the socket goes is not replaced */
	f = fopen(path.buf, "w");
	assert_non_null(f);
	fclose(f);
	strbuf_reset(&err);
	assert_null(dt_httpd_start(&o, &err));
	assert_non_null(strstr(err.buf, "is not a socket: not replacing it"));
	unlink(path.buf);
	rmdir(dir);
	strbuf_release(&path);
	strbuf_release(&err);
}

static void test_flood_one_thread(void **state)
{
	flood(1);
}

static void test_flood_thread_pool(void **state)
{
	flood(4);
}

static void h_cap(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	(void)data;
	dt_http_json(resp, 200, json_pack("{s:s}", "job",
					  req->via == DT_VIA_JOBCAP ? req->cap.job : ""));
}

/* GET /v1/tasks/x on c, signed with cap's key (NULL: the secret itself) */
static int cap_request(struct dt_httpc *c, int port, const struct dt_auth_key *secret,
		       const char *cap, struct strbuf *why)
{
	struct dt_auth_key key;
	json_t *reply = NULL;
	int code;

	if (!c->host) {
		if (cap)
			assert_int_equal(dt_auth_cap_key(secret, cap, &key), 0);
		dt_httpc_init(c, "127.0.0.1", port, cap ? &key : secret);
		if (cap)
			snprintf(c->cap, sizeof(c->cap), "%s", cap);
	}
	code = dt_httpc_request(c, "GET", "/v1/tasks/x", NULL, &reply, why);
	if (code != 200 && reply)
		strbuf_addstr(why, dt_httpc_reply_error(reply, code));
	json_decref(reply);
	return code;
}

/*
 * A job's capability (team mode: its ranks can read it) signs requests, and
 * a connection that carried a signed request is never evicted as a flood: one
 * job's ranks held every connection of an agent (256), and no job could be
 * started on that node.  Now a capability holds at most owner_limit of them
 * (a request on one more: 429, closed); another job's and the secret's are
 * served, and a connection let go makes room.
 */
static void test_one_capability_holds_few_connections(void **state)
{
	static const struct dt_http_route cap_routes[] = {
		{ "GET", "/v1/tasks/{id}", DT_ROUTE_JOBCAP, h_cap },
	};
	const char *cap = "j-1 alice 1000 1000";
	struct dt_httpd_opts o = DT_HTTPD_OPTS_INIT;
	struct strbuf err = STRBUF_INIT;
	struct dt_auth_key secret;
	struct dt_httpc c[6];
	struct dt_httpd *srv;
	long long deadline;
	int port, code;

	(void)state;
	memset(c, 0, sizeof(c));
	assert_int_equal(dt_auth_key_from_hex(&secret, SECRET), 0);
	o.bind = "127.0.0.1";
	o.routes = cap_routes;
	o.nr_routes = 1;
	o.key = &secret;
	o.conn_limit = 128;
	o.owner_limit = 3;
	srv = dt_httpd_start(&o, &err);
	assert_non_null(srv);
	port = dt_httpd_port(srv);
	for (int i = 0; i < 3; i++)
		assert_int_equal(cap_request(&c[i], port, &secret, cap, &err), 200);
	strbuf_reset(&err);
	assert_int_equal(cap_request(&c[3], port, &secret, cap, &err), 429);
	assert_non_null(strstr(err.buf, "the capability of job 'j-1' holds 3 open connections"));
	assert_int_equal(cap_request(&c[4], port, &secret, "j-2 bob 1001 1001", &err), 200);
	assert_int_equal(cap_request(&c[5], port, &secret, NULL, &err), 200);
	dt_httpc_release(&c[0]);
	deadline = dt_mono_ms() + 10000;   /* the server sees the close, then makes room */
	while ((code = cap_request(&c[3], port, &secret, cap, &err)) != 200 &&
	       dt_mono_ms() < deadline) {
		struct timespec ts = { 0, 20 * 1000000L };

		nanosleep(&ts, NULL);
	}
	assert_int_equal(code, 200);
	for (int i = 1; i < 6; i++)
		dt_httpc_release(&c[i]);
	dt_httpd_stop(srv);
	strbuf_release(&err);
}

/* A public server of conn_limit connections that evicts none of them as a flood */
static struct dt_httpd *start_unevicting(unsigned conn_limit)
{
	struct dt_httpd_opts o = DT_HTTPD_OPTS_INIT;

	o.conn_limit = conn_limit;
	o.idle_limit = o.peer_idle_limit = conn_limit;
	return start_with(&o);
}

/*
 * The open-file limit is the process's: two servers (dtsched runs two of
 * 4096 connections, and the dashboard) each nearly full still accept, and
 * answer.  It was sized for one server: the second met EMFILE, and
 * libmicrohttpd stopped accepting there (or, holding no connection, retried
 * accept() in a busy loop).
 */
#define NOFILE_CONNS 300
static void test_two_full_servers_fit_the_file_limit(void **state)
{
	struct rlimit was, low;
	struct dt_httpd *a, *b;
	int ready[2], hold[2], fd, port_a, port_b;
	char c, reply[64] = "";
	const char *req = "GET /pub HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	struct pollfd p;
	pid_t pid;
	ssize_t n;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
	if (was.rlim_max != RLIM_INFINITY && was.rlim_max < 4 * NOFILE_CONNS)
		skip();
	low = was;
	low.rlim_cur = 64;   /* as a shell's 1024 is to dtsched's 4096 */
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	a = start_unevicting(NOFILE_CONNS);
	b = start_unevicting(NOFILE_CONNS);
	port_a = dt_httpd_port(a);
	port_b = dt_httpd_port(b);
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(hold), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {   /* the clients: every connection of a, all but one of b */
		setrlimit(RLIMIT_NOFILE, &was);
		close(hold[1]);
		for (int i = 0; i < 2 * NOFILE_CONNS - 1; i++)
			connect_idle(i < NOFILE_CONNS ? port_a : port_b);
		if (write(ready[1], "r", 1) != 1 || read(hold[0], &c, 1) < 0)
			_exit(1);
		_exit(0);
	}
	close(ready[1]);
	close(hold[0]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	fd = connect_idle(port_b);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	p.fd = fd;
	p.events = POLLIN;
	assert_int_equal(poll(&p, 1, 20000), 1);   /* generous: a loaded machine */
	n = read(fd, reply, sizeof(reply) - 1);
	assert_true(n > 0);
	reply[n] = '\0';
	assert_non_null(strstr(reply, " 200 "));
	close(fd);
	close(hold[1]);
	close(ready[0]);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	dt_httpd_stop(a);
	dt_httpd_stop(b);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &was), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_route_captures),
		cmocka_unit_test(test_one_capability_holds_few_connections),
		cmocka_unit_test(test_route_404_405),
		cmocka_unit_test(test_route_bad_captures),
		cmocka_unit_test(test_server_405_allow),
		cmocka_unit_test(test_policy_under_limits),
		cmocka_unit_test(test_policy_timeout),
		cmocka_unit_test(test_policy_peer_oldest_first),
		cmocka_unit_test(test_policy_total_oldest_first),
		cmocka_unit_test(test_offload),
		cmocka_unit_test(test_unix_socket),
		cmocka_unit_test(test_flood_one_thread),
		cmocka_unit_test(test_flood_thread_pool),
		cmocka_unit_test(test_two_full_servers_fit_the_file_limit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
