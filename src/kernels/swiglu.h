/* swiglu.h — the MoE's clamped SwiGLU times the routing weight, over rows:
 *   h[r][i] = (w[r] · silu(g')) · u',  silu(x) = x / (1 + expf(-x)),
 * g' = min(g, limit), u' = clamp(u, -limit, limit) (no clamp when limit ≤ 0), w == NULL
 * meaning weight 1. g, u, h: (n, I); h may alias g.
 *
 * The bits are libm's expf's (glibc's on the machines we run). The AVX-512 level computes
 * glibc's expf algorithm (2.27 and later, the FMA variant that glibc itself picks on any
 * AVX-512 CPU) eight lanes at a time in the same double operations, so it returns the same
 * float for every input: bench/expf_exhaustive checks all 2^32. A libm that computes
 * expf otherwise fails dsv4_expf_x512_agrees, and the portable loop runs. */
#ifndef DSV4_KERNELS_SWIGLU_H
#define DSV4_KERNELS_SWIGLU_H

#include <stdint.h>

/* glibc expf's 32-entry table of 2^(i/32), as the AVX-512 level (and bench/expf_exhaustive's
 * non-FMA model of glibc) index it */
extern const uint64_t dsv4_expf_tab[32];

typedef void (*dsv4_swiglu_fn)(const float *g, const float *u, const float *w, int n, int I, float limit,
                               float *h);

/* The portable loop: libm's expf per value. */
void dsv4_swiglu_rows(const float *g, const float *u, const float *w, int n, int I, float limit, float *h);

/* The AVX-512 level's SwiGLU and expf (y[i] = expf(x[i]), y may alias x), or NULL when the
 * build or the CPU lacks AVX-512 F/DQ. */
dsv4_swiglu_fn dsv4_swiglu_x512(void);
typedef void (*dsv4_expf_rows_fn)(const float *x, long n, float *y);
dsv4_expf_rows_fn dsv4_expf_x512(void);

/* 1 when the AVX-512 expf equals this process's libm expf on a fixed set of inputs: the
 * ones where glibc's FMA variant, its non-FMA variant and the correctly rounded result
 * differ, and a spread over every binade; 0 otherwise or without AVX-512. ~4K expf calls:
 * call it once (kctx does, at create). */
int dsv4_expf_x512_agrees(void);

/* The SwiGLU for a kernel level (a dsv4_simd) given the agreement above. */
dsv4_swiglu_fn dsv4_swiglu_at(int simd, int expf_agrees);
/* The AVX-512 expf at a kernel level given the agreement above, or NULL: libm's expf then. */
dsv4_expf_rows_fn dsv4_expf_at(int simd, int expf_agrees);

#endif
