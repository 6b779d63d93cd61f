/*
 * dthome.h - where dtctl keeps its files on the head and on nodes.
 *
 * The home is $DTCTL_HOME, else ~/.dtctl.  It is created 0700 on first use.
 * Files (docs/architecture.md, "Files and where they live"): cluster.yaml, id_ed25519[.pub] (0600), known_hosts,
 * ssh_config, secret (0600), state.db, dtsched.log, agent.log, bin/, tasks/.
 */
#ifndef DT_DTHOME_H
#define DT_DTHOME_H

#include "strbuf.h"

/* The home directory path (not created). Owned by the module; do not free. */
const char *dt_home(void);
/* Forget the home found so far: the next dt_home() reads $DTCTL_HOME again. */
void dt_home_reset(void);
/* Create the home (0700) if missing and fix its mode; -1 with a message on failure. */
int dt_home_ensure(void);
/* Append dt_home()/name to sb. */
void dt_home_path(struct strbuf *sb, const char *name);
/* mkdir -p with `mode` for each created component; -1 with a message on failure. */
int mkdir_p(const char *path, int mode);
/*
 * Remove path and everything below it, never following a symlink (they are
 * removed as links).  0 (also when path does not exist), or -1 with errno of
 * the first failure; it goes on past failures.
 */
int rm_tree(const char *path);

/*
 * The folder of the running program (where dtctl, dtagent and dtsched are
 * installed side by side), from /proc/self/exe; "." when unknown.
 */
void dt_self_dir(struct strbuf *sb);

/*
 * templates/<name> shipped with the programs: beside the build (bin/../templates)
 * or the installation (<prefix>/share/dtctl/templates), found from
 * /proc/self/exe.  0 with the readable file's path appended to path, or -1
 * with the places looked at appended ("a, b or c").
 */
int dt_builtin_template(const char *name, struct strbuf *path);

#endif
