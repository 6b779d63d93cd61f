/*
 * proctree.c - task process trees and cgroups (see proctree.h).
 */
#include "proctree.h"
#include "dthome.h"
#include "protocol.h"
#include "usage.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Read /proc/PID/stat: state, pgrp and start time. */
static int read_stat(pid_t pid, char *state, pid_t *ppid, pid_t *pgrp, unsigned long long *start)
{
	char path[64], buf[1024];
	const char *p;
	ssize_t n;
	int fd;
	unsigned long long f[20];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strrchr(buf, ')');   /* comm may contain spaces and parens */
	if (!p || p[1] != ' ')
		return -1;
	p += 2;
	if (state)
		*state = *p;
	p++;
	/* fields 4.. (ppid, pgrp, session, tty, tpgid, flags, minflt, cminflt,
	 * majflt, cmajflt, utime, stime, cutime, cstime, priority, nice,
	 * num_threads, itrealvalue, starttime) */
	for (int i = 0; i < 19; i++) {
		char *end;

		while (*p == ' ')
			p++;
		f[i] = strtoull(p, &end, 10);
		if (end == p)
			return -1;
		p = end;
	}
	if (ppid)
		*ppid = (pid_t)f[0];
	if (pgrp)
		*pgrp = (pid_t)f[1];
	if (start)
		*start = f[18];
	return 0;
}

unsigned long long proc_start_time(pid_t pid, char *state)
{
	unsigned long long start = 0;

	if (pid <= 0 || read_stat(pid, state, NULL, NULL, &start) < 0)
		return 0;
	return start;
}

int proc_alive(pid_t pid, unsigned long long start)
{
	char st = 0;
	unsigned long long s = proc_start_time(pid, &st);

	if (!s || st == 'Z' || st == 'X')
		return 0;
	return !start || s == start;
}

int proc_descends_from(pid_t pid, pid_t ancestor, unsigned long long ancestor_start)
{
	if (ancestor <= 1 || (ancestor_start && !proc_alive(ancestor, ancestor_start)))
		return 0;
	/* a chain is never longer than the number of pids; bound it anyway */
	for (int depth = 0; pid > 1 && depth < 4096; depth++) {
		pid_t ppid = 0;

		if (pid == ancestor)
			return 1;
		if (read_stat(pid, NULL, &ppid, NULL, NULL) < 0)
			return 0;
		pid = ppid;
	}
	return 0;
}

/* Does /proc/PID/environ contain exactly `entry` (NAME=value)? */
static int has_env_entry(pid_t pid, const char *entry)
{
	char path[64];
	struct strbuf sb = STRBUF_INIT;
	size_t n = strlen(entry);
	int fd, found = 0;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	if (strbuf_read_fd(&sb, fd, 1024 * 1024) > 0) {
		for (size_t i = 0; i < sb.len; i += strlen(sb.buf + i) + 1) {
			if (!strncmp(sb.buf + i, entry, n) && sb.buf[i + n] == '\0') {
				found = 1;
				break;
			}
		}
	}
	close(fd);
	strbuf_release(&sb);
	return found;
}

/* pids, each with its start time as the scan read it (0: not read) */
struct pidset {
	pid_t *v;
	unsigned long long *start;
	size_t nr, alloc, alloc_start;
};
#define PIDSET_INIT { NULL, NULL, 0, 0, 0 }

static void pidset_release(struct pidset *s)
{
	free(s->v);
	free(s->start);
}

/* Append without pidset_add's linear dedupe: /proc lists each pid once, and
 * parents.v[i] must stay the parent of all.v[i]. */
static void pidset_push(struct pidset *s, pid_t pid, unsigned long long start)
{
	ALLOC_GROW(s->v, s->nr + 1, s->alloc);
	ALLOC_GROW(s->start, s->nr + 1, s->alloc_start);
	s->start[s->nr] = start;
	s->v[s->nr++] = pid;
}

static void pidset_add(struct pidset *s, pid_t pid, unsigned long long start)
{
	for (size_t i = 0; i < s->nr; i++)
		if (s->v[i] == pid)
			return;
	pidset_push(s, pid, start);
}

static int pidset_has(const struct pidset *s, pid_t pid)
{
	for (size_t i = 0; i < s->nr; i++)
		if (s->v[i] == pid)
			return 1;
	return 0;
}

/* Add the live processes of t->cgroup but ourselves, each with the start time
 * read; -1 if its list cannot be read. */
static int cgroup_members(const struct proc_tree *t, struct pidset *out)
{
	struct strbuf path = STRBUF_INIT, procs = STRBUF_INIT;
	pid_t self = getpid();
	int ret = -1;

	strbuf_addf(&path, "%s/cgroup.procs", t->cgroup);
	if (strbuf_read_file(&procs, path.buf, 4 * 1024 * 1024) >= 0) {
		char *p = procs.buf, *end;

		for (;;) {
			long v = strtol(p, &end, 10);

			if (end == p)
				break;
			char st = 0;
			unsigned long long start = v > 0 && v != self ?
				proc_start_time((pid_t)v, &st) : 0;

			if (start && st != 'Z' && st != 'X')
				pidset_add(out, (pid_t)v, start);
			p = end;
		}
		ret = 0;
	}
	strbuf_release(&path);
	strbuf_release(&procs);
	return ret;
}

/* Collect the live processes of the tree. */
static void collect(const struct proc_tree *t, struct pidset *out)
{
	pid_t self = getpid();
	struct strbuf marker = STRBUF_INIT;
	struct pidset all = PIDSET_INIT, parents = PIDSET_INIT;
	DIR *d;
	struct dirent *de;

	if (t->cgroup)
		cgroup_members(t, out);
	if (t->marker_name && t->marker && *t->marker)
		strbuf_addf(&marker, "%s=%s", t->marker_name, t->marker);
	d = opendir("/proc");
	while (d && (de = readdir(d))) {
		pid_t pid, ppid = 0, pgrp = 0;
		unsigned long long start = 0;
		char st = 0;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid = (pid_t)atoi(de->d_name);
		if (pid == self || read_stat(pid, &st, &ppid, &pgrp, &start) < 0 || st == 'Z' ||
		    st == 'X')
			continue;
		if ((t->pgid > 0 && pgrp == t->pgid) ||
		    (marker.len && start >= t->since && has_env_entry(pid, marker.buf)))
			pidset_add(out, pid, start);
		if (t->parent > 0) {
			pidset_push(&all, pid, start);
			pidset_push(&parents, ppid, 0);
		}
	}
	if (d)
		closedir(d);
	/* descendants of t->parent: fixpoint over (pid, ppid) pairs */
	for (size_t round = 0; t->parent > 0 && round < all.nr; round++) {
		int grew = 0;

		for (size_t i = 0; i < all.nr; i++) {
			pid_t pp = parents.v[i];

			if ((pp == t->parent || pidset_has(out, pp)) && !pidset_has(out, all.v[i])) {
				pidset_add(out, all.v[i], all.start[i]);
				grew = 1;
			}
		}
		if (!grew)
			break;
	}
	pidset_release(&all);
	pidset_release(&parents);
	strbuf_release(&marker);
}

int proc_tree_signal(const struct proc_tree *t, int sig)
{
	struct pidset s = PIDSET_INIT;
	int n, group;

	group = t->pgid > 1 && kill(-t->pgid, sig) == 0;
	collect(t, &s);
	/* the group's members have it: once more by pid would be a second delivery (a
	 * rank that checkpoints on SIGUSR1 would checkpoint twice) */
	for (size_t i = 0; i < s.nr; i++)
		if (!group || getpgid(s.v[i]) != t->pgid)
			kill(s.v[i], sig);
	n = (int)s.nr;
	pidset_release(&s);
	return n;
}

/* Whether /proc/PID/exe is the file `exe` was stat'ed from (the kernel's link). */
static int runs_exe(pid_t pid, const struct stat *exe)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	return stat(path, &st) == 0 && st.st_dev == exe->st_dev && st.st_ino == exe->st_ino;
}

int proc_tree_signal_ranks(const struct proc_tree *t, int sig, const char *logger_exe)
{
	struct pidset s = PIDSET_INIT;
	struct stat exe;
	pid_t *ppid;
	/* 0: the launcher's own; 1: a rank logger; 2: of a rank (below a logger) */
	unsigned char *kind;
	int n = 0;

	if (stat(logger_exe, &exe) < 0)
		return 0;
	collect(t, &s);
	ppid = xcalloc(s.nr + 1, sizeof(*ppid));
	kind = xcalloc(s.nr + 1, 1);
	for (size_t i = 0; i < s.nr; i++) {
		read_stat(s.v[i], NULL, &ppid[i], NULL, NULL);
		kind[i] = runs_exe(s.v[i], &exe);
	}
	/* a logger's child between its fork and its exec runs the logger's file too:
	 * a logger is one whose parent does not */
	for (size_t i = 0; i < s.nr; i++)
		for (size_t k = 0; kind[i] == 1 && k < s.nr; k++)
			if (s.v[k] == ppid[i] && runs_exe(s.v[k], &exe))
				kind[i] = 2;
	/* below a logger: a fixpoint over the parent links, as deep as the tree */
	for (int grew = 1; grew;) {
		grew = 0;
		for (size_t i = 0; i < s.nr; i++)
			for (size_t k = 0; !kind[i] && k < s.nr; k++)
				if (s.v[k] == ppid[i] && kind[k]) {
					kind[i] = 2;
					grew = 1;
				}
	}
	for (size_t i = 0; i < s.nr; i++)
		if (kind[i] == 2 && kill(s.v[i], sig) == 0)
			n++;
	free(kind);
	free(ppid);
	pidset_release(&s);
	return n;
}

int proc_tree_count(const struct proc_tree *t)
{
	struct pidset s = PIDSET_INIT;
	int n;

	collect(t, &s);
	n = (int)s.nr;
	pidset_release(&s);
	return n;
}

void proc_tree_procs(const struct proc_tree *t, struct proc_id **v, size_t *nr, size_t *alloc)
{
	struct pidset s = PIDSET_INIT;

	collect(t, &s);
	for (size_t i = 0; i < s.nr; i++) {
		ALLOC_GROW(*v, *nr + 1, *alloc);
		(*v)[*nr].pid = s.v[i];
		(*v)[(*nr)++].start = s.start[i];
	}
	pidset_release(&s);
}

/*
 * Without a walk of /proc: the caller is t->parent and a child subreaper with
 * no child at all (waitid's ECHILD; zombies are children too), so nothing
 * descends from it -- a descendant whose parent died would have been
 * reparented to it -- and t->cgroup lists no live process.  The process
 * group adds nothing then: the task's main process called setsid(), so its
 * group's members are of its session, made by forks inside it, all below the
 * caller.  Nor does the marker, whose part is where no cgroup could be made
 * (proctree.h).  At a task's end this replaces a read of every process's
 * stat on the machine (a wave of a sweep ends 8 tasks at once).
 */
int proc_tree_empty_quick(const struct proc_tree *t)
{
	struct pidset s = PIDSET_INIT;
	siginfo_t si;
	int sub = 0, empty;

	if (!t->cgroup || t->parent != getpid() || prctl(PR_GET_CHILD_SUBREAPER, &sub) < 0 || !sub)
		return 0;
	memset(&si, 0, sizeof(si));
	if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0 || errno != ECHILD)
		return 0;
	empty = cgroup_members(t, &s) == 0 && !s.nr;
	pidset_release(&s);
	return empty;
}

void proc_tree_pids(const struct proc_tree *t, pid_t **pids, size_t *nr, size_t *alloc)
{
	struct pidset s = PIDSET_INIT;

	collect(t, &s);
	for (size_t i = 0; i < s.nr; i++) {
		ALLOC_GROW(*pids, *nr + 1, *alloc);
		(*pids)[(*nr)++] = s.v[i];
	}
	pidset_release(&s);
}

/* ---------------------------------------------------------------- cgroups */

static int cgroup2_mount(struct strbuf *out)
{
	FILE *fp = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	int found = -1;

	if (!fp)
		return -1;
	while (found < 0 && fgets(line, sizeof(line), fp)) {
		/* id parent maj:min root mountpoint options... - fstype source superopts */
		char *sep = strstr(line, " - ");
		char mnt[2048];

		if (!sep || strncmp(sep + 3, "cgroup2 ", 8))
			continue;
		if (sscanf(line, "%*s %*s %*s %*s %2047s", mnt) == 1) {
			strbuf_addstr(out, mnt);
			found = 0;
		}
	}
	fclose(fp);
	return found;
}

static int self_cgroup(struct strbuf *out)
{
	struct strbuf sb = STRBUF_INIT;
	int ret = -1;
	char *p;

	if (strbuf_read_file(&sb, "/proc/self/cgroup", 65536) < 0)
		return -1;
	for (p = sb.buf; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (starts_with(p, "0::")) {
			char *e = strchr(p, '\n');

			strbuf_add(out, p + 3, e ? (size_t)(e - p - 3) : strlen(p + 3));
			ret = 0;
			break;
		}
	}
	strbuf_release(&sb);
	return ret;
}

static int write_str(const char *dir, const char *file, const char *val)
{
	struct strbuf path = STRBUF_INIT;
	int fd, ret = -1;

	strbuf_addf(&path, "%s/%s", dir, file);
	fd = open(path.buf, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		ret = write(fd, val, strlen(val)) == (ssize_t)strlen(val) ? 0 : -1;
		close(fd);
	}
	strbuf_release(&path);
	return ret;
}

static int try_dir(const char *parent, const char *name, struct strbuf *dir)
{
	struct strbuf p = STRBUF_INIT;
	int ret = -1;

	strbuf_addf(&p, "%s/dtctl", parent);
	if (mkdir(p.buf, 0755) < 0 && errno != EEXIST)
		goto out;
	/* let the controllers reach the task cgroups where the parent allows it */
	write_str(p.buf, "cgroup.subtree_control", "+memory +pids");
	strbuf_addf(&p, "/%s", name);
	if (mkdir(p.buf, 0755) < 0)     /* never one that exists: it is someone else's */
		goto out;
	strbuf_addbuf(dir, &p);
	ret = 0;
out:
	strbuf_release(&p);
	return ret;
}

int cgroup_create(const char *name, const json_t *limits, struct strbuf *dir, struct strbuf *why)
{
	struct strbuf mnt = STRBUF_INIT, self = STRBUF_INIT, parent = STRBUF_INIT;
	int ret = -1;

	if (cgroup2_mount(&mnt) < 0) {
		strbuf_addstr(why, "no cgroup v2 mount");
		goto out;
	}
	if (self_cgroup(&self) == 0 && strcmp(self.buf, "/")) {
		strbuf_addf(&parent, "%s%s", mnt.buf, self.buf);
		if (try_dir(parent.buf, name, dir) == 0) {
			ret = 0;
			goto limits;
		}
	}
	if (try_dir(mnt.buf, name, dir) == 0) {
		ret = 0;
		goto limits;
	}
	strbuf_addf(why, "cannot create a cgroup under '%s': %s", mnt.buf, strerror(errno));
	goto out;
limits:
	if (limits) {
		long long mem = json_integer_value(json_object_get(limits, "memory_bytes"));
		long long pids = json_integer_value(json_object_get(limits, "pids"));
		char v[32];

		if (mem > 0) {
			snprintf(v, sizeof(v), "%lld", mem);
			if (write_str(dir->buf, "memory.max", v) < 0)
				strbuf_addstr(why, "memory.max not settable (memory controller not delegated); ");
		}
		if (pids > 0) {
			snprintf(v, sizeof(v), "%lld", pids);
			if (write_str(dir->buf, "pids.max", v) < 0)
				strbuf_addstr(why, "pids.max not settable (pids controller not delegated); ");
		}
	}
out:
	strbuf_release(&mnt);
	strbuf_release(&self);
	strbuf_release(&parent);
	return ret;
}

int cgroup_add_pid(const char *dir, pid_t pid)
{
	char v[32];

	snprintf(v, sizeof(v), "%d", (int)pid);
	return write_str(dir, "cgroup.procs", v);
}

void cgroup_remove(const char *dir)
{
	if (dir)
		rmdir(dir);
}
