/* attn_ops.c — dot/axpy kernels of sparse attention and the indexer (contract: attn_ops.h).
 *
 * The portable level is dsv4_dot and a plain loop. The AVX2 level keeps the eight lanes of
 * the contract in one register per dot and computes up to 8 dots against the same key
 * chunk at once: the key is loaded once per chunk, and the 8 independent accumulators
 * hide the add latency (one dot alone is a chain of n/8 dependent adds). Its functions
 * carry __attribute__((target("avx2"))) (no "fma": multiply and add must stay two
 * roundings; C11 mode also keeps GCC from contracting them), so this file needs no ISA
 * flags and the library runs them only after cpu.c detection.
 */
#include "kernels/attn_ops.h"

#include "kernels/cpu.h"
#include "kernels/ops.h"

/* ---- portable level -------------------------------------------------------------------- */

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

static void wsum_scalar(float *o, size_t os, int nh, const float *p, size_t ps,
                        const float *const *rows, int n_rows, int n) {
    for (int h = 0; h < nh; h++)
        for (int c = 0; c < n; c++) o[(size_t)h * os + c] = 0.0f;
    for (int j = 0; j < n_rows; j++) axpyn_scalar(o, os, nh, p + j, ps, rows[j], n);
}

static const dsv4_attn_ops scalar_ops = {dotn_scalar, axpyn_scalar, wsum_scalar};

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

/* G dots of q rows (stride qs) against k. The zero-padded tail adds 0*0 = +0 to lanes
 * past n, which leaves them unchanged (an accumulator that starts at +0 is never -0 under
 * round-to-nearest), exactly like the portable loop that skips them. */
AVX2_INLINE void dot_group(const float *q, size_t qs, const float *k, int n, float *out,
                           size_t os, const int G) {
    __m256 acc[8];
    for (int g = 0; g < G; g++) acc[g] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 kv = _mm256_loadu_ps(k + i);
        for (int g = 0; g < G; g++)
            acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(_mm256_loadu_ps(q + g * qs + i), kv));
    }
    if (i < n) {
        const __m256i m = mask_first(n - i);
        const __m256 kv = _mm256_maskload_ps(k + i, m);
        for (int g = 0; g < G; g++)
            acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(_mm256_maskload_ps(q + g * qs + i, m), kv));
    }
    for (int g = 0; g < G; g++) out[g * os] = hsum8(acc[g]);
}

AVX2_FN static void dotn_avx2(const float *q, size_t qs, int nq, const float *k, int n, float *out,
                              size_t os) {
    int h = 0;
    for (; h + 8 <= nq; h += 8) dot_group(q + h * qs, qs, k, n, out + h * os, os, 8);
    if (h + 4 <= nq) {
        dot_group(q + h * qs, qs, k, n, out + h * os, os, 4);
        h += 4;
    }
    for (; h < nq; h++) dot_group(q + h * qs, qs, k, n, out + h * os, os, 1);
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
 * masked by m), accumulated in registers over all rows: one pass over the rows reads
 * 32*CW bytes of each and adds them into HB*CW accumulators, instead of a load and a
 * store of o per row and head. Each accumulator starts at +0 and adds p*x in ascending
 * row order: the bits of the axpy loop. */
AVX2_INLINE void wsum_block(float *o, size_t os, const float *p, size_t ps,
                            const float *const *rows, int n_rows, int c, __m256i m,
                            const int HB, const int CW, const int masked) {
    __m256 acc[4][2];
    for (int h = 0; h < HB; h++)
        for (int k = 0; k < CW; k++) acc[h][k] = _mm256_setzero_ps();
    for (int j = 0; j < n_rows; j++) {
        const float *x = rows[j] + c;
        __m256 xv[2];
        for (int k = 0; k < CW; k++)
            xv[k] = masked && k == CW - 1 ? _mm256_maskload_ps(x + 8 * k, m) : _mm256_loadu_ps(x + 8 * k);
        for (int h = 0; h < HB; h++) {
            const __m256 pv = _mm256_broadcast_ss(p + h * ps + j);
            for (int k = 0; k < CW; k++) acc[h][k] = _mm256_add_ps(acc[h][k], _mm256_mul_ps(pv, xv[k]));
        }
    }
    for (int h = 0; h < HB; h++)
        for (int k = 0; k < CW; k++) {
            if (masked && k == CW - 1) _mm256_maskstore_ps(o + h * os + c + 8 * k, m, acc[h][k]);
            else _mm256_storeu_ps(o + h * os + c + 8 * k, acc[h][k]);
        }
}

AVX2_FN static void wsum_avx2(float *o, size_t os, int nh, const float *p, size_t ps,
                              const float *const *rows, int n_rows, int n) {
    int c = 0;
    for (; c + 16 <= n; c += 16) { /* full 16-column blocks */
        int h = 0;
        for (; h + 4 <= nh; h += 4) wsum_block(o + h * os, os, p + h * ps, ps, rows, n_rows, c, mask_first(8), 4, 2, 0);
        for (; h < nh; h++) wsum_block(o + h * os, os, p + h * ps, ps, rows, n_rows, c, mask_first(8), 1, 2, 0);
    }
    if (c < n) { /* the last 1..15 columns: one or two chunks, the last one masked */
        const int w = n - c;
        const __m256i m = mask_first(w > 8 ? w - 8 : w);
        int h = 0;
        if (w > 8) {
            for (; h + 4 <= nh; h += 4) wsum_block(o + h * os, os, p + h * ps, ps, rows, n_rows, c, m, 4, 2, 1);
            for (; h < nh; h++) wsum_block(o + h * os, os, p + h * ps, ps, rows, n_rows, c, m, 1, 2, 1);
        } else {
            for (; h + 4 <= nh; h += 4) wsum_block(o + h * os, os, p + h * ps, ps, rows, n_rows, c, m, 4, 1, 1);
            for (; h < nh; h++) wsum_block(o + h * os, os, p + h * ps, ps, rows, n_rows, c, m, 1, 1, 1);
        }
    }
}

static const dsv4_attn_ops avx2_ops = {dotn_avx2, axpyn_avx2, wsum_avx2};
#define HAVE_AVX2_OPS 1
#endif

const dsv4_attn_ops *dsv4_attn_ops_for(int simd) {
#ifdef HAVE_AVX2_OPS
    if (simd >= DSV4_SIMD_AVX2) return &avx2_ops;
#endif
    (void)simd;
    return &scalar_ops;
}
