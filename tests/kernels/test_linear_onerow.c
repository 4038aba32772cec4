/* test_linear_onerow.c — the one-row GEMV (batch-1 decode): at level avx512vbmi the FP8
 * GEMV's bands and bit decode against level avx512's bits; at every level the split of a
 * one-row product into tasks and halves (the same bits however it is cut) and the pool's
 * prefetch hints a one-row product posts for the next job. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/fp4_lanes.h"
#include "linear_fixture.h"
#include "test.h"

/* The one-row FP8 GEMV at level avx512vbmi takes rows of up to 512 columns with x * scale
 * computed once per task for every scale band the task spans (a stack buffer of 2048
 * floats; a task whose bands do not fit takes the per-step path). Both ways must give the
 * bits of level avx512 on 1..3 threads (pool tasks of at most 256 rows) and through
 * dsv4_linear_here (one task of all the rows: 1100 x 256 is 9 bands, too many for the
 * buffer, 300 x 288 fits): many 128-row bands with their own scales, a partial last band
 * and column block, and rows past 512 columns. */
static void check_fp8_one_row_bands(void) {
    static const int64_t shapes[][2] = {{1100, 256}, {300, 288}, {2100, 512}, {517, 133}, {260, 520}};
    int64_t bad = 0, total = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t rows = shapes[si][0], cols = shapes[si][1];
        tmat t = make_mat(DSV4_WF_FP8, SC_E8M0, rows, cols);
        float *x = rand_vec(cols), *ya = malloc(sizeof(float) * rows), *yv = malloc(sizeof(float) * rows);
        CHECK(dsv4_lin_kernels_avx512vbmi()->fp8_prescale(&t.m, x, 1) == 1); /* the prescaled paths run */
        dsv4_kctx_set_simd(kc[1], DSV4_SIMD_AVX512);
        dsv4_linear(kc[1], &t.m, x, 1, ya);
        for (int th = 1; th <= 3; th++) {
            dsv4_kctx_set_simd(kc[th], DSV4_SIMD_AVX512VBMI);
            dsv4_linear(kc[th], &t.m, x, 1, yv);
            bad += bits_differ(ya, yv, rows);
            total += rows;
        }
        const dsv4_lin_op op = {&t.m, x, 1, yv};
        for (int64_t i = 0; i < rows; i++) yv[i] = NAN; /* every output written again */
        dsv4_linear_here(kc[2], &op, 1);
        bad += bits_differ(ya, yv, rows);
        total += rows;
        free(x); free(ya); free(yv);
        free_mat(&t);
    }
    CHECK_MSG(bad == 0, "fp8 one row, many bands: %lld of %lld outputs differ between avx512 and avx512vbmi",
              (long long)bad, (long long)total);
    printf("fp8 one row, many bands: %lld outputs, %lld differ in any bit\n", (long long)total, (long long)bad);
}

/* The one-row FP8 GEMV of level avx512vbmi on AMD cores decodes e4m3 by bit shifts against
 * x * 2^(b - 7) kept per piece of a task (linear_avx512_vbmi.c gemv1_fp8v_bits_pieces): its
 * bits against level avx512's (the F16 decode, another code path) at the decode step's widths
 * (256 .. 2048 columns: 1, 2 and 3 bands a pool task), odd widths with a masked last chunk,
 * the checkpoint's 4096 and 8192 columns and widths between (tasks cut in pieces of 2 or 1
 * bands), one past the buffer (8200: the table paths), row counts that leave 1..3 rows past
 * the runs, on 1..3 threads and in one dsv4_linear_here task (the whole matrix: pieces at
 * every width from 1024). Inputs: random, one huge x (x * 2^(b - 7) overflows: every piece
 * falls back), the same x overflowing in the odd bands only (those pieces fall back, the
 * others not), and NaN codes in a few rows (those outputs NaN at both levels, every other
 * output the same bits). Each case twice: with the machine's choice of decode (bits on AMD
 * cores) and with the tables' x * scale buffer forced (Intel's: one-row tasks of 2048 rows
 * in pieces of the bands that fit its 8 KB). The matrix's no-NaN flag as the loader finds it
 * (dsv4_fp8_no_nan: 0 in the NaN case only), and on 2 threads cleared (the bit decode's NaN
 * scan on a matrix without NaN codes): the same bits either way. */
static void check_fp8_one_row_bits(void) {
    static const int64_t shapes[][2] = {{1100, 256}, {517, 1024}, {300, 2048}, {263, 512},
                                        {130, 133}, {261, 520}, {387, 2085}, {6, 1056},
                                        {300, 4096}, {263, 8192}, {140, 5000}, {9, 8200},
                                        {4102, 256}}; /* pool tasks of 1024 / 680 rows */
    int64_t bad = 0, total = 0;
    const int amd = dsv4_kctx_lin_tables(kc[1])->subnormal_fma_fast; /* the machine's choice */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int v = 0; v < 6; v++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1], nsb = (cols + 127) / 128;
            tmat t = make_mat(DSV4_WF_FP8, SC_E8M0, rows, cols);
            float *x = rand_vec(cols), *ya = malloc(sizeof(float) * rows), *yv = malloc(sizeof(float) * rows);
            uint8_t *p = t.w, *sc = t.scale;
            const int64_t nan_rows[3] = {0, rows / 2, rows - 1};
            if (v == 1) x[cols / 3] = 1e30f; /* 2^(b - 7) * 1e30 past 2^127; x * scale still normal */
            if (v == 3) { /* 2^10 * 2^(125 - 7) = 2^128 overflows in the odd bands, 2^(10 + 111) not */
                x[cols / 3] = 0x1p10f;
                for (int64_t b = 0; b < (rows + 127) / 128; b++) sc[b * nsb + cols / 3 / 128] = b % 2 ? 125 : 118;
            }
            if (v == 2) /* a NaN code in three rows: the first, a middle one, the last */
                p[nan_rows[0] * cols + cols - 1] = 0x7F, p[nan_rows[1] * cols + cols / 2] = 0xFF,
                p[nan_rows[2] * cols] = 0x7F;
            const int no_nan = dsv4_fp8_no_nan(t.w, rows * cols);
            CHECK(no_nan == (v != 2));
            CHECK(dsv4_lin_kernels_avx512vbmi()->fp8_prescale(&t.m, x, 1) == 1);
            dsv4_kctx_set_simd(kc[1], DSV4_SIMD_AVX512);
            dsv4_linear(kc[1], &t.m, x, 1, ya);
            for (int th = 1; th <= 8; th++) {
                /* th 5..8: the same with the tables' x * scale buffer (Intel cores), its tasks
                 * in pieces of the bands that fit: the tables are the test's kctx's own */
                dsv4_lin_tables *tabs[4];
                for (int k = 1; k <= 3; k++) {
                    tabs[k] = (dsv4_lin_tables *)dsv4_kctx_lin_tables(kc[k]);
                    if (th == 1 || th == 5) tabs[k]->subnormal_fma_fast = th == 1 ? amd : 0;
                }
                for (int64_t i = 0; i < rows; i++) yv[i] = -1.0f; /* every output written again */
                t.m.fp8_no_nan = th == 2 ? 0 : no_nan;
                if ((th - 1) % 4 + 1 <= 3) {
                    const int tk = (th - 1) % 4 + 1;
                    dsv4_kctx_set_simd(kc[tk], DSV4_SIMD_AVX512VBMI);
                    dsv4_linear(kc[tk], &t.m, x, 1, yv);
                } else {
                    const dsv4_lin_op op = {&t.m, x, 1, yv};
                    dsv4_kctx_set_simd(kc[2], DSV4_SIMD_AVX512VBMI);
                    dsv4_linear_here(kc[2], &op, 1);
                }
                for (int64_t o = 0; o < rows; o++) {
                    const int want_nan = v == 2 && (o == nan_rows[0] || o == nan_rows[1] || o == nan_rows[2]);
                    if (want_nan) bad += !isnan(ya[o]) || !isnan(yv[o]);
                    else bad += memcmp(&ya[o], &yv[o], sizeof(float)) != 0;
                }
                total += rows;
            }
            for (int k = 1; k <= 3; k++) ((dsv4_lin_tables *)dsv4_kctx_lin_tables(kc[k]))->subnormal_fma_fast = amd;
            free(x); free(ya); free(yv);
            free_mat(&t);
        }
    CHECK_MSG(bad == 0, "fp8 one row, bit decode: %lld of %lld outputs differ between avx512 and avx512vbmi",
              (long long)bad, (long long)total);
    printf("fp8 one row, bit decode: %lld outputs, %lld differ in any bit (NaN rows: NaN at both)\n",
           (long long)total, (long long)bad);
}

/* dsv4_fp8_no_nan (the loader's dsv4_mat.fp8_no_nan) finds a NaN code (0x7F, 0xFF) at every
 * place of a buffer (the 512-byte blocks and the tail), and no other byte: 0x7E, 0xFE, 0x80,
 * 0x00 and 0x01 are numbers. Then the flag is what the one-row bit decode trusts (AMD cores):
 * set on a matrix that does hold NaN codes, their rows come out finite (the scan skipped), and
 * cleared they are NaN. */
static void check_fp8_no_nan(void) {
    enum { N = 1100 };
    static uint8_t buf[N];
    static const uint8_t num[5] = {0x7E, 0xFE, 0x80, 0x00, 0x01};
    int64_t bad = 0;
    for (int i = 0; i < N; i++) buf[i] = num[i % 5];
    bad += dsv4_fp8_no_nan(buf, N) != 1;
    for (int i = 0; i < N; i++) {
        const uint8_t keep = buf[i];
        buf[i] = i % 2 ? 0x7F : 0xFF;
        bad += dsv4_fp8_no_nan(buf, N) != 0 || dsv4_fp8_no_nan(buf, i) != 1 || dsv4_fp8_no_nan(buf + i + 1, N - i - 1) != 1;
        buf[i] = keep;
    }
    CHECK_MSG(bad == 0, "dsv4_fp8_no_nan: %lld wrong answers", (long long)bad);
    if (!dsv4_kctx_lin_tables(kc[2])->subnormal_fma_fast) {
        printf("SKIPPED: the flag's use (the bit decode runs on AMD cores only)\n");
        return;
    }
    const int64_t rows = 300, cols = 1024;
    tmat t = make_mat(DSV4_WF_FP8, SC_E8M0, rows, cols);
    float *x = rand_vec(cols), *y = malloc(sizeof(float) * rows);
    ((uint8_t *)t.w)[5 * cols + 7] = 0x7F;
    ((uint8_t *)t.w)[200 * cols + 1000] = 0xFF;
    dsv4_kctx_set_simd(kc[2], DSV4_SIMD_AVX512VBMI);
    for (int flag = 0; flag < 2; flag++) {
        t.m.fp8_no_nan = flag;
        dsv4_linear(kc[2], &t.m, x, 1, y);
        int64_t nans = 0;
        for (int64_t o = 0; o < rows; o++) nans += isnan(y[o]) != 0;
        CHECK_MSG(nans == (flag ? 0 : 2), "fp8_no_nan %d: %lld NaN outputs", flag, (long long)nans);
    }
    free(x), free(y);
    free_mat(&t);
    printf("fp8 no-NaN flag: %d places found, a set flag skips the scan\n", N);
}

/* The planner's task split of a GEMV (dsv4_lin_gemv_per): an FP4 GEMV whose weights are
 * within the job's whole-matrix share is one task (so that its rows are read as far runs),
 * a larger one, another format or the small-M path are cut into 4..LIN_GEMV_NB outputs a
 * task, a multiple of 4, about the target's multiply-adds; target 0 is one task. */
static void check_gemv_split(void) {
    const dsv4_mat w13 = {.fmt = DSV4_WF_FP4, .rows = 512, .cols = 1024};
    const dsv4_mat bf = {.fmt = DSV4_WF_BF16, .rows = 512, .cols = 1024};
    const int64_t e = 512 * 1024, target = (int64_t)100 * 1024; /* ~100 rows at one x row */
    for (int nr = 1; nr <= 4; nr++) {
        CHECK_MSG(dsv4_lin_gemv_per(&w13, nr, 1, target, e) == 512 && dsv4_lin_gemv_per(&w13, nr, 1, target, 4 * e) == 512,
                  "n_rows %d: an FP4 GEMV within the share is not one task", nr);
        const int64_t cut[3] = {dsv4_lin_gemv_per(&w13, nr, 1, target, e - 1), dsv4_lin_gemv_per(&w13, nr, 0, target, e),
                                dsv4_lin_gemv_per(&bf, nr, 1, target, e)};
        for (int i = 0; i < 3; i++)
            CHECK_MSG(cut[i] >= 4 && cut[i] <= LIN_GEMV_NB && cut[i] % 4 == 0 && cut[i] <= 100 / nr,
                      "n_rows %d case %d: %lld outputs a task, not a cut of about the target", nr, i, (long long)cut[i]);
        CHECK(dsv4_lin_gemv_per(&bf, nr, 1, 0, 0) == 512 && dsv4_lin_gemv_per(&w13, nr, 0, 0, 0) == 512);
    }
    /* a one-row GEMV task takes up to LIN_GEMV1_TASK_BYTES of weights where LIN_GEMV_NB rows
     * are fewer bytes (wq_b: 256-byte FP8 rows, 2048 a task), never more than the target,
     * and LIN_GEMV_NB rows where those are already more (2 KB BF16 rows); not at 2 rows, not
     * the small-M path */
    const dsv4_mat wqb = {.fmt = DSV4_WF_FP8, .rows = 8192, .cols = 256};
    const dsv4_mat head = {.fmt = DSV4_WF_BF16, .rows = 8192, .cols = 1024};
    const int64_t big = (int64_t)1 << 40;
    CHECK_MSG(dsv4_lin_gemv_per(&wqb, 1, 1, big, 0) == LIN_GEMV1_TASK_BYTES / 256,
              "one-row FP8 8192 x 256: %lld rows a task", (long long)dsv4_lin_gemv_per(&wqb, 1, 1, big, 0));
    CHECK(dsv4_lin_gemv_per(&wqb, 1, 1, (int64_t)600 * 256, 0) == 600);
    CHECK(dsv4_lin_gemv_per(&head, 1, 1, big, 0) == LIN_GEMV_NB);
    CHECK(dsv4_lin_gemv_per(&wqb, 2, 1, big, 0) == LIN_GEMV_NB && dsv4_lin_gemv_per(&wqb, 1, 0, big, 0) == LIN_GEMV_NB);
}

/* A one-row job of fewer than 4 tasks a thread of LIN_GEMV1_TASK_BYTES that do not divide
 * evenly over the threads is planned with tasks of half the bytes (batch 1's CSA wq_b 8192 x
 * 256 and indexer wq_b 2048 x 256, FP8: 4 + 1 tasks of 512 KB, 10 of 256 KB); an even job, a
 * job of 4 or more tasks a thread, a job on one thread and a job of 2-row products keep
 * their tasks; every output is the bits of the one-task product. On 2 threads each thread's
 * last task is then cut in pieces (check_one_row_tail): 2 more tasks a thread for a last
 * task of 256 KB, 4 for one of 512 KB. */
static void check_one_row_halves(void) {
    tmat wq = make_mat(DSV4_WF_FP8, SC_E8M0, 8192, 256), wi = make_mat(DSV4_WF_FP8, SC_E8M0, 2048, 256);
    float *x = rand_vec(2 * 256), *y = malloc(sizeof(float) * 2 * 10240), *r = malloc(sizeof(float) * 2 * 10240);
    if (dsv4_linear_path_of(kc[2], &wq.m, 1) != DSV4_LIN_GEMV) {
        printf("SKIPPED: one-row task halves (no one-row GEMV at this level)\n");
    } else {
        const dsv4_lin_op odd[2] = {{&wq.m, x, 1, y}, {&wi.m, x, 1, y + 8192}};
        const dsv4_lin_op two[2] = {{&wq.m, x, 2, y}, {&wi.m, x, 2, y + 2 * 8192}};
        CHECK_MSG(dsv4_lin_job_tasks(kc[2], odd, 2) == 12, "2 threads, 4 + 1 tasks of 512 KB: %d tasks, not 10 + 2",
                  dsv4_lin_job_tasks(kc[2], odd, 2));
        CHECK(dsv4_lin_job_tasks(kc[1], odd, 2) == 5);
        CHECK_MSG(dsv4_lin_job_tasks(kc[2], odd, 1) == 8, "an even job: %d tasks, not 4 + 4",
                  dsv4_lin_job_tasks(kc[2], odd, 1));
        CHECK(dsv4_lin_job_tasks(kc[2], two, 2) == 40); /* 256 rows a task at 2 rows */
        const dsv4_lin_op many[3] = {{&wq.m, x, 1, y}, {&wq.m, x, 1, y}, {&wi.m, x, 1, y}}; /* 4 + 4 + 1 */
        CHECK_MSG(dsv4_lin_job_tasks(kc[2], many, 3) == 13, "2 threads, 9 tasks of 512 KB: %d tasks, not 9 + 4",
                  dsv4_lin_job_tasks(kc[2], many, 3));
        for (int th = 1; th <= 3; th++) {
            for (int i = 0; i < 10240; i++) y[i] = r[i] = NAN;
            dsv4_linear_batch(kc[th], odd, 2);
            const dsv4_lin_op ref[2] = {{&wq.m, x, 1, r}, {&wi.m, x, 1, r + 8192}};
            dsv4_linear_here(kc[1], ref, 2);
            int64_t bad = 0;
            for (int i = 0; i < 10240; i++) bad += memcmp(&y[i], &r[i], sizeof(float)) != 0;
            CHECK_MSG(bad == 0, "%d threads: %lld one-row outputs differ from the one-task product", th, (long long)bad);
        }
    }
    free(x), free(y), free(r);
    free_mat(&wq), free_mat(&wi);
}

/* A one-row GEMV job ends each thread's range in its last task cut in pieces of halving
 * size, none under 128 KB (linear_fast.c lin_plan_tail): wo_b's shape (FP8 1024 x 2048, 2 MB)
 * is 4 tasks of 512 KB on one thread, 2 a thread on 2 with the second in 256 + 128 + 128 KB
 * (8 tasks), 7 tasks on 3 (168 rows, the last 16: ranges of 2, 2, 3) with each range's
 * last in halves (10); wq_b's (FP8 8192 x 256) likewise on 1 and 2 threads, on 3 as 8 tasks
 * of 256 KB (11). Every output, at every level, on 1..3 threads, is the bits of the one-task
 * product (dsv4_linear_here), for FP8 (rows a multiple of 4 and not), BF16, FP4 and FP4L
 * alone and as a job of several products: a piece map that left rows out leaves their NaN,
 * one that cut a task elsewhere still gives the same bits (any split does). */
static void check_one_row_tail(int best) {
    enum { NM = 6 };
    tmat m[NM] = {make_mat(DSV4_WF_FP8, SC_E8M0, 1024, 2048), make_mat(DSV4_WF_FP8, SC_E8M0, 8192, 256),
                  make_mat(DSV4_WF_FP8, SC_E8M0, 1030, 2048), make_mat(DSV4_WF_BF16, SC_E8M0, 2048, 1024),
                  make_mat(DSV4_WF_FP4, SC_E8M0, 2048, 2048), make_mat(DSV4_WF_FP4, SC_E8M0, 1502, 1024)};
    /* the FP4L copies of the FP4 matrices (the lanes layout, the same scales) */
    dsv4_mat lan[2];
    uint8_t *wl[2];
    for (int i = 0; i < 2; i++) {
        const dsv4_mat *nat = &m[4 + i].m;
        wl[i] = malloc((size_t)(nat->rows * nat->cols / 2));
        for (int64_t r = 0; r < nat->rows; r++)
            dsv4_fp4l_pack_row(wl[i] + r * (nat->cols / 2), (const uint8_t *)nat->w + r * (nat->cols / 2), nat->cols);
        lan[i] = *nat;
        lan[i].fmt = DSV4_WF_FP4L;
        lan[i].w = wl[i];
    }
    const dsv4_mat *w[NM + 2] = {&m[0].m, &m[1].m, &m[2].m, &m[3].m, &m[4].m, &m[5].m, &lan[0], &lan[1]};
    float *x = rand_vec(8192), *y = malloc(sizeof(float) * 20000), *r = malloc(sizeof(float) * 20000);
    if (dsv4_linear_path_of(kc[2], w[0], 1) == DSV4_LIN_GEMV) {
        const dsv4_lin_op wob = {w[0], x, 1, y}, wqb = {w[1], x, 1, y};
        const int want_o[4] = {0, 4, 8, 10}, want_q[4] = {0, 4, 8, 11};
        for (int th = 1; th <= 3; th++)
            CHECK_MSG(dsv4_lin_job_tasks(kc[th], &wob, 1) == want_o[th] && dsv4_lin_job_tasks(kc[th], &wqb, 1) == want_q[th],
                      "%d threads: wo_b %d tasks, wq_b %d, not %d, %d", th, dsv4_lin_job_tasks(kc[th], &wob, 1),
                      dsv4_lin_job_tasks(kc[th], &wqb, 1), want_o[th], want_q[th]);
    } else {
        printf("SKIPPED: one-row tail task counts (no one-row GEMV at this level)\n");
    }
    int64_t bad = 0;
    for (int level = DSV4_SIMD_SCALAR; level <= best; level++) {
        if (dsv4_kctx_set_simd(kc[1], level) != level) continue;
        for (int th = 2; th <= 3; th++) dsv4_kctx_set_simd(kc[th], level);
        for (int i = 0; i < NM + 2; i++) {
            const dsv4_lin_op ref = {w[i], x, 1, r};
            for (int64_t o = 0; o < w[i]->rows; o++) r[o] = NAN;
            dsv4_linear_here(kc[1], &ref, 1);
            for (int th = 1; th <= 3; th++) {
                const dsv4_lin_op op = {w[i], x, 1, y};
                for (int64_t o = 0; o < w[i]->rows; o++) y[o] = NAN;
                dsv4_linear_batch(kc[th], &op, 1);
                const int64_t b = bits_differ(y, r, w[i]->rows);
                CHECK_MSG(b == 0, "level %s, %d threads, %s %lld x %lld: %lld outputs differ from the one-task product",
                          dsv4_simd_name((dsv4_simd)level), th, w[i]->fmt == DSV4_WF_FP4L ? "FP4L" : fmt_name(w[i]->fmt, SC_E8M0),
                          (long long)w[i]->rows, (long long)w[i]->cols, (long long)b);
                bad += b;
            }
        }
        /* all of them as one job (the pieces cut from tasks of different products) */
        dsv4_lin_op job[NM + 2], ref[NM + 2];
        int64_t off = 0;
        for (int i = 0; i < NM + 2; i++) {
            job[i] = (dsv4_lin_op){w[i], x, 1, y + off};
            ref[i] = (dsv4_lin_op){w[i], x, 1, r + off};
            off += w[i]->rows;
        }
        for (int64_t o = 0; o < off; o++) r[o] = NAN;
        dsv4_linear_here(kc[1], ref, NM + 2);
        for (int th = 1; th <= 3; th++) {
            for (int64_t o = 0; o < off; o++) y[o] = NAN;
            dsv4_linear_batch(kc[th], job, NM + 2);
            const int64_t b = bits_differ(y, r, off);
            CHECK_MSG(b == 0, "level %s, %d threads, a job of %d products: %lld outputs differ from the one-task products",
                      dsv4_simd_name((dsv4_simd)level), th, NM + 2, (long long)b);
            bad += b;
        }
    }
    for (int th = 1; th <= 3; th++) dsv4_kctx_set_simd(kc[th], best);
    CHECK(bad == 0);
    free(x), free(y), free(r);
    for (int i = 0; i < 2; i++) free(wl[i]);
    for (int i = 0; i < NM; i++) free_mat(&m[i]);
}

/* dsv4_lin_hint names each thread the weights its share of a one-row job starts with, as the
 * planner splits it (thread i from task n i / T): CSA's wq_b + indexer wq_b, 10 tasks of 256 KB
 * on 2 threads, thread 1 from task 5 (row 5120 of wq_b) to the end of wq_b (task 8); capped at
 * the bytes asked; the job after next with skip 1; none for 2-row products or one thread;
 * the hint is gone once its job has started. */
static void nop_task(void *arg, int t, int tid) { (void)arg, (void)t, (void)tid; }

static void check_one_row_hints(void) {
    tmat wq = make_mat(DSV4_WF_FP8, SC_E8M0, 8192, 256), wi = make_mat(DSV4_WF_FP8, SC_E8M0, 2048, 256);
    if (dsv4_linear_path_of(kc[2], &wq.m, 1) != DSV4_LIN_GEMV) {
        printf("SKIPPED: one-row hints (no one-row GEMV at this level)\n");
        free_mat(&wq), free_mat(&wi);
        return;
    }
    const char *w0 = wq.m.w;
    const dsv4_lin_op odd[2] = {{&wq.m, NULL, 1, NULL}, {&wi.m, NULL, 1, NULL}};
    const void *p;
    int64_t n;
    dsv4_lin_hint(kc[2], odd, 2, (int64_t)1 << 30, 0);
    CHECK(dsv4_kctx_hint_get(kc[2], 0, 1, &p, &n) && p == w0 && n == 5 * 1024 * 256);
    CHECK_MSG(dsv4_kctx_hint_get(kc[2], 1, 1, &p, &n) && p == w0 + 5120 * 256 && n == 3072 * 256,
              "thread 1's hint: %td bytes into wq_b, %lld bytes (want %d, %d)", (const char *)p - w0, (long long)n,
              5120 * 256, 3072 * 256);
    CHECK(!dsv4_kctx_hint_get(kc[2], 1, 2, &p, &n));
    dsv4_lin_hint(kc[2], odd, 2, 100000, 1); /* capped; the job after next */
    CHECK(dsv4_kctx_hint_get(kc[2], 1, 2, &p, &n) && p == w0 + 5120 * 256 && n == 100000);
    dsv4_kctx_parallel(kc[2], 4, nop_task, NULL); /* the first target starts: its hint is gone */
    CHECK(!dsv4_kctx_hint_get(kc[2], 0, 2, &p, &n));
    CHECK(dsv4_kctx_hint_get(kc[2], 0, 1, &p, &n) && p == w0 && n == 100000);
    dsv4_kctx_parallel(kc[2], 4, nop_task, NULL);
    CHECK(!dsv4_kctx_hint_get(kc[2], 0, 1, &p, &n) && !dsv4_kctx_hint_get(kc[2], 1, 1, &p, &n));
    const dsv4_lin_op two[2] = {{&wq.m, NULL, 2, NULL}, {&wi.m, NULL, 2, NULL}};
    dsv4_lin_hint(kc[2], two, 2, (int64_t)1 << 30, 0);
    CHECK(!dsv4_kctx_hint_get(kc[2], 0, 1, &p, &n) && !dsv4_kctx_hint_get(kc[2], 1, 1, &p, &n));
    dsv4_lin_hint(kc[1], odd, 2, (int64_t)1 << 30, 0);
    CHECK(!dsv4_kctx_hint_get(kc[1], 0, 1, &p, &n));
    free_mat(&wq), free_mat(&wi);
}

/* A one-row FP8 product of at most one task a thread leaves the GEMV's prescale test to each
 * task, on the scale bands its rows read (linear_fast.c lin_task_call). One job of three
 * products of 300 columns: a, 256 rows, band 0 at scale 2^0 and band 1 at 2^-127 (at
 * avx512vbmi, factor = the scale, x * 2^-127 is subnormal for |x| < 2, here about 2^-137: the
 * whole matrix fails the test, band 0 passes it, and band 1's task must not prescale, its
 * x * scale would round); b, 128 rows, plain; f, 128 rows with F32 scales (never prescaled;
 * its band views step 4 bytes a scale). On 2 threads every task is one band (a: 2 tasks); on
 * 1, one task a product; on 3, more tasks than threads, tested at the plan. Every output
 * against the product alone through the GEMM path (never prescaled), at every level, with the
 * machine's FP8 decode and the tables' (which trust the flag). */
static void check_fp8_task_prescale(int best) {
    const int64_t rows = 256, cols = 300, nbc = (cols + 127) / 128;
    /* 512 rows in all: on 2 threads 128-row tasks, so a's two tasks read one band each */
    tmat a = make_mat(DSV4_WF_FP8, SC_E8M0, rows, cols), b = make_mat(DSV4_WF_FP8, SC_E8M0, rows / 2, cols);
    tmat f = make_mat(DSV4_WF_FP8, SC_F32, rows / 2, cols);
    uint8_t *sc = a.scale; /* (2, 3) blocks */
    for (int64_t i = 0; i < nbc; i++) sc[i] = 127, sc[nbc + i] = 0;
    float *x = rand_vec(cols), *ra = malloc(sizeof(float) * rows), *rb = malloc(sizeof(float) * rows);
    float *ya = malloc(sizeof(float) * rows), *yb = malloc(sizeof(float) * rows);
    float *rf = malloc(sizeof(float) * rows), *yf = malloc(sizeof(float) * rows);
    for (int64_t i = 0; i < cols; i++) x[i] *= 1e-3f; /* x * 2^-127 about 12 bits: a rounding that shows */
    if (best >= DSV4_SIMD_AVX512VBMI && dsv4_lin_kernels_avx512vbmi()) {
        dsv4_mat v0, v1;
        CHECK(dsv4_mat_rows(&a.m, 0, 128, &v0) == 0 && dsv4_mat_rows(&a.m, 128, 128, &v1) == 0);
        CHECK(dsv4_lin_kernels_avx512vbmi()->fp8_prescale(&a.m, x, 1) == 0);
        CHECK(dsv4_lin_kernels_avx512vbmi()->fp8_prescale(&v0, x, 1) == 1);
        CHECK(dsv4_lin_kernels_avx512vbmi()->fp8_prescale(&v1, x, 1) == 0);
    }
    int64_t bad = 0;
    const int amd = dsv4_kctx_lin_tables(kc[1])->subnormal_fma_fast; /* the machine's choice */
    for (int level = 0; level <= best; level++) {
        dsv4_kctx_set_simd(kc[1], level);
        linear_forced(kc[1], DSV4_LIN_GEMM, &a.m, x, 1, ra);
        linear_forced(kc[1], DSV4_LIN_GEMM, &b.m, x, 1, rb);
        linear_forced(kc[1], DSV4_LIN_GEMM, &f.m, x, 1, rf);
        /* th 4..6: the tables' x * scale (Intel cores), which trust the flag; AMD's bit
         * decode checks x * 2^(b - 7) itself */
        for (int th = 1; th <= 6; th++) {
            dsv4_kctx *k = kc[(th - 1) % 3 + 1];
            ((dsv4_lin_tables *)dsv4_kctx_lin_tables(k))->subnormal_fma_fast = th <= 3 ? amd : 0;
            dsv4_kctx_set_simd(k, level);
            const dsv4_lin_op ops[3] = {{&a.m, x, 1, ya}, {&b.m, x, 1, yb}, {&f.m, x, 1, yf}};
            for (int64_t i = 0; i < rows; i++) ya[i] = yb[i] = yf[i] = NAN;
            dsv4_linear_batch(k, ops, 3);
            ((dsv4_lin_tables *)dsv4_kctx_lin_tables(k))->subnormal_fma_fast = amd;
            const int64_t d = bits_differ(ra, ya, rows) + bits_differ(rb, yb, rows / 2) + bits_differ(rf, yf, rows / 2);
            CHECK_MSG(d == 0, "fp8 task prescale, level %s, %d threads%s: %lld outputs differ from the GEMM's",
                      dsv4_simd_name(level), (th - 1) % 3 + 1, th > 3 ? " (tables)" : "", (long long)d);
            bad += d;
        }
        dsv4_kctx_set_simd(kc[1], best);
    }
    for (int th = 1; th <= 3; th++) dsv4_kctx_set_simd(kc[th], best);
    printf("fp8 task prescale: %lld outputs differ\n", (long long)bad);
    free(x); free(ra); free(rb); free(ya); free(yb); free(rf); free(yf);
    free_mat(&a);
    free_mat(&b);
    free_mat(&f);
}

/* Level avx2's FP8 GEMV (1..4 activation rows) skips its byte scan where the matrix's no-NaN
 * flag is set, and on AMD cores (dsv4_lin_tables.subnormal_fma_fast) takes its prescaled bit
 * decode for blocks with e4m3 subnormal codes too (Intel's keep the F16 decode there): every
 * combination of the two against the level's GEMM (which reads neither), the same bits, NaN in
 * the rows holding a NaN code when the flag is clear. Random bytes: a subnormal code in nearly
 * every 128-column block. Cases: plain, NaN codes in three rows, and both again with one x of
 * 1e30, which x * 2^(b - 7) cannot take (fp8_prescale 0: the unprescaled F16 decode, whose scan
 * the flag skips too). Beside the bits, each output against dsv4_linear_ref (the scalar
 * reference, another summation order): max-rel <= 1e-5 of the largest output. */
static void check_fp8_avx2_flags(void) {
    static const int64_t shapes[][2] = {{300, 256}, {130, 1024}, {263, 2085}, {9, 136}};
    int64_t bad = 0, total = 0, runs[2] = {0, 0};
    double max_rel = 0;
    const int amd = dsv4_kctx_lin_tables(kc[1])->subnormal_fma_fast;
    dsv4_lin_tables *tab = (dsv4_lin_tables *)dsv4_kctx_lin_tables(kc[1]);
    CHECK(dsv4_kctx_set_simd(kc[1], DSV4_SIMD_AVX2) == DSV4_SIMD_AVX2);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int v = 0; v < 4; v++)
            for (int nr = 1; nr <= 4; nr++) {
                const int64_t rows = shapes[si][0], cols = shapes[si][1];
                const int nan_case = v & 1, huge = v >= 2;
                tmat t = make_mat(DSV4_WF_FP8, SC_E8M0, rows, cols);
                uint8_t *p = t.w;
                float *x = rand_vec(cols * nr), *ya = malloc(sizeof(float) * rows * nr),
                      *yv = malloc(sizeof(float) * rows * nr), *yr = malloc(sizeof(float) * rows * nr),
                      *scratch = malloc(sizeof(float) * cols);
                const int64_t nan_rows[3] = {0, rows / 2, rows - 1};
                if (nan_case)
                    p[nan_rows[0] * cols + cols - 1] = 0x7F, p[nan_rows[1] * cols + cols / 2] = 0xFF,
                    p[nan_rows[2] * cols] = 0x7F;
                if (huge) x[(int64_t)(nr - 1) * cols + cols / 3] = 1e30f; /* 1e30 * 2^(b - 7) past 2^127 */
                const int no_nan = dsv4_fp8_no_nan(t.w, rows * cols);
                CHECK(no_nan == !nan_case);
                /* the prescaled path runs, or (huge x) the unprescaled one */
                CHECK(dsv4_lin_kernels_avx2()->fp8_prescale(&t.m, x, nr) == !huge);
                runs[huge]++;
                t.m.fp8_no_nan = 0;
                linear_forced(kc[1], DSV4_LIN_GEMM, &t.m, x, nr, ya);
                dsv4_linear_ref(&t.m, x, nr, yr, scratch);
                double max_abs = 0, max_ref = 0;
                for (int64_t j = 0; j < rows * nr; j++)
                    if (!isnan(yr[j])) {
                        max_abs = fmax(max_abs, fabs((double)ya[j] - yr[j]));
                        max_ref = fmax(max_ref, fabs((double)yr[j]));
                    }
                max_rel = fmax(max_rel, max_ref > 0 ? max_abs / max_ref : max_abs);
                for (int c = 0; c < 4; c++) {
                    tab->subnormal_fma_fast = c & 1;
                    t.m.fp8_no_nan = c & 2 ? no_nan : 0;
                    for (int64_t i = 0; i < rows * nr; i++) yv[i] = -1.0f; /* every output written again */
                    linear_forced(kc[1], DSV4_LIN_GEMV, &t.m, x, nr, yv);
                    for (int s = 0; s < nr; s++)
                        for (int64_t o = 0; o < rows; o++) {
                            const int64_t j = s * rows + o;
                            const int want_nan = nan_case && (o == nan_rows[0] || o == nan_rows[1] || o == nan_rows[2]);
                            if (want_nan) bad += !isnan(ya[j]) || !isnan(yv[j]) || !isnan(yr[j]);
                            else bad += memcmp(&ya[j], &yv[j], sizeof(float)) != 0 || isnan(yr[j]);
                        }
                    total += rows * nr;
                }
                tab->subnormal_fma_fast = amd;
                free(x); free(ya); free(yv); free(yr); free(scratch);
                free_mat(&t);
            }
    CHECK_MSG(bad == 0, "fp8 avx2 gemv, no-NaN flag x subnormal decode: %lld of %lld outputs differ from the GEMM's",
              (long long)bad, (long long)total);
    CHECK_MSG(max_rel <= 1e-5, "fp8 avx2 gemv against dsv4_linear_ref: max-rel %.3g", max_rel);
    printf("fp8 avx2 gemv, no-NaN flag x subnormal decode: %lld outputs (%lld calls prescaled, %lld not), %lld differ "
           "in any bit; max-rel against the scalar reference %.3g\n",
           (long long)total, (long long)runs[0], (long long)runs[1], (long long)bad, max_rel);
}

/* Level avx2's one-row GEMV reads a task's rows as 4 far runs (linear_avx2.c gemv1_dense for
 * F32 / F16 / BF16, gemv1_fp8 for FP8 with x * 2^120 * scale kept per piece of whole scale
 * bands, on AMD cores and where the no-NaN flag is set): its bits against the level's GEMM on
 * 1..3 threads (pool tasks cut anywhere in a band) and in one dsv4_linear_here task (the whole
 * matrix: several pieces at 4100 columns, 1100 x 256's 9 bands in one piece), with row counts
 * that leave 1..3 rows past the runs, odd widths (a masked last chunk), rows of 8192 columns
 * (one band's x exactly filling the buffer) and of 8200 (past it: the adjacent-rows path),
 * and the subnormal flag set and clear (clear: the adjacent-rows path, whose bits the runs
 * must match). */
static void check_avx2_one_row_runs(void) {
    static const int64_t shapes[][2] = {{600, 4100}, {1100, 256}, {517, 133}, {130, 8200},
                                                {263, 8192}, {9, 136}, {301, 1024}};
    static const dsv4_wfmt fmts[4] = {DSV4_WF_FP8, DSV4_WF_BF16, DSV4_WF_F16, DSV4_WF_F32};
    int64_t bad = 0, total = 0;
    for (int th = 1; th <= 3; th++) CHECK(dsv4_kctx_set_simd(kc[th], DSV4_SIMD_AVX2) == DSV4_SIMD_AVX2);
    for (int fi = 0; fi < 4; fi++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            const dsv4_wfmt f = fmts[fi];
            tmat t = make_mat(f, SC_E8M0, rows, cols);
            float *x = rand_vec(cols), *ya = malloc(sizeof(float) * rows), *yv = malloc(sizeof(float) * rows);
            if (f == DSV4_WF_FP8) {
                t.m.fp8_no_nan = dsv4_fp8_no_nan(t.w, rows * cols);
                CHECK(t.m.fp8_no_nan == 1 && dsv4_lin_kernels_avx2()->fp8_prescale(&t.m, x, 1) == 1);
            }
            linear_forced(kc[1], DSV4_LIN_GEMM, &t.m, x, 1, ya);
            for (int sub = 0; sub < 2; sub++) {
                int keep[4];
                for (int k = 1; k <= 3; k++) {
                    dsv4_lin_tables *tab = (dsv4_lin_tables *)dsv4_kctx_lin_tables(kc[k]);
                    keep[k] = tab->subnormal_fma_fast;
                    tab->subnormal_fma_fast = sub;
                }
                for (int th = 1; th <= 3; th++) {
                    for (int64_t i = 0; i < rows; i++) yv[i] = NAN; /* every output written again */
                    linear_forced(kc[th], DSV4_LIN_GEMV, &t.m, x, 1, yv);
                    bad += bits_differ(ya, yv, rows);
                    total += rows;
                }
                const dsv4_lin_op op = {&t.m, x, 1, yv};
                for (int64_t i = 0; i < rows; i++) yv[i] = NAN;
                dsv4_linear_here(kc[2], &op, 1);
                bad += bits_differ(ya, yv, rows);
                total += rows;
                for (int k = 1; k <= 3; k++)
                    ((dsv4_lin_tables *)dsv4_kctx_lin_tables(kc[k]))->subnormal_fma_fast = keep[k];
            }
            free(x); free(ya); free(yv);
            free_mat(&t);
        }
    CHECK_MSG(bad == 0, "avx2 one-row far runs: %lld of %lld outputs differ from the GEMM's", (long long)bad,
              (long long)total);
    printf("avx2 one-row far runs (fp8, bf16, f16, f32): %lld outputs, %lld differ in any bit from the GEMM's\n",
           (long long)total, (long long)bad);
}

int main(void) {
    const int best = fixture_open();
    CHECK(best >= 0);
    if (best < 0) return test_report();
    /* the one-row paths of the best level, on every context */
    for (int th = 1; th <= 3; th++) CHECK(dsv4_kctx_set_simd(kc[th], best) == best);
    check_gemv_split();
    check_one_row_halves();
    check_one_row_tail(best);
    check_one_row_hints();
    check_fp8_task_prescale(best);
    if (best >= DSV4_SIMD_AVX2 && dsv4_lin_kernels_avx2()) check_fp8_avx2_flags();
    if (best >= DSV4_SIMD_AVX2 && dsv4_lin_kernels_avx2()) check_avx2_one_row_runs();
    for (int th = 1; th <= 3; th++) dsv4_kctx_set_simd(kc[th], best);
    if (best >= DSV4_SIMD_AVX512VBMI) {
        check_fp8_one_row_bands();
        check_fp8_one_row_bits();
        check_fp8_no_nan();
    } else {
        printf("SKIPPED: avx512vbmi's one-row FP8 checks (this CPU or build lacks VBMI)\n");
    }
    fixture_close();
    return test_report();
}
