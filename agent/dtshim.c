/*
 * dtshim.c - the small helper the agent execs for every task.
 *
 *   dtshim --supervise ID --home DIR      one task's supervisor (agent/supervise.c)
 *   dtshim rank-log DIR -- PROG ARGS      one MPI rank's output to DIR/<rank>.log
 *
 * Both used to be modes of dtagent, which then linked libcurl, libmicrohttpd
 * and their TLS stacks (35 shared libraries; 15 without libcurl): every exec
 * of it cost ~9 ms of CPU in the dynamic linker, once per task and once per
 * MPI rank.  dtshim
 * links only what these two modes use (libc and jansson), so an exec costs
 * about what /bin/true does.  dtagent keeps both modes for agents whose bin
 * directory has no dtshim (supervisor_exe() falls back to dtagent itself).
 */
#include "dthome.h"
#include "sanitize.h"
#include "ranklog.h"
#include "supervise.h"
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage_error(void)
{
	fprintf(stderr, "usage: dtshim --supervise ID --home DIR\n"
		"       dtshim rank-log DIR -- PROG [ARGS...]\n"
		"(internal helper of dtagent; see docs/agents.md)\n");
	return DT_EXIT_USAGE;
}

DT_LSAN_DEFAULTS("")

int main(int argc, const char **argv)
{
	dt_set_progname("dtshim");
	if (argc >= 2 && !strcmp(argv[1], "rank-log"))
		return ranklog_main(argc - 1, argv + 1);
	if (argc == 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) {
		printf("dtshim %s\n", DT_VERSION);
		return 0;
	}
	if (argc == 5 && !strcmp(argv[1], "--supervise") && !strcmp(argv[3], "--home")) {
		setenv("DTCTL_HOME", argv[4], 1);
		return supervise_main(argv[4], argv[2]);
	}
	return usage_error();
}
