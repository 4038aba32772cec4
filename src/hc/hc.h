/* hc.h — manifold-constrained hyper-connections (spec/model.md §5.3, §5.4, §5.13).
 * One token at a time; h is the hc streams (hc, D), stream j at [j*D, (j+1)*D). */
#ifndef DSV4_HC_HC_H
#define DSV4_HC_HC_H

#include "kernels/exp_f64.h"
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

/* ---- the same at a kernel level ----------------------------------------------------------
 * simd is a dsv4_simd (kernels/cpu.h) the CPU runs, e.g. dsv4_kctx_simd: at DSV4_SIMD_AVX512
 * and above the dots, the collapse and hc_post run in AVX-512 with the reference's exact
 * operations and order, so every level gives the plain functions' bits (test_hc checks it).
 * hc_pre splits in two so that one row's work can be spread over threads: the n_mix + 1
 * dots over the flattened streams (fn[m] · h for m < n_mix, then h · h), then the rest. */

/* dots[m] for m in [m0, m1), m <= n_mix. */
void dsv4_hc_dots(const dsv4_config *cfg, int simd, const float *h, const float *fn, int n_mix, int m0,
                  int m1, double *dots);
/* dsv4_hc_pre from its dots (mix + 1 of them: n_mix = dsv4_cfg_mix). ex: an exp over arrays with
 * libm's bits (kernels/exp_f64.h; the caller's word that it agrees with libm here), or NULL: libm's
 * exp per value. The same bits either way. */
void dsv4_hc_pre_finish(const dsv4_config *cfg, int simd, const float *h, const double *dots,
                        const float *base, const float *scale, float *x, float *post, float *comb,
                        dsv4_exp_rows_fn ex);
/* dsv4_hc_pre_finish in two halves that need different dots, for one row split over threads:
 * _x the collapse x, from dots [0, hc) and [n_mix]; _pc post and comb, from dots [hc, n_mix]. The
 * other entries of dots must be finite (their values do not matter); the same bits as the whole. */
void dsv4_hc_pre_finish_x(const dsv4_config *cfg, int simd, const float *h, const double *dots,
                          const float *base, const float *scale, float *x, dsv4_exp_rows_fn ex);
void dsv4_hc_pre_finish_pc(const dsv4_config *cfg, int simd, const double *dots, const float *base,
                           const float *scale, float *post, float *comb, dsv4_exp_rows_fn ex);
/* dsv4_hc_pre_finish of n rows: row i's h at h + i hc D, dots at dots + i (mix + 1), outputs at
 * x + i D, post + i hc, comb + i hc hc; the same bits as n calls. At DSV4_SIMD_AVX512 and hc <= 4
 * the Sinkhorn iterations of up to 8 rows run side by side, one row a lane. */
void dsv4_hc_pre_finish_rows(const dsv4_config *cfg, int simd, const float *h, int n, const double *dots,
                             const float *base, const float *scale, float *x, float *post, float *comb,
                             dsv4_exp_rows_fn ex);
void dsv4_hc_pre_at(const dsv4_config *cfg, int simd, const float *h, const float *fn, const float *base,
                    const float *scale, float *x, float *post, float *comb);
/* dsv4_hc_post with h_out = h_in = h (hc, D), updated in place. */
void dsv4_hc_post_inplace(const dsv4_config *cfg, int simd, const float *y, float *h, const float *post,
                          const float *comb);
void dsv4_hc_head_at(const dsv4_config *cfg, int simd, const float *h, const float *fn, const float *base,
                     const float *scale, float *y);
/* hc_pre's last step alone, x = sum_j pre[j] * h[j] (x: D), for tests: each product is
 * rounded to double before its add, which random data almost never tells from a fused
 * multiply-add; test_hc feeds it inputs where the two differ. */
void dsv4_hc_collapse_at(int simd, int hc, int D, const float *h, const double *pre, float *x);

/* ---- hc_pre's dots of many rows (prefill, batches) ---------------------------------------
 * When dsv4_hc_rows_blocked(cfg, simd) (levels avx2 and up, hc <= 4), fn (n_mix, hc*D)
 * widened to double once per call (dsv4_hc_widen over row ranges [m0, m1), any split) lets dsv4_hc_dots_rows run the dots
 * of a block of rows together, reading fn and widening each row once per block; with
 * fn_f64 NULL the blocked kernel widens fn itself, slab by slab in every block (less
 * memory traffic for a few blocks: a batched decode step). dots (n_rows, n_mix + 1) of h
 * (n_rows, hc, D): each row's the bits of dsv4_hc_dots over [0, n_mix + 1) (which the
 * function runs when the blocked kernel does not apply). */
int dsv4_hc_rows_blocked(const dsv4_config *cfg, int simd);
void dsv4_hc_widen(const dsv4_config *cfg, const float *fn, int m0, int m1, double *fn_f64);
void dsv4_hc_dots_rows(const dsv4_config *cfg, int simd, const float *h, int n_rows, const float *fn,
                       const double *fn_f64, int n_mix, double *dots);
/* The dots [m0, m1) of the same (m = n_mix: h . h), each the same bits as from
 * dsv4_hc_dots_rows: a block's dots split into parts over threads. The others untouched. */
void dsv4_hc_dots_rows_part(const dsv4_config *cfg, int simd, const float *h, int n_rows, const float *fn,
                            const double *fn_f64, int n_mix, int m0, int m1, double *dots);

#endif
