/*
 * head.c - finding, starting and talking to dtsched (see head.h).
 *
 * dtsched runs on the head (this machine) and is started on demand: the first
 * command that needs it runs `dtsched --daemon` from the folder of dtctl,
 * which returns once it serves.  Its port and failure timing come from
 * cluster.yaml (head.port, agent.heartbeat, agent.dead_after).
 */
#include "head.h"
#include "daemon.h"
#include "dthome.h"
#include "json.h"
#include "protocol.h"
#include "run-command.h"
#include "secret.h"
#include "usage.h"

#include <limits.h>
#include <string.h>
#include <unistd.h>

void dt_self_dir(struct strbuf *sb)
{
	char buf[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
	char *slash;

	if (n <= 0) {
		strbuf_addstr(sb, ".");
		return;
	}
	buf[n] = '\0';
	slash = strrchr(buf, '/');
	if (slash)
		*slash = '\0';
	strbuf_addstr(sb, buf);
}

void head_settings(struct head_settings *hs)
{
	struct cluster_config c;
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;

	hs->port = DT_HEAD_PORT_DEFAULT;
	hs->heartbeat_ms = 2000;
	hs->dead_after_ms = 10000;
	dt_home_path(&path, "cluster.yaml");
	memset(&c, 0, sizeof(c));
	if (access(path.buf, R_OK) == 0 && cluster_config_load(&c, path.buf, &err) == 0) {
		if (c.head.port > 0)
			hs->port = c.head.port;
		if (c.agent.heartbeat_ms > 0)
			hs->heartbeat_ms = c.agent.heartbeat_ms;
		if (c.agent.dead_after_ms > 0)
			hs->dead_after_ms = c.agent.dead_after_ms;
		cluster_config_release(&c);
	}
	strbuf_release(&path);
	strbuf_release(&err);
}

int head_key(struct dt_auth_key *key)
{
	struct strbuf path = STRBUF_INIT;
	int ret = 0;

	dt_home_path(&path, "secret");
	if (access(path.buf, F_OK) < 0) {
		struct strbuf hex = STRBUF_INIT;

		/* a head without init (make demo, a workstation): make the secret now */
		if (dt_secret_ensure(&hex) < 0)
			ret = DT_EXIT_UNREACH;
		strbuf_release(&hex);
	}
	if (!ret && dt_auth_key_load(key, path.buf) < 0)
		ret = DT_EXIT_UNREACH;
	strbuf_release(&path);
	return ret;
}

int head_start(int quiet)
{
	struct head_settings hs;
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf dir = STRBUF_INIT, pidfile = STRBUF_INIT;
	struct dt_auth_key key;
	long long pid;
	int code;

	if (dt_home_ensure() < 0)
		return DT_EXIT_USAGE;
	if ((code = head_key(&key)))
		return code;
	dt_home_path(&pidfile, "dtsched.pid");
	if (dt_pidfile_running(pidfile.buf, &pid)) {
		strbuf_release(&pidfile);
		return 0;
	}
	head_settings(&hs);
	dt_self_dir(&dir);
	strvec_pushf(&cp.args, "%s/dtsched", dir.buf);
	strvec_push(&cp.args, "--daemon");
	strvec_pushf(&cp.args, "--port=%d", hs.port);
	strvec_pushf(&cp.args, "--heartbeat-ms=%lld", hs.heartbeat_ms);
	strvec_pushf(&cp.args, "--dead-after-ms=%lld", hs.dead_after_ms);
	cp.no_stdin = 1;
	if (quiet)
		cp.no_stdout = 1;
	code = run_command(&cp);
	child_process_clear(&cp);
	strbuf_release(&dir);
	strbuf_release(&pidfile);
	if (code) {
		error("cannot start dtsched (see '%s/dtsched.log')", dt_home());
		return DT_EXIT_UNREACH;
	}
	return 0;
}

int head_connect(struct dt_httpc *c, int start)
{
	struct head_settings hs;
	struct dt_auth_key key;
	int code;

	if (start && (code = head_start(1)))
		return code;
	if ((code = head_key(&key)))
		return code;
	head_settings(&hs);
	dt_httpc_init(c, "127.0.0.1", hs.port, &key);
	return 0;
}

int head_api(const char *method, const char *path, const json_t *body, json_t **out,
	     int *status)
{
	struct dt_httpc c;
	struct strbuf err = STRBUF_INIT;
	int code, st;

	*out = NULL;
	if (status)
		*status = -1;
	if ((code = head_connect(&c, 1)))
		return code;
	st = dt_httpc_request(&c, method, path, body, out, &err);
	dt_httpc_release(&c);
	if (status)
		*status = st;
	if (st < 0) {
		error("cannot reach dtsched: %s (see '%s/dtsched.log')", err.buf, dt_home());
		code = DT_EXIT_UNREACH;
	} else if (st == 401) {
		error("dtsched refused the request: %s", dt_httpc_reply_error(*out, st));
		code = DT_EXIT_UNREACH;
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
