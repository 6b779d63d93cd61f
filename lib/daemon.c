/*
 * daemon.c - the main() skeleton of dtagent and dtsched, pid file lock,
 * detaching, readiness pipe, stopping (daemon.h).
 */
#include "daemon.h"

#include "auth.h"
#include "dthome.h"
#include "log.h"
#include "safefile.h"
#include "strbuf.h"
#include "usage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static long long read_pid(const char *path)
{
	struct strbuf sb = STRBUF_INIT;
	long long pid = 0;

	if (strbuf_read_file(&sb, path, 64) > 0)
		pid = atoll(sb.buf);
	strbuf_release(&sb);
	return pid;
}

int dt_pidfile_lock(const char *path, long long *holder)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);

	*holder = 0;
	if (fd < 0)
		return error_errno("cannot open pid file '%s'", path);
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		*holder = read_pid(path);
		close(fd);
		return -1;
	}
	return fd;
}

void dt_pidfile_write(int fd)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());

	if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)n, 0) != n)
		warning("cannot write the pid file");
}

int dt_pidfile_running(const char *path, long long *pid)
{
	int fd = dt_pidfile_lock(path, pid);

	if (fd >= 0) {
		close(fd);
		*pid = 0;
		return 0;
	}
	return *pid > 0;
}

/*
 * Close every descriptor above 2 the daemon inherited but keep_a and keep_b:
 * a daemon outlives its starter, and an inherited descriptor would keep what
 * the starter held (a flock(1) lock, a pipe a caller waits on for EOF) for
 * the daemon's whole life.
 */
static void close_inherited(int keep_a, int keep_b)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int fds[256], n = 0;

	if (!d)
		return;
	while ((e = readdir(d)) && n < (int)(sizeof(fds) / sizeof(fds[0]))) {
		char *end;
		long fd = strtol(e->d_name, &end, 10);

		if (*end || end == e->d_name || fd <= 2 || fd == keep_a || fd == keep_b ||
		    fd == dirfd(d))
			continue;
		fds[n++] = (int)fd;
	}
	closedir(d);
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

int dt_daemonize(const char *logfile, int keep_fd, int *ready_fd)
{
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return error_errno("pipe");
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return error_errno("fork");
	if (pid > 0) {
		char buf[2048];
		ssize_t n;
		int st;

		close(p[1]);
		do
			n = read(p[0], buf, sizeof(buf) - 1);
		while (n < 0 && errno == EINTR);
		waitpid(pid, &st, 0);
		if (n > 0) {
			buf[n] = '\0';
			if (!strcmp(buf, "ok\n"))
				exit(0);
			if (buf[n - 1] == '\n')
				buf[n - 1] = '\0';
			error("%s", buf);   /* escaped there: it may quote a configured name */
			exit(1);
		}
		fprintf(stderr, "%s: error: the daemon died while starting; see '%s'\n",
			dt_progname(), logfile);
		exit(1);
	}
	close(p[0]);
	setsid();
	pid = fork();
	if (pid < 0)
		_exit(1);
	if (pid > 0)
		_exit(0);
	if (chdir("/") < 0)
		_exit(1);
	umask(022);          /* daemon_serve() sets the one it works with */
	{
		int nul = open("/dev/null", O_RDWR);
		int lfd = open(logfile, O_WRONLY | O_CREAT | O_APPEND, 0600);

		dup2(nul, 0);
		dup2(nul, 1);
		dup2(lfd >= 0 ? lfd : nul, 2);
		if (nul > 2)
			close(nul);
		if (lfd > 2)
			close(lfd);
	}
	close_inherited(p[1], keep_fd);
	*ready_fd = p[1];
	return 0;
}

void dt_daemon_ready(int *ready_fd, const char *msg)
{
	struct strbuf sb = STRBUF_INIT;

	if (*ready_fd < 0)
		return;
	strbuf_addstr(&sb, msg ? msg : "ok");
	strbuf_addch(&sb, '\n');
	if (write(*ready_fd, sb.buf, sb.len) < 0)
		warning("cannot report readiness");
	close(*ready_fd);
	*ready_fd = -1;
	strbuf_release(&sb);
}

int dt_daemon_stop(const char *pidfile, const char *what, long long timeout_ms)
{
	long long pid;

	if (!dt_pidfile_running(pidfile, &pid))
		return 0;
	if (kill((pid_t)pid, SIGTERM) < 0)
		return error_errno("cannot stop %s (pid %lld)", what, pid);
	for (long long waited = 0; waited < timeout_ms; waited += 50) {
		usleep(50 * 1000);
		if (!dt_pidfile_running(pidfile, &pid))
			return 0;
	}
	kill((pid_t)pid, SIGKILL);
	for (int i = 0; i < 40 && dt_pidfile_running(pidfile, &pid); i++)
		usleep(50 * 1000);
	warning("%s (pid %lld) did not stop in %lld ms: killed", what, pid, timeout_ms);
	return 0;
}

int dt_daemon_key_load(struct dt_auth_key *key, const char *file, const char *home,
		       struct strbuf *err)
{
	struct strbuf path = STRBUF_INIT;
	int ret = 0;

	if (file)
		strbuf_addstr(&path, file);
	else
		strbuf_addf(&path, "%s/secret", home);
	if (dt_auth_key_load(key, path.buf) < 0) {
		strbuf_addf(err, "cannot load the cluster secret '%s'", path.buf);
		ret = -1;
	}
	strbuf_release(&path);
	return ret;
}

#define DAEMON_LOG_MAX (10 * 1024 * 1024)

static const char *label(const struct daemon_def *d)
{
	return d->args->label ? d->args->label : d->name;
}

static int daemon_status(const struct daemon_def *d, const char *pidfile)
{
	long long pid;

	if (dt_pidfile_running(pidfile, &pid)) {
		printf("%s: running (pid %lld)\n", label(d), pid);
		return 0;
	}
	printf("%s: not running\n", label(d));
	return 1;
}

static int daemon_serve(const struct daemon_def *d, const char *pidfile)
{
	struct strbuf logfile = STRBUF_INIT;
	int lockfd, ready = -1, rc;
	long long holder;

	lockfd = dt_pidfile_lock(pidfile, &holder);
	if (lockfd < 0) {
		if (holder > 0) {
			printf("%s: already running (pid %lld)\n", d->name, holder);
			return d->args->daemonize ? 0 : 1;
		}
		return 1;
	}
	dt_home_path(&logfile, d->logfile);
	if (d->args->daemonize && dt_daemonize(logfile.buf, lockfd, &ready) < 0) {
		strbuf_release(&logfile);
		return 1;
	}
	dt_pidfile_write(lockfd);
	/* job files in the shared dir: cluster.yaml's job_files may widen it (safefile.h) */
	sf_set_umask(027);
	if (dtlog_open(logfile.buf, DAEMON_LOG_MAX) < 0 && d->args->daemonize)
		_exit(1);   /* detached: the parent says "died while starting" */
	rc = d->run(&ready);
	strbuf_release(&logfile);
	return rc;
}

int daemon_main(const struct daemon_def *d, int argc, const char **argv)
{
	struct daemon_args *a = d->args;
	struct strbuf pidfile = STRBUF_INIT, manage = STRBUF_INIT;
	const char *usage[3];
	int rc;

	dt_set_progname(d->name);
	strbuf_addf(&manage, "%s --stop | --status", d->name);
	usage[0] = d->usage;
	usage[1] = manage.buf;
	usage[2] = NULL;
	parse_options(argc - 1, argv + 1, d->options, usage, 0);
	strbuf_release(&manage);
	if (a->version) {
		printf("%s %s\n", d->name, DT_VERSION);
		return 0;
	}
	if (a->home)
		setenv("DTCTL_HOME", a->home, 1);
	if (d->prepare && (rc = d->prepare(argc, argv)) != DAEMON_GO)
		return rc;
	if (dt_home_ensure() < 0)
		return 1;
	dt_home_path(&pidfile, d->pidfile);
	if (a->status) {
		rc = daemon_status(d, pidfile.buf);
	} else if (a->stop) {
		rc = dt_daemon_stop(pidfile.buf, d->name, 10000) < 0 ? 1 : 0;
		if (!rc && d->say_stopped)
			printf("%s: stopped\n", label(d));
	} else {
		rc = daemon_serve(d, pidfile.buf);
	}
	strbuf_release(&pidfile);
	if (d->release)
		d->release();
	return rc;
}
