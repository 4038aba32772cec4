/* bench_fp4_layout — would a load-time repack of the FP4 experts make the one-row decode
 * cheaper? (issue 16's batch-1 target; BENCHMARKS.md session 24 lead)
 *
 *   bench_fp4_layout [--cols N] [--groups G] [--reps N] [--rounds N]
 *
 * One activation row against R = 8 FP4 weight rows of N columns, AVX-512, one thread: one
 * block of rows hot in L1/L2 (G = 1), or G blocks visited in turn (G x 8 x N / 2 bytes a
 * layout: from memory when that outgrows the caches, as the experts' weights arrive), two layouts that give every accumulator lane the same FMA sequence (so the
 * same bits, checked):
 *   today:    the checkpoint's bytes; per 16 weights an 8-byte broadcast, vpsrlvd, vpermps
 *             on the block's 16-entry table (its scale folded in), one FMA: the loop of
 *             gemv_fp4_cols in src/kernels/linear_avx512.c at one activation row (every
 *             row's halves decoded, then the FMAs), with its lanes (dec_fp4's shifts);
 *   repacked: 4 blocks (128 weights) of a row in one 64-byte line, nibble 2k + h of dword
 *             lane L holding the weight that lane L of half h of block k takes today; per
 *             16 weights vpsrld by an immediate, vpermps, one FMA, and one load per 128.
 * Each also runs with one fixed table instead of the per-block table loads ("no table",
 * results not used): what the decode would cost if the scales were free.
 * Prints one JSON line: ns per 16 weights of each (median of rounds) and the ratios. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "dsv4_internal.h" /* dsv4_cpu_simd */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define F512 __attribute__((target("avx512f")))
#define R 8 /* weight rows a block, as gemv_fp4 at one activation row */

typedef struct {
    int64_t n;          /* columns, a multiple of 128 */
    int64_t groups;     /* blocks of R rows */
    uint8_t *w;         /* (groups, R, n / 2) FP4, the checkpoint's order (low nibble: even column) */
    uint8_t *wp;        /* (groups, R, n / 2) the same weights repacked */
    uint8_t *sc;        /* (groups, R, n / 32) ue8m0 scale indices */
    float *x;           /* (n) in lane order (the permutation both layouts use) */
    float (*tab)[16];   /* (256, 16) the e2m1 values times 2^(s - 127) */
} probe;

/* lane L of a half block takes column (L % 2) * 8 + L / 2 of its 16: nibble L / 2 of the
 * half's dword L % 2 */
static int lane_col(int L) { return (L % 2) * 8 + L / 2; }

static void repack(probe *p) {
    const int64_t rb = p->n / 2;
    memset(p->wp, 0, (size_t)(R * rb * p->groups));
    for (int64_t r = 0; r < R * p->groups; r++)
        for (int64_t g = 0; g < p->n / 128; g++) /* a 64-byte line: 4 blocks */
            for (int k = 0; k < 4; k++)
                for (int h = 0; h < 2; h++)
                    for (int L = 0; L < 16; L++) {
                        const int64_t c = g * 128 + k * 32 + h * 16 + lane_col(L);
                        const int v = (p->w[r * rb + c / 2] >> (4 * (c % 2))) & 15;
                        const int s = 2 * k + h; /* nibble s of dword lane L */
                        p->wp[r * rb + g * 64 + L * 4 + s / 2] |= (uint8_t)(v << (4 * (s % 2)));
                    }
}

/* today's layout: y[r] = sum over columns in lane order */
F512 __attribute__((noinline)) static void run_today(const probe *p, int64_t gi, int fixed, float *y) {
    const int64_t rb = p->n / 2, nsb = p->n / 32;
    const uint8_t *wg = p->w + gi * R * rb, *sg = p->sc + gi * R * nsb;
    /* dword lanes 2q and 2q + 1 of the broadcast hold bytes 0-3 and 4-7: lane L shifts its
     * dword (L % 2) by 4 * (L / 2) */
    const __m512i sh = _mm512_set_epi32(28, 28, 24, 24, 20, 20, 16, 16, 12, 12, 8, 8, 4, 4, 0, 0);
    const __m512 t0 = _mm512_loadu_ps(p->tab[127]);
    __m512 a[R];
    for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) { /* every row's two halves decoded, then the FMAs */
        __m512 w0[R], w1[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 t = fixed ? t0 : _mm512_load_ps(p->tab[sg[r * nsb + b]]);
            const uint8_t *q = wg + r * rb + b * 16;
            long long lo, hi;
            memcpy(&lo, q, 8);
            memcpy(&hi, q + 8, 8);
            w0[r] = _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi64(lo), sh), t);
            w1[r] = _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi64(hi), sh), t);
        }
        const __m512 x0 = _mm512_load_ps(p->x + b * 32), x1 = _mm512_load_ps(p->x + b * 32 + 16);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(x0, w0[r], a[r]);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(x1, w1[r], a[r]);
    }
    for (int r = 0; r < R; r++) y[r] = _mm512_reduce_add_ps(a[r]);
}

/* the repacked layout: one 64-byte load per 4 blocks of a row; the rows interleaved per
 * vector so that consecutive FMAs are on different accumulators */
F512 __attribute__((noinline)) static void run_repacked(const probe *p, int64_t gi, int fixed, float *y) {
    const int64_t rb = p->n / 2, nsb = p->n / 32;
    const uint8_t *wg = p->wp + gi * R * rb, *sg = p->sc + gi * R * nsb;
    const __m512 t0 = _mm512_loadu_ps(p->tab[127]);
    __m512 a[R];
    for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < p->n / 128; g++) {
        __m512i ws[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) ws[r] = _mm512_load_si512(wg + r * rb + g * 64);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const int64_t b = g * 4 + k;
            const __m512 x0 = _mm512_loadu_ps(p->x + b * 32), x1 = _mm512_loadu_ps(p->x + b * 32 + 16);
            __m512 t[R];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                t[r] = fixed ? t0 : _mm512_load_ps(p->tab[sg[r * nsb + b]]);
                const __m512i w0 = k == 0 ? ws[r] : _mm512_srli_epi32(ws[r], 8 * k);
                a[r] = _mm512_fmadd_ps(x0, _mm512_permutexvar_ps(w0, t[r]), a[r]);
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const __m512i w1 = _mm512_srli_epi32(ws[r], 8 * k + 4);
                a[r] = _mm512_fmadd_ps(x1, _mm512_permutexvar_ps(w1, t[r]), a[r]);
            }
        }
    }
    for (int r = 0; r < R; r++) y[r] = _mm512_reduce_add_ps(a[r]);
}

typedef void (*run_fn)(const probe *, int64_t, int, float *);

/* ns per 16 weights over reps calls, the blocks of rows in turn */
static double time_one(const probe *p, run_fn f, int fixed, int reps, float *y) {
    const double t = now_s();
    for (int i = 0; i < reps; i++) f(p, i % p->groups, fixed, y);
    return (now_s() - t) * 1e9 / reps / (R * p->n / 16.0);
}

int main(int argc, char **argv) {
    int64_t n = 1024, groups = 1;
    int reps = 20000, rounds = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cols") && i + 1 < argc) n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--groups") && i + 1 < argc) groups = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_fp4_layout [--cols N (multiple of 128)] [--groups G] [--reps N] [--rounds N]\n");
            return 2;
        }
    }
    if (n < 128 || n % 128 || n > (1 << 20) || groups < 1 || groups * n > ((int64_t)1 << 27) || reps < 1 || rounds < 1 ||
        rounds > 99) {
        fprintf(stderr, "bench_fp4_layout: --cols must be a multiple of 128 up to 2^20, --groups >= 1 with "
                        "groups x cols up to 2^27, --reps >= 1, --rounds 1-99\n");
        return 2;
    }
    if (dsv4_cpu_simd() < DSV4_SIMD_AVX512) {
        printf("{\"bench\":\"fp4_layout\",\"skipped\":\"no AVX-512 on this CPU\"}\n");
        return 0;
    }
    probe p = {.n = n, .groups = groups};
    /* 64-byte aligned as the library's (a table or x line split in two costs ~2x) */
    p.w = aligned_alloc(64, (size_t)(groups * R * n / 2));
    p.wp = aligned_alloc(64, (size_t)(groups * R * n / 2));
    p.sc = aligned_alloc(64, (size_t)(groups * R * n / 32));
    p.x = aligned_alloc(64, sizeof(float) * (size_t)n);
    p.tab = aligned_alloc(64, sizeof(float[256][16]));
    if (!p.w || !p.wp || !p.sc || !p.x || !p.tab) {
        fprintf(stderr, "bench_fp4_layout: out of memory\n");
        return 1;
    }
    static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int s = 0; s < 256; s++)
        for (int v = 0; v < 16; v++) p.tab[s][v] = e2m1[v] * ldexpf(1.0f, s - 127);
    uint32_t st = 12345u;
    for (int64_t i = 0; i < groups * R * n / 2; i++) p.w[i] = (uint8_t)((st = st * 1664525u + 1013904223u) >> 24);
    for (int64_t i = 0; i < groups * R * n / 32; i++) p.sc[i] = (uint8_t)(120 + (i * 7) % 15);
    for (int64_t i = 0; i < n; i++) p.x[i] = (float)((int)((st = st * 1664525u + 1013904223u) >> 20) - 2048) / 1024.0f;
    repack(&p);

    float ya[R], yb[R];
    int same = 1;
    for (int64_t g = 0; g < groups; g += groups > 1 ? groups - 1 : 1) { /* the first and the last block */
        run_today(&p, g, 0, ya);
        run_repacked(&p, g, 0, yb);
        same &= !memcmp(ya, yb, sizeof ya);
    }

    double t[4][99];
    run_fn fn[4] = {run_today, run_repacked, run_today, run_repacked};
    for (int k = 0; k < rounds; k++) /* alternated within each round */
        for (int v = 0; v < 4; v++) t[v][k] = time_one(&p, fn[v], v >= 2, reps, v >= 2 ? yb : ya);
    double med[4];
    for (int v = 0; v < 4; v++) {
        qsort(t[v], (size_t)rounds, sizeof(double), cmp_double);
        med[v] = t[v][rounds / 2];
    }
    printf("{\"bench\":\"fp4_layout\",\"cols\":%lld,\"groups\":%lld,\"rows\":%d,\"rounds\":%d,\"same_bits\":%d,"
           "\"ns_per16_today\":%.4f,\"ns_per16_repacked\":%.4f,\"ns_per16_today_no_table\":%.4f,"
           "\"ns_per16_repacked_no_table\":%.4f,\"repacked_over_today\":%.3f,\"no_table_over_today\":%.3f}\n",
           (long long)n, (long long)groups, R, rounds, same, med[0], med[1], med[2], med[3], med[1] / med[0], med[3] / med[0]);
    free(p.w);
    free(p.wp);
    free(p.sc);
    free(p.x);
    free(p.tab);
    return same ? 0 : 1;
}
#else
int main(void) {
    printf("{\"bench\":\"fp4_layout\",\"skipped\":\"not x86-64\"}\n");
    return 0;
}
#endif
