/*
 * cmd-run.c - `dtctl run [job.yaml] [options] [-- program args...]`: submit one
 * distributed job to dtsched and, unless --detach, stream every rank's log
 * merged and prefixed "[node rank]" until the job ends, then exit with its
 * exit code.
 *
 * The job is job.yaml (lib/config-job.c) with every field overridable by a flag,
 * or built from flags alone (`dtctl run -n 2 -g 8 -- python train.py`).  It
 * goes to dtsched as JSON (POST /v1/jobs); dtsched refuses at once, with the
 * numbers, a job that can never fit.  --dry-run prints where the ranks would
 * go, the hostfile, the environment and the exact command lines.
 *
 * Attached, logs are read from <job_dir>/logs on the shared dir the way
 * `dtctl logs -f` does (lib/logmerge.h, polling) and the job's state comes
 * from dtsched (GET /v1/jobs/<id>).  The first Ctrl-C asks, on a terminal,
 * whether to cancel the job or detach; a second one (or the first, when
 * stdin is not a terminal) cancels it.
 */
#include "builtin.h"
#include "config.h"
#include "head.h"
#include "image.h"
#include "setup.h"
#include "slurm.h"
#include "safefile.h"
#include "jobdir.h"
#include "json.h"
#include "log.h"
#include "logmerge.h"
#include "parse-options.h"
#include "protocol.h"
#include "term.h"
#include "units.h"
#include "usage.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#define POLL_MS 50

static volatile sig_atomic_t interrupts;

static void on_sigint(int sig)
{
	interrupts++;
}

struct run_opts {
	int nodes, gpus, procs, retries, trainer, shell, dry_run, detach, json, line_buffered;
	const char *launcher, *timeout, *stall_after, *include, *exclude, *workdir, *name;
	const char *container;
	struct strvec env, labels;
};

static int set_kv(struct kvlist *l, const char *item, const char *what)
{
	const char *eq = strchr(item, '=');
	char *k;

	if (!eq || eq == item)
		return error("%s '%s': expected NAME=VALUE", what, item);
	k = xstrndup(item, (size_t)(eq - item));
	kvlist_set(l, k, eq + 1);
	free(k);
	return 0;
}

/* dttrain flags after `--` with --trainer: --key=value or --key value */
static int trainer_args(struct job_config *j, const char **argv, int argc)
{
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *eq;
		struct strbuf key = STRBUF_INIT;

		if (!starts_with(a, "--") || !a[2])
			return error("--trainer: expected dttrain flags like --epochs=2, found '%s'", a);
		eq = strchr(a, '=');
		for (const char *p = a + 2; *p && p != eq; p++)
			strbuf_addch(&key, *p == '-' ? '_' : *p);
		if (eq) {
			kvlist_set(&j->trainer, key.buf, eq + 1);
		} else if (i + 1 < argc && !starts_with(argv[i + 1], "--")) {
			kvlist_set(&j->trainer, key.buf, argv[++i]);
		} else {
			strbuf_release(&key);
			return error("--trainer: flag '%s' needs a value (--flag=value)", a);
		}
		strbuf_release(&key);
	}
	return 0;
}

/* The job from job.yaml and/or flags; 0 or DT_EXIT_USAGE with a message. */
static int build_job(struct job_config *j, struct run_opts *o, const char *file,
		     const char **cmd, int nr_cmd)
{
	struct strbuf err = STRBUF_INIT;
	long long ms;

	if (file) {
		if (job_config_load(j, file, &err) < 0) {
			error("%s", err.buf);
			strbuf_release(&err);
			return DT_EXIT_USAGE;
		}
	} else {
		job_config_init(j);
		if (!nr_cmd && !o->trainer) {
			error("nothing to run: give a job.yaml, or a command after '--' "
			      "(dtctl run -n 2 -g 8 -- python train.py)");
			return DT_EXIT_USAGE;
		}
	}
	strbuf_release(&err);
	if (nr_cmd || o->trainer) {
		strvec_clear(&j->command);
		kvlist_release(&j->trainer);
		j->has_trainer = o->trainer;
		if (o->trainer) {
			if (trainer_args(j, cmd, nr_cmd) < 0)
				return DT_EXIT_USAGE;
			if (!o->launcher)
				j->launcher = LAUNCHER_MPI;
		} else {
			for (int i = 0; i < nr_cmd; i++)
				strvec_push(&j->command, cmd[i]);
		}
		if (!file || !j->name) {
			free(j->name);
			j->name = NULL;
		}
	}
	if (o->shell)
		j->shell = 1;
	if (o->nodes >= 0) {
		if (o->nodes < 1 || o->nodes > 256)
			return error("--num-nodes %d: expected 1 to 256", o->nodes), DT_EXIT_USAGE;
		j->nodes = o->nodes;
	}
	if (o->gpus >= 0 && o->procs >= 0)
		return error("--gpus-per-node and --procs-per-node cannot be used together"),
			DT_EXIT_USAGE;
	if (o->gpus >= 0) {
		if (o->gpus < 1 || o->gpus > 64)
			return error("--gpus-per-node %d: expected 1 to 64", o->gpus), DT_EXIT_USAGE;
		j->gpus_per_node = o->gpus;
		j->procs_per_node = 0;
	}
	if (o->procs >= 0) {
		if (o->procs < 1 || o->procs > 64)
			return error("--procs-per-node %d: expected 1 to 64", o->procs), DT_EXIT_USAGE;
		j->procs_per_node = o->procs;
		j->gpus_per_node = 0;
	}
	if (o->launcher) {
		if (!strcmp(o->launcher, "mpi"))
			j->launcher = LAUNCHER_MPI;
		else if (!strcmp(o->launcher, "agent"))
			j->launcher = LAUNCHER_AGENT;
		else
			return error("--launcher '%s': expected agent or mpi", o->launcher),
				DT_EXIT_USAGE;
	}
	if (o->timeout) {
		if (parse_duration_ms(o->timeout, &ms) < 0)
			return error("--timeout '%s': expected a duration like 90s, 2h",
				     o->timeout), DT_EXIT_USAGE;
		j->timeout_ms = ms;
	}
	if (o->stall_after) {
		if (parse_duration_ms(o->stall_after, &ms) < 0)
			return error("--stall-after '%s': expected a duration like 10m",
				     o->stall_after), DT_EXIT_USAGE;
		j->stall_after_ms = ms;
	}
	if (o->line_buffered)
		j->line_buffered = 1;
	if (o->retries >= 0) {
		if (o->retries > 1000)
			return error("--retries %d: expected 0 to 1000", o->retries), DT_EXIT_USAGE;
		j->retries = o->retries;
	}
	if (o->include && *o->include &&
	    strspn(o->include, "0123456789") == strlen(o->include) &&
	    cluster_find_node(&the_cluster.config, o->include) < 0) {
		/* Slurm's --nodes is a count; ours names nodes */
		error("--nodes '%s': no node is called '%s'", o->include, o->include);
		fprintf(stderr, "hint: --nodes names the nodes to use (a host range, e.g. "
			"'node[1-2]'); for a number of nodes give -n %s (or Slurm's -N %s)\n",
			o->include, o->include);
		return DT_EXIT_USAGE;
	}
	if (o->include) {
		free(j->node_include);
		j->node_include = xstrdup(o->include);
	}
	if (o->exclude) {
		free(j->node_exclude);
		j->node_exclude = xstrdup(o->exclude);
	}
	if (o->workdir) {
		char *cwd = o->workdir[0] == '/' ? NULL : getcwd(NULL, 0);
		struct strbuf wd = STRBUF_INIT;

		/* the agents want an absolute path: -w is relative to where we are */
		if (cwd)
			strbuf_addf(&wd, "%s/", cwd);
		strbuf_addstr(&wd, o->workdir);
		free(j->workdir);
		j->workdir = strbuf_detach(&wd, NULL);
		free(cwd);
	}
	if (o->name) {
		free(j->name);
		j->name = xstrdup(o->name);
	}
	if (o->container) {
		if (container_ref_invalid(o->container))
			return error("--container '%s': expected %s", o->container,
				     container_ref_invalid(o->container)), DT_EXIT_USAGE;
		free(j->container);
		j->container = xstrdup(o->container);
	}
	for (size_t i = 0; i < o->env.nr; i++)
		if (set_kv(&j->env, o->env.v[i], "--env") < 0)
			return DT_EXIT_USAGE;
	for (size_t i = 0; i < o->labels.nr; i++)
		if (set_kv(&j->labels, o->labels.v[i], "--label") < 0)
			return DT_EXIT_USAGE;
	if (!j->name) {
		const char *prog = j->has_trainer ? "dttrain" : j->command.nr ? j->command.v[0] : "job";
		const char *slash = strrchr(prog, '/');

		j->name = xstrdup(slash ? slash + 1 : prog);
	}
	return 0;
}

/* ------------------------------------------------------------ dry run */

static const char *env_get(const json_t *env, const char *k)
{
	return json_string_value(json_object_get(env, k));
}

static void print_dry_run(const json_t *r)
{
	const json_t *plan = json_object_get(r, "plan"), *tasks = json_object_get(plan, "tasks");
	const json_t *pl = json_object_get(r, "placement"), *t0 = json_array_get(tasks, 0), *t, *p;
	const char *k;
	json_t *v;
	size_t i;
	int per = (int)json_get_int(plan, "per_node", 1);
	int gpu = json_is_string(json_object_get(t0, "cuda_visible_devices"));

	printf("dry run: nothing was started\n");
	printf("job:       %s, %lld %s x %d %s, world size %lld, launcher %s\n",
	       term_str(json_get_str(json_object_get(r, "spec"), "name", "?")),
	       json_get_int(plan, "nodes", 0), plural(json_get_int(plan, "nodes", 0), "node", "nodes"),
	       per, gpu ? plural(per, "GPU", "GPUs") : plural(per, "process", "processes"),
	       json_get_int(plan, "world_size", 0), term_str(json_get_str(plan, "launcher", "?")));
	if (!strcmp(json_get_str(r, "state", ""), DT_JOB_PENDING))
		printf("now:       it would wait: %s (placement below: on an idle cluster)\n",
		       term_str(json_get_str(r, "reason", "")));
	else
		printf("now:       it would start at once\n");
	printf("placement:\n");
	json_array_foreach(pl, i, p)
		printf("  ranks %zu-%zu  %-16s %-15s %s %s\n", i * (size_t)per,
		       i * (size_t)per + (size_t)per - 1, term_str(json_get_str(p, "node", "?")),
		       term_str(json_get_str(p, "address", "?")), gpu ? "GPUs" : "slots",
		       term_str(json_get_str(p, "slots", "?")));
	printf("hostfile (<job_dir>/hostfile):\n");
	{
		const char *hf = json_get_str(plan, "hostfile", "");

		struct strbuf safe = STRBUF_INIT;

		while (*hf) {
			size_t n = strcspn(hf, "\n");

			strbuf_reset(&safe);
			term_sanitize(&safe, hf, n, 0);
			printf("  %s\n", safe.buf);
			hf += n + (hf[n] == '\n');
		}
		strbuf_release(&safe);
	}
	/* environment common to every task, then what differs */
	printf("environment (every %s):\n", json_array_size(tasks) > 1 ? "rank" : "task");
	json_object_foreach(json_object_get(t0, "env"), k, v) {
		int same = 1;

		json_array_foreach(tasks, i, t) {
			const char *x = env_get(json_object_get(t, "env"), k);

			if (!x || strcmp(x, json_string_value(v)))
				same = 0;
		}
		if (same) {
			struct strbuf q = STRBUF_INIT;

			strbuf_add_shell_quoted(&q, json_string_value(v));
			printf("  %s=%s\n", term_str(k), !strcmp(k, "MASTER_PORT") ?
			       "<a free port on the master node, chosen at launch>" : term_str(q.buf));
			strbuf_release(&q);
		}
	}
	printf("command lines:\n");
	json_array_foreach(tasks, i, t) {
		struct strbuf line = STRBUF_INIT;
		size_t a;
		json_t *arg;
		long long node = json_get_int(t, "node", 0);

		json_object_foreach(json_object_get(t, "env"), k, v) {
			const char *x = env_get(json_object_get(t0, "env"), k);
			int same = 1;
			size_t m;
			json_t *u;

			json_array_foreach(tasks, m, u) {
				const char *y = env_get(json_object_get(u, "env"), k);

				if (!y || !x || strcmp(y, x))
					same = 0;
			}
			if (!same) {
				strbuf_addf(&line, "%s=", k);
				strbuf_add_shell_quoted(&line, json_string_value(v));
				strbuf_addch(&line, ' ');
			}
		}
		json_array_foreach(json_object_get(t, "argv"), a, arg) {
			strbuf_add_shell_quoted(&line, json_string_value(arg));
			strbuf_addch(&line, ' ');
		}
		strbuf_rtrim(&line);
		if (json_get_int(t, "rank", -1) >= 0)
			printf("  [%s rank %lld] %s\n", term_str(json_get_str(json_array_get(pl,
				(size_t)node), "node", "?")), json_get_int(t, "rank", 0),
				term_str(line.buf));
		else
			printf("  [%s mpirun] %s\n", term_str(json_get_str(json_array_get(pl,
				(size_t)node), "node", "?")), term_str(line.buf));
		printf("      log: %s\n", term_str(json_get_str(t, "log", "?")));
		strbuf_release(&line);
	}
}

/* ------------------------------------------------------------- attached */

struct follow {
	const char *id;
	char *job_dir;
	struct logset ls;
	struct strvec nodes_by_rank;
	int attempt;
	int color;
};

static void load_rank_nodes(struct follow *f)
{
	struct strbuf path = STRBUF_INIT, buf = STRBUF_INIT;
	json_t *j, *r;
	size_t i;

	strvec_clear(&f->nodes_by_rank);
	strbuf_addf(&path, "%s/placement.json", f->job_dir);
	if (sf_read_path(path.buf, &buf, 16 << 20, NULL) >= 0) {
		j = json_parse(buf.buf, buf.len, NULL);
		json_array_foreach(json_object_get(j, "ranks"), i, r) {
			long long rank = json_get_int(r, "rank", -1);

			if (rank < 0 || rank > 1000000)
				continue;
			while (f->nodes_by_rank.nr <= (size_t)rank)
				strvec_push(&f->nodes_by_rank, "?");
			free((char *)f->nodes_by_rank.v[rank]);
			f->nodes_by_rank.v[rank] = xstrdup(json_get_str(r, "node", "?"));
		}
		json_decref(j);
	}
	strbuf_release(&path);
	strbuf_release(&buf);
}

static void scan_logs(struct follow *f)
{
	struct strbuf dir = STRBUF_INIT, path = STRBUF_INIT;
	DIR *d;
	struct dirent *de;

	strbuf_addf(&dir, "%s/logs", f->job_dir);
	d = opendir(dir.buf);
	while (d && (de = readdir(d))) {
		char *end;
		long rank = strtol(de->d_name, &end, 10);
		int known = 0;

		if (end == de->d_name || strcmp(end, ".log") || rank < 0 || rank > 1000000)
			continue;
		for (size_t i = 0; i < f->ls.nr_src; i++)
			if (f->ls.src[i].rank == rank)
				known = 1;
		if (known)
			continue;
		if ((size_t)rank >= f->nodes_by_rank.nr)
			load_rank_nodes(f);
		strbuf_reset(&path);
		strbuf_addf(&path, "%s/%s", dir.buf, de->d_name);
		logset_add(&f->ls, path.buf, (int)rank,
			   (size_t)rank < f->nodes_by_rank.nr ? f->nodes_by_rank.v[rank] : "?");
	}
	if (d)
		closedir(d);
	strbuf_release(&dir);
	strbuf_release(&path);
}

static void show_lines(struct follow *f, int final)
{
	static const char *colors[] = { "\033[36m", "\033[33m", "\033[35m", "\033[32m",
					"\033[34m", "\033[91m" };
	const struct logline *l;
	struct strbuf src = STRBUF_INIT;

	scan_logs(f);
	logset_begin(&f->ls, LOGSET_ALL | (final ? LOGSET_FINAL : 0));
	while ((l = logset_next(&f->ls))) {
		/* the node and attempt that wrote the line (its log's marker), as dtctl logs */
		strbuf_reset(&src);
		logline_source(&src, l->node, l->rank, l->attempt);
		if (f->color)
			printf("%s[%s]\033[0m %s%s%s\n", colors[l->rank % 6], term_str(src.buf),
			       l->stream == 'E' ? "\033[31m" : "", l->text,
			       l->stream == 'E' ? "\033[0m" : "");
		else
			printf("[%s] %s\n", term_str(src.buf), l->text);
	}
	logset_end(&f->ls);   /* a read error is named on stderr; the follow goes on */
	strbuf_release(&src);
	fflush(stdout);
}

static int get_job(const char *id, json_t **job)
{
	json_t *reply = NULL;
	int code;

	code = head_api_id("GET", DT_PATH_JOB_PREFIX, id, "", NULL, &reply, NULL);
	*job = NULL;
	if (!code)
		*job = json_incref(json_object_get(reply, "job"));
	json_decref(reply);
	return code;
}

/*
 * Long-poll: the job once its version differs from *version (or after
 * timeout_ms).  0 with *job set, DT_EXIT_UNREACH, or -1 when this dtsched has
 * no /wait (the caller polls GET instead).  hc is kept open between calls.
 */
static int wait_job(struct dt_httpc *hc, const char *id, long long *version, long timeout_ms,
		    json_t **job)
{
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;
	json_t *body, *reply = NULL;
	int st, code = 0;

	*job = NULL;
	strbuf_addf(&path, "%s%s%s", DT_PATH_JOB_PREFIX, id, DT_PATH_WAIT_SUFFIX);
	body = json_pack("{s:I,s:I}", "since_version", (json_int_t)*version,
			 "timeout_ms", (json_int_t)timeout_ms);
	hc->timeout_ms = timeout_ms + 10000;
	st = dt_httpc_request(hc, "POST", path.buf, body, &reply, &err);
	if (st == 200 && json_is_object(json_object_get(reply, "job"))) {
		*job = json_incref(json_object_get(reply, "job"));
		*version = json_get_int(*job, "version", -1);
	} else if (st < 0 || st == 401) {
		code = DT_EXIT_UNREACH;
	} else {
		code = -1;
	}
	json_decref(body);
	json_decref(reply);
	strbuf_release(&path);
	strbuf_release(&err);
	return code;
}

static int cancel_job(const char *id)
{
	json_t *reply = NULL;
	int code;

	code = head_api_id("POST", DT_PATH_JOB_PREFIX, id, DT_PATH_CANCEL_SUFFIX, NULL, &reply, NULL);
	json_decref(reply);
	return code;
}

static struct termios saved_tty;
static int tty_changed;

static void tty_restore(void)
{
	if (tty_changed && tcsetattr(0, TCSADRAIN, &saved_tty) == 0)
		tty_changed = 0;
}

/*
 * The prompt takes one key without Enter or echo (cbreak).  ISIG stays on so
 * that a second Ctrl-C still raises SIGINT.  Restored when answered, when
 * follow_job() returns however it ends, and at exit (die() paths).
 */
static void tty_single_key(void)
{
	static int registered;
	struct termios t;

	if (tty_changed || tcgetattr(0, &saved_tty) < 0)
		return;
	t = saved_tty;
	t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	t.c_cc[VMIN] = 1;
	t.c_cc[VTIME] = 0;
	if (!registered) {
		atexit(tty_restore);
		registered = 1;
	}
	if (tcsetattr(0, TCSADRAIN, &t) == 0)
		tty_changed = 1;
}

/* On a terminal: 'c' cancels, 'd' detaches; 0 = no answer yet. */
static int ask_cancel_or_detach(const char *id, int *asked)
{
	char buf[64];
	struct pollfd p = { 0, POLLIN, 0 };
	ssize_t n;

	if (!*asked) {
		tty_single_key();
		fprintf(stderr, "\ndtctl: cancel job %s (c) or detach and leave it running (d)? "
			"[c/d] (Ctrl-C again cancels) ", term_str(id));
		fflush(stderr);
		*asked = 1;
	}
	if (poll(&p, 1, 0) <= 0)
		return 0;
	n = read(0, buf, sizeof(buf) - 1);
	if (n <= 0)
		return 'c';
	buf[n] = '\0';
	for (char *c = buf; *c; c++) {
		int a = *c == 'c' || *c == 'C' || *c == 'y' || *c == 'Y' ? 'c' :
			*c == 'd' || *c == 'D' || *c == 'n' || *c == 'N' ? 'd' : 0;

		if (a) {
			tty_restore();
			fprintf(stderr, "%c\n", a);   /* the key, unechoed in cbreak mode */
			return a;
		}
	}
	fprintf(stderr, "dtctl: answer c (cancel) or d (detach) ");
	return 0;
}

static void state_note(const json_t *job, const char *last_state, const char *last_reason)
{
	const char *st = json_get_str(job, "state", "?"), *reason = json_get_str(job, "reason", NULL);
	json_t *pl = json_object_get(job, "placement"), *p;
	size_t i;

	if (!strcmp(st, DT_JOB_RUNNING)) {
		struct strbuf nodes = STRBUF_INIT;
		long long ws = json_get_int(job, "world_size", 0);

		json_array_foreach(pl, i, p)
			strbuf_addf(&nodes, "%s%s", i ? "," : "", term_str(json_get_str(p, "node", "?")));
		fprintf(stderr, "dtctl: %s RUNNING on %s (%lld %s%s)\n",
			term_str(json_get_str(job, "id", "?")), nodes.buf, ws, plural(ws, "rank", "ranks"),
			json_get_int(job, "attempt", 0) ? ", retry" : "");
		strbuf_release(&nodes);
	} else if (!strcmp(st, DT_JOB_PENDING)) {
		if (last_state && !strcmp(last_state, st) && last_reason && reason &&
		    !strcmp(last_reason, reason))
			return;
		fprintf(stderr, "dtctl: %s PENDING: %s\n", term_str(json_get_str(job, "id", "?")),
			term_str(reason ? reason : "queued"));
	}
}

/*
 * A new attempt: "retry 1 of 1 on n2 after: rank 0 exited 3", the reason
 * being that of the attempt that failed (the job's history), whether or not
 * the PENDING in between was seen.
 */
static void retry_note(const json_t *job)
{
	json_t *h = json_object_get(job, "history"), *e, *p;
	const char *why = NULL;
	struct strbuf on = STRBUF_INIT;
	size_t i;

	json_array_foreach(h, i, e)
		if (!strcmp(json_get_str(e, "state", ""), DT_JOB_FAILED) ||
		    !strcmp(json_get_str(e, "state", ""), DT_JOB_NODE_FAIL))
			why = json_get_str(e, "reason", json_get_str(e, "state", NULL));
	if (!strcmp(json_get_str(job, "state", ""), DT_JOB_RUNNING))
		json_array_foreach(json_object_get(job, "placement"), i, p)
			strbuf_addf(&on, "%s%s", i ? "," : " on ", json_get_str(p, "node", "?"));
	fprintf(stderr, "dtctl: %s retry %lld of %lld%s after: %s\n",
		term_str(json_get_str(job, "id", "?")), json_get_int(job, "attempt", 0),
		json_get_int(job, "retries", 0), term_str(on.buf), term_str(why ? why : "a failure"));
	strbuf_release(&on);
}

static int final_code(const json_t *job)
{
	const char *st = json_get_str(job, "state", "?");
	json_t *c = json_object_get(job, "exit_code");

	if (!strcmp(st, DT_JOB_COMPLETED))
		return 0;
	if (!strcmp(st, DT_JOB_FAILED) && json_is_integer(c) && json_integer_value(c) > 0 &&
	    json_integer_value(c) < 256)
		return (int)json_integer_value(c);
	return DT_EXIT_FAIL;
}

static void final_note(const json_t *job)
{
	const char *st = term_str(json_get_str(job, "state", "?"));
	const char *reason = term_str(json_get_str(job, "reason", NULL));
	const char *id = term_str(json_get_str(job, "id", "?"));
	struct strbuf el = STRBUF_INIT;
	json_t *c = json_object_get(job, "exit_code");

	format_duration_human(&el, json_get_int(job, "elapsed_ms", 0));
	if (!strcmp(st, DT_JOB_COMPLETED))
		fprintf(stderr, "dtctl: job %s COMPLETED in %s\n", id, el.buf);
	else if (json_is_integer(c) && json_integer_value(c))
		fprintf(stderr, "dtctl: job %s %s after %s: %s (exit code %lld)\n",
			id, st, el.buf, reason ? reason : "", (long long)json_integer_value(c));
	else
		fprintf(stderr, "dtctl: job %s %s after %s%s%s\n", id, st,
			el.buf, reason ? ": " : "", reason ? reason : "");
	{
		/* e.g. output lost to a full shared disk: never silent */
		size_t i;
		json_t *w;

		json_array_foreach(json_object_get(job, "warnings"), i, w)
			fprintf(stderr, "dtctl: warning: job %s: %s\n", json_get_str(job, "id", "?"),
				json_string_value(w));
	}
	strbuf_release(&el);
}

static int follow_job(json_t *job)
{
	struct follow f;
	struct sigaction sa;
	char *last_state = NULL, *last_reason = NULL;
	long long last_state_poll = 0, unreachable_since = 0, stall_seen = 0, version = -1;
	int asked = 0, cancelled = 0, ret = DT_EXIT_FAIL, tty = isatty(0);
	int long_poll = 0;            /* dtsched answers POST /v1/jobs/<id>/wait */
	struct dt_httpc hc;
	json_t *cur = json_incref(job);

	memset(&f, 0, sizeof(f));
	f.id = json_get_str(job, "id", "?");
	f.job_dir = xstrdup(json_get_str(job, "job_dir", "."));
	f.color = dt_want_color(1);
	strvec_init(&f.nodes_by_rank);
	logset_init(&f.ls);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigint;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/*
	 * The state comes by long-poll on one kept-alive connection: the request
	 * returns the moment the job changes, or after POLL_MS, so logs are still
	 * read every POLL_MS and an exit is seen at once instead of at the next poll.
	 */
	memset(&hc, 0, sizeof(hc));
	if (!head_connect(&hc))
		long_poll = 1;

	for (;;) {
		long long now = dt_mono_ms();
		const char *st;
		int waited = 0;           /* this turn's long-poll took the place of the sleep */

		int prompting = 0;        /* the question waits: no log line may scroll it away */

		if (interrupts && !cancelled) {
			int answer = interrupts > 1 || !tty ? 'c' : ask_cancel_or_detach(f.id, &asked);

			if (answer)
				tty_restore();    /* also after a second Ctrl-C */
			prompting = !answer;

			if (answer == 'd') {
				fprintf(stderr, "dtctl: detached; job %s keeps running. Follow it with: "
					"dtctl logs -f %s\n", term_str(f.id), term_str(f.id));
				ret = 0;
				break;
			}
			if (answer == 'c') {
				fprintf(stderr, "\ndtctl: cancelling job %s\n", term_str(f.id));
				if (cancel_job(f.id) == 0)
					cancelled = 1;
				else
					cancelled = 2;
			}
		}
		if (!prompting)
			show_lines(&f, 0);
		if (long_poll || now - last_state_poll >= 2 * POLL_MS || cancelled == 1) {
			json_t *j = NULL;
			int code = -1;

			last_state_poll = now;
			if (long_poll && cancelled != 1) {
				code = wait_job(&hc, f.id, &version, POLL_MS, &j);
				waited = code == 0;
				if (code < 0)
					long_poll = 0;   /* an older dtsched: poll */
			}
			if (code < 0)
				code = get_job(f.id, &j);
			if (code == 0 && j) {
				json_decref(cur);
				cur = j;
				unreachable_since = 0;
			} else if (code == DT_EXIT_UNREACH) {
				/* dtsched away: the state file on the shared dir still tells the end */
				struct strbuf s2 = STRBUF_INIT;

				if (!unreachable_since)
					unreachable_since = now;
				if (jobdir_read_state(f.job_dir, &s2) == 0 && job_state_is_final(s2.buf)) {
					json_object_set_new(cur, "state", json_string(s2.buf));
				} else if (now - unreachable_since > 60000) {
					strbuf_release(&s2);
					ret = DT_EXIT_UNREACH;
					break;
				}
				strbuf_release(&s2);
			}
			st = json_get_str(cur, "state", "?");
			if (json_get_int(cur, "attempt", 0) != f.attempt) {
				f.attempt = (int)json_get_int(cur, "attempt", 0);
				load_rank_nodes(&f);
				retry_note(cur);
			}
			if (!last_state || strcmp(last_state, st) ||
			    strcmp(last_reason ? last_reason : "", json_get_str(cur, "reason", ""))) {
				if (!strcmp(st, DT_JOB_RUNNING))
					load_rank_nodes(&f);
				if (!last_state || strcmp(last_state, st) || !strcmp(st, DT_JOB_PENDING))
					state_note(cur, last_state, last_reason);
				free(last_state);
				free(last_reason);
				last_state = xstrdup(st);
				last_reason = xstrdup(json_get_str(cur, "reason", ""));
			}
			if (json_array_size(json_object_get(cur, "stalled")) && !stall_seen) {
				json_t *s0 = json_array_get(json_object_get(cur, "stalled"), 0);

				stall_seen = 1;
				fprintf(stderr, "dtctl: %s STALLED: rank %lld on %s (pid %lld) has written "
					"nothing for %lld s\n", term_str(f.id), json_get_int(s0, "rank", -1),
					term_str(json_get_str(s0, "node", "?")), json_get_int(s0, "pid", 0),
					json_get_int(s0, "idle_ms", 0) / 1000);
			} else if (!json_array_size(json_object_get(cur, "stalled"))) {
				stall_seen = 0;
			}
			if (job_state_is_final(st)) {
				/* the logs' end markers first (logmerge.h): on an NFS client
				 * the files' last lines may show a moment late */
				long long until = dt_mono_ms() + LOG_SETTLE_MS;
				size_t u;

				show_lines(&f, 0);
				while (logset_unsettled(&f.ls, NULL) && dt_mono_ms() < until &&
				       !interrupts) {
					usleep(POLL_MS * 1000);
					show_lines(&f, 0);
				}
				show_lines(&f, 1);
				if (logset_unsettled(&f.ls, &u))
					warning("the log of rank %d (node %s) has no end mark from its "
						"writer %d s after the job ended: its last lines may be "
						"missing here (dtctl logs %s)", f.ls.src[u].rank,
						f.ls.src[u].node, LOG_SETTLE_MS / 1000, f.id);
				final_note(cur);
				ret = cancelled ? DT_EXIT_INTR : final_code(cur);
				break;
			}
		}
		if (!waited)
			usleep(POLL_MS * 1000);
	}
	tty_restore();
	if (hc.host)
		dt_httpc_release(&hc);
	json_decref(cur);
	free(last_state);
	free(last_reason);
	free(f.job_dir);
	strvec_clear(&f.nodes_by_rank);
	logset_release(&f.ls);
	return ret;
}

int cmd_run(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl run [<job.yaml>] [options] [-- <program> [<args>...]]",
		"",
		"Run one distributed job and stream its logs; exits with the job's exit code.",
		"   dtctl run job.yaml",
		"   dtctl run -n 2 -g 8 -- python train.py --lr 3e-4",
		"   dtctl run -n 2 -p 2 --trainer -- --model=mlp --epochs=1",
		NULL,
	};
	struct run_opts o;
	struct option opts[] = {
		OPT_GROUP("size"),
		OPT_INT('n', "num-nodes", &o.nodes, "number of nodes (job.yaml nodes:)"),
		OPT_INT_ALIAS('N', "num-nodes", &o.nodes, "the same, as Slurm spells it (-N 2)"),
		OPT_INT('g', "gpus-per-node", &o.gpus, "GPUs per node, one rank each"),
		OPT_INT('p', "procs-per-node", &o.procs, "CPU processes per node (no GPUs)"),
		OPT_GROUP("what runs"),
		OPT_BOOL(0, "trainer", &o.trainer, "the words after -- are dttrain flags"),
		OPT_STRING(0, "launcher", &o.launcher, "agent|mpi", "how ranks start"),
		OPT_STRVEC('e', "env", &o.env, "NAME=VALUE", "environment for every rank (repeat)"),
		OPT_STRING('w', "workdir", &o.workdir, "dir", "working directory of the ranks"),
		OPT_BOOL(0, "shell", &o.shell, "run the command through /bin/sh -c"),
		OPT_BOOL(0, "line-buffered", &o.line_buffered,
			 "C stdio of the ranks flushed at each newline (job.yaml line_buffered:)"),
		OPT_STRING(0, "name", &o.name, "name", "job name (default: the program)"),
		OPT_STRING('C', "container", &o.container, "image",
			   "run the ranks in this image: a file on the shared dir, an imported "
			   "image's name or the engine's (docs/containers.md)"),
		OPT_GROUP("where"),
		OPT_STRING(0, "nodes", &o.include, "spec", "only these nodes (host range)"),
		OPT_STRING(0, "exclude", &o.exclude, "spec", "never these nodes"),
		OPT_STRVEC('l', "label", &o.labels, "KEY=VALUE", "only nodes with this label (repeat)"),
		OPT_GROUP("lifecycle"),
		OPT_STRING(0, "timeout", &o.timeout, "duration", "end the job as TIMEOUT after this"),
		OPT_INT(0, "retries", &o.retries, "requeue a FAILED/NODE_FAIL job this often"),
		OPT_STRING(0, "stall-after", &o.stall_after, "duration",
			   "flag ranks silent (no output, no metric) this long"),
		OPT_GROUP("mode"),
		OPT_BOOL(0, "dry-run", &o.dry_run, "print placement, hostfile, env and commands; start nothing"),
		OPT_BOOL('d', "detach", &o.detach, "print the job id and return"),
		OPT_BOOL(0, "in-allocation", &slurm_in_allocation_opt,
			 "inside a Slurm allocation: head + agents on its nodes (default with $SLURM_JOB_ID)"),
		OPT_BOOL(0, "json", &o.json, "machine output (with --dry-run or --detach)"),
		OPT_END(),
	};
	struct job_config job;
	const char *file = NULL;
	const char **cmd = NULL;
	char *submit_dir;
	int nr_cmd = 0, code, nargs, status;
	json_t *req, *reply = NULL;

	memset(&o, 0, sizeof(o));
	o.nodes = o.gpus = o.procs = o.retries = -1;
	strvec_init(&o.env);
	strvec_init(&o.labels);
	nargs = parse_options(argc - 1, argv + 1, opts, usage, PARSE_OPT_KEEP_DASHDASH);
	argv++;
	for (int i = 0; i < nargs; i++) {
		if (!strcmp(argv[i], "--")) {
			cmd = argv + i + 1;
			nr_cmd = nargs - i - 1;
			nargs = i;
			break;
		}
	}
	if (nargs > 1) {
		error("one job file at most; put the program after '--' (dtctl run -- prog args)");
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (nargs == 1)
		file = argv[0];
	if ((o.detach || o.json) && o.dry_run && o.detach)
		return error("--dry-run and --detach cannot be used together"), DT_EXIT_USAGE;
	if (o.detach && slurm_session_active())
		return error("--detach inside a Slurm allocation: the head there lives only as long "
			     "as this dtctl (docs/slurm.md)"), DT_EXIT_USAGE;
	job_config_init(&job);
	if ((code = build_job(&job, &o, file, cmd, nr_cmd)) ||
	    (code = image_resolve(&job, the_cluster.shared_dir)))
		goto out;
	/*
	 * dtsched has no shared dir of its own (it never reads cluster.yaml): each job
	 * brings its cluster's (the_cluster, cli/setup.h), and the reply names the job's
	 * directory in it ("job_dir"), where the logs are followed from.
	 */
	submit_dir = getcwd(NULL, 0);   /* the ranks start here where it exists on their node */
	/* no "user": dtsched takes the owner from the request's proof (scheduler/users.h),
	 * and looking the name up (NSS) was ~0.1 ms of each submit's ~1.3 ms of CPU */
	/* "reply": "id": --detach prints the id alone, and parsing the whole job that
	 * dtsched would send back was a third of the client's own work per submit */
	req = json_pack("{s:o,s:s,s:b,s:s?,s:s?}", "job", job_config_to_json(&job), "shared_dir",
			the_cluster.shared_dir, "dry_run", o.dry_run, "submit_dir", submit_dir,
			"reply", o.detach && !o.json && !o.dry_run ? "id" : NULL);
	free(submit_dir);
	code = head_api("POST", DT_PATH_JOBS, req, &reply, &status);
	json_decref(req);
	if (code) {
		if (status == 422)
			fprintf(stderr, "hint: nothing was queued; see 'dtctl nodes' for what the "
				"cluster has\n");
		goto out;
	}
	if (o.dry_run) {
		if (o.json)
			json_doc_print(reply);
		else
			print_dry_run(reply);
		goto out;
	}
	{
		json_t *j = json_object_get(reply, "job");
		const char *id = json_get_str(j, "id", "?");

		if (o.detach) {
			if (o.json)
				json_doc_print(reply);
			else
				printf("%s\n", term_str(id));
			goto out;
		}
		fprintf(stderr, "dtctl: job %s submitted (%s); logs: %s/logs\n", term_str(id),
			term_str(json_get_str(j, "name", "?")), term_str(json_get_str(j, "job_dir", "?")));
		code = follow_job(j);
	}
out:
	json_decref(reply);
	job_config_release(&job);
	strvec_clear(&o.env);
	strvec_clear(&o.labels);
	return code;
}
