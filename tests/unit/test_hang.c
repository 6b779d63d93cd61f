/*
 * test_hang.c - hang attribution's summary (scheduler/hang.c hang_summarise)
 * and the agent's parse of a faulthandler dump (agent/debug.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/debug.h"
#include "agent/proctree.h"
#include "scheduler/hang.h"

static json_t *rank(int r, const char *node, const char *phase, long long seq, int in_coll,
		    double cpu, const char *state, long long wait_ms, int progressed)
{
	return json_pack("{s:i,s:s,s:i,s:s,s:I,s:I,s:b,s:f,s:s,s:s,s:I,s:b,s:[]}", "rank", r,
			 "node", node, "pid", 100 + r, "phase", phase, "seq", (json_int_t)seq,
			 "step", (json_int_t)5, "in_collective", in_coll, "cpu_pct", cpu, "state",
			 state, "wchan", in_coll ? "" : "do_sys_pause", "wait_ms",
			 (json_int_t)wait_ms, "progressed", progressed, "frames");
}

static json_t *culprit_ranks(json_t *sum)
{
	json_t *out = json_array(), *c;
	size_t i;

	json_array_foreach(json_object_get(sum, "culprits"), i, c)
		json_array_append_new(out, json_integer(json_integer_value(json_object_get(c, "rank"))));
	return out;
}

static void expect(json_t *ranks, const char *verdict, const char *culprits, const char *text)
{
	json_t *sum = hang_summarise(ranks), *got = culprit_ranks(sum);
	char *g = json_dumps(got, JSON_COMPACT);

	assert_string_equal(json_string_value(json_object_get(sum, "verdict")), verdict);
	assert_string_equal(g, culprits);
	if (text && !strstr(json_string_value(json_object_get(sum, "text")), text))
		fail_msg("'%s' not in '%s'", text, json_string_value(json_object_get(sum, "text")));
	free(g);
	json_decref(got);
	json_decref(sum);
	json_decref(ranks);
}

/* one rank in data loading while the others wait in the all-reduce */
static void test_outside_collective(void **state)
{
	json_t *r = json_array();

	for (int i = 0; i < 8; i++)
		json_array_append_new(r, i == 7 ? rank(7, "gpu05", "data", 1841, 0, 0, "S", 10, 0) :
				      rank(i, "gpu01", "all-reduce", 1842, 1, 99, "R", 9000, 0));
	expect(r, "hung", "[7]", "ranks 0-6 wait in all-reduce #1842; rank 7 on node gpu05 is in "
	       "data (not in the collective the others wait in; step 5; 0% CPU, state S in "
	       "do_sys_pause)");
}

/* the same collective for all: the one idle while the others spin */
static void test_idle_inside_collective(void **state)
{
	json_t *r = json_array();

	json_array_append_new(r, rank(0, "a", "all-reduce", 12, 1, 97, "R", 5000, 0));
	json_array_append_new(r, rank(1, "a", "all-reduce", 12, 1, 0.5, "S", 0, 0));
	json_array_append_new(r, rank(2, "b", "all-reduce", 12, 1, 88, "R", 5000, 0));
	expect(r, "hung", "[1]", "ranks 0,2 wait in all-reduce #12; rank 1 on node a");
}

/* the others went on to a later collective: the one behind */
static void test_behind(void **state)
{
	json_t *r = json_array();

	json_array_append_new(r, rank(0, "a", "scalar-sum", 13, 1, 0, "S", 5000, 0));
	json_array_append_new(r, rank(1, "b", "all-reduce", 12, 1, 0, "S", 0, 0));
	expect(r, "hung", "[1]", "behind");

	/* half went on (the non-blocking all-reduce completed for them): of the two
	 * behind, the one asleep while the others spin (bench_hang round 7) */
	r = json_array();
	json_array_append_new(r, rank(0, "a", "scalar-sum", 17, 1, 40, "R", 5000, 0));
	json_array_append_new(r, rank(1, "a", "all-reduce", 16, 1, 18, "R", 5000, 0));
	json_array_append_new(r, rank(2, "b", "scalar-sum", 17, 1, 35, "R", 5000, 0));
	json_array_append_new(r, rank(3, "b", "all-reduce", 16, 1, 0, "S", 5000, 0));
	expect(r, "hung", "[3]", "rank 3 on node b is in all-reduce #16 (idle while the others");

	/* a non-blocking all-reduce let rank 2 go on: ahead is not behind, the idle one is
	 * named (a loaded node: the spinners get little CPU) */
	r = json_array();
	json_array_append_new(r, rank(0, "a", "all-reduce", 16, 1, 35, "R", 5000, 0));
	json_array_append_new(r, rank(1, "a", "all-reduce", 16, 1, 0, "S", 5000, 0));
	json_array_append_new(r, rank(2, "b", "scalar-sum", 17, 1, 14, "R", 5000, 0));
	json_array_append_new(r, rank(3, "b", "all-reduce", 16, 1, 13, "R", 5000, 0));
	expect(r, "hung", "[1]", "ranks 0,2,3 wait in all-reduce #16, scalar-sum #17; rank 1 on "
	       "node a is in all-reduce #16 (idle while the others spin");
}

/* progressing: the rank that waits least is slow; none when all wait alike */
static void test_slow(void **state)
{
	json_t *r = json_array();

	json_array_append_new(r, rank(0, "a", "all-reduce", 40, 1, 90, "R", 8000, 1));
	json_array_append_new(r, rank(1, "b", "compute", 39, 0, 100, "R", 100, 1));
	json_array_append_new(r, rank(2, "b", "all-reduce", 40, 1, 90, "R", 7900, 1));
	expect(r, "slow", "[1]", "rank 1 on node b is slow");

	r = json_array();
	json_array_append_new(r, rank(0, "a", "all-reduce", 40, 1, 90, "R", 800, 1));
	json_array_append_new(r, rank(1, "b", "compute", 39, 0, 100, "R", 700, 0));
	expect(r, "progressing", "[]", "no hang");
}

/* Python ranks (no seq): the minority place, or nothing to say */
static void test_python_and_none(void **state)
{
	json_t *r = json_array();

	json_array_append_new(r, rank(0, "a", "all_reduce", -1, 1, 0, "S", -1, 0));
	json_array_append_new(r, rank(1, "b", "python load (job.py:9)", -1, 0, 0, "S", -1, 0));
	json_array_append_new(r, rank(2, "c", "all_reduce", -1, 1, 0, "S", -1, 0));
	expect(r, "hung", "[1]", "rank 1 on node b is in python load (job.py:9)");

	r = json_array();
	json_array_append_new(r, rank(0, "a", "all_reduce", -1, 1, 0, "S", -1, 0));
	json_array_append_new(r, rank(1, "b", "all_reduce", -1, 1, 0, "S", -1, 0));
	expect(r, "hung", "[]", "no single rank stands out");
	expect(json_array(), "unknown", "[]", "no rank process");
	r = json_array();
	json_array_append_new(r, rank(0, "a", "native clock_nanosleep (libc.so.6)", -1, 0, 0, "S",
				      -1, 0));
	expect(r, "hung", "[]", "rank 0 is in native clock_nanosleep (libc.so.6); no single rank");
}

static void test_pystack(void **state)
{
	static const char dump[] =
		"Thread 0x00007f0000000001 (most recent call first):\n"
		"  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
		"  File \"/usr/lib/python3.11/threading.py\", line 1002 in _bootstrap\n"
		"\n"
		"Current thread 0x00007f0000000002 (most recent call first):\n"
		"  File \"/shared/t/job.py\", line 9 in load_batch\n"
		"  File \"/shared/t/job.py\", line 14 in <module>\n"
		"\x1b[31m junk\n";
	static const char hostile[] = "Thread 1:\n  File \"\x1b]x\", line 1 in f\x07\n";
	static const char headless[] = "  File \"a\", line 1 in f\n";
	json_t *f = json_array();

	assert_int_equal(debug_parse_pystack(dump, sizeof(dump) - 1, f, 12), 2);
	assert_string_equal(json_string_value(json_array_get(f, 0)), "load_batch (t/job.py:9)");
	assert_string_equal(json_string_value(json_array_get(f, 1)), "<module> (t/job.py:14)");
	json_array_clear(f);
	/* hostile: escapes become '?', no header at all is no frame */
	assert_int_equal(debug_parse_pystack(hostile, sizeof(hostile) - 1, f, 12), 1);
	assert_string_equal(json_string_value(json_array_get(f, 0)), "f? (?]x:1)");
	json_array_clear(f);
	assert_int_equal(debug_parse_pystack(headless, sizeof(headless) - 1, f, 12), 0);
	/* every truncation (a dump cut by the size limit), each in a buffer of its exact
	 * size: ASan catches a read past the end */
	for (size_t n = 0; n < sizeof(dump); n++) {
		char *b = malloc(n ? n : 1);

		memcpy(b, dump, n);
		json_array_clear(f);
		debug_parse_pystack(b, n, f, 12);
		json_array_clear(f);
		debug_parse_gdb(b, n, f, 12);
		free(b);
	}
	json_decref(f);
}

static void test_gdb(void **state)
{
	static const char bt[] =
		"0x00007fcc89e26e53 in clock_nanosleep () from /lib/x86_64-linux-gnu/libc.so.6\n"
		"#0  0x00007fcc89e26e53 in clock_nanosleep () from /lib/x86_64-linux-gnu/libc.so.6\n"
		"#1  0x00007fcc89e26e53 in __GI___nanosleep (req=<optimized out>) at "
		"../sysdeps/unix/sysv/linux/nanosleep.c:25\n"
		"#2  0x00005589877934af in ?? ()\n"
		"#3  main (argc=1, argv=0x7ffd) at /src/app/x.c:12\n"
		"[Inferior 1 (process 32019) detached]\n";
	json_t *f = json_array();

	assert_int_equal(debug_parse_gdb(bt, sizeof(bt) - 1, f, 12), 4);
	assert_string_equal(json_string_value(json_array_get(f, 0)), "clock_nanosleep (libc.so.6)");
	assert_string_equal(json_string_value(json_array_get(f, 1)),
			    "__GI___nanosleep (nanosleep.c:25)");
	assert_string_equal(json_string_value(json_array_get(f, 2)), "??");
	assert_string_equal(json_string_value(json_array_get(f, 3)), "main (x.c:12)");
	json_decref(f);
}

static void test_gpus(void **state)
{
	json_t *reply = json_pack("{s:[{s:i,s:i},{s:i,s:i}]}", "ranks", "rank", 0, "pid", 10,
				  "rank", 1, "pid", 11);
	json_t *inv = json_pack("{s:[{s:i,s:i,s:[{s:i,s:I}]},{s:i,s:i,s:[]}]}", "gpus", "index", 0,
				"utilization", 97, "processes", "pid", 10, "used_memory",
				(json_int_t)1 << 30, "index", 1, "utilization", 0, "processes");
	char *got;

	debug_add_gpus(reply, inv);
	got = json_dumps(reply, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(got, "{\"ranks\":[{\"gpus\":[{\"index\":0,\"used_memory\":1073741824,"
			    "\"utilization\":97}],\"pid\":10,\"rank\":0},{\"gpus\":[],\"pid\":11,"
			    "\"rank\":1}]}");
	free(got);
	json_decref(reply);
	json_decref(inv);
}

struct collect_arg {
	pid_t pid;
	const char *dir;
	json_t *reply;
};

static void *collect_thread(void *data)
{
	struct collect_arg *a = data;

	a->reply = debug_collect("n1", &a->pid, 1, a->dir, 1500);
	return NULL;
}

/*
 * `dtctl debug` signals a dttrain rank twice, a sampling apart (1.5 s here):
 * a rank that exits after the first may have its number taken by another
 * user's process before the second, and the agent (root in team mode) then
 * sent SIGUSR2, whose default is to terminate, to that process.  Here the
 * rank exits at its first SIGUSR2, and the next process made gets its number
 * (the kernel's ns_last_pid, as root) as uid 65534; it must live on.
 */
static void test_debug_never_signals_a_reused_pid(void **state)
{
	int reused = 0;

	if (geteuid() != 0 || access("/proc/sys/kernel/ns_last_pid", W_OK) < 0)
		skip();
	for (int attempt = 0; attempt < 8 && !reused; attempt++) {
		char dir[] = "/tmp/dt-debug-XXXXXX", path[128], line[64];
		char *const envp[] = { "RANK=0", "PATH=/usr/bin:/bin", NULL };
		struct collect_arg a = { 0 };
		pthread_t th;
		pid_t other;
		int ready[2], st, fd;
		FILE *f;

		assert_non_null(mkdtemp(dir));
		snprintf(path, sizeof(path), "%s/debug", dir);
		assert_int_equal(mkdir(path, 0755), 0);
		assert_int_equal(pipe(ready), 0);
		a.dir = dir;
		a.pid = fork();
		assert_true(a.pid >= 0);
		if (a.pid == 0) {
			dup2(ready[1], 3);
			execle("/bin/sh", "sh", "-c", "trap 'exit 0' USR2; echo ready >&3; "
			       "while :; do sleep 0.05; done", (char *)NULL, envp);
			_exit(127);
		}
		close(ready[1]);
		assert_true(read(ready[0], line, sizeof(line)) > 0);   /* its trap is set */
		close(ready[0]);
		snprintf(path, sizeof(path), "%s/debug/0.dttrain", dir);
		assert_non_null(f = fopen(path, "w"));
		fprintf(f, "dttrain pid=%d\n", (int)a.pid);
		fclose(f);
		assert_int_equal(pthread_create(&th, NULL, collect_thread, &a), 0);
		assert_int_equal(waitpid(a.pid, &st, 0), a.pid);   /* it took the first */
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
		assert_true(fd >= 0);
		snprintf(line, sizeof(line), "%d", (int)a.pid - 1);
		assert_true(write(fd, line, strlen(line)) > 0);
		close(fd);
		other = fork();
		assert_true(other >= 0);
		if (other == 0) {
			if (setgid(65534) < 0 || setuid(65534) < 0)
				_exit(126);
			execl("/bin/sleep", "sleep", "30", (char *)NULL);
			_exit(127);
		}
		pthread_join(th, NULL);
		reused = other == a.pid;
		/* the other user's process: alive, never signalled by the agent */
		assert_int_equal(waitpid(other, &st, WNOHANG), 0);
		kill(other, SIGKILL);
		waitpid(other, &st, 0);
		json_decref(a.reply);
		snprintf(path, sizeof(path), "rm -rf '%s'", dir);
		assert_int_equal(system(path), 0);
	}
	if (!reused)
		skip();   /* other processes took the number every time */
}

/*
 * `dtctl debug` pins each process of a rank's tree by the start time its scan
 * read (proc_tree_procs, in the same read of /proc/PID/stat that made it a
 * member): a number freed and taken by another process between the scan and
 * the pidfd is not that process.  Here the scan's start time is checked
 * against the kernel's, and a process whose start differs from the pinned one
 * (what a reused number looks like) is left alone: not sampled, not signalled.
 */
static void test_debug_pins_the_scanned_start_time(void **state)
{
	char *const envp[] = { "RANK=0", "PATH=/usr/bin:/bin", NULL };
	struct proc_tree pt;
	struct proc_id *procs = NULL, stale;
	size_t nr = 0, alloc = 0, found = 0;
	char line[16];
	int ready[2], st;
	json_t *reply;
	pid_t pid;

	(void)state;
	assert_int_equal(pipe(ready), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(ready[1], 3);
		execle("/bin/sh", "sh", "-c", "trap 'exit 0' USR2; echo ready >&3; "
		       "while :; do sleep 0.05; done", (char *)NULL, envp);
		_exit(127);
	}
	close(ready[1]);
	assert_true(read(ready[0], line, sizeof(line)) > 0);
	close(ready[0]);
	memset(&pt, 0, sizeof(pt));
	pt.parent = getpid();
	proc_tree_procs(&pt, &procs, &nr, &alloc);
	for (size_t i = 0; i < nr; i++)
		if (procs[i].pid == pid) {
			assert_int_equal(procs[i].start, proc_start_time(pid, NULL));
			assert_true(procs[i].start > 0);
			stale = procs[i];
			found++;
		}
	assert_int_equal(found, 1);
	stale.start++;   /* the number's process started at another time */
	reply = debug_collect_procs("n1", &stale, 1, NULL, 100);
	assert_int_equal(json_array_size(json_object_get(reply, "ranks")), 0);
	assert_int_equal(kill(pid, 0), 0);   /* and it was never signalled */
	json_decref(reply);
	/* the control: pinned by its true start time, it is sampled */
	stale.start--;
	reply = debug_collect_procs("n1", &stale, 1, NULL, 100);
	assert_int_equal(json_array_size(json_object_get(reply, "ranks")), 1);
	json_decref(reply);
	free(procs);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &st, 0), pid);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_outside_collective),
		cmocka_unit_test(test_idle_inside_collective),
		cmocka_unit_test(test_behind),
		cmocka_unit_test(test_slow),
		cmocka_unit_test(test_python_and_none),
		cmocka_unit_test(test_pystack),
		cmocka_unit_test(test_gdb),
		cmocka_unit_test(test_gpus),
		cmocka_unit_test(test_debug_never_signals_a_reused_pid),
		cmocka_unit_test(test_debug_pins_the_scanned_start_time),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
