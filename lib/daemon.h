/*
 * daemon.h - running dtagent and dtsched as proper daemons.
 *
 * One instance per pid file: the daemon holds an flock() on it for its whole
 * life (the lock dies with the process, so a kill -9 never leaves a stale
 * "running" state behind).  dt_daemonize() detaches (fork, setsid, fork,
 * chdir /, stdio to /dev/null, stderr to the log) while the starting process
 * waits on a pipe until the daemon says it serves (dt_daemon_ready) or why
 * it could not; so `dtagent --daemon` fails loudly, e.g. on a port in use.
 *
 *	fd = dt_pidfile_lock(path, &holder);      // -1: holder runs already
 *	if (daemon && dt_daemonize(log, &ready) ) ... // parent never returns
 *	dt_pidfile_write(fd);
 *	... bind ... dt_daemon_ready(ready, NULL or "error text");
 */
#ifndef DT_DAEMON_H
#define DT_DAEMON_H

/* Lock the pid file; the locked fd, or -1 with *holder = the running pid (0 if unknown). */
int dt_pidfile_lock(const char *path, long long *holder);
/* Write our pid into the locked pid file. */
void dt_pidfile_write(int fd);
/* Is a daemon holding this pid file?  Its pid in *pid. */
int dt_pidfile_running(const char *path, long long *pid);
/*
 * Detach.  Returns 0 in the daemon (with *ready_fd to report on); the
 * calling process does not return: it exits 0 once the daemon is ready, 1
 * with the daemon's error on stderr otherwise.
 */
int dt_daemonize(const char *logfile, int *ready_fd);
/* Report readiness (msg NULL) or the reason of failure to the waiting parent. */
void dt_daemon_ready(int *ready_fd, const char *msg);
/* SIGTERM the holder of the pid file and wait (SIGKILL after timeout_ms). 0 if stopped or not running. */
int dt_daemon_stop(const char *pidfile, const char *what, long long timeout_ms);

#endif
