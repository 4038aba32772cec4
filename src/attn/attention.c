/* attention.c — one attention sub-block (spec/model.md §5.5–5.11) over a batch of spans.
 *
 * Reads top to bottom like the spec: projections, compressors (indexer's and main), indexer
 * top-k, sparse attention over window rows + compressed entries with the sink, inverse
 * RoPE, grouped output projection, then the window rows go to the cache.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attention.h"
#include "kernels/ops.h"
#include "util/err.h"

/* y (R, out) = grouped projection: row block g of w (o_lora rows) applied to the g-th
 * contiguous slice (width in_g) of u (R, G*in_g). */
static int grouped_linear(dsv4_kctx *k, const dsv4_mat *w, int G, const float *u, int R,
                          int in_g, int o_lora, float *y, dsv4_err *err) {
    float *ug = malloc((size_t)R * in_g * sizeof(float));   /* (R, in_g) */
    float *vg = malloc((size_t)R * o_lora * sizeof(float));  /* (R, o_lora) */
    if (!ug || !vg) {
        free(ug); free(vg);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "output projection scratch: out of memory");
    }
    for (int g = 0; g < G; g++) {
        dsv4_mat wg;
        if (dsv4_mat_rows(w, (int64_t)g * o_lora, o_lora, &wg) != 0) {
            free(ug); free(vg);
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "wo_a: cannot slice group %d", g);
        }
        for (int i = 0; i < R; i++)
            memcpy(ug + (size_t)i * in_g, u + (size_t)i * G * in_g + (size_t)g * in_g,
                   (size_t)in_g * sizeof(float));
        dsv4_linear(k, &wg, ug, R, vg);
        for (int i = 0; i < R; i++)
            memcpy(y + (size_t)i * G * o_lora + (size_t)g * o_lora, vg + (size_t)i * o_lora,
                   (size_t)o_lora * sizeof(float));
    }
    free(ug); free(vg);
    return DSV4_OK;
}

int dsv4_attention(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                   const float *x, float *y, dsv4_err *err) {
    const dsv4_config *cfg = ctx->cfg;
    const int R = batch->n_rows, D = cfg->hidden_size, H = cfg->num_attention_heads;
    const int hd = cfg->head_dim, ql = cfg->q_lora_rank, win = cfg->sliding_window;
    const int G = cfg->o_groups, ol = cfg->o_lora_rank;
    const int nI = cfg->index_n_heads, dI = cfg->index_head_dim, topk = cfg->index_topk;
    const int layer = b->layer_id, r = b->ratio, csa = (r == 4);
    const float eps = (float)cfg->rms_norm_eps, scale = 1.0f / sqrtf((float)hd);
    const dsv4_rope *rope = r ? ctx->rope_cmp : ctx->rope_main;
    int rc = DSV4_OK;

    /* the most compressed entries any row of the batch can see */
    int64_t max_entries = 0;
    for (int si = 0; si < batch->n_spans; si++) {
        int64_t e = r ? (batch->spans[si].start + batch->spans[si].n) / r : 0;
        if (e > max_entries) max_entries = e;
    }
    const int64_t n_kv_max = win + (csa ? (max_entries < topk ? max_entries : topk) : max_entries);

    float *qr = malloc((size_t)R * ql * sizeof(float));          /* (R, q_lora) */
    float *q = malloc((size_t)R * H * hd * sizeof(float));       /* (R, H, hd) */
    float *kv = malloc((size_t)R * hd * sizeof(float));          /* (R, hd) window rows */
    float *o = malloc((size_t)R * H * hd * sizeof(float));       /* (R, H, hd) */
    float *v = malloc((size_t)R * G * ol * sizeof(float));       /* (R, G*o_lora) */
    const float **rows = malloc((size_t)n_kv_max * sizeof(float *)); /* (n_kv) K=V rows */
    float *probs = malloc((size_t)n_kv_max * sizeof(float));     /* (n_kv) */
    float *qI = NULL, *wI = NULL, *iscores = NULL;
    int *iorder = NULL, *isel = NULL;
    const float **ikeys = NULL;
    if (csa) {
        qI = malloc((size_t)R * nI * dI * sizeof(float));        /* (R, nI, dI) */
        wI = malloc((size_t)R * nI * sizeof(float));             /* (R, nI) */
        iscores = malloc((size_t)(max_entries + 1) * sizeof(float)); /* (entries) */
        iorder = malloc((size_t)(topk + 1) * sizeof(int));
        isel = malloc((size_t)(topk + 1) * sizeof(int));
        ikeys = malloc((size_t)(max_entries + 1) * sizeof(float *));
    }
    if (!qr || !q || !kv || !o || !v || !rows || !probs ||
        (csa && (!qI || !wI || !iscores || !iorder || !isel || !ikeys))) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "attention scratch: out of memory");
        goto done;
    }

    /* 1. projections (§5.5): qr = RMSNorm(x wq_a^T; q_norm); q = qr wq_b^T, per-head
     *    unweighted RMSNorm, RoPE; kv = RoPE(RMSNorm(x wkv^T; kv_norm)) */
    dsv4_linear(ctx->k, &b->wq_a, x, R, qr);
    for (int i = 0; i < R; i++) dsv4_rmsnorm(qr + (size_t)i * ql, b->q_norm, ql, eps, qr + (size_t)i * ql);
    dsv4_linear(ctx->k, &b->wq_b, qr, R, q);
    for (int i = 0; i < R; i++)
        for (int h = 0; h < H; h++) {
            float *qh = q + ((size_t)i * H + h) * hd;
            dsv4_rmsnorm(qh, NULL, hd, eps, qh);
            dsv4_rope_apply(rope, qh, hd, batch->pos[i], 0);
        }
    dsv4_linear(ctx->k, &b->wkv, x, R, kv);
    for (int i = 0; i < R; i++) {
        float *ki = kv + (size_t)i * hd;
        dsv4_rmsnorm(ki, b->kv_norm, hd, eps, ki);
        dsv4_rope_apply(rope, ki, hd, batch->pos[i], 0);
    }

    /* CSA: indexer query qI = RoPE(qr idx_wq_b^T) per head, weights wI (§5.9) */
    if (csa) {
        const float wscale = 1.0f / sqrtf((float)dI) / sqrtf((float)nI);
        dsv4_linear(ctx->k, &b->idx_wq_b, qr, R, qI);
        for (int i = 0; i < R; i++)
            for (int h = 0; h < nI; h++)
                dsv4_rope_apply(rope, qI + ((size_t)i * nI + h) * dI, dI, batch->pos[i], 0);
        dsv4_linear(ctx->k, &b->idx_weights_proj, x, R, wI);
        for (int i = 0; i < R * nI; i++) wI[i] *= wscale;
    }

    /* 2. compressors: every window closing in a span becomes an entry before any read */
    if (csa && (rc = dsv4_compress(ctx, b, 1, batch, x, err))) goto done;
    if (r && (rc = dsv4_compress(ctx, b, 0, batch, x, err))) goto done;

    /* 3–4. per row: indexer top-k (CSA), attention over window rows + entries */
    for (int si = 0; si < batch->n_spans; si++) {
        const dsv4_batch_span *sp = &batch->spans[si];
        for (int j = 0; j < sp->n; j++) {
            const int i = sp->row0 + j;
            const int64_t t = sp->start + j;
            int n_kv = 0;
            /* window rows t-win+1 .. t: earlier calls' rows from the cache, ours from kv */
            for (int64_t p = t - win + 1 > 0 ? t - win + 1 : 0; p <= t; p++)
                rows[n_kv++] = p >= sp->start ? kv + (size_t)(sp->row0 + (p - sp->start)) * hd
                                              : dsv4_cache_win_row(ctx->cache, sp->seq, layer, p);
            if (r) {
                const int64_t n_vis = (t + 1) / r; /* entries w < (t+1)//r, incl. the one t closed */
                if (csa) {
                    for (int64_t w = 0; w < n_vis; w++)
                        ikeys[w] = dsv4_cache_idx_row(ctx->cache, sp->seq, layer, w);
                    int n_sel = dsv4_indexer_topk(qI + (size_t)i * nI * dI, wI + (size_t)i * nI,
                                                  ikeys, (int)n_vis, nI, dI, topk, iscores,
                                                  iorder, isel);
                    for (int k = 0; k < n_sel; k++)
                        rows[n_kv++] = dsv4_cache_cmp_row(ctx->cache, sp->seq, layer, isel[k]);
                    if (ctx->csa_sel)
                        for (int k = 0; k < topk; k++)
                            ctx->csa_sel[(size_t)i * topk + k] = k < n_sel ? isel[k] : -1;
                } else {
                    for (int64_t w = 0; w < n_vis; w++)
                        rows[n_kv++] = dsv4_cache_cmp_row(ctx->cache, sp->seq, layer, w);
                }
            }
            float *oi = o + (size_t)i * H * hd;
            dsv4_sparse_attn_row(q + (size_t)i * H * hd, rows, n_kv, H, hd, b->attn_sink, scale,
                                 oi, probs);
            /* 5. undo RoPE at the query position (§5.11) */
            for (int h = 0; h < H; h++) dsv4_rope_apply(rope, oi + (size_t)h * hd, hd, t, 1);
        }
    }

    /* grouped output projection: v_g = o_g wo_a_g^T, y = v wo_b^T */
    if ((rc = grouped_linear(ctx->k, &b->wo_a, G, o, R, H * hd / G, ol, v, err))) goto done;
    dsv4_linear(ctx->k, &b->wo_b, v, R, y);

    /* the window rows later calls can still see go to the cache */
    for (int si = 0; si < batch->n_spans; si++) {
        const dsv4_batch_span *sp = &batch->spans[si];
        const int64_t end = sp->start + sp->n;
        for (int64_t p = end - win + 1 > sp->start ? end - win + 1 : sp->start; p < end; p++)
            memcpy(dsv4_cache_win_row(ctx->cache, sp->seq, layer, p),
                   kv + (size_t)(sp->row0 + (p - sp->start)) * hd, (size_t)hd * sizeof(float));
    }
    (void)D;

done:
    free(qr); free(q); free(kv); free(o); free(v); free(rows); free(probs);
    free(qI); free(wI); free(iscores); free(iorder); free(isel); free(ikeys);
    return rc;
}
