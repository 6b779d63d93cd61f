/*
 * rendezvous.c - hand a small blob (the NCCL unique id) from rank 0 to every
 * other rank over TCP at MASTER_ADDR:MASTER_PORT, for jobs started by an
 * agent with torchrun-style environment instead of mpirun.
 *
 * Protocol (version 2):
 *   peer -> rank 0   "DTRV", version (1 byte), job id length (1 byte), rank
 *                    (4 bytes, big-endian), the job id (DT_JOB_ID)
 *   rank 0 -> peer   "DTOK" and the blob; or, for a peer of another job or
 *                    version, "DTNO", its job id length and job id, and close
 * A peer connects (retrying while rank 0 is not up yet, or while a stale
 * server of another job holds the port); rank 0 returns once world-1
 * distinct ranks of its own job were served.  Everything, connect included,
 * ends at the one deadline.
 *
 * Rank 0 listens dual-stack ([::] with IPV6_V6ONLY off, so IPv4 peers reach
 * it too) and falls back to IPv4 alone where the kernel has no IPv6.
 */
#include "trainer/comm.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RV_VERSION 2
#define RV_HEADER 10            /* magic, version, job id length, rank */
#define RV_PEER_MS 10000        /* one peer's exchange, within the deadline */

static long long min_ll(long long a, long long b)
{
	return a < b ? a : b;
}

/* Read or write exactly len bytes within the deadline (fd may be non-blocking). */
static int io_full(int fd, void *buf, size_t len, int writing, long long deadline)
{
	char *p = buf;

	while (len) {
		struct pollfd pfd = { fd, writing ? POLLOUT : POLLIN, 0 };
		long long left = deadline - dt_mono_ms();
		ssize_t n;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			return -1;
		n = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
		if (n <= 0) {
			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Listen on every address of `port`: IPv6 with IPv4-mapped addresses where
 * the kernel has IPv6, IPv4 where it has not (booted with ipv6.disable=1:
 * socket(AF_INET6) fails with EAFNOSUPPORT).  The fd, or -1 with err.
 */
static int listen_any(int port, int backlog, struct strbuf *err)
{
	struct sockaddr_in6 sa6;
	struct sockaddr_in sa4;
	int one = 1, zero = 0, fd = socket(AF_INET6, SOCK_STREAM, 0);

	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		memset(&sa6, 0, sizeof(sa6));
		sa6.sin6_family = AF_INET6;
		sa6.sin6_addr = in6addr_any;
		sa6.sin6_port = htons((unsigned short)port);
		if (!bind(fd, (struct sockaddr *)&sa6, sizeof(sa6)) && !listen(fd, backlog))
			return fd;
		/* IPv6 present but unusable (no address): IPv4 below may still work */
		if (errno != EADDRNOTAVAIL && errno != EAFNOSUPPORT)
			goto fail;
		close(fd);
	} else if (errno != EAFNOSUPPORT) {
		goto fail;
	}
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		goto fail;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&sa4, 0, sizeof(sa4));
	sa4.sin_family = AF_INET;
	sa4.sin_addr.s_addr = htonl(INADDR_ANY);
	sa4.sin_port = htons((unsigned short)port);
	if (!bind(fd, (struct sockaddr *)&sa4, sizeof(sa4)) && !listen(fd, backlog))
		return fd;
fail:
	strbuf_addf(err, "rendezvous: cannot listen on port %d: %s (is MASTER_PORT free?)", port,
		    strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

/* "ranks 2, 5 and 7" of those not served; at most 16 named. */
static void add_missing(struct strbuf *sb, const char *served, int world)
{
	int named = 0, missing = 0;

	for (int r = 1; r < world; r++)
		missing += !served[r];
	strbuf_addstr(sb, missing == 1 ? "rank" : "ranks");
	for (int r = 1; r < world; r++) {
		if (served[r])
			continue;
		if (named == 16) {
			strbuf_addf(sb, " and %d more", missing - named);
			return;
		}
		strbuf_addf(sb, "%s %d", !named ? "" : named == missing - 1 ? " and" : ",", r);
		named++;
	}
}

/* One peer: its hello, then the blob or a refusal.  1 if a new rank was served. */
static int serve_peer(int peer, const char *job, int world, char *served, const void *blob,
		      size_t len, long long deadline, int *refused)
{
	unsigned char hello[RV_HEADER];
	char peer_job[256];
	int rank;

	deadline = min_ll(deadline, dt_mono_ms() + RV_PEER_MS);
	if (io_full(peer, hello, RV_HEADER, 0, deadline) || memcmp(hello, "DTRV", 4))
		return 0;
	rank = hello[6] << 24 | hello[7] << 16 | hello[8] << 8 | hello[9];
	if (io_full(peer, peer_job, hello[5], 0, deadline))
		return 0;
	peer_job[hello[5]] = '\0';
	if (hello[4] != RV_VERSION || strcmp(peer_job, job)) {
		/* tell it who we are, so that its error can name the other job */
		struct strbuf reply = STRBUF_INIT;

		strbuf_add(&reply, "DTNO", 4);
		strbuf_addch(&reply, (char)strlen(job));
		strbuf_addstr(&reply, job);
		io_full(peer, reply.buf, reply.len, 1, deadline);
		strbuf_release(&reply);
		(*refused)++;
		return 0;
	}
	if (rank <= 0 || rank >= world || io_full(peer, "DTOK", 4, 1, deadline) ||
	    io_full(peer, (void *)blob, len, 1, deadline) || served[rank])
		return 0;
	served[rank] = 1;
	return 1;
}

static int serve(int port, const char *job, int world, const void *blob, size_t len,
		 long long deadline, int timeout_ms, struct strbuf *err)
{
	char *served = xcalloc((size_t)world, 1);
	int fd = listen_any(port, world, err), left = world - 1, refused = 0, ret = -1;

	if (fd < 0)
		goto out;
	while (left > 0) {
		struct pollfd pfd = { fd, POLLIN, 0 };
		long long wait = deadline - dt_mono_ms();
		int peer;

		if (wait <= 0 || poll(&pfd, 1, (int)wait) <= 0) {
			strbuf_addstr(err, "rendezvous: ");
			add_missing(err, served, world);
			strbuf_addf(err, " of %d did not connect to rank 0 on port %d within %.3g s",
				    world, port, timeout_ms / 1000.0);
			if (refused)
				strbuf_addf(err, " (%d connection%s of another job or dttrain version "
					    "refused)", refused, refused == 1 ? "" : "s");
			strbuf_addstr(err, "; check that those ranks started and reach MASTER_ADDR");
			goto out;
		}
		peer = accept(fd, NULL, NULL);
		if (peer < 0)
			continue;
		left -= serve_peer(peer, job, world, served, blob, len, deadline, &refused);
		close(peer);
	}
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	free(served);
	return ret;
}

/*
 * connect() that ends at the deadline: a blocking connect to a host that
 * drops SYNs (firewall, full backlog) waits for the kernel's SYN retries,
 * about two minutes, whatever DT_RENDEZVOUS_TIMEOUT says.  Leaves fd
 * non-blocking.  0, or -1 with errno.
 */
static int connect_by(int fd, const struct sockaddr *sa, socklen_t salen, long long deadline)
{
	struct pollfd pfd = { fd, POLLOUT, 0 };
	int soerr = 0;
	socklen_t elen = sizeof(soerr);
	long long left;

	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
		return -1;
	if (!connect(fd, sa, salen))
		return 0;
	if (errno != EINPROGRESS)
		return -1;
	for (;;) {
		int n;

		left = deadline - dt_mono_ms();
		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		n = poll(&pfd, 1, (int)left);
		if (n > 0)
			break;
		if (n < 0 && errno != EINTR)
			return -1;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &elen) < 0)
		return -1;
	errno = soerr;
	return soerr ? -1 : 0;
}

/* One exchange with rank 0 over a connected fd: 1 got the blob, 0 refused, -1 failed. */
static int ask(int fd, const char *job, int rank, void *blob, size_t len, long long deadline,
	       char *other_job)
{
	struct strbuf hello = STRBUF_INIT;
	unsigned char status[5];
	int sent;

	strbuf_add(&hello, "DTRV", 4);
	strbuf_addch(&hello, RV_VERSION);
	strbuf_addch(&hello, (char)strlen(job));
	for (int shift = 24; shift >= 0; shift -= 8)
		strbuf_addch(&hello, (char)(rank >> shift));
	strbuf_addstr(&hello, job);
	sent = io_full(fd, hello.buf, hello.len, 1, deadline);
	strbuf_release(&hello);
	if (sent || io_full(fd, status, 4, 0, deadline))
		return -1;
	if (!memcmp(status, "DTOK", 4))
		return io_full(fd, blob, len, 0, deadline) ? -1 : 1;
	if (memcmp(status, "DTNO", 4) || io_full(fd, status + 4, 1, 0, deadline) ||
	    io_full(fd, other_job, status[4], 0, deadline))
		return -1;
	other_job[status[4]] = '\0';
	return 0;
}

static int fetch(const char *addr, int port, const char *job, int rank, void *blob, size_t len,
		 long long deadline, int timeout_ms, struct strbuf *err)
{
	char service[16], other_job[256];
	struct addrinfo hints, *res = NULL;
	int gai = 0, refused = 0, last_errno = 0;

	snprintf(service, sizeof(service), "%d", port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	while (dt_mono_ms() < deadline) {
		struct timespec nap = { 0, 200 * 1000000 };

		gai = getaddrinfo(addr, service, &hints, &res);
		if (!gai) {
			for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
				/* no IPv6 in this kernel: its addresses fail here, IPv4 ones follow */
				int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol), got = -1;

				if (fd < 0)
					continue;
				if (!connect_by(fd, ai->ai_addr, ai->ai_addrlen, deadline))
					got = ask(fd, job, rank, blob, len, deadline, other_job);
				else
					last_errno = errno;
				close(fd);
				if (got > 0) {
					freeaddrinfo(res);
					return 0;
				}
				refused += !got;
			}
			freeaddrinfo(res);
			res = NULL;
		}
		if (deadline - dt_mono_ms() < 200)
			break;
		nanosleep(&nap, NULL);
	}
	if (refused)
		strbuf_addf(err, "rendezvous: %s:%d is served by job '%s', not this job '%s' (a stale "
			    "dttrain on a reused MASTER_PORT, or another dttrain version); rank %d "
			    "gave up after %.3g s", addr, port, other_job, job, rank,
			    timeout_ms / 1000.0);
	else
		strbuf_addf(err, "rendezvous: rank 0 at %s:%d did not answer rank %d within %.3g s%s%s; "
			    "check that rank 0 started and that MASTER_ADDR reaches it", addr, port,
			    rank, timeout_ms / 1000.0, gai || last_errno ? ": " : "",
			    gai ? gai_strerror(gai) : last_errno ? strerror(last_errno) : "");
	return -1;
}

int rendezvous_bcast(const char *addr, int port, const char *job, int rank, int world, void *blob,
		     size_t len, int timeout_ms, struct strbuf *err)
{
	long long deadline = dt_mono_ms() + timeout_ms;

	if (world <= 1)
		return 0;
	if (!job)
		job = "";
	if (strlen(job) > 255) {
		strbuf_addf(err, "rendezvous: job id '%.32s...' is longer than 255 bytes", job);
		return -1;
	}
	return rank == 0 ? serve(port, job, world, blob, len, deadline, timeout_ms, err) :
			   fetch(addr, port, job, rank, blob, len, deadline, timeout_ms, err);
}
