/* w8a8.h — the P2 fast path (spec/serving.md §f): INT8 weights per output channel, INT8
 * activations per token (dynamic), int32 sums.
 *
 *   activation row x (n):  amax = max(max|x_i|, 1e-4), s_x = amax / 127,
 *                          q_i = round_half_even(x_i / s_x) clamped to [-127, 127]
 *   weight row o:          s_w[o] = amax_o / 127 over the dequantized row (an all-zero row
 *                          gets s_w = 1, q = 0), same rounding and clamp
 *   output:                y[t][o] = (s_x[t] * s_w[o]) * (float)sum_i q_x[i] * q_w[o][i]
 *
 * Every quantity is an IEEE single computed the same way at every kernel level (a float
 * division, rounding to nearest even), and the sum is exact in int32, so the AVX2 and the
 * portable kernels give the same bits as the scalar reference, whatever the thread count,
 * n_rows or tiling. The sum cannot overflow: |q| <= 127, so |sum| <= 127^2 * n, which fits
 * in int32 for n <= DSV4_W8A8_MAX_COLS.
 *
 * An activation row with a NaN or an infinity gives NaN outputs (s_x = NaN, q = 0), as an
 * F32 matrix product would; weights must be finite (quantizing refuses others).
 *
 * Storage of a DSV4_WF_I8 matrix: w int8 [rows, cols] row-major, scale F32 [rows]
 * (scale_is_f32 = 1). dsv4_mat_row gives q * s_w; dsv4_linear and dsv4_linear_ref run the
 * P2 formula above.
 */
#ifndef DSV4_KERNELS_W8A8_H
#define DSV4_KERNELS_W8A8_H

#include <stdint.h>

#include "dsv4.h"
#include "kernels/linear.h"

/* floor(INT32_MAX / 127^2): the widest input whose int32 sum cannot overflow. */
#define DSV4_W8A8_MAX_COLS 133144

struct dsv4_kctx;

/* The startup check: fails (DSV4_ERR_UNSUPPORTED, naming what and cols) when a matrix with
 * cols inputs could overflow the int32 sum. */
int dsv4_w8a8_check_cols(int64_t cols, const char *what, dsv4_err *err);

/* Bytes of storage for an INT8 copy of a [rows, cols] matrix: rows * cols int8 followed
 * by rows F32 scales (at a 64-byte aligned offset). */
int64_t dsv4_w8a8_storage_bytes(int64_t rows, int64_t cols);

/* Quantizes src (any format, dequantized exactly by dsv4_mat_row) into storage
 * (dsv4_w8a8_storage_bytes bytes, 64-byte aligned, owned by the caller) and sets dst to
 * the DSV4_WF_I8 matrix over it. k (may be NULL: the caller's thread only) spreads rows
 * over its threads. Errors: cols over DSV4_W8A8_MAX_COLS, a non-finite weight (naming the
 * row), out of memory. */
int dsv4_w8a8_quantize_weights(struct dsv4_kctx *k, const dsv4_mat *src, void *storage,
                               dsv4_mat *dst, dsv4_err *err);

/* Quantizes one activation row x (n) into q (n) and returns s_x (NaN when x holds a NaN
 * or an infinity; q is then all zeros). */
float dsv4_w8a8_quantize_row(const float *x, int64_t n, int8_t *q);

/* The oracle: the P2 formula in plain scalar C, one output at a time. w: DSV4_WF_I8.
 * x (n_rows, cols), y (n_rows, rows). scratch: cols bytes for the quantized row, or NULL
 * (each q_x[i] is then recomputed per output: slow, no memory). */
void dsv4_w8a8_linear_ref(const dsv4_mat *w, const float *x, int n_rows, float *y,
                          int8_t *scratch);

/* Bytes of the activation buffer a call with at most `cols` inputs needs (a multiple of
 * 64; kctx.h's dsv4_kctx_reserve_w8a8 keeps one). */
size_t dsv4_w8a8_call_bytes(int64_t cols);

/* The fast kernel behind dsv4_linear for DSV4_WF_I8: activations quantized once per call,
 * then output blocks spread over k's threads; AVX2 (vpmovsxbw + vpmaddwd, int32 lanes)
 * when the context's SIMD level allows it, portable C otherwise. Same bits as
 * dsv4_w8a8_linear_ref. y must not overlap x. */
void dsv4_w8a8_linear(struct dsv4_kctx *k, const dsv4_mat *w, const float *x, int n_rows,
                      float *y);

#endif
