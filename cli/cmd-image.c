/*
 * cmd-image.c - `dtctl image import|list|rm`: container images kept on the
 * shared dir (cli/image.h, docs/containers.md).  Talks to nobody: the shared
 * dir is the store, and the agents mark there which nodes have loaded an
 * image (<shared>/images/cache/<hex>/<node>).
 *
 *   dtctl image import FILE [NAME]   copy FILE in as NAME (its digest taken on the way)
 *   dtctl image list [--json]        name, digest, size, nodes that have it cached
 *   dtctl image rm NAME...           remove the file, its record and its marks
 */
#include "builtin.h"
#include "auth.h"
#include "image.h"
#include "json.h"
#include "log.h"
#include "parse-options.h"
#include "safefile.h"
#include "setup.h"
#include "term.h"
#include "usage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

struct import_progress {
	long long total, shown_ms;
	int tty;
};

static void import_progress(long long done, void *data)
{
	struct import_progress *p = data;
	long long now = dt_mono_ms();

	if (!p->tty || (now - p->shown_ms < 500 && done < p->total))
		return;
	p->shown_ms = now;
	fprintf(stderr, "\rimporting: %3lld%% of %.1f MiB", p->total ? done * 100 / p->total : 100,
		(double)p->total / (1 << 20));
	if (done >= p->total)
		fputc('\n', stderr);
}

static int image_import(const char *file, const char *name, int json)
{
	struct strbuf why = STRBUF_INIT, tmp = STRBUF_INIT, dst = STRBUF_INIT, rec = STRBUF_INIT;
	struct strbuf nm = STRBUF_INIT;
	struct import_progress ip = { 0, 0, isatty(2) };
	char digest[DT_DIGEST_STR], hex[17];
	struct stat st;
	int in, dfd = -1, out = -1, code = DT_EXIT_FAIL;
	long long n;
	json_t *o = NULL;

	if (name) {
		strbuf_addstr(&nm, name);
	} else {
		/* the file's name without its extensions */
		const char *b = strrchr(file, '/');

		strbuf_addstr(&nm, b ? b + 1 : file);
		if (strchr(nm.buf, '.') && strchr(nm.buf, '.') != nm.buf)
			strbuf_setlen(&nm, (size_t)(strchr(nm.buf, '.') - nm.buf));
	}
	if (!image_name_valid(nm.buf)) {
		error("image name '%s': expected letters, digits, '.', '_', '-' (at most 64, not "
		      "starting with '.'); give one: dtctl image import FILE NAME", nm.buf);
		strbuf_release(&nm);
		return DT_EXIT_USAGE;
	}
	in = sf_open_path_read(file, &st, &why);
	if (in < 0) {
		error("cannot read '%s': %s", file, why.buf);
		code = DT_EXIT_USAGE;
		goto out;
	}
	ip.total = st.st_size;
	dfd = sf_dir(the_cluster.shared_dir, "images", SF_MKDIRS, &why);
	if (dfd < 0) {
		error("cannot open '%s/images': %s", the_cluster.shared_dir, why.buf);
		goto out;
	}
	if (dt_random_hex(hex, 8) < 0) {
		error("no random bytes for a temporary name");
		goto out;
	}
	strbuf_addf(&tmp, ".import-%s", hex);
	out = openat(dfd, tmp.buf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (out < 0) {
		error("cannot create '%s/images/%s': %s", the_cluster.shared_dir, tmp.buf,
		      strerror(errno));
		goto out;
	}
	n = dt_sha256_fd(in, out, digest, import_progress, &ip);
	if (n < 0 || fsync(out) < 0 || close(out) < 0) {
		error("cannot copy '%s' to '%s/images': %s", file, the_cluster.shared_dir,
		      strerror(errno));
		out = -1;
		unlinkat(dfd, tmp.buf, 0);
		goto out;
	}
	out = -1;
	strbuf_addf(&dst, "%s.image", nm.buf);
	if (renameat(dfd, tmp.buf, dfd, dst.buf) < 0) {
		error("cannot rename '%s' to '%s' in '%s/images': %s", tmp.buf, dst.buf,
		      the_cluster.shared_dir, strerror(errno));
		unlinkat(dfd, tmp.buf, 0);
		goto out;
	}
	o = json_pack("{s:s, s:s, s:I, s:s, s:s}", "name", nm.buf, "digest", digest,
		      "size", (json_int_t)n, "source", file, "imported_at", "");
	{
		char ts[64];

		dt_timestamp(ts, sizeof(ts));
		json_object_set_new(o, "imported_at", json_string(ts));
	}
	{
		char *text = json_dumps(o, JSON_SORT_KEYS);

		strbuf_addf(&rec, "%s.json", nm.buf);
		if (sf_write_at(dfd, rec.buf, text, strlen(text), 0644, 0, &why) < 0) {
			error("cannot write '%s/images/%s': %s", the_cluster.shared_dir, rec.buf,
			      why.buf);
			free(text);
			goto out;
		}
		free(text);
	}
	json_object_set_new(o, "path", json_sprintf("%s/images/%s", the_cluster.shared_dir, dst.buf));
	if (json)
		json_doc_print_key("image", o);
	else
		printf("%s %s %.1f MiB (run it: dtctl run -C %s ...)\n", term_str(nm.buf), digest,
		       (double)n / (1 << 20), term_str(nm.buf));
	code = 0;
out:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	if (dfd >= 0)
		close(dfd);
	json_decref(o);
	strbuf_release(&why);
	strbuf_release(&tmp);
	strbuf_release(&dst);
	strbuf_release(&rec);
	strbuf_release(&nm);
	return code;
}

/* The nodes marked as having image digest cached, sorted. */
static json_t *cached_nodes(const char *digest)
{
	struct strbuf rel = STRBUF_INIT;
	struct strvec names = STRVEC_INIT;
	json_t *arr = json_array();
	struct dirent *de;
	DIR *d;

	strbuf_addf(&rel, "images/cache/%s", digest + 7);
	d = sf_opendir(the_cluster.shared_dir, rel.buf, NULL);
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.')
			strvec_push(&names, de->d_name);
	if (d)
		closedir(d);
	qsort(names.v, names.nr, sizeof(*names.v), cmp_str);
	for (size_t i = 0; i < names.nr; i++)
		json_array_append_new(arr, json_string(names.v[i]));
	strvec_clear(&names);
	strbuf_release(&rel);
	return arr;
}

/* Every <name>.json under images/, sorted by name. */
static json_t *image_records(void)
{
	struct strvec names = STRVEC_INIT;
	json_t *arr = json_array();
	struct dirent *de;
	DIR *d = sf_opendir(the_cluster.shared_dir, "images", NULL);

	while (d && (de = readdir(d))) {
		size_t len = strlen(de->d_name);

		if (len > 5 && ends_with(de->d_name, ".json") && de->d_name[0] != '.') {
			char *base = xstrndup(de->d_name, len - 5);

			strvec_push(&names, base);
			free(base);
		}
	}
	if (d)
		closedir(d);
	qsort(names.v, names.nr, sizeof(*names.v), cmp_str);
	for (size_t i = 0; i < names.nr; i++) {
		struct strbuf rel = STRBUF_INIT, sb = STRBUF_INIT, why = STRBUF_INIT;
		json_t *rec;

		strbuf_addf(&rel, "images/%s.json", names.v[i]);
		rec = sf_read(the_cluster.shared_dir, rel.buf, &sb, 64 * 1024, &why) >= 0 ?
		      json_loadb(sb.buf, sb.len, 0, NULL) : NULL;
		if (!json_is_object(rec) || !container_digest_valid(json_get_str(rec, "digest", "")) ||
		    strcmp(json_get_str(rec, "name", ""), names.v[i])) {
			warning("'%s/%s' is not an image record: skipped", the_cluster.shared_dir,
				rel.buf);
		} else {
			json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o}", "name", names.v[i],
					      "digest", json_get_str(rec, "digest", ""),
					      "size", (json_int_t)json_get_int(rec, "size", 0),
					      "imported_at", json_get_str(rec, "imported_at", ""),
					      "cached_on", cached_nodes(json_get_str(rec, "digest", "")));

			json_array_append_new(arr, o);
		}
		json_decref(rec);
		strbuf_release(&rel);
		strbuf_release(&sb);
		strbuf_release(&why);
	}
	strvec_clear(&names);
	return arr;
}

static int image_list(int json)
{
	json_t *arr = image_records(), *o;
	size_t i;

	if (json) {
		json_doc_print_key("images", arr);
		json_decref(arr);
		return 0;
	}
	printf("%-24s %-19s %10s  %s\n", "NAME", "DIGEST", "SIZE", "CACHED ON");
	json_array_foreach(arr, i, o) {
		struct strbuf nodes = STRBUF_INIT;
		json_t *n;
		size_t k;

		json_array_foreach(json_object_get(o, "cached_on"), k, n)
			strbuf_addf(&nodes, "%s%s", k ? "," : "", term_str(json_string_value(n)));
		printf("%-24s %.19s %8.1fMi  %s\n", term_str(json_get_str(o, "name", "")),
		       json_get_str(o, "digest", ""), (double)json_get_int(o, "size", 0) / (1 << 20),
		       nodes.len ? nodes.buf : "-");
		strbuf_release(&nodes);
	}
	json_decref(arr);
	return 0;
}

static int image_rm(const char **names, int nr, int json)
{
	json_t *removed = json_array();
	int code = 0;

	for (int i = 0; i < nr; i++) {
		struct strbuf rel = STRBUF_INIT;
		char digest[DT_DIGEST_STR];
		int dfd;

		if (!image_name_valid(names[i]) ||
		    image_lookup(the_cluster.shared_dir, names[i], digest) < 0) {
			error("no image '%s' in '%s/images' (see dtctl image list)", names[i],
			      the_cluster.shared_dir);
			code = DT_EXIT_USAGE;
			continue;
		}
		dfd = sf_dir(the_cluster.shared_dir, "images", 0, NULL);
		strbuf_addf(&rel, "%s.image", names[i]);
		if (dfd >= 0 && unlinkat(dfd, rel.buf, 0) < 0 && errno != ENOENT) {
			error("cannot remove '%s/images/%s': %s", the_cluster.shared_dir, rel.buf,
			      strerror(errno));
			code = DT_EXIT_FAIL;
		}
		strbuf_reset(&rel);
		strbuf_addf(&rel, "%s.json", names[i]);
		if (dfd >= 0)
			unlinkat(dfd, rel.buf, 0);
		if (dfd >= 0)
			close(dfd);
		/* the marks: which nodes had it (their engines keep it until removed there) */
		strbuf_reset(&rel);
		strbuf_addf(&rel, "images/cache/%s", digest + 7);
		dfd = sf_dir(the_cluster.shared_dir, rel.buf, 0, NULL);
		if (dfd >= 0) {
			DIR *d = fdopendir(dup(dfd));
			struct dirent *de;

			while (d && (de = readdir(d)))
				if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
					unlinkat(dfd, de->d_name, 0);
			if (d)
				closedir(d);
			close(dfd);
			dfd = sf_dir(the_cluster.shared_dir, "images/cache", 0, NULL);
			if (dfd >= 0) {
				unlinkat(dfd, digest + 7, AT_REMOVEDIR);
				close(dfd);
			}
		}
		json_array_append_new(removed, json_pack("{s:s, s:s}", "name", names[i],
							 "digest", digest));
		if (!json)
			printf("removed %s (%s)\n", term_str(names[i]), digest);
		strbuf_release(&rel);
	}
	if (json)
		json_doc_print_key("removed", removed);
	json_decref(removed);
	return code;
}

int cmd_image(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl image import <file> [<name>] [--json]",
		"dtctl image list [--json]",
		"dtctl image rm <name>... [--json]",
		"",
		"Container images on the shared dir, for job.yaml container: and dtctl run -C.",
		"import copies a root filesystem tarball (podman import) or an image archive",
		"(podman save) in and records its digest; the nodes load it at its first job.",
		NULL,
	};
	int json = 0;
	struct option opts[] = {
		OPT_BOOL(0, "json", &json, "machine output"),
		OPT_END(),
	};
	const char *sub;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	if (argc < 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	sub = argv[0];
	if (!strcmp(sub, "import") && (argc == 2 || argc == 3))
		return image_import(argv[1], argc == 3 ? argv[2] : NULL, json);
	if (!strcmp(sub, "list") && argc == 1)
		return image_list(json);
	if (!strcmp(sub, "rm") && argc >= 2)
		return image_rm(argv + 1, argc - 1, json);
	if (strcmp(sub, "import") && strcmp(sub, "list") && strcmp(sub, "rm"))
		error("unknown image command '%s' (import, list, rm)", sub);
	usage_with_options(usage, opts, 1);
	return DT_EXIT_USAGE;
}
