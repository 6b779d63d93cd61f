/*
 * head.h - how dtctl talks to dtsched: find it (the_cluster's head.port,
 * this machine), start it when the command may, and send it signed requests.
 *
 *	struct dt_httpc c;
 *	if ((code = head_connect(&c)))
 *		return code;                    // DT_EXIT_UNREACH / DT_EXIT_USAGE, message printed
 *	status = dt_httpc_request(&c, "GET", DT_PATH_NODES, NULL, &reply, &err);
 *	dt_httpc_release(&c);
 */
#ifndef DT_CLI_HEAD_H
#define DT_CLI_HEAD_H

#include "config.h"
#include "httpc.h"
#include "strbuf.h"

/* dt_self_dir(), the folder of the running dtctl: lib/dthome.h */
#include "dthome.h"

/*
 * Start dtsched (--daemon) for the_cluster if it is not running; with
 * `restart`, also restart one started with other head settings (head.port,
 * agent timing).  0 or a DT_EXIT code, message printed.
 */
int head_start(int quiet, int restart);
/*
 * Whether dtctl speaks to dtsched over its local socket (team mode: the
 * kernel names the user, no secret), with its path appended to path (may be
 * NULL); else 0: TCP signed with the cluster secret.
 */
int head_socket(struct strbuf *path);
/* Whether dtctl signs as a user with their own key ($DTCTL_USER_KEY, the
 * private key file; $DTCTL_USER, default the login name): users elsewhere. */
int head_user_key(void);
/* A client for the_cluster's dtsched (never starts it); 0 or a DT_EXIT code. */
int head_connect(struct dt_httpc *c);
/*
 * One signed request to dtsched (started first when the command's row says
 * START_HEAD, cli/setup.h): 0 with the reply in *out
 * (also set on errors when there is one; the caller frees it), or the exit
 * code after printing why: DT_EXIT_UNREACH (unreachable, 401), DT_EXIT_USAGE
 * (400, 404, 422: nothing was done), DT_EXIT_FAIL (other statuses).
 * *status gets the HTTP status (-1 when there was no answer) when not NULL.
 */
int head_api(const char *method, const char *path, const json_t *body, json_t **out,
	     int *status);
/*
 * head_api() for a reply that may be text (a 2xx whose body is not a JSON
 * object): then in text, *out NULL; else as head_api(), text empty.
 */
int head_api_text(const char *method, const char *path, const json_t *body, json_t **out,
		  struct strbuf *text);
/*
 * head_api() on one object's endpoint, prefix + id + suffix: ("POST",
 * DT_PATH_JOB_PREFIX, "j-000042", DT_PATH_CANCEL_SUFFIX, ...); suffix may be "".
 */
int head_api_id(const char *method, const char *prefix, const char *id, const char *suffix,
		const json_t *body, json_t **out, int *status);
/* Submit job (as dtctl's user, in the_cluster's shared dir); its id into id
 * (0), or an exit code after saying why. */
int head_job_submit(const struct job_config *job, struct strbuf *id);
/*
 * Wait until job `id` is final; its JSON in *out (0), or an exit code.  A job
 * still PENDING after pending_ms is cancelled, saying why it waited ("<what>
 * job ... was not placed").
 */
int head_job_wait(const char *id, long long pending_ms, const char *what, json_t **out);
/* Load <home>/secret into key; DT_EXIT_UNREACH with a message if there is none. */
int head_key(struct dt_auth_key *key);

#endif
