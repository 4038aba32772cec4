/* test_ops.c — RMSNorm (one vector, and heads side by side), SiLU and dot against
 * double-precision loops written from the formulas of spec/model.md §5.2. */
#include <stdint.h>

#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static void test_rmsnorm(int n, int weighted, float scale) {
    float x[600] = {0}, w[600] = {0}, y[600] = {0}, y2[600] = {0};
    for (int i = 0; i < n; i++) { x[i] = (float)(scale * urand()); w[i] = (float)(1.0 + 0.3 * urand()); }
    const float eps = 1e-6f;
    dsv4_rmsnorm(x, weighted ? w : NULL, n, eps, y);
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const double r = 1.0 / sqrt(ss / n + (double)eps);
    double maxerr = 0, maxref = 0;
    for (int i = 0; i < n; i++) {
        double ref = x[i] * r * (weighted ? w[i] : 1.0);
        maxerr = fmax(maxerr, fabs(y[i] - ref));
        maxref = fmax(maxref, fabs(ref));
    }
    CHECK_MSG(maxerr <= 3e-7 * maxref, "rmsnorm n=%d weighted=%d scale=%g: max err %.3g of %.3g",
              n, weighted, scale, maxerr, maxref);
    /* y may alias x: same result bit for bit. */
    memcpy(y2, x, sizeof(float) * n);
    dsv4_rmsnorm(y2, weighted ? w : NULL, n, eps, y2);
    CHECK(memcmp(y, y2, sizeof(float) * n) == 0);
}

static void test_rmsnorm_eps(void) {
    /* A tiny vector: eps dominates the mean square, so the output is x/sqrt(eps)·w. */
    float x[4] = {1e-5f, -2e-5f, 0, 3e-5f}, y[4];
    dsv4_rmsnorm(x, NULL, 4, 1e-2f, y);
    double ms = (1e-10 + 4e-10 + 9e-10) / 4;
    for (int i = 0; i < 4; i++) CHECK_NEAR(y[i], x[i] / sqrt(ms + (double)1e-2f), 1e-9);
}

/* The rows form: each row's bits of dsv4_rmsnorm, weighted or not (unweighted: a row's q
 * heads), for row counts within and around the blocks (8 portable, 16 then 8 AVX-512) and their
 * tails, row lengths around the 8-column steps, at every level: below AVX-512 the eight-row
 * loop takes all rows, so an AVX-512 machine tests it too. */
static void test_rmsnorm_rows(void) {
    static float x[41 * 515], y[41 * 515], w[515];
    const int ns[] = {1, 5, 8, 64, 515}, rcs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 24, 32, 33, 41};
    for (int i = 0; i < 515; i++) w[i] = (float)(1.0 + urand());
    for (size_t a = 0; a < sizeof rcs / sizeof rcs[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
            for (int weighted = 0; weighted < 2; weighted++) {
                const int rows = rcs[a], n = ns[b];
                for (int simd = DSV4_SIMD_SCALAR; simd <= DSV4_SIMD_MAX; simd++) {
                    for (int i = 0; i < rows * n; i++) x[i] = (float)(urand() * (1 + i % 3 * 100));
                    memcpy(y, x, sizeof(float) * rows * n);
                    for (int r = 0; r < rows; r++) dsv4_rmsnorm(x + r * n, weighted ? w : NULL, n, 1e-6f, x + r * n);
                    dsv4_rmsnorm_rows(simd, y, weighted ? w : NULL, n, 1e-6f, rows);
                    CHECK_MSG(memcmp(x, y, sizeof(float) * rows * n) == 0, "rmsnorm_rows rows=%d n=%d w=%d simd=%d",
                              rows, n, weighted, simd);
                }
            }
}

static void test_silu(void) {
    const float xs[] = {0.0f, 1.0f, -1.0f, 3.5f, -7.25f, 20.0f, -20.0f, 88.0f, -88.0f, -200.0f, 200.0f, 1e-4f};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        const double x = xs[i], ref = x / (1.0 + exp(-x));
        const float got = dsv4_silu(xs[i]);
        CHECK_MSG(isfinite(got), "silu(%g) = %g", x, got);
        CHECK_MSG(fabs(got - ref) <= 4e-7 * fmax(fabs(ref), 1e-30) + 1e-37, "silu(%g) = %.9g, want %.9g", x, got, ref);
    }
    CHECK(dsv4_sigmoid(0.0f) == 0.5f);
    CHECK_NEAR(dsv4_sigmoid(2.0f), 1.0 / (1.0 + exp(-2.0)), 1e-7);
}

static void test_dot(void) {
    float a[1100], b[1100];
    const int ns[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 64, 100, 513, 1100};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        const int n = ns[t];
        for (int i = 0; i < n; i++) { a[i] = (float)urand(); b[i] = (float)(urand() * 3); }
        double ref = 0, mag = 0;
        for (int i = 0; i < n; i++) { ref += (double)a[i] * b[i]; mag += fabs((double)a[i] * b[i]); }
        const float got = dsv4_dot(a, b, n);
        CHECK_MSG(fabs(got - ref) <= 1e-6 * mag + 1e-30, "dot n=%d: %.9g vs %.9g (mag %.3g)", n, got, ref, mag);
        /* Result does not depend on where the vectors sit in memory. */
        float a2[1101], b2[1101];
        memcpy(a2 + 1, a, sizeof(float) * n);
        memcpy(b2 + 1, b, sizeof(float) * n);
        CHECK(dsv4_dot(a2 + 1, b2 + 1, n) == got);
    }
    /* Exact small case. */
    float u[3] = {1, 2, 3}, v[3] = {4, -5, 6};
    CHECK(dsv4_dot(u, v, 3) == 12.0f);
}

/* dsv4_dot_f64: within rounding of a long-double sum; the AVX2 and AVX-512 levels (when
 * the CPU has them), the dispatching entry and dsv4_dot_f64_at at every level equal the
 * portable loop bit for bit, at any offset. */
static void test_dot_f64(void) {
    enum { NMAX = 4133 };
    static float a[NMAX + 1], b[NMAX + 1];
    const int ns[] = {0, 1, 3, 4, 5, 15, 16, 17, 31, 32, 33, 100, 1000, 4096, NMAX};
    dsv4_dot_f64_fn avx2 = dsv4_dot_f64_avx2(), avx512 = dsv4_dot_f64_avx512();
    printf("dot_f64: AVX2 level %s, AVX-512 level %s\n", avx2 ? "present" : "absent",
           avx512 ? "present" : "absent");
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        const int n = ns[t];
        for (int i = 0; i < n + 1; i++) { a[i] = (float)urand() * 1e3f; b[i] = (float)urand() * (i % 7 ? 1.0f : 1e-20f); }
        for (int off = 0; off < 2; off++) {
            const float *x = a + off, *y = b + off;
            const int m = n - off < 0 ? 0 : n - off;
            long double ref = 0, mag = 0;
            for (int i = 0; i < m; i++) { ref += (long double)x[i] * y[i]; mag += fabsl((long double)x[i] * y[i]); }
            const double got = dsv4_dot_f64_portable(x, y, m);
            CHECK_MSG(fabsl(got - ref) <= 1e-15L * mag + 1e-300L, "dot_f64 n=%d: %.17g vs %.17Lg", m, got, ref);
            CHECK_MSG(dsv4_dot_f64(x, y, m) == got, "dot_f64 n=%d off=%d: dispatch differs from portable", m, off);
            if (avx2) CHECK_MSG(avx2(x, y, m) == got, "dot_f64 n=%d off=%d: AVX2 %.17g vs portable %.17g", m, off,
                                avx2(x, y, m), got);
            if (avx512) CHECK_MSG(avx512(x, y, m) == got, "dot_f64 n=%d off=%d: AVX-512 %.17g vs portable %.17g", m,
                                  off, avx512(x, y, m), got);
            for (int level = 0; level <= DSV4_SIMD_MAX; level++)
                CHECK_MSG(dsv4_dot_f64_at(level)(x, y, m) == got, "dot_f64 n=%d off=%d: level %d differs", m, off,
                          level);
        }
    }
}

int main(void) {
    const int ns[] = {1, 2, 7, 64, 129, 600};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        test_rmsnorm(ns[i], 0, 1.0f);
        test_rmsnorm(ns[i], 1, 1.0f);
        test_rmsnorm(ns[i], 1, 1000.0f);
    }
    test_rmsnorm_eps();
    test_rmsnorm_rows();
    test_silu();
    test_dot();
    test_dot_f64();
    return test_report();
}
