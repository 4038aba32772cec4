/* finite.h — internal: whether a float array holds a NaN or an infinity, without a branch
 * per element. */
#ifndef DSV4_UTIL_FINITE_H
#define DSV4_UTIL_FINITE_H

#include <stdint.h>
#include <string.h>

/* 1 when every x[0 .. n) is finite (n <= 0: 1). An exponent field of all ones is an
 * infinity or a NaN; the test is an integer one, so the compiler ORs it over vector lanes
 * (a branch per element, as the forward's output check had it, ran ~0.4 ns an element: a
 * batch-16 step's 16 x 1024 hidden values ~6.5 us on the calling thread, Zen 5). */
static inline int dsv4_all_finite(const float *x, int64_t n) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}

#endif
