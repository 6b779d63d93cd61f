/*
 * dttrain.c - the built-in trainer (data parallel, local SGD, pipeline
 * stages: train.h): main().
 *
 * Parses flags (and --config FILE.yaml, whose keys are the same flags),
 * finds out how it was started (mpirun, torchrun-style env, or alone: see
 * comm.h), runs train_run() and turns its result into an exit code:
 * 0 done, 1 training failed, 2 usage or configuration error.  In a
 * multi-rank job a failure that not every rank saw takes the whole job down
 * (MPI_Abort / ncclCommAbort) so no peer waits in a collective for ever.
 */
#include "parse-options.h"
#include "sanitize.h"
#include "strvec.h"
#include "usage.h"
#include "trainer/comm.h"
#include "trainer/config.h"
#include "trainer/fabric.h"
#include "trainer/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

DT_LSAN_DEFAULTS("")
#if defined(DT_HAVE_MPI) && (defined(__SANITIZE_ADDRESS__) || defined(DT_FUZZING))
/*
 * Sanitizer builds only: no leak check in a rank that mpirun started.  Open MPI,
 * PMIx and hwloc keep allocations until exit by design, and LeakSanitizer's
 * stop-the-world tracer itself sometimes crashes (SIGSEGV in the tracer) among
 * Open MPI's threads, failing the job.  ASan's memory error checks stay on, and
 * the same training code is leak-checked in the single-process runs.
 */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return getenv("OMPI_COMM_WORLD_SIZE") != NULL;
}
#endif

/* The value of --config in argv, if any (needed before the real parse). */
static const char *find_config(int argc, const char **argv)
{
	const char *v = NULL;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "--config") && i + 1 < argc)
			v = argv[++i];
		else
			skip_prefix(argv[i], "--config=", &v);
	}
	return v;
}

int main(int argc, char **argv)
{
	static const char *const usage[] = {
		"dttrain [options]",
		"mpirun -np N dttrain [options]",
		"mpirun -np N dttrain --sync async [--sync-every K] [options]",
		"mpirun -np P*D dttrain --pipeline P [--micro-batches M] [options]",
		"RANK=.. WORLD_SIZE=.. LOCAL_RANK=.. MASTER_ADDR=.. MASTER_PORT=.. dttrain [options]",
		"mpirun -np NODES --map-by node dttrain --fabric full|quick [--fabric-out FILE]",
		NULL,
	};
	struct train_config cfg;
	struct option opts[TRAIN_MAX_OPTIONS + 1];
	struct strvec args = STRVEC_INIT;
	const char **pv;
	struct strbuf err = STRBUF_INIT;
	struct train_result res;
	struct comm comm;
	const char *config;
	int version = 0, code, nopts = 0;

	dt_set_progname("dttrain");
	train_config_init(&cfg);
	train_options(&cfg, opts);
	while (opts[nopts].type != OPTION_END)
		nopts++;
	opts[nopts] = (struct option)OPT_BOOL('V', "version", &version, "print the version and exit");
	opts[nopts + 1] = (struct option)OPT_END();

	/* config-file flags first, so the command line overrides them */
	strvec_push(&args, argv[0]);
	config = find_config(argc, (const char **)argv);
	if (config && train_config_yaml(config, opts, &args, &err))
		die_code(DT_EXIT_USAGE, "%s", err.buf);
	for (int i = 1; i < argc; i++)
		strvec_push(&args, argv[i]);
	/* parse_options() compacts the array it is given: hand it a copy of the
	 * pointers, so args still owns (and frees) every string */
	pv = xcalloc(args.nr + 1, sizeof(*pv));
	memcpy(pv, args.v, args.nr * sizeof(*pv));
	if (parse_options((int)args.nr - 1, pv + 1, opts, usage, 0) > 0)
		die_code(DT_EXIT_USAGE, "unexpected argument '%s' (see 'dttrain --help')", pv[1]);
	free(pv);
	if (version) {
		printf("dttrain %s\n", DT_VERSION);
		strvec_clear(&args);
		return 0;
	}
	if (train_config_check(&cfg, &err))
		die_code(DT_EXIT_USAGE, "%s", err.buf);

	if (comm_startup(&comm, &argc, &argv, &err))
		die_code(DT_EXIT_USAGE, "%s", err.buf);
	if (cfg.fabric) {
		/* the fabric test (trainer/fabric.h): it ends the job itself on failure */
		code = fabric_run(&cfg, &comm, &err);
		if (code == 2)
			error("%s", err.buf);
		comm_finish(&comm);
		strvec_clear(&args);
		strbuf_release(&err);
		return code;
	}
	memset(&res, 0, sizeof(res));
	code = train_run(&cfg, &comm, &res, &err);
	if (code) {
		if (comm.world == 1)
			error("%s", err.buf);
		else if (comm.rank == 0 || !res.agreed)
			error("rank %d on %s: %s", comm.rank, comm.host, err.buf);
		if (comm.world > 1 && !res.agreed)
			comm_abort(&comm, code);
	}
	comm_finish(&comm);
	strvec_clear(&args);
	strbuf_release(&err);
	return code;
}
