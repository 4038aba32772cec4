/* bench_linear.c — dsv4_linear throughput against this machine's own roofline.
 *
 *   bench_linear [--threads N] [--reps N] [--scalar] [--quick]
 *
 * Measured in the same run, one JSON line each:
 *   probe "stream": read-only streaming sum over 512 MB (all threads) -> GB/s roofline;
 *   probe "fma": 12 independent FMA chains per thread, in registers -> GFLOP/s peak;
 *   "gemv": n_rows = 1 (decode) and 2 (decode + MTP draft) per format on a matrix of
 *           >= 128 MB (4x the L3), GB/s of weight bytes (with scales) and the fraction of
 *           the stream roofline;
 *   "gemv_experts": 16 distinct FP4 2048x4096 matrices in turn (a decode step's routed
 *           experts: per-call overhead included);
 *   "gemm": 512 rows x 4096x4096 per format, GFLOP/s and the fraction of the FMA peak.
 * Times are the best of --reps runs (default 5). GEMV rounds alternate with a stream pass,
 * so on a shared machine the ratio compares like with like: "of_stream" is best/best and
 * "of_stream_median" the median of the per-round ratios. --scalar adds the portable level. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu.h"
#include "kernels/kctx.h"
#include "kernels/linear.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_PROBES 1
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng;
}

static void fill_bytes(void *p, size_t n) {
    uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = rnd();
        memcpy(b + i, &v, 8);
    }
    for (; i < n; i++) b[i] = (uint8_t)rnd();
}

static const char *fmt_name(dsv4_wfmt f) {
    static const char *names[] = {"none", "f32", "f16", "bf16", "fp8", "fp4"};
    return names[f];
}

/* Random weights: valid values for every format (no NaN/inf codes), ue8m0 scales. */
static dsv4_mat make_mat(dsv4_wfmt f, int64_t rows, int64_t cols) {
    dsv4_mat m = {f, rows, cols, NULL, NULL, 0};
    const int64_t n = rows * cols;
    size_t wbytes = 0, sbytes = 0;
    switch (f) {
    case DSV4_WF_F32: wbytes = (size_t)n * 4; break;
    case DSV4_WF_F16:
    case DSV4_WF_BF16: wbytes = (size_t)n * 2; break;
    case DSV4_WF_FP8: wbytes = (size_t)n; sbytes = (size_t)(((rows + 127) / 128) * ((cols + 127) / 128)); break;
    case DSV4_WF_FP4: wbytes = (size_t)n / 2; sbytes = (size_t)(rows * (cols / 32)); break;
    default: break;
    }
    void *w = aligned_alloc(64, (wbytes + 63) & ~(size_t)63);
    if (f == DSV4_WF_F32) {
        float *p = w;
        for (int64_t i = 0; i < n; i++) p[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 1e-3f;
    } else if (f == DSV4_WF_F16 || f == DSV4_WF_BF16) {
        uint16_t *p = w;
        for (int64_t i = 0; i < n; i++) p[i] = (uint16_t)((rnd() & 0x83ff) | (f == DSV4_WF_F16 ? 0x3800 : 0x3f00));
    } else {
        fill_bytes(w, wbytes);
        if (f == DSV4_WF_FP8) /* no NaN codes */
            for (size_t i = 0; i < wbytes; i++) if ((((uint8_t *)w)[i] & 0x7f) == 0x7f) ((uint8_t *)w)[i] = 0x7e;
    }
    if (sbytes) {
        uint8_t *s = malloc(sbytes);
        for (size_t i = 0; i < sbytes; i++) s[i] = (uint8_t)(118 + rnd() % 8);
        m.scale = s;
    }
    m.w = w;
    return m;
}

static void free_mat(dsv4_mat *m) {
    free((void *)m->w);
    free((void *)m->scale);
}

/* ---- probes ------------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *buf;
    size_t bytes, chunk;
    double sums[256];
} stream_job;

#ifdef HAVE_X86_PROBES
__attribute__((target("avx2"))) static double stream_sum(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    __m256i a = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    int64_t t[4];
    _mm256_storeu_si256((__m256i *)t, a);
    return (double)(t[0] + t[1] + t[2] + t[3]);
}
#endif

static double stream_sum_portable(const uint8_t *p, size_t n) {
    uint64_t a[8] = {0};
    for (size_t i = 0; i + 64 <= n; i += 64)
        for (int l = 0; l < 8; l++) {
            uint64_t v;
            memcpy(&v, p + i + 8 * l, 8);
            a[l] += v;
        }
    return (double)(a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7]);
}

static int use_avx2;

static void stream_task(void *arg, int t, int tid) {
    (void)tid;
    stream_job *j = arg;
    const size_t off = (size_t)t * j->chunk;
    const size_t n = off + j->chunk <= j->bytes ? j->chunk : j->bytes - off;
#ifdef HAVE_X86_PROBES
    if (use_avx2) { j->sums[t & 255] += stream_sum(j->buf + off, n); return; }
#endif
    j->sums[t & 255] += stream_sum_portable(j->buf + off, n);
}

/* One pass of the stream probe over the whole buffer; returns seconds. */
static double stream_once(dsv4_kctx *k, stream_job *sj) {
    const int n_tasks = (int)((sj->bytes + sj->chunk - 1) / sj->chunk);
    double t0 = now_s();
    dsv4_kctx_parallel(k, n_tasks, stream_task, sj);
    return now_s() - t0;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#ifdef HAVE_X86_PROBES
__attribute__((target("avx2,fma"))) static double fma_chains(int64_t iters) {
    __m256 a[12], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    for (int64_t k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    }
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    float t[8];
    _mm256_storeu_ps(t, s);
    return t[0];
}
#endif

typedef struct {
    int64_t iters;
    double out[256];
} fma_job;

static void fma_task(void *arg, int t, int tid) {
    (void)tid;
    fma_job *j = arg;
#ifdef HAVE_X86_PROBES
    j->out[t & 255] = fma_chains(j->iters);
#else
    (void)j;
    (void)t;
#endif
}

/* One pass of the FMA probe on every thread; returns seconds. */
static double fma_once(dsv4_kctx *k, fma_job *fj, int threads) {
    double t0 = now_s();
    dsv4_kctx_parallel(k, threads, fma_task, fj);
    return now_s() - t0;
}

/* ---- main ---------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    int threads = 0, reps = 5, scalar = 0, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scalar")) scalar = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else {
            fprintf(stderr, "usage: bench_linear [--threads N] [--reps N] [--scalar] [--quick]\n");
            return 2;
        }
    }
    dsv4_kctx *k;
    dsv4_err err;
    if (dsv4_kctx_create(threads, 4096, &k, &err)) {
        fprintf(stderr, "bench_linear: %s\n", err.msg);
        return 1;
    }
    threads = dsv4_kctx_threads(k);
    const int best = dsv4_kctx_simd(k);
    use_avx2 = dsv4_cpu_simd() >= DSV4_SIMD_AVX2;

    /* stream probe: 512 MB, touched once before timing so pages are mapped */
    const size_t sbytes = quick ? (size_t)128 << 20 : (size_t)512 << 20;
    uint8_t *sbuf = aligned_alloc(64, sbytes);
    memset(sbuf, 1, sbytes);
    stream_job sj = {sbuf, sbytes, (size_t)4 << 20, {0}};
    double s_best = 1e9;
    for (int r = 0; r < reps + 1; r++) {
        double dt = stream_once(k, &sj);
        if (r > 0 && dt < s_best) s_best = dt;
    }
    double bw = (double)sbytes / s_best / 1e9;
    printf("{\"bench\":\"probe_stream\",\"threads\":%d,\"bytes\":%zu,\"gbps\":%.2f}\n", threads, sbytes, bw);

    /* FMA peak probe: one chain set per thread, ~20 ms a pass on a quiet machine */
    double peak = 0;
    fma_job fj = {quick ? 2000000 : 5000000, {0}};
    if (use_avx2) {
        double f_best = 1e9;
        for (int r = 0; r < reps + 1; r++) {
            const double dt = fma_once(k, &fj, threads);
            if (dt < f_best) f_best = dt;
        }
        peak = (double)threads * fj.iters * 12 * 8 * 2 / f_best / 1e9;
        printf("{\"bench\":\"probe_fma\",\"threads\":%d,\"gflops\":%.1f}\n", threads, peak);
    }

    /* GEMV on matrices of >= 128 MB of weights */
    const dsv4_wfmt fmts[5] = {DSV4_WF_F32, DSV4_WF_F16, DSV4_WF_BF16, DSV4_WF_FP8, DSV4_WF_FP4};
    const int64_t gemv_shape[6][2] = {{0, 0}, {8192, 4096}, {8192, 8192}, {8192, 8192}, {16384, 8192}, {16384, 16384}};
    for (int level = best; level >= 0; level--) {
        if (level != best && !scalar) break;
        dsv4_kctx_set_simd(k, level);
        for (int fi = 0; fi < 5; fi++) {
            const dsv4_wfmt f = fmts[fi];
            int64_t rows = gemv_shape[f][0], cols = gemv_shape[f][1];
            if (quick) rows /= 2;
            dsv4_mat m = make_mat(f, rows, cols);
            /* n_rows 1 (decode) and 2 (decode with an MTP draft to verify) */
            float *x = malloc(sizeof(float) * 2 * cols), *y = malloc(sizeof(float) * 2 * rows);
            for (int64_t i = 0; i < 2 * cols; i++) x[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 1e-3f;
            for (int nx = 1; nx <= 2; nx++) {
                /* rounds of (stream probe, GEMV) back to back: on a shared machine both see
                 * the same conditions; report the best of each and the median round ratio */
                const int nr = level == DSV4_SIMD_SCALAR ? 2 : reps + 1;
                const double bytes = (double)dsv4_mat_bytes(&m);
                double best_t = 1e9, best_s = 1e9, ratios[64];
                int n_ratio = 0;
                for (int r = 0; r < nr; r++) {
                    const double ts = stream_once(k, &sj);
                    double t0 = now_s();
                    dsv4_linear(k, &m, x, nx, y);
                    double dt = now_s() - t0;
                    if (r == 0) continue; /* warm-up */
                    if (dt < best_t) best_t = dt;
                    if (ts < best_s) best_s = ts;
                    if (n_ratio < 64) ratios[n_ratio++] = (bytes / dt) / ((double)sbytes / ts);
                }
                qsort(ratios, (size_t)n_ratio, sizeof(double), cmp_double);
                const double gbps = bytes / best_t / 1e9, sbw = (double)sbytes / best_s / 1e9;
                printf("{\"bench\":\"gemv\",\"simd\":\"%s\",\"fmt\":\"%s\",\"n_rows\":%d,\"rows\":%lld,"
                       "\"cols\":%lld,\"threads\":%d,\"ms\":%.3f,\"gbps\":%.2f,\"gelem_s\":%.2f,"
                       "\"stream_gbps\":%.2f,\"of_stream\":%.3f,\"of_stream_median\":%.3f}\n",
                       dsv4_simd_name(level), fmt_name(f), nx, (long long)rows, (long long)cols, threads,
                       best_t * 1e3, gbps, (double)rows * cols / best_t / 1e9, sbw, gbps / sbw, ratios[n_ratio / 2]);
                fflush(stdout);
            }
            free(x);
            free(y);
            free_mat(&m);
        }
    }
    dsv4_kctx_set_simd(k, best);

    /* a decode step's routed experts: many mid-size FP4 matrices, each called once */
    {
        enum { NE = 16 };
        dsv4_mat e[NE];
        for (int i = 0; i < NE; i++) e[i] = make_mat(DSV4_WF_FP4, 2048, 4096);
        float *x = malloc(sizeof(float) * 4096), *y = malloc(sizeof(float) * 2048);
        for (int i = 0; i < 4096; i++) x[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 1e-3f;
        const double bytes = (double)NE * dsv4_mat_bytes(&e[0]);
        double best_t = 1e9, best_s = 1e9, ratios[64];
        int n_ratio = 0;
        for (int r = 0; r < reps + 1; r++) {
            const double ts = stream_once(k, &sj);
            double t0 = now_s();
            for (int i = 0; i < NE; i++) dsv4_linear(k, &e[i], x, 1, y);
            double dt = now_s() - t0;
            if (r == 0) continue;
            if (dt < best_t) best_t = dt;
            if (ts < best_s) best_s = ts;
            if (n_ratio < 64) ratios[n_ratio++] = (bytes / dt) / ((double)sbytes / ts);
        }
        qsort(ratios, (size_t)n_ratio, sizeof(double), cmp_double);
        const double gbps = bytes / best_t / 1e9, sbw = (double)sbytes / best_s / 1e9;
        printf("{\"bench\":\"gemv_experts\",\"simd\":\"%s\",\"fmt\":\"fp4\",\"rows\":2048,\"cols\":4096,\"mats\":%d,"
               "\"threads\":%d,\"us_per_call\":%.1f,\"gbps\":%.2f,\"stream_gbps\":%.2f,\"of_stream\":%.3f,"
               "\"of_stream_median\":%.3f}\n",
               dsv4_simd_name(best), NE, threads, best_t / NE * 1e6, gbps, sbw, gbps / sbw, ratios[n_ratio / 2]);
        for (int i = 0; i < NE; i++) free_mat(&e[i]);
        free(x);
        free(y);
    }

    /* GEMM: 512 rows (a prefill chunk) x 4096 x 4096 */
    {
        const int n_rows = quick ? 128 : 512;
        const int64_t rows = 4096, cols = 4096;
        float *x = malloc(sizeof(float) * n_rows * cols), *y = malloc(sizeof(float) * n_rows * rows);
        for (int64_t i = 0; i < n_rows * cols; i++) x[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 1e-3f;
        for (int level = best; level >= 0; level--) {
            if (level != best && !scalar) break;
            dsv4_kctx_set_simd(k, level);
            for (int fi = 0; fi < 5; fi++) {
                const dsv4_wfmt f = fmts[fi];
                dsv4_mat m = make_mat(f, rows, cols);
                /* rounds of (FMA probe pass, GEMM), like the GEMV rounds */
                const double flop = 2.0 * n_rows * rows * cols, pflop = (double)threads * fj.iters * 12 * 8 * 2;
                double best_t = 1e9, best_p = 1e9, ratios[64];
                int n_ratio = 0;
                const int nr = level == DSV4_SIMD_SCALAR ? 1 : (reps < 5 ? reps : 5);
                for (int r = 0; r < nr; r++) {
                    const double tp = use_avx2 ? fma_once(k, &fj, threads) : 0.0;
                    double t0 = now_s();
                    dsv4_linear(k, &m, x, n_rows, y);
                    double dt = now_s() - t0;
                    if (dt < best_t) best_t = dt;
                    if (tp > 0 && tp < best_p) best_p = tp;
                    if (tp > 0 && n_ratio < 64) ratios[n_ratio++] = (flop / dt) / (pflop / tp);
                }
                qsort(ratios, (size_t)n_ratio, sizeof(double), cmp_double);
                const double gflops = flop / best_t / 1e9, pk = best_p < 1e9 ? pflop / best_p / 1e9 : 0.0;
                printf("{\"bench\":\"gemm\",\"simd\":\"%s\",\"fmt\":\"%s\",\"n_rows\":%d,\"rows\":%lld,\"cols\":%lld,"
                       "\"threads\":%d,\"ms\":%.1f,\"gflops\":%.1f,\"fma_gflops\":%.1f,\"of_fma_peak\":%.3f,"
                       "\"of_fma_peak_median\":%.3f}\n",
                       dsv4_simd_name(level), fmt_name(f), n_rows, (long long)rows, (long long)cols, threads,
                       best_t * 1e3, gflops, pk, pk > 0 ? gflops / pk : 0.0, n_ratio ? ratios[n_ratio / 2] : 0.0);
                fflush(stdout);
                free_mat(&m);
            }
        }
        free(x);
        free(y);
    }
    free(sbuf);
    dsv4_kctx_free(k);
    return 0;
}
