/*
 * setup.h - the cluster a dtctl command works on, resolved once by the
 * command table (cli/dtctl.c) before the command does anything, like git's
 * RUN_SETUP: every command names the cluster the same way.
 *
 * The cluster file is -c/--cluster FILE, else $DTCTL_CLUSTER, else the one
 * `dtctl init` installed in the dtctl home ($DTCTL_HOME or ~/.dtctl).  From it
 * come the head's port (head.port; dtctl runs on the head, so it talks to
 * 127.0.0.1), the shared dir (shared_dir:, or $DTCTL_SHARED_DIR) and the home
 * holding the secret, dtsched.pid and state.db: the file's own folder when
 * that folder is a dtctl home (it holds a `secret`), else $DTCTL_HOME.
 *
 * A command's row says what it needs (flags below); the setup prints why and
 * exits when it is missing.  Commands read the result from `the_cluster`.
 */
#ifndef DT_CLI_SETUP_H
#define DT_CLI_SETUP_H

#include "config.h"
#include "json.h"
#include "parse-options.h"

enum setup_flags {
	USE_CLUSTER = 1 << 0,   /* accepts -c; loads the cluster file when there is one */
	NEED_CLUSTER = 1 << 1,  /* needs the cluster file (SSH commands) */
	NEED_HEAD = 1 << 2,     /* talks to dtsched; never starts it: needs a set-up cluster */
	START_HEAD = 1 << 3,    /* may start dtsched (run, sweep submit, agents start) */
	NEED_SHARED = 1 << 4,   /* needs the shared dir */
};

struct dt_cluster {
	const char *given;      /* -c FILE, NULL when not given */
	char *file;             /* the cluster file, NULL when there is none */
	struct cluster_config config;   /* loaded when file != NULL */
	const char *home;       /* dt_home() after the setup: secret, dtsched.pid */
	const char *head_address;       /* where dtctl reaches dtsched: 127.0.0.1 */
	int head_port;
	long long heartbeat_ms, dead_after_ms;  /* passed to dtsched */
	const char *shared_dir; /* $DTCTL_SHARED_DIR, else the file's; NULL without both */
	int flags;              /* what the setup did (enum setup_flags) */
};
extern struct dt_cluster the_cluster;

/* The -c/--cluster option every command accepts (parse_options_common()). */
extern const struct option cluster_options[];

/*
 * Resolve the_cluster for `flags` (once; later calls only check the extra
 * flags): 0, or the exit code after printing why (DT_EXIT_UNREACH: no
 * cluster set up here; DT_EXIT_USAGE: the file is bad).
 */
int cluster_setup(int flags);
/* The user a job is submitted as ("user" in POST /v1/jobs and /v1/sweeps). */
const char *cli_whoami(void);

/*
 * JSON output of every command (docs/json.md): one object with "schema": 1
 * first.  json_error_print() prints {"schema":1,"error":{"message","exit_code"}}.
 */
void json_doc_print(json_t *doc);
/* The same for a document of one member, {"schema": 1, key: value}; value stays the caller's. */
void json_doc_print_key(const char *key, json_t *value);
void json_error_print(const char *message, int exit_code);
/* Whether this command prints JSON (--json was given) and whether it has printed it. */
extern int json_mode, json_printed;

#endif
