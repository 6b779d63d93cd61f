/*
 * container.c - the engine, the node's image cache and the argv of a rank in
 * a container image (see container.h and docs/containers.md).
 */
#include "container.h"
#include "config.h"
#include "dthome.h"
#include "log.h"
#include "json.h"
#include "protocol.h"
#include "run-command.h"
#include "safefile.h"
#include "sha256.h"
#include "usage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

int container_engine_find(struct strbuf *out, struct strbuf *why)
{
	const char *path = getenv_nonempty("PATH");
	struct strbuf dirs = STRBUF_INIT;
	int ret;

	/* as the shell finds it (lib/run-command.h), with the usual dirs after PATH;
	 * a relative PATH entry is taken from /, never from the agent's cwd */
	strbuf_addf(&dirs, "%s%s/usr/bin:/usr/local/bin", path ? path : "", path ? ":" : "");
	ret = locate_program("podman", dirs.buf, "/", out);
	strbuf_release(&dirs);
	if (ret < 0)
		strbuf_addstr(why, "no container engine: podman is not in PATH (install podman on the "
			      "node, or run the job without 'container:')");
	return ret;
}

/* Run engine args quietly; its exit code, its output (both streams) in out. */
static int engine_run(const char *engine, const char *const *args, struct strbuf *out)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf sink = STRBUF_INIT;
	int code;

	strvec_push(&cp.args, engine);
	strvec_pushv(&cp.args, (const char **)args);
	cp.no_stdin = 1;
	cp.err_to_out = 1;
	code = capture_command(&cp, out ? out : &sink, 64 * 1024);
	strbuf_release(&sink);
	child_process_clear(&cp);
	return code;
}

/* The last line of an engine's output, for a message. */
static const char *last_line(struct strbuf *out)
{
	char *nl;

	strbuf_trim(out);
	nl = strrchr(out->buf, '\n');
	return nl ? nl + 1 : out->buf;
}

/*
 * Whether the tar file at fd is an image archive (docker-archive: a
 * manifest.json at its top; OCI layout: an oci-layout file) rather than a
 * root filesystem: 1, 0, or -1 when it is not a plain tar (compressed: the
 * caller tries both).  Headers only, with preads; bounded.
 */
static int tar_is_archive(int fd)
{
	unsigned char h[512];
	off_t off = 0;

	for (long entries = 0; entries < 1000000; entries++) {
		char name[101];
		unsigned long long size = 0;
		ssize_t n = pread(fd, h, sizeof(h), off);
		int zero = 1;

		if (n != (ssize_t)sizeof(h))
			return entries ? 0 : -1;
		for (size_t i = 0; i < sizeof(h); i++)
			zero &= !h[i];
		if (zero)
			return 0;
		if (memcmp(h + 257, "ustar", 5))
			return entries ? 0 : -1;
		memcpy(name, h, 100);
		name[100] = '\0';
		for (int i = 124; i < 136 && h[i] >= '0' && h[i] <= '7'; i++)
			size = size * 8 + (h[i] - '0');
		{
			const char *base = starts_with(name, "./") ? name + 2 : name;

			if (!strcmp(base, "manifest.json") || !strcmp(base, "oci-layout"))
				return 1;
		}
		off += 512 + (off_t)((size + 511) / 512 * 512);
	}
	return 0;
}

struct load_progress {
	container_note_fn note;
	void *data;
	const char *image;
	long long total, next;
	long long started;
};

static void load_progress(long long done, void *data)
{
	struct load_progress *p = data;
	struct strbuf sb = STRBUF_INIT;

	if (!p->note || done < p->next || !p->total)
		return;
	strbuf_addf(&sb, "dtagent: copying image '%s': %lld%% of %.1f MiB", p->image,
		    done * 100 / p->total, (double)p->total / (1 << 20));
	p->note(sb.buf, p->data);
	strbuf_release(&sb);
	p->next = done + p->total / 4;
}

/*
 * The image file, opened without following links below the shared dir; with
 * u, as the user (their file system ids and groups: the kernel decides), so
 * root's engine never loads a file its user could not read.
 */
static int open_image(const char *shared_root, const char *image,
		      const struct container_user *u, struct stat *st, struct strbuf *why)
{
	struct strbuf err = STRBUF_INIT;
	gid_t saved[256];
	int nr = 0, fd, e;

	if (u) {
		nr = getgroups((int)ARRAY_SIZE(saved), saved);
		if (nr < 0 || setgroups((size_t)u->nr_groups, u->groups) < 0) {
			strbuf_addf(why, "cannot take the groups of uid %lld to read the image "
				    "file '%s': %s", u->uid, image, strerror(errno));
			return -1;
		}
		setfsgid((gid_t)u->gid);
		setfsuid((uid_t)u->uid);
	}
	fd = sf_open_read(shared_root, sf_below(image, shared_root), st, &err);
	e = errno;
	if (u) {
		setfsuid(geteuid());
		setfsgid(getegid());
		if (setgroups((size_t)nr, saved) < 0) {
			strbuf_addf(why, "cannot take back root's groups: %s", strerror(errno));
			if (fd >= 0)
				close(fd);
			return -1;
		}
	}
	if (fd < 0)
		strbuf_addf(why, "cannot read the image file '%s'%s: %s", image,
			    u ? " as the job's user" : "", err.buf);
	strbuf_release(&err);
	errno = e;
	return fd;
}

/* What identifies the file that had a digest (team mode's cache check). */
static void file_identity(const struct stat *st, struct strbuf *out)
{
	strbuf_addf(out, "%llu %llu %lld %lld.%09ld %lld.%09ld\n", (unsigned long long)st->st_dev,
		    (unsigned long long)st->st_ino, (long long)st->st_size,
		    (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec,
		    (long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec);
}

/* <home>/images/<hex>.seen: the identity of the file last hashed to <hex> */
static void seen_path(const char *digest, struct strbuf *rel)
{
	strbuf_addf(rel, "images/%s.seen", digest + 7);
}

static void remember_file(const char *home, const char *digest, const struct stat *st)
{
	struct strbuf rel = STRBUF_INIT, id = STRBUF_INIT;

	seen_path(digest, &rel);
	file_identity(st, &id);
	if (sf_write(home, rel.buf, id.buf, id.len, 0600, SF_MKDIRS, NULL) < 0)
		dtlog(DTLOG_DEBUG, "cannot write '%s/%s': %s", home, rel.buf, strerror(errno));
	strbuf_release(&rel);
	strbuf_release(&id);
}

/*
 * Team mode, the engine has the digest already: the user must show a file
 * with it (see container_user).  0, or -1 with why.
 */
static int user_has_image(const char *shared_root, const char *image, const char *digest,
			  const char *home, const struct container_user *u, struct strbuf *why)
{
	struct strbuf rel = STRBUF_INIT, seen = STRBUF_INIT, id = STRBUF_INIT;
	char got[DT_DIGEST_STR];
	struct stat st;
	int fd = open_image(shared_root, image, u, &st, why), ret = 0;

	if (fd < 0)
		return -1;
	seen_path(digest, &rel);
	file_identity(&st, &id);
	if (sf_read(home, rel.buf, &seen, 256, NULL) < 0 || strcmp(seen.buf, id.buf)) {
		if (dt_sha256_fd(fd, -1, got, NULL, NULL) < 0) {
			strbuf_addf(why, "cannot read the image file '%s': %s", image,
				    strerror(errno));
			ret = -1;
		} else if (strcmp(got, digest)) {
			strbuf_addf(why, "the image file '%s' changed since the job was submitted "
				    "(it is %s now, the job has %s): submit the job again", image,
				    got, digest);
			ret = -1;
		} else {
			remember_file(home, digest, &st);
		}
	}
	close(fd);
	strbuf_release(&rel);
	strbuf_release(&seen);
	strbuf_release(&id);
	return ret;
}

/*
 * Copy the image file off the shared dir into tmp (our own dir), hashing
 * it; the digest must be the one submitted.
 */
static int copy_image(const char *shared_root, const char *image, const char *digest,
		      const char *tmp, const struct container_user *u, const char *home,
		      struct load_progress *lp, struct strbuf *why)
{
	char got[DT_DIGEST_STR];
	struct stat st;
	int in, out;
	long long n;

	in = open_image(shared_root, image, u, &st, why);
	if (in < 0)
		return -1;
	out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0) {
		strbuf_addf(why, "cannot create '%s': %s", tmp, strerror(errno));
		close(in);
		return -1;
	}
	lp->total = st.st_size;
	n = dt_sha256_fd(in, out, got, load_progress, lp);
	close(in);
	if (n < 0 || close(out) < 0) {
		strbuf_addf(why, "cannot copy the image file '%s' to '%s': %s", image, tmp,
			    strerror(errno));
		return -1;
	}
	if (strcmp(got, digest)) {
		strbuf_addf(why, "the image file '%s' changed since the job was submitted (it is "
			    "%s now, the job has %s): submit the job again", image, got, digest);
		return -1;
	}
	if (u)
		remember_file(home, digest, &st);
	return 0;
}

/* podman load: the archive's first image, tagged ref */
static int load_archive(const char *engine, const char *tmp, const char *ref, struct strbuf *why)
{
	struct strbuf out = STRBUF_INIT;
	char *loaded, *end;
	int code = engine_run(engine, (const char *[]){ "load", "-q", "-i", tmp, NULL }, &out);

	/* "Loaded image(s): localhost/x:1,localhost/y:2" or "Loaded image: sha256:..." */
	loaded = code == 0 ? strstr(out.buf, "Loaded image") : NULL;
	loaded = loaded ? strstr(loaded, ": ") : NULL;
	if (!loaded) {
		strbuf_addf(why, "podman load failed (exit %d): %s", code, last_line(&out));
		strbuf_release(&out);
		return -1;
	}
	loaded += 2;
	end = loaded + strcspn(loaded, ",\n");
	*end = '\0';
	{
		struct strbuf tag = STRBUF_INIT;

		code = engine_run(engine, (const char *[]){ "tag", loaded, ref, NULL }, &tag);
		if (code)
			strbuf_addf(why, "podman tag %s failed (exit %d): %s", loaded, code,
				    last_line(&tag));
		strbuf_release(&tag);
	}
	strbuf_release(&out);
	return code ? -1 : 0;
}

static int import_rootfs(const char *engine, const char *tmp, const char *ref, struct strbuf *why)
{
	struct strbuf out = STRBUF_INIT;
	int code = engine_run(engine, (const char *[]){ "import", "-q", tmp, ref, NULL }, &out);

	if (code)
		strbuf_addf(why, "podman import failed (exit %d): %s", code, last_line(&out));
	strbuf_release(&out);
	return code ? -1 : 0;
}

/* Whether the file at fd is a squashfs (enroot's images): its magic "hsqs". */
static int is_squashfs(int fd)
{
	char magic[4];

	return pread(fd, magic, sizeof(magic), 0) == (ssize_t)sizeof(magic) &&
	       !memcmp(magic, "hsqs", 4);
}

/*
 * A squashfs becomes the tarball podman imports: sqfs2tar (squashfs-tools-ng)
 * streams its files, owners, modes and links into a tar without mounting or
 * unpacking it (no FUSE, no root needed), once per digest like any image.
 */
static int import_squashfs(const char *engine, const char *tmp, const char *ref,
			   struct strbuf *why)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf prog = STRBUF_INIT, tar = STRBUF_INIT, err = STRBUF_INIT;
	const char *path = getenv_nonempty("PATH");
	int fd, code = -1;

	strbuf_addf(&prog, "%s%s/usr/bin:/usr/local/bin", path ? path : "", path ? ":" : "");
	if (locate_program("sqfs2tar", prog.buf, "/", &tar) < 0) {
		strbuf_addstr(why, "the image is a squashfs, and sqfs2tar is not in PATH (install "
			      "squashfs-tools-ng on the node)");
		goto out;
	}
	strbuf_reset(&prog);
	strbuf_addbuf(&prog, &tar);
	strbuf_reset(&tar);
	strbuf_addf(&tar, "%s.tar", tmp);
	fd = open(tar.buf, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		strbuf_addf(why, "cannot create '%s': %s", tar.buf, strerror(errno));
		goto out;
	}
	strvec_pushv(&cp.args, (const char *[]){ prog.buf, "--no-skip", tmp, NULL });
	cp.no_stdin = 1;
	cp.out = fd;
	cp.err = -1;
	if (start_command(&cp) < 0) {
		strbuf_addf(why, "cannot run %s: %s", prog.buf, strerror(errno));
		close(fd);
		goto out;
	}
	close(fd);
	strbuf_read_fd(&err, cp.err, 0);
	close(cp.err);
	code = finish_command(&cp);
	if (code)
		strbuf_addf(why, "sqfs2tar cannot read the squashfs image (exit %d): %s", code,
			    last_line(&err));
	else
		code = import_rootfs(engine, tar.buf, ref, why);
out:
	if (tar.len)
		unlink(tar.buf);
	child_process_clear(&cp);
	strbuf_release(&prog);
	strbuf_release(&tar);
	strbuf_release(&err);
	return code ? -1 : 0;
}

/* <shared>/images/cache/<hex>/<node>: for dtctl image list (best effort) */
static void mark_cached(const char *shared_root, const char *hex, const char *node)
{
	struct strbuf rel = STRBUF_INIT;

	if (!node)
		return;
	strbuf_addf(&rel, "images/cache/%s/%s", hex, node);
	if (sf_write(shared_root, rel.buf, "", 0, 0644, SF_MKDIRS, NULL) < 0)
		dtlog(DTLOG_DEBUG, "cannot mark the image cached in '%s/%s': %s", shared_root,
		      rel.buf, strerror(errno));
	strbuf_release(&rel);
}

/*
 * The warm path without asking the engine: <home>/images/<hex>.loaded names
 * the image's directory in the engine's store (containers/storage:
 * <graphroot>/<driver>-images/<id>), found when an earlier task found or
 * loaded it; while that directory is there the image is (`podman rmi` and
 * `system prune` remove it).  `podman image exists` costs ~0.05 s of CPU
 * per rank, a sixth of a rank's start in an image (docs/BENCHMARKS.md,
 * containers).  Rootless podman also needs its long-lived pause process
 * (see supervise.c): the first podman command that finds none starts it,
 * and that must not be the rank's `podman run` inside the task; so the
 * engine is skipped only while one of our uid runs.
 */
static void loaded_path(const char *digest, struct strbuf *rel)
{
	strbuf_addf(rel, "images/%s.loaded", digest + 7);
}

static int pause_process_runs(void)
{
	DIR *d;
	struct dirent *de;
	int found = 0;

	if (geteuid() == 0)
		return 1;      /* root's podman has none */
	d = opendir("/proc");
	while (d && !found && (de = readdir(d))) {
		char path[300], comm[32];
		struct stat st;
		ssize_t n;
		int fd;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
		    (n = read(fd, comm, sizeof(comm) - 1)) > 0) {
			comm[n] = '\0';
			found = !strcmp(comm, "podman pause\n");
		}
		close(fd);
	}
	if (d)
		closedir(d);
	return found;
}

static int known_loaded(const char *home, const char *digest)
{
	struct strbuf rel = STRBUF_INIT, dir = STRBUF_INIT;
	struct stat st;
	int ret = 0;

	loaded_path(digest, &rel);
	if (sf_read(home, rel.buf, &dir, PATH_MAX, NULL) > 0 && dir.buf[0] == '/' &&
	    !strchr(dir.buf, '\n') && lstat(dir.buf, &st) == 0 && S_ISDIR(st.st_mode))
		ret = pause_process_runs();
	strbuf_release(&rel);
	strbuf_release(&dir);
	return ret;
}

/* The engine has ref: where its store keeps it, for known_loaded() (best effort). */
static void remember_loaded(const char *engine, const char *home, const char *digest,
			    const char *ref)
{
	struct strbuf rel = STRBUF_INIT, id = STRBUF_INIT, store = STRBUF_INIT;

	if (engine_run(engine, (const char *[]){ "image", "inspect", "--format", "{{.Id}}", ref,
						 NULL }, &id) ||
	    engine_run(engine, (const char *[]){ "info", "--format", "{{.Store.GraphRoot}}/"
						 "{{.Store.GraphDriverName}}-images/", NULL },
		       &store))
		goto out;
	strbuf_trim(&id);
	strbuf_trim(&store);
	if (!id.len || strspn(id.buf, "0123456789abcdef") != id.len || store.buf[0] != '/' ||
	    strchr(store.buf, '\n'))
		goto out;
	strbuf_addbuf(&store, &id);
	loaded_path(digest, &rel);
	if (sf_write(home, rel.buf, store.buf, store.len, 0600, SF_MKDIRS, NULL) < 0)
		dtlog(DTLOG_DEBUG, "cannot write '%s/%s': %s", home, rel.buf, strerror(errno));
out:
	strbuf_release(&rel);
	strbuf_release(&id);
	strbuf_release(&store);
}

int container_image_ensure(const char *engine, const json_t *ctr, const char *shared_root,
			   const char *home, container_note_fn note, void *data,
			   struct strbuf *ref, struct strbuf *why)
{
	return container_image_ensure_as(engine, ctr, shared_root, home, NULL, note, data, ref,
					 why);
}

int container_image_ensure_as(const char *engine, const json_t *ctr, const char *shared_root,
			      const char *home, const struct container_user *u,
			      container_note_fn note, void *data, struct strbuf *ref,
			      struct strbuf *why)
{
	const char *image = json_get_str(ctr, "image", NULL);
	const char *digest = json_get_str(ctr, "digest", NULL);
	const char *node = json_get_str(ctr, "node", NULL);
	struct strbuf dir = STRBUF_INIT, lock = STRBUF_INIT, tmp = STRBUF_INIT, msg = STRBUF_INIT;
	struct load_progress lp;
	int fd = -1, ret = -1, kind, known;

	strbuf_reset(ref);
	if (!image || image[0] != '/') {
		/* the engine pulls a missing one at run time; this call also gives a
		 * rootless podman its pause process outside the task (supervise.c) */
		strbuf_addstr(ref, image ? image : "");
		if (image)
			engine_run(engine, (const char *[]){ "image", "exists", image, NULL }, NULL);
		return image ? 0 : -1;
	}
	strbuf_addf(ref, "%s:%s", CONTAINER_IMAGE_REPO, digest + 7);
	known = known_loaded(home, digest);
	if (known ||
	    engine_run(engine, (const char *[]){ "image", "exists", ref->buf, NULL }, NULL) == 0) {
		if (u && user_has_image(shared_root, image, digest, home, u, why) < 0)
			return -1;
		if (!known)
			remember_loaded(engine, home, digest, ref->buf);
		mark_cached(shared_root, digest + 7, node);
		return 0;
	}
	/* one loader per node: the others wait, then find it loaded */
	strbuf_addf(&dir, "%s/images", home);
	strbuf_addf(&lock, "%s/.lock", dir.buf);
	if (mkdir_p(dir.buf, 0700) < 0 ||
	    (fd = open(lock.buf, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
		strbuf_addf(why, "cannot open '%s': %s", lock.buf, strerror(errno));
		goto out;
	}
	while (flock(fd, LOCK_EX) < 0)
		if (errno != EINTR) {
			strbuf_addf(why, "cannot lock '%s': %s", lock.buf, strerror(errno));
			goto out;
		}
	if (engine_run(engine, (const char *[]){ "image", "exists", ref->buf, NULL }, NULL) == 0) {
		ret = u ? user_has_image(shared_root, image, digest, home, u, why) : 0;
		goto out;
	}
	memset(&lp, 0, sizeof(lp));
	lp.note = note;
	lp.data = data;
	lp.image = image;
	lp.started = dt_mono_ms();
	strbuf_addf(&tmp, "%s/load-%s.tar", dir.buf, digest + 7);
	if (copy_image(shared_root, image, digest, tmp.buf, u, home, &lp, why) < 0)
		goto out;
	{
		int tfd = open(tmp.buf, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

		kind = tfd < 0 ? -1 : is_squashfs(tfd) ? 2 : tar_is_archive(tfd);
		if (tfd >= 0)
			close(tfd);
	}
	if (kind == 2)
		ret = import_squashfs(engine, tmp.buf, ref->buf, why);
	else if (kind == 1)
		ret = load_archive(engine, tmp.buf, ref->buf, why);
	else if (kind == 0)
		ret = import_rootfs(engine, tmp.buf, ref->buf, why);
	else {
		/* compressed: an archive, else a root filesystem */
		struct strbuf first = STRBUF_INIT;

		ret = load_archive(engine, tmp.buf, ref->buf, &first);
		if (ret < 0 && (ret = import_rootfs(engine, tmp.buf, ref->buf, why)) < 0)
			strbuf_addf(why, "; as an image archive: %s", first.buf);
		strbuf_release(&first);
	}
	if (!ret && note) {
		strbuf_addf(&msg, "dtagent: loaded image '%s' (%s) into %s in %.1f s", image,
			    digest, engine, (double)(dt_mono_ms() - lp.started) / 1000);
		note(msg.buf, data);
	}
out:
	if (tmp.len)
		unlink(tmp.buf);
	if (fd >= 0)
		close(fd);          /* unlocks */
	if (!ret) {
		remember_loaded(engine, home, digest, ref->buf);
		mark_cached(shared_root, digest + 7, node);
	}
	strbuf_release(&dir);
	strbuf_release(&lock);
	strbuf_release(&tmp);
	strbuf_release(&msg);
	return ret;
}

/* A CDI spec for NVIDIA GPUs (nvidia-ctk cdi generate) in dir, or 0. */
static int has_nvidia_cdi(const char *cdi_dir)
{
	static const char *const dirs[] = { "/etc/cdi", "/var/run/cdi" };
	static const char *const names[] = { "nvidia.yaml", "nvidia.json" };
	struct strbuf p = STRBUF_INIT;
	int found = 0;

	for (size_t d = 0; d < (cdi_dir ? 1 : ARRAY_SIZE(dirs)) && !found; d++)
		for (size_t n = 0; n < ARRAY_SIZE(names) && !found; n++) {
			strbuf_reset(&p);
			strbuf_addf(&p, "%s/%s", cdi_dir ? cdi_dir : dirs[d], names[n]);
			found = access(p.buf, R_OK) == 0;
		}
	strbuf_release(&p);
	return found;
}

static int char_device(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

/* --device for each GPU of the task; the count passed, or -1 without devices */
static int gpu_devices(const struct container_run *r, struct strvec *out, struct strbuf *notes)
{
	struct strbuf dev = STRBUF_INIT, spec = STRBUF_INIT;
	const char *dir = r->dev_dir ? r->dev_dir : "/dev";
	const char *p = r->gpus;
	int nr = 0, missing = 0;

	if (has_nvidia_cdi(r->cdi_dir)) {
		while (*p) {
			size_t len = strcspn(p, ",");

			strbuf_reset(&spec);
			strbuf_addf(&spec, "--device=nvidia.com/gpu=%.*s", (int)len, p);
			strvec_push(out, spec.buf);
			nr++;
			p += len + (p[len] == ',');
		}
		strbuf_release(&spec);
		return nr;
	}
	while (*p) {
		size_t len = strcspn(p, ",");

		strbuf_reset(&dev);
		strbuf_addf(&dev, "%s/nvidia%.*s", dir, (int)len, p);
		if (char_device(dev.buf)) {
			strbuf_reset(&spec);
			strbuf_addf(&spec, "--device=%s:/dev/nvidia%.*s", dev.buf, (int)len, p);
			strvec_push(out, spec.buf);
			nr++;
		} else {
			missing++;
		}
		p += len + (p[len] == ',');
	}
	if (nr) {
		static const char *const common[] = { "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools" };

		for (size_t i = 0; i < ARRAY_SIZE(common); i++) {
			strbuf_reset(&dev);
			strbuf_addf(&dev, "%s/%s", dir, common[i]);
			if (!char_device(dev.buf))
				continue;
			strbuf_reset(&spec);
			strbuf_addf(&spec, "--device=%s:/dev/%s", dev.buf, common[i]);
			strvec_push(out, spec.buf);
		}
	}
	if (missing)
		strbuf_addf(notes, "dtagent: note: %d of the task's GPUs (%s) have no device node "
			    "in %s (fake GPUs?): the container gets %s", missing, r->gpus, dir,
			    nr ? "the others only" : "no GPU devices");
	strbuf_release(&dev);
	strbuf_release(&spec);
	return nr ? nr : -1;
}

static void push_volume(struct strvec *out, const char *path)
{
	struct strbuf v = STRBUF_INIT;

	/* the same path inside; a path with ':' or ',' cannot be said to podman */
	if (!path || strpbrk(path, ":,")) {
		strbuf_release(&v);
		return;
	}
	strbuf_addf(&v, "--volume=%s:%s", path, path);
	strvec_push(out, v.buf);
	strbuf_release(&v);
}

int container_stdbuf(const struct strvec *env, int keep_rest, struct strbuf *lib,
		     struct strbuf *inside)
{
	const char *pre = strvec_getenv(env, "LD_PRELOAD");
	const char *lb = strvec_getenv(env, DT_LINE_BUFFERED_ENV);
	size_t len;

	if (!lb || strcmp(lb, "1") || !pre || !strvec_getenv(env, "_STDBUF_O"))
		return 0;
	len = strcspn(pre, ":");
	/* linelog_stdbuf_env() puts it first: anything else is the job's */
	if (len < strlen("/libstdbuf.so") ||
	    strncmp(pre + len - strlen("/libstdbuf.so"), "/libstdbuf.so", strlen("/libstdbuf.so")))
		return 0;
	strbuf_add(lib, pre, len);
	strbuf_addf(inside, "%s%s", CONTAINER_STDBUF, keep_rest ? pre + len : "");
	return 1;
}

void container_run_argv(const struct container_run *r, const struct strvec *argv,
			const struct strvec *pass, struct strvec *out, struct strvec *env_set,
			struct strbuf *notes)
{
	struct strbuf sb = STRBUF_INIT;
	struct stat st;

	strvec_pushv(out, (const char *[]){ r->engine, "run", "--rm", "--network=host", "--pid=host",
					    "--tmpfs=/tmp:rw,exec,nosuid,nodev,mode=1777",
					    "--log-driver=none", "--entrypoint=", NULL });
	strbuf_addf(&sb, "--name=%s", r->name);
	strvec_push(out, sb.buf);
	if (r->ref[0] != '/' && starts_with(r->ref, CONTAINER_IMAGE_REPO ":"))
		strvec_push(out, "--pull=never");
	/* the node's /dev/shm: big, and shared by the ranks of the node (NCCL's
	 * shared-memory transport between ranks in different containers) */
	if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode))
		strvec_push(out, "--volume=/dev/shm:/dev/shm");
	else
		strvec_push(out, "--shm-size=1g");
	push_volume(out, r->shared_dir);
	if (r->submit_dir && (!r->shared_dir || !sf_below(r->submit_dir, r->shared_dir)))
		push_volume(out, r->submit_dir);
	if (r->cwd && strcmp(r->cwd, "/") &&
	    (!r->shared_dir || !sf_below(r->cwd, r->shared_dir)) &&
	    (!r->submit_dir || strcmp(r->cwd, r->submit_dir)))
		push_volume(out, r->cwd);
	push_volume(out, r->extra_volume);
	if (r->keep_id && geteuid() != 0)
		strvec_push(out, "--userns=keep-id");
	if (r->user) {
		/* root's engine, the user's rank: their uid, gid and groups, no
		 * capabilities, and no way to regain any (setuid files in the image) */
		strbuf_reset(&sb);
		strbuf_addf(&sb, "--user=%lld:%lld", r->user->uid, r->user->gid);
		strvec_push(out, sb.buf);
		for (int i = 0; i < r->user->nr_groups; i++) {
			if ((long long)r->user->groups[i] == r->user->gid)
				continue;
			strbuf_reset(&sb);
			strbuf_addf(&sb, "--group-add=%u", (unsigned)r->user->groups[i]);
			strvec_push(out, sb.buf);
		}
		strvec_pushv(out, (const char *[]){ "--cap-drop=all",
						    "--security-opt=no-new-privileges", NULL });
	}
	if (r->cwd) {
		strbuf_reset(&sb);
		strbuf_addf(&sb, "--workdir=%s", r->cwd);
		strvec_push(out, sb.buf);
	}
	if (r->gpus && *r->gpus) {
		int nr = gpu_devices(r, out, notes);

		if (nr > 0) {
			/* inside, the devices passed are the only ones: 0..nr-1 */
			strbuf_reset(&sb);
			for (int i = 0; i < nr; i++)
				strbuf_addf(&sb, "%s%d", i ? "," : "", i);
			strvec_setenv(env_set, "CUDA_VISIBLE_DEVICES", sb.buf);
		}
	}
	if (r->stdbuf_lib && !strpbrk(r->stdbuf_lib, ":,")) {
		/* the node's library needs only glibc 2.4's symbols: any glibc image */
		strbuf_reset(&sb);
		strbuf_addf(&sb, "--volume=%s:%s:ro", r->stdbuf_lib, CONTAINER_STDBUF);
		strvec_push(out, sb.buf);
		strbuf_reset(&sb);
		strbuf_addf(&sb, "--env=LD_PRELOAD=%s", r->ld_preload);
		strvec_pushv(out, (const char *[]){ sb.buf, "--env=_STDBUF_O=L", NULL });
	}
	if (r->env_file) {
		strbuf_reset(&sb);
		strbuf_addf(&sb, "--env-file=%s", r->env_file);
		strvec_push(out, sb.buf);
	}
	for (size_t i = 0; !r->env_file && i < pass->nr; i++) {
		strbuf_reset(&sb);
		strbuf_addf(&sb, "--env=%s", pass->v[i]);
		strvec_push(out, sb.buf);
	}
	strvec_push(out, r->ref);
	strvec_pushv(out, (const char **)argv->v);
	strbuf_release(&sb);
}

void container_remove(const char *engine, const char *name, const char *const *env)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf out = STRBUF_INIT;

	strvec_pushv(&cp.args, (const char *[]){ engine, "rm", "--force", "--time=0", "--ignore",
					      name, NULL });
	if (env) {
		cp.clean_env = 1;
		strvec_pushv(&cp.env, (const char **)env);
	}
	cp.no_stdin = 1;
	cp.err_to_out = 1;
	if (capture_command(&cp, &out, 16 * 1024) != 0)
		dtlog(DTLOG_WARN, "cannot remove container '%s': %s", name, out.buf);
	strbuf_release(&out);
	child_process_clear(&cp);
}
