/*
 * cluster-ssh.h - what the SSH commands (init, exec, push, doctor, hosts)
 * share on top of lib/ssh.h (their cluster comes from cli/setup.h): picking nodes
 * with --nodes, pool options from the configuration, the node facts probe
 * (OS, glibc, GPUs, driver, CUDA, NCCL, MPI, clock, interfaces), the progress
 * line and the shared results table.
 */
#ifndef DT_CLUSTER_SSH_H
#define DT_CLUSTER_SSH_H

#include "config.h"
#include "hostrange.h"   /* fold_names() */
#include "ssh.h"
#include "strbuf.h"

/*
 * The node indices named by `spec` (host-range syntax over node names, or
 * NULL for all) into *idx (malloc'ed, also on failure: the caller frees it).
 * -1 with a message for unknown names.
 */
int cluster_select(const struct cluster_config *c, const char *spec, size_t **idx, size_t *nr);

/* Pool options from cluster.yaml: fanout, timeouts, host key policy,
 * known_hosts and identity in dt_home().  Strings point into c / static buffers. */
void cluster_pool_opts(struct ssh_pool_opts *o, const struct cluster_config *c);
/* Path of the cluster's private key (ssh.identity or dt_home()/id_ed25519). */
const char *cluster_identity(const struct cluster_config *c);
/* Add every selected node to the pool, in order; node data = config index. */
void cluster_pool_add(struct ssh_pool *p, const struct cluster_config *c,
		      const size_t *idx, size_t nr);
/* The config index stored by cluster_pool_add(). */
size_t cluster_node_index(const struct ssh_node *n);

/*
 * The address node n's agent sends heartbeats to: head.address, else this
 * machine's address on the route to the node (lib/netif.h; "127.0.0.1" for
 * a local node or when there is none).
 */
void cluster_head_address(const struct cluster_config *c, const struct cluster_node *n,
			  int local, struct strbuf *out);

/* The facts probe: a remote sh command printing key=value lines (see .c). */
void facts_command(struct strbuf *cmd, const char *shared_dir);
/* Parse its output into kv (keys: hostname os kernel glibc gpus driver cuda nccl
 * mpi time nproc shared ifaces ...). */
void facts_parse(struct kvlist *kv, const char *out);

/* Progress line on stderr (TTY only), as an ssh_pool_opts.on_tick. */
void progress_tick(struct ssh_pool *p, void *data);
void progress_clear(void);
/* ssh_pool_opts.on_prompt (cluster_pool_opts() sets it): progress_clear() */
void progress_prompt(void *data);
int progress_enabled(void);

/* Read a password: --password-file, else $DTCTL_PASSWORD; NULL if neither. */
char *password_from(const char *file);
/* Prompt on /dev/tty without echo (get_password callback); NULL without a TTY. */
const char *password_prompt(void *data);


#endif
