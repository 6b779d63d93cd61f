/*
 * probe.c - can this node open a TCP connection to each of its peers?  The
 * connectivity check dtsched runs before a job on 2 nodes or more starts
 * (scheduler/probe.c): every chosen node connects to every other's agent port,
 * all at once, each within the timeout.  Only the TCP handshake: nothing is
 * sent, and the peer's agent sees a connection closed before any request.
 */
#include "probe.h"
#include "json.h"
#include "strbuf.h"
#include "log.h"
#include "usage.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct conn {
	const char *name;
	int fd;
	long long t0_us;
	json_t *result;
};

static void done(struct conn *c, int ok, const char *error)
{
	double ms = (double)(dt_now_us() - c->t0_us) / 1000.0;

	c->result = ok ? json_pack("{s:s,s:b,s:f}", "node", c->name, "ok", 1, "ms", ms) :
		json_pack("{s:s,s:b,s:f,s:s}", "node", c->name, "ok", 0, "ms", ms, "error", error);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

/* start a non-blocking connect to address:port; c->result set when it ended at once */
static void start(struct conn *c, const char *address, int port)
{
	struct addrinfo hints, *ai = NULL;
	char svc[16];
	int e;

	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	snprintf(svc, sizeof(svc), "%d", port);
	c->fd = -1;
	c->t0_us = dt_now_us();
	if ((e = getaddrinfo(address, svc, &hints, &ai)) != 0) {
		char why[160];

		snprintf(why, sizeof(why), "cannot resolve '%s': %s", address, gai_strerror(e));
		done(c, 0, why);
		return;
	}
	c->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	e = c->fd < 0 ? errno : connect(c->fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
	if (e != EINPROGRESS)
		done(c, !e, e ? strerror(e) : NULL);   /* at once: connected, or refused */
	freeaddrinfo(ai);
}

json_t *probe_connect(const json_t *targets, int timeout_ms, struct strbuf *err)
{
	size_t n = json_array_size(targets), i, left = 0;
	struct conn *c;
	struct pollfd *pfd;
	long long deadline = dt_mono_ms() + timeout_ms;
	json_t *out, *t;

	if (!json_is_array(targets) || n > PROBE_MAX_TARGETS) {
		strbuf_addf(err, "'targets' must be an array of at most %d {node, address, port}",
			    PROBE_MAX_TARGETS);
		return NULL;
	}
	json_array_foreach(targets, i, t) {
		long long port = json_get_int(t, "port", 0);

		if (!json_get_str(t, "node", NULL) || !json_get_str(t, "address", NULL) ||
		    port < 1 || port > 65535) {
			strbuf_addf(err, "targets[%zu]: expected {node, address, port (1-65535)}", i);
			return NULL;
		}
	}
	c = xcalloc(n ? n : 1, sizeof(*c));
	pfd = xcalloc(n ? n : 1, sizeof(*pfd));
	json_array_foreach(targets, i, t) {
		c[i].name = json_get_str(t, "node", "");
		start(&c[i], json_get_str(t, "address", ""), (int)json_get_int(t, "port", 0));
		left += !c[i].result;
	}
	while (left) {
		long long wait = deadline - dt_mono_ms();
		size_t m = 0;

		if (wait <= 0)
			break;
		for (i = 0; i < n; i++)
			if (!c[i].result) {
				pfd[m].fd = c[i].fd;
				pfd[m].events = POLLOUT;
				pfd[m++].revents = 0;
			}
		if (poll(pfd, m, (int)wait) < 0 && errno != EINTR)
			break;
		m = 0;
		for (i = 0; i < n; i++) {
			int soerr = 0;
			socklen_t len = sizeof(soerr);

			if (c[i].result)
				continue;
			if (!pfd[m++].revents)
				continue;
			if (getsockopt(c[i].fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
				soerr = errno;
			done(&c[i], !soerr, soerr ? strerror(soerr) : NULL);
			left--;
		}
	}
	out = json_array();
	for (i = 0; i < n; i++) {
		if (!c[i].result) {
			char why[64];

			snprintf(why, sizeof(why), "no answer within %d ms", timeout_ms);
			done(&c[i], 0, why);
		}
		json_array_append_new(out, c[i].result);
	}
	free(c);
	free(pfd);
	return out;
}
