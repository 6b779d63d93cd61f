/*
 * train.h - the training loop: data parallel, local SGD, pipeline stages.
 *
 * train_run() does everything after start-up: loads the data, picks the
 * device (CPU or the local GPU), sets up the collectives (comm_setup), builds
 * the model, resumes from a checkpoint if asked, trains, validates, writes
 * metrics and checkpoints.  Every rank runs the same code on its own shard;
 * the only cross-rank traffic is the gradient all-reduce (overlapped with
 * backward, bucket by bucket) and two small sums per step (loss, accuracy),
 * which also make every rank agree to stop on a NaN loss.
 *
 * Two other ways to split the work (docs/trainer.md): --sync async, local SGD
 * (each rank steps on its own gradients; parameters and optimiser state are
 * averaged every --sync-every steps, in rounds paced by rank 0), and
 * --pipeline P, the model's layers in P stages on P ranks (rank = replica * P
 * + stage), each step's batch in --micro-batches scheduled GPipe or 1F1B,
 * gradients all-reduced within each stage's data-parallel group.
 *
 * It returns an exit code (DT_EXIT_OK, DT_EXIT_FAIL, DT_EXIT_USAGE) and puts
 * one message in err on failure; rank 0 prints progress on stdout.  Fatal
 * CUDA/NCCL/MPI errors do not return (check.h).
 */
#ifndef DT_TRAINER_TRAIN_H
#define DT_TRAINER_TRAIN_H

#include <stddef.h>
#include "strbuf.h"
#include "trainer/comm.h"
#include "trainer/config.h"

struct train_result {
	long long steps;             /* optimiser steps done in all (including before a resume) */
	double loss;                 /* last training loss (global batch mean) */
	double val_loss, val_acc;    /* last validation, NAN if none */
	double samples_per_s;        /* training throughput over the whole run, rank 0's view */
	double bubble;               /* --pipeline: share of the schedule spent waiting; else NAN */
	int want_params;             /* set by the caller: copy the final parameters out */
	float *params;               /* then: xmalloc'd, nr_params floats, caller frees */
	size_t nr_params;
	int agreed;                  /* on failure: every rank saw it and stops (no abort needed) */
};

int train_run(struct train_config *cfg, struct comm *comm, struct train_result *res,
	      struct strbuf *err);

/*
 * --pipeline: layers [*a, *b) of stage s of `stages` (boundaries nearest to
 * equal shares of the parameters, at least one layer each), and the order of
 * a stage's passes over M micro-batches into ops[2M] (i: forward of
 * micro-batch i, -1 - i: its backward).
 */
struct model;
void train_stage_layers(const struct model *m, int stages, int s, int *a, int *b);
void train_pipe_schedule(enum pipe_sched kind, int M, int P, int stage, int *ops);

/* Learning rate at 0-based step `step` of `total` (warmup, then cosine or constant). */
double train_lr_at(const struct train_config *cfg, long long step, long long total);

#endif
