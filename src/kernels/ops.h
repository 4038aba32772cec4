/* ops.h — small per-vector operators (reference scalar code, FP32 with wider sums where
 * it matters). */
#ifndef DSV4_KERNELS_OPS_H
#define DSV4_KERNELS_OPS_H

/* y = x / sqrt(mean(x^2) + eps) * w; w == NULL is the unweighted form. y may alias x. */
void dsv4_rmsnorm(const float *x, const float *w, int n, float eps, float *y);
static inline float dsv4_sigmoid(float x);
float dsv4_silu(float x);
float dsv4_dot(const float *a, const float *b, int n);

#include <math.h>
static inline float dsv4_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

#endif
