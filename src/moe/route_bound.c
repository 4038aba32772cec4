/* route_bound.c — the top-K of an elementwise router (sigmoid, sqrtsoftplus) from the exact
 * scores of only the experts that can make it.
 *
 * A score is a non-decreasing function of its logit, so the exact scores at a grid of
 * G + 1 logits over the row's range bound every expert's: z in [z_g, z_g+1] gives
 * score(z_g) <= score(z) <= score(z_g+1). Let T be the K-th largest lower bound of s + bias:
 * at least K experts have s + bias >= T, so one whose upper bound is below T is below K
 * others and is not chosen, nor does it tie with a chosen one. The rest, the candidates
 * (typically a few dozen of Flash's 256), get their exact scores and the same one-pass
 * selection in ascending id (dsv4_moe_topk): the K experts, their order and their scores
 * are the full computation's. libm's exp and log1p are within an ulp, not provably
 * monotone, and above 20 the softplus becomes the identity (a step of ~2e-9 down): the
 * bounds are widened by a margin far above both.
 *
 * The grid is the row's own (G + 1 scores a row), or, where the model holds one
 * (dsv4_block_w.route_tab, made by the engine with dsv4_moe_bound_table) and every logit lies in
 * its span, a fixed grid of step 1/DSV4_MOE_TAB_STEP: no scores for the grid, an
 * interval found without a division, and intervals ~8x narrower than a row's 32, so
 * ~K + 2 candidates instead of ~30 (each an exact score). Same argument, same margin.
 */
#include <math.h>
#include <stdint.h>

#include "moe/moe_impl.h"
#include "util/hot.h"

#define BOUND_G 32 /* grid intervals: G + 1 exact scores instead of E */

/* the fixed grid's point j: z_j = j / STEP - ZMAX (exact in double) */
static double tab_z(int j) { return (double)j / DSV4_MOE_TAB_STEP - DSV4_MOE_TAB_ZMAX; }

void dsv4_moe_bound_table(const dsv4_config *cfg, double *tab) {
    for (int j = 0; j < DSV4_MOE_TAB_N; j++) {
        const double sj = dsv4_moe_score(cfg, tab_z(j)), mj = 1e-6 * (1.0 + fabs(sj));
        tab[2 * j] = sj - mj;     /* lower bound on [z_j, z_j+1] */
        tab[2 * j + 1] = sj + mj; /* upper bound on [z_j-1, z_j] */
    }
}

/* The selection on the fixed grid, one pass over the row for every expert's interval and
 * lower bound, without a branch; -1 (nothing chosen) where the row does not fit the grid
 * (a logit outside [-ZMAX, ZMAX) or NaN, a bias not finite, all logits equal: the row
 * grid's checks and path), else 1 (0 only from a table that does not bound the scores). */
static int topk_table(const dsv4_config *cfg, const float *logits, const float *bias, const double *tab, double *s,
                      int *sel) {
    const int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok;
    int32_t at[DSV4_MOE_BOUND_MAX_E]; /* (E) each logit's interval [z_j, z_j+1] */
    double lo[DSV4_MOE_BOUND_MAX_E];  /* (E) its score's lower bound plus its bias */
    int fits = 1, differ = 0;
    for (int e = 0; e < E; e++) {
        const float zf = logits[e];
        const double b = bias ? (double)bias[e] : 0.0;
        fits &= (zf >= -DSV4_MOE_TAB_ZMAX) & (zf < DSV4_MOE_TAB_ZMAX) & (b - b == 0.0);
        differ |= zf != logits[0];
        const int j = dsv4_moe_tab_at(zf); /* out of the span: the row is dropped by fits */
        at[e] = j;
        lo[e] = tab[2 * j] + b;
    }
    if (!fits || !differ) return -1;
    double top[DSV4_MOE_TOPK_MAX]; /* the K largest lower bounds, descending */
    int n = 0;
    for (int e = 0; e < E; e++) dsv4_moe_topk_push(top, NULL, &n, K, lo[e], e);
    const double T = top[K - 1];
    double best[DSV4_MOE_TOPK_MAX];
    n = 0;
    for (int e = 0; e < E; e++) {
        const double b = bias ? (double)bias[e] : 0.0;
        if (!(tab[2 * (at[e] + 1) + 1] + b >= T)) continue;
        s[e] = dsv4_moe_score(cfg, logits[e]);
        dsv4_moe_topk_push(best, sel, &n, K, s[e] + b, e);
    }
    return n == K;
}

DSV4_HOT_AT(dsv4_moe_topk_bounded, 0xe0)
int dsv4_moe_topk_bounded(const dsv4_config *cfg, const float *logits, const float *bias, const double *tab,
                          double *s, int *sel) {
    const int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok;
    if (cfg->scoring_func == DSV4_SCORE_SOFTMAX || E < DSV4_MOE_BOUND_MIN_E || E > DSV4_MOE_BOUND_MAX_E ||
        K < 1 || K > DSV4_MOE_TOPK_MAX || K > E)
        return 0;
    const int chosen = tab ? topk_table(cfg, logits, bias, tab, s, sel) : -1;
    if (chosen >= 0) return chosen;
    float zmin = logits[0], zmax = logits[0];
    for (int e = 0; e < E; e++) {
        /* a NaN or infinite logit or bias: the full computation (a NaN bias would enter the
         * lower bounds' top-K and skew T, where the rounds treat it otherwise) */
        if (!isfinite(logits[e]) || (bias && !isfinite(bias[e]))) return 0;
        zmin = logits[e] < zmin ? logits[e] : zmin;
        zmax = logits[e] > zmax ? logits[e] : zmax;
    }
    if (!(zmax > zmin)) return 0;
    double zg[BOUND_G + 1], sg[BOUND_G + 1], mg[BOUND_G + 1]; /* grid logits, scores, margins */
    const double w = ((double)zmax - zmin) / BOUND_G;
    for (int g = 0; g <= BOUND_G; g++) {
        zg[g] = g == BOUND_G ? zmax : zmin + w * g;
        sg[g] = dsv4_moe_score(cfg, zg[g]);
        mg[g] = 1e-6 * (1.0 + fabs(sg[g]));
    }
    unsigned char at[DSV4_MOE_BOUND_MAX_E]; /* (E) each logit's interval */
    double top[DSV4_MOE_TOPK_MAX];          /* the K largest lower bounds, descending */
    int n = 0;
    for (int e = 0; e < E; e++) {
        const double z = logits[e];
        int g = (int)((z - zmin) / w);
        g = g < 0 ? 0 : g > BOUND_G - 1 ? BOUND_G - 1 : g;
        while (g > 0 && zg[g] > z) g--;
        while (g < BOUND_G - 1 && zg[g + 1] < z) g++;
        at[e] = (unsigned char)g;
        const double lo = (sg[g] - mg[g]) + (bias ? (double)bias[e] : 0.0);
        dsv4_moe_topk_push(top, NULL, &n, K, lo, e);
    }
    const double T = top[K - 1];
    /* the candidates in ascending id, through the one-pass selection */
    double best[DSV4_MOE_TOPK_MAX];
    n = 0;
    for (int e = 0; e < E; e++) {
        const int g = at[e];
        const double b = bias ? (double)bias[e] : 0.0;
        if (!((sg[g + 1] + mg[g + 1]) + b >= T)) continue;
        s[e] = dsv4_moe_score(cfg, logits[e]);
        dsv4_moe_topk_push(best, sel, &n, K, s[e] + b, e);
    }
    return n == K; /* always: the K experts of the largest lower bounds are candidates */
}
