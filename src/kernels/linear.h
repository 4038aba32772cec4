/* linear.h — a weight matrix in its checkpoint format, and the reference y = x . W^T.
 *
 * Weights are stored [out, in] (rows = outputs). Formats are decided by the tensor dtype:
 * dense F32/F16/BF16; FP8 e4m3 with a [ceil(out/128), ceil(in/128)] block-scale grid;
 * FP4 e2m1 packed two per byte (low nibble = even column) with [out, in/32] scales. Scales
 * are ue8m0 bytes or F32. Every weight is dequantized exactly (spec/model.md §2.3).
 */
#ifndef DSV4_KERNELS_LINEAR_H
#define DSV4_KERNELS_LINEAR_H

#include <stdint.h>

typedef enum {
    DSV4_WF_NONE = 0, /* absent */
    DSV4_WF_F32,
    DSV4_WF_F16,
    DSV4_WF_BF16,
    DSV4_WF_FP8,      /* e4m3 + 128x128 block scales */
    DSV4_WF_FP4,      /* packed e2m1 + per-32 scales */
    DSV4_WF_I8,       /* int8 [out, in] + F32 per-output scales: P2 W8A8's weights
                       * (kernels/w8a8.h, whose products also quantize the activations) */
    DSV4_WF_FP4L,     /* packed e2m1 in the lanes layout (kernels/fp4_lanes.h) + per-32
                       * scales: the FP4 of a checkpoint repacked at load */
    DSV4_WF_FP4B,     /* packed e2m1 in the shuffle layout (kernels/fp4_shuf.h) + per-32
                       * scales: the same, for the AVX2 vpshufb decoder */
} dsv4_wfmt;

/* packed FP4 in any layout: same bytes, scales and products */
static inline int dsv4_wf_is_fp4(dsv4_wfmt f) { return f == DSV4_WF_FP4 || f == DSV4_WF_FP4L || f == DSV4_WF_FP4B; }

typedef struct dsv4_mat {
    dsv4_wfmt fmt;
    int64_t rows, cols;     /* logical [out, in] */
    const void *w;          /* row-major storage (FP4: cols/2 bytes per row) */
    const void *scale;      /* FP8: [ceil(rows/128), ceil(cols/128)]; FP4: [rows, cols/32];
                             * I8: F32 [rows] */
    int scale_is_f32;       /* scales stored F32 instead of ue8m0 bytes */
    int fp8_no_nan;         /* FP8: 1 when no weight byte is an e4m3 NaN code (0x7F, 0xFF), as
                             * the engine's weight copy finds once (dsv4_fp8_no_nan): the one-row
                             * bit decode then skips its NaN scan. 0 (not known: mapped weights)
                             * keeps the scan: always safe */
} dsv4_mat;

/* 1 when none of the n e4m3 bytes at p is a NaN code (0x7F or 0xFF), else 0: the loader's
 * dsv4_mat.fp8_no_nan, found where the engine copies the weights (engine/fp4_layout.c). */
int dsv4_fp8_no_nan(const uint8_t *p, int64_t n);

/* Dequantizes row o of w into out[cols] (exact). */
void dsv4_mat_row(const dsv4_mat *w, int64_t o, float *out);

/* Reference linear: y[s, o] = sum_i x[s, i] * W[o, i] for s < n_rows, FP32 accumulation in
 * ascending i. x: [n_rows, cols], y: [n_rows, rows]. scratch: cols floats. For every format
 * (DSV4_WF_I8 included) this is the product with the exactly dequantized weights; P2's
 * INT8-activation product is a numeric mode's choice (model/numerics.h, kernels/w8a8.h). */
void dsv4_linear_ref(const dsv4_mat *w, const float *x, int n_rows, float *y, float *scratch);

/* Bytes of the weight storage (including scales). */
int64_t dsv4_mat_bytes(const dsv4_mat *w);
/* Bytes of its scales alone (FP8 block grid, FP4 per-32, I8 per-row F32; 0 for the dense formats). */
int64_t dsv4_mat_scale_bytes(const dsv4_mat *w);
/* Bytes of its weights alone (dsv4_mat_bytes less the scales): rows x the bytes of a row. */
int64_t dsv4_mat_weight_bytes(const dsv4_mat *w);

/* A view of rows [r0, r0 + n) of w (used for the per-group blocks of wo_a). Returns 0, or
 * -1 when the format cannot be sliced there (FP8 with r0 not a multiple of 128 and rows
 * [r0, r0 + n) not inside one 128-row scale band). */
int dsv4_mat_rows(const dsv4_mat *w, int64_t r0, int64_t n, dsv4_mat *view);

#endif
