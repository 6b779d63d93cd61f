/*
 * agents.h - starting, stopping and checking dtagent on the cluster's nodes
 * (`dtctl agents`, and the last step of `dtctl init`).
 *
 * On every selected node, in parallel through the SSH pool (lib/ssh.h; the
 * `host: local` node is run by direct exec, no SSH): a systemd user unit
 * (templates/dtagent.service) where a systemd user instance runs, otherwise
 * `dtagent --daemon`, which returns once the agent serves.  The agent gets
 * --head (cluster.yaml head.address, or the head's address on the route to
 * the node), --port agent.port, --name, --heartbeat-ms and --gpus N when
 * the node's gpus: is a number.  dtsched is started first (cli/head.h) so the
 * first heartbeats have somewhere to go.  DTCTL_NO_SYSTEMD=1 skips systemd.
 */
#ifndef DT_CLI_AGENTS_H
#define DT_CLI_AGENTS_H

#include "config.h"
#include "strbuf.h"

enum agents_action { AGENTS_START, AGENTS_STOP, AGENTS_RESTART, AGENTS_STATUS };

/*
 * Run `action` on the nodes of nodes_spec (host-range syntax over node names;
 * NULL = all).  Prints one line per node.  Returns 0 when every node
 * succeeded, else a DT_EXIT code (1 some failed, 3 unreachable).
 */
int agents_run(const struct cluster_config *c, const char *nodes_spec,
	       enum agents_action action, int json);
/* The same as agents_run(c, nodes_spec, AGENTS_START, 0): for `dtctl init`. */
int agents_start(const struct cluster_config *c, const char *nodes_spec);

/* The shell command doing `action` for node i (init may queue it on its own pool). */
void agents_command(struct strbuf *cmd, const struct cluster_config *c, size_t i,
		    enum agents_action action);

#endif
