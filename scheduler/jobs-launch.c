/*
 * jobs-launch.c - starting a placed job: a free MASTER_PORT from the master
 * node, the launch plan (launch.c), the job dir files, and the tasks started
 * on the agents, on a launch thread of its own; the kept-alive HTTP clients to
 * the agents.  See jobs.c for the lifecycle around it.
 */
#include "jobs-int.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "safefile.h"
#include "usage.h"
#include "users.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

void clients_release(struct jobs_clients *c)
{
	for (size_t i = 0; i < c->nr; i++) {
		dt_httpc_release(&c->v[i]->c);
		free(c->v[i]);
	}
	free(c->v);
	c->v = NULL;
	c->nr = c->alloc = 0;
}

/*
 * DT_RESUME: the checkpoint dttrain's "latest" names, else the newest regular
 * file.  ckpt/ is the job's own: a link, FIFO or directory there is skipped.
 * Called without s->lock (do_launch: a huge ckpt/ or a slow mount the job
 * controls stalls only its own launch), and bounded: at most max_entries
 * entries read and max_ms spent, then the newest of those read (a warning
 * names ckpt/latest as the way out).  *nread (may be NULL): entries read.
 */
char *job_latest_checkpoint(const struct job *j, size_t max_entries, long long max_ms,
			    size_t *nread)
{
	long long deadline = dt_mono_ms() + max_ms;
	size_t n = 0;
	struct strbuf rel = STRBUF_INIT, buf = STRBUF_INIT, why = STRBUF_INIT;
	char *best = NULL;
	long long best_ns = -1;
	struct stat st;
	DIR *d;
	struct dirent *de;

	job_rel(j, "ckpt", &rel);
	d = sf_opendir(j->shared_dir, rel.buf, &why);
	if (!d) {
		if (errno != ENOENT)
			dtlog(DTLOG_WARN, "job %s: no checkpoint to resume from: %s", j->id, why.buf);
		goto out;
	}
	if (sf_read_at(dirfd(d), "latest", &buf, 4096, &why) > 0) {
		strbuf_trim(&buf);
		if (buf.len && !strchr(buf.buf, '/') && sf_stat_at(dirfd(d), buf.buf, &st) == 0 &&
		    S_ISREG(st.st_mode))
			best = xstrdup(buf.buf);
	} else if (errno != ENOENT) {
		dtlog(DTLOG_WARN, "job %s: ignoring ckpt/latest: %s", j->id, why.buf);
	}
	while (!best && (de = readdir(d))) {
		long long ns;

		if (++n > max_entries || ((n & 255) == 0 && dt_mono_ms() > deadline)) {
			dtlog(DTLOG_WARN, "job %s: ckpt/ has more than %zu entries or took more than "
			      "%lld ms to read: resuming from the newest of the %zu read (name the "
			      "checkpoint in ckpt/latest)", j->id, max_entries, max_ms, n - 1);
			n--;
			break;
		}
		if (de->d_name[0] == '.' || ends_with(de->d_name, ".tmp") ||
		    !strcmp(de->d_name, "latest") || sf_stat_at(dirfd(d), de->d_name, &st) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
		if (ns > best_ns) {
			best_ns = ns;
			strbuf_reset(&buf);
			strbuf_addstr(&buf, de->d_name);
		}
	}
	if (!best && best_ns >= 0)
		best = xstrdup(buf.buf);
	closedir(d);
	if (best) {
		char *name = best;

		strbuf_reset(&buf);
		strbuf_addf(&buf, "%s/ckpt/%s", j->job_dir, name);
		free(name);
		best = strbuf_detach(&buf, NULL);
	}
out:
	if (nread)
		*nread = n;
	strbuf_release(&rel);
	strbuf_release(&buf);
	strbuf_release(&why);
	return best;
}

/* A kept-alive client per agent, from cache c (one cache per thread). */
struct dt_httpc *client_for(struct sched *s, struct jobs_clients *c, const char *addr,
			    int port)
{
	char key[300];
	struct cli *x;

	snprintf(key, sizeof(key), "%s:%d", addr, port);
	for (size_t i = 0; i < c->nr; i++)
		if (!strcmp(c->v[i]->key, key))
			return &c->v[i]->c;
	ALLOC_GROW(c->v, c->nr + 1, c->alloc);
	x = xcalloc(1, sizeof(*x));
	c->v[c->nr++] = x;
	snprintf(x->key, sizeof(x->key), "%s", key);
	dt_httpc_init(&x->c, addr, port, &s->key);
	x->c.peer_port_name = "the agent port";
	x->c.timeout_ms = 5000;
	x->c.connect_timeout_ms = 2000;
	return &x->c;
}

/*
 * What the plan of j takes from the cluster and the job besides its
 * placement; the master node's ssh_config and bin_dir for the mpi launcher.
 * Lock held; lo points into s->cc, the master node and j, so it is used
 * before the lock is let go.
 */
static void launch_opts_from(struct sched *s, const struct job *j, const struct node *master,
			     struct launch_opts *lo)
{
	memset(lo, 0, sizeof(*lo));
	lo->job_id = j->id;
	lo->job_dir = j->job_dir;
	lo->submit_dir = j->submit_dir;
	lo->attempt = j->attempt;
	lo->max_restarts = j->cfg.retries;
	lo->grace_ms = STOP_GRACE_MS;
	lo->log_root = j->shared_dir;
	if (s->cc) {
		const struct fs_class *k = j->cfg.job_class ?
			fairshare_class(&s->cc->fairshare, j->cfg.job_class) : NULL;

		lo->setup_env = &s->cc->setup.env;
		lo->net_interface = s->cc->network.interface;
		if (k && k->preemptible)
			lo->preempt_signal = sigabbrev_np(k->signal);
		else if (s->cc->fairshare.preempt_over_share)   /* every job may be preempted */
			lo->preempt_signal = sigabbrev_np(k ? k->signal : SIGUSR1);
	}
	if (j->cfg.launcher == LAUNCHER_MPI && master) {
		lo->ssh_config = master->ssh_config;
		lo->bin_dir = master->bin_dir;
		lo->orted_ssh = s->cc && s->cc->mpi.orted_ssh;
	}
}

/* the interface and subnet node n's agent reaches dtsched on (its inventory's
 * "net", lib/netif.h) into ln, for the job's NCCL/gloo/Open MPI settings;
 * pointers into n's inventory: lock held while they are used */
static void node_net(const struct node *n, struct launch_node *ln)
{
	const json_t *net = n ? json_object_get(n->inventory, "net") : NULL;

	ln->interface = json_get_str(net, "interface", NULL);
	ln->cidr = json_get_str(net, "cidr", NULL);
}

int job_plan(struct sched *s, const struct job *j, const struct jslot *place, int nr,
	     int master_port, const char *resume, struct launch_plan *plan, struct strbuf *err)
{
	struct launch_node *ln = xcalloc((size_t)nr, sizeof(*ln));
	char **slots = xcalloc((size_t)nr, sizeof(*slots));
	struct launch_opts lo;
	int ret;

	for (int k = 0; k < nr; k++) {
		struct strbuf sl = STRBUF_INIT;
		struct node *n = node_find(s, place[k].node);

		jslot_format(&sl, &place[k]);
		slots[k] = strbuf_detach(&sl, NULL);
		ln[k].name = place[k].node;
		ln[k].address = place[k].address;
		ln[k].host = place[k].address;
		ln[k].slots = j->gpu ? slots[k] : NULL;
		ln[k].agent_port = n ? n->port : 0;
		node_net(n, &ln[k]);
	}
	launch_opts_from(s, j, nr ? node_find(s, place[0].node) : NULL, &lo);
	lo.master_port = master_port;
	lo.resume = resume;
	ret = 0;
	if (s->cc && s->cc->team) {
		/* team mode (docs/team.md): every task as the job's user, files theirs alone */
		/* (mpi: the orted through the agents with the job's capability, agent.c) */
		if (user_ids(j->user, &lo.run_uid, &lo.run_gid) < 0 || lo.run_uid <= 0) {
			strbuf_addf(err, "user '%s' has no account on the head other than root: team "
				    "mode runs each job as its user", j->user);
			ret = -1;
		}
		lo.run_as = j->user;
		lo.umask = j->cfg.share_group ? 027 : 077;
	}
	if (!ret)
		ret = launch_plan_build(plan, &j->cfg, ln, nr, &lo, err);
	for (int k = 0; k < nr; k++)
		free(slots[k]);
	free(slots);
	free(ln);
	return ret;
}

/*
 * Task t of j's attempt on hold h was not started on node `node`: the job
 * fails with why (the first such failure is what the user sees; the tasks that
 * did start are stopped when the attempt ends, as after any failed rank), and
 * t is gone.  Lock NOT held.
 */
static void task_not_started(struct sched *s, struct job *j, struct hold *h,
			     const struct launch_task *t, const char *node, const char *why)
{
	pthread_mutex_lock(&s->lock);
	if (!j->launch_error && j->hold == h) {
		struct strbuf sb = STRBUF_INIT;

		if (t->rank >= 0)
			strbuf_addf(&sb, "cannot start rank %d on node '%s': %s", t->rank, node, why);
		else
			strbuf_addf(&sb, "cannot start mpirun on node '%s': %s", node, why);
		j->launch_error = strbuf_detach(&sb, NULL);
	}
	for (size_t k = 0; k < h->nr_tasks; k++)
		if (!strcmp(h->tasks[k].id, t->id))
			h->tasks[k].gone = 1;
	pthread_mutex_unlock(&s->lock);
}

/* one node's part of step 4 of do_launch(), on a thread of its own */
struct node_start {
	struct sched *s;
	struct job *j;
	struct hold *h;
	const struct launch_plan *plan;
	int k;
	json_t *const *bodies;     /* launch_task_request() of every task, by index */
	struct dt_httpc *c;        /* the client of node k's agent, this thread's alone */
};

/*
 * Start the tasks of plan node x->k in one POST /v1/tasks {"tasks": [...]};
 * each that the agent did not start goes through task_not_started().  Lock
 * NOT held.
 */
static void *start_node_tasks(void *arg)
{
	const struct node_start *x = arg;
	struct sched *s = x->s;
	const struct launch_plan *plan = x->plan;
	int k = x->k;
	json_t *const *bodies = x->bodies;
	const struct launch_place *n = &plan->place[k];
	struct strbuf err = STRBUF_INIT, why = STRBUF_INIT;
	json_t *batch = json_array(), *body, *reply = NULL, *res;
	size_t *idx = xcalloc(plan->nr_tasks, sizeof(*idx)), nr = 0;
	int code;

	for (size_t i = 0; i < plan->nr_tasks; i++)
		if (plan->tasks[i].node == k) {
			json_array_append(batch, bodies[i]);
			idx[nr++] = i;
		}
	body = json_pack("{s:o}", "tasks", batch);
	if (nr)
		code = dt_httpc_request(x->c, "POST", DT_PATH_TASKS, body, &reply, &err);
	else
		code = 200;
	res = code == 200 ? json_object_get(reply, "tasks") : NULL;
	if (code == 200 && json_array_size(res) != nr)
		strbuf_addf(&why, "its agent answered %zu result(s) for %zu task(s)",
			    json_array_size(res), nr);
	else if (code != 200)
		strbuf_addstr(&why, code < 0 ? err.buf : dt_httpc_reply_error(reply, code));
	for (size_t c = 0; c < nr; c++) {
		const json_t *r = why.len ? NULL : json_array_get(res, c);
		long long st = json_get_int(r, "status", 0);

		if (st != 201)
			task_not_started(s, x->j, x->h, &plan->tasks[idx[c]], n->name,
					 r ? dt_httpc_reply_error(r, (int)st) : why.buf);
	}
	json_decref(body);
	json_decref(reply);
	free(idx);
	strbuf_release(&err);
	strbuf_release(&why);
	return NULL;
}

/*
 * Step 4 of do_launch(): every node's tasks at once, one thread and one
 * request per node (a slow or dead agent delays only its own node); the
 * first node's on this thread, and any whose thread cannot be had too.
 */
static void start_all_nodes(struct sched *s, struct job *j, struct hold *h,
			    const struct launch_plan *plan, json_t *const *bodies,
			    struct jobs_clients *cc)
{
	int nr = plan->nr_nodes;
	struct node_start *x = xcalloc((size_t)nr, sizeof(*x));
	pthread_t *th = xcalloc((size_t)nr, sizeof(*th));
	char *running = xcalloc((size_t)nr, 1);

	for (int k = 0; k < nr; k++) {
		/* the clients first: cc is this thread's, never touched by the others */
		struct node_start one = { s, j, h, plan, k, bodies,
					  client_for(s, cc, plan->place[k].address,
						     plan->place[k].agent_port) };

		x[k] = one;
	}
	/* running[k]: 1 on a thread, 2 after the threads (its agent's client is
	 * an earlier node's: one agent twice, served in turn), 3 nothing to do,
	 * 0 here and now */
	for (int k = 1; k < nr; k++) {
		int has_tasks = 0;

		for (size_t i = 0; i < plan->nr_tasks; i++)
			has_tasks |= plan->tasks[i].node == k;
		if (!has_tasks)
			running[k] = 3;   /* nothing to start there (mpi: mpirun is on node 0) */
		for (int m = 0; m < k; m++)
			if (x[m].c == x[k].c)
				running[k] = 2;
		if (!running[k] && !pthread_create(&th[k], NULL, start_node_tasks, &x[k]))
			running[k] = 1;
	}
	for (int k = 0; k < nr; k++)
		if (!running[k])
			start_node_tasks(&x[k]);
	for (int k = 1; k < nr; k++)
		if (running[k] == 1)
			pthread_join(th[k], NULL);
	for (int k = 1; k < nr; k++)
		if (running[k] == 2)
			start_node_tasks(&x[k]);
	free(x);
	free(th);
	free(running);
}

/*
 * Launch a placed job: port, plan, files, one task per rank (or mpirun).  On
 * a launch thread (launch_thread), with its own clients `cc`; h is the hold
 * it was started for, pinned (busy) so check_holds keeps it.  The lock is
 * taken between the requests; if the attempt ended meanwhile (cancel, node
 * DOWN), j->hold is no longer h and nothing more is done for it.  The
 * caller (launch_thread) clears j->launch when it returns.
 */
static void do_launch(struct sched *s, struct job *j, struct hold *h, struct jobs_clients *cc)
{
	struct launch_plan plan;
	struct strbuf err = STRBUF_INIT, sb = STRBUF_INIT, pj = STRBUF_INIT;
	char *maddr, *resume = NULL;
	int mport, port = 0, code, own_mode = 0700, attempt;
	long long own_uid = -1, own_gid = -1;
	json_t *reply = NULL, *req, **bodies = NULL;
	size_t nr_tasks = 0;

	/* 1. what to ask the master node for */
	pthread_mutex_lock(&s->lock);
	if (j->hold != h || j->launch != LAUNCH_RUNNING) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	{
		struct node *m = node_find(s, h->place[0].node);

		maddr = xstrdup(m && m->address && *m->address ? m->address : h->place[0].node);
		mport = m ? m->port : 0;
		/* team mode: the job dir is its user's (0700, 0750 with share: group) */
		if (s->cc && s->cc->team && user_ids(j->user, &own_uid, &own_gid) < 0)
			own_uid = own_gid = -1;
		own_mode = j->cfg.share_group ? 0750 : 0700;
		attempt = j->attempt;
	}
	pthread_mutex_unlock(&s->lock);

	/* 2. a free port on the master node (MASTER_PORT) */
	req = json_object();
	code = dt_httpc_request(client_for(s, cc, maddr, mport), "POST", DT_PATH_PORTS, req, &reply,
				&err);
	json_decref(req);
	if (code == 200)
		port = (int)json_get_int(reply, "port", 0);
	json_decref(reply);
	reply = NULL;
	/* logs/, ckpt/, ranks/: made for the job's first launch, not at submit (jobs.c) */
	if (port && (job_subdirs(j, &sb) < 0 ||
		     (own_uid > 0 && job_dir_give(j, own_uid, own_gid, own_mode, &sb) < 0)))
		port = -1;
	/* ckpt/ is the job's: read without the lock, bounded (a retry's DT_RESUME) */
	if (port > 0 && attempt > 0)
		resume = job_latest_checkpoint(j, CKPT_SCAN_MAX, CKPT_SCAN_MS, NULL);

	pthread_mutex_lock(&s->lock);
	if (j->hold != h) {           /* ended while we asked: nothing started */
		pthread_mutex_unlock(&s->lock);
		goto out;
	}
	if (port < 0) {
		j->launch_error = strbuf_detach(&sb, NULL);
		pthread_mutex_unlock(&s->lock);
		goto out;
	}
	if (!port) {
		strbuf_reset(&sb);
		strbuf_addf(&sb, "cannot get a free port on master node '%s': %s", h->place[0].node,
			    code < 0 ? err.buf : "no free port in 29500-29999");
		j->launch_error = strbuf_detach(&sb, NULL);
		pthread_mutex_unlock(&s->lock);
		goto out;
	}
	j->master_port = port;

	/* 3. the plan (what `dtctl run --dry-run` shows) and the job dir files */
	strbuf_reset(&err);
	if (job_plan(s, j, h->place, h->nr, port, resume, &plan, &err) < 0) {
		j->launch_error = xstrdup(err.buf);
		pthread_mutex_unlock(&s->lock);
		goto out;
	}
	strbuf_reset(&sb);
	json_append(&sb, j->spec);
	strbuf_addch(&sb, '\n');
	{
		json_t *pl = launch_plan_to_json(&plan);

		json_append(&pj, pl);
		strbuf_addch(&pj, '\n');
		json_decref(pl);
	}
	nr_tasks = plan.nr_tasks;
	bodies = xcalloc(nr_tasks, sizeof(*bodies));
	for (size_t i = 0; i < nr_tasks; i++) {
		const struct launch_task *t = &plan.tasks[i];

		bodies[i] = launch_task_request(&plan, i);
		/* which head started it: an agent replaces another head's ended task of this id */
		json_object_set_new(bodies[i], "head", json_string(s->head_id));
		/* recorded before it is started, so a restarted dtsched knows it */
		hold_add_task(h, plan.place[t->node].name, t->id, t->rank, 0);
	}
	h->launched_ms = dt_mono_ms();
	job_save(s, j);
	pthread_mutex_unlock(&s->lock);

	/* the job dir files, outside the lock (the shared dir may be slow NFS);
	 * job_dir and shared_dir never change once the job is queued */
	job_file(j, "hostfile", plan.hostfile, strlen(plan.hostfile));
	job_file_mode(j, "job.yaml", sb.buf, sb.len, 0600);   /* JSON is YAML */
	job_file_mode(j, "plan.json", pj.buf, pj.len, 0600);

	/* 4. start the tasks: one request per node carries all of its tasks */
	start_all_nodes(s, j, h, &plan, bodies, cc);
	dtlog(DTLOG_INFO, "job %s: launched %zu task(s) on %d node(s), master %s:%d%s%s", j->id,
	      nr_tasks, plan.nr_nodes, maddr, port, resume ? ", resuming from " : "",
	      resume ? resume : "");
	launch_plan_release(&plan);
out:
	for (size_t i = 0; i < nr_tasks; i++)
		json_decref(bodies[i]);
	free(bodies);
	free(maddr);
	free(resume);
	strbuf_release(&err);
	strbuf_release(&sb);
	strbuf_release(&pj);
}

/*
 * The agents backend's launch (backend.h): every request of the attempt, on
 * the lifecycle's launch thread, with HTTP clients of its own (the shared
 * ones are the main thread's), so the main loop goes on ending, placing and
 * launching other jobs while this one waits for its agents.
 */
void agents_launch(struct sched *s, struct job *j, struct hold *h)
{
	struct jobs_clients own = { NULL, 0, 0, 0 };

	do_launch(s, j, h, &own);
	clients_release(&own);
}
