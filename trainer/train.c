/*
 * train.c - the training loop (see train.h).
 *
 * One loop for CPU and GPU: buffers that the model reads (parameters,
 * gradients, optimiser state, the batch) live on "the device", reached
 * through struct dev (kernels.h: dev_cpu, host memory + *_cpu kernels, or
 * dev_gpu, CUDA memory + *_gpu kernels), the table the model walks too.
 * The host always keeps the dataset and, when needed, a copy of the
 * parameters (init, checkpoints, --save-weights).
 */
#include "trainer/train.h"
#include "trainer/ckpt.h"
#include "trainer/data.h"
#include "trainer/gpu.h"
#include "trainer/model.h"
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* --------------------------------------------------------------- helpers */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double train_lr_at(const struct train_config *cfg, long long step, long long total)
{
	double lr = cfg->lr, floor_lr = cfg->lr * cfg->min_lr, t;

	if (step < cfg->warmup)
		return lr * (double)(step + 1) / (double)cfg->warmup;
	if (cfg->sched == SCHED_CONSTANT || total - cfg->warmup <= 1)
		return lr;
	t = (double)(step - cfg->warmup) / (double)(total - cfg->warmup - 1);
	if (t > 1.0)
		t = 1.0;
	return floor_lr + 0.5 * (lr - floor_lr) * (1.0 + cos(M_PI * t));
}

static void arch_string(char *buf, size_t len, const struct model_spec *s)
{
	static const char *const acts[] = { "none", "relu", "gelu" };
	int off = snprintf(buf, len, "%s %d", s->name, s->input_dim);

	if (s->layers && !strcmp(s->name, "gpt")) {
		snprintf(buf, len, "gpt L%d H%d C%d T%d V%d", s->layers, s->heads, s->embd, s->context,
			 s->classes);
		return;
	}
	for (int i = 0; i < s->nr_hidden && off > 0 && (size_t)off < len; i++)
		off += snprintf(buf + off, len - (size_t)off, "-%d", s->hidden[i]);
	if (off > 0 && (size_t)off < len)
		snprintf(buf + off, len - (size_t)off, "-%d %s", s->classes, acts[s->act]);
}

/* What backward's bucket callback needs. */
struct bucket_ctx {
	struct comm *comm;
	struct model *model;
	float *grads;
};

static void bucket_ready(int b, void *data)
{
	struct bucket_ctx *ctx = data;
	const struct grad_bucket *gb = &ctx->model->buckets[b];

	comm_bucket_start(ctx->comm, ctx->grads + gb->off, gb->len);
}

/* The run's state, so helpers below can share it. */
struct run {
	struct train_config *cfg;
	struct comm *comm;
	const struct dev *dev;
	struct dataset train, val;
	struct model model;
	struct sampler smp;
	float *params, *grads, *state[2];   /* device */
	float *host_params, *host_state[2]; /* host copies for checkpoints */
	int nr_state;
	float *xh, *xd;                      /* batch, host and device */
	int *yh, *yd;
	int chunk;                           /* rows per forward (micro-batch / eval) */
	struct ckpt_state ck;
	FILE *metrics;
	double t0;
};

/* Validation over this rank's contiguous shard of the validation set. */
static void evaluate(struct run *r, double *loss, double *acc)
{
	int start, len, dim = r->val.dim;
	double v[2] = { 0.0, 0.0 };

	split_range(r->val.n, r->comm->world, r->comm->rank, &start, &len);
	for (int i = 0; i < len; i += r->chunk) {
		int n = len - i < r->chunk ? len - i : r->chunk, correct = 0;
		const float *x = r->val.x + (size_t)(start + i) * dim;
		const int *y = r->val.y + start + i;

		if (r->dev->gpu) {
			r->dev->h2d(r->xd, x, (size_t)n * dim * sizeof(float));
			r->dev->h2d(r->yd, y, (size_t)n * sizeof(int));
			x = r->xd;
			y = r->yd;
		}
		v[0] += r->model.ops->evaluate(&r->model, r->params, x, y, n, &correct);
		v[1] += correct;
	}
	comm_sum(r->comm, v, 2);
	*loss = r->val.n ? v[0] / r->val.n : NAN;
	/* a language model counts correct tokens */
	*acc = r->val.n ? v[1] / r->val.n / r->model.tokens_per_row : NAN;
}

static void metrics_line(struct run *r, json_t *j)
{
	char *line;

	if (!r->metrics) {
		json_decref(j);
		return;
	}
	/* one line, ", " and ": " separators, 10 significant digits */
	line = json_dumps(j, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
	if (line) {
		fprintf(r->metrics, "%s\n", line);
		fflush(r->metrics);
		free(line);
	}
	json_decref(j);
}

static json_t *metric_base(struct run *r, long long step, double epoch)
{
	json_t *j = json_object();

	json_object_set_new(j, "step", json_integer(step));
	json_object_set_new(j, "epoch", json_real(round(epoch * 10000.0) / 10000.0));
	return j;
}

static void copy_params_to_host(struct run *r)
{
	size_t bytes = r->model.nr_params * sizeof(float);

	r->dev->d2h(r->host_params, r->params, bytes);
	for (int i = 0; i < r->nr_state; i++)
		r->dev->d2h(r->host_state[i], r->state[i], bytes);
}

/* Rank 0 writes; every rank learns whether it worked, so all stop together. */
static int save_checkpoint(struct run *r, long long step, int bpe, struct strbuf *err)
{
	struct strbuf path = STRBUF_INIT;
	int failed = 0;

	if (r->comm->rank == 0) {
		copy_params_to_host(r);
		r->ck.step = step;
		r->ck.epoch = (int)(step / bpe);
		r->ck.batch_in_epoch = (int)(step % bpe);
		failed = ckpt_save(r->cfg->checkpoint_dir, &r->ck, r->host_params,
				   (const float *const *)r->host_state, r->cfg->keep_checkpoints,
				   &path, err) != 0;
		if (!failed && !r->cfg->quiet)
			printf("checkpoint %s\n", path.buf);
	}
	strbuf_release(&path);
	if (comm_any(r->comm, failed)) {
		if (!err->len)
			strbuf_addstr(err, "rank 0 could not write a checkpoint");
		return -1;
	}
	return 0;
}

/*
 * Whether this rank was given GPUs: CUDA_VISIBLE_DEVICES names at least one
 * (the launcher's binding; "" or "-1" is how a job without GPUs is told).
 */
static int gpus_given(void)
{
	const char *v = getenv("CUDA_VISIBLE_DEVICES");

	return v && *v && strncmp(v, "-1", 2);
}

/* Load data, choose the device, set up comm and the model; DT_EXIT_* code. */
static int setup(struct run *r, struct strbuf *err)
{
	struct train_config *cfg = r->cfg;
	struct data_opts dopt = DATA_OPTS_INIT;
	int ngpu, on_gpu, world = r->comm->world, per_rank;
	char cuda_err[256] = "";
	size_t bytes;

	ngpu = cfg->device_kind == DEVICE_CPU ? 0 : gpu_count(cuda_err, sizeof(cuda_err));
	if (ngpu < 0) {
		/* a broken CUDA set-up is an error where GPUs were asked for or given */
		if (cfg->device_kind == DEVICE_CUDA || gpus_given()) {
			strbuf_addf(err, "rank %d: %s", r->comm->rank, cuda_err);
			return DT_EXIT_FAIL;
		}
		warning("rank %d: %s; training on the CPU", r->comm->rank, cuda_err);
		ngpu = 0;
	}
	if (cfg->device_kind == DEVICE_CUDA && ngpu == 0) {
		strbuf_addstr(err, "--device cuda: no GPU visible (check CUDA_VISIBLE_DEVICES, nvidia-smi)");
		return DT_EXIT_USAGE;
	}
	if (ngpu == 0 && cfg->device_kind == DEVICE_AUTO && gpus_given())
		warning("rank %d: CUDA_VISIBLE_DEVICES='%s' names GPUs, but %s; training on the CPU",
			r->comm->rank, getenv("CUDA_VISIBLE_DEVICES"),
			HAVE_CUDA_BUILD ? "no GPU is visible (nvidia-smi?)" :
					  "this dttrain was built without CUDA");
	on_gpu = ngpu > 0;
	if (!on_gpu && cfg->prec != PREC_FP32) {
		strbuf_addf(err, "--precision %s needs a GPU; the CPU path is fp32", cfg->precision);
		return DT_EXIT_USAGE;
	}
	if (on_gpu) {
		char msg[256];

		/* CUDA_VISIBLE_DEVICES already limits what we see: LOCAL_RANK indexes into it */
		if (gpu_init(r->comm->local_rank % ngpu, msg, sizeof(msg))) {
			strbuf_addstr(err, msg);
			return DT_EXIT_FAIL;
		}
	} else {
		int threads = cfg->threads;

		if (!threads) {
			long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

			threads = (int)(ncpu / r->comm->local_world);
			if (threads < 1)
				threads = 1;
		}
		kernels_set_threads(threads);
	}
	if (comm_setup(r->comm, cfg->backend_kind, on_gpu, cfg->nccl_timeout, err))
		return DT_EXIT_USAGE;
	r->dev = on_gpu ? &dev_gpu : &dev_cpu;

	dopt.spec = cfg->data;
	dopt.seed = (uint64_t)cfg->seed;
	dopt.train_size = cfg->train_size;
	dopt.val_size = cfg->val_size;
	dopt.input_dim = cfg->input_dim;
	dopt.classes = cfg->classes;
	dopt.teacher_hidden = cfg->teacher_hidden;
	dopt.val_fraction = cfg->val_fraction;
	dopt.context = cfg->context;
	dopt.vocab = cfg->vocab;
	if (data_load(&r->train, &r->val, &dopt, err))
		return DT_EXIT_USAGE;

	per_rank = (cfg->batch + world - 1) / world;
	r->chunk = (per_rank + cfg->accum - 1) / cfg->accum;
	cfg->spec.input_dim = r->train.dim;
	cfg->spec.classes = r->train.classes;
	cfg->spec.max_batch = r->chunk;
	if (model_create(&r->model, &cfg->spec, on_gpu, (int)cfg->prec, err))
		return DT_EXIT_USAGE;

	bytes = r->model.nr_params * sizeof(float);
	r->nr_state = cfg->optim == OPTIM_ADAMW ? 2 : cfg->momentum > 0 ? 1 : 0;
	r->params = r->dev->alloc(bytes);
	r->grads = r->dev->alloc(bytes);
	r->host_params = dev_cpu.alloc(bytes);
	for (int i = 0; i < r->nr_state; i++) {
		r->state[i] = r->dev->alloc(bytes);
		r->host_state[i] = dev_cpu.alloc(bytes);
	}
	r->xh = dev_cpu.alloc((size_t)r->chunk * r->train.dim * sizeof(float));
	r->yh = dev_cpu.alloc((size_t)r->chunk * sizeof(int));
	r->xd = on_gpu ? r->dev->alloc((size_t)r->chunk * r->train.dim * sizeof(float)) : r->xh;
	r->yd = on_gpu ? r->dev->alloc((size_t)r->chunk * sizeof(int)) : r->yh;

	/* same seed on every rank: identical replicas without a broadcast */
	rng_seed(&r->ck.rng, rng_mix((uint64_t)cfg->seed, 0x1417ULL, 0));
	r->model.ops->init_params(&r->model, r->host_params, &r->ck.rng);
	r->dev->h2d(r->params, r->host_params, bytes);

	arch_string(r->ck.arch, sizeof(r->ck.arch), &cfg->spec);
	r->ck.nr_params = r->model.nr_params;
	r->ck.nr_state = r->nr_state;
	snprintf(r->ck.optimizer, sizeof(r->ck.optimizer), "%s",
		 cfg->optim == OPTIM_ADAMW ? "adamw" : "sgd");
	r->ck.seed = cfg->seed;
	r->ck.world = world;
	r->ck.loss_scale = cfg->prec == PREC_FP16 ? cfg->loss_scale : 1.0;
	return DT_EXIT_OK;
}

/* --resume / $DT_RESUME: returns DT_EXIT_* and sets *start_step. */
static int maybe_resume(struct run *r, long long *start_step, struct strbuf *err)
{
	const char *path = r->cfg->resume;
	struct strbuf file = STRBUF_INIT;
	struct ckpt_state got;
	int from_env = 0, found;
	size_t bytes = r->model.nr_params * sizeof(float);

	*start_step = 0;
	if (!path || !*path) {
		path = getenv("DT_RESUME");
		from_env = 1;
	}
	if (!path || !*path)
		return DT_EXIT_OK;
	found = ckpt_resolve(path, &file, err);
	if (found <= 0) {
		strbuf_release(&file);
		if (found == 0 || from_env) {
			/* a retried job that died before its first checkpoint starts afresh */
			if (r->comm->rank == 0)
				warning("no checkpoint in '%s' yet; starting from step 0", path);
			strbuf_reset(err);
			return DT_EXIT_OK;
		}
		return DT_EXIT_USAGE;
	}
	if (ckpt_load(file.buf, &r->ck, &got, r->host_params, r->host_state, err)) {
		strbuf_release(&file);
		return DT_EXIT_USAGE;
	}
	if (got.seed != r->ck.seed && r->comm->rank == 0)
		warning("checkpoint was written with --seed %lld, this run has %lld; data order follows "
			"this run", got.seed, r->ck.seed);
	r->dev->h2d(r->params, r->host_params, bytes);
	for (int i = 0; i < r->nr_state; i++)
		r->dev->h2d(r->state[i], r->host_state[i], bytes);
	r->ck.rng = got.rng;
	r->ck.loss_scale = got.loss_scale;
	r->ck.good_steps = got.good_steps;
	*start_step = got.step;
	if (r->comm->rank == 0 && !r->cfg->quiet)
		printf("resumed from %s at step %lld\n", file.buf, got.step);
	strbuf_release(&file);
	return DT_EXIT_OK;
}

static void optimizer_step(struct run *r, float lr, long long t)
{
	const struct train_config *cfg = r->cfg;

	for (int i = 0; i < r->model.nr_segs; i++) {
		const struct param_seg *s = &r->model.segs[i];
		float wd = s->decay ? (float)cfg->weight_decay : 0.0f;

		if (cfg->optim == OPTIM_ADAMW)
			r->dev->adamw(r->params + s->off, r->grads + s->off, r->state[0] + s->off,
				      r->state[1] + s->off, s->len, lr, (float)cfg->beta1,
				      (float)cfg->beta2, (float)cfg->eps, wd, t);
		else
			r->dev->sgd(r->params + s->off, r->grads + s->off,
				    r->nr_state ? r->state[0] + s->off : NULL, s->len, lr,
				    (float)cfg->momentum, wd);
	}
}

static void release_run(struct run *r)
{
	model_release(&r->model);
	if (r->dev) {
		r->dev->release(r->params);
		r->dev->release(r->grads);
		for (int i = 0; i < r->nr_state; i++)
			r->dev->release(r->state[i]);
		if (r->dev->gpu) {
			r->dev->release(r->xd);
			r->dev->release(r->yd);
		}
	}
	for (int i = 0; i < r->nr_state; i++)
		free(r->host_state[i]);
	free(r->host_params);
	free(r->xh);
	free(r->yh);
	sampler_release(&r->smp);
	dataset_release(&r->train);
	dataset_release(&r->val);
	if (r->metrics)
		fclose(r->metrics);
	if (r->dev && r->dev->gpu)
		gpu_shutdown();
}

int train_run(struct train_config *cfg, struct comm *comm, struct train_result *res,
	      struct strbuf *err)
{
	struct run run, *r = &run;
	long long start, total, step;
	int bpe, code, rank0 = comm->rank == 0;
	double last_t, loss = NAN, val_loss = NAN, val_acc = NAN, run_samples = 0, run_time = 0;
	long long interval_samples = 0, last_eval = -1;
	const char *metrics_path;
	struct strbuf ckdir = STRBUF_INIT;

	memset(r, 0, sizeof(*r));
	r->cfg = cfg;
	r->comm = comm;
	res->steps = 0;
	res->loss = res->val_loss = res->val_acc = NAN;
	res->samples_per_s = 0;
	res->agreed = 0;
	code = setup(r, err);
	if (code)
		goto out;
	code = maybe_resume(r, &start, err);
	if (code)
		goto out;
	if (!cfg->checkpoint_dir && getenv_nonempty("DT_JOB_DIR")) {
		/* launched by dtctl: checkpoints go to the job's directory on the shared dir */
		strbuf_addf(&ckdir, "%s/ckpt", getenv_nonempty("DT_JOB_DIR"));
		cfg->checkpoint_dir = ckdir.buf;
	}
	sampler_init(&r->smp, r->train.n, cfg->batch, comm->rank, comm->world, (uint64_t)cfg->seed);
	bpe = sampler_batches_per_epoch(&r->smp);
	total = cfg->steps > 0 ? cfg->steps : (long long)cfg->epochs * bpe;

	metrics_path = cfg->metrics ? cfg->metrics : getenv("DT_METRICS_FILE");
	if (rank0 && metrics_path && *metrics_path) {
		r->metrics = fopen(metrics_path, start > 0 ? "a" : "w");
		if (!r->metrics) {
			strbuf_addf(err, "cannot open metrics file '%s': %s", metrics_path, strerror(errno));
			code = DT_EXIT_USAGE;
		}
	}
	if (comm_any(comm, code != 0)) {
		if (!err->len)
			strbuf_addstr(err, "rank 0 could not open the metrics file");
		code = code ? code : DT_EXIT_USAGE;
		res->agreed = 1;
		goto out;
	}
	if (rank0 && !cfg->quiet) {
		double np = (double)r->model.nr_params;

		printf("dttrain: %s, %.*f%s params, %d rank%s (%s) on %s, %d train / %d val rows, "
		       "batch %d (%d per rank", r->ck.arch, np < 1e6 ? 1 : 2, np < 1e6 ? np / 1e3 : np / 1e6,
		       np < 1e6 ? "K" : "M", comm->world,
		       comm->world > 1 ? "s" : "", comm_name(comm), r->dev->gpu ? "cuda" : "cpu",
		       r->train.n, r->val.n, cfg->batch, (cfg->batch + comm->world - 1) / comm->world);
		if (cfg->accum > 1)
			printf(" in %d micro-batches", cfg->accum);
		printf("), %d steps/epoch, %lld steps\n", bpe, total);
		fflush(stdout);
	}

	r->t0 = now_s();
	last_t = r->t0;
	for (step = start; step < total; step++) {
		int epoch = (int)(step / bpe), b = (int)(step % bpe), gbatch = 0, end_of_epoch;
		double v[2] = { 0.0, 0.0 }, step_t0 = now_s();
		float scale = (float)r->ck.loss_scale, lr;
		struct bucket_ctx ctx = { comm, &r->model, r->grads };
		int skip = 0;

		sampler_set_epoch(&r->smp, epoch);
		for (int part = 0; part < cfg->accum; part++) {
			const int *rows;
			int cnt, correct = 0;

			gbatch = sampler_slice(&r->smp, b, part, cfg->accum, &rows, &cnt);
			dataset_gather(&r->train, rows, cnt, r->xh, r->yh);
			if (r->dev->gpu && cnt) {
				r->dev->h2d(r->xd, r->xh, (size_t)cnt * r->train.dim * sizeof(float));
				r->dev->h2d(r->yd, r->yh, (size_t)cnt * sizeof(int));
			}
			v[0] += r->model.ops->train_step(&r->model, r->params, r->grads,
							 part ? 1.0f : 0.0f, r->xd, r->yd, cnt,
							 scale / (float)gbatch, &correct,
							 part == cfg->accum - 1 ? bucket_ready : NULL, &ctx);
			v[1] += correct;
		}
		comm_wait(comm);
		comm_sum(comm, v, 2);
		loss = v[0] / gbatch;
		if (!isfinite(loss)) {
			strbuf_addf(err, "loss is %s at step %lld (epoch %d): training diverged; "
				    "lower --lr, or add --warmup or --clip", isnan(loss) ? "NaN" : "Inf",
				    step + 1, epoch + 1);
			code = DT_EXIT_FAIL;
			res->agreed = 1;
			goto out;
		}
		if (cfg->prec == PREC_FP16) {
			/* dynamic loss scaling: every rank sees the same reduced gradients */
			if (!r->dev->finite(r->grads, r->model.nr_params)) {
				r->ck.loss_scale = r->ck.loss_scale / 2 < 1 ? 1 : r->ck.loss_scale / 2;
				r->ck.good_steps = 0;
				skip = 1;
			} else if (++r->ck.good_steps % 1000 == 0 && r->ck.loss_scale < 16777216.0) {
				r->ck.loss_scale *= 2;
			}
		}
		if (!skip) {
			if (scale != 1.0f)
				r->dev->scale(r->grads, r->model.nr_params, 1.0f / scale);
			if (cfg->clip > 0) {
				double norm = sqrt(r->dev->sumsq(r->grads, r->model.nr_params));

				if (norm > cfg->clip)
					r->dev->scale(r->grads, r->model.nr_params,
						      (float)(cfg->clip / (norm + 1e-6)));
			}
			lr = (float)train_lr_at(cfg, step, total);
			optimizer_step(r, lr, step + 1);
		}
		if (r->dev->gpu)
			gpu_sync();
		run_time += now_s() - step_t0;
		run_samples += gbatch;
		interval_samples += gbatch;

		if (cfg->log_every && ((step + 1) % cfg->log_every == 0 || step + 1 == total)) {
			double t = now_s(), sps = interval_samples / (t - last_t > 0 ? t - last_t : 1e-9);
			double lr_now = train_lr_at(cfg, step, total);

			if (rank0) {
				json_t *j = metric_base(r, step + 1, (double)(step + 1) / bpe);

				json_object_set_new(j, "loss", json_real(loss));
				json_object_set_new(j, "lr", json_real(lr_now));
				json_object_set_new(j, "samples_per_s", json_real(round(sps * 10) / 10));
				if (r->model.tokens_per_row > 1)
					json_object_set_new(j, "tokens_per_s",
							    json_real(round(sps * r->model.tokens_per_row)));
				json_object_set_new(j, "time", json_real(round((t - r->t0) * 1000) / 1000));
				metrics_line(r, j);
				if (!cfg->quiet)
					printf("step %lld/%lld epoch %d loss %.4f lr %.3g %.0f samples/s%s\n",
					       step + 1, total, epoch + 1, loss, lr_now, sps,
					       skip ? " (fp16 overflow, step skipped)" : "");
			}
			last_t = t;
			interval_samples = 0;
		}
		end_of_epoch = b == bpe - 1;
		if (cfg->eval_every ? (step + 1) % cfg->eval_every == 0 : end_of_epoch) {
			evaluate(r, &val_loss, &val_acc);
			last_eval = step + 1;
			if (rank0 && r->val.n) {
				json_t *j = metric_base(r, step + 1, (double)(step + 1) / bpe);

				json_object_set_new(j, "loss", json_real(loss));
				json_object_set_new(j, "val_loss", json_real(val_loss));
				json_object_set_new(j, "val_acc", json_real(val_acc));
				json_object_set_new(j, "time", json_real(round((now_s() - r->t0) * 1000) / 1000));
				metrics_line(r, j);
				printf("epoch %d step %lld val_loss %.4f val_acc %.4f\n",
					       epoch + 1, step + 1, val_loss, val_acc);
			}
		}
		if (cfg->checkpoint_dir && cfg->checkpoint_every &&
		    (step + 1) % cfg->checkpoint_every == 0 && step + 1 < total &&
		    save_checkpoint(r, step + 1, bpe, err)) {
			code = DT_EXIT_FAIL;
			res->agreed = 1;
			goto out;
		}
		if (rank0 && !cfg->quiet)
			fflush(stdout);
	}
	if (last_eval != total && r->val.n) {
		evaluate(r, &val_loss, &val_acc);
		if (rank0) {
			json_t *j = metric_base(r, total, (double)total / bpe);

			if (isfinite(loss))
				json_object_set_new(j, "loss", json_real(loss));
			json_object_set_new(j, "val_loss", json_real(val_loss));
			json_object_set_new(j, "val_acc", json_real(val_acc));
			json_object_set_new(j, "time", json_real(round((now_s() - r->t0) * 1000) / 1000));
			metrics_line(r, j);
			printf("final step %lld val_loss %.4f val_acc %.4f\n", total, val_loss, val_acc);
		}
	}
	if (cfg->checkpoint_dir && save_checkpoint(r, total, bpe, err)) {
		code = DT_EXIT_FAIL;
		res->agreed = 1;
		goto out;
	}
	if (res->want_params || cfg->save_weights) {
		size_t bytes = r->model.nr_params * sizeof(float);

		r->dev->d2h(r->host_params, r->params, bytes);
		if (cfg->save_weights && rank0 &&
		    write_file_atomic(cfg->save_weights, r->host_params, bytes, 0644)) {
			strbuf_addf(err, "cannot write '%s': %s", cfg->save_weights, strerror(errno));
			code = DT_EXIT_FAIL;
		}
		if (res->want_params) {
			res->params = xmalloc(bytes);
			memcpy(res->params, r->host_params, bytes);
			res->nr_params = r->model.nr_params;
		}
	}
	res->steps = total;
	res->loss = loss;
	res->val_loss = val_loss;
	res->val_acc = val_acc;
	res->samples_per_s = run_time > 0 ? run_samples / run_time : 0;
	if (rank0 && run_time > 0 && r->model.tokens_per_row > 1)
		printf("done: %lld steps, %.0f samples/s, %.0f tokens/s (training only)\n",
		       total - start, run_samples / run_time,
		       run_samples * r->model.tokens_per_row / run_time);
	else if (rank0 && run_time > 0)
		printf("done: %lld steps, %.0f samples/s (training only)\n", total - start,
		       run_samples / run_time);
out:
	fflush(stdout);
	release_run(r);
	if (cfg->checkpoint_dir == ckdir.buf)
		cfg->checkpoint_dir = NULL;
	strbuf_release(&ckdir);
	return code;
}
