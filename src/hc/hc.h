/* hc.h — manifold-constrained hyper-connections (spec/model.md §5.3, §5.4, §5.13).
 * One token at a time; h is the hc streams (hc, D), stream j at [j*D, (j+1)*D). */
#ifndef DSV4_HC_HC_H
#define DSV4_HC_HC_H

#include "model/config.h"

/* These routines handle hc_mult up to DSV4_HC_MAX (model/config.h, which the loader
 * enforces); with a larger hc the outputs are filled with NaN. */

/* Collapse with Sinkhorn mixing. fn (mix, hc*D), base (mix), scale (3).
 * Out: x (D), post (hc), comb (hc, hc) [j = input stream][k = output stream]. */
void dsv4_hc_pre(const dsv4_config *cfg, const float *h, const float *fn, const float *base,
                 const float *scale, float *x, float *post, float *comb);

/* h_out[k] = post[k] * y + sum_j comb[j][k] * h_in[j]. h_out must not alias h_in. */
void dsv4_hc_post(const dsv4_config *cfg, const float *y, const float *h_in, const float *post,
                  const float *comb, float *h_out);

/* HC head (no Sinkhorn): fn (hc, hc*D), base (hc), scale (1); y (D). */
void dsv4_hc_head(const dsv4_config *cfg, const float *h, const float *fn, const float *base,
                  const float *scale, float *y);

#endif
