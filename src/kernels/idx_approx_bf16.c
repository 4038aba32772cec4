/* idx_approx_bf16.c — the approximate indexer pass on BF16 keys in BF16 dot products
 * (vdpbf16ps, AVX512_BF16: 32 multiply-adds an instruction against the F32 FMA's 16), the
 * key-panel kernel's shape (idx_approx_x512.c) with half its multiply-add instructions.
 * Contract: idx_approx.h (DSV4_IDX_APPROX_BF16); taken at avx512vbmi where the CPU has
 * AVX512_BF16 (Zen 4, Sapphire Rapids), for the key-panel kernel's calls on BF16 keys.
 *
 * The keys are BF16 already (exact as BF16 pairs); the query is rounded: q^ = bf16(q)
 * (vcvtneps2bf16: to nearest even, a value below the normals to 0), and r = q - q^ is exact
 * in float (q^ within a factor 2 of q, Sterbenz; or q^ = 0 and r = q). vdpbf16ps's
 * semantics (Intel SDM, VDPBF16PS: per lane two FP32 fused multiply-adds, the odd pair's
 * first, to nearest even, denormal inputs read as 0, denormal results flushed to 0, MXCSR
 * neither read nor written; Zen 4 gives those bits: 3.2M lanes of random, tiny and denormal
 * operands compared with that pseudo-code, session 48). So per head h and key K (dI values)
 * the computed dot D^ and the true D = q . K differ by at most
 *   gamma_dI sum_i |q^_i K_i|      the dI roundings (any order; <= gamma_dI (||q|| + ||r||) ||K||)
 *   + |r . K| <= ||r|| ||K||      the query's rounding (Cauchy-Schwarz)
 *   + 2^-126 ||q^||_1             keys' denormal values read as 0 (|K_i - 0| < 2^-126)
 *   + dI 2^-126 (1 + gamma_dI)    results flushed to 0 (each < 2^-126)
 * The F32 bound (idx_approx.h, dsv4_idx_approx_query) budgets gamma_dI ||q|| ||K|| for the
 * approximate dot and the rest of the sum (relu, weights, head sum, the bound's own float
 * sums) as the F32 kernels', whose arguments hold here with |relu_h| up to (1 + gamma_dI)
 * (||q_h|| + ||r_h||) ||K|| + the absolute terms. What is left over per query:
 *   extra ||K|| + abs,  extra = sum_h |w_h| ||r_h|| (1 + gamma_dI) (1 + gamma_nI),
 *                       abs = sum_h |w_h| (||q^_h||_1 + 2 dI) 2^-126 (1 + gamma_nI),
 * which the kernel folds into the norms it writes: knorm = ||K|| f + c (rounded up) with
 * f = 1 + 1.01 extra / s and c = 1.01 abs' / s (abs' with 2^-125: twice), s at or below the
 * bound's scale (eps Q in double, times 1 - 2^-20), so that the callers' scale * knorm +
 * add covers it with no change to them (1.01: the terms' own roundings, ~1e-5 relative, and
 * the float product's). ||r_h|| and ||q_h|| are summed in double (no square underflows).
 * Against the F32 pass the bound loosens by f ~ 1 + 0.0008 / eps (a BF16 rounding's typical
 * 2^-9-ish relative error, eps ~3.5e-5 at 16 x 128): ~20x, so ~20x the entries near the
 * top-k boundary are rescored exactly (BENCHMARKS.md, session 48). A query whose f passes
 * AB_F_MAX (values below the normals, where r = q) or whose terms are not finite (a value
 * near FLT_MAX rounds to infinity; NaN) is not scored here: the call returns 0 and the
 * F32 key-panel kernel scores it.
 */
#include "kernels/idx_approx_impl.h"

#ifdef HAVE_AVX512_APPROX
#define AB_TARGET "avx512f,avx512dq,avx512vl,avx512bw,avx512bf16,fma"
#define AB_FN __attribute__((target(AB_TARGET)))
#define AB_INLINE static inline __attribute__((always_inline, target(AB_TARGET)))

#define AB_MAX_P (AP_MAX_DI / 2) /* BF16 pairs a key at most */
#define AB_QP_DWORDS 16384       /* 64 KB of the queries' pairs on the stack: a group of queries at a time */
#define AB_MAX_NQ 16             /* queries a call (more: the F32 kernel) */
#define AB_F_MAX 512.0           /* the largest factor f taken (typical: ~20) */

/* 16 BF16 values (a __m256bh's bits) widened to F32: exact */
AB_INLINE __m512 ab_widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

/* Query qq (nI heads of dI, weights wq): the factor f and the term c (see above), and where
 * qp is not NULL its BF16 pairs qp[h * P + p] = (q^[2p], q^[2p + 1]) (P = (dI + 1) / 2, a zero
 * past dI). 0 where f passes AB_F_MAX or a term is not finite. */
AB_INLINE int ab_query(const float *qq, const float *wq, int nI, int dI, uint32_t *qp, float *fo, float *co) {
    const int P = (dI + 1) / 2;
    double ext = 0.0, qn = 0.0, l1 = 0.0;
    for (int h = 0; h < nI; h++) {
        __m512d r2 = _mm512_setzero_pd(), q2 = _mm512_setzero_pd();
        __m512 a1 = _mm512_setzero_ps();
        const float *x = qq + (size_t)h * dI;
        for (int c = 0; c < dI; c += 32) {
            const int m = dI - c < 32 ? dI - c : 32;
            const __mmask16 m0 = (__mmask16)(m >= 16 ? 0xFFFFu : (1u << m) - 1u);
            const __mmask16 m1 = (__mmask16)(m >= 32 ? 0xFFFFu : m > 16 ? (1u << (m - 16)) - 1u : 0u);
            const __m512 x0 = _mm512_maskz_loadu_ps(m0, x + c), x1 = _mm512_maskz_loadu_ps(m1, x + c + 16);
            const __m256i h0 = (__m256i)_mm512_cvtneps_pbh(x0), h1 = (__m256i)_mm512_cvtneps_pbh(x1);
            const __m512 y0 = ab_widen(h0), y1 = ab_widen(h1);
            const __m512 r0 = _mm512_sub_ps(x0, y0), r1 = _mm512_sub_ps(x1, y1); /* exact */
            const __m512 v[4] = {r0, r1, x0, x1};
            for (int k = 0; k < 4; k++) {
                const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v[k]));
                const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v[k], 1));
                if (k < 2) r2 = _mm512_fmadd_pd(lo, lo, _mm512_fmadd_pd(hi, hi, r2));
                else q2 = _mm512_fmadd_pd(lo, lo, _mm512_fmadd_pd(hi, hi, q2));
            }
            a1 = _mm512_add_ps(a1, _mm512_add_ps(_mm512_abs_ps(y0), _mm512_abs_ps(y1)));
            if (qp) {
                const __mmask16 pm = (__mmask16)(m >= 32 ? 0xFFFFu : (1u << ((m + 1) / 2)) - 1u);
                _mm512_mask_storeu_epi32(qp + (size_t)h * P + c / 2, pm,
                                         _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1));
            }
        }
        const double wh = fabs((double)wq[h]);
        ext += wh * sqrt(_mm512_reduce_add_pd(r2));
        qn += wh * sqrt(_mm512_reduce_add_pd(q2));
        /* the float sum of |q^| (dI terms: within gamma_dI < 2^-10 of the true sum) */
        l1 += wh * ((double)_mm512_reduce_add_ps(a1) * (1.0 + 0x1p-10) + 2.0 * dI);
    }
    const double s = dsv4_idx_approx_eps(nI, dI) * qn * (1.0 - 0x1p-20);
    const double f = 1.0 + 1.01 * ext / s, c = 1.01 * l1 * 0x1p-125 / s;
    if (!(s > 0.0) || !(f <= AB_F_MAX) || !(c <= 0x1p100)) return 0; /* NaN fails too */
    *fo = idx_up(f), *co = idx_up(c);
    return 1;
}

/* Keys [w, w + nk) (nk <= 16) into panel (P, 16) of BF16 pairs: panel[p * 16 + j] = key w + j's
 * values 2p, 2p + 1 (a zero past dI and for j >= nk); returns their norms as load_panel
 * (idx_approx_x512.c): the squares summed in double, the root rounded up to float. */
AB_INLINE __m512 ab_panel(const void *const *keys, int64_t w, int nk, int dI, uint32_t *panel) {
    __m512d n2lo = _mm512_setzero_pd(), n2hi = _mm512_setzero_pd();
    const __m512i him = _mm512_set1_epi32((int)0xFFFF0000u);
    for (int c = 0; c < dI; c += 32) {
        const int m = dI - c < 32 ? dI - c : 32, np = (m + 1) / 2;
        const __mmask32 mk = m >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << m) - 1u);
        __m512 r[16];
        for (int j = 0; j < 16; j++)
            r[j] = j < nk ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(mk, (const uint16_t *)keys[w + j] + c))
                          : _mm512_setzero_ps();
        transpose16(r);
        for (int i = 0; i < np; i++) {
            _mm512_store_ps((float *)panel + (size_t)(c / 2 + i) * 16, r[i]);
            const __m512 ev = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(r[i]), 16));
            const __m512 od = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(r[i]), him));
            const __m512d el = _mm512_cvtps_pd(_mm512_castps512_ps256(ev));
            const __m512d eh = _mm512_cvtps_pd(_mm512_extractf32x8_ps(ev, 1));
            const __m512d ol = _mm512_cvtps_pd(_mm512_castps512_ps256(od));
            const __m512d oh = _mm512_cvtps_pd(_mm512_extractf32x8_ps(od, 1));
            n2lo = _mm512_fmadd_pd(ol, ol, _mm512_fmadd_pd(el, el, n2lo));
            n2hi = _mm512_fmadd_pd(oh, oh, _mm512_fmadd_pd(eh, eh, n2hi));
        }
    }
#define AB_UP (_MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvt_roundpd_ps(_mm512_sqrt_pd(n2lo), AB_UP)),
                              _mm512_cvt_roundpd_ps(_mm512_sqrt_pd(n2hi), AB_UP), 1);
}

/* s0 += sum over G heads from h0 of wq[h] * relu(q^[h] . p0) for panel p0's 16 keys, s1 the
 * same for p1's: heads_g2 (idx_approx_x512.c) over BF16 pairs, each query pair broadcast once
 * for 32 keys (an embedded broadcast), 2 G vdpbf16ps per 2 panel loads. */
AB_INLINE void ab_heads(const uint32_t *qp, const float *wq, int h0, int P, const uint32_t *p0, const uint32_t *p1,
                        __m512 *s0, __m512 *s1, const int G) {
    __m512 a[8], b[8];
    for (int g = 0; g < G; g++) a[g] = b[g] = _mm512_setzero_ps();
    for (int p = 0; p < P; p++) {
        const __m512bh k0 = (__m512bh)_mm512_load_si512(p0 + (size_t)p * 16);
        const __m512bh k1 = (__m512bh)_mm512_load_si512(p1 + (size_t)p * 16);
        for (int g = 0; g < G; g++) {
            const __m512bh q = (__m512bh)_mm512_set1_epi32((int)qp[(size_t)(h0 + g) * P + p]);
            a[g] = _mm512_dpbf16_ps(a[g], k0, q);
            b[g] = _mm512_dpbf16_ps(b[g], k1, q);
        }
    }
    for (int g = 0; g < G; g++) {
        const __m512 wg = _mm512_set1_ps(wq[h0 + g]);
        *s0 = _mm512_fmadd_ps(wg, _mm512_max_ps(a[g], _mm512_setzero_ps()), *s0);
        *s1 = _mm512_fmadd_ps(wg, _mm512_max_ps(b[g], _mm512_setzero_ps()), *s1);
    }
}

/* Queries [0, nq) (their pairs in qp, factors f, terms c) against keys [w0, wmax): approx_avx512's loop. */
AB_INLINE void ab_run(const uint32_t *qp, const float *wI, size_t ws, const float *f, const float *c, int nq,
                      const int64_t *lim, const void *const *keys, int64_t w0, int64_t w1, int nI, int dI,
                      float *scores, float *knorm, size_t ss) {
    _Alignas(64) uint32_t panel[2][AB_MAX_P * 16]; /* two (P, 16) panels: keys [w, w + 16), [w + 16, w + 32) */
    const int P = (dI + 1) / 2;
    int64_t wmax = w0;
    for (int q = 0; q < nq; q++) {
        const int64_t e = lim[q] < w1 ? lim[q] : w1;
        wmax = e > wmax ? e : wmax;
    }
    for (int64_t w = w0; w < wmax; w += 32) {
        const int nk = wmax - w < 32 ? (int)(wmax - w) : 32;
        const int nk0 = nk < 16 ? nk : 16, nk1 = nk - nk0;
        const int64_t wn = w + 32;
        if (wn < wmax) prefetch_keys(keys, DSV4_ROW_BF16, wn, wmax - wn < 32 ? (int)(wmax - wn) : 32, dI);
        const __m512 kn0 = ab_panel(keys, w, nk0, dI, panel[0]);
        const __m512 kn1 = ab_panel(keys, w + 16, nk1, dI, panel[1]);
        for (int q = 0; q < nq; q++) {
            const int64_t e = lim[q] < w1 ? lim[q] : w1;
            if (w >= e) continue;
            const uint32_t *qq = qp + (size_t)q * nI * P;
            const float *wq = wI + (size_t)q * ws;
            __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
            int h = 0;
            for (; h + 8 <= nI; h += 8) ab_heads(qq, wq, h, P, panel[0], panel[1], &s0, &s1, 8);
            if (h + 4 <= nI) {
                ab_heads(qq, wq, h, P, panel[0], panel[1], &s0, &s1, 4);
                h += 4;
            }
            for (; h < nI; h++) ab_heads(qq, wq, h, P, panel[0], panel[1], &s0, &s1, 1);
            const __m512 fq = _mm512_set1_ps(f[q]), cq = _mm512_set1_ps(c[q]);
            const int64_t v0 = e - w < 16 ? e - w : 16, v1 = e - w - 16;
            const __mmask16 m0 = (__mmask16)(v0 >= 16 ? 0xFFFFu : (1u << v0) - 1u);
            _mm512_mask_storeu_ps(scores + (size_t)q * ss + w, m0, s0);
            _mm512_mask_storeu_ps(knorm + (size_t)q * ss + w, m0, _mm512_fmadd_round_ps(kn0, fq, cq, AB_UP));
            if (v1 > 0) {
                const __mmask16 m1 = (__mmask16)(v1 >= 16 ? 0xFFFFu : (1u << v1) - 1u);
                _mm512_mask_storeu_ps(scores + (size_t)q * ss + w + 16, m1, s1);
                _mm512_mask_storeu_ps(knorm + (size_t)q * ss + w + 16, m1, _mm512_fmadd_round_ps(kn1, fq, cq, AB_UP));
            }
        }
    }
}

AB_FN int dsv4_idx_approx_bf16(const float *qI, size_t qs, const float *wI, size_t ws, int nq, const int64_t *lim,
                               const void *const *keys, int64_t w0, int64_t w1, int nI, int dI, float *scores,
                               float *knorm, size_t ss) {
    const int P = (dI + 1) / 2;
    if (nq < 1 || nq > AB_MAX_NQ || dI < 1 || dI > AP_MAX_DI || nI < 1 || (size_t)nI * P > AB_QP_DWORDS) return 0;
    float f[AB_MAX_NQ], c[AB_MAX_NQ];
    for (int q = 0; q < nq; q++) /* every query's terms first: all of the call here, or none */
        if (!ab_query(qI + (size_t)q * qs, wI + (size_t)q * ws, nI, dI, NULL, f + q, c + q)) return 0;
    _Alignas(64) uint32_t qp[AB_QP_DWORDS];
    const int qg = AB_QP_DWORDS / (nI * P); /* queries a group */
    for (int q0 = 0; q0 < nq; q0 += qg) {
        const int n = nq - q0 < qg ? nq - q0 : qg;
        float fd, cd;
        for (int q = 0; q < n; q++)
            ab_query(qI + (size_t)(q0 + q) * qs, wI + (size_t)(q0 + q) * ws, nI, dI, qp + (size_t)q * nI * P, &fd, &cd);
        ab_run(qp, wI + (size_t)q0 * ws, ws, f + q0, c + q0, n, lim + q0, keys, w0, w1, nI, dI,
               scores + (size_t)q0 * ss, knorm + (size_t)q0 * ss, ss);
    }
    return 1;
}
#undef AB_UP
#endif
