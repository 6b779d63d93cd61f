/*
 * auth.c - HMAC-SHA256 request signing, verification and the nonce cache
 * (see auth.h for the order of checks and protocol.h for the signed string).
 */
#include "auth.h"
#include "protocol.h"
#include "secret.h"
#include "strbuf.h"
#include "usage.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

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
 * Per-thread OpenSSL state.  OpenSSL 3 looks an algorithm up by name (a
 * locked property query, then a fresh context) on every one-shot call such
 * as SHA256() or HMAC(): with 1000 heartbeats a second that was most of the
 * cost of checking a signature.  SHA-256 and HMAC are fetched once per
 * process, and each thread keeps a digest context and an HMAC context keyed
 * with the last key it used (re-keyed only when another key comes along;
 * EVP_MAC_init with a NULL key restarts with the key it holds).  Contexts are
 * never shared between threads, so no lock is needed after the fetch; they
 * are freed when their thread exits.  If anything here fails, the callers
 * fall back to the one-shot calls.
 */
struct auth_tls {
	EVP_MD_CTX *md;
	EVP_MAC_CTX *mac;
	size_t keylen;                      /* of the key mac holds; 0 = not keyed */
	unsigned char key[DT_AUTH_KEY_MAX];
};

static pthread_once_t algs_once = PTHREAD_ONCE_INIT;
static pthread_key_t tls_key;
static int tls_ok;
static EVP_MD *sha256_md;                   /* process lifetime */
static EVP_MAC *hmac_mac;

static void tls_free(void *data)
{
	struct auth_tls *t = data;

	EVP_MD_CTX_free(t->md);
	EVP_MAC_CTX_free(t->mac);
	OPENSSL_cleanse(t->key, sizeof(t->key));
	free(t);
}

/*
 * OPENSSL_INIT_NO_LOAD_CONFIG: reading the system's openssl.cnf (and
 * activating the providers it names) was about 1.5 ms of every dtctl
 * command's 6 ms; SHA-256 and HMAC are in the default provider, which
 * OpenSSL loads without any config.  A no-op when OpenSSL was already
 * initialised (libssh2 in `dtctl init`), so SSH keeps the system's settings.
 */
static void algs_fetch(void)
{
	OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, NULL);
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
	hmac_mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	tls_ok = sha256_md && hmac_mac && !pthread_key_create(&tls_key, tls_free);
}

/* This thread's contexts (created on first use); NULL if OpenSSL refused. */
static struct auth_tls *auth_tls_get(void)
{
	struct auth_tls *t;

	pthread_once(&algs_once, algs_fetch);
	if (!tls_ok)
		return NULL;
	t = pthread_getspecific(tls_key);
	if (t)
		return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->md = EVP_MD_CTX_new();
	t->mac = EVP_MAC_CTX_new(hmac_mac);
	if (!t->md || !t->mac || pthread_setspecific(tls_key, t)) {
		tls_free(t);
		return NULL;
	}
	return t;
}

static int sha256_cached(const void *data, size_t len, unsigned char *md)
{
	struct auth_tls *t = auth_tls_get();
	unsigned int n = 0;

	return t && EVP_DigestInit_ex2(t->md, sha256_md, NULL) &&
		EVP_DigestUpdate(t->md, data, len) && EVP_DigestFinal_ex(t->md, md, &n) &&
		n == SHA256_DIGEST_LENGTH ? 0 : -1;
}

void dt_sha256_hex(const void *data, size_t len, char *out)
{
	unsigned char md[SHA256_DIGEST_LENGTH];

	if (!data)
		data = "";
	if (sha256_cached(data, len, md) < 0)
		SHA256(data, len, md);
	to_hex(md, sizeof(md), out);
}

/*
 * The kernel's CSPRNG (what OpenSSL seeds from) rather than RAND_bytes():
 * instantiating OpenSSL's DRBG (fetching AES-CTR, seeding) cost about 1.5 ms
 * of CPU in every dtctl process for a 16-byte nonce.  RAND_bytes() stays as
 * the fallback for kernels without getrandom(2).
 */
int dt_random_bytes(void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n) {
		ssize_t got = getrandom(p, n, 0);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return RAND_bytes(p, (int)n) == 1 ? 0 : -1;
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

/*
 * HMAC of the signed string (protocol.h) with this thread's keyed context,
 * fed piece by piece (no formatted copy); -1 if OpenSSL refused.
 */
static int hmac_cached(const struct dt_auth_key *key, const char *const part[], int nr_parts,
		       unsigned char *mac, size_t *maclen)
{
	struct auth_tls *t = auth_tls_get();
	OSSL_PARAM params[2];

	if (!t)
		return -1;
	if (t->keylen != key->len || CRYPTO_memcmp(t->key, key->bytes, key->len)) {
		params[0] = OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0);
		params[1] = OSSL_PARAM_construct_end();
		t->keylen = 0;
		if (!EVP_MAC_init(t->mac, key->bytes, key->len, params))
			return -1;
		memcpy(t->key, key->bytes, key->len);
		t->keylen = key->len;
	} else if (!EVP_MAC_init(t->mac, NULL, 0, NULL)) {
		t->keylen = 0;
		return -1;
	}
	for (int i = 0; i < nr_parts; i++) {
		if ((i && !EVP_MAC_update(t->mac, (const unsigned char *)"\n", 1)) ||
		    !EVP_MAC_update(t->mac, (const unsigned char *)part[i], strlen(part[i]))) {
			t->keylen = 0;
			return -1;
		}
	}
	if (!EVP_MAC_final(t->mac, mac, maclen, EVP_MAX_MD_SIZE)) {
		t->keylen = 0;
		return -1;
	}
	return 0;
}

/* The same with the one-shot call (when the cached contexts are unavailable). */
static void hmac_oneshot(const struct dt_auth_key *key, const char *const part[], int nr_parts,
			 unsigned char *mac, size_t *maclen)
{
	struct strbuf msg = STRBUF_INIT;
	unsigned int n = 0;

	for (int i = 0; i < nr_parts; i++)
		strbuf_addf(&msg, "%s%s", i ? "\n" : "", part[i]);
	HMAC(EVP_sha256(), key->bytes, (int)key->len, (const unsigned char *)msg.buf, msg.len,
	     mac, &n);
	*maclen = n;
	strbuf_release(&msg);
}

/* Hex HMAC of the parts joined by "\n": the thread's cached context, else one-shot. */
static void hmac_parts_hex(const struct dt_auth_key *key, const char *const part[], int nr_parts,
			   char *out)
{
	unsigned char mac[EVP_MAX_MD_SIZE];
	size_t maclen = 0;

	if (hmac_cached(key, part, nr_parts, mac, &maclen) < 0)
		hmac_oneshot(key, part, nr_parts, mac, &maclen);
	to_hex(mac, maclen, out);
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
	char want[DT_SHA256_HEX], got[DT_SHA256_HEX];
	long long ts;
	int r;

	if (!timestamp || !nonce || !sig)
		return DT_AUTH_MISSING;
	if (parse_ts(timestamp, &ts) < 0 || !nonce_ok(nonce) || strlen(sig) != 64)
		return DT_AUTH_MALFORMED;
	if (ts > now_s + DT_AUTH_MAX_SKEW_S || ts < now_s - DT_AUTH_MAX_SKEW_S)
		return DT_AUTH_STALE;
	dt_auth_sign(key, method, path, timestamp, nonce, body, len, want);
	/* accept upper-case hex from other clients: compare lower-cased */
	for (int i = 0; i < 64; i++)
		got[i] = (char)tolower((unsigned char)sig[i]);
	got[64] = '\0';
	if (CRYPTO_memcmp(want, got, 64) != 0)
		return DT_AUTH_BAD_SIGNATURE;
	r = dt_nonce_cache_add(nc, nonce, now_s);
	if (r > 0)
		return DT_AUTH_REPLAY;
	if (r < 0)
		return DT_AUTH_OVERLOAD;
	return DT_AUTH_OK;
}
