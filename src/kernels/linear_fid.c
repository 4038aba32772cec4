/* linear_fid.c — dsv4_linear under fidelity mode P3 (spec/model.md §6 F1, F4): quantize
 * the input rows of the release's FP8/FP4 projections, round outputs to BF16, and run the
 * product itself through the ordinary dsv4_linear (on a role-free copy of the matrix, so
 * the call does not come back here). */
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "kernels/fidelity.h"
#include "kernels/kctx.h"

static int quant_in(unsigned fid, unsigned role) { return (role & DSV4_MAT_FID_ACTQ) && (fid & DSV4_FID_F1); }

static int bf16_in(unsigned fid, unsigned role) {
    return ((role & DSV4_MAT_FID_BF16IN) && (fid & DSV4_FID_F5)) ||
           ((role & DSV4_MAT_FID_BF16IN_F4) && (fid & DSV4_FID_F4));
}

/* one input row as the items ask: BF16 (F5 on W2, F4 on wo_a), then FP8 per 128 (F1) */
static void round_row(unsigned fid, unsigned role, float *row, int64_t cols) {
    if (bf16_in(fid, role)) dsv4_fid_bf16(row, cols);
    if (quant_in(fid, role)) dsv4_fid_fp8_rt(row, cols, 128);
}

static int round_out(unsigned fid, unsigned role) {
    return ((role & DSV4_MAT_FID_ACTQ) && (fid & (DSV4_FID_F1 | DSV4_FID_F4))) ||
           ((role & DSV4_MAT_FID_BF16OUT) && (fid & DSV4_FID_F4));
}

int dsv4_fid_linear(dsv4_kctx *k, const dsv4_mat *w, const float *x, int n_rows, float *y) {
    const unsigned fid = dsv4_kctx_fidelity(k), role = w->fid_role;
    const int q = quant_in(fid, role) || bf16_in(fid, role), rnd = round_out(fid, role);
    if (n_rows <= 0 || (!q && !rnd)) return 0;
    dsv4_mat m = *w; /* role-free: the call below takes the ordinary path */
    m.fid_role = 0;
    const int64_t cols = m.cols, rows = m.rows;
    if (!q) {
        dsv4_linear(k, &m, x, n_rows, y);
    } else {
        float *buf = malloc(sizeof(float) * (size_t)n_rows * (size_t)cols); /* (n_rows, cols) */
        if (buf) {
            memcpy(buf, x, sizeof(float) * (size_t)n_rows * (size_t)cols);
            for (int r = 0; r < n_rows; r++) round_row(fid, role, buf + r * cols, cols);
            dsv4_linear(k, &m, buf, n_rows, y);
            free(buf);
        } else {
            /* out of memory: one row at a time through this thread's row buffer (the same
             * bits: dsv4_linear does not depend on the number of rows) */
            float *row = dsv4_kctx_fid_row(k, dsv4_kctx_tid(k));
            for (int r = 0; r < n_rows; r++) {
                memcpy(row, x + r * cols, sizeof(float) * (size_t)cols);
                round_row(fid, role, row, cols);
                dsv4_linear(k, &m, row, 1, y + r * rows);
            }
        }
    }
    if (rnd) dsv4_fid_bf16(y, (int64_t)n_rows * rows);
    return 1;
}
