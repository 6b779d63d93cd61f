/*
 * auth.c - HMAC-SHA256 request signing, verification and the nonce cache
 * (see auth.h for the order of checks and protocol.h for the signed string).
 */
#include "auth.h"
#include "protocol.h"
#include "secret.h"
#include "sha256.h"
#include "strbuf.h"
#include "usage.h"
#include "userkey.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static const char hexdig[] = "0123456789abcdef";

static void to_hex(const unsigned char *in, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hexdig[in[i] >> 4];
		out[2 * i + 1] = hexdig[in[i] & 15];
	}
	out[2 * n] = '\0';
}

int dt_auth_key_from_hex(struct dt_auth_key *key, const char *hex)
{
	size_t n;

	while (isspace((unsigned char)*hex))
		hex++;
	n = strlen(hex);
	while (n && isspace((unsigned char)hex[n - 1]))
		n--;
	if (!n || n % 2 || n / 2 > DT_AUTH_KEY_MAX)
		return -1;
	for (size_t i = 0; i < n; i += 2) {
		int hi = hex_value(hex[i]), lo = hex_value(hex[i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		key->bytes[i / 2] = (unsigned char)(hi << 4 | lo);
	}
	key->len = n / 2;
	return 0;
}

int dt_auth_key_load(struct dt_auth_key *key, const char *path)
{
	struct strbuf sb = STRBUF_INIT;
	int ret = 0;

	if (dt_secret_read(path, &sb) < 0)
		ret = -1;
	else if (dt_auth_key_from_hex(key, sb.buf) < 0)
		ret = error("cluster secret '%s' is not a hex string of at most %d bytes",
			    path, DT_AUTH_KEY_MAX);
	strbuf_release(&sb);
	return ret;
}

/*
 * SHA-256 and HMAC from sha256.c (Nettle), not OpenSSL: first EVP's provider start-up
 * (about 1 ms), then merely mapping and relocating libcrypto (1.6 ms) were
 * most of what a `dtctl run --detach` cost (docs/BENCHMARKS.md, "submit
 * rate").  Each thread keeps the keyed HMAC states for the last key it used
 * (one key per process in practice), so a signature costs the message's
 * blocks plus two.
 */
struct hmac_state {
	struct dt_hmac_sha256 keyed;
	int have_key;
	size_t keylen;
	unsigned char key[DT_AUTH_KEY_MAX];
};

static __thread struct hmac_state hmac_tls;

void dt_sha256_hex(const void *data, size_t len, char *out)
{
	unsigned char md[DT_SHA256_LEN];

	dt_sha256(data ? data : "", len, md);
	to_hex(md, sizeof(md), out);
}

/* Hex HMAC-SHA256 of the parts joined by "\n", fed piece by piece (no formatted copy). */
static void hmac_parts_hex(const struct dt_auth_key *key, const char *const part[], int nr_parts,
			   char *out)
{
	struct hmac_state *h = &hmac_tls;
	unsigned char mac[DT_SHA256_LEN];
	struct dt_sha256 c;

	if (!h->have_key || h->keylen != key->len || dt_memcmp_ct(h->key, key->bytes, key->len)) {
		dt_hmac_sha256_key(&h->keyed, key->bytes, key->len);
		memcpy(h->key, key->bytes, key->len);
		h->keylen = key->len;
		h->have_key = 1;
	}
	c = h->keyed.inner;
	for (int i = 0; i < nr_parts; i++) {
		if (i)
			dt_sha256_update(&c, "\n", 1);
		dt_sha256_update(&c, part[i], strlen(part[i]));
	}
	dt_hmac_sha256_final(&h->keyed, &c, mac);
	to_hex(mac, sizeof(mac), out);
}

/*
 * The kernel's CSPRNG (what OpenSSL seeds from) rather than RAND_bytes():
 * instantiating OpenSSL's DRBG (fetching AES-CTR, seeding) cost about 1.5 ms
 * of CPU in every dtctl process for a 16-byte nonce.  getrandom(2) is in
 * every kernel dtctl supports (3.17 and later); there is no fallback.
 */
int dt_random_bytes(void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n) {
		ssize_t got = getrandom(p, n, 0);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return -1;
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

int dt_random_hex(char *out, size_t n)
{
	unsigned char buf[64];

	if (n > sizeof(buf) || dt_random_bytes(buf, n) < 0)
		return -1;
	to_hex(buf, n, out);
	return 0;
}

void dt_auth_sign(const struct dt_auth_key *key, const char *method, const char *path,
		  const char *timestamp, const char *nonce, const void *body, size_t len,
		  char *sig)
{
	char bodyhash[DT_SHA256_HEX];
	const char *const part[5] = { method, path, timestamp, nonce, bodyhash };

	dt_sha256_hex(body, len, bodyhash);
	hmac_parts_hex(key, part, 5, sig);
}

void dt_auth_mac_hex(const struct dt_auth_key *key, const char *msg, char *out)
{
	const char *const part[1] = { msg };

	hmac_parts_hex(key, part, 1, out);
}

int dt_auth_cap_parse(const char *text, struct dt_auth_cap *cap)
{
	char job[65], user[65], tail;
	long long uid, gid;

	if (!text || strlen(text) >= DT_CAP_MAX ||
	    sscanf(text, "%64[A-Za-z0-9._-] %64[A-Za-z0-9._-] %lld %lld%c", job, user, &uid, &gid,
		   &tail) != 4 || uid <= 0 || gid < 0 || uid > 0xfffffffeLL || gid > 0xfffffffeLL ||
	    user[0] == '-')
		return -1;
	memset(cap, 0, sizeof(*cap));
	snprintf(cap->job, sizeof(cap->job), "%s", job);
	snprintf(cap->user, sizeof(cap->user), "%s", user);
	cap->uid = uid;
	cap->gid = gid;
	/* one spelling only: what the key is derived over is what is parsed */
	{
		char again[DT_CAP_MAX];

		dt_auth_cap_format(cap, again);
		if (strcmp(again, text))
			return -1;
	}
	return 0;
}

void dt_auth_cap_format(const struct dt_auth_cap *cap, char *out)
{
	snprintf(out, DT_CAP_MAX, "%s %s %lld %lld", cap->job, cap->user, cap->uid, cap->gid);
}

int dt_auth_cap_key(const struct dt_auth_key *secret, const char *text,
		    struct dt_auth_key *out)
{
	struct dt_auth_cap cap;
	char msg[DT_CAP_MAX + 16], hex[DT_SHA256_HEX];

	if (dt_auth_cap_parse(text, &cap) < 0)
		return -1;
	snprintf(msg, sizeof(msg), "orted-cap\n%s", text);
	dt_auth_mac_hex(secret, msg, hex);
	return dt_auth_key_from_hex(out, hex);
}

int dt_auth_sign_request(const struct dt_auth_key *key, const char *method,
			 const char *path, const void *body, size_t len,
			 char ts[DT_TS_LEN], char nonce[DT_NONCE_HEX], char sig[DT_SHA256_HEX])
{
	if (dt_random_hex(nonce, 16) < 0)
		return error("cannot get random bytes for a request nonce");
	snprintf(ts, DT_TS_LEN, "%lld", (long long)time(NULL));
	dt_auth_sign(key, method, path, ts, nonce, body, len, sig);
	return 0;
}

static int nonce_ok(const char *s);

/* want (lower-case hex) = sig (64 hex digits, either case), in constant time */
static int sig_equal(const char *want, const char *sig)
{
	char got[DT_SHA256_HEX];

	for (int i = 0; i < 64; i++)
		got[i] = (char)tolower((unsigned char)sig[i]);
	got[64] = '\0';
	return dt_memcmp_ct(want, got, 64) == 0;
}

int dt_auth_sign_reply(const struct dt_auth_key *key, int status, const char *nonce,
		       const void *body, size_t len, char sig[DT_SHA256_HEX])
{
	char bodyhash[DT_SHA256_HEX], code[16];
	const char *const part[4] = { "reply", code, nonce, bodyhash };

	if (!nonce || !nonce_ok(nonce) || status < 100 || status > 999)
		return -1;
	snprintf(code, sizeof(code), "%d", status);
	dt_sha256_hex(body, len, bodyhash);
	hmac_parts_hex(key, part, 4, sig);
	return 0;
}

/* "reply\nSTATUS\nNONCE\nsha256(body)" into msg; -1 when nonce or status are not of the form */
static int reply_material(struct strbuf *msg, int status, const char *nonce, const void *body,
			  size_t len)
{
	char bodyhash[DT_SHA256_HEX];

	if (!nonce || !nonce_ok(nonce) || status < 100 || status > 999)
		return -1;
	dt_sha256_hex(body, len, bodyhash);
	strbuf_addf(msg, "reply\n%d\n%s\n%s", status, nonce, bodyhash);
	return 0;
}

int dt_auth_sign_reply_user(const struct dt_userkey *k, int status, const char *nonce,
			    const void *body, size_t len, char sig[129])
{
	struct strbuf msg = STRBUF_INIT;
	int ret = reply_material(&msg, status, nonce, body, len) < 0 ? -1 :
		dt_userkey_sign(k, msg.buf, msg.len, sig);

	strbuf_release(&msg);
	return ret;
}

int dt_auth_verify_reply_user(const unsigned char pub[32], int status, const char *nonce,
			      const void *body, size_t len, const char *sig)
{
	struct strbuf msg = STRBUF_INIT;
	int ret = reply_material(&msg, status, nonce, body, len) < 0 ? -1 :
		dt_userkey_verify(pub, msg.buf, msg.len, sig);

	strbuf_release(&msg);
	return ret;
}

int dt_auth_verify_reply(const struct dt_auth_key *key, int status, const char *nonce,
			 const void *body, size_t len, const char *sig)
{
	char want[DT_SHA256_HEX];

	if (!sig || strlen(sig) != 64 || dt_auth_sign_reply(key, status, nonce, body, len, want) < 0)
		return -1;
	return sig_equal(want, sig) ? 0 : -1;
}

const char *dt_auth_result_str(enum dt_auth_result r)
{
	switch (r) {
	case DT_AUTH_OK: return "ok";
	case DT_AUTH_MISSING: return "request is not signed (X-DT-Timestamp, X-DT-Nonce, X-DT-Signature)";
	case DT_AUTH_MALFORMED: return "malformed signature headers";
	case DT_AUTH_STALE: return "stale request: timestamp outside the allowed clock skew (check the clocks)";
	case DT_AUTH_BAD_SIGNATURE: return "bad signature (is the cluster secret the same on both sides?)";
	case DT_AUTH_REPLAY: return "replayed request (nonce already used)";
	case DT_AUTH_OVERLOAD: return "too many requests in the replay window";
	}
	return "unknown";
}

/* ------------------------------------------------------------ nonce cache */

/*
 * A chained hash set of nonces with their expiry.  Expired entries are swept
 * when the table reaches its sweep mark (amortised O(1) per insert); if it is
 * still full after a sweep the request is refused (DT_AUTH_OVERLOAD): better
 * than forgetting a nonce that could then be replayed.
 */
struct nonce_entry {
	struct nonce_entry *next;
	long long expires;
	char nonce[65];
};

struct dt_nonce_cache {
	pthread_mutex_t lock;
	struct nonce_entry **buckets;
	size_t nr_buckets, nr, max, sweep_at;
	int ttl;
};

static size_t hash_str(const char *s)
{
	size_t h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

struct dt_nonce_cache *dt_nonce_cache_new(int skew_s, size_t max_entries)
{
	struct dt_nonce_cache *nc = xcalloc(1, sizeof(*nc));

	pthread_mutex_init(&nc->lock, NULL);
	nc->nr_buckets = 4096;
	while (nc->nr_buckets < max_entries / 4 && nc->nr_buckets < (1u << 20))
		nc->nr_buckets *= 2;
	nc->buckets = xcalloc(nc->nr_buckets, sizeof(*nc->buckets));
	nc->max = max_entries ? max_entries : 1;
	nc->sweep_at = nc->max < 1024 ? nc->max : 1024;
	nc->ttl = 2 * skew_s;
	return nc;
}

void dt_nonce_cache_free(struct dt_nonce_cache *nc)
{
	if (!nc)
		return;
	for (size_t i = 0; i < nc->nr_buckets; i++) {
		struct nonce_entry *e = nc->buckets[i];

		while (e) {
			struct nonce_entry *n = e->next;

			free(e);
			e = n;
		}
	}
	free(nc->buckets);
	pthread_mutex_destroy(&nc->lock);
	free(nc);
}

static void sweep(struct dt_nonce_cache *nc, long long now_s)
{
	for (size_t i = 0; i < nc->nr_buckets; i++) {
		struct nonce_entry **pp = &nc->buckets[i];

		while (*pp) {
			struct nonce_entry *e = *pp;

			if (e->expires <= now_s) {
				*pp = e->next;
				free(e);
				nc->nr--;
			} else {
				pp = &e->next;
			}
		}
	}
	/* next sweep when the table has doubled, capped by the limit */
	nc->sweep_at = nc->nr * 2 > 1024 ? nc->nr * 2 : 1024;
	if (nc->sweep_at > nc->max)
		nc->sweep_at = nc->max;
}

int dt_nonce_cache_add(struct dt_nonce_cache *nc, const char *nonce, long long now_s)
{
	size_t b;
	struct nonce_entry *e;
	int ret = 0;

	if (strlen(nonce) >= sizeof(e->nonce))
		return -1;
	pthread_mutex_lock(&nc->lock);
	b = hash_str(nonce) & (nc->nr_buckets - 1);
	for (e = nc->buckets[b]; e; e = e->next) {
		if (!strcmp(e->nonce, nonce) && e->expires > now_s) {
			ret = 1;
			goto out;
		}
	}
	if (nc->nr >= nc->sweep_at)
		sweep(nc, now_s);
	if (nc->nr >= nc->max) {
		ret = -1;
		goto out;
	}
	e = xcalloc(1, sizeof(*e));
	memcpy(e->nonce, nonce, strlen(nonce) + 1);   /* length checked above */
	e->expires = now_s + nc->ttl;
	e->next = nc->buckets[b];
	nc->buckets[b] = e;
	nc->nr++;
out:
	pthread_mutex_unlock(&nc->lock);
	return ret;
}

size_t dt_nonce_cache_size(struct dt_nonce_cache *nc)
{
	size_t n;

	pthread_mutex_lock(&nc->lock);
	n = nc->nr;
	pthread_mutex_unlock(&nc->lock);
	return n;
}

/* ------------------------------------------------------------- verifying */

static int nonce_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 16 || n > 64)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_')
			return 0;
	return 1;
}

static int parse_ts(const char *s, long long *out)
{
	char *end;
	long long v;

	if (!*s || strlen(s) > 18)
		return -1;
	for (const char *p = s; *p; p++)
		if (*p < '0' || *p > '9')
			return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

enum dt_auth_result dt_auth_verify(const struct dt_auth_key *key, struct dt_nonce_cache *nc,
				   const char *method, const char *path,
				   const char *timestamp, const char *nonce, const char *sig,
				   const void *body, size_t len, long long now_s)
{
	char want[DT_SHA256_HEX];
	long long ts;
	int r;

	if (!timestamp || !nonce || !sig)
		return DT_AUTH_MISSING;
	if (parse_ts(timestamp, &ts) < 0 || !nonce_ok(nonce) || strlen(sig) != 64)
		return DT_AUTH_MALFORMED;
	if (ts > now_s + DT_AUTH_MAX_SKEW_S || ts < now_s - DT_AUTH_MAX_SKEW_S)
		return DT_AUTH_STALE;
	dt_auth_sign(key, method, path, timestamp, nonce, body, len, want);
	if (!sig_equal(want, sig))
		return DT_AUTH_BAD_SIGNATURE;
	r = dt_nonce_cache_add(nc, nonce, now_s);
	if (r > 0)
		return DT_AUTH_REPLAY;
	if (r < 0)
		return DT_AUTH_OVERLOAD;
	return DT_AUTH_OK;
}

/* method\npath\ntimestamp\nnonce\nhex(sha256(body)), as the HMAC signs it (protocol.h) */
static void canonical(struct strbuf *msg, const char *method, const char *path, const char *ts,
		      const char *nonce, const void *body, size_t len)
{
	char bodyhash[DT_SHA256_HEX];

	dt_sha256_hex(body, len, bodyhash);
	strbuf_addf(msg, "%s\n%s\n%s\n%s\n%s", method, path, ts, nonce, bodyhash);
}

int dt_auth_sign_user(const struct dt_userkey *k, const char *method, const char *path,
		      const void *body, size_t len, char ts[DT_TS_LEN], char nonce[DT_NONCE_HEX],
		      char sig[129])
{
	struct strbuf msg = STRBUF_INIT;
	int ret;

	if (dt_random_hex(nonce, 16) < 0)
		return error("cannot get random bytes for a request nonce");
	snprintf(ts, DT_TS_LEN, "%lld", (long long)time(NULL));
	canonical(&msg, method, path, ts, nonce, body, len);
	ret = dt_userkey_sign(k, msg.buf, msg.len, sig);
	strbuf_release(&msg);
	return ret < 0 ? error("cannot sign with the user's key") : 0;
}

enum dt_auth_result dt_auth_verify_user(const unsigned char pub[32], struct dt_nonce_cache *nc,
					const char *method, const char *path,
					const char *timestamp, const char *nonce, const char *sig,
					const void *body, size_t len, long long now_s)
{
	struct strbuf msg = STRBUF_INIT;
	long long ts;
	int r;

	if (!timestamp || !nonce || !sig)
		return DT_AUTH_MISSING;
	if (parse_ts(timestamp, &ts) < 0 || !nonce_ok(nonce) || strlen(sig) != 128)
		return DT_AUTH_MALFORMED;
	if (ts > now_s + DT_AUTH_MAX_SKEW_S || ts < now_s - DT_AUTH_MAX_SKEW_S)
		return DT_AUTH_STALE;
	canonical(&msg, method, path, timestamp, nonce, body, len);
	r = dt_userkey_verify(pub, msg.buf, msg.len, sig);
	strbuf_release(&msg);
	if (r < 0)
		return DT_AUTH_BAD_SIGNATURE;
	r = dt_nonce_cache_add(nc, nonce, now_s);
	if (r > 0)
		return DT_AUTH_REPLAY;
	if (r < 0)
		return DT_AUTH_OVERLOAD;
	return DT_AUTH_OK;
}
