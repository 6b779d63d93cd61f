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

#define BURN_IN_PENDING_MS (60 * 1000)   /* not placed by then: cancelled, failed */

static const char *const burn_in_trainer[][2] = {
	{ "model", "mlp" }, { "steps", "20" }, { "train-size", "2048" }, { "val-size", "256" },
};

/* Submit the burn-in job for `node`; its id into id (0), or an exit code. */
static int burn_in_submit(const char *node, int gpus, struct strbuf *id, struct strbuf *what)
{
	struct job_config job;
	struct strbuf name = STRBUF_INIT;
	int code;

	job_config_init(&job);
	strbuf_addf(&name, "burn-in-%s", node);
	job.name = strbuf_detach(&name, NULL);
	job.has_trainer = 1;
	job.launcher = LAUNCHER_MPI;
	job.preflight = PREFLIGHT_NONE;   /* a burn-in tests the node itself */
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
	code = head_job_submit(&job, id);
	job_config_release(&job);
	return code;
}

/* An UP node other than `node` for the burn-in's fabric test, or NULL. */
static char *fabric_peer(const char *node)
{
	json_t *reply = NULL, *n;
	char *peer = NULL;
	size_t i;

	if (head_api("GET", DT_PATH_NODES, NULL, &reply, NULL))
		return NULL;
	json_array_foreach(json_object_get(reply, "nodes"), i, n)
		if (!peer && !strcmp(json_get_str(n, "state", ""), DT_NODE_UP) &&
		    strcmp(json_get_str(n, "name", ""), node))
			peer = xstrdup(json_get_str(n, "name", ""));
	json_decref(reply);
	return peer;
}

/*
 * The burn-in of `node`: 0 when it passed (then the caller resumes it), else
 * the exit code after saying which step failed and why.
 */
static int burn_in(const char *node)
{
	const char *doctor_argv[] = { "doctor", "--nodes", node, NULL };
	struct strbuf id = STRBUF_INIT, what = STRBUF_INIT, pair = STRBUF_INIT;
	json_t *reply = NULL, *job = NULL, *n;
	const char *state;
	char *peer;
	int code, gpus, steps;

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
	/* with another UP node, a fabric test of the two closes the burn-in */
	peer = fabric_peer(node);
	steps = peer ? 3 : 2;
	if (peer)
		strbuf_addf(&pair, "%s,%s", node, peer);

	printf("burn-in 1/%d: dtctl doctor --nodes %s\n", steps, term_str(node));
	fflush(stdout);
	if ((code = cmd_doctor(ARRAY_SIZE(doctor_argv) - 1, doctor_argv))) {
		printf("burn-in of %s FAILED: the doctor's checks failed (above); %s stays "
		       "drained\n", term_str(node), term_str(node));
		goto out;
	}
	if ((code = burn_in_submit(node, gpus, &id, &what)))
		goto out;
	printf("burn-in 2/%d: job %s: %s\n", steps, term_str(id.buf), term_str(what.buf));
	fflush(stdout);
	if ((code = head_job_wait(id.buf, BURN_IN_PENDING_MS, "burn-in", &job)))
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
	if (peer) {
		printf("burn-in 3/3: dtctl doctor --fabric --nodes %s\n", term_str(pair.buf));
		fflush(stdout);
		if ((code = doctor_fabric(pair.buf, 0, 0))) {
			printf("burn-in of %s FAILED: the fabric test with %s failed (above); %s "
			       "stays drained\n", term_str(node), term_str(peer), term_str(node));
			goto out;
		}
	}
	printf("burn-in of %s passed: the doctor's checks passed and job %s COMPLETED in "
	       "%.1f s%s%s%s\n", term_str(node), term_str(id.buf),
	       (double)json_get_int(job, "elapsed_ms", 0) / 1000,
	       peer ? "; the fabric test with " : "", peer ? term_str(peer) : "",
	       peer ? " passed" : "");
out:
	free(peer);
	strbuf_release(&pair);
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
