/*
 * image.c - container: resolved for submission (see image.h).
 */
#include "image.h"
#include "safefile.h"
#include "setup.h"
#include "sha256.h"
#include "json.h"
#include "usage.h"

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A name `dtctl image import` accepts: [A-Za-z0-9._-]{1,64}, not starting with '.' */
int image_name_valid(const char *name)
{
	return name[0] != '.' && name_chars_ok(name, 64, "._-");
}

/* The digest recorded for imported image name, or -1 when there is none. */
int image_lookup(const char *shared_dir, const char *name, char digest[DT_DIGEST_STR])
{
	struct strbuf rel = STRBUF_INIT, sb = STRBUF_INIT;
	json_t *j = NULL;
	int ret = -1;

	strbuf_addf(&rel, "images/%s.json", name);
	if (sf_read(shared_dir, rel.buf, &sb, 64 * 1024, NULL) >= 0 &&
	    (j = json_loadb(sb.buf, sb.len, 0, NULL)) &&
	    container_digest_valid(json_get_str(j, "digest", ""))) {
		memcpy(digest, json_get_str(j, "digest", ""), DT_DIGEST_STR);
		ret = 0;
	}
	json_decref(j);
	strbuf_release(&rel);
	strbuf_release(&sb);
	return ret;
}

/*
 * Team mode: a name is only as safe as whoever can change what it resolves
 * to, so images/, NAME.json and NAME.image must be the caller's or root's (a
 * directory's owner may rename anything in it, sticky bit or not): another
 * user's record would run their image as the caller.  0, or DT_EXIT_USAGE
 * after error() naming the file and its owner.
 */
static int image_name_trusted(const char *shared_dir, const char *name)
{
	static const char *const parts[] = { "", ".json", ".image" };
	struct strbuf why = STRBUF_INIT, file = STRBUF_INIT;
	struct stat st;
	int dfd = sf_dir(shared_dir, "images", 0, &why), ret = 0;

	for (size_t i = 0; dfd >= 0 && !ret && i < ARRAY_SIZE(parts); i++) {
		int fd = -1;

		strbuf_reset(&file);
		strbuf_addf(&file, "%s%s", i ? name : "", parts[i]);
		if (i ? (fd = sf_open_read_at(dfd, file.buf, &st, &why)) < 0 : fstat(dfd, &st) < 0)
			ret = error("container: '%s/images/%s': %s", shared_dir, file.buf,
				    why.len ? why.buf : strerror(errno));
		else if (st.st_uid != geteuid() && st.st_uid != 0) {
			struct passwd *pw = getpwuid(st.st_uid);

			ret = error("container: '%s/images%s%s' belongs to %s (uid %u), not to you "
				    "or root: the image name '%s' is not used (its owner could make it "
				    "any image); name an image file you trust instead (-C PATH)",
				    shared_dir, i ? "/" : "", file.buf, pw ? pw->pw_name : "?",
				    (unsigned)st.st_uid, name);
		}
		if (fd >= 0)
			close(fd);
	}
	if (dfd < 0)
		ret = error("container: '%s/images': %s", shared_dir, why.buf);
	else
		close(dfd);
	strbuf_release(&why);
	strbuf_release(&file);
	return ret ? DT_EXIT_USAGE : 0;
}

/* path without "." and ".." components and repeated '/', lexically (no link is read) */
static void path_normalize(struct strbuf *path)
{
	struct strvec parts = STRVEC_INIT, keep = STRVEC_INIT;

	strvec_split(&parts, path->buf, "/");
	for (size_t i = 0; i < parts.nr; i++) {
		if (!*parts.v[i] || !strcmp(parts.v[i], "."))
			continue;
		if (!strcmp(parts.v[i], "..")) {
			if (keep.nr)
				strvec_pop(&keep);
			continue;
		}
		strvec_push(&keep, parts.v[i]);
	}
	strbuf_reset(path);
	for (size_t i = 0; i < keep.nr; i++)
		strbuf_addf(path, "/%s", keep.v[i]);
	if (!path->len)
		strbuf_addch(path, '/');
	strvec_clear(&parts);
	strvec_clear(&keep);
}

int image_resolve(struct job_config *j, const char *shared_dir)
{
	struct strbuf path = STRBUF_INIT, why = STRBUF_INIT;
	char digest[DT_DIGEST_STR];
	const char *rel;
	struct stat st;
	int fd;

	if (!j->container)
		return 0;
	if (j->container[0] != '/' && strncmp(j->container, "./", 2) &&
	    strncmp(j->container, "../", 3)) {
		/* an imported image, else a name for the nodes' engine */
		int code;

		if (!shared_dir || !image_name_valid(j->container) ||
		    image_lookup(shared_dir, j->container, digest) < 0)
			return 0;
		if (the_cluster.config.team &&
		    (code = image_name_trusted(shared_dir, j->container)))
			return code;
		strbuf_addf(&path, "%s/images/%s.image", shared_dir, j->container);
		free(j->container);
		j->container = strbuf_detach(&path, NULL);
		free(j->container_digest);
		j->container_digest = xstrdup(digest);
		return 0;
	}
	if (j->container[0] != '/') {
		char *cwd = getcwd(NULL, 0);

		strbuf_addf(&path, "%s/", cwd ? cwd : ".");
		free(cwd);
	}
	strbuf_addstr(&path, j->container);
	path_normalize(&path);
	if (!shared_dir || !(rel = sf_below(path.buf, shared_dir)) || !*rel) {
		error("container: the image file '%s' is not below the shared dir '%s', so the "
		      "nodes cannot read it: put it there (dtctl image import '%s')", path.buf,
		      shared_dir ? shared_dir : "(none)", path.buf);
		strbuf_release(&path);
		return DT_EXIT_USAGE;
	}
	fd = sf_open_read(shared_dir, rel, &st, &why);
	if (fd < 0 || dt_sha256_fd(fd, -1, digest, NULL, NULL) < 0) {
		error("container: cannot read the image file '%s': %s", path.buf,
		      why.len ? why.buf : strerror(errno));
		if (fd >= 0)
			close(fd);
		strbuf_release(&path);
		strbuf_release(&why);
		return DT_EXIT_USAGE;
	}
	close(fd);
	free(j->container);
	j->container = strbuf_detach(&path, NULL);
	free(j->container_digest);
	j->container_digest = xstrdup(digest);
	strbuf_release(&why);
	return 0;
}
