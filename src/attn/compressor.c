/* compressor.c — KV compression by softmax pooling over windows of r positions
 * (spec/model.md §5.8; serving.md §a.4).
 *
 * One definition serves every schedule (prefill, chunked prefill, decode, context-parallel
 * segments): for a span [s, s+C) we project all rows, pool every window that closes inside
 * the span taking positions >= s from this call and positions < s from the span's history
 * source (the sequence's ring, or CP exchange buffers), store the entries, and only after
 * all pooling overwrite the ring (attention.c, store phase). Candidates are always gathered
 * in the same order (A positions ascending, then B positions ascending), so every schedule
 * gives the same bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attention.h"
#include "kernels/kv_rows.h"
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

int dsv4_compress_ops(const dsv4_block_w *b, int indexer, const float *x, int R, float *a, float *bb,
                      dsv4_lin_op *ops) {
    const dsv4_compressor_w *cw = indexer ? &b->idx_cmp : &b->cmp;
    ops[0] = (dsv4_lin_op){&cw->wkv, x, R, a};
    ops[1] = (dsv4_lin_op){&cw->wgate, x, R, bb};
    return 2;
}

void dsv4_compress_add_ape_row(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                               const dsv4_batch *batch, int i, float *bb) {
    const int r = indexer ? 4 : b->ratio;
    const int d = indexer ? ctx->cfg->index_head_dim : ctx->cfg->head_dim;
    const int W = dsv4_cfg_coff(r) * d;     /* projection width */
    const dsv4_compressor_w *cw = indexer ? &b->idx_cmp : &b->cmp;
    /* ape is indexed by the absolute position t mod r */
    const float *ape = cw->ape + (size_t)(batch->pos[i] % r) * W;
    for (int c = 0; c < W; c++) bb[(size_t)i * W + c] += ape[c];
}

int dsv4_compress_take(dsv4_arena *a, int r, int d, float **ca, float **cb, float **ce) {
    float *va = dsv4_arena_take_n(a, 2LL * r * d, sizeof(float));
    float *vb = dsv4_arena_take_n(a, 2LL * r * d, sizeof(float));
    float *ve = dsv4_arena_take_n(a, d, sizeof(float));
    if (ca) *ca = va;
    if (cb) *cb = vb;
    if (ce) *ce = ve;
    return va && vb && ve;
}

/* Entry w of span sp from the candidates' projections, rounded to its storage format
 * and stored through src; ca, cb (2r, d) and entry (d) scratch. */
static void pool_window(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                        const dsv4_batch_span *sp, int64_t w, const float *pa, const float *pb,
                        const dsv4_attn_src *src, float *ca, float *cb, float *entry) {
    const dsv4_config *cfg = ctx->cfg;
    const int layer = b->layer_id;
    const int r = indexer ? 4 : b->ratio;
    const int coff = dsv4_cfg_coff(r);
    const int d = indexer ? cfg->index_head_dim : cfg->head_dim;
    const int W = coff * d;                 /* projection width */
    const dsv4_compressor_w *cw = indexer ? &b->idx_cmp : &b->cmp;
    const dsv4_numerics *nm = ctx->num;
    const int64_t s = sp->start;
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
                src->ring_row(src->u, sp, layer, indexer, p, &ra, &rb);
            }
            memcpy(ca + (size_t)n * d, ra + off, (size_t)d * sizeof(float));
            memcpy(cb + (size_t)n * d, rb + off, (size_t)d * sizeof(float));
            n++;
        }
    }
    /* e_w = RoPE_{w r}(RMSNorm(p_w; norm)) with the compress table */
    dsv4_compress_pool(ca, cb, n, d, d, entry);
    nm->round(nm, DSV4_ACT_POOLED, entry, d);
    dsv4_rmsnorm(entry, cw->norm, d, (float)cfg->rms_norm_eps, entry);
    nm->round(nm, DSV4_ACT_NORM, entry, d);
    dsv4_rope_apply(ctx->rope_cmp, entry, d, w * r, 0);
    nm->round(nm, indexer ? DSV4_ACT_INDEX_KEY : DSV4_ACT_ENTRY, entry, d);
    /* rounded to its storage format here, so every reader sees the stored value */
    const int rd = indexer ? 0 : cfg->qk_rope_head_dim;
    dsv4_row_round(dsv4_row_fmt(indexer ? ctx->key_fmt : ctx->row_fmt), entry, d, rd);
    dsv4_row_pack(dsv4_row_fmt(indexer ? src->key_fmt : src->row_fmt),
                  src->entry(src->u, sp, layer, indexer, w), entry, d, rd);
}

int dsv4_compress_window(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                         const dsv4_batch_span *sp, int64_t w, const float *pa, const float *pb,
                         const dsv4_attn_src *src, dsv4_err *err) {
    const int r = indexer ? 4 : b->ratio, d = indexer ? ctx->cfg->index_head_dim : ctx->cfg->head_dim;
    const size_t mark = dsv4_arena_mark(ctx->scratch);
    float *ca, *cb, *entry; /* (2r, d) candidate values and scores, (d) the entry */
    const int ok = dsv4_compress_take(ctx->scratch, r, d, &ca, &cb, &entry);
    if (ok) pool_window(ctx, b, indexer, sp, w, pa, pb, src, ca, cb, entry);
    dsv4_arena_release(ctx->scratch, mark);
    return ok ? DSV4_OK : dsv4_fail(err, DSV4_ERR_NOMEM, "compressor: scratch arena too small");
}

int dsv4_compress_windows(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                          const dsv4_batch *batch, const float *pa, const float *pb,
                          const dsv4_attn_src *src, dsv4_err *err) {
    const int r = indexer ? 4 : b->ratio, d = indexer ? ctx->cfg->index_head_dim : ctx->cfg->head_dim;
    const size_t mark = dsv4_arena_mark(ctx->scratch);
    float *ca, *cb, *entry; /* (2r, d) candidate values and scores, (d) the entry */
    if (!dsv4_compress_take(ctx->scratch, r, d, &ca, &cb, &entry)) {
        dsv4_arena_release(ctx->scratch, mark);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "compressor: scratch arena too small");
    }
    /* every window w that closes inside a span: (w+1)r - 1 in [s, end) */
    for (int si = 0; si < batch->n_spans; si++) {
        const dsv4_batch_span *sp = &batch->spans[si];
        for (int64_t w = sp->start / r; w < (sp->start + sp->n) / r; w++)
            pool_window(ctx, b, indexer, sp, w, pa, pb, src, ca, cb, entry);
    }
    dsv4_arena_release(ctx->scratch, mark);
    return DSV4_OK;
}
