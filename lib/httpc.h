/*
 * httpc.h - the signed HTTP/JSON client for dtctl, dtsched and dtagent.
 *
 * One struct dt_httpc per peer; it keeps its connection alive between
 * requests.  Not thread-safe: one client per thread.  Plain HTTP/1.1 to our
 * own servers only (no TLS, proxies, redirects or compression): see httpc.c.
 *
 *	struct dt_httpc c;
 *	dt_httpc_init(&c, "10.88.0.11", 7070, &key);
 *	code = dt_httpc_request(&c, "GET", "/v1/tasks", NULL, &reply, &err);
 *	...
 *	json_decref(reply);
 *	dt_httpc_release(&c);
 *
 * Errors name the peer: "cannot reach 10.88.0.11:7070: Connection refused",
 * "no answer from 10.88.0.11:7070 within 10000 ms".  A reply not signed
 * with the key for this request's nonce (protocol.h) is no answer either
 * (-1): "reply from 127.0.0.1:7071 is not signed by this cluster (another
 * program on the head port?)".
 */
#ifndef DT_HTTPC_H
#define DT_HTTPC_H

#include <jansson.h>
#include <sys/socket.h>
#include "auth.h"
#include "strbuf.h"
#include "userkey.h"

struct dt_httpc {
	char *host;
	int port;
	struct dt_auth_key key;
	long timeout_ms;          /* whole request; default 10000 */
	long connect_timeout_ms;  /* default 3000 */
	const char *peer_port_name; /* in the error of an unsigned reply: "the head port";
				     * NULL: "that port" */
	int unsigned_reply;       /* the last request got a reply not signed for it */
	int unix_socket;          /* host is a Unix socket's path (dt_httpc_init_unix) */
	char port_sfx[16];        /* ":port" in messages, "" for a Unix socket */
	char *user;               /* requests signed with this user's key (dt_httpc_init_user) */
	struct dt_userkey ukey;
	unsigned char head_pub[DT_ED25519_LEN];  /* with user: dtsched's key, when head_pinned */
	int head_pinned;          /* replies must be signed with head_pub (docs/team.md) */
	char cap[DT_CAP_MAX];     /* "": none; else requests carry it as X-DT-Cap and key
				   * is its capability key (auth.h dt_auth_cap) */
	/* private to httpc.c */
	int connected;            /* fd is a kept-alive connection */
	int fd;
	struct sockaddr_storage addr;  /* the address that answered, once resolved */
	socklen_t addrlen;        /* 0 until then */
};

void dt_httpc_init(struct dt_httpc *c, const char *host, int port, const struct dt_auth_key *key);
/*
 * A client of the server on the Unix socket `path` (httpd.h, unix_path): the
 * kernel tells the server who we are, so requests go unsigned and replies
 * are taken unsigned.  Whether the socket is the daemon's is the caller's to
 * check first (who owns the folder it is in: dt_unix_socket_trusted()).
 */
void dt_httpc_init_unix(struct dt_httpc *c, const char *path);
/*
 * A client that signs as `user` with their own key (lib/userkey.h, protocol.h
 * X-DT-User).  The reply is checked against dtsched's own key when the
 * caller pinned it (head_pub, head_pinned), else taken unsigned (docs/team.md).
 */
void dt_httpc_init_user(struct dt_httpc *c, const char *host, int port, const char *user,
			const struct dt_userkey *k);
/*
 * Whether the socket at path can only have been made by root or by `uid`:
 * path is a socket owned by one of them, in a folder owned by one of them
 * that no one else may write to.  0 yes; -1 with why in err.
 */
int dt_unix_socket_trusted(const char *path, unsigned uid, struct strbuf *err);
void dt_httpc_release(struct dt_httpc *c);

/*
 * Send a signed request with `body` (may be NULL) and return the HTTP status;
 * the reply body is parsed into *reply (a JSON object, or NULL if the body was
 * not JSON).  -1 when no HTTP answer came (err says why: unreachable, timeout).
 * A 4xx/5xx status is returned as is; its {"error": ...} is in *reply.
 */
int dt_httpc_request(struct dt_httpc *c, const char *method, const char *path,
		     const json_t *body, json_t **reply, struct strbuf *err);
/* Same with a raw body and raw reply. */
int dt_httpc_request_raw(struct dt_httpc *c, const char *method, const char *path,
			 const char *body, size_t len, struct strbuf *reply, struct strbuf *err);
/*
 * Replies of another protocol version (protocol.h) come back as status
 * DT_HTTP_PROTOCOL_MISMATCH (426) with {"error": both versions and the fix};
 * dt_reply_protocol() reads N from a body starting {"protocol":N (-1: none).
 */
int dt_reply_protocol(const char *body, size_t len);
/* "error" of a reply, or a generic text for the status. */
const char *dt_httpc_reply_error(const json_t *reply, int status);

#endif
