/*
 * head.c - finding, starting and talking to dtsched (see head.h).
 *
 * dtsched runs on the head (this machine).  Commands that submit work (run,
 * sweep, agents start, init, head start) start it when it is not running:
 * `dtsched --daemon` from the folder of dtctl, which returns once it serves;
 * read-only ones never do.  Its port and failure timing come from the
 * command's cluster (the_cluster, cli/setup.h: head.port, agent.heartbeat,
 * agent.dead_after).
 */
#include "head.h"
#include "daemon.h"
#include "dthome.h"
#include "json.h"
#include "protocol.h"
#include "run-command.h"
#include "secret.h"
#include "setup.h"
#include "usage.h"

#include <limits.h>
#include <string.h>
#include <unistd.h>

int head_key(struct dt_auth_key *key)
{
	/* the key read last, with its file: a submit that starts the head asks twice */
	static struct strbuf loaded_from = STRBUF_INIT;
	static struct dt_auth_key loaded;
	struct strbuf path = STRBUF_INIT;
	int ret = 0;

	dt_home_path(&path, "secret");
	if (loaded_from.len && !strcmp(loaded_from.buf, path.buf)) {
		*key = loaded;
		strbuf_release(&path);
		return 0;
	}
	if (access(path.buf, F_OK) < 0) {
		struct strbuf hex = STRBUF_INIT;

		/* a head without init (make demo, a workstation): make the secret now */
		if (dt_secret_ensure(&hex) < 0)
			ret = DT_EXIT_UNREACH;
		strbuf_release(&hex);
	}
	if (!ret && dt_auth_key_load(key, path.buf) < 0)
		ret = DT_EXIT_UNREACH;
	if (!ret) {
		loaded = *key;
		strbuf_reset(&loaded_from);
		strbuf_addbuf(&loaded_from, &path);
	}
	strbuf_release(&path);
	return ret;
}

/* dtsched's command line for the_cluster's head settings */
static void head_args(struct strvec *args)
{
	struct strbuf dir = STRBUF_INIT;

	dt_self_dir(&dir);
	strvec_pushf(args, "%s/dtsched", dir.buf);
	strvec_push(args, "--daemon");
	strvec_pushf(args, "--port=%d", the_cluster.head_port);
	strvec_pushf(args, "--heartbeat-ms=%lld", the_cluster.heartbeat_ms);
	strvec_pushf(args, "--dead-after-ms=%lld", the_cluster.dead_after_ms);
	/* team mode: where users reach it; a change (mode: team set, head.socket
	 * moved) restarts it like a new port does (head_args_match) */
	if (the_cluster.file && the_cluster.config.team) {
		struct strbuf sock = STRBUF_INIT;

		cluster_head_socket(&the_cluster.config, dt_home(), &sock);
		strvec_pushf(args, "--socket=%s", sock.buf);
		strbuf_release(&sock);
	}
	strbuf_release(&dir);
}

/*
 * Whether the running dtsched `pid` was started with `args` (its options,
 * not its path): a head.port or agent timing changed in cluster.yaml since
 * means it must restart, else later commands would talk to the wrong port.
 */
static int head_args_match(long long pid, const struct strvec *args)
{
	struct strbuf path = STRBUF_INIT, cmdline = STRBUF_INIT;
	const char *p, *end;
	size_t i = 1;
	int same = 1;

	strbuf_addf(&path, "/proc/%lld/cmdline", pid);
	if (strbuf_read_file(&cmdline, path.buf, 4096) < 0) {
		strbuf_release(&path);
		return 1;   /* cannot tell: leave it alone */
	}
	p = cmdline.buf + strlen(cmdline.buf) + 1;   /* past its path */
	end = cmdline.buf + cmdline.len;
	for (; p < end && i < args->nr; p += strlen(p) + 1, i++)
		if (strcmp(p, args->v[i]))
			same = 0;
	if (p < end || i < args->nr)
		same = 0;
	strbuf_release(&path);
	strbuf_release(&cmdline);
	return same;
}

/*
 * The protocol of a running dtsched when it is not ours (protocol.h), else 0:
 * `dtctl init` and `dtctl head start` restart a dtsched left from another
 * build (its state is in SQLite and the tasks live on under their agents).
 */
static int head_other_protocol(const struct dt_auth_key *key)
{
	struct dt_httpc c;
	struct strbuf out = STRBUF_INIT, err = STRBUF_INIT;
	int st, theirs;

	dt_httpc_init(&c, the_cluster.head_address, the_cluster.head_port, key);
	c.peer_port_name = "the head port";
	c.timeout_ms = 5000;
	st = dt_httpc_request_raw(&c, "GET", DT_PATH_STATUS, NULL, 0, &out, &err);
	/* a 426, its or ours (httpc.h), starts {"protocol": its version */
	theirs = st == DT_HTTP_PROTOCOL_MISMATCH ? dt_reply_protocol(out.buf, out.len) : 0;
	dt_httpc_release(&c);
	strbuf_release(&out);
	strbuf_release(&err);
	return theirs == DT_PROTOCOL_VERSION ? 0 : theirs;
}

int head_start(int quiet, int restart)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf pidfile = STRBUF_INIT;
	struct dt_auth_key key;
	long long pid;
	int code;

	if (dt_home_ensure() < 0)
		return DT_EXIT_USAGE;
	if ((code = head_key(&key)))
		return code;
	head_args(&cp.args);
	dt_home_path(&pidfile, "dtsched.pid");
	if (dt_pidfile_running(pidfile.buf, &pid)) {
		int theirs = 0;

		if (!restart || (head_args_match(pid, &cp.args) &&
				 !(theirs = head_other_protocol(&key)))) {
			child_process_clear(&cp);
			strbuf_release(&pidfile);
			return 0;
		}
		if (theirs)
			fprintf(stderr, "%s: dtsched (pid %lld) speaks protocol %d, this dtctl %d: "
				"restarting it\n", dt_progname(), pid, theirs, DT_PROTOCOL_VERSION);
		else
			fprintf(stderr, "%s: the head settings changed (port %d): restarting dtsched "
				"(pid %lld)\n", dt_progname(), the_cluster.head_port, pid);
		if (dt_daemon_stop(pidfile.buf, "dtsched", 10000) < 0) {
			child_process_clear(&cp);
			strbuf_release(&pidfile);
			return DT_EXIT_FAIL;
		}
	}
	cp.no_stdin = 1;
	if (quiet)
		cp.no_stdout = 1;
	code = run_command(&cp);
	child_process_clear(&cp);
	strbuf_release(&pidfile);
	if (code) {
		error("cannot start dtsched (see '%s/dtsched.log')", dt_home());
		return DT_EXIT_UNREACH;
	}
	return 0;
}

int head_user_key(void)
{
	return getenv_nonempty("DTCTL_USER_KEY") != NULL;
}

int head_socket(struct strbuf *path)
{
	if (head_user_key() || !the_cluster.file || !the_cluster.config.team)
		return 0;
	if (path)
		cluster_head_socket(&the_cluster.config, the_cluster.home ? the_cluster.home :
				    dt_home(), path);
	return 1;
}

/*
 * $DTCTL_HEAD_KEY: dtsched's public key (`dtctl user add` prints it), as its
 * OpenSSH line or a file holding it; then every reply to a key-signed request
 * must be signed with it (docs/team.md).  0 (pinned or not set), -1 said.
 */
static int head_key_pin(struct dt_httpc *c)
{
	const char *v = getenv_nonempty("DTCTL_HEAD_KEY");
	struct strbuf line = STRBUF_INIT, err = STRBUF_INIT;
	int ret = 0;

	if (!v)   /* every reply is authenticated: a key user pins dtsched's key */
		return error("$DTCTL_HEAD_KEY is not set: a user with their own key pins dtsched's "
			     "key to know its replies (the admin's 'dtctl user add' printed it; "
			     "docs/team.md, \"Users elsewhere\")");
	if (!strncmp(v, "ssh-", 4))
		strbuf_addstr(&line, v);
	else if (strbuf_read_file(&line, v, 16 * 1024) < 0)
		ret = error_errno("$DTCTL_HEAD_KEY: cannot read '%s'", v);
	if (!ret && dt_userkey_parse_pub(line.buf, c->head_pub, &err) < 0)
		ret = error("$DTCTL_HEAD_KEY: %s", err.buf);
	c->head_pinned = !ret;
	strbuf_release(&line);
	strbuf_release(&err);
	return ret;
}

int head_connect(struct dt_httpc *c)
{
	struct dt_auth_key key;
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;
	int code;

	if (head_user_key()) {
		/* a user elsewhere: their own key (docs/team.md, "Users elsewhere") */
		struct dt_userkey k;
		const char *user = getenv_nonempty("DTCTL_USER") ? getenv_nonempty("DTCTL_USER") :
			cli_whoami();

		if (dt_userkey_load(getenv_nonempty("DTCTL_USER_KEY"), &k, &err) < 0) {
			error("$DTCTL_USER_KEY: %s", err.buf);
			strbuf_release(&err);
			strbuf_release(&path);
			return DT_EXIT_USAGE;
		}
		dt_httpc_init_user(c, the_cluster.file && the_cluster.config.head.address ?
				   the_cluster.config.head.address : the_cluster.head_address,
				   the_cluster.head_port, user, &k);
		memset(&k, 0, sizeof(k));
		if (head_key_pin(c) < 0) {
			dt_httpc_release(c);
			strbuf_release(&path);
			return DT_EXIT_USAGE;
		}
		c->peer_port_name = "the head port";
		strbuf_release(&path);
		return 0;
	}
	if (head_socket(&path)) {
		/* team mode: the kernel tells dtsched who we are; the socket's
		 * folder tells us that it is dtsched (root's or ours alone) */
		if (dt_unix_socket_trusted(path.buf, (unsigned)geteuid(), &err) < 0) {
			error("cannot reach dtsched: %s", err.buf);
			fprintf(stderr, "hint: is it running? the admin starts it with 'dtctl head "
				"start' (cluster.yaml: mode: team, head.socket)\n");
			code = DT_EXIT_UNREACH;
		} else {
			dt_httpc_init_unix(c, path.buf);
			code = 0;
		}
		strbuf_release(&path);
		strbuf_release(&err);
		return code;
	}
	if ((code = head_key(&key)))
		return code;
	dt_httpc_init(c, the_cluster.head_address, the_cluster.head_port, &key);
	c->peer_port_name = "the head port";
	return 0;
}

/*
 * One client for all of a command's head_api() calls: `dtctl cancel A B C`
 * and the like send their requests on one kept-alive connection instead of
 * connecting (and checking that dtsched runs) once per request.
 */
static struct dt_httpc api_client;
static int api_client_ready;

static void api_client_release(void)
{
	dt_httpc_release(&api_client);
}

/* head_api(), and with text a 2xx reply that is not JSON there, raw */
static int head_call(const char *method, const char *path, const json_t *body, json_t **out,
		     struct strbuf *text, int *status)
{
	struct strbuf err = STRBUF_INIT;
	int code = 0, st;

	*out = NULL;
	if (status)
		*status = -1;
	if (!api_client_ready) {
		/* team mode: the admin starts dtsched (users hold no secret) */
		if ((the_cluster.flags & START_HEAD) && !head_socket(NULL) && !head_user_key() &&
		    (code = head_start(1, 0)))
			return code;
		if ((code = head_connect(&api_client)))
			return code;
		api_client_ready = 1;
		atexit(api_client_release);
	}
	if (text) {
		struct strbuf in = STRBUF_INIT;

		if (body)
			json_append(&in, body);
		strbuf_reset(text);
		st = dt_httpc_request_raw(&api_client, method, path, body ? in.buf : NULL, in.len,
					  text, &err);
		strbuf_release(&in);
		if (st > 0 && text->len && (text->buf[0] == '{' || st < 200 || st >= 300)) {
			*out = json_parse(text->buf, text->len, NULL);
			strbuf_reset(text);
		}
	} else {
		st = dt_httpc_request(&api_client, method, path, body, out, &err);
	}
	if (status)
		*status = st;
	if (st < 0 && api_client.unix_socket) {
		error("cannot reach dtsched on the socket %s", err.buf);
		fprintf(stderr, "hint: is it running? ask the admin ('dtctl head status')\n");
		code = DT_EXIT_UNREACH;
	} else if (st < 0) {
		error("cannot reach dtsched at %s:%d: %s", api_client.host, the_cluster.head_port,
		      err.buf);
		if (api_client.unsigned_reply)
			fprintf(stderr, "hint: dtsched is not what answers there; see what listens: "
				"'ss -ltnp sport = :%d'\n", the_cluster.head_port);
		else
			fprintf(stderr, "hint: is it running? 'dtctl head status'; start it with "
				"'dtctl head start' (log: '%s/dtsched.log')\n", dt_home());
		code = DT_EXIT_UNREACH;
	} else if (st == DT_HTTP_PROTOCOL_MISMATCH) {
		error("%s", dt_httpc_reply_error(*out, st));
		code = DT_EXIT_UNREACH;
	} else if (st == 401) {
		error("dtsched refused the request: %s", dt_httpc_reply_error(*out, st));
		code = DT_EXIT_UNREACH;
	} else if (st == 403) {
		/* not yours to do: the rule, as dtsched names it (docs/team.md) */
		error("%s", dt_httpc_reply_error(*out, st));
		code = DT_EXIT_FAIL;
	} else if (st == 400 || st == 404 || st == 422) {
		error("%s", dt_httpc_reply_error(*out, st));
		code = DT_EXIT_USAGE;
	} else if (st < 200 || st >= 300) {
		error("dtsched: %s (HTTP %d)", dt_httpc_reply_error(*out, st), st);
		code = DT_EXIT_FAIL;
	}
	strbuf_release(&err);
	return code;
}

int head_api(const char *method, const char *path, const json_t *body, json_t **out,
	     int *status)
{
	return head_call(method, path, body, out, NULL, status);
}

int head_api_text(const char *method, const char *path, const json_t *body, json_t **out,
		  struct strbuf *text)
{
	return head_call(method, path, body, out, text, NULL);
}

int head_api_id(const char *method, const char *prefix, const char *id, const char *suffix,
		const json_t *body, json_t **out, int *status)
{
	struct strbuf path = STRBUF_INIT;
	int code;

	strbuf_addf(&path, "%s%s%s", prefix, id, suffix);
	code = head_api(method, path.buf, body, out, status);
	strbuf_release(&path);
	return code;
}

int head_job_submit(const struct job_config *job, struct strbuf *id)
{
	json_t *req, *reply = NULL;
	int code;

	req = json_pack("{s:o,s:s}", "job", job_config_to_json(job), "shared_dir",
			the_cluster.shared_dir);   /* the owner: who the request proves to be */
	code = head_api("POST", DT_PATH_JOBS, req, &reply, NULL);
	if (!code)
		strbuf_addstr(id, json_get_str(json_object_get(reply, "job"), "id", "?"));
	json_decref(req);
	json_decref(reply);
	return code;
}

#define HEAD_JOB_POLL_MS 200

int head_job_wait(const char *id, long long pending_ms, const char *what, json_t **out)
{
	for (long long waited = 0;; waited += HEAD_JOB_POLL_MS) {
		json_t *reply = NULL, *j;
		int code = head_api_id("GET", DT_PATH_JOB_PREFIX, id, "", NULL, &reply, NULL);
		const char *st;

		if (code) {
			json_decref(reply);
			return code;
		}
		j = json_object_get(reply, "job");
		st = json_get_str(j, "state", DT_JOB_PENDING);
		if (strcmp(st, DT_JOB_PENDING) && strcmp(st, DT_JOB_RUNNING)) {
			*out = json_incref(j);
			json_decref(reply);
			return 0;
		}
		if (!strcmp(st, DT_JOB_PENDING) && waited >= pending_ms) {
			error("%s job %s was not placed in %lld s (%s): cancelled", what, id,
			      pending_ms / 1000, json_get_str(j, "reason", "?"));
			json_decref(reply);
			head_api_id("POST", DT_PATH_JOB_PREFIX, id, DT_PATH_CANCEL_SUFFIX, NULL,
				    &reply, NULL);
			json_decref(reply);
			return DT_EXIT_FAIL;
		}
		json_decref(reply);
		usleep(HEAD_JOB_POLL_MS * 1000);
	}
}
