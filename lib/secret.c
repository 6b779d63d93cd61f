/*
 * secret.c - create and read the cluster HMAC key (see secret.h).
 */
#include "secret.h"
#include "auth.h"
#include "dthome.h"
#include "usage.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dt_secret_read(const char *path, struct strbuf *hex_out)
{
	struct strbuf sb = STRBUF_INIT;
	struct stat st;
	int ret = -1;

	if (stat(path, &st) < 0)
		return error_errno("cannot read secret '%s'", path);
	if (st.st_mode & 077)
		return error("secret '%s' is readable by others (mode %04o); run 'chmod 600 %s'",
			     path, (unsigned)(st.st_mode & 07777), path);
	if (strbuf_read_file(&sb, path, 4096) < 0) {
		error_errno("cannot read secret '%s'", path);
		goto out;
	}
	strbuf_trim(&sb);
	if (sb.len != 2 * DT_SECRET_BYTES) {
		error("secret '%s' is not %d hex digits; delete it and run 'dtctl init'",
		      path, 2 * DT_SECRET_BYTES);
		goto out;
	}
	for (size_t i = 0; i < sb.len; i++)
		if (!isxdigit((unsigned char)sb.buf[i])) {
			error("secret '%s' is not hex; delete it and run 'dtctl init'", path);
			goto out;
		}
	strbuf_addbuf(hex_out, &sb);
	ret = 0;
out:
	strbuf_release(&sb);
	return ret;
}

int dt_secret_ensure(struct strbuf *hex_out)
{
	struct strbuf path = STRBUF_INIT;
	int ret;

	if (dt_home_ensure() < 0)
		return -1;
	dt_home_path(&path, "secret");
	ret = dt_secret_ensure_file(path.buf, hex_out);
	strbuf_release(&path);
	return ret;
}

int dt_secret_ensure_file(const char *file, struct strbuf *hex_out)
{
	struct strbuf path = STRBUF_INIT, hex = STRBUF_INIT;
	unsigned char raw[DT_SECRET_BYTES];
	int ret = -1;

	strbuf_addstr(&path, file);
	if (access(path.buf, F_OK) == 0 || errno != ENOENT) {
		ret = dt_secret_read(path.buf, hex_out);
		goto out;
	}
	if (dt_random_bytes(raw, sizeof(raw)) < 0) {
		error_errno("cannot get random bytes for the cluster secret (getrandom)");
		goto out;
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		strbuf_addf(&hex, "%02x", raw[i]);
	memset(raw, 0, sizeof(raw));
	strbuf_addch(&hex, '\n');
	if (write_file_atomic(path.buf, hex.buf, hex.len, 0600) < 0)
		goto out;
	strbuf_setlen(&hex, hex.len - 1);
	strbuf_addbuf(hex_out, &hex);
	ret = 0;
out:
	if (hex.len)
		memset(hex.buf, 0, hex.len);
	strbuf_release(&hex);
	strbuf_release(&path);
	return ret;
}
