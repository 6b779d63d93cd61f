/*
 * users.c - the caller of a request and the access rules (see users.h).
 *
 * Names come from the head's user database (getpwuid_r, getgrnam_r,
 * getgrouplist), as Slurm and munge take them: a uid is a user on the head.
 */
#include "users.h"
#include "log.h"
#include "sched-int.h"
#include "strbuf.h"
#include "usage.h"

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
