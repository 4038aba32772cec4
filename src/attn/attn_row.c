/* attn_row.c — attention of one query row (spec/model.md §5.6–5.11): the math every
 * schedule of a sub-block runs.
 *
 * For the query at position t:
 *   1. the windows t closes are pooled into entries (§5.8; CSA: indexer's, then main);
 *   2. CSA: the indexer scores every entry t sees and keeps the index_topk best (§5.9):
 *      approximate scores with an error bound first, then exact scores of the entries
 *      near the top-k boundary (dsv4_indexer_select_verified), the exact selection;
 *   3. the K=V list is t's window rows, ascending, then its compressed entries (§5.6, §5.7);
 *   4. every head attends over the list with its sink (§5.10) and is rotated back (§5.11).
 *
 * dsv4_attn_row runs the four steps for one row, serially. The batched phases of
 * attention.c run the same functions split over the thread pool: step 1 for every window
 * of a span before any row reads (dsv4_attn_pool), step 2 for ranges of entries of up to
 * DSV4_ATTN_SCORE_ROWS rows that share their keys, step 3 per row, step 4 per group of
 * heads. Every value is computed by the same code whatever the split (a score depends
 * only on its entry, a head only on its own q row, attn_ops.h fixes the summation order),
 * so a row is the same bits serially and in any batch.
 *
 * Rows and keys come in their storage format (kernels/kv_rows.h). The kernels read F32
 * and BF16 as stored (attn_ops.h, idx_scores.h); FP8-split K=V rows are unpacked into the
 * caller's stage buffers for step 4.
 */
#include <math.h>
#include <string.h>

#include "attn/attention.h"
#include "kernels/idx_approx.h"
#include "kernels/idx_scores.h"
#include "kernels/kv_rows.h"
#include "util/err.h"
#include "util/hot.h"

int64_t dsv4_attn_visible(int ratio, int64_t t) {
    return ratio ? (t + 1) / ratio : 0; /* including the entry t itself closed */
}

dsv4_attn_query dsv4_attn_query_of(const dsv4_attn_ctx *ctx, const dsv4_block_w *b,
                                   const dsv4_batch *batch, const dsv4_attn_work *w,
                                   const dsv4_attn_src *src, int span, int i) {
    return (dsv4_attn_query){.ctx = ctx, .b = b, .batch = batch, .w = w, .src = src,
                             .sp = &batch->spans[span], .i = i, .t = batch->pos[i],
                             .ops = dsv4_attn_ops_for(dsv4_kctx_simd(ctx->k)),
                             .expf_rows = dsv4_kctx_expf(ctx->k)};
}

int dsv4_attn_stages_rows(int fmt) { return dsv4_row_fmt(fmt) == DSV4_ROW_FP8; }

/* rows[0, n) (width d, rd rope channels) in format fmt unpacked into stage (n, d), out[j]
 * pointing at row j there. */
static void unpack_rows(int fmt, const void *const *rows, int n, int d, int rd, float *stage, const float **out) {
    for (int j = 0; j < n; j++) {
        float *x = stage + (size_t)j * d;
        dsv4_row_unpack(fmt, x, rows[j], d, rd);
        out[j] = x;
    }
}

int dsv4_attn_row_scores(const dsv4_attn_query *q, int nq, const void *const *keys, int64_t w0,
                         int64_t w1, float *scores, float *knorm, size_t ss) {
    const dsv4_config *cfg = q->ctx->cfg;
    const int nI = cfg->index_n_heads, dI = cfg->index_head_dim;
    /* the keys [w0, w0 + n) some row sees; lim relative to w0 */
    int64_t lim[DSV4_ATTN_SCORE_ROWS], n = 0;
    for (int k = 0; k < nq; k++) {
        const int64_t l = dsv4_attn_visible(q->b->ratio, q->batch->pos[q->i + k]) - w0;
        lim[k] = l > 0 ? l : 0;
        if (lim[k] > n) n = lim[k];
    }
    if (n > w1 - w0) n = w1 - w0;
    const int simd = dsv4_kctx_simd(q->ctx->k), key_fmt = dsv4_row_fmt(q->src->key_fmt);
    const float *qI = q->w->qI + (size_t)q->i * nI * dI, *wI = q->w->wI + (size_t)q->i * nI;
    if (!dsv4_attn_indexer_bounded(q->ctx, dsv4_attn_visible(q->b->ratio, q->t))) {
        dsv4_idx_scores(simd, q->ops, qI, (size_t)nI * dI, wI, (size_t)nI, nq, lim, keys + w0, key_fmt, 0, n, nI,
                        dI, scores + w0, ss);
        return DSV4_IDX_PATH_EXACT;
    }
    if (key_fmt != DSV4_ROW_FP4) {
        dsv4_idx_approx(simd, qI, (size_t)nI * dI, wI, (size_t)nI, nq, lim, keys + w0, key_fmt, 0, n, nI, dI,
                        scores + w0, knorm + w0, ss);
        return DSV4_IDX_PATH_F32;
    }
    const void *enc[DSV4_ATTN_SCORE_ROWS];
    int encoded = q->w->qe != NULL;
    for (int k = 0; k < nq && encoded; k++) {
        encoded = q->w->qe_ok[q->i + k];
        enc[k] = q->w->qe + (size_t)(q->i + k) * dsv4_idx_fp4q_bytes(nI);
    }
    if (encoded && dsv4_idx_approx_fp4_enc(simd, enc, nq, lim, keys + w0, 0, n, nI, dI, scores + w0, knorm + w0, ss))
        return DSV4_IDX_PATH_INT;
    return dsv4_idx_approx(simd, qI, (size_t)nI * dI, wI, (size_t)nI, nq, lim, keys + w0, key_fmt, 0, n, nI, dI,
                           scores + w0, knorm + w0, ss)
               ? DSV4_IDX_PATH_INT
               : DSV4_IDX_PATH_UNPACK;
}

int dsv4_attn_indexer_bounded(const dsv4_attn_ctx *ctx, int64_t n_vis) {
    const dsv4_config *c = ctx->cfg;
    if (ctx->indexer_mode != DSV4_INDEXER_AUTO) return ctx->indexer_mode == DSV4_INDEXER_BOUNDED;
    return (int64_t)c->index_n_heads * c->index_head_dim >= DSV4_INDEXER_BOUNDED_MIN_MACS &&
           n_vis >= (int64_t)DSV4_INDEXER_BOUNDED_MIN_RATIO * c->index_topk;
}

/* A CSA row's top-k entries from step 2 into sb->sel, ascending; returns their count. */
static int select_entries(const dsv4_attn_query *q, const float *scores, const float *knorm, const void *const *keys,
                          const dsv4_attn_sel_bufs *sb, int64_t n_vis) {
    const dsv4_config *cfg = q->ctx->cfg;
    const int topk = cfg->index_topk, nI = cfg->index_n_heads, dI = cfg->index_head_dim;
    if (!dsv4_attn_indexer_bounded(q->ctx, n_vis))
        return dsv4_indexer_select(scores, (int)n_vis, topk, sb->work, sb->sel);
    const dsv4_indexer_query iq = {.simd = dsv4_kctx_simd(q->ctx->k), .ops = q->ops,
                                   .qI = q->w->qI + (size_t)q->i * nI * dI, .wI = q->w->wI + (size_t)q->i * nI,
                                   .nI = nI, .dI = dI, .keys = keys, .key_fmt = dsv4_row_fmt(q->src->key_fmt)};
    if (sb->cut)
        return dsv4_indexer_select_cut(&iq, scores, knorm, sb->lb, sb->cut, (int)n_vis, topk, sb->fbuf, sb->cidx,
                                       sb->ckeys, sb->work, sb->sel);
    return dsv4_indexer_select_verified(&iq, scores, knorm, (int)n_vis, topk, sb->fbuf, sb->cidx, sb->ckeys, sb->work,
                                        sb->sel);
}

DSV4_HOT_AT(dsv4_attn_row_keys, 0xc90)
int dsv4_attn_row_keys(const dsv4_attn_query *q, const float *scores, const float *knorm,
                       const void *const *keys, const dsv4_attn_sel_bufs *sb, const void **rows) {
    const dsv4_config *cfg = q->ctx->cfg;
    const dsv4_attn_src *src = q->src;
    const dsv4_batch_span *sp = q->sp;
    const int hd = cfg->head_dim, win = cfg->sliding_window, topk = cfg->index_topk;
    const int layer = q->b->layer_id;
    const int64_t t = q->t, n_vis = dsv4_attn_visible(q->b->ratio, t);
    /* this call's window rows in the source's format */
    const int fmt = dsv4_row_fmt(src->row_fmt);
    const int64_t row_bytes = dsv4_row_bytes(fmt, hd, cfg->qk_rope_head_dim);
    const uint8_t *kv = fmt == DSV4_ROW_F32 ? (const uint8_t *)q->w->kv : q->w->kv_st;
    int n_kv = 0;
    /* window rows max(0, t-win+1) .. t: this call's from kv, earlier ones from the source */
    for (int64_t p = t - win + 1 > 0 ? t - win + 1 : 0; p <= t; p++)
        rows[n_kv++] = p >= sp->start ? kv + (sp->row0 + (p - sp->start)) * row_bytes
                                      : src->win_row(src->u, sp, layer, p);
    if (q->b->ratio == 4) { /* CSA: the indexer's selection, ascending */
        const int *sel = sb->sel;
        const int n_sel = select_entries(q, scores, knorm, keys, sb, n_vis);
        for (int k = 0; k < n_sel; k++) rows[n_kv++] = src->entry(src->u, sp, layer, 0, sel[k]);
        if (q->ctx->csa_sel)
            for (int k = 0; k < topk; k++) q->ctx->csa_sel[(size_t)q->i * topk + k] = k < n_sel ? sel[k] : -1;
    } else { /* HCA: every visible entry; SWA: none */
        for (int64_t e = 0; e < n_vis; e++) rows[n_kv++] = src->entry(src->u, sp, layer, 0, e);
    }
    return n_kv;
}

void dsv4_attn_row_heads_to(const dsv4_attn_query *q, const void *const *rows, int n_kv, int h0, int nh,
                            const float **frows, float *stage, float *probs, float *o, int hg, int64_t gs) {
    const dsv4_config *cfg = q->ctx->cfg;
    const int H = cfg->num_attention_heads, hd = cfg->head_dim;
    const dsv4_rope *rope = q->b->ratio ? q->ctx->rope_cmp : q->ctx->rope_main;
    int fmt = dsv4_row_fmt(q->src->row_fmt);
    if (dsv4_attn_stages_rows(fmt)) {
        unpack_rows(fmt, rows, n_kv, hd, cfg->qk_rope_head_dim, stage, frows);
        rows = (const void *const *)frows;
        fmt = DSV4_ROW_F32;
    }
    dsv4_sparse_attn_heads_to(q->ops, q->w->q + ((size_t)q->i * H + h0) * hd, rows, fmt, n_kv, nh, hd,
                              q->b->attn_sink + h0, 1.0f / sqrtf((float)hd), o, h0, hg, gs, probs, q->ctx->num,
                              q->expf_rows);
    for (int h = h0; h < h0 + nh; h++)
        dsv4_rope_apply(rope, o + (int64_t)(h / hg) * gs + (int64_t)(h % hg) * hd, hd, q->t, 1);
}

void dsv4_attn_row_heads(const dsv4_attn_query *q, const void *const *rows, int n_kv, int h0, int nh,
                         const float **frows, float *stage, float *probs, float *o) {
    dsv4_attn_row_heads_to(q, rows, n_kv, h0, nh, frows, stage, probs, o, q->ctx->cfg->num_attention_heads, 0);
}

int dsv4_attn_sel_take(dsv4_arena *a, int64_t n_score, int64_t n_vis, int topk, dsv4_attn_sel_bufs *sb) {
    sb->work = dsv4_arena_take_n(a, n_vis, sizeof(int));
    sb->sel = dsv4_arena_take_n(a, topk, sizeof(int));
    sb->fbuf = dsv4_arena_take_n(a, n_score, sizeof(float));
    sb->cidx = dsv4_arena_take_n(a, n_score, sizeof(int));
    sb->ckeys = dsv4_arena_take_n(a, n_score, sizeof(void *));
    sb->cut = NULL;
    sb->lb = NULL;
    return sb->work && sb->sel && sb->fbuf && sb->cidx && sb->ckeys;
}

/* One row's scratch. */
typedef struct row_bufs {
    const void **keys;   /* (visible) indexer keys, when the indexer scores */
    float *scores;       /* (visible) approximate */
    float *knorm;        /* (visible) key norms, when the indexer scores */
    dsv4_attn_sel_bufs sb;
    const void **rows;   /* (n_kv_max) the K=V list */
    const float **frows; /* (n_kv_max) the list as F32, FP8-split rows only */
    float *stage;        /* (n_kv_max, hd) its values, FP8-split rows only */
    float *probs;        /* (H, n_kv_max) */
} row_bufs;

static int row_take(dsv4_arena *a, const dsv4_attn_query *q, row_bufs *rb) {
    const dsv4_config *cfg = q->ctx->cfg;
    const int topk = cfg->index_topk, r = q->b->ratio;
    const int64_t n_vis = dsv4_attn_visible(r, q->t);
    const int score = r == 4 && n_vis > topk; /* the indexer scores only past topk entries */
    const int64_t n_kv_max = cfg->sliding_window + (score ? topk : n_vis);
    const int stage_rows = dsv4_attn_stages_rows(q->src->row_fmt);
    rb->keys = dsv4_arena_take_n(a, score ? n_vis : 0, sizeof(void *));
    rb->scores = dsv4_arena_take_n(a, n_vis, sizeof(float));
    rb->knorm = dsv4_arena_take_n(a, score ? n_vis : 0, sizeof(float));
    if (!dsv4_attn_sel_take(a, score ? n_vis : 0, n_vis, topk, &rb->sb)) return 0;
    rb->rows = dsv4_arena_take_n(a, n_kv_max, sizeof(void *));
    rb->frows = dsv4_arena_take_n(a, stage_rows ? n_kv_max : 0, sizeof(float *));
    rb->stage = dsv4_arena_take_n(a, stage_rows ? n_kv_max * cfg->head_dim : 0, sizeof(float));
    rb->probs = dsv4_arena_take_n(a, cfg->num_attention_heads * n_kv_max, sizeof(float));
    return rb->keys && rb->scores && rb->knorm && rb->rows &&
           rb->frows && rb->stage && rb->probs;
}

int dsv4_attn_row(const dsv4_attn_query *q, float *o, dsv4_err *err) {
    const dsv4_attn_ctx *ctx = q->ctx;
    const dsv4_config *cfg = ctx->cfg;
    const int r = q->b->ratio, layer = q->b->layer_id;
    const int64_t n_vis = dsv4_attn_visible(r, q->t);
    const size_t mark = dsv4_arena_mark(ctx->scratch);
    int rc = DSV4_OK;

    /* 1. the windows t closes (§5.8): the indexer's, then the main compressor's */
    if (r && (q->t + 1) % r == 0) {
        if (r == 4)
            rc = dsv4_compress_window(ctx, q->b, 1, q->sp, q->t / r, q->w->pa[1], q->w->pb[1], q->src, err);
        if (!rc)
            rc = dsv4_compress_window(ctx, q->b, 0, q->sp, q->t / r, q->w->pa[0], q->w->pb[0], q->src, err);
        if (rc) return rc;
    }
    row_bufs rb;
    if (!row_take(ctx->scratch, q, &rb)) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "attention row: scratch arena too small (%lld entries)",
                       (long long)n_vis);
        goto done;
    }
    /* 2. CSA past topk entries: the indexer scores every visible one (§5.9) */
    if (r == 4 && n_vis > cfg->index_topk) {
        for (int64_t e = 0; e < n_vis; e++) rb.keys[e] = q->src->entry(q->src->u, q->sp, layer, 1, e);
        dsv4_attn_row_scores(q, 1, rb.keys, 0, n_vis, rb.scores, rb.knorm, (size_t)n_vis);
    }
    /* 3. the K=V list; 4. every head over it */
    const int n_kv = dsv4_attn_row_keys(q, rb.scores, rb.knorm, rb.keys, &rb.sb, rb.rows);
    dsv4_attn_row_heads(q, rb.rows, n_kv, 0, cfg->num_attention_heads, rb.frows, rb.stage, rb.probs, o);
done:
    dsv4_arena_release(ctx->scratch, mark);
    return rc;
}
