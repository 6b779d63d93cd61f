/*
 * sched.h - dtsched, the head service: the node table (heartbeats, UP /
 * SUSPECT / DOWN / DRAINED), what runs where, and its SQLite state.
 *
 * Threads: libmicrohttpd's internal thread runs the handlers; the caller of
 * sched_run() ticks the node state machine every 100 ms.  One mutex guards
 * the in-memory node table and the database handle.
 *
 * State: <home>/state.db (SQLite, WAL), on the head's local disk only:
 * sched_run() refuses a home on a network file system.  Memory is the working
 * copy; the database is written on every change of a node's state or of a
 * task's state, and other node changes are flushed every few seconds in one
 * transaction (inventories and heartbeat times at most once a minute), so a
 * restarted dtsched knows every node and task, and the agents' first
 * heartbeats (which carry their whole task tables) reconcile it with reality.
 */
#ifndef DT_SCHED_H
#define DT_SCHED_H

struct sched_opts {
	const char *home;
	const char *db_path;        /* default <home>/state.db */
	const char *secret;         /* default <home>/secret */
	const char *bind;
	int port;
	long long heartbeat_ms;     /* told to agents (agent.heartbeat) */
	long long dead_after_ms;    /* DOWN after this without heartbeat, SUSPECT after half */
	const char *socket;         /* users' local socket; default from cluster.yaml
				     * (cluster_head_socket(): <home>/dtsched.sock, 0600;
				     * team mode /run/dtctl/<cluster>/dtsched.sock, 0666) */
};

/* Serve until SIGTERM/SIGINT; "ok" or the error goes to *ready_fd (daemon.h). */
int sched_run(const struct sched_opts *o, int *ready_fd);

/* Is this statfs f_type a network file system (NFS, CIFS/SMB, Lustre, ...)? */
int sched_fs_is_network(long f_type);

#endif
