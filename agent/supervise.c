/*
 * supervise.c - one task's supervisor (see supervise.h).
 *
 * Life of a supervisor:
 *   load <home>/tasks/<id>.json (state "starting") -> become the subreaper ->
 *   open the log -> make the cgroup -> fork the task (it waits on a pipe
 *   until it has been moved into the cgroup, then execs) -> save "running" ->
 *   loop: copy output to the log, reap children, handle stop requests and
 *   signals to pass on (SIGHUP queued by the agent, its value the signal) ->
 *   after the main process ended, kill what is left of its tree, wait until
 *   nothing is left -> save "exited" with the exit code -> remove the cgroup.
 *
 * Signals are taken through a signalfd so the loop is one poll().  They are
 * already blocked when the supervisor is exec'd (supervisor_spawn), so an
 * early stop request cannot kill it before it is ready.
 */
#include "supervise.h"
#include "auth.h"
#include "container.h"
#include "debug.h"
#include "dthome.h"
#include "json.h"
#include "linelog.h"
#include "log.h"
#include "proctree.h"
#include "report.h"
#include "safefile.h"
#include "protocol.h"
#include "run-command.h"
#include "strvec.h"
#include "task.h"
#include "usage.h"

#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/sched.h>        /* struct clone_args, CLONE_INTO_CGROUP */

extern char **environ;

#define CLEANUP_GRACE_MS 2000     /* leftovers after the main process ended */
#define KILL_GIVEUP_MS 10000      /* SIGKILL repeated this long at most */
#define DRAIN_AFTER_EMPTY_MS 1000 /* pipes held open by a process outside the tree */

static void blocked_set(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGCHLD);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGPIPE);
}

/*
 * One posix_spawn (vfork + exec: no copy of the agent's page tables, unlike
 * the double fork it replaces): the supervisor gets its own session, stdio
 * on /dev/null, default dispositions and the signals of blocked_set()
 * blocked.  It is the agent's child, but the agent does not wait for it
 * (agent_run sets SA_NOCLDWAIT, so it leaves no zombie) and a restarted
 * agent finds it reparented to init, still running.
 */
pid_t supervisor_spawn(const char *exe, const char *home, const char *id)
{
	const char *argv[] = { exe, "--supervise", id, "--home", home, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t block, dfl;
	pid_t pid = -1;
	int rc;

	blocked_set(&block);
	sigfillset(&dfl);
	sigdelset(&dfl, SIGKILL);
	sigdelset(&dfl, SIGSTOP);
	if (posix_spawn_file_actions_init(&fa))
		return -1;
	if (posix_spawnattr_init(&at)) {
		posix_spawn_file_actions_destroy(&fa);
		return -1;
	}
	rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDWR, 0);
	if (!rc)
		rc = posix_spawn_file_actions_adddup2(&fa, 0, 1);
	if (!rc)
		rc = posix_spawn_file_actions_adddup2(&fa, 0, 2);
	if (!rc)
		rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
					      POSIX_SPAWN_SETSIGDEF);
	if (!rc)
		rc = posix_spawnattr_setsigmask(&at, &block);
	if (!rc)
		rc = posix_spawnattr_setsigdefault(&at, &dfl);
	if (!rc)
		rc = (strchr(exe, '/') ? posix_spawn : posix_spawnp)(&pid, exe, &fa, &at,
								     (char *const *)argv, environ);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	if (rc) {
		errno = rc;
		return -1;
	}
	return pid;
}

struct sup {
	const char *home;
	struct strbuf dir;            /* <home>/tasks */
	struct strbuf sock;           /* the agent's report socket (report.h) */
	struct task t;
	int logfd;
	struct linelog out, err;
	int fd_out, fd_err;
	int main_done;
	long long grace_ms;
	long long term_deadline;      /* when to escalate to SIGKILL (0 = not stopping) */
	long long kill_started;
	long long empty_since;        /* tree found empty at this time */
	int leftovers_checked;
	int tree_gone;                /* that check found none: none can come (no scan again) */
	struct strbuf cgroup_why;
	/* container: (container.h): the engine, the image to run, the container's name */
	struct strbuf engine, image_ref, ctr_name;
	struct strbuf ctr_env;        /* team mode: the rank's variables for --env-file */
	struct strbuf ctr_cwd;        /* team mode: the rank's dir, checked as the user */
	int marked;                   /* an attempt's start marker is in the log, no end yet */
	/* team mode (run_as in the spec): the task's user, -1 when none */
	long long run_uid, run_gid;
	gid_t groups[256];            /* their supplementary groups on this node */
	int nr_groups;
};

/*
 * Team mode: what the supervisor (root) does in the job's dir it does as the
 * task's user (the file system ids: permissions are theirs, what is made is
 * theirs, as an NFS server does), so no path the user controls is followed
 * with root's rights (Slurm's slurmstepd does the same).  as_user(s, 1)
 * before, as_user(s, 0) after.
 */
static void as_user(struct sup *s, int on)
{
	if (s->run_uid < 0)
		return;
	setfsgid(on ? (gid_t)s->run_gid : getegid());
	setfsuid(on ? (uid_t)s->run_uid : geteuid());
}

/*
 * In the task's child, after fork: become the user for good (groups, gid,
 * uid, in that order) and forbid regaining privileges (setuid binaries,
 * file capabilities).  -1 when any of it fails (the task must not start).
 */
static int drop_to_user(const struct sup *s)
{
	if (s->run_uid < 0)
		return 0;
	if (setgroups((size_t)s->nr_groups, s->groups) < 0 ||
	    setresgid((gid_t)s->run_gid, (gid_t)s->run_gid, (gid_t)s->run_gid) < 0 ||
	    setresuid((uid_t)s->run_uid, (uid_t)s->run_uid, (uid_t)s->run_uid) < 0 ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	/* no way back: a root that could be regained would be a bug */
	if (setuid(0) == 0 || getuid() != (uid_t)s->run_uid)
		return -1;
	return 0;
}

/* Whether the user can enter dir: tried by a child that becomes them; 0, or -1 with errno. */
static int enter_as_user(const struct sup *s, const char *dir)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -1;
	if (pid == 0)
		_exit(drop_to_user(s) < 0 ? EPERM : chdir(dir) < 0 ? errno : 0);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	errno = WIFEXITED(status) ? WEXITSTATUS(status) : EPERM;
	return -1;
}

/* run_as of the spec into s (the agent checked the user exists here, agent.c) */
static int run_as_load(struct sup *s, struct strbuf *err)
{
	json_t *r = json_object_get(s->t.spec, "run_as");
	const char *user = json_get_str(r, "user", NULL);
	int n = (int)ARRAY_SIZE(s->groups);

	s->run_uid = s->run_gid = -1;
	if (!r)
		return 0;
	if (!user || json_get_int(r, "uid", -1) <= 0 || json_get_int(r, "gid", -1) < 0) {
		strbuf_addstr(err, "bad run_as in the task file");
		return -1;
	}
	s->run_uid = json_get_int(r, "uid", -1);
	s->run_gid = json_get_int(r, "gid", -1);
	if (getgrouplist(user, (gid_t)s->run_gid, s->groups, &n) < 0) {
		strbuf_addf(err, "user '%s' is in over %zu groups", user, ARRAY_SIZE(s->groups));
		return -1;
	}
	s->nr_groups = n;
	return 0;
}

static void save(struct sup *s)
{
	if (task_save(s->dir.buf, &s->t) < 0)
		dtlog(DTLOG_ERROR, "task %s: cannot save its state in '%s': %s", s->t.id,
		      s->dir.buf, strerror(errno));
}

/*
 * Lines that cannot be written (ENOSPC, EIO on the shared dir) are counted
 * in the task, with the first error, so that the loss reaches the job's
 * state and the user instead of only agent.log.
 */
static void log_write(struct sup *s, struct strbuf *lines)
{
	/* err -1: an error was already recorded (and logged), keep the first */
	struct log_loss loss = { s->t.log_lost_lines, s->t.log_lost_bytes, s->t.log_error ? -1 : 0 };
	int e = linelog_write(s->logfd, lines, &loss);

	if (e) {
		s->t.log_error = xstrdup(strerror(e));
		dtlog(DTLOG_ERROR, "task %s: cannot write its log: %s (lost lines are counted in "
		      "the task)", s->t.id, strerror(e));
	}
	s->t.log_lost_lines = loss.lines;
	s->t.log_lost_bytes = loss.bytes;
}

/*
 * A rank's lines from here on are this node's and this attempt's: the marker
 * readers attribute them by (linelog.h), written before the program starts.
 * Not for mpirun's own task: its ranks' loggers write their own.
 */
static void log_marker(struct sup *s)
{
	const char *node = json_get_str(s->t.spec, "node", NULL);
	const char *att = json_get_str(json_object_get(s->t.spec, "env"), DT_ATTEMPT_ENV, NULL);
	struct strbuf line = STRBUF_INIT;

	if (!node || !att || json_get_int(s->t.spec, "rank", -1) < 0)
		return;
	linelog_marker(&line, atoi(att), node);
	log_write(s, &line);
	strbuf_release(&line);
	s->marked = 1;
}

/* After the rank's last line: its writer is done (readers stop waiting: linelog.h). */
static void log_end_marker(struct sup *s)
{
	struct strbuf line = STRBUF_INIT;

	if (!s->marked || s->logfd < 0)
		return;
	linelog_end_marker(&line);
	log_write(s, &line);
	strbuf_release(&line);
	s->marked = 0;
}

/*
 * The task's log: below the spec's log_root (the shared dir) every
 * directory is walked without following links (lib/safefile.h); without a
 * log_root (older dtsched, orted tasks) at least the file itself is never a
 * link, a FIFO or anything but a regular file.  Our own tasks dir otherwise.
 */
static int open_task_log(struct sup *s, struct strbuf *why)
{
	const char *log = json_get_str(s->t.spec, "log", NULL);
	const char *root = json_get_str(s->t.spec, "log_root", NULL);
	const char *rel = log && root ? sf_below(log, root) : NULL;
	struct strbuf dir = STRBUF_INIT, base = STRBUF_INIT;
	int fd;

	if (rel) {
		fd = sf_open_append(root, rel, 0644, SF_MKDIRS, why);
	} else {
		/* our own tasks dir, or a path without a root: the directory is trusted */
		const char *slash;

		if (log)
			strbuf_addstr(&dir, log);
		else
			strbuf_addf(&dir, "%s/%s.log", s->dir.buf, s->t.id);
		slash = strrchr(dir.buf, '/');      /* there is one: <dir>/<name> */
		strbuf_addstr(&base, slash + 1);
		strbuf_setlen(&dir, slash != dir.buf ? (size_t)(slash - dir.buf) : 1);
		if (mkdir_p(dir.buf, 0755) < 0) {
			/* the open below says why */
		}
		fd = sf_open_append(dir.buf, base.buf, 0644, 0, why);
	}
	if (fd < 0) {
		struct strbuf msg = STRBUF_INIT;

		strbuf_addf(&msg, "cannot open the log file '%s/%s': %s", rel ? root : dir.buf,
			    rel ? rel : base.buf, why->buf);
		strbuf_reset(why);
		strbuf_addbuf(why, &msg);
		strbuf_release(&msg);
	}
	strbuf_release(&dir);
	strbuf_release(&base);
	return fd;
}

/* A line of our own in the task's log (stderr stream), e.g. why it failed. */
static void log_note(struct sup *s, const char *msg)
{
	struct linelog l;
	struct strbuf out = STRBUF_INIT;

	linelog_init(&l, 'E', 0);
	linelog_feed(&l, msg, strlen(msg), &out);
	linelog_flush(&l, &out);
	log_write(s, &out);
	linelog_release(&l);
	strbuf_release(&out);
}

/*
 * The final state is saved: tell the agent, which takes a final state from
 * the task file only when its supervisor vouches for it this way (report.h;
 * the file is writable by every job of the user).  No agent listening (it
 * is restarting): the next one reads the file when it loads the table.
 */
static void tell_agent_end(struct sup *s)
{
	struct strbuf body = STRBUF_INIT, err = STRBUF_INIT;
	json_t *j = json_pack("{s:s,s:s}", "kind", "task_end", "task", s->t.id);

	json_append(&body, j);
	if (report_send(s->sock.buf, body.buf, body.len, NULL, &err) < 0)
		dtlog(DTLOG_INFO, "task %s: %s", s->t.id, err.buf);
	json_decref(j);
	strbuf_release(&body);
	strbuf_release(&err);
}

static void finish(struct sup *s, enum task_state st, int code, const char *why)
{
	s->t.state = st;
	s->t.has_exit = 1;
	s->t.exit_code = code;
	if (why) {
		free(s->t.error);
		s->t.error = xstrdup(why);
	}
	s->t.ended_us = dt_now_us();
	if (st == TASK_FAILED && s->t.cgroup) {
		cgroup_remove(s->t.cgroup);
		free(s->t.cgroup);
		s->t.cgroup = NULL;
	}
	save(s);
	tell_agent_end(s);
}

static void set_limits(const json_t *limits)
{
	static const struct { const char *key; int res; } map[] = {
		{ "nofile", RLIMIT_NOFILE }, { "nproc", RLIMIT_NPROC }, { "core", RLIMIT_CORE },
	};

	for (size_t i = 0; limits && i < ARRAY_SIZE(map); i++) {
		json_t *v = json_object_get(limits, map[i].key);
		struct rlimit rl;

		if (!json_is_integer(v))
			continue;
		rl.rlim_cur = rl.rlim_max = (rlim_t)json_integer_value(v);
		setrlimit(map[i].res, &rl);
	}
}

/* Report errno and what failed to the supervisor, then die. */
static void child_fail(int fd, const char *what)
{
	int e = errno;
	char buf[300];
	size_t n = strlen(what) > 255 ? 255 : strlen(what);

	memcpy(buf, &e, sizeof(e));
	memcpy(buf + sizeof(e), what, n);
	if (write(fd, buf, sizeof(e) + n) < 0)
		_exit(127);
	_exit(127);
}

/*
 * PATH starts with the folder of this dtagent, so a task's `dttrain` or
 * `dtagent rank-log` is this installation's (docs/architecture.md: ~/.dtctl/bin).
 */
static void path_prefix_self(struct strvec *env)
{
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const char *old = NULL;
	struct strbuf path = STRBUF_INIT;
	char *slash;

	if (n <= 0)
		return;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (!slash || slash == exe)
		return;
	*slash = '\0';
	for (size_t i = 0; i < env->nr; i++)
		if (starts_with(env->v[i], "PATH="))
			old = env->v[i] + 5;
	strbuf_addstr(&path, exe);
	if (old && *old) {
		size_t len = strlen(exe);

		/* already first: leave it */
		if (!strncmp(old, exe, len) && (old[len] == ':' || !old[len])) {
			strbuf_release(&path);
			return;
		}
		strbuf_addf(&path, ":%s", old);
	} else {
		strbuf_addstr(&path, ":/usr/local/bin:/usr/bin:/bin");
	}
	strvec_setenv(env, "PATH", path.buf);
	strbuf_release(&path);
}

/*
 * fork(), but when the task has a cgroup v2 directory the child is born in
 * it (clone3 CLONE_INTO_CGROUP, Linux 5.7): moving a process afterwards
 * (cgroup.procs) takes the kernel's cgroup_threadgroup_rwsem for writing,
 * which waits for an RCU grace period: 10-20 ms per task start measured
 * here, against ~2.5 ms for the whole start without it.  *in_cgroup says
 * whether it worked; else the caller moves the child as before.  Only the
 * single-threaded supervisor calls this (a raw clone3 child must not rely
 * on glibc's fork handlers: it only resets signals, dups and execs).
 */
static pid_t fork_into_cgroup(const char *cgroup, int *in_cgroup)
{
	*in_cgroup = 0;
#ifdef CLONE_INTO_CGROUP
	if (cgroup && !getenv_nonempty("DTAGENT_NO_CLONE_INTO_CGROUP")) {
		int fd = open(cgroup, O_PATH | O_DIRECTORY | O_CLOEXEC);

		if (fd >= 0) {
			struct clone_args ca;
			long pid;

			memset(&ca, 0, sizeof(ca));
			ca.flags = CLONE_INTO_CGROUP;
			ca.exit_signal = SIGCHLD;
			ca.cgroup = (unsigned long long)fd;
			pid = syscall(SYS_clone3, &ca, sizeof(ca));
			if (pid == 0)
				return 0;
			close(fd);
			if (pid > 0) {
				*in_cgroup = 1;
				return (pid_t)pid;
			}
			/* ENOSYS (old kernel), EINVAL/EBUSY (not a v2 leaf), EACCES: as before */
		}
	}
#endif
	return fork();
}

/*
 * Variables of the login session the agent was started from (`dtctl init`
 * starts it over ssh) or of the supervisor's own shell-like state: they
 * describe a session the task is not part of, so no task inherits them.
 */
static int session_leftover(const char *entry)
{
	static const char *const names[] = { "MOTD_SHOWN", "SHLVL", "OLDPWD", "PWD", "_", "MAIL",
					      "TERM", NULL };
	size_t len = strcspn(entry, "=");

	if (starts_with(entry, "SSH_") || starts_with(entry, "XDG_SESSION_"))
		return 1;
	for (int i = 0; names[i]; i++)
		if (strlen(names[i]) == len && !strncmp(entry, names[i], len))
			return 1;
	return 0;
}

static void push_env_clean(struct strvec *env, const char *entry)
{
	if (strchr(entry, '=') && !session_leftover(entry))
		strvec_push(env, entry);
}

#define ENV_SH_TIMEOUT_MS 10000

struct env_sh_run {
	const char *path;
	const struct strvec *base;
	int started, code;
	struct strbuf out;
};

static int env_sh_next(struct child_process *cp, void *data, void **task)
{
	struct env_sh_run *r = data;

	(void)task;
	if (r->started++)
		return 0;
	/* env.sh's own output and errors go nowhere; only `env -0` reaches us */
	strvec_pushv(&cp->args, (const char *[]){ "/bin/sh", "-c",
		". \"$1\" >/dev/null 2>&1 </dev/null; exec env -0", "sh", r->path, NULL });
	cp->clean_env = 1;
	strvec_pushv(&cp->env, r->base->v);
	return 1;
}

static void env_sh_done(int code, struct strbuf *output, void *data, void *task)
{
	struct env_sh_run *r = data;

	(void)task;
	r->code = code;
	strbuf_addbuf(&r->out, output);
}

/*
 * The environment every task starts from: the agent's own, less the login
 * session's leftovers, with <home>/env.sh (written by the setup template
 * from cluster.yaml's setup.env, plus whatever a custom template adds: PATH,
 * module loads) sourced over it, as `dtctl exec` does.  It is sourced at
 * each task's start, by /bin/sh, so a changed env.sh (init ran setup again)
 * counts from the next task on without restarting the agent; the cost is
 * one sh and one env exec (~1 ms) where the file exists.  A broken or hung
 * env.sh (ENV_SH_TIMEOUT_MS) is a note in the task's log, and the task
 * starts without it rather than not at all.
 */
static void task_base_env(struct sup *s, struct strvec *env)
{
	struct env_sh_run r;
	struct parallel_opts po;
	struct strbuf path = STRBUF_INIT;
	struct stat st;

	for (char **e = environ; *e; e++)
		push_env_clean(env, *e);
	strbuf_addf(&path, "%s/env.sh", s->home);
	if (stat(path.buf, &st) < 0 || !S_ISREG(st.st_mode)) {
		strbuf_release(&path);
		return;
	}
	memset(&r, 0, sizeof(r));
	r.path = path.buf;
	r.base = env;
	strbuf_init(&r.out, 0);
	memset(&po, 0, sizeof(po));
	po.jobs = 1;
	po.timeout_ms = ENV_SH_TIMEOUT_MS;
	po.next = env_sh_next;
	po.done = env_sh_done;
	po.data = &r;
	if (run_processes_parallel(&po) == 0 && r.code == 0 && r.out.len) {
		strvec_clear(env);
		for (const char *p = r.out.buf; p < r.out.buf + r.out.len; p += strlen(p) + 1)
			push_env_clean(env, p);
	} else {
		struct strbuf msg = STRBUF_INIT;

		strbuf_addf(&msg, "dtagent: note: sourcing '%s' failed (%s %d); the task starts "
			    "without it (check it with: sh -n '%s')", path.buf,
			    r.code == 124 ? "timed out after" : "exit code",
			    r.code == 124 ? ENV_SH_TIMEOUT_MS / 1000 : r.code, path.buf);
		log_note(s, msg.buf);
		strbuf_release(&msg);
	}
	strbuf_release(&r.out);
	strbuf_release(&path);
}

/*
 * Where the task starts: its spec's cwd (-w/--workdir: it must exist, or the
 * task fails), else the directory `dtctl run` was called from when it
 * exists on this node (a project dir on the shared dir), else the agent's
 * home, with a one-line note, from the first rank of the node only, so a
 * job's output says it once per node and not once per rank.
 */
static const char *task_cwd(struct sup *s)
{
	const char *cwd = json_get_str(s->t.spec, "cwd", NULL);
	const char *submit = json_get_str(s->t.spec, "submit_dir", NULL);
	const char *home = json_get_str(json_object_get(s->t.spec, "run_as"), "home", NULL) ?
		json_get_str(json_object_get(s->t.spec, "run_as"), "home", NULL) :
		getenv_nonempty("HOME") ? getenv_nonempty("HOME") : "/";
	const char *lrank = json_get_str(json_object_get(s->t.spec, "env"), "LOCAL_RANK", NULL);
	const char *why;
	struct stat st;

	if (cwd)
		return cwd;
	if (!submit)
		return home;
	if (stat(submit, &st) == 0 && !S_ISDIR(st.st_mode))
		why = "not a directory";
	else if (stat(submit, &st) < 0 || access(submit, X_OK) < 0)
		why = strerror(errno);
	else
		return submit;
	if (!lrank || !strcmp(lrank, "0")) {
		struct strbuf msg = STRBUF_INIT;
		char host[256] = "";

		gethostname(host, sizeof(host) - 1);
		strbuf_addf(&msg, "dtagent: note: the submit directory '%s' does not exist on %s "
			    "(%s); starting in '%s' (choose one with dtctl run -w DIR)", submit, host,
			    why, home);
		log_note(s, msg.buf);
		strbuf_release(&msg);
	}
	return home;
}

static void note_cb(const char *line, void *data)
{
	log_note(data, line);
}

/*
 * Before a task in a container starts: the engine and the image, loaded
 * if this node does not have it yet (progress in the task's log).
 */
static int container_prepare(struct sup *s, struct strbuf *why)
{
	const json_t *ctr = json_object_get(s->t.spec, "container");
	struct container_user user = { s->run_uid, s->run_gid, s->groups, s->nr_groups };
	int ret;

	if (container_engine_find(&s->engine, why) < 0)
		return -1;
	/*
	 * Rootless podman keeps a user namespace open with a long-lived pause
	 * process, started by the first podman command that finds none.  Not
	 * the subreaper here, so that one goes to init and not into this task's
	 * tree, where the end of the task would kill it (and the next task's
	 * podman start a new one, ~2 s measured); the task has no process yet.
	 */
	prctl(PR_SET_CHILD_SUBREAPER, 0);
	ret = container_image_ensure_as(s->engine.buf, ctr,
					json_get_str(s->t.spec, "log_root", NULL), s->home,
					s->run_uid < 0 ? NULL : &user, note_cb, s, &s->image_ref,
					why);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if (ret < 0)
		return -1;
	strbuf_addf(&s->ctr_name, "dtctl-%s-%.8s", s->t.id, s->t.marker);
	return 0;
}

/*
 * Team mode: root's engine must not take the job's variables (LD_PRELOAD,
 * CONTAINERS_CONF and the like would be the user's code or config as root),
 * so they go into a file of ours (0600) that the engine reads for the
 * container.  -1 with why (a value with a newline cannot be said there).
 */
static int container_env_file(struct sup *s, const struct strvec *pass,
			      const struct strvec *env, struct strbuf *why)
{
	struct strbuf body = STRBUF_INIT;
	const char *rel = sf_below(s->ctr_env.buf, s->home);
	int ret = 0;

	for (size_t i = 0; i < pass->nr && !ret; i++) {
		const char *v = strvec_getenv(env, pass->v[i]);

		if (!v)
			continue;
		if (strchr(v, '\n')) {
			strbuf_addf(why, "the variable %s has a newline in its value, which "
				    "cannot be passed into a container in team mode", pass->v[i]);
			ret = -1;
		}
		strbuf_addf(&body, "%s=%s\n", pass->v[i], v);
	}
	if (!ret && sf_write(s->home, rel, body.buf, body.len, 0600, SF_MKDIRS, why) < 0)
		ret = -1;
	strbuf_release(&body);
	return ret;
}

/*
 * Team mode: a directory is mounted only when it is on the shared dir (mounted
 * whole): a bind mount made by root's engine would show the rank a directory
 * its user could not reach (below another user's 0700 home), and a path the
 * user controls could be swapped for a link between a check and the mount.
 */
static const char *team_mount(struct sup *s, const char *dir, const char *shared)
{
	if (s->run_uid < 0 || !dir)
		return dir;
	return shared && sf_below(dir, shared) ? dir : NULL;
}

/*
 * argv becomes the engine's, running argv in the image.  The variables the
 * job gave the rank (the spec's env: torchrun's, NCCL/GLOO interface, DT_*)
 * and the task's own are passed in by name; the node's environment (PATH,
 * HOME, env.sh) stays outside, where the engine runs.
 */
static int container_wrap(struct sup *s, const char *cwd, struct strvec *argv,
			  struct strvec *env, struct strbuf *why)
{
	json_t *spec = s->t.spec, *v;
	const char *key, *submit = json_get_str(spec, "submit_dir", NULL);
	const char *spec_cwd = json_get_str(spec, "cwd", NULL);
	struct strvec pass = STRVEC_INIT, out = STRVEC_INIT, set = STRVEC_INIT;
	struct strbuf notes = STRBUF_INIT;
	struct container_run r;
	struct container_user user = { s->run_uid, s->run_gid, s->groups, s->nr_groups };
	const char *lrank = json_get_str(json_object_get(spec, "env"), "LOCAL_RANK", NULL);
	struct strbuf stdbuf = STRBUF_INIT, inside = STRBUF_INIT;
	int ret = 0;

	/* line_buffered: the node's libstdbuf in the image, the job's own after it */
	container_stdbuf(env, 1, &stdbuf, &inside);
	json_object_foreach(json_object_get(spec, "env"), key, v)
		if (!stdbuf.len || strcmp(key, "LD_PRELOAD"))
			strvec_push(&pass, key);
	strvec_pushv(&pass, (const char *[]){ "CUDA_VISIBLE_DEVICES", DT_TASK_ID_ENV,
					      DT_TASK_MARKER_ENV, NULL });
	memset(&r, 0, sizeof(r));
	r.engine = s->engine.buf;
	r.ref = s->image_ref.buf;
	r.name = s->ctr_name.buf;
	/* the fallback to the agent's home is not in the image: its "/" then */
	r.cwd = (spec_cwd && !strcmp(cwd, spec_cwd)) || (submit && !strcmp(cwd, submit)) ? cwd : NULL;
	/* mounted where the rank starts there or the node can reach it: a submit dir this
	 * node cannot enter (a 0700 home on the submit host) would fail podman's statfs */
	r.submit_dir = submit && (!strcmp(cwd, submit) || access(submit, X_OK) == 0) ? submit : NULL;
	r.shared_dir = json_get_str(spec, "log_root", NULL);
	if (s->run_uid >= 0) {
		r.user = &user;
		strbuf_reset(&s->ctr_env);
		strbuf_addf(&s->ctr_env, "%s/ctr-env/%s.%.8s.env", s->home, s->t.id, s->t.marker);
		r.env_file = s->ctr_env.buf;
		r.submit_dir = team_mount(s, r.submit_dir, r.shared_dir);
		if (r.cwd && !team_mount(s, r.cwd, r.shared_dir)) {
			if (!lrank || !strcmp(lrank, "0")) {
				struct strbuf note = STRBUF_INIT;

				strbuf_addf(&note, "dtagent: note: '%s' is not on the shared dir: "
					    "in team mode only the shared dir is mounted in the "
					    "image; starting in the image's '/'", r.cwd);
				log_note(s, note.buf);
				strbuf_release(&note);
			}
			r.cwd = NULL;
		}
		strbuf_reset(&s->ctr_cwd);
		if (r.cwd)
			strbuf_addstr(&s->ctr_cwd, r.cwd);
	}
	r.gpus = json_get_str(spec, "cuda_visible_devices", NULL);
	r.dev_dir = getenv_nonempty("DTAGENT_DEV_DIR");
	if (stdbuf.len) {
		r.stdbuf_lib = stdbuf.buf;
		r.ld_preload = inside.buf;
	}
	/* the renumbered CUDA_VISIBLE_DEVICES is known once the argv is made */
	container_run_argv(&r, argv, &pass, &out, &set, &notes);
	for (size_t i = 0; i < set.nr; i++) {
		char *eq = strchr(set.v[i], '=');

		*eq = '\0';
		strvec_setenv(env, set.v[i], eq + 1);
	}
	if (r.user && container_env_file(s, &pass, env, why) < 0)
		ret = -1;
	if (notes.len && (!lrank || !strcmp(lrank, "0")))
		log_note(s, notes.buf);
	strvec_clear(argv);
	strvec_pushv(argv, (const char **)out.v);
	strvec_clear(&pass);
	strvec_clear(&out);
	strvec_clear(&set);
	strbuf_release(&notes);
	strbuf_release(&stdbuf);
	strbuf_release(&inside);
	return ret;
}

/*
 * The program must be there before anything starts: looked up as execvp()
 * will (through env(1) for W&B's `${env} ${interpreter} ...`) on the task's
 * own PATH, from its cwd.  A missing one fails the task at once with the name
 * and the fix, instead of `/usr/bin/env: 'python': No such file or directory`
 * and exit 127 in the log.  W&B's ${interpreter} (the sweep sets
 * DT_WANDB_INTERPRETER) is the python `wandb agent` runs on: "python", and
 * python3 where there is no python (Debian).  0 to go on, -1 when finished.
 */
static int program_check(struct sup *s, struct strvec *argv, const struct strvec *env,
			 const char *cwd)
{
	struct strbuf found = STRBUF_INIT, msg = STRBUF_INIT;
	const char *path = NULL, *interp = NULL, *name;
	int k = json_is_true(json_object_get(s->t.spec, "shell")) ? -1 :
		argv_program_index(argv->v, argv->nr), ret = 0;

	if (k < 0)
		return 0;
	for (size_t i = 0; i < env->nr; i++) {
		if (starts_with(env->v[i], "PATH="))
			path = env->v[i] + 5;
		if (starts_with(env->v[i], "DT_WANDB_INTERPRETER="))
			interp = env->v[i] + 21;
	}
	name = argv->v[k];
	if (locate_program(name, path, cwd, &found) == 0)
		goto out;
	if (interp && !strcmp(name, interp) && !strcmp(name, "python") &&
	    locate_program("python3", path, cwd, &found) == 0) {
		free((char *)argv->v[k]);
		argv->v[k] = xstrdup("python3");
		log_note(s, "dtagent: note: W&B's ${interpreter}: no 'python' on PATH here, so "
			 "'python3' (wandb agent runs the python it was started with)");
		goto out;
	}
	if (strchr(name, '/'))
		strbuf_addf(&msg, "'%s' is not an executable file (from '%s')", name, cwd);
	else
		strbuf_addf(&msg, "'%s' not found on PATH", name);
	if (!strcmp(name, "python") && locate_program("python3", path, cwd, &found) == 0)
		strbuf_addstr(&msg, " (Debian has python3): set command: or install "
			      "python-is-python3");
	else if (!strchr(name, '/'))
		strbuf_addstr(&msg, ": install it, or give its full path");
	finish(s, TASK_FAILED, 127, msg.buf);
	ret = -1;
out:
	strbuf_release(&found);
	strbuf_release(&msg);
	return ret;
}

static int start_task(struct sup *s)
{
	json_t *spec = s->t.spec, *v;
	struct strvec argv = STRVEC_INIT, env = STRVEC_INIT;
	const char *cwd = task_cwd(s), *key;
	int po[2], pe[2], report[2], go[2];
	char buf[300];
	ssize_t n;
	pid_t pid;
	size_t i;
	int in_cgroup;

	if (json_is_true(json_object_get(spec, "shell"))) {
		strvec_push(&argv, "/bin/sh");
		strvec_push(&argv, "-c");
	}
	json_array_foreach(json_object_get(spec, "argv"), i, v)
		strvec_push(&argv, json_string_value(v));
	task_base_env(s, &env);
	strvec_setenv(&env, "PWD", cwd);
	json_object_foreach(json_object_get(spec, "env"), key, v)
		strvec_setenv(&env, key, json_string_value(v));
	if (json_get_str(spec, "cuda_visible_devices", NULL))
		strvec_setenv(&env, "CUDA_VISIBLE_DEVICES",
			      json_get_str(spec, "cuda_visible_devices", NULL));
	if (s->run_uid >= 0) {
		json_t *r = json_object_get(spec, "run_as");

		strvec_setenv(&env, "USER", json_get_str(r, "user", ""));
		strvec_setenv(&env, "LOGNAME", json_get_str(r, "user", ""));
		strvec_setenv(&env, "HOME", json_get_str(r, "home", "/"));
	}
	strvec_setenv(&env, DT_TASK_ID_ENV, s->t.id);
	if (json_get_str(spec, "node", NULL))
		strvec_setenv(&env, DT_NODE_ENV, json_get_str(spec, "node", NULL));
	strvec_setenv(&env, DT_TASK_MARKER_ENV, s->t.marker);
	strvec_setenv(&env, DT_AGENT_SOCKET_ENV, s->sock.buf);
	path_prefix_self(&env);
	{
		struct strbuf why = STRBUF_INIT;

		if (linelog_stdbuf_env(&env, &why) < 0)
			log_note(s, why.buf);
		strbuf_release(&why);
	}
	debug_task_env(s->home, &env);
	/* in an image, the program is the image's: the engine says when it is missing */
	if (s->ctr_name.len) {
		struct strbuf why = STRBUF_INIT;

		if (container_wrap(s, cwd, &argv, &env, &why) < 0) {
			finish(s, TASK_FAILED, 127, why.buf);
			strbuf_release(&why);
			strvec_clear(&argv);
			strvec_clear(&env);
			return -1;
		}
		strbuf_release(&why);
	} else if (program_check(s, &argv, &env, cwd) < 0) {
		strvec_clear(&argv);
		strvec_clear(&env);
		return -1;
	}

	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0 ||
	    pipe2(report, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) {
		finish(s, TASK_FAILED, 127, "cannot create pipes");
		return -1;
	}
	pid = fork_into_cgroup(s->t.cgroup, &in_cgroup);
	if (pid < 0) {
		finish(s, TASK_FAILED, 127, "cannot fork");
		return -1;
	}
	if (pid == 0) {
		sigset_t none;
		int nul;

		sigemptyset(&none);
		for (int sig = 1; sig < 32; sig++)
			signal(sig, SIG_DFL);
		sigprocmask(SIG_SETMASK, &none, NULL);
		prctl(PR_SET_PDEATHSIG, 0);
		if (setsid() < 0)
			child_fail(report[1], "setsid");
		/* wait until the supervisor has moved us into the cgroup */
		if (read(go[0], buf, 1) < 0)
			child_fail(report[1], "sync");
		nul = open("/dev/null", O_RDONLY);
		if (nul < 0)
			child_fail(report[1], "/dev/null");
		dup2(nul, 0);
		dup2(po[1], 1);
		dup2(pe[1], 2);
		set_limits(json_object_get(spec, "limits"));
		if (s->ctr_env.len) {
			/* team mode: root's engine, with the agent's environment; the
			 * rank becomes the user in the image (container_wrap), in a
			 * directory the user can enter (as a task without an image) */
			if (s->ctr_cwd.len && enter_as_user(s, s->ctr_cwd.buf) < 0)
				child_fail(report[1], s->ctr_cwd.buf);
			if (chdir("/") < 0)
				child_fail(report[1], "/");
			execvp(argv.v[0], (char *const *)argv.v);
			child_fail(report[1], "exec");
		}
		if (drop_to_user(s) < 0)
			child_fail(report[1], "becoming the job's user");
		if (chdir(cwd) < 0)
			child_fail(report[1], cwd);
		environ = (char **)env.v;
		execvp(argv.v[0], (char *const *)argv.v);
		child_fail(report[1], "exec");
	}
	close(po[1]);
	close(pe[1]);
	close(report[1]);
	close(go[0]);
	s->t.pid = pid;
	s->t.pgid = pid;
	if (s->t.cgroup && !in_cgroup && cgroup_add_pid(s->t.cgroup, pid) < 0) {
		dtlog(DTLOG_WARN, "task %s: cannot move it into cgroup '%s': %s; "
		      "stopping will rely on its process group and %s marker",
		      s->t.id, s->t.cgroup, strerror(errno), DT_TASK_MARKER_ENV);
		cgroup_remove(s->t.cgroup);
		free(s->t.cgroup);
		s->t.cgroup = NULL;
	}
	if (write(go[1], "g", 1) < 0)
		dtlog(DTLOG_WARN, "task %s: cannot release the child", s->t.id);
	close(go[1]);
	do
		n = read(report[0], buf, sizeof(buf) - 1);
	while (n < 0 && errno == EINTR);
	close(report[0]);
	strvec_clear(&argv);
	strvec_clear(&env);
	if (n >= (ssize_t)sizeof(int)) {
		int e, status;
		struct strbuf msg = STRBUF_INIT;

		memcpy(&e, buf, sizeof(e));
		buf[n] = '\0';
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (!strcmp(buf + sizeof(e), "exec"))
			strbuf_addf(&msg, "cannot run '%s': %s", json_string_value(
				json_array_get(json_object_get(spec, "argv"), 0)), strerror(e));
		else
			strbuf_addf(&msg, "cannot start: %s: %s", buf + sizeof(e), strerror(e));
		log_note(s, msg.buf);
		close(po[0]);
		close(pe[0]);
		s->t.pid = 0;
		s->t.pgid = 0;
		finish(s, TASK_FAILED, 127, msg.buf);
		strbuf_release(&msg);
		return -1;
	}
	s->fd_out = po[0];
	s->fd_err = pe[0];
	fcntl(s->fd_out, F_SETFL, O_NONBLOCK);
	fcntl(s->fd_err, F_SETFL, O_NONBLOCK);
	s->t.state = s->t.stop_requested ? TASK_STOPPING : TASK_RUNNING;
	s->t.started_us = dt_now_us();
	save(s);
	return 0;
}

static struct proc_tree tree_of(struct sup *s)
{
	struct proc_tree pt = task_proc_tree(&s->t);

	pt.parent = getpid();   /* we are the subreaper: every descendant is the task's */
	pt.since = s->t.sup_start;   /* ours (the kernel's), not the task file's */
	return pt;
}

/*
 * A user's signal (dtctl cancel --signal) reaches every process of each rank
 * exactly once.  An agent launcher's task is one rank: its whole tree.  The
 * mpi launcher's tasks (no rank of their own: mpirun, an orted) hold the
 * ranks below their rank loggers, which our own file runs (dtshim
 * rank-log): only those get it, from the supervisor of each node, and
 * mpirun, the orteds and the loggers never do, so nothing passes it on
 * again (proctree.h).  With mpi.orted_launch: ssh the other nodes' orteds
 * are no agent's tasks: their ranks are not reached.
 */
static int pass_signal(struct sup *s, int sig)
{
	struct proc_tree pt = tree_of(s);

	if (json_get_int(s->t.spec, "rank", -1) >= 0)
		return proc_tree_signal(&pt, sig);
	return proc_tree_signal_ranks(&pt, sig, "/proc/self/exe");
}

static void request_stop(struct sup *s, long long grace_ms)
{
	struct proc_tree pt = tree_of(s);

	if (s->term_deadline)
		return;
	s->t.stop_requested = 1;
	if (!s->main_done) {
		s->t.state = TASK_STOPPING;
		save(s);
	}
	dtlog(DTLOG_INFO, "task %s: stopping (SIGTERM, SIGKILL after %lld ms)", s->t.id, grace_ms);
	proc_tree_signal(&pt, SIGTERM);
	s->term_deadline = dt_mono_ms() + grace_ms;
}

static void read_pipe(struct sup *s, int *fd, struct linelog *l)
{
	struct strbuf lines = STRBUF_INIT;

	linelog_read(l, fd, &lines);
	log_write(s, &lines);
	strbuf_release(&lines);
}

static void reap(struct sup *s)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		if (pid == (pid_t)s->t.pid && !s->main_done) {
			s->main_done = 1;
			s->t.has_exit = 1;
			s->t.exit_code = wait_status_to_code(status);
			s->t.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
		}
	}
}

/*
 * The engine's own helpers outlive the rank by a moment (conmon runs
 * `podman container cleanup` when the container ends, with the task's
 * environment): the task is over when they are, SIGKILLed after a grace.
 */
static void container_wait_cleanup(struct sup *s)
{
	long long start = dt_mono_ms();

	for (;;) {
		struct proc_tree pt;

		reap(s);
		pt = tree_of(s);
		if (!proc_tree_count(&pt))
			return;
		if (dt_mono_ms() - start > CLEANUP_GRACE_MS + KILL_GIVEUP_MS) {
			dtlog(DTLOG_ERROR, "task %s: the container's processes survive SIGKILL; "
			      "giving up", s->t.id);
			return;
		}
		if (dt_mono_ms() - start > CLEANUP_GRACE_MS)
			proc_tree_signal(&pt, SIGKILL);
		poll(NULL, 0, 20);
	}
}

int supervise_main(const char *home, const char *id)
{
	struct sup s;
	struct strbuf err = STRBUF_INIT, path = STRBUF_INIT;
	sigset_t set;
	int sfd;

	memset(&s, 0, sizeof(s));
	s.home = home;
	s.logfd = s.fd_out = s.fd_err = -1;
	strbuf_init(&s.dir, 0);
	strbuf_init(&s.cgroup_why, 0);
	strbuf_init(&s.engine, 0);
	strbuf_init(&s.image_ref, 0);
	strbuf_init(&s.ctr_name, 0);
	strbuf_init(&s.ctr_env, 0);
	strbuf_init(&s.ctr_cwd, 0);
	strbuf_addf(&s.dir, "%s/tasks", home);
	strbuf_init(&s.sock, 0);
	report_socket_name(&s.sock, home);
	strbuf_addf(&path, "%s/agent.log", home);
	dtlog_open(path.buf, 0);
	blocked_set(&set);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (task_load(s.dir.buf, id, &s.t, &err) < 0) {
		dtlog(DTLOG_ERROR, "supervisor: %s", err.buf);
		return 1;
	}
	if (s.t.state != TASK_STARTING) {
		dtlog(DTLOG_ERROR, "supervisor: task %s is already %s", id, task_state_name(s.t.state));
		return 1;
	}
	if (!s.t.marker[0] && dt_random_hex(s.t.marker, TASK_MARKER_HEX / 2) < 0) {
		dtlog(DTLOG_ERROR, "supervisor: task %s: no random bytes for its marker", id);
		return 1;
	}
	/* orphans of the task (double forks, daemons with a cleared environment)
	 * become our children: the tree is every descendant of ours, whatever
	 * its process group or environment (proctree.c) */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	snprintf(s.t.containment, sizeof(s.t.containment), "subreaper");
	s.t.sup_pid = getpid();
	s.t.sup_start = proc_start_time(getpid(), NULL);
	s.t.vouches = 1;      /* tell_agent_end() */
	s.grace_ms = json_get_int(s.t.spec, "grace_ms", DT_TASK_GRACE_MS_DEFAULT);
	linelog_init(&s.out, 'O', 0);
	linelog_init(&s.err, 'E', 0);

	/* the log file, and all the task writes, as readable as cluster.yaml's job_files says */
	if (json_is_integer(json_object_get(s.t.spec, "umask")))
		sf_set_umask((mode_t)json_get_int(s.t.spec, "umask", 027));
	if (run_as_load(&s, &err) < 0) {
		finish(&s, TASK_FAILED, 127, err.buf);
		dtlog(DTLOG_ERROR, "task %s: %s", id, err.buf);
		return 0;
	}
	as_user(&s, 1);
	s.logfd = open_task_log(&s, &err);
	as_user(&s, 0);
	if (s.logfd < 0) {
		finish(&s, TASK_FAILED, 127, err.buf);
		dtlog(DTLOG_ERROR, "task %s: %s", id, err.buf);
		return 0;
	}
	log_marker(&s);

	if (json_object_get(s.t.spec, "container") && container_prepare(&s, &err) < 0) {
		log_note(&s, err.buf);
		finish(&s, TASK_FAILED, 127, err.buf);
		dtlog(DTLOG_ERROR, "task %s: %s", id, err.buf);
		goto done;
	}

	/* its cgroup, where the agent may make one: <id>.<marker prefix>, so that
	 * agents of other homes on this host never share one */
	{
		struct strbuf dir = STRBUF_INIT, name = STRBUF_INIT;

		strbuf_addf(&name, "%s.%.8s", id, s.t.marker);
		if (getenv_nonempty("DTAGENT_NO_CGROUP")) {
			dtlog(DTLOG_DEBUG, "task %s: cgroups disabled by DTAGENT_NO_CGROUP", id);
		} else if (cgroup_create(name.buf, json_object_get(s.t.spec, "limits"), &dir,
					 &s.cgroup_why) == 0) {
			s.t.cgroup = strbuf_detach(&dir, NULL);
			snprintf(s.t.containment, sizeof(s.t.containment), "cgroup");
			if (s.cgroup_why.len)
				dtlog(DTLOG_WARN, "task %s: %s", id, s.cgroup_why.buf);
		} else {
			dtlog(DTLOG_INFO, "task %s: no cgroup (%s); stopping relies on its "
			      "process group and %s marker", id, s.cgroup_why.buf, DT_TASK_MARKER_ENV);
		}
		strbuf_release(&dir);
		strbuf_release(&name);
	}

	if (start_task(&s) < 0) {
		if (s.ctr_name.len)
			container_remove(s.engine.buf, s.ctr_name.buf, NULL);
		goto done;
	}
	dtlog(DTLOG_DEBUG, "task %s: running as pid %lld", id, s.t.pid);

	for (;;) {
		struct pollfd pfd[3] = {
			{ sfd, POLLIN, 0 }, { s.fd_out, POLLIN, 0 }, { s.fd_err, POLLIN, 0 },
		};
		long long now;
		int timeout = -1;

		if (s.term_deadline || s.main_done)
			timeout = 100;
		if (poll(pfd, 3, timeout) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo == SIGCHLD) {
					reap(&s);
				} else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
					long long g = s.grace_ms;

					if (si.ssi_code == SI_QUEUE && si.ssi_int >= 0)
						g = si.ssi_int;
					request_stop(&s, g);
				} else if (si.ssi_signo == SIGHUP && si.ssi_code == SI_QUEUE &&
					   si.ssi_int >= 1 && si.ssi_int <= DT_SIGNAL_MAX &&
					   !s.main_done) {
					/* the agent's POST /v1/tasks/<id>/signal: passed on
					 * to the whole tree, or to the ranks of mpirun's or
					 * an orted's; a plain SIGHUP is ignored */
					dtlog(DTLOG_INFO, "task %s: signal %d to %d process(es)",
					      s.t.id, si.ssi_int, pass_signal(&s, si.ssi_int));
				}
			}
		}
		if (pfd[1].revents)
			read_pipe(&s, &s.fd_out, &s.out);
		if (pfd[2].revents)
			read_pipe(&s, &s.fd_err, &s.err);
		reap(&s);
		now = dt_mono_ms();

		if (s.main_done && !s.leftovers_checked) {
			/* the main process ended: what is left of its tree goes too */
			struct proc_tree pt = tree_of(&s);
			/* a task that left nothing, as most do: no walk of /proc */
			int left = proc_tree_empty_quick(&pt) ? 0 : proc_tree_count(&pt);

			s.leftovers_checked = 1;
			s.tree_gone = !left;
			if (left) {
				s.t.leftovers_killed = left;
				dtlog(DTLOG_INFO, "task %s: main process ended, stopping %d leftover process(es)",
				      id, left);
				if (!s.term_deadline) {
					proc_tree_signal(&pt, SIGTERM);
					s.term_deadline = now + (s.grace_ms < CLEANUP_GRACE_MS ?
								 s.grace_ms : CLEANUP_GRACE_MS);
				}
			}
		}
		if (s.term_deadline && now >= s.term_deadline) {
			struct proc_tree pt = tree_of(&s);

			if (!s.kill_started)
				s.kill_started = now;
			if (proc_tree_signal(&pt, SIGKILL) && now - s.kill_started > KILL_GIVEUP_MS) {
				dtlog(DTLOG_ERROR, "task %s: processes survive SIGKILL for %d s; giving up",
				      id, KILL_GIVEUP_MS / 1000);
				break;
			}
		}
		if (s.main_done && s.leftovers_checked) {
			struct proc_tree pt = tree_of(&s);

			if (s.fd_out < 0 && s.fd_err < 0 && (!s.term_deadline || !proc_tree_count(&pt)))
				break;
			if (s.term_deadline || s.fd_out >= 0 || s.fd_err >= 0) {
				if (!s.tree_gone && proc_tree_count(&pt)) {
					s.empty_since = 0;
				} else if (!s.empty_since) {
					s.empty_since = now;
				} else if (now - s.empty_since > DRAIN_AFTER_EMPTY_MS) {
					/* the tree is gone but something else holds the pipes */
					break;
				}
			}
		}
	}
	reap(&s);
	if (s.fd_out >= 0)
		read_pipe(&s, &s.fd_out, &s.out);
	if (s.fd_err >= 0)
		read_pipe(&s, &s.fd_err, &s.err);
	{
		struct strbuf lines = STRBUF_INIT;

		linelog_flush(&s.out, &lines);
		linelog_flush(&s.err, &lines);
		log_write(&s, &lines);
		strbuf_release(&lines);
	}
	/* killed engine processes leave the container behind: nothing may stay */
	if (s.ctr_name.len) {
		/* podman run --rm removed it when it ran to its end; not after a kill,
		 * or a failure of podman itself (125-127) */
		if (s.t.stop_requested || s.t.signal || s.t.exit_code >= 125 || s.t.leftovers_killed)
			container_remove(s.engine.buf, s.ctr_name.buf, NULL);
		container_wait_cleanup(&s);
	}
	/* before the exit is recorded: a reader that sees the job end finds it */
	log_end_marker(&s);
	if (s.t.cgroup)
		cgroup_remove(s.t.cgroup);
	finish(&s, TASK_EXITED, s.t.exit_code, NULL);
	dtlog(DTLOG_DEBUG, "task %s: exited with %d", id, s.t.exit_code);
done:
	log_end_marker(&s);   /* a task that could not start */
	if (s.ctr_env.len)
		unlink(s.ctr_env.buf);
	if (s.logfd >= 0)
		close(s.logfd);
	linelog_release(&s.out);
	linelog_release(&s.err);
	task_release(&s.t);
	strbuf_release(&s.dir);
	strbuf_release(&s.sock);
	strbuf_release(&s.cgroup_why);
	strbuf_release(&s.engine);
	strbuf_release(&s.image_ref);
	strbuf_release(&s.ctr_name);
	strbuf_release(&s.ctr_env);
	strbuf_release(&s.ctr_cwd);
	strbuf_release(&err);
	strbuf_release(&path);
	return 0;
}
