/* linear_avx512.h — the AVX-512 (F/BW/VL/DQ) kernels' shared decoders (private to them).
 *
 * The kernels: linear_avx512.c (the GEMV, level avx512), linear_avx512_vbmi.c (level
 * avx512vbmi: the FP8 table GEMVs), linear_avx512_vbmi_smallm.c (its small-M kernels) and
 * linear_avx512_gemm.c (the
 * GEMM tiles of both levels). The decoders live here so that every path decodes a weight
 * to the same exact value by the same code.
 *
 * Built with the AVX-512 flags (top CMakeLists.txt) and only called after cpu.c has
 * confirmed the CPU and OS support them. Its own code, not the AVX2 kernels recompiled:
 * 16 accumulator lanes (lane l takes columns 16c + l, reduced l + (l + 8) first, then the
 * 8-lane tree; linear_fast.h), masked loads for every tail, and the 32 registers for
 * larger register blocks (4 weight rows at every GEMV width, a 4 x 6 GEMM micro-kernel).
 *
 * Decoding, always to the exact dequantized value of dsv4_mat_row:
 *   F16  vcvtph2ps.  BF16  widen to 32 bits and shift left 16.
 *   FP8  e4m3 byte s.eeee.mmm -> F16 bits s.0eeee.mmm0000000 (sign-extend 32 bytes to
 *        16 bits, shift left 7, clear bit 14): exactly e4m3 / 256, subnormals included;
 *        vcvtph2ps widens it and the product with 256 * scale rounds once, as
 *        e4m3 * scale does. Not the AVX2 GEMV's shortcut of F32 bits e4m3 * 2^-120 with x
 *        prescaled: that makes the e4m3 subnormal codes F32 subnormals, and on Intel cores
 *        every FMA or multiply with a subnormal operand takes a microcode assist (random
 *        FP8 bytes, 6% subnormal codes, ran 100x slower on a Sapphire-Rapids-class Xeon);
 *        vcvtph2ps of an F16 subnormal costs nothing extra. A block whose 256 * scale
 *        overflows is dequantized by dsv4_lin_dequant8. The NaN codes 0x7F/0xFF, which
 *        the bit trick makes finite, are found by a byte scan of each block: b + b
 *        (mod 256) is 0xFE for them and at most 0xFC for every other byte.
 *   FP4  16 weights are 8 bytes = 16 nibbles. vpbroadcastq puts them in every qword, so
 *        dword lane 2q holds bytes 0..3 and lane 2q + 1 bytes 4..7; vpsrlvd by 4q brings
 *        nibble q (column q), resp. nibble 8 + q (column 8 + q), into bits 0..3, and
 *        vpermps reads only those 4 bits as the index into the block's 16-entry table
 *        T[k] = e2m1(k) * scale (signed; per ue8m0 byte in dsv4_lin_tables, built per
 *        block for F32 scales): 2 instructions per 16 weights where AVX2 needs 8. The
 *        lanes then hold the columns in the order 0, 8, 1, 9, .., 7, 15 (fp4_perm): the
 *        GEMV (of both levels) permutes x the same way (once per call) and its
 *        accumulators back before the reduction, the GEMM its decoded tile, so every
 *        lane sums the same columns in the same order on every path.
 *
 * Level avx512vbmi (the same code, plus the VBMI byte permutes where the CPU has them): FP8
 * decodes through byte tables instead. e4m3 -> BF16 is exact (4 significant bits, every
 * exponent normal), so vpermi2b looks up the BF16 high byte (or-ing the sign back in) and
 * the low byte of 64 weights by their 7-bit magnitude (dsv4_lin_tables.e4m3_bf16_*, code
 * 127 is a NaN), a second vpermi2b pair interleaves them so that each dword of the two
 * results holds two BF16 words, and a shift / an and makes F32 of each: 4 x 16 weights in
 * natural column order with 7 instructions instead of 20, no scan (a NaN code decodes to
 * NaN, which the sums carry), no overflow fallback (the weights are multiplied by the
 * scale itself, the reference's single rounding). With the same lanes and chunk order the
 * results are those of level avx512 bit for bit, NaN aside. Cheaper decoding moves the
 * GEMV/GEMM boundary for FP8 from 8 rows to 16 (two 8-row passes, see avx512vbmi_kernels in linear_avx512_vbmi.c).
 */
#ifndef DSV4_LINEAR_AVX512_H
#define DSV4_LINEAR_AVX512_H

#include "kernels/linear_fast.h"

#if defined(DSV4_HAVE_AVX512) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__)
#define DSV4_LIN_AVX512 1

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/codec.h"
#include "kernels/gemv_prefetch.h"

#define AINLINE static inline __attribute__((always_inline))

/* lanes 0 .. n-1 of 16 (n in [0, 16]) */
AINLINE __mmask16 mask16(int n) { return (__mmask16)((1u << n) - 1u); }

/* l + (l + 8) for l < 8, then ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)) */
AINLINE float hsum16(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}

AINLINE float scale_at(const dsv4_mat *w, int64_t idx) {
    if (w->scale_is_f32) return ((const float *)w->scale)[idx];
    return dsv4_e8m0_to_f32(((const uint8_t *)w->scale)[idx]);
}

/* ---- decoders: 16 weights (m < 16: the first m, zero-padded) ---------------------------- */

AINLINE __m512 dec_dense(int fmt, const void *row, int64_t i, int m) {
    const __mmask16 k = mask16(m);
    if (fmt == DSV4_WF_F32) {
        const float *p = (const float *)row + i;
        return m == 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
    }
    const uint16_t *p = (const uint16_t *)row + i;
    const __m256i h = m == 16 ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(k, p);
    if (fmt == DSV4_WF_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 32 e4m3 bytes (m < 32: the first m, zero-padded) -> 2 x 16 exact weights e4m3 * scale,
 * s256 = 256 * scale */
AINLINE void dec_fp8x32(const uint8_t *p, int m, __m512 s256, __m512 *w0, __m512 *w1) {
    const __m256i b = m == 32 ? _mm256_loadu_si256((const __m256i *)p)
                              : _mm256_maskz_loadu_epi8((__mmask32)(((uint64_t)1 << m) - 1), p);
    const __m512i h = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(b), 7), _mm512_set1_epi16((short)0xBFFF));
    *w0 = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), s256);
    *w1 = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), s256);
}

/* running byte max of b + b over n bytes at p: 0xFE somewhere iff an FP8 NaN code */
AINLINE __m512i fp8_nan_scan(__m512i acc, const uint8_t *p, int n) {
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512i v = _mm512_loadu_si512((const void *)(p + i));
        acc = _mm512_max_epu8(acc, _mm512_add_epi8(v, v));
    }
    if (i < n) {
        const __m512i v = _mm512_maskz_loadu_epi8(((__mmask64)1 << (n - i)) - 1, p + i);
        acc = _mm512_max_epu8(acc, _mm512_add_epi8(v, v));
    }
    return acc;
}

AINLINE int fp8_nan_seen(__m512i acc) { return _mm512_cmpeq_epi8_mask(acc, _mm512_set1_epi8((char)0xFE)) != 0; }

/* FP4 lane order: lane 2q holds column q, lane 2q + 1 column 8 + q (see the top) */
static const int32_t fp4_perm[16] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
static const int32_t fp4_unperm[16] = {0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15};

/* 16 FP4 weights (8 bytes at p) in fp4_perm lane order */
AINLINE __m512 dec_fp4(const uint8_t *p, __m512 table) {
    const __m512i shifts = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
    int64_t u;
    memcpy(&u, p, 8);
    return _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi64(u), shifts), table);
}

/* the 16-entry decode table of an F32 scale s: e2m1 code k * s */
AINLINE __m512 fp4_table_f32(float s) {
    const __m512 e2m1 = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                       -2.0f, -3.0f, -4.0f, -6.0f);
    return _mm512_mul_ps(e2m1, _mm512_set1_ps(s));
}

/* the 16-entry decode table of FP4 scale block idx */
AINLINE __m512 fp4_block_table(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t idx) {
    if (!w->scale_is_f32) return _mm512_load_ps(tab->fp4x16[((const uint8_t *)w->scale)[idx]]);
    return fp4_table_f32(((const float *)w->scale)[idx]);
}


/* ---- level avx512vbmi: FP8 through byte tables --------------------------------------------- */

#define VBMI __attribute__((target("avx512vbmi")))

/* The decoder's constants, loaded once per call and kept in registers. */
typedef struct {
    __m512i hi0, hi1, lo0, lo1; /* BF16 high / low bytes of magnitude codes 0..63, 64..127 */
    __m512i mix0, mix1;         /* the byte interleaves for columns 0..31 and 32..63 */
} fp8_tab;

/* mix[c]: dword l = [lo(32c + l), hi(32c + l), lo(32c + 16 + l), hi(32c + 16 + l)], lo from the
 * first source (bit 6 clear), hi from the second */
#define MIX4(c, l) (32 * (c) + (l)), (64 + 32 * (c) + (l)), (32 * (c) + 16 + (l)), (64 + 32 * (c) + 16 + (l))
#define MIX16(c, l) MIX4(c, l), MIX4(c, l + 1), MIX4(c, l + 2), MIX4(c, l + 3)
static const _Alignas(64) uint8_t mix[2][64] = {{MIX16(0, 0), MIX16(0, 4), MIX16(0, 8), MIX16(0, 12)},
                                                {MIX16(1, 0), MIX16(1, 4), MIX16(1, 8), MIX16(1, 12)}};
#undef MIX16
#undef MIX4

AINLINE fp8_tab fp8_tab_load(const dsv4_lin_tables *t) {
    fp8_tab f;
    f.hi0 = _mm512_load_si512((const void *)t->e4m3_bf16_hi);
    f.hi1 = _mm512_load_si512((const void *)(t->e4m3_bf16_hi + 64));
    f.lo0 = _mm512_load_si512((const void *)t->e4m3_bf16_lo);
    f.lo1 = _mm512_load_si512((const void *)(t->e4m3_bf16_lo + 64));
    f.mix0 = _mm512_load_si512((const void *)mix[0]);
    f.mix1 = _mm512_load_si512((const void *)mix[1]);
    return f;
}

/* 64 e4m3 bytes at p (m < 64: the first m, zero-padded) -> w[q] = the exact e4m3 values of
 * columns 16q .. 16q + 15, q < 4 */
AINLINE VBMI void dec_fp8x64_raw(const fp8_tab *t, const uint8_t *p, int m, __m512 w[4]) {
    const __m512i b = m == 64 ? _mm512_loadu_si512((const void *)p)
                              : _mm512_maskz_loadu_epi8(m == 0 ? 0 : (~(__mmask64)0) >> (64 - m), p);
    /* hi | (b & 0x80): the sign back into the high byte */
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t->hi0, b, t->hi1), b,
                                                 _mm512_set1_epi8((char)0x80), 0xF8);
    const __m512i lo = _mm512_permutex2var_epi8(t->lo0, b, t->lo1);
    const __m512i w01 = _mm512_permutex2var_epi8(lo, t->mix0, hi), w23 = _mm512_permutex2var_epi8(lo, t->mix1, hi);
    const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
    w[0] = _mm512_castsi512_ps(_mm512_slli_epi32(w01, 16));
    w[1] = _mm512_castsi512_ps(_mm512_and_si512(w01, top));
    w[2] = _mm512_castsi512_ps(_mm512_slli_epi32(w23, 16));
    w[3] = _mm512_castsi512_ps(_mm512_and_si512(w23, top));
}

/* the same, times the block's scale: the exact weights e4m3 * scale */
AINLINE VBMI void dec_fp8x64(const fp8_tab *t, const uint8_t *p, int m, __m512 scale, __m512 w[4]) {
    dec_fp8x64_raw(t, p, m, w);
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) w[q] = _mm512_mul_ps(w[q], scale);
}

/* ---- the GEMV's register blocks (linear_avx512.c, linear_avx512_vbmi.c) -------------------- */

#define GEMV_R_MAX 4
#define GEMV_NX_MAX 8

/* ---- the entry points the files share ----------------------------------------------------- */

/* level avx512's GEMV (every format), level avx512vbmi's fallback for all but FP8 */
void dsv4_lin_avx512_gemv(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                          int64_t o1);
/* the GEMM tiles of each level (linear_avx512_gemm.c) */
void dsv4_lin_avx512_gemm(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y, int64_t o0,
                          float *scratch);
void dsv4_lin_avx512vbmi_gemm(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                              int64_t o0, float *scratch);
/* The register blocks of level avx512vbmi's small-M in registers (the FP8 bit decode in
 * linear_avx512_vbmi_smallm.c, BF16 and F32 in linear_avx512_vbmi_dense.c) */
#define SMB_R 3  /* weight rows a register block */
#define SMB_NX 8 /* activation rows a pass */

/* the 4 sums of a0..a3, each in hsum16's tree, in lanes 0..3 (sm_store4 without the store) */
AINLINE __m128 sm_sum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));
    const __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
    const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xDD));
    const __m512 z = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4E));
    const __m512 r = _mm512_add_ps(z, _mm512_permute_ps(z, 0xB1));
    return _mm512_castps512_ps128(
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), r));
}

/* A register block's R x NX accumulators (a[r][s]: weight row r, activation row s) summed
 * four at a time by sm_sum4's tree (output k = s * R + r; the last group padded with copies),
 * then into y (NX, rows) at the block's first output */
AINLINE VBMI void smb_store_sums(int R, int NX, __m512 a[][SMB_NX], float *y, int64_t rows) {
    float t[SMB_R * SMB_NX + 3];
    for (int g = 0; g < R * NX; g += 4) {
        __m512 v[4];
        for (int q = 0; q < 4; q++) {
            const int k = g + q < R * NX ? g + q : R * NX - 1;
            v[q] = a[k % R][k / R];
        }
        _mm_storeu_ps(t + g, sm_sum4(v[0], v[1], v[2], v[3]));
    }
    for (int s = 0; s < NX; s++)
        for (int r = 0; r < R; r++) y[(int64_t)s * rows + r] = t[s * R + r];
}

/* level avx512vbmi's small-M for BF16 and F32 weights (linear_avx512_vbmi_dense.c): outputs [o0,
 * o1) of n_rows rows of x, scratch the thread's LIN_SCRATCH_FLOATS */
VBMI void dsv4_lin_avx512vbmi_dense(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                                   int64_t o0, int64_t o1, float *scratch);
/* level avx512vbmi's small-M (linear_avx512_vbmi_smallm.c): outputs [o0, o1) of n_rows rows
 * of x, scratch the thread's LIN_SCRATCH_FLOATS */
VBMI void dsv4_lin_avx512vbmi_smallm(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                                     int64_t o0, int64_t o1, float *scratch);
/* FP4 takes small-M from 5 rows: its fused path (linear_avx512_vbmi_smallm.c) against the FP4
 * GEMV on a prefill's streamed experts (bench_linear --experts --threads 2, fraction of the FMA probe,
 * w13 / w2) at 5 rows 0.706 / 0.690 against 0.567 / 0.530, 6 rows 0.679 / 0.680 against
 * 0.536 / 0.512, 7 rows 0.624 / 0.656 against 0.538 / 0.528; at 4 rows the GEMV 0.734 /
 * 0.695 against 0.678 / 0.657. */
#define SMF_MIN_ROWS 5

#endif
#endif
