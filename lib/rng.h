/*
 * rng.h - deterministic, seedable random numbers for every dtctl program.
 *
 * xoshiro256** (Blackman & Vigna) seeded through splitmix64: 32 bytes of
 * state, fast, and the same stream for the same seed on every host and build,
 * which is what makes training runs and sweeps reproducible and resumable.
 * Not for secrets: keys, nonces and tokens come from OpenSSL.
 *
 * The first block of functions has the same names, signatures and streams as
 * trainer/rng.h (the trainer's copy, which predates this one), so the trainer
 * can switch to this header without changing a single output; the second
 * block adds the double-precision helpers the sweep search needs.
 *
 * A struct rng is a plain value: copy it to fork a stream, store its s[] to
 * resume.  Call rng_seed() before anything else.
 */
#ifndef DT_RNG_H
#define DT_RNG_H

#include <stddef.h>
#include <stdint.h>

struct rng {
	uint64_t s[4];
};

void rng_seed(struct rng *r, uint64_t seed);
/* A seed derived from (seed, a, b): independent streams per epoch, trial, ... */
uint64_t rng_mix(uint64_t seed, uint64_t a, uint64_t b);
uint64_t rng_u64(struct rng *r);
/* Uniform in [0, 1) with 24 random bits (exact in float). */
float rng_uniform(struct rng *r);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t rng_below(struct rng *r, uint64_t n);
/* Standard normal (Box-Muller, one value per call, two draws). */
float rng_normal(struct rng *r);
/* Fisher-Yates shuffle of idx[0..n). */
void rng_shuffle(struct rng *r, int *idx, size_t n);

/* Uniform in [0, 1) with 53 random bits (every double of the form k/2^53). */
double rng_uniform01(struct rng *r);
/* Standard normal in double precision (Box-Muller, one value per call). */
double rng_gauss(struct rng *r);
/*
 * Index in [0, n) drawn with probability weights[i] / sum(weights).  Weights
 * must be >= 0 and finite with a positive sum; n > 0.  One draw per call.
 */
size_t rng_choice(struct rng *r, const double *weights, size_t n);

#endif
