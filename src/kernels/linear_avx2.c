/* linear_avx2.c — AVX2 + FMA + F16C kernels for dsv4_linear.
 *
 * Built with -mavx2 -mfma -mf16c (top CMakeLists.txt) and only called after cpu.c has
 * confirmed the CPU and OS support them. Summation order: linear_fast.h.
 *
 * Decoding, always to the exact dequantized value of dsv4_mat_row:
 *   F16    vcvtph2ps.  BF16   widen to 32 bits and shift left 16.
 *   FP8    e4m3 byte s.eeee.mmm -> F16 bits s.0eeee.mmm0000000 (sign-extend to 16 bits,
 *          shift left 7, clear bit 14): the F16 value is exactly e4m3 / 256, subnormals
 *          included, and vcvtph2ps widens it. Multiplying by (256 * scale) rounds once,
 *          the same single rounding as e4m3 * scale.
 *          GEMV with x prescaled (dsv4_lin_call.fp8_prescale): sign-extend to 32 bits,
 *          shift left 20, keep the sign and bits 20..26: F32 bits s.0000eeee.mmm, exactly
 *          e4m3 * 2^-120 (e4m3 subnormals land on F32 subnormals). x is multiplied by
 *          2^120 * scale once per 128-column block instead, exact by the prescale test, so
 *          the FMA's exact product x' * w' is x * (e4m3 * scale) and the sums are the same
 *          bits; 3 integer ops per 8 weights instead of 5 with two vcvtph2ps (FP8 GEMV
 *          +20..30% a core, bench_linear --decode --threads 1).
 *   FP4    eight nibbles (4 bytes) are broadcast to 8 lanes and lane l shifted right by 4l,
 *          so lane l holds nibble l in bits 0..3: that is column order. vpermps looks up
 *          the magnitude (bits 0..2) in the 32-column block's 8-entry table
 *          T'[k] = bits(T[k] * scale) ^ (k << 28) (precomputed per ue8m0 byte in
 *          dsv4_lin_tables, 15% faster than building it per block; built on the fly for F32
 *          scales). Then (lane << 28) holds the whole nibble in bits 28..31 and nothing
 *          else, and xoring it into T'[k] cancels the k << 28 and leaves the sign bit:
 *          4 instructions per 8 weights, no sign branch.
 *   FP4L   (the lanes layout, fp4_lanes.h) a 64-byte line holds 128 columns, word i nibble
 *          k = column 16k + i: its words 0..7 (resp. 8..15) shifted right by 4k hold in lane
 *          l's bits 0..3 the code of column 16k + l (resp. 16k + 8 + l), natural order. The
 *          table lookup and the sign xor are FP4's, on that index: per 8 weights one
 *          immediate shift (none at k = 0) in place of the broadcast and variable shift, and
 *          one 32-byte load per 64 weights. The same values in the same lanes and chunks as
 *          FP4: the same bits.
 *   FP8 NaN codes 0x7F/0xFF, which both bit tricks make finite (+-480 * scale), are found
 *          by a byte scan of each 128-column block: b + b (mod 256) is 0xFE for them and at
 *          most 0xFC for every other byte. The GEMV then stores NaN for that weight row's
 *          outputs, the GEMM dequantizes the block with dsv4_lin_dequant8 (NaN weights), as
 *          the portable level and the reference do.
 */
#include "kernels/linear_fast.h"

#if defined(DSV4_HAVE_AVX2) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/codec.h"
#include "kernels/gemv_prefetch.h"

#define AINLINE static inline __attribute__((always_inline))

static const int32_t tail_masks[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* lanes 0 .. n-1 set, n in [1, 8] */
AINLINE __m256i mask_first(int n) { return _mm256_loadu_si256((const __m256i *)(tail_masks + 8 - n)); }

/* ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)) */
AINLINE float hsum8(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}

static float scale_at(const dsv4_mat *w, int64_t idx) {
    if (w->scale_is_f32) return ((const float *)w->scale)[idx];
    return dsv4_e8m0_to_f32(((const uint8_t *)w->scale)[idx]);
}

/* ---- decoders -------------------------------------------------------------------------- */

AINLINE __m256 dec_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

AINLINE __m256 dec_bf16(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* 8 dense weights of format fmt (constant after inlining) from row p, element i */
AINLINE __m256 dec_dense(int fmt, const void *p, int64_t i) {
    if (fmt == DSV4_WF_F32) return _mm256_loadu_ps((const float *)p + i);
    if (fmt == DSV4_WF_F16) return dec_f16((const uint16_t *)p + i);
    return dec_bf16((const uint16_t *)p + i);
}

/* the last m (< 8) elements of a dense row from element i, zero-padded */
AINLINE __m256 dec_dense_tail(int fmt, const void *p, int64_t i, int m) {
    if (fmt == DSV4_WF_F32) return _mm256_maskload_ps((const float *)p + i, mask_first(m));
    uint16_t t[8] = {0};
    memcpy(t, (const uint16_t *)p + i, (size_t)m * 2);
    return fmt == DSV4_WF_F16 ? dec_f16(t) : dec_bf16(t);
}

AINLINE __m128i fp8_to_f16x8(__m128i b16) { /* b16: 8 sign-extended bytes */
    return _mm_and_si128(_mm_slli_epi16(b16, 7), _mm_set1_epi16((short)0xBFFF));
}

AINLINE __m256 dec_fp8x8(const uint8_t *p, __m256 s256) {
    __m128i h = fp8_to_f16x8(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)p)));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), s256);
}

AINLINE __m256i fp8_to_f16x16(const uint8_t *p) { /* 16 bytes -> 16 F16 = e4m3 / 256 */
    __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
    return _mm256_and_si256(_mm256_slli_epi16(v, 7), _mm256_set1_epi16((short)0xBFFF));
}

AINLINE void dec_fp8x16(const uint8_t *p, __m256 s256, __m256 *w0, __m256 *w1) {
    __m256i h = fp8_to_f16x16(p);
    *w0 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), s256);
    *w1 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), s256);
}

/* 8 e4m3 bytes -> F32 bits s.0000eeee.mmm0..: exactly e4m3 * 2^-120 (e = 0, the e4m3
 * subnormals, lands on F32 subnormals with the same mantissa) */
AINLINE __m256 fp8_to_f32x8_2m120(const uint8_t *p) {
    const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(v, 20), _mm256_set1_epi32((int)0x87F00000u)));
}

/* Running byte max of b + b over n bytes at p: 0xFE somewhere iff an FP8 NaN code. With
 * sub (a constant after inlining), also sets *sub when a byte is an e4m3 subnormal code
 * (b + b in 2..14): see gemv_fp8_rows. */
AINLINE __m256i fp8_nan_scan(__m256i acc, const uint8_t *p, int n, int *sub) {
    const __m256i two = _mm256_set1_epi8(2);
    __m256i lo = _mm256_set1_epi8(-1); /* byte min of b + b - 2 (mod 256) */
    for (int i = 0; i < n; i += 32) {
        __m256i v;
        if (i + 32 <= n) {
            v = _mm256_loadu_si256((const __m256i *)(p + i));
        } else {
            uint8_t t[32] = {0};
            memcpy(t, p + i, (size_t)(n - i));
            v = _mm256_loadu_si256((const __m256i *)t);
        }
        const __m256i u = _mm256_add_epi8(v, v);
        acc = _mm256_max_epu8(acc, u);
        if (sub) lo = _mm256_min_epu8(lo, _mm256_sub_epi8(u, two));
    }
    if (sub) {
        const __m256i le12 = _mm256_cmpeq_epi8(_mm256_min_epu8(lo, _mm256_set1_epi8(12)), lo);
        *sub |= _mm256_movemask_epi8(le12) != 0;
    }
    return acc;
}

AINLINE int fp8_nan_seen(__m256i acc) {
    return _mm256_movemask_epi8(_mm256_cmpeq_epi8(acc, _mm256_set1_epi8((char)0xFE))) != 0;
}

/* the last m (< 8) bytes of an FP8 row from p, zero-padded */
AINLINE __m256 dec_fp8_tail(const uint8_t *p, int m, __m256 s256) {
    uint8_t t[8] = {0};
    memcpy(t, p, (size_t)m);
    return dec_fp8x8(t, s256);
}

AINLINE __m256 fp4_table(float s) {
    const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i k28 = _mm256_setr_epi32(0, 1 << 28, 2 << 28, 3 << 28, 4 << 28, 5 << 28, 6 << 28, 7 << 28);
    return _mm256_xor_ps(_mm256_mul_ps(mag, _mm256_set1_ps(s)), _mm256_castsi256_ps(k28));
}

AINLINE __m256 dec_fp4(const uint8_t *p, __m256 table) {
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    int32_t u;
    memcpy(&u, p, 4);
    __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32(u), shifts);
    __m256 v = _mm256_permutevar8x32_ps(table, idx);
    return _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

/* 8 weights of a lanes-layout line: half (words 0..7 or 8..15 of the line), nibble k */
AINLINE __m256 dec_fp4l(__m256i half, int k, __m256 table) {
    const __m256i idx = _mm256_srli_epi32(half, 4 * k); /* k is a constant after unrolling */
    const __m256 v = _mm256_permutevar8x32_ps(table, idx);
    return _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

/* The decode table of FP4 scale block idx: precomputed per ue8m0 byte (same bits as
 * fp4_table, see dsv4_lin_tables_init), built on the fly for F32 scales. */
AINLINE __m256 fp4_block_table(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t idx) {
    if (!w->scale_is_f32) return _mm256_load_ps((const float *)tab->fp4[((const uint8_t *)w->scale)[idx]]);
    return fp4_table(((const float *)w->scale)[idx]);
}

/* ---- GEMV: 1..4 activation rows (NX), R weight rows at a time, weights decoded in
 * registers and used for every activation row. x: (NX, cols), y: (NX, rows). R and NX are
 * constants after inlining; R * NX <= 8 accumulators keeps everything in registers. ---- */

/* weight rows per step for NX activation rows (8 rows for NX 1 measured 10..40% slower on
 * FP8 and FP4 decode shapes) */
#define GEMV_R(NX) ((NX) <= 2 ? 4 : 2)

AINLINE void gemv_dense_rows(int fmt, int R, int NX, const dsv4_mat *w, const float *x, float *y, int64_t o,
                             const gemv_pf *pf) {
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
    default: gemv_dense_nx(fmt, 4, w, x, y, o0, o1); break;
    }
}

/* Columns [i0, i1) of one 128-column block for R rows p[0..R) into the accumulators a.
 * PRE: x * 2^120 * scale and weights as e4m3 * 2^-120 (the prescaled path); otherwise
 * weights e4m3 * scale through F16. Both give the same products (see the top of the file). */
AINLINE void fp8_block(int R, int NX, int PRE, const uint8_t *const *p, const float *x, int64_t n, int64_t i0,
                       int64_t i1, float s256f, __m256 a[4][4], const gemv_pf *pf) {
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
                xv[s] = m == 8 ? _mm256_loadu_ps(x + s * n + i) : _mm256_maskload_ps(x + s * n + i, mask_first(m));
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
 * dsv4_lin_call.fp8_prescale says it is exact. Not for a block holding an e4m3 subnormal
 * code: as an F32 subnormal it would cost a microcode assist per FMA on Intel cores
 * (random FP8 bytes, 6% such codes, ran 100x slower on a Sapphire-Rapids-class Xeon);
 * that block takes the F16 path, same bits. */
AINLINE void gemv_fp8_rows(int R, int NX, int PRE, const dsv4_mat *w, const float *x, float *y, int64_t o,
                           const gemv_pf *pf) {
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
                for (int s = 0; s < NX; s++) xv[s] = _mm256_maskload_ps(x + s * n + i, mask_first(m));
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
        for (int r = 0; r < R; r++) nan[r] = fp8_nan_scan(nan[r], p[r] + i0, (int)(i1 - i0), PRE ? &sub : NULL);
        if (PRE && !sub) fp8_block(R, NX, 1, p, x, n, i0, i1, s256f, a, pf);
        else fp8_block(R, NX, 0, p, x, n, i0, i1, s256f, a, pf);
    }
    for (int r = 0; r < R; r++) {
        const int has_nan = fp8_nan_seen(nan[r]);
        for (int s = 0; s < NX; s++) y[s * rows + o + r] = has_nan ? NAN : hsum8(a[r][s]);
    }
}

AINLINE void gemv_fp8_nx(int NX, int PRE, const dsv4_mat *w, const float *x, float *y, int64_t o0, int64_t o1) {
    const int R = GEMV_R(NX);
    const gemv_pf pf = pf_start((const uint8_t *)w->w + o0 * w->cols, (const uint8_t *)w->w + o1 * w->cols,
                                GEMV_PF_FP8);
    int64_t o = o0;
    for (; o + R <= o1 && (o % R) == 0; o += R) gemv_fp8_rows(R, NX, PRE, w, x, y, o, &pf);
    for (; o < o1; o++) gemv_fp8_rows(1, NX, PRE, w, x, y, o, &pf);
}

static void gemv_fp8(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                     int64_t o1) {
    if (c->fp8_prescale) {
        switch (nx) {
        case 1: gemv_fp8_nx(1, 1, w, x, y, o0, o1); break;
        case 2: gemv_fp8_nx(2, 1, w, x, y, o0, o1); break;
        case 3: gemv_fp8_nx(3, 1, w, x, y, o0, o1); break;
        default: gemv_fp8_nx(4, 1, w, x, y, o0, o1); break;
        }
    } else {
        switch (nx) {
        case 1: gemv_fp8_nx(1, 0, w, x, y, o0, o1); break;
        case 2: gemv_fp8_nx(2, 0, w, x, y, o0, o1); break;
        case 3: gemv_fp8_nx(3, 0, w, x, y, o0, o1); break;
        default: gemv_fp8_nx(4, 0, w, x, y, o0, o1); break;
        }
    }
}

/* cols % 32 == 0 (checked by the driver) */
AINLINE void gemv_fp4_rows(int R, int NX, const dsv4_lin_tables *tab, const dsv4_mat *w, const float *x, float *y,
                           int64_t o, const gemv_pf *pf) {
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
AINLINE void gemv_fp4l_rows(int R, int NX, const dsv4_lin_tables *tab, const dsv4_mat *w, const float *x, float *y,
                            int64_t o, const gemv_pf *pf) {
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
                    const __m256i half = _mm256_loadu_si256((const __m256i *)(p[r] + l * 64 + (q & 1) * 32));
                    const __m256 wv = dec_fp4l(half, 2 * b + (q >> 1), t[r]);
                    for (int s = 0; s < NX; s++) a[r][s] = _mm256_fmadd_ps(xv[s], wv, a[r][s]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int s = 0; s < NX; s++) y[s * rows + o + r] = hsum8(a[r][s]);
}

/* both FP4 layouts' GEMV (lanes: DSV4_WF_FP4L, gemv_fp4l_rows; constant after inlining) */
AINLINE void gemv_fp4_nx(int NX, int lanes, const dsv4_lin_tables *tab, const dsv4_mat *w, const float *x, float *y,
                         int64_t o0, int64_t o1) {
    const int R = lanes ? GEMV_R_FP4L(NX) : GEMV_R(NX);
    const int64_t rb = w->cols / 2; /* bytes per row */
    const gemv_pf pf = pf_start((const uint8_t *)w->w + o0 * rb, (const uint8_t *)w->w + o1 * rb, GEMV_PF_FP4);
    if (!w->scale_is_f32) /* the task's ue8m0 scales: cols / 32 bytes a row */
        pf_start((const uint8_t *)w->scale + o0 * (rb / 16), (const uint8_t *)w->scale + o1 * (rb / 16), 4096);
    int64_t o = o0;
    for (; o + R <= o1; o += R)
        if (lanes) gemv_fp4l_rows(R, NX, tab, w, x, y, o, &pf);
        else gemv_fp4_rows(R, NX, tab, w, x, y, o, &pf);
    for (; o < o1; o++)
        if (lanes) gemv_fp4l_rows(1, NX, tab, w, x, y, o, &pf);
        else gemv_fp4_rows(1, NX, tab, w, x, y, o, &pf);
}

AINLINE void gemv_fp4(const dsv4_lin_call *c, int lanes, const dsv4_mat *w, const float *x, int nx, float *y,
                      int64_t o0, int64_t o1) {
    switch (nx) {
    case 1: gemv_fp4_nx(1, lanes, c->tab, w, x, y, o0, o1); break;
    case 2: gemv_fp4_nx(2, lanes, c->tab, w, x, y, o0, o1); break;
    case 3: gemv_fp4_nx(3, lanes, c->tab, w, x, y, o0, o1); break;
    default: gemv_fp4_nx(4, lanes, c->tab, w, x, y, o0, o1); break;
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

static void gemv_avx2(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                      int64_t o1) {
    switch (w->fmt) {
    case DSV4_WF_F32: gemv_f32(w, x, nx, y, o0, o1); break;
    case DSV4_WF_F16: gemv_f16(w, x, nx, y, o0, o1); break;
    case DSV4_WF_BF16: gemv_bf16(w, x, nx, y, o0, o1); break;
    case DSV4_WF_FP8: gemv_fp8(c, w, x, nx, y, o0, o1); break;
    case DSV4_WF_FP4: gemv_fp4(c, 0, w, x, nx, y, o0, o1); break;
    case DSV4_WF_FP4L: gemv_fp4(c, 1, w, x, nx, y, o0, o1); break;
    default: break;
    }
}

/* ---- GEMM: dequantize a (LIN_NB, LIN_KB) tile, then a 3x4 register-blocked kernel -------- */

/* Row o, columns [k0, k0 + kb), into dst (zero-padded to a multiple of 8). */
static void dequant_row(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, int64_t k0, int kb, float *dst) {
    const int64_t n = w->cols;
    const int nf = kb & ~7, tail = kb - nf;
    switch (w->fmt) {
    case DSV4_WF_F32:
    case DSV4_WF_F16:
    case DSV4_WF_BF16: {
        const int fmt = w->fmt;
        const char *p = (const char *)w->w + o * n * (fmt == DSV4_WF_F32 ? 4 : 2);
        int c = 0;
        if (fmt == DSV4_WF_F32)
            for (; c < nf; c += 8) _mm256_store_ps(dst + c, dec_dense(DSV4_WF_F32, p, k0 + c));
        else if (fmt == DSV4_WF_F16)
            for (; c < nf; c += 8) _mm256_store_ps(dst + c, dec_dense(DSV4_WF_F16, p, k0 + c));
        else
            for (; c < nf; c += 8) _mm256_store_ps(dst + c, dec_dense(DSV4_WF_BF16, p, k0 + c));
        if (tail) {
            __m256 v = fmt == DSV4_WF_F32   ? dec_dense_tail(DSV4_WF_F32, p, k0 + nf, tail)
                       : fmt == DSV4_WF_F16 ? dec_dense_tail(DSV4_WF_F16, p, k0 + nf, tail)
                                            : dec_dense_tail(DSV4_WF_BF16, p, k0 + nf, tail);
            _mm256_store_ps(dst + nf, v);
        }
        break;
    }
    case DSV4_WF_FP8: {
        const int64_t nsb = (n + 127) / 128;
        const uint8_t *p = (const uint8_t *)w->w + o * n;
        for (int c0 = 0; c0 < kb; c0 += 128) { /* k0 is a multiple of 128 */
            const int c1 = c0 + 128 < kb ? c0 + 128 : kb;
            const float s256f = scale_at(w, (o / 128) * nsb + (k0 + c0) / 128) * 256.0f;
            if (!isfinite(s256f) || fp8_nan_seen(fp8_nan_scan(_mm256_setzero_si256(), p + k0 + c0, c1 - c0, NULL))) {
                for (int c = c0; c < c1; c += 8) dsv4_lin_dequant8(w, o, k0 + c, dst + c);
                continue;
            }
            const __m256 s256 = _mm256_set1_ps(s256f);
            int c = c0;
            for (; c + 16 <= c1; c += 16) {
                __m256 w0, w1;
                dec_fp8x16(p + k0 + c, s256, &w0, &w1);
                _mm256_store_ps(dst + c, w0);
                _mm256_store_ps(dst + c + 8, w1);
            }
            if (c + 8 <= c1) {
                _mm256_store_ps(dst + c, dec_fp8x8(p + k0 + c, s256));
                c += 8;
            }
            if (c < c1) _mm256_store_ps(dst + c, dec_fp8_tail(p + k0 + c, c1 - c, s256));
        }
        break;
    }
    case DSV4_WF_FP4: { /* cols and k0 are multiples of 32 */
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2);
        const int64_t sb = o * (n / 32);
        for (int c = 0; c < kb; c += 32) {
            const __m256 t = fp4_block_table(tab, w, sb + (k0 + c) / 32);
            const uint8_t *q = p + (k0 + c) / 2;
            _mm256_store_ps(dst + c, dec_fp4(q, t));
            _mm256_store_ps(dst + c + 8, dec_fp4(q + 4, t));
            _mm256_store_ps(dst + c + 16, dec_fp4(q + 8, t));
            _mm256_store_ps(dst + c + 24, dec_fp4(q + 12, t));
        }
        break;
    }
    case DSV4_WF_FP4L: { /* cols, k0 and kb are multiples of 128: whole lines */
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2) + k0 / 2;
        const int64_t sb = o * (n / 32) + k0 / 32;
        for (int c = 0; c < kb; c += 128) {
            const __m256i lo = _mm256_loadu_si256((const __m256i *)(p + c / 2));
            const __m256i hi = _mm256_loadu_si256((const __m256i *)(p + c / 2 + 32));
            for (int b = 0; b < 4; b++) {
                const __m256 t = fp4_block_table(tab, w, sb + c / 32 + b);
                float *d = dst + c + 32 * b;
                _mm256_store_ps(d, dec_fp4l(lo, 2 * b, t));
                _mm256_store_ps(d + 8, dec_fp4l(hi, 2 * b, t));
                _mm256_store_ps(d + 16, dec_fp4l(lo, 2 * b + 1, t));
                _mm256_store_ps(d + 24, dec_fp4l(hi, 2 * b + 1, t));
            }
        }
        break;
    }
    default: break;
    }
}

/* RT activation rows x 4 outputs. x: row 0 of the tile at column k0 (row stride ldx);
 * wt: 4 tile rows (stride LIN_KB); acc: (RT, LIN_NB, 8) window at this tile. */
AINLINE void micro(int RT, const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    const int nf = kb & ~7, tail = kb - nf;
    __m256 a[3][4];
    for (int r = 0; r < RT; r++)
        for (int j = 0; j < 4; j++) a[r][j] = init ? _mm256_setzero_ps() : _mm256_load_ps(acc + (r * LIN_NB + j) * 8);
    for (int c = 0; c < nf; c += 8) {
        __m256 xv[3];
        for (int r = 0; r < RT; r++) xv[r] = _mm256_loadu_ps(x + r * ldx + c);
        for (int j = 0; j < 4; j++) {
            __m256 wv = _mm256_load_ps(wt + j * LIN_KB + c);
            for (int r = 0; r < RT; r++) a[r][j] = _mm256_fmadd_ps(xv[r], wv, a[r][j]);
        }
    }
    if (tail) {
        const __m256i m = mask_first(tail);
        __m256 xv[3];
        for (int r = 0; r < RT; r++) xv[r] = _mm256_maskload_ps(x + r * ldx + nf, m);
        for (int j = 0; j < 4; j++) {
            __m256 wv = _mm256_load_ps(wt + j * LIN_KB + nf);
            for (int r = 0; r < RT; r++) a[r][j] = _mm256_fmadd_ps(xv[r], wv, a[r][j]);
        }
    }
    for (int r = 0; r < RT; r++)
        for (int j = 0; j < 4; j++) _mm256_store_ps(acc + (r * LIN_NB + j) * 8, a[r][j]);
}

static void micro3(const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    micro(3, x, ldx, wt, kb, acc, init);
}
static void micro2(const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    micro(2, x, ldx, wt, kb, acc, init);
}
static void micro1(const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    micro(1, x, ldx, wt, kb, acc, init);
}

static void reduce_row8(const float *acc, int nb, float *y) {
    for (int j = 0; j < nb; j++) y[j] = hsum8(_mm256_load_ps(acc + 8 * j));
}

/* 3-row micro-kernels: 12 accumulators, 3 x and a weight in the 16 registers */
static const dsv4_lin_tile_level avx2_tiles = {8,    3, 4, dequant_row, {micro1, micro2, micro3, NULL}, reduce_row8,
                                              NULL, 1};

static void gemm_avx2(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y, int64_t o0,
                      float *scratch) {
    dsv4_lin_gemm_tiled(&avx2_tiles, c, w, x, n_rows, y, o0, scratch);
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
static const dsv4_lin_kernels avx2_kernels = {4, 8, 8, gemv_avx2, gemm_avx2, fp8_prescale, {0}, NULL, 1, 0, 0, 0, 0};

const dsv4_lin_kernels *dsv4_lin_kernels_avx2(void) { return &avx2_kernels; }

#else

const dsv4_lin_kernels *dsv4_lin_kernels_avx2(void) { return 0; }

#endif
