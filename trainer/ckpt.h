/*
 * ckpt.h - training checkpoints.
 *
 * A checkpoint is one file: the 8-byte magic "DTCKPT01", a little-endian
 * uint32 length, a JSON header (model architecture, step, data position, RNG
 * state, loss scale, checksum), zero padding to a 64-byte boundary, then the
 * float32 arrays: parameters, then the optimiser's state (1 array for SGD
 * momentum, 2 for AdamW), nr_params values each.  It is written whole with
 * write_file_atomic() (temp file, fsync, rename), so a reader never sees a
 * partial one; `latest` in the same directory names the newest (also
 * replaced atomically).  Everything needed to continue bit for bit is in it.
 */
#ifndef DT_TRAINER_CKPT_H
#define DT_TRAINER_CKPT_H

#include <stddef.h>
#include "strbuf.h"
#include "rng.h"

struct ckpt_state {
	char arch[256];          /* e.g. "mlp 784-1024-1024-10 relu"; must match on load */
	size_t nr_params;
	int nr_state;            /* optimiser arrays after the parameters (1 or 2) */
	char optimizer[16];
	long long step;          /* optimiser steps done */
	int epoch;               /* epoch and batch index of the NEXT step */
	int batch_in_epoch;
	long long seed;
	int world;               /* ranks when written (informational) */
	struct rng rng;
	double loss_scale;
	long long good_steps;    /* fp16: steps since the last overflow */
};

/* Write DIR/step-<step>.ckpt and DIR/latest; remove older checkpoints beyond `keep`. */
int ckpt_save(const char *dir, const struct ckpt_state *st, const float *params,
	      const float *const *state, int keep, struct strbuf *path_out, struct strbuf *err);
/*
 * Find the checkpoint a resume path means: a file, or a directory whose
 * `latest` names one.  Returns 1 and fills out, 0 when the directory holds
 * no checkpoint yet, -1 on error.
 */
int ckpt_resolve(const char *path, struct strbuf *out, struct strbuf *err);
/* Read the header only (to check the architecture before allocating). */
int ckpt_read_header(const char *path, struct ckpt_state *st, struct strbuf *err);
/* Read everything; `st->arch` and nr_params of the file must equal want's. */
int ckpt_load(const char *path, const struct ckpt_state *want, struct ckpt_state *st,
	      float *params, float *const *state, struct strbuf *err);

#endif
