/*
 * launch.c - from a placed job to argv/env per process (see launch.h).
 */
#include "launch.h"
#include "json.h"
#include "protocol.h"
#include "safefile.h"

#include <stdlib.h>
#include <string.h>

void launch_job_argv(struct strvec *argv, const struct job_config *job, const char *bin_dir)
{
	if (!job->has_trainer) {
		if (job->shell) {
			strvec_push(argv, "/bin/sh");
			strvec_push(argv, "-c");
		}
		for (size_t i = 0; i < job->command.nr; i++)
			strvec_push(argv, job->command.v[i]);
		return;
	}
	if (bin_dir)
		strvec_pushf(argv, "%s/dttrain", bin_dir);
	else
		strvec_push(argv, "dttrain");
	for (size_t i = 0; i < job->trainer.nr; i++) {
		struct strbuf flag = STRBUF_INIT;

		for (const char *k = job->trainer.items[i].key; *k; k++)
			strbuf_addch(&flag, *k == '_' ? '-' : *k);
		strvec_pushf(argv, "--%s=%s", flag.buf, job->trainer.items[i].value);
		strbuf_release(&flag);
	}
}

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

/* "<job>.<attempt>.r<rank>", or ".mpirun" (rank < 0): dtsched's task ids */
static char *task_id(const struct launch_opts *o, const char *what, int rank)
{
	struct strbuf id = STRBUF_INIT;

	strbuf_addf(&id, "%s.%d.%s", o->job_id, o->attempt, what);
	if (rank >= 0)
		strbuf_addf(&id, "%d", rank);
	return strbuf_detach(&id, NULL);
}

static int env_has(const struct strvec *env, const char *name)
{
	return strvec_getenv(env, name) != NULL;
}

static void common_env(struct strvec *env, const struct job_config *job,
		       const struct launch_opts *o, const struct launch_plan *p)
{
	/* node-wide settings first, so that the job's own env overrides them */
	if (o->setup_env)
		for (size_t i = 0; i < o->setup_env->nr; i++)
			strvec_setenv(env, o->setup_env->items[i].key, o->setup_env->items[i].value);
	for (size_t i = 0; i < job->env.nr; i++)
		strvec_setenv(env, job->env.items[i].key, job->env.items[i].value);
	if (o->extra_env)
		for (size_t i = 0; i < o->extra_env->nr; i++)
			strvec_setenv(env, o->extra_env->items[i].key, o->extra_env->items[i].value);
	/*
	 * Output as it is printed (docs/run.md, "Output"): Python buffers
	 * print() in 8 KiB blocks when stdout is a pipe, so without this a rank's
	 * lines reach its log only at exit (and the stall detector flags a
	 * healthy job).  torchrun's users see lines live; SkyPilot and Ray set it
	 * too.  A job turns it off with PYTHONUNBUFFERED: "" (Python ignores an
	 * empty value).  C stdio: line_buffered, applied on the node (linelog.h).
	 */
	if (!env_has(env, "PYTHONUNBUFFERED"))
		strvec_push(env, "PYTHONUNBUFFERED=1");
	if (job->line_buffered)
		strvec_setenv(env, DT_LINE_BUFFERED_ENV, "1");
	strvec_setenv(env, "DT_JOB_ID", o->job_id);
	strvec_pushf(env, "%s=%d", DT_ATTEMPT_ENV, o->attempt);
	strvec_setenv(env, "DT_JOB_DIR", o->job_dir);
	strvec_pushf(env, "DT_METRICS_FILE=%s/metrics.jsonl", o->job_dir);
	if (o->resume)
		strvec_setenv(env, "DT_RESUME", o->resume);
	if (o->preempt_signal)
		strvec_setenv(env, "DT_PREEMPT_SIGNAL", o->preempt_signal);
	if (o->bin_dir)
		strvec_setenv(env, "DT_BIN_DIR", o->bin_dir);
	/*
	 * GPU binding, the same for both launchers (after the job's env: the
	 * reservation wins): a job without GPUs sees none (as flux's gpubind
	 * does), so neither dttrain's --device auto nor a PyTorch script takes
	 * another job's; slot numbers are NVML's, which is PCI bus order, so CUDA
	 * must count in that order too (its default is fastest first).  Each
	 * rank's CUDA_VISIBLE_DEVICES is its node's reservation: set per task by
	 * the agent launcher, per rank by the mpi launcher's rank logger.
	 */
	if (!p->gpu) {
		strvec_setenv(env, "CUDA_VISIBLE_DEVICES", "-1");
	} else {
		strvec_setenv(env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID");
		strvec_unsetenv(env, "CUDA_VISIBLE_DEVICES");
	}
}

/*
 * The interface NCCL and gloo bind to (docs/run.md, "Network interface"):
 * the job's own NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (or setup.env's),
 * else cluster.yaml's network.interface, else `iface`, the one the node's
 * agent reaches dtsched on.  Without it gloo binds to what the hostname
 * resolves to, or to 127.0.0.1 when it resolves nowhere, and NCCL to the
 * first interface it likes.
 */
static void net_env(struct strvec *env, const struct launch_opts *o, const char *iface)
{
	const char *v = o->net_interface ? o->net_interface : iface;

	if (!v)
		return;
	if (!env_has(env, "NCCL_SOCKET_IFNAME"))
		strvec_pushf(env, "NCCL_SOCKET_IFNAME=%s", v);
	if (!env_has(env, "GLOO_SOCKET_IFNAME"))
		strvec_pushf(env, "GLOO_SOCKET_IFNAME=%s", v);
}

/* the interface every node has (mpirun passes one environment), or NULL */
static const char *common_interface(const struct launch_node *nodes, int nr)
{
	for (int k = 0; k < nr; k++)
		if (!nodes[k].interface || strcmp(nodes[k].interface, nodes[0].interface))
			return NULL;
	return nr ? nodes[0].interface : NULL;
}

/*
 * Open MPI's btl/oob_tcp_if_include: network.interface, else the nodes'
 * subnets ("10.88.0.0/24", which Open MPI takes as well as names, so nodes
 * whose interfaces are named differently agree), unless the job says
 * itself (OMPI_MCA_btl_tcp_if_include/exclude in its env).
 */
static void mpi_net_argv(struct strvec *argv, const struct strvec *env,
			 const struct launch_node *nodes, int nr, const struct launch_opts *o)
{
	struct strbuf inc = STRBUF_INIT;

	if (env_has(env, "OMPI_MCA_btl_tcp_if_include") ||
	    env_has(env, "OMPI_MCA_btl_tcp_if_exclude"))
		return;
	if (o->net_interface) {
		strbuf_addstr(&inc, o->net_interface);
	} else {
		for (int k = 0; k < nr; k++) {
			const char *c = nodes[k].cidr;
			int seen = 0;

			if (!c) {
				strbuf_release(&inc);
				return;   /* one node unknown: leave Open MPI its own choice */
			}
			for (int i = 0; i < k; i++)
				seen |= !strcmp(nodes[i].cidr, c);
			if (!seen)
				strbuf_addf(&inc, "%s%s", inc.len ? "," : "", c);
		}
	}
	if (inc.len)
		strvec_pushv(argv, (const char *[]){ "--mca", "btl_tcp_if_include", inc.buf,
						     "--mca", "oob_tcp_if_include", inc.buf, NULL });
	strbuf_release(&inc);
}

static void build_agent_tasks(struct launch_plan *p, const struct job_config *job,
			      const struct launch_node *nodes, const struct launch_opts *o)
{
	struct strbuf buf = STRBUF_INIT;

	p->nr_tasks = (size_t)p->world;
	p->tasks = xcalloc(p->nr_tasks, sizeof(*p->tasks));
	for (int k = 0; k < p->nr_nodes; k++) {
		for (int l = 0; l < p->per_node; l++) {
			int r = k * p->per_node + l;
			struct launch_task *t = &p->tasks[r];

			t->node = k;
			t->rank = r;
			t->local_rank = l;
			t->id = task_id(o, "r", r);
			strvec_init(&t->argv);
			strvec_init(&t->env);
			/* in an image, its own dttrain (its PATH), not the node's */
			launch_job_argv(&t->argv, job, job->container ? NULL : o->bin_dir);
			common_env(&t->env, job, o, p);
			net_env(&t->env, o, nodes[k].interface);
			strvec_pushf(&t->env, "RANK=%d", r);
			strvec_pushf(&t->env, "LOCAL_RANK=%d", l);
			strvec_pushf(&t->env, "WORLD_SIZE=%d", p->world);
			strvec_pushf(&t->env, "LOCAL_WORLD_SIZE=%d", p->per_node);
			strvec_pushf(&t->env, "GROUP_RANK=%d", k);
			strvec_pushf(&t->env, "NODE_RANK=%d", k);
			strvec_pushf(&t->env, "ROLE_RANK=%d", r);
			strvec_pushf(&t->env, "ROLE_WORLD_SIZE=%d", p->world);
			strvec_pushf(&t->env, "MASTER_ADDR=%s", p->master_addr);
			strvec_pushf(&t->env, "MASTER_PORT=%d", p->master_port);
			strvec_pushf(&t->env, "TORCHELASTIC_RUN_ID=%s", o->job_id);
			/* the rest of torchrun's worker environment, same values for the
			 * same shape (tests/e2e/test_torchrun_env.py checks it against
			 * torch.distributed.run); TORCHELASTIC_USE_AGENT_STORE is left
			 * out: there is no agent store, rank 0 hosts the TCPStore */
			strvec_pushf(&t->env, "GROUP_WORLD_SIZE=%d", p->nr_nodes);
			strvec_push(&t->env, "ROLE_NAME=default");
			strvec_pushf(&t->env, "TORCHELASTIC_RESTART_COUNT=%d", o->attempt);
			strvec_pushf(&t->env, "TORCHELASTIC_MAX_RESTARTS=%d", o->max_restarts);
			/* DeepSpeed's launcher (deepspeed.launcher.launch) adds these three
			 * to torchrun's names; Accelerate reads torchrun's (docs/run.md) */
			strvec_pushf(&t->env, "CROSS_RANK=%d", k);
			strvec_pushf(&t->env, "CROSS_SIZE=%d", p->nr_nodes);
			strvec_pushf(&t->env, "LOCAL_SIZE=%d", p->per_node);
			/* torchrun's rule: one OpenMP thread per rank when several share a
			 * node, unless the job or the cluster sets it */
			if (p->per_node > 1 && !env_has(&t->env, "OMP_NUM_THREADS"))
				strvec_push(&t->env, "OMP_NUM_THREADS=1");
			/* as torchrun: NCCL errors end the collective instead of hanging it */
			if (!env_has(&t->env, "NCCL_ASYNC_ERROR_HANDLING"))
				strvec_push(&t->env, "NCCL_ASYNC_ERROR_HANDLING=1");
			/* where torch.distributed.elastic's @record writes a rank's traceback */
			strvec_pushf(&t->env, "TORCHELASTIC_ERROR_FILE=%s/ranks/%d.error.json",
				     o->job_dir, r);
			/* once, as the request's cuda_visible_devices (launch.h) */
			if (p->gpu && nodes[k].slots)
				t->cuda_visible_devices = xstrdup(nodes[k].slots);
			strbuf_reset(&buf);
			strbuf_addf(&buf, "%s/logs/%d.log", o->job_dir, r);
			t->log = xstrdup(buf.buf);
		}
	}
	strbuf_release(&buf);
}

static void build_mpi_task(struct launch_plan *p, const struct job_config *job,
			   const struct launch_node *nodes, int nr_nodes,
			   const struct launch_opts *o)
{
	struct launch_task *t;
	struct strbuf buf = STRBUF_INIT;
	int via_agents = !o->orted_ssh && nr_nodes > 1;   /* one node: nothing remote */

	p->nr_tasks = 1;
	p->tasks = xcalloc(1, sizeof(*p->tasks));
	t = &p->tasks[0];
	t->node = 0;
	t->rank = -1;
	t->id = task_id(o, "mpirun", -1);
	strvec_init(&t->argv);
	strvec_init(&t->env);
	common_env(&t->env, job, o, p);
	net_env(&t->env, o, common_interface(nodes, nr_nodes));
	strvec_pushf(&t->env, "MASTER_ADDR=%s", p->master_addr);
	strvec_pushf(&t->env, "MASTER_PORT=%d", p->master_port);
	if (p->gpu) {
		/*
		 * Every node's reservation, in hostfile order; with --map-by slot
		 * rank r runs on node r / per_node, and its rank logger (dtshim
		 * rank-log, agent/ranklog.c) sets CUDA_VISIBLE_DEVICES from this:
		 * orted on other nodes, started through their agents or ssh, would
		 * otherwise pass on whatever GPUs their own environment shows.
		 */
		struct strbuf map = STRBUF_INIT;

		for (int k = 0; k < nr_nodes; k++)
			strbuf_addf(&map, "%s%s", k ? "|" : "", nodes[k].slots ? nodes[k].slots : "");
		strvec_setenv(&t->env, DT_GPU_SLOTS_ENV, map.buf);
		strvec_pushf(&t->env, "%s=%d", DT_RANKS_PER_NODE_ENV, p->per_node);
		strbuf_release(&map);
	}

	strvec_push(&t->argv, "mpirun");
	strvec_push(&t->argv, "--hostfile");
	strvec_pushf(&t->argv, "%s/hostfile", o->job_dir);
	strvec_push(&t->argv, "-np");
	strvec_pushf(&t->argv, "%d", p->world);
	strvec_push(&t->argv, "--map-by");
	strvec_push(&t->argv, "slot");
	strvec_push(&t->argv, "--bind-to");
	strvec_push(&t->argv, "none");
	strvec_push(&t->argv, "--tag-output");   /* only stray mpirun output; ranks log themselves */
	if (via_agents) {
		/*
		 * orted through the agents (agent/rsh.h): no ssh handshake per
		 * node; flat (the tree spawn would need the map on every node);
		 * attached, so the orted stays its task's main process
		 */
		strvec_pushv(&t->argv, (const char *[]){ "--mca", "plm_rsh_agent", NULL });
		strvec_pushf(&t->argv, "%s%sdtagent rsh", o->bin_dir ? o->bin_dir : "",
			     o->bin_dir ? "/" : "");
		strvec_pushv(&t->argv, (const char *[]){ "--mca", "plm_rsh_no_tree_spawn", "1",
							 "--mca", "orte_leave_session_attached", "1",
							 NULL });
	} else if (o->ssh_config) {
		strvec_pushv(&t->argv, (const char *[]){ "--mca", "plm_rsh_args", NULL });
		strvec_pushf(&t->argv, "-F %s", o->ssh_config);
	}
	/*
	 * A workdir must exist on every node (else mpirun fails, as a rank of the
	 * agent launcher does); without one mpirun starts in the submit dir and
	 * Open MPI starts each rank in mpirun's directory where it exists on
	 * that node, else in the orted's (the agent's home).
	 */
	if (job->workdir)
		strvec_pushv(&t->argv, (const char *[]){ "--wdir", job->workdir, NULL });
	mpi_net_argv(&t->argv, &t->env, nodes, nr_nodes, o);
	/* in an image: each rank's logger runs its rank there (agent/ranklog.c) */
	if (job->container) {
		json_t *c = json_pack("{s:s, s:s*, s:s*}", "image", job->container, "digest",
				      job->container_digest, "shared", o->log_root);
		char *text = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);

		strvec_setenv(&t->env, DT_CONTAINER_ENV, text);
		free(text);
		json_decref(c);
	}
	/* forward the job's environment to every rank by name (-x NAME) */
	for (size_t i = 0; i < t->env.nr; i++) {
		const char *eq = strchr(t->env.v[i], '=');

		strvec_push(&t->argv, "-x");
		strvec_pushf(&t->argv, "%.*s", (int)(eq - t->env.v[i]), t->env.v[i]);
	}
	/* where `dtagent rsh` finds each node's agent (not forwarded to ranks) */
	if (via_agents) {
		struct strbuf map = STRBUF_INIT;

		for (int k = 0; k < nr_nodes; k++)
			strbuf_addf(&map, "%s%s=%d", k ? "," : "",
				    nodes[k].host ? nodes[k].host : nodes[k].name, nodes[k].agent_port);
		strvec_setenv(&t->env, "DT_ORTED_AGENTS", map.buf);
		strbuf_release(&map);
	}
	/* mpirun refuses root unless told (containers, the demo as root) */
	strvec_setenv(&t->env, "OMPI_ALLOW_RUN_AS_ROOT", "1");
	strvec_setenv(&t->env, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
	/* every rank through the rank logger (dtshim): logs/<rank>.log, timestamped */
	if (o->bin_dir)
		strvec_pushf(&t->argv, "%s/dtshim", o->bin_dir);
	else
		strvec_push(&t->argv, "dtshim");
	strvec_push(&t->argv, "rank-log");
	strvec_pushf(&t->argv, "%s/logs", o->job_dir);
	strvec_push(&t->argv, "--");
	launch_job_argv(&t->argv, job, job->container ? NULL : o->bin_dir);
	if (p->gpu && nodes[0].slots)
		t->cuda_visible_devices = xstrdup(nodes[0].slots);
	strbuf_addf(&buf, "%s/logs/mpirun.log", o->job_dir);
	t->log = strbuf_detach(&buf, NULL);
}

int launch_plan_build(struct launch_plan *p, const struct job_config *job,
		      const struct launch_node *nodes, int nr_nodes,
		      const struct launch_opts *o, struct strbuf *err)
{
	struct strbuf hf = STRBUF_INIT;

	memset(p, 0, sizeof(*p));
	if (nr_nodes < 1) {
		strbuf_addstr(err, "no nodes to launch on");
		return -1;
	}
	if (!job->has_trainer && !job->command.nr) {
		strbuf_addstr(err, "job has neither 'trainer:' nor 'command:'");
		return -1;
	}
	p->job_id = xstrdup(o->job_id);
	p->job_dir = xstrdup(o->job_dir);
	p->nr_nodes = nr_nodes;
	p->gpu = job->gpus_per_node > 0;
	p->per_node = p->gpu ? job->gpus_per_node : (job->procs_per_node > 0 ? job->procs_per_node : 1);
	p->world = p->per_node * nr_nodes;
	p->launcher = job->launcher;
	p->master_addr = xstrdup(nodes[0].address ? nodes[0].address : nodes[0].name);
	p->master_port = o->master_port;
	p->attempt = o->attempt;
	p->grace_ms = o->grace_ms;
	p->log_root = dup_or_null(o->log_root);
	p->container = dup_or_null(job->container);
	p->container_digest = dup_or_null(job->container_digest);
	p->run_as = dup_or_null(o->run_as);
	p->run_uid = o->run_uid;
	p->run_gid = o->run_gid;
	p->umask = o->umask;
	p->place = xcalloc((size_t)nr_nodes, sizeof(*p->place));
	for (int k = 0; k < nr_nodes; k++) {
		p->place[k].name = xstrdup(nodes[k].name);
		p->place[k].address = xstrdup(nodes[k].address ? nodes[k].address : nodes[k].name);
		p->place[k].agent_port = nodes[k].agent_port;
		p->place[k].slots = dup_or_null(nodes[k].slots);
		strbuf_addf(&hf, "%s slots=%d\n", nodes[k].host ? nodes[k].host : nodes[k].name,
			    p->per_node);
	}
	p->hostfile = strbuf_detach(&hf, NULL);
	if (job->workdir)
		p->cwd = xstrdup(job->workdir);
	else if (o->submit_dir)
		p->submit_dir = xstrdup(o->submit_dir);
	if (job->launcher == LAUNCHER_MPI)
		build_mpi_task(p, job, nodes, nr_nodes, o);
	else
		build_agent_tasks(p, job, nodes, o);
	return 0;
}

void launch_plan_release(struct launch_plan *p)
{
	for (int k = 0; p->place && k < p->nr_nodes; k++) {
		free(p->place[k].name);
		free(p->place[k].address);
		free(p->place[k].slots);
	}
	free(p->place);
	free(p->log_root);
	for (size_t i = 0; i < p->nr_tasks; i++) {
		free(p->tasks[i].id);
		strvec_clear(&p->tasks[i].argv);
		strvec_clear(&p->tasks[i].env);
		free(p->tasks[i].cuda_visible_devices);
		free(p->tasks[i].log);
	}
	free(p->tasks);
	free(p->job_id);
	free(p->job_dir);
	free(p->master_addr);
	free(p->hostfile);
	free(p->cwd);
	free(p->submit_dir);
	free(p->container);
	free(p->container_digest);
	free(p->run_as);
	memset(p, 0, sizeof(*p));
}

static json_t *env_json(const struct strvec *v)
{
	json_t *env = json_object();

	for (size_t e = 0; e < v->nr; e++) {
		const char *eq = strchr(v->v[e], '=');
		char *name = xstrndup(v->v[e], (size_t)(eq - v->v[e]));

		json_object_set_new(env, name, json_string(eq + 1));
		free(name);
	}
	return env;
}

json_t *launch_task_request(const struct launch_plan *p, size_t i)
{
	const struct launch_task *t = &p->tasks[i];
	/* the agent runs the task in this image (agent/container.h); the node's
	 * name marks where the image is cached (dtctl image list) */
	json_t *ctr = p->container && p->launcher != LAUNCHER_MPI ?
		json_pack("{s:s, s:s*, s:s}", "image", p->container, "digest", p->container_digest,
			  "node", p->place[t->node].name) : NULL;

	/* team mode: the user every task runs as (agent/agent.c checks them) */
	json_t *run_as = p->run_as ? json_pack("{s:s, s:I, s:I}", "user", p->run_as, "uid",
					       (json_int_t)p->run_uid, "gid",
					       (json_int_t)p->run_gid) : NULL;

	return json_pack("{s:s, s:o, s:o, s:s, s:i, s:s, s:i, s:i, s:s*, s:s*, s:s*, s:s*, s:o*, "
			 "s:o*}",
			 "id", t->id, "argv", json_strvec(&t->argv), "env", env_json(&t->env),
			 "log", t->log, "grace_ms", p->grace_ms, "job_id", p->job_id,
			 "rank", t->rank,
			 /* cluster.yaml's job_files, as dtsched applies it (jobs-queue.c),
			  * or the team mode's per job */
			 "umask", p->umask ? p->umask : (int)sf_umask(),
			 /* the agent walks the log's path below the shared dir without
			  * links; s*: no key at all when NULL */
			 "log_root", p->log_root, "cwd", p->cwd, "submit_dir", p->submit_dir,
			 "cuda_visible_devices", t->cuda_visible_devices, "container", ctr,
			 "run_as", run_as);
}

json_t *launch_plan_to_json(const struct launch_plan *p)
{
	json_t *tasks = json_array(), *place = json_array();

	for (int k = 0; k < p->nr_nodes; k++)
		json_array_append_new(place, json_pack("{s:s, s:s, s:i, s:s?}", "node",
						       p->place[k].name, "address",
						       p->place[k].address, "port",
						       p->place[k].agent_port, "slots",
						       p->place[k].slots));
	for (size_t i = 0; i < p->nr_tasks; i++) {
		const struct launch_task *t = &p->tasks[i];
		json_t *o = launch_task_request(p, i);

		json_object_set_new(o, "node", json_integer(t->node));
		json_object_set_new(o, "local_rank", json_integer(t->local_rank));
		if (t->cuda_visible_devices)
			json_object_set_new(json_object_get(o, "env"), "CUDA_VISIBLE_DEVICES",
					    json_string(t->cuda_visible_devices));
		json_array_append_new(tasks, o);
	}
	return json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:s, s:i, s:s, s:o, s:o, s:s?, s:s?}",
			 "job_id", p->job_id, "job_dir", p->job_dir,
			 "launcher", p->launcher == LAUNCHER_MPI ? "mpi" : "agent",
			 "nodes", p->nr_nodes, "per_node", p->per_node, "world_size", p->world,
			 "master_addr", p->master_addr, "master_port", p->master_port,
			 "hostfile", p->hostfile, "placement", place, "tasks", tasks, "cwd", p->cwd,
			 "submit_dir", p->submit_dir);
}
