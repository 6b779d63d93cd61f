/*
 * fuzz_heartbeat.c - libFuzzer target for dtsched's fast heartbeat reader.
 *
 * heartbeat_parse_fast() reads the common idle heartbeat without jansson
 * (scheduler/sched.c).  Its contract: -1 for anything it does not take
 * (jansson then reads the body), 0 only for a body jansson reads the same
 * way.  Besides the sanitizers, this checks that contract on every input:
 * whatever the fast reader accepts must parse with jansson to the same
 * fields.  Built and run by `make fuzz` (mk/fuzz.mk).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "scheduler/sched-int.h"

static int same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	struct heartbeat f, h;
	json_t *j;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	memset(&f, 0, sizeof(f));
	if (heartbeat_parse_fast(buf, size, &f) < 0) {
		free(buf);
		return 0;
	}
	/* accepted: jansson must agree on the original bytes */
	j = json_parse((const char *)data, size, NULL);
	if (!j || !json_is_object(j))
		abort();
	heartbeat_from_json(j, &h);
	if (!same_str(f.node, h.node) || !same_str(f.address, h.address) ||
	    !same_str(f.version, h.version) || !same_str(f.inventory_hash, h.inventory_hash) ||
	    !same_str(f.agent_started_at, h.agent_started_at) || !same_str(f.bin_dir, h.bin_dir) ||
	    !same_str(f.home, h.home) || !same_str(f.ssh_config, h.ssh_config) ||
	    f.port != h.port || !same_str(f.tasks_digest, h.tasks_digest) || f.seq != h.seq || f.full != h.full || f.has_tasks != h.has_tasks || h.inventory ||
	    (h.usage && !json_is_null(h.usage)) ||
	    (h.tasks && (!json_is_array(h.tasks) || json_array_size(h.tasks))))
		abort();
	json_decref(j);
	free(buf);
	return 0;
}
