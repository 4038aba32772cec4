/* linear_avx2_gemm.c — the GEMM of level avx2: dequantize a (LIN_NB, LIN_KB) tile of weights to
 * F32 with the decoders of linear_avx2.h, then a 2 x 6 register-blocked micro-kernel over it
 * (dsv4_lin_gemm_tiled, linear_tile.c, walks the tiles). Summation order: linear_fast.h.
 */
#include "kernels/linear_avx2.h"

#ifdef DSV4_LIN_AVX2

/* ---- GEMM: dequantize a (LIN_NB, LIN_KB) tile, then a 2x6 register-blocked kernel -------- */

/* Row o, columns [k0, k0 + kb), into dst (zero-padded to a multiple of 8). */
void dsv4_lin_avx2_dequant_row(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, int64_t k0, int kb,
                               float *dst) {
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
            if (!isfinite(s256f) ||
                (!w->fp8_no_nan && fp8_nan_seen(fp8_nan_scan(_mm256_setzero_si256(), p + k0 + c0, c1 - c0, NULL)))) {
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
    case DSV4_WF_FP4B: { /* cols, k0 and kb are multiples of 64: whole chunks */
        if (w->scale_is_f32) { /* products not BF16-exact: the portable decode */
            dsv4_lin_dequant_fp4b(tab, w, o, k0, kb, dst);
            break;
        }
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2) + k0 / 2;
        const uint8_t *sc = (const uint8_t *)w->scale + o * (n / 32) + k0 / 32;
        for (int c = 0; c < kb; c += 64) {
            const __m256i P = _mm256_loadu_si256((const __m256i *)(p + c / 2));
            for (int h = 0; h < 2; h++) {
                __m256 wv[4];
                dec_fp4s(P, h, tab->fp4s[sc[c / 32 + h]], wv);
                for (int q = 0; q < 4; q++) _mm256_store_ps(dst + c + 32 * h + 8 * q, wv[q]);
            }
        }
        break;
    }
    default:
        break;
    }
}

/* RT (1, 2) activation rows x 6 outputs (MICRO_OUTS). x: row 0 of the tile at column k0
 * (row stride ldx); wt: 6 tile rows (stride LIN_KB); acc: (RT, LIN_NB, 8) window at this
 * tile. Per 8 columns: RT x loads, 6 weight loads, 6 RT FMAs; 12 accumulators, 2 x and a
 * weight in 15 of the 16 registers. The driver runs the windows tile rows outermost, so the
 * window's 6 x LIN_KB weights (12 KB) stay in L1 and x streams from L2: one x load per 6
 * FMAs, where the 3 x 4 kernel this replaces took one per 4 (its 512-row GEMMs ran at
 * 0.37-0.45 of the FMA probe on one Zen 3 core: L2 bound). */
#define MICRO_OUTS 6
#define MICRO_ROWS 2
/* One chunk of 8 columns at c into the RT x 6 lanes; pf: prefetch the next row pair's x
 * line at c (past the last pair it lies past x's end, so the address is formed as an integer:
 * such a pointer would be undefined; a prefetch never faults) */
AINLINE void micro_chunk(int RT, const float *x, int64_t ldx, const float *wt, int c, int pf,
                         __m256 a[MICRO_ROWS][MICRO_OUTS]) {
    __m256 xv[MICRO_ROWS];
    for (int r = 0; r < RT; r++) xv[r] = _mm256_loadu_ps(x + r * ldx + c);
    if (pf && RT == MICRO_ROWS)
        for (int r = 0; r < RT; r++)
            _mm_prefetch((const char *)((uintptr_t)(x + c) + (uintptr_t)((RT + r) * ldx) * sizeof(float)),
                         _MM_HINT_T0);
    for (int j = 0; j < MICRO_OUTS; j++) {
        __m256 wv = _mm256_load_ps(wt + j * LIN_KB + c);
        /* one load for both rows: GCC 12 would fold it into each FMA, 14 loads per 12
         * FMAs, more than Zen 3's two 256-bit loads a cycle keep up with */
        if (RT > 1) __asm__("" : "+x"(wv));
        for (int r = 0; r < RT; r++) a[r][j] = _mm256_fmadd_ps(xv[r], wv, a[r][j]);
    }
}

AINLINE void micro_body(int RT, const float *x, int64_t ldx, const float *wt, int kb, const float *acc, int init,
                        __m256 a[MICRO_ROWS][MICRO_OUTS]) {
    const int nf = kb & ~7, tail = kb - nf;
    for (int r = 0; r < RT; r++)
        for (int j = 0; j < MICRO_OUTS; j++)
            a[r][j] = init ? _mm256_setzero_ps() : _mm256_load_ps(acc + (r * LIN_NB + j) * 8);
    /* the chunks in order, two a step: one prefetch a row per 16 columns (a 64-byte line),
     * where one per chunk asked for every line twice */
    int c = 0;
    for (; c + 16 <= nf; c += 16) {
        micro_chunk(RT, x, ldx, wt, c, 1, a);
        micro_chunk(RT, x, ldx, wt, c + 8, 0, a);
    }
    if (c < nf) micro_chunk(RT, x, ldx, wt, c, 1, a);
    if (tail) { /* the last chunk's x zero-padded (the tile's weights are) */
        const __m256i m = mask_first(tail);
        __m256 xv[MICRO_ROWS];
        for (int r = 0; r < RT; r++) xv[r] = _mm256_maskload_ps(x + r * ldx + nf, m);
        for (int j = 0; j < MICRO_OUTS; j++) {
            const __m256 wv = _mm256_load_ps(wt + j * LIN_KB + nf);
            for (int r = 0; r < RT; r++) a[r][j] = _mm256_fmadd_ps(xv[r], wv, a[r][j]);
        }
    }
}

AINLINE void micro(int RT, const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    __m256 a[MICRO_ROWS][MICRO_OUTS];
    micro_body(RT, x, ldx, wt, kb, acc, init, a);
    for (int r = 0; r < RT; r++)
        for (int j = 0; j < MICRO_OUTS; j++) _mm256_store_ps(acc + (r * LIN_NB + j) * 8, a[r][j]);
}

static void micro2(const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    micro(2, x, ldx, wt, kb, acc, init);
}
static void micro1(const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    micro(1, x, ldx, wt, kb, acc, init);
}

/* The levels of hsum8's tree ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)), each adding two
 * vectors that hold parts of several outputs side by side (a + b == b + a exactly, so only
 * the pairing matters). red_half(a, b): lanes 0-3 a's l + (l + 4), lanes 4-7 b's;
 * red_quarter(p, q) of two red_halfs: in each 128-bit half p's (0+2, 1+3), then q's;
 * red_last(r, s) of two red_quarters: in each half the sums of r's pairs, then s's. */
AINLINE __m256 red_half(__m256 a, __m256 b) {
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}
AINLINE __m256 red_quarter(__m256 p, __m256 q) {
    return _mm256_add_ps(_mm256_shuffle_ps(p, q, 0x44), _mm256_shuffle_ps(p, q, 0xEE));
}
AINLINE __m256 red_last(__m256 r, __m256 s) {
    return _mm256_add_ps(_mm256_shuffle_ps(r, s, 0x88), _mm256_shuffle_ps(r, s, 0xDD));
}
/* lane i: hsum8 of v_i, for 8 vectors given as v0, v4, v1, v5, v2, v6, v3, v7 (that order
 * puts output i in lane i: 7 adds and 14 shuffles for 8 outputs, where 8 hsum8 take 40) */
AINLINE __m256 red8(__m256 v0, __m256 v4, __m256 v1, __m256 v5, __m256 v2, __m256 v6, __m256 v3, __m256 v7) {
    return red_last(red_quarter(red_half(v0, v4), red_half(v1, v5)), red_quarter(red_half(v2, v6), red_half(v3, v7)));
}

/* micro(2) on a row's last column tile, the 12 sums reduced in registers and stored in y
 * (2 rows ldy apart, nv outputs each) instead of stored in acc for reduce_row8's pass over
 * the (LIN_MB, LIN_NB, 8) block. The same tree per output as hsum8, so the same bits. */
static void micro2_last(const float *x, int64_t ldx, const float *wt, int kb, const float *acc, int init, float *y,
                        int64_t ldy, int nv) {
    __m256 a[MICRO_ROWS][MICRO_OUTS];
    micro_body(2, x, ldx, wt, kb, acc, init, a);
    /* lanes 0-3: row 0's outputs 0-3, lanes 4-7 row 1's */
    const __m256 t = red8(a[0][0], a[1][0], a[0][1], a[1][1], a[0][2], a[1][2], a[0][3], a[1][3]);
    /* lanes 0, 1: row 0's outputs 4, 5; lanes 4, 5 row 1's (lanes 2, 3, 6, 7 the same again) */
    const __m256 r45 = red_quarter(red_half(a[0][4], a[1][4]), red_half(a[0][5], a[1][5]));
    const __m256 u = red_last(r45, r45);
    if (nv == MICRO_OUTS) {
        _mm_storeu_ps(y, _mm256_castps256_ps128(t));
        _mm_storel_pi((__m64 *)(y + 4), _mm256_castps256_ps128(u));
        _mm_storeu_ps(y + ldy, _mm256_extractf128_ps(t, 1));
        _mm_storel_pi((__m64 *)(y + ldy + 4), _mm256_extractf128_ps(u, 1));
    } else {
        float v[2][8];
        _mm_storeu_ps(v[0], _mm256_castps256_ps128(t));
        _mm_storeu_ps(v[0] + 4, _mm256_castps256_ps128(u));
        _mm_storeu_ps(v[1], _mm256_extractf128_ps(t, 1));
        _mm_storeu_ps(v[1] + 4, _mm256_extractf128_ps(u, 1));
        for (int j = 0; j < nv; j++) {
            y[j] = v[0][j];
            y[ldy + j] = v[1][j];
        }
    }
}

/* one activation row's nb (<= 16) outputs, 8 at a time through red8. The slots up to nb
 * rounded to 8 hold sums of zero weights or zeros (linear_tile.c); they are not stored. */
static void reduce_row8(const float *acc, int nb, float *y) {
    for (int j = 0; j < nb; j += 8) {
        const float *p = acc + 8 * j;
        const __m256 v = red8(_mm256_load_ps(p), _mm256_load_ps(p + 32), _mm256_load_ps(p + 8),
                              _mm256_load_ps(p + 40), _mm256_load_ps(p + 16), _mm256_load_ps(p + 48),
                              _mm256_load_ps(p + 24), _mm256_load_ps(p + 56));
        if (nb - j >= 8) _mm256_storeu_ps(y + j, v);
        else _mm256_maskstore_ps(y + j, mask_first(nb - j), v);
    }
}

/* 2-row micro-kernels over 6 outputs: 12 accumulators, 2 x and a weight in 16 registers */
static const dsv4_lin_tile_level avx2_tiles = {
    8, MICRO_ROWS, MICRO_OUTS, dsv4_lin_avx2_dequant_row, {micro1, micro2, NULL, NULL}, reduce_row8, micro2_last, 1, 1 /* dequant_row reads FP4B */};

void dsv4_lin_gemm_avx2(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows,
                        float *y, int64_t o0, float *scratch) {
    dsv4_lin_gemm_tiled(&avx2_tiles, c, w, x, n_rows, y, o0, scratch);
}

#endif
