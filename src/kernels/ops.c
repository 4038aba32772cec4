/* ops.c — small per-vector operators (spec/model.md §5.2 and the SwiGLU activation).
 *
 * Reference code: plain loops, sums wider than the data where the length is large enough
 * for FP32 rounding to show (RMS over thousands of values). */
#include "kernels/ops.h"

#include <math.h>

void dsv4_rmsnorm(const float *x, const float *w, int n, float eps, float *y) {
    /* The mean of squares is summed in double: for D = 4096 an FP32 running sum loses
     * about 12 bits, and everything downstream is scaled by this one number. */
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float r = (float)(1.0 / sqrt(ss / (n > 0 ? n : 1) + (double)eps));
    /* x is read before y is written at each index, so y may alias x. */
    if (w) {
        for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
    } else {
        for (int i = 0; i < n; i++) y[i] = x[i] * r;
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
