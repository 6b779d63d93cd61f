/*
 * probe.h - the agent's half of the connectivity check (POST /v1/probe,
 * lib/protocol.h): TCP connects to the peers' agent ports, all at once.
 */
#ifndef DT_AGENT_PROBE_H
#define DT_AGENT_PROBE_H

#include <jansson.h>
#include "strbuf.h"

#define PROBE_MAX_TARGETS 256       /* peers of one node in one check */
#define PROBE_MAX_TIMEOUT_MS 10000
#define PROBE_MAX_PENDING 64        /* name lookups left hanging, node-wide */

/*
 * targets: [{node, address, port}...] (address numeric, or a name looked up
 * within the timeout: probe.c).  Returns [{node, ok, ms, error?}...] in the
 * same order once every lookup and connect ended or timeout_ms passed, or
 * NULL with err for a malformed list.  Slow: run it off the HTTP thread.
 */
json_t *probe_connect(const json_t *targets, int timeout_ms, struct strbuf *err);

#endif
