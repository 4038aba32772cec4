/* argmax.c — the greedy index of a row of logits (argmax.h). */
#include "util/argmax.h"

#include <math.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The argmax in two passes, so that neither carries a chain through the index: the
 * largest non-NaN value m (16 lanes, each a running max that a NaN never replaces), then
 * the first i with x[i] == m (+0 and -0 compare equal, as the one-pass scan's ">" treats
 * them: the first of them). All NaN (or n <= 0): m stays -inf and no element equals it
 * unless some element is -inf, the first of which is then the answer, as in one pass. The
 * one-pass scan took ~3 cycles an element (maxss latency): ~110 us for a batch-16 step's
 * 16 x 8192 logits (BENCHMARKS.md, session 19 b16). */
#if defined(__SSE2__)
static float max_nonnan(const float *x, int n) {
    __m128 a0 = _mm_set1_ps(-INFINITY), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 16 <= n; i += 16) { /* _mm_max_ps(x, a): x > a ? x : a, so a NaN x keeps a */
        a0 = _mm_max_ps(_mm_loadu_ps(x + i), a0);
        a1 = _mm_max_ps(_mm_loadu_ps(x + i + 4), a1);
        a2 = _mm_max_ps(_mm_loadu_ps(x + i + 8), a2);
        a3 = _mm_max_ps(_mm_loadu_ps(x + i + 12), a3);
    }
    _Alignas(16) float l[16];
    _mm_store_ps(l, a0);
    _mm_store_ps(l + 4, a1);
    _mm_store_ps(l + 8, a2);
    _mm_store_ps(l + 12, a3);
    float m = -INFINITY;
    for (int j = 0; j < 16; j++) m = l[j] > m ? l[j] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static int32_t first_equal(const float *x, int n, float m) {
    const __m128 mv = _mm_set1_ps(m);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const int k = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + i), mv)) |
                      _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + i + 4), mv)) << 4 |
                      _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + i + 8), mv)) << 8 |
                      _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + i + 12), mv)) << 12;
        if (k) return i + __builtin_ctz((unsigned)k);
    }
    for (; i < n; i++)
        if (x[i] == m) return i;
    return -1;
}
#else
static float max_nonnan(const float *x, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static int32_t first_equal(const float *x, int n, float m) {
    for (int i = 0; i < n; i++)
        if (x[i] == m) return i;
    return -1;
}
#endif

int32_t dsv4_argmax_index(const float *x, int n) {
    if (n <= 0) return -1;
    return first_equal(x, n, max_nonnan(x, n));
}

