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
#include "util/hot.h"

/* out[c] for c in [c0, c1): the softmax pool of column c over the candidates j < n_cand,
 * whose values and scores are rows ra[j], rb[j] (when ra is given) or a + j*stride,
 * b + j*stride: one piece of arithmetic for both. Each column is its own: any split of
 * the columns gives the same bits. With vec (rows only) the columns go eight at a time
 * through it, the same arithmetic with libm's exp computed in lanes (exp_f64.h: ~6 ns of
 * each candidate's ~7 were the exp calls), the rest here. */
static inline void pool_core(dsv4_pool_cols_fn vec, const float *const *ra, const float *const *rb, const float *a,
                             const float *b, int n_cand, int c0, int c1, int stride, float *out) {
    if (vec && ra) c0 = vec(ra, rb, n_cand, c0, c1, out);
    for (int c = c0; c < c1; c++) {
        float m = -INFINITY;
        for (int j = 0; j < n_cand; j++) {
            const float bj = ra ? rb[j][c] : b[(size_t)j * stride + c];
            if (bj > m) m = bj;
        }
        double num = 0.0, den = 0.0;
        for (int j = 0; j < n_cand; j++) {
            const float bj = ra ? rb[j][c] : b[(size_t)j * stride + c];
            const float aj = ra ? ra[j][c] : a[(size_t)j * stride + c];
            double e = exp((double)bj - (double)m);
            den += e;
            num += e * (double)aj;
        }
        out[c] = (float)(num / den);
    }
}

void dsv4_compress_pool(const float *a, const float *b, int n_cand, int d, int stride,
                        float *out) {
    pool_core(NULL, NULL, NULL, a, b, n_cand, 0, d, stride, out);
}

int dsv4_compress_ops(const dsv4_block_w *b, int indexer, const float *x, int R, float *a, float *bb,
                      dsv4_lin_op *ops) {
    const dsv4_compressor_w *cw = indexer ? &b->idx_cmp : &b->cmp;
    ops[0] = (dsv4_lin_op){&cw->wkv, x, R, a};
    ops[1] = (dsv4_lin_op){&cw->wgate, x, R, bb};
    return 2;
}

DSV4_HOT_AT(dsv4_compress_add_ape_row, 0x8c0)
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

int dsv4_compress_take(dsv4_arena *a, int r, int d, int n, const float ***rows, float **ce) {
    const float **vr = dsv4_arena_take_n(a, 4LL * r * n, sizeof(float *));
    float *ve = dsv4_arena_take_n(a, (int64_t)d * n, sizeof(float));
    if (rows) *rows = vr;
    if (ce) *ce = ve;
    return vr && ve;
}

/* The candidates of entry w of span sp: their values' rows in rows[0 .. n), their scores'
 * in rows[2r .. 2r + n) (rows: 4r); returns n. */
static int window_cands(const dsv4_block_w *b, int indexer, int d, const dsv4_batch_span *sp, int64_t w,
                        const float *pa, const float *pb, const dsv4_attn_src *src, const float **rows) {
    const int layer = b->layer_id;
    const int r = indexer ? 4 : b->ratio;
    const int coff = dsv4_cfg_coff(r);
    const int W = coff * d;                 /* projection width */
    const int64_t s = sp->start;
    const float **ca = rows, **cb = rows + 2 * r; /* (2r) candidates' values and scores */
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
            ca[n] = ra + off;
            cb[n] = rb + off;
            n++;
        }
    }
    return n;
}

/* Entry w of span sp from its pooled values (entry, d): normed, rotated, rounded to its
 * storage format and stored through src. */
static void window_finish(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                          const dsv4_batch_span *sp, int64_t w, const dsv4_attn_src *src, float *entry) {
    const dsv4_config *cfg = ctx->cfg;
    const int layer = b->layer_id;
    const int r = indexer ? 4 : b->ratio;
    const int d = indexer ? cfg->index_head_dim : cfg->head_dim;
    const dsv4_compressor_w *cw = indexer ? &b->idx_cmp : &b->cmp;
    const dsv4_numerics *nm = ctx->num;
    /* e_w = RoPE_{w r}(RMSNorm(p_w; norm)) with the compress table */
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

/* Entry w of span sp from the candidates' projections, rounded to its storage format
 * and stored through src; rows (4r) and entry (d) scratch. */
static void pool_window(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                        const dsv4_batch_span *sp, int64_t w, const float *pa, const float *pb,
                        const dsv4_attn_src *src, const float **rows, float *entry) {
    const int r = indexer ? 4 : b->ratio, d = indexer ? ctx->cfg->index_head_dim : ctx->cfg->head_dim;
    const int n = window_cands(b, indexer, d, sp, w, pa, pb, src, rows);
    pool_core(dsv4_kctx_pool_cols(ctx->k), rows, rows + 2 * r, NULL, NULL, n, 0, d, 0, entry);
    window_finish(ctx, b, indexer, sp, w, src, entry);
}

int dsv4_compress_window(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                         const dsv4_batch_span *sp, int64_t w, const float *pa, const float *pb,
                         const dsv4_attn_src *src, dsv4_err *err) {
    const int r = indexer ? 4 : b->ratio, d = indexer ? ctx->cfg->index_head_dim : ctx->cfg->head_dim;
    const size_t mark = dsv4_arena_mark(ctx->scratch);
    const float **rows; /* (4r) candidate rows */
    float *entry;       /* (d) */
    const int ok = dsv4_compress_take(ctx->scratch, r, d, 1, &rows, &entry);
    if (ok) pool_window(ctx, b, indexer, sp, w, pa, pb, src, rows, entry);
    dsv4_arena_release(ctx->scratch, mark);
    return ok ? DSV4_OK : dsv4_fail(err, DSV4_ERR_NOMEM, "compressor: scratch arena too small");
}

/* Every window closing in a batch's spans, one per task: each entry is its own window's
 * arithmetic, written to its own place, so any split gives the same bits. */
typedef struct windows_job {
    const dsv4_attn_ctx *ctx;
    const dsv4_block_w *b;
    int indexer, r, d;
    const dsv4_batch *batch;
    const int *first;      /* (n_spans + 1) the task of each span's first window */
    const float *pa, *pb;
    const dsv4_attn_src *src;
    const float **rows;    /* (threads, 4r) */
    float *entry;          /* (threads, d) */
} windows_job;

/* One window's columns in chunks (a decode step: one window closes per span). Its pool is
 * d columns x up to 2r candidates of libm's exp (CSA's indexer and main pools 1024 + 4096,
 * HCA's 65536 at d = 512): at batch 1 on Zen 5 a closing window held the main thread ~40 us
 * a CSA layer and 375 us in the HCA layer while the other thread waited (a step's
 * timeline, BENCHMARKS.md session 12 glue). */
typedef struct cols_job {
    dsv4_pool_cols_fn vec;              /* pool_core's */
    const float *const *ca, *const *cb; /* (n) candidates' values and scores */
    int n, d, chunk;
    float *entry;                       /* (d) */
} cols_job;

static void cols_task(void *arg, int t, int tid) {
    (void)tid;
    const cols_job *j = arg;
    const int c0 = t * j->chunk, c1 = c0 + j->chunk < j->d ? c0 + j->chunk : j->d;
    pool_core(j->vec, j->ca, j->cb, NULL, NULL, j->n, c0, c1, 0, j->entry);
}

static void window_task(void *arg, int t, int tid) {
    const windows_job *j = arg;
    int si = 0;
    while (t >= j->first[si + 1]) si++;
    const dsv4_batch_span *sp = &j->batch->spans[si];
    const int64_t w = sp->start / j->r + (t - j->first[si]);
    pool_window(j->ctx, j->b, j->indexer, sp, w, j->pa, j->pb, j->src, j->rows + (size_t)tid * 4 * j->r,
                j->entry + (size_t)tid * j->d);
}

int dsv4_compress_windows(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                          const dsv4_batch *batch, const float *pa, const float *pb,
                          const dsv4_attn_src *src, dsv4_err *err) {
    const int r = indexer ? 4 : b->ratio, d = indexer ? ctx->cfg->index_head_dim : ctx->cfg->head_dim;
    const int T = dsv4_kctx_threads(ctx->k);
    const size_t mark = dsv4_arena_mark(ctx->scratch);
    const float **rows; /* (T, 4r) */
    float *entry;       /* (T, d) */
    int *first = dsv4_arena_take_n(ctx->scratch, batch->n_spans + 1LL, sizeof(int));
    if (!dsv4_compress_take(ctx->scratch, r, d, T, &rows, &entry) || !first) {
        dsv4_arena_release(ctx->scratch, mark);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "compressor: scratch arena too small");
    }
    /* every window w that closes inside a span: (w+1)r - 1 in [s, end) */
    first[0] = 0;
    for (int si = 0; si < batch->n_spans; si++) {
        const dsv4_batch_span *sp = &batch->spans[si];
        first[si + 1] = first[si] + (int)((sp->start + sp->n) / r - sp->start / r);
    }
    const windows_job j = {ctx, b, indexer, r, d, batch, first, pa, pb, src, rows, entry};
    const int n = first[batch->n_spans];
    if (n > 1) {
        dsv4_kctx_parallel(ctx->k, n, window_task, (void *)&j);
    } else if (n == 1 && T > 1) { /* one window: its columns over the threads, two chunks each */
        int si = 0;
        while (first[si + 1] == 0) si++;
        const dsv4_batch_span *sp = &batch->spans[si];
        const int64_t w = sp->start / r;
        const int nc = window_cands(b, indexer, d, sp, w, pa, pb, src, rows);
        const int chunk = (d + 2 * T - 1) / (2 * T);
        cols_job cj = {dsv4_kctx_pool_cols(ctx->k), rows, rows + 2 * r, nc, d, chunk, entry};
        dsv4_kctx_parallel(ctx->k, (d + chunk - 1) / chunk, cols_task, &cj);
        window_finish(ctx, b, indexer, sp, w, src, entry);
    } else if (n == 1) {
        window_task((void *)&j, 0, dsv4_kctx_tid(ctx->k));
    }
    dsv4_arena_release(ctx->scratch, mark);
    return DSV4_OK;
}
