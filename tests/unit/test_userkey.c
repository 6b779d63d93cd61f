/*
 * test_userkey.c - users' own ed25519 keys (lib/userkey.h) and requests
 * signed with them (lib/auth.h, dt_auth_verify_user): RFC 8032's first test
 * vector, an OpenSSH key pair made by ssh-keygen (public line and private
 * file agree), every refusal (another key type, bad base64, a short blob,
 * a file that is not a key, a tampered request, another key, stale, replay).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "strbuf.h"
#include "userkey.h"

/* ssh-keygen -t ed25519 -N '' -C unit */
static const char priv_file[] =
	"-----BEGIN OPENSSH PRIVATE KEY-----\n"
	"b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
	"QyNTUxOQAAACC+GlTVAJPQ3U/V4YSF45eJKyms+jPf5vvy9wgfN4I5bQAAAIjrRKPj60Sj\n"
	"4wAAAAtzc2gtZWQyNTUxOQAAACC+GlTVAJPQ3U/V4YSF45eJKyms+jPf5vvy9wgfN4I5bQ\n"
	"AAAECyZNjPLbNnetGLg057tAL2W+Xv+IjlzYHR+fSYsVmoMb4aVNUAk9DdT9XhhIXjl4kr\n"
	"Kaz6M9/m+/L3CB83gjltAAAABHVuaXQB\n"
	"-----END OPENSSH PRIVATE KEY-----\n";
static const char pub_line[] =
	"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIL4aVNUAk9DdT9XhhIXjl4krKaz6M9/m+/L3CB83gjlt unit\n";

static void unhex(const char *h, unsigned char *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char b[3] = { h[2 * i], h[2 * i + 1], 0 };

		out[i] = (unsigned char)strtoul(b, NULL, 16);
	}
}

/* RFC 8032, 7.1, TEST 1: the empty message */
static void test_rfc8032_vector(void **state)
{
	struct dt_userkey k;
	char sig[DT_ED25519_SIG_HEX];
	static const char want[] =
		"e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555"
		"fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b";

	(void)state;
	unhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", k.seed, 32);
	unhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", k.pub, 32);
	assert_int_equal(dt_userkey_sign(&k, "", 0, sig), 0);
	assert_string_equal(sig, want);
	assert_int_equal(dt_userkey_verify(k.pub, "", 0, want), 0);
	assert_int_equal(dt_userkey_verify(k.pub, "x", 1, want), -1);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_openssh_pair(void **state)
{
	unsigned char pub[DT_ED25519_LEN];
	struct dt_userkey k;
	struct strbuf err = STRBUF_INIT, line = STRBUF_INIT;
	char path[] = "/tmp/test_userkey.XXXXXX";
	char sig[DT_ED25519_SIG_HEX];
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(dt_userkey_parse_pub(pub_line, pub, &err), 0);
	dt_userkey_format_pub(pub, &line);
	assert_string_equal(line.buf, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIL4aVNUAk9DdT9XhhIXjl4k"
			    "rKaz6M9/m+/L3CB83gjlt");
	write_file(path, priv_file);
	assert_int_equal(dt_userkey_load(path, &k, &err), 0);
	assert_memory_equal(k.pub, pub, DT_ED25519_LEN);
	assert_int_equal(dt_userkey_sign(&k, "hello", 5, sig), 0);
	assert_int_equal(dt_userkey_verify(pub, "hello", 5, sig), 0);

	/* not a key file: named */
	write_file(path, "hello\n");
	assert_int_equal(dt_userkey_load(path, &k, &err), -1);
	assert_non_null(strstr(err.buf, "not an OpenSSH private key file"));
	strbuf_reset(&err);
	unlink(path);
	assert_int_equal(dt_userkey_load(path, &k, &err), -1);
	assert_non_null(strstr(err.buf, "cannot read the key"));
	strbuf_release(&err);
	strbuf_release(&line);
}

static void test_bad_public_keys(void **state)
{
	unsigned char pub[DT_ED25519_LEN];
	struct strbuf err = STRBUF_INIT;
	static const char *const bad[][2] = {
		{ "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ user", "not an ed25519 public key" },
		{ "ssh-ed25519 !!!notbase64", "base64 is bad" },
		{ "ssh-ed25519", "base64 is bad" },
		/* a blob of the right type with a 31-byte key */
		{ "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAH74aVNUAk9DdT9XhhIXjl4krKaz6M9/m+/L3CB83gjk=",
		  "not an ed25519 key of 32 bytes" },
		{ "", "not an ed25519 public key" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		strbuf_reset(&err);
		assert_int_equal(dt_userkey_parse_pub(bad[i][0], pub, &err), -1);
		if (!strstr(err.buf, bad[i][1]))
			fail_msg("'%s': got '%s', want '%s'", bad[i][0], err.buf, bad[i][1]);
	}
	strbuf_release(&err);
}

static void test_verify_user(void **state)
{
	struct dt_userkey k, other;
	struct dt_nonce_cache *nc = dt_nonce_cache_new(60, 1000);
	char ts[DT_TS_LEN], nonce[DT_NONCE_HEX], sig[DT_ED25519_SIG_HEX];
	const char *body = "{\"x\":1}";
	long long now = (long long)time(NULL);
	char old[DT_TS_LEN];

	(void)state;
	unhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", k.seed, 32);
	unhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", k.pub, 32);
	memset(&other, 7, sizeof(other));
	assert_int_equal(dt_auth_sign_user(&k, "POST", "/v1/jobs", body, strlen(body), ts, nonce,
					   sig), 0);
	/* tampering, another key: refused, nothing recorded */
	assert_int_equal(dt_auth_verify_user(k.pub, nc, "POST", "/v1/jobz", ts, nonce, sig, body,
					     strlen(body), now), DT_AUTH_BAD_SIGNATURE);
	assert_int_equal(dt_auth_verify_user(k.pub, nc, "POST", "/v1/jobs", ts, nonce, sig, "{}",
					     2, now), DT_AUTH_BAD_SIGNATURE);
	assert_int_equal(dt_auth_verify_user(other.pub, nc, "POST", "/v1/jobs", ts, nonce, sig,
					     body, strlen(body), now), DT_AUTH_BAD_SIGNATURE);
	assert_int_equal(dt_nonce_cache_size(nc), 0);
	assert_int_equal(dt_auth_verify_user(k.pub, nc, "POST", "/v1/jobs", NULL, nonce, sig, body,
					     strlen(body), now), DT_AUTH_MISSING);
	assert_int_equal(dt_auth_verify_user(k.pub, nc, "POST", "/v1/jobs", ts, nonce, "abc", body,
					     strlen(body), now), DT_AUTH_MALFORMED);
	snprintf(old, sizeof(old), "%lld", now - 120);
	assert_int_equal(dt_auth_verify_user(k.pub, nc, "POST", "/v1/jobs", old, nonce, sig, body,
					     strlen(body), now), DT_AUTH_STALE);
	/* good once, then a replay */
	assert_int_equal(dt_auth_verify_user(k.pub, nc, "POST", "/v1/jobs", ts, nonce, sig, body,
					     strlen(body), now), DT_AUTH_OK);
	assert_int_equal(dt_auth_verify_user(k.pub, nc, "POST", "/v1/jobs", ts, nonce, sig, body,
					     strlen(body), now), DT_AUTH_REPLAY);
	dt_nonce_cache_free(nc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rfc8032_vector),
		cmocka_unit_test(test_openssh_pair),
		cmocka_unit_test(test_bad_public_keys),
		cmocka_unit_test(test_verify_user),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
