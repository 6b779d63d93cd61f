/*
 * ssh.h - parallel SSH to the cluster's nodes from one process.
 *
 * One struct ssh_pool drives many nodes at once with non-blocking libssh2 and
 * a single poll() loop (no ssh subprocess per node).  Each node is a small
 * state machine:
 *
 *     connect (non-blocking socket) -> handshake -> host key check
 *       -> auth (cluster key, other keys, ssh-agent, password) -> its queue
 *
 * and its queue holds operations: exec a command (stdout, stderr, exit code),
 * upload a file over SFTP (temp name, mode, SHA-256 check, rename), read a
 * small file over SFTP.  Nodes whose host is "local" run the same operations
 * here by direct exec and file I/O, in the same loop.
 *
 * Usage:
 *
 *	struct ssh_pool *p = ssh_pool_new(&opts);
 *	struct ssh_node *n = ssh_pool_add(p, &target);
 *	ssh_exec(n, "uname -r", 0, 0, got_uname, NULL);   // queue work
 *	rc = ssh_pool_run(p);      // until every queue is empty or its node failed
 *	... ssh_node_failed(n), ssh_node_error(n) ...
 *	ssh_pool_free(p);
 *
 * Completion callbacks may queue more operations on any node (that is how a
 * command chains steps or waits for one node before asking the others); a
 * node whose queue drains is disconnected unless opts.keep_sessions.  At most
 * opts.fanout nodes are connecting or working at once.
 *
 * Host keys are always verified against opts.known_hosts; there is no switch
 * to turn that off.  A node that fails (unreachable, bad host key, auth,
 * timeout) is marked failed with one message saying what and what to do; its
 * queued operations are dropped and the other nodes go on.
 *
 * Remote paths: relative paths (and "~/x") are relative to the login
 * directory, for SFTP and exec alike.  Exec runs the command line through the
 * remote user's shell: build it with ssh_quote_argv() or
 * strbuf_add_shell_quoted(), never by pasting user strings.
 */
#ifndef DT_SSH_H
#define DT_SSH_H

#include <signal.h>
#include <stddef.h>
#include "strbuf.h"

struct ssh_pool;
struct ssh_node;

struct ssh_target {
	const char *name;        /* node name: output prefix, messages */
	const char *host;        /* address or hostname; "local" = this machine */
	const char *user;
	int port;
};

enum ssh_op_error {
	SSH_OK = 0,
	SSH_E_FAILED,            /* the operation failed: see message */
	SSH_E_TIMEOUT,           /* it ran past its timeout */
	SSH_E_NOENT,             /* read: no such file */
	SSH_E_NODE,              /* the node failed before or while running it */
};

struct ssh_result {
	enum ssh_op_error error;
	int status;              /* exec: exit code, 128+N for signal N */
	struct strbuf out;       /* exec: stdout; read: the file */
	struct strbuf err;       /* exec: stderr */
	const char *message;     /* when error != SSH_OK */
	long long ms;            /* how long it took */
};

typedef void ssh_done_fn(struct ssh_node *n, struct ssh_result *r, void *arg);

struct ssh_pool_opts {
	int fanout;                     /* nodes at once; default 32 */
	long long connect_timeout_ms;   /* connect + handshake + auth; default 10 s */
	long long command_timeout_ms;   /* default for operations; 0 = none */
	const char *known_hosts;        /* the cluster's known_hosts file (required) */
	int strict;                     /* accept only keys already known */
	int accept_new;                 /* tofu: add new keys without asking */
	int ask_new;                    /* tofu: ask on /dev/tty for each new key
					 * (yes, no, or all: accept the rest too) */
	const char *identity;           /* private key tried first; identity.pub beside it */
	int try_user_keys;              /* also ~/.ssh/id_ed25519, id_ecdsa */
	int try_agent;                  /* also ssh-agent ($SSH_AUTH_SOCK) */
	const char *password;           /* for password/keyboard-interactive, or NULL */
	/* Called (once per pool) when a node needs a password and none was given;
	 * return a string the pool may keep until ssh_pool_free(), or NULL. */
	const char *(*get_password)(void *data);
	int keep_sessions;              /* stay connected when a queue drains */
	/* Output of operations queued with SSH_STREAM, one line at a time. */
	void (*on_line)(struct ssh_node *n, int is_stderr, const char *line, void *data);
	/* A node connected, failed or finished (for progress displays). */
	void (*on_node)(struct ssh_node *n, void *data);
	/* Called about twice a second while running (progress line). */
	void (*on_tick)(struct ssh_pool *p, void *data);
	/* Called before the pool writes to the terminal (a host key question or
	 * note): clear the progress line there; on_tick draws it again. */
	void (*on_prompt)(void *data);
	void *data;
};

/* Flags for ssh_exec(). */
#define SSH_STREAM 1             /* pass output lines to opts.on_line as they come */

struct ssh_pool *ssh_pool_new(const struct ssh_pool_opts *opts);
/* The target's strings are copied. */
struct ssh_node *ssh_pool_add(struct ssh_pool *p, const struct ssh_target *t);
/*
 * Run until no node has work.  Returns 0, or -1 when interrupted
 * (ssh_interrupted was set: partial uploads are removed, children killed).
 */
int ssh_pool_run(struct ssh_pool *p);
/* Disconnect every node and free everything. */
void ssh_pool_free(struct ssh_pool *p);
size_t ssh_pool_count(const struct ssh_pool *p);
struct ssh_node *ssh_pool_node(const struct ssh_pool *p, size_t i);
/* Counts for a progress line. */
void ssh_pool_progress(const struct ssh_pool *p, int *done, int *running, int *failed);

/* Queue an operation.  `cmdline` / `data` / `path` are copied. timeout 0 = pool default. */
void ssh_exec(struct ssh_node *n, const char *cmdline, long long timeout_ms, unsigned flags,
	      ssh_done_fn *cb, void *arg);
/* Write `data` to `path` with `mode`: SFTP to a temp name beside it, SHA-256
 * checked on the node, chmod, then rename (atomic).  The temp is removed on failure. */
void ssh_upload(struct ssh_node *n, const void *data, size_t len, const char *path, int mode,
		ssh_done_fn *cb, void *arg);
/* Read a file of at most `limit` bytes into r->out (SSH_E_NOENT when missing). */
void ssh_read(struct ssh_node *n, const char *path, size_t limit, ssh_done_fn *cb, void *arg);

/* Per-node facts. */
const struct ssh_target *ssh_node_target(const struct ssh_node *n);
size_t ssh_node_index(const struct ssh_node *n);
int ssh_node_failed(const struct ssh_node *n);
/* Why the node failed (one line), or NULL. */
const char *ssh_node_error(const struct ssh_node *n);
/* Mark a node failed from a callback (drops its queue); message is copied. */
void ssh_node_fail(struct ssh_node *n, const char *fmt, ...) DT_PRINTF(2, 3);
/* "known", "new, accepted", "CHANGED", "unknown", "local", "-" */
const char *ssh_node_hostkey_state(const struct ssh_node *n);
/* SHA256 fingerprint of the host key seen, or "". */
const char *ssh_node_fingerprint(const struct ssh_node *n);
/* How it logged in: "key", "agent", "password", "local", or "". */
const char *ssh_node_auth(const struct ssh_node *n);
/* Milliseconds since the node was started (until it finished). */
long long ssh_node_elapsed_ms(const struct ssh_node *n);
void ssh_node_set_data(struct ssh_node *n, void *data);
/*
 * What a node's connections cost: counted by the pool (its socket callbacks
 * and state machine), so a test can hold the protocol to one connection and
 * one key exchange per node.  DTCTL_SSH_TRACE=1 prints them per node on
 * stderr with the time of each phase, when the node finishes or fails.
 */
struct ssh_node_stats {
	int connects;            /* TCP connections made */
	int kex;                 /* SSH handshakes (key exchanges) completed */
	int auth_requests;       /* login attempts (keys, agent, password) */
	int channels;            /* channels opened (one per exec) */
	int round_trips;         /* times data came back after the node had sent */
	long long sent, received;   /* bytes on the socket */
};
const struct ssh_node_stats *ssh_node_stats(const struct ssh_node *n);
void *ssh_node_data(const struct ssh_node *n);

/* Set by the SIGINT/SIGTERM handler ssh_catch_signals() installs. */
extern volatile sig_atomic_t ssh_interrupted;
void ssh_catch_signals(void);

/* ---------------------------------------------------------------- helpers */

/* Append argv as one shell command line, every element quoted where needed. */
void ssh_quote_argv(struct strbuf *sb, const char *const *argv);
/*
 * Merge a public key line into authorized_keys content: out gets old with the
 * key appended (adding a missing final newline first) unless a line already
 * holds the same key type and blob, whatever its options and comment.
 * Returns 1 if out differs from old, 0 if unchanged, -1 for a bad key line.
 */
int ssh_authorized_keys_merge(const char *old, size_t len, const char *pubkey_line,
			      struct strbuf *out);
/* Hex SHA-256 of data (64 chars) into sb. */
void sha256_hex(struct strbuf *sb, const void *data, size_t len);
/*
 * Key type of a public key file / line ("ssh-ed25519"...), or -1.  RSA user
 * keys are refused by callers: libssh2 1.10 signs only with ssh-rsa (SHA-1),
 * which OpenSSH 8.8+ refuses.
 */
int ssh_pubkey_type(const char *pubkey_line, struct strbuf *type);

#endif
