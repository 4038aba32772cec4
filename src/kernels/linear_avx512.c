/* linear_avx512.c — AVX-512 (F/BW/VL/DQ) kernels for dsv4_linear.
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
 * GEMV/GEMM boundary for FP8 from 8 rows to 16 (two 8-row passes, see avx512vbmi_kernels).
 */
#include "kernels/linear_fast.h"

#if defined(DSV4_HAVE_AVX512) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__)

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

static float scale_at(const dsv4_mat *w, int64_t idx) {
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

/* the 16-entry decode table of FP4 scale block idx */
AINLINE __m512 fp4_block_table(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t idx) {
    if (!w->scale_is_f32) return _mm512_load_ps(tab->fp4x16[((const uint8_t *)w->scale)[idx]]);
    const __m512 e2m1 = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                       -2.0f, -3.0f, -4.0f, -6.0f);
    return _mm512_mul_ps(e2m1, _mm512_set1_ps(((const float *)w->scale)[idx]));
}

/* ---- GEMV: 1..8 activation rows (NX), R weight rows at a time, weights decoded in
 * registers and used for every activation row. x: (NX, cols), y: (NX, rows). R * NX <= 16
 * accumulators, NX x registers and 2R decoded weights stay within the 32 registers: R = 4
 * up to 4 rows, R = 2 for 5..8 (the small-M tiles of batched decode: each weight is
 * decoded once for all rows of the call). A 32-column step runs as two 16-column halves,
 * so only one half's x rows are live at a time; each accumulator still adds its chunks in
 * ascending order. --------------------------------------------------------------------- */

#define GEMV_R_MAX 4
#define GEMV_NX_MAX 8
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
 * in fp4_perm order, then one FMA per activation row. Level avx512vbmi's natural-order
 * decoder (dec_fp4v: vpmultishiftqb + vpermw) costs 3 uops instead of 2 on the Xeon measured
 * (vpermw zmm is 2 uops there: with an FMA beside it, 1.5 cycles a pair), and a 1..2-row
 * GEMV is bound by those decode uops, not by DRAM: 1.35-1.6x as fast hot in L2
 * (BENCHMARKS.md, session 7). The lane order is paid once: x is permuted into a stack
 * buffer per call (per chunk in registers when NX * cols does not fit it, or with F32
 * scales) and each accumulator back before its reduction. cols % 32 == 0 (checked by the
 * driver). */
#define FP4_XP_FLOATS 8192 /* permuted x on the stack: 32 KB (2 rows of 4096 columns) */

/* R weight rows from o, NX activation rows. xpre: x is (NX, cols) in fp4_perm order (else
 * natural, permuted here per chunk); e8m0: ue8m0 scales (a table load; else a runtime
 * choice per block, fp4_block_table). Both constant after inlining. */
AINLINE void gemv_fp4_rows(int R, int NX, int xpre, int e8m0, const dsv4_lin_tables *tab, const dsv4_mat *w,
                           const float *x, float *y, int64_t o, const gemv_pf *pf) {
    const int64_t n = w->cols, nsb = n / 32, rows = w->rows, rb = n / 2;
    const __m512i perm = _mm512_loadu_si512((const void *)fp4_perm);
    const uint8_t *p = (const uint8_t *)w->w + o * rb; /* (R, rb) */
    const uint8_t *sc = (const uint8_t *)w->scale + o * nsb; /* (R, nsb), ue8m0 */
    __m512 a[GEMV_R_MAX][GEMV_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int s = 0; s < NX; s++) a[r][s] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        pf_step(pf, p, R * b * 16, R * 16);
        __m512 w0[GEMV_R_MAX], w1[GEMV_R_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 t = e8m0 ? _mm512_load_ps(tab->fp4x16[sc[r * nsb + b]]) : fp4_block_table(tab, w, (o + r) * nsb + b);
            w0[r] = dec_fp4(p + r * rb + b * 16, t);
            w1[r] = dec_fp4(p + r * rb + b * 16 + 8, t);
        }
        const float *xb = x + b * 32;
#pragma GCC unroll 8
        for (int s = 0; s < NX; s++) { /* columns 0..15 of the block, then 16..31 */
            const __m512 xv = xpre ? _mm512_load_ps(xb + s * n) : _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xb + s * n));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) a[r][s] = _mm512_fmadd_ps(xv, w0[r], a[r][s]);
        }
#pragma GCC unroll 8
        for (int s = 0; s < NX; s++) {
            const __m512 xv = xpre ? _mm512_load_ps(xb + s * n + 16)
                                   : _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xb + s * n + 16));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) a[r][s] = _mm512_fmadd_ps(xv, w1[r], a[r][s]);
        }
    }
    const __m512i unperm = _mm512_loadu_si512((const void *)fp4_unperm);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int s = 0; s < NX; s++) y[s * rows + o + r] = hsum16(_mm512_permutexvar_ps(unperm, a[r][s]));
}

AINLINE void gemv_fp4_nx(int NX, const dsv4_lin_tables *tab, const dsv4_mat *w, const float *x, float *y, int64_t o0,
                         int64_t o1) {
    const int R = GEMV_R(NX);
    const int64_t n = w->cols, rb = n / 2; /* bytes per row */
    const gemv_pf pf = pf_start((const uint8_t *)w->w + o0 * rb, (const uint8_t *)w->w + o1 * rb, GEMV_PF_FP4);
    if (!w->scale_is_f32) /* the task's ue8m0 scales: cols / 32 bytes a row */
        pf_start((const uint8_t *)w->scale + o0 * (rb / 16), (const uint8_t *)w->scale + o1 * (rb / 16), 4096);
    int64_t o = o0;
    if (NX * n <= FP4_XP_FLOATS && !w->scale_is_f32) { /* the model's case */
        _Alignas(64) float xp[FP4_XP_FLOATS]; /* (NX, n) x in fp4_perm order */
        const __m512i perm = _mm512_loadu_si512((const void *)fp4_perm);
        for (int64_t i = 0; i < NX * n; i += 16)
            _mm512_store_ps(xp + i, _mm512_permutexvar_ps(perm, _mm512_loadu_ps(x + i)));
        for (; o + R <= o1; o += R) gemv_fp4_rows(R, NX, 1, 1, tab, w, xp, y, o, &pf);
        for (; o < o1; o++) gemv_fp4_rows(1, NX, 1, 1, tab, w, xp, y, o, &pf);
    } else { /* F32 scales, or x too long for the stack buffer */
        for (; o + R <= o1; o += R) gemv_fp4_rows(R, NX, 0, 0, tab, w, x, y, o, &pf);
        for (; o < o1; o++) gemv_fp4_rows(1, NX, 0, 0, tab, w, x, y, o, &pf);
    }
}

static void gemv_fp4(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                     int64_t o1) {
    switch (nx) {
    case 1: gemv_fp4_nx(1, c->tab, w, x, y, o0, o1); break;
    case 2: gemv_fp4_nx(2, c->tab, w, x, y, o0, o1); break;
    case 3: gemv_fp4_nx(3, c->tab, w, x, y, o0, o1); break;
    case 4: gemv_fp4_nx(4, c->tab, w, x, y, o0, o1); break;
    case 5: gemv_fp4_nx(5, c->tab, w, x, y, o0, o1); break;
    case 6: gemv_fp4_nx(6, c->tab, w, x, y, o0, o1); break;
    case 7: gemv_fp4_nx(7, c->tab, w, x, y, o0, o1); break;
    default: gemv_fp4_nx(8, c->tab, w, x, y, o0, o1); break;
    }
}

/* One activation row (batch-1 decode): 4 weight rows a block with their accumulators in
 * named registers (the generic kernel's [R][NX] array stays on the stack for NX = 1, and each
 * FMA then waits on a store and a reload: 2.3x slower from L2), every x chunk loaded once
 * for the 4 rows, the prefetch at least one block ahead. Lanes, chunk order and tree as
 * gemv_dense_rows. */
#define G1_DENSE_R 4

AINLINE void gemv1_dense_rows(int fmt, int R, const dsv4_mat *w, const float *x, float *y, int64_t o,
                              const gemv_pf *pf) {
    const int64_t n = w->cols;
    const int esz = fmt == DSV4_WF_F32 ? 4 : 2;
    const char *p = (const char *)w->w + o * n * (int64_t)esz; /* row r at p + r * n * esz */
    __m512 a[G1_DENSE_R];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
    const int64_t nf = n & ~(int64_t)15;
    for (int64_t i = 0; i < nf; i += 16) {
        pf_step(pf, p, R * i * esz, R * 16 * esz);
        const __m512 xv = _mm512_loadu_ps(x + i);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(xv, dec_dense(fmt, p + r * n * esz, i, 16), a[r]);
    }
    if (nf < n) { /* the zero-padded last chunk */
        const int m = (int)(n - nf);
        const __m512 xv = _mm512_maskz_loadu_ps(mask16(m), x + nf);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(xv, dec_dense(fmt, p + r * n * esz, nf, m), a[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) y[o + r] = hsum16(a[r]);
}

AINLINE void gemv1_dense(int fmt, const dsv4_mat *w, const float *x, float *y, int64_t o0, int64_t o1) {
    const int64_t rb = w->cols * (fmt == DSV4_WF_F32 ? 4 : 2); /* bytes per row */
    const int64_t dist = G1_DENSE_R * rb > GEMV_PF_DENSE ? G1_DENSE_R * rb : GEMV_PF_DENSE;
    const gemv_pf pf = pf_start((const char *)w->w + o0 * rb, (const char *)w->w + o1 * rb, dist);
    int64_t o = o0;
    for (; o + G1_DENSE_R <= o1; o += G1_DENSE_R) gemv1_dense_rows(fmt, G1_DENSE_R, w, x, y, o, &pf);
    for (; o < o1; o++) gemv1_dense_rows(fmt, 1, w, x, y, o, &pf);
}

static void gemv_f32(const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0, int64_t o1) {
    if (nx == 1) gemv1_dense(DSV4_WF_F32, w, x, y, o0, o1);
    else gemv_dense(DSV4_WF_F32, w, x, nx, y, o0, o1);
}
static void gemv_f16(const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0, int64_t o1) {
    gemv_dense(DSV4_WF_F16, w, x, nx, y, o0, o1);
}
static void gemv_bf16(const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0, int64_t o1) {
    if (nx == 1) gemv1_dense(DSV4_WF_BF16, w, x, y, o0, o1);
    else gemv_dense(DSV4_WF_BF16, w, x, nx, y, o0, o1);
}

static void gemv_avx512(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                        int64_t o1) {
    switch (w->fmt) {
    case DSV4_WF_F32: gemv_f32(w, x, nx, y, o0, o1); break;
    case DSV4_WF_F16: gemv_f16(w, x, nx, y, o0, o1); break;
    case DSV4_WF_BF16: gemv_bf16(w, x, nx, y, o0, o1); break;
    case DSV4_WF_FP8: gemv_fp8(w, x, nx, y, o0, o1); break;
    case DSV4_WF_FP4: gemv_fp4(c, w, x, nx, y, o0, o1); break;
    default: break;
    }
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

/* FP4, 16 weights (8 bytes at p) in natural column order: every qword of the vector gets
 * the 16 nibbles, vpmultishiftqb moves nibble l to the low bits of word 2l + 1 (bit 4 is the
 * next nibble's, which the table's second copy makes harmless), vpermw looks the words up
 * in the block's 32-word table (dsv4_lin_tables.fp4_bf16) and zeroes the even words: F32
 * e2m1 * scale, exact. 2 instructions (3 uops) per 16 weights, no x permutation: the
 * small-M kernel's panel decoder (the GEMV decodes with dec_fp4 in fewer uops). */
AINLINE VBMI __m512 dec_fp4v(const uint8_t *p, __m512i shifts, __m512i table) {
    int64_t u;
    memcpy(&u, p, 8);
    const __m512i idx = _mm512_multishift_epi64_epi8(shifts, _mm512_set1_epi64(u));
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16((__mmask32)0xAAAAAAAAu, idx, table));
}

/* multishift controls: byte 4l + 2 (the index word of weight l) takes bits 4l .. 4l + 7 */
#define SH4(l) 0, 0, 4 * (l), 0
static const _Alignas(64) uint8_t fp4v_ctl[64] = {SH4(0),  SH4(1),  SH4(2),  SH4(3),  SH4(4),  SH4(5),
                                                  SH4(6),  SH4(7),  SH4(8),  SH4(9),  SH4(10), SH4(11),
                                                  SH4(12), SH4(13), SH4(14), SH4(15)};
#undef SH4
AINLINE __m512i fp4v_shifts(void) { return _mm512_load_si512((const void *)fp4v_ctl); }

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

/* a[r] += x . w[r] over the m (<= 64) columns from i of rows p + r * n, x already scaled
 * (xs) or the weights multiplied by scale (!pre) */
AINLINE VBMI void fp8v1_step(int R, int pre, const fp8_tab *t, const uint8_t *p, int64_t n, const __m512 xs[4], int m,
                             __m512 scale, __m512 a[G1_R]) {
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        __m512 w[4];
        if (pre) dec_fp8x64_raw(t, p + r * n, m, w);
        else dec_fp8x64(t, p + r * n, m, scale, w);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            if (16 * q < m) a[r] = _mm512_fmadd_ps(xs[q], w[q], a[r]);
    }
}

/* R rows o .. o+R-1 in one 128-row scale band */
AINLINE VBMI void gemv1_fp8v_rows(int R, int pre, const fp8_tab *t, const dsv4_mat *w, const float *x, float *y,
                                  int64_t o, const gemv_pf *pf) {
    const int64_t n = w->cols, nsb = (n + 127) / 128, band = o / 128;
    const uint8_t *p = (const uint8_t *)w->w + o * n;
    __m512 a[G1_R];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const int64_t i0 = b * 128, i1 = i0 + 128 < n ? i0 + 128 : n;
        const __m512 scale = _mm512_set1_ps(scale_at(w, band * nsb + b));
        for (int64_t i = i0; i < i1; i += 64) {
            const int m = i1 - i >= 64 ? 64 : (int)(i1 - i);
            pf_step(pf, p, R * i, R * 64);
            __m512 xs[4];
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                const int mq = m - 16 * q; /* the last chunk's x zero-padded, none past it */
                xs[q] = mq >= 16 ? _mm512_loadu_ps(x + i + 16 * q)
                                 : _mm512_maskz_loadu_ps(mq > 0 ? mask16(mq) : 0, x + i + 16 * q);
                if (pre) xs[q] = _mm512_mul_ps(xs[q], scale);
            }
            if (m == 64) fp8v1_step(R, pre, t, p + i, n, xs, 64, scale, a);
            else fp8v1_step(R, pre, t, p + i, n, xs, m, scale, a);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) y[o + r] = hsum16(a[r]);
}

AINLINE VBMI void gemv1_fp8v_pre(int pre, const fp8_tab *t, const dsv4_mat *w, const float *x, float *y, int64_t o0,
                                 int64_t o1) {
    const int64_t n = w->cols, dist = G1_R * n > GEMV_PF_FP8 ? G1_R * n : GEMV_PF_FP8;
    const gemv_pf pf = pf_start((const uint8_t *)w->w + o0 * n, (const uint8_t *)w->w + o1 * n, dist);
    int64_t o = o0;
    /* o0 is a multiple of 4 (linear_fast.c), so a block never straddles a scale band */
    for (; o + G1_R <= o1; o += G1_R) gemv1_fp8v_rows(G1_R, pre, t, w, x, y, o, &pf);
    for (; o < o1; o++) gemv1_fp8v_rows(1, pre, t, w, x, y, o, &pf);
}

static VBMI void gemv1_fp8v(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, float *y, int64_t o0,
                            int64_t o1) {
    const fp8_tab t = fp8_tab_load(c->tab);
    if (c->fp8_prescale) gemv1_fp8v_pre(1, &t, w, x, y, o0, o1);
    else gemv1_fp8v_pre(0, &t, w, x, y, o0, o1);
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

static void gemv_avx512vbmi(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int nx, float *y, int64_t o0,
                            int64_t o1) {
    if (w->fmt == DSV4_WF_FP8 && nx == 1) gemv1_fp8v(c, w, x, y, o0, o1);
    else if (w->fmt == DSV4_WF_FP8) gemv_fp8v(c, w, x, nx, y, o0, o1);
    else gemv_avx512(c, w, x, nx, y, o0, o1); /* FP4 included: see gemv_fp4 */
}

/* ---- small-M (level avx512vbmi): 8..64 activation rows, each weight decoded once -------------
 * The GEMV decodes a weight in registers for at most 8 activation rows, so 16 rows took two
 * passes that decode every weight twice, and its 2 x 8 block of accumulators next to the
 * FP8 tables leaves GCC short of registers. Here a task's weight rows go in panels of
 * LIN_SMALLM_NB = 8 (4 for a task's last 1-4 rows): the panel is decoded once, by the GEMV's
 * own decoders (the same exact values, padding lanes included), into per-thread F32 scratch
 * (8, ld) that stays in L1/L2, and every activation row runs against it in blocks of 3
 * rows, 8 x 3 accumulators in registers (4 x 4 for a 4-row panel) over all the columns:
 * chunks of 16 in ascending order, the last one's x zero-padded, then hsum16's tree. Those are linear_fast.h's lanes and order, so every
 * output is the GEMV's (and the GEMM's) bits, whichever rows share the call. */

#define SM_MR_MAX 4 /* activation rows of the largest register block */

/* row o's columns [0, cols) decoded into dst (cols rounded up to 16, 64-byte aligned) */
static VBMI void sm_decode_row(const dsv4_lin_call *c, const fp8_tab *t, const dsv4_mat *w, int64_t o, float *dst) {
    const int64_t n = w->cols;
    if (w->fmt == DSV4_WF_FP8) {
        const int64_t nsb = (n + 127) / 128, band = o / 128;
        const uint8_t *p = (const uint8_t *)w->w + o * n;
        for (int64_t b = 0; b < nsb; b++) {
            const int64_t i0 = b * 128, i1 = i0 + 128 < n ? i0 + 128 : n;
            const __m512 scale = _mm512_set1_ps(scale_at(w, band * nsb + b));
            for (int64_t i = i0; i < i1; i += 64) {
                const int m = i1 - i >= 64 ? 64 : (int)(i1 - i);
                __m512 v[4];
                dec_fp8x64(t, p + i, m, scale, v);
                for (int q = 0; q < 4 && 16 * q < m; q++) _mm512_store_ps(dst + i + 16 * q, v[q]);
            }
        }
    } else if (w->fmt == DSV4_WF_FP4) { /* cols % 32 == 0 (checked by the driver) */
        const __m512i shifts = fp4v_shifts();
        const int64_t nsb = n / 32;
        const int f32s = w->scale_is_f32;
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2);
        for (int64_t b = 0; b < nsb; b++) {
            const uint8_t sbyte = f32s ? 127 : ((const uint8_t *)w->scale)[o * nsb + b];
            const __m512i tb = _mm512_load_si512((const void *)c->tab->fp4_bf16[sbyte]);
            __m512 w0 = dec_fp4v(p + b * 16, shifts, tb), w1 = dec_fp4v(p + b * 16 + 8, shifts, tb);
            if (f32s) {
                const __m512 sc = _mm512_set1_ps(((const float *)w->scale)[o * nsb + b]);
                w0 = _mm512_mul_ps(w0, sc);
                w1 = _mm512_mul_ps(w1, sc);
            }
            _mm512_store_ps(dst + 32 * b, w0);
            _mm512_store_ps(dst + 32 * b + 16, w1);
        }
    } else { /* F32, F16, BF16 */
        const char *row = (const char *)w->w + o * n * (w->fmt == DSV4_WF_F32 ? 4 : 2);
        for (int64_t i = 0; i < n; i += 16) {
            const int m = n - i >= 16 ? 16 : (int)(n - i);
            const __m512 v = w->fmt == DSV4_WF_F32   ? dec_dense(DSV4_WF_F32, row, i, m)
                             : w->fmt == DSV4_WF_F16 ? dec_dense(DSV4_WF_F16, row, i, m)
                                                     : dec_dense(DSV4_WF_BF16, row, i, m);
            _mm512_store_ps(dst + i, v);
        }
    }
}

/* y[0 .. nb) = the sums of a[0 .. nb), each in hsum16's tree, four outputs at once */
AINLINE void sm_store4(const __m512 a[4], int nb, float *y) {
    /* lanes l + (l + 8), two outputs a vector */
    const __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(a[0], a[1], 0x44), _mm512_shuffle_f32x4(a[0], a[1], 0xEE));
    const __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(a[2], a[3], 0x44), _mm512_shuffle_f32x4(a[2], a[3], 0xEE));
    /* block j: output j's lanes l + (l + 4), l < 4 */
    const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xDD));
    const __m512 z = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4E)); /* (l0 + l2), (l1 + l3) */
    const __m512 r = _mm512_add_ps(z, _mm512_permute_ps(z, 0xB1)); /* lane 4j: output j */
    const __m512 v = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), r);
    _mm_mask_storeu_ps(y, (__mmask8)((1u << nb) - 1u), _mm512_castps512_ps128(v));
}

/* MR activation rows (x, stride n) against NW (4 or 8) panel rows (stride ld): y (MR, rows)
 * at the block's first output, nb of them stored. Per 16 columns NW panel loads (L1) and MR
 * x loads (L1 or L2) feed NW * MR FMAs: x is reloaded once per NW weight rows, so the
 * 8-row panel halves the x stream of the 4-row one. */
AINLINE void sm_rows(int NW, int MR, const float *x, int64_t n, const float *panel, int64_t ld, float *y,
                     int64_t rows, int nb, const char *pf, int64_t pf_step) {
    __m512 a[SM_MR_MAX][LIN_SMALLM_NB];
    for (int s = 0; s < MR; s++)
        for (int j = 0; j < NW; j++) a[s][j] = _mm512_setzero_ps();
    const int64_t nf = n & ~(int64_t)15;
    for (int64_t i = 0; i < nf; i += 16) {
        /* the next panel's weights, a few lines a chunk: issued all at once they fill the
         * line fill buffers and stall the loads behind them */
        if (pf)
            for (int64_t b = 0; b < pf_step; b += 64) _mm_prefetch(pf + i / 16 * pf_step + b, _MM_HINT_T0);
        __m512 xv[SM_MR_MAX];
        for (int s = 0; s < MR; s++) xv[s] = _mm512_loadu_ps(x + s * n + i);
        for (int j = 0; j < NW; j++) {
            __m512 wv = _mm512_load_ps(panel + j * ld + i);
            /* one load per weight vector, used MR times: without this GCC folds it into
             * every FMA, MR loads instead of one, and the loop runs out of load ports */
            __asm__("" : "+v"(wv));
            for (int s = 0; s < MR; s++) a[s][j] = _mm512_fmadd_ps(xv[s], wv, a[s][j]);
        }
    }
    if (nf < n) {
        const __mmask16 k = mask16((int)(n - nf));
        __m512 xv[SM_MR_MAX];
        for (int s = 0; s < MR; s++) xv[s] = _mm512_maskz_loadu_ps(k, x + s * n + nf);
        for (int j = 0; j < NW; j++) {
            const __m512 wv = _mm512_load_ps(panel + j * ld + nf);
            for (int s = 0; s < MR; s++) a[s][j] = _mm512_fmadd_ps(xv[s], wv, a[s][j]);
        }
    }
    for (int s = 0; s < MR; s++) {
        sm_store4(a[s], nb < 4 ? nb : 4, y + s * rows);
        if (NW == 8 && nb > 4) sm_store4(a[s] + 4, nb - 4, y + s * rows + 4);
    }
}

/* all n_rows activation rows against one panel of NW weight rows (nb of them real), while
 * prefetching [pf, pf_end): the next panel's weights, spread over the chunks of the first
 * row blocks */
AINLINE void sm_panel(int NW, const float *x, int n_rows, int64_t n, const float *panel, int64_t ld, float *y,
                      int64_t rows, int nb, const char *pf, const char *pf_end) {
    const int MR = NW == 8 ? 3 : 4; /* NW * MR accumulators: 24 or 16 of the 32 registers */
    const int64_t chunks = (n + 15) / 16, blocks = (n_rows + MR - 1) / MR;
    /* bytes a chunk prefetches, whole lines, so that every block but the last helps */
    const int64_t per_block = ((pf_end - pf) + blocks - 1) / blocks;
    const int64_t step = ((per_block + chunks - 1) / chunks + 63) & ~(int64_t)63;
    for (int s0 = 0; s0 < n_rows; s0 += MR) {
        const char *p = pf < pf_end ? pf : NULL;
        const float *xs = x + (int64_t)s0 * n;
        float *ys = y + (int64_t)s0 * rows;
        switch (n_rows - s0 < MR ? n_rows - s0 : MR) {
        case 1: sm_rows(NW, 1, xs, n, panel, ld, ys, rows, nb, p, step); break;
        case 2: sm_rows(NW, 2, xs, n, panel, ld, ys, rows, nb, p, step); break;
        case 3: sm_rows(NW, 3, xs, n, panel, ld, ys, rows, nb, p, step); break;
        default: sm_rows(NW, 4, xs, n, panel, ld, ys, rows, nb, p, step); break;
        }
        pf += chunks * step;
    }
}

static VBMI void smallm_avx512vbmi(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                                   int64_t o0, int64_t o1, float *scratch) {
    const int64_t n = w->cols, rows = w->rows, ld = (n + 15) & ~(int64_t)15;
    float *panel = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63); /* (LIN_SMALLM_NB, ld) */
    const fp8_tab t = fp8_tab_load(c->tab);
    const int64_t rb = dsv4_mat_bytes(w) / (rows > 0 ? rows : 1); /* weight bytes a row, about */
    const char *wbase = (const char *)w->w;
    for (int64_t o = o0; o < o1;) {
        /* 8 weight rows a panel, 4 for a task's last few (a short task pads less) */
        const int NW = o1 - o > 4 ? 8 : 4;
        const int nb = o1 - o < NW ? (int)(o1 - o) : NW;
        /* the next panel's weights while this one computes (not past the task's rows) */
        const int64_t pe = o + nb + LIN_SMALLM_NB < o1 ? o + nb + LIN_SMALLM_NB : o1;
        const char *pf = wbase + (o + nb) * rb, *pf_end = wbase + pe * rb;
        for (int j = 0; j < nb; j++) sm_decode_row(c, &t, w, o + j, panel + j * ld);
        for (int j = nb; j < NW; j++) memset(panel + j * ld, 0, sizeof(float) * (size_t)ld);
        if (NW == 8) sm_panel(8, x, n_rows, n, panel, ld, y + o, rows, nb, pf, pf_end);
        else sm_panel(4, x, n_rows, n, panel, ld, y + o, rows, nb, pf, pf_end);
        o += nb;
    }
}

/* ---- GEMM: dequantize a (LIN_NB, LIN_KB) tile, then a 4x6 register-blocked kernel -------- */

/* Row o, columns [k0, k0 + kb), into dst, zero-padded to a multiple of 16. */
static void dequant_row(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, int64_t k0, int kb, float *dst) {
    const int64_t n = w->cols;
    for (int l = kb; l < ((kb + 15) & ~15); l++) dst[l] = 0.0f; /* what the 8-wide fallback leaves */
    switch (w->fmt) {
    case DSV4_WF_F32:
    case DSV4_WF_F16:
    case DSV4_WF_BF16: {
        const int fmt = w->fmt;
        const char *p = (const char *)w->w + o * n * (fmt == DSV4_WF_F32 ? 4 : 2);
        for (int c = 0; c < kb; c += 16) {
            const int m = kb - c >= 16 ? 16 : kb - c;
            const __m512 v = fmt == DSV4_WF_F32   ? dec_dense(DSV4_WF_F32, p, k0 + c, m)
                             : fmt == DSV4_WF_F16 ? dec_dense(DSV4_WF_F16, p, k0 + c, m)
                                                  : dec_dense(DSV4_WF_BF16, p, k0 + c, m);
            _mm512_store_ps(dst + c, v);
        }
        break;
    }
    case DSV4_WF_FP8: {
        const int64_t nsb = (n + 127) / 128;
        const uint8_t *p = (const uint8_t *)w->w + o * n + k0;
        for (int c0 = 0; c0 < kb; c0 += 128) { /* k0 is a multiple of 128 */
            const int c1 = c0 + 128 < kb ? c0 + 128 : kb;
            const float s256f = scale_at(w, (o / 128) * nsb + (k0 + c0) / 128) * 256.0f;
            if (isfinite(s256f) && !fp8_nan_seen(fp8_nan_scan(_mm512_setzero_si512(), p + c0, c1 - c0))) {
                const __m512 s256 = _mm512_set1_ps(s256f);
                for (int c = c0; c < c1; c += 32) {
                    __m512 w0, w1;
                    dec_fp8x32(p + c, c1 - c >= 32 ? 32 : c1 - c, s256, &w0, &w1);
                    _mm512_store_ps(dst + c, w0);
                    if (c1 - c > 16) _mm512_store_ps(dst + c + 16, w1);
                }
            } else { /* 256 * scale overflows, or NaN codes: the exact scalar decode */
                for (int c = c0; c < c1; c += 8) dsv4_lin_dequant8(w, o, k0 + c, dst + c);
            }
        }
        break;
    }
    case DSV4_WF_FP4: { /* cols and k0 are multiples of 32: natural column order */
        const __m512i unperm = _mm512_loadu_si512((const void *)fp4_unperm);
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2);
        const int64_t sb = o * (n / 32);
        for (int c = 0; c < kb; c += 32) {
            const __m512 t = fp4_block_table(tab, w, sb + (k0 + c) / 32);
            const uint8_t *q = p + (k0 + c) / 2;
            _mm512_store_ps(dst + c, _mm512_permutexvar_ps(unperm, dec_fp4(q, t)));
            _mm512_store_ps(dst + c + 16, _mm512_permutexvar_ps(unperm, dec_fp4(q + 8, t)));
        }
        break;
    }
    default: break;
    }
}

/* RT activation rows x 6 outputs (MICRO_OUTS). x: row 0 of the tile at column k0 (row
 * stride ldx); wt: 6 tile rows (stride LIN_KB); acc: (RT, LIN_NB, 16) window at this tile.
 * Per 16 columns: RT x loads, 6 weight loads, 6 RT FMAs. The driver runs the windows tile
 * rows outermost, so the 6 x LIN_KB weights stay in L1 and only x comes from L2, 4 loads
 * per 24 FMAs at RT = 4. micro_rt: rows 1..3 (the last rows of a block), an array of
 * accumulators; micro4: the 24 accumulators, 4 x and a weight in 29 of the 32 registers,
 * written out as named variables because GCC 12 keeps a 4 x 6 array on the stack around
 * (and with a masked tail, inside) the chunk loop. */
#define MICRO_OUTS 6
AINLINE void micro_rt(int RT, const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    __m512 a[3][MICRO_OUTS];
    for (int r = 0; r < RT; r++)
        for (int j = 0; j < MICRO_OUTS; j++)
            a[r][j] = init ? _mm512_setzero_ps() : _mm512_load_ps(acc + (r * LIN_NB + j) * 16);
    for (int c = 0; c < kb; c += 16) {
        const __mmask16 m = kb - c >= 16 ? (__mmask16)0xFFFF : mask16(kb - c);
        __m512 xv[3];
        for (int r = 0; r < RT; r++) xv[r] = _mm512_maskz_loadu_ps(m, x + r * ldx + c);
        for (int j = 0; j < MICRO_OUTS; j++) {
            const __m512 wv = _mm512_load_ps(wt + j * LIN_KB + c);
            for (int r = 0; r < RT; r++) a[r][j] = _mm512_fmadd_ps(xv[r], wv, a[r][j]);
        }
    }
    for (int r = 0; r < RT; r++)
        for (int j = 0; j < MICRO_OUTS; j++) _mm512_store_ps(acc + (r * LIN_NB + j) * 16, a[r][j]);
}

/* accumulator of row r, output j; one statement per output j of the window */
#define M4_ACC(r, j) a##r##j
#define M4_EACH(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5)
#define M4_DECL(j) __m512 M4_ACC(0, j), M4_ACC(1, j), M4_ACC(2, j), M4_ACC(3, j);
#define M4_INIT(j)                                                                  \
    M4_ACC(0, j) = init ? _mm512_setzero_ps() : _mm512_load_ps(acc + (0 * LIN_NB + j) * 16); \
    M4_ACC(1, j) = init ? _mm512_setzero_ps() : _mm512_load_ps(acc + (1 * LIN_NB + j) * 16); \
    M4_ACC(2, j) = init ? _mm512_setzero_ps() : _mm512_load_ps(acc + (2 * LIN_NB + j) * 16); \
    M4_ACC(3, j) = init ? _mm512_setzero_ps() : _mm512_load_ps(acc + (3 * LIN_NB + j) * 16);
#define M4_FMA(j)                                                          \
    {                                                                      \
        const __m512 wv = _mm512_load_ps(wt + j * LIN_KB + c);             \
        M4_ACC(0, j) = _mm512_fmadd_ps(x0, wv, M4_ACC(0, j));              \
        M4_ACC(1, j) = _mm512_fmadd_ps(x1, wv, M4_ACC(1, j));              \
        M4_ACC(2, j) = _mm512_fmadd_ps(x2, wv, M4_ACC(2, j));              \
        M4_ACC(3, j) = _mm512_fmadd_ps(x3, wv, M4_ACC(3, j));              \
    }
#define M4_STORE(j)                                                    \
    _mm512_store_ps(acc + (0 * LIN_NB + j) * 16, M4_ACC(0, j));        \
    _mm512_store_ps(acc + (1 * LIN_NB + j) * 16, M4_ACC(1, j));        \
    _mm512_store_ps(acc + (2 * LIN_NB + j) * 16, M4_ACC(2, j));        \
    _mm512_store_ps(acc + (3 * LIN_NB + j) * 16, M4_ACC(3, j));

static void micro4(const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    M4_EACH(M4_DECL)
    M4_EACH(M4_INIT)
    const int nf = kb & ~15;
    for (int c = 0; c < nf; c += 16) {
        /* the next window's x rows (the driver's next call, 4 rows down): from L2 or L3
         * they would stall every chunk; a prefetch past the block's rows never faults */
        for (int r = 4; r < 8; r++) _mm_prefetch((const char *)(x + r * ldx + c), _MM_HINT_T0);
        const __m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + ldx + c);
        const __m512 x2 = _mm512_loadu_ps(x + 2 * ldx + c), x3 = _mm512_loadu_ps(x + 3 * ldx + c);
        M4_EACH(M4_FMA)
    }
    if (nf < kb) { /* the zero-padded last chunk (the tile's weights are padded already) */
        const int c = nf;
        const __mmask16 m = mask16(kb - nf);
        const __m512 x0 = _mm512_maskz_loadu_ps(m, x + c), x1 = _mm512_maskz_loadu_ps(m, x + ldx + c);
        const __m512 x2 = _mm512_maskz_loadu_ps(m, x + 2 * ldx + c), x3 = _mm512_maskz_loadu_ps(m, x + 3 * ldx + c);
        M4_EACH(M4_FMA)
    }
    M4_EACH(M4_STORE)
}

static void micro3(const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    micro_rt(3, x, ldx, wt, kb, acc, init);
}
static void micro2(const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    micro_rt(2, x, ldx, wt, kb, acc, init);
}
static void micro1(const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    micro_rt(1, x, ldx, wt, kb, acc, init);
}

/* The 16 outputs of a row reduced together, each in hsum16's tree (l + (l + 8), then
 * + 4, + 2, + 1; a + b == b + a exactly, so only the pairing matters): every level of the
 * tree adds two vectors that hold the halves of two or more outputs side by side, 15 adds
 * and 31 shuffles for 16 outputs where 16 hsum16 take 128 instructions (the reduction was
 * 4.8 % of a 512-token prefill's samples). Slots past nb hold zero weights' sums or zeros
 * (linear_tile.c) and are not stored. */
static void reduce_row16(const float *acc, int nb, float *y) {
    __m512 t[8], u[4], z[2];
    for (int i = 0; i < 8; i++) { /* t[i] = [v(2i) l + v(2i) l+8 for l < 8, the same for v(2i+1)] */
        const __m512 a = _mm512_load_ps(acc + 32 * i), b = _mm512_load_ps(acc + 32 * i + 16);
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    for (int k = 0; k < 4; k++) /* quarter q of u[k]: output 4k + q, lanes l + (l + 4) */
        u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], 0x88),
                             _mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], 0xDD));
    for (int m = 0; m < 2; m++) /* quarter q of z[m]: outputs 8m + q, 8m + 4 + q, lanes l + (l + 2) */
        z[m] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * m], u[2 * m + 1], 0x44),
                             _mm512_shuffle_ps(u[2 * m], u[2 * m + 1], 0xEE));
    /* lane 4q + p: output q + 4p */
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_mask_storeu_ps(y, mask16(nb), _mm512_permutexvar_ps(order, r));
}

static const dsv4_lin_tile_level avx512_tiles = {16, 4, MICRO_OUTS, dequant_row, {micro1, micro2, micro3, micro4},
                                                 reduce_row16};

static void gemm_avx512(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y, int64_t o0,
                        float *scratch) {
    dsv4_lin_gemm_tiled(&avx512_tiles, c, w, x, n_rows, y, o0, scratch);
}

/* 8 rows a GEMV call; up to 16 rows (two passes) for every format but FP8, whose second
 * pass decodes (and NaN-scans) every weight again: at 16 rows on the decode shapes the two
 * passes beat the tile GEMM 1.4-2.3x for BF16 and 1.0-1.7x for FP4, but FP8 ran at
 * 0.7-1.15x (bench_linear --decode --rows 16, BENCHMARKS.md). No prescaled FP8. */
static const dsv4_lin_kernels avx512_kernels = {GEMV_NX_MAX, 16, GEMV_NX_MAX, gemv_avx512, gemm_avx512, NULL, {0}, NULL};

const dsv4_lin_kernels *dsv4_lin_kernels_avx512(void) { return &avx512_kernels; }

/* level avx512vbmi's tiles: FP8 rows through the byte tables (no NaN scan, no fallback) */
static VBMI void dequant_row_vbmi(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, int64_t k0, int kb,
                                  float *dst) {
    if (w->fmt != DSV4_WF_FP8) {
        dequant_row(tab, w, o, k0, kb, dst);
        return;
    }
    const fp8_tab t = fp8_tab_load(tab);
    const int64_t n = w->cols, nsb = (n + 127) / 128;
    const uint8_t *p = (const uint8_t *)w->w + o * n + k0;
    for (int l = kb; l < ((kb + 15) & ~15); l++) dst[l] = 0.0f;
    for (int c0 = 0; c0 < kb; c0 += 128) { /* k0 is a multiple of 128 */
        const int c1 = c0 + 128 < kb ? c0 + 128 : kb;
        const __m512 scale = _mm512_set1_ps(scale_at(w, (o / 128) * nsb + (k0 + c0) / 128));
        for (int c = c0; c < c1; c += 64) {
            const int m = c1 - c >= 64 ? 64 : c1 - c;
            __m512 v[4];
            dec_fp8x64(&t, p + c, m, scale, v);
            for (int q = 0; q < 4 && 16 * q < m; q++) _mm512_store_ps(dst + c + 16 * q, v[q]);
        }
    }
}

static const dsv4_lin_tile_level avx512vbmi_tiles = {16, 4, MICRO_OUTS, dequant_row_vbmi,
                                                     {micro1, micro2, micro3, micro4}, reduce_row16};

static void gemm_avx512vbmi(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                            int64_t o0, float *scratch) {
    dsv4_lin_gemm_tiled(&avx512vbmi_tiles, c, w, x, n_rows, y, o0, scratch);
}

/* 8 rows a GEMV call, up to 16 in two passes for every format: with the table decode the
 * two FP8 passes beat the tile GEMM at 12 and 16 rows on 5 of the 7 decode shapes
 * (1.1-1.5x; wq_a and wo_b 0.87-0.99x; bench_linear --decode --rows 12,16, BENCHMARKS.md).
 * One pass of 16 rows at one weight row (16 accumulators) ran 0.5-1.25x the GEMM: each x
 * load then feeds a single FMA. */
static const dsv4_lin_kernels avx512vbmi_kernels = {
    GEMV_NX_MAX, 16, 16, gemv_avx512vbmi, gemm_avx512vbmi, fp8v_prescale,
    /* small-M from 8 rows for FP8 and FP4, 17 for the dense formats, up to 32 (the GEMM
     * before): against two 8-row GEMV passes on the decode shapes at 16 rows it ran FP8
     * 1.0-2.1x, FP4 1.05-1.8x, BF16 0.71-1.35x (the head 0.71); at 8 rows FP8 0.94-1.6x,
     * FP4 1.0-2.2x but the 8192-row head 0.70x, BF16 0.54-0.95x; at 32 rows, against the
     * tile GEMM, 1.16-2.6x for all three (bench_linear --decode --rows 4,8,16,32,
     * BENCHMARKS.md); up to 64 rows where x is at most LIN_SMALLM_BIG_X_FLOATS
     * (linear_fast.h) */
    {[DSV4_WF_F32] = 17, [DSV4_WF_F16] = 17, [DSV4_WF_BF16] = 17, [DSV4_WF_FP8] = 8, [DSV4_WF_FP4] = 8},
    smallm_avx512vbmi};

const dsv4_lin_kernels *dsv4_lin_kernels_avx512vbmi(void) { return &avx512vbmi_kernels; }

#else

const dsv4_lin_kernels *dsv4_lin_kernels_avx512(void) { return 0; }
const dsv4_lin_kernels *dsv4_lin_kernels_avx512vbmi(void) { return 0; }

#endif
