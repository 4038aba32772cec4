/* idx_fi.c — FP4 keys scored from their bytes by integer block dots (dsv4_idx_approx_fp4_int,
 * contract: idx_approx.h; the scheme: idx_approx_impl.h): the query's portable encoding, the
 * portable level (the levels' second opinion), and the entry points, which take the SIMD
 * levels of idx_fi_x512.c and idx_fi_avx2.c where the build and the CPU have them.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/idx_approx_impl.h"

/* e2m1 codes times 2 */
static const int8_t FI_X2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* One query (nI heads of dI) into vec[0, ceil(nI / 16)); 0 when a value is not c s / 2 as
 * above (not F3's rounding; NaN, infinite, or a block's amax past 2^100). */
static int fi_encode(const float *qI, const float *wI, int nI, int dI, fi_vec *vec) {
    const int nb = dI / 32;
    memset(vec, 0, sizeof *vec * (size_t)((nI + 15) / 16));
    for (int h = 0; h < nI; h++) {
        fi_vec *e = vec + h / 16;
        const int l = h % 16;
        e->w[l] = wI[h];
        for (int b = 0; b < nb; b++) {
            const float *x = qI + (size_t)h * dI;
            float amax = DSV4_FID_AMAX_FLOOR_FP4;
            for (int i = 32 * b; i < 32 * b + 32; i++) amax = !(fabsf(x[i]) <= amax) ? fabsf(x[i]) : amax;
            if (!(amax <= 0x1p100f)) return 0; /* NaN too */
            const float s = dsv4_fid_pow2_scale(amax, 1.0f / 6.0f), inv = 2.0f / s;
            int sum = 0;
            for (int t = 0; t < 8; t++)
                for (int i = 0; i < 4; i++) {
                    const float xv = x[fi_value(8 * b + t, i)], c = xv * inv;
                    if (!(fabsf(c) <= 12.0f) || c != nearbyintf(c) || c * s * 0.5f != xv) return 0;
                    e->qt[8 * b + t][4 * l + i] = (int8_t)c;
                    sum += (int)c;
                }
            e->init[b][l] = -12 * sum;
            e->qf[b][l] = s;
        }
    }
    return 1;
}

/* The 16 lanes summed as hsum16 sums each vector (its levels: halves, 128-bit lanes, 64-bit
 * pairs, neighbours). */
static inline float fi_tree16(const float *x) {
    float y[8], z[4];
    for (int k = 0; k < 8; k++) y[k] = x[k] + x[k + 8];
    for (int k = 0; k < 4; k++) z[k] = y[k] + y[k + 4];
    return (z[0] + z[2]) + (z[1] + z[3]);
}

/* Block b's squared codes of a key row (nb blocks: the nibbles, then the scale bytes) */
static inline int32_t fi_c2(const uint8_t *row, int b) {
    int32_t c2 = 0;
    for (int i = 32 * b; i < 32 * b + 32; i++) {
        const int c = FI_X2[(row[i / 2] >> (4 * (i & 1))) & 15];
        c2 += c * c;
    }
    return c2;
}

/* The portable level: the query of G vectors vp[0, G) against the key row (nb blocks). */
static void fi_score_ref(const fi_vec *const *vp, int G, int nb, const uint8_t *row, float *score, float *knorm) {
    float kf[FI_NB], lanes[16];
    int32_t c2[FI_NB];
    for (int b = 0; b < nb; b++) {
        c2[b] = fi_c2(row, b);
        kf[b] = fi_kf(row[16 * nb + b]);
    }
    for (int g = 0; g < G; g++) {
        const fi_vec *e = vp[g];
        for (int l = 0; l < 16; l++) {
            float d = 0.0f;
            for (int b = 0; b < nb; b++) {
                int32_t I = e->init[b][l];
                for (int t = 0; t < 8; t++)
                    for (int i = 0; i < 4; i++) {
                        const int n = fi_value(8 * b + t, i);
                        I += (FI_X2[(row[n / 2] >> (4 * (n & 1))) & 15] + 12) * e->qt[8 * b + t][4 * l + i];
                    }
                const float tt = (float)I * e->qf[b][l];
                d = b ? fmaf(tt, kf[b], d) : tt * kf[b];
            }
            const float r = d > 0.0f ? d : 0.0f;
            lanes[l] = g ? fmaf(e->w[l], r, lanes[l]) : e->w[l] * r;
        }
    }
    *score = fi_tree16(lanes);
    *knorm = fi_norm(c2, row + 16 * nb, nb);
}

int dsv4_idx_fp4q_encode(int simd, const float *qI, const float *wI, int nI, int dI, void *enc) {
    if (!fi_shape(nI, dI)) return 0;
#ifdef HAVE_AVX512_APPROX
    if (simd >= DSV4_SIMD_AVX512) return dsv4_idx_fi_encode_x512(qI, wI, nI, dI, enc);
    if (simd >= DSV4_SIMD_AVX2) return dsv4_idx_fi_encode_avx2(qI, wI, nI, dI, enc);
#endif
    (void)simd;
    return fi_encode(qI, wI, nI, dI, enc);
}

int dsv4_idx_approx_fp4_enc(int simd, const void *const *enc, int nq, const int64_t *lim, const void *const *keys,
                            int64_t w0, int64_t w1, int nI, int dI, float *scores, float *knorm, size_t ss) {
    if (!fi_shape(nI, dI) || nq < 1) return 0;
    const int G = (nI + 15) / 16, nb = dI / 32, qg = FI_V / G; /* queries a pass */
    for (int q0 = 0; q0 < nq; q0 += qg) {
        const int n = nq - q0 < qg ? nq - q0 : qg, V = n * G;
        const fi_vec *vp[FI_V];
        for (int v = 0; v < V; v++) vp[v] = (const fi_vec *)enc[q0 + v / G] + v % G;
        int64_t wmax = w0; /* the keys any query of the pass sees */
        for (int q = q0; q < q0 + n; q++) {
            const int64_t end = lim[q] < w1 ? lim[q] : w1;
            wmax = end > wmax ? end : wmax;
        }
        if (wmax <= w0) continue;
        float *sc = scores + (size_t)q0 * ss, *kn = knorm + (size_t)q0 * ss;
#ifdef HAVE_AVX512_APPROX
        if (simd >= DSV4_SIMD_AVX512VBMI) {
            dsv4_idx_fi_x512_vnni(vp, V, G, nb, n, lim + q0, keys, w0, wmax, w1, sc, kn, ss);
            continue;
        }
        if (simd >= DSV4_SIMD_AVX512) {
            dsv4_idx_fi_x512_bw(vp, V, G, nb, n, lim + q0, keys, w0, wmax, w1, sc, kn, ss);
            continue;
        }
        if (simd >= DSV4_SIMD_AVX2) {
            dsv4_idx_fi_avx2(vp, V, G, nb, n, lim + q0, keys, w0, wmax, w1, sc, kn, ss);
            continue;
        }
#endif
        for (int q = 0; q < n; q++) {
            const int64_t end = lim[q0 + q] < w1 ? lim[q0 + q] : w1;
            for (int64_t w = w0; w < end; w++)
                fi_score_ref(vp + q * G, G, nb, keys[w], sc + (size_t)q * ss + w, kn + (size_t)q * ss + w);
        }
    }
    return 1;
}

int dsv4_idx_approx_fp4_int(int simd, const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                            const int64_t *lim, const void *const *keys, int64_t w0, int64_t w1, int nI, int dI,
                            float *scores, float *knorm, size_t ss) {
    if (!fi_shape(nI, dI) || nq < 1) return 0;
    fi_vec buf[FI_V];
    const int G = (nI + 15) / 16, qg = FI_V / G;
    for (int q0 = 0; q0 < nq; q0 += qg) {
        const int n = nq - q0 < qg ? nq - q0 : qg;
        const void *enc[FI_V];
        for (int q = 0; q < n; q++) {
            enc[q] = buf + q * G;
            if (!dsv4_idx_fp4q_encode(simd, qI + (size_t)(q0 + q) * qs, wI + (size_t)(q0 + q) * ws, nI, dI, buf + q * G))
                return 0;
        }
        dsv4_idx_approx_fp4_enc(simd, enc, n, lim + q0, keys, w0, w1, nI, dI, scores + (size_t)q0 * ss,
                                knorm + (size_t)q0 * ss, ss);
    }
    return 1;
}
