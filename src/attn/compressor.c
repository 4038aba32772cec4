/* compressor.c — KV compression by softmax pooling over windows of r positions
 * (spec/model.md §5.8; serving.md §a.4).
 *
 * One definition serves every schedule (prefill, chunked prefill, decode): for a span
 * [s, s+C) we project all rows, pool every window that closes inside the span taking
 * positions >= s from this call and positions < s from the sequence's ring, store the
 * entries, and only then overwrite the ring. Candidates are always gathered in the same
 * order (A positions ascending, then B positions ascending), so every schedule gives the
 * same bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attention.h"
#include "kernels/ops.h"
#include "util/err.h"

void dsv4_compress_pool(const float *a, const float *b, int n_cand, int d, int stride,
                        float *out) {
    for (int c = 0; c < d; c++) {
        float m = -INFINITY;
        for (int j = 0; j < n_cand; j++)
            if (b[(size_t)j * stride + c] > m) m = b[(size_t)j * stride + c];
        double num = 0.0, den = 0.0;
        for (int j = 0; j < n_cand; j++) {
            double e = exp((double)b[(size_t)j * stride + c] - (double)m);
            den += e;
            num += e * (double)a[(size_t)j * stride + c];
        }
        out[c] = (float)(num / den);
    }
}

int dsv4_compress(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                  const dsv4_batch *batch, const float *x, dsv4_err *err) {
    const dsv4_config *cfg = ctx->cfg;
    const dsv4_cache_plan *plan = dsv4_cache_get_plan(ctx->cache);
    const int layer = b->layer_id;
    const int r = indexer ? 4 : b->ratio;
    const int coff = dsv4_cfg_coff(r);
    const int d = indexer ? cfg->index_head_dim : cfg->head_dim;
    const int W = coff * d;                 /* projection width */
    const int L = plan->ring_len[layer];    /* ring slots */
    const dsv4_compressor_w *cw = indexer ? &b->idx_cmp : &b->cmp;
    const int R = batch->n_rows;
    const float eps = (float)cfg->rms_norm_eps;

    float *pa = malloc((size_t)R * W * sizeof(float));       /* (R, coff*d) a_t = x.wkv^T */
    float *pb = malloc((size_t)R * W * sizeof(float));       /* (R, coff*d) b_t = x.wgate^T + ape */
    float *ca = malloc((size_t)2 * r * d * sizeof(float));   /* (2r, d) candidate values */
    float *cb = malloc((size_t)2 * r * d * sizeof(float));   /* (2r, d) candidate scores */
    float *entry = malloc((size_t)d * sizeof(float));        /* (d) */
    if (!pa || !pb || !ca || !cb || !entry) {
        free(pa); free(pb); free(ca); free(cb); free(entry);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "compressor scratch: out of memory");
    }

    /* 1. projections of every row; ape is indexed by the absolute position t mod r */
    dsv4_linear(ctx->k, &cw->wkv, x, R, pa);
    dsv4_linear(ctx->k, &cw->wgate, x, R, pb);
    for (int i = 0; i < R; i++) {
        const float *ape = cw->ape + (size_t)(batch->pos[i] % r) * W;
        for (int c = 0; c < W; c++) pb[(size_t)i * W + c] += ape[c];
    }

    for (int si = 0; si < batch->n_spans; si++) {
        const dsv4_batch_span *sp = &batch->spans[si];
        const int64_t s = sp->start, end = sp->start + sp->n;

        /* 2. pool every window w that closes inside the span: (w+1)r - 1 in [s, end) */
        for (int64_t w = s / r; w < end / r; w++) {
            int n = 0;
            for (int half = (coff == 2 ? 0 : 1); half < 2; half++) {
                /* half 0: A series = first d channels of window w-1; half 1: own window,
                 * B series (last d channels) with overlap, all channels without */
                const int64_t w_src = half == 0 ? w - 1 : w;
                if (w_src < 0) continue; /* window 0 has no A candidates */
                const int off = (coff == 2 && half == 1) ? d : 0;
                for (int64_t p = w_src * r; p < (w_src + 1) * r; p++) {
                    const float *ra, *rb;
                    if (p >= s) {
                        const size_t row = (size_t)(sp->row0 + (p - s));
                        ra = pa + row * W;
                        rb = pb + row * W;
                    } else {
                        const float *ring = dsv4_cache_ring_row(ctx->cache, sp->seq, layer, indexer, p);
                        ra = ring;
                        rb = ring + W;
                    }
                    memcpy(ca + (size_t)n * d, ra + off, (size_t)d * sizeof(float));
                    memcpy(cb + (size_t)n * d, rb + off, (size_t)d * sizeof(float));
                    n++;
                }
            }
            dsv4_compress_pool(ca, cb, n, d, d, entry);
            /* e_w = RoPE_{w r}(RMSNorm(p_w; norm)) with the compress table */
            dsv4_rmsnorm(entry, cw->norm, d, eps, entry);
            dsv4_rope_apply(ctx->rope_cmp, entry, d, w * r, 0);
            float *dst = indexer ? dsv4_cache_idx_row(ctx->cache, sp->seq, layer, w)
                                 : dsv4_cache_cmp_row(ctx->cache, sp->seq, layer, w);
            memcpy(dst, entry, (size_t)d * sizeof(float));
        }

        /* 3. after all pooling: the ring keeps the last L positions as [a | b] */
        int64_t first = end - L > s ? end - L : s;
        for (int64_t p = first; p < end; p++) {
            const size_t row = (size_t)(sp->row0 + (p - s));
            float *ring = dsv4_cache_ring_row(ctx->cache, sp->seq, layer, indexer, p);
            memcpy(ring, pa + row * W, (size_t)W * sizeof(float));
            memcpy(ring + W, pb + row * W, (size_t)W * sizeof(float));
        }
    }
    free(pa); free(pb); free(ca); free(cb); free(entry);
    return DSV4_OK;
}
