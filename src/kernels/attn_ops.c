/* attn_ops.c — dot/axpy kernels of sparse attention and the indexer (contract: attn_ops.h).
 *
 * The portable level is dsv4_dot and plain loops. The AVX2 level keeps the eight lanes of
 * the contract in one register per dot and computes up to 8 dots against the same key
 * chunk at once: the key is loaded once per chunk, and the 8 independent accumulators
 * hide the add latency (one dot alone is a chain of n/8 dependent adds). The AVX-512 level
 * (attn_ops_x512.c) puts two dots' 8 lanes side by side in one 16-lane register. BF16 rows
 * are widened in registers (zero-extend to 32 bits, shift left 16; the value sum's whole
 * 16-column blocks by two word unpacks against zero), never through an F32 copy. The SIMD
 * functions carry __attribute__((target(...))) without "fma" (multiply and add must stay two
 * roundings; C11 mode also keeps GCC from contracting them), so this file needs no ISA
 * flags and the library runs them only after cpu.c detection.
 */
#include "kernels/attn_ops.h"

#include <stdint.h>
#include <string.h>

#include "kernels/codec.h"
#include "kernels/cpu.h"
#include "kernels/kv_rows.h"
#include "kernels/ops.h"

/* ---- portable level -------------------------------------------------------------------- */

/* Value i of a row in fmt (F32 or BF16). */
static inline float row_value(const void *row, int fmt, int i) {
    if (fmt == DSV4_ROW_BF16) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)row + 2 * (size_t)i, 2);
        return dsv4_bf16_to_f32(h);
    }
    return ((const float *)row)[i];
}

/* dsv4_dot(a, row as F32, n): the same lanes, order and roundings. */
static float dot_row(const float *a, const void *row, int fmt, int n) {
    if (fmt != DSV4_ROW_BF16) return dsv4_dot(a, row, n);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * row_value(row, fmt, i + l);
    for (int l = 0; i < n; i++, l++) acc[l] += a[i] * row_value(row, fmt, i);
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static void dotn_scalar(const float *q, size_t qs, int nq, const float *k, int n, float *out,
                        size_t os) {
    for (int h = 0; h < nq; h++) out[(size_t)h * os] = dsv4_dot(q + (size_t)h * qs, k, n);
}

static void axpyn_scalar(float *y, size_t ys, int ny, const float *a, size_t as, const float *x,
                         int n) {
    for (int h = 0; h < ny; h++) {
        const float ah = a[(size_t)h * as];
        float *yh = y + (size_t)h * ys;
        for (int c = 0; c < n; c++) yh[c] += ah * x[c];
    }
}

static void dot_rows_scalar(const float *q, size_t qs, int nq, const void *const *rows, int fmt, int n_rows,
                            int n, float *out, size_t os) {
    for (int j = 0; j < n_rows; j++)
        for (int h = 0; h < nq; h++) out[(size_t)h * os + j] = dot_row(q + (size_t)h * qs, rows[j], fmt, n);
}

static void wsum_scalar(float *o, size_t os, int nh, const float *p, size_t ps, const void *const *rows,
                        int fmt, int n_rows, int n) {
    for (int h = 0; h < nh; h++)
        for (int c = 0; c < n; c++) o[(size_t)h * os + c] = 0.0f;
    for (int j = 0; j < n_rows; j++)
        for (int h = 0; h < nh; h++) {
            const float ph = p[(size_t)h * ps + j];
            float *oh = o + (size_t)h * os;
            for (int c = 0; c < n; c++) oh[c] += ph * row_value(rows[j], fmt, c);
        }
}

static const dsv4_attn_ops scalar_ops = {dotn_scalar, axpyn_scalar, dot_rows_scalar, wsum_scalar, NULL};

/* ---- AVX2 level ------------------------------------------------------------------------ */

#if defined(DSV4_HAVE_AVX2) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2_FN __attribute__((target("avx2")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2")))

static const int tail_masks[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* lanes 0 .. r-1 set, r in [1, 8] */
AVX2_INLINE __m256i mask_first(int r) {
    return _mm256_loadu_si256((const __m256i *)(tail_masks + 8 - r));
}

/* ((l0+l4) + (l1+l5)) + ((l2+l6) + (l3+l7)), the order of dsv4_dot */
AVX2_INLINE float hsum8(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 h = _mm_hadd_ps(s, s); /* (s0+s1, s2+s3, ..) */
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* Values [i, i + 8) of a row in fmt as FP32 (BF16: zero-extended, shifted into the upper
 * halves). */
AVX2_INLINE __m256 row8(const void *row, int fmt, int i) {
    if (fmt == DSV4_ROW_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i))), 16));
    return _mm256_loadu_ps((const float *)row + i);
}

/* The first r in [1, 8) values from i, the other lanes zero (m: mask_first(r)). */
AVX2_INLINE __m256 row8_tail(const void *row, int fmt, int i, int r, __m256i m) {
    if (fmt == DSV4_ROW_BF16) {
        uint16_t t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        memcpy(t, (const uint16_t *)row + i, 2 * (size_t)r);
        return row8(t, fmt, 0);
    }
    return _mm256_maskload_ps((const float *)row + i, m);
}

/* G dots of q rows (stride qs) against the row k in fmt. The zero-padded tail adds 0*0 =
 * +0 to lanes past n, which leaves them unchanged (an accumulator that starts at +0 is
 * never -0 under round-to-nearest), exactly like the portable loop that skips them. */
AVX2_INLINE void dot_group(const float *q, size_t qs, const void *k, int fmt, int n, float *out,
                           size_t os, const int G) {
    __m256 acc[8];
    for (int g = 0; g < G; g++) acc[g] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 kv = row8(k, fmt, i);
        for (int g = 0; g < G; g++)
            acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(_mm256_loadu_ps(q + g * qs + i), kv));
    }
    if (i < n) {
        const __m256i m = mask_first(n - i);
        const __m256 kv = row8_tail(k, fmt, i, n - i, m);
        for (int g = 0; g < G; g++)
            acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(_mm256_maskload_ps(q + g * qs + i, m), kv));
    }
    for (int g = 0; g < G; g++) out[g * os] = hsum8(acc[g]);
}

/* nq dots against row k, 8 / 4 / 1 at a time */
AVX2_INLINE void dot_heads(const float *q, size_t qs, int nq, const void *k, int fmt, int n, float *out,
                           size_t os) {
    int h = 0;
    for (; h + 8 <= nq; h += 8) dot_group(q + h * qs, qs, k, fmt, n, out + h * os, os, 8);
    if (h + 4 <= nq) {
        dot_group(q + h * qs, qs, k, fmt, n, out + h * os, os, 4);
        h += 4;
    }
    for (; h < nq; h++) dot_group(q + h * qs, qs, k, fmt, n, out + h * os, os, 1);
}

AVX2_FN static void dotn_avx2(const float *q, size_t qs, int nq, const float *k, int n, float *out,
                              size_t os) {
    dot_heads(q, qs, nq, k, DSV4_ROW_F32, n, out, os);
}

/* Heads scored per pass over the rows: dot_heads' group. Their q rows stay in L1 next to
 * the row being read; 16 heads of 512 floats (32 KiB, at a stride that maps them onto few
 * cache sets) would not (1.35x slower measured). */
#define AVX2_SCORE_HEADS 8

AVX2_FN static void dot_rows_avx2(const float *q, size_t qs, int nq, const void *const *rows, int fmt,
                                  int n_rows, int n, float *out, size_t os) {
    for (int h0 = 0; h0 < nq; h0 += AVX2_SCORE_HEADS) {
        const int nh = nq - h0 < AVX2_SCORE_HEADS ? nq - h0 : AVX2_SCORE_HEADS;
        const float *qh = q + (size_t)h0 * qs;
        float *oh = out + (size_t)h0 * os;
        if (fmt == DSV4_ROW_BF16)
            for (int j = 0; j < n_rows; j++) dot_heads(qh, qs, nh, rows[j], DSV4_ROW_BF16, n, oh + j, os);
        else
            for (int j = 0; j < n_rows; j++) dot_heads(qh, qs, nh, rows[j], DSV4_ROW_F32, n, oh + j, os);
    }
}

AVX2_FN static void axpyn_avx2(float *y, size_t ys, int ny, const float *a, size_t as,
                               const float *x, int n) {
    for (int h = 0; h < ny; h++) {
        const __m256 av = _mm256_set1_ps(a[(size_t)h * as]);
        float *yh = y + (size_t)h * ys;
        int c = 0;
        for (; c + 8 <= n; c += 8)
            _mm256_storeu_ps(yh + c, _mm256_add_ps(_mm256_loadu_ps(yh + c),
                                                   _mm256_mul_ps(av, _mm256_loadu_ps(x + c))));
        if (c < n) {
            const __m256i m = mask_first(n - c);
            const __m256 v = _mm256_add_ps(_mm256_maskload_ps(yh + c, m),
                                           _mm256_mul_ps(av, _mm256_maskload_ps(x + c, m)));
            _mm256_maskstore_ps(yh + c, m, v);
        }
    }
}

/* HB heads x CW 8-column chunks of the value sum, starting at column c (the last chunk
 * holding r values, masked by m, when masked), accumulated in registers over all rows: one
 * pass over the rows reads CW chunks of each and adds them into HB*CW accumulators,
 * instead of a load and a store of o per row and head. Each accumulator starts at +0 and
 * adds p*x in ascending row order: the bits of the axpy loop. */
AVX2_INLINE void wsum_block(float *o, size_t os, const float *p, size_t ps, const void *const *rows,
                            int fmt, int n_rows, int c, int r, __m256i m, const int HB, const int CW,
                            const int masked) {
    __m256 acc[4][2];
    for (int h = 0; h < HB; h++)
        for (int k = 0; k < CW; k++) acc[h][k] = _mm256_setzero_ps();
    /* a BF16 block of 16 columns widened by two word unpacks against zero (one shuffle uop
     * per 8 values, where a widening and a shift took two): xv[0] holds columns 0-3 and 8-11,
     * xv[1] 4-7 and 12-15, put back in order by the stores */
    const int unpack = fmt == DSV4_ROW_BF16 && CW == 2 && !masked;
    for (int j = 0; j < n_rows; j++) {
        __m256 xv[2];
        if (unpack) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)((const uint16_t *)rows[j] + c));
            xv[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), w));
            xv[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), w));
        } else {
            for (int k = 0; k < CW; k++)
                xv[k] = masked && k == CW - 1 ? row8_tail(rows[j], fmt, c + 8 * k, r, m) : row8(rows[j], fmt, c + 8 * k);
        }
        for (int h = 0; h < HB; h++) {
            const __m256 pv = _mm256_broadcast_ss(p + h * ps + j);
            for (int k = 0; k < CW; k++) acc[h][k] = _mm256_add_ps(acc[h][k], _mm256_mul_ps(pv, xv[k]));
        }
    }
    if (unpack) {
        for (int h = 0; h < HB; h++) {
            _mm256_storeu_ps(o + h * os + c, _mm256_permute2f128_ps(acc[h][0], acc[h][1], 0x20));
            _mm256_storeu_ps(o + h * os + c + 8, _mm256_permute2f128_ps(acc[h][0], acc[h][1], 0x31));
        }
        return;
    }
    for (int h = 0; h < HB; h++)
        for (int k = 0; k < CW; k++) {
            if (masked && k == CW - 1) _mm256_maskstore_ps(o + h * os + c + 8 * k, m, acc[h][k]);
            else _mm256_storeu_ps(o + h * os + c + 8 * k, acc[h][k]);
        }
}

AVX2_INLINE void wsum_fmt(float *o, size_t os, int nh, const float *p, size_t ps, const void *const *rows,
                          const int fmt, int n_rows, int n) {
    int c = 0;
    for (; c + 16 <= n; c += 16) { /* full 16-column blocks */
        int h = 0;
        for (; h + 4 <= nh; h += 4) wsum_block(o + h * os, os, p + h * ps, ps, rows, fmt, n_rows, c, 8, mask_first(8), 4, 2, 0);
        for (; h < nh; h++) wsum_block(o + h * os, os, p + h * ps, ps, rows, fmt, n_rows, c, 8, mask_first(8), 1, 2, 0);
    }
    if (c < n) { /* the last 1..15 columns: one or two chunks, the last one masked */
        const int w = n - c, r = w > 8 ? w - 8 : w;
        const __m256i m = mask_first(r);
        int h = 0;
        if (w > 8) {
            for (; h + 4 <= nh; h += 4) wsum_block(o + h * os, os, p + h * ps, ps, rows, fmt, n_rows, c, r, m, 4, 2, 1);
            for (; h < nh; h++) wsum_block(o + h * os, os, p + h * ps, ps, rows, fmt, n_rows, c, r, m, 1, 2, 1);
        } else {
            for (; h + 4 <= nh; h += 4) wsum_block(o + h * os, os, p + h * ps, ps, rows, fmt, n_rows, c, r, m, 4, 1, 1);
            for (; h < nh; h++) wsum_block(o + h * os, os, p + h * ps, ps, rows, fmt, n_rows, c, r, m, 1, 1, 1);
        }
    }
}

AVX2_FN static void wsum_avx2(float *o, size_t os, int nh, const float *p, size_t ps, const void *const *rows,
                              int fmt, int n_rows, int n) {
    if (fmt == DSV4_ROW_BF16) wsum_fmt(o, os, nh, p, ps, rows, DSV4_ROW_BF16, n_rows, n);
    else wsum_fmt(o, os, nh, p, ps, rows, DSV4_ROW_F32, n_rows, n);
}

static const dsv4_attn_ops avx2_ops = {dotn_avx2, axpyn_avx2, dot_rows_avx2, wsum_avx2, NULL};
#define HAVE_AVX2_OPS 1
#endif

/* ---- AVX-512 level (attn_ops_x512.c) ------------------------------------------------- */

#if defined(HAVE_AVX2_OPS) && defined(DSV4_HAVE_AVX512)
#include "kernels/attn_x512.h"

/* single-key dots and the axpy are the AVX2 code: they serve only the portable-shaped
 * paths (the indexer's one-query reference, tests) */
static const dsv4_attn_ops x512_ops = {dotn_avx2, axpyn_avx2, dsv4_attn_dot_rows_x512, dsv4_attn_wsum_x512,
                                        dsv4_attn_softmax_x512};
#define HAVE_X512_OPS 1
#endif

const dsv4_attn_ops *dsv4_attn_ops_for(int simd) {
#ifdef HAVE_X512_OPS
    if (simd >= DSV4_SIMD_AVX512) return &x512_ops;
#endif
#ifdef HAVE_AVX2_OPS
    if (simd >= DSV4_SIMD_AVX2) return &avx2_ops;
#endif
    (void)simd;
    return &scalar_ops;
}
