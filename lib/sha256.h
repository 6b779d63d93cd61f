/*
 * sha256.h - SHA-256 and HMAC-SHA256 for request signing, through Nettle.
 *
 * Request signing (auth.c) uses these instead of OpenSSL so that a command
 * which only talks to dtsched or an agent does not map libcrypto: loading
 * and relocating it was about 1.6 ms of the 3 ms a `dtctl run --detach`
 * costs (docs/BENCHMARKS.md, "submit rate").  Nettle (Debian's libnettle8,
 * the low-level crypto library GnuTLS is built on) is a 0.3 MB library
 * with no initialisation; the hashing is its, not ours.  The contexts are
 * plain data: copy one to fork a hash, as HMAC does with its keyed states.
 */
#ifndef DT_SHA256_H
#define DT_SHA256_H

#include <stddef.h>
#include <stdint.h>
#include <nettle/sha2.h>

#define DT_SHA256_LEN SHA256_DIGEST_SIZE
#define DT_SHA256_BLOCK SHA256_BLOCK_SIZE

struct dt_sha256 {
	struct sha256_ctx c;
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

/*
 * Hash fd from where it is to its end as "sha256:<64 hex>" (an image's
 * content digest, docs/containers.md) into digest; every block read is also
 * written to copy_fd when it is >= 0 (what was hashed is what was copied),
 * and progress(bytes so far, data) is called after each block when given.
 * Returns the number of bytes, or -1 with errno set.
 */
#define DT_DIGEST_STR (7 + 2 * DT_SHA256_LEN + 1)
long long dt_sha256_fd(int fd, int copy_fd, char digest[DT_DIGEST_STR],
		       void (*progress)(long long done, void *data), void *data);

/* constant-time comparison of n bytes: 0 when equal */
int dt_memcmp_ct(const void *a, const void *b, size_t n);

#endif
