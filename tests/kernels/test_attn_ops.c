/* test_attn_ops.c — the dot/axpy kernels of attention and the indexer (kernels/attn_ops.h):
 * every level gives the same bits as the contract's plain loop (dsv4_dot and a rounded
 * multiply then add, the value sum as zero then one axpy per row) for odd lengths, tails,
 * strides and unaligned pointers, with rows read as F32 and as BF16 (the bits of the F32
 * copy, which this file makes with its own widening), and stays within FP32 rounding of a
 * double-precision reference. */
#include <stdint.h>
#include <string.h>

#include "kernels/attn_ops.h"
#include "kernels/cpu.h"
#include "kernels/kv_rows.h"
#include "kernels/ops.h"
#include "test.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double urand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

#define MAXN 600
#define MAXQ 19

/* The levels to check: portable, then AVX2 and AVX-512 when compiled in and the CPU runs
 * them (names[i] the level of ops[i]). */
static int levels(const dsv4_attn_ops **ops, const char **names) {
    int n = 0;
    const int best = dsv4_cpu_simd() < dsv4_build_simd() ? dsv4_cpu_simd() : dsv4_build_simd();
    ops[n] = dsv4_attn_ops_for(DSV4_SIMD_SCALAR);
    names[n++] = "portable";
    for (int level = DSV4_SIMD_AVX2; level <= DSV4_SIMD_AVX512 && level <= best; level++) {
        ops[n] = dsv4_attn_ops_for(level);
        names[n] = dsv4_simd_name((dsv4_simd)level);
        if (ops[n] != ops[n - 1]) n++;
    }
    return n;
}

/* x rounded to BF16 (nearest even; finite x) as its 16 bits, and their value as F32,
 * written out here rather than taken from the library. */
static uint16_t bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf16_value(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* n_rows rows of n values, each stored both as F32 (frow[j]) and as BF16 (brow[j], at an
 * odd 2-byte offset: no alignment), from the same BF16-rounded values, scattered. */
enum { MAXR = 70, MAXC = 600 };
typedef struct row_set {
    float f[MAXR][MAXC + 1];
    uint16_t b[MAXR][MAXC + 3];
    const void *frow[MAXR], *brow[MAXR];
} row_set;

static void fill_rows(row_set *rs, int n_rows, int n, double amp) {
    for (int j = 0; j < n_rows; j++) {
        const int at = (j * 37) % MAXR; /* scattered */
        for (int c = 0; c < n; c++) {
            const uint16_t h = bf16_bits((float)(urand() * amp));
            rs->b[at][c + 1] = h;
            rs->f[at][c + (j & 1)] = bf16_value(h);
        }
        rs->frow[j] = &rs->f[at][j & 1];
        rs->brow[j] = &rs->b[at][1];
    }
}

static const void *const *rows_in(const row_set *rs, int fmt) {
    return fmt == DSV4_ROW_BF16 ? rs->brow : rs->frow;
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

static void test_dot_rows(const dsv4_attn_ops *ops, const char *name) {
    static row_set rs;
    static float qbuf[MAXQ * (MAXN + 3) + 1], out[MAXQ * (MAXR + 3)];
    const int ns[] = {1, 3, 7, 8, 9, 15, 16, 17, 64, 127, 128, 129, 512, 513, 599};
    const int nqs[] = {1, 3, 4, 5, 8, 9, 16, 17};
    const int nrs[] = {0, 1, 2, 3, 7, 70};
    int t = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof nqs / sizeof nqs[0]; b++)
            for (size_t r = 0; r < sizeof nrs / sizeof nrs[0]; r++, t++) {
                const int n = ns[a], nq = nqs[b], nr = nrs[r];
                const size_t qs = (size_t)n + (t % 3), os = (size_t)nr + (t & 1);
                float *q = qbuf + 1;
                for (size_t i = 0; i < (size_t)nq * qs; i++) q[i] = (float)urand();
                fill_rows(&rs, nr, n, 4.0);
                for (int fmt = DSV4_ROW_BF16; fmt <= DSV4_ROW_F32; fmt += 2) {
                    for (size_t i = 0; i < (size_t)nq * os + 1; i++) out[i] = -99.0f;
                    ops->dot_rows(q, qs, nq, rows_in(&rs, fmt), fmt, nr, n, out, os);
                    int same = 1, close = 1;
                    for (int h = 0; h < nq; h++) {
                        const float *qh = q + (size_t)h * qs;
                        for (int j = 0; j < nr; j++) {
                            const float *x = rs.frow[j];
                            const float got = out[(size_t)h * os + j];
                            same &= memcmp(&got, &(float){dsv4_dot(qh, x, n)}, 4) == 0;
                            double ref = 0, mag = 0;
                            for (int i = 0; i < n; i++) {
                                ref += (double)qh[i] * x[i];
                                mag += fabs((double)qh[i] * x[i]);
                            }
                            close &= fabs(got - ref) <= 1e-6 * mag + 1e-30;
                        }
                        for (size_t g = (size_t)nr; g < os; g++) same &= out[(size_t)h * os + g] == -99.0f;
                    }
                    same &= out[(size_t)nq * os] == -99.0f;
                    CHECK_MSG(same, "%s dot_rows %s n=%d nq=%d rows=%d: not bit-equal to dsv4_dot", name,
                              fmt == DSV4_ROW_BF16 ? "bf16" : "f32", n, nq, nr);
                    CHECK_MSG(close, "%s dot_rows n=%d nq=%d rows=%d: off the double reference", name, n, nq, nr);
                }
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
    enum { WC = 530 };
    static row_set rs;
    static float p[MAXQ * (MAXR + 1)], o[MAXQ * (WC + 2)], ref[WC];
    const int ns[] = {1, 7, 8, 9, 15, 16, 17, 24, 31, 33, 48, 63, 64, 65, 80, 130, 512, 529};
    const int nhs[] = {1, 2, 3, 4, 5, 8, 9, 16, 17};
    const int nrs[] = {0, 1, 5, 70};
    int t = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof nhs / sizeof nhs[0]; b++)
            for (size_t r = 0; r < sizeof nrs / sizeof nrs[0]; r++, t++) {
                const int n = ns[a], nh = nhs[b], nr = nrs[r];
                const size_t os = (size_t)n + (t % 3), ps = (size_t)nr + (t & 1);
                fill_rows(&rs, nr, n, 1.0);
                for (size_t i = 0; i < (size_t)nh * ps; i++) p[i] = (float)(0.5 + 0.5 * urand());
                for (int fmt = DSV4_ROW_BF16; fmt <= DSV4_ROW_F32; fmt += 2) {
                    for (size_t i = 0; i < (size_t)nh * os; i++) o[i] = -99.0f;
                    ops->wsum(o, os, nh, p, ps, rows_in(&rs, fmt), fmt, nr, n);
                    int same = 1, close = 1;
                    for (int h = 0; h < nh; h++) {
                        for (int c = 0; c < n; c++) ref[c] = 0.0f;
                        for (int j = 0; j < nr; j++)
                            for (int c = 0; c < n; c++) {
                                const float prod = p[h * ps + j] * ((const float *)rs.frow[j])[c];
                                ref[c] = ref[c] + prod;
                            }
                        for (int c = 0; c < n; c++) {
                            double d = 0, mag = 0;
                            for (int j = 0; j < nr; j++) {
                                const double x = ((const float *)rs.frow[j])[c];
                                d += (double)p[h * ps + j] * x;
                                mag += fabs((double)p[h * ps + j] * x);
                            }
                            same &= o[h * os + c] == ref[c] && !signbit(o[h * os + c]) == !signbit(ref[c]);
                            close &= fabs(o[h * os + c] - d) <= 1e-6 * mag + 1e-30;
                        }
                        for (size_t c = (size_t)n; c < os; c++) same &= o[h * os + c] == -99.0f;
                    }
                    CHECK_MSG(same, "%s wsum %s n=%d nh=%d rows=%d: not the axpy loop's bits", name,
                              fmt == DSV4_ROW_BF16 ? "bf16" : "f32", n, nh, nr);
                    CHECK_MSG(close, "%s wsum n=%d nh=%d rows=%d: off the double reference", name, n, nh, nr);
                }
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

    /* BF16 rows: subnormal, -0, infinity and NaN patterns widen to the same F32 values */
    const uint16_t specials[] = {0x0001, 0x8000, 0x007f, 0x7f80, 0xff80, 0x7fc1, 0x3f80, 0xbf80};
    uint16_t kb[2][19];
    float kf[2][19], got[2 * 2], ref;
    for (int v = 0; v < 8; v++) {
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < 19; i++) {
                kb[j][i] = i == 5 + 6 * j ? specials[v] : bf16_bits((float)urand());
                kf[j][i] = bf16_value(kb[j][i]);
                q[0][i] = q[1][i] = (float)urand();
            }
        const void *rb[2] = {kb[0], kb[1]};
        ops->dot_rows(&q[0][0], 19, 2, rb, DSV4_ROW_BF16, 2, 19, got, 2);
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 2; j++) {
                ref = dsv4_dot(q[h], kf[j], 19);
                CHECK_MSG(memcmp(&got[h * 2 + j], &ref, 4) == 0 || (isnan(ref) && isnan(got[h * 2 + j])),
                          "%s: bf16 special %04x head %d row %d: %g, not %g", name, specials[v], h, j,
                          got[h * 2 + j], ref);
            }
    }
}

/* libm's expf per value: the exponentials the softmax's ex argument must give (the library
 * passes its AVX-512 expf, which equals libm's where it is used). */
static void expf_each(const float *x, long n, float *y) {
    for (long i = 0; i < n; i++) y[i] = expf(x[i]);
}

/* The softmax of attn_ops.h, written out: per head m = max(sink, the largest raw * scale),
 * Z = expf(sink - m) + e_0 + e_1 + .. in order, e_j = expf(raw_j * scale - m), p_j = e_j *
 * (1 / Z). */
static void softmax_ref(const float *raw, int n, const float *sink, float scale, float *p) {
    float m = sink[0];
    for (int j = 0; j < n; j++) {
        const float z = raw[j] * scale;
        if (z > m) m = z;
    }
    float Z = expf(sink[0] - m);
    for (int j = 0; j < n; j++) {
        const float z = raw[j] * scale;
        p[j] = expf(z - m);
        Z += p[j];
    }
    const float inv = 1.0f / Z;
    for (int j = 0; j < n; j++) p[j] *= inv;
}

/* The level's softmax (where it has one) against softmax_ref bit for bit: head counts
 * across its 16-head groups, lengths across its 16-value blocks and tails, ties, infinities,
 * a sink above every score, and NaN scores (which never win the max). */
static void test_softmax(const dsv4_attn_ops *ops, const char *name) {
    if (!ops->softmax) return;
    enum { NH = 33, N = 300 };
    static float raw[NH * N], got[NH * N], ref[N];
    float sink[NH];
    const int nhs[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33}, ns[] = {1, 2, 15, 16, 17, 31, 33, 128, 132, 264, 300};
    const float scales[] = {0.04419417f, 1.0f};
    int bad = 0, cases = 0;
    for (int a = 0; a < (int)(sizeof nhs / sizeof nhs[0]); a++)
        for (int b = 0; b < (int)(sizeof ns / sizeof ns[0]); b++)
            for (int c = 0; c < 2; c++)
                for (int v = 0; v < 3; v++) { /* v 1: ties and infinities; v 2: NaNs, sinks on top */
                    const int nh = nhs[a], n = ns[b];
                    for (int h = 0; h < nh; h++) {
                        sink[h] = (float)(3.0 * urand()) + (v == 2 && h % 3 == 0 ? 500.0f : 0.0f);
                        for (int j = 0; j < n; j++) {
                            float x = (float)(40.0 * urand());
                            if (v == 1 && j % 5 == 2) x = raw[h * n + j - 1];
                            if (v == 1 && j % 11 == 3) x = j % 2 ? -INFINITY : 0.0f;
                            if (v == 2 && j % 13 == 4) x = NAN;
                            raw[h * n + j] = x;
                        }
                    }
                    memcpy(got, raw, sizeof(float) * nh * n);
                    ops->softmax(got, n, nh, sink, scales[c], expf_each);
                    for (int h = 0; h < nh; h++) {
                        softmax_ref(raw + h * n, n, sink + h, scales[c], ref);
                        for (int j = 0; j < n; j++) {
                            const float g = got[h * n + j], r = ref[j];
                            if (memcmp(&g, &r, 4) != 0 && !(isnan(g) && isnan(r))) bad++;
                        }
                    }
                    cases++;
                }
    CHECK_MSG(bad == 0, "%s softmax: %d probabilities not the plain loop's bits (%d cases)", name, bad, cases);
}

int main(void) {
    const dsv4_attn_ops *ops[3];
    const char *names[3];
    const int n = levels(ops, names);
    for (int l = 0; l < n; l++) printf("level checked: %s\n", names[l]);
    if (n < 3) printf("SKIPPED: the levels past %s (not in this CPU or build)\n", names[n - 1]);
    for (int l = 0; l < n; l++) {
        test_dotn(ops[l], names[l]);
        test_dot_rows(ops[l], names[l]);
        test_axpyn(ops[l], names[l]);
        test_wsum(ops[l], names[l]);
        test_special(ops[l], names[l]);
        test_softmax(ops[l], names[l]);
    }
    /* unknown or higher levels fall back to the best compiled one */
    CHECK(dsv4_attn_ops_for(-1) == ops[0]);
    CHECK(dsv4_attn_ops_for(99) == dsv4_attn_ops_for(dsv4_build_simd()));
    return test_report();
}
