/* hc.c — manifold-constrained hyper-connections (spec/model.md §5.3, §5.4, §5.13).
 *
 * The small mixing arithmetic (mix ≤ a few dozen numbers per token) runs in double: it is
 * free next to the matmul, and the Sinkhorn loop repeats divisions 2·iters times. The
 * (mix, hc·D) matmul and the RMS over hc·D values accumulate in double as well.
 *
 * The plain entry points are the reference; the _at ones take a kernel level and run the
 * dots, the collapse and hc_post in AVX-512 where it allows (the collapse and hc_post in AVX2 at
 * level avx2), with the reference's exact
 * operations in the same order (no contraction: a product then a sum, each rounded), so
 * they give its bits. */
#include "hc/hc.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "util/hot.h"

static double sigmoid_f64(double z) { return 1.0 / (1.0 + exp(-z)); }

void dsv4_hc_dots(const dsv4_config *cfg, int simd, const float *h, const float *fn, int n_mix, int m0,
                  int m1, double *dots) {
    const int64_t n = (int64_t)cfg->hc_mult * cfg->hidden_size;
    const dsv4_dot_f64_fn dot = dsv4_dot_f64_at(simd);
    for (int m = m0; m < m1; m++) dots[m] = dot(m < n_mix ? fn + (int64_t)m * n : h, h, n);
}

/* mixes[m] = (fn[m] · flat) / sqrt(mean(flat²) + rms_norm_eps) for m < n_mix: the RMS runs
 * over all hc·D values, uses rms_norm_eps (not hc_eps) and scales the matmul output.
 * dots: dsv4_hc_dots over [0, n_mix + 1). */
static void hc_mixes(const dsv4_config *cfg, const double *dots, int n_mix, double *mixes) {
    const int64_t n = (int64_t)cfg->hc_mult * cfg->hidden_size;
    const double rinv = 1.0 / sqrt(dots[n_mix] / (double)n + cfg->rms_norm_eps);
    for (int m = 0; m < n_mix; m++) mixes[m] = dots[m] * rinv;
}

/* x = Σ_j pre[j] · h[j] over columns [d0, D) */
static void collapse_ref(int hc, int D, const float *h, const double *pre, float *x, int d0) {
    for (int d = d0; d < D; d++) {
        double acc = 0.0;
        for (int j = 0; j < hc; j++) acc += pre[j] * h[(int64_t)j * D + d];
        x[d] = (float)acc;
    }
}

/* h_out[k] = post[k] * y + Σ_j comb[j][k] * h_in[j] over columns [d0, d1); h_out may be
 * h_in only when the caller has copied the columns it reads. */
static void post_ref(int hc, int D, const float *y, const float *h_in, const float *post, const float *comb,
                     float *h_out, int d0, int d1) {
    /* Output stream k sums over the FIRST index of comb (input streams j). */
    for (int k = 0; k < hc; k++) {
        float *out = h_out + (int64_t)k * D;
        for (int d = d0; d < d1; d++) {
            float acc = post[k] * y[d];
            for (int j = 0; j < hc; j++) acc += comb[j * hc + k] * h_in[(int64_t)j * D + d];
            out[d] = acc;
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HC_AVX512 1

/* collapse_ref, eight columns at a time: acc starts at +0.0 and adds each rounded product
 * in j order, like the scalar loop (which also decides the sign of a zero sum). */
DSV4_HOT_AT(collapse_avx512, 0xaf0)
__attribute__((target("avx512f"))) static void collapse_avx512(int hc, int D, const float *h, const double *pre,
                                                               float *x) {
    int d = 0;
    for (; d + 8 <= D; d += 8) {
        __m512d acc = _mm512_setzero_pd();
        for (int j = 0; j < hc; j++)
            acc = _mm512_add_pd(acc, _mm512_mul_pd(_mm512_set1_pd(pre[j]),
                                                   _mm512_cvtps_pd(_mm256_loadu_ps(h + (int64_t)j * D + d))));
        _mm256_storeu_ps(x + d, _mm512_cvtpd_ps(acc));
    }
    collapse_ref(hc, D, h, pre, x, d);
}

/* post_ref in place, sixteen columns at a time: every input stream's chunk is loaded
 * before any output chunk is stored. */
DSV4_HOT_AT(post_inplace_avx512, 0xd50)
__attribute__((target("avx512f"))) static void post_inplace_avx512(int hc, int D, const float *y, float *h,
                                                                   const float *post, const float *comb) {
    __m512 in[DSV4_HC_MAX];
    int d = 0;
    for (; d + 16 <= D; d += 16) {
        for (int j = 0; j < hc; j++) in[j] = _mm512_loadu_ps(h + (int64_t)j * D + d);
        const __m512 yv = _mm512_loadu_ps(y + d);
        for (int k = 0; k < hc; k++) {
            __m512 acc = _mm512_mul_ps(_mm512_set1_ps(post[k]), yv);
            for (int j = 0; j < hc; j++)
                acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_set1_ps(comb[j * hc + k]), in[j]));
            _mm512_storeu_ps(h + (int64_t)k * D + d, acc);
        }
    }
    if (d < D) {
        float old[DSV4_HC_MAX * 16]; /* (hc, 16) the tail's inputs */
        for (int j = 0; j < hc; j++) memcpy(old + j * 16, h + (int64_t)j * D + d, (size_t)(D - d) * sizeof(float));
        for (int k = 0; k < hc; k++)
            for (int c = 0; c < D - d; c++) {
                float acc = post[k] * y[d + c];
                for (int j = 0; j < hc; j++) acc += comb[j * hc + k] * old[j * 16 + c];
                h[(int64_t)k * D + d + c] = acc;
            }
    }
}

/* The level avx2's collapse and hc_post: the AVX-512 loops above at 4 doubles (8 columns in
 * two registers) and 8 floats, the same operations in the same order (a rounded product then
 * a rounded sum, never fused), so the reference's bits. At avx2 both ran the scalar loops:
 * hc_post of one flash_quarter row (4 x 1024) took ~23 us on Zen 3, alone on the caller
 * between a batch-1 step's jobs, 8 times a step. */
__attribute__((target("avx2"))) static void collapse_avx2(int hc, int D, const float *h, const double *pre,
                                                           float *x) {
    int d = 0;
    for (; d + 8 <= D; d += 8) {
        __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
        for (int j = 0; j < hc; j++) {
            const __m256d pj = _mm256_set1_pd(pre[j]);
            const __m256 v = _mm256_loadu_ps(h + (int64_t)j * D + d);
            lo = _mm256_add_pd(lo, _mm256_mul_pd(pj, _mm256_cvtps_pd(_mm256_castps256_ps128(v))));
            hi = _mm256_add_pd(hi, _mm256_mul_pd(pj, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
        }
        _mm_storeu_ps(x + d, _mm256_cvtpd_ps(lo));
        _mm_storeu_ps(x + d + 4, _mm256_cvtpd_ps(hi));
    }
    collapse_ref(hc, D, h, pre, x, d);
}

__attribute__((target("avx2"))) static void post_inplace_avx2(int hc, int D, const float *y, float *h,
                                                               const float *post, const float *comb) {
    __m256 in[DSV4_HC_MAX];
    int d = 0;
    for (; d + 8 <= D; d += 8) {
        for (int j = 0; j < hc; j++) in[j] = _mm256_loadu_ps(h + (int64_t)j * D + d);
        const __m256 yv = _mm256_loadu_ps(y + d);
        for (int k = 0; k < hc; k++) {
            __m256 acc = _mm256_mul_ps(_mm256_set1_ps(post[k]), yv);
            for (int j = 0; j < hc; j++)
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(comb[j * hc + k]), in[j]));
            _mm256_storeu_ps(h + (int64_t)k * D + d, acc);
        }
    }
    if (d < D) {
        float old[DSV4_HC_MAX * 8]; /* (hc, 8) the tail's inputs */
        for (int j = 0; j < hc; j++) memcpy(old + j * 8, h + (int64_t)j * D + d, (size_t)(D - d) * sizeof(float));
        for (int k = 0; k < hc; k++)
            for (int c = 0; c < D - d; c++) {
                float acc = post[k] * y[d + c];
                for (int j = 0; j < hc; j++) acc += comb[j * hc + k] * old[j * 8 + c];
                h[(int64_t)k * D + d + c] = acc;
            }
    }
}

/* ---- hc_pre's dots of many rows at once -------------------------------------------------
 * dsv4_hc_dots reads fn (mix rows of hc*D) once per token and widens both operands of
 * every product, four conversions per two FMAs. Here a block of up to HC_ROWS rows runs
 * against fn widened to double once per call: each slab of HC_SLAB columns of the rows is
 * widened once into hw, then every dot runs over the slab in a tile of up to HC_ROWS rows x
 * 2 fn rows, its 16 lanes in two registers kept between slabs in acc. Lane l of a dot
 * still sums the products i ≡ l (mod 16) in ascending i (each product exact in double),
 * and the tail and the tree are dsv4_dot_f64_finish's: the bits of dsv4_hc_dots.
 *
 * A block of 8 rows runs each slab's fn rows against all 8 rows (fn as floats: dots_tile8;
 * fn widened: two tiles of 4 rows), so a batched decode step's thread reads fn (which comes
 * from memory: 384 KB a call at flash_quarter) once for its 8 rows instead of once per 4; its
 * slabs are half as long, so that the 8 widened rows, the accumulators and the slab's fn stay
 * in L1. */
#define HC_ROWS 8      /* rows of a block, at most */
#define HC_TILE_ROWS 4 /* rows of a tile */
#define HC_SLAB 256
#define HC_DOTS_MAX 32 /* mix + 1 of the blocked kernel: hc <= 4 */

#define HC_TILE static inline __attribute__((always_inline, target("avx512f")))

/* 16 values of an fn row at c: from the widened copy (f64) or widened here (f32, exact). */
HC_TILE __m512d fn_lo(const double *f64, const float *f32, int c) {
    return f64 ? _mm512_loadu_pd(f64 + c) : _mm512_cvtps_pd(_mm256_loadu_ps(f32 + c));
}
HC_TILE __m512d fn_hi(const double *f64, const float *f32, int c) { return fn_lo(f64, f32, c + 8); }

/* acc[r][m..m+F) += fn rows m..m+F (slab-relative: widened f0, f1, or when those are NULL
 * the floats g0, g1, widened here) x rows r < RB of hw over len columns; F == 1: row m only. */
HC_TILE void dots_tile(__m512d acc[][HC_DOTS_MAX][2], int m, const double *f0, const double *f1, const float *g0,
                       const float *g1, double (*hw)[HC_SLAB], int len, const int RB, const int F) {
    __m512d a[HC_TILE_ROWS][2][2];
    for (int r = 0; r < RB; r++)
        for (int k = 0; k < F; k++) {
            a[r][k][0] = acc[r][m + k][0];
            a[r][k][1] = acc[r][m + k][1];
        }
    for (int c = 0; c < len; c += 16) {
        const __m512d f0l = fn_lo(f0, g0, c), f0h = fn_hi(f0, g0, c);
        const __m512d f1l = F > 1 ? fn_lo(f1, g1, c) : f0l, f1h = F > 1 ? fn_hi(f1, g1, c) : f0h;
        for (int r = 0; r < RB; r++) {
            const __m512d hl = _mm512_load_pd(hw[r] + c), hh = _mm512_load_pd(hw[r] + c + 8);
            a[r][0][0] = _mm512_fmadd_pd(f0l, hl, a[r][0][0]);
            a[r][0][1] = _mm512_fmadd_pd(f0h, hh, a[r][0][1]);
            if (F > 1) {
                a[r][1][0] = _mm512_fmadd_pd(f1l, hl, a[r][1][0]);
                a[r][1][1] = _mm512_fmadd_pd(f1h, hh, a[r][1][1]);
            }
        }
    }
    for (int r = 0; r < RB; r++)
        for (int k = 0; k < F; k++) {
            acc[r][m + k][0] = a[r][k][0];
            acc[r][m + k][1] = a[r][k][1];
        }
}

/* h . h of every row over the slab, into acc[r][n_mix]. */
HC_TILE void self_tile(__m512d acc[][HC_DOTS_MAX][2], int m, double (*hw)[HC_SLAB], int len, const int RB) {
    for (int r = 0; r < RB; r++) {
        __m512d lo = acc[r][m][0], hi = acc[r][m][1];
        for (int c = 0; c < len; c += 16) {
            const __m512d hl = _mm512_load_pd(hw[r] + c), hh = _mm512_load_pd(hw[r] + c + 8);
            lo = _mm512_fmadd_pd(hl, hl, lo);
            hi = _mm512_fmadd_pd(hh, hh, hi);
        }
        acc[r][m][0] = lo;
        acc[r][m][1] = hi;
    }
}

/* acc[r][m] += fn row m (the floats g, widened here) x rows r < 8 of hw over len columns, the
 * next slab's lines of the row (pf, len floats; NULL at the last slab) prefetched meanwhile.
 * One fn row against all 8 rows widens each fn value once (two 4-row tiles widened it twice),
 * and the next slab is asked for while this one runs: fn comes from memory once per call, 24
 * rows read a slab (512 bytes) at a time, too many short streams for the hardware prefetchers.
 * The same FMAs into the same lanes in the same column order as dots_tile: the same bits.
 * Zen 5, one thread, 8 rows x 4096, against the two tiles: hot 0.88-0.95x the time, fn from
 * memory 0.81x; in step (batch 16, steps alternated) hc_pre's dots -130 us of thread time a
 * step, its jobs -77 us of wall (BENCHMARKS.md session 27 dn27). */
HC_TILE void dots_tile8(__m512d acc[][HC_DOTS_MAX][2], int m, const float *g, const float *pf,
                        double (*hw)[HC_SLAB], int len) {
    __m512d a[HC_ROWS][2];
    for (int r = 0; r < HC_ROWS; r++) {
        a[r][0] = acc[r][m][0];
        a[r][1] = acc[r][m][1];
    }
    if (pf)
        for (int c = 0; c < len; c += 16) _mm_prefetch((const char *)(pf + c), _MM_HINT_T0);
    for (int c = 0; c < len; c += 16) {
        const __m512d fl = fn_lo(NULL, g, c), fh = fn_hi(NULL, g, c);
        for (int r = 0; r < HC_ROWS; r++) {
            a[r][0] = _mm512_fmadd_pd(fl, _mm512_load_pd(hw[r] + c), a[r][0]);
            a[r][1] = _mm512_fmadd_pd(fh, _mm512_load_pd(hw[r] + c + 8), a[r][1]);
        }
    }
    for (int r = 0; r < HC_ROWS; r++) {
        acc[r][m][0] = a[r][0];
        acc[r][m][1] = a[r][1];
    }
}

/* fn rows [m, m + F) x rows [0, RB) over a slab: tiles of up to HC_TILE_ROWS rows. */
HC_TILE void dots_tiles(__m512d acc[][HC_DOTS_MAX][2], int m, const double *f0, const double *f1, const float *g0,
                        const float *g1, double (*hw)[HC_SLAB], int len, const int RB, const int F) {
    if (RB > HC_TILE_ROWS) {
        dots_tile(acc, m, f0, f1, g0, g1, hw, len, HC_TILE_ROWS, F);
        dots_tile(acc + HC_TILE_ROWS, m, f0, f1, g0, g1, hw + HC_TILE_ROWS, len, RB - HC_TILE_ROWS, F);
    } else {
        dots_tile(acc, m, f0, f1, g0, g1, hw, len, RB, F);
    }
}

/* dots [m0, m1) (of n_mix + 1: m = n_mix is h . h) of rows h (RB, n) against fn (n_mix, n), read
 * from fn_f64 (the same, widened) or, when that is NULL, widened here slab by slab (the same
 * doubles), into dots (RB, n_mix + 1). Each dot's lanes take the same products in the same
 * order whatever [m0, m1) is: any split of the dots gives the bits of the whole. */
HC_TILE void dots_rows_block(const float *h, int64_t n, const float *fn, const double *fn_f64, int n_mix, int m0,
                             int m1, double *dots, const int RB) {
    __m512d acc[HC_ROWS][HC_DOTS_MAX][2]; /* (rows, mix + 1, lanes 0-7 | 8-15) */
    double hw[HC_ROWS][HC_SLAB] __attribute__((aligned(64))); /* (rows, slab) h widened */
    const int nd = n_mix + 1, slab = RB > HC_TILE_ROWS ? HC_SLAB / 2 : HC_SLAB; /* a multiple of 16 */
    const int me = m1 < n_mix ? m1 : n_mix; /* the fn rows' end */
    for (int r = 0; r < RB; r++)
        for (int m = m0; m < m1; m++) acc[r][m][0] = acc[r][m][1] = _mm512_setzero_pd();
    const int64_t nv = n / 16 * 16;
    for (int64_t s0 = 0; s0 < nv; s0 += slab) {
        const int len = (int)(nv - s0 < slab ? nv - s0 : slab);
        for (int r = 0; r < RB; r++)
            for (int c = 0; c < len; c += 8)
                _mm512_store_pd(hw[r] + c, _mm512_cvtps_pd(_mm256_loadu_ps(h + r * n + s0 + c)));
        int m = m0;
        if (RB == HC_ROWS && !fn_f64) {
            for (; m < me; m++)
                dots_tile8(acc, m, fn + m * n + s0, s0 + slab < nv ? fn + m * n + s0 + slab : NULL, hw, len);
        } else if (fn_f64) {
            for (; m + 2 <= me; m += 2)
                dots_tiles(acc, m, fn_f64 + m * n + s0, fn_f64 + (m + 1) * n + s0, NULL, NULL, hw, len, RB, 2);
            if (m < me) dots_tiles(acc, m, fn_f64 + m * n + s0, NULL, NULL, NULL, hw, len, RB, 1);
        } else {
            /* the next slab of this block's fn rows asked for now, as dots_tile8 does: 1 KB of
             * each of up to 24 rows a slab are too many short streams for the hardware
             * prefetchers (Zen 5, flash_quarter, in step: hc_pre's jobs -10 / -25 / -38 us a
             * step at batch 2 / 4 / 8, 48-50 of 63 pairs) */
            if (s0 + slab < nv) {
                const int64_t nx = nv - s0 - slab < slab ? nv - s0 - slab : slab;
                for (int q = m; q < me; q++)
                    for (int64_t c = 0; c < nx; c += 16) _mm_prefetch((const char *)(fn + q * n + s0 + slab + c), _MM_HINT_T0);
            }
            for (; m + 2 <= me; m += 2)
                dots_tiles(acc, m, NULL, NULL, fn + m * n + s0, fn + (m + 1) * n + s0, hw, len, RB, 2);
            if (m < me) dots_tiles(acc, m, NULL, NULL, fn + m * n + s0, NULL, hw, len, RB, 1);
        }
        if (m1 > n_mix) self_tile(acc, n_mix, hw, len, RB);
    }
    for (int r = 0; r < RB; r++)
        for (int m = m0; m < m1; m++) {
            double s[16];
            _mm512_storeu_pd(s, acc[r][m][0]);
            _mm512_storeu_pd(s + 8, acc[r][m][1]);
            const float *hr = h + r * n;
            dots[r * nd + m] = dsv4_dot_f64_finish(s, m < n_mix ? fn + m * n : hr, hr, nv, n);
        }
}

/* Blocks of 8 rows, then of 4, then the rest. */
DSV4_HOT_AT(dots_rows_avx512, 0x670)
__attribute__((target("avx512f"))) static void dots_rows_avx512(const float *h, int n_rows, int64_t n,
                                                                const float *fn, const double *fn_f64,
                                                                int n_mix, int m0, int m1, double *dots) {
    const int nd = n_mix + 1;
    int i = 0;
    for (; i + 8 <= n_rows; i += 8) dots_rows_block(h + i * n, n, fn, fn_f64, n_mix, m0, m1, dots + i * nd, 8);
    for (; i + 4 <= n_rows; i += 4) dots_rows_block(h + i * n, n, fn, fn_f64, n_mix, m0, m1, dots + i * nd, 4);
    switch (n_rows - i) {
    case 3: dots_rows_block(h + i * n, n, fn, fn_f64, n_mix, m0, m1, dots + i * nd, 3); break;
    case 2: dots_rows_block(h + i * n, n, fn, fn_f64, n_mix, m0, m1, dots + i * nd, 2); break;
    case 1: dots_rows_block(h + i * n, n, fn, fn_f64, n_mix, m0, m1, dots + i * nd, 1); break;
    default: break;
    }
}

/* ---- the same blocked dots at level avx2 --------------------------------------------------
 * A dot's 16 lanes take four registers of 4 doubles, too many for 16 of them to hold a tile
 * of rows x fn rows over all lanes, so a tile runs one lane group g (lanes 4g .. 4g + 3: the
 * columns i = 16c + 4g .. 16c + 4g + 3) at a time: up to 4 rows x 3 fn rows, 12 accumulators
 * beside 3 fn values and a row's, 7 loads per 12 FMAs, the four groups one after the other
 * over the slab. Each lane still sums its products in ascending i (a lane's chain is in
 * one group), each product exact in double, so the bits are dsv4_hc_dots' as at avx512;
 * dot_f64_avx2, a dot at a time, widened both operands of every product (two conversions
 * per FMA). The lanes live in acc (rows, dots, 16) between tiles and slabs. */
#define HC2_TILE static inline __attribute__((always_inline, target("avx2,fma")))
#define HC2_TILE_ROWS 4
#define HC2_TILE_FN 3

/* lane group g of the dots m .. m + F - 1 x rows r < RB of hw over the slab's len columns:
 * fn rows m + k at f + k * n, slab-relative, as doubles (W: the widened copy) or as floats
 * widened here (exact) */
HC2_TILE void dots2_tile(double (*acc)[HC_DOTS_MAX][16], int m, const void *f, int64_t n, double (*hw)[HC_SLAB],
                         int len, int g, const int RB, const int F, const int W) {
    __m256d a[HC2_TILE_ROWS][HC2_TILE_FN];
    for (int r = 0; r < RB; r++)
        for (int k = 0; k < F; k++) a[r][k] = _mm256_load_pd(acc[r][m + k] + 4 * g);
    for (int c = 4 * g; c < len; c += 16) {
        __m256d fv[HC2_TILE_FN];
        for (int k = 0; k < F; k++)
            fv[k] = W ? _mm256_loadu_pd((const double *)f + k * n + c)
                      : _mm256_cvtps_pd(_mm_loadu_ps((const float *)f + k * n + c));
        for (int r = 0; r < RB; r++) {
            const __m256d hv = _mm256_load_pd(hw[r] + c);
            for (int k = 0; k < F; k++) a[r][k] = _mm256_fmadd_pd(fv[k], hv, a[r][k]);
        }
    }
    for (int r = 0; r < RB; r++)
        for (int k = 0; k < F; k++) _mm256_store_pd(acc[r][m + k] + 4 * g, a[r][k]);
}

/* lane group g of h . h of rows r < RB over the slab, into acc[r][m] */
HC2_TILE void self2_tile(double (*acc)[HC_DOTS_MAX][16], int m, double (*hw)[HC_SLAB], int len, int g, const int RB) {
    __m256d a[HC2_TILE_ROWS];
    for (int r = 0; r < RB; r++) a[r] = _mm256_load_pd(acc[r][m] + 4 * g);
    for (int c = 4 * g; c < len; c += 16)
        for (int r = 0; r < RB; r++) {
            const __m256d hv = _mm256_load_pd(hw[r] + c);
            a[r] = _mm256_fmadd_pd(hv, hv, a[r]);
        }
    for (int r = 0; r < RB; r++) _mm256_store_pd(acc[r][m] + 4 * g, a[r]);
}

/* the dots [m0, m1) of rows r < RB (<= HC2_TILE_ROWS) over one slab at s0, every lane group */
HC2_TILE void dots2_slab(double (*acc)[HC_DOTS_MAX][16], int64_t n, const float *fn, const double *fn_f64,
                         int n_mix, int m0, int m1, double (*hw)[HC_SLAB], int64_t s0, int len, const int RB) {
    const int me = m1 < n_mix ? m1 : n_mix; /* the fn rows' end */
    for (int g = 0; g < 4; g++) {
        for (int m = m0; m < me; m += HC2_TILE_FN) {
            const int F = me - m < HC2_TILE_FN ? me - m : HC2_TILE_FN;
            if (fn_f64) {
                const double *f = fn_f64 + m * n + s0;
                if (F == 3) dots2_tile(acc, m, f, n, hw, len, g, RB, 3, 1);
                else if (F == 2) dots2_tile(acc, m, f, n, hw, len, g, RB, 2, 1);
                else dots2_tile(acc, m, f, n, hw, len, g, RB, 1, 1);
            } else {
                const float *f = fn + m * n + s0;
                if (F == 3) dots2_tile(acc, m, f, n, hw, len, g, RB, 3, 0);
                else if (F == 2) dots2_tile(acc, m, f, n, hw, len, g, RB, 2, 0);
                else dots2_tile(acc, m, f, n, hw, len, g, RB, 1, 0);
            }
        }
        if (m1 > n_mix) self2_tile(acc, n_mix, hw, len, g, RB);
    }
}

/* dots_rows_block's contract at avx2 for n_rows <= HC_ROWS rows: slabs of HC_SLAB columns of
 * the rows widened once into hw, then tiles of up to HC2_TILE_ROWS rows */
__attribute__((target("avx2,fma"))) static void dots_rows_block_avx2(const float *h, int n_rows, int64_t n,
                                                                   const float *fn, const double *fn_f64,
                                                                   int n_mix, int m0, int m1, double *dots) {
    double acc[HC_ROWS][HC_DOTS_MAX][16] __attribute__((aligned(32))); /* (rows, mix + 1, lanes) */
    double hw[HC_ROWS][HC_SLAB] __attribute__((aligned(32)));          /* (rows, slab) h widened */
    const int nd = n_mix + 1;
    for (int r = 0; r < n_rows; r++)
        for (int m = m0; m < m1; m++) memset(acc[r][m], 0, sizeof acc[r][m]);
    const int64_t nv = n / 16 * 16;
    for (int64_t s0 = 0; s0 < nv; s0 += HC_SLAB) {
        const int len = (int)(nv - s0 < HC_SLAB ? nv - s0 : HC_SLAB);
        for (int r = 0; r < n_rows; r++)
            for (int c = 0; c < len; c += 4) _mm256_store_pd(hw[r] + c, _mm256_cvtps_pd(_mm_loadu_ps(h + r * n + s0 + c)));
        for (int r0 = 0; r0 < n_rows; r0 += HC2_TILE_ROWS) {
            double(*a)[HC_DOTS_MAX][16] = acc + r0;
            double(*w)[HC_SLAB] = hw + r0;
            switch (n_rows - r0 < HC2_TILE_ROWS ? n_rows - r0 : HC2_TILE_ROWS) { /* RB constant: a tile in registers */
            case 4: dots2_slab(a, n, fn, fn_f64, n_mix, m0, m1, w, s0, len, 4); break;
            case 3: dots2_slab(a, n, fn, fn_f64, n_mix, m0, m1, w, s0, len, 3); break;
            case 2: dots2_slab(a, n, fn, fn_f64, n_mix, m0, m1, w, s0, len, 2); break;
            default: dots2_slab(a, n, fn, fn_f64, n_mix, m0, m1, w, s0, len, 1); break;
            }
        }
    }
    for (int r = 0; r < n_rows; r++)
        for (int m = m0; m < m1; m++) {
            const float *hr = h + r * n;
            dots[r * nd + m] = dsv4_dot_f64_finish(acc[r][m], m < n_mix ? fn + m * n : hr, hr, nv, n);
        }
}

static void dots_rows_avx2(const float *h, int n_rows, int64_t n, const float *fn, const double *fn_f64, int n_mix,
                           int m0, int m1, double *dots) {
    const int nd = n_mix + 1;
    for (int i = 0; i < n_rows; i += HC_ROWS)
        dots_rows_block_avx2(h + i * n, n_rows - i < HC_ROWS ? n_rows - i : HC_ROWS, n, fn, fn_f64, n_mix, m0, m1,
                             dots + i * nd);
}
#else
#define HC_AVX512 0
#define HC_DOTS_MAX 0
#endif

#define HC_MAX DSV4_HC_MAX

/* hc outside [1, DSV4_HC_MAX] is a broken precondition: make it loud, not a stack overrun. */
static void fill_nan(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
}

static void collapse(int simd, int hc, int D, const float *h, const double *pre, float *x) {
#if HC_AVX512
    if (simd >= DSV4_SIMD_AVX512) {
        collapse_avx512(hc, D, h, pre, x);
        return;
    }
    if (simd >= DSV4_SIMD_AVX2) {
        collapse_avx2(hc, D, h, pre, x);
        return;
    }
#endif
    (void)simd;
    collapse_ref(hc, D, h, pre, x, 0);
}

void dsv4_hc_collapse_at(int simd, int hc, int D, const float *h, const double *pre, float *x) {
    collapse(simd, hc, D, h, pre, x);
}

/* pre, post and the Sinkhorn's starting matrix C (hc, hc) of one row from its dots (mix + 1).
 * ex (exp_f64.h: libm's exp bits in lanes, or NULL: libm per value) takes all 2 hc + hc^2
 * exps of the row in one call (24 at hc 4, ~0.3 us of libm calls a row otherwise); the
 * arithmetic around them is the reference's, in its order. */
DSV4_HOT_AT(pre_start, 0x190)
static void pre_start(const dsv4_config *cfg, const double *dots, const float *base, const float *scale,
                      double *pre, float *post, double *C, dsv4_exp_rows_fn ex) {
    const int hc = cfg->hc_mult, mix = dsv4_cfg_mix(cfg);
    const double eps = cfg->hc_eps;
    double mixes[(2 + HC_MAX) * HC_MAX]; /* (mix) */
    double e[(2 + HC_MAX) * HC_MAX];     /* (mix): exp's arguments, then its values */
    hc_mixes(cfg, dots, mix, mixes);
    for (int j = 0; j < hc; j++) { /* sigmoid_f64(z) = 1 / (1 + exp(-z)) */
        e[j] = -(mixes[j] * scale[0] + base[j]);
        e[hc + j] = -(mixes[hc + j] * scale[1] + base[hc + j]);
    }
    /* Row softmax of the logits, then +eps everywhere. */
    for (int j = 0; j < hc; j++) {
        double *row = C + j * hc, mx = -INFINITY;
        for (int k = 0; k < hc; k++) {
            row[k] = mixes[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
            if (row[k] > mx) mx = row[k];
        }
        for (int k = 0; k < hc; k++) e[2 * hc + j * hc + k] = row[k] - mx;
    }
    /* e[0, mix) are all written above (GCC cannot see that through the opaque call) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
    if (ex) {
        ex(e, mix, e);
    } else {
        for (int i = 0; i < mix; i++) e[i] = exp(e[i]);
    }
#pragma GCC diagnostic pop
    for (int j = 0; j < hc; j++) {
        pre[j] = 1.0 / (1.0 + e[j]) + eps;
        post[j] = (float)(2.0 * (1.0 / (1.0 + e[hc + j])));
    }
    for (int j = 0; j < hc; j++) {
        double *row = C + j * hc, sum = 0.0;
        for (int k = 0; k < hc; k++) { row[k] = e[2 * hc + j * hc + k]; sum += row[k]; }
        for (int k = 0; k < hc; k++) row[k] = row[k] / sum + eps;
    }
}

/* Sinkhorn: one column normalization, then (iters − 1) × (row, column); +eps in every
 * denominator, and the final state is column-normalized (spec §9 pitfall 2). C (hc, hc). */
static void sinkhorn_ref(int hc, int iters, double eps, double *C) {
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            for (int j = 0; j < hc; j++) {
                double s = eps;
                for (int k = 0; k < hc; k++) s += C[j * hc + k];
                for (int k = 0; k < hc; k++) C[j * hc + k] /= s;
            }
        }
        for (int k = 0; k < hc; k++) {
            double s = eps;
            for (int j = 0; j < hc; j++) s += C[j * hc + k];
            for (int j = 0; j < hc; j++) C[j * hc + k] /= s;
        }
    }
}

#if HC_AVX512
/* Rows of a block whose Sinkhorn runs side by side, one row a lane. */
#define HC_LANES 8

/* sinkhorn_ref on up to 8 matrices at once: c[e] holds element e = j * HC + k of every
 * row's C, row r in lane r. Every lane does the scalar loop's operations in its order
 * (a sum from eps in ascending index, then the divisions; IEEE add and divide, no
 * contraction), so each lane ends with its row's bits. A row's 2 * hc * hc scalar
 * divisions a round become hc * hc vector divisions a round for the block (Zen 5, hc 4,
 * 20 rounds, hot: dsv4_hc_pre_finish 1.07 us a row, a block of 8 here 0.60 a row). */
static inline __attribute__((always_inline, target("avx512f"))) void sinkhorn_lanes(__m512d *c, int iters,
                                                                                    double eps, const int HC) {
    const __m512d ve = _mm512_set1_pd(eps);
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int j = 0; j < HC; j++) {
                __m512d s = ve;
                for (int k = 0; k < HC; k++) s = _mm512_add_pd(s, c[j * HC + k]);
                for (int k = 0; k < HC; k++) c[j * HC + k] = _mm512_div_pd(c[j * HC + k], s);
            }
        for (int k = 0; k < HC; k++) {
            __m512d s = ve;
            for (int j = 0; j < HC; j++) s = _mm512_add_pd(s, c[j * HC + k]);
            for (int j = 0; j < HC; j++) c[j * HC + k] = _mm512_div_pd(c[j * HC + k], s);
        }
    }
}

/* C (n, 4 * 4), row r's matrix (hc, hc) at C[r], n <= HC_LANES, in place: lanes past n
 * hold ones (and are dropped). */
DSV4_HOT_AT(sinkhorn_rows_avx512, 0xcf0)
__attribute__((target("avx512f"))) static void sinkhorn_rows_avx512(int hc, int iters, double eps,
                                                                    double (*C)[4 * 4], int n) {
    const int hh = hc * hc;
    double t[4 * 4][HC_LANES] __attribute__((aligned(64))); /* (hc * hc, lanes) */
    __m512d c[4 * 4];
    for (int e = 0; e < hh; e++)
        for (int r = 0; r < HC_LANES; r++) t[e][r] = r < n ? C[r][e] : 1.0;
    for (int e = 0; e < hh; e++) c[e] = _mm512_load_pd(t[e]);
    switch (hc) { /* HC constant: the matrix stays in registers */
    case 4: sinkhorn_lanes(c, iters, eps, 4); break;
    case 3: sinkhorn_lanes(c, iters, eps, 3); break;
    case 2: sinkhorn_lanes(c, iters, eps, 2); break;
    default: sinkhorn_lanes(c, iters, eps, 1); break;
    }
    for (int e = 0; e < hh; e++) _mm512_store_pd(t[e], c[e]);
    for (int r = 0; r < n; r++)
        for (int e = 0; e < hh; e++) C[r][e] = t[e][r];
}

/* sinkhorn_ref on one row's 4 x 4 matrix C: rows 0-1 in a, rows 2-3 in b (one row a
 * 256-bit half). A row's sum is its four elements broadcast in its half and added to eps
 * in ascending k; a column's is the four rows' halves added to eps in ascending j, in
 * both halves. Each lane then does the scalar loop's divisions with the scalar loop's
 * sums: the same bits, with 2 vector divisions a half-round instead of 16 scalar ones
 * (Zen 5, 20 rounds, hot: dsv4_hc_pre_finish 1.07 -> 0.80 us a row). */
__attribute__((target("avx512f"))) static void sinkhorn_one4_avx512(int iters, double eps, double *C) {
    const __m512d ve = _mm512_set1_pd(eps);
    __m512d a = _mm512_loadu_pd(C), b = _mm512_loadu_pd(C + 8);
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            __m512d sa = _mm512_add_pd(ve, _mm512_permutex_pd(a, 0x00));
            __m512d sb = _mm512_add_pd(ve, _mm512_permutex_pd(b, 0x00));
            sa = _mm512_add_pd(sa, _mm512_permutex_pd(a, 0x55));
            sb = _mm512_add_pd(sb, _mm512_permutex_pd(b, 0x55));
            sa = _mm512_add_pd(sa, _mm512_permutex_pd(a, 0xaa));
            sb = _mm512_add_pd(sb, _mm512_permutex_pd(b, 0xaa));
            sa = _mm512_add_pd(sa, _mm512_permutex_pd(a, 0xff));
            sb = _mm512_add_pd(sb, _mm512_permutex_pd(b, 0xff));
            a = _mm512_div_pd(a, sa);
            b = _mm512_div_pd(b, sb);
        }
        __m512d s = _mm512_add_pd(ve, _mm512_shuffle_f64x2(a, a, 0x44)); /* + row 0 */
        s = _mm512_add_pd(s, _mm512_shuffle_f64x2(a, a, 0xee));           /* + row 1 */
        s = _mm512_add_pd(s, _mm512_shuffle_f64x2(b, b, 0x44));           /* + row 2 */
        s = _mm512_add_pd(s, _mm512_shuffle_f64x2(b, b, 0xee));           /* + row 3 */
        a = _mm512_div_pd(a, s);
        b = _mm512_div_pd(b, s);
    }
    _mm512_storeu_pd(C, a);
    _mm512_storeu_pd(C + 8, b);
}
#endif

/* One row's Sinkhorn at a kernel level. */
static void sinkhorn_at(int simd, int hc, int iters, double eps, double *C) {
#if HC_AVX512
    if (simd >= DSV4_SIMD_AVX512 && hc == 4) {
        sinkhorn_one4_avx512(iters, eps, C);
        return;
    }
#endif
    (void)simd;
    sinkhorn_ref(hc, iters, eps, C);
}

/* comb = C rounded to float, x = the collapse of h by pre. */
static void pre_end(const dsv4_config *cfg, int simd, const float *h, const double *pre, const double *C, float *x,
                    float *comb) {
    const int hc = cfg->hc_mult;
    for (int i = 0; i < hc * hc; i++) comb[i] = (float)C[i];
    collapse(simd, hc, cfg->hidden_size, h, pre, x);
}

/* a broken hc: every output NaN */
static int pre_bad(const dsv4_config *cfg, int n, float *x, float *post, float *comb) {
    const int hc = cfg->hc_mult;
    if (hc >= 1 && hc <= HC_MAX) return 0;
    fill_nan(x, (int64_t)n * cfg->hidden_size);
    if (hc > 0) { fill_nan(post, (int64_t)n * hc); fill_nan(comb, (int64_t)n * hc * hc); }
    return 1;
}

DSV4_HOT_AT(dsv4_hc_pre_finish, 0x6b0)
void dsv4_hc_pre_finish(const dsv4_config *cfg, int simd, const float *h, const double *dots,
                        const float *base, const float *scale, float *x, float *post, float *comb,
                        dsv4_exp_rows_fn ex) {
    const int hc = cfg->hc_mult;
    double pre[HC_MAX];        /* (hc) */
    double C[HC_MAX * HC_MAX]; /* (hc, hc) [j input][k output] */
    if (pre_bad(cfg, 1, x, post, comb)) return;
    pre_start(cfg, dots, base, scale, pre, post, C, ex);
    sinkhorn_at(simd, hc, cfg->hc_sinkhorn_iters, cfg->hc_eps, C);
    pre_end(cfg, simd, h, pre, C, x, comb);
}

/* The finish's two independent halves: pre_start computes every value from its own dots (the
 * ones a half does not use may be anything finite), so each half runs the reference's
 * arithmetic on the values it keeps: the bits of dsv4_hc_pre_finish. */
void dsv4_hc_pre_finish_x(const dsv4_config *cfg, int simd, const float *h, const double *dots,
                          const float *base, const float *scale, float *x, dsv4_exp_rows_fn ex) {
    const int hc = cfg->hc_mult;
    double pre[HC_MAX], C[HC_MAX * HC_MAX]; /* (hc), (hc, hc) */
    float post[HC_MAX];                     /* (hc) not kept */
    if (hc < 1 || hc > HC_MAX) { fill_nan(x, cfg->hidden_size); return; }
    pre_start(cfg, dots, base, scale, pre, post, C, ex);
    collapse(simd, hc, cfg->hidden_size, h, pre, x);
}

void dsv4_hc_pre_finish_pc(const dsv4_config *cfg, int simd, const double *dots, const float *base,
                           const float *scale, float *post, float *comb, dsv4_exp_rows_fn ex) {
    const int hc = cfg->hc_mult;
    double pre[HC_MAX], C[HC_MAX * HC_MAX]; /* (hc) not kept, (hc, hc) */
    if (hc < 1 || hc > HC_MAX) {
        if (hc > 0) { fill_nan(post, hc); fill_nan(comb, (int64_t)hc * hc); }
        return;
    }
    pre_start(cfg, dots, base, scale, pre, post, C, ex);
    sinkhorn_at(simd, hc, cfg->hc_sinkhorn_iters, cfg->hc_eps, C);
    for (int i = 0; i < hc * hc; i++) comb[i] = (float)C[i];
}

DSV4_HOT_AT(dsv4_hc_pre_finish_rows, 0xca0)
void dsv4_hc_pre_finish_rows(const dsv4_config *cfg, int simd, const float *h, int n, const double *dots,
                             const float *base, const float *scale, float *x, float *post, float *comb,
                             dsv4_exp_rows_fn ex) {
    const int hc = cfg->hc_mult, D = cfg->hidden_size, nd = dsv4_cfg_mix(cfg) + 1;
    if (n < 1 || pre_bad(cfg, n, x, post, comb)) return;
#if HC_AVX512
    if (simd >= DSV4_SIMD_AVX512 && hc <= 4) {
        for (int i0 = 0; i0 < n; i0 += HC_LANES) {
            const int nb = n - i0 < HC_LANES ? n - i0 : HC_LANES;
            double pre[HC_LANES][4], C[HC_LANES][4 * 4]; /* (rows, hc), (rows, hc, hc) */
            for (int r = 0; r < nb; r++) {
                const int i = i0 + r;
                pre_start(cfg, dots + (int64_t)i * nd, base, scale, pre[r], post + (int64_t)i * hc, C[r], ex);
            }
            sinkhorn_rows_avx512(hc, cfg->hc_sinkhorn_iters, cfg->hc_eps, C, nb);
            for (int r = 0; r < nb; r++) {
                const int i = i0 + r;
                pre_end(cfg, simd, h + (int64_t)i * hc * D, pre[r], C[r], x + (int64_t)i * D,
                        comb + (int64_t)i * hc * hc);
            }
        }
        return;
    }
#endif
    for (int i = 0; i < n; i++)
        dsv4_hc_pre_finish(cfg, simd, h + (int64_t)i * hc * D, dots + (int64_t)i * nd, base, scale,
                           x + (int64_t)i * D, post + (int64_t)i * hc, comb + (int64_t)i * hc * hc, ex);
}

void dsv4_hc_pre_at(const dsv4_config *cfg, int simd, const float *h, const float *fn, const float *base,
                    const float *scale, float *x, float *post, float *comb) {
    double dots[(2 + HC_MAX) * HC_MAX + 1]; /* (mix + 1) */
    const int mix = dsv4_cfg_mix(cfg);
    if (cfg->hc_mult >= 1 && cfg->hc_mult <= HC_MAX) dsv4_hc_dots(cfg, simd, h, fn, mix, 0, mix + 1, dots);
    dsv4_hc_pre_finish(cfg, simd, h, dots, base, scale, x, post, comb, NULL);
}

void dsv4_hc_pre(const dsv4_config *cfg, const float *h, const float *fn, const float *base,
                 const float *scale, float *x, float *post, float *comb) {
    dsv4_hc_pre_at(cfg, DSV4_SIMD_SCALAR, h, fn, base, scale, x, post, comb);
}

void dsv4_hc_post(const dsv4_config *cfg, const float *y, const float *h_in, const float *post,
                  const float *comb, float *h_out) {
    post_ref(cfg->hc_mult, cfg->hidden_size, y, h_in, post, comb, h_out, 0, cfg->hidden_size);
}

void dsv4_hc_post_inplace(const dsv4_config *cfg, int simd, const float *y, float *h, const float *post,
                          const float *comb) {
    const int hc = cfg->hc_mult, D = cfg->hidden_size;
    if (hc < 1 || hc > HC_MAX) { fill_nan(h, hc > 0 ? (int64_t)hc * D : 0); return; }
#if HC_AVX512
    if (simd >= DSV4_SIMD_AVX512) {
        post_inplace_avx512(hc, D, y, h, post, comb);
        return;
    }
    if (simd >= DSV4_SIMD_AVX2) {
        post_inplace_avx2(hc, D, y, h, post, comb);
        return;
    }
#endif
    (void)simd;
    /* columns in chunks: each chunk's inputs copied before its outputs overwrite them */
    enum { CHUNK = 64 };
    float old[HC_MAX * CHUNK]; /* (hc, CHUNK) */
    for (int d0 = 0; d0 < D; d0 += CHUNK) {
        const int n = D - d0 < CHUNK ? D - d0 : CHUNK;
        for (int j = 0; j < hc; j++) memcpy(old + j * CHUNK, h + (int64_t)j * D + d0, (size_t)n * sizeof(float));
        for (int k = 0; k < hc; k++)
            for (int c = 0; c < n; c++) {
                float acc = post[k] * y[d0 + c];
                for (int j = 0; j < hc; j++) acc += comb[j * hc + k] * old[j * CHUNK + c];
                h[(int64_t)k * D + d0 + c] = acc;
            }
    }
}

void dsv4_hc_head_at(const dsv4_config *cfg, int simd, const float *h, const float *fn, const float *base,
                     const float *scale, float *y) {
    const int hc = cfg->hc_mult;
    double dots[HC_MAX + 1], mixes[HC_MAX], pre[HC_MAX];
    if (hc < 1 || hc > HC_MAX) { fill_nan(y, cfg->hidden_size); return; }
    dsv4_hc_dots(cfg, simd, h, fn, hc, 0, hc + 1, dots);
    hc_mixes(cfg, dots, hc, mixes);
    /* No Sinkhorn, a single scalar scale, +hc_eps on the weights. */
    for (int j = 0; j < hc; j++) pre[j] = sigmoid_f64(mixes[j] * scale[0] + base[j]) + cfg->hc_eps;
    collapse(simd, hc, cfg->hidden_size, h, pre, y);
}

void dsv4_hc_head(const dsv4_config *cfg, const float *h, const float *fn, const float *base,
                  const float *scale, float *y) {
    dsv4_hc_head_at(cfg, DSV4_SIMD_SCALAR, h, fn, base, scale, y);
}

int dsv4_hc_rows_blocked(const dsv4_config *cfg, int simd) {
    (void)cfg;
    (void)simd;
#if HC_AVX512
    return simd >= DSV4_SIMD_AVX2 && cfg->hc_mult >= 1 && dsv4_cfg_mix(cfg) + 1 <= HC_DOTS_MAX;
#else
    return 0;
#endif
}

DSV4_HOT_AT(dsv4_hc_widen, 0x180)
void dsv4_hc_widen(const dsv4_config *cfg, const float *fn, int m0, int m1, double *fn_f64) {
    const int64_t n = (int64_t)cfg->hc_mult * cfg->hidden_size;
    for (int64_t i = m0 * n; i < m1 * n; i++) fn_f64[i] = fn[i];
}

void dsv4_hc_dots_rows_part(const dsv4_config *cfg, int simd, const float *h, int n_rows, const float *fn,
                            const double *fn_f64, int n_mix, int m0, int m1, double *dots) {
    const int64_t n = (int64_t)cfg->hc_mult * cfg->hidden_size;
    if (m0 < 0) m0 = 0;
    if (m1 > n_mix + 1) m1 = n_mix + 1;
    if (m0 >= m1) return;
#if HC_AVX512
    if (dsv4_hc_rows_blocked(cfg, simd) && n_mix + 1 <= HC_DOTS_MAX) {
        if (simd >= DSV4_SIMD_AVX512) dots_rows_avx512(h, n_rows, n, fn, fn_f64, n_mix, m0, m1, dots);
        else dots_rows_avx2(h, n_rows, n, fn, fn_f64, n_mix, m0, m1, dots);
        return;
    }
#endif
    (void)fn_f64;
    for (int i = 0; i < n_rows; i++) dsv4_hc_dots(cfg, simd, h + i * n, fn, n_mix, m0, m1, dots + i * (n_mix + 1));
}

void dsv4_hc_dots_rows(const dsv4_config *cfg, int simd, const float *h, int n_rows, const float *fn,
                       const double *fn_f64, int n_mix, double *dots) {
    dsv4_hc_dots_rows_part(cfg, simd, h, n_rows, fn, fn_f64, n_mix, 0, n_mix + 1, dots);
}
