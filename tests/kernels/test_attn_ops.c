/* test_attn_ops.c — the dot/axpy kernels of attention and the indexer (kernels/attn_ops.h):
 * every level gives the same bits as the contract's plain loop (dsv4_dot and a rounded
 * multiply then add, the value sum as zero then one axpy per row) for odd lengths, tails, strides and unaligned pointers, and stays
 * within FP32 rounding of a double-precision reference. */
#include <stdint.h>

#include "kernels/attn_ops.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "test.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double urand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

#define MAXN 600
#define MAXQ 19

/* The levels to check: portable, and AVX2 when compiled in and the CPU runs it. */
static int levels(const dsv4_attn_ops **ops) {
    int n = 0;
    ops[n++] = dsv4_attn_ops_for(DSV4_SIMD_SCALAR);
    if (dsv4_cpu_simd() >= DSV4_SIMD_AVX2 && dsv4_build_simd() >= DSV4_SIMD_AVX2) {
        ops[n] = dsv4_attn_ops_for(DSV4_SIMD_AVX2);
        if (ops[n] != ops[0]) n++;
    }
    return n;
}

static void test_dotn(const dsv4_attn_ops *ops, const char *name) {
    static float qbuf[MAXQ * (MAXN + 3) + 1], kbuf[MAXN + 1], out[3 * MAXQ];
    const int ns[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 127, 128, 129, 512, 513, 599};
    const int nqs[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 19};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof nqs / sizeof nqs[0]; b++) {
            const int n = ns[a], nq = nqs[b];
            const size_t qs = (size_t)n + (b % 3);  /* row strides that break alignment */
            const size_t os = 1 + (a % 3);
            float *q = qbuf + 1, *k = kbuf + (a & 1); /* unaligned starts */
            for (size_t i = 0; i < (size_t)nq * qs; i++) q[i] = (float)urand();
            for (int i = 0; i < n; i++) k[i] = (float)(urand() * 4.0);
            for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) out[i] = -99.0f;
            ops->dotn(q, qs, nq, k, n, out, os);
            int same = 1, close = 1;
            for (int h = 0; h < nq; h++) {
                const float *qh = q + (size_t)h * qs;
                same &= out[h * os] == dsv4_dot(qh, k, n);
                double ref = 0, mag = 0;
                for (int i = 0; i < n; i++) {
                    ref += (double)qh[i] * k[i];
                    mag += fabs((double)qh[i] * k[i]);
                }
                close &= fabs(out[h * os] - ref) <= 1e-6 * mag + 1e-30;
            }
            /* entries between the strided outputs are not written */
            for (int h = 0; h + 1 < nq; h++)
                for (size_t g = 1; g < os; g++) same &= out[h * os + g] == -99.0f;
            CHECK_MSG(same, "%s dotn n=%d nq=%d: not bit-equal to dsv4_dot", name, n, nq);
            CHECK_MSG(close, "%s dotn n=%d nq=%d: off the double reference", name, n, nq);
        }
}

static void test_axpyn(const dsv4_attn_ops *ops, const char *name) {
    static float y[MAXQ * (MAXN + 2)], y0[MAXQ * (MAXN + 2)], xbuf[MAXN + 1], a[2 * MAXQ];
    const int ns[] = {1, 2, 7, 8, 9, 17, 64, 130, 512, 599};
    const int nys[] = {1, 3, 4, 8, 9, 16, 19};
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++)
        for (size_t t = 0; t < sizeof nys / sizeof nys[0]; t++) {
            const int n = ns[s], ny = nys[t];
            const size_t ys = (size_t)n + (t & 1), as = 1 + (s & 1);
            const float *x = xbuf + (s & 1);
            for (int i = 0; i < n + 1; i++) xbuf[i] = (float)urand();
            for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) a[i] = (float)urand();
            for (size_t i = 0; i < (size_t)ny * ys + 1; i++) y[i] = y0[i] = (float)urand();
            ops->axpyn(y, ys, ny, a, as, x, n);
            int same = 1, close = 1;
            for (int h = 0; h < ny; h++)
                for (size_t c = 0; c < ys; c++) {
                    const size_t at = (size_t)h * ys + c;
                    if (c >= (size_t)n) { /* the stride's padding is untouched */
                        same &= y[at] == y0[at];
                        continue;
                    }
                    const float p = a[h * as] * x[c];
                    same &= y[at] == y0[at] + p;
                    const double ref = (double)y0[at] + (double)a[h * as] * x[c];
                    close &= fabs(y[at] - ref) <= 1.2e-7 * (fabs(ref) + fabs(p)) + 1e-30;
                }
            same &= y[(size_t)ny * ys] == y0[(size_t)ny * ys];
            CHECK_MSG(same, "%s axpyn n=%d ny=%d: not y + (a*x) rounded twice", name, n, ny);
            CHECK_MSG(close, "%s axpyn n=%d ny=%d: off the double reference", name, n, ny);
        }
}

static void test_wsum(const dsv4_attn_ops *ops, const char *name) {
    enum { MAXR = 70, MAXC = 530 };
    static float rbuf[MAXR * (MAXC + 1)], p[MAXQ * (MAXR + 1)], o[MAXQ * (MAXC + 2)], ref[MAXC];
    const float *rows[MAXR];
    const int ns[] = {1, 7, 8, 9, 15, 16, 17, 24, 31, 33, 64, 130, 512, 529};
    const int nhs[] = {1, 2, 3, 4, 5, 8, 9, 16, 17};
    const int nrs[] = {0, 1, 5, 70};
    int t = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof nhs / sizeof nhs[0]; b++)
            for (size_t r = 0; r < sizeof nrs / sizeof nrs[0]; r++, t++) {
                const int n = ns[a], nh = nhs[b], nr = nrs[r];
                const size_t os = (size_t)n + (t % 3), ps = (size_t)nr + (t & 1);
                for (int j = 0; j < nr; j++) { /* rows scattered, unaligned */
                    rows[j] = rbuf + (size_t)((j * 37) % MAXR) * (MAXC + 1) + (j & 1);
                    for (int c = 0; c < n; c++) ((float *)rows[j])[c] = (float)urand();
                }
                for (size_t i = 0; i < (size_t)nh * ps; i++) p[i] = (float)(0.5 + 0.5 * urand());
                for (size_t i = 0; i < (size_t)nh * os; i++) o[i] = -99.0f;
                ops->wsum(o, os, nh, p, ps, rows, nr, n);
                int same = 1, close = 1;
                for (int h = 0; h < nh; h++) {
                    for (int c = 0; c < n; c++) ref[c] = 0.0f;
                    for (int j = 0; j < nr; j++)
                        for (int c = 0; c < n; c++) {
                            const float prod = p[h * ps + j] * rows[j][c];
                            ref[c] = ref[c] + prod;
                        }
                    for (int c = 0; c < n; c++) {
                        double d = 0, mag = 0;
                        for (int j = 0; j < nr; j++) {
                            d += (double)p[h * ps + j] * rows[j][c];
                            mag += fabs((double)p[h * ps + j] * rows[j][c]);
                        }
                        same &= o[h * os + c] == ref[c] && !signbit(o[h * os + c]) == !signbit(ref[c]);
                        close &= fabs(o[h * os + c] - d) <= 1e-6 * mag + 1e-30;
                    }
                    for (size_t c = (size_t)n; c < os; c++) same &= o[h * os + c] == -99.0f;
                }
                CHECK_MSG(same, "%s wsum n=%d nh=%d rows=%d: not the axpy loop's bits", name, n, nh, nr);
                CHECK_MSG(close, "%s wsum n=%d nh=%d rows=%d: off the double reference", name, n, nh, nr);
            }
}

/* Special values go through the lanes like the plain loop: infinities, NaN, signed zeros,
 * subnormals, and a tail that must not disturb an accumulator. */
static void test_special(const dsv4_attn_ops *ops, const char *name) {
    float q[2][19], k[19], out[2];
    for (int i = 0; i < 19; i++) { q[0][i] = (float)urand(); q[1][i] = -0.0f; k[i] = (float)urand(); }
    q[0][3] = 1e-41f; k[3] = 3e-39f;
    ops->dotn(&q[0][0], 19, 2, k, 19, out, 1);
    CHECK_MSG(out[0] == dsv4_dot(q[0], k, 19), "%s: subnormal product", name);
    CHECK_MSG(out[1] == 0.0f && !signbit(out[1]), "%s: sum of -0 products is %g", name, out[1]);
    k[17] = INFINITY;
    ops->dotn(&q[0][0], 19, 1, k, 19, out, 1);
    CHECK_MSG(out[0] == dsv4_dot(q[0], k, 19) && isinf(out[0]), "%s: infinity in the tail", name);
    q[0][18] = NAN;
    ops->dotn(&q[0][0], 19, 1, k, 19, out, 1);
    CHECK_MSG(isnan(out[0]), "%s: NaN in the tail", name);
}

int main(void) {
    const dsv4_attn_ops *ops[2];
    const int n = levels(ops);
    const char *names[2] = {"scalar", "avx2"};
    printf("levels checked: %d\n", n);
    for (int l = 0; l < n; l++) {
        test_dotn(ops[l], names[l]);
        test_axpyn(ops[l], names[l]);
        test_wsum(ops[l], names[l]);
        test_special(ops[l], names[l]);
    }
    /* unknown or higher levels fall back to the best compiled one */
    CHECK(dsv4_attn_ops_for(-1) == ops[0]);
    CHECK(dsv4_attn_ops_for(99) == ops[n - 1] || dsv4_build_simd() < DSV4_SIMD_AVX2);
    return test_report();
}
