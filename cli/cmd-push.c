/*
 * cmd-push.c - `dtctl push SRC DEST`: one file to many nodes at once over
 * SFTP (lib/ssh.h), with the source's mode unless --mode; DEST ending in '/'
 * keeps the file's name.  A line per node as it finishes; the exit code is 3
 * if a node could not be reached, 1 if an upload failed.
 */
#include "builtin.h"
#include "cluster-ssh.h"
#include "parse-options.h"
#include "setup.h"
#include "term.h"
#include "units.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct push_ctx {
	int failed, unreachable;
};

static void push_done(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	struct push_ctx *x = arg;

	if (r->error == SSH_OK) {
		struct strbuf d = STRBUF_INIT;

		format_duration_human(&d, r->ms);
		printf("%s: ok (%s)\n", term_str(ssh_node_target(n)->name), d.buf);
		strbuf_release(&d);
		return;
	}
	if (r->error == SSH_E_NODE)
		x->unreachable = 1;
	else
		x->failed = 1;
	progress_clear();
	error("%s", r->message ? r->message : "upload failed");
}

int cmd_push(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl push [--nodes SPEC] [--mode MODE] SRC DEST", NULL };
	const char *nodes = NULL, *mode_s = NULL;
	struct option opts[] = {
		OPT_STRING(0, "nodes", &nodes, "spec", "only these nodes (host-range syntax)"),
		OPT_STRING(0, "mode", &mode_s, "octal", "file mode on the nodes (default: the source's)"),
		OPT_END(),
	};
	struct cluster_config *c = &the_cluster.config;
	struct ssh_pool_opts po;
	struct ssh_pool *p;
	struct push_ctx x = { 0, 0 };
	struct strbuf data = STRBUF_INIT, dest = STRBUF_INIT;
	struct stat st;
	size_t *idx = NULL, nr = 0;
	int mode, rc;

	argv++;
	argc = parse_options(argc - 1, argv, opts, usage, 0);
	if (argc != 2) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (stat(argv[0], &st) < 0 || !S_ISREG(st.st_mode)) {
		error("push: '%s' is not a readable regular file", argv[0]);
		return DT_EXIT_USAGE;
	}
	mode = (int)(st.st_mode & 07777);
	if (mode_s) {
		char *end;
		long m = strtol(mode_s, &end, 8);

		if (*end || m < 0 || m > 07777) {
			error("--mode: '%s' is not an octal mode", mode_s);
			return DT_EXIT_USAGE;
		}
		mode = (int)m;
	}
	if (strbuf_read_file(&data, argv[0], 0) < 0) {
		error_errno("cannot read '%s'", argv[0]);
		return DT_EXIT_USAGE;
	}
	strbuf_addstr(&dest, argv[1]);
	if (ends_with(dest.buf, "/")) {
		const char *base = strrchr(argv[0], '/');

		strbuf_addstr(&dest, base ? base + 1 : argv[0]);
	}
	if (cluster_select(c, nodes, &idx, &nr) < 0) {
		free(idx);
		strbuf_release(&data);
		return DT_EXIT_USAGE;
	}
	cluster_pool_opts(&po, c);
	po.on_tick = progress_tick;
	ssh_catch_signals();
	p = ssh_pool_new(&po);
	cluster_pool_add(p, c, idx, nr);
	for (size_t i = 0; i < nr; i++)
		ssh_upload(ssh_pool_node(p, i), data.buf, data.len, dest.buf, mode, push_done, &x);
	rc = ssh_pool_run(p);
	progress_clear();
	ssh_pool_free(p);
	strbuf_release(&data);
	strbuf_release(&dest);
	free(idx);
	if (rc < 0)
		return DT_EXIT_INTR;
	return x.unreachable ? DT_EXIT_UNREACH : x.failed ? DT_EXIT_FAIL : 0;
}
