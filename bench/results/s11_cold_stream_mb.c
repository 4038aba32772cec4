/* mb.c — why a cold GEMV reads at ~0.6 of the stream probe. Variants alternated in rounds.
 * usage: mb THREADS MB ROUNDS [huge] */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    int kind;     /* 0 probe256, 1 probe512, 2 gemv bf16 rows, 3 load-only rows */
    int R;        /* rows interleaved */
    int rb;       /* bytes per row */
    int dist;     /* prefetch distance (0 none) */
    int hint;     /* 0 T0 1 T1 2 T2 3 NTA */
    int split;    /* 0 contiguous halves, else interleave chunks of split bytes */
    int burst;    /* pf_start burst */
    int pfrow;    /* prefetch each row at the same offset dist bytes (whole blocks) ahead */
    const char *name;
} variant;

static float xv[8192] __attribute__((aligned(64)));
static volatile float sinkf;
static volatile uint64_t sinku;

#define PF(a, h)                                                         \
    do {                                                                 \
        switch (h) {                                                     \
        case 0: _mm_prefetch((const char *)(a), _MM_HINT_T0); break;     \
        case 1: _mm_prefetch((const char *)(a), _MM_HINT_T1); break;     \
        case 2: _mm_prefetch((const char *)(a), _MM_HINT_T2); break;     \
        default: _mm_prefetch((const char *)(a), _MM_HINT_NTA); break;   \
        }                                                                \
    } while (0)

static uint64_t probe256(const char *p, size_t n) {
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
static uint64_t probe512(const char *p, size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 256) {
        a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void *)(p + i + 64)));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512((const void *)(p + i + 128)));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    return _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}

static inline __m512 bf16(const char *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* like gemv1_dense BF16 with R rows of rb bytes, [p, p+n) */
static float gemv_rows(const char *p, size_t n, const variant *v) {
    const int R = v->R, rb = v->rb, cols = rb / 2;
    const int dist = v->dist, h = v->hint;
    if (dist && v->burst)
        for (int k = 0; k < dist && (size_t)k < n; k += 64) PF(p + k, h);
    __m512 acc = _mm512_setzero_ps();
    for (size_t b = 0; b + (size_t)R * rb <= n; b += (size_t)R * rb) {
        const char *q = p + b;
        __m512 a[8];
        for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
        for (int i = 0; i < cols; i += 16) {
            if (dist) {
                const char *f = q + dist + (size_t)R * i * 2;
                for (int k = 0; k < R * 32; k += 64) PF(f + k, h);
            }
            const __m512 x = _mm512_load_ps(xv + i);
            for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(x, bf16(q + (size_t)r * rb + i * 2), a[r]);
        }
        for (int r = 0; r < R; r++) acc = _mm512_add_ps(acc, a[r]);
    }
    return _mm512_reduce_add_ps(acc);
}
#define GR(RR)                                                                                                \
    static float gemv_rows##RR(const char *p, size_t n, const variant *v) {                                  \
        const int R = RR, rb = v->rb, cols = rb / 2;                                                          \
        const int dist = v->dist, h = v->hint;                                                                \
        if (dist && v->burst)                                                                                 \
            for (int k = 0; k < dist && (size_t)k < n; k += 64) PF(p + k, h);                                 \
        __m512 acc = _mm512_setzero_ps();                                                                     \
        for (size_t b = 0; b + (size_t)R * rb <= n; b += (size_t)R * rb) {                                   \
            const char *q = p + b;                                                                            \
            __m512 a[RR];                                                                                     \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();                  \
            for (int i = 0; i < cols; i += 16) {                                                              \
                if (dist && v->pfrow) {                                                                       \
                    if (!(i & 31)) _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                        \
                        PF(q + dist + (size_t)r * rb + i * 2, h);                                             \
                } else if (dist) {                                                                            \
                    const char *f = q + dist + (size_t)R * i * 2;                                             \
                    _Pragma("GCC unroll 8") for (int k = 0; k < R * 32; k += 64) PF(f + k, h);               \
                }                                                                                             \
                const __m512 x = _mm512_load_ps(xv + i);                                                      \
                _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) a[r] =                                   \
                    _mm512_fmadd_ps(x, bf16(q + (size_t)r * rb + i * 2), a[r]);                              \
            }                                                                                                 \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) acc = _mm512_add_ps(acc, a[r]);              \
        }                                                                                                     \
        return _mm512_reduce_add_ps(acc);                                                                     \
    }
GR(1)
GR(2)
GR(4)
GR(8)


/* R far-apart sequential streams: segment s = [p + s*n/R, ...), each read front to back,
 * one accumulator chain per stream (rows of rb bytes), the R streams in lockstep */
#define FAR(RR)                                                                                   \
    static float far##RR(const char *p, size_t n, const variant *v) {                            \
        const size_t seg = n / RR;                                                                \
        const int rb = v->rb, cols = rb / 2;                                                      \
        __m512 acc = _mm512_setzero_ps();                                                         \
        const int D = v->dist, h = v->hint;                                                       \
        if (D && v->burst) for (int r = 0; r < RR; r++)                                           \
            for (int k = 0; k < D; k += 64) PF(p + r * seg + k, h);                               \
        for (size_t b = 0; b + rb <= seg; b += rb) {                                              \
            __m512 a[RR];                                                                         \
            _Pragma("GCC unroll 8") for (int r = 0; r < RR; r++) a[r] = _mm512_setzero_ps();     \
            for (int i = 0; i < cols; i += 16) {                                                  \
                const __m512 x = _mm512_load_ps(xv + i);                                          \
                if (D && !(i & 31)) _Pragma("GCC unroll 8") for (int r = 0; r < RR; r++)          \
                    PF(p + r * seg + b + i * 2 + D, h);                                           \
                _Pragma("GCC unroll 8") for (int r = 0; r < RR; r++) a[r] =                      \
                    _mm512_fmadd_ps(x, bf16(p + r * seg + b + i * 2), a[r]);                     \
            }                                                                                     \
            _Pragma("GCC unroll 8") for (int r = 0; r < RR; r++) acc = _mm512_add_ps(acc, a[r]); \
        }                                                                                         \
        return _mm512_reduce_add_ps(acc);                                                         \
    }
FAR(2)
FAR(4)
/* R4 lockstep, a whole line (32 cols) of each row per step */
static float line4(const char *p, size_t n, const variant *v) {
    const int R = 4, rb = v->rb, cols = rb / 2;
    __m512 acc = _mm512_setzero_ps();
    for (size_t b = 0; b + (size_t)R * rb <= n; b += (size_t)R * rb) {
        const char *q = p + b;
        __m512 a[4];
        for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
        for (int i = 0; i < cols; i += 32) {
            const __m512 x0 = _mm512_load_ps(xv + i), x1 = _mm512_load_ps(xv + i + 16);
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                a[r] = _mm512_fmadd_ps(x0, bf16(q + (size_t)r * rb + i * 2), a[r]);
                a[r] = _mm512_fmadd_ps(x1, bf16(q + (size_t)r * rb + i * 2 + 32), a[r]);
            }
        }
        for (int r = 0; r < R; r++) acc = _mm512_add_ps(acc, a[r]);
    }
    return _mm512_reduce_add_ps(acc);
}

/* R interleaved streams, 64-byte loads, no compute */
static uint64_t load_rows(const char *p, size_t n, const variant *v) {
    const int R = v->R, rb = v->rb;
    __m512i a = _mm512_setzero_si512(), b2 = a;
    for (size_t b = 0; b + (size_t)R * rb <= n; b += (size_t)R * rb)
        for (int i = 0; i < rb; i += 128)
            for (int r = 0; r < R; r++) {
                a = _mm512_add_epi64(a, _mm512_load_si512((const void *)(p + b + (size_t)r * rb + i)));
                b2 = _mm512_add_epi64(b2, _mm512_load_si512((const void *)(p + b + (size_t)r * rb + i + 64)));
            }
    return _mm512_reduce_add_epi64(_mm512_add_epi64(a, b2));
}

static void run_range(const char *p, size_t n, const variant *v) {
    switch (v->kind) {
    case 0: sinku += probe256(p, n); break;
    case 1: sinku += probe512(p, n); break;
    case 2:
        if (v->R == 4) sinkf += gemv_rows4(p, n, v);
        else if (v->R == 2) sinkf += gemv_rows2(p, n, v);
        else if (v->R == 8) sinkf += gemv_rows8(p, n, v);
        else if (v->R == 1) sinkf += gemv_rows1(p, n, v);
        else sinkf += gemv_rows(p, n, v);
        break;
    case 4: sinkf += v->R == 2 ? far2(p, n, v) : far4(p, n, v); break;
    case 6: /* tasks of split bytes, in order, each far4 (R=4) or adjacent R4 (R=0) */
        for (size_t o = 0; o < n; o += (size_t)v->split) {
            if (v->R == 4) sinkf += far4(p + o, (size_t)v->split, v);
            else if (v->R == 2) sinkf += far2(p + o, (size_t)v->split, v);
            else sinkf += gemv_rows4(p + o, (size_t)v->split, v);
        }
        break;
    case 5: sinkf += line4(p, n, v); break;
    default: sinku += load_rows(p, n, v); break;
    }
}

/* ---- 2-thread harness ---- */
static int T;
static const char *g_p;
static size_t g_n;
static const variant *g_v;
static atomic_int go, done;
static double t_thr[2];

static void work(int tid) {
    const variant *v = g_v;
    if (!v->split || v->kind == 6) {
        size_t per = g_n / T;
        run_range(g_p + tid * per, per, v);
    } else {
        for (size_t o = (size_t)tid * v->split; o < g_n; o += (size_t)T * v->split) run_range(g_p + o, v->split, v);
    }
}

static void *worker(void *arg) {
    int tid = (int)(intptr_t)arg;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(tid, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    int seen = 0;
    for (;;) {
        int g;
        while ((g = atomic_load(&go)) == seen) _mm_pause();
        if (g < 0) return 0;
        seen = g;
        double t0 = now_s();
        work(tid);
        t_thr[tid] = now_s() - t0;
        atomic_fetch_add(&done, 1);
    }
}

static double run(const char *p, size_t n, const variant *v) {
    g_p = p, g_n = n, g_v = v;
    atomic_store(&done, 0);
    double t0 = now_s();
    atomic_fetch_add(&go, 1);
    double tt = now_s();
    work(0);
    t_thr[0] = now_s() - tt;
    while (atomic_load(&done) < T - 1) _mm_pause();
    return now_s() - t0;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    T = argc > 1 ? atoi(argv[1]) : 2;
    size_t mb = argc > 2 ? atoi(argv[2]) : 16;
    int rounds = argc > 3 ? atoi(argv[3]) : 7;
    int huge = argc > 4 ? atoi(argv[4]) : 0;
    const char *set = argc > 5 ? argv[5] : "all";
    size_t n = mb << 20, arena = (size_t)512 << 20;
    if (arena < 4 * n) arena = 4 * n;
    char *a = mmap(0, arena + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    a = (char *)(((uintptr_t)a + (2 << 20) - 1) & ~(uintptr_t)((2 << 20) - 1));
    madvise(a, arena, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    for (size_t i = 0; i < arena; i += 8) *(uint64_t *)(a + i) = i * 0x9e3779b97f4a7c15ull >> 40 << 16 | 0x3f80;
    for (int i = 0; i < 8192; i++) xv[i] = 1.0f / (i + 1);
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(0, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    pthread_t th[2];
    for (int t = 1; t < T; t++) pthread_create(&th[t], 0, worker, (void *)(intptr_t)t);

    variant all[] = {
        {0, 0, 0, 0, 0, 0, 0, 0, "probe256"},
        {6, 0, 2048, 8192, 0, 16 << 10, 1, 0, "adj4 pf8K task16K"},
        {6, 0, 2048, 8192, 0, 128 << 10, 1, 0, "adj4 pf8K task128K"},
        {6, 4, 2048, 0, 0, 16 << 10, 0, 0, "far4 task16K"},
        {6, 4, 2048, 0, 0, 128 << 10, 0, 0, "far4 task128K"},
        {6, 4, 2048, 1024, 0, 16 << 10, 1, 0, "far4 pf1K task16K"},
        {6, 4, 2048, 2048, 0, 16 << 10, 1, 0, "far4 pf2K task16K"},
        {6, 4, 2048, 1024, 0, 128 << 10, 1, 0, "far4 pf1K task128K"},
        {6, 4, 2048, 2048, 0, 128 << 10, 1, 0, "far4 pf2K task128K"},
        {6, 4, 2048, 4096, 0, 128 << 10, 1, 0, "far4 pf4K task128K"},
        {6, 4, 2048, 2048, 1, 128 << 10, 1, 0, "far4 pf2K T1 task128K"},
        {6, 4, 2048, 0, 0, 512 << 10, 0, 0, "far4 task512K"},
        {6, 4, 2048, 2048, 0, 512 << 10, 1, 0, "far4 pf2K task512K"},
    };
    int nv = sizeof all / sizeof all[0];
    double *res = calloc((size_t)nv * rounds, sizeof(double));
    size_t off = 0;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < nv; i++) {
            if (strcmp(set, "all") && !strstr(all[i].name, set)) continue;
            if (off + n > arena) off = 0;
            double dt = run(a + off, n, &all[i]);
            off += n;
            res[i * rounds + r] = n / dt / 1e9;
        }
    printf("T=%d MB=%zu huge=%d rounds=%d  GB/s median [min max]\n", T, mb, huge, rounds);
    for (int i = 0; i < nv; i++) {
        if (strcmp(set, "all") && !strstr(all[i].name, set)) continue;
        double *x = res + i * rounds;
        qsort(x, rounds, sizeof *x, cmpd);
        printf("%-26s %6.1f  [%5.1f %5.1f]\n", all[i].name, x[rounds / 2], x[0], x[rounds - 1]);
    }
    atomic_store(&go, -1);
    return 0;
}
