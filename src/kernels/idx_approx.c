/* idx_approx.c — approximate indexer scores and their error bound (contract: idx_approx.h).
 *
 * The AVX-512 function carries its own target attribute (with "fma": any rounding is
 * allowed here, the bound covers it), so this file needs no ISA flags and runs it only at
 * the level cpu.c detected.
 */
#include "kernels/idx_approx.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/kv_rows.h"

/* gamma_n = n u / (1 - n u), u = 2^-24: the relative error bound of an n-term inner product */
static double gamma_n(int n) { return n * 0x1p-24 / (1.0 - n * 0x1p-24); }

/* v as a float at or above it */
static float up(double v) {
    float f = (float)v;
    return (double)f < v ? nextafterf(f, INFINITY) : f;
}

dsv4_idx_bound dsv4_idx_approx_query(const float *qI, const float *wI, int nI, int dI) {
    dsv4_idx_bound b = {0};
    const double u = 0x1p-24, gd = gamma_n(dI), gh = gamma_n(nI);
    double q = 0.0, qmax = 0.0, sumw = 0.0;
    for (int h = 0; h < nI; h++) {
        double n2 = 0.0; /* squares of floats are exact in double; the sum loses < 1e-13 */
        for (int i = 0; i < dI; i++) n2 += (double)qI[(size_t)h * dI + i] * qI[(size_t)h * dI + i];
        const double nq = sqrt(n2) * (1.0 + 1e-12);
        q += fabs((double)wI[h]) * nq;
        sumw += fabs((double)wI[h]);
        qmax = nq > qmax ? nq : qmax;
    }
    if (!isfinite(q) || !isfinite(sumw)) return b;
    q *= 1.0 + 1e-12;
    /* each head dot: exact and approx within gd * ||q_h|| ||K|| of the true value; the head
     * sums within gh * sum_h |w_h| |relu_h| of theirs, |relu_h| <= (1 + gd) ||q_h|| ||K||
     * (the kernel's ||K|| is summed in double and rounded up, never low); twice that for
     * safety, then 8u * Q for the float sums approx -/+ bound themselves (|approx| <= Q
     * ||K||), each term rounded up */
    const double eps = 2.0 * (2.0 * gd + 2.0 * gh * (1.0 + gd)) + 8.0 * u;
    b.scale = up(eps * q * (1.0 + 8.0 * u));
    /* gradual underflow: at most 2^-150 more per rounding, 2 dI per dot (both paths), 2 nI
     * per head sum, and the bound's own float sums; twice */
    b.add = up(2.0 * (sumw * 4.0 * dI + 4.0 * nI + 8.0) * 0x1p-150);
    /* keys up to kmax keep Q ||K|| and every dot's terms below 2^120 */
    const double m = q > qmax ? q : qmax;
    b.kmax = m > 0x1p-7 ? (float)(0x1p120 / m) : 0x1p127f;
    b.valid = isfinite(b.scale) && b.kmax > 0.0f;
    return b;
}

/* Key w's values as F32 (fmt F32 or BF16). */
static float key_at(const void *row, int fmt, int i) {
    if (fmt == DSV4_ROW_BF16) {
        const uint32_t u = (uint32_t)((const uint16_t *)row)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    return ((const float *)row)[i];
}

void dsv4_idx_approx_ref(const float *qI, size_t qs, const float *wI, size_t ws, int nq, const int64_t *lim,
                         const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI, int dI, float *scores,
                         float *knorm, size_t ss) {
    for (int q = 0; q < nq; q++) {
        const float *qq = qI + (size_t)q * qs, *wq = wI + (size_t)q * ws;
        const int64_t end = lim[q] < w1 ? lim[q] : w1;
        for (int64_t w = w0; w < end; w++) {
            float s = 0.0f;
            double n2 = 0.0; /* in double: no float square overflows or underflows there */
            for (int i = 0; i < dI; i++) n2 += (double)key_at(keys[w], key_fmt, i) * key_at(keys[w], key_fmt, i);
            for (int h = 0; h < nI; h++) {
                float d = 0.0f;
                for (int i = 0; i < dI; i++) d += qq[(size_t)h * dI + i] * key_at(keys[w], key_fmt, i);
                s += wq[h] * (d > 0.0f ? d : 0.0f);
            }
            scores[(size_t)q * ss + w] = s;
            knorm[(size_t)q * ss + w] = up(sqrt(n2));
        }
    }
}

#if defined(DSV4_HAVE_AVX512) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX512_APPROX 1
#include <immintrin.h>

#define AP_FN __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma")))
#define AP_INLINE static inline __attribute__((always_inline, target("avx512f,avx512dq,avx512vl,avx512bw,fma")))

/* The widest key a panel on the stack holds: (256, 16) floats, 16 KB a panel, two panels (Flash: dI = 128). */
#define AP_MAX_DI 256

/* r[j] = row j of a 16 x 16 block in, column j out: unpack pairs, then 4 x 4 blocks within
 * each 128-bit lane, then the lanes across the four 4-row groups. */
AP_INLINE void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);     /* per lane: a0 b0 a1 b1 */
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]); /* a2 b2 a3 b3 */
    }
    for (int g = 0; g < 4; g++) { /* rows 4g..4g+3: u[4g + b] holds column 4L + b in lane L */
        r[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        r[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        r[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        r[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int b = 0; b < 4; b++) { /* column 4L + b: lane L of r[b], r[4 + b], r[8 + b], r[12 + b] */
        const __m512 a0 = _mm512_shuffle_f32x4(r[b], r[4 + b], 0x88), a1 = _mm512_shuffle_f32x4(r[b], r[4 + b], 0xDD);
        const __m512 c0 = _mm512_shuffle_f32x4(r[8 + b], r[12 + b], 0x88),
                     c1 = _mm512_shuffle_f32x4(r[8 + b], r[12 + b], 0xDD);
        t[b] = _mm512_shuffle_f32x4(a0, c0, 0x88);      /* lane 0 */
        t[8 + b] = _mm512_shuffle_f32x4(a0, c0, 0xDD);  /* lane 2 */
        t[4 + b] = _mm512_shuffle_f32x4(a1, c1, 0x88);  /* lane 1 */
        t[12 + b] = _mm512_shuffle_f32x4(a1, c1, 0xDD); /* lane 3 */
    }
    for (int j = 0; j < 16; j++) r[j] = t[j];
}

/* Keys [w, w + nk) (nk <= 16) into panel (dI, 16): panel[d * 16 + j] = key w + j at d, zero
 * for j >= nk; returns their norms, summed in double (no float square overflows or
 * underflows there) and rounded up to float. */
AP_INLINE __m512 load_panel(const void *const *keys, int fmt, int64_t w, int nk, int dI, float *panel) {
    __m512d n2lo = _mm512_setzero_pd(), n2hi = _mm512_setzero_pd();
    for (int c = 0; c < dI; c += 16) {
        const int m = dI - c < 16 ? dI - c : 16;
        const __mmask16 mk = (__mmask16)((1u << m) - 1u);
        __m512 r[16];
        for (int j = 0; j < 16; j++) {
            if (j >= nk) r[j] = _mm512_setzero_ps();
            else if (fmt == DSV4_ROW_BF16)
                r[j] = _mm512_castsi512_ps(_mm512_slli_epi32(
                    _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)keys[w + j] + c)), 16));
            else r[j] = _mm512_maskz_loadu_ps(mk, (const float *)keys[w + j] + c);
        }
        transpose16(r);
        for (int i = 0; i < m; i++) {
            _mm512_store_ps(panel + (size_t)(c + i) * 16, r[i]);
            const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(r[i]));
            const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(r[i], 1));
            n2lo = _mm512_fmadd_pd(lo, lo, n2lo);
            n2hi = _mm512_fmadd_pd(hi, hi, n2hi);
        }
    }
#define AP_UP (_MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC) /* a constant even at -O0 */
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvt_roundpd_ps(_mm512_sqrt_pd(n2lo), AP_UP)),
                              _mm512_cvt_roundpd_ps(_mm512_sqrt_pd(n2hi), AP_UP), 1);
#undef AP_UP
}

/* s0 += sum over G heads from h0 of wq[h] * relu(qq[h] . p0) for panel p0's 16 keys, s1 the
 * same for p1's. Each q value is broadcast once for 32 keys, so the loop issues 2 G FMAs per
 * 2 panel loads and G broadcasts: hot ~0.93-0.97 of the FMA peak against ~0.7-0.85 for one
 * panel (G = 8, 128-wide keys; session 28's harness, BENCHMARKS.md). */
AP_INLINE void heads_g2(const float *qq, const float *wq, int h0, int dI, const float *p0, const float *p1, __m512 *s0,
                        __m512 *s1, const int G) {
    __m512 a[8], b[8];
    for (int g = 0; g < G; g++) a[g] = b[g] = _mm512_setzero_ps();
    for (int d = 0; d < dI; d++) {
        const __m512 k0 = _mm512_load_ps(p0 + (size_t)d * 16), k1 = _mm512_load_ps(p1 + (size_t)d * 16);
        for (int g = 0; g < G; g++) {
            const __m512 q = _mm512_set1_ps(qq[(size_t)(h0 + g) * dI + d]);
            a[g] = _mm512_fmadd_ps(q, k0, a[g]);
            b[g] = _mm512_fmadd_ps(q, k1, b[g]);
        }
    }
    for (int g = 0; g < G; g++) {
        const __m512 wg = _mm512_set1_ps(wq[h0 + g]);
        *s0 = _mm512_fmadd_ps(wg, _mm512_max_ps(a[g], _mm512_setzero_ps()), *s0);
        *s1 = _mm512_fmadd_ps(wg, _mm512_max_ps(b[g], _mm512_setzero_ps()), *s1);
    }
}

/* Keys [w, w + n) prefetched into L1, every line of their rows: issued before the current
 * keys' FMAs, so the next panels' loads find them there. Without it the panel loads waited
 * on the cache for ~a fifth of the kernel's time at 32K entries (perf, session 28). */
AP_INLINE void prefetch_keys(const void *const *keys, int fmt, int64_t w, int n, int dI) {
    const size_t bytes = (size_t)dI * (fmt == DSV4_ROW_BF16 ? 2 : 4);
    for (int j = 0; j < n; j++) {
        const char *r = (const char *)keys[w + j];
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(r + o, _MM_HINT_T0);
        _mm_prefetch(r + bytes - 1, _MM_HINT_T0); /* a row that starts mid-line ends on one more */
    }
}

AP_FN static void approx_avx512(const float *qI, size_t qs, const float *wI, size_t ws, int nq, const int64_t *lim,
                                const void *const *keys, int fmt, int64_t w0, int64_t w1, int nI, int dI,
                                float *scores, float *knorm, size_t ss) {
    _Alignas(64) float panel[2][AP_MAX_DI * 16]; /* two (dI, 16) panels: keys [w, w + 16), [w + 16, w + 32) */
    int64_t wmax = w0;                            /* the keys any query of the block sees */
    for (int q = 0; q < nq; q++) {
        const int64_t e = lim[q] < w1 ? lim[q] : w1;
        wmax = e > wmax ? e : wmax;
    }
    for (int64_t w = w0; w < wmax; w += 32) {
        const int nk = wmax - w < 32 ? (int)(wmax - w) : 32; /* keys of this pass; a second panel from 17 */
        const int nk0 = nk < 16 ? nk : 16, nk1 = nk - nk0;
        const int64_t wn = w + 32;
        if (wn < wmax) prefetch_keys(keys, fmt, wn, wmax - wn < 32 ? (int)(wmax - wn) : 32, dI);
        const __m512 kn0 = load_panel(keys, fmt, w, nk0, dI, panel[0]);
        const __m512 kn1 = load_panel(keys, fmt, w + 16, nk1, dI, panel[1]); /* zeros when nk1 is 0 */
        for (int q = 0; q < nq; q++) {
            const int64_t e = lim[q] < w1 ? lim[q] : w1;
            if (w >= e) continue;
            const float *qq = qI + (size_t)q * qs, *wq = wI + (size_t)q * ws;
            __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
            int h = 0; /* both panels, whatever q sees: the stores below keep only its keys */
            for (; h + 8 <= nI; h += 8) heads_g2(qq, wq, h, dI, panel[0], panel[1], &s0, &s1, 8);
            if (h + 4 <= nI) {
                heads_g2(qq, wq, h, dI, panel[0], panel[1], &s0, &s1, 4);
                h += 4;
            }
            for (; h < nI; h++) heads_g2(qq, wq, h, dI, panel[0], panel[1], &s0, &s1, 1);
            const int64_t v0 = e - w < 16 ? e - w : 16, v1 = e - w - 16; /* keys of each panel q sees */
            const __mmask16 m0 = (__mmask16)(v0 >= 16 ? 0xFFFFu : (1u << v0) - 1u);
            _mm512_mask_storeu_ps(scores + (size_t)q * ss + w, m0, s0);
            _mm512_mask_storeu_ps(knorm + (size_t)q * ss + w, m0, kn0);
            if (v1 > 0) {
                const __mmask16 m1 = (__mmask16)(v1 >= 16 ? 0xFFFFu : (1u << v1) - 1u);
                _mm512_mask_storeu_ps(scores + (size_t)q * ss + w + 16, m1, s1);
                _mm512_mask_storeu_ps(knorm + (size_t)q * ss + w + 16, m1, kn1);
            }
        }
    }
}
#endif

void dsv4_idx_approx(int simd, const float *qI, size_t qs, const float *wI, size_t ws, int nq, const int64_t *lim,
                     const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI, int dI, float *scores,
                     float *knorm, size_t ss) {
#ifdef HAVE_AVX512_APPROX
    if (simd >= DSV4_SIMD_AVX512 && dI >= 1 && dI <= AP_MAX_DI) {
        approx_avx512(qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores, knorm, ss);
        return;
    }
#endif
    (void)simd;
    dsv4_idx_approx_ref(qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores, knorm, ss);
}
