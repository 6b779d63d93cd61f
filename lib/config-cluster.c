/*
 * config-cluster.c - the schema of cluster.yaml (config.h's struct
 * cluster_config): its keys, the nodes: list with host ranges, the checks
 * across keys (unique node names and host:port pairs, dead_after longer than
 * the heartbeat), defaults and the JSON of `dtctl validate --json`.
 * The YAML tree and the getters are config-yaml.c's (config-int.h).
 */
#include "config-int.h"
#include "notify-spec.h"
#include "dthome.h"
#include "hostrange.h"
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* setup.template: builtin:setup-node.sh is the template shipped with dtctl */
#define BUILTIN_PREFIX "builtin:"

/* ------------------------------------------------------------- cluster */

static const char *const host_key_policies[] = { "tofu", "strict", NULL };
static const char *const install_modes[] = { "local", "shared", NULL };
static const char *const job_files_modes[] = { "group", "world", NULL };

#define PORT_EXPECTED "a port number (1-65535)"

static int ssh_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct cluster_config *cc = data;
	int pol;

	if (!strcmp(key, "port"))
		return get_int(c, v, path, 1, 65535, PORT_EXPECTED, &cc->ssh.port);
	if (!strcmp(key, "fanout"))
		return get_int(c, v, path, 1, 100000, "a positive integer", &cc->ssh.fanout);
	if (!strcmp(key, "connect_timeout"))
		return get_duration(c, v, path, &cc->ssh.connect_timeout_ms);
	if (!strcmp(key, "command_timeout"))
		return get_duration(c, v, path, &cc->ssh.command_timeout_ms);
	if (!strcmp(key, "host_key_policy")) {
		if (get_enum(c, v, path, host_key_policies, &pol) < 0)
			return -1;
		cc->ssh.host_key_policy = pol ? HOST_KEY_STRICT : HOST_KEY_TOFU;
		return 0;
	}
	if (get_safe_path(c, v, path, 1, &cc->ssh.identity) < 0)   /* identity */
		return -1;
	{
		char *p = resolve_path(c, cc->ssh.identity);

		free(cc->ssh.identity);
		cc->ssh.identity = p;
	}
	return 0;
}

static int setup_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct cluster_config *cc = data;

	if (!strcmp(key, "template")) {
		char *p;

		if (get_str(c, v, path, &cc->setup.template) < 0)
			return -1;
		cc->setup.template_pos.line = v->line;
		cc->setup.template_pos.col = v->col;
		if (starts_with(cc->setup.template, BUILTIN_PREFIX))
			return 0;
		p = resolve_path(c, cc->setup.template);
		free(cc->setup.template);
		cc->setup.template = p;
		return 0;
	}
	if (!strcmp(key, "timeout"))
		return get_duration(c, v, path, &cc->setup.timeout_ms);
	if (!strcmp(key, "env"))
		return get_kvmap(c, v, path, &cc->setup.env, 1);
	return get_kvmap(c, v, path, &cc->setup.vars, 0);   /* vars */
}

static int agent_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct cluster_config *cc = data;

	if (!strcmp(key, "port"))
		return get_int(c, v, path, 1, 65535, PORT_EXPECTED, &cc->agent.port);
	if (!strcmp(key, "heartbeat"))
		return get_duration(c, v, path, &cc->agent.heartbeat_ms);
	if (!strcmp(key, "fake_health")) {
		/* test only (docs/config.md): the fake GPUs' faults, a file on each node */
		if (get_str(c, v, path, &cc->agent.fake_health) < 0)
			return -1;
		if (cc->agent.fake_health[0] != '/' || strchr(cc->agent.fake_health, '\n'))
			return bad_value(c, v, path, "an absolute path on the nodes");
		return 0;
	}
	return get_duration(c, v, path, &cc->agent.dead_after_ms);   /* dead_after */
}

static int head_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct cluster_config *cc = data;

	if (!strcmp(key, "port"))
		return get_int(c, v, path, 1, 65535, PORT_EXPECTED, &cc->head.port);
	if (!strcmp(key, "dashboard_port"))   /* 0: a free port */
		return get_int(c, v, path, 0, 65535, "a port from 1 to 65535, or 0 for a free one",
			       &cc->head.dashboard_port);
	if (!strcmp(key, "dashboard_address"))
		return get_host_name(c, v, path, &cc->head.dashboard_address);
	if (!strcmp(key, "socket")) {
		if (get_safe_path(c, v, path, 0, &cc->head.socket) < 0)
			return -1;
		/* sockaddr_un's 108 bytes */
		if (cc->head.socket[0] != '/' || strlen(cc->head.socket) > 100)
			return bad_value(c, v, path, "an absolute path of at most 100 bytes");
		return 0;
	}
	return get_host_name(c, v, path, &cc->head.address);   /* address */
}

static int health_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
		      void *data)
{
	struct cluster_config *cc = data;

	if (!strcmp(key, "max_failures"))
		return get_int(c, v, path, 0, 1000000, "an integer from 0 (never drain) to 1000000",
			       &cc->health.max_failures);
	if (!strcmp(key, "fabric_fraction")) {
		if (get_double(c, v, path, &cc->health.fabric_fraction) < 0)
			return -1;
		if (!(cc->health.fabric_fraction > 0 && cc->health.fabric_fraction <= 1))
			return bad_value(c, v, path, "a number in (0, 1], e.g. 0.5");
		return 0;
	}
	if (get_duration(c, v, path, &cc->health.failure_window_ms) < 0)   /* failure_window */
		return -1;
	if (cc->health.failure_window_ms <= 0)
		return bad_value(c, v, path, "a duration longer than 0, e.g. 1h");
	return 0;
}

static int network_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
		       void *data)
{
	struct cluster_config *cc = data;

	return get_str(c, v, path, &cc->network.interface);
}

static const char *const orted_launches[] = { "agent", "ssh", NULL };

static int mpi_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct cluster_config *cc = data;

	(void)key;   /* orted_launch, the only key */
	return get_enum(c, v, path, orted_launches, &cc->mpi.orted_ssh);
}

/* ------------------------------------------------- backend: slurm */

static const char *const backends[] = { "agents", "slurm", NULL };

/*
 * sbatch options dtctl sets itself from the job and the config (the
 * scheduler's sbatch argv, scheduler/slurm.c): `slurm:` may not set them, and
 * the message says where the value comes from instead.
 */
static const struct { const char *name, *from; } slurm_reserved[] = {
	{ "nodes", "the job's nodes:" }, { "ntasks", "the job (one agent per node)" },
	{ "ntasks-per-node", "the job (one agent per node)" },
	{ "gres", "the job's gpus_per_node:" }, { "gpus", "the job's gpus_per_node:" },
	{ "gpus-per-node", "the job's gpus_per_node:" },
	{ "gpus-per-task", "the job's gpus_per_node:" },
	{ "cpus-per-task", "the job's procs_per_node:" }, { "time", "the job's timeout:" },
	{ "job-name", "the job's name:" }, { "output", "dtctl (the job dir)" },
	{ "error", "dtctl (the job dir)" }, { "input", "dtctl" },
	{ "chdir", "dtctl (the job dir)" }, { "export", "dtctl" },
	{ "export-file", "dtctl" }, { "wrap", "dtctl" }, { "parsable", "dtctl" },
	{ "array", "dtctl" }, { "requeue", "dtctl (always --requeue)" },
	{ "no-requeue", "dtctl (always --requeue)" }, { "signal", "dtctl" },
	{ "wait", "dtctl" }, { "exclusive", "dtctl (always --exclusive)" },
	{ "nodelist", "the job's include_nodes:" }, { "exclude", "the job's exclude_nodes:" }, { "hold", "dtctl" }, { "test-only", "dtctl" },
	{ "partition", "the top-level key 'partition:'" },
	{ "account", "the top-level key 'account:'" }, { "qos", "the top-level key 'qos:'" },
};

/* Slurm's names of partitions, accounts and QOS: no '-' first (never an option) */
static int slurm_name_ok(const char *s)
{
	return *s && *s != '-' && name_chars_ok(s, 64, "._-");
}

static int get_slurm_name(struct ctx *c, struct ynode *v, const char *path, char **out,
			  struct config_pos *pos)
{
	if (get_str(c, v, path, out) < 0)
		return -1;
	if (!slurm_name_ok(*out))
		return bad_value(c, v, path, "a Slurm name of at most 64 letters, digits, '.', "
				 "'-' and '_' (not starting with '-')");
	pos->line = v->line;
	pos->col = v->col;
	return 0;
}

/*
 * slurm: {signal: ...}: the signal of Slurm's warning, USR1 or USR2 (SIG
 * optional): the ones the batch shell (dtctl slurm-agents) passes on to the
 * ranks rather than to the agents' step.
 */
static int slurm_warn_signal(struct ctx *c, struct ynode *v, const char *path,
			     struct cluster_config *cc)
{
	static const char *const names[] = { "USR1", "USR2", "SIGUSR1", "SIGUSR2", NULL };
	int i;

	if (get_enum(c, v, path, names, &i) < 0)
		return -1;
	cc->slurm.warn_signal = i % 2 ? SIGUSR2 : SIGUSR1;
	return 0;
}

static int slurm_option_pair(struct ctx *c, struct ynode *k, struct ynode *v, const char *path,
			     void *data)
{
	struct cluster_config *cc = data;
	struct slurm_option *o;
	const char *val = NULL;
	size_t n = strlen(k->text);

	/* dtctl's own keys: the warning before the time limit (--signal) */
	if (!strcmp(k->text, "signal"))
		return slurm_warn_signal(c, v, path, cc);
	if (!strcmp(k->text, "warn_s"))
		return get_int(c, v, path, 0, 65535, "seconds before the time limit, 0 to 65535 "
			       "(0: no warning)", &cc->slurm.warn_s);
	if (n < 2 || n > 40 || !islower((unsigned char)k->text[0]) ||
	    strspn(k->text, "abcdefghijklmnopqrstuvwxyz0123456789-") != n)
		return fail(c, k, "key '%s': '%s' is not an sbatch option name (a long option "
			    "without its dashes, e.g. 'constraint' for --constraint)", path, k->text);
	for (size_t i = 0; i < ARRAY_SIZE(slurm_reserved); i++)
		if (!strcmp(k->text, slurm_reserved[i].name))
			return fail(c, k, "key '%s': --%s is set by dtctl from %s; remove it here",
				    path, k->text, slurm_reserved[i].from);
	if (!is_null(v)) {
		if (v->type != Y_SCALAR)
			return bad_value(c, v, path, "a single value (true for a flag)");
		if (!(val = scalar_value(c, v, path)))
			return -1;
		for (const char *p = val; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				return bad_value(c, v, path, "a value without control characters");
	}
	if (v->plain && val && !strcmp(val, "false"))
		return 0;     /* a flag turned off: not passed */
	if (v->plain && val && !strcmp(val, "true"))
		val = NULL;   /* a flag: --name */
	else if (!val || !*val)
		return bad_value(c, v, path, "a value, or true for a flag");
	cc->slurm.options = xrealloc(cc->slurm.options,
				     (cc->slurm.nr_options + 1) * sizeof(*cc->slurm.options));
	o = &cc->slurm.options[cc->slurm.nr_options++];
	o->name = xstrdup(k->text);
	o->value = val ? xstrdup(val) : NULL;
	o->pos.line = v->line;
	o->pos.col = v->col;
	return 0;
}

/* One nodes: entry before its host range is expanded. */
struct node_entry {
	char *host, *name, *user;
	int port, gpus, slots;
	struct kvlist labels;
	struct ynode *host_node, *name_node;
};

static int valid_node_name(const char *s)
{
	return name_chars_ok(s, 253, "._-");   /* also a file name (init/<node>.log) */
}

static int valid_host_chars(const char *s)
{
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("._-:[],", *s))
			return 0;
	return 1;
}

static int node_key(struct ctx *c, const char *key, struct ynode *v, const char *path, void *data)
{
	struct node_entry *e = data;

	if (!strcmp(key, "host")) {
		e->host_node = v;
		if (get_str(c, v, path, &e->host) < 0)
			return -1;
		if (!valid_host_chars(e->host))
			return bad_value(c, v, path, "a host name, address or host range "
					 "(use 'user:' for the login name)");
		return 0;
	}
	if (!strcmp(key, "name")) {
		e->name_node = v;
		if (get_str(c, v, path, &e->name) < 0)
			return -1;
		if (!valid_node_name(e->name))
			return bad_value(c, v, path, "a node name of at most 253 letters, digits, '.', "
					 "'-' and '_'");
		return 0;
	}
	if (!strcmp(key, "user"))
		return get_user_name(c, v, path, &e->user);
	if (!strcmp(key, "port"))
		return get_int(c, v, path, 1, 65535, PORT_EXPECTED, &e->port);
	if (!strcmp(key, "gpus")) {
		if (v->type == Y_SCALAR && !strcmp(v->text, "auto")) {
			e->gpus = GPUS_AUTO;
			return 0;
		}
		return get_int(c, v, path, 0, 1024, "'auto' or a number of GPUs", &e->gpus);
	}
	if (!strcmp(key, "slots"))
		return get_int(c, v, path, 1, 1000000, "a positive integer", &e->slots);
	return get_kvmap(c, v, path, &e->labels, 0);   /* labels */
}

/* Per-node bookkeeping while loading, for messages naming both places. */
struct cluster_state {
	struct cluster_config *cc;
	struct ynode **origin;   /* per node: the name or host value it came from */
	char **origin_path;      /* per node: "nodes[2].name" or "nodes[2].host" */
	struct ynode **host_origin;   /* per node: its host value */
	char **host_path;             /* per node: "nodes[2].host" */
	size_t origin_alloc;
	struct ynode *nodes_node, *user_node;
	struct ynode *slurm_node;     /* the first Slurm-only key (partition:, slurm: ...) */
	const char *slurm_key;
	int saw_user;
};

static const char *const node_keys[] = {
	"host", "name", "user", "port", "gpus", "slots", "labels", NULL,
};

static int add_nodes(struct ctx *c, struct cluster_state *st, struct ynode *entry,
		     const char *path)
{
	struct cluster_config *cc = st->cc;
	struct node_entry e;
	struct strvec hosts = STRVEC_INIT;
	struct strbuf sub = STRBUF_INIT, herr = STRBUF_INIT;
	int ret = -1;

	memset(&e, 0, sizeof(e));
	e.gpus = GPUS_AUTO;
	if (entry->type == Y_SCALAR && !is_null(entry)) {
		/* "- gpu01" is short for "- host: gpu01" */
		e.host_node = entry;
		if (get_str(c, entry, path, &e.host) < 0)
			goto out;
	} else if (entry->type != Y_MAP) {
		bad_value(c, entry, path, "a mapping such as {host: gpu01}");
		goto out;
	} else if (walk_map(c, entry, path, node_keys, NULL, node_key, &e) < 0) {
		goto out;
	}
	if (!e.host) {
		missing(c, entry, path, "host", NULL);
		goto out;
	}
	child_path(&sub, path, "host");
	if (hostrange_expand(e.host, &hosts, &herr) < 0) {
		fail(c, e.host_node, "key '%s': invalid host range '%s': %s", sub.buf, e.host,
		     herr.buf);
		goto out;
	}
	if (e.name && hosts.nr > 1) {
		child_path(&sub, path, "name");
		fail(c, e.name_node, "key '%s': 'name' cannot be used when 'host' expands to %zu "
		     "hosts; node names are the host names", sub.buf, hosts.nr);
		goto out;
	}
	if (cc->nr_nodes + hosts.nr > HOSTRANGE_MAX) {
		fail(c, e.host_node, "key '%s': more than %d nodes in all", sub.buf, HOSTRANGE_MAX);
		goto out;
	}
	for (size_t i = 0; i < hosts.nr; i++)
		if (!host_name_ok(hosts.v[i])) {
			fail(c, e.host_node, "key '%s': host '%.40s%s' is not a host name or address "
			     "(at most 253 letters, digits, '.', '-', '_' or ':')", sub.buf, hosts.v[i],
			     strlen(hosts.v[i]) > 40 ? "..." : "");
			goto out;
		}
	cc->nodes = xrealloc(cc->nodes, (cc->nr_nodes + hosts.nr) * sizeof(*cc->nodes));
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
	ALLOC_GROW(st->origin, cc->nr_nodes + hosts.nr, st->origin_alloc);
	st->origin_path = xrealloc(st->origin_path, st->origin_alloc * sizeof(*st->origin_path));
	st->host_origin = xrealloc(st->host_origin,
				   st->origin_alloc * sizeof(struct ynode *));
	st->host_path = xrealloc(st->host_path, st->origin_alloc * sizeof(*st->host_path));
	for (size_t i = 0; i < hosts.nr; i++) {
		struct cluster_node *n = &cc->nodes[cc->nr_nodes];

		memset(n, 0, sizeof(*n));
		n->host = xstrdup(hosts.v[i]);
		n->name = xstrdup(e.name ? e.name : hosts.v[i]);
		n->user = e.user ? xstrdup(e.user) : NULL;
		n->port = e.port;
		n->gpus = e.gpus;
		n->slots = e.slots;
		for (size_t k = 0; k < e.labels.nr; k++)
			kvlist_set(&n->labels, e.labels.items[k].key, e.labels.items[k].value);
		n->pos.line = entry->line;
		n->pos.col = entry->col;
		st->origin[cc->nr_nodes] = e.name ? e.name_node : e.host_node;
		child_path(&sub, path, e.name ? "name" : "host");
		st->origin_path[cc->nr_nodes] = xstrdup(entry->type == Y_SCALAR ? path : sub.buf);
		child_path(&sub, path, "host");
		st->host_origin[cc->nr_nodes] = e.host_node;
		st->host_path[cc->nr_nodes] = xstrdup(entry->type == Y_SCALAR ? path : sub.buf);
		cc->nr_nodes++;
	}
	ret = 0;
out:
	free(e.host);
	free(e.name);
	free(e.user);
	kvlist_release(&e.labels);
	strvec_clear(&hosts);
	strbuf_release(&sub);
	strbuf_release(&herr);
	return ret;
}

static int nodes_value(struct ctx *c, struct cluster_state *st, struct ynode *v, const char *path)
{
	struct strbuf sub = STRBUF_INIT;

	st->nodes_node = v;
	if (is_null(v))
		return 0;
	if (v->type != Y_SEQ)
		return bad_value(c, v, path, "a list of nodes");
	for (size_t i = 0; i < v->nr; i++) {
		strbuf_reset(&sub);
		strbuf_addf(&sub, "%s[%zu]", path, i);
		if (add_nodes(c, st, v->kids[i], sub.buf) < 0) {
			strbuf_release(&sub);
			return -1;
		}
	}
	strbuf_release(&sub);
	return 0;
}

static const char *const ssh_keys[] = {
	"port", "fanout", "connect_timeout", "command_timeout", "host_key_policy", "identity", NULL,
};
static const char *const setup_keys[] = { "template", "timeout", "env", "vars", NULL };
static const char *const agent_keys[] = { "port", "heartbeat", "dead_after", "fake_health",
					   NULL };
static const char *const head_keys[] = { "address", "port", "socket", "dashboard_address",
					  "dashboard_port", NULL };
static const char *const cluster_modes[] = { "single-user", "team", NULL };
static const char *const network_keys[] = { "interface", NULL };
static const char *const mpi_keys[] = { "orted_launch", NULL };
static const char *const health_keys[] = { "max_failures", "failure_window", "fabric_fraction",
					    NULL };
static const char *const cluster_keys[] = {
	"cluster", "user", "shared_dir", "ssh", "nodes", "setup", "install", "agent", "head",
	"network", "mpi", "health", "job_files", "notify", "fairshare", "backend", "partition", "account", "qos",
	"slurm", "mode", "admin_group", NULL,
};

static int cluster_key(struct ctx *c, const char *key, struct ynode *v, const char *path,
		       void *data)
{
	struct cluster_state *st = data;
	struct cluster_config *cc = st->cc;

	if (!strcmp(key, "cluster")) {
		if (get_str(c, v, path, &cc->name) < 0)
			return -1;
		if (!valid_node_name(cc->name))
			return bad_value(c, v, path, "a name of letters, digits, '.', '-' and '_'");
		return 0;
	}
	if (!strcmp(key, "user")) {
		st->saw_user = 1;
		return get_user_name(c, v, path, &cc->user);
	}
	if (!strcmp(key, "shared_dir")) {
		size_t len;

		if (get_safe_path(c, v, path, 0, &cc->shared_dir) < 0)
			return -1;
		if (cc->shared_dir[0] != '/')
			return bad_value(c, v, path, "an absolute path (the same on every node)");
		len = strlen(cc->shared_dir);
		while (len > 1 && cc->shared_dir[len - 1] == '/')
			cc->shared_dir[--len] = '\0';
		return 0;
	}
	if (!strcmp(key, "ssh"))
		return walk_map(c, v, path, ssh_keys, NULL, ssh_key, cc);
	if (!strcmp(key, "nodes"))
		return nodes_value(c, st, v, path);
	if (!strcmp(key, "setup"))
		return walk_map(c, v, path, setup_keys, NULL, setup_key, cc);
	if (!strcmp(key, "install")) {
		int m;

		if (get_enum(c, v, path, install_modes, &m) < 0)
			return -1;
		cc->install = m ? INSTALL_SHARED : INSTALL_LOCAL;
		return 0;
	}
	if (!strcmp(key, "job_files"))
		return get_enum(c, v, path, job_files_modes, &cc->job_files_world);
	if (!strcmp(key, "mode"))
		return get_enum(c, v, path, cluster_modes, &cc->team);
	if (!strcmp(key, "admin_group"))
		return get_user_name(c, v, path, &cc->admin_group);   /* group names: the same rules */
	if (!strcmp(key, "agent"))
		return walk_map(c, v, path, agent_keys, NULL, agent_key, cc);
	if (!strcmp(key, "head"))
		return walk_map(c, v, path, head_keys, NULL, head_key, cc);
	if (!strcmp(key, "mpi"))
		return walk_map(c, v, path, mpi_keys, NULL, mpi_key, cc);
	if (!strcmp(key, "health"))
		return walk_map(c, v, path, health_keys, NULL, health_key, cc);
	if (!strcmp(key, "notify"))
		return notify_from_tree(c, v, path, &cc->notify);
	if (!strcmp(key, "fairshare"))
		return fairshare_value(c, v, path, &cc->fairshare);
	if (!strcmp(key, "backend")) {
		int b;

		if (get_enum(c, v, path, backends, &b) < 0)
			return -1;
		cc->backend = b ? BACKEND_SLURM : BACKEND_AGENTS;
		return 0;
	}
	if (!strcmp(key, "partition") || !strcmp(key, "account") || !strcmp(key, "qos") ||
	    !strcmp(key, "slurm")) {
		if (!st->slurm_node) {
			st->slurm_node = v;
			st->slurm_key = key;
		}
		if (!strcmp(key, "partition"))
			return get_slurm_name(c, v, path, &cc->slurm.partition,
					      &cc->slurm.partition_pos);
		if (!strcmp(key, "account"))
			return get_slurm_name(c, v, path, &cc->slurm.account, &cc->slurm.account_pos);
		if (!strcmp(key, "qos"))
			return get_slurm_name(c, v, path, &cc->slurm.qos, &cc->slurm.qos_pos);
		return each_pair(c, v, path, "a mapping of sbatch options, e.g. {constraint: a100}",
				 slurm_option_pair, cc);
	}
	return walk_map(c, v, path, network_keys, NULL, network_key, cc);   /* network */
}

static int check_nodes(struct ctx *c, struct cluster_state *st, struct ynode *top)
{
	struct cluster_config *cc = st->cc;
	char **keys;
	size_t dup, first, local = SIZE_MAX;
	int ret = 0;

	if (cc->backend == BACKEND_SLURM) {
		/* the nodes are Slurm's (sinfo), each attempt's those of its allocation */
		if (st->nodes_node)
			return fail(c, st->nodes_node, "key 'nodes': with 'backend: slurm' the nodes "
				    "come from Slurm (sinfo); remove 'nodes:'");
		return 0;
	}
	if (st->slurm_node)
		return fail(c, st->slurm_node, "key '%s': only with 'backend: slurm' (add it, or "
			    "remove '%s:')", st->slurm_key, st->slurm_key);
	if (!st->nodes_node)
		return missing(c, top, "", "nodes", NULL);
	if (!cc->nr_nodes)
		return fail(c, st->nodes_node, "key 'nodes': the node list is empty; "
			    "add at least one node (host: local for this machine)");
	for (size_t i = 0; i < cc->nr_nodes; i++) {
		if (strcmp(cc->nodes[i].host, "local") != 0)
			continue;
		if (local != SIZE_MAX)
			return fail(c, st->host_origin[i], "key '%s': 'host: local' may appear only "
				    "once (also at line %d, column %d)", st->host_path[i],
				    st->host_origin[local]->line, st->host_origin[local]->col);
		local = i;
	}
	keys = xcalloc(cc->nr_nodes, sizeof(*keys));
	for (size_t i = 0; i < cc->nr_nodes; i++)
		keys[i] = cc->nodes[i].name;
	if (find_duplicate(keys, cc->nr_nodes, &dup, &first)) {
		ret = fail(c, st->origin[dup], "key '%s': duplicate node name '%s' "
			   "(also at line %d, column %d)", st->origin_path[dup], cc->nodes[dup].name,
			   st->origin[first]->line, st->origin[first]->col);
		goto out;
	}
	for (size_t i = 0; i < cc->nr_nodes; i++) {
		struct strbuf sb = STRBUF_INIT;

		strbuf_addf(&sb, "%s:%d", cc->nodes[i].host, cc->nodes[i].port);
		keys[i] = strbuf_detach(&sb, NULL);
	}
	if (find_duplicate(keys, cc->nr_nodes, &dup, &first))
		ret = fail(c, st->host_origin[dup], "key '%s': duplicate host '%s' with port %d "
			   "(also at line %d, column %d)", st->host_path[dup], cc->nodes[dup].host,
			   cc->nodes[dup].port, st->host_origin[first]->line,
			   st->host_origin[first]->col);
	for (size_t i = 0; i < cc->nr_nodes; i++)
		free(keys[i]);
out:
	free(keys);
	return ret;
}

static char *login_name(void)
{
	const char *u = getenv("USER");
	struct passwd *pw;

	if (u && *u)
		return xstrdup(u);
	pw = getpwuid(getuid());
	return pw && pw->pw_name ? xstrdup(pw->pw_name) : NULL;
}

static void cluster_defaults(void *cfg)
{
	struct cluster_config *cc = cfg;

	memset(cc, 0, sizeof(*cc));
	cc->ssh.port = 22;
	cc->ssh.fanout = 32;
	cc->ssh.connect_timeout_ms = 10 * 1000;
	cc->ssh.command_timeout_ms = 10 * 60 * 1000;
	cc->ssh.host_key_policy = HOST_KEY_TOFU;
	cc->setup.timeout_ms = 10 * 60 * 1000;
	cc->install = INSTALL_LOCAL;
	cc->agent.port = 7070;
	cc->agent.heartbeat_ms = 2000;
	cc->agent.dead_after_ms = 10000;
	cc->head.port = 7071;
	cc->health.max_failures = 3;
	cc->health.failure_window_ms = 60 * 60 * 1000;
	cc->health.fabric_fraction = 0.5;
	fairshare_defaults(&cc->fairshare);
	cc->slurm.warn_signal = SIGUSR1;
	cc->slurm.warn_s = 120;
}

static int cluster_from_tree(struct ctx *c, void *cfg, struct ynode *top)
{
	struct cluster_config *cc = cfg;
	struct cluster_state st;
	int ret = -1;

	memset(&st, 0, sizeof(st));
	st.cc = cc;
	if (walk_map(c, top, "", cluster_keys, NULL, cluster_key, &st) < 0)
		goto out;
	if (!cc->shared_dir) {
		missing(c, top, "", "shared_dir", " (the directory all nodes share, e.g. an NFS mount)");
		goto out;
	}
	if (!cc->name)
		cc->name = xstrdup("dtctl");
	if (!cc->user && !(cc->user = login_name())) {
		missing(c, top, "", "user", " ($USER is not set)");
		goto out;
	}
	if (cc->agent.dead_after_ms <= cc->agent.heartbeat_ms) {
		struct ynode *agent = map_get(top, "agent");
		struct ynode *n = agent ? map_get(agent, "dead_after") : NULL;
		struct strbuf hb = STRBUF_INIT, da = STRBUF_INIT;

		format_duration(&hb, cc->agent.heartbeat_ms);
		format_duration(&da, cc->agent.dead_after_ms);
		fail(c, n ? n : agent ? agent : top, "key 'agent.dead_after': must be longer than "
		     "agent.heartbeat (%s), found '%s'", hb.buf, da.buf);
		strbuf_release(&hb);
		strbuf_release(&da);
		goto out;
	}
	for (size_t i = 0; i < cc->nr_nodes; i++) {
		if (!cc->nodes[i].user)
			cc->nodes[i].user = xstrdup(cc->user);
		if (!cc->nodes[i].port)
			cc->nodes[i].port = cc->ssh.port;
	}
	if (check_nodes(c, &st, top) < 0)
		goto out;
	ret = 0;
out:
	for (size_t i = 0; i < cc->nr_nodes; i++) {
		free(st.origin_path[i]);
		free(st.host_path[i]);
	}
	free(st.origin_path);
	free(st.origin);
	free(st.host_path);
	free(st.host_origin);
	return ret;
}

static void cluster_release(void *cfg)
{
	struct cluster_config *cc = cfg;

	free(cc->path);
	free(cc->name);
	free(cc->user);
	free(cc->shared_dir);
	free(cc->ssh.identity);
	free(cc->agent.fake_health);
	json_decref(cc->notify);
	cc->notify = NULL;
	for (size_t i = 0; i < cc->nr_nodes; i++) {
		free(cc->nodes[i].name);
		free(cc->nodes[i].host);
		free(cc->nodes[i].user);
		kvlist_release(&cc->nodes[i].labels);
	}
	free(cc->nodes);
	free(cc->setup.template);
	kvlist_release(&cc->setup.env);
	kvlist_release(&cc->setup.vars);
	free(cc->head.address);
	free(cc->head.socket);
	free(cc->head.dashboard_address);
	free(cc->admin_group);
	free(cc->network.interface);
	fairshare_release(&cc->fairshare);
	free(cc->slurm.partition);
	free(cc->slurm.account);
	free(cc->slurm.qos);
	for (size_t i = 0; i < cc->slurm.nr_options; i++) {
		free(cc->slurm.options[i].name);
		free(cc->slurm.options[i].value);
	}
	free(cc->slurm.options);
	memset(cc, 0, sizeof(*cc));
}

static const struct config_kind cluster_kind = {
	offsetof(struct cluster_config, path), cluster_defaults, cluster_from_tree, cluster_release,
};

/* cluster_config_parse(), cluster_config_load(), cluster_config_release() */
CONFIG_KIND_API(cluster)

int cluster_setup_template(const struct cluster_config *c, struct strbuf *path,
			   struct strbuf *err)
{
	const char *t = c->setup.template;
	const struct config_pos *pos = &c->setup.template_pos;
	struct strbuf where = STRBUF_INIT;
	struct stat st;
	int ret = 0, bad;

	if (!t)
		return 0;
	strbuf_addf(&where, "%s:%d:%d: key 'setup.template'", c->path ? c->path : "cluster.yaml",
		    pos->line, pos->col);
	if (starts_with(t, BUILTIN_PREFIX)) {
		struct strbuf found = STRBUF_INIT;

		if (dt_builtin_template(t + strlen(BUILTIN_PREFIX), &found) < 0) {
			strbuf_addf(err, "%s: no built-in template '%s' (looked for %s); the built-in "
				    "one is '%ssetup-node.sh', or name a file", where.buf,
				    t + strlen(BUILTIN_PREFIX), found.buf, BUILTIN_PREFIX);
			ret = -1;
		} else {
			strbuf_addbuf(path, &found);
		}
		strbuf_release(&found);
	} else if ((bad = stat(t, &st) < 0 || access(t, R_OK) < 0 ? errno :
			  !S_ISREG(st.st_mode) ? -1 : 0)) {
		const char *why = bad > 0 ? strerror(bad) : "not a regular file";

		strbuf_addf(err, "%s: cannot read '%s': %s; write 'template: %ssetup-node.sh' for "
			    "the one shipped with dtctl, or copy dtctl's templates/setup-node.sh there",
			    where.buf, t, why, BUILTIN_PREFIX);
		ret = -1;
	} else {
		strbuf_addstr(path, t);
	}
	strbuf_release(&where);
	return ret;
}

int cluster_find_node(const struct cluster_config *cc, const char *name)
{
	for (size_t i = 0; i < cc->nr_nodes; i++)
		if (!strcmp(cc->nodes[i].name, name))
			return (int)i;
	return -1;
}

json_t *cluster_config_to_json(const struct cluster_config *cc)
{
	json_t *o = json_object(), *ssh = json_object(), *nodes = json_array();
	json_t *setup = json_object(), *agent = json_object(), *head = json_object();
	json_t *net = json_object();

	json_object_set_new(o, "path", str_or_null(cc->path));
	json_object_set_new(o, "cluster", str_or_null(cc->name));
	json_object_set_new(o, "user", str_or_null(cc->user));
	json_object_set_new(o, "shared_dir", str_or_null(cc->shared_dir));

	json_object_set_new(ssh, "port", json_integer(cc->ssh.port));
	json_object_set_new(ssh, "fanout", json_integer(cc->ssh.fanout));
	set_duration(ssh, "connect_timeout", cc->ssh.connect_timeout_ms);
	set_duration(ssh, "command_timeout", cc->ssh.command_timeout_ms);
	json_object_set_new(ssh, "host_key_policy",
			    json_string(host_key_policies[cc->ssh.host_key_policy == HOST_KEY_STRICT]));
	json_object_set_new(ssh, "identity", str_or_null(cc->ssh.identity));
	json_object_set_new(o, "ssh", ssh);

	for (size_t i = 0; i < cc->nr_nodes; i++) {
		const struct cluster_node *n = &cc->nodes[i];
		json_t *jn = json_object();

		json_object_set_new(jn, "name", str_or_null(n->name));
		json_object_set_new(jn, "host", str_or_null(n->host));
		json_object_set_new(jn, "user", str_or_null(n->user));
		json_object_set_new(jn, "port", json_integer(n->port));
		json_object_set_new(jn, "gpus", n->gpus == GPUS_AUTO ? json_string("auto") :
				    json_integer(n->gpus));
		json_object_set_new(jn, "slots", json_integer(n->slots));
		json_object_set_new(jn, "labels", kvlist_json(&n->labels));
		json_array_append_new(nodes, jn);
	}
	json_object_set_new(o, "nodes", nodes);

	json_object_set_new(setup, "template", str_or_null(cc->setup.template));
	set_duration(setup, "timeout", cc->setup.timeout_ms);
	json_object_set_new(setup, "env", kvlist_json(&cc->setup.env));
	json_object_set_new(setup, "vars", kvlist_json(&cc->setup.vars));
	json_object_set_new(o, "setup", setup);
	json_object_set_new(o, "install",
			    json_string(install_modes[cc->install == INSTALL_SHARED]));
	json_object_set_new(o, "job_files", json_string(job_files_modes[!!cc->job_files_world]));

	json_object_set_new(agent, "port", json_integer(cc->agent.port));
	set_duration(agent, "heartbeat", cc->agent.heartbeat_ms);
	set_duration(agent, "dead_after", cc->agent.dead_after_ms);
	json_object_set_new(o, "agent", agent);

	json_object_set_new(head, "address", str_or_null(cc->head.address));
	json_object_set_new(head, "port", json_integer(cc->head.port));
	json_object_set_new(head, "socket", str_or_null(cc->head.socket));
	json_object_set_new(head, "dashboard_address", json_string(cc->head.dashboard_address ?
							cc->head.dashboard_address : "127.0.0.1"));
	json_object_set_new(head, "dashboard_port", json_integer(cc->head.dashboard_port));
	json_object_set_new(o, "head", head);
	json_object_set_new(o, "mode", json_string(cluster_modes[!!cc->team]));
	json_object_set_new(o, "admin_group", str_or_null(cc->admin_group));

	json_object_set_new(net, "interface", str_or_null(cc->network.interface));
	json_object_set_new(o, "network", net);
	json_object_set_new(o, "mpi", json_pack("{s:s}", "orted_launch",
						 orted_launches[cc->mpi.orted_ssh ? 1 : 0]));
	json_object_set_new(o, "health", json_pack("{s:i}", "max_failures", cc->health.max_failures));
	set_duration(json_object_get(o, "health"), "failure_window", cc->health.failure_window_ms);
	json_object_set_new(json_object_get(o, "health"), "fabric_fraction",
			    json_real(cc->health.fabric_fraction));
	if (cc->notify)   /* shown: webhook URLs redacted (their path is the secret) */
		json_object_set_new(o, "notify", notify_list_redacted(cc->notify));
	json_object_set_new(o, "fairshare", fairshare_to_json(&cc->fairshare));
	json_object_set_new(o, "backend", json_string(backends[cc->backend == BACKEND_SLURM]));
	if (cc->backend == BACKEND_SLURM) {
		json_t *opts = json_object();

		json_object_set_new(o, "partition", str_or_null(cc->slurm.partition));
		json_object_set_new(o, "account", str_or_null(cc->slurm.account));
		json_object_set_new(o, "qos", str_or_null(cc->slurm.qos));
		for (size_t i = 0; i < cc->slurm.nr_options; i++)
			json_object_set_new(opts, cc->slurm.options[i].name,
					    cc->slurm.options[i].value ?
					    json_string(cc->slurm.options[i].value) : json_true());
		json_object_set_new(o, "slurm", opts);
	}
	return o;
}

void cluster_head_socket(const struct cluster_config *c, const char *home, struct strbuf *out)
{
	if (c && c->head.socket)
		strbuf_addstr(out, c->head.socket);
	else if (c && c->team)
		strbuf_addf(out, "/run/dtctl/%s/dtsched.sock", c->name ? c->name : "dtctl");
	else
		strbuf_addf(out, "%s/dtsched.sock", home);
}
