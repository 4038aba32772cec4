/* linear_avx2_gemm.c — the GEMM of level avx2: dequantize a (LIN_NB, LIN_KB) tile of weights to
 * F32 with the decoders of linear_avx2.h, then a 3 x 4 register-blocked micro-kernel over it
 * (dsv4_lin_gemm_tiled, linear_tile.c, walks the tiles). Summation order: linear_fast.h.
 */
#include "kernels/linear_avx2.h"

#ifdef DSV4_LIN_AVX2

/* ---- GEMM: dequantize a (LIN_NB, LIN_KB) tile, then a 3x4 register-blocked kernel -------- */

/* Row o, columns [k0, k0 + kb), into dst (zero-padded to a multiple of 8). */
static void dequant_row(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, int64_t k0,
                        int kb, float *dst) {
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
                fp8_nan_seen(fp8_nan_scan(_mm256_setzero_si256(), p + k0 + c0, c1 - c0, NULL))) {
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
    default:
        break;
    }
}

/* RT activation rows x 4 outputs. x: row 0 of the tile at column k0 (row stride ldx);
 * wt: 4 tile rows (stride LIN_KB); acc: (RT, LIN_NB, 8) window at this tile. */
AINLINE void micro(int RT, const float *x, int64_t ldx, const float *wt, int kb, float *acc,
                   int init) {
    const int nf = kb & ~7, tail = kb - nf;
    __m256 a[3][4];
    for (int r = 0; r < RT; r++)
        for (int j = 0; j < 4; j++)
            a[r][j] = init ? _mm256_setzero_ps() : _mm256_load_ps(acc + (r * LIN_NB + j) * 8);
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
static const dsv4_lin_tile_level avx2_tiles = {
    8, 3, 4, dequant_row, {micro1, micro2, micro3, NULL}, reduce_row8, NULL, 1};

void dsv4_lin_gemm_avx2(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows,
                        float *y, int64_t o0, float *scratch) {
    dsv4_lin_gemm_tiled(&avx2_tiles, c, w, x, n_rows, y, o0, scratch);
}

#endif
