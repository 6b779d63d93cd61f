/*
 * safefile.c - files in directories that user code can write (see safefile.h).
 *
 * One walk (sf_dir), one reader (sf_read_at), one writer (sf_write_at) and
 * one appender (sf_append_at); write_file_atomic() for the trusted homes goes
 * through the same writer, so there is one temp-file-and-rename in the tree.
 */
#include "safefile.h"
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SF_DIR_MODE 0775

/*
 * The umask, read once before main() (when nothing else runs that could
 * create a file between the two umask calls), kept here because umask(2)
 * cannot be read without setting it.
 */
static mode_t the_umask = 022;

__attribute__((constructor)) static void read_umask(void)
{
	the_umask = umask(022);
	umask(the_umask);
}

mode_t sf_umask(void)
{
	return the_umask;
}

void sf_set_umask(mode_t mask)
{
	the_umask = mask & 0777;
	umask(the_umask);
}

static const char *type_name(mode_t m)
{
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISLNK(m))
		return "a symbolic link";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "a device";
	return "not a regular file";
}

/* One line of why: "'<what>' <reason>"; errno is kept. */
static int fail(struct strbuf *why, const char *what, const char *name, int e, size_t limit)
{
	if (why) {
		strbuf_reset(why);
		strbuf_addf(why, "'%s%s%s' ", what ? what : "", what && *what && name ? "/" : "",
			    name ? name : "");
		switch (e) {
		case ELOOP:
			strbuf_addstr(why, "is a symbolic link (not followed)");
			break;
		case ENXIO:
			strbuf_addstr(why, "is a FIFO or socket with no peer (not opened)");
			break;
		case EFBIG:
			strbuf_addf(why, "is larger than %zu bytes (not read)", limit);
			break;
		default:
			strbuf_addstr(why, strerror(e));
		}
	}
	errno = e;
	return -1;
}

static int fail_type(struct strbuf *why, const char *name, mode_t m, int e)
{
	if (why) {
		strbuf_reset(why);
		strbuf_addf(why, "'%s' is %s (not used)", name, type_name(m));
	}
	errno = e;
	return -1;
}

int sf_next_component(const char **p, char *name, size_t size)
{
	const char *s = *p, *e;
	size_t n;

	while (*s == '/')
		s++;
	if (!*s) {
		*p = s;
		return 0;
	}
	e = strchrnul(s, '/');
	n = (size_t)(e - s);
	*p = e;
	if (n >= size || n > NAME_MAX || (n == 1 && s[0] == '.') ||
	    (n == 2 && s[0] == '.' && s[1] == '.'))
		return -1;
	memcpy(name, s, n);
	name[n] = '\0';
	return 1;
}

/* As root, hand what we made to the owner of the directory it is in. */
static void give_like_parent(int dfd, int fd, unsigned flags)
{
	struct stat pst;

	if (!(flags & SF_OWNER) || geteuid() != 0 || fstat(dfd, &pst) < 0 || pst.st_uid == 0)
		return;
	if (fchown(fd, pst.st_uid, pst.st_gid) < 0) {
		/* best effort, as before: the agents may then be unable to write */
	}
}

/* The fd (O_DIRECTORY) of directory name in dfd, never through a symlink (ELOOP). */
static int open_subdir(int dfd, const char *name)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	int e = errno;
	struct stat st;

	/* ENOTDIR also for a symlink with O_DIRECTORY|O_NOFOLLOW: say which */
	if (fd < 0 && e == ENOTDIR && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISLNK(st.st_mode))
		e = ELOOP;
	errno = e;
	return fd;
}

int sf_dir_at(int dfd, const char *name, struct strbuf *why)
{
	char one[NAME_MAX + 1];
	const char *start = name ? name : "", *p = start;
	int fd;

	/* one component: "", ".", "..", "a/b", "/a" are refused as in a walk */
	if (sf_next_component(&p, one, sizeof(one)) != 1 || *p || strcmp(one, start))
		return fail(why, start, NULL, EINVAL, 0);
	fd = open_subdir(dfd, start);
	return fd < 0 ? fail(why, start, NULL, errno, 0) : fd;
}

int sf_dir(const char *root, const char *rel, unsigned flags, struct strbuf *why)
{
	char name[NAME_MAX + 1];
	const char *p = rel ? rel : "";
	int dfd, r;

	if (!root || !*root)
		return fail(why, "(no root)", NULL, EINVAL, 0);
	if (*p == '/')
		return fail(why, rel, NULL, EINVAL, 0);
	/* the root itself is trusted (it may be an administrator's symlink) */
	dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
	if (dfd < 0)
		return fail(why, root, NULL, errno, 0);
	while ((r = sf_next_component(&p, name, sizeof(name))) != 0) {
		int fd, e;

		if (r < 0) {
			close(dfd);
			return fail(why, rel, NULL, EINVAL, 0);
		}
		/* a new dir gets 0775 less the umask (safefile.h), set on its fd */
		fd = (flags & SF_MKDIRS) ? sf_mkdir_new_at(dfd, name, SF_DIR_MODE, flags, NULL) : -1;
		if (fd < 0)
			fd = open_subdir(dfd, name);
		e = errno;
		if (fd < 0) {
			close(dfd);
			return fail(why, rel, NULL, e, 0);
		}
		close(dfd);
		dfd = fd;
	}
	return dfd;
}

int sf_open_read_at(int dfd, const char *name, struct stat *st, struct strbuf *why)
{
	struct stat sb;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);

	if (!st)
		st = &sb;
	if (fd < 0)
		return fail(why, name, NULL, errno, 0);
	if (fstat(fd, st) < 0) {
		int e = errno;

		close(fd);
		return fail(why, name, NULL, e, 0);
	}
	if (!S_ISREG(st->st_mode)) {
		mode_t m = st->st_mode;

		close(fd);
		return fail_type(why, name, m, S_ISDIR(m) ? EISDIR : EINVAL);
	}
	return fd;
}

/* Read fd to its end, refusing more than limit bytes (0 = no limit). */
static ssize_t read_bounded(int fd, struct strbuf *sb, size_t limit, const struct stat *st)
{
	/* refused from the size first, and again while reading (a file that grows) */
	if (limit && (size_t)st->st_size > limit) {
		errno = EFBIG;
		return -1;
	}
	return strbuf_read_fd(sb, fd, limit);
}

/* read_bounded(), then fd closed; a failure named after name */
static ssize_t read_and_close(int fd, const struct stat *st, struct strbuf *sb, size_t limit,
			      const char *name, struct strbuf *why)
{
	ssize_t n = read_bounded(fd, sb, limit, st);
	int e = errno;

	close(fd);
	if (n < 0)
		return fail(why, name, NULL, e, limit);
	return n;
}

ssize_t sf_read_at(int dfd, const char *name, struct strbuf *sb, size_t limit, struct strbuf *why)
{
	struct stat st = { 0 };
	int fd = sf_open_read_at(dfd, name, &st, why);

	if (fd < 0)
		return -1;
	return read_and_close(fd, &st, sb, limit, name, why);
}

static int write_all(int fd, const void *data, size_t len)
{
	const char *p = data;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int sf_write_at(int dfd, const char *name, const void *data, size_t len, int mode,
		unsigned flags, struct strbuf *why)
{
	char rnd[17], tmp[NAME_MAX + 1];
	int fd = -1, e;

	if (strchr(name, '/') || strlen(name) + 24 > NAME_MAX)
		return fail(why, name, NULL, EINVAL, 0);
	for (int tries = 0; fd < 0 && tries < 8; tries++) {
		if (dt_random_hex(rnd, 8) < 0)
			return fail(why, name, NULL, EAGAIN, 0);
		snprintf(tmp, sizeof(tmp), ".%s.tmp.%s", name, rnd);
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			return fail(why, name, NULL, errno, 0);
	}
	if (fd < 0)
		return fail(why, name, NULL, EEXIST, 0);
	if (write_all(fd, data, len) < 0 || fchmod(fd, (mode_t)mode & ~the_umask) < 0 ||
	    ((flags & SF_SYNC) && fsync(fd) < 0))
		goto fail_close;
	give_like_parent(dfd, fd, flags);
	if (close(fd) < 0) {
		fd = -1;
		goto fail_close;
	}
	fd = -1;
	/* renameat replaces a symlink or file at name itself, never its target */
	if (renameat(dfd, tmp, dfd, name) < 0)
		goto fail_close;
	return 0;

fail_close:
	e = errno;
	if (fd >= 0)
		close(fd);
	unlinkat(dfd, tmp, 0);
	return fail(why, name, NULL, e, 0);
}

int sf_open_append_at(int dfd, const char *name, int mode, unsigned flags, struct strbuf *why)
{
	struct stat st;
	int fd;

	fd = openat(dfd, name, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK |
		    O_CLOEXEC | O_NOCTTY, mode);
	if (fd < 0)
		return fail(why, name, NULL, errno, 0);
	if (fstat(fd, &st) < 0) {
		int e = errno;

		close(fd);
		return fail(why, name, NULL, e, 0);
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return fail_type(why, name, st.st_mode, EINVAL);
	}
	/* a hard link planted by whoever may write the dir (team mode: the job's
	 * user; a daemon appending as root would write into the linked file) */
	if (st.st_nlink != 1) {
		close(fd);
		if (why) {
			strbuf_reset(why);
			strbuf_addf(why, "'%s' has %lu hard links (not appended to)", name,
				    (unsigned long)st.st_nlink);
		}
		errno = EMLINK;
		return -1;
	}
	if (st.st_size == 0)
		give_like_parent(dfd, fd, flags);
	return fd;
}

int sf_append_at(int dfd, const char *name, const void *data, size_t len, int mode,
		 unsigned flags, struct strbuf *why)
{
	int fd = sf_open_append_at(dfd, name, mode, flags, why), e;

	if (fd < 0)
		return -1;
	if (write_all(fd, data, len) < 0) {
		e = errno;
		close(fd);
		return fail(why, name, NULL, e, 0);
	}
	if (close(fd) < 0)
		return fail(why, name, NULL, errno, 0);
	return 0;
}

int sf_stat_at(int dfd, const char *name, struct stat *st)
{
	return fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW);
}

/*
 * Split rel into its directory part (copied into dir) and last component;
 * -1 (EINVAL) for a rel without one.
 */
static int split(const char *rel, struct strbuf *dir, const char **base)
{
	const char *slash = strrchr(rel, '/');
	const char *b = slash ? slash + 1 : rel;

	if (!*b || !strcmp(b, ".") || !strcmp(b, "..") || strlen(b) > NAME_MAX) {
		errno = EINVAL;
		return -1;
	}
	strbuf_reset(dir);
	if (slash)
		strbuf_add(dir, rel, (size_t)(slash - rel));
	*base = b;
	return 0;
}

/* The parent dir fd of root/rel and its last name; the `what` of errors is rel. */
static int walk_parent(const char *root, const char *rel, unsigned flags, const char **base,
		       struct strbuf *why)
{
	struct strbuf dir = STRBUF_INIT;
	int dfd;

	*base = rel;
	if (split(rel, &dir, base) < 0) {
		strbuf_release(&dir);
		return fail(why, rel, NULL, EINVAL, 0);
	}
	dfd = sf_dir(root, dir.buf, flags, why);
	strbuf_release(&dir);
	return dfd;
}

/* Errors of the *_at forms name only the last component: make them name rel. */
static void name_rel(struct strbuf *why, const char *base, const char *rel)
{
	struct strbuf q = STRBUF_INIT;

	if (!why || base == rel)
		return;
	strbuf_addf(&q, "'%s'", base);
	if (starts_with(why->buf, q.buf)) {
		struct strbuf n = STRBUF_INIT;

		strbuf_addf(&n, "'%s'%s", rel, why->buf + q.len);
		strbuf_reset(why);
		strbuf_addbuf(why, &n);
		strbuf_release(&n);
	}
	strbuf_release(&q);
}

ssize_t sf_read(const char *root, const char *rel, struct strbuf *sb, size_t limit,
		struct strbuf *why)
{
	const char *base;
	int dfd = walk_parent(root, rel, 0, &base, why), e;
	ssize_t n;

	if (dfd < 0)
		return -1;
	n = sf_read_at(dfd, base, sb, limit, why);
	e = errno;
	close(dfd);
	name_rel(why, base, rel);
	errno = e;
	return n;
}

/* sf_write / sf_append: walk to rel's directory (creating it with SF_MKDIRS), then op there. */
static int put_rel(int (*op)(int, const char *, const void *, size_t, int, unsigned,
			     struct strbuf *),
		   const char *root, const char *rel, const void *data, size_t len, int mode,
		   unsigned flags, struct strbuf *why)
{
	const char *base;
	int dfd = walk_parent(root, rel, flags & (SF_MKDIRS | SF_OWNER), &base, why), r, e;

	if (dfd < 0)
		return -1;
	r = op(dfd, base, data, len, mode, flags, why);
	e = errno;
	close(dfd);
	name_rel(why, base, rel);
	errno = e;
	return r;
}

int sf_write(const char *root, const char *rel, const void *data, size_t len, int mode,
	     unsigned flags, struct strbuf *why)
{
	return put_rel(sf_write_at, root, rel, data, len, mode, flags, why);
}

int sf_append(const char *root, const char *rel, const void *data, size_t len, int mode,
	      unsigned flags, struct strbuf *why)
{
	return put_rel(sf_append_at, root, rel, data, len, mode, flags, why);
}

int sf_open_read(const char *root, const char *rel, struct stat *st, struct strbuf *why)
{
	const char *base;
	int dfd = walk_parent(root, rel, 0, &base, why), fd, e;

	if (dfd < 0)
		return -1;
	fd = sf_open_read_at(dfd, base, st, why);
	e = errno;
	close(dfd);
	name_rel(why, base, rel);
	errno = e;
	return fd;
}

int sf_open_append(const char *root, const char *rel, int mode, unsigned flags,
		   struct strbuf *why)
{
	const char *base;
	int dfd = walk_parent(root, rel, flags & (SF_MKDIRS | SF_OWNER), &base, why), fd, e;

	if (dfd < 0)
		return -1;
	fd = sf_open_append_at(dfd, base, mode, flags, why);
	e = errno;
	close(dfd);
	name_rel(why, base, rel);
	errno = e;
	return fd;
}

int sf_stat(const char *root, const char *rel, struct stat *st, struct strbuf *why)
{
	const char *base;
	int dfd = walk_parent(root, rel, 0, &base, why), r, e;

	if (dfd < 0)
		return -1;
	r = sf_stat_at(dfd, base, st);
	e = errno;
	close(dfd);
	if (r < 0)
		return fail(why, rel, NULL, e, 0);
	if (!S_ISREG(st->st_mode))
		return fail_type(why, rel, st->st_mode, S_ISLNK(st->st_mode) ? ELOOP : EINVAL);
	return 0;
}

int sf_mkdirs(const char *root, const char *rel, int mode, unsigned flags, struct strbuf *why)
{
	int dfd = sf_dir(root, rel, flags | SF_MKDIRS, why);

	if (dfd < 0)
		return -1;
	if (mode != SF_DIR_MODE && fchmod(dfd, (mode_t)mode & ~the_umask) < 0) {
		int e = errno;

		close(dfd);
		return fail(why, rel, NULL, e, 0);
	}
	close(dfd);
	return 0;
}

int sf_mkdir_new_at(int dfd, const char *name, int mode, unsigned flags, struct strbuf *why)
{
	int fd;

	if (mkdirat(dfd, name, (mode_t)mode) < 0)
		return fail(why, name, NULL, errno, 0);
	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return fail(why, name, NULL, errno, 0);
	if (fchmod(fd, (mode_t)mode & ~the_umask) < 0) {
		/* not fatal: it exists, with the umask's mode */
	}
	give_like_parent(dfd, fd, flags);
	return fd;
}

DIR *sf_opendir(const char *root, const char *rel, struct strbuf *why)
{
	int dfd = sf_dir(root, rel, 0, why);
	DIR *d;

	if (dfd < 0)
		return NULL;
	d = fdopendir(dfd);
	if (!d) {
		int e = errno;

		close(dfd);
		fail(why, rel, NULL, e, 0);
	}
	return d;
}

int sf_open_path_read(const char *path, struct stat *st, struct strbuf *why)
{
	return sf_open_read_at(AT_FDCWD, path, st, why);
}

ssize_t sf_read_path(const char *path, struct strbuf *sb, size_t limit, struct strbuf *why)
{
	return sf_read_at(AT_FDCWD, path, sb, limit, why);
}

/*
 * A path through links (an operator's /etc/ssl/certs/x.pem is one), yet
 * nothing but a regular file is ever opened for reading: O_PATH resolves it
 * without calling any driver's open (a FIFO, /dev/watchdog, a tape that
 * rewinds), fstat checks the inode, and that inode is reopened through
 * /proc/self/fd, so swapping the path afterwards changes nothing.
 */
ssize_t sf_read_named(const char *path, struct strbuf *sb, size_t limit, struct strbuf *why)
{
	char self[64];
	struct stat st;
	int pfd = open(path, O_PATH | O_CLOEXEC), fd, e;

	if (pfd < 0)
		return fail(why, path, NULL, errno, 0);
	if (fstat(pfd, &st) < 0) {
		e = errno;
		close(pfd);
		return fail(why, path, NULL, e, 0);
	}
	if (!S_ISREG(st.st_mode)) {
		close(pfd);
		return fail_type(why, path, st.st_mode, S_ISDIR(st.st_mode) ? EISDIR : EINVAL);
	}
	snprintf(self, sizeof(self), "/proc/self/fd/%d", pfd);
	fd = open(self, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	e = errno;
	close(pfd);
	if (fd < 0)
		return fail(why, path, NULL, e, 0);
	return read_and_close(fd, &st, sb, limit, path, why);
}

const char *sf_below(const char *path, const char *root)
{
	size_t n = strlen(root);

	while (n > 1 && root[n - 1] == '/')
		n--;
	if (strncmp(path, root, n))
		return NULL;
	if (!path[n])
		return path + n;
	if (path[n] != '/')
		return NULL;
	while (path[n] == '/')
		n++;
	return path + n;
}

/*
 * write_file_atomic / write_file_replace (declared in strbuf.h): the same
 * writer, for files in our own trusted homes, whose directory is opened by
 * path.
 */
static int write_file_rename(const char *path, const void *data, size_t len, int mode,
			     unsigned flags)
{
	const char *slash = strrchr(path, '/');
	struct strbuf dir = STRBUF_INIT;
	int dfd, r, e;

	if (slash)
		strbuf_add(&dir, path, slash == path ? 1 : (size_t)(slash - path));
	else
		strbuf_addch(&dir, '.');
	dfd = open(dir.buf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	strbuf_release(&dir);
	if (dfd < 0)
		return -1;
	r = sf_write_at(dfd, slash ? slash + 1 : path, data, len, mode, flags, NULL);
	e = errno;
	close(dfd);
	errno = e;
	return r;
}

int write_file_atomic(const char *path, const void *data, size_t len, int mode)
{
	return write_file_rename(path, data, len, mode, SF_SYNC);
}

int write_file_replace(const char *path, const void *data, size_t len, int mode)
{
	return write_file_rename(path, data, len, mode, 0);
}
