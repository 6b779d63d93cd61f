/*
 * rsh.c - `dtagent rsh HOST WORD...`: start Open MPI's orted through HOST's
 * agent instead of ssh (see rsh.h).
 */
#include "rsh.h"
#include "safefile.h"
#include "auth.h"
#include "dthome.h"
#include "httpc.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "task.h"
#include "usage.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RSH_FAIL 255               /* what ssh exits with when it cannot run the command */
#define RSH_STOP_GRACE_MS 3000     /* SIGTERM -> SIGKILL for the orted on hang-up */
#define RSH_POLL_MAX_MS 1000       /* the slowest poll of the task's state */
#define RSH_UNREACHABLE_MS 30000   /* the agent gone this long: give up, like a dead ssh */

static volatile sig_atomic_t hangup;

static void on_signal(int sig)
{
	hangup = sig;
}

static int is_address(const char *h)
{
	/* an IPv4 or IPv6 literal: digits, dots, hex and colons only */
	int colon = strchr(h, ':') != NULL;

	for (; *h; h++)
		if (!(isdigit((unsigned char)*h) || *h == '.' || (colon && (isxdigit((unsigned char)*h) || *h == ':'))))
			return 0;
	return 1;
}

int rsh_agent_port(const char *map, const char *host)
{
	size_t hl = strlen(host);
	int fallback = -1;

	if (!map || !*host)
		return -1;
	while (*map) {
		const char *comma = strchr(map, ','), *eq;
		size_t len = comma ? (size_t)(comma - map) : strlen(map);
		char *end;
		long port;

		eq = memchr(map, '=', len);
		if (eq) {
			size_t nl = (size_t)(eq - map);

			port = strtol(eq + 1, &end, 10);
			if (end == map + len && end > eq + 1 && port > 0 && port < 65536) {
				if (nl == hl && !memcmp(map, host, hl))
					return (int)port;
				/* "node1" for the map's "node1.cluster.local" */
				if (fallback < 0 && !is_address(host) && nl > hl &&
				    !memcmp(map, host, hl) && map[hl] == '.')
					fallback = (int)port;
			}
		}
		map += len;
		if (*map == ',')
			map++;
	}
	return fallback;
}

void rsh_task_id(struct strbuf *out, const char *mpirun_id, const char *host)
{
	static const char suffix[] = ".mpirun";
	size_t ml = mpirun_id ? strlen(mpirun_id) : 0;
	size_t start = out->len;

	if (ml > sizeof(suffix) - 1 && !strcmp(mpirun_id + ml - (sizeof(suffix) - 1), suffix))
		ml -= sizeof(suffix) - 1;
	if (ml)
		strbuf_addf(out, "%.*s.", (int)ml, mpirun_id);
	strbuf_addstr(out, DT_ORTED_TASK_TAG);
	for (const char *h = host; *h; h++)
		strbuf_addch(out, isalnum((unsigned char)*h) || *h == '.' || *h == '_' || *h == '-' ?
			     *h : '-');
	if (out->len - start > 64) {
		/* keep what fits and make it unique again with a hash of the whole */
		unsigned int fnv = 2166136261u;

		for (const char *p = out->buf + start; *p; p++)
			fnv = (fnv ^ (unsigned char)*p) * 16777619u;
		strbuf_setlen(out, start + 64 - 9);
		strbuf_addf(out, "-%08x", fnv);
	}
}

void rsh_join(struct strbuf *out, int n, const char **words)
{
	for (int i = 0; i < n; i++)
		strbuf_addf(out, "%s%s", i ? " " : "", words[i]);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);      /* a signal ends it early: that is wanted */
}

/* DELETE the task; best effort (the agent kills leftovers anyway once it ends). */
static void stop_task(struct dt_httpc *c, const char *path)
{
	struct strbuf err = STRBUF_INIT;
	json_t *body = json_pack("{s:i}", "grace_ms", RSH_STOP_GRACE_MS), *reply = NULL;

	c->timeout_ms = 5000;
	dt_httpc_request(c, "DELETE", path, body, &reply, &err);
	json_decref(body);
	json_decref(reply);
	strbuf_release(&err);
}

/* Poll the task until it is final: its exit code, or RSH_FAIL. */
static int wait_task(struct dt_httpc *c, const char *host, const char *path)
{
	long delay = 10;
	long long unreachable_since = 0;

	for (;;) {
		struct strbuf err = STRBUF_INIT;
		json_t *reply = NULL, *t;
		int st;

		if (hangup) {
			stop_task(c, path);
			return RSH_FAIL;
		}
		st = dt_httpc_request(c, "GET", path, NULL, &reply, &err);
		t = json_object_get(reply, "task");
		if (st == 200 && json_is_object(t)) {
			const char *state = json_get_str(t, "state", "");
			enum task_state ts;

			unreachable_since = 0;
			if (task_state_parse(state, &ts) == 0 && task_state_final(ts)) {
				json_t *code = json_object_get(t, "exit_code");
				int rc = json_is_integer(code) ? (int)json_integer_value(code) : RSH_FAIL;

				if (strcmp(state, DT_TASK_EXITED) || rc)
					fprintf(stderr, "dtagent rsh: orted on %s %s (exit code %d)%s%s\n",
						host, state, rc, json_get_str(t, "error", NULL) ? ": " : "",
						json_get_str(t, "error", ""));
				json_decref(reply);
				strbuf_release(&err);
				return rc >= 0 && rc <= 255 ? rc : RSH_FAIL;
			}
		} else if (st == 404) {
			fprintf(stderr, "dtagent rsh: the agent on %s no longer knows the orted task\n",
				host);
			json_decref(reply);
			strbuf_release(&err);
			return RSH_FAIL;
		} else {
			long long now = dt_mono_ms();

			if (!unreachable_since)
				unreachable_since = now;
			if (now - unreachable_since > RSH_UNREACHABLE_MS) {
				fprintf(stderr, "dtagent rsh: lost the agent on %s: %s\n", host,
					st < 0 ? err.buf : dt_httpc_reply_error(reply, st));
				json_decref(reply);
				strbuf_release(&err);
				return RSH_FAIL;
			}
		}
		json_decref(reply);
		strbuf_release(&err);
		sleep_ms(delay);
		delay = delay * 2 > RSH_POLL_MAX_MS ? RSH_POLL_MAX_MS : delay * 2;
	}
}

int rsh_main(int argc, const char **argv)
{
	const char *host, *map = getenv("DT_ORTED_AGENTS"), *jobdir = getenv("DT_JOB_DIR");
	const char *jobid = getenv("DT_JOB_ID"), *marker = getenv(DT_TASK_ID_ENV);
	const char *cap = getenv("DT_ORTED_CAP"), *capkey = getenv("DT_ORTED_KEY");
	struct dt_auth_cap parsed;
	struct strbuf id = STRBUF_INIT, cmd = STRBUF_INIT, path = STRBUF_INIT, err = STRBUF_INIT;
	struct strbuf secret = STRBUF_INIT, log = STRBUF_INIT;
	struct dt_auth_key key;
	struct dt_httpc c;
	struct sigaction sa;
	json_t *body, *reply = NULL;
	int port, st, rc = RSH_FAIL;

	if (argc < 3) {
		fprintf(stderr, "usage: dtagent rsh HOST COMMAND WORDS...\n"
			"(Open MPI's plm_rsh_agent for the mpi launcher; see docs/run.md)\n");
		return RSH_FAIL;
	}
	host = argv[1];
	port = rsh_agent_port(map, host);
	if (port < 0) {
		fprintf(stderr, "dtagent rsh: no agent port for host '%s' in DT_ORTED_AGENTS (%s)\n",
			host, map ? map : "not set");
		return RSH_FAIL;
	}
	if (cap && *cap) {
		/* team mode: the job's capability, never the secret (auth.h dt_auth_cap) */
		if (dt_auth_cap_parse(cap, &parsed) < 0 || !capkey ||
		    dt_auth_key_from_hex(&key, capkey) < 0) {
			fprintf(stderr, "dtagent rsh: DT_ORTED_CAP '%s' or DT_ORTED_KEY is not a "
				"job's capability\n", cap);
			return RSH_FAIL;
		}
	} else {
		dt_home_path(&secret, "secret");
		if (dt_auth_key_load(&key, secret.buf) < 0) {
			fprintf(stderr, "dtagent rsh: cannot read the cluster key '%s'\n",
				secret.buf);
			strbuf_release(&secret);
			return RSH_FAIL;
		}
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;     /* no SA_RESTART: a sleep ends at once */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (marker && *marker) {
		rsh_task_id(&id, marker, host);
	} else {
		/* an mpirun typed by hand: still one id per run */
		char own[32];

		snprintf(own, sizeof(own), "rsh-%ld", (long)getpid());
		rsh_task_id(&id, own, host);
	}
	rsh_join(&cmd, argc - 2, argv + 2);
	/* the orted and its ranks write job files as mpirun's task does (cluster.yaml job_files) */
	body = json_pack("{s:s,s:[s],s:b,s:i,s:i}", "id", id.buf, "argv", cmd.buf, "shell", 1,
			 "grace_ms", RSH_STOP_GRACE_MS, "umask", (int)sf_umask());
	if (jobid && *jobid)
		json_object_set_new(body, "job_id", json_string(jobid));
	if (jobdir && *jobdir == '/') {
		strbuf_addf(&log, "%s/logs/", jobdir);
		rsh_task_id(&log, NULL, host);      /* orted-<host> */
		strbuf_addstr(&log, ".log");
		json_object_set_new(body, "log", json_string(log.buf));
	}
	dt_httpc_init(&c, host, port, &key);
	if (cap && *cap)
		snprintf(c.cap, sizeof(c.cap), "%s", cap);
	memset(&key, 0, sizeof(key));
	c.peer_port_name = "the agent port";
	c.connect_timeout_ms = 5000;
	c.timeout_ms = 15000;
	st = dt_httpc_request(&c, "POST", DT_PATH_TASKS, body, &reply, &err);
	if (st != 201) {
		fprintf(stderr, "dtagent rsh: cannot start orted on %s (agent port %d): %s\n", host,
			port, st < 0 ? err.buf : dt_httpc_reply_error(reply, st));
	} else {
		strbuf_addf(&path, "%s%s", DT_PATH_TASK_PREFIX, id.buf);
		rc = wait_task(&c, host, path.buf);
	}
	json_decref(body);
	json_decref(reply);
	dt_httpc_release(&c);
	strbuf_release(&id);
	strbuf_release(&cmd);
	strbuf_release(&path);
	strbuf_release(&err);
	strbuf_release(&secret);
	strbuf_release(&log);
	return rc;
}
