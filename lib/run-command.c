/*
 * run-command.c - starting, waiting for and multiplexing child processes.
 */
#include "run-command.h"
#include "log.h"
#include "usage.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

void child_process_init(struct child_process *cp)
{
	struct child_process blank = CHILD_PROCESS_INIT;

	*cp = blank;
}

void child_process_clear(struct child_process *cp)
{
	strvec_clear(&cp->args);
	strvec_clear(&cp->env);
}

/* Build the child's environment: environ (unless clean_env) with cp->env applied. */
static void build_env(struct child_process *cp, struct strvec *out)
{
	if (!cp->clean_env)
		for (char **e = environ; *e; e++)
			strvec_push(out, *e);
	for (size_t i = 0; i < cp->env.nr; i++) {
		const char *eq = strchr(cp->env.v[i], '=');
		char *name;

		if (!eq) {	/* bare NAME: unset it */
			int idx;
			size_t n = strlen(cp->env.v[i]);

			for (idx = 0; idx < (int)out->nr; idx++)
				if (!strncmp(out->v[idx], cp->env.v[i], n) && out->v[idx][n] == '=')
					break;
			if (idx < (int)out->nr) {
				free((char *)out->v[idx]);
				memmove(&out->v[idx], &out->v[idx + 1], (out->nr - idx) * sizeof(char *));
				out->nr--;
			}
			continue;
		}
		name = xstrndup(cp->env.v[i], (size_t)(eq - cp->env.v[i]));
		strvec_setenv(out, name, eq + 1);
		free(name);
	}
}

static void child_die(int fd, const char *what)
{
	int e = errno;
	char buf[16 + 256];
	size_t n;

	memcpy(buf, &e, sizeof(e));
	n = strlen(what);
	if (n > 255)
		n = 255;
	memcpy(buf + sizeof(e), what, n);
	if (write(fd, buf, sizeof(e) + n) < 0)
		_exit(127);
	_exit(127);
}

static void dup_to(int fd, int target)
{
	if (fd != target) {
		dup2(fd, target);
		close(fd);
	}
}

int start_command(struct child_process *cp)
{
	int fdin[2] = { -1, -1 }, fdout[2] = { -1, -1 }, fderr[2] = { -1, -1 };
	int report[2];
	struct strvec env = STRVEC_INIT;
	char buf[16 + 256];
	ssize_t n;

	if (!cp->args.nr)
		return error("start_command: empty argv");
	if ((cp->in < 0 && pipe2(fdin, O_CLOEXEC) < 0) ||
	    (cp->out < 0 && pipe2(fdout, O_CLOEXEC) < 0) ||
	    (cp->err < 0 && pipe2(fderr, O_CLOEXEC) < 0) ||
	    pipe2(report, O_CLOEXEC) < 0) {
		int e = errno;

		for (int i = 0; i < 2; i++) {
			if (fdin[i] >= 0) close(fdin[i]);
			if (fdout[i] >= 0) close(fdout[i]);
			if (fderr[i] >= 0) close(fderr[i]);
		}
		errno = e;
		return error_errno("cannot create pipe for '%s'", cp->args.v[0]);
	}
	build_env(cp, &env);
	fflush(NULL);
	cp->pid = fork();
	if (cp->pid < 0) {
		int e = errno;

		strvec_clear(&env);
		close(report[0]);
		close(report[1]);
		errno = e;
		return error_errno("cannot fork '%s'", cp->args.v[0]);
	}
	if (!cp->pid) {
		int nullfd = -1;

		signal(SIGPIPE, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGCHLD, SIG_DFL);
		if (cp->new_session && setsid() < 0)
			child_die(report[1], "setsid");
		if (cp->no_stdin || cp->no_stdout || cp->no_stderr) {
			nullfd = open("/dev/null", O_RDWR);
			if (nullfd < 0)
				child_die(report[1], "/dev/null");
		}
		if (cp->no_stdin)
			dup2(nullfd, 0);
		else if (cp->in < 0)
			dup_to(fdin[0], 0);
		else if (cp->in > 0)
			dup_to(cp->in, 0);
		if (cp->no_stdout)
			dup2(nullfd, 1);
		else if (cp->stdout_to_stderr)
			dup2(2, 1);
		else if (cp->out < 0)
			dup_to(fdout[1], 1);
		else if (cp->out > 0)
			dup_to(cp->out, 1);
		if (cp->no_stderr)
			dup2(nullfd, 2);
		else if (cp->err_to_out)
			dup2(1, 2);
		else if (cp->err < 0)
			dup_to(fderr[1], 2);
		else if (cp->err > 0)
			dup_to(cp->err, 2);
		if (nullfd > 2)
			close(nullfd);
		if (cp->dir && chdir(cp->dir) < 0)
			child_die(report[1], cp->dir);
		environ = (char **)env.v;
		execvp(cp->args.v[0], (char *const *)cp->args.v);
		child_die(report[1], "exec");
	}
	strvec_clear(&env);
	close(report[1]);
	if (cp->in < 0) { close(fdin[0]); cp->in = fdin[1]; }
	if (cp->out < 0) { close(fdout[1]); cp->out = fdout[0]; }
	if (cp->err < 0) { close(fderr[1]); cp->err = fderr[0]; }
	do
		n = read(report[0], buf, sizeof(buf) - 1);
	while (n < 0 && errno == EINTR);
	close(report[0]);
	if (n >= (ssize_t)sizeof(int)) {
		int e, status;

		memcpy(&e, buf, sizeof(e));
		buf[n] = '\0';
		while (waitpid(cp->pid, &status, 0) < 0 && errno == EINTR)
			;
		cp->pid = -1;
		errno = e;
		if (!strcmp(buf + sizeof(e), "exec"))
			return error_errno("cannot run '%s'", cp->args.v[0]);
		return error_errno("cannot start '%s': %s", cp->args.v[0], buf + sizeof(e));
	}
	return 0;
}

int wait_status_to_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return -1;
}

int finish_command(struct child_process *cp)
{
	int status;

	if (cp->pid <= 0)
		return -1;
	while (waitpid(cp->pid, &status, 0) < 0) {
		if (errno != EINTR)
			return error_errno("waitpid for '%s'", cp->args.v[0]);
	}
	cp->pid = -1;
	return wait_status_to_code(status);
}

int run_command(struct child_process *cp)
{
	int code;

	if (start_command(cp) < 0)
		return -1;
	code = finish_command(cp);
	return code;
}

int capture_command(struct child_process *cp, struct strbuf *out, size_t limit)
{
	ssize_t n;
	int code;

	cp->out = -1;
	if (start_command(cp) < 0)
		return -1;
	n = strbuf_read_fd(out, cp->out, limit);
	close(cp->out);
	code = finish_command(cp);
	return n < 0 ? -1 : code;
}

struct pp_slot {
	struct child_process cp;
	struct strbuf output;
	void *task;
	long long started;
	int timed_out;
	int used;
};

static void pp_finish(const struct parallel_opts *opts, struct pp_slot *s)
{
	int code;

	close(s->cp.out);
	code = finish_command(&s->cp);
	if (s->timed_out)
		code = 124;
	opts->done(code, &s->output, opts->data, s->task);
	child_process_clear(&s->cp);
	strbuf_release(&s->output);
	s->used = 0;
}

int run_processes_parallel(const struct parallel_opts *opts)
{
	int jobs = opts->jobs > 0 ? opts->jobs : 1;
	struct pp_slot *slots = xcalloc((size_t)jobs, sizeof(*slots));
	struct pollfd *pfd = xcalloc((size_t)jobs, sizeof(*pfd));
	int running = 0, more = 1;

	while (more || running) {
		/* top up */
		for (int i = 0; more && i < jobs; i++) {
			struct pp_slot *s = &slots[i];

			if (s->used)
				continue;
			child_process_init(&s->cp);
			strbuf_init(&s->output, 0);
			s->task = NULL;
			s->timed_out = 0;
			if (!opts->next(&s->cp, opts->data, &s->task)) {
				child_process_clear(&s->cp);
				more = 0;
				break;
			}
			s->cp.out = -1;
			s->cp.err_to_out = 1;
			if (opts->timeout_ms)
				s->cp.new_session = 1;
			if (!s->cp.no_stdin && !s->cp.in)
				s->cp.no_stdin = 1;
			if (start_command(&s->cp) < 0) {
				strbuf_addstr(&s->output, "cannot start command\n");
				opts->done(-1, &s->output, opts->data, s->task);
				child_process_clear(&s->cp);
				strbuf_release(&s->output);
				continue;
			}
			s->started = dt_mono_ms();
			s->used = 1;
			running++;
		}
		if (!running)
			continue;
		for (int i = 0; i < jobs; i++) {
			pfd[i].fd = slots[i].used ? slots[i].cp.out : -1;
			pfd[i].events = POLLIN;
			pfd[i].revents = 0;
		}
		if (poll(pfd, (nfds_t)jobs, 100) < 0 && errno != EINTR) {
			free(slots);
			free(pfd);
			return error_errno("poll");
		}
		for (int i = 0; i < jobs; i++) {
			struct pp_slot *s = &slots[i];

			if (!s->used)
				continue;
			if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) {
				ssize_t n;

				strbuf_grow(&s->output, 8192);
				n = read(s->cp.out, s->output.buf + s->output.len, 8192);
				if (n > 0) {
					strbuf_setlen(&s->output, s->output.len + (size_t)n);
				} else if (n == 0 || errno != EINTR) {
					pp_finish(opts, s);
					running--;
					continue;
				}
			}
			if (opts->timeout_ms && !s->timed_out &&
			    dt_mono_ms() - s->started > opts->timeout_ms) {
				s->timed_out = 1;
				kill(-s->cp.pid, SIGKILL);
			}
		}
	}
	free(slots);
	free(pfd);
	return 0;
}

static int executable_file(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

int locate_program(const char *name, const char *path, const char *dir, struct strbuf *found)
{
	strbuf_reset(found);
	if (!*name)
		return -1;
	if (strchr(name, '/')) {
		if (name[0] != '/' && dir)
			strbuf_addf(found, "%s/", dir);
		strbuf_addstr(found, name);
		return executable_file(found->buf) ? 0 : -1;
	}
	if (!path || !*path)
		path = "/bin:/usr/bin";   /* execvp's default (glibc's confstr _CS_PATH) */
	for (const char *p = path;; p++) {
		const char *end = strchr(p, ':');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		strbuf_reset(found);
		/* an empty entry is the current dir, as for the shell */
		if (!len)
			strbuf_addstr(found, dir ? dir : ".");
		else if (p[0] != '/' && dir)
			strbuf_addf(found, "%s/%.*s", dir, (int)len, p);
		else
			strbuf_add(found, p, len);
		strbuf_addf(found, "/%s", name);
		if (executable_file(found->buf))
			return 0;
		if (!end)
			break;
		p = end;
	}
	strbuf_reset(found);
	return -1;
}

int argv_program_index(const char *const *argv, size_t nr)
{
	const char *base;
	size_t i = 1;

	if (!nr)
		return -1;
	base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	if (strcmp(base, "env"))
		return 0;
	/* env's options (none takes a separate value but -u NAME, -C DIR, -S) */
	for (; i < nr; i++) {
		if (!strcmp(argv[i], "-u") || !strcmp(argv[i], "-C") || !strcmp(argv[i], "-S")) {
			i++;
			continue;
		}
		if (!strcmp(argv[i], "--")) {
			i++;
			break;
		}
		if (argv[i][0] != '-' && !strchr(argv[i], '='))
			break;
	}
	return i < nr ? (int)i : -1;
}
