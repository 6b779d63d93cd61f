/*
 * slurm.c - dtctl inside a Slurm allocation: the agents' step and the
 * short-lived cluster of `dtctl run` / `dtctl sweep` (see slurm.h and
 * docs/slurm.md for why it is built this way).
 */
#include "slurm.h"
#include "daemon.h"
#include "dthome.h"
#include "head.h"
#include "json.h"
#include "log.h"
#include "netif.h"
#include "protocol.h"
#include "run-command.h"
#include "safefile.h"
#include "secret.h"
#include "setup.h"
#include "usage.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int slurm_in_allocation_opt;

/* how long the agents may take to join, and the step to end when told */
#define JOIN_TIMEOUT_MS 60000
#define STEP_STOP_MS 8000

int slurm_alloc_load(struct slurm_alloc *al, struct strbuf *err)
{
	const char *id = getenv_nonempty("SLURM_JOB_ID");
	const char *list = getenv_nonempty("SLURM_JOB_NODELIST");
	const char *cpus = getenv_nonempty("SLURM_JOB_CPUS_PER_NODE");
	const char *conf = getenv_nonempty("SLURM_CONF");
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf out = STRBUF_INIT;
	int code;

	memset(al, 0, sizeof(*al));
	strvec_init(&al->nodes);
	if (!list)
		list = getenv_nonempty("SLURM_NODELIST");
	if (!id || !list) {
		strbuf_addf(err, "not inside a Slurm allocation ($%s is not set): run this in an "
			    "sbatch script or an salloc shell", id ? "SLURM_JOB_NODELIST" : "SLURM_JOB_ID");
		return -1;
	}
	/* scontrol retries a missing slurm.conf for a minute before it says so */
	if (conf && access(conf, R_OK) < 0) {
		strbuf_addf(err, "$SLURM_CONF '%s': %s", conf, strerror(errno));
		return -1;
	}
	al->job_id = xstrdup(id);
	/* Slurm's own expansion: node lists have forms no other parser agrees on */
	strvec_pushv(&cp.args, (const char *[]){ "scontrol", "show", "hostnames", list, NULL });
	cp.no_stdin = 1;
	code = capture_command(&cp, &out, 1 << 20);
	child_process_clear(&cp);
	for (char *p = out.buf, *nl; code == 0 && *p; p = nl + (*nl != '\0')) {
		nl = p + strcspn(p, "\n");
		if (nl > p)
			strvec_pushf(&al->nodes, "%.*s", (int)(nl - p), p);
	}
	strbuf_release(&out);
	if (code || !al->nodes.nr) {
		strbuf_addf(err, "'scontrol show hostnames %s' failed (exit %d): is Slurm's client "
			    "installed and $SLURM_CONF right?", list, code);
		slurm_alloc_release(al);
		return -1;
	}
	/* "4(x2),2": counts, each possibly repeated */
	for (const char *p = cpus; p && *p;) {
		char *end;
		long n = strtol(p, &end, 10);

		if (end == p || n <= 0)
			break;
		if (!al->cpus_min || n < al->cpus_min)
			al->cpus_min = (int)n;
		p = end + strcspn(end, ",");
		p += *p == ',';
	}
	return 0;
}

void slurm_alloc_release(struct slurm_alloc *al)
{
	free(al->job_id);
	al->job_id = NULL;
	strvec_clear(&al->nodes);
}

void slurm_agents_argv(struct strvec *argv, const struct slurm_alloc *al, const char *dtagent,
		       const char *head, const char *secret_file)
{
	size_t n = al->nodes.nr;

	/*
	 * One task per node, whatever the allocation's own -n/--ntasks-per-node
	 * (inherited through SLURM_NTASKS): -n is given.  --overlap: the user's
	 * own steps may still run beside ours; every CPU of the node
	 * (--cpus-per-task) since the ranks run inside this step's limits; the
	 * step keeps all of the job's GPUs (Slurm's default for a step), and one
	 * node's agent dying must not end the others (--kill-on-bad-exit=0: the
	 * head takes it as that node failing).
	 */
	strvec_push(argv, "srun");
	strvec_push(argv, "--overlap");
	strvec_pushf(argv, "--nodes=%zu", n);
	strvec_pushf(argv, "--ntasks=%zu", n);
	strvec_push(argv, "--ntasks-per-node=1");
	if (al->cpus_min > 0)
		strvec_pushf(argv, "--cpus-per-task=%d", al->cpus_min);
	strvec_push(argv, "--kill-on-bad-exit=0");
	/* the environment reaches the agents (and their ranks) even under sbatch --export=NONE */
	strvec_push(argv, "--export=ALL");
	strvec_pushf(argv, "--job-name=%s", al->step_name ? al->step_name : "dtctl-agents");
	strvec_push(argv, dtagent);
	strvec_push(argv, "--slurm");
	strvec_pushf(argv, "--head=%s", head);
	if (secret_file)
		strvec_pushf(argv, "--secret=%s", secret_file);
}

int slurm_step_term(const char *job_id, const char *name)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf out = STRBUF_INIT, step = STRBUF_INIT;
	int ret = -1;

	strvec_pushv(&cp.args, (const char *[]){ "squeue", "--steps", "--noheader", "--format=%i %j",
						  "--jobs", job_id, NULL });
	cp.no_stdin = 1;
	cp.no_stderr = 1;
	if (capture_command(&cp, &out, 1 << 20) == 0)
		for (char *p = out.buf, *nl; *p; p = nl + (*nl != '\0')) {
			char *sp = strchr(p, ' ');

			nl = p + strcspn(p, "\n");
			if (sp && sp < nl && (size_t)(nl - sp - 1) == strlen(name) &&
			    !strncmp(sp + 1, name, strlen(name))) {
				strbuf_add(&step, p, (size_t)(sp - p));
				break;
			}
		}
	child_process_clear(&cp);
	if (step.len) {
		child_process_init(&cp);
		strvec_pushv(&cp.args, (const char *[]){ "scancel", "--signal=TERM", step.buf, NULL });
		cp.no_stdin = 1;
		ret = run_command(&cp) == 0 ? 0 : -1;
		child_process_clear(&cp);
	}
	strbuf_release(&out);
	strbuf_release(&step);
	return ret;
}

/* ------------------------------------------------------------------ session */

static struct session {
	int active;
	struct slurm_alloc al;
	struct strbuf home;
	char head_addr[64];
	int head_port;
	int guard_fd;               /* our end of the pipe the guard watches, -1 */
	pid_t guard;
	char record[64];            /* "<job>.<pid>" in the user's record dir, "" when none */
} ss = { .guard_fd = -1 };

/* ------------------------------------------------------------------ record */

/*
 * Other shells of the allocation (salloc's second terminal, `srun --overlap
 * --jobid=N dtctl ps`) find the private head through a record on the shared
 * dir, which every node mounts: <shared>/.dtctl-alloc-<uid>/<job>.<pid>/
 * holding the head's cluster.yaml (its address and port) and secret, both
 * 0600.  Only the same Unix user can use it: the directory must be ours and
 * 0700 (fstat on a fd opened without following a symlink), so no other user
 * can have planted it or anything in it; one that is not is refused, never
 * read, and the fallback (fallback_dir()) is used instead.  The guard removes
 * the record with the head.
 */

/* The fd of shared/name when it is a directory of ours that only we can use; -1 */
static int own_dir(const char *shared, const char *name, struct stat *st)
{
	int fd = sf_dir(shared, name, 0, NULL);

	if (fd >= 0 && (fstat(fd, st) < 0 || st->st_uid != geteuid() || (st->st_mode & 077) ||
			!S_ISDIR(st->st_mode))) {
		close(fd);
		errno = EPERM;
		return -1;
	}
	return fd;
}

/*
 * When .dtctl-alloc-<uid> is another user's (made first in a world-writable
 * shared dir), ours is .dtctl-alloc-<uid>-<16 random hex digits>: nobody can
 * make it before us, and our shells find it by its owner and mode.  The
 * first of ours (by name) in name; its fd, or -1 (ENOENT: none).
 */
static int fallback_dir(const char *shared, const char *base, char *name, size_t size)
{
	struct dirent *de;
	struct stat st;
	size_t blen = strlen(base);
	int root = sf_dir(shared, "", 0, NULL), fd = -1;
	DIR *d = root >= 0 ? fdopendir(root) : NULL;

	name[0] = '\0';
	if (!d) {
		if (root >= 0)
			close(root);
		errno = ENOENT;
		return -1;
	}
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, base, blen) && de->d_name[blen] == '-' &&
		    !fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) && S_ISDIR(st.st_mode) &&
		    st.st_uid == geteuid() && !(st.st_mode & 077) &&
		    (!name[0] || strcmp(de->d_name, name) < 0) && strlen(de->d_name) < size)
			snprintf(name, size, "%s", de->d_name);
	closedir(d);
	if (name[0])
		fd = own_dir(shared, name, &st);
	if (fd < 0)
		errno = ENOENT;
	return fd;
}

/*
 * The fd of the user's record dir (made when create), checked, its name in
 * name; -1 (errno ENOENT: none).  A .dtctl-alloc-<uid> that another user
 * made (or that is not 0700) is never used: the fallback is.
 */
static int record_dir(const char *shared, int create, char *name, size_t size, struct strbuf *err)
{
	char base[64];
	struct stat st;
	int root, fd;

	snprintf(base, sizeof(base), ".dtctl-alloc-%u", (unsigned)geteuid());
	snprintf(name, size, "%s", base);
	if (create) {
		root = sf_dir(shared, "", 0, err);
		if (root < 0)
			return -1;
		if (mkdirat(root, name, 0700) < 0 && errno != EEXIST) {
			strbuf_addf(err, "cannot create '%s/%s': %s", shared, name, strerror(errno));
			close(root);
			return -1;
		}
		close(root);
	}
	fd = own_dir(shared, base, &st);
	if (fd >= 0)
		return fd;
	if (errno == ENOENT && !create)
		return -1;
	/* squatted (another's, or open to others): ours has a name nobody can guess */
	fd = fallback_dir(shared, base, name, size);
	if (fd >= 0 || !create)
		return fd;
	{
		unsigned char rnd[8];

		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
			strbuf_addf(err, "getrandom: %s", strerror(errno));
			return -1;
		}
		snprintf(name, size, "%s-%02x%02x%02x%02x%02x%02x%02x%02x", base, rnd[0], rnd[1],
			 rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	}
	root = sf_dir(shared, "", 0, err);
	if (root < 0)
		return -1;
	if (mkdirat(root, name, 0700) < 0) {
		strbuf_addf(err, "cannot create '%s/%s': %s", shared, name, strerror(errno));
		close(root);
		return -1;
	}
	close(root);
	warning("'%s/%s' is not a directory of yours that only you can use (another user "
		"made it?): this allocation's record is in '%s/%s' instead", shared, base, shared,
		name);
	fd = own_dir(shared, name, &st);
	if (fd < 0)
		strbuf_addf(err, "'%s/%s': %s", shared, name, strerror(errno));
	return fd;
}

/* The head's cluster.yaml and secret in a new record; a warning when it cannot be */
static void record_publish(void)
{
	const char *shared = getenv_nonempty("DTCTL_SHARED_DIR");
	static const char *const files[] = { "secret", "cluster.yaml" };   /* cluster.yaml last */
	struct strbuf err = STRBUF_INIT, data = STRBUF_INIT, path = STRBUF_INIT;
	char dname[96];
	int dfd = record_dir(shared, 1, dname, sizeof(dname), &err), rfd = -1;

	snprintf(ss.record, sizeof(ss.record), "%s.%d", ss.al.job_id, (int)getpid());
	if (dfd >= 0 && mkdirat(dfd, ss.record, 0700) < 0)
		strbuf_addf(&err, "cannot create '%s': %s", ss.record, strerror(errno));
	else if (dfd >= 0)
		rfd = openat(dfd, ss.record, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	for (size_t i = 0; rfd >= 0 && !err.len && i < ARRAY_SIZE(files); i++) {
		strbuf_reset(&data);
		strbuf_reset(&path);
		strbuf_addf(&path, "%s/%s", ss.home.buf, files[i]);
		if (strbuf_read_file(&data, path.buf, 1 << 16) < 0)
			strbuf_addf(&err, "cannot read '%s': %s", path.buf, strerror(errno));
		else
			sf_write_at(rfd, files[i], data.buf, data.len, 0600, 0, &err);
	}
	if (dfd >= 0 && rfd < 0 && !err.len)
		strbuf_addf(&err, "cannot open '%s': %s", ss.record, strerror(errno));
	if (err.len) {
		warning("other shells of Slurm job %s will not find this head (dtctl ps/show/"
			"cancel): %s", ss.al.job_id, err.buf);
		if (dfd >= 0) {
			for (size_t i = 0; rfd >= 0 && i < ARRAY_SIZE(files); i++)
				unlinkat(rfd, files[i], 0);
			unlinkat(dfd, ss.record, AT_REMOVEDIR);
		}
		ss.record[0] = '\0';
	}
	if (rfd >= 0)
		close(rfd);
	if (dfd >= 0)
		close(dfd);
	memset(data.buf, 0, data.alloc);   /* the secret */
	strbuf_release(&data);
	strbuf_release(&path);
	strbuf_release(&err);
}

/* The guard's: the record goes with the head */
static void record_remove(void)
{
	const char *shared = getenv_nonempty("DTCTL_SHARED_DIR");
	struct strbuf err = STRBUF_INIT, path = STRBUF_INIT;
	char dname[96];
	int dfd;

	if (!ss.record[0] || (dfd = record_dir(shared, 0, dname, sizeof(dname), &err)) < 0) {
		strbuf_release(&err);
		return;
	}
	strbuf_addf(&path, "%s/%s/%s", shared, dname, ss.record);
	rm_tree(path.buf);   /* below a dir only we can write (checked) */
	close(dfd);
	strbuf_release(&path);
}

int slurm_session_find(char **file)
{
	const char *job = getenv_nonempty("SLURM_JOB_ID");
	const char *shared = getenv_nonempty("DTCTL_SHARED_DIR");
	struct strbuf err = STRBUF_INIT, found = STRBUF_INIT, prefix = STRBUF_INIT;
	struct dirent *de;
	char dname[96];
	DIR *d;
	int dfd, n = 0;

	*file = NULL;
	if (!job || !shared || ss.active || getenv_nonempty("DT_JOB_ID"))
		return 0;
	dfd = record_dir(shared, 0, dname, sizeof(dname), &err);
	if (dfd < 0) {
		if (err.len)
			warning("%s", err.buf);
		strbuf_release(&err);
		return 0;
	}
	d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return 0;
	}
	strbuf_addf(&prefix, "%s.", job);
	while ((de = readdir(d))) {
		struct strbuf rel = STRBUF_INIT;
		struct stat st;

		if (!starts_with(de->d_name, prefix.buf))
			continue;
		strbuf_addf(&rel, "%s/cluster.yaml", de->d_name);
		if (!fstatat(dirfd(d), rel.buf, &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode)) {
			strbuf_addf(&found, "%s%s/%s/%s", n ? "\n  " : "", shared, dname, rel.buf);
			n++;
		}
		strbuf_release(&rel);
	}
	closedir(d);
	strbuf_release(&prefix);
	if (n > 1) {
		error("%d dtctl heads run in Slurm job %s; name one with -c:\n  %s", n, job,
		      found.buf);
		strbuf_release(&found);
		return -DT_EXIT_USAGE;
	}
	if (n == 1)
		*file = strbuf_detach(&found, NULL);
	strbuf_release(&found);
	return n;
}

int slurm_session_wanted(void)
{
	if (slurm_in_allocation_opt)
		return 1;
	/* a cluster named on purpose wins; so does being a rank of one of our jobs */
	if (!getenv_nonempty("SLURM_JOB_ID") || the_cluster.given ||
	    getenv_nonempty("DTCTL_CLUSTER") || getenv_nonempty("DT_JOB_ID"))
		return 0;
	return 1;
}

int slurm_session_active(void)
{
	return ss.active;
}

/* a port free now on this machine, for dtsched */
static int free_port(void)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/*
 * The address other machines reach Slurm node `node` (this one) on: its
 * NodeAddr in Slurm's configuration (`scontrol -o show node`; the node's name
 * where it has none), as the kernel routes it (lib/netif.h).  0, or -1 when
 * that is no address another machine reaches (loopback, unresolvable).
 */
static int node_address(const char *node, char *out, size_t size, struct strbuf *why)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf sout = STRBUF_INIT, addr = STRBUF_INIT;
	struct strbuf err = STRBUF_INIT;
	struct dt_netif nif;
	const char *p;
	int ret = -1;

	strvec_pushv(&cp.args, (const char *[]){ "scontrol", "-o", "show", "node", node, NULL });
	cp.no_stdin = 1;
	cp.no_stderr = 1;
	if (capture_command(&cp, &sout, 1 << 16) == 0 && (p = strstr(sout.buf, " NodeAddr=")))
		strbuf_add(&addr, p + 10, strcspn(p + 10, " \n"));
	child_process_clear(&cp);
	if (!addr.len)
		strbuf_addstr(&addr, node);
	if (dt_netif_route(addr.buf, 1, &nif, &err) < 0) {
		strbuf_addf(why, "Slurm's address of node %s, '%s': %s", node, addr.buf, err.buf);
	} else if (nif.loopback) {
		strbuf_addf(why, "Slurm's address of node %s, '%s', is %s, a loopback address",
			    node, addr.buf, nif.addr);
	} else {
		snprintf(out, size, "%s", nif.addr);
		ret = 0;
	}
	strbuf_release(&sout);
	strbuf_release(&addr);
	strbuf_release(&err);
	return ret;
}

/*
 * The address the nodes reach this machine on: the source of our route to
 * the first allocated node that is not this one (lib/netif.h).  When the
 * allocation is this node alone, the node's own address as Slurm knows it
 * (node_address()), so that a later shell on another machine (salloc's login
 * node, another node's step) reaches the head through its record as well;
 * 127.0.0.1, with a warning, only when it has none.
 */
static int head_address(char *out, size_t size, struct strbuf *err)
{
	char host[256] = "";
	const char *me = getenv_nonempty("SLURMD_NODENAME");
	struct strbuf why = STRBUF_INIT;

	gethostname(host, sizeof(host) - 1);
	for (size_t i = 0; i < ss.al.nodes.nr; i++) {
		const char *n = ss.al.nodes.v[i];
		struct dt_netif nif;

		if ((me && !strcmp(n, me)) || !strcmp(n, host) ||
		    (!strncmp(host, n, strlen(n)) && host[strlen(n)] == '.'))
			continue;
		if (dt_netif_route(n, 1, &nif, err) < 0)
			return -1;
		snprintf(out, size, "%s", nif.addr);
		return 0;
	}
	if (node_address(ss.al.nodes.v[0], out, size, &why) < 0) {
		warning("the head of Slurm job %s listens on 127.0.0.1: only this node reaches it "
			"(%s)", ss.al.job_id, why.buf);
		snprintf(out, size, "127.0.0.1");
	}
	strbuf_release(&why);
	return 0;
}

int slurm_session_prepare(void)
{
	struct strbuf err = STRBUF_INIT, yaml = STRBUF_INIT, path = STRBUF_INIT;
	const char *shared = getenv_nonempty("DTCTL_SHARED_DIR");
	const char *tmp = getenv_nonempty("TMPDIR");
	int fd;

	if (slurm_alloc_load(&ss.al, &err) < 0) {
		error("%s", err.buf);
		strbuf_release(&err);
		return DT_EXIT_USAGE;
	}
	if (!shared) {
		error("inside a Slurm allocation (job %s) dtctl needs the shared dir every node "
		      "mounts: set $DTCTL_SHARED_DIR", ss.al.job_id);
		return DT_EXIT_USAGE;
	}
	if (head_address(ss.head_addr, sizeof(ss.head_addr), &err) < 0) {
		error("cannot tell the address the allocated nodes reach this machine on: %s",
		      err.buf);
		strbuf_release(&err);
		return DT_EXIT_USAGE;
	}
	ss.head_port = free_port();
	/* the head's home: local disk (SQLite), private, gone with the session */
	strbuf_init(&ss.home, 0);
	strbuf_addf(&ss.home, "%s/dtctl-alloc-%s-XXXXXX", tmp ? tmp : "/tmp", ss.al.job_id);
	if (!mkdtemp(ss.home.buf)) {
		error_errno("cannot create '%s'", ss.home.buf);
		return DT_EXIT_USAGE;
	}
	ss.active = 1;
	strbuf_addf(&yaml, "# the allocation of Slurm job %s as a dtctl cluster (dtctl run inside "
		    "an allocation; docs/slurm.md)\ncluster: slurm-%s\nshared_dir: \"%s\"\nnodes:\n",
		    ss.al.job_id, ss.al.job_id, shared);
	for (size_t i = 0; i < ss.al.nodes.nr; i++)
		strbuf_addf(&yaml, "  - {host: %s}\n", ss.al.nodes.v[i]);
	strbuf_addf(&yaml, "agent: {heartbeat: 500ms, dead_after: 5s}\n"
		    "head: {address: %s, port: %d}\n", ss.head_addr, ss.head_port);
	strbuf_addf(&path, "%s/cluster.yaml", ss.home.buf);
	fd = open(path.buf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, yaml.buf, yaml.len) != (ssize_t)yaml.len || close(fd) < 0) {
		error_errno("cannot write '%s'", path.buf);
		rm_tree(ss.home.buf);
		return DT_EXIT_USAGE;
	}
	strbuf_release(&yaml);
	strbuf_release(&path);
	strbuf_release(&err);
	setenv("DTCTL_HOME", ss.home.buf, 1);
	dt_home_reset();
	return 0;
}

static pid_t wait_nohang(pid_t pid, int *status)
{
	pid_t r;

	do
		r = waitpid(pid, status, WNOHANG);
	while (r < 0 && errno == EINTR);
	return r;
}

/* kill the step's srun with sig and wait up to ms for it; whether it ended */
static int srun_stop(pid_t srun, int sig, long long ms)
{
	int status;
	struct timespec ts = { 0, 50 * 1000000L };

	kill(srun, sig);
	for (long long t = 0; t < ms; t += 50) {
		if (wait_nohang(srun, &status) != 0)
			return 1;
		nanosleep(&ts, NULL);
	}
	return 0;
}

/*
 * The guard: a child of dtctl that outlives it.  It starts the agents' step
 * (srun, its child, in its own process group so that a Ctrl-C at dtctl's
 * terminal reaches dtctl only), then waits for dtctl to end (its end of
 * `fd` closes, whatever killed it) or the step to end (the allocation was
 * cancelled or is over).  Either way: the step is told to end (SIGTERM to
 * srun, which Slurm passes to each agent: they stop their tasks), dtsched
 * is stopped, the home removed.  It ignores SIGTERM/SIGINT/SIGHUP (scancel
 * signals every process of the batch step) so that it can finish that.
 * (They are caught by a handler that does nothing rather than ignored:
 * srun would inherit SIG_IGN and never pass our SIGTERM on.)
 */
static void guard_signal(int sig)
{
	(void)sig;
}

static void guard_main(int fd, const char *hex)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf dir = STRBUF_INIT, log = STRBUF_INIT, pidfile = STRBUF_INIT;
	struct strbuf head = STRBUF_INIT, name = STRBUF_INIT;
	int lfd, status = 0, step_ended = 0;

	struct sigaction sa;

	/* caught, not ignored: srun must not inherit SIG_IGN (exec resets handlers only) */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = guard_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGPIPE, &sa, NULL);
	setpgid(0, 0);
	strbuf_addf(&name, "dtctl-agents-%d", (int)getpid());
	ss.al.step_name = name.buf;
	dt_self_dir(&dir);
	strbuf_addstr(&dir, "/dtagent");
	strbuf_addf(&head, "%s:%d", ss.head_addr, ss.head_port);
	slurm_agents_argv(&cp.args, &ss.al, dir.buf, head.buf, NULL);
	strvec_pushf(&cp.env, "DTCTL_AGENT_SECRET=%s", hex);
	strbuf_addf(&log, "%s/agents.log", ss.home.buf);
	lfd = open(log.buf, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
	cp.no_stdin = 1;
	cp.out = lfd >= 0 ? lfd : 0;
	cp.no_stdout = lfd < 0;
	cp.err_to_out = 1;
	if (start_command(&cp) < 0)
		step_ended = 1;
	if (lfd >= 0)
		close(lfd);
	while (!step_ended) {
		struct pollfd pf = { fd, POLLIN, 0 };
		char c;

		if (poll(&pf, 1, 200) > 0 && read(fd, &c, 1) <= 0)
			break;          /* dtctl is gone */
		if (wait_nohang(cp.pid, &status) != 0) {
			struct strbuf out = STRBUF_INIT;

			step_ended = 1;
			strbuf_read_file(&out, log.buf, 1 << 20);
			fprintf(stderr, "dtctl: the agents' Slurm step of job %s ended (%s %d; "
				"allocation cancelled or over?): stopping the head; the step's last "
				"output:\n%s\n", ss.al.job_id,
				WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ?
				WTERMSIG(status) : WEXITSTATUS(status),
				out.len > 2000 ? out.buf + out.len - 2000 : out.buf);
			strbuf_release(&out);
		}
	}
	/*
	 * The step's tasks (our agents) get SIGTERM through Slurm and srun ends
	 * with them; srun's own SIGTERM would SIGKILL them (see slurm.h).
	 */
	if (!step_ended && (slurm_step_term(ss.al.job_id, ss.al.step_name) < 0 ||
			    !srun_stop(cp.pid, 0, STEP_STOP_MS)) &&
	    !srun_stop(cp.pid, SIGTERM, 3000))
		srun_stop(cp.pid, SIGKILL, 2000);
	record_remove();
	dt_home_path(&pidfile, "dtsched.pid");
	dt_daemon_stop(pidfile.buf, "dtsched", 5000);
	rm_tree(ss.home.buf);
	_exit(0);
}

/* every allocated node UP in dtsched: 0, or an exit code after saying why */
static int wait_nodes_up(void)
{
	long long deadline = dt_mono_ms() + JOIN_TIMEOUT_MS;
	struct strbuf missing = STRBUF_INIT, log = STRBUF_INIT, path = STRBUF_INIT;
	struct timespec ts = { 0, 100 * 1000000L };
	int status;

	for (;;) {
		json_t *reply = NULL;
		int code = head_api("GET", DT_PATH_NODES, NULL, &reply, NULL);

		if (code) {
			json_decref(reply);
			return code;
		}
		strbuf_reset(&missing);
		for (size_t i = 0; i < ss.al.nodes.nr; i++) {
			size_t k;
			json_t *n;
			int up = 0;

			json_array_foreach(json_object_get(reply, "nodes"), k, n)
				if (!strcmp(json_get_str(n, "name", ""), ss.al.nodes.v[i]))
					up = !strcmp(json_get_str(n, "state", ""), "UP");
			if (!up)
				strbuf_addf(&missing, "%s%s", missing.len ? ", " : "", ss.al.nodes.v[i]);
		}
		json_decref(reply);
		if (!missing.len)
			break;
		if (dt_mono_ms() > deadline || wait_nohang(ss.guard, &status) != 0) {
			strbuf_addf(&path, "%s/agents.log", ss.home.buf);
			strbuf_read_file(&log, path.buf, 4096);
			error("the agents of Slurm job %s did not join the head at %s:%d within %d s "
			      "(not UP: %s); their step's output:\n%s", ss.al.job_id, ss.head_addr,
			      ss.head_port, JOIN_TIMEOUT_MS / 1000, missing.buf,
			      log.len ? log.buf : "(none)");
			strbuf_release(&missing);
			strbuf_release(&log);
			strbuf_release(&path);
			return DT_EXIT_UNREACH;
		}
		nanosleep(&ts, NULL);
	}
	strbuf_release(&missing);
	return 0;
}

/*
 * At dtctl's exit: tell the guard (our end of its pipe closes) and wait for
 * its teardown, so that the step, the agents' homes and dtsched are gone
 * before the batch script or salloc goes on and Slurm ends the allocation,
 * which would SIGKILL whatever is left once KillWait is over.
 */
static void session_end(void)
{
	long long deadline = dt_mono_ms() + STEP_STOP_MS + 10000;
	struct timespec ts = { 0, 20 * 1000000L };
	int status;

	if (ss.guard_fd < 0)
		return;
	close(ss.guard_fd);
	ss.guard_fd = -1;
	while (wait_nohang(ss.guard, &status) == 0 && dt_mono_ms() < deadline)
		nanosleep(&ts, NULL);
}

int slurm_session_start(void)
{
	struct strbuf hex = STRBUF_INIT, path = STRBUF_INIT;
	int fds[2], code;

	if ((code = head_start(1, 0)))
		return code;
	dt_home_path(&path, "secret");
	if (dt_secret_read(path.buf, &hex) < 0 || pipe2(fds, O_CLOEXEC) < 0) {
		strbuf_release(&path);
		strbuf_release(&hex);
		return DT_EXIT_UNREACH;
	}
	strbuf_release(&path);
	record_publish();
	fflush(NULL);
	ss.guard = fork();
	if (ss.guard < 0) {
		error_errno("cannot fork");
		return DT_EXIT_FAIL;
	}
	if (ss.guard == 0) {
		close(fds[1]);
		guard_main(fds[0], hex.buf);
	}
	close(fds[0]);
	ss.guard_fd = fds[1];
	atexit(session_end);
	strbuf_release(&hex);
	if (!getenv_nonempty("DTCTL_QUIET_ALLOCATION"))
		fprintf(stderr, "dtctl: inside Slurm job %s: head on %s:%d, agents on %zu node%s\n",
			ss.al.job_id, ss.head_addr, ss.head_port, ss.al.nodes.nr,
			ss.al.nodes.nr == 1 ? "" : "s");
	return wait_nodes_up();
}
