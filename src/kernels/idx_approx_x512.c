/* idx_approx_x512.c — the approximate indexer pass on F32 and BF16 keys at AVX-512 (contract:
 * idx_approx.h): the key-panel kernel (query blocks) and the few-query kernel (heads in lanes).
 * The functions carry their own target attribute (with "fma": any rounding is allowed here,
 * the bound covers it), so this file needs no ISA flags and runs only at the level cpu.c
 * detected.
 */
#include "kernels/idx_approx_impl.h"

#ifdef HAVE_AVX512_APPROX
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

/* ---- few queries: heads in lanes -------------------------------------------------------
 * At decode a span has one query, and approx_avx512's 32-key transposes (widening, 16x16
 * shuffles, panel stores, double norms) serve only one query's heads: ~169 cycles a key in
 * the lead's decode profile at 35.8K context against the 64 of its FMAs. Here the query is
 * transposed instead, once a call, to (dI, V x 16) with V = nq x ceil(nI / 16) vectors of 16
 * heads (zero rows past nI, zero weights: a padded head adds exactly 0), each key row is
 * widened once into an F32 scratch row (BF16; F32 rows are read in place), and for each d one
 * load of q's column serves J keys' broadcast values (an embedded-broadcast operand: a load,
 * no shuffle), V x J accumulators in flight. relu and the weights in lanes, then one
 * transpose-add of 16 keys' vectors gives 16 scores. No key transpose, no panel stores.
 * The norms: squares summed in float with every rounding upward (embedded rounding) and the
 * root rounded up, so each norm is at or above ||K|| with no error analysis (a sum of
 * nonnegative terms rounded up never falls below the exact sum; squares below the
 * subnormals count as up to 2^-149 each, so a tiny key's norm may read up to ~2^-70); a key
 * whose squares overflow float is summed again in double. */

/* The q transpose on the stack: V x 16 lanes x dI floats (32 KB: Flash's 64 heads x 128). */
#define FQ_QT_FLOATS 8192
/* The widest key (Flash: 128), and the widened rows' stride: a constant, so that the 16 keys'
 * broadcasts address one base register plus displacements (pointers kept in vector registers
 * cost a move each), one line more than a row so the rows spread over the L1 sets. */
#define FQ_MAX_DI 128
#define FQ_KS 144
/* Keys prefetched one block ahead (two and three blocks measured the same with the keys out of
 * cache: 1.33-1.38x the panel kernel at 32K entries, bench_indexer --kernels --cold). The next
 * block's 64-80 lines go out one a d of the dots, not in a burst before them: a burst fills the
 * core's miss buffers and the prefetches wait there (a 4K batch-16 step's perf: 23 % of this
 * kernel's samples on the instruction after the burst); spread, 90.3 -> 72.7 cycles a key in
 * step (session 36 iscore, blocks of steps alternated in one process). */
#define FQ_PF 16

/* Where value d of a key sits in a widened row (and q's column d in qT): BF16 rows widen 32
 * values at once without a shuffle, the even ones by a shift and the odd ones by a mask, so
 * each 32 positions hold a chunk's 16 even values, then its 16 odd ones (the dot's order
 * changes; the bound covers any order). F32 rows keep their order. */
static inline int fq_pos(int bf16, int d) { return bf16 ? (d & ~31) + (d & 1) * 16 + ((d & 31) >> 1) : d; }

/* The positions a widened row spans: dI rounded up to the chunk (32 BF16, 16 F32 values). */
static inline int fq_span(int bf16, int dI) { return bf16 ? (dI + 31) & ~31 : (dI + 15) & ~15; }

/* q's heads transposed: qT[pos(d) * V * 16 + v * 16 + l] = head 16 g + l of query qn (v = qn G
 * + g) at d, zero past nI and at positions of no d; wv[v] the heads' weights, zero past nI. */
AP_INLINE void fq_transpose_q(const float *qI, size_t qs, const float *wI, size_t ws, int nq, int nI, int dI, int G,
                             int bf16, float *qT, __m512 *wv) {
    const int V = nq * G, P = fq_span(bf16, dI);
    if (P != dI) memset(qT, 0, sizeof(float) * (size_t)P * V * 16);
    for (int qn = 0; qn < nq; qn++)
        for (int g = 0; g < G; g++) {
            const int v = qn * G + g, nh = nI - 16 * g < 16 ? nI - 16 * g : 16;
            const __mmask16 hm = (__mmask16)((1u << nh) - 1u);
            wv[v] = _mm512_maskz_loadu_ps(hm, wI + (size_t)qn * ws + 16 * g);
            for (int c = 0; c < dI; c += 16) {
                const int m = dI - c < 16 ? dI - c : 16;
                const __mmask16 mk = (__mmask16)((1u << m) - 1u);
                __m512 r[16];
                for (int l = 0; l < 16; l++)
                    r[l] = l < nh ? _mm512_maskz_loadu_ps(mk, qI + (size_t)qn * qs + (size_t)(16 * g + l) * dI + c)
                                  : _mm512_setzero_ps();
                transpose16(r);
                for (int i = 0; i < m; i++) _mm512_store_ps(qT + ((size_t)fq_pos(bf16, c + i) * V + v) * 16, r[i]);
            }
        }
}

/* One prefetched line of the next block's keys (a test redefines it to record the lines). */
#ifndef FQ_PF_TOUCH
#define FQ_PF_TOUCH(a) _mm_prefetch((const char *)(a), _MM_HINT_T0)
#endif

/* J keys' accumulators against V head vectors: acc[v * J + j] += qT[p][v] * kf[j][p] for p < P
 * (kf rows FQ_KS apart); the npf lines at pf prefetched, one a d (the rest after the loop). */
AP_INLINE void fq_dots(const float *qT, const float *kf, int dI, const int V, const int J, __m512 *acc,
                       const char *const *pf, int npf) {
    for (int i = 0; i < V * J; i++) acc[i] = _mm512_setzero_ps();
    for (int d = 0; d < dI; d++) {
        if (d < npf) FQ_PF_TOUCH(pf[d]);
        __m512 qv[4];
        for (int v = 0; v < V; v++) qv[v] = _mm512_load_ps(qT + ((size_t)d * V + v) * 16);
        for (int j = 0; j < J; j++) {
            const __m512 kb = _mm512_set1_ps(kf[j * FQ_KS + d]);
            for (int v = 0; v < V; v++) acc[v * J + j] = _mm512_fmadd_ps(qv[v], kb, acc[v * J + j]);
        }
    }
    for (int d = dI; d < npf; d++) FQ_PF_TOUCH(pf[d]);
}

AP_INLINE void fq_run(const float *qT, const __m512 *wv, size_t ss, int nq, const int64_t *lim,
                      const void *const *keys, int fmt, int64_t w0, int64_t wmax, int64_t w1, int dI, int G,
                      float *scores, float *knorm, const int V, const int J) {
    _Alignas(64) float kf[16 * FQ_KS]; /* (16, FQ_KS) the block's keys as F32 at fq_pos, zeros in the span */
    const int P = fq_span(fmt == DSV4_ROW_BF16, dI);
    const int64_t row_bytes = dsv4_row_bytes(fmt, dI, 0);
    const char *pf[16 * (FQ_MAX_DI * 4 / 64 + 1)]; /* the next block's lines, issued one a d by the dots */
    for (int64_t w = w0; w < wmax; w += 16) {
        const int nk = wmax - w < 16 ? (int)(wmax - w) : 16;
        int npf = 0;
        for (int64_t k = w + FQ_PF; k < w + FQ_PF + 16 && k < wmax; k++) {
            const char *l = dsv4_line_of(keys[k]);
            for (int64_t i = 0, m = dsv4_lines_in(keys[k], row_bytes); i < m; i++) pf[npf++] = l + 64 * i;
        }
        __m512 n2[16];
        for (int j = 0; j < 16; j++) {
            __m512 acc = _mm512_setzero_ps();
            float *kr = kf + j * FQ_KS;
            if (j < nk && fmt == DSV4_ROW_BF16) {
                const uint16_t *row = keys[w + j];
                for (int c = 0; c < P; c += 32) {
                    const __mmask32 mk = dI - c >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << (dI - c)) - 1u);
                    const __m512i x = _mm512_maskz_loadu_epi16(mk, row + c);
                    const __m512 ev = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
                    const __m512 od = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0xFFFF0000u)));
                    _mm512_store_ps(kr + c, ev);
                    _mm512_store_ps(kr + c + 16, od);
                    acc = _mm512_fmadd_round_ps(ev, ev, acc, FQ_RU);
                    acc = _mm512_fmadd_round_ps(od, od, acc, FQ_RU);
                }
            } else if (j < nk) {
                for (int c = 0; c < P; c += 16) {
                    const __mmask16 mk = dI - c >= 16 ? (__mmask16)0xFFFFu : (__mmask16)((1u << (dI - c)) - 1u);
                    const __m512 r = _mm512_maskz_loadu_ps(mk, (const float *)keys[w + j] + c);
                    _mm512_store_ps(kr + c, r);
                    acc = _mm512_fmadd_round_ps(r, r, acc, FQ_RU);
                }
            } else { /* past the range (the last block): zeros, dotted but not stored */
                for (int c = 0; c < P; c += 16) _mm512_store_ps(kr + c, _mm512_setzero_ps());
            }
            n2[j] = acc;
        }
        __m512 kn = _mm512_sqrt_round_ps(hsum16(n2, 1), FQ_RU);
        const __mmask16 big = _mm512_cmp_ps_mask(kn, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ) & (__mmask16)((1u << nk) - 1u);
        if (big) { /* squares past FLT_MAX (|K_i| > ~1.8e19): those norms in double, as the panel kernel */
            _Alignas(64) float t[16];
            _mm512_store_ps(t, kn);
            for (int j = 0; j < nk; j++)
                if (big >> j & 1) {
                    double s2 = 0.0;
                    for (int i = 0; i < P; i++) s2 += (double)kf[j * FQ_KS + i] * kf[j * FQ_KS + i];
                    t[j] = idx_up(sqrt(s2));
                }
            kn = _mm512_load_ps(t);
        }
        /* per query: tq[qn][j] = sum over its groups of w * relu(dots), lanes = heads */
        __m512 tq[4 * 16];
        for (int j0 = 0; j0 < 16; j0 += J) {
            __m512 acc[16];
            /* pass j0 / J of 16 / J issues its share of the lines */
            const int p0 = npf * j0 / 16, p1 = npf * (j0 + J) / 16;
            fq_dots(qT, kf + j0 * FQ_KS, P, V, J, acc, pf + p0, p1 - p0);
            for (int v = 0; v < V; v++) { /* query v / G, its group v % G */
                __m512 *t = tq + (v / G) * 16 + j0;
                for (int j = 0; j < J; j++) {
                    const __m512 r = _mm512_max_ps(acc[v * J + j], _mm512_setzero_ps());
                    t[j] = v % G ? _mm512_fmadd_ps(wv[v], r, t[j]) : _mm512_mul_ps(wv[v], r);
                }
            }
        }
        fq_store(tq, kn, nq, lim, w, w1, scores, knorm, ss);
    }
}

/* V head vectors in all (nq x ceil(nI / 16), at most 4), J keys a pass: V J <= 16 accumulators. */
AP_FN static void approx_few_avx512(const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                                    const int64_t *lim, const void *const *keys, int fmt, int64_t w0, int64_t w1,
                                    int nI, int dI, float *scores, float *knorm, size_t ss) {
    _Alignas(64) float qT[FQ_QT_FLOATS]; /* (dI, V, 16) */
    __m512 wv[4];
    const int G = (nI + 15) / 16, V = nq * G;
    int64_t wmax = w0;
    for (int q = 0; q < nq; q++) {
        const int64_t e = lim[q] < w1 ? lim[q] : w1;
        wmax = e > wmax ? e : wmax;
    }
    if (wmax <= w0) return;
    fq_transpose_q(qI, qs, wI, ws, nq, nI, dI, G, fmt == DSV4_ROW_BF16, qT, wv);
    if (V == 1) fq_run(qT, wv, ss, nq, lim, keys, fmt, w0, wmax, w1, dI, G, scores, knorm, 1, 16);
    else if (V == 2) fq_run(qT, wv, ss, nq, lim, keys, fmt, w0, wmax, w1, dI, G, scores, knorm, 2, 8);
    else if (V == 3) fq_run(qT, wv, ss, nq, lim, keys, fmt, w0, wmax, w1, dI, G, scores, knorm, 3, 4);
    else fq_run(qT, wv, ss, nq, lim, keys, fmt, w0, wmax, w1, dI, G, scores, knorm, 4, 4);
}

/* Whether the few-query kernel takes this call: at most 4 head vectors, q's transpose on the stack. */
static int few_fits(int nq, int nI, int dI) {
    const int V = nq * ((nI + 15) / 16);
    return nq >= 1 && V <= 4 && dI >= 1 && dI <= FQ_MAX_DI && (size_t)V * 16 * dI <= FQ_QT_FLOATS;
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

int dsv4_idx_approx_x512(int simd, int kernel, const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                         const int64_t *lim, const void *const *keys, int fmt, int64_t w0, int64_t w1, int nI, int dI,
                         float *scores, float *knorm, size_t ss) {
    if (dI < 1 || dI > AP_MAX_DI) return 0;
    if (kernel != DSV4_IDX_APPROX_PANEL && kernel != DSV4_IDX_APPROX_BF16 && few_fits(nq, nI, dI) &&
        (kernel == DSV4_IDX_APPROX_FEW || nq <= DSV4_IDX_APPROX_FEW_MAX_NQ))
        approx_few_avx512(qI, qs, wI, ws, nq, lim, keys, fmt, w0, w1, nI, dI, scores, knorm, ss);
    else if (fmt == DSV4_ROW_BF16 && (kernel == DSV4_IDX_APPROX_AUTO || kernel == DSV4_IDX_APPROX_BF16) &&
             dsv4_idx_approx_bf16_ok(simd) &&
             dsv4_idx_approx_bf16(qI, qs, wI, ws, nq, lim, keys, w0, w1, nI, dI, scores, knorm, ss)) {
    } else approx_avx512(qI, qs, wI, ws, nq, lim, keys, fmt, w0, w1, nI, dI, scores, knorm, ss);
    return 1;
}
#endif
