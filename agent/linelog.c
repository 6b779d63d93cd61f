/*
 * linelog.c - output bytes to timestamped log lines (see linelog.h).
 */
#include "linelog.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include "log.h"
#include "protocol.h"
#include "strvec.h"
#include "term.h"

#include <string.h>

void linelog_init(struct linelog *l, char tag, size_t max_line)
{
	l->tag = tag;
	l->max_line = max_line ? max_line : LINELOG_MAX_LINE;
	strbuf_init(&l->pending, 0);
	l->after_cr = 0;
}

void linelog_release(struct linelog *l)
{
	strbuf_release(&l->pending);
}

static void emit(struct linelog *l, const char *s, size_t n, struct strbuf *out)
{
	char ts[DT_TIMESTAMP_LEN];

	dt_timestamp(ts, sizeof(ts));
	strbuf_addstr(out, ts);
	strbuf_addch(out, ' ');
	strbuf_addch(out, l->tag);
	strbuf_addch(out, ' ');
	/* the one escaping of dtctl's output (term.h): a log line stays one line */
	term_sanitize(out, s, n, TERM_KEEP_TAB);
	strbuf_addch(out, '\n');
}

void linelog_marker(struct strbuf *out, int attempt, const char *node)
{
	char ts[DT_TIMESTAMP_LEN];

	dt_timestamp(ts, sizeof(ts));
	strbuf_addf(out, "%s A %d ", ts, attempt);
	term_sanitize(out, node, strlen(node), 0);
	strbuf_addch(out, '\n');
}

void linelog_end_marker(struct strbuf *out)
{
	char ts[DT_TIMESTAMP_LEN];

	dt_timestamp(ts, sizeof(ts));
	strbuf_addf(out, "%s Z\n", ts);
}

/* Emit max_line bytes of pending, cut before a UTF-8 continuation byte. */
static void emit_split(struct linelog *l, struct strbuf *out)
{
	size_t cut = l->max_line;

	for (int back = 0; back < 3 && cut > 1 &&
	     ((unsigned char)l->pending.buf[cut] & 0xc0) == 0x80; back++)
		cut--;
	if (((unsigned char)l->pending.buf[cut] & 0xc0) == 0x80)
		cut = l->max_line;   /* not UTF-8 after all: cut anywhere */
	emit(l, l->pending.buf, cut, out);
	memmove(l->pending.buf, l->pending.buf + cut, l->pending.len - cut);
	strbuf_setlen(&l->pending, l->pending.len - cut);
}

void linelog_feed(struct linelog *l, const char *buf, size_t n, struct strbuf *out)
{
	for (size_t i = 0; i < n; i++) {
		char c = buf[i];

		if (c == '\n') {
			if (!l->after_cr || l->pending.len)
				emit(l, l->pending.buf, l->pending.len, out);
			strbuf_reset(&l->pending);
			l->after_cr = 0;
		} else if (c == '\r') {
			/* a lone \r ends a line; an empty one (redraw prefix) is dropped */
			if (l->pending.len)
				emit(l, l->pending.buf, l->pending.len, out);
			strbuf_reset(&l->pending);
			l->after_cr = 1;
		} else {
			/* take the run up to the next line end in one go */
			size_t j = i;

			while (j < n && buf[j] != '\n' && buf[j] != '\r')
				j++;
			strbuf_add(&l->pending, buf + i, j - i);
			i = j - 1;
			l->after_cr = 0;
			while (l->pending.len > l->max_line)
				emit_split(l, out);
		}
	}
}

void linelog_flush(struct linelog *l, struct strbuf *out)
{
	if (l->pending.len)
		emit(l, l->pending.buf, l->pending.len, out);
	strbuf_reset(&l->pending);
	l->after_cr = 0;
}

void linelog_read(struct linelog *l, int *fd, struct strbuf *out)
{
	char buf[65536];

	for (int rounds = 0; rounds < 16 && *fd >= 0; rounds++) {
		ssize_t n = read(*fd, buf, sizeof(buf));

		if (n > 0) {
			linelog_feed(l, buf, (size_t)n, out);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		linelog_flush(l, out);   /* end of file, or an error */
		close(*fd);
		*fd = -1;
	}
}

int linelog_write(int fd, struct strbuf *sb, struct log_loss *loss)
{
	const char *p = sb->buf;
	size_t n = sb->len;
	int first = 0;

	while (n && fd >= 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (!loss->err)
				first = loss->err = errno;
			break;
		}
		p += w;
		n -= (size_t)w;
	}
	if (n) {
		/* every line not wholly written, a cut one included, counts as lost;
		 * the A/Z markers are the writer's, not the rank's: not counted */
		const char *end = sb->buf + sb->len, *l = p;

		while (l > sb->buf && l[-1] != '\n')
			l--;
		while (l < end) {
			const char *nl = memchr(l, '\n', (size_t)(end - l));
			const char *sp = memchr(l, ' ', (size_t)((nl ? nl : end) - l));

			if (!(sp && sp + 2 <= end && (sp[1] == 'A' || sp[1] == 'Z') &&
			      (sp + 2 == end || sp[2] == ' ' || sp[2] == '\n')))
				loss->lines++;
			l = nl ? nl + 1 : end;
		}
		loss->bytes += (long long)n;
	}
	strbuf_reset(sb);
	return first;
}

int linelog_stdbuf_env(struct strvec *env, struct strbuf *why)
{
	/* where coreutils puts stdbuf's library: Debian 12, Ubuntu, Fedora and
	 * RHEL 8+; older Debian; SUSE */
	static const char *const libs[] = {
		"/usr/libexec/coreutils/libstdbuf.so",
		"/usr/lib/coreutils/libstdbuf.so",
		"/usr/lib64/coreutils/libstdbuf.so",
	};
	const char *want = strvec_getenv(env, DT_LINE_BUFFERED_ENV), *pre;
	struct stat st;

	if (!want || strcmp(want, "1"))
		return 0;
	for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
		if (stat(libs[i], &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 ||
		    (st.st_mode & 022))
			continue;
		pre = strvec_getenv(env, "LD_PRELOAD");
		if (pre && *pre) {
			struct strbuf both = STRBUF_INIT;

			strbuf_addf(&both, "%s:%s", libs[i], pre);
			strvec_setenv(env, "LD_PRELOAD", both.buf);
			strbuf_release(&both);
		} else {
			strvec_setenv(env, "LD_PRELOAD", libs[i]);
		}
		strvec_setenv(env, "_STDBUF_O", "L");
		return 0;
	}
	strbuf_addstr(why, "line_buffered: no libstdbuf.so of coreutils on this node (looked in "
		      "/usr/libexec/coreutils, /usr/lib/coreutils, /usr/lib64/coreutils); C stdio "
		      "of this rank stays block-buffered");
	return -1;
}
