/* sparse_attn.c — attention of one query over a list of shared K=V rows with a per-head
 * sink logit (spec/model.md §5.10). The sink only enlarges the denominator.
 *
 * The scores are one dot_rows call over all heads (each level blocks heads and rows so
 * that each K=V row, read from the cache in its storage format, is loaded once per group
 * of heads); the value sum keeps blocks of heads x columns in registers over all rows.
 * Per head and per element the arithmetic is the plain formula in a fixed order
 * (attn_ops.h), so the result does not depend on how heads are grouped into calls. */
#include <math.h>

#include "attn/attention.h"
#include "kernels/kv_rows.h"
#include "util/hot.h"

/* Heads per group of the softmax: their running max and sum are separate chains, so
 * interleaving them over j pays an add's latency once per group, not per head (the sum
 * over 192-640 rows was a chain of dependent adds per head, ~3 cycles a value). */
#define SOFTMAX_GROUP 8

/* The largest of x[0, n) by x > max (NaNs never win), -inf when there is none: 16
 * running maxima side by side, so the compiler keeps them in vector registers. */
DSV4_HOT_AT(raw_max, 0xed0)
static float raw_max(const float *x, int n) {
    float mp[16];
    for (int k = 0; k < 16; k++) mp[k] = -INFINITY;
    int j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++) mp[k] = x[j + k] > mp[k] ? x[j + k] : mp[k];
    for (; j < n; j++) mp[0] = x[j] > mp[0] ? x[j] : mp[0];
    float m = -INFINITY;
    for (int k = 0; k < 16; k++) m = mp[k] > m ? mp[k] : m;
    return m;
}

/* The softmax of heads [0, nh) of probs (nh, n_kv) in place, in groups of SOFTMAX_GROUP
 * heads (attn_ops.h's softmax computes the same values in a level's lanes). */
static inline __attribute__((always_inline)) void softmax_groups(float *probs, int n_kv, int nh, const float *sink,
                                                                 float scale, const dsv4_numerics *nm,
                                                                 dsv4_expf_rows_fn ex) {
    for (int h0 = 0; h0 < nh; h0 += SOFTMAX_GROUP) {
        const int G = nh - h0 < SOFTMAX_GROUP ? nh - h0 : SOFTMAX_GROUP;
        float *ph[SOFTMAX_GROUP], m[SOFTMAX_GROUP], Z[SOFTMAX_GROUP];
        for (int l = 0; l < G; l++) {
            ph[l] = probs + (size_t)(h0 + l) * n_kv;
            m[l] = sink[h0 + l];
        }
        /* z_j = (q . R_j) * hd^-0.5, m = max(max_j z_j, sink). Rounding is monotone, so for
         * a positive scale max_j z_j is the largest raw score times the scale: a read-only
         * max over the raw scores, and z_j - m in one pass below. (Where m is a zero its
         * sign may differ from the running max's, and z - 0 is the same for either zero.) */
        for (int l = 0; l < G; l++) {
            if (scale > 0 && scale < INFINITY) {
                const float mz = raw_max(ph[l], n_kv) * scale;
                if (mz > m[l]) m[l] = mz;
            } else {
                for (int j = 0; j < n_kv; j++) {
                    const float zj = ph[l][j] * scale;
                    if (zj > m[l]) m[l] = zj;
                }
            }
        }
        for (int l = 0; l < G; l++) Z[l] = expf(sink[h0 + l] - m[l]);
        if (ex) { /* the same exponentials 16 at a time, then the same sums in j order */
            for (int l = 0; l < G; l++) {
                for (int j = 0; j < n_kv; j++) {
                    const float zj = ph[l][j] * scale; /* rounded before the difference */
                    ph[l][j] = zj - m[l];
                }
                ex(ph[l], n_kv, ph[l]);
            }
            for (int j = 0; j < n_kv; j++)
                for (int l = 0; l < G; l++) Z[l] += ph[l][j];
        } else {
            for (int l = 0; l < G; l++)
                for (int j = 0; j < n_kv; j++) {
                    const float zj = ph[l][j] * scale;
                    ph[l][j] = expf(zj - m[l]);
                    Z[l] += ph[l][j];
                }
        }
        for (int l = 0; l < G; l++) {
            const float inv = 1.0f / Z[l];
            /* normalised probabilities: the weights of the value sum */
            for (int j = 0; j < n_kv; j++) ph[l][j] *= inv;
            nm->round(nm, DSV4_ACT_PROBS, ph[l], n_kv); /* the P.V weights; Z stays as summed */
        }
    }
}

DSV4_HOT_AT(dsv4_sparse_attn_heads_to, 0x2e0)
void dsv4_sparse_attn_heads_to(const dsv4_attn_ops *ops, const float *q, const void *const *rows, int fmt,
                               int n_kv, int nh, int hd, const float *sink, float scale, float *o, int h0, int hg,
                               int64_t gs, float *probs, const dsv4_numerics *nm, dsv4_expf_rows_fn ex) {
    /* raw scores q_h . R_j into probs (nh, n_kv) */
    ops->dot_rows(q, (size_t)hd, nh, rows, fmt, n_kv, hd, probs, (size_t)n_kv);
    if (ops->softmax && ex && scale > 0 && scale < INFINITY) { /* the same values in lanes */
        ops->softmax(probs, n_kv, nh, sink, scale, ex);
        for (int l = 0; l < nh; l++) nm->round(nm, DSV4_ACT_PROBS, probs + (size_t)l * n_kv, n_kv);
    } else {
        softmax_groups(probs, n_kv, nh, sink, scale, nm, ex);
    }
    /* o_h = sum_j p_hj R_j, rows in ascending j: one call for heads at a stride of hd, else
     * one per head position r in a group (its heads gs apart); a head's sum is its own */
    if ((h0 + nh - 1) / hg == h0 / hg) {
        ops->wsum(o + (int64_t)(h0 / hg) * gs + (int64_t)(h0 % hg) * hd, (size_t)hd, nh, probs, (size_t)n_kv, rows,
                  fmt, n_kv, hd);
        return;
    }
    for (int r = 0; r < hg; r++) {
        const int l0 = ((r - h0 % hg) % hg + hg) % hg; /* the first head l of position r */
        if (l0 >= nh) continue;
        const int h = h0 + l0;
        ops->wsum(o + (int64_t)(h / hg) * gs + (int64_t)r * hd, (size_t)gs, (nh - l0 + hg - 1) / hg,
                  probs + (size_t)l0 * n_kv, (size_t)hg * n_kv, rows, fmt, n_kv, hd);
    }
}

void dsv4_sparse_attn_heads(const dsv4_attn_ops *ops, const float *q, const void *const *rows, int fmt,
                            int n_kv, int nh, int hd, const float *sink, float scale, float *o,
                            float *probs, const dsv4_numerics *nm, dsv4_expf_rows_fn ex) {
    dsv4_sparse_attn_heads_to(ops, q, rows, fmt, n_kv, nh, hd, sink, scale, o, 0, nh, 0, probs, nm, ex);
}

void dsv4_sparse_attn_row(const dsv4_attn_ops *ops, const float *q, const float *const *rows,
                          int n_kv, int H, int hd, const float *sink, float scale, float *o,
                          float *probs) {
    dsv4_sparse_attn_heads(ops, q, (const void *const *)rows, DSV4_ROW_F32, n_kv, H, hd, sink, scale, o, probs,
                           dsv4_numerics_exact(), NULL);
}
