/* bench_attn.c — the attention kernels on stored KV rows, per level and row format.
 *
 *   bench_attn [--reps N] [--calls N] [--pool-mb N] [--scalar]
 *
 * One thread (the kernels run inside one pool task each). One JSON line per case:
 *   "heads": dsv4_sparse_attn_heads over n_kv rows of hd values (scores, softmax with sink,
 *            value sum) for nh heads: flash_quarter's decode shapes (hd 512; 640 rows = the
 *            window + top-512 of a CSA layer; 8 heads = one of two head groups at batch 1,
 *            16 = a whole row at batch >= 2);
 *   "idx":   dsv4_idx_scores of nq queries (1 = decode, 8 = a prefill block) against n keys
 *            (nI 16 x dI 128, Flash's indexer head shape).
 * Rows and keys are drawn, scattered, from a pool of --pool-mb MB of F32 rows (the BF16 pool
 * holds as many rows in half the bytes), a different set on every call, so they come from
 * outside the core's caches as a decode step's rows do. Each case runs --calls calls per
 * round, rounds alternate over levels and formats (--reps rounds, default 7); reported: the
 * median and best microseconds per call, GB/s of row bytes and GFLOP/s (attention
 * 4·nh·hd·n_kv, indexer 2·nq·nI·dI·n) of the median. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "dsv4_internal.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
enum { MAX_REPS = 64, N_FMT = 2 };
static const int fmts[N_FMT] = {DSV4_ROW_F32, DSV4_ROW_BF16};

typedef struct pool {
    uint8_t *bytes[N_FMT]; /* the same rows as F32 and as BF16 */
    int64_t n_rows;
    int width;
} pool;

static int pool_make(pool *p, int64_t mb, int width) {
    p->width = width;
    p->n_rows = mb * 1024 * 1024 / (4 * (int64_t)width);
    float *x = malloc(sizeof(float) * (size_t)width);
    for (int f = 0; f < N_FMT; f++) p->bytes[f] = malloc((size_t)(p->n_rows * dsv4_row_bytes(fmts[f], width, 0)));
    if (!x || !p->bytes[0] || !p->bytes[1]) return -1;
    for (int64_t r = 0; r < p->n_rows; r++) {
        for (int c = 0; c < width; c++) x[c] = bench_urand(&rng);
        dsv4_row_round(DSV4_ROW_BF16, x, width, 0);
        for (int f = 0; f < N_FMT; f++)
            dsv4_row_pack(fmts[f], p->bytes[f] + r * dsv4_row_bytes(fmts[f], width, 0), x, width, 0);
    }
    free(x);
    return 0;
}

/* rows[0, n) of call k: scattered over the pool, a different set per call */
static void pick_rows(const pool *p, int f, int64_t k, int n, const void **rows) {
    const int64_t rb = dsv4_row_bytes(fmts[f], p->width, 0);
    for (int j = 0; j < n; j++)
        rows[j] = p->bytes[f] + ((k * 7919 + (int64_t)j * 104729) % p->n_rows) * rb;
}

typedef struct kcase {
    const char *kind;
    int a, b, n; /* heads: nh, hd, n_kv; idx: nq, dI (nI fixed at 16), n keys */
} kcase;

static double run_case(const kcase *kc, int level, int f, const pool *p, int calls, int64_t *k, const float *q,
                       const float *wI, float *out, const void **rows) {
    const dsv4_attn_ops *ops = dsv4_attn_ops_for(level);
    const double t0 = now_s();
    for (int c = 0; c < calls; c++, (*k)++) {
        pick_rows(p, f, *k, kc->n, rows);
        if (kc->kind[0] == 'h') {
            static float sink[64];
            dsv4_sparse_attn_heads(ops, q, rows, fmts[f], kc->n, kc->a, kc->b, sink, 0.044f, out,
                                   out + (size_t)kc->a * kc->b, dsv4_numerics_exact(),
                                   level >= DSV4_SIMD_AVX512 ? dsv4_expf_x512() : NULL);
        } else {
            int64_t lim[8];
            for (int i = 0; i < kc->a; i++) lim[i] = kc->n;
            dsv4_idx_scores(level, ops, q, (size_t)16 * kc->b, wI, 16, kc->a, lim, rows, fmts[f], 0, kc->n, 16, kc->b,
                            out, (size_t)kc->n);
        }
    }
    return (now_s() - t0) / calls;
}

int main(int argc, char **argv) {
    int reps = 7, calls = 200, scalar = 0;
    int64_t pool_mb = 256;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--calls") && i + 1 < argc) calls = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pool-mb") && i + 1 < argc) pool_mb = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--scalar")) scalar = 1;
        else {
            fprintf(stderr, "usage: bench_attn [--reps N] [--calls N] [--pool-mb N] [--scalar]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS || calls < 1 || pool_mb < 1) {
        fprintf(stderr, "bench_attn: --reps 1..%d, --calls and --pool-mb >= 1\n", MAX_REPS);
        return 2;
    }
    const kcase cases[] = {{"heads", 8, 512, 640}, {"heads", 16, 512, 640}, {"idx", 1, 128, 4096},
                           {"idx", 8, 128, 4096}};
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    const int best = dsv4_cpu_simd() < dsv4_build_simd() ? dsv4_cpu_simd() : dsv4_build_simd();
    int levels[3], n_levels = 0;
    if (scalar) levels[n_levels++] = DSV4_SIMD_SCALAR;
    for (int l = DSV4_SIMD_AVX2; l <= DSV4_SIMD_AVX512 && l <= best; l++) levels[n_levels++] = l;
    if (!n_levels) levels[n_levels++] = DSV4_SIMD_SCALAR;

    pool pr, pk;
    float *q = malloc(sizeof(float) * 16 * 512 * 8), *wI = malloc(sizeof(float) * 16 * 8);
    float *out = malloc(sizeof(float) * (16 * 512 + 16 * 640 + 8 * 4096));
    const void **rows = malloc(sizeof(void *) * 4096);
    if (!q || !wI || !out || !rows || pool_make(&pr, pool_mb, 512) || pool_make(&pk, pool_mb, 128)) {
        fprintf(stderr, "bench_attn: out of memory\n");
        return 1;
    }
    for (int i = 0; i < 16 * 512 * 8; i++) q[i] = bench_urand(&rng);
    for (int i = 0; i < 16 * 8; i++) wI[i] = 0.1f + 0.05f * bench_urand(&rng);

    static double t[8][3][N_FMT][MAX_REPS];
    int64_t k = 0;
    for (int r = 0; r < reps; r++)
        for (int c = 0; c < n_cases; c++)
            for (int l = 0; l < n_levels; l++)
                for (int f = 0; f < N_FMT; f++)
                    t[c][l][f][r] = run_case(&cases[c], levels[l], f, cases[c].kind[0] == 'h' ? &pr : &pk, calls, &k,
                                             q, wI, out, rows);
    for (int c = 0; c < n_cases; c++)
        for (int l = 0; l < n_levels; l++)
            for (int f = 0; f < N_FMT; f++) {
                double *v = t[c][l][f];
                qsort(v, (size_t)reps, sizeof(double), cmp_double);
                const double med = v[reps / 2];
                const kcase *kc = &cases[c];
                const int heads = kc->kind[0] == 'h';
                const double bytes = (double)kc->n * (double)dsv4_row_bytes(fmts[f], heads ? kc->b : kc->b, 0);
                const double flops = heads ? 4.0 * kc->a * kc->b * kc->n : 2.0 * kc->a * 16 * kc->b * kc->n;
                printf("{\"case\":\"%s\",\"level\":\"%s\",\"kv\":\"%s\",\"%s\":%d,\"width\":%d,\"rows\":%d,"
                       "\"us_median\":%.3f,\"us_best\":%.3f,\"row_gbs\":%.3f,\"gflops\":%.3f,\"reps\":%d,\"calls\":%d}\n",
                       kc->kind, dsv4_simd_name((dsv4_simd)levels[l]), fmts[f] == DSV4_ROW_BF16 ? "bf16" : "f32",
                       heads ? "heads" : "queries", kc->a, kc->b, kc->n, med * 1e6, v[0] * 1e6, bytes / med * 1e-9,
                       flops / med * 1e-9, reps, calls);
            }
    for (int f = 0; f < N_FMT; f++) {
        free(pr.bytes[f]);
        free(pk.bytes[f]);
    }
    free(q); free(wI); free(out); free(rows);
    return 0;
}
