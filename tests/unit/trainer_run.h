/*
 * trainer_run.h - what the trainer's unit tests share (test_trainer.c, test_trainer_gpt.c,
 * test_trainer_parallel.c): a small synthetic task and whole runs of
 * train_run() on one rank, without MPI.  Included by the test programs only.
 */
#ifndef DT_TESTS_TRAINER_RUN_H
#define DT_TESTS_TRAINER_RUN_H

#include <stdio.h>
#include <string.h>

#include "strbuf.h"
#include "trainer/comm.h"
#include "trainer/config.h"
#include "trainer/train.h"

/* MLP 12-32-16-3 on 400 synthetic rows, batch 32, one CPU thread, quiet. */
static inline void small_config(struct train_config *c)
{
	train_config_init(c);
	c->hidden = "32,16";
	c->input_dim = 12;
	c->classes = 3;
	c->train_size = 400;
	c->val_size = 100;
	c->batch = 32;
	c->lr = 0.05;
	c->quiet = 1;
	c->log_every = 0;
	c->device = "cpu";
	c->threads = 1;
}

/* Check c and train on one rank, final parameters in res; the exit code, err says why. */
static inline int run_err(struct train_config *c, struct train_result *res, struct strbuf *err)
{
	struct comm comm;
	int code;

	memset(&comm, 0, sizeof(comm));
	comm.world = comm.local_world = 1;
	snprintf(comm.host, sizeof(comm.host), "test");
	assert_int_equal(train_config_check(c, err), 0);
	memset(res, 0, sizeof(*res));
	res->want_params = 1;
	code = train_run(c, &comm, res, err);
	comm_finish(&comm);
	return code;
}

/* The same, printing the error of a failed run. */
static inline int run(struct train_config *c, struct train_result *res)
{
	struct strbuf err = STRBUF_INIT;
	int code = run_err(c, res, &err);

	if (code)
		print_message("train_run: %s\n", err.buf);
	strbuf_release(&err);
	return code;
}

#endif
