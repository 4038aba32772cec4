/* attention.c — one attention sub-block (spec/model.md §5.5–5.11) over a batch of spans.
 *
 * Reads top to bottom like the spec: projections, compressors (indexer's and main), indexer
 * top-k, sparse attention over window rows + compressed entries with the sink, inverse
 * RoPE, grouped output projection (attn_output.c), then the window rows and rings go to the
 * cache. The phases are separate functions (attention.h) so that the CP forward can exchange
 * rows between them; dsv4_attention runs them back to back against the cache. What one
 * query row computes is in attn_row.c; here the rows are split into thread-pool tasks.
 */
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attention.h"
#include "attn/rows_l2.h"
#include "util/arena.h"
#include "kernels/idx_approx.h"
#include "kernels/kv_rows.h"
#include "kernels/ops.h"
#include "util/err.h"
#include "util/prefetch.h"

/* ---- the cache as history source ----------------------------------------------------- */

static const void *cache_win_row(void *u, const dsv4_batch_span *sp, int layer, int64_t pos) {
    return dsv4_cache_win_row(u, sp->seq, layer, pos);
}

static void cache_ring_row(void *u, const dsv4_batch_span *sp, int layer, int indexer,
                           int64_t pos, const float **a, const float **b) {
    dsv4_cache *c = u;
    const dsv4_cache_plan *p = dsv4_cache_get_plan(c);
    const int W = indexer ? 2 * p->dI : dsv4_cfg_coff(p->ratios[p->cmp_pool[layer]]) * p->hd;
    const float *ring = dsv4_cache_ring_row(c, sp->seq, layer, indexer, pos); /* [a | b] */
    *a = ring;
    *b = ring + W;
}

static void *cache_entry(void *u, const dsv4_batch_span *sp, int layer, int indexer, int64_t w) {
    return indexer ? dsv4_cache_idx_row(u, sp->seq, layer, w)
                   : dsv4_cache_cmp_row(u, sp->seq, layer, w);
}

static const void *cache_key_run(void *u, const dsv4_batch_span *sp, int layer, int64_t w, int64_t *n_same,
                                 int64_t *stride) {
    return dsv4_cache_idx_run(u, sp->seq, layer, w, n_same, stride);
}

void dsv4_attn_src_keys(const dsv4_attn_src *src, const dsv4_batch_span *sp, int layer, int64_t k0, int64_t k1,
                        const void **keys) {
    if (!src->key_run) {
        for (int64_t k = k0; k < k1; k++) keys[k] = src->entry(src->u, sp, layer, 1, k);
        return;
    }
    /* a lookup per run (the cache: per block) instead of per key: the keys job of a CSA
     * layer at 32K context (8192 keys, both threads) took 21 us of a ~3.4 ms step key by
     * key, 7.5 by block */
    for (int64_t k = k0; k < k1;) {
        int64_t n = 1, stride = 0;
        const uint8_t *row = src->key_run(src->u, sp, layer, k, &n, &stride);
        const int64_t end = n < k1 - k ? k + n : k1;
        for (int64_t i = 0; k < end; k++, i++) keys[k] = row ? row + i * stride : NULL;
    }
}

dsv4_attn_src dsv4_attn_src_cache(dsv4_cache *cache) {
    const dsv4_cache_plan *p = dsv4_cache_get_plan(cache);
    return (dsv4_attn_src){cache_win_row, cache_ring_row, cache_entry, cache,
                           p->opts.row_bytes_per_value, p->opts.idx_bytes_per_value, cache_key_run};
}

/* ---- phase 1: projections --------------------------------------------------------------- */

/* Takes w's buffers for R rows of a layer of compress ratio r with window rows stored in
 * row_fmt; 0 when they do not fit. */
static int work_take(dsv4_arena *a, const dsv4_config *cfg, int r, int R, int row_fmt, int key_fmt,
                     dsv4_attn_work *w) {
    const int H = cfg->num_attention_heads, hd = cfg->head_dim, ql = cfg->q_lora_rank;
    const int nI = cfg->index_n_heads, dI = cfg->index_head_dim;
    const long long Wm = r ? (long long)dsv4_cfg_coff(r) * hd : 0; /* main projection width */
    memset(w, 0, sizeof *w);
    w->R = R;
    w->qr = dsv4_arena_take_n(a, (long long)R * ql, sizeof(float));
    w->q = dsv4_arena_take_n(a, (long long)R * H * hd, sizeof(float));
    w->kv = dsv4_arena_take_n(a, (long long)R * hd, sizeof(float));
    int ok = w->qr && w->q && w->kv;
    if (dsv4_row_fmt(row_fmt) != DSV4_ROW_F32) {
        w->kv_st = dsv4_arena_take_n(a, R, (size_t)dsv4_row_bytes(row_fmt, hd, cfg->qk_rope_head_dim));
        ok = ok && w->kv_st;
    }
    if (r) {
        w->pa[0] = dsv4_arena_take_n(a, R * Wm, sizeof(float));
        w->pb[0] = dsv4_arena_take_n(a, R * Wm, sizeof(float));
        ok = ok && w->pa[0] && w->pb[0];
    }
    if (r == 4) {
        w->qI = dsv4_arena_take_n(a, (long long)R * nI * dI, sizeof(float));
        w->wI = dsv4_arena_take_n(a, (long long)R * nI, sizeof(float));
        w->pa[1] = dsv4_arena_take_n(a, (long long)R * 2 * dI, sizeof(float));
        w->pb[1] = dsv4_arena_take_n(a, (long long)R * 2 * dI, sizeof(float));
        ok = ok && w->qI && w->wI && w->pa[1] && w->pb[1];
        if (dsv4_row_fmt(key_fmt) == DSV4_ROW_FP4) {
            w->qe = dsv4_arena_take_n(a, R, dsv4_idx_fp4q_bytes(nI));
            w->qe_ok = dsv4_arena_take_n(a, R, sizeof(int));
            ok = ok && w->qe && w->qe_ok;
        }
    }
    return ok;
}

/* Moves rows k = n-1 .. 0 of v (width n_per floats each) to rows to[k] (ascending,
 * to[k] >= k): the compact rows of a query subset to their packed indices, in place. */
static void expand_bytes(void *v, size_t n_per, const int *to, int n) {
    for (int k = n - 1; k >= 0; k--)
        if (to[k] != k) memcpy((char *)v + (size_t)to[k] * n_per, (char *)v + (size_t)k * n_per, n_per);
}
static void expand_rows(float *v, int64_t n_per, const int *to, int n) {
    expand_bytes(v, (size_t)n_per * sizeof(float), to, n);
}

/* Fewest heads a head group of the attend phase holds. */
#define ATTEND_MIN_GROUP_HEADS 2

/* Head groups a block of nb attending rows runs as (a task for every thread when the block
 * is small, but no fewer than ATTEND_MIN_GROUP_HEADS heads per group). */
static int attend_groups(const dsv4_config *cfg, int nb, int T) {
    const int H = cfg->num_attention_heads;
    int groups = 1;
    while ((int64_t)nb * groups < T && H % (2 * groups) == 0 && H / (2 * groups) >= ATTEND_MIN_GROUP_HEADS)
        groups *= 2;
    return groups;
}

/* The per-row work of the projections, one row per task. */
typedef struct project_job {
    const dsv4_attn_ctx *ctx;
    const dsv4_block_w *b;
    const dsv4_batch *batch;
    dsv4_attn_work *w;
    const int *qrow;       /* (nq) packed rows of the compact querying rows, NULL: all */
    int nq;
    const dsv4_rope *rope;
} project_job;

/* After the first product, row i of the call: its window KV row normed, rotated, rounded
 * as the numeric mode and the storage format keep it (this call's attention reads the
 * value the cache keeps) and packed; the compressor gates + ape at its position; and,
 * for a querying (compact) row i < nq, qr normed for the second product. */
static void project_kv_row(void *arg, int i, int tid) {
    (void)tid;
    const project_job *j = arg;
    const dsv4_config *cfg = j->ctx->cfg;
    const dsv4_numerics *nm = j->ctx->num;
    const dsv4_attn_work *w = j->w;
    const int hd = cfg->head_dim, ql = cfg->q_lora_rank, rd = cfg->qk_rope_head_dim;
    const float eps = (float)cfg->rms_norm_eps;
    if (i < j->nq) dsv4_rmsnorm(w->qr + (size_t)i * ql, j->b->q_norm, ql, eps, w->qr + (size_t)i * ql);
    float *ki = w->kv + (size_t)i * hd;
    dsv4_rmsnorm(ki, j->b->kv_norm, hd, eps, ki);
    nm->round(nm, DSV4_ACT_NORM, ki, hd);
    dsv4_rope_apply(j->rope, ki, hd, j->batch->pos[i], 0);
    if (j->b->ratio == 4) dsv4_compress_add_ape_row(j->ctx, j->b, 1, j->batch, i, w->pb[1]);
    if (j->b->ratio) dsv4_compress_add_ape_row(j->ctx, j->b, 0, j->batch, i, w->pb[0]);
    nm->round(nm, DSV4_ACT_KV, ki, hd);
    const int row_fmt = dsv4_row_fmt(j->ctx->row_fmt);
    dsv4_row_round(row_fmt, ki, hd, rd);
    if (w->kv_st) dsv4_row_pack(row_fmt, w->kv_st + (size_t)i * dsv4_row_bytes(row_fmt, hd, rd), ki, hd, rd);
}

/* Heads [h0, h0 + nh) of compact querying row i of q at position t: each head normed (its
 * own unweighted RMSNorm, heads side by side), rounded, rotated and rounded as q. A head's
 * values are its own, so any split of the heads gives the same bits. */
static void q_heads_finish(const dsv4_attn_ctx *ctx, const dsv4_rope *rope, const dsv4_attn_work *w, int i,
                           int64_t t, int h0, int nh) {
    const dsv4_config *cfg = ctx->cfg;
    const dsv4_numerics *nm = ctx->num;
    const int H = cfg->num_attention_heads, hd = cfg->head_dim;
    float *q0 = w->q + ((size_t)i * H + h0) * hd;
    dsv4_rmsnorm_rows(dsv4_kctx_simd(ctx->k), q0, NULL, hd, (float)cfg->rms_norm_eps, nh);
    for (int h = 0; h < nh; h++) {
        float *qh = q0 + (size_t)h * hd;
        nm->round(nm, DSV4_ACT_NORM, qh, hd);
        dsv4_rope_apply(rope, qh, hd, t, 0);
    }
    nm->round(nm, DSV4_ACT_Q, q0, (int64_t)nh * hd);
}

/* After the second product, compact querying row i: its heads normed, rounded, rotated
 * and rounded as q (unless w->q_heads leaves them to the head groups); CSA: the indexer
 * query heads rotated and rounded, the weights scaled. */
static void project_q_row(void *arg, int i, int tid) {
    (void)tid;
    const project_job *j = arg;
    const dsv4_config *cfg = j->ctx->cfg;
    const dsv4_numerics *nm = j->ctx->num;
    const dsv4_attn_work *w = j->w;
    const int H = cfg->num_attention_heads, nI = cfg->index_n_heads, dI = cfg->index_head_dim;
    const int64_t t = j->batch->pos[j->qrow ? j->qrow[i] : i];
    if (!w->q_heads) q_heads_finish(j->ctx, j->rope, w, i, t, 0, H);
    if (j->b->ratio == 4) {
        const float wscale = 1.0f / sqrtf((float)dI) / sqrtf((float)nI);
        for (int h = 0; h < nI; h++) {
            float *qh = w->qI + ((size_t)i * nI + h) * dI;
            dsv4_rope_apply(j->rope, qh, dI, t, 0);
            nm->round(nm, DSV4_ACT_INDEX_Q, qh, dI);
        }
        for (int h = 0; h < nI; h++) w->wI[(size_t)i * nI + h] *= wscale;
        if (w->qe) { /* FP4 keys: the row's query encoded once for every range it scores */
            const int simd = dsv4_kctx_simd(j->ctx->k);
            w->qe_ok[i] = simd >= DSV4_IDX_FP4_INT_MIN_SIMD && dsv4_attn_indexer_bounded(j->ctx, dsv4_attn_visible(4, t)) &&
                          dsv4_idx_fp4q_encode(simd, w->qI + (size_t)i * nI * dI, w->wI + (size_t)i * nI, nI, dI,
                                               w->qe + (size_t)i * dsv4_idx_fp4q_bytes(nI));
        }
    }
}

/* The products of x (wq_a, wkv, the indexer's weights_proj, the compressors' wkv/wgate) as
 * dsv4_attn_project runs them in one job, for R rows of x: nq of them query. */
static int project_ops(const dsv4_block_w *b, const float *x, const float *xq, int R, int nq,
                       const dsv4_attn_work *w, dsv4_lin_op ops[7]) {
    const int r = b->ratio, csa = (r == 4);
    int n_ops = 0;
    ops[n_ops++] = (dsv4_lin_op){&b->wq_a, xq, nq, w ? w->qr : NULL};
    ops[n_ops++] = (dsv4_lin_op){&b->wkv, x, R, w ? w->kv : NULL};
    if (csa) ops[n_ops++] = (dsv4_lin_op){&b->idx_weights_proj, xq, nq, w ? w->wI : NULL};
    if (csa) n_ops += dsv4_compress_ops(b, 1, x, R, w ? w->pa[1] : NULL, w ? w->pb[1] : NULL, ops + n_ops);
    if (r) n_ops += dsv4_compress_ops(b, 0, x, R, w ? w->pa[0] : NULL, w ? w->pb[0] : NULL, ops + n_ops);
    return n_ops;
}

void dsv4_attn_hint(dsv4_kctx *k, const dsv4_block_w *b, int R, int skip) {
    if (R != 1) return;
    dsv4_lin_op ops[7];
    const int n_ops = project_ops(b, NULL, NULL, R, R, NULL, ops);
    dsv4_lin_hint(k, ops, n_ops, DSV4_LIN_HINT_BYTES, skip);
}

int dsv4_attn_project(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                      const float *x, dsv4_attn_work *w, dsv4_err *err) {
    const dsv4_config *cfg = ctx->cfg;
    const int R = batch->n_rows, H = cfg->num_attention_heads, hd = cfg->head_dim;
    const int ql = cfg->q_lora_rank, nI = cfg->index_n_heads, dI = cfg->index_head_dim;
    const int r = b->ratio, csa = (r == 4);
    const dsv4_rope *rope = r ? ctx->rope_cmp : ctx->rope_main;
    const dsv4_numerics *nm = ctx->num;
    /* the rows that query: nq of them, compact k <-> packed qrow(k) until expanded */
    const int *qrow = ctx->q_rows, nq = qrow ? ctx->n_q : R;

    if (!work_take(ctx->scratch, cfg, r, R, ctx->row_fmt, ctx->key_fmt, w))
        return dsv4_fail(err, DSV4_ERR_NOMEM, "attention: scratch arena too small (%d rows)", R);
    const size_t mark = dsv4_arena_mark(ctx->scratch);
    const float *xq = x; /* (nq, D) the querying rows of x */
    if (qrow) {
        const int D = cfg->hidden_size;
        float *g = dsv4_arena_take_n(ctx->scratch, (int64_t)nq * D, sizeof(float));
        if (!g) return dsv4_fail(err, DSV4_ERR_NOMEM, "attention: scratch arena too small (%d rows)", R);
        for (int k = 0; k < nq; k++) memcpy(g + (size_t)k * D, x + (size_t)qrow[k] * D, (size_t)D * sizeof(float));
        xq = g;
    }

    /* Every product of x in one job: wq_a, wkv, the indexer's weights_proj and both
     * compressors' wkv/wgate (§5.5, §5.8, §5.9); then the two of qr. */
    dsv4_lin_op ops[7];
    int n_ops = project_ops(b, x, xq, R, nq, w, ops);
    dsv4_lin_op ops2[2]; /* the second product: wq_b (and the indexer's) of qr */
    int n_ops2 = 0;
    ops2[n_ops2++] = (dsv4_lin_op){&b->wq_b, w->qr, nq, w->q};
    if (csa) ops2[n_ops2++] = (dsv4_lin_op){&b->idx_wq_b, w->qr, nq, w->qI};
    /* batch-1 decode: the thread that finishes its share of the first product first, and the
     * worker through the rows' finish between them, bring in their shares of the second's
     * weights (dsv4_lin_hint: project_kv_row runs inline at one row, no job between) */
    if (R == 1) dsv4_lin_hint(ctx->k, ops2, n_ops2, DSV4_LIN_HINT_BYTES, 1);
    nm->linear(nm, ctx->k, ops, n_ops);

    /* qr = RMSNorm(x wq_a^T; q_norm); q = qr wq_b^T, per-head unweighted RMSNorm, RoPE;
     * kv = RoPE(RMSNorm(x wkv^T; kv_norm)) (§5.5). CSA: indexer query qI = RoPE(qr
     * idx_wq_b^T) per head, weights wI (§5.9). Compressor gates + ape (§5.8). Each row's
     * own arithmetic, so the rows are spread over the pool around the second product. */
    project_job pj = {ctx, b, batch, w, qrow, nq, rope};
    /* batch-1 decode: q's heads are finished by the attend phase's head groups, each its own
     * heads beside the others, instead of all 16 on the caller while the worker waits */
    w->q_heads = R == 1 && nq == 1 && !qrow && attend_groups(cfg, 1, dsv4_kctx_threads(ctx->k)) > 1;
    dsv4_kctx_parallel(ctx->k, R, project_kv_row, &pj);
    nm->linear(nm, ctx->k, ops2, n_ops2);
    /* then wo_a's, behind the heads' job, through the query rows' finish (inline at one row);
     * a compressor or indexer job before the heads makes the hint miss its job: it is
     * dropped (attend posts it again before the heads) */
    if (R == 1) dsv4_attn_hint_out(ctx->k, &b->wo_a);
    if (!w->q_heads || csa) dsv4_kctx_parallel(ctx->k, nq, project_q_row, &pj);
    if (qrow) { /* the querying rows to their packed indices, where the attend phase reads them */
        expand_rows(w->qr, ql, qrow, nq);
        expand_rows(w->q, (int64_t)H * hd, qrow, nq);
        if (csa) expand_rows(w->qI, (int64_t)nI * dI, qrow, nq);
        if (csa) expand_rows(w->wI, nI, qrow, nq);
        if (w->qe) expand_bytes(w->qe, dsv4_idx_fp4q_bytes(nI), qrow, nq);
        if (w->qe) expand_bytes(w->qe_ok, sizeof(int), qrow, nq);
    }
    if (ctx->stats) {
        ctx->stats->rows += R;
        ctx->stats->q_rows += nq;
    }
    dsv4_arena_release(ctx->scratch, mark);
    return DSV4_OK;
}

/* ---- phase 2: compressors --------------------------------------------------------------- */

int dsv4_attn_pool(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                   const dsv4_attn_work *w, const dsv4_attn_src *src, dsv4_err *err) {
    int rc = DSV4_OK;
    /* every window closing in a span becomes an entry before any read (§5.8) */
    if (b->ratio == 4)
        rc = dsv4_compress_windows(ctx, b, 1, batch, w->pa[1], w->pb[1], src, err);
    if (!rc && b->ratio)
        rc = dsv4_compress_windows(ctx, b, 0, batch, w->pa[0], w->pb[0], src, err);
    return rc;
}

/* ---- phase 3: indexer, sparse attention, output projection ------------------------------ */

/* Work inside one query row is split so that a decode step (one row, or a few) keeps
 * every thread busy: the indexer scores in ranges of entries (about 4 tasks per thread,
 * ATTEND_IDX_MIN_CHUNK..MAX_CHUNK entries), the attention in groups of heads. Rows go in
 * blocks of at most ATTEND_BLOCK_BUDGET / (entries or K=V rows per row) so a long
 * prefill never holds all rows' scores at once.
 * Each value is computed by one fixed piece of code whatever the split (an indexer
 * score depends only on its entry, a head only on its own q row; attn_ops.h fixes the
 * summation order), and the top-k runs once per row over all its scores: results do not
 * depend on the thread count, the grouping or the batch. */
#define ATTEND_IDX_MIN_CHUNK 32
#define ATTEND_KEY_CHUNK 512       /* indexer key pointers fetched per task */
#define ATTEND_IDX_MAX_CHUNK 1024
#define ATTEND_BLOCK_BUDGET ((int64_t)1 << 20)
#define ATTEND_SPLIT_MAX 8 /* rows of a block split in halves of their heads (split_task), at most */
#define ATTEND_SPLIT_ROWS 8 /* blocks of fewer rows than this many a thread take it (a decode step's;
                             * a prefill's blocks even out by stealing, a row of many a thread) */
#define ATTEND_PF_MIN_ROWS 64 /* blocks of at least this many rows (a prefill's) prefetch (row_task) */
#define ATTEND_CUT_PARTS_PER_THREAD 2 /* a lone decode row's selection parts (cut_task) a thread */
/* Entries from which a lone decode row's selection runs in parts. The parts cost the score
 * tasks their lower bounds and histograms and a job of their own, against the serial passes
 * they take off the caller: flash_quarter, both CSA layers of a batch-1 step, in one process
 * with the parts on alternate steps (Zen 5, 2 threads): at 8192 entries (32K context) the
 * scores +24 us, the cut +13, the serial gather -31 (no gain); at 32768 (128K) +36, +32,
 * -139 (-71 us a step of ~4.1 ms) */
#define ATTEND_CUT_MIN_ENTRIES 16384

typedef struct attend_job {
    const dsv4_attn_ctx *ctx;
    const dsv4_block_w *b;
    const dsv4_batch *batch;
    const dsv4_attn_work *w;
    const dsv4_attn_src *src;
    const int *row_span;      /* (R) span index of each row */
    const int *q_rows;        /* (n_q) the rows that attend (ctx->q_rows), NULL: all R */
    const void **ikeys;       /* indexer keys of the spans that need scoring (src->key_fmt) */
    const int64_t *key_tasks; /* (n, 2): span, first key of a range to fetch */
    const int64_t *ikey_off;  /* (n_spans) where span si's keys start in ikeys */
    int64_t max_entries;      /* compressed entries a row can see, at most */
    int64_t n_kv_max;         /* K=V rows of one query, at most */
    int r0;                   /* first row of the current block */
    int pf_rows;              /* row_task: rows of the block when it prefetches the next row's, else 0 */
    int idx_chunk;            /* entries per scoring task in this block */
    const int *score_tasks;   /* (n_tasks, 3): first row in block, rows, first entry of the range */
    int groups, group_heads;  /* head groups per row and heads per group */
    int q_heads;              /* heads_task finishes its heads of q first (dsv4_attn_work.q_heads) */
    /* per row of the block */
    float *iscores;           /* (B, max_entries) approximate indexer scores */
    float *iknorm;            /* (B, max_entries) their keys' norms */
    const void **rows;        /* (B, n_kv_max) K=V rows of the query (src->row_fmt) */
    int *n_kv;                /* (B) */
    /* per thread: FP8-split rows unpacked to F32 for the kernels (NULL for other formats) */
    const float **frows;      /* (threads, n_kv_max) */
    float *stage;             /* (threads, n_kv_max, hd) */
    int *iorder;              /* (threads, max_entries) work of the selection */
    int *isel;                /* (threads, topk) */
    float *ifbuf;             /* (threads, max_entries) exact rescoring near the top-k boundary */
    int *icidx;               /* (threads, max_entries) */
    const void **ickeys;      /* (threads, max_entries) */
    /* a lone decode row's bounded selection in parts (dsv4_indexer_cut; see attend) */
    dsv4_indexer_cut *icut;   /* NULL: the row selects on one thread */
    float *ilb;               /* (max_entries) the row's lower bounds */
    uint32_t *ihist;          /* (threads, 2, DSV4_INDEXER_HIST) their top digits, a thread's own counts */
    int *ibad;                /* (threads) a bound did not hold in that thread's ranges */
    int64_t *ipaths;          /* (threads, DSV4_IDX_PATHS) rows a thread's score tasks scored by each path */
    int *icut_c;              /* (max_entries) the parts' lists */
    int *icut_part0;          /* (ATTEND_CUT_PARTS_PER_THREAD threads + 1) */
    int *icut_n;              /* (ATTEND_CUT_PARTS_PER_THREAD threads) the lists' lengths */
    float *probs;             /* (threads, H * n_kv_max) */
    float *o;                 /* (R, H, hd) */
    float *ug;                /* (G, R, in_g) o group-major for the output projection, or NULL */
    int store;                /* each row's task stores its window and ring rows (attn_store_row) */
    int n_whole, n_split;     /* split_task: rows [0, n_whole) whole, the next n_split in two halves */
    atomic_int *split_done;   /* (n_split) the split row's list gathered (release) */
} attend_job;

static void attn_store_row(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                           const dsv4_attn_work *w, int si, int i);

/* The packed row of attending row k (blocks run over the attending rows). */
static int job_row(const attend_job *j, int k) { return j->q_rows ? j->q_rows[k] : k; }

/* Attending row k of the call as attn_row.c's steps read it. */
static dsv4_attn_query job_query(const attend_job *j, int k) {
    const int i = job_row(j, k);
    return dsv4_attn_query_of(j->ctx, j->b, j->batch, j->w, j->src, j->row_span[i], i);
}

static int64_t row_entries(const attend_job *j, int k) {
    return dsv4_attn_visible(j->b->ratio, j->batch->pos[job_row(j, k)]);
}

/* Pointers to indexer keys [k0, k0 + ATTEND_KEY_CHUNK) of one span (a lookup walks the
 * block table: a few divisions; thousands of keys per layer at long context, so they go
 * by the source's runs, dsv4_attn_src_keys). */
static void keys_task(void *arg, int task, int tid) {
    const attend_job *j = arg;
    const int si = (int)j->key_tasks[2 * task];
    const int64_t k0 = j->key_tasks[2 * task + 1];
    const dsv4_batch_span *sp = &j->batch->spans[si];
    const int64_t e = (sp->start + sp->n) / j->b->ratio;
    const int64_t k1 = e - k0 < ATTEND_KEY_CHUNK ? e : k0 + ATTEND_KEY_CHUNK;
    const void **keys = j->ikeys + j->ikey_off[si];
    dsv4_attn_src_keys(j->src, sp, j->b->layer_id, k0, k1, keys);
}

/* Step 2: indexer scores of entries [w0, w0 + idx_chunk) of up to DSV4_ATTN_SCORE_ROWS
 * consecutive rows of one span (one key read serves them all). */
static void score_task(void *arg, int task, int tid) {
    const attend_job *j = arg;
    const int *t = j->score_tasks + 3 * task, bi = t[0], nq = t[1], w0 = t[2];
    const dsv4_attn_query q = job_query(j, j->r0 + bi);
    float *scores = j->iscores + (size_t)bi * j->max_entries, *knorm = j->iknorm + (size_t)bi * j->max_entries;
    const int path = dsv4_attn_row_scores(&q, nq, j->ikeys + j->ikey_off[j->row_span[q.i]], w0, w0 + j->idx_chunk,
                                          scores, knorm, (size_t)j->max_entries);
    if (w0 == 0) j->ipaths[(size_t)tid * DSV4_IDX_PATHS + path] += nq; /* each row of the group once */
    if (j->icut) { /* the lone row's lower bounds and their digits, while its scores are in L1 */
        const int64_t n = row_entries(j, j->r0 + bi), w1 = w0 + j->idx_chunk < n ? w0 + j->idx_chunk : n;
        j->ibad[tid] |= dsv4_indexer_bounds_part(&j->icut->b, scores, knorm, w0, (int)w1, j->ilb,
                                                 j->ihist + (size_t)tid * 2 * DSV4_INDEXER_HIST);
    }
}

/* Step 3 of a lone decode row, in parts: part p's entries whose upper bound may reach tau
 * (dsv4_indexer_cut_part). */
static void cut_task(void *arg, int p, int tid) {
    (void)tid;
    const attend_job *j = arg;
    const int *p0 = j->icut_part0;
    dsv4_indexer_cut_part(j->icut, j->iscores, j->iknorm, p0[p], p0[p + 1], j->icut_c + p0[p], j->icut_n + p);
}

/* A lone row that selects from bounded scores among many entries (a batch-1 decode step's at
 * long context): its selection's passes over every entry go to the threads (dsv4_indexer_cut:
 * the lower bounds and their digits in the score tasks, the candidates' lists in cut_task)
 * instead of running on one while the others wait (flash_quarter at 128K context, 32768
 * entries: ~100 us a CSA layer). Returns cut with the row's bound and the threads' counts
 * zeroed when block [r0, r0 + nb) is such a row, else NULL (the row selects on one thread). */
static dsv4_indexer_cut *lone_cut_begin(const attend_job *j, dsv4_indexer_cut *cut, int r0, int nb, int n_tasks,
                                        int T) {
    const dsv4_attn_ctx *ctx = j->ctx;
    const int64_t cut_min = ctx->cut_min_entries ? ctx->cut_min_entries : ATTEND_CUT_MIN_ENTRIES;
    const int64_t n_lone = nb == 1 ? row_entries(j, r0) : 0;
    if (T < 2 || n_tasks == 0 || n_lone < cut_min || !dsv4_attn_indexer_bounded(ctx, n_lone)) return NULL;
    const int i = job_row(j, r0), nI = ctx->cfg->index_n_heads, dI = ctx->cfg->index_head_dim;
    cut->b = dsv4_idx_approx_query(j->w->qI + (size_t)i * nI * dI, j->w->wI + (size_t)i * nI, nI, dI);
    if (!cut->b.valid) return NULL;
    memset(j->ihist, 0, sizeof(uint32_t) * (size_t)T * 2 * DSV4_INDEXER_HIST);
    memset(j->ibad, 0, sizeof(int) * (size_t)T);
    return cut;
}

/* After the score tasks: the lone row's parts, the digit of its tau from the threads' counts,
 * then the candidates' lists on the threads (cut_task); when a bound did not hold the row's
 * selection scores every entry exactly instead. */
static void lone_cut_lists(attend_job *j, int r0, int T, int topk) {
    dsv4_indexer_cut *cut = j->icut;
    const int64_t n_lone = row_entries(j, r0);
    cut->bad = 0;
    for (int t = 0; t < T; t++) cut->bad |= j->ibad[t];
    cut->n_parts = ATTEND_CUT_PARTS_PER_THREAD * T;
    for (int p = 0; p <= cut->n_parts; p++) j->icut_part0[p] = (int)(n_lone * p / cut->n_parts);
    cut->part0 = j->icut_part0;
    cut->nc = j->icut_n;
    cut->c = j->icut_c;
    if (cut->bad) return;
    dsv4_indexer_cut_digit(j->ihist, 2 * T, topk, cut);
    dsv4_kctx_parallel(j->ctx->k, cut->n_parts, cut_task, j);
}

/* Step 3: the K=V list of one row. */
static void gather_task(void *arg, int bi, int tid) {
    const attend_job *j = arg;
    const dsv4_attn_query q = job_query(j, j->r0 + bi);
    /* CSA (iscores set): this row's scores, norms and keys, this thread's selection scratch */
    const float *scores = NULL, *knorm = NULL;
    const void *const *keys = NULL;
    dsv4_attn_sel_bufs sb = {0};
    if (j->iscores) {
        const size_t row = (size_t)bi * j->max_entries, per = (size_t)tid * j->max_entries;
        scores = j->iscores + row;
        knorm = j->iknorm + row;
        keys = j->ikeys + j->ikey_off[j->row_span[q.i]];
        sb = (dsv4_attn_sel_bufs){.work = j->iorder + per, .sel = j->isel + (size_t)tid * j->ctx->cfg->index_topk,
                                  .fbuf = j->ifbuf + per, .cidx = j->icidx + per, .ckeys = j->ickeys + per,
                                  .cut = j->icut, .lb = j->ilb};
    }
    j->n_kv[bi] = dsv4_attn_row_keys(&q, scores, knorm, keys, &sb, j->rows + (size_t)bi * j->n_kv_max);
    if (j->store) attn_store_row(j->ctx, j->b, j->batch, j->w, j->row_span[q.i], q.i);
}

/* Where packed row i's heads go: o (R, H, hd), or straight to the output projection's
 * group-major input (G, R, hg * hd); *hg heads a run, the runs *gs floats apart (one run
 * when not group-major). */
static float *row_out(const attend_job *j, int i, int *hg, int64_t *gs) {
    const int H = j->ctx->cfg->num_attention_heads, hd = j->ctx->cfg->head_dim;
    *hg = j->ug ? H / j->ctx->cfg->o_groups : H;
    *gs = j->ug ? (int64_t)j->batch->n_rows * *hg * hd : 0;
    return j->ug ? j->ug + (size_t)i * *hg * hd : j->o + (size_t)i * H * hd;
}

/* Step 4: heads [h0, h0 + nh) of row bi of the block. */
static void row_heads(const attend_job *j, int bi, int h0, int nh, int tid) {
    const int H = j->ctx->cfg->num_attention_heads, hd = j->ctx->cfg->head_dim;
    const dsv4_attn_query q = job_query(j, j->r0 + bi);
    int hg;
    int64_t gs;
    float *o = row_out(j, q.i, &hg, &gs);
    const void *const *rows = j->rows + (size_t)bi * j->n_kv_max;
    const int fmt = dsv4_row_fmt(q.src->row_fmt);
    if (!j->pf_rows) /* a decode row's list toward L2 (a prefill's rows are warm: neighbours share them) */
        dsv4_rows_to_l2(rows, j->n_kv[bi], dsv4_row_bytes(fmt, hd, j->ctx->cfg->qk_rope_head_dim),
                        dsv4_attn_stages_rows(fmt));
    dsv4_attn_row_heads_to(&q, rows, j->n_kv[bi], h0, nh,
                           j->frows ? j->frows + (size_t)tid * j->n_kv_max : NULL,
                           j->stage ? j->stage + (size_t)tid * j->n_kv_max * hd : NULL,
                           j->probs + (size_t)tid * H * j->n_kv_max, o, hg, gs);
}

/* Step 4: one group of heads of one row (first their q's finish, when left to them). */
static void heads_task(void *arg, int task, int tid) {
    const attend_job *j = arg;
    const int bi = task / j->groups, h0 = (task % j->groups) * j->group_heads;
    if (j->q_heads) {
        const int i = job_row(j, j->r0 + bi);
        q_heads_finish(j->ctx, j->b->ratio ? j->ctx->rope_cmp : j->ctx->rope_main, j->w, i, j->batch->pos[i], h0,
                       j->group_heads);
    }
    row_heads(j, bi, h0, j->group_heads, tid);
}

/* The next row's q (H x hd floats, read cold by its heads: the projections wrote every row
 * of the chunk long before) and its output rows (written by its heads: each write-allocates a
 * cold line) toward L2 while this row computes. A thread runs its range of rows front to
 * back (threads.c), so the next row is most likely its own next task; a stolen one is only
 * a wasted hint. A 4K prefill (flash_quarter, 2 threads): 12 % of dot_rows' samples sat on
 * the q loads of its head packing; with both hints dot_rows + wsum took ~4.5 % fewer
 * samples against the GEMMs' (BENCHMARKS.md, session 35 pf4). Nothing computed changes. */
static void row_prefetch_next(const attend_job *j, int bi) {
    const int i = job_row(j, j->r0 + bi + 1);
    const int H = j->ctx->cfg->num_attention_heads, hd = j->ctx->cfg->head_dim;
    const char *qr = (const char *)(j->w->q + (size_t)i * H * hd); /* (H, hd) */
    for (int64_t b = 0; b < (int64_t)H * hd * (int64_t)sizeof(float); b += 64) DSV4_PREFETCH(qr + b, 0, 2);
    /* row_heads' o: H / hg runs of hg * hd floats, gs apart */
    int hg;
    int64_t gs;
    const float *o = row_out(j, i, &hg, &gs);
    for (int g = 0; g < H / hg; g++) {
        const char *run = (const char *)(o + g * gs);
        for (int64_t b = 0; b < (int64_t)hg * hd * (int64_t)sizeof(float); b += 64) DSV4_PREFETCH(run + b, 1, 2);
    }
}

/* Steps 3 and 4 of one row, all heads in one group (groups == 1). */
static void row_task(void *arg, int bi, int tid) {
    const attend_job *j = arg;
    if (bi + 1 < j->pf_rows) row_prefetch_next(j, bi);
    gather_task(arg, bi, tid);
    heads_task(arg, bi, tid);
}

/* Steps 3 and 4 of a block whose rows do not divide among the threads (a batched decode
 * step of 3, 5, 7 rows on 2 threads): rows [0, n_whole) a task each, the last n_split rows
 * in two halves of their heads (as batch 1 runs a row). Tasks: the split rows' first halves
 * (each with its row's list), then the whole rows, then the split rows' second halves, which
 * wait for their list: every task that waits comes after every task that gathers, and a
 * thread walks its tasks in order, so whoever holds an unfinished gather is running it or
 * will before any wait of its own. With a task a row, 3 rows on 2 threads took the time of
 * 2 rows, one thread idle for a row (~15 us at 512 context a layer, ~35 at 4K on a CSA
 * layer: Zen 5, flash_quarter). Each head's result is its own: the bits of any split. */
static void split_task(void *arg, int t, int tid) {
    const attend_job *j = arg;
    const int H = j->ctx->cfg->num_attention_heads, half = H / 2, s = j->n_split, nw = j->n_whole;
    if (t < s) {
        gather_task(arg, nw + t, tid);
        atomic_store_explicit(&j->split_done[t], 1, memory_order_release);
        row_heads(j, nw + t, 0, half, tid);
    } else if (t < s + nw) {
        row_task(arg, t - s, tid);
    } else {
        const int k = t - s - nw;
        for (long w = 0; !atomic_load_explicit(&j->split_done[k], memory_order_acquire); w++)
            if (w > 4096) sched_yield(); /* the gathering thread may have been descheduled */
        row_heads(j, nw + k, half, H - half, tid);
    }
}

/* The sizes attend's scratch depends on: those of a call, or bounds on them (sizing). */
typedef struct attend_dims {
    int R, n_spans, T, csa;
    int stage_rows;        /* K=V rows are unpacked to F32 (dsv4_attn_stages_rows) */
    int64_t n_keys;        /* indexer keys of the spans that need scoring */
    int64_t n_key_tasks;
    int64_t n_kv_max;      /* K=V rows of one query, at most */
    int64_t max_entries;   /* compressed entries a row can see, at most */
    int64_t B;             /* rows per block */
    int64_t block_scores;  /* B * max_entries */
    int64_t block_rows;    /* B * n_kv_max */
    int64_t block_tasks;   /* B * score tasks per row */
    int ug;                /* o's group-major copy is taken (attend_job.ug) */
} attend_dims;

typedef struct attend_bufs {
    float *o;              /* (R, H, hd) */
    float *ug;             /* (R, H, hd) as (G, R, in_g) when d->ug */
    int *row_span;         /* (R) */
    int64_t *ikey_off;     /* (n_spans) */
    const void **ikeys;    /* (n_keys) */
    int64_t *key_tasks;    /* (n_key_tasks, 2) */
    const void **rows;     /* (B, n_kv_max) */
    int *n_kv;             /* (B) */
    float *probs;          /* (T, H, n_kv_max) */
    const float **frows;   /* (T, n_kv_max) when stage_rows */
    float *stage;          /* (T, n_kv_max, hd) when stage_rows */
    float *iscores;        /* CSA: (B, max_entries) approximate */
    float *iknorm;         /* CSA: (B, max_entries) key norms */
    int *iorder;           /* CSA: (T, max_entries) */
    int *isel;             /* CSA: (T, topk) */
    float *ifbuf;          /* CSA: (T, max_entries) exact rescoring */
    int *icidx;            /* CSA: (T, max_entries) */
    const void **ickeys;   /* CSA: (T, max_entries) */
    int *score_tasks;      /* CSA: (block_tasks, 3) */
    dsv4_indexer_cut *icut; /* CSA: one */
    float *ilb;            /* CSA: (max_entries) */
    uint32_t *ihist;       /* CSA: (T, 2, DSV4_INDEXER_HIST) */
    int *ibad;             /* CSA: (T) */
    int64_t *ipaths;       /* CSA: (T, DSV4_IDX_PATHS) */
    int *icut_c;           /* CSA: (max_entries) */
    int *icut_part0;       /* CSA: (ATTEND_CUT_PARTS_PER_THREAD T + 1) */
    int *icut_n;           /* CSA: (ATTEND_CUT_PARTS_PER_THREAD T) */
} attend_bufs;

static int attend_take(dsv4_arena *a, const dsv4_config *cfg, const attend_dims *d, attend_bufs *ab) {
    const int64_t H = cfg->num_attention_heads;
    memset(ab, 0, sizeof *ab);
    ab->o = dsv4_arena_take_n(a, (int64_t)d->R * H * cfg->head_dim, sizeof(float));
    ab->row_span = dsv4_arena_take_n(a, d->R, sizeof(int));
    ab->ikey_off = dsv4_arena_take_n(a, d->n_spans, sizeof(int64_t));
    ab->ikeys = dsv4_arena_take_n(a, d->n_keys, sizeof(void *));
    ab->key_tasks = dsv4_arena_take_n(a, 2 * d->n_key_tasks, sizeof(int64_t));
    ab->rows = dsv4_arena_take_n(a, d->block_rows, sizeof(void *));
    ab->n_kv = dsv4_arena_take_n(a, d->B, sizeof(int));
    ab->probs = dsv4_arena_take_n(a, d->T * H * d->n_kv_max, sizeof(float));
    int ok = ab->o && ab->row_span && ab->ikey_off && ab->ikeys && ab->key_tasks &&
             ab->rows && ab->n_kv && ab->probs;
    if (d->ug) {
        ab->ug = dsv4_arena_take_n(a, (int64_t)d->R * H * cfg->head_dim, sizeof(float));
        ok = ok && ab->ug;
    }
    if (d->stage_rows) {
        ab->frows = dsv4_arena_take_n(a, d->T * d->n_kv_max, sizeof(float *));
        ab->stage = dsv4_arena_take_n(a, d->T * d->n_kv_max * cfg->head_dim, sizeof(float));
        ok = ok && ab->frows && ab->stage;
    }
    if (d->csa) {
        ab->iscores = dsv4_arena_take_n(a, d->block_scores, sizeof(float));
        ab->iknorm = dsv4_arena_take_n(a, d->block_scores, sizeof(float));
        ab->iorder = dsv4_arena_take_n(a, d->T * d->max_entries, sizeof(int));
        ab->isel = dsv4_arena_take_n(a, (int64_t)d->T * cfg->index_topk, sizeof(int));
        ab->ifbuf = dsv4_arena_take_n(a, d->T * d->max_entries, sizeof(float));
        ab->icidx = dsv4_arena_take_n(a, d->T * d->max_entries, sizeof(int));
        ab->ickeys = dsv4_arena_take_n(a, d->T * d->max_entries, sizeof(void *));
        ab->score_tasks = dsv4_arena_take_n(a, 3 * d->block_tasks, sizeof(int));
        ok = ok && ab->iscores && ab->iknorm && ab->iorder && ab->isel && ab->ifbuf && ab->icidx && ab->ickeys &&
             ab->score_tasks;
        const int64_t parts = (int64_t)ATTEND_CUT_PARTS_PER_THREAD * d->T;
        ab->icut = dsv4_arena_take_n(a, 1, sizeof(dsv4_indexer_cut));
        ab->ilb = dsv4_arena_take_n(a, d->max_entries, sizeof(float));
        ab->ihist = dsv4_arena_take_n(a, d->T * 2 * DSV4_INDEXER_HIST, sizeof(uint32_t));
        ab->ibad = dsv4_arena_take_n(a, d->T, sizeof(int));
        ab->ipaths = dsv4_arena_take_n(a, d->T * DSV4_IDX_PATHS, sizeof(int64_t));
        ab->icut_c = dsv4_arena_take_n(a, d->max_entries, sizeof(int));
        ab->icut_part0 = dsv4_arena_take_n(a, parts + 1, sizeof(int));
        ab->icut_n = dsv4_arena_take_n(a, parts, sizeof(int));
        ok = ok && ab->icut && ab->ilb && ab->ihist && ab->ibad && ab->ipaths && ab->icut_c && ab->icut_part0 &&
             ab->icut_n;
    }
    return ok;
}

/* Rows per block: their scores (CSA) or K=V row pointers fit the budget. per_row is at
 * least max_entries and n_kv_max, so B * either is at most max(budget, per_row). */
static int64_t attend_block_rows(int R, int64_t per_row) {
    const int64_t b_max = per_row > 0 && ATTEND_BLOCK_BUDGET / per_row > 1 ? ATTEND_BLOCK_BUDGET / per_row : 1;
    return R < b_max ? R : b_max;
}

/* dsv4_attn_attend; with `store` (every row attends) each row's task also stores the row's
 * window and ring rows (dsv4_attn_store's writes, which no read of this phase touches). */
static int attend(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                  const dsv4_attn_work *w, const dsv4_attn_src *src, int store, float *y, dsv4_err *err) {
    const dsv4_config *cfg = ctx->cfg;
    const int R = batch->n_rows, H = cfg->num_attention_heads;
    const int win = cfg->sliding_window;
    const int topk = cfg->index_topk, r = b->ratio, csa = (r == 4);
    const int T = dsv4_kctx_threads(ctx->k);
    const int NQ = ctx->q_rows ? ctx->n_q : R; /* rows that attend */
    int rc = DSV4_OK;

    /* the most compressed entries any row of the batch can see; the indexer keys of the
     * spans where some row sees more than topk (the others select without scoring) */
    /* the rows' outputs group-major from their tasks when the output projection would copy
     * them so (all rows attend: no compaction) */
    attend_dims d = {.R = R, .n_spans = batch->n_spans, .T = T, .csa = csa,
                     .stage_rows = dsv4_attn_stages_rows(src->row_fmt),
                     .ug = !ctx->q_rows && dsv4_attn_output_copies(ctx->num, R) && H % cfg->o_groups == 0};
    for (int si = 0; si < batch->n_spans; si++) {
        int64_t e = r ? (batch->spans[si].start + batch->spans[si].n) / r : 0;
        if (e > d.max_entries) d.max_entries = e;
        if (csa && e > topk) {
            d.n_keys += e;
            d.n_key_tasks += (e + ATTEND_KEY_CHUNK - 1) / ATTEND_KEY_CHUNK;
        }
    }
    const int64_t max_entries = d.max_entries;
    const int64_t n_kv_max = win + (csa ? (max_entries < topk ? max_entries : topk) : max_entries);
    const int64_t chunks_per_row = (max_entries + ATTEND_IDX_MIN_CHUNK - 1) / ATTEND_IDX_MIN_CHUNK;
    const int B = (int)attend_block_rows(NQ, (csa && max_entries > n_kv_max) ? max_entries : n_kv_max);
    d.n_kv_max = n_kv_max;
    d.B = B;
    d.block_scores = (int64_t)B * max_entries;
    d.block_rows = (int64_t)B * n_kv_max;
    d.block_tasks = (int64_t)B * chunks_per_row;

    const size_t mark = dsv4_arena_mark(ctx->scratch);
    attend_bufs ab;
    if (!attend_take(ctx->scratch, cfg, &d, &ab)) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "attention: scratch arena too small (%d rows, %lld entries)",
                       R, (long long)max_entries);
        goto done;
    }
    const void **ikeys = ab.ikeys;
    int64_t *key_tasks = ab.key_tasks, *ikey_off = ab.ikey_off;
    int *row_span = ab.row_span, *score_tasks = ab.score_tasks;
    if (ab.ipaths) memset(ab.ipaths, 0, sizeof(int64_t) * (size_t)T * DSV4_IDX_PATHS);
    for (int si = 0; si < batch->n_spans; si++)
        for (int j = 0; j < batch->spans[si].n; j++) row_span[batch->spans[si].row0 + j] = si;
    int64_t nk = 0;
    int nkt = 0;
    for (int si = 0; si < batch->n_spans; si++) {
        const dsv4_batch_span *sp = &batch->spans[si];
        const int64_t e = csa ? (sp->start + sp->n) / r : 0;
        ikey_off[si] = nk;
        for (int64_t k0 = 0; e > topk && k0 < e; k0 += ATTEND_KEY_CHUNK) {
            key_tasks[2 * nkt] = si;
            key_tasks[2 * nkt++ + 1] = k0;
        }
        nk += e > topk ? e : 0;
    }

    attend_job job = {.ctx = ctx, .b = b, .batch = batch, .w = w, .src = src,
                      .row_span = row_span, .q_rows = ctx->q_rows,
                      .ikeys = ikeys, .key_tasks = key_tasks, .ikey_off = ikey_off,
                      .max_entries = max_entries,
                      .n_kv_max = n_kv_max, .score_tasks = score_tasks, .iscores = ab.iscores,
                      .rows = ab.rows, .n_kv = ab.n_kv, .frows = ab.frows, .stage = ab.stage,
                      .iknorm = ab.iknorm, .iorder = ab.iorder, .isel = ab.isel,
                      .ifbuf = ab.ifbuf, .icidx = ab.icidx, .ickeys = ab.ickeys,
                      .ilb = ab.ilb, .ihist = ab.ihist, .ibad = ab.ibad, .ipaths = ab.ipaths, .icut_c = ab.icut_c,
                      .icut_part0 = ab.icut_part0, .icut_n = ab.icut_n,
                      .probs = ab.probs, .o = ab.o, .ug = ab.ug, .store = store && !ctx->q_rows};
    if (NQ) dsv4_kctx_parallel(ctx->k, nkt, keys_task, &job);
    for (int r0 = 0; r0 < NQ; r0 += B) {
        const int nb = NQ - r0 < B ? NQ - r0 : B;
        job.r0 = r0;
        if (csa) { /* indexer scores of the rows that see more than topk entries */
            int64_t total = 0;
            for (int bi = 0; bi < nb; bi++) {
                const int64_t n_vis = row_entries(&job, r0 + bi);
                total += n_vis > topk ? n_vis : 0;
            }
            int64_t chunk = (total + 4 * T - 1) / (4 * T);
            chunk = chunk < ATTEND_IDX_MIN_CHUNK ? ATTEND_IDX_MIN_CHUNK
                  : chunk > ATTEND_IDX_MAX_CHUNK ? ATTEND_IDX_MAX_CHUNK : chunk;
            job.idx_chunk = (int)chunk;
            /* groups of up to DSV4_ATTN_SCORE_ROWS consecutive rows of one span that all
             * score; rows see more entries further on, so the last sees the most */
            int n_tasks = 0;
            for (int bi = 0; bi < nb;) {
                const int i = r0 + bi, row = job_row(&job, i);
                if (row_entries(&job, i) <= topk) {
                    bi++;
                    continue;
                }
                int nq = 1;
                const int bounded = dsv4_attn_indexer_bounded(ctx, row_entries(&job, i));
                while (nq < DSV4_ATTN_SCORE_ROWS && bi + nq < nb && job_row(&job, i + nq) == row + nq &&
                       row_span[row + nq] == row_span[row] && row_entries(&job, i + nq) > topk &&
                       dsv4_attn_indexer_bounded(ctx, row_entries(&job, i + nq)) == bounded)
                    nq++;
                int64_t n_vis = 0;
                for (int q = 0; q < nq; q++)
                    if (row_entries(&job, i + q) > n_vis) n_vis = row_entries(&job, i + q);
                for (int64_t w0 = 0; w0 < n_vis; w0 += chunk) {
                    score_tasks[3 * n_tasks] = bi;
                    score_tasks[3 * n_tasks + 1] = nq;
                    score_tasks[3 * n_tasks++ + 2] = (int)w0;
                }
                bi += nq;
            }
            job.icut = lone_cut_begin(&job, ab.icut, r0, nb, n_tasks, T);
            dsv4_kctx_parallel(ctx->k, n_tasks, score_task, &job);
            if (job.icut) lone_cut_lists(&job, r0, T, topk);
        }
        const int groups = attend_groups(cfg, nb, T);
        job.groups = groups;
        /* q's heads left by dsv4_attn_project (one row): its head groups finish their own
         * (heads_task), or here when the block runs as one group */
        job.q_heads = w->q_heads && groups > 1;
        if (w->q_heads && groups == 1)
            for (int bi = 0; bi < nb; bi++) {
                const int i = job_row(&job, r0 + bi);
                q_heads_finish(ctx, b->ratio ? ctx->rope_cmp : ctx->rope_main, w, i, batch->pos[i], 0, H);
            }
        job.group_heads = H / groups;
        const int n_split = T >= 2 && nb < ATTEND_SPLIT_ROWS * T ? nb % T : 0;
        job.pf_rows = nb >= ATTEND_PF_MIN_ROWS ? nb : 0; /* row_task's hints: a prefill's blocks */
        if (groups == 1 && n_split && (nb + n_split) % T == 0 && n_split <= ATTEND_SPLIT_MAX && H % 2 == 0 &&
            H / 2 >= ATTEND_MIN_GROUP_HEADS) {
            /* the rows do not divide among the threads: the last n_split rows in halves */
            atomic_int split_done[ATTEND_SPLIT_MAX];
            for (int k = 0; k < n_split; k++) atomic_init(&split_done[k], 0);
            job.n_whole = nb - n_split;
            job.n_split = n_split;
            job.split_done = split_done;
            dsv4_kctx_parallel(ctx->k, nb + n_split, split_task, &job);
        } else if (groups == 1) { /* a row's list and its heads in one task: one job, one barrier */
            dsv4_kctx_parallel(ctx->k, nb, row_task, &job);
        } else {
            /* batch-1 decode: wo_a's weights behind the heads' job (the gather inline) */
            if (R == 1 && nb == 1) dsv4_attn_hint_out(ctx->k, &b->wo_a);
            dsv4_kctx_parallel(ctx->k, nb, gather_task, &job);
            dsv4_kctx_parallel(ctx->k, nb * groups, heads_task, &job);
        }
        if (ctx->stats) ctx->stats->attended += nb;
    }
    if (ctx->idx_paths && ab.ipaths) /* the threads' path counts, after their last job */
        for (int t = 0; t < T; t++)
            for (int p = 0; p < DSV4_IDX_PATHS; p++) ctx->idx_paths[p] += ab.ipaths[(size_t)t * DSV4_IDX_PATHS + p];

    /* the attending rows' outputs, compact (q_rows ascending: row k moves down from
     * q_rows[k] >= k, after every row it could overwrite has moved) */
    const int64_t Hhd = (int64_t)H * cfg->head_dim;
    for (int k = 0; ctx->q_rows && k < NQ; k++)
        if (ctx->q_rows[k] != k) memcpy(ab.o + k * Hhd, ab.o + ctx->q_rows[k] * Hhd, (size_t)Hhd * sizeof(float));
    /* grouped output projection: v_g = o_g wo_a_g^T, y = v wo_b^T */
    if (NQ) rc = dsv4_attn_output_ug(ctx, b, ab.o, ab.ug, NQ, y, err);

done:
    dsv4_arena_release(ctx->scratch, mark);
    return rc;
}

int dsv4_attn_attend(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                     const dsv4_attn_work *w, const dsv4_attn_src *src, float *y, dsv4_err *err) {
    return attend(ctx, b, batch, w, src, 0, y, err);
}

/* Row i of span si to the cache: its window row if later calls can still see it (position
 * >= end - win + 1), in its storage format; its ring rows [a | b] if among the last L
 * positions. Distinct rows write distinct places (window pages by position, a ring slot
 * per position mod L), so rows may be stored in any order or concurrently. */
static void attn_store_row(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                           const dsv4_attn_work *w, int si, int i) {
    const dsv4_config *cfg = ctx->cfg;
    const int hd = cfg->head_dim, win = cfg->sliding_window, layer = b->layer_id, r = b->ratio;
    const dsv4_batch_span *sp = &batch->spans[si];
    const int64_t end = sp->start + sp->n, p = batch->pos[i];
    if (p >= end - win + 1) {
        void *dst = dsv4_cache_win_row(ctx->cache, sp->seq, layer, p);
        const int64_t row_bytes = dsv4_row_bytes(dsv4_row_fmt(ctx->row_fmt), hd, cfg->qk_rope_head_dim);
        if (w->kv_st) memcpy(dst, w->kv_st + (size_t)i * row_bytes, (size_t)row_bytes);
        else memcpy(dst, w->kv + (size_t)i * hd, (size_t)hd * sizeof(float));
    }
    /* after all pooling: each ring keeps the last L positions as [a | b] */
    const int L = r ? dsv4_cache_get_plan(ctx->cache)->ring_len[layer] : 0;
    for (int ix = 0; r && p >= end - L && ix < (r == 4 ? 2 : 1); ix++) {
        const int W = ix ? 2 * cfg->index_head_dim : dsv4_cfg_coff(r) * hd;
        float *ring = dsv4_cache_ring_row(ctx->cache, sp->seq, layer, ix, p);
        memcpy(ring, w->pa[ix] + (size_t)i * W, (size_t)W * sizeof(float));
        memcpy(ring + W, w->pb[ix] + (size_t)i * W, (size_t)W * sizeof(float));
    }
}

void dsv4_attn_store(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                     const dsv4_attn_work *w) {
    for (int si = 0; si < batch->n_spans; si++)
        for (int i = batch->spans[si].row0; i < batch->spans[si].row0 + batch->spans[si].n; i++)
            attn_store_row(ctx, b, batch, w, si, i);
}

int dsv4_attention(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                   const float *x, float *y, dsv4_err *err) {
    dsv4_attn_work w;
    const dsv4_attn_src src = dsv4_attn_src_cache(ctx->cache);
    const size_t mark = dsv4_arena_mark(ctx->scratch);
    int rc = dsv4_attn_project(ctx, b, batch, x, &w, err);
    /* with every row attending, each row's task stores its rows (no serial pass after) */
    if (!rc && !(rc = dsv4_attn_pool(ctx, b, batch, &w, &src, err)) &&
        !(rc = attend(ctx, b, batch, &w, &src, 1, y, err)) && ctx->q_rows)
        dsv4_attn_store(ctx, b, batch, &w);
    dsv4_arena_release(ctx->scratch, mark);
    return rc;
}

/* ---- sizing ----------------------------------------------------------------------------- */

size_t dsv4_attn_scratch_bytes(const dsv4_config *cfg, int ratio, int R, int n_spans,
                               int64_t max_pos, int threads, int row_fmt, int key_fmt) {
    const int csa = ratio == 4, topk = cfg->index_topk;
    /* keys are read as stored; FP4 keys: the rows' encoded queries (work_take) */
    dsv4_arena m = dsv4_arena_measuring();
    dsv4_attn_work w;
    work_take(&m, cfg, ratio, R, row_fmt, key_fmt, &w);
    const size_t after_work = dsv4_arena_mark(&m);
    /* a query subset's input rows (dsv4_attn_project, released there) */
    dsv4_arena_take_n(&m, (int64_t)R * cfg->hidden_size, sizeof(float));
    dsv4_arena_release(&m, after_work);
    /* the compressors (indexer's, then main) */
    if (csa) dsv4_arena_take_n(&m, n_spans + 1LL, sizeof(int));
    if (csa) dsv4_compress_take(&m, 4, cfg->index_head_dim, threads, NULL, NULL);
    dsv4_arena_release(&m, after_work);
    if (ratio) dsv4_arena_take_n(&m, n_spans + 1LL, sizeof(int));
    if (ratio) dsv4_compress_take(&m, ratio, cfg->head_dim, threads, NULL, NULL);
    dsv4_arena_release(&m, after_work);
    /* attend at its largest: every span of max_pos positions (see attend_block_rows) */
    const int64_t E = ratio ? max_pos / ratio : 0;
    const int64_t n_kv_max = cfg->sliding_window + (csa ? (E < topk ? E : topk) : E);
    const int64_t per_row = E > n_kv_max ? E : n_kv_max;
    int64_t block = (int64_t)R * per_row;
    const int64_t one_block = ATTEND_BLOCK_BUDGET > per_row ? ATTEND_BLOCK_BUDGET : per_row;
    if (block > one_block) block = one_block;
    attend_dims d = {.R = R, .n_spans = n_spans, .T = threads, .csa = csa,
                     .stage_rows = dsv4_attn_stages_rows(row_fmt),
                     .ug = R > 1, /* attend's group-major copy of o (the call's mode decides) */
                     .n_keys = csa && E > topk ? (int64_t)n_spans * E : 0,
                     .n_key_tasks = csa && E > topk ? (int64_t)n_spans * ((E + ATTEND_KEY_CHUNK - 1) / ATTEND_KEY_CHUNK) : 0,
                     .n_kv_max = n_kv_max, .max_entries = E, .B = R, .block_scores = block,
                     .block_rows = block, .block_tasks = block / ATTEND_IDX_MIN_CHUNK + R};
    attend_bufs ab;
    attend_take(&m, cfg, &d, &ab);
    dsv4_attn_output_take(&m, cfg, R);
    return m.peak;
}
