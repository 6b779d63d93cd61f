/*
 * userkey.c - users' ed25519 keys in OpenSSH's formats (see userkey.h).
 */
#include "userkey.h"
#include "knownhosts.h"
#include "safefile.h"
#include "usage.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "ssh-dl.h"   /* after the OpenSSL headers: their calls go through dlopen */

static const char key_type[] = "ssh-ed25519";

/* SSH wire strings (RFC 4251): uint32 length, then the bytes */
struct wire {
	const unsigned char *p, *end;
};

static int wire_string(struct wire *w, const unsigned char **s, size_t *len)
{
	uint32_t n;

	if (w->end - w->p < 4)
		return -1;
	n = (uint32_t)w->p[0] << 24 | (uint32_t)w->p[1] << 16 | (uint32_t)w->p[2] << 8 | w->p[3];
	w->p += 4;
	if ((size_t)(w->end - w->p) < n)
		return -1;
	*s = w->p;
	*len = n;
	w->p += n;
	return 0;
}

static int wire_is(struct wire *w, const char *want)
{
	const unsigned char *s;
	size_t n;

	return !wire_string(w, &s, &n) && n == strlen(want) && !memcmp(s, want, n);
}

/* "ssh-ed25519" + 32 bytes, the public key blob, into pub */
static int blob_pub(struct wire *w, unsigned char pub[DT_ED25519_LEN])
{
	const unsigned char *s;
	size_t n;

	if (!wire_is(w, key_type) || wire_string(w, &s, &n) || n != DT_ED25519_LEN)
		return -1;
	memcpy(pub, s, n);
	return 0;
}

static void put_string(struct strbuf *sb, const void *s, size_t n)
{
	unsigned char len[4] = { (unsigned char)(n >> 24), (unsigned char)(n >> 16),
				 (unsigned char)(n >> 8), (unsigned char)n };

	strbuf_add(sb, len, 4);
	strbuf_add(sb, s, n);
}

int dt_userkey_parse_pub(const char *line, unsigned char pub[DT_ED25519_LEN], struct strbuf *err)
{
	struct strbuf blob = STRBUF_INIT;
	const char *p = line, *b64;
	size_t n;
	struct wire w;
	int ret = -1;

	while (isspace((unsigned char)*p))
		p++;
	n = strcspn(p, " \t\r\n");
	if (n != strlen(key_type) || memcmp(p, key_type, n)) {
		strbuf_addf(err, "not an ed25519 public key (it must start with '%s'; make one with "
			    "'ssh-keygen -t ed25519')", key_type);
		return -1;
	}
	p += n;
	p += strspn(p, " \t");
	b64 = p;
	n = strcspn(p, " \t\r\n");
	w.p = NULL;
	if (!n || base64_decode(&blob, b64, n) < 0) {
		strbuf_addstr(err, "the key's base64 is bad");
		goto out;
	}
	w.p = (const unsigned char *)blob.buf;
	w.end = w.p + blob.len;
	if (blob_pub(&w, pub) < 0 || w.p != w.end) {
		strbuf_addstr(err, "the key's blob is not an ed25519 key of 32 bytes");
		goto out;
	}
	ret = 0;
out:
	strbuf_release(&blob);
	return ret;
}

static void pub_blob(const unsigned char pub[DT_ED25519_LEN], struct strbuf *blob)
{
	put_string(blob, key_type, strlen(key_type));
	put_string(blob, pub, DT_ED25519_LEN);
}

void dt_userkey_format_pub(const unsigned char pub[DT_ED25519_LEN], struct strbuf *out)
{
	struct strbuf blob = STRBUF_INIT;

	pub_blob(pub, &blob);
	strbuf_addf(out, "%s ", key_type);
	base64_encode(out, (const unsigned char *)blob.buf, blob.len);
	strbuf_release(&blob);
}

void dt_userkey_fingerprint(const unsigned char pub[DT_ED25519_LEN], struct strbuf *out)
{
	struct strbuf blob = STRBUF_INIT;

	pub_blob(pub, &blob);
	ssh_fingerprint(out, (const unsigned char *)blob.buf, blob.len);
	strbuf_release(&blob);
}

#define PRIV_MAX (16 * 1024)
#define PRIV_BEGIN "-----BEGIN OPENSSH PRIVATE KEY-----"
#define PRIV_END "-----END OPENSSH PRIVATE KEY-----"
#define PRIV_MAGIC "openssh-key-v1"

/*
 * openssh-key-v1 (OpenSSH's PROTOCOL.key): magic, cipher, kdf, kdf options,
 * number of keys, public key blob, then the private section: two equal
 * check words, key type, public key, private key (seed || public), comment.
 */
static int parse_priv(const struct strbuf *raw, struct dt_userkey *k, struct strbuf *err)
{
	struct strbuf b64 = STRBUF_INIT, bin = STRBUF_INIT;
	const char *s = strstr(raw->buf, PRIV_BEGIN), *e = s ? strstr(s, PRIV_END) : NULL;
	const unsigned char *str, *priv;
	size_t n, plen;
	struct wire w, sec;
	unsigned char pub[DT_ED25519_LEN];
	int ret = -1;

	if (!s || !e) {
		strbuf_addstr(err, "not an OpenSSH private key file (ssh-keygen -t ed25519 writes one)");
		return -1;
	}
	for (s += strlen(PRIV_BEGIN); s < e; s++)
		if (!isspace((unsigned char)*s))
			strbuf_addch(&b64, *s);
	if (base64_decode(&bin, b64.buf, b64.len) < 0 || bin.len < sizeof(PRIV_MAGIC) ||
	    memcmp(bin.buf, PRIV_MAGIC, sizeof(PRIV_MAGIC))) {
		strbuf_addstr(err, "the private key's base64 or header is bad");
		goto out;
	}
	w.p = (const unsigned char *)bin.buf + sizeof(PRIV_MAGIC);
	w.end = (const unsigned char *)bin.buf + bin.len;
	if (!wire_is(&w, "none")) {
		strbuf_addstr(err, "the private key is encrypted: dtctl needs one without a "
			      "passphrase (ssh-keygen -t ed25519 -N '' -f FILE)");
		goto out;
	}
	/* kdfname "none" (no passphrase), empty kdf options, one key */
	if (!wire_is(&w, "none") || wire_string(&w, &str, &n) || w.end - w.p < 4 ||
	    w.p[0] || w.p[1] || w.p[2] || w.p[3] != 1) {
		strbuf_addstr(err, "the private key file must hold one key");
		goto out;
	}
	w.p += 4;
	if (wire_string(&w, &str, &n)) {   /* the public blob; checked against the private one */
		strbuf_addstr(err, "the private key file is cut short");
		goto out;
	}
	if (wire_string(&w, &str, &n) || n < 8 || memcmp(str, str + 4, 4)) {
		strbuf_addstr(err, "the private key section is bad");
		goto out;
	}
	sec.p = str + 8;
	sec.end = str + n;
	if (blob_pub(&sec, pub) < 0 || wire_string(&sec, &priv, &plen) ||
	    plen != 2 * DT_ED25519_LEN || memcmp(priv + DT_ED25519_LEN, pub, DT_ED25519_LEN)) {
		strbuf_addstr(err, "not an ed25519 private key (dtctl signs with ed25519 only)");
		goto out;
	}
	memcpy(k->pub, pub, DT_ED25519_LEN);
	memcpy(k->seed, priv, DT_ED25519_LEN);
	ret = 0;
out:
	strbuf_release(&b64);
	if (bin.buf)
		memset(bin.buf, 0, bin.alloc);
	strbuf_release(&bin);
	return ret;
}

int dt_userkey_load(const char *path, struct dt_userkey *k, struct strbuf *err)
{
	struct strbuf raw = STRBUF_INIT, why = STRBUF_INIT;
	struct stat st;
	int fd = sf_open_path_read(path, &st, &why), ret = -1;

	memset(k, 0, sizeof(*k));
	if (fd < 0) {
		strbuf_addf(err, "cannot read the key '%s': %s", path, why.buf);
	} else if (st.st_size > PRIV_MAX) {
		strbuf_addf(err, "the key '%s' is over %d bytes", path, PRIV_MAX);
	} else if (strbuf_read_fd(&raw, fd, PRIV_MAX) < 0) {
		strbuf_addf(err, "cannot read the key '%s'", path);
	} else if (parse_priv(&raw, k, &why) < 0) {
		strbuf_addf(err, "key '%s': %s", path, why.buf);
	} else {
		ret = 0;
	}
	if (fd >= 0)
		close(fd);
	if (raw.buf)
		memset(raw.buf, 0, raw.alloc);
	strbuf_release(&raw);
	strbuf_release(&why);
	return ret;
}

static void to_hex(const unsigned char *b, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[b[i] >> 4];
		out[2 * i + 1] = hex[b[i] & 15];
	}
	out[2 * n] = '\0';
}

int dt_userkey_from_seed(struct dt_userkey *k)
{
	EVP_PKEY *pk = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, k->seed,
						    DT_ED25519_LEN);
	size_t len = DT_ED25519_LEN;
	int ok = pk && EVP_PKEY_get_raw_public_key(pk, k->pub, &len) == 1 &&
		len == DT_ED25519_LEN;

	EVP_PKEY_free(pk);
	return ok ? 0 : -1;
}

int dt_userkey_sign(const struct dt_userkey *k, const void *msg, size_t len,
		    char sig[DT_ED25519_SIG_HEX])
{
	EVP_PKEY *pk = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, k->seed,
						    DT_ED25519_LEN);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned char out[64];
	size_t outlen = sizeof(out);
	int ok = pk && md && EVP_DigestSignInit(md, NULL, NULL, NULL, pk) == 1 &&
		EVP_DigestSign(md, out, &outlen, msg, len) == 1 && outlen == sizeof(out);

	EVP_MD_CTX_free(md);
	EVP_PKEY_free(pk);
	if (!ok)
		return -1;
	to_hex(out, sizeof(out), sig);
	return 0;
}

int dt_userkey_verify(const unsigned char pub[DT_ED25519_LEN], const void *msg, size_t len,
		      const char *sig)
{
	unsigned char raw[64];
	EVP_PKEY *pk;
	EVP_MD_CTX *md;
	int ok;

	if (!sig || strlen(sig) != 128)
		return -1;
	for (size_t i = 0; i < 64; i++) {
		int hi = isxdigit((unsigned char)sig[2 * i]), lo = isxdigit((unsigned char)sig[2 * i + 1]);
		char h[3] = { sig[2 * i], sig[2 * i + 1], 0 };

		if (!hi || !lo)
			return -1;
		raw[i] = (unsigned char)strtoul(h, NULL, 16);
	}
	pk = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, DT_ED25519_LEN);
	md = EVP_MD_CTX_new();
	ok = pk && md && EVP_DigestVerifyInit(md, NULL, NULL, NULL, pk) == 1 &&
		EVP_DigestVerify(md, raw, sizeof(raw), msg, len) == 1;
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(pk);
	return ok ? 0 : -1;
}
