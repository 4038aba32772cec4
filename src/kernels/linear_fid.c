/* linear_fid.c — dsv4_linear_batch under fidelity mode P3 (spec/model.md §6 F1, F4, F5):
 * quantize the input rows of the release's FP8/FP4 projections, round outputs to BF16, and
 * run the products themselves as one ordinary batch (on role-free copies of the matrices,
 * so the call does not come back here). */
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

/* Op i's rounded input into dst (n_rows, cols), or into the thread's row buffer one row
 * at a time when dst could not be allocated (the same bits: dsv4_linear does not depend on
 * the number of rows). */
static void run_rows(dsv4_kctx *k, unsigned fid, const dsv4_lin_op *op, const dsv4_mat *m) {
    const int64_t cols = m->cols, rows = m->rows;
    float *row = dsv4_kctx_fid_row(k, dsv4_kctx_tid(k));
    for (int r = 0; r < op->n_rows; r++) {
        memcpy(row, op->x + r * cols, sizeof(float) * (size_t)cols);
        round_row(fid, op->w->fid_role, row, cols);
        dsv4_linear(k, m, row, 1, op->y + r * rows);
    }
}

int dsv4_fid_linear_batch(dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops) {
    const unsigned fid = dsv4_kctx_fidelity(k);
    int live = 0;
    for (int i = 0; i < n_ops; i++) {
        const unsigned role = ops[i].w->fid_role;
        live |= quant_in(fid, role) || bf16_in(fid, role) || round_out(fid, role);
    }
    if (!live) return 0;
    dsv4_mat *m = malloc(sizeof *m * (size_t)n_ops);          /* (n_ops) role-free copies */
    dsv4_lin_op *run = malloc(sizeof *run * (size_t)n_ops);   /* (n_ops) what runs */
    float **in = calloc((size_t)n_ops, sizeof *in);           /* (n_ops) rounded inputs or NULL */
    int short_of_memory = !m || !run || !in;
    for (int i = 0; i < n_ops && !short_of_memory; i++) {
        const dsv4_lin_op *op = &ops[i];
        const unsigned role = op->w->fid_role;
        m[i] = *op->w;
        m[i].fid_role = 0; /* the batch below takes the ordinary path */
        run[i] = (dsv4_lin_op){&m[i], op->x, op->n_rows, op->y};
        if ((quant_in(fid, role) || bf16_in(fid, role)) && op->n_rows > 0) {
            const int64_t cols = m[i].cols;
            in[i] = malloc(sizeof(float) * (size_t)op->n_rows * (size_t)cols); /* (n_rows, cols) */
            short_of_memory |= !in[i];
            if (!in[i]) break;
            memcpy(in[i], op->x, sizeof(float) * (size_t)op->n_rows * (size_t)cols);
            for (int r = 0; r < op->n_rows; r++) round_row(fid, role, in[i] + r * cols, cols);
            run[i].x = in[i];
        }
    }
    if (!short_of_memory) {
        dsv4_linear_batch(k, run, n_ops);
    } else { /* one op at a time, rounded inputs row by row */
        for (int i = 0; i < n_ops; i++) {
            dsv4_mat mi = *ops[i].w;
            mi.fid_role = 0;
            if (quant_in(fid, ops[i].w->fid_role) || bf16_in(fid, ops[i].w->fid_role)) run_rows(k, fid, &ops[i], &mi);
            else dsv4_linear(k, &mi, ops[i].x, ops[i].n_rows, ops[i].y);
        }
    }
    for (int i = 0; i < n_ops; i++)
        if (round_out(fid, ops[i].w->fid_role))
            dsv4_fid_bf16(ops[i].y, (int64_t)ops[i].n_rows * ops[i].w->rows);
    for (int i = 0; in && i < n_ops; i++) free(in[i]);
    free(in); free(run); free(m);
    return 1;
}
