/*
 * users.c - the caller of a request and the access rules (see users.h).
 *
 * Names come from the head's user database (getpwuid_r, getgrnam_r,
 * getgrouplist), as Slurm and munge take them: a uid is a user on the head.
 */
#include "users.h"
#include "json.h"
#include "log.h"
#include "protocol.h"
#include "sched-int.h"
#include "strbuf.h"
#include "usage.h"
#include "userkey.h"

#include <ctype.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The name of uid on the head into name; -1 when it has none. */
static int uid_name(long long uid, char *name, size_t len, gid_t *gid)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	if (getpwuid_r((uid_t)uid, &pw, buf, sizeof(buf), &res) || !res)
		return -1;
	snprintf(name, len, "%s", pw.pw_name);
	if (gid)
		*gid = pw.pw_gid;
	return 0;
}

/* Whether user (primary group gid) is in group `group` on the head. */
static int in_group(const char *user, gid_t gid, const char *group)
{
	struct group gr, *res = NULL;
	char buf[8192];
	gid_t groups[256];
	int n = (int)ARRAY_SIZE(groups);

	if (!group || getgrnam_r(group, &gr, buf, sizeof(buf), &res) || !res)
		return 0;
	if (gid == gr.gr_gid)
		return 1;
	if (getgrouplist(user, gid, groups, &n) < 0)
		return 0;   /* over 256 groups: not counted (a warning would be per request) */
	for (int i = 0; i < n; i++)
		if (groups[i] == gr.gr_gid)
			return 1;
	return 0;
}

int caller_of_locked(struct sched *s, const struct dt_http_request *req, struct caller *c,
		     struct dt_http_response *resp)
{
	pthread_mutex_lock(&s->lock);
	if (caller_of(s, req, c, resp) < 0) {
		pthread_mutex_unlock(&s->lock);
		return -1;
	}
	return 0;
}

int caller_of(struct sched *s, const struct dt_http_request *req, struct caller *c,
	      struct dt_http_response *resp)
{
	const char *admin_group = s->cc ? s->cc->admin_group : NULL;
	gid_t gid = (gid_t)-1;

	memset(c, 0, sizeof(*c));
	c->uid = -1;
	if (req->via == DT_VIA_PEERCRED) {
		c->uid = req->peer_uid;
		c->how = "local socket (SO_PEERCRED)";
		if (uid_name(c->uid, c->name, sizeof(c->name), &gid) < 0) {
			dt_http_error(resp, 401, "uid %lld has no user name on the head", c->uid);
			return -1;
		}
		if (c->uid == 0)
			c->admin_why = "root";
		else if (c->uid == (long long)geteuid())
			c->admin_why = "the user dtsched runs as";
		else if (in_group(c->name, gid, admin_group))
			c->admin_why = "admin_group";
		c->admin = c->admin_why != NULL;
		return 0;
	}
	if (req->via == DT_VIA_USERKEY) {
		json_t *u = json_object_get(s->users, req->user);
		long long g;

		snprintf(c->name, sizeof(c->name), "%s", req->user);
		c->how = "ed25519 key (dtctl user add)";
		if (json_is_true(json_object_get(u, "admin")))
			c->admin_why = "added with --admin";
		else if (user_ids(c->name, &c->uid, &g) == 0 && in_group(c->name, (gid_t)g,
									   admin_group))
			c->admin_why = "admin_group";
		c->uid = -1;   /* known by the key, not by a uid */
		c->admin = c->admin_why != NULL;
		return 0;
	}
	/* the cluster secret: the user dtsched runs as (single-user mode: the one user) */
	c->how = "cluster secret";
	c->admin = 1;
	c->admin_why = "holds the cluster secret";
	if (uid_name((long long)geteuid(), c->name, sizeof(c->name), NULL) < 0)
		snprintf(c->name, sizeof(c->name), "uid%u", (unsigned)geteuid());
	return 0;
}

json_t *caller_json(const struct caller *c)
{
	json_t *roles = json_array();

	json_array_append_new(roles, json_string("user"));
	if (c->admin)
		json_array_append_new(roles, json_string("admin"));
	return json_pack("{s:s,s:o,s:o,s:s,s:o}", "user", c->name, "uid",
			 c->uid >= 0 ? json_integer(c->uid) : json_null(), "roles", roles,
			 "authenticated_by", c->how, "admin_because",
			 c->admin_why ? json_string(c->admin_why) : json_null());
}

void head_key_json(const struct sched *s, json_t *o)
{
	struct strbuf line = STRBUF_INIT, fp = STRBUF_INIT;

	if (s->have_head_key) {
		dt_userkey_format_pub(s->head_key.pub, &line);
		strbuf_addstr(&line, " dtsched");
		dt_userkey_fingerprint(s->head_key.pub, &fp);
	}
	json_object_set_new(o, "head_key", line.len ? json_string(line.buf) : json_null());
	json_object_set_new(o, "head_key_fingerprint", fp.len ? json_string(fp.buf) : json_null());
	strbuf_release(&line);
	strbuf_release(&fp);
}

int caller_may_steer(const struct caller *c, const char *owner)
{
	return c->admin || (owner && !strcmp(owner, c->name));
}

int caller_may_read(const struct caller *c, const char *owner, int share_group)
{
	struct passwd pw, *res = NULL;
	struct group gr, *gres = NULL;
	char buf[4096], gbuf[8192];
	gid_t gid = (gid_t)-1;

	if (caller_may_steer(c, owner))
		return 1;
	if (!share_group || !owner || c->uid < 0)
		return 0;
	/* the owner's primary group, by name; the caller in it (primary or not) */
	if (getpwnam_r(owner, &pw, buf, sizeof(buf), &res) || !res ||
	    getgrgid_r(pw.pw_gid, &gr, gbuf, sizeof(gbuf), &gres) || !gres)
		return 0;
	uid_name(c->uid, buf, sizeof(buf), &gid);
	return in_group(c->name, gid, gr.gr_name);
}

void caller_deny(struct dt_http_response *resp, const struct caller *c, const char *what,
		 const char *owner, const char *doing)
{
	dtlog(DTLOG_INFO, "refused %s of %s (owner '%s') to '%s'", doing, what, owner, c->name);
	dt_http_error(resp, 403, "%s belongs to %s; %s it needs the admin role", what,
		      owner && *owner ? owner : "another user", doing);
}

int caller_need_admin(const struct caller *c, struct dt_http_response *resp, const char *doing)
{
	if (c->admin)
		return 0;
	dtlog(DTLOG_INFO, "refused %s to '%s': not an admin", doing, c->name);
	dt_http_error(resp, 403, "%s needs the admin role ('%s' is a user; admins: root, the "
		      "cluster user and cluster.yaml's admin_group)", doing, c->name);
	return -1;
}

int user_ids(const char *name, long long *uid, long long *gid)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	if (!name || !*name || getpwnam_r(name, &pw, buf, sizeof(buf), &res) || !res)
		return -1;
	*uid = (long long)pw.pw_uid;
	*gid = (long long)pw.pw_gid;
	return 0;
}

/* ------------------------------------------------------ users elsewhere */

int users_init(struct sched *s)
{
	sqlite3_stmt *st;

	s->users = json_object();
	if (db_exec(s, "CREATE TABLE IF NOT EXISTS users(name TEXT PRIMARY KEY, key TEXT NOT NULL,"
		    " admin INTEGER NOT NULL, added_us INTEGER NOT NULL);") < 0)
		return -1;
	if (sqlite3_prepare_v2(s->db, "SELECT name, key, admin, added_us FROM users", -1, &st,
			       NULL) != SQLITE_OK)
		return -1;
	while (sqlite3_step(st) == SQLITE_ROW)
		json_object_set_new(s->users, (const char *)sqlite3_column_text(st, 0),
				    json_pack("{s:s,s:b,s:I}", "key",
					      (const char *)sqlite3_column_text(st, 1), "admin",
					      sqlite3_column_int(st, 2), "added_us",
					      (json_int_t)sqlite3_column_int64(st, 3)));
	sqlite3_finalize(st);
	return 0;
}

int users_key(void *data, const char *user, unsigned char pub[32])
{
	struct sched *s = data;
	struct strbuf err = STRBUF_INIT;
	int ret = -1;

	pthread_mutex_lock(&s->lock);
	{
		const char *key = json_get_str(json_object_get(s->users, user), "key", NULL);

		if (key && dt_userkey_parse_pub(key, pub, &err) == 0)
			ret = 0;
	}
	pthread_mutex_unlock(&s->lock);
	strbuf_release(&err);
	return ret;
}

static json_t *user_json(const char *name, const json_t *u)
{
	unsigned char pub[DT_ED25519_LEN];
	struct strbuf fp = STRBUF_INIT, err = STRBUF_INIT;
	json_t *o;

	if (dt_userkey_parse_pub(json_get_str(u, "key", ""), pub, &err) == 0)
		dt_userkey_fingerprint(pub, &fp);
	o = json_pack("{s:s,s:s,s:s,s:b,s:o}", "name", name, "key", json_get_str(u, "key", ""),
		      "fingerprint", fp.buf, "admin", json_is_true(json_object_get(u, "admin")),
		      "added_at", json_timestamp(json_get_int(u, "added_us", 0)));
	strbuf_release(&fp);
	strbuf_release(&err);
	return o;
}

static void h_users(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct caller c;
	json_t *arr = json_array(), *u;
	const char *name;
	void *tmp;

	pthread_mutex_lock(&s->lock);
	if (caller_of(s, req, &c, resp) == 0) {
		json_object_foreach_safe(s->users, tmp, name, u)
			json_array_append_new(arr, user_json(name, u));
		dt_http_json(resp, 200, json_pack("{s:O}", "users", arr));
	}
	pthread_mutex_unlock(&s->lock);
	json_decref(arr);
}

/* a user name as Unix has them (and as X-DT-User carries it): [a-z_][a-z0-9_.-]{0,31} */
static int user_name_ok(const char *n)
{
	size_t len = strlen(n);

	if (!len || len > 32 || !(islower((unsigned char)n[0]) || n[0] == '_'))
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!islower((unsigned char)n[i]) && !isdigit((unsigned char)n[i]) &&
		    !strchr("_.-", n[i]))
			return 0;
	return 1;
}

static void h_user_add(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct caller c;
	const char *name = json_get_str(req->json, "name", ""), *key = json_get_str(req->json, "key", "");
	int admin = json_is_true(json_object_get(req->json, "admin"));
	unsigned char pub[DT_ED25519_LEN];
	struct strbuf err = STRBUF_INIT, line = STRBUF_INIT;
	sqlite3_stmt *st;
	long long now = dt_now_us();

	pthread_mutex_lock(&s->lock);
	if (caller_of(s, req, &c, resp) < 0 || caller_need_admin(&c, resp, "adding a user") < 0)
		goto out;
	if (!user_name_ok(name)) {
		dt_http_error(resp, 400, "user name '%s' is not a Unix user name ([a-z_][a-z0-9_.-], "
			      "at most 32)", name);
		goto out;
	}
	if (dt_userkey_parse_pub(key, pub, &err) < 0) {
		dt_http_error(resp, 400, "key of user '%s': %s", name, err.buf);
		goto out;
	}
	dt_userkey_format_pub(pub, &line);   /* stored without its comment */
	if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO users(name, key, admin, added_us) "
			       "VALUES(?, ?, ?, ?)", -1, &st, NULL) != SQLITE_OK) {
		dt_http_error(resp, 500, "the head cannot record the user: %s", sqlite3_errmsg(s->db));
		goto out;
	}
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, line.buf, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(st, 3, admin);
	sqlite3_bind_int64(st, 4, now);
	if (sqlite3_step(st) != SQLITE_DONE) {
		dt_http_error(resp, 500, "the head cannot record the user: %s", sqlite3_errmsg(s->db));
		sqlite3_finalize(st);
		goto out;
	}
	sqlite3_finalize(st);
	json_object_set_new(s->users, name, json_pack("{s:s,s:b,s:I}", "key", line.buf, "admin",
						      admin, "added_us", (json_int_t)now));
	dtlog(DTLOG_INFO, "user '%s' added by '%s'%s", name, c.name, admin ? " (admin)" : "");
	{
		json_t *o = json_pack("{s:o}", "user", user_json(name, json_object_get(s->users,
											  name)));

		head_key_json(s, o);
		dt_http_json(resp, 201, o);
	}
out:
	pthread_mutex_unlock(&s->lock);
	strbuf_release(&err);
	strbuf_release(&line);
}

static void h_user_remove(struct dt_http_request *req, struct dt_http_response *resp, void *data)
{
	struct sched *s = data;
	struct caller c;
	const char *name = dt_http_arg(req, "name");
	sqlite3_stmt *st;

	pthread_mutex_lock(&s->lock);
	if (caller_of(s, req, &c, resp) < 0 || caller_need_admin(&c, resp, "removing a user") < 0)
		goto out;
	if (!json_object_get(s->users, name)) {
		dt_http_error(resp, 404, "no user '%s' added with a key ('dtctl user list')", name);
		goto out;
	}
	if (sqlite3_prepare_v2(s->db, "DELETE FROM users WHERE name=?", -1, &st, NULL) != SQLITE_OK) {
		dt_http_error(resp, 500, "the head cannot remove the user: %s", sqlite3_errmsg(s->db));
		goto out;
	}
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) != SQLITE_DONE) {
		dt_http_error(resp, 500, "the head cannot remove the user: %s", sqlite3_errmsg(s->db));
		sqlite3_finalize(st);
		goto out;
	}
	sqlite3_finalize(st);
	/* from now on its key signs nothing: users_key() no longer finds it */
	json_object_del(s->users, name);
	dtlog(DTLOG_INFO, "user '%s' removed by '%s'", name, c.name);
	dt_http_json(resp, 200, json_pack("{s:s}", "removed", name));
out:
	pthread_mutex_unlock(&s->lock);
}

const struct dt_http_route users_routes[] = {
	{ "GET", DT_PATH_USERS, 0, h_users },
	{ "POST", DT_PATH_USERS, 0, h_user_add },
	{ "DELETE", DT_PATH_USER, 0, h_user_remove },
};
const size_t users_nr_routes = ARRAY_SIZE(users_routes);
