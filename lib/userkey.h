/*
 * userkey.h - a user's own ed25519 key: how a user who is not on the head
 * proves who they are to dtsched (docs/team.md, "Users elsewhere").
 *
 * The public key is OpenSSH's one-line form ("ssh-ed25519 AAAA... comment",
 * what ~/.ssh/id_ed25519.pub holds: the key people already have); the private
 * key is OpenSSH's own file format, unencrypted ("openssh-key-v1", what
 * `ssh-keygen -t ed25519 -N ''` writes).  A request is signed with plain
 * Ed25519 (RFC 8032) over the same canonical string as the cluster secret's
 * HMAC (protocol.h), so freshness and replay are checked the same way
 * (auth.h, dt_auth_verify_user).  OpenSSL's EVP does the curve, loaded with
 * libcrypto on first use (ssh-dl.h).
 */
#ifndef DT_USERKEY_H
#define DT_USERKEY_H

#include <stddef.h>
#include "strbuf.h"

#define DT_ED25519_LEN 32
#define DT_ED25519_SIG_HEX 129     /* 64 bytes as hex + NUL */

struct dt_userkey {
	unsigned char pub[DT_ED25519_LEN];
	unsigned char seed[DT_ED25519_LEN];   /* the private key; only after dt_userkey_load */
};

/*
 * The key of an OpenSSH public key line ("ssh-ed25519 BASE64 [comment]") into
 * pub; -1 with why in err (another key type, bad base64, wrong length).
 */
int dt_userkey_parse_pub(const char *line, unsigned char pub[DT_ED25519_LEN], struct strbuf *err);
/* "ssh-ed25519 BASE64" of pub, and its "SHA256:..." fingerprint (as ssh-keygen -l). */
void dt_userkey_format_pub(const unsigned char pub[DT_ED25519_LEN], struct strbuf *out);
void dt_userkey_fingerprint(const unsigned char pub[DT_ED25519_LEN], struct strbuf *out);
/*
 * An unencrypted OpenSSH ed25519 private key file (at most 16 KiB, a regular
 * file) into k; -1 with why (encrypted: use one without a passphrase for
 * dtctl, or another key type).
 */
int dt_userkey_load(const char *path, struct dt_userkey *k, struct strbuf *err);
/* k's pub from k's seed (dtsched's own key: a seed of 32 random bytes); -1 on failure */
int dt_userkey_from_seed(struct dt_userkey *k);
int dt_userkey_sign(const struct dt_userkey *k, const void *msg, size_t len,
		    char sig[DT_ED25519_SIG_HEX]);
/* 0 when sig (128 hex digits) is pub's signature of msg, else -1 */
int dt_userkey_verify(const unsigned char pub[DT_ED25519_LEN], const void *msg, size_t len,
		      const char *sig);

#endif
