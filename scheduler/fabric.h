/*
 * fabric.h - the verdict of a fabric test (dttrain --fabric, trainer/fabric.h)
 * against the head's baselines and the peers' median: which node and which
 * link is slow or cut.  Pure functions (no SQLite, no clock): dtsched keeps
 * the baselines (fabric-head.c), `dtctl doctor --fabric` prints the verdict.
 *
 * Figures, in MB/s from the test's directed bandwidths (full mode):
 *
 *   link a>b     the bandwidth from a to b
 *   node rx/tx   the upper median of its incoming / outgoing links (with two
 *                links, the better one: one slow peer does not make a node
 *                slow; all or most of its links must be)
 *
 * A figure fails below `fraction` x its baseline, or, from 3 nodes on, below `fraction` x the median of the same
 * figure over all nodes (links: over all directed links).  With 2 nodes
 * there is no peer to compare with: only baselines count, and a slow link
 * fails both of its nodes, since the test cannot tell which end is slow.
 * A latency fails above max(FABRIC_LAT_FLOOR_US, its baseline / fraction,
 * the median / fraction).  A link whose transfers did not finish fails, and
 * so do its nodes unless their other links finished (3 nodes or more: the
 * node with most failed links is the one named); a rank that never reported
 * fails its node.
 *
 * Baseline keys (a JSON object, key -> number): "rx:NODE", "tx:NODE",
 * "bw:A>B", "lat:A|B" (A < B).
 */
#ifndef DT_FABRIC_H
#define DT_FABRIC_H

#include <jansson.h>
#include "strbuf.h"

#define FABRIC_LAT_FLOOR_US 2000.0
#define FABRIC_BASE_WEIGHT 0.3

/*
 * The verdict of test document `doc`, whose rank k ran on node names[k]
 * (nr names; NULL: the doc's host names).  Returns a new object:
 *
 *   {"ok": bool, "mode": "full"|"quick", "fraction": f,
 *    "nodes": [{"node", "ok", "rx_MBps", "tx_MBps", "base_rx", "base_tx",
 *               "median_rx", "median_tx", "why"}],
 *    "links": [{"a", "b", "ok", "lat_us", "bw_ab_MBps", "bw_ba_MBps",
 *               "base_ab", "base_ba", "base_lat", "why"}],
 *    "allreduce": {...}, "elapsed_ms" (as measured), "bad_nodes": [names],
 *    "bad_links": ["a<->b"]}
 *
 * or NULL with a message in err when doc is not a fabric test document.
 */
json_t *fabric_verdict(const json_t *doc, const char *const *names, size_t nr,
		       const json_t *baselines, double fraction, struct strbuf *err);

/*
 * The baselines after verdict v: every figure of a node or link that passed
 * moves its baseline FABRIC_BASE_WEIGHT of the way to it (the first one sets
 * it): an exponential moving average of the passing measurements, so one
 * lucky or unlucky run moves it little, and a figure that failed never moves
 * it.  A figure is taken as at most 2x and at least half the old baseline
 * (the document is written by its job's user).  Updates `baselines` in place.
 */
void fabric_update_baselines(json_t *baselines, const json_t *v);

/* One line naming what failed in v ("node-2: rx 0.1 MB/s < 0.5 x ..."), for a
 * drain reason or a job's reason; empty when v passed. */
void fabric_summary(struct strbuf *sb, const json_t *v);

#endif
