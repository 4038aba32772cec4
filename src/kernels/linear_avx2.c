/* linear_avx2.c — AVX2 + FMA + F16C kernels for dsv4_linear: the GEMV, FP8's prescale check and
 * the level's table (the GEMM: linear_avx2_gemm.c; the decoders and how they decode:
 * linear_avx2.h).
 *
 * Built with -mavx2 -mfma -mf16c (top CMakeLists.txt) and only called after cpu.c has
 * confirmed the CPU and OS support them. Summation order: linear_fast.h.
 */
#include "kernels/linear_avx2.h"

#include <assert.h>

#ifdef DSV4_LIN_AVX2

/* ---- GEMV: 1..4 activation rows (NX), R weight rows at a time, weights decoded in
 * registers and used for every activation row. x: (NX, cols), y: (NX, rows). R and NX are
 * constants after inlining; R * NX <= 8 accumulators keeps everything in registers. ---- */

/* weight rows per step for NX activation rows (8 rows for NX 1 measured 10..40% slower on
 * FP8 and FP4 decode shapes) */
#define GEMV_R(NX) ((NX) <= 2 ? 4 : 2)
/* the one-row far-run paths (gemv1_fp8, gemv1_dense); 0 builds the adjacent rows instead
 * (gemv_fp8_rows, gemv_dense_rows: the same bits), for A/B builds */
#ifndef DSV4_AVX2_G1_FP8
#define DSV4_AVX2_G1_FP8 1
#endif
#ifndef DSV4_AVX2_G1_DENSE
#define DSV4_AVX2_G1_DENSE 1
#endif

AINLINE void gemv_dense_rows(int fmt, int R, int NX, const dsv4_mat *w, const float *x, float *y,
                             int64_t o, const gemv_pf *pf) {
    const int64_t n = w->cols, nf = n & ~(int64_t)7, rows = w->rows;
    const int tail = (int)(n - nf);
    const int esz = fmt == DSV4_WF_F32 ? 4 : 2;
    const char *p[4];
    __m256 a[4][4];
    for (int r = 0; r < R; r++) {
        p[r] = (const char *)w->w + (o + r) * n * (int64_t)esz;
        for (int s = 0; s < NX; s++) a[r][s] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < nf; i += 8) {
        pf_step(pf, p[0], R * i * esz, R * 8 * esz);
        __m256 xv[4];
        for (int s = 0; s < NX; s++) xv[s] = _mm256_loadu_ps(x + s * n + i);
        for (int r = 0; r < R; r++) {
            const __m256 wv = dec_dense(fmt, p[r], i);
            for (int s = 0; s < NX; s++) a[r][s] = _mm256_fmadd_ps(xv[s], wv, a[r][s]);
        }
    }
    if (tail) {
        const __m256i m = mask_first(tail);
        __m256 xv[4];
        for (int s = 0; s < NX; s++) xv[s] = _mm256_maskload_ps(x + s * n + nf, m);
        for (int r = 0; r < R; r++) {
            const __m256 wv = dec_dense_tail(fmt, p[r], nf, tail);
            for (int s = 0; s < NX; s++) a[r][s] = _mm256_fmadd_ps(xv[s], wv, a[r][s]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int s = 0; s < NX; s++) y[s * rows + o + r] = hsum8(a[r][s]);
}

AINLINE void gemv_dense_nx(int fmt, int NX, const dsv4_mat *w, const float *x, float *y, int64_t o0,
                           int64_t o1) {
    const int R = GEMV_R(NX);
    const int64_t rb = w->cols * (fmt == DSV4_WF_F32 ? 4 : 2); /* bytes per row */
    const gemv_pf pf =
        pf_start((const char *)w->w + o0 * rb, (const char *)w->w + o1 * rb, GEMV_PF_DENSE);
    int64_t o = o0;
    for (; o + R <= o1; o += R) gemv_dense_rows(fmt, R, NX, w, x, y, o, &pf);
    for (; o < o1; o++) gemv_dense_rows(fmt, 1, NX, w, x, y, o, &pf);
}

/* ---- one activation row (batch-1 decode), dense formats: 4 far runs ----
 * A task's rows [o0, o1) are cut into G1_DENSE_R runs of q rows and block k takes row k of each
 * run, so each run is read front to back as one sequential stream (4 streams a task), as level
 * avx512's gemv1_dense does (linear_avx512.c). gemv_dense_rows' 4 adjacent rows in step (4
 * streams one row apart, each 2 KB long for the LM head's rows) ran the head at 0.6-0.8 of the
 * stream probe here (Zen 3, BENCHMARKS.md session 50 a2b1). Which rows share a block changes no
 * result: each row has its own accumulator, its chunks in ascending order and hsum8's tree. */
#define G1_DENSE_R 4

/* rows o + r * rs, r < R (rs 0 when R is 1); each row's stream prefetched dist bytes ahead */
AINLINE void gemv1_dense_rows(int fmt, int R, const dsv4_mat *w, const float *x, float *y, int64_t o, int64_t rs,
                              int64_t dist) {
    const int64_t n = w->cols, nf = n & ~(int64_t)7;
    const int esz = fmt == DSV4_WF_F32 ? 4 : 2;
    const int64_t step = rs * n * (int64_t)esz; /* bytes between the R rows */
    const char *p = (const char *)w->w + o * n * (int64_t)esz; /* row r at p + r * step */
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0; /* named: kept in registers */
    for (int64_t i = 0; i < nf; i += 8) {
        if (((i * esz) & 63) == 0) pf_runs_line(p + i * esz, step, R, dist);
        const __m256 xv = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(xv, dec_dense(fmt, p, i), a0);
        if (R > 1) {
            a1 = _mm256_fmadd_ps(xv, dec_dense(fmt, p + step, i), a1);
            a2 = _mm256_fmadd_ps(xv, dec_dense(fmt, p + 2 * step, i), a2);
            a3 = _mm256_fmadd_ps(xv, dec_dense(fmt, p + 3 * step, i), a3);
        }
    }
    if (nf < n) { /* the zero-padded last chunk */
        const int m = (int)(n - nf);
        const __m256 xv = _mm256_maskload_ps(x + nf, mask_first(m));
        a0 = _mm256_fmadd_ps(xv, dec_dense_tail(fmt, p, nf, m), a0);
        if (R > 1) {
            a1 = _mm256_fmadd_ps(xv, dec_dense_tail(fmt, p + step, nf, m), a1);
            a2 = _mm256_fmadd_ps(xv, dec_dense_tail(fmt, p + 2 * step, nf, m), a2);
            a3 = _mm256_fmadd_ps(xv, dec_dense_tail(fmt, p + 3 * step, nf, m), a3);
        }
    }
    y[o] = hsum8(a0);
    if (R > 1) {
        y[o + rs] = hsum8(a1);
        y[o + 2 * rs] = hsum8(a2);
        y[o + 3 * rs] = hsum8(a3);
    }
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

AINLINE void gemv_dense(int fmt, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                        int64_t o1) {
    switch (nx) {
    case 1:
        if (DSV4_AVX2_G1_DENSE) gemv1_dense(fmt, w, x, y, o0, o1);
        else gemv_dense_nx(fmt, 1, w, x, y, o0, o1);
        break;
    case 2:
        gemv_dense_nx(fmt, 2, w, x, y, o0, o1);
        break;
    case 3:
        gemv_dense_nx(fmt, 3, w, x, y, o0, o1);
        break;
    default:
        gemv_dense_nx(fmt, 4, w, x, y, o0, o1);
        break;
    }
}

/* Columns [i0, i1) of one 128-column block for R rows p[0..R) into the accumulators a.
 * PRE: x * 2^120 * scale and weights as e4m3 * 2^-120 (the prescaled path); otherwise
 * weights e4m3 * scale through F16. Both give the same products (see the top of the file). */
AINLINE void fp8_block(int R, int NX, int PRE, const uint8_t *const *p, const float *x, int64_t n,
                       int64_t i0, int64_t i1, float s256f, __m256 a[4][4], const gemv_pf *pf) {
    /* xs: the factor applied to x, ws: to the decoded weights (one of them is 1) */
    const __m256 s256 = _mm256_set1_ps(s256f), one = _mm256_set1_ps(1.0f);
    const __m256 xs = PRE ? _mm256_set1_ps(s256f * 0x1p112f) : one, ws = PRE ? one : s256;
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        pf_step(pf, p[0], R * i, R * 16);
        __m256 x0[4], x1[4];
        for (int s = 0; s < NX; s++) {
            x0[s] = _mm256_loadu_ps(x + s * n + i);
            x1[s] = _mm256_loadu_ps(x + s * n + i + 8);
            if (PRE) x0[s] = _mm256_mul_ps(x0[s], xs), x1[s] = _mm256_mul_ps(x1[s], xs);
        }
        for (int r = 0; r < R; r++) {
            __m256 w0, w1;
            if (PRE) {
                w0 = fp8_to_f32x8_2m120(p[r] + i);
                w1 = fp8_to_f32x8_2m120(p[r] + i + 8);
            } else {
                dec_fp8x16(p[r] + i, ws, &w0, &w1);
            }
            for (int s = 0; s < NX; s++) {
                a[r][s] = _mm256_fmadd_ps(x0[s], w0, a[r][s]);
                a[r][s] = _mm256_fmadd_ps(x1[s], w1, a[r][s]);
            }
        }
    }
    if (i < i1) { /* an 8-chunk, then a partial one, or just the partial one */
        pf_step(pf, p[0], R * i, R * (int)(i1 - i));
        for (; i < i1; i += 8) {
            const int m = i1 - i >= 8 ? 8 : (int)(i1 - i);
            __m256 xv[4];
            for (int s = 0; s < NX; s++) {
                xv[s] = m == 8 ? _mm256_loadu_ps(x + s * n + i)
                               : _mm256_maskload_ps(x + s * n + i, mask_first(m));
                if (PRE) xv[s] = _mm256_mul_ps(xv[s], xs);
            }
            for (int r = 0; r < R; r++) {
                __m256 wv;
                if (PRE) {
                    uint8_t t8[8] = {0};
                    memcpy(t8, p[r] + i, (size_t)m);
                    wv = fp8_to_f32x8_2m120(t8);
                } else {
                    wv = m == 8 ? dec_fp8x8(p[r] + i, ws) : dec_fp8_tail(p[r] + i, m, ws);
                }
                for (int s = 0; s < NX; s++) a[r][s] = _mm256_fmadd_ps(xv[s], wv, a[r][s]);
            }
        }
    }
}

/* R rows o .. o+R-1, all in one 128-row scale band (o % R == 0). PRE (a constant after
 * inlining): multiply x by 2^120 * scale once per chunk for all R rows and decode the
 * weights as e4m3 * 2^-120 (see the top of the file); allowed when
 * dsv4_lin_call.fp8_prescale says it is exact. Where sub_slow is set (Intel cores: not
 * dsv4_lin_tables.subnormal_fma_fast), not for a block holding an e4m3 subnormal code: as an
 * F32 subnormal it would cost a microcode assist per FMA (random FP8 bytes, 6% such codes,
 * ran 100x slower on a Sapphire-Rapids-class Xeon); that block takes the F16 path, same bits.
 * AMD cores take such blocks at full speed, so there every block takes PRE (on Zen 3 the F16
 * path's vpmovsxbw + vextracti128 + 2 vcvtph2ps + 2 vmulps a 16 weights ran the bench's random
 * bytes, a subnormal code in nearly every block, at ~6 GB/s a core). scan_nan: 0 when the
 * weights hold no NaN code (dsv4_mat.fp8_no_nan), so the byte scan is skipped unless sub_slow
 * needs it. */
AINLINE void gemv_fp8_rows(int R, int NX, int PRE, int scan_nan, int sub_slow, const dsv4_mat *w,
                           const float *x, float *y, int64_t o, const gemv_pf *pf) {
    const int64_t n = w->cols, nsb = (n + 127) / 128, band = o / 128, rows = w->rows;
    const uint8_t *p[4];
    __m256 a[4][4];
    __m256i nan[4];
    for (int r = 0; r < R; r++) {
        p[r] = (const uint8_t *)w->w + (o + r) * n;
        nan[r] = _mm256_setzero_si256();
        for (int s = 0; s < NX; s++) a[r][s] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nsb; b++) {
        const int64_t i0 = b * 128, i1 = i0 + 128 < n ? i0 + 128 : n;
        const float s256f = scale_at(w, band * nsb + b) * 256.0f;
        if (!isfinite(s256f)) {
            /* huge or NaN scale: 256 * scale would overflow, dequantize exactly instead */
            for (int64_t i = i0; i < i1; i += 8) {
                const int m = i1 - i >= 8 ? 8 : (int)(i1 - i);
                __m256 xv[4];
                for (int s = 0; s < NX; s++)
                    xv[s] = _mm256_maskload_ps(x + s * n + i, mask_first(m));
                for (int r = 0; r < R; r++) {
                    float t[8];
                    dsv4_lin_dequant8(w, o + r, i, t);
                    const __m256 wv = _mm256_loadu_ps(t);
                    for (int s = 0; s < NX; s++) a[r][s] = _mm256_fmadd_ps(xv[s], wv, a[r][s]);
                }
            }
            continue;
        }
        int sub = 0; /* an e4m3 subnormal code in this block of these rows */
        if (scan_nan || (PRE && sub_slow))
            for (int r = 0; r < R; r++)
                nan[r] = fp8_nan_scan(nan[r], p[r] + i0, (int)(i1 - i0), PRE && sub_slow ? &sub : NULL);
        if (PRE && !sub)
            fp8_block(R, NX, 1, p, x, n, i0, i1, s256f, a, pf);
        else
            fp8_block(R, NX, 0, p, x, n, i0, i1, s256f, a, pf);
    }
    for (int r = 0; r < R; r++) {
        const int has_nan = fp8_nan_seen(nan[r]);
        for (int s = 0; s < NX; s++) y[s * rows + o + r] = has_nan ? NAN : hsum8(a[r][s]);
    }
}

/* ---- one activation row (batch-1 decode), FP8 with x prescaled on AMD cores: 4 far runs ----
 * As gemv1_dense: a piece of a task's rows is cut into G1_FP8_R runs and block k takes row k of
 * each run, so each run is one sequential stream. The runs' rows lie in different scale bands,
 * so x * 2^120 * scale of every band the piece spans is computed once into a stack buffer xs
 * (bands, ld) (the same factor and the same rounded products as fp8_block's per-chunk
 * multiply: gemv_fp8_rows' PRE path, which level avx512vbmi's gemv1_fp8v_xs does likewise),
 * and the loop has no multiply left: per 8 weights a load of xs, the decode and one FMA.
 * Every row's lanes take its chunks in ascending order, the last one zero-padded in x and in
 * the weights as fp8_block pads them, then hsum8's tree: gemv_fp8_rows' bits. Only where no
 * block needs the F16 path (subnormal codes on Intel cores) and the weights hold no NaN code
 * (dsv4_mat.fp8_no_nan): otherwise gemv_fp8_rows. */
#define G1_FP8_R 4
#define G1_FP8_XS_MAX 8192 /* floats of xs a piece keeps: 32 KB of stack */

AINLINE void gemv1_fp8_rows(int R, const dsv4_mat *w, const float *xs, int64_t band0, int64_t ld, float *y,
                            int64_t o, int64_t rs) {
    const int64_t n = w->cols, step = rs * n;
    const int64_t dist = GEMV_PF_FP8 / G1_FP8_R; /* per run */
    const uint8_t *p = (const uint8_t *)w->w + o * n; /* row r at p + r * step */
    const float *x0 = xs + (o / 128 - band0) * ld, *x1 = x0, *x2 = x0, *x3 = x0;
    if (R > 1) {
        x1 = xs + ((o + rs) / 128 - band0) * ld;
        x2 = xs + ((o + 2 * rs) / 128 - band0) * ld;
        x3 = xs + ((o + 3 * rs) / 128 - band0) * ld;
    }
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0; /* named: kept in registers */
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if ((i & 63) == 0) pf_runs_line(p + i, step, R, dist);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + i), fp8_to_f32x8_2m120(p + i), a0);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + i + 8), fp8_to_f32x8_2m120(p + i + 8), a0);
        if (R > 1) {
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x1 + i), fp8_to_f32x8_2m120(p + step + i), a1);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x1 + i + 8), fp8_to_f32x8_2m120(p + step + i + 8), a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x2 + i), fp8_to_f32x8_2m120(p + 2 * step + i), a2);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x2 + i + 8), fp8_to_f32x8_2m120(p + 2 * step + i + 8), a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x3 + i), fp8_to_f32x8_2m120(p + 3 * step + i), a3);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x3 + i + 8), fp8_to_f32x8_2m120(p + 3 * step + i + 8), a3);
        }
    }
    for (; i < n; i += 8) { /* an 8-chunk, then a partial one (xs zero-padded to ld) */
        const int m = n - i >= 8 ? 8 : (int)(n - i);
        uint8_t t[4][8] = {{0}};
        for (int r = 0; r < R; r++) memcpy(t[r], p + r * step + i, (size_t)m);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + i), fp8_to_f32x8_2m120(t[0]), a0);
        if (R > 1) {
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x1 + i), fp8_to_f32x8_2m120(t[1]), a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x2 + i), fp8_to_f32x8_2m120(t[2]), a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x3 + i), fp8_to_f32x8_2m120(t[3]), a3);
        }
    }
    y[o] = hsum8(a0);
    if (R > 1) {
        y[o + rs] = hsum8(a1);
        y[o + 2 * rs] = hsum8(a2);
        y[o + 3 * rs] = hsum8(a3);
    }
}

/* rows [o0, o1) in pieces of whole scale bands whose xs fits G1_FP8_XS_MAX; 0 (nothing done)
 * when one band's row does not */
static int gemv1_fp8(const dsv4_mat *w, const float *x, float *y, int64_t o0, int64_t o1) {
    const int64_t n = w->cols, nsb = (n + 127) / 128, ld = (n + 7) & ~(int64_t)7;
    const int64_t bands = G1_FP8_XS_MAX / ld; /* a piece's bands */
    if (bands < 1) return 0;
    /* No overflow guard on s256f * 2^112 here, unlike gemv_fp8_rows: the caller takes this path
     * only where fp8_prescale said yes, which refuses F32 scales and ue8m0 bytes above 134, so
     * the factor stays at or below 2^127. Loosen that rule and this path needs the guard. */
    assert(!w->scale_is_f32);
    _Alignas(32) float xs[G1_FP8_XS_MAX]; /* (bands, ld): x * 2^120 * scale, zero past n */
    for (int64_t lo = o0; lo < o1;) {
        const int64_t band0 = lo / 128, hi0 = (band0 + bands) * 128, hi = hi0 < o1 ? hi0 : o1;
        const int64_t nb = (hi - 1) / 128 - band0 + 1;
        for (int64_t bi = 0; bi < nb; bi++) {
            float *xb = xs + bi * ld;
            for (int64_t b = 0; b < nsb; b++) {
                /* gemv_fp8_rows' factor: s256f * 2^112, s256f = scale * 256 */
                const float s256f = scale_at(w, (band0 + bi) * nsb + b) * 256.0f;
                const __m256 f = _mm256_set1_ps(s256f * 0x1p112f);
                const int64_t i1 = (b + 1) * 128 < n ? (b + 1) * 128 : n;
                for (int64_t i = b * 128; i < i1; i += 8) {
                    const int m = i1 - i >= 8 ? 8 : (int)(i1 - i);
                    const __m256 xv = m == 8 ? _mm256_loadu_ps(x + i) : _mm256_maskload_ps(x + i, mask_first(m));
                    _mm256_store_ps(xb + i, _mm256_mul_ps(xv, f));
                }
            }
        }
        const int64_t q = (hi - lo) / G1_FP8_R; /* rows per run */
        pf_runs_start((const uint8_t *)w->w + lo * n, q * n, G1_FP8_R, q * n, GEMV_PF_FP8 / G1_FP8_R);
        for (int64_t k = 0; k < q; k++) gemv1_fp8_rows(G1_FP8_R, w, xs, band0, ld, y, lo + k, q);
        for (int64_t o = lo + G1_FP8_R * q; o < hi; o++) gemv1_fp8_rows(1, w, xs, band0, ld, y, o, 0);
        lo = hi;
    }
    return 1;
}

AINLINE void gemv_fp8_nx(int NX, int PRE, int scan_nan, int sub_slow, const dsv4_mat *w, const float *x,
                         float *y, int64_t o0, int64_t o1) {
    const int R = GEMV_R(NX);
    const gemv_pf pf = pf_start((const uint8_t *)w->w + o0 * w->cols,
                                (const uint8_t *)w->w + o1 * w->cols, GEMV_PF_FP8);
    int64_t o = o0;
    for (; o + R <= o1 && (o % R) == 0; o += R) gemv_fp8_rows(R, NX, PRE, scan_nan, sub_slow, w, x, y, o, &pf);
    for (; o < o1; o++) gemv_fp8_rows(1, NX, PRE, scan_nan, sub_slow, w, x, y, o, &pf);
}

static void gemv_fp8(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y,
                     int64_t o0, int64_t o1) {
    const int scan_nan = !w->fp8_no_nan, sub_slow = !c->tab->subnormal_fma_fast;
    if (DSV4_AVX2_G1_FP8 && nx == 1 && c->fp8_prescale && !scan_nan && !sub_slow && gemv1_fp8(w, x, y, o0, o1))
        return;
    if (c->fp8_prescale) {
        switch (nx) {
        case 1:
            gemv_fp8_nx(1, 1, scan_nan, sub_slow, w, x, y, o0, o1);
            break;
        case 2:
            gemv_fp8_nx(2, 1, scan_nan, sub_slow, w, x, y, o0, o1);
            break;
        case 3:
            gemv_fp8_nx(3, 1, scan_nan, sub_slow, w, x, y, o0, o1);
            break;
        default:
            gemv_fp8_nx(4, 1, scan_nan, sub_slow, w, x, y, o0, o1);
            break;
        }
    } else {
        switch (nx) {
        case 1:
            gemv_fp8_nx(1, 0, scan_nan, sub_slow, w, x, y, o0, o1);
            break;
        case 2:
            gemv_fp8_nx(2, 0, scan_nan, sub_slow, w, x, y, o0, o1);
            break;
        case 3:
            gemv_fp8_nx(3, 0, scan_nan, sub_slow, w, x, y, o0, o1);
            break;
        default:
            gemv_fp8_nx(4, 0, scan_nan, sub_slow, w, x, y, o0, o1);
            break;
        }
    }
}

/* cols % 32 == 0 (checked by the driver) */
AINLINE void gemv_fp4_rows(int R, int NX, const dsv4_lin_tables *tab, const dsv4_mat *w,
                           const float *x, float *y, int64_t o, const gemv_pf *pf) {
    const int64_t n = w->cols, nsb = n / 32, rows = w->rows;
    const uint8_t *p[4];
    int64_t sb[4];
    __m256 a[4][4];
    for (int r = 0; r < R; r++) {
        p[r] = (const uint8_t *)w->w + (o + r) * (n / 2);
        sb[r] = (o + r) * nsb;
        for (int s = 0; s < NX; s++) a[r][s] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nsb; b++) {
        pf_step(pf, p[0], R * b * 16, R * 16);
        const float *xb = x + b * 32;
        __m256 t[4];
        for (int r = 0; r < R; r++) t[r] = fp4_block_table(tab, w, sb[r] + b);
        for (int q = 0; q < 4; q++) {
            __m256 xv[4];
            for (int s = 0; s < NX; s++) xv[s] = _mm256_loadu_ps(xb + s * n + 8 * q);
            for (int r = 0; r < R; r++) {
                const __m256 wv = dec_fp4(p[r] + b * 16 + 4 * q, t[r]);
                for (int s = 0; s < NX; s++) a[r][s] = _mm256_fmadd_ps(xv[s], wv, a[r][s]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int s = 0; s < NX; s++) y[s * rows + o + r] = hsum8(a[r][s]);
}

/* weight rows a step of the FP4L GEMV: the compiler keeps a line's 2 R halves in registers
 * across its 4 blocks, so R 4 at NX 2 (8 halves, 8 accumulators, 4 tables) spilled: 1.4-1.6x
 * the FP4 GEMV's time, in process */
#define GEMV_R_FP4L(NX) ((NX) == 2 ? 2 : GEMV_R(NX))

/* The same for FP4L: per 128-column line, scale block b = k / 2 of the line covers nibbles 2b
 * and 2b + 1 of both halves, i.e. its columns in natural order are (k = 2b, words 0..7),
 * (2b, 8..15), (2b + 1, 0..7), (2b + 1, 8..15). cols % 128 == 0 (linear_fast.c lin_trivial) */
AINLINE void gemv_fp4l_rows(int R, int NX, const dsv4_lin_tables *tab, const dsv4_mat *w,
                            const float *x, float *y, int64_t o, const gemv_pf *pf) {
    const int64_t n = w->cols, nsb = n / 32, nl = n / 128, rows = w->rows;
    const uint8_t *p[4];
    int64_t sb[4];
    __m256 a[4][4];
    for (int r = 0; r < R; r++) {
        p[r] = (const uint8_t *)w->w + (o + r) * (n / 2);
        sb[r] = (o + r) * nsb;
        for (int s = 0; s < NX; s++) a[r][s] = _mm256_setzero_ps();
    }
    for (int64_t l = 0; l < nl; l++) {
        pf_step(pf, p[0], R * l * 64, R * 64);
        /* unrolled, so that every shift count 4k is an immediate (GCC kept the loop and
         * shifted by a register count, 1.4-1.6x the FP4 GEMV's time at NX 2) */
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) {
            const float *xb = x + l * 128 + b * 32;
            __m256 t[4];
            for (int r = 0; r < R; r++) t[r] = fp4_block_table(tab, w, sb[r] + 4 * l + b);
            for (int q = 0; q < 4; q++) {
                __m256 xv[4];
                for (int s = 0; s < NX; s++) xv[s] = _mm256_loadu_ps(xb + s * n + 8 * q);
                for (int r = 0; r < R; r++) {
                    /* the half loaded again for every 8 weights (an L1 hit, folded into the
                     * shift): the 2 R halves of a line held in registers spilled the
                     * accumulators at NX 2 (1.5-1.7x the FP4 GEMV's time) */
                    const __m256i half =
                        _mm256_loadu_si256((const __m256i *)(p[r] + l * 64 + (q & 1) * 32));
                    const __m256 wv = dec_fp4l(half, 2 * b + (q >> 1), t[r]);
                    for (int s = 0; s < NX; s++) a[r][s] = _mm256_fmadd_ps(xv[s], wv, a[r][s]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int s = 0; s < NX; s++) y[s * rows + o + r] = hsum8(a[r][s]);
}

/* The same for FP4B (the shuffle layout, fp4_shuf.h; ue8m0 scales: the planner sends F32-scaled
 * FP4B to the GEMM): per 64-column chunk, block A then block B; for each, x's 4 vectors once
 * (NX 1: in registers) and for each row the chunk's 32 bytes, the block's tables and 4 FMAs.
 * A half-chunk a row keeps 4 decoded vectors live, where the whole chunk a row (8) spilled at
 * R 4 (micro-benchmark /work/s51/f4b/micro2.c, Zen 3, one thread, hot in L2: 1.69-1.73x the
 * lanes loop's speed; the whole chunk a row 1.11-1.13x). Rows a step: GEMV_R (R 2 at NX 2 and 4
 * took 1.2-1.4x and 1.3-1.4x the time of R 4 and 2: bench_linear --threads 1 --decode --hot,
 * w13). cols % 64 == 0 (lin_trivial). */
AINLINE void gemv_fp4s_rows(int R, int NX, const dsv4_lin_tables *tab, const dsv4_mat *w,
                            const float *x, float *y, int64_t o, const gemv_pf *pf) {
    const int64_t n = w->cols, nsb = n / 32, nc = n / 64, rows = w->rows;
    const uint8_t *p[4], *sc[4];
    __m256 a[4][4];
    for (int r = 0; r < R; r++) {
        p[r] = (const uint8_t *)w->w + (o + r) * (n / 2);
        sc[r] = (const uint8_t *)w->scale + (o + r) * nsb;
        for (int s = 0; s < NX; s++) a[r][s] = _mm256_setzero_ps();
    }
    for (int64_t c = 0; c < nc; c++) {
        pf_step(pf, p[0], R * c * 32, R * 32);
        for (int h = 0; h < 2; h++) {
            const float *xb = x + c * 64 + h * 32;
            __m256 x1[4];
            if (NX == 1)
                for (int q = 0; q < 4; q++) x1[q] = _mm256_loadu_ps(xb + 8 * q);
            for (int r = 0; r < R; r++) {
                __m256 wv[4];
                dec_fp4s(_mm256_loadu_si256((const __m256i *)(p[r] + c * 32)), h, tab->fp4s[sc[r][2 * c + h]], wv);
                for (int q = 0; q < 4; q++)
                    for (int s = 0; s < NX; s++)
                        a[r][s] = _mm256_fmadd_ps(NX == 1 ? x1[q] : _mm256_loadu_ps(xb + s * n + 8 * q), wv[q], a[r][s]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int s = 0; s < NX; s++) y[s * rows + o + r] = hsum8(a[r][s]);
}

/* every FP4 layout's GEMV (layout, a constant after inlining: 0 natural, 1 lanes
 * DSV4_WF_FP4L, gemv_fp4l_rows; 2 shuffle DSV4_WF_FP4B, gemv_fp4s_rows) */
AINLINE void gemv_fp4_nx(int NX, int lanes, const dsv4_lin_tables *tab, const dsv4_mat *w,
                         const float *x, float *y, int64_t o0, int64_t o1) {
    const int R = lanes == 1 ? GEMV_R_FP4L(NX) : GEMV_R(NX);
    const int64_t rb = w->cols / 2; /* bytes per row */
    const gemv_pf pf =
        pf_start((const uint8_t *)w->w + o0 * rb, (const uint8_t *)w->w + o1 * rb, GEMV_PF_FP4);
    if (!w->scale_is_f32) /* the task's ue8m0 scales: cols / 32 bytes a row */
        pf_start((const uint8_t *)w->scale + o0 * (rb / 16),
                 (const uint8_t *)w->scale + o1 * (rb / 16), 4096);
    int64_t o = o0;
    for (; o + R <= o1; o += R)
        if (lanes == 2)
            gemv_fp4s_rows(R, NX, tab, w, x, y, o, &pf);
        else if (lanes)
            gemv_fp4l_rows(R, NX, tab, w, x, y, o, &pf);
        else
            gemv_fp4_rows(R, NX, tab, w, x, y, o, &pf);
    for (; o < o1; o++)
        if (lanes == 2)
            gemv_fp4s_rows(1, NX, tab, w, x, y, o, &pf);
        else if (lanes)
            gemv_fp4l_rows(1, NX, tab, w, x, y, o, &pf);
        else
            gemv_fp4_rows(1, NX, tab, w, x, y, o, &pf);
}

AINLINE void gemv_fp4(const dsv4_lin_call *c, int lanes, const dsv4_mat *w, const float *x, int nx,
                      float *y, int64_t o0, int64_t o1) {
    switch (nx) {
    case 1:
        gemv_fp4_nx(1, lanes, c->tab, w, x, y, o0, o1);
        break;
    case 2:
        gemv_fp4_nx(2, lanes, c->tab, w, x, y, o0, o1);
        break;
    case 3:
        gemv_fp4_nx(3, lanes, c->tab, w, x, y, o0, o1);
        break;
    default:
        gemv_fp4_nx(4, lanes, c->tab, w, x, y, o0, o1);
        break;
    }
}

static void gemv_f32(const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0, int64_t o1) {
    gemv_dense(DSV4_WF_F32, w, x, nx, y, o0, o1);
}
static void gemv_f16(const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0, int64_t o1) {
    gemv_dense(DSV4_WF_F16, w, x, nx, y, o0, o1);
}
static void gemv_bf16(const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0, int64_t o1) {
    gemv_dense(DSV4_WF_BF16, w, x, nx, y, o0, o1);
}

static void gemv_avx2(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y,
                      int64_t o0, int64_t o1) {
    switch (w->fmt) {
    case DSV4_WF_F32:
        gemv_f32(w, x, nx, y, o0, o1);
        break;
    case DSV4_WF_F16:
        gemv_f16(w, x, nx, y, o0, o1);
        break;
    case DSV4_WF_BF16:
        gemv_bf16(w, x, nx, y, o0, o1);
        break;
    case DSV4_WF_FP8:
        gemv_fp8(c, w, x, nx, y, o0, o1);
        break;
    case DSV4_WF_FP4:
        gemv_fp4(c, 0, w, x, nx, y, o0, o1);
        break;
    case DSV4_WF_FP4L:
        gemv_fp4(c, 1, w, x, nx, y, o0, o1);
        break;
    case DSV4_WF_FP4B: /* ue8m0 scales (lin_pick) */
        gemv_fp4(c, 2, w, x, nx, y, o0, o1);
        break;
    default:
        break;
    }
}

/* dsv4_lin_call.fp8_prescale: the GEMV multiplies x by 2^120 * scale = 2^(b - 7) for ue8m0
 * byte b, and x * 2^e is exact when the result is zero or a normal float. Scans the scale
 * grid (rows/128 x cols/128 bytes) and x once per call. */
static int fp8_prescale(const dsv4_mat *w, const float *x, int nx) {
    if (w->fmt != DSV4_WF_FP8 || w->scale_is_f32) return 0;
    int bmin, bmax;
    dsv4_lin_ue8m0_range(w, &bmin, &bmax);
    /* b <= 134: 2^120 * scale is finite (and so is every weight e4m3 * scale, exact: the
     * smallest, 2^-9 * 2^-127, is still an F32 subnormal). Real checkpoints' scales sit
     * near 2^-8 (b ~ 119). */
    if (bmax > 134) return 0;
    /* |x| as integers: the largest, and the smallest nonzero (0 - 1 wraps to the top) */
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), one = _mm256_set1_epi32(1);
    __m256i vmax = _mm256_setzero_si256(), vmin = _mm256_set1_epi32(-1);
    const int64_t nxc = (int64_t)nx * w->cols; /* all activation rows of the call */
    int64_t i = 0;
    for (; i + 8 <= nxc; i += 8) {
        __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), absm);
        vmax = _mm256_max_epu32(vmax, a);
        vmin = _mm256_min_epu32(vmin, _mm256_sub_epi32(a, one));
    }
    uint32_t t0[8], t1[8], amax = 0, amin1 = 0xffffffffu;
    _mm256_storeu_si256((__m256i *)t0, vmax);
    _mm256_storeu_si256((__m256i *)t1, vmin);
    for (int l = 0; l < 8; l++) {
        amax = t0[l] > amax ? t0[l] : amax;
        amin1 = t1[l] < amin1 ? t1[l] : amin1;
    }
    for (; i < nxc; i++) {
        const uint32_t a = dsv4_f32_to_bits(x[i]) & 0x7fffffffu;
        amax = a > amax ? a : amax;
        amin1 = a - 1 < amin1 ? a - 1 : amin1;
    }
    if (amax >= 0x7f800000u) return 0; /* inf or NaN */
    if (amax == 0) return 1;           /* all zeros */
    const double xmin = dsv4_bits_to_f32(amin1 + 1), xmax = dsv4_bits_to_f32(amax);
    /* the smallest nonzero product a normal float, the largest below 2^127 */
    return ldexp(xmin, bmin - 7) >= 0x1p-126 && ldexp(xmax, bmax - 7) < 0x1p127;
}

/* 4 rows a GEMV call, up to 8 in two passes (16 in four measured 4% slower than the GEMM
 * at batch 16 on Zen 3) */
static const dsv4_lin_kernels avx2_kernels = {
    4, 8, 8, gemv_avx2, dsv4_lin_gemm_avx2, fp8_prescale,
    /* small-M (linear_avx2_smallm.c) by format: [NONE, F32, F16, BF16, FP8, FP4, I8, FP4L, FP4B].
     * Zen 3, 2 threads, bench_linear --decode (cold), against the GEMV: FP8 at 8 rows 0.58-0.73x
     * the time (wkv, wq_b, wo_b), at 5 0.73-0.91x but wq_b's 256 columns 1.21x, at 3 1.0-1.65x;
     * FP4 at 8 rows 0.78-0.80x (w13, w2), at 4 1.07x / 0.63x (noisy). Against the GEMM at 16
     * rows: FP8 0.60-0.88x (w2's 512 columns 1.06x), BF16 head 0.74x, FP4 1.0-1.08x. So FP8
     * and FP4 from 6 rows, BF16 where the GEMV stops (9). */
    {0, 0, 0, 9, 6, 6, 0, 6, 6 /* FP4B: as FP4L, not measured apart */}, dsv4_lin_avx2_smallm, 1, 0, 0, 0, 0,
    1 /* gemv_fp4s_rows reads FP4B (ue8m0 scales) */};

const dsv4_lin_kernels *dsv4_lin_kernels_avx2(void) { return &avx2_kernels; }

#else

const dsv4_lin_kernels *dsv4_lin_kernels_avx2(void) { return 0; }

#endif
