/*
 * probe.c - can this node open a TCP connection to each of its peers?  The
 * connectivity check dtsched runs before a job on 2 nodes or more starts
 * (scheduler/probe.c): every chosen node connects to every other's agent port,
 * all at once, each within the timeout.  Only the TCP handshake: nothing is
 * sent, and the peer's agent sees a connection closed before any request.
 *
 * It runs off the agent's HTTP thread (dt_http_offload), and everything in
 * it is bounded by the request's timeout, name lookups too (issue 26, B4):
 * a numeric address is taken as it is; names are looked up all at once with
 * getaddrinfo_a() and given what is left of the timeout.  A lookup that is
 * not over by then cannot be freed (glibc's helper thread still writes to
 * it): it is kept in `pending` and reaped by a later probe, and while
 * PROBE_MAX_PENDING lookups hang there, new names fail at once instead of
 * piling up more.
 */
#include "probe.h"
#include "json.h"
#include "strbuf.h"
#include "log.h"
#include "usage.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
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
	struct lookup *lk;        /* a name being looked up, or NULL */
};

/* one getaddrinfo_a() request and what it points to */
struct lookup {
	struct gaicb cb;
	struct addrinfo hints;
	char *name, svc[16];
};

/* lookups abandoned while glibc still works on them (see the top) */
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lookup *pending[PROBE_MAX_PENDING];
static size_t nr_pending;

static void lookup_free(struct lookup *lk)
{
	if (lk->cb.ar_result)
		freeaddrinfo(lk->cb.ar_result);
	free(lk->name);
	free(lk);
}

/* free the abandoned lookups that have ended since; how many still run */
static size_t reap_pending(void)
{
	size_t k = 0, left;

	pthread_mutex_lock(&pending_lock);
	for (size_t i = 0; i < nr_pending; i++) {
		if (gai_error(&pending[i]->cb) == EAI_INPROGRESS)
			pending[k++] = pending[i];
		else
			lookup_free(pending[i]);
	}
	nr_pending = left = k;
	pthread_mutex_unlock(&pending_lock);
	return left;
}

static void done(struct conn *c, int ok, const char *error)
{
	double ms = (double)(dt_now_us() - c->t0_us) / 1000.0;

	c->result = ok ? json_pack("{s:s,s:b,s:f}", "node", c->name, "ok", 1, "ms", ms) :
		json_pack("{s:s,s:b,s:f,s:s}", "node", c->name, "ok", 0, "ms", ms, "error", error);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

/* a non-blocking connect to ai; c->result set when it ended at once */
static void connect_to(struct conn *c, const struct addrinfo *ai)
{
	int e;

	c->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	e = c->fd < 0 ? errno : connect(c->fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
	if (e != EINPROGRESS)
		done(c, !e, e ? strerror(e) : NULL);   /* at once: connected, or refused */
}

/*
 * A numeric address: connect now.  A name: a lookup for resolve_names()
 * in c->lk, or a failure when too many earlier lookups still hang.
 */
static void start(struct conn *c, const char *address, int port, size_t *hanging)
{
	struct addrinfo hints, *ai = NULL;
	char svc[16];
	int e;

	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | AI_NUMERICHOST;
	snprintf(svc, sizeof(svc), "%d", port);
	c->fd = -1;
	c->t0_us = dt_now_us();
	if ((e = getaddrinfo(address, svc, &hints, &ai)) == 0) {
		connect_to(c, ai);
		freeaddrinfo(ai);
		return;
	}
	if (e != EAI_NONAME || *hanging >= PROBE_MAX_PENDING) {
		char why[320];

		if (e == EAI_NONAME)
			snprintf(why, sizeof(why), "cannot resolve '%.200s': %d earlier name lookups "
				 "still hang on this node", address, PROBE_MAX_PENDING);
		else
			snprintf(why, sizeof(why), "cannot resolve '%.200s': %s", address,
				 gai_strerror(e));
		done(c, 0, why);
		return;
	}
	c->lk = xcalloc(1, sizeof(*c->lk));
	c->lk->name = xstrdup(address);
	memcpy(c->lk->svc, svc, sizeof(svc));
	c->lk->hints.ai_socktype = SOCK_STREAM;
	c->lk->hints.ai_flags = AI_NUMERICSERV;
	c->lk->cb.ar_name = c->lk->name;
	c->lk->cb.ar_service = c->lk->svc;
	c->lk->cb.ar_request = &c->lk->hints;
	(*hanging)++;
}

/*
 * Look up every name in c[] at once, until deadline at most; connect to
 * those found.  A lookup still running at the deadline is abandoned to
 * `pending` (the top of the file) and its target fails.
 */
static void resolve_names(struct conn *c, size_t n, long long deadline, int timeout_ms)
{
	struct gaicb **list = xcalloc(n ? n : 1, sizeof(*list));
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (c[i].lk)
			list[k++] = &c[i].lk->cb;
	if (k && getaddrinfo_a(GAI_NOWAIT, list, (int)k, NULL) != 0) {
		for (size_t i = 0; i < n; i++)
			if (c[i].lk) {
				done(&c[i], 0, "cannot start a name lookup");
				lookup_free(c[i].lk);
				c[i].lk = NULL;
			}
		k = 0;
	}
	for (;;) {
		long long wait = deadline - dt_mono_ms();
		struct timespec ts;
		int busy = 0;

		/* gai_suspend() returns at once while any listed one is over */
		for (size_t i = 0; i < k; i++) {
			if (list[i] && gai_error(list[i]) != EAI_INPROGRESS)
				list[i] = NULL;
			busy |= list[i] != NULL;
		}
		if (!busy || wait <= 0)
			break;
		ts.tv_sec = (time_t)(wait / 1000);
		ts.tv_nsec = (long)(wait % 1000) * 1000000L;
		gai_suspend((const struct gaicb *const *)list, (int)k, &ts);
	}
	for (size_t i = 0; i < n; i++) {
		struct lookup *lk = c[i].lk;
		char why[320];
		int e;

		if (!lk)
			continue;
		c[i].lk = NULL;
		gai_cancel(&lk->cb);
		e = gai_error(&lk->cb);
		if (e == 0 && lk->cb.ar_result) {
			connect_to(&c[i], lk->cb.ar_result);
			lookup_free(lk);
			continue;
		}
		if (e == EAI_INPROGRESS || e == EAI_CANCELED)
			snprintf(why, sizeof(why), "cannot resolve '%.200s' within %d ms", lk->name,
				 timeout_ms);
		else
			snprintf(why, sizeof(why), "cannot resolve '%.200s': %s", lk->name,
				 gai_strerror(e));
		done(&c[i], 0, why);
		if (e == EAI_INPROGRESS) {
			pthread_mutex_lock(&pending_lock);
			if (nr_pending < PROBE_MAX_PENDING)
				pending[nr_pending++] = lk;   /* glibc still writes to it */
			pthread_mutex_unlock(&pending_lock);
		} else {
			lookup_free(lk);
		}
	}
	free(list);
}

json_t *probe_connect(const json_t *targets, int timeout_ms, struct strbuf *err)
{
	size_t n = json_array_size(targets), i, left = 0, hanging;
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
	hanging = reap_pending();
	json_array_foreach(targets, i, t) {
		c[i].name = json_get_str(t, "node", "");
		start(&c[i], json_get_str(t, "address", ""), (int)json_get_int(t, "port", 0),
		      &hanging);
	}
	resolve_names(c, n, deadline, timeout_ms);
	for (i = 0; i < n; i++)
		left += !c[i].result;
	while (left) {
		long long wait = deadline - dt_mono_ms();
		size_t m = 0;

		/* past the deadline (slow lookups): one look at what connected meanwhile */
		if (wait < 0)
			wait = 0;
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
		if (!wait)
			break;
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
