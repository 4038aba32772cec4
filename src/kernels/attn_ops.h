/* attn_ops.h — the vector kernels of sparse attention and the lightning indexer: many dot
 * products of a few query vectors against key rows, and the probability-weighted sum of
 * rows, in a portable level, an AVX2 level and an AVX-512 level chosen at run time. Rows
 * are read in their storage format (kernels/kv_rows.h): F32, or BF16 widened to FP32 in
 * registers (exact: a BF16 value is the upper half of an FP32 one), so a BF16 row gives
 * the bits its unpacked F32 copy would, and the kernels read half the bytes.
 *
 * Arithmetic contract (every level produces the SAME bits, and the same bits as dsv4_dot):
 *   dot(a, b, n): lane l (0..7) sums the products a[i]*b[i] of i = 8c + l in ascending
 *     chunk c, each product rounded to FP32 and then added (no fused multiply-add), the
 *     last chunk zero-padded; the lanes are then added as
 *     ((l0+l4) + (l1+l5)) + ((l2+l6) + (l3+l7)).
 *   axpy: y[c] = y[c] + (a * x[c]), the product rounded, then the sum.
 * Nothing depends on alignment, on how many dots one call computes, or on which thread
 * runs it. Zen 3 issues the separate multiply and add on different pipes, so giving up
 * FMA costs little in throughput, and it lets the portable code reproduce every bit.
 */
#ifndef DSV4_KERNELS_ATTN_OPS_H
#define DSV4_KERNELS_ATTN_OPS_H

#include <stddef.h>

#include "kernels/swiglu.h"

typedef struct dsv4_attn_ops {
    /* out[h * os] = dot(q + h * qs, k, n) for h in [0, nq) */
    void (*dotn)(const float *q, size_t qs, int nq, const float *k, int n, float *out, size_t os);
    /* y[h * ys + c] += a[h * as] * x[c] for h in [0, ny), c in [0, n) */
    void (*axpyn)(float *y, size_t ys, int ny, const float *a, size_t as, const float *x, int n);
    /* out[h * os + j] = dot(q + h * qs, rows[j], n) for h in [0, nq), j in [0, n_rows), the
     * rows stored in fmt (DSV4_ROW_F32 or DSV4_ROW_BF16; any pointer alignment): the bits
     * of dotn on each row as F32 (the attention's scores) */
    void (*dot_rows)(const float *q, size_t qs, int nq, const void *const *rows, int fmt, int n_rows,
                     int n, float *out, size_t os);
    /* o[h * os + c] = sum over j of p[h * ps + j] * rows[j][c], h in [0, nh), c in [0, n),
     * rows in fmt as for dot_rows: the same bits as o = 0 followed by
     * axpyn(o, os, nh, p + j, ps, rows[j] as F32, n) for j = 0, 1, .. n_rows-1 (the
     * attention's value sum) */
    void (*wsum)(float *o, size_t os, int nh, const float *p, size_t ps, const void *const *rows, int fmt,
                 int n_rows, int n);
    /* The attention's softmax of heads [0, nh) of p (nh, n) in place, sink (nh), up to the
     * normalisation (sparse_attn.c's order, each value as there): m = max(sink, the largest
     * raw score x > m, times scale), Z = expf(sink - m) + the sum over ascending j of e_j =
     * ex((p_j * scale) - m), p_j = e_j * (1 / Z). Only for a finite positive scale and a
     * non-NULL ex (libm's expf in lanes); NULL in levels that leave it to sparse_attn.c. */
    void (*softmax)(float *p, int n, int nh, const float *sink, float scale, dsv4_expf_rows_fn ex);
} dsv4_attn_ops;

/* The kernels of a dsv4_simd level (kernels/cpu.h): the highest compiled-in level not
 * above it (the caller has checked that the CPU runs it, e.g. dsv4_kctx_simd). */
const dsv4_attn_ops *dsv4_attn_ops_for(int simd);

#endif
