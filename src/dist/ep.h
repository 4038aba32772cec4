/* ep.h — expert-parallel MoE (spec/serving.md §d).
 *
 * EP ranks share the routed experts: E % EP == 0, E_loc = E / EP, expert e lives on rank
 * e / E_loc as local expert e mod E_loc. Every rank holds the router and the shared
 * expert. One MoE sub-block, on every rank, also with zero rows:
 *
 *   gate locally -> opening Alltoall: wave 0's counts, the wave count and any failure ->
 *   per wave: (counts by Alltoall, after wave 0) -> rows packed by destination in (t, k)
 *     order (Alltoallv) ->
 *     the owner groups them by local expert and computes expert_e(x, w) ->
 *     results back in received order (Alltoallv) -> the source sums slot (t, k) in k order
 *     and adds its shared expert last.
 *
 * Every value is computed by the same functions as the single-rank dsv4_moe_forward
 * (moe/moe.h) on the same row, and dsv4_linear's per-row results do not depend on the
 * batch, so EP results equal single-rank results bitwise. A rank only ever reads the
 * weights of its own experts.
 *
 * Buffers are sized once from the wave size T_w (rows per rank per wave): send and return
 * T_w*K rows, receive EP*T_w*min(K, E_loc) rows (a token's K experts are distinct, so at
 * most min(K, E_loc) of its routes reach one rank). A call with R rows runs ceil(R/T_w)
 * waves locally; all ranks run the maximum over ranks, which the opening exchange tells
 * every rank (the maximum over what it received; spec §d's MPI_Allreduce max, folded into
 * wave 0's count exchange so a one-wave sub-block costs three collectives, not four).
 */
#ifndef DSV4_DIST_EP_H
#define DSV4_DIST_EP_H

#include <stdint.h>

#include "dsv4.h"
#include "kernels/kctx.h"
#include "model/config.h"
#include "model/model.h"
#include "model/numerics.h"
#include "util/arena.h"

typedef struct dsv4_ep dsv4_ep;

/* Traffic counters, summed over calls since creation (or the last reset). Bytes count
 * what this rank hands to MPI, its own rows included (they go through MPI too). */
typedef struct dsv4_ep_stats {
    int64_t calls;          /* MoE sub-blocks */
    int64_t waves;          /* waves run (agreed counts) */
    int64_t rows_sent;      /* dispatched (token, expert) rows */
    int64_t rows_recv;      /* rows computed here for other ranks' tokens (and own) */
    int64_t bytes_sent;     /* dispatch + return payload sent */
    int64_t bytes_recv;     /* dispatch + return payload received */
    int64_t max_recv_rows;  /* largest receive of one wave */
    int64_t recv_capacity;  /* the preallocated bound EP*T_w*min(K, E_loc) */
    double comm_s;          /* seconds inside MPI calls (exchange and waiting for peers) */
    double expert_s;        /* seconds computing routed experts for others and the own
                             * shared expert + combine */
} dsv4_ep_stats;

/* Creates the exchange for cfg over d's ranks (d->size > 1) with wave size wave (rows per
 * rank per wave, >= 1). Fails with a clear message when E % EP != 0. */
int dsv4_ep_create(const dsv4_config *cfg, dsv4_dist *d, int wave, dsv4_ep **out,
                   dsv4_err *err);
void dsv4_ep_free(dsv4_ep *ep);

/* Local experts [e0, e1) of this rank. */
void dsv4_ep_local_range(const dsv4_ep *ep, int *e0, int *e1);
int dsv4_ep_wave(const dsv4_ep *ep);

/* y (R, D) = MoE of x (R, D) with token ids tokens (R) (hash routing), expert-parallel.
 * Collective: every rank calls it for every MoE sub-block in the same order, R >= 0 (x,
 * tokens, y may be NULL when R == 0). On failure of any rank every rank returns an error
 * at the same point; a rank's own failure keeps its own message. The routes of the R rows
 * come from scratch (dsv4_ep_scratch_bytes), released on return. */
int dsv4_ep_moe(dsv4_ep *ep, dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_block_w *b, const float *x,
                const int32_t *tokens, int R, float *y, dsv4_arena *scratch, dsv4_err *err);
/* The most bytes dsv4_ep_moe takes from its scratch for calls of at most R rows. */
size_t dsv4_ep_scratch_bytes(const dsv4_config *cfg, int R);

/* For a rank that failed before reaching a MoE sub-block it must take part in: joins that
 * sub-block's agreement reporting failure code `code`, so the other ranks stop there too
 * instead of waiting. clean = 1 when the failing call changed no state (the others can
 * then leave theirs unchanged as well). */
void dsv4_ep_fail(dsv4_ep *ep, int code, int clean);

/* After dsv4_ep_moe returned an error: 1 when the failure was reported as clean by the
 * rank that had it (dsv4_ep_fail with clean = 1). */
int dsv4_ep_failure_clean(const dsv4_ep *ep);

dsv4_ep_stats dsv4_ep_get_stats(const dsv4_ep *ep);
void dsv4_ep_reset_stats(dsv4_ep *ep);

#endif
