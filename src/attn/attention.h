/* attention.h — one attention sub-block of any kind (SWA, CSA, HCA) over a batch of spans
 * (spec/model.md §5.5–5.11): projections, compressors, lightning indexer, sparse attention
 * with sink, inverse RoPE and grouped output projection, plus the cache writes of §a.4.
 *
 * The sub-block runs in four phases so that context-parallel prefill (serving.md §c) can
 * put its exchanges between them:
 *
 *   project   per row: qr, q, kv, indexer qI/wI, compressor projections a_t, b_t
 *   pool      every window closing inside a span becomes an entry (CMP) / key (IDX)
 *   attend    indexer top-k, sparse attention, inverse RoPE, output projection
 *   store     window rows and compressor rings of the span's tail go to the cache
 *
 * The per-row math of pool and attend is written once, for one query row, in attn_row.c
 * (dsv4_attn_row and its steps); the phases run those steps over the thread pool.
 *
 * Everything a span reads that its own rows do not give (window rows and projections of
 * positions before the span start, compressed entries and indexer keys) comes through a
 * dsv4_attn_src: the sequence's cache in a single process, exchange buffers under CP.
 */
#ifndef DSV4_ATTN_ATTENTION_H
#define DSV4_ATTN_ATTENTION_H

#include "attn/batch.h"
#include "attn/rope.h"
#include "cache/cache.h"
#include "kernels/attn_ops.h"
#include "kernels/idx_approx.h"
#include "kernels/kctx.h"
#include "model/model.h"
#include "model/numerics.h"
#include "util/arena.h"

typedef struct dsv4_attn_ctx {
    const dsv4_config *cfg;
    dsv4_kctx *k;
    const dsv4_numerics *num;     /* products and roundings of the engine's numeric mode */
    dsv4_cache *cache;
    const dsv4_rope *rope_main;   /* ratio-0 layers and the MTP block */
    const dsv4_rope *rope_cmp;    /* ratio > 0 layers (YaRN) */
    int *csa_sel;                 /* optional (R, index_topk) selections out, -1 padded */
    dsv4_arena *scratch;          /* every buffer of the sub-block comes from here (sized by
                                   * dsv4_attn_scratch_bytes); released to its mark on return */
    /* KV storage (kernels/kv_rows.h DSV4_ROW_*, 0 = F32): window rows and compressed entries
     * are rounded to row_fmt, indexer keys to key_fmt, where they are produced */
    int row_fmt, key_fmt;
    /* Optional query-row subset: only rows q_rows[0 .. n_q) (ascending packed indices)
     * project their queries, attend and get an output, y is then (n_q, D). Every row still
     * makes its window row, compressor projections and entries (all a later call reads),
     * so the cache is the same; for rows whose outputs nobody reads (the MTP block's rows
     * that only fill its cache). NULL: every row. */
    const int *q_rows;
    int n_q;
    struct dsv4_attn_stats *stats; /* optional counts of what the phases computed */
    /* How the indexer finds its top-k (the same entries every way): DSV4_INDEXER_AUTO
     * (0), _EXACT (every score exact) or _BOUNDED (approximate scores with an error bound,
     * exact ones near the boundary; dsv4_indexer_select_verified). */
    int indexer_mode;
    /* a lone decode row's bounded selection runs in parts over the threads (dsv4_indexer_cut)
     * from this many entries; 0: attention.c's default (the tests set 1) */
    int64_t cut_min_entries;
    /* optional (DSV4_IDX_PATHS): the rows whose selections each indexer path scored are
     * added here at the end of each attend phase (the engine's dsv4_engine_indexer_stats) */
    int64_t *idx_paths;
} dsv4_attn_ctx;

/* The indexer's paths, as dsv4_attn_row_scores returns and the counts add them: every score
 * exact; bounded (approximate scores, exact near the boundary) over F32 / BF16 keys, over FP4
 * keys by integer block dots, or over FP4 keys unpacked to F32. */
enum { DSV4_IDX_PATH_EXACT, DSV4_IDX_PATH_F32, DSV4_IDX_PATH_INT, DSV4_IDX_PATH_UNPACK, DSV4_IDX_PATHS };

enum { DSV4_INDEXER_AUTO = 0, DSV4_INDEXER_EXACT = 1, DSV4_INDEXER_BOUNDED = 2 };
/* AUTO bounds the scores of a row that sees at least DSV4_INDEXER_BOUNDED_MIN_RATIO times
 * index_topk entries, where an exact score costs at least DSV4_INDEXER_BOUNDED_MIN_MACS
 * multiply-adds (index_n_heads * index_head_dim). Below the MACs, the exact rescoring of the
 * topk best and a few more and the second selection cost about what the cheaper scores save.
 * Past topk entries the bounded path pays at any count since the one-query kernel and the
 * radix thresholds (session 32): bench_indexer, exact time over bounded (flash_quarter's
 * 16 x 128, top 512, one thread, 1 / 8 queries a block): 544 entries 1.62 / 1.89, 1024
 * 1.45-1.57 / 1.65-1.86, 2048 1.44 / 1.86, 8192 1.54 / 2.08; a CSA row at 4K context (1088
 * entries) took the exact scores under the old ratio 4 (BENCHMARKS.md, session 36 iscore). */
#define DSV4_INDEXER_BOUNDED_MIN_MACS 1024
#define DSV4_INDEXER_BOUNDED_MIN_RATIO 1

/* Whether ctx's indexer bounds the scores of a row that sees n_vis entries (see above);
 * every row of a scoring block must give the same answer. */
int dsv4_attn_indexer_bounded(const dsv4_attn_ctx *ctx, int64_t n_vis);

/* What the sub-blocks of a context computed, added up (caller-owned; tests use it to
 * show that rows outside a query subset are skipped, not just discarded). */
typedef struct dsv4_attn_stats {
    int64_t rows;       /* rows projected for the cache (dsv4_attn_project) */
    int64_t q_rows;     /* rows whose queries were projected */
    int64_t attended;   /* rows whose heads attended (dsv4_attn_attend) */
} dsv4_attn_stats;

/* History of a span. Every function gets the span (its sequence slot and start) and the
 * layer id; positions passed to win_row / ring_row are always below sp->start. Window rows
 * and compressed entries are handed out in format row_fmt, indexer keys in key_fmt
 * (kernels/kv_rows.h; 0 = F32): the cache's storage, or F32 exchange buffers under CP. */
typedef struct dsv4_attn_src {
    /* window KV row (hd values) of position pos */
    const void *(*win_row)(void *u, const dsv4_batch_span *sp, int layer, int64_t pos);
    /* compressor projections of position pos: *a and *b each point at coff*d floats
     * (main: d = hd; indexer: d = dI, coff = 2); ape is included in b */
    void (*ring_row)(void *u, const dsv4_batch_span *sp, int layer, int indexer, int64_t pos,
                     const float **a, const float **b);
    /* compressed entry w (main: hd values) or indexer key w (dI values): the pool phase
     * writes new ones through it, the attend phase reads all visible ones */
    void *(*entry)(void *u, const dsv4_batch_span *sp, int layer, int indexer, int64_t w);
    void *u;
    int row_fmt, key_fmt;
    /* optional (NULL: entry, key by key): indexer key w and how many keys from it on lie
     * *stride bytes apart (*n_same >= 1), for reading thousands of keys a layer at long context */
    const void *(*key_run)(void *u, const dsv4_batch_span *sp, int layer, int64_t w, int64_t *n_same,
                           int64_t *stride);
} dsv4_attn_src;

/* The single-process source: everything from the sequence's pages in `cache`. */
dsv4_attn_src dsv4_attn_src_cache(dsv4_cache *cache);
/* keys[k] = src's indexer key k of span sp's sequence, k in [k0, k1): by key_run's runs where
 * the source has them, else key by key. */
void dsv4_attn_src_keys(const dsv4_attn_src *src, const dsv4_batch_span *sp, int layer, int64_t k0, int64_t k1,
                        const void **keys);

/* Per-row values of one layer for R rows, produced by dsv4_attn_project. With a query
 * subset (ctx->q_rows) qr, q, qI and wI hold the subset's rows only, at their packed
 * indices; the other rows of them are not written. */
typedef struct dsv4_attn_work {
    int R;
    float *qr;      /* (R, q_lora) after q_norm (feeds the indexer too) */
    float *q;       /* (R, H, hd) after head norm and RoPE */
    float *kv;      /* (R, hd) window rows, rounded to ctx->row_fmt */
    uint8_t *kv_st; /* (R, row bytes) the same rows packed in ctx->row_fmt; NULL for F32 */
    float *qI;      /* (R, nI, dI) CSA only */
    float *wI;      /* (R, nI) CSA only, scaled by dI^-0.5 nI^-0.5 */
    uint8_t *qe;    /* (R, dsv4_idx_fp4q_bytes(nI)) CSA with FP4 keys only: each bounded row's qI and
                     * wI encoded once for the integer scores (dsv4_idx_fp4q_encode), not once a
                     * range of entries; NULL otherwise */
    int *qe_ok;     /* (R) 1 where qe holds row i's encoding (else its scores unpack the keys) */
    float *pa[2];   /* compressor a_t: [0] main (R, coff*hd), [1] indexer (R, 2*dI) */
    float *pb[2];   /* compressor b_t (+ ape), same shapes */
    int q_heads;    /* 1: q's heads still want their norm and RoPE, which the attend phase's head
                     * groups run, each on its own heads (batch-1 decode: dsv4_attn_project) */
} dsv4_attn_work;

/* Phase 1: takes w from ctx->scratch (the caller releases it after the last phase) and
 * fills it from x (R, D), the attention input (after attn_norm). */
/* Batch-1 decode (R == 1): posts the pool's threads prefetch hints for their shares of the
 * projections of x that dsv4_attn_project starts with (dsv4_lin_hint), the job `skip` pool
 * jobs after the next; other R: nothing. Never changes a result. */
void dsv4_attn_hint(struct dsv4_kctx *k, const dsv4_block_w *b, int R, int skip);
/* Batch-1 decode: hints for the one-row product of w (a block's wo_a or wo_b) as the job
 * after the next. */
void dsv4_attn_hint_out(struct dsv4_kctx *k, const dsv4_mat *w);

int dsv4_attn_project(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                      const float *x, dsv4_attn_work *w, dsv4_err *err);
/* Phase 2: compressors (CSA: indexer's, then main; HCA: main). */
int dsv4_attn_pool(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                   const dsv4_attn_work *w, const dsv4_attn_src *src, dsv4_err *err);
/* Phase 3: y (R, D) from the indexer, sparse attention and output projection; (n_q, D),
 * row k that of q_rows[k], with a query subset (ctx->q_rows). */
int dsv4_attn_attend(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                     const dsv4_attn_work *w, const dsv4_attn_src *src, float *y, dsv4_err *err);
/* Phase 4 (single process): window rows [max(s, s+C-win+1), s+C) to WIN and ring rows
 * [max(s, s+C-L), s+C) to the STATE slot of every span. */
void dsv4_attn_store(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                     const dsv4_attn_work *w);

/* y (R, D) = attention of layer b over x (R, D), all four phases against the cache. */
int dsv4_attention(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const dsv4_batch *batch,
                   const float *x, float *y, dsv4_err *err);

/* The most scratch bytes one attention sub-block of compress ratio `ratio` takes from its
 * arena (all four phases) for calls of at most R rows in n_spans spans, every position
 * below max_pos, on a kernel context of `threads` threads. */
size_t dsv4_attn_scratch_bytes(const dsv4_config *cfg, int ratio, int R, int n_spans,
                               int64_t max_pos, int threads, int row_fmt, int key_fmt);

/* ---- one query row (attn_row.c): the math of §5.6–5.11 the phases split over threads -- */

#define DSV4_ATTN_SCORE_ROWS 8 /* rows one dsv4_attn_row_scores call may score at once */

/* Query row i of a call as the per-row functions read it. */
typedef struct dsv4_attn_query {
    const dsv4_attn_ctx *ctx;
    const dsv4_block_w *b;
    const dsv4_batch *batch;
    const dsv4_attn_work *w;     /* the call's projected rows (dsv4_attn_project) */
    const dsv4_attn_src *src;    /* history before the span */
    const dsv4_batch_span *sp;   /* the span holding the row */
    int i;                       /* packed row index */
    int64_t t;                   /* its position */
    const dsv4_attn_ops *ops;    /* dot kernels of the context's SIMD level */
    dsv4_expf_rows_fn expf_rows; /* libm's expf over an array at that level, or NULL */
} dsv4_attn_query;

dsv4_attn_query dsv4_attn_query_of(const dsv4_attn_ctx *ctx, const dsv4_block_w *b,
                                   const dsv4_batch *batch, const dsv4_attn_work *w,
                                   const dsv4_attn_src *src, int span, int i);

/* Compressed entries query t sees in a layer of compress ratio `ratio` (§5.7): (t+1) / r. */
int64_t dsv4_attn_visible(int ratio, int64_t t);

/* Step 2 (CSA): approximate indexer scores of entries [w0, w1) for rows q->i .. q->i+nq-1
 * of q's span (nq <= DSV4_ATTN_SCORE_ROWS), each row only up to the entries it sees, into
 * scores[k * ss + w], and the keys' norms into knorm[k * ss + w] (kernels/idx_approx.h).
 * keys: the span's indexer keys from entry 0, read by the kernel in their storage format
 * (src->key_fmt). FP4 keys: the rows' queries as encoded once (q->w->qe) where they all are.
 * Returns the path that scored (DSV4_IDX_PATH_*). */
int dsv4_attn_row_scores(const dsv4_attn_query *q, int nq, const void *const *keys, int64_t w0,
                         int64_t w1, float *scores, float *knorm, size_t ss);
/* Step 3's scratch for one row: work (visible), sel (topk) and, when the indexer scores,
 * fbuf, cidx and ckeys (visible) for dsv4_indexer_select_verified. */
typedef struct dsv4_attn_sel_bufs {
    int *work, *sel;
    float *fbuf;
    int *cidx;
    const void **ckeys;
    const struct dsv4_indexer_cut *cut; /* a bounded row's selection in parts (dsv4_indexer_select_cut), or NULL */
    const float *lb;             /* (visible) its lower bounds, with cut */
} dsv4_attn_sel_bufs;
/* Takes them from a (n_score: visible when the row scores, else 0); 0 when it is full. */
int dsv4_attn_sel_take(dsv4_arena *a, int64_t n_score, int64_t n_vis, int topk, dsv4_attn_sel_bufs *sb);
/* Step 3: the row's K=V list into rows (win + min(visible, topk) for CSA, win + visible
 * otherwise; src->row_fmt): window rows ascending, then the entries (CSA: the exact top-k
 * from step 2's scores and norms, which hold every visible entry's when there are more
 * than topk, rescoring the boundary's entries exactly from keys, the span's indexer keys;
 * also written to ctx->csa_sel). Returns its length. */
int dsv4_attn_row_keys(const dsv4_attn_query *q, const float *scores, const float *knorm,
                       const void *const *keys, const dsv4_attn_sel_bufs *sb, const void **rows);
/* Step 4: heads [h0, h0+nh) of the row attend over rows (§5.10) and are rotated back at t
 * (§5.11) into o (H, hd), the row's output. The kernels read F32 and BF16 rows as stored;
 * FP8-split rows are first unpacked into frows (n_kv) and stage (n_kv, hd), scratch used
 * only then (dsv4_attn_stages_rows). probs (nh, n_kv) scratch. */
void dsv4_attn_row_heads(const dsv4_attn_query *q, const void *const *rows, int n_kv, int h0, int nh,
                         const float **frows, float *stage, float *probs, float *o);
/* The same with head h's output at o + (h / hg) * gs + (h % hg) * hd (the output
 * projection's group-major input: hg heads a group, gs = R * hg * hd, o at the row). */
void dsv4_attn_row_heads_to(const dsv4_attn_query *q, const void *const *rows, int n_kv, int h0, int nh,
                            const float **frows, float *stage, float *probs, float *o, int hg, int64_t gs);
/* True when rows in format fmt (0 = F32) go through dsv4_attn_row_heads' F32 stage. */
int dsv4_attn_stages_rows(int fmt);
/* All four steps of one row, serially: pools the windows t closes (indexer's, then main),
 * scores and selects, attends with every head: o (H, hd). Rows of a span must run in
 * ascending order (an entry is pooled by the row that closes it, before later rows read
 * it). Scratch from ctx->scratch, released on return. */
int dsv4_attn_row(const dsv4_attn_query *q, float *o, dsv4_err *err);

/* §5.11's grouped output projection: y (R, D) from the rows' head outputs o (R, H, hd). */
int dsv4_attn_output(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const float *o, int R, float *y,
                     dsv4_err *err);
/* The same with o's group-major copy ug (G, R, H / G * hd) when the caller made it (or NULL;
 * attn_output.c). */
int dsv4_attn_output_ug(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const float *o, const float *ug, int R,
                        float *y, dsv4_err *err);
/* Whether the projection of R rows goes through group-major copies of its input and output
 * (then a caller that writes o group-major saves the input's copy). */
int dsv4_attn_output_copies(const dsv4_numerics *nm, int R);
/* Takes from a what the projection of R rows takes (for a measuring arena); 0 when full. */
int dsv4_attn_output_take(dsv4_arena *a, const dsv4_config *cfg, int R);

/* ---- pieces, exposed for unit tests and the CP forward ------------------------------ */

/* Compressor projections of R rows, a = x.wkv^T and b = x.wgate^T (R, coff*d), as the two
 * products it writes to ops (returns 2) so the caller can run them in one job with its
 * own; then b += ape[t mod r] for each row i of the batch (bb: (R, coff*d)). */
int dsv4_compress_ops(const dsv4_block_w *b, int indexer, const float *x, int R, float *a, float *bb,
                      dsv4_lin_op *ops);
void dsv4_compress_add_ape_row(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                               const dsv4_batch *batch, int i, float *bb);

/* The compressor's scratch for ratio r and entry width d, n pools at once: *rows (n, 4r)
 * pointers to a window's candidates' values and scores, and the entries being made *ce
 * (n, d) (either may be NULL: sizing only). Returns 0 when they do not fit. */
int dsv4_compress_take(dsv4_arena *a, int r, int d, int n, const float ***rows, float **ce);

/* Pools every window that closes inside a span (candidates >= s from a/b, < s from the
 * source), normalises, rotates at w*r and stores the entry through src->entry; the
 * windows are spread over ctx's threads (one per task, scratch per thread). */
int dsv4_compress_windows(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                          const dsv4_batch *batch, const float *a, const float *bb,
                          const dsv4_attn_src *src, dsv4_err *err);
/* The same for window w of span sp alone (it closes inside the span). */
int dsv4_compress_window(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer,
                         const dsv4_batch_span *sp, int64_t w, const float *a, const float *bb,
                         const dsv4_attn_src *src, dsv4_err *err);

/* Pools one window's candidates: a, b are (n_cand, d) with b = -inf for absent ones;
 * out (d) = per-channel softmax over candidates of b, weighting a. */
void dsv4_compress_pool(const float *a, const float *b, int n_cand, int d, int stride,
                        float *out);

/* Lightning indexer top-k for one query: score[w] = sum_h wI[h] * relu(qI[h] . K_w) over
 * w < n_cand; writes the selected entry indices ascending to sel, returns their count
 * (all of them when n_cand <= topk, without scoring; ties go to the lower index).
 * scores and work (n_cand) scratch, sel (topk). ops: the dot kernels (kernels/attn_ops.h). */
int dsv4_indexer_topk(const dsv4_attn_ops *ops, const float *qI, const float *wI,
                      const float *const *keys, int n_cand, int nI, int dI, int topk,
                      float *scores, int *work, int *sel);
/* Its two halves. scores[w] for w in [w0, w1) only (each score depends on nothing but
 * its entry, so ranges can be scored on different threads); then the selection over
 * all n_cand scores (work: (n_cand) scratch). */
void dsv4_indexer_scores(const dsv4_attn_ops *ops, const float *qI, const float *wI,
                         const float *const *keys, int w0, int w1, int nI, int dI,
                         float *scores);
int dsv4_indexer_select(const float *scores, int n_cand, int topk, int *work, int *sel);
/* The k-th largest of x[0, n) (1 <= k <= n, no NaN), as a value (of -0 and +0 either may
 * come back: they compare equal): a radix select on the values' order-preserving bits in
 * three passes (the top 11 bits of all n, the next 11 and the last 10 of those sharing the
 * digits found so far), no comparison branches. work (n) scratch. */
float dsv4_indexer_kth_largest(const float *x, int n, int k, int *work);
/* The exact selection from approximate scores (kernels/idx_approx.h). approx and knorm
 * (n_cand): dsv4_idx_approx's scores and key norms for one query; the query and its keys
 * below. Every entry whose upper bound falls below the topk-th largest lower bound is out
 * (topk entries score at least that, strictly more than it can); of the rest (topk and the
 * few near the boundary), those whose lower bound exceeds all but topk of their upper
 * bounds are in whatever the exact scores, and only the others are scored exactly and
 * selected among themselves for the places left: the same entries as
 * dsv4_indexer_select over the exact scores of all n_cand, ascending. Where a
 * bound does not hold (an input or score not finite, a dot that could overflow) it scores
 * all of them exactly instead. Scratch: fbuf (n_cand), cidx (n_cand), ckeys (n_cand),
 * work (n_cand), sel (topk). On return cidx[0, r) holds the r entries it scored exactly
 * (ascending), followed by -1 when r < n_cand (bench_indexer and the tests count them),
 * except where it scored all n_cand for want of a bound (cidx is then unspecified).
 * Returns the count, as dsv4_indexer_select. */
typedef struct dsv4_indexer_query {
    int simd;                  /* kernel level (kernels/cpu.h) */
    const dsv4_attn_ops *ops;  /* dot kernels of the portable path */
    const float *qI, *wI;      /* (nI, dI), (nI) */
    int nI, dI;
    const void *const *keys;   /* (n_cand) entry w's key, in key_fmt */
    int key_fmt;
} dsv4_indexer_query;
int dsv4_indexer_select_verified(const dsv4_indexer_query *iq, const float *approx, const float *knorm, int n_cand,
                                 int topk, float *fbuf, int *cidx, const void **ckeys, int *work, int *sel);
/* The same selection with its passes over all n_cand entries split by ranges of entries
 * (attention.c: a decode row's, shared by the step's threads), in three steps:
 *   1. dsv4_indexer_bounds_part for each range [w0, w1) (any split, any order, on any
 *      thread): the lower bounds lb[w] (n_cand floats in all) and counts of their top
 *      digits into hist (two histograms of DSV4_INDEXER_HIST counts, zeroed before; a
 *      thread may keep its own, the counts add up the same); nonzero when a bound does not
 *      hold for one entry;
 *   2. dsv4_indexer_cut_digit over the histograms (n_hist of them, one after another: two
 *      for each hist given to step 1): the digit of the topk-th largest lower bound
 *      (cut->d1, cut->k); then for each part p of
 *      a split of [0, n_cand) into ascending ranges part0[p] .. part0[p + 1],
 *      dsv4_indexer_cut_part lists at c + part0[p] the range's entries whose upper bound
 *      could reach tau (nc[p] of them; every entry whose lower bound has that digit too);
 *   3. dsv4_indexer_select_cut: tau and the candidates from the c lists, then
 *      as dsv4_indexer_select_verified (scratch and cidx alike). cut->b: the query's bound
 *      (dsv4_idx_approx_query), cut->bad: step 1 said a bound does not hold (then, or when
 *      b is not valid, it scores all n_cand exactly).
 * The result is dsv4_indexer_select_verified's, bit for bit, for any split. */
#define DSV4_INDEXER_HIST 2048 /* the radix select's first digit: the top 11 bits */
typedef struct dsv4_indexer_cut {
    dsv4_idx_bound b;
    int bad;
    uint32_t d1;      /* the top digit of the topk-th largest lower bound */
    int k;            /* its rank among the lower bounds of that digit */
    int n_parts;
    const int *part0; /* (n_parts + 1) */
    const int *nc;    /* (n_parts) */
    const int *c;     /* (n_cand) */
} dsv4_indexer_cut;
int dsv4_indexer_bounds_part(const dsv4_idx_bound *b, const float *approx, const float *knorm, int w0, int w1,
                             float *lb, uint32_t *hist);
void dsv4_indexer_cut_digit(const uint32_t *hist, int n_hist, int topk, dsv4_indexer_cut *cut);
void dsv4_indexer_cut_part(const dsv4_indexer_cut *cut, const float *approx, const float *knorm, int w0, int w1,
                           int *c, int *nc);
int dsv4_indexer_select_cut(const dsv4_indexer_query *iq, const float *approx, const float *knorm, const float *lb,
                            const dsv4_indexer_cut *cut, int n_cand, int topk, float *fbuf, int *cidx,
                            const void **ckeys, int *work, int *sel);

/* Attention of one query row over n_kv F32 rows of width hd (K = V) with a per-head sink:
 * q (H, hd), o (H, hd), probs (H, n_kv) scratch. rows[j] points to row j. */
void dsv4_sparse_attn_row(const dsv4_attn_ops *ops, const float *q, const float *const *rows,
                          int n_kv, int H, int hd, const float *sink, float scale, float *o,
                          float *probs);
/* The same for nh consecutive heads of the row: q, o (nh, hd) and sink (nh) start at the
 * first of them; rows stored in fmt (DSV4_ROW_F32 or DSV4_ROW_BF16, read as stored; a
 * BF16 row gives the bits of its F32 copy); probs (nh, n_kv) scratch holds the normalised
 * probabilities on return. Each head's output is the same whatever group of heads it is
 * computed in. nm rounds the probabilities for P.V (DSV4_ACT_PROBS; the exact path keeps
 * them). ex: libm's expf over an array (kernels/swiglu.h, the same bits), or NULL for
 * expf per value. */
void dsv4_sparse_attn_heads(const dsv4_attn_ops *ops, const float *q, const void *const *rows, int fmt,
                            int n_kv, int nh, int hd, const float *sink, float scale, float *o,
                            float *probs, const dsv4_numerics *nm, dsv4_expf_rows_fn ex);
/* The same with the heads' outputs laid out in groups: local head l (global h = h0 + l) to
 * o + (h / hg) * gs + (h % hg) * hd, o the output of global head 0 (hg > 0; with hg >=
 * h0 + nh and any gs: o + h * hd, dsv4_sparse_attn_heads' layout from o + h0 * hd). The
 * same bits per head. */
void dsv4_sparse_attn_heads_to(const dsv4_attn_ops *ops, const float *q, const void *const *rows, int fmt,
                               int n_kv, int nh, int hd, const float *sink, float scale, float *o, int h0, int hg,
                               int64_t gs, float *probs, const dsv4_numerics *nm, dsv4_expf_rows_fn ex);

#endif
