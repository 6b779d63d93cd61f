/*
 * rng.c - xoshiro256** and the few distributions dtctl needs (see rng.h).
 */
#include "rng.h"

#include <math.h>

#define TWO_POW_M53 (1.0 / 9007199254740992.0)   /* 2^-53 */

static uint64_t splitmix64_next(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t rotl64(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64_next(&seed);
}

uint64_t rng_mix(uint64_t seed, uint64_t a, uint64_t b)
{
	uint64_t x = seed;

	x = splitmix64_next(&x) ^ a;
	x = splitmix64_next(&x) ^ b;
	return splitmix64_next(&x);
}

uint64_t rng_u64(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl64(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl64(s[3], 45);
	return result;
}

float rng_uniform(struct rng *r)
{
	return (float)(rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
	/* reject the incomplete last block of n values so every residue is equally likely */
	uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;

	do
		x = rng_u64(r);
	while (x >= limit);
	return x % n;
}

/* Box-Muller on two 53-bit uniforms; u1 lies in (0, 1] so the log is finite. */
static double box_muller(struct rng *r)
{
	double u1 = ((double)(rng_u64(r) >> 11) + 1.0) * TWO_POW_M53;
	double u2 = (double)(rng_u64(r) >> 11) * TWO_POW_M53;

	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

float rng_normal(struct rng *r)
{
	return (float)box_muller(r);
}

void rng_shuffle(struct rng *r, int *idx, size_t n)
{
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)rng_below(r, i);
		int t = idx[i - 1];

		idx[i - 1] = idx[j];
		idx[j] = t;
	}
}

double rng_uniform01(struct rng *r)
{
	return (double)(rng_u64(r) >> 11) * TWO_POW_M53;
}

double rng_gauss(struct rng *r)
{
	return box_muller(r);
}

size_t rng_choice(struct rng *r, const double *weights, size_t n)
{
	double total = 0, u, acc = 0;

	for (size_t i = 0; i < n; i++)
		total += weights[i];
	u = rng_uniform01(r) * total;
	for (size_t i = 0; i < n; i++) {
		acc += weights[i];
		if (u < acc && weights[i] > 0)
			return i;
	}
	/* rounding left u at the very top: the last index with weight */
	for (size_t i = n; i > 0; i--)
		if (weights[i - 1] > 0)
			return i - 1;
	return 0;
}
