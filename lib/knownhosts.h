/*
 * knownhosts.h - the cluster's known_hosts file (OpenSSH format) and host key
 * fingerprints.
 *
 * dtctl keeps its own ~/.dtctl/known_hosts so that `dtctl init` never touches
 * the user's ~/.ssh/known_hosts and the OpenSSH client (through
 * ~/.dtctl/ssh_config, UserKnownHostsFile) checks the very same keys.  The file
 * is OpenSSH's format: "[marker] hostpatterns keytype base64 [comment]", where
 * hostpatterns is a comma list of glob patterns (* and ?), "!negated" ones,
 * "[host]:port" for ports other than 22, or a hashed "|1|salt|hmac" entry
 * (HMAC-SHA1 of the name keyed by the salt, as HashKnownHosts writes).
 *
 * Why not libssh2_knownhost_*: libssh2 1.10 drops lines it cannot parse when it
 * rewrites a file, cannot tell "changed" from "other key type known", and
 * gives no way to list an entry's old key for the "changed host key" message.
 * This parser keeps every line it does not own verbatim (comments, markers,
 * unknown key types), so rewriting the file never loses anything.
 *
 * Ownership: a known_hosts owns its lines; known_hosts_release() frees them.
 */
#ifndef DT_KNOWNHOSTS_H
#define DT_KNOWNHOSTS_H

#include <stddef.h>
#include "strbuf.h"

struct known_host {
	char *line;        /* the line as written (without newline) */
	char *marker;      /* "@revoked", "@cert-authority", or NULL */
	char *hosts;       /* host pattern field; NULL for comments/blank/bad lines */
	char *keytype;     /* "ssh-ed25519", ... */
	unsigned char *blob;  /* decoded key */
	size_t blob_len;
};

struct known_hosts {
	struct known_host *items;
	size_t nr, alloc;
};

#define KNOWN_HOSTS_INIT { NULL, 0, 0 }

enum kh_result {
	KH_NOT_FOUND,      /* no entry for this host */
	KH_MATCH,          /* the key is known for this host */
	KH_MISMATCH,       /* the host is known with another key (or key type) */
	KH_REVOKED,        /* the key is marked @revoked */
};

/* Parse a buffer (appending).  Lines that are not host entries are kept as is. */
void known_hosts_parse(struct known_hosts *kh, const char *buf, size_t len);
/* Load a file; a missing file is an empty list.  -1 with a message on error. */
int known_hosts_load(struct known_hosts *kh, const char *path);
/* Write atomically (temp + rename), mode 0600. */
int known_hosts_save(const struct known_hosts *kh, const char *path);
void known_hosts_release(struct known_hosts *kh);

/* The name OpenSSH looks up: "host" for port 22, "[host]:port" otherwise. */
void known_hosts_name(struct strbuf *sb, const char *host, int port);
/* Does the pattern field (comma list, globs, negation, |1| hashes) match name? */
int known_hosts_match_name(const char *patterns, const char *name);

/*
 * Check a host key.  On KH_MATCH/KH_MISMATCH/KH_REVOKED *found (if given) points
 * at the deciding entry (for a mismatch: one with the same key type if any).
 */
enum kh_result known_hosts_check(const struct known_hosts *kh, const char *name,
				 const unsigned char *blob, size_t len,
				 const struct known_host **found);
/* Key types known for name, in file order, as a comma list (for method prefs). */
void known_hosts_types(const struct known_hosts *kh, const char *name, struct strbuf *out);
/* Append an entry "name keytype base64" (not hashed: the file is the cluster's). */
void known_hosts_add(struct known_hosts *kh, const char *name,
		     const unsigned char *blob, size_t len);
/* Remove every entry matching name; returns how many were removed. */
int known_hosts_forget(struct known_hosts *kh, const char *name);

/* "SHA256:<base64 of SHA-256 of the blob, no padding>", like ssh-keygen -l. */
void ssh_fingerprint(struct strbuf *sb, const unsigned char *blob, size_t len);
/* The key type name stored at the start of a key blob ("ssh-ed25519"), into sb. */
int ssh_blob_type(struct strbuf *sb, const unsigned char *blob, size_t len);

/* Base64 helpers (OpenSSL underneath). decode returns -1 on bad input. */
void base64_encode(struct strbuf *sb, const unsigned char *data, size_t len);
int base64_decode(struct strbuf *out, const char *s, size_t len);

#endif
