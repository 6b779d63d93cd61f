/*
 * placement.h - where a job's ranks go: a pure function over a snapshot of the
 * nodes, so the queue policy and `dtctl run --dry-run` share it and unit tests
 * can check it without daemons.
 *
 * A job asks for `nodes` nodes with `per_node` slots each (GPUs, or CPU slots
 * for procs_per_node jobs).  Candidates are UP, not drained, match the
 * include/exclude host specs and the required labels, and are not in `avoid`
 * (nodes a retried job failed on).  Among candidates with enough free slots
 * the ones with the FEWEST free slots are taken first (best fit, so big holes
 * stay whole for big jobs), ties by name; within a node the lowest free slot
 * indices are taken, which become CUDA_VISIBLE_DEVICES.
 *
 * placement_try() answers PLACE_OK (with the slots), PLACE_WAIT (it could
 * fit once running jobs end; `reason` says what it waits for) or PLACE_NEVER
 * (not even an idle cluster could run it; `reason` has the numbers).
 */
#ifndef DT_PLACEMENT_H
#define DT_PLACEMENT_H

#include <stddef.h>
#include "config.h"
#include "strbuf.h"

#define PLACE_MAX_SLOTS 1024

struct place_node {
	const char *name;
	int up;                       /* UP or DRAINED (SUSPECT/DOWN are not placeable) */
	int drained;
	int total;                    /* slots: GPUs, or CPU slots */
	unsigned char used[PLACE_MAX_SLOTS];  /* 1 = slot taken (by a job or a reservation) */
	const struct kvlist *labels;
};

struct place_req {
	int nodes;
	int per_node;
	const char *include;          /* host-range spec or NULL */
	const char *exclude;
	const struct kvlist *labels;  /* required labels or NULL */
	const char *const *avoid;     /* NULL-terminated node names, or NULL */
	int burn_in;                  /* drained nodes are candidates too (dtctl resume --burn-in) */
};

struct place_result {
	int nr;                       /* == req.nodes on PLACE_OK */
	int node[256];                /* indices into the node array, rank order */
	int slots[256][64];           /* slot indices per chosen node (per_node of them) */
};

enum place_status { PLACE_OK, PLACE_WAIT, PLACE_NEVER, PLACE_ERROR };

enum place_status placement_try(const struct place_node *nodes, size_t nr,
				const struct place_req *req, struct place_result *res,
				struct strbuf *reason);
/* Mark the result's slots used in `nodes` (the atomic reservation). */
void placement_commit(struct place_node *nodes, const struct place_result *res, int per_node);
/* "0,1,3" for one chosen node, into sb. */
void placement_format_slots(struct strbuf *sb, const struct place_result *res, int i,
			    int per_node);

#endif
