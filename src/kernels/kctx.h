/* kctx.h — the kernel context: threads, SIMD level and scratch that heavy kernels share.
 * One per engine (never global). Kernels know nothing about the model. */
#ifndef DSV4_KERNELS_KCTX_H
#define DSV4_KERNELS_KCTX_H

#include <stdint.h>

#include "dsv4.h"
#include "kernels/linear.h"

typedef struct dsv4_kctx dsv4_kctx;

/* n_threads <= 0: all online cores. max_cols: widest matrix input the engine will use. */
int dsv4_kctx_create(int n_threads, int64_t max_cols, dsv4_kctx **out, dsv4_err *err);
void dsv4_kctx_free(dsv4_kctx *k);
int dsv4_kctx_threads(const dsv4_kctx *k);

/* y[s, o] = sum_i x[s, i] * W[o, i]: x (n_rows, w->cols), y (n_rows, w->rows). The fast
 * path for each format; dsv4_linear_ref is its oracle. */
void dsv4_linear(dsv4_kctx *k, const dsv4_mat *w, const float *x, int n_rows, float *y);

#endif
