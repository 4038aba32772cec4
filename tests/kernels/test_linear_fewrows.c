/* test_linear_fewrows.c — batched decode's few-row products (2..8 activation rows): at every
 * level this CPU runs, each row of a 2..8-row dsv4_linear call must be the bits of that row's
 * own one-row call (linear_fast.h's contract: a row's result does not depend on the rows beside
 * it; batch-B decode equals B batch-1 decodes), whichever path the thresholds pick (at level
 * avx512vbmi on AMD cores: FP8 small-M's bit decode, or the GEMV's few-row bit decode
 * gemvn_fp8v at wide rows) and with the GEMV forced (gemvn_fp8v at every width), on 1..3
 * threads. FP8 (ue8m0 and F32 scales), BF16 and both FP4 layouts; shapes with several scale
 * bands and a partial last one, odd output counts (rows past the 4 far runs), a masked last
 * column chunk, the decode step's widths 256 .. 2048 and Flash's 4096, a tall BF16 matrix (1030 rows: 8-row calls take
 * the GEMV's far runs, lin_pick). Inputs: random; x
 * with zeros and subnormals; one activation row huge (x * 2^(b - 7) overflows: that piece
 * falls back to the table path); NaN codes in three weight rows (their outputs NaN in both
 * calls, every other output the same bits). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu.h"
#include "linear_fixture.h"
#include "test.h"

/* outputs of yn's row s (rows outputs) whose bits differ from y1's, NaN against NaN equal */
static int64_t row_differs(const float *y1, const float *yn, int64_t rows) {
    int64_t d = 0;
    for (int64_t o = 0; o < rows; o++) {
        if (isnan(y1[o]) && isnan(yn[o])) continue;
        d += memcmp(&y1[o], &yn[o], sizeof(float)) != 0;
    }
    return d;
}

static int64_t bad_total, n_total, n_forced; /* n_forced: outputs of calls with the GEMV forced */

/* every row of nr-row calls of t (auto and GEMV forced, 1..3 threads) against its one-row call */
static void check_rows(const tmat *t, const float *x, int nr, int level, const char *what) {
    const int64_t rows = t->m.rows, cols = t->m.cols;
    float *y1 = malloc(sizeof(float) * (size_t)(nr * rows)), *yn = malloc(sizeof(float) * (size_t)(nr * rows));
    dsv4_kctx_set_simd(kc[1], level);
    for (int s = 0; s < nr; s++) dsv4_linear(kc[1], &t->m, x + s * cols, 1, y1 + s * rows);
    for (int th = 1; th <= 3; th++)
        for (int forced = 0; forced < 2; forced++) {
            dsv4_kctx_set_simd(kc[th], level);
            /* the GEMV forced where auto takes it already (or the level has none) is the same plan */
            if (forced && forced_path_of(kc[th], DSV4_LIN_GEMV, &t->m, nr) == forced_path_of(kc[th], DSV4_LIN_AUTO, &t->m, nr))
                continue;
            for (int64_t i = 0; i < nr * rows; i++) yn[i] = -12345.0f; /* every output written */
            if (forced) linear_forced(kc[th], DSV4_LIN_GEMV, &t->m, x, nr, yn);
            else dsv4_linear(kc[th], &t->m, x, nr, yn);
            for (int s = 0; s < nr; s++) {
                const int64_t b = row_differs(y1 + s * rows, yn + s * rows, rows);
                CHECK_MSG(b == 0, "%s %s level %s %lldx%lld, %d rows, row %d, %d threads%s: %lld outputs differ",
                          fmt_name(t->m.fmt, t->m.scale_is_f32), what, dsv4_simd_name(level), (long long)rows,
                          (long long)cols, nr, s, th, forced ? ", GEMV forced" : "", (long long)b);
                bad_total += b;
                n_total += rows;
                n_forced += forced ? rows : 0;
            }
        }
    free(y1), free(yn);
}

static void check_level(int level) {
    static const int64_t shapes[][2] = {{300, 2048}, {261, 1024}, {517, 256}, {1030, 256}, {130, 4096}, {67, 2100}, {9, 133}};
    const dsv4_wfmt fmts[4] = {DSV4_WF_FP8, DSV4_WF_BF16, DSV4_WF_FP4L, DSV4_WF_FP4};
    for (int fi = 0; fi < 4; fi++)
        for (int sc = 0; sc < 2; sc++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                const dsv4_wfmt f = fmts[fi];
                const int64_t rows = shapes[si][0], cols = shapes[si][1];
                if (sc == SC_F32 && f != DSV4_WF_FP8) continue;
                if ((f == DSV4_WF_FP4 && cols % 32) || (f == DSV4_WF_FP4L && cols % 128)) continue;
                if (level == DSV4_SIMD_SCALAR && rows * cols > 300000) continue; /* plain C: the small ones */
                const int fp8 = f == DSV4_WF_FP8 && sc == SC_E8M0;
                for (int v = 0; v < (fp8 ? 4 : 1); v++) {
                    /* random FP4 bytes are a valid lanes-layout matrix too */
                    tmat t = make_mat(f == DSV4_WF_FP4L ? DSV4_WF_FP4 : f, sc, rows, cols);
                    t.m.fmt = f;
                    float *x = rand_vec(8 * cols);
                    const char *what = "random";
                    if (v == 1) { /* zeros and subnormals in every row */
                        what = "zeros, subnormals";
                        for (int64_t i = 0; i < 8 * cols; i += 3) x[i] = i % 2 ? 0.0f : 1e-40f * (float)(i % 7 - 3);
                    } else if (v == 2) { /* row 1 huge: x * 2^(b - 7) overflows, that row's pieces fall back */
                        what = "one row huge";
                        for (int64_t i = 0; i < cols; i += 5) x[cols + i] = 3e37f;
                    } else if (v == 3) { /* NaN codes in 3 weight rows */
                        what = "NaN codes";
                        uint8_t *p = t.w;
                        p[0 * cols + cols - 1] = 0x7F, p[(rows / 2) * cols + cols / 2] = 0xFF, p[(rows - 1) * cols] = 0x7F;
                    }
                    for (int nr = 2; nr <= 8; nr++) check_rows(&t, x, nr, level, what);
                    free(x);
                    free_mat(&t);
                }
            }
}

int main(void) {
    const int best = fixture_open();
    CHECK(best >= 0);
    if (best < 0) return test_report();
    for (int level = DSV4_SIMD_SCALAR; level <= best; level++) {
        bad_total = n_total = n_forced = 0;
        check_level(level);
        printf("level %s: rows of 2..8-row calls against their one-row calls: %lld outputs (%lld with the GEMV "
               "forced), %lld differ in any bit\n",
               dsv4_simd_name(level), (long long)n_total, (long long)n_forced, (long long)bad_total);
    }
    fixture_close();
    return test_report();
}
