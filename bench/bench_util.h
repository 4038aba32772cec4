/* bench_util.h — what every benchmark program needs: a monotonic clock, a seeded uniform
 * generator and a comparison for qsort'ing timings (medians). Header-only, static inline:
 * each bench is one file linked against the library. */
#ifndef DSV4_BENCH_UTIL_H
#define DSV4_BENCH_UTIL_H

#include <stdint.h>
#include <time.h>

/* seconds on the monotonic clock */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* uniform in [-1, 1) from the xorshift state s (never 0) */
static inline float bench_urand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* qsort order of doubles, ascending */
static inline int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
