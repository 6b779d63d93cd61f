/*
 * dthome.c - the dtctl home directory (see dthome.h).
 */
#include "dthome.h"

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
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

	if (mkdir_p(h, 0700) < 0)
		return -1;
	if (stat(h, &st) < 0)
		return error_errno("cannot stat '%s'", h);
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
