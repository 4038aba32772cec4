/* idx_fi_avx2.c — the integer pass on FP4 keys at AVX2 (idx_approx_impl.h), and the query's
 * AVX2 encoder (the AVX-512 one's comment, idx_fi_x512.c, describes both). Each function
 * carries its own target attribute.
 */
#include "kernels/idx_approx_impl.h"

#ifdef HAVE_AVX512_APPROX
/* ---- the AVX2 level: the same integer block dots (vpmaddubsw pairs summed in int16 over a
 * block's 8 slots, then vpmaddwd), 8 heads a vector (a 16-head vector's two halves), the
 * float operations of fi_score_ref lane by lane and its tree (f2_tree8); the keys' squared
 * codes per block by vpmaddubsw, their norms (fi_norm) and scales one key at a time. */
#define F2_FN __attribute__((target("avx2,fma")))
#define F2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

/* 8 keys' vectors y[j] (lane k: a query's heads k and k + 8 summed, fi_tree16's first level)
 * to their scores, lane j key j's: fi_tree16's other levels. */
F2_INLINE __m256 f2_tree8(const __m256 *y) {
    __m256 z[4], p[2];
    for (int j = 0; j < 4; j++) /* lanes 0-3: key j's y[k] + y[k + 4], lanes 4-7: key j + 4's */
        z[j] = _mm256_add_ps(_mm256_permute2f128_ps(y[j], y[j + 4], 0x20), _mm256_permute2f128_ps(y[j], y[j + 4], 0x31));
    for (int i = 0; i < 2; i++) { /* per 128-bit lane: key 2i's z0 + z2, z1 + z3, then key 2i + 1's */
        const __m256d a = _mm256_castps_pd(z[2 * i]), b = _mm256_castps_pd(z[2 * i + 1]);
        p[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    }
    return _mm256_add_ps(_mm256_shuffle_ps(p[0], p[1], 0x88), _mm256_shuffle_ps(p[0], p[1], 0xDD));
}

F2_INLINE void fi_run_avx2(const fi_vec *const *vp, int G, int nb, int nq, const int64_t *lim,
                           const void *const *keys, int64_t w0, int64_t wmax, int64_t w1, float *scores,
                           float *knorm, size_t ss, const int V, const int J) {
    _Alignas(32) uint8_t kq[16][128]; /* as the AVX-512 levels' */
    _Alignas(32) float kf[FI_NB][16], kn[16];
    const __m256i tabu = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m256i taba = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12));
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const int64_t row_bytes = 17 * nb;
    for (int64_t w = w0; w < wmax; w += 16) {
        const int nk = wmax - w < 16 ? (int)(wmax - w) : 16;
        for (int j = 0; j < 16; j++) {
            if (j >= nk) { /* past the range: zero codes, dotted but not kept */
                memset(kq[j], 12, sizeof kq[j]);
                for (int b = 0; b < nb; b++) kf[b][j] = 0.0f;
                kn[j] = 0.0f;
                continue;
            }
            const uint8_t *row = keys[w + j];
            if (w + 16 + j < wmax) {
                const char *nr = keys[w + 16 + j];
                _mm_prefetch(nr, _MM_HINT_T0);
                _mm_prefetch(nr + row_bytes - 1, _MM_HINT_T0);
            }
            int32_t c2[FI_NB];
            for (int h = 0; 32 * h < 16 * nb; h++) { /* row bytes 32 h ..: blocks 2 h and 2 h + 1 */
                const __m256i x = 16 * nb - 32 * h >= 32 ? _mm256_loadu_si256((const __m256i *)(row + 32 * h))
                                                         : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(row + 32 * h)));
                const __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
                _mm256_store_si256((__m256i *)(kq[j] + 32 * h), _mm256_shuffle_epi8(tabu, lo));
                _mm256_store_si256((__m256i *)(kq[j] + 64 + 32 * h), _mm256_shuffle_epi8(tabu, hi));
                const __m256i al = _mm256_shuffle_epi8(taba, lo), ah = _mm256_shuffle_epi8(taba, hi);
                const __m256i s = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(al, al), _mm256_maddubs_epi16(ah, ah)), ones);
                _Alignas(32) int32_t d[8];
                _mm256_store_si256((__m256i *)d, s);
                c2[2 * h] = d[0] + d[1] + d[2] + d[3];
                if (2 * h + 1 < nb) c2[2 * h + 1] = d[4] + d[5] + d[6] + d[7];
            }
            for (int b = 0; b < nb; b++) kf[b][j] = fi_kf(row[16 * nb + b]);
            kn[j] = fi_norm(c2, row + 16 * nb, nb);
        }
        __m256 tq[FI_V * 16 * 2]; /* query qn, key j, half: tq[(16 qn + j) 2 + half] */
        for (int j0 = 0; j0 < 16; j0 += J) {
            __m256 dsum[8]; /* [u J + j], u = 2 v + half; nb >= 1: block 0 sets them */
            for (int i = 0; i < 2 * V * J; i++) dsum[i] = _mm256_setzero_ps();
            for (int b = 0; b < nb; b++) {
                __m256i acc[8];
                for (int i = 0; i < 2 * V * J; i++) acc[i] = _mm256_setzero_si256();
                for (int t = 0; t < 8; t++) {
                    const int off = (t < 4 ? 0 : 64) + 16 * b + 4 * (t & 3);
                    for (int j = 0; j < J; j++) {
                        int32_t kd;
                        memcpy(&kd, kq[j0 + j] + off, 4);
                        const __m256i kb = _mm256_set1_epi32(kd);
                        for (int u = 0; u < 2 * V; u++) {
                            const __m256i qv = _mm256_load_si256((const __m256i *)(vp[u / 2]->qt[8 * b + t] + 32 * (u % 2)));
                            acc[u * J + j] = _mm256_add_epi16(acc[u * J + j], _mm256_maddubs_epi16(kb, qv));
                        }
                    }
                }
                for (int u = 0; u < 2 * V; u++) {
                    const __m256 qf = _mm256_load_ps(vp[u / 2]->qf[b] + 8 * (u % 2));
                    const __m256i in = _mm256_load_si256((const __m256i *)(vp[u / 2]->init[b] + 8 * (u % 2)));
                    for (int j = 0; j < J; j++) {
                        const __m256i I = _mm256_add_epi32(in, _mm256_madd_epi16(acc[u * J + j], ones));
                        const __m256 tt = _mm256_mul_ps(_mm256_cvtepi32_ps(I), qf);
                        const __m256 kb = _mm256_set1_ps(kf[b][j0 + j]);
                        dsum[u * J + j] = b ? _mm256_fmadd_ps(tt, kb, dsum[u * J + j]) : _mm256_mul_ps(tt, kb);
                    }
                }
            }
            for (int u = 0; u < 2 * V; u++) {
                const int v = u / 2;
                const __m256 wv = _mm256_load_ps(vp[v]->w + 8 * (u % 2));
                for (int j = 0; j < J; j++) {
                    const __m256 r = _mm256_max_ps(dsum[u * J + j], _mm256_setzero_ps());
                    __m256 *t = tq + (16 * (v / G) + j0 + j) * 2 + u % 2;
                    *t = v % G ? _mm256_fmadd_ps(wv, r, *t) : _mm256_mul_ps(wv, r);
                }
            }
        }
        for (int qn = 0; qn < nq; qn++) {
            const int64_t e = lim[qn] < w1 ? lim[qn] : w1;
            for (int k8 = 0; k8 < 16 && w + k8 < e; k8 += 8) {
                __m256 y[8];
                for (int j = 0; j < 8; j++) y[j] = _mm256_add_ps(tq[(16 * qn + k8 + j) * 2], tq[(16 * qn + k8 + j) * 2 + 1]);
                _Alignas(32) float sc[8];
                _mm256_store_ps(sc, f2_tree8(y));
                const int64_t n = e - w - k8 < 8 ? e - w - k8 : 8;
                memcpy(scores + (size_t)qn * ss + w + k8, sc, sizeof(float) * (size_t)n);
                memcpy(knorm + (size_t)qn * ss + w + k8, kn + k8, sizeof(float) * (size_t)n);
            }
        }
    }
}

F2_FN void dsv4_idx_fi_avx2(const fi_vec *const *vp, int V, int G, int nb, int nq, const int64_t *lim,
                          const void *const *keys, int64_t w0, int64_t wmax, int64_t w1, float *scores, float *knorm,
                          size_t ss) {
    if (V == 1) fi_run_avx2(vp, G, nb, nq, lim, keys, w0, wmax, w1, scores, knorm, ss, 1, 2);
    else fi_run_avx2(vp, G, nb, nq, lim, keys, w0, wmax, w1, scores, knorm, ss, V, 1);
}

/* r[j] = row j of an 8 x 8 block of dwords in, column j out: dword pairs of two rows, then
 * qword pairs (four rows' column j in each 128-bit lane: columns j and j + 4), then lanes. */
F2_INLINE void f2_transpose8(__m256i r[8]) {
    __m256i p[8], q[8];
    for (int i = 0; i < 8; i += 2) {
        p[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        p[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int h = 0; h < 8; h += 4) /* rows h .. h + 3: q[h + j] holds columns j, j + 4 */
        for (int k = 0; k < 2; k++) {
            q[h + 2 * k] = _mm256_unpacklo_epi64(p[h + k], p[h + k + 2]);
            q[h + 2 * k + 1] = _mm256_unpackhi_epi64(p[h + k], p[h + k + 2]);
        }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2x128_si256(q[c], q[4 + c], 0x20);
        r[c + 4] = _mm256_permute2x128_si256(q[c], q[4 + c], 0x31);
    }
}

F2_FN int dsv4_idx_fi_encode_avx2(const float *qI, const float *wI, int nI, int dI, fi_vec *vec) {
    const int nb = dI / 32, G = (nI + 15) / 16;
    _Alignas(32) int8_t hb[16 * FI_V][128]; /* every head's codes in slot order, zero past nI */
    memset(vec, 0, sizeof *vec * (size_t)G);
    memset(hb, 0, sizeof hb[0] * 16 * (size_t)G);
    const __m256i eo = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7); /* evens to the low lane, odds to the high */
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), twelve = _mm256_set1_ps(12.0f);
    const __m256 half = _mm256_set1_ps(0.5f);
    for (int h = 0; h < nI; h++) { /* head h: lane h % 16 of group h / 16 */
        fi_vec *e = vec + h / 16;
        for (int b = 0; b < nb; b++) {
            const float *x = qI + (size_t)h * dI + 32 * b;
            __m256 xv[4], m = _mm256_setzero_ps();
            for (int k = 0; k < 4; k++) {
                xv[k] = _mm256_loadu_ps(x + 8 * k);
                m = _mm256_max_ps(m, _mm256_and_ps(xv[k], absm));
            }
            const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            float amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
            if (!fi_amax_ok(&amax)) return 0;
            const float s = fi_scale(amax);
            const __m256 inv = _mm256_set1_ps(2.0f / s), sv = _mm256_set1_ps(s);
            __m256i iv[4], sum = _mm256_setzero_si256();
            int ok = 0xFF;
            for (int k = 0; k < 4; k++) {
                const __m256 c = _mm256_mul_ps(xv[k], inv);
                iv[k] = _mm256_cvtps_epi32(c);
                const __m256 f = _mm256_cvtepi32_ps(iv[k]);
                const __m256 good = _mm256_and_ps(
                    _mm256_and_ps(_mm256_cmp_ps(f, c, _CMP_EQ_OQ), _mm256_cmp_ps(_mm256_and_ps(c, absm), twelve, _CMP_LE_OQ)),
                    _mm256_cmp_ps(_mm256_mul_ps(_mm256_mul_ps(f, sv), half), xv[k], _CMP_EQ_OQ));
                ok &= _mm256_movemask_ps(good);
                sum = _mm256_add_epi32(sum, iv[k]);
                iv[k] = _mm256_permutevar8x32_epi32(iv[k], eo);
            }
            if (ok != 0xFF) return 0;
            /* lane 0: evens 0-14 | 16-30 as int16, then bytes; lane 1 the odds: slot order */
            const __m256i a = _mm256_packs_epi32(iv[0], iv[1]), c = _mm256_packs_epi32(iv[2], iv[3]);
            _mm256_store_si256((__m256i *)(hb[h] + 32 * b), _mm256_packs_epi16(a, c));
            const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
            const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
            e->init[b][h % 16] = -12 * _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xB1)));
            e->qf[b][h % 16] = s;
        }
        e->w[h % 16] = wI[h];
    }
    for (int h0 = 0; h0 < 16 * G; h0 += 8) /* slots s0 .. s0 + 7 of heads h0 .. h0 + 7 */
        for (int s0 = 0; s0 < 8 * nb; s0 += 8) {
            __m256i r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_load_si256((const __m256i *)(hb[h0 + i] + 4 * s0));
            f2_transpose8(r);
            for (int j = 0; j < 8; j++)
                _mm256_storeu_si256((__m256i *)(vec[h0 / 16].qt[s0 + j] + 4 * (h0 % 16)), r[j]);
        }
    return 1;
}
#endif
