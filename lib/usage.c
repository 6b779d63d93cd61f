/*
 * usage.c - error reporting and never-failing allocation for all programs.
 */
#include "usage.h"
#include "term.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *progname = "dtctl";

void dt_set_progname(const char *name)
{
	const char *slash = strrchr(name, '/');
	progname = slash ? slash + 1 : name;
}

const char *dt_progname(void)
{
	return progname;
}

/* the last error() or die() message, for programs that report it again (dtctl --json) */
static struct strbuf last_error = STRBUF_INIT;
static void (*exit_hook)(int code);

const char *dt_last_error(void)
{
	return last_error.buf;
}

void dt_set_exit_hook(void (*hook)(int code))
{
	exit_hook = hook;
}

void dt_exit(int code)
{
	if (exit_hook) {
		void (*hook)(int) = exit_hook;

		exit_hook = NULL;
		hook(code);
	}
	exit(code);
}

static void vreport(const char *prefix, const char *fmt, va_list ap, int errnum) DT_PRINTF(2, 0);
static void vreport(const char *prefix, const char *fmt, va_list ap, int errnum)
{
	struct strbuf msg = STRBUF_INIT, safe = STRBUF_INIT;

	/*
	 * The last line of defence: a message may quote a name from a spec, a
	 * reply of dtsched or an agent, and ours are plain text, so escaping
	 * control bytes here costs nothing (lines and tabs are layout: kept).
	 */
	strbuf_vaddf(&msg, fmt, ap);
	term_sanitize(&safe, msg.buf, msg.len, TERM_KEEP_NL | TERM_KEEP_TAB);
	if (strcmp(prefix, "warning: ")) {
		strbuf_reset(&last_error);
		strbuf_addbuf(&last_error, &safe);
		if (errnum)
			strbuf_addf(&last_error, ": %s", strerror(errnum));
	}
	if (errnum)
		fprintf(stderr, "%s: %s%s: %s\n", progname, prefix, safe.buf, strerror(errnum));
	else
		fprintf(stderr, "%s: %s%s\n", progname, prefix, safe.buf);
	strbuf_release(&msg);
	strbuf_release(&safe);
}

int error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("error: ", fmt, ap, 0);
	va_end(ap);
	return -1;
}

int error_errno(const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	va_start(ap, fmt);
	vreport("error: ", fmt, ap, e);
	va_end(ap);
	return -1;
}

void warning(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("warning: ", fmt, ap, 0);
	va_end(ap);
}

void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("fatal: ", fmt, ap, 0);
	va_end(ap);
	dt_exit(DT_EXIT_FAIL);
}

void die_errno(const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	va_start(ap, fmt);
	vreport("fatal: ", fmt, ap, e);
	va_end(ap);
	dt_exit(DT_EXIT_FAIL);
}

void die_code(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("fatal: ", fmt, ap, 0);
	va_end(ap);
	dt_exit(code);
}

const char *getenv_nonempty(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

int dt_want_color(int fd)
{
	if (getenv_nonempty("NO_COLOR"))
		return 0;
	return isatty(fd);
}

static void oom(size_t n)
{
	fprintf(stderr, "%s: fatal: out of memory allocating %zu bytes\n", progname, n);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		oom(n);
	return p;
}

void *xcalloc(size_t nmemb, size_t size)
{
	void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);

	if (!p)
		oom(nmemb * size);
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);

	if (!q)
		oom(n);
	return q;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);

	if (!p)
		oom(strlen(s));
	return p;
}

char *xstrndup(const char *s, size_t n)
{
	char *p = strndup(s, n);

	if (!p)
		oom(n);
	return p;
}
