/* attn_x512.h — AVX-512 pieces shared by the attention and indexer kernels (attn_ops.c,
 * idx_scores.c): loading F32 or BF16 row values into FP32 lanes, and the 8-lane reduction
 * tree of attn_ops.h on two dots at once. Included only by files that guard it with
 * DSV4_HAVE_AVX512; the functions carry their own target attribute (no "fma": multiply
 * and add stay two roundings), so the including file needs no ISA flags.
 */
#ifndef DSV4_KERNELS_ATTN_X512_H
#define DSV4_KERNELS_ATTN_X512_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kv_rows.h"
#include "kernels/swiglu.h"

#define X512 "avx512f,avx512dq,avx512vl,avx512bw"
#define X512_FN __attribute__((target(X512)))
#define X512_INLINE static inline __attribute__((always_inline, target(X512)))

/* 8 BF16 values (bits in 16-bit lanes) as FP32: shifted into the upper halves, exact. */
/* lanes [0, min(w, 16)) of a 16-lane mask (w >= 1) */
X512_INLINE __mmask16 x512_mask16(int w) { return w >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << w) - 1); }

X512_INLINE __m256 x512_bf16x8(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Values [i, i + 8) of a row in fmt (DSV4_ROW_F32 or _BF16), lanes outside m zero (and not
 * read). */
X512_INLINE __m256 x512_row8(const void *row, int fmt, int64_t i, __mmask8 m) {
    if (fmt == DSV4_ROW_BF16) return x512_bf16x8(_mm_maskz_loadu_epi16(m, (const uint16_t *)row + i));
    return _mm256_maskz_loadu_ps(m, (const float *)row + i);
}

/* Values [i, i + 16) of a row in fmt, lanes outside m zero (and not read). */
X512_INLINE __m512 x512_row16(const void *row, int fmt, int64_t i, __mmask16 m) {
    if (fmt == DSV4_ROW_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i)), 16));
    return _mm512_maskz_loadu_ps(m, (const float *)row + i);
}

/* Chunk i..i+8 of row a in lanes 0-7 and of row b in lanes 8-15. BF16: both halves'
 * 16 bytes side by side, then one widening and one shift for all 16 lanes (3 vector uops
 * instead of 5 for two 8-lane widenings and the insert). */
X512_INLINE __m512 x512_pair8(const void *a, const void *b, int fmt, int64_t i, __mmask8 m) {
    if (fmt == DSV4_ROW_BF16) {
        const __m256i ab = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_maskz_loadu_epi16(m, (const uint16_t *)a + i)),
            _mm_maskz_loadu_epi16(m, (const uint16_t *)b + i), 1);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ab), 16));
    }
    return _mm512_insertf32x8(_mm512_castps256_ps512(x512_row8(a, fmt, i, m)), x512_row8(b, fmt, i, m), 1);
}

/* Per 8-lane half: ((l0+l4) + (l1+l5)) + ((l2+l6) + (l3+l7)) (attn_ops.h), the result in
 * lanes 0 and 8. Additions commute bit for bit, so the mirrored lanes hold the same sums. */
X512_INLINE __m512 x512_tree8x2(__m512 v) {
    const __m512 s = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1))); /* l + (l + 4) */
    const __m512 t = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(2, 3, 0, 1)));      /* s0+s1, s2+s3 */
    return _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(1, 0, 3, 2)));                /* (..) + (..) */
}

/* Brings a row's bytes toward L1 ahead of its use: K=V rows are scattered over cache pages
 * (1-2 KB each at Flash's head dim), too short for the hardware prefetcher to ramp up
 * before the row ends. */
X512_INLINE void x512_prefetch_row(const void *row, int fmt, int n) {
    const char *p = row;
    const int bytes = n * (fmt == DSV4_ROW_BF16 ? 2 : 4);
    for (int b = 0; b < bytes; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
}

/* Lane 8 of v (the second dot of a tree8x2 pair). */
X512_INLINE float x512_lane8(__m512 v) { return _mm512_cvtss_f32(_mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(0, 0, 0, 2))); }

/* The AVX-512 level's scores and value sum (attn_ops_x512.c): attn_ops.h's dot_rows and
 * wsum. */
X512_FN void dsv4_attn_dot_rows_x512(const float *q, size_t qs, int nq, const void *const *rows, int fmt,
                                     int n_rows, int n, float *out, size_t os);
X512_FN void dsv4_attn_wsum_x512(float *o, size_t os, int nh, const float *p, size_t ps, const void *const *rows,
                                 int fmt, int n_rows, int n);
/* attn_ops.h's softmax at this level (attn_ops_x512.c). */
X512_FN void dsv4_attn_softmax_x512(float *p, int n, int nh, const float *sink, float scale, dsv4_expf_rows_fn ex);

#endif
