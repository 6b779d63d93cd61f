/*
 * report.c - a task's reports to its agent on a Unix datagram socket with
 * the kernel's credentials (see report.h).
 */
#include "report.h"
#include "usage.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

void report_socket_name(struct strbuf *name, const char *home)
{
	/* FNV-1a: a short name per home and user; nothing relies on it being
	 * secret or collision-free (a squatter on the name only loses reports,
	 * and the agent that cannot bind it says so) */
	uint64_t h = 1469598103934665603ULL;
	uid_t uid = geteuid();

	for (const unsigned char *p = (const unsigned char *)home; *p; p++)
		h = (h ^ *p) * 1099511628211ULL;
	for (size_t i = 0; i < sizeof(uid); i++)
		h = (h ^ ((uid >> (8 * i)) & 0xff)) * 1099511628211ULL;
	strbuf_reset(name);
	strbuf_addf(name, "@dtagent-%016llx", (unsigned long long)h);
}

/* name -> address; its length in *len, -1 when it does not fit */
static int sockaddr_of(const char *name, struct sockaddr_un *sa, socklen_t *len)
{
	size_t n = strlen(name);

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (!n || n >= sizeof(sa->sun_path))
		return -1;
	memcpy(sa->sun_path, name, n);
	if (name[0] == '@')
		sa->sun_path[0] = '\0';   /* abstract: not a file anyone can replace */
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	return 0;
}

int report_listen(const char *name, struct strbuf *err)
{
	struct sockaddr_un sa;
	socklen_t len;
	int fd, one = 1, size = 1 << 20;

	if (sockaddr_of(name, &sa, &len) < 0) {
		strbuf_addf(err, "report socket name '%s' too long", name);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, len) < 0) {
		strbuf_addf(err, "cannot bind the report socket '%s': %s%s", name, strerror(errno),
			    errno == EADDRINUSE ? " (another agent of this home, or a squatter)" : "");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	/* a burst of rank ends (a 1000-rank job on one node) fits the queue */
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
	return fd;
}

int report_recv(int fd, struct strbuf *body, struct report_from *from)
{
	char buf[REPORT_MAX + 1];
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(struct ucred))];
	} ctl;
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr m;
	struct cmsghdr *c;
	ssize_t n;

	for (;;) {
		memset(&m, 0, sizeof(m));
		memset(from, 0, sizeof(*from));
		m.msg_name = &from->addr;
		m.msg_namelen = sizeof(from->addr);
		m.msg_iov = &iov;
		m.msg_iovlen = 1;
		m.msg_control = &ctl;
		m.msg_controllen = sizeof(ctl);
		n = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
		from->uid = (uid_t)-1;
		/* an unbound sender has no address to answer to */
		from->addrlen = m.msg_namelen > offsetof(struct sockaddr_un, sun_path) ?
			m.msg_namelen : 0;
		for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
			    c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
				struct ucred cr;

				memcpy(&cr, CMSG_DATA(c), sizeof(cr));
				from->pid = cr.pid;
				from->uid = cr.uid;
			} else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				/* fds nobody asked for: close them */
				size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

				for (size_t i = 0; i < k; i++) {
					int f;

					memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(f));
					close(f);
				}
			}
		}
		/* too long (truncated) or without credentials: not a report */
		if ((m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (size_t)n > REPORT_MAX || !from->pid)
			continue;
		strbuf_reset(body);
		strbuf_add(body, buf, (size_t)n);
		return 1;
	}
}

void report_answer(int fd, const struct report_from *from, const char *text)
{
	if (from->addrlen)   /* never blocks the agent: a full queue loses the answer */
		sendto(fd, text, strlen(text), MSG_DONTWAIT, (const struct sockaddr *)&from->addr,
		       from->addrlen);
}

int report_send(const char *name, const char *body, size_t len, struct strbuf *ack,
		struct strbuf *err)
{
	struct sockaddr_un sa;
	socklen_t slen;
	struct timeval tv = { 2, 0 };
	sa_family_t fam = AF_UNIX;
	int fd, rc = -1;

	if (len > REPORT_MAX || sockaddr_of(name, &sa, &slen) < 0) {
		strbuf_addf(err, "report too long or bad socket name '%s'", name);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		strbuf_addf(err, "socket: %s", strerror(errno));
		return -1;
	}
	/* a full queue (the agent busy) blocks; never for long */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	/* an address of our own (abstract, the kernel picks it) for the answer */
	if (ack && bind(fd, (struct sockaddr *)&fam, sizeof(fam)) < 0)
		ack = NULL;
	if (sendto(fd, body, len, 0, (struct sockaddr *)&sa, slen) == (ssize_t)len)
		rc = 0;
	else
		strbuf_addf(err, "cannot send to the agent's socket '%s': %s", name, strerror(errno));
	if (!rc && ack) {
		struct pollfd p = { fd, POLLIN, 0 };
		char buf[256];
		ssize_t n;

		strbuf_reset(ack);
		if (poll(&p, 1, REPORT_ACK_MS) > 0 && (n = recv(fd, buf, sizeof(buf), 0)) > 0)
			strbuf_add(ack, buf, (size_t)n);
	}
	close(fd);
	return rc;
}
