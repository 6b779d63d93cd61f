/*
 * fuzz_safepath.c - libFuzzer target for the safe-file layer's path walk
 * (lib/safefile.h): arbitrary relative paths against a fixed tree that holds
 * every trap a rank can plant (a symlink to a directory outside the root, a
 * symlink to a file outside, a FIFO, a directory where a file is expected).
 *
 * Properties, checked on every input:
 *   - nothing outside the root is ever read: a read that succeeds returns the
 *     bytes of one of the tree's own regular files ("inside\n");
 *   - a FIFO never blocks (the target would hang: libFuzzer's -timeout reports it);
 *   - writes never create or change anything outside the root;
 *   - sf_next_component never yields "", "." or "..", nor a name with '/'.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safefile.h"
#include "strbuf.h"

static char root[64], outside[64];

static void put(const char *dir, const char *name, const char *text)
{
	char p[PATH_MAX];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "w");
	if (!f)
		abort();
	fputs(text, f);
	fclose(f);
}

static void make_tree(void)
{
	char p[PATH_MAX];

	snprintf(root, sizeof(root), "/tmp/fuzz-sf-root-XXXXXX");
	snprintf(outside, sizeof(outside), "/tmp/fuzz-sf-out-XXXXXX");
	if (!mkdtemp(root) || !mkdtemp(outside))
		abort();
	put(outside, "secret", "outside\n");
	snprintf(p, sizeof(p), "%s/a", root);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/a/b", root);
	mkdir(p, 0755);
	put(root, "f", "inside\n");
	put(root, "a/f", "inside\n");
	put(root, "a/b/f", "inside\n");
	snprintf(p, sizeof(p), "%s/a/up", root);
	if (symlink(outside, p) < 0)
		abort();
	snprintf(p, sizeof(p), "%s/a/ln", root);
	snprintf(p + strlen(p) + 1, sizeof(p) - strlen(p) - 1, "%s/secret", outside);
	if (symlink(p + strlen(p) + 1, p) < 0)
		abort();
	snprintf(p, sizeof(p), "%s/a/fifo", root);
	if (mkfifo(p, 0644) < 0)
		abort();
	snprintf(p, sizeof(p), "%s/d", root);
	mkdir(p, 0755);
}

static void outside_unchanged(void)
{
	struct strbuf sb = STRBUF_INIT;
	struct stat st;
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/secret", outside);
	if (strbuf_read_file(&sb, p, 100) < 0 || strcmp(sb.buf, "outside\n"))
		abort();
	strbuf_release(&sb);
	/* nothing new appears there */
	snprintf(p, sizeof(p), "%s/new", outside);
	if (stat(p, &st) == 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	struct strbuf rel = STRBUF_INIT, sb = STRBUF_INIT, why = STRBUF_INIT;
	char name[NAME_MAX + 1];
	const char *p;
	struct stat st;
	int r, fd;

	if (!ready) {
		make_tree();
		ready = 1;
	}
	if (size > 512)
		return 0;
	strbuf_add(&rel, data, size);
	if (strlen(rel.buf) != rel.len)
		goto out;     /* a C path ends at its NUL */

	p = rel.buf;
	while ((r = sf_next_component(&p, name, sizeof(name))) > 0)
		if (!*name || !strcmp(name, ".") || !strcmp(name, "..") || strchr(name, '/'))
			abort();

	if (sf_read(root, rel.buf, &sb, 4096, &why) >= 0 && strcmp(sb.buf, "inside\n"))
		abort();
	if (sf_stat(root, rel.buf, &st, &why) == 0 && !S_ISREG(st.st_mode))
		abort();
	fd = sf_dir(root, rel.buf, 0, &why);
	if (fd >= 0) {
		/* a walked dir is one of ours: it never holds the outside secret */
		if (fstatat(fd, "secret", &st, AT_SYMLINK_NOFOLLOW) == 0)
			abort();
		close(fd);
	}
	/* a write below the root, then undo it: the outside never changes */
	strbuf_addstr(&rel, "/new");
	if (sf_write(root, rel.buf, "x", 1, 0644, 0, &why) == 0) {
		struct strbuf full = STRBUF_INIT;

		strbuf_addf(&full, "%s/%s", root, rel.buf);
		unlink(full.buf);
		strbuf_release(&full);
	}
	outside_unchanged();
out:
	strbuf_release(&rel);
	strbuf_release(&sb);
	strbuf_release(&why);
	return 0;
}
