/*
 * cmd-exec.c - `dtctl exec -- CMD ARGS...`: a command on many nodes at once,
 * on lib/ssh.h (a file to many nodes is `dtctl push`, cmd-push.c).
 *
 * exec: the remote command line is argv with every element shell-quoted
 * (the remote side always runs a shell).  Output lines are printed as they
 * come, prefixed "node: "; --merge collects them and prints each distinct
 * output once under the folded list of nodes that produced it, as
 * `dshbak -c` does.  The exit code is the worst node's: its remote exit code,
 * 124 for a timeout, 3 for a node that could not be reached or logged in to;
 * every node whose command failed gets one stderr line ("node3: exit 1"), as
 * pdsh and clush print, so a silent failure still names its node.
 */
#include "builtin.h"
#include "cluster-ssh.h"
#include "setup.h"
#include "json.h"
#include "parse-options.h"
#include "term.h"
#include "units.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct exec_result {
	int code;              /* exit code, or -1 when the node failed */
	int done;
	struct strbuf out, err, msg;
	long long ms;
};

struct exec_ctx {
	int merge, json;
	struct exec_result *res;   /* by pool index */
};

static void exec_line(struct ssh_node *n, int is_stderr, const char *line, void *data)
{
	struct exec_ctx *x = data;

	if (x->merge || x->json)
		return;
	progress_clear();
	/* the command's own output passes as ssh would pass it; the prefix is ours */
	fprintf(is_stderr ? stderr : stdout, "%s: %s\n", term_str(ssh_node_target(n)->name), line);
}

static void exec_done(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	struct exec_ctx *x = arg;
	struct exec_result *e = &x->res[ssh_node_index(n)];

	e->done = 1;
	e->ms = ssh_node_elapsed_ms(n);
	strbuf_addbuf(&e->out, &r->out);
	strbuf_addbuf(&e->err, &r->err);
	switch (r->error) {
	case SSH_OK:
		e->code = r->status;
		break;
	case SSH_E_TIMEOUT:
		e->code = 124;
		strbuf_addstr(&e->msg, r->message ? r->message : "timed out");
		break;
	case SSH_E_NODE:
		e->code = -1;
		strbuf_addstr(&e->msg, r->message ? r->message : "node failed");
		break;
	default:
		e->code = 1;
		strbuf_addstr(&e->msg, r->message ? r->message : "failed");
		break;
	}
}

static int worst(int a, int b)
{
	return b > a ? b : a;
}

static void print_merged(struct ssh_pool *p, struct exec_ctx *x)
{
	size_t nr = ssh_pool_count(p);
	int *used = xcalloc(nr, sizeof(*used));

	for (size_t i = 0; i < nr; i++) {
		struct strvec names = STRVEC_INIT;
		struct strbuf folded = STRBUF_INIT, text = STRBUF_INIT;

		if (used[i] || x->res[i].code < 0)
			continue;
		for (size_t j = i; j < nr; j++) {
			if (used[j] || x->res[j].code < 0 ||
			    strcmp(x->res[i].out.buf, x->res[j].out.buf) ||
			    strcmp(x->res[i].err.buf, x->res[j].err.buf))
				continue;
			used[j] = 1;
			strvec_push(&names, ssh_node_target(ssh_pool_node(p, j))->name);
		}
		fold_names(&folded, names.v, names.nr);
		printf("----------------\n%s\n----------------\n", term_str(folded.buf));
		strbuf_addbuf(&text, &x->res[i].out);
		strbuf_addbuf(&text, &x->res[i].err);
		fputs(text.buf, stdout);
		if (text.len && text.buf[text.len - 1] != '\n')
			putchar('\n');
		strvec_clear(&names);
		strbuf_release(&folded);
		strbuf_release(&text);
	}
	free(used);
}

int cmd_exec(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl exec [--nodes SPEC] [--timeout D] [--merge] [--json] -- CMD [ARGS...]", NULL };
	const char *nodes = NULL, *timeout = NULL;
	int merge = 0, json = 0, code = 0;
	struct option opts[] = {
		OPT_STRING(0, "nodes", &nodes, "spec", "only these nodes (host-range syntax)"),
		OPT_STRING('t', "timeout", &timeout, "duration", "per-node command timeout (e.g. 30s)"),
		OPT_BOOL('m', "merge", &merge, "group nodes with identical output (like dshbak -c)"),
		OPT_BOOL(0, "json", &json, "print results as JSON"),
		OPT_END(),
	};
	struct cluster_config *c = &the_cluster.config;
	struct ssh_pool_opts po;
	struct ssh_pool *p;
	struct exec_ctx x = { 0 };
	struct strbuf cmd = STRBUF_INIT;
	size_t *idx = NULL, nr = 0;
	long long timeout_ms = 0;
	int rc;

	argv++;
	argc = parse_options(argc - 1, argv, opts, usage, PARSE_OPT_STOP_AT_NON_OPTION);
	if (argc < 1) {
		error("exec: no command given");
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (timeout && (parse_duration_ms(timeout, &timeout_ms) < 0 || timeout_ms <= 0)) {
		error("--timeout: '%s' is not a duration (e.g. 30s, 5m)", timeout);
		return DT_EXIT_USAGE;
	}
	if (cluster_select(c, nodes, &idx, &nr) < 0) {
		free(idx);
		return DT_EXIT_USAGE;
	}
	/* ~/.dtctl/env.sh (from the setup template) first, quietly, then argv quoted */
	strbuf_addstr(&cmd, "if [ -r .dtctl/env.sh ]; then . ./.dtctl/env.sh >/dev/null 2>&1; fi; ");
	ssh_quote_argv(&cmd, argv);

	cluster_pool_opts(&po, c);
	x.merge = merge;
	x.json = json;
	x.res = xcalloc(nr, sizeof(*x.res));
	for (size_t i = 0; i < nr; i++) {
		strbuf_init(&x.res[i].out, 0);
		strbuf_init(&x.res[i].err, 0);
		strbuf_init(&x.res[i].msg, 0);
	}
	po.on_line = exec_line;
	po.on_tick = progress_tick;
	po.data = &x;
	ssh_catch_signals();
	p = ssh_pool_new(&po);
	cluster_pool_add(p, c, idx, nr);
	for (size_t i = 0; i < nr; i++)
		ssh_exec(ssh_pool_node(p, i), cmd.buf, timeout_ms, SSH_STREAM, exec_done, &x);
	rc = ssh_pool_run(p);
	progress_clear();

	for (size_t i = 0; i < nr; i++) {
		struct ssh_node *n = ssh_pool_node(p, i);
		struct exec_result *e = &x.res[i];

		if (!e->done) {
			e->code = -1;
			strbuf_addstr(&e->msg, ssh_node_error(n) ? ssh_node_error(n) : "did not run");
		}
		if (e->msg.len && !json)
			error("%s", e->msg.buf);
		else if (e->code > 0 && !json)
			/* pdsh's and clush's one line per failing node, so the node is named */
			fprintf(stderr, "%s: exit %d\n", term_str(ssh_node_target(n)->name), e->code);
		code = worst(code, e->code < 0 ? DT_EXIT_UNREACH : e->code);
	}
	if (merge && !json)
		print_merged(p, &x);
	if (json) {
		json_t *arr = json_array();

		for (size_t i = 0; i < nr; i++) {
			struct ssh_node *n = ssh_pool_node(p, i);
			struct exec_result *e = &x.res[i];
			json_t *o = json_object();

			json_object_set_new(o, "node", json_string(ssh_node_target(n)->name));
			json_object_set_new(o, "address", json_string(ssh_node_target(n)->host));
			json_object_set_new(o, "exit_code", e->code < 0 ? json_null() : json_integer(e->code));
			json_object_set_new(o, "stdout", json_string(e->out.buf));
			json_object_set_new(o, "stderr", json_string(e->err.buf));
			json_object_set_new(o, "error", e->msg.len ? json_string(e->msg.buf) : json_null());
			json_object_set_new(o, "elapsed_ms", json_integer(e->ms));
			json_array_append_new(arr, o);
		}
		json_doc_print_key("nodes", arr);
		json_decref(arr);
	}
	for (size_t i = 0; i < nr; i++) {
		strbuf_release(&x.res[i].out);
		strbuf_release(&x.res[i].err);
		strbuf_release(&x.res[i].msg);
	}
	free(x.res);
	ssh_pool_free(p);
	strbuf_release(&cmd);
	free(idx);
	if (rc < 0)
		return DT_EXIT_INTR;
	return code > 255 ? 255 : code;
}
