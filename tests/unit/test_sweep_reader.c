/*
 * test_sweep_reader.c - the report reader of dtsched's sweeps
 * (scheduler/sweeps.h: struct sweep_reader) around a head crash.
 *
 * dtsched keeps a trial's reader in the trial's row and saves it in the
 * transaction that stores the reports it returned.  A restart rebuilds it
 * from that row (the offsets) and the stored reports (the progress), as
 * sweeps_load() does.  Here the "database" is a copy of the reader and a
 * list of the stored reports; a crash drops whatever was read after the
 * last commit.  Reports appended before, while and after the head is down,
 * a line cut in the middle by the crash, and the repeats a resumed job
 * writes: each report is recorded exactly once.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "safefile.h"
#include "strbuf.h"
#include "scheduler/sweeps.h"

static char root[64];

static int setup(void **state)
{
	snprintf(root, sizeof(root), "/tmp/dt-sweep-reader-XXXXXX");
	return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
	static const char *const paths[] = {
		"jobs/j-1/logs/0.log", "jobs/j-1/metrics.jsonl", "jobs/j-2/logs/0.log",
		"jobs/j-2/metrics.jsonl",
		"jobs/j-1/logs", "jobs/j-2/logs", "jobs/j-1", "jobs/j-2", "jobs", "",
	};
	struct strbuf p = STRBUF_INIT;

	for (size_t i = 0; i < sizeof(paths) / sizeof(*paths); i++) {
		strbuf_reset(&p);
		strbuf_addf(&p, "%s/%s", root, paths[i]);
		if (unlink(p.buf) < 0)
			rmdir(p.buf);
	}
	strbuf_release(&p);
	return 0;
}

/* Append text to root/rel (creating the job's directories). */
static void append(const char *rel, const char *text)
{
	struct strbuf p = STRBUF_INIT;
	FILE *f;

	strbuf_addf(&p, "%s/jobs", root);
	mkdir(p.buf, 0755);
	strbuf_addf(&p, "/%.3s", rel + 5);
	mkdir(p.buf, 0755);
	strbuf_addstr(&p, "/logs");
	mkdir(p.buf, 0755);
	strbuf_reset(&p);
	strbuf_addf(&p, "%s/%s", root, rel);
	f = fopen(p.buf, "a");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	strbuf_release(&p);
}

/* rank 0's log line reporting epoch e */
static void log_epoch(const char *job, int e, const char *end)
{
	char line[160], rel[64];

	snprintf(rel, sizeof(rel), "jobs/%s/logs/0.log", job);
	snprintf(line, sizeof(line), "2026-11-28T02:00:%02d.000000Z O DTCTL_METRIC "
		 "{\"epoch\": %d, \"loss\": %d.5}%s", e, e, e, end);
	append(rel, line);
}

/* The head: its reader now, and what it committed (the row and the stored reports). */
struct head {
	struct sweep_reader rd;
	struct sweep_reader row;
	json_t *stored;
};

/* One look, as scan_trial() makes it: the epochs read, and those refused. */
static void look(struct head *h, const char *job, json_t **got, json_t **refused)
{
	char rel[32];

	snprintf(rel, sizeof(rel), "jobs/%s", job);
	*got = json_array();
	*refused = json_array();
	sweep_reader_scan(&h->rd, root, rel, "loss", *got, *refused);
}

/* The look's reports stored and the reader saved, in one transaction. */
static void commit(struct head *h, json_t *got)
{
	size_t i;
	json_t *r;

	json_array_foreach(got, i, r)
		json_array_append(h->stored, r);
	h->row = h->rd;
}

/* A new head after a crash: the row's offsets, the progress of the stored reports. */
static void restart(struct head *h)
{
	size_t i;
	json_t *r;

	h->rd = (struct sweep_reader)SWEEP_READER_INIT;
	h->rd.mf_off = h->row.mf_off;
	h->rd.log_off = h->row.log_off;
	json_array_foreach(h->stored, i, r)
		sweep_reader_note(&h->rd, r);
}

/* The epochs of an array of reports (or of refused entries) as "1,2,3". */
static const char *epochs(json_t *a, struct strbuf *sb)
{
	size_t i;
	json_t *r;

	strbuf_reset(sb);
	json_array_foreach(a, i, r) {
		json_t *x = json_object_get(r, "report") ? json_object_get(r, "report") : r;

		strbuf_addf(sb, "%s%g", i ? "," : "", json_get_real(x, "epoch", -1));
	}
	return sb->buf;
}

static void test_reports_read_once_across_a_crash(void **state)
{
	struct head h = { SWEEP_READER_INIT, SWEEP_READER_INIT, json_array() };
	struct strbuf sb = STRBUF_INIT;
	json_t *got, *refused;

	/* before: two reports and a line that is none */
	log_epoch("j-1", 1, "\n");
	append("jobs/j-1/logs/0.log", "2026-11-28T02:00:01.500000Z O training...\n");
	log_epoch("j-1", 2, "\n");
	look(&h, "j-1", &got, &refused);
	assert_string_equal(epochs(got, &sb), "1,2");
	commit(&h, got);
	json_decref(got);
	json_decref(refused);

	/* epoch 3 is read, then the head dies before its transaction commits */
	log_epoch("j-1", 3, "\n");
	look(&h, "j-1", &got, &refused);
	assert_string_equal(epochs(got, &sb), "3");
	json_decref(got);
	json_decref(refused);

	/* while it is down: epoch 4, and half of epoch 5's line */
	log_epoch("j-1", 4, "\n");
	append("jobs/j-1/logs/0.log", "2026-11-28T02:00:05.000000Z O DTCTL_METRIC {\"epo");

	restart(&h);
	look(&h, "j-1", &got, &refused);
	assert_string_equal(epochs(got, &sb), "3,4");    /* 3 again: it was never committed */
	assert_int_equal(json_array_size(refused), 0);
	commit(&h, got);
	json_decref(got);
	json_decref(refused);

	/* after: the rest of epoch 5's line, epoch 6, and epoch 4 again (a repeat) */
	append("jobs/j-1/logs/0.log", "ch\": 5, \"loss\": 5.5}\n");
	log_epoch("j-1", 6, "\n");
	log_epoch("j-1", 4, "\n");
	look(&h, "j-1", &got, &refused);
	assert_string_equal(epochs(got, &sb), "5,6");
	assert_string_equal(epochs(refused, &sb), "4");
	assert_string_equal(json_get_str(json_array_get(refused, 0), "file", ""), "logs/0.log");
	assert_true(json_get_int(json_array_get(refused, 0), "offset", 0) > 0);
	assert_true(json_get_real(json_array_get(refused, 0), "last_epoch", -1) == 6);
	assert_true(json_is_null(json_object_get(json_array_get(refused, 0), "last_step")));
	commit(&h, got);
	json_decref(got);
	json_decref(refused);

	/* a second crash right after a commit: nothing is read twice */
	restart(&h);
	look(&h, "j-1", &got, &refused);
	assert_int_equal(json_array_size(got), 0);
	assert_int_equal(json_array_size(refused), 0);
	json_decref(got);
	json_decref(refused);

	/* metrics.jsonl of the same job: read too, under the same progress */
	append("jobs/j-1/metrics.jsonl", "{\"epoch\": 6, \"loss\": 6.5}\n{\"epoch\": 7, \"loss\": 7.5}\n");
	look(&h, "j-1", &got, &refused);
	assert_string_equal(epochs(got, &sb), "7");
	assert_string_equal(epochs(refused, &sb), "6");
	assert_string_equal(json_get_str(json_array_get(refused, 0), "file", ""), "metrics.jsonl");
	assert_int_equal(json_get_int(json_array_get(refused, 0), "offset", -1), 0);
	commit(&h, got);
	json_decref(got);
	json_decref(refused);

	/* promoted: a new job, resumed from an older checkpoint, repeats epoch 7 */
	h.rd.mf_off = h.rd.log_off = 0;
	h.row = h.rd;
	log_epoch("j-2", 7, "\n");
	log_epoch("j-2", 8, "\n");
	restart(&h);                                      /* and one more crash */
	look(&h, "j-2", &got, &refused);
	assert_string_equal(epochs(got, &sb), "8");
	assert_string_equal(epochs(refused, &sb), "7");
	commit(&h, got);
	json_decref(got);
	json_decref(refused);

	/* every report recorded, each exactly once, in order */
	assert_string_equal(epochs(h.stored, &sb), "1,2,3,4,5,6,7,8");
	json_decref(h.stored);
	strbuf_release(&sb);
}

/* Progress is (epoch, step): reports within an epoch go on; none without either. */
static void test_repeats(void **state)
{
	struct sweep_reader rd = SWEEP_READER_INIT;
	json_t *got = json_array(), *refused = json_array();
	struct strbuf sb = STRBUF_INIT;

	append("jobs/j-1/metrics.jsonl",
	       "{\"epoch\": 1, \"step\": 10, \"loss\": 1}\n"
	       "{\"epoch\": 1, \"step\": 20, \"loss\": 1}\n"
	       "{\"epoch\": 1, \"step\": 20, \"loss\": 1}\n"    /* a repeat */
	       "{\"epoch\": 0.5, \"step\": 30, \"loss\": 1}\n"  /* back in time */
	       "{\"loss\": 2}\n{\"loss\": 3}\n"                  /* ordinal: never repeats */
	       "{\"step\": 5, \"loss\": 4}\n");                 /* no epoch: behind epoch 1 */
	sweep_reader_scan(&rd, root, "jobs/j-1", "loss", got, refused);
	assert_int_equal(json_array_size(got), 4);
	assert_string_equal(epochs(refused, &sb), "1,0.5,-1");
	assert_true(rd.epoch == 1 && rd.step == 20);
	json_decref(got);
	json_decref(refused);
	strbuf_release(&sb);
}

/*
 * A live trial's job dir held open (sweeps.c: scan_dfd): appends and files
 * made after it was opened (logs/ comes with the first rank) are read as
 * through the walk; a symlink planted for logs/ is not followed.
 */
static void test_held_job_dir(void **state)
{
	struct sweep_reader rd = SWEEP_READER_INIT;
	json_t *got = json_array(), *refused = json_array();
	struct strbuf sb = STRBUF_INIT, p = STRBUF_INIT;
	int dfd;

	strbuf_addf(&p, "%s/jobs", root);
	mkdir(p.buf, 0755);
	strbuf_addstr(&p, "/j-2");
	mkdir(p.buf, 0755);
	dfd = sf_dir(root, "jobs/j-2", 0, NULL);
	assert_true(dfd >= 0);
	sweep_reader_scan_at(&rd, dfd, "jobs/j-2", "loss", got, refused);
	assert_int_equal(json_array_size(got), 0);      /* nothing there yet */
	log_epoch("j-2", 1, "\n");                      /* makes logs/ after the open */
	sweep_reader_scan_at(&rd, dfd, "jobs/j-2", "loss", got, refused);
	log_epoch("j-2", 2, "\n");
	append("jobs/j-2/metrics.jsonl", "{\"epoch\": 3, \"loss\": 3.5}\n");
	sweep_reader_scan_at(&rd, dfd, "jobs/j-2", "loss", got, refused);
	assert_string_equal(epochs(got, &sb), "1,3");    /* metrics.jsonl first, each look */
	assert_string_equal(epochs(refused, &sb), "2");  /* 2 after 3: a repeat */
	close(dfd);

	/* logs/ a symlink to another job's: not read */
	log_epoch("j-1", 9, "\n");
	strbuf_reset(&p);
	strbuf_addf(&p, "%s/jobs/j-2/logs/0.log", root);
	assert_int_equal(unlink(p.buf), 0);
	strbuf_setlen(&p, p.len - strlen("/0.log"));
	assert_int_equal(rmdir(p.buf), 0);
	assert_int_equal(symlink("../j-1/logs", p.buf), 0);
	dfd = sf_dir(root, "jobs/j-2", 0, NULL);
	rd = (struct sweep_reader)SWEEP_READER_INIT;
	json_array_clear(got);
	json_array_clear(refused);
	sweep_reader_scan_at(&rd, dfd, "jobs/j-2", "loss", got, refused);
	assert_string_equal(epochs(got, &sb), "3");      /* metrics.jsonl alone */
	close(dfd);
	assert_int_equal(unlink(p.buf), 0);
	json_decref(got);
	json_decref(refused);
	strbuf_release(&sb);
	strbuf_release(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reports_read_once_across_a_crash, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_repeats, setup, teardown),
		cmocka_unit_test_setup_teardown(test_held_job_dir, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
