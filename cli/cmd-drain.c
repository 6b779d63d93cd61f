/*
 * cmd-drain.c - `dtctl drain NODE` (dtsched stops placing work on it) and
 * its undo `dtctl resume NODE`: the same request to dtsched but for its last
 * word (POST /v1/nodes/<name>/drain, /resume), so both live here.
 *
 * `dtctl resume --burn-in NODE` re-admits a node only after it passed a
 * short check (docs/agents.md, "Node health"): the doctor's checks of that
 * node over SSH (cmd_doctor), then a short dttrain run through dtsched as a
 * one-node job pinned to it, on all of its GPUs when it has any (the job's
 * spec says burn_in, which lets it run on the drained node).  It says what
 * ran and why it passed or failed; a failure leaves the node drained.
 */
#include "builtin.h"
#include "head.h"
#include "jobdir.h"
#include "json.h"
#include "parse-options.h"
#include "protocol.h"
#include "setup.h"
#include "term.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BURN_IN_POLL_MS 200
#define BURN_IN_PENDING_MS (60 * 1000)   /* not placed by then: cancelled, failed */

static const char *const burn_in_trainer[][2] = {
	{ "model", "mlp" }, { "steps", "20" }, { "train-size", "2048" }, { "val-size", "256" },
};

/* Submit the burn-in job for `node`; its id into id (0), or an exit code. */
static int burn_in_submit(const char *node, int gpus, struct strbuf *id, struct strbuf *what)
{
	struct job_config job;
	struct strbuf name = STRBUF_INIT;
	json_t *req, *reply = NULL;
	int code;

	job_config_init(&job);
	strbuf_addf(&name, "burn-in-%s", node);
	job.name = strbuf_detach(&name, NULL);
	job.has_trainer = 1;
	job.launcher = LAUNCHER_MPI;
	strbuf_addstr(what, "dttrain");
	for (size_t i = 0; i < ARRAY_SIZE(burn_in_trainer); i++) {
		kvlist_set(&job.trainer, burn_in_trainer[i][0], burn_in_trainer[i][1]);
		strbuf_addf(what, " --%s=%s", burn_in_trainer[i][0], burn_in_trainer[i][1]);
	}
	if (gpus > 0) {
		job.gpus_per_node = gpus;
		job.procs_per_node = 0;
		strbuf_addf(what, " on its %d GPU%s", gpus, gpus == 1 ? "" : "s");
	} else {
		strbuf_addstr(what, " on its CPU (no GPUs)");
	}
	job.node_include = xstrdup(node);
	job.timeout_ms = 5 * 60 * 1000;   /* dtsched ends it as TIMEOUT */
	job.burn_in = 1;
	req = json_pack("{s:o,s:s,s:s}", "job", job_config_to_json(&job), "shared_dir",
			the_cluster.shared_dir, "user", cli_whoami());
	code = head_api("POST", DT_PATH_JOBS, req, &reply, NULL);
	if (!code)
		strbuf_addstr(id, json_get_str(json_object_get(reply, "job"), "id", "?"));
	json_decref(req);
	json_decref(reply);
	job_config_release(&job);
	return code;
}

/*
 * Wait until job `id` is final; its JSON in *out (0), or an exit code.  A job
 * still PENDING after BURN_IN_PENDING_MS is cancelled: it says why it waits.
 */
static int burn_in_wait(const char *id, json_t **out)
{
	for (long long waited = 0;; waited += BURN_IN_POLL_MS) {
		json_t *reply = NULL, *j;
		int code = head_api_id("GET", DT_PATH_JOB_PREFIX, id, "", NULL, &reply, NULL);
		const char *st;

		if (code) {
			json_decref(reply);
			return code;
		}
		j = json_object_get(reply, "job");
		st = json_get_str(j, "state", DT_JOB_PENDING);
		if (strcmp(st, DT_JOB_PENDING) && strcmp(st, DT_JOB_RUNNING)) {
			*out = json_incref(j);
			json_decref(reply);
			return 0;
		}
		if (!strcmp(st, DT_JOB_PENDING) && waited >= BURN_IN_PENDING_MS) {
			error("burn-in job %s was not placed in %d s (%s): cancelled", id,
			      BURN_IN_PENDING_MS / 1000, json_get_str(j, "reason", "?"));
			json_decref(reply);
			head_api_id("POST", DT_PATH_JOB_PREFIX, id, DT_PATH_CANCEL_SUFFIX, NULL,
				    &reply, NULL);
			json_decref(reply);
			return DT_EXIT_FAIL;
		}
		json_decref(reply);
		usleep(BURN_IN_POLL_MS * 1000);
	}
}

/*
 * The burn-in of `node`: 0 when it passed (then the caller resumes it), else
 * the exit code after saying which step failed and why.
 */
static int burn_in(const char *node)
{
	const char *doctor_argv[] = { "doctor", "--nodes", node, NULL };
	struct strbuf id = STRBUF_INIT, what = STRBUF_INIT;
	json_t *reply = NULL, *job = NULL, *n;
	const char *state;
	int code, gpus;

	if ((code = cluster_setup(NEED_CLUSTER | NEED_SHARED)))
		return code;
	code = head_api_id("GET", DT_PATH_NODE_PREFIX, node, "", NULL, &reply, NULL);
	if (code)
		return json_decref(reply), code;
	n = json_object_get(reply, "node");
	gpus = (int)json_get_int(n, "gpus_total", 0);
	state = json_get_str(n, "state", "?");
	if (strcmp(state, DT_NODE_UP) && strcmp(state, DT_NODE_DRAINED)) {
		error("node '%s' is %s: no burn-in can run there; start its agent (dtctl agents "
		      "start) and try again", node, state);
		json_decref(reply);
		return DT_EXIT_FAIL;
	}
	json_decref(reply);

	printf("burn-in 1/2: dtctl doctor --nodes %s\n", term_str(node));
	fflush(stdout);
	if ((code = cmd_doctor(ARRAY_SIZE(doctor_argv) - 1, doctor_argv))) {
		printf("burn-in of %s FAILED: the doctor's checks failed (above); %s stays "
		       "drained\n", term_str(node), term_str(node));
		return code;
	}
	if ((code = burn_in_submit(node, gpus, &id, &what)))
		goto out;
	printf("burn-in 2/2: job %s: %s\n", term_str(id.buf), term_str(what.buf));
	fflush(stdout);
	if ((code = burn_in_wait(id.buf, &job)))
		goto out;
	if (strcmp(json_get_str(job, "state", "?"), DT_JOB_COMPLETED)) {
		printf("burn-in of %s FAILED: job %s ended %s%s%s (dtctl show %s; dtctl logs %s); "
		       "%s stays drained\n", term_str(node), term_str(id.buf),
		       term_str(json_get_str(job, "state", "?")),
		       json_get_str(job, "reason", NULL) ? ": " : "",
		       term_str(json_get_str(job, "reason", "")), term_str(id.buf),
		       term_str(id.buf), term_str(node));
		code = DT_EXIT_FAIL;
		goto out;
	}
	printf("burn-in of %s passed: the doctor's checks passed and job %s COMPLETED in "
	       "%.1f s\n", term_str(node), term_str(id.buf),
	       (double)json_get_int(job, "elapsed_ms", 0) / 1000);
out:
	json_decref(job);
	strbuf_release(&id);
	strbuf_release(&what);
	return code;
}

static int drain_or_resume(int argc, const char **argv, const char *suffix, const char *verb)
{
	const char *const drain_usage[] = { "dtctl drain <node>", NULL };
	const char *const resume_usage[] = {
		"dtctl resume [--burn-in] <node>",
		"",
		"Without --burn-in the node is resumed at once, with no check (the burn-in is",
		"skipped): only after the fault is known to be fixed.",
		NULL,
	};
	int resume = verb[0] == 'r', with_burn_in = 0;
	struct option drain_opts[] = { OPT_END() };
	struct option resume_opts[] = {
		OPT_BOOL(0, "burn-in", &with_burn_in, "only once the doctor and a dttrain job on it "
			 "pass"),
		OPT_END(),
	};
	const char *const *usage = resume ? resume_usage : drain_usage;
	struct option *opts = resume ? resume_opts : drain_opts;
	json_t *reply;
	int code;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	if (argc != 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (with_burn_in && (code = burn_in(argv[0])))
		return code;
	code = head_api_id("POST", DT_PATH_NODE_PREFIX, argv[0], suffix, NULL, &reply, NULL);
	if (!code) {
		json_t *n = json_object_get(reply, "node");

		printf("%s: %s (state %s)\n", term_str(argv[0]), verb,
		       term_str(json_get_str(n, "state", "?")));
	}
	json_decref(reply);
	return code;
}

int cmd_drain(int argc, const char **argv)
{
	return drain_or_resume(argc, argv, DT_PATH_DRAIN_SUFFIX, "drained");
}

int cmd_resume(int argc, const char **argv)
{
	return drain_or_resume(argc, argv, DT_PATH_RESUME_SUFFIX, "resumed");
}
