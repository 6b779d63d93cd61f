/*
 * secret.h - the cluster's shared HMAC key (docs/architecture.md "Protocol").
 *
 * The head keeps it in dt_home()/secret, `dtctl init` copies it to every
 * node's ~/.dtctl/secret; dtctl, dtsched and dtagent sign and check requests
 * with it.  The file holds 64 lowercase hex digits (32 random bytes from
 * OpenSSL's RAND_bytes) and a newline, mode 0600.
 */
#ifndef DT_SECRET_H
#define DT_SECRET_H

#include "strbuf.h"

#define DT_SECRET_BYTES 32

/*
 * Read the secret of dt_home() into hex_out (appending the hex digits, no
 * newline), creating it first (home 0700, file 0600, atomically) when
 * missing.  -1 with a message on failure.
 */
int dt_secret_ensure(struct strbuf *hex_out);
/* The same for the file at path (its folder must exist): dtsched's own key's seed. */
int dt_secret_ensure_file(const char *path, struct strbuf *hex_out);
/*
 * Read a secret file: refuses files readable by group/others, anything but
 * 64 hex digits (surrounding whitespace allowed).  -1 with a message.
 */
int dt_secret_read(const char *path, struct strbuf *hex_out);

#endif
