/*
 * daemon.h - running dtagent and dtsched as proper daemons: the one main()
 * skeleton both share (daemon_main) and the pieces under it.
 *
 * One instance per pid file: the daemon holds an flock() on it for its whole
 * life (the lock dies with the process, so a kill -9 never leaves a stale
 * "running" state behind).  dt_daemonize() detaches (fork, setsid, fork,
 * chdir /, stdio to /dev/null, stderr to the log) while the starting process
 * waits on a pipe until the daemon says it serves (dt_daemon_ready) or why
 * it could not; so `dtagent --daemon` fails loudly, e.g. on a port in use.
 *
 *	fd = dt_pidfile_lock(path, &holder);      // -1: holder runs already
 *	if (daemon && dt_daemonize(log, lockfd, &ready) ) ... // parent never returns
 *	dt_pidfile_write(fd);
 *	... bind ... dt_daemon_ready(ready, NULL or "error text");
 */
#ifndef DT_DAEMON_H
#define DT_DAEMON_H

#include "parse-options.h"
#include "strbuf.h"

struct dt_auth_key;

/*
 * daemon_main() is the whole main() of a daemon; the program only declares
 * what differs (agent/dtagent.c, scheduler/dtsched.c):
 *
 *	static struct daemon_args args = { .port = DT_X_PORT_DEFAULT };
 *	static const struct option opts[] = {
 *		DAEMON_OPTIONS(&args, "x.log", "x", "an x", DT_X_PORT_DEFAULT),
 *		OPT_STRING(0, "home", &args.home, "dir", "..."),
 *		... its own options ...
 *	};
 *	static const struct daemon_def def = {
 *		.name = "dtx", .usage = "dtx [--daemon] [--port N]", .options = opts,
 *		.args = &args, .pidfile = "x.pid", .logfile = "x.log", .run = x_serve, ...
 *	};
 *	int main(int argc, const char **argv) { return daemon_main(&def, argc, argv); }
 *
 * In order: the options are parsed (usage: d->usage, then "NAME --stop |
 * --status"; -h and bad usage exit 2), --version prints "NAME VERSION",
 * --home becomes $DTCTL_HOME (so children agree), prepare() checks the
 * options and fills in the run's settings, the home is created, then one of:
 *   --status  "LABEL: running (pid N)" exit 0, or "LABEL: not running" exit 1;
 *   --stop    SIGTERM the holder of the pid file and wait, exit 0 (1 if it
 *             cannot be signalled); "LABEL: stopped" with say_stopped;
 *   serve     lock the pid file ("NAME: already running (pid N)": exit 0 with
 *             --daemon, else 1), detach with --daemon, write the pid, log to
 *             the log file (rotated at 10 MiB), run() until it returns.
 * release() runs last in every case that reaches the home.
 */
struct daemon_args {
	int version, daemonize, stop, status;
	int port;               /* --port, set to the default before parsing */
	const char *bind;       /* --bind, NULL: all addresses */
	const char *home;       /* --home: put in $DTCTL_HOME before prepare() */
	const char *label;      /* what --status and --stop name; NULL: the program */
};

#define DAEMON_STR_(x) #x
#define DAEMON_STR(x) DAEMON_STR_(x)
/*
 * -V/--version, --daemon, --stop, --status, -p/--port, --bind; e.g. "agent.log",
 * "agent", "an agent", DT_AGENT_PORT_DEFAULT (a number: shown in the help)
 */
#define DAEMON_OPTIONS(args, logname, what, a_what, port_default) \
	OPT_BOOL('V', "version", &(args)->version, "print the version and exit"), \
	OPT_BOOL(0, "daemon", &(args)->daemonize, "detach and log to <home>/" logname), \
	OPT_BOOL(0, "stop", &(args)->stop, "stop the running " what " of this home"), \
	OPT_BOOL(0, "status", &(args)->status, "say whether " a_what " runs (exit 0) or not (1)"), \
	OPT_INT('p', "port", &(args)->port, "port to serve on (default " \
		DAEMON_STR(port_default) ")"), \
	OPT_STRING(0, "bind", &(args)->bind, "addr", "address to listen on (default all)")

/* prepare()'s "not done: go on to --status, --stop or serving" */
#define DAEMON_GO (-1)

struct daemon_def {
	const char *name;               /* "dtagent": the program name in messages */
	const char *usage;              /* how to start it; "NAME --stop | --status" follows */
	const struct option *options;   /* starting with DAEMON_OPTIONS(args, ...) */
	struct daemon_args *args;       /* where the options put the common values */
	const char *pidfile, *logfile;  /* file names in the home */
	int say_stopped;                /* --stop prints "LABEL: stopped" */
	/*
	 * After the options, $DTCTL_HOME set: die_code(DT_EXIT_USAGE, ...) on bad
	 * values, fill in the run's settings, and return DAEMON_GO; or run a mode
	 * that is no daemon (dtagent --supervise) and return its exit code.
	 */
	int (*prepare)(int argc, const char **argv);
	/* Serve until stopped; say ready (or why not) with dt_daemon_ready(ready_fd). */
	int (*run)(int *ready_fd);
	void (*release)(void);          /* NULL or: free what prepare() made */
};

/* The daemon's main(): its exit code. */
int daemon_main(const struct daemon_def *d, int argc, const char **argv);

/*
 * Load the cluster secret of a daemon: `file` (its --secret), else
 * <home>/secret.  0, or -1 with the reason appended to err.
 */
int dt_daemon_key_load(struct dt_auth_key *key, const char *file, const char *home,
		       struct strbuf *err);

/* Lock the pid file; the locked fd, or -1 with *holder = the running pid (0 if unknown). */
int dt_pidfile_lock(const char *path, long long *holder);
/* Write our pid into the locked pid file. */
void dt_pidfile_write(int fd);
/* Is a daemon holding this pid file?  Its pid in *pid. */
int dt_pidfile_running(const char *path, long long *pid);
/*
 * Detach.  Returns 0 in the daemon (with *ready_fd to report on), every
 * descriptor it inherited above 2 closed but keep_fd (the pid file's lock);
 * the calling process does not return: it exits 0 once the daemon is ready,
 * 1 with the daemon's error on stderr otherwise.
 */
int dt_daemonize(const char *logfile, int keep_fd, int *ready_fd);
/* Report readiness (msg NULL) or the reason of failure to the waiting parent. */
void dt_daemon_ready(int *ready_fd, const char *msg);
/* SIGTERM the holder of the pid file and wait (SIGKILL after timeout_ms). 0 if stopped or not running. */
int dt_daemon_stop(const char *pidfile, const char *what, long long timeout_ms);

#endif
