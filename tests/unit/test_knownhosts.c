/*
 * test_knownhosts.c - unit tests for lib/knownhosts.c: parsing (comments,
 * markers, bad lines kept verbatim), name matching (globs, negation,
 * "[host]:port", hashed |1| entries), check results (match, mismatch,
 * other key type, revoked), add/forget/save round trips and SHA256
 * fingerprints against ssh-keygen -l.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "knownhosts.h"

#define ED "AAAAC3NzaC1lZDI1NTE5AAAAIKK9CQaQzynQzWYowBK35Ba6tsMOx0qLPtCA85tGC8rw"
#define ED_FP "SHA256:WRkAu9h4+LtVhdWnUG/PA0nvQ72BdpnfV1aZC73dsIo"   /* ssh-keygen -lf */
#define EC "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBJA2IE/PcnBUiA7qc0b/dmGLlN3FTEc1UhrRKAo0mMriQXjM/c6qIbLG1X0tYt+gPfa4L2WQO+ktgbHnxDH4SRY="
/* another ed25519 key: same type, different blob */
#define ED2 "AAAAC3NzaC1lZDI1NTE5AAAAIBTg0YI55bsIBXqsNRaC4nV+TGdXfIWjXozj3undAbZ4"
/* HMAC-SHA1 with salt 00..13, computed with Python's hmac module */
#define HASH_DTNODE1 "|1|AAECAwQFBgcICQoLDA0ODxAREhM=|HBhJJixdnavuf3dtxERVFAffh08="
#define HASH_PORT "|1|AAECAwQFBgcICQoLDA0ODxAREhM=|hW7hge8XWLBv0cG0pl8cz3E+/cQ="

static void blob_of(struct strbuf *sb, const char *b64)
{
	assert_int_equal(base64_decode(sb, b64, strlen(b64)), 0);
}

static void test_fingerprint(void **state)
{
	struct strbuf blob = STRBUF_INIT, fp = STRBUF_INIT, type = STRBUF_INIT;

	blob_of(&blob, ED);
	ssh_fingerprint(&fp, (unsigned char *)blob.buf, blob.len);
	assert_string_equal(fp.buf, ED_FP);
	assert_int_equal(ssh_blob_type(&type, (unsigned char *)blob.buf, blob.len), 0);
	assert_string_equal(type.buf, "ssh-ed25519");
	assert_int_equal(ssh_blob_type(&type, (const unsigned char *)"\0\0\0", 3), -1);
	strbuf_release(&blob);
	strbuf_release(&fp);
	strbuf_release(&type);
}

static void test_names(void **state)
{
	struct strbuf sb = STRBUF_INIT;

	known_hosts_name(&sb, "dtnode1", 22);
	assert_string_equal(sb.buf, "dtnode1");
	strbuf_reset(&sb);
	known_hosts_name(&sb, "10.0.0.5", 2222);
	assert_string_equal(sb.buf, "[10.0.0.5]:2222");
	strbuf_release(&sb);

	assert_true(known_hosts_match_name("dtnode1,10.88.0.11", "10.88.0.11"));
	assert_true(known_hosts_match_name("dtnode1,10.88.0.11", "DTNODE1"));
	assert_false(known_hosts_match_name("dtnode1", "dtnode10"));
	assert_true(known_hosts_match_name("dtnode*", "dtnode10"));
	assert_true(known_hosts_match_name("dtnode?", "dtnode5"));
	assert_false(known_hosts_match_name("dtnode?", "dtnode55"));
	assert_false(known_hosts_match_name("*.lab,!bad.lab", "bad.lab"));
	assert_true(known_hosts_match_name("*.lab,!bad.lab", "good.lab"));
	assert_false(known_hosts_match_name("!bad.lab", "good.lab"));   /* only negative */
	/* brackets are literal, not a character class */
	assert_true(known_hosts_match_name("[10.0.0.5]:2222", "[10.0.0.5]:2222"));
	assert_false(known_hosts_match_name("[10.0.0.5]:2222", "10.0.0.5"));
	assert_false(known_hosts_match_name("10.0.0.5", "[10.0.0.5]:2222"));
	/* hashed */
	assert_true(known_hosts_match_name(HASH_DTNODE1, "dtnode1"));
	assert_false(known_hosts_match_name(HASH_DTNODE1, "dtnode2"));
	assert_true(known_hosts_match_name(HASH_PORT, "[10.0.0.5]:2222"));
	assert_false(known_hosts_match_name(HASH_PORT, "10.0.0.5"));
	assert_false(known_hosts_match_name("|1|garbage", "dtnode1"));
	assert_false(known_hosts_match_name("|1|!!!|???", "dtnode1"));
}

static const char FILE_TEXT[] =
	"# a comment\n"
	"\n"
	"dtnode1,10.88.0.11 ssh-ed25519 " ED " root@x\n"
	HASH_PORT " ecdsa-sha2-nistp256 " EC "\n"
	"@revoked * ssh-ed25519 " ED2 "\n"
	"broken line\n"
	"dtnode3 ssh-ed25519 not-base64!\n"
	"@cert-authority *.lab ssh-ed25519 " ED "\n"
	"dtnode2 ssh-ed25519 " ED "\r\n";

static void test_parse_check(void **state)
{
	struct known_hosts kh = KNOWN_HOSTS_INIT;
	struct strbuf ed = STRBUF_INIT, ec = STRBUF_INIT, ed2 = STRBUF_INIT, types = STRBUF_INIT;
	const struct known_host *found;

	known_hosts_parse(&kh, FILE_TEXT, strlen(FILE_TEXT));
	assert_int_equal(kh.nr, 9);
	assert_null(kh.items[0].hosts);     /* comment kept as a line */
	assert_null(kh.items[5].hosts);     /* broken line kept */
	assert_null(kh.items[6].hosts);     /* bad base64 kept */
	assert_string_equal(kh.items[4].marker, "@revoked");
	assert_string_equal(kh.items[8].line, "dtnode2 ssh-ed25519 " ED);

	blob_of(&ed, ED);
	blob_of(&ec, EC);
	blob_of(&ed2, ED2);
#define CHECK(name, b) known_hosts_check(&kh, name, (unsigned char *)(b).buf, (b).len, &found)
	assert_int_equal(CHECK("dtnode1", ed), KH_MATCH);
	assert_int_equal(CHECK("10.88.0.11", ed), KH_MATCH);
	assert_int_equal(CHECK("dtnode2", ed), KH_MATCH);
	assert_int_equal(CHECK("dtnode9", ed), KH_NOT_FOUND);
	/* hashed entry with a port */
	assert_int_equal(CHECK("[10.0.0.5]:2222", ec), KH_MATCH);
	assert_int_equal(CHECK("10.0.0.5", ec), KH_NOT_FOUND);
	/* a different key of the same type: changed */
	assert_int_equal(CHECK("[10.0.0.5]:2222", ed), KH_MISMATCH);
	assert_string_equal(found->keytype, "ecdsa-sha2-nistp256");
	assert_int_equal(CHECK("dtnode1", ec), KH_MISMATCH);
	assert_string_equal(found->keytype, "ssh-ed25519");
	/* revoked wins everywhere, even for unknown hosts */
	assert_int_equal(CHECK("dtnode1", ed2), KH_REVOKED);
	assert_int_equal(CHECK("whatever", ed2), KH_REVOKED);
	/* @cert-authority lines are not host keys */
	assert_int_equal(CHECK("x.lab", ed), KH_NOT_FOUND);

	known_hosts_types(&kh, "dtnode1", &types);
	assert_string_equal(types.buf, "ssh-ed25519");
	strbuf_reset(&types);
	known_hosts_types(&kh, "[10.0.0.5]:2222", &types);
	assert_string_equal(types.buf, "ecdsa-sha2-nistp256");

	/* forget removes only entries of that name and keeps the rest verbatim */
	assert_int_equal(known_hosts_forget(&kh, "dtnode2"), 1);
	assert_int_equal(CHECK("dtnode2", ed), KH_NOT_FOUND);
	assert_int_equal(CHECK("dtnode1", ed), KH_MATCH);
	assert_int_equal(kh.nr, 8);
	known_hosts_add(&kh, "dtnode2", (unsigned char *)ec.buf, ec.len);
	assert_int_equal(CHECK("dtnode2", ec), KH_MATCH);
	assert_string_equal(kh.items[kh.nr - 1].line, "dtnode2 ecdsa-sha2-nistp256 " EC);
#undef CHECK
	known_hosts_release(&kh);
	strbuf_release(&ed);
	strbuf_release(&ec);
	strbuf_release(&ed2);
	strbuf_release(&types);
}

static void test_save_load(void **state)
{
	char dir[] = "/tmp/test_knownhosts.XXXXXX";
	struct known_hosts kh = KNOWN_HOSTS_INIT, back = KNOWN_HOSTS_INIT;
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT, ed = STRBUF_INIT;
	struct stat st;

	assert_non_null(mkdtemp(dir));
	strbuf_addf(&path, "%s/known_hosts", dir);
	assert_int_equal(known_hosts_load(&kh, path.buf), 0);   /* missing = empty */
	assert_int_equal(kh.nr, 0);
	known_hosts_parse(&kh, FILE_TEXT, strlen(FILE_TEXT));
	blob_of(&ed, ED);
	known_hosts_add(&kh, "[dtnode7]:2200", (unsigned char *)ed.buf, ed.len);
	assert_int_equal(known_hosts_save(&kh, path.buf), 0);
	assert_int_equal(stat(path.buf, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_true(strbuf_read_file(&text, path.buf, 0) > 0);
	assert_non_null(strstr(text.buf, "# a comment\n\n"));
	assert_non_null(strstr(text.buf, "broken line\n"));
	assert_non_null(strstr(text.buf, "[dtnode7]:2200 ssh-ed25519 " ED "\n"));
	assert_int_equal(known_hosts_load(&back, path.buf), 0);
	assert_int_equal(back.nr, kh.nr);
	assert_int_equal(known_hosts_check(&back, "[dtnode7]:2200", (unsigned char *)ed.buf, ed.len,
					   NULL), KH_MATCH);
	unlink(path.buf);
	rmdir(dir);
	known_hosts_release(&kh);
	known_hosts_release(&back);
	strbuf_release(&path);
	strbuf_release(&text);
	strbuf_release(&ed);
}

static void test_base64(void **state)
{
	struct strbuf sb = STRBUF_INIT, d = STRBUF_INIT;

	base64_encode(&sb, (const unsigned char *)"hello", 5);
	assert_string_equal(sb.buf, "aGVsbG8=");
	assert_int_equal(base64_decode(&d, sb.buf, sb.len), 0);
	assert_int_equal(d.len, 5);
	assert_memory_equal(d.buf, "hello", 5);
	strbuf_reset(&d);
	assert_int_equal(base64_decode(&d, "abc", 3), -1);
	strbuf_release(&sb);
	strbuf_release(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fingerprint),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_parse_check),
		cmocka_unit_test(test_save_load),
		cmocka_unit_test(test_base64),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
