/* ops.h — small per-vector operators (reference scalar code, FP32 with wider sums where
 * it matters). */
#ifndef DSV4_KERNELS_OPS_H
#define DSV4_KERNELS_OPS_H

/* y = x / sqrt(mean(x^2) + eps) * w; w == NULL is the unweighted form. y may alias x. */
void dsv4_rmsnorm(const float *x, const float *w, int n, float eps, float *y);
/* dsv4_rmsnorm(x + r*n, w, n, eps, x + r*n) for r in [0, rows), in place, the same bits:
 * up to eight rows' sums run side by side (each its own chain in order), sixteen with
 * AVX-512, paying the adds' latency once for the group instead of per row (a row's q
 * heads, w NULL; a prefill's sub-block inputs in hc_pre's blocks of rows). simd is the
 * caller's kernel level (a dsv4_simd): the AVX-512 loop runs only at DSV4_SIMD_AVX512 or
 * above, so a forced level (DSV4_SIMD) holds here too; every level gives the same bits. */
void dsv4_rmsnorm_rows(int simd, float *x, const float *w, int n, float eps, int rows);
static inline float dsv4_sigmoid(float x);
float dsv4_silu(float x);
float dsv4_dot(const float *a, const float *b, int n);

/* Σ a[i]·b[i] in double: sixteen partial sums, s_l over i ≡ l (mod 16) of the whole
 * sixteens, the tail into s_0, s_1, ..., then a fixed tree. A float × float product is
 * exact in double, so fused and separate multiply-add round alike: the AVX2 level (four
 * registers of four double lanes, chosen at run time when the CPU has AVX2 + FMA) equals
 * the portable loop bit for bit, and dsv4_dot_f64 is one function whichever runs. */
#include <stdint.h>
double dsv4_dot_f64(const float *a, const float *b, int64_t n);
double dsv4_dot_f64_portable(const float *a, const float *b, int64_t n);
/* The AVX2 / AVX-512 levels (the same sixteen lanes in four / two registers), or NULL when
 * the build or the CPU lacks them (for tests). */
typedef double (*dsv4_dot_f64_fn)(const float *a, const float *b, int64_t n);
dsv4_dot_f64_fn dsv4_dot_f64_avx2(void);
dsv4_dot_f64_fn dsv4_dot_f64_avx512(void);
/* The widest of them at or below a kernel level (a dsv4_simd, kernels/cpu.h); a level the
 * CPU does not run is capped by what it does. Every choice gives the same bits. */
dsv4_dot_f64_fn dsv4_dot_f64_at(int simd);
/* The end every level shares: s (16) holds the lanes' sums of the whole sixteens before i;
 * adds the tail [i, n) and returns the tree (for kernels that run many dots at once). */
double dsv4_dot_f64_finish(double *s, const float *a, const float *b, int64_t i, int64_t n);

#include <math.h>
static inline float dsv4_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

#endif
