/*
 * httpd.h - the HTTP/JSON server of dtagent and dtsched (libmicrohttpd).
 *
 * A daemon describes its API as a table of routes and starts one server:
 *
 *	static const struct dt_http_route routes[] = {
 *		{ "GET", DT_PATH_TASKS, 0, list_tasks },
 *		{ "DELETE", DT_PATH_TASK, 0, stop_task },  // "/v1/tasks/{id}": dt_http_arg()
 *		{ "GET", DT_PATH_METRICS, DT_ROUTE_PUBLIC, metrics },
 *	};
 *	struct dt_httpd_opts o = DT_HTTPD_OPTS_INIT;
 *	o.port = 7070; o.routes = routes; o.nr_routes = ARRAY_SIZE(routes);
 *	o.key = &key; o.data = agent;
 *	srv = dt_httpd_start(&o, &err);
 *
 * The wrapper does everything common before a handler runs: connection and
 * memory limits, request timeout, body accumulation with a size limit (413),
 * signature check (401, lib/auth.h) unless the route is DT_ROUTE_PUBLIC,
 * routing (below), JSON parsing of a non-empty body into an object (400).  Handlers
 * fill a dt_http_response; JSON bodies get "protocol": DT_PROTOCOL_VERSION
 * added.  Handlers run on the server's internal thread(s): with threads > 1
 * they run concurrently and must lock what they share.
 *
 * Routing: a route's pattern is literal text and {name} captures, each
 * matching one whole path segment of 1..DT_HTTP_ARG_MAX bytes of what RFC
 * 3986 allows unencoded in a segment ([A-Za-z0-9-._~!$&'()*+,;=:@]) and valid
 * UTF-8 other than C1 controls (so no handler ever sees '/', '%', '?', '#',
 * spaces, control bytes, invalid UTF-8 or an overlong id in an argument); a
 * segment outside that is no match.
 * The first route in table order whose method and pattern match the whole
 * path runs, its captures in req->args (dt_http_arg()); no handler parses its
 * path.  A path that no pattern matches gets 404, one that some pattern
 * matches only with other methods 405 with an Allow header.  (MHD decodes
 * %XX before matching, so "%2F" is a '/'.)
 *
 * Slow work (the agent's probe and debug) runs on a thread of the handler's
 * own and parks the request until it is done (req->state keeps the work's
 * handle; the thread calls dt_httpd_wake()), so the server's thread answers
 * everything else meanwhile.
 *
 * Long-poll: a handler with nothing new to say may park the request instead
 * of answering: when req->may_park, it sets resp->park_ms (how long the
 * client is willing to wait) and leaves the rest of resp alone.  The
 * connection is suspended (no thread is held) and the handler is called again
 * with the same request after dt_httpd_wake() (something changed: every
 * parked request is re-run) or once park_ms has passed, counted from the
 * first park (then may_park is 0 and it must answer).  A re-run is not
 * verified again (its nonce is already spent).  Deadlines are checked by
 * dt_httpd_wake_expired(), which the daemon calls from its tick.
 *
 * Connection floods: anyone who can reach the port can open connections and
 * send nothing, and MHD keeps each one until timeout_s and stops accepting at
 * conn_limit, so a few hundred idle sockets used to lock dtsched and the CLI
 * out of an agent.  So the server tracks every connection that has not yet
 * carried a signed request, in accept order, and closes (shutdown(), which
 * MHD sees as EOF) those that
 *   - sent no complete request within fresh_timeout_ms (5 s), or
 *   - are the oldest when their client address holds more than
 *     peer_idle_limit of them, or all addresses together more than
 *     idle_limit (both below conn_limit).
 * The evicted are always the oldest: a client whose request follows its
 * connect, as dtsched's and the CLI's do, is served even when it shares its
 * address with the flood (a refusal by address would lock out dtsched, which
 * often shares 127.0.0.1 or a NAT address with everyone).  Connections that
 * carried a signed request are never evicted; the room between idle_limit
 * and conn_limit is theirs.  Closes are counted in dt_httpd_stats and logged
 * at most every 10 s.  Of that room one user (a uid on the local socket other
 * than the server's own, a user's key, a job's capability) holds at most
 * owner_limit: a request
 * on a connection beyond it is answered 429 and the connection closed, so one
 * user cannot take every connection and the daemon's open files from the
 * others and from the agents.
 */
#ifndef DT_HTTPD_H
#define DT_HTTPD_H

#include <stddef.h>
#include <jansson.h>
#include "auth.h"
#include "strbuf.h"

#define DT_HTTP_MAX_ARGS 4     /* captures in one pattern */
#define DT_HTTP_ARG_MAX 255     /* bytes in one capture (a node name's limit) */

/* the captures of a matched pattern, in pattern order */
struct dt_http_args {
	size_t nr;
	const char *name[DT_HTTP_MAX_ARGS];   /* point into the route's pattern */
	size_t name_len[DT_HTTP_MAX_ARGS];
	char value[DT_HTTP_MAX_ARGS][DT_HTTP_ARG_MAX + 1];
};

/* how the caller of a request is known (dt_http_request.via) */
enum dt_http_via {
	DT_VIA_PUBLIC,          /* not at all: a DT_ROUTE_PUBLIC route */
	DT_VIA_SECRET,          /* signed with the cluster secret (dtctl's daemons, the admin) */
	DT_VIA_PEERCRED,        /* the local socket: the kernel's SO_PEERCRED (peer_uid) */
	DT_VIA_USERKEY,         /* signed with a user's own key (user) */
	DT_VIA_JOBCAP,          /* signed with a job's capability key (cap; DT_ROUTE_JOBCAP) */
};

struct dt_http_request {
	const char *method;
	const char *path;
	struct dt_http_args args; /* the route's {name} captures */
	const char *body;        /* NUL-terminated copy of the body ("" when none) */
	size_t body_len;
	json_t *json;            /* the body parsed as a JSON object, NULL when the body is empty */
	char remote[64];         /* client IP address ("local uid N" on the local socket) */
	enum dt_http_via via;    /* how the caller is known */
	long long peer_uid, peer_gid, peer_pid;  /* DT_VIA_PEERCRED: the kernel's; else -1 */
	char user[64];           /* DT_VIA_USERKEY: the user whose key signed */
	struct dt_auth_cap cap;  /* DT_VIA_JOBCAP: the job and user it is for */
	int may_park;            /* the handler may set resp->park_ms instead of answering */
	int protocol;            /* the client's X-DT-Protocol (1 when absent, 0 when
				  * garbled); only DT_ROUTE_ANY_PROTOCOL handlers ever
				  * see one other than DT_PROTOCOL_VERSION */
	/* the handler's own, kept across the re-runs of a parked request (NULL
	 * at the first run): a handler that parks while its work runs on a
	 * thread of its own keeps its handle here; state_free(state) is called
	 * when the connection ends, answered or not */
	void *state;
	void (*state_free)(void *state);
};

struct dt_http_response {
	int status;              /* 200 unless set */
	json_t *json;            /* owned; sent as the body with "protocol" added */
	struct strbuf text;      /* sent instead when json is NULL */
	const char *content_type;
	long long park_ms;       /* > 0: nothing to say yet, park the request (may_park only) */
	char allow[64];          /* the Allow header of a 405 ("" = none; set by the server) */
};

typedef void dt_http_handler(struct dt_http_request *req, struct dt_http_response *resp,
			     void *data);

#define DT_ROUTE_PUBLIC 1    /* no signature needed (read-only endpoints only) */
#define DT_ROUTE_RAW_BODY 2  /* the body is not parsed: req->json is NULL and the
			      * handler reads req->body (dt_http_parse_body()
			      * does what the server would have done) */
#define DT_ROUTE_ANY_PROTOCOL 4  /* the handler checks req->protocol itself (else a
				  * signed request of another version gets 426 first) */
#define DT_ROUTE_JOBCAP 16   /* also for a job's capability (auth.h dt_auth_cap):
			      * the handler checks req->cap; other routes 403 it */
#define DT_ROUTE_DAEMON 8    /* for dtctl's daemons only (heartbeats): on the local
			      * socket, 403 unless the peer is root or the server's user */

struct dt_http_route {
	const char *method;
	const char *pattern;     /* "/v1/jobs/{id}/cancel" (Routing, above) */
	int flags;               /* DT_ROUTE_*: who may call it (signed unless PUBLIC), how
				  * the body is taken (JSON object unless RAW_BODY) */
	dt_http_handler *fn;
};

/*
 * Slow work off the server's thread: fn(arg, &status) runs on a thread of
 * its own while the request is parked (the handler must have been called
 * with may_park); its reply (a new reference, or NULL for an empty object)
 * is the request's answer, sent with *status (200 unless set).  max_ms
 * bounds the wait: after it the client gets 503 (fn should end well before:
 * the thread still runs to its end, and dt_httpd_stop() waits for it).
 * arg_free(arg) runs once neither the thread nor the request needs arg.
 * A handler that offloads begins with
 *
 *	if (dt_http_offloaded(req, resp))   // its re-run: answered or parked again
 *		return;
 */
typedef json_t *dt_http_work_fn(void *arg, int *status);
#define DT_HTTPD_MAX_OFFLOADS 32   /* threads at once per server; more: 503 */
struct dt_httpd;
void dt_http_offload(struct dt_httpd *srv, struct dt_http_request *req,
		     struct dt_http_response *resp, dt_http_work_fn *fn, void *arg,
		     void (*arg_free)(void *arg), long long max_ms);
int dt_http_offloaded(struct dt_http_request *req, struct dt_http_response *resp);

/*
 * The capture `name` of the matched route ("" if its pattern has none of
 * that name: a typo is an empty id, which no lookup finds, not a crash).
 */
const char *dt_http_arg(const struct dt_http_request *req, const char *name);

/*
 * Routing on its own, for tests and the server: the first of routes whose
 * method and pattern match path, with the captures in args; NULL when none
 * does, with *status 404 (no pattern matches path) or 405 (some do, with
 * other methods; their methods, ", "-separated, in allow).
 */
const struct dt_http_route *dt_http_route_find(const struct dt_http_route *routes, size_t nr,
					       const char *method, const char *path,
					       struct dt_http_args *args, int *status,
					       char *allow, size_t allow_size);
/* Whether path matches pattern, with the captures in args (on 1). */
int dt_http_pattern_match(const char *pattern, const char *path, struct dt_http_args *args);

struct dt_httpd_opts {
	const char *bind;        /* IPv4 address to listen on; NULL = all */
	int port;                /* 0 = any free port (see dt_httpd_port) */
	const struct dt_http_route *routes;
	size_t nr_routes;
	void *data;              /* passed to handlers */
	const struct dt_auth_key *key;
	size_t max_body;         /* 413 above this */
	unsigned conn_limit;
	size_t conn_memory;      /* per-connection memory limit of MHD */
	unsigned timeout_s;      /* idle connection timeout */
	unsigned threads;        /* 1 = one polling thread of ours that batches
				  * requests when busy (httpd.c serve_loop); > 1 = MHD's
				  * thread pool */
	/* flood limits (above); 0 = conn_limit / 2, and idle_limit / 4 but
	 * at least 32 */
	unsigned idle_limit;     /* connections without a signed request, in all */
	unsigned peer_idle_limit;  /* the same, per client address */
	unsigned fresh_timeout_ms; /* closed when no complete request came by then;
				    * checked every second (threads == 1) and at
				    * every accept */
	/*
	 * Listen on this Unix socket instead of bind/port (a stale socket there
	 * is replaced; anything else there is an error), with mode unix_mode
	 * (0600 unless set).  Requests on it are not signed: each is the
	 * kernel's peer (SO_PEERCRED, req->via DT_VIA_PEERCRED), and routes
	 * flagged DT_ROUTE_DAEMON answer only root and the server's own user.
	 * Replies on it are not signed (who may create the socket is the
	 * folder's business: the client checks it, lib/httpc.h).
	 */
	const char *unix_path;
	unsigned unix_mode;
	/*
	 * Users' own keys (lib/userkey.h): a request with X-DT-User is checked
	 * against user_key(data, name, pub), which fills that user's ed25519
	 * public key and returns 0, or -1 for no such user (401 "unknown user");
	 * NULL: such requests are refused.  Called on the server's thread.
	 */
	int (*user_key)(void *data, const char *user, unsigned char pub[32]);
	/*
	 * dtsched's own ed25519 key: replies to requests signed with a user's
	 * key are signed with it (auth.h dt_auth_sign_reply_user), for clients
	 * that pinned its public key; NULL: they go unsigned.
	 */
	const struct dt_userkey *reply_userkey;
	/* connections one user may hold (a uid on the local socket other than the
	 * server's own, a user's key, a job's capability), counted from their first
	 * request; more are answered 429 and closed.  0 = conn_limit / 16, at least 8 */
	unsigned owner_limit;
	/* header name, value, name, value, ..., NULL: sent with every reply (the
	 * dashboard's Content-Security-Policy and the like); NULL: none */
	const char *const *headers;
};

#define DT_HTTPD_FRESH_TIMEOUT_MS 5000
#define DT_HTTPD_OPTS_INIT { NULL, 0, NULL, 0, NULL, NULL, 1024 * 1024, 256, 64 * 1024, 30, 1, \
			     0, 0, DT_HTTPD_FRESH_TIMEOUT_MS, NULL, 0, NULL, NULL, 0, NULL }

struct dt_httpd_stats {
	unsigned long long requests, unauthorized, too_large, bad_request, not_found, errors;
	unsigned long long conns_open;       /* now */
	unsigned long long conns_unsigned;   /* now: open, no signed request yet */
	unsigned long long closed_no_request; /* closed after fresh_timeout_ms */
	unsigned long long closed_flood;     /* evicted over idle_limit or peer_idle_limit */
};

struct dt_httpd;
/* Start serving; NULL with a message in err (e.g. port in use). */
struct dt_httpd *dt_httpd_start(const struct dt_httpd_opts *opts, struct strbuf *err);
/* Stop serving, wait for handlers to return and free the server. */
void dt_httpd_stop(struct dt_httpd *srv);
int dt_httpd_port(struct dt_httpd *srv);
void dt_httpd_get_stats(struct dt_httpd *srv, struct dt_httpd_stats *st);
/* Re-run every parked request (any thread; cheap when none is parked). */
void dt_httpd_wake(struct dt_httpd *srv);
/* Re-run the parked requests whose time is up (any thread); ms until the
 * next deadline of those still parked, -1 when none is. */
long long dt_httpd_wake_expired(struct dt_httpd *srv);

/*
 * Serve fd (non-blocking, e.g. dtsched's UDP beacon socket) in the same
 * one-thread loop as HTTP: cb(fd, data) runs on the polling thread whenever
 * fd is readable, after MHD's round, under the same batching (httpd.c
 * serve_loop), so it should drain everything pending.  Only for threads == 1;
 * -1 otherwise.  The fd stays the caller's: close it after dt_httpd_stop().
 */
typedef void dt_httpd_fd_cb(int fd, void *data);
int dt_httpd_add_fd(struct dt_httpd *srv, int fd, dt_httpd_fd_cb *cb, void *data);

/*
 * The eviction policy, on its own for tests.  v: the connections that have
 * not carried a signed request, in accept order (oldest first); peer: the
 * address of the one just accepted (the last of v), NULL for a periodic
 * check.  Sets each one's `victim` (what to close, and why) and returns how
 * many are to be closed: first those without a complete request after
 * fresh_timeout_ms, then the oldest of peer's while it has more than
 * peer_idle_limit, then the oldest of all while there are more than
 * idle_limit.  A limit of 0 is no limit.
 */
enum dt_conn_victim { DT_CONN_KEEP, DT_CONN_NO_REQUEST, DT_CONN_FLOOD };

struct dt_idle_conn {
	char peer[48];           /* client address */
	long long accepted_ms;   /* dt_mono_ms() */
	int requested;           /* a complete request came (not signed: public, refused) */
	enum dt_conn_victim victim;
};

struct dt_conn_limits {
	unsigned idle_limit, peer_idle_limit;
	long long fresh_timeout_ms;
};

size_t dt_httpd_pick_victims(struct dt_idle_conn *const *v, size_t n, const char *peer,
			     const struct dt_conn_limits *lim, long long now_ms);

/* Set an error reply {"error": "..."}. */
void dt_http_error(struct dt_http_response *resp, int status, const char *fmt, ...)
	DT_PRINTF(3, 4);
/* Set a JSON reply; steals obj. */
void dt_http_json(struct dt_http_response *resp, int status, json_t *obj);
/* Parse a non-empty req->body into req->json (freed by the server after the
 * handler, as always); -1 with a 400 reply in resp when it is not a JSON
 * object.  The server does this before every handler except on
 * DT_ROUTE_RAW_BODY routes. */
int dt_http_parse_body(struct dt_http_request *req, struct dt_http_response *resp);
/* X-DT-Protocol's value as req->protocol has it */
int dt_http_peer_protocol(const char *hdr);
/* 426 for a peer of protocol `theirs` (protocol.h), logged; who: "this request",
 * "dtagent on node-3" */
void dt_http_protocol_refuse(struct dt_http_response *resp, int theirs, const char *who);

#endif
