/* moe_impl.h — internal to src/moe: the per-row pieces moe.c and moe_one.c share, so that
 * both paths run the same arithmetic on a row. */
#ifndef DSV4_MOE_MOE_IMPL_H
#define DSV4_MOE_MOE_IMPL_H

#include "moe/moe.h"

/* The top-K selection: sel (K) = the ids of the K largest s[e] + bias[e] (bias NULL: 0),
 * descending, equal values in ascending id; with a NaN among them, K rounds of the first
 * maximum over the ids not yet taken (what the single pass reproduces otherwise). */
#define DSV4_MOE_TOPK_MAX 64
void dsv4_moe_topk(const double *s, const float *bias, int E, int K, int *sel);

/* One step of a running top-K: (v, id) joins the n (<= K) best so far, top (n) descending
 * and, among equal values, in arrival order (ids NULL: values only). A value that does not
 * beat the K-th (or a NaN) stays out. Shared by dsv4_moe_topk and the bounded router. */
static inline void dsv4_moe_topk_push(double *top, int *ids, int *n, int K, double v, int id) {
    if (*n == K && !(v > top[K - 1])) return;
    int p = *n < K ? (*n)++ : K - 1; /* the slot it takes, then moved up past smaller values */
    for (; p > 0 && v > top[p - 1]; p--) {
        top[p] = top[p - 1];
        if (ids) ids[p] = ids[p - 1];
    }
    top[p] = v;
    if (ids) ids[p] = id;
}

/* The score of an elementwise router (sigmoid, sqrtsoftplus) for logit z, in double. */
double dsv4_moe_score(const dsv4_config *cfg, double z);

/* The fixed grid's interval of logit z (moe.h, DSV4_MOE_TAB_*): the j with z_j <= z < z_j+1
 * for z in [-ZMAX, ZMAX), else a j in [0, N - 2]. j = floor(z * STEP) + ZMAX * STEP: z * STEP
 * is exact (a power of 2), its truncation too, less one where that rounded a negative up. */
static inline int dsv4_moe_tab_at(float z) {
    const double u = (double)z * DSV4_MOE_TAB_STEP, m = DSV4_MOE_TAB_ZMAX * DSV4_MOE_TAB_STEP;
    const double uc = u < -m ? -m : u < m ? u : 0.0; /* above the span or NaN: 0 */
    const int t = (int)uc;
    return t - (uc < t) + DSV4_MOE_TAB_ZMAX * DSV4_MOE_TAB_STEP;
}

#define DSV4_MOE_BOUND_MIN_E 64
#define DSV4_MOE_BOUND_MAX_E 4096
/* Flash's router: sel (K) as dsv4_moe_topk over the scores of every expert, from the
 * exact scores of fewer (route_bound.c); s (E) holds those of the candidates, the chosen
 * among them. Returns 0, having chosen nothing, where it does not apply: softmax, E
 * outside [DSV4_MOE_BOUND_MIN_E, DSV4_MOE_BOUND_MAX_E], a logit or bias not finite, all
 * logits equal. tab: the fixed grid (dsv4_moe_bound_table), or NULL for the row's own. */
int dsv4_moe_topk_bounded(const dsv4_config *cfg, const float *logits, const float *bias, const double *tab,
                          double *s, int *sel);

/* Selection sel (K) and weights w (K) of one token from its gate logits (E). s: scratch (E). */
int dsv4_moe_route_row(const dsv4_config *cfg, const dsv4_block_w *b, const float *logits, int32_t token, int *sel,
                       float *w, double *s, dsv4_err *err);

/* ---- one row (batch-1 decode) as one pool job: moe_one.c ------------------------------- */

#define DSV4_MOE_ONE_MAX_GROUPS 32 /* expert groups one job takes */
/* Weight bytes of a W1/W3 item (both matrices) and of a router item; W2 items take half.
 * Large, so that each item's GEMV streams long runs: with Flash-quarter's experts at 2
 * threads every product is cut in two, one contiguous half a thread (the FP8 shared expert
 * 2, 2; the router 2), and so would an FP4 expert's W1/W3 557 KB and W2 279 KB be; those
 * are then taken whole, one expert a thread (dsv4_moe_one_routed_rows). 128 KB items (6
 * and 6 an FP4 expert) took 1.03-1.06x the batch-1 step (BENCHMARKS.md, session 15 ovl). */
#define DSV4_MOE_ONE_ITEM_BYTES ((int64_t)512 << 10)

/* Rows per item of w (and n_mats - 1 matrices of the same format beside it) for items of
 * about `bytes`, T threads (moe_one.c's cut). */
int64_t dsv4_moe_one_item_rows(const dsv4_mat *w, int n_mats, int64_t bytes, int T);
/* ... and of a routed expert's matrix, K routed experts a row: the whole matrix where that
 * cut is at most one item a thread and T divides K (each expert on one thread), else the cut. */
int64_t dsv4_moe_one_routed_rows(const dsv4_mat *w, int n_mats, int64_t bytes, int T, int K);

/* The router stage of a one-row job: logits = x gate^T, then the token's routing; the
 * routed groups' buffers. */
typedef struct dsv4_moe_one_route {
    const dsv4_block_w *b;
    int32_t token;
    float *logits; /* (E) */
    double *s;     /* (E) scores scratch */
    int *sel;      /* (K) */
    float *w;      /* (K) */
    float *og;     /* (K, D) routed expert outputs, k order */
    float *gu;     /* (K, 2, I) routed expert k's gate rows at gu + 2 k I, its up rows
                    * right after them (one dsv4_moe_w13 product writes both) */
} dsv4_moe_one_route;

/* Every group of one activation row (n == 1, at most DSV4_MOE_ONE_MAX_GROUPS groups, exact
 * numerics): W1/W3 + SwiGLU and W2 of each, and with rt the router before them, in one
 * pool job. With rt, gr holds the groups that need no routing (the shared expert) and the
 * K routed groups are appended by the routing (k order) for x. Returns DSV4_OK, or -1
 * when the routing failed (rerun dsv4_moe_route_row for its message), or -2 when a weight
 * could not be sliced (nothing usable was written: take the general path). item_bytes:
 * DSV4_MOE_ONE_ITEM_BYTES (tests take less, to cut small matrices into many items). */
int dsv4_moe_one_run(dsv4_kctx *k, const dsv4_config *cfg, const dsv4_moe_group *gr, int ng, const float *x,
                     const dsv4_moe_one_route *rt, int64_t item_bytes);

#endif
