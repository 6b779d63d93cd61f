/*
 * ssh.c - the parallel SSH engine (see ssh.h for the model and the API).
 *
 * Everything happens in ssh_pool_run(): top up to `fanout` nodes, step every
 * active node's state machine until libssh2 says EAGAIN, poll() on the
 * directions libssh2_session_block_directions() reports (and on the pipes of
 * local children), then enforce deadlines and redraw progress.  A node's
 * state machine only ever moves forward; each step function returns when it
 * would block.  Nothing here exits or prints except the host key question
 * and the notes about accepted keys (stderr).
 */
#include "ssh.h"
#include "knownhosts.h"
#include "log.h"
#include "run-command.h"
#include "term.h"
#include "usage.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <libssh2.h>
#include <libssh2_sftp.h>
#include "sha256.h"
#include "ssh-dl.h"   /* after libssh2.h: its calls go through dlopen */

#define OUTPUT_LIMIT (64u << 20)   /* captured output per operation */
#define WRITE_CHUNK (128u << 10)
#define CLOSE_GRACE_MS 3000

volatile sig_atomic_t ssh_interrupted;

enum op_kind { OP_EXEC, OP_UPLOAD, OP_READ };

enum op_phase {
	P_START,
	P_SFTP_INIT,
	P_OPEN,
	P_WRITE,
	P_READ,
	P_CLOSE,
	P_UNLINK,
	P_CH_OPEN,
	P_CH_EXEC,
	P_CH_IO,
	P_CH_CLOSE,
	P_CH_WAIT,
	P_CH_FREE,
	P_LOCAL_IO,
	P_LOCAL_WAIT,
	P_FINISHED,
};

struct ssh_op {
	enum op_kind kind;
	enum op_phase phase;
	char *cmd;                 /* exec, or the upload's finalising command */
	char *path, *tmp;
	unsigned char *data;
	size_t len, off, limit;
	int mode;
	unsigned flags;
	int finalizing;            /* upload: running the check+rename command */
	int wrapped;               /* exec: runs under timeout(1) on the node */
	int timed_out;
	int failed;                /* upload/read: going through cleanup */
	long long timeout_ms, started, deadline;
	ssh_done_fn *cb;
	void *arg;
	struct ssh_op *next;
	LIBSSH2_CHANNEL *ch;
	LIBSSH2_SFTP_HANDLE *fh;
	struct strbuf line[2];
	struct strbuf msg;
	struct ssh_result res;
	struct child_process cp;   /* local exec */
	int lfd[2];
};

/* The phases DTCTL_SSH_TRACE times, each the first time a node reaches it. */
enum trace_phase {
	T_START, T_TCP, T_BANNER, T_KEX, T_HOSTKEY, T_AUTH, T_CHANNEL, T_EXEC, T_EOF, T_EXIT,
	T_DONE, T_NR
};
static const char *const trace_names[T_NR] = {
	"start", "tcp", "banner", "kex", "hostkey", "auth", "channel", "exec", "eof", "exit", "done",
};

enum node_state {
	N_PENDING,      /* has not started (or disconnected, with no work) */
	N_CONNECTING,
	N_HANDSHAKE,
	N_AUTH_LIST,
	N_AUTH_KEY,
	N_AUTH_AGENT,
	N_AUTH_PASSWORD,
	N_READY,        /* logged in: runs its queue */
	N_FAILED,
};

struct ssh_node {
	struct ssh_pool *pool;
	size_t index;
	struct ssh_target t;
	int local;
	enum node_state state;
	int connected_once;
	int fd;
	struct addrinfo *ai, *ai_next;
	LIBSSH2_SESSION *s;
	LIBSSH2_SFTP *sftp;
	struct ssh_op *head, *tail;
	char *error;
	const char *hostkey_state;
	struct strbuf fingerprint;
	const char *auth;
	char *methods;
	size_t key_idx;
	int tried_password;
	long long started, finished, deadline;
	void *data;
	struct ssh_node_stats st;
	int sent_last;             /* the socket's last transfer was a send */
	long long ph[T_NR];        /* µs (monotonic) when it first reached each phase */
};

struct ssh_pool {
	struct ssh_pool_opts o;
	struct ssh_node **nodes;
	size_t nr, alloc;
	struct known_hosts kh;
	int kh_error;
	struct strvec keys;        /* private keys to try, in order */
	char *password;
	int asked_password;
	int accepted_all;          /* 'all' was answered at a host key question */
	long long password_held;   /* since when the password question waits (password_later) */
	long long last_tick;
};

static long long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void mark(struct ssh_node *n, enum trace_phase ph)
{
	if (!n->ph[ph])
		n->ph[ph] = now_us();
}

static long long now_ms(void)
{
	return dt_mono_ms();
}

/* ------------------------------------------------------------------ helpers */

static int shell_safe(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("_@%+=:,./-", *s))
			return 0;
	return 1;
}

void ssh_quote_argv(struct strbuf *sb, const char *const *argv)
{
	for (size_t i = 0; argv[i]; i++) {
		if (i)
			strbuf_addch(sb, ' ');
		if (shell_safe(argv[i]))
			strbuf_addstr(sb, argv[i]);
		else
			strbuf_add_shell_quoted(sb, argv[i]);
	}
}

void sha256_hex(struct strbuf *sb, const void *data, size_t len)
{
	unsigned char md[DT_SHA256_LEN];

	dt_sha256(data, len, md);
	for (unsigned int i = 0; i < sizeof(md); i++)
		strbuf_addf(sb, "%02x", md[i]);
}

/* Split a public key line "type base64 [comment]" into its first two fields. */
/* Append the next blank-separated word of *p to out and move past it; -1 if none. */
static int next_word(const char **p, struct strbuf *out)
{
	const char *q;

	while (**p == ' ' || **p == '\t')
		(*p)++;
	for (q = *p; *q && !isspace((unsigned char)*q); q++)
		;
	if (q == *p)
		return -1;
	strbuf_add(out, *p, (size_t)(q - *p));
	*p = q;
	return 0;
}

static int pubkey_fields(const char *line, struct strbuf *type, struct strbuf *b64)
{
	return next_word(&line, type) < 0 || next_word(&line, b64) < 0 ? -1 : 0;
}

int ssh_pubkey_type(const char *pubkey_line, struct strbuf *type)
{
	struct strbuf b64 = STRBUF_INIT;
	int ret = pubkey_fields(pubkey_line, type, &b64);

	strbuf_release(&b64);
	return ret;
}

/* Does this authorized_keys line hold key (type, b64)?  Options may come first. */
static int line_has_key(const char *line, size_t len, const char *type, const char *b64)
{
	char *copy = xstrndup(line, len), *save = NULL, *tok, *prev = NULL;
	int found = 0;

	for (tok = strtok_r(copy, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		if (prev && !strcmp(prev, type) && !strcmp(tok, b64)) {
			found = 1;
			break;
		}
		prev = tok;
	}
	free(copy);
	return found;
}

int ssh_authorized_keys_merge(const char *old, size_t len, const char *pubkey_line,
			      struct strbuf *out)
{
	struct strbuf type = STRBUF_INIT, b64 = STRBUF_INIT, line = STRBUF_INIT;
	const char *p = old, *end = old + len;
	int ret = 1;

	if (pubkey_fields(pubkey_line, &type, &b64) < 0) {
		ret = -1;
		goto out;
	}
	strbuf_add(out, old, len);
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

		if (line_has_key(p, n, type.buf, b64.buf)) {
			ret = 0;
			goto out;
		}
		p = nl ? nl + 1 : end;
	}
	if (out->len && out->buf[out->len - 1] != '\n')
		strbuf_addch(out, '\n');
	strbuf_addstr(&line, pubkey_line);
	strbuf_rtrim(&line);
	strbuf_addbuf(out, &line);
	strbuf_addch(out, '\n');
out:
	strbuf_release(&type);
	strbuf_release(&b64);
	strbuf_release(&line);
	return ret;
}

static void on_signal(int sig)
{
	(void)sig;
	ssh_interrupted = 1;
}

void ssh_catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0;	/* no SA_RESTART: poll() must return EINTR */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* Remote paths: "~/x" means "x" relative to the login directory. */
static char *remote_path(const char *path)
{
	if (!strcmp(path, "~"))
		return xstrdup(".");
	if (starts_with(path, "~/"))
		return xstrdup(path + 2);
	return xstrdup(path);
}

static void local_path(struct strbuf *sb, const char *rel)
{
	const char *home = getenv("HOME");

	if (rel[0] == '/' || !home)
		strbuf_addstr(sb, rel);
	else
		strbuf_addf(sb, "%s/%s", home, rel);
}

/* --------------------------------------------------------------- the pool */

static int key_is_usable(const char *priv, struct strbuf *why)
{
	struct strbuf pub = STRBUF_INIT, content = STRBUF_INIT, type = STRBUF_INIT;
	int ok = 0;

	strbuf_addf(&pub, "%s.pub", priv);
	if (access(priv, R_OK) < 0 || strbuf_read_file(&content, pub.buf, 64 << 10) < 0)
		goto out;
	if (ssh_pubkey_type(content.buf, &type) < 0)
		goto out;
	if (!strcmp(type.buf, "ssh-rsa") || !strcmp(type.buf, "ssh-dss")) {
		if (why)
			strbuf_addf(why, "'%s' is an %s key: libssh2 1.10 signs only with "
				    "ssh-rsa (SHA-1), which OpenSSH 8.8+ refuses", priv, type.buf);
		goto out;
	}
	ok = 1;
out:
	strbuf_release(&pub);
	strbuf_release(&content);
	strbuf_release(&type);
	return ok;
}

struct ssh_pool *ssh_pool_new(const struct ssh_pool_opts *opts)
{
	struct ssh_pool *p = xcalloc(1, sizeof(*p));
	const char *home = getenv("HOME");

	libssh2_init(0);
	p->o = *opts;
	if (p->o.fanout <= 0)
		p->o.fanout = 32;
	if (p->o.connect_timeout_ms <= 0)
		p->o.connect_timeout_ms = 10000;
	p->o.known_hosts = xstrdup(opts->known_hosts);
	if (opts->password)
		p->password = xstrdup(opts->password);
	strvec_init(&p->keys);
	if (opts->identity && key_is_usable(opts->identity, NULL))
		strvec_push(&p->keys, opts->identity);
	if (opts->try_user_keys && home) {
		static const char *names[] = { "id_ed25519", "id_ecdsa" };

		for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
			struct strbuf k = STRBUF_INIT;

			strbuf_addf(&k, "%s/.ssh/%s", home, names[i]);
			if (key_is_usable(k.buf, NULL) && strvec_find(&p->keys, k.buf) < 0)
				strvec_push(&p->keys, k.buf);
			strbuf_release(&k);
		}
	}
	if (known_hosts_load(&p->kh, p->o.known_hosts) < 0)
		p->kh_error = 1;
	return p;
}

struct ssh_node *ssh_pool_add(struct ssh_pool *p, const struct ssh_target *t)
{
	struct ssh_node *n = xcalloc(1, sizeof(*n));

	n->pool = p;
	n->index = p->nr;
	n->t.name = xstrdup(t->name);
	n->t.host = xstrdup(t->host);
	n->t.user = xstrdup(t->user ? t->user : "");
	n->t.port = t->port > 0 ? t->port : 22;
	n->local = !strcmp(t->host, "local");
	n->fd = -1;
	n->hostkey_state = "-";
	n->auth = "";
	strbuf_init(&n->fingerprint, 0);
	ALLOC_GROW(p->nodes, p->nr + 1, p->alloc);
	p->nodes[p->nr++] = n;
	return n;
}

size_t ssh_pool_count(const struct ssh_pool *p) { return p->nr; }
struct ssh_node *ssh_pool_node(const struct ssh_pool *p, size_t i) { return p->nodes[i]; }
const struct ssh_target *ssh_node_target(const struct ssh_node *n) { return &n->t; }
size_t ssh_node_index(const struct ssh_node *n) { return n->index; }
int ssh_node_failed(const struct ssh_node *n) { return n->state == N_FAILED; }
const char *ssh_node_error(const struct ssh_node *n) { return n->error; }
const char *ssh_node_hostkey_state(const struct ssh_node *n) { return n->hostkey_state; }
const char *ssh_node_fingerprint(const struct ssh_node *n) { return n->fingerprint.buf; }
const char *ssh_node_auth(const struct ssh_node *n) { return n->auth; }
void ssh_node_set_data(struct ssh_node *n, void *data) { n->data = data; }
void *ssh_node_data(const struct ssh_node *n) { return n->data; }

long long ssh_node_elapsed_ms(const struct ssh_node *n)
{
	if (!n->started)
		return 0;
	return (n->finished ? n->finished : now_ms()) - n->started;
}

const struct ssh_node_stats *ssh_node_stats(const struct ssh_node *n) { return &n->st; }

/* DTCTL_SSH_TRACE=1: one stderr line per node as it finishes or fails. */
static void trace_node(struct ssh_node *n)
{
	static int on = -1;
	struct strbuf sb = STRBUF_INIT;

	if (on < 0) {
		const char *e = getenv("DTCTL_SSH_TRACE");

		on = e && *e && strcmp(e, "0");
	}
	if (!on || n->local)
		return;
	mark(n, T_DONE);
	strbuf_addf(&sb, "%s: ssh trace %s:", dt_progname(), term_str(n->t.name));
	for (int i = T_TCP; i < T_NR; i++)
		if (n->ph[i] && n->ph[T_START])
			strbuf_addf(&sb, " %s %.1f", trace_names[i],
				    (n->ph[i] - n->ph[T_START]) / 1000.0);
	strbuf_addf(&sb, " ms; connects %d kex %d auth_requests %d channels %d round_trips %d "
		    "sent %lld received %lld\n", n->st.connects, n->st.kex, n->st.auth_requests,
		    n->st.channels, n->st.round_trips, n->st.sent, n->st.received);
	fputs(sb.buf, stderr);
	strbuf_release(&sb);
}

static int node_busy(const struct ssh_node *n)
{
	return n->state != N_FAILED && (n->head || (n->state > N_PENDING && n->state < N_READY));
}

void ssh_pool_progress(const struct ssh_pool *p, int *done, int *running, int *failed)
{
	*done = *running = *failed = 0;
	for (size_t i = 0; i < p->nr; i++) {
		const struct ssh_node *n = p->nodes[i];

		if (n->state == N_FAILED)
			(*failed)++;
		else if (node_busy(n) && n->started)
			(*running)++;
		else if (n->started)
			(*done)++;
	}
}

/* ------------------------------------------------------------- operations */

static struct ssh_op *op_new(struct ssh_node *n, enum op_kind kind, ssh_done_fn *cb, void *arg)
{
	struct ssh_op *op = xcalloc(1, sizeof(*op));

	op->kind = kind;
	op->cb = cb;
	op->arg = arg;
	op->lfd[0] = op->lfd[1] = -1;
	strbuf_init(&op->line[0], 0);
	strbuf_init(&op->line[1], 0);
	strbuf_init(&op->msg, 0);
	strbuf_init(&op->res.out, 0);
	strbuf_init(&op->res.err, 0);
	child_process_init(&op->cp);
	op->timeout_ms = n->pool->o.command_timeout_ms;
	return op;
}

static void op_free(struct ssh_op *op)
{
	free(op->cmd);
	free(op->path);
	free(op->tmp);
	free(op->data);
	strbuf_release(&op->line[0]);
	strbuf_release(&op->line[1]);
	strbuf_release(&op->msg);
	strbuf_release(&op->res.out);
	strbuf_release(&op->res.err);
	child_process_clear(&op->cp);
	free(op);
}

static void op_queue(struct ssh_node *n, struct ssh_op *op)
{
	if (n->state == N_FAILED) {	/* dropped: see ssh.h */
		op_free(op);
		return;
	}
	if (n->tail)
		n->tail->next = op;
	else
		n->head = op;
	n->tail = op;
}

void ssh_exec(struct ssh_node *n, const char *cmdline, long long timeout_ms, unsigned flags,
	      ssh_done_fn *cb, void *arg)
{
	struct ssh_op *op = op_new(n, OP_EXEC, cb, arg);

	op->cmd = xstrdup(cmdline);
	op->flags = flags;
	if (timeout_ms > 0)
		op->timeout_ms = timeout_ms;
	op_queue(n, op);
}

void ssh_upload(struct ssh_node *n, const void *data, size_t len, const char *path, int mode,
		ssh_done_fn *cb, void *arg)
{
	static unsigned seq;
	struct ssh_op *op = op_new(n, OP_UPLOAD, cb, arg);
	struct strbuf tmp = STRBUF_INIT;

	op->data = xmalloc(len ? len : 1);
	if (len)
		memcpy(op->data, data, len);
	op->len = len;
	op->path = remote_path(path);
	op->mode = mode;
	strbuf_addf(&tmp, "%s.dtctl-tmp.%ld.%u", op->path, (long)getpid(), seq++);
	op->tmp = strbuf_detach(&tmp, NULL);
	op_queue(n, op);
}

void ssh_read(struct ssh_node *n, const char *path, size_t limit, ssh_done_fn *cb, void *arg)
{
	struct ssh_op *op = op_new(n, OP_READ, cb, arg);

	op->path = remote_path(path);
	op->limit = limit ? limit : OUTPUT_LIMIT;
	op_queue(n, op);
}

/* Pop the current operation and report it. */
static void op_complete(struct ssh_node *n, enum ssh_op_error e)
{
	struct ssh_op *op = n->head;

	n->head = op->next;
	if (!n->head)
		n->tail = NULL;
	op->res.error = e;
	op->res.message = op->msg.len ? op->msg.buf : NULL;
	op->res.ms = op->started ? now_ms() - op->started : 0;
	/* flush partial lines */
	for (int i = 0; i < 2; i++)
		if (op->line[i].len && (op->flags & SSH_STREAM) && n->pool->o.on_line)
			n->pool->o.on_line(n, i, op->line[i].buf, n->pool->o.data);
	if (op->cb)
		op->cb(n, &op->res, op->arg);
	op_free(op);
}

static void op_failf(struct ssh_op *op, const char *fmt, ...) DT_PRINTF(2, 3);
static void op_failf(struct ssh_op *op, const char *fmt, ...)
{
	va_list ap;

	strbuf_reset(&op->msg);
	va_start(ap, fmt);
	strbuf_vaddf(&op->msg, fmt, ap);
	va_end(ap);
}

static const char *session_error(struct ssh_node *n)
{
	char *msg = NULL;

	if (!n->s)
		return "no session";
	libssh2_session_last_error(n->s, &msg, NULL, 0);
	return msg && *msg ? msg : "unknown libssh2 error";
}

static void node_close(struct ssh_node *n, int graceful)
{
	if (n->sftp) {
		if (graceful) {
			libssh2_session_set_blocking(n->s, 1);
			libssh2_session_set_timeout(n->s, 1000);
		}
		libssh2_sftp_shutdown(n->sftp);
		n->sftp = NULL;
	}
	if (n->s) {
		libssh2_session_set_blocking(n->s, 1);
		libssh2_session_set_timeout(n->s, 1000);
		if (graceful)
			libssh2_session_disconnect(n->s, "dtctl done");
		libssh2_session_free(n->s);
		n->s = NULL;
	}
	if (n->fd >= 0) {
		close(n->fd);
		n->fd = -1;
	}
	if (n->ai) {
		freeaddrinfo(n->ai);
		n->ai = n->ai_next = NULL;
	}
}

/* Remove a half-written upload (blocking, bounded): used on failure and interrupt. */
static void op_cleanup_remote(struct ssh_node *n, struct ssh_op *op)
{
	if (n->local) {
		if (op->cp.pid > 0) {
			kill(-op->cp.pid, SIGKILL);
			waitpid(op->cp.pid, NULL, 0);
			op->cp.pid = 0;
		}
		for (int i = 0; i < 2; i++)
			if (op->lfd[i] >= 0) {
				close(op->lfd[i]);
				op->lfd[i] = -1;
			}
		return;
	}
	if (!n->s)
		return;
	libssh2_session_set_blocking(n->s, 1);
	libssh2_session_set_timeout(n->s, 2000);
	if (op->fh) {
		libssh2_sftp_close_handle(op->fh);
		op->fh = NULL;
	}
	if (op->ch) {
		libssh2_channel_free(op->ch);
		op->ch = NULL;
	}
	if (op->kind == OP_UPLOAD && op->phase >= P_OPEN && n->sftp)
		libssh2_sftp_unlink(n->sftp, op->tmp);
	libssh2_session_set_blocking(n->s, 0);
	libssh2_session_set_timeout(n->s, 0);
}

static void node_fail_v(struct ssh_node *n, const char *fmt, va_list ap) DT_PRINTF(2, 0);
static void node_fail_v(struct ssh_node *n, const char *fmt, va_list ap)
{
	struct strbuf sb = STRBUF_INIT;

	if (n->state == N_FAILED)
		return;
	strbuf_vaddf(&sb, fmt, ap);
	free(n->error);
	n->error = strbuf_detach(&sb, NULL);
	if (n->head)
		op_cleanup_remote(n, n->head);
	n->state = N_FAILED;
	n->finished = now_ms();
	node_close(n, 0);
	trace_node(n);
	/* every queued operation learns once that it will not run */
	while (n->head) {
		strbuf_reset(&n->head->msg);
		strbuf_addstr(&n->head->msg, n->error);
		op_complete(n, SSH_E_NODE);
	}
	if (n->pool->o.on_node)
		n->pool->o.on_node(n, n->pool->o.data);
}

void ssh_node_fail(struct ssh_node *n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	node_fail_v(n, fmt, ap);
	va_end(ap);
}

#define node_fail ssh_node_fail

/* Add `ms` to every deadline: time spent waiting for the user at a prompt. */
static void pool_shift(struct ssh_pool *p, long long ms)
{
	for (size_t i = 0; i < p->nr; i++) {
		struct ssh_node *n = p->nodes[i];

		n->deadline += ms;
		if (n->head && n->head->deadline)
			n->head->deadline += ms;
	}
}

/* ------------------------------------------------------------- host keys */

enum answer { ANSWER_NO, ANSWER_YES, ANSWER_ALL };

/* yes, no, or all (accept this key and every new one after it) */
static enum answer ask_new_key(const char *question)
{
	FILE *tty = fopen("/dev/tty", "r+");
	struct strbuf safe = STRBUF_INIT;   /* it names a node and its key type */
	char answer[64];
	enum answer a = ANSWER_NO;

	if (!tty)
		return ANSWER_NO;
	term_sanitize(&safe, question, strlen(question), TERM_KEEP_NL);
	for (;;) {
		fputs(safe.buf, tty);
		fflush(tty);
		if (!fgets(answer, sizeof(answer), tty))
			break;
		answer[strcspn(answer, "\r\n")] = '\0';
		if (!strcasecmp(answer, "yes") || !strcasecmp(answer, "y")) {
			a = ANSWER_YES;
			break;
		}
		if (!strcasecmp(answer, "all") || !strcasecmp(answer, "a")) {
			a = ANSWER_ALL;
			break;
		}
		if (!strcasecmp(answer, "no") || !strcasecmp(answer, "n"))
			break;
		fputs("please type 'yes', 'no' or 'all': ", tty);
	}
	fclose(tty);
	strbuf_release(&safe);
	return a;
}

/*
 * The password question waits while another node has its host key still to
 * come (its question or its "accepted" note), up to PASSWORD_HOLD_MS: on a
 * terminal the host key lines come first, then the one question, never a
 * note in the middle of it.  1: not yet (the node stays where it is).
 */
#define PASSWORD_HOLD_MS 5000

static int password_later(struct ssh_pool *p, struct ssh_node *n)
{
	long long now = now_ms();

	if (!p->o.ask_new && !p->o.accept_new)
		return 0;       /* no host key lines to wait for */
	if (!p->password_held)
		p->password_held = now;
	if (now - p->password_held >= PASSWORD_HOLD_MS)
		return 0;
	for (size_t i = 0; i < p->nr; i++) {
		const struct ssh_node *o = p->nodes[i];

		if (o != n && (o->state == N_CONNECTING || o->state == N_HANDSHAKE)) {
			n->deadline = now + p->o.connect_timeout_ms;   /* waiting is not its fault */
			return 1;
		}
	}
	return 0;
}

static void before_prompt(struct ssh_pool *p)
{
	if (p->o.on_prompt)
		p->o.on_prompt(p->o.data);
}

/* Returns 0 to go on, -1 when the node was failed. */
static int check_host_key(struct ssh_node *n)
{
	struct ssh_pool *p = n->pool;
	struct strbuf name = STRBUF_INIT, type = STRBUF_INIT, q = STRBUF_INIT;
	const struct known_host *found = NULL;
	size_t len = 0;
	int ktype = 0, ret = -1;
	const unsigned char *key = (const unsigned char *)libssh2_session_hostkey(n->s, &len, &ktype);

	if (!key || !len) {
		node_fail(n, "%s: no host key from %s:%d", n->t.name, n->t.host, n->t.port);
		goto out;
	}
	known_hosts_name(&name, n->t.host, n->t.port);
	strbuf_reset(&n->fingerprint);
	ssh_fingerprint(&n->fingerprint, key, len);
	ssh_blob_type(&type, key, len);
	switch (known_hosts_check(&p->kh, name.buf, key, len, &found)) {
	case KH_MATCH:
		n->hostkey_state = "known";
		ret = 0;
		goto out;
	case KH_REVOKED:
		n->hostkey_state = "REVOKED";
		node_fail(n, "%s: host key %s of %s is marked @revoked in %s; refusing to connect",
			  n->t.name, n->fingerprint.buf, name.buf, p->o.known_hosts);
		goto out;
	case KH_MISMATCH: {
		struct strbuf old = STRBUF_INIT;

		ssh_fingerprint(&old, found->blob, found->blob_len);
		n->hostkey_state = "CHANGED";
		node_fail(n, "%s: HOST KEY CHANGED for %s: known %s %s, offered %s %s; "
			  "someone may be intercepting the connection, or the node was reinstalled: "
			  "check with its administrator, then run 'dtctl hosts forget %s' and 'dtctl init'",
			  n->t.name, name.buf, found->keytype, old.buf, type.buf,
			  n->fingerprint.buf, n->t.name);
		strbuf_release(&old);
		goto out;
	}
	case KH_NOT_FOUND:
		break;
	}
	if (p->o.strict) {
		n->hostkey_state = "unknown";
		node_fail(n, "%s: host key of %s is not known (%s %s) and ssh.host_key_policy is strict; "
			  "import it with 'dtctl hosts import' or check the fingerprint and use "
			  "host_key_policy: tofu", n->t.name, name.buf, type.buf, n->fingerprint.buf);
		goto out;
	}
	if (!p->o.accept_new) {
		long long t0 = now_ms();
		enum answer a = ANSWER_NO;

		if (p->o.ask_new) {
			strbuf_addf(&q, "new host key for node '%s' (%s):\n  %s key fingerprint is %s\n"
				    "accept and remember it in %s? (yes/no/all: all accepts the "
				    "other new keys of this run too, printing each): ", n->t.name,
				    name.buf, type.buf, n->fingerprint.buf, p->o.known_hosts);
			before_prompt(p);
			a = ask_new_key(q.buf);
			pool_shift(p, now_ms() - t0);
		}
		if (a == ANSWER_NO) {
			n->hostkey_state = "new, refused";
			node_fail(n, "%s: new host key for %s: %s %s was not accepted%s; check the "
				  "fingerprint on the node (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), "
				  "then re-run with --accept-new-hosts, or import it with 'dtctl hosts import'",
				  n->t.name, name.buf, type.buf, n->fingerprint.buf,
				  p->o.ask_new ? "" : " (no terminal to ask on)");
			goto out;
		}
		if (a == ANSWER_ALL) {
			/* the rest of this run: new keys only; a changed one still fails above */
			p->o.accept_new = 1;
			p->accepted_all = 1;
		}
	} else {
		before_prompt(p);
		fprintf(stderr, "%s: %s: new host key %s %s accepted (%s)\n",
			dt_progname(), term_str(n->t.name), term_str(type.buf), n->fingerprint.buf,
			p->accepted_all ? "answered 'all'" : "--accept-new-hosts");
	}
	known_hosts_add(&p->kh, name.buf, key, len);
	if (known_hosts_save(&p->kh, p->o.known_hosts) < 0) {
		node_fail(n, "%s: cannot save host key to '%s'", n->t.name, p->o.known_hosts);
		goto out;
	}
	n->hostkey_state = "new, accepted";
	ret = 0;
out:
	strbuf_release(&name);
	strbuf_release(&type);
	strbuf_release(&q);
	return ret;
}

/* ----------------------------------------------------------- connecting */

static void node_start(struct ssh_node *n)
{
	struct addrinfo hints;
	char port[16];
	int rc;

	if (!n->started)
		n->started = now_ms();
	mark(n, T_START);
	n->finished = 0;
	n->deadline = now_ms() + n->pool->o.connect_timeout_ms;
	if (n->local) {
		n->state = N_READY;
		n->hostkey_state = "local";
		n->auth = "local";
		return;
	}
	if (n->pool->kh_error) {
		node_fail(n, "%s: cannot read known hosts '%s'", n->t.name, n->pool->o.known_hosts);
		return;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(port, sizeof(port), "%d", n->t.port);
	rc = getaddrinfo(n->t.host, port, &hints, &n->ai);
	if (rc) {
		node_fail(n, "%s: cannot resolve '%s': %s", n->t.name, n->t.host, gai_strerror(rc));
		return;
	}
	n->ai_next = n->ai;
	n->state = N_CONNECTING;
	n->fd = -1;
}

/* Start a connect to the next address; 1 started, 0 none left. */
static int connect_next(struct ssh_node *n, int *last_errno)
{
	while (n->ai_next) {
		struct addrinfo *a = n->ai_next;
		int one = 1;

		n->ai_next = a->ai_next;
		n->fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
		if (n->fd < 0) {
			*last_errno = errno;
			continue;
		}
		setsockopt(n->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(n->fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
			n->st.connects++;
			return 1;
		}
		*last_errno = errno;
		close(n->fd);
		n->fd = -1;
	}
	return 0;
}

/*
 * Append to out each method of the comma list `want` that libssh2 supports
 * (algs[i], not yet used[i]).  libssh2_session_method_pref() strips an
 * unsupported name itself, but with an overlapping memcpy (undefined: ASan
 * reports it), so it is only ever given names it supports, once each.
 */
static void add_supported(struct strbuf *out, const char *want, const char **algs, int nr,
			  char *used)
{
	while (*want) {
		size_t len = strcspn(want, ",");

		for (int i = 0; i < nr; i++) {
			if (used[i] || strlen(algs[i]) != len || strncmp(algs[i], want, len))
				continue;
			strbuf_addf(out, "%s%s", out->len ? "," : "", algs[i]);
			used[i] = 1;
			break;
		}
		want += len;
		if (*want == ',')
			want++;
	}
}

static void set_hostkey_prefs(struct ssh_node *n)
{
	static const char defaults[] = "ssh-ed25519,ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,"
				       "ecdsa-sha2-nistp521,rsa-sha2-512,rsa-sha2-256,ssh-rsa";
	struct strbuf name = STRBUF_INIT, known = STRBUF_INIT, prefs = STRBUF_INIT;
	const char **algs = NULL;
	char *used;
	int nr = libssh2_session_supported_algs(n->s, LIBSSH2_METHOD_HOSTKEY, &algs);

	if (nr <= 0)
		return;   /* cannot tell: libssh2's own default order */
	/* Like OpenSSH: ask first for the key types we already know for the host,
	 * so a host with several keys is checked against the one on file. */
	used = xcalloc((size_t)nr, 1);
	known_hosts_name(&name, n->t.host, n->t.port);
	known_hosts_types(&n->pool->kh, name.buf, &known);
	add_supported(&prefs, known.buf, algs, nr, used);
	add_supported(&prefs, defaults, algs, nr, used);
	if (prefs.len)
		libssh2_session_method_pref(n->s, LIBSSH2_METHOD_HOSTKEY, prefs.buf);
	libssh2_free(n->s, (void *)algs);
	free(used);
	strbuf_release(&name);
	strbuf_release(&known);
	strbuf_release(&prefs);
}

/*
 * The socket calls libssh2 makes (its own are the same recv()/send() with
 * errors as -errno), counted: bytes, and a round trip each time data comes
 * back after the node sent something.
 */
static LIBSSH2_SEND_FUNC(count_send)
{
	struct ssh_node *n = *abstract;
	ssize_t r = send(socket, buffer, length, flags);

	if (r < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	n->st.sent += r;
	if (r)
		n->sent_last = 1;
	return r;
}

static LIBSSH2_RECV_FUNC(count_recv)
{
	struct ssh_node *n = *abstract;
	ssize_t r = recv(socket, buffer, length, flags);

	if (r < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	if (r > 0) {
		int one = 1;

		/* ack at once: sshd does not set TCP_NODELAY for a command without a
		 * tty, so a second small message it sends (the channel confirmation
		 * after its hostkeys notice, the exit status after the exec reply)
		 * waits for our ack of the first, which Linux would delay ~40 ms.
		 * The kernel clears the flag again, so it is set after every read
		 * (but the banner's, which libssh2 reads a byte at a time). */
		if (length > 1)
			setsockopt(socket, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
		mark(n, T_BANNER);
		n->st.received += r;
		n->st.round_trips += n->sent_last;
		n->sent_last = 0;
	}
	return r;
}

static void step_connect(struct ssh_node *n)
{
	int err = 0;

	for (;;) {
		if (n->fd < 0) {
			if (!connect_next(n, &err)) {
				node_fail(n, "%s: cannot connect to %s:%d: %s", n->t.name, n->t.host,
					  n->t.port, strerror(err ? err : ECONNREFUSED));
				return;
			}
		}
		struct pollfd pfd = { n->fd, POLLOUT, 0 };
		socklen_t sl = sizeof(err);

		if (poll(&pfd, 1, 0) <= 0)
			return;	/* still connecting */
		err = 0;
		getsockopt(n->fd, SOL_SOCKET, SO_ERROR, &err, &sl);
		if (!err)
			break;
		close(n->fd);
		n->fd = -1;
		if (!n->ai_next) {
			node_fail(n, "%s: cannot connect to %s:%d: %s%s", n->t.name, n->t.host,
				  n->t.port, strerror(err),
				  err == ECONNREFUSED ? " (is sshd running on that port?)" : "");
			return;
		}
	}
	mark(n, T_TCP);
	n->s = libssh2_session_init_ex(NULL, NULL, NULL, n);
	if (!n->s) {
		node_fail(n, "%s: cannot create an SSH session", n->t.name);
		return;
	}
	libssh2_session_set_blocking(n->s, 0);
	libssh2_session_callback_set(n->s, LIBSSH2_CALLBACK_SEND, (void *)count_send);
	libssh2_session_callback_set(n->s, LIBSSH2_CALLBACK_RECV, (void *)count_recv);
	set_hostkey_prefs(n);
	n->state = N_HANDSHAKE;
}

static int has_method(const char *methods, const char *m)
{
	size_t len = strlen(m);

	for (const char *p = methods; p && *p;) {
		const char *c = strchr(p, ',');
		size_t n = c ? (size_t)(c - p) : strlen(p);

		if (n == len && !strncmp(p, m, n))
			return 1;
		p += n + (c ? 1 : 0);
	}
	return 0;
}

static void kbd_callback(const char *name, int name_len, const char *instruction,
			 int instruction_len, int num_prompts,
			 const LIBSSH2_USERAUTH_KBDINT_PROMPT *prompts,
			 LIBSSH2_USERAUTH_KBDINT_RESPONSE *responses, void **abstract)
{
	struct ssh_node *n = *abstract;
	const char *pw = n->pool->password ? n->pool->password : "";

	(void)name, (void)name_len, (void)instruction, (void)instruction_len, (void)prompts;
	for (int i = 0; i < num_prompts; i++) {
		responses[i].text = strdup(pw);
		responses[i].length = responses[i].text ? (unsigned int)strlen(pw) : 0;
	}
}

static void auth_ok(struct ssh_node *n, const char *how)
{
	n->auth = how;
	n->state = N_READY;
	mark(n, T_AUTH);
	n->connected_once = 1;
	if (n->pool->o.on_node)
		n->pool->o.on_node(n, n->pool->o.data);
}

/* ssh-agent: short and local, so done in blocking mode with a timeout. */
static int try_agent(struct ssh_node *n)
{
	LIBSSH2_AGENT *agent;
	struct libssh2_agent_publickey *id = NULL, *prev = NULL;
	long long left = n->deadline - now_ms();
	int ok = 0;

	if (left < 100)
		return 0;
	libssh2_session_set_blocking(n->s, 1);
	libssh2_session_set_timeout(n->s, left);
	agent = libssh2_agent_init(n->s);
	if (agent && !libssh2_agent_connect(agent) && !libssh2_agent_list_identities(agent)) {
		while (!ok && libssh2_agent_get_identity(agent, &id, prev) == 0) {
			struct strbuf type = STRBUF_INIT;

			prev = id;
			ssh_blob_type(&type, id->blob, id->blob_len);
			if (strcmp(type.buf, "ssh-rsa") && strcmp(type.buf, "ssh-dss")) {
				n->st.auth_requests++;
				ok = libssh2_agent_userauth(agent, n->t.user, id) == 0;
			}
			strbuf_release(&type);
		}
		libssh2_agent_disconnect(agent);
	}
	if (agent)
		libssh2_agent_free(agent);
	libssh2_session_set_blocking(n->s, 0);
	libssh2_session_set_timeout(n->s, 0);
	return ok;
}

static void step_session(struct ssh_node *n)
{
	struct ssh_pool *p = n->pool;
	unsigned ulen = (unsigned)strlen(n->t.user);
	int rc;

	for (;;) {
		switch (n->state) {
		case N_HANDSHAKE:
			rc = libssh2_session_handshake(n->s, n->fd);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return;
			if (rc) {
				node_fail(n, "%s: SSH handshake with %s:%d failed: %s (is it an SSH server? "
					  "did it drop the connection?)", n->t.name, n->t.host, n->t.port,
					  session_error(n));
				return;
			}
			n->st.kex++;
			mark(n, T_KEX);
			if (check_host_key(n) < 0)
				return;
			mark(n, T_HOSTKEY);
			/* the cluster key first, without asking for the server's methods
			 * ("none"): one round trip less per node; the list is asked for
			 * only when no key got in */
			free(n->methods);
			n->methods = NULL;
			n->key_idx = 0;
			n->state = p->keys.nr ? N_AUTH_KEY : N_AUTH_LIST;
			break;
		case N_AUTH_LIST: {
			char *m = libssh2_userauth_list(n->s, n->t.user, ulen);

			if (!m) {
				if (libssh2_userauth_authenticated(n->s)) {
					auth_ok(n, "none");
					return;
				}
				if (libssh2_session_last_errno(n->s) == LIBSSH2_ERROR_EAGAIN)
					return;
				node_fail(n, "%s: cannot list auth methods: %s", n->t.name, session_error(n));
				return;
			}
			free(n->methods);
			n->methods = xstrdup(m);
			n->state = N_AUTH_KEY;   /* the keys not tried yet, if any */
			break;
		}
		case N_AUTH_KEY:
			if ((n->methods && !has_method(n->methods, "publickey")) ||
			    n->key_idx >= p->keys.nr) {
				n->state = n->methods ? N_AUTH_AGENT : N_AUTH_LIST;
				break;
			} else {
				struct strbuf pub = STRBUF_INIT;
				const char *priv = p->keys.v[n->key_idx];

				strbuf_addf(&pub, "%s.pub", priv);
				rc = libssh2_userauth_publickey_fromfile_ex(n->s, n->t.user, ulen,
									   pub.buf, priv, NULL);
				strbuf_release(&pub);
				if (rc == LIBSSH2_ERROR_EAGAIN)
					return;
				n->st.auth_requests++;
				if (rc == 0) {
					auth_ok(n, "key");
					return;
				}
				n->key_idx++;
			}
			break;
		case N_AUTH_AGENT:
			n->state = N_AUTH_PASSWORD;
			if (p->o.try_agent && getenv("SSH_AUTH_SOCK") &&
			    has_method(n->methods, "publickey") && try_agent(n)) {
				auth_ok(n, "agent");
				return;
			}
			break;
		case N_AUTH_PASSWORD: {
			int pw_ok = has_method(n->methods, "password");
			int kbd_ok = has_method(n->methods, "keyboard-interactive");

			if ((pw_ok || kbd_ok) && !p->password && p->o.get_password && !p->asked_password) {
				long long t0 = now_ms();
				const char *pw;

				if (password_later(p, n))
					return;
				p->asked_password = 1;
				pw = p->o.get_password(p->o.data);
				if (pw)
					p->password = xstrdup(pw);
				pool_shift(p, now_ms() - t0);
			}
			if (!p->password || (!pw_ok && !kbd_ok) || n->tried_password) {
				node_fail(n, "%s: cannot log in to %s@%s: %s", n->t.name, n->t.user,
					  n->t.host,
					  n->tried_password ? "password refused (wrong password?)" :
					  !p->password ? "no key was accepted and no password was given "
							 "(--password-file, DTCTL_PASSWORD or a terminal)" :
					  "the server takes neither passwords nor our keys");
				return;
			}
			if (pw_ok)
				rc = libssh2_userauth_password_ex(n->s, n->t.user, ulen, p->password,
								  (unsigned)strlen(p->password), NULL);
			else
				rc = libssh2_userauth_keyboard_interactive_ex(n->s, n->t.user, ulen,
									      kbd_callback);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return;
			n->st.auth_requests++;
			if (rc == 0) {
				auth_ok(n, "password");
				return;
			}
			n->tried_password = 1;
			break;
		}
		default:
			return;
		}
	}
}

/* ------------------------------------------------------- running ops */

static void add_output(struct ssh_node *n, struct ssh_op *op, int stream, const char *buf, size_t len)
{
	struct strbuf *dst = stream ? &op->res.err : &op->res.out;

	if (dst->len + len <= OUTPUT_LIMIT)
		strbuf_add(dst, buf, len);
	if (!(op->flags & SSH_STREAM) || !n->pool->o.on_line)
		return;
	for (size_t i = 0; i < len; i++) {
		if (buf[i] == '\n') {
			n->pool->o.on_line(n, stream, op->line[stream].buf, n->pool->o.data);
			strbuf_reset(&op->line[stream]);
		} else {
			strbuf_addch(&op->line[stream], buf[i]);
		}
	}
}

static const char *sftp_error(struct ssh_node *n, unsigned long *code)
{
	unsigned long e = n->sftp ? libssh2_sftp_last_error(n->sftp) : 0;

	if (code)
		*code = e;
	switch (e) {
	case LIBSSH2_FX_NO_SUCH_FILE: return "no such file";
	case LIBSSH2_FX_PERMISSION_DENIED: return "permission denied";
	case LIBSSH2_FX_NO_SUCH_PATH: return "no such directory";
	case 4: return "failure (disk full or not a directory?)";
	case 0: return session_error(n);
	default: return "SFTP error";
	}
}

/* The command that checks, chmods and renames an uploaded temp file. */
static void finalize_cmd(struct ssh_op *op)
{
	struct strbuf sb = STRBUF_INIT, hex = STRBUF_INIT;

	sha256_hex(&hex, op->data, op->len);
	strbuf_addstr(&sb, "t=");
	strbuf_add_shell_quoted(&sb, op->tmp);
	strbuf_addstr(&sb, "; f=");
	strbuf_add_shell_quoted(&sb, op->path);
	strbuf_addf(&sb, "; h=$(sha256sum < \"$t\") || { rm -f \"$t\"; exit 1; }; "
		    "if [ \"${h%%%% *}\" != %s ]; then rm -f \"$t\"; "
		    "echo \"checksum mismatch after upload of $f\" >&2; exit 1; fi; "
		    "chmod %o \"$t\" && mv -f \"$t\" \"$f\" || { rm -f \"$t\"; exit 1; }",
		    hex.buf, (unsigned)op->mode);
	free(op->cmd);
	op->cmd = strbuf_detach(&sb, NULL);
	strbuf_release(&hex);
}

/*
 * Closing a channel does not stop the remote command (sshd waits for it
 * before it confirms the close), so timeouts are enforced on the node by
 * coreutils timeout(1), which kills the command (KILL 2 s after TERM) and
 * exits 124.  The local deadline (REMOTE_GRACE_MS later) only catches nodes
 * that do not answer at all.
 */
#define REMOTE_GRACE_MS 4000

static void wrap_timeout(struct ssh_op *op)
{
	struct strbuf sb = STRBUF_INIT, secs = STRBUF_INIT;

	strbuf_addf(&secs, "%.3f", op->timeout_ms / 1000.0);
	strbuf_addf(&sb, "if command -v timeout >/dev/null 2>&1; then exec timeout -k 2 %s sh -c ",
		    secs.buf);
	strbuf_add_shell_quoted(&sb, op->cmd);
	strbuf_addstr(&sb, "; else exec sh -c ");
	strbuf_add_shell_quoted(&sb, op->cmd);
	strbuf_addstr(&sb, "; fi");
	free(op->cmd);
	op->cmd = strbuf_detach(&sb, NULL);
	op->wrapped = 1;
	strbuf_release(&secs);
}

/* Run the local variant of an operation. 0 = finished, 1 = in progress. */
static int step_local_op(struct ssh_node *n, struct ssh_op *op)
{
	struct strbuf path = STRBUF_INIT;
	char buf[16384];

	switch (op->phase) {
	case P_START:
		if (op->kind == OP_UPLOAD) {
			local_path(&path, op->path);
			if (write_file_atomic(path.buf, op->data, op->len, op->mode) < 0) {
				op_failf(op, "%s: cannot write '%s': %s", n->t.name, path.buf, strerror(errno));
				op->res.status = 1;
			}
			strbuf_release(&path);
			op->phase = P_FINISHED;
			return 0;
		}
		if (op->kind == OP_READ) {
			local_path(&path, op->path);
			if (strbuf_read_file(&op->res.out, path.buf, op->limit) < 0) {
				int e = errno;

				op_failf(op, "%s: cannot read '%s': %s", n->t.name, path.buf, strerror(e));
				op->res.status = e == ENOENT ? -2 : 1;
			}
			strbuf_release(&path);
			op->phase = P_FINISHED;
			return 0;
		}
		strvec_pushv(&op->cp.args, (const char *[]){ "/bin/sh", "-c", op->cmd, NULL });
		op->cp.dir = getenv("HOME");
		op->cp.no_stdin = 1;
		op->cp.out = -1;
		op->cp.err = -1;
		op->cp.new_session = 1;
		if (start_command(&op->cp) < 0) {
			op_failf(op, "%s: cannot run /bin/sh", n->t.name);
			op->res.status = -1;
			op->phase = P_FINISHED;
			return 0;
		}
		op->lfd[0] = op->cp.out;
		op->lfd[1] = op->cp.err;
		fcntl(op->lfd[0], F_SETFL, O_NONBLOCK);
		fcntl(op->lfd[1], F_SETFL, O_NONBLOCK);
		op->phase = P_LOCAL_IO;
		/* fall through */
	case P_LOCAL_IO:
		for (int i = 0; i < 2; i++) {
			while (op->lfd[i] >= 0) {
				ssize_t r = read(op->lfd[i], buf, sizeof(buf));

				if (r > 0) {
					add_output(n, op, i, buf, (size_t)r);
					continue;
				}
				if (r < 0 && (errno == EAGAIN || errno == EINTR))
					break;
				close(op->lfd[i]);
				op->lfd[i] = -1;
			}
		}
		if (op->lfd[0] >= 0 || op->lfd[1] >= 0)
			return 1;
		op->phase = P_LOCAL_WAIT;
		/* fall through */
	case P_LOCAL_WAIT: {
		int st;
		pid_t r = waitpid(op->cp.pid, &st, WNOHANG);

		if (r == 0)
			return 1;
		op->res.status = r < 0 ? -1 : wait_status_to_code(st);
		op->cp.pid = 0;
		op->phase = P_FINISHED;
		return 0;
	}
	default:
		return 0;
	}
}

/*
 * Advance the current remote operation.  Returns 1 when it would block, 0
 * when it finished (op->phase == P_FINISHED), -1 when the node failed.
 */
static int step_remote_op(struct ssh_node *n, struct ssh_op *op)
{
	char buf[32768];
	ssize_t r;
	int rc;

	for (;;) {
		switch (op->phase) {
		case P_START:
			if (op->kind == OP_EXEC && op->timeout_ms > 0)
				wrap_timeout(op);
			op->phase = op->kind == OP_EXEC ? P_CH_OPEN : P_SFTP_INIT;
			break;
		case P_SFTP_INIT:
			if (!n->sftp) {
				n->sftp = libssh2_sftp_init(n->s);
				if (!n->sftp) {
					if (libssh2_session_last_errno(n->s) == LIBSSH2_ERROR_EAGAIN)
						return 1;
					node_fail(n, "%s: cannot start SFTP: %s (is 'Subsystem sftp' "
						  "enabled in the node's sshd_config?)", n->t.name,
						  session_error(n));
					return -1;
				}
			}
			op->phase = P_OPEN;
			break;
		case P_OPEN: {
			const char *pth = op->kind == OP_UPLOAD ? op->tmp : op->path;
			unsigned long flags = op->kind == OP_UPLOAD ?
				LIBSSH2_FXF_WRITE | LIBSSH2_FXF_CREAT | LIBSSH2_FXF_TRUNC :
				LIBSSH2_FXF_READ;
			unsigned long code;
			const char *why;

			op->fh = libssh2_sftp_open_ex(n->sftp, pth, (unsigned)strlen(pth), flags,
						      0600, LIBSSH2_SFTP_OPENFILE);
			if (op->fh) {
				op->phase = op->kind == OP_UPLOAD ? P_WRITE : P_READ;
				break;
			}
			if (libssh2_session_last_errno(n->s) == LIBSSH2_ERROR_EAGAIN)
				return 1;
			why = sftp_error(n, &code);
			if (op->kind == OP_READ && code == LIBSSH2_FX_NO_SUCH_FILE) {
				op->res.status = -2;
				op_failf(op, "%s: '%s' does not exist", n->t.name, op->path);
			} else {
				op->res.status = 1;
				op_failf(op, "%s: cannot %s '%s': %s", n->t.name,
					 op->kind == OP_UPLOAD ? "create" : "read", pth, why);
			}
			op->phase = P_FINISHED;
			return 0;
		}
		case P_WRITE:
			while (op->off < op->len) {
				size_t chunk = op->len - op->off;

				if (chunk > WRITE_CHUNK)
					chunk = WRITE_CHUNK;
				r = libssh2_sftp_write(op->fh, (const char *)op->data + op->off, chunk);
				if (r == LIBSSH2_ERROR_EAGAIN)
					return 1;
				if (r < 0) {
					op->res.status = 1;
					op_failf(op, "%s: cannot write '%s': %s", n->t.name, op->tmp,
						 sftp_error(n, NULL));
					op->failed = 1;
					op->phase = P_CLOSE;
					goto next;
				}
				op->off += (size_t)r;
			}
			op->phase = P_CLOSE;
			break;
		case P_READ:
			for (;;) {
				r = libssh2_sftp_read(op->fh, buf, sizeof(buf));
				if (r == LIBSSH2_ERROR_EAGAIN)
					return 1;
				if (r < 0) {
					op->res.status = 1;
					op_failf(op, "%s: cannot read '%s': %s", n->t.name, op->path,
						 sftp_error(n, NULL));
					op->failed = 1;
					break;
				}
				if (r == 0)
					break;
				if (op->res.out.len + (size_t)r > op->limit) {
					op->res.status = 1;
					op_failf(op, "%s: '%s' is larger than %zu bytes", n->t.name,
						 op->path, op->limit);
					op->failed = 1;
					break;
				}
				strbuf_add(&op->res.out, buf, (size_t)r);
			}
			op->phase = P_CLOSE;
			break;
		case P_CLOSE:
			rc = libssh2_sftp_close_handle(op->fh);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 1;
			op->fh = NULL;
			if (op->kind == OP_READ) {
				op->phase = P_FINISHED;
				return 0;
			}
			if (op->failed) {
				op->phase = P_UNLINK;
				break;
			}
			finalize_cmd(op);
			op->finalizing = 1;
			op->phase = P_CH_OPEN;
			break;
		case P_UNLINK:
			rc = libssh2_sftp_unlink(n->sftp, op->tmp);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 1;
			op->phase = P_FINISHED;
			return 0;
		case P_CH_OPEN:
			op->ch = libssh2_channel_open_session(n->s);
			if (!op->ch) {
				if (libssh2_session_last_errno(n->s) == LIBSSH2_ERROR_EAGAIN)
					return 1;
				node_fail(n, "%s: cannot open a channel: %s", n->t.name, session_error(n));
				return -1;
			}
			n->st.channels++;
			mark(n, T_CHANNEL);
			op->phase = P_CH_EXEC;
			break;
		case P_CH_EXEC:
			rc = libssh2_channel_exec(op->ch, op->cmd);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 1;
			if (rc) {
				node_fail(n, "%s: cannot run a command: %s", n->t.name, session_error(n));
				return -1;
			}
			mark(n, T_EXEC);
			op->phase = P_CH_IO;
			break;
		case P_CH_IO: {
			int blocked = 0;

			for (int s = 0; s < 2; s++) {
				for (;;) {
					r = libssh2_channel_read_ex(op->ch, s, buf, sizeof(buf));
					if (r > 0) {
						add_output(n, op, s, buf, (size_t)r);
						continue;
					}
					if (r == LIBSSH2_ERROR_EAGAIN) {
						blocked = 1;
						break;
					}
					if (r < 0) {
						node_fail(n, "%s: connection lost while running a command: %s",
							  n->t.name, session_error(n));
						return -1;
					}
					break;
				}
			}
			if (!libssh2_channel_eof(op->ch)) {
				if (blocked)
					return 1;
				break;
			}
			mark(n, T_EOF);
			op->phase = P_CH_CLOSE;
			break;
		}
		case P_CH_CLOSE:
			rc = libssh2_channel_close(op->ch);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 1;
			op->phase = op->timed_out ? P_CH_FREE : P_CH_WAIT;
			break;
		case P_CH_WAIT: {
			char *sig = NULL;
			size_t siglen = 0;

			rc = libssh2_channel_wait_closed(op->ch);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 1;
			mark(n, T_EXIT);
			op->res.status = libssh2_channel_get_exit_status(op->ch);
			if (libssh2_channel_get_exit_signal(op->ch, &sig, &siglen, NULL, NULL,
							    NULL, NULL) == 0 && sig) {
				static const struct { const char *name; int num; } sigs[] = {
					{ "HUP", 1 }, { "INT", 2 }, { "QUIT", 3 }, { "ILL", 4 },
					{ "ABRT", 6 }, { "FPE", 8 }, { "KILL", 9 }, { "SEGV", 11 },
					{ "PIPE", 13 }, { "ALRM", 14 }, { "TERM", 15 }, { "USR1", 10 },
					{ "USR2", 12 },
				};
				op->res.status = 128 + 15;
				for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
					if (!strcmp(sig, sigs[i].name))
						op->res.status = 128 + sigs[i].num;
				free(sig);
			}
			if (op->wrapped && op->res.status == 124) {
				op->timed_out = 1;
				op_failf(op, "%s: command timed out after %.1f s", n->t.name,
					 op->timeout_ms / 1000.0);
			}
			op->phase = P_CH_FREE;
			break;
		}
		case P_CH_FREE:
			rc = libssh2_channel_free(op->ch);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 1;
			op->ch = NULL;
			if (op->finalizing && op->res.status != 0 && !op->timed_out) {
				struct strbuf e = STRBUF_INIT;

				strbuf_addbuf(&e, &op->res.err);
				strbuf_trim(&e);
				op_failf(op, "%s: cannot install '%s'%s%s", n->t.name, op->path,
					 e.len ? ": " : "", e.buf);
				strbuf_release(&e);
			}
			op->phase = P_FINISHED;
			return 0;
		default:
			return 0;
		}
	next:
		;
	}
}

/* Run the node's queue as far as it goes without blocking. */
static void step_ops(struct ssh_node *n)
{
	while (n->state == N_READY && n->head) {
		struct ssh_op *op = n->head;
		int rc;

		if (!op->started) {
			op->started = now_ms();
			op->deadline = op->timeout_ms > 0 ? op->started + op->timeout_ms : 0;
			if (op->deadline && !n->local)
				op->deadline += REMOTE_GRACE_MS;
		}
		rc = n->local ? step_local_op(n, op) : step_remote_op(n, op);
		if (rc != 0)
			return;	/* blocked, or the node failed (and completed its ops) */
		if (op->timed_out) {
			if (!op->msg.len)
				op_failf(op, "%s: timed out after %.1f s", n->t.name, op->timeout_ms / 1000.0);
			op_complete(n, SSH_E_TIMEOUT);
		} else if (op->res.status == -2) {
			op_complete(n, SSH_E_NOENT);
		} else if (op->msg.len) {
			op_complete(n, SSH_E_FAILED);
		} else {
			op_complete(n, SSH_OK);
		}
	}
	if (n->state == N_READY && !n->head && !n->finished) {
		n->finished = now_ms();
		if (!n->pool->o.keep_sessions) {
			node_close(n, 1);
			n->state = N_PENDING;
		}
		trace_node(n);
		if (n->pool->o.on_node)
			n->pool->o.on_node(n, n->pool->o.data);
	}
}

static void node_step(struct ssh_node *n)
{
	if (n->state == N_PENDING && n->head)
		node_start(n);
	if (n->state == N_CONNECTING)
		step_connect(n);
	if (n->state > N_CONNECTING && n->state < N_READY)
		step_session(n);
	if (n->state == N_READY) {
		if (n->head)
			n->finished = 0;
		step_ops(n);
	}
}

static void check_deadlines(struct ssh_pool *p, long long now)
{
	static const char *phase[] = {
		[N_CONNECTING] = "connecting", [N_HANDSHAKE] = "in the SSH handshake",
		[N_AUTH_LIST] = "authenticating", [N_AUTH_KEY] = "authenticating",
		[N_AUTH_AGENT] = "authenticating", [N_AUTH_PASSWORD] = "authenticating",
	};

	for (size_t i = 0; i < p->nr; i++) {
		struct ssh_node *n = p->nodes[i];
		struct ssh_op *op = n->head;

		if (n->state > N_PENDING && n->state < N_READY && now > n->deadline) {
			node_fail(n, "%s: timed out after %.0f s %s (%s:%d); is the node up and "
				  "its sshd listening? (ssh.connect_timeout)", n->t.name,
				  p->o.connect_timeout_ms / 1000.0, phase[n->state], n->t.host, n->t.port);
			continue;
		}
		if (n->state != N_READY || !op || !op->deadline || now <= op->deadline)
			continue;
		if (op->timed_out || op->kind != OP_EXEC || !n->local) {
			node_fail(n, "%s: %s did not finish in time (%.1f s); disconnected", n->t.name,
				  op->kind == OP_EXEC ? "a command" :
				  op->kind == OP_UPLOAD ? "an upload" : "a file read",
				  (now - op->started) / 1000.0);
			continue;
		}
		op->timed_out = 1;
		op_failf(op, "%s: command timed out after %.1f s", n->t.name, op->timeout_ms / 1000.0);
		op->deadline = now + CLOSE_GRACE_MS;
		if (n->local) {
			kill(-op->cp.pid, SIGKILL);
		} else if (op->phase < P_CH_CLOSE) {
			op->phase = op->ch ? P_CH_CLOSE : P_CH_FREE;
			if (!op->ch)
				op->phase = P_FINISHED;
		}
	}
}

static void pool_abort(struct ssh_pool *p)
{
	for (size_t i = 0; i < p->nr; i++) {
		struct ssh_node *n = p->nodes[i];

		if (n->state != N_FAILED && (n->head || (n->state > N_PENDING && n->state < N_READY)))
			node_fail(n, "%s: interrupted", n->t.name);
	}
}

int ssh_pool_run(struct ssh_pool *p)
{
	struct pollfd *pfd = xcalloc(2 * p->nr + 1, sizeof(*pfd));
	int ret = 0;

	for (;;) {
		int active = 0, work = 0, immediate = 0;
		nfds_t nfd = 0;
		long long now, timeout = 100;

		if (ssh_interrupted) {
			pool_abort(p);
			ret = -1;
			break;
		}
		for (size_t i = 0; i < p->nr; i++)
			if (p->nodes[i]->state > N_PENDING && node_busy(p->nodes[i]))
				active++;
		for (size_t i = 0; i < p->nr; i++) {
			struct ssh_node *n = p->nodes[i];

			if (n->state == N_PENDING && n->head) {
				if (active >= p->o.fanout)
					continue;
				active++;
			}
			if (node_busy(n))
				node_step(n);
		}
		for (size_t i = 0; i < p->nr; i++) {
			struct ssh_node *n = p->nodes[i];
			struct ssh_op *op = n->head;

			if (!node_busy(n))
				continue;
			work = 1;
			if (n->state == N_PENDING)
				continue;	/* waiting for a fanout slot */
			if (n->local) {
				if (op && op->phase == P_LOCAL_IO) {
					for (int k = 0; k < 2; k++)
						if (op->lfd[k] >= 0)
							pfd[nfd++] = (struct pollfd){ op->lfd[k], POLLIN, 0 };
				} else if (op && op->phase == P_LOCAL_WAIT) {
					timeout = 5;	/* waiting for the child to exit */
				} else {
					immediate = 1;
				}
				continue;
			}
			if (n->state == N_CONNECTING) {
				if (n->fd >= 0)
					pfd[nfd++] = (struct pollfd){ n->fd, POLLOUT, 0 };
				else
					immediate = 1;
				continue;
			}
			if (n->s && n->fd >= 0) {
				int dir = libssh2_session_block_directions(n->s);
				short ev = 0;

				if (dir & LIBSSH2_SESSION_BLOCK_INBOUND)
					ev |= POLLIN;
				if (dir & LIBSSH2_SESSION_BLOCK_OUTBOUND)
					ev |= POLLOUT;
				if (!ev) {
					ev = POLLIN;
					if (timeout > 20)
						timeout = 20;
				}
				pfd[nfd++] = (struct pollfd){ n->fd, ev, 0 };
			} else {
				immediate = 1;
			}
		}
		if (!work)
			break;
		now = now_ms();
		for (size_t i = 0; i < p->nr; i++) {
			struct ssh_node *n = p->nodes[i];
			long long d = 0;

			if (!node_busy(n) || n->state == N_PENDING)
				continue;
			if (n->state < N_READY)
				d = n->deadline;
			else if (n->head && n->head->deadline)
				d = n->head->deadline;
			if (d && d - now < timeout)
				timeout = d - now < 0 ? 0 : d - now;
		}
		if (immediate)
			timeout = 0;
		if (poll(pfd, nfd, (int)timeout) < 0 && errno != EINTR) {
			ret = error_errno("poll");
			break;
		}
		now = now_ms();
		check_deadlines(p, now);
		if (p->o.on_tick && now - p->last_tick >= 500) {
			p->last_tick = now;
			p->o.on_tick(p, p->o.data);
		}
	}
	free(pfd);
	return ret;
}

void ssh_pool_free(struct ssh_pool *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nr; i++) {
		struct ssh_node *n = p->nodes[i];

		while (n->head) {
			struct ssh_op *op = n->head;

			n->head = op->next;
			op_cleanup_remote(n, op);
			op_free(op);
		}
		node_close(n, n->state == N_READY);
		free((char *)n->t.name);
		free((char *)n->t.host);
		free((char *)n->t.user);
		free(n->error);
		free(n->methods);
		strbuf_release(&n->fingerprint);
		free(n);
	}
	free(p->nodes);
	known_hosts_release(&p->kh);
	strvec_clear(&p->keys);
	if (p->password) {
		memset(p->password, 0, strlen(p->password));
		free(p->password);
	}
	free((char *)p->o.known_hosts);
	free(p);
}
