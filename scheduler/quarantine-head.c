/*
 * quarantine-head.c - the head's side of node quarantine (quarantine.h has
 * the rules): a subscriber of RANK_EXITED (jobstate.h) that counts a failed
 * attempt against the node it failed on when it looks like the node's fault;
 * node_record_failure() keeps the failures and drains (nodes.c).
 */
#include "jobs-int.h"
#include "quarantine.h"

/*
 * The attempt failed on j->failed_node: count it against that node when it
 * looks like the node's fault (quarantine_counts(): NODE_FAIL, SIGSEGV, SIGBUS,
 * SIGILL), which may drain it.  Lock held.
 */
static void count_node_failure(struct sched *s, struct job *j, enum job_event ev,
			       const struct job_event_info *info, void *data)
{
	struct strbuf what = STRBUF_INIT;
	int nodefail = info->node_fail, sig = info->signal;

	if (!j->failed_node || !quarantine_counts(nodefail, sig))
		return;
	strbuf_addstr(&what, j->id);
	if (nodefail)
		strbuf_addstr(&what, " NODE_FAIL");
	else if (j->failed_rank >= 0)
		strbuf_addf(&what, " rank %d exit %d", j->failed_rank, j->exit_code);
	else
		strbuf_addf(&what, " mpirun exit %d", j->exit_code);
	node_record_failure(s, j->failed_node, nodefail, what.buf);
	strbuf_release(&what);
}

void quarantine_subscribe(struct sched *s)
{
	job_events_on(&s->events, JOB_EV_RANK_EXITED, count_node_failure, NULL);
}
