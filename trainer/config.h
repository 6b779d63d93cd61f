/*
 * config.h - dttrain's settings: the flag table, --config FILE.yaml, checks.
 *
 * Every setting is a command-line flag (see train_options()); a YAML config
 * file is a flat map from the same flag names (or with '_' for '-') to a
 * scalar or a list of scalars (lists are joined with ','), turned into
 * "--name=value" arguments that go BEFORE the real command line, so flags
 * given on the command line win.  Unknown keys are errors that name
 * file:line:col.
 *
 * Order: train_config_init(), build the table with train_options(), parse
 * (dttrain.c), then train_config_check() to resolve names into enums.
 */
#ifndef DT_TRAINER_CONFIG_H
#define DT_TRAINER_CONFIG_H

#include "parse-options.h"
#include "strbuf.h"
#include "strvec.h"
#include "trainer/kernels.h"
#include "trainer/model.h"

enum optim_kind { OPTIM_SGD, OPTIM_ADAMW };
enum precision { PREC_FP32, PREC_BF16, PREC_FP16 };
enum backend { BACKEND_AUTO, BACKEND_NCCL, BACKEND_MPI };
enum device { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA };
enum schedule { SCHED_COSINE, SCHED_CONSTANT };
enum sync_kind { SYNC_SYNC, SYNC_ASYNC };
enum pipe_sched { PIPE_GPIPE, PIPE_1F1B };

#define TRAIN_MAX_OPTIONS 80

struct train_config {
	/* as given (strings point into argv or the config file's args) */
	const char *config;
	const char *model, *hidden, *activation, *data;
	int layers, heads, dim, context, vocab;        /* gpt */
	int train_size, val_size, input_dim, classes, teacher_hidden;
	double val_fraction;
	int epochs, steps, batch, accum;
	double lr, min_lr, momentum, beta1, beta2, eps, weight_decay, clip;
	int warmup;
	const char *optimizer, *schedule;
	int seed;
	const char *metrics;
	int log_every, eval_every;
	const char *checkpoint_dir, *resume;
	int checkpoint_every, keep_checkpoints;
	const char *precision, *backend, *device;
	int threads;
	double loss_scale;
	int nccl_timeout;
	const char *save_weights;
	int quiet;
	const char *sync;             /* sync (default) or async: local SGD with periodic averaging */
	int sync_every;               /* async: local steps between averages (8) */
	int sync_overlap;             /* async: average in the background, applied a round late */
	const char *slow_rank;        /* test/benchmark: "R:MS" sleeps MS ms per step on rank R */
	const char *hang_rank;        /* test/benchmark: "R:STEP[:PHASE]" stops rank R (progress.h) */
	int pipeline, micro_batches;  /* pipeline stages (1 = none); micro-batches per step */
	const char *pipeline_schedule;
	/* dttrain --fabric: the fabric test instead of training (trainer/fabric.h) */
	const char *fabric;           /* NULL, "full" or "quick" */
	int fabric_bytes, fabric_iters, fabric_timeout_ms;
	const char *fabric_out;

	/* resolved by train_config_check() */
	struct model_spec spec;       /* input_dim/classes/max_batch filled once data is loaded */
	enum optim_kind optim;
	enum precision prec;
	enum backend backend_kind;
	enum device device_kind;
	enum schedule sched;
	enum sync_kind sync_kind;
	enum pipe_sched pipe_sched;
	int slow_rank_id, slow_ms;    /* -1, 0 without --slow-rank */
};

void train_config_init(struct train_config *c);
/* Fill `opts` (TRAIN_MAX_OPTIONS entries) with the flag table bound to c. */
void train_options(struct train_config *c, struct option *opts);
/* Resolve and check; 0, or -1 with ONE message in err. */
int train_config_check(struct train_config *c, struct strbuf *err);

/*
 * Read a YAML config file into "--name=value" arguments appended to args
 * (booleans become "--name" / "--no-name").  Keys are checked against opts.
 * Returns 0, or -1 with "path:line:col: message" in err.
 */
int train_config_yaml(const char *path, const struct option *opts, struct strvec *args,
		      struct strbuf *err);

/* Parse "1024,1024" into widths; returns the count or -1. */
int parse_int_list(const char *s, int *out, int max);

#endif
