/* moe.h — mixture of experts (spec/model.md §5.12): router (hash or score), routed experts
 * with clamped SwiGLU, shared expert. */
#ifndef DSV4_MOE_MOE_H
#define DSV4_MOE_MOE_H

#include <stdint.h>

#include "kernels/kctx.h"
#include "model/model.h"

/* Router for one token: sel (K) expert ids in k order, w (K) final weights
 * (normalised unless softmax, times routed_scaling_factor). */
void dsv4_moe_route(const dsv4_config *cfg, const dsv4_block_w *b, const float *x,
                    int32_t token, int *sel, float *w);

/* y (S, D) = MoE of x (S, D) for S rows with token ids tokens (S). Rows are grouped by
 * expert for batched linears; each token's sum runs in k order with the shared expert
 * last, so results do not depend on S or on grouping. sel_out (S, K) optional. */
int dsv4_moe_forward(dsv4_kctx *k, const dsv4_config *cfg, const dsv4_block_w *b,
                     const float *x, const int32_t *tokens, int S, float *y, int *sel_out,
                     dsv4_err *err);

#endif
