/*
 * cmd-show.c - `dtctl show JOB`: one job from dtsched (GET /v1/jobs/<id>):
 * placement, state history, per-rank state, exit code, pid, GPUs and log
 * path; --json prints the job object as dtsched gives it.
 */
#include "builtin.h"
#include "jobdir.h"
#include "json.h"
#include "parse-options.h"
#include "protocol.h"
#include "setup.h"
#include "term.h"
#include "units.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>

int cmd_show(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl show [--json] <job>", NULL };
	int json = 0, code;
	struct option opts[] = {
		OPT_BOOL(0, "json", &json, "print the job as JSON"),
		OPT_END(),
	};
	struct strbuf d = STRBUF_INIT;
	json_t *reply, *j, *x, *spec;
	size_t i;

	if ((code = job_fetch_cmd(argc, argv, opts, usage, &reply, &j)))
		return code;
	if (json) {
		json_doc_print_key("job", j);
		json_decref(reply);
		return 0;
	}
	spec = json_object_get(j, "spec");
	job_print_header(j);
	job_print_priority(j);
	if (json_is_integer(json_object_get(j, "exit_code")))
		printf("exit code:  %lld\n", json_get_int(j, "exit_code", 0));
	{
		size_t wi;
		json_t *w;

		json_array_foreach(json_object_get(j, "warnings"), wi, w)
			printf("warning:    %s\n", json_string_value(w));
	}
	if (json_get_str(j, "failed_node", NULL))
		printf("failed:     rank %lld on %s\n", json_get_int(j, "failed_rank", -1),
		       term_str(json_get_str(j, "failed_node", "?")));
	format_duration_human(&d, json_get_int(j, "elapsed_ms", 0));
	{
		long long nn = json_get_int(j, "nodes", 0), per = json_get_int(j, "per_node", 0);
		long long ws = json_get_int(j, "world_size", 0);

		printf("size:       %lld %s x %lld %s = %lld %s, launcher %s\n",
		       nn, plural(nn, "node", "nodes"), per,
		       json_is_true(json_object_get(j, "gpu")) ? plural(per, "GPU", "GPUs") :
		       plural(per, "process", "processes"), ws, plural(ws, "rank", "ranks"),
		       term_str(json_get_str(j, "launcher", "?")));
	}
	printf("times:      submitted %s, started %s, ended %s (ran %s)\n",
	       term_str(json_get_str(j, "submitted_at", "-")),
	       term_str(json_get_str(j, "started_at", "-")),
	       term_str(json_get_str(j, "ended_at", "-")), d.buf);
	/* the JSON's numbers as they are (docs/json.md): attempt 0 is the first run */
	printf("retried:    %lld of %lld time(s) (attempt %lld)\n", json_get_int(j, "attempt", 0),
	       json_get_int(j, "retries", 0), json_get_int(j, "attempt", 0));
	if (json_get_int(j, "restarts", 0)) {
		json_t *ratio = json_object_get(j, "effective_ratio");

		/* docs/run.md, "Restarts": lost = work since the last checkpoint + restart */
		printf("restarts:   %lld, lost %.1f s = %.4f %s-hours, effective training time "
		       "%.1f %%\n", json_get_int(j, "restarts", 0),
		       json_number_value(json_object_get(j, "lost_s")),
		       json_number_value(json_object_get(j, "gpu_hours_lost")),
		       json_is_true(json_object_get(j, "gpu")) ? "GPU" : "slot",
		       json_is_number(ratio) ? 100 * json_number_value(ratio) : 100.0);
	}
	printf("job dir:    %s\n", term_str(json_get_str(j, "job_dir", "?")));
	if (json_get_int(json_object_get(j, "slurm"), "job_id", 0)) {
		/* backend: slurm (docs/slurm-backend.md): the Slurm job beside ours */
		const json_t *sl = json_object_get(j, "slurm");

		if (json_get_str(sl, "array_job", NULL))   /* a task of a job array */
			printf("slurm:      job %s (%lld), %s", term_str(json_get_str(sl, "array_job",
			       "")), json_get_int(sl, "job_id", 0),
			       term_str(json_get_str(sl, "state", "?")));
		else
			printf("slurm:      job %lld, %s", json_get_int(sl, "job_id", 0),
			       term_str(json_get_str(sl, "state", "?")));
		if (*json_get_str(sl, "nodes", ""))
			printf(" on %s", term_str(json_get_str(sl, "nodes", "")));
		if (json_get_int(sl, "restarts", 0))
			printf(", requeued %lld time(s)", json_get_int(sl, "restarts", 0));
		printf("\n");
	}
	if (json_get_int(j, "master_port", 0))
		printf("master:     %s:%lld\n", term_str(json_get_str(json_array_get(
		       json_object_get(j, "placement"), 0), "address", "?")),
		       json_get_int(j, "master_port", 0));
	if (json_array_size(json_object_get(j, "avoid"))) {
		printf("avoids:    ");
		json_array_foreach(json_object_get(j, "avoid"), i, x)
			printf(" %s", term_str(json_string_value(x)));
		printf("\n");
	}
	if (json_get_str(spec, "container", NULL))
		/* the agents load exactly this digest, or refuse the rank (agent/container.h) */
		printf("image:      %s (%s)\n", term_str(json_get_str(spec, "container", "")),
		       json_get_str(spec, "container_digest", NULL) ?
		       term_str(json_get_str(spec, "container_digest", "")) :
		       "an image name for the nodes' engine");
	printf("placement:\n");
	json_array_foreach(json_object_get(j, "placement"), i, x)
		printf("  %-16s %-15s %s %s\n", term_str(json_get_str(x, "node", "?")),
		       term_str(json_get_str(x, "address", "?")),
		       json_is_true(json_object_get(j, "gpu")) ? "GPUs" : "slots",
		       term_str(json_get_str(x, "slots", "")));
	printf("history:\n");
	json_array_foreach(json_object_get(j, "history"), i, x)
		printf("  %s  %-10s %s\n", term_str(json_get_str(x, "at", "?")),
		       term_str(json_get_str(x, "state", "?")), term_str(json_get_str(x, "reason", "")));
	/* GPUS: the rank's CUDA_VISIBLE_DEVICES; HELD: its containment (cgroup or subreaper) */
	printf("ranks:\n  %5s %-16s %-15s %5s %8s %-8s %-9s  %s\n", "RANK", "NODE", "STATE", "EXIT",
	       "PID", "GPUS", "HELD", "LOG");
	json_array_foreach(json_object_get(j, "ranks"), i, x) {
		char rank[16], code_s[16], pid[16];

		snprintf(rank, sizeof(rank), json_get_int(x, "rank", -1) < 0 ? "mpi" : "%lld",
			 json_get_int(x, "rank", -1));
		snprintf(code_s, sizeof(code_s), json_is_integer(json_object_get(x, "exit_code")) ?
			 "%lld" : "-", json_get_int(x, "exit_code", 0));
		snprintf(pid, sizeof(pid), json_is_integer(json_object_get(x, "pid")) ? "%lld" : "-",
			 json_get_int(x, "pid", 0));
		/* "killed by dtctl", "lost with node": how a rank ended that did not end itself */
		printf("  %5s %-16s %-15s %5s %8s %-8s %-9s  %s\n", rank,
		       term_str(json_get_str(x, "node", "?")),
		       term_str(json_get_str(x, "reason", json_get_str(x, "state", "?"))), code_s, pid,
		       *json_get_str(x, "gpus", "") ? term_str(json_get_str(x, "gpus", "")) : "-",
		       term_str(json_get_str(x, "containment", "-")),
		       term_str(json_get_str(x, "log", "")));
	}
	json_array_foreach(json_object_get(j, "stalled"), i, x)
		printf("STALLED: rank %lld on %s, pid %lld, silent for %lld s\n",
		       json_get_int(x, "rank", -1), term_str(json_get_str(x, "node", "?")),
		       json_get_int(x, "pid", 0), json_get_int(x, "idle_ms", 0) / 1000);
	/* over: when each began and cleared, and how (docs/run.md, "stall") */
	json_array_foreach(json_object_get(j, "past_stalls"), i, x) {
		const char *by = json_get_str(x, "cleared_by", "");

		printf("stalled (past): rank %lld on %s, pid %lld, silent from %s until %s (%s)\n",
		       json_get_int(x, "rank", -1), term_str(json_get_str(x, "node", "?")),
		       json_get_int(x, "pid", 0), term_str(json_get_str(x, "since", "?")),
		       term_str(json_get_str(x, "cleared_at", "?")),
		       !strcmp(by, "output") ? "output resumed" : !strcmp(by, "retry") ?
		       "the attempt failed; retried" : !strcmp(by, "end") ? "the job ended" :
		       term_str(by));
	}
	if ((x = json_object_get(j, "hang")))   /* hang.h: `dtctl debug JOB --last` for more */
		printf("hang:       %s (%s%s)\n", term_str(json_get_str(x, "text", "")),
		       term_str(json_get_str(x, "at", "?")),
		       json_is_true(json_object_get(x, "auto")) ? ", found at a stall" : "");
	strbuf_release(&d);
	json_decref(reply);
	return 0;
}
