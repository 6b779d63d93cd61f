/*
 * progress.h - what this rank is doing, for hang attribution (dtctl debug).
 *
 * dttrain keeps its current phase, step and collective sequence number in
 * memory (plain stores: nothing is written per step).  When launched by
 * dtctl ($DT_JOB_DIR set) progress_init() opens <job_dir>/debug/<rank>.dttrain,
 * writes one header line
 *     dttrain pid=<pid> rank=<rank>
 * and installs a SIGUSR2 handler that appends one record, formatted with
 * async-signal-safe code only:
 *     phase=<name> seq=<n> step=<n> in_coll=<0|1> phase_ms=<n> wait_ms=<n>
 * seq counts the blocking collectives entered (all-reduce waits, scalar sums,
 * pipeline sends and receives); wait_ms is the time spent blocked in them so
 * far (a rank the others wait for has little).  The agent (agent/debug.c)
 * sends the signal only to a process whose file names its pid in the header,
 * so nothing else ever gets a SIGUSR2 from dtctl.
 *
 * --hang-rank R:STEP[:PHASE] (a test and benchmark flag): rank R stops for
 * good when it enters PHASE (default all-reduce: inside the gradient
 * all-reduce, before its part is posted) at step STEP.
 */
#ifndef DT_TRAINER_PROGRESS_H
#define DT_TRAINER_PROGRESS_H

#include "strbuf.h"

enum progress_phase {
	PH_INIT,
	PH_DATA,
	PH_COMPUTE,         /* forward and backward */
	PH_ALLREDUCE,       /* waiting for the gradient all-reduce */
	PH_SUM,             /* a small all-reduce (loss, flags) */
	PH_OPTIMIZER,
	PH_SEND,
	PH_RECV,
	PH_CHECKPOINT,
	PH_EVAL,
	PH_DONE,
	PH_NR
};

const char *progress_phase_name(int phase);
/* "R:STEP[:PHASE]" into the hang point; 0, or -1 with err. */
int progress_parse_hang(const char *spec, struct strbuf *err);
/* Open the record file and install the handler (no-op without $DT_JOB_DIR). */
void progress_init(int rank);
void progress_step(long long step);
/* Enter a phase; the hang point stops here when it matches. */
void progress_phase(int phase);
/* A blocking collective starts (seq + 1) / ended (its wait counted; back to
 * the phase before). */
void progress_coll_begin(int phase);
void progress_coll_end(void);

#endif
