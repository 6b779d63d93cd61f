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

#include <dirent.h>
#include <errno.h>
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
 */
static char *latest_checkpoint(const struct job *j)
{
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
	x->c.timeout_ms = 5000;
	x->c.connect_timeout_ms = 2000;
	return &x->c;
}

struct post {
	char *addr, *node, *id;
	int port, rank;
	json_t *body;
};

/*
 * What the plan of j takes from the cluster and the job besides its
 * placement, the same for the launch and for --dry-run; the master node's
 * ssh_config and bin_dir for the mpi launcher.  Lock held; lo points into
 * s->cc and j, so it is used before the lock is let go.
 */
void launch_opts_from(struct sched *s, const struct job *j, struct launch_opts *lo,
		      const char *ssh_config, const char *bin_dir)
{
	memset(lo, 0, sizeof(*lo));
	lo->submit_dir = j->submit_dir;
	lo->attempt = j->attempt;
	lo->max_restarts = j->cfg.retries;
	if (s->cc)
		lo->setup_env = &s->cc->setup.env;
	if (j->cfg.launcher == LAUNCHER_MPI) {
		lo->ssh_config = ssh_config;
		lo->bin_dir = bin_dir;
		lo->orted_ssh = s->cc && s->cc->mpi.orted_ssh;
	}
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
	struct launch_node *ln;
	struct launch_opts lo;
	struct launch_plan plan;
	struct strbuf err = STRBUF_INIT, sb = STRBUF_INIT;
	char *maddr, *resume = NULL, *bin_dir = NULL, *ssh_config = NULL, *iface = NULL;
	int mport, port = 0, nr, code;
	struct post *posts = NULL;
	size_t nr_posts = 0;
	json_t *reply = NULL, *req;

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
		if (m && m->bin_dir)
			bin_dir = xstrdup(m->bin_dir);
		if (m && m->ssh_config)
			ssh_config = xstrdup(m->ssh_config);
		if (s->cc && s->cc->network.interface)
			iface = xstrdup(s->cc->network.interface);
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

	pthread_mutex_lock(&s->lock);
	if (j->hold != h) {           /* ended while we asked: nothing started */
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
	if (j->attempt > 0)
		resume = latest_checkpoint(j);

	/* 3. the plan (what `dtctl run --dry-run` shows) and the job dir files */
	nr = h->nr;
	ln = xcalloc((size_t)nr, sizeof(*ln));
	{
		char **slots = xcalloc((size_t)nr, sizeof(char *));

		for (int k = 0; k < nr; k++) {
			struct strbuf sl = STRBUF_INIT;

			for (int i = 0; i < h->place[k].nslots; i++)
				strbuf_addf(&sl, "%s%d", i ? "," : "", h->place[k].slot[i]);
			slots[k] = strbuf_detach(&sl, NULL);
			ln[k].name = h->place[k].node;
			ln[k].address = h->place[k].address;
			ln[k].host = h->place[k].address;
			ln[k].slots = j->gpu ? slots[k] : NULL;
			{
				struct node *nk = node_find(s, h->place[k].node);

				ln[k].agent_port = nk ? nk->port : 0;
			}
		}
		launch_opts_from(s, j, &lo, ssh_config, bin_dir);
		lo.job_id = j->id;
		lo.job_dir = j->job_dir;
		lo.master_port = port;
		lo.resume = resume;
		lo.net_interface = iface;
		strbuf_reset(&err);
		if (launch_plan_build(&plan, &j->cfg, ln, nr, &lo, &err) < 0) {
			j->launch_error = xstrdup(err.buf);
			for (int k = 0; k < nr; k++)
				free(slots[k]);
			free(slots);
			free(ln);
			pthread_mutex_unlock(&s->lock);
			goto out;
		}
		for (int k = 0; k < nr; k++)
			free(slots[k]);
		free(slots);
	}
	strbuf_reset(&sb);
	json_append(&sb, j->spec);
	strbuf_addch(&sb, '\n');
	posts = xcalloc(plan.nr_tasks, sizeof(*posts));
	for (size_t i = 0; i < plan.nr_tasks; i++) {
		struct launch_task *t = &plan.tasks[i];
		struct post *p = &posts[nr_posts++];
		json_t *argv = json_array(), *env = json_object();
		struct strbuf id = STRBUF_INIT;
		struct node *n = node_find(s, h->place[t->node].node);

		for (size_t a = 0; a < t->argv.nr; a++)
			json_array_append_new(argv, json_string(t->argv.v[a]));
		for (size_t e = 0; e < t->env.nr; e++) {
			const char *eq = strchr(t->env.v[e], '=');
			char *name = xstrndup(t->env.v[e], (size_t)(eq - t->env.v[e]));

			json_object_set_new(env, name, json_string(eq + 1));
			free(name);
		}
		if (t->rank >= 0)
			strbuf_addf(&id, "%s.%d.r%d", j->id, j->attempt, t->rank);
		else
			strbuf_addf(&id, "%s.%d.mpirun", j->id, j->attempt);
		p->addr = xstrdup(h->place[t->node].address);
		p->port = n ? n->port : 0;
		p->node = xstrdup(h->place[t->node].node);
		p->id = strbuf_detach(&id, NULL);
		p->rank = t->rank;
		p->body = json_pack("{s:s,s:o,s:o,s:s,s:i,s:s,s:i}", "id", p->id, "argv", argv,
				    "env", env, "log", t->log, "grace_ms", STOP_GRACE_MS,
				    "job_id", j->id, "rank", t->rank);
		/* the agent walks the log's path below the shared dir without links */
		json_object_set_new(p->body, "log_root", json_string(j->shared_dir));
		if (plan.cwd)
			json_object_set_new(p->body, "cwd", json_string(plan.cwd));
		if (plan.submit_dir)
			json_object_set_new(p->body, "submit_dir", json_string(plan.submit_dir));
		if (t->cuda_visible_devices)
			json_object_set_new(p->body, "cuda_visible_devices",
					    json_string(t->cuda_visible_devices));
		/* recorded before it is started, so a restarted dtsched knows it */
		hold_add_task(h, p->node, p->id, p->rank, 0);
	}
	h->launched_ms = dt_mono_ms();
	job_save(s, j);
	free(ln);
	pthread_mutex_unlock(&s->lock);

	/* the job dir files, outside the lock (the shared dir may be slow NFS);
	 * job_dir and shared_dir never change once the job is queued */
	job_file(j, "hostfile", plan.hostfile, strlen(plan.hostfile));
	job_file(j, "job.yaml", sb.buf, sb.len);   /* JSON is YAML */
	launch_plan_release(&plan);

	/* 4. start every task */
	for (size_t i = 0; i < nr_posts; i++) {
		struct post *p = &posts[i];

		strbuf_reset(&err);
		code = dt_httpc_request(client_for(s, cc, p->addr, p->port), "POST", DT_PATH_TASKS,
					p->body, &reply, &err);
		if (code != 201) {
			pthread_mutex_lock(&s->lock);
			if (!j->launch_error && j->hold == h) {
				strbuf_reset(&sb);
				strbuf_addf(&sb, "cannot start %s%d on node '%s': %s",
					    p->rank >= 0 ? "rank " : "mpirun", p->rank >= 0 ? p->rank : 0,
					    p->node, code < 0 ? err.buf : dt_httpc_reply_error(reply, code));
				j->launch_error = strbuf_detach(&sb, NULL);
			}
			for (size_t k = 0; k < h->nr_tasks; k++)
				if (!strcmp(h->tasks[k].id, p->id))
					h->tasks[k].gone = 1;
			pthread_mutex_unlock(&s->lock);
		}
		json_decref(reply);
		reply = NULL;
	}
	dtlog(DTLOG_INFO, "job %s: launched %zu task(s) on %d node(s), master %s:%d%s%s", j->id,
	      nr_posts, nr, maddr, port, resume ? ", resuming from " : "", resume ? resume : "");
out:
	for (size_t i = 0; i < nr_posts; i++) {
		free(posts[i].addr);
		free(posts[i].node);
		free(posts[i].id);
		json_decref(posts[i].body);
	}
	free(posts);
	free(maddr);
	free(resume);
	free(bin_dir);
	free(ssh_config);
	free(iface);
	strbuf_release(&err);
	strbuf_release(&sb);
}

/*
 * One placed job's launch, off the main thread: the main loop goes on
 * ending, placing and launching other jobs while this one waits for its
 * agents (in a sweep, eight trials ending together used to be launched one
 * after another, each behind the requests of the one before, and the ends
 * that arrived meanwhile waited too).
 */
void *launch_thread(void *arg)
{
	struct launch_arg *la = arg;
	struct jobs_clients own = { NULL, 0, 0, 0 };

	do_launch(la->s, la->j, la->h, &own);
	clients_release(&own);
	pthread_mutex_lock(&la->s->lock);
	la->h->busy--;
	if (la->j->hold == la->h && la->j->launch == LAUNCH_RUNNING)
		la->j->launch = 0;
	sched_wake(la->s);     /* a launch error or an early exit is handled at once */
	/* last: once this is 0 (and the lock free) jobs_release may free s */
	la->s->clients->launches--;
	pthread_mutex_unlock(&la->s->lock);
	free(la);
	return NULL;
}
