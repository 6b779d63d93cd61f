/*
 * sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) in plain C.
 *
 * Request signing (auth.c) uses these instead of OpenSSL so that a command
 * which only talks to dtsched or an agent does not map libcrypto: loading
 * and relocating it was about 1.6 ms of the 3 ms a `dtctl run --detach`
 * costs (docs/BENCHMARKS.md, "submit rate").  The contexts are plain data:
 * copy one to fork a hash, as HMAC does with its keyed states.
 */
#ifndef DT_SHA256_H
#define DT_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define DT_SHA256_LEN 32
#define DT_SHA256_BLOCK 64

struct dt_sha256 {
	uint32_t h[8];
	uint64_t len;                       /* bytes fed so far */
	unsigned char buf[DT_SHA256_BLOCK];
	size_t nbuf;
};

void dt_sha256_init(struct dt_sha256 *c);
void dt_sha256_update(struct dt_sha256 *c, const void *data, size_t len);
void dt_sha256_final(struct dt_sha256 *c, unsigned char md[DT_SHA256_LEN]);
void dt_sha256(const void *data, size_t len, unsigned char md[DT_SHA256_LEN]);

/* HMAC-SHA256 keyed once: the inner and outer states after the padded key block */
struct dt_hmac_sha256 {
	struct dt_sha256 inner, outer;
};

void dt_hmac_sha256_key(struct dt_hmac_sha256 *h, const void *key, size_t len);
/* start a message: a copy of the keyed inner state, fed with update, ended with ..._final */
void dt_hmac_sha256_final(const struct dt_hmac_sha256 *h, struct dt_sha256 *msg,
			  unsigned char mac[DT_SHA256_LEN]);

/* constant-time comparison of n bytes: 0 when equal */
int dt_memcmp_ct(const void *a, const void *b, size_t n);

#endif
