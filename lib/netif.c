/*
 * netif.c - the interface a node reaches a host on (see netif.h).
 */
#include "netif.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* the local address of a connected UDP socket to host:port */
static int route_source(const char *host, int port, struct sockaddr_storage *src,
			struct strbuf *err)
{
	struct addrinfo hints, *res = NULL, *ai;
	char service[16];
	int rc, ret = -1;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_DGRAM;
	hints.ai_flags = AI_ADDRCONFIG;
	snprintf(service, sizeof(service), "%d", port > 0 ? port : 9);
	rc = getaddrinfo(host, service, &hints, &res);
	if (rc) {
		strbuf_addf(err, "cannot resolve '%s': %s", host, gai_strerror(rc));
		return -1;
	}
	/* IPv4 first: the collectives' interface options are written for it */
	for (int pass = 0; pass < 2 && ret < 0; pass++) {
		for (ai = res; ai && ret < 0; ai = ai->ai_next) {
			socklen_t len = sizeof(*src);
			int fd;

			if ((ai->ai_family == AF_INET) != (pass == 0))
				continue;
			fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
			if (fd < 0)
				continue;
			if (!connect(fd, ai->ai_addr, ai->ai_addrlen) &&
			    !getsockname(fd, (struct sockaddr *)src, &len))
				ret = 0;
			else if (!err->len)
				strbuf_addf(err, "no route to '%s': %s", host, strerror(errno));
			close(fd);
		}
	}
	freeaddrinfo(res);
	if (!ret)
		strbuf_reset(err);
	else if (!err->len)
		strbuf_addf(err, "'%s' has no address to route to", host);
	return ret;
}

static int prefix_len(const unsigned char *mask, size_t n)
{
	int bits = 0;

	for (size_t i = 0; i < n; i++)
		for (int b = 7; b >= 0 && (mask[i] >> b & 1); b--)
			bits++;
	return bits;
}

/* out->cidr from the address and netmask (n bytes each) */
static void subnet(struct dt_netif *out, int family, const unsigned char *a,
		   const unsigned char *m, size_t n)
{
	unsigned char net[16] = { 0 };
	char buf[INET6_ADDRSTRLEN];

	for (size_t i = 0; i < n; i++)
		net[i] = a[i] & m[i];
	if (inet_ntop(family, net, buf, sizeof(buf)))
		snprintf(out->cidr, sizeof(out->cidr), "%s/%d", buf, prefix_len(m, n));
}

int dt_netif_route(const char *host, int port, struct dt_netif *out, struct strbuf *err)
{
	struct sockaddr_storage src;
	struct ifaddrs *ifs = NULL, *i;
	int found = 0;

	memset(out, 0, sizeof(*out));
	memset(&src, 0, sizeof(src));
	if (route_source(host, port, &src, err) < 0)
		return -1;
	if (getifaddrs(&ifs) < 0) {
		strbuf_addf(err, "cannot list the network interfaces: %s", strerror(errno));
		return -1;
	}
	for (i = ifs; i && !found; i = i->ifa_next) {
		const struct sockaddr *a = i->ifa_addr;

		if (!a || a->sa_family != src.ss_family || !i->ifa_netmask)
			continue;
		if (a->sa_family == AF_INET) {
			const struct sockaddr_in *s4 = (const void *)&src, *i4 = (const void *)a;
			const struct sockaddr_in *m4 = (const void *)i->ifa_netmask;

			if (s4->sin_addr.s_addr != i4->sin_addr.s_addr)
				continue;
			inet_ntop(AF_INET, &i4->sin_addr, out->addr, sizeof(out->addr));
			subnet(out, AF_INET, (const void *)&i4->sin_addr,
			       (const void *)&m4->sin_addr, 4);
			out->loopback = (ntohl(i4->sin_addr.s_addr) >> 24) == 127;
		} else if (a->sa_family == AF_INET6) {
			const struct sockaddr_in6 *s6 = (const void *)&src, *i6 = (const void *)a;
			const struct sockaddr_in6 *m6 = (const void *)i->ifa_netmask;

			if (memcmp(&s6->sin6_addr, &i6->sin6_addr, 16))
				continue;
			inet_ntop(AF_INET6, &i6->sin6_addr, out->addr, sizeof(out->addr));
			subnet(out, AF_INET6, (const void *)&i6->sin6_addr,
			       (const void *)&m6->sin6_addr, 16);
			out->loopback = IN6_IS_ADDR_LOOPBACK(&i6->sin6_addr);
		} else {
			continue;
		}
		snprintf(out->name, sizeof(out->name), "%s", i->ifa_name);
		found = 1;
	}
	freeifaddrs(ifs);
	if (!found) {
		char buf[INET6_ADDRSTRLEN] = "?";
		const void *p = src.ss_family == AF_INET ?
			(const void *)&((struct sockaddr_in *)&src)->sin_addr :
			(const void *)&((struct sockaddr_in6 *)&src)->sin6_addr;

		inet_ntop(src.ss_family, p, buf, sizeof(buf));
		strbuf_addf(err, "the route to '%s' leaves from %s, which is on no interface",
			    host, buf);
		return -1;
	}
	return 0;
}
