/*
 * events-jobs.c - the job events of the bus (jobstate.h) into the head's
 * event stream (events.c): a subscriber, never called by the lifecycle.
 *
 *   submitted          job.queued
 *   started            job.started (attempt, nodes)
 *   rank_exited        job.rank_failed (rank, node, exit code or signal)
 *   stalled (first)    job.stalled (rank and node of the first silent rank)
 *   retried            job.retried (attempt, why), or job.preempted (by, attempt,
 *                      preemptions, why) when a preemption requeued it
 *   ended              job.ended (state, reason: the cause; exit code, rank, node)
 *
 * Each carries the job's id, name and owner (user), nothing of its env or
 * argv, and hands the job's notify: list to the notifications.
 */
#include "jobs-int.h"
#include "json.h"

#include <string.h>

static json_t *job_event_base(const struct job *j)
{
	return json_pack("{s:s,s:s,s:s}", "job", j->id, "name", j->name ? j->name : "",
			 "user", j->user ? j->user : "");
}

static void on_job_event(struct sched *s, struct job *j, enum job_event ev,
			 const struct job_event_info *info, void *data)
{
	json_t *e = job_event_base(j);
	const json_t *first;
	const json_t *notify = j->cfg.notify;
	const char *kind = NULL;

	switch (ev) {
	case JOB_EV_SUBMITTED:
		kind = "job.queued";
		break;
	case JOB_EV_STARTED:
		kind = "job.started";
		json_object_set_new(e, "attempt", json_integer(j->attempt));
		json_object_set_new(e, "nodes", json_integer(j->per_node > 0 ?
							    j->world / j->per_node : j->cfg.nodes));
		break;
	case JOB_EV_RANK_EXITED:
		kind = "job.rank_failed";
		json_object_set_new(e, "rank", json_integer(info->rank));
		json_object_set_new(e, "node", j->failed_node ? json_string(j->failed_node) :
				    json_null());
		if (info->signal)
			json_object_set_new(e, "signal", json_integer(info->signal));
		else
			json_object_set_new(e, "exit_code", json_integer(info->code));
		json_object_set_new(e, "node_fail", json_boolean(info->node_fail));
		break;
	case JOB_EV_STALLED:
		if (!info->first)
			break;
		kind = "job.stalled";
		first = json_array_get((const json_t *)info->stalled, 0);
		json_object_set_new(e, "stall_after_ms", json_integer(info->stall_after_ms));
		if (first) {
			json_object_set_new(e, "rank", json_integer(json_get_int(first, "rank", -1)));
			json_object_set_new(e, "node", json_string(json_get_str(first, "node", "")));
		}
		break;
	case JOB_EV_RETRIED: {
		/* requeued: after a preemption (fairshare.h: its history says so just
		 * before the new PENDING) it is job.preempted, which costs no retry */
		size_t n = json_array_size(j->history);
		json_t *why = n >= 2 ? json_array_get(j->history, n - 2) : NULL;

		if (!strcmp(json_get_str(why, "state", ""), "PREEMPTED")) {
			kind = "job.preempted";
			json_object_set_new(e, "by", j->preempted_by ? json_string(j->preempted_by) :
					    json_null());
			json_object_set_new(e, "preemptions", json_integer(j->preemptions));
		} else {
			kind = "job.retried";
		}
		json_object_set_new(e, "attempt", json_integer(j->attempt));
		json_object_set_new(e, "reason", j->reason ? json_string(j->reason) : json_null());
		break;
	}
	case JOB_EV_ENDED:
		kind = "job.ended";
		json_object_set_new(e, "state", json_string(j->state));
		json_object_set_new(e, "reason", j->reason ? json_string(j->reason) : json_null());
		json_object_set_new(e, "exit_code", j->has_exit ? json_integer(j->exit_code) :
				    json_null());
		json_object_set_new(e, "rank", j->failed_rank >= 0 ? json_integer(j->failed_rank) :
				    json_null());
		json_object_set_new(e, "node", j->failed_node ? json_string(j->failed_node) :
				    json_null());
		break;
	default:
		break;
	}
	if (kind)
		events_add(s, kind, e, notify);
	else
		json_decref(e);
}

void events_jobs_subscribe(struct sched *s)
{
	static const enum job_event evs[] = {
		JOB_EV_SUBMITTED, JOB_EV_STARTED, JOB_EV_RANK_EXITED, JOB_EV_STALLED,
		JOB_EV_RETRIED, JOB_EV_ENDED,
	};

	for (size_t i = 0; i < ARRAY_SIZE(evs); i++)
		job_events_on(&s->events, evs[i], on_job_event, NULL);
}
