/*
 * test_ssh.c - unit tests for lib/ssh.c helpers and the engine on local
 * nodes: remote command quoting (round-tripped through a real /bin/sh),
 * authorized_keys merging (idempotent, missing final newline, options and
 * comments ignored), the SHA-256 helper, and ssh_pool_run() with "local"
 * nodes: exec output and exit codes, line streaming, timeouts, uploads and
 * reads, chained operations, fanout.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run-command.h"
#include "ssh.h"

#define KEY "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKK9CQaQzynQzWYowBK35Ba6tsMOx0qLPtCA85tGC8rw dtctl@lab"

static void test_quote(void **state)
{
	const char *argv[] = { "echo", "a b", "it's", "$HOME", "`id`", "", "x;y", "--flag=1", NULL };
	struct strbuf cmd = STRBUF_INIT, out = STRBUF_INIT;
	struct child_process cp = CHILD_PROCESS_INIT;

	ssh_quote_argv(&cmd, argv);
	assert_string_equal(cmd.buf, "echo 'a b' 'it'\\''s' '$HOME' '`id`' '' 'x;y' --flag=1");
	/* what a remote shell makes of it: exactly the argv again */
	strbuf_reset(&cmd);
	strbuf_addstr(&cmd, "printf '[%s]' ");
	ssh_quote_argv(&cmd, argv + 1);
	strvec_pushv(&cp.args, (const char *[]){ "/bin/sh", "-c", cmd.buf, NULL });
	assert_int_equal(capture_command(&cp, &out, 4096), 0);
	assert_string_equal(out.buf, "[a b][it's][$HOME][`id`][][x;y][--flag=1]");
	child_process_clear(&cp);
	strbuf_release(&cmd);
	strbuf_release(&out);
}

static void test_authorized_keys(void **state)
{
	struct strbuf out = STRBUF_INIT, again = STRBUF_INIT;
	const char *other = "ssh-rsa AAAAB3Nza other@x\n";

	/* empty file */
	assert_int_equal(ssh_authorized_keys_merge("", 0, KEY, &out), 1);
	assert_string_equal(out.buf, KEY "\n");
	/* idempotent: merging again changes nothing, byte for byte */
	assert_int_equal(ssh_authorized_keys_merge(out.buf, out.len, KEY, &again), 0);
	assert_string_equal(again.buf, out.buf);
	/* missing final newline is fixed before appending */
	strbuf_reset(&out);
	assert_int_equal(ssh_authorized_keys_merge("ssh-rsa AAAAB3Nza other@x", 25, KEY "\n", &out), 1);
	assert_string_equal(out.buf, "ssh-rsa AAAAB3Nza other@x\n" KEY "\n");
	/* present with options and another comment: unchanged */
	strbuf_reset(&out);
	{
		const char *old = "from=\"10.0.0.0/8\" ssh-ed25519 "
				  "AAAAC3NzaC1lZDI1NTE5AAAAIKK9CQaQzynQzWYowBK35Ba6tsMOx0qLPtCA85tGC8rw old\n";

		assert_int_equal(ssh_authorized_keys_merge(old, strlen(old), KEY, &out), 0);
		assert_string_equal(out.buf, old);
	}
	/* other keys kept in order */
	strbuf_reset(&out);
	assert_int_equal(ssh_authorized_keys_merge(other, strlen(other), KEY, &out), 1);
	assert_string_equal(out.buf, "ssh-rsa AAAAB3Nza other@x\n" KEY "\n");
	/* a bad key line */
	strbuf_reset(&out);
	assert_int_equal(ssh_authorized_keys_merge("", 0, "justone", &out), -1);
	strbuf_release(&out);
	strbuf_release(&again);
}

static void test_sha256(void **state)
{
	struct strbuf sb = STRBUF_INIT, type = STRBUF_INIT;

	sha256_hex(&sb, "abc", 3);
	assert_string_equal(sb.buf, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(ssh_pubkey_type(KEY, &type), 0);
	assert_string_equal(type.buf, "ssh-ed25519");
	strbuf_release(&sb);
	strbuf_release(&type);
}

/* ------------------------------------------------------ engine, local */

struct seen {
	int calls, status, error;
	struct strbuf out, err;
	int lines;
	char home[64];
};

static void done_cb(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	struct seen *s = arg;

	s->calls++;
	s->status = r->status;
	s->error = r->error;
	strbuf_reset(&s->out);
	strbuf_addbuf(&s->out, &r->out);
	strbuf_reset(&s->err);
	strbuf_addbuf(&s->err, &r->err);
}

static void line_cb(struct ssh_node *n, int is_stderr, const char *line, void *data)
{
	struct seen *s = data;

	if (!strcmp(line, "one") || !strcmp(line, "two") || !strcmp(line, "last"))
		s->lines++;
}

/* After the first command, queue a second one from the callback. */
static void chain_cb(struct ssh_node *n, struct ssh_result *r, void *arg)
{
	done_cb(n, r, arg);
	if (((struct seen *)arg)->calls == 1)
		ssh_exec(n, "echo chained", 0, 0, chain_cb, arg);
}

static struct ssh_pool *local_pool(struct seen *s, char *dir)
{
	struct ssh_pool_opts o;
	struct strbuf kh = STRBUF_INIT;

	memset(&o, 0, sizeof(o));
	strbuf_addf(&kh, "%s/known_hosts", dir);
	o.known_hosts = kh.buf;
	o.fanout = 2;
	o.on_line = line_cb;
	o.data = s;
	{
		struct ssh_pool *p = ssh_pool_new(&o);

		strbuf_release(&kh);
		return p;
	}
}

static void test_engine_local(void **state)
{
	char dir[] = "/tmp/test_ssh.XXXXXX";
	struct seen s[4];
	struct ssh_pool *p;
	struct ssh_target t = { "me", "local", "", 0 };
	struct ssh_node *n[4];
	struct strbuf path = STRBUF_INIT, content = STRBUF_INIT;
	struct stat st;
	char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;

	memset(s, 0, sizeof(s));
	for (int i = 0; i < 4; i++) {
		strbuf_init(&s[i].out, 0);
		strbuf_init(&s[i].err, 0);
	}
	assert_non_null(mkdtemp(dir));
	setenv("HOME", dir, 1);	/* local nodes resolve relative paths against $HOME */
	p = local_pool(&s[0], dir);
	for (int i = 0; i < 4; i++)
		n[i] = ssh_pool_add(p, &t);
	ssh_exec(n[0], "echo one; echo two >&2; printf last; exit 7", 0, SSH_STREAM, done_cb, &s[0]);
	ssh_exec(n[1], "sleep 5", 300, 0, done_cb, &s[1]);
	ssh_upload(n[2], "hello\n", 6, "sub-missing/x", 0600, done_cb, &s[2]);
	ssh_exec(n[3], "pwd", 0, 0, chain_cb, &s[3]);
	assert_int_equal(ssh_pool_run(p), 0);

	assert_int_equal(s[0].calls, 1);
	assert_int_equal(s[0].error, SSH_OK);
	assert_int_equal(s[0].status, 7);
	assert_string_equal(s[0].out.buf, "one\nlast");
	assert_string_equal(s[0].err.buf, "two\n");
	assert_int_equal(s[0].lines, 3);   /* the unterminated last line is flushed too */

	assert_int_equal(s[1].error, SSH_E_TIMEOUT);
	assert_int_equal(s[2].error, SSH_E_FAILED);   /* no such directory */

	assert_int_equal(s[3].calls, 2);
	assert_string_equal(s[3].out.buf, "chained\n");
	assert_false(ssh_node_failed(n[3]));
	assert_string_equal(ssh_node_auth(n[3]), "local");

	/* upload then read back, mode kept */
	ssh_upload(n[2], "hello\n", 6, "~/f.txt", 0640, done_cb, &s[2]);
	ssh_read(n[2], "f.txt", 0, done_cb, &s[1]);   /* same node: runs after the upload */
	ssh_read(n[0], "nope.txt", 0, done_cb, &s[0]);
	assert_int_equal(ssh_pool_run(p), 0);
	assert_int_equal(s[2].error, SSH_OK);
	strbuf_addf(&path, "%s/f.txt", dir);
	assert_int_equal(stat(path.buf, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0640);
	assert_true(strbuf_read_file(&content, path.buf, 0) == 6);
	assert_int_equal(s[1].error, SSH_OK);
	assert_string_equal(s[1].out.buf, "hello\n");
	assert_int_equal(s[0].error, SSH_E_NOENT);

	ssh_pool_free(p);
	unlink(path.buf);
	rmdir(dir);
	if (old_home) {
		setenv("HOME", old_home, 1);
		free(old_home);
	}
	for (int i = 0; i < 4; i++) {
		strbuf_release(&s[i].out);
		strbuf_release(&s[i].err);
	}
	strbuf_release(&path);
	strbuf_release(&content);
}

static void test_unreachable(void **state)
{
	char dir[] = "/tmp/test_ssh.XXXXXX";
	struct seen s;
	struct ssh_pool_opts o;
	struct ssh_pool *p;
	struct strbuf kh = STRBUF_INIT;
	/* port 1 on loopback: nothing listens, refused at once */
	struct ssh_target t = { "closed", "127.0.0.1", "nobody", 1 };
	struct ssh_node *n;

	memset(&s, 0, sizeof(s));
	strbuf_init(&s.out, 0);
	strbuf_init(&s.err, 0);
	assert_non_null(mkdtemp(dir));
	strbuf_addf(&kh, "%s/known_hosts", dir);
	memset(&o, 0, sizeof(o));
	o.known_hosts = kh.buf;
	o.connect_timeout_ms = 2000;
	p = ssh_pool_new(&o);
	n = ssh_pool_add(p, &t);
	ssh_exec(n, "true", 0, 0, done_cb, &s);
	assert_int_equal(ssh_pool_run(p), 0);
	assert_int_equal(s.calls, 1);
	assert_int_equal(s.error, SSH_E_NODE);
	assert_true(ssh_node_failed(n));
	assert_non_null(strstr(ssh_node_error(n), "cannot connect to 127.0.0.1:1"));
	/* one connect tried (one address), nothing after it counted */
	assert_int_equal(ssh_node_stats(n)->connects, 1);
	assert_int_equal(ssh_node_stats(n)->kex, 0);
	assert_int_equal(ssh_node_stats(n)->auth_requests, 0);
	assert_int_equal(ssh_node_stats(n)->channels, 0);
	assert_int_equal(ssh_node_stats(n)->round_trips, 0);
	assert_int_equal(ssh_node_stats(n)->sent, 0);
	ssh_pool_free(p);
	rmdir(dir);
	strbuf_release(&kh);
	strbuf_release(&s.out);
	strbuf_release(&s.err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quote),
		cmocka_unit_test(test_authorized_keys),
		cmocka_unit_test(test_sha256),
		cmocka_unit_test(test_engine_local),
		cmocka_unit_test(test_unreachable),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
