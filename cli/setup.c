/*
 * setup.c - the cluster of a dtctl command (see setup.h) and the JSON
 * envelope of every --json output (docs/json.md).
 */
#include "setup.h"
#include "dthome.h"
#include "parse-options.h"
#include "protocol.h"
#include "slurm.h"
#include "usage.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct dt_cluster the_cluster;
int json_mode, json_printed;

const struct option cluster_options[] = {
	OPT_GROUP("common options"),
	OPT_STRING('c', "cluster", &the_cluster.given, "file",
		   "the cluster (default: $DTCTL_CLUSTER, else the one 'dtctl init' set up)"),
	OPT_END(),
};

static int not_set_up(void)
{
	error("no cluster set up here: run 'dtctl init -c cluster.yaml'");
	fprintf(stderr, "hint: or name one with -c FILE or $DTCTL_CLUSTER (home '%s')\n", dt_home());
	return DT_EXIT_UNREACH;
}

/*
 * A cluster file in a dtctl home (the copy init made, or a test's home) brings
 * that home: its secret and its dtsched, whatever $DTCTL_HOME says.
 */
static void adopt_home(const char *file)
{
	struct strbuf dir = STRBUF_INIT;
	const char *slash = strrchr(file, '/');

	strbuf_add(&dir, file, slash ? (size_t)(slash - file) : 1);
	if (!slash)
		strbuf_reset(&dir), strbuf_addch(&dir, '.');
	strbuf_addstr(&dir, "/secret");
	if (access(dir.buf, F_OK) == 0) {
		strbuf_setlen(&dir, dir.len - strlen("/secret"));
		/* children (dtsched, a local dtagent) must agree: the environment */
		setenv("DTCTL_HOME", dir.buf, 1);
		dt_home_reset();
	}
	strbuf_release(&dir);
}

static int load(void)
{
	struct strbuf path = STRBUF_INIT, err = STRBUF_INIT;
	const char *env = getenv_nonempty("DTCTL_CLUSTER");

	if (the_cluster.given || env) {
		strbuf_addstr(&path, the_cluster.given ? the_cluster.given : env);
		if (access(path.buf, F_OK) < 0) {
			error("cluster file '%s' does not exist (from %s)", path.buf,
			      the_cluster.given ? "-c" : "$DTCTL_CLUSTER");
			strbuf_release(&path);
			return DT_EXIT_USAGE;
		}
		adopt_home(path.buf);
	} else {
		dt_home_path(&path, "cluster.yaml");
		if (access(path.buf, F_OK) < 0) {
			strbuf_release(&path);
			return 0;
		}
	}
	if (cluster_config_load(&the_cluster.config, path.buf, &err) < 0) {
		error("%s", err.buf);
		strbuf_release(&path);
		strbuf_release(&err);
		return DT_EXIT_USAGE;
	}
	the_cluster.file = strbuf_detach(&path, NULL);
	strbuf_release(&err);
	return 0;
}

int cluster_setup(int flags)
{
	struct cluster_config *c = &the_cluster.config;
	int code;

	int session = 0;
	static char *record;   /* the allocation's record, when it named the cluster */

	/* dtctl run/sweep inside a Slurm allocation: a cluster of its own (slurm.h) */
	if ((flags & START_HEAD) && !slurm_session_active() && slurm_session_wanted()) {
		if ((code = slurm_session_prepare()))
			return code;
		/* a command that read the cluster already (sweep: USE_CLUSTER first) reads ours */
		if (the_cluster.file) {
			cluster_config_release(&the_cluster.config);
			free(the_cluster.file);
			the_cluster.file = NULL;
		}
		the_cluster.flags = 0;
		the_cluster.shared_dir = NULL;
		the_cluster.given = NULL;
		free(record);
		record = NULL;
		session = 1;
	}
	/* ps/show/cancel in another shell of an allocation: its head (slurm.h) */
	if ((flags & NEED_HEAD) && !(flags & START_HEAD) && !(the_cluster.flags & USE_CLUSTER) &&
	    !the_cluster.given && !getenv_nonempty("DTCTL_CLUSTER")) {
		char *file;

		if ((code = slurm_session_find(&file)) < 0)
			return -code;
		if (code > 0)
			the_cluster.given = record = file;
	}
	if (!(the_cluster.flags & USE_CLUSTER)) {
		the_cluster.flags |= USE_CLUSTER;
		the_cluster.head_address = "127.0.0.1";
		the_cluster.head_port = DT_HEAD_PORT_DEFAULT;
		the_cluster.heartbeat_ms = 2000;
		the_cluster.dead_after_ms = 10000;
		if ((code = load()))
			return code;
		if (the_cluster.file) {
			if (c->head.port > 0)
				the_cluster.head_port = c->head.port;
			if (c->agent.heartbeat_ms > 0)
				the_cluster.heartbeat_ms = c->agent.heartbeat_ms;
			if (c->agent.dead_after_ms > 0)
				the_cluster.dead_after_ms = c->agent.dead_after_ms;
			the_cluster.shared_dir = c->shared_dir;
			/* the allocation's head runs on its batch host or salloc's machine */
			if (record && c->head.address)
				the_cluster.head_address = c->head.address;
		}
		if (getenv_nonempty("DTCTL_SHARED_DIR"))
			the_cluster.shared_dir = getenv("DTCTL_SHARED_DIR");
		the_cluster.home = dt_home();
	}
	if ((flags & NEED_CLUSTER) && !the_cluster.file)
		return not_set_up();
	if ((flags & NEED_SHARED) && !the_cluster.shared_dir)
		return not_set_up();
	if ((flags & NEED_HEAD) && !(flags & START_HEAD)) {
		struct strbuf secret = STRBUF_INIT;
		int missing;

		/* no secret: no head ever ran here, and a read-only command starts none */
		dt_home_path(&secret, "secret");
		missing = access(secret.buf, F_OK) < 0;
		strbuf_release(&secret);
		if ((the_cluster.file && c->team) || getenv_nonempty("DTCTL_USER_KEY"))
			missing = 0;   /* users: the local socket or their own key (cli/head.h) */
		if (missing || !the_cluster.file)
			return not_set_up();
	}
	the_cluster.flags |= flags;
	if (session && (code = slurm_session_start()))
		return code;
	return 0;
}

void json_doc_print(json_t *doc)
{
	json_t *o = json_pack("{s:i}", "schema", 1);

	json_object_update(o, doc);
	json_print(o);
	json_decref(o);
	json_printed = 1;
}

void json_doc_print_key(const char *key, json_t *value)
{
	json_t *doc = json_pack("{s:O}", key, value);

	json_doc_print(doc);
	json_decref(doc);
}

void json_error_print(const char *message, int exit_code)
{
	json_t *o = json_pack("{s:{s:s,s:i}}", "error", "message", message, "exit_code", exit_code);

	json_doc_print(o);
	json_decref(o);
}

const char *cli_whoami(void)
{
	struct passwd *pw = getpwuid(geteuid());
	const char *u = getenv("USER");

	return pw && pw->pw_name ? pw->pw_name : u ? u : "?";
}
