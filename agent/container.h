/*
 * container.h - a task's processes inside a container image (job.yaml
 * `container:`, docs/containers.md), for the supervisor (supervise.c) and the
 * agent's start check (agent.c).
 *
 * Only the rank runs in the image: the supervisor, its log writer, the stall
 * and hang machinery stay on the node, so logs, cancel and exit codes are
 * those of any task.  The engine is podman (the one that could be tested
 * here), found in PATH; it is always called with an argv vector, never a
 * shell.  An image file on the shared dir is loaded once per node and cached
 * by its content digest: the digest dtctl took at submission is the name it
 * gets in the engine (localhost/dtctl-image:<hex>), so a second job with the
 * same file starts without a load and a changed file is a new image; the
 * bytes loaded are hashed as they are copied off the shared dir, and a file
 * that no longer has the submitted digest is refused.
 */
#ifndef DT_AGENT_CONTAINER_H
#define DT_AGENT_CONTAINER_H

#include <jansson.h>
#include <sys/types.h>
#include "strbuf.h"
#include "strvec.h"

#define CONTAINER_IMAGE_REPO "localhost/dtctl-image"

/*
 * The engine's path in *out (podman in PATH, then /usr/bin, /usr/local/bin),
 * or -1 with why naming what is missing.
 */
int container_engine_find(struct strbuf *out, struct strbuf *why);

/* Called with progress and notes for the task's log while an image loads. */
typedef void (*container_note_fn)(const char *line, void *data);

/*
 * Make the task's image (its spec's "container" object) runnable on this
 * node: for an image file, load it unless the engine already has its digest
 * (one loader at a time per agent home: <home>/images/.lock); for a name,
 * nothing (the engine pulls a missing one at run time).  *ref is then what
 * to run.  shared_root is the spec's log_root.  -1 with why.
 */
int container_image_ensure(const char *engine, const json_t *ctr, const char *shared_root,
			   const char *home, container_note_fn note, void *data,
			   struct strbuf *ref, struct strbuf *why);

/*
 * Team mode (docs/team.md): the job's user, for root's engine.  The image
 * file is opened with their ids and groups (the kernel says whether they may
 * read it), and an image the engine has already is run only when they can
 * show a file with its digest: the file they name, with the identity (device,
 * inode, size, times) it had when this node last hashed it, else hashed again.
 */
struct container_user {
	long long uid, gid;
	const gid_t *groups;          /* supplementary, with gid (getgrouplist) */
	int nr_groups;
};

/* container_image_ensure() for the user u (NULL: as the caller). */
int container_image_ensure_as(const char *engine, const json_t *ctr, const char *shared_root,
			      const char *home, const struct container_user *u,
			      container_note_fn note, void *data, struct strbuf *ref,
			      struct strbuf *why);

struct container_run {
	const char *engine, *ref, *name;
	const char *cwd;              /* the ranks' directory, or NULL ("/" of the image) */
	const char *submit_dir, *shared_dir;  /* mounted at the same paths, or NULL */
	const char *gpus;             /* the task's CUDA_VISIBLE_DEVICES, or NULL */
	const char *dev_dir;          /* where to find nvidia* device nodes ("/dev") */
	const char *cdi_dir;          /* NULL: /etc/cdi and /var/run/cdi */
	const char *extra_volume;     /* one more dir at the same path (mpi: the session dir), or NULL */
	int keep_id;                  /* the caller's uid and gid inside (mpi: PMIx checks them) */
	const struct container_user *user;  /* team mode: root's engine runs the rank as them,
					       with no capabilities and no_new_privs */
	const char *env_file;         /* the variables in a file (--env-file), not by name */
	/* line_buffered: the node's libstdbuf.so (linelog.h), mounted read-only at
	 * CONTAINER_STDBUF, and the LD_PRELOAD the rank gets (it first) */
	const char *stdbuf_lib, *ld_preload;
};

#define CONTAINER_STDBUF "/.dtctl/libstdbuf.so"

/*
 * line_buffered in an image: when env (a rank's, after linelog_stdbuf_env())
 * has DT_LINE_BUFFERED=1, _STDBUF_O and the node's libstdbuf.so first in
 * LD_PRELOAD, that library in *lib and the rank's LD_PRELOAD in the image in
 * *inside: CONTAINER_STDBUF, then (keep_rest) the job's own preloads after
 * it.  1 then, 0 when there is nothing to do (both left empty).
 */
int container_stdbuf(const struct strvec *env, int keep_rest, struct strbuf *lib,
		     struct strbuf *inside);

/*
 * The engine's argv running argv in the image: host network and pid
 * namespace, the node's /dev/shm, a private /tmp, the GPUs of the task and
 * no others, every variable named in pass (-e NAME: the value comes from
 * the engine's own environment, so it is not on a command line).  *env_set
 * gets variables the caller must set for the engine's environment instead
 * of its own (CUDA_VISIBLE_DEVICES renumbered inside the container) and
 * *notes lines worth a note in the log ("no GPU device nodes: fake GPUs").
 */
void container_run_argv(const struct container_run *r, const struct strvec *argv,
			const struct strvec *pass, struct strvec *out, struct strvec *env_set,
			struct strbuf *notes);

/* Remove the task's container whatever state it is in (after a kill); quiet. */
void container_remove(const char *engine, const char *name, const char *const *env);

#endif
