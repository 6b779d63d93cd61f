/*
 * quarantine.h - which job failures count against a node, and whether a
 * node has had too many of them (docs/agents.md, "Node health"): pure
 * functions, so the rules are unit-tested (tests/unit/test_quarantine.c);
 * nodes.c keeps the failures in state.db's node_failures table and drains;
 * quarantine-head.c counts a failed attempt (the rank_exited event).
 */
#ifndef DT_QUARANTINE_H
#define DT_QUARANTINE_H

#include "strbuf.h"

/* NODE_FAILs of one node closer than this are one event (a node that went
 * down ends every job on it at once): counted once. */
#define QUARANTINE_SAME_EVENT_MS (60 * 1000)

struct qfailure {
	long long at_us;          /* when the attempt ended (wall clock) */
	int node_fail;            /* NODE_FAIL, else a rank's death by a signal */
	const char *what;         /* e.g. "j-12 rank 3 exit 139", "j-15 NODE_FAIL" */
};

/*
 * Does a failed attempt count against the node its first failed rank ran on?
 * Yes for NODE_FAIL (the node went down or lost the task) and for deaths by
 * SIGSEGV, SIGBUS or SIGILL, the signals bad memory or a bad CPU causes; no
 * for exit codes (a bug in the user's code exits 1 on every node, and must
 * not drain the whole cluster), SIGKILL (the OOM killer: the job's own memory
 * use, or a stop by dtsched), SIGTERM, SIGABRT (an assert) and the rest.
 * `signal` is 0 when the rank exited.
 */
int quarantine_counts(int node_fail, int signal);

/*
 * The failures v[0..nr) of one node (oldest first) that fall in the window
 * of window_ms ending at now_us, NODE_FAILs less than QUARANTINE_SAME_EVENT_MS
 * after a counted one not counted again.  Returns that count; when it is at least max (max >
 * 0), *reason is set to "auto: 3 failures in 1h (j-12 rank 3 exit 139, j-15
 * NODE_FAIL, ...)" (at most 5 listed).
 */
int quarantine_check(const struct qfailure *v, size_t nr, long long now_us, long long window_ms,
		     int max, struct strbuf *reason);

#endif
