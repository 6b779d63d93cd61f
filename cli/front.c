/*
 * front.c - what makes bin/dtctl a static front (issue 34 item 4): linked only
 * into the static-pie dtctl, never into dtctl-full or the unit tests.
 *
 * Why: a dtctl call is one process start, and a dynamic one pays ld.so (map
 * and relocate libc, resolve symbols: ~0.15-0.2 ms of the ~0.6 ms of `dtctl
 * --version`; docs/BENCHMARKS.md, "client start").  A static glibc program
 * must not dlopen() libssh2/libcrypto (a second libc in the process) nor use
 * the user and host databases (glibc's NSS loads its modules with dlopen), so
 * the commands and modes that need them run in dtctl-full: the same sources
 * linked dynamically, installed beside dtctl in the same folder.
 *
 * Who decides: the command table (cli/dtctl.c, rows marked FRONT) and
 * front_needs_full() below, in dtctl's dispatch, before the command does
 * anything; the front then execv()s dtctl-full with the same argv and
 * environment (same pid: exit codes and signals are the full binary's).  The
 * full binary is found next to /proc/self/exe (the kernel's word for where
 * this program is), never through $PATH or a file a job can write.
 *
 * The link wraps the NSS entry points (getpwuid, getpwnam, getpwent,
 * setpwent, endpwent, getaddrinfo; Makefile FRONT_WRAP) and defines dt_ssh_lib() and dt_libm()
 * here, so that no path of the front can reach NSS or dlopen: a call that
 * would hands the command to dtctl-full.  All such calls known come before
 * the command's first side effect (the cluster file's default user, the
 * dtctl home without $HOME, a head address that is a name); the dispatch
 * check hands these modes over before the command starts, and this is the
 * net for any new one.  libm is linked statically instead of loaded.
 */
#include "builtin.h"
#include "strbuf.h"
#include "usage.h"
#define DT_MATH_DL_IMPL   /* the names below are libm's own, not calls through the table */
#include "math-dl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FULL_NAME "dtctl-full"

static char **front_argv;

/* a copy of main's argv: parse_options() takes the global options out of it in place */
void front_init(int argc, char *const *argv)
{
	front_argv = xcalloc((size_t)argc + 1, sizeof(*front_argv));
	memcpy(front_argv, argv, (size_t)argc * sizeof(*front_argv));
}

/* dtctl-full beside this program, with the same argv and environment */
noreturn void front_exec_full(const char *why)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - sizeof(FULL_NAME) - 1);
	char *slash;

	if (n <= 0 || !(slash = memrchr(self, '/', n)))
		die("cannot find the full dtctl (for %s): /proc/self/exe: %s", why,
		    n < 0 ? strerror(errno) : "no folder");
	memcpy(slash + 1, FULL_NAME, sizeof(FULL_NAME));
	/* nothing buffered is flushed: dtctl-full does the command from its start */
	execv(self, front_argv);
	die("cannot run '%s' (the full dtctl, needed for %s): %s; reinstall dtctl (make install "
	    "installs both)", self, why, strerror(errno));
}

static int env_set(const char *name)
{
	const char *v = getenv(name);

	return v && *v;
}

/*
 * Why the command cannot run in the front, or NULL: decided from the table
 * row and the environment alone, before the command reads or writes anything.
 */
const char *front_needs_full(const struct cmd_struct *cmd)
{
	if (!cmd->front)
		return "this command";
	/* without them the dtctl home and the default user come from the user database */
	if (!env_set("HOME") || !env_set("USER"))
		return "the user database ($HOME or $USER not set)";
	/* a user elsewhere: ed25519 with libcrypto, a head address that may be a name */
	if (env_set("DTCTL_USER_KEY"))
		return "$DTCTL_USER_KEY";
	/* inside a Slurm allocation: its head's address comes from a record, maybe a name */
	if (env_set("SLURM_JOB_ID"))
		return "a Slurm allocation";
	return NULL;
}

/* --- the net: NSS and dlopen hand the command over (Makefile FRONT_WRAP) --- */

struct passwd *__wrap_getpwuid(uid_t uid);
struct passwd *__wrap_getpwnam(const char *name);
struct passwd *__wrap_getpwent(void);
void __wrap_setpwent(void);
void __wrap_endpwent(void);
int __wrap_getaddrinfo(const char *host, const char *serv, const struct addrinfo *hints,
		       struct addrinfo **res);
void __wrap_freeaddrinfo(struct addrinfo *ai);

struct passwd *__wrap_getpwuid(uid_t uid)
{
	front_exec_full("the user database (getpwuid)");
}

struct passwd *__wrap_getpwnam(const char *name)
{
	front_exec_full("the user database (getpwnam)");
}

struct passwd *__wrap_getpwent(void)
{
	front_exec_full("the user database (getpwent)");
}

void __wrap_setpwent(void)
{
	front_exec_full("the user database (setpwent)");
}

void __wrap_endpwent(void)
{
	front_exec_full("the user database (endpwent)");
}

/*
 * Numeric hosts and ports only (the head is 127.0.0.1 or an address), as one
 * addrinfo in one allocation; a name hands the command over (NSS hosts).
 */
int __wrap_getaddrinfo(const char *host, const char *serv, const struct addrinfo *hints,
		       struct addrinfo **res)
{
	struct {
		struct addrinfo ai;
		struct sockaddr_in6 sa;   /* room for either family */
	} *r;
	struct in_addr a4;
	struct in6_addr a6;
	char *end;
	unsigned long port = serv ? strtoul(serv, &end, 10) : 0;
	int v4 = host && inet_pton(AF_INET, host, &a4) == 1;
	int v6 = !v4 && host && inet_pton(AF_INET6, host, &a6) == 1;
	int family = hints ? hints->ai_family : AF_UNSPEC;

	if (!v4 && !v6)
		front_exec_full("a host name (getaddrinfo)");
	if (serv && (*end || port > 65535))
		return EAI_NONAME;
	if (family != AF_UNSPEC && family != (v4 ? AF_INET : AF_INET6))
		return EAI_FAMILY;
	r = calloc(1, sizeof(*r));
	if (!r)
		return EAI_MEMORY;
	r->ai.ai_family = v4 ? AF_INET : AF_INET6;
	r->ai.ai_socktype = hints && hints->ai_socktype ? hints->ai_socktype : SOCK_STREAM;
	r->ai.ai_protocol = hints ? hints->ai_protocol : 0;
	r->ai.ai_addr = (struct sockaddr *)&r->sa;
	if (v4) {
		struct sockaddr_in *s = (struct sockaddr_in *)&r->sa;

		s->sin_family = AF_INET;
		s->sin_port = htons((uint16_t)port);
		s->sin_addr = a4;
		r->ai.ai_addrlen = sizeof(*s);
	} else {
		r->sa.sin6_family = AF_INET6;
		r->sa.sin6_port = htons((uint16_t)port);
		r->sa.sin6_addr = a6;
		r->ai.ai_addrlen = sizeof(r->sa);
	}
	*res = &r->ai;
	return 0;
}

void __wrap_freeaddrinfo(struct addrinfo *ai)
{
	free(ai);   /* one allocation, made above */
}

/* the SSH commands are never FRONT rows; a new path to libssh2 is handed over */
const struct dt_ssh_lib *dt_ssh_lib(void);
const struct dt_ssh_lib *dt_ssh_lib(void)
{
	front_exec_full("SSH (libssh2)");
}

/* libm linked in (static), not loaded: the same table as lib/math-dl.c's */
const struct dt_libm *dt_libm(void)
{
	static const struct dt_libm lib = {
#define FN(f) .f##_fn = (f),
		DT_LIBM_FUNCS(FN)
#undef FN
	};

	return &lib;
}
