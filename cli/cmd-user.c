/*
 * cmd-user.c - `dtctl user add|list|remove`: users who sign their requests
 * with their own ed25519 key (docs/team.md, "Users elsewhere"), kept by
 * dtsched (GET/POST /v1/users, DELETE /v1/users/<name>).  Adding and removing
 * need the admin role.  Such a user then runs dtctl with $DTCTL_USER_KEY (the
 * private key file), $DTCTL_USER (their name, default the login name) and
 * $DTCTL_HEAD_KEY (dtsched's public key, which `user add` prints: its replies
 * must be signed with it).
 */
#include "builtin.h"
#include "head.h"
#include "json.h"
#include "parse-options.h"
#include "protocol.h"
#include "setup.h"
#include "term.h"
#include "usage.h"
#include "userkey.h"

#include <stdio.h>
#include <string.h>

static int user_add(const char *name, const char *keyfile, int admin, int json)
{
	struct strbuf key = STRBUF_INIT, err = STRBUF_INIT;
	unsigned char pub[DT_ED25519_LEN];
	json_t *req, *reply = NULL;
	int code;

	if (strbuf_read_file(&key, keyfile, 16 * 1024) < 0) {
		error_errno("cannot read the key '%s'", keyfile);
		strbuf_release(&key);
		return DT_EXIT_USAGE;
	}
	/* checked here too, to name the file (dtsched checks it again) */
	if (dt_userkey_parse_pub(key.buf, pub, &err) < 0) {
		error("%s: %s", keyfile, err.buf);
		strbuf_release(&key);
		strbuf_release(&err);
		return DT_EXIT_USAGE;
	}
	req = json_pack("{s:s,s:s,s:b}", "name", name, "key", key.buf, "admin", admin);
	code = head_api("POST", DT_PATH_USERS, req, &reply, NULL);
	if (!code && json) {
		json_doc_print(reply);
	} else if (!code) {
		printf("user %s added%s, key %s\n", term_str(name), admin ? " (admin)" : "",
		       term_str(json_get_str(json_object_get(reply, "user"), "fingerprint", "?")));
		/* what the user pins to check dtsched's replies (docs/team.md) */
		if (json_get_str(reply, "head_key", NULL))
			printf("dtsched's key (%s), for the user's DTCTL_HEAD_KEY:\n  %s\n",
			       term_str(json_get_str(reply, "head_key_fingerprint", "?")),
			       term_str(json_get_str(reply, "head_key", "")));
	}
	json_decref(req);
	json_decref(reply);
	strbuf_release(&key);
	strbuf_release(&err);
	return code;
}

static int user_list(int json)
{
	json_t *reply = NULL, *u;
	size_t i;
	int code = head_api("GET", DT_PATH_USERS, NULL, &reply, NULL);

	if (code)
		return json_decref(reply), code;
	json_object_del(reply, "protocol");
	if (json) {
		json_doc_print(reply);
	} else {
		printf("%-20s %-6s %s\n", "USER", "ADMIN", "KEY");
		json_array_foreach(json_object_get(reply, "users"), i, u)
			printf("%-20s %-6s %s\n", term_str(json_get_str(u, "name", "?")),
			       json_is_true(json_object_get(u, "admin")) ? "yes" : "no",
			       term_str(json_get_str(u, "fingerprint", "?")));
		if (!json_array_size(json_object_get(reply, "users")))
			printf("(no users with keys; 'dtctl user add NAME --key FILE.pub')\n");
	}
	json_decref(reply);
	return 0;
}

int cmd_user(int argc, const char **argv)
{
	static const char *const usage[] = {
		"dtctl user add <name> --key <file.pub> [--admin] [--json]",
		"dtctl user list [--json]",
		"dtctl user remove <name>",
		NULL };
	const char *key = NULL;
	int admin = 0, json = 0;
	struct option opts[] = {
		OPT_STRING(0, "key", &key, "file", "the user's ed25519 public key (add)"),
		OPT_BOOL(0, "admin", &admin, "give the user the admin role (add)"),
		OPT_BOOL(0, "json", &json, "print JSON"),
		OPT_END(),
	};
	json_t *reply = NULL;
	int code;

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	argv++;
	if (argc == 2 && !strcmp(argv[0], "add") && key)
		return user_add(argv[1], key, admin, json);
	if (argc == 1 && !strcmp(argv[0], "list") && !key && !admin)
		return user_list(json);
	if (argc == 2 && !strcmp(argv[0], "remove") && !key && !admin) {
		code = head_api_id("DELETE", DT_PATH_USER_PREFIX, argv[1], "", NULL, &reply, NULL);
		if (!code && json)
			json_doc_print(reply);
		else if (!code)
			printf("user %s removed: their key signs nothing any more\n", term_str(argv[1]));
		json_decref(reply);
		return code;
	}
	usage_with_options(usage, opts, 1);
	return DT_EXIT_USAGE;
}
