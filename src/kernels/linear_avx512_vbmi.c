/* linear_avx512_vbmi.c — level avx512vbmi of dsv4_linear: the AVX-512 kernels plus the VBMI
 * byte permutes where the CPU has them. FP8 GEMVs decode through byte tables (linear_avx512.h),
 * batch 1 has its own one-row FP8 GEMV, and 2..64 activation rows (by format) take the small-M
 * kernels (linear_avx512_vbmi_smallm.c). Every other case is level avx512's. */
#include "kernels/linear_avx512.h"
#include "util/hot.h"

#ifdef DSV4_LIN_AVX512

/* a[r][s] += x[s] . w[r] over the m (<= 64) columns from i: chunks of 16 in ascending
 * order, the last one's x zero-padded, none past it */
AINLINE VBMI void fp8v_step(int R, int NX, const fp8_tab *t, const uint8_t *const *p, const float *x, int64_t n,
                            int64_t i, int m, __m512 scale, __m512 a[GEMV_R_MAX][GEMV_NX_MAX]) {
    for (int r = 0; r < R; r++) {
        __m512 w[4];
        dec_fp8x64(t, p[r] + i, m, scale, w);
        for (int q = 0; q < 4 && 16 * q < m; q++)
            for (int s = 0; s < NX; s++) {
                const float *xs = x + s * n + i + 16 * q;
                const __m512 xv = m - 16 * q >= 16 ? _mm512_loadu_ps(xs) : _mm512_maskz_loadu_ps(mask16(m - 16 * q), xs);
                a[r][s] = _mm512_fmadd_ps(xv, w[q], a[r][s]);
            }
    }
}

/* R rows o .. o+R-1 in one 128-row scale band, NX <= 8 activation rows, R * NX <= 16 */
AINLINE VBMI void gemv_fp8v_rows(int R, int NX, const fp8_tab *t, const dsv4_mat *w, const float *x, float *y,
                                 int64_t o, const gemv_pf *pf) {
    const int64_t n = w->cols, nsb = (n + 127) / 128, band = o / 128, rows = w->rows;
    const uint8_t *p[GEMV_R_MAX];
    __m512 a[GEMV_R_MAX][GEMV_NX_MAX];
    for (int r = 0; r < R; r++) {
        p[r] = (const uint8_t *)w->w + (o + r) * n;
        for (int s = 0; s < NX; s++) a[r][s] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nsb; b++) {
        const int64_t i0 = b * 128, i1 = i0 + 128 < n ? i0 + 128 : n;
        const __m512 scale = _mm512_set1_ps(scale_at(w, band * nsb + b));
        int64_t i = i0;
        for (; i + 64 <= i1; i += 64) {
            pf_step(pf, p[0], R * i, R * 64);
            fp8v_step(R, NX, t, p, x, n, i, 64, scale, a);
        }
        if (i < i1) fp8v_step(R, NX, t, p, x, n, i, (int)(i1 - i), scale, a);
    }
    for (int r = 0; r < R; r++)
        for (int s = 0; s < NX; s++) y[s * rows + o + r] = hsum16(a[r][s]);
}

/* weight rows a block: R * NX accumulators within 16 */
#define GEMV_V_R(NX) ((NX) <= 4 ? 4 : 2)

AINLINE VBMI void gemv_fp8v_nx(int NX, const fp8_tab *t, const dsv4_mat *w, const float *x, float *y, int64_t o0,
                               int64_t o1) {
    const int R = GEMV_V_R(NX);
    const gemv_pf pf = pf_start((const uint8_t *)w->w + o0 * w->cols, (const uint8_t *)w->w + o1 * w->cols,
                                GEMV_PF_FP8);
    int64_t o = o0;
    /* o0 is a multiple of 4 (linear_fast.c), so a block of R never straddles a band */
    for (; o + R <= o1 && (o % R) == 0; o += R) gemv_fp8v_rows(R, NX, t, w, x, y, o, &pf);
    for (; o < o1; o++) gemv_fp8v_rows(1, NX, t, w, x, y, o, &pf);
}

#define FP8V_CASE(NX) \
    case NX: gemv_fp8v_nx(NX, &t, w, x, y, o0, o1); break;

static VBMI void gemv_fp8v(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                           int64_t o1) {
    const fp8_tab t = fp8_tab_load(c->tab);
    switch (nx) {
    FP8V_CASE(1) FP8V_CASE(2) FP8V_CASE(3) FP8V_CASE(4) FP8V_CASE(5) FP8V_CASE(6) FP8V_CASE(7)
    default: gemv_fp8v_nx(8, &t, w, x, y, o0, o1); break;
    }
}

/* ---- GEMV of one activation row (batch-1 decode), level avx512vbmi ---------------------------
 * The same lanes, chunk order and tree as gemv_fp8v, written for what one row needs. Every
 * accumulator a named register (GCC keeps the generic kernels' [R][NX] arrays on the stack
 * when it does not unroll them, and each FMA then waits on a store and a reload); with
 * ue8m0 scales x is prescaled, x * scale once per 16 columns for all 4 rows instead of every
 * weight times the scale (dsv4_lin_call.fp8_prescale, exact by fp8v_prescale's test: e4m3 *
 * scale is exact for every code and scale byte <= 246, so FMA(x * scale, e4m3, a) and FMA(x,
 * e4m3 * scale, a) round the same exact product). 4 weight rows a block: each accumulator
 * takes 4 dependent FMAs per 64 columns, 4 rows hide the FMA latency; 8 rows ran no faster
 * from L2 and slower from DRAM (the 8 rows' streams outrun the prefetch). The prefetch runs
 * at least one block (4 rows) ahead, so that the next block's rows are in flight while this
 * one is decoded (wo_b's 2 KB rows: 1.33x the generic kernel, 1.12x with the 4 KB
 * distance). Against the generic kernel on the decode step's FP8 shapes, cold, 2 threads:
 * 1.15-1.47x (BENCHMARKS.md, "Session 7: batch-1 decode"). */

#define G1_R 4 /* weight rows a block */

/* a[r] += x . w[r] over the m (<= 64) columns from i of rows p + r * step, x scaled by the
 * row's scale (pre) or the weights multiplied by it (!pre) */
AINLINE VBMI void fp8v1_step(int R, int pre, const fp8_tab *t, const uint8_t *p, int64_t step, const __m512 xv[4],
                             int m, const __m512 scale[G1_R], __m512 a[G1_R]) {
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        __m512 w[4];
        if (pre) dec_fp8x64_raw(t, p + r * step, m, w);
        else dec_fp8x64(t, p + r * step, m, scale[r], w);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            if (16 * q < m) a[r] = _mm512_fmadd_ps(pre ? _mm512_mul_ps(xv[q], scale[r]) : xv[q], w[q], a[r]);
    }
}

/* R rows o + r * rs. The 4 rows are far apart (as gemv1_dense, linear_avx512.c: each of a
 * task's 4 runs of rows is one sequential stream the hardware prefetchers follow, where 4
 * adjacent rows in step ran at ~0.6 of the stream probe), so each row has its own scale
 * band; with pre, x * scale per row (4 multiplies a 64-column step a row, as many as
 * !pre's weights * scale), the same exact products as before. */
AINLINE VBMI void gemv1_fp8v_rows(int R, int pre, const fp8_tab *t, const dsv4_mat *w, const float *x, float *y,
                                  int64_t o, int64_t rs) {
    const int64_t n = w->cols, nsb = (n + 127) / 128, step = rs * n;
    const uint8_t *p = (const uint8_t *)w->w + o * n;
    int64_t band[G1_R];
    __m512 a[G1_R];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        a[r] = _mm512_setzero_ps();
        band[r] = (o + r * rs) / 128 * nsb;
    }
    for (int64_t b = 0; b < nsb; b++) {
        const int64_t i0 = b * 128, i1 = i0 + 128 < n ? i0 + 128 : n;
        __m512 scale[G1_R];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) scale[r] = _mm512_set1_ps(scale_at(w, band[r] + b));
        for (int64_t i = i0; i < i1; i += 64) {
            const int m = i1 - i >= 64 ? 64 : (int)(i1 - i);
            __m512 xv[4];
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                const int mq = m - 16 * q; /* the last chunk's x zero-padded, none past it */
                xv[q] = mq >= 16 ? _mm512_loadu_ps(x + i + 16 * q)
                                 : _mm512_maskz_loadu_ps(mq > 0 ? mask16(mq) : 0, x + i + 16 * q);
            }
            pf_runs_line(p + i, step, R, GEMV_PF_FP8 / G1_R);
            if (m == 64) fp8v1_step(R, pre, t, p + i, step, xv, 64, scale, a);
            else fp8v1_step(R, pre, t, p + i, step, xv, m, scale, a);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) y[o + r * rs] = hsum16(a[r]);
}

AINLINE VBMI void gemv1_fp8v_pre(int pre, const fp8_tab *t, const dsv4_mat *w, const float *x, float *y, int64_t o0,
                                 int64_t o1) {
    const int64_t n = w->cols, q = (o1 - o0) / G1_R; /* rows per run */
    pf_runs_start((const uint8_t *)w->w + o0 * n, q * n, G1_R, q * n, GEMV_PF_FP8 / G1_R);
    for (int64_t k = 0; k < q; k++) gemv1_fp8v_rows(G1_R, pre, t, w, x, y, o0 + k, q);
    for (int64_t o = o0 + G1_R * q; o < o1; o++) gemv1_fp8v_rows(1, pre, t, w, x, y, o, 0);
}

/* ---- short rows: x * scale computed once per task -------------------------------------------
 * With rows of at most G1_XS_COLS columns (wq_b's 256) a row is a few 64-column steps, and
 * setting up each row's scales per 128-column block costs as much as the x * scale
 * multiplies themselves. Such a task computes x * scale of each scale band it spans once,
 * into a stack buffer, and the FMAs take their x operand from there: the same products of
 * the same two floats, so the same bits. Not for longer rows: the buffer is then 4-8 KB a
 * band, and re-reading it for every row lost to the weight stream in L1 (bench_linear
 * --decode cold, 2 threads: wo_b's 2048 columns 1.27x the time, wkv's 1024 1.03x; w2's 512
 * 0.92x, wq_b's 256 0.86x: BENCHMARKS.md, session 13 b1). */

#define G1_XS_COLS 512 /* the longest rows that take it */
#define G1_XS_MAX 2048  /* floats of x * scale a task keeps, 8 KB of stack: a pool task of
                         * LIN_GEMV_NB = 256 rows spans at most 3 bands; dsv4_linear_here's
                         * one task of a whole tall matrix may not fit */

/* ---- AMD cores: e4m3 by bit shifts against the same buffer, for rows of any width ------------
 * The table decode's vpermi2b and the per-row x * scale multiplies compete with the FMAs
 * for the same two pipes on Zen 5 (an FMA next to a vpermi2b, a vpternlogd or a merge-masked
 * op: ~2.2 of them a cycle together; next to a shift or an and: ~4.3), and that bounds the
 * one-row loop (~7 cycles per 64 weights a row from L1, about as many from DRAM).
 * linear_avx2.c's prescaled decode is 3 cheap ops per 16 weights: sign-extend, shift the 7
 * magnitude bits to 20..26, keep the sign: exactly e4m3 * 2^-120 (e4m3 subnormals land on
 * F32 subnormals). Against x * 2^120 * scale = x * 2^(b - 7) in the buffer (zero or a
 * normal float, else the task takes the paths above) the FMA's exact product is x * (e4m3
 * * scale), the table path's: same bits. Without the multiplies the buffer pays at every
 * width here (session 13's table-decode form lost at 1024-2048 columns): from DRAM, 2
 * threads, 1.16-1.21x the loop above at 1024-2048 columns, 1.06x the table buffer at 256.
 * The NaN codes 0x7F/0xFF decode finite, so a byte scan of each row block (b + b is 0xFE
 * for them only, as linear_avx512.h's) sends a block that holds one to the table path,
 * which carries the NaN. Only where F32 subnormal FMA operands cost nothing: AMD cores
 * (Intel cores take a microcode assist per such FMA, linear_avx2.c; Zen 5 ran all-subnormal
 * weights as fast as random ones). BENCHMARKS.md, session 18 fp8x. */

#ifndef G1_XB_MAX
#define G1_XB_MAX 8192 /* floats of x * 2^(b - 7) a piece of a task keeps, 32 KB of stack: one
                        * band of the checkpoint's widest FP8 rows (wo_b, 8192 columns), 2 of
                        * 4096 (wq_a, wkv, the shared expert), 4 of 2048 (a pool task's 3) */
#endif

/* 64 e4m3 bytes at p (m < 64: the first m, zero past them) -> w[q] = e4m3 * 2^-120 of
 * columns 16q .. 16q + 15; with scan, the bytes folded into *scan (fp8_nan_scan) */
AINLINE void dec_fp8x64_bits(const uint8_t *p, int m, int scan_on, __m512i *scan, __m512 w[4]) {
    const __m512i keep = _mm512_set1_epi32((int)0x87FFFFFF); /* the sign, exponent bits 23..26, mantissa */
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        const int mq = m - 16 * q;
        if (mq <= 0) { /* past the row: not read by the FMAs */
            w[q] = _mm512_setzero_ps();
            continue;
        }
        const __m128i b = mq >= 16 ? _mm_loadu_si128((const __m128i *)(p + 16 * q))
                                   : _mm_maskz_loadu_epi8((__mmask16)((1u << mq) - 1u), p + 16 * q);
        w[q] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(_mm512_cvtepi8_epi32(b), 20), keep));
    }
    if (scan_on) *scan = fp8_nan_scan(*scan, p, m);
}

/* a[r] += xs[r] . w[r] over the m (<= 64) columns from i of rows p + r * step, the weights
 * by the tables (bits = 0, xs = x * scale) or the bit decode (bits = 1, xs = x * 2^(b - 7);
 * bits = 2: the same without the NaN scan, for a matrix that holds no NaN code) */
AINLINE VBMI void fp8v1_step_xs(int R, int bits, const fp8_tab *t, const uint8_t *p, int64_t step,
                                const float *const xs[G1_R], int64_t i, int m, __m512 a[G1_R], __m512i *scan) {
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        __m512 w[4];
        if (bits) dec_fp8x64_bits(p + r * step, m, bits == 1, scan, w);
        else dec_fp8x64_raw(t, p + r * step, m, w);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            if (16 * q < m) a[r] = _mm512_fmadd_ps(_mm512_load_ps(xs[r] + i + 16 * q), w[q], a[r]);
    }
}

/* a row block that holds a NaN code, again by the table path (kept out of the hot loop) */
static VBMI __attribute__((noinline)) void gemv1_fp8v_nan_rows(int R, const fp8_tab *t, const dsv4_mat *w,
                                                               const float *x, float *y, int64_t o, int64_t rs) {
    if (R == G1_R) gemv1_fp8v_rows(G1_R, 0, t, w, x, y, o, rs);
    else gemv1_fp8v_rows(1, 0, t, w, x, y, o, 0);
}

/* R rows o + r * rs (far apart, as gemv1_fp8v_rows), xs: (bands, ld) the task's bands from
 * band0, zero past the row's cols; the same chunks, in the same order, as there */
AINLINE VBMI void gemv1_fp8v_rows_xs(int R, int bits, const fp8_tab *t, const dsv4_mat *w, const float *x,
                                     const float *xs, int64_t band0, int64_t ld, float *y, int64_t o, int64_t rs) {
    const int64_t n = w->cols, step = rs * n;
    const uint8_t *p = (const uint8_t *)w->w + o * n;
    const float *xr[G1_R];
    __m512 a[G1_R];
    __m512i scan = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        a[r] = _mm512_setzero_ps();
        xr[r] = xs + ((o + r * rs) / 128 - band0) * ld;
    }
    for (int64_t i = 0; i < n; i += 64) {
        const int m = n - i >= 64 ? 64 : (int)(n - i);
        pf_runs_line(p + i, step, R, GEMV_PF_FP8 / G1_R);
        if (m == 64) fp8v1_step_xs(R, bits, t, p + i, step, xr, i, 64, a, &scan);
        else fp8v1_step_xs(R, bits, t, p + i, step, xr, i, m, a, &scan);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) y[o + r * rs] = hsum16(a[r]);
    if (bits == 1 && fp8_nan_seen(scan)) gemv1_fp8v_nan_rows(R, t, w, x, y, o, rs);
}

/* xs (nb, ld) = x * f * scale of bands band0 .. band0 + nb - 1, x zero-padded as the
 * per-step path loads it; nonzero when some nonzero x gives a product that is not a normal
 * float (inf or NaN included) */
DSV4_HOT_AT(gemv1_fp8v_fill, 0xe60)
static VBMI __mmask16 gemv1_fp8v_fill(const dsv4_mat *w, const float *x, int64_t band0, int64_t nb, int64_t ld,
                                      float f, float *xs) {
    const int64_t n = w->cols, nsb = (n + 127) / 128;
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    __mmask16 bad = 0;
    for (int64_t bi = 0; bi < nb; bi++)
        for (int64_t b = 0; b < nsb; b++) {
            const __m512 s = _mm512_set1_ps(scale_at(w, (band0 + bi) * nsb + b) * f); /* exact: powers of two */
            const int64_t i1 = (b + 1) * 128 < n ? (b + 1) * 128 : n;
            for (int64_t i = b * 128; i < i1; i += 16) {
                const __m512 xv = i1 - i >= 16 ? _mm512_loadu_ps(x + i) : _mm512_maskz_loadu_ps(mask16((int)(i1 - i)), x + i);
                const __m512 v = _mm512_mul_ps(xv, s);
                _mm512_store_ps(xs + bi * ld + i, v);
                const __m512i av = _mm512_and_si512(_mm512_castps_si512(v), absm);
                const __mmask16 nz = _mm512_test_epi32_mask(_mm512_castps_si512(xv), absm);
                bad |= _mm512_cmpge_epu32_mask(av, _mm512_set1_epi32(0x7f800000)) |
                       _mm512_mask_cmplt_epu32_mask(nz, av, _mm512_set1_epi32(0x00800000));
            }
        }
    return bad;
}

/* 0 when the rows are too long (tables), the task's bands do not fit, or (bits) some x *
 * 2^(b - 7) is not zero or a normal float (nothing written to y) */
AINLINE VBMI int gemv1_fp8v_xs(int bits, const fp8_tab *t, const dsv4_mat *w, const float *x, float *y, int64_t o0,
                               int64_t o1) {
    const int64_t n = w->cols, ld = (n + 15) & ~(int64_t)15;
    const int64_t band0 = o0 / 128, nb = (o1 - 1) / 128 - band0 + 1;
    if (bits ? nb * ld > G1_XB_MAX : n > G1_XS_COLS || nb * ld > G1_XS_MAX) return 0;
    _Alignas(64) float xs[G1_XB_MAX]; /* (nb, ld) */
    /* the tables' x * scale is exact by dsv4_lin_call.fp8_prescale; 2^(b - 7) is inf past
     * b = 134, and every product then fails the test */
    if (gemv1_fp8v_fill(w, x, band0, nb, ld, bits ? 0x1p120f : 1.0f, xs) && bits) return 0;
    const int64_t q = (o1 - o0) / G1_R; /* rows per run */
    pf_runs_start((const uint8_t *)w->w + o0 * n, q * n, G1_R, q * n, GEMV_PF_FP8 / G1_R);
    for (int64_t k = 0; k < q; k++) gemv1_fp8v_rows_xs(G1_R, bits, t, w, x, xs, band0, ld, y, o0 + k, q);
    for (int64_t o = o0 + G1_R * q; o < o1; o++) gemv1_fp8v_rows_xs(1, bits, t, w, x, xs, band0, ld, y, o, 0);
    return 1;
}

/* The one-row paths each their own function, out of gemv1_fp8v: inlined into it, the bit
 * decode's loop (the AMD cores' path), the tables' x * scale loop and the per-row prescale
 * shared one ~24 KB function and its frame, and a change to one moved the others (as
 * gemv_fp4's activation-row cases did, linear_avx512.c). Same code, same bits. */
DSV4_HOT_AT(gemv1_fp8v_xs_bits, 0x270)
static VBMI __attribute__((noinline)) int gemv1_fp8v_xs_bits(const fp8_tab *t, const dsv4_mat *w, const float *x,
                                                             float *y, int64_t o0, int64_t o1) {
    /* no NaN scan where the loader found no NaN code in the matrix (dsv4_mat.fp8_no_nan):
     * one op in 9 of the loop, on the FMA's busy pipe (BENCHMARKS.md, session 48 b1p) */
    if (w->fp8_no_nan) return gemv1_fp8v_xs(2, t, w, x, y, o0, o1);
    return gemv1_fp8v_xs(1, t, w, x, y, o0, o1);
}
DSV4_HOT_AT(gemv1_fp8v_xs_tab, 0x90)
static VBMI __attribute__((noinline)) int gemv1_fp8v_xs_tab(const fp8_tab *t, const dsv4_mat *w, const float *x,
                                                            float *y, int64_t o0, int64_t o1) {
    return gemv1_fp8v_xs(0, t, w, x, y, o0, o1);
}
static VBMI __attribute__((noinline)) void gemv1_fp8v_pre1(const fp8_tab *t, const dsv4_mat *w, const float *x,
                                                           float *y, int64_t o0, int64_t o1) {
    gemv1_fp8v_pre(1, t, w, x, y, o0, o1);
}

/* the bit decode (bits; else the tables' x * scale buffer, rows up to G1_XS_COLS) of a task
 * [o0, o1): one piece when its bands' buffer fits (a pool task at up
 * to 2048 columns), else (the checkpoint's 4096- and 8192-column rows; dsv4_linear_here's
 * whole-matrix tasks) pieces of whole scale bands that fit, each one's 4 far runs over its own
 * rows; a piece whose x * 2^(b - 7) fails takes the table paths. Every output is one row's dot product in the same order
 * whichever piece computes it: the same bits. 0 when not one band fits (rows past G1_XB_MAX
 * columns: the table paths for the task). */
AINLINE VBMI int gemv1_fp8v_bits_pieces(int bits, const fp8_tab *t, const dsv4_mat *w, const float *x, float *y,
                                        int64_t o0, int64_t o1) {
    const int64_t ld = (w->cols + 15) & ~(int64_t)15;
    const int64_t nbmax = bits ? G1_XB_MAX / ld : w->cols > G1_XS_COLS ? 0 : G1_XS_MAX / ld; /* bands a piece */
    if (nbmax == 0) return 0;
    for (int64_t s0 = o0; s0 < o1;) {
        const int64_t end = (s0 / 128 + nbmax) * 128, s1 = end < o1 ? end : o1; /* s0, s1 multiples of 4 but o1 */
        if (!(bits && gemv1_fp8v_xs_bits(t, w, x, y, s0, s1)) && !gemv1_fp8v_xs_tab(t, w, x, y, s0, s1))
            gemv1_fp8v_pre1(t, w, x, y, s0, s1);
        s0 = s1;
    }
    return 1;
}

DSV4_HOT_AT(gemv1_fp8v, 0xeb0)
static VBMI void gemv1_fp8v(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, float *y, int64_t o0,
                            int64_t o1) {
    const fp8_tab t = fp8_tab_load(c->tab);
    if (c->fp8_prescale) {
        /* the table path in pieces too (Intel): one-row tasks of up to LIN_GEMV1_TASK_BYTES
         * (wq_b's 2048 rows, 16 bands) outgrow its 8 KB buffer */
        if (gemv1_fp8v_bits_pieces(c->tab->subnormal_fma_fast, &t, w, x, y, o0, o1)) return;
        gemv1_fp8v_pre1(&t, w, x, y, o0, o1);
    } else {
        gemv1_fp8v_pre(0, &t, w, x, y, o0, o1);
    }
}

/* ---- 2..8 activation rows on AMD cores: the bit decode, 4 far runs, x * 2^(b - 7) per row ---
 * The generic kernel above (gemv_fp8v) at 2..7 rows decodes by the tables and multiplies
 * every weight by its scale (the FMA pipes' work on Zen 5), keeps its [R][NX] accumulators
 * where GCC puts them (the stack, unless unrolled) and reads R adjacent rows in step (which the
 * hardware prefetchers follow at ~0.6 of the stream): wo_b 1024 x 2048 at 4 rows 2.7x the
 * one-row time, 5..7 rows slower than 8 through small-M. Here, as the one-row bit decode
 * (gemv1_fp8v_rows_xs): each weight row is e4m3 * 2^-120 by a sign-extend, a shift and an and,
 * decoded once for all activation rows, against each row's x * 2^(b - 7) kept per scale band
 * in a stack buffer (zero or a normal float, else the piece takes gemv_fp8v); 4 far-apart runs
 * a block (one stream each); every accumulator a named register (unrolled), the activation
 * rows in groups of at most 4 (16 accumulators), a group a pass over the block's columns (the
 * block's 4 rows, 4 x cols bytes, stay in L1 for the next group's pass). Each accumulator adds
 * the same chunks in the same order and hsum16's tree: the one-row kernel's bits, row by row
 * (FMA(x * 2^(b - 7), e4m3 * 2^-120) rounds the exact product x * (e4m3 * scale), as
 * FMA(x, e4m3 * scale) does). A row block with an NaN code is redone by gemv_fp8v's rows.
 * The 4 runs are cut per scale band (4 runs of 32 rows of a 128-row band), so a block's 4 rows
 * share x * 2^(b - 7) and each x chunk is loaded once for their 4 FMAs: with one run per
 * quarter of the task (rows of 2 bands a block) every FMA took its own x load and the loop ran
 * out of load ports (wo_b at 4 rows 83 us against 69, cold). Only where the driver routes it
 * (dsv4_lin_kernels.fp8_few_gemv_cols: small-M's bit decode won at narrower rows). */

#define GN_XB_MAX 16384 /* floats of x * 2^(b - 7) a piece keeps, 64 KB of stack: (NX, nb, ld) */

/* a[r][s] += xs + s * xstep . w[r], r < R, s < G, over the m (<= 64) columns from i: chunk by
 * chunk, the R rows' 16 weights decoded, then each x chunk loaded once for the R rows' FMAs
 * (the R rows share a scale band, so x * 2^(b - 7) is theirs) */
AINLINE VBMI void fp8n_step(int R, int G, const uint8_t *p, int64_t step, const float *xs, int64_t xstep, int64_t i,
                            int m, __m512 a[G1_R][4], __m512i *scan) {
    const __m512i keep = _mm512_set1_epi32((int)0x87FFFFFF); /* as dec_fp8x64_bits */
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        const int mq = m - 16 * q;
        if (mq <= 0) break;
        __m512 w[G1_R];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *pr = p + r * step + 16 * q;
            const __m128i b = mq >= 16 ? _mm_loadu_si128((const __m128i *)pr)
                                       : _mm_maskz_loadu_epi8((__mmask16)((1u << mq) - 1u), pr);
            w[r] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(_mm512_cvtepi8_epi32(b), 20), keep));
        }
#pragma GCC unroll 4
        for (int s = 0; s < G; s++) {
            __m512 xv = _mm512_load_ps(xs + s * xstep + i + 16 * q);
            if (R > 1) __asm__("" : "+v"(xv)); /* one load for the R FMAs (smb_rows) */
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) a[r][s] = _mm512_fmadd_ps(xv, w[r], a[r][s]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) *scan = fp8_nan_scan(*scan, p + r * step, m);
}

/* rows o + r * rs (r < R, one scale band) against activation rows s0 .. s0 + G - 1 of xs
 * ((NX, nb, ld) from band0, row s at xs + s * nb * ld); pf: this pass prefetches the runs */
AINLINE VBMI void gemvn_fp8v_pass(int R, int G, int pf, const dsv4_mat *w, const float *xs, int64_t band0,
                                  int64_t nb, int64_t ld, int s0, float *y, int64_t o, int64_t rs, __m512i *scan) {
    const int64_t n = w->cols, step = rs * n, xstep = nb * ld, rows = w->rows;
    const uint8_t *p = (const uint8_t *)w->w + o * n;
    const float *xr = xs + s0 * xstep + (o / 128 - band0) * ld;
    __m512 a[G1_R][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int s = 0; s < G; s++) a[r][s] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 64) {
        const int m = n - i >= 64 ? 64 : (int)(n - i);
        if (pf) pf_runs_line(p + i, step, R, GEMV_PF_FP8 / G1_R);
        if (m == 64) fp8n_step(R, G, p + i, step, xr, xstep, i, 64, a, scan);
        else fp8n_step(R, G, p + i, step, xr, xstep, i, m, a, scan);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int s = 0; s < G; s++) y[(int64_t)(s0 + s) * rows + o + r * rs] = hsum16(a[r][s]);
}

/* a row block that holds an NaN code, again by the table path (kept out of the hot loop) */
static VBMI __attribute__((noinline)) void gemvn_fp8v_nan_rows(int R, int NX, const fp8_tab *t, const dsv4_mat *w,
                                                               const float *x, float *y, int64_t o, int64_t rs) {
    for (int r = 0; r < R; r++) {
        switch (NX) {
        case 2: gemv_fp8v_rows(1, 2, t, w, x, y, o + r * rs, &(gemv_pf){0}); break;
        case 3: gemv_fp8v_rows(1, 3, t, w, x, y, o + r * rs, &(gemv_pf){0}); break;
        case 4: gemv_fp8v_rows(1, 4, t, w, x, y, o + r * rs, &(gemv_pf){0}); break;
        case 5: gemv_fp8v_rows(1, 5, t, w, x, y, o + r * rs, &(gemv_pf){0}); break;
        case 6: gemv_fp8v_rows(1, 6, t, w, x, y, o + r * rs, &(gemv_pf){0}); break;
        case 7: gemv_fp8v_rows(1, 7, t, w, x, y, o + r * rs, &(gemv_pf){0}); break;
        default: gemv_fp8v_rows(1, 8, t, w, x, y, o + r * rs, &(gemv_pf){0}); break;
        }
    }
}

/* activation rows in groups of at most 4, as even as they go (5 = 3 + 2, 7 = 4 + 3) */
#define GN_G0(NX) ((NX) <= 4 ? (NX) : ((NX) + 1) / 2)

/* rows o + r * rs, r < R, all NX activation rows, group by group */
AINLINE VBMI void gemvn_fp8v_rows(int R, int NX, const fp8_tab *t, const dsv4_mat *w, const float *x,
                                  const float *xs, int64_t band0, int64_t nb, int64_t ld, float *y, int64_t o,
                                  int64_t rs) {
    const int G0 = GN_G0(NX), G1 = NX - G0;
    __m512i scan = _mm512_setzero_si512();
    gemvn_fp8v_pass(R, G0, 1, w, xs, band0, nb, ld, 0, y, o, rs, &scan);
    if (G1 > 0) {
        __m512i scan1 = _mm512_setzero_si512(); /* the codes were scanned in the first pass */
        gemvn_fp8v_pass(R, G1, 0, w, xs, band0, nb, ld, G0, y, o, rs, &scan1);
    }
    if (fp8_nan_seen(scan)) gemvn_fp8v_nan_rows(R, NX, t, w, x, y, o, rs);
}

/* one piece [o0, o1) of whole bands whose (NX, nb, ld) buffer fits; 0 when some x * 2^(b - 7)
 * is not zero or a normal float (nothing written to y) */
AINLINE VBMI int gemvn_fp8v_piece(int NX, const fp8_tab *t, const dsv4_mat *w, const float *x, float *y, int64_t o0,
                                  int64_t o1) {
    const int64_t n = w->cols, ld = (n + 15) & ~(int64_t)15;
    const int64_t band0 = o0 / 128, nb = (o1 - 1) / 128 - band0 + 1;
    _Alignas(64) float xs[GN_XB_MAX]; /* (NX, nb, ld) */
    for (int s = 0; s < NX; s++)
        if (gemv1_fp8v_fill(w, x + s * n, band0, nb, ld, 0x1p120f, xs + s * nb * ld)) return 0;
    /* band by band, each as 4 far runs: a block's 4 rows share the band's x * 2^(b - 7) */
    for (int64_t b0 = o0; b0 < o1;) {
        const int64_t b1 = (b0 / 128 + 1) * 128 < o1 ? (b0 / 128 + 1) * 128 : o1;
        const int64_t q = (b1 - b0) / G1_R; /* rows per run */
        pf_runs_start((const uint8_t *)w->w + b0 * n, q * n, G1_R, q * n, GEMV_PF_FP8 / G1_R);
        for (int64_t k = 0; k < q; k++) gemvn_fp8v_rows(G1_R, NX, t, w, x, xs, band0, nb, ld, y, b0 + k, q);
        for (int64_t o = b0 + G1_R * q; o < b1; o++) gemvn_fp8v_rows(1, NX, t, w, x, xs, band0, nb, ld, y, o, 0);
        b0 = b1;
    }
    return 1;
}

/* a task [o0, o1) at NX (2..8) rows in pieces of whole bands (the last may end inside one);
 * 0 when not one band's buffer fits (then gemv_fp8v for the task) */
AINLINE VBMI int gemvn_fp8v(int NX, const fp8_tab *t, const dsv4_mat *w, const float *x, float *y, int64_t o0,
                            int64_t o1) {
    const int64_t ld = (w->cols + 15) & ~(int64_t)15, nbmax = GN_XB_MAX / (NX * ld); /* bands a piece */
    if (nbmax == 0) return 0;
    for (int64_t s0 = o0; s0 < o1;) {
        const int64_t end = (s0 / 128 + nbmax) * 128, s1 = end < o1 ? end : o1;
        if (!gemvn_fp8v_piece(NX, t, w, x, y, s0, s1)) gemv_fp8v_nx(NX, t, w, x, y, s0, s1);
        s0 = s1;
    }
    return 1;
}

/* each row count its own function (as gemv_fp4_n*, linear_avx512.c) */
#define GEMVN_FP8V_FN(NX)                                                                                        \
    static VBMI __attribute__((noinline)) int gemvn_fp8v_n##NX(const fp8_tab *t, const dsv4_mat *w,            \
                                                                const float *x, float *y, int64_t o0, int64_t o1) { \
        return gemvn_fp8v(NX, t, w, x, y, o0, o1);                                                               \
    }
GEMVN_FP8V_FN(2)
GEMVN_FP8V_FN(3)
GEMVN_FP8V_FN(4)
GEMVN_FP8V_FN(5)
GEMVN_FP8V_FN(6)
GEMVN_FP8V_FN(7)
GEMVN_FP8V_FN(8)

/* 0 when the call is not the bit decode's (Intel, F32 scales, rows too long for one band) */
static VBMI int gemvn_fp8v_bits(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y,
                                int64_t o0, int64_t o1) {
    if (!c->tab->subnormal_fma_fast || w->scale_is_f32 || nx < 2 || nx > 8) return 0;
    const fp8_tab t = fp8_tab_load(c->tab);
    switch (nx) {
    case 2: return gemvn_fp8v_n2(&t, w, x, y, o0, o1);
    case 3: return gemvn_fp8v_n3(&t, w, x, y, o0, o1);
    case 4: return gemvn_fp8v_n4(&t, w, x, y, o0, o1);
    case 5: return gemvn_fp8v_n5(&t, w, x, y, o0, o1);
    case 6: return gemvn_fp8v_n6(&t, w, x, y, o0, o1);
    case 7: return gemvn_fp8v_n7(&t, w, x, y, o0, o1);
    default: return gemvn_fp8v_n8(&t, w, x, y, o0, o1);
    }
}

/* dsv4_lin_call.fp8_prescale at level avx512vbmi: one activation row (the batch-1 GEMV),
 * ue8m0 scales, every block's scale byte <= 246 (so e4m3 * scale is finite, and exact for
 * every code: the smallest, 2^-9 * 2^-127, is an F32 subnormal with one significant bit),
 * and x * scale zero or a normal float for every x and scale (x * 2^e is then exact).
 * Scans the scale grid (rows/128 x cols/128 bytes) and x once per call. */
static int fp8v_prescale(const dsv4_mat *w, const float *x, int nx) {
    if (nx != 1 || w->fmt != DSV4_WF_FP8 || w->scale_is_f32) return 0;
    int bmin, bmax;
    dsv4_lin_ue8m0_range(w, &bmin, &bmax);
    if (bmax > 246) return 0;
    /* |x| as integers: the largest, and the smallest nonzero (0 - 1 wraps to the top) */
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), one = _mm512_set1_epi32(1);
    __m512i vmax = _mm512_setzero_si512(), vmin = _mm512_set1_epi32(-1);
    for (int64_t i = 0; i < w->cols; i += 16) {
        const __mmask16 k = w->cols - i >= 16 ? (__mmask16)0xFFFF : mask16((int)(w->cols - i));
        const __m512i a = _mm512_and_si512(_mm512_maskz_loadu_epi32(k, x + i), absm);
        vmax = _mm512_mask_max_epu32(vmax, k, vmax, a);
        vmin = _mm512_mask_min_epu32(vmin, k, vmin, _mm512_sub_epi32(a, one));
    }
    const uint32_t amax = (uint32_t)_mm512_reduce_max_epu32(vmax), amin1 = (uint32_t)_mm512_reduce_min_epu32(vmin);
    if (amax >= 0x7f800000u) return 0; /* inf or NaN */
    if (amax == 0) return 1;           /* all zeros */
    const double xmin = dsv4_bits_to_f32(amin1 + 1), xmax = dsv4_bits_to_f32(amax);
    /* the smallest nonzero product a normal float, the largest below 2^127 */
    return ldexp(xmin, bmin - 127) >= 0x1p-126 && ldexp(xmax, bmax - 127) < 0x1p127;
}

DSV4_HOT_AT(gemv_avx512vbmi, 0x410)
static void gemv_avx512vbmi(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                            int64_t o1) {
    if (w->fmt == DSV4_WF_FP8 && nx == 1) gemv1_fp8v(c, w, x, y, o0, o1);
    else if (w->fmt == DSV4_WF_FP8) {
        if (!gemvn_fp8v_bits(c, w, x, nx, y, o0, o1)) gemv_fp8v(c, w, x, nx, y, o0, o1);
    }
    else dsv4_lin_avx512_gemv(c, w, x, nx, y, o0, o1); /* FP4 and FP4L included: see gemv_fp4 (linear_avx512.c) */
}

/* 8 rows a GEMV call, up to 16 in two passes for every format: with the table decode the
 * two FP8 passes beat the tile GEMM at 12 and 16 rows on 5 of the 7 decode shapes
 * (1.1-1.5x; wq_a and wo_b 0.87-0.99x; bench_linear --decode --rows 12,16, BENCHMARKS.md).
 * One pass of 16 rows at one weight row (16 accumulators) ran 0.5-1.25x the GEMM: each x
 * load then feeds a single FMA. */
static const dsv4_lin_kernels avx512vbmi_kernels = {
    GEMV_NX_MAX, 16, 16, gemv_avx512vbmi, dsv4_lin_avx512vbmi_gemm, fp8v_prescale,
    /* small-M from 8 rows for FP8 (FP4 5: SMF_MIN_ROWS), 17 for F16, up to 32 (the GEMM
     * before): against two 8-row GEMV passes on the decode shapes at 16 rows it ran FP8
     * 1.0-2.1x, FP4 1.05-1.8x, the panel path for BF16 0.71-1.35x (the head 0.71); at 8 rows
     * FP8 0.94-1.6x, FP4 1.0-2.2x but the 8192-row head 0.70x; at 32 rows, against the tile
     * GEMM, 1.16-2.6x for all three (bench_linear --decode --rows 4,8,16,32, BENCHMARKS.md);
     * up to 64 rows where x is at most LIN_SMALLM_BIG_X_FLOATS (linear_fast.h). BF16 and F32
     * decode in registers (smallm_bf16 / smallm_f32): in process, 2 threads, cold, against
     * the GEMV, BF16 at 16 rows 0.82-0.93x the time (256..8192 x 1024 and x 4096), at 8 rows
     * 0.84-0.98x, at 4 rows 0.92-0.97x at 1024 columns but 1.07-1.13x at 4096: from 8; F32
     * 0.77-0.93x from 2 rows; at 17-32 rows 0.39-0.71x the tile GEMM's (BENCHMARKS.md,
     * "Session 23, bf16m") */
    {[DSV4_WF_F32] = 2, [DSV4_WF_F16] = 17, [DSV4_WF_BF16] = 8, [DSV4_WF_FP8] = 8, [DSV4_WF_FP4] = SMF_MIN_ROWS,
     [DSV4_WF_FP4L] = SMF_MIN_ROWS /* the lanes layout through the same paths (smallm.c): the same bits */},
    dsv4_lin_avx512vbmi_smallm, 1 /* FP4L: gemv_avx512vbmi hands it to dsv4_lin_avx512_gemv (gemv_fp4l_*) */,
    /* FP8 at 2..7 rows on AMD cores: small-M's bit decode (smallm_fp8_bits) took 0.55-0.85x the
     * time of this GEMV's table kernel (gemv_fp8v) on every decode shape, cold, 2 threads (wo_b
     * 1024 x 2048 at 4 rows 79 against 118-189 us; wkv 512 x 1024 at 4 rows 21 against 31-52),
     * except rows of 2048+ columns at 2..4 rows, where gemvn_fp8v's far runs read the stream
     * faster (wo_b 54 / 60 / 69 us at 2 / 3 / 4 rows against small-M's 67 / 75 / 79; the head's
     * 8192 x 1024 went small-M: it is BF16 in the model). bench_linear --decode --fmt fp8,
     * BENCHMARKS.md session 33 fewm. */
    1, 2048, 4,
    /* BF16 at 8 rows on matrices of 1024+ rows (the LM head): the GEMV's far runs in two
     * groups of 4 against small-M's adjacent rows, in step (timeline, batch 8, odd steps
     * against even) the head's job 0.86x the time (A/A 1.01). Shorter matrices (the router's
     * 256 rows) are cut in tasks too small for far runs and keep small-M (session 33 fewm). */
    1024, 0 /* FP4B (an avx2 layout): planned as GEMM */};

const dsv4_lin_kernels *dsv4_lin_kernels_avx512vbmi(void) { return &avx512vbmi_kernels; }

#else

const dsv4_lin_kernels *dsv4_lin_kernels_avx512vbmi(void) { return 0; }

#endif
