/* linear_avx512_gemm.c — the GEMM tiles of levels avx512 and avx512vbmi for the shared tile
 * driver (linear_tile.c): each (LIN_NB, LIN_KB) weight tile dequantized exactly, then a 4 x 6
 * register-blocked micro-kernel and a 16-output reduction in hsum16's tree. */
#include "kernels/linear_avx512.h"
#include "util/hot.h"

#ifdef DSV4_LIN_AVX512

/* ---- GEMM: dequantize a (LIN_NB, LIN_KB) tile, then a 4x6 register-blocked kernel -------- */

/* Row o, columns [k0, k0 + kb), into dst, zero-padded to a multiple of 16. */
DSV4_HOT_AT(dequant_row, 0x6d0)
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
    case DSV4_WF_FP4L: { /* the lanes layout (kernels/fp4_lanes.h): cols, k0 and kb multiples of 128 */
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2) + k0 / 2;
        const int64_t sb = o * (n / 32) + k0 / 32;
        for (int c = 0; c < kb; c += 128) {
            /* one line of 128 columns: word i's nibble k is column c + 16k + i, so the line
             * shifted by 4k and looked up in the scale block's table (dec_fp4's values) gives
             * columns c + 16k .. + 15 in natural order, no unpermute */
            const __m512i v = _mm512_loadu_si512((const void *)(p + c / 2));
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                const __m512 t = fp4_block_table(tab, w, sb + c / 32 + q);
                _mm512_store_ps(dst + c + 32 * q, _mm512_permutexvar_ps(q ? _mm512_srli_epi32(v, 8 * q) : v, t));
                _mm512_store_ps(dst + c + 32 * q + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(v, 8 * q + 4), t));
            }
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

/* No software prefetch of the next window's x rows: on Zen 5 the 4 prefetches a chunk (rows
 * 4..7, the same L1 set as rows 0..3 when the row stride is 4 or 8 KB) made the task 1.2x
 * slower at K = 1024 and 2048 (in-process, one thread, 512 rows); the hardware prefetcher
 * follows the 4 row streams. The last chunk's x is zero-padded (the tile's weights are). */
#define M4_LOOP                                                                                                  \
    const int nf = kb & ~15;                                                                                     \
    for (int c = 0; c < nf; c += 16) {                                                                           \
        const __m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + ldx + c);                             \
        const __m512 x2 = _mm512_loadu_ps(x + 2 * ldx + c), x3 = _mm512_loadu_ps(x + 3 * ldx + c);               \
        M4_EACH(M4_FMA)                                                                                          \
    }                                                                                                            \
    if (nf < kb) {                                                                                               \
        const int c = nf;                                                                                        \
        const __mmask16 m = mask16(kb - nf);                                                                     \
        const __m512 x0 = _mm512_maskz_loadu_ps(m, x + c), x1 = _mm512_maskz_loadu_ps(m, x + ldx + c);           \
        const __m512 x2 = _mm512_maskz_loadu_ps(m, x + 2 * ldx + c), x3 = _mm512_maskz_loadu_ps(m, x + 3 * ldx + c); \
        M4_EACH(M4_FMA)                                                                                          \
    }

DSV4_HOT_AT(micro4, 0x290)
static void micro4(const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    M4_EACH(M4_DECL)
    M4_EACH(M4_INIT)
    M4_LOOP
    M4_EACH(M4_STORE)
}

/* The levels of hsum16's tree (reduce_row16's), each adding two vectors that hold parts of
 * several outputs side by side. red_pair: lanes 0-7 a's l + (l + 8), lanes 8-15 b's; red_quad
 * (of two red_pairs): quarter q the q-th output's l + (l + 4); red_oct (of two red_quads):
 * in each quarter two lanes of the first vector's output, two of the second's, l + (l + 2);
 * red_last: lane p of a quarter the sum of its lanes 2p, 2p + 1 (z0's: p 0, 1; z1's: 2, 3). */
AINLINE __m512 red_pair(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_mask_blend_ps(0xFF00, a, b), _mm512_shuffle_f32x4(a, b, 0x4E));
}
AINLINE __m512 red_quad(__m512 t0, __m512 t1) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(t0, t1, 0x88), _mm512_shuffle_f32x4(t0, t1, 0xDD));
}
AINLINE __m512 red_oct(__m512 u0, __m512 u1) {
    return _mm512_add_ps(_mm512_shuffle_ps(u0, u1, 0x44), _mm512_shuffle_ps(u0, u1, 0xEE));
}
AINLINE __m512 red_last(__m512 z0, __m512 z1) {
    return _mm512_add_ps(_mm512_shuffle_ps(z0, z1, 0x88), _mm512_shuffle_ps(z0, z1, 0xDD));
}

/* micro4 on a row's last column tile, its 24 sums reduced in registers and stored in y (4
 * rows ldy apart, nv outputs each) instead of stored in acc for reduce_row16's pass over the
 * (LIN_MB, LIN_NB, 16) block (147 KB: out of L1, ~17 % of a K = 256 product's time on Zen 5
 * went to that pass). The same tree per output as reduce_row16, so the same bits. */
DSV4_HOT_AT(micro4_last, 0xf40)
static void micro4_last(const float *x, int64_t ldx, const float *wt, int kb, const float *acc, int init, float *y,
                        int64_t ldy, int nv) {
    M4_EACH(M4_DECL)
    M4_EACH(M4_INIT)
    M4_LOOP
    /* row r's outputs 0-3: quarters of u_r; outputs 4, 5 of rows 0, 1 in u45a, of rows 2, 3 in u45b */
    const __m512 u0 = red_quad(red_pair(a00, a01), red_pair(a02, a03));
    const __m512 u1 = red_quad(red_pair(a10, a11), red_pair(a12, a13));
    const __m512 u2 = red_quad(red_pair(a20, a21), red_pair(a22, a23));
    const __m512 u3 = red_quad(red_pair(a30, a31), red_pair(a32, a33));
    const __m512 u45a = red_quad(red_pair(a04, a05), red_pair(a14, a15)); /* r0 o4, r0 o5, r1 o4, r1 o5 */
    const __m512 u45b = red_quad(red_pair(a24, a25), red_pair(a34, a35)); /* r2 o4, r2 o5, r3 o4, r3 o5 */
    /* r: lane 4q + s is row s's output q (q < 4); r45: lane 0 r0 o4, 1 r2 o4, 4 r0 o5, 5 r2 o5,
     * 8 r1 o4, 9 r3 o4, 12 r1 o5, 13 r3 o5 */
    const __m512 r = red_last(red_oct(u0, u1), red_oct(u2, u3));
    const __m512 z45 = red_oct(u45a, u45b);
    const __m512 r45 = red_last(z45, z45);
    /* rows 0 and 2 in lanes 0-5, rows 1 and 3 in lanes 8-13 (16 + i: r45's lane i) */
    const __m512 v01 = _mm512_permutex2var_ps(r, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 0, 0, 1, 5, 9, 13, 24, 28, 0, 0), r45);
    const __m512 v23 = _mm512_permutex2var_ps(r, _mm512_setr_epi32(2, 6, 10, 14, 17, 21, 0, 0, 3, 7, 11, 15, 25, 29, 0, 0), r45);
    const __mmask8 m = (__mmask8)((1u << nv) - 1u);
    _mm256_mask_storeu_ps(y, m, _mm512_castps512_ps256(v01));
    _mm256_mask_storeu_ps(y + ldy, m, _mm512_extractf32x8_ps(v01, 1));
    _mm256_mask_storeu_ps(y + 2 * ldy, m, _mm512_castps512_ps256(v23));
    _mm256_mask_storeu_ps(y + 3 * ldy, m, _mm512_extractf32x8_ps(v23, 1));
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
 * tree adds two vectors that hold the halves of two or more outputs side by side, 15 adds,
 * 23 shuffles and 8 blends for 16 outputs where 16 hsum16 take 128 instructions (the
 * reduction was 4.8 % of a 512-token prefill's samples; the first level's blends, in place
 * of 8 shuffles, 0.97-0.99x the GEMM task's time at K = 256 on Zen 5, in-process). Slots
 * past nb hold zero weights' sums or zeros (linear_tile.c) and are not stored. */
static void reduce_row16(const float *acc, int nb, float *y) {
    __m512 t[8], u[4], z[2];
    for (int i = 0; i < 8; i++) { /* t[i] = [v(2i) l + v(2i) l+8 for l < 8, the same for v(2i+1)] */
        const __m512 a = _mm512_load_ps(acc + 32 * i), b = _mm512_load_ps(acc + 32 * i + 16);
        /* [a lo | b hi] + [a hi | b lo]: b's halves added the other way round, the same sum */
        t[i] = _mm512_add_ps(_mm512_mask_blend_ps(0xFF00, a, b), _mm512_shuffle_f32x4(a, b, 0x4E));
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
    const __m512 v = _mm512_permutexvar_ps(order, r);
    /* 16 outputs: a plain store. The masked one cost Zen 5 ~7 % of a K = 256 GEMM (8192 x
     * 256, 512 rows, 2 threads, in-process: 0.93x the time without it) */
    if (nb == 16) _mm512_storeu_ps(y, v);
    else _mm512_mask_storeu_ps(y, mask16(nb), v);
}

static const dsv4_lin_tile_level avx512_tiles = {16, 4, MICRO_OUTS, dequant_row, {micro1, micro2, micro3, micro4},
                                                 reduce_row16, micro4_last, 1 /* dequant_row reads FP4L */,
                                                 0 /* FP4B: dsv4_lin_dequant_fp4b */};

void dsv4_lin_avx512_gemm(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y, int64_t o0,
                          float *scratch) {
    dsv4_lin_gemm_tiled(&avx512_tiles, c, w, x, n_rows, y, o0, scratch);
}

/* level avx512vbmi's tiles: FP8 rows through the byte tables (no NaN scan, no fallback) */
DSV4_HOT_AT(dequant_row_vbmi, 0xd60)
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
                                                     {micro1, micro2, micro3, micro4}, reduce_row16, micro4_last,
                                                     1 /* dequant_row (by dequant_row_vbmi) reads FP4L */,
                                                     0 /* FP4B: dsv4_lin_dequant_fp4b */};

void dsv4_lin_avx512vbmi_gemm(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                              int64_t o0, float *scratch) {
    dsv4_lin_gemm_tiled(&avx512vbmi_tiles, c, w, x, n_rows, y, o0, scratch);
}

#endif
