/*
 * test_trainer.c - dttrain above the kernels: YAML config files, datasets
 * (synthetic, IDX, CSV), the distributed sampler, and whole training runs on
 * one rank: learning the synthetic task to a fixed accuracy, bit-identical
 * resume from a checkpoint (SGD and AdamW, mid-epoch, with accumulation),
 * accumulation matching one big batch, and stopping on a NaN loss.
 *
 * Multi-rank equivalence (1 vs 2 vs 4 ranks under mpirun) is tested in
 * tests/e2e/test_trainer.py: MPI stays out of these ASan-built programs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strbuf.h"
#include "strvec.h"
#include "trainer/ckpt.h"
#include "trainer/comm.h"
#include "trainer/config.h"
#include "trainer/data.h"
#include "trainer/train.h"
#include "trainer_run.h"

static char tmpdir[64];

static int setup_tmp(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/dttrain-unit-XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
	struct strbuf cmd = STRBUF_INIT;
	int ret;

	strbuf_addf(&cmd, "rm -rf '%s'", tmpdir);
	ret = system(cmd.buf);
	strbuf_release(&cmd);
	return ret;
}

static const char *tmp_path(struct strbuf *sb, const char *name)
{
	strbuf_reset(sb);
	strbuf_addf(sb, "%s/%s", tmpdir, name);
	return sb->buf;
}

static void write_text(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");

	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
}

/* ------------------------------------------------------------- config */

static void test_config_yaml(void **state)
{
	struct train_config c;
	struct option opts[TRAIN_MAX_OPTIONS];
	struct strvec args = STRVEC_INIT;
	struct strbuf err = STRBUF_INIT, p = STRBUF_INIT;

	train_config_init(&c);
	train_options(&c, opts);
	write_text(tmp_path(&p, "ok.yaml"),
		   "# a job's trainer: section, flattened\n"
		   "model: mlp\nhidden: [256, 128]\nlr: 0.05\ncheckpoint_dir: /tmp/x\nquiet: true\n");
	assert_int_equal(train_config_yaml(p.buf, opts, &args, &err), 0);
	assert_int_equal(args.nr, 5);
	assert_string_equal(args.v[0], "--model=mlp");
	assert_string_equal(args.v[1], "--hidden=256,128");
	assert_string_equal(args.v[2], "--lr=0.05");
	assert_string_equal(args.v[3], "--checkpoint-dir=/tmp/x");
	assert_string_equal(args.v[4], "--quiet");
	strvec_clear(&args);

	write_text(tmp_path(&p, "typo.yaml"), "lr: 0.1\nepohcs: 3\n");
	assert_int_equal(train_config_yaml(p.buf, opts, &args, &err), -1);
	assert_non_null(strstr(err.buf, "typo.yaml:2:1: unknown key 'epohcs'; did you mean 'epochs'?"));
	strbuf_reset(&err);
	strvec_clear(&args);

	write_text(tmp_path(&p, "nested.yaml"), "lr: 0.1\ndata:\n  kind: synthetic\n");
	assert_int_equal(train_config_yaml(p.buf, opts, &args, &err), -1);
	assert_non_null(strstr(err.buf, "nested.yaml:3:3: key 'data': expected a value or a list"));
	strbuf_reset(&err);
	strvec_clear(&args);

	write_text(tmp_path(&p, "dup.yaml"), "lr: 0.1\nlr: 0.2\n");
	assert_int_equal(train_config_yaml(p.buf, opts, &args, &err), -1);
	assert_non_null(strstr(err.buf, "dup.yaml:2:1: key 'lr' given twice"));
	strbuf_reset(&err);
	strvec_clear(&args);

	write_text(tmp_path(&p, "bool.yaml"), "quiet: maybe\n");
	assert_int_equal(train_config_yaml(p.buf, opts, &args, &err), -1);
	assert_non_null(strstr(err.buf, "bool.yaml:1:8: key 'quiet': expected true or false"));
	strbuf_reset(&err);
	strvec_clear(&args);

	write_text(tmp_path(&p, "bad.yaml"), "lr: [0.1\n");
	assert_int_equal(train_config_yaml(p.buf, opts, &args, &err), -1);
	assert_non_null(strstr(err.buf, "bad.yaml:"));
	strbuf_reset(&err);
	strvec_clear(&args);

	write_text(tmp_path(&p, "empty.yaml"), "");
	assert_int_equal(train_config_yaml(p.buf, opts, &args, &err), 0);
	assert_int_equal(args.nr, 0);
	strbuf_release(&err);
	strbuf_release(&p);
}

static void test_config_check(void **state)
{
	struct train_config c;
	struct strbuf err = STRBUF_INIT;

	train_config_init(&c);
	assert_int_equal(train_config_check(&c, &err), 0);
	assert_int_equal(c.spec.nr_hidden, 2);
	assert_int_equal(c.spec.hidden[1], 1024);
	c.hidden = "";
	assert_int_equal(train_config_check(&c, &err), 0);
	assert_int_equal(c.spec.nr_hidden, 0);
	c.hidden = "64,x";
	assert_int_equal(train_config_check(&c, &err), -1);
	assert_non_null(strstr(err.buf, "'--hidden'"));
	strbuf_reset(&err);
	c.hidden = "64";
	c.optimizer = "lion";
	assert_int_equal(train_config_check(&c, &err), -1);
	assert_string_equal(err.buf, "unknown optimizer 'lion' (expected sgd, adamw)");
	strbuf_reset(&err);
	c.optimizer = "adamw";
	c.device = "cpu";
	c.precision = "bf16";
	assert_int_equal(train_config_check(&c, &err), -1);
	assert_non_null(strstr(err.buf, "needs a GPU"));
	strbuf_release(&err);
}

/* --------------------------------------------------------------- data */

static void test_synthetic_data(void **state)
{
	struct data_opts o = DATA_OPTS_INIT;
	struct dataset a, av, b, bv;
	struct strbuf err = STRBUF_INIT;
	int counts[4] = { 0 }, most = 0;

	o.train_size = 300;
	o.val_size = 200;
	o.input_dim = 8;
	o.classes = 4;
	assert_int_equal(data_load(&a, &av, &o, &err), 0);
	assert_int_equal(a.n, 300);
	assert_int_equal(av.n, 200);
	assert_int_equal(a.classes, 4);
	o.train_size = 100;   /* validation rows do not depend on the training size */
	assert_int_equal(data_load(&b, &bv, &o, &err), 0);
	assert_memory_equal(av.x, bv.x, 200 * 8 * sizeof(float));
	assert_memory_equal(a.x, b.x, 100 * 8 * sizeof(float));
	assert_memory_equal(a.y, b.y, 100 * sizeof(int));
	for (int i = 0; i < a.n; i++) {
		assert_in_range(a.y[i], 0, 3);
		counts[a.y[i]]++;
	}
	for (int c = 0; c < 4; c++)
		most = counts[c] > most ? counts[c] : most;
	assert_true(most < 0.6 * a.n);   /* not one dominant class: the task is not trivial */
	dataset_release(&a);
	dataset_release(&av);
	dataset_release(&b);
	dataset_release(&bv);
	strbuf_release(&err);
}

static void put_be32(FILE *fp, uint32_t v)
{
	unsigned char b[4] = { v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff };

	fwrite(b, 1, 4, fp);
}

static void test_idx_data(void **state)
{
	struct strbuf p = STRBUF_INIT, q = STRBUF_INIT, err = STRBUF_INIT, spec = STRBUF_INIT;
	struct data_opts o = DATA_OPTS_INIT;
	struct dataset tr, va;
	FILE *fp;

	/* 10 images of 2x3 bytes, MNIST layout */
	fp = fopen(tmp_path(&p, "train-images-idx3-ubyte"), "wb");
	assert_non_null(fp);
	fputc(0, fp); fputc(0, fp); fputc(0x08, fp); fputc(3, fp);
	put_be32(fp, 10); put_be32(fp, 2); put_be32(fp, 3);
	for (int i = 0; i < 60; i++)
		fputc(i * 4, fp);
	fclose(fp);
	fp = fopen(tmp_path(&q, "train-labels-idx1-ubyte"), "wb");
	assert_non_null(fp);
	fputc(0, fp); fputc(0, fp); fputc(0x08, fp); fputc(1, fp);
	put_be32(fp, 10);
	for (int i = 0; i < 10; i++)
		fputc(i % 3, fp);
	fclose(fp);

	strbuf_addf(&spec, "idx:%s,%s", p.buf, q.buf);
	o.spec = spec.buf;
	o.val_fraction = 0.2;
	if (data_load(&tr, &va, &o, &err))
		fail_msg("%s", err.buf);
	assert_int_equal(tr.n, 8);
	assert_int_equal(va.n, 2);
	assert_int_equal(tr.dim, 6);
	assert_int_equal(tr.classes, 3);
	for (int i = 0; i < tr.n * 6; i++)
		assert_true(tr.x[i] >= 0.0f && tr.x[i] <= 1.0f);
	dataset_release(&tr);
	dataset_release(&va);

	/* the directory form; no t10k files, so a held-out split */
	strbuf_reset(&spec);
	strbuf_addf(&spec, "idx:%s", tmpdir);
	o.spec = spec.buf;
	if (data_load(&tr, &va, &o, &err))
		fail_msg("%s", err.buf);
	assert_int_equal(tr.n + va.n, 10);
	assert_float_equal(tr.x[0] * 255.0f, roundf(tr.x[0] * 255.0f), 1e-4);
	dataset_release(&tr);
	dataset_release(&va);

	/* truncated file: a message naming it */
	assert_int_equal(truncate(p.buf, 30), 0);
	strbuf_reset(&spec);
	strbuf_addf(&spec, "idx:%s,%s", p.buf, q.buf);
	o.spec = spec.buf;
	assert_int_equal(data_load(&tr, &va, &o, &err), -1);
	assert_non_null(strstr(err.buf, "IDX header says"));
	strbuf_release(&p);
	strbuf_release(&q);
	strbuf_release(&err);
	strbuf_release(&spec);
}

static void test_csv_data(void **state)
{
	struct strbuf p = STRBUF_INIT, err = STRBUF_INIT, spec = STRBUF_INIT;
	struct data_opts o = DATA_OPTS_INIT;
	struct dataset tr, va;

	write_text(tmp_path(&p, "d.csv"), "label,a,b\n1, 0.5, 2\n0,1e-3,-4\n\n2,7,8\n");
	strbuf_addf(&spec, "csv:%s", p.buf);
	o.spec = spec.buf;
	o.val_fraction = 0;
	assert_int_equal(data_load(&tr, &va, &o, &err), 0);
	assert_int_equal(tr.n, 3);
	assert_int_equal(tr.dim, 2);
	assert_int_equal(tr.classes, 3);
	assert_int_equal(va.n, 0);
	assert_float_equal(tr.x[1], 2.0f, 0);
	assert_float_equal(tr.x[2], 1e-3f, 0);
	assert_int_equal(tr.y[2], 2);
	dataset_release(&tr);
	dataset_release(&va);

	write_text(p.buf, "1,2,3\n0,1\n");
	assert_int_equal(data_load(&tr, &va, &o, &err), -1);
	assert_non_null(strstr(err.buf, "d.csv:2: 2 fields, expected 3"));
	strbuf_reset(&err);
	write_text(p.buf, "1,2,3\n0.5,1,1\n");
	assert_int_equal(data_load(&tr, &va, &o, &err), -1);
	assert_non_null(strstr(err.buf, "d.csv:2: label '0.5'"));
	strbuf_reset(&err);
	o.spec = "parquet:x";
	assert_int_equal(data_load(&tr, &va, &o, &err), -1);
	assert_non_null(strstr(err.buf, "unknown data source 'parquet:x'"));
	strbuf_release(&p);
	strbuf_release(&err);
	strbuf_release(&spec);
}

/* ------------------------------------------------------------ sampler */

/* 23 rows, global batch 8 (last batch 7), 3 ranks, 2 micro-batches */
static void test_sampler(void **state)
{
	enum { N = 23, B = 8, W = 3, PARTS = 2 };
	struct sampler s[W], one;
	int seen[N], bpe;

	for (int r = 0; r < W; r++)
		sampler_init(&s[r], N, B, r, W, 42);
	sampler_init(&one, N, B, 0, 1, 42);
	bpe = sampler_batches_per_epoch(&s[0]);
	assert_int_equal(bpe, 3);
	for (int epoch = 0; epoch < 2; epoch++) {
		memset(seen, 0, sizeof(seen));
		sampler_set_epoch(&one, epoch);
		for (int b = 0; b < bpe; b++) {
			int in_batch[N] = { 0 }, total = 0, g = 0;

			for (int r = 0; r < W; r++) {
				sampler_set_epoch(&s[r], epoch);
				for (int part = 0; part < PARTS; part++) {
					const int *rows;
					int cnt;

					g = sampler_slice(&s[r], b, part, PARTS, &rows, &cnt);
					for (int i = 0; i < cnt; i++) {
						seen[rows[i]]++;
						in_batch[rows[i]]++;
					}
					total += cnt;
				}
			}
			assert_int_equal(total, g);
			assert_int_equal(g, b < 2 ? 8 : 7);
			/* the same rows as one rank's global batch */
			{
				const int *rows;
				int cnt;

				sampler_slice(&one, b, 0, 1, &rows, &cnt);
				assert_int_equal(cnt, g);
				for (int i = 0; i < cnt; i++)
					assert_int_equal(in_batch[rows[i]], 1);
			}
		}
		for (int i = 0; i < N; i++)   /* disjoint shards covering the epoch */
			assert_int_equal(seen[i], 1);
	}
	/* epochs are reshuffled */
	sampler_set_epoch(&one, 0);
	{
		int e0[N];

		memcpy(e0, one.perm, sizeof(e0));
		sampler_set_epoch(&one, 1);
		assert_memory_not_equal(e0, one.perm, sizeof(e0));
	}
	for (int r = 0; r < W; r++)
		sampler_release(&s[r]);
	sampler_release(&one);
}

/* ----------------------------------------------------------- training */

static void test_learns_synthetic(void **state)
{
	struct train_config c;
	struct train_result res;
	struct strbuf metrics = STRBUF_INIT, text = STRBUF_INIT;

	train_config_init(&c);
	c.hidden = "64";
	c.input_dim = 16;
	c.classes = 4;
	c.train_size = 2048;
	c.val_size = 512;
	c.batch = 64;
	c.lr = 0.05;
	c.epochs = 4;
	c.quiet = 1;
	c.device = "cpu";
	c.threads = 1;
	c.log_every = 8;
	c.metrics = tmp_path(&metrics, "metrics.jsonl");
	assert_int_equal(run(&c, &res), 0);
	assert_int_equal(res.steps, 128);
	if (!(res.val_acc >= 0.80))
		fail_msg("validation accuracy %.4f after 4 epochs, expected >= 0.80", res.val_acc);
	assert_true(res.val_loss < 0.6);
	/* metrics: JSON lines, training lines and one validation line per epoch */
	assert_true(strbuf_read_file(&text, metrics.buf, 0) > 0);
	assert_non_null(strstr(text.buf, "{\"step\": 8, \"epoch\": 0.25, \"loss\": "));
	assert_non_null(strstr(text.buf, "\"samples_per_s\": "));
	assert_non_null(strstr(text.buf, "{\"step\": 128, \"epoch\": 4.0, \"loss\": "));
	assert_non_null(strstr(text.buf, "\"val_acc\": "));
	free(res.params);
	strbuf_release(&metrics);
	strbuf_release(&text);
}

static void check_resume(const char *optimizer, int accum, int every)
{
	struct train_config c;
	struct train_result full, part;
	struct strbuf dir = STRBUF_INIT, ck = STRBUF_INIT, err = STRBUF_INIT;
	char name[64];

	small_config(&c);
	c.optimizer = optimizer;
	c.lr = !strcmp(optimizer, "adamw") ? 0.003 : 0.05;
	c.accum = accum;
	c.epochs = 3;           /* 13 batches per epoch, 39 steps */
	c.warmup = 5;
	c.weight_decay = 0.01;
	c.clip = 1.0;
	snprintf(name, sizeof(name), "ck-%s-%d", optimizer, accum);
	c.checkpoint_dir = tmp_path(&dir, name);
	c.checkpoint_every = every;   /* mid-epoch */
	c.keep_checkpoints = 100;
	assert_int_equal(run(&c, &full), 0);
	assert_int_equal(full.steps, 39);

	strbuf_addf(&ck, "%s/step-%09d.ckpt", dir.buf, every);
	c.resume = ck.buf;
	c.checkpoint_dir = NULL;
	assert_int_equal(run(&c, &part), 0);
	assert_int_equal(part.nr_params, full.nr_params);
	assert_memory_equal(part.params, full.params, full.nr_params * sizeof(float));
	assert_true(part.val_loss == full.val_loss);

	/* the directory form follows 'latest' (the final checkpoint): nothing left to do */
	free(part.params);
	c.resume = dir.buf;
	assert_int_equal(run(&c, &part), 0);
	assert_memory_equal(part.params, full.params, full.nr_params * sizeof(float));

	/* a different architecture is refused with both names */
	free(part.params);
	c.resume = ck.buf;
	c.hidden = "32,17";
	{
		struct comm comm;

		memset(&comm, 0, sizeof(comm));
		comm.world = comm.local_world = 1;
		assert_int_equal(train_config_check(&c, &err), 0);
		memset(&part, 0, sizeof(part));
		assert_int_equal(train_run(&c, &comm, &part, &err), DT_EXIT_USAGE);
		assert_non_null(strstr(err.buf, "is for 'mlp 12-32-16-3 relu'"));
	}
	free(full.params);
	strbuf_release(&dir);
	strbuf_release(&ck);
	strbuf_release(&err);
}

static void test_resume_sgd(void **state)
{
	check_resume("sgd", 1, 17);
}

static void test_resume_adamw_accum(void **state)
{
	check_resume("adamw", 2, 9);
}

/*
 * A resume reports what comes after its checkpoint, never again what came
 * before: from the end of epoch 1 the first validation is epoch 2's, and
 * from the final checkpoint (a sweep trial promoted after it had trained to
 * the end) there is none (it used to report the last epoch again).
 */
static void test_resume_reports_next_epoch(void **state)
{
	struct train_config c;
	struct train_result res;
	struct strbuf dir = STRBUF_INIT, ck = STRBUF_INIT, metrics = STRBUF_INIT;
	struct strbuf text = STRBUF_INIT;

	small_config(&c);
	c.epochs = 3;           /* 13 batches per epoch, 39 steps */
	c.checkpoint_dir = tmp_path(&dir, "ck-epochs");
	c.checkpoint_every = 13;
	c.keep_checkpoints = 100;
	assert_int_equal(run(&c, &res), 0);
	free(res.params);

	strbuf_addf(&ck, "%s/step-%09d.ckpt", dir.buf, 13);
	c.resume = ck.buf;
	c.checkpoint_dir = NULL;
	c.metrics = tmp_path(&metrics, "resume-epoch1.jsonl");
	assert_int_equal(run(&c, &res), 0);
	free(res.params);
	assert_true(strbuf_read_file(&text, metrics.buf, 0) > 0);
	if (strncmp(text.buf, "{\"step\": 26, \"epoch\": 2.0, ", 26))
		fail_msg("resumed at step 13, first report: %s", text.buf);

	c.resume = dir.buf;     /* 'latest': the final checkpoint, step 39 */
	c.metrics = tmp_path(&metrics, "resume-end.jsonl");
	assert_int_equal(run(&c, &res), 0);
	free(res.params);
	strbuf_reset(&text);
	assert_int_equal(strbuf_read_file(&text, metrics.buf, 0), 0);
	if (text.len)
		fail_msg("resumed at the end, reported again: %s", text.buf);
	strbuf_release(&dir);
	strbuf_release(&ck);
	strbuf_release(&metrics);
	strbuf_release(&text);
}

/* A checkpoint file is all-or-nothing and checksummed. */
static void test_checkpoint_corrupt(void **state)
{
	struct strbuf dir = STRBUF_INIT, file = STRBUF_INIT, err = STRBUF_INIT;
	struct ckpt_state st, got;
	float p[4] = { 1, 2, 3, 4 }, m[4] = { 5, 6, 7, 8 }, q[4], mq[4];
	const float *state_in[1] = { m };
	float *state_out[1] = { mq };
	FILE *fp;

	memset(&st, 0, sizeof(st));
	snprintf(st.arch, sizeof(st.arch), "mlp 1-4 relu");
	snprintf(st.optimizer, sizeof(st.optimizer), "sgd");
	st.nr_params = 4;
	st.nr_state = 1;
	st.step = 7;
	st.rng.s[0] = 0xffffffffffffffffULL;
	tmp_path(&dir, "ck-corrupt");
	assert_int_equal(ckpt_save(dir.buf, &st, p, state_in, 2, &file, &err), 0);
	assert_int_equal(ckpt_load(file.buf, &st, &got, q, state_out, &err), 0);
	assert_memory_equal(q, p, sizeof(p));
	assert_memory_equal(mq, m, sizeof(m));
	assert_true(got.rng.s[0] == 0xffffffffffffffffULL);
	assert_int_equal(got.step, 7);
	fp = fopen(file.buf, "r+b");
	assert_non_null(fp);
	fseek(fp, -3, SEEK_END);
	fputc(0x55, fp);
	fclose(fp);
	assert_int_equal(ckpt_load(file.buf, &st, &got, q, state_out, &err), -1);
	assert_non_null(strstr(err.buf, "checksum mismatch"));
	strbuf_release(&dir);
	strbuf_release(&file);
	strbuf_release(&err);
}

/* Splitting the batch into micro-batches changes rounding only. */
static void test_accum_matches_batch(void **state)
{
	struct train_config c;
	struct train_result a, b;

	small_config(&c);
	c.steps = 20;
	assert_int_equal(run(&c, &a), 0);
	c.accum = 4;
	assert_int_equal(run(&c, &b), 0);
	for (size_t i = 0; i < a.nr_params; i++)
		assert_float_equal(a.params[i], b.params[i], 1e-5 + 1e-4 * fabsf(a.params[i]));
	free(a.params);
	free(b.params);
}

static void test_nan_stops(void **state)
{
	struct train_config c;
	struct train_result res;
	struct comm comm;
	struct strbuf err = STRBUF_INIT;

	small_config(&c);
	c.lr = 1e30;
	c.momentum = 0;
	c.schedule = "constant";
	memset(&comm, 0, sizeof(comm));
	comm.world = comm.local_world = 1;
	assert_int_equal(train_config_check(&c, &err), 0);
	memset(&res, 0, sizeof(res));
	assert_int_equal(train_run(&c, &comm, &res, &err), DT_EXIT_FAIL);
	assert_true(res.agreed);
	assert_non_null(strstr(err.buf, "training diverged"));
	strbuf_release(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_yaml),
		cmocka_unit_test(test_config_check),
		cmocka_unit_test(test_synthetic_data),
		cmocka_unit_test(test_idx_data),
		cmocka_unit_test(test_csv_data),
		cmocka_unit_test(test_sampler),
		cmocka_unit_test(test_learns_synthetic),
		cmocka_unit_test(test_resume_sgd),
		cmocka_unit_test(test_resume_reports_next_epoch),
		cmocka_unit_test(test_resume_adamw_accum),
		cmocka_unit_test(test_checkpoint_corrupt),
		cmocka_unit_test(test_accum_matches_batch),
		cmocka_unit_test(test_nan_stops),
	};

	return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
