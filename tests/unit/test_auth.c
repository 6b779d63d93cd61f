/*
 * test_auth.c - request signing (lib/auth.h): the signed string, a known
 * vector computed independently (Python hmac), every refusal reason, the
 * nonce cache's replay window and limit, and the per-thread HMAC states
 * (re-keying, keys longer than a block, many calls, several threads) against
 * OpenSSL's one-shot HMAC().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth.h"
#include "userkey.h"
#include "sha256.h"

#define EXPECTED_SIG "93e11c087be9a8ed5045c7fd00a0582b03183c6d0392826a22de11c84b220931"
#define SECRET "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static void test_sha256(void **state)
{
	char out[DT_SHA256_HEX], *a;

	dt_sha256_hex("", 0, out);
	assert_string_equal(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	dt_sha256_hex(NULL, 0, out);
	assert_string_equal(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	dt_sha256_hex("abc", 3, out);
	assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	/* many blocks, then a short one again on the same (per-thread) context */
	a = malloc(1000000);
	assert_non_null(a);
	memset(a, 'a', 1000000);
	dt_sha256_hex(a, 1000000, out);
	assert_string_equal(out, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	/* every length around the block and padding boundaries, fed in uneven pieces */
	for (size_t len = 0; len < 300; len++) {
		unsigned char md[EVP_MAX_MD_SIZE], mine[DT_SHA256_LEN];
		unsigned int n = 0;
		struct dt_sha256 c;

		for (size_t i = 0; i < len; i++)
			a[i] = (char)(i * 7 + len);
		EVP_Digest(a, len, md, &n, EVP_sha256(), NULL);
		dt_sha256_init(&c);
		for (size_t off = 0, step = 1; off < len; off += step, step = step * 3 % 67 + 1)
			dt_sha256_update(&c, a + off, off + step > len ? len - off : step);
		dt_sha256_final(&c, mine);
		assert_memory_equal(mine, md, DT_SHA256_LEN);
	}
	free(a);
	dt_sha256_hex("abc", 3, out);
	assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_key(void **state)
{
	struct dt_auth_key k;

	assert_int_equal(dt_auth_key_from_hex(&k, "  " SECRET "\n"), 0);
	assert_int_equal(k.len, 32);
	assert_int_equal(k.bytes[1], 0x11);
	assert_int_equal(dt_auth_key_from_hex(&k, "abc"), -1);     /* odd length */
	assert_int_equal(dt_auth_key_from_hex(&k, "zz"), -1);      /* not hex */
	assert_int_equal(dt_auth_key_from_hex(&k, ""), -1);
}

/*
 * Vector from Python:
 *   hmac.new(bytes.fromhex(SECRET), "POST\n/v1/tasks\n1700000000\n"
 *            "0123456789abcdef0123456789abcdef\n" + sha256(b'{"argv":["true"]}'),
 *            sha256).hexdigest()
 */
static void test_sign_vector(void **state)
{
	struct dt_auth_key k;
	char sig[DT_SHA256_HEX];
	const char *body = "{\"argv\":[\"true\"]}";

	dt_auth_key_from_hex(&k, SECRET);
	dt_auth_sign(&k, "POST", "/v1/tasks", "1700000000", "0123456789abcdef0123456789abcdef",
		     body, strlen(body), sig);
	assert_string_equal(sig, EXPECTED_SIG);
}

/*
 * A reply's signature (protocol.h), vector from Python:
 *   hmac.new(bytes.fromhex(SECRET), "reply\n200\n0123456789abcdef0123456789abcdef\n"
 *            + sha256(b'{"protocol":3,"jobs":[]}\n'), sha256).hexdigest()
 * and what it is bound to: the status, the nonce, the body, the key.
 */
static void test_reply_signature(void **state)
{
	static const char body[] = "{\"protocol\":3,\"jobs\":[]}\n";
	static const char nonce[] = "0123456789abcdef0123456789abcdef";
	struct dt_auth_key k, other;
	char sig[DT_SHA256_HEX];
	size_t n = strlen(body);

	dt_auth_key_from_hex(&k, SECRET);
	dt_auth_key_from_hex(&other, "ff" SECRET "ff");
	assert_int_equal(dt_auth_sign_reply(&k, 200, nonce, body, n, sig), 0);
	assert_string_equal(sig, "7886b9365b541191b4d47de29d176e1d70ab050a01111b8af6a0b3f4f3244fa6");
	assert_int_equal(dt_auth_verify_reply(&k, 200, nonce, body, n, sig), 0);
	assert_int_equal(dt_auth_verify_reply(&k, 201, nonce, body, n, sig), -1);
	assert_int_equal(dt_auth_verify_reply(&k, 200, "0123456789abcdef0123456789abcdee", body, n,
					      sig), -1);
	assert_int_equal(dt_auth_verify_reply(&k, 200, nonce, body, n - 1, sig), -1);
	assert_int_equal(dt_auth_verify_reply(&other, 200, nonce, body, n, sig), -1);
	assert_int_equal(dt_auth_verify_reply(&k, 200, nonce, body, n, NULL), -1);
	assert_int_equal(dt_auth_verify_reply(&k, 200, nonce, body, n, "abc"), -1);
	/* a request refused for its nonce gets an unsigned reply */
	assert_int_equal(dt_auth_sign_reply(&k, 401, "short", body, n, sig), -1);
	assert_int_equal(dt_auth_sign_reply(&k, 401, "0123456789abcdef\nx", body, n, sig), -1);
	assert_int_equal(dt_auth_sign_reply(&k, 401, NULL, body, n, sig), -1);
}

static void test_verify(void **state)
{
	struct dt_auth_key k, other;
	struct dt_nonce_cache *nc = dt_nonce_cache_new(60, 1000);
	char ts[DT_TS_LEN], nonce[DT_NONCE_HEX], sig[DT_SHA256_HEX], upper[DT_SHA256_HEX];
	const char *body = "{\"x\":1}";
	long long now = (long long)time(NULL);

	dt_auth_key_from_hex(&k, SECRET);
	dt_auth_key_from_hex(&other, "ff" SECRET "ff");
	assert_int_equal(dt_auth_sign_request(&k, "POST", "/v1/tasks", body, strlen(body),
					      ts, nonce, sig), 0);
	/* tampering with anything signed breaks the MAC, and records nothing */
	assert_int_equal(dt_auth_verify(&k, nc, "GET", "/v1/tasks", ts, nonce, sig, body,
					strlen(body), now), DT_AUTH_BAD_SIGNATURE);
	assert_int_equal(dt_auth_verify(&k, nc, "POST", "/v1/task", ts, nonce, sig, body,
					strlen(body), now), DT_AUTH_BAD_SIGNATURE);
	assert_int_equal(dt_auth_verify(&k, nc, "POST", "/v1/tasks", ts, nonce, sig, "{\"x\":2}",
					7, now), DT_AUTH_BAD_SIGNATURE);
	assert_int_equal(dt_auth_verify(&other, nc, "POST", "/v1/tasks", ts, nonce, sig, body,
					strlen(body), now), DT_AUTH_BAD_SIGNATURE);
	assert_int_equal(dt_nonce_cache_size(nc), 0);
	/* missing and malformed headers */
	assert_int_equal(dt_auth_verify(&k, nc, "POST", "/v1/tasks", NULL, nonce, sig, body,
					strlen(body), now), DT_AUTH_MISSING);
	assert_int_equal(dt_auth_verify(&k, nc, "POST", "/v1/tasks", "12x", nonce, sig, body,
					strlen(body), now), DT_AUTH_MALFORMED);
	assert_int_equal(dt_auth_verify(&k, nc, "POST", "/v1/tasks", ts, "short", sig, body,
					strlen(body), now), DT_AUTH_MALFORMED);
	assert_int_equal(dt_auth_verify(&k, nc, "POST", "/v1/tasks", ts, nonce, "abc", body,
					strlen(body), now), DT_AUTH_MALFORMED);
	/* stale either way */
	assert_int_equal(dt_auth_verify(&k, nc, "POST", "/v1/tasks", ts, nonce, sig, body,
					strlen(body), now + 61), DT_AUTH_STALE);
	assert_int_equal(dt_auth_verify(&k, nc, "POST", "/v1/tasks", ts, nonce, sig, body,
					strlen(body), now - 61), DT_AUTH_STALE);
	/* good once (upper-case hex accepted), then a replay */
	for (int i = 0; i < 64; i++)
		upper[i] = (char)(sig[i] >= 'a' ? sig[i] - 32 : sig[i]);
	upper[64] = '\0';
	assert_int_equal(dt_auth_verify(&k, nc, "POST", "/v1/tasks", ts, nonce, upper, body,
					strlen(body), now), DT_AUTH_OK);
	assert_int_equal(dt_auth_verify(&k, nc, "POST", "/v1/tasks", ts, nonce, sig, body,
					strlen(body), now), DT_AUTH_REPLAY);
	assert_string_not_equal(dt_auth_result_str(DT_AUTH_REPLAY), "ok");
	dt_nonce_cache_free(nc);
}

/* The signature computed the slow, obvious way: format the string, one-shot HMAC(). */
static void ref_sign(const struct dt_auth_key *k, const char *method, const char *path,
		     const char *ts, const char *nonce, const char *body, char *sig)
{
	char bodyhash[DT_SHA256_HEX], msg[512];
	unsigned char md[EVP_MAX_MD_SIZE], bmd[EVP_MAX_MD_SIZE];
	unsigned int n = 0, bn = 0;

	EVP_Digest(body, strlen(body), bmd, &bn, EVP_sha256(), NULL);
	for (unsigned i = 0; i < bn; i++)
		snprintf(bodyhash + 2 * i, 3, "%02x", bmd[i]);
	snprintf(msg, sizeof(msg), "%s\n%s\n%s\n%s\n%s", method, path, ts, nonce, bodyhash);
	HMAC(EVP_sha256(), k->bytes, (int)k->len, (const unsigned char *)msg, strlen(msg), md, &n);
	for (unsigned i = 0; i < n; i++)
		snprintf(sig + 2 * i, 3, "%02x", md[i]);
}

/*
 * The thread's HMAC context is keyed once and restarted per call: many calls,
 * keys of other lengths in between, must each give the one-shot result.
 */
static void test_sign_cached(void **state)
{
	struct dt_auth_key k, other, short_key, long_key;
	char sig[DT_SHA256_HEX], want[DT_SHA256_HEX], body[64], nonce[40];
	const struct dt_auth_key *keys[4] = { &k, &other, &short_key, &long_key };

	dt_auth_key_from_hex(&k, SECRET);
	dt_auth_key_from_hex(&other, "ff" SECRET "ff");
	dt_auth_key_from_hex(&short_key, "0011");
	/* 104 bytes: longer than SHA-256's block, so HMAC hashes the key first */
	dt_auth_key_from_hex(&long_key, SECRET SECRET SECRET "0011223344556677");
	assert_int_equal(long_key.len, 104);
	for (int i = 0; i < 300; i++) {
		const struct dt_auth_key *key = keys[i % 4];

		snprintf(body, sizeof(body), "{\"seq\":%d}", i);
		snprintf(nonce, sizeof(nonce), "nonce-%016d", i);
		dt_auth_sign(key, "POST", "/v1/heartbeat", "1700000000", nonce, body,
			     strlen(body), sig);
		ref_sign(key, "POST", "/v1/heartbeat", "1700000000", nonce, body, want);
		assert_string_equal(sig, want);
		/* the same request twice in a row: the context restarts cleanly */
		dt_auth_sign(key, "POST", "/v1/heartbeat", "1700000000", nonce, body,
			     strlen(body), sig);
		assert_string_equal(sig, want);
	}
	/* and the independent vector still holds after all that re-keying */
	dt_auth_sign(&k, "POST", "/v1/tasks", "1700000000", "0123456789abcdef0123456789abcdef",
		     "{\"argv\":[\"true\"]}", 17, sig);
	assert_string_equal(sig, EXPECTED_SIG);
	/* a key that differs only in its last byte is not taken for the cached one */
	other = k;
	other.bytes[31] ^= 1;
	dt_auth_sign(&other, "POST", "/v1/tasks", "1700000000",
		     "0123456789abcdef0123456789abcdef", "{\"argv\":[\"true\"]}", 17, sig);
	assert_string_not_equal(sig, EXPECTED_SIG);
}

struct sign_thread {
	pthread_t th;
	int id, bad;
	struct dt_nonce_cache *nc;
};

/* each thread signs and verifies with two keys; all share one nonce cache */
static void *sign_thread_run(void *data)
{
	struct sign_thread *t = data;
	struct dt_auth_key k, other;
	char ts[DT_TS_LEN], nonce[DT_NONCE_HEX], sig[DT_SHA256_HEX], want[DT_SHA256_HEX];
	char body[64];
	long long now = (long long)time(NULL);

	dt_auth_key_from_hex(&k, SECRET);
	dt_auth_key_from_hex(&other, "ff" SECRET "ff");
	for (int i = 0; i < 200; i++) {
		const struct dt_auth_key *key = (i + t->id) % 2 ? &k : &other;
		const struct dt_auth_key *wrong = key == &k ? &other : &k;

		snprintf(body, sizeof(body), "{\"thread\":%d,\"i\":%d}", t->id, i);
		if (dt_auth_sign_request(key, "POST", "/v1/heartbeat", body, strlen(body),
					 ts, nonce, sig) < 0) {
			t->bad++;
			continue;
		}
		ref_sign(key, "POST", "/v1/heartbeat", ts, nonce, body, want);
		t->bad += strcmp(sig, want) != 0;
		t->bad += dt_auth_verify(wrong, t->nc, "POST", "/v1/heartbeat", ts, nonce, sig,
					 body, strlen(body), now) != DT_AUTH_BAD_SIGNATURE;
		t->bad += dt_auth_verify(key, t->nc, "POST", "/v1/heartbeat", ts, nonce, sig,
					 body, strlen(body), now) != DT_AUTH_OK;
	}
	return NULL;
}

static void test_sign_threads(void **state)
{
	struct sign_thread th[8];
	struct dt_nonce_cache *nc = dt_nonce_cache_new(60, 10000);

	for (int i = 0; i < 8; i++) {
		th[i].id = i;
		th[i].bad = 0;
		th[i].nc = nc;
		assert_int_equal(pthread_create(&th[i].th, NULL, sign_thread_run, &th[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i].th, NULL);
		assert_int_equal(th[i].bad, 0);
	}
	assert_int_equal(dt_nonce_cache_size(nc), 8 * 200);
	dt_nonce_cache_free(nc);
}

static void test_nonce_cache(void **state)
{
	struct dt_nonce_cache *nc = dt_nonce_cache_new(60, 2000);
	char n[40];

	assert_int_equal(dt_nonce_cache_add(nc, "aaaaaaaaaaaaaaaa", 1000), 0);
	assert_int_equal(dt_nonce_cache_add(nc, "aaaaaaaaaaaaaaaa", 1100), 1);
	/* remembered for twice the skew, then forgotten (a request that old is stale anyway) */
	assert_int_equal(dt_nonce_cache_add(nc, "aaaaaaaaaaaaaaaa", 1121), 0);
	/* the limit: refuse rather than forget */
	for (int i = 0; i < 2000; i++) {
		snprintf(n, sizeof(n), "nonce-%010d", i);
		assert_int_equal(dt_nonce_cache_add(nc, n, 2000), 0);
	}
	assert_int_equal(dt_nonce_cache_add(nc, "one-too-many-nonce", 2000), -1);
	/* once the window has passed the old ones are swept */
	assert_int_equal(dt_nonce_cache_add(nc, "one-too-many-nonce", 2200), 0);
	assert_true(dt_nonce_cache_size(nc) < 10);
	dt_nonce_cache_free(nc);
}

static void test_random(void **state)
{
	char a[DT_NONCE_HEX], b[DT_NONCE_HEX];

	assert_int_equal(dt_random_hex(a, 16), 0);
	assert_int_equal(dt_random_hex(b, 16), 0);
	assert_int_equal(strlen(a), 32);
	assert_string_not_equal(a, b);
}

/* a job's capability (auth.h dt_auth_cap): one spelling, no root, a key per CAP */
static void test_cap(void **state)
{
	struct dt_auth_key secret, k1, k2;
	struct dt_auth_cap cap;
	char text[DT_CAP_MAX];
	static const char *const bad[] = {
		"j-1 alice 1000", "j-1 alice 0 0", "j-1 alice 1000 -1", "j-1 alice 1000 1000 x",
		"j-1  alice 1000 1000", "j-1 alice 01000 1000", "j-1 -alice 1000 1000",
		"j/1 alice 1000 1000", "j-1 al ice 1000 1000", "", NULL,
	};

	(void)state;
	assert_int_equal(dt_auth_key_from_hex(&secret, "00112233445566778899aabbccddeeff"), 0);
	assert_int_equal(dt_auth_cap_parse("j-000042 alice 1000 1001", &cap), 0);
	assert_string_equal(cap.job, "j-000042");
	assert_string_equal(cap.user, "alice");
	assert_true(cap.uid == 1000 && cap.gid == 1001);
	dt_auth_cap_format(&cap, text);
	assert_string_equal(text, "j-000042 alice 1000 1001");
	for (int i = 0; bad[i]; i++) {
		assert_int_equal(dt_auth_cap_parse(bad[i], &cap), -1);
		assert_int_equal(dt_auth_cap_key(&secret, bad[i], &k1), -1);
	}
	assert_int_equal(dt_auth_cap_parse(NULL, &cap), -1);
	/* the key is bound to every field, and is not the secret */
	assert_int_equal(dt_auth_cap_key(&secret, "j-1 alice 1000 1000", &k1), 0);
	assert_int_equal(dt_auth_cap_key(&secret, "j-1 bob 1000 1000", &k2), 0);
	assert_true(k1.len == 32 && k2.len == 32);
	assert_memory_not_equal(k1.bytes, k2.bytes, 32);
	assert_memory_not_equal(k1.bytes, secret.bytes, secret.len);
	assert_int_equal(dt_auth_cap_key(&secret, "j-1 alice 1000 1001", &k2), 0);
	assert_memory_not_equal(k1.bytes, k2.bytes, 32);
	assert_int_equal(dt_auth_cap_key(&secret, "j-1 alice 1000 1000", &k2), 0);
	assert_memory_equal(k1.bytes, k2.bytes, 32);
}

/* dtsched's own key signs replies to key users (auth.h dt_auth_sign_reply_user) */
static void test_reply_user(void **state)
{
	static const char nonce[] = "00112233445566778899aabbccddeeff";
	struct dt_userkey k, other;
	char sig[DT_ED25519_SIG_HEX];

	(void)state;
	memset(&k, 0, sizeof(k));
	memset(&other, 0, sizeof(other));
	memset(k.seed, 7, sizeof(k.seed));
	memset(other.seed, 8, sizeof(other.seed));
	assert_int_equal(dt_userkey_from_seed(&k), 0);
	assert_int_equal(dt_userkey_from_seed(&other), 0);
	assert_memory_not_equal(k.pub, other.pub, DT_ED25519_LEN);
	assert_int_equal(dt_auth_sign_reply_user(&k, 200, nonce, "{}", 2, sig), 0);
	assert_int_equal(strlen(sig), 128);
	assert_int_equal(dt_auth_verify_reply_user(k.pub, 200, nonce, "{}", 2, sig), 0);
	/* another status, body, nonce or key: refused */
	assert_int_equal(dt_auth_verify_reply_user(k.pub, 201, nonce, "{}", 2, sig), -1);
	assert_int_equal(dt_auth_verify_reply_user(k.pub, 200, nonce, "[]", 2, sig), -1);
	assert_int_equal(dt_auth_verify_reply_user(k.pub, 200, "ffeeddccbbaa99887766554433221100",
						   "{}", 2, sig), -1);
	assert_int_equal(dt_auth_verify_reply_user(other.pub, 200, nonce, "{}", 2, sig), -1);
	assert_int_equal(dt_auth_verify_reply_user(k.pub, 200, nonce, "{}", 2, NULL), -1);
	/* no nonce of the request form: nothing is signed */
	assert_int_equal(dt_auth_sign_reply_user(&k, 200, "x", "{}", 2, sig), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256),
		cmocka_unit_test(test_key),
		cmocka_unit_test(test_sign_vector),
		cmocka_unit_test(test_verify),
		cmocka_unit_test(test_reply_signature),
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_reply_user),
		cmocka_unit_test(test_sign_cached),
		cmocka_unit_test(test_sign_threads),
		cmocka_unit_test(test_nonce_cache),
		cmocka_unit_test(test_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
