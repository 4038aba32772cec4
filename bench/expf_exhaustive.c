/* expf_exhaustive — the AVX-512 expf and SwiGLU (kernels/swiglu.h) against libm on every
 * float, and their speed.
 *
 *   expf_exhaustive            all 2^32 inputs: expf bits, and silu bits (the SwiGLU with
 *                              u = 1, weight 1, no clamp) against the portable loop
 *   expf_exhaustive --hard     inputs where libm's expf differs from glibc's algorithm
 *                              without FMA, or from expf rounded from double exp (the list
 *                              in swiglu.c's agreement check)
 *   expf_exhaustive --time R   the SwiGLU of a batch-16 decode layer (112 rows of 512),
 *                              portable against AVX-512, and one row's attention with the
 *                              softmax's expf per value against the array expf, each
 *                              alternated R rounds in one process
 *
 * Compiled with -ffp-contract=off: the non-FMA reference below must keep its roundings. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "dsv4_internal.h"

#define CHUNK 4096

static float from_bits(uint32_t b) { float f; memcpy(&f, &b, sizeof f); return f; }
static uint32_t to_bits(float f) { uint32_t b; memcpy(&b, &f, sizeof b); return b; }

/* glibc's expf algorithm with every multiply and add rounded on its own (its non-FMA
 * build); main path only (|x| < 88). */
static float expf_nofma(float x) {
    const double xd = x, z = 0x1.71547652b82fep+5 * xd;
    const volatile double kds = z + 0x1.8p+52;
    uint64_t ki;
    double kd = kds;
    memcpy(&ki, &kd, sizeof ki);
    kd -= 0x1.8p+52;
    const double r = z - kd;
    uint64_t t = dsv4_expf_tab[ki % 32] + (ki << 47);
    double s;
    memcpy(&s, &t, sizeof s);
    const double zz = 0x1.c6af84b912394p-20 * r + 0x1.ebfce50fac4f3p-13, r2 = r * r;
    double y = 0x1.62e42ff0c52d6p-6 * r + 1;
    y = zz * r2 + y;
    return (float)(y * s);
}

static int main_path(uint32_t b) { return ((b >> 20) & 0x7ff) < 0x42b; }

static int run_all(void) {
    const dsv4_expf_rows_fn ex = dsv4_expf_x512();
    const dsv4_swiglu_fn sw = dsv4_swiglu_x512();
    if (!ex || !sw) { fprintf(stderr, "no AVX-512 on this CPU or build\n"); return 2; }
    static float x[CHUNK], y[CHUNK], ones[CHUNK], hv[CHUNK], hp[CHUNK];
    for (int i = 0; i < CHUNK; i++) ones[i] = 1.0f;
    uint64_t bad_e = 0, bad_s = 0;
    for (uint64_t b0 = 0; b0 < (1ull << 32); b0 += CHUNK) {
        for (int i = 0; i < CHUNK; i++) x[i] = from_bits((uint32_t)(b0 + i));
        ex(x, CHUNK, y);
        sw(x, ones, NULL, 1, CHUNK, 0.0f, hv);
        dsv4_swiglu_rows(x, ones, NULL, 1, CHUNK, 0.0f, hp);
        for (int i = 0; i < CHUNK; i++) {
            if (to_bits(y[i]) != to_bits(expf(x[i])) && bad_e++ < 10)
                printf("expf %08x: libm %08x x512 %08x\n", (uint32_t)(b0 + i), to_bits(expf(x[i])), to_bits(y[i]));
            if (to_bits(hv[i]) != to_bits(hp[i]) && bad_s++ < 10)
                printf("silu %08x: portable %08x x512 %08x\n", (uint32_t)(b0 + i), to_bits(hp[i]), to_bits(hv[i]));
        }
    }
    printf("all 2^32 inputs: expf mismatches %llu, silu mismatches %llu\n", (unsigned long long)bad_e,
           (unsigned long long)bad_s);
    return bad_e || bad_s;
}

/* main-path inputs where libm differs from the non-FMA build (up to 16) or from
 * (float)exp(double) (up to 8 a sign), spread over the range */
static int run_hard(void) {
    int n_fma = 0, n_cr = 0;
    uint64_t next_fma = 0, next_cr = 0;
    for (uint64_t b = 0; b < (1ull << 32); b++) {
        const uint32_t u = (uint32_t)b;
        if (!main_path(u)) continue;
        const float x = from_bits(u);
        const uint32_t e = to_bits(expf(x));
        if (b >= next_fma && n_fma < 16 && e != to_bits(expf_nofma(x))) {
            printf("    0x%08xu, /* fma */\n", u);
            n_fma++;
            next_fma = b + (1u << 20);
        } else if (b >= next_cr && n_cr < 16 && (u >> 31) == (uint32_t)(n_cr >= 8) &&
                   e != to_bits((float)exp((double)x))) {
            printf("    0x%08xu, /* cr */\n", u);
            n_cr++;
            next_cr = b + (1u << 22);
        }
    }
    return 0;
}

static int run_time(int rounds) {
    const dsv4_swiglu_fn sw = dsv4_swiglu_x512();
    if (!sw) { fprintf(stderr, "no AVX-512 on this CPU or build\n"); return 2; }
    enum { ROWS = 112, I = 512 };
    float *g = malloc(sizeof(float) * ROWS * I), *u = malloc(sizeof(float) * ROWS * I);
    float *ha = malloc(sizeof(float) * ROWS * I), *hb = malloc(sizeof(float) * ROWS * I), w[ROWS];
    uint64_t s = 1;
    for (int i = 0; i < ROWS * I; i++) {
        g[i] = 4.0f * bench_urand(&s);
        u[i] = 4.0f * bench_urand(&s);
    }
    for (int r = 0; r < ROWS; r++) w[r] = 0.5f + 0.5f * bench_urand(&s);
    double ta[64], tb[64];
    if (rounds > 64) rounds = 64;
    for (int k = 0; k < rounds; k++) {
        for (int v = 0; v < 2; v++) {
            const int which = (k & 1) ? 1 - v : v;
            const double t0 = now_s();
            for (int rep = 0; rep < 20; rep++) {
                if (which == 0) dsv4_swiglu_rows(g, u, w, ROWS, I, 7.0f, ha);
                else sw(g, u, w, ROWS, I, 7.0f, hb);
            }
            const double dt = (now_s() - t0) / 20;
            if (which == 0) ta[k] = dt; else tb[k] = dt;
        }
    }
    qsort(ta, (size_t)rounds, sizeof ta[0], cmp_double);
    qsort(tb, (size_t)rounds, sizeof tb[0], cmp_double);
    const int same = memcmp(ha, hb, sizeof(float) * ROWS * I) == 0;
    printf("swiglu %d x %d, one thread, %d rounds: portable median %.1f us, x512 median %.1f us, ratio %.3f, bits %s\n",
           ROWS, I, rounds, 1e6 * ta[rounds / 2], 1e6 * tb[rounds / 2],
           tb[rounds / 2] / ta[rounds / 2], same ? "same" : "DIFFER");
    free(g); free(u); free(ha); free(hb);

    /* one row's attention over a CSA layer's list at context ~576 (16 heads, 272 K=V rows
     * of 512, F32): the softmax's expf per value against the array expf */
    enum { H = 16, HD = 512, NKV = 272 };
    float *q = malloc(sizeof(float) * H * HD), *kv = malloc(sizeof(float) * NKV * HD), sink[H];
    float *pa = malloc(sizeof(float) * H * NKV), *pb = malloc(sizeof(float) * H * NKV);
    float *oa = malloc(sizeof(float) * H * HD), *ob = malloc(sizeof(float) * H * HD);
    const void *rows[NKV];
    for (int i = 0; i < H * HD; i++) q[i] = 0.2f * bench_urand(&s);
    for (int i = 0; i < NKV * HD; i++) kv[i] = bench_urand(&s);
    for (int h = 0; h < H; h++) sink[h] = bench_urand(&s);
    for (int j = 0; j < NKV; j++) rows[j] = kv + (size_t)((j * 7 + 3) % NKV) * HD;
    const dsv4_attn_ops *ops = dsv4_attn_ops_for(dsv4_cpu_simd());
    for (int k = 0; k < rounds; k++) {
        for (int v = 0; v < 2; v++) {
            const int which = (k & 1) ? 1 - v : v;
            const double t0 = now_s();
            for (int rep = 0; rep < 20; rep++)
                dsv4_sparse_attn_heads(ops, q, rows, DSV4_ROW_F32, NKV, H, HD, sink, 0.044f, which ? ob : oa,
                                       which ? pb : pa, dsv4_numerics_exact(), which ? dsv4_expf_x512() : NULL);
            const double dt = (now_s() - t0) / 20;
            if (which == 0) ta[k] = dt; else tb[k] = dt;
        }
    }
    qsort(ta, (size_t)rounds, sizeof ta[0], cmp_double);
    qsort(tb, (size_t)rounds, sizeof tb[0], cmp_double);
    const int same2 = !memcmp(oa, ob, sizeof(float) * H * HD) && !memcmp(pa, pb, sizeof(float) * H * NKV);
    printf("attention row %d heads x %d rows of %d, one thread, %d rounds: expf per value median %.1f us, "
           "array expf median %.1f us, ratio %.3f, bits %s\n", H, NKV, HD, rounds, 1e6 * ta[rounds / 2],
           1e6 * tb[rounds / 2], tb[rounds / 2] / ta[rounds / 2], same2 ? "same" : "DIFFER");
    free(q); free(kv); free(pa); free(pb); free(oa); free(ob);
    return !same || !same2;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--hard")) return run_hard();
    if (argc > 2 && !strcmp(argv[1], "--time")) return run_time(atoi(argv[2]));
    return run_all();
}
