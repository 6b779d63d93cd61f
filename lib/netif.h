/*
 * netif.h - which network interface a node reaches a host on.
 *
 * NCCL, gloo and Open MPI each pick a network interface by their own rules
 * (gloo: the address the hostname resolves to, falling back to loopback; NCCL:
 * the first non-loopback, non-docker interface; Open MPI: every interface),
 * and on nodes whose hostnames do not resolve from each other, or with
 * several NICs, they pick wrong and the job hangs or is refused.  dtagent
 * asks the kernel instead: the source address of a route to dtsched is the
 * address the node is reached on, and its interface is the one the job's
 * collectives should use (docs/run.md, "Network interface").
 */
#ifndef DT_NETIF_H
#define DT_NETIF_H

#include <net/if.h>
#include "strbuf.h"

struct dt_netif {
	char name[IF_NAMESIZE + 1];   /* "eth0" */
	char addr[64];                /* "10.88.0.11" */
	char cidr[80];                /* its subnet, "10.88.0.0/24" (Open MPI's if_include form) */
	int loopback;                 /* the route stays on this host (127.0.0.0/8, ::1) */
};

/*
 * The interface and address this node uses to reach host:port (numeric or a
 * name; IPv4 preferred).  No packet is sent: a UDP socket is connected and
 * its local address looked up among the interfaces.  0, or -1 with a
 * message in err (cannot resolve, no route, address on no interface).
 */
int dt_netif_route(const char *host, int port, struct dt_netif *out, struct strbuf *err);

#endif
