/*
 * cmd-agents.c - `dtctl agents start|stop|restart|status [--nodes SPEC]`
 * (see agents.h for what runs on each node).
 */
#include "agents.h"
#include "builtin.h"
#include "cluster-ssh.h"
#include "setup.h"
#include "dthome.h"
#include "head.h"
#include "json.h"
#include "parse-options.h"
#include "term.h"
#include "protocol.h"
#include "ssh.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* templates/dtagent.service beside the build or the installation; NULL if none. */
static char *read_unit_template(void)
{
	struct strbuf path = STRBUF_INIT, sb = STRBUF_INIT;

	if (!dt_builtin_template("dtagent.service", &path))
		strbuf_read_file(&sb, path.buf, 65536);
	strbuf_release(&path);
	if (!sb.len) {
		strbuf_release(&sb);
		return NULL;
	}
	return strbuf_detach(&sb, NULL);
}

void agents_command(struct strbuf *cmd, const struct cluster_config *c, size_t i,
		    enum agents_action action)
{
	const struct cluster_node *n = &c->nodes[i];
	int local = !strcmp(n->host, "local");
	struct strbuf bin = STRBUF_INIT, args = STRBUF_INIT, head = STRBUF_INIT;
	const char *no_systemd = getenv("DTCTL_NO_SYSTEMD");
	char *unit = NULL;

	/* where dtagent is on that node */
	if (local) {
		dt_self_dir(&bin);
		strbuf_addstr(&bin, "/dtagent");
	} else if (c->install == INSTALL_SHARED) {
		strbuf_addf(&bin, "%s/bin/dtagent", c->shared_dir);
	} else {
		strbuf_addstr(&bin, "$HOME/.dtctl/bin/dtagent");
	}
	cluster_head_address(c, n, local, &head);
	strbuf_addstr(&args, "--head ");
	strbuf_add_shell_quoted(&args, head.buf);
	strbuf_addf(&args, ":%d --port %d --name ", c->head.port > 0 ? c->head.port : DT_HEAD_PORT_DEFAULT,
		    c->agent.port > 0 ? c->agent.port : DT_AGENT_PORT_DEFAULT);
	strbuf_add_shell_quoted(&args, n->name);
	strbuf_addf(&args, " --heartbeat-ms %lld", c->agent.heartbeat_ms > 0 ? c->agent.heartbeat_ms : 2000);
	if (n->gpus >= 0)
		strbuf_addf(&args, " --gpus %d", n->gpus);
	if (c->agent.fake_health) {
		strbuf_addstr(&args, " --fake-health ");
		strbuf_add_shell_quoted(&args, c->agent.fake_health);
	}
	if (local) {
		strbuf_addstr(&args, " --home ");
		strbuf_add_shell_quoted(&args, dt_home());
	}
	strbuf_addf(cmd, "BIN=\"%s\"; ", bin.buf);   /* paths from cluster.yaml / our own dir */
	if (local) {
		/* the local agent shares the head's home */
		strbuf_addstr(cmd, "ST=\"--home=\"");
		strbuf_add_shell_quoted(cmd, dt_home());
		strbuf_addstr(cmd, "; ");
	} else {
		strbuf_addstr(cmd, "ST=; ");
	}
	if (action != AGENTS_STATUS && (!no_systemd || !*no_systemd))
		unit = read_unit_template();
	switch (action) {
	case AGENTS_STATUS:
		strbuf_addstr(cmd, "\"$BIN\" --status ${ST:+\"$ST\"}");
		break;
	case AGENTS_STOP:
		strbuf_addstr(cmd, "if command -v systemctl >/dev/null 2>&1 && "
			      "systemctl --user is-active -q dtagent.service 2>/dev/null; then "
			      "systemctl --user stop dtagent.service; fi; \"$BIN\" --stop ${ST:+\"$ST\"}");
		break;
	case AGENTS_START:
	case AGENTS_RESTART:
		if (action == AGENTS_RESTART)
			strbuf_addstr(cmd, "\"$BIN\" --stop ${ST:+\"$ST\"} >/dev/null || exit 1; ");
		if (unit) {
			/* a systemd user instance: install the unit and let systemd run it */
			strbuf_addstr(cmd, "if command -v systemctl >/dev/null 2>&1 && "
				      "systemctl --user show-environment >/dev/null 2>&1; then "
				      "mkdir -p \"$HOME/.config/systemd/user\" && "
				      "sed \"s|@DTAGENT@|$BIN|; s|@ARGS@|$ARGS|\" > "
				      "\"$HOME/.config/systemd/user/dtagent.service\" <<'DTAGENT_UNIT_EOF'\n");
			strbuf_addstr(cmd, unit);
			strbuf_addstr(cmd, "DTAGENT_UNIT_EOF\n"
				      "systemctl --user daemon-reload && "
				      "systemctl --user enable dtagent.service >/dev/null 2>&1; "
				      "systemctl --user start dtagent.service && sleep 0.5 && "
				      "\"$BIN\" --status ${ST:+\"$ST\"}; exit $?; fi; ");
		}
		strbuf_addf(cmd, "\"$BIN\" --daemon %s && \"$BIN\" --status ${ST:+\"$ST\"}", args.buf);
		break;
	}
	/* ARGS is needed by the systemd branch too: define it first */
	{
		struct strbuf full = STRBUF_INIT;

		strbuf_addstr(&full, "ARGS=");
		strbuf_add_shell_quoted(&full, args.buf);
		strbuf_addstr(&full, "; ");
		strbuf_addbuf(&full, cmd);
		strbuf_reset(cmd);
		strbuf_addbuf(cmd, &full);
		strbuf_release(&full);
	}
	free(unit);
	strbuf_release(&bin);
	strbuf_release(&args);
	strbuf_release(&head);
}

struct agents_ctx {
	int *codes;
	struct strbuf *out;
};

static void agent_done(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	struct agents_ctx *x = arg;
	size_t i = cluster_node_index(n);

	strbuf_addbuf(&x->out[i], &r->out);
	strbuf_addbuf(&x->out[i], &r->err);
	if (r->error == SSH_OK)
		x->codes[i] = r->status;
	else {
		x->codes[i] = r->error == SSH_E_NODE ? -1 : 1;
		strbuf_addstr(&x->out[i], r->message ? r->message : "failed");
	}
}

int agents_run(const struct cluster_config *c, const char *nodes_spec,
	       enum agents_action action, int json)
{
	struct ssh_pool_opts po;
	struct ssh_pool *p;
	struct agents_ctx x;
	size_t *idx = NULL, nr = 0;
	int code = 0;
	json_t *arr;

	if (cluster_select(c, nodes_spec, &idx, &nr) < 0) {
		free(idx);
		return DT_EXIT_USAGE;
	}
	if ((action == AGENTS_START || action == AGENTS_RESTART) && (code = head_start(1, 0))) {
		free(idx);
		return code;
	}
	arr = json_array();
	memset(&po, 0, sizeof(po));
	cluster_pool_opts(&po, c);
	/* results by config index (what cluster_node_index() gives back) */
	x.codes = xcalloc(c->nr_nodes, sizeof(int));
	x.out = xcalloc(c->nr_nodes, sizeof(*x.out));
	for (size_t k = 0; k < c->nr_nodes; k++) {
		x.codes[k] = -2;
		strbuf_init(&x.out[k], 0);
	}
	ssh_catch_signals();
	p = ssh_pool_new(&po);
	cluster_pool_add(p, c, idx, nr);
	for (size_t k = 0; k < nr; k++) {
		struct strbuf cmd = STRBUF_INIT;

		agents_command(&cmd, c, idx[k], action);
		ssh_exec(ssh_pool_node(p, k), cmd.buf, 60000, 0, agent_done, &x);
		strbuf_release(&cmd);
	}
	ssh_pool_run(p);
	for (size_t k = 0; k < nr; k++) {
		size_t i = idx[k];
		struct ssh_node *n = ssh_pool_node(p, k);
		int ok = x.codes[i] == 0 || (action == AGENTS_STATUS && x.codes[i] == 1);

		if (x.codes[i] == -2) {
			strbuf_addstr(&x.out[i], ssh_node_error(n) ? ssh_node_error(n) : "did not run");
			x.codes[i] = -1;
		}
		strbuf_trim(&x.out[i]);
		if (json) {
			json_array_append_new(arr, json_pack("{s:s,s:i,s:s,s:b}", "node", c->nodes[i].name,
				"exit_code", x.codes[i], "output", x.out[i].buf,
				"running", action == AGENTS_STATUS ? x.codes[i] == 0 : ok));
		} else {
			/* the agent prints "dtagent on this node: ..." */
			const char *o = x.out[i].buf;

			skip_prefix(o, "dtagent on this node: ", &o);
			/* one row per node: the node's output is shown on one line */
			printf("%-16s %s\n", term_str(c->nodes[i].name),
			       *o ? term_str(o) : ok ? "ok" : "failed");
		}
		if (x.codes[i] < 0)
			code = code ? code : DT_EXIT_UNREACH;
		else if (!ok || (action == AGENTS_STATUS && x.codes[i]))
			code = DT_EXIT_FAIL;
	}
	if (json)
		json_doc_print_key("nodes", arr);
	json_decref(arr);
	for (size_t k = 0; k < c->nr_nodes; k++)
		strbuf_release(&x.out[k]);
	ssh_pool_free(p);
	free(x.codes);
	free(x.out);
	free(idx);
	return code;
}

int agents_start(const struct cluster_config *c, const char *nodes_spec)
{
	return agents_run(c, nodes_spec, AGENTS_START, 0);
}

int cmd_agents(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl agents (start | stop | restart | status) [--nodes SPEC] [--json]",
		NULL,
	};
	const char *nodes = NULL;
	int json = 0, code;
	struct option opts[] = {
		OPT_STRING(0, "nodes", &nodes, "spec", "only these nodes (host-range syntax)"),
		OPT_BOOL(0, "json", &json, "print JSON"),
		OPT_END(),
	};
	struct cluster_config *c = &the_cluster.config;
	enum agents_action a;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	if (argc != 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (!strcmp(argv[0], "start"))
		a = AGENTS_START;
	else if (!strcmp(argv[0], "stop"))
		a = AGENTS_STOP;
	else if (!strcmp(argv[0], "restart"))
		a = AGENTS_RESTART;
	else if (!strcmp(argv[0], "status"))
		a = AGENTS_STATUS;
	else
		return error("unknown action '%s'; see 'dtctl agents --help'", argv[0]), DT_EXIT_USAGE;
	code = agents_run(c, nodes, a, json);
	return code;
}
