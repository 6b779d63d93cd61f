/*
 * job.c - a job of dtsched as an object (struct job, jobs-int.h): finding it,
 * its job dir and the files dtsched writes there (state, placement.json;
 * through the safe-file layer: the shared dir is hostile), its JSON (GET
 * /v1/jobs/<id>, the row in state.db) and job_transition(), the one way its
 * state changes (the state machine: jobstate.c).  Below the queue
 * (jobs-queue.c), the launch (jobs-launch.c) and the lifecycle (jobs.c),
 * which all use it; it calls none of them.
 */
#include "jobs-int.h"
#include "notify-spec.h"
#include "goodput.h"
#include "jobspec.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "safefile.h"
#include "usage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int state_final(const char *st)
{
	return strcmp(st, DT_JOB_PENDING) && strcmp(st, DT_JOB_RUNNING);
}

int task_final(const json_t *t)
{
	const char *s = json_get_str(t, "state", "");

	return !strcmp(s, DT_TASK_EXITED) || !strcmp(s, DT_TASK_FAILED) || !strcmp(s, DT_TASK_LOST);
}

struct job *job_find(struct sched *s, const char *id)
{
	for (size_t i = 0; i < s->nr_jobs; i++)
		if (!strcmp(s->jobs[i]->id, id))
			return s->jobs[i];
	return NULL;
}

void jobs_add(struct sched *s, struct job *j)
{
	ALLOC_GROW(s->jobs, s->nr_jobs + 1, s->alloc_jobs);
	s->jobs[s->nr_jobs++] = j;
	j->ord = ++s->jobs_ord;
	if (jobstate_final(j->state))
		return;
	ALLOC_GROW(s->live, s->nr_live + 1, s->alloc_live);
	s->live[s->nr_live++] = j;
	if (!strcmp(j->state, DT_JOB_RUNNING))
		jobs_running_note(s, j);
}

/* Drop the jobs that ended, and from s->running those that stopped
 * (jobstate_set() marks both stale): O(live jobs), only after a change. */
void jobs_live_compact(struct sched *s)
{
	size_t k = 0;

	if (s->live_stale) {
		for (size_t i = 0; i < s->nr_live; i++)
			if (!jobstate_final(s->live[i]->state))
				s->live[k++] = s->live[i];
		s->nr_live = k;
		s->live_stale = 0;
		s->queue_gen++;
	}
	if (s->running_stale) {
		k = 0;
		for (size_t i = 0; i < s->nr_running; i++) {
			struct job *j = s->running[i];

			if (!strcmp(j->state, DT_JOB_RUNNING))
				s->running[k++] = j;
			else
				j->in_running = 0;
		}
		s->nr_running = k;
		s->running_stale = 0;
	}
}

/* both indexes anew from s->jobs (after a load: its order, its states) */
void jobs_live_rebuild(struct sched *s)
{
	for (size_t i = 0; i < s->nr_running; i++)
		s->running[i]->in_running = 0;
	s->nr_live = s->nr_running = 0;
	s->live_stale = s->running_stale = 0;
	s->queue_gen++;
	for (size_t i = 0; i < s->nr_jobs; i++) {
		struct job *j = s->jobs[i];

		j->ord = ++s->jobs_ord;
		if (jobstate_final(j->state))
			continue;
		ALLOC_GROW(s->live, s->nr_live + 1, s->alloc_live);
		s->live[s->nr_live++] = j;
		if (!strcmp(j->state, DT_JOB_RUNNING))
			jobs_running_note(s, j);
	}
}

void jobs_remove(struct sched *s, size_t i)
{
	struct job *j = s->jobs[i];

	memmove(s->jobs + i, s->jobs + i + 1, (s->nr_jobs - i - 1) * sizeof(*s->jobs));
	s->nr_jobs--;
	s->queue_gen++;
	for (size_t k = s->nr_live; k > 0; k--)
		if (s->live[k - 1] == j) {
			memmove(s->live + k - 1, s->live + k, (s->nr_live - k) * sizeof(*s->live));
			s->nr_live--;
			break;
		}
	for (size_t k = s->nr_running; j->in_running && k > 0; k--)
		if (s->running[k - 1] == j) {
			memmove(s->running + k - 1, s->running + k,
				(s->nr_running - k) * sizeof(*s->running));
			s->nr_running--;
			break;
		}
}

/* "jobs/<id>/<name>" below the shared dir ("jobs/<id>" for name NULL). */
void job_rel(const struct job *j, const char *name, struct strbuf *rel)
{
	strbuf_reset(rel);
	strbuf_addf(rel, "jobs/%s%s%s", j->id, name ? "/" : "", name ? name : "");
}

void job_file(const struct job *j, const char *name, const char *data, size_t len)
{
	job_file_mode(j, name, data, len, 0644);
}

/* Files holding environment values (job.yaml, plan.json: setup.env, the job's env,
 * which may carry W&B or Hugging Face tokens) are the cluster user's only, like
 * ~/.dtctl/env.sh on the nodes; the agents' API shows env keys, never values. */
void job_file_mode(const struct job *j, const char *name, const char *data, size_t len, mode_t mode)
{
	struct strbuf rel = STRBUF_INIT, why = STRBUF_INIT;

	job_rel(j, name, &rel);
	/* the job dir is made with its first file (job_id_free) */
	if (sf_write(j->shared_dir, rel.buf, data, len, mode, SF_OWNER | SF_MKDIRS, &why) < 0)
		dtlog(DTLOG_WARN, "job %s: cannot write the job file: %s", j->id, why.buf);
	strbuf_release(&rel);
	strbuf_release(&why);
}

/* Modification time (ns) of <job dir>/<name> (a file, or the ckpt dir), 0 if none. */
long long job_mtime_ns(const struct job *j, const char *name)
{
	struct strbuf rel = STRBUF_INIT;
	struct stat st;
	long long ns = 0;

	job_rel(j, name, &rel);
	if (sf_stat(j->shared_dir, rel.buf, &st, NULL) == 0)
		ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
	strbuf_release(&rel);
	return ns;
}

/* The highest N of the jobs/j-N dirs on the shared dir (0 if none). */
long long highest_job_dir(const char *shared)
{
	DIR *d = sf_opendir(shared, "jobs", NULL);
	struct dirent *de;
	long long max = 0;

	while (d && (de = readdir(d))) {
		char *end;
		long long v;

		if (strncmp(de->d_name, "j-", 2))
			continue;
		v = strtoll(de->d_name + 2, &end, 10);
		if (!*end && v > max)
			max = v;
	}
	if (d)
		closedir(d);
	return max;
}

/*
 * At submit: jobs/<id> must not exist (an id whose dir exists belongs to a job
 * of an earlier head: errno EEXIST); jobs/ is made if missing.  The job dir
 * itself comes with the job's first file (job_file: its first transition,
 * its launch): each inode made is a metadata round trip on NFS and, on the
 * head's ext4, a search of the inode bitmap that was most of dtsched's time
 * per submit (docs/BENCHMARKS.md, "submit rate").  A lookup is neither.
 */
int job_id_free(const struct job *j, struct strbuf *err)
{
	struct strbuf why = STRBUF_INIT;
	int dfd = sf_dir(j->shared_dir, "jobs", SF_MKDIRS | SF_OWNER, &why), e = 0;
	struct stat st;

	if (dfd >= 0) {
		if (fstatat(dfd, j->id, &st, AT_SYMLINK_NOFOLLOW) == 0)
			e = EEXIST;
		else if (errno != ENOENT)
			e = errno;
		close(dfd);
		if (!e) {
			strbuf_release(&why);
			return 0;
		}
		strbuf_addstr(&why, strerror(e));
	} else {
		e = errno;
	}
	strbuf_addf(err, "cannot create the job directory in '%s/jobs': %s", j->shared_dir, why.buf);
	strbuf_release(&why);
	errno = e;
	return -1;
}

/* logs/, ckpt/ and ranks/ in the job dir, before its first task starts (kept if they exist). */
int job_subdirs(const struct job *j, struct strbuf *err)
{
	static const char *const sub[] = { "logs", "ckpt", "ranks" };
	struct strbuf rel = STRBUF_INIT, why = STRBUF_INIT;
	int ret = 0;

	for (size_t i = 0; !ret && i < ARRAY_SIZE(sub); i++) {
		int fd;

		job_rel(j, sub[i], &rel);
		fd = sf_dir(j->shared_dir, rel.buf, SF_MKDIRS | SF_OWNER, &why);
		if (fd < 0) {
			strbuf_addf(err, "cannot create '%s/%s': %s", j->job_dir, sub[i], why.buf);
			ret = -1;
		} else {
			close(fd);
		}
	}
	strbuf_release(&rel);
	strbuf_release(&why);
	return ret;
}

int job_dir_give(const struct job *j, long long uid, long long gid, int mode, struct strbuf *err)
{
	static const char *const sub[] = { "", "logs", "ckpt", "ranks" };
	struct strbuf rel = STRBUF_INIT, why = STRBUF_INIT;
	int ret = 0;

	for (size_t i = 0; !ret && i < ARRAY_SIZE(sub); i++) {
		int fd;

		job_rel(j, *sub[i] ? sub[i] : NULL, &rel);
		/* by fd, found without following a link (lib/safefile.h) */
		fd = sf_dir(j->shared_dir, rel.buf, 0, &why);
		if (fd < 0 || fchown(fd, (uid_t)uid, (gid_t)gid) < 0 || fchmod(fd, (mode_t)mode) < 0) {
			strbuf_addf(err, "cannot give '%s' to uid %lld: %s", rel.buf, uid,
				    fd < 0 ? why.buf : strerror(errno));
			ret = -1;
		}
		if (fd >= 0)
			close(fd);
	}
	strbuf_release(&rel);
	strbuf_release(&why);
	return ret;
}

void write_state_file(const struct job *j)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, "%s\n", j->state);
	job_file(j, "state", sb.buf, sb.len);
	strbuf_release(&sb);
}

/* <job_dir>/placement.json: {"ranks":[{"rank":0,"node":"n1"},...], "nodes": [...]} */
void write_placement_file(const struct job *j)
{
	json_t *ranks = json_array(), *o;
	struct strbuf sb = STRBUF_INIT;
	size_t k;
	json_t *p;

	json_array_foreach(j->placement, k, p)
		for (int l = 0; l < j->per_node; l++)
			json_array_append_new(ranks, json_pack("{s:i,s:s}", "rank",
				(int)k * j->per_node + l, "node", json_get_str(p, "node", "?")));
	o = json_pack("{s:s,s:i,s:o,s:O}", "job", j->id, "attempt", j->attempt, "ranks", ranks,
		      "nodes", j->placement);
	json_append(&sb, o);
	strbuf_addch(&sb, '\n');
	job_file(j, "placement.json", sb.buf, sb.len);
	json_decref(o);
	strbuf_release(&sb);
}

void history_add(struct job *j, const char *state, const char *reason)
{
	json_array_append_new(j->history, json_pack("{s:s,s:o,s:s?}", "state", state,
						     "at", json_timestamp(dt_now_us()), "reason", reason));
}

void set_reason(struct job *j, const char *fmt, ...) DT_PRINTF(2, 3);
void set_reason(struct job *j, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	free(j->reason);
	j->reason = NULL;
	if (!fmt)
		return;
	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	j->reason = strbuf_detach(&sb, NULL);
}

/*
 * For mpi jobs: this attempt's <job_dir>/ranks/<r>.json records, which each
 * rank logger (agent/ranklog.c) writes when its rank ends, as an array
 * indexed by rank (null where none).  The shared dir is hostile: read
 * through the safe-file layer, bounded; files of an earlier attempt are
 * older than this one's start.
 */
json_t *mpi_rank_records(const struct job *j)
{
	struct strbuf rel = STRBUF_INIT, buf = STRBUF_INIT;
	json_t *recs = json_array();
	DIR *d;
	struct dirent *de;

	for (int r = 0; r < j->world; r++)
		json_array_append_new(recs, json_null());
	job_rel(j, "ranks", &rel);
	d = sf_opendir(j->shared_dir, rel.buf, NULL);
	while (d && (de = readdir(d))) {
		json_t *o;
		long long r;

		if (!ends_with(de->d_name, ".json"))
			continue;
		strbuf_reset(&buf);
		if (sf_read_at(dirfd(d), de->d_name, &buf, 65536, NULL) < 0)
			continue;
		o = json_loads(buf.buf, 0, NULL);
		r = json_get_int(o, "rank", -1);
		if (json_is_object(o) && r >= 0 && r < j->world &&
		    dt_timestamp_parse(json_get_str(o, "ended_at", "")) >= j->started_us)
			json_array_set(recs, (size_t)r, o);
		json_decref(o);
	}
	if (d)
		closedir(d);
	strbuf_release(&rel);
	strbuf_release(&buf);
	return recs;
}

/*
 * The end of a rank that had not ended on its own when the attempt did:
 * dtsched stops it (another rank failed, cancel, timeout), or its node is
 * gone with it.  Without this, the last heartbeat's "running" would be the
 * rank's state forever.
 */
void rank_set_end(json_t *r, int lost)
{
	json_object_set_new(r, "state", json_string(lost ? "lost" : "killed"));
	json_object_set_new(r, "reason", json_string(lost ? "lost with node" : "killed by dtctl"));
}

int rank_state_final(const char *st)
{
	return !strcmp(st, DT_TASK_EXITED) || !strcmp(st, DT_TASK_FAILED) ||
		!strcmp(st, DT_TASK_LOST) || !strcmp(st, "killed") || !strcmp(st, "gone");
}

/*
 * Per-rank view of the current attempt, as its backend describes it;
 * `ending`: the attempt is over (end_attempt keeps this as last_ranks), so
 * a rank still running is one dtsched stops now, or one lost with its node.
 * Without a hold, the view kept when the last attempt ended.
 */
json_t *ranks_json(struct sched *s, const struct job *j, int ending)
{
	json_t *a, *r;
	size_t i;

	if (!j->hold) {
		if (!j->last_ranks)
			return json_array();
		/* a snapshot of an older dtsched may still say "running" */
		a = json_deep_copy(j->last_ranks);
		json_array_foreach(a, i, r)
			if (state_final(j->state) && !rank_state_final(json_get_str(r, "state", "")))
				rank_set_end(r, 0);
		return a;
	}
	a = s->backend->describe(s, j, ending);
	/* each rank's GPUs: its node's reservation (launch.c binds both launchers so) */
	json_array_foreach(a, i, r) {
		json_int_t rank = json_get_int(r, "rank", -1);
		json_t *pl = json_array_get(j->placement, rank < 0 ? 0 :
					    (size_t)(rank / (j->per_node > 0 ? j->per_node : 1)));

		json_object_set_new(r, "gpus", json_string(j->gpu ? json_get_str(pl, "slots", "") : ""));
	}
	return a;
}

json_t *job_json(struct sched *s, const struct job *j, int detail)
{
	json_t *o = json_object();
	long long end = j->ended_us ? j->ended_us : dt_now_us();

	json_object_set_new(o, "id", json_string(j->id));
	json_object_set_new(o, "version", json_integer(j->version));
	json_object_set_new(o, "name", json_string(j->name));
	json_object_set_new(o, "user", json_string(j->user ? j->user : ""));
	json_object_set_new(o, "project", json_string(j->project ? j->project :
						      j->user ? j->user : ""));
	json_object_set_new(o, "state", json_string(j->state));
	if (j->prio_pos && !strcmp(j->state, DT_JOB_PENDING)) {
		json_t *pr = json_pack("{s:f,s:i,s:{s:f,s:f,s:f},s:b,s:o}",
			"value", j->prio, "position", j->prio_pos, "factors", "fairshare", j->f_fs,
			"age", j->f_age, "size", j->f_size, "reserved", j->prio_top,
			"expected_start", j->expected_start_us ?
			json_timestamp(j->expected_start_us) : json_null());

		if (!j->expected_start_us && j->expected_unknown)
			json_object_set_new(pr, "expected_unknown", json_string(j->expected_unknown));
		if (j->floor_gpus)   /* its project's guaranteed floor (docs/fairshare.md) */
			json_object_set_new(pr, "floor", json_pack("{s:i,s:i,s:b}", "guaranteed_gpus",
				j->floor_gpus, "gpus_in_use", j->floor_in_use, "within",
				j->prio_guaranteed));
		json_object_set_new(o, "priority", pr);
	}
	json_object_set_new(o, "reason", j->reason ? json_string(j->reason) : json_null());
	json_object_set_new(o, "submitted_at", json_timestamp(j->submitted_us));
	json_object_set_new(o, "started_at", json_timestamp(j->started_us));
	json_object_set_new(o, "ended_at", json_timestamp(j->ended_us));
	json_object_set_new(o, "elapsed_ms", json_integer(j->started_us ?
							  (end - j->started_us) / 1000 : 0));
	/* the attempt's: an elastic restart may run on fewer than the spec's */
	json_object_set_new(o, "nodes", json_integer(j->per_node > 0 ? j->world / j->per_node :
						     j->cfg.nodes));
	json_object_set_new(o, "per_node", json_integer(j->per_node));
	json_object_set_new(o, "gpu", json_boolean(j->gpu));
	json_object_set_new(o, "world_size", json_integer(j->world));
	json_object_set_new(o, "launcher", json_string(j->cfg.launcher == LAUNCHER_MPI ? "mpi" : "agent"));
	json_object_set_new(o, "job_dir", json_string(j->job_dir));
	json_object_set_new(o, "attempt", json_integer(j->attempt));
	json_object_set_new(o, "retries", json_integer(j->cfg.retries));
	{
		/* a restart pending: its time is being lost now */
		long long lost = j->lost_us + (j->restart_from_us ? end - j->restart_from_us : 0);
		double slot_s = j->lost_slot_s + (j->restart_from_us ? (double)(end - j->restart_from_us) /
						  1e6 * j->restart_world : 0);
		double ratio = goodput_ratio(j->first_started_us, end, lost);

		json_object_set_new(o, "restarts", json_integer(j->attempt));
		json_object_set_new(o, "preemptions", json_integer(j->preemptions));
		json_object_set_new(o, "preempting", json_boolean(j->preempting));
		json_object_set_new(o, "preempted_by", j->preempted_by ?
				    json_string(j->preempted_by) : json_null());
		json_object_set_new(o, "lost_s", json_real((double)lost / 1e6));
		json_object_set_new(o, "gpu_hours_lost", json_real(slot_s / 3600));
		json_object_set_new(o, "effective_ratio", ratio < 0 ? json_null() : json_real(ratio));
		json_object_set_new(o, "first_started_at", json_timestamp(j->first_started_us));
		json_object_set_new(o, "restart", json_pack("{s:I,s:f,s:I,s:i}", "lost_us",
			(json_int_t)j->lost_us, "lost_slot_s", j->lost_slot_s, "from_us",
			(json_int_t)j->restart_from_us, "world", j->restart_world));
	}
	json_object_set_new(o, "exit_code", j->has_exit ? json_integer(j->exit_code) : json_null());
	json_object_set_new(o, "failed_rank", j->failed_rank >= 0 ? json_integer(j->failed_rank) : json_null());
	json_object_set_new(o, "failed_node", j->failed_node ? json_string(j->failed_node) : json_null());
	json_object_set_new(o, "stalled", json_incref(j->stalled));
	json_object_set_new(o, "past_stalls", json_incref(j->past_stalls));
	if (j->fabric)
		json_object_set_new(o, "fabric", json_incref(j->fabric));
	if (j->preflight)
		json_object_set_new(o, "preflight", json_incref(j->preflight));
	if (j->hang)
		json_object_set_new(o, "hang", json_incref(j->hang));   /* hang.h */
	if (j->slurm)
		json_object_set_new(o, "slurm", json_incref(j->slurm));   /* backend-slurm.c */
	if (j->requeues)
		json_object_set_new(o, "requeues", json_integer(j->requeues));
	json_object_set_new(o, "placement", json_incref(j->placement));
	json_object_set_new(o, "log_lost_lines", json_integer(j->log_lost_lines));
	json_object_set_new(o, "log_error", j->log_error ? json_string(j->log_error) : json_null());
	{
		json_t *w = json_array();

		if (j->log_lost_lines || j->log_error) {
			struct strbuf m = STRBUF_INIT;

			strbuf_addf(&m, "%lld output line%s of its ranks could not be logged (%s)",
				    j->log_lost_lines, j->log_lost_lines == 1 ? "" : "s",
				    j->log_error ? j->log_error : "write error");
			json_array_append_new(w, json_string(m.buf));
			strbuf_release(&m);
		}
		json_object_set_new(o, "warnings", w);
	}
	if (detail) {
		json_object_set_new(o, "spec", json_incref(j->spec));
		json_object_set_new(o, "shared_dir", json_string(j->shared_dir));
		json_object_set_new(o, "submit_dir", j->submit_dir ? json_string(j->submit_dir) :
				    json_null());
		json_object_set_new(o, "master_port", json_integer(j->master_port));
		json_object_set_new(o, "history", json_incref(j->history));
		json_object_set_new(o, "ranks", ranks_json(s, j, 0));
		json_object_set_new(o, "avoid", json_incref(j->avoid));
	}
	return o;
}

/* a job spec as a reply shows it: notify: webhook URLs redacted (a new reference) */
json_t *spec_shown(json_t *spec)
{
	json_t *n = json_object_get(spec, "notify"), *copy;

	if (!json_is_array(n))
		return json_incref(spec);
	copy = json_deep_copy(spec);
	json_object_set_new(copy, "notify", notify_list_redacted(n));
	return copy;
}

/* job_json(s, j, 1) as a reply shows it (spec_shown) */
json_t *job_json_shown(struct sched *s, const struct job *j)
{
	json_t *o = job_json(s, j, 1);

	json_object_set_new(o, "spec", spec_shown(j->spec));
	return o;
}

/* Write the job (and the holds it has) to SQLite; lock held.  -1 (logged;
 * sqlite3_errmsg says why) when the row cannot be written. */
int job_save(struct sched *s, struct job *j)
{
	json_t *o, *holds = json_array();
	struct strbuf data = STRBUF_INIT;
	sqlite3_stmt *st = s->st_job;
	int ret = 0;

	j->version++;
	dt_httpd_wake(s->srv);   /* answer the long-polls (POST /v1/jobs/<id>/wait) */
	dt_httpd_wake(s->srv_local);
	o = job_json(s, j, 1);

	for (size_t i = 0; i < s->nr_holds; i++)
		if (!strcmp(s->holds[i]->job, j->id))
			json_array_append_new(holds, hold_json(s->holds[i]));
	json_object_set_new(o, "holds", holds);
	json_object_set_new(o, "current_hold", json_boolean(j->hold != NULL));
	json_object_set_new(o, "last_ranks", json_incref(j->last_ranks ? j->last_ranks : json_null()));
	json_object_set_new(o, "has_exit", json_boolean(j->has_exit));
	json_object_set_new(o, "cancel", json_boolean(j->cancel));
	json_append(&data, o);
	sqlite3_reset(st);
	sqlite3_bind_text(st, 1, j->id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, j->state, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, dt_now_us());
	sqlite3_bind_text(st, 4, data.buf, (int)data.len, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 5, j->seq);
	if (sqlite3_step(st) != SQLITE_DONE) {
		dtlog(DTLOG_ERROR, "state.db: cannot save job %s: %s", j->id, sqlite3_errmsg(s->db));
		ret = -1;
	}
	json_decref(o);
	strbuf_release(&data);
	return ret;
}

/* what a transition persists (jobstate.h): the real writers */
static const struct jobstate_persist job_persist = { history_add, job_save, write_state_file };

/*
 * A state change, as the state machine (jobstate.c) allows it: history,
 * SQLite, <job_dir>/state, the events, then the log.  An illegal one is
 * refused (logged: a bug).
 */
void job_transition(struct sched *s, struct job *j, const char *state)
{
	const char *before = j->state;

	if (jobstate_set(s, j, state, &job_persist, &s->events) < 0) {
		dtlog(DTLOG_ERROR, "job %s: the transition %s -> %s is not one a job makes; refused",
		      j->id, before, state);
		return;
	}
	dtlog(!strcmp(state, DT_JOB_FAILED) || !strcmp(state, DT_JOB_NODE_FAIL) ? DTLOG_WARN :
	      DTLOG_INFO, "job %s (%s): %s -> %s%s%s", j->id, j->name, before, state,
	      j->reason ? ": " : "", j->reason ? j->reason : "");
}

void job_free(struct job *j)
{
	json_decref(j->slurm);
	free(j->name);
	free(j->user);
	free(j->project);
	free(j->preempted_by);
	free(j->job_dir);
	free(j->shared_dir);
	free(j->submit_dir);
	json_decref(j->spec);
	job_config_release(&j->cfg);
	free(j->reason);
	json_decref(j->history);
	json_decref(j->avoid);
	json_decref(j->stalled);
	json_decref(j->past_stalls);
	json_decref(j->fabric);
	json_decref(j->preflight);
	json_decref(j->hang);
	json_decref(j->last_ranks);
	json_decref(j->placement);
	free(j->failed_node);
	free(j->launch_error);
	free(j->log_error);
	free(j);
}

struct job *job_new(void)
{
	struct job *j = xcalloc(1, sizeof(*j));

	job_config_init(&j->cfg);
	j->history = json_array();
	j->avoid = json_array();
	j->stalled = json_array();
	j->past_stalls = json_array();
	j->placement = json_array();
	j->failed_rank = -1;
	j->state = DT_JOB_PENDING;
	return j;
}

void job_attempt_started(struct job *j)
{
	long long now = dt_now_us();

	if (!j->first_started_us)
		j->first_started_us = now;
	j->world = j->per_node * j->hold->nr;   /* an elastic restart may have fewer nodes */
}

void job_derive(struct job *j)
{
	j->gpu = j->cfg.gpus_per_node > 0;
	j->per_node = j->gpu ? j->cfg.gpus_per_node : j->cfg.procs_per_node;
	j->world = j->per_node * j->cfg.nodes;
}

void attempt_end_init(struct attempt_end *e)
{
	memset(e, 0, sizeof(*e));
	e->rank = -1;
	strbuf_init(&e->why, 0);
}

void attempt_end_release(struct attempt_end *e)
{
	free(e->node);
	e->node = NULL;
	strbuf_release(&e->why);
}
