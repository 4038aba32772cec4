/* attention.h — one attention sub-block of any kind (SWA, CSA, HCA) over a batch of spans
 * (spec/model.md §5.5–5.11): projections, compressors, lightning indexer, sparse attention
 * with sink, inverse RoPE and grouped output projection, plus the cache writes of §a.4. */
#ifndef DSV4_ATTN_ATTENTION_H
#define DSV4_ATTN_ATTENTION_H

#include "attn/rope.h"
#include "cache/cache.h"
#include "engine/batch.h"
#include "kernels/kctx.h"
#include "model/model.h"

typedef struct dsv4_attn_ctx {
    const dsv4_config *cfg;
    dsv4_kctx *k;
    dsv4_cache *cache;
    const dsv4_rope *rope_main;   /* ratio-0 layers and the MTP block */
    const dsv4_rope *rope_cmp;    /* ratio > 0 layers (YaRN) */
    int *csa_sel;                 /* optional (R, index_topk) selections out, -1 padded */
} dsv4_attn_ctx;

/* y (R, D) = attention of layer b over x (R, D), the attention input (after attn_norm).
 * Reads history from the cache and writes this call's window rows, compressed entries,
 * indexer keys and compressor rings. */
int dsv4_attention(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                   const float *x, float *y, dsv4_err *err);

/* ---- pieces, exposed for unit tests ------------------------------------------------- */

/* Compressor of one layer (main: indexer = 0, d = hd; indexer: d = dI) for every span of
 * the batch: a = x.wkv^T, b = x.wgate^T + ape[t mod r] for all rows, pool every window that
 * closes inside a span (candidates < s from the ring), normalise, rotate at w*r, store the
 * entries in CMP (or IDX), then write the ring rows. */
int dsv4_compress(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                  const dsv4_batch *batch, const float *x, dsv4_err *err);

/* Pools one window's candidates: a, b are (n_cand, d) with b = -inf for absent ones;
 * out (d) = per-channel softmax over candidates of b, weighting a. */
void dsv4_compress_pool(const float *a, const float *b, int n_cand, int d, int stride,
                        float *out);

/* Lightning indexer top-k for one query: score[w] = sum_h wI[h] * relu(qI[h] . K_w) over
 * w < n_cand; writes the selected entry indices ascending to sel, returns their count
 * (all of them when n_cand <= topk; ties go to the lower index). */
int dsv4_indexer_topk(const float *qI, const float *wI, const float *const *keys, int n_cand,
                      int nI, int dI, int topk, float *scores, int *order, int *sel);

/* Attention of one query row over n_kv rows of width hd (K = V) with a per-head sink:
 * q (H, hd), o (H, hd). rows[j] points to row j. */
void dsv4_sparse_attn_row(const float *q, const float *const *rows, int n_kv, int H, int hd,
                          const float *sink, float scale, float *o, float *probs);

#endif
