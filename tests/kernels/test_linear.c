/* test_linear.c — dsv4_linear (threaded, tiled, SIMD) against dsv4_linear_ref.
 *
 * For every weight format and every kernel level this CPU and build run (portable, AVX2,
 * AVX-512; the levels it lacks are skipped with a line saying so): odd shapes and partial scale blocks against the reference (max-rel =
 * max|diff| / max|ref| <= 1e-5, the P1 gate); exact dequantization (an identity input
 * reproduces dsv4_mat_row bit for bit); bit-identical results for 1, 2 and 3 threads;
 * batch invariance (a row alone equals the same row inside any batch, which also ties the
 * AVX2 GEMV to the GEMM path); no load past the end of the weights or scales (they are
 * placed right before an inaccessible page: the GEMV's software prefetch runs up to there
 * and must stay a prefetch); FP8 NaN codes 0x7F/0xFF give NaN outputs at every level and
 * leave the other rows alone. The small-M kernel's and the one-row GEMV's own bit checks are in
 * test_linear_smallm.c and test_linear_onerow.c; the shared fixture in linear_fixture.h. */
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu.h"
#include "linear_fixture.h"
#include "test.h"

/* worst figures per format, printed at the end */
typedef struct { double max_abs, max_rel, max_rel_l2; int cases; } stat;
static stat stats[DSV4_SIMD_MAX + 1][9]; /* [level][fmt + 3 if F32 scales] */

/* One shape: reference vs fast at the given level, thread-count and batch invariance. */
static void check_case(dsv4_wfmt f, int sc, int64_t rows, int64_t cols, int n_rows, int level) {
    if (sanitized && level == DSV4_SIMD_SCALAR && rows * cols * n_rows > (1 << 20)) return;
    tmat t = make_mat(f, sc, rows, cols);
    float *x = rand_vec((int64_t)n_rows * cols);
    const int64_t ny = (int64_t)n_rows * rows;
    float *yr = malloc(sizeof(float) * ny), *y[4], *scratch = malloc(sizeof(float) * cols);
    dsv4_linear_ref(&t.m, x, n_rows, yr, scratch);
    for (int th = 1; th <= 3; th++) {
        y[th] = malloc(sizeof(float) * ny);
        dsv4_kctx_set_simd(kc[th], level);
        dsv4_linear(kc[th], &t.m, x, n_rows, y[th]);
    }
    /* max-rel = max|diff| / max|ref| is the gate, but with a handful of outputs max|ref|
     * can be a cancellation accident; the sum's natural size sqrt(sum_i (x_i w_i)^2)
     * (what a random-sign sum is) then stands in for it. */
    double max_abs = 0, max_ref = 0, max_l2 = 0;
    float *row = malloc(sizeof(float) * cols);
    for (int64_t o = 0; o < rows; o++) {
        if (ny < 128) dsv4_mat_row(&t.m, o, row);
        for (int s = 0; s < n_rows; s++) {
            if (ny < 128) { /* only small cases need it (and it costs as much as the reference) */
                double l2 = 0;
                for (int64_t i = 0; i < cols; i++) {
                    const double p = (double)x[(int64_t)s * cols + i] * row[i];
                    l2 += p * p;
                }
                max_l2 = fmax(max_l2, sqrt(l2));
            }
            const int64_t k = (int64_t)s * rows + o;
            max_abs = fmax(max_abs, fabs((double)y[1][k] - yr[k]));
            max_ref = fmax(max_ref, fabs((double)yr[k]));
        }
    }
    free(row);
    const double rel = max_ref > 0 ? max_abs / max_ref : max_abs;
    /* an all-zero reference (a 1x1 FP8 matrix whose weight decodes to 0) has no size:
     * then only an exact match passes */
    const double size = fmax(max_ref, max_l2);
    const double rel_l2 = size > 0 ? max_abs / size : max_abs;
    CHECK_MSG(rel_l2 <= 1e-5 && (ny < 128 || rel <= 1e-5),
              "%s level %d rows %lld cols %lld n_rows %d: max-abs %.3g max-rel %.3g (vs natural size %.3g)",
              fmt_name(f, sc), level, (long long)rows, (long long)cols, n_rows, max_abs, rel, rel_l2);
    stat *st = &stats[level][f + (sc == SC_F32 ? 3 : 0)];
    st->max_abs = fmax(st->max_abs, max_abs);
    if (ny >= 128) st->max_rel = fmax(st->max_rel, rel);
    st->max_rel_l2 = fmax(st->max_rel_l2, rel_l2);
    st->cases++;
    CHECK_MSG(same_bits(y[1], y[2], ny) && same_bits(y[1], y[3], ny),
              "%s level %d rows %lld cols %lld n_rows %d: thread counts disagree", fmt_name(f, sc), level,
              (long long)rows, (long long)cols, n_rows);
    /* batch invariance: rows 0, 1 and the last alone (n_rows == 1: the GEMV path) */
    float *y1 = malloc(sizeof(float) * rows);
    const int probe[3] = {0, n_rows > 1 ? 1 : 0, n_rows - 1};
    for (int q = 0; q < 3; q++) {
        const int s = probe[q];
        dsv4_linear(kc[2], &t.m, x + (int64_t)s * cols, 1, y1);
        CHECK_MSG(same_bits(y1, y[2] + (int64_t)s * rows, rows),
                  "%s level %d rows %lld cols %lld: row %d of %d differs from the row alone", fmt_name(f, sc),
                  level, (long long)rows, (long long)cols, s, n_rows);
    }
    free(y1);
    for (int th = 1; th <= 3; th++) free(y[th]);
    free(yr);
    free(scratch);
    free(x);
    free_mat(&t);
}

/* Identity input: y[s, o] = W[o, s] must be the exact dequantized weight. */
static void check_exact(dsv4_wfmt f, int sc, int64_t rows, int64_t cols, int level, const uint8_t *force_scale) {
    tmat t = make_mat(f, sc, rows, cols);
    if (force_scale && !t.m.scale_is_f32) { /* FP8 band 0, block 0 gets a huge scale */
        ((uint8_t *)t.scale)[0] = *force_scale;
        uint8_t *p = t.w; /* keep the products finite: small codes in that block */
        for (int64_t o = 0; o < rows && o < 128; o++)
            for (int64_t i = 0; i < cols && i < 128; i++) p[o * cols + i] &= 0x9f;
    }
    float *x = calloc((size_t)(cols * cols), sizeof(float));
    for (int64_t s = 0; s < cols; s++) x[s * cols + s] = 1.0f;
    float *y = malloc(sizeof(float) * cols * rows), *row = malloc(sizeof(float) * cols);
    dsv4_kctx_set_simd(kc[2], level);
    dsv4_linear(kc[2], &t.m, x, (int)cols, y);
    int64_t bad = 0;
    for (int64_t o = 0; o < rows; o++) {
        dsv4_mat_row(&t.m, o, row);
        for (int64_t s = 0; s < cols; s++) bad += y[s * rows + o] != row[s];
    }
    CHECK_MSG(bad == 0, "%s level %d %lldx%lld: %lld weights not exact through the GEMM path", fmt_name(f, sc),
              level, (long long)rows, (long long)cols, (long long)bad);
    /* and through GEMV: one-hot inputs one at a time */
    bad = 0;
    float *y1 = malloc(sizeof(float) * rows);
    for (int64_t s = 0; s < cols; s++) {
        dsv4_linear(kc[2], &t.m, x + s * cols, 1, y1);
        for (int64_t o = 0; o < rows; o++) bad += y1[o] != y[s * rows + o];
    }
    CHECK_MSG(bad == 0, "%s level %d %lldx%lld: %lld weights differ between GEMV and GEMM", fmt_name(f, sc),
              level, (long long)rows, (long long)cols, (long long)bad);
    free(y1);
    free(x);
    free(y);
    free(row);
    free_mat(&t);
}

/* FP8 GEMV scales x by a power of two times the scale when that is exact for the whole call
 * (AVX2: 2^120 * scale, for up to 8 rows; avx512vbmi: the scale itself, for one row); inputs
 * and scales that rule it out take the per-weight path, which must agree bit for bit too. */
static void check_fp8_prescale_guard(int level) {
    const int64_t rows = 70, cols = 300;
    for (int v = 0; v < 8; v++) {
        tmat t = make_mat(DSV4_WF_FP8, SC_E8M0, rows, cols);
        float *x = rand_vec(3 * cols);
        /* each case makes the row's sums small enough that a wrongly taken shortcut shows */
        uint8_t *sc = t.scale; /* (1, 3) scale blocks */
        if (v == 1) /* subnormal inputs, halved by 256 * 2^-9: x * 2^-1 rounds */
            for (int64_t i = 0; i < cols; i++) x[cols + i] *= 1e-39f, sc[i / 128] = 118;
        if (v == 2) x[cols + 7] = 3e38f, sc[1] = 130; /* product past 2^127 */
        if (v == 3) { /* the smallest scale 2^-127, small inputs: x * 2^-7 normal, weights subnormal */
            for (int i = 0; i < 3; i++) sc[i] = 0;
            for (int64_t i = 0; i < cols; i++) x[cols + i] *= 1e-3f;
        }
        if (v == 4) /* scale 2^13: 2^120 * scale overflows, no prescale */
            for (int i = 0; i < 3; i++) sc[i] = 140;
        if (v == 5) { /* scale 2^-122, huge inputs: x * scale normal, e4m3 * scale subnormal (exact) */
            for (int i = 0; i < 3; i++) sc[i] = 5;
            for (int64_t i = 0; i < cols; i++) x[cols + i] *= 1e30f;
        }
        if (v == 6 || v == 7) { /* scale 2^120 (avx512vbmi: no prescale) or 2^119 (the largest it
                                 * prescales), small weights so the sums stay finite */
            sc[0] = v == 6 ? 247 : 246;
            uint8_t *p = t.w;
            for (int64_t o = 0; o < rows; o++)
                for (int64_t i = 0; i < 128; i++) p[o * cols + i] &= 0x9f;
        }
        if (level == DSV4_SIMD_AVX512VBMI && dsv4_lin_kernels_avx512vbmi()) {
            /* the one-row prescale is taken exactly where it is exact (so both paths run) */
            static const int want[8] = {1, 0, 0, 0, 1, 1, 0, 1};
            const int got = dsv4_lin_kernels_avx512vbmi()->fp8_prescale(&t.m, x + cols, 1);
            CHECK_MSG(got == want[v], "fp8 guard case %d: avx512vbmi prescale %d, expected %d", v, got, want[v]);
            CHECK(dsv4_lin_kernels_avx512vbmi()->fp8_prescale(&t.m, x, 3) == 0); /* one row only */
        }
        float *y3 = malloc(sizeof(float) * 3 * rows), *y1 = malloc(sizeof(float) * rows);
        float *yr = malloc(sizeof(float) * 3 * rows), *scratch = malloc(sizeof(float) * cols);
        dsv4_kctx_set_simd(kc[2], level);
        dsv4_linear(kc[2], &t.m, x, 3, y3);
        dsv4_linear(kc[2], &t.m, x + cols, 1, y1);
        CHECK_MSG(same_bits(y1, y3 + rows, rows), "fp8 guard case %d level %d: GEMV differs from GEMM", v, level);
        dsv4_linear_ref(&t.m, x, 3, yr, scratch);
        double max_abs = 0, max_ref = 0;
        for (int64_t i = 0; i < 3 * rows; i++) {
            max_abs = fmax(max_abs, fabs((double)y3[i] - yr[i]));
            max_ref = fmax(max_ref, fabs((double)yr[i]));
        }
        CHECK_MSG(max_abs <= 1e-5 * max_ref, "fp8 guard case %d level %d: max-rel %.3g", v, level, max_abs / max_ref);
        free(y3); free(y1); free(yr); free(scratch); free(x);
        free_mat(&t);
    }
}

/* Level avx512vbmi decodes FP8 through byte tables and FP4 through word tables in natural
 * column order, avx512 through F16 conversions and permuted FP4 lanes: the weights are the
 * same exact values and every lane sums the same columns in the same order, so every
 * output (no NaN codes here) must be the same bits at both levels, on the GEMV of 1..16
 * rows, avx512vbmi's small-M kernel of 8..32 rows against avx512's GEMV or GEMM, the
 * GEMM past it, odd widths and partial scale blocks, both scale kinds, and FP8
 * scales whose 256 * scale overflows. */
static void check_vbmi_matches_avx512(dsv4_wfmt f) {
    static const int64_t shapes[][2] = {{7, 160}, {129, 1056}, {300, 288}, {64, 64}, {5, 32}, {7, 133}, {5, 1}};
    static const int nrs[] = {1, 2, 4, 5, 7, 8, 9, 13, 16, 17, 22, 32, 33, 40};
    int64_t bad = 0, total = 0;
    for (int sc = 0; sc < 2; sc++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            if (f == DSV4_WF_FP4 && cols % 32) continue;
            tmat t = make_mat(f, sc, rows, cols);
            if (f == DSV4_WF_FP8 && sc == SC_E8M0 && si == 1) { /* one block at 2^121: 256 * scale overflows */
                ((uint8_t *)t.scale)[0] = 248;
                uint8_t *p = t.w;
                for (int64_t o = 0; o < 128; o++)
                    for (int64_t i = 0; i < 128; i++) p[o * cols + i] &= 0x9f;
            }
            for (size_t ni = 0; ni < sizeof nrs / sizeof nrs[0]; ni++) {
                const int nr = nrs[ni];
                float *x = rand_vec((int64_t)nr * cols);
                float *ya = malloc(sizeof(float) * nr * rows), *yv = malloc(sizeof(float) * nr * rows);
                dsv4_kctx_set_simd(kc[2], DSV4_SIMD_AVX512);
                dsv4_linear(kc[2], &t.m, x, nr, ya);
                dsv4_kctx_set_simd(kc[2], DSV4_SIMD_AVX512VBMI);
                dsv4_linear(kc[2], &t.m, x, nr, yv);
                bad += bits_differ(ya, yv, (int64_t)nr * rows);
                total += (int64_t)nr * rows;
                free(x); free(ya); free(yv);
            }
            free_mat(&t);
        }
    CHECK_MSG(bad == 0, "%s: %lld of %lld outputs differ between levels avx512 and avx512vbmi", fmt_name(f, SC_E8M0),
              (long long)bad, (long long)total);
    printf("%s avx512vbmi vs avx512: %lld outputs, %lld differ in any bit\n", fmt_name(f, SC_E8M0), (long long)total,
           (long long)bad);
}

/* Every path a level has (GEMV, small-M, GEMM; forced with dsv4_kctx_set_lin_path) gives
 * the same bits as the path the thresholds pick, at every row count each path takes, on
 * the expert shapes and odd ones (partial scale blocks, a masked last chunk, a short
 * last task), both scale kinds; the reference checks of check_case cover AUTO itself. */
static void check_paths_agree(int level) {
    static const int64_t shapes[][2] = {{512, 1024}, {1024, 512}, {68, 288}, {7, 133}, {130, 1056}, {9, 2085}};
    static const int nrs[] = {1, 3, 4, 7, 8, 9, 12, 13, 16, 17, 24, 25, 31, 32, 33, 48, 64, 65, 100};
    const dsv4_wfmt fmts[4] = {DSV4_WF_FP4, DSV4_WF_FP8, DSV4_WF_BF16, DSV4_WF_F32};
    int64_t bad = 0, total = 0;
    for (int fi = 0; fi < 4; fi++)
        for (int sc = 0; sc < 2; sc++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                const dsv4_wfmt f = fmts[fi];
                const int64_t rows = shapes[si][0], cols = shapes[si][1];
                if ((f == DSV4_WF_FP4 && cols % 32) || (sc == SC_F32 && f != DSV4_WF_FP8 && f != DSV4_WF_FP4)) continue;
                /* the big shapes once per format, and not under the sanitizers (a -O0 build:
                 * they cost tens of seconds there and cover nothing the odd shapes miss) */
                if (rows * cols > 300000 && (sc == SC_F32 || f == DSV4_WF_F32 || sanitized)) continue;
                tmat t = make_mat(f, sc, rows, cols);
                for (size_t ni = 0; ni < sizeof nrs / sizeof nrs[0]; ni++) {
                    const int nr = nrs[ni];
                    float *x = rand_vec((int64_t)nr * cols);
                    float *ya = malloc(sizeof(float) * nr * rows), *yp = malloc(sizeof(float) * nr * rows);
                    dsv4_kctx_set_simd(kc[2], level);
                    dsv4_linear(kc[2], &t.m, x, nr, ya);
                    unsigned done = 1u << forced_path_of(kc[2], DSV4_LIN_AUTO, &t.m, nr); /* paths compared */
                    for (int path = DSV4_LIN_GEMV; path <= DSV4_LIN_GEMM; path++) {
                        const unsigned taken = 1u << forced_path_of(kc[2], (dsv4_lin_path)path, &t.m, nr);
                        if (done & taken) continue; /* the same plan as one already run */
                        done |= taken;
                        const int64_t b = forced_differs(kc[2], (dsv4_lin_path)path, &t.m, x, nr, ya, yp);
                        CHECK_MSG(b == 0, "%s level %d %lldx%lld n_rows %d: forced path %d differs from auto in %lld outputs",
                                  fmt_name(f, sc), level, (long long)rows, (long long)cols, nr, path, (long long)b);
                        bad += b;
                        total += (int64_t)nr * rows;
                    }
                    free(x), free(ya), free(yp);
                }
                free_mat(&t);
            }
    printf("level %s: GEMV / small-M / GEMM forced against auto: %lld outputs, %lld differ in any bit\n",
           dsv4_simd_name(level), (long long)total, (long long)bad);
    /* forcings that take auto's own path are skipped: at a level with several paths some must remain */
    CHECK_MSG(total > 0, "level %s: no forced path other than auto's ran", dsv4_simd_name(level));
}

/* dsv4_linear_here (one product on the calling thread, one kernel call) gives dsv4_linear's
 * bits, on whole matrices and on row views; an FP8 view is made where it starts a scale
 * band or lies inside one, and refused where it would straddle one. */
static void check_here_and_views(int level) {
    const dsv4_wfmt fmts[4] = {DSV4_WF_FP8, DSV4_WF_FP4, DSV4_WF_BF16, DSV4_WF_F32};
    static const int64_t views[][2] = {{0, 64}, {64, 64}, {192, 61}, {128, 128}, {8, 100}, {0, 256}};
    int64_t bad = 0;
    for (int fi = 0; fi < 4; fi++)
        for (int sc = 0; sc < (fmts[fi] == DSV4_WF_FP8 || fmts[fi] == DSV4_WF_FP4 ? 2 : 1); sc++)
            for (int nr = 1; nr <= 3; nr += 2) {
                const int64_t rows = 256, cols = 160;
                tmat t = make_mat(fmts[fi], sc, rows, cols);
                float *x = rand_vec(nr * cols), *y = malloc(sizeof(float) * nr * rows);
                float *yv = malloc(sizeof(float) * nr * rows), *yh = malloc(sizeof(float) * nr * rows);
                dsv4_kctx_set_simd(kc[2], level);
                dsv4_linear(kc[2], &t.m, x, nr, y);
                for (size_t vi = 0; vi < sizeof views / sizeof views[0]; vi++) {
                    const int64_t r0 = views[vi][0], n = views[vi][1];
                    dsv4_mat v;
                    const int straddles = fmts[fi] == DSV4_WF_FP8 && r0 % 128 && r0 % 128 + n > 128;
                    const int rc = dsv4_mat_rows(&t.m, r0, n, &v);
                    CHECK_MSG(rc == (straddles ? -1 : 0), "%s view [%lld, +%lld): dsv4_mat_rows %d", fmt_name(fmts[fi], sc),
                              (long long)r0, (long long)n, rc);
                    if (rc) continue;
                    const dsv4_lin_op op = {&v, x, nr, yh};
                    dsv4_linear_here(kc[2], &op, 1);
                    dsv4_linear(kc[2], &v, x, nr, yv);
                    for (int s = 0; s < nr; s++)
                        bad += !same_bits(yh + s * n, y + s * rows + r0, n) || !same_bits(yv + s * n, y + s * rows + r0, n);
                }
                free(x), free(y), free(yv), free(yh);
                free_mat(&t);
            }
    CHECK_MSG(bad == 0, "level %s: %lld row views differ from the whole product (linear_here or linear)",
              dsv4_simd_name(level), (long long)bad);
    /* a view straddling a band is refused, whatever the scales */
    tmat t = make_mat(DSV4_WF_FP8, SC_E8M0, 256, 32);
    dsv4_mat v;
    CHECK(dsv4_mat_rows(&t.m, 64, 65, &v) == -1 && dsv4_mat_rows(&t.m, 127, 2, &v) == -1);
    free_mat(&t);
}

/* dsv4_linear_batch_strided: two products on column slices of wide x and y arrays (the
 * grouped output projection's layout) give dsv4_linear's bits row by row, for row counts on
 * both sides of DSV4_LIN_STRIDED_MIN_ROWS, and leave y's other columns alone; x's padding
 * holds NaN, which a read would carry into every output. */
static void check_strided(int level) {
    const dsv4_wfmt fmts[4] = {DSV4_WF_FP8, DSV4_WF_FP4, DSV4_WF_BF16, DSV4_WF_F32};
    static const int nrs[] = {1, 5, 65, 100};
    int64_t bad = 0, kept = 1;
    for (int fi = 0; fi < 4; fi++)
        for (size_t ni = 0; ni < sizeof nrs / sizeof nrs[0]; ni++) {
            const int nr = nrs[ni];
            const int64_t rows = 136, cols = fmts[fi] == DSV4_WF_FP4 ? 544 : 533; /* two column tiles */
            const int64_t ldx = 2 * cols + 7, ldy = 2 * rows + 3;
            tmat t[2] = {make_mat(fmts[fi], SC_E8M0, rows, cols), make_mat(fmts[fi], SC_E8M0, rows, cols)};
            float *xw = malloc(sizeof(float) * nr * ldx), *yw = malloc(sizeof(float) * nr * ldy);
            float *x = rand_vec((int64_t)nr * cols), *y = malloc(sizeof(float) * nr * rows);
            for (int64_t i = 0; i < (int64_t)nr * ldx; i++) xw[i] = NAN;
            for (int64_t i = 0; i < (int64_t)nr * ldy; i++) yw[i] = -7.0f;
            for (int g = 0; g < 2; g++)
                for (int s = 0; s < nr; s++) memcpy(xw + s * ldx + g * cols, x + s * cols, sizeof(float) * cols);
            dsv4_kctx_set_simd(kc[2], level);
            const dsv4_lin_op ops[2] = {{&t[0].m, xw, nr, yw}, {&t[1].m, xw + cols, nr, yw + rows}};
            dsv4_linear_batch_strided(kc[2], ops, 2, ldx, ldy);
            for (int g = 0; g < 2; g++) {
                dsv4_linear(kc[2], &t[g].m, x, nr, y);
                for (int s = 0; s < nr; s++) bad += !same_bits(yw + s * ldy + g * rows, y + s * rows, rows);
            }
            for (int s = 0; s < nr; s++)
                for (int64_t o = 2 * rows; o < ldy; o++) kept &= yw[s * ldy + o] == -7.0f;
            free(xw), free(yw), free(x), free(y);
            free_mat(&t[0]), free_mat(&t[1]);
        }
    CHECK_MSG(bad == 0, "level %s: %lld strided rows differ from dsv4_linear", dsv4_simd_name(level), (long long)bad);
    CHECK_MSG(kept, "level %s: a strided product wrote outside its columns", dsv4_simd_name(level));
}

/* Bytes [0, n) that end exactly at an inaccessible page: a load past the end faults (and
 * the run fails) while prefetches, which never fault, may run on. Released by guard_free. */
typedef struct { void *map; size_t len; } guard_buf;

static void *guard_alloc(guard_buf *g, const void *src, size_t n) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    const size_t data = (n + pg - 1) / pg * pg;
    g->len = data + pg;
    g->map = mmap(NULL, g->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) return NULL;
    char *guard = (char *)g->map + data;
    if (mprotect(guard, pg, PROT_NONE) != 0) return NULL;
    memcpy(guard - n, src, n);
    return guard - n;
}

static void guard_free(guard_buf *g) {
    if (g->map && g->map != MAP_FAILED) munmap(g->map, g->len);
}

/* Decode-shaped and odd matrices with weights and scales against a guard page: every GEMV
 * width (n_rows 1..4) must run without faulting and give the bits of the GEMM path (n_rows
 * 5, the same rows) on an ordinary copy, at every level and thread count. */
static void check_guard_pages(int level) {
    static const int64_t shapes[][2] = {{256, 1024}, {512, 1024}, {1024, 512}, {520, 256},
                                        {68, 2048}, {7, 96}, {131, 288}, {5, 32}, {7, 37}, {130, 133}};
    const dsv4_wfmt fmts[5] = {DSV4_WF_F32, DSV4_WF_F16, DSV4_WF_BF16, DSV4_WF_FP8, DSV4_WF_FP4};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int fi = 0; fi < 5; fi++) {
            const dsv4_wfmt f = fmts[fi];
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            if (f == DSV4_WF_FP4 && cols % 32) continue; /* FP4 rows are whole 32-blocks */
            tmat t = make_mat(f, SC_E8M0, rows, cols);
            const size_t wbytes = (size_t)(dsv4_mat_bytes(&t.m) - (f == DSV4_WF_FP8   ? ((rows + 127) / 128) * ((cols + 127) / 128)
                                                                    : f == DSV4_WF_FP4 ? rows * (cols / 32)
                                                                                       : 0));
            const size_t sbytes = (size_t)dsv4_mat_bytes(&t.m) - wbytes;
            guard_buf gw = {0}, gs = {0};
            dsv4_mat m = t.m;
            m.w = guard_alloc(&gw, t.w, wbytes);
            if (sbytes) m.scale = guard_alloc(&gs, t.scale, sbytes);
            CHECK_MSG(m.w && (!sbytes || m.scale), "guard page setup failed");
            if (!m.w || (sbytes && !m.scale)) {
                guard_free(&gw), guard_free(&gs), free_mat(&t);
                continue;
            }
            float *x = rand_vec(5 * cols), *yg = malloc(sizeof(float) * 5 * rows), *y = malloc(sizeof(float) * 4 * rows);
            dsv4_kctx_set_simd(kc[2], level);
            dsv4_linear(kc[2], &t.m, x, 5, yg); /* GEMM path, ordinary memory */
            for (int th = 1; th <= 3; th++) {
                dsv4_kctx_set_simd(kc[th], level);
                for (int nx = 1; nx <= 4; nx++) {
                    dsv4_linear(kc[th], &m, x, nx, y);
                    CHECK_MSG(same_bits(y, yg, (int64_t)nx * rows),
                              "%s level %d %lldx%lld n_rows %d threads %d: against a guard page, differs from GEMM",
                              fmt_name(f, SC_E8M0), level, (long long)rows, (long long)cols, nx, th);
                }
            }
            free(x), free(yg), free(y);
            guard_free(&gw), guard_free(&gs), free_mat(&t);
        }
}

/* The FP4 GEMV of a task that is a whole matrix (dsv4_linear_here: moe_one's row views)
 * reads its rows as 4 far-apart runs of q = rows / 4 rows at level avx512 and up (from 16
 * rows a run; the last rows % 4 one by one; at one activation row 2 adjacent rows of each
 * run a block, an odd q's last row of each run after them); every output must be the bits
 * of the GEMM path (forced) at every level, for 1..4
 * activation rows, both scale kinds, runs of 15 (adjacent rows instead), 16 and more rows
 * (odd and even), 0..3 rows left over, the widths the one-row blocks compile as constants
 * (512, 1024) and others, with the weights and scales against a guard page (each run's
 * prefetch runs on past the matrix's end and must stay a prefetch). Outputs start as NaN,
 * so a row left out shows. */
static void check_fp4_far_runs(int level) {
    static const int64_t rows_set[] = {60, 64, 67, 68, 130, 135, 257, 515};
    static const int64_t cols_set[] = {32, 288, 512, 1024};
    int64_t bad = 0, total = 0;
    for (int sc = 0; sc < 2; sc++)
        for (size_t ri = 0; ri < sizeof rows_set / sizeof rows_set[0]; ri++)
            for (size_t ci = 0; ci < sizeof cols_set / sizeof cols_set[0]; ci++) {
                const int64_t rows = rows_set[ri], cols = cols_set[ci];
                tmat t = make_mat(DSV4_WF_FP4, sc, rows, cols);
                const size_t sbytes = (size_t)(rows * (cols / 32)) * (sc == SC_F32 ? 4 : 1);
                guard_buf gw = {0}, gs = {0};
                dsv4_mat m = t.m;
                m.w = guard_alloc(&gw, t.w, (size_t)(rows * cols / 2));
                m.scale = guard_alloc(&gs, t.scale, sbytes);
                CHECK_MSG(m.w && m.scale, "guard page setup failed");
                if (!m.w || !m.scale) {
                    guard_free(&gw), guard_free(&gs), free_mat(&t);
                    continue;
                }
                float *x = rand_vec(4 * cols), *yg = malloc(sizeof(float) * 4 * rows);
                float *y = malloc(sizeof(float) * 4 * rows);
                dsv4_kctx_set_simd(kc[2], level);
                for (int nx = 1; nx <= 4; nx++) {
                    linear_forced(kc[2], DSV4_LIN_GEMM, &t.m, x, nx, yg);
                    for (int64_t i = 0; i < nx * rows; i++) y[i] = NAN;
                    const dsv4_lin_op op = {&m, x, nx, y};
                    dsv4_linear_here(kc[2], &op, 1);
                    const int64_t b = bits_differ(yg, y, nx * rows);
                    CHECK_MSG(b == 0, "%s level %d %lldx%lld n_rows %d: one task of the whole matrix differs from the GEMM in %lld outputs",
                              fmt_name(DSV4_WF_FP4, sc), level, (long long)rows, (long long)cols, nx, (long long)b);
                    bad += b;
                    total += nx * rows;
                }
                free(x), free(yg), free(y);
                guard_free(&gw), guard_free(&gs), free_mat(&t);
            }
    printf("level %s: FP4 GEMV of whole matrices (far runs) against the GEMM: %lld outputs, %lld differ in any bit\n",
           dsv4_simd_name(level), (long long)total, (long long)bad);
}

/* A job of FP4 products as a decode step's expert phase hands them over (dsv4_linear_batch:
 * many matrices of 1..4 activation rows, most within the whole-matrix share, one larger
 * one cut into tasks): every output must be the bits of the GEMM path (forced) on 1, 2
 * and 3 threads, row counts with 0..3 rows left over a run, both scale kinds. Outputs start
 * as NaN, so a row no task took shows. */
static void check_fp4_job(int level) {
    enum { NOPS = 13 };
    static const int64_t rows_set[] = {64, 67, 130, 257, 515, 96};
    int64_t bad = 0, total = 0;
    for (int sc = 0; sc < 2; sc++) {
        tmat t[NOPS];
        float *x[NOPS], *y[NOPS], *yg[NOPS];
        dsv4_lin_op ops[NOPS];
        for (int i = 0; i < NOPS; i++) {
            const int64_t rows = i == NOPS - 1 ? 2048 : rows_set[i % 6], cols = i % 3 ? 288 : 1024;
            const int nr = 1 + i % 4;
            t[i] = make_mat(DSV4_WF_FP4, sc, rows, cols);
            x[i] = rand_vec(nr * cols), y[i] = malloc(sizeof(float) * nr * rows), yg[i] = malloc(sizeof(float) * nr * rows);
            dsv4_kctx_set_simd(kc[1], level);
            linear_forced(kc[1], DSV4_LIN_GEMM, &t[i].m, x[i], nr, yg[i]);
            ops[i] = (dsv4_lin_op){&t[i].m, x[i], nr, y[i]};
        }
        for (int th = 1; th <= 3; th++) {
            dsv4_kctx_set_simd(kc[th], level);
            for (int i = 0; i < NOPS; i++)
                for (int64_t j = 0; j < ops[i].n_rows * t[i].m.rows; j++) y[i][j] = NAN;
            dsv4_linear_batch(kc[th], ops, NOPS);
            for (int i = 0; i < NOPS; i++) {
                const int64_t b = bits_differ(yg[i], y[i], ops[i].n_rows * t[i].m.rows);
                CHECK_MSG(b == 0, "%s level %d, %d threads, op %d (%lldx%lld, %d rows): %lld outputs differ from the GEMM",
                          fmt_name(DSV4_WF_FP4, sc), level, th, i, (long long)t[i].m.rows, (long long)t[i].m.cols,
                          ops[i].n_rows, (long long)b);
                bad += b;
                total += ops[i].n_rows * t[i].m.rows;
            }
        }
        for (int i = 0; i < NOPS; i++) free(x[i]), free(y[i]), free(yg[i]), free_mat(&t[i]);
    }
    printf("level %s: a job of FP4 GEMVs on 1..3 threads against the GEMM: %lld outputs, %lld differ in any bit\n",
           dsv4_simd_name(level), (long long)total, (long long)bad);
}

/* FP8 NaN codes: one rule at every level and on every path. Rows holding a 0x7F or 0xFF
 * byte (at the start, in the middle, in a partial last block) must give NaN for every
 * activation row, whatever x is (x = 0 included: 0 * NaN is NaN); every other row must be
 * finite and equal the same matrix without the NaN codes, bit for bit. */
static void check_fp8_nan(int level) {
    static const int64_t shapes[][2] = {{130, 300}, {8, 1056}, {5, 37}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int sc = 0; sc < 2; sc++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            tmat t = make_mat(DSV4_WF_FP8, sc, rows, cols);
            uint8_t *p = t.w;
            const uint8_t orig[3] = {p[1 * cols + 0], p[2 * cols + cols / 2], p[4 * cols + cols - 1]};
            float *x = rand_vec(9 * cols), *y_clean = malloc(sizeof(float) * 9 * rows);
            for (int64_t i = 0; i < cols; i++) x[2 * cols + i] = 0.0f; /* activation row 2: all zeros */
            dsv4_kctx_set_simd(kc[2], level);
            dsv4_linear(kc[2], &t.m, x, 9, y_clean);
            p[1 * cols + 0] = 0x7F, p[2 * cols + cols / 2] = 0xFF, p[4 * cols + cols - 1] = 0x7F;
            for (int nx = 1; nx <= 9; nx += 4) /* GEMV 1, 5 (two passes) and GEMM 9 */
                for (int th = 1; th <= 3; th += 2) {
                    float *y = malloc(sizeof(float) * (size_t)nx * rows);
                    dsv4_kctx_set_simd(kc[th], level);
                    dsv4_linear(kc[th], &t.m, x, nx, y);
                    int64_t bad_nan = 0, bad_clean = 0;
                    for (int s = 0; s < nx; s++)
                        for (int64_t o = 0; o < rows; o++) {
                            const float v = y[(int64_t)s * rows + o];
                            if (o == 1 || o == 2 || o == 4) bad_nan += !isnan(v);
                            else bad_clean += memcmp(&v, &y_clean[(int64_t)s * rows + o], sizeof v) != 0;
                        }
                    CHECK_MSG(bad_nan == 0 && bad_clean == 0,
                              "fp8 NaN codes, %s level %d %lldx%lld n_rows %d threads %d: %lld outputs not NaN, "
                              "%lld other outputs changed", fmt_name(DSV4_WF_FP8, sc), level, (long long)rows,
                              (long long)cols, nx, th, (long long)bad_nan, (long long)bad_clean);
                    free(y);
                }
            p[1 * cols + 0] = orig[0], p[2 * cols + cols / 2] = orig[1], p[4 * cols + cols - 1] = orig[2];
            free(x), free(y_clean);
            free_mat(&t);
        }
}

static void check_edges(void) {
    /* an absent matrix gives zeros like the reference; zero rows write nothing */
    dsv4_mat none = {DSV4_WF_NONE, 3, 5, NULL, NULL, 0, 0};
    float x[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, y[6] = {1, 1, 1, 1, 1, 1};
    dsv4_linear(kc[2], &none, x, 2, y);
    int zeros = 1;
    for (int i = 0; i < 6; i++) zeros &= y[i] == 0.0f;
    CHECK(zeros);
    float keep[2] = {7, 7};
    dsv4_linear(kc[2], &none, x, 0, keep);
    CHECK(keep[0] == 7 && keep[1] == 7);
}

int main(void) {
    const int best = fixture_open();
    CHECK(best >= 0);
    if (best < 0) return test_report();

    const dsv4_wfmt fmts[5] = {DSV4_WF_F32, DSV4_WF_F16, DSV4_WF_BF16, DSV4_WF_FP8, DSV4_WF_FP4};
    const int64_t rows_set[4] = {1, 7, 129, 300};
    const int64_t cols_set[4] = {32, 96, 160, 1056};
    const int64_t odd_cols[4] = {1, 37, 133, 300}; /* not for FP4: its rows are whole 32-blocks */
    const int nrows_set[3] = {1, 3, 17};
    for (int level = 0; level <= best; level++) {
        const clock_t t0 = clock();
        for (int fi = 0; fi < 5; fi++) {
            const dsv4_wfmt f = fmts[fi];
            const int n_sc = (f == DSV4_WF_FP8 || f == DSV4_WF_FP4) ? 2 : 1;
            for (int sc = 0; sc < n_sc; sc++)
                for (int ri = 0; ri < 4; ri++)
                    for (int ni = 0; ni < 3; ni++) {
                        for (int ci = 0; ci < 4; ci++) check_case(f, sc, rows_set[ri], cols_set[ci], nrows_set[ni], level);
                        if (f != DSV4_WF_FP4)
                            for (int ci = 0; ci < 4; ci++) check_case(f, sc, rows_set[ri], odd_cols[ci], nrows_set[ni], level);
                    }
            /* the other few-row widths: the GEMV's passes (AVX2: 4 rows a pass, up to 8;
             * AVX-512: 8 rows a pass, up to 16), the small-M kernel (avx512vbmi: from 8 rows
             * for FP8 and BF16, 5 for FP4, 2 for F32, 17 for F16, up to LIN_SMALLM_MAX_ROWS), the edges between
             * them and the first GEMM width past every level's GEMV and small-M */
            const int64_t few_rows[2] = {7, 129}, few_cols[3] = {96, 133, 1056};
            const int few_nr[10] = {2, 4, 5, 8, 9, 12, LIN_GEMV_MAX_ROWS, LIN_GEMV_MAX_ROWS + 1, 23, LIN_SMALLM_MAX_ROWS};
            for (int sc = 0; sc < n_sc; sc++)
                for (int ni = 0; ni < 10; ni++)
                    for (int ri = 0; ri < 2; ri++)
                        for (int ci = 0; ci < 3; ci++)
                            if (f != DSV4_WF_FP4 || few_cols[ci] % 32 == 0)
                                check_case(f, sc, few_rows[ri], few_cols[ci], few_nr[ni], level);
            /* rows too long for a small-M panel in the tile scratch: the GEMV or GEMM instead */
            check_case(f, SC_E8M0, 5, 7200, 12, level);
            /* the AVX-512 FP4 GEMV permutes x into a stack buffer of 8192 floats: 3 rows of
             * 4128 columns do not fit it (x permuted per chunk instead), each row alone does,
             * and the two ways must give the same bits */
            if (f == DSV4_WF_FP4) check_case(f, SC_E8M0, 9, 4128, 3, level);
            for (int sc = 0; sc < n_sc; sc++) {
                check_exact(f, sc, 131, f == DSV4_WF_FP4 ? 288 : 291, level, NULL);
                check_exact(f, sc, 5, f == DSV4_WF_FP4 ? 32 : 9, level, NULL);
            }
        }
        /* FP8 scale 2^121: 256 * scale overflows F32, the fast path must still be exact */
        const uint8_t huge = 248;
        check_exact(DSV4_WF_FP8, SC_E8M0, 130, 260, level, &huge);
        check_fp8_prescale_guard(level);
        check_fp8_nan(level);
        check_guard_pages(level);
        if (level > DSV4_SIMD_SCALAR) check_fp4_far_runs(level);
        check_fp4_job(level);
        if (level > DSV4_SIMD_SCALAR) check_paths_agree(level);
        check_here_and_views(level);
        check_strided(level);
        /* a batch larger than one accumulator block (LIN_MB rows) */
        check_case(DSV4_WF_BF16, SC_E8M0, 40, 300, 200, level);
        check_case(DSV4_WF_FP4, SC_E8M0, 33, 544, 101, level);
        /* GEMM tasks of several accumulator blocks: rows whose every column tile the
         * task's panel holds (dequantized once, reused by the later blocks), and rows one
         * tile longer (dequantized again for every block) */
        check_case(DSV4_WF_FP8, SC_E8M0, 50, LIN_PANEL_TILES * LIN_KB, 100, level);
        check_case(DSV4_WF_FP8, SC_E8M0, 50, LIN_PANEL_TILES * LIN_KB + 37, 100, level);
        printf("level %s: %.2f s cpu\n", dsv4_simd_name(level), (double)(clock() - t0) / CLOCKS_PER_SEC);
    }
    check_edges();
    if (best >= DSV4_SIMD_AVX512VBMI) {
        check_vbmi_matches_avx512(DSV4_WF_FP8);
        check_vbmi_matches_avx512(DSV4_WF_FP4);
    } else {
        printf("SKIPPED: avx512vbmi vs avx512 (this CPU or build lacks VBMI)\n");
    }

    for (int level = 0; level <= best; level++)
        for (int k = 0; k < 9; k++) {
            const stat *st = &stats[level][k];
            if (!st->cases) continue;
            const dsv4_wfmt f = (dsv4_wfmt)(k > 5 ? k - 3 : k);
            printf("%-6s %-14s cases %3d  max-abs %.3g  max-rel %.3g (cases with >= 128 outputs)  "
                   "max|diff|/max(|ref|, |x.w|_2) %.3g\n", dsv4_simd_name(level),
                   fmt_name(f, k > 5 ? SC_F32 : SC_E8M0), st->cases, st->max_abs, st->max_rel, st->max_rel_l2);
        }
    fixture_close();
    return test_report();
}

