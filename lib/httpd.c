/*
 * httpd.c - libmicrohttpd wrapper: limits, body accumulation, signature
 * check, routing and JSON replies (see httpd.h).
 *
 * MHD calls the access handler several times per request: once with no body
 * (we allocate the request context and may refuse early on Content-Length),
 * once per body chunk, and once more with *upload_data_size == 0 when the
 * body is complete; only then is the request dispatched.
 */
#include "httpd.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "userkey.h"
#include "term.h"
#include "usage.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct parked {
	struct MHD_Connection *conn;
	long long deadline_ms;
};

struct dt_httpd {
	struct MHD_Daemon *mhd;
	struct dt_httpd_opts opts;
	struct dt_nonce_cache *nonces;
	pthread_mutex_t stats_lock;
	struct dt_httpd_stats stats;
	int port;
	int unix_fd;                  /* opts.unix_path's listening socket, -1 if none */
	/* long-poll: suspended connections, under park_lock */
	pthread_mutex_t park_lock;
	struct parked *parked;
	size_t nr_parked, alloc_parked;
	unsigned long long wake_gen;  /* bumped by every dt_httpd_wake() */
	int stopping;
	int offloads;                 /* dt_http_offload() threads running (park_lock) */
	pthread_cond_t offload_done;
	/* threads == 1: our own polling thread (see serve_loop) */
	pthread_t thread;
	int own_thread;
	atomic_int quit;
	int batch_fd;                 /* epoll of the listening socket only, -1 if none */
	int loop_fd;                  /* epoll of MHD's epoll fd and the extra fds, -1 if none */
	struct extra_fd *extras;      /* dt_httpd_add_fd(), freed by dt_httpd_stop() */
	atomic_int big_replies;       /* replies of BIG_REPLY bytes or more being sent */
	atomic_llong fresh_until_ms;  /* a connection was opened: no batching until then */
	/* flood defence (httpd.h): the connections without a signed request yet,
	 * in accept order, and the counters; under conn_lock */
	pthread_mutex_t conn_lock;
	struct dt_conn_limits limits;
	struct dt_idle_conn **idle;
	size_t nr_idle, alloc_idle;
	unsigned long long conns_open, closed_no_request, closed_flood;
	unsigned long long log_no_request, log_flood;   /* not logged yet */
	long long log_from_ms;        /* when the first of those was closed */
	char log_peer[48];            /* the address of the last one closed */
	long long sweep_ms;           /* serve_loop: last periodic check */
	/* connections held per user (owner_admit), under conn_lock; an entry
	 * holding none is reused, so there are as many as users holding some */
	struct owner_conns { char who[112]; unsigned n; } *owners;
	size_t nr_owners, alloc_owners;
	unsigned owner_limit;
	unsigned long long owner_refused;   /* not logged yet */
	long long owner_log_ms;             /* when the last refusal was logged */
};

/*
 * One connection, from MHD's STARTED to its CLOSED notification (the socket
 * context).  Only the fd is used to close it, under conn_lock: MHD notifies
 * CLOSED (which unlists it, under the lock) before it closes the fd, so the fd
 * is never one reused by another connection.
 */
struct conn_track {
	struct dt_idle_conn idle;     /* first: srv->idle points at it */
	int fd;
	int listed;                   /* in srv->idle */
	int signed_req;               /* carried a signed request: never evicted */
	int has_cred;                 /* a Unix socket's peer, as the kernel saw it */
	struct ucred cred;
	size_t owner;                 /* 1 + its index in srv->owners once admitted, else 0 */
};

/* an fd served by the polling thread besides HTTP (dt_httpd_add_fd) */
struct extra_fd {
	struct extra_fd *next;
	int fd;
	dt_httpd_fd_cb *cb;
	void *data;
};

struct req_ctx {
	struct strbuf body;
	int too_large;
	int verified;                 /* signature checked (a parked request re-runs) */
	int via_user;                 /* by a user's key (verify_user): user */
	char user[64];
	int via_cap;                  /* by a job's capability (verify_cap): cap, cap_key */
	struct dt_auth_cap cap;
	struct dt_auth_key cap_key;   /* its replies are signed with it */
	long long deadline_ms;        /* parked: when to answer anyway; 0 = never parked */
	int close;                    /* answer with Connection: close (owner_admit refused) */
	int big;                      /* counted in srv->big_replies until completed */
	void *state;                  /* the handler's (httpd.h dt_http_request) */
	void (*state_free)(void *state);
};

void dt_http_error(struct dt_http_response *resp, int status, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	json_decref(resp->json);
	resp->json = json_pack("{s:s}", "error", sb.buf);
	resp->status = status;
	strbuf_release(&sb);
}

void dt_http_json(struct dt_http_response *resp, int status, json_t *obj)
{
	json_decref(resp->json);
	resp->json = obj;
	resp->status = status;
}

static void count(struct dt_httpd *srv, int status)
{
	pthread_mutex_lock(&srv->stats_lock);
	srv->stats.requests++;
	if (status == 401)
		srv->stats.unauthorized++;
	else if (status == 413)
		srv->stats.too_large++;
	else if (status == 400)
		srv->stats.bad_request++;
	else if (status == 404 || status == 405)
		srv->stats.not_found++;
	else if (status >= 500)
		srv->stats.errors++;
	pthread_mutex_unlock(&srv->stats_lock);
}

/* a reply this big needs several rounds of the poll loop (see serve_loop) */
#define BIG_REPLY (64 * 1024)
/* closes and refusals are logged at most this often (a flood is thousands a second) */
#define FLOOD_LOG_MS 10000

static enum MHD_Result send_reply(struct dt_httpd *srv, struct MHD_Connection *conn,
				  struct req_ctx *ctx, struct dt_http_response *resp)
{
	struct strbuf out = STRBUF_INIT;
	struct MHD_Response *r;
	enum MHD_Result ret;
	char sig[DT_SHA256_HEX];
	size_t len;
	char *buf;

	if (resp->json || !resp->text.len) {
		json_t *body = json_object();

		json_object_set_new(body, "protocol", json_integer(DT_PROTOCOL_VERSION));
		if (json_is_object(resp->json))
			json_object_update(body, resp->json);
		json_append(&out, body);
		strbuf_addch(&out, '\n');
		json_decref(body);
		if (!resp->content_type)
			resp->content_type = "application/json";
		buf = strbuf_detach(&out, &len);
	} else {
		buf = strbuf_detach(&resp->text, &len);   /* no copy of a big reply */
		if (!resp->content_type)
			resp->content_type = "text/plain; charset=utf-8";
	}
	if (len >= BIG_REPLY && !ctx->big) {
		ctx->big = 1;
		atomic_fetch_add(&srv->big_replies, 1);
	}
	r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", resp->content_type);
	/* bound to the request's nonce (protocol.h): a port squatter cannot answer for us */
	if (!ctx->via_user && srv->opts.key &&
	    !dt_auth_sign_reply(ctx->via_cap ? &ctx->cap_key : srv->opts.key, resp->status,
				MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_NONCE),
				buf, len, sig))
		MHD_add_response_header(r, DT_HDR_SIGNATURE, sig);
	/* a user's key: dtsched's own key, for the clients that pinned it (team.md) */
	if (ctx->via_user && srv->opts.reply_userkey) {
		char usig[DT_ED25519_SIG_HEX];

		if (!dt_auth_sign_reply_user(srv->opts.reply_userkey, resp->status,
					     MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
									 DT_HDR_NONCE),
					     buf, len, usig))
			MHD_add_response_header(r, DT_HDR_SIGNATURE, usig);
	}
	if (resp->status == 405 && resp->allow[0])
		MHD_add_response_header(r, "Allow", resp->allow);
	if (ctx->close)
		MHD_add_response_header(r, "Connection", "close");
	for (const char *const *h = srv->opts.headers; h && h[0] && h[1]; h += 2)
		MHD_add_response_header(r, h[0], h[1]);
	ret = MHD_queue_response(conn, (unsigned)resp->status, r);
	MHD_destroy_response(r);
	count(srv, resp->status);
	return ret;
}

int dt_http_peer_protocol(const char *hdr)
{
	char *end;
	long v;

	if (!hdr || !*hdr)
		return 1;       /* builds before the header spoke protocol 1 */
	errno = 0;
	v = strtol(hdr, &end, 10);
	return errno || *end || v < 0 || v > 1000000 ? 0 : (int)v;
}

void dt_http_protocol_refuse(struct dt_http_response *resp, int theirs, const char *who)
{
	dt_http_error(resp, DT_HTTP_PROTOCOL_MISMATCH, "%s speaks dtctl protocol %d and %s %d: %s",
		      dt_progname(), DT_PROTOCOL_VERSION, who, theirs, DT_PROTOCOL_FIX);
	json_object_set_new(resp->json, "peer_protocol", json_integer(theirs));
}

int dt_http_parse_body(struct dt_http_request *req, struct dt_http_response *resp)
{
	struct strbuf err = STRBUF_INIT;

	if (!req->body_len)
		return 0;
	req->json = json_parse(req->body, req->body_len, &err);
	if (!req->json || !json_is_object(req->json)) {
		dt_http_error(resp, 400, "request body is not a JSON object%s%s",
			      err.len ? ": " : "", err.buf);
		strbuf_release(&err);
		json_decref(req->json);
		req->json = NULL;
		return -1;
	}
	strbuf_release(&err);
	return 0;
}

/* --- routing (httpd.h) -------------------------------------------------------- */

/*
 * The length of the character at s if a capture may hold it, else 0: what
 * RFC 3986 allows in a path segment unencoded (ids, node names, sweep
 * names), and valid UTF-8 other than C1 controls (a sweep's name may be
 * "café"); never '/', '%', '?', '#', a space or another control.
 */
static size_t arg_char(const char *s)
{
	unsigned cp;
	size_t len;

	if (!(*s & 0x80))
		return isalnum((unsigned char)*s) || (*s && strchr("-._~!$&'()*+,;=:@", *s));
	len = utf8_decode((const unsigned char *)s, strnlen(s, 4), &cp);
	return cp >= 0xa0 ? len : 0;
}

int dt_http_pattern_match(const char *pat, const char *path, struct dt_http_args *args)
{
	args->nr = 0;
	while (*pat) {
		const char *end;
		size_t n = 0;

		if (*pat != '{') {
			if (*pat++ != *path++)
				return 0;
			continue;
		}
		end = strchr(pat, '}');
		if (!end || args->nr == DT_HTTP_MAX_ARGS)
			return 0;   /* a broken pattern matches nothing */
		while (path[n] && path[n] != '/') {
			size_t len = arg_char(path + n);

			if (!len || n + len > DT_HTTP_ARG_MAX)
				return 0;
			n += len;
		}
		if (!n)
			return 0;
		args->name[args->nr] = pat + 1;
		args->name_len[args->nr] = (size_t)(end - pat - 1);
		memcpy(args->value[args->nr], path, n);
		args->value[args->nr][n] = '\0';
		args->nr++;
		path += n;
		pat = end + 1;
	}
	return !*path;
}

/* Add method to the ", "-separated list in allow unless it is there. */
static void allow_add(char *allow, size_t size, const char *method)
{
	size_t len = strlen(allow), mlen = strlen(method);

	for (const char *p = allow; *p;) {
		size_t n = strcspn(p, ",");

		if (n == mlen && !memcmp(p, method, n))
			return;
		p += n;
		p += strspn(p, ", ");
	}
	if (len + mlen + 3 > size)
		return;
	snprintf(allow + len, size - len, "%s%s", len ? ", " : "", method);
}

const struct dt_http_route *dt_http_route_find(const struct dt_http_route *routes, size_t nr,
					       const char *method, const char *path,
					       struct dt_http_args *args, int *status,
					       char *allow, size_t allow_size)
{
	*status = 404;
	if (allow_size)
		allow[0] = '\0';
	for (size_t i = 0; i < nr; i++) {
		const struct dt_http_route *r = &routes[i];

		if (!dt_http_pattern_match(r->pattern, path, args))
			continue;
		if (!strcmp(r->method, method)) {
			*status = 200;
			return r;
		}
		*status = 405;
		allow_add(allow, allow_size, r->method);
	}
	args->nr = 0;
	return NULL;
}

const char *dt_http_arg(const struct dt_http_request *req, const char *name)
{
	size_t len = strlen(name);

	for (size_t i = 0; i < req->args.nr; i++)
		if (req->args.name_len[i] == len && !memcmp(req->args.name[i], name, len))
			return req->args.value[i];
	return "";
}

/*
 * A request signed with a user's own key (X-DT-User, httpd.h user_key): the
 * user known, then the same checks as the cluster secret's (auth.h).  0, or
 * -1 with a 401 in resp.
 */
static int verify_user(struct dt_httpd *srv, struct MHD_Connection *conn,
		       const struct dt_http_request *req, const char *method, const char *url,
		       struct req_ctx *ctx, struct dt_http_response *resp)
{
	const char *user = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_USER);
	unsigned char pub[32];
	enum dt_auth_result a;

	if (!srv->opts.user_key || strlen(user) >= sizeof(ctx->user) ||
	    srv->opts.user_key(srv->opts.data, user, pub) < 0) {
		dtlog(DTLOG_WARN, "refused %s %s from %s: unknown user '%s'", method, url,
		      req->remote, user);
		dt_http_error(resp, 401, "unknown user '%s' (an admin adds users with 'dtctl user "
			      "add NAME --key FILE.pub')", user);
		return -1;
	}
	a = dt_auth_verify_user(pub, srv->nonces, method, url,
				MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_TIMESTAMP),
				MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_NONCE),
				MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_SIGNATURE),
				ctx->body.buf, ctx->body.len, (long long)time(NULL));
	if (a != DT_AUTH_OK) {
		dtlog(DTLOG_WARN, "refused %s %s from %s (user '%s'): %s", method, url, req->remote,
		      user, dt_auth_result_str(a));
		dt_http_error(resp, 401, "%s (the key of user '%s')", dt_auth_result_str(a), user);
		return -1;
	}
	snprintf(ctx->user, sizeof(ctx->user), "%s", user);
	return 0;
}

/*
 * A request signed with a job's capability key (X-DT-Cap, auth.h
 * dt_auth_cap): the key derived from the secret for that CAP, then the
 * secret's checks.  0, or -1 with a 401 in resp.
 */
static int verify_cap(struct dt_httpd *srv, struct MHD_Connection *conn,
		      const struct dt_http_request *req, const char *method, const char *url,
		      struct req_ctx *ctx, struct dt_http_response *resp)
{
	const char *text = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_CAP);
	enum dt_auth_result a;

	if (!srv->opts.key || dt_auth_cap_parse(text, &ctx->cap) < 0 ||
	    dt_auth_cap_key(srv->opts.key, text, &ctx->cap_key) < 0) {
		dtlog(DTLOG_WARN, "refused %s %s from %s: a malformed %s", method, url,
		      req->remote, DT_HDR_CAP);
		dt_http_error(resp, 401, "malformed %s (expected 'JOB USER UID GID')", DT_HDR_CAP);
		return -1;
	}
	a = dt_auth_verify(&ctx->cap_key, srv->nonces, method, url,
			   MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_TIMESTAMP),
			   MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_NONCE),
			   MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_SIGNATURE),
			   ctx->body.buf, ctx->body.len, (long long)time(NULL));
	if (a != DT_AUTH_OK) {
		dtlog(DTLOG_WARN, "refused %s %s from %s (the capability of job '%s', user '%s'): "
		      "%s", method, url, req->remote, ctx->cap.job, ctx->cap.user,
		      dt_auth_result_str(a));
		dt_http_error(resp, 401, "%s (the capability of job '%s')", dt_auth_result_str(a),
			      ctx->cap.job);
		return -1;
	}
	ctx->via_cap = 1;
	return 0;
}

/*
 * Count conn against the user it speaks for (who: "uid N" on the local socket,
 * "user NAME" for a user's key), once per connection.  Connections that carried
 * such a request are never evicted as a flood (they are signed), so without a
 * bound one user could hold every connection the server takes, and with them
 * the daemon's open files: other users, and on dtsched the agents' heartbeats,
 * would be refused.  -1 (nothing counted) when who holds owner_limit already.
 */
static int owner_admit(struct dt_httpd *srv, struct MHD_Connection *conn, const char *who,
		       unsigned *held)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct conn_track *t = ci ? ci->socket_context : NULL;
	long long now = dt_mono_ms();
	size_t i, free_slot;
	int ret = 0;

	/* t->owner is only written here, on the connection's own thread */
	if (!t || t->owner)
		return 0;
	pthread_mutex_lock(&srv->conn_lock);
	free_slot = srv->nr_owners;
	for (i = 0; i < srv->nr_owners && strcmp(srv->owners[i].who, who); i++)
		if (!srv->owners[i].n && free_slot == srv->nr_owners)
			free_slot = i;
	if (i == srv->nr_owners) {
		/* an entry that holds nothing is reused: an agent sees a job's
		 * capability per job, thousands over its life */
		if (free_slot < srv->nr_owners) {
			i = free_slot;
		} else {
			ALLOC_GROW(srv->owners, srv->nr_owners + 1, srv->alloc_owners);
			srv->nr_owners++;
		}
		memset(&srv->owners[i], 0, sizeof(srv->owners[i]));
		snprintf(srv->owners[i].who, sizeof(srv->owners[i].who), "%s", who);
	}
	*held = srv->owners[i].n;
	if (srv->owners[i].n >= srv->owner_limit) {
		srv->owner_refused++;
		if (!srv->owner_log_ms || now - srv->owner_log_ms >= FLOOD_LOG_MS) {
			dtlog(DTLOG_WARN, "httpd: %llu request(s) refused: %s holds %u connections, "
			      "the most one user may", srv->owner_refused, who, srv->owners[i].n);
			srv->owner_refused = 0;
			srv->owner_log_ms = now;
		}
		ret = -1;
	} else {
		srv->owners[i].n++;
		t->owner = i + 1;
	}
	pthread_mutex_unlock(&srv->conn_lock);
	return ret;
}

static void dispatch(struct dt_httpd *srv, struct MHD_Connection *conn, const char *url,
		     const char *method, struct req_ctx *ctx, struct dt_http_response *resp)
{
	struct dt_http_request req;
	const struct dt_http_route *route;
	const union MHD_ConnectionInfo *ci;
	int status, public_path = 0;

	memset(&req, 0, sizeof(req));
	req.method = method;
	req.path = url;
	req.body = ctx->body.buf;
	req.body_len = ctx->body.len;
	req.peer_uid = req.peer_gid = req.peer_pid = -1;
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (ci && ci->client_addr && ci->client_addr->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ci->client_addr)->sin_addr,
			  req.remote, sizeof(req.remote));
	if (srv->opts.unix_path) {
		const struct conn_track *t;

		ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
		t = ci ? ci->socket_context : NULL;
		if (!t || !t->has_cred) {
			dt_http_error(resp, 401, "the kernel did not name this connection's peer");
			return;
		}
		req.peer_uid = (long long)t->cred.uid;
		req.peer_gid = (long long)t->cred.gid;
		req.peer_pid = (long long)t->cred.pid;
		snprintf(req.remote, sizeof(req.remote), "local uid %u", (unsigned)t->cred.uid);
	}

	if (ctx->too_large) {
		dt_http_error(resp, 413, "request body over %zu bytes", srv->opts.max_body);
		return;
	}
	route = dt_http_route_find(srv->opts.routes, srv->opts.nr_routes, method, url, &req.args,
				   &status, resp->allow, sizeof(resp->allow));
	/* public means: that method on that path, nothing else */
	public_path = route && (route->flags & DT_ROUTE_PUBLIC);
	if (srv->opts.unix_path) {
		/* the kernel said who it is: no signature; the daemons' own routes
		 * only for the daemon's own user and root */
		req.via = public_path ? DT_VIA_PUBLIC : DT_VIA_PEERCRED;
		if (route && (route->flags & DT_ROUTE_DAEMON) && req.peer_uid != 0 &&
		    req.peer_uid != (long long)geteuid()) {
			dtlog(DTLOG_WARN, "refused %s %s from %s: a daemon's endpoint", method, url,
			      req.remote);
			dt_http_error(resp, 403, "'%s' is for dtctl's daemons only (the cluster "
				      "secret), not for users on the local socket", url);
			return;
		}
		ctx->verified = 1;
	} else if (public_path) {
		req.via = DT_VIA_PUBLIC;
	} else if (!ctx->verified &&
		   MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_CAP)) {
		if (verify_cap(srv, conn, &req, method, url, ctx, resp) < 0)
			return;
		ctx->verified = 1;
		req.via = DT_VIA_JOBCAP;
		req.cap = ctx->cap;
	} else if (ctx->verified && ctx->via_cap) {
		req.via = DT_VIA_JOBCAP;   /* a parked request's re-run */
		req.cap = ctx->cap;
	} else if (!ctx->verified &&
		   MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_USER)) {
		/* a user's request: its replies, refusals too, signed with the head's key */
		ctx->via_user = 1;
		if (verify_user(srv, conn, &req, method, url, ctx, resp) < 0)
			return;
		ctx->verified = 1;
		req.via = DT_VIA_USERKEY;
		snprintf(req.user, sizeof(req.user), "%s", ctx->user);
	} else if (ctx->verified && ctx->via_user) {
		req.via = DT_VIA_USERKEY;   /* a parked request's re-run */
		snprintf(req.user, sizeof(req.user), "%s", ctx->user);
	} else if (!ctx->verified) {
		enum dt_auth_result a;

		if (!srv->opts.key) {
			dt_http_error(resp, 401, "server has no key");
			return;
		}
		a = dt_auth_verify(srv->opts.key, srv->nonces, method, url,
				   MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_TIMESTAMP),
				   MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_NONCE),
				   MHD_lookup_connection_value(conn, MHD_HEADER_KIND, DT_HDR_SIGNATURE),
				   ctx->body.buf, ctx->body.len, (long long)time(NULL));
		if (a != DT_AUTH_OK) {
			dtlog(DTLOG_WARN, "refused %s %s from %s: %s", method, url,
			      req.remote, dt_auth_result_str(a));
			dt_http_error(resp, 401, "%s", dt_auth_result_str(a));
			return;
		}
		ctx->verified = 1;
		req.via = DT_VIA_SECRET;
	} else {
		req.via = DT_VIA_SECRET;
	}
	if ((srv->opts.unix_path && req.peer_uid != (long long)geteuid()) ||
	    req.via == DT_VIA_USERKEY || req.via == DT_VIA_JOBCAP) {
		char who[112];
		unsigned held = 0;

		if (req.via == DT_VIA_USERKEY)
			snprintf(who, sizeof(who), "user '%s'", req.user);
		else if (req.via == DT_VIA_JOBCAP)   /* a job's ranks know its capability */
			snprintf(who, sizeof(who), "the capability of job '%s'", req.cap.job);
		else
			snprintf(who, sizeof(who), "uid %lld", req.peer_uid);
		if (owner_admit(srv, conn, who, &held) < 0) {
			ctx->close = 1;
			dt_http_error(resp, 429, "%s holds %u open connections to this %s, the most "
				      "one user may: close some (each 'dtctl events -f', 'logs -f' "
				      "or attached 'run' holds one)", who, held, dt_progname());
			return;
		}
	}
	if (req.via == DT_VIA_JOBCAP && (!route || !(route->flags & DT_ROUTE_JOBCAP))) {
		dt_http_error(resp, 403, "a job's capability (%s) may only start and watch that "
			      "job's orted, not %s '%s'", DT_HDR_CAP, method, url);
		return;
	}
	if (req.via == DT_VIA_USERKEY && route && (route->flags & DT_ROUTE_DAEMON)) {
		dt_http_error(resp, 403, "'%s' is for dtctl's daemons only (the cluster secret), "
			      "not for users' keys", url);
		return;
	}
	if (!route) {
		if (status == 405)
			dt_http_error(resp, 405, "method %s not allowed on '%s' (allowed: %s)",
				      method, url, resp->allow);
		else
			dt_http_error(resp, 404, "no such endpoint '%s' (protocol %d)", url,
				      DT_PROTOCOL_VERSION);
		return;
	}
	req.protocol = dt_http_peer_protocol(MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
									   DT_HDR_PROTOCOL));
	if (!public_path && req.protocol != DT_PROTOCOL_VERSION &&
	    !(route->flags & DT_ROUTE_ANY_PROTOCOL)) {
		dtlog(DTLOG_WARN, "refused %s %s from %s: protocol %d, this %s speaks %d", method,
		      url, req.remote, req.protocol, dt_progname(), DT_PROTOCOL_VERSION);
		dt_http_protocol_refuse(resp, req.protocol, "this request");
		return;
	}
	if (!(route->flags & DT_ROUTE_RAW_BODY) && dt_http_parse_body(&req, resp) < 0)
		return;
	req.may_park = !ctx->deadline_ms || dt_mono_ms() < ctx->deadline_ms;
	req.state = ctx->state;
	req.state_free = ctx->state_free;
	route->fn(&req, resp, srv->opts.data);
	ctx->state = req.state;
	ctx->state_free = req.state_free;
	if (!req.may_park)
		resp->park_ms = 0;
	json_decref(req.json);
}

/* --- connection floods (httpd.h) ----------------------------------------------- */

/* serve_loop checks fresh_timeout_ms this often when nothing connects */
#define SWEEP_MS 1000
/* the least default peer_idle_limit (dt_httpd_start) */
#define MIN_PEER_IDLE 32

size_t dt_httpd_pick_victims(struct dt_idle_conn *const *v, size_t n, const char *peer,
			     const struct dt_conn_limits *lim, long long now_ms)
{
	size_t kept = 0, peer_kept = 0, closed = 0;

	for (size_t i = 0; i < n; i++) {
		v[i]->victim = DT_CONN_KEEP;
		if (!v[i]->requested && lim->fresh_timeout_ms > 0 &&
		    now_ms - v[i]->accepted_ms >= lim->fresh_timeout_ms) {
			v[i]->victim = DT_CONN_NO_REQUEST;
			closed++;
			continue;
		}
		kept++;
		if (peer && !strcmp(v[i]->peer, peer))
			peer_kept++;
	}
	/* oldest first: a client that sends its request right after connecting
	 * is always among the newest, so it is served */
	for (size_t i = 0; lim->peer_idle_limit && peer_kept > lim->peer_idle_limit && i < n; i++) {
		if (v[i]->victim || strcmp(v[i]->peer, peer))
			continue;
		v[i]->victim = DT_CONN_FLOOD;
		peer_kept--;
		kept--;
		closed++;
	}
	for (size_t i = 0; lim->idle_limit && kept > lim->idle_limit && i < n; i++) {
		if (v[i]->victim)
			continue;
		v[i]->victim = DT_CONN_FLOOD;
		kept--;
		closed++;
	}
	return closed;
}

/*
 * Log the closes of the last FLOOD_LOG_MS in one line, once that long has
 * passed since the first of them (or now with force); conn_lock held.
 */
static void flood_log(struct dt_httpd *srv, long long now, int force)
{
	unsigned long long n = srv->log_no_request + srv->log_flood;
	long long secs = (now - srv->log_from_ms + 999) / 1000;

	if (!n || (!force && now - srv->log_from_ms < FLOOD_LOG_MS))
		return;
	if (srv->log_flood)
		dtlog(DTLOG_WARN, "httpd: connection flood: closed %llu connection(s) without a "
		      "signed request in %llds: %llu evicted over the limits (%u per address, "
		      "%u in all), %llu silent for %lld ms; the last from %s", n, secs,
		      srv->log_flood, srv->limits.peer_idle_limit, srv->limits.idle_limit,
		      srv->log_no_request, srv->limits.fresh_timeout_ms, srv->log_peer);
	else
		dtlog(DTLOG_INFO, "httpd: closed %llu connection(s) that sent no request within "
		      "%lld ms in %llds; the last from %s", n, srv->limits.fresh_timeout_ms, secs,
		      srv->log_peer);
	srv->log_no_request = srv->log_flood = 0;
}

/* Close what dt_httpd_pick_victims() picks and unlist it; conn_lock held. */
static void sweep(struct dt_httpd *srv, const char *peer, long long now)
{
	size_t k = 0;

	if (dt_httpd_pick_victims(srv->idle, srv->nr_idle, peer, &srv->limits, now)) {
		for (size_t i = 0; i < srv->nr_idle; i++) {
			struct conn_track *t = (struct conn_track *)srv->idle[i];

			if (t->idle.victim == DT_CONN_KEEP) {
				srv->idle[k++] = &t->idle;
				continue;
			}
			/* MHD reads EOF on its next round and closes it (CLOSED
			 * then frees t); close() here would race with MHD */
			shutdown(t->fd, SHUT_RDWR);
			t->listed = 0;
			if (!srv->log_no_request && !srv->log_flood)
				srv->log_from_ms = now;
			if (t->idle.victim == DT_CONN_FLOOD) {
				srv->closed_flood++;
				srv->log_flood++;
			} else {
				srv->closed_no_request++;
				srv->log_no_request++;
			}
			memcpy(srv->log_peer, t->idle.peer, sizeof(srv->log_peer));
		}
		srv->nr_idle = k;
	}
	flood_log(srv, now, 0);
}

static void unlist(struct dt_httpd *srv, struct conn_track *t)
{
	/* from the end: a connection is most often unlisted by its first
	 * request, right after it was listed */
	for (size_t i = srv->nr_idle; i-- > 0;) {
		if (srv->idle[i] != &t->idle)
			continue;
		memmove(srv->idle + i, srv->idle + i + 1, (srv->nr_idle - i - 1) * sizeof(*srv->idle));
		srv->nr_idle--;
		break;
	}
	t->listed = 0;
}

static void peer_name(char *buf, size_t len, const struct sockaddr *sa)
{
	snprintf(buf, len, "?");
	if (!sa)
		return;
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len);
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf,
			  (socklen_t)len);
}

/* A connection was accepted: list it, then make room (MHD's thread). */
static void conn_started(struct dt_httpd *srv, struct MHD_Connection *conn, void **socket_context)
{
	struct conn_track *t = xcalloc(1, sizeof(*t));
	const union MHD_ConnectionInfo *ci;
	long long now = dt_mono_ms();

	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	t->fd = ci ? ci->connect_fd : -1;
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	peer_name(t->idle.peer, sizeof(t->idle.peer), ci ? ci->client_addr : NULL);
	if (srv->opts.unix_path && t->fd >= 0) {
		socklen_t len = sizeof(t->cred);

		/* who connected, from the kernel (at connect time): the caller's
		 * identity on the local socket (httpd.h, unix_path) */
		t->has_cred = !getsockopt(t->fd, SOL_SOCKET, SO_PEERCRED, &t->cred, &len) &&
			len == sizeof(t->cred);
		if (t->has_cred)
			snprintf(t->idle.peer, sizeof(t->idle.peer), "uid %u", (unsigned)t->cred.uid);
	}
	t->idle.accepted_ms = now;
	*socket_context = t;
	pthread_mutex_lock(&srv->conn_lock);
	srv->conns_open++;
	if (t->fd >= 0) {
		ALLOC_GROW(srv->idle, srv->nr_idle + 1, srv->alloc_idle);
		srv->idle[srv->nr_idle++] = &t->idle;
		t->listed = 1;
	}
	sweep(srv, t->idle.peer, now);
	pthread_mutex_unlock(&srv->conn_lock);
}

static void conn_closed(struct dt_httpd *srv, void **socket_context)
{
	struct conn_track *t = *socket_context;

	if (!t)
		return;
	pthread_mutex_lock(&srv->conn_lock);
	if (t->listed)
		unlist(srv, t);
	if (t->owner)
		srv->owners[t->owner - 1].n--;
	srv->conns_open--;
	pthread_mutex_unlock(&srv->conn_lock);
	free(t);
	*socket_context = NULL;
}

/* A complete request was dispatched on conn (any MHD thread). */
static void conn_requested(struct dt_httpd *srv, struct MHD_Connection *conn, int verified)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct conn_track *t = ci ? ci->socket_context : NULL;

	/* signed_req is only written here, on the connection's own thread */
	if (!t || t->signed_req)
		return;
	pthread_mutex_lock(&srv->conn_lock);
	t->idle.requested = 1;
	if (verified) {
		t->signed_req = 1;
		if (t->listed)
			unlist(srv, t);
	}
	pthread_mutex_unlock(&srv->conn_lock);
}

/* The periodic check of a one-thread server (serve_loop). */
static void conn_tick(struct dt_httpd *srv, long long now)
{
	pthread_mutex_lock(&srv->conn_lock);
	sweep(srv, NULL, now);
	pthread_mutex_unlock(&srv->conn_lock);
}

/*
 * MHD polls with epoll, so FD_SETSIZE is no limit, but the soft limit on open
 * files (often 1024) is, and it is the process's, shared by all its servers
 * (dtsched runs two of 4096 connections and the dashboard's): each server
 * claims its conn_limit, and the limit is raised to the sum of the claims plus
 * NOFILE_SLACK, as far as the hard limit allows.  Never lowered, and no higher
 * than needed: the agent's tasks inherit it.  Where the hard limit is too low
 * the server takes fewer connections (warned): MHD then stops accepting at its
 * connection limit, and never meets EMFILE, on which a server holding no
 * connection would retry accept() in a busy loop (libmicrohttpd's "at FIRST
 * connection") and one holding some would stop accepting until one closes.
 */
#define NOFILE_SLACK 512   /* logs (a logs round holds up to 256), database, pipes, epoll */
#define NOFILE_MIN_CONNS 16
static pthread_mutex_t nofile_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long nofile_claimed;   /* the conn_limits of the servers running */

/* Claim conn_limit connections' files; returns the number that fits. */
static unsigned nofile_claim(unsigned conn_limit)
{
	unsigned long long want;
	struct rlimit rl;

	pthread_mutex_lock(&nofile_lock);
	want = nofile_claimed + conn_limit + NOFILE_SLACK;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < want) {
		rlim_t was = rl.rlim_cur;

		rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			rl.rlim_cur = was;
		if (rl.rlim_cur < want) {
			unsigned long long room = rl.rlim_cur > nofile_claimed + NOFILE_SLACK +
				NOFILE_MIN_CONNS ? rl.rlim_cur - nofile_claimed - NOFILE_SLACK :
				NOFILE_MIN_CONNS;

			dtlog(DTLOG_WARN, "httpd: open file limit %llu (hard %llu) is below what "
			      "%u connections need besides the %llu of this process's other "
			      "servers: this one takes %llu (raise LimitNOFILE)",
			      (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
			      conn_limit, nofile_claimed, room < conn_limit ? room : conn_limit);
			if (room < conn_limit)
				conn_limit = (unsigned)room;
		}
	}
	nofile_claimed += conn_limit;
	pthread_mutex_unlock(&nofile_lock);
	return conn_limit;
}

static void nofile_release(unsigned conn_limit)
{
	pthread_mutex_lock(&nofile_lock);
	nofile_claimed -= conn_limit;
	pthread_mutex_unlock(&nofile_lock);
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version,
				 const char *upload_data, size_t *upload_data_size,
				 void **con_cls)
{
	struct dt_httpd *srv = cls;
	struct req_ctx *ctx = *con_cls;
	struct dt_http_response resp;
	enum MHD_Result ret;

	if (!ctx) {
		const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
							     "Content-Length");

		ctx = xcalloc(1, sizeof(*ctx));
		strbuf_init(&ctx->body, 0);
		*con_cls = ctx;
		if (cl && strtoull(cl, NULL, 10) > srv->opts.max_body) {
			/* refuse before reading the body; MHD closes the connection */
			memset(&resp, 0, sizeof(resp));
			strbuf_init(&resp.text, 0);
			dt_http_error(&resp, 413, "request body over %zu bytes", srv->opts.max_body);
			ret = send_reply(srv, conn, ctx, &resp);
			json_decref(resp.json);
			ctx->too_large = 2;
			return ret;
		}
		return MHD_YES;
	}
	if (*upload_data_size) {
		if (!ctx->too_large) {
			if (ctx->body.len + *upload_data_size > srv->opts.max_body) {
				ctx->too_large = 1;
				strbuf_release(&ctx->body);
			} else {
				strbuf_add(&ctx->body, upload_data, *upload_data_size);
			}
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (ctx->too_large == 2)
		return MHD_YES;   /* already answered */
	for (;;) {
		unsigned long long gen;

		memset(&resp, 0, sizeof(resp));
		resp.status = 200;
		strbuf_init(&resp.text, 0);
		pthread_mutex_lock(&srv->park_lock);
		gen = srv->wake_gen;
		pthread_mutex_unlock(&srv->park_lock);
		dispatch(srv, conn, url, method, ctx, &resp);
		conn_requested(srv, conn, ctx->verified);
		if (resp.park_ms <= 0)
			break;
		/* park, unless a wake came while the handler ran: then run it again */
		pthread_mutex_lock(&srv->park_lock);
		if (gen == srv->wake_gen && !srv->stopping) {
			if (!ctx->deadline_ms)
				ctx->deadline_ms = dt_mono_ms() + resp.park_ms;
			ALLOC_GROW(srv->parked, srv->nr_parked + 1, srv->alloc_parked);
			srv->parked[srv->nr_parked].conn = conn;
			srv->parked[srv->nr_parked].deadline_ms = ctx->deadline_ms;
			srv->nr_parked++;
			MHD_suspend_connection(conn);
			pthread_mutex_unlock(&srv->park_lock);
			json_decref(resp.json);
			strbuf_release(&resp.text);
			return MHD_YES;
		}
		if (srv->stopping)
			ctx->deadline_ms = 1;   /* answer now */
		pthread_mutex_unlock(&srv->park_lock);
		json_decref(resp.json);
		strbuf_release(&resp.text);
	}
	ret = send_reply(srv, conn, ctx, &resp);
	json_decref(resp.json);
	strbuf_release(&resp.text);
	return ret;
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct dt_httpd *srv = cls;
	struct req_ctx *ctx = *con_cls;

	if (ctx) {
		if (ctx->state && ctx->state_free)
			ctx->state_free(ctx->state);
		if (ctx->big)
			atomic_fetch_sub(&srv->big_replies, 1);
		strbuf_release(&ctx->body);
		free(ctx);
		*con_cls = NULL;
	}
}

static void mhd_logger(void *cls, const char *fmt, va_list ap) DT_PRINTF(2, 0);
static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_vaddf(&sb, fmt, ap);
	strbuf_rtrim(&sb);
	dtlog(DTLOG_WARN, "httpd: %s", sb.buf);
	strbuf_release(&sb);
}

/*
 * The polling thread of a one-thread server.  MHD's own internal thread wakes
 * for every packet: 1000 agents heartbeating once a second are 1000 wake-ups
 * a second, and on a virtual machine the wake-ups (IPIs, run-queue locks)
 * cost more than the requests.  When busy (more than BUSY_RUNS returns from
 * the poll in a 100 ms window) this loop lets requests gather for BATCH_MS
 * after each round and then serves them together; when quiet it answers at
 * once, so interactive latency is unchanged.
 *
 * Batching must not slow down what needs several rounds: a new connection
 * (accept, then read the request) and a big reply (sent as fast as the client
 * reads it).  So the wait between rounds is an epoll_wait on the listening
 * socket alone (a connecting client ends it at once; the agents' keep-alive
 * connections do not), after a new connection there is no batching for
 * FRESH_MS, and none while a reply of BIG_REPLY bytes or more is in flight.
 *
 * The loop waits on an epoll set of its own holding MHD's epoll fd and the
 * fds given to dt_httpd_add_fd() (dtsched's UDP beacon socket): a round
 * serves whatever is ready of both, so datagrams that came in during a batch
 * wait are drained together (recvmmsg) like the requests, with no thread or
 * wake-up of their own.
 */
#ifndef BATCH_MS
#define BATCH_MS 5
#endif
#define BUSY_RUNS 10
#define FRESH_MS 100

static void notify_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			      enum MHD_ConnectionNotificationCode code)
{
	struct dt_httpd *srv = cls;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		atomic_store(&srv->fresh_until_ms, dt_mono_ms() + FRESH_MS);
		conn_started(srv, conn, socket_context);
	} else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		conn_closed(srv, socket_context);
	}
}

static void batch_wait(struct dt_httpd *srv)
{
	struct epoll_event ev;

	if (srv->batch_fd >= 0) {
		epoll_wait(srv->batch_fd, &ev, 1, BATCH_MS);
	} else {
		struct timespec ts = { 0, BATCH_MS * 1000000L };

		nanosleep(&ts, NULL);
	}
}

/*
 * One round: wait for MHD's epoll fd or an extra fd (at most until MHD's next
 * timeout), let MHD serve, then call the extra fds' callbacks.  When only an
 * extra fd woke us and MHD has no timeout due, MHD is not run at all (a
 * beacon costs no MHD work).
 */
static void serve_round(struct dt_httpd *srv)
{
	struct epoll_event ev[8];
	MHD_UNSIGNED_LONG_LONG to = 0;
	int timeout = 100, n, mhd = 0;

	if (srv->loop_fd < 0) {
		MHD_run_wait(srv->mhd, 100);
		return;
	}
	if (MHD_get_timeout(srv->mhd, &to) == MHD_YES && to < 100)
		timeout = (int)to;
	n = epoll_wait(srv->loop_fd, ev, ARRAY_SIZE(ev), timeout);
	if (n <= 0)
		mhd = 1;
	for (int i = 0; i < n; i++)
		if (!ev[i].data.ptr)
			mhd = 1;
	if (!mhd && MHD_get_timeout(srv->mhd, &to) == MHD_YES && to == 0)
		mhd = 1;
	if (mhd)
		MHD_run(srv->mhd);
	for (int i = 0; i < n; i++) {
		struct extra_fd *x = ev[i].data.ptr;

		if (x)
			x->cb(x->fd, x->data);
	}
}

static void *serve_loop(void *data)
{
	struct dt_httpd *srv = data;
	long long window = dt_mono_ms(), now;
	int runs = 0, busy = 0;

	while (!atomic_load(&srv->quit)) {
		serve_round(srv);
		runs++;
		now = dt_mono_ms();
		if (now - srv->sweep_ms >= SWEEP_MS) {
			srv->sweep_ms = now;
			conn_tick(srv, now);
		}
		if (now - window >= 100) {
			busy = runs > BUSY_RUNS;
			runs = 0;
			window = now;
		}
		if (busy && BATCH_MS > 0 && !atomic_load(&srv->big_replies) &&
		    now >= atomic_load(&srv->fresh_until_ms))
			batch_wait(srv);
	}
	return NULL;
}

/* A new epoll set watching `watched` for input (data.ptr NULL), or -1. */
static int epoll_set_of(int watched)
{
	struct epoll_event ev;
	int fd = epoll_create1(EPOLL_CLOEXEC);

	if (fd < 0)
		return -1;
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.ptr = NULL;
	if (epoll_ctl(fd, EPOLL_CTL_ADD, watched, &ev) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The epoll set serve_round() waits on: MHD's epoll fd (data.ptr NULL), to
 * which dt_httpd_add_fd() adds its fds. */
static int loop_fd_open(struct dt_httpd *srv)
{
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_EPOLL_FD);

	if (!di || di->epoll_fd < 0)
		return -1;
	return epoll_set_of(di->epoll_fd);
}

int dt_httpd_add_fd(struct dt_httpd *srv, int fd, dt_httpd_fd_cb *cb, void *data)
{
	struct extra_fd *x;
	struct epoll_event ev;

	if (!srv || srv->loop_fd < 0)
		return -1;
	x = xcalloc(1, sizeof(*x));
	x->fd = fd;
	x->cb = cb;
	x->data = data;
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.ptr = x;
	/* the list is only walked by dt_httpd_stop(): no lock with the loop */
	pthread_mutex_lock(&srv->park_lock);
	x->next = srv->extras;
	srv->extras = x;
	pthread_mutex_unlock(&srv->park_lock);
	return epoll_ctl(srv->loop_fd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -1 : 0;
}

/*
 * The listening Unix socket at path with `mode`; -1 with a message.  What is
 * there already is replaced only when it is a socket (a dtsched that died
 * left it); bind() under a umask that gives no one more than mode, so there
 * is no moment where the socket is open wider.
 */
static int unix_listen(const char *path, unsigned mode, struct strbuf *err)
{
	struct sockaddr_un sa;
	struct stat st;
	mode_t old;
	int fd, r;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		strbuf_addf(err, "socket path '%s' is over %zu bytes", path, sizeof(sa.sun_path) - 1);
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			strbuf_addf(err, "'%s' exists and is not a socket: not replacing it", path);
			return -1;
		}
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		strbuf_addf(err, "cannot make a Unix socket: %s", strerror(errno));
		return -1;
	}
	old = umask(~mode & 0777);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || chmod(path, mode) < 0 || listen(fd, 128) < 0) {
		strbuf_addf(err, "cannot listen on the socket '%s': %s", path, strerror(errno));
		if (!r)
			unlink(path);
		close(fd);
		return -1;
	}
	return fd;
}

/* The epoll set batch_wait() sleeps on: the listening socket only. */
static int batch_fd_open(struct dt_httpd *srv)
{
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_LISTEN_FD);

	if (!di || di->listen_fd < 0)
		return -1;
	return epoll_set_of(di->listen_fd);
}

struct dt_httpd *dt_httpd_start(const struct dt_httpd_opts *opts, struct strbuf *err)
{
	struct dt_httpd *srv = xcalloc(1, sizeof(*srv));
	struct sockaddr_in sa;
	unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC;
	const union MHD_DaemonInfo *di;
	/* where to listen: bind to sa, or the Unix socket made here (one option
	 * either way, of different types: MHD_OPTION_ARRAY carries both) */
	struct MHD_OptionItem listen_opt[] = {
		{ MHD_OPTION_SOCK_ADDR, 0, &sa },
		{ MHD_OPTION_END, 0, NULL },
	};

	srv->opts = *opts;
	srv->opts.conn_limit = nofile_claim(opts->conn_limit);
	opts = &srv->opts;
	srv->unix_fd = -1;
	srv->batch_fd = -1;
	srv->loop_fd = -1;
	if (!srv->opts.threads)
		srv->opts.threads = 1;
	if (srv->opts.threads > 1)
		flags |= MHD_USE_INTERNAL_POLLING_THREAD;
	pthread_mutex_init(&srv->stats_lock, NULL);
	pthread_mutex_init(&srv->park_lock, NULL);
	pthread_cond_init(&srv->offload_done, NULL);
	pthread_mutex_init(&srv->conn_lock, NULL);
	srv->limits.idle_limit = opts->idle_limit ? opts->idle_limit : opts->conn_limit / 2;
	/* a quarter of that, but no fewer than MHD may accept from one address
	 * before it reads the first of them (up to 11 a round): a client's
	 * connection must not be evicted before its request was read */
	srv->limits.peer_idle_limit = opts->peer_idle_limit ? opts->peer_idle_limit :
		srv->limits.idle_limit / 4 > MIN_PEER_IDLE ? srv->limits.idle_limit / 4 :
		MIN_PEER_IDLE;
	if (!srv->limits.idle_limit)
		srv->limits.idle_limit = 1;
	if (srv->limits.peer_idle_limit > srv->limits.idle_limit)
		srv->limits.peer_idle_limit = srv->limits.idle_limit;
	srv->limits.fresh_timeout_ms = opts->fresh_timeout_ms;
	srv->owner_limit = opts->owner_limit ? opts->owner_limit :
		opts->conn_limit / 16 > 8 ? opts->conn_limit / 16 : 8;
	srv->nonces = dt_nonce_cache_new(DT_AUTH_MAX_SKEW_S, 2 * 1000 * 1000);
	if (opts->unix_path) {
		srv->unix_fd = unix_listen(opts->unix_path, opts->unix_mode ? opts->unix_mode : 0600,
					   err);
		if (srv->unix_fd < 0)
			goto fail;
		listen_opt[0].option = MHD_OPTION_LISTEN_SOCKET;
		listen_opt[0].value = srv->unix_fd;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((unsigned short)opts->port);
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	if (opts->bind && *opts->bind && inet_pton(AF_INET, opts->bind, &sa.sin_addr) != 1) {
		strbuf_addf(err, "cannot listen on '%s': not an IPv4 address", opts->bind);
		goto fail;
	}
	srv->mhd = MHD_start_daemon(flags, (unsigned short)opts->port, NULL, NULL,
				    access_cb, srv,
				    MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, srv,
				    MHD_OPTION_ARRAY, listen_opt,
				    MHD_OPTION_CONNECTION_LIMIT, opts->conn_limit,
				    MHD_OPTION_CONNECTION_MEMORY_LIMIT, opts->conn_memory,
				    MHD_OPTION_CONNECTION_TIMEOUT, opts->timeout_s,
				    MHD_OPTION_NOTIFY_COMPLETED, completed_cb, srv,
				    MHD_OPTION_NOTIFY_CONNECTION, notify_connection, srv,
				    opts->threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END,
				    opts->threads, MHD_OPTION_END);
	if (!srv->mhd && srv->unix_fd >= 0) {
		strbuf_addf(err, "cannot serve on the socket '%s'", opts->unix_path);
		goto fail;
	}
	if (!srv->mhd) {
		strbuf_addf(err, "cannot listen on %s:%d (port in use or not permitted?)",
			    opts->bind && *opts->bind ? opts->bind : "0.0.0.0", opts->port);
		goto fail;
	}
	di = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
	srv->port = di ? di->port : opts->port;
	if (srv->opts.threads == 1) {
		srv->batch_fd = batch_fd_open(srv);   /* else: plain sleeps */
		srv->loop_fd = loop_fd_open(srv);     /* else: MHD_run_wait, no extra fds */
		if (pthread_create(&srv->thread, NULL, serve_loop, srv)) {
			if (srv->batch_fd >= 0)
				close(srv->batch_fd);
			if (srv->loop_fd >= 0)
				close(srv->loop_fd);
			MHD_stop_daemon(srv->mhd);
			strbuf_addf(err, "cannot start the HTTP server thread");
			goto fail;
		}
		srv->own_thread = 1;
	}
	return srv;
fail:
	if (srv->unix_fd >= 0 && opts->unix_path) {
		close(srv->unix_fd);
		unlink(opts->unix_path);
	}
	dt_nonce_cache_free(srv->nonces);
	nofile_release(srv->opts.conn_limit);
	pthread_mutex_destroy(&srv->stats_lock);
	pthread_mutex_destroy(&srv->park_lock);
	pthread_mutex_destroy(&srv->conn_lock);
	free(srv);
	return NULL;
}

/*
 * Resume the parked requests (all, or those whose deadline passed); lock held.
 * Returns ms until the next deadline of those left, -1 when none is left.
 */
static long long resume_parked(struct dt_httpd *srv, int all)
{
	long long now = dt_mono_ms(), next = -1;
	size_t k = 0;

	for (size_t i = 0; i < srv->nr_parked; i++) {
		if (all || now >= srv->parked[i].deadline_ms) {
			MHD_resume_connection(srv->parked[i].conn);
		} else {
			if (next < 0 || srv->parked[i].deadline_ms - now < next)
				next = srv->parked[i].deadline_ms - now;
			srv->parked[k++] = srv->parked[i];
		}
	}
	srv->nr_parked = k;
	return next;
}

void dt_httpd_wake(struct dt_httpd *srv)
{
	if (!srv)
		return;
	pthread_mutex_lock(&srv->park_lock);
	srv->wake_gen++;
	resume_parked(srv, 1);
	pthread_mutex_unlock(&srv->park_lock);
}

long long dt_httpd_wake_expired(struct dt_httpd *srv)
{
	long long next = -1;

	if (!srv)
		return -1;
	pthread_mutex_lock(&srv->park_lock);
	if (srv->nr_parked)
		next = resume_parked(srv, 0);
	pthread_mutex_unlock(&srv->park_lock);
	return next;
}

/* --- slow work on a thread of its own (httpd.h dt_http_offload) ------------------ */

struct offload {
	pthread_mutex_t lock;
	int refs;                     /* the thread's and the request's */
	int done, status;
	json_t *reply;
	long long deadline_ms;
	dt_http_work_fn *fn;
	void *arg;
	void (*arg_free)(void *arg);
	struct dt_httpd *srv;
};

static void offload_unref(void *p)
{
	struct offload *o = p;
	int last;

	pthread_mutex_lock(&o->lock);
	last = !--o->refs;
	pthread_mutex_unlock(&o->lock);
	if (!last)
		return;
	if (o->arg_free)
		o->arg_free(o->arg);
	json_decref(o->reply);
	pthread_mutex_destroy(&o->lock);
	free(o);
}

static void *offload_thread(void *p)
{
	struct offload *o = p;
	struct dt_httpd *srv = o->srv;
	int status = 200;
	json_t *reply = o->fn(o->arg, &status);

	pthread_mutex_lock(&o->lock);
	o->reply = reply;
	o->status = status;
	o->done = 1;
	pthread_mutex_unlock(&o->lock);
	offload_unref(o);
	dt_httpd_wake(srv);           /* its request runs again and answers */
	pthread_mutex_lock(&srv->park_lock);
	if (!--srv->offloads)
		pthread_cond_broadcast(&srv->offload_done);
	pthread_mutex_unlock(&srv->park_lock);
	return NULL;
}

/* the re-run of a request whose work was handed to a thread: answer or park again */
static void offload_answer(struct dt_http_request *req, struct dt_http_response *resp)
{
	struct offload *o = req->state;
	long long left = o->deadline_ms - dt_mono_ms();

	pthread_mutex_lock(&o->lock);
	if (o->done)
		dt_http_json(resp, o->status, json_incref(o->reply));
	else if (req->may_park && left > 0)
		resp->park_ms = left;
	else
		dt_http_error(resp, 503, "%s %s: still working after its time (or the server "
			      "is stopping)", req->method, req->path);
	pthread_mutex_unlock(&o->lock);
}

int dt_http_offloaded(struct dt_http_request *req, struct dt_http_response *resp)
{
	if (req->state_free != offload_unref || !req->state)
		return 0;
	offload_answer(req, resp);
	return 1;
}

void dt_http_offload(struct dt_httpd *srv, struct dt_http_request *req,
		     struct dt_http_response *resp, dt_http_work_fn *fn, void *arg,
		     void (*arg_free)(void *arg), long long max_ms)
{
	struct offload *o = xcalloc(1, sizeof(*o));
	pthread_attr_t at;
	pthread_t th;
	int rc;

	pthread_mutex_lock(&srv->park_lock);
	if (srv->offloads >= DT_HTTPD_MAX_OFFLOADS) {
		pthread_mutex_unlock(&srv->park_lock);
		free(o);
		if (arg_free)
			arg_free(arg);
		dt_http_error(resp, 503, "%s %s: %d slow requests already running here; try "
			      "again", req->method, req->path, DT_HTTPD_MAX_OFFLOADS);
		return;
	}
	srv->offloads++;
	pthread_mutex_unlock(&srv->park_lock);
	pthread_mutex_init(&o->lock, NULL);
	o->refs = 2;
	o->fn = fn;
	o->arg = arg;
	o->arg_free = arg_free;
	o->srv = srv;
	o->deadline_ms = dt_mono_ms() + max_ms;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&th, &at, offload_thread, o);
	pthread_attr_destroy(&at);
	if (rc) {
		pthread_mutex_lock(&srv->park_lock);
		if (!--srv->offloads)
			pthread_cond_broadcast(&srv->offload_done);
		pthread_mutex_unlock(&srv->park_lock);
		o->refs = 1;
		offload_unref(o);
		dt_http_error(resp, 503, "%s %s: cannot start a thread: %s", req->method, req->path,
			      strerror(rc));
		return;
	}
	req->state = o;
	req->state_free = offload_unref;
	offload_answer(req, resp);    /* parks (or answers, if it was that quick) */
}

void dt_httpd_stop(struct dt_httpd *srv)
{
	if (!srv)
		return;
	/* MHD refuses to stop with suspended connections: answer them first */
	pthread_mutex_lock(&srv->park_lock);
	srv->stopping = 1;
	resume_parked(srv, 1);
	pthread_mutex_unlock(&srv->park_lock);
	if (srv->own_thread) {
		atomic_store(&srv->quit, 1);
		pthread_join(srv->thread, NULL);
		/* answer the requests resumed above (this thread is the loop now) */
		MHD_run_wait(srv->mhd, 0);
		if (srv->batch_fd >= 0)
			close(srv->batch_fd);
		if (srv->loop_fd >= 0)
			close(srv->loop_fd);
	}
	while (srv->extras) {
		struct extra_fd *x = srv->extras;

		srv->extras = x->next;
		free(x);
	}
	MHD_stop_daemon(srv->mhd);   /* CLOSED for every connection: none listed now */
	if (srv->unix_fd >= 0)
		unlink(srv->opts.unix_path);   /* MHD closed it */
	/* slow work still running (httpd.h dt_http_offload) holds srv: let it end */
	pthread_mutex_lock(&srv->park_lock);
	while (srv->offloads)
		pthread_cond_wait(&srv->offload_done, &srv->park_lock);
	pthread_mutex_unlock(&srv->park_lock);
	pthread_cond_destroy(&srv->offload_done);
	pthread_mutex_lock(&srv->conn_lock);
	flood_log(srv, dt_mono_ms(), 1);
	pthread_mutex_unlock(&srv->conn_lock);
	dt_nonce_cache_free(srv->nonces);
	nofile_release(srv->opts.conn_limit);
	pthread_mutex_destroy(&srv->stats_lock);
	pthread_mutex_destroy(&srv->park_lock);
	pthread_mutex_destroy(&srv->conn_lock);
	free(srv->idle);
	free(srv->owners);
	free(srv->parked);
	free(srv);
}

int dt_httpd_port(struct dt_httpd *srv)
{
	return srv->port;
}

void dt_httpd_get_stats(struct dt_httpd *srv, struct dt_httpd_stats *st)
{
	pthread_mutex_lock(&srv->stats_lock);
	*st = srv->stats;
	pthread_mutex_unlock(&srv->stats_lock);
	pthread_mutex_lock(&srv->conn_lock);
	st->conns_open = srv->conns_open;
	st->conns_unsigned = srv->nr_idle;
	st->closed_no_request = srv->closed_no_request;
	st->closed_flood = srv->closed_flood;
	pthread_mutex_unlock(&srv->conn_lock);
}
