/*
 * cluster-ssh.c - shared plumbing of the SSH commands (see cluster-ssh.h).
 */
#include "cluster-ssh.h"
#include "dthome.h"
#include "hostrange.h"
#include "log.h"
#include "netif.h"
#include "units.h"
#include "usage.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

int cluster_select(const struct cluster_config *c, const char *spec, size_t **idx, size_t *nr)
{
	struct strvec names = STRVEC_INIT;
	struct strbuf err = STRBUF_INIT;
	int ret = 0;

	*nr = 0;
	*idx = xcalloc(c->nr_nodes ? c->nr_nodes : 1, sizeof(**idx));
	if (!spec) {
		for (size_t i = 0; i < c->nr_nodes; i++)
			(*idx)[(*nr)++] = i;
		return 0;
	}
	if (hostrange_expand(spec, &names, &err) < 0) {
		ret = error("--nodes '%s': %s", spec, err.buf);
		goto out;
	}
	for (size_t i = 0; i < names.nr; i++) {
		int k = cluster_find_node(c, names.v[i]);
		int dup = 0;

		if (k < 0) {
			ret = error("--nodes: no node '%s' in '%s'", names.v[i], c->path);
			goto out;
		}
		for (size_t j = 0; j < *nr; j++)
			dup |= (*idx)[j] == (size_t)k;
		if (!dup)
			(*idx)[(*nr)++] = (size_t)k;
	}
	if (!*nr)
		ret = error("--nodes '%s' selects no node", spec);
out:
	strvec_clear(&names);
	strbuf_release(&err);
	return ret;
}

const char *cluster_identity(const struct cluster_config *c)
{
	static struct strbuf path = STRBUF_INIT;

	if (c->ssh.identity)
		return c->ssh.identity;
	if (!path.len)
		dt_home_path(&path, "id_ed25519");
	return path.buf;
}

void cluster_pool_opts(struct ssh_pool_opts *o, const struct cluster_config *c)
{
	static struct strbuf kh = STRBUF_INIT;

	if (!kh.len)
		dt_home_path(&kh, "known_hosts");
	memset(o, 0, sizeof(*o));
	o->fanout = c->ssh.fanout;
	o->connect_timeout_ms = c->ssh.connect_timeout_ms;
	o->command_timeout_ms = c->ssh.command_timeout_ms;
	o->known_hosts = kh.buf;
	o->strict = c->ssh.host_key_policy == HOST_KEY_STRICT;
	o->identity = cluster_identity(c);
	o->on_prompt = progress_prompt;	/* a host key question clears the progress line */
}

void cluster_pool_add(struct ssh_pool *p, const struct cluster_config *c,
		      const size_t *idx, size_t nr)
{
	for (size_t i = 0; i < nr; i++) {
		const struct cluster_node *cn = &c->nodes[idx[i]];
		struct ssh_target t = { cn->name, cn->host, cn->user, cn->port };
		struct ssh_node *n = ssh_pool_add(p, &t);

		ssh_node_set_data(n, (void *)(idx[i] + 1));
	}
}

size_t cluster_node_index(const struct ssh_node *n)
{
	return (size_t)ssh_node_data(n) - 1;
}

void cluster_head_address(const struct cluster_config *c, const struct cluster_node *n,
			  int local, struct strbuf *out)
{
	struct dt_netif nif;
	struct strbuf err = STRBUF_INIT;

	if (c->head.address)
		strbuf_addstr(out, c->head.address);
	else if (!local && dt_netif_route(n->host, 9, &nif, &err) == 0)
		strbuf_addstr(out, nif.addr);
	else
		strbuf_addstr(out, "127.0.0.1");
	strbuf_release(&err);
}

/*
 * The facts probe.  Plain POSIX sh and coreutils so it runs on any node;
 * ~/.dtctl/env.sh (written by the setup template) is sourced first so that
 * PATH changes made there count, as they will for jobs.
 */
void facts_command(struct strbuf *cmd, const char *shared_dir)
{
	strbuf_addstr(cmd, "S=");
	strbuf_add_shell_quoted(cmd, shared_dir ? shared_dir : "");
	strbuf_addstr(cmd, "\n"
		"if [ -r \"$HOME/.dtctl/env.sh\" ]; then . \"$HOME/.dtctl/env.sh\" >/dev/null 2>&1; fi\n"
		"echo \"hostname=$(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)\"\n"
		"if [ -r /etc/os-release ]; then . /etc/os-release; fi\n"
		"echo \"os=${PRETTY_NAME:-$(uname -s)}\"\n"
		"echo \"kernel=$(uname -r)\"\n"
		"echo \"glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | sed 's/^glibc //')\"\n"
		"echo \"nproc=$(nproc 2>/dev/null)\"\n"
		"if command -v nvidia-smi >/dev/null 2>&1; then\n"
		"  echo \"gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')\"\n"
		"  echo \"driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)\"\n"
		"  c=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\\([0-9.]*\\).*/\\1/p' | head -n 1)\n"
		"else echo gpus=none; echo driver=none; c=; fi\n"
		"if command -v nvcc >/dev/null 2>&1; then c=$(nvcc --version | sed -n 's/.*release \\([0-9.]*\\).*/\\1/p'); fi\n"
		"echo \"cuda=${c:-none}\"\n"
		"n=; for f in /usr/lib/*/libnccl.so.2.* /usr/lib64/libnccl.so.2.* /usr/local/cuda*/lib64/libnccl.so.2.* ${CUDA_HOME:+$CUDA_HOME/lib64/libnccl.so.2.*}; do\n"
		"  [ -e \"$f\" ] && n=${f##*libnccl.so.}; done\n"
		"echo \"nccl=${n:-none}\"\n"
		"if command -v mpirun >/dev/null 2>&1; then\n"
		"  echo \"mpi=$(mpirun --version 2>&1 | head -n 1 | sed 's/^.*) *//; s/^mpirun *//')\"\n"
		"else echo mpi=none; fi\n"
		/* the container engine (docs/containers.md): version, runtime, how GPUs pass */
		"if command -v podman >/dev/null 2>&1; then\n"
		"  v=$(podman --version 2>/dev/null | sed 's/^podman version //')\n"
		"  if r=$(timeout 30 podman info --format '{{.Host.OCIRuntime.Name}}' 2>&1); then\n"
		"    g=devices; for f in /etc/cdi/nvidia.yaml /etc/cdi/nvidia.json /var/run/cdi/nvidia.yaml /var/run/cdi/nvidia.json; do [ -r \"$f\" ] && g=cdi; done\n"
		"    q=; command -v sqfs2tar >/dev/null 2>&1 || q=', no squashfs images (no sqfs2tar)'\n"
		"    echo \"container=podman $v, $r, GPUs by $g$q\"\n"
		"  else echo \"container=podman $v not working: $(printf %s \"$r\" | grep -v 'level=warning' | tail -n 1)\"; fi\n"
		"else echo container=none; fi\n"
		"if [ -z \"$S\" ]; then echo shared=none\n"
		"elif [ ! -d \"$S\" ]; then echo shared=missing\n"
		"elif [ ! -w \"$S\" ]; then echo shared=readonly\n"
		"else echo shared=ok; fi\n"
		"ip -o -4 addr show 2>/dev/null | while read -r _ name _ addr _; do\n"
		"  [ \"$name\" = lo ] || echo \"iface=$name $addr\"; done\n"
		"echo \"ports=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | "
		"sed -n 's/^ *[0-9]*: [0-9A-Fa-f]*:\\([0-9A-Fa-f]*\\) [0-9A-Fa-f]*:[0-9A-Fa-f]* 0A .*/\\1/p' | tr '\\n' ' ')\"\n"
		"echo \"time=$(date +%s.%N)\"\n");
}

void facts_parse(struct kvlist *kv, const char *out)
{
	struct strbuf ifaces = STRBUF_INIT;

	for (const char *p = out; *p;) {
		const char *nl = strchrnul(p, '\n'), *eq = memchr(p, '=', (size_t)(nl - p));

		if (eq) {
			char *key = xstrndup(p, (size_t)(eq - p));
			char *val = xstrndup(eq + 1, (size_t)(nl - eq - 1));

			if (!strcmp(key, "iface")) {
				if (ifaces.len)
					strbuf_addch(&ifaces, ';');
				strbuf_addstr(&ifaces, val);
			} else {
				kvlist_set(kv, key, val);
			}
			free(key);
			free(val);
		}
		p = *nl ? nl + 1 : nl;
	}
	kvlist_set(kv, "ifaces", ifaces.buf);
	strbuf_release(&ifaces);
}

/* ------------------------------------------------------------- progress */

static int progress_shown;

int progress_enabled(void)
{
	return isatty(2);
}

void progress_tick(struct ssh_pool *p, void *data)
{
	int done, running, failed;

	(void)data;
	if (!progress_enabled())
		return;
	ssh_pool_progress(p, &done, &running, &failed);
	fprintf(stderr, "\r\033[K%zu %s: %d done, %d running, %d failed",
		ssh_pool_count(p), plural((long long)ssh_pool_count(p), "node", "nodes"), done, running,
		failed);
	fflush(stderr);
	progress_shown = 1;
}

void progress_clear(void)
{
	if (progress_shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		progress_shown = 0;
	}
}

void progress_prompt(void *data)
{
	(void)data;
	progress_clear();
}

/* ------------------------------------------------------------- passwords */

char *password_from(const char *file)
{
	const char *env = getenv("DTCTL_PASSWORD");

	if (file) {
		struct strbuf sb = STRBUF_INIT;

		if (strbuf_read_file(&sb, file, 4096) < 0) {
			error_errno("cannot read password file '%s'", file);
			strbuf_release(&sb);
			return NULL;
		}
		/* the first line, without its newline */
		strbuf_setlen(&sb, strcspn(sb.buf, "\r\n"));
		return strbuf_detach(&sb, NULL);
	}
	if (env)
		return xstrdup(env);
	return NULL;
}

const char *password_prompt(void *data)
{
	static char pw[512];
	struct termios old, noecho;
	FILE *tty;
	int have_tc;

	(void)data;
	if (!isatty(0) || !isatty(2))
		return NULL;
	tty = fopen("/dev/tty", "r+");
	if (!tty)
		return NULL;
	progress_clear();
	fputs("password for the cluster's nodes (first contact, not stored): ", tty);
	fflush(tty);
	have_tc = tcgetattr(fileno(tty), &old) == 0;
	if (have_tc) {
		noecho = old;
		noecho.c_lflag &= ~(tcflag_t)ECHO;
		tcsetattr(fileno(tty), TCSAFLUSH, &noecho);
	}
	if (!fgets(pw, sizeof(pw), tty))
		pw[0] = '\0';
	if (have_tc)
		tcsetattr(fileno(tty), TCSAFLUSH, &old);
	fputc('\n', tty);
	fclose(tty);
	pw[strcspn(pw, "\r\n")] = '\0';
	return pw[0] ? pw : NULL;
}

