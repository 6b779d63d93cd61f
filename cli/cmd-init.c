/*
 * cmd-init.c - `dtctl init [cluster.yaml]`: make every node of the cluster
 * reachable without a password, verified, set up and ready for agents.
 *
 * On the head, once: load and copy cluster.yaml to the dtctl home, make the
 * cluster key pair (ssh-keygen, ed25519) unless ssh.identity names one, make
 * the cluster secret, render the setup template per node, read the dtagent
 * and dttrain binaries that sit beside this dtctl.
 *
 * Then on every node at once (lib/ssh.h, one process, ssh.fanout at a time):
 *
 *   connect, verify the host key (tofu / strict), log in (key, agent, password)
 *   prepare:  ~/.ssh and ~/.dtctl (0700), report checksums of what is there
 *   authorized_keys: add the cluster key once (SFTP temp + rename, 0600)
 *   secret, binaries: upload only what differs (SHA-256), atomically
 *   setup:    upload + run the rendered template when its hash changed;
 *             output streamed "node: line" and saved to <shared>/init/<node>.log
 *   facts:    versions and GPUs for the summary table
 *   agents:   init_start_agents() (dtsched was started before: init_start_head())
 *
 * Then ~/.dtctl/ssh_config is written for OpenSSH and mpirun, init waits
 * until every agent it started has registered with dtsched
 * (wait_for_agents(): `dtctl init && dtctl run` works), and a table (or
 * --json) says what happened on each node, ending with `dtsched on :PORT,
 * N agents up`.  A node that fails stops there
 * with one message; the others go on.  Exit: 0 all ok, 3 a node could not be
 * reached or logged in to, 1 another failure, 2 bad configuration, 130 ^C.
 */
#include "agents.h"
#include "builtin.h"
#include "head.h"
#include "cluster-ssh.h"
#include "setup.h"
#include "daemon.h"
#include "dthome.h"
#include "json.h"
#include "log.h"
#include "parse-options.h"
#include "protocol.h"
#include "term.h"
#include "run-command.h"
#include "secret.h"
#include "units.h"
#include "usage.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SETUP_SCRIPT ".dtctl/setup.sh"
#define SETUP_HASH ".dtctl/setup.sha256"
#define NR_BINS 3
/* node-to-node SSH for mpirun (see push_mesh()) */
#define MESH_KEY ".dtctl/id_ed25519"
#define MESH_KNOWN_HOSTS ".dtctl/known_hosts"
#define MESH_SSH_CONFIG ".dtctl/ssh_config"
#define MESH_FILES MESH_KEY " " MESH_KNOWN_HOSTS " " MESH_SSH_CONFIG

struct init_ctx;

struct init_node {
	struct init_ctx *x;
	size_t ci;                   /* index in the cluster config */
	struct strbuf script;        /* rendered setup script, "" without a template */
	struct strbuf script_hash;
	struct strbuf remote;        /* what the prepare step reported */
	struct strbuf log;           /* setup output, log line format */
	struct strvec actions;       /* what changed on the node */
	struct kvlist facts;
	struct strbuf agent;
	int restart_agent;           /* its secret or dtagent changed: restart a running agent */
	int agent_started;           /* its agent was started (or was running): wait for it */
	const json_t *registered;    /* its entry in dtsched's node table once UP, else NULL */
	struct strbuf fail;          /* a failure that is not the node's connection */
};

struct init_bin {
	const char *name;
	struct strbuf data, hash;
	int present;
};

struct init_ctx {
	struct cluster_config *c;
	struct strbuf pubkey;        /* one line, with newline */
	struct strbuf secret;        /* hex + newline */
	struct strbuf secret_hash;
	struct init_bin bins[NR_BINS];
	struct strbuf bin_dir;       /* where dtagent lives on the nodes */
	int quiet;                   /* --json: no streamed output */
	int force_setup;
	int no_agents;               /* --no-agents: install only */
	json_t *nodes_reply;         /* dtsched's GET nodes after the agents were started */
	int head_ok;                 /* dtsched runs (init started it, or it was running) */
	struct strbuf mesh_key;      /* the generated cluster key, pushed for mpirun; "" if user-supplied */
	struct strbuf mesh_key_hash;
	struct init_node *nodes;     /* by pool index */
};

/* ------------------------------------------------------------- the head */

static int read_pubkey(const char *priv, struct strbuf *pub_line)
{
	struct strbuf path = STRBUF_INIT, type = STRBUF_INIT;
	int ret = -1;

	strbuf_addf(&path, "%s.pub", priv);
	if (strbuf_read_file(pub_line, path.buf, 64 << 10) < 0) {
		error_errno("cannot read public key '%s' (make it with 'ssh-keygen -y -f %s > %s')",
			    path.buf, priv, path.buf);
		goto out;
	}
	strbuf_trim(pub_line);
	if (ssh_pubkey_type(pub_line->buf, &type) < 0) {
		error("'%s' is not an OpenSSH public key", path.buf);
		goto out;
	}
	if (!strcmp(type.buf, "ssh-rsa") || !strcmp(type.buf, "ssh-dss")) {
		error("'%s' is an %s key: libssh2 1.10 can only sign with ssh-rsa (SHA-1), not "
		      "rsa-sha2-256/512, so OpenSSH 8.8 and later refuse it; use an ed25519 key "
		      "(ssh-keygen -t ed25519), or drop ssh.identity to let dtctl make one",
		      priv, type.buf);
		goto out;
	}
	strbuf_addch(pub_line, '\n');
	ret = 0;
out:
	strbuf_release(&path);
	strbuf_release(&type);
	return ret;
}

/* Generate dt_home()/id_ed25519 with ssh-keygen under a temp name, then rename. */
static int ensure_cluster_key(const struct cluster_config *c, struct strbuf *pub_line)
{
	const char *priv = cluster_identity(c);
	struct strbuf tmp = STRBUF_INIT, tmp_pub = STRBUF_INIT, pub = STRBUF_INIT,
		      comment = STRBUF_INIT;
	struct child_process cp = CHILD_PROCESS_INIT;
	int ret = -1;

	if (c->ssh.identity) {
		if (access(priv, R_OK) < 0)
			return error_errno("ssh.identity '%s' cannot be read", priv);
		return read_pubkey(priv, pub_line);
	}
	if (access(priv, F_OK) == 0) {
		struct stat st;

		if (stat(priv, &st) == 0 && (st.st_mode & 077))
			return error("private key '%s' is readable by others (mode %04o); "
				     "run 'chmod 600 %s'", priv, (unsigned)(st.st_mode & 07777), priv);
		return read_pubkey(priv, pub_line);
	}
	strbuf_addf(&tmp, "%s.tmp.%ld", priv, (long)getpid());
	strbuf_addf(&tmp_pub, "%s.pub", tmp.buf);
	strbuf_addf(&pub, "%s.pub", priv);
	strbuf_addf(&comment, "dtctl@%s", c->name ? c->name : "cluster");
	unlink(tmp.buf);
	unlink(tmp_pub.buf);
	strvec_pushv(&cp.args, (const char *[]){ "ssh-keygen", "-q", "-t", "ed25519", "-N", "",
						 "-C", comment.buf, "-f", tmp.buf, NULL });
	cp.no_stdin = 1;
	cp.stdout_to_stderr = 1;
	if (run_command(&cp) != 0) {
		error("ssh-keygen failed to make the cluster key '%s' (is openssh-client installed?)",
		      priv);
		goto out;
	}
	if (chmod(tmp.buf, 0600) < 0 || rename(tmp_pub.buf, pub.buf) < 0 ||
	    rename(tmp.buf, priv) < 0) {
		error_errno("cannot install the cluster key '%s'", priv);
		goto out;
	}
	fprintf(stderr, "%s: made the cluster key %s\n", dt_progname(), term_str(priv));
	ret = read_pubkey(priv, pub_line);
out:
	unlink(tmp.buf);
	unlink(tmp_pub.buf);
	child_process_clear(&cp);
	strbuf_release(&tmp);
	strbuf_release(&tmp_pub);
	strbuf_release(&pub);
	strbuf_release(&comment);
	return ret;
}

/* The dir holding the running dtctl, where dtagent and dttrain are built. */
static void self_dir(struct strbuf *sb)
{
	char buf[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
	char *slash;

	if (n <= 0)
		return;
	buf[n] = '\0';
	slash = strrchr(buf, '/');
	if (slash)
		*slash = '\0';
	strbuf_addstr(sb, buf);
}

static void load_bins(struct init_ctx *x)
{
	static const char *names[NR_BINS] = { "dtagent", "dtshim", "dttrain" };
	struct strbuf dir = STRBUF_INIT;

	self_dir(&dir);
	for (int i = 0; i < NR_BINS; i++) {
		struct init_bin *b = &x->bins[i];
		struct strbuf path = STRBUF_INIT;

		b->name = names[i];
		strbuf_init(&b->data, 0);
		strbuf_init(&b->hash, 0);
		strbuf_addf(&path, "%s/%s", dir.buf, b->name);
		if (strbuf_read_file(&b->data, path.buf, 0) >= 0) {
			b->present = 1;
			sha256_hex(&b->hash, b->data.buf, b->data.len);
		} else {
			warning("'%s' not found beside dtctl: not installing it on the nodes", path.buf);
		}
		strbuf_release(&path);
	}
	strbuf_release(&dir);
}

/* install: shared - one copy on the shared dir, written from the head. */
static int install_shared_bins(struct init_ctx *x)
{
	for (int i = 0; i < NR_BINS; i++) {
		struct init_bin *b = &x->bins[i];
		struct strbuf path = STRBUF_INIT, old = STRBUF_INIT, h = STRBUF_INIT;
		int ret = 0;

		if (!b->present)
			continue;
		strbuf_addf(&path, "%s/%s", x->bin_dir.buf, b->name);
		if (strbuf_read_file(&old, path.buf, 0) >= 0)
			sha256_hex(&h, old.buf, old.len);
		if (strcmp(h.buf, b->hash.buf) &&
		    (mkdir_p(x->bin_dir.buf, 0755) < 0 ||
		     write_file_atomic(path.buf, b->data.buf, b->data.len, 0755) < 0))
			ret = error("install: shared: cannot write '%s'", path.buf);
		strbuf_release(&path);
		strbuf_release(&old);
		strbuf_release(&h);
		if (ret < 0)
			return -1;
	}
	return 0;
}

/* -------------------------------------------------------- setup template */

static void add_var(struct kvlist *vars, const char *k, const char *v)
{
	kvlist_set(vars, k, v);
}

/*
 * Render `tpl`: every {{ name }} becomes the variable's value shell-quoted,
 * except env_lines, which is already a list of quoted words.  An unknown
 * name is an error naming the template line.
 */
static int render_template(const char *tpl, const char *tpl_name, const struct kvlist *vars,
			   const char *env_lines, struct strbuf *out)
{
	const char *p = tpl;
	int line = 1;

	while (*p) {
		const char *open = strstr(p, "{{"), *close, *a, *b;
		char *name;

		if (!open) {
			strbuf_addstr(out, p);
			break;
		}
		for (const char *q = p; q < open; q++)
			line += *q == '\n';
		strbuf_add(out, p, (size_t)(open - p));
		close = strstr(open + 2, "}}");
		if (!close)
			return error("%s:%d: '{{' without '}}'", tpl_name, line);
		a = open + 2;
		b = close;
		while (a < b && isspace((unsigned char)*a))
			a++;
		while (b > a && isspace((unsigned char)b[-1]))
			b--;
		name = xstrndup(a, (size_t)(b - a));
		if (!strcmp(name, "env_lines")) {
			strbuf_addstr(out, env_lines);
		} else if (kvlist_get(vars, name)) {
			strbuf_add_shell_quoted(out, kvlist_get(vars, name));
		} else {
			struct strbuf known = STRBUF_INIT;

			for (size_t i = 0; i < vars->nr; i++)
				strbuf_addf(&known, "%s%s", i ? ", " : "", vars->items[i].key);
			error("%s:%d: unknown variable '%s' (known: %s, env_lines)", tpl_name, line,
			      name, known.buf);
			strbuf_release(&known);
			free(name);
			return -1;
		}
		free(name);
		p = close + 2;
	}
	return 0;
}

static int render_setup(struct init_ctx *x, const char *tpl, size_t ci, struct strbuf *out)
{
	const struct cluster_config *c = x->c;
	const struct cluster_node *cn = &c->nodes[ci];
	struct kvlist vars = { NULL, 0, 0 };
	struct strbuf tmp = STRBUF_INIT, env_lines = STRBUF_INIT;
	int ret;

	for (size_t i = 0; i < c->setup.vars.nr; i++)
		add_var(&vars, c->setup.vars.items[i].key, c->setup.vars.items[i].value);
	add_var(&vars, "node", cn->name);
	strbuf_addf(&tmp, "%zu", ci);
	add_var(&vars, "node_index", tmp.buf);
	strbuf_reset(&tmp);
	if (cn->gpus == GPUS_AUTO)
		strbuf_addstr(&tmp, "auto");
	else
		strbuf_addf(&tmp, "%d", cn->gpus);
	add_var(&vars, "gpus", tmp.buf);
	add_var(&vars, "host", cn->host);
	add_var(&vars, "user", cn->user ? cn->user : "");
	add_var(&vars, "shared_dir", c->shared_dir);
	add_var(&vars, "cluster", c->name ? c->name : "");
	add_var(&vars, "bin_dir", x->bin_dir.buf);
	for (size_t i = 0; i < c->setup.env.nr; i++) {
		const char *k = c->setup.env.items[i].key;
		struct strbuf l = STRBUF_INIT;

		for (const char *q = k; *q; q++)
			if (!(isalnum((unsigned char)*q) || *q == '_') || isdigit((unsigned char)*k)) {
				strbuf_release(&l);
				ret = error("setup.env: '%s' is not a valid environment variable name", k);
				goto out;
			}
		strbuf_addf(&l, "export %s=", k);
		strbuf_add_shell_quoted(&l, c->setup.env.items[i].value);
		if (env_lines.len)
			strbuf_addch(&env_lines, ' ');
		strbuf_add_shell_quoted(&env_lines, l.buf);
		strbuf_release(&l);
	}
	ret = render_template(tpl, c->setup.template, &vars, env_lines.buf, out);
out:
	kvlist_release(&vars);
	strbuf_release(&tmp);
	strbuf_release(&env_lines);
	return ret;
}

/* -------------------------------------------------------- per node steps */

static struct init_ctx *the_ctx;

static struct init_node *inode(struct ssh_node *n)
{
	return &the_ctx->nodes[ssh_node_index(n)];
}

static int must_ok(struct ssh_node *n, struct ssh_result *r, const char *what)
{
	if (r->error == SSH_OK && r->status == 0)
		return 1;
	if (r->error == SSH_E_NODE)
		return 0;	/* the node's own message says it all */
	{
		struct strbuf e = STRBUF_INIT;

		strbuf_addbuf(&e, &r->err);
		strbuf_trim(&e);
		if (r->message)
			ssh_node_fail(n, "%s", r->message);
		else
			ssh_node_fail(n, "%s: %s failed (exit %d)%s%s", ssh_node_target(n)->name, what,
				      r->status, e.len ? ": " : "", e.buf);
		strbuf_release(&e);
	}
	return 0;
}

/* The hash the node reported for a file, or "". */
static const char *remote_hash(struct init_node *in, const char *file, struct strbuf *buf)
{
	strbuf_reset(buf);
	for (const char *p = in->remote.buf; *p;) {
		const char *nl = strchrnul(p, '\n'), *sp = memchr(p, ' ', (size_t)(nl - p));

		if (sp) {
			const char *name = sp;

			while (name < nl && *name == ' ')
				name++;
			if ((size_t)(nl - name) == strlen(file) && !strncmp(name, file, strlen(file))) {
				strbuf_add(buf, p, (size_t)(sp - p));
				break;
			}
		}
		p = *nl ? nl + 1 : nl;
	}
	return buf->buf;
}

static void uploaded(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	if (must_ok(n, r, "upload"))
		strvec_push(&inode(n)->actions, arg);
}

static void write_setup_log(struct ssh_node *n)
{
	struct init_node *in = inode(n);
	struct strbuf dir = STRBUF_INIT, path = STRBUF_INIT;

	strbuf_addf(&dir, "%s/init", the_ctx->c->shared_dir);
	strbuf_addf(&path, "%s/%s.log", dir.buf, ssh_node_target(n)->name);
	if (mkdir_p(dir.buf, 0755) < 0 ||
	    write_file_atomic(path.buf, in->log.buf, in->log.len, 0644) < 0)
		warning("%s: cannot save the setup log to '%s' (is the shared dir mounted here?)",
			ssh_node_target(n)->name, path.buf);
	strbuf_release(&dir);
	strbuf_release(&path);
}

static void setup_ran(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	struct init_node *in = inode(n);

	(void)arg;
	if (r->error == SSH_E_NODE)
		return;
	write_setup_log(n);
	if (r->error == SSH_E_TIMEOUT) {
		ssh_node_fail(n, "%s: setup script timed out after %.0f s (setup.timeout); see %s/init/%s.log",
			      ssh_node_target(n)->name, the_ctx->c->setup.timeout_ms / 1000.0,
			      the_ctx->c->shared_dir, ssh_node_target(n)->name);
		return;
	}
	if (r->error != SSH_OK || r->status != 0) {
		ssh_node_fail(n, "%s: setup script failed (exit %d); see %s/init/%s.log",
			      ssh_node_target(n)->name, r->status, the_ctx->c->shared_dir,
			      ssh_node_target(n)->name);
		return;
	}
	strvec_push(&in->actions, "setup");
	/* only now remember the hash: a failed setup runs again next time */
	{
		struct strbuf line = STRBUF_INIT;

		strbuf_addf(&line, "%s\n", in->script_hash.buf);
		ssh_upload(n, line.buf, line.len, SETUP_HASH, 0600, uploaded, "setup hash");
		strbuf_release(&line);
	}
}

static void got_facts(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	(void)arg;
	if (r->error == SSH_OK)
		facts_parse(&inode(n)->facts, r->out.buf);
}

static void agent_checked(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	struct init_node *in = inode(n);

	(void)arg;
	if (!must_ok(n, r, "dtagent"))
		return;
	strbuf_addbuf(&in->agent, &r->out);
	strbuf_setlen(&in->agent, strcspn(in->agent.buf, "\n"));
	in->agent_started = 1;
}

/*
 * Starting the agents: the same command line `dtctl agents start` uses
 * (cli/agents.h: systemd user unit where one runs, else `dtagent --daemon`,
 * which returns once the agent serves).  dtsched was started before the pool
 * ran, so the first heartbeats have somewhere to go.
 */
static void init_start_agents(struct ssh_node *n)
{
	struct strbuf cmd = STRBUF_INIT;

	if (the_ctx->no_agents)
		return;
	if (the_ctx->c->install == INSTALL_LOCAL && !the_ctx->bins[0].present)
		return;
	/* a running agent holds the old secret or binary: restart it (its tasks
	 * live on under their supervisors and are re-adopted) */
	agents_command(&cmd, the_ctx->c, inode(n)->ci,
		       inode(n)->restart_agent ? AGENTS_RESTART : AGENTS_START);
	ssh_exec(n, cmd.buf, 30000, 0, agent_checked, NULL);
	strbuf_release(&cmd);
}

static void queue_rest(struct ssh_node *n)
{
	struct init_ctx *x = the_ctx;
	struct init_node *in = inode(n);
	struct strbuf h = STRBUF_INIT, cmd = STRBUF_INIT;

	if (strcmp(remote_hash(in, ".dtctl/secret", &h), x->secret_hash.buf)) {
		ssh_upload(n, x->secret.buf, x->secret.len, ".dtctl/secret", 0600, uploaded, "secret");
		in->restart_agent = 1;
	}
	if (x->mesh_key.len && strcmp(ssh_node_target(n)->host, "local") &&
	    strcmp(remote_hash(in, MESH_KEY, &h), x->mesh_key_hash.buf))
		ssh_upload(n, x->mesh_key.buf, x->mesh_key.len, MESH_KEY, 0600, uploaded,
			   "cluster key");
	if (x->c->install == INSTALL_LOCAL) {
		for (int i = 0; i < NR_BINS; i++) {
			struct init_bin *b = &x->bins[i];
			struct strbuf path = STRBUF_INIT;

			if (!b->present)
				continue;
			strbuf_addf(&path, ".dtctl/bin/%s", b->name);
			if (strcmp(remote_hash(in, path.buf, &h), b->hash.buf)) {
				ssh_upload(n, b->data.buf, b->data.len, path.buf, 0755, uploaded,
					   (void *)b->name);
				in->restart_agent = 1;
			}
			strbuf_release(&path);
		}
	}
	if (in->script.len &&
	    (x->force_setup || strcmp(remote_hash(in, "setup", &h), in->script_hash.buf))) {
		ssh_upload(n, in->script.buf, in->script.len, SETUP_SCRIPT, 0700, uploaded, "setup script");
		strbuf_addstr(&cmd, "sh " SETUP_SCRIPT);
		ssh_exec(n, cmd.buf, x->c->setup.timeout_ms, SSH_STREAM, setup_ran, NULL);
	}
	strbuf_reset(&cmd);
	facts_command(&cmd, x->c->shared_dir);
	ssh_exec(n, cmd.buf, 60000, 0, got_facts, NULL);
	init_start_agents(n);
	strbuf_release(&h);
	strbuf_release(&cmd);
}

static void got_authorized_keys(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	struct strbuf merged = STRBUF_INIT;
	int changed;

	(void)arg;
	if (r->error == SSH_E_NODE)
		return;
	if (r->error != SSH_OK && r->error != SSH_E_NOENT) {
		ssh_node_fail(n, "%s", r->message ? r->message : "cannot read ~/.ssh/authorized_keys");
		return;
	}
	changed = ssh_authorized_keys_merge(r->error == SSH_OK ? r->out.buf : "",
					    r->error == SSH_OK ? r->out.len : 0,
					    the_ctx->pubkey.buf, &merged);
	if (changed > 0)
		ssh_upload(n, merged.buf, merged.len, ".ssh/authorized_keys", 0600, uploaded,
			   "authorized_keys");
	strbuf_release(&merged);
	queue_rest(n);
}

static void prepared(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	struct init_node *in = inode(n);

	(void)arg;
	if (r->error == SSH_OK && r->status != 0) {
		struct strbuf e = STRBUF_INIT;

		strbuf_addbuf(&e, &r->err);
		strbuf_trim(&e);
		ssh_node_fail(n, "%s: cannot create ~/.ssh and ~/.dtctl in the home directory "
			      "(is it writable by %s?): %s", ssh_node_target(n)->name,
			      ssh_node_target(n)->user, e.buf);
		strbuf_release(&e);
		return;
	}
	if (!must_ok(n, r, "prepare"))
		return;
	strbuf_addbuf(&in->remote, &r->out);
	if (!strcmp(ssh_node_target(n)->host, "local")) {
		queue_rest(n);	/* this machine: no authorized_keys to manage */
		return;
	}
	ssh_read(n, ".ssh/authorized_keys", 4 << 20, got_authorized_keys, NULL);
}

static const char PREPARE_CMD[] =
	"umask 077 && mkdir -p .ssh .dtctl/bin && chmod 700 .ssh .dtctl && "
	"{ [ ! -f .ssh/authorized_keys ] || chmod 600 .ssh/authorized_keys; } && "
	"for f in .dtctl/secret .dtctl/bin/dtagent .dtctl/bin/dtshim .dtctl/bin/dttrain " MESH_FILES 
	"; do "
	"if [ -f \"$f\" ]; then sha256sum \"$f\"; fi; done && "
	"if [ -f " SETUP_HASH " ]; then printf '%s setup\\n' \"$(cat " SETUP_HASH ")\"; fi";

/* --------------------------------------------------------------- output */

static void setup_line(struct ssh_node *n, int is_stderr, const char *line, void *data)
{
	struct init_node *in = inode(n);
	char ts[DT_TIMESTAMP_LEN];

	(void)data;
	dt_timestamp(ts, sizeof(ts));
	strbuf_addf(&in->log, "%s %c %s\n", ts, is_stderr ? 'E' : 'O', line);
	if (the_ctx->quiet)
		return;
	progress_clear();
	printf("%s: %s\n", term_str(ssh_node_target(n)->name), term_str(line));
	fflush(stdout);
}

/*
 * `dtctl init && dtctl run ...` must work: run places work only on nodes
 * that have registered with dtsched, so init waits until every agent it
 * started is UP in dtsched's table (the first heartbeat comes at once).
 * Bounded: 30 s, or agent.dead_after when longer; an agent that has not
 * registered by then fails its node with a pointer to its log.
 */
#define AGENT_WAIT_MS 30000
#define AGENT_POLL_MS 200

/* the entry called name in the reply's array `list` ("nodes", "refused"), or NULL */
static const json_t *reply_entry(const json_t *reply, const char *list, const char *name)
{
	const json_t *n;
	size_t i;

	json_array_foreach(json_object_get(reply, list), i, n)
		if (!strcmp(json_get_str(n, "name", ""), name))
			return n;
	return NULL;
}

static const json_t *dtsched_node(const json_t *reply, const char *name)
{
	const json_t *n = reply_entry(reply, "nodes", name);

	return n && !strcmp(json_get_str(n, "state", ""), DT_NODE_UP) ? n : NULL;
}

/*
 * The node's entry in the reply's "refused" (agents of another protocol,
 * protocol.h) when a heartbeat was refused since init began waiting: an
 * entry left from the agent init has just replaced does not count.
 */
static char wait_began[DT_TIMESTAMP_LEN];

static const json_t *dtsched_refused(const json_t *reply, const char *name)
{
	const json_t *n = reply_entry(reply, "refused", name);

	return n && strcmp(json_get_str(n, "at", ""), wait_began) > 0 ? n : NULL;
}

static size_t count_registered(struct ssh_pool *p, int *want, int *settled)
{
	size_t up = 0;

	*want = *settled = 0;
	for (size_t i = 0; i < ssh_pool_count(p); i++) {
		struct ssh_node *n = ssh_pool_node(p, i);
		struct init_node *in = &the_ctx->nodes[i];

		in->registered = NULL;
		if (ssh_node_failed(n) || !in->agent_started)
			continue;
		(*want)++;
		in->registered = dtsched_node(the_ctx->nodes_reply, ssh_node_target(n)->name);
		up += in->registered != NULL;
		/* refused for its protocol: no use waiting for it */
		*settled += in->registered || dtsched_refused(the_ctx->nodes_reply,
							      ssh_node_target(n)->name);
	}
	return up;
}

static void wait_for_agents(struct ssh_pool *p)
{
	long long wait_ms = the_cluster.dead_after_ms > AGENT_WAIT_MS ?
		the_cluster.dead_after_ms : AGENT_WAIT_MS;
	long long t0 = dt_mono_ms();
	struct strbuf err = STRBUF_INIT, ago = STRBUF_INIT;
	struct dt_httpc hc;
	int want, settled, shown = 0;
	size_t up;

	dt_timestamp(wait_began, sizeof(wait_began));
	count_registered(p, &want, &settled);
	if (!want || head_connect(&hc))
		return;
	for (;;) {
		json_decref(the_ctx->nodes_reply);
		the_ctx->nodes_reply = NULL;
		strbuf_reset(&err);
		if (dt_httpc_request(&hc, "GET", DT_PATH_NODES, NULL, &the_ctx->nodes_reply,
				     &err) != 200) {
			json_decref(the_ctx->nodes_reply);
			the_ctx->nodes_reply = NULL;
		}
		up = count_registered(p, &want, &settled);
		if (settled == want || dt_mono_ms() - t0 >= wait_ms || ssh_interrupted)
			break;
		if (!the_ctx->quiet && progress_enabled()) {
			fprintf(stderr, "\r\033[Kwaiting for the agents to register with dtsched: "
				"%zu of %d up", up, want);
			fflush(stderr);
			shown = 1;
		}
		usleep(AGENT_POLL_MS * 1000);
	}
	if (shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
	format_duration_human(&ago, wait_ms);
	for (size_t i = 0; i < ssh_pool_count(p); i++) {
		struct ssh_node *n = ssh_pool_node(p, i);
		struct init_node *in = &the_ctx->nodes[i];
		const json_t *r;

		if (ssh_node_failed(n) || !in->agent_started || in->registered)
			continue;
		if ((r = dtsched_refused(the_ctx->nodes_reply, ssh_node_target(n)->name))) {
			ssh_node_fail(n, "%s: dtsched refused its agent, which speaks protocol %lld "
				      "(dtsched and this dtctl speak %d): the dtagent beside this dtctl "
				      "is not of its build, or the node runs another one",
				      ssh_node_target(n)->name, json_get_int(r, "protocol", 0),
				      DT_PROTOCOL_VERSION);
			continue;
		}
		ssh_node_fail(n, "%s: its agent has not registered with dtsched (127.0.0.1:%d) "
			      "within %s%s%s; see ~/.dtctl/agent.log on %s ('dtctl exec --nodes %s "
			      "-- tail .dtctl/agent.log'), and check that the node reaches the head "
			      "at head.address", ssh_node_target(n)->name, the_cluster.head_port,
			      ago.buf, err.len ? ": " : "", err.buf, ssh_node_target(n)->name,
			      ssh_node_target(n)->name);
	}
	dt_httpc_release(&hc);
	strbuf_release(&err);
	strbuf_release(&ago);
}

/* GPUS as `dtctl nodes` shows them (used/total) once the agent registered */
static void gpus_column(struct strbuf *sb, struct init_node *in)
{
	const char *f = kvlist_get(&in->facts, "gpus");

	if (in->registered)
		strbuf_addf(sb, "%lld/%lld", json_get_int(in->registered, "gpus_used", 0),
			    json_get_int(in->registered, "gpus_total", 0));
	else if (f && !strcmp(f, "none"))
		strbuf_addch(sb, '0');	/* no nvidia-smi: what the agent would count */
	else
		strbuf_addstr(sb, f && *f ? f : "-");
}

static const char *fact(struct init_node *in, const char *k)
{
	const char *v = kvlist_get(&in->facts, k);

	return v && *v ? v : "-";
}

static int node_code(struct ssh_node *n)
{
	if (!ssh_node_failed(n))
		return 0;
	/* failed before logging in: unreachable, host key, auth */
	return *ssh_node_auth(n) ? DT_EXIT_FAIL : DT_EXIT_UNREACH;
}

/* the last line: what the head and the agents are, so `init && run` reads right */
static void print_summary(struct ssh_pool *p)
{
	struct strbuf down = STRBUF_INIT;
	size_t up = 0;

	if (the_ctx->no_agents) {
		printf("agents not started (--no-agents): 'dtctl agents start' starts them\n");
		return;
	}
	if (!the_ctx->head_ok)
		return;	/* said why already */
	for (size_t i = 0; i < ssh_pool_count(p); i++) {
		if (the_ctx->nodes[i].registered)
			up++;
		else
			strbuf_addf(&down, "%s%s", down.len ? ", " : "",
				    term_str(ssh_node_target(ssh_pool_node(p, i))->name));
	}
	printf("dtsched on :%d, %zu %s up", the_cluster.head_port, up,
	       plural((long long)up, "agent", "agents"));
	if (down.len)
		printf("; not up: %s", down.buf);
	printf("\n");
	strbuf_release(&down);
}

static void print_table(struct ssh_pool *p)
{
	size_t nr = ssh_pool_count(p);
	struct strbuf gpus = STRBUF_INIT;

	printf("%-12s %-16s %-10s %-14s %-9s %-10s %-6s %-8s %-8s %6s\n", "NODE", "ADDRESS",
	       "RESULT", "HOST KEY", "GPUS", "DRIVER", "CUDA", "NCCL", "MPI", "SECS");
	for (size_t i = 0; i < nr; i++) {
		struct ssh_node *n = ssh_pool_node(p, i);
		struct init_node *in = &the_ctx->nodes[i];
		const char *res = ssh_node_failed(n) ? "FAILED" : in->actions.nr ? "changed" : "unchanged";

		strbuf_reset(&gpus);
		gpus_column(&gpus, in);
		printf("%-12s %-16s %-10s %-14s %-9s %-10s %-6s %-8s %-8s %6.1f\n",
		       term_str(ssh_node_target(n)->name), term_str(ssh_node_target(n)->host), res,
		       ssh_node_hostkey_state(n), term_str(gpus.buf),
		       term_str(fact(in, "driver")), term_str(fact(in, "cuda")),
		       term_str(fact(in, "nccl")), term_str(fact(in, "mpi")),
		       ssh_node_elapsed_ms(n) / 1000.0);
	}
	strbuf_release(&gpus);
	for (size_t i = 0; i < nr; i++) {
		struct ssh_node *n = ssh_pool_node(p, i);
		struct init_node *in = &the_ctx->nodes[i];

		if (ssh_node_failed(n))
			error("%s", ssh_node_error(n));
		else if (in->actions.nr) {
			printf("%s:", term_str(ssh_node_target(n)->name));
			for (size_t k = 0; k < in->actions.nr; k++)
				printf(" %s%s", in->actions.v[k], k + 1 < in->actions.nr ? "," : "");
			printf("\n");
		}
	}
	print_summary(p);
}

static void print_json(struct ssh_pool *p)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < ssh_pool_count(p); i++) {
		struct ssh_node *n = ssh_pool_node(p, i);
		struct init_node *in = &the_ctx->nodes[i];
		json_t *o = json_object(), *acts = json_strvec(&in->actions), *facts = json_object();

		for (size_t k = 0; k < in->facts.nr; k++)
			json_object_set_new(facts, in->facts.items[k].key,
					    json_string(in->facts.items[k].value));
		json_object_set_new(o, "node", json_string(ssh_node_target(n)->name));
		json_object_set_new(o, "address", json_string(ssh_node_target(n)->host));
		json_object_set_new(o, "ok", json_boolean(!ssh_node_failed(n)));
		json_object_set_new(o, "error", ssh_node_failed(n) ?
				    json_string(ssh_node_error(n)) : json_null());
		json_object_set_new(o, "host_key", json_string(ssh_node_hostkey_state(n)));
		json_object_set_new(o, "fingerprint", json_string(ssh_node_fingerprint(n)));
		json_object_set_new(o, "auth", json_string(ssh_node_auth(n)));
		json_object_set_new(o, "changes", acts);
		json_object_set_new(o, "facts", facts);
		json_object_set_new(o, "agent", json_string(in->agent.buf));
		json_object_set_new(o, "elapsed_ms", json_integer(ssh_node_elapsed_ms(n)));
		json_array_append_new(arr, o);
	}
	json_doc_print_key("nodes", arr);
	json_decref(arr);
}

/* ------------------------------------------------------------ ssh_config */

/* A quoted ssh_config value: config.c let no '"', '\\' or control character
 * into a host, user or identity, so that a value cannot end its line. */
static void cfg_quoted(struct strbuf *sb, const char *key, const char *val)
{
	strbuf_addf(sb, "    %s \"%s\"\n", key, val);
}

static int write_ssh_config(const struct cluster_config *c)
{
	struct strbuf sb = STRBUF_INIT, path = STRBUF_INIT, kh = STRBUF_INIT;
	int ret;

	dt_home_path(&path, "ssh_config");
	dt_home_path(&kh, "known_hosts");
	strbuf_addf(&sb, "# written by 'dtctl init' for cluster '%s' (%s); re-run it to change this file\n"
		    "# use: ssh -F %s NODE\n", c->name ? c->name : "", c->path, path.buf);
	for (size_t i = 0; i < c->nr_nodes; i++) {
		const struct cluster_node *cn = &c->nodes[i];

		if (!strcmp(cn->host, "local"))
			continue;
		strbuf_addf(&sb, "\nHost %s\n", cn->name);
		cfg_quoted(&sb, "HostName", cn->host);
		if (cn->user)
			cfg_quoted(&sb, "User", cn->user);
		strbuf_addf(&sb, "    Port %d\n", cn->port);
		cfg_quoted(&sb, "IdentityFile", cluster_identity(c));
		strbuf_addstr(&sb, "    IdentitiesOnly yes\n");
		cfg_quoted(&sb, "UserKnownHostsFile", kh.buf);
		strbuf_addstr(&sb, "    GlobalKnownHostsFile /dev/null\n"
			      "    StrictHostKeyChecking yes\n"
			      "    CheckHostIP no\n"
			      "    BatchMode yes\n");
	}
	ret = write_file_atomic(path.buf, sb.buf, sb.len, 0600);
	strbuf_release(&sb);
	strbuf_release(&path);
	strbuf_release(&kh);
	return ret;
}

static int copy_cluster_file(const struct cluster_config *c)
{
	struct strbuf dst = STRBUF_INIT, data = STRBUF_INIT;
	char *a, *b;
	int ret = 0;

	dt_home_path(&dst, "cluster.yaml");
	a = realpath(c->path, NULL);
	b = realpath(dst.buf, NULL);
	if (!(a && b && !strcmp(a, b))) {
		if (strbuf_read_file(&data, c->path, CONFIG_MAX_BYTES) < 0)
			ret = error_errno("cannot read '%s'", c->path);
		else
			ret = write_file_atomic(dst.buf, data.buf, data.len, 0600);
	}
	free(a);
	free(b);
	strbuf_release(&dst);
	strbuf_release(&data);
	return ret;
}

/* ----------------------------------------------------------------- main */

/*
 * Node-to-node SSH for mpirun's launcher (plm_rsh_args -F ~/.dtctl/ssh_config):
 * every node gets the cluster key (only the key init generated: a user's own
 * ssh.identity is never copied anywhere), the cluster's known_hosts (so nodes
 * verify each other's host keys exactly as the head does) and an ssh_config
 * naming every node by name and address.  known_hosts is only complete once
 * every node has been contacted, so this runs after the main pass, on the
 * nodes whose copies differ, over a second short pool.
 */
static int load_mesh_key(const struct cluster_config *c, struct init_ctx *x)
{
	struct strbuf ours = STRBUF_INIT;
	int ret = 0;

	dt_home_path(&ours, "id_ed25519");
	if (!strcmp(cluster_identity(c), ours.buf)) {
		if (strbuf_read_file(&x->mesh_key, ours.buf, 64 << 10) < 0)
			ret = error_errno("cannot read the cluster key '%s'", ours.buf);
		else
			sha256_hex(&x->mesh_key_hash, x->mesh_key.buf, x->mesh_key.len);
	}
	strbuf_release(&ours);
	return ret;
}

static void render_node_ssh_config(struct strbuf *sb, const struct cluster_config *c, int with_key)
{
	strbuf_addf(sb, "# written by 'dtctl init' for cluster '%s': node-to-node SSH (mpirun)\n",
		    c->name ? c->name : "");
	for (size_t i = 0; i < c->nr_nodes; i++) {
		const struct cluster_node *cn = &c->nodes[i];

		if (!strcmp(cn->host, "local"))
			continue;
		strbuf_addf(sb, "\nHost %s", cn->name);
		if (strcmp(cn->name, cn->host))
			strbuf_addf(sb, " %s", cn->host);
		strbuf_addch(sb, '\n');
		cfg_quoted(sb, "HostName", cn->host);
		strbuf_addf(sb, "    Port %d\n", cn->port);
		if (cn->user)
			cfg_quoted(sb, "User", cn->user);
	}
	strbuf_addstr(sb, "\nHost *\n");
	if (with_key)
		strbuf_addstr(sb, "    IdentityFile ~/" MESH_KEY "\n    IdentitiesOnly yes\n");
	strbuf_addstr(sb, "    UserKnownHostsFile ~/" MESH_KNOWN_HOSTS "\n"
		      "    GlobalKnownHostsFile /dev/null\n"
		      "    StrictHostKeyChecking yes\n"
		      "    CheckHostIP no\n"
		      "    BatchMode yes\n");
}

static void mesh_uploaded(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	if (r->error != SSH_OK || r->status != 0)
		ssh_node_fail(n, "%s: cannot install %s for node-to-node SSH: %s",
			      ssh_node_target(n)->name, (const char *)arg,
			      ssh_node_error(n) ? ssh_node_error(n) : "upload failed");
}

static int push_mesh(struct init_ctx *x, struct ssh_pool *p1, const struct cluster_config *c)
{
	struct strbuf kh = STRBUF_INIT, cfg = STRBUF_INIT, khh = STRBUF_INIT, cfgh = STRBUF_INIT;
	struct strbuf path = STRBUF_INIT, h = STRBUF_INIT;
	struct ssh_pool_opts po;
	struct ssh_pool *p = NULL;
	size_t *idx = xcalloc(ssh_pool_count(p1) + 1, sizeof(*idx)), nr = 0;
	struct ssh_node **main_node = xcalloc(ssh_pool_count(p1) + 1, sizeof(*main_node));
	int rc = 0;

	dt_home_path(&path, "known_hosts");
	if (strbuf_read_file(&kh, path.buf, 4 << 20) < 0)
		goto out;	/* nothing was accepted: nothing to share */
	render_node_ssh_config(&cfg, c, x->mesh_key.len > 0);
	sha256_hex(&khh, kh.buf, kh.len);
	sha256_hex(&cfgh, cfg.buf, cfg.len);
	for (size_t i = 0; i < ssh_pool_count(p1); i++) {
		struct ssh_node *n = ssh_pool_node(p1, i);
		struct init_node *in = inode(n);

		if (ssh_node_failed(n) || !strcmp(ssh_node_target(n)->host, "local"))
			continue;
		if (strcmp(remote_hash(in, MESH_KNOWN_HOSTS, &h), khh.buf) ||
		    strcmp(remote_hash(in, MESH_SSH_CONFIG, &h), cfgh.buf)) {
			main_node[nr] = n;	/* the main pass's node, which the table shows */
			idx[nr++] = in->ci;
		}
	}
	if (!nr)
		goto out;
	cluster_pool_opts(&po, c);
	/*
	 * No progress line: this second pass's count would start again at 0
	 * on the line where the main pass's had counted up (it counted
	 * backwards), and it is two small files per node.
	 */
	po.on_tick = NULL;
	p = ssh_pool_new(&po);
	cluster_pool_add(p, c, idx, nr);
	for (size_t i = 0; i < nr; i++) {
		struct ssh_node *n = ssh_pool_node(p, i);

		ssh_upload(n, kh.buf, kh.len, MESH_KNOWN_HOSTS, 0600, mesh_uploaded, "known_hosts");
		ssh_upload(n, cfg.buf, cfg.len, MESH_SSH_CONFIG, 0600, mesh_uploaded, "ssh_config");
	}
	rc = ssh_pool_run(p);
	progress_clear();
	for (size_t i = 0; i < nr; i++) {
		struct ssh_node *n = ssh_pool_node(p, i);

		if (ssh_node_failed(n))
			ssh_node_fail(main_node[i], "%s", ssh_node_error(n));
		else
			strvec_push(&inode(main_node[i])->actions, "node-to-node ssh");
	}
out:
	if (p)
		ssh_pool_free(p);
	free(idx);
	free(main_node);
	strbuf_release(&kh);
	strbuf_release(&cfg);
	strbuf_release(&khh);
	strbuf_release(&cfgh);
	strbuf_release(&path);
	strbuf_release(&h);
	return rc;
}

/* Start dtsched (or restart it with changed head settings) and say so. */
static void init_start_head(struct init_ctx *x)
{
	struct strbuf pidfile = STRBUF_INIT;
	long long before = 0, after = 0;
	int was_running;

	dt_home_path(&pidfile, "dtsched.pid");
	was_running = dt_pidfile_running(pidfile.buf, &before);
	if (head_start(1, 1) != 0) {
		error("dtsched did not start on this machine, so the agents cannot register; "
		      "see '%s/dtsched.log', then run 'dtctl head start'", dt_home());
	} else {
		x->head_ok = 1;
		if (!x->quiet && dt_pidfile_running(pidfile.buf, &after) &&
		    (!was_running || after != before))
			printf("started dtsched on :%d (pid %lld)\n", the_cluster.head_port, after);
		fflush(stdout);
	}
	strbuf_release(&pidfile);
}

int cmd_init(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl init [--accept-new-hosts] [--password-file FILE] [--nodes SPEC] [--json] [cluster.yaml]",
		NULL };
	const char *pwfile = NULL, *nodes = NULL;
	int accept_new = 0, json = 0, force_setup = 0, no_agents = 0;
	struct option opts[] = {
		OPT_BOOL(0, "accept-new-hosts", &accept_new,
			 "tofu: remember new host keys without asking (prints their fingerprints)"),
		OPT_STRING(0, "password-file", &pwfile, "file",
			   "first-contact password in a file (or $DTCTL_PASSWORD)"),
		OPT_STRING(0, "nodes", &nodes, "spec", "only these nodes (host-range syntax)"),
		OPT_BOOL(0, "force-setup", &force_setup, "run the setup script even if unchanged"),
		OPT_BOOL(0, "no-agents", &no_agents, "install everything but do not start the agents"),
		OPT_BOOL(0, "json", &json, "print the results as JSON"),
		OPT_END(),
	};
	struct cluster_config *c = &the_cluster.config;
	struct init_ctx x;
	struct ssh_pool_opts po;
	struct ssh_pool *p = NULL;
	struct strbuf tpl = STRBUF_INIT, hex = STRBUF_INIT;
	char *password = NULL;
	size_t *idx = NULL, nr = 0;
	int code = DT_EXIT_USAGE, rc;

	argv++;
	argc = parse_options(argc - 1, argv, opts, usage, 0);
	if (argc > 1 || (argc == 1 && the_cluster.given)) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	/* init's own file first: the argument, else ./cluster.yaml, else the usual ones */
	if (argc == 1)
		the_cluster.given = argv[0];
	if (!the_cluster.given && !getenv_nonempty("DTCTL_CLUSTER") &&
	    access("cluster.yaml", F_OK) == 0)
		the_cluster.given = "cluster.yaml";
	if ((code = cluster_setup(USE_CLUSTER)))
		return code;
	if (!the_cluster.file) {
		error("no cluster file: name one ('dtctl init cluster.yaml'; a template: "
		      "templates/cluster.yaml)");
		return DT_EXIT_USAGE;
	}
	code = DT_EXIT_USAGE;
	memset(&x, 0, sizeof(x));
	the_ctx = &x;
	x.c = c;
	x.quiet = json;
	x.force_setup = force_setup;
	x.no_agents = no_agents;
	strbuf_init(&x.mesh_key, 0);
	strbuf_init(&x.mesh_key_hash, 0);
	strbuf_init(&x.pubkey, 0);
	strbuf_init(&x.secret, 0);
	strbuf_init(&x.secret_hash, 0);
	strbuf_init(&x.bin_dir, 0);
	if (cluster_select(c, nodes, &idx, &nr) < 0)
		goto out;
	if (pwfile || getenv("DTCTL_PASSWORD")) {
		password = password_from(pwfile);
		if (!password)
			goto out;
	}
	{
		struct strbuf tpl_path = STRBUF_INIT, err = STRBUF_INIT;

		if (cluster_setup_template(c, &tpl_path, &err) < 0 ||
		    (tpl_path.len && strbuf_read_file(&tpl, tpl_path.buf, 1 << 20) < 0)) {
			if (err.len)
				error("%s", err.buf);
			else
				error_errno("setup.template '%s' cannot be read", tpl_path.buf);
			strbuf_release(&tpl_path);
			strbuf_release(&err);
			goto out;
		}
		strbuf_release(&tpl_path);
		strbuf_release(&err);
	}
	if (c->install == INSTALL_SHARED)
		strbuf_addf(&x.bin_dir, "%s/bin", c->shared_dir);
	else
		strbuf_addstr(&x.bin_dir, ".dtctl/bin");	/* relative to the login dir */
	/* team mode (docs/team.md): the agents run as root, like slurmd, so that each
	 * task can run as its user; init logs in as root (or runs as root: host local) */
	if (c->team) {
		for (size_t i = 0; i < nr; i++) {
			const struct cluster_node *n = &c->nodes[idx[i]];
			const char *u = n->user ? n->user : c->user;

			if (!strcmp(n->host, "local") ? geteuid() != 0 : (!u || strcmp(u, "root"))) {
				error("mode: team runs the agents as root: node '%s' %s", n->name,
				      !strcmp(n->host, "local") ? "is this machine and dtctl init does "
				      "not run as root" : "is reached as a user other than root (set "
				      "'user: root' in cluster.yaml)");
				goto out;
			}
		}
	}
	/* everything that can fail on bad input comes before writing anything */
	x.nodes = xcalloc(nr ? nr : 1, sizeof(*x.nodes));
	for (size_t i = 0; i < nr; i++) {
		struct init_node *in = &x.nodes[i];

		in->x = &x;
		in->ci = idx[i];
		strbuf_init(&in->script, 0);
		strbuf_init(&in->script_hash, 0);
		strbuf_init(&in->remote, 0);
		strbuf_init(&in->log, 0);
		strbuf_init(&in->agent, 0);
		strbuf_init(&in->fail, 0);
		strvec_init(&in->actions);
	}
	for (size_t i = 0; i < nr; i++) {
		struct init_node *in = &x.nodes[i];

		if (tpl.len) {
			if (render_setup(&x, tpl.buf, idx[i], &in->script) < 0)
				goto out;
			sha256_hex(&in->script_hash, in->script.buf, in->script.len);
		}
	}
	if (dt_home_ensure() < 0 || ensure_cluster_key(c, &x.pubkey) < 0 ||
	    dt_secret_ensure(&hex) < 0)
		goto out;
	strbuf_addbuf(&x.secret, &hex);
	strbuf_addch(&x.secret, '\n');
	if (load_mesh_key(c, &x) < 0)
		goto out;
	sha256_hex(&x.secret_hash, x.secret.buf, x.secret.len);
	load_bins(&x);
	if (c->install == INSTALL_SHARED && install_shared_bins(&x) < 0)
		goto out;
	if (copy_cluster_file(c) < 0)
		goto out;
	/* dtsched first, so the agents' first heartbeats have somewhere to go */
	if (!no_agents)
		init_start_head(&x);

	cluster_pool_opts(&po, c);
	po.accept_new = accept_new;
	po.ask_new = !accept_new && isatty(0) && isatty(2);
	po.try_user_keys = 1;
	po.try_agent = 1;
	po.password = password;
	po.get_password = password_prompt;
	po.on_line = setup_line;
	po.on_tick = json ? NULL : progress_tick;
	ssh_catch_signals();
	p = ssh_pool_new(&po);
	cluster_pool_add(p, c, idx, nr);
	for (size_t i = 0; i < nr; i++)
		ssh_exec(ssh_pool_node(p, i), PREPARE_CMD, 60000, 0, prepared, NULL);
	rc = ssh_pool_run(p);
	progress_clear();
	if (write_ssh_config(c) < 0)
		warning("cannot write the OpenSSH config in '%s'", dt_home());
	if (rc < 0) {
		error("interrupted: partial uploads were removed; re-run 'dtctl init' to finish");
		code = DT_EXIT_INTR;
		goto out;
	}
	if (push_mesh(&x, p, c) < 0) {
		code = DT_EXIT_INTR;
		goto out;
	}
	if (x.head_ok)
		wait_for_agents(p);
	if (json)
		print_json(p);
	else
		print_table(p);
	code = !no_agents && !x.head_ok ? DT_EXIT_FAIL : 0;
	for (size_t i = 0; i < nr; i++) {
		int nc = node_code(ssh_pool_node(p, i));

		if (nc > code)
			code = nc;
	}
out:
	ssh_pool_free(p);
	if (x.nodes) {
		for (size_t i = 0; i < nr; i++) {
			struct init_node *in = &x.nodes[i];

			strbuf_release(&in->script);
			strbuf_release(&in->script_hash);
			strbuf_release(&in->remote);
			strbuf_release(&in->log);
			strbuf_release(&in->agent);
			strbuf_release(&in->fail);
			strvec_clear(&in->actions);
			kvlist_release(&in->facts);
		}
		free(x.nodes);
	}
	for (int i = 0; i < NR_BINS; i++) {
		strbuf_release(&x.bins[i].data);
		strbuf_release(&x.bins[i].hash);
	}
	json_decref(x.nodes_reply);
	strbuf_release(&x.pubkey);
	if (x.secret.len)
		memset(x.secret.buf, 0, x.secret.len);
	strbuf_release(&x.secret);
	strbuf_release(&x.secret_hash);
	if (x.mesh_key.len)
		memset(x.mesh_key.buf, 0, x.mesh_key.len);
	strbuf_release(&x.mesh_key);
	strbuf_release(&x.mesh_key_hash);
	strbuf_release(&x.bin_dir);
	if (hex.len)
		memset(hex.buf, 0, hex.len);
	strbuf_release(&hex);
	strbuf_release(&tpl);
	if (password) {
		memset(password, 0, strlen(password));
		free(password);
	}
	free(idx);
	return code;
}
