/*
 * test_launch.c - the processes a placed job becomes: torchrun-compatible env
 * per rank, dttrain flags from trainer:, argv passed verbatim, the mpirun line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "scheduler/launch.h"

static const char *env_of(const struct launch_task *t, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < t->env.nr; i++)
		if (!strncmp(t->env.v[i], name, n) && t->env.v[i][n] == '=')
			return t->env.v[i] + n + 1;
	return NULL;
}

static void load_job(struct job_config *j, const char *yaml)
{
	struct strbuf err = STRBUF_INIT;

	if (job_config_parse(j, yaml, strlen(yaml), "job.yaml", &err) < 0)
		fail_msg("job.yaml did not parse: %s", err.buf);
	strbuf_release(&err);
}

static void test_agent_env(void **state)
{
	struct job_config job;
	struct launch_plan p;
	struct strbuf err = STRBUF_INIT;
	struct launch_node nodes[2] = { { "n1", "10.88.0.11", "0,1", NULL, 0, NULL, NULL },
					{ "n2", "10.88.0.12", "2,3", NULL, 0, NULL, NULL } };
	struct launch_opts o = { .job_id = "j-000007", .job_dir = "/sh/jobs/j-000007",
				 .master_port = 29611 };
	const struct launch_task *t;

	load_job(&job, "nodes: 2\ngpus_per_node: 2\nlauncher: agent\n"
		 "command: [python, train.py, \"--msg=a b;$(x)\\n'q'\"]\nenv: {A: \"1 2\"}\n");
	assert_int_equal(launch_plan_build(&p, &job, nodes, 2, &o, &err), 0);
	assert_int_equal(p.world, 4);
	assert_int_equal(p.nr_tasks, 4);
	t = &p.tasks[3];
	assert_int_equal(t->node, 1);
	assert_string_equal(env_of(t, "RANK"), "3");
	assert_string_equal(env_of(t, "LOCAL_RANK"), "1");
	assert_string_equal(env_of(t, "WORLD_SIZE"), "4");
	assert_string_equal(env_of(t, "LOCAL_WORLD_SIZE"), "2");
	assert_string_equal(env_of(t, "GROUP_RANK"), "1");
	assert_string_equal(env_of(t, "NODE_RANK"), "1");
	assert_string_equal(env_of(t, "CROSS_RANK"), "1");     /* DeepSpeed's */
	assert_string_equal(env_of(t, "CROSS_SIZE"), "2");
	assert_string_equal(env_of(t, "LOCAL_SIZE"), "2");
	assert_string_equal(env_of(t, "MASTER_ADDR"), "10.88.0.11");
	assert_string_equal(env_of(t, "MASTER_PORT"), "29611");
	/* the GPUs travel once, as cuda_visible_devices, not in the env too */
	assert_null(env_of(t, "CUDA_VISIBLE_DEVICES"));
	assert_string_equal(t->cuda_visible_devices, "2,3");
	assert_string_equal(t->id, "j-000007.0.r3");
	assert_string_equal(env_of(t, "DT_JOB_ID"), "j-000007");
	assert_string_equal(env_of(t, "DT_METRICS_FILE"), "/sh/jobs/j-000007/metrics.jsonl");
	assert_string_equal(env_of(t, "A"), "1 2");
	assert_null(env_of(t, "DT_RESUME"));
	assert_string_equal(t->log, "/sh/jobs/j-000007/logs/3.log");
	/* argv verbatim, no shell */
	assert_int_equal(t->argv.nr, 3);
	assert_string_equal(t->argv.v[2], "--msg=a b;$(x)\n'q'");
	assert_string_equal(p.hostfile, "n1 slots=2\nn2 slots=2\n");
	launch_plan_release(&p);
	job_config_release(&job);
	strbuf_release(&err);
}

static void test_trainer_mpi(void **state)
{
	struct job_config job;
	struct launch_plan p;
	struct strbuf err = STRBUF_INIT;
	struct launch_node nodes[2] = { { "n1", "n1", NULL, NULL, 7070, NULL, NULL },
					{ "n2", "n2", NULL, NULL, 7071, NULL, NULL } };
	struct launch_opts o = { .job_id = "j-1", .job_dir = "/s/jobs/j-1", .master_port = 1234,
				 .resume = "/s/jobs/j-1/ckpt/last.ckpt", .ssh_config = "/h/ssh_config",
				 .net_interface = "eth0", .bin_dir = "/h/.dtctl/bin" };
	const struct launch_task *t;
	int found_rsh = 0, found_if = 0, found_x = 0, found_args = 0, found_attached = 0;
	int found_flat = 0, found_xmap = 0;

	load_job(&job, "nodes: 2\nprocs_per_node: 2\n"
		 "trainer: {model: mlp, hidden: [64, 32], lr: 0.1, grad_clip: 1}\n");
	assert_int_equal(job.launcher, LAUNCHER_MPI);
	assert_int_equal(launch_plan_build(&p, &job, nodes, 2, &o, &err), 0);
	assert_int_equal(p.nr_tasks, 1);
	t = &p.tasks[0];
	assert_string_equal(t->argv.v[0], "mpirun");
	for (size_t i = 0; i + 1 < t->argv.nr; i++) {
		/* orted through the agents by default (agent/rsh.h), not ssh */
		if (!strcmp(t->argv.v[i], "plm_rsh_agent") &&
		    !strcmp(t->argv.v[i + 1], "/h/.dtctl/bin/dtagent rsh"))
			found_rsh = 1;
		if (!strcmp(t->argv.v[i], "plm_rsh_args"))
			found_args = 1;
		if (!strcmp(t->argv.v[i], "orte_leave_session_attached") &&
		    !strcmp(t->argv.v[i + 1], "1"))
			found_attached = 1;
		if (!strcmp(t->argv.v[i], "plm_rsh_no_tree_spawn") && !strcmp(t->argv.v[i + 1], "1"))
			found_flat = 1;
		if (!strcmp(t->argv.v[i], "btl_tcp_if_include") && !strcmp(t->argv.v[i + 1], "eth0"))
			found_if = 1;
		if (!strcmp(t->argv.v[i], "-x") && !strcmp(t->argv.v[i + 1], "DT_RESUME"))
			found_x = 1;
		if (!strcmp(t->argv.v[i], "-x") && !strcmp(t->argv.v[i + 1], "DT_ORTED_AGENTS"))
			found_xmap = 1;
	}
	assert_true(found_rsh && found_attached && found_flat && found_if && found_x);
	assert_false(found_args || found_xmap);
	/* where `dtagent rsh` finds each node's agent, by its hostfile name */
	assert_string_equal(env_of(t, "DT_ORTED_AGENTS"), "n1=7070,n2=7071");
	assert_string_equal(env_of(t, "DT_RESUME"), "/s/jobs/j-1/ckpt/last.ckpt");
	/* ... then the rank logger and dttrain with its flags */
	assert_string_equal(t->argv.v[t->argv.nr - 5], "/h/.dtctl/bin/dttrain");
	assert_string_equal(t->argv.v[t->argv.nr - 4], "--model=mlp");
	assert_string_equal(t->argv.v[t->argv.nr - 3], "--hidden=64,32");
	assert_string_equal(t->argv.v[t->argv.nr - 2], "--lr=0.1");
	assert_string_equal(t->argv.v[t->argv.nr - 1], "--grad-clip=1");
	assert_string_equal(t->argv.v[t->argv.nr - 6], "--");
	assert_string_equal(t->argv.v[t->argv.nr - 7], "/s/jobs/j-1/logs");
	assert_string_equal(t->argv.v[t->argv.nr - 8], "rank-log");
	assert_string_equal(t->argv.v[t->argv.nr - 9], "/h/.dtctl/bin/dtshim");
	launch_plan_release(&p);

	/* mpi.orted_launch: ssh: init's ssh configuration, no agent map */
	o.orted_ssh = 1;
	assert_int_equal(launch_plan_build(&p, &job, nodes, 2, &o, &err), 0);
	t = &p.tasks[0];
	found_rsh = found_args = 0;
	for (size_t i = 0; i + 1 < t->argv.nr; i++) {
		if (!strcmp(t->argv.v[i], "plm_rsh_agent"))
			found_rsh = 1;
		if (!strcmp(t->argv.v[i], "plm_rsh_args") &&
		    !strcmp(t->argv.v[i + 1], "-F /h/ssh_config"))
			found_args = 1;
	}
	assert_true(found_args);
	assert_false(found_rsh);
	assert_null(env_of(t, "DT_ORTED_AGENTS"));
	launch_plan_release(&p);

	/* one node: mpirun starts nothing remote, so neither */
	o.orted_ssh = 0;
	assert_int_equal(launch_plan_build(&p, &job, nodes, 1, &o, &err), 0);
	t = &p.tasks[0];
	for (size_t i = 0; i < t->argv.nr; i++)
		assert_string_not_equal(t->argv.v[i], "plm_rsh_agent");
	assert_null(env_of(t, "DT_ORTED_AGENTS"));
	launch_plan_release(&p);
	job_config_release(&job);
	strbuf_release(&err);
}

/* the value after `opt` in t's argv, or NULL */
static const char *arg_after(const struct launch_task *t, const char *opt)
{
	for (size_t i = 0; i + 1 < t->argv.nr; i++)
		if (!strcmp(t->argv.v[i], opt))
			return t->argv.v[i + 1];
	return NULL;
}

/*
 * The network interface (docs/run.md): each node's, as its agent found it,
 * for NCCL and gloo; the job's own setting, then network.interface, win;
 * mpirun gets the nodes' subnets, one environment only when the names agree.
 */
static void test_network_interface(void **state)
{
	struct job_config job;
	struct launch_plan p;
	struct strbuf err = STRBUF_INIT;
	struct launch_node nodes[3] = {
		{ "n1", "10.88.0.11", NULL, NULL, 7070, "eth0", "10.88.0.0/24" },
		{ "n2", "10.88.0.12", NULL, NULL, 7070, "ens5", "10.88.0.0/24" },
		{ "n3", "10.89.0.13", NULL, NULL, 7070, "ens5", "10.89.0.0/16" } };
	struct launch_opts o = { .job_id = "j-1", .job_dir = "/s/jobs/j-1", .master_port = 1 };

	load_job(&job, "nodes: 3\nlauncher: agent\ncommand: [python, t.py]\n"
		 "env: {GLOO_SOCKET_IFNAME: mine0}\n");
	assert_int_equal(launch_plan_build(&p, &job, nodes, 3, &o, &err), 0);
	assert_string_equal(env_of(&p.tasks[0], "NCCL_SOCKET_IFNAME"), "eth0");
	assert_string_equal(env_of(&p.tasks[1], "NCCL_SOCKET_IFNAME"), "ens5");
	assert_string_equal(env_of(&p.tasks[2], "GLOO_SOCKET_IFNAME"), "mine0");   /* the job's */
	launch_plan_release(&p);
	o.net_interface = "ib0";          /* cluster.yaml network.interface */
	assert_int_equal(launch_plan_build(&p, &job, nodes, 3, &o, &err), 0);
	assert_string_equal(env_of(&p.tasks[1], "NCCL_SOCKET_IFNAME"), "ib0");
	assert_string_equal(env_of(&p.tasks[1], "GLOO_SOCKET_IFNAME"), "mine0");
	launch_plan_release(&p);
	job_config_release(&job);

	/* mpi: the subnets, each once; names differ, so no NCCL/gloo setting */
	o.net_interface = NULL;
	load_job(&job, "nodes: 3\nlauncher: mpi\ncommand: [t]\n");
	assert_int_equal(launch_plan_build(&p, &job, nodes, 3, &o, &err), 0);
	assert_string_equal(arg_after(&p.tasks[0], "btl_tcp_if_include"),
			    "10.88.0.0/24,10.89.0.0/16");
	assert_string_equal(arg_after(&p.tasks[0], "oob_tcp_if_include"),
			    "10.88.0.0/24,10.89.0.0/16");
	assert_null(env_of(&p.tasks[0], "NCCL_SOCKET_IFNAME"));
	launch_plan_release(&p);
	/* the two ens5 nodes agree */
	assert_int_equal(launch_plan_build(&p, &job, nodes + 1, 2, &o, &err), 0);
	assert_string_equal(env_of(&p.tasks[0], "NCCL_SOCKET_IFNAME"), "ens5");
	launch_plan_release(&p);
	/* a node that did not say: Open MPI chooses */
	nodes[2].cidr = NULL;
	assert_int_equal(launch_plan_build(&p, &job, nodes, 3, &o, &err), 0);
	assert_null(arg_after(&p.tasks[0], "btl_tcp_if_include"));
	launch_plan_release(&p);
	job_config_release(&job);
	/* the job's own Open MPI setting wins */
	nodes[2].cidr = "10.89.0.0/16";
	load_job(&job, "nodes: 3\nlauncher: mpi\ncommand: [t]\n"
		 "env: {OMPI_MCA_btl_tcp_if_include: lo}\n");
	assert_int_equal(launch_plan_build(&p, &job, nodes, 3, &o, &err), 0);
	assert_null(arg_after(&p.tasks[0], "btl_tcp_if_include"));
	launch_plan_release(&p);
	job_config_release(&job);
	strbuf_release(&err);
}

/*
 * cluster.yaml's setup.env reaches every task under the job's env (which
 * wins); the job's workdir is every task's cwd (and mpirun's --wdir), else
 * the submit dir is sent for the agent to use where it exists.
 */
static void test_setup_env_and_dirs(void **state)
{
	struct job_config job;
	struct launch_plan p;
	struct strbuf err = STRBUF_INIT;
	struct launch_node nodes[2] = { { "n1", "n1", NULL, NULL, 7070, NULL, NULL },
					{ "n2", "n2", NULL, NULL, 7070, NULL, NULL } };
	struct kvlist setup = { NULL, 0, 0 };
	struct launch_opts o = { .job_id = "j-000009", .job_dir = "/sh/jobs/j-000009",
				 .setup_env = &setup, .submit_dir = "/sh/proj" };
	int wdir = 0;

	kvlist_set(&setup, "NCCL_SOCKET_IFNAME", "eth9");
	kvlist_set(&setup, "A", "from setup");
	load_job(&job, "nodes: 2\nlauncher: agent\ncommand: [python, t.py]\nenv: {A: job}\n");
	assert_int_equal(launch_plan_build(&p, &job, nodes, 2, &o, &err), 0);
	assert_string_equal(env_of(&p.tasks[1], "NCCL_SOCKET_IFNAME"), "eth9");
	assert_string_equal(env_of(&p.tasks[1], "A"), "job");
	assert_null(p.cwd);
	assert_string_equal(p.submit_dir, "/sh/proj");
	launch_plan_release(&p);
	job_config_release(&job);

	load_job(&job, "nodes: 2\nlauncher: mpi\nworkdir: /sh/w\ncommand: [python, t.py]\n");
	assert_int_equal(launch_plan_build(&p, &job, nodes, 2, &o, &err), 0);
	assert_string_equal(p.cwd, "/sh/w");
	assert_null(p.submit_dir);
	assert_string_equal(env_of(&p.tasks[0], "NCCL_SOCKET_IFNAME"), "eth9");
	for (size_t i = 0; i + 1 < p.tasks[0].argv.nr; i++)
		if (!strcmp(p.tasks[0].argv.v[i], "--wdir") &&
		    !strcmp(p.tasks[0].argv.v[i + 1], "/sh/w"))
			wdir = 1;
	assert_true(wdir);
	launch_plan_release(&p);
	job_config_release(&job);
	kvlist_release(&setup);
	strbuf_release(&err);
}

static void test_json_dry_run(void **state)
{
	struct job_config job;
	struct launch_plan p;
	struct strbuf err = STRBUF_INIT;
	struct launch_node nodes[1] = { { "local", "127.0.0.1", NULL, NULL, 0, NULL, NULL } };
	struct launch_opts o = { .job_id = "j-2", .job_dir = "/s/jobs/j-2", .master_port = 5 };
	json_t *j;

	load_job(&job, "procs_per_node: 3\ncommand: [\"true\"]\n");
	assert_int_equal(launch_plan_build(&p, &job, nodes, 1, &o, &err), 0);
	j = launch_plan_to_json(&p);
	assert_int_equal(json_integer_value(json_object_get(j, "world_size")), 3);
	assert_int_equal(json_array_size(json_object_get(j, "tasks")), 3);
	assert_string_equal(json_string_value(json_object_get(json_object_get(
		json_array_get(json_object_get(j, "tasks"), 2), "env"), "RANK")), "2");
	json_decref(j);
	launch_plan_release(&p);
	job_config_release(&job);
	strbuf_release(&err);
}

/*
 * The agent request of a task is the plan's task without its node index and
 * local rank, and with CUDA_VISIBLE_DEVICES only as cuda_visible_devices; the
 * plan shows the env as the process gets it (the variable included).
 */
static void test_task_request(void **state)
{
	struct job_config job;
	struct launch_plan p;
	struct strbuf err = STRBUF_INIT;
	struct launch_node nodes[2] = { { "n1", "10.0.0.1", "0,1", NULL, 7070, NULL, NULL },
					{ "n2", NULL, "2,3", NULL, 7071, NULL, NULL } };
	struct launch_opts o = { .job_id = "j-5", .job_dir = "/s/jobs/j-5", .master_port = 7,
				 .attempt = 2, .grace_ms = 3000, .log_root = "/s",
				 .submit_dir = "/s/p" };
	json_t *r, *pj, *t, *env;
	const char *k;
	json_t *v;

	load_job(&job, "nodes: 2\ngpus_per_node: 2\nlauncher: agent\ncommand: [python, t.py]\n");
	assert_int_equal(launch_plan_build(&p, &job, nodes, 2, &o, &err), 0);
	/* the nodes as the launch reaches them */
	assert_string_equal(p.place[1].name, "n2");
	assert_string_equal(p.place[1].address, "n2");   /* no address: its name */
	assert_int_equal(p.place[1].agent_port, 7071);
	assert_string_equal(p.place[1].slots, "2,3");
	r = launch_task_request(&p, 3);
	assert_string_equal(json_string_value(json_object_get(r, "id")), "j-5.2.r3");
	assert_string_equal(json_string_value(json_object_get(r, "job_id")), "j-5");
	assert_int_equal(json_integer_value(json_object_get(r, "rank")), 3);
	assert_int_equal(json_integer_value(json_object_get(r, "grace_ms")), 3000);
	assert_string_equal(json_string_value(json_object_get(r, "log")), "/s/jobs/j-5/logs/3.log");
	assert_string_equal(json_string_value(json_object_get(r, "log_root")), "/s");
	assert_string_equal(json_string_value(json_object_get(r, "submit_dir")), "/s/p");
	assert_null(json_object_get(r, "cwd"));
	assert_string_equal(json_string_value(json_object_get(r, "cuda_visible_devices")), "2,3");
	assert_null(json_object_get(json_object_get(r, "env"), "CUDA_VISIBLE_DEVICES"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "env"), "RANK")),
			    "3");
	assert_null(json_object_get(r, "node"));

	pj = launch_plan_to_json(&p);
	t = json_array_get(json_object_get(pj, "tasks"), 3);
	assert_int_equal(json_integer_value(json_object_get(t, "node")), 1);
	assert_int_equal(json_integer_value(json_object_get(t, "local_rank")), 1);
	env = json_object_get(t, "env");
	assert_string_equal(json_string_value(json_object_get(env, "CUDA_VISIBLE_DEVICES")), "2,3");
	/* everything else of the task is the request, value for value */
	json_object_del(env, "CUDA_VISIBLE_DEVICES");
	json_object_del(t, "node");
	json_object_del(t, "local_rank");
	assert_true(json_equal(t, r));
	json_object_foreach(r, k, v)
		assert_non_null(json_object_get(t, k));
	assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(pj,
		"placement"), 0), "slots")), "0,1");
	json_decref(r);
	json_decref(pj);
	launch_plan_release(&p);
	job_config_release(&job);
	strbuf_release(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_agent_env),
		cmocka_unit_test(test_trainer_mpi),
		cmocka_unit_test(test_network_interface),
		cmocka_unit_test(test_setup_env_and_dirs),
		cmocka_unit_test(test_json_dry_run),
		cmocka_unit_test(test_task_request),
	};

	return cmocka_run_group_tests_name("launch", tests, NULL, NULL);
}
