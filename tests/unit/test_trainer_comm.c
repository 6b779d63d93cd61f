/*
 * test_trainer_comm.c - the parts of dttrain's start-up that must end on
 * time without a GPU or NCCL: the TCP rendezvous that hands out the NCCL id
 * (over IPv4 alone, with IPv6 taken away by a seccomp filter as on a kernel
 * booted with ipv6.disable=1; a connect to a host that drops SYNs; a peer of
 * another job), and the deadline around a non-blocking communicator's init,
 * driven by a fake communicator.
 *
 * The ranks are forked processes talking over loopback; the parent gives each
 * case a few seconds and kills what is still running, so that a rendezvous
 * that does not end fails the test instead of hanging it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "strbuf.h"
#include "trainer/comm.h"

/* A port nobody listens on right now (the kernel's pick for an IPv4 bind). */
static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

/*
 * Wait for pid at most ms; kill it if it is still running.  Its exit code,
 * or -1 when it had to be killed (it overran its deadline).
 */
static int wait_bounded(pid_t pid, int ms)
{
	long long end = dt_mono_ms() + ms;
	int status;

	while (dt_mono_ms() < end) {
		struct timespec nap = { 0, 20 * 1000000 };

		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		nanosleep(&nap, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

/* Where a forked rank leaves its error message for the parent (per test run:
 * other work trees run this program at the same time). */
static const char *errpath(const char *tag)
{
	static char paths[4][64];
	static int next;
	char *p = paths[next++ % 4];

	snprintf(p, 64, "/tmp/dttrain-rv-%d-%s.err", (int)getpid(), tag);
	return p;
}

/* A temp file where a forked rank leaves its error message for the parent. */
static void save_err(const char *path, const struct strbuf *err)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(err->buf, f);
		fclose(f);
	}
}

static void load_err(const char *path, struct strbuf *sb)
{
	FILE *f = fopen(path, "r");
	char buf[1024];
	size_t n;

	if (!f)
		return;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	strbuf_addstr(sb, buf);
	fclose(f);
	unlink(path);
}

/*
 * Make this process's socket(AF_INET6, ...) fail with EAFNOSUPPORT, as on a
 * kernel without IPv6.  0, or -1 where seccomp filters are not available.
 */
static int take_ipv6_away(void)
{
#if defined(__x86_64__)
#define TEST_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define TEST_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif
#ifdef TEST_AUDIT_ARCH
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TEST_AUDIT_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };
	int fd;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		return -1;
	fd = socket(AF_INET6, SOCK_STREAM, 0);
	if (fd >= 0 || errno != EAFNOSUPPORT) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return 0;
#else
	return -1;
#endif
}

#define BLOB "the nccl unique id, 32 bytes...."

/*
 * Rank `rank` of `world` in a child process: exit 0 when the rendezvous
 * succeeded (and a peer got BLOB), 1 with its message in errfile otherwise.
 */
static pid_t start_rank(const char *addr, int port, const char *job, int rank, int world,
			int timeout_ms, const char *errfile, int no_ipv6)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (!pid) {
		struct strbuf err = STRBUF_INIT;
		char blob[sizeof(BLOB)] = "";

		if (no_ipv6 && take_ipv6_away())
			_exit(77);
		if (rank == 0)
			memcpy(blob, BLOB, sizeof(blob));
		if (rendezvous_bcast(addr, port, job, rank, world, blob, sizeof(blob), timeout_ms,
				     &err)) {
			save_err(errfile, &err);
			_exit(1);
		}
		_exit(memcmp(blob, BLOB, sizeof(blob)) ? 2 : 0);
	}
	return pid;
}

/*
 * Three ranks on a host without IPv6: rank 0 must still listen (it asked for
 * an IPv6 socket only), and the peers reach it at 127.0.0.1 and "localhost".
 */
static void test_rendezvous_ipv4_only(void **state)
{
	int port = free_port(), rc0, rc1, rc2;
	pid_t r0 = start_rank(NULL, port, "job-1", 0, 3, 5000, errpath("0"), 1);
	pid_t r1 = start_rank("127.0.0.1", port, "job-1", 1, 3, 5000, errpath("1"), 1);
	pid_t r2 = start_rank("localhost", port, "job-1", 2, 3, 5000, errpath("2"), 1);
	struct strbuf err = STRBUF_INIT;

	rc0 = wait_bounded(r0, 8000);
	rc1 = wait_bounded(r1, 1000);
	rc2 = wait_bounded(r2, 1000);
	if (rc0 == 77 || rc1 == 77 || rc2 == 77)
		skip();   /* no seccomp here: cannot take IPv6 away */
	load_err(errpath("0"), &err);
	load_err(errpath("1"), &err);
	load_err(errpath("2"), &err);
	if (rc0 || rc1 || rc2)
		fail_msg("rendezvous without IPv6: ranks exited %d %d %d: %s", rc0, rc1, rc2, err.buf);
	strbuf_release(&err);
}

/*
 * Rank 0 of job A, a peer of job B on the same port (a stale rank of an
 * earlier job): the peer is refused and says whose port it reached; rank 0
 * does not count it and names the rank that never came.
 */
static void test_rendezvous_refuses_other_job(void **state)
{
	int port = free_port(), rc0, rc1;
	pid_t r0 = start_rank(NULL, port, "job-A", 0, 2, 1500, errpath("a"), 0);
	pid_t r1 = start_rank("127.0.0.1", port, "job-B", 1, 2, 1000, errpath("b"), 0);
	struct strbuf e0 = STRBUF_INIT, e1 = STRBUF_INIT;

	rc1 = wait_bounded(r1, 4000);
	rc0 = wait_bounded(r0, 4000);
	load_err(errpath("a"), &e0);
	load_err(errpath("b"), &e1);
	assert_int_equal(rc1, 1);
	assert_int_equal(rc0, 1);
	if (!strstr(e1.buf, "served by job 'job-A', not this job 'job-B'"))
		fail_msg("peer's message does not name both jobs: %s", e1.buf);
	if (!strstr(e0.buf, "rank 1 of 2 did not connect") || !strstr(e0.buf, "refused"))
		fail_msg("rank 0's message does not name the missing rank and the refusal: %s",
			 e0.buf);
	strbuf_release(&e0);
	strbuf_release(&e1);
}

/*
 * A listener whose accept queue is full drops SYNs: a blocking connect()
 * then waits for the kernel's SYN retries (about two minutes).  The peer must
 * give up at its deadline (1 s here), connect included.
 */
static void test_rendezvous_connect_bounded(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), fill[4], rc;
	long long start;
	struct strbuf err = STRBUF_INIT;
	pid_t peer;

	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 0), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	for (int i = 0; i < 4; i++) {   /* fill the accept queue; later SYNs are dropped */
		fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		connect(fill[i], (struct sockaddr *)&sa, sizeof(sa));
	}
	start = dt_mono_ms();
	peer = start_rank("127.0.0.1", ntohs(sa.sin_port), "job-1", 1, 2, 1000,
			  errpath("c"), 0);
	rc = wait_bounded(peer, 5000);
	load_err(errpath("c"), &err);
	for (int i = 0; i < 4; i++)
		close(fill[i]);
	close(lfd);
	if (rc == -1)
		fail_msg("a peer with a 1 s deadline was still connecting after %lld ms",
			 dt_mono_ms() - start);
	assert_int_equal(rc, 1);
	if (!strstr(err.buf, "did not answer rank 1 within 1 s"))
		fail_msg("unexpected message: %s", err.buf);
	strbuf_release(&err);
}

/* A fake non-blocking communicator: "in progress" for `pending` polls. */
struct fake_comm {
	int pending;                 /* -1: for ever */
	int fail_at;                 /* poll number that reports an error, 0: none */
	int polls, aborts;
};

static int fake_poll(void *ctx, struct strbuf *err)
{
	struct fake_comm *f = ctx;

	f->polls++;
	if (f->fail_at && f->polls == f->fail_at) {
		strbuf_addstr(err, "nccl: remote process exited or there was a network error");
		return -1;
	}
	if (f->pending < 0 || f->polls <= f->pending)
		return 0;
	return 1;
}

static void fake_abort(void *ctx)
{
	((struct fake_comm *)ctx)->aborts++;
}

/* A rank that never joins: init is aborted at the deadline, not waited for. */
static void test_init_deadline_never_joins(void **state)
{
	struct fake_comm f = { .pending = -1 };
	struct pending_op op = { "NCCL init of 4 ranks", fake_poll, fake_abort, &f };
	struct strbuf err = STRBUF_INIT;
	long long start = dt_mono_ms(), took;

	assert_int_equal(comm_wait_op(&op, 300, &err), -1);
	took = dt_mono_ms() - start;
	if (took < 300 || took > 2000)
		fail_msg("gave up after %lld ms, deadline 300 ms", took);
	assert_int_equal(f.aborts, 1);
	assert_string_equal(err.buf, "NCCL init of 4 ranks did not finish in 0.3 s");
	strbuf_release(&err);
}

/* Every rank joins after a while: done, nothing aborted. */
static void test_init_deadline_joins(void **state)
{
	struct fake_comm f = { .pending = 5 };
	struct pending_op op = { "NCCL init of 4 ranks", fake_poll, fake_abort, &f };
	struct strbuf err = STRBUF_INIT;

	assert_int_equal(comm_wait_op(&op, 5000, &err), 0);
	assert_int_equal(f.polls, 6);
	assert_int_equal(f.aborts, 0);
	assert_int_equal(err.len, 0);
	strbuf_release(&err);
}

/* An asynchronous error ends the wait at once, with the library's message. */
static void test_init_deadline_error(void **state)
{
	struct fake_comm f = { .pending = -1, .fail_at = 3 };
	struct pending_op op = { "NCCL init of 4 ranks", fake_poll, fake_abort, &f };
	struct strbuf err = STRBUF_INIT;

	assert_int_equal(comm_wait_op(&op, 0, &err), -1);
	assert_int_equal(f.polls, 3);
	assert_int_equal(f.aborts, 1);
	assert_non_null(strstr(err.buf, "remote process exited"));
	strbuf_release(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rendezvous_ipv4_only),
		cmocka_unit_test(test_rendezvous_refuses_other_job),
		cmocka_unit_test(test_rendezvous_connect_bounded),
		cmocka_unit_test(test_init_deadline_never_joins),
		cmocka_unit_test(test_init_deadline_joins),
		cmocka_unit_test(test_init_deadline_error),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
