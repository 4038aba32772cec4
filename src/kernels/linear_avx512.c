/* linear_avx512.c — level avx512's GEMV for dsv4_linear: 1..8 activation rows, every weight
 * format, weights decoded in registers (linear_avx512.h) and used for every row of the call.
 * Built with the AVX-512 flags (top CMakeLists.txt) and only called after cpu.c has confirmed
 * the CPU and OS support them. */
#include "kernels/linear_avx512.h"
#include "kernels/fp4_lanes.h"
#include "util/hot.h"

#ifdef DSV4_LIN_AVX512

/* ---- GEMV: 1..8 activation rows (NX), R weight rows at a time, weights decoded in
 * registers and used for every activation row. x: (NX, cols), y: (NX, rows). R * NX <= 16
 * accumulators, NX x registers and 2R decoded weights stay within the 32 registers: R = 4
 * up to 4 rows, R = 2 for 5..8 (the small-M tiles of batched decode: each weight is
 * decoded once for all rows of the call). A 32-column step runs as two 16-column halves,
 * so only one half's x rows are live at a time; each accumulator still adds its chunks in
 * ascending order. --------------------------------------------------------------------- */

#define GEMV_R(NX) ((NX) <= 4 ? 4 : 2)

AINLINE void gemv_dense_rows(int fmt, int R, int NX, const dsv4_mat *w, const float *x, float *y, int64_t o,
                             const gemv_pf *pf) {
    const int64_t n = w->cols, rows = w->rows;
    const int esz = fmt == DSV4_WF_F32 ? 4 : 2;
    const char *p[GEMV_R_MAX];
    __m512 a[GEMV_R_MAX][GEMV_NX_MAX];
    for (int r = 0; r < R; r++) {
        p[r] = (const char *)w->w + (o + r) * n * (int64_t)esz;
        for (int s = 0; s < NX; s++) a[r][s] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < n; i += 16) {
        const int m = n - i >= 16 ? 16 : (int)(n - i);
        pf_step(pf, p[0], R * i * esz, R * 16 * esz);
        __m512 xv[GEMV_NX_MAX];
        for (int s = 0; s < NX; s++)
            xv[s] = m == 16 ? _mm512_loadu_ps(x + s * n + i) : _mm512_maskz_loadu_ps(mask16(m), x + s * n + i);
        for (int r = 0; r < R; r++) {
            const __m512 wv = dec_dense(fmt, p[r], i, m);
            for (int s = 0; s < NX; s++) a[r][s] = _mm512_fmadd_ps(xv[s], wv, a[r][s]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int s = 0; s < NX; s++) y[s * rows + o + r] = hsum16(a[r][s]);
}

AINLINE void gemv_dense_nx(int fmt, int NX, const dsv4_mat *w, const float *x, float *y, int64_t o0, int64_t o1) {
    const int R = GEMV_R(NX);
    const int64_t rb = w->cols * (fmt == DSV4_WF_F32 ? 4 : 2); /* bytes per row */
    const gemv_pf pf = pf_start((const char *)w->w + o0 * rb, (const char *)w->w + o1 * rb, GEMV_PF_DENSE);
    int64_t o = o0;
    for (; o + R <= o1; o += R) gemv_dense_rows(fmt, R, NX, w, x, y, o, &pf);
    for (; o < o1; o++) gemv_dense_rows(fmt, 1, NX, w, x, y, o, &pf);
}

AINLINE void gemv_dense(int fmt, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0, int64_t o1) {
    switch (nx) {
    case 1: gemv_dense_nx(fmt, 1, w, x, y, o0, o1); break;
    case 2: gemv_dense_nx(fmt, 2, w, x, y, o0, o1); break;
    case 3: gemv_dense_nx(fmt, 3, w, x, y, o0, o1); break;
    case 4: gemv_dense_nx(fmt, 4, w, x, y, o0, o1); break;
    case 5: gemv_dense_nx(fmt, 5, w, x, y, o0, o1); break;
    case 6: gemv_dense_nx(fmt, 6, w, x, y, o0, o1); break;
    case 7: gemv_dense_nx(fmt, 7, w, x, y, o0, o1); break;
    default: gemv_dense_nx(fmt, 8, w, x, y, o0, o1); break;
    }
}

/* R rows o .. o+R-1, all in one 128-row scale band. */
AINLINE void gemv_fp8_rows(int R, int NX, const dsv4_mat *w, const float *x, float *y, int64_t o, const gemv_pf *pf) {
    const int64_t n = w->cols, nsb = (n + 127) / 128, band = o / 128, rows = w->rows;
    const uint8_t *p[GEMV_R_MAX];
    __m512 a[GEMV_R_MAX][GEMV_NX_MAX];
    __m512i nan[GEMV_R_MAX];
    for (int r = 0; r < R; r++) {
        p[r] = (const uint8_t *)w->w + (o + r) * n;
        nan[r] = _mm512_setzero_si512();
        for (int s = 0; s < NX; s++) a[r][s] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nsb; b++) {
        const int64_t i0 = b * 128, i1 = i0 + 128 < n ? i0 + 128 : n;
        const float s256f = scale_at(w, band * nsb + b) * 256.0f;
        if (!isfinite(s256f)) {
            /* huge or NaN scale: 256 * scale would overflow, dequantize exactly instead */
            for (int64_t i = i0; i < i1; i += 16) {
                const int m = i1 - i >= 16 ? 16 : (int)(i1 - i);
                __m512 xv[GEMV_NX_MAX];
                for (int s = 0; s < NX; s++) xv[s] = _mm512_maskz_loadu_ps(mask16(m), x + s * n + i);
                for (int r = 0; r < R; r++) {
                    float t[16];
                    dsv4_lin_dequant8(w, o + r, i, t);
                    if (m > 8) dsv4_lin_dequant8(w, o + r, i + 8, t + 8);
                    const __m512 wv = _mm512_maskz_loadu_ps(mask16(m), t);
                    for (int s = 0; s < NX; s++) a[r][s] = _mm512_fmadd_ps(xv[s], wv, a[r][s]);
                }
            }
            continue;
        }
        const __m512 s256 = _mm512_set1_ps(s256f);
        for (int r = 0; r < R; r++) nan[r] = fp8_nan_scan(nan[r], p[r] + i0, (int)(i1 - i0));
        for (int64_t i = i0; i < i1; i += 32) {
            const int m = i1 - i >= 32 ? 32 : (int)(i1 - i);
            pf_step(pf, p[0], R * i, R * 32);
            __m512 w0[GEMV_R_MAX], w1[GEMV_R_MAX];
            for (int r = 0; r < R; r++) dec_fp8x32(p[r] + i, m, s256, &w0[r], &w1[r]);
            for (int s = 0; s < NX; s++) { /* first half: columns i .. i+15 */
                const float *xs = x + s * n + i;
                const __m512 xv = m >= 16 ? _mm512_loadu_ps(xs) : _mm512_maskz_loadu_ps(mask16(m), xs);
                for (int r = 0; r < R; r++) a[r][s] = _mm512_fmadd_ps(xv, w0[r], a[r][s]);
            }
            if (m > 16) /* not past the last chunk (16 | m at every other step) */
                for (int s = 0; s < NX; s++) {
                    const float *xs = x + s * n + i + 16;
                    const __m512 xv = m == 32 ? _mm512_loadu_ps(xs) : _mm512_maskz_loadu_ps(mask16(m - 16), xs);
                    for (int r = 0; r < R; r++) a[r][s] = _mm512_fmadd_ps(xv, w1[r], a[r][s]);
                }
        }
    }
    for (int r = 0; r < R; r++) {
        const int has_nan = fp8_nan_seen(nan[r]);
        for (int s = 0; s < NX; s++) y[s * rows + o + r] = has_nan ? NAN : hsum16(a[r][s]);
    }
}

AINLINE void gemv_fp8_nx(int NX, const dsv4_mat *w, const float *x, float *y, int64_t o0, int64_t o1) {
    const int R = GEMV_R(NX);
    const gemv_pf pf = pf_start((const uint8_t *)w->w + o0 * w->cols, (const uint8_t *)w->w + o1 * w->cols,
                                GEMV_PF_FP8);
    int64_t o = o0;
    /* o0 is a multiple of 4 (linear_fast.c), so a block of R never straddles a band */
    for (; o + R <= o1 && (o % R) == 0; o += R) gemv_fp8_rows(R, NX, w, x, y, o, &pf);
    for (; o < o1; o++) gemv_fp8_rows(1, NX, w, x, y, o, &pf);
}

static void gemv_fp8(const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0, int64_t o1) {
    switch (nx) {
    case 1: gemv_fp8_nx(1, w, x, y, o0, o1); break;
    case 2: gemv_fp8_nx(2, w, x, y, o0, o1); break;
    case 3: gemv_fp8_nx(3, w, x, y, o0, o1); break;
    case 4: gemv_fp8_nx(4, w, x, y, o0, o1); break;
    case 5: gemv_fp8_nx(5, w, x, y, o0, o1); break;
    case 6: gemv_fp8_nx(6, w, x, y, o0, o1); break;
    case 7: gemv_fp8_nx(7, w, x, y, o0, o1); break;
    default: gemv_fp8_nx(8, w, x, y, o0, o1); break;
    }
}

/* FP4 GEMV, both levels. Per 16 weights: vpsrlvd (port 0) and vpermps (port 5) decode them
 * in fp4_perm order, then one FMA per activation row. A natural-order decoder with
 * vpmultishiftqb + vpermw cost 3 uops instead of 2 on the Xeon measured (vpermw zmm is 2
 * uops there: with an FMA beside it, 1.5 cycles a pair; small-M's dec_fp4n, with vpermps,
 * takes 2, both on port 5), and a 1..2-row
 * GEMV is bound by those decode uops, not by DRAM: 1.35-1.6x as fast hot in L2
 * (BENCHMARKS.md, session 7). The lane order is paid once: x is permuted into a stack
 * buffer per call (per chunk in registers when NX * cols does not fit it, or with F32
 * scales) and each accumulator back before its reduction. cols % 32 == 0 (checked by the
 * driver). */
#define FP4_XP_FLOATS 8192 /* permuted x on the stack: 32 KB (2 rows of 4096 columns) */

/* Weight rows a block of far runs: 8 at one activation row, as 2 adjacent rows of each of
 * the 4 runs (gemv_fp4_pairs), else GEMV_R's 4 (one row of each run). At one row 4 rows
 * give 4 FMA chains, which bind the loop (4 dependent FMAs of latency ~4 per 4 x 16
 * weights: 1.20-1.26 cycles per 16 weights in L1, 1.14-1.18 with 8 rows, where the 2
 * vector loads a cycle bind next); 2 rows of a run keep the 4 sequential streams (8 far
 * runs did not pay in the step, BENCHMARKS.md session 17 fp4g). Registers: 8 accumulators
 * and 16 decoded halves. */
#define FP4_R_MAX 8
/* ... and the same 8 rows a block at 2 activation rows (batch 16's 2-row experts): 16
 * accumulators, each row decoded and used at once (the x chunks loaded first), so that no
 * decoded half waits in a register. Zen 5, whole expert matrices hot in L2: 0.391-0.397 ns
 * per 16 weights against 0.436-0.451 with 4 rows; in the batch-16 step 0.457 against
 * 0.508-0.522 (BENCHMARKS.md, session 20 s16fp4). At 3 rows (24 accumulators) 0.515 against
 * 0.550 hot, but 4 rows then ran 0.70 against 0.66 (the function's code laid out anew): not
 * taken. */
#define FP4_PAIR_NX 2

/* row r of a block, counted from its first row o: r * rs (one row of each far run, or
 * adjacent rows when rs is 1), or with pair (r / 2) * rs + r % 2 (2 adjacent rows of each) */
AINLINE int64_t fp4_row(int pair, int r, int64_t rs) { return pair ? (r >> 1) * rs + (r & 1) : r * rs; }

/* R weight rows o + fp4_row(pair, r, rs) (rs 1: adjacent; else far apart, see gemv_fp4_task),
 * NX activation rows. xpre: x is (NX, cols) in fp4_perm order (else natural, permuted here
 * per chunk); e8m0: ue8m0 scales (a table load; else a runtime choice per block,
 * fp4_block_table). All constant after inlining. */
AINLINE void gemv_fp4_cols(int R, int NX, int xpre, int e8m0, int far, int pair, int64_t cn, const dsv4_lin_tables *tab,
                           const dsv4_mat *w, const float *x, float *y, int64_t o, int64_t rs, const gemv_pf *pf) {
    const int64_t n = cn ? cn : w->cols, nsb = n / 32, rows = w->rows, rb = n / 2;
    const int RR = pair ? R / 2 : R; /* prefetch streams: one per run */
    const int64_t step = rs * rb;    /* bytes between the runs */
    const __m512i perm = _mm512_loadu_si512((const void *)fp4_perm);
    const uint8_t *p = (const uint8_t *)w->w + o * rb;       /* row r at p + fp4_row(pair, r, rs) * rb */
    const uint8_t *sc = (const uint8_t *)w->scale + o * nsb; /* row r's (nsb) ue8m0 at sc + fp4_row(..) * nsb */
    __m512 a[FP4_R_MAX][GEMV_NX_MAX];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int s = 0; s < NX; s++) a[r][s] = _mm512_setzero_ps();
    if (far && e8m0) { /* each run's scales, as far ahead */
        pf_runs_line(sc, rs * nsb, RR, GEMV_PF_FP4_RUN / 16);
        if (pair) pf_runs_line(sc + nsb, rs * nsb, RR, GEMV_PF_FP4_RUN / 16);
    }
    for (int64_t b = 0; b < nsb; b++) {
        if (!far) pf_step(pf, p, R * b * 16, R * 16);
        else if ((b & 3) == 0) {
            pf_runs_line(p + b * 16, step, RR, GEMV_PF_FP4_RUN);
            if (pair) pf_runs_line(p + rb + b * 16, step, RR, GEMV_PF_FP4_RUN);
        }
        const float *xb = x + b * 32;
        if (NX >= 2) { /* x's chunks once a block, then row by row: each row's two decoded
                        * halves go straight into its FMAs (R x NX accumulators, 2 NX x
                        * chunks; 3 rows: 0.550 against 0.566 ns per 16 weights hot) */
            __m512 x0[GEMV_NX_MAX], x1[GEMV_NX_MAX];
#pragma GCC unroll 8
            for (int s = 0; s < NX; s++) {
                x0[s] = xpre ? _mm512_load_ps(xb + s * n) : _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xb + s * n));
                x1[s] = xpre ? _mm512_load_ps(xb + s * n + 16)
                             : _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xb + s * n + 16));
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const int j = pair ? r >> 1 : r, h = pair ? r & 1 : 0;
                const uint8_t *wr = p + j * step + b * 16, *sb = sc + j * rs * nsb + b;
                const __m512 t = e8m0 ? _mm512_load_ps(tab->fp4x16[sb[h * nsb]])
                                      : fp4_block_table(tab, w, (o + fp4_row(pair, r, rs)) * nsb + b);
                const __m512 v0 = dec_fp4(wr + h * rb, t);
#pragma GCC unroll 8
                for (int s = 0; s < NX; s++) a[r][s] = _mm512_fmadd_ps(x0[s], v0, a[r][s]);
                const __m512 v1 = dec_fp4(wr + h * rb + 8, t);
#pragma GCC unroll 8
                for (int s = 0; s < NX; s++) a[r][s] = _mm512_fmadd_ps(x1[s], v1, a[r][s]);
            }
            continue;
        }
        __m512 w0[FP4_R_MAX], w1[FP4_R_MAX];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            /* pair: row r is row r % 2 of run r / 2's block; else row r of the block */
            const int j = pair ? r >> 1 : r, h = pair ? r & 1 : 0;
            const uint8_t *wr = p + j * step + b * 16, *sb = sc + j * rs * nsb + b;
            const __m512 t = e8m0 ? _mm512_load_ps(tab->fp4x16[sb[h * nsb]])
                                  : fp4_block_table(tab, w, (o + fp4_row(pair, r, rs)) * nsb + b);
            w0[r] = dec_fp4(wr + h * rb, t);
            w1[r] = dec_fp4(wr + h * rb + 8, t);
        }
#pragma GCC unroll 8
        for (int s = 0; s < NX; s++) { /* columns 0..15 of the block, then 16..31 */
            const __m512 xv = xpre ? _mm512_load_ps(xb + s * n) : _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xb + s * n));
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) a[r][s] = _mm512_fmadd_ps(xv, w0[r], a[r][s]);
        }
#pragma GCC unroll 8
        for (int s = 0; s < NX; s++) {
            const __m512 xv = xpre ? _mm512_load_ps(xb + s * n + 16)
                                   : _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xb + s * n + 16));
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) a[r][s] = _mm512_fmadd_ps(xv, w1[r], a[r][s]);
        }
    }
    const __m512i unperm = _mm512_loadu_si512((const void *)fp4_unperm);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int s = 0; s < NX; s++)
            y[s * rows + o + fp4_row(pair, r, rs)] = hsum16(_mm512_permutexvar_ps(unperm, a[r][s]));
}

/* the same, w->cols columns */
AINLINE void gemv_fp4_rows(int R, int NX, int xpre, int e8m0, int far, int pair, const dsv4_lin_tables *tab,
                           const dsv4_mat *w, const float *x, float *y, int64_t o, int64_t rs, const gemv_pf *pf) {
    gemv_fp4_cols(R, NX, xpre, e8m0, far, pair, 0, tab, w, x, y, o, rs, pf);
}

/* Blocks of 2 rows of each of the 4 far runs (q rows a run) at NX <= FP4_PAIR_NX activation
 * rows: rows k and k + 1 of each run for k = 0, 2, .. < q - 1. Returns the rows a run it took (0: none).
 * Only the experts' widths (flash_quarter: 512, 1024 columns), compiled as constants: a
 * pair's second row is then a constant offset from its first and the 8 rows' pointers fit
 * the general registers (6 stack reloads a block); at run-time widths 13-16 pointers were
 * reloaded every block, and other widths keep the 4-row blocks. At 2048 and 4096 columns
 * (the checkpoint's experts) pairs read no faster than the 4-row blocks, in process or in
 * step (BENCHMARKS.md session 20 fp4w). A width added here also needs its prefetch in the
 * run's order: each row's line GEMV_PF_FP4_RUN ahead lands in the run's next pair only where
 * that distance is a multiple of 2 rows (512, 1024 columns); at 2048 / 4096 it fell on the
 * pair's other row, and the pairs lost 0.76-0.83x for that alone. */
AINLINE int64_t gemv_fp4_pairs(int NX, int xpre, int e8m0, const dsv4_lin_tables *tab, const dsv4_mat *w, const float *x,
                               float *y, int64_t o0, int64_t q, const gemv_pf *pf) {
    const int64_t q2 = q & ~(int64_t)1;
    if (w->cols == 512)
        for (int64_t k = 0; k < q2; k += 2)
            gemv_fp4_cols(FP4_R_MAX, NX, xpre, e8m0, 1, 1, 512, tab, w, x, y, o0 + k, q, pf);
    else if (w->cols == 1024)
        for (int64_t k = 0; k < q2; k += 2)
            gemv_fp4_cols(FP4_R_MAX, NX, xpre, e8m0, 1, 1, 1024, tab, w, x, y, o0 + k, q, pf);
    else
        return 0;
    return q2;
}

/* A task's rows [o0, o1): with at most GEMV_FP4_FAR_NX activation rows, as R far-apart
 * runs where pf_fp4_runs says so (block k takes row k of each run, as gemv1_dense, or at one
 * activation row rows k and k + 1 of each (FP4_R_MAX); each run's
 * weights and scale bytes prefetched GEMV_PF_FP4_RUN bytes ahead of its own reads; the last
 * (o1 - o0) % R rows one by one after them), else R adjacent rows a block and the task's
 * bytes prefetched as one stream. Which rows share a block changes no result: each row
 * keeps its accumulators, lanes and chunk order. */
AINLINE void gemv_fp4_task(int NX, int xpre, int e8m0, const dsv4_lin_tables *tab, const dsv4_mat *w,
                           const float *x, float *y, int64_t o0, int64_t o1) {
    const int R = GEMV_R(NX);
    const int64_t n = w->cols, nsb = n / 32, rb = n / 2;
    const uint8_t *wt = (const uint8_t *)w->w + o0 * rb, *sc = (const uint8_t *)w->scale + o0 * nsb;
    const int64_t q = NX <= GEMV_FP4_FAR_NX
                          ? pf_fp4_runs(wt, e8m0 ? sc : NULL, rb, nsb, R, o0, o1, w->rows, GEMV_FP4_FAR_ROWS)
                          : 0;
    /* runs: the last rows follow run R - 1, whose prefetch ran on into them */
    const gemv_pf pf = q ? (gemv_pf){GEMV_PF_FP4} : pf_start(wt, wt + (o1 - o0) * rb, GEMV_PF_FP4);
    int64_t o = o0;
    if (q) {
        int64_t k = 0;
        /* at 1-2 rows 2 rows of each run a block; an odd q's last row of each run after them */
        if (NX <= FP4_PAIR_NX) k = gemv_fp4_pairs(NX, xpre, e8m0, tab, w, x, y, o0, q, &pf);
        for (; k < q; k++) gemv_fp4_rows(R, NX, xpre, e8m0, 1, 0, tab, w, x, y, o0 + k, q, &pf);
        o = o0 + R * q;
    } else {
        if (e8m0) pf_start(sc, sc + (o1 - o0) * nsb, 4096); /* the task's ue8m0 scales */
        for (; o + R <= o1; o += R) gemv_fp4_rows(R, NX, xpre, e8m0, 0, 0, tab, w, x, y, o, 1, &pf);
    }
    for (; o < o1; o++) gemv_fp4_rows(1, NX, xpre, e8m0, 0, 0, tab, w, x, y, o, 1, &pf);
}

AINLINE void gemv_fp4_nx(int NX, const dsv4_lin_tables *tab, const dsv4_mat *w, const float *x, float *y, int64_t o0,
                         int64_t o1) {
    const int64_t n = w->cols;
    if (NX * n <= FP4_XP_FLOATS && !w->scale_is_f32) { /* the model's case */
        _Alignas(64) float xp[FP4_XP_FLOATS]; /* (NX, n) x in fp4_perm order */
        const __m512i perm = _mm512_loadu_si512((const void *)fp4_perm);
        for (int64_t i = 0; i < NX * n; i += 16)
            _mm512_store_ps(xp + i, _mm512_permutexvar_ps(perm, _mm512_loadu_ps(x + i)));
        gemv_fp4_task(NX, 1, 1, tab, w, xp, y, o0, o1);
    } else { /* F32 scales, or x too long for the stack buffer */
        gemv_fp4_task(NX, 0, 0, tab, w, x, y, o0, o1);
    }
}

/* Each activation row count its own function (not inlined into one switch): as one function
 * the 8 cases' code shared one frame and layout, and a change to one case moved another's
 * speed (pairs at 3 rows made 4 rows 0.70 against 0.66 ns per 16 weights, BENCHMARKS.md
 * session 20 s16fp4). Apart, every case ran faster on Zen 5: whole 512 x 1024 expert
 * matrices hot in L2, one thread, NX 1 0.291-0.308 against 0.328-0.349 ns per 16 weights,
 * NX 3 0.51-0.54 against 0.55-0.59; in the batch-16 step NX 1 0.36-0.44 against 0.39-0.49
 * (6 of 6 timeline pairs; BENCHMARKS.md session 21 moe16). Same code, same bits. OFF: the
 * function's offset in a 4 KB page (util/hot.h). */
#define GEMV_FP4_NX_FN(NX, OFF)                                                                                  \
    DSV4_HOT_AT(gemv_fp4_n##NX, OFF)                                                                             \
    static __attribute__((noinline)) void gemv_fp4_n##NX(const dsv4_lin_tables *tab, const dsv4_mat *w,         \
                                                         const float *x, float *y, int64_t o0, int64_t o1) {     \
        gemv_fp4_nx(NX, tab, w, x, y, o0, o1);                                                                    \
    }
GEMV_FP4_NX_FN(1, 0x6a0)
GEMV_FP4_NX_FN(2, 0xb0)
GEMV_FP4_NX_FN(3, 0x9a0)
GEMV_FP4_NX_FN(4, 0x3a0)
GEMV_FP4_NX_FN(5, 0x5a0)
GEMV_FP4_NX_FN(6, 0xbe0)
GEMV_FP4_NX_FN(7, 0x610)
GEMV_FP4_NX_FN(8, 0x3e0)

/* no DSV4_HOT_AT: GCC inlines it into its caller, which would leave an empty section behind a
 * page of pad */
static void gemv_fp4(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                     int64_t o1) {
    switch (nx) {
    case 1: gemv_fp4_n1(c->tab, w, x, y, o0, o1); break;
    case 2: gemv_fp4_n2(c->tab, w, x, y, o0, o1); break;
    case 3: gemv_fp4_n3(c->tab, w, x, y, o0, o1); break;
    case 4: gemv_fp4_n4(c->tab, w, x, y, o0, o1); break;
    case 5: gemv_fp4_n5(c->tab, w, x, y, o0, o1); break;
    case 6: gemv_fp4_n6(c->tab, w, x, y, o0, o1); break;
    case 7: gemv_fp4_n7(c->tab, w, x, y, o0, o1); break;
    default: gemv_fp4_n8(c->tab, w, x, y, o0, o1); break;
    }
}

/* ---- FP4 GEMV on the lanes layout (DSV4_WF_FP4L, kernels/fp4_lanes.h) -------------------
 * A row's 128-column line is one 64-byte load; its chunk k (columns 16k .. 16k + 15 of the
 * line, k < 8) is the line's 16 words shifted right by 4k (none at k = 0) and looked up by
 * vpermps in the table of the line's scale block k / 2: 16 weights in natural column order
 * for one immediate shift and one vpermps, where the natural layout takes a broadcast load
 * (a vector slot on Zen 5), a vpsrlvd and a vpermps in fp4_perm order. So x is used as it
 * is, and accumulator lane i adds columns 16c + i in ascending c, which is what the natural
 * path's lane fp4_perm^-1(i) adds (its unpermute puts it in lane i before the tree): same
 * x, same weights, same FMA sequence per lane, same reduction, the same bits (checked
 * bitwise by test_fp4l_gemv). Rows, runs, pairs, prefetch and tails as
 * gemv_fp4_cols / gemv_fp4_task; cols % 128 == 0 (the format's). */

/* the 16 weights of chunk k of a lanes line, from its scale block's table */
AINLINE __m512 dec_fp4l(__m512i line, int k, __m512 table) {
    return _mm512_permutexvar_ps(k ? _mm512_srli_epi32(line, 4 * k) : line, table);
}

/* R weight rows o + fp4_row(pair, r, rs), NX activation rows, cn columns (0: w->cols);
 * e8m0: ue8m0 scales (a table load; else fp4_block_table per block). Constant after inlining. */
AINLINE void gemv_fp4l_cols(int R, int NX, int e8m0, int far, int pair, int64_t cn, const dsv4_lin_tables *tab,
                            const dsv4_mat *w, const float *x, float *y, int64_t o, int64_t rs, const gemv_pf *pf) {
    const int64_t n = cn ? cn : w->cols, nsb = n / 32, rows = w->rows, rb = n / 2;
    const int RR = pair ? R / 2 : R; /* prefetch streams: one per run */
    const int64_t step = rs * rb;    /* bytes between the runs */
    const uint8_t *p = (const uint8_t *)w->w + o * rb;       /* row r at p + fp4_row(pair, r, rs) * rb */
    const uint8_t *sc = (const uint8_t *)w->scale + o * nsb; /* row r's (nsb) ue8m0 at sc + fp4_row(..) * nsb */
    __m512 a[FP4_R_MAX][GEMV_NX_MAX];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int s = 0; s < NX; s++) a[r][s] = _mm512_setzero_ps();
    if (far && e8m0) { /* each run's scales, as far ahead */
        pf_runs_line(sc, rs * nsb, RR, GEMV_PF_FP4L_RUN / 16);
        if (pair) pf_runs_line(sc + nsb, rs * nsb, RR, GEMV_PF_FP4L_RUN / 16);
    }
#pragma GCC unroll 1
    for (int64_t l = 0; l < n / DSV4_FP4L_COLS; l++) {
        if (!far) pf_step(pf, p, R * l * 64, R * 64);
        else {
            pf_runs_line(p + l * 64, step, RR, GEMV_PF_FP4L_RUN);
            if (pair) pf_runs_line(p + rb + l * 64, step, RR, GEMV_PF_FP4L_RUN);
        }
        const float *xl = x + l * DSV4_FP4L_COLS;
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) { /* scale block 4l + q: chunks 2q, 2q + 1 */
            __m512 x0[GEMV_NX_MAX], x1[GEMV_NX_MAX];
#pragma GCC unroll 8
            for (int s = 0; s < NX; s++) {
                x0[s] = _mm512_loadu_ps(xl + s * n + 32 * q);
                x1[s] = _mm512_loadu_ps(xl + s * n + 32 * q + 16);
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) { /* each row's two chunks straight into its FMAs */
                const int j = pair ? r >> 1 : r, h = pair ? r & 1 : 0;
                /* the row's line loaded again each block (an L1 hit; the empty asm keeps GCC from
                 * holding all R lines in registers across the blocks, which spilled them) */
                const uint8_t *wr = p + j * step + h * rb + l * 64;
                __asm__("" : "+r"(wr));
                const __m512i line = _mm512_loadu_si512((const void *)wr);
                const int64_t bi = 4 * l + q;
                const __m512 t = e8m0 ? _mm512_load_ps(tab->fp4x16[sc[j * rs * nsb + h * nsb + bi]])
                                      : fp4_block_table(tab, w, (o + fp4_row(pair, r, rs)) * nsb + bi);
                const __m512 w0 = dec_fp4l(line, 2 * q, t), w1 = dec_fp4l(line, 2 * q + 1, t);
#pragma GCC unroll 8
                for (int s = 0; s < NX; s++) a[r][s] = _mm512_fmadd_ps(x0[s], w0, a[r][s]);
#pragma GCC unroll 8
                for (int s = 0; s < NX; s++) a[r][s] = _mm512_fmadd_ps(x1[s], w1, a[r][s]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int s = 0; s < NX; s++) y[s * rows + o + fp4_row(pair, r, rs)] = hsum16(a[r][s]);
}

/* gemv_fp4_pairs on the lanes layout: the same widths, the same reasons */
AINLINE int64_t gemv_fp4l_pairs(int NX, int e8m0, const dsv4_lin_tables *tab, const dsv4_mat *w, const float *x,
                                float *y, int64_t o0, int64_t q, const gemv_pf *pf) {
    const int64_t q2 = q & ~(int64_t)1;
    if (w->cols == 512)
        for (int64_t k = 0; k < q2; k += 2)
            gemv_fp4l_cols(FP4_R_MAX, NX, e8m0, 1, 1, 512, tab, w, x, y, o0 + k, q, pf);
    else if (w->cols == 1024)
        for (int64_t k = 0; k < q2; k += 2)
            gemv_fp4l_cols(FP4_R_MAX, NX, e8m0, 1, 1, 1024, tab, w, x, y, o0 + k, q, pf);
    else
        return 0;
    return q2;
}

/* gemv_fp4_task on the lanes layout: far runs where pf_fp4_runs says so, else adjacent rows */
AINLINE void gemv_fp4l_task(int NX, int e8m0, const dsv4_lin_tables *tab, const dsv4_mat *w, const float *x, float *y,
                            int64_t o0, int64_t o1) {
    const int R = GEMV_R(NX);
    const int64_t n = w->cols, nsb = n / 32, rb = n / 2;
    const uint8_t *wt = (const uint8_t *)w->w + o0 * rb, *sc = (const uint8_t *)w->scale + o0 * nsb;
    const int64_t q = NX <= GEMV_FP4_FAR_NX
                          ? pf_fp4_runs(wt, e8m0 ? sc : NULL, rb, nsb, R, o0, o1, w->rows, GEMV_FP4_FAR_ROWS)
                          : 0;
    const gemv_pf pf = q ? (gemv_pf){GEMV_PF_FP4L} : pf_start(wt, wt + (o1 - o0) * rb, GEMV_PF_FP4L);
    int64_t o = o0;
    if (q) {
        int64_t k = 0;
        if (NX <= FP4_PAIR_NX) k = gemv_fp4l_pairs(NX, e8m0, tab, w, x, y, o0, q, &pf);
        for (; k < q; k++) gemv_fp4l_cols(R, NX, e8m0, 1, 0, 0, tab, w, x, y, o0 + k, q, &pf);
        o = o0 + R * q;
    } else {
        if (e8m0) pf_start(sc, sc + (o1 - o0) * nsb, 4096); /* the task's ue8m0 scales */
        for (; o + R <= o1; o += R) gemv_fp4l_cols(R, NX, e8m0, 0, 0, 0, tab, w, x, y, o, 1, &pf);
    }
    for (; o < o1; o++) gemv_fp4l_cols(1, NX, e8m0, 0, 0, 0, tab, w, x, y, o, 1, &pf);
}

AINLINE void gemv_fp4l_nx(int NX, const dsv4_lin_tables *tab, const dsv4_mat *w, const float *x, float *y,
                          int64_t o0, int64_t o1) {
    if (w->scale_is_f32) gemv_fp4l_task(NX, 0, tab, w, x, y, o0, o1);
    else gemv_fp4l_task(NX, 1, tab, w, x, y, o0, o1); /* the model's case */
}

/* each activation row count its own function, as gemv_fp4_n* (and for the same reason) */
#define GEMV_FP4L_NX_FN(NX, OFF)                                                                                 \
    DSV4_HOT_AT(gemv_fp4l_n##NX, OFF)                                                                            \
    static __attribute__((noinline)) void gemv_fp4l_n##NX(const dsv4_lin_tables *tab, const dsv4_mat *w,        \
                                                          const float *x, float *y, int64_t o0, int64_t o1) {    \
        gemv_fp4l_nx(NX, tab, w, x, y, o0, o1);                                                                   \
    }
GEMV_FP4L_NX_FN(1, 0x40)
GEMV_FP4L_NX_FN(2, 0x40)
GEMV_FP4L_NX_FN(3, 0x40)
GEMV_FP4L_NX_FN(4, 0x40)
GEMV_FP4L_NX_FN(5, 0x40)
GEMV_FP4L_NX_FN(6, 0x40)
GEMV_FP4L_NX_FN(7, 0x40)
GEMV_FP4L_NX_FN(8, 0x40)

static void gemv_fp4l(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                      int64_t o1) {
    switch (nx) {
    case 1: gemv_fp4l_n1(c->tab, w, x, y, o0, o1); break;
    case 2: gemv_fp4l_n2(c->tab, w, x, y, o0, o1); break;
    case 3: gemv_fp4l_n3(c->tab, w, x, y, o0, o1); break;
    case 4: gemv_fp4l_n4(c->tab, w, x, y, o0, o1); break;
    case 5: gemv_fp4l_n5(c->tab, w, x, y, o0, o1); break;
    case 6: gemv_fp4l_n6(c->tab, w, x, y, o0, o1); break;
    case 7: gemv_fp4l_n7(c->tab, w, x, y, o0, o1); break;
    default: gemv_fp4l_n8(c->tab, w, x, y, o0, o1); break;
    }
}

/* One activation row (batch-1 decode): 4 weight rows a block with their accumulators in
 * named registers (the generic kernel's [R][NX] array stays on the stack for NX = 1, and each
 * FMA then waits on a store and a reload: 2.3x slower from L2), every x chunk loaded once
 * for the 4 rows. Lanes, chunk order and tree as gemv_dense_rows.
 * The 4 rows of a block are far apart: a task's rows [o0, o1) are cut into 4 runs of q
 * rows and block k takes row k of each run, so each run is read front to back as one long
 * sequential stream (4 streams a thread). Zen 5's hardware prefetchers follow such streams
 * at the stream probe's rate; 4 adjacent rows read in step (4 streams one row apart)
 * defeat them, and the software prefetch of that order (gemv_prefetch.h) only got to
 * ~0.6 of the probe (BENCHMARKS.md, session 11 "cold"). Which rows share a block changes
 * no result: each row has its own accumulator. */
#define G1_DENSE_R 4

/* rows o + r * rs, r < R; each row's stream prefetched dist bytes ahead */
AINLINE void gemv1_dense_rows(int fmt, int R, const dsv4_mat *w, const float *x, float *y, int64_t o, int64_t rs,
                              int64_t dist) {
    const int64_t n = w->cols;
    const int esz = fmt == DSV4_WF_F32 ? 4 : 2;
    const int64_t step = rs * n * (int64_t)esz; /* bytes between the R rows */
    const char *p = (const char *)w->w + o * n * (int64_t)esz; /* row r at p + r * step */
    __m512 a[G1_DENSE_R];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
    const int64_t nf = n & ~(int64_t)15;
    for (int64_t i = 0; i < nf; i += 16) {
        if (((i * esz) & 63) == 0) pf_runs_line(p + i * esz, step, R, dist);
        const __m512 xv = _mm512_loadu_ps(x + i);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(xv, dec_dense(fmt, p + r * step, i, 16), a[r]);
    }
    if (nf < n) { /* the zero-padded last chunk */
        const int m = (int)(n - nf);
        const __m512 xv = _mm512_maskz_loadu_ps(mask16(m), x + nf);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(xv, dec_dense(fmt, p + r * step, nf, m), a[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) y[o + r * rs] = hsum16(a[r]);
}

AINLINE void gemv1_dense(int fmt, const dsv4_mat *w, const float *x, float *y, int64_t o0, int64_t o1) {
    const int64_t rb = w->cols * (fmt == DSV4_WF_F32 ? 4 : 2); /* bytes per row */
    const int64_t q = (o1 - o0) / G1_DENSE_R;                   /* rows per run */
    const int64_t dist = GEMV_PF_DENSE / G1_DENSE_R;            /* per run */
    const char *base = (const char *)w->w + o0 * rb;
    pf_runs_start(base, q * rb, G1_DENSE_R, q * rb, dist);
    for (int64_t k = 0; k < q; k++) gemv1_dense_rows(fmt, G1_DENSE_R, w, x, y, o0 + k, q, dist);
    for (int64_t o = o0 + G1_DENSE_R * q; o < o1; o++) gemv1_dense_rows(fmt, 1, w, x, y, o, 0, dist);
}

/* ---- 2..4 activation rows, BF16: 4 far runs as gemv1_dense --------------------------------
 * gemv_dense reads R adjacent rows in step, which the hardware prefetchers follow at ~0.6 of
 * the stream: the LM head (8192 x 1024 BF16) at 2-4 rows took 1.6x its one-row time, cold,
 * with FMAs to spare. Here a task's rows go as gemv1_dense's 4 far runs (one sequential
 * stream each), each 16 weights decoded once for the NX activation rows; every accumulator a
 * named register (4 x NX <= 16), chunks in ascending order, hsum16's tree: each row's bits
 * are its one-row call's. bench_linear --decode --fmt bf16, cold, 2 threads: the head at 2 /
 * 3 / 4 rows 250 / 266 / 275 us against 438 / 433 / 421 (one row 279), wo_b 1024 x 2048 66 /
 * 72 / 78 against 136 / 143 / 138; hot in L2 1.0-1.15x the adjacent rows' time (the DRAM case
 * is decode's). In step (timeline, odd steps against even, batch 2 / 4): the head's job 0.61 /
 * 0.72x the time (A/A 0.99 / 1.00), the step 0.92 / 0.94x (A/A 0.99 / 0.98). BENCHMARKS.md
 * session 33 fewm. */
/* ... for tasks of at least this many rows: runs of 16+ rows. The router's 256 x 1024 at 2
 * rows is cut in tasks of 16 rows (4 runs of 4 rows), where the far runs took 1.10x the adjacent
 * rows' time in step (their odd steps against the even, beside an A/A's 1.04) */
#define GN_DENSE_MIN_ROWS 64

AINLINE void gemvn_dense_rows(int fmt, int R, int NX, int pf, const dsv4_mat *w, const float *x, float *y, int64_t o,
                              int64_t rs, int64_t dist) {
    const int64_t n = w->cols, rows = w->rows;
    const int esz = fmt == DSV4_WF_F32 ? 4 : 2;
    const int64_t step = rs * n * (int64_t)esz;
    const char *p = (const char *)w->w + o * n * (int64_t)esz;
    __m512 a[G1_DENSE_R][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int s = 0; s < NX; s++) a[r][s] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const int m = n - i >= 16 ? 16 : (int)(n - i);
        if (pf && ((i * esz) & 63) == 0) pf_runs_line(p + i * esz, step, R, dist);
        __m512 xv[4];
#pragma GCC unroll 4
        for (int s = 0; s < NX; s++)
            xv[s] = m == 16 ? _mm512_loadu_ps(x + s * n + i) : _mm512_maskz_loadu_ps(mask16(m), x + s * n + i);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 wv = m == 16 ? dec_dense(fmt, p + r * step, i, 16) : dec_dense(fmt, p + r * step, i, m);
#pragma GCC unroll 4
            for (int s = 0; s < NX; s++) a[r][s] = _mm512_fmadd_ps(xv[s], wv, a[r][s]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int s = 0; s < NX; s++) y[s * rows + o + r * rs] = hsum16(a[r][s]);
}

AINLINE void gemvn_dense(int fmt, int NX, const dsv4_mat *w, const float *x, float *y, int64_t o0, int64_t o1) {
    const int64_t rb = w->cols * (fmt == DSV4_WF_F32 ? 4 : 2);
    const int64_t q = (o1 - o0) / G1_DENSE_R;
    const int64_t dist = GEMV_PF_DENSE / G1_DENSE_R;
    /* 8 rows as two groups of 4 (16 accumulators), the second pass over the block's 4 rows
     * from L1 */
    const int G0 = NX <= 4 ? NX : NX / 2, G1 = NX - G0;
    const float *x1 = x + G0 * w->cols;
    float *y1 = y + G0 * w->rows;
    pf_runs_start((const char *)w->w + o0 * rb, q * rb, G1_DENSE_R, q * rb, dist);
    for (int64_t k = 0; k < q; k++) {
        gemvn_dense_rows(fmt, G1_DENSE_R, G0, 1, w, x, y, o0 + k, q, dist);
        if (G1 > 0) gemvn_dense_rows(fmt, G1_DENSE_R, G1, 0, w, x1, y1, o0 + k, q, dist);
    }
    for (int64_t o = o0 + G1_DENSE_R * q; o < o1; o++) {
        gemvn_dense_rows(fmt, 1, G0, 1, w, x, y, o, 0, dist);
        if (G1 > 0) gemvn_dense_rows(fmt, 1, G1, 0, w, x1, y1, o, 0, dist);
    }
}

static void gemv_f32(const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0, int64_t o1) {
    if (nx == 1) gemv1_dense(DSV4_WF_F32, w, x, y, o0, o1);
    else gemv_dense(DSV4_WF_F32, w, x, nx, y, o0, o1);
}
static void gemv_f16(const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0, int64_t o1) {
    gemv_dense(DSV4_WF_F16, w, x, nx, y, o0, o1);
}
/* the far runs at 2..4 and 8 rows, out of gemv_bf16 (noinline): inlined there they grew the
 * hot-placed function from 18 to 28 KB around the batch-1 head's loop (as gemv_fp4_n*) */
static __attribute__((noinline)) void gemvn_bf16(const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                                                 int64_t o1) {
    switch (nx) {
    case 2: gemvn_dense(DSV4_WF_BF16, 2, w, x, y, o0, o1); break;
    case 3: gemvn_dense(DSV4_WF_BF16, 3, w, x, y, o0, o1); break;
    case 4: gemvn_dense(DSV4_WF_BF16, 4, w, x, y, o0, o1); break;
    default: gemvn_dense(DSV4_WF_BF16, 8, w, x, y, o0, o1); break;
    }
}

DSV4_HOT_AT(gemv_bf16, 0xe90)
static void gemv_bf16(const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0, int64_t o1) {
    if (nx == 1) gemv1_dense(DSV4_WF_BF16, w, x, y, o0, o1);
    /* 5..7: the adjacent rows ran as fast in step */
    else if ((nx <= 4 || nx == 8) && o1 - o0 >= GN_DENSE_MIN_ROWS) gemvn_bf16(w, x, nx, y, o0, o1);
    else gemv_dense(DSV4_WF_BF16, w, x, nx, y, o0, o1);
}

void dsv4_lin_avx512_gemv(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                          int64_t o1) {
    switch (w->fmt) {
    case DSV4_WF_F32: gemv_f32(w, x, nx, y, o0, o1); break;
    case DSV4_WF_F16: gemv_f16(w, x, nx, y, o0, o1); break;
    case DSV4_WF_BF16: gemv_bf16(w, x, nx, y, o0, o1); break;
    case DSV4_WF_FP8: gemv_fp8(w, x, nx, y, o0, o1); break;
    case DSV4_WF_FP4: gemv_fp4(c, w, x, nx, y, o0, o1); break;
    case DSV4_WF_FP4L: gemv_fp4l(c, w, x, nx, y, o0, o1); break;
    default: break;
    }
}

/* 8 rows a GEMV call; up to 16 rows (two passes) for every format but FP8, whose second
 * pass decodes (and NaN-scans) every weight again: at 16 rows on the decode shapes the two
 * passes beat the tile GEMM 1.4-2.3x for BF16 and 1.0-1.7x for FP4, but FP8 ran at
 * 0.7-1.15x (bench_linear --decode --rows 16, BENCHMARKS.md). No prescaled FP8. */
static const dsv4_lin_kernels avx512_kernels = {GEMV_NX_MAX,          16,   GEMV_NX_MAX, dsv4_lin_avx512_gemv,
                                                dsv4_lin_avx512_gemm, NULL, {0},         NULL,
                                                1 /* gemv_fp4l: gemv_fp4l reads FP4L */, 0, 0, 0, 0,
                                                0 /* FP4B (an avx2 layout): planned as GEMM */};

const dsv4_lin_kernels *dsv4_lin_kernels_avx512(void) { return &avx512_kernels; }

#else

const dsv4_lin_kernels *dsv4_lin_kernels_avx512(void) { return 0; }

#endif
