/*
 * fuzz_beacon.c - libFuzzer target for the UDP beacon and resync readers
 * (lib/beacon.c, protocol.h).
 *
 * Each input is read twice: as a whole datagram (which a fuzzer can almost
 * never sign, so it exercises the format checks before the MAC), and as the
 * signed part of one, with a correct MAC appended (so the reader also gets
 * past the MAC with arbitrary fields).  Besides the sanitizers, a datagram
 * that verifies must be exactly what dt_beacon_encode() / dt_resync_encode()
 * write for the fields read back: there is one way to write each beacon.
 * Built and run by `make fuzz` (mk/fuzz.mk).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "beacon.h"

#define NOW 1795000000LL

static void check(const struct dt_auth_key *key, const char *buf, size_t len)
{
	struct dt_beacon b;
	char again[DT_BEACON_MAX + 1], node[256];
	long long seq;
	int n;

	if (dt_beacon_verify(key, buf, len, NOW, &b) == DT_BEACON_OK) {
		n = dt_beacon_encode(key, &b, again, sizeof(again));
		if (n < 0 || (size_t)n != len || memcmp(again, buf, len))
			abort();
	}
	if (dt_resync_verify(key, buf, len, NOW, node, &seq) == DT_BEACON_OK) {
		/* the time is not returned: re-encode with each time in the window */
		int found = 0;

		for (long long t = NOW - DT_AUTH_MAX_SKEW_S; t <= NOW + DT_AUTH_MAX_SKEW_S && !found; t++) {
			n = dt_resync_encode(key, node, seq, t, again, sizeof(again));
			found = n > 0 && (size_t)n == len && !memcmp(again, buf, len);
		}
		if (!found)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct dt_auth_key key;
	char *buf = malloc(size + 66), mac[DT_SHA256_HEX];

	if (!buf)
		return 0;
	if (!key.len)
		dt_auth_key_from_hex(&key, "00112233445566778899aabbccddeeff");
	memcpy(buf, data, size);
	check(&key, buf, size);
	/* the input as the signed part: append " <its MAC>" */
	buf[size] = '\0';
	if (!memchr(data, '\0', size)) {
		dt_auth_mac_hex(&key, buf, mac);
		buf[size] = ' ';
		memcpy(buf + size + 1, mac, 64);
		check(&key, buf, size + 65);
	}
	free(buf);
	return 0;
}
