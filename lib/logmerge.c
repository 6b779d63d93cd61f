/*
 * logmerge.c - incremental, merged reading of rank log files (see logmerge.h).
 */
#include "logmerge.h"
#include "safefile.h"
#include "log.h"
#include "term.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int logline_parse(const char *line, size_t len, long long *ts, char *stream,
		  const char **text)
{
	char tsbuf[DT_TIMESTAMP_LEN];

	/* "YYYY-MM-DDTHH:MM:SS.ffffffZ S " is 30 bytes */
	if (len < 29 || line[26] != 'Z' || line[27] != ' ')
		return -1;
	if (line[28] != 'O' && line[28] != 'E')
		return -1;
	if (len > 29 && line[29] != ' ')
		return -1;
	memcpy(tsbuf, line, 27);
	tsbuf[27] = '\0';
	*ts = dt_timestamp_parse(tsbuf);
	if (*ts < 0)
		return -1;
	*stream = line[28];
	*text = len > 30 ? line + 30 : line + len;
	return 0;
}

void log_sanitize(struct strbuf *out, const char *text, size_t len)
{
	size_t start = 0;

	/* a progress bar: keep the last non-empty segment after a carriage return */
	for (size_t i = 0; i < len; i++)
		if (text[i] == '\r' && i + 1 < len)
			start = i + 1;
	while (len > start && (text[len - 1] == '\r' || text[len - 1] == '\n'))
		len--;   /* a line end is not part of the text */
	term_sanitize(out, text + start, len - start, TERM_KEEP_TAB);
}

void logset_init(struct logset *ls)
{
	memset(ls, 0, sizeof(*ls));
}

void logset_add(struct logset *ls, const char *path, int rank, const char *node)
{
	struct logsrc *s;

	ALLOC_GROW(ls->src, ls->nr_src + 1, ls->alloc_src);
	s = &ls->src[ls->nr_src++];
	memset(s, 0, sizeof(*s));
	s->path = xstrdup(path);
	s->rank = rank;
	s->node = xstrdup(node ? node : "?");
	strbuf_init(&s->partial, 0);
}

static void clear_lines(struct logset *ls)
{
	for (size_t i = 0; i < ls->nr_lines; i++)
		free(ls->lines[i].text);
	ls->nr_lines = 0;
}

static void emit(struct logset *ls, struct logsrc *s, const char *line, size_t len)
{
	struct logline *l;
	struct strbuf text = STRBUF_INIT;
	long long ts;
	char stream;
	const char *body;

	if (len && line[len - 1] == '\r')
		len--;
	if (logline_parse(line, len, &ts, &stream, &body) == 0) {
		log_sanitize(&text, body, len - (size_t)(body - line));
		s->last_ts = ts;
	} else {
		ts = s->last_ts;
		stream = '?';
		log_sanitize(&text, line, len);
	}
	ALLOC_GROW(ls->lines, ls->nr_lines + 1, ls->alloc_lines);
	l = &ls->lines[ls->nr_lines++];
	l->ts = ts;
	l->stream = stream;
	l->rank = s->rank;
	l->node = s->node;
	l->text = strbuf_detach(&text, NULL);
	l->seq = ls->seq++;
}

static int read_source(struct logset *ls, struct logsrc *s, int final)
{
	struct stat st;
	struct strbuf why = STRBUF_INIT;
	/* a rank can leave anything at its log's path: a FIFO must not hang us */
	int fd = sf_open_path_read(s->path, NULL, &why);
	char buf[65536];
	ssize_t n;

	if (fd < 0) {
		int ret = errno == ENOENT ? 0 : error("cannot read log: %s", why.buf);

		strbuf_release(&why);
		return ret;
	}
	strbuf_release(&why);
	if (fstat(fd, &st) == 0 && (st.st_ino != s->ino || st.st_size < s->offset)) {
		if (s->ino)
			s->offset = 0;  /* replaced or truncated: start over */
		s->ino = st.st_ino;
		strbuf_reset(&s->partial);
	}
	while ((n = pread(fd, buf, sizeof(buf), s->offset)) > 0) {
		s->offset += n;
		for (ssize_t i = 0; i < n;) {
			char *nl = memchr(buf + i, '\n', (size_t)(n - i));
			size_t take = nl ? (size_t)(nl - (buf + i)) : (size_t)(n - i);

			if (s->partial.len + take > LOG_MAX_LINE) {
				size_t room = LOG_MAX_LINE - s->partial.len;

				strbuf_add(&s->partial, buf + i, room);
				emit(ls, s, s->partial.buf, s->partial.len);
				strbuf_reset(&s->partial);
				i += (ssize_t)room;
				continue;
			}
			strbuf_add(&s->partial, buf + i, take);
			i += (ssize_t)take;
			if (nl) {
				emit(ls, s, s->partial.buf, s->partial.len);
				strbuf_reset(&s->partial);
				i++;
			}
		}
	}
	if (n < 0) {
		int ret = error_errno("cannot read log '%s'", s->path);

		close(fd);
		return ret;
	}
	close(fd);
	if (final && s->partial.len) {
		emit(ls, s, s->partial.buf, s->partial.len);
		strbuf_reset(&s->partial);
	}
	return 0;
}

static int cmp_line(const void *a, const void *b)
{
	const struct logline *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

ssize_t logset_poll(struct logset *ls, int final)
{
	int ret = 0;

	clear_lines(ls);
	for (size_t i = 0; i < ls->nr_src; i++)
		if (read_source(ls, &ls->src[i], final) < 0)
			ret = -1;
	if (ls->nr_lines > 1)
		qsort(ls->lines, ls->nr_lines, sizeof(*ls->lines), cmp_line);
	return ret < 0 ? -1 : (ssize_t)ls->nr_lines;
}

void logset_release(struct logset *ls)
{
	clear_lines(ls);
	free(ls->lines);
	for (size_t i = 0; i < ls->nr_src; i++) {
		free(ls->src[i].path);
		free(ls->src[i].node);
		strbuf_release(&ls->src[i].partial);
	}
	free(ls->src);
	logset_init(ls);
}
