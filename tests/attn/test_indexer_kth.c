/* test_indexer_kth.c — dsv4_indexer_kth_largest (attn/indexer.c), the radix select that
 * gives dsv4_indexer_select_verified its two thresholds (tau over the lower bounds, theta
 * over the candidates' upper bounds): for every k it must return the value of rank k in a
 * descending sort, on arrays built to hit every digit path: random values of both signs
 * and many magnitudes, heavy ties (few distinct values, so one 11-bit bucket holds most
 * entries and the later digits decide), -0 beside +0, infinities, subnormals, all equal,
 * values that share their top 22 bits (the third digit decides), lengths 1 to 8192
 * (flash_quarter's CSA rows at 32K context: 8192 lower bounds, top 512). */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "attn/attention.h"
#include "test.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static double urand(void) { return (double)(next() >> 11) / (double)(1ull << 53); } /* [0, 1) */

static int cmp_desc(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

enum { WIDE, TIES, ZEROS, INFS, SUBNORMAL, EQUAL, SHARED_TOP, NEGATIVE, N_KINDS };
static const char *const kinds[] = {"wide", "ties", "zeros", "infinities", "subnormal", "equal", "shared top",
                                    "negative"};

static float draw(int kind, int i) {
    const float s = next() & 1 ? -1.0f : 1.0f;
    switch (kind) {
    case WIDE: return s * (float)(urand() * pow(2.0, (double)(int)(next() % 80) - 40));
    case TIES: return (float)(int)(next() % 5) - 2.0f; /* -2 .. 2 */
    case ZEROS: return next() % 3 ? s * 0.0f : s * (float)urand();
    case INFS: return next() % 4 == 0 ? s * INFINITY : s * (float)urand();
    case SUBNORMAL: return s * (float)(int)(next() % 64) * FLT_TRUE_MIN;
    case EQUAL: return 0.75f;
    case SHARED_TOP: { /* 1.5 plus a few ulps: the top 22 bits of every key agree */
        float x = 1.5f;
        for (int u = (int)(next() % 600); u > 0; u--) x = nextafterf(x, 2.0f);
        return x;
    }
    case NEGATIVE: return -(float)(urand() * 100.0) - (float)(i % 7);
    default: return 0.0f;
    }
}

static void check_kind(int kind, int n) {
    float *x = malloc(sizeof(float) * (size_t)n), *sorted = malloc(sizeof(float) * (size_t)n);
    int *work = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) x[i] = draw(kind, i);
    memcpy(sorted, x, sizeof(float) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(float), cmp_desc);
    /* every k for short arrays; for long ones the ends, the middle and the ranks a CSA row uses */
    const int ks[] = {1, 2, 3, n / 4, n / 2, n - 1, n, 64, 65, 512, 513};
    const int n_ks = n <= 64 ? n : (int)(sizeof ks / sizeof ks[0]);
    int bad = 0;
    for (int t = 0; t < n_ks; t++) {
        const int k = n <= 64 ? t + 1 : ks[t];
        if (k < 1 || k > n) continue;
        const float got = dsv4_indexer_kth_largest(x, n, k, work);
        if (!(got == sorted[k - 1]) && bad++ < 3)
            fprintf(stderr, "%s n %d k %d: %.9g, the sort's %.9g\n", kinds[kind], n, k, (double)got,
                    (double)sorted[k - 1]);
    }
    CHECK_MSG(bad == 0, "%s n %d: %d ranks wrong", kinds[kind], n, bad);
    free(x);
    free(sorted);
    free(work);
}

int main(void) {
    const int ns[] = {1, 2, 3, 7, 33, 64, 300, 2048, 8192};
    for (int kind = 0; kind < N_KINDS; kind++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (int rep = 0; rep < 3; rep++) check_kind(kind, ns[i]);
    return test_report();
}
