/*
 * sha256.c - SHA-256 and HMAC-SHA256 through Nettle (see sha256.h for why
 * not OpenSSL).  Nettle keeps HMAC's inner and outer states as plain
 * sha256 contexts, so the keyed states are copied per message.
 */
#include "sha256.h"

#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <string.h>

void dt_sha256_init(struct dt_sha256 *c)
{
	sha256_init(&c->c);
}

void dt_sha256_update(struct dt_sha256 *c, const void *data, size_t len)
{
	if (len)
		sha256_update(&c->c, len, data);
}

void dt_sha256_final(struct dt_sha256 *c, unsigned char md[DT_SHA256_LEN])
{
	sha256_digest(&c->c, DT_SHA256_LEN, md);
}

void dt_sha256(const void *data, size_t len, unsigned char md[DT_SHA256_LEN])
{
	struct dt_sha256 c;

	dt_sha256_init(&c);
	dt_sha256_update(&c, data, len);
	dt_sha256_final(&c, md);
}

void dt_hmac_sha256_key(struct dt_hmac_sha256 *h, const void *key, size_t len)
{
	struct hmac_sha256_ctx k;

	hmac_sha256_set_key(&k, len, key);
	h->inner.c = k.inner;
	h->outer.c = k.outer;
	memset(&k, 0, sizeof(k));
}

void dt_hmac_sha256_final(const struct dt_hmac_sha256 *h, struct dt_sha256 *msg,
			  unsigned char mac[DT_SHA256_LEN])
{
	unsigned char inner[DT_SHA256_LEN];
	struct dt_sha256 outer = h->outer;

	dt_sha256_final(msg, inner);
	dt_sha256_update(&outer, inner, sizeof(inner));
	dt_sha256_final(&outer, mac);
}

int dt_memcmp_ct(const void *a, const void *b, size_t n)
{
	return memeql_sec(a, b, n) ? 0 : 1;
}
