/*
 * progress.c - the rank's phase and collective count, dumped on SIGUSR2
 * (see progress.h).  Everything the handler touches is a volatile scalar
 * and it calls only clock_gettime() and write().
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include "trainer/progress.h"

static const char *const phase_names[PH_NR] = {
	"init", "data", "compute", "all-reduce", "scalar-sum", "optimizer", "send", "recv",
	"checkpoint", "eval", "done",
};

static volatile int cur_phase, prev_phase, in_coll;
static volatile long long cur_step, coll_seq, wait_ns, phase_start_ns, coll_start_ns;
static int record_fd = -1;
static int hang_rank = -1, hang_phase = PH_ALLREDUCE, my_rank = -1;
static long long hang_step = -1;

const char *progress_phase_name(int phase)
{
	return phase >= 0 && phase < PH_NR ? phase_names[phase] : "?";
}

/* the coarse clock (a vDSO read of the tick, ~1-4 ms resolution): a few ns per call
 * where the precise one costs ~100 ns, 8 times a step; phase and wait times are
 * seconds when they matter */
static long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int progress_parse_hang(const char *spec, struct strbuf *err)
{
	char *end;
	long r, s;

	hang_rank = -1;
	if (!spec || !*spec)
		return 0;
	r = strtol(spec, &end, 10);
	if (end == spec || *end != ':' || r < 0)
		goto bad;
	spec = end + 1;
	s = strtol(spec, &end, 10);
	if (end == spec || s < 0 || (*end && *end != ':'))
		goto bad;
	hang_phase = PH_ALLREDUCE;
	if (*end == ':') {
		int p;

		for (p = 0; p < PH_NR; p++)
			if (!strcmp(end + 1, phase_names[p]))
				break;
		if (p == PH_NR || p == PH_INIT || p == PH_DONE)
			goto bad;
		hang_phase = p;
	}
	hang_rank = (int)r;
	hang_step = s;
	return 0;
bad:
	strbuf_addstr(err, "option '--hang-rank' expects RANK:STEP[:PHASE] (like 1:20 or "
		      "1:20:data; PHASE one of data, compute, all-reduce, scalar-sum, optimizer, "
		      "send, recv, checkpoint, eval)");
	return -1;
}

/* Decimal of v at p; returns the end. */
static char *put_ll(char *p, long long v)
{
	char tmp[24];
	int n = 0;

	if (v < 0) {
		*p++ = '-';
		v = -v;
	}
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v && n < (int)sizeof(tmp));
	while (n)
		*p++ = tmp[--n];
	return p;
}

static char *put_str(char *p, const char *s)
{
	while (*s)
		*p++ = *s++;
	return p;
}

static void on_usr2(int sig)
{
	char buf[256], *p = buf;
	int saved = errno, ph = cur_phase;
	long long now = mono_ns(), w = wait_ns;

	(void)sig;
	if (in_coll)
		w += now - coll_start_ns;
	p = put_str(p, "phase=");
	p = put_str(p, progress_phase_name(ph));
	p = put_str(p, " seq=");
	p = put_ll(p, coll_seq);
	p = put_str(p, " step=");
	p = put_ll(p, cur_step);
	p = put_str(p, " in_coll=");
	p = put_ll(p, in_coll);
	p = put_str(p, " phase_ms=");
	p = put_ll(p, (now - phase_start_ns) / 1000000);
	p = put_str(p, " wait_ms=");
	p = put_ll(p, w / 1000000);
	*p++ = '\n';
	if (write(record_fd, buf, (size_t)(p - buf)) < 0) {
		/* nothing to do about it in a handler */
	}
	errno = saved;
}

void progress_init(int rank)
{
	const char *dir = getenv("DT_JOB_DIR");
	char path[4096], head[96], *p = head;
	struct sigaction sa;

	my_rank = rank;
	phase_start_ns = mono_ns();
	if (!dir || !*dir || record_fd >= 0)
		return;
	snprintf(path, sizeof(path), "%s/debug", dir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/debug/%d.dttrain", dir, rank);
	record_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_NOFOLLOW | O_CLOEXEC |
			 O_NONBLOCK, 0644);
	if (record_fd < 0)
		return;
	p = put_str(p, "dttrain pid=");
	p = put_ll(p, getpid());
	p = put_str(p, " rank=");
	p = put_ll(p, rank);
	*p++ = '\n';
	if (write(record_fd, head, (size_t)(p - head)) < 0) {
		close(record_fd);
		record_fd = -1;
		return;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr2;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR2, &sa, NULL);
}

void progress_step(long long step)
{
	cur_step = step;
}

void progress_phase(int phase)
{
	if (phase != cur_phase) {
		phase_start_ns = mono_ns();
		cur_phase = phase;
	}
	if (phase == hang_phase && my_rank == hang_rank && cur_step == hang_step) {
		/* --hang-rank: stop here for good (signals end pause() only) */
		for (;;)
			pause();
	}
}

void progress_coll_begin(int phase)
{
	prev_phase = cur_phase;
	coll_seq = coll_seq + 1;
	coll_start_ns = mono_ns();
	in_coll = 1;
	progress_phase(phase);
}

void progress_coll_end(void)
{
	wait_ns = wait_ns + (mono_ns() - coll_start_ns);
	in_coll = 0;
	progress_phase(prev_phase);
}
