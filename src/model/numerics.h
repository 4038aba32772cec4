/* numerics.h — how an engine computes the graph's products and where it rounds activations.
 *
 * The forward code (attention, compressor, MoE, blocks) is written once, as spec/model.md §3
 * and §5 state the exact math; the numeric path of spec/serving.md §f is a small hook
 * struct chosen at engine create and passed down with the weights:
 *
 *   exact     P0/P1: every product is dsv4_linear_batch, no rounding (the reference story)
 *   w8a8      P2: products of INT8 matrices (DSV4_WF_I8, made at create by the engine) run
 *             on INT8 activations (kernels/w8a8.h); the rest as exact
 *   fidelity  P3 (model.md §6): products and activations rounded as the official graph
 *             does, item by item (numerics_fid.c)
 *
 * Kernels know no roles: which rounding a product gets is decided here, from which weight
 * of the model the matrix is (the fidelity mode's table of weight storage).
 */
#ifndef DSV4_MODEL_NUMERICS_H
#define DSV4_MODEL_NUMERICS_H

#include <stdint.h>

#include "kernels/kctx.h"
#include "model/model.h"

/* The activation points where a numeric mode may round (model.md §6 names them); the
 * exact path leaves every one in FP32. */
typedef enum dsv4_act {
    DSV4_ACT_COLLAPSE,  /* hc_pre output (D) */
    DSV4_ACT_NORM,      /* an RMSNorm output: attn/ffn norm, q head norm, kv_norm,
                         * compressor norm, final norm, MTP enorm/hnorm */
    DSV4_ACT_STREAMS,   /* hc_post output: the residual streams (hc, D) */
    DSV4_ACT_Q,         /* q after RoPE (H, hd) */
    DSV4_ACT_KV,        /* one window KV row after RoPE (hd) */
    DSV4_ACT_INDEX_Q,   /* one indexer query head after RoPE (dI) */
    DSV4_ACT_POOLED,    /* a pooled compressor value before its norm (d) */
    DSV4_ACT_ENTRY,     /* a main compressed entry after norm and RoPE (hd) */
    DSV4_ACT_INDEX_KEY, /* an indexer key after norm and RoPE (dI) */
    DSV4_ACT_PROBS,     /* attention probabilities of one head for P.V (n_kv) */
    DSV4_ACT_MOE_OUT,   /* the MoE output: routed sum + shared expert (D) */
} dsv4_act;

typedef struct dsv4_numerics dsv4_numerics;

struct dsv4_numerics {
    const char *name;
    /* The products of ops, as dsv4_linear_batch states them (one job where it can), in this
     * mode's arithmetic. Only the engine's weights (or views of them) may be passed. */
    void (*linear)(const dsv4_numerics *nm, dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops);
    /* Rounds x[0, n) in place as the mode does at point `at` (one row or vector of it). */
    void (*round)(const dsv4_numerics *nm, dsv4_act at, float *x, int64_t n);
    void *state; /* the mode's own (numerics_fid.c), NULL for the stateless modes */
    /* linear's products with x and y rows ldx and ldy floats apart (dsv4_linear_batch_strided),
     * in the same arithmetic; NULL when the mode takes dense rows only */
    void (*linear_strided)(const dsv4_numerics *nm, dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops, int64_t ldx,
                           int64_t ldy);
};

/* The exact path and P2 (stateless; immutable, shared by every engine). */
const dsv4_numerics *dsv4_numerics_exact(void);
const dsv4_numerics *dsv4_numerics_w8a8(void);

/* P3 fidelity mode with DSV4_FID_* items for the blocks[0, n_blocks) an engine runs: their
 * weights' roles (model.md §6 F1, F4, F5) are read off the block fields here, and one
 * rounding buffer for products of up to max_rows rows is allocated now (no call allocates
 * later). Fails when items need what the config lacks (F3: a power-of-two dI). */
int dsv4_numerics_fidelity_create(unsigned items, const dsv4_config *cfg, const dsv4_block_w *blocks,
                                  int n_blocks, int max_rows, dsv4_numerics **out, dsv4_err *err);
void dsv4_numerics_free(dsv4_numerics *nm); /* no-op for the shared modes and NULL */

/* One product through the mode. */
static inline void dsv4_num_linear(const dsv4_numerics *nm, dsv4_kctx *k, const dsv4_mat *w,
                                   const float *x, int n_rows, float *y) {
    const dsv4_lin_op op = {w, x, n_rows, y};
    nm->linear(nm, k, &op, 1);
}

#endif
