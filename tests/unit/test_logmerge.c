/*
 * test_logmerge.c - the streaming merge of rank logs (lib/logmerge.c) against
 * a simple reference: every file read whole, cut into lines a byte at a time,
 * headers parsed with strptime() (dt_timestamp_parse), all lines sorted.
 *
 * The rank files are random: interleaved and equal timestamps, a clock that
 * steps back, lines without a header, binary bytes, carriage returns, UTF-8,
 * lines longer than LOG_MAX_LINE (and exactly as long), partial last lines,
 * and files that grow between and during reads.  Also the pieces the merge is
 * built on: the fixed-position timestamp parser against timegm() and
 * term_clean_len() against term_sanitize().
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "log.h"
#include "logmerge.h"
#include "strbuf.h"
#include "term.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static unsigned long long rng_state;

static unsigned rnd(unsigned n)
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return n ? (unsigned)((rng_state >> 33) % n) : 0;
}

struct ref_line {
	long long ts;
	char stream;
	int rank;
	size_t seq;          /* order within its file */
	char *text;
};

struct ref {
	struct ref_line *v;
	size_t nr, alloc;
};

static void ref_clear(struct ref *r)
{
	for (size_t i = 0; i < r->nr; i++)
		free(r->v[i].text);
	free(r->v);
	memset(r, 0, sizeof(*r));
}

/* The reference for one raw line: the header by strptime(), the text by log_sanitize(). */
static void ref_add(struct ref *r, const char *line, size_t len, int rank, long long *last_ts)
{
	struct strbuf text = STRBUF_INIT;
	struct ref_line *l;
	long long ts = -1;
	char tsbuf[DT_TIMESTAMP_LEN];
	size_t body;

	if (len && line[len - 1] == '\r')
		len--;
	if (len >= 29 && line[26] == 'Z' && line[27] == ' ' &&
	    (line[28] == 'O' || line[28] == 'E') && (len == 29 || line[29] == ' ')) {
		memcpy(tsbuf, line, 27);
		tsbuf[27] = '\0';
		ts = dt_timestamp_parse(tsbuf);
	}
	ALLOC_GROW(r->v, r->nr + 1, r->alloc);
	l = &r->v[r->nr++];
	if (ts >= 0) {
		l->stream = line[28];
		body = len > 30 ? 30 : len;
		*last_ts = ts > *last_ts ? ts : *last_ts;
	} else {
		l->stream = '?';
		body = 0;
	}
	l->ts = *last_ts;
	l->rank = rank;
	l->seq = r->nr;
	log_sanitize(&text, line + body, len - body);
	l->text = strbuf_detach(&text, NULL);
}

/* Cut a file's bytes into lines the way logmerge.h says, one byte at a time. */
static void ref_file(struct ref *r, const char *data, size_t len, int rank)
{
	size_t start = 0;
	long long last_ts = 0;

	for (size_t i = 0; i < len; i++) {
		if (data[i] == '\n') {
			ref_add(r, data + start, i - start, rank, &last_ts);
			start = i + 1;
		} else if (i - start == LOG_MAX_LINE) {
			ref_add(r, data + start, LOG_MAX_LINE, rank, &last_ts);
			start = i;
		}
	}
	if (start < len)
		ref_add(r, data + start, len - start, rank, &last_ts);   /* the final flush */
}

static int ref_cmp(const void *a, const void *b)
{
	const struct ref_line *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

static void add_text(struct strbuf *sb)
{
	static const char *const utf8[] = { "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x9a\x80" };

	switch (rnd(10)) {
	case 0:   /* binary */
		for (unsigned n = rnd(40); n; n--)
			strbuf_addch(sb, (char)rnd(256));
		break;
	case 1:   /* a progress bar */
		strbuf_addstr(sb, "10%\r50%\r100%");
		if (rnd(2))
			strbuf_addch(sb, '\r');
		break;
	case 2:
		strbuf_addf(sb, "caf%s\t%s ESC\033[1m C1\xc2\x9b", utf8[rnd(3)], utf8[rnd(3)]);
		break;
	case 3: {  /* long: around LOG_MAX_LINE, exactly it, or over twice it */
		static const int sizes[] = { LOG_MAX_LINE - 30, LOG_MAX_LINE - 29, LOG_MAX_LINE,
					     LOG_MAX_LINE + 1, 2 * LOG_MAX_LINE + 7 };
		int n = rnd(4) ? 100 + (int)rnd(3000) : sizes[rnd(5)];

		for (int i = 0; i < n; i++)
			strbuf_addch(sb, (char)('a' + i % 26));
		break;
	}
	default:
		strbuf_addf(sb, "step %u loss %u.%03u", rnd(100000), rnd(10), rnd(1000));
	}
}

/* A random rank log: mostly well-formed lines, clocks that tie across ranks. */
static void make_log(struct strbuf *sb, long long *us)
{
	for (unsigned n = 5 + rnd(60); n; n--) {
		char ts[DT_TIMESTAMP_LEN];

		/* 10 ms steps: ranks often share a timestamp, and a rank with itself */
		*us += 10000LL * rnd(3);
		if (!rnd(40))
			*us -= 30000;   /* a clock stepped back */
		switch (rnd(12)) {
		case 0:
			strbuf_addstr(sb, "no header here ");
			break;
		case 1:   /* almost a header */
			dt_timestamp_format(ts, sizeof(ts), *us);
			strbuf_addf(sb, "%s X ", ts);
			break;
		default:
			dt_timestamp_format(ts, sizeof(ts), *us);
			strbuf_addf(sb, "%s %c ", ts, rnd(4) ? 'O' : 'E');
		}
		add_text(sb);
		strbuf_addstr(sb, rnd(8) ? "\n" : "\r\n");
	}
	if (rnd(2)) {   /* a partial last line */
		strbuf_addstr(sb, "2026-11-22T10:00:0");
		if (rnd(2))
			add_text(sb);
	}
}

static char dir[64];

static void write_at(const char *path, const char *data, size_t len, int append)
{
	int fd = open(path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
}

static void assert_line(const struct logline *l, const struct ref_line *want)
{
	if (l->ts != want->ts || l->stream != want->stream || l->rank != want->rank ||
	    strcmp(l->text, want->text) || l->len != strlen(want->text))
		fail_msg("line %zu of rank %d: got ts %lld %c rank %d '%.60s', want ts %lld %c rank %d '%.60s'",
			 want->seq, want->rank, l->ts, l->stream, l->rank, l->text, want->ts,
			 want->stream, want->rank, want->text);
}

enum { NR_FILES = 5 };

/* One round, final, over files written whole: exactly the reference sort. */
static void test_merge_matches_reference(void **state)
{
	for (int iter = 0; iter < 40; iter++) {
		struct strbuf data[NR_FILES], path = STRBUF_INIT;
		struct ref ref = { 0 };
		struct logset ls;
		const struct logline *l;
		int nr = 1 + (int)rnd(NR_FILES), order[NR_FILES];
		size_t got = 0;

		logset_init(&ls);
		if (iter % 2)
			ls.block = 1;   /* the smallest blocks: many refills, lines across them */
		for (int r = 0; r < nr; r++)
			order[r] = r;
		for (int r = nr - 1; r > 0; r--) {   /* added out of rank order */
			int k = (int)rnd((unsigned)r + 1), t = order[r];

			order[r] = order[k];
			order[k] = t;
		}
		for (int r = 0; r < nr; r++) {
			long long us = 1795341600000000LL;

			strbuf_init(&data[r], 0);
			make_log(&data[r], &us);
			strbuf_reset(&path);
			strbuf_addf(&path, "%s/%d.log", dir, r);
			write_at(path.buf, data[r].buf, data[r].len, 0);
			ref_file(&ref, data[r].buf, data[r].len, r);
		}
		for (int k = 0; k < nr; k++) {
			strbuf_reset(&path);
			strbuf_addf(&path, "%s/%d.log", dir, order[k]);
			logset_add(&ls, path.buf, order[k], "n");
		}
		qsort(ref.v, ref.nr, sizeof(*ref.v), ref_cmp);
		logset_begin(&ls, LOGSET_ALL | LOGSET_FINAL);
		while ((l = logset_next(&ls))) {
			if (got >= ref.nr)
				fail_msg("more lines than the %zu of the reference", ref.nr);
			assert_line(l, &ref.v[got++]);
		}
		assert_int_equal(logset_end(&ls), 0);
		assert_int_equal(got, ref.nr);
		logset_release(&ls);
		ref_clear(&ref);
		for (int r = 0; r < nr; r++)
			strbuf_release(&data[r]);
		strbuf_release(&path);
	}
}

/*
 * Files written in random pieces (cut anywhere, headers included) between
 * rounds and in the middle of them: each round comes out in time order, and
 * per rank the rounds together give the reference's lines, none lost or
 * repeated.
 */
static void test_merge_growing_files(void **state)
{
	for (int iter = 0; iter < 30; iter++) {
		struct strbuf data[NR_FILES], path[NR_FILES];
		size_t written[NR_FILES] = { 0 }, seen[NR_FILES] = { 0 };
		struct ref ref[NR_FILES];
		struct logset ls;
		int nr = 1 + (int)rnd(NR_FILES), done = 0;

		logset_init(&ls);
		ls.block = iter % 2 ? 1 : 0;
		for (int r = 0; r < nr; r++) {
			long long us = 1795341600000000LL;

			strbuf_init(&data[r], 0);
			strbuf_init(&path[r], 0);
			memset(&ref[r], 0, sizeof(ref[r]));
			make_log(&data[r], &us);
			ref_file(&ref[r], data[r].buf, data[r].len, r);
			strbuf_addf(&path[r], "%s/%d.log", dir, r);
			unlink(path[r].buf);   /* a rank's file appears late */
			logset_add(&ls, path[r].buf, r, "n");
		}
		while (!done) {
			const struct logline *l;
			long long last = -1;
			int last_rank = -1, final = 1;

			for (int r = 0; r < nr; r++) {
				size_t n = written[r] < data[r].len ? rnd((unsigned)(data[r].len - written[r]) + 1) : 0;

				write_at(path[r].buf, data[r].buf + written[r], n, 1);
				written[r] += n;
				final &= written[r] == data[r].len;
			}
			done = final;
			logset_begin(&ls, LOGSET_ALL | (final ? LOGSET_FINAL : 0));
			while ((l = logset_next(&ls))) {
				struct ref *want = &ref[l->rank];

				if (l->ts < last || (l->ts == last && l->rank < last_rank))
					fail_msg("rank %d's line at %lld after rank %d's at %lld",
						 l->rank, l->ts, last_rank, last);
				last = l->ts;
				last_rank = l->rank;
				if (seen[l->rank] >= want->nr)
					fail_msg("rank %d: more lines than the reference's %zu",
						 l->rank, want->nr);
				assert_line(l, &want->v[seen[l->rank]++]);
				/* and a writer appending in the middle of the read */
				if (!final && !rnd(4)) {
					int r = (int)rnd((unsigned)nr);
					size_t n = rnd((unsigned)(data[r].len - written[r]) + 1);

					write_at(path[r].buf, data[r].buf + written[r], n, 1);
					written[r] += n;
				}
			}
			assert_int_equal(logset_end(&ls), 0);
		}
		for (int r = 0; r < nr; r++) {
			if (seen[r] != ref[r].nr)
				fail_msg("rank %d: %zu lines, the reference has %zu", r, seen[r], ref[r].nr);
			ref_clear(&ref[r]);
			strbuf_release(&data[r]);
			strbuf_release(&path[r]);
		}
		logset_release(&ls);
	}
}

static void test_timestamp_fixed(void **state)
{
	char ts[DT_TIMESTAMP_LEN];

	assert_int_equal(dt_timestamp_parse_fixed("2026-11-22T10:00:00.123456Z"), 1795341600123456LL);
	assert_int_equal(dt_timestamp_parse_fixed("1970-01-01T00:00:00.000000Z"), 0);
	/* timegm() lets a day run into the next month; so does the parser */
	assert_int_equal(dt_timestamp_parse_fixed("2025-02-29T00:00:00.000000Z"),
			 dt_timestamp_parse("2025-03-01T00:00:00.000000Z"));
	assert_int_equal(dt_timestamp_parse_fixed("1969-12-31T23:59:59.000000Z"), -1);
	assert_int_equal(dt_timestamp_parse_fixed("2026-11-22 10:00:00.123456Z"), -1);
	assert_int_equal(dt_timestamp_parse_fixed("2026-13-22T10:00:00.123456Z"), -1);
	assert_int_equal(dt_timestamp_parse_fixed("2026-11-22T10:00:00.12345xZ"), -1);
	assert_int_equal(dt_timestamp_parse_fixed("2026-11-22T10:00:00.123456 "), -1);
	for (int i = 0; i < 200000; i++) {
		/* 1970 to 9999, leap years and century years included */
		long long us = ((long long)rnd(1U << 30) << 30 | rnd(1U << 30)) % 253402300800000000LL;

		dt_timestamp_format(ts, sizeof(ts), us);
		if (dt_timestamp_parse_fixed(ts) != us || dt_timestamp_parse(ts) != us)
			fail_msg("'%s': fixed %lld, strptime %lld, want %lld", ts,
				 dt_timestamp_parse_fixed(ts), dt_timestamp_parse(ts), us);
	}
}

/* term_clean_len() is the prefix term_sanitize() copies unchanged, and no more. */
static void test_term_clean_len(void **state)
{
	static const unsigned flags[] = { 0, TERM_KEEP_TAB, TERM_KEEP_NL };

	for (int i = 0; i < 100000; i++) {
		unsigned char s[48];
		size_t len = rnd(sizeof(s)), n;
		unsigned f = flags[rnd(3)];
		struct strbuf out = STRBUF_INIT;

		for (size_t k = 0; k < len; k++) {
			unsigned pick = rnd(20);

			s[k] = pick < 16 ? (unsigned char)(0x20 + rnd(0x5f)) : pick == 16 ? "\t\n\r\033"[rnd(4)] :
			       pick == 17 ? "\xc3\xa9\xc2\x9b"[rnd(4)] : (unsigned char)rnd(256);
		}
		n = term_clean_len((const char *)s, len, f);
		term_sanitize(&out, (const char *)s, len, f);
		assert_true(n <= len && n <= out.len);
		assert_memory_equal(out.buf, s, n);
		if (n < len && out.buf[n] == (char)s[n])
			fail_msg("term_clean_len stopped at byte %zu (0x%02x) that is kept", n, s[n]);
		if (n == len)
			assert_int_equal(out.len, len);
		strbuf_release(&out);
	}
}

/*
 * Markers (issue 27): "A <attempt> <node>" gives the lines after it their node
 * and attempt, "Z" ends the attempt (logset_unsettled()); neither is handed
 * out.  A file of 20000 markers in a row with invented names is read without
 * recursion, and costs at most 4096 names; a line's node stays valid after
 * later markers.
 */
static void test_markers(void **state)
{
	struct strbuf data = STRBUF_INIT, path = STRBUF_INIT;
	const struct logline *l;
	const char *first_node = NULL;
	struct logset ls;
	int seen = 0;

	(void)state;
	strbuf_addf(&path, "%s/m.log", dir);
	strbuf_addstr(&data, "2026-11-22T10:00:00.000001Z A 0 nodeA\n"
		      "2026-11-22T10:00:00.000002Z O one\n"
		      "2026-11-22T10:00:00.000003Z A bad\n");
	for (int i = 0; i < 20000; i++)
		strbuf_addf(&data, "2026-11-22T10:00:01.000000Z A 1 n%d\n", i);
	strbuf_addstr(&data, "2026-11-22T10:00:02.000000Z O two\n");
	write_at(path.buf, data.buf, data.len, 0);
	logset_init(&ls);
	logset_add(&ls, path.buf, 0, "placed");
	logset_begin(&ls, LOGSET_ALL);
	while ((l = logset_next(&ls))) {
		if (!seen++) {
			assert_string_equal(l->text, "one");
			assert_string_equal(l->node, "nodeA");
			assert_int_equal(l->attempt, 0);
			first_node = l->node;
		} else {
			assert_string_equal(l->text, "two");
			assert_string_equal(l->node, "?");   /* past the 4096 names */
			assert_int_equal(l->attempt, 1);
		}
	}
	assert_int_equal(logset_end(&ls), 0);
	assert_int_equal(seen, 2);
	assert_string_equal(first_node, "nodeA");    /* still valid */
	assert_true(ls.names.nr <= 4096);
	assert_int_equal(logset_unsettled(&ls, NULL), 1);
	write_at(path.buf, "2026-11-22T10:00:03.000000Z Z\n", 30, 1);
	logset_begin(&ls, LOGSET_ALL);
	assert_null(logset_next(&ls));
	assert_int_equal(logset_end(&ls), 0);
	assert_int_equal(logset_unsettled(&ls, NULL), 0);
	logset_release(&ls);
	strbuf_release(&data);
	strbuf_release(&path);
}

static int setup(void **state)
{
	rng_state = (unsigned long long)time(NULL);
	if (getenv("TEST_SEED"))
		rng_state = strtoull(getenv("TEST_SEED"), NULL, 10);
	print_message("seed %llu (TEST_SEED=... repeats it)\n", rng_state);
	snprintf(dir, sizeof(dir), "/tmp/test_logmerge.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/*
 * Following by polling (logset_watch without inotify): a silent file backs off
 * to idle_ms once the job has ended, but while the job runs (ls.live) it is
 * read every 20 ms at most (more slowly with many files), so that the next
 * line after a silence is seen at once; and a backed-off file is read often
 * again as soon as the job is live.
 */
static int poll_step(struct logset *ls, int rounds)
{
	long long now = 0;

	for (int i = 0; i < rounds; i++) {
		for (size_t k = 0; k < ls->nr_src; k++)
			ls->src[k].changed_ms = dt_mono_ms() - 60000;   /* silent for a minute */
		logset_begin(ls, LOGSET_ALL);
		while (logset_next(ls))
			;
		assert_int_equal(logset_end(ls), 0);
		now = dt_mono_ms();
	}
	return (int)(ls->src[0].next_ms - now);
}

static void test_follow_poll_live(void **state)
{
	struct strbuf path = STRBUF_INIT;
	struct logset ls;
	int step;

	strbuf_addf(&path, "%s/live.log", dir);
	write_at(path.buf, "", 0, 0);
	logset_init(&ls);
	setenv("DTCTL_LOGS_POLL", "1", 1);
	assert_int_equal(logset_watch(&ls, dir, 200), 0);
	logset_add(&ls, path.buf, 0, "n");
	step = poll_step(&ls, 10);
	assert_in_range(step, 150, 200);   /* not running: backed off */
	ls.live = 1;
	step = poll_step(&ls, 1);
	assert_in_range(step, 0, 20);      /* running again: at once */
	step = poll_step(&ls, 10);
	assert_in_range(step, 0, 20);      /* and it stays */
	/* 40 files: 500 reads a second in all, so each every 80 ms */
	for (int r = 1; r < 40; r++)
		logset_add(&ls, path.buf, r, "n");
	step = poll_step(&ls, 10);
	assert_in_range(step, 40, 80);
	ls.live = 0;
	step = poll_step(&ls, 10);
	assert_in_range(step, 150, 200);
	logset_release(&ls);
	unsetenv("DTCTL_LOGS_POLL");
	strbuf_release(&path);
}

/* line i of the seek tests: stamped i microseconds after 10:00:00 */
static void seek_line(struct strbuf *sb, int i)
{
	strbuf_addf(sb, "2026-11-22T10:00:0%d.%06dZ O line %06d\n", i / 1000000, i % 1000000, i);
}

/*
 * logset_seek: a first look at a large log reads only its tail, whole lines,
 * the newest ones, with the attempt's marker from before the tail; a
 * follow-up bisects to its cursor and loses no line after it.
 */
static void test_seek_bounded(void **state)
{
	struct strbuf data = STRBUF_INIT, path = STRBUF_INIT;
	const struct logline *l;
	struct logset ls;
	long long t0;
	const char *text;
	char stream;
	int n = 300000, nr = 0, prev = -1;

	(void)state;
	strbuf_addf(&path, "%s/big.log", dir);
	strbuf_addstr(&data, "2026-11-22T10:00:00.000000Z A 0 nodeA\n");
	for (int i = 0; i < n - 2000; i++)
		seek_line(&data, i);
	strbuf_addstr(&data, "2026-11-22T10:00:00.299000Z A 1 nodeB\n");
	for (int i = n - 2000; i < n; i++)
		seek_line(&data, i);
	write_at(path.buf, data.buf, data.len, 0);
	assert_int_equal(logline_parse(data.buf + 38, 40, &t0, &stream, &text), 0);

	/* a first look: 16 KiB of a 12 MB file, the lines whole and the last ones */
	logset_init(&ls);
	logset_add(&ls, path.buf, 0, "placed");
	logset_seek(&ls, 0, 16384);
	assert_true(ls.src[0].offset >= (off_t)data.len - 16384);
	logset_begin(&ls, LOGSET_ALL);
	while ((l = logset_next(&ls))) {
		int i = atoi(l->text + 5);

		assert_true(prev < 0 || i == prev + 1);
		assert_true(l->len == 11 && !strncmp(l->text, "line ", 5));
		assert_int_equal(l->ts, t0 + i);
		assert_string_equal(l->node, "nodeB");   /* its marker is before the tail */
		assert_int_equal(l->attempt, 1);
		prev = i;
		nr++;
	}
	assert_int_equal(logset_end(&ls), 0);
	assert_int_equal(prev, n - 1);
	assert_in_range(nr, 16384 / 42 - 1, 16384 / 42);
	logset_release(&ls);

	/* a follow-up from the cursor of line 123456: every later line, once */
	logset_init(&ls);
	logset_add(&ls, path.buf, 0, "placed");
	logset_seek(&ls, t0 + 123456, 0);
	assert_true(ls.src[0].offset <= (off_t)(123457 * 42));
	assert_true(ls.src[0].offset >= (off_t)(123457 * 42) - 2 * LOG_SEEK_SLACK);
	logset_begin(&ls, LOGSET_ALL);
	prev = -1;
	nr = 0;
	while ((l = logset_next(&ls))) {
		if (l->ts <= t0 + 123456)
			continue;
		int i = atoi(l->text + 5);

		assert_int_equal(i, prev < 0 ? 123457 : prev + 1);
		/* attempt 0's marker is far before: not seen; attempt 1's is read */
		assert_string_equal(l->node, i < n - 2000 ? "placed" : "nodeB");
		prev = i;
		nr++;
	}
	assert_int_equal(logset_end(&ls), 0);
	assert_int_equal(nr, n - 123457);
	logset_release(&ls);
	strbuf_release(&data);
	strbuf_release(&path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_timestamp_fixed),
		cmocka_unit_test(test_term_clean_len),
		cmocka_unit_test(test_merge_matches_reference),
		cmocka_unit_test(test_merge_growing_files),
		cmocka_unit_test(test_markers),
		cmocka_unit_test(test_follow_poll_live),
		cmocka_unit_test(test_seek_bounded),
	};

	return cmocka_run_group_tests_name("logmerge", tests, setup, teardown);
}
