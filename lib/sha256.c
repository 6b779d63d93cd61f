/*
 * sha256.c - SHA-256 and HMAC-SHA256 through Nettle (see sha256.h for why
 * not OpenSSL).  Nettle keeps HMAC's inner and outer states as plain
 * sha256 contexts, so the keyed states are copied per message.
 */
#include "sha256.h"
#include "usage.h"

#include <errno.h>

#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <string.h>
#include <unistd.h>

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

long long dt_sha256_fd(int fd, int copy_fd, char digest[DT_DIGEST_STR],
		       void (*progress)(long long done, void *data), void *data)
{
	enum { BLOCK = 1 << 20 };
	unsigned char *buf = xmalloc(BLOCK), md[DT_SHA256_LEN];
	struct dt_sha256 c;
	long long total = 0;

	dt_sha256_init(&c);
	for (;;) {
		ssize_t n = read(fd, buf, BLOCK);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto fail;
		if (n == 0)
			break;
		dt_sha256_update(&c, buf, (size_t)n);
		for (ssize_t off = 0; copy_fd >= 0 && off < n;) {
			ssize_t w = write(copy_fd, buf + off, (size_t)(n - off));

			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				goto fail;
			off += w;
		}
		total += n;
		if (progress)
			progress(total, data);
	}
	dt_sha256_final(&c, md);
	memcpy(digest, "sha256:", 7);
	for (size_t i = 0; i < DT_SHA256_LEN; i++) {
		digest[7 + 2 * i] = "0123456789abcdef"[md[i] >> 4];
		digest[8 + 2 * i] = "0123456789abcdef"[md[i] & 15];
	}
	digest[DT_DIGEST_STR - 1] = '\0';
	free(buf);
	return total;
fail:
	{
		int e = errno;

		free(buf);
		errno = e;
	}
	return -1;
}
