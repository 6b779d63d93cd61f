/*
 * fuzz_specs.c - libFuzzer target for the two request bodies that start
 * work: a job spec as dtsched reads it from POST /v1/jobs
 * (scheduler/jobspec.c) and a task as an agent reads it from POST /v1/tasks
 * (agent/task.c).  Both come from the network (signed, but from whatever
 * client holds the key), so no input may crash or leak, and besides the
 * sanitizers:
 *   - an accepted job spec survives its own round trip: job_config_to_json()
 *     of it is accepted again and writes the same JSON (dtsched stores the
 *     spec and re-reads it after a restart);
 *   - a validated task spec validates again to the same spec (the agent
 *     stores the validated form and a restarted agent reads it back);
 *   - a refusal always says why.
 * Built and run by `make fuzz` (mk/fuzz.mk).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "agent/task.h"
#include "scheduler/jobspec.h"

/* abort() unless a and b serialise to the same JSON */
static void same_json(const json_t *a, const json_t *b)
{
	char *sa = json_dumps(a, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
	char *sb = json_dumps(b, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);

	if (!sa || !sb || strcmp(sa, sb))
		abort();
	free(sa);
	free(sb);
}

static void job_round_trip(const json_t *in)
{
	struct job_config a, b;
	struct strbuf err = STRBUF_INIT;
	json_t *ja, *jb;

	if (job_config_from_json(&a, in, &err) < 0) {
		if (!err.len)
			abort();
		strbuf_release(&err);
		return;
	}
	ja = job_config_to_json(&a);
	if (job_config_from_json(&b, ja, &err) < 0)
		abort();    /* dtsched could not re-read what it stored */
	jb = job_config_to_json(&b);
	same_json(ja, jb);
	json_decref(ja);
	json_decref(jb);
	job_config_release(&a);
	job_config_release(&b);
	strbuf_release(&err);
}

static void task_again(const json_t *in)
{
	struct strbuf err = STRBUF_INIT;
	json_t *s1 = task_spec_validate(in, &err), *s2;

	if (!s1) {
		if (!err.len)
			abort();
		strbuf_release(&err);
		return;
	}
	s2 = task_spec_validate(s1, &err);
	if (!s2)
		abort();
	same_json(s1, s2);
	json_decref(s1);
	json_decref(s2);
	strbuf_release(&err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *j = json_parse((const char *)data, size, NULL);

	if (!j)
		return 0;
	job_round_trip(j);
	task_again(j);
	json_decref(j);
	return 0;
}
