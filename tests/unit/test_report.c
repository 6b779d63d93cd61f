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

static void test_socket_credentials(void **state)
{
	struct strbuf name = STRBUF_INIT, err = STRBUF_INIT, body = STRBUF_INIT;
	char big[REPORT_MAX + 10];
	int fd, fd2;
	pid_t pid, child;
	uid_t uid;

	report_socket_name(&name, "/tmp/test-report-home-for-unit");
	assert_int_equal(name.buf[0], '@');
	fd = report_listen(name.buf, &err);
	assert_true(fd >= 0);
	/* a second agent of the same home cannot take the name */
	fd2 = report_listen(name.buf, &err);
	assert_int_equal(fd2, -1);
	assert_non_null(strstr(err.buf, "cannot bind"));
	assert_int_equal(report_recv(fd, &body, &pid, &uid), 0);

	/* from us: our pid, as the kernel says */
	assert_int_equal(report_send(name.buf, "{\"a\":1}", 7, &err), 0);
	assert_int_equal(report_recv(fd, &body, &pid, &uid), 1);
	assert_string_equal(body.buf, "{\"a\":1}");
	assert_int_equal(pid, getpid());
	assert_int_equal(uid, geteuid());

	/* from a child: its pid, whatever it writes in the body */
	child = fork();
	if (child == 0) {
		struct strbuf e = STRBUF_INIT;

		_exit(report_send(name.buf, "{\"pid\":1}", 9, &e) == 0 ? 0 : 1);
	}
	assert_true(child > 0);
	waitpid(child, NULL, 0);
	assert_int_equal(report_recv(fd, &body, &pid, &uid), 1);
	assert_int_equal(pid, child);

	/* too long to be a report: refused by the sender */
	memset(big, 'x', sizeof(big));
	assert_int_equal(report_send(name.buf, big, sizeof(big), &err), -1);
	assert_int_equal(report_recv(fd, &body, &pid, &uid), 0);
	close(fd);
	/* nobody listening: a clear error */
	strbuf_reset(&err);
	assert_int_equal(report_send(name.buf, "{}", 2, &err), -1);
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
