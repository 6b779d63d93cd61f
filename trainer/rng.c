/*
 * rng.c - xoshiro256** and the few distributions the trainer needs.
 */
#include "trainer/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

uint64_t rng_mix(uint64_t seed, uint64_t a, uint64_t b)
{
	uint64_t x = seed;

	x = splitmix64(&x) ^ a;
	x = splitmix64(&x) ^ b;
	return splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t rng_u64(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

float rng_uniform(struct rng *r)
{
	return (float)(rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
	uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;

	do
		x = rng_u64(r);
	while (x >= limit);
	return x % n;
}

float rng_normal(struct rng *r)
{
	/* u1 in (0, 1] so the log is finite */
	double u1 = ((double)(rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
	double u2 = (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);

	return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
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
