/* exp_f64.h — double exp for the compressor's softmax pools (attn/compressor.c).
 *
 * The bits are libm's exp's (glibc's on the machines we run). The AVX-512 level computes
 * glibc's exp algorithm (2.28 and later, the FMA variant that glibc itself picks on any
 * AVX-512 CPU) eight lanes at a time in the same double operations, so each lane rounds as
 * the scalar code does; lanes outside its main path call libm's exp itself. A libm that
 * computes exp otherwise fails dsv4_exp_x512_agrees, and the callers keep libm's exp. */
#ifndef DSV4_KERNELS_EXP_F64_H
#define DSV4_KERNELS_EXP_F64_H

#include <stdint.h>

/* glibc exp's table (N = 128): entry 2i the tail of 2^(i/N), entry 2i + 1 the bits of
 * 2^(i/N) less i << 45 */
extern const uint64_t dsv4_exp_tab[256];

/* y[i] = exp(x[i]) for n doubles (y may alias x), or NULL when the build or the CPU lacks
 * AVX-512 F/DQ. */
typedef void (*dsv4_exp_rows_fn)(const double *x, long n, double *y);
dsv4_exp_rows_fn dsv4_exp_x512(void);

/* The softmax pool of columns [c0, c1) over n candidate rows, as attn/compressor.c's
 * pool_core computes each column: m = the largest score (by bj > m, from -inf), then in j
 * order den += e and num += e * aj with e = exp((double)bj - (double)m), out[c] =
 * (float)(num / den). ra[j], rb[j]: the candidates' values and scores (float rows).
 * Columns go eight at a time; returns the first column not done (c1 less the last
 * c1 - c0 mod 8), which the caller pools itself. */
typedef int (*dsv4_pool_cols_fn)(const float *const *ra, const float *const *rb, int n, int c0, int c1,
                                 float *out);
dsv4_pool_cols_fn dsv4_pool_cols_x512(void);

/* 1 when the AVX-512 exp equals this process's libm exp on a fixed set of inputs (ones
 * where glibc's FMA and non-FMA builds differ, and a spread over the main path's range
 * and its edges); 0 otherwise or without AVX-512. ~5K exp calls: call it once (kctx does,
 * at create). */
int dsv4_exp_x512_agrees(void);

#endif
