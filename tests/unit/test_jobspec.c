/*
 * test_jobspec.c - the job spec dtctl sends to dtsched (POST /v1/jobs): the JSON
 * form of a job.yaml comes back as the same job, and bad fields are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "scheduler/jobspec.h"
#include "scheduler/launch.h"

static void test_roundtrip(void **state)
{
	static const char yaml[] =
		"name: t\nnodes: 3\ngpus_per_node: 2\nlauncher: agent\n"
		"command: [python, \"a b;$(x)\\n\", \"\"]\nenv: {A: \"1 2\", B_2: \"'\"}\n"
		"timeout: 90s\nstall_after: 1m\nretries: 2\ninclude_nodes: n[1-3]\n"
		"exclude_nodes: n2\nlabels: {rack: a}\nworkdir: /w\npreflight: true\n";
	struct job_config a, b;
	struct strbuf err = STRBUF_INIT;
	json_t *ja, *jb;

	assert_int_equal(job_config_parse(&a, yaml, strlen(yaml), "job.yaml", &err), 0);
	ja = job_config_to_json(&a);
	assert_int_equal(job_config_from_json(&b, ja, &err), 0);
	jb = job_config_to_json(&b);
	json_object_del(ja, "path");
	json_object_del(jb, "path");
	assert_true(json_equal(ja, jb));
	assert_int_equal(b.gpus_per_node, 2);
	assert_int_equal(b.procs_per_node, 0);
	assert_int_equal(b.timeout_ms, 90000);
	assert_int_equal(b.preflight, 1);
	assert_string_equal(b.command.v[1], "a b;$(x)\n");
	assert_string_equal(kvlist_get(&b.env, "B_2"), "'");
	json_decref(ja);
	json_decref(jb);
	job_config_release(&a);
	job_config_release(&b);
	strbuf_release(&err);
}

/* burn_in: one node, or the nodes of a fabric test (dtctl resume --burn-in's third step) */
static void test_burn_in_fabric(void **state)
{
	struct job_config j;
	struct strbuf err = STRBUF_INIT;
	json_t *o = json_pack("{s:{s:s},s:b,s:s,s:i}", "trainer", "fabric", "full", "burn_in", 1,
			      "include_nodes", "n1,n2", "nodes", 2);

	assert_int_equal(job_config_from_json(&j, o, &err), 0);
	assert_int_equal(j.burn_in, 1);
	assert_int_equal(j.nodes, 2);
	job_config_release(&j);
	json_object_del(json_object_get(o, "trainer"), "fabric");
	json_object_set_new(json_object_get(o, "trainer"), "model", json_string("mlp"));
	assert_int_equal(job_config_from_json(&j, o, &err), -1);
	assert_non_null(strstr(err.buf, "'burn_in' is for one node"));
	json_decref(o);
	strbuf_release(&err);
}

static void test_trainer_defaults_to_mpi(void **state)
{
	struct job_config j;
	struct strbuf err = STRBUF_INIT;
	json_t *o = json_pack("{s:{s:s}}", "trainer", "model", "mlp");

	assert_int_equal(job_config_from_json(&j, o, &err), 0);
	assert_int_equal(j.launcher, LAUNCHER_MPI);
	assert_int_equal(j.procs_per_node, 1);
	assert_int_equal(j.nodes, 1);
	job_config_release(&j);
	json_decref(o);
	strbuf_release(&err);
}

static void test_refused(void **state)
{
	static const char *const bad[] = {
		"{\"command\": [\"true\"], \"bogus\": 1}",
		"{\"command\": []}",
		"{\"command\": \"true\"}",
		"{\"command\": [\"true\", 3]}",
		"{}",
		"{\"command\": [\"true\"], \"trainer\": {\"model\": \"mlp\"}}",
		"{\"command\": [\"true\"], \"nodes\": 0}",
		"{\"command\": [\"true\"], \"gpus_per_node\": 65}",
		"{\"command\": [\"true\"], \"gpus_per_node\": 2, \"procs_per_node\": 2}",
		"{\"command\": [\"true\"], \"env\": {\"A=B\": \"x\"}}",
		"{\"command\": [\"true\"], \"env\": {\"A\": 1}}",
		"{\"command\": [\"true\"], \"launcher\": \"ssh\"}",
		"{\"command\": [\"true\"], \"timeout_ms\": -1}",
		"{\"command\": [\"true\"], \"include_nodes\": \"n[3-1]\"}",
		"{\"command\": [\"\"]}",
		"{\"command\": [\"true\"], \"elastic_min_nodes\": 2}",   /* > nodes (1) */
		"{\"command\": [\"true\"], \"burn_in\": true}",   /* which node? */
		"{\"command\": [\"true\"], \"burn_in\": 1, \"include_nodes\": \"n1\"}",
		"{\"command\": [\"true\"], \"burn_in\": true, \"include_nodes\": \"n1\", "
		"\"nodes\": 2}",
		"[1]",
		"{\"command\": [\"true\"], \"container\": \"--privileged\"}",
		"{\"command\": [\"true\"], \"container\": \"./rel.tar\"}",   /* dtctl resolves it */
		"{\"command\": [\"true\"], \"container\": \"/s/i.tar\"}",    /* a file needs its digest */
		"{\"command\": [\"true\"], \"container\": \"/s/i.tar\", \"container_digest\": "
		"\"sha256:00\"}",
		"{\"command\": [\"true\"], \"container_digest\": \"sha256:"
		"0000000000000000000000000000000000000000000000000000000000000000\"}",
		"{\"command\": [\"true\"], \"container\": \"a b\"}",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct job_config j;
		struct strbuf err = STRBUF_INIT;
		json_t *o = json_loads(bad[i], 0, NULL);

		assert_non_null(o);
		if (job_config_from_json(&j, o, &err) == 0)
			fail_msg("accepted: %s", bad[i]);
		assert_true(err.len > 0);
		json_decref(o);
		strbuf_release(&err);
	}
}

/* container: as job.yaml has it, as dtctl sends it resolved, and into every task request */
static void test_container(void **state)
{
	static const char yaml[] = "command: [true]\ncontainer: docker.io/library/debian:12\n";
	static const char digest[] =
		"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	struct job_config a, b;
	struct strbuf err = STRBUF_INIT;
	json_t *ja;

	assert_int_equal(job_config_parse(&a, yaml, strlen(yaml), "job.yaml", &err), 0);
	assert_string_equal(a.container, "docker.io/library/debian:12");
	assert_null(a.container_digest);
	free(a.container);
	a.container = strdup("/shared/images/x.image");
	a.container_digest = strdup(digest);
	ja = job_config_to_json(&a);
	assert_int_equal(job_config_from_json(&b, ja, &err), 0);
	assert_string_equal(b.container, "/shared/images/x.image");
	assert_string_equal(b.container_digest, digest);
	{
		struct launch_node n = { .name = "n1", .address = "10.0.0.1", .host = "10.0.0.1" };
		struct launch_opts o = { .job_id = "j-1", .job_dir = "/shared/jobs/j-1",
					 .log_root = "/shared" };
		struct launch_plan p;
		json_t *req, *c;

		assert_int_equal(launch_plan_build(&p, &b, &n, 1, &o, &err), 0);
		req = launch_task_request(&p, 0);
		c = json_object_get(req, "container");
		assert_non_null(c);
		assert_string_equal(json_string_value(json_object_get(c, "image")),
				    "/shared/images/x.image");
		assert_string_equal(json_string_value(json_object_get(c, "digest")), digest);
		assert_string_equal(json_string_value(json_object_get(c, "node")), "n1");
		json_decref(req);
		launch_plan_release(&p);
	}
	json_decref(ja);
	job_config_release(&a);
	job_config_release(&b);
	/* refused in job.yaml with its place */
	strbuf_reset(&err);
	assert_int_equal(job_config_parse(&a, "command: [true]\ncontainer: -v/:/h\n", 34,
					  "job.yaml", &err), -1);
	assert_non_null(strstr(err.buf, "job.yaml:2:"));
	assert_non_null(strstr(err.buf, "container"));
	strbuf_release(&err);
}

static void test_hostfile_uses_host(void **state)
{
	struct job_config job;
	struct launch_plan p;
	struct strbuf err = STRBUF_INIT;
	struct launch_node nodes[2] = { { "n1", "10.0.0.1", NULL, "10.0.0.1", 7070, NULL, NULL },
					{ "n2", "10.0.0.2", NULL, NULL, 7070, NULL, NULL } };
	struct launch_opts o = { .job_id = "j-1", .job_dir = "/s/jobs/j-1", .master_port = 1 };
	int root_ok = 0;

	assert_int_equal(job_config_parse(&job, "procs_per_node: 2\nlauncher: mpi\ncommand: [x]\n",
					  45, "j.yaml", &err), 0);
	assert_int_equal(launch_plan_build(&p, &job, nodes, 2, &o, &err), 0);
	assert_string_equal(p.hostfile, "10.0.0.1 slots=2\nn2 slots=2\n");
	for (size_t i = 0; i < p.tasks[0].env.nr; i++)
		if (!strcmp(p.tasks[0].env.v[i], "OMPI_ALLOW_RUN_AS_ROOT=1"))
			root_ok = 1;
	assert_true(root_ok);
	launch_plan_release(&p);
	job_config_release(&job);
	strbuf_release(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_trainer_defaults_to_mpi),
		cmocka_unit_test(test_burn_in_fabric),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_hostfile_uses_host),
		cmocka_unit_test(test_container),
	};

	return cmocka_run_group_tests_name("jobspec", tests, NULL, NULL);
}
