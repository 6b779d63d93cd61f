/*
 * cmd-hosts.c - `dtctl hosts list | forget NODE... | import [--from FILE]`:
 * the cluster's known_hosts (~/.dtctl/known_hosts, see lib/knownhosts.h).
 *
 * forget is the documented way out of a "HOST KEY CHANGED" refusal after a
 * node was reinstalled; import takes the nodes' keys from the user's
 * ~/.ssh/known_hosts (hashed entries included) for ssh.host_key_policy:
 * strict.  Nothing here connects to a node.
 */
#include "builtin.h"
#include "cluster-ssh.h"
#include "setup.h"
#include "dthome.h"
#include "knownhosts.h"
#include "parse-options.h"
#include "term.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const hosts_usage[] = {
	"dtctl hosts list [--cluster FILE]",
	"dtctl hosts forget [--cluster FILE] NODE...",
	"dtctl hosts import [--cluster FILE] [--from FILE]",
	NULL,
};

static void kh_path(struct strbuf *sb)
{
	dt_home_path(sb, "known_hosts");
}

/* The name a node's keys are filed under. */
static void node_kh_name(struct strbuf *sb, const struct cluster_node *cn)
{
	known_hosts_name(sb, cn->host, cn->port);
}

static int hosts_list(const struct cluster_config *c, const struct known_hosts *kh)
{
	for (size_t i = 0; i < c->nr_nodes; i++) {
		const struct cluster_node *cn = &c->nodes[i];
		struct strbuf name = STRBUF_INIT;
		int any = 0;

		if (!strcmp(cn->host, "local"))
			continue;
		node_kh_name(&name, cn);
		for (size_t k = 0; k < kh->nr; k++) {
			const struct known_host *e = &kh->items[k];
			struct strbuf fp = STRBUF_INIT;

			if (!e->hosts || e->marker || !known_hosts_match_name(e->hosts, name.buf))
				continue;
			ssh_fingerprint(&fp, e->blob, e->blob_len);
			printf("%-16s %-24s %-20s %s\n", term_str(cn->name), term_str(name.buf),
			       term_str(e->keytype), fp.buf);
			strbuf_release(&fp);
			any = 1;
		}
		if (!any)
			printf("%-16s %-24s %-20s %s\n", term_str(cn->name), term_str(name.buf), "-",
			       "(not known)");
		strbuf_release(&name);
	}
	return 0;
}

static int hosts_forget(const struct cluster_config *c, struct known_hosts *kh,
			int argc, const char **argv)
{
	struct strbuf path = STRBUF_INIT;
	int removed = 0, ret = 0;

	for (int i = 0; i < argc; i++) {
		int k = cluster_find_node(c, argv[i]);
		struct strbuf name = STRBUF_INIT;
		int n;

		if (k >= 0)
			node_kh_name(&name, &c->nodes[k]);
		else
			strbuf_addstr(&name, argv[i]);	/* a host name as written in the file */
		n = known_hosts_forget(kh, name.buf);
		if (n)
			printf("forgot %d key%s of %s (%s)\n", n, n == 1 ? "" : "s", term_str(argv[i]),
			       term_str(name.buf));
		else
			warning("no known key for '%s' (%s)", argv[i], name.buf);
		removed += n;
		strbuf_release(&name);
	}
	kh_path(&path);
	if (removed && known_hosts_save(kh, path.buf) < 0)
		ret = DT_EXIT_FAIL;
	strbuf_release(&path);
	return ret;
}

static int hosts_import(const struct cluster_config *c, struct known_hosts *kh, const char *from)
{
	struct known_hosts src = KNOWN_HOSTS_INIT;
	struct strbuf def = STRBUF_INIT, path = STRBUF_INIT;
	int added = 0, missing = 0, ret = 0;

	if (!from) {
		const char *home = getenv("HOME");

		strbuf_addf(&def, "%s/.ssh/known_hosts", home ? home : "");
		from = def.buf;
	}
	if (known_hosts_load(&src, from) < 0) {
		ret = DT_EXIT_FAIL;
		goto out;
	}
	for (size_t i = 0; i < c->nr_nodes; i++) {
		const struct cluster_node *cn = &c->nodes[i];
		struct strbuf name = STRBUF_INIT;
		int found = 0;

		if (!strcmp(cn->host, "local"))
			continue;
		node_kh_name(&name, cn);
		for (size_t k = 0; k < src.nr; k++) {
			const struct known_host *e = &src.items[k];

			if (!e->hosts || e->marker || !known_hosts_match_name(e->hosts, name.buf))
				continue;
			found = 1;
			switch (known_hosts_check(kh, name.buf, e->blob, e->blob_len, NULL)) {
			case KH_MATCH:
				break;
			case KH_MISMATCH:
			case KH_NOT_FOUND:
				/* several key types per host are fine; a conflicting key of the
				 * same type is not imported over a known one */
				if (known_hosts_check(kh, name.buf, e->blob, e->blob_len, NULL) ==
				    KH_MISMATCH) {
					const struct known_host *old = NULL;

					known_hosts_check(kh, name.buf, e->blob, e->blob_len, &old);
					if (old && !strcmp(old->keytype, e->keytype)) {
						warning("%s: %s has a different %s key in '%s' than in the "
							"cluster's known_hosts; not imported (see 'dtctl hosts "
							"forget %s')", cn->name, name.buf, e->keytype, from,
							cn->name);
						break;
					}
				}
				known_hosts_add(kh, name.buf, e->blob, e->blob_len);
				added++;
				break;
			case KH_REVOKED:
				warning("%s: key in '%s' is revoked; not imported", cn->name, from);
				break;
			}
		}
		if (!found) {
			warning("%s: no key for %s in '%s'", cn->name, name.buf, from);
			missing++;
		}
		strbuf_release(&name);
	}
	kh_path(&path);
	if (added && (dt_home_ensure() < 0 || known_hosts_save(kh, path.buf) < 0))
		ret = DT_EXIT_FAIL;
	printf("imported %d key%s from %s into %s%s\n", added, added == 1 ? "" : "s",
	       term_str(from), term_str(path.buf),
	       missing ? "; some nodes have no key there" : "");
	if (missing && !ret)
		ret = DT_EXIT_FAIL;
out:
	known_hosts_release(&src);
	strbuf_release(&def);
	strbuf_release(&path);
	return ret;
}

int cmd_hosts(int argc, const char **argv)
{
	const char *from = NULL;
	struct option opts[] = {
		OPT_STRING(0, "from", &from, "file", "import: known_hosts to read (default: ~/.ssh/known_hosts)"),
		OPT_END(),
	};
	struct cluster_config *c = &the_cluster.config;
	struct known_hosts kh = KNOWN_HOSTS_INIT;
	struct strbuf path = STRBUF_INIT;
	const char *sub;
	int ret;

	argv++;
	argc = parse_options(argc - 1, argv, opts, hosts_usage, 0);
	if (argc < 1) {
		usage_with_options(hosts_usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	sub = argv[0];
	if (strcmp(sub, "list") && strcmp(sub, "forget") && strcmp(sub, "import")) {
		error("hosts: unknown subcommand '%s'", sub);
		usage_with_options(hosts_usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	if (!strcmp(sub, "forget") && argc < 2) {
		error("hosts forget: name the node(s)");
		return DT_EXIT_USAGE;
	}
	kh_path(&path);
	if (known_hosts_load(&kh, path.buf) < 0) {
		ret = DT_EXIT_FAIL;
	} else if (!strcmp(sub, "list")) {
		ret = hosts_list(c, &kh);
	} else if (!strcmp(sub, "forget")) {
		ret = hosts_forget(c, &kh, argc - 1, argv + 1);
	} else {
		ret = hosts_import(c, &kh, from);
	}
	known_hosts_release(&kh);
	strbuf_release(&path);
	return ret;
}
