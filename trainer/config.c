/*
 * config.c - dttrain's flag table, YAML config files and option checks.
 */
#include "trainer/config.h"
#include "trainer/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

void train_config_init(struct train_config *c)
{
	memset(c, 0, sizeof(*c));
	c->model = "mlp";
	c->hidden = "1024,1024";
	c->activation = "relu";
	c->layers = 4;
	c->heads = 4;
	c->dim = 128;
	c->context = 64;
	c->vocab = 256;
	c->data = "synthetic";
	c->train_size = 16384;
	c->val_size = 4096;
	c->input_dim = 784;
	c->classes = 10;
	c->teacher_hidden = 64;
	c->val_fraction = 0.1;
	c->epochs = 1;
	c->batch = 256;
	c->accum = 1;
	c->lr = 0.01;
	c->momentum = 0.9;
	c->beta1 = 0.9;
	c->beta2 = 0.999;
	c->eps = 1e-8;
	c->optimizer = "sgd";
	c->schedule = "cosine";
	c->seed = 1;
	c->log_every = 10;
	c->keep_checkpoints = 2;
	c->precision = "fp32";
	c->backend = "auto";
	c->device = "auto";
	c->loss_scale = 65536.0;
	c->nccl_timeout = 300;
	c->sync = "sync";
	c->sync_every = 8;
	c->pipeline = 1;
	c->micro_batches = 4;
	c->pipeline_schedule = "gpipe";
	c->fabric_bytes = 1 << 20;
	c->fabric_iters = 20;
	c->fabric_timeout_ms = 3000;
}

void train_options(struct train_config *c, struct option *opts)
{
	const struct option table[] = {
		OPT_STRING(0, "config", &c->config, "file.yaml",
			   "read flags from a YAML map (command-line flags win)"),
		OPT_GROUP("model"),
		OPT_STRING(0, "model", &c->model, "name", "model to train: mlp or gpt"),
		OPT_STRING(0, "hidden", &c->hidden, "w1,w2,..", "mlp: hidden layer widths (1024,1024)"),
		OPT_STRING(0, "activation", &c->activation, "fn", "mlp: relu or gelu"),
		OPT_INT(0, "layers", &c->layers, "gpt: transformer blocks (4)"),
		OPT_INT(0, "heads", &c->heads, "gpt: attention heads, dividing --dim (4)"),
		OPT_INT(0, "dim", &c->dim, "gpt: embedding width (128)"),
		OPT_INT(0, "context", &c->context, "gpt: sequence length in tokens (64)"),
		OPT_INT(0, "vocab", &c->vocab, "gpt: vocabulary; text: bytes below it (256)"),
		OPT_GROUP("data"),
		OPT_STRING(0, "data", &c->data, "src",
			   "synthetic, idx:DIR, idx:IMAGES,LABELS, csv:PATH or text:PATH (gpt)"),
		OPT_INT(0, "train-size", &c->train_size, "synthetic: training rows (16384)"),
		OPT_INT(0, "val-size", &c->val_size, "synthetic: validation rows; text: at most (4096)"),
		OPT_INT(0, "input-dim", &c->input_dim, "synthetic: features per row (784)"),
		OPT_INT(0, "classes", &c->classes, "synthetic: number of classes (10)"),
		OPT_INT(0, "teacher-hidden", &c->teacher_hidden, "synthetic: teacher network width (64)"),
		OPT_DOUBLE(0, "val-fraction", &c->val_fraction,
			   "idx/csv without a validation file: rows held out; text: tail (0.1)"),
		OPT_GROUP("training"),
		OPT_INT(0, "epochs", &c->epochs, "passes over the training set (1)"),
		OPT_INT(0, "steps", &c->steps, "optimizer steps in all; overrides --epochs"),
		OPT_INT(0, "batch", &c->batch, "GLOBAL batch per step, split across ranks (256)"),
		OPT_INT(0, "accum", &c->accum, "micro-batches per step on each rank (1)"),
		OPT_STRING(0, "optimizer", &c->optimizer, "name", "sgd (with momentum) or adamw"),
		OPT_DOUBLE(0, "lr", &c->lr, "peak learning rate (0.01)"),
		OPT_STRING(0, "schedule", &c->schedule, "name", "cosine (after warmup) or constant"),
		OPT_INT(0, "warmup", &c->warmup, "linear warmup steps (0)"),
		OPT_DOUBLE(0, "min-lr", &c->min_lr, "cosine floor, as a fraction of --lr (0)"),
		OPT_DOUBLE(0, "momentum", &c->momentum, "sgd momentum (0.9)"),
		OPT_DOUBLE(0, "beta1", &c->beta1, "adamw beta1 (0.9)"),
		OPT_DOUBLE(0, "beta2", &c->beta2, "adamw beta2 (0.999)"),
		OPT_DOUBLE(0, "eps", &c->eps, "adamw epsilon (1e-8)"),
		OPT_DOUBLE(0, "weight-decay", &c->weight_decay, "weight decay on weights, not biases (0)"),
		OPT_DOUBLE(0, "clip", &c->clip, "clip the global gradient norm to this (0 = off)"),
		OPT_INT(0, "seed", &c->seed, "seed for data, init and shuffling (1)"),
		OPT_GROUP("parallelism"),
		OPT_STRING(0, "sync", &c->sync, "mode",
			   "sync (all-reduce gradients every step) or async (local SGD, averaged)"),
		OPT_INT(0, "sync-every", &c->sync_every, "async: local steps between averages (8)"),
		OPT_BOOL(0, "sync-overlap", &c->sync_overlap,
			 "async: average parameters in the background, applied one round late"),
		OPT_INT(0, "pipeline", &c->pipeline, "pipeline stages P; ranks = P x replicas (1)"),
		OPT_INT(0, "micro-batches", &c->micro_batches, "pipeline: micro-batches per step (4)"),
		OPT_STRING(0, "pipeline-schedule", &c->pipeline_schedule, "s", "gpipe or 1f1b"),
		OPT_STRING(0, "slow-rank", &c->slow_rank, "R:MS",
			   "test/benchmark: rank R sleeps MS ms every step"),
		OPT_STRING(0, "hang-rank", &c->hang_rank, "R:STEP[:PHASE]",
			   "test/benchmark: rank R stops for good in PHASE (all-reduce) of step STEP"),
		OPT_GROUP("output"),
		OPT_STRING(0, "metrics", &c->metrics, "file",
			   "JSON lines from rank 0 (default $DT_METRICS_FILE)"),
		OPT_INT(0, "log-every", &c->log_every, "steps between training log lines (10)"),
		OPT_INT(0, "eval-every", &c->eval_every, "steps between validations (0 = each epoch)"),
		OPT_STRING(0, "checkpoint-dir", &c->checkpoint_dir, "dir", "write checkpoints here"),
		OPT_INT(0, "checkpoint-every", &c->checkpoint_every, "steps between checkpoints (0 = end only)"),
		OPT_INT(0, "keep-checkpoints", &c->keep_checkpoints, "checkpoints kept (2)"),
		OPT_STRING(0, "resume", &c->resume, "path",
			   "continue from a checkpoint file or dir (default $DT_RESUME)"),
		OPT_STRING(0, "save-weights", &c->save_weights, "file",
			   "write the final parameters as raw little-endian float32"),
		OPT_BOOL('q', "quiet", &c->quiet, "no per-step lines on stdout"),
		OPT_GROUP("compute"),
		OPT_STRING(0, "device", &c->device, "dev", "auto, cpu or cuda"),
		OPT_STRING(0, "precision", &c->precision, "p", "fp32, bf16 or fp16 (GPU; fp32 master weights)"),
		OPT_DOUBLE(0, "loss-scale", &c->loss_scale, "fp16: initial dynamic loss scale (65536)"),
		OPT_STRING(0, "backend", &c->backend, "b", "auto, nccl (GPU) or mpi"),
		OPT_INT(0, "threads", &c->threads, "CPU threads per rank (0 = cores / local ranks)"),
		OPT_INT(0, "nccl-timeout", &c->nccl_timeout, "seconds before a stuck collective aborts (300)"),
		OPT_STRING(0, "fabric", &c->fabric, "mode", "no training: the fabric test, full (all-reduce, "
			   "pairwise latency and bandwidth) or quick (connectivity: latency only)"),
		OPT_INT(0, "fabric-bytes", &c->fabric_bytes, "fabric: bytes per bandwidth message and "
			"all-reduce (1048576)"),
		OPT_INT(0, "fabric-iters", &c->fabric_iters, "fabric: messages per direction and pair; "
			"the best counts (20)"),
		OPT_INT(0, "fabric-timeout", &c->fabric_timeout_ms, "fabric: ms one transfer may take "
			"before its link counts as failed (3000)"),
		OPT_STRING(0, "fabric-out", &c->fabric_out, "file", "fabric: also write the JSON here"),
		OPT_END(),
	};

	if (ARRAY_SIZE(table) > TRAIN_MAX_OPTIONS)
		abort();   /* programming error: raise TRAIN_MAX_OPTIONS */
	memcpy(opts, table, sizeof(table));
}

int parse_int_list(const char *s, int *out, int max)
{
	int nr = 0;

	while (*s == ' ')
		s++;
	if (!*s)
		return 0;
	for (;;) {
		char *end;
		long v;

		errno = 0;
		v = strtol(s, &end, 10);
		if (end == s || errno || v <= 0 || v > 1 << 20 || nr == max)
			return -1;
		out[nr++] = (int)v;
		while (*end == ' ')
			end++;
		if (!*end)
			return nr;
		if (*end != ',')
			return -1;
		s = end + 1;
	}
}

static int pick(const char *what, const char *value, const char *const *names, int *out,
		struct strbuf *err)
{
	struct strbuf all = STRBUF_INIT;

	for (int i = 0; names[i]; i++)
		if (!strcmp(value, names[i])) {
			*out = i;
			return 0;
		}
	for (int i = 0; names[i]; i++)
		strbuf_addf(&all, "%s%s", i ? ", " : "", names[i]);
	strbuf_addf(err, "unknown %s '%s' (expected %s)", what, value, all.buf);
	strbuf_release(&all);
	return -1;
}

/* --sync, --pipeline and --slow-rank, alone and together. */
static int parallel_check(struct train_config *c, struct strbuf *err)
{
	c->slow_rank_id = -1;
	c->slow_ms = 0;
	if (c->slow_rank && *c->slow_rank) {
		char *colon, *end = NULL;
		long rk, ms = -1;

		errno = 0;
		rk = strtol(c->slow_rank, &colon, 10);
		if (*colon == ':' && colon > c->slow_rank && colon[1])
			ms = strtol(colon + 1, &end, 10);
		if (errno || !end || *end || rk < 0 || rk > 1 << 20 || ms < 0 || ms > 3600000)
			return strbuf_addf(err, "option '--slow-rank' expects RANK:MS (like 1:50), "
					   "got '%s'", c->slow_rank), -1;
		c->slow_rank_id = (int)rk;
		c->slow_ms = (int)ms;
	}
	if (progress_parse_hang(c->hang_rank, err) < 0)
		return -1;
	if (c->sync_every < 1)
		return strbuf_addf(err, "option '--sync-every' must be at least 1, got %d",
				   c->sync_every), -1;
	if (c->sync_overlap && c->sync_kind != SYNC_ASYNC)
		return strbuf_addstr(err, "--sync-overlap needs --sync async"), -1;
	if (c->pipeline < 1 || c->pipeline > MODEL_MAX_LAYERS)
		return strbuf_addf(err, "option '--pipeline' must be between 1 and %d, got %d",
				   MODEL_MAX_LAYERS, c->pipeline), -1;
	if (c->micro_batches < 1)
		return strbuf_addf(err, "option '--micro-batches' must be at least 1, got %d",
				   c->micro_batches), -1;
	if (c->pipeline > 1 && c->sync_kind == SYNC_ASYNC)
		return strbuf_addf(err, "--sync async and --pipeline %d cannot be combined (the "
				   "stages of a replica step together)", c->pipeline), -1;
	if (c->pipeline > 1 && c->accum > 1)
		return strbuf_addf(err, "--pipeline splits each step into --micro-batches; "
				   "--accum must stay 1"), -1;
	if (c->pipeline > 1 && c->prec == PREC_FP16)
		return strbuf_addf(err, "--pipeline does not do fp16 loss scaling yet; use bf16 or "
				   "fp32"), -1;
	return 0;
}

int train_config_check(struct train_config *c, struct strbuf *err)
{
	static const char *const acts[] = { "none", "relu", "gelu", NULL };
	static const char *const optims[] = { "sgd", "adamw", NULL };
	static const char *const precs[] = { "fp32", "bf16", "fp16", NULL };
	static const char *const backends[] = { "auto", "nccl", "mpi", NULL };
	static const char *const devices[] = { "auto", "cpu", "cuda", NULL };
	static const char *const scheds[] = { "cosine", "constant", NULL };
	static const char *const syncs[] = { "sync", "async", NULL };
	static const char *const pscheds[] = { "gpipe", "1f1b", NULL };
	int v, n;

	memset(&c->spec, 0, sizeof(c->spec));
	c->spec.name = c->model;
	n = parse_int_list(c->hidden ? c->hidden : "", c->spec.hidden, MODEL_MAX_LAYERS - 1);
	if (n < 0) {
		strbuf_addf(err, "option '--hidden' expects positive widths separated by commas, got '%s'",
			    c->hidden);
		return -1;
	}
	c->spec.nr_hidden = n;
	c->spec.layers = c->layers;
	c->spec.heads = c->heads;
	c->spec.embd = c->dim;
	c->spec.context = c->context;
	if (!strcmp(c->model, "gpt") != !strncmp(c->data, "text:", 5))
		return strbuf_addf(err, "--model gpt trains on --data text:PATH, and text data needs "
				   "--model gpt (got --model %s --data %s)", c->model, c->data), -1;
	if (pick("activation", c->activation, acts, &v, err))
		return -1;
	c->spec.act = (enum act_kind)v;
	if (pick("optimizer", c->optimizer, optims, &v, err))
		return -1;
	c->optim = (enum optim_kind)v;
	if (pick("precision", c->precision, precs, &v, err))
		return -1;
	c->prec = (enum precision)v;
	if (pick("backend", c->backend, backends, &v, err))
		return -1;
	c->backend_kind = (enum backend)v;
	if (pick("device", c->device, devices, &v, err))
		return -1;
	c->device_kind = (enum device)v;
	if (pick("schedule", c->schedule, scheds, &v, err))
		return -1;
	c->sched = (enum schedule)v;
	if (pick("sync mode", c->sync, syncs, &v, err))
		return -1;
	c->sync_kind = (enum sync_kind)v;
	if (pick("pipeline schedule", c->pipeline_schedule, pscheds, &v, err))
		return -1;
	c->pipe_sched = (enum pipe_sched)v;
	if (parallel_check(c, err))
		return -1;
	if (c->batch <= 0)
		return strbuf_addf(err, "option '--batch' must be positive, got %d", c->batch), -1;
	if (c->accum <= 0 || c->accum > c->batch)
		return strbuf_addf(err, "option '--accum' must be between 1 and --batch, got %d", c->accum), -1;
	if (c->epochs <= 0 && c->steps <= 0)
		return strbuf_addf(err, "nothing to train: give --epochs or --steps > 0"), -1;
	if (c->steps < 0 || c->warmup < 0 || c->log_every < 0 || c->eval_every < 0 ||
	    c->checkpoint_every < 0 || c->threads < 0)
		return strbuf_addf(err, "step counts and --threads must not be negative"), -1;
	if (!(c->lr > 0))
		return strbuf_addf(err, "option '--lr' must be positive, got %g", c->lr), -1;
	if (c->momentum < 0 || c->momentum >= 1 || c->beta1 < 0 || c->beta1 >= 1 ||
	    c->beta2 < 0 || c->beta2 >= 1 || c->eps <= 0)
		return strbuf_addf(err, "momentum and betas must be in [0, 1), eps positive"), -1;
	if (c->weight_decay < 0 || c->clip < 0 || c->min_lr < 0 || c->min_lr > 1)
		return strbuf_addf(err, "weight decay and clip must be >= 0, --min-lr in [0, 1]"), -1;
	if (c->val_fraction < 0 || c->val_fraction >= 1)
		return strbuf_addf(err, "option '--val-fraction' must be in [0, 1)"), -1;
	if (c->keep_checkpoints < 1)
		return strbuf_addf(err, "option '--keep-checkpoints' must be at least 1"), -1;
	if (!(c->loss_scale >= 1))
		return strbuf_addf(err, "option '--loss-scale' must be at least 1"), -1;
	if (c->fabric && strcmp(c->fabric, "full") && strcmp(c->fabric, "quick"))
		return strbuf_addf(err, "option '--fabric' expects full or quick, got '%s'",
				   c->fabric), -1;
	if (c->fabric_bytes < 8 || c->fabric_bytes > 1 << 30 || c->fabric_iters < 1 ||
	    c->fabric_iters > 1000 || c->fabric_timeout_ms < 10)
		return strbuf_addf(err, "--fabric-bytes must be in [8, 2^30], --fabric-iters in "
				   "[1, 1000], --fabric-timeout at least 10 (ms)"), -1;
	if (c->prec != PREC_FP32 && c->device_kind == DEVICE_CPU)
		return strbuf_addf(err, "--precision %s needs a GPU; the CPU path is fp32",
				   c->precision), -1;
	return 0;
}

/* ------------------------------------------------------------------ YAML */

static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), *row = xcalloc(lb + 1, sizeof(size_t)), d;

	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];

		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	d = row[lb];
	free(row);
	return d;
}

static const struct option *find_opt(const struct option *opts, const char *name)
{
	for (; opts->type != OPTION_END; opts++)
		if (opts->long_name && !strcmp(opts->long_name, name))
			return opts;
	return NULL;
}

static const char *suggest(const struct option *opts, const char *name)
{
	const char *best = NULL;
	size_t bd = 3;

	for (; opts->type != OPTION_END; opts++) {
		size_t d;

		if (!opts->long_name)
			continue;
		d = edit_distance(opts->long_name, name);
		if (d < bd) {
			bd = d;
			best = opts->long_name;
		}
	}
	return best;
}

static int yaml_fail(struct strbuf *err, const char *path, const yaml_mark_t *m, const char *fmt, ...)
	DT_PRINTF(4, 5);

static int yaml_fail(struct strbuf *err, const char *path, const yaml_mark_t *m, const char *fmt, ...)
{
	va_list ap;

	strbuf_addf(err, "%s:%zu:%zu: ", path, m->line + 1, m->column + 1);
	va_start(ap, fmt);
	strbuf_vaddf(err, fmt, ap);
	va_end(ap);
	return -1;
}

static int parse_bool(const char *s, int *out)
{
	static const char *const yes[] = { "true", "yes", "on", "1", "True", "TRUE", "Yes", NULL };
	static const char *const no[] = { "false", "no", "off", "0", "False", "FALSE", "No", NULL };

	for (int i = 0; yes[i]; i++)
		if (!strcmp(s, yes[i]))
			return *out = 1, 0;
	for (int i = 0; no[i]; i++)
		if (!strcmp(s, no[i]))
			return *out = 0, 0;
	return -1;
}

/*
 * The file must be one flat mapping.  States: expecting a key, or a value
 * for `key`; a sequence value collects its scalars into `list`.
 */
int train_config_yaml(const char *path, const struct option *opts, struct strvec *args,
		      struct strbuf *err)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	struct strbuf buf = STRBUF_INIT, key = STRBUF_INIT, list = STRBUF_INIT;
	struct strvec seen = STRVEC_INIT;
	const struct option *opt = NULL;
	yaml_mark_t key_mark = { 0, 0, 0 };
	int depth = 0, in_list = 0, list_items = 0, have_key = 0, ret = -1, done = 0;

	if (strbuf_read_file(&buf, path, 1 << 20) < 0) {
		strbuf_addf(err, "cannot read '%s': %s", path, strerror(errno));
		goto out_nofree;
	}
	if (!yaml_parser_initialize(&parser)) {
		strbuf_addstr(err, "cannot initialise the YAML parser");
		goto out_nofree;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)buf.buf, buf.len);
	while (!done) {
		if (!yaml_parser_parse(&parser, &ev)) {
			yaml_fail(err, path, &parser.problem_mark, "%s",
				  parser.problem ? parser.problem : "invalid YAML");
			goto out;
		}
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		case YAML_STREAM_START_EVENT:
		case YAML_DOCUMENT_START_EVENT:
		case YAML_DOCUMENT_END_EVENT:
			break;
		case YAML_MAPPING_START_EVENT:
			if (depth > 0 || in_list) {
				yaml_fail(err, path, &ev.start_mark,
					  "key '%s': expected a value or a list, found a map", key.buf);
				goto out_event;
			}
			depth++;
			break;
		case YAML_MAPPING_END_EVENT:
			depth--;
			break;
		case YAML_SEQUENCE_START_EVENT:
			if (!have_key || in_list) {
				yaml_fail(err, path, &ev.start_mark,
					  "expected a flat map of flag names to values");
				goto out_event;
			}
			in_list = 1;
			list_items = 0;
			strbuf_reset(&list);
			break;
		case YAML_SEQUENCE_END_EVENT:
			strvec_pushf(args, "--%s=%s", key.buf, list.buf);
			in_list = 0;
			have_key = 0;
			break;
		case YAML_SCALAR_EVENT: {
			const char *s = (const char *)ev.data.scalar.value;

			if (depth != 1) {
				yaml_fail(err, path, &ev.start_mark,
					  "expected a map of flag names to values");
				goto out_event;
			}
			if (in_list) {
				if (list_items++)
					strbuf_addch(&list, ',');
				strbuf_addstr(&list, s);
				break;
			}
			if (!have_key) {
				strbuf_reset(&key);
				strbuf_addstr(&key, s);
				for (char *p = key.buf; *p; p++)
					if (*p == '_')
						*p = '-';
				key_mark = ev.start_mark;
				opt = find_opt(opts, key.buf);
				if (!opt || !strcmp(key.buf, "config")) {
					const char *near = opt ? NULL : suggest(opts, key.buf);

					if (opt)
						yaml_fail(err, path, &key_mark,
							  "a config file cannot name another config file");
					else
						yaml_fail(err, path, &key_mark, "unknown key '%s'%s%s%s", s,
							  near ? "; did you mean '" : "",
							  near ? near : "", near ? "'?" : "");
					goto out_event;
				}
				if (strvec_find(&seen, key.buf) >= 0) {
					yaml_fail(err, path, &key_mark, "key '%s' given twice", s);
					goto out_event;
				}
				strvec_push(&seen, key.buf);
				have_key = 1;
				break;
			}
			if (opt->type == OPTION_BOOL || opt->type == OPTION_COUNT) {
				int b;

				if (parse_bool(s, &b)) {
					yaml_fail(err, path, &ev.start_mark,
						  "key '%s': expected true or false, found '%s'", key.buf, s);
					goto out_event;
				}
				strvec_pushf(args, b ? "--%s" : "--no-%s", key.buf);
			} else {
				strvec_pushf(args, "--%s=%s", key.buf, s);
			}
			have_key = 0;
			break;
		}
		default:
			yaml_fail(err, path, &ev.start_mark, "anchors and aliases are not supported");
			goto out_event;
		}
		yaml_event_delete(&ev);
	}
	ret = 0;
	goto out;
out_event:
	yaml_event_delete(&ev);
out:
	yaml_parser_delete(&parser);
out_nofree:
	strbuf_release(&buf);
	strbuf_release(&key);
	strbuf_release(&list);
	strvec_clear(&seen);
	return ret;
}
