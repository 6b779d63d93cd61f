/*
 * usage.h - how every dtctl program reports problems.
 *
 * error() and warning() print "<prog>: error: ..." to stderr and return -1, so
 * library code writes `return error("cannot open '%s'", path);`.  die() prints
 * and exits; only programs (cli/, agent/, scheduler/, trainer/ main files) may
 * call it, never lib/ code.  Messages are lowercase, name the thing in quotes
 * and have no final period.
 */
#ifndef DT_USAGE_H
#define DT_USAGE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdnoreturn.h>

/*
 * Exit codes of every dtctl program (the table in docs/json.md, "Exit codes"):
 * an unknown job, sweep or node is a usage error (2: nothing was done); asking
 * again for what is already done (cancel, stop, pause twice) succeeds (0) and
 * says "already ...".
 */
enum dt_exit {
	DT_EXIT_OK = 0,
	DT_EXIT_FAIL = 1,     /* the job or command failed */
	DT_EXIT_USAGE = 2,    /* usage or configuration error, unknown id: nothing started */
	DT_EXIT_UNREACH = 3,  /* cannot reach or authenticate to the cluster, none set up */
	DT_EXIT_INTR = 130,   /* interrupted */
};

/* exit(code), after the hook a program set (dtctl: the JSON error of --json); die() uses it. */
noreturn void dt_exit(int code);
void dt_set_exit_hook(void (*hook)(int code));
/* The text of the last error()/die() message ("" if none). */
const char *dt_last_error(void);

#define DT_PRINTF(a, b) __attribute__((format(printf, a, b)))

void dt_set_progname(const char *name);
const char *dt_progname(void);

int error(const char *fmt, ...) DT_PRINTF(1, 2);
int error_errno(const char *fmt, ...) DT_PRINTF(1, 2);
void warning(const char *fmt, ...) DT_PRINTF(1, 2);
noreturn void die(const char *fmt, ...) DT_PRINTF(1, 2);
noreturn void die_errno(const char *fmt, ...) DT_PRINTF(1, 2);
/* die with a specific exit code (DT_EXIT_USAGE for bad configuration, ...) */
noreturn void die_code(int code, const char *fmt, ...) DT_PRINTF(2, 3);

/* getenv() that treats an empty value as unset: NULL or a non-empty string. */
const char *getenv_nonempty(const char *name);

/* Colour only on a TTY and when NO_COLOR is unset. */
int dt_want_color(int fd);

/* Allocation that never returns NULL (aborts with a message instead). */
void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* Grow an array `x` of `nr` used items to hold at least `want`. */
#define ALLOC_GROW(x, want, alloc) \
	do { \
		if ((size_t)(want) > (alloc)) { \
			size_t dt_n_ = (alloc) < 16 ? 16 : (alloc) * 2; \
			if (dt_n_ < (size_t)(want)) \
				dt_n_ = (size_t)(want); \
			(x) = xrealloc((x), dt_n_ * sizeof(*(x))); \
			(alloc) = dt_n_; \
		} \
	} while (0)

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
