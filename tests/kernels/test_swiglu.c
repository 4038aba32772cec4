/* test_swiglu.c — the AVX-512 SwiGLU and expf (kernels/swiglu.h) against the portable loop
 * and libm, bit for bit: random rows of every width up to 40 (the masked tails), with and
 * without the clamp and the weights, h aliasing g, and the inputs where expf leaves its
 * main path (|x| ≥ 88, inf, NaN) or rounds differently in other libms. (All 2^32 inputs:
 * bench/expf_exhaustive, not here.) */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/kctx.h"
#include "kernels/swiglu.h"
#include "test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rbits(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
static float urand(void) { return (float)((double)(rbits() >> 8) / 16777216.0 * 2.0 - 1.0); } /* [-1, 1) */
static float from_bits(uint32_t b) { float f; memcpy(&f, &b, sizeof f); return f; }

/* values a SwiGLU input can hold, the edges of expf's paths among them */
static float pick(float scale) {
    static const float edge[] = {0.0f, -0.0f, 88.0f, -88.0f, 87.99999f, -87.99999f, 88.72283f, 88.72284f,
                                 -103.2789f, -103.9721f, -104.0f, 1e-30f, -1e-30f, 1e-45f};
    const uint32_t k = rbits() % 64;
    if (k == 0) return INFINITY;
    if (k == 1) return -INFINITY;
    if (k == 2) return NAN;
    if (k < 6) return edge[rbits() % (sizeof edge / sizeof edge[0])];
    if (k < 8) return from_bits(rbits()); /* any bit pattern */
    return scale * urand();
}

static void rows(dsv4_swiglu_fn fn, int n, int I, float limit, int weighted, float scale) {
    enum { MAXN = 5, MAXI = 40 };
    float g[MAXN * MAXI], u[MAXN * MAXI], w[MAXN], ha[MAXN * MAXI], hb[MAXN * MAXI + 1];
    for (int i = 0; i < n * I; i++) { g[i] = pick(scale); u[i] = pick(scale); }
    for (int r = 0; r < n; r++) w[r] = 0.5f + 0.5f * urand();
    hb[n * I] = 12345.0f; /* the tail past the rows stays */
    dsv4_swiglu_rows(g, u, weighted ? w : NULL, n, I, limit, ha);
    fn(g, u, weighted ? w : NULL, n, I, limit, hb);
    CHECK_MSG(memcmp(ha, hb, sizeof(float) * n * I) == 0, "swiglu n=%d I=%d limit=%g weighted=%d scale=%g",
              n, I, limit, weighted, scale);
    CHECK(hb[n * I] == 12345.0f);
    /* in place (h = g) */
    fn(g, u, weighted ? w : NULL, n, I, limit, g);
    CHECK_MSG(memcmp(ha, g, sizeof(float) * n * I) == 0, "swiglu in place n=%d I=%d", n, I);
}

int main(void) {
    const dsv4_swiglu_fn fn = dsv4_swiglu_x512();
    const dsv4_expf_rows_fn ex = dsv4_expf_x512();
    if (!fn || !ex) {
        printf("no AVX-512: the portable loop only\n");
        CHECK(dsv4_swiglu_at(DSV4_SIMD_AVX512, 1) == dsv4_swiglu_rows);
        CHECK(!dsv4_expf_x512_agrees());
        return test_report();
    }
    /* glibc's expf is the one the AVX-512 loop reproduces */
#ifdef __GLIBC__
    CHECK(dsv4_expf_x512_agrees());
#endif
    CHECK(dsv4_swiglu_at(DSV4_SIMD_AVX512, 1) == fn);
    CHECK(dsv4_swiglu_at(DSV4_SIMD_AVX512, 0) == dsv4_swiglu_rows);
    CHECK(dsv4_swiglu_at(DSV4_SIMD_AVX2, 1) == dsv4_swiglu_rows);
    const float limits[] = {0.0f, 7.0f, 1e-3f};
    const float scales[] = {1.0f, 10.0f, 120.0f};
    for (int I = 1; I <= 40; I++)
        for (int li = 0; li < 3; li++)
            for (int si = 0; si < 3; si++) rows(fn, 1 + (I % 5), I, limits[li], (I + li) & 1, scales[si]);
    /* expf alone: 64K random bit patterns and 64K values in [-110, 110] */
    enum { N = 1 << 16 };
    static float x[N], y[N];
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < N; i++) x[i] = pass ? 110.0f * urand() : from_bits(rbits());
        ex(x, N, y);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            const float e = expf(x[i]);
            if (memcmp(&e, &y[i], sizeof e) && bad++ < 5)
                fprintf(stderr, "expf(%a): libm %a, x512 %a\n", (double)x[i], (double)e, (double)y[i]);
        }
        CHECK_MSG(bad == 0, "expf pass %d: %d of %d differ", pass, bad, N);
    }
    /* -inf lanes (a sampler's banned ids: whole rows of them, or scattered) beside the other
     * special lanes (+inf, NaN, |x| >= 88) that go to libm: every lane position, both orders */
    {
        const float sp[] = {-INFINITY, INFINITY, NAN, -100.0f, 100.0f, -87.5f, 88.7f, 0.0f, -0.0f, 1.5f};
        const int nsp = (int)(sizeof sp / sizeof sp[0]);
        int bad = 0;
        for (int i = 0; i < 4096; i++) x[i] = (i % 3 == 0 || i >= 3000) ? -INFINITY : sp[(i * 7) % nsp];
        ex(x, 4096, y);
        for (int i = 0; i < 4096; i++) {
            const float e = expf(x[i]);
            if (memcmp(&e, &y[i], sizeof e) && !(isnan(e) && isnan(y[i])) && bad++ < 5)
                fprintf(stderr, "expf(%a): libm %a, x512 %a\n", (double)x[i], (double)e, (double)y[i]);
        }
        CHECK_MSG(bad == 0, "expf special lanes: %d of 4096 differ", bad);
    }
    /* the context picks it at the AVX-512 levels only */
    dsv4_kctx *k = NULL;
    dsv4_err err = {0};
    CHECK(dsv4_kctx_create(1, 64, &k, &err) == DSV4_OK);
    if (k) {
        if (dsv4_kctx_simd(k) >= DSV4_SIMD_AVX512) CHECK(dsv4_kctx_swiglu(k) == fn);
        dsv4_kctx_set_simd(k, DSV4_SIMD_AVX2);
        CHECK(dsv4_kctx_swiglu(k) == dsv4_swiglu_rows);
        dsv4_kctx_free(k);
    }
    return test_report();
}
