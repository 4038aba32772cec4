/* test_idx_scores.c — the indexer score kernel (kernels/idx_scores.h): at every level the
 * bits of the one-query reference on F32 keys, whatever the query block, key range and
 * per-query limits, with the keys read as F32, BF16 or FP4 (rounded first; BF16 and FP4 keys
 * must give the bits of their F32 copies); scores against the formula in double; relu zeros, signed
 * zeros, NaN keys, head counts around the 8-head groups and key widths around the 8-lane
 * chunks. */
#include <stdint.h>

#include "kernels/cpu.h"
#include "kernels/idx_scores.h"
#include "kernels/kv_rows.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* uniform [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* nq queries of nI heads x dI against nk keys stored apart (own allocations, odd offsets),
 * the level reading them in fmt */
static void check(int level, int fmt, int nI, int dI, int nk, int nq, int special) {
    const dsv4_attn_ops *ops = dsv4_attn_ops_for(DSV4_SIMD_SCALAR);
    const size_t qs = (size_t)nI * dI + 3, ws = (size_t)nI + 1, ss = (size_t)nk + 5; /* padded strides */
    float *qI = malloc(sizeof(float) * qs * nq), *wI = malloc(sizeof(float) * ws * nq);
    float **kb = malloc(sizeof(float *) * nk);
    const float **keys = malloc(sizeof(float *) * nk);
    for (size_t i = 0; i < qs * nq; i++) qI[i] = (float)urand();
    for (size_t i = 0; i < ws * nq; i++) wI[i] = (float)(0.1 + 0.5 * fabs(urand()));
    for (int w = 0; w < nk; w++) {
        kb[w] = malloc(sizeof(float) * (dI + 1));
        for (int c = 0; c < dI; c++) kb[w][c + 1] = (float)urand();
        if (special && w % 5 == 2) /* the negated first head: its dot is < 0, relu gives +0 */
            for (int c = 0; c < dI; c++) kb[w][c + 1] = -qI[c];
        if (special && w % 7 == 3) kb[w][1] = NAN; /* every dot NaN: relu gives +0, score +0 */
        if (special && w % 11 == 4)
            for (int c = 0; c < dI; c++) kb[w][c + 1] = c % 2 ? 0.0f : -0.0f;
        if (fmt != DSV4_ROW_F32) dsv4_row_round(fmt, kb[w] + 1, dI, 0); /* FP4: F3's rule */
        keys[w] = kb[w] + 1;
    }
    /* the keys as the level reads them: BF16 or FP4 copies at odd offsets, or the F32 keys */
    const size_t rb = (size_t)dsv4_row_bytes(fmt, dI, 0) + 3;
    uint8_t *packed = malloc((size_t)nk * rb);
    const void **lkeys = malloc(sizeof(void *) * nk);
    for (int w = 0; w < nk; w++) {
        lkeys[w] = keys[w];
        if (fmt != DSV4_ROW_F32) {
            uint8_t *at = packed + (size_t)w * rb + 1 + (w & 1);
            dsv4_row_pack(fmt, at, keys[w], dI, 0);
            lkeys[w] = at;
        }
    }
    int64_t lim[24];
    for (int q = 0; q < nq; q++) {
        lim[q] = nk - (nq - 1 - q) * (nk / 7); /* later rows see more */
        if (lim[q] < 0) lim[q] = q % 3 ? nk / 2 + q : 0; /* many queries: some see none */
    }
    float *ref = malloc(sizeof(float) * ss * nq), *got = malloc(sizeof(float) * ss * nq);
    for (size_t i = 0; i < ss * nq; i++) ref[i] = got[i] = -7.0f; /* unwritten stays -7 */
    /* reference: one query at a time, whole range */
    for (int q = 0; q < nq; q++)
        dsv4_idx_scores_ref(ops, qI + q * qs, 0, wI + q * ws, 0, 1, &lim[q], (const void *const *)keys, DSV4_ROW_F32,
                            0, nk, nI, dI, ref + q * ss, 0);
    /* the level: the whole block, in ranges of a few sizes (odd starts included) */
    for (int chunk = 1; chunk <= nk; chunk = chunk * 3 + 2) {
        for (size_t i = 0; i < ss * nq; i++) got[i] = -7.0f;
        for (int w0 = 0; w0 < nk; w0 += chunk)
            dsv4_idx_scores(level, ops, qI, qs, wI, ws, nq, lim, lkeys, fmt, w0, w0 + chunk, nI, dI, got, ss);
        CHECK_MSG(same_bits(ref, got, ss * nq), "level %d fmt %d nI %d dI %d nk %d nq %d ranges of %d: bits differ",
                  level, fmt, nI, dI, nk, nq, chunk);
    }
    /* the formula in double (finite keys) */
    double maxerr = 0;
    int zeros = 0;
    for (int q = 0; q < nq; q++)
        for (int w = 0; w < lim[q]; w++) {
            int finite = 1;
            for (int c = 0; c < dI; c++) finite &= isfinite(keys[w][c]);
            if (!finite) {
                CHECK(ref[q * ss + w] == 0.0f && !signbit(ref[q * ss + w]));
                continue;
            }
            /* error relative to the sum's natural size, sum |w q_c k_c|: relative to |d| a
             * dot that cancels can sit past 1e-5 with an FP32 rounding per term */
            double s = 0, mag = 0;
            for (int h = 0; h < nI; h++) {
                double d = 0, dabs = 0;
                for (int c = 0; c < dI; c++) {
                    const double p = (double)qI[q * qs + (size_t)h * dI + c] * keys[w][c];
                    d += p;
                    dabs += fabs(p);
                }
                s += wI[q * ws + h] * (d > 0 ? d : 0);
                mag += wI[q * ws + h] * dabs;
            }
            maxerr = fmax(maxerr, fabs(ref[q * ss + w] - s) / (mag + 1e-30));
            zeros += ref[q * ss + w] == 0.0f;
        }
    CHECK_MSG(maxerr < 1e-5, "nI %d dI %d: max rel err %.3g against double", nI, dI, maxerr);
    if (special && nI == 1) CHECK(zeros > 0);
    for (int q = 0; q < nq; q++) /* nothing written past a query's limit */
        for (size_t w = (size_t)lim[q]; w < ss; w++) CHECK(got[q * ss + w] == -7.0f);
    for (int w = 0; w < nk; w++) free(kb[w]);
    free(kb); free(keys); free(qI); free(wI); free(ref); free(got); free(packed); free(lkeys);
}

int main(void) {
    const int best = dsv4_cpu_simd() < dsv4_build_simd() ? dsv4_cpu_simd() : dsv4_build_simd();
    printf("kernel level: %s\n", dsv4_simd_name(best));
    if (best < DSV4_SIMD_AVX512) printf("SKIPPED: the AVX-512 level (not in this CPU or build)\n");
    const int nIs[] = {1, 3, 4, 8, 13, 16}, dIs[] = {1, 5, 8, 37, 128};
    for (int level = 0; level <= best; level++)
        for (int fmt = DSV4_ROW_BF16; fmt <= DSV4_ROW_F32; fmt += 2) {
            for (size_t a = 0; a < sizeof nIs / sizeof nIs[0]; a++)
                for (size_t b = 0; b < sizeof dIs / sizeof dIs[0]; b++) {
                    check(level, fmt, nIs[a], dIs[b], 29, 1, 0);
                    check(level, fmt, nIs[a], dIs[b], 41, 5, 1);
                }
            check(level, fmt, 16, 128, 300, 8, 1); /* Flash's indexer shape */
        }
    /* FP4 keys (F3-rounded, unpacked in runs of keys, then the F32 kernels): odd widths, runs
     * of 64 keys and of 8 (dI 1024), more queries than one run's group of 16 */
    for (int level = 0; level <= best; level++) {
        for (size_t b = 0; b < sizeof dIs / sizeof dIs[0]; b++) {
            check(level, DSV4_ROW_FP4, 3, dIs[b], 29, 1, 0);
            check(level, DSV4_ROW_FP4, 8, dIs[b], 41, 5, 1);
        }
        check(level, DSV4_ROW_FP4, 16, 128, 300, 8, 1);
        check(level, DSV4_ROW_FP4, 4, 128, 150, 21, 1);
        check(level, DSV4_ROW_FP4, 2, 1024, 30, 3, 0);
    }
    return test_report();
}
