/* numerics.c — the exact path and P2 W8A8 as numeric modes (model/numerics.h). */
#include "model/numerics.h"

#include "kernels/w8a8.h"

static void exact_linear(const dsv4_numerics *nm, dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops) {
    (void)nm;
    dsv4_linear_batch(k, ops, n_ops);
}

static void keep_fp32(const dsv4_numerics *nm, dsv4_act at, float *x, int64_t n) {
    (void)nm; (void)at; (void)x; (void)n;
}

static void exact_linear_strided(const dsv4_numerics *nm, dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops, int64_t ldx,
                                 int64_t ldy) {
    (void)nm;
    dsv4_linear_batch_strided(k, ops, n_ops, ldx, ldy);
}

static const dsv4_numerics exact = {"exact", exact_linear, keep_fp32, NULL, exact_linear_strided};

const dsv4_numerics *dsv4_numerics_exact(void) { return &exact; }

/* Up to this many products of other formats go to one dsv4_linear_batch job. */
#define W8A8_BATCH 64

/* P2 (spec/serving.md §f): an INT8 matrix means INT8 activations (its own pool job, the
 * activations quantized once per product); the other products as the exact path, still
 * together. Every y is computed alone, so the order does not change a bit. */
static void w8a8_linear(const dsv4_numerics *nm, dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops) {
    (void)nm;
    dsv4_lin_op rest[W8A8_BATCH];
    int n_rest = 0;
    for (int i = 0; i < n_ops; i++) {
        if (ops[i].w->fmt == DSV4_WF_I8) {
            if (ops[i].n_rows > 0) dsv4_w8a8_linear(k, ops[i].w, ops[i].x, ops[i].n_rows, ops[i].y);
            continue;
        }
        rest[n_rest++] = ops[i];
        if (n_rest == W8A8_BATCH) {
            dsv4_linear_batch(k, rest, n_rest);
            n_rest = 0;
        }
    }
    if (n_rest) dsv4_linear_batch(k, rest, n_rest);
}

static const dsv4_numerics w8a8 = {"w8a8", w8a8_linear, keep_fp32, NULL, NULL};

const dsv4_numerics *dsv4_numerics_w8a8(void) { return &w8a8; }
