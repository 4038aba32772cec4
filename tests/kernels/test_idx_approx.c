/* test_idx_approx.c — the approximate indexer scores (kernels/idx_approx.h): at every level,
 * for F32, BF16 and FP4 keys, head counts around the 8-head groups and key widths around the
 * 16-key panel's chunks (and past the panel, where the level falls back), every approximate
 * score lies within its bound of the exact kernel's score, the norms are the keys' norms,
 * (rounded up), nothing is written past a query's limit. Then the bound's terms: tight
 * enough to be useful (a bound that held only because it was huge would make every entry
 * a candidate), invalid for NaN or infinite queries and weights, kmax for huge ones.
 * FP4 keys' integer scores (dsv4_idx_approx_fp4_int) under F3-rounded queries: every level
 * encodes a query as the portable level does, byte for byte, and gives its bits (scores and norms), within the bound of the exact scores
 * on adversarial blocks (scales from the subnormals' edge to 2^100 in one key or query,
 * the largest codes, dots cancelling to the relu's edge, negative weights), nothing past a
 * query's limit; and no score where the query is not F3's or the shape is not covered. */
#include <math.h>
#include <stdint.h>

#include "kernels/attn_ops.h"
#include "kernels/cpu.h"
#include "kernels/fidelity.h"
#include "kernels/idx_approx.h"
#include "kernels/idx_scores.h"
#include "kernels/kv_rows.h"
#include "test.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static double urand(void) { /* uniform [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

/* The queries check_k draws (value i, heads of dI): uniform [-1, 1) (QMIX 0); (QMIX 1) each
 * head at its own scale 2^-150 .. 2^60 with a few values below the normals in every head;
 * (QMIX 2) every value near the normals' edge, half of them below it. The BF16 kernel's
 * adversaries: its rounding reads values below the normals as 0 (a tiny head's residual is
 * the head itself), and QMIX 2's queries loosen its bound past AB_F_MAX (the F32 kernel then). */
static int QMIX;
static float qvalue(size_t i, int dI) {
    const double v = urand();
    if (QMIX == 2) return (float)ldexp(v, -125 - (int)(i % 4));
    if (!QMIX) return (float)v;
    static const int e[] = {-150, -130, -126, -100, -40, -3, 0, 7, 60};
    return (float)ldexp(v, i % 11 == 3 ? -135 : e[(i / (size_t)dI) % 9]);
}

static void check_k(int level, int kernel, int fmt, int nI, int dI, int nk, int nq, double kscale) {
    const dsv4_attn_ops *ops = dsv4_attn_ops_for(DSV4_SIMD_SCALAR);
    const size_t qs = (size_t)nI * dI + 1, ws = (size_t)nI + 2, ss = (size_t)nk + 3;
    float *qI = malloc(sizeof(float) * qs * nq), *wI = malloc(sizeof(float) * ws * nq);
    float *kb = malloc(sizeof(float) * (size_t)nk * dI);
    const size_t rb = fmt == DSV4_ROW_F32 ? 0 : (size_t)dsv4_row_bytes(fmt, dI, 0);
    uint8_t *packed = malloc((size_t)nk * rb + 2);
    const void **keys = malloc(sizeof(void *) * nk);
    for (size_t i = 0; i < qs * nq; i++) qI[i] = qvalue(i, dI);
    for (size_t i = 0; i < ws * nq; i++) wI[i] = (float)(0.1 + fabs(urand()));
    for (int w = 0; w < nk; w++) {
        float *k = kb + (size_t)w * dI;
        for (int c = 0; c < dI; c++) k[c] = (float)(kscale * urand());
        if (w % 9 == 4) /* a near-copy of the previous key: near-tied scores */
            for (int c = 0; c < dI; c++) k[c] = w ? k[c - dI] * (1.0f + 0x1p-20f) : k[c];
        if (w % 13 == 7) /* a zero key: score 0, norm 0 (or the norm's tiny slack) */
            for (int c = 0; c < dI; c++) k[c] = 0.0f;
        if (fmt != DSV4_ROW_F32) { /* BF16, or FP4 (F3's rule: the keys rounded first) */
            dsv4_row_round(fmt, k, dI, 0);
            dsv4_row_pack(fmt, packed + 2 + (size_t)w * rb, k, dI, 0);
            keys[w] = packed + 2 + (size_t)w * rb;
        } else {
            keys[w] = k;
        }
    }
    int64_t lim[16];
    for (int q = 0; q < nq; q++) lim[q] = nk - (nq - 1 - q) * (nk / (nq + 2));
    float *exact = malloc(sizeof(float) * ss * nq), *approx = malloc(sizeof(float) * ss * nq);
    float *knorm = malloc(sizeof(float) * ss * nq);
    for (size_t i = 0; i < ss * nq; i++) approx[i] = knorm[i] = -7.0f;
    dsv4_idx_scores(level, ops, qI, qs, wI, ws, nq, lim, keys, fmt, 0, nk, nI, dI, exact, ss);
    /* two ranges, the second from an odd start */
    const int cut = nk / 3 | 1;
    dsv4_idx_approx_kernel(level, kernel, qI, qs, wI, ws, nq, lim, keys, fmt, 0, cut, nI, dI, approx, knorm, ss);
    dsv4_idx_approx_kernel(level, kernel, qI, qs, wI, ws, nq, lim, keys, fmt, cut, nk, nI, dI, approx, knorm, ss);
    double worst = 0.0, worst_norm = 0.0;
    int out = 0;
    /* the BF16-dot kernel may run (AUTO's or BF16's call on BF16 keys where the level and CPU
     * have it): its knorm is the norm times one factor a query (plus a term below the
     * normals' scale); the F32 kernels' is the norm */
    const int may_bf16 = fmt == DSV4_ROW_BF16 && dsv4_idx_approx_bf16_ok(level) &&
                         (kernel == DSV4_IDX_APPROX_AUTO || kernel == DSV4_IDX_APPROX_BF16);
    for (int q = 0; q < nq; q++) {
        double rho = 0.0; /* the query's factor: knorm / norm of its first key of norm >= 2^-60 */
        const dsv4_idx_bound b = dsv4_idx_approx_query(qI + q * qs, wI + q * ws, nI, dI);
        CHECK(b.valid);
        for (int w = 0; w < lim[q]; w++) {
            const size_t at = (size_t)q * ss + w;
            if (!(knorm[at] <= b.kmax)) continue; /* past the bound's domain (QMIX 1's huge heads on huge keys) */
            const double bound = dsv4_idx_approx_bound(&b, knorm[at]);
            const double err = fabs((double)exact[at] - approx[at]);
            out += !(err <= bound) || !(approx[at] - (float)bound <= exact[at]) ||
                   !(approx[at] + (float)bound >= exact[at]);
            worst = fmax(worst, err / bound);
            double n2 = 0;
            for (int c = 0; c < dI; c++) n2 += (double)kb[(size_t)w * dI + c] * kb[(size_t)w * dI + c];
            /* within 1e-5 relative, or 2^-70 absolute: the few-query kernel sums the squares in
             * float rounded upward, so squares below the subnormals count as up to 2^-149 each */
            if (!may_bf16) {
                worst_norm = fmax(worst_norm, fabs(knorm[at] - sqrt(n2)) / (sqrt(n2) + 0x1p-70 * 1e5));
            } else if (sqrt(n2) >= 0x1p-60) {
                if (rho == 0.0) rho = knorm[at] / sqrt(n2);
                worst_norm = fmax(worst_norm, fabs(knorm[at] / sqrt(n2) - rho) / rho);
                CHECK_MSG(rho >= 1.0 && rho <= 512.0, "level %d: a BF16 query's factor %.3g", level, rho);
            }
            CHECK(knorm[at] >= sqrt(n2)); /* rounded up: the bound never reads a norm low */
        }
        for (size_t w = (size_t)lim[q]; w < ss; w++) CHECK(approx[q * ss + w] == -7.0f && knorm[q * ss + w] == -7.0f);
    }
    CHECK_MSG(out == 0, "level %d kernel %d fmt %d nI %d dI %d nq %d: %d scores outside their bound (worst err/bound %.3g)", level,
              kernel, fmt, nI, dI, nq, out, worst);
    CHECK_MSG(worst_norm < 1e-5, "level %d nI %d dI %d: key norms off by %.3g", level, nI, dI, worst_norm);
    free(qI); free(wI); free(kb); free(packed); free(keys); free(exact); free(approx); free(knorm);
}

/* Every AVX-512 kernel (the key-panel one and the heads-in-lanes one for few queries, each
 * forced, and the choice) at that level; the others have one kernel. */
static void check(int level, int fmt, int nI, int dI, int nk, int nq, double kscale) {
    static const int ks[] = {DSV4_IDX_APPROX_AUTO, DSV4_IDX_APPROX_PANEL, DSV4_IDX_APPROX_FEW, DSV4_IDX_APPROX_BF16};
    for (int k = 0; k < (level >= DSV4_SIMD_AVX512 ? 4 : 1); k++)
        if (ks[k] != DSV4_IDX_APPROX_BF16 || (fmt == DSV4_ROW_BF16 && dsv4_idx_approx_bf16_ok(level)))
            check_k(level, ks[k], fmt, nI, dI, nk, nq, kscale);
}

/* The BF16-dot kernel's bound where the query's BF16 rounding meets its keys head-on: one
 * head a query of weight 0.75 (the others 0), and keys along that head's residual r = q -
 * bf16(q) (rounded to BF16, signed so that both dots are positive; every third key random):
 * |r . K| = ||r|| ||K|| nearly, so the errors reach ~0.95 of the bound, and never pass it
 * (halving the residual's term in the kernel fails here, not on random keys). */
static void check_bf16_tight(int level, int nI, int dI, int nq, int nk) {
    const dsv4_attn_ops *ops = dsv4_attn_ops_for(DSV4_SIMD_SCALAR);
    const size_t qs = (size_t)nI * dI, ss = (size_t)nk;
    float *qI = malloc(sizeof(float) * qs * nq), *wI = calloc((size_t)nI * nq, sizeof(float));
    float *r = malloc(sizeof(float) * dI), *k = malloc(sizeof(float) * dI);
    uint16_t *packed = malloc(sizeof(uint16_t) * (size_t)nk * dI);
    const void **keys = malloc(sizeof(void *) * nk);
    for (size_t i = 0; i < qs * nq; i++) qI[i] = (float)urand();
    for (int q = 0; q < nq; q++) wI[q * nI + (3 * q + 1) % nI] = 0.75f;
    for (int w = 0; w < nk; w++) {
        if (w % 3 == 2) {
            for (int c = 0; c < dI; c++) k[c] = (float)urand();
        } else {
            const float *qh = qI + (size_t)(w % nq) * qs + (size_t)((3 * (w % nq) + 1) % nI) * dI;
            double rn = 0.0, dot = 0.0;
            for (int c = 0; c < dI; c++) r[c] = qh[c];
            dsv4_row_round(DSV4_ROW_BF16, r, dI, 0); /* bf16(q), to nearest even */
            for (int c = 0; c < dI; c++) {
                dot += (double)r[c] * (qh[c] - r[c]);
                r[c] = qh[c] - r[c];
                rn += (double)r[c] * r[c];
            }
            for (int c = 0; c < dI; c++) k[c] = (float)((dot >= 0 ? 1.0 : -1.0) * r[c] / sqrt(rn));
        }
        dsv4_row_round(DSV4_ROW_BF16, k, dI, 0);
        dsv4_row_pack(DSV4_ROW_BF16, packed + (size_t)w * dI, k, dI, 0);
        keys[w] = packed + (size_t)w * dI;
    }
    int64_t lim[16];
    for (int q = 0; q < nq; q++) lim[q] = nk;
    float *exact = malloc(sizeof(float) * ss * nq), *approx = malloc(sizeof(float) * ss * nq);
    float *knorm = malloc(sizeof(float) * ss * nq);
    dsv4_idx_scores(level, ops, qI, qs, wI, nI, nq, lim, keys, DSV4_ROW_BF16, 0, nk, nI, dI, exact, ss);
    dsv4_idx_approx_kernel(level, DSV4_IDX_APPROX_BF16, qI, qs, wI, nI, nq, lim, keys, DSV4_ROW_BF16, 0, nk, nI, dI,
                           approx, knorm, ss);
    double worst = 0.0;
    int out = 0;
    for (int q = 0; q < nq; q++) {
        const dsv4_idx_bound b = dsv4_idx_approx_query(qI + q * qs, wI + q * nI, nI, dI);
        for (int w = 0; w < nk; w++) {
            const size_t at = (size_t)q * ss + w;
            const float bound = dsv4_idx_approx_bound(&b, knorm[at]);
            out += !(approx[at] - bound <= exact[at]) || !(approx[at] + bound >= exact[at]);
            worst = fmax(worst, fabs((double)exact[at] - approx[at]) / bound);
        }
    }
    printf("BF16 dots, residual-aligned keys, %d x %d, %d queries: worst err / bound %.3g\n", nI, dI, nq, worst);
    CHECK_MSG(out == 0 && worst > 0.6, "BF16 dots, %d x %d: %d scores outside their bound, worst err / bound %.3g "
              "(a bound far above the errors here is looser than its analysis)", nI, dI, out, worst);
    free(qI); free(wI); free(r); free(k); free(packed); free(keys); free(exact); free(approx); free(knorm);
}

/* One block of 32 values at scale 2^e, F3-rounded (e past 100 or below -140: edges). */
static void int_block(float *x, int e, int kind) {
    for (int i = 0; i < 32; i++) {
        double v = urand();
        if (kind == 1) v = i % 2 ? -1.0 : 1.0;       /* every code the largest: |I_b| = 4608 */
        if (kind == 2 && i % 3) v *= 1e-3;           /* one large value, small ones beside it */
        x[i] = (float)ldexp(v * 6.0, e);
    }
    dsv4_fid_fp4_rt(x, 32);
}

/* FP4 integer scores at level against the portable level and the exact kernel. adv: block
 * scales vary from 2^-140 to 2^90 inside each key and query head, some blocks at the largest
 * codes, half the weights negative; then key 3 is made to cancel query 0's head 0 exactly. */
static void check_int(int level, int nI, int dI, int nk, int nq, int adv) {
    const dsv4_attn_ops *ops = dsv4_attn_ops_for(DSV4_SIMD_SCALAR);
    const size_t qs = (size_t)nI * dI + 3, ws = (size_t)nI + 1, ss = (size_t)nk + 5;
    const int64_t rb = dsv4_row_bytes(DSV4_ROW_FP4, dI, 0);
    static const int exps[] = {-140, -126, -125, -100, -60, -3, 0, 2, 40, 90};
    float *qI = calloc(qs * nq, sizeof(float)), *wI = calloc(ws * nq, sizeof(float));
    float *kb = malloc(sizeof(float) * (size_t)nk * dI);
    uint8_t *packed = malloc((size_t)nk * rb + 1);
    const void **keys = malloc(sizeof(void *) * nk);
    for (int q = 0; q < nq; q++) {
        for (int h = 0; h < nI; h++) {
            for (int b = 0; b < dI / 32; b++)
                int_block(qI + q * qs + (size_t)h * dI + 32 * b, adv ? exps[(q + 3 * h + b) % 9] : -2,
                          adv && (h + b) % 5 == 1);
            wI[q * ws + h] = (float)(adv && h % 2 ? -0.5 + urand() * 0.1 : 0.1 + fabs(urand()));
        }
    }
    for (int w = 0; w < nk; w++) {
        float *k = kb + (size_t)w * dI;
        for (int b = 0; b < dI / 32; b++)
            int_block(k + 32 * b, adv ? exps[(w * 7 + b) % 10] : (w % 11 == 5 ? -1 : 0), adv && (w + b) % 4 == 2);
        if (w % 13 == 7) memset(k, 0, sizeof(float) * dI);
        if (adv && w == 3 && dI >= 64) /* head 0 of query 0: the blocks' dots cancel exactly */
            for (int i = 0; i < 32; i++) k[i] = qI[32 + i], k[32 + i] = -qI[i];
        dsv4_row_pack(DSV4_ROW_FP4, packed + 1 + (size_t)w * rb, k, dI, 0);
        dsv4_row_unpack(DSV4_ROW_FP4, k, packed + 1 + (size_t)w * rb, dI, 0);
        keys[w] = packed + 1 + (size_t)w * rb;
    }
    int64_t lim[16];
    for (int q = 0; q < nq; q++) lim[q] = nk - (nq - 1 - q) * (nk / (nq + 2));
    float *exact = malloc(sizeof(float) * ss * nq), *got[2], *kn[2];
    for (int r = 0; r < 2; r++) {
        got[r] = malloc(sizeof(float) * ss * nq), kn[r] = malloc(sizeof(float) * ss * nq);
        for (size_t i = 0; i < ss * nq; i++) got[r][i] = kn[r][i] = -7.0f;
    }
    dsv4_idx_scores(level, ops, qI, qs, wI, ws, nq, lim, keys, DSV4_ROW_FP4, 0, nk, nI, dI, exact, ss);
    const int cut = nk / 3 | 1; /* two ranges, the second from an odd start */
    int ran = dsv4_idx_approx_fp4_int(level, qI, qs, wI, ws, nq, lim, keys, 0, cut, nI, dI, got[0], kn[0], ss);
    ran &= dsv4_idx_approx_fp4_int(level, qI, qs, wI, ws, nq, lim, keys, cut, nk, nI, dI, got[0], kn[0], ss);
    ran &= dsv4_idx_approx_fp4_int(DSV4_SIMD_SCALAR, qI, qs, wI, ws, nq, lim, keys, 0, nk, nI, dI, got[1], kn[1], ss);
    CHECK_MSG(ran, "level %d nI %d dI %d nq %d: F3 queries not scored by integer dots", level, nI, dI, nq);
    { /* each query encoded once (the portable encoding), scored at level over both ranges */
        const size_t eb = dsv4_idx_fp4q_bytes(nI);
        unsigned char *eq = aligned_alloc(64, eb * (size_t)nq);
        const void *enc[16];
        float *g2 = malloc(sizeof(float) * ss * nq), *k2 = malloc(sizeof(float) * ss * nq);
        for (size_t i = 0; i < ss * nq; i++) g2[i] = k2[i] = -7.0f;
        unsigned char *el = aligned_alloc(64, eb);
        for (int q = 0; q < nq; q++) {
            enc[q] = eq + eb * (size_t)q;
            memset(eq + eb * (size_t)q, 0xA5, eb), memset(el, 0x5A, eb);
            CHECK(dsv4_idx_fp4q_encode(DSV4_SIMD_SCALAR, qI + q * qs, wI + q * ws, nI, dI, eq + eb * (size_t)q));
            /* the level's encoding (vectorized from AVX2 up): the portable one byte for byte, padding included */
            CHECK(dsv4_idx_fp4q_encode(level, qI + q * qs, wI + q * ws, nI, dI, el));
            CHECK_MSG(!memcmp(el, eq + eb * (size_t)q, eb), "level %d nI %d dI %d query %d: the encoding differs "
                      "from the portable one", level, nI, dI, q);
        }
        free(el);
        CHECK(dsv4_idx_approx_fp4_enc(level, enc, nq, lim, keys, 0, cut, nI, dI, g2, k2, ss));
        CHECK(dsv4_idx_approx_fp4_enc(level, enc, nq, lim, keys, cut, nk, nI, dI, g2, k2, ss));
        CHECK_MSG(!memcmp(got[0], g2, sizeof(float) * ss * nq) && !memcmp(kn[0], k2, sizeof(float) * ss * nq),
                  "level %d nI %d dI %d nq %d: scores of once-encoded queries differ", level, nI, dI, nq);
        free(eq), free(g2), free(k2);
    }
    CHECK_MSG(!memcmp(got[0], got[1], sizeof(float) * ss * nq) && !memcmp(kn[0], kn[1], sizeof(float) * ss * nq),
              "level %d nI %d dI %d nq %d adv %d: integer scores or norms differ from the portable level's", level, nI,
              dI, nq, adv);
    double worst = 0.0;
    int out = 0, beyond = 0;
    for (int q = 0; q < nq; q++) {
        const dsv4_idx_bound b = dsv4_idx_approx_query(qI + q * qs, wI + q * ws, nI, dI);
        CHECK(b.valid);
        for (int w = 0; w < lim[q]; w++) {
            const size_t at = (size_t)q * ss + w;
            double n2 = 0;
            for (int c = 0; c < dI; c++) n2 += (double)kb[(size_t)w * dI + c] * kb[(size_t)w * dI + c];
            CHECK(kn[0][at] >= sqrt(n2) && kn[0][at] <= sqrt(n2) * (1 + 1e-6) + 0x1p-149);
            if (!(kn[0][at] <= b.kmax)) { /* the selection scores these exactly */
                beyond++;
                continue;
            }
            const double bound = dsv4_idx_approx_bound(&b, kn[0][at]);
            const double err = fabs((double)exact[at] - got[0][at]);
            out += !(err <= bound) || !(got[0][at] - (float)bound <= exact[at]) ||
                   !(got[0][at] + (float)bound >= exact[at]);
            if (bound > 0) worst = fmax(worst, err / bound);
        }
        for (size_t w = (size_t)lim[q]; w < ss; w++) CHECK(got[0][q * ss + w] == -7.0f && kn[0][q * ss + w] == -7.0f);
    }
    CHECK_MSG(out == 0, "level %d nI %d dI %d nq %d adv %d: %d integer scores outside their bound (worst %.3g)", level,
              nI, dI, nq, adv, out, worst);
    CHECK_MSG(beyond < nk * nq / 2, "adv %d: %d of the keys past kmax: the bound barely tested", adv, beyond);
    if (adv) printf("integer scores, level %d, %d x %d, %d queries: worst err / bound %.3g, %d keys past kmax\n", level,
                    nI, dI, nq, worst, beyond);
    /* a query F3 did not round, NaN, a block past 2^100, a value below its block scale's reach (c s / 2
     * underflows to 0 beside 2^99): not scored (the caller unpacks), wherever the value sits: the first
     * values, the last value of the last head's last block, a value of the second vector of a block, a
     * head of the second group of 16 */
    const int nb = dI / 32;
    const size_t at[4] = {5, (size_t)nI * dI - 1, (size_t)(nI / 2) * dI + 32 * (nb - 1) + 21,
                          (size_t)(nI > 16 ? 17 : nI - 1) * dI + 32 * (nb / 2) + 9};
    for (int k = 0; k < 4; k++) {
        const size_t p = at[k], pn = at[k] ^ 1; /* query 0 (refused before any pass is scored); a neighbour */
        const float keep = qI[p], keepn = qI[pn];
        const float bad[3] = {nextafterf(keep == 0.0f ? 1.0f : keep, INFINITY), NAN, 0x1p101f};
        for (int b = 0; b < 4; b++) {
            if (b < 3) qI[p] = bad[b];
            else qI[pn] = 0x1p99f, qI[p] = 0x1p-149f;
            CHECK_MSG(!dsv4_idx_approx_fp4_int(level, qI, qs, wI, ws, nq, lim, keys, 0, nk, nI, dI, got[0], kn[0], ss),
                      "level %d nI %d dI %d: value %zu's bad case %d scored", level, nI, dI, at[k], b);
            qI[p] = keep, qI[pn] = keepn;
        }
    }
    free(qI); free(wI); free(kb); free(packed); free(keys); free(exact);
    for (int r = 0; r < 2; r++) free(got[r]), free(kn[r]);
}

/* The bound's size: scale / Q within (1e-6, 1e-3) for Flash's shape (eps ~ 4e-5), so that
 * the candidates stay near topk; NaN or infinite queries or weights make it invalid. */
static void check_terms(void) {
    enum { NI = 64, DI = 128 };
    static float qI[NI * DI], wI[NI];
    double q = 0.0;
    for (int h = 0; h < NI; h++) {
        double n2 = 0.0;
        for (int i = 0; i < DI; i++) {
            qI[h * DI + i] = (float)urand();
            n2 += (double)qI[h * DI + i] * qI[h * DI + i];
        }
        wI[h] = (float)urand();
        q += fabs((double)wI[h]) * sqrt(n2);
    }
    dsv4_idx_bound b = dsv4_idx_approx_query(qI, wI, NI, DI);
    printf("Flash's indexer shape: bound scale / Q = %.3g, add %.3g\n", b.scale / q, (double)b.add);
    CHECK(b.valid && b.scale / q > 1e-6 && b.scale / q < 1e-3 && b.add < 1e-30f && b.kmax > 1e30f);
    qI[77] = NAN;
    CHECK(!dsv4_idx_approx_query(qI, wI, NI, DI).valid);
    qI[77] = INFINITY;
    CHECK(!dsv4_idx_approx_query(qI, wI, NI, DI).valid);
    qI[77] = 0.5f;
    wI[3] = INFINITY;
    CHECK(!dsv4_idx_approx_query(qI, wI, NI, DI).valid);
    wI[3] = 0.5f;
    qI[5] = 1e30f; /* finite, but keys above norm ~1e90 / 1e30 would overflow: kmax says so */
    b = dsv4_idx_approx_query(qI, wI, NI, DI);
    CHECK(b.valid && b.kmax < 1e8f);
}

int main(void) {
    const int best = dsv4_cpu_simd() < dsv4_build_simd() ? dsv4_cpu_simd() : dsv4_build_simd();
    printf("kernel level: %s\n", dsv4_simd_name(best));
    if (best < DSV4_SIMD_AVX512) printf("SKIPPED: the AVX-512 level (not in this CPU or build)\n");
    const int nIs[] = {1, 3, 4, 8, 13, 16}, dIs[] = {1, 5, 16, 37, 128, 200, 256, 257, 300};
    for (int level = 0; level <= best; level++)
        for (int fmt = DSV4_ROW_BF16; fmt <= DSV4_ROW_F32; fmt += 2) {
            for (size_t a = 0; a < sizeof nIs / sizeof nIs[0]; a++)
                for (size_t b = 0; b < sizeof dIs / sizeof dIs[0]; b++) check(level, fmt, nIs[a], dIs[b], 37, 3, 1.0);
            check(level, fmt, 16, 128, 200, 8, 1.0);  /* flash_quarter's indexer shape */
            check(level, fmt, 64, 128, 40, 2, 1e-3);  /* Flash's, small keys */
            check(level, fmt, 4, 64, 50, 1, 1e20);    /* large keys */
            check(level, fmt, 4, 64, 50, 1, 1e-25);   /* keys near the subnormals */
            /* decode's shapes (one query a span, or a few) over a few thousand keys: both
             * indexer widths, keys of ordinary, tiny and huge norms */
            for (int nq = 1; nq <= 8; nq++) {
                check(level, fmt, 16, 128, nq < 3 ? 2500 : 300, nq, 1.0);
                check(level, fmt, 64, 128, nq < 2 ? 2500 : 100, nq, 1.0);
            }
            check(level, fmt, 16, 128, 500, 1, 1e-30);
            check(level, fmt, 64, 128, 300, 1, 1e-30);
            check(level, fmt, 16, 128, 500, 1, 1e25);
            check(level, fmt, 64, 128, 300, 2, 1e25);
        }
    /* every level's F32 kernels (the AVX2 key panels among them) on the mixed-scale and
     * below-the-normals queries (QMIX 1, 2), not only the BF16-dot kernel */
    for (int level = 0; level <= best; level++)
        for (int fmt = DSV4_ROW_BF16; fmt <= DSV4_ROW_F32; fmt += 2)
            for (QMIX = 1; QMIX <= 2; QMIX++) {
                check(level, fmt, 16, 128, 300, 8, 1.0);
                check(level, fmt, 13, 37, 100, 6, 1.0);
                check(level, fmt, 16, 128, 200, 1, 1e-30);
                check(level, fmt, 64, 128, 100, 5, 1e12);
            }
    QMIX = 0;
    /* the BF16-dot kernel: queries of mixed scales and values below the normals (QMIX 1),
     * queries it hands to the F32 kernel (QMIX 2), keys of tiny and huge norms; its bound's
     * tightness where the rounding meets the keys head-on */
    if (dsv4_idx_approx_bf16_ok(best)) {
        for (QMIX = 1; QMIX <= 2; QMIX++) {
            check(best, DSV4_ROW_BF16, 16, 128, 300, 8, 1.0);
            check(best, DSV4_ROW_BF16, 64, 128, 100, 5, 1e-3);
            check(best, DSV4_ROW_BF16, 13, 37, 100, 6, 1.0);
            check(best, DSV4_ROW_BF16, 16, 128, 200, 6, 1e-30);
            check(best, DSV4_ROW_BF16, 16, 128, 200, 6, 1e12);
            check(best, DSV4_ROW_BF16, 16, 128, 200, 6, 1e-39); /* keys below the normals: read as 0 */
        }
        QMIX = 0;
        check_bf16_tight(best, 16, 128, 8, 96);
        check_bf16_tight(best, 64, 128, 3, 64);
        check_bf16_tight(best, 5, 37, 6, 60);
    } else {
        printf("SKIPPED: the BF16-dot kernel (not at this level or CPU)\n");
    }
    /* FP4 keys (unpacked in runs of keys, then the F32 kernels): the odd widths, Flash's
     * shapes, a few queries past the runs' query groups, tiny and huge keys */
    for (int level = 0; level <= best; level++) {
        for (size_t b = 0; b < sizeof dIs / sizeof dIs[0]; b++) check(level, DSV4_ROW_FP4, 3, dIs[b], 37, 3, 1.0);
        check(level, DSV4_ROW_FP4, 16, 128, 300, 1, 1.0);
        check(level, DSV4_ROW_FP4, 64, 128, 200, 2, 1.0);
        check(level, DSV4_ROW_FP4, 8, 128, 150, 16, 1.0);
        check(level, DSV4_ROW_FP4, 16, 128, 200, 1, 1e-30);
        check(level, DSV4_ROW_FP4, 16, 128, 200, 1, 1e25);
    }
    /* FP4 keys' integer scores: the shapes it covers (dI 32..128, nI up to 64, several
     * passes of queries), adversarial scales; then shapes it does not cover. Every level
     * this CPU and build have (AVX2, AVX-512 BW, AVX-512 VNNI) against the portable one */
    const int shapes[][3] = {{16, 128, 1}, {64, 128, 1}, {64, 128, 3}, {8, 128, 5}, {13, 96, 2}, {3, 32, 6}, {40, 64, 2}};
    for (int level = best > DSV4_SIMD_SCALAR ? DSV4_SIMD_AVX2 : DSV4_SIMD_SCALAR; level <= best; level++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int adv = 0; adv < 2; adv++)
                check_int(level, shapes[i][0], shapes[i][1], adv ? 120 : 200, shapes[i][2], adv);
    {
        float q[160] = {0}, w[1] = {1.0f}, sc[4], kn[4];
        const int64_t lim[1] = {1};
        uint8_t row[160];
        memset(row, 0, sizeof row);
        const void *keys[1] = {row};
        CHECK(!dsv4_idx_approx_fp4_int(best, q, 160, w, 1, 1, lim, keys, 0, 1, 1, 160, sc, kn, 1)); /* dI > 128 */
        CHECK(!dsv4_idx_approx_fp4_int(best, q, 16, w, 1, 1, lim, keys, 0, 1, 1, 16, sc, kn, 1));   /* dI % 32 */
        CHECK(!dsv4_idx_approx_fp4_int(best, q, 160, w, 1, 1, lim, keys, 0, 1, 65, 32, sc, kn, 1)); /* nI > 64 */
    }
    check_terms();
    return test_report();
}
