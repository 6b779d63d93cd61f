/*
 * hang.h - hang attribution: which rank the others wait for (dtctl debug).
 *
 * dtsched asks the agent of every node of a running job for its ranks'
 * evidence (POST /v1/debug, agent/debug.h), on demand (POST
 * /v1/jobs/<id>/debug, `dtctl debug JOB`) and once when stall detection
 * (jobs.c check_stall) first finds silent ranks.  hang_summarise() then
 * compares the ranks and names the odd ones out; the result is kept in the
 * job ("hang" in JOB, `dtctl show`) and, when automatic, a line of
 * events.log.
 *
 * HANG = {gen, at, auto, elapsed_ms, verdict, text, culprits: [{rank, node,
 *         pid, phase, why, frames}], ranks: [RANK + idle_ms], errors: [text]}
 * verdict: "hung" (nothing moves; culprits named when one stands out),
 * "slow" (ranks progress, some make the others wait), "progressing",
 * "unknown" (no rank process found).
 */
#ifndef DT_SCHED_HANG_H
#define DT_SCHED_HANG_H

#include <jansson.h>

/*
 * Pure: from the ranks' evidence (agent/debug.h RANK objects) a new
 * {verdict, text, culprits} object.  Ranks may come in any order.
 */
json_t *hang_summarise(const json_t *ranks);

#endif
