/* bench_indexer.c — the indexer's top-k for one query block, exact against bounded.
 *
 *   bench_indexer [--reps N] [--ns LIST] [--shapes quarter,flash] [--keys bf16|fp4] [--kernels [--cold] [--nqs LIST]]
 *                 [--rescore]
 *
 * One thread. For each shape (flash_quarter: 16 heads x 128, Flash: 64 x 128, top 512),
 * entry count n (default 2048,8192,32768,131072) and block size nq (1 = a decode row, 8 =
 * a prefill block), it times the two ways the attention finds each query's top-k over the
 * same BF16 keys (the default cache format; --keys fp4: FP4 keys, as fidelity F3 stores them
 * with --kv-dtype ...+fp4, keys and queries rounded by F3's rule, so that the bounded pass
 * scores the keys by integer block dots where the level has them):
 *   exact:   dsv4_idx_scores of the block, then dsv4_indexer_select per query;
 *   bounded: dsv4_idx_approx of the block, then dsv4_indexer_select_verified per query
 *            (exact rescoring of the entries near the boundary),
 * alternating the two over --reps rounds (default 5), and checks that they select the same
 * entries. Queries, weights and keys are uniform random: real rows have other score
 * distributions, so "candidates" (the entries rescored exactly per query, mean) says how tight the
 * bound was here. One JSON line per case: median microseconds per query both ways, their
 * ratio, the candidates. --kernels times the approximate kernels alone: the key-panel and
 * the few-query ones (FP4 keys: unpacked to F32 first) and, for FP4 keys, the integer block
 * dots (dsv4_idx_approx_fp4_int, "int_*" fields; null for BF16 keys), and those over the
 * engine's ranges of 1024 entries with each query encoded once a range ("int_ranges_us") or
 * once ("enc_once_ranges_us"), and one query's encoding alone ("encode_us"). --rescore times the bounded selection's exact rescoring alone:
 * dsv4_idx_scores of one query over n candidate keys scattered over the pool (every 7th key,
 * wrapping, or the next odd stride coprime to the pool, as select_candidates passes them), "rescore_ns_per_key", and a hash of the
 * scores' bits ("scores_fnv") that two builds must print alike. The level is the
 * best this CPU and build have, or the one DSV4_SIMD names (portable, avx2, avx512, avx512vbmi). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "dsv4_internal.h"

#define MAX_REPS 21
#define NQ_MAX 8

static int KEY_FMT = DSV4_ROW_BF16; /* --keys */
static int APPROX = DSV4_IDX_APPROX_AUTO; /* --approx: the bounded way's kernel */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
typedef struct bufs {
    float *scores, *knorm, *fbuf;
    int *work, *cidx, *sel;
    const void **ckeys;
} bufs;

/* One block both ways; returns seconds, sel (nq, topk) and the candidates rescored. */
static double run(int bounded, int simd, const float *qI, const float *wI, int nq, int nI, int dI, const void **keys,
                  int n, int topk, bufs *b, int *sel, long *cand) {
    const dsv4_attn_ops *ops = dsv4_attn_ops_for(simd);
    int64_t lim[NQ_MAX];
    for (int q = 0; q < nq; q++) lim[q] = n;
    const double t0 = now_s();
    if (bounded) dsv4_idx_approx_kernel(simd, APPROX, qI, (size_t)nI * dI, wI, (size_t)nI, nq, lim, keys, KEY_FMT, 0,
                                        n, nI, dI, b->scores, b->knorm, (size_t)n);
    else dsv4_idx_scores(simd, ops, qI, (size_t)nI * dI, wI, (size_t)nI, nq, lim, keys, KEY_FMT, 0, n, nI, dI,
                         b->scores, (size_t)n);
    for (int q = 0; q < nq; q++) {
        if (bounded) {
            const dsv4_indexer_query iq = {simd, ops, qI + (size_t)q * nI * dI, wI + (size_t)q * nI, nI, dI, keys,
                                           KEY_FMT};
            for (int i = 0; i < n; i++) b->cidx[i] = -1;
            dsv4_indexer_select_verified(&iq, b->scores + (size_t)q * n, b->knorm + (size_t)q * n, n, topk, b->fbuf,
                                         b->cidx, b->ckeys, b->work, sel + (size_t)q * topk);
            int c = 0;
            while (c < n && b->cidx[c] >= 0) c++;
            *cand += c;
        } else {
            dsv4_indexer_select(b->scores + (size_t)q * n, n, topk, b->work, sel + (size_t)q * topk);
        }
    }
    return now_s() - t0;
}

static volatile float sink;

/* The approximate kernel alone; returns seconds. */
static double run_kernel(int kernel, int simd, const float *qI, const float *wI, int nq, int nI, int dI,
                         const void **keys, int n, float *scores, float *knorm, const float *flush, size_t nflush) {
    int64_t lim[NQ_MAX];
    for (int q = 0; q < nq; q++) lim[q] = n;
    if (flush) {
        float acc = 0.0f;
        for (size_t i = 0; i < nflush; i += 16) acc += flush[i];
        sink = acc;
    }
    const double t0 = now_s();
    dsv4_idx_approx_kernel(simd, kernel, qI, (size_t)nI * dI, wI, (size_t)nI, nq, lim, keys, KEY_FMT, 0, n, nI,
                           dI, scores, knorm, (size_t)n);
    return now_s() - t0;
}

/* FP4 keys' integer scores over [0, n) in the engine's ranges of RANGE entries: each query
 * encoded once a range (dsv4_idx_approx_fp4_int, as the engine did before session 46), or once
 * for all of them (dsv4_idx_fp4q_encode, then dsv4_idx_approx_fp4_enc a range: the engine's
 * dsv4_attn_work.qe); returns seconds, or -1 where the queries are refused. */
#define RANGE 1024
static double run_ranges(int enc_once, int simd, const float *qI, const float *wI, int nq, int nI, int dI,
                         const void **keys, int n, float *scores, float *knorm, void *enc_buf) {
    int64_t lim[NQ_MAX];
    const void *enc[NQ_MAX];
    for (int q = 0; q < nq; q++) lim[q] = n, enc[q] = (char *)enc_buf + (size_t)q * dsv4_idx_fp4q_bytes(nI);
    int ok = 1;
    const double t0 = now_s();
    if (enc_once)
        for (int q = 0; q < nq; q++)
            ok &= dsv4_idx_fp4q_encode(simd, qI + (size_t)q * nI * dI, wI + (size_t)q * nI, nI, dI, (void *)enc[q]);
    for (int w0 = 0; w0 < n && ok; w0 += RANGE) {
        const int w1 = n - w0 < RANGE ? n : w0 + RANGE;
        ok &= enc_once ? dsv4_idx_approx_fp4_enc(simd, enc, nq, lim, keys, w0, w1, nI, dI, scores, knorm, (size_t)n)
                       : dsv4_idx_approx_fp4_int(simd, qI, (size_t)nI * dI, wI, (size_t)nI, nq, lim, keys, w0, w1, nI,
                                                 dI, scores, knorm, (size_t)n);
    }
    const double dt = now_s() - t0;
    return ok ? dt : -1.0;
}

/* The exact rescoring of n scattered candidates (one query), --reps times: the median
 * microseconds and the scores' FNV-1a hash. */
static int rescore_main(int simd, int reps, const int *ns, int n_ns, int quarter, int flash, const float *qI,
                        const float *wI, const void **keys, int nmax) {
    const int dI = 128;
    const dsv4_attn_ops *ops = dsv4_attn_ops_for(simd);
    const void **cand = malloc(sizeof(void *) * (size_t)nmax);
    float *sc = malloc(sizeof(float) * (size_t)nmax);
    if (!cand || !sc) {
        free(cand), free(sc);
        return 1;
    }
    size_t stride = 7; /* coprime to nmax: the candidates are n distinct keys */
    for (size_t a = stride, m = (size_t)nmax; m;) { /* gcd(stride, nmax) */
        const size_t t = a % m;
        a = m, m = t;
        if (!m && a != 1) stride += 2, a = stride, m = (size_t)nmax;
    }
    for (int shape = 0; shape < 2; shape++) {
        if ((shape == 0 && !quarter) || (shape == 1 && !flash)) continue;
        const int nI = shape ? 64 : 16;
        for (int k = 0; k < n_ns; k++) {
            const int n = ns[k];
            const int64_t lim = n;
            for (int i = 0; i < n; i++) cand[i] = keys[(size_t)i * stride % (size_t)nmax];
            double t[MAX_REPS];
            for (int r = 0; r < reps; r++) {
                const double t0 = now_s();
                dsv4_idx_scores(simd, ops, qI, 0, wI, 0, 1, &lim, cand, KEY_FMT, 0, n, nI, dI, sc, 0);
                t[r] = now_s() - t0;
            }
            uint64_t h = 0xcbf29ce484222325ull;
            const unsigned char *p = (const unsigned char *)sc;
            for (size_t i = 0; i < sizeof(float) * (size_t)n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
            qsort(t, (size_t)reps, sizeof(double), cmp_double);
            printf("{\"shape\": \"%s\", \"keys\": \"%s\", \"nI\": %d, \"n\": %d, \"level\": \"%s\", "
                   "\"rescore_us\": %.1f, \"rescore_ns_per_key\": %.2f, \"scores_fnv\": \"%016llx\"}\n",
                   shape ? "flash" : "flash_quarter", KEY_FMT == DSV4_ROW_FP4 ? "fp4" : "bf16", nI, n,
                   dsv4_simd_name(simd), t[reps / 2] * 1e6, t[reps / 2] * 1e9 / n, (unsigned long long)h);
            fflush(stdout);
        }
    }
    free(cand), free(sc);
    return 0;
}

static int kernels_main(int simd, int reps, const int *ns, int n_ns, int quarter, int flash, int cold, const int *nqs,
                        int n_nqs, const float *qI, const float *wI, const void **keys, int nmax) {
    const int dI = 128;
    const size_t nflush = (size_t)16 << 20; /* 64 MB */
    float *flush = cold ? malloc(sizeof(float) * nflush) : NULL;
    float *sp = malloc(sizeof(float) * NQ_MAX * (size_t)nmax), *kp = malloc(sizeof(float) * NQ_MAX * (size_t)nmax);
    float *sf = malloc(sizeof(float) * NQ_MAX * (size_t)nmax), *kf = malloc(sizeof(float) * NQ_MAX * (size_t)nmax);
    float *si = malloc(sizeof(float) * NQ_MAX * (size_t)nmax), *ki = malloc(sizeof(float) * NQ_MAX * (size_t)nmax);
    float *sr = malloc(sizeof(float) * NQ_MAX * (size_t)nmax), *kr = malloc(sizeof(float) * NQ_MAX * (size_t)nmax);
    float *sb = malloc(sizeof(float) * NQ_MAX * (size_t)nmax), *kb = malloc(sizeof(float) * NQ_MAX * (size_t)nmax);
    void *enc_buf = aligned_alloc(64, dsv4_idx_fp4q_bytes(64) * NQ_MAX);
    if ((cold && !flush) || !sp || !kp || !sf || !kf || !si || !ki || !sr || !kr || !sb || !kb || !enc_buf) return 1;
    const int fp4 = KEY_FMT == DSV4_ROW_FP4;
    if (flush)
        for (size_t i = 0; i < nflush; i++) flush[i] = (float)(i & 7);
    int rc = 0;
    for (int shape = 0; shape < 2; shape++) {
        if ((shape == 0 && !quarter) || (shape == 1 && !flash)) continue;
        const int nI = shape ? 64 : 16;
        for (int k = 0; k < n_ns; k++)
            for (int a = 0; a < n_nqs; a++) {
                const int n = ns[k], nq = nqs[a];
                double tp[MAX_REPS], tf[MAX_REPS], ti[MAX_REPS], tr[MAX_REPS], te[MAX_REPS], tc[MAX_REPS], tb[MAX_REPS];
                for (int r = 0; r < reps; r++) {
                    tp[r] = run_kernel(DSV4_IDX_APPROX_PANEL, simd, qI, wI, nq, nI, dI, keys, n, sp, kp, flush, nflush);
                    tf[r] = run_kernel(DSV4_IDX_APPROX_FEW, simd, qI, wI, nq, nI, dI, keys, n, sf, kf, flush, nflush);
                    if (!fp4) tb[r] = run_kernel(DSV4_IDX_APPROX_BF16, simd, qI, wI, nq, nI, dI, keys, n, sb, kb, flush, nflush);
                    if (fp4) ti[r] = run_kernel(DSV4_IDX_APPROX_INT, simd, qI, wI, nq, nI, dI, keys, n, si, ki, flush, nflush);
                    if (fp4) tr[r] = run_ranges(0, simd, qI, wI, nq, nI, dI, keys, n, si, ki, enc_buf);
                    if (fp4) te[r] = run_ranges(1, simd, qI, wI, nq, nI, dI, keys, n, sr, kr, enc_buf);
                    if (fp4) { /* one query's encoding alone, the mean of 64 */
                        const double t0 = now_s();
                        for (int i = 0; i < 64; i++) dsv4_idx_fp4q_encode(simd, qI + (size_t)(i % nq) * nI * dI,
                                                                          wI + (size_t)(i % nq) * nI, nI, dI, enc_buf);
                        tc[r] = (now_s() - t0) / 64;
                    }
                }
                int ok = 1;
                if (fp4) /* the ranges' scores, encoded once or once a range: the same bits */
                    ok &= !memcmp(si, sr, sizeof(float) * (size_t)nq * n) && !memcmp(ki, kr, sizeof(float) * (size_t)nq * n);
                for (int q = 0; q < nq; q++) {
                    const dsv4_idx_bound b = dsv4_idx_approx_query(qI + (size_t)q * nI * dI, wI + (size_t)q * nI, nI, dI);
                    for (int w = 0; w < n; w++) {
                        const size_t at = (size_t)q * n + w;
                        ok &= fabsf(sp[at] - sf[at]) <= dsv4_idx_approx_bound(&b, kp[at]) +
                                                           dsv4_idx_approx_bound(&b, kf[at]);
                        if (!fp4)
                            ok &= fabsf(sp[at] - sb[at]) <= dsv4_idx_approx_bound(&b, kp[at]) +
                                                               dsv4_idx_approx_bound(&b, kb[at]);
                        if (fp4)
                            ok &= fabsf(sp[at] - si[at]) <= dsv4_idx_approx_bound(&b, kp[at]) +
                                                               dsv4_idx_approx_bound(&b, ki[at]);
                    }
                }
                qsort(tp, (size_t)reps, sizeof(double), cmp_double);
                qsort(tf, (size_t)reps, sizeof(double), cmp_double);
                if (fp4) qsort(ti, (size_t)reps, sizeof(double), cmp_double);
                if (fp4) qsort(tr, (size_t)reps, sizeof(double), cmp_double);
                if (fp4) qsort(te, (size_t)reps, sizeof(double), cmp_double);
                if (fp4) qsort(tc, (size_t)reps, sizeof(double), cmp_double);
                const double up = tp[reps / 2] * 1e6, uf = tf[reps / 2] * 1e6, ui = fp4 ? ti[reps / 2] * 1e6 : 0.0;
                char extra[400];
                if (!fp4) { /* BF16 keys: the BF16-dot kernel (the F32 key-panel one where this level or CPU has none) */
                    qsort(tb, (size_t)reps, sizeof(double), cmp_double);
                    const double ub = tb[reps / 2] * 1e6;
                    snprintf(extra, sizeof extra,
                             "\"bf16_us\": %.1f, \"bf16_ns_per_key_query\": %.3f, \"panel_over_bf16\": %.3f, "
                             "\"int_us\": null, \"int_ns_per_key_query\": null",
                             ub, ub * 1e3 / ((double)n * nq), up / ub);
                }
                if (fp4)
                    snprintf(extra, sizeof extra,
                             "\"int_us\": %.1f, \"int_ns_per_key_query\": %.3f, \"few_over_int\": %.3f, "
                             "\"int_ranges_us\": %.1f, \"enc_once_ranges_us\": %.1f, \"ranges_over_enc_once\": %.3f, "
                             "\"encode_us\": %.3f",
                             ui, ui * 1e3 / ((double)n * nq), uf / ui, tr[reps / 2] * 1e6, te[reps / 2] * 1e6,
                             tr[reps / 2] / te[reps / 2], tc[reps / 2] * 1e6);
                printf("{\"shape\": \"%s\", \"keys\": \"%s\", \"nI\": %d, \"n\": %d, \"nq\": %d, \"cache\": \"%s\", "
                       "\"level\": \"%s\", \"panel_us\": %.1f, \"few_us\": %.1f, \"panel_over_few\": %.3f, "
                       "\"panel_ns_per_key_query\": %.3f, \"few_ns_per_key_query\": %.3f, %s, \"within_bounds\": %s}\n",
                       shape ? "flash" : "flash_quarter", KEY_FMT == DSV4_ROW_FP4 ? "fp4" : "bf16", nI, n, nq,
                       cold ? "cold" : "hot", dsv4_simd_name(simd), up,
                       uf, up / uf, up * 1e3 / ((double)n * nq), uf * 1e3 / ((double)n * nq), extra, ok ? "true" : "false");
                fflush(stdout);
                if (!ok) rc = 1;
            }
    }
    free(flush); free(sp); free(kp); free(sf); free(kf); free(si); free(ki); free(sr); free(kr); free(sb); free(kb);
    free(enc_buf);
    return rc;
}

int main(int argc, char **argv) {
    int reps = 5, ns[8] = {2048, 8192, 32768, 131072}, n_ns = 4, quarter = 1, flash = 1, kernels = 0, cold = 0;
    int rescore = 0;
    int nqs[NQ_MAX] = {1, 2, 4, 8}, n_nqs = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ns") && i + 1 < argc) {
            n_ns = 0;
            for (char *s = strtok(argv[++i], ","); s && n_ns < 8; s = strtok(NULL, ",")) ns[n_ns++] = atoi(s);
        } else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) {
            quarter = strstr(argv[i + 1], "quarter") != NULL;
            flash = strstr(argv[++i], "flash") != NULL;
        } else if (!strcmp(argv[i], "--kernels")) kernels = 1;
        else if (!strcmp(argv[i], "--cold")) cold = 1;
        else if (!strcmp(argv[i], "--rescore")) rescore = 1;
        else if (!strcmp(argv[i], "--approx") && i + 1 < argc) {
            const char *k = argv[++i];
            APPROX = !strcmp(k, "panel") ? DSV4_IDX_APPROX_PANEL : !strcmp(k, "bf16") ? DSV4_IDX_APPROX_BF16
                                                                                      : DSV4_IDX_APPROX_AUTO;
        }
        else if (!strcmp(argv[i], "--keys") && i + 1 < argc) KEY_FMT = !strcmp(argv[++i], "fp4") ? DSV4_ROW_FP4 : DSV4_ROW_BF16;
        else if (!strcmp(argv[i], "--nqs") && i + 1 < argc) {
            n_nqs = 0;
            for (char *s = strtok(argv[++i], ","); s && n_nqs < NQ_MAX; s = strtok(NULL, ","))
                if (atoi(s) >= 1 && atoi(s) <= NQ_MAX) nqs[n_nqs++] = atoi(s);
        } else {
            fprintf(stderr, "usage: bench_indexer [--reps N] [--ns LIST] [--shapes quarter,flash] "
                            "[--keys bf16|fp4] [--kernels [--cold] [--nqs LIST]] [--rescore]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS || n_ns < 1) {
        fprintf(stderr, "bench_indexer: --reps 1..%d and at least one n\n", MAX_REPS);
        return 2;
    }
    for (int k = 0; k < n_ns; k++)
        if (ns[k] < 513 || ns[k] > (1 << 20)) {
            fprintf(stderr, "bench_indexer: every n in [513, 1048576]\n");
            return 2;
        }
    /* the best level, or the one DSV4_SIMD names (at most the best) */
    const int best = dsv4_cpu_simd() < dsv4_build_simd() ? dsv4_cpu_simd() : dsv4_build_simd(), topk = 512, dI = 128;
    dsv4_err serr = {0};
    const int simd = dsv4_simd_env(best, &serr);
    if (simd < 0 || simd > best) {
        fprintf(stderr, "bench_indexer: %s\n", simd < 0 ? serr.msg : "DSV4_SIMD names a level this CPU or build lacks");
        return 2;
    }
    int nmax = 0;
    for (int k = 0; k < n_ns; k++) nmax = ns[k] > nmax ? ns[k] : nmax;
    const int nI_max = 64;
    const size_t rb = (size_t)dsv4_row_bytes(KEY_FMT, dI, 0);
    uint8_t *pool = malloc(rb * (size_t)nmax);
    const void **keys = malloc(sizeof(void *) * nmax);
    float *qI = malloc(sizeof(float) * NQ_MAX * nI_max * dI), *wI = malloc(sizeof(float) * NQ_MAX * nI_max);
    bufs b = {malloc(sizeof(float) * NQ_MAX * (size_t)nmax), malloc(sizeof(float) * NQ_MAX * (size_t)nmax),
              malloc(sizeof(float) * nmax), malloc(sizeof(int) * nmax), malloc(sizeof(int) * nmax), NULL,
              malloc(sizeof(void *) * nmax)};
    int *sel_e = malloc(sizeof(int) * NQ_MAX * topk), *sel_b = malloc(sizeof(int) * NQ_MAX * topk);
    if (!pool || !keys || !qI || !wI || !b.scores || !b.knorm || !b.fbuf || !b.work || !b.cidx || !b.ckeys || !sel_e ||
        !sel_b) {
        fprintf(stderr, "bench_indexer: out of memory\n");
        return 1;
    }
    float row[128];
    for (int w = 0; w < nmax; w++) {
        for (int c = 0; c < dI; c++) row[c] = bench_urand(&rng);
        dsv4_row_round(KEY_FMT, row, dI, 0);
        dsv4_row_pack(KEY_FMT, pool + (size_t)w * rb, row, dI, 0);
        keys[w] = pool + (size_t)w * rb;
    }
    for (int i = 0; i < NQ_MAX * nI_max * dI; i++) qI[i] = bench_urand(&rng);
    for (int i = 0; i < NQ_MAX * nI_max; i++) wI[i] = 0.05f + 0.5f * (bench_urand(&rng) + 1.0f);
    if (KEY_FMT == DSV4_ROW_FP4) /* F3 rounds the queries too (each head's blocks of 32) */
        for (int h = 0; h < NQ_MAX * nI_max; h++) dsv4_row_round(DSV4_ROW_FP4, qI + (size_t)h * dI, dI, 0);
    if (kernels || rescore) {
        const int rk = rescore ? rescore_main(simd, reps, ns, n_ns, quarter, flash, qI, wI, keys, nmax)
                       : n_nqs ? kernels_main(simd, reps, ns, n_ns, quarter, flash, cold, nqs, n_nqs, qI, wI, keys, nmax)
                               : 2;
        free(pool); free(keys); free(qI); free(wI); free(b.scores); free(b.knorm); free(b.fbuf); free(b.work);
        free(b.cidx); free(b.ckeys); free(sel_e); free(sel_b);
        return rk;
    }
    int rc = 0;
    for (int shape = 0; shape < 2; shape++) {
        if ((shape == 0 && !quarter) || (shape == 1 && !flash)) continue;
        const int nI = shape ? 64 : 16;
        for (int k = 0; k < n_ns; k++)
            for (int nq = 1; nq <= NQ_MAX; nq += NQ_MAX - 1) {
                const int n = ns[k];
                double te[MAX_REPS], tb[MAX_REPS];
                long cand = 0;
                int same = 1;
                for (int r = 0; r < reps; r++) {
                    te[r] = run(0, simd, qI, wI, nq, nI, dI, keys, n, topk, &b, sel_e, &cand);
                    cand = 0;
                    tb[r] = run(1, simd, qI, wI, nq, nI, dI, keys, n, topk, &b, sel_b, &cand);
                    same &= memcmp(sel_e, sel_b, sizeof(int) * (size_t)nq * topk) == 0;
                }
                qsort(te, (size_t)reps, sizeof(double), cmp_double);
                qsort(tb, (size_t)reps, sizeof(double), cmp_double);
                const double ue = te[reps / 2] * 1e6 / nq, ub = tb[reps / 2] * 1e6 / nq;
                printf("{\"shape\": \"%s\", \"keys\": \"%s\", \"nI\": %d, \"dI\": %d, \"topk\": %d, \"n\": %d, \"nq\": %d, "
                       "\"level\": \"%s\", \"exact_us_per_query\": %.1f, \"bounded_us_per_query\": %.1f, "
                       "\"exact_over_bounded\": %.3f, \"candidates\": %.1f, \"same_selection\": %s}\n",
                       shape ? "flash" : "flash_quarter", KEY_FMT == DSV4_ROW_FP4 ? "fp4" : "bf16", nI, dI, topk, n, nq,
                       dsv4_simd_name(simd), ue, ub, ue / ub,
                       (double)cand / nq, same ? "true" : "false");
                fflush(stdout);
                if (!same) rc = 1;
            }
    }
    free(pool); free(keys); free(qI); free(wI); free(b.scores); free(b.knorm); free(b.fbuf); free(b.work);
    free(b.cidx); free(b.ckeys); free(sel_e); free(sel_b);
    return rc;
}
