/* test_idx_approx_prefetch.c — the one-query approximate kernel's key prefetch (idx_approx_x512.c,
 * fq_run / fq_dots). Prefetches change no value, so test_idx_approx cannot see them: here each
 * one records its line instead, and a call over keys [0, n) must name every line of keys
 * [16, n) (each block of 16 brings in the next) exactly once and nothing else, for one, two
 * and four queries (the dots in 1, 2 and 4 passes a block), BF16 and F32 rows, rows that start
 * on a line and mid-line (one more line), and a last block cut short. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
enum { MAX_LINES = 1 << 16 };
static const char *lines[MAX_LINES];
static int n_lines;
#define FQ_PF_TOUCH(a) (n_lines < MAX_LINES ? (void)(lines[n_lines++] = (const char *)(a)) : (void)0)
#ifndef DSV4_HAVE_AVX512
#define DSV4_HAVE_AVX512 1
#endif
#include "kernels/cpu.h"
#include "kernels/idx_approx_x512.c"

static void check(int fmt, int nq, int n, int skew) {
    enum { NI = 16, DI = 128, STRIDE = 640 }; /* rows STRIDE apart: a gap between them */
    const int row_bytes = DI * (fmt == DSV4_ROW_BF16 ? 2 : 4);
    char *buf = aligned_alloc(64, (size_t)n * STRIDE + 64);
    const void **keys = malloc(sizeof(void *) * (size_t)n);
    float *qI = malloc(sizeof(float) * NI * DI * nq), *wI = malloc(sizeof(float) * NI * nq);
    float *scores = malloc(sizeof(float) * (size_t)n * nq), *knorm = malloc(sizeof(float) * (size_t)n * nq);
    memset(buf, 0, (size_t)n * STRIDE + 64);
    for (int i = 0; i < NI * DI * nq; i++) qI[i] = 0.25f;
    for (int i = 0; i < NI * nq; i++) wI[i] = 1.0f;
    for (int w = 0; w < n; w++) keys[w] = buf + (size_t)w * STRIDE + skew;
    int64_t lim[4];
    for (int q = 0; q < nq; q++) lim[q] = n;
    n_lines = 0;
    approx_few_avx512(qI, NI * DI, wI, NI, nq, lim, keys, fmt, 0, n, NI, DI, scores, knorm, (size_t)n);
    /* each line of keys [16, n) once, nothing else */
    int bad = 0, once = 1;
    static int seen[1 << 14];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < n_lines; i++) {
        const int64_t off = lines[i] - buf;
        const int64_t w = off / STRIDE, in = off % STRIDE;
        if (w < 16 || w >= n || in < (skew & ~63) || in >= skew + row_bytes) bad++;
        else seen[off / 64]++;
    }
    for (int w = 16; w < n; w++)
        for (int64_t a = ((int64_t)w * STRIDE + skew) & ~63; a < (int64_t)w * STRIDE + skew + row_bytes; a += 64)
            once &= seen[a / 64] == 1;
    CHECK_MSG(bad == 0 && once, "fmt %d, %d queries, %d keys, rows at +%d: %d stray lines, each once %d", fmt, nq, n,
              skew, bad, once);
    free(buf); free(keys); free(qI); free(wI); free(scores); free(knorm);
}

int main(void) {
    if (dsv4_cpu_simd() < DSV4_SIMD_AVX512 || dsv4_build_simd() < DSV4_SIMD_AVX512) {
        printf("no AVX-512: skipped\n");
        return test_report();
    }
    for (int fmt = DSV4_ROW_BF16; fmt <= DSV4_ROW_F32; fmt += 2)
        for (int nq = 1; nq <= 4; nq *= 2)
            for (int skew = 0; skew <= 96; skew += 96) /* +96: mid-line, one line more a row */
                for (int n = 16; n <= 72; n += 28) check(fmt, nq, n, skew);
    return test_report();
}
#else
int main(void) {
    printf("not x86-64: skipped\n");
    return test_report();
}
#endif
