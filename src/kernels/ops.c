/* ops.c — small per-vector operators (spec/model.md §5.2 and the SwiGLU activation).
 *
 * Reference code: plain loops, sums wider than the data where the length is large enough
 * for FP32 rounding to show (RMS over thousands of values). */
#include "kernels/ops.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu.h"
#include "util/hot.h"

/* r = 1 / sqrt(ss / n + eps), rounded to float: the one scale of a row from its sum of
 * squares, shared by every form below so that they keep dsv4_rmsnorm's bits. */
static float rms_factor(double ss, int n, float eps) {
    return (float)(1.0 / sqrt(ss / (n > 0 ? n : 1) + (double)eps));
}

/* y = x * r * w (w NULL: x * r); x is read before y is written at each index, so y may
 * alias x. */
static void rms_apply(const float *x, const float *w, int n, float r, float *y) {
    if (w) {
        for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
    } else {
        for (int i = 0; i < n; i++) y[i] = x[i] * r;
    }
}

DSV4_HOT_AT(dsv4_rmsnorm, 0xdd0)
void dsv4_rmsnorm(const float *x, const float *w, int n, float eps, float *y) {
    /* The mean of squares is summed in double: for D = 4096 an FP32 running sum loses
     * about 12 bits, and everything downstream is scaled by this one number. */
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    rms_apply(x, w, n, rms_factor(ss, n, eps), y);
}

static int rmsnorm_rows_x512(float *x, const float *w, int n, float eps, int rows);

/* x (rows, n) scaled in place by each row's factor from its sum of squares ss (rows). */
static void scale_rows(float *x, const float *w, int rows, int n, float eps, const double *ss) {
    for (int r = 0; r < rows; r++) {
        float *xr = x + (int64_t)r * n;
        rms_apply(xr, w, n, rms_factor(ss[r], n, eps), xr);
    }
}

DSV4_HOT_AT(dsv4_rmsnorm_rows, 0x80)
void dsv4_rmsnorm_rows(int simd, float *x, const float *w, int n, float eps, int rows) {
    /* the rows it did: 16 at a time, then 8 */
    int r0 = simd >= DSV4_SIMD_AVX512 ? rmsnorm_rows_x512(x, w, n, eps, rows) : 0;
    for (; r0 < rows; r0 += 8) { /* up to eight rows' sums side by side, each in i order */
        const int R = rows - r0 < 8 ? rows - r0 : 8;
        const float *xr = x + (int64_t)r0 * n;
        double ss[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int i = 0; i < n; i++)
            for (int r = 0; r < R; r++) ss[r] += (double)xr[(int64_t)r * n + i] * (double)xr[(int64_t)r * n + i];
        scale_rows(x + (int64_t)r0 * n, w, R, n, eps, ss);
    }
}

float dsv4_silu(float x) {
    /* For x << 0, expf(-x) overflows to +inf and the quotient is -0: the correct limit. */
    return x / (1.0f + expf(-x));
}

float dsv4_dot(const float *a, const float *b, int n) {
    /* Eight independent FP32 partial sums in a fixed lane order: the compiler can keep
     * them in one vector register, the error grows like n/8 instead of n, and the result
     * does not depend on alignment or on how the caller splits work. */
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* Lane l of 16 sums the products i ≡ l (mod 16) of the whole sixteens in ascending order;
 * the tail goes into lanes 0.. in order; then a fixed tree. */
static double reduce16(const double *s) {
    double q[4];
    for (int l = 0; l < 4; l++) q[l] = (s[l] + s[l + 4]) + (s[l + 8] + s[l + 12]);
    return (q[0] + q[1]) + (q[2] + q[3]);
}

double dsv4_dot_f64_finish(double *s, const float *a, const float *b, int64_t i, int64_t n) {
    for (int l = 0; i < n; i++, l++) s[l] += (double)a[i] * b[i];
    return reduce16(s);
}

DSV4_HOT_AT(dsv4_dot_f64_portable, 0xb30)
double dsv4_dot_f64_portable(const float *a, const float *b, int64_t n) {
    double s[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) s[l] += (double)a[i + l] * b[i + l];
    return dsv4_dot_f64_finish(s, a, b, i, n);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Software prefetch distance of the dots' first operand, in bytes (dot_f64_avx2 and
 * dot_f64_avx512). Their caller, hc, reads fn (the first operand) cold at decode: the step
 * streams all the weights between two reads of one fn, and the dots of a task run down
 * consecutive fn rows, one stream. In process on Zen 5 (hc_pre's 25 dots of one row over hc*D
 * = 4096, 4 tasks on 2 threads, cold fn, 15 alternated rounds), time against no prefetch,
 * median: 2 KB 0.93, 4 KB 0.89, 8 KB 0.87, 16 KB 0.90, 32 KB 0.94. The same at avx2 on Zen 3
 * (dot_f64_avx2; the 25 dots split 13 / 12 over 2 threads, 200 cold fn of 384 KB, 15 rounds):
 * median 39.6 us a call without, 31.7 with 8 KB (0.80x), 31.0 with 4 KB; one thread 0.92x
 * (BENCHMARKS.md, session 51 b1). */
#define DOT_F64_PF 8192

/* Lanes 0-3, 4-7, 8-11, 12-15 in four registers: the same chains as the portable loop,
 * each product exact, so FMA rounds exactly where the portable add does. */
__attribute__((target("avx2,fma"))) static double dot_f64_avx2(const float *a, const float *b, int64_t n) {
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        /* one 64-byte line a step; the address formed as an integer: it may lie past a's end */
        _mm_prefetch((const char *)((uintptr_t)(a + i) + DOT_F64_PF), _MM_HINT_T0);
        for (int r = 0; r < 4; r++)
            acc[r] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + i + 4 * r)),
                                     _mm256_cvtps_pd(_mm_loadu_ps(b + i + 4 * r)), acc[r]);
    }
    double s[16];
    for (int r = 0; r < 4; r++) _mm256_storeu_pd(s + 4 * r, acc[r]);
    return dsv4_dot_f64_finish(s, a, b, i, n);
}

/* Lanes 0-7 and 8-15 in two registers: the portable loop's chains again. */
DSV4_HOT_AT(dot_f64_avx512, 0xdb0)
__attribute__((target("avx512f"))) static double dot_f64_avx512(const float *a, const float *b, int64_t n) {
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(a + i) + DOT_F64_PF, _MM_HINT_T0);
        lo = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_loadu_ps(a + i)), _mm512_cvtps_pd(_mm256_loadu_ps(b + i)), lo);
        hi = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_loadu_ps(a + i + 8)),
                             _mm512_cvtps_pd(_mm256_loadu_ps(b + i + 8)), hi);
    }
    double s[16];
    _mm512_storeu_pd(s, lo);
    _mm512_storeu_pd(s + 8, hi);
    return dsv4_dot_f64_finish(s, a, b, i, n);
}

/* Rows r[0..8) of 8 floats transposed: r[k] = column k (the 8 rows' k-th values). */
__attribute__((target("avx512f"))) static inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 2; k++) {
        u[4 * k] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
        u[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
        u[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        u[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
        r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
    }
}

/* dsv4_rmsnorm_rows for the first rows / 16 * 16 rows: sixteen rows' sums side by side, a
 * row a double lane (two chains of eight), fed 8 columns at a time by transposing each
 * eight rows' 8 x 8 block, so each lane adds its row's squares in the portable order.
 * The scalar loop it replaces paid a load, a widening, a multiply and an add per value
 * (~2.5 us for q's 16 x 512 of a row at Flash; a 512-token prefill has 2048 such rows). */
DSV4_HOT_AT(rows16_x512, 0x160)
__attribute__((target("avx512f"))) static int rows16_x512(float *x, const float *w, int rows, int n, float eps) {
    int r0 = 0;
    for (; r0 + 16 <= rows; r0 += 16) {
        const float *p = x + (int64_t)r0 * n;
        __m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            __m256 lo[8], hi[8];
            for (int l = 0; l < 8; l++) {
                lo[l] = _mm256_loadu_ps(p + (int64_t)l * n + i);
                hi[l] = _mm256_loadu_ps(p + (int64_t)(l + 8) * n + i);
            }
            transpose8(lo);
            transpose8(hi);
            for (int k = 0; k < 8; k++) { /* column i + k; the products are exact in double */
                const __m512d u = _mm512_cvtps_pd(lo[k]), v = _mm512_cvtps_pd(hi[k]);
                a = _mm512_add_pd(a, _mm512_mul_pd(u, u));
                b = _mm512_add_pd(b, _mm512_mul_pd(v, v));
            }
        }
        double ss[16];
        _mm512_storeu_pd(ss, a);
        _mm512_storeu_pd(ss + 8, b);
        for (; i < n; i++)
            for (int l = 0; l < 16; l++) {
                const double v = p[(int64_t)l * n + i];
                ss[l] += v * v;
            }
        scale_rows(x + (int64_t)r0 * n, w, 16, n, eps, ss);
    }
    return r0;
}

/* The same for 8 rows (rows8 below 16: hc_pre's blocks of 8 at a batched decode step, a
 * thread's 8 rows of D): one chain of eight, a transpose a column step. The scalar
 * 8-row loop took ~9 us for 8 x 1024 there (145 us of thread time a batch-16 step). */
DSV4_HOT_AT(rows8_x512, 0xa40)
__attribute__((target("avx512f"))) static void rows8_x512(float *x, const float *w, int n, float eps) {
    __m512d a = _mm512_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 r[8];
        for (int l = 0; l < 8; l++) r[l] = _mm256_loadu_ps(x + (int64_t)l * n + i);
        transpose8(r);
        for (int k = 0; k < 8; k++) { /* column i + k; the products are exact in double */
            const __m512d u = _mm512_cvtps_pd(r[k]);
            a = _mm512_add_pd(a, _mm512_mul_pd(u, u));
        }
    }
    double ss[8];
    _mm512_storeu_pd(ss, a);
    for (; i < n; i++)
        for (int l = 0; l < 8; l++) {
            const double v = x[(int64_t)l * n + i];
            ss[l] += v * v;
        }
    scale_rows(x, w, 8, n, eps, ss);
}

static int rmsnorm_rows_x512(float *x, const float *w, int n, float eps, int rows) {
    if (!__builtin_cpu_supports("avx512f")) return 0;
    int r0 = rows16_x512(x, w, rows, n, eps);
    if (rows - r0 >= 8) {
        rows8_x512(x + (int64_t)r0 * n, w, n, eps);
        r0 += 8;
    }
    return r0;
}

static int have_avx2_fma(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

dsv4_dot_f64_fn dsv4_dot_f64_avx2(void) { return have_avx2_fma() ? dot_f64_avx2 : NULL; }
dsv4_dot_f64_fn dsv4_dot_f64_avx512(void) { return __builtin_cpu_supports("avx512f") ? dot_f64_avx512 : NULL; }
#else
static int rmsnorm_rows_x512(float *x, const float *w, int n, float eps, int rows) {
    (void)x, (void)w, (void)n, (void)eps, (void)rows;
    return 0;
}
dsv4_dot_f64_fn dsv4_dot_f64_avx2(void) { return NULL; }
dsv4_dot_f64_fn dsv4_dot_f64_avx512(void) { return NULL; }
#endif

dsv4_dot_f64_fn dsv4_dot_f64_at(int simd) {
    dsv4_dot_f64_fn f = NULL;
    if (simd >= DSV4_SIMD_AVX512) f = dsv4_dot_f64_avx512();
    if (!f && simd >= DSV4_SIMD_AVX2) f = dsv4_dot_f64_avx2();
    return f ? f : dsv4_dot_f64_portable;
}

double dsv4_dot_f64(const float *a, const float *b, int64_t n) {
    /* both levels give the same bits; the choice is only speed */
    dsv4_dot_f64_fn f = dsv4_dot_f64_avx2();
    return f ? f(a, b, n) : dsv4_dot_f64_portable(a, b, n);
}
