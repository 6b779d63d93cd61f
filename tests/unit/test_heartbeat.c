/*
 * test_heartbeat.c - dtsched's fast heartbeat reader (scheduler/sched.c,
 * heartbeat_parse_fast): the bodies it takes, the ones it must leave to
 * jansson, and a differential check against jansson on many mutated bodies:
 * whenever the fast reader accepts a body, jansson must accept it too and
 * give the same fields.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "scheduler/sched-int.h"
#include "strbuf.h"

#define IDLE "{\"node\":\"sim0001\",\"port\":7071,\"agent_pid\":1234,\"version\":\"0.1.0\"," \
	"\"inventory_hash\":\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"," \
	"\"tasks\":[],\"seq\":17}"

/* fast reader on a private copy (it writes into the buffer) */
static int fast(const char *body, size_t len, struct heartbeat *hb, char **copy)
{
	*copy = malloc(len + 1);
	assert_non_null(*copy);
	memcpy(*copy, body, len);
	(*copy)[len] = '\0';
	return heartbeat_parse_fast(*copy, len, hb);
}

static int same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

/* the fast fields equal jansson's; 0 when they do not (or jansson refuses) */
static int agrees_with_jansson(const char *body, size_t len, const struct heartbeat *f)
{
	json_t *j = json_parse(body, len, NULL);
	struct heartbeat h;
	int ok;

	if (!j || !json_is_object(j)) {
		json_decref(j);
		return 0;
	}
	heartbeat_from_json(j, &h);
	ok = same_str(f->node, h.node) && same_str(f->address, h.address) &&
		same_str(f->version, h.version) && same_str(f->inventory_hash, h.inventory_hash) &&
		same_str(f->agent_started_at, h.agent_started_at) &&
		same_str(f->bin_dir, h.bin_dir) && same_str(f->home, h.home) &&
		same_str(f->ssh_config, h.ssh_config) && f->port == h.port &&
		same_str(f->tasks_digest, h.tasks_digest) && f->seq == h.seq &&
		f->full == h.full && f->has_tasks == h.has_tasks && !h.inventory &&
		(!h.usage || json_is_null(h.usage)) &&
		(!h.tasks || (json_is_array(h.tasks) && !json_array_size(h.tasks)));
	json_decref(j);
	return ok;
}

static void test_idle_heartbeat(void **state)
{
	struct heartbeat hb;
	char *copy;

	assert_int_equal(fast(IDLE, strlen(IDLE), &hb, &copy), 0);
	assert_string_equal(hb.node, "sim0001");
	assert_int_equal(hb.port, 7071);
	assert_string_equal(hb.version, "0.1.0");
	assert_int_equal(strlen(hb.inventory_hash), 64);
	assert_null(hb.address);
	assert_null(hb.agent_started_at);
	assert_true(hb.has_tasks);
	assert_null(hb.tasks);
	assert_null(hb.inventory);
	assert_int_equal(hb.full, 0);
	assert_int_equal(hb.seq, 17);
	assert_true(agrees_with_jansson(IDLE, strlen(IDLE), &hb));
	free(copy);
}

/* a real dtagent's heartbeat while idle (no usage change), as sent */
#define AGENT "{\"node\":\"ag1\",\"port\":17874,\"agent_pid\":31849," \
	"\"agent_started_at\":\"2026-11-22T13:22:48.563239Z\",\"version\":\"0.1.0\"," \
	"\"tasks\":[],\"seq\":2,\"full\":false,\"bin_dir\":\"/work/main/build/dev-hb/bin\"," \
	"\"home\":\"/tmp/hbag-LRRt/ag\",\"inventory_hash\":" \
	"\"fe7b14a7189b304d0dbde7752e4386ff2361d3dbe0322a1a1f5a9439f6a73628\"}"

/* what real agents send, pretty-printed or not, with every optional field */
static void test_accepted(void **state)
{
	static const char *const ok[] = {
		AGENT,
		"{}",
		" { } \n",
		"{\"node\":\"n1\",\"port\":1,\"full\":true,\"tasks\":[ ]}",
		"{\n  \"node\": \"n1\",\n  \"port\": 7070,\n  \"address\": \"10.0.0.1\",\n"
		"  \"agent_started_at\": \"2026-11-22T10:00:00.123456Z\",\n"
		"  \"bin_dir\": \"/opt/dt/bin\", \"home\": \"/home/u/.dtctl\",\n"
		"  \"ssh_config\": \"/home/u/.dtctl/ssh_config\", \"full\": false,\n"
		"  \"extra\": null, \"neg\": -5, \"zero\": 0, \"minus_zero\": -0\n}\n",
		"{\"node\":\"\",\"port\":999999999999999999}",
	};
	struct heartbeat hb;
	char *copy;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		if (fast(ok[i], strlen(ok[i]), &hb, &copy) != 0)
			fail_msg("fast reader refused %s", ok[i]);
		if (!agrees_with_jansson(ok[i], strlen(ok[i]), &hb))
			fail_msg("fast reader and jansson differ on %s", ok[i]);
		free(copy);
	}
	assert_int_equal(fast(ok[4], strlen(ok[4]), &hb, &copy), 0);
	assert_string_equal(hb.address, "10.0.0.1");
	assert_string_equal(hb.ssh_config, "/home/u/.dtctl/ssh_config");
	assert_int_equal(hb.port, 7070);
	assert_false(hb.has_tasks);
	free(copy);
}

/*
 * Left to jansson: malformed JSON (jansson writes the 400's message), and
 * valid JSON outside the subset (tasks, an inventory, escapes, non-ASCII,
 * reals, big integers, a known key with another type, a key twice).
 */
static void test_refused(void **state)
{
	static const char *const bad[] = {
		"", " ", "[]", "null", "\"node\"", "{", "}", "{\"node\"}", "{\"node\":}",
		"{\"node\":\"n1\",}", "{,\"node\":\"n1\"}", "{\"node\":\"n1\"} x", "{\"node\":\"n1\"}{}",
		"{\"node\":\"n1\" \"port\":1}", "{\"node\":'n1'}", "{node:\"n1\"}",
		"{\"node\":\"n1", "{\"node\":\"n1\",\"port\":", "{\"port\":01}", "{\"port\":-}",
		"{\"port\":1.5}", "{\"port\":1e3}", "{\"port\":1E3}", "{\"port\":+1}",
		"{\"port\":1234567890123456789}", "{\"port\":\"7070\"}", "{\"port\":true}",
		"{\"node\":1}", "{\"node\":null}", "{\"full\":1}", "{\"full\":\"true\"}",
		"{\"flag\":tru}", "{\"flag\":nul}", "{\"flag\":False}",
		"{\"node\":\"a\\\"b\"}", "{\"node\":\"a\\u0041\"}", "{\"node\":\"caf\xc3\xa9\"}",
		"{\"node\":\"a\tb\"}", "{\"node\":\"a\x7f\"}",
		"{\"tasks\":[{\"id\":\"t1\"}]}", "{\"tasks\":[1]}", "{\"tasks\":{}}", "{\"tasks\":null}",
		"{\"inventory\":{}}", "{\"inventory\":null}", "{\"x\":{}}", "{\"x\":[1]}",
		"{\"usage\":{\"mem_available\":1}}",
		"{\"node\":\"a\",\"node\":\"b\"}", "{\"seq\":1,\"seq\":2}",
		"\xef\xbb\xbf{}",
	};
	struct heartbeat hb;
	char *copy;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (fast(bad[i], strlen(bad[i]), &hb, &copy) != -1)
			fail_msg("fast reader took %s", bad[i]);
		free(copy);
	}
	/* a NUL inside or after the object (the length says where the body ends) */
	assert_int_equal(fast("{\"node\":\"a\0b\"}", 14, &hb, &copy), -1);
	free(copy);
	assert_int_equal(fast("{}\0", 3, &hb, &copy), -1);
	free(copy);
	/* more keys than it keeps track of */
	{
		struct strbuf sb = STRBUF_INIT;

		strbuf_addch(&sb, '{');
		for (int i = 0; i < 40; i++)
			strbuf_addf(&sb, "%s\"k%d\":%d", i ? "," : "", i, i);
		strbuf_addch(&sb, '}');
		assert_int_equal(fast(sb.buf, sb.len, &hb, &copy), -1);
		free(copy);
		strbuf_release(&sb);
	}
}

/*
 * Mutate real heartbeats at random (xorshift, fixed seed): every body the
 * fast reader accepts must be one jansson accepts with the same fields.
 */
static void test_differential(void **state)
{
	static const char *const seeds[] = {
		AGENT,
		"{\"node\":\"n1\",\"port\":7070,\"address\":\"10.0.0.1\",\"full\":true,\"tasks\":[],"
		"\"agent_started_at\":\"2026-11-22T10:00:00Z\",\"home\":\"/h\",\"seq\":-3}",
		"{ \"node\" : \"n1\" , \"port\" : 1 , \"x\" : null , \"y\" : false }",
	};
	static const char alphabet[] = "{}[]\",:\\ \t\n0123456789-+.eEtrufalsn\x00\x80\x7f\x01xyz";
	unsigned long long x = 88172645463325252ULL;
	int accepted = 0, refused = 0;
	char buf[512];

	for (int iter = 0; iter < 30000; iter++) {
		const char *seed = seeds[iter % 3];
		size_t len = strlen(seed), muts;
		struct heartbeat hb;
		char *copy;

		memcpy(buf, seed, len);
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		muts = 1 + x % 3;
		for (size_t m = 0; m < muts; m++) {
			size_t pos, kind;

			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			pos = len ? (x >> 8) % len : 0;
			kind = x % 4;
			if (kind == 0 && len) {                     /* replace */
				buf[pos] = alphabet[(x >> 32) % (sizeof(alphabet) - 1)];
			} else if (kind == 1 && len) {              /* delete */
				memmove(buf + pos, buf + pos + 1, len - pos - 1);
				len--;
			} else if (kind == 2 && len + 1 < sizeof(buf)) {   /* insert */
				memmove(buf + pos + 1, buf + pos, len - pos);
				buf[pos] = alphabet[(x >> 32) % (sizeof(alphabet) - 1)];
				len++;
			} else if (len && len * 2 < sizeof(buf)) {  /* repeat a piece */
				size_t piece = 1 + (x >> 40) % 12;

				if (pos + piece > len)
					piece = len - pos;
				memmove(buf + pos + piece, buf + pos, len - pos);
				len += piece;
			}
		}
		if (fast(buf, len, &hb, &copy) == 0) {
			accepted++;
			if (!agrees_with_jansson(buf, len, &hb))
				fail_msg("fast reader took a body jansson reads otherwise: %.*s",
					 (int)len, buf);
		} else {
			refused++;
		}
		free(copy);
	}
	/* both ways were exercised */
	assert_true(accepted > 1000);
	assert_true(refused > 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idle_heartbeat),
		cmocka_unit_test(test_accepted),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_differential),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
