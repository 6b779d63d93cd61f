/*
 * test_beacon.c - UDP beacons (lib/beacon.c, protocol.h): encode/verify round
 * trips, every refusal of the datagram itself (bad MAC, stale, truncated,
 * oversized, other version, malformed fields), dtsched's decision on a
 * well-signed one (scheduler/sched.c sched_beacon: accepted, replayed seq,
 * unknown node, DOWN node, changed hash or digest, resync size and rate), the
 * agent's beacon-or-HTTP rule, and a mutation loop: no mutated datagram is
 * ever taken or crashes the reader.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "beacon.h"
#include "json.h"
#include "log.h"
#include "scheduler/sched-int.h"

#define NOW 1795000000LL
#define HASH "fe7b14a7189b304d0dbde7752e4386ff2361d3dbe0322a1a1f5a9439f6a73628"
#define DIGEST "4f53cda18c2baa0c"
#define STARTED "2026-11-22T13:22:48.563239Z"

static struct dt_auth_key key, other;

static int setup(void **state)
{
	assert_int_equal(dt_auth_key_from_hex(&key, "00112233445566778899aabbccddeeff"), 0);
	assert_int_equal(dt_auth_key_from_hex(&other, "00112233445566778899aabbccddeefe"), 0);
	return 0;
}

static void fill(struct dt_beacon *b, const char *node, long long seq, long long t)
{
	memset(b, 0, sizeof(*b));
	snprintf(b->node, sizeof(b->node), "%s", node);
	snprintf(b->started, sizeof(b->started), "%s", STARTED);
	b->seq = seq;
	b->time = t;
	memcpy(b->inventory_hash, HASH, sizeof(HASH));
	memcpy(b->tasks_digest, DIGEST, sizeof(DIGEST));
}

static int encode(const struct dt_auth_key *k, const char *node, long long seq, long long t,
		  char *buf)
{
	struct dt_beacon b;

	fill(&b, node, seq, t);
	return dt_beacon_encode(k, &b, buf, DT_BEACON_MAX + 1);
}

static void test_round_trip(void **state)
{
	char buf[DT_BEACON_MAX + 1], big[300];
	struct dt_beacon out;
	int n = encode(&key, "gpu-01.lab", 42, NOW, buf);

	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(buf));
	assert_true(!strncmp(buf, "DTB1 gpu-01.lab " STARTED " 42 ", 16 + strlen(STARTED) + 4));
	assert_int_equal(dt_beacon_verify(&key, buf, (size_t)n, NOW, &out), DT_BEACON_OK);
	assert_string_equal(out.node, "gpu-01.lab");
	assert_string_equal(out.started, STARTED);
	assert_int_equal(out.seq, 42);
	assert_int_equal(out.time, NOW);
	assert_string_equal(out.inventory_hash, HASH);
	assert_string_equal(out.tasks_digest, DIGEST);
	/* clock skew up to the HTTP signing window either way */
	assert_int_equal(dt_beacon_verify(&key, buf, (size_t)n, NOW + DT_AUTH_MAX_SKEW_S, &out),
			 DT_BEACON_OK);
	assert_int_equal(dt_beacon_verify(&key, buf, (size_t)n, NOW - DT_AUTH_MAX_SKEW_S, &out),
			 DT_BEACON_OK);
	/* the longest node name still fits in DT_BEACON_MAX */
	memset(big, 'n', 255);
	big[255] = '\0';
	n = encode(&key, big, 999999999999999999LL, NOW, buf);
	assert_true(n > 0 && n <= DT_BEACON_MAX);
	assert_int_equal(dt_beacon_verify(&key, buf, (size_t)n, NOW, &out), DT_BEACON_OK);
	assert_string_equal(out.node, big);
	/* fields out of the format are not encoded */
	assert_int_equal(encode(&key, "bad name", 1, NOW, buf), -1);
	assert_int_equal(encode(&key, "", 1, NOW, buf), -1);
	assert_int_equal(encode(&key, "n1", 0, NOW, buf), -1);
}

static void test_refusals(void **state)
{
	char buf[DT_BEACON_MAX + 1], bad[DT_BEACON_MAX + 64];
	struct dt_beacon out;
	int n = encode(&key, "n1", 7, NOW, buf);

	/* another key, and one flipped MAC digit */
	assert_int_equal(dt_beacon_verify(&other, buf, (size_t)n, NOW, &out), DT_BEACON_BAD_MAC);
	memcpy(bad, buf, (size_t)n);
	bad[n - 1] = bad[n - 1] == '0' ? '1' : '0';
	assert_int_equal(dt_beacon_verify(&key, bad, (size_t)n, NOW, &out), DT_BEACON_BAD_MAC);
	/* a signed field changed: the MAC no longer matches */
	memcpy(bad, buf, (size_t)n);
	bad[8] = '8';          /* "DTB1 n1 2..." -> the started field */
	assert_int_equal(dt_beacon_verify(&key, bad, (size_t)n, NOW, &out), DT_BEACON_BAD_MAC);
	/* stale either way */
	assert_int_equal(dt_beacon_verify(&key, buf, (size_t)n, NOW + DT_AUTH_MAX_SKEW_S + 1, &out),
			 DT_BEACON_STALE);
	assert_int_equal(dt_beacon_verify(&key, buf, (size_t)n, NOW - DT_AUTH_MAX_SKEW_S - 1, &out),
			 DT_BEACON_STALE);
	/* every truncation */
	for (int len = 0; len < n; len++)
		assert_int_not_equal(dt_beacon_verify(&key, buf, (size_t)len, NOW, &out), DT_BEACON_OK);
	/* oversized, even if it starts with a good beacon */
	memset(bad, 'x', sizeof(bad));
	memcpy(bad, buf, (size_t)n);
	assert_int_equal(dt_beacon_verify(&key, bad, DT_BEACON_MAX + 1, NOW, &out),
			 DT_BEACON_TOO_LARGE);
	assert_int_equal(dt_beacon_verify(&key, bad, sizeof(bad), NOW, &out), DT_BEACON_TOO_LARGE);
	/* another version */
	memcpy(bad, buf, (size_t)n);
	bad[3] = '2';
	assert_int_equal(dt_beacon_verify(&key, bad, (size_t)n, NOW, &out), DT_BEACON_VERSION);
	/* a resync is not a beacon and the other way round */
	{
		char r[DT_BEACON_MAX + 1], node[256];
		long long seq;
		int rn = dt_resync_encode(&key, "n1", 7, NOW, r, sizeof(r));

		assert_true(rn > 0);
		assert_int_equal(dt_beacon_verify(&key, r, (size_t)rn, NOW, &out), DT_BEACON_MALFORMED);
		assert_int_equal(dt_resync_verify(&key, buf, (size_t)n, NOW, node, &seq),
				 DT_BEACON_MALFORMED);
	}
	/* malformed fields, each otherwise a good datagram (MAC never reached) */
	{
		static const char *const mal[] = {
			"DTB1  n1 " STARTED " 1 1795000000 " HASH " " DIGEST " " HASH,
			" DTB1 n1 " STARTED " 1 1795000000 " HASH " " DIGEST " " HASH,
			"DTB1 n1 " STARTED " 1 1795000000 " HASH " " DIGEST " " HASH " ",
			"DTB1 n1 " STARTED " 0 1795000000 " HASH " " DIGEST " " HASH,
			"DTB1 n1 " STARTED " 01 1795000000 " HASH " " DIGEST " " HASH,
			"DTB1 n1 " STARTED " -1 1795000000 " HASH " " DIGEST " " HASH,
			"DTB1 n1 " STARTED " 1 1795000000 " DIGEST " " DIGEST " " HASH,
			"DTB1 n1 " STARTED " 1 1795000000 " HASH " " HASH " " HASH,
			"DTB1 n1 " STARTED " 1 1795000000 " HASH " " DIGEST,
			"DTB1 n/1 " STARTED " 1 1795000000 " HASH " " DIGEST " " HASH,
			"DTB1 n1 " STARTED " 1 1795000000 " HASH " " DIGEST " " HASH " extra",
			"DTB1 n1 " STARTED " 1 1795000000 FE7B14A7189B304D0DBDE7752E4386FF2361D3DBE0322A1A1F5A9439F6A73628 " DIGEST " " HASH,
			"DTB1 n1\t" STARTED " 1 1795000000 " HASH " " DIGEST " " HASH,
			"DTBX n1 " STARTED " 1 1795000000 " HASH " " DIGEST " " HASH,
			"",
			"DTB1",
		};

		for (size_t i = 0; i < ARRAY_SIZE(mal); i++)
			if (dt_beacon_verify(&key, mal[i], strlen(mal[i]), NOW, &out) !=
			    DT_BEACON_MALFORMED)
				fail_msg("not refused as malformed: '%s'", mal[i]);
		/* a NUL inside */
		memcpy(bad, buf, (size_t)n);
		bad[5] = '\0';
		assert_int_equal(dt_beacon_verify(&key, bad, (size_t)n, NOW, &out), DT_BEACON_MALFORMED);
	}
}

static void test_resync(void **state)
{
	char b[DT_BEACON_MAX + 1], r[DT_BEACON_MAX + 1], node[256], big[256];
	long long seq = 0;
	int bn = encode(&key, "n1", 9, NOW, b), rn = dt_resync_encode(&key, "n1", 9, NOW, r, sizeof(r));

	assert_true(rn > 0 && rn < bn);
	assert_int_equal(dt_resync_verify(&key, r, (size_t)rn, NOW, node, &seq), DT_BEACON_OK);
	assert_string_equal(node, "n1");
	assert_int_equal(seq, 9);
	assert_int_equal(dt_resync_verify(&other, r, (size_t)rn, NOW, node, &seq), DT_BEACON_BAD_MAC);
	assert_int_equal(dt_resync_verify(&key, r, (size_t)rn, NOW + 61, node, &seq), DT_BEACON_STALE);
	for (int len = 0; len < rn; len++)
		assert_int_not_equal(dt_resync_verify(&key, r, (size_t)len, NOW, node, &seq),
				     DT_BEACON_OK);
	/* never larger than the beacon it answers, whatever the name */
	memset(big, 'a', 255);
	big[255] = '\0';
	bn = encode(&key, big, 999999999999999999LL, NOW, b);
	rn = dt_resync_encode(&key, big, 999999999999999999LL, NOW, r, sizeof(r));
	assert_true(rn > 0 && rn < bn);
	/* too small a buffer: nothing */
	assert_int_equal(dt_resync_encode(&key, "n1", 9, NOW, r, 40), -1);
}

/* ------------------------------------------------- dtsched's decision */

static struct sched *sched_new(void)
{
	struct sched *s = xcalloc(1, sizeof(*s));
	struct node *n;

	pthread_mutex_init(&s->lock, NULL);
	s->key = key;
	s->beacon_fd = 3;
	s->o.dead_after_ms = 10000;
	n = node_add(s, "n1");
	n->agent_started = xstrdup(STARTED);
	n->inventory = json_object();
	memcpy(n->inv_hash, HASH, sizeof(HASH));
	memcpy(n->tasks_digest, DIGEST, sizeof(DIGEST));
	n->last_seq = 5;
	n->last_hb_mono = dt_mono_ms();
	n->last_hb_us = n->saved_hb_us = dt_now_us();
	n->want_full = 0;
	return s;
}

static void sched_free(struct sched *s)
{
	for (size_t i = 0; i < s->nr; i++)
		node_free(s->nodes[i]);
	free(s->nodes);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static size_t take(struct sched *s, const char *node, long long seq, char *reply)
{
	char buf[DT_BEACON_MAX + 1];
	int n = encode(&key, node, seq, NOW, buf);

	assert_true(n > 0);
	return sched_beacon(s, buf, (size_t)n, NOW, reply, DT_BEACON_MAX + 1);
}

/* dtsched before any node is known (just started on an empty database): a
 * beacon is an unknown node's, and looking a node up must not hand bsearch
 * the NULL table (UBSan aborted dtsched on the first GET /v1/nodes/<name>) */
static void test_sched_no_nodes_yet(void **state)
{
	struct sched *s = xcalloc(1, sizeof(*s));
	char reply[DT_BEACON_MAX + 1];

	pthread_mutex_init(&s->lock, NULL);
	s->key = key;
	s->beacon_fd = 3;
	assert_null(node_find(s, "n1"));
	assert_true(take(s, "n1", 1, reply) > 0);      /* a resync: "tell me who you are" */
	assert_int_equal(s->beacons[BEACON_UNKNOWN_NODE], 1);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static void test_sched_accepts_and_refuses(void **state)
{
	struct sched *s = sched_new();
	struct node *n = s->nodes[0];
	char reply[DT_BEACON_MAX + 1], buf[DT_BEACON_MAX + 1], node[256];
	long long before = n->last_hb_mono, seq;
	size_t r;
	int len;

	/* accepted: liveness refreshed, counted, no reply */
	n->last_hb_mono -= 3000;
	before = n->last_hb_mono;
	assert_int_equal(take(s, "n1", 6, reply), 0);
	assert_int_equal(s->beacons[BEACON_ACCEPTED], 1);
	assert_true(n->last_hb_mono > before);
	assert_int_equal(n->beacons_since_http, 1);
	assert_int_equal(n->last_seq, 6);
	/* replayed (same seq, and an older one): dropped silently */
	assert_int_equal(take(s, "n1", 6, reply), 0);
	assert_int_equal(take(s, "n1", 3, reply), 0);
	assert_int_equal(s->beacons[BEACON_REPLAY], 2);
	assert_int_equal(s->beacons[BEACON_ACCEPTED], 1);
	/* unknown node: a resync, smaller than the beacon, that verifies */
	len = encode(&key, "n2", 1, NOW, buf);
	r = sched_beacon(s, buf, (size_t)len, NOW, reply, sizeof(reply));
	assert_true(r > 0 && r < (size_t)len);
	assert_int_equal(s->beacons[BEACON_UNKNOWN_NODE], 1);
	assert_int_equal(dt_resync_verify(&key, reply, r, NOW, node, &seq), DT_BEACON_OK);
	assert_string_equal(node, "n2");
	assert_int_equal(seq, 1);
	/* inventory hash changed: resync; the next within DT_RESYNC_MIN_MS: none */
	n->inv_hash[0] = 'a';
	assert_true(take(s, "n1", 7, reply) > 0);
	assert_int_equal(take(s, "n1", 8, reply), 0);
	assert_int_equal(s->beacons[BEACON_MISMATCH], 2);
	memcpy(n->inv_hash, HASH, sizeof(HASH));
	/* task digest changed, node waiting for its full table, another agent start */
	n->resync_mono = 0;
	n->tasks_digest[0] = '0';
	assert_true(take(s, "n1", 9, reply) > 0);
	memcpy(n->tasks_digest, DIGEST, sizeof(DIGEST));
	n->resync_mono = 0;
	n->want_full = 1;
	assert_true(take(s, "n1", 10, reply) > 0);
	n->want_full = 0;
	n->resync_mono = 0;
	free(n->agent_started);
	n->agent_started = xstrdup("2026-11-22T13:22:49.000000Z");
	assert_true(take(s, "n1", 11, reply) > 0);
	free(n->agent_started);
	n->agent_started = xstrdup(STARTED);
	assert_int_equal(s->beacons[BEACON_MISMATCH], 5);
	/* DOWN: never accepted, resync */
	n->resync_mono = 0;
	n->state = DT_NODE_DOWN;
	before = n->last_hb_mono;
	assert_true(take(s, "n1", 12, reply) > 0);
	assert_int_equal(s->beacons[BEACON_NODE_DOWN], 1);
	assert_int_equal(n->last_hb_mono, before);
	n->state = DT_NODE_UP;
	/* badly signed or stale: counted, never answered */
	len = encode(&other, "n1", 50, NOW, buf);
	assert_int_equal(sched_beacon(s, buf, (size_t)len, NOW, reply, sizeof(reply)), 0);
	assert_int_equal(s->beacons[BEACON_BAD_MAC], 1);
	len = encode(&key, "n2", 50, NOW - 100, buf);
	assert_int_equal(sched_beacon(s, buf, (size_t)len, NOW, reply, sizeof(reply)), 0);
	assert_int_equal(s->beacons[BEACON_STALE], 1);
	assert_int_equal(sched_beacon(s, "garbage", 7, NOW, reply, sizeof(reply)), 0);
	assert_int_equal(s->beacons[BEACON_MALFORMED], 1);
	/* and a good one is still taken */
	assert_int_equal(take(s, "n1", 13, reply), 0);
	assert_int_equal(s->beacons[BEACON_ACCEPTED], 2);
	assert_int_equal(n->beacons_accepted, 2);
	sched_free(s);
}

/* ----------------------------------------------------- the agent's rule */

static void test_policy(void **state)
{
	struct dt_beacon_policy p = DT_BEACON_POLICY_INIT;
	json_t *yes = json_pack("{s:b,s:i,s:i}", "beacon", 1, "dead_after_ms", 10000, "beacons_seen", 0);
	json_t *seen = json_pack("{s:b,s:i,s:i}", "beacon", 1, "dead_after_ms", 10000, "beacons_seen", 2);
	json_t *old = json_pack("{s:i}", "dead_after_ms", 10000);
	int beacons = 0, http = 0;

	/* nothing before an HTTP heartbeat; nothing from a dtsched that does not say so */
	assert_false(dt_beacon_policy_due(&p, 1000, 1000, 0, DIGEST));
	assert_int_equal(dt_beacon_policy_http_ok(&p, 1000, old, DIGEST), 0);
	assert_false(dt_beacon_policy_due(&p, 2000, 1000, 0, DIGEST));
	/* with "beacon": true, idle, 1 s beats, dead_after 10 s: HTTP every 5 s */
	assert_int_equal(dt_beacon_policy_http_ok(&p, 0, seen, DIGEST), 0);
	for (long long t = 1000; t <= 20000; t += 1000) {
		if (dt_beacon_policy_due(&p, t, 1000, 0, DIGEST)) {
			dt_beacon_policy_sent(&p);
			beacons++;
		} else {
			http++;
			dt_beacon_policy_http_ok(&p, t, seen, DIGEST);
		}
	}
	assert_int_equal(http, 4);
	assert_int_equal(beacons, 16);
	/* anything changed, or another task digest: HTTP */
	assert_false(dt_beacon_policy_due(&p, 21000, 1000, 1, DIGEST));
	assert_false(dt_beacon_policy_due(&p, 21000, 1000, 0, "0000000000000000"));
	/* 2 s beats: the next beat must still be within dead_after/2 */
	dt_beacon_policy_http_ok(&p, 30000, seen, DIGEST);
	assert_true(dt_beacon_policy_due(&p, 32000, 2000, 0, DIGEST));
	assert_false(dt_beacon_policy_due(&p, 34000, 2000, 0, DIGEST));
	/* a failed HTTP heartbeat: no beacons until one is answered */
	dt_beacon_policy_http_failed(&p);
	assert_false(dt_beacon_policy_due(&p, 31000, 1000, 0, DIGEST));
	dt_beacon_policy_http_ok(&p, 40000, seen, DIGEST);
	/* three beacons none of which arrived: paused for DT_BEACON_RETRY_MS */
	for (int i = 0; i < 3; i++)
		dt_beacon_policy_sent(&p);
	assert_int_equal(dt_beacon_policy_http_ok(&p, 45000, yes, DIGEST), 1);
	assert_false(dt_beacon_policy_due(&p, 46000, 1000, 0, DIGEST));
	dt_beacon_policy_http_ok(&p, 45000 + DT_BEACON_RETRY_MS, yes, DIGEST);
	assert_true(dt_beacon_policy_due(&p, 46000 + DT_BEACON_RETRY_MS, 1000, 0, DIGEST));
	/* unseen ones add up over several HTTP heartbeats (2 s beats: 1 per cycle) */
	p.off_until_ms = 0;
	for (int i = 0; i < 2; i++) {
		dt_beacon_policy_sent(&p);
		assert_int_equal(dt_beacon_policy_http_ok(&p, 50000 + i, yes, DIGEST), 0);
	}
	dt_beacon_policy_sent(&p);
	assert_int_equal(dt_beacon_policy_http_ok(&p, 50002, yes, DIGEST), 1);
	/* a resync proves they arrive: a restarted dtsched's beacons_seen 0 is no reason */
	p.off_until_ms = 0;
	for (int i = 0; i < 4; i++)
		dt_beacon_policy_sent(&p);
	dt_beacon_policy_resynced(&p);
	assert_int_equal(dt_beacon_policy_http_ok(&p, 60000, yes, DIGEST), 0);
	json_decref(yes);
	json_decref(seen);
	json_decref(old);
}

/* ----------------------------------------------------------- mutations */

static void test_mutations(void **state)
{
	char good[DT_BEACON_MAX + 1], buf[DT_BEACON_MAX + 64], rgood[DT_BEACON_MAX + 1], node[256];
	struct dt_beacon out;
	int n = encode(&key, "node-7", 1234, NOW, good), rn;
	unsigned seed = 12345;
	long long seq;

	rn = dt_resync_encode(&key, "node-7", 1234, NOW, rgood, sizeof(rgood));
	for (int iter = 0; iter < 100000; iter++) {
		int len = iter & 1 ? rn : n, k = 1 + (int)(rand_r(&seed) % 4);

		memcpy(buf, iter & 1 ? rgood : good, (size_t)len);
		for (int m = 0; m < k; m++) {
			int pos = (int)(rand_r(&seed) % (unsigned)len);

			switch (rand_r(&seed) % 4) {
			case 0:
				buf[pos] = (char)(rand_r(&seed) & 0xff);
				break;
			case 1:
				len = pos;
				break;
			case 2:
				if (len < (int)sizeof(buf) - 1) {
					memmove(buf + pos + 1, buf + pos, (size_t)(len - pos));
					buf[pos] = " 0aZ\x01"[rand_r(&seed) % 5];
					len++;
				}
				break;
			default:
				memmove(buf + pos, buf + pos + 1, (size_t)(len - pos - 1));
				len--;
				break;
			}
			if (!len)
				break;
		}
		if (iter & 1) {
			if (dt_resync_verify(&key, buf, (size_t)len, NOW, node, &seq) == DT_BEACON_OK &&
			    (len != rn || memcmp(buf, rgood, (size_t)rn)))
				fail_msg("a mutated resync verified (iteration %d)", iter);
		} else if (dt_beacon_verify(&key, buf, (size_t)len, NOW, &out) == DT_BEACON_OK &&
			   (len != n || memcmp(buf, good, (size_t)n))) {
			fail_msg("a mutated beacon verified (iteration %d)", iter);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_resync),
		cmocka_unit_test(test_sched_no_nodes_yet),
		cmocka_unit_test(test_sched_accepts_and_refuses),
		cmocka_unit_test(test_policy),
		cmocka_unit_test(test_mutations),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
