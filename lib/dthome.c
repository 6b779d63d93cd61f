/*
 * dthome.c - the dtctl home directory (see dthome.h).
 */
#include "dthome.h"

#include <errno.h>
#include <ftw.h>
#include <pwd.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *home;

const char *dt_home(void)
{
	const char *e, *h;

	if (home)
		return home;
	e = getenv("DTCTL_HOME");
	if (e && *e) {
		home = xstrdup(e);
	} else {
		struct strbuf sb = STRBUF_INIT;

		h = getenv("HOME");
		if (!h || !*h) {
			struct passwd *pw = getpwuid(getuid());

			h = pw ? pw->pw_dir : "/tmp";
		}
		strbuf_addf(&sb, "%s/.dtctl", h);
		home = strbuf_detach(&sb, NULL);
	}
	return home;
}

void dt_home_reset(void)
{
	free(home);
	home = NULL;
}

int mkdir_p(const char *path, int mode)
{
	struct strbuf sb = STRBUF_INIT;
	const char *p = path;
	int ret = 0;

	while (ret == 0) {
		const char *slash = strchr(p + (*p == '/'), '/');

		strbuf_reset(&sb);
		strbuf_add(&sb, path, slash ? (size_t)(slash - path) : strlen(path));
		if (sb.len && mkdir(sb.buf, (mode_t)mode) < 0 && errno != EEXIST)
			ret = error_errno("cannot create directory '%s'", sb.buf);
		if (!slash)
			break;
		p = slash;
	}
	strbuf_release(&sb);
	return ret;
}

int dt_home_ensure(void)
{
	const char *h = dt_home();
	struct stat st;

	/* there already (every call but the first): no mkdir of each folder on the way */
	if (stat(h, &st) < 0 || !S_ISDIR(st.st_mode)) {
		if (mkdir_p(h, 0700) < 0)
			return -1;
		if (stat(h, &st) < 0)
			return error_errno("cannot stat '%s'", h);
	}
	if (!S_ISDIR(st.st_mode))
		return error("'%s' is not a directory", h);
	if ((st.st_mode & 077) && chmod(h, 0700) < 0)
		return error_errno("cannot make '%s' private (chmod 0700)", h);
	return 0;
}

void dt_home_path(struct strbuf *sb, const char *name)
{
	strbuf_addf(sb, "%s/%s", dt_home(), name);
}

void dt_self_dir(struct strbuf *sb)
{
	char buf[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
	char *slash;

	if (n <= 0) {
		strbuf_addstr(sb, ".");
		return;
	}
	buf[n] = '\0';
	slash = strrchr(buf, '/');
	if (slash)
		*slash = '\0';
	strbuf_addstr(sb, buf);
}

int dt_builtin_template(const char *name, struct strbuf *path)
{
	/* bin/ of a build, build/<kind>/bin of an out-of-tree one, <prefix>/bin */
	static const char *const rel[] = {
		"/../templates/", "/../../../templates/", "/../share/dtctl/templates/",
	};
	struct strbuf cand = STRBUF_INIT, tried = STRBUF_INIT;
	char exe[4096], *slash;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	struct stat st;

	exe[n > 0 ? n : 0] = '\0';
	if (n <= 0 || !(slash = strrchr(exe, '/')))
		snprintf(exe, sizeof(exe), ".");
	else
		*slash = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(rel); i++) {
		strbuf_reset(&cand);
		strbuf_addf(&cand, "%s%s%s", exe, rel[i], name);
		if (!stat(cand.buf, &st) && S_ISREG(st.st_mode) && !access(cand.buf, R_OK)) {
			strbuf_addbuf(path, &cand);
			strbuf_release(&cand);
			strbuf_release(&tried);
			return 0;
		}
		strbuf_addf(&tried, "%s%s", !i ? "" : i + 1 < ARRAY_SIZE(rel) ? ", " : " or ", cand.buf);
	}
	strbuf_addbuf(path, &tried);
	strbuf_release(&cand);
	strbuf_release(&tried);
	return -1;
}

/* nftw() has no user argument: the first error of the one rm_tree() running */
static int rm_tree_errno;

static int rm_tree_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if ((type == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT)
		rm_tree_errno = rm_tree_errno ? rm_tree_errno : errno;
	return 0;
}

int rm_tree(const char *path)
{
	rm_tree_errno = 0;
	if (nftw(path, rm_tree_one, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
		return -1;
	if (rm_tree_errno) {
		errno = rm_tree_errno;
		return -1;
	}
	return 0;
}
