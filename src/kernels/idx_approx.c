/* idx_approx.c — approximate indexer scores and their error bound (contract: idx_approx.h):
 * the bound's terms, the portable level, and the dispatch to the levels (the F32 / BF16
 * kernels at AVX-512 in idx_approx_x512.c, FP4 keys' integer pass in idx_fi*.c).
 */
#include "kernels/idx_approx.h"

#include <math.h>
#include <string.h>

#include "kernels/codec.h"
#include "kernels/cpu.h"
#include "kernels/idx_approx_impl.h"
#include "kernels/idx_scores.h"
#include "kernels/kv_rows.h"

/* gamma_n = n u / (1 - n u), u = 2^-24: the relative error bound of an n-term inner product */
static double gamma_n(int n) { return n * 0x1p-24 / (1.0 - n * 0x1p-24); }

/* The bound's factor eps (dsv4_idx_approx_query: scale = eps Q, rounded up): what its comment below adds up */
double dsv4_idx_approx_eps(int nI, int dI) {
    const double u = 0x1p-24, gd = gamma_n(dI), gh = gamma_n(nI);
    return 2.0 * (2.0 * gd + 2.0 * gh * (1.0 + gd)) + 8.0 * u;
}

dsv4_idx_bound dsv4_idx_approx_query(const float *qI, const float *wI, int nI, int dI) {
    dsv4_idx_bound b = {0};
    const double u = 0x1p-24;
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
     * (the kernels' ||K||: rounded up, or summed in double and the root rounded up to float, which
     * can be a double ulp, 2^-53 relative, low: the factor 2 covers it); twice that for
     * safety, then 8u * Q for the float sums approx -/+ bound themselves (|approx| <= Q
     * ||K||), each term rounded up */
    const double eps = dsv4_idx_approx_eps(nI, dI);
    b.scale = idx_up(eps * q * (1.0 + 8.0 * u));
    /* gradual underflow: at most 2^-150 more per rounding, 2 dI per dot (both paths), 2 nI
     * per head sum, and the bound's own float sums; twice */
    b.add = idx_up(2.0 * (sumw * 4.0 * dI + 4.0 * nI + 8.0) * 0x1p-150);
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
            knorm[(size_t)q * ss + w] = idx_up(sqrt(n2));
        }
    }
}

typedef struct {
    int simd, kernel;
    const float *qI, *wI;
    size_t qs, ws, ss;
    int nI, dI;
    float *scores, *knorm;
} fp4_approx_job;

static void fp4_approx_run(void *user, int q0, int g, const int64_t *glim, const void *const *fkeys, int64_t c0,
                           int64_t n) {
    const fp4_approx_job *j = user;
    const size_t at = (size_t)q0 * j->ss + (size_t)c0;
    dsv4_idx_approx_kernel(j->simd, j->kernel, j->qI + (size_t)q0 * j->qs, j->qs, j->wI + (size_t)q0 * j->ws, j->ws,
                           g, glim, fkeys, DSV4_ROW_F32, 0, n, j->nI, j->dI, j->scores + at, j->knorm + at, j->ss);
}

int dsv4_idx_approx_bf16_ok(int simd) {
#ifdef HAVE_AVX512_APPROX
    return simd >= DSV4_SIMD_AVX512VBMI && __builtin_cpu_supports("avx512bf16");
#else
    (void)simd;
    return 0;
#endif
}

int dsv4_idx_approx_kernel(int simd, int kernel, const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                           const int64_t *lim, const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI,
                           int dI, float *scores, float *knorm, size_t ss) {
    if (key_fmt == DSV4_ROW_FP4) { /* integer block dots from the bytes, or unpacked in runs (idx_scores.h) */
        const int want_int = kernel == DSV4_IDX_APPROX_INT || (kernel == DSV4_IDX_APPROX_AUTO && simd >= DSV4_IDX_FP4_INT_MIN_SIMD);
        if (want_int && dsv4_idx_approx_fp4_int(simd, qI, qs, wI, ws, nq, lim, keys, w0, w1, nI, dI, scores, knorm, ss))
            return 1;
        fp4_approx_job j = {simd, kernel, qI, wI, qs, ws, ss, nI, dI, scores, knorm};
        dsv4_idx_fp4_runs(simd, lim, nq, keys, w0, w1, dI, fp4_approx_run, &j);
        return 0;
    }
#ifdef HAVE_AVX512_APPROX
    if (simd >= DSV4_SIMD_AVX512 &&
        dsv4_idx_approx_x512(simd, kernel, qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores, knorm, ss))
        return 0;
#endif
#ifdef HAVE_AVX2_APPROX /* the AVX-512 levels have returned above, but past their panels' dI (as this one's) */
    if (simd >= DSV4_SIMD_AVX2 &&
        dsv4_idx_approx_avx2(kernel, qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores, knorm, ss))
        return 0;
#endif
    (void)simd, (void)kernel;
    dsv4_idx_approx_ref(qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores, knorm, ss);
    return 0;
}

int dsv4_idx_approx(int simd, const float *qI, size_t qs, const float *wI, size_t ws, int nq, const int64_t *lim,
                    const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI, int dI, float *scores,
                    float *knorm, size_t ss) {
    return dsv4_idx_approx_kernel(simd, DSV4_IDX_APPROX_AUTO, qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores,
                           knorm, ss);
}

