/* linear_avx2.h — the AVX2 kernels' shared decoders (private to them).
 *
 * The kernels: linear_avx2.c (the GEMV) and linear_avx2_gemm.c (the GEMM tiles). The decoders
 * live here so that every path decodes a weight to the same exact value by the same code.
 *
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
 *   FP4B   (the shuffle layout, fp4_shuf.h; ue8m0 scales only) every e2m1 value times a power
 *          of two is exactly a BF16 value, so the 16 values of a scale byte are two 16-byte
 *          tables (low, high BF16 bytes: dsv4_lin_tables.fp4s, the lanes table's bits). Per
 *          32-byte chunk (64 weights, blocks A and B): the low (A) or high (B) nibbles as
 *          indices (vpsrlw, vpand), vpshufb in each table, vpunpck{l,h}bw of the two results:
 *          BF16 words; vpslld 16 and vpand 0xffff0000 make F32 of a dword's low and high
 *          word, the block's columns 0-7, 8-15, 16-23, 24-31 by the layout's byte order. Per
 *          64 weights 13 shuffle/shift uops (the lanes decode: ~32) and 6 logic; F32 scales
 *          (not BF16-exact) read FP4B through dsv4_lin_dequant_fp4b and the GEMM.
 *   FP8 NaN codes 0x7F/0xFF, which both bit tricks make finite (+-480 * scale), are found
 *          by a byte scan of each 128-column block: b + b (mod 256) is 0xFE for them and at
 *          most 0xFC for every other byte. The GEMV then stores NaN for that weight row's
 *          outputs, the GEMM dequantizes the block with dsv4_lin_dequant8 (NaN weights), as
 *          the portable level and the reference do.
 */
#ifndef DSV4_LINEAR_AVX2_H
#define DSV4_LINEAR_AVX2_H

#include "kernels/linear_fast.h"

#if defined(DSV4_HAVE_AVX2) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define DSV4_LIN_AVX2 1

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/codec.h"
#include "kernels/gemv_prefetch.h"

#define AINLINE static inline __attribute__((always_inline))

static const int32_t tail_masks[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* lanes 0 .. n-1 set, n in [1, 8] */
AINLINE __m256i mask_first(int n) {
    return _mm256_loadu_si256((const __m256i *)(tail_masks + 8 - n));
}

/* ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)) */
AINLINE float hsum8(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}

AINLINE float scale_at(const dsv4_mat *w, int64_t idx) {
    if (w->scale_is_f32) return ((const float *)w->scale)[idx];
    return dsv4_e8m0_to_f32(((const uint8_t *)w->scale)[idx]);
}

/* ---- decoders -------------------------------------------------------------------------- */

AINLINE __m256 dec_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

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
    return _mm256_castsi256_ps(
        _mm256_and_si256(_mm256_slli_epi32(v, 20), _mm256_set1_epi32((int)0x87F00000u)));
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
    const __m256i k28 =
        _mm256_setr_epi32(0, 1 << 28, 2 << 28, 3 << 28, 4 << 28, 5 << 28, 6 << 28, 7 << 28);
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

/* 32 weights of an FP4B (shuffle layout, fp4_shuf.h) chunk P: block h (0: A, the low nibbles;
 * 1: B, the high ones; a constant after inlining) with the block's BF16 byte tables t (lo[16],
 * hi[16]: dsv4_lin_tables.fp4s), into w[0..3] = the block's columns 0-7, 8-15, 16-23, 24-31 */
AINLINE void dec_fp4s(__m256i P, int h, const uint8_t *t, __m256 w[4]) {
    const __m256i m = _mm256_set1_epi8(15), hw = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i idx = _mm256_and_si256(h ? _mm256_srli_epi16(P, 4) : P, m);
    /* vbroadcasti128 from memory: a load, no shuffle uop */
    const __m256i lo = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)t)), idx);
    const __m256i hi = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(t + 16))), idx);
    const __m256i w0 = _mm256_unpacklo_epi8(lo, hi), w1 = _mm256_unpackhi_epi8(lo, hi); /* BF16 words */
    w[0] = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
    w[1] = _mm256_castsi256_ps(_mm256_and_si256(w0, hw));
    w[2] = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
    w[3] = _mm256_castsi256_ps(_mm256_and_si256(w1, hw));
}

/* The decode table of FP4 scale block idx: precomputed per ue8m0 byte (same bits as
 * fp4_table, see dsv4_lin_tables_init), built on the fly for F32 scales. */
AINLINE __m256 fp4_block_table(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t idx) {
    if (!w->scale_is_f32)
        return _mm256_load_ps((const float *)tab->fp4[((const uint8_t *)w->scale)[idx]]);
    return fp4_table(((const float *)w->scale)[idx]);
}

/* Row o of w, columns [k0, k0 + kb) (k0 a multiple of 128), decoded to F32 into dst, zero-padded to a
 * multiple of 8: the GEMM tiles' and the small-M panels' one decoder (linear_avx2_gemm.c) */
void dsv4_lin_avx2_dequant_row(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, int64_t k0, int kb,
                               float *dst);

/* the GEMM of level avx2 (linear_avx2_gemm.c) */
void dsv4_lin_gemm_avx2(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows,
                        float *y, int64_t o0, float *scratch);
/* the small-M kernel of level avx2 (linear_avx2_smallm.c) */
void dsv4_lin_avx2_smallm(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows,
                          float *y, int64_t o0, int64_t o1, float *scratch);

#endif
#endif
