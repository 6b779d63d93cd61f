/*
 * auth.h - request signing and verification for the dtctl protocol.
 *
 * Every request between dtctl, dtsched and dtagent is signed with the
 * cluster secret (protocol.h has the exact string that is signed).  The
 * client side calls dt_auth_sign_request() to get the three header values;
 * the server side calls dt_auth_verify() with what it received.  A verifier
 * keeps a nonce cache covering the allowed clock skew so a captured request
 * cannot be replayed; the cache is internally locked (one per daemon, shared
 * by its HTTP threads).
 *
 * Order of checks in dt_auth_verify(): headers present and well-formed ->
 * timestamp within the skew -> MAC (constant time) -> nonce unseen.  The nonce
 * is recorded only for requests whose MAC is good, so forged traffic cannot
 * fill the cache.
 */
#ifndef DT_AUTH_H
#define DT_AUTH_H

#include <stddef.h>

#define DT_AUTH_KEY_MAX 128
#define DT_SHA256_HEX 65        /* 64 hex digits + NUL */
#define DT_NONCE_HEX 33         /* 16 random bytes as hex + NUL */
#define DT_TS_LEN 24

struct dt_auth_key {
	unsigned char bytes[DT_AUTH_KEY_MAX];
	size_t len;
};

/* The key from the hex secret (whitespace around it ignored); -1 if not hex. */
int dt_auth_key_from_hex(struct dt_auth_key *key, const char *hex);
/* Load the key from a secret file (see secret.h); -1 with a message. */
int dt_auth_key_load(struct dt_auth_key *key, const char *path);

/* hex SHA-256 of data into out (DT_SHA256_HEX bytes). */
void dt_sha256_hex(const void *data, size_t len, char *out);
/* Fill buf with n random bytes from the kernel (getrandom(2)); -1 on failure. */
int dt_random_bytes(void *buf, size_t n);
/* n random bytes written as 2n hex digits + NUL into out. */
int dt_random_hex(char *out, size_t n);

/* hex HMAC-SHA256 of the canonical request string into sig (DT_SHA256_HEX). */
void dt_auth_sign(const struct dt_auth_key *key, const char *method, const char *path,
		  const char *timestamp, const char *nonce, const void *body, size_t len,
		  char *sig);
/* hex HMAC-SHA256 of the NUL-terminated msg with key into out (DT_SHA256_HEX),
 * with this thread's cached context: the MAC of a UDP beacon (beacon.h). */
void dt_auth_mac_hex(const struct dt_auth_key *key, const char *msg, char *out);
/* Fresh timestamp + nonce and the signature for them. */
int dt_auth_sign_request(const struct dt_auth_key *key, const char *method,
			 const char *path, const void *body, size_t len,
			 char ts[DT_TS_LEN], char nonce[DT_NONCE_HEX], char sig[DT_SHA256_HEX]);

/*
 * Replies are signed too (protocol.h), so that a program squatting on a
 * daemon's port cannot answer for it: sig = hex HMAC-SHA256(key, "reply" "\n"
 * STATUS "\n" NONCE "\n" hex(sha256(body))) where NONCE is the request's.
 * dt_auth_sign_reply() returns -1 (sig untouched) when the nonce is not of
 * the request form (then the reply goes unsigned: the request was refused);
 * dt_auth_verify_reply() is 0 only for a good signature (sig may be NULL).
 */
int dt_auth_sign_reply(const struct dt_auth_key *key, int status, const char *nonce,
		       const void *body, size_t len, char sig[DT_SHA256_HEX]);
int dt_auth_verify_reply(const struct dt_auth_key *key, int status, const char *nonce,
			 const void *body, size_t len, const char *sig);

/*
 * A job's capability (team mode's orted path, agent/rsh.h, docs/team.md): the
 * agent that starts an mpi job's mpirun as its user gives it CAP = "JOB USER
 * UID GID" and the key HMAC-SHA256(cluster secret, "orted-cap\n" CAP), never
 * the secret.  A request signed with that key (header X-DT-Cap: CAP) may only
 * start and watch that job's orted, as that user: any agent holding the
 * secret derives the same key and checks it like the secret's.
 */
#define DT_CAP_MAX 160
struct dt_auth_cap {
	char job[65];
	char user[65];
	long long uid, gid;
};
/* 0 and *cap from text ("JOB USER UID GID", uid > 0, gid >= 0), else -1 */
int dt_auth_cap_parse(const char *text, struct dt_auth_cap *cap);
/* the CAP text of cap into out (DT_CAP_MAX bytes) */
void dt_auth_cap_format(const struct dt_auth_cap *cap, char *out);
/* the key of the CAP text: 0, or -1 when text is not a CAP */
int dt_auth_cap_key(const struct dt_auth_key *secret, const char *text,
		    struct dt_auth_key *out);

/*
 * dtsched's own key signs its replies to requests signed with a user's key
 * (docs/team.md, "dtsched's key"): hex Ed25519 (128 digits) over the same
 * material as dt_auth_sign_reply's HMAC.  Sign: -1 when the nonce is not of
 * the request form; verify: 0 only for a good signature.
 */
struct dt_userkey;
int dt_auth_sign_reply_user(const struct dt_userkey *k, int status, const char *nonce,
			    const void *body, size_t len, char sig[129]);
int dt_auth_verify_reply_user(const unsigned char pub[32], int status, const char *nonce,
			      const void *body, size_t len, const char *sig);

enum dt_auth_result {
	DT_AUTH_OK = 0,
	DT_AUTH_MISSING,        /* a header is absent */
	DT_AUTH_MALFORMED,      /* timestamp/nonce/signature not in the expected form */
	DT_AUTH_STALE,          /* timestamp outside the skew window */
	DT_AUTH_BAD_SIGNATURE,
	DT_AUTH_REPLAY,         /* nonce already seen in the window */
	DT_AUTH_OVERLOAD,       /* nonce cache full (refuse rather than forget) */
};
const char *dt_auth_result_str(enum dt_auth_result r);

struct dt_nonce_cache;
/* Remember nonces for 2 * skew_s seconds, at most max_entries at once. */
struct dt_nonce_cache *dt_nonce_cache_new(int skew_s, size_t max_entries);
void dt_nonce_cache_free(struct dt_nonce_cache *nc);
/* 0 if the nonce is new (and now recorded), 1 if seen, -1 if full. */
int dt_nonce_cache_add(struct dt_nonce_cache *nc, const char *nonce, long long now_s);
size_t dt_nonce_cache_size(struct dt_nonce_cache *nc);

/* Check one request; `now_s` is the verifier's clock (unix seconds). */
enum dt_auth_result dt_auth_verify(const struct dt_auth_key *key, struct dt_nonce_cache *nc,
				   const char *method, const char *path,
				   const char *timestamp, const char *nonce, const char *sig,
				   const void *body, size_t len, long long now_s);

/*
 * A user's own key (userkey.h): the same canonical string, signed with
 * Ed25519 (sig: 128 hex digits), the same checks in the same order
 * (headers, skew, signature, nonce unseen).
 */
struct dt_userkey;
int dt_auth_sign_user(const struct dt_userkey *k, const char *method, const char *path,
		      const void *body, size_t len, char ts[DT_TS_LEN], char nonce[DT_NONCE_HEX],
		      char sig[129]);
enum dt_auth_result dt_auth_verify_user(const unsigned char pub[32], struct dt_nonce_cache *nc,
					const char *method, const char *path,
					const char *timestamp, const char *nonce, const char *sig,
					const void *body, size_t len, long long now_s);

#endif
