/* idx_approx_avx2.c — the approximate indexer pass on F32 and BF16 keys at AVX2 (contract:
 * idx_approx.h): the key-panel kernel, the AVX2 form of idx_approx_x512.c's. Before it the
 * AVX2 level ran the portable loop (one scalar multiply and add a term, a dependent chain a
 * head dot): ~3.4 us a key-query at flash_quarter's 16 x 128 on Zen 3 (bench_indexer --kernels).
 *
 * Keys are transposed 8 at a time into (dI, 8) panels, A2_P panels a pass side by side
 * (panel[d][p][8]), once for every query of the block; each query value is broadcast once for
 * the pass's 8 A2_P keys into A2_G x A2_P fused multiply-adds (12 accumulators, the A2_P panel
 * vectors and the broadcast: Zen 3's 16 vector registers). relu, the head weight and the
 * head sum run in the keys' lanes: no reductions. Any summation order and fused
 * multiply-adds are allowed (the bound covers them); the norms are summed in double and
 * rounded up to float, as the portable loop's.
 *
 * The functions carry their own target attribute (avx2, fma), so this file needs no ISA
 * flags and runs only at the level cpu.c detected.
 */
#include "kernels/idx_approx_impl.h"

#ifdef HAVE_AVX2_APPROX
#define A2_FN __attribute__((target("avx2,fma")))
#define A2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

/* The widest key a pass's panels on the stack hold: A2_P x (256, 8) floats, 24 KB. */
#define A2_MAX_DI 256
#define A2_P 3 /* panels of 8 keys a pass */
#define A2_G 4 /* heads a pass of the dots */

/* r[j] = row j of an 8 x 8 block in, column j out: pairs, then 4-row groups within each
 * 128-bit lane, then the lanes. */
A2_INLINE void a2_transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);     /* per lane: a0 b0 a1 b1 */
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]); /* a2 b2 a3 b3 */
    }
    for (int h = 0; h < 2; h++) { /* rows 4h .. 4h + 3: u[4h + b] holds columns b and b + 4 */
        u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
        u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
        u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
    }
    for (int b = 0; b < 4; b++) {
        r[b] = _mm256_permute2f128_ps(u[b], u[4 + b], 0x20);
        r[b + 4] = _mm256_permute2f128_ps(u[b], u[4 + b], 0x31);
    }
}

/* Values [c, c + m) of a key row in fmt (m <= 8) as F32, zero past m. */
A2_INLINE __m256 a2_key8(const void *row, int fmt, int c, int m) {
    if (fmt == DSV4_ROW_BF16) {
        const uint16_t *r = (const uint16_t *)row + c;
        __m128i x;
        if (m == 8) x = _mm_loadu_si128((const __m128i *)r);
        else {
            uint16_t t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            memcpy(t, r, 2 * (size_t)m);
            x = _mm_loadu_si128((const __m128i *)t);
        }
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
    }
    const float *r = (const float *)row + c;
    if (m == 8) return _mm256_loadu_ps(r);
    float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    memcpy(t, r, 4 * (size_t)m);
    return _mm256_loadu_ps(t);
}

/* sqrt(n2) of 4 nonnegative doubles rounded up to float (at or above the root in double). */
A2_INLINE __m128 a2_sqrt_up(__m256d n2) {
    const __m256d r = _mm256_sqrt_pd(n2);
    const __m128 f = _mm256_cvtpd_ps(r); /* to nearest */
    const __m256d lo = _mm256_cmp_pd(_mm256_cvtps_pd(f), r, _CMP_LT_OQ);
    /* each qword's low dword (all ones where f < r) into the low 128 bits: f's bits + 1 there */
    const __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m128i m = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(lo), idx));
    return _mm_castsi128_ps(_mm_sub_epi32(_mm_castps_si128(f), m));
}

/* Keys [w, w + nk) (nk <= 8) into panel p of the pass (pan[d * A2_P * 8 + p * 8 + j] = key
 * w + j at d, zero for j >= nk); returns their norms. */
A2_INLINE __m256 a2_load_panel(const void *const *keys, int fmt, int64_t w, int nk, int dI, float *pan, int p) {
    __m256d n2lo = _mm256_setzero_pd(), n2hi = _mm256_setzero_pd();
    for (int c = 0; c < dI; c += 8) {
        const int m = dI - c < 8 ? dI - c : 8;
        __m256 r[8];
        for (int j = 0; j < 8; j++) r[j] = j < nk ? a2_key8(keys[w + j], fmt, c, m) : _mm256_setzero_ps();
        a2_transpose8(r);
        for (int i = 0; i < m; i++) {
            _mm256_store_ps(pan + (size_t)(c + i) * (A2_P * 8) + 8 * p, r[i]);
            const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(r[i]));
            const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(r[i], 1));
            n2lo = _mm256_fmadd_pd(lo, lo, n2lo);
            n2hi = _mm256_fmadd_pd(hi, hi, n2hi);
        }
    }
    return _mm256_insertf128_ps(_mm256_castps128_ps256(a2_sqrt_up(n2lo)), a2_sqrt_up(n2hi), 1);
}

/* s[p] += sum over G heads from h0 of wq[h] * relu(qq[h] . panel p) for the pass's A2_P
 * panels: each q value broadcast once for 8 A2_P keys, G x A2_P accumulators. */
A2_INLINE void a2_heads(const float *qq, const float *wq, int h0, int dI, const float *pan, __m256 *s, const int G) {
    __m256 a[A2_G * A2_P];
    for (int i = 0; i < G * A2_P; i++) a[i] = _mm256_setzero_ps();
    const float *qh = qq + (size_t)h0 * dI;
    for (int d = 0; d < dI; d++) {
        const float *pd = pan + (size_t)d * (A2_P * 8);
        __m256 k[A2_P];
        for (int p = 0; p < A2_P; p++) k[p] = _mm256_load_ps(pd + 8 * p);
        for (int g = 0; g < G; g++) {
            const __m256 q = _mm256_broadcast_ss(qh + (size_t)g * dI + d);
            for (int p = 0; p < A2_P; p++) a[g * A2_P + p] = _mm256_fmadd_ps(q, k[p], a[g * A2_P + p]);
        }
    }
    for (int g = 0; g < G; g++) {
        const __m256 wg = _mm256_broadcast_ss(wq + h0 + g);
        for (int p = 0; p < A2_P; p++)
            s[p] = _mm256_fmadd_ps(wg, _mm256_max_ps(a[g * A2_P + p], _mm256_setzero_ps()), s[p]);
    }
}

/* lanes [0, v) of an 8-lane mask, v in [1, 8] */
A2_INLINE __m256i a2_first(int64_t v) {
    static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(m + 8 - v));
}

/* Keys [w, w + n) prefetched into L1, every line of their rows (the next pass's, issued
 * before this pass's dots, as the AVX-512 kernel does). */
A2_INLINE void a2_prefetch_keys(const void *const *keys, int fmt, int64_t w, int n, int dI) {
    const int64_t bytes = dsv4_row_bytes(fmt, dI, 0);
    for (int j = 0; j < n; j++) {
        const char *l = dsv4_line_of(keys[w + j]);
        for (int64_t k = 0, m = dsv4_lines_in(keys[w + j], bytes); k < m; k++) DSV4_PREFETCH(l + 64 * k, 0, 3);
    }
}

A2_FN static void approx_panel_avx2(const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                                    const int64_t *lim, const void *const *keys, int fmt, int64_t w0, int64_t w1,
                                    int nI, int dI, float *scores, float *knorm, size_t ss) {
    _Alignas(32) float pan[A2_MAX_DI * A2_P * 8]; /* (dI, A2_P, 8): keys [w, w + 8 A2_P) */
    int64_t wmax = w0;                             /* the keys any query of the block sees */
    for (int q = 0; q < nq; q++) {
        const int64_t e = lim[q] < w1 ? lim[q] : w1;
        wmax = e > wmax ? e : wmax;
    }
    for (int64_t w = w0; w < wmax; w += 8 * A2_P) {
        const int nk = wmax - w < 8 * A2_P ? (int)(wmax - w) : 8 * A2_P;
        const int64_t wn = w + 8 * A2_P;
        if (wn < wmax) a2_prefetch_keys(keys, fmt, wn, wmax - wn < 8 * A2_P ? (int)(wmax - wn) : 8 * A2_P, dI);
        __m256 kn[A2_P];
        for (int p = 0; p < A2_P; p++) { /* panels past nk: zeros, dotted but not stored */
            const int np = nk - 8 * p < 0 ? 0 : nk - 8 * p > 8 ? 8 : nk - 8 * p;
            kn[p] = a2_load_panel(keys, fmt, w + 8 * p, np, dI, pan, p);
        }
        for (int q = 0; q < nq; q++) {
            const int64_t e = lim[q] < w1 ? lim[q] : w1;
            if (w >= e) continue;
            const float *qq = qI + (size_t)q * qs, *wq = wI + (size_t)q * ws;
            __m256 s[A2_P];
            for (int p = 0; p < A2_P; p++) s[p] = _mm256_setzero_ps();
            int h = 0;
            for (; h + A2_G <= nI; h += A2_G) a2_heads(qq, wq, h, dI, pan, s, A2_G);
            if (h + 2 <= nI) {
                a2_heads(qq, wq, h, dI, pan, s, 2);
                h += 2;
            }
            if (h < nI) a2_heads(qq, wq, h, dI, pan, s, 1);
            for (int p = 0; p < A2_P; p++) {
                const int64_t v = e - w - 8 * p; /* keys of panel p this query sees */
                if (v <= 0) break;
                float *sp = scores + (size_t)q * ss + w + 8 * p, *np = knorm + (size_t)q * ss + w + 8 * p;
                if (v >= 8) {
                    _mm256_storeu_ps(sp, s[p]);
                    _mm256_storeu_ps(np, kn[p]);
                } else {
                    const __m256i m = a2_first(v);
                    _mm256_maskstore_ps(sp, m, s[p]);
                    _mm256_maskstore_ps(np, m, kn[p]);
                }
            }
        }
    }
}

int dsv4_idx_approx_avx2(int kernel, const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                         const int64_t *lim, const void *const *keys, int fmt, int64_t w0, int64_t w1, int nI, int dI,
                         float *scores, float *knorm, size_t ss) {
    (void)kernel;
    if (dI < 1 || dI > A2_MAX_DI) return 0;
    approx_panel_avx2(qI, qs, wI, ws, nq, lim, keys, fmt, w0, w1, nI, dI, scores, knorm, ss);
    return 1;
}
#endif
