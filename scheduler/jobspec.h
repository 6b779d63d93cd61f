/*
 * jobspec.h - a job spec from its JSON form (config.h job_config_to_json),
 * as dtctl sends it in POST /v1/jobs.  dtsched trusts nothing in it: every
 * field is type- and range-checked the way the YAML loader checks job.yaml,
 * and unknown keys are refused.
 *
 * Ownership: on success *j is filled (release with job_config_release);
 * on failure it is released and one message is in err.
 */
#ifndef DT_JOBSPEC_H
#define DT_JOBSPEC_H

#include <jansson.h>
#include "config.h"
#include "strbuf.h"

int job_config_from_json(struct job_config *j, const json_t *o, struct strbuf *err);

#endif
