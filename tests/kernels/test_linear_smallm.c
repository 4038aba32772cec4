/* test_linear_smallm.c — the small-M kernel (2..64 activation rows: decode batches, MTP
 * verify) gives every output's bits of the GEMM: its register blocks, the fused FP4 path, the
 * FP4 panels decoded by their first block, at every level that has it and on 1..3 threads;
 * and at level avx512vbmi the FP8 bit decode (scaled x, its bands and the x kept across a
 * thread's tasks), the dense BF16/F16/F32 blocks and FP4 row counts against the other paths; at level
 * avx2 its panels at 21..64 rows and the rows the picker gives it. */
#include <stdint.h>

#include "kernels/cpu.h"
#include "linear_fixture.h"
#include "test.h"

/* Small-M's FP8 bit decode (avx512vbmi, ue8m0 scales, AMD cores: x prescaled per scale band
 * of a task, 3 weight rows x up to 8 activation rows a register block) against the GEMM forced
 * on one thread, small-M forced on 1..3 threads at row counts of every pass split and block
 * remainder: several bands and a partial last one, odd task splits, rows of 256..8192 columns
 * (8192 at 21+ rows outgrows the scratch: the panel path), widths not a multiple of 16 (the
 * panel path). Four cases: plain; an x past what 2^(b - 7) can scale in every band (the panel
 * path everywhere); NaN codes in three rows (those bands by the panel path, their outputs NaN,
 * the other bands' the same bits); an x that overflows in the odd bands only. Each with the
 * machine's choice and with the tables' (Intel's) panel path forced. */
static void check_smallm_fp8_bits(void) {
    static const int64_t shapes[][2] = {{300, 1024}, {130, 2048}, {261, 256}, {44, 4096}, {24, 8192}, {20, 200}};
    static const int nrs[] = {1, 2, 3, 5, 8, 9, 13, 16, 17, 21, 24, 32, 33, 48};
    int64_t bad = 0, total = 0;
    const int amd = dsv4_kctx_lin_tables(kc[1])->subnormal_fma_fast;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int v = 0; v < 6; v++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1], nsb = (cols + 127) / 128;
            tmat t = make_mat(DSV4_WF_FP8, SC_E8M0, rows, cols);
            uint8_t *p = t.w, *sc = t.scale;
            const int64_t nan_rows[3] = {0, rows / 2, rows - 1};
            if (v == 2)
                p[nan_rows[0] * cols + cols - 1] = 0x7F, p[nan_rows[1] * cols + cols / 2] = 0xFF,
                p[nan_rows[2] * cols] = 0x7F;
            if (v == 3) /* x = 2^10: 2^(10 + 125 - 7) overflows in the odd bands, 2^(10 + 118 - 7) not */
                for (int64_t b = 0; b < (rows + 127) / 128; b++) sc[b * nsb + cols / 3 / 128] = b % 2 ? 125 : 118;
            /* v 4, 5: every block's scale the same from band to band but one (the scaled x of a band is
             * kept where its block's scale repeats); 5: that block overflows x = 2^10 in the odd bands */
            if (v >= 4)
                for (int64_t b = 0; b < (rows + 127) / 128; b++)
                    for (int64_t j = 0; j < nsb; j++)
                        sc[b * nsb + j] = j != cols / 3 / 128 ? 120 : v == 4 ? 118 + b % 3 : b % 2 ? 125 : 118;
            for (size_t ni = 0; ni < sizeof nrs / sizeof nrs[0]; ni++) {
                const int nr = nrs[ni];
                if (sanitized && nr > 17) continue;
                float *x = rand_vec((int64_t)nr * cols);
                float *yg = malloc(sizeof(float) * nr * rows), *ys = malloc(sizeof(float) * nr * rows);
                if (v == 1) x[(int64_t)(nr - 1) * cols + cols / 2] = 1e30f;
                if (v == 3 || v == 5) x[(int64_t)(nr / 2) * cols + cols / 3] = 0x1p10f;
                dsv4_kctx_set_simd(kc[1], DSV4_SIMD_AVX512VBMI);
                linear_forced(kc[1], DSV4_LIN_GEMM, &t.m, x, nr, yg);
                for (int th = 1; th <= 6; th++) {
                    const int tk = (th - 1) % 3 + 1;
                    dsv4_lin_tables *tab = (dsv4_lin_tables *)dsv4_kctx_lin_tables(kc[tk]);
                    tab->subnormal_fma_fast = th <= 3 ? amd : 0;
                    for (int64_t i = 0; i < (int64_t)nr * rows; i++) ys[i] = -1.0f;
                    dsv4_kctx_set_simd(kc[tk], DSV4_SIMD_AVX512VBMI);
                    linear_forced(kc[tk], DSV4_LIN_SMALLM, &t.m, x, nr, ys);
                    tab->subnormal_fma_fast = amd;
                    int64_t b = 0;
                    for (int s = 0; s < nr; s++)
                        for (int64_t o = 0; o < rows; o++) {
                            const int64_t i = (int64_t)s * rows + o;
                            const int want_nan = v == 2 && (o == nan_rows[0] || o == nan_rows[1] || o == nan_rows[2]);
                            if (want_nan) b += !isnan(yg[i]) || !isnan(ys[i]);
                            else b += memcmp(&yg[i], &ys[i], sizeof(float)) != 0;
                        }
                    CHECK_MSG(b == 0, "fp8 small-M bits %lldx%lld case %d n_rows %d, %d threads%s: %lld outputs differ",
                              (long long)rows, (long long)cols, v, nr, tk, th <= 3 ? "" : " (tables)", (long long)b);
                    bad += b;
                    total += (int64_t)nr * rows;
                }
                free(x), free(yg), free(ys);
            }
            free_mat(&t);
        }
    printf("fp8 small-M, bit decode: %lld outputs, %lld differ in any bit (NaN rows: NaN on both paths)\n",
           (long long)total, (long long)bad);
}

/* The FP8 bit decode's scaled x kept across a thread's tasks (linear_fast.h dsv4_lin_xs_key):
 * tasks that split a 128-row scale band (one band of 128 rows; 1024 rows in tasks of 128 /
 * threads) give the GEMM's bits; so do a second call on the same x buffer with new values,
 * and two products of one matrix on two x in one job (where a key that named only the band,
 * not the plan, would hand the second product the first one's x). */
static void check_fp8_xs_kept(void) {
    static const int64_t shapes[][2] = {{128, 256}, {1024, 512}, {384, 2048}};
    const int amd = dsv4_kctx_lin_tables(kc[1])->subnormal_fma_fast;
    if (!amd) {
        printf("SKIPPED: fp8 small-M scaled x kept (the bit decode runs on AMD cores only)\n");
        return;
    }
    int64_t bad = 0, total = 0;
    const int nr = 16;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t rows = shapes[si][0], cols = shapes[si][1];
        tmat t = make_mat(DSV4_WF_FP8, SC_E8M0, rows, cols);
        float *x1 = rand_vec((int64_t)nr * cols), *x2 = rand_vec((int64_t)nr * cols);
        float *xb = malloc(sizeof(float) * nr * cols);
        float *g1 = malloc(sizeof(float) * nr * rows), *g2 = malloc(sizeof(float) * nr * rows);
        float *y1 = malloc(sizeof(float) * nr * rows), *y2 = malloc(sizeof(float) * nr * rows);
        dsv4_kctx_set_simd(kc[1], DSV4_SIMD_AVX512VBMI);
        linear_forced(kc[1], DSV4_LIN_GEMM, &t.m, x1, nr, g1);
        linear_forced(kc[1], DSV4_LIN_GEMM, &t.m, x2, nr, g2);
        for (int tk = 1; tk <= 3; tk++) {
            dsv4_kctx_set_simd(kc[tk], DSV4_SIMD_AVX512VBMI);
            dsv4_kctx_set_lin_path(kc[tk], DSV4_LIN_SMALLM);
            /* one buffer, two calls: x1's values, then x2's */
            memcpy(xb, x1, sizeof(float) * nr * cols);
            dsv4_linear(kc[tk], &t.m, xb, nr, y1);
            memcpy(xb, x2, sizeof(float) * nr * cols);
            dsv4_linear(kc[tk], &t.m, xb, nr, y2);
            int64_t b = memcmp(y1, g1, sizeof(float) * nr * rows) != 0;
            b += memcmp(y2, g2, sizeof(float) * nr * rows) != 0;
            /* one job: the matrix on x1 and on x2 */
            const dsv4_lin_op ops[2] = {{&t.m, x1, nr, y1}, {&t.m, x2, nr, y2}};
            dsv4_linear_batch(kc[tk], ops, 2);
            b += memcmp(y1, g1, sizeof(float) * nr * rows) != 0;
            b += memcmp(y2, g2, sizeof(float) * nr * rows) != 0;
            dsv4_kctx_set_lin_path(kc[tk], DSV4_LIN_AUTO);
            CHECK_MSG(b == 0, "fp8 small-M scaled x kept: %lldx%lld, %d threads: %lld of 4 products differ",
                      (long long)rows, (long long)cols, tk, (long long)b);
            bad += b;
            total += 4;
        }
        free(x1), free(x2), free(xb), free(g1), free(g2), free(y1), free(y2);
        free_mat(&t);
    }
    printf("fp8 small-M, scaled x kept across tasks: %lld products, %lld differ from the GEMM\n", (long long)total,
           (long long)bad);
}

/* Small-M forced on 1..3 threads against the GEMM forced on one, at 1..max_rows activation
 * rows of t: every output's bits; adds to *bad and *total. */
static void smallm_against_gemm(int level, const tmat *t, int max_rows, const char *name, int64_t *bad,
                                int64_t *total) {
    const int64_t rows = t->m.rows, cols = t->m.cols;
    for (int nr = 1; nr <= max_rows; nr++) {
        float *x = rand_vec((int64_t)nr * cols);
        float *yg = malloc(sizeof(float) * nr * rows), *ys = malloc(sizeof(float) * nr * rows);
        dsv4_kctx_set_simd(kc[1], level);
        linear_forced(kc[1], DSV4_LIN_GEMM, &t->m, x, nr, yg);
        for (int th = 1; th <= 3; th++) {
            dsv4_kctx_set_simd(kc[th], level);
            const int64_t b = forced_differs(kc[th], DSV4_LIN_SMALLM, &t->m, x, nr, yg, ys);
            CHECK_MSG(b == 0, "%s level %d %lldx%lld n_rows %d, %d threads: small-M differs from the GEMM in %lld outputs",
                      name, level, (long long)rows, (long long)cols, nr, th, (long long)b);
            *bad += b;
            *total += (int64_t)nr * rows;
        }
        free(x), free(yg), free(ys);
    }
}

/* The small-M kernel's register blocks (3-row blocks, the last 4 rows as 2 + 2, 4-row
 * blocks of a 4-row panel) at every row count 1..20, forced on 1..3 threads, against the
 * GEMM forced on one thread: odd shapes (panels of 8 and 4 rows, a masked last chunk),
 * ue8m0 and F32 scales, three formats. Every output's bits. */
static void check_smallm_blocks(int level) {
    static const int64_t shapes[][2] = {{68, 288}, {7, 133}, {21, 1056}, {12, 64}};
    const dsv4_wfmt fmts[3] = {DSV4_WF_FP4, DSV4_WF_FP8, DSV4_WF_BF16};
    int64_t bad = 0, total = 0;
    for (int fi = 0; fi < 3; fi++)
        for (int sc = 0; sc < 2; sc++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                const dsv4_wfmt f = fmts[fi];
                const int64_t rows = shapes[si][0], cols = shapes[si][1];
                if ((f == DSV4_WF_FP4 && cols % 32) || (sc == SC_F32 && f == DSV4_WF_BF16)) continue;
                tmat t = make_mat(f, sc, rows, cols);
                smallm_against_gemm(level, &t, 20, fmt_name(f, sc), &bad, &total);
                free_mat(&t);
            }
    printf("level %s: small-M forced (1..20 rows, 1..3 threads) against the GEMM: %lld outputs, %lld differ in any bit\n",
           dsv4_simd_name(level), (long long)total, (long long)bad);
}

/* Small-M's fused FP4 path (avx512vbmi: ue8m0 scales, up to 24 rows, groups of 4 weight
 * rows, balanced blocks of up to 6 activation rows, the widths 512/1024/2048/4096 compiled as
 * constants, x in fp4_perm order in the scratch, the lanes put back before the tree) and the
 * panel path past it, at every row count 1..32, forced on 1..3 threads, against the GEMM
 * forced on one: every output's bits. Row counts not a multiple of 4 leave a task's last
 * outputs to the panel path; at 8224 columns x in fp4_perm order outgrows the scratch from
 * 12 rows, which then take the panel path. */
static void check_smallm_fused(int level) {
    static const int64_t shapes[][2] = {{13, 512}, {9, 1024}, {6, 2048}, {5, 4096}, {10, 96}, {16, 64}, {4, 8224}};
    int64_t bad = 0, total = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t rows = shapes[si][0], cols = shapes[si][1];
        tmat t = make_mat(DSV4_WF_FP4, SC_E8M0, rows, cols);
        smallm_against_gemm(level, &t, 32, "fp4", &bad, &total);
        free_mat(&t);
    }
    printf("level %s: fp4 small-M forced (1..32 rows, 1..3 threads, widths 64..8224) against the GEMM: %lld outputs, "
           "%lld differ in any bit\n", dsv4_simd_name(level), (long long)total, (long long)bad);
}

/* Small-M's FP4 panels whose first row block decodes them (avx512vbmi: ue8m0 scales, widths
 * 512 and 1024, full 8-row panels, which need tasks of 8 or more outputs: taller matrices
 * than check_smallm_fused's), at every row count small-M takes (1..64), forced on 1..3
 * threads, against the GEMM forced on one: every output's bits. 140 rows end in a 4-row
 * panel, which decodes apart. */
static void check_smallm_panel_decode(int level) {
    static const int64_t shapes[][2] = {{200, 512}, {140, 1024}};
    int64_t bad = 0, total = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        tmat t = make_mat(DSV4_WF_FP4, SC_E8M0, shapes[si][0], shapes[si][1]);
        smallm_against_gemm(level, &t, LIN_SMALLM_MAX_ROWS, "fp4", &bad, &total);
        free_mat(&t);
    }
    printf("level %s: fp4 small-M's full panels forced (1..%d rows, 1..3 threads) against the GEMM: %lld outputs, "
           "%lld differ in any bit\n", dsv4_simd_name(level), LIN_SMALLM_MAX_ROWS, (long long)total, (long long)bad);
}

/* Level avx512vbmi's FP4 rows take small-M's fused path from 5 rows, where it ran 1.2-1.3x
 * the FP4 GEMV on a prefill's streamed experts (bench_linear --experts; BENCHMARKS.md,
 * "Session 16, smk"), and the GEMV up to 4, where the GEMV ran faster. */
static void check_fp4_smallm_rows(void) {
    tmat t = make_mat(DSV4_WF_FP4, SC_E8M0, 512, 1024);
    dsv4_kctx_set_simd(kc[1], DSV4_SIMD_AVX512VBMI);
    dsv4_kctx_set_lin_path(kc[1], DSV4_LIN_AUTO);
    for (int nr = 1; nr <= 12; nr++) {
        const int want = nr <= 4 ? DSV4_LIN_GEMV : DSV4_LIN_SMALLM, got = dsv4_linear_path_of(kc[1], &t.m, nr);
        CHECK_MSG(got == want, "fp4 512x1024 at %d rows: path %d, want %d", nr, got, want);
    }
    free_mat(&t);
}

/* Small-M's BF16 and F32 rows decoded in registers (avx512vbmi: blocks of 3 weight rows, the
 * last 1-2 apart, passes of up to 8 activation rows as even as they go, a masked last chunk)
 * at the row counts it takes and the edges of its passes; from 2048 columns (BF16) in column
 * tiles of 256 with the accumulators carried between them, bands of 24 weight rows (2048 and
 * 2304 columns: bands cut short by a task's end, 9 tiles; 2085: not tiled), forced on 1..3 threads, against
 * the GEMM forced on one: every output's bits; and the rows where the picker takes it (BF16
 * from 8, F32 from 2; below, the GEMV). */
static void check_smallm_dense_bits(void) {
    static const int64_t shapes[][2] = {{300, 1024}, {131, 133}, {7, 1}, {8, 37}, {65, 4096}, {10, 16}, {4, 2085},
                                        {100, 2048}, {53, 2304}};
    static const int nrs[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 24, 25, 32, 33, 48, 64};
    const dsv4_wfmt fmts[2] = {DSV4_WF_BF16, DSV4_WF_F32};
    int64_t bad = 0, total = 0;
    for (int fi = 0; fi < 2; fi++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            tmat t = make_mat(fmts[fi], SC_E8M0, rows, cols);
            for (size_t ni = 0; ni < sizeof nrs / sizeof nrs[0]; ni++) {
                const int nr = nrs[ni];
                if (sanitized && nr > 17) continue;
                float *x = rand_vec((int64_t)nr * cols);
                float *yg = malloc(sizeof(float) * nr * rows), *ys = malloc(sizeof(float) * nr * rows);
                dsv4_kctx_set_simd(kc[1], DSV4_SIMD_AVX512VBMI);
                linear_forced(kc[1], DSV4_LIN_GEMM, &t.m, x, nr, yg);
                for (int th = 1; th <= 3; th++) {
                    dsv4_kctx_set_simd(kc[th], DSV4_SIMD_AVX512VBMI);
                    const int64_t b = forced_differs(kc[th], DSV4_LIN_SMALLM, &t.m, x, nr, yg, ys);
                    CHECK_MSG(b == 0, "%s small-M in registers %lldx%lld n_rows %d, %d threads: %lld outputs differ",
                              fmt_name(fmts[fi], SC_E8M0), (long long)rows, (long long)cols, nr, th, (long long)b);
                    bad += b;
                    total += (int64_t)nr * rows;
                }
                free(x), free(yg), free(ys);
            }
            free_mat(&t);
        }
    printf("bf16 / f32 small-M in registers: %lld outputs, %lld differ in any bit\n", (long long)total, (long long)bad);
    dsv4_kctx_set_simd(kc[1], DSV4_SIMD_AVX512VBMI);
    dsv4_kctx_set_lin_path(kc[1], DSV4_LIN_AUTO);
    for (int fi = 0; fi < 2; fi++) {
        tmat t = make_mat(fmts[fi], SC_E8M0, 512, 1024);
        const int from = fmts[fi] == DSV4_WF_BF16 ? 8 : 2;
        for (int nr = 1; nr <= 32; nr++) {
            const int want = nr < from ? DSV4_LIN_GEMV : DSV4_LIN_SMALLM, got = dsv4_linear_path_of(kc[1], &t.m, nr);
            CHECK_MSG(got == want, "%s 512x1024 at %d rows: path %d, want %d", fmt_name(fmts[fi], SC_E8M0), nr, got, want);
        }
        free_mat(&t);
    }
}

/* Level avx2's small-M (linear_avx2_smallm.c: panels of 4 weight rows, 3-row register blocks,
 * the last 4 rows as 2 + 2) past check_smallm_blocks' 20 rows: 21..64 rows of FP8 (ue8m0 and
 * F32 scales), FP4 and BF16 on odd shapes (a partial last panel, a masked last chunk), forced on
 * 1..3 threads, against the GEMM forced on one: every output's bits; and the rows where the
 * picker takes it (FP8 and FP4 from 6 rows, BF16 from 9; below, the GEMV). */
static void check_avx2_smallm(void) {
    static const int64_t shapes[][2] = {{23, 1056}, {9, 133}};
    static const struct {
        dsv4_wfmt f;
        int sc;
    } fs[4] = {{DSV4_WF_FP8, SC_E8M0}, {DSV4_WF_FP8, SC_F32}, {DSV4_WF_FP4, SC_E8M0}, {DSV4_WF_BF16, SC_E8M0}};
    int64_t bad = 0, total = 0;
    for (int fi = 0; fi < 4; fi++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            if (fs[fi].f == DSV4_WF_FP4 && cols % 32) continue;
            tmat t = make_mat(fs[fi].f, fs[fi].sc, rows, cols);
            if (fs[fi].f == DSV4_WF_FP8 && si == 0) {
                /* block 0 a scale whose 256x overflows (the decode's dequant8 fallback; small codes
                 * keep the products finite), block 1 the NaN codes 0x7F / 0xFF (the byte scan) */
                uint8_t *p = t.w;
                if (t.m.scale_is_f32) ((float *)t.scale)[0] = 3e38f;
                else ((uint8_t *)t.scale)[0] = 248;
                for (int64_t o = 0; o < rows; o++)
                    for (int64_t i = 0; i < 128; i++) p[o * cols + i] &= 0x9f;
                p[3 * cols + 130] = 0x7f, p[7 * cols + 200] = 0xff;
            }
            for (int nr = 21; nr <= LIN_SMALLM_MAX_ROWS; nr++) {
                if (sanitized && nr % 8 != 0 && nr != 21) continue;
                float *x = rand_vec((int64_t)nr * cols);
                float *yg = malloc(sizeof(float) * nr * rows), *ys = malloc(sizeof(float) * nr * rows);
                dsv4_kctx_set_simd(kc[1], DSV4_SIMD_AVX2);
                linear_forced(kc[1], DSV4_LIN_GEMM, &t.m, x, nr, yg);
                for (int th = 1; th <= 3; th++) {
                    dsv4_kctx_set_simd(kc[th], DSV4_SIMD_AVX2);
                    CHECK(forced_path_of(kc[th], DSV4_LIN_SMALLM, &t.m, nr) == DSV4_LIN_SMALLM);
                    const int64_t b = forced_differs(kc[th], DSV4_LIN_SMALLM, &t.m, x, nr, yg, ys);
                    CHECK_MSG(b == 0, "%s avx2 small-M %lldx%lld n_rows %d, %d threads: %lld outputs differ",
                              fmt_name(fs[fi].f, fs[fi].sc), (long long)rows, (long long)cols, nr, th, (long long)b);
                    bad += b;
                    total += (int64_t)nr * rows;
                }
                free(x), free(yg), free(ys);
            }
            free_mat(&t);
        }
    printf("level avx2: small-M forced (21..%d rows, 1..3 threads) against the GEMM: %lld outputs, %lld differ in any "
           "bit\n", LIN_SMALLM_MAX_ROWS, (long long)total, (long long)bad);
    dsv4_kctx_set_simd(kc[1], DSV4_SIMD_AVX2);
    dsv4_kctx_set_lin_path(kc[1], DSV4_LIN_AUTO);
    for (int fi = 0; fi < 4; fi += fi == 0 ? 2 : 1) {
        tmat t = make_mat(fs[fi].f, SC_E8M0, 512, 1024);
        const int from = fs[fi].f == DSV4_WF_BF16 ? 9 : 6;
        for (int nr = 1; nr <= 32; nr++) {
            const int want = nr < from ? DSV4_LIN_GEMV : DSV4_LIN_SMALLM, got = dsv4_linear_path_of(kc[1], &t.m, nr);
            CHECK_MSG(got == want, "avx2 %s 512x1024 at %d rows: path %d, want %d", fmt_name(fs[fi].f, SC_E8M0), nr,
                      got, want);
        }
        free_mat(&t);
    }
}

int main(void) {
    const int best = fixture_open();
    CHECK(best >= 0);
    if (best < 0) return test_report();
    for (int level = DSV4_SIMD_SCALAR + 1; level <= best; level++) {
        check_smallm_blocks(level);
        check_smallm_fused(level);
        check_smallm_panel_decode(level);
    }
    if (best >= DSV4_SIMD_AVX2) check_avx2_smallm();
    else printf("SKIPPED: avx2's small-M checks (this CPU or build lacks AVX2)\n");
    if (best >= DSV4_SIMD_AVX512VBMI) {
        check_smallm_fp8_bits();
        check_fp8_xs_kept();
        check_smallm_dense_bits();
        check_fp4_smallm_rows();
    } else {
        printf("SKIPPED: avx512vbmi's small-M bit checks (this CPU or build lacks VBMI)\n");
    }
    fixture_close();
    return test_report();
}
