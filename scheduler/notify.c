/*
 * notify.c - notifications (docs/notifications.md): each event of the head's
 * stream (events.c) that a `notify:` target asks for (`on:`, or a `match:`
 * of a log line) goes to it over HTTPS (libcurl: a webhook, generic JSON or
 * Slack's or Discord's payload), by mail (the system's sendmail, argv not a
 * shell) or to a local command (argv, the event as JSON on stdin).
 *
 * The scheduler never waits for any of it: the hook (called by events_add()
 * with s->lock held) only copies the event and the target into a bounded
 * queue (NOTIFY_QUEUE; when full the event is dropped and counted);
 * threads of its own deliver, with a timeout per try and up to NOTIFY_TRIES
 * tries 1 s, 2 s, 4 s apart.  An owner (a job's user for its own targets, ""
 * the operator for cluster.yaml's) is served by one thread at a time and
 * holds at most NOTIFY_OWNER_SHARE slots.  Threads start on demand, one for
 * each owner with a due delivery (up to NOTIFY_THREADS_MAX), and an idle one
 * ends after NOTIFY_IDLE_MS, so owners whose receivers hang (a try may take
 * 10 minutes) hold a thread each and never the one another owner needs; nor
 * can they crowd out another's deliveries.  A delivery that failed for good
 * is an event itself (notify.failed, with the target redacted and the
 * cause), and every outcome is counted for /metrics.
 *
 * What is queued survives a stop or a crash of dtsched without a write on the
 * path that adds an event: a delivery is the event's id (the events are kept
 * in state.db) and its target, so the queue is the stream's events after a
 * cursor.  state.db keeps notify_cursor (every delivery of the events up to
 * `upto` is settled: sent, failed for good or dropped) and notify_progress (the
 * deliveries after the cursor that are settled, out of order, or have failed
 * tries: their count), both written by the delivery thread once a try is
 * over.  notify_open() re-queues what the events after the cursor owe, with
 * the tries they had, so a delivery is made at least once (a receiver dedupes
 * by the event's id) and never after it failed for good.
 *
 * Certificates are always verified (a target may name its CA file, never
 * turn verification off), only https:// is spoken, redirects are not
 * followed, and a webhook URL is shown only redacted (notify-spec.h).
 *
 * libcurl is linked into dtsched only (Makefile: SCHED_LIBS), never into the
 * dtctl client, whose start time it would cost.
 */
#include "sched-int.h"
#include "json.h"
#include "log.h"
#include "notify-spec.h"
#include "promtext.h"
#include "run-command.h"
#include "safefile.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOTIFY_QUEUE 1024
/*
 * Delivery threads at most; one owner uses at most one.  Far above the
 * owners a cluster has with a due delivery at once (its users with a job
 * ending, plus the operator), so hanging receivers delay only their own
 * owners' until this many owners hang at once.  Each holds a socket or a
 * pipe: 64 fit with room to spare in the 512 descriptors that dtsched's
 * open-file limit keeps beyond its servers' (lib/httpd.c: NOFILE_SLACK,
 * logs and state.db too), and a mostly untouched stack.
 */
#define NOTIFY_THREADS_MAX 64
#define NOTIFY_IDLE_MS 30000      /* an idle delivery thread ends after this */
#define NOTIFY_OWNER_SHARE (NOTIFY_QUEUE / 4)   /* the slots one owner may hold */
#define NOTIFY_PERMANENT (-2)     /* a delivery's failure that no retry can fix */
#define NOTIFY_TRIES 4
#define NOTIFY_CA_MAX (4 << 20)   /* bytes of a ca_file (Debian's whole bundle: ~220 KB) */
#define SENDMAIL "/usr/sbin/sendmail"

enum { T_WEBHOOK, T_EMAIL, T_EXEC, NR_T };
static const char *const tnames[NR_T] = { "webhook", "email", "exec" };

struct nitem {
	json_t *ev, *target;      /* deep copies: the thread's own */
	long long id;             /* the event's */
	char key[DT_SHA256_HEX];  /* the target's, in state.db (notify_target_key) */
	char owner[64];           /* whose target: the job's user, "" the operator's */
	int tries, busy;          /* busy: a worker delivers it now */
	long long due_ms;         /* dt_mono_ms() of the next try */
};

/* a delivery thread's slot: FREE, RUNNING, or EXITED (to be joined) */
struct worker {
	pthread_t th;
	enum { W_FREE, W_RUNNING, W_EXITED } state;
	struct sched *s;
};

struct notifier {
	struct worker w[NOTIFY_THREADS_MAX];   /* (mu) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct nitem *q;          /* NOTIFY_QUEUE slots, unordered; ev NULL: free */
	size_t nr;
	int stop, run;            /* run: notify_run() was called: threads may start */
	int threads, idle;        /* delivery threads running, those without a delivery (mu) */
	int create_failed;        /* pthread_create() failed and was logged (mu) */
	long long idle_ms;        /* NOTIFY_IDLE_MS; tests set less */
	long long seen;           /* the last event id the hook was given (mu) */
	long long saved_upto;     /* notify_cursor.upto in state.db (s->lock) */
	/* /metrics (mu) */
	unsigned long long sent[NR_T], failed[NR_T], retried[NR_T], dropped;
	unsigned long long dropped_reported;
	int busy_owners;          /* deliveries in progress (mu) */
};

static struct notifier *notifier_of(struct sched *s)
{
	return s->event_hook_data;
}

static int target_type(const json_t *t)
{
	return json_object_get(t, "webhook") ? T_WEBHOOK : json_object_get(t, "email") ? T_EMAIL :
	       T_EXEC;
}

/* which `on:` name an event answers to; -1: none */
static int event_on(const json_t *ev)
{
	const char *kind = json_get_str(ev, "kind", ""), *state = json_get_str(ev, "state", "");

	if (!strcmp(kind, "job.ended")) {
		if (!strcmp(state, "COMPLETED"))
			return NOTIFY_ON_DONE;
		if (!strcmp(state, "CANCELLED"))
			return -1;
		return NOTIFY_ON_FAIL;   /* FAILED, TIMEOUT, NODE_FAIL */
	}
	if (!strcmp(kind, "sweep.ended"))
		return !strcmp(state, "COMPLETED") ? NOTIFY_ON_DONE :
		       !strcmp(state, "FAILED") ? NOTIFY_ON_FAIL : -1;
	if (!strcmp(kind, "job.started"))
		return NOTIFY_ON_START;
	if (!strcmp(kind, "job.retried"))
		return NOTIFY_ON_RETRY;
	if (!strcmp(kind, "job.preempted"))
		return NOTIFY_ON_PREEMPT;
	if (!strcmp(kind, "job.stalled"))
		return NOTIFY_ON_STALL;
	if (!strcmp(kind, "job.hang"))
		return NOTIFY_ON_HANG;
	if (!strcmp(kind, "node.drained"))
		return NOTIFY_ON_DRAIN;
	if (!strcmp(kind, "sweep.best"))
		return NOTIFY_ON_BEST;
	return -1;
}

void notify_target_key(const json_t *t, char *out)
{
	char *text = json_dumps(t, JSON_COMPACT | JSON_SORT_KEYS);

	dt_sha256_hex(text ? text : "", text ? strlen(text) : 0, out);
	free(text);
}

/* The queue's copy of target t: a job's own marked so (its key says it too). */
static json_t *target_copy(const json_t *t, int from_job)
{
	json_t *c = json_deep_copy(t);

	if (from_job)   /* a job's own list, not the operator's cluster.yaml */
		json_object_set_new(c, "_from_job", json_true());
	return c;
}

/*
 * Queue ev for the target copy tc (taken) with its key, or "" for the thread to
 * work it out off the hook's path (mu held); 0, or -1 when full.
 */
static int enqueue(struct notifier *nf, const json_t *ev, json_t *tc, const char *key, int tries)
{
	/* a job's own targets are its user's; cluster.yaml's the operator's ("") */
	const char *owner = json_is_true(json_object_get(tc, "_from_job")) ?
			    json_get_str(ev, "user", "?") : "";
	size_t mine = 0, slot = NOTIFY_QUEUE;

	if (nf->nr >= NOTIFY_QUEUE) {
		json_decref(tc);
		return -1;
	}
	for (size_t i = 0; i < NOTIFY_QUEUE; i++)
		if (!nf->q[i].ev) {
			if (slot == NOTIFY_QUEUE)
				slot = i;
		} else if (!strncmp(nf->q[i].owner, owner, sizeof(nf->q[i].owner) - 1)) {
			mine++;
		}
	/* one owner's dead receivers never crowd out everyone else's deliveries */
	if (mine >= NOTIFY_OWNER_SHARE || slot == NOTIFY_QUEUE) {
		json_decref(tc);
		return -1;
	}
	for (size_t i = slot; i < NOTIFY_QUEUE; i++)
		if (!nf->q[i].ev) {
			snprintf(nf->q[i].owner, sizeof(nf->q[i].owner), "%s", owner);
			nf->q[i].busy = 0;
			nf->q[i].ev = json_deep_copy(ev);
			nf->q[i].target = tc;
			nf->q[i].id = json_get_int(ev, "id", 0);
			snprintf(nf->q[i].key, sizeof(nf->q[i].key), "%s", key);
			nf->q[i].tries = tries;
			nf->q[i].due_ms = 0;
			nf->nr++;
			return 0;
		}
	json_decref(tc);
	return -1;
}

/* Whether target t asks for ev (`on` its event_on()). */
static int wants(const json_t *ev, const json_t *t, int on)
{
	const char *pattern = json_get_str(ev, "pattern", NULL);

	if (!strcmp(json_get_str(ev, "kind", ""), "log.match"))
		return pattern && !strcmp(json_get_str(t, "match", ""), pattern);
	return on >= 0 && (notify_on_bits(t) & (1u << on));
}

/*
 * Queue ev for each target of list that asks for it (mu held), unless
 * `settled` (notify_open(): the progress in state.db, "ID KEY" -> [tries,
 * done]) says it is done; the tries it names are kept.  The key of each
 * delivery that did not fit is added to `dropped` (may be NULL).
 */
static void offer(struct notifier *nf, const json_t *ev, const json_t *list, int on,
		  int from_job, const json_t *settled, json_t *dropped)
{
	size_t i;
	json_t *t;

	json_array_foreach(list, i, t) {
		char key[DT_SHA256_HEX], name[DT_SHA256_HEX + 32];
		const json_t *p;
		json_t *tc;

		if (!wants(ev, t, on))
			continue;
		tc = target_copy(t, from_job);
		key[0] = 0;
		p = NULL;
		if (settled) {
			notify_target_key(tc, key);
			snprintf(name, sizeof(name), "%lld %s", json_get_int(ev, "id", 0), key);
			p = json_object_get(settled, name);
		}
		if (json_is_true(json_array_get(p, 1))) {
			json_decref(tc);
			continue;
		}
		if (enqueue(nf, ev, tc, key, (int)json_integer_value(json_array_get(p, 0))) < 0) {
			nf->dropped++;
			nf->failed[target_type(t)]++;
			if (dropped)
				json_array_append_new(dropped, json_string(key));
		}
	}
}

static void workers_top_up(struct notifier *nf);

/* events_add()'s hook (s->lock held): queue what the targets ask for, never wait */
static void notify_event(struct sched *s, const json_t *ev, const json_t *notify, void *data)
{
	struct notifier *nf = data;
	const char *kind = json_get_str(ev, "kind", "");
	int on = event_on(ev);

	pthread_mutex_lock(&nf->mu);
	nf->seen = json_get_int(ev, "id", nf->seen);
	if (strncmp(kind, "notify.", 7)) {   /* our own failures notify nobody */
		if (notify)
			offer(nf, ev, notify, on, 1, NULL, NULL);
		if (s->cc && s->cc->notify)   /* cluster.yaml's, for every job and node */
			offer(nf, ev, s->cc->notify, on, 0, NULL, NULL);
		workers_top_up(nf);   /* a thread for a new owner's delivery: no wait */
		pthread_cond_signal(&nf->cv);
	}
	pthread_mutex_unlock(&nf->mu);
}

/* ------------------------------------------------------------ delivery */

/* A line for people: "job j-12 (train) FAILED: rank 1 on n2 exited with code 3" */
static void summary(struct strbuf *sb, const json_t *ev)
{
	const char *kind = json_get_str(ev, "kind", "event");
	const char *job = json_get_str(ev, "job", NULL), *node = json_get_str(ev, "node", NULL);
	const char *sweep = json_get_str(ev, "sweep", NULL), *reason = json_get_str(ev, "reason", NULL);

	strbuf_addf(sb, "dtctl %s:", kind);
	if (job)
		strbuf_addf(sb, " job %s (%s)", job, json_get_str(ev, "name", ""));
	if (sweep)
		strbuf_addf(sb, " sweep %s", sweep);
	if (json_object_get(ev, "state"))
		strbuf_addf(sb, " %s", json_get_str(ev, "state", ""));
	if (node && !job)
		strbuf_addf(sb, " node %s", node);
	if (reason)
		strbuf_addf(sb, ": %s", reason);
	if (!strcmp(kind, "log.match"))
		strbuf_addf(sb, ": rank %lld on %s: %s", json_get_int(ev, "rank", -1),
			    node ? node : "?", json_get_str(ev, "line", ""));
	if (!strcmp(kind, "sweep.best"))
		strbuf_addf(sb, ": trial %lld, %s = %g", json_get_int(ev, "trial", -1),
			    json_get_str(ev, "metric", "metric"), json_get_real(ev, "value", 0));
	/* one line: no control bytes (a mail header, a chat line) */
	for (size_t i = 0; i < sb->len; i++)
		if ((unsigned char)sb->buf[i] < 0x20 || sb->buf[i] == 0x7f)
			sb->buf[i] = ' ';
}

/*
 * The summary in a chat's markup, as text only: job names, log lines and
 * reasons are anyone's words, and the operator's channel must not show
 * them as a mention that pings everyone (Slack's <!channel>, Discord's
 * @everyone) or a link that says another address than it opens.  Slack:
 * '&', '<' and '>' escaped as its docs say (they make every mention and
 * link); Discord: its markdown characters backslash-escaped (mentions are
 * turned off in the body: allowed_mentions).
 */
static void chat_text(struct strbuf *out, const char *text, int discord)
{
	for (const char *p = text; *p; p++) {
		if (!discord && *p == '&')
			strbuf_addstr(out, "&amp;");
		else if (!discord && *p == '<')
			strbuf_addstr(out, "&lt;");
		else if (!discord && *p == '>')
			strbuf_addstr(out, "&gt;");
		else if (discord && strchr("\\*_~`|<>[]()@", *p)) {
			strbuf_addch(out, '\\');
			strbuf_addch(out, *p);
		} else
			strbuf_addch(out, *p);
	}
}

json_t *notify_webhook_body(const json_t *ev, const char *format)
{
	struct strbuf text = STRBUF_INIT, chat = STRBUF_INIT;
	json_t *body;

	summary(&text, ev);
	if (!strcmp(format, "slack") || !strcmp(format, "discord"))
		chat_text(&chat, text.buf, !strcmp(format, "discord"));
	if (!strcmp(format, "slack"))
		body = json_pack("{s:s}", "text", chat.buf);
	else if (!strcmp(format, "discord"))
		body = json_pack("{s:s,s:{s:[]}}", "content", chat.buf, "allowed_mentions", "parse");
	else
		body = json_pack("{s:s,s:O}", "text", text.buf, "event", ev);
	strbuf_release(&text);
	strbuf_release(&chat);
	return body;
}

static size_t discard(char *p, size_t size, size_t n, void *data)
{
	return size * n;
}

/* set by notify_stop(): a delivery in progress ends now, not at its timeout */
static volatile sig_atomic_t stopping;

static int abort_if_stopping(void *data, curl_off_t dt, curl_off_t dn, curl_off_t ut,
			     curl_off_t un)
{
	return stopping != 0;   /* non-zero aborts the transfer */
}

#define CA_READ_MS 10000   /* a reader stuck on a dead NFS server is killed */

static int write_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Read a job's ca_file as its user, when dtsched is root (team mode): root
 * reads what its user may not (a path in another user's 0700 dir), and the
 * delivery's notify.failed reason said whether it existed there.  A child
 * takes the user's uid, gid and groups (looked up here: no NSS after fork)
 * and reads with sf_read_named(); it sends "0" and the bytes, or "1" and the
 * reason, through a pipe.  A process of its own rather than per-thread
 * credentials: glibc's setgroups()/setuid() change every thread's (and the
 * raw syscalls would leave this thread as the user if a step failed), and
 * a process is gone when the read ends, whatever happened.
 */
static ssize_t ca_read_as(const char *user, const char *path, struct strbuf *pem,
			  size_t limit, struct strbuf *err)
{
	struct passwd pw, *res = NULL;
	char pwbuf[4096];
	gid_t groups[256];
	int ng = (int)ARRAY_SIZE(groups), fds[2], st = 0;
	long long deadline = dt_mono_ms() + CA_READ_MS;
	struct strbuf out = STRBUF_INIT;
	ssize_t ret = -1;
	pid_t pid;

	if (getpwnam_r(user, &pw, pwbuf, sizeof(pwbuf), &res) || !res) {
		strbuf_addf(err, "'%s': not read: its job's user '%s' is no user on the head",
			    path, user);
		return -1;
	}
	if (getgrouplist(user, pw.pw_gid, groups, &ng) < 0) {
		strbuf_addf(err, "'%s': not read: user '%s' is in over %zu groups", path, user,
			    ARRAY_SIZE(groups));
		return -1;
	}
	if (pipe2(fds, O_CLOEXEC) < 0) {
		strbuf_addf(err, "'%s': not read: pipe: %s", path, strerror(errno));
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		strbuf_addf(err, "'%s': not read: fork: %s", path, strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid == 0) {
		struct strbuf text = STRBUF_INIT, why = STRBUF_INIT;
		int ok;

		close(fds[0]);
		if (setgroups((size_t)ng, groups) < 0 || setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid) < 0 ||
		    setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid) < 0) {
			strbuf_addf(&why, "'%s': not read: cannot become user '%s': %s", path, user,
				    strerror(errno));
			ok = 0;
		} else {
			ok = sf_read_named(path, &text, limit, &why) >= 0;
		}
		if (write_all(fds[1], ok ? "0" : "1", 1) < 0 ||
		    write_all(fds[1], ok ? text.buf : why.buf, ok ? text.len : why.len) < 0)
			_exit(1);
		_exit(0);
	}
	close(fds[1]);
	for (;;) {
		long long left = deadline - dt_mono_ms();
		struct pollfd p = { fds[0], POLLIN, 0 };
		char buf[65536];
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) == 0) {
			kill(pid, SIGKILL);
			strbuf_addf(err, "'%s': not read within %d s", path, CA_READ_MS / 1000);
			goto out;
		}
		n = read(fds[0], buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			break;
		if (out.len + (size_t)n > limit + 1 + 4096) {
			kill(pid, SIGKILL);
			strbuf_addf(err, "'%s': over %zu bytes", path, limit);
			goto out;
		}
		strbuf_add(&out, buf, (size_t)n);
	}
	if (out.len && out.buf[0] == '0') {
		strbuf_add(pem, out.buf + 1, out.len - 1);
		ret = (ssize_t)(out.len - 1);
	} else if (out.len) {
		strbuf_add(err, out.buf + 1, out.len - 1);
	} else {
		strbuf_addf(err, "'%s': its reader (as user '%s') ended without an answer", path, user);
	}
out:
	close(fds[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	strbuf_release(&out);
	return ret;
}

static int deliver_webhook(const json_t *ev, const json_t *t, struct strbuf *why)
{
	const char *fmt = json_get_str(t, "format", "generic"), *ca = json_get_str(t, "ca_file", NULL);
	long long timeout = json_get_int(t, "timeout_ms", NOTIFY_DEFAULT_TIMEOUT_MS);
	struct strbuf pem = STRBUF_INIT, err = STRBUF_INIT;
	char errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdr = NULL;
	json_t *body;
	char *payload;
	CURL *c = NULL;
	CURLcode rc;
	long code = 0;
	int ret = -1;

	body = notify_webhook_body(ev, fmt);
	payload = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(body);
	/*
	 * The CA file is read here, not by libcurl: a job names its own, and
	 * libcurl would open a FIFO (blocking this thread, and every delivery
	 * behind it, for good), a device or an endless file as dtsched.
	 */
	if (ca && (json_is_true(json_object_get(t, "_from_job")) && geteuid() == 0 ?
		   ca_read_as(json_get_str(ev, "user", ""), ca, &pem, NOTIFY_CA_MAX, &err) :
		   sf_read_named(ca, &pem, NOTIFY_CA_MAX, &err)) < 0) {
		strbuf_addf(why, "ca_file: %s", err.buf);
		ret = NOTIFY_PERMANENT;
		goto out;
	}
	c = curl_easy_init();
	if (!c || !payload) {
		strbuf_addstr(why, "out of memory");
		goto out;
	}
	hdr = curl_slist_append(hdr, "Content-Type: application/json");
	curl_easy_setopt(c, CURLOPT_URL, json_get_str(t, "webhook", ""));
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
	if (ca) {
		struct curl_blob blob = { pem.buf, pem.len, CURL_BLOB_COPY };

		curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &blob);
	}
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "dtsched/" DT_VERSION);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, abort_if_stopping);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		strbuf_addstr(why, *errbuf ? errbuf : curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (code < 200 || code > 299) {
		strbuf_addf(why, "the receiver answered HTTP %ld", code);
		goto out;
	}
	ret = 0;
out:
	curl_slist_free_all(hdr);
	if (c)
		curl_easy_cleanup(c);
	free(payload);
	strbuf_release(&pem);
	strbuf_release(&err);
	return ret;
}

/*
 * Run argv with `input` on its stdin (no shell), its output discarded; kill
 * its process group after timeout_ms.  0 when it exited 0, else -1 with why.
 */
static int run_with_input(const struct strvec *argv, const struct strbuf *input,
			  long long timeout_ms, struct strbuf *why)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	long long deadline = dt_mono_ms() + timeout_ms;
	size_t off = 0;
	int status = 0, code;
	pid_t r;

	strvec_pushv(&cp.args, argv->v);
	cp.in = -1;
	cp.no_stdout = 1;
	cp.no_stderr = 1;
	cp.new_session = 1;
	if (start_command(&cp) < 0) {
		strbuf_addf(why, "cannot run '%s'", argv->v[0]);
		child_process_clear(&cp);
		return -1;
	}
	fcntl(cp.in, F_SETFL, O_NONBLOCK);
	while (off < input->len && dt_mono_ms() < deadline && !stopping) {
		struct pollfd p = { cp.in, POLLOUT, 0 };
		ssize_t n;

		if (poll(&p, 1, 100) <= 0)
			continue;
		n = write(cp.in, input->buf + off, input->len - off);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			break;   /* it closed its stdin: its exit says the rest */
		if (n > 0)
			off += (size_t)n;
	}
	close(cp.in);
	while ((r = waitpid(cp.pid, &status, WNOHANG)) == 0 && dt_mono_ms() < deadline &&
	       !stopping) {
		struct timespec ts = { 0, 20 * 1000000L };   /* a child, not a condition to poll */

		nanosleep(&ts, NULL);
	}
	if (r == 0) {
		kill(-cp.pid, SIGKILL);
		waitpid(cp.pid, &status, 0);
		if (stopping)
			strbuf_addf(why, "'%s' killed: dtsched is stopping", argv->v[0]);
		else
			strbuf_addf(why, "'%s' did not finish within %lld ms (killed)", argv->v[0],
				    timeout_ms);
		child_process_clear(&cp);
		return -1;
	}
	child_process_clear(&cp);
	code = r < 0 ? -1 : wait_status_to_code(status);
	if (code) {
		strbuf_addf(why, "'%s' exited with code %d", argv->v[0], code);
		return -1;
	}
	return 0;
}

static int deliver_email(const json_t *ev, const json_t *t, struct strbuf *why)
{
	struct strvec argv = STRVEC_INIT;
	struct strbuf msg = STRBUF_INIT, subj = STRBUF_INIT;
	const char *to = json_get_str(t, "email", "");
	char *body = json_dumps(ev, JSON_INDENT(2) | JSON_SORT_KEYS);
	int ret;

	summary(&subj, ev);
	strbuf_addf(&msg, "To: %s\nSubject: %s\nContent-Type: text/plain; charset=utf-8\n"
		    "Auto-Submitted: auto-generated\n\n%s\n\n%s\n", to, subj.buf, subj.buf,
		    body ? body : "");
	strvec_push(&argv, SENDMAIL);   /* argv, never a shell: the address is one word */
	strvec_push(&argv, "-i");
	strvec_push(&argv, "--");
	strvec_push(&argv, to);
	ret = run_with_input(&argv, &msg, json_get_int(t, "timeout_ms", NOTIFY_DEFAULT_TIMEOUT_MS),
			     why);
	free(body);
	strvec_clear(&argv);
	strbuf_release(&msg);
	strbuf_release(&subj);
	return ret;
}

static int deliver_exec(const json_t *ev, const json_t *t, struct strbuf *why)
{
	struct strvec argv = STRVEC_INIT;
	struct strbuf in = STRBUF_INIT;
	size_t i;
	json_t *a;
	int ret;

	/*
	 * A job's own exec: runs as dtsched's user on the head: never as root, which
	 * would give whoever submits a job a root shell there.  The operator's
	 * cluster.yaml targets run always.
	 */
	if (json_is_true(json_object_get(t, "_from_job")) && geteuid() == 0) {
		strbuf_addstr(why, "not run: dtsched runs as root, and an exec: target of a job's "
			      "notify: would run as root on the head; give it in cluster.yaml");
		return NOTIFY_PERMANENT;
	}

	json_array_foreach(json_object_get(t, "exec"), i, a)
		strvec_push(&argv, json_string_value(a));
	json_append(&in, ev);
	strbuf_addch(&in, '\n');
	ret = run_with_input(&argv, &in, json_get_int(t, "timeout_ms", NOTIFY_DEFAULT_TIMEOUT_MS),
			     why);
	strvec_clear(&argv);
	strbuf_release(&in);
	return ret;
}

static int deliver(const json_t *ev, const json_t *t, struct strbuf *why)
{
	switch (target_type(t)) {
	case T_WEBHOOK:
		return deliver_webhook(ev, t, why);
	case T_EMAIL:
		return deliver_email(ev, t, why);
	default:
		return deliver_exec(ev, t, why);
	}
}

/* How a target is named where people read it: webhook URL redacted. */
static void target_shown(struct strbuf *sb, const json_t *t)
{
	switch (target_type(t)) {
	case T_WEBHOOK:
		notify_redact_url(sb, json_get_str(t, "webhook", ""));
		break;
	case T_EMAIL:
		strbuf_addstr(sb, json_get_str(t, "email", ""));
		break;
	default:
		strbuf_addstr(sb, json_string_value(json_array_get(json_object_get(t, "exec"), 0)));
	}
}

/* The failure for good of one delivery, as an event (s->lock held). */
static void record_failure(struct sched *s, const struct nitem *it, const char *why)
{
	struct strbuf shown = STRBUF_INIT, cause = STRBUF_INIT;
	json_t *list = json_pack("[O]", it->target), *ev;

	target_shown(&shown, it->target);
	strbuf_addstr(&cause, why);
	notify_redact_text(&cause, list);
	json_decref(list);
	ev = json_pack("{s:s,s:s,s:I,s:s,s:s,s:i}", "target", shown.buf, "type",
		       tnames[target_type(it->target)], "event_id",
		       (json_int_t)json_get_int(it->ev, "id", 0), "event_kind",
		       json_get_str(it->ev, "kind", ""), "error", cause.buf, "tries", it->tries);
	if (json_get_str(it->ev, "job", NULL)) {
		json_object_set_new(ev, "job", json_string(json_get_str(it->ev, "job", "")));
		json_object_set_new(ev, "user", json_string(json_get_str(it->ev, "user", "")));
	}
	dtlog(DTLOG_WARN, "notification to %s %s failed after %d tr%s: %s",
	      tnames[target_type(it->target)], shown.buf, it->tries, it->tries == 1 ? "y" : "ies",
	      cause.buf);
	events_add(s, "notify.failed", ev, NULL);
	strbuf_release(&shown);
	strbuf_release(&cause);
}

/* ------------------------------------------------------ in state.db */

static const char notify_schema[] =
	"CREATE TABLE IF NOT EXISTS notify_cursor(one INTEGER PRIMARY KEY CHECK(one = 0),"
	"  upto INTEGER NOT NULL);"
	"CREATE TABLE IF NOT EXISTS notify_progress(event_id INTEGER NOT NULL,"
	"  target TEXT NOT NULL, tries INTEGER NOT NULL, done INTEGER NOT NULL,"
	"  PRIMARY KEY(event_id, target)) WITHOUT ROWID;";

/* The cursor: every delivery of the events up to it is settled (mu held). */
static long long cursor_now(const struct notifier *nf)
{
	long long upto = nf->seen;

	for (size_t i = 0; i < NOTIFY_QUEUE; i++)
		if (nf->q[i].ev && nf->q[i].id - 1 < upto)
			upto = nf->q[i].id - 1;
	return upto;
}

/* One statement of state.db with up to two integers and a text (s->lock held). */
static int db_run(struct sched *s, const char *sql, long long a, long long b, const char *text,
		  long long c)
{
	sqlite3_stmt *st = NULL;
	int rc = -1;

	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, a);
		sqlite3_bind_int64(st, 2, b);
		if (text)
			sqlite3_bind_text(st, 3, text, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 4, c);
		rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
	}
	if (rc < 0)
		dtlog(DTLOG_WARN, "state.db: cannot record the notifications' progress: %s",
		      sqlite3_errmsg(s->db));
	sqlite3_finalize(st);
	return rc;
}

/* A delivery after the cursor: its tries so far, and whether it is settled. */
static void progress_save(struct sched *s, long long id, const char *key, int tries, int done)
{
	db_run(s, "INSERT OR REPLACE INTO notify_progress(event_id, tries, target, done) "
	       "VALUES(?1, ?2, ?3, ?4)", id, tries, key, done);
}

/*
 * Move the cursor to upto, forgetting the progress it covers (s->lock held).
 * It only moves forward: a worker that computed an older cursor (mu) may
 * get here after one that computed a newer one.
 */
static void cursor_save(struct sched *s, struct notifier *nf, long long upto)
{
	if (upto <= nf->saved_upto)
		return;
	db_begin(s);
	if (db_run(s, "INSERT OR REPLACE INTO notify_cursor(one, upto) VALUES(0, ?1)", upto, 0,
		   NULL, 0) < 0 ||
	    db_run(s, "DELETE FROM notify_progress WHERE event_id <= ?1", upto, 0, NULL, 0) < 0 ||
	    db_commit(s, NULL) < 0) {
		db_rollback(s);
		return;
	}
	nf->saved_upto = upto;
}

/*
 * What the events after the cursor still owe, back in the queue (s->lock
 * held, before the thread runs): each target (the job's, the sweep's, then
 * cluster.yaml's) that asks for one, unless notify_progress says it is
 * settled, with the tries it names.  More than the queue holds is dropped
 * and counted, as when it is full, and settled.  A first start (no cursor)
 * owes nothing.
 */
static void recover(struct sched *s, struct notifier *nf)
{
	sqlite3_stmt *st = NULL;
	json_t *settled = json_object(), *dropped = json_array(), *arr, *ev, *k;
	long long after = -1;
	size_t i, before = nf->nr;

	if (sqlite3_prepare_v2(s->db, "SELECT upto FROM notify_cursor", -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		after = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	st = NULL;
	nf->saved_upto = after;
	if (after < 0)
		after = s->events_last;
	if (sqlite3_prepare_v2(s->db, "SELECT event_id, target, tries, done FROM notify_progress",
			       -1, &st, NULL) == SQLITE_OK)
		while (sqlite3_step(st) == SQLITE_ROW) {
			char name[DT_SHA256_HEX + 32];

			snprintf(name, sizeof(name), "%lld %s", (long long)sqlite3_column_int64(st, 0),
				 (const char *)sqlite3_column_text(st, 1));
			json_object_set_new(settled, name, json_pack("[I,b]",
					    (json_int_t)sqlite3_column_int64(st, 2),
					    sqlite3_column_int(st, 3)));
		}
	sqlite3_finalize(st);
	st = NULL;
	if (sqlite3_prepare_v2(s->db, "SELECT COALESCE(MIN(id), 0) FROM events", -1, &st, NULL) ==
	    SQLITE_OK && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) > after + 1)
		dtlog(DTLOG_WARN, "notifications: the events %lld to %lld were owed but are no longer "
		      "kept in state.db (the newest are kept: docs/events.md); their notifications "
		      "are not sent", after + 1, (long long)sqlite3_column_int64(st, 0) - 1);
	sqlite3_finalize(st);
	nf->seen = after;
	while (json_array_size(arr = events_read(s, nf->seen, 0, NULL, DT_EVENTS_MAX_LIMIT))) {
		json_array_foreach(arr, i, ev) {
			const json_t *list = NULL;
			int on = event_on(ev);
			size_t d;

			nf->seen = json_get_int(ev, "id", nf->seen);
			json_array_clear(dropped);
			if (!strncmp(json_get_str(ev, "kind", ""), "notify.", 7))
				continue;
			if (s->notify_list_of && (on >= 0 || json_object_get(ev, "pattern")))
				list = s->notify_list_of(s, ev);   /* only for what a target may want */
			if (list)
				offer(nf, ev, list, on, 1, settled, dropped);
			if (s->cc && s->cc->notify)
				offer(nf, ev, s->cc->notify, on, 0, settled, dropped);
			json_array_foreach(dropped, d, k)   /* counted: not owed again */
				progress_save(s, nf->seen, json_string_value(k), 0, 1);
		}
		json_decref(arr);
	}
	json_decref(arr);
	json_decref(settled);
	json_decref(dropped);
	if (nf->nr > before || nf->dropped)
		dtlog(DTLOG_INFO, "notifications: %zu owed since dtsched last stopped are queued again, "
		      "%llu more than the queue (%d) or an owner's share of it (%d) holds dropped",
		      nf->nr - before, nf->dropped, NOTIFY_QUEUE, NOTIFY_OWNER_SHARE);
	cursor_save(s, nf, cursor_now(nf));
}

/* The owners a thread delivers for now (mu held): at most NOTIFY_THREADS_MAX. */
static int busy_owners(const struct notifier *nf, const char **v)
{
	int n = 0;

	for (size_t i = 0; i < NOTIFY_QUEUE && n < nf->busy_owners && n < NOTIFY_THREADS_MAX; i++)
		if (nf->q[i].ev && nf->q[i].busy)
			v[n++] = nf->q[i].owner;
	return n;
}

static int owner_in(const char *owner, const char **v, int n)
{
	while (n-- > 0)
		if (!strcmp(v[n], owner))
			return 1;
	return 0;
}

/* Whether a queued delivery's owner has none in progress: it needs a thread (mu held). */
static int owed_to_idle_owner(const struct notifier *nf)
{
	const char *busy[NOTIFY_THREADS_MAX];
	int nbusy = busy_owners(nf, busy);

	for (size_t i = 0; i < NOTIFY_QUEUE; i++)
		if (nf->q[i].ev && !nf->q[i].busy && !owner_in(nf->q[i].owner, busy, nbusy))
			return 1;
	return 0;
}

static void *notify_thread(void *arg);

/*
 * Start a delivery thread when a queued delivery's owner has none in
 * progress and no thread is idle to take it (mu held; never waits: the hook
 * calls it).  Each thread, once it takes a delivery, calls this again, so
 * every owner with a due delivery gets a thread, up to NOTIFY_THREADS_MAX.
 * An exited thread's slot is joined first (it has let go of mu: it only
 * returns).  A failed start is logged once; the delivery waits for a thread.
 */
static void workers_top_up(struct notifier *nf)
{
	struct worker *w = NULL;
	sigset_t all, old;
	int rc;

	if (!nf->run || nf->stop || nf->idle > 0 || nf->threads >= NOTIFY_THREADS_MAX ||
	    !owed_to_idle_owner(nf))
		return;
	for (int i = 0; i < NOTIFY_THREADS_MAX; i++) {
		if (nf->w[i].state == W_EXITED) {
			pthread_join(nf->w[i].th, NULL);
			nf->w[i].state = W_FREE;
		}
		if (nf->w[i].state == W_FREE && !w)
			w = &nf->w[i];
	}
	/* the main loop takes its signals with sigtimedwait: none for these threads */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&w->th, NULL, notify_thread, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		if (!nf->create_failed)
			dtlog(DTLOG_WARN, "notifications: cannot start a delivery thread (%d run): %s; "
			      "deliveries wait for one", nf->threads, strerror(rc));
		nf->create_failed = 1;
		return;
	}
	nf->create_failed = 0;
	w->state = W_RUNNING;
	nf->threads++;
	nf->idle++;   /* until it takes a delivery: no second one for the same work */
}

/*
 * A delivery thread.  It takes the due delivery of an owner that no other
 * thread serves, so a job's dead or slow receivers (a try may take 10
 * minutes) hold at most one thread, and others (workers_top_up()) deliver
 * everyone else's.  Idle for NOTIFY_IDLE_MS, it ends, unless it is the one
 * idle thread and a delivery waits for its due time.
 */
static void *notify_thread(void *arg)
{
	struct worker *self = arg;
	struct sched *s = self->s;
	struct notifier *nf = notifier_of(s);
	long long idle_since = dt_mono_ms();

	pthread_mutex_lock(&nf->mu);
	while (!nf->stop) {
		long long now = dt_mono_ms(), next = -1;
		struct nitem *it = NULL, work;
		struct strbuf why = STRBUF_INIT;
		unsigned long long dropped;
		const char *busy[NOTIFY_THREADS_MAX];
		int ok, rc, nbusy = busy_owners(nf, busy);

		for (size_t i = 0; i < NOTIFY_QUEUE; i++) {
			if (!nf->q[i].ev || nf->q[i].busy || owner_in(nf->q[i].owner, busy, nbusy))
				continue;   /* a busy owner's next waits for its worker (broadcast) */
			if (nf->q[i].due_ms <= now && (!it || nf->q[i].due_ms < it->due_ms))
				it = &nf->q[i];
			else if (nf->q[i].due_ms > now && (next < 0 || nf->q[i].due_ms < next))
				next = nf->q[i].due_ms;
		}
		dropped = nf->dropped - nf->dropped_reported;
		if (dropped) {
			nf->dropped_reported = nf->dropped;
			pthread_mutex_unlock(&nf->mu);
			pthread_mutex_lock(&s->lock);
			events_add(s, "notify.dropped", json_pack("{s:I,s:i}", "count",
				   (json_int_t)dropped, "queue", NOTIFY_QUEUE), NULL);
			pthread_mutex_unlock(&s->lock);
			pthread_mutex_lock(&nf->mu);
			continue;
		}
		if (!it) {
			struct timespec ts;
			long long until = idle_since + nf->idle_ms, wait;

			if (now >= until) {
				if (nf->idle > 1 || !owed_to_idle_owner(nf))
					break;   /* idle for long: another serves what comes */
				until = now + 3600 * 1000LL;   /* the one left for a retry's due time */
			}
			if (next < 0 || next > until)
				next = until;
			wait = next - now;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += wait / 1000;
			ts.tv_nsec += (wait % 1000) * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&nf->cv, &nf->mu, &ts);
			continue;
		}
		work = *it;   /* the slot stays taken while it is delivered */
		it->busy = 1;
		nf->busy_owners++;
		nf->idle--;
		workers_top_up(nf);   /* another owner's due delivery gets a thread */
		pthread_mutex_unlock(&nf->mu);
		if (!work.key[0])
			notify_target_key(work.target, work.key);
		rc = deliver(work.ev, work.target, &why);
		ok = rc == 0;
		pthread_mutex_lock(&nf->mu);
		it->busy = 0;
		nf->busy_owners--;
		nf->idle++;
		idle_since = dt_mono_ms();
		pthread_cond_broadcast(&nf->cv);   /* its owner's next may go now */
		if (!ok && rc != NOTIFY_PERMANENT && nf->stop) {
			/* aborted by the stop: still owed, made again at the next start */
			strbuf_release(&why);
			break;
		}
		work.tries++;
		if (ok || rc == NOTIFY_PERMANENT || work.tries >= NOTIFY_TRIES) {
			int type = target_type(work.target);
			long long upto;

			if (ok)
				nf->sent[type]++;
			else
				nf->failed[type]++;
			it->ev = NULL;
			it->target = NULL;
			nf->nr--;
			upto = cursor_now(nf);
			pthread_mutex_unlock(&nf->mu);   /* s->lock before mu, never after */
			pthread_mutex_lock(&s->lock);
			if (!ok)
				record_failure(s, &work, why.buf);
			if (work.id > upto)   /* settled before an older one: said so */
				progress_save(s, work.id, work.key, work.tries, 1);
			cursor_save(s, nf, upto);
			pthread_mutex_unlock(&s->lock);
			pthread_mutex_lock(&nf->mu);
			json_decref(work.ev);
			json_decref(work.target);
		} else {
			nf->retried[target_type(work.target)]++;
			it->tries = work.tries;
			memcpy(it->key, work.key, sizeof(it->key));
			it->due_ms = dt_mono_ms() + (1000LL << (work.tries - 1));   /* 1 s, 2 s, 4 s */
			pthread_mutex_unlock(&nf->mu);
			pthread_mutex_lock(&s->lock);
			progress_save(s, work.id, work.key, work.tries, 0);
			pthread_mutex_unlock(&s->lock);
			pthread_mutex_lock(&nf->mu);
		}
		strbuf_release(&why);
	}
	nf->threads--;
	nf->idle--;
	self->state = W_EXITED;   /* joined by the next top-up or by notify_stop() */
	pthread_mutex_unlock(&nf->mu);
	return NULL;
}

int notify_open(struct sched *s)
{
	struct notifier *nf;
	pthread_condattr_t ca;

	if (db_exec(s, notify_schema) < 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return -1;
	nf = xcalloc(1, sizeof(*nf));
	nf->q = xcalloc(NOTIFY_QUEUE, sizeof(*nf->q));
	for (int i = 0; i < NOTIFY_THREADS_MAX; i++)
		nf->w[i].s = s;
	nf->idle_ms = NOTIFY_IDLE_MS;
	pthread_mutex_init(&nf->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&nf->cv, &ca);
	pthread_condattr_destroy(&ca);
	stopping = 0;
	pthread_mutex_lock(&s->lock);
	s->event_hook_data = nf;
	recover(s, nf);
	s->event_hook = notify_event;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Deliveries may start: a thread for what notify_open() queued again, others on demand. */
int notify_run(struct sched *s)
{
	struct notifier *nf = notifier_of(s);
	int rc;

	pthread_mutex_lock(&nf->mu);
	nf->run = 1;
	workers_top_up(nf);
	rc = nf->create_failed ? -1 : 0;
	pthread_mutex_unlock(&nf->mu);
	return rc;
}

void notify_idle_ms_set(struct sched *s, long long ms)
{
	struct notifier *nf = notifier_of(s);

	pthread_mutex_lock(&nf->mu);
	nf->idle_ms = ms;
	pthread_mutex_unlock(&nf->mu);
}

int notify_start(struct sched *s)
{
	if (notify_open(s) < 0)
		return -1;
	return notify_run(s);
}

void notify_stop(struct sched *s)
{
	struct notifier *nf = notifier_of(s);
	pthread_t th[NOTIFY_THREADS_MAX];
	int n = 0;

	if (!nf)
		return;
	pthread_mutex_lock(&s->lock);
	s->event_hook = NULL;
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_lock(&nf->mu);
	nf->stop = 1;   /* no thread starts after this */
	stopping = 1;
	pthread_cond_broadcast(&nf->cv);
	for (int i = 0; i < NOTIFY_THREADS_MAX; i++)
		if (nf->w[i].state != W_FREE)
			th[n++] = nf->w[i].th;
	pthread_mutex_unlock(&nf->mu);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	/* what is still queued stays owed: the cursor stops before the oldest */
	pthread_mutex_lock(&s->lock);
	cursor_save(s, nf, cursor_now(nf));
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < NOTIFY_QUEUE; i++) {
		json_decref(nf->q[i].ev);
		json_decref(nf->q[i].target);
	}
	pthread_mutex_destroy(&nf->mu);
	pthread_cond_destroy(&nf->cv);
	free(nf->q);
	free(nf);
	s->event_hook_data = NULL;
	curl_global_cleanup();
}

static int by_id(const void *a, const void *b)
{
	const struct nitem *x = *(const struct nitem *const *)a, *y = *(const struct nitem *const *)b;
	int c = (x->id > y->id) - (x->id < y->id);

	return c ? c : strcmp(x->key, y->key);
}

json_t *notify_queue_json(struct sched *s)
{
	struct notifier *nf = notifier_of(s);
	struct nitem **v;
	json_t *arr = json_array();
	size_t n = 0;

	if (!nf)
		return arr;
	pthread_mutex_lock(&nf->mu);
	v = xcalloc(NOTIFY_QUEUE, sizeof(*v));
	for (size_t i = 0; i < NOTIFY_QUEUE; i++)
		if (nf->q[i].ev)
			v[n++] = &nf->q[i];
	qsort(v, n, sizeof(*v), by_id);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, json_pack("{s:I,s:s,s:i}", "event_id",
				      (json_int_t)v[i]->id, "target", v[i]->key, "tries",
				      v[i]->tries));
	pthread_mutex_unlock(&nf->mu);
	free(v);
	return arr;
}

/* /metrics: dtsched_notifications_total{type, result}, ..._queued (lock not needed) */
void notify_metrics(struct sched *s, struct strbuf *o)
{
	struct notifier *nf = notifier_of(s);

	if (!nf)
		return;
	pthread_mutex_lock(&nf->mu);
	prom_family(o, "dtsched_notifications_total", "counter",
		    "Notifications by target type and result: sent, failed (for good, or dropped "
		    "from a full queue), retried (a try that failed and will be made again).");
	for (int t = 0; t < NR_T; t++) {
		const char *res[] = { "sent", "failed", "retried" };
		unsigned long long v[] = { nf->sent[t], nf->failed[t], nf->retried[t] };

		for (int k = 0; k < 3; k++) {
			const char *l[] = { "type", tnames[t], "result", res[k], NULL };

			prom_sample(o, "dtsched_notifications_total", l, (double)v[k]);
		}
	}
	{
		const struct { const char *name, *type, *help; double v; } one[] = {
			{ "dtsched_notifications_dropped_total", "counter",
			  "Notifications dropped because the queue was full.", (double)nf->dropped },
			{ "dtsched_notifications_queued", "gauge",
			  "Notifications waiting in the queue (retries included).", (double)nf->nr },
			{ "dtsched_notifications_in_progress", "gauge",
			  "Notifications being delivered now (one per owner at most).",
			  (double)nf->busy_owners },
			{ "dtsched_notifications_threads", "gauge",
			  "Delivery threads running (started on demand, at most 64; idle ones end).",
			  (double)nf->threads },
		};

		for (size_t i = 0; i < ARRAY_SIZE(one); i++) {
			prom_family(o, one[i].name, one[i].type, one[i].help);
			prom_sample(o, one[i].name, NULL, one[i].v);
		}
	}
	pthread_mutex_unlock(&nf->mu);
}
