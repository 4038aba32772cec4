/* test_exp_f64.c — the AVX-512 double exp and column pool (kernels/exp_f64.h) against libm
 * and against the pool's arithmetic written out here, bit for bit: random inputs over the
 * main path, every table entry, the path's edges (|x| around 2^-54 and 512, zeros, inf,
 * NaN, subnormals), masked tails, in place; pools of 1..256 candidates with ties, -inf and
 * NaN scores and score spreads past 512 (libm's lanes), at every column offset and count. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/exp_f64.h"
#include "kernels/kctx.h"
#include "test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rbits(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}
static double urand(void) { return (double)(rbits() >> 11) / 9007199254740992.0; } /* [0, 1) */
static double from_bits(uint64_t b) { double d; memcpy(&d, &b, sizeof d); return d; }

/* an exp input: mostly the main path, a share of edges and any bit pattern */
static double pick(void) {
    static const double edge[] = {0.0, -0.0, 0x1p-54, -0x1p-54, 0x1.fffffffffffffp-55, -0x1.fffffffffffffp-55,
                                  0x1.fffffffffffffp8, -0x1.fffffffffffffp8, 512.0, -512.0, 709.78, -708.4,
                                  -745.13, -746.0, 710.0, 0x1p-1074, -0x1p-1022, 1e300};
    const uint32_t k = (uint32_t)(rbits() % 64);
    if (k == 0) return INFINITY;
    if (k == 1) return -INFINITY;
    if (k == 2) return NAN;
    if (k < 6) return edge[rbits() % (sizeof edge / sizeof edge[0])];
    if (k < 8) return from_bits(rbits());
    if (k < 16) { /* near k ln2 / 128: every table entry, r of either sign */
        const int64_t t = (int64_t)(rbits() % 131072) - 65536;
        return (double)t * 0x1.62e42fefa39efp-8 + (urand() - 0.5) * 0x1p-9;
    }
    if (k < 24) return -urand() * 8.0;
    if (k < 32) { /* every binade of the main path, either sign */
        const uint64_t b = (rbits() >> 12) | ((uint64_t)(0x3c5 + rbits() % 0x48) << 52) | (rbits() & 1) << 63;
        return from_bits(b);
    }
    return -urand() * 520.0; /* the pools' range */
}

static void check_exp(dsv4_exp_rows_fn ex) {
    enum { N = 1 << 18 };
    static double x[N + 1], y[N + 1];
    for (int i = 0; i < N; i++) x[i] = pick();
    y[N] = 12345.0;
    ex(x, N, y);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const double e = exp(x[i]);
        if (memcmp(&e, &y[i], sizeof e) && bad++ < 5) fprintf(stderr, "exp(%a): libm %a, x512 %a\n", x[i], e, y[i]);
    }
    CHECK_MSG(bad == 0, "exp: %d of %d differ", bad, N);
    CHECK(y[N] == 12345.0);
    /* every tail length, in place */
    for (int n = 1; n <= 20; n++) {
        double a[24], b[24];
        for (int i = 0; i < 24; i++) a[i] = b[i] = pick();
        ex(b, n, b);
        for (int i = 0; i < 24; i++) {
            const double e = i < n ? exp(a[i]) : a[i];
            CHECK_MSG(memcmp(&e, &b[i], sizeof e) == 0 || (i >= n && isnan(e) && isnan(b[i])), "exp tail n=%d i=%d", n, i);
        }
    }
}

/* compressor.c's pool_core of one column, written out: max by bj > m, then e, den, num in
 * j order (this file is built without FMA: a product, then a sum) */
static float pool_ref(const float *const *ra, const float *const *rb, int n, int c) {
    float m = -INFINITY;
    for (int j = 0; j < n; j++)
        if (rb[j][c] > m) m = rb[j][c];
    double num = 0.0, den = 0.0;
    for (int j = 0; j < n; j++) {
        const double e = exp((double)rb[j][c] - (double)m);
        den += e;
        num += e * (double)ra[j][c];
    }
    return (float)(num / den);
}

static float score(float spread) {
    const uint32_t k = (uint32_t)(rbits() % 32);
    if (k == 0) return -INFINITY;
    if (k == 1) return NAN;
    if (k == 2) return 0.0f;
    if (k == 3) return -0.0f;
    if (k == 4) return 1.5f; /* ties */
    return (float)((urand() - 0.5) * spread);
}

static void check_pool(dsv4_pool_cols_fn pool, int n, int W, float spread) {
    enum { NMAX = 256, WMAX = 40 };
    static float va[NMAX][WMAX], vb[NMAX][WMAX];
    const float *ra[NMAX], *rb[NMAX];
    for (int j = 0; j < n; j++) {
        for (int c = 0; c < W; c++) {
            va[j][c] = (float)(urand() * 4.0 - 2.0);
            vb[j][c] = score(spread);
        }
        ra[j] = va[j];
        rb[j] = vb[j];
    }
    for (int c0 = 0; c0 < 9 && c0 < W; c0++)
        for (int c1 = c0; c1 <= W; c1 += 1 + c1 % 3) {
            float out[WMAX];
            for (int c = 0; c < WMAX; c++) out[c] = 7.0f;
            const int done = pool(ra, rb, n, c0, c1, out);
            CHECK_MSG(done == c0 + (c1 - c0) / 8 * 8, "pool n=%d c0=%d c1=%d: done %d", n, c0, c1, done);
            for (int c = 0; c < WMAX; c++) {
                const float e = c >= c0 && c < done ? pool_ref(ra, rb, n, c) : 7.0f;
                CHECK_MSG(memcmp(&e, &out[c], sizeof e) == 0, "pool n=%d spread=%g c0=%d c1=%d col %d: ref %a, x512 %a",
                          n, (double)spread, c0, c1, c, (double)e, (double)out[c]);
            }
        }
}

int main(void) {
    const dsv4_exp_rows_fn ex = dsv4_exp_x512();
    const dsv4_pool_cols_fn pool = dsv4_pool_cols_x512();
    if (!ex || !pool) {
        printf("no AVX-512: libm's exp only\n");
        CHECK(!ex && !pool);
        CHECK(!dsv4_exp_x512_agrees());
        return test_report();
    }
    /* glibc's exp is the one the AVX-512 lanes reproduce */
#ifdef __GLIBC__
    CHECK(dsv4_exp_x512_agrees());
#endif
    check_exp(ex);
    const int ns[] = {1, 2, 3, 8, 16, 128, 256};
    const float spreads[] = {4.0f, 60.0f, 3000.0f};
    for (int a = 0; a < 7; a++)
        for (int s = 0; s < 3; s++) check_pool(pool, ns[a], 40, spreads[s]);
    /* the context hands it out at the AVX-512 levels only */
    dsv4_kctx *k = NULL;
    dsv4_err err = {0};
    CHECK(dsv4_kctx_create(1, 64, &k, &err) == DSV4_OK);
    if (k) {
        if (dsv4_kctx_simd(k) >= DSV4_SIMD_AVX512) CHECK(dsv4_kctx_pool_cols(k) == pool && dsv4_kctx_exp(k) == ex);
        dsv4_kctx_set_simd(k, DSV4_SIMD_AVX2);
        CHECK(dsv4_kctx_pool_cols(k) == NULL && dsv4_kctx_exp(k) == NULL);
        dsv4_kctx_free(k);
    }
    return test_report();
}
