/*
 * test_safefile.c - the safe-file layer for the shared dir (lib/safefile.h):
 * links, FIFOs, directories and sockets planted where dtsched or an agent
 * reads or writes are refused, never followed, never waited for.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "safefile.h"
#include "strbuf.h"

struct fx {
	char root[64];      /* the "shared dir" */
	char outside[64];   /* a victim outside it */
};

static void put(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static char *at(const char *dir, const char *name)
{
	static char buf[4][PATH_MAX];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

static void content_is(const char *path, const char *want)
{
	struct strbuf sb = STRBUF_INIT;

	assert_true(strbuf_read_file(&sb, path, 0) >= 0);
	assert_string_equal(sb.buf, want);
	strbuf_release(&sb);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	snprintf(f->root, sizeof(f->root), "/tmp/sf-root-XXXXXX");
	snprintf(f->outside, sizeof(f->outside), "/tmp/sf-out-XXXXXX");
	assert_non_null(mkdtemp(f->root));
	assert_non_null(mkdtemp(f->outside));
	assert_int_equal(mkdir(at(f->root, "jobs"), 0775), 0);
	assert_int_equal(mkdir(at(f->root, "jobs/j-1"), 0775), 0);
	put(at(f->outside, "victim"), "secret\n");
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", f->root, f->outside);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static void test_components(void **state)
{
	static const struct { const char *in; int r1; const char *n1; } cases[] = {
		{ "a/b", 1, "a" }, { "//a", 1, "a" }, { "", 0, NULL }, { "/", 0, NULL },
		{ "..", -1, NULL }, { "./a", -1, NULL }, { "...", 1, "..." }, { ".x", 1, ".x" },
	};
	char name[NAME_MAX + 1], longname[NAME_MAX + 3];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *p = cases[i].in;
		int r = sf_next_component(&p, name, sizeof(name));

		assert_int_equal(r, cases[i].r1);
		if (r == 1)
			assert_string_equal(name, cases[i].n1);
	}
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	{
		const char *p = longname;

		assert_int_equal(sf_next_component(&p, name, sizeof(name)), -1);
	}
	assert_string_equal(sf_below("/s/jobs/j-1", "/s"), "jobs/j-1");
	assert_string_equal(sf_below("/s/jobs/j-1", "/s/"), "jobs/j-1");
	assert_string_equal(sf_below("/s", "/s"), "");
	assert_null(sf_below("/sx/jobs", "/s"));
	assert_null(sf_below("/t/jobs", "/s"));
}

static void test_read_write_plain(void **state)
{
	struct fx *f = *state;
	struct strbuf sb = STRBUF_INIT, why = STRBUF_INIT;
	struct stat st;

	assert_int_equal(sf_write(f->root, "jobs/j-1/state", "RUNNING\n", 8, 0644, 0, &why), 0);
	content_is(at(f->root, "jobs/j-1/state"), "RUNNING\n");
	assert_int_equal(stat(at(f->root, "jobs/j-1/state"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0644);
	assert_int_equal(sf_read(f->root, "jobs/j-1/state", &sb, 100, &why), 8);
	assert_string_equal(sb.buf, "RUNNING\n");
	/* no temp file is left beside it */
	{
		DIR *d = opendir(at(f->root, "jobs/j-1"));
		struct dirent *de;
		int n = 0;

		while ((de = readdir(d)))
			n += de->d_name[0] != '.' || strstr(de->d_name, ".tmp.") != NULL;
		closedir(d);
		assert_int_equal(n, 1);
	}
	assert_int_equal(sf_append(f->root, "jobs/j-1/events.log", "a\n", 2, 0644, 0, &why), 0);
	assert_int_equal(sf_append(f->root, "jobs/j-1/events.log", "b\n", 2, 0644, 0, &why), 0);
	content_is(at(f->root, "jobs/j-1/events.log"), "a\nb\n");
	assert_int_equal(sf_mkdirs(f->root, "jobs/j-2/logs", 0775, 0, &why), 0);
	assert_int_equal(stat(at(f->root, "jobs/j-2/logs"), &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	/* too big: refused, nothing appended */
	strbuf_reset(&sb);
	assert_int_equal(sf_read(f->root, "jobs/j-1/state", &sb, 4, &why), -1);
	assert_int_equal(errno, EFBIG);
	assert_int_equal(sb.len, 0);
	assert_non_null(strstr(why.buf, "larger than 4 bytes"));
	strbuf_release(&sb);
	strbuf_release(&why);
}

/* The final component is a symlink to a file outside: writes replace the link. */
static void test_symlink_last(void **state)
{
	struct fx *f = *state;
	struct strbuf sb = STRBUF_INIT, why = STRBUF_INIT;
	struct stat st;
	const char *link = at(f->root, "jobs/j-1/state");

	assert_int_equal(symlink(at(f->outside, "victim"), link), 0);
	assert_int_equal(sf_read(f->root, "jobs/j-1/state", &sb, 100, &why), -1);
	assert_int_equal(errno, ELOOP);
	assert_non_null(strstr(why.buf, "'jobs/j-1/state' is a symbolic link"));
	assert_int_equal(sf_append(f->root, "jobs/j-1/state", "x\n", 2, 0644, 0, &why), -1);
	assert_int_equal(errno, ELOOP);
	assert_int_equal(sf_stat(f->root, "jobs/j-1/state", &st, &why), -1);
	/* a replacement renames over the link itself */
	assert_int_equal(sf_write(f->root, "jobs/j-1/state", "DONE\n", 5, 0644, SF_OWNER, &why), 0);
	content_is(at(f->outside, "victim"), "secret\n");
	assert_int_equal(stat(at(f->outside, "victim"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	strbuf_release(&sb);
	strbuf_release(&why);
}

/* A hard link to a file elsewhere is not appended to (the linked file stays as it was). */
static void test_hard_link_append(void **state)
{
	struct fx *f = *state;
	struct strbuf why = STRBUF_INIT;

	assert_int_equal(link(at(f->outside, "victim"), at(f->root, "jobs/j-1/events.log")), 0);
	assert_int_equal(sf_append(f->root, "jobs/j-1/events.log", "x\n", 2, 0644, 0, &why), -1);
	assert_int_equal(errno, EMLINK);
	assert_non_null(strstr(why.buf, "has 2 hard links"));
	content_is(at(f->outside, "victim"), "secret\n");
	strbuf_release(&why);
}

/* A directory on the way is a symlink: nothing is read, written or made beyond it. */
static void test_symlink_dir(void **state)
{
	struct fx *f = *state;
	struct strbuf sb = STRBUF_INIT, why = STRBUF_INIT;
	struct stat st;

	assert_int_equal(symlink(f->outside, at(f->root, "jobs/j-9")), 0);
	assert_int_equal(sf_read(f->root, "jobs/j-9/victim", &sb, 100, &why), -1);
	assert_int_equal(errno, ELOOP);
	assert_int_equal(sf_write(f->root, "jobs/j-9/victim", "pwn", 3, 0644, 0, &why), -1);
	assert_int_equal(sf_write(f->root, "jobs/j-9/new", "pwn", 3, 0644, SF_MKDIRS, &why), -1);
	assert_int_equal(sf_append(f->root, "jobs/j-9/victim", "pwn", 3, 0644, 0, &why), -1);
	assert_int_equal(sf_mkdirs(f->root, "jobs/j-9/logs", 0775, 0, &why), -1);
	assert_null(sf_opendir(f->root, "jobs/j-9", &why));
	content_is(at(f->outside, "victim"), "secret\n");
	assert_int_equal(stat(at(f->outside, "new"), &st), -1);
	assert_int_equal(stat(at(f->outside, "logs"), &st), -1);
	/* and ".." never climbs out */
	assert_int_equal(sf_read(f->root, "jobs/../../victim", &sb, 100, &why), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(sf_read(f->root, "/etc/passwd", &sb, 100, &why), -1);
	strbuf_release(&sb);
	strbuf_release(&why);
}

/* sf_dir_at: one directory below a held fd, never through a symlink, never a path. */
static void test_dir_at(void **state)
{
	struct fx *f = *state;
	struct strbuf sb = STRBUF_INIT, why = STRBUF_INIT;
	int jobs = sf_dir(f->root, "jobs", 0, &why), fd;

	assert_true(jobs >= 0);
	fd = sf_dir_at(jobs, "j-1", &why);
	assert_true(fd >= 0);
	put(at(f->root, "jobs/j-1/ok"), "ok\n");
	assert_int_equal(sf_read_at(fd, "ok", &sb, 100, &why), 3);
	close(fd);
	assert_int_equal(symlink(f->outside, at(f->root, "jobs/j-9")), 0);
	assert_int_equal(sf_dir_at(jobs, "j-9", &why), -1);
	assert_int_equal(errno, ELOOP);
	assert_non_null(strstr(why.buf, "'j-9' is a symbolic link"));
	assert_int_equal(sf_dir_at(jobs, "ok", &why), -1);      /* absent here */
	assert_int_equal(errno, ENOENT);
	assert_int_equal(sf_dir_at(jobs, "j-1/../..", &why), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(sf_dir_at(jobs, "..", &why), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(sf_dir_at(jobs, "", &why), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(sf_dir_at(jobs, "/etc", &why), -1);
	assert_int_equal(errno, EINVAL);
	close(jobs);
	strbuf_release(&sb);
	strbuf_release(&why);
}

/* FIFOs, sockets and directories at a file's path: refused at once, no blocking. */
static void test_special_files(void **state)
{
	struct fx *f = *state;
	struct strbuf sb = STRBUF_INIT, why = STRBUF_INIT;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s;

	assert_int_equal(mkfifo(at(f->root, "jobs/j-1/metrics.jsonl"), 0666), 0);
	assert_int_equal(sf_read(f->root, "jobs/j-1/metrics.jsonl", &sb, 100, &why), -1);
	assert_non_null(strstr(why.buf, "FIFO"));
	assert_int_equal(sf_append(f->root, "jobs/j-1/metrics.jsonl", "x", 1, 0644, 0, &why), -1);
	assert_non_null(strstr(why.buf, "FIFO"));
	assert_true(sf_open_path_read(at(f->root, "jobs/j-1/metrics.jsonl"), NULL, &why) < 0);

	assert_int_equal(mkdir(at(f->root, "jobs/j-1/state"), 0755), 0);
	assert_int_equal(sf_read(f->root, "jobs/j-1/state", &sb, 100, &why), -1);
	assert_int_equal(errno, EISDIR);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", at(f->root, "jobs/j-1/sock"));
	s = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(s >= 0);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(sf_read(f->root, "jobs/j-1/sock", &sb, 100, &why), -1);
	assert_int_equal(sf_append(f->root, "jobs/j-1/sock", "x", 1, 0644, 0, &why), -1);
	close(s);
	assert_int_equal(sb.len, 0);
	strbuf_release(&sb);
	strbuf_release(&why);
}

/*
 * sf_read_named (a ca_file a job names): links are followed to a regular file,
 * and a FIFO with no writer, a device or an endless file is never opened (the
 * FIFO would block here for good; O_PATH never calls the driver's open).
 */
static void test_named_file(void **state)
{
	struct fx *f = *state;
	struct strbuf sb = STRBUF_INIT, why = STRBUF_INIT;
	char big[64];

	assert_int_equal(symlink(at(f->outside, "victim"), at(f->root, "link.pem")), 0);
	assert_int_equal(sf_read_named(at(f->root, "link.pem"), &sb, 100, &why), 7);
	assert_string_equal(sb.buf, "secret\n");
	strbuf_reset(&sb);
	assert_int_equal(mkfifo(at(f->root, "ca.fifo"), 0666), 0);
	assert_int_equal(symlink(at(f->root, "ca.fifo"), at(f->root, "fifo.pem")), 0);
	assert_int_equal(sf_read_named(at(f->root, "fifo.pem"), &sb, 100, &why), -1);
	assert_non_null(strstr(why.buf, "is a FIFO (not used)"));
	assert_int_equal(sf_read_named("/dev/zero", &sb, 100, &why), -1);
	assert_int_equal(errno, EINVAL);
	assert_non_null(strstr(why.buf, "'/dev/zero' is a device"));
	assert_int_equal(sf_read_named(f->root, &sb, 100, &why), -1);
	assert_int_equal(errno, EISDIR);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	put(at(f->root, "big.pem"), big);
	assert_int_equal(sf_read_named(at(f->root, "big.pem"), &sb, 10, &why), -1);
	assert_int_equal(errno, EFBIG);
	assert_int_equal(sf_read_named(at(f->root, "none.pem"), &sb, 10, &why), -1);
	assert_int_equal(errno, ENOENT);
	assert_int_equal(sb.len, 0);
	strbuf_release(&sb);
	strbuf_release(&why);
}

/* write_file_atomic (trusted homes) shares the writer: a planted temp name is never used. */
static void test_atomic_temp_names(void **state)
{
	struct fx *f = *state;
	char planted[PATH_MAX];
	struct stat st;

	/* the old fixed temp name "<path>.tmp.<pid>" as a link: ignored */
	snprintf(planted, sizeof(planted), "%s/secret.tmp.%ld", f->root, (long)getpid());
	assert_int_equal(symlink(at(f->outside, "victim"), planted), 0);
	assert_int_equal(write_file_atomic(at(f->root, "secret"), "k\n", 2, 0600), 0);
	content_is(at(f->root, "secret"), "k\n");
	content_is(at(f->outside, "victim"), "secret\n");
	assert_int_equal(stat(at(f->root, "secret"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_components),
		cmocka_unit_test_setup_teardown(test_read_write_plain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlink_last, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlink_dir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_at, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hard_link_append, setup, teardown),
		cmocka_unit_test_setup_teardown(test_special_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_named_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_atomic_temp_names, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
