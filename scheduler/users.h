/*
 * users.h - who is asking dtsched, and what they may do (docs/team.md).
 *
 * Every request is attributed to one user (struct caller): on the local socket
 * the kernel names the peer's uid (SO_PEERCRED, lib/httpd.h), whose name on
 * the head is the user; a request signed with the cluster secret is the
 * cluster user's (the user dtsched runs as: in single-user mode every job is
 * theirs, as before) or a daemon's.  A job's owner is j->user, set from the
 * caller at submit, never from what the client sends.
 *
 * Roles: admin (drain, resume, user management, steering others' jobs and
 * sweeps) for root, the user dtsched runs as, and members of cluster.yaml's
 * `admin_group:` on the head; everyone else is a user, who sees and steers
 * their own jobs and sweeps and sees of others' only what Slurm's squeue
 * shows (caller_may_read()).
 *
 * Handlers call caller_of() first (lock held, as it reads s->cc), then the
 * checks; a refusal is 403 with the rule named:
 *   "job j-000042 belongs to alice; cancelling it needs the admin role".
 */
#ifndef DT_SCHED_USERS_H
#define DT_SCHED_USERS_H

#include <jansson.h>
#include "httpd.h"

struct sched;

#define CALLER_NAME_MAX 64

struct caller {
	char name[CALLER_NAME_MAX];   /* the user name on the head */
	long long uid;                /* -1 when not known by uid (a key, the secret) */
	int admin;                    /* the admin role */
	const char *how;              /* "cluster secret", "local socket (SO_PEERCRED)" */
	const char *admin_why;        /* why admin ("root", "admin_group 'x'"), NULL if not */
};

/*
 * The caller of req; lock held.  0, or -1 with resp set (401: the uid has no
 * name on the head).
 */
int caller_of(struct sched *s, const struct dt_http_request *req, struct caller *c,
	      struct dt_http_response *resp);
/* caller_of() with s->lock taken: 0 with the lock held, or -1 (answered) with it released */
int caller_of_locked(struct sched *s, const struct dt_http_request *req, struct caller *c,
		     struct dt_http_response *resp);
/* {"user", "uid", "roles": [...], "authenticated_by", "admin_because"} */
json_t *caller_json(const struct caller *c);
/* o's "head_key" (OpenSSH public key line) and "head_key_fingerprint": dtsched's
 * own key, which users who sign with their own key pin (docs/team.md) */
void head_key_json(const struct sched *s, json_t *o);

/* May c steer (cancel, pause, stop) what `owner` owns?  Admins may steer all. */
int caller_may_steer(const struct caller *c, const char *owner);
/*
 * May c read the private parts (env, argv, logs, spec) of what `owner` owns?
 * Its owner and admins; with share_group, members of the owner's primary
 * group on the head too.
 */
int caller_may_read(const struct caller *c, const char *owner, int share_group);
/* 403 naming the rule: "<what> belongs to <owner>; <doing> it needs the admin role" */
void caller_deny(struct dt_http_response *resp, const struct caller *c, const char *what,
		 const char *owner, const char *doing);
/* 403 for an admin operation: "<doing> needs the admin role (<who> is a user)" */
int caller_need_admin(const struct caller *c, struct dt_http_response *resp,
		      const char *doing);

/*
 * Users elsewhere (docs/team.md): users added with their own ed25519 key
 * (`dtctl user add NAME --key FILE.pub [--admin]`), kept in state.db's users
 * table and in s->users.  users_init() at start (-1: the database failed);
 * users_key() is httpd's user_key (lib/httpd.h): the key of a user (takes
 * the lock).  The routes: GET/POST /v1/users, DELETE /v1/users/<name>.
 */
int users_init(struct sched *s);
int users_key(void *data, const char *user, unsigned char pub[32]);
extern const struct dt_http_route users_routes[];
extern const size_t users_nr_routes;

/* The uid and primary gid of user `name` on the head; -1 when it has no account. */
int user_ids(const char *name, long long *uid, long long *gid);

#endif
