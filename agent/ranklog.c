/*
 * ranklog.c - the rank logger run by mpirun for each rank (see ranklog.h).
 */
#include "ranklog.h"
#include "container.h"
#include "auth.h"
#include "dthome.h"
#include "json.h"
#include "linelog.h"
#include "log.h"
#include "run-command.h"
#include "safefile.h"
#include "strvec.h"
#include "protocol.h"
#include "report.h"
#include "task.h"
#include "usage.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

/* A line of our own in the rank's log (stderr stream). */
static void log_line(const char *msg, void *data)
{
	int fd = *(int *)data;
	struct linelog l;
	struct strbuf out = STRBUF_INIT;

	linelog_init(&l, 'E', 0);
	linelog_feed(&l, msg, strlen(msg), &out);
	linelog_flush(&l, &out);
	if (write(fd, out.buf, out.len) < 0) {
		/* the log is what is failing: nowhere else to say it */
	}
	linelog_release(&l);
	strbuf_release(&out);
}

/*
 * An mpi job in an image (DT_CONTAINER, set by dtsched's launch plan): the
 * image is made ready on this node as for an agent task (container.h), and
 * the rank runs in it under the host's orted, which it reaches over PMIx on
 * the host network; the orted's session dir is mounted at its path, and the
 * rank keeps the user's uid (PMIx compares it).  Every variable orted gave
 * the rank passes, but the node's own PATH, HOME and library paths.
 */
struct rank_ctr {
	json_t *spec;
	struct strbuf engine, ref, name;
};

static int rank_container_prepare(struct rank_ctr *c, int rank, int logfd, struct strbuf *why)
{
	const char *text = getenv(DT_CONTAINER_ENV);
	struct strbuf home = STRBUF_INIT;
	char hex[9];
	int ret;

	c->spec = json_loads(text, 0, NULL);
	if (!json_is_object(c->spec) || !json_get_str(c->spec, "image", NULL)) {
		strbuf_addf(why, "%s is not an image spec", DT_CONTAINER_ENV);
		return -1;
	}
	if (container_engine_find(&c->engine, why) < 0)
		return -1;
	/* the user's ~/.dtctl (the agent's home by default): its images/.lock */
	strbuf_addf(&home, "%s/.dtctl", getenv_nonempty("HOME") ? getenv("HOME") : "/tmp");
	ret = container_image_ensure(c->engine.buf, c->spec, json_get_str(c->spec, "shared", NULL),
				     home.buf, log_line, &logfd, &c->ref, why);
	strbuf_release(&home);
	if (ret < 0)
		return -1;
	if (dt_random_hex(hex, 4) < 0)
		snprintf(hex, sizeof(hex), "%08x", (unsigned)getpid());
	strbuf_addf(&c->name, "dtctl-%s-r%d-%s", getenv_nonempty("DT_JOB_ID") ?
		    getenv("DT_JOB_ID") : "mpi", rank, hex);
	return 0;
}

/* In the child: exec the engine running argv in the image (never returns on success). */
static void rank_container_exec(struct rank_ctr *c, const char **argv)
{
	static const char *const keep_out[] = { "PATH", "HOME", "PWD", "OLDPWD", "SHLVL", "_",
						"LD_LIBRARY_PATH", "LD_PRELOAD", "TMPDIR",
						DT_CONTAINER_ENV, NULL };
	extern char **environ;
	struct strvec args = STRVEC_INIT, pass = STRVEC_INIT, out = STRVEC_INIT, set = STRVEC_INIT;
	struct strvec host_env = STRVEC_INIT;
	struct strbuf notes = STRBUF_INIT, stdbuf = STRBUF_INIT, inside = STRBUF_INIT;
	struct container_run r;
	char *cwd = getcwd(NULL, 0);

	for (const char **a = argv; *a; a++)
		strvec_push(&args, *a);
	for (char **e = environ; *e; e++) {
		size_t len = strcspn(*e, "=");
		int skip = !(*e)[len];

		for (int k = 0; keep_out[k] && !skip; k++)
			skip = strlen(keep_out[k]) == len && !strncmp(*e, keep_out[k], len);
		if (!skip) {
			char *name = xstrndup(*e, len);

			strvec_push(&pass, name);
			free(name);
		}
	}
	memset(&r, 0, sizeof(r));
	r.engine = c->engine.buf;
	r.ref = c->ref.buf;
	r.name = c->name.buf;
	r.cwd = cwd;
	r.shared_dir = json_get_str(c->spec, "shared", NULL);
	r.gpus = getenv_nonempty("CUDA_VISIBLE_DEVICES");
	r.dev_dir = getenv_nonempty("DTAGENT_DEV_DIR");
	r.extra_volume = getenv_nonempty("OMPI_MCA_orte_top_session_dir");
	r.keep_id = 1;
	/* line_buffered: the node's libstdbuf in the image (LD_PRELOAD, kept out
	 * above, names the node's files; the job's own preloads stay out) */
	for (char **e = environ; *e; e++)
		strvec_push(&host_env, *e);
	if (container_stdbuf(&host_env, 0, &stdbuf, &inside)) {
		r.stdbuf_lib = stdbuf.buf;
		r.ld_preload = inside.buf;
	}
	container_run_argv(&r, &args, &pass, &out, &set, &notes);
	for (size_t i = 0; i < set.nr; i++) {
		char *eq = strchr(set.v[i], '=');

		*eq = '\0';
		setenv(set.v[i], eq + 1, 1);
	}
	if (notes.len)
		fprintf(stderr, "%s\n", notes.buf);
	execv(out.v[0], (char *const *)out.v);
	fprintf(stderr, "rank-log: cannot run '%s': %s\n", out.v[0], strerror(errno));
	_exit(127);
}

static const int forwarded[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };

static int rank_from_env(void)
{
	static const char *const names[] = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
					     "RANK" };

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		const char *v = getenv(names[i]);
		char *end;
		long r;

		if (!v || !*v)
			continue;
		r = strtol(v, &end, 10);
		if (!*end && r >= 0 && r < 1000000)
			return (int)r;
	}
	return -1;
}

void gpu_map_translate(const char *map, const char *p, struct strbuf *out)
{
	size_t start = out->len;

	while (*p) {
		size_t len = strcspn(p, ",");
		char *end;
		long idx = strtol(p, &end, 10);
		const char *m = map;

		if (out->len > start)
			strbuf_addch(out, ',');
		for (long i = 0; m && end == p + len && len && idx >= 0 && i < idx; i++) {
			m = strchr(m, ',');
			m = m ? m + 1 : NULL;
		}
		if (m && end == p + len && len && idx >= 0 && *m)
			strbuf_add(out, m, strcspn(m, ","));
		else
			strbuf_add(out, p, len);
		p += len + (p[len] == ',');
	}
}

/*
 * The mpi launcher's GPU binding (scheduler/launch.c): rank r runs on node
 * r / per_node of the hostfile and sees that node's reservation, whatever
 * the orted that started it had in its environment; through the GPU map of
 * the agent that started mpirun or the orted here (DT_GPU_MAP: dtagent
 * --slurm's GPU i is the i-th device of its step), as that agent's own
 * tasks are.
 */
static void bind_gpus(int rank)
{
	const char *map = getenv(DT_GPU_SLOTS_ENV), *per = getenv(DT_RANKS_PER_NODE_ENV);
	long n = per ? strtol(per, NULL, 10) : 0, node;
	const char *p;

	if (!map || n <= 0)
		return;
	node = rank / n;
	for (p = map; node > 0 && p; node--) {
		p = strchr(p, '|');
		if (p)
			p++;
	}
	if (p) {
		size_t len = strcspn(p, "|");
		char *v = xmalloc(len + 1);

		memcpy(v, p, len);
		v[len] = '\0';
		if (getenv_nonempty(DT_GPU_MAP_ENV)) {
			struct strbuf mapped = STRBUF_INIT;

			gpu_map_translate(getenv_nonempty(DT_GPU_MAP_ENV), v, &mapped);
			free(v);
			v = strbuf_detach(&mapped, NULL);
		}
		setenv("CUDA_VISIBLE_DEVICES", v, 1);
		setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
		free(v);
	}
}

/* What could not be written to the rank's log (ENOSPC, EIO), for ranks/<r>.json. */
static struct log_loss lost;

/* Read what is there; on EOF flush and close *fd. */
static void drain(int *fd, struct linelog *l, int logfd)
{
	struct strbuf lines = STRBUF_INIT;

	linelog_read(l, fd, &lines);
	linelog_write(logfd, &lines, &lost);
	strbuf_release(&lines);
}

/*
 * The record again, to the agent this rank runs under, on its report socket
 * (protocol.h DT_AGENT_SOCKET_ENV, report.h: the kernel tells the agent that
 * this process is of the task's tree): it reaches dtsched with the agent's
 * next heartbeat, sent at once, and dtsched can end the job without waiting
 * for mpirun's and the orteds' teardown.  Nothing to do outside an agent's
 * task (mpirun run by hand, orteds started over ssh): dtsched then ends the
 * job when mpirun exits.
 */
static void notify_agent(json_t *rec)
{
	const char *sock = getenv(DT_AGENT_SOCKET_ENV), *task = getenv(DT_TASK_ID_ENV);
	struct strbuf body = STRBUF_INIT, why = STRBUF_INIT, ack = STRBUF_INIT;
	json_t *j;

	if (!sock || !*sock || !task || !task_id_valid(task))
		return;
	j = json_pack("{s:s,s:s,s:O,s:O,s:O,s:O}", "kind", "rank_exit", "task", task,
		      "rank", json_object_get(rec, "rank"),
		      "exit_code", json_object_get(rec, "exit_code"),
		      "signal", json_object_get(rec, "signal"),
		      "ended_at", json_object_get(rec, "ended_at"));
	json_append(&body, j);
	/* wait for the answer: the agent checks in /proc that we are of the task */
	if (report_send(sock, body.buf, body.len, &ack, &why) < 0)
		warning("rank-log: cannot tell the agent of the rank's end: %s", why.buf);
	else if (strcmp(ack.buf, "ok"))
		warning("rank-log: the agent did not take the rank's end: %s",
			ack.len ? ack.buf : "no answer");
	json_decref(j);
	strbuf_release(&body);
	strbuf_release(&why);
	strbuf_release(&ack);
}

static void record_exit(int dfd, int rank, pid_t pid, int code, int sig, long long started,
			long long ended)
{
	struct strbuf name = STRBUF_INIT, body = STRBUF_INIT, why = STRBUF_INIT;
	char host[256] = "", ts1[DT_TIMESTAMP_LEN], ts2[DT_TIMESTAMP_LEN];
	int rfd;
	json_t *j;

	gethostname(host, sizeof(host) - 1);
	dt_timestamp_format(ts1, sizeof(ts1), started);
	dt_timestamp_format(ts2, sizeof(ts2), ended);
	/* <job dir>/ranks beside <job dir>/logs, made by dtsched; never through a link */
	rfd = openat(dfd, "../ranks", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (rfd < 0 && errno == ENOENT && mkdirat(dfd, "../ranks", 0775) == 0)
		rfd = openat(dfd, "../ranks", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	strbuf_addf(&name, "%d.json", rank);
	j = json_pack("{s:i,s:s,s:i,s:i,s:i,s:s,s:s}", "rank", rank, "node", host, "pid", (int)pid,
		      "exit_code", code, "signal", sig, "started_at", ts1, "ended_at", ts2);
	if (lost.lines || lost.bytes) {
		json_object_set_new(j, "log_lost_lines", json_integer(lost.lines));
		json_object_set_new(j, "log_lost_bytes", json_integer(lost.bytes));
		json_object_set_new(j, "log_error", json_string(strerror(lost.err)));
	}
	json_append(&body, j);
	strbuf_addch(&body, '\n');
	if (rfd < 0)
		warning("rank-log: cannot open the ranks dir beside the logs: %s", strerror(errno));
	else if (sf_write_at(rfd, name.buf, body.buf, body.len, 0644, 0, &why) < 0)
		warning("rank-log: cannot write ranks/%s: %s", name.buf, why.buf);
	if (rfd >= 0)
		close(rfd);
	notify_agent(j);
	json_decref(j);
	strbuf_release(&name);
	strbuf_release(&body);
	strbuf_release(&why);
}

int ranklog_main(int argc, const char **argv)
{
	const char *dir, *attempt = getenv(DT_ATTEMPT_ENV);
	int rank = rank_from_env(), logfd, dfd, po[2], pe[2], sfd, code = 1, sig = 0, done = 0;
	struct strbuf path = STRBUF_INIT, why = STRBUF_INIT;
	struct linelog out, err;
	struct rank_ctr ctr;
	sigset_t set, old;
	long long started;
	pid_t pid;

	if (argc < 4 || strcmp(argv[2], "--")) {
		fprintf(stderr, "usage: dtagent rank-log <dir> -- <program> [<args>...]\n");
		return DT_EXIT_USAGE;
	}
	dir = argv[1];
	if (rank < 0) {
		error("rank-log: no rank in the environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, "
		      "PMI_RANK or RANK); run it under mpirun");
		return DT_EXIT_USAGE;
	}
	if (mkdir_p(dir, 0775) < 0)
		return 127;
	/* the logs dir is shared with user code: the log is a regular file or nothing */
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	strbuf_addf(&path, "%d.log", rank);
	logfd = dfd < 0 ? -1 : sf_open_append_at(dfd, path.buf, 0644, 0, &why);
	if (logfd < 0) {
		error("rank-log: cannot open '%s/%s': %s", dir, path.buf,
		      dfd < 0 ? strerror(errno) : why.buf);
		return 127;
	}
	/* this attempt's lines are this node's (protocol.h, DT_NODE_ENV): the node
	 * from the agent that started our orted (or mpirun), else the host */
	if (attempt) {
		struct strbuf mark = STRBUF_INIT;
		char host[256] = "";
		const char *node = getenv(DT_NODE_ENV);

		if (!node || !*node) {
			gethostname(host, sizeof(host) - 1);
			node = host;
		}
		linelog_marker(&mark, atoi(attempt), node);
		linelog_write(logfd, &mark, &lost);
		strbuf_release(&mark);
	}
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
		error_errno("rank-log: cannot make pipes");
		return 127;
	}
	memset(&ctr, 0, sizeof(ctr));
	strbuf_init(&ctr.engine, 0);
	strbuf_init(&ctr.ref, 0);
	strbuf_init(&ctr.name, 0);
	if (getenv_nonempty(DT_CONTAINER_ENV) && rank_container_prepare(&ctr, rank, logfd, &why) < 0) {
		struct strbuf msg = STRBUF_INIT;

		strbuf_addf(&msg, "rank-log: rank %d: %s", rank, why.buf);
		log_line(msg.buf, &logfd);
		error("%s", msg.buf);
		strbuf_release(&msg);
		return 127;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGPIPE);
	for (size_t i = 0; i < ARRAY_SIZE(forwarded); i++)
		sigaddset(&set, forwarded[i]);
	sigprocmask(SIG_BLOCK, &set, &old);
	sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	linelog_init(&out, 'O', 0);
	linelog_init(&err, 'E', 0);
	/* the rank's orphans stay below us, where a user's signal finds them
	 * (proctree.h, proc_tree_signal_ranks) */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	started = dt_now_us();
	pid = fork();
	if (pid < 0) {
		error_errno("rank-log: cannot fork");
		return 127;
	}
	if (pid == 0) {
		struct strvec env = STRVEC_INIT;
		struct strbuf note = STRBUF_INIT;

		bind_gpus(rank);
		sigprocmask(SIG_SETMASK, &old, NULL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(po[1], 1);
		dup2(pe[1], 2);
		/* the job's line_buffered, as the supervisor does for the agent launcher */
		for (char **e = environ; *e; e++)
			strvec_push(&env, *e);
		if (linelog_stdbuf_env(&env, &note) < 0)
			fprintf(stderr, "rank-log: note: %s\n", note.buf);
		environ = (char **)env.v;
		if (ctr.name.len)
			rank_container_exec(&ctr, argv + 3);
		execvp(argv[3], (char *const *)(argv + 3));
		fprintf(stderr, "rank-log: cannot run '%s': %s\n", argv[3], strerror(errno));
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	fcntl(po[0], F_SETFL, O_NONBLOCK);
	fcntl(pe[0], F_SETFL, O_NONBLOCK);
	while (!done || po[0] >= 0 || pe[0] >= 0) {
		struct pollfd pfd[3] = { { sfd, POLLIN, 0 }, { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };

		/* once the program is gone, give a grandchild holding the pipes 1 s */
		if (poll(pfd, 3, done ? 1000 : -1) == 0 && done)
			break;
		if (pfd[0].revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
				int status;

				if (si.ssi_signo == SIGCHLD) {
					pid_t w;

					/* the program, and its orphans (we are their subreaper) */
					while ((w = waitpid(-1, &status, WNOHANG)) > 0) {
						if (w != pid || done)
							continue;
						code = wait_status_to_code(status);
						sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
						done = 1;
					}
				} else if (si.ssi_signo != SIGPIPE && !done) {
					kill(pid, (int)si.ssi_signo);
				}
			}
		}
		if (pfd[1].revents)
			drain(&po[0], &out, logfd);
		if (pfd[2].revents)
			drain(&pe[0], &err, logfd);
	}
	if (!done) {
		int status;

		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		code = wait_status_to_code(status);
		sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
	}
	/* a killed podman client leaves its container behind */
	if (ctr.name.len && (sig || code >= 125))
		container_remove(ctr.engine.buf, ctr.name.buf, NULL);
	json_decref(ctr.spec);
	strbuf_release(&ctr.engine);
	strbuf_release(&ctr.ref);
	strbuf_release(&ctr.name);
	{
		struct strbuf rest = STRBUF_INIT;

		linelog_flush(&out, &rest);
		linelog_flush(&err, &rest);
		if (attempt)   /* the start marker was written: the end one */
			linelog_end_marker(&rest);
		linelog_write(logfd, &rest, &lost);
		strbuf_release(&rest);
	}
	close(logfd);
	record_exit(dfd, rank, pid, code, sig, started, dt_now_us());
	close(dfd);
	strbuf_release(&why);
	linelog_release(&out);
	linelog_release(&err);
	strbuf_release(&path);
	return code;
}
