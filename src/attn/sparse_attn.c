/* sparse_attn.c — attention of one query over a list of shared K=V rows with a per-head
 * sink logit (spec/model.md §5.10). The sink only enlarges the denominator. */
#include <math.h>

#include "attn/attention.h"
#include "kernels/ops.h"

void dsv4_sparse_attn_row(const float *q, const float *const *rows, int n_kv, int H, int hd,
                          const float *sink, float scale, float *o, float *probs) {
    for (int h = 0; h < H; h++) {
        const float *qh = q + (size_t)h * hd;
        float *oh = o + (size_t)h * hd;
        /* z_j = (q . R_j) * hd^-0.5, m = max(max_j z_j, sink) */
        float m = sink[h];
        for (int j = 0; j < n_kv; j++) {
            probs[j] = dsv4_dot(qh, rows[j], hd) * scale;
            if (probs[j] > m) m = probs[j];
        }
        float Z = expf(sink[h] - m);
        for (int j = 0; j < n_kv; j++) {
            probs[j] = expf(probs[j] - m);
            Z += probs[j];
        }
        const float inv = 1.0f / Z;
        for (int c = 0; c < hd; c++) oh[c] = 0.0f;
        for (int j = 0; j < n_kv; j++) {
            const float p = probs[j] * inv;
            const float *rj = rows[j];
            for (int c = 0; c < hd; c++) oh[c] += p * rj[c];
        }
    }
}
