/*
 * test_proctree.c - agent/proctree.h: signalling a rank's process tree.
 * A process in the tree's process group gets a signal once, not once by the
 * group and again by its pid: a rank that checkpoints on SIGUSR1 (a
 * preemption, docs/fairshare.md) would checkpoint twice.  A real-time signal
 * shows it (they queue: two sends are two deliveries, where two SIGUSR1
 * sent close together may merge).  A process older than the tree's `since`
 * is not matched by the marker in its environment.  An mpi launcher's task
 * passes a signal only to the ranks below its rank loggers.  The quick
 * empty check at a task's end (no walk of /proc) says "empty" only when the
 * subreaper has no child and the cgroup no process.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/proctree.h"

static void test_group_member_signalled_once(void **state)
{
	int ready[2], go[2], back[2];
	char c = 0;
	int count = -1, status;
	pid_t pid;
	struct proc_tree t;

	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(back), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sigset_t set;
		struct timespec zero = { 0, 0 };
		int n = 0;

		setpgid(0, 0);
		sigemptyset(&set);
		sigaddset(&set, SIGRTMIN);
		sigprocmask(SIG_BLOCK, &set, NULL);
		if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(1);
		/* what was queued while it waited for "go" */
		while (sigtimedwait(&set, NULL, &zero) == SIGRTMIN)
			n++;
		_exit(write(back[1], &n, sizeof(n)) == sizeof(n) ? 0 : 1);
	}
	assert_int_equal(read(ready[0], &c, 1), 1);
	memset(&t, 0, sizeof(t));
	t.pgid = pid;
	assert_int_equal(proc_tree_signal(&t, SIGRTMIN), 1);
	assert_int_equal(write(go[1], "g", 1), 1);
	assert_int_equal(read(back[0], &count, sizeof(count)), (ssize_t)sizeof(count));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(count, 1);
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	close(go[1]);
	close(back[0]);
	close(back[1]);
}

/*
 * The mpi launcher's task: launcher -> rank logger -> rank.  Here the
 * launcher is timeout(1), the "logger" /bin/sh (the file passed as
 * logger_exe) and the rank its `sleep`, beside a sleep of the launcher's
 * own side.  SIGUSR1 kills only the rank's sleep: the shell then goes on
 * to `:` and exits 0, so timeout exits 0 (had the shell or timeout got it,
 * timeout would end by the signal or with 128+10), and the other sleep lives.
 */
static void test_only_ranks_below_loggers(void **state)
{
	struct proc_tree t;
	struct timespec tick = { 0, 20 * 1000 * 1000 };
	pid_t launcher, other;
	int status = 0, tries;

	other = fork();
	assert_true(other >= 0);
	if (other == 0) {
		execl("/bin/sleep", "sleep", "103", (char *)NULL);
		_exit(127);
	}
	launcher = fork();
	assert_true(launcher >= 0);
	if (launcher == 0) {
		execlp("timeout", "timeout", "100", "/bin/sh", "-c",
		       "exec 2>/dev/null; sleep 102; :", (char *)NULL);
		_exit(127);
	}
	memset(&t, 0, sizeof(t));
	t.parent = getpid();
	/* other, timeout, the shell and its sleep */
	for (tries = 0; proc_tree_count(&t) < 4 && tries < 1000; tries++)
		nanosleep(&tick, NULL);
	assert_int_equal(proc_tree_count(&t), 4);
	assert_int_equal(proc_tree_signal_ranks(&t, SIGUSR1, "/bin/sh"), 1);
	for (tries = 0; waitpid(launcher, &status, WNOHANG) == 0 && tries < 1500; tries++)
		nanosleep(&tick, NULL);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(waitpid(other, &status, WNOHANG), 0);
	kill(other, SIGKILL);
	assert_int_equal(waitpid(other, &status, 0), other);
	/* no logger in the tree: nothing to signal */
	assert_int_equal(proc_tree_signal_ranks(&t, SIGUSR1, "/bin/sh"), 0);
}

/*
 * A process that carries the tree's marker is the tree's, unless it started
 * before `since` (the supervisor's own start): the marker is made after it,
 * so it cannot have inherited it, and its environment is not read.
 */
static void test_marker_since(void **state)
{
	char *argv[] = { "sleep", "30", NULL }, *envp[] = { "DT_TEST_MARK=m-4242", NULL };
	struct proc_tree t;
	unsigned long long start;
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		execve("/bin/sleep", argv, envp);
		_exit(127);
	}
	memset(&t, 0, sizeof(t));
	t.marker_name = "DT_TEST_MARK";
	t.marker = "m-4242";
	/* until it has exec'd, its environment is ours (no marker) */
	for (int i = 0; i < 10000 && proc_tree_count(&t) != 1; i++)
		usleep(1000);
	assert_int_equal(proc_tree_count(&t), 1);
	start = proc_start_time(pid, NULL);
	assert_true(start > 0);
	t.since = start;          /* started then: still the tree's */
	assert_int_equal(proc_tree_count(&t), 1);
	t.since = start + 1;      /* started before: not */
	assert_int_equal(proc_tree_count(&t), 0);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
}

static void write_procs(const char *dir, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Wait until pid is a zombie (it exited, not yet reaped). */
static void wait_zombie(pid_t pid)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
}

/*
 * A stand-in for a task's cgroup (a dir with a cgroup.procs file) and the
 * supervisor (this process, a child subreaper): "empty" without a walk only
 * when no child of ours is left, zombies included, and the cgroup lists no
 * live process; whatever it says, a full count agrees where it says empty.
 */
static void test_empty_quick(void **state)
{
	char dir[] = "/tmp/dt-test-cgroup.XXXXXX", line[32], path[300];
	struct proc_tree t;
	pid_t pid, grandchild = 0;
	int status, p[2], q[2];

	assert_non_null(mkdtemp(dir));
	write_procs(dir, "");
	memset(&t, 0, sizeof(t));
	t.cgroup = dir;
	t.parent = getpid();
	while (waitpid(-1, &status, WNOHANG) > 0)
		;
	assert_int_equal(proc_tree_empty_quick(&t), 0);     /* not a subreaper */
	assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	assert_int_equal(proc_tree_empty_quick(&t), 1);
	assert_int_equal(proc_tree_count(&t), 0);

	write_procs(dir, "1\n");                            /* a live process in it */
	assert_int_equal(proc_tree_empty_quick(&t), 0);
	write_procs(dir, "");

	/* a child that exited, not yet reaped: a child all the same */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	wait_zombie(pid);
	assert_int_equal(proc_tree_empty_quick(&t), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	snprintf(line, sizeof(line), "%d\n", (int)pid);    /* a dead pid in the list */
	write_procs(dir, line);
	assert_int_equal(proc_tree_empty_quick(&t), 1);
	write_procs(dir, "");

	/* an orphan outside the cgroup: its parent exited, so it is ours now */
	assert_int_equal(pipe(p), 0);
	assert_int_equal(pipe(q), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pid_t g = fork();

		if (g == 0) {
			close(q[1]);
			if (read(q[0], line, 1) < 0)
				_exit(1);
			_exit(0);          /* when the test closes its end of q */
		}
		_exit(write(p[1], &g, sizeof(g)) == sizeof(g) ? 0 : 1);
	}
	close(q[0]);
	assert_int_equal(read(p[0], &grandchild, sizeof(grandchild)), (ssize_t)sizeof(grandchild));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(proc_tree_empty_quick(&t), 0);
	assert_int_equal(proc_tree_count(&t), 1);
	close(q[1]);
	assert_int_equal(waitpid(grandchild, &status, 0), grandchild);
	close(p[0]);
	close(p[1]);
	assert_int_equal(proc_tree_empty_quick(&t), 1);

	t.parent = 1;                                        /* not the caller */
	assert_int_equal(proc_tree_empty_quick(&t), 0);
	t.parent = getpid();
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	assert_int_equal(unlink(path), 0);                   /* list unreadable */
	assert_int_equal(proc_tree_empty_quick(&t), 0);
	t.cgroup = NULL;                                     /* no cgroup */
	assert_int_equal(proc_tree_empty_quick(&t), 0);
	assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_group_member_signalled_once),
		cmocka_unit_test(test_only_ranks_below_loggers),
		cmocka_unit_test(test_marker_since),
		cmocka_unit_test(test_empty_quick),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
