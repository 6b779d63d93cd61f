/*
 * data.h - datasets and the distributed sampler.
 *
 * A dataset is held in memory, whole, on every rank: features [n, dim] as
 * float and integer labels in [0, classes).  Sources ("--data"):
 *
 *   synthetic        deterministic by seed; labels come from a random
 *                    "teacher" network, so a student MLP can learn them
 *   idx:DIR          MNIST-style IDX files: DIR/train-images-idx3-ubyte and
 *                    DIR/train-labels-idx1-ubyte (+ t10k-* as validation)
 *   idx:IMAGES,LABELS  two IDX files
 *   csv:PATH         one row per sample: label, then the features; a first
 *                    line that does not parse as numbers is a header
 *   text:PATH        byte-level language modelling (--model gpt): the file's
 *                    bytes are the tokens; a row is a window of context + 1
 *                    bytes (the input, and shifted by one the targets), as
 *                    floats; y is unused (0)
 *
 * Text: the last --val-fraction of the file is the validation text, cut into
 * non-overlapping windows (at most --val-size of them); the training set is
 * every window of the rest, one row per start offset, read from the text
 * itself when gathered (not stored as floats), so an epoch is one window
 * starting at each byte and the sampler's shuffled batches are random
 * contexts, different on each rank.
 *
 * Without a separate validation file, a seeded --val-fraction of the rows is
 * held out.  Unsigned-byte IDX images are scaled to [0, 1].
 *
 * The sampler gives DistributedSampler semantics with one extra property the
 * tests rely on: each epoch the N training rows are permuted with a seed that
 * every rank shares; global batch b is positions [bB, (b+1)B) of that
 * permutation (the last one may be partial), and rank r takes the r-th
 * contiguous slice of it.  Shards are disjoint, cover the epoch, and the
 * global batch is the same set of rows whatever the number of ranks, so
 * the maths does not depend on it.
 */
#ifndef DT_TRAINER_DATA_H
#define DT_TRAINER_DATA_H

#include <stdint.h>
#include "strbuf.h"

struct dataset {
	int n, dim, classes;
	float *x;                /* [n, dim]; NULL for text windows */
	int *y;                  /* [n] */
	unsigned char *text;     /* text:, training set: row i is text[i .. i + dim) */
};

struct data_opts {
	const char *spec;        /* synthetic | idx:... | csv:... */
	uint64_t seed;
	int train_size, val_size;        /* synthetic */
	int input_dim, classes;          /* synthetic */
	int teacher_hidden;              /* synthetic */
	double val_fraction;             /* idx/csv without a validation file, text */
	int context, vocab;              /* text: tokens per input, byte values allowed */
};

#define DATA_OPTS_INIT { "synthetic", 1, 16384, 4096, 784, 10, 64, 0.1, 64, 256 }

/* Load train and validation sets; 0, or -1 with a message in err. */
int data_load(struct dataset *train, struct dataset *val, const struct data_opts *o,
	      struct strbuf *err);
void dataset_release(struct dataset *d);

/* Gather rows idx[0..n) into x [n, dim] and y [n]. */
void dataset_gather(const struct dataset *d, const int *idx, int n, float *x, int *y);

struct sampler {
	int n;                   /* rows in the training set */
	int global_batch;
	int rank, world;
	uint64_t seed;
	int epoch;               /* of perm; -1 before the first sampler_set_epoch */
	int *perm;
};

void sampler_init(struct sampler *s, int n, int global_batch, int rank, int world, uint64_t seed);
void sampler_release(struct sampler *s);
/* Permutation of this epoch, from (seed, epoch) only: resuming mid-epoch
 * rebuilds the same order. */
void sampler_set_epoch(struct sampler *s, int epoch);
int sampler_batches_per_epoch(const struct sampler *s);
/*
 * Rows of global batch b for this rank, split further into `parts` micro-
 * batches: *rows points into the permutation, *count rows for micro-batch
 * `part`; returns the size of the whole global batch (for normalisation).
 */
int sampler_slice(const struct sampler *s, int b, int part, int parts, const int **rows, int *count);

/* Even split of `total` items into `parts`: start and length of part i. */
void split_range(int total, int parts, int i, int *start, int *len);

#endif
