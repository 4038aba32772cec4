/* rng.h — xoshiro256** seeded through splitmix64: the one PRNG of the library (model
 * generator, sampler). State is always the caller's; nothing global. */
#ifndef DSV4_UTIL_RNG_H
#define DSV4_UTIL_RNG_H

#include <stdint.h>

typedef struct dsv4_rng { uint64_t s[4]; } dsv4_rng;

static inline uint64_t dsv4_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Fills the state from a 64-bit seed (splitmix64 stream). */
static inline void dsv4_rng_seed(dsv4_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = dsv4_splitmix64(&seed);
}

static inline uint64_t dsv4_rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t dsv4_rng_next(dsv4_rng *r) {
    uint64_t *s = r->s;
    const uint64_t out = dsv4_rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = dsv4_rotl64(s[3], 45);
    return out;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double dsv4_rng_unit(dsv4_rng *r) { return (double)(dsv4_rng_next(r) >> 11) * 0x1.0p-53; }

#endif
