/*
 * image.h - container images on the shared dir, for `dtctl run`, `dtctl
 * sweep` and `dtctl image` (docs/containers.md).
 *
 * An image file is named by its content digest ("sha256:<hex>", taken here
 * at submission): the agents load exactly those bytes, cache them under that
 * digest and refuse a file that changed since.  `dtctl image import` keeps
 * images as <shared>/images/<name>.image with <name>.json (name, digest,
 * size), so a job names one by its name and no submission hashes it again;
 * the agents mark <shared>/images/cache/<hex>/<node> once a node has it.
 */
#ifndef DT_CLI_IMAGE_H
#define DT_CLI_IMAGE_H

#include "config.h"
#include "sha256.h"

/*
 * Resolve j->container for submission: a path (./, ../ relative to where
 * dtctl runs) becomes absolute and must be a regular file below shared_dir,
 * whose digest goes into j->container_digest; the name of an imported image
 * becomes its file and recorded digest; any other name is the engine's.
 * 0, or an exit code after error() naming the file and the fix.
 */
int image_resolve(struct job_config *j, const char *shared_dir);

/* [A-Za-z0-9._-]{1,64}, not starting with '.' */
int image_name_valid(const char *name);
/* The digest `dtctl image import` recorded for name; -1 when none (or bad). */
int image_lookup(const char *shared_dir, const char *name, char digest[DT_DIGEST_STR]);

#endif
