/*
 * cmd-validate.c - `dtctl validate FILE...` (filled in by the config loader work).
 */
#include "builtin.h"
#include "parse-options.h"
#include "usage.h"

int cmd_validate(int argc, const char **argv)
{
	static const char *const usage[] = { "dtctl validate [--json] <file>...", NULL };
	int json = 0;
	struct option opts[] = {
		OPT_BOOL(0, "json", &json, "print the resolved configuration as JSON"),
		OPT_END(),
	};

	argc = parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (argc < 1) {
		usage_with_options(usage, opts, 1);
		return DT_EXIT_USAGE;
	}
	return error("validate: not built yet"), DT_EXIT_FAIL;
}
