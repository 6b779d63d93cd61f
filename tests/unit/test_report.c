/*
 * test_report.c - the agent's report socket (agent/report.c) and the peer
 * check behind it (agent/proctree.c proc_descends_from): the kernel's pid of
 * each datagram's sender, and whether that pid is inside a task's tree.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "strbuf.h"
#include "agent/proctree.h"
#include "agent/report.h"

/* a child that sleeps until killed */
static pid_t sleeper(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		pause();
		_exit(0);
	}
	assert_true(pid > 0);
	return pid;
}

static void test_descends(void **state)
{
	pid_t self = getpid(), parent = getppid(), child = sleeper(), other = sleeper();
	unsigned long long start = proc_start_time(self, NULL);

	assert_true(start > 0);
	/* a process is in its own tree; its children are; its parent is not */
	assert_true(proc_descends_from(self, self, start));
	assert_true(proc_descends_from(child, self, start));
	assert_true(proc_descends_from(child, self, 0));
	assert_false(proc_descends_from(parent, self, start));
	/* a sibling (another job's process) is not in this child's tree */
	assert_false(proc_descends_from(other, child, 0));
	assert_true(proc_descends_from(child, child, 0));
	/* a recycled ancestor pid (another start time) is not the ancestor */
	assert_false(proc_descends_from(child, self, start + 1));
	/* nonsense */
	assert_false(proc_descends_from(child, 1, 0));
	assert_false(proc_descends_from(child, 0, 0));
	assert_false(proc_descends_from(-5, self, 0));
	kill(child, SIGKILL);
	kill(other, SIGKILL);
	waitpid(child, NULL, 0);
	waitpid(other, NULL, 0);
	/* gone: no tree any more */
	assert_false(proc_descends_from(child, self, start));
}

/* the next datagram on fd, waiting for it (a child sends it) */
static int recv_wait(int fd, struct strbuf *body, struct report_from *from)
{
	struct pollfd p = { fd, POLLIN, 0 };

	assert_true(poll(&p, 1, 5000) > 0);
	return report_recv(fd, body, from);
}

static void test_socket_credentials(void **state)
{
	struct strbuf name = STRBUF_INIT, err = STRBUF_INIT, body = STRBUF_INIT;
	struct report_from from;
	char big[REPORT_MAX + 10];
	unsigned long long start = proc_start_time(getpid(), NULL);
	int fd, fd2, status;
	pid_t child;

	report_socket_name(&name, "/tmp/test-report-home-for-unit");
	assert_int_equal(name.buf[0], '@');
	fd = report_listen(name.buf, &err);
	assert_true(fd >= 0);
	/* a second agent of the same home cannot take the name */
	fd2 = report_listen(name.buf, &err);
	assert_int_equal(fd2, -1);
	assert_non_null(strstr(err.buf, "cannot bind"));
	assert_int_equal(report_recv(fd, &body, &from), 0);

	/* from us: our pid, as the kernel says; no address to answer to */
	assert_int_equal(report_send(name.buf, "{\"a\":1}", 7, NULL, &err), 0);
	assert_int_equal(report_recv(fd, &body, &from), 1);
	assert_string_equal(body.buf, "{\"a\":1}");
	assert_int_equal(from.pid, getpid());
	assert_int_equal(from.uid, geteuid());
	assert_int_equal(from.addrlen, 0);

	/*
	 * From a child that waits for the answer (the rank logger): its pid,
	 * whatever it writes in the body, and it is still there to be checked
	 * in /proc while it waits; it gets the answer.
	 */
	child = fork();
	if (child == 0) {
		struct strbuf e = STRBUF_INIT, ack = STRBUF_INIT;

		if (report_send(name.buf, "{\"pid\":1}", 9, &ack, &e) < 0)
			_exit(2);
		_exit(!strcmp(ack.buf, "ok") ? 0 : 1);
	}
	assert_true(child > 0);
	assert_int_equal(recv_wait(fd, &body, &from), 1);
	assert_int_equal(from.pid, child);
	assert_true(from.addrlen > 0);
	assert_true(proc_descends_from(from.pid, getpid(), start));
	report_answer(fd, &from, "ok");
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* too long to be a report: refused by the sender */
	memset(big, 'x', sizeof(big));
	assert_int_equal(report_send(name.buf, big, sizeof(big), NULL, &err), -1);
	assert_int_equal(report_recv(fd, &body, &from), 0);
	close(fd);
	/* nobody listening: a clear error */
	strbuf_reset(&err);
	assert_int_equal(report_send(name.buf, "{}", 2, NULL, &err), -1);
	assert_non_null(strstr(err.buf, "cannot send"));
	strbuf_release(&name);
	strbuf_release(&err);
	strbuf_release(&body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_descends),
		cmocka_unit_test(test_socket_credentials),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
