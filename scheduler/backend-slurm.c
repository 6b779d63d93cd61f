/*
 * backend-slurm.c - the Slurm backend (backend.h; `backend: slurm` in
 * cluster.yaml, docs/slurm-backend.md).  Each attempt of a job is one Slurm
 * job: dtsched submits an sbatch (slurm.c: nodes, GPUs through --gres, the
 * time limit, --requeue, partition/account/qos and `slurm:` options) whose
 * script starts `dtagent --slurm` on every allocated node as one step (`dtctl
 * slurm-agents`, cli/slurm.h: the same step as dtctl inside an allocation); those
 * agents join dtsched like any other, and from there the attempt is the
 * agents backend's: the same launch (one POST /v1/tasks per node), stop,
 * describe, rank logs, stall and hang machinery, with the ranks inside
 * Slurm's step.  What this file adds is the allocation around it:
 *
 *   place:  no Slurm job yet -> sbatch (a worker thread); Slurm's PENDING
 *           and its reason are the job's; RUNNING and every allocated
 *           node's agent joined -> placed there (PLACE_OK)
 *   poll:   the agents' view, unless Slurm ended the job (scancel,
 *           TIMEOUT, NODE_FAIL, PREEMPTED) or requeued it (RestartCnt up):
 *           then ATTEMPT_ENDED, the requeue a restart that costs no retry
 *   step:   a Slurm job whose attempt is over is ended: its agents get
 *           SIGTERM (they stop their tasks, the job ends COMPLETED), or it
 *           is cancelled when still queued or deaf to that
 *
 * Every Slurm command runs on one worker thread, with argv (never a shell),
 * outside the lock: sbatch, scancel, `squeue -j <ours>` once a second (and at
 * once when an attempt's end must be checked against Slurm), `sinfo` every
 * 10 s for the partition's capacity (a job that can never fit is refused at
 * submit with the numbers).
 */
#include "jobs-int.h"
#include "dthome.h"
#include "hostrange.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "run-command.h"
#include "safefile.h"
#include "secret.h"
#include "slurm.h"
#include "usage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define POLL_MS 1000              /* squeue of our jobs */
#define POLL_START_MS 200         /* ... while one waits for Slurm to start it */
#define SINFO_MS 10000            /* the partition's capacity */
#define SETTLE_MS 5000            /* an attempt's end waits this long for Slurm's word */
#define END_KILL_MS 15000         /* SIGTERM to the agents, then scancel */
#define SBATCH_RETRY_MS 5000      /* sbatch failed for a reason that may pass */
#define PACK_IDLE_MS 2000         /* an allocation with nothing left to run is ended then */
#define OUTPUT_LIMIT (256 * 1024)
#define ARRAY_MAX 1000            /* tasks of one job array (pack: array) */

struct slurm_state {
	pthread_t worker;
	int started, stop, kick;
	pthread_cond_t cond;          /* with s->lock: work for the worker */
	struct slurm_capacity cap;
	long long cap_ms;             /* mono ms of cap (0: never read) */
	char *cap_err;                /* why sinfo failed, or NULL */
	long long polled_ms;          /* mono ms when the last squeue answer was applied */
	int swept;                    /* the orphans of a dtsched before this one dealt with */
	json_t *ends;                 /* Slurm job ids to end: [{id, kill}] */
	int cap_wanted;               /* a pack's allocation waits for sinfo's first answer */
	json_t *packs;                /* pack: allocation: {"<key>": the allocation's record,
				       * as a job's "slurm" plus its size and "joined"} */
};

static struct slurm_state *state_of(struct sched *s)
{
	return s->backend_data;
}

/* ------------------------------------------------------------ the job's record */

static json_t *sj(struct job *j)
{
	if (!j->slurm)
		j->slurm = json_object();
	return j->slurm;
}

static long long sid_of(const struct job *j)
{
	return json_get_int(j->slurm, "job_id", 0);
}

static enum slurm_phase phase_of(const struct job *j)
{
	return slurm_phase_of(json_get_str(j->slurm, "state", "PENDING"));
}

/* the pack (pack: allocation) whose allocation j runs in, or NULL: its own Slurm job */
static const char *pack_of(const struct job *j)
{
	return json_get_str(j->slurm, "pack", NULL);
}

/*
 * A sweep's trial submitted in a job array (pack: array): the array's key (the
 * sweep's id) while it waits for the array, and once in one, its id and task
 * ("array_id", "array_task"; "job_id" is the array's until Slurm starts the
 * task, then the task's own).  A retry or a later trial is its own Slurm job.
 */
static const char *array_of(const struct job *j)
{
	return json_get_str(j->slurm, "array", NULL);
}

static long long array_id_of(const struct job *j)
{
	return json_get_int(j->slurm, "array_id", 0);
}

/* The Slurm job of j as Slurm's commands name it: "812", or an array's task "812_3" */
static const char *slurm_name(const struct job *j, char *buf, size_t size)
{
	if (array_id_of(j) > 0)
		snprintf(buf, size, "%lld_%lld", array_id_of(j),
			 json_get_int(j->slurm, "array_task", 0));
	else
		snprintf(buf, size, "%lld", sid_of(j));
	return buf;
}

/*
 * The retry of an attempt whose rank failed while Slurm still runs its job
 * goes on in that allocation, on the agents that already joined: no new
 * sbatch, no queue wait.  For a job with a timeout only while what is left
 * of the Slurm job's time limit covers it (reuse_check()); else it gets a
 * new Slurm job (a fresh --time).
 */
static int reusable(const struct job *j)
{
	return json_is_true(json_object_get(j->slurm, "reuse")) && !j->cancel &&
	       !strcmp(j->state, DT_JOB_PENDING) && phase_of(j) == SLURM_RUNNING &&
	       json_get_int(j->slurm, "attempt", -1) == j->attempt - 1;
}

/* slurm_time_covers() for j's Slurm job: what is left of its limit now ("ends_ms") */
static int time_covers(const struct job *j, long long now, struct strbuf *why)
{
	long long ends = json_get_int(j->slurm, "ends_ms", 0);

	return slurm_time_covers(sid_of(j), !ends ? -1 : ends < 0 ? SLURM_UNLIMITED :
				 ends > now ? ends - now : 0, j->cfg.timeout_ms, why);
}

/* the job's event for a retry's Slurm job: in the allocation it failed in, or a new one */
static void retry_event(struct sched *s, const struct job *j, int reused, const char *why)
{
	dtlog(DTLOG_INFO, "job %s attempt %d: %s: %s", j->id, j->attempt,
	      reused ? "in the same Slurm job" : "a new Slurm job", why);
	events_add(s, "job.slurm_retry", json_pack("{s:s,s:s,s:s,s:i,s:I,s:b,s:s}", "job", j->id,
		   "name", j->name ? j->name : "", "user", j->user ? j->user : "", "attempt",
		   j->attempt, "slurm_job", (json_int_t)sid_of(j), "reused", reused, "reason",
		   why), NULL);
}

/*
 * A retry to go on in the allocation its attempt failed in whose time left
 * no longer covers its timeout: the flag goes (slurm_step() ends that Slurm
 * job, slurm_place() submits a new one) and the job's events say why.
 */
static void reuse_check(struct sched *s, struct job *j)
{
	struct strbuf why = STRBUF_INIT;

	if (reusable(j) && !time_covers(j, dt_mono_ms(), &why)) {
		json_object_del(j->slurm, "reuse");
		retry_event(s, j, 0, why.buf);
		job_save(s, j);
	}
	strbuf_release(&why);
}

static void set_str(json_t *o, const char *key, const char *v)
{
	json_object_set_new(o, key, v ? json_string(v) : json_null());
}

/* ------------------------------------------------------------ the worker's commands */

/* argv with extra environment, stdout+stderr into out; exit code, or -1 (could not run) */
static int slurm_run(const struct strvec *argv, const struct strvec *env, struct strbuf *out)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	int rc;

	strvec_pushv(&cp.args, (const char **)argv->v);
	if (env)
		strvec_pushv(&cp.env, (const char **)env->v);
	cp.err_to_out = 1;
	cp.no_stdin = 1;
	rc = capture_command(&cp, out, OUTPUT_LIMIT);
	child_process_clear(&cp);
	strbuf_trim(out);
	return rc;
}

/* One submission's argv and environment, made under the lock. */
struct submit {
	char job[16];             /* the job, or the pack's key */
	int pack;                 /* job is a pack's key (pack: allocation) */
	int attempt;
	struct strvec tasks;      /* a job array's: its jobs, task 0 first (pack: array) */
	struct strvec argv, env;
	char *script;
};

/*
 * The batch script: dtsched's own file (<home>/slurm/job.sh, never a place a
 * job can write: sbatch reads it as dtsched's user), the same for every job.
 */
static int write_script(struct sched *s, struct strbuf *path, struct strbuf *err)
{
	const char *text = slurm_script();
	struct strbuf dir = STRBUF_INIT, tmp = STRBUF_INIT;
	int fd, ret = -1;

	strbuf_addf(&dir, "%s/slurm", s->o.home);
	if (mkdir(dir.buf, 0700) < 0 && errno != EEXIST) {
		strbuf_addf(err, "cannot create '%s': %s", dir.buf, strerror(errno));
		goto out;
	}
	strbuf_addf(path, "%s/job.sh", dir.buf);
	strbuf_addf(&tmp, "%s/.job.sh.%d", dir.buf, (int)getpid());
	fd = open(tmp.buf, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0700);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || close(fd) < 0 ||
	    rename(tmp.buf, path->buf) < 0) {
		strbuf_addf(err, "cannot write '%s': %s", path->buf, strerror(errno));
		goto out;
	}
	ret = 0;
out:
	strbuf_release(&dir);
	strbuf_release(&tmp);
	return ret;
}


/*
 * The submission of attempt j->attempt of j, or (pack: rec, key) of the
 * allocation `key` shares, sized in rec; lock held.  -1 with why.
 */
static int submit_prepare(struct sched *s, struct job *j, const char *key, json_t *rec,
			  const struct strvec *tasks, struct submit *sub, struct strbuf *err)
{
	const struct cluster_config *cc = s->cc;
	struct strbuf script = STRBUF_INIT, output = STRBUF_INIT, hex = STRBUF_INIT;
	struct strbuf agent = STRBUF_INIT, why = STRBUF_INIT, secret = STRBUF_INIT;
	struct slurm_request r;
	int ret = -1;

	memset(sub, 0, sizeof(*sub));
	strvec_init(&sub->argv);
	strvec_init(&sub->env);
	strvec_init(&sub->tasks);
	if (!cc) {
		strbuf_addstr(err, "no cluster.yaml in dtsched's home");
		goto out;
	}
	if (!cc->head.address) {
		strbuf_addstr(err, "cluster.yaml has no head.address: the agents Slurm starts "
			      "need it to reach dtsched");
		goto out;
	}
	if (write_script(s, &script, err) < 0)
		goto out;
	if (s->o.secret)
		strbuf_addstr(&secret, s->o.secret);
	else
		strbuf_addf(&secret, "%s/secret", s->o.home);
	if (dt_secret_read(secret.buf, &hex) < 0) {
		strbuf_addf(err, "cannot read the cluster secret '%s'", secret.buf);
		goto out;
	}
	/* Slurm's output in the shared dir, where no job writes (jobs/ is theirs) */
	if (sf_mkdirs(cc->shared_dir, "slurm", 0755, SF_OWNER, &why) < 0) {
		strbuf_addf(err, "cannot create '%s/slurm': %s", cc->shared_dir, why.buf);
		goto out;
	}
	strbuf_addf(&output, "%s/slurm", cc->shared_dir);
	memset(&r, 0, sizeof(r));
	r.output_dir = output.buf;
	r.script = script.buf;
	if (rec) {
		/* the allocation: no time limit of a job's (the partition's); Slurm's
		 * warning before that limit goes to every job running in it */
		r.job_id = key;
		r.name = key;
		r.attempt = (int)json_get_int(rec, "generation", 0);
		r.nodes = (int)json_get_int(rec, "nodes_asked", 1);
		r.gpus_per_node = (int)json_get_int(rec, "gpus_asked", 0);
		r.cpus_per_node = (int)json_get_int(rec, "cpus_asked", 0);
	} else {
		r.job_id = j->id;
		r.name = j->name;
		r.attempt = j->attempt;
		r.nodes = j->cfg.nodes;
		r.gpus_per_node = j->gpu ? j->per_node : 0;
		r.cpus_per_node = j->gpu ? 0 : j->per_node;
		r.timeout_ms = j->cfg.timeout_ms;
		r.include = j->cfg.node_include;
		r.exclude = j->cfg.node_exclude;
	}
	if (tasks) {
		/* a job array, one task per job of the same shape (j: the first) */
		r.job_id = key;
		r.attempt = 0;
		r.array_size = (int)tasks->nr;
		r.array_parallel = (int)json_get_int(j->slurm, "array_parallel", 0);
		strvec_pushv(&sub->tasks, (const char **)tasks->v);
	}
	r.head = s->head_id;
	slurm_sbatch_argv(cc, &r, &sub->argv);
	/* dtctl beside dtsched: the nodes see the installation at the same path */
	dt_self_dir(&agent);
	strbuf_addstr(&agent, "/dtctl");
	strvec_pushf(&sub->env, "%s=%s", SLURM_ENV_DTCTL, agent.buf);
	strvec_pushf(&sub->env, "%s=%s:%d", SLURM_ENV_HEAD, cc->head.address, s->o.port);
	/* where Slurm's warning goes: the job's ranks, or those of every job running in
	 * the Slurm job (a pack's allocation, an array's task) */
	strvec_pushf(&sub->env, "%s=%s", rec || tasks ? SLURM_ENV_PACK : SLURM_ENV_JOB,
		     rec || tasks ? key : j->id);
	strvec_pushf(&sub->env, "DTCTL_AGENT_SECRET=%s", hex.buf);
	snprintf(sub->job, sizeof(sub->job), "%s", rec || tasks ? key : j->id);
	sub->pack = !!rec;
	sub->attempt = r.attempt;
	ret = 0;
out:
	strbuf_release(&script);
	strbuf_release(&output);
	strbuf_release(&hex);
	strbuf_release(&agent);
	strbuf_release(&why);
	strbuf_release(&secret);
	return ret;
}

static void submit_release(struct submit *sub)
{
	strvec_clear(&sub->argv);
	strvec_clear(&sub->env);
	strvec_clear(&sub->tasks);
	free(sub->script);
}

/* Slurm's lines as one: "sbatch: error: " prefixes gone, "; " between them */
static void slurm_message(struct strbuf *sb, const char *out)
{
	static const char *const prefixes[] = { "sbatch: error: ", "sbatch: fatal: ", "sbatch: " };
	char *buf = xstrdup(out), *save = NULL;
	size_t start = sb->len;

	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		for (size_t i = 0; i < ARRAY_SIZE(prefixes); i++)
			if (starts_with(line, prefixes[i])) {
				line += strlen(prefixes[i]);
				break;
			}
		if (*line)
			strbuf_addf(sb, "%s%s", sb->len > start ? "; " : "", line);
	}
	if (sb->len == start)
		strbuf_addstr(sb, "sbatch failed without a message");
	free(buf);
}

static void submit_apply(struct sched *s, const struct submit *sub, int rc, const char *out);

/* sbatch's answer to a job array: each of its jobs in its task, or the error */
static void submit_apply_array(struct sched *s, const struct submit *sub, int rc, const char *out)
{
	for (size_t k = 0; k < sub->tasks.nr; k++) {
		struct job *j = job_find(s, sub->tasks.v[k]);
		struct submit one = *sub;

		if (!j || !j->slurm)
			continue;
		snprintf(one.job, sizeof(one.job), "%s", j->id);
		strvec_init(&one.tasks);
		submit_apply(s, &one, rc, out);
		if (sid_of(j) > 0) {
			json_object_set_new(j->slurm, "array_id", json_integer(sid_of(j)));
			json_object_set_new(j->slurm, "array_task", json_integer((json_int_t)k));
			json_object_set_new(j->slurm, "array_job", json_sprintf("%lld_%zu",
									       sid_of(j), k));
			job_save(s, j);
		}
	}
}

/* sbatch's answer to sub, applied to its job (or its pack's record); lock held */
static void submit_apply(struct sched *s, const struct submit *sub, int rc, const char *out)
{
	struct job *j = sub->pack || sub->tasks.nr ? NULL : job_find(s, sub->job);
	json_t *rec = sub->pack ? json_object_get(state_of(s)->packs, sub->job) :
		      j ? sj(j) : NULL;
	long long sid = 0;
	const char *line = out;

	if (sub->tasks.nr) {
		submit_apply_array(s, sub, rc, out);
		return;
	}
	if (!rec)
		return;
	/* --parsable: "<id>" or "<id>;<cluster>" on the last line */
	for (const char *p = out; *p; p++)
		if (*p == '\n')
			line = p + 1;
	if (rc == 0)
		sid = strtoll(line, NULL, 10);
	json_object_del(rec, "submitting");
	if (sid > 0) {
		json_object_set_new(rec, "job_id", json_integer(sid));
		json_object_set_new(rec, "attempt", json_integer(sub->attempt));
		/* its output file's name (slurm.c), kept by Slurm across requeues */
		json_object_set_new(rec, "sbatch_attempt", json_integer(sub->attempt));
		json_object_set_new(rec, "state", json_string("PENDING"));
		json_object_set_new(rec, "restarts", json_integer(0));
		json_object_set_new(rec, "restarts_at_start", json_integer(0));
		json_object_del(rec, "error");
		json_object_del(rec, "stale");
		dtlog(DTLOG_INFO, "%s %s attempt %d: Slurm job %lld", sub->pack ? "allocation of" :
		      "job", sub->job, sub->attempt, sid);
	} else {
		struct strbuf msg = STRBUF_INIT, src = STRBUF_INIT;

		if (rc < 0)
			strbuf_addstr(&msg, "sbatch could not run (is slurm-client installed?)");
		else
			slurm_message(&msg, out);
		if (s->cc)
			slurm_refusal_source(s->cc, msg.buf, &src);
		if (src.len)
			strbuf_addf(&msg, " (%s)", src.buf);
		set_str(rec, "error", msg.buf);
		/* an option Slurm rejects is rejected again: a usage error; else retried */
		json_object_set_new(rec, "fatal", json_boolean(rc > 0 && (src.len ||
			strstr(out, "unrecognized option") || strstr(out, "Invalid") ||
			strstr(out, "invalid"))));
		json_object_set_new(rec, "failed_ms", json_integer(dt_mono_ms()));
		dtlog(DTLOG_WARN, "%s %s: sbatch failed (exit %d): %s", sub->pack ? "allocation of" :
		      "job", sub->job, rc, msg.buf);
		strbuf_release(&msg);
		strbuf_release(&src);
	}
	if (j)
		job_save(s, j);
}

/* Is `id` one of the comma-separated ids? */
static int id_listed(const char *ids, const char *id)
{
	size_t n = strlen(id);

	for (const char *p = ids; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, id, n) && (p[n] == ',' || !p[n]))
			return 1;
	return 0;
}

/*
 * squeue's answer (got) for the Slurm job of record rec, asked in ids: 1 if it
 * changed.  A job array's task (rec's "array_id" asked in ids) is its line
 * "<array>_<task>", which names the task's own job id once Slurm started it.
 */
static int record_apply(json_t *rec, const char *ids, json_t *got)
{
	const char *keys[] = { "state", "reason", "nodes" };
	char key[48], asked[24];
	json_t *o;
	int changed = 0;
	long long array = json_get_int(rec, "array_id", 0);

	if (json_get_int(rec, "job_id", 0) <= 0)
		return 0;
	snprintf(asked, sizeof(asked), "%lld", array > 0 ? array : json_get_int(rec, "job_id", 0));
	if (!id_listed(ids, asked))
		return 0;       /* not asked this time */
	if (array > 0)
		snprintf(key, sizeof(key), "%lld_%lld", array, json_get_int(rec, "array_task", 0));
	else
		snprintf(key, sizeof(key), "%s", asked);
	o = json_object_get(got, key);
	if (o && array > 0 && json_get_int(o, "job_id", 0) > 0 &&
	    json_get_int(o, "job_id", 0) != json_get_int(rec, "job_id", 0)) {
		/* Slurm started the task: its own job id (its agents' SLURM_JOB_ID) */
		json_object_set_new(rec, "job_id", json_integer(json_get_int(o, "job_id", 0)));
		changed = 1;
	}
	if (!o) {
		/* purged from slurmctld (MinJobAge) or unknown: over for us */
		if (strcmp(json_get_str(rec, "state", ""), "GONE")) {
			set_str(rec, "state", "GONE");
			changed = 1;
		}
		return changed;
	}
	for (size_t k = 0; k < ARRAY_SIZE(keys); k++)
		if (strcmp(json_get_str(rec, keys[k], ""), json_get_str(o, keys[k], ""))) {
			set_str(rec, keys[k], json_get_str(o, keys[k], ""));
			changed = 1;
		}
	/* what is left of its time limit, as a time on dt_mono_ms()'s clock (not saved
	 * as a change: it moves at every answer); -1: no limit */
	if (json_object_get(o, "left_s")) {
		long long left = json_get_int(o, "left_s", 0);

		json_object_set_new(rec, "ends_ms", json_integer(left == SLURM_UNLIMITED ? -1 :
								 dt_mono_ms() + left * 1000));
	} else {
		json_object_del(rec, "ends_ms");
	}
	if (json_get_int(rec, "restarts", 0) != json_get_int(o, "restarts", 0)) {
		json_object_set_new(rec, "restarts", json_integer(json_get_int(o, "restarts", 0)));
		changed = 1;
	}
	return changed;
}

/*
 * squeue's answer: every job of ours it names; those it does not know are
 * gone.  arrays: the answer is of SLURM_ARRAY_FORMAT, for job arrays' tasks.
 */
static void squeue_apply(struct sched *s, const char *ids, int arrays, int rc, const char *out)
{
	json_t *got = json_object(), *rec;
	int n = arrays ? slurm_array_parse(out, got) : slurm_squeue_parse(out, got);
	int all_unknown = rc != 0 && strstr(out, "Invalid job id");
	const char *key;

	if (rc != 0 && !n && !all_unknown) {
		dtlog(DTLOG_WARN, "squeue failed (exit %d): %s", rc, out);
		json_decref(got);
		return;
	}
	/* the packs' allocations (their jobs' records follow below: the same Slurm job) */
	json_object_foreach(state_of(s)->packs, key, rec)
		if (!arrays && record_apply(rec, ids, got))
			sched_wake(s);
	for (size_t i = 0; i < s->nr_jobs; i++) {
		struct job *j = s->jobs[i];

		if (j->slurm && !arrays == !(array_id_of(j) > 0) &&
		    !(pack_of(j) && state_final(j->state)) &&
		    record_apply(j->slurm, ids, got)) {
			j->wait_fp = 0;
			job_save(s, j);
			sched_wake(s);   /* the lifecycle's next step sees it at once */
		}
	}
	json_decref(got);
}

/*
 * Slurm jobs a dtsched before this one submitted and never recorded (it died
 * between sbatch and saving the id) or whose attempt is over (it died before
 * ending them).  Ours are found without trusting anything a job can write:
 * squeue --me (Slurm's word, munge-authenticated, on whose jobs they are),
 * the batch script dtsched's own file (Command: fixed at submit), and the
 * comment naming this state.db's head id, job and attempt, checked against
 * state.db.  A job still waiting for exactly that attempt adopts it; a
 * pack's allocation that running jobs were placed in is followed again
 * (worker()); any other is cancelled.  Lock held; `script` is
 * <home>/slurm/job.sh.
 */
static int array_recorded(struct sched *s, const char *key)
{
	for (size_t i = 0; i < s->nr_jobs; i++)
		if (!state_final(s->jobs[i]->state) && array_id_of(s->jobs[i]) > 0 &&
		    !strcmp(array_of(s->jobs[i]) ? array_of(s->jobs[i]) : "", key))
			return 1;
	return 0;
}

static void orphans_apply(struct sched *s, const char *script, const char *out)
{
	struct slurm_state *ss = state_of(s);
	json_t *got = json_object(), *o;
	const char *key;

	slurm_mine_parse(out, got);
	json_object_foreach(got, key, o) {
		long long sid = strtoll(key, NULL, 10);
		char id[16];
		int attempt;
		struct job *j;
		const char *why = NULL;

		if (slurm_comment_parse(json_get_str(o, "comment", ""), s->head_id, id, sizeof(id),
					&attempt) < 0 || strcmp(json_get_str(o, "command", ""), script) ||
		    slurm_phase_final(slurm_phase_of(json_get_str(o, "state", ""))))
			continue;       /* not this head's, or over */
		j = job_find(s, id);
		if (j && sid_of(j) == sid)
			continue;       /* recorded: followed as usual */
		if (json_get_int(json_object_get(ss->packs, id), "job_id", 0) == sid)
			continue;       /* a pack's allocation its running jobs are placed in */
		if (!j && array_recorded(s, id))
			continue;       /* a job array of sweep `id`: followed through its tasks */
		if (!j)
			why = "no such job in state.db";
		else if (state_final(j->state))
			why = "its job has ended";
		else if (j->attempt != attempt)
			why = "not its job's current attempt";
		else if (sid_of(j) > 0 && json_get_int(j->slurm, "attempt", -1) == attempt &&
			 strcmp(json_get_str(j->slurm, "state", ""), "GONE"))
			why = "its attempt has another Slurm job";
		if (why) {
			json_array_append_new(ss->ends, json_pack("{s:I,s:b}", "id", (json_int_t)sid,
								  "kill", 1));
			dtlog(DTLOG_WARN, "Slurm job %lld (%s attempt %d) left by an earlier dtsched: "
			      "cancelling it (%s)", sid, id, attempt, why);
			continue;
		}
		json_object_clear(sj(j));
		json_object_set_new(j->slurm, "job_id", json_integer(sid));
		json_object_set_new(j->slurm, "attempt", json_integer(attempt));
		json_object_set_new(j->slurm, "sbatch_attempt", json_integer(attempt));
		json_object_set_new(j->slurm, "restarts", json_integer(json_get_int(o, "restarts", 0)));
		json_object_set_new(j->slurm, "restarts_at_start",
				    json_integer(json_get_int(o, "restarts", 0)));
		set_str(j->slurm, "state", json_get_str(o, "state", ""));
		set_str(j->slurm, "reason", json_get_str(o, "reason", ""));
		set_str(j->slurm, "nodes", json_get_str(o, "nodes", ""));
		j->wait_fp = 0;
		job_save(s, j);
		dtlog(DTLOG_WARN, "Slurm job %lld (%s attempt %d) submitted by an earlier dtsched "
		      "that did not record it: adopted", sid, id, attempt);
	}
	json_decref(got);
}

/* squeue of our own jobs, applied by orphans_apply(); lock held, dropped meanwhile */
static void orphans_sweep(struct sched *s)
{
	struct slurm_state *ss = state_of(s);
	const char *squeue[] = { "squeue", "--me", "-h", "-O", SLURM_MINE_FORMAT, NULL };
	struct strvec argv = STRVEC_INIT;
	struct strbuf out = STRBUF_INIT, script = STRBUF_INIT;
	int rc;

	strbuf_addf(&script, "%s/slurm/job.sh", s->o.home);
	pthread_mutex_unlock(&s->lock);
	strvec_pushv(&argv, squeue);
	rc = slurm_run(&argv, NULL, &out);
	pthread_mutex_lock(&s->lock);
	if (rc == 0) {
		orphans_apply(s, script.buf, out.buf);
		ss->swept = 1;
		sched_wake(s);
	} else {
		/* no sbatch until it answers: a submit now could duplicate an orphan */
		dtlog(DTLOG_WARN, "squeue --me failed (exit %d): %s; retrying before any sbatch",
		      rc, out.buf);
	}
	strvec_clear(&argv);
	strbuf_release(&out);
	strbuf_release(&script);
}

/* j's sbatch could not even be made (why): it fails at its next place (fatal) */
static void submit_unprepared(struct sched *s, struct job *j, const char *why)
{
	json_object_del(j->slurm, "submitting");
	set_str(j->slurm, "error", why);
	json_object_set_new(j->slurm, "fatal", json_true());
	job_save(s, j);
}

static void *worker_main(void *arg)
{
	struct sched *s = arg;
	struct slurm_state *ss = state_of(s);

	pthread_mutex_lock(&s->lock);
	while (!ss->stop) {
		struct submit *subs = NULL;
		size_t nr_subs = 0, alloc_subs = 0;
		struct strbuf ids = STRBUF_INIT, out = STRBUF_INIT, partition = STRBUF_INIT;
		struct strbuf arrays = STRBUF_INIT;
		struct strvec argv = STRVEC_INIT;
		json_t *ends, *e, *rec, *groups = json_object(), *g;
		const char *key;
		long long now = dt_mono_ms();
		int want_sinfo = !ss->cap_ms || now - ss->cap_ms >= SINFO_MS, rc, starting = 0;
		size_t k;

		if (!ss->swept)
			orphans_sweep(s);
		ends = ss->ends;
		ss->ends = json_array();
		ss->kick = 0;
		for (size_t i = 0; i < s->nr_jobs; i++) {
			struct job *j = s->jobs[i];

			if (ss->swept && json_is_true(json_object_get(j->slurm, "submit")) &&
			    array_of(j)) {
				/* a sweep's trials waiting together: one job array (below) */
				json_object_del(j->slurm, "submit");
				if (!json_object_get(groups, array_of(j)))
					json_object_set_new(groups, array_of(j), json_array());
				json_array_append_new(json_object_get(groups, array_of(j)),
						      json_string(j->id));
			} else if (ss->swept && json_is_true(json_object_get(j->slurm, "submit"))) {
				struct strbuf err = STRBUF_INIT;

				json_object_del(j->slurm, "submit");
				ALLOC_GROW(subs, nr_subs + 1, alloc_subs);
				if (submit_prepare(s, j, NULL, NULL, NULL, &subs[nr_subs], &err) < 0) {
					submit_release(&subs[nr_subs]);
					submit_unprepared(s, j, err.buf);
				} else {
					nr_subs++;
				}
				strbuf_release(&err);
			}
			if (sid_of(j) > 0 && !pack_of(j) && !slurm_phase_final(phase_of(j)) &&
			    strcmp(json_get_str(j->slurm, "state", ""), "GONE")) {
				char a[24];

				snprintf(a, sizeof(a), "%lld", array_id_of(j));
				if (array_id_of(j) <= 0)
					strbuf_addf(&ids, "%s%lld", ids.len ? "," : "", sid_of(j));
				else if (!id_listed(arrays.buf, a))
					strbuf_addf(&arrays, "%s%s", arrays.len ? "," : "", a);
				starting |= !strcmp(j->state, DT_JOB_PENDING);
			}
		}
		/* each sweep's trials waiting to be submitted: job arrays of at most
		 * ARRAY_MAX tasks (Slurm's default MaxArraySize is 1001) */
		json_object_foreach(groups, key, g) {
			for (size_t from = 0; from < json_array_size(g); from += ARRAY_MAX) {
				struct strvec tasks = STRVEC_INIT;
				struct strbuf err = STRBUF_INIT;

				for (k = from; k < json_array_size(g) && k < from + ARRAY_MAX; k++)
					strvec_push(&tasks, json_string_value(json_array_get(g, k)));
				ALLOC_GROW(subs, nr_subs + 1, alloc_subs);
				if (submit_prepare(s, job_find(s, tasks.v[0]), key, NULL, &tasks,
						   &subs[nr_subs], &err) < 0) {
					submit_release(&subs[nr_subs]);
					for (size_t t = 0; t < tasks.nr; t++)
						submit_unprepared(s, job_find(s, tasks.v[t]), err.buf);
				} else {
					nr_subs++;
				}
				strvec_clear(&tasks);
				strbuf_release(&err);
			}
		}
		json_decref(groups);
		json_object_foreach(ss->packs, key, rec) {
			if (json_is_true(json_object_get(rec, "submit"))) {
				struct strbuf err = STRBUF_INIT;

				json_object_del(rec, "submit");
				ALLOC_GROW(subs, nr_subs + 1, alloc_subs);
				if (submit_prepare(s, NULL, key, rec, NULL, &subs[nr_subs], &err) < 0) {
					submit_release(&subs[nr_subs]);
					json_object_del(rec, "submitting");
					set_str(rec, "error", err.buf);
					json_object_set_new(rec, "fatal", json_true());
				} else {
					nr_subs++;
				}
				strbuf_release(&err);
			}
			if (json_get_int(rec, "job_id", 0) > 0 &&
			    !slurm_phase_final(slurm_phase_of(json_get_str(rec, "state", ""))) &&
			    strcmp(json_get_str(rec, "state", ""), "GONE")) {
				strbuf_addf(&ids, "%s%lld", ids.len ? "," : "",
					    json_get_int(rec, "job_id", 0));
				starting |= strcmp(json_get_str(rec, "state", ""), "RUNNING") != 0;
			}
		}
		if (s->cc && s->cc->slurm.partition)
			strbuf_addstr(&partition, s->cc->slurm.partition);
		pthread_mutex_unlock(&s->lock);

		/* ---- outside the lock: the commands */
		if (want_sinfo) {
			struct slurm_capacity cap;

			const char *sinfo[] = { "sinfo", "-h", "-N", "-o", SLURM_SINFO_FORMAT, NULL };

			strvec_pushv(&argv, sinfo);
			if (partition.len)
				strvec_pushf(&argv, "--partition=%s", partition.buf);
			rc = slurm_run(&argv, NULL, &out);
			slurm_sinfo_parse(rc == 0 ? out.buf : "", &cap);
			pthread_mutex_lock(&s->lock);
			if (ss->cap_wanted)
				sched_wake(s);   /* a pack's allocation waits for its size */
			ss->cap_wanted = 0;
			ss->cap = cap;
			ss->cap_ms = dt_mono_ms();
			free(ss->cap_err);
			ss->cap_err = rc == 0 ? NULL : xstrdup(out.len ? out.buf : "sinfo failed");
			pthread_mutex_unlock(&s->lock);
			strvec_clear(&argv);
			strbuf_reset(&out);
		}
		for (size_t i = 0; i < nr_subs; i++) {
			rc = slurm_run(&subs[i].argv, &subs[i].env, &out);
			pthread_mutex_lock(&s->lock);
			submit_apply(s, &subs[i], rc, out.buf);
			sched_wake(s);
			{
				/* asked about in this round's squeue already */
				struct job *j = subs[i].pack ? NULL : job_find(s, subs[i].tasks.nr ?
							subs[i].tasks.v[0] : subs[i].job);
				json_t *r = subs[i].pack ? json_object_get(ss->packs, subs[i].job) :
					    j ? j->slurm : NULL;

				if (json_get_int(r, "job_id", 0) > 0) {
					strbuf_addf(subs[i].tasks.nr ? &arrays : &ids, "%s%lld",
						    (subs[i].tasks.nr ? arrays.len : ids.len) ? "," : "",
						    json_get_int(r, "job_id", 0));
					starting = 1;
				}
			}
			pthread_mutex_unlock(&s->lock);
			submit_release(&subs[i]);
			strbuf_reset(&out);
		}
		json_array_foreach(ends, k, e) {
			long long sid = json_get_int(e, "id", 0);

			/* SIGTERM to the agents (the steps): they stop their tasks and exit;
			 * a job still queued, or deaf to that, is cancelled */
			strvec_push(&argv, "scancel");
			if (!json_is_true(json_object_get(e, "kill")))
				strvec_push(&argv, "--signal=TERM");
			if (json_get_str(e, "task", NULL))   /* a job array's task: "812_3" */
				strvec_push(&argv, json_get_str(e, "task", NULL));
			else
				strvec_pushf(&argv, "%lld", sid);
			rc = slurm_run(&argv, NULL, &out);
			if (rc != 0)
				dtlog(DTLOG_INFO, "scancel %lld: exit %d: %s", sid, rc, out.buf);
			strvec_clear(&argv);
			strbuf_reset(&out);
		}
		/* our jobs, then job arrays (every task of each, the waiting ones in one line) */
		for (int arr = 0; arr < 2; arr++) {
			const char *squeue[] = { "squeue", "-h", "-t", "all", "-O",
						 arr ? SLURM_ARRAY_FORMAT : SLURM_SQUEUE_FORMAT, NULL };
			const char *asked = arr ? arrays.buf : ids.buf;

			if (!*asked)
				continue;
			strvec_pushv(&argv, squeue);
			strvec_pushf(&argv, "--jobs=%s", asked);
			rc = slurm_run(&argv, NULL, &out);
			pthread_mutex_lock(&s->lock);
			squeue_apply(s, asked, arr, rc, out.buf);
			ss->polled_ms = dt_mono_ms();
			pthread_mutex_unlock(&s->lock);
			strvec_clear(&argv);
			strbuf_reset(&out);
		}
		json_decref(ends);
		free(subs);
		strbuf_release(&ids);
		strbuf_release(&arrays);
		strbuf_release(&out);
		strbuf_release(&partition);

		pthread_mutex_lock(&s->lock);
		if (!ss->stop && !ss->kick) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += (starting ? POLL_START_MS : POLL_MS) * 1000000LL;
			ts.tv_sec += ts.tv_nsec / 1000000000L;
			ts.tv_nsec %= 1000000000L;
			pthread_cond_timedwait(&ss->cond, &s->lock, &ts);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* The worker, started with the first use; lock held. */
static struct slurm_state *worker(struct sched *s)
{
	struct slurm_state *ss = state_of(s);

	if (!ss) {
		static const char *const transient[] = {
			"submit", "submitting", "settle_ms", "end_ms", "failed_ms",
		};

		ss = xcalloc(1, sizeof(*ss));
		pthread_cond_init(&ss->cond, NULL);
		ss->ends = json_array();
		ss->packs = json_object();
		s->backend_data = ss;
		/* what a dtsched before this one was doing (its clock) is not ours */
		for (size_t i = 0; i < s->nr_jobs; i++) {
			struct job *j = s->jobs[i];

			for (size_t k = 0; j->slurm && k < ARRAY_SIZE(transient); k++)
				json_object_del(j->slurm, transient[k]);
			/* a pack's allocation its running jobs were placed in: followed again */
			if (pack_of(j) && sid_of(j) > 0 && !state_final(j->state) &&
			    strcmp(j->state, DT_JOB_PENDING) &&
			    !json_object_get(ss->packs, pack_of(j)))
				json_object_set_new(ss->packs, pack_of(j), json_pack(
					"{s:I,s:s,s:s,s:I,s:b}", "job_id", (json_int_t)sid_of(j),
					"state", json_get_str(j->slurm, "state", "RUNNING"),
					"nodes", json_get_str(j->slurm, "nodes", ""), "restarts",
					(json_int_t)json_get_int(j->slurm, "restarts", 0), "joined", 1));
		}
	}
	if (!ss->started && !pthread_create(&ss->worker, NULL, worker_main, s))
		ss->started = 1;
	return ss;
}

static void kick(struct slurm_state *ss)
{
	ss->kick = 1;
	pthread_cond_signal(&ss->cond);
}

/* ------------------------------------------------------------ place */

/*
 * The node of the allocation named `name`, its agent joined for Slurm job sid
 * (rec: the job's, or its pack's, record: which agents are stale).
 */
static int joined(struct sched *s, const json_t *rec, const char *name, long long sid)
{
	struct node *n = node_find(s, name);
	char tag[48];
	const char *base, *stale;

	if (!n || strcmp(n->state, DT_NODE_UP))
		return 0;
	/* dtagent --slurm's home is <tmp>/dtagent-slurm-<job>.<step>-<node>-XXXXXX */
	snprintf(tag, sizeof(tag), "dtagent-slurm-%lld.", sid);
	base = n->home ? strrchr(n->home, '/') : NULL;
	if (!base || !starts_with(base + 1, tag))
		return 0;
	/* not the agent of a run Slurm requeued since */
	stale = json_get_str(json_object_get(rec, "stale"), name, NULL);
	return !stale || !n->agent_started || strcmp(stale, n->agent_started);
}


/* ------------------------------------------------------------ pack: allocation */

/*
 * A job of pack `key` that runs, or whose slots are still held (pending: or
 * waits to run): 1
 */
static int live_in_pack(struct sched *s, const char *key, int pending)
{
	for (size_t i = 0; i < s->nr_jobs; i++) {
		struct job *j = s->jobs[i];

		if (!pack_of(j) || strcmp(pack_of(j), key))
			continue;
		if (j->hold || (!state_final(j->state) &&
				(pending || strcmp(j->state, DT_JOB_PENDING))))
			return 1;
	}
	return 0;
}

/*
 * A new record for the allocation j's pack shares, sized from j (the pack's
 * size, or `pack_slots` jobs of j's shape at once on the partition's nodes):
 * 0, or -1 (WAIT: sinfo not read yet) or -2 (NEVER: it can never fit), why in
 * reason.  Lock held.
 */
static int pack_new(struct slurm_state *ss, const struct cluster_config *cc, struct job *j,
		    int generation, struct strbuf *reason)
{
	int nodes, per;
	json_t *rec;

	if (!ss->cap_ms || ss->cap_err) {
		ss->cap_wanted = 1;
		strbuf_addf(reason, "reading the partition's nodes for the allocation (sinfo%s%s)",
			    ss->cap_err ? ": " : "", ss->cap_err ? ss->cap_err : "");
		return -1;
	}
	slurm_pack_size(&ss->cap, j->gpu, j->cfg.nodes, j->per_node,
			(int)json_get_int(j->slurm, "pack_slots", 1),
			(int)json_get_int(j->slurm, "pack_nodes", 0),
			(int)json_get_int(j->slurm, "pack_gpus", 0), &nodes, &per);
	strbuf_addstr(reason, "the allocation (pack: allocation) ");
	if (slurm_fits(&ss->cap, cc ? cc->slurm.partition : NULL, nodes, j->gpu ? per : 0,
		       j->gpu ? 0 : per, reason) < 0)
		return -2;
	strbuf_reset(reason);
	rec = json_pack("{s:i,s:i,s:i,s:i,s:b,s:b}", "nodes_asked", nodes,
			"gpus_asked", j->gpu ? per : 0, "cpus_asked", j->gpu ? 0 : per,
			"generation", generation, "submit", 1, "submitting", 1);
	json_object_set_new(ss->packs, pack_of(j), rec);
	return 0;
}

/*
 * Place j in its pack's allocation: made (sbatch) when there is none, or the
 * one before ended; once Slurm runs it and its agents joined, on free slots
 * of its nodes, at once (no Slurm job per trial).  Lock held.
 */
static enum place_status pack_place(struct sched *s, struct slurm_state *ss, struct job *j,
				    struct pool *p, struct place_result *res, struct strbuf *reason)
{
	const char *key = pack_of(j), *st;
	json_t *rec = json_object_get(ss->packs, key);
	struct strvec nodes = STRVEC_INIT;
	struct strbuf err = STRBUF_INIT;
	enum slurm_phase ph;
	long long sid;
	int got_nodes = 0, seen = 0, rc;

	if (rec && json_get_str(rec, "error", NULL)) {
		strbuf_addf(reason, "sbatch refused the allocation of %s: %s", key,
			    json_get_str(rec, "error", ""));
		if (json_is_true(json_object_get(rec, "fatal"))) {
			set_str(j->slurm, "fail", reason->buf);   /* slurm_step() ends it */
			return PLACE_NEVER;
		}
		if (dt_mono_ms() - json_get_int(rec, "failed_ms", 0) < SBATCH_RETRY_MS)
			return PLACE_WAIT;
		json_object_del(rec, "error");
		json_object_set_new(rec, "submit", json_true());
		json_object_set_new(rec, "submitting", json_true());
		kick(ss);
	}
	if (json_is_true(json_object_get(rec, "submitting"))) {
		strbuf_addf(reason, "submitting the allocation of %s to Slurm (sbatch)", key);
		return PLACE_WAIT;
	}
	sid = json_get_int(rec, "job_id", 0);
	st = json_get_str(rec, "state", "");
	ph = slurm_phase_of(st);
	if (rec && (slurm_phase_final(ph) || !strcmp(st, "GONE"))) {
		int gen = (int)json_get_int(rec, "generation", 0) + 1;

		if (!json_is_true(json_object_get(rec, "joined"))) {
			strbuf_addf(reason, "Slurm allocation %lld of %s ended %s before its agents "
				    "joined (%s; see %s/slurm/%s.%d-%lld.out)", sid, key, st,
				    json_get_str(rec, "reason", ""), s->cc ? s->cc->shared_dir : "",
				    key, gen - 1, sid);
			json_object_del(ss->packs, key);   /* the next job tries a new one */
			set_str(j->slurm, "fail", reason->buf);
			return PLACE_NEVER;
		}
		if (live_in_pack(s, key, 0))
			goto wait_end;
		rec = NULL;
		json_object_del(ss->packs, key);
		rc = pack_new(ss, s->cc, j, gen, reason);
		goto made;
	}
	if (!rec) {
		rc = pack_new(ss, s->cc, j, 0, reason);
made:
		if (rc == -2) {
			set_str(j->slurm, "fail", reason->buf);
			return PLACE_NEVER;
		}
		if (rc < 0)
			return PLACE_WAIT;
		kick(ss);
		strbuf_addf(reason, "submitting the allocation of %s to Slurm (sbatch)", key);
		return PLACE_WAIT;
	}
	if (ph != SLURM_RUNNING) {
wait_end:
		strbuf_addf(reason, "Slurm allocation %lld of %s %s (%s)", sid, key, st,
			    json_get_str(rec, "reason", ""));
		return PLACE_WAIT;
	}
	if (hostrange_expand(json_get_str(rec, "nodes", ""), &nodes, &err) < 0) {
		strbuf_addf(reason, "Slurm allocation %lld RUNNING on '%s': %s", sid,
			    json_get_str(rec, "nodes", ""), err.buf);
		goto out;
	}
	memset(res, 0, sizeof(*res));
	for (size_t k = 0; k < nodes.nr && got_nodes < j->cfg.nodes; k++) {
		size_t i;
		int got = 0;

		if (!joined(s, rec, nodes.v[k], sid))
			continue;
		seen++;
		for (i = 0; i < p->nr && strcmp(p->n[i].name, nodes.v[k]); i++)
			;
		if (i == p->nr)
			continue;
		for (int x = 0; x < p->n[i].total && got < j->per_node; x++)
			if (!p->n[i].used[x])
				res->slots[got_nodes][got++] = x;
		if (got == j->per_node)
			res->node[got_nodes++] = (int)i;
	}
	if (got_nodes < j->cfg.nodes) {
		if (seen < (int)nodes.nr)
			strbuf_addf(reason, "Slurm allocation %lld of %s RUNNING on %s: %d of %d "
				    "agent(s) joined", sid, key, json_get_str(rec, "nodes", ""), seen,
				    (int)nodes.nr);
		else
			strbuf_addf(reason, "Slurm allocation %lld of %s on %s: every slot is taken "
				    "by its other jobs", sid, key, json_get_str(rec, "nodes", ""));
		goto out;
	}
	res->nr = got_nodes;
	/* the attempt runs on this run of the allocation: its record is the job's */
	json_object_set_new(rec, "joined", json_true());
	json_object_set_new(j->slurm, "job_id", json_integer(sid));
	json_object_set_new(j->slurm, "attempt", json_integer(j->attempt));
	set_str(j->slurm, "state", st);
	set_str(j->slurm, "reason", json_get_str(rec, "reason", ""));
	set_str(j->slurm, "nodes", json_get_str(rec, "nodes", ""));
	json_object_set_new(j->slurm, "restarts", json_integer(json_get_int(rec, "restarts", 0)));
	json_object_set_new(j->slurm, "restarts_at_start",
			    json_integer(json_get_int(rec, "restarts", 0)));
	json_object_del(j->slurm, "stale");
	strvec_clear(&nodes);
	strbuf_release(&err);
	return PLACE_OK;
out:
	strvec_clear(&nodes);
	strbuf_release(&err);
	return PLACE_WAIT;
}


/*
 * j, a sweep's trial, is being submitted in its sweep's job array: so are the
 * sweep's other trials that wait for their first Slurm job, whether or not
 * the queue's pass reaches them now (one array, not one per pass).  Lock held.
 */
static void array_gather(struct sched *s, struct job *j)
{
	for (size_t i = 0; i < s->nr_jobs; i++) {
		struct job *o = s->jobs[i];

		if (o == j || !o->slurm || !array_of(o) || strcmp(array_of(o), array_of(j)) ||
		    sid_of(o) > 0 || o->cancel || o->attempt || strcmp(o->state, DT_JOB_PENDING) ||
		    json_object_get(o->slurm, "submitting") || json_object_get(o->slurm, "error"))
			continue;
		json_object_set_new(o->slurm, "submit", json_true());
		json_object_set_new(o->slurm, "submitting", json_true());
	}
}

static enum place_status slurm_place(struct sched *s, struct job *j, struct pool *p,
				     struct place_result *res, struct strbuf *reason)
{
	struct slurm_state *ss = worker(s);
	enum slurm_phase ph;
	struct strvec nodes = STRVEC_INIT;
	struct strbuf err = STRBUF_INIT;
	long long sid;
	enum place_status st = PLACE_WAIT;

	if (!j->id[0] || !sid_of(j)) {
		/* can it ever run?  sinfo's numbers, read now when never read */
		if (ss->cap_ms && !ss->cap_err &&
		    slurm_fits(&ss->cap, s->cc ? s->cc->slurm.partition : NULL, j->cfg.nodes,
			       j->gpu ? j->per_node : 0, j->gpu ? 0 : j->per_node, reason) < 0)
			return PLACE_NEVER;
		if (!j->id[0]) {
			strbuf_addstr(reason, "to be submitted to Slurm");
			return PLACE_WAIT;
		}
	}
	if (pack_of(j))
		return pack_place(s, ss, j, p, res, reason);
	sid = sid_of(j);
	if (json_get_str(j->slurm, "error", NULL)) {
		strbuf_addf(reason, "sbatch refused it: %s", json_get_str(j->slurm, "error", ""));
		if (json_is_true(json_object_get(j->slurm, "fatal"))) {
			set_str(j->slurm, "fail", reason->buf);   /* slurm_step() ends it */
			return PLACE_NEVER;
		}
		if (dt_mono_ms() - json_get_int(j->slurm, "failed_ms", 0) < SBATCH_RETRY_MS)
			return PLACE_WAIT;
		json_object_del(j->slurm, "error");
	}
	if (json_is_true(json_object_get(j->slurm, "submitting"))) {
		strbuf_addstr(reason, "submitting to Slurm (sbatch)");
		return PLACE_WAIT;
	}
	if (sid > 0)
		reuse_check(s, j);
	if (sid > 0 && reusable(j)) {
		time_covers(j, dt_mono_ms(), &err);
		retry_event(s, j, 1, err.buf);
		strbuf_reset(&err);
		json_object_set_new(j->slurm, "attempt", json_integer(j->attempt));
		json_object_del(j->slurm, "reuse");
	}
	if (sid > 0 && json_get_int(j->slurm, "attempt", -1) != j->attempt &&
	    !slurm_phase_final(phase_of(j)) && strcmp(json_get_str(j->slurm, "state", ""), "GONE")) {
		/* a retry: the allocation of the attempt before is being ended (slurm_step) */
		strbuf_addf(reason, "waiting for Slurm job %lld of attempt %lld to end", sid,
			    json_get_int(j->slurm, "attempt", -1));
		return PLACE_WAIT;
	}
	if (sid <= 0 || json_get_int(j->slurm, "attempt", -1) != j->attempt ||
	    !strcmp(json_get_str(j->slurm, "state", ""), "GONE")) {
		/* a new Slurm job for this attempt: a trial's first in its sweep's job
		 * array (pack: array), a retry its own */
		json_t *array = sid <= 0 && array_of(j) ? json_pack("{s:s,s:I}", "array",
			array_of(j), "array_parallel", (json_int_t)json_get_int(j->slurm,
			"array_parallel", 0)) : NULL;

		json_object_clear(sj(j));
		if (array)
			json_object_update(j->slurm, array);
		json_decref(array);
		json_object_set_new(j->slurm, "submit", json_true());
		json_object_set_new(j->slurm, "submitting", json_true());
		if (array_of(j))
			array_gather(s, j);
		kick(ss);
		strbuf_addstr(reason, "submitting to Slurm (sbatch)");
		return PLACE_WAIT;
	}
	ph = phase_of(j);
	if (ph == SLURM_WAITING) {
		char name[48];

		strbuf_addf(reason, "Slurm job %s %s (%s)", slurm_name(j, name, sizeof(name)),
			    json_get_str(j->slurm, "state", ""), json_get_str(j->slurm, "reason", ""));
		return PLACE_WAIT;
	}
	if ((ph == SLURM_FAILED || ph == SLURM_DONE) &&
	    json_get_int(j->slurm, "restarts", 0) > json_get_int(j->slurm, "restarts_at_start", 0)) {
		/*
		 * Slurm requeued it (this attempt is that restart), then ended it
		 * before it ran again.  Seen with Slurm 22.05 on a loaded machine:
		 * about a second after `scontrol requeue`, FAILED (NonZeroExitCode)
		 * with RestartCnt 1 and nothing but the first run's lines in its
		 * output, as if that run's batch script, which exits non-zero once
		 * its srun is killed, ended the requeued job.  The restart is still
		 * owed: a new Slurm job for it, once (its own restarts start at 0,
		 * so a failure of that one fails the job).
		 */
		dtlog(DTLOG_WARN, "job %s attempt %d: Slurm ended job %lld %s (%s) after requeueing "
		      "it, before it ran again: a new Slurm job for this attempt", j->id, j->attempt,
		      sid, json_get_str(j->slurm, "state", ""), json_get_str(j->slurm, "reason", ""));
		json_object_clear(sj(j));
		json_object_set_new(j->slurm, "submit", json_true());
		json_object_set_new(j->slurm, "submitting", json_true());
		kick(ss);
		strbuf_addf(reason, "Slurm ended job %lld after requeueing it, before it ran again: "
			    "submitting a new Slurm job (sbatch)", sid);
		return PLACE_WAIT;
	}
	if (ph != SLURM_RUNNING) {
		/* it ended before its ranks started: the agents never joined */
		/* the file sbatch named for the attempt that submitted it: Slurm
		 * writes there again after a requeue (restarts count on) */
		strbuf_addf(reason, "Slurm job %lld ended %s before its agents joined (%s; see "
			    "%s/slurm/%s.%d-%lld.out)", sid, json_get_str(j->slurm, "state", ""),
			    json_get_str(j->slurm, "reason", ""), s->cc ? s->cc->shared_dir : "",
			    j->id, (int)json_get_int(j->slurm, "sbatch_attempt", j->attempt), sid);
		if (ph == SLURM_ENDING)
			return PLACE_WAIT;
		set_str(j->slurm, "fail", reason->buf);   /* slurm_step() ends it */
		return PLACE_NEVER;
	}
	if (hostrange_expand(json_get_str(j->slurm, "nodes", ""), &nodes, &err) < 0 ||
	    (int)nodes.nr != j->cfg.nodes) {
		strbuf_addf(reason, "Slurm job %lld RUNNING on '%s': not %d node(s)", sid,
			    json_get_str(j->slurm, "nodes", ""), j->cfg.nodes);
		goto out;
	}
	memset(res, 0, sizeof(*res));
	for (size_t k = 0; k < nodes.nr; k++) {
		size_t i;
		int got = 0;

		if (!joined(s, j->slurm, nodes.v[k], sid)) {
			strbuf_addf(reason, "Slurm job %lld RUNNING on %s: waiting for the agent on "
				    "'%s' to join", sid, json_get_str(j->slurm, "nodes", ""),
				    nodes.v[k]);
			goto out;
		}
		for (i = 0; i < p->nr && strcmp(p->n[i].name, nodes.v[k]); i++)
			;
		if (i == p->nr)
			goto out;
		for (int x = 0; x < p->n[i].total && got < j->per_node; x++)
			if (!p->n[i].used[x])
				res->slots[k][got++] = x;
		if (got < j->per_node) {
			strbuf_addf(reason, "Slurm job %lld: the agent on '%s' reports %d free %s, "
				    "the job needs %d", sid, nodes.v[k], got, j->gpu ? "GPU(s)" :
				    "slot(s)", j->per_node);
			goto out;
		}
		res->node[k] = (int)i;
	}
	res->nr = (int)nodes.nr;
	/* the attempt starts on this run of the Slurm job */
	json_object_set_new(j->slurm, "restarts_at_start",
			    json_integer(json_get_int(j->slurm, "restarts", 0)));
	json_object_set_new(j->slurm, "attempt", json_integer(j->attempt));
	st = PLACE_OK;
out:
	strvec_clear(&nodes);
	strbuf_release(&err);
	return st;
}

/* ------------------------------------------------------------ poll */

static enum attempt_status slurm_ended(struct sched *s, struct job *j, struct attempt_end *e)
{
	long long sid = sid_of(j);
	enum slurm_phase ph = phase_of(j);
	const char *st = json_get_str(j->slurm, "state", "");
	int requeued = json_get_int(j->slurm, "restarts", 0) >
		       json_get_int(j->slurm, "restarts_at_start", 0) || ph == SLURM_WAITING;

	const char *pack = pack_of(j);

	if (pack && !requeued && ph != SLURM_CANCELLED) {
		/* the allocation went (preempted, a node lost, its time limit, ended):
		 * not this job's doing; it runs again in the next one */
		requeued = 1;
	}
	if (requeued) {
		/* its agents of this run are stale once it runs again */
		json_t *stale = json_object();
		json_t *rec = pack ? json_object_get(state_of(s)->packs, pack) : NULL;

		for (int k = 0; j->hold && k < j->hold->nr; k++) {
			struct node *n = node_find(s, j->hold->place[k].node);

			if (n && n->agent_started) {
				json_object_set_new(stale, n->name, json_string(n->agent_started));
				if (rec && json_get_int(rec, "job_id", 0) == sid) {
					if (!json_is_object(json_object_get(rec, "stale")))
						json_object_set_new(rec, "stale", json_object());
					json_object_set_new(json_object_get(rec, "stale"), n->name,
							    json_string(n->agent_started));
				}
			}
		}
		json_object_set_new(j->slurm, "stale", stale);
		json_object_set_new(j->slurm, "attempt", json_integer(j->attempt + 1));
		if (pack)
			strbuf_addf(&e->why, "Slurm took the allocation of %s back (job %lld %s: "
				    "preempted, requeued, a node failed or its time ran out)", pack,
				    sid, st);
		else
			strbuf_addf(&e->why, "Slurm requeued job %lld (preempted, or a node failed)",
				    sid);
		e->state = "REQUEUED";
		e->requeue = 1;
		return ATTEMPT_ENDED;
	}
	switch (ph) {
	case SLURM_CANCELLED:
		if (pack)
			strbuf_addf(&e->why, "cancelled in Slurm (scancel of job %lld, the "
				    "allocation of %s)", sid, pack);
		else if (array_id_of(j) > 0)
			strbuf_addf(&e->why, "cancelled in Slurm (scancel of job %lld, task %lld of "
				    "array %lld)", sid, json_get_int(j->slurm, "array_task", 0),
				    array_id_of(j));
		else
			strbuf_addf(&e->why, "cancelled in Slurm (scancel of job %lld)", sid);
		e->state = DT_JOB_CANCELLED;
		break;
	case SLURM_TIMEOUT:
		strbuf_addf(&e->why, "Slurm job %lld reached its time limit (%s)", sid, st);
		e->state = DT_JOB_TIMEOUT;
		break;
	case SLURM_NODE_FAIL:
		strbuf_addf(&e->why, "Slurm job %lld lost a node (%s)", sid, st);
		e->state = DT_JOB_NODE_FAIL;
		break;
	case SLURM_PREEMPTED:
		strbuf_addf(&e->why, "Slurm job %lld was preempted and not requeued", sid);
		e->state = DT_JOB_CANCELLED;
		break;
	default:
		strbuf_addf(&e->why, "Slurm job %lld ended %s before its ranks did", sid, st);
		e->state = DT_JOB_FAILED;
		break;
	}
	return ATTEMPT_ENDED;
}

static enum attempt_status slurm_attempt_poll(struct sched *s, struct job *j,
					      struct attempt_end *e)
{
	struct slurm_state *ss = worker(s);
	enum slurm_phase ph = phase_of(j);
	enum attempt_status st;
	long long settle = json_get_int(j->slurm, "settle_ms", 0), now = dt_mono_ms();
	int moved = json_get_int(j->slurm, "restarts", 0) >
		    json_get_int(j->slurm, "restarts_at_start", 0) || ph == SLURM_WAITING ||
		    (slurm_phase_final(ph) && (ph != SLURM_DONE || pack_of(j))) ||
		    !strcmp(json_get_str(j->slurm, "state", ""), "GONE");

	if (moved)
		return slurm_ended(s, j, e);
	st = agents_backend.attempt_poll(s, j, e);
	if (st != ATTEMPT_FAILED && st != ATTEMPT_NODE_DOWN) {
		json_object_del(j->slurm, "settle_ms");
		return st;
	}
	/*
	 * Ranks killed, agents gone: Slurm may be taking the allocation back
	 * (scancel, preemption, its time limit) and say so at its next answer.
	 * Its word decides, if it comes within SETTLE_MS.
	 */
	if (!settle) {
		json_object_set_new(j->slurm, "settle_ms", json_integer(now));
		kick(ss);
		return ATTEMPT_SETTLING;
	}
	if (ss->polled_ms <= settle + 200 && now - settle < SETTLE_MS)
		return ATTEMPT_SETTLING;
	json_object_del(j->slurm, "settle_ms");
	if (st == ATTEMPT_FAILED && !e->node_fail && phase_of(j) == SLURM_RUNNING)
		json_object_set_new(j->slurm, "reuse", json_true());   /* for a retry */
	return st;
}

/* ------------------------------------------------------------ step */

/*
 * The packs' allocations with nothing left to run (every job of the pack
 * over, its slots free: the sweep ended, was cancelled, or has no trial to
 * start) for PACK_IDLE_MS: ended as a job's (SIGTERM to the agents, then
 * scancel); those Slurm ended are forgotten once no job of them runs.
 */
static void pack_step(struct sched *s, struct slurm_state *ss, long long now)
{
	const char *key;
	json_t *rec;
	void *tmp;

	json_object_foreach_safe(ss->packs, tmp, key, rec) {
		long long sid = json_get_int(rec, "job_id", 0), sent = json_get_int(rec, "end_ms", 0);
		long long idle = json_get_int(rec, "idle_ms", 0);
		const char *st = json_get_str(rec, "state", "");
		enum slurm_phase ph = slurm_phase_of(st);
		int kill;

		if (live_in_pack(s, key, 1)) {
			json_object_del(rec, "idle_ms");
			continue;
		}
		if (json_is_true(json_object_get(rec, "submitting")))
			continue;   /* its sbatch answers first */
		if (sid <= 0 || slurm_phase_final(ph) || !strcmp(st, "GONE")) {
			json_object_del(ss->packs, key);
			continue;
		}
		if (!idle) {
			json_object_set_new(rec, "idle_ms", json_integer(now));
			continue;
		}
		if (now - idle < PACK_IDLE_MS || (sent && now - sent < END_KILL_MS))
			continue;
		kill = ph == SLURM_WAITING || sent;
		json_array_append_new(ss->ends, json_pack("{s:I,s:b}", "id", (json_int_t)sid,
							  "kill", kill));
		json_object_set_new(rec, "end_ms", json_integer(now));
		dtlog(DTLOG_INFO, "allocation of %s: nothing left to run, ending Slurm job %lld (%s)",
		      key, sid, kill ? "scancel" : "SIGTERM to its agents");
		kick(ss);
	}
}

/* Slurm jobs whose attempt is over: end them (their agents stop what is left). */
static void slurm_step(struct sched *s, struct actions *a)
{
	struct slurm_state *ss = worker(s);
	long long now = dt_mono_ms();

	agents_backend.step(s, a);
	for (size_t i = 0; i < s->nr_jobs; i++) {
		struct job *j = s->jobs[i];
		long long sid = sid_of(j), sent = json_get_int(j->slurm, "end_ms", 0);
		enum slurm_phase ph = phase_of(j);
		int live_attempt, kill;
		char name[48];

		if (!strcmp(j->state, DT_JOB_PENDING) && !j->cancel &&
		    json_get_str(j->slurm, "fail", NULL)) {
			/* Slurm will never run it: no attempt started, nothing to stop */
			set_reason(j, "%s", json_get_str(j->slurm, "fail", ""));
			json_object_del(j->slurm, "fail");
			j->has_exit = 1;
			j->exit_code = 1;
			job_transition(s, j, DT_JOB_FAILED);
			sched_wake(s);
		}

		if (sid <= 0 || slurm_phase_final(ph) || pack_of(j) ||
		    !strcmp(json_get_str(j->slurm, "state", ""), "GONE"))
			continue;   /* a pack's allocation is ended below */
		reuse_check(s, j);
		live_attempt = (!state_final(j->state) &&
				json_get_int(j->slurm, "attempt", -1) == j->attempt) || reusable(j);
		if (live_attempt)
			continue;
		if (sent && now - sent < END_KILL_MS)
			continue;
		/*
		 * Still queued, or deaf to SIGTERM: cancel.  An array's task alone, by
		 * its name ("812_3"), and cancelled at once: `scancel --signal` of a
		 * task (Slurm 22.05) retries for 5 s and fails (ESLURM_ALREADY_DONE)
		 * after signalling it, which would stall this worker; its agents get
		 * SIGTERM from slurmstepd all the same.
		 */
		kill = ph == SLURM_WAITING || sent || array_id_of(j) > 0;
		json_array_append_new(ss->ends, json_pack("{s:I,s:b,s:s?}", "id", (json_int_t)sid,
							  "kill", kill, "task", array_id_of(j) > 0 ?
							  slurm_name(j, name, sizeof(name)) : NULL));
		json_object_set_new(j->slurm, "end_ms", json_integer(now));
		dtlog(DTLOG_INFO, "job %s: ending Slurm job %s (%s)", j->id,
		      slurm_name(j, name, sizeof(name)), kill ? "scancel" : "SIGTERM to its agents");
		kick(ss);
	}
	pack_step(s, ss, now);
}

/* ------------------------------------------------------------ release */

static void slurm_release(struct sched *s)
{
	struct slurm_state *ss = state_of(s);

	if (!ss)
		return;
	pthread_mutex_lock(&s->lock);
	ss->stop = 1;
	pthread_cond_signal(&ss->cond);
	pthread_mutex_unlock(&s->lock);
	if (ss->started)
		pthread_join(ss->worker, NULL);
	pthread_cond_destroy(&ss->cond);
	json_decref(ss->ends);
	json_decref(ss->packs);
	free(ss->cap_err);
	free(ss);
	s->backend_data = NULL;
}

static void slurm_launch(struct sched *s, struct job *j, struct hold *h)
{
	agents_backend.launch(s, j, h);
}

static void slurm_stop(struct sched *s, const struct action *x)
{
	agents_backend.stop(s, x);
}

static json_t *slurm_describe(struct sched *s, const struct job *j, int ending)
{
	return agents_backend.describe(s, j, ending);
}

/* the ranks run on our agents (joined from the allocation): what they know of them */
static size_t slurm_live_ranks(struct sched *s, const struct job *j, struct rank_live **v,
			       size_t *alloc)
{
	return agents_backend.live_ranks(s, j, v, alloc);
}

static void slurm_log_loss(struct sched *s, const struct job *j, long long *lost, char **err)
{
	agents_backend.log_loss(s, j, lost, err);
}

static int slurm_signal(struct sched *s, struct job *j, int sig, struct strbuf *err)
{
	return agents_backend.signal(s, j, sig, err);
}

const struct sched_backend slurm_backend = {
	.name = "slurm",
	.place = slurm_place,
	.launch = slurm_launch,
	.stop = slurm_stop,
	.attempt_poll = slurm_attempt_poll,
	.describe = slurm_describe,
	.step = slurm_step,
	.release = slurm_release,
	.live_ranks = slurm_live_ranks,
	.log_loss = slurm_log_loss,
	.signal = slurm_signal,
};
