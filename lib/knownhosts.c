/*
 * knownhosts.c - OpenSSH known_hosts parsing, matching and atomic rewriting
 * (see knownhosts.h for why dtctl has its own).
 */
#include "knownhosts.h"
#include "usage.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include "sha256.h"
#include "ssh-dl.h"   /* after the OpenSSL headers: their calls go through dlopen */

void base64_encode(struct strbuf *sb, const unsigned char *data, size_t len)
{
	size_t need = 4 * ((len + 2) / 3);

	strbuf_grow(sb, need + 1);
	EVP_EncodeBlock((unsigned char *)sb->buf + sb->len, data, (int)len);
	strbuf_setlen(sb, sb->len + need);
}

int base64_decode(struct strbuf *out, const char *s, size_t len)
{
	size_t pad = 0, need;
	int n;

	if (len % 4)
		return -1;
	if (len && s[len - 1] == '=')
		pad++;
	if (len > 1 && s[len - 2] == '=')
		pad++;
	need = len / 4 * 3;
	strbuf_grow(out, need + 1);
	n = EVP_DecodeBlock((unsigned char *)out->buf + out->len, (const unsigned char *)s, (int)len);
	if (n < 0 || (size_t)n < pad)
		return -1;
	strbuf_setlen(out, out->len + (size_t)n - pad);
	return 0;
}

void ssh_fingerprint(struct strbuf *sb, const unsigned char *blob, size_t len)
{
	unsigned char md[DT_SHA256_LEN];
	size_t start;

	dt_sha256(blob, len, md);
	strbuf_addstr(sb, "SHA256:");
	start = sb->len;
	base64_encode(sb, md, sizeof(md));
	while (sb->len > start && sb->buf[sb->len - 1] == '=')
		strbuf_setlen(sb, sb->len - 1);
}

int ssh_blob_type(struct strbuf *sb, const unsigned char *blob, size_t len)
{
	size_t n;

	if (len < 4)
		return -1;
	n = ((size_t)blob[0] << 24) | ((size_t)blob[1] << 16) | ((size_t)blob[2] << 8) | blob[3];
	if (n == 0 || n > 64 || n > len - 4)
		return -1;
	strbuf_add(sb, blob + 4, n);
	return 0;
}

void known_hosts_name(struct strbuf *sb, const char *host, int port)
{
	if (port == 22 || port <= 0)
		strbuf_addstr(sb, host);
	else
		strbuf_addf(sb, "[%s]:%d", host, port);
}

/* OpenSSH-style glob: '*' and '?' only, case-insensitive (no [] classes, so
 * "[host]:port" patterns match literally). */
static int glob_match(const char *p, const char *s)
{
	for (; *p; p++, s++) {
		if (*p == '*') {
			while (p[1] == '*')
				p++;
			if (!p[1])
				return 1;
			for (; *s; s++)
				if (glob_match(p + 1, s))
					return 1;
			return 0;
		}
		if (!*s)
			return 0;
		if (*p != '?' && tolower((unsigned char)*p) != tolower((unsigned char)*s))
			return 0;
	}
	return !*s;
}

/* "|1|base64(salt)|base64(HMAC-SHA1(salt, name))" */
static int hashed_match(const char *pat, size_t len, const char *name)
{
	struct strbuf salt = STRBUF_INIT, want = STRBUF_INIT;
	const char *bar;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int ok = 0;

	if (len < 4 || memcmp(pat, "|1|", 3))
		return 0;
	pat += 3;
	len -= 3;
	bar = memchr(pat, '|', len);
	if (!bar)
		return 0;
	if (base64_decode(&salt, pat, (size_t)(bar - pat)) < 0 ||
	    base64_decode(&want, bar + 1, len - (size_t)(bar - pat) - 1) < 0)
		goto out;
	if (!HMAC(EVP_sha1(), salt.buf, (int)salt.len, (const unsigned char *)name,
		  strlen(name), md, &mdlen))
		goto out;
	ok = mdlen == want.len && !memcmp(md, want.buf, mdlen);
out:
	strbuf_release(&salt);
	strbuf_release(&want);
	return ok;
}

int known_hosts_match_name(const char *patterns, const char *name)
{
	const char *p = patterns;
	int positive = 0;

	if (!patterns)
		return 0;
	if (*p == '|')
		return hashed_match(p, strlen(p), name);
	while (*p) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		int neg = *p == '!';
		char *pat = xstrndup(p + neg, n - neg);
		int m = glob_match(pat, name);

		free(pat);
		if (m && neg)
			return 0;	/* a negated match always wins */
		if (m)
			positive = 1;
		p += n;
		if (*p == ',')
			p++;
	}
	return positive;
}

/* Split one line into fields; lines that are not entries keep hosts NULL. */
static void parse_line(struct known_host *e, const char *line, size_t len)
{
	char *copy = xstrndup(line, len), *s = copy, *f[4] = { NULL };
	int nf = 0;
	struct strbuf blob = STRBUF_INIT;

	memset(e, 0, sizeof(*e));
	e->line = xstrndup(line, len);
	while (nf < 4) {
		while (*s == ' ' || *s == '\t')
			s++;
		if (!*s || *s == '#')
			break;
		f[nf++] = s;
		while (*s && *s != ' ' && *s != '\t')
			s++;
		if (*s)
			*s++ = '\0';
	}
	if (nf >= 1 && f[0][0] == '@') {
		if (nf < 4)
			goto out;
		e->marker = xstrdup(f[0]);
		f[0] = f[1], f[1] = f[2], f[2] = f[3];
		nf = 3;
	}
	if (nf < 3 || base64_decode(&blob, f[2], strlen(f[2])) < 0 || !blob.len)
		goto out;
	e->hosts = xstrdup(f[0]);
	e->keytype = xstrdup(f[1]);
	e->blob_len = blob.len;
	e->blob = (unsigned char *)strbuf_detach(&blob, NULL);
out:
	if (!e->hosts) {
		free(e->marker);
		e->marker = NULL;
	}
	strbuf_release(&blob);
	free(copy);
}

void known_hosts_parse(struct known_hosts *kh, const char *buf, size_t len)
{
	const char *p = buf, *end = buf + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

		if (n && p[n - 1] == '\r')
			n--;
		ALLOC_GROW(kh->items, kh->nr + 1, kh->alloc);
		parse_line(&kh->items[kh->nr++], p, n);
		p = nl ? nl + 1 : end;
	}
}

int known_hosts_load(struct known_hosts *kh, const char *path)
{
	struct strbuf sb = STRBUF_INIT;

	if (strbuf_read_file(&sb, path, 16 << 20) < 0) {
		strbuf_release(&sb);
		if (errno == ENOENT)
			return 0;
		return error_errno("cannot read known hosts '%s'", path);
	}
	known_hosts_parse(kh, sb.buf, sb.len);
	strbuf_release(&sb);
	return 0;
}

int known_hosts_save(const struct known_hosts *kh, const char *path)
{
	struct strbuf sb = STRBUF_INIT;
	int ret;

	for (size_t i = 0; i < kh->nr; i++) {
		strbuf_addstr(&sb, kh->items[i].line);
		strbuf_addch(&sb, '\n');
	}
	ret = write_file_atomic(path, sb.buf, sb.len, 0600);
	strbuf_release(&sb);
	return ret;
}

static void entry_release(struct known_host *e)
{
	free(e->line);
	free(e->marker);
	free(e->hosts);
	free(e->keytype);
	free(e->blob);
}

void known_hosts_release(struct known_hosts *kh)
{
	for (size_t i = 0; i < kh->nr; i++)
		entry_release(&kh->items[i]);
	free(kh->items);
	kh->items = NULL;
	kh->nr = kh->alloc = 0;
}

enum kh_result known_hosts_check(const struct known_hosts *kh, const char *name,
				 const unsigned char *blob, size_t len,
				 const struct known_host **found)
{
	struct strbuf type = STRBUF_INIT;
	const struct known_host *match = NULL, *same_type = NULL, *other = NULL;
	enum kh_result r = KH_NOT_FOUND;

	ssh_blob_type(&type, blob, len);
	for (size_t i = 0; i < kh->nr; i++) {
		const struct known_host *e = &kh->items[i];
		int same_key = e->hosts && e->blob_len == len && !memcmp(e->blob, blob, len);

		if (!e->hosts)
			continue;
		if (e->marker && !strcmp(e->marker, "@revoked")) {
			if (same_key) {	/* revoked for every host */
				r = KH_REVOKED;
				match = e;
				goto out;
			}
			continue;
		}
		if (e->marker || !known_hosts_match_name(e->hosts, name))
			continue;
		if (same_key)
			match = e;
		else if (!strcmp(e->keytype, type.buf))
			same_type = e;
		else if (!other)
			other = e;
	}
	if (match)
		r = KH_MATCH;
	else if (same_type || other) {
		r = KH_MISMATCH;
		match = same_type ? same_type : other;
	}
out:
	if (found)
		*found = match;
	strbuf_release(&type);
	return r;
}

void known_hosts_types(const struct known_hosts *kh, const char *name, struct strbuf *out)
{
	struct strbuf seen = STRBUF_INIT;

	for (size_t i = 0; i < kh->nr; i++) {
		const struct known_host *e = &kh->items[i];
		struct strbuf probe = STRBUF_INIT;

		if (!e->hosts || e->marker || !known_hosts_match_name(e->hosts, name))
			continue;
		strbuf_addf(&probe, ",%s,", e->keytype);
		if (!strstr(seen.buf, probe.buf)) {
			if (out->len)
				strbuf_addch(out, ',');
			strbuf_addstr(out, e->keytype);
			strbuf_addf(&seen, ",%s,", e->keytype);
		}
		strbuf_release(&probe);
	}
	strbuf_release(&seen);
}

void known_hosts_add(struct known_hosts *kh, const char *name,
		     const unsigned char *blob, size_t len)
{
	struct strbuf line = STRBUF_INIT, type = STRBUF_INIT;

	if (ssh_blob_type(&type, blob, len) < 0)
		strbuf_addstr(&type, "unknown");
	strbuf_addf(&line, "%s %s ", name, type.buf);
	base64_encode(&line, blob, len);
	ALLOC_GROW(kh->items, kh->nr + 1, kh->alloc);
	parse_line(&kh->items[kh->nr++], line.buf, line.len);
	strbuf_release(&line);
	strbuf_release(&type);
}

int known_hosts_forget(struct known_hosts *kh, const char *name)
{
	size_t out = 0;
	int removed = 0;

	for (size_t i = 0; i < kh->nr; i++) {
		struct known_host *e = &kh->items[i];

		if (e->hosts && !e->marker && known_hosts_match_name(e->hosts, name)) {
			entry_release(e);
			removed++;
			continue;
		}
		kh->items[out++] = *e;
	}
	kh->nr = out;
	return removed;
}
