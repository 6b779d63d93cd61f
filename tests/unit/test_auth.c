/*
 * test_auth.c - request signing (lib/auth.h): the signed string, a known
 * vector computed independently (Python hmac), every refusal reason, the
 * nonce cache's replay window and limit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "auth.h"

#define EXPECTED_SIG "93e11c087be9a8ed5045c7fd00a0582b03183c6d0392826a22de11c84b220931"
#define SECRET "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static void test_sha256(void **state)
{
	char out[DT_SHA256_HEX];

	dt_sha256_hex("", 0, out);
	assert_string_equal(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	dt_sha256_hex(NULL, 0, out);
	assert_string_equal(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256),
		cmocka_unit_test(test_key),
		cmocka_unit_test(test_sign_vector),
		cmocka_unit_test(test_verify),
		cmocka_unit_test(test_nonce_cache),
		cmocka_unit_test(test_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
