/*
 * rng.h - the trainer's deterministic random numbers.
 *
 * xoshiro256** seeded through splitmix64: the same seed gives the same stream
 * on every rank, host and build, which is what makes runs reproducible and
 * resumable (the 32-byte state goes into checkpoints).  Not for secrets.
 */
#ifndef DT_TRAINER_RNG_H
#define DT_TRAINER_RNG_H

#include <stddef.h>
#include <stdint.h>

struct rng {
	uint64_t s[4];
};

void rng_seed(struct rng *r, uint64_t seed);
/* A seed derived from (seed, a, b): independent streams per epoch, layer, ... */
uint64_t rng_mix(uint64_t seed, uint64_t a, uint64_t b);
uint64_t rng_u64(struct rng *r);
/* Uniform in [0, 1) with 24 random bits (exact in float). */
float rng_uniform(struct rng *r);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t rng_below(struct rng *r, uint64_t n);
/* Standard normal (Box-Muller, one value per call). */
float rng_normal(struct rng *r);
/* Fisher-Yates shuffle of idx[0..n). */
void rng_shuffle(struct rng *r, int *idx, size_t n);

#endif
