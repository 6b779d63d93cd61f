/*
 * fuzz_httpc.c - libFuzzer target for the HTTP client's reply parser.
 *
 * dtctl, dtsched and the agents read replies from other machines with
 * lib/httpc.c; a broken or hostile node must not crash them.  The input is
 * fed as the whole reply over a socketpair (then EOF) to a real request on
 * a client that believes it is connected (a thread reads the request, then
 * answers); the client must return a status or -1 with a one-line error,
 * never crash, leak or hang (a 200 ms deadline).  A retry after an empty
 * reply goes to 127.0.0.1:9, refused at once.
 * Built and run by `make fuzz` (mk/fuzz.mk).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "httpc.h"

struct server {
	int fd;
	const uint8_t *data;
	size_t size;
};

/* Read the request (headers and the 2-byte body), then send the reply, then EOF. */
static void *serve(void *arg)
{
	struct server *sv = arg;
	char buf[4096];
	size_t have = 0;

	for (;;) {
		ssize_t r = read(sv->fd, buf + have, sizeof(buf) - 1 - have);
		char *end;

		if (r <= 0)
			break;
		have += (size_t)r;
		buf[have] = '\0';
		end = strstr(buf, "\r\n\r\n");
		if ((end && (size_t)(end + 4 - buf) + 2 <= have) || have == sizeof(buf) - 1)
			break;
	}
	for (const uint8_t *p = sv->data, *e = sv->data + sv->size; p < e;) {
		ssize_t w = write(sv->fd, p, (size_t)(e - p));

		if (w <= 0)
			break;
		p += w;
	}
	shutdown(sv->fd, SHUT_WR);
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct server srv;
	pthread_t t;
	struct dt_auth_key key;
	struct dt_httpc c;
	struct strbuf reply = STRBUF_INIT, err = STRBUF_INIT;
	int sv[2], status;

	if (size > 200000 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return 0;
	memset(&key, 0, sizeof(key));
	key.len = 32;
	memset(key.bytes, 7, key.len);
	srv.fd = sv[1];
	srv.data = data;
	srv.size = size;
	if (pthread_create(&t, NULL, serve, &srv)) {
		close(sv[0]);
		close(sv[1]);
		return 0;
	}
	dt_httpc_init(&c, "127.0.0.1", 9, &key);
	c.timeout_ms = 200;
	c.connected = 1;
	c.fd = sv[0];
	status = dt_httpc_request_raw(&c, "POST", "/v1/fuzz", "{}", 2, &reply, &err);
	if (status < 0 && (!err.len || strchr(err.buf, '\n')))
		abort();   /* an error says what, on one line */
	if (status >= 0 && (status < 100 || status > 999))
		abort();
	dt_httpc_release(&c);    /* closes sv[0] if still open */
	shutdown(sv[1], SHUT_RDWR);
	pthread_join(t, NULL);
	close(sv[1]);
	strbuf_release(&reply);
	strbuf_release(&err);
	return 0;
}
