/* hc.c — manifold-constrained hyper-connections (spec/model.md §5.3, §5.4, §5.13).
 *
 * The small mixing arithmetic (mix ≤ a few dozen numbers per token) runs in double: it is
 * free next to the matmul, and the Sinkhorn loop repeats divisions 2·iters times. The
 * (mix, hc·D) matmul and the RMS over hc·D values accumulate in double as well. */
#include "hc/hc.h"

#include <math.h>

#include "kernels/ops.h"

static double sigmoid_f64(double z) { return 1.0 / (1.0 + exp(-z)); }

/* mixes[m] = (fn[m] · flat) / sqrt(mean(flat²) + rms_norm_eps) for m < n_mix: the RMS runs
 * over all hc·D values, uses rms_norm_eps (not hc_eps) and scales the matmul output. */
static void hc_mixes(const dsv4_config *cfg, const float *h, const float *fn, int n_mix,
                     double *mixes) {
    const int64_t n = (int64_t)cfg->hc_mult * cfg->hidden_size;
    const double rinv = 1.0 / sqrt(dsv4_dot_f64(h, h, n) / (double)n + cfg->rms_norm_eps);
    for (int m = 0; m < n_mix; m++) mixes[m] = dsv4_dot_f64(fn + (int64_t)m * n, h, n) * rinv;
}

/* x = Σ_j pre[j] · h[j] */
static void hc_collapse(const dsv4_config *cfg, const float *h, const double *pre, float *x) {
    const int hc = cfg->hc_mult, D = cfg->hidden_size;
    for (int d = 0; d < D; d++) {
        double acc = 0.0;
        for (int j = 0; j < hc; j++) acc += pre[j] * h[(int64_t)j * D + d];
        x[d] = (float)acc;
    }
}

#define HC_MAX DSV4_HC_MAX

/* hc outside [1, DSV4_HC_MAX] is a broken precondition: make it loud, not a stack overrun. */
static void fill_nan(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
}

void dsv4_hc_pre(const dsv4_config *cfg, const float *h, const float *fn, const float *base,
                 const float *scale, float *x, float *post, float *comb) {
    const int hc = cfg->hc_mult, mix = dsv4_cfg_mix(cfg);
    const double eps = cfg->hc_eps;
    double mixes[(2 + HC_MAX) * HC_MAX];        /* (mix) */
    double pre[HC_MAX];                         /* (hc) */
    double C[HC_MAX * HC_MAX];                  /* (hc, hc) [j input][k output] */
    if (hc < 1 || hc > HC_MAX) {
        fill_nan(x, cfg->hidden_size);
        if (hc > 0) { fill_nan(post, hc); fill_nan(comb, (int64_t)hc * hc); }
        return;
    }
    hc_mixes(cfg, h, fn, mix, mixes);

    for (int j = 0; j < hc; j++) {
        pre[j] = sigmoid_f64(mixes[j] * scale[0] + base[j]) + eps;
        post[j] = (float)(2.0 * sigmoid_f64(mixes[hc + j] * scale[1] + base[hc + j]));
    }
    /* Row softmax of the logits, then +eps everywhere. */
    for (int j = 0; j < hc; j++) {
        double *row = C + j * hc, mx = -INFINITY, sum = 0.0;
        for (int k = 0; k < hc; k++) {
            row[k] = mixes[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
            if (row[k] > mx) mx = row[k];
        }
        for (int k = 0; k < hc; k++) { row[k] = exp(row[k] - mx); sum += row[k]; }
        for (int k = 0; k < hc; k++) row[k] = row[k] / sum + eps;
    }
    /* Sinkhorn: one column normalization, then (iters − 1) × (row, column); +eps in every
     * denominator, and the final state is column-normalized (spec §9 pitfall 2). */
    for (int it = 0; it < cfg->hc_sinkhorn_iters; it++) {
        if (it > 0) {
            for (int j = 0; j < hc; j++) {
                double s = eps;
                for (int k = 0; k < hc; k++) s += C[j * hc + k];
                for (int k = 0; k < hc; k++) C[j * hc + k] /= s;
            }
        }
        for (int k = 0; k < hc; k++) {
            double s = eps;
            for (int j = 0; j < hc; j++) s += C[j * hc + k];
            for (int j = 0; j < hc; j++) C[j * hc + k] /= s;
        }
    }
    for (int i = 0; i < hc * hc; i++) comb[i] = (float)C[i];
    hc_collapse(cfg, h, pre, x);
}

void dsv4_hc_post(const dsv4_config *cfg, const float *y, const float *h_in, const float *post,
                  const float *comb, float *h_out) {
    const int hc = cfg->hc_mult, D = cfg->hidden_size;
    /* Output stream k sums over the FIRST index of comb (input streams j). */
    for (int k = 0; k < hc; k++) {
        float *out = h_out + (int64_t)k * D;
        for (int d = 0; d < D; d++) {
            float acc = post[k] * y[d];
            for (int j = 0; j < hc; j++) acc += comb[j * hc + k] * h_in[(int64_t)j * D + d];
            out[d] = acc;
        }
    }
}

void dsv4_hc_head(const dsv4_config *cfg, const float *h, const float *fn, const float *base,
                  const float *scale, float *y) {
    const int hc = cfg->hc_mult;
    double mixes[HC_MAX], pre[HC_MAX];
    if (hc < 1 || hc > HC_MAX) { fill_nan(y, cfg->hidden_size); return; }
    hc_mixes(cfg, h, fn, hc, mixes);
    /* No Sinkhorn, a single scalar scale, +hc_eps on the weights. */
    for (int j = 0; j < hc; j++) pre[j] = sigmoid_f64(mixes[j] * scale[0] + base[j]) + cfg->hc_eps;
    hc_collapse(cfg, h, pre, y);
}
