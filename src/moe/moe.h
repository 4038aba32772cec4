/* moe.h — mixture of experts (spec/model.md §5.12): router (hash or score), routed experts
 * with clamped SwiGLU, shared expert. */
#ifndef DSV4_MOE_MOE_H
#define DSV4_MOE_MOE_H

#include <stdint.h>

#include "kernels/kctx.h"
#include "model/model.h"
#include "model/numerics.h"
#include "util/arena.h"

/* The score-routed router's bounds on a fixed grid of logits (moe/route_bound.c): z_j =
 * j / STEP - ZMAX, j < DSV4_MOE_TAB_N; tab (2 * DSV4_MOE_TAB_N) holds score(z_j) less and
 * plus its margin, for cfg's scoring function. The engine makes it at create
 * (dsv4_block_w.route_tab); rows with a logit outside [-ZMAX, ZMAX) take the row's own grid. */
#define DSV4_MOE_TAB_STEP 32
#define DSV4_MOE_TAB_ZMAX 32
#define DSV4_MOE_TAB_N (2 * DSV4_MOE_TAB_ZMAX * DSV4_MOE_TAB_STEP + 1)
void dsv4_moe_bound_table(const dsv4_config *cfg, double *tab);

/* Router for one token: sel (K) expert ids in k order, w (K) final weights
 * (normalised unless softmax, times routed_scaling_factor). */
void dsv4_moe_route(const dsv4_config *cfg, const dsv4_block_w *b, const float *x,
                    int32_t token, int *sel, float *w);

/* y (S, D) = MoE of x (S, D) for S rows with token ids tokens (S). Rows are grouped by
 * expert for batched linears; each token's sum runs in k order with the shared expert
 * last, so results do not depend on S or on grouping; products and the output rounding
 * (DSV4_ACT_MOE_OUT) as numeric mode nm computes them. sel_out (S, K) optional. Scratch
 * comes from `scratch` (dsv4_moe_scratch_bytes(cfg, S) bytes free), released on return. */
int dsv4_moe_forward(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *cfg, const dsv4_block_w *b,
                     const float *x, const int32_t *tokens, int S, float *y, int *sel_out,
                     dsv4_arena *scratch, dsv4_err *err);
/* dsv4_moe_forward for a caller that has checked b's routed experts (dsv4_moe_check_experts
 * over all of them, the engine at create) and not changed them since: only the shared
 * matrices are checked per call. The check of 3 x 256 expert matrices read their cold
 * descriptors every call, 1.75 us of serial time a layer in the batch-1 step (BENCHMARKS.md,
 * session 23 b1p). */
int dsv4_moe_forward_checked(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *cfg, const dsv4_block_w *b,
                             const float *x, const int32_t *tokens, int S, float *y, int *sel_out,
                             dsv4_arena *scratch, dsv4_err *err);
size_t dsv4_moe_scratch_bytes(const dsv4_config *cfg, int S);

/* ---- pieces of the forward, shared with the expert-parallel path (dist/ep.c) ---------
 * Both paths run exactly these functions on each row, so their results agree bitwise. */

/* Weight checks: router and shared expert; routed experts [e0, e1) (shapes only, no data
 * is read, so an expert-parallel rank checks just its own). */
int dsv4_moe_check_shared(const dsv4_config *cfg, const dsv4_block_w *b, dsv4_err *err);
int dsv4_moe_check_experts(const dsv4_config *cfg, const dsv4_block_w *b, int e0, int e1,
                           dsv4_err *err);

/* Routing of R rows x (R, D): sel (R, K) expert ids in k order, w (R, K) weights.
 * Scratch: logits (R, E), s (E). tokens (R) may be NULL on score-routed layers. */
int dsv4_moe_gate(dsv4_kctx *k, const dsv4_config *cfg, const dsv4_block_w *b, const float *x,
                  const int32_t *tokens, int R, int *sel, float *w, float *logits, double *s,
                  dsv4_err *err);

/* One expert's work in dsv4_moe_experts: out (n, D) = (w[r] * silu(min(x W1^T, L)) *
 * clip(x W3^T, -L, L)) W2^T per row r of x (n, D); w NULL = weight 1 (the shared expert).
 * Scratch g, u (n, I); with u == g + n I (the forward's own scratch) and W1, W3 one matrix
 * in memory (dsv4_moe_w13), W1 and W3 run as one product into g and u. */
typedef struct dsv4_moe_group {
    const dsv4_mat *w1, *w3, *w2;
    const float *x;
    const float *w;
    int n;
    float *out;
    float *g, *u;
} dsv4_moe_group;

/* Several experts at once: W1 and W3 of every group in one thread-pool job, then W2 of
 * every group in another (a decode step's six experts and the shared one cost two
 * hand-offs instead of 21); a batched decode step's experts of 1-4 rows and at most two
 * larger groups (the shared expert) instead one task each, W1/W3, SwiGLU and W2 on one
 * thread, in one job.
 * Each group gets exactly dsv4_moe_expert's bits. No buffer of one group may overlap
 * another's. */
void dsv4_moe_experts(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *cfg,
                      const dsv4_moe_group *gr, int n_groups);

/* out (n, D) = (w[r] * silu(min(x W1^T, L)) * clip(x W3^T, -L, L)) W2^T per row r, for one
 * expert's matrices; w NULL = weight 1 (the shared expert). Scratch: g, u (n, I). */
void dsv4_moe_expert(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *cfg, const dsv4_mat *w1,
                     const dsv4_mat *w3, const dsv4_mat *w2, const float *x, const float *w,
                     int n, float *out, float *g, float *u);

/* w13 (2 I rows) = an expert's W1 (I, D) rows then its W3 (I, D) rows as one matrix, where
 * the memory holds them so: W3's weights right after W1's and W3's scales right after W1's
 * (the engine's copy lays every routed expert out so, engine/fp4_layout.c). Then x w13^T is
 * x W1^T then x W3^T, each row the same product as alone (kernels/linear_fast.h: a row's
 * value does not depend on the rows beside it), in one call: one matrix start, one x
 * permute and one stream instead of two. Packed FP4 only (either layout). Returns 1 and
 * sets w13, else 0. */
int dsv4_moe_w13(const dsv4_mat *w1, const dsv4_mat *w3, dsv4_mat *w13);

/* y (D) = sum over k of rows[idx[k]] (each (D)), in k order, then + shared (D). */
void dsv4_moe_combine(int D, int K, const float *rows, const int *idx, const float *shared,
                      float *y);

#endif
