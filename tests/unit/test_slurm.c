/*
 * test_slurm.c - the pure parts of the Slurm backend (scheduler/slurm.c): the
 * sbatch argv from cluster.yaml and a job, the batch script's promise to quote
 * nothing, squeue's and sinfo's lines as Slurm 22.05 prints them, Slurm's
 * states, the partition's capacity with the numbers, and which key of
 * cluster.yaml a refused sbatch points at; what a restarted dtsched reads of
 * its own Slurm jobs; dtagent --slurm's GPU map.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agent/ranklog.h"
#include "scheduler/slurm.h"
#include "strbuf.h"
#include "strvec.h"
#include "usage.h"

static void load(struct cluster_config *cc, const char *yaml)
{
	struct strbuf err = STRBUF_INIT;

	if (cluster_config_parse(cc, yaml, strlen(yaml), "cluster.yaml", &err) < 0)
		fail_msg("%s", err.buf);
	strbuf_release(&err);
}

static char *joined(const struct strvec *v)
{
	struct strbuf sb = STRBUF_INIT;

	for (size_t i = 0; i < v->nr; i++)
		strbuf_addf(&sb, "%s%s", i ? " " : "", v->v[i]);
	return strbuf_detach(&sb, NULL);
}

static void test_sbatch_argv(void **state)
{
	struct cluster_config cc;
	struct strvec argv = STRVEC_INIT;
	struct slurm_request r = {
		.job_id = "j-000042", .name = "mlp; rm -rf /", .attempt = 1, .nodes = 2,
		.gpus_per_node = 4, .timeout_ms = 90 * 60 * 1000LL,
		.output_dir = "/nfs/50%/slurm", .script = "/h/slurm/j-000042.sh",
	};
	char *s;

	(void)state;
	load(&cc, "shared_dir: /nfs\nbackend: slurm\npartition: gpu\naccount: ml\nqos: high\n"
	     "slurm: {constraint: a100, mem: 64G}\n");
	slurm_sbatch_argv(&cc, &r, &argv);
	s = joined(&argv);
	assert_string_equal(s, "sbatch --parsable --nodes=2 --ntasks-per-node=1 --exclusive --gres=gpu:4 "
			    "--time=91 --job-name=mlp; rm -rf / --comment=dtctl j-000042 attempt 1 "
			    "--requeue --signal=B:USR1@120 --output=/nfs/50%%/slurm/j-000042.1-%j.out --partition=gpu "
			    "--account=ml --qos=high --constraint=a100 --mem=64G "
			    "/h/slurm/j-000042.sh");
	/* the user's name is one argv word, never split or interpreted */
	assert_string_equal(argv.v[7], "--job-name=mlp; rm -rf /");
	free(s);
	strvec_clear(&argv);
	cluster_config_release(&cc);

	/* a CPU job without a timeout on Slurm's defaults */
	load(&cc, "shared_dir: /nfs\nbackend: slurm\n");
	r.gpus_per_node = 0;
	r.cpus_per_node = 3;
	r.timeout_ms = 0;
	r.output_dir = NULL;
	r.name = "x";
	r.include = "dtnode[1-2]";
	r.exclude = "dtnode3";
	slurm_sbatch_argv(&cc, &r, &argv);
	s = joined(&argv);
	assert_string_equal(s, "sbatch --parsable --nodes=2 --ntasks-per-node=1 --exclusive --cpus-per-task=3 "
			    "--job-name=x --comment=dtctl j-000042 attempt 1 --requeue --signal=B:USR1@120 "
			    "--nodelist=dtnode[1-2] --exclude=dtnode3 /h/slurm/j-000042.sh");
	free(s);
	strvec_clear(&argv);
	/* dtsched's head id names whose job it is (a restarted dtsched finds its own) */
	r.head = "0123abcd";
	slurm_sbatch_argv(&cc, &r, &argv);
	assert_string_equal(argv.v[7], "--comment=dtctl j-000042 attempt 1 head 0123abcd");
	strvec_clear(&argv);
	cluster_config_release(&cc);
}

/* sbatch's argv for r on the cluster.yaml text yaml, as one string */
static char *argv_on(const char *yaml, const struct slurm_request *r)
{
	struct cluster_config cc;
	struct strvec argv = STRVEC_INIT;
	char *s;

	load(&cc, yaml);
	slurm_sbatch_argv(&cc, r, &argv);
	s = joined(&argv);
	strvec_clear(&argv);
	cluster_config_release(&cc);
	return s;
}

/* slurm: {signal, warn_s}: Slurm's warning as configured; warn_s 0 and a pack's allocation: none */
static void test_sbatch_warning(void **state)
{
	static const char *yaml = "shared_dir: /nfs\nbackend: slurm\n"
				  "slurm: {signal: SIGUSR2, warn_s: 300, mem: 4G}\n";
	struct slurm_request r = { .job_id = "j-000007", .name = "w", .nodes = 1,
				   .gpus_per_node = 1, .script = "/h/slurm/job.sh" };
	char *s;

	(void)state;
	s = argv_on(yaml, &r);
	assert_string_equal(s, "sbatch --parsable --nodes=1 --ntasks-per-node=1 --exclusive "
			    "--gres=gpu:1 --job-name=w --comment=dtctl j-000007 attempt 0 --requeue "
			    "--signal=B:USR2@300 --mem=4G /h/slurm/job.sh");
	free(s);
	r.no_warning = 1;          /* an allocation dtsched fills (pack:) */
	s = argv_on(yaml, &r);
	assert_null(strstr(s, "--signal"));
	free(s);
	r.no_warning = 0;
	s = argv_on("shared_dir: /nfs\nbackend: slurm\nslurm: {warn_s: 0}\n", &r);
	assert_null(strstr(s, "--signal"));
	free(s);
}

/* pack: allocation's size: as few nodes as hold `slots` jobs whole, or as given */
static void test_pack_size(void **state)
{
	static const struct {
		int max_gpus, gpu, job_nodes, per_node, slots, alloc_nodes, alloc_per;
		int nodes, per;
	} cases[] = {
		{ 2, 1, 1, 1, 8, 0, 0, 4, 2 },     /* 8 one-GPU trials, 2-GPU nodes: 4 x 2 */
		{ 4, 1, 1, 1, 3, 0, 0, 1, 3 },     /* 3 on a 4-GPU node: 1 x 3 */
		{ 4, 1, 1, 2, 5, 0, 0, 3, 4 },     /* 5 two-GPU trials: 2 per node, 3 nodes */
		{ 4, 1, 1, 3, 4, 0, 0, 4, 3 },     /* 3-GPU trials: one per 4-GPU node */
		{ 4, 1, 2, 2, 2, 0, 0, 4, 2 },     /* 2-node trials: side by side */
		{ 2, 1, 1, 4, 2, 0, 0, 2, 4 },     /* more than a node has: theirs (never fits) */
		{ 4, 1, 1, 1, 8, 2, 0, 2, 4 },     /* allocation: {nodes: 2}: whole nodes */
		{ 4, 1, 1, 1, 8, 3, 1, 3, 1 },     /* allocation: {nodes: 3, gpus: 1} */
		{ 4, 0, 1, 1, 6, 0, 0, 1, 6 },     /* CPU trials: 6 of max_cpus 8 */
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct slurm_capacity c = { .nodes = 4, .all_nodes = 4, .max_gpus = cases[i].max_gpus,
					    .max_cpus = 8, .nodes_with_gpus = 4 };
		int nodes = -1, per = -1;

		slurm_pack_size(&c, cases[i].gpu, cases[i].job_nodes, cases[i].per_node,
				cases[i].slots, cases[i].alloc_nodes, cases[i].alloc_per, &nodes, &per);
		assert_int_equal(nodes, cases[i].nodes);
		assert_int_equal(per, cases[i].per);
	}
}

static void test_time(void **state)
{
	(void)state;
	assert_int_equal(slurm_time_minutes(1), 2);
	assert_int_equal(slurm_time_minutes(60000), 2);
	assert_int_equal(slurm_time_minutes(60001), 3);
	assert_int_equal(slurm_time_minutes(2 * 3600 * 1000LL), 121);
}

/* The script: every value a "$VAR" of the environment, nothing else expanded. */
static void test_script_quotes_nothing(void **state)
{
	const char *s = slurm_script();

	(void)state;
	assert_true(!strncmp(s, "#!/bin/sh\n", 10));
	for (const char *p = s; (p = strchr(p, '$')); p++) {
		/* each $ opens "${NAME}"-free "$NAME" inside double quotes */
		assert_true(p > s && p[-1] == '"');
		assert_true(!strncmp(p + 1, "DTCTL_SLURM_DTCTL\"", 18) ||
			    !strncmp(p + 1, "DTCTL_SLURM_HEAD\"", 17));
	}
	assert_null(strchr(s, '`'));
	assert_null(strchr(s, '\''));
}

static void test_phases(void **state)
{
	(void)state;
	assert_int_equal(slurm_phase_of("PENDING"), SLURM_WAITING);
	assert_int_equal(slurm_phase_of("REQUEUED"), SLURM_WAITING);
	assert_int_equal(slurm_phase_of("RUNNING"), SLURM_RUNNING);
	assert_int_equal(slurm_phase_of("COMPLETING"), SLURM_ENDING);
	assert_int_equal(slurm_phase_of("COMPLETED"), SLURM_DONE);
	assert_int_equal(slurm_phase_of("CANCELLED"), SLURM_CANCELLED);
	assert_int_equal(slurm_phase_of("CANCELLED by 1000"), SLURM_CANCELLED);
	/* preemption and time limits are not failures */
	assert_int_equal(slurm_phase_of("PREEMPTED"), SLURM_PREEMPTED);
	assert_int_equal(slurm_phase_of("TIMEOUT"), SLURM_TIMEOUT);
	assert_int_equal(slurm_phase_of("DEADLINE"), SLURM_TIMEOUT);
	assert_int_equal(slurm_phase_of("NODE_FAIL"), SLURM_NODE_FAIL);
	assert_int_equal(slurm_phase_of("OUT_OF_MEMORY"), SLURM_FAILED);
	assert_int_equal(slurm_phase_of("FAILED"), SLURM_FAILED);
	assert_int_equal(slurm_phase_of("SOMETHING_NEW"), SLURM_FAILED);
	assert_int_equal(slurm_phase_of("RUN"), SLURM_FAILED);
	assert_false(slurm_phase_final(SLURM_ENDING));
	assert_true(slurm_phase_final(SLURM_PREEMPTED));
}

/* as Slurm 22.05's squeue -h -t all -O SLURM_SQUEUE_FORMAT printed them here */
static void test_squeue(void **state)
{
	json_t *jobs = json_object(), *o;

	(void)state;
	assert_int_equal(slurm_squeue_parse("7|PENDING|0||6:00|Resources\n"
					    "1|RUNNING|0|dtnode[1-2]|5:47|None\n"
					    "junk line\n"
					    "x|RUNNING|0|n|5:00|None\n"
					    "4|RUNNING|0|n|None\n"
					    "2|PENDING|1||UNLIMITED|BeginTime\n"
					    "3|FAILED|0||INVALID|BadConstraints", jobs), 4);
	o = json_object_get(jobs, "1");
	assert_string_equal(json_string_value(json_object_get(o, "state")), "RUNNING");
	assert_string_equal(json_string_value(json_object_get(o, "nodes")), "dtnode[1-2]");
	assert_string_equal(json_string_value(json_object_get(o, "reason")), "None");
	assert_int_equal(json_integer_value(json_object_get(o, "left_s")), 347);
	o = json_object_get(jobs, "2");
	assert_int_equal(json_integer_value(json_object_get(o, "restarts")), 1);
	assert_string_equal(json_string_value(json_object_get(o, "reason")), "BeginTime");
	assert_int_equal(json_integer_value(json_object_get(o, "left_s")), SLURM_UNLIMITED);
	assert_null(json_object_get(json_object_get(jobs, "3"), "left_s"));   /* not a time */
	assert_null(json_object_get(jobs, "x"));
	assert_null(json_object_get(jobs, "4"));   /* the old format: a field short */
	json_decref(jobs);
}

/* squeue's TimeLeft as Slurm prints it (secs2time_str), and what it never prints */
static void test_time_parse(void **state)
{
	(void)state;
	assert_int_equal(slurm_time_parse("0:00"), 0);
	assert_int_equal(slurm_time_parse("5:47"), 347);
	assert_int_equal(slurm_time_parse("2:03:04"), 7384);
	assert_int_equal(slurm_time_parse("1-00:00:05"), 86405);
	assert_int_equal(slurm_time_parse("UNLIMITED"), SLURM_UNLIMITED);
	assert_int_equal(slurm_time_parse("INVALID"), -1);
	assert_int_equal(slurm_time_parse("NOT_SET"), -1);
	assert_int_equal(slurm_time_parse(""), -1);
	assert_int_equal(slurm_time_parse(NULL), -1);
	assert_int_equal(slurm_time_parse("47"), -1);
	assert_int_equal(slurm_time_parse("1-05:00"), -1);
	assert_int_equal(slurm_time_parse("1:2:3:4"), -1);
	assert_int_equal(slurm_time_parse("5:"), -1);
	assert_int_equal(slurm_time_parse("-5:00"), -1);
	assert_int_equal(slurm_time_parse("5:00x"), -1);
	assert_int_equal(slurm_time_parse("99999999999999999999:00"), -1);
}

/* a retry in the Slurm job it failed in: does what is left cover its timeout? */
static void test_time_covers(void **state)
{
	static const struct {
		long long left_ms, timeout_ms;
		int covers;
		const char *why;
	} cases[] = {
		{ 347000, 300000, 1, "Slurm job 77 has 5m47s left of its time limit, which covers "
		  "the job's timeout 5m" },
		{ 310000, 300000, 1, "Slurm job 77 has 5m10s left of its time limit, which covers "
		  "the job's timeout 5m" },
		{ 309999, 300000, 0, "Slurm job 77 has 5m9s left of its time limit, less than the "
		  "job's timeout 5m and 10s to spare" },
		{ 232500, 300000, 0, "Slurm job 77 has 3m52s left of its time limit, less than the "
		  "job's timeout 5m" },
		{ 0, 300000, 0, "Slurm job 77 has 0s left of its time limit, less than the job's "
		  "timeout 5m" },
		{ SLURM_UNLIMITED, 300000, 1, "Slurm job 77, which still runs without time limit" },
		{ -1, 300000, 0, "squeue did not say what is left of Slurm job 77's time limit" },
		{ 5000, 0, 1, "Slurm job 77, which still runs" },        /* no timeout */
		{ -1, 0, 1, "Slurm job 77, which still runs" },
	};
	struct strbuf why = STRBUF_INIT;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		strbuf_reset(&why);
		assert_int_equal(slurm_time_covers(77, cases[i].left_ms, cases[i].timeout_ms, &why),
				 cases[i].covers);
		assert_string_equal(why.buf, cases[i].why);
	}
	strbuf_release(&why);
}

/* squeue --me at dtsched's start: the comment last, kept whole; ours told from others' */
static void test_mine_and_comment(void **state)
{
	json_t *jobs = json_object(), *o;
	char id[16];
	int attempt = -1;

	(void)state;
	assert_int_equal(slurm_mine_parse("7|PENDING|0||Resources|/h/slurm/job.sh|dtctl j-000007 "
					  "attempt 2 head ab12\n"
					  "8|RUNNING|1|dtnode1|None|/x/run.sh|mine | with bars\n"
					  "9|RUNNING|0|n|None|/x\n"
					  "junk\n", jobs), 2);
	o = json_object_get(jobs, "7");
	assert_string_equal(json_string_value(json_object_get(o, "command")), "/h/slurm/job.sh");
	assert_string_equal(json_string_value(json_object_get(o, "comment")),
			    "dtctl j-000007 attempt 2 head ab12");
	o = json_object_get(jobs, "8");
	assert_string_equal(json_string_value(json_object_get(o, "comment")), "mine | with bars");
	assert_int_equal(json_integer_value(json_object_get(o, "restarts")), 1);
	assert_null(json_object_get(jobs, "9"));
	json_decref(jobs);

	assert_int_equal(slurm_comment_parse("dtctl j-000007 attempt 2 head ab12", "ab12", id,
					     sizeof(id), &attempt), 0);
	assert_string_equal(id, "j-000007");
	assert_int_equal(attempt, 2);
	/* another head's, a comment of the user's own, no head, trailing words, no head id */
	assert_int_equal(slurm_comment_parse("dtctl j-000007 attempt 2 head ab13", "ab12", id,
					     sizeof(id), &attempt), -1);
	assert_int_equal(slurm_comment_parse("my run", "ab12", id, sizeof(id), &attempt), -1);
	assert_int_equal(slurm_comment_parse("dtctl j-000007 attempt 2", "ab12", id, sizeof(id),
					     &attempt), -1);
	assert_int_equal(slurm_comment_parse("dtctl j-000007 attempt 2 head ab12 x", "ab12", id,
					     sizeof(id), &attempt), -1);
	assert_int_equal(slurm_comment_parse("dtctl j-000007 attempt -1 head ab12", "ab12", id,
					     sizeof(id), &attempt), -1);
	assert_int_equal(slurm_comment_parse("dtctl j-000007 attempt 2 head ", "", id, sizeof(id),
					     &attempt), -1);
	/* an id longer than the buffer */
	assert_int_equal(slurm_comment_parse("dtctl j-0000000000000000007 attempt 2 head ab12",
					     "ab12", id, sizeof(id), &attempt), -1);
}

/* dtagent --slurm's GPU i is the i-th device of its step (tasks and mpi ranks alike) */
static void test_gpu_map(void **state)
{
	static const char *const cases[][3] = {
		{ "2,3", "0,1", "2,3" }, { "2,3", "1", "3" }, { "4,5,6,7", "3,0", "7,4" },
		{ "2,3", "-1", "-1" }, { "2,3", "5", "5" }, { "2,3", "x,1", "x,3" },
		{ "2,3", "", "" }, { "GPU-aa,GPU-bb", "1", "GPU-bb" },
	};
	struct strbuf out = STRBUF_INIT;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		strbuf_reset(&out);
		gpu_map_translate(cases[i][0], cases[i][1], &out);
		assert_string_equal(out.buf, cases[i][2]);
	}
	strbuf_release(&out);
}

static void test_sinfo_and_fits(void **state)
{
	struct slurm_capacity c;
	struct strbuf why = STRBUF_INIT;

	(void)state;
	assert_int_equal(slurm_sinfo_parse("dtnode1|gpu:4|4|idle\n"
					   "dtnode2|gpu:a100:4(S:0-1)|4|mix\n"
					   "dtnode3|gpu:8|16|down*\n"
					   "dtnode4|(null)|32|alloc\n", &c), 4);
	assert_int_equal(c.all_nodes, 4);
	assert_int_equal(c.nodes, 3);
	assert_int_equal(c.max_gpus, 4);
	assert_int_equal(c.nodes_with_gpus, 2);
	assert_int_equal(c.max_cpus, 32);
	assert_int_equal(slurm_fits(&c, "gpu", 2, 4, 0, &why), 0);
	assert_int_equal(slurm_fits(&c, "gpu", 1, 5, 0, &why), -1);
	assert_string_equal(why.buf, "asks for 5 GPUs per node; the most a node of Slurm's "
			    "partition gpu has is 4 (sinfo: gres)");
	strbuf_reset(&why);
	assert_int_equal(slurm_fits(&c, "gpu", 3, 1, 0, &why), -1);
	assert_string_equal(why.buf, "asks for 3 nodes with GPUs; Slurm's partition gpu has 2 "
			    "(of 4 nodes, 3 up)");
	strbuf_reset(&why);
	assert_int_equal(slurm_fits(&c, NULL, 5, 0, 2, &why), -1);
	assert_string_equal(why.buf, "asks for 5 nodes; Slurm's partition (the default) has 4");
	strbuf_reset(&why);
	assert_int_equal(slurm_fits(&c, NULL, 1, 0, 33, &why), -1);
	assert_string_equal(why.buf, "asks for 33 CPUs per node; the most a node of Slurm's "
			    "partition (the default) has is 32 (sinfo)");
	strbuf_reset(&why);
	assert_int_equal(slurm_sinfo_parse("", &c), 0);
	assert_int_equal(slurm_fits(&c, "x", 1, 0, 1, &why), -1);
	assert_string_equal(why.buf, "Slurm's partition x has no nodes (sinfo)");
	strbuf_release(&why);
}

static void test_refusal_source(void **state)
{
	struct cluster_config cc;
	struct strbuf sb = STRBUF_INIT;

	(void)state;
	load(&cc, "shared_dir: /nfs\nbackend: slurm\npartition: gpux\nqos: high\n"
	     "slurm:\n  constraint: zz\n  reservation: r1\n");
	slurm_refusal_source(&cc, "sbatch: error: invalid partition specified: gpux", &sb);
	assert_string_equal(sb.buf, "cluster.yaml:3:12: key 'partition' ('gpux')");
	strbuf_reset(&sb);
	slurm_refusal_source(&cc, "sbatch: error: Batch job submission failed: Invalid qos "
			     "specification", &sb);
	assert_string_equal(sb.buf, "cluster.yaml:4:6: key 'qos' ('high')");
	strbuf_reset(&sb);
	slurm_refusal_source(&cc, "sbatch: error: Batch job submission failed: Invalid feature "
			     "specification", &sb);
	assert_string_equal(sb.buf, "cluster.yaml:6:15: key 'slurm.constraint' ('zz')");
	strbuf_reset(&sb);
	slurm_refusal_source(&cc, "sbatch: error: Batch job submission failed: Requested "
			     "reservation is invalid", &sb);
	assert_string_equal(sb.buf, "cluster.yaml:7:16: key 'slurm.reservation' ('r1')");
	strbuf_reset(&sb);
	slurm_refusal_source(&cc, "sbatch: error: Slurm temporarily unable to accept job", &sb);
	assert_string_equal(sb.buf, "");
	strbuf_release(&sb);
	cluster_config_release(&cc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sbatch_argv),
		cmocka_unit_test(test_sbatch_warning),
		cmocka_unit_test(test_pack_size),
		cmocka_unit_test(test_time),
		cmocka_unit_test(test_script_quotes_nothing),
		cmocka_unit_test(test_phases),
		cmocka_unit_test(test_squeue),
		cmocka_unit_test(test_time_parse),
		cmocka_unit_test(test_time_covers),
		cmocka_unit_test(test_mine_and_comment),
		cmocka_unit_test(test_gpu_map),
		cmocka_unit_test(test_sinfo_and_fits),
		cmocka_unit_test(test_refusal_source),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
