/*
 * safefile.h - files in directories that user code can write (the shared dir).
 *
 * Every rank can write anything under the shared dir, while dtsched and the
 * agents read and write there with their own rights (dtsched may be root).
 * So nothing below a trusted root is opened by path.  The root (the shared
 * dir as cluster.yaml names it, which an administrator may have made a
 * symlink) is opened once; every component below it is opened with
 * openat(O_NOFOLLOW | O_DIRECTORY) from the fd of the one above, and:
 *
 *   - "", ".", ".." and absolute paths are refused (nothing leaves the root);
 *   - a symlink anywhere below the root is refused (ELOOP), never followed;
 *   - every open is O_NONBLOCK, so a FIFO never blocks, and fstat on the fd
 *     must say S_ISREG (or S_ISDIR) before a byte is read or written;
 *   - reads are bounded: a file over the caller's limit is refused (EFBIG);
 *   - a replaced file is written to a temp file made O_EXCL with a random
 *     name in the same directory, fchmod/fchown'd on its fd, then renameat;
 *   - ownership (SF_OWNER) is changed with fchown on fds, never by path.
 *
 * Functions return -1 with errno set and, when `why` is given, one line
 * naming the path and the reason ("'jobs/j-1/state' is a symbolic link"),
 * for the caller to log: a file that fails these checks is treated as
 * absent or corrupt, never followed and never waited for.
 *
 * The *_at forms take a directory fd the caller got from sf_dir(); the
 * others take (root, rel) and walk rel first.
 *
 * Modes: every mode given here is applied less the process's umask (as
 * open(2) and mkdir(2) do), also where it is set with fchmod, so that a job's
 * files are only as readable as cluster.yaml's job_files says (docs/config.md):
 * the daemons run with umask 027 ("group", the default: 0640 files and 0750
 * dirs) or 022 ("world"), and hand it to every task, whose programs (dttrain,
 * the rank logger) inherit it.
 */
#ifndef DT_SAFEFILE_H
#define DT_SAFEFILE_H

#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "strbuf.h"

enum {
	SF_MKDIRS = 1 << 0,  /* create missing directories (mode 0775 less the umask) on the walk */
	SF_OWNER  = 1 << 1,  /* as root, fchown what we create to the root dir's owner */
	SF_SYNC   = 1 << 2,  /* fsync a replaced file before the rename */
};

/*
 * Split the next component off *p (advancing it past any '/'); 1 and the
 * name in `name` (NUL-terminated, at most NAME_MAX), 0 at the end, -1 for a
 * component that is refused ("", ".", "..", too long).  Exposed for the fuzz
 * target of the path walk.
 */
int sf_next_component(const char **p, char *name, size_t size);

/* The umask the modes are masked with: the process's own when it started,
 * or what sf_set_umask() set (it sets the process's umask too). */
mode_t sf_umask(void);
void sf_set_umask(mode_t mask);

/* The fd (O_DIRECTORY) of root/rel; rel may be "" for the root itself. */
int sf_dir(const char *root, const char *rel, unsigned flags, struct strbuf *why);
/* The fd (O_DIRECTORY) of the directory name (one component) in dfd. */
int sf_dir_at(int dfd, const char *name, struct strbuf *why);

/* Open name in dfd for reading: a regular file or -1 (ELOOP, EISDIR, ENXIO, ...). */
int sf_open_read_at(int dfd, const char *name, struct stat *st, struct strbuf *why);
/* Append the whole file (at most `limit` bytes, else EFBIG) to sb. */
ssize_t sf_read_at(int dfd, const char *name, struct strbuf *sb, size_t limit,
		   struct strbuf *why);
/* Replace name in dfd with data: temp file, fchmod(mode), fchown (SF_OWNER), renameat. */
int sf_write_at(int dfd, const char *name, const void *data, size_t len, int mode,
		unsigned flags, struct strbuf *why);
/* Append to name in dfd (created with mode if missing); regular files only. */
int sf_append_at(int dfd, const char *name, const void *data, size_t len, int mode,
		 unsigned flags, struct strbuf *why);
/* The fd of name in dfd opened for appending (created with mode); regular files with
 * one link only (a hard link to another file is refused, EMLINK). */
int sf_open_append_at(int dfd, const char *name, int mode, unsigned flags, struct strbuf *why);
/* lstat of name in dfd; a symlink is reported as one (the caller decides). */
int sf_stat_at(int dfd, const char *name, struct stat *st);

/* The same, for root/rel (rel's last component is the file). */
ssize_t sf_read(const char *root, const char *rel, struct strbuf *sb, size_t limit,
		struct strbuf *why);
int sf_write(const char *root, const char *rel, const void *data, size_t len, int mode,
	     unsigned flags, struct strbuf *why);
int sf_append(const char *root, const char *rel, const void *data, size_t len, int mode,
	      unsigned flags, struct strbuf *why);
/* The fd of root/rel opened for reading (a regular file), or for appending
 * (created with mode; SF_MKDIRS makes missing directories on the way). */
int sf_open_read(const char *root, const char *rel, struct stat *st, struct strbuf *why);
int sf_open_append(const char *root, const char *rel, int mode, unsigned flags,
		   struct strbuf *why);
/* Regular files only: a symlink, FIFO or directory is -1 (ELOOP / EINVAL). */
int sf_stat(const char *root, const char *rel, struct stat *st, struct strbuf *why);
/* Make root/rel and its missing parents (mode, then SF_OWNER); 0 if it exists. */
int sf_mkdirs(const char *root, const char *rel, int mode, unsigned flags, struct strbuf *why);
/*
 * Make the new directory name in dfd (EEXIST if anything is there already),
 * mode `mode`, owner per SF_OWNER; its fd (O_DIRECTORY) or -1.
 */
int sf_mkdir_new_at(int dfd, const char *name, int mode, unsigned flags, struct strbuf *why);
/* opendir on the walked fd: entries are then opened with the *_at forms. */
DIR *sf_opendir(const char *root, const char *rel, struct strbuf *why);

/*
 * For readers that have a path and no trusted root (the CLI reading a log
 * file it was told about): open the last component O_NOFOLLOW|O_NONBLOCK and
 * insist on a regular file.  Intermediate directories are followed.
 */
int sf_open_path_read(const char *path, struct stat *st, struct strbuf *why);
ssize_t sf_read_path(const char *path, struct strbuf *sb, size_t limit, struct strbuf *why);

/*
 * A file named by a whole path that may go through symbolic links (a ca_file
 * in a job's notify:): only a regular file is ever opened (O_PATH first,
 * then that inode reopened), bounded by limit; never a FIFO or a device.
 */
ssize_t sf_read_named(const char *path, struct strbuf *sb, size_t limit, struct strbuf *why);

/* rel of `path` below `root` ("" for root itself), or NULL if it is not below it. */
const char *sf_below(const char *path, const char *root);

#endif
