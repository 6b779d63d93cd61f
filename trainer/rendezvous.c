/*
 * rendezvous.c - hand a small blob (the NCCL unique id) from rank 0 to every
 * other rank over TCP at MASTER_ADDR:MASTER_PORT, for jobs started by an
 * agent with torchrun-style environment instead of mpirun.
 *
 * Protocol: a peer connects (retrying while rank 0 is not up yet), sends
 * "DTRV" and its rank as 4 big-endian bytes; rank 0 answers with the blob
 * and closes.  Rank 0 returns once world-1 distinct ranks were served.
 */
#include "trainer/comm.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Read or write exactly len bytes within the deadline. */
static int io_full(int fd, void *buf, size_t len, int writing, long long deadline)
{
	char *p = buf;

	while (len) {
		struct pollfd pfd = { fd, writing ? POLLOUT : POLLIN, 0 };
		long long left = deadline - now_ms();
		ssize_t n;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			return -1;
		n = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int serve(int port, int world, const void *blob, size_t len, long long deadline,
		 struct strbuf *err)
{
	struct sockaddr_in6 sa;
	char *served = xcalloc((size_t)world, 1);
	int fd = socket(AF_INET6, SOCK_STREAM, 0), one = 1, zero = 0, left = world - 1, ret = -1;

	if (fd < 0) {
		strbuf_addf(err, "rendezvous: socket: %s", strerror(errno));
		goto out;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	memset(&sa, 0, sizeof(sa));
	sa.sin6_family = AF_INET6;
	sa.sin6_addr = in6addr_any;
	sa.sin6_port = htons((unsigned short)port);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, world)) {
		strbuf_addf(err, "rendezvous: cannot listen on port %d: %s (is MASTER_PORT free?)",
			    port, strerror(errno));
		goto out;
	}
	while (left > 0) {
		struct pollfd pfd = { fd, POLLIN, 0 };
		long long wait = deadline - now_ms();
		unsigned char hello[8];
		int peer, rank;

		if (wait <= 0 || poll(&pfd, 1, (int)wait) <= 0) {
			strbuf_addf(err, "rendezvous: %d of %d ranks did not connect to port %d in time",
				    left, world - 1, port);
			goto out;
		}
		peer = accept(fd, NULL, NULL);
		if (peer < 0)
			continue;
		if (!io_full(peer, hello, 8, 0, now_ms() + 10000) && !memcmp(hello, "DTRV", 4)) {
			rank = hello[4] << 24 | hello[5] << 16 | hello[6] << 8 | hello[7];
			if (rank > 0 && rank < world && !io_full(peer, (void *)blob, len, 1,
								    now_ms() + 10000) && !served[rank]) {
				served[rank] = 1;
				left--;
			}
		}
		close(peer);
	}
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	free(served);
	return ret;
}

static int fetch(const char *addr, int port, int rank, void *blob, size_t len, long long deadline,
		 struct strbuf *err)
{
	char service[16];
	struct addrinfo hints, *res = NULL;
	int gai = 0;

	snprintf(service, sizeof(service), "%d", port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	while (now_ms() < deadline) {
		struct timespec nap = { 0, 200 * 1000000 };

		gai = getaddrinfo(addr, service, &hints, &res);
		if (!gai) {
			for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
				int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
				unsigned char hello[8] = { 'D', 'T', 'R', 'V', (unsigned char)(rank >> 24),
							   (unsigned char)(rank >> 16),
							   (unsigned char)(rank >> 8), (unsigned char)rank };

				if (fd < 0)
					continue;
				if (!connect(fd, ai->ai_addr, ai->ai_addrlen) &&
				    !io_full(fd, hello, 8, 1, deadline) &&
				    !io_full(fd, blob, len, 0, deadline)) {
					close(fd);
					freeaddrinfo(res);
					return 0;
				}
				close(fd);
			}
			freeaddrinfo(res);
			res = NULL;
		}
		nanosleep(&nap, NULL);
	}
	strbuf_addf(err, "rendezvous: rank 0 at %s:%d did not answer in time%s%s", addr, port,
		    gai ? ": " : "", gai ? gai_strerror(gai) : "");
	return -1;
}

int rendezvous_bcast(const char *addr, int port, int rank, int world, void *blob, size_t len,
		     int timeout_ms, struct strbuf *err)
{
	long long deadline = now_ms() + timeout_ms;

	if (world <= 1)
		return 0;
	return rank == 0 ? serve(port, world, blob, len, deadline, err) :
			   fetch(addr, port, rank, blob, len, deadline, err);
}
