/*
 * probe.h - the connectivity check before a multi-node job (probe.c); its
 * pure part, for tests.
 */
#ifndef DT_SCHED_PROBE_H
#define DT_SCHED_PROBE_H

#include <stddef.h>

/*
 * fail[i * n + k]: node i could not connect to node k.  A pair failed when
 * either direction did; culprit[i] = 1 for a node failing with more than half
 * of its n - 1 peers (with 2 nodes: both, when their pair failed).  Returns
 * the number of culprits.
 */
int probe_culprits(size_t n, const unsigned char *fail, unsigned char *culprit);

#endif
