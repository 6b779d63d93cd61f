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
#include "trainer/progress.h"
#include "trainer/ckpt.h"
#include "trainer/data.h"
#include "trainer/gpu.h"
#include "trainer/model.h"
#include "json.h"
#include "units.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
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
	int batch_rows;                      /* rows of the step's batch buffers (xh..yd) */
	int slots;                           /* pipeline: micro-batches in flight, chunk rows each */
	struct ckpt_state ck;
	FILE *metrics;
	double t0;
	long long total;
	int bpe;
	/* bookkeeping of the loop: log intervals, training time and samples */
	double last_t, run_time, run_samples;
	long long interval_samples;
	/* --pipeline: this rank's stage runs layers [la, lb), parameters [plo, phi)
	 * (without a pipeline: every layer); pin/pgrad hold received activations and
	 * output gradients of the step's micro-batches (device).  A tied weight
	 * (model.h) on the first and last stage: [tlo, thi) on the last (the first
	 * owns it anyway), its gradient summed with tied_peer's through ptied */
	int la, lb;
	size_t plo, phi, tlo, thi;
	int tied_peer;
	float *pin, *pgrad, *ptied;
	double pipe_time, pipe_wait;         /* seconds in the schedule, blocked in send/recv */
	long long local_steps;               /* --sync async: steps this rank took */
	/* --sync-overlap: the parameters' average in flight (avg) and this rank's
	 * share of it (snap), device; averages overlapped and blocking */
	float *avg, *snap;
	int avg_pending;
	long long overlapped, blocking;
};

/* Seconds since t, added to *acc. */
static void add_since(double *acc, double t)
{
	*acc += now_s() - t;
}

/* Transfers with a neighbouring stage, their time counted as the pipeline's wait. */
static void pipe_recv(struct run *r, float *buf, size_t n, int peer)
{
	double t = now_s();

	comm_recv(r->comm, buf, n, peer);
	add_since(&r->pipe_wait, t);
}

static void pipe_send(struct run *r, const float *buf, size_t n, int peer)
{
	double t = now_s();

	comm_send(r->comm, buf, n, peer);
	add_since(&r->pipe_wait, t);
}

/* Backward's per-layer callback in a pipeline: nudge the sends in flight. */
static void pipe_progress(int b, void *data)
{
	(void)b;
	comm_progress(data);
}

/*
 * Forward of this stage over rows [row, row + n) whose batch rows are x and
 * labels y: the first stage reads x, the others receive their input from the
 * previous stage; the last computes the loss (grad_scale 0: validation), the
 * others send their output on.  Returns the summed loss (0 before the last stage).
 */
static double stage_forward(struct run *r, int row, int n, const float *x, const int *y,
			    float grad_scale, int *correct)
{
	struct model *m = &r->model;
	const float *in = x, *out = x;
	int rank = r->comm->rank;

	*correct = 0;
	if (!n)
		return 0.0;
	if (r->la > 0) {
		in = r->pin + (size_t)row * m->act_width[r->la];
		pipe_recv(r, (float *)in, (size_t)n * m->act_width[r->la], rank - 1);
	}
	/* layer by layer, nudging the sends in flight between layers (comm_progress) */
	for (int l = r->la; l < r->lb; l++) {
		in = out = m->ops->forward_range(m, r->params, l, l + 1, row, n, in);
		comm_progress(r->comm);
	}
	if (r->lb == m->nr_layers)
		return m->ops->loss(m, row, n, x, y, grad_scale, correct);
	pipe_send(r, out, (size_t)n * m->act_width[r->lb], rank + 1);
	return 0.0;
}

/* Batch rows to the device buffers (a no-op on the CPU, where they are the same). */
static void batch_to_device(struct run *r, int row, int n, int x_too)
{
	if (!r->dev->gpu || !n)
		return;
	if (x_too)
		r->dev->h2d(r->xd + (size_t)row * r->train.dim, r->xh + (size_t)row * r->train.dim,
			    (size_t)n * r->train.dim * sizeof(float));
	r->dev->h2d(r->yd + row, r->yh + row, (size_t)n * sizeof(int));
}

/* Validation over this replica's contiguous shard of the validation set. */
static void evaluate(struct run *r, double *loss, double *acc)
{
	int start, len, dim = r->val.dim;
	double v[2] = { 0.0, 0.0 }, wait = r->pipe_wait;   /* the bubble is training's */

	split_range(r->val.n, r->comm->replicas, r->comm->replica, &start, &len);
	for (int i = 0; i < len; i += r->chunk) {
		int n = len - i < r->chunk ? len - i : r->chunk, correct = 0;
		const float *x = r->val.x + (size_t)(start + i) * dim;
		const int *y = r->val.y + start + i;

		if (r->comm->pipe_stages > 1) {
			memcpy(r->xh, x, (size_t)n * dim * sizeof(float));
			memcpy(r->yh, y, (size_t)n * sizeof(int));
			batch_to_device(r, 0, n, r->la == 0 || r->lb == r->model.nr_layers);
			v[0] += stage_forward(r, 0, n, r->xd, r->yd, 0.0f, &correct);
			v[1] += correct;
			continue;
		}
		if (r->dev->gpu) {
			r->dev->h2d(r->xd, x, (size_t)n * dim * sizeof(float));
			r->dev->h2d(r->yd, y, (size_t)n * sizeof(int));
			x = r->xd;
			y = r->yd;
		}
		v[0] += r->model.ops->evaluate(&r->model, r->params, x, y, n, &correct);
		v[1] += correct;
	}
	comm_p2p_flush(r->comm);
	r->pipe_wait = wait;
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

/* The cost of layers [0, l): the model's layer_cost, else parameter counts. */
static double cost_below(const struct model *m, int l)
{
	double c = 0.0;

	if (m->layer_cost[0] <= 0.0)
		return (double)m->layer_off[l];
	for (int i = 0; i < l; i++)
		c += m->layer_cost[i];
	return c;
}

/*
 * Layers [*a, *b) of pipeline stage s: the boundaries nearest to equal shares
 * of the cost (model.h: compute per row where the model says, else the
 * parameters), at least one layer per stage.
 */
void train_stage_layers(const struct model *m, int stages, int s, int *a, int *b)
{
	int L = m->nr_layers, lo = 0, hi = L;

	for (int k = 1; k <= s + 1; k++) {
		double target = cost_below(m, L) * k / stages;

		hi = 0;
		if (k == stages)
			hi = L;
		else
			for (int l = 1; l < L; l++)
				if (fabs(cost_below(m, l) - target) < fabs(cost_below(m, hi) - target))
					hi = l;
		if (hi < lo + 1)
			hi = lo + 1;
		if (hi > L - (stages - k))
			hi = L - (stages - k);
		if (k == s + 1)
			break;
		lo = hi;
	}
	*a = lo;
	*b = hi;
}

/*
 * Pipeline: rank 0 gets every stage's parameters and optimiser state (from
 * replica 0), for a checkpoint or the final weights.  Every rank calls it.
 */
static void gather_stages(struct run *r)
{
	struct comm *c = r->comm;
	float *bufs[3] = { r->params, r->state[0], r->state[1] };

	if (c->pipe_stages == 1 || c->replica != 0)
		return;
	for (int i = 0; i <= r->nr_state; i++) {
		if (c->rank != 0) {
			comm_send(c, bufs[i] + r->plo, r->phi - r->plo, 0);
			continue;
		}
		for (int s = 1; s < c->pipe_stages; s++) {
			int a, b;
			size_t lo;

			train_stage_layers(&r->model, c->pipe_stages, s, &a, &b);
			lo = r->model.layer_off[a];
			comm_recv(c, bufs[i] + lo, r->model.layer_off[b] - lo, s);
		}
	}
	comm_p2p_flush(c);
}

/* Rank 0 writes; every rank learns whether it worked, so all stop together. */
static int save_checkpoint(struct run *r, long long step, int bpe, struct strbuf *err)
{
	struct strbuf path = STRBUF_INIT;
	int failed = 0;

	progress_phase(PH_CHECKPOINT);
	gather_stages(r);
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

/* This rank's pipeline stage: its layers, parameters and receive buffers. */
static int setup_stage(struct run *r, struct strbuf *err)
{
	struct model *m = &r->model;
	int P = r->comm->pipe_stages;

	r->la = 0;
	r->lb = m->nr_layers;
	r->plo = 0;
	r->phi = m->nr_params;
	r->tlo = r->thi = 0;
	r->tied_peer = -1;
	if (P == 1)
		return 0;
	if (!m->ops->forward_range || m->nr_layers < P) {
		strbuf_addf(err, "--pipeline %d: model '%s' %s", P, m->spec.name,
			    m->ops->forward_range ? "has fewer layers than stages" :
						    "cannot be split into stages");
		return -1;
	}
	train_stage_layers(m, P, r->comm->pipe_stage, &r->la, &r->lb);
	r->plo = m->layer_off[r->la];
	r->phi = m->layer_off[r->lb];
	if (r->la > 0)
		r->pin = r->dev->alloc((size_t)m->spec.max_batch * m->act_width[r->la] * sizeof(float));
	if (r->lb < m->nr_layers)
		r->pgrad = r->dev->alloc((size_t)m->spec.max_batch * m->act_width[r->lb] *
					 sizeof(float));
	if (m->tied_len && (r->la == 0 || r->lb == m->nr_layers)) {
		/* the first stage's peer is its replica's last, and the other way round */
		r->tied_peer = r->comm->rank + (r->la == 0 ? P - 1 : 1 - P);
		if (r->la > 0) {
			r->tlo = m->tied_off;
			r->thi = m->tied_off + m->tied_len;
		}
		r->ptied = r->dev->alloc(m->tied_len * sizeof(float));
	}
	return 0;
}

/* Load data, choose the device, set up comm and the model; DT_EXIT_* code. */
static int setup(struct run *r, struct strbuf *err)
{
	struct train_config *cfg = r->cfg;
	struct data_opts dopt = DATA_OPTS_INIT;
	int ngpu, on_gpu, world, per_rank;
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
	if (comm_setup(r->comm, cfg->backend_kind, on_gpu, cfg->nccl_timeout, err) ||
	    comm_split(r->comm, cfg->pipeline, err))
		return DT_EXIT_USAGE;
	world = r->comm->replicas;
	if (cfg->pipeline > 1 && cfg->pipe_sched == PIPE_1F1B && r->comm->kind == COMM_NCCL) {
		strbuf_addstr(err, "--pipeline-schedule 1f1b needs --backend mpi (NCCL's sends "
			      "are waited for: use gpipe)");
		return DT_EXIT_USAGE;
	}
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

	/*
	 * A pipeline holds the step's whole batch (the first stage its inputs,
	 * the last its labels) and keeps `slots` micro-batches in flight: every
	 * one with GPipe, P - stage with 1F1B.  Validation goes one micro-batch
	 * at a time, the same on every stage.
	 */
	per_rank = (cfg->batch + world - 1) / world;
	r->batch_rows = r->chunk = (per_rank + cfg->accum - 1) / cfg->accum;
	r->slots = 1;
	if (cfg->pipeline > 1) {
		int left = cfg->pipeline - r->comm->pipe_stage;

		r->chunk = (per_rank + cfg->micro_batches - 1) / cfg->micro_batches;
		r->batch_rows = per_rank;
		r->slots = cfg->pipe_sched == PIPE_1F1B && left < cfg->micro_batches ? left :
										       cfg->micro_batches;
	}
	cfg->spec.input_dim = r->train.dim;
	cfg->spec.classes = r->train.classes;
	cfg->spec.max_batch = r->slots * r->chunk;
	if (model_create(&r->model, &cfg->spec, on_gpu, (int)cfg->prec, err) ||
	    setup_stage(r, err))
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
	r->xh = dev_cpu.alloc((size_t)r->batch_rows * r->train.dim * sizeof(float));
	r->yh = dev_cpu.alloc((size_t)r->batch_rows * sizeof(int));
	r->xd = on_gpu ? r->dev->alloc((size_t)r->batch_rows * r->train.dim * sizeof(float)) : r->xh;
	r->yd = on_gpu ? r->dev->alloc((size_t)r->batch_rows * sizeof(int)) : r->yh;

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

/* The optimiser over this stage's segments (every segment without a pipeline), and
 * the tied weight on the last stage. */
static void optimizer_step(struct run *r, float lr, long long t)
{
	const struct train_config *cfg = r->cfg;

	for (int i = 0; i < r->model.nr_segs; i++) {
		const struct param_seg *s = &r->model.segs[i];
		float wd = s->decay ? (float)cfg->weight_decay : 0.0f;

		if ((s->off < r->plo || s->off >= r->phi) && (s->off < r->tlo || s->off >= r->thi))
			continue;
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
		if (r->pin)
			r->dev->release(r->pin);
		if (r->pgrad)
			r->dev->release(r->pgrad);
		if (r->ptied)
			r->dev->release(r->ptied);
		if (r->avg) {
			r->dev->release(r->avg);
			r->dev->release(r->snap);
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

/* --slow-rank R:MS (a test and benchmark flag): rank R sleeps MS ms per step. */
static void slow_down(const struct run *r)
{
	int ms = r->cfg->slow_ms;
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	if (ms > 0 && r->comm->rank == r->cfg->slow_rank_id)
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;   /* a SIGUSR2 (progress.h) cuts it short */
}

/* Rank 0's training line every --log-every steps (and at the last step). */
static void log_step(struct run *r, long long step, double loss, int skip)
{
	const struct train_config *cfg = r->cfg;
	double t, sps, lr_now;
	json_t *j;

	if (r->comm->rank != 0 || !cfg->log_every ||
	    ((step + 1) % cfg->log_every && step + 1 != r->total))
		return;
	t = now_s();
	sps = r->interval_samples / (t - r->last_t > 0 ? t - r->last_t : 1e-9);
	lr_now = train_lr_at(cfg, step, r->total);
	j = metric_base(r, step + 1, (double)(step + 1) / r->bpe);
	json_object_set_new(j, "loss", json_real(loss));
	json_object_set_new(j, "lr", json_real(lr_now));
	json_object_set_new(j, "samples_per_s", json_real(round(sps * 10) / 10));
	if (r->model.tokens_per_row > 1)
		json_object_set_new(j, "tokens_per_s", json_real(round(sps * r->model.tokens_per_row)));
	if (r->comm->pipe_stages > 1 && r->pipe_time > 0)
		json_object_set_new(j, "bubble", json_real(round(r->pipe_wait / r->pipe_time * 1e4) / 1e4));
	json_object_set_new(j, "time", json_real(round((t - r->t0) * 1000) / 1000));
	metrics_line(r, j);
	if (!cfg->quiet)
		printf("step %lld/%lld epoch %lld loss %.4f lr %.3g %.0f samples/s%s\n", step + 1,
		       r->total, step / r->bpe + 1, loss, lr_now, sps,
		       skip ? " (fp16 overflow, step skipped)" : "");
	r->last_t = t;
	r->interval_samples = 0;
}

/*
 * Forward and backward of this rank's share of global batch `step`, in --accum
 * micro-batches.  Synchronous (local 0): gradients pre-scaled by 1/global
 * batch and all-reduced bucket by bucket during backward (comm_wait() after);
 * local SGD (local 1): scaled by 1/this rank's rows and kept.  v gets the
 * summed loss and hits over this rank's rows, *rows their count; returns the
 * global batch's size.
 */
static int replica_step(struct run *r, long long step, int local, double v[2], int *rows)
{
	const struct train_config *cfg = r->cfg;
	float scale = (float)r->ck.loss_scale;
	struct bucket_ctx ctx = { r->comm, &r->model, r->grads };
	int b = (int)(step % r->bpe), gbatch = 0, mine = 0;

	sampler_set_epoch(&r->smp, (int)(step / r->bpe));
	for (int part = 0; part < cfg->accum; part++) {
		const int *idx;
		int cnt;

		sampler_slice(&r->smp, b, part, cfg->accum, &idx, &cnt);
		mine += cnt;
	}
	for (int part = 0; part < cfg->accum; part++) {
		const int *idx;
		int cnt, correct = 0;

		gbatch = sampler_slice(&r->smp, b, part, cfg->accum, &idx, &cnt);
		progress_phase(PH_DATA);
		dataset_gather(&r->train, idx, cnt, r->xh, r->yh);
		batch_to_device(r, 0, cnt, 1);
		progress_phase(PH_COMPUTE);
		v[0] += r->model.ops->train_step(&r->model, r->params, r->grads, part ? 1.0f : 0.0f,
						 r->xd, r->yd, cnt,
						 scale / (float)(local ? (mine ? mine : 1) : gbatch),
						 &correct,
						 !local && part == cfg->accum - 1 ? bucket_ready : NULL,
						 &ctx);
		v[1] += correct;
	}
	*rows = mine;
	return gbatch;
}

/*
 * The order of one stage's passes over M micro-batches, into ops[2M]: i for
 * micro-batch i's forward, -1 - i for its backward.  GPipe runs every
 * forward, then every backward; 1F1B runs P - stage - 1 forwards (the warm
 * up), then one forward and one backward in turn, then the backwards left.
 * Both run the backwards in micro-batch order, so both sum the gradients in
 * the same order (same numbers).
 */
void train_pipe_schedule(enum pipe_sched kind, int M, int P, int stage, int *ops)
{
	int warm = kind == PIPE_GPIPE ? M : P - stage - 1, k = 0, next_b = 0;

	if (warm > M)
		warm = M;
	for (int i = 0; i < warm; i++)
		ops[k++] = i;
	for (int i = warm; i < M; i++) {
		ops[k++] = i;
		ops[k++] = -1 - next_b++;
	}
	while (next_b < M)
		ops[k++] = -1 - next_b++;
}

/*
 * The tied weight's gradient (model.h) summed between the first and the last
 * stage of this replica, each with its part (the embedding's, the head's):
 * the first sends then receives, the last receives then sends (no deadlock
 * with NCCL's waited-for sends either), both add: a + b = b + a in floats, so
 * the two copies stay bit-identical.
 */
static void sum_tied(struct run *r)
{
	float *g = r->grads + r->model.tied_off;
	size_t n = r->model.tied_len;

	if (r->tied_peer < 0)
		return;
	if (r->la == 0) {
		pipe_send(r, g, n, r->tied_peer);
		pipe_recv(r, r->ptied, n, r->tied_peer);
	} else {
		pipe_recv(r, r->ptied, n, r->tied_peer);
		pipe_send(r, g, n, r->tied_peer);
	}
	r->dev->add(g, g, r->ptied, n);
}

/*
 * One step of this rank's pipeline stage: the replica's share of the global
 * batch in --micro-batches row ranges, the schedule's forwards and backwards
 * (activations and their gradients to and from the neighbouring stages, rank
 * +-1), then this stage's gradients all-reduced over its data-parallel group
 * (comm_wait() after).  v: loss and hits (non-zero on the last stage only).
 */
static int pipeline_step(struct run *r, long long step, double v[2])
{
	const struct train_config *cfg = r->cfg;
	struct model *m = &r->model;
	int M = cfg->micro_batches, b = (int)(step % r->bpe), gbatch = 0, rank = r->comm->rank;
	int *off = xcalloc((size_t)M + 1, sizeof(int)), *ops = xcalloc(2 * (size_t)M, sizeof(int));
	size_t wa = m->act_width[r->la], wb = m->act_width[r->lb];
	float scale;
	double t0 = now_s();

	sampler_set_epoch(&r->smp, (int)(step / r->bpe));
	for (int i = 0; i < M; i++) {
		const int *idx;
		int cnt;

		gbatch = sampler_slice(&r->smp, b, i, M, &idx, &cnt);
		if (r->la == 0 || r->lb == m->nr_layers)
			dataset_gather(&r->train, idx, cnt, r->xh + (size_t)off[i] * r->train.dim,
				       r->yh + off[i]);
		off[i + 1] = off[i] + cnt;
	}
	batch_to_device(r, 0, off[M], r->la == 0 || r->lb == m->nr_layers);
	scale = (float)r->ck.loss_scale / (float)gbatch;
	r->dev->memset0(r->grads + r->plo, (r->phi - r->plo) * sizeof(float));
	r->dev->memset0(r->grads + r->tlo, (r->thi - r->tlo) * sizeof(float));
	train_pipe_schedule(cfg->pipe_sched, M, r->comm->pipe_stages, r->comm->pipe_stage, ops);
	for (int k = 0; k < 2 * M; k++) {
		int i = ops[k] >= 0 ? ops[k] : -1 - ops[k], n = off[i + 1] - off[i], correct;
		/* micro-batch i's rows in the model's buffers and pin/pgrad: its slot's */
		int row = (i % r->slots) * r->chunk;
		const float *in = r->la ? r->pin + (size_t)row * wa :
					  r->xd + (size_t)off[i] * r->train.dim;
		float *dout = r->pgrad ? r->pgrad + (size_t)row * wb : NULL;
		const float *din;

		if (ops[k] >= 0) {
			v[0] += stage_forward(r, row, n, r->xd + (size_t)off[i] * r->train.dim,
					      r->yd + off[i], scale, &correct);
			v[1] += correct;
			continue;
		}
		if (!n)
			continue;
		if (dout)
			pipe_recv(r, dout, (size_t)n * wb, rank + 1);
		din = m->ops->backward_range(m, r->params, r->grads, 1.0f, r->la, r->lb, row, n,
					     in, dout, pipe_progress, r->comm);
		if (r->la > 0)
			pipe_send(r, din, (size_t)n * wa, rank - 1);
	}
	sum_tied(r);
	comm_p2p_flush(r->comm);
	add_since(&r->pipe_time, t0);
	comm_bucket_start(r->comm, r->grads + r->plo, r->phi - r->plo);
	if (r->thi > r->tlo)
		comm_bucket_start(r->comm, r->grads + r->tlo, r->thi - r->tlo);
	free(off);
	free(ops);
	return gbatch;
}

/*
 * After backward: fp16 loss scaling, unscaling, clipping (the norm over every
 * stage) and the optimiser step with `scale`, the loss scale the step used.
 * Returns 1 when fp16 overflow skipped the step.
 */
static int apply_update(struct run *r, long long step, float scale)
{
	const struct train_config *cfg = r->cfg;
	float *g = r->grads + r->plo;
	size_t n = r->phi - r->plo;

	if (cfg->prec == PREC_FP16) {
		/* dynamic loss scaling: every rank sees the same reduced gradients */
		if (!r->dev->finite(r->grads, r->model.nr_params)) {
			r->ck.loss_scale = r->ck.loss_scale / 2 < 1 ? 1 : r->ck.loss_scale / 2;
			r->ck.good_steps = 0;
			return 1;
		} else if (++r->ck.good_steps % 1000 == 0 && r->ck.loss_scale < 16777216.0) {
			r->ck.loss_scale *= 2;
		}
	}
	if (scale != 1.0f) {
		r->dev->scale(g, n, 1.0f / scale);
		r->dev->scale(r->grads + r->tlo, r->thi - r->tlo, 1.0f / scale);
	}
	if (cfg->clip > 0) {
		/* a tied weight counts once, on the first stage */
		double sq = r->dev->sumsq(g, n), norm;

		if (r->comm->pipe_stages > 1) {
			/* every replica of a stage holds the same gradients */
			comm_sum(r->comm, &sq, 1);
			sq /= r->comm->replicas;
		}
		norm = sqrt(sq);
		if (norm > cfg->clip) {
			r->dev->scale(g, n, (float)(cfg->clip / (norm + 1e-6)));
			r->dev->scale(r->grads + r->tlo, r->thi - r->tlo,
				      (float)(cfg->clip / (norm + 1e-6)));
		}
	}
	optimizer_step(r, (float)train_lr_at(cfg, step, r->total), step + 1);
	return 0;
}

static int diverged(const struct run *r, long long step, double loss, struct strbuf *err)
{
	strbuf_addf(err, "loss is %s at step %lld (epoch %lld): training diverged; "
		    "lower --lr, or add --warmup or --clip", isnan(loss) ? "NaN" : "Inf", step + 1,
		    step / r->bpe + 1);
	return DT_EXIT_FAIL;
}

/* A synchronous step (data parallel, with or without a pipeline); DT_EXIT_*. */
static int sync_step(struct run *r, long long step, double *loss, struct strbuf *err)
{
	double v[2] = { 0.0, 0.0 }, t0 = now_s();
	float scale = (float)r->ck.loss_scale;
	int gbatch, rows, skip;

	if (r->comm->pipe_stages > 1)
		gbatch = pipeline_step(r, step, v);
	else
		gbatch = replica_step(r, step, 0, v, &rows);
	comm_wait(r->comm);
	comm_sum(r->comm, v, 2);
	*loss = v[0] / gbatch;
	if (!isfinite(*loss))
		return diverged(r, step, *loss, err);
	progress_phase(PH_OPTIMIZER);
	skip = apply_update(r, step, scale);
	if (r->dev->gpu)
		gpu_sync();
	slow_down(r);
	r->run_time += now_s() - t0;
	r->run_samples += gbatch;
	r->interval_samples += gbatch;
	log_step(r, step, *loss, skip);
	return DT_EXIT_OK;
}

/*
 * Every rank's parameters and optimiser state replaced by their mean, rank r
 * weighted by `weight` (the weights sum to 1 over the ranks).
 */
static void average_replicas(struct run *r, double weight)
{
	float *bufs[3] = { r->params, r->state[0], r->state[1] };
	size_t n = r->model.nr_params;

	if (r->comm->replicas == 1)
		return;
	for (int i = 0; i <= r->nr_state; i++) {
		r->dev->scale(bufs[i], n, (float)weight);
		comm_bucket_start(r->comm, bufs[i], n);
	}
	comm_wait(r->comm);
}

/*
 * --sync-overlap: the parameters' average (weighted by `weight`) started in
 * the background: a copy of them scaled and all-reduced (NCCL on its own
 * stream; MPI_Iallreduce, nudged after every step by comm_progress) while the
 * next round trains on the parameters themselves; snap keeps them as they
 * were.  average_finish() applies it at the end of that next round as
 * p += avg - snap: the average, plus the local steps taken since it started.
 * Those steps are one round stale: no average has seen them yet, and each
 * rank applied them on its own model.  The optimizer state is not averaged
 * here (the same delta could make Adam's second moment negative): it stays
 * each rank's own until the next blocking average.
 */
static void average_start(struct run *r, double weight)
{
	size_t n = r->model.nr_params, bytes = n * sizeof(float);

	if (!r->avg) {
		r->avg = r->dev->alloc(bytes);
		r->snap = r->dev->alloc(bytes);
	}
	r->dev->memset0(r->snap, bytes);
	r->dev->add(r->snap, r->snap, r->params, n);
	r->dev->memset0(r->avg, bytes);
	r->dev->add(r->avg, r->avg, r->params, n);
	r->dev->scale(r->avg, n, (float)weight);
	comm_bucket_start(r->comm, r->avg, n);
	r->avg_pending = 1;
	r->overlapped++;
}

static void average_finish(struct run *r)
{
	size_t n = r->model.nr_params;

	if (!r->avg_pending)
		return;
	comm_wait(r->comm);
	r->dev->scale(r->snap, n, -1.0f);
	r->dev->add(r->params, r->params, r->snap, n);
	r->dev->add(r->params, r->params, r->avg, n);
	r->avg_pending = 0;
}

static int crossed(long long from, long long to, long long every);

/*
 * --sync async: one round of local SGD steps, then the average.  Rank 0 takes
 * --sync-every steps (fewer at the end) and then tells the others; they step
 * until it does, at least once and at most as often as rank 0, so a slow rank
 * holds the others back by at most one of its steps per round.  Without MPI
 * to pace the rounds every rank takes rank 0's count.  Then parameters and
 * optimiser state are averaged, each rank weighted by the steps it took (a
 * straggler's model, one step from the last average, would otherwise pull
 * the others' progress back by half), and every rank goes on from rank 0's
 * step.
 * *loss: mean loss of every rank's last step.  DT_EXIT_*.
 */
static int async_round(struct run *r, long long *stepp, double *loss, struct strbuf *err)
{
	struct comm *c = r->comm;
	long long step = *stepp, end = step + r->cfg->sync_every, told;
	int pace = comm_can_pace(c), done = 0, taken = 0;
	/* last step's loss and rows, rows of the round, ranks with a NaN/Inf loss */
	double sums[4] = { 0.0, 0.0, 0.0, 0.0 }, t0 = now_s();

	if (end > r->total)
		end = r->total;
	while (!done) {
		double v[2] = { 0.0, 0.0 };
		float scale = (float)r->ck.loss_scale;
		int rows, gbatch = replica_step(r, step, 1, v, &rows), skip;

		if (!isfinite(v[0]))
			sums[3] = 1;
		skip = apply_update(r, step, scale);
		if (r->dev->gpu)
			gpu_sync();
		slow_down(r);
		sums[0] = v[0];
		sums[1] = rows;
		sums[2] += rows;
		r->local_steps++;
		taken++;
		/* the log's rate: rank 0's, as if every rank kept up */
		r->interval_samples += gbatch;
		log_step(r, step, rows ? v[0] / rows : 0.0, skip);
		if (r->avg_pending)
			comm_progress(c);
		step++;
		if (c->rank == 0 || !pace) {
			done = step == end;
			if (done && pace && c->rank == 0)
				comm_round_end(c, step);
		} else if (comm_round_test(c, &told, step == end)) {
			step = told;
			done = 1;
		}
	}
	{
		const struct train_config *cfg = r->cfg;
		double all = taken;
		/* blocking where every rank must hold the same model: the last round,
		 * validation, checkpoints (the same `end` on every rank: rank 0's) */
		int settle = !cfg->sync_overlap || end == r->total || c->replicas == 1 ||
			     crossed(*stepp, end, cfg->eval_every ? cfg->eval_every : r->bpe) ||
			     (cfg->checkpoint_dir && crossed(*stepp, end, cfg->checkpoint_every));

		comm_sum(c, &all, 1);
		average_finish(r);
		if (settle) {
			average_replicas(r, taken / all);
			r->blocking++;
		} else {
			average_start(r, taken / all);
		}
	}
	comm_sum(c, sums, 4);
	r->run_time += now_s() - t0;
	r->run_samples += sums[2];
	*loss = sums[1] > 0 ? sums[0] / sums[1] : NAN;
	*stepp = step;
	if (sums[3] > 0 || !isfinite(*loss)) {
		average_finish(r);   /* every rank gets here: no collective left in flight */
		return diverged(r, step - 1, sums[3] > 0 ? NAN : *loss, err);
	}
	return DT_EXIT_OK;
}

/* Validation at the end of a step (or round) that crossed a validation point. */
static void validate(struct run *r, long long step, double loss, double *val_loss,
		     double *val_acc, const char *what)
{
	evaluate(r, val_loss, val_acc);
	if (r->comm->rank == 0 && r->val.n) {
		json_t *j = metric_base(r, step, (double)step / r->bpe);

		if (isfinite(loss))
			json_object_set_new(j, "loss", json_real(loss));
		json_object_set_new(j, "val_loss", json_real(*val_loss));
		json_object_set_new(j, "val_acc", json_real(*val_acc));
		json_object_set_new(j, "time", json_real(round((now_s() - r->t0) * 1000) / 1000));
		metrics_line(r, j);
		if (!strcmp(what, "final"))
			printf("final step %lld val_loss %.4f val_acc %.4f\n", step, *val_loss,
			       *val_acc);
		else
			printf("epoch %lld step %lld val_loss %.4f val_acc %.4f\n",
			       (step - 1) / r->bpe + 1, step, *val_loss, *val_acc);
	}
}

/* Whether a multiple of `every` lies in (from, to]. */
static int crossed(long long from, long long to, long long every)
{
	return every > 0 && to / every > from / every;
}

static void print_header(struct run *r)
{
	const struct train_config *cfg = r->cfg;
	const struct comm *comm = r->comm;
	double np = (double)r->model.nr_params;

	printf("dttrain: %s, %.*f%s params, %d rank%s (%s) on %s, %d train / %d val rows, "
	       "batch %d (%d per %s", r->ck.arch, np < 1e6 ? 1 : 2, np < 1e6 ? np / 1e3 : np / 1e6,
	       np < 1e6 ? "K" : "M", comm->world,
	       comm->world > 1 ? "s" : "", comm_name(comm), r->dev->gpu ? "cuda" : "cpu",
	       r->train.n, r->val.n, cfg->batch, (cfg->batch + comm->replicas - 1) / comm->replicas,
	       comm->pipe_stages > 1 ? "replica" : "rank");
	if (cfg->accum > 1)
		printf(" in %d micro-batches", cfg->accum);
	printf("), %d steps/epoch, %lld steps\n", r->bpe, r->total);
	if (comm->pipe_stages > 1) {
		printf("pipeline: %d stages x %d replica%s (rank = replica * %d + stage), %d "
		       "micro-batches (%d in flight on stage 0), %s; layers", comm->pipe_stages,
		       comm->replicas, comm->replicas > 1 ? "s" : "", comm->pipe_stages,
		       cfg->micro_batches, r->slots, cfg->pipe_sched == PIPE_GPIPE ? "gpipe" : "1f1b");
		for (int s = 0; s < comm->pipe_stages; s++) {
			int a, b;

			train_stage_layers(&r->model, comm->pipe_stages, s, &a, &b);
			printf(" %s%d-%d", s ? "| " : "", a, b - 1);
		}
		printf("\n");
	}
	if (cfg->sync_kind == SYNC_ASYNC)
		printf("async: local SGD, parameters and optimizer state averaged every %d steps "
		       "(%s)%s\n", cfg->sync_every,
		       comm_can_pace(comm) ? "rank 0 paces the rounds" : "every rank counts",
		       cfg->sync_overlap ? "; overlapped: parameters averaged in the background, "
					   "applied one round late" : "");
	fflush(stdout);
}

/* The end of the run's summary lines: pipeline bubble, async steps per rank. */
static void print_parallel_summary(struct run *r, struct train_result *res)
{
	struct comm *c = r->comm;
	int rank0 = c->rank == 0;

	res->bubble = NAN;
	if (c->pipe_stages > 1) {
		double v[2] = { r->pipe_wait, r->pipe_time };
		int P = c->pipe_stages, M = r->cfg->micro_batches;

		comm_sum(c, v, 2);
		res->bubble = v[1] > 0 ? v[0] / v[1] : NAN;
		if (rank0 && v[1] > 0)
			printf("pipeline: bubble %.1f%% (time blocked on neighbouring stages; ideal "
			       "(P-1)/(M+P-1) = %.1f%%)\n", 100 * res->bubble,
			       100.0 * (P - 1) / (M + P - 1));
	}
	if (r->cfg->sync_kind == SYNC_ASYNC && c->world > 1) {
		double v[16] = { 0 };
		int n = c->world < 16 ? c->world : 16;

		if (c->rank < n)
			v[c->rank] = (double)r->local_steps;
		comm_sum(c, v, n);
		if (rank0) {
			printf("async: local steps per rank:");
			for (int i = 0; i < n; i++)
				printf(" %.0f", v[i]);
			printf("%s\n", n < c->world ? " ..." : "");
			if (r->cfg->sync_overlap)
				printf("async: %lld averages overlapped with training, %lld blocking\n",
				       r->overlapped, r->blocking);
		}
	}
}

/*
 * Preemption (docs/fairshare.md): a job of a preemptible class is told its
 * signal in DT_PREEMPT_SIGNAL; when it comes, every rank learns it at the
 * next step (one flag all-reduced per step, only then) and a checkpoint is
 * written there, which the requeued job resumes from ($DT_RESUME).
 */
static volatile sig_atomic_t preempt_flag;

static void on_preempt(int sig)
{
	(void)sig;
	preempt_flag = 1;
}

/* the signal watched (0: none): DT_PREEMPT_SIGNAL's, for a sync run that checkpoints */
static int preempt_watch(const struct train_config *cfg)
{
	const char *v = getenv_nonempty("DT_PREEMPT_SIGNAL");
	int sig = v ? parse_signal(v) : -1;
	struct sigaction sa;

	if (sig <= 0 || !cfg->checkpoint_dir || cfg->sync_kind == SYNC_ASYNC)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_preempt;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	return sigaction(sig, &sa, NULL) ? 0 : sig;
}

int train_run(struct train_config *cfg, struct comm *comm, struct train_result *res,
	      struct strbuf *err)
{
	struct run run, *r = &run;
	long long start, step;
	int code, rank0 = comm->rank == 0;
	double loss = NAN, val_loss = NAN, val_acc = NAN;
	long long last_eval = -1;
	const char *metrics_path;
	struct strbuf ckdir = STRBUF_INIT;
	int preempt_sig = 0;

	memset(r, 0, sizeof(*r));
	r->cfg = cfg;
	r->comm = comm;
	res->steps = 0;
	res->loss = res->val_loss = res->val_acc = res->bubble = NAN;
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
	preempt_sig = preempt_watch(cfg);
	sampler_init(&r->smp, r->train.n, cfg->batch, comm->replica, comm->replicas,
		     (uint64_t)cfg->seed);
	r->bpe = sampler_batches_per_epoch(&r->smp);
	r->total = cfg->steps > 0 ? cfg->steps : (long long)cfg->epochs * r->bpe;

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
	if (rank0 && !cfg->quiet)
		print_header(r);

	/* resumed at step `start`: its validation, if one was due, was reported before
	 * that checkpoint was written; the first report now is the next one */
	if (start > 0)
		last_eval = start;
	r->t0 = now_s();
	r->last_t = r->t0;
	progress_init(comm->rank);
	for (step = start; step < r->total;) {
		long long from = step;

		progress_step(step);

		if (cfg->sync_kind == SYNC_ASYNC)
			code = async_round(r, &step, &loss, err);
		else
			code = sync_step(r, step++, &loss, err);
		if (code) {
			res->agreed = 1;
			goto out;
		}
		if (crossed(from, step, cfg->eval_every ? cfg->eval_every : r->bpe)) {
			progress_phase(PH_EVAL);
			validate(r, step, loss, &val_loss, &val_acc, "epoch");
			last_eval = step;
		}
		if (cfg->checkpoint_dir && step < r->total &&
		    crossed(from, step, cfg->checkpoint_every) &&
		    save_checkpoint(r, step, r->bpe, err)) {
			code = DT_EXIT_FAIL;
			res->agreed = 1;
			goto out;
		}
		if (preempt_sig && step < r->total && comm_any(comm, preempt_flag)) {
			preempt_flag = 0;
			if (rank0)
				printf("SIG%s: preempted, checkpoint at step %lld\n",
				       sigabbrev_np(preempt_sig), step);
			if (save_checkpoint(r, step, r->bpe, err)) {
				code = DT_EXIT_FAIL;
				res->agreed = 1;
				goto out;
			}
		}
		if (rank0 && !cfg->quiet)
			fflush(stdout);
	}
	if (last_eval != r->total && r->val.n)
		validate(r, r->total, loss, &val_loss, &val_acc, "final");
	if (cfg->checkpoint_dir && save_checkpoint(r, r->total, r->bpe, err)) {
		code = DT_EXIT_FAIL;
		res->agreed = 1;
		goto out;
	}
	if (res->want_params || cfg->save_weights) {
		size_t bytes = r->model.nr_params * sizeof(float);

		gather_stages(r);
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
	print_parallel_summary(r, res);
	res->steps = r->total;
	res->loss = loss;
	res->val_loss = val_loss;
	res->val_acc = val_acc;
	res->samples_per_s = r->run_time > 0 ? r->run_samples / r->run_time : 0;
	if (rank0 && r->run_time > 0 && r->model.tokens_per_row > 1)
		printf("done: %lld steps, %.0f samples/s, %.0f tokens/s (training only)\n",
		       r->total - start, r->run_samples / r->run_time,
		       r->run_samples * r->model.tokens_per_row / r->run_time);
	else if (rank0 && r->run_time > 0)
		printf("done: %lld steps, %.0f samples/s (training only)\n", r->total - start,
		       r->run_samples / r->run_time);
out:
	fflush(stdout);
	release_run(r);
	if (cfg->checkpoint_dir == ckdir.buf)
		cfg->checkpoint_dir = NULL;
	strbuf_release(&ckdir);
	return code;
}
