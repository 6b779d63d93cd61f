/*
 * dtsched.c - the head service: nodes, job queue, placement, sweeps.
 */
#include "parse-options.h"
#include "usage.h"

#include <stdio.h>

int main(int argc, const char **argv)
{
	static const char *const usage[] = { "dtsched [options]", NULL };
	int version = 0;
	struct option opts[] = {
		OPT_BOOL('V', "version", &version, "print the version and exit"),
		OPT_END(),
	};

	dt_set_progname("dtsched");
	parse_options(argc - 1, argv + 1, opts, usage, 0);
	if (version) {
		printf("dtsched %s\n", DT_VERSION);
		return 0;
	}
	return error("nothing to do yet; see 'dtsched --help'"), DT_EXIT_USAGE;
}
