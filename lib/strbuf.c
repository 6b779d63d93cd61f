/*
 * strbuf.c - growable strings, and the small file helpers built on them.
 */
#include "strbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char strbuf_slopbuf[1];

void strbuf_init(struct strbuf *sb, size_t hint)
{
	sb->alloc = sb->len = 0;
	sb->buf = strbuf_slopbuf;
	if (hint)
		strbuf_grow(sb, hint);
}

void strbuf_release(struct strbuf *sb)
{
	if (sb->alloc)
		free(sb->buf);
	strbuf_init(sb, 0);
}

char *strbuf_detach(struct strbuf *sb, size_t *len)
{
	char *res;

	strbuf_grow(sb, 0);
	res = sb->buf;
	if (len)
		*len = sb->len;
	strbuf_init(sb, 0);
	return res;
}

void strbuf_grow(struct strbuf *sb, size_t extra)
{
	int fresh = !sb->alloc;

	if (sb->len + extra + 1 <= sb->len)
		die("strbuf would overflow");
	if (fresh)
		sb->buf = NULL;
	ALLOC_GROW(sb->buf, sb->len + extra + 1, sb->alloc);
	if (fresh)
		sb->buf[0] = '\0';
}

void strbuf_setlen(struct strbuf *sb, size_t len)
{
	if (len > (sb->alloc ? sb->alloc - 1 : 0))
		die("strbuf_setlen beyond allocation");
	sb->len = len;
	if (sb->buf != strbuf_slopbuf)
		sb->buf[len] = '\0';
}

void strbuf_add(struct strbuf *sb, const void *data, size_t len)
{
	if (!len)
		return;
	strbuf_grow(sb, len);
	memcpy(sb->buf + sb->len, data, len);
	sb->len += len;
	sb->buf[sb->len] = '\0';
}

void strbuf_addstr(struct strbuf *sb, const char *s)
{
	strbuf_add(sb, s, strlen(s));
}

void strbuf_addch(struct strbuf *sb, int c)
{
	strbuf_grow(sb, 1);
	sb->buf[sb->len++] = (char)c;
	sb->buf[sb->len] = '\0';
}

void strbuf_addbuf(struct strbuf *sb, const struct strbuf *other)
{
	strbuf_add(sb, other->buf, other->len);
}

void strbuf_vaddf(struct strbuf *sb, const char *fmt, va_list ap)
{
	va_list cp;
	int n;

	va_copy(cp, ap);
	n = vsnprintf(sb->buf + sb->len, sb->alloc ? sb->alloc - sb->len : 0, fmt, cp);
	va_end(cp);
	if (n < 0)
		die("vsnprintf failed for '%s'", fmt);
	if ((size_t)n + 1 > (sb->alloc ? sb->alloc - sb->len : 0)) {
		strbuf_grow(sb, (size_t)n);
		n = vsnprintf(sb->buf + sb->len, sb->alloc - sb->len, fmt, ap);
	}
	sb->len += (size_t)n;
}

void strbuf_addf(struct strbuf *sb, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(sb, fmt, ap);
	va_end(ap);
}

void strbuf_rtrim(struct strbuf *sb)
{
	while (sb->len && (sb->buf[sb->len - 1] == ' ' || sb->buf[sb->len - 1] == '\t' ||
			   sb->buf[sb->len - 1] == '\n' || sb->buf[sb->len - 1] == '\r'))
		sb->len--;
	if (sb->alloc)
		sb->buf[sb->len] = '\0';
}

void strbuf_trim(struct strbuf *sb)
{
	size_t skip = 0;

	strbuf_rtrim(sb);
	while (skip < sb->len && (sb->buf[skip] == ' ' || sb->buf[skip] == '\t' ||
				  sb->buf[skip] == '\n' || sb->buf[skip] == '\r'))
		skip++;
	if (skip) {
		memmove(sb->buf, sb->buf + skip, sb->len - skip);
		strbuf_setlen(sb, sb->len - skip);
	}
}

void strbuf_add_shell_quoted(struct strbuf *sb, const char *s)
{
	strbuf_addch(sb, '\'');
	for (; *s; s++) {
		if (*s == '\'')
			strbuf_addstr(sb, "'\\''");
		else
			strbuf_addch(sb, *s);
	}
	strbuf_addch(sb, '\'');
}

int strbuf_starts_with(const struct strbuf *sb, const char *prefix)
{
	return starts_with(sb->buf, prefix);
}

ssize_t strbuf_read_fd(struct strbuf *sb, int fd, size_t limit)
{
	size_t start = sb->len;

	for (;;) {
		ssize_t n;

		strbuf_grow(sb, 8192);
		n = read(fd, sb->buf + sb->len, sb->alloc - sb->len - 1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			strbuf_setlen(sb, start);
			return -1;
		}
		if (n == 0)
			break;
		sb->len += (size_t)n;
		sb->buf[sb->len] = '\0';
		if (limit && sb->len - start > limit) {
			strbuf_setlen(sb, start);
			errno = EFBIG;
			return -1;
		}
	}
	return (ssize_t)(sb->len - start);
}

ssize_t strbuf_read_file(struct strbuf *sb, const char *path, size_t limit)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;
	int e;

	if (fd < 0)
		return -1;
	n = strbuf_read_fd(sb, fd, limit);
	e = errno;
	close(fd);
	errno = e;
	return n;
}

int strbuf_getline(struct strbuf *sb, FILE *fp)
{
	int c;

	strbuf_reset(sb);
	while ((c = getc(fp)) != EOF) {
		if (c == '\n')
			return 0;
		strbuf_addch(sb, c);
	}
	return sb->len ? 0 : EOF;
}

int hex_value(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int name_chars_ok(const char *s, size_t max, const char *extra)
{
	size_t n = 0;

	for (; s[n]; n++) {
		char c = s[n];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr(extra, c)))
			return 0;
	}
	return n && n <= max;
}

int starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

int ends_with(const char *s, const char *suffix)
{
	size_t ls = strlen(s), lx = strlen(suffix);

	return ls >= lx && !strcmp(s + ls - lx, suffix);
}

int skip_prefix(const char *s, const char *prefix, const char **out)
{
	size_t n = strlen(prefix);

	if (strncmp(s, prefix, n) != 0)
		return 0;
	*out = s + n;
	return 1;
}

void strbuf_addcsv(struct strbuf *sb, const char *v)
{
	if (!strpbrk(v, ",\"\n\r")) {
		strbuf_addstr(sb, v);
		return;
	}
	strbuf_addch(sb, '"');
	for (; *v; v++) {
		if (*v == '"')
			strbuf_addch(sb, '"');
		strbuf_addch(sb, *v);
	}
	strbuf_addch(sb, '"');
}

void strbuf_addcsv_text(struct strbuf *sb, const char *v)
{
	struct strbuf t = STRBUF_INIT;

	if (!*v || !strchr("=+-@\t\r", *v)) {
		strbuf_addcsv(sb, v);
		return;
	}
	strbuf_addf(&t, "'%s", v);
	strbuf_addcsv(sb, t.buf);
	strbuf_release(&t);
}
