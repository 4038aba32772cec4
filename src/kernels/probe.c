/* probe.c — memory bandwidth and FMA peak probes (see probe.h).
 *
 * The AVX2 and AVX-512 bodies are compiled with target attributes, so this file needs no
 * ISA flags and runs them only when the kernel context says the CPU has them (runtime
 * dispatch). The FMA probe runs at the context's level: the widest the CPU has unless
 * DSV4_SIMD or dsv4_kctx_set_simd asked for less, so the peak is that of the kernels. */
#include "kernels/probe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu.h"
#include "util/err.h"

#if defined(DSV4_HAVE_AVX2) && defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PROBE_AVX2 1
#if defined(DSV4_HAVE_AVX512)
#define PROBE_AVX512 1
#endif
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* best and median of n rates (n >= 1); sorts r */
static void summarize(double *r, int n, dsv4_probe_result *out) {
    qsort(r, (size_t)n, sizeof *r, cmp_double);
    out->best = r[n - 1];
    out->median = n % 2 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]);
    out->passes = n;
}

/* ---- streaming read -------------------------------------------------------------------- */

enum { CHUNK = 2 << 20 }; /* bytes per task: large enough for the prefetchers to run ahead */

typedef struct {
    const uint8_t *buf;
    size_t bytes;
    int avx2;
    uint64_t *sink;   /* (n_tasks) one word per task, so the loads cannot be optimized away */
} stream_job;

#ifdef PROBE_AVX2
/* 64-bit adds of four independent 32-byte loads per step: the loads, not the adds, bound
 * it (one add per load, two load ports). */
__attribute__((target("avx2"))) static uint64_t stream_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, a0);
    return t[0] + t[1] + t[2] + t[3];
}
#endif

static uint64_t stream_portable(const uint8_t *p, size_t n) {
    uint64_t a[8] = {0};
    for (size_t i = 0; i < n; i += 64)
        for (int l = 0; l < 8; l++) {
            uint64_t v;
            memcpy(&v, p + i + 8 * l, 8);
            a[l] += v;
        }
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

static void stream_task(void *arg, int t, int tid) {
    (void)tid;
    stream_job *j = arg;
    const size_t off = (size_t)t * CHUNK;
    const size_t n = j->bytes - off < CHUNK ? j->bytes - off : CHUNK; /* multiple of 128 */
#ifdef PROBE_AVX2
    if (j->avx2) { j->sink[t] += stream_avx2(j->buf + off, n); return; }
#endif
    j->sink[t] += stream_portable(j->buf + off, n);
}

/* ---- FMA peak -------------------------------------------------------------------------- */

enum { FMA_TASKS_PER_THREAD = 4 }; /* tasks are handed out dynamically: several per thread
                                    * keep a thread that started late from doubling the time */

typedef struct {
    int64_t iters;    /* per task */
    int level;        /* dsv4_simd of the loop that runs */
    float *sink;      /* (n_tasks) */
} fma_job;

#ifdef PROBE_AVX2
/* 12 chains x 8 lanes; each iteration issues 12 independent FMAs. */
__attribute__((target("avx2,fma"))) static float fma_avx2(int64_t iters) {
    const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a[12];
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps(1.0f + (float)i);
    for (int64_t k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    }
    for (int i = 1; i < 12; i++) a[0] = _mm256_add_ps(a[0], a[i]);
    float t[8];
    _mm256_storeu_ps(t, a[0]);
    return t[0] + t[7];
}
#endif
#ifdef PROBE_AVX512
/* 16 chains x 16 lanes: two 512-bit FMA pipes of latency 4 need 8 in flight; 16 also
 * cover a CPU that splits 512-bit FMAs in two (Zen 4). */
__attribute__((target("avx512f"))) static float fma_avx512(int64_t iters) {
    const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(1.0f + (float)i);
    for (int64_t k = 0; k < iters; k++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    }
    for (int i = 1; i < 16; i++) a[0] = _mm512_add_ps(a[0], a[i]);
    return _mm512_reduce_add_ps(a[0]);
}
#endif
enum { FMA_AVX512_FLOPS = 16 * 16 * 2, FMA_AVX2_FLOPS = 12 * 8 * 2, FMA_PORTABLE_FLOPS = 16 * 2 }; /* per iteration */

/* 16 independent scalar chains: whatever the compiler makes of them is the portable
 * kernels' arithmetic peak. */
static float fma_portable(int64_t iters) {
    float a[16];
    for (int i = 0; i < 16; i++) a[i] = 1.0f + (float)i;
    for (int64_t k = 0; k < iters; k++)
        for (int i = 0; i < 16; i++) a[i] = a[i] * 0.9999999f + 1e-7f;
    float s = 0;
    for (int i = 0; i < 16; i++) s += a[i];
    return s;
}

static void fma_task(void *arg, int t, int tid) {
    (void)tid;
    fma_job *j = arg;
#ifdef PROBE_AVX512
    if (j->level >= DSV4_SIMD_AVX512) { j->sink[t] = fma_avx512(j->iters); return; }
#endif
#ifdef PROBE_AVX2
    if (j->level >= DSV4_SIMD_AVX2) { j->sink[t] = fma_avx2(j->iters); return; }
#endif
    j->sink[t] = fma_portable(j->iters);
}

/* seconds of one parallel pass of j */
static double fma_pass(dsv4_kctx *k, fma_job *j, int n_tasks) {
    const double t0 = now_s();
    dsv4_kctx_parallel(k, n_tasks, fma_task, j);
    return now_s() - t0;
}

/* ---- a prepared probe, run pass by pass ----------------------------------------------- */

struct dsv4_probe {
    dsv4_kctx *k;
    stream_job sj;          /* stream buffer (bytes 0: none) */
    int n_stream_tasks;
    fma_job fj;             /* iterations calibrated to about fma_seconds a pass */
    int n_fma_tasks;
    double fma_flops;       /* per pass */
};

int dsv4_probe_create(dsv4_kctx *k, size_t stream_bytes, double fma_seconds, dsv4_probe **out,
                      dsv4_err *err) {
    *out = NULL;
    dsv4_probe *p = calloc(1, sizeof *p);
    if (!p) return dsv4_fail(err, DSV4_ERR_NOMEM, "probe: out of memory");
    p->k = k;
    const int avx2 = dsv4_kctx_simd(k) >= DSV4_SIMD_AVX2;
    if (stream_bytes) {
        if (stream_bytes < ((size_t)1 << 20)) stream_bytes = (size_t)1 << 20;
        stream_bytes &= ~(size_t)127;
        p->n_stream_tasks = (int)((stream_bytes + CHUNK - 1) / CHUNK);
        uint8_t *buf = aligned_alloc(64, stream_bytes);  /* (bytes) */
        uint64_t *sink = calloc((size_t)p->n_stream_tasks, sizeof *sink);
        p->sj = (stream_job){buf, stream_bytes, avx2, sink};
        if (!buf || !sink) {
            dsv4_probe_free(p);
            return dsv4_fail(err, DSV4_ERR_NOMEM, "bandwidth probe: cannot allocate %zu bytes",
                             stream_bytes);
        }
        /* distinct values, written once: every page is mapped and none is the shared zero page */
        for (size_t i = 0; i < stream_bytes; i += 8) {
            uint64_t v = i * 0x9e3779b97f4a7c15ull;
            memcpy(buf + i, &v, 8);
        }
        dsv4_probe_stream(p); /* untimed: first touch */
    }
    p->n_fma_tasks = dsv4_kctx_threads(k) * FMA_TASKS_PER_THREAD;
    float *fsink = calloc((size_t)p->n_fma_tasks, sizeof *fsink);
    if (!fsink) {
        dsv4_probe_free(p);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "FMA probe: out of memory");
    }
    /* the widest loop compiled here at or below the context's level */
    int level = dsv4_kctx_simd(k);
#ifndef PROBE_AVX512
    if (level > DSV4_SIMD_AVX2) level = DSV4_SIMD_AVX2;
#endif
#ifndef PROBE_AVX2
    level = DSV4_SIMD_SCALAR;
#endif
    p->fj = (fma_job){1 << 16, level, fsink};
    if (fma_seconds <= 0) fma_seconds = 0.1;
    /* calibrate: grow the iteration count until a pass takes a tenth of the target */
    double dt = fma_pass(k, &p->fj, p->n_fma_tasks);
    while (dt < fma_seconds / 10 && p->fj.iters < ((int64_t)1 << 40)) {
        p->fj.iters *= 4;
        dt = fma_pass(k, &p->fj, p->n_fma_tasks);
    }
    const double scale = fma_seconds / (dt > 0 ? dt : 1e-9);
    if (scale > 1) p->fj.iters = (int64_t)((double)p->fj.iters * scale);
    const int flops = level >= DSV4_SIMD_AVX512 ? FMA_AVX512_FLOPS
                      : level >= DSV4_SIMD_AVX2 ? FMA_AVX2_FLOPS
                                                : FMA_PORTABLE_FLOPS;
    p->fma_flops = flops * (double)p->fj.iters *
                   p->n_fma_tasks;
    *out = p;
    return DSV4_OK;
}

double dsv4_probe_stream(dsv4_probe *p) {
    if (!p->sj.buf) return 0.0;
    const double t0 = now_s();
    dsv4_kctx_parallel(p->k, p->n_stream_tasks, stream_task, &p->sj);
    const double dt = now_s() - t0;
    return (double)p->sj.bytes / (dt > 0 ? dt : 1e-9) / 1e9;
}

double dsv4_probe_fma_pass(dsv4_probe *p) {
    const double dt = fma_pass(p->k, &p->fj, p->n_fma_tasks);
    return p->fma_flops / (dt > 0 ? dt : 1e-9) / 1e9;
}

size_t dsv4_probe_stream_bytes(const dsv4_probe *p) { return p->sj.bytes; }
int dsv4_probe_simd(const dsv4_probe *p) { return p->fj.level; }

void dsv4_probe_free(dsv4_probe *p) {
    if (!p) return;
    volatile uint64_t keep = 0; /* the sums are the probes' only observable result */
    for (int t = 0; p->sj.sink && t < p->n_stream_tasks; t++) keep += p->sj.sink[t];
    for (int t = 0; p->fj.sink && t < p->n_fma_tasks; t++) keep += (uint64_t)p->fj.sink[t];
    (void)keep;
    free((void *)p->sj.buf);
    free(p->sj.sink);
    free(p->fj.sink);
    free(p);
}

/* ---- one-shot figures: best and median of several passes ---------------------------- */

int dsv4_probe_bandwidth(dsv4_kctx *k, size_t bytes, int passes, dsv4_probe_result *out,
                         dsv4_err *err) {
    memset(out, 0, sizeof *out);
    if (bytes == 0) bytes = (size_t)512 << 20;
    if (passes <= 0) passes = 8;
    if (passes > 64) passes = 64;
    dsv4_probe *p;
    /* the FMA side is calibrated too, briefly: 1 ms passes */
    int rc = dsv4_probe_create(k, bytes, 1e-3, &p, err);
    if (rc) return rc;
    double rates[64];
    for (int i = 0; i < passes; i++) rates[i] = dsv4_probe_stream(p);
    summarize(rates, passes, out);
    out->threads = dsv4_kctx_threads(k);
    out->simd = p->sj.avx2 ? DSV4_SIMD_AVX2 : DSV4_SIMD_SCALAR;
    dsv4_probe_free(p);
    return DSV4_OK;
}

int dsv4_probe_fma(dsv4_kctx *k, double seconds, int passes, dsv4_probe_result *out,
                   dsv4_err *err) {
    memset(out, 0, sizeof *out);
    if (passes <= 0) passes = 5;
    if (passes > 64) passes = 64;
    dsv4_probe *p;
    int rc = dsv4_probe_create(k, 0, seconds, &p, err);
    if (rc) return rc;
    double rates[64];
    for (int i = 0; i < passes; i++) rates[i] = dsv4_probe_fma_pass(p);
    summarize(rates, passes, out);
    out->threads = dsv4_kctx_threads(k);
    out->simd = dsv4_probe_simd(p);
    dsv4_probe_free(p);
    return DSV4_OK;
}
