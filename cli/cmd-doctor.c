/*
 * cmd-doctor.c - `dtctl doctor`: a pre-flight check of the whole cluster.
 *
 * One pool (lib/ssh.h, sessions kept open between phases), driven by
 * callbacks:
 *
 *   every node:   facts probe (cluster-ssh.c: versions, GPUs, clock, shared
 *                 dir, interfaces, listening ports)
 *   first node:   writes a random token into the shared dir; when it is
 *                 written every other node reads it back; when all have
 *                 read, the first node removes it
 *   every node:   once all facts are in, tries a TCP connect to every other
 *                 node's addresses (bash /dev/tcp, 2 s) to find interfaces
 *                 that reach all nodes
 *
 * Then one verdict and one fix per check.  Exit 0 when every check passes,
 * 1 otherwise (2 for bad configuration, 130 when interrupted).
 */
#include "auth.h"
#include "builtin.h"
#include "cluster-ssh.h"
#include "head.h"
#include "run-command.h"
#include "slurm.h"
#include "setup.h"
#include "json.h"
#include "log.h"
#include "parse-options.h"
#include "term.h"
#include "units.h"
#include "usage.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RENDEZVOUS_PORT 29500
#define SKEW_LIMIT_S 1.0

struct doc_node {
	int have_facts;
	struct kvlist facts;
	double skew;              /* node clock - head clock, seconds */
	int token;                /* shared token: 1 read back ok, -1 wrong/missing, 0 not tried */
	struct strbuf token_err;
	struct strbuf reach;      /* "ok ADDR" / "fail ADDR" lines */
};

struct doctor {
	struct cluster_config *c;
	struct ssh_pool *p;
	struct doc_node *nodes;
	size_t nr;
	size_t facts_pending, reads_pending;
	char token[33];
	struct strbuf token_path;
	int writer_ok;
	struct strbuf writer_err;
	json_t *checks;
	int failed;
	int json;
};

static struct doctor *D;

static struct doc_node *dnode(struct ssh_node *n)
{
	return &D->nodes[ssh_node_index(n)];
}

/* ------------------------------------------------------------ phases */

static void reach_done(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	(void)arg;
	if (r->error == SSH_OK)
		strbuf_addbuf(&dnode(n)->reach, &r->out);
}

/* All facts are in: every node probes every other node's addresses. */
static void start_reach(void)
{
	for (size_t i = 0; i < D->nr; i++) {
		struct ssh_node *n = ssh_pool_node(D->p, i);
		struct strbuf cmd = STRBUF_INIT;
		int any = 0;

		if (ssh_node_failed(n) || !D->nodes[i].have_facts)
			continue;
		strbuf_addstr(&cmd, "command -v bash >/dev/null 2>&1 || { echo nobash; exit 0; }; "
			      "for a in");
		for (size_t j = 0; j < D->nr; j++) {
			const char *ifs = kvlist_get(&D->nodes[j].facts, "ifaces");
			struct strvec list = STRVEC_INIT;

			if (j == i || !ifs)
				continue;
			strvec_split(&list, ifs, ";");
			for (size_t k = 0; k < list.nr; k++) {
				const char *sp = strchr(list.v[k], ' ');
				struct strbuf addr = STRBUF_INIT;

				if (!sp)
					continue;
				strbuf_addstr(&addr, sp + 1);
				strbuf_setlen(&addr, strcspn(addr.buf, "/"));
				strbuf_addf(&addr, ":%d", ssh_node_target(ssh_pool_node(D->p, j))->port);
				strbuf_addch(&cmd, ' ');
				strbuf_add_shell_quoted(&cmd, addr.buf);
				strbuf_release(&addr);
				any = 1;
			}
			strvec_clear(&list);
		}
		strbuf_addstr(&cmd, "; do h=${a%:*}; p=${a##*:}; "
			      "if timeout 2 bash -c \"exec 3<>/dev/tcp/$h/$p\" 2>/dev/null; "
			      "then echo \"ok $h\"; else echo \"fail $h\"; fi; done");
		if (any)
			ssh_exec(n, cmd.buf, 60000, 0, reach_done, NULL);
		strbuf_release(&cmd);
	}
}

static void token_removed(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	(void)n, (void)r, (void)arg;
}

static void token_read(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	struct doc_node *d = dnode(n);

	(void)arg;
	if (r->error == SSH_OK && r->status == 0 && !strcmp(r->out.buf, D->token)) {
		d->token = 1;
	} else {
		d->token = -1;
		if (r->error == SSH_E_NODE)
			strbuf_addstr(&d->token_err, "unreachable");
		else if (r->status == 0)
			strbuf_addstr(&d->token_err, "a different file is there");
		else
			strbuf_addstr(&d->token_err, "the file written by the first node is missing");
	}
	if (--D->reads_pending == 0) {
		struct strbuf cmd = STRBUF_INIT;

		strbuf_addstr(&cmd, "rm -f ");
		strbuf_add_shell_quoted(&cmd, D->token_path.buf);
		ssh_exec(ssh_pool_node(D->p, 0), cmd.buf, 30000, 0, token_removed, NULL);
		strbuf_release(&cmd);
	}
}

static void token_written(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	struct strbuf cmd = STRBUF_INIT;

	(void)arg;
	if (r->error != SSH_OK || r->status != 0) {
		strbuf_addbuf(&D->writer_err, &r->err);
		strbuf_trim(&D->writer_err);
		if (!D->writer_err.len && r->message)
			strbuf_addstr(&D->writer_err, r->message);
		return;
	}
	D->writer_ok = 1;
	dnode(n)->token = 1;
	strbuf_addstr(&cmd, "cat ");
	strbuf_add_shell_quoted(&cmd, D->token_path.buf);
	for (size_t i = 1; i < D->nr; i++) {
		if (ssh_node_failed(ssh_pool_node(D->p, i)))
			continue;	/* would be dropped without a callback */
		D->reads_pending++;
		ssh_exec(ssh_pool_node(D->p, i), cmd.buf, 30000, 0, token_read, NULL);
	}
	if (!D->reads_pending) {
		struct strbuf rm = STRBUF_INIT;

		strbuf_addstr(&rm, "rm -f ");
		strbuf_add_shell_quoted(&rm, D->token_path.buf);
		ssh_exec(n, rm.buf, 30000, 0, token_removed, NULL);
		strbuf_release(&rm);
	}
	strbuf_release(&cmd);
}

static void got_facts(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	struct doc_node *d = dnode(n);

	(void)arg;
	if (r->error == SSH_OK) {
		double head = dt_now_us() / 1e6;   /* "time" is the probe's last line */
		const char *t;

		facts_parse(&d->facts, r->out.buf);
		d->have_facts = 1;
		t = kvlist_get(&d->facts, "time");
		d->skew = t ? atof(t) - head : 0;
	}
	if (--D->facts_pending == 0)
		start_reach();
}

/* ------------------------------------------------------------ verdicts */

static void verdict(const char *name, int ok, const char *detail, const char *fix)
{
	json_t *o = json_object();

	json_object_set_new(o, "check", json_string(name));
	json_object_set_new(o, "ok", json_boolean(ok));
	json_object_set_new(o, "detail", json_string(detail));
	json_object_set_new(o, "fix", ok || !fix ? json_null() : json_string(fix));
	json_array_append_new(D->checks, o);
	if (!ok)
		D->failed = 1;
	if (D->json)
		return;
	/* details quote what the nodes reported (versions, interfaces, errors) */
	printf("%s %-10s %s\n", ok ? "PASS" : "FAIL", name, term_str(detail));
	if (!ok && fix)
		printf("     %-10s fix: %s\n", "", term_str(fix));
}

/* the closing line, or with --json the whole document of the checks */
static void doctor_report(void)
{
	if (D->json) {
		json_t *o = json_object();

		json_object_set_new(o, "ok", json_boolean(!D->failed));
		json_object_set(o, "checks", D->checks);
		json_doc_print(o);
		json_decref(o);
	} else {
		printf("%s\n", D->failed ? "doctor: some checks FAILED" : "doctor: all checks passed");
	}
}

static const char *node_name(size_t i)
{
	return ssh_node_target(ssh_pool_node(D->p, i))->name;
}

static void check_ssh(void)
{
	struct strbuf detail = STRBUF_INIT, bad = STRBUF_INIT;
	int nbad = 0, changed = 0;

	for (size_t i = 0; i < D->nr; i++) {
		struct ssh_node *n = ssh_pool_node(D->p, i);

		if (!ssh_node_failed(n) || *ssh_node_auth(n))
			continue;
		nbad++;
		changed |= !strcmp(ssh_node_hostkey_state(n), "CHANGED");
		strbuf_addf(&bad, "%s%s", bad.len ? "; " : "", ssh_node_error(n));
	}
	if (!nbad)
		strbuf_addf(&detail, "%s%zu %s reachable, host keys verified, key login works",
			    D->nr == 1 ? "" : "all ", D->nr, plural((long long)D->nr, "node", "nodes"));
	else
		strbuf_addf(&detail, "%d of %zu %s not reachable: %s", nbad, D->nr,
			    plural((long long)D->nr, "node", "nodes"), bad.buf);
	verdict("ssh", !nbad, detail.buf, changed ?
		"a node's host key changed: check it, then 'dtctl hosts forget NODE' and 'dtctl init'" :
		"check the node is up and run 'dtctl init' (it sets up keys and host keys)");
	strbuf_release(&detail);
	strbuf_release(&bad);
}

static void check_clock(void)
{
	struct strbuf detail = STRBUF_INIT, bad = STRBUF_INIT;
	double worst = 0;

	for (size_t i = 0; i < D->nr; i++) {
		if (!D->nodes[i].have_facts)
			continue;
		if (fabs(D->nodes[i].skew) > fabs(worst))
			worst = D->nodes[i].skew;
		if (fabs(D->nodes[i].skew) > SKEW_LIMIT_S)
			strbuf_addf(&bad, "%s%s %+.2f s", bad.len ? ", " : "", node_name(i),
				    D->nodes[i].skew);
	}
	if (bad.len)
		strbuf_addf(&detail, "clocks differ from the head by more than %.1f s: %s",
			    SKEW_LIMIT_S, bad.buf);
	else
		strbuf_addf(&detail, "clocks within %.2f s of the head", fabs(worst));
	verdict("clock", !bad.len, detail.buf,
		"run a time service on every node (chrony or systemd-timesyncd); signed requests "
		"are refused beyond 60 s of skew and logs merge out of order");
	strbuf_release(&detail);
	strbuf_release(&bad);
}

/* The same value of fact `key` on every node, else name the groups. */
static void check_same(const char *key, const char *label, const char *fix)
{
	struct strvec values = STRVEC_INIT;
	struct strbuf detail = STRBUF_INIT;
	int have = 0;

	for (size_t i = 0; i < D->nr; i++) {
		const char *v = kvlist_get(&D->nodes[i].facts, key);

		if (!D->nodes[i].have_facts)
			continue;
		have = 1;
		if (strvec_find(&values, v ? v : "") < 0)
			strvec_push(&values, v ? v : "");
	}
	if (!have) {
		strvec_clear(&values);
		return;
	}
	if (values.nr == 1) {
		strbuf_addf(&detail, "%s %s on every node", label, *values.v[0] ? values.v[0] : "(none)");
	} else {
		strbuf_addf(&detail, "%s differs:", label);
		for (size_t k = 0; k < values.nr; k++) {
			struct strvec names = STRVEC_INIT;
			struct strbuf folded = STRBUF_INIT;

			for (size_t i = 0; i < D->nr; i++) {
				const char *v = kvlist_get(&D->nodes[i].facts, key);

				if (D->nodes[i].have_facts && !strcmp(v ? v : "", values.v[k]))
					strvec_push(&names, node_name(i));
			}
			fold_names(&folded, names.v, names.nr);
			strbuf_addf(&detail, "%s '%s' on %s", k ? ";" : "",
				    *values.v[k] ? values.v[k] : "none", folded.buf);
			strvec_clear(&names);
			strbuf_release(&folded);
		}
	}
	verdict(key, values.nr == 1, detail.buf, fix);
	strvec_clear(&values);
	strbuf_release(&detail);
}

/* Is "name:uid:gid" in the space-separated list? 1 same ids, 0 other ids, -1 absent. */
static int user_in(const char *list, const char *name, unsigned uid, unsigned gid)
{
	size_t len = strlen(name);

	for (const char *p = list; p && *p;) {
		const char *end = strchrnul(p, ' ');
		unsigned u, g;

		if ((size_t)(end - p) > len && !strncmp(p, name, len) && p[len] == ':') {
			if (sscanf(p + len + 1, "%u:%u", &u, &g) != 2)
				return 0;
			return u == uid && g == gid;
		}
		p = *end ? end + 1 : end;
	}
	return -1;
}

/*
 * Team mode (docs/team.md): each job runs as its user on every node, so every
 * account of the head (uid 1000 and up) must be on every node with the same
 * uid and gid, as NFS needs too.  Names the users and nodes that differ.
 */
static void check_users(void)
{
	struct strbuf detail = STRBUF_INIT, bad = STRBUF_INIT;
	struct passwd *pw;
	size_t users = 0, nbad = 0;

	setpwent();
	while ((pw = getpwent())) {
		struct strvec differ = STRVEC_INIT, missing = STRVEC_INIT;
		struct strbuf f = STRBUF_INIT;

		if (pw->pw_uid < 1000 || pw->pw_uid >= 65534)
			continue;
		users++;
		for (size_t i = 0; i < D->nr; i++) {
			int r;

			if (!D->nodes[i].have_facts)
				continue;
			r = user_in(kvlist_get(&D->nodes[i].facts, "users"), pw->pw_name,
				    (unsigned)pw->pw_uid, (unsigned)pw->pw_gid);
			if (r == 0)
				strvec_push(&differ, node_name(i));
			else if (r < 0)
				strvec_push(&missing, node_name(i));
		}
		if (differ.nr) {
			fold_names(&f, differ.v, differ.nr);
			strbuf_addf(&bad, "%s'%s' (uid %u gid %u on the head) has other ids on %s",
				    bad.len ? "; " : "", pw->pw_name, (unsigned)pw->pw_uid,
				    (unsigned)pw->pw_gid, f.buf);
			strbuf_reset(&f);
			nbad++;
		}
		if (missing.nr) {
			fold_names(&f, missing.v, missing.nr);
			strbuf_addf(&bad, "%s'%s' is missing on %s", bad.len ? "; " : "", pw->pw_name,
				    f.buf);
			nbad++;
		}
		strvec_clear(&differ);
		strvec_clear(&missing);
		strbuf_release(&f);
	}
	endpwent();
	if (!nbad)
		strbuf_addf(&detail, "%zu %s of the head with the same uid and gid on every node",
			    users, plural((long long)users, "user", "users"));
	else
		strbuf_addstr(&detail, bad.buf);
	verdict("users", !nbad, detail.buf, "give each user the same uid and gid on the head "
		"and every node (useradd -u UID -g GID, or one directory service such as LDAP): "
		"team mode runs each job as its user everywhere");
	strbuf_release(&detail);
	strbuf_release(&bad);
}

/* A node whose podman does not work (no runtime, rlimits, cgroups) fails container: jobs. */
static void check_container(void)
{
	struct strvec bad = STRVEC_INIT;
	struct strbuf detail = STRBUF_INIT, folded = STRBUF_INIT;

	for (size_t i = 0; i < D->nr; i++) {
		const char *v = kvlist_get(&D->nodes[i].facts, "container");

		if (D->nodes[i].have_facts && v && strstr(v, " not working: ")) {
			strvec_push(&bad, node_name(i));
			if (!detail.len)
				strbuf_addstr(&detail, v);
		}
	}
	if (bad.nr) {
		fold_names(&folded, bad.v, bad.nr);
		strbuf_addf(&folded, ": %s", detail.buf);
		verdict("engine", 0, folded.buf, "run 'podman info' on the node as the cluster user "
			"and fix what it says (docs/containers.md, \"Setting up podman\")");
	}
	strvec_clear(&bad);
	strbuf_release(&detail);
	strbuf_release(&folded);
}

static void check_gpus(void)
{
	struct strbuf detail = STRBUF_INIT, bad = STRBUF_INIT, notes = STRBUF_INIT;

	for (size_t i = 0; i < D->nr; i++) {
		const struct cluster_node *cn = &D->c->nodes[cluster_node_index(ssh_pool_node(D->p, i))];
		const char *seen = kvlist_get(&D->nodes[i].facts, "gpus");

		if (!D->nodes[i].have_facts || !seen)
			continue;
		if (!strcmp(seen, "none")) {
			if (cn->gpus > 0 && !notes.len)
				strbuf_addf(&notes, " (no nvidia-smi on %s: the configured %d GPUs are taken as given)",
					    cn->name, cn->gpus);
			continue;
		}
		if (cn->gpus != GPUS_AUTO && atoi(seen) != cn->gpus)
			strbuf_addf(&bad, "%s%s has %s, cluster.yaml says %d", bad.len ? "; " : "",
				    cn->name, seen, cn->gpus);
	}
	if (bad.len)
		strbuf_addf(&detail, "GPU counts differ from cluster.yaml: %s", bad.buf);
	else
		strbuf_addf(&detail, "GPU counts match cluster.yaml%s", notes.buf);
	verdict("gpus", !bad.len, detail.buf,
		"fix 'gpus:' in cluster.yaml (or 'gpus: auto'), or check the driver with nvidia-smi");
	strbuf_release(&detail);
	strbuf_release(&bad);
	strbuf_release(&notes);
}

static void check_shared(void)
{
	struct strbuf detail = STRBUF_INIT, bad = STRBUF_INIT;
	const char *fix = NULL;

	for (size_t i = 0; i < D->nr; i++) {
		const char *s = kvlist_get(&D->nodes[i].facts, "shared");

		if (!D->nodes[i].have_facts)
			continue;
		if (s && strcmp(s, "ok")) {
			strbuf_addf(&bad, "%s%s: %s", bad.len ? "; " : "", node_name(i),
				    !strcmp(s, "missing") ? "not there" : "not writable");
			fix = "mount the shared dir at the same path on every node, writable by the user";
		}
	}
	if (!D->writer_ok && D->nr) {
		strbuf_addf(&bad, "%s%s cannot write a file there%s%s", bad.len ? "; " : "", node_name(0),
			    D->writer_err.len ? ": " : "", D->writer_err.buf);
		fix = fix ? fix : "make the shared dir writable by the cluster user";
	} else {
		for (size_t i = 1; i < D->nr; i++)
			if (D->nodes[i].token < 0 && D->nodes[i].have_facts) {
				strbuf_addf(&bad, "%s%s does not see the file %s wrote (%s): not the same dir",
					    bad.len ? "; " : "", node_name(i), node_name(0),
					    D->nodes[i].token_err.buf);
				fix = "the shared dir must be ONE file system (NFS) mounted on every node; "
				      "check 'findmnt' on the nodes named";
			}
	}
	if (bad.len)
		strbuf_addf(&detail, "shared dir %s: %s", D->c->shared_dir, bad.buf);
	else
		strbuf_addf(&detail, "shared dir %s mounted, writable and the same on every node",
			    D->c->shared_dir);
	verdict("shared", !bad.len, detail.buf, fix);
	strbuf_release(&detail);
	strbuf_release(&bad);
}

/* node i's "route" fact split: the interface and source address toward the head */
static int node_route(size_t i, struct strbuf *dev, struct strbuf *src)
{
	const char *r = kvlist_get(&D->nodes[i].facts, "route");
	const char *sp = r ? strchr(r, ' ') : NULL;

	if (!sp || !D->nodes[i].have_facts)
		return -1;
	strbuf_add(dev, r, (size_t)(sp - r));
	strbuf_addstr(src, sp + 1);
	return 0;
}

/*
 * The interface jobs use on each node is the one its agent reaches the head
 * on (launch.c): every other node must reach that node's address there, else
 * NCCL/gloo connects to it fail.  -1 with the nodes named in detail and the
 * fix when one is not reached; 0 when all are (or a node did not say).
 */
static int check_routes(struct strbuf *detail, struct strbuf *fix)
{
	struct strbuf dev = STRBUF_INIT, src = STRBUF_INIT, probe = STRBUF_INIT;
	int bad = 0;

	for (size_t i = 0; i < D->nr; i++) {
		struct strbuf from = STRBUF_INIT;

		strbuf_reset(&dev);
		strbuf_reset(&src);
		if (node_route(i, &dev, &src) < 0 || !strcmp(dev.buf, "lo"))
			continue;
		strbuf_reset(&probe);
		strbuf_addf(&probe, "ok %s\n", src.buf);
		for (size_t j = 0; j < D->nr; j++)
			if (j != i && D->nodes[j].have_facts && !strstr(D->nodes[j].reach.buf, probe.buf))
				strbuf_addf(&from, "%s%s", from.len ? ", " : "",
					    ssh_node_target(ssh_pool_node(D->p, j))->name);
		if (from.len) {
			strbuf_addf(detail, "%s%s's interface toward the head (%s, %s) is not reached "
				    "from %s", bad++ ? "; " : "",
				    ssh_node_target(ssh_pool_node(D->p, i))->name, dev.buf, src.buf,
				    from.buf);
		}
		strbuf_release(&from);
	}
	if (bad)
		strbuf_addstr(fix, "jobs use each node's interface toward the head for NCCL, gloo and "
			      "Open MPI: set network.interface in cluster.yaml to one every node "
			      "reaches (or NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME in the job)");
	strbuf_release(&dev);
	strbuf_release(&src);
	strbuf_release(&probe);
	return bad ? -1 : 0;
}

/* "eth0" when every node reaches the head on eth0, else "eth0 on a, b; ib0 on c" */
static const char *routes_summary(void)
{
	static struct strbuf out = STRBUF_INIT;
	struct strvec devs = STRVEC_INIT;
	struct strbuf dev = STRBUF_INIT, src = STRBUF_INIT;

	strbuf_reset(&out);
	for (size_t i = 0; i < D->nr; i++) {
		strbuf_reset(&dev);
		strbuf_reset(&src);
		if (node_route(i, &dev, &src) == 0 && strvec_find(&devs, dev.buf) < 0)
			strvec_push(&devs, dev.buf);
	}
	if (!devs.nr)
		strbuf_addstr(&out, "unknown: no 'ip' on the nodes");
	for (size_t k = 0; k < devs.nr; k++) {
		strbuf_addf(&out, "%s%s", k ? "; " : "", devs.v[k]);
		if (devs.nr > 1) {
			const char *sep = " on ";

			for (size_t i = 0; i < D->nr; i++) {
				strbuf_reset(&dev);
				strbuf_reset(&src);
				if (node_route(i, &dev, &src) == 0 && !strcmp(dev.buf, devs.v[k])) {
					strbuf_addf(&out, "%s%s", sep,
						    ssh_node_target(ssh_pool_node(D->p, i))->name);
					sep = ", ";
				}
			}
		}
	}
	strvec_clear(&devs);
	strbuf_release(&dev);
	strbuf_release(&src);
	return out.buf;
}

/* Interfaces: a name present on every node whose addresses all other nodes reach. */
static void check_network(void)
{
	struct strvec names = STRVEC_INIT, good = STRVEC_INIT;
	struct strbuf detail = STRBUF_INIT, fix = STRBUF_INIT;
	int nodes_with_facts = 0, nobash = 0;

	for (size_t i = 0; i < D->nr; i++) {
		const char *ifs = kvlist_get(&D->nodes[i].facts, "ifaces");
		struct strvec list = STRVEC_INIT;

		if (!D->nodes[i].have_facts)
			continue;
		nodes_with_facts++;
		nobash |= strstr(D->nodes[i].reach.buf, "nobash") != NULL;
		strvec_split(&list, ifs ? ifs : "", ";");
		for (size_t k = 0; k < list.nr; k++) {
			char *nm = xstrndup(list.v[k], strcspn(list.v[k], " "));

			if (strvec_find(&names, nm) < 0)
				strvec_push(&names, nm);
			free(nm);
		}
		strvec_clear(&list);
	}
	for (size_t k = 0; k < names.nr; k++) {
		int ok = 1;

		for (size_t i = 0; i < D->nr && ok; i++) {
			const char *ifs = kvlist_get(&D->nodes[i].facts, "ifaces");
			struct strvec list = STRVEC_INIT;
			int has = 0;

			if (!D->nodes[i].have_facts)
				continue;
			strvec_split(&list, ifs ? ifs : "", ";");
			for (size_t m = 0; m < list.nr; m++) {
				struct strbuf probe = STRBUF_INIT, addr = STRBUF_INIT;
				const char *sp = strchr(list.v[m], ' ');

				if (!sp || strncmp(list.v[m], names.v[k], strlen(names.v[k])) ||
				    list.v[m][strlen(names.v[k])] != ' ')
					continue;
				has = 1;
				strbuf_addstr(&addr, sp + 1);
				strbuf_setlen(&addr, strcspn(addr.buf, "/"));
				/* every other node must have reached this address */
				for (size_t j = 0; j < D->nr; j++) {
					if (j == i || !D->nodes[j].have_facts)
						continue;
					strbuf_reset(&probe);
					strbuf_addf(&probe, "ok %s\n", addr.buf);
					if (!strstr(D->nodes[j].reach.buf, probe.buf))
						ok = 0;
				}
				strbuf_release(&probe);
				strbuf_release(&addr);
			}
			if (!has)
				ok = 0;
			strvec_clear(&list);
		}
		if (ok)
			strvec_push(&good, names.v[k]);
	}
	if (nodes_with_facts >= 2 && !nobash && check_routes(&detail, &fix) < 0) {
		verdict("network", 0, detail.buf, fix.buf);
	} else if (nodes_with_facts < 2) {
		strbuf_addstr(&detail, "fewer than two nodes answered: nothing to check between nodes");
		verdict("network", 1, detail.buf, NULL);
	} else if (good.nr) {
		strbuf_addf(&detail, "interface %s reaches every node from every node", good.v[0]);
		for (size_t k = 1; k < good.nr; k++)
			strbuf_addf(&detail, "%s%s", k == 1 ? " (also: " : ", ", good.v[k]);
		if (good.nr > 1)
			strbuf_addch(&detail, ')');
		strbuf_addf(&detail, "; jobs use each node's interface toward the head (%s), which "
			    "every peer reaches", routes_summary());
		verdict("network", 1, detail.buf, NULL);
	} else {
		strbuf_addstr(&detail, nobash ?
			      "cannot test (no bash on a node for /dev/tcp probes)" :
			      "no interface name reaches every node from every node");
		strbuf_addstr(&fix, "connect the nodes on one network with the same interface name, "
			      "or set network.interface / NCCL_SOCKET_IFNAME per node");
		verdict("network", 0, detail.buf, fix.buf);
	}
	strvec_clear(&names);
	strvec_clear(&good);
	strbuf_release(&detail);
	strbuf_release(&fix);
}

static int port_listening(const char *ports, int port)
{
	char hex[16];
	const char *p = ports;

	snprintf(hex, sizeof(hex), "%04X", port);
	while (p && *p) {
		while (*p == ' ')
			p++;
		if (!strncasecmp(p, hex, 4) && (p[4] == ' ' || !p[4]))
			return 1;
		p = strchr(p, ' ');
	}
	return 0;
}

static void check_port(void)
{
	struct strbuf detail = STRBUF_INIT;
	const char *ports;
	int port = RENDEZVOUS_PORT;

	if (!D->nr || !D->nodes[0].have_facts)
		return;
	ports = kvlist_get(&D->nodes[0].facts, "ports");
	while (port < RENDEZVOUS_PORT + 500 && port_listening(ports, port))
		port++;
	if (port == RENDEZVOUS_PORT)
		strbuf_addf(&detail, "rendezvous port %d is free on %s (MASTER_ADDR)", port, node_name(0));
	else
		strbuf_addf(&detail, "port %d is taken on %s; %d is free", RENDEZVOUS_PORT,
			    node_name(0), port);
	verdict("port", port < RENDEZVOUS_PORT + 500, detail.buf,
		"free a port for the rendezvous (MASTER_PORT) on the first node");
	strbuf_release(&detail);
}

/* ----------------------------------------------------------------- main */

/* ------------------------------------------------------------ slurm */

/* argv's output (stdout and stderr), trimmed, into out, its stdin fd `in` (0: none);
 * its exit code (-1: not run) */
static int slurm_capture_in(const char **argv, int in, struct strbuf *out)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	int code;

	strvec_pushv(&cp.args, argv);
	if (in > 0)
		cp.in = in;
	else
		cp.no_stdin = 1;
	cp.err_to_out = 1;
	strbuf_reset(out);
	code = capture_command(&cp, out, 1 << 20);
	child_process_clear(&cp);
	strbuf_trim(out);
	return code;
}

static int slurm_capture(const char **argv, struct strbuf *out)
{
	return slurm_capture_in(argv, 0, out);
}

/*
 * The value of `key` in slurm.conf ($SLURM_CONF, else /etc/slurm/slurm.conf;
 * keys are case-insensitive) into val; empty when unset or unreadable.
 */
static void slurm_conf_value(const char *key, struct strbuf *val)
{
	const char *conf = getenv_nonempty("SLURM_CONF");
	struct strbuf text = STRBUF_INIT;
	size_t n = strlen(key);

	strbuf_reset(val);
	if (strbuf_read_file(&text, conf ? conf : "/etc/slurm/slurm.conf", 1 << 20) < 0) {
		strbuf_release(&text);
		return;
	}
	for (const char *p = text.buf; *p;) {
		size_t l = strcspn(p, "\n");
		const char *q = p + strspn(p, " \t");

		if (!strncasecmp(q, key, n) && q[n + strspn(q + n, " \t")] == '=') {
			q += n + strspn(q + n, " \t") + 1;
			q += strspn(q, " \t");
			strbuf_reset(val);
			strbuf_add(val, q, strcspn(q, " \t\n#"));
		}
		p += l + (p[l] == '\n');
	}
	strbuf_release(&text);
}

/*
 * munge: Slurm signs every request with a munge credential, so a munged
 * that is down (or keyed differently) looks like an unreachable slurmctld.
 * A credential made (munge -n) and read back (unmunge) through the socket
 * slurm.conf names tells the two apart.
 */
static int check_munge(void)
{
	struct strbuf sock = STRBUF_INIT, opt = STRBUF_INIT, cred = STRBUF_INIT;
	struct strbuf out = STRBUF_INIT, detail = STRBUF_INIT;
	const char *argv[4] = { NULL };
	int code, fds[2] = { -1, -1 };

	slurm_conf_value("AuthType", &out);
	if (out.len && strcmp(out.buf, "auth/munge")) {
		strbuf_addf(&detail, "not used: AuthType=%s", out.buf);
		verdict("munge", 1, detail.buf, NULL);
		strbuf_release(&out);
		strbuf_release(&detail);
		return 0;
	}
	strbuf_reset(&out);
	/* AuthInfo=socket=PATH[,ttl=...] */
	slurm_conf_value("AuthInfo", &detail);
	for (const char *v = detail.buf; (v = strstr(v, "socket=")); v++)
		if (v == detail.buf || v[-1] == ',') {
			strbuf_add(&sock, v + 7, strcspn(v + 7, ","));
			break;
		}
	strbuf_reset(&detail);
	if (sock.len)
		strbuf_addf(&opt, "--socket=%s", sock.buf);
	argv[0] = "munge";
	argv[1] = "-n";
	argv[2] = sock.len ? opt.buf : NULL;
	code = slurm_capture(argv, &cred);
	if (!code && pipe(fds) == 0) {
		strbuf_addch(&cred, '\n');
		/* a credential is far below a pipe's buffer: no reader needed yet */
		code = write(fds[1], cred.buf, cred.len) == (ssize_t)cred.len ? 0 : -1;
		close(fds[1]);
		argv[0] = "unmunge";
		argv[1] = sock.len ? opt.buf : NULL;
		argv[2] = NULL;
		if (!code)
			code = slurm_capture_in(argv, fds[0], &out);
		close(fds[0]);
		code = code || !strstr(out.buf, "STATUS:") || !strstr(out.buf, "Success");
		strbuf_addf(&detail, "munged at %s: ", sock.len ? sock.buf : "its default socket");
		if (!code)
			strbuf_addstr(&detail, "a credential made and read back");
		else
			strbuf_addf(&detail, "unmunge: %s", out.len ? out.buf : "no answer");
	} else {
		strbuf_addf(&detail, "munge -n%s%s: %s", sock.len ? " " : "", opt.buf,
			    cred.len ? cred.buf : code ? "failed" : strerror(errno));
		code = 1;
	}
	verdict("munge", !code, detail.buf, "start munged with the cluster's key (systemctl start "
		"munge; the same /etc/munge/munge.key on every node): Slurm authenticates every "
		"request with it");
	strbuf_release(&sock);
	strbuf_release(&opt);
	strbuf_release(&cred);
	strbuf_release(&out);
	strbuf_release(&detail);
	return code ? -1 : 0;
}

/* how many lines of out are exactly want */
static size_t count_lines(const char *out, const char *want)
{
	size_t n = 0, len = strlen(want);

	for (const char *p = out; *p;) {
		size_t l = strcspn(p, "\n");

		n += l == len && !strncmp(p, want, len);
		p += l + (p[l] == '\n');
	}
	return n;
}

/*
 * `dtctl doctor --slurm` (or doctor inside an allocation, or on a `backend:
 * slurm` cluster): the Slurm side a dtctl on Slurm depends on, with Slurm's
 * own clients (docs/slurm.md): munge makes and reads a credential, slurmctld
 * answers, a partition is up (cluster.yaml's partition: when `partition` is
 * set) and its GRES, PMIx for MPI under
 * srun, the shared dir seen by the compute nodes (a token written here,
 * read there through srun: every allocated node inside an allocation, one
 * node otherwise) and dtagent beside this dtctl running there in the same
 * version.  slurmctld unreachable: the other checks are not tried.
 */
static int doctor_slurm(int json, const char *partition)
{
	struct doctor d;
	struct strbuf out = STRBUF_INIT, detail = STRBUF_INIT, bin = STRBUF_INIT, tok = STRBUF_INIT;
	struct slurm_alloc al;
	int in_alloc, code, up;

	memset(&d, 0, sizeof(d));
	D = &d;
	d.json = json;
	d.checks = json_array();
	if (check_munge() < 0) {
		/* every request to slurmctld carries a credential: none can be asked */
		up = 0;
		verdict("slurmctld", 0, "not asked: Slurm's clients need munge, which failed", NULL);
	} else {
		code = slurm_capture((const char *[]){ "scontrol", "ping", NULL }, &out);
		up = code == 0 && strstr(out.buf, " is UP");
		verdict("slurmctld", up, out.len ? out.buf : "no answer",
			"start slurmctld on the controller (systemctl start slurmctld) and check "
			"that SlurmctldHost in slurm.conf ($SLURM_CONF) names it");
	}
	if (up) {
		struct strbuf lines = STRBUF_INIT;

		strbuf_reset(&detail);
		slurm_capture((const char *[]){ "scontrol", "--version", NULL }, &out);
		strbuf_addf(&detail, "%s, dtctl %s", out.buf, DT_VERSION);
		verdict("versions", code == 0, detail.buf, NULL);
		code = slurm_capture((const char *[]){ "sinfo", "--noheader", "--format=%P %a %D %t %G",
						      NULL }, &out);
		/* cluster.yaml's partition: its lines only ("debug* up 2 idle gpu:4") */
		for (const char *p = out.buf; code == 0 && *p;) {
			size_t l = strcspn(p, "\n"), w = strcspn(p, " *\n");

			if (!partition || (w == strlen(partition) && !strncmp(p, partition, w)))
				strbuf_addf(&lines, "%.*s\n", (int)l, p);
			p += l + (p[l] == '\n');
		}
		strbuf_trim(&lines);
		strbuf_reset(&detail);
		if (code == 0 && partition && !lines.len) {
			strbuf_addf(&detail, "Slurm has no partition '%s' (%s:%d:%d); sinfo: %s",
				    partition, the_cluster.file ? the_cluster.file : "cluster.yaml",
				    the_cluster.config.slurm.partition_pos.line,
				    the_cluster.config.slurm.partition_pos.col,
				    out.len ? out.buf : "no partition");
		} else {
			strbuf_addstr(&detail, code == 0 ? lines.buf : out.buf);
			if (!detail.len)
				strbuf_addstr(&detail, "no partition");
		}
		verdict("partition", code == 0 && (strstr(lines.buf, " up ") != NULL), detail.buf,
			partition ? "set partition: in cluster.yaml to an up partition sinfo lists, or "
			"ask the admins to bring it up (scontrol update PartitionName=... State=UP)" :
			"define a partition (PartitionName=... State=UP) with nodes in "
			"slurm.conf, or ask the admins which one to use (sinfo)");
		strbuf_reset(&out);
		strbuf_add(&out, lines.buf, lines.len);
		strbuf_release(&lines);
		/* the GRES column of each partition line */
		strbuf_reset(&detail);
		for (const char *p = out.buf; code == 0 && *p;) {
			size_t l = strcspn(p, "\n");
			const char *g = p + l;

			while (g > p && g[-1] != ' ')
				g--;
			if (g > p && !strncmp(g, "gpu:", 4))
				strbuf_addf(&detail, "%s%.*s (%.*s)", detail.len ? ", " : "",
					    (int)(p + l - g), g, (int)strcspn(p, " "), p);
			p += l + (p[l] == '\n');
		}
		verdict("gres", code == 0, detail.len ? detail.buf :
			"no GPU GRES on any partition: CPU jobs only (GresTypes=gpu and Gres=gpu:N for "
			"GPU nodes)", NULL);
		code = slurm_capture((const char *[]){ "srun", "--mpi=list", NULL }, &out);
		strbuf_reset(&detail);
		if (strstr(out.buf, "versions available: "))
			strbuf_addf(&detail, "srun --mpi=pmix (%s)", strstr(out.buf, "versions available: ") +
				    strlen("versions available: "));
		verdict("pmix", code == 0 && strstr(out.buf, "pmix"), detail.len ? detail.buf :
			out.len ? out.buf : "srun --mpi=list: nothing",
			"install Slurm's PMIx plugin (Debian: slurm-wlm-basic-plugins with libpmix) for "
			"'--launcher mpi'; the agent launcher does not need it");
	}
	in_alloc = !d.failed && slurm_alloc_load(&al, &detail) == 0;
	strbuf_reset(&detail);
	if (!d.failed && the_cluster.shared_dir) {
		unsigned char rnd[8];
		struct strvec argv = STRVEC_INIT;
		char n[16];
		int fd;

		snprintf(n, sizeof(n), "%zu", in_alloc ? al.nodes.nr : (size_t)1);
		if (dt_random_bytes(rnd, sizeof(rnd)) < 0)
			die_errno("cannot get random bytes (getrandom)");
		strbuf_addf(&tok, "%s/.dtctl-doctor-", the_cluster.shared_dir);
		for (size_t i = 0; i < sizeof(rnd); i++)
			strbuf_addf(&tok, "%02x", rnd[i]);
		fd = open(tok.buf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd < 0 || write(fd, "dtctl-doctor\n", 13) != 13 || close(fd) < 0) {
			strbuf_addf(&detail, "cannot write '%s' here: %s", tok.buf, strerror(errno));
			verdict("shared dir", 0, detail.buf, "make the shared dir writable here");
		} else {
			strvec_pushv(&argv, (const char *[]){ "srun", "--overlap", "--nodes", n, "--ntasks",
							      n, "--ntasks-per-node=1", "--export=ALL",
							      "--immediate=30", "/bin/cat", tok.buf, NULL });
			code = slurm_capture(argv.v, &out);
			strbuf_addf(&detail, "%s on %s node%s%s%s", the_cluster.shared_dir,
				    n, strcmp(n, "1") ? "s" : "", in_alloc ? " of job " : "",
				    in_alloc ? al.job_id : "");
			if (code || count_lines(out.buf, "dtctl-doctor") != strtoul(n, NULL, 10))
				strbuf_addf(&detail, ": %s", out.len ? out.buf : "not read");
			verdict("shared dir", !code && count_lines(out.buf, "dtctl-doctor") ==
				strtoul(n, NULL, 10),
				detail.buf, "mount the shared dir at the same path on every compute node "
				"(or set $DTCTL_SHARED_DIR to one that is)");
			unlink(tok.buf);
			/* dtagent beside this dtctl, as the nodes see it (no SSH copy under Slurm) */
			dt_self_dir(&bin);
			strbuf_addstr(&bin, "/dtagent");
			strvec_pop(&argv);
			strvec_pop(&argv);
			strvec_push(&argv, bin.buf);
			strvec_push(&argv, "--version");
			code = slurm_capture(argv.v, &out);
			strbuf_reset(&tok);
			strbuf_addf(&tok, "dtagent %s", DT_VERSION);
			strbuf_reset(&detail);
			code = code || count_lines(out.buf, tok.buf) != strtoul(n, NULL, 10);
			if (!code)
				strbuf_addf(&detail, "%s on %s node%s: %s", bin.buf, n, strcmp(n, "1") ? "s" : "",
					    tok.buf);
			else
				strbuf_addf(&detail, "%s: %s", bin.buf, out.len ? out.buf : "no output");
			verdict("dtagent", !code, detail.buf,
				"install dtctl where every compute node sees it at the same path "
				"(a shared prefix: make install PREFIX=/shared/dtctl)");
		}
		strvec_clear(&argv);
	} else if (!d.failed) {
		verdict("shared dir", 0, "no shared dir named", "set $DTCTL_SHARED_DIR (or shared_dir: "
			"in the cluster file) to the directory every compute node mounts");
	}
	if (in_alloc)
		slurm_alloc_release(&al);
	doctor_report();
	json_decref(d.checks);
	strbuf_release(&out);
	strbuf_release(&detail);
	strbuf_release(&bin);
	strbuf_release(&tok);
	return d.failed ? DT_EXIT_FAIL : 0;
}

int cmd_doctor(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl doctor [--nodes SPEC] [--json]",
		"dtctl doctor --fabric [--quick] [--nodes SPEC] [--json]",
		"dtctl doctor --slurm [--json]",
		NULL,
	};
	const char *nodes = NULL;
	int json = 0, rc, fabric = 0, quick = 0, slurm = 0;
	struct option opts[] = {
		OPT_STRING(0, "nodes", &nodes, "spec", "only these nodes (host-range syntax)"),
		OPT_BOOL(0, "json", &json, "print the checks as JSON"),
		OPT_BOOL(0, "fabric", &fabric, "instead: the fabric test through dtsched (all-reduce, "
			 "pairwise latency and bandwidth against baselines; UP nodes by default)"),
		OPT_BOOL(0, "quick", &quick, "with --fabric: connectivity and latency only"),
		OPT_BOOL(0, "slurm", &slurm, "instead: the Slurm side (munge, slurmctld, partition, GRES, "
			 "PMIx, shared dir and dtagent on the compute nodes; default inside an "
			 "allocation and on a backend: slurm cluster)"),
		OPT_END(),
	};
	struct cluster_config *c = &the_cluster.config;
	struct ssh_pool_opts po;
	struct doctor d;
	struct strbuf cmd = STRBUF_INIT;
	unsigned char rnd[16];
	size_t *idx = NULL, nr = 0;

	argv++;
	argc = parse_options(argc - 1, argv, opts, usage, 0);
	if (argc || (quick && !fabric)) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (fabric)
		return doctor_fabric(nodes, quick, json);
	/* inside an allocation with no cluster named, or a `backend: slurm` cluster (no
	 * nodes of its own): the Slurm checks (slurm.h), of its partition: if named */
	if (the_cluster.file && c->backend == BACKEND_SLURM)
		return doctor_slurm(json, c->slurm.partition);
	if (slurm || (!the_cluster.file && getenv_nonempty("SLURM_JOB_ID")))
		return doctor_slurm(json, NULL);
	if ((rc = cluster_setup(NEED_CLUSTER)))
		return rc;
	if (cluster_select(c, nodes, &idx, &nr) < 0) {
		free(idx);
		return DT_EXIT_USAGE;
	}
	memset(&d, 0, sizeof(d));
	D = &d;
	d.c = c;
	d.nr = nr;
	d.json = json;
	d.checks = json_array();
	strbuf_init(&d.token_path, 0);
	strbuf_init(&d.writer_err, 0);
	d.nodes = xcalloc(nr, sizeof(*d.nodes));
	for (size_t i = 0; i < nr; i++) {
		strbuf_init(&d.nodes[i].token_err, 0);
		strbuf_init(&d.nodes[i].reach, 0);
	}
	if (dt_random_bytes(rnd, sizeof(rnd)) < 0)
		die_errno("cannot get random bytes (getrandom)");
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(d.token + 2 * i, 3, "%02x", rnd[i]);
	strbuf_addf(&d.token_path, "%s/.dtctl-doctor-%s", c->shared_dir, d.token);

	cluster_pool_opts(&po, c);
	po.keep_sessions = 1;
	po.on_tick = json ? NULL : progress_tick;
	ssh_catch_signals();
	d.p = ssh_pool_new(&po);
	cluster_pool_add(d.p, c, idx, nr);
	d.facts_pending = nr;
	for (size_t i = 0; i < nr; i++) {
		struct strbuf head = STRBUF_INIT;
		const struct cluster_node *cn = &c->nodes[idx[i]];

		/* the facts, and the route the node's agent takes to the head: the
		 * interface its jobs use (docs/run.md, "Network interface") */
		strbuf_reset(&cmd);
		facts_command(&cmd, c->shared_dir);
		cluster_head_address(c, cn, !strcmp(cn->host, "local"), &head);
		strbuf_addstr(&cmd, "H=");
		strbuf_add_shell_quoted(&cmd, head.buf);
		strbuf_addstr(&cmd, "\nip -o route get \"$H\" 2>/dev/null | sed -n "
			      "'s/.* dev \\([^ ]*\\).* src \\([^ ]*\\).*/route=\\1 \\2/p' | head -n 1\n");
		if (c->team)   /* team mode: the node's accounts, for check_users() */
			strbuf_addstr(&cmd, "echo \"users=$(getent passwd | awk -F: "
				      "'$3 >= 1000 && $3 < 65534 { printf \"%s:%s:%s \", $1, $3, $4 }')\"\n");
		ssh_exec(ssh_pool_node(d.p, i), cmd.buf, 60000, 0, got_facts, NULL);
		strbuf_release(&head);
	}
	strbuf_reset(&cmd);
	strbuf_addf(&cmd, "umask 022; printf %%s %s > ", d.token);
	strbuf_add_shell_quoted(&cmd, d.token_path.buf);
	if (nr)
		ssh_exec(ssh_pool_node(d.p, 0), cmd.buf, 30000, 0, token_written, NULL);
	rc = ssh_pool_run(d.p);
	progress_clear();
	if (rc < 0) {
		error("interrupted");
	} else {
		check_ssh();
		check_clock();
		check_same("os", "OS", "install the same OS release on every node");
		check_same("glibc", "glibc", "install the same OS release (glibc) on every node");
		check_same("driver", "GPU driver", "install the same NVIDIA driver on every node");
		check_same("cuda", "CUDA", "install the same CUDA toolkit everywhere (check PATH and ~/.dtctl/env.sh)");
		check_same("nccl", "NCCL", "install the same NCCL version on every node");
		check_same("mpi", "Open MPI", "install the same Open MPI everywhere; check PATH and "
			   "~/.dtctl/env.sh on the odd nodes (which mpirun)");
		check_same("container", "container engine", "install the same podman on every node "
			   "for jobs with container: (docs/containers.md)");
		if (c->team)
			check_users();
		check_container();
		check_gpus();
		check_shared();
		check_network();
		check_port();
		doctor_report();
	}
	ssh_pool_free(d.p);
	for (size_t i = 0; i < nr; i++) {
		kvlist_release(&d.nodes[i].facts);
		strbuf_release(&d.nodes[i].token_err);
		strbuf_release(&d.nodes[i].reach);
	}
	free(d.nodes);
	json_decref(d.checks);
	strbuf_release(&d.token_path);
	strbuf_release(&d.writer_err);
	strbuf_release(&cmd);
	free(idx);
	if (rc < 0)
		return DT_EXIT_INTR;
	return d.failed ? DT_EXIT_FAIL : 0;
}
