/*
 * test_httpc.c - the HTTP client (lib/httpc.c) against the real server
 * (lib/httpd.c, started in-process on a free port) and against a scripted
 * socket server that sends canned bytes: signed round trip, the request it
 * writes, keep-alive reuse, the idle-close retry (and no retry once reply
 * bytes came), Connection: close, chunked replies dripped a few bytes at a
 * time, every kind of malformed reply, refused connections, timeouts, an
 * IPv6 literal, and a loop of mutated and random replies that must each end
 * in a status or an error, never a crash or a hang.
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
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "httpc.h"
#include "httpd.h"
#include "json.h"
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

static struct dt_auth_key test_key(void)
{
	struct dt_auth_key k;

	assert_int_equal(dt_auth_key_from_hex(&k, SECRET), 0);
	return k;
}

/* --- the scripted server ------------------------------------------------------ */

/*
 * One step: read a request, then send `reply` (NULL: send nothing and wait
 * hang_ms or until the client goes), then close the connection if `close`.
 * Steps run in order; the next step after a close is served on the next
 * accepted connection.  A reply "HTTP/1.x NNN ..." is signed as our servers
 * sign (protocol.h) with the empty key (what a client with a NULL key has)
 * for the request's nonce: an X-DT-Signature line goes after the status
 * line, over `body` (NULL: the bytes after the head), unless `sign` says
 * otherwise (UNSIGNED: as is; OTHER_NONCE: for another request's nonce).
 */
enum { SIGNED, UNSIGNED, OTHER_NONCE };
struct step {
	const char *reply;
	size_t len;        /* 0: strlen(reply) */
	int close;
	int hang_ms;
	size_t drip;       /* > 0: write this many bytes at a time, 1 ms apart */
	const char *body;  /* what the signature covers (a chunked reply's decoded body) */
	int sign;
};

struct canned {
	int lfd, port;
	const struct step *steps;
	int nr_steps;
	pthread_t th;
	int accepts, requests;
	struct strbuf last;   /* the last request, head and body */
};

/* Read one request (head + Content-Length body) into sb; -1 on EOF/error. */
static int read_request(int fd, struct strbuf *sb)
{
	char buf[4096], *end, *cl;
	size_t need = 0, headlen;
	ssize_t n;

	strbuf_reset(sb);
	while (!(end = strstr(sb->buf, "\r\n\r\n"))) {
		n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			return -1;
		strbuf_add(sb, buf, (size_t)n);
	}
	headlen = (size_t)(end - sb->buf) + 4;
	cl = strcasestr(sb->buf, "\r\nContent-Length:");
	if (cl && cl < end)
		need = strtoul(cl + 17, NULL, 10);
	while (sb->len < headlen + need) {
		n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			return -1;
		strbuf_add(sb, buf, (size_t)n);
	}
	return 0;
}

static void send_bytes(int fd, const char *p, size_t len, size_t drip)
{
	while (len) {
		size_t k = drip && drip < len ? drip : len;
		ssize_t w = send(fd, p, k, MSG_NOSIGNAL);

		if (w <= 0)
			return;
		p += w;
		len -= (size_t)w;
		if (drip)
			sleep_ms(1);
	}
}

/* The bytes of st's reply to request req (see struct step) into out. */
static void sign_canned(const struct step *st, const char *req, struct strbuf *out)
{
	static const struct dt_auth_key empty;
	size_t len = st->len ? st->len : strlen(st->reply);
	const char *r = st->reply, *end = st->reply + len, *eol, *head_end;
	const char *n = strstr(req, "\r\n" DT_HDR_NONCE ": ");
	char nonce[DT_NONCE_HEX] = "0123456789abcdef0123456789abcdef", sig[DT_SHA256_HEX];
	const char *body;

	/* past interim 1xx replies: the final one is signed */
	while ((head_end = memmem(r, (size_t)(end - r), "\r\n\r\n", 4)) && end - r > 12 &&
	       r[9] == '1' && head_end + 4 < end)
		r = head_end + 4;
	eol = memmem(r, (size_t)(end - r), "\r\n", 2);
	if (st->sign == UNSIGNED || !eol || !head_end || end - r < 12 || strncmp(r, "HTTP/1.", 7) ||
	    !n) {
		strbuf_add(out, st->reply, len);
		return;
	}
	if (st->sign != OTHER_NONCE)
		snprintf(nonce, sizeof(nonce), "%.32s", n + strlen(DT_HDR_NONCE) + 4);
	body = st->body ? st->body : head_end + 4;
	if (dt_auth_sign_reply(&empty, atoi(r + 9), nonce, body,
			       st->body ? strlen(body) : (size_t)(end - body), sig) < 0)
		sig[0] = '\0';
	strbuf_add(out, st->reply, (size_t)(eol - st->reply) + 2);
	strbuf_addf(out, DT_HDR_SIGNATURE ": %s\r\n", sig);
	strbuf_add(out, eol + 2, (size_t)(end - eol - 2));
}

static void *canned_serve(void *data)
{
	struct canned *s = data;
	struct strbuf req = STRBUF_INIT;
	int fd = -1;

	for (int i = 0; i < s->nr_steps; i++) {
		const struct step *st = &s->steps[i];
		struct pollfd p = { s->lfd, POLLIN, 0 };

		if (fd < 0) {
			if (poll(&p, 1, 5000) != 1)
				break;
			fd = accept(s->lfd, NULL, NULL);
			if (fd < 0)
				break;
			s->accepts++;
		}
		if (read_request(fd, &req) < 0) {
			close(fd);
			fd = -1;
			i--;          /* the client gave up on it: same step, next connection */
			continue;
		}
		s->requests++;
		strbuf_reset(&s->last);
		strbuf_addbuf(&s->last, &req);
		if (st->reply) {
			struct strbuf out = STRBUF_INIT;

			sign_canned(st, req.buf, &out);
			send_bytes(fd, out.buf, out.len, st->drip);
			strbuf_release(&out);
		} else if (st->hang_ms) {
			struct pollfd q = { fd, POLLIN, 0 };

			poll(&q, 1, st->hang_ms);   /* until the client closes */
		}
		if (st->close) {
			close(fd);
			fd = -1;
		}
	}
	if (fd >= 0)
		close(fd);
	strbuf_release(&req);
	return NULL;
}

static int listen_on(int family, int *port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
	socklen_t len;
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&ss, 0, sizeof(ss));
	if (family == AF_INET) {
		a4->sin_family = AF_INET;
		a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		len = sizeof(*a4);
	} else {
		a6->sin6_family = AF_INET6;
		a6->sin6_addr = in6addr_loopback;
		len = sizeof(*a6);
	}
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 16) < 0) {
		close(fd);
		return -1;
	}
	len = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &len);
	*port = ntohs(family == AF_INET ? a4->sin_port : a6->sin6_port);
	return fd;
}

/* The script on a loopback port of family af; -1 (nothing started) when
 * this machine cannot listen there (no IPv6). */
static int canned_start_af(struct canned *s, const struct step *steps, int n, int af)
{
	memset(s, 0, sizeof(*s));
	strbuf_init(&s->last, 0);
	s->steps = steps;
	s->nr_steps = n;
	s->lfd = listen_on(af, &s->port);
	if (s->lfd < 0) {
		strbuf_release(&s->last);
		return -1;
	}
	assert_int_equal(pthread_create(&s->th, NULL, canned_serve, s), 0);
	return 0;
}

static void canned_start(struct canned *s, const struct step *steps, int n)
{
	assert_int_equal(canned_start_af(s, steps, n, AF_INET), 0);
}

/* Wait for the script to end; the number of connections still pending (retries too many). */
static int canned_stop(struct canned *s)
{
	struct pollfd p = { s->lfd, POLLIN, 0 };
	int extra = 0, fd;

	pthread_join(s->th, NULL);
	while (poll(&p, 1, 0) == 1 && (fd = accept(s->lfd, NULL, NULL)) >= 0) {
		extra++;
		close(fd);
	}
	close(s->lfd);
	strbuf_release(&s->last);
	return extra;
}

static const char ok_body[] = "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"n\": 1234}";

/* --- against lib/httpd.c -------------------------------------------------------- */

static void echo(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	json_t *o = json_object();

	json_object_set_new(o, "method", json_string(req->method));
	if (req->json)
		json_object_set(o, "got", req->json);
	dt_http_json(resp, 200, o);
}

static void big(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	for (int i = 0; i < 100000; i++)
		strbuf_addf(&resp->text, "line %06d\n", i);   /* 1.2 MB */
}

static const struct dt_http_route routes[] = {
	{ "POST", "/v1/echo", 0, echo },
	{ "GET", "/v1/echo", 0, echo },
	{ "GET", "/v1/big", DT_ROUTE_PUBLIC, big },
};

static struct dt_httpd *start_httpd(const struct dt_auth_key *key)
{
	struct dt_httpd_opts o = DT_HTTPD_OPTS_INIT;
	struct strbuf err = STRBUF_INIT;
	struct dt_httpd *srv;

	o.bind = "127.0.0.1";
	o.routes = routes;
	o.nr_routes = sizeof(routes) / sizeof(routes[0]);
	o.key = key;
	srv = dt_httpd_start(&o, &err);
	if (!srv)
		fail_msg("cannot start the test server: %s", err.buf);
	strbuf_release(&err);
	return srv;
}

static void test_signed_round_trip(void **state)
{
	struct dt_auth_key key = test_key(), other = test_key();
	struct dt_httpd *srv = start_httpd(&key);
	struct strbuf err = STRBUF_INIT, raw = STRBUF_INIT;
	struct dt_httpc c;
	json_t *body = json_pack("{s:i,s:s}", "x", 1, "s", "h\u00e9llo \"quoted\""), *reply = NULL;
	int code, fd;

	dt_httpc_init(&c, "127.0.0.1", dt_httpd_port(srv), &key);
	code = dt_httpc_request(&c, "POST", "/v1/echo", body, &reply, &err);
	assert_int_equal(code, 200);
	assert_string_equal(err.buf, "");
	assert_non_null(reply);
	assert_true(json_equal(json_object_get(reply, "got"), body));
	assert_int_equal(json_integer_value(json_object_get(reply, "protocol")), DT_PROTOCOL_VERSION);
	json_decref(reply);

	/* the same connection serves the next requests (GET without a body too) */
	assert_true(c.connected);
	fd = c.fd;
	code = dt_httpc_request(&c, "GET", "/v1/echo", NULL, &reply, &err);
	assert_int_equal(code, 200);
	assert_string_equal(json_get_str(reply, "method", ""), "GET");
	json_decref(reply);
	assert_true(c.connected);
	assert_int_equal(c.fd, fd);

	/* a body bigger than the read buffer, through MHD */
	code = dt_httpc_request_raw(&c, "GET", "/v1/big", NULL, 0, &raw, &err);
	assert_int_equal(code, 200);
	assert_int_equal(raw.len, 1200000);
	assert_memory_equal(raw.buf + raw.len - 12, "line 099999\n", 12);
	dt_httpc_release(&c);

	/* a wrong key is refused by the server: the signature is really checked;
	 * its 401 is signed with its key, which is not ours: no answer, saying both */
	other.bytes[0] ^= 1;
	dt_httpc_init(&c, "127.0.0.1", dt_httpd_port(srv), &other);
	code = dt_httpc_request(&c, "POST", "/v1/echo", body, &reply, &err);
	assert_int_equal(code, -1);
	assert_null(reply);
	assert_non_null(strstr(err.buf, "is not signed by this cluster"));
	assert_non_null(strstr(err.buf, "it answered 401 bad signature"));
	assert_true(c.unsigned_reply);
	dt_httpc_release(&c);

	json_decref(body);
	strbuf_release(&raw);
	strbuf_release(&err);
	dt_httpd_stop(srv);
}

/* --- against the scripted server ----------------------------------------------- */

/*
 * A port squatter's replies (protocol.h): unsigned, signed for another
 * request's nonce (a relayed reply), or with the body or status changed
 * after signing; each is no answer (-1) naming the port, and the kept-alive
 * connection is dropped.  The same bytes properly signed are believed.
 */
static void test_reply_signature(void **state)
{
	static const char teapot[] = "HTTP/1.1 418 Teapot\r\nContent-Length: 11\r\n\r\n{\"n\": 1234}";
	const struct step steps[] = {
		{ ok_body, 0, 0, 0, 0, NULL, SIGNED },
		{ ok_body, 0, 0, 0, 0, NULL, UNSIGNED },
		{ ok_body, 0, 1, 0, 0, NULL, OTHER_NONCE },
		{ ok_body, 0, 1, 0, 0, "{\"n\": 1}", SIGNED },       /* body changed */
		{ teapot, 0, 1, 0, 0, NULL, SIGNED },
	};
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT, want = STRBUF_INIT;
	struct canned s;
	struct dt_httpc c;

	canned_start(&s, steps, 5);
	dt_httpc_init(&c, "127.0.0.1", s.port, NULL);
	c.peer_port_name = "the head port";
	assert_int_equal(dt_httpc_request_raw(&c, "GET", "/v1/jobs", NULL, 0, &out, &err), 200);
	assert_string_equal(out.buf, "{\"n\": 1234}");
	assert_false(c.unsigned_reply);
	strbuf_addf(&want, "reply from 127.0.0.1:%d is not signed by this cluster "
		    "(another program on the head port?)", s.port);
	for (int i = 1; i < 4; i++) {
		strbuf_reset(&out);
		strbuf_reset(&err);
		if (dt_httpc_request_raw(&c, "GET", "/v1/jobs", NULL, 0, &out, &err) != -1)
			fail_msg("step %d: a reply not signed for this request was believed", i);
		assert_string_equal(err.buf, want.buf);
		assert_true(c.unsigned_reply);
		assert_int_equal(out.len, 0);
		assert_false(c.connected);
	}
	/* the status is signed too: a teapot signed as such is fine */
	strbuf_reset(&err);
	assert_int_equal(dt_httpc_request_raw(&c, "GET", "/v1/jobs", NULL, 0, &out, &err), 418);
	assert_false(c.unsigned_reply);
	dt_httpc_release(&c);
	assert_int_equal(canned_stop(&s), 0);
	strbuf_release(&err);
	strbuf_release(&out);
	strbuf_release(&want);
}

static void test_request_format(void **state)
{
	const struct step steps[] = { { ok_body, 0, 0, 0, 0, NULL, SIGNED }, { ok_body, 0, 1, 0, 0, NULL, SIGNED } };
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT, host = STRBUF_INIT;
	struct canned s;
	struct dt_httpc c;
	char *r;

	canned_start(&s, steps, 2);
	dt_httpc_init(&c, "127.0.0.1", s.port, NULL);
	assert_int_equal(dt_httpc_request_raw(&c, "PUT", "/v1/x?y=1", "{\"a\":1}", 7, &out, &err), 200);
	assert_string_equal(out.buf, "{\"n\": 1234}");
	r = s.last.buf;
	assert_true(starts_with(r, "PUT /v1/x?y=1 HTTP/1.1\r\n"));
	strbuf_addf(&host, "\r\nHost: 127.0.0.1:%d\r\n", s.port);
	assert_non_null(strstr(r, host.buf));
	assert_non_null(strstr(r, "\r\nContent-Type: application/json\r\n"));
	assert_non_null(strstr(r, "\r\nContent-Length: 7\r\n"));
	assert_non_null(strstr(r, "\r\nConnection: keep-alive\r\n"));
	assert_non_null(strstr(r, "\r\n" DT_HDR_TIMESTAMP ": "));
	assert_non_null(strstr(r, "\r\n" DT_HDR_NONCE ": "));
	assert_non_null(strstr(r, "\r\n" DT_HDR_SIGNATURE ": "));
	assert_true(ends_with(r, "\r\n\r\n{\"a\":1}"));

	strbuf_reset(&out);
	assert_int_equal(dt_httpc_request_raw(&c, "GET", "/v1/y", NULL, 0, &out, &err), 200);
	r = s.last.buf;
	assert_true(starts_with(r, "GET /v1/y HTTP/1.1\r\n"));
	assert_non_null(strstr(r, "\r\nContent-Length: 0\r\n"));
	assert_null(strstr(r, "Content-Type"));
	dt_httpc_release(&c);
	assert_int_equal(canned_stop(&s), 0);
	assert_int_equal(s.accepts, 1);          /* both on one connection */
	assert_string_equal(err.buf, "");
	strbuf_release(&err);
	strbuf_release(&out);
	strbuf_release(&host);
}

static void test_connection_close(void **state)
{
	static const char closing[] = "HTTP/1.1 200 OK\r\nConnection: close\r\n"
		"Content-Length: 2\r\n\r\n{}";
	/* the server keeps the connection open: only the header says close */
	const struct step steps[] = { { closing, 0, 0, 300, 0, NULL, SIGNED }, { ok_body, 0, 1, 0, 0, NULL, SIGNED } };
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT;
	struct canned s;
	struct dt_httpc c;

	canned_start(&s, steps, 2);
	dt_httpc_init(&c, "127.0.0.1", s.port, NULL);
	assert_int_equal(dt_httpc_request_raw(&c, "GET", "/a", NULL, 0, &out, &err), 200);
	assert_false(c.connected);
	assert_int_equal(dt_httpc_request_raw(&c, "GET", "/b", NULL, 0, &out, &err), 200);
	dt_httpc_release(&c);
	assert_int_equal(canned_stop(&s), 0);
	assert_int_equal(s.accepts, 2);
	assert_string_equal(out.buf, "{}{\"n\": 1234}");
	strbuf_release(&err);
	strbuf_release(&out);
}

/* The server takes the second request and closes without a word: sent again once. */
static void test_idle_close_retry(void **state)
{
	const struct step steps[] = {
		{ ok_body, 0, 0, 0, 0, NULL, SIGNED },
		{ NULL, 0, 1, 0, 0, NULL, SIGNED },      /* reads request 2, closes: no reply byte */
		{ ok_body, 0, 1, 0, 0, NULL, SIGNED },   /* the retry, on a new connection */
	};
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT;
	struct canned s;
	struct dt_httpc c;

	canned_start(&s, steps, 3);
	dt_httpc_init(&c, "127.0.0.1", s.port, NULL);
	assert_int_equal(dt_httpc_request_raw(&c, "POST", "/a", "{}", 2, &out, &err), 200);
	strbuf_reset(&out);
	assert_int_equal(dt_httpc_request_raw(&c, "POST", "/b", "{}", 2, &out, &err), 200);
	assert_string_equal(out.buf, "{\"n\": 1234}");
	assert_string_equal(err.buf, "");
	dt_httpc_release(&c);
	assert_int_equal(canned_stop(&s), 0);
	assert_int_equal(s.accepts, 2);
	assert_int_equal(s.requests, 3);
	strbuf_release(&err);
	strbuf_release(&out);
}

/* The server closed the idle connection before the next request: a new one, no error. */
static void test_idle_closed_before_reuse(void **state)
{
	const struct step steps[] = { { ok_body, 0, 1, 0, 0, NULL, SIGNED }, { ok_body, 0, 1, 0, 0, NULL, SIGNED } };
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT;
	struct canned s;
	struct dt_httpc c;

	canned_start(&s, steps, 2);
	dt_httpc_init(&c, "127.0.0.1", s.port, NULL);
	assert_int_equal(dt_httpc_request_raw(&c, "GET", "/a", NULL, 0, &out, &err), 200);
	sleep_ms(50);
	assert_int_equal(dt_httpc_request_raw(&c, "GET", "/b", NULL, 0, &out, &err), 200);
	dt_httpc_release(&c);
	assert_int_equal(canned_stop(&s), 0);
	assert_int_equal(s.accepts, 2);
	assert_int_equal(s.requests, 2);
	strbuf_release(&err);
	strbuf_release(&out);
}

/* Never sent again once reply bytes came, nor on a fresh connection. */
static void test_no_retry(void **state)
{
	static const char part[] = "HTTP/1.1 200 OK\r\nContent-Le";
	const struct step steps[] = { { ok_body, 0, 0, 0, 0, NULL, SIGNED }, { part, 0, 1, 0, 0, NULL, SIGNED } };
	const struct step fresh[] = { { NULL, 0, 1, 0, 0, NULL, SIGNED } };
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT;
	struct canned s;
	struct dt_httpc c;

	canned_start(&s, steps, 2);
	dt_httpc_init(&c, "127.0.0.1", s.port, NULL);
	assert_int_equal(dt_httpc_request_raw(&c, "POST", "/a", "{}", 2, &out, &err), 200);
	strbuf_reset(&out);
	assert_int_equal(dt_httpc_request_raw(&c, "POST", "/b", "{}", 2, &out, &err), -1);
	assert_non_null(strstr(err.buf, "incomplete reply from 127.0.0.1:"));
	assert_int_equal(out.len, 0);
	assert_false(c.connected);
	dt_httpc_release(&c);
	assert_int_equal(canned_stop(&s), 0);    /* no second connection */
	assert_int_equal(s.requests, 2);

	strbuf_reset(&err);
	canned_start(&s, fresh, 1);
	dt_httpc_init(&c, "127.0.0.1", s.port, NULL);
	assert_int_equal(dt_httpc_request_raw(&c, "POST", "/a", "{}", 2, &out, &err), -1);
	assert_non_null(strstr(err.buf, "no reply from 127.0.0.1:"));
	dt_httpc_release(&c);
	assert_int_equal(canned_stop(&s), 0);
	assert_int_equal(s.accepts, 1);
	strbuf_release(&err);
	strbuf_release(&out);
}

static void test_chunked(void **state)
{
	static const char chunked[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n"
		"Content-Type: application/json\r\n\r\n"
		"4\r\n{\"a\"\r\n"
		"A;name=value\r\n: \"0123456\r\n"
		"002 \r\n\"}\r\n"
		"0\r\nX-Trailer: 1\r\n\r\n";
	static const char decoded[] = "{\"a\": \"0123456\"}";
	const struct step steps[] = { { chunked, 0, 0, 0, 5, decoded, SIGNED }, { chunked, 0, 1, 0, 0, decoded, SIGNED } };
	struct strbuf err = STRBUF_INIT;
	struct canned s;
	struct dt_httpc c;
	json_t *reply = NULL;

	canned_start(&s, steps, 2);
	dt_httpc_init(&c, "127.0.0.1", s.port, NULL);
	for (int i = 0; i < 2; i++) {   /* dripped, then whole; kept alive in between */
		assert_int_equal(dt_httpc_request(&c, "GET", "/c", NULL, &reply, &err), 200);
		assert_string_equal(json_get_str(reply, "a", ""), "0123456");
		json_decref(reply);
	}
	assert_string_equal(err.buf, "");
	dt_httpc_release(&c);
	assert_int_equal(canned_stop(&s), 0);
	assert_int_equal(s.accepts, 1);
	strbuf_release(&err);
}

static void test_malformed(void **state)
{
	static const struct { const char *reply, *msg; } cases[] = {
		{ "HTTP/1.1 2OO OK\r\n\r\n", "malformed status line" },
		{ "HTTP/2 200\r\n\r\n", "malformed status line" },
		{ "HTTP/1.1 200OK\r\n\r\n", "malformed status line" },
		{ "garbage\r\n\r\n", "malformed status line" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", "bad Content-Length" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
		  "two different Content-Lengths" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "incomplete reply" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
		  "over 64 MiB" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 70000000\r\n\r\n", "over 64 MiB" },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		  "unsupported Transfer-Encoding 'gzip'" },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size" },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5x\r\nhello\r\n0\r\n\r\n",
		  "bad chunk size" },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n0\r\n\r\n",
		  "chunk longer than its size" },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n",
		  "over 64 MiB" },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "incomplete reply" },
		{ "HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", "malformed header line" },
		{ "HTTP/1.1 200 OK\r\n: empty name\r\n\r\n", "malformed header line" },
		{ "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "malformed header line" },
		{ "HTTP/1.1 200 OK\r\nX: a\nb\r\n\r\n", "malformed header line" },
		{ "HTTP/1.1 200 OK\r\n X: folded\r\n\r\n", "malformed header line" },
		{ "HTTP/1.1 200 OK\r\nX: a\001b\r\n\r\n", "control character" },
		{ "HTTP/1.1 200 OK\r\nContent-Len", "incomplete reply" },
	};
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT, huge = STRBUF_INIT;
	struct canned s;
	struct dt_httpc c;
	struct step st = { NULL, 0, 1, 0, 0, NULL, SIGNED };

	for (size_t i = 0; i <= sizeof(cases) / sizeof(cases[0]); i++) {
		const char *msg;

		if (i < sizeof(cases) / sizeof(cases[0])) {
			st.reply = cases[i].reply;
			msg = cases[i].msg;
		} else {
			/* headers that never end within 64 KiB */
			strbuf_addstr(&huge, "HTTP/1.1 200 OK\r\n");
			while (huge.len < 70 * 1024)
				strbuf_addstr(&huge, "X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
			st.reply = huge.buf;
			msg = "headers over 64 KiB";
		}
		canned_start(&s, &st, 1);
		dt_httpc_init(&c, "127.0.0.1", s.port, NULL);
		c.timeout_ms = 5000;
		strbuf_reset(&err);
		strbuf_addstr(&out, "kept");
		if (dt_httpc_request_raw(&c, "GET", "/m", NULL, 0, &out, &err) != -1 ||
		    !strstr(err.buf, msg) || !strstr(err.buf, "127.0.0.1:"))
			fail_msg("reply %zu: expected -1 and '%s', got '%s'", i, msg, err.buf);
		assert_string_equal(out.buf, "kept");     /* nothing of a failed reply is left */
		assert_false(c.connected);
		strbuf_reset(&out);
		dt_httpc_release(&c);
		assert_int_equal(canned_stop(&s), 0);
	}
	strbuf_release(&err);
	strbuf_release(&out);
	strbuf_release(&huge);
}

static void test_statuses(void **state)
{
	static const char notfound[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 26\r\n\r\n"
		"{\"error\": \"no such thing\"}";
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
	static const char old[] = "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}";
	static const char noleng[] = "HTTP/1.1 503 Busy\r\n\r\n{\"error\": \"later\"}";
	const struct step steps[] = { { notfound, 0, 0, 0, 0, NULL, SIGNED }, { cont, 0, 0, 0, 0, NULL, SIGNED },
				      { old, 0, 0, 0, 0, NULL, SIGNED }, { noleng, 0, 1, 0, 0, NULL, SIGNED } };
	struct strbuf err = STRBUF_INIT;
	struct canned s;
	struct dt_httpc c;
	json_t *reply = NULL;

	canned_start(&s, steps, 4);
	dt_httpc_init(&c, "127.0.0.1", s.port, NULL);
	assert_int_equal(dt_httpc_request(&c, "GET", "/x", NULL, &reply, &err), 404);
	assert_string_equal(dt_httpc_reply_error(reply, 404), "no such thing");
	json_decref(reply);
	assert_true(c.connected);
	assert_int_equal(dt_httpc_request(&c, "GET", "/x", NULL, &reply, &err), 204);
	assert_null(reply);
	assert_true(c.connected);
	assert_int_equal(dt_httpc_request(&c, "GET", "/x", NULL, &reply, &err), 200);
	json_decref(reply);
	assert_false(c.connected);         /* HTTP/1.0 without keep-alive */
	/* a body without length ends at EOF */
	assert_int_equal(dt_httpc_request(&c, "GET", "/x", NULL, &reply, &err), 503);
	assert_string_equal(dt_httpc_reply_error(reply, 503), "later");
	json_decref(reply);
	assert_false(c.connected);
	dt_httpc_release(&c);
	assert_int_equal(canned_stop(&s), 0);
	assert_int_equal(s.accepts, 2);
	assert_string_equal(err.buf, "");
	strbuf_release(&err);
}

/*
 * Protocol versions (protocol.h): the client sends X-DT-Protocol; a server
 * refuses another version with 426 before any handler runs (except on an
 * ANY_PROTOCOL route, whose handler sees req->protocol; an absent header is
 * version 1); a reply of another version from a server that did not check is
 * turned into the same 426 by the client.
 */
static int seen_protocol;

static void any_version(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	seen_protocol = req->protocol;
	dt_http_json(resp, 200, json_object());
}

static void test_protocol_versions(void **state)
{
	static const struct dt_http_route vroutes[] = {
		{ "GET", "/v1/echo", 0, echo },
		{ "GET", "/v1/any", DT_ROUTE_ANY_PROTOCOL, any_version },
	};
	char older[256];
	const struct step steps[] = { { older, 0, 1, 0, 0, NULL, SIGNED } };
	struct dt_auth_key key = test_key();
	struct dt_httpd_opts o = DT_HTTPD_OPTS_INIT;
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT;
	struct dt_httpd *srv;
	struct dt_httpc c;
	struct canned s;
	json_t *reply = NULL;
	char ts[DT_TS_LEN], nonce[DT_NONCE_HEX], sig[DT_SHA256_HEX];
	int fd, n;

	o.bind = "127.0.0.1";
	o.routes = vroutes;
	o.nr_routes = 2;
	o.key = &key;
	srv = dt_httpd_start(&o, &err);
	assert_non_null(srv);
	/* ours: served, and the handler of an any-version route sees our version */
	dt_httpc_init(&c, "127.0.0.1", dt_httpd_port(srv), &key);
	assert_int_equal(dt_httpc_request(&c, "GET", "/v1/echo", NULL, &reply, &err), 200);
	json_decref(reply);
	assert_int_equal(dt_httpc_request(&c, "GET", "/v1/any", NULL, &reply, &err), 200);
	json_decref(reply);
	assert_int_equal(seen_protocol, DT_PROTOCOL_VERSION);
	dt_httpc_release(&c);

	/* another version, signed well: 426 with both versions and the fix */
	for (int pass = 0; pass < 3; pass++) {
		const char *hdr = pass == 0 ? "99" : pass == 1 ? "" : "x1";
		const char *path = "/v1/echo";
		char buf[4096];
		struct sockaddr_in a = { 0 };

		assert_int_equal(dt_auth_sign_request(&key, "GET", path, NULL, 0, ts, nonce, sig), 0);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		a.sin_family = AF_INET;
		a.sin_port = htons((unsigned short)dt_httpd_port(srv));
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
		n = snprintf(buf, sizeof(buf), "GET %s HTTP/1.1\r\nHost: x\r\n%s: %s\r\n%s: %s\r\n"
			     "%s: %s\r\n%s%s%s%sConnection: close\r\n\r\n", path, DT_HDR_TIMESTAMP, ts,
			     DT_HDR_NONCE, nonce, DT_HDR_SIGNATURE, sig, *hdr ? DT_HDR_PROTOCOL : "",
			     *hdr ? ": " : "", hdr, *hdr ? "\r\n" : "");
		assert_int_equal(write(fd, buf, (size_t)n), n);
		strbuf_reset(&out);
		while ((n = (int)read(fd, buf, sizeof(buf))) > 0)
			strbuf_add(&out, buf, (size_t)n);
		close(fd);
		if (pass == 1 && DT_PROTOCOL_VERSION == 1) {
			/* no header: version 1, served by a version-1 server */
			assert_true(starts_with(out.buf, "HTTP/1.1 200"));
			continue;
		}
		assert_true(starts_with(out.buf, "HTTP/1.1 426"));
		assert_non_null(strstr(out.buf, "speaks dtctl protocol"));
		assert_non_null(strstr(out.buf, "run 'dtctl init'"));
		assert_non_null(strstr(out.buf, pass == 0 ? "\"peer_protocol\":99" :
				       pass == 1 ? "\"peer_protocol\":1" : "\"peer_protocol\":0"));
	}
	dt_httpd_stop(srv);

	/* an older server that does not check: its reply's version is refused here */
	snprintf(older, sizeof(older), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n"
		 "{\"protocol\":%d,\"nodes\":[]}", 25 + (DT_PROTOCOL_VERSION + 1 >= 10),
		 DT_PROTOCOL_VERSION + 1);
	canned_start(&s, steps, 1);
	dt_httpc_init(&c, "127.0.0.1", s.port, &key);
	assert_int_equal(dt_httpc_request(&c, "GET", "/v1/nodes", NULL, &reply, &err),
			 DT_HTTP_PROTOCOL_MISMATCH);
	assert_non_null(strstr(dt_httpc_reply_error(reply, DT_HTTP_PROTOCOL_MISMATCH),
			       "speaks dtctl protocol"));
	assert_int_equal(json_integer_value(json_object_get(reply, "peer_protocol")),
			 DT_PROTOCOL_VERSION + 1);
	assert_null(json_object_get(reply, "nodes"));
	json_decref(reply);
	/* and the request said which version it is */
	assert_non_null(strstr(s.last.buf, "\r\n" DT_HDR_PROTOCOL ": "));
	dt_httpc_release(&c);
	canned_stop(&s);
	assert_int_equal(dt_reply_protocol("{\"protocol\":12,", 15), 12);
	assert_int_equal(dt_reply_protocol("{\"protocol\":x", 14), -1);
	assert_int_equal(dt_reply_protocol("{\"n\":1}", 7), -1);
	strbuf_release(&err);
	strbuf_release(&out);
}

static void test_refused(void **state)
{
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT, want = STRBUF_INIT;
	struct dt_httpc c;
	int port = 0, fd = listen_on(AF_INET, &port);

	assert_true(fd >= 0);
	close(fd);    /* nothing listens there now */
	dt_httpc_init(&c, "127.0.0.1", port, NULL);
	assert_int_equal(dt_httpc_request_raw(&c, "GET", "/x", NULL, 0, &out, &err), -1);
	strbuf_addf(&want, "cannot reach 127.0.0.1:%d: Connection refused", port);
	assert_string_equal(err.buf, want.buf);
	dt_httpc_release(&c);

	strbuf_reset(&err);
	dt_httpc_init(&c, "no-such-host.invalid", 80, NULL);
	assert_int_equal(dt_httpc_request_raw(&c, "GET", "/x", NULL, 0, &out, &err), -1);
	assert_true(starts_with(err.buf, "cannot reach no-such-host.invalid:80: cannot resolve"));
	dt_httpc_release(&c);
	strbuf_release(&err);
	strbuf_release(&out);
	strbuf_release(&want);
}

static void test_timeout(void **state)
{
	const struct step steps[] = { { NULL, 0, 1, 5000, 0, NULL, SIGNED } };
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT, want = STRBUF_INIT;
	struct canned s;
	struct dt_httpc c;
	long long t0, dt;

	canned_start(&s, steps, 1);
	dt_httpc_init(&c, "127.0.0.1", s.port, NULL);
	c.timeout_ms = 300;
	t0 = now_ms();
	assert_int_equal(dt_httpc_request_raw(&c, "GET", "/slow", NULL, 0, &out, &err), -1);
	dt = now_ms() - t0;
	strbuf_addf(&want, "no answer from 127.0.0.1:%d within 300 ms", s.port);
	assert_string_equal(err.buf, want.buf);
	if (dt < 280 || dt > 2000)
		fail_msg("timed out after %lld ms, expected about 300", dt);
	assert_false(c.connected);
	dt_httpc_release(&c);    /* the server sees the close and ends */
	assert_int_equal(canned_stop(&s), 0);
	strbuf_release(&err);
	strbuf_release(&out);
	strbuf_release(&want);
}

static void test_ipv6_literal(void **state)
{
	const struct step steps[] = { { ok_body, 0, 1, 0, 0, NULL, SIGNED } };
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT, host = STRBUF_INIT;
	struct canned s;
	struct dt_httpc c;

	if (canned_start_af(&s, steps, 1, AF_INET6) < 0)
		skip();
	dt_httpc_init(&c, "::1", s.port, NULL);
	assert_int_equal(dt_httpc_request_raw(&c, "GET", "/6", NULL, 0, &out, &err), 200);
	strbuf_addf(&host, "\r\nHost: [::1]:%d\r\n", s.port);
	assert_non_null(strstr(s.last.buf, host.buf));
	dt_httpc_release(&c);
	assert_int_equal(canned_stop(&s), 0);
	strbuf_release(&err);
	strbuf_release(&out);
	strbuf_release(&host);
}

/*
 * Robustness: valid replies with random bytes changed, cut, or inserted, and
 * plain random bytes.  Each must end in a status (100..599) or -1 with a
 * message, within the timeout; ASan watches the rest.
 */
static void test_random_replies(void **state)
{
	static const char *const seeds[] = {
		"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: keep-alive\r\n\r\n{\"n\": 1234}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n1;x\r\nd\r\n0\r\nT: 1\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.0 500 Oops\r\n\r\nbody to eof",
	};
	enum { ROUNDS = 400 };
	struct step *steps = calloc(ROUNDS, sizeof(*steps));
	char **bufs = calloc(ROUNDS, sizeof(*bufs));
	struct strbuf err = STRBUF_INIT, out = STRBUF_INIT;
	unsigned seed = 12345;
	struct canned s;
	struct dt_httpc c;
	int code, ok = 0;

	assert_non_null(steps);
	assert_non_null(bufs);
	srand(seed);
	for (int i = 0; i < ROUNDS; i++) {
		const char *src = seeds[i % 4];
		size_t len = strlen(src), n;
		char *b = malloc(len + 64);

		assert_non_null(b);
		memcpy(b, src, len);
		if (i % 5 == 4) {                 /* all random */
			len = (size_t)(rand() % 60);
			for (size_t k = 0; k < len; k++)
				b[k] = (char)(rand() % 256);
		} else {
			n = 1 + (size_t)(rand() % 4);
			while (n--) {
				size_t at = (size_t)rand() % len;

				switch (rand() % 3) {
				case 0: b[at] = (char)(rand() % 256); break;
				case 1: len = at + 1; break;
				default:
					memmove(b + at + 1, b + at, len - at);
					b[at] = "0123456789\r\n :;-fF"[rand() % 19];
					len++;
					if (len + 1 >= strlen(src) + 60)
						n = 0;
				}
			}
		}
		bufs[i] = b;
		steps[i].reply = b;
		steps[i].len = len ? len : 1;
		if (!len)
			b[0] = 'x';
		steps[i].close = 1;
	}
	canned_start(&s, steps, ROUNDS);
	dt_httpc_init(&c, "127.0.0.1", s.port, NULL);
	c.timeout_ms = 2000;
	for (int i = 0; i < ROUNDS; i++) {
		strbuf_reset(&err);
		strbuf_reset(&out);
		code = dt_httpc_request_raw(&c, "GET", "/r", NULL, 0, &out, &err);
		if (code == -1 ? !err.len || out.len : code < 100 || code > 599)
			fail_msg("round %d: got %d with '%s'", i, code, err.buf);
		ok += code > 0;
	}
	dt_httpc_release(&c);
	canned_stop(&s);
	assert_true(ok > 10);            /* some mutations still parse */
	assert_true(ok < ROUNDS - 50);   /* and many do not */
	for (int i = 0; i < ROUNDS; i++)
		free(bufs[i]);
	free(bufs);
	free(steps);
	strbuf_release(&err);
	strbuf_release(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_signed_round_trip),
		cmocka_unit_test(test_request_format),
		cmocka_unit_test(test_reply_signature),
		cmocka_unit_test(test_connection_close),
		cmocka_unit_test(test_idle_close_retry),
		cmocka_unit_test(test_idle_closed_before_reuse),
		cmocka_unit_test(test_no_retry),
		cmocka_unit_test(test_chunked),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_statuses),
		cmocka_unit_test(test_protocol_versions),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_ipv6_literal),
		cmocka_unit_test(test_random_replies),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
