/* rng.h: a small deterministic generator (SplitMix64) for synthetic weights, images and tests;
 * the same seed gives the same numbers on every machine. */
#ifndef AS_RNG_H
#define AS_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t s;
} rng_state;

static inline uint64_t rng_next(rng_state *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* uniform in [0, 1) with 24 random bits */
static inline float rng_uniform(rng_state *r) { return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f); }
/* standard normal (Box-Muller) */
static inline float rng_normal(rng_state *r) {
    float u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958648f * u2);
}

#endif
