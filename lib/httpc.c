/*
 * httpc.c - signed HTTP/1.1 requests over a kept-alive TCP connection (see
 * httpc.h).
 *
 * Why no libcurl: it was the only reason every dtctl, dtagent and dtsched
 * process loaded 33 shared libraries (its TLS, HTTP/2, Kerberos, LDAP, ...
 * stacks), about 7 ms of exec time per process, paid by every `dtctl run`.
 * The client only ever speaks plain HTTP/1.1 to our own servers
 * (lib/httpd.c): no TLS, proxies, redirects or compression, so the subset
 * needed is small and is all here.
 *
 * One request: resolve the host (once per client; the address that answered
 * is remembered) -> non-blocking connect within connect_timeout_ms -> send
 * the head and the body -> read the status line and headers (HEAD_MAX at
 * most) -> the body by Content-Length, chunked, or up to EOF (BODY_MAX at
 * most).  Every wait is a poll() bounded by the request's deadline
 * (timeout_ms from the start); sends use MSG_NOSIGNAL, so a peer that went
 * away is an error, not a SIGPIPE.
 *
 * Keep-alive: the connection stays open for the next request unless the
 * reply said "Connection: close", was read up to EOF, or anything went wrong.
 * A server may close an idle connection just as we reuse it: when sending on
 * a reused connection fails, or it ends (EOF, reset) before a single byte of
 * reply, the same signed request is sent once more on a fresh connection.
 * Never after reply bytes arrived (the request may have run); and since the
 * nonce is the same, a server that did see the first copy refuses the second
 * as a replay instead of running it twice.
 *
 * Parsing is strict: anything malformed is an error naming the peer, and the
 * connection is closed.
 */
#include "httpc.h"
#include "log.h"
#include "json.h"
#include "protocol.h"
#include "usage.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX (64 * 1024)           /* status line + headers (and trailers) */
#define BODY_MAX (64 * 1024 * 1024)    /* refuse absurd replies */
#define RETRY (-2)                     /* reused connection was dead: send again */

/* The state of one request on the connection. */
struct conn_io {
	struct dt_httpc *c;
	struct strbuf *err;
	long long start, deadline;     /* monotonic ms; deadline 0 = none */
	int reused;                    /* the connection served an earlier request */
	size_t got;                    /* reply bytes received */
	char *buf;                     /* HEAD_MAX bytes: unread data is buf[pos..len) */
	size_t pos, len;
	int sys_errno;                 /* of the last failed recv/send */
};

void dt_httpc_init(struct dt_httpc *c, const char *host, int port, const struct dt_auth_key *key)
{
	memset(c, 0, sizeof(*c));
	c->host = xstrdup(host);
	c->port = port;
	if (key)
		c->key = *key;
	c->timeout_ms = 10000;
	c->connect_timeout_ms = 3000;
	c->fd = -1;
	snprintf(c->port_sfx, sizeof(c->port_sfx), ":%d", port);
}

void dt_httpc_init_unix(struct dt_httpc *c, const char *path)
{
	struct sockaddr_un *sa;

	dt_httpc_init(c, path, 0, NULL);
	c->unix_socket = 1;
	c->port_sfx[0] = '\0';
	sa = (struct sockaddr_un *)&c->addr;
	sa->sun_family = AF_UNIX;
	if (strlen(path) < sizeof(sa->sun_path)) {
		memcpy(sa->sun_path, path, strlen(path) + 1);
		c->addrlen = sizeof(*sa);
	}
}

int dt_unix_socket_trusted(const char *path, unsigned uid, struct strbuf *err)
{
	struct strbuf dir = STRBUF_INIT;
	const char *slash = strrchr(path, '/');
	struct stat st;
	int ret = -1;

	strbuf_add(&dir, path, slash && slash > path ? (size_t)(slash - path) : slash ? 1 : 0);
	if (!slash)
		strbuf_addch(&dir, '.');
	if (lstat(dir.buf, &st) < 0)
		strbuf_addf(err, "cannot use the folder '%s' of the socket: %s", dir.buf,
			    strerror(errno));
	else if (!S_ISDIR(st.st_mode) || (st.st_uid != 0 && st.st_uid != uid) ||
		 (st.st_mode & 022))
		strbuf_addf(err, "the folder '%s' of the socket is not owned by root or you, "
			    "or others may write to it (owner uid %u, mode %04o): anyone could "
			    "have made the socket", dir.buf, (unsigned)st.st_uid,
			    (unsigned)(st.st_mode & 07777));
	else if (lstat(path, &st) < 0)
		strbuf_addf(err, "cannot use the socket '%s': %s", path, strerror(errno));
	else if (!S_ISSOCK(st.st_mode) || (st.st_uid != 0 && st.st_uid != uid))
		strbuf_addf(err, "'%s' is not a socket of root or yours", path);
	else
		ret = 0;
	strbuf_release(&dir);
	return ret;
}

static void conn_close(struct dt_httpc *c)
{
	if (c->connected)
		close(c->fd);
	c->connected = 0;
	c->fd = -1;
}

void dt_httpc_init_user(struct dt_httpc *c, const char *host, int port, const char *user,
			const struct dt_userkey *k)
{
	dt_httpc_init(c, host, port, NULL);
	c->user = xstrdup(user);
	c->ukey = *k;
}

void dt_httpc_release(struct dt_httpc *c)
{
	conn_close(c);
	free(c->host);
	free(c->user);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

/*
 * Wait until fd is ready for `events` or `deadline` (0 = none) passes:
 * 1 ready, 0 timed out, -1 poll failed (errno).
 */
static int wait_fd(int fd, short events, long long deadline)
{
	struct pollfd p;
	long long left;
	int r;

	for (;;) {
		int ms = -1;

		if (deadline) {
			left = deadline - dt_mono_ms();
			if (left <= 0)
				return 0;
			ms = left > INT_MAX ? INT_MAX : (int)left;
		}
		p.fd = fd;
		p.events = events;
		p.revents = 0;
		r = poll(&p, 1, ms);
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return -1;
	}
}

static void timed_out(struct conn_io *io)
{
	strbuf_addf(io->err, "no answer from %s%s within %ld ms", io->c->host, io->c->port_sfx,
		    io->c->timeout_ms);
}

static int bad_reply(struct conn_io *io, const char *what)
{
	strbuf_addf(io->err, "bad reply from %s%s: %s", io->c->host, io->c->port_sfx, what);
	return -1;
}

/*
 * One non-blocking connect to sa, waiting until `deadline` (0 = none): the
 * socket, or -1 with *syserr set (ETIMEDOUT when the deadline passed).
 */
static int connect_one(const struct sockaddr *sa, socklen_t len, long long deadline, int *syserr)
{
	int fd, one = 1, soerr = 0, r;
	socklen_t sl = sizeof(soerr);

	fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		*syserr = errno;
		return -1;
	}
	if (sa->sa_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, sa, len) == 0)
		return fd;
	if (errno != EINPROGRESS && errno != EINTR) {
		*syserr = errno;
		close(fd);
		return -1;
	}
	r = wait_fd(fd, POLLOUT, deadline);
	if (r <= 0) {
		*syserr = r ? errno : ETIMEDOUT;
		close(fd);
		return -1;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
		soerr = errno;
	if (soerr) {
		*syserr = soerr;
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * Connect c (every address of the host in turn, or the one that answered
 * before), within connect_timeout_ms and the request's deadline; -1 with a
 * message in io->err.
 */
static int conn_open(struct conn_io *io)
{
	struct dt_httpc *c = io->c;
	struct addrinfo hints, *res = NULL, *ai;
	long long deadline = io->deadline, cdl = 0;
	char portstr[16], name[256];
	const char *host = c->host;
	size_t hl = strlen(host);
	int fd = -1, syserr = 0, g;

	if (c->connect_timeout_ms > 0) {
		cdl = dt_mono_ms() + c->connect_timeout_ms;
		if (!deadline || cdl < deadline)
			deadline = cdl;
	}
	if (c->unix_socket) {
		fd = c->addrlen ? connect_one((const struct sockaddr *)&c->addr, c->addrlen, deadline,
					      &syserr) : -1;
		if (!c->addrlen)
			syserr = ENAMETOOLONG;
	} else if (c->addrlen) {
		fd = connect_one((const struct sockaddr *)&c->addr, c->addrlen, deadline, &syserr);
		if (fd < 0)
			c->addrlen = 0;   /* resolve again next time: the host may have moved */
	} else {
		/* "[::1]" as in a URL: resolve what is inside the brackets */
		if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']' && hl - 2 < sizeof(name)) {
			memcpy(name, host + 1, hl - 2);
			name[hl - 2] = '\0';
			host = name;
		}
		snprintf(portstr, sizeof(portstr), "%d", c->port);
		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		hints.ai_flags = AI_NUMERICSERV;
		g = getaddrinfo(host, portstr, &hints, &res);
		if (g) {
			strbuf_addf(io->err, "cannot reach %s%s: cannot resolve '%s': %s", c->host,
				    c->port_sfx, host, g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
			return -1;
		}
		for (ai = res; ai; ai = ai->ai_next) {
			if (ai->ai_addrlen > sizeof(c->addr))
				continue;
			fd = connect_one(ai->ai_addr, ai->ai_addrlen, deadline, &syserr);
			if (fd >= 0) {
				memcpy(&c->addr, ai->ai_addr, ai->ai_addrlen);
				c->addrlen = ai->ai_addrlen;
				break;
			}
			if (syserr == ETIMEDOUT && deadline && dt_mono_ms() >= deadline)
				break;
		}
		freeaddrinfo(res);
	}
	if (fd < 0) {
		if (syserr == ETIMEDOUT && deadline && dt_mono_ms() >= deadline) {
			if (deadline == cdl)
				strbuf_addf(io->err, "cannot reach %s%s: connection timed out after %ld ms",
					    c->host, c->port_sfx, c->connect_timeout_ms);
			else
				timed_out(io);
		} else {
			strbuf_addf(io->err, "cannot reach %s%s: %s", c->host, c->port_sfx,
				    strerror(syserr ? syserr : EADDRNOTAVAIL));
		}
		return -1;
	}
	c->fd = fd;
	c->connected = 1;
	return 0;
}

/* An idle kept-alive connection that is readable was closed by the server
 * (or is out of step with it). */
static int conn_stale(struct dt_httpc *c)
{
	struct pollfd p = { c->fd, POLLIN, 0 };

	return poll(&p, 1, 0) != 0;
}

/* Send iov[0..n) whole; 0, RETRY (reused connection found dead) or -1. */
static int send_all(struct conn_io *io, struct iovec *iov, int n)
{
	struct msghdr msg;
	ssize_t w;
	int r;

	while (n > 0) {
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = iov;
		msg.msg_iovlen = (size_t)n;
		w = sendmsg(io->c->fd, &msg, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				r = wait_fd(io->c->fd, POLLOUT, io->deadline);
				if (r > 0)
					continue;
				if (!r)
					timed_out(io);
				else
					strbuf_addf(io->err, "cannot wait for %s%s: %s", io->c->host,
						    io->c->port_sfx, strerror(errno));
				return -1;
			}
			if (io->reused)
				return RETRY;
			strbuf_addf(io->err, "lost the connection to %s%s: %s", io->c->host,
				    io->c->port_sfx, strerror(errno));
			return -1;
		}
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/*
 * Read more reply bytes into io->buf (unread bytes moved to its start first):
 * > 0 bytes read, 0 EOF, -1 recv failed (io->sys_errno), -2 timed out or poll
 * failed (message in io->err).  The buffer must not be full.
 */
static ssize_t io_fill(struct conn_io *io)
{
	ssize_t n;
	int r;

	if (io->pos) {
		memmove(io->buf, io->buf + io->pos, io->len - io->pos);
		io->len -= io->pos;
		io->pos = 0;
	}
	for (;;) {
		n = recv(io->c->fd, io->buf + io->len, HEAD_MAX - io->len, 0);
		if (n > 0) {
			io->len += (size_t)n;
			io->got += (size_t)n;
			return n;
		}
		if (!n)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			io->sys_errno = errno;
			return -1;
		}
		r = wait_fd(io->c->fd, POLLIN, io->deadline);
		if (r <= 0) {
			if (r)
				strbuf_addf(io->err, "cannot wait for %s%s: %s", io->c->host,
					    io->c->port_sfx, strerror(errno));
			else
				timed_out(io);
			return -2;
		}
	}
}

/* The message for an io_fill() result n <= 0 in the middle of a reply; -1. */
static int cut_short(struct conn_io *io, ssize_t n)
{
	if (n == -2)
		return -1;
	if (!n)
		strbuf_addf(io->err, "incomplete reply from %s%s: connection closed", io->c->host,
			    io->c->port_sfx);
	else
		strbuf_addf(io->err, "lost the connection to %s%s: %s", io->c->host, io->c->port_sfx,
			    strerror(io->sys_errno));
	return -1;
}

/* Find "\r\n" in buf[from..len); its offset or -1. */
static long find_crlf(const struct conn_io *io, size_t from)
{
	for (size_t i = from; i + 1 < io->len; i++)
		if (io->buf[i] == '\r' && io->buf[i + 1] == '\n')
			return (long)i;
	return -1;
}

/*
 * Read one CRLF-terminated line of the body framing (chunk size, trailer):
 * *line points into io->buf (valid until the next read) and is NUL-free
 * checked by the caller; the line is consumed.  -1 on error.
 */
static int read_line(struct conn_io *io, const char **line, size_t *len)
{
	size_t seen = 0;       /* unread bytes already searched, but the last */
	long e;
	ssize_t n;

	while ((e = find_crlf(io, io->pos + seen)) < 0) {
		if (io->len - io->pos >= HEAD_MAX)
			return bad_reply(io, "line of the chunked body too long");
		seen = io->len > io->pos ? io->len - io->pos - 1 : 0;
		n = io_fill(io);   /* moves the unread bytes to the start */
		if (n <= 0)
			return cut_short(io, n);
	}
	*line = io->buf + io->pos;
	*len = (size_t)e - io->pos;
	io->pos = (size_t)e + 2;
	return 0;
}

/* Move n body bytes into out (checking BODY_MAX); -1 on error. */
static int read_body(struct conn_io *io, struct strbuf *out, size_t base, size_t n)
{
	ssize_t r;

	if (out->len - base + n > BODY_MAX) {
		strbuf_addf(io->err, "reply from %s%s over %d MiB", io->c->host, io->c->port_sfx,
			    BODY_MAX >> 20);
		return -1;
	}
	while (n) {
		size_t k = io->len - io->pos;

		if (!k) {
			r = io_fill(io);
			if (r <= 0)
				return cut_short(io, r);
			continue;
		}
		if (k > n)
			k = n;
		strbuf_add(out, io->buf + io->pos, k);
		io->pos += k;
		n -= k;
	}
	return 0;
}

/* Everything up to EOF into out (a reply without length); -1 on error. */
static int read_to_eof(struct conn_io *io, struct strbuf *out, size_t base)
{
	ssize_t r;

	for (;;) {
		size_t k = io->len - io->pos;

		if (out->len - base + k > BODY_MAX) {
			strbuf_addf(io->err, "reply from %s%s over %d MiB", io->c->host,
				    io->c->port_sfx, BODY_MAX >> 20);
			return -1;
		}
		strbuf_add(out, io->buf + io->pos, k);
		io->pos = io->len = 0;
		r = io_fill(io);
		if (!r)
			return 0;
		if (r < 0)
			return cut_short(io, r);
	}
}

/* A chunked body into out; -1 on error. */
static int read_chunked(struct conn_io *io, struct strbuf *out, size_t base)
{
	const char *line = NULL;
	size_t len = 0, i, size, trailers = 0;

	for (;;) {
		if (read_line(io, &line, &len) < 0)
			return -1;
		size = 0;
		for (i = 0; i < len && hex_value((unsigned char)line[i]) >= 0; i++) {
			if (size > BODY_MAX) {
				strbuf_addf(io->err, "reply from %s%s over %d MiB", io->c->host,
					    io->c->port_sfx, BODY_MAX >> 20);
				return -1;
			}
			size = size * 16 + (size_t)hex_value((unsigned char)line[i]);
		}
		if (!i)
			return bad_reply(io, "bad chunk size");
		while (i < len && (line[i] == ' ' || line[i] == '\t'))
			i++;
		if (i < len && line[i] != ';')
			return bad_reply(io, "bad chunk size");
		if (memchr(line, '\0', len) || memchr(line, '\n', len))
			return bad_reply(io, "bad chunk size");
		if (!size)
			break;
		if (read_body(io, out, base, size) < 0)
			return -1;
		if (read_line(io, &line, &len) < 0)
			return -1;
		if (len)
			return bad_reply(io, "chunk longer than its size");
	}
	/* trailers (ignored) up to the empty line */
	for (;;) {
		if (read_line(io, &line, &len) < 0)
			return -1;
		if (!len)
			return 0;
		trailers += len + 2;
		if (trailers > HEAD_MAX)
			return bad_reply(io, "trailers over 64 KiB");
	}
}

/* What the head of a reply says. */
struct reply_head {
	int status;
	int http10;
	int chunked;
	long long content_length;   /* -1 if none */
	int close, keep_alive;
	char sig[DT_ED25519_SIG_HEX];  /* X-DT-Signature ("" if none or not 64/128 chars) */
};

static int is_tchar(int ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		(ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Does the comma-separated list v[0..n) contain token tok (any case)? */
static int has_token(const char *v, size_t n, const char *tok)
{
	size_t tl = strlen(tok), i = 0;

	while (i < n) {
		size_t s, e;

		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		s = i;
		while (i < n && v[i] != ',')
			i++;
		e = i;
		while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
			e--;
		if (e - s == tl && !strncasecmp(v + s, tok, tl))
			return 1;
	}
	return 0;
}

/* One header line; -1 (message set) if malformed. */
static int parse_header(struct conn_io *io, const char *p, size_t n, struct reply_head *h)
{
	size_t i = 0, nl, vs, ve;
	const char *v;

	while (i < n && is_tchar((unsigned char)p[i]))
		i++;
	if (!i || i >= n || p[i] != ':')
		return bad_reply(io, "malformed header line");
	nl = i++;
	while (i < n && (p[i] == ' ' || p[i] == '\t'))
		i++;
	vs = i;
	ve = n;
	while (ve > vs && (p[ve - 1] == ' ' || p[ve - 1] == '\t'))
		ve--;
	for (i = vs; i < ve; i++) {
		unsigned char ch = (unsigned char)p[i];

		if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
			return bad_reply(io, "control character in a header");
	}
	v = p + vs;
	if (nl == 14 && !strncasecmp(p, "Content-Length", nl)) {
		long long cl = 0;

		if (ve == vs)
			return bad_reply(io, "bad Content-Length");
		for (i = vs; i < ve; i++) {
			if (p[i] < '0' || p[i] > '9')
				return bad_reply(io, "bad Content-Length");
			if (cl <= BODY_MAX)
				cl = cl * 10 + (p[i] - '0');
		}
		if (h->content_length >= 0 && h->content_length != cl)
			return bad_reply(io, "two different Content-Lengths");
		h->content_length = cl;
	} else if (nl == 17 && !strncasecmp(p, "Transfer-Encoding", nl)) {
		if (ve - vs != 7 || strncasecmp(v, "chunked", 7) || h->chunked) {
			strbuf_addf(io->err, "bad reply from %s%s: unsupported Transfer-Encoding '%.*s'",
				    io->c->host, io->c->port_sfx, (int)(ve - vs > 64 ? 64 : ve - vs), v);
			return -1;
		}
		h->chunked = 1;
	} else if (nl == sizeof(DT_HDR_SIGNATURE) - 1 && !strncasecmp(p, DT_HDR_SIGNATURE, nl)) {
		h->sig[0] = '\0';
		if (ve - vs == DT_SHA256_HEX - 1 || ve - vs == DT_ED25519_SIG_HEX - 1) {
			memcpy(h->sig, v, (size_t)(ve - vs));
			h->sig[ve - vs] = '\0';
		}
	} else if (nl == 10 && !strncasecmp(p, "Connection", nl)) {
		if (has_token(v, ve - vs, "close"))
			h->close = 1;
		if (has_token(v, ve - vs, "keep-alive"))
			h->keep_alive = 1;
	}
	return 0;
}

/* The head buf[0..end) (end is past its final empty line); -1 if malformed. */
static int parse_head(struct conn_io *io, size_t end, struct reply_head *h)
{
	const char *b = io->buf;
	size_t i = 0;
	long e;

	memset(h, 0, sizeof(*h));
	h->content_length = -1;
	if (memchr(b, '\0', end))
		return bad_reply(io, "NUL byte in the headers");
	e = find_crlf(io, 0);
	/* "HTTP/1.x NNN[ reason]" */
	if (e < 12 || memcmp(b, "HTTP/1.", 7) || (b[7] != '0' && b[7] != '1') || b[8] != ' ' ||
	    b[9] < '1' || b[9] > '5' || b[10] < '0' || b[10] > '9' || b[11] < '0' || b[11] > '9' ||
	    (e > 12 && b[12] != ' ') || memchr(b, '\n', (size_t)e) || memchr(b, '\r', (size_t)e))
		return bad_reply(io, "malformed status line");
	h->http10 = b[7] == '0';
	h->status = (b[9] - '0') * 100 + (b[10] - '0') * 10 + (b[11] - '0');
	i = (size_t)e + 2;
	while (i + 2 < end) {   /* each line up to the final empty one */
		e = find_crlf(io, i);
		if (e < 0 || memchr(b + i, '\n', (size_t)e - i) || memchr(b + i, '\r', (size_t)e - i))
			return bad_reply(io, "malformed header line");
		if (parse_header(io, b + i, (size_t)e - i, h) < 0)
			return -1;
		i = (size_t)e + 2;
	}
	return 0;
}

/*
 * Read the reply into out: the status, RETRY (reused connection closed before
 * any reply byte) or -1.  *keep says whether the connection can serve
 * another request.
 */
static int read_reply(struct conn_io *io, const char *method, struct strbuf *out, int *keep,
		      char sig[DT_ED25519_SIG_HEX])
{
	struct reply_head h;
	size_t end = 0, from = 0, base = out->len;
	ssize_t n;
	char *p;

	*keep = 0;
	for (;;) {
		/* the head: up to the first empty line */
		while (!(p = io->len >= 4 ? memmem(io->buf + from, io->len - from, "\r\n\r\n", 4) : NULL)) {
			if (io->len >= HEAD_MAX)
				return bad_reply(io, "headers over 64 KiB");
			from = io->len > 3 ? io->len - 3 : 0;
			n = io_fill(io);
			if (n > 0)
				continue;
			if (n != -2 && !io->got && io->reused &&
			    (!n || io->sys_errno == ECONNRESET || io->sys_errno == EPIPE))
				return RETRY;
			if (!n && !io->got) {
				strbuf_addf(io->err, "no reply from %s%s: connection closed",
					    io->c->host, io->c->port_sfx);
				return -1;
			}
			return cut_short(io, n);
		}
		end = (size_t)(p - io->buf) + 4;
		if (parse_head(io, end, &h) < 0)
			return -1;
		io->pos = end;
		if (h.status >= 200 || h.status == 101)
			break;
		/* an interim 1xx reply: the real one follows */
		memmove(io->buf, io->buf + end, io->len - end);
		io->len -= end;
		io->pos = 0;
		from = 0;
	}
	if (h.status == 101)
		return bad_reply(io, "unexpected protocol switch");
	if (h.status == 204 || h.status == 304 || !strcmp(method, "HEAD")) {
		/* no body */
	} else if (h.chunked) {
		if (h.content_length >= 0)
			h.close = 1;   /* chunked wins over a Content-Length; trust no more */
		if (read_chunked(io, out, base) < 0)
			return -1;
	} else if (h.content_length >= 0) {
		if (h.content_length > BODY_MAX) {
			strbuf_addf(io->err, "reply from %s%s over %d MiB", io->c->host,
				    io->c->port_sfx, BODY_MAX >> 20);
			return -1;
		}
		if (read_body(io, out, base, (size_t)h.content_length) < 0)
			return -1;
	} else {
		if (read_to_eof(io, out, base) < 0)
			return -1;
		h.close = 1;
	}
	/* bytes after the reply mean we are out of step with the server */
	*keep = !h.close && (!h.http10 || h.keep_alive) && io->pos == io->len;
	memcpy(sig, h.sig, DT_ED25519_SIG_HEX);
	return h.status;
}

/*
 * Every reply of our servers starts {"protocol":N (httpd.c and the
 * hand-written replies alike).  One of another version is the peer's 426
 * (it checked) or an older server's answer (it did not): either way the
 * caller gets 426 and {"error": "...", "peer_protocol": N} (protocol.h).
 */
int dt_reply_protocol(const char *body, size_t len)
{
	static const char key[] = "{\"protocol\":";
	long v = 0;
	size_t i = sizeof(key) - 1;

	if (len < i || memcmp(body, key, i))
		return -1;
	for (; i < len && i < 24 && body[i] >= '0' && body[i] <= '9'; i++)
		v = v * 10 + (body[i] - '0');
	return i > sizeof(key) - 1 ? (int)v : -1;
}

static int check_protocol(struct dt_httpc *c, int status, struct strbuf *reply, size_t start)
{
	int theirs = dt_reply_protocol(reply->buf + start, reply->len - start);
	struct strbuf msg = STRBUF_INIT;
	json_t *o;

	if (theirs < 0 || theirs == DT_PROTOCOL_VERSION)
		return status;
	if (status == DT_HTTP_PROTOCOL_MISMATCH)
		return status;          /* the server said it, in its own words */
	strbuf_addf(&msg, "%s%s speaks dtctl protocol %d, this %s protocol %d: %s", c->host,
		    c->port_sfx, theirs, dt_progname(), DT_PROTOCOL_VERSION, DT_PROTOCOL_FIX);
	o = json_pack("{s:i, s:s, s:i}", "protocol", theirs, "error", msg.buf,
		      "peer_protocol", theirs);
	strbuf_setlen(reply, start);
	json_append(reply, o);
	json_decref(o);
	strbuf_release(&msg);
	return DT_HTTP_PROTOCOL_MISMATCH;
}

/* A reply of another protocol version: check_protocol() turns it into a 426,
 * whether or not it is signed (the peer's build may sign otherwise or not at all). */
static int protocol_differs(const struct strbuf *reply, size_t start)
{
	int theirs = dt_reply_protocol(reply->buf + start, reply->len - start);

	return theirs >= 0 && theirs != DT_PROTOCOL_VERSION;
}

/*
 * A reply without this cluster's signature for our nonce: something else
 * answers on that port (a squatter while the daemon is down, or a relay of
 * another request's reply), or the daemon has another secret (then its 401
 * says so, quoted).  Nothing of it is believed.
 */
static void unsigned_reply(const struct dt_httpc *c, int status, const struct strbuf *reply,
			   size_t start, struct strbuf *err)
{
	strbuf_addf(err, "reply from %s%s is not signed by this cluster (another program on %s?)",
		    c->host, c->port_sfx, c->peer_port_name ? c->peer_port_name : "that port");
	if (status == 401) {
		json_t *o = json_parse(reply->buf + start, reply->len - start, NULL);
		const char *e = json_get_str(o, "error", NULL);

		strbuf_addf(err, "; it answered 401%s%s: the secrets differ or the port is not "
			    "this cluster's daemon", e ? " " : "", e ? e : "");
		json_decref(o);
	}
}

int dt_httpc_request_raw(struct dt_httpc *c, const char *method, const char *path,
			 const char *body, size_t len, struct strbuf *reply, struct strbuf *err)
{
	char ts[DT_TS_LEN], nonce[DT_NONCE_HEX], sig[DT_SHA256_HEX];
	char reply_sig[DT_ED25519_SIG_HEX];
	char usig[DT_ED25519_SIG_HEX];
	struct strbuf head = STRBUF_INIT;
	struct conn_io io;
	struct iovec iov[2];
	size_t reply_len = reply->len;
	int ret, keep = 0;

	c->unsigned_reply = 0;
	if (!body)
		len = 0;
	if (c->user ? dt_auth_sign_user(&c->ukey, method, path, body, len, ts, nonce, usig) < 0 :
	    !c->unix_socket &&
	    dt_auth_sign_request(&c->key, method, path, body, len, ts, nonce, sig) < 0) {
		strbuf_addf(err, "cannot sign a request to %s%s", c->host, c->port_sfx);
		return -1;
	}
	strbuf_addf(&head, "%s %s HTTP/1.1\r\n", method, path);
	if (c->unix_socket)
		strbuf_addf(&head, "Host: localhost\r\n%s: %d\r\n", DT_HDR_PROTOCOL,
			    DT_PROTOCOL_VERSION);
	else if (strchr(c->host, ':') && c->host[0] != '[')
		strbuf_addf(&head, "Host: [%s]:%d\r\n", c->host, c->port);
	else
		strbuf_addf(&head, "Host: %s:%d\r\n", c->host, c->port);
	if (!c->unix_socket)
		strbuf_addf(&head, "%s: %s\r\n%s: %s\r\n%s: %s\r\n%s: %d\r\n", DT_HDR_TIMESTAMP,
			    ts, DT_HDR_NONCE, nonce, DT_HDR_SIGNATURE, c->user ? usig : sig,
			    DT_HDR_PROTOCOL, DT_PROTOCOL_VERSION);
	if (c->user)
		strbuf_addf(&head, "%s: %s\r\n", DT_HDR_USER, c->user);
	else if (c->cap[0] && !c->unix_socket)
		strbuf_addf(&head, "%s: %s\r\n", DT_HDR_CAP, c->cap);
	if (body)
		strbuf_addstr(&head, "Content-Type: application/json\r\n");
	strbuf_addf(&head, "Content-Length: %zu\r\nConnection: keep-alive\r\n\r\n", len);

	memset(&io, 0, sizeof(io));
	io.c = c;
	io.err = err;
	io.start = dt_mono_ms();
	io.deadline = c->timeout_ms > 0 ? io.start + c->timeout_ms : 0;
	io.buf = xmalloc(HEAD_MAX);
	for (int attempt = 0;; attempt++) {
		io.reused = c->connected;
		io.got = io.pos = io.len = 0;
		if (io.reused && conn_stale(c)) {
			conn_close(c);   /* closed while idle: not worth a retry */
			io.reused = 0;
		}
		if (!c->connected && conn_open(&io) < 0) {
			ret = -1;
			break;
		}
		iov[0].iov_base = head.buf;
		iov[0].iov_len = head.len;
		iov[1].iov_base = (void *)(body ? body : "");
		iov[1].iov_len = len;
		ret = send_all(&io, iov, len ? 2 : 1);
		if (!ret)
			ret = read_reply(&io, method, reply, &keep, reply_sig);
		if (ret != RETRY)
			break;
		conn_close(c);   /* and once more on a fresh connection (never reused: no RETRY) */
	}
	/* the local socket: the folder vouches for the server (dt_unix_socket_trusted) */
	if (ret >= 0 && !c->unix_socket && !c->user && !protocol_differs(reply, reply_len) &&
	    dt_auth_verify_reply(&c->key, ret, nonce, reply->buf + reply_len,
				 reply->len - reply_len, reply_sig) < 0) {
		unsigned_reply(c, ret, reply, reply_len, err);
		c->unsigned_reply = 1;
		ret = -1;
	}
	/* a user's key: dtsched's own signature, when its key is pinned (docs/team.md) */
	if (ret >= 0 && c->user && c->head_pinned && !protocol_differs(reply, reply_len) &&
	    dt_auth_verify_reply_user(c->head_pub, ret, nonce, reply->buf + reply_len,
				      reply->len - reply_len, reply_sig) < 0) {
		unsigned_reply(c, ret, reply, reply_len, err);
		strbuf_addstr(err, " (not signed by the head key pinned in $DTCTL_HEAD_KEY)");
		c->unsigned_reply = 1;
		ret = -1;
	}
	if (ret < 0 || !keep)
		conn_close(c);
	if (ret < 0)
		strbuf_setlen(reply, reply_len);
	else
		ret = check_protocol(c, ret, reply, reply_len);
	free(io.buf);
	strbuf_release(&head);
	return ret;
}

int dt_httpc_request(struct dt_httpc *c, const char *method, const char *path,
		     const json_t *body, json_t **reply, struct strbuf *err)
{
	struct strbuf in = STRBUF_INIT, out = STRBUF_INIT;
	int status;

	if (reply)
		*reply = NULL;
	if (body)
		json_append(&in, body);
	status = dt_httpc_request_raw(c, method, path, body ? in.buf : NULL, in.len, &out, err);
	if (status > 0 && reply && out.len) {
		*reply = json_parse(out.buf, out.len, NULL);
		if (*reply && !json_is_object(*reply)) {
			json_decref(*reply);
			*reply = NULL;
		}
	}
	strbuf_release(&in);
	strbuf_release(&out);
	return status;
}

const char *dt_httpc_reply_error(const json_t *reply, int status)
{
	const char *e = json_get_str(reply, "error", NULL);

	if (e)
		return e;
	switch (status) {
	case 401: return "unauthorized";
	case 404: return "not found";
	case 413: return "request too large";
	default: return status >= 500 ? "server error" : "request refused";
	}
}
