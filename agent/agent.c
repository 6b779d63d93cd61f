/*
 * agent.c - the dtagent service (see agent.h): API handlers, the watcher
 * loop over the task table and the heartbeat thread.
 *
 * The agent is deliberately thin: the task table on disk is the truth (the
 * supervisors write it), the agent caches it in memory, refreshes an entry
 * when its file changes (one stat per live task every 50 ms), and reports
 * changes to dtsched at once.  Killing the agent loses nothing; a new one
 * reloads the table and carries on.
 */
#include "agent.h"
#include "container.h"
#include "auth.h"
#include "debug.h"
#include "probe.h"
#include "report.h"
#include "beacon.h"
#include "daemon.h"
#include "dthome.h"
#include "httpc.h"
#include "health.h"
#include "httpd.h"
#include "json.h"
#include "log.h"
#include "netif.h"
#include "nvml.h"
#include "proctree.h"
#include "promtext.h"
#include "protocol.h"
#include "ranklog.h"
#include "safefile.h"
#include "supervise.h"
#include "task.h"
#include "usage.h"

#include <dirent.h>
#include <errno.h>
#include <pwd.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#define WATCH_MS 50
#define LIVENESS_MS 1000
#define STARTING_TIMEOUT_MS 10000
#define PRUNE_EVERY_MS 60000
#define REFUSED_END_LOG_MS 500   /* a supervisor's word comes within ms of its file */

struct agent {
	struct agent_opts o;
	pthread_mutex_t lock;
	pthread_cond_t hb_cond;
	int hb_kick, stopping;
	struct task_table tt;
	struct strbuf dir;
	struct dt_auth_key key;
	struct dt_httpd *srv;
	long long started_us, started_mono;
	char name[256];
	char head_host[256];
	int head_port;
	unsigned long long hb_sent, hb_failed, tasks_started, tasks_lost;
	/* the report socket (report.h), -1: none; refused reports and their log */
	int report_fd;
	int report_bind_failed;      /* tries that failed so far */
	unsigned long long reports_refused;
	long long refuse_log_from;
	int refuse_logged;
	struct { int port; long long at_ms; } ports[64];   /* handed out recently */
	char bin_dir[4096];
	long long hb_acked;          /* last heartbeat seq dtsched answered 200 */
	/* beacons (protocol.h): the UDP socket they go out of and resyncs come
	 * in on (-1: none), and what the heartbeat thread shares about them */
	int beacon_fd;
	int hb_force;                /* a valid resync came: next beat is HTTP, now */
	long long hb_seq;            /* the last seq used, beacon or HTTP */
	long long resync_seq;        /* the last beacon seq a resync was taken for */
	unsigned long long beacons_sent, resyncs;
	char sup_exe[4096];          /* dtshim beside us, else dtagent itself */
	/* the interface we reach dtsched on (lib/netif.h), in the inventory as
	 * "net" for the jobs' NCCL/gloo/Open MPI settings; looked up again every
	 * NET_REFRESH_MS by the heartbeat thread */
	struct dt_netif net;
	int have_net;
	/* the node's health (health.h), read by the heartbeat thread each beat */
	struct health health;
	json_t *health_now;
	json_t *debugging;           /* {job id: true} of the debug samplings running */
};

#define NET_REFRESH_MS 30000

static json_t *ts_json(long long us)
{
	char buf[64];
	time_t s = (time_t)(us / 1000000);
	struct tm tm;

	gmtime_r(&s, &tm);
	snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, us % 1000000);
	return json_string(buf);
}

/* ------------------------------------------------------------- inventory */

static void meminfo(unsigned long long *total, unsigned long long *avail)
{
	FILE *fp = fopen("/proc/meminfo", "re");
	char line[256];
	unsigned long long v;

	*total = *avail = 0;
	while (fp && fgets(line, sizeof(line), fp)) {
		if (sscanf(line, "MemTotal: %llu kB", &v) == 1)
			*total = v * 1024;
		else if (sscanf(line, "MemAvailable: %llu kB", &v) == 1)
			*avail = v * 1024;
	}
	if (fp)
		fclose(fp);
}

json_t *inventory_collect(const char *node, int gpus)
{
	json_t *inv = json_object(), *arr = json_array();
	unsigned long long total, avail;
	char host[256] = "";
	double load[3] = { 0, 0, 0 };
	int nv = gpus != 0 ? dt_nvml_count() : 0, n;

	gethostname(host, sizeof(host) - 1);
	meminfo(&total, &avail);
	getloadavg(load, 3);
	n = gpus >= 0 ? gpus : nv;
	for (int i = 0; i < n; i++) {
		struct dt_gpu g;
		json_t *procs = json_array();

		if (i < nv && dt_nvml_query(i, &g) == 0) {
			for (int p = 0; p < g.nr_procs; p++)
				json_array_append_new(procs, json_pack("{s:i,s:I}", "pid", (int)g.procs[p].pid,
								       "used_memory", (json_int_t)g.procs[p].used_memory));
			json_array_append_new(arr, json_pack("{s:i,s:s,s:s,s:I,s:I,s:i,s:o}",
				"index", i, "name", g.name, "uuid", g.uuid,
				"memory_total", (json_int_t)g.memory_total,
				"memory_used", (json_int_t)g.memory_used,
				"utilization", g.utilization, "processes", procs));
		} else {
			json_array_append_new(arr, json_pack("{s:i,s:s,s:s,s:i,s:i,s:i,s:o}",
				"index", i, "name", "fake", "uuid", "", "memory_total", 0,
				"memory_used", 0, "utilization", 0, "processes", procs));
		}
	}
	json_object_set_new(inv, "node", json_string(node));
	json_object_set_new(inv, "hostname", json_string(host));
	json_object_set_new(inv, "cpus", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
	json_object_set_new(inv, "mem_total", json_integer((json_int_t)total));
	json_object_set_new(inv, "mem_available", json_integer((json_int_t)avail));
	json_object_set_new(inv, "load1", json_real(load[0]));
	json_object_set_new(inv, "gpu_source", json_string(nv > 0 ? "nvml" : n > 0 ? "fake" : "none"));
	json_object_set_new(inv, "gpus", arr);
	return inv;
}

/* inventory_collect() and, once known, "net": {interface, address, cidr} */
static json_t *agent_inventory(struct agent *a)
{
	json_t *inv = inventory_collect(a->name, a->o.gpus);

	pthread_mutex_lock(&a->lock);
	if (a->have_net && !a->net.loopback)
		json_object_set_new(inv, "net", json_pack("{s:s, s:s, s:s}", "interface",
							  a->net.name, "address", a->net.addr,
							  "cidr", a->net.cidr));
	if (a->health_now)
		json_object_set_new(inv, "health", json_deep_copy(a->health_now));
	pthread_mutex_unlock(&a->lock);
	return inv;
}

/* read the node's health again (no lock held; takes it) */
static void health_refresh(struct agent *a)
{
	int nv = a->o.gpus != 0 ? dt_nvml_count() : 0;
	int n = a->o.gpus >= 0 ? a->o.gpus : nv;
	json_t *h = health_collect(&a->health, n, nv < n ? nv : n, a->o.home, a->o.fake_health);

	pthread_mutex_lock(&a->lock);
	json_decref(a->health_now);
	a->health_now = h;
	pthread_mutex_unlock(&a->lock);
}

/* the route to dtsched, again (no lock held; takes it) */
static void net_refresh(struct agent *a)
{
	struct dt_netif n;
	struct strbuf err = STRBUF_INIT;
	int ok = dt_netif_route(a->head_host, a->head_port, &n, &err) == 0;

	pthread_mutex_lock(&a->lock);
	if (ok && (!a->have_net || strcmp(n.name, a->net.name) || strcmp(n.addr, a->net.addr)))
		dtlog(DTLOG_INFO, "dtsched (%s) is reached on %s, address %s (%s)%s", a->head_host,
		      n.name, n.addr, n.cidr, n.loopback ? ": loopback, no interface for jobs" : "");
	else if (!ok && a->have_net)
		dtlog(DTLOG_WARN, "network interface to dtsched: %s", err.buf);
	a->have_net = ok;
	if (ok)
		a->net = n;
	pthread_mutex_unlock(&a->lock);
	strbuf_release(&err);
}

/*
 * The part of an inventory that changes from second to second -- free memory,
 * load, each GPU's memory use, utilisation and processes -- moved out of inv
 * into a heartbeat's "usage" (protocol.h).  What is left describes the node
 * and changes only when the node does: inventory_hash covers that part, so
 * the whole inventory travels again only when it changes.  Free memory is
 * rounded down to USAGE_MEM_STEP (far below what `dtctl nodes` prints), so an
 * idle node's usage changes at most as often as its load average (5 s).
 */
#define USAGE_MEM_STEP (16LL << 20)

static json_t *inventory_take_usage(json_t *inv)
{
	json_t *usage = json_object(), *ugpus = json_array(), *g;
	long long mem = json_integer_value(json_object_get(inv, "mem_available"));
	size_t i;

	json_object_set_new(usage, "mem_available", json_integer(mem / USAGE_MEM_STEP * USAGE_MEM_STEP));
	json_object_set(usage, "load1", json_object_get(inv, "load1"));
	json_array_foreach(json_object_get(inv, "gpus"), i, g) {
		json_array_append_new(ugpus, json_pack("{s:O,s:O,s:O,s:O}",
			"index", json_object_get(g, "index"),
			"memory_used", json_object_get(g, "memory_used"),
			"utilization", json_object_get(g, "utilization"),
			"processes", json_object_get(g, "processes")));
		json_object_del(g, "memory_used");
		json_object_del(g, "utilization");
		json_object_del(g, "processes");
	}
	json_object_set_new(usage, "gpus", ugpus);
	json_object_del(inv, "mem_available");
	json_object_del(inv, "load1");
	return usage;
}

/* ------------------------------------------------------------ task table */

/*
 * Re-read t's file if it changed; 1 if its state changed.  Lock held.
 *
 * Every job of the user can write the tasks dir, so the file is only as
 * good as what the kernel confirms (report.h): a final state (which ends a
 * job, and whose signal counts toward the node's quarantine) is taken only
 * once the supervisor has vouched for it over the report socket, and the
 * supervisor's pid and start, and the marker, stay what the agent itself
 * spawned and made.  Only a table loaded at the agent's start (tasks that
 * ended while no agent ran) is taken as it is.
 */
static int task_refresh(struct agent *a, struct task *t)
{
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;
	struct stat st;
	struct task fresh;
	long long mtime;
	int changed = 0;

	task_path(&path, a->dir.buf, t->id);
	if (stat(path.buf, &st) < 0)
		goto out;
	mtime = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
	if (mtime == t->file_mtime_ns)
		goto out;
	if (task_load(a->dir.buf, t->id, &fresh, &err) < 0) {
		dtlog(DTLOG_WARN, "%s", err.buf);
		goto out;
	}
	if (task_state_final(fresh.state) && !task_state_final(t->state) && !t->end_vouched &&
	    t->vouches) {
		/* the supervisor's word may be a moment behind its file: say
		 * something only if it still runs a while later (check_liveness) */
		if (!t->end_refused)
			t->end_refused = dt_mono_ms();
		t->file_mtime_ns = mtime;
		task_release(&fresh);
		goto out;
	}
	changed = fresh.state != t->state;
	if (t->sup_pid) {
		/* ours, not the file's: a forged file cannot move the tree */
		fresh.sup_pid = t->sup_pid;
		fresh.sup_start = t->sup_start ? t->sup_start : fresh.sup_start;
	}
	if (t->marker[0])
		memcpy(fresh.marker, t->marker, sizeof(fresh.marker));
	fresh.end_vouched = t->end_vouched;
	fresh.end_refused = t->end_refused;
	fresh.vouches = t->vouches;   /* what it was when we spawned or loaded it */
	fresh.file_mtime_ns = mtime;
	fresh.changed_ms = changed ? dt_mono_ms() : t->changed_ms;
	fresh.rank_exits = t->rank_exits;   /* the agent's own, not in the file */
	t->rank_exits = NULL;
	task_release(t);
	*t = fresh;
out:
	strbuf_release(&path);
	strbuf_release(&err);
	return changed;
}

static void kick_heartbeat(struct agent *a)
{
	a->hb_kick = 1;
	pthread_cond_signal(&a->hb_cond);
}

/*
 * Bind the report socket (report.h), at start and again every LIVENESS_MS
 * while it cannot be (the agent before us not gone yet, or a squatter on the
 * name).  Meanwhile ranks' ends wait for mpirun's, and a task's end from
 * its file is not taken: the task is lost when its supervisor is gone.
 */
static void report_bind(struct agent *a)
{
	struct strbuf name = STRBUF_INIT, err = STRBUF_INIT;

	report_socket_name(&name, a->o.home);
	a->report_fd = report_listen(name.buf, &err);
	if (a->report_fd < 0 && !a->report_bind_failed++)
		dtlog(DTLOG_WARN, "%s: ranks' and supervisors' reports cannot reach this agent "
		      "(trying again every second)", err.buf);
	else if (a->report_fd >= 0 && a->report_bind_failed)
		dtlog(DTLOG_INFO, "report socket '%s' bound after %d tries", name.buf,
		      a->report_bind_failed);
	strbuf_release(&name);
	strbuf_release(&err);
}

/* A report refused: logged with who sent it, at most REFUSE_LOG_MAX lines a minute. */
#define REFUSE_LOG_MAX 20
static void report_refused(struct agent *a, const struct report_from *from, const char *what,
			   const char *task, const char *why)
{
	long long now = dt_mono_ms();
	struct strbuf ans = STRBUF_INIT;

	a->reports_refused++;
	if (now - a->refuse_log_from >= 60000) {
		a->refuse_log_from = now;
		a->refuse_logged = 0;
	}
	if (a->refuse_logged++ < REFUSE_LOG_MAX)
		dtlog(DTLOG_WARN, "refused a %s report for task '%s' from pid %d (uid %d): %s",
		      what, task, (int)from->pid, (int)from->uid, why);
	strbuf_addf(&ans, "refused: %s", why);
	report_answer(a->report_fd, from, ans.buf);
	strbuf_release(&ans);
}

/*
 * A rank's end from the rank logger (protocol.h, report.h): it joins the
 * task's rank_exits when it comes from a process of that task's tree, for a
 * live task and a rank not yet reported.  1 if the task changed.  Lock held.
 */
static int take_rank_exit(struct agent *a, struct task *t, const json_t *o,
			  const struct report_from *from)
{
	long long rank = json_get_int(o, "rank", -1);
	json_t *e;
	size_t i;

	if (!proc_descends_from(from->pid, (pid_t)t->sup_pid, t->sup_start)) {
		report_refused(a, from, "rank exit", t->id, "the sender is not a process of "
			       "that task (another job's?)");
		return 0;
	}
	report_answer(a->report_fd, from, "ok");
	if (rank < 0 || rank >= 1000000 || !json_is_integer(json_object_get(o, "exit_code")) ||
	    !json_is_integer(json_object_get(o, "signal")) ||
	    dt_timestamp_parse(json_get_str(o, "ended_at", "")) <= 0)
		return 0;
	if (!t->rank_exits)
		t->rank_exits = json_array();
	json_array_foreach(t->rank_exits, i, e)
		if (json_get_int(e, "rank", -1) == rank)
			return 0;
	json_array_append_new(t->rank_exits, json_pack("{s:I,s:I,s:I,s:s}", "rank",
		(json_int_t)rank, "exit_code", (json_int_t)json_get_int(o, "exit_code", 1),
		"signal", (json_int_t)json_get_int(o, "signal", 0),
		"ended_at", json_get_str(o, "ended_at", "")));
	return 1;
}

/*
 * Every report waiting on the socket (report.h).  The kernel says who sent
 * each: a rank exit is taken from a process of that task's tree, a task's
 * end only from its supervisor; the rest is refused and logged with the
 * sender's pid.  1 if a task changed.  Lock held.
 */
static int take_reports(struct agent *a)
{
	struct strbuf body = STRBUF_INIT;
	struct report_from from;
	int changed = 0;

	while (a->report_fd >= 0 && report_recv(a->report_fd, &body, &from) > 0) {
		json_t *o = json_loadb(body.buf, body.len, 0, NULL);
		const char *kind = json_get_str(o, "kind", ""), *id = json_get_str(o, "task", "");
		struct task *t = json_is_object(o) ? task_table_find(&a->tt, id) : NULL;

		if (!t || task_state_final(t->state)) {
			/* an unknown or ended task: nothing to take */
			report_answer(a->report_fd, &from, "refused: no such live task here");
		} else if (from.uid != geteuid()) {
			report_refused(a, &from, kind, id, "another user");
		} else if (!strcmp(kind, "rank_exit")) {
			changed |= take_rank_exit(a, t, o, &from);
		} else if (!strcmp(kind, "task_end")) {
			if (!t->sup_pid || from.pid != (pid_t)t->sup_pid) {
				report_refused(a, &from, "task end", id, "the sender is not the "
					       "task's supervisor");
			} else {
				t->end_vouched = 1;
				t->file_mtime_ns = -1;   /* read the final state now */
				changed |= task_refresh(a, t);
			}
		}
		json_decref(o);
	}
	strbuf_release(&body);
	return changed;
}

/*
 * The task files renamed into place since the last look: make the scan re-read
 * them whatever their mtime says.  A supervisor can write "running" and
 * "exited" within one tick of the kernel's coarse file clock, and then the
 * mtime alone would hide the exit until the task's next change (never).
 */
static void take_renames(struct agent *a, int ifd)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n;

	pthread_mutex_lock(&a->lock);
	while ((n = read(ifd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;
			size_t len = ev->len ? strlen(ev->name) : 0;

			if (len > 5 && ends_with(ev->name, ".json")) {
				char id[256];
				struct task *t;

				if (len - 5 < sizeof(id)) {
					memcpy(id, ev->name, len - 5);
					id[len - 5] = '\0';
					t = task_table_find(&a->tt, id);
					if (t)
						t->file_mtime_ns = -1;
				}
			}
			p += sizeof(*ev) + ev->len;
		}
	}
	if (n < 0 && errno == EINVAL)
		dtlog(DTLOG_WARN, "inotify: event larger than the buffer");
	pthread_mutex_unlock(&a->lock);
}

/* The supervisor is gone and the task is not final: kill its tree, mark it lost. */
static void task_mark_lost(struct agent *a, struct task *t, const char *why)
{
	struct proc_tree pt = task_proc_tree(t);
	int n = proc_tree_signal(&pt, SIGKILL);

	dtlog(DTLOG_WARN, "task %s: %s; marked lost%s", t->id, why,
	      n ? " and its remaining processes killed" : "");
	t->state = TASK_LOST;
	t->has_exit = 0;
	free(t->error);
	t->error = xstrdup(why);
	t->leftovers_killed += n;
	t->ended_us = dt_now_us();
	t->changed_ms = dt_mono_ms();
	if (t->cgroup)
		cgroup_remove(t->cgroup);
	if (task_save(a->dir.buf, t) < 0)
		dtlog(DTLOG_ERROR, "task %s: cannot save: %s", t->id, strerror(errno));
	a->tasks_lost++;
}

static void check_liveness(struct agent *a, struct task *t)
{
	long long now = dt_mono_ms();

	if (task_state_final(t->state))
		return;
	if (t->sup_pid && proc_alive((pid_t)t->sup_pid, t->sup_start)) {
		if (t->end_refused > 0 && now - t->end_refused >= REFUSED_END_LOG_MS) {
			dtlog(DTLOG_WARN, "task %s: its file says it ended, but its supervisor "
			      "(pid %lld) runs and did not say so: ignored (written by another "
			      "process)", t->id, t->sup_pid);
			t->end_refused = -1;   /* said */
			a->reports_refused++;
		}
		return;
	}
	if (!t->sup_pid && t->state == TASK_STARTING &&
	    dt_now_us() - t->created_us < STARTING_TIMEOUT_MS * 1000LL)
		return;
	/* maybe it finished just now: its report came before it exited */
	take_reports(a);
	t->file_mtime_ns = 0;
	task_refresh(a, t);
	if (task_state_final(t->state))
		return;
	(void)now;
	task_mark_lost(a, t, t->sup_pid ? "its supervisor process vanished"
			      : "its supervisor never started");
}

/* An ended task's file (and its own log, when it had no shared one) and table entry go. */
static void task_forget(struct agent *a, struct task *t)
{
	struct strbuf p = STRBUF_INIT;

	task_path(&p, a->dir.buf, t->id);
	unlink(p.buf);
	if (!json_get_str(t->spec, "log", NULL)) {
		strbuf_reset(&p);
		strbuf_addf(&p, "%s/%s.log", a->dir.buf, t->id);
		unlink(p.buf);
	}
	strbuf_release(&p);
	task_table_remove(&a->tt, t->id);
}

static void prune_finished(struct agent *a)
{
	long long cutoff = dt_now_us() - a->o.keep_finished_ms * 1000LL;

	for (size_t i = 0; i < a->tt.nr;) {
		struct task *t = a->tt.items[i];

		if (task_state_final(t->state) && t->ended_us && t->ended_us < cutoff) {
			task_forget(a, t);
			continue;
		}
		i++;
	}
}

/*
 * A start whose id an ended task of another head already has: that head's
 * state.db and shared dir were lost and the new one gave the id again before
 * our heartbeats told it (nodes.c raises its ids past what we report).  The
 * old record names a job nobody can ask about any more, so it goes and the
 * start goes on: an id clash is never a job failure.  A live task, a start
 * without a head, or one from the same head (a retried request) is refused.
 */
static int replaces_earlier_head(struct agent *a, struct task *old, const json_t *spec)
{
	const char *was = json_get_str(old->spec, "head", NULL);
	const char *now = json_get_str(spec, "head", NULL);

	if (!task_state_final(old->state) || !was || !now || !strcmp(was, now))
		return 0;
	dtlog(DTLOG_WARN, "task %s: the record of an earlier head's task of this id (ended "
	      "with %d) is replaced: that head lost its state", old->id,
	      old->has_exit ? old->exit_code : -1);
	task_forget(a, old);
	return 1;
}

/* -------------------------------------------------------------- handlers */

static void h_status(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct agent *a = data;

	dt_http_json(resp, 200, json_pack("{s:s,s:s,s:i,s:s,s:o,s:I}",
		"program", "dtagent", "version", DT_VERSION, "pid", (int)getpid(),
		"name", a->name, "started_at", ts_json(a->started_us),
		"uptime_ms", (json_int_t)(dt_mono_ms() - a->started_mono)));
}

static void h_inventory(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct agent *a = data;

	dt_http_json(resp, 200, agent_inventory(a));
}

/* The task's cuda_visible_devices through map (ranklog.h, gpu_map_translate) */
static void gpu_map_apply(const char *map, json_t *spec)
{
	struct strbuf out = STRBUF_INIT;

	gpu_map_translate(map, json_get_str(spec, "cuda_visible_devices", ""), &out);
	json_object_set_new(spec, "cuda_visible_devices", json_string(out.buf));
	strbuf_release(&out);
}

/*
 * Team mode (docs/team.md): the task runs as spec's run_as user, who must
 * exist on this node with the uid and gid the head knows (as NFS needs), and
 * the agent must be root to become them.  Their home goes into run_as for
 * the supervisor.  -1 with why in msg, naming the node.
 */
static int run_as_check(struct agent *a, json_t *spec, struct strbuf *msg)
{
	json_t *r = json_object_get(spec, "run_as");
	const char *user = json_get_str(r, "user", "");
	struct passwd pw, *res = NULL;
	char buf[4096];

	if (geteuid() != 0) {
		strbuf_addf(msg, "team mode runs each job as its user, which needs dtagent to run "
			    "as root on node '%s' (it runs as uid %u)", a->name, (unsigned)geteuid());
		return -1;
	}
	if (json_object_get(spec, "container")) {
		const char *image = json_get_str(json_object_get(spec, "container"), "image", "");

		/* root's engine runs what it has by name: another user's loaded image */
		if (image[0] != '/') {
			strbuf_addf(msg, "in team mode a container image must be a file on the "
				    "shared dir ('%s' is a name for the engine, which could be "
				    "another user's image) (node '%s')", image, a->name);
			return -1;
		}
	}
	if (getpwnam_r(user, &pw, buf, sizeof(buf), &res) || !res) {
		strbuf_addf(msg, "user '%s' has no account on node '%s' (team mode runs each job "
			    "as its user: add them with the same uid and gid as on the head)", user,
			    a->name);
		return -1;
	}
	if ((long long)pw.pw_uid != json_get_int(r, "uid", -1) ||
	    (long long)pw.pw_gid != json_get_int(r, "gid", -1)) {
		strbuf_addf(msg, "user '%s' is uid %lld gid %lld on the head but uid %u gid %u on "
			    "node '%s': uids and gids must agree across the cluster ('dtctl "
			    "doctor')", user, json_get_int(r, "uid", -1), json_get_int(r, "gid", -1),
			    (unsigned)pw.pw_uid, (unsigned)pw.pw_gid, a->name);
		return -1;
	}
	json_object_set_new(r, "home", json_string(pw.pw_dir));
	return 0;
}

/*
 * Team mode's mpirun (docs/team.md): a task of a user that starts orted
 * through the agents (DT_ORTED_AGENTS, agent/rsh.h) gets its job's
 * capability, never the secret: DT_ORTED_CAP "JOB USER UID GID" and
 * DT_ORTED_KEY, the key derived for it (auth.h dt_auth_cap).  Only a request
 * signed with the secret sets a task's env (cap_request refuses env).
 */
static void orted_cap_give(struct agent *a, json_t *spec)
{
	json_t *r = json_object_get(spec, "run_as"), *env = json_object_get(spec, "env");
	struct dt_auth_cap cap;
	struct dt_auth_key k;
	char text[DT_CAP_MAX], hex[2 * DT_AUTH_KEY_MAX + 1];

	if (!r || !json_is_object(env) || !json_object_get(env, "DT_ORTED_AGENTS") ||
	    !json_get_str(spec, "job_id", NULL))
		return;
	memset(&cap, 0, sizeof(cap));
	snprintf(cap.job, sizeof(cap.job), "%s", json_get_str(spec, "job_id", ""));
	snprintf(cap.user, sizeof(cap.user), "%s", json_get_str(r, "user", ""));
	cap.uid = json_get_int(r, "uid", -1);
	cap.gid = json_get_int(r, "gid", -1);
	dt_auth_cap_format(&cap, text);
	if (dt_auth_cap_key(&a->key, text, &k) < 0)
		return;        /* a job id rsh could not name: its orted are refused */
	for (size_t i = 0; i < k.len; i++)
		snprintf(hex + 2 * i, 3, "%02x", k.bytes[i]);
	json_object_set_new(env, "DT_ORTED_CAP", json_string(text));
	json_object_set_new(env, "DT_ORTED_KEY", json_string(hex));
	memset(&k, 0, sizeof(k));
}

/* Whether task id (of job) is an orted task of the capability's job:
 * "JOB.<attempt>.orted-<host>", the one kind of task a capability names */
static int cap_orted_of(const struct dt_auth_cap *cap, const char *id, const char *job)
{
	size_t jl = strlen(cap->job);

	return !strncmp(id, cap->job, jl) && id[jl] == '.' &&
		strstr(id + jl, "." DT_ORTED_TASK_TAG) && !strcmp(job, cap->job);
}

/*
 * A POST /v1/tasks signed with a job's capability (DT_VIA_JOBCAP): only one
 * orted task of that job (id "JOB." ... "orted-HOST"), run as the
 * capability's user, with no more than `dtagent rsh` sends.  The request to
 * start, or NULL with 403 why in msg.
 */
static json_t *cap_request(const struct dt_http_request *req, struct strbuf *msg)
{
	static const char *const allowed[] = { "id", "argv", "shell", "grace_ms", "umask",
					       "job_id", "log", NULL };
	const struct dt_auth_cap *cap = &req->cap;
	const char *id = json_get_str(req->json, "id", ""), *key, *job;
	json_t *v, *out;

	json_object_foreach(req->json, key, v) {
		int ok = 0;

		for (int i = 0; allowed[i] && !ok; i++)
			ok = !strcmp(key, allowed[i]);
		if (!ok) {
			strbuf_addf(msg, "a job's capability may not set '%s' of a task", key);
			return NULL;
		}
	}
	job = json_get_str(req->json, "job_id", cap->job);
	if (!cap_orted_of(cap, id, job)) {
		strbuf_addf(msg, "the capability of job '%s' starts only that job's orted "
			    "(task '%s.<attempt>.%s<host>'), not task '%s'", cap->job, cap->job,
			    DT_ORTED_TASK_TAG, id);
		return NULL;
	}
	if (!json_get_str(req->json, "log", NULL)) {
		/* else the agent's own dir, which is not the user's to write */
		strbuf_addstr(msg, "a task started with a job's capability needs its 'log' (in the "
			      "job's dir: dtagent rsh names it from DT_JOB_DIR)");
		return NULL;
	}
	out = json_deep_copy(req->json);
	json_object_set_new(out, "job_id", json_string(cap->job));
	/* as sshd with a home that is not there: '/' (Open MPI puts each rank in
	 * mpirun's --wdir itself) */
	json_object_set_new(out, "cwd", json_string("/"));
	json_object_set_new(out, "run_as", json_pack("{s:s,s:I,s:I}", "user", cap->user, "uid",
						     (json_int_t)cap->uid, "gid",
						     (json_int_t)cap->gid));
	return out;
}

/* Whether the caller of req may see or stop t: a job's capability only its orted. */
static int cap_may(const struct dt_http_request *req, const struct task *t)
{
	if (req->via != DT_VIA_JOBCAP)
		return 1;
	return cap_orted_of(&req->cap, t->id, json_get_str(t->spec, "job_id", "")) &&
		!strcmp(json_get_str(json_object_get(t->spec, "run_as"), "user", ""),
			req->cap.user);
}

/*
 * Start the task of one request (protocol.h, POST /v1/tasks): 201 with its
 * TASK in *out, or 400, 409 or 500 with why in msg.  Lock NOT held.
 */
static int task_start(struct agent *a, const json_t *req, json_t **out, struct strbuf *msg)
{
	struct strbuf err = STRBUF_INIT, path = STRBUF_INIT;
	const char *id = json_get_str(req, "id", NULL);
	char gen[TASK_ID_MAX + 1];
	struct task *t;
	json_t *spec;
	struct stat st;
	pid_t sup;
	int code = 201;

	if (json_object_get(req, "id") && !task_id_valid(id)) {
		strbuf_addstr(msg, "task id must match [A-Za-z0-9._-]{1,64}");
		return 400;
	}
	spec = task_spec_validate(req, &err);
	if (!spec) {
		strbuf_addbuf(msg, &err);
		strbuf_release(&err);
		return 400;
	}
	if (json_object_get(spec, "run_as") && run_as_check(a, spec, msg) < 0) {
		json_decref(spec);
		return 400;
	}
	orted_cap_give(a, spec);
	if (json_object_get(spec, "container")) {
		/* fail the job now, naming the node, not by a rank's exit 127 */
		struct strbuf engine = STRBUF_INIT;

		if (container_engine_find(&engine, &err) < 0) {
			strbuf_addf(msg, "%s on node '%s'", err.buf, a->name);
			strbuf_release(&err);
			strbuf_release(&engine);
			json_decref(spec);
			return 400;
		}
		strbuf_release(&engine);
	}
	if (!id) {
		char hex[DT_NONCE_HEX];

		dt_random_hex(hex, 6);
		snprintf(gen, sizeof(gen), "t-%s", hex);
		id = gen;
	}
	pthread_mutex_lock(&a->lock);
	task_path(&path, a->dir.buf, id);
	t = task_table_find(&a->tt, id);
	if (t)
		replaces_earlier_head(a, t, spec);
	if (task_table_find(&a->tt, id) || stat(path.buf, &st) == 0) {
		strbuf_addf(msg, "task '%s' already exists on node '%s'", id, a->name);
		json_decref(spec);
		code = 409;
		goto out;
	}
	t = xmalloc(sizeof(*t));
	task_init(t);
	memcpy(t->id, id, strlen(id) + 1);
	/* which node this is, as dtsched names it: DT_NODE in the task, and the
	 * node its rank log's lines are attributed to (protocol.h) */
	json_object_set_new(spec, "node", json_string(a->name));
	if (a->o.gpu_map && json_get_str(spec, "cuda_visible_devices", NULL))
		gpu_map_apply(a->o.gpu_map, spec);
	t->spec = spec;
	t->state = TASK_STARTING;
	t->created_us = dt_now_us();
	t->changed_ms = dt_mono_ms();
	if (dt_random_hex(t->marker, TASK_MARKER_HEX / 2) < 0 || task_save(a->dir.buf, t) < 0) {
		strbuf_addf(msg, "cannot write '%s': %s", path.buf, strerror(errno));
		task_release(t);
		free(t);
		code = 500;
		goto out;
	}
	sup = supervisor_spawn(a->sup_exe, a->o.home, id);
	if (sup <= 0) {
		t->state = TASK_FAILED;
		t->has_exit = 1;
		t->exit_code = 127;
		t->error = xstrdup("cannot spawn the task supervisor");
		t->ended_us = dt_now_us();
		task_save(a->dir.buf, t);
	}
	t->sup_pid = sup > 0 ? sup : 0;
	t->sup_start = sup > 0 ? proc_start_time(sup, NULL) : 0;
	t->vouches = 1;       /* our dtshim: it reports its task's end (report.h) */
	task_table_add(&a->tt, t);
	a->tasks_started++;
	*out = task_to_json(t, 1);
	kick_heartbeat(a);
out:
	pthread_mutex_unlock(&a->lock);
	strbuf_release(&path);
	return code;
}

/* Start the one task of a request and answer it: 201 {task}, or the error */
static void start_one(struct agent *a, const json_t *req, struct dt_http_response *resp)
{
	struct strbuf msg = STRBUF_INIT;
	json_t *one = NULL;
	int code = task_start(a, req, &one, &msg);

	if (code == 201)
		dt_http_json(resp, 201, json_pack("{s:o}", "task", one));
	else
		dt_http_error(resp, code, "%s", msg.buf);
	strbuf_release(&msg);
}

/* POST /v1/tasks: one task, or {"tasks": [...]}, each started as if alone */
static void h_task_start(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct agent *a = data;
	struct strbuf msg = STRBUF_INIT;
	json_t *batch = req->json ? json_object_get(req->json, "tasks") : NULL, *one = NULL, *res;
	json_t *v;
	size_t i;
	int code;

	if (!req->json) {
		dt_http_error(resp, 400,
			      "a task request needs a JSON body with 'argv' (or 'tasks')");
		return;
	}
	if (req->via == DT_VIA_JOBCAP) {
		json_t *r = cap_request(req, &msg);

		if (!r) {
			dtlog(DTLOG_WARN, "refused a task of job '%s' (user '%s') from %s: %s",
			      req->cap.job, req->cap.user, req->remote, msg.buf);
			dt_http_error(resp, 403, "node '%s': %s", a->name, msg.buf);
			strbuf_release(&msg);
			return;
		}
		start_one(a, r, resp);
		json_decref(r);
		strbuf_release(&msg);
		return;
	}
	if (!batch) {
		start_one(a, req->json, resp);
		strbuf_release(&msg);
		return;
	}
	if (!json_is_array(batch) || !json_array_size(batch) ||
	    json_array_size(batch) > DT_TASKS_BATCH_MAX || json_object_size(req->json) != 1) {
		dt_http_error(resp, 400, "'tasks' must be the only key, an array of 1 to %d task "
			      "requests", DT_TASKS_BATCH_MAX);
		return;
	}
	json_array_foreach(batch, i, v)
		if (!json_is_object(v)) {
			dt_http_error(resp, 400, "tasks[%zu] is not a JSON object (nothing started)",
				      i);
			return;
		}
	res = json_array();
	json_array_foreach(batch, i, v) {
		strbuf_reset(&msg);
		one = NULL;
		code = task_start(a, v, &one, &msg);
		if (code == 201)
			json_array_append_new(res, json_pack("{s:i,s:o}", "status", code, "task",
							     one));
		else
			json_array_append_new(res, json_pack("{s:i,s:s}", "status", code, "error",
							     msg.buf));
	}
	dt_http_json(resp, 200, json_pack("{s:s,s:o}", "node", a->name, "tasks", res));
	strbuf_release(&msg);
}

static void h_task_list(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct agent *a = data;
	json_t *arr = json_array();

	pthread_mutex_lock(&a->lock);
	for (size_t i = 0; i < a->tt.nr; i++) {
		if (!task_state_final(a->tt.items[i]->state))
			task_refresh(a, a->tt.items[i]);
		json_array_append_new(arr, task_to_json(a->tt.items[i], 1));
	}
	pthread_mutex_unlock(&a->lock);
	dt_http_json(resp, 200, json_pack("{s:s,s:o}", "node", a->name, "tasks", arr));
}

/*
 * The task a /v1/tasks/<id>... request names, if the request's capability may
 * touch it (a->lock held); else NULL with a 404 answered: a task that is not the
 * capability's looks as if there were none.
 */
static struct task *task_of_request(struct agent *a, const struct dt_http_request *req,
				    struct dt_http_response *resp)
{
	struct task *t = task_table_find(&a->tt, dt_http_arg(req, "id"));

	if (t && !cap_may(req, t))
		t = NULL;
	if (!t)
		dt_http_error(resp, 404, "no task '%s' on node '%s'", dt_http_arg(req, "id"),
			      a->name);
	return t;
}

static void h_task_get(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct agent *a = data;
	struct task *t;

	pthread_mutex_lock(&a->lock);
	t = task_of_request(a, req, resp);
	if (t) {
		if (!task_state_final(t->state))
			task_refresh(a, t);
		dt_http_json(resp, 200, json_pack("{s:o}", "task", task_to_json(t, 1)));
	}
	pthread_mutex_unlock(&a->lock);
}

/* Ask task t's supervisor to stop it within grace ms (lock held). */
static void task_stop(struct agent *a, struct task *t, long long grace)
{
	if (t->sup_pid && proc_alive((pid_t)t->sup_pid, t->sup_start)) {
		union sigval v;

		v.sival_int = (int)grace;
		if (sigqueue((pid_t)t->sup_pid, SIGTERM, v) < 0)
			dtlog(DTLOG_WARN, "task %s: cannot signal its supervisor %lld: %s",
			      t->id, t->sup_pid, strerror(errno));
		dtlog(DTLOG_INFO, "task %s: stop requested (grace %lld ms)", t->id, grace);
		t->stop_requested = 1;
		if (t->state == TASK_RUNNING)
			t->state = TASK_STOPPING;
	} else {
		check_liveness(a, t);
	}
}

/*
 * dtagent --slurm ends with its Slurm step: stop every task and wait until
 * their supervisors (detached, so outside the step's process tree) are gone,
 * at most grace + 2 s, then SIGKILL what is left of them.  The supervisor
 * kills its whole tree when it stops a task (supervise.h).
 */
static void stop_all_tasks(struct agent *a)
{
	long long grace = a->o.stop_grace_ms, deadline = dt_mono_ms() + grace + 2000;
	int left;

	pthread_mutex_lock(&a->lock);
	for (size_t i = 0; i < a->tt.nr; i++) {
		struct task *t = a->tt.items[i];

		task_refresh(a, t);
		if (!task_state_final(t->state))
			task_stop(a, t, grace);
	}
	pthread_mutex_unlock(&a->lock);
	do {
		left = 0;
		pthread_mutex_lock(&a->lock);
		for (size_t i = 0; i < a->tt.nr; i++) {
			struct task *t = a->tt.items[i];

			if (t->sup_pid && proc_alive((pid_t)t->sup_pid, t->sup_start)) {
				left++;
				if (dt_mono_ms() >= deadline)
					kill((pid_t)t->sup_pid, SIGKILL);
			}
		}
		pthread_mutex_unlock(&a->lock);
		if (left && dt_mono_ms() < deadline + 1000)
			poll(NULL, 0, WATCH_MS);
	} while (left && dt_mono_ms() < deadline + 1000);
	dtlog(left ? DTLOG_WARN : DTLOG_INFO, "stopped every task%s", left ?
	      " but the supervisors of some would not die" : "");
}

static void h_task_stop(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct agent *a = data;
	struct task *t;
	json_t *g = req->json ? json_object_get(req->json, "grace_ms") : NULL;
	long long grace;

	if (g && (!json_is_integer(g) || json_integer_value(g) < 0 ||
		  json_integer_value(g) > 3600 * 1000)) {
		dt_http_error(resp, 400, "'grace_ms' must be an integer from 0 to 3600000");
		return;
	}
	pthread_mutex_lock(&a->lock);
	t = task_of_request(a, req, resp);
	if (!t)
		goto out;
	task_refresh(a, t);
	if (!task_state_final(t->state)) {
		grace = g ? json_integer_value(g) : json_get_int(t->spec, "grace_ms",
								 DT_TASK_GRACE_MS_DEFAULT);
		task_stop(a, t, grace);
	}
	dt_http_json(resp, task_state_final(t->state) ? 200 : 202,
		     json_pack("{s:o}", "task", task_to_json(t, 1)));
out:
	pthread_mutex_unlock(&a->lock);
}

/*
 * POST /v1/tasks/<id>/signal {signal}: the task's supervisor is asked (SIGHUP
 * queued with the signal as its value: supervise.c) to send it to every
 * process of the task's tree, as it does for a stop; the task goes on.
 */
static void h_task_signal(struct dt_http_request *req, struct dt_http_response *resp,
			  void *data)
{
	struct agent *a = data;
	struct task *t;
	json_t *g = json_object_get(req->json, "signal");
	union sigval v;

	if (!json_is_integer(g) || json_integer_value(g) < 1 ||
	    json_integer_value(g) > DT_SIGNAL_MAX) {
		dt_http_error(resp, 400, "'signal' must be an integer from 1 to %d", DT_SIGNAL_MAX);
		return;
	}
	v.sival_int = (int)json_integer_value(g);
	pthread_mutex_lock(&a->lock);
	t = task_of_request(a, req, resp);
	if (!t)
		goto out;
	task_refresh(a, t);
	if (task_state_final(t->state) || !t->sup_pid ||
	    !proc_alive((pid_t)t->sup_pid, t->sup_start)) {
		dt_http_error(resp, 409, "task '%s' on node '%s' is %s: not signalled", t->id,
			      a->name, task_state_name(t->state));
		goto out;
	}
	if (sigqueue((pid_t)t->sup_pid, SIGHUP, v) < 0) {
		dt_http_error(resp, 500, "cannot signal the supervisor %lld of task '%s': %s",
			      t->sup_pid, t->id, strerror(errno));
		goto out;
	}
	dtlog(DTLOG_INFO, "task %s: signal %d (%s) requested", t->id, v.sival_int,
	      strsignal(v.sival_int));
	dt_http_json(resp, 200, json_pack("{s:o}", "task", task_to_json(t, 1)));
out:
	pthread_mutex_unlock(&a->lock);
}

static void h_metrics(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct agent *a = data;
	struct dt_httpd_stats st;
	int counts[TASK_LOST + 1] = { 0 };
	json_t *inv = agent_inventory(a), *gpu, *gpus;
	struct strbuf *o = &resp->text;
	const char *node[] = { "node", a->name, NULL };
	unsigned long long started, lost, hb_ok, hb_failed, beacons, resyncs, refused;
	size_t i;

	dt_httpd_get_stats(a->srv, &st);
	pthread_mutex_lock(&a->lock);
	for (i = 0; i < a->tt.nr; i++)
		counts[a->tt.items[i]->state]++;
	started = a->tasks_started;
	lost = a->tasks_lost;
	hb_ok = a->hb_sent;
	hb_failed = a->hb_failed;
	beacons = a->beacons_sent;
	resyncs = a->resyncs;
	refused = a->reports_refused;
	pthread_mutex_unlock(&a->lock);

	prom_family(o, "dtagent_tasks", "gauge", "Tasks in the agent's table by state.");
	for (int k = 0; k <= TASK_LOST; k++) {
		const char *l[] = { "node", a->name, "state", task_state_name((enum task_state)k), NULL };

		prom_sample(o, "dtagent_tasks", l, counts[k]);
	}
	prom_family(o, "dtagent_tasks_started_total", "counter", "Tasks started by this agent.");
	prom_sample(o, "dtagent_tasks_started_total", node, (double)started);
	prom_family(o, "dtagent_tasks_lost_total", "counter",
		    "Tasks whose supervisor vanished (marked lost).");
	prom_sample(o, "dtagent_tasks_lost_total", node, (double)lost);
	prom_family(o, "dtagent_reports_refused_total", "counter",
		    "Reports (rank exits, task ends) refused: not sent by the task's own processes.");
	prom_sample(o, "dtagent_reports_refused_total", node, (double)refused);
	prom_family(o, "dtagent_heartbeats_total", "counter",
		    "Heartbeats sent to dtsched by result: ok, failed, or a UDP beacon.");
	{
		const char *l1[] = { "node", a->name, "result", "ok", NULL };
		const char *l2[] = { "node", a->name, "result", "failed", NULL };
		const char *l3[] = { "node", a->name, "result", "beacon", NULL };

		prom_sample(o, "dtagent_heartbeats_total", l1, (double)hb_ok);
		prom_sample(o, "dtagent_heartbeats_total", l2, (double)hb_failed);
		prom_sample(o, "dtagent_heartbeats_total", l3, (double)beacons);
	}
	prom_family(o, "dtagent_beacon_resyncs_total", "counter",
		    "Full heartbeats sent because dtsched asked for a resync.");
	prom_sample(o, "dtagent_beacon_resyncs_total", node, (double)resyncs);
	prom_family(o, "dtagent_requests_total", "counter", "HTTP requests served.");
	prom_sample(o, "dtagent_requests_total", node, (double)st.requests);
	prom_family(o, "dtagent_requests_refused_total", "counter", "Requests refused, by reason.");
	{
		static const char *const why[] = { "unauthorized", "too_large", "bad_request",
						   "not_found" };
		unsigned long long v[] = { st.unauthorized, st.too_large, st.bad_request,
					   st.not_found };

		for (size_t k = 0; k < ARRAY_SIZE(why); k++) {
			const char *l[] = { "node", a->name, "reason", why[k], NULL };

			prom_sample(o, "dtagent_requests_refused_total", l, (double)v[k]);
		}
	}
	prom_family(o, "dtagent_connections", "gauge", "Open HTTP connections; unsigned: no "
		    "signed request yet (evictable in a flood).");
	{
		const char *l1[] = { "node", a->name, "kind", "all", NULL };
		const char *l2[] = { "node", a->name, "kind", "unsigned", NULL };

		prom_sample(o, "dtagent_connections", l1, (double)st.conns_open);
		prom_sample(o, "dtagent_connections", l2, (double)st.conns_unsigned);
	}
	prom_family(o, "dtagent_connections_closed_total", "counter", "Connections closed "
		    "without a signed request: no request in time, or evicted in a flood.");
	{
		const char *l1[] = { "node", a->name, "reason", "no_request", NULL };
		const char *l2[] = { "node", a->name, "reason", "flood", NULL };

		prom_sample(o, "dtagent_connections_closed_total", l1, (double)st.closed_no_request);
		prom_sample(o, "dtagent_connections_closed_total", l2, (double)st.closed_flood);
	}
	gpus = json_object_get(inv, "gpus");
	prom_family(o, "dtagent_gpus", "gauge", "GPUs on this node (capacity).");
	prom_sample(o, "dtagent_gpus", node, (double)json_array_size(gpus));
	{
		/* per GPU: family, help, inventory key, scale */
		static const struct { const char *name, *help, *key; double scale; } per_gpu[] = {
			{ "dtagent_gpu_utilization_ratio",
			  "GPU utilisation over the driver's last sample period, 0 to 1.",
			  "utilization", 0.01 },
			{ "dtagent_gpu_memory_used_bytes", "GPU memory in use.", "memory_used", 1 },
			{ "dtagent_gpu_memory_bytes", "GPU memory (capacity).", "memory_total", 1 },
		};

		for (size_t f = 0; f < ARRAY_SIZE(per_gpu); f++) {
			prom_family(o, per_gpu[f].name, "gauge", per_gpu[f].help);
			json_array_foreach(gpus, i, gpu) {
				char idx[24];
				const char *l[] = { "node", a->name, "gpu", idx, NULL };

				snprintf(idx, sizeof(idx), "%zu", i);
				prom_sample(o, per_gpu[f].name, l,
					    (double)json_get_int(gpu, per_gpu[f].key, 0) * per_gpu[f].scale);
			}
		}
	}
	{
		/* health (health.h): events now, by kind and severity */
		static const char *const kinds[] = { "xid", "ecc", "remap", "retired_pages",
			"reset_required", "gpu_lost", "throttle", "temperature", "disk", "memory" };
		const json_t *ev = json_object_get(json_object_get(inv, "health"), "events"), *e;

		prom_family(o, "dtagent_health_events", "gauge", "Health findings on this node now, "
			    "by kind and severity (degraded, bad).");
		for (size_t k = 0; k < ARRAY_SIZE(kinds); k++)
			for (int sev = 0; sev < 2; sev++) {
				const char *sv = sev ? "bad" : "degraded";
				const char *l[] = { "node", a->name, "kind", kinds[k], "severity", sv,
						    NULL };
				int n = 0;

				json_array_foreach(ev, i, e)
					n += !strcmp(json_get_str(e, "kind", ""), kinds[k]) &&
					     !strcmp(json_get_str(e, "severity", ""), sv);
				prom_sample(o, "dtagent_health_events", l, n);
			}
	}
	json_decref(inv);
	resp->content_type = "text/plain; version=0.0.4";
}

/* 1 if `port` is free to listen on, on every address of this node. */
static int port_is_free(int port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

	if (fd < 0)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((unsigned short)port);
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

/*
 * POST /v1/ports: a port free on this node for a job's rendezvous
 * (MASTER_PORT).  Ports handed out in the last DT_PORT_RESERVE_S are skipped,
 * so two jobs launched at once never share one even before either binds it.
 */
static void h_ports(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct agent *a = data;
	long long lo = json_get_int(req->json, "min", DT_PORT_MIN_DEFAULT);
	long long hi = json_get_int(req->json, "max", DT_PORT_MAX_DEFAULT);
	long long now = dt_mono_ms();
	int found = 0;

	if (lo < 1024 || hi > 65535 || lo > hi) {
		dt_http_error(resp, 400, "port range %lld-%lld: expected 1024 <= min <= max <= 65535",
			      lo, hi);
		return;
	}
	pthread_mutex_lock(&a->lock);
	for (long long p = lo; p <= hi && !found; p++) {
		int taken = 0;
		size_t oldest = 0;

		for (size_t i = 0; i < ARRAY_SIZE(a->ports); i++) {
			if (a->ports[i].port == p && now - a->ports[i].at_ms < DT_PORT_RESERVE_S * 1000LL)
				taken = 1;
			if (a->ports[i].at_ms < a->ports[oldest].at_ms)
				oldest = i;
		}
		if (taken || !port_is_free((int)p))
			continue;
		a->ports[oldest].port = (int)p;
		a->ports[oldest].at_ms = now;
		found = (int)p;
	}
	pthread_mutex_unlock(&a->lock);
	if (!found)
		dt_http_error(resp, 503, "no free port in %lld-%lld on node '%s'", lo, hi, a->name);
	else
		dt_http_json(resp, 200, json_pack("{s:i,s:s}", "port", found, "node", a->name));
}

/*
 * Which handler runs where (issue 26, B4/B5): everything is answered on the
 * server's one thread, in microseconds, except the two that wait on the
 * outside world: the probe (connects and name lookups, up to its timeout)
 * and the debug sampling (sample_ms, SIGUSR2 records, gdb attaches).  Those
 * run on a thread of their own per request (dt_http_offload) with their
 * request parked, so status, tasks and heartbeats are answered meanwhile.
 */

struct probe_work {
	struct agent *a;
	json_t *targets;
	int timeout_ms;
};

static void probe_work_free(void *p)
{
	struct probe_work *w = p;

	json_decref(w->targets);
	free(w);
}

static json_t *probe_work(void *p, int *status)
{
	struct probe_work *w = p;
	struct strbuf err = STRBUF_INIT;
	json_t *res = probe_connect(w->targets, w->timeout_ms, &err), *reply;

	if (res) {
		reply = json_pack("{s:s,s:o}", "node", w->a->name, "results", res);
	} else {
		*status = 400;
		reply = json_pack("{s:s}", "error", err.buf);
	}
	strbuf_release(&err);
	return reply;
}

/* POST /v1/probe: TCP connects to the peers dtsched names (probe.h), off this thread */
static void h_probe(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct agent *a = data;
	long long timeout = json_get_int(req->json, "timeout_ms", DT_PROBE_TIMEOUT_MS);
	const json_t *targets = json_object_get(req->json, "targets");
	struct probe_work *w;

	if (dt_http_offloaded(req, resp))
		return;
	if (timeout < 1 || timeout > PROBE_MAX_TIMEOUT_MS) {
		dt_http_error(resp, 400, "timeout_ms %lld: expected 1-%d", timeout, PROBE_MAX_TIMEOUT_MS);
		return;
	}
	if (!json_is_array(targets) || json_array_size(targets) > PROBE_MAX_TARGETS) {
		dt_http_error(resp, 400, "'targets' must be an array of at most %d {node, address, "
			      "port}", PROBE_MAX_TARGETS);
		return;
	}
	w = xcalloc(1, sizeof(*w));
	w->a = a;
	w->targets = json_deep_copy(targets);
	w->timeout_ms = (int)timeout;
	dt_http_offload(a->srv, req, resp, probe_work, w, probe_work_free, timeout + 5000);
}

/* one debug sampling: the job's processes, found on the request thread */
struct debug_work {
	struct agent *a;
	char *job, *dir;
	long ms;
	struct proc_id *procs;   /* pinned by their start times as the scan read them */
	size_t nr;
};

static void debug_work_free(void *p)
{
	struct debug_work *w = p;
	struct agent *a = w->a;

	pthread_mutex_lock(&a->lock);
	json_object_del(a->debugging, w->job);   /* the next sampling of this job may start */
	pthread_mutex_unlock(&a->lock);
	free(w->job);
	free(w->dir);
	free(w->procs);
	free(w);
}

static json_t *debug_work(void *p, int *status)
{
	struct debug_work *w = p;
	json_t *reply = debug_collect_procs(w->a->name, w->procs, w->nr, w->dir, w->ms);
	json_t *inv = inventory_collect(w->a->name, w->a->o.gpus);

	debug_add_gpus(reply, inv);    /* GPU use per rank, from NVML */
	json_decref(inv);
	return reply;
}

/*
 * POST /v1/debug: evidence of the ranks of one job on this node (debug.h),
 * sampled off this thread (above), one sampling of a job at a time (a
 * second is 409 while the first runs), its processes bounded (debug.h).
 */
static void h_debug(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct agent *a = data;
	const char *job = json_get_str(req->json, "job_id", NULL);
	const char *dir = json_get_str(req->json, "job_dir", NULL);
	long long ms = json_get_int(req->json, "sample_ms", DEBUG_SAMPLE_MS_DEFAULT);
	struct debug_work *w;
	size_t alloc = 0;

	if (dt_http_offloaded(req, resp))
		return;
	if (!job || !*job || (dir && *dir != '/') || ms < 0 || ms > DEBUG_SAMPLE_MS_MAX) {
		dt_http_error(resp, 400, "expected {job_id, job_dir?: absolute path, "
			      "sample_ms?: 0..%d}", DEBUG_SAMPLE_MS_MAX);
		return;
	}
	w = xcalloc(1, sizeof(*w));
	w->a = a;
	pthread_mutex_lock(&a->lock);
	if (json_object_get(a->debugging, job)) {
		pthread_mutex_unlock(&a->lock);
		free(w);
		dt_http_error(resp, 409, "a sampling of job '%s' is already running on node '%s'",
			      job, a->name);
		return;
	}
	json_object_set_new(a->debugging, job, json_true());
	for (size_t i = 0; i < a->tt.nr; i++) {
		struct task *t = a->tt.items[i];
		struct proc_tree pt;

		if (task_state_final(t->state) || strcmp(json_get_str(t->spec, "job_id", ""), job))
			continue;
		pt = task_proc_tree(t);
		proc_tree_procs(&pt, &w->procs, &w->nr, &alloc);
	}
	pthread_mutex_unlock(&a->lock);
	w->job = xstrdup(job);
	w->dir = dir ? xstrdup(dir) : NULL;
	w->ms = (long)ms;
	/* sample, records, then at most DEBUG_MAX_NATIVE gdbs at once, 8 s each */
	dt_http_offload(a->srv, req, resp, debug_work, w, debug_work_free,
			DEBUG_SAMPLE_MS_MAX + 1000 + 8000 + 5000);
}

/*
 * POST /v1/leave: a --slurm agent leaves when its head says so, the same way
 * as at its step's SIGTERM (the watcher loop takes it from the signalfd and
 * stops every task first).  Other agents are stopped by `dtctl agents stop`.
 */
static void h_leave(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct agent *a = data;

	(void)req;
	if (!a->o.stop_tasks_on_exit) {
		dt_http_error(resp, 409, "node '%s': only an agent of a Slurm step (dtagent --slurm) "
			      "leaves on request", a->name);
		return;
	}
	dtlog(DTLOG_INFO, "the head asked us to leave: stopping every task");
	dt_http_json(resp, 202, json_pack("{s:s}", "node", a->name));
	kill(getpid(), SIGTERM);
}

static const struct dt_http_route routes[] = {
	{ "POST", DT_PATH_LEAVE, 0, h_leave },
	{ "POST", DT_PATH_PORTS, 0, h_ports },
	{ "POST", DT_PATH_DEBUG, 0, h_debug },
	{ "POST", DT_PATH_PROBE, 0, h_probe },
	{ "GET", DT_PATH_STATUS, 0, h_status },
	{ "GET", DT_PATH_INVENTORY, 0, h_inventory },
	{ "POST", DT_PATH_TASKS, DT_ROUTE_JOBCAP, h_task_start },
	{ "GET", DT_PATH_TASKS, 0, h_task_list },
	{ "GET", DT_PATH_TASK, DT_ROUTE_JOBCAP, h_task_get },
	{ "DELETE", DT_PATH_TASK, DT_ROUTE_JOBCAP, h_task_stop },
	{ "POST", DT_PATH_TASK_SIGNAL, 0, h_task_signal },
	{ "GET", DT_PATH_METRICS, DT_ROUTE_PUBLIC, h_metrics },
};

/* ------------------------------------------------------------ heartbeats */

/*
 * The tasks for heartbeat `seq`: every live one, and a final one until a
 * heartbeat that carried it final was answered 200 (hb_acked), so each end
 * is sent once or twice, not with every heartbeat for a minute (a sweep
 * of 1 s trials had ~500 of them in each heartbeat, a few per second).
 * dtsched keeps final tasks DT_HEARTBEAT_RECENT_S after they ended.  A full
 * heartbeat (after a dtsched restart) carries the whole table.  *has_final:
 * whether the array holds a final task (one not yet acknowledged, or any in a
 * full table).  Lock held.
 */
static json_t *heartbeat_tasks(struct agent *a, int full, long long seq, int *has_final)
{
	json_t *arr = json_array();

	*has_final = 0;
	for (size_t i = 0; i < a->tt.nr; i++) {
		struct task *t = a->tt.items[i];

		if (task_state_final(t->state)) {
			if (!t->final_seq)
				t->final_seq = seq;
			else if (!full && t->final_seq <= a->hb_acked)
				continue;
			*has_final = 1;
		}
		json_array_append_new(arr, task_to_json(t, 1));
	}
	return arr;
}

static int split_hostport(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon = strrchr(s, ':');
	size_t n;

	if (!colon || colon == s || !colon[1])
		return -1;
	n = (size_t)(colon - s);
	if (n >= hostlen)
		return -1;
	memcpy(host, s, n);
	host[n] = '\0';
	*port = atoi(colon + 1);
	return *port > 0 && *port < 65536 ? 0 : -1;
}

/* One beacon for seq (lock NOT held); 0 when it went out. */
static int send_beacon(struct agent *a, const struct sockaddr_in *sa, long long seq,
		       const char *hash, const char *digest)
{
	struct dt_beacon b;
	json_t *ts = ts_json(a->started_us);

	memset(&b, 0, sizeof(b));
	snprintf(b.started, sizeof(b.started), "%.47s", json_string_value(ts));
	json_decref(ts);
	snprintf(b.node, sizeof(b.node), "%s", a->name);
	b.seq = seq;
	b.time = (long long)time(NULL);
	snprintf(b.inventory_hash, sizeof(b.inventory_hash), "%s", hash);
	snprintf(b.tasks_digest, sizeof(b.tasks_digest), "%s", digest);
	return dt_beacon_send(a->beacon_fd, sa, &a->key, &b);
}

/*
 * Resyncs from dtsched (protocol.h), read by the watcher loop: one with our
 * name, a good MAC and the seq of a beacon sent since our last acknowledged
 * HTTP heartbeat makes the next heartbeat an HTTP one, sent now.  Anything
 * else is dropped.
 */
static void take_resyncs(struct agent *a)
{
	char node[256];
	long long seq;

	while (dt_resync_recv(a->beacon_fd, &a->key, (long long)time(NULL), node, &seq)) {
		if (strcmp(node, a->name))
			continue;
		pthread_mutex_lock(&a->lock);
		if (seq > a->hb_acked && seq > a->resync_seq && seq <= a->hb_seq) {
			a->resync_seq = seq;
			a->resyncs++;
			a->hb_force = 1;
			kick_heartbeat(a);
			dtlog(DTLOG_INFO, "dtsched asked for a heartbeat (resync after beacon %lld)", seq);
		}
		pthread_mutex_unlock(&a->lock);
	}
}

/*
 * Each beat: an HTTP heartbeat, or -- when dtsched takes them and nothing
 * changed since its last answered one -- a UDP beacon (lib/beacon.h decides,
 * the simulator uses the same rule).
 */
static void *heartbeat_thread(void *data)
{
	struct agent *a = data;
	struct dt_httpc c;
	long long seq = 0;
	int failing = 0, full = 1;   /* the first heartbeat carries the whole table */
	struct strbuf last_fail = STRBUF_INIT;   /* why the last heartbeat failed */
	char acked[DT_SHA256_HEX] = "";   /* inventory hash dtsched has from us */
	struct strbuf usage_acked = STRBUF_INIT;   /* the usage it has from us ("" = none) */
	struct dt_beacon_policy pol = DT_BEACON_POLICY_INIT;
	struct sockaddr_in head_sa;
	int have_sa = 0, paused_before = 0;
	long long net_at = 0;
	/* the node's facts (inventory, health, usage) as last collected: a beat
	 * within heartbeat_ms of that collection -- one kicked by a task that
	 * started or ended -- sends them again rather than collecting them anew
	 * (health and usage read /proc, statfs and NVML: at a sweep's turnover
	 * every trial's start and end kicks one) */
	json_t *inv_c = NULL, *usage_c = NULL;
	char hash_c[DT_SHA256_HEX] = "";
	long long inv_at = 0;

	dt_httpc_init(&c, a->head_host, a->head_port, &a->key);
	c.peer_port_name = "the head port";
	c.timeout_ms = 2000;
	c.connect_timeout_ms = 1000;
	pthread_mutex_lock(&a->lock);
	while (!a->stopping) {
		struct timespec until;
		json_t *body, *reply = NULL, *tasks, *inv, *fixed, *usage;
		struct strbuf err = STRBUF_INIT, ib = STRBUF_INIT;
		char hash[DT_SHA256_HEX], digest[DT_TASKS_DIGEST_HEX];
		int code, kicked, changed, with_usage, has_final;

		if (!a->hb_kick) {
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += a->o.heartbeat_ms / 1000;
			until.tv_nsec += (a->o.heartbeat_ms % 1000) * 1000000L;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&a->hb_cond, &a->lock, &until);
		}
		if (a->stopping)
			break;
		kicked = a->hb_kick || a->hb_force;
		if (a->hb_force)
			dt_beacon_policy_resynced(&pol);
		a->hb_kick = a->hb_force = 0;
		seq++;
		a->hb_seq = seq;
		tasks = heartbeat_tasks(a, full, seq, &has_final);
		pthread_mutex_unlock(&a->lock);
		if (dt_mono_ms() - net_at >= NET_REFRESH_MS || !net_at) {
			net_refresh(a);
			net_at = dt_mono_ms();
		}
		dt_tasks_digest(tasks, digest);
		/*
		 * The inventory only when the node changed since dtsched last took
		 * it (the hash leaves out the usage numbers), the usage only when
		 * it changed; the whole inventory still carries the current numbers
		 * for a dtsched that does not know "usage".
		 */
		if (!inv_c || full || dt_mono_ms() - inv_at >= a->o.heartbeat_ms) {
			health_refresh(a);
			json_decref(inv_c);
			json_decref(usage_c);
			inv_c = agent_inventory(a);
			fixed = json_deep_copy(inv_c);
			usage_c = inventory_take_usage(fixed);
			json_append(&ib, fixed);
			dt_sha256_hex(ib.buf, ib.len, hash_c);
			strbuf_reset(&ib);
			json_decref(fixed);
			inv_at = dt_mono_ms();
		}
		inv = json_incref(inv_c);
		usage = json_incref(usage_c);
		fixed = NULL;
		memcpy(hash, hash_c, sizeof(hash));
		json_append(&ib, usage);
		with_usage = strcmp(ib.buf, usage_acked.buf) != 0;
		/*
		 * Usage numbers (free memory, load, GPU utilisation) alone do not
		 * make this beat an HTTP one: they ride on the next one, at most
		 * dead_after/2 later.  On a busy node they move every second, and
		 * forcing HTTP for them would leave beacons to idle nodes only.
		 */
		changed = kicked || full || has_final || strcmp(hash, acked);
		if (!have_sa && a->beacon_fd >= 0)
			have_sa = dt_beacon_addr(a->head_host, a->head_port, &head_sa) == 0;
		if (have_sa && dt_beacon_policy_due(&pol, dt_mono_ms(), a->o.heartbeat_ms, changed,
						    digest) &&
		    send_beacon(a, &head_sa, seq, hash, digest) == 0) {
			dt_beacon_policy_sent(&pol);
			json_decref(tasks);
			json_decref(inv);
			json_decref(fixed);
			json_decref(usage);
			strbuf_release(&ib);
			pthread_mutex_lock(&a->lock);
			a->beacons_sent++;
			continue;
		}
		body = json_pack("{s:s,s:i,s:i,s:o,s:s,s:o,s:I}", "node", a->name,
				 "port", dt_httpd_port(a->srv), "agent_pid", (int)getpid(),
				 "agent_started_at", ts_json(a->started_us), "version", DT_VERSION,
				 "tasks", tasks, "seq", (json_int_t)seq);
		json_object_set_new(body, "full", json_boolean(full));
		json_object_set_new(body, "tasks_digest", json_string(digest));
		if (a->o.advertise)
			json_object_set_new(body, "address", json_string(a->o.advertise));
		json_object_set_new(body, "bin_dir", json_string(a->bin_dir));
		json_object_set_new(body, "home", json_string(a->o.home));
		{
			struct strbuf sc = STRBUF_INIT;

			strbuf_addf(&sc, "%s/ssh_config", a->o.home);
			if (access(sc.buf, R_OK) == 0)
				json_object_set_new(body, "ssh_config", json_string(sc.buf));
			strbuf_release(&sc);
		}
		json_object_set_new(body, "inventory_hash", json_string(hash));
		if (strcmp(hash, acked))
			json_object_set_new(body, "inventory", inv);
		else
			json_decref(inv);
		if (with_usage)
			json_object_set_new(body, "usage", usage);
		else
			json_decref(usage);
		json_decref(fixed);
		strbuf_release(&ib);
		code = dt_httpc_request(&c, "POST", DT_PATH_HEARTBEAT, body, &reply, &err);
		pthread_mutex_lock(&a->lock);
		if (code == 200) {
			a->hb_acked = seq;     /* its final tasks need not be sent again */
			if (json_object_get(body, "inventory"))
				memcpy(acked, hash, sizeof(acked));
			if (json_object_get(body, "usage")) {
				strbuf_reset(&usage_acked);
				json_append(&usage_acked, json_object_get(body, "usage"));
			}
			if (json_is_true(json_object_get(reply, "want_inventory"))) {
				acked[0] = '\0';
				strbuf_reset(&usage_acked);
				a->hb_kick = 1;   /* send it now */
			}
			/* dtsched asks for the whole table when it (re)learns about us:
			 * at once, as its next job ids go past the ones we hold */
			full = json_is_true(json_object_get(reply, "want_full"));
			if (full)
				a->hb_kick = 1;
			if (dt_beacon_policy_http_ok(&pol, dt_mono_ms(), reply, digest))
				dtlog(paused_before++ ? DTLOG_INFO : DTLOG_WARN,
				      "dtsched received none of our last UDP beacons (is UDP port %d "
				      "of %s blocked?): HTTP heartbeats only for %lld min",
				      a->head_port, a->head_host, DT_BEACON_RETRY_MS / 60000);
			a->hb_sent++;
			if (failing)
				dtlog(DTLOG_INFO, "heartbeats to %s:%d work again", a->head_host, a->head_port);
			failing = 0;
		} else {
			const char *why = code < 0 ? err.buf : dt_httpc_reply_error(reply, code);

			dt_beacon_policy_http_failed(&pol);
			a->hb_failed++;
			/* once per failure, and again when its cause changes (dtsched
			 * stopped, then another program took its port: both matter) */
			if (!failing || strcmp(why, last_fail.buf))
				dtlog(DTLOG_WARN, "heartbeat to dtsched failed: %s", why);
			strbuf_reset(&last_fail);
			strbuf_addstr(&last_fail, why);
			failing = 1;
		}
		json_decref(body);
		json_decref(reply);
		strbuf_release(&err);
	}
	pthread_mutex_unlock(&a->lock);
	json_decref(inv_c);
	json_decref(usage_c);
	dt_httpc_release(&c);
	strbuf_release(&usage_acked);
	strbuf_release(&last_fail);
	return NULL;
}

/*
 * Stopping on purpose (SIGTERM, `dtctl agents stop`): say so to dtsched, so
 * that the node is DOWN ("agent stopped") at once rather than after
 * dead_after without heartbeats.  Best effort and short: a dtsched that does
 * not answer within a second finds out from the heartbeats as before.
 */
static void tell_head_stopped(struct agent *a)
{
	struct dt_httpc c;
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;
	json_t *body = json_pack("{s:o}", "agent_started_at", ts_json(a->started_us)), *reply = NULL;
	int code;

	dt_httpc_init(&c, a->head_host, a->head_port, &a->key);
	c.timeout_ms = 1000;
	c.connect_timeout_ms = 500;
	strbuf_addf(&path, "%s%s%s", DT_PATH_NODE_PREFIX, a->name, DT_PATH_STOPPED_SUFFIX);
	code = dt_httpc_request(&c, "POST", path.buf, body, &reply, &err);
	if (code != 200)
		dtlog(DTLOG_WARN, "could not tell dtsched that this agent stops: %s",
		      code < 0 ? err.buf : dt_httpc_reply_error(reply, code));
	json_decref(body);
	json_decref(reply);
	dt_httpc_release(&c);
	strbuf_release(&path);
	strbuf_release(&err);
}

/* ------------------------------------------------------------------ main */

int agent_run(const struct agent_opts *o, int ready_fd)
{
	struct agent *a = xcalloc(1, sizeof(*a));
	struct dt_httpd_opts ho = DT_HTTPD_OPTS_INIT;
	struct strbuf err = STRBUF_INIT;
	pthread_t hb;
	int have_hb = 0, n;
	sigset_t set;
	long long last_live = 0, last_prune = 0;
	int sfd = -1, ifd = -1;

	a->o = *o;
	a->beacon_fd = -1;
	a->report_fd = -1;
	a->debugging = json_object();
	pthread_mutex_init(&a->lock, NULL);
	health_init(&a->health);
	pthread_cond_init(&a->hb_cond, NULL);
	a->started_us = dt_now_us();
	a->started_mono = dt_mono_ms();
	if (o->name)
		snprintf(a->name, sizeof(a->name), "%s", o->name);
	else
		gethostname(a->name, sizeof(a->name) - 1);
	strbuf_init(&a->dir, 0);
	strbuf_addf(&a->dir, "%s/tasks", o->home);
	snprintf(a->bin_dir, sizeof(a->bin_dir), "%s", o->exe ? o->exe : "");
	if (strrchr(a->bin_dir, '/'))
		*strrchr(a->bin_dir, '/') = '\0';
	if (!o->exe || (size_t)snprintf(a->sup_exe, sizeof(a->sup_exe), "%.4080s/dtshim",
					a->bin_dir) >= sizeof(a->sup_exe) ||
	    access(a->sup_exe, X_OK) < 0) {
		dtlog(DTLOG_WARN, "no '%s': supervising tasks with dtagent itself (slower start)",
		      a->sup_exe);
		snprintf(a->sup_exe, sizeof(a->sup_exe), "%s", o->exe ? o->exe : "dtagent");
	}

	if (dt_daemon_key_load(&a->key, o->secret, o->home, &err) < 0)
		goto fail;
	if (mkdir_p(a->dir.buf, 0700) < 0) {
		strbuf_addf(&err, "cannot create '%s'", a->dir.buf);
		goto fail;
	}
	if (debug_install_python(o->home) < 0)
		dtlog(DTLOG_WARN, "cannot write %s/python/sitecustomize.py (dtctl debug shows no "
		      "Python stacks): %s", o->home, strerror(errno));
	if (o->head && split_hostport(o->head, a->head_host, sizeof(a->head_host), &a->head_port) < 0) {
		strbuf_addf(&err, "--head '%s' is not ADDR:PORT", o->head);
		goto fail;
	}

	/* before the table is read: a supervisor that ends meanwhile finds it */
	report_bind(a);
	/* re-adopt the tasks of an earlier agent */
	n = task_table_load_dir(&a->tt, a->dir.buf, &err);
	if (err.len)
		dtlog(DTLOG_WARN, "%s", err.buf);
	strbuf_reset(&err);
	for (size_t i = 0; i < a->tt.nr; i++) {
		struct task *t = a->tt.items[i];
		struct stat st;
		struct strbuf p = STRBUF_INIT;

		task_path(&p, a->dir.buf, t->id);
		if (stat(p.buf, &st) == 0)
			t->file_mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
		strbuf_release(&p);
		check_liveness(a, t);
	}
	if (n)
		dtlog(DTLOG_INFO, "loaded %d task(s) from '%s'", n, a->dir.buf);

	/* SIGTERM/SIGINT/SIGHUP are taken by the watcher loop below */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	{
		/* supervisors are our children (supervisor_spawn) but nobody waits
		 * for them: no zombies (exec resets this flag in the child) */
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = SIG_DFL;
		sa.sa_flags = SA_NOCLDWAIT;
		sigaction(SIGCHLD, &sa, NULL);
	}

	ho.bind = o->bind;
	ho.port = o->port;
	ho.routes = routes;
	ho.nr_routes = ARRAY_SIZE(routes);
	ho.data = a;
	ho.key = &a->key;
	ho.max_body = DT_MAX_BODY;
	ho.conn_limit = 256;
	ho.timeout_s = 30;
	a->srv = dt_httpd_start(&ho, &err);
	if (!a->srv)
		goto fail;
	if (o->head)
		a->beacon_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	a->hb_kick = o->beat_at_start;
	if (o->head && !pthread_create(&hb, NULL, heartbeat_thread, a))
		have_hb = 1;
	dtlog(DTLOG_INFO, "dtagent %s serving node '%s' on port %d%s%s (pid %d)", DT_VERSION,
	      a->name, dt_httpd_port(a->srv), o->head ? ", heartbeats to " : "",
	      o->head ? o->head : "", (int)getpid());
	if (ready_fd >= 0) {
		if (write(ready_fd, "ok\n", 3) < 0)
			dtlog(DTLOG_WARN, "cannot report readiness");
		close(ready_fd);
	}

	/*
	 * Supervisors replace task files by rename: inotify on the tasks dir wakes
	 * the loop the moment a task starts or ends (its heartbeat goes out at
	 * once); the WATCH_MS scan stays as the fallback.  Signals come through
	 * a signalfd so one poll() waits for both.
	 */
	sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (ifd >= 0 && inotify_add_watch(ifd, a->dir.buf, IN_MOVED_TO) < 0) {
		close(ifd);
		ifd = -1;
	}
	for (;;) {
		struct pollfd pf[4] = { { sfd, POLLIN, 0 }, { ifd, POLLIN, 0 },
					{ a->beacon_fd, POLLIN, 0 }, { a->report_fd, POLLIN, 0 } };
		int sig = 0, changed = 0;
		long long now;

		if (sfd >= 0) {
			struct signalfd_siginfo si;

			if (poll(pf, 4, WATCH_MS) > 0) {
				if ((pf[0].revents & POLLIN) && read(sfd, &si, sizeof(si)) == sizeof(si))
					sig = (int)si.ssi_signo;

				if (ifd >= 0 && (pf[1].revents & POLLIN))
					take_renames(a, ifd);
				if (a->beacon_fd >= 0 && (pf[2].revents & POLLIN))
					take_resyncs(a);
			}
		} else {
			struct timespec ts = { 0, WATCH_MS * 1000000L };
			siginfo_t si;

			sig = sigtimedwait(&set, &si, &ts);
		}
		now = dt_mono_ms();
		if (sig == SIGTERM || sig == SIGINT)
			break;
		dt_httpd_wake_expired(a->srv);   /* offloaded requests past their time */
		pthread_mutex_lock(&a->lock);
		/* reports first: a supervisor's word comes before its file is read */
		changed |= take_reports(a);
		for (size_t i = 0; i < a->tt.nr; i++)
			if (!task_state_final(a->tt.items[i]->state))
				changed |= task_refresh(a, a->tt.items[i]);
		if (now - last_live >= LIVENESS_MS) {
			last_live = now;
			if (a->report_fd < 0)
				report_bind(a);
			for (size_t i = 0; i < a->tt.nr; i++) {
				enum task_state before = a->tt.items[i]->state;

				check_liveness(a, a->tt.items[i]);
				changed |= before != a->tt.items[i]->state;
			}
		}
		if (now - last_prune >= PRUNE_EVERY_MS) {
			last_prune = now;
			prune_finished(a);
		}
		if (changed)
			kick_heartbeat(a);
		pthread_mutex_unlock(&a->lock);
	}
	if (sfd >= 0)
		close(sfd);
	if (ifd >= 0)
		close(ifd);
	if (o->stop_tasks_on_exit)
		stop_all_tasks(a);
	else
		dtlog(DTLOG_INFO, "dtagent stopping (tasks keep running under their supervisors)");
	pthread_mutex_lock(&a->lock);
	a->stopping = 1;
	pthread_cond_signal(&a->hb_cond);
	pthread_mutex_unlock(&a->lock);
	if (have_hb) {
		pthread_join(hb, NULL);
		tell_head_stopped(a);
	}
	if (a->beacon_fd >= 0)
		close(a->beacon_fd);
	dt_httpd_stop(a->srv);
	if (a->report_fd >= 0)
		close(a->report_fd);
	task_table_release(&a->tt);
	strbuf_release(&a->dir);
	health_release(&a->health);
	json_decref(a->health_now);
	json_decref(a->debugging);
	free(a);
	return 0;
fail:
	if (a->report_fd >= 0)
		close(a->report_fd);
	dtlog(DTLOG_ERROR, "%s", err.buf);
	if (ready_fd >= 0) {
		strbuf_addch(&err, '\n');
		if (write(ready_fd, err.buf, err.len) < 0)
			dtlog(DTLOG_WARN, "cannot report the failure");
		close(ready_fd);
	} else {
		error("%s", err.buf);
	}
	strbuf_release(&err);
	health_release(&a->health);
	json_decref(a->debugging);
	free(a);
	return 1;
}
