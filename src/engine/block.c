/* block.c — one block of the model (spec/model.md §5.3-5.12) over the packed rows of a
 * call, the same for every main layer, the MTP block and every rank of a CP prefill:
 *
 *   x, post, comb = hc_pre(h; attn hc);  x = RMSNorm(x; attn_norm)     (R, D)
 *   y = attention(x)                                                   the step's
 *   h = hc_post(y, h, post, comb)                                      (R, hc, D)
 *   x, post, comb = hc_pre(h; ffn hc);   x = RMSNorm(x; ffn_norm)
 *   y = MoE(x)                                                         local or EP
 *   h = hc_post(y, h, post, comb)
 *
 * Only the attention sub-block differs between a single process (dsv4_attention against
 * the cache: dsv4_engine_local_step) and a CP prefill (the same phases with exchanges
 * between them: forward_cp.c), so it comes in as a parameter, with the stream trace.
 */
#include <stdatomic.h>
#include <string.h>

#include "dist/ep.h"
#include "engine/engine.h"
#include "hc/hc.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "moe/moe.h"
#include "util/err.h"

/* Buffers of one block over R rows. */
typedef struct block_bufs {
    float *x;       /* (R, D) sub-block input */
    float *y;       /* (R, D) sub-block output */
    float *post;    /* (R, hc) */
    float *comb;    /* (R, hc, hc) */
    double *dots;   /* (2, R, mix + 1) hc_pre's dots, when a row's are split over threads (the
                     * second half: the collapse part's of a few rows' split) */
    atomic_int *left; /* (R) the row's dot tasks not finished yet */
    double *fn_f64; /* (mix, hc*D) the sub-block's fn widened, for rows in blocks */
} block_bufs;

static int block_take(dsv4_arena *a, const dsv4_config *c, int R, block_bufs *bb) {
    const int D = c->hidden_size, hc = c->hc_mult;
    bb->x = dsv4_arena_take_n(a, (int64_t)R * D, sizeof(float));
    bb->y = dsv4_arena_take_n(a, (int64_t)R * D, sizeof(float));
    bb->post = dsv4_arena_take_n(a, (int64_t)R * hc, sizeof(float));
    bb->comb = dsv4_arena_take_n(a, (int64_t)R * hc * hc, sizeof(float));
    bb->dots = dsv4_arena_take_n(a, (int64_t)2 * R * (dsv4_cfg_mix(c) + 1), sizeof(double));
    bb->left = dsv4_arena_take_n(a, R, sizeof(atomic_int));
    bb->fn_f64 = dsv4_arena_take_n(a, (int64_t)dsv4_cfg_mix(c) * hc * D, sizeof(double));
    return bb->x && bb->y && bb->post && bb->comb && bb->dots && bb->left && bb->fn_f64;
}

typedef struct {
    const dsv4_config *c;
    const dsv4_block_w *b;
    int sub;
    int simd;            /* kernel level (dsv4_kctx_simd) */
    const float *h;      /* (R, hc, D) streams */
    float *x;            /* (R, D) sub-block input */
    float *post, *comb;  /* (R, hc), (R, hc, hc) */
    const dsv4_numerics *nm;
    int parts;           /* dot tasks per row (split rows) */
    double *dots;        /* (R, mix + 1) split rows, blocked rows; few rows (2, R, mix + 1) */
    atomic_int *left;    /* (R) split rows */
    double *fn_f64;      /* (mix, hc*D) blocked rows: sub_fn widened */
    int R, block;        /* blocked rows: rows, rows per task */
    dsv4_exp_rows_fn ex; /* hc_pre's exps in lanes (libm's bits), or NULL */
} sub_in_job;

typedef struct {
    const dsv4_config *c;
    int simd;
    const float *y;                /* (R, D) sub-block output */
    float *h;                      /* (R, hc, D) streams, updated */
    const float *post, *comb;      /* (R, hc), (R, hc, hc) */
    const dsv4_numerics *nm;
} sub_out_job;

static const float *sub_fn(const sub_in_job *j) { return j->sub ? j->b->hc_ffn_fn : j->b->hc_attn_fn; }

static const float *sub_norm(const sub_in_job *j) { return j->sub ? j->b->ffn_norm : j->b->attn_norm; }

static const float *sub_base(const sub_in_job *j) { return j->sub ? j->b->hc_ffn_base : j->b->hc_attn_base; }

static const float *sub_scale(const sub_in_job *j) { return j->sub ? j->b->hc_ffn_scale : j->b->hc_attn_scale; }

/* hc_pre of row i from its dots (the collapse, rounded as nm keeps it). */
static void sub_in_collapse(const sub_in_job *j, int i, const double *dots) {
    const dsv4_config *c = j->c;
    const int D = c->hidden_size, hc = c->hc_mult;
    float *xi = j->x + (size_t)i * D;
    dsv4_hc_pre_finish(c, j->simd, j->h + (size_t)i * hc * D, dots, sub_base(j), sub_scale(j), xi,
                       j->post + (size_t)i * hc, j->comb + (size_t)i * hc * hc, j->ex);
    j->nm->round(j->nm, DSV4_ACT_COLLAPSE, xi, D);
}

/* hc_pre of row i from its dots, then the norm. */
static void sub_in_finish(const sub_in_job *j, int i, const double *dots) {
    const int D = j->c->hidden_size;
    float *xi = j->x + (size_t)i * D;
    sub_in_collapse(j, i, dots);
    dsv4_rmsnorm(xi, sub_norm(j), D, (float)j->c->rms_norm_eps, xi);
    j->nm->round(j->nm, DSV4_ACT_NORM, xi, D);
}

/* A whole row per task. */
static void sub_in_row(void *arg, int i, int tid) {
    (void)tid;
    const sub_in_job *j = arg;
    const int mix = dsv4_cfg_mix(j->c);
    double dots[(2 + DSV4_HC_MAX) * DSV4_HC_MAX + 1]; /* (mix + 1) */
    if (j->c->hc_mult >= 1 && j->c->hc_mult <= DSV4_HC_MAX)
        dsv4_hc_dots(j->c, j->simd, j->h + (size_t)i * j->c->hc_mult * j->c->hidden_size, sub_fn(j), mix, 0,
                     mix + 1, dots);
    sub_in_finish(j, i, dots);
}

/* A split row's collapse half: x of row i from its hc pre dots and norm dot (dots [0, hc)
 * and [mix]; the others unread), then the norm. */
static void sub_in_split_x(const sub_in_job *j, int i, const double *dots) {
    const dsv4_config *c = j->c;
    const int D = c->hidden_size;
    float *xi = j->x + (size_t)i * D;
    dsv4_hc_pre_finish_x(c, j->simd, j->h + (size_t)i * c->hc_mult * D, dots, sub_base(j), sub_scale(j), xi, j->ex);
    j->nm->round(j->nm, DSV4_ACT_COLLAPSE, xi, D);
    dsv4_rmsnorm(xi, sub_norm(j), D, (float)c->rms_norm_eps, xi);
    j->nm->round(j->nm, DSV4_ACT_NORM, xi, D);
}

/* A split row's Sinkhorn half: post and comb of row i from its dots [hc, mix]. Dots [0, hc)
 * are the collapse half's, kept apart: the finish only needs them finite, so they are zeroed
 * here. */
static void sub_in_split_pc(const sub_in_job *j, int i, double *dots) {
    const int hc = j->c->hc_mult;
    memset(dots, 0, (size_t)hc * sizeof(double));
    dsv4_hc_pre_finish_pc(j->c, j->simd, dots, sub_base(j), sub_scale(j), j->post + (size_t)i * hc,
                          j->comb + (size_t)i * hc * hc, j->ex);
}

/* The first dot of part p of a split row (sub_in_part; p = parts: mix + 1). Part 0 has the hc
 * pre dots (and the norm dot again) and then the collapse and the norm, about as long as 2 hc + 2
 * dots (Zen 5, flash_quarter, in step: with equal shares the thread holding part 0 ended ~1.9 us
 * after the other); the parts are cut so that each carries an equal share of that work. */
static int sub_in_first(const dsv4_config *c, int parts, int p) {
    const int hc = c->hc_mult, mix = dsv4_cfg_mix(c), X = 2 * hc + 2, W = mix + 1 - hc + X;
    if (p <= 0) return 0;
    if (p == 1) return hc; /* part 1 starts right after the pre dots, whatever part 0's share: from hc 7
                            * on, W / parts can exceed X and the dots [hc, f) would be nobody's */
    const int f = p * W / parts - X + hc;
    return f < hc ? hc : f > mix + 1 ? mix + 1 : f;
}

/* One row over parts tasks (fewer rows than threads: decode). The finish's two halves need
 * different dots (dsv4_hc_pre_finish_x / _pc), so part 0 computes the hc pre dots and the norm
 * dot into its own array and runs the collapse and the norm at once, beside the others, while
 * parts 1 .. parts - 1 share the dots [hc, mix] (the norm dot again among them) and whichever
 * finishes the last share runs the Sinkhorn (post, comb): no thread waits for the collapse
 * behind the Sinkhorn. Each dot is the same number whoever computes it. */
static void sub_in_part(void *arg, int t, int tid) {
    (void)tid;
    const sub_in_job *j = arg;
    const dsv4_config *c = j->c;
    const int i = t / j->parts, p = t % j->parts, mix = dsv4_cfg_mix(c), hc = c->hc_mult, D = c->hidden_size;
    const float *h = j->h + (size_t)i * hc * D;
    /* hc is in [1, DSV4_HC_MAX] here: sub_in_parts gives other hc one part (sub_in_row) */
    if (p == 0) {
        double dots[(2 + DSV4_HC_MAX) * DSV4_HC_MAX + 1] = {0}; /* (mix + 1): [0, hc) and [mix] */
        dsv4_hc_dots(c, j->simd, h, sub_fn(j), mix, 0, hc, dots);
        dsv4_hc_dots(c, j->simd, h, sub_fn(j), mix, mix, mix + 1, dots);
        sub_in_split_x(j, i, dots);
        return;
    }
    /* the Sinkhorn's dots of part p */
    double *dots = j->dots + (size_t)i * (mix + 1);
    dsv4_hc_dots(c, j->simd, h, sub_fn(j), mix, sub_in_first(c, j->parts, p), sub_in_first(c, j->parts, p + 1), dots);
    /* release our dots; the last one acquires everyone's */
    if (atomic_fetch_sub_explicit(&j->left[i], 1, memory_order_acq_rel) == 1) sub_in_split_pc(j, i, dots);
}

/* A few rows (2 .. SUB_IN_FEW_MAX) over parts tasks, the dots of all rows split by range:
 * part p runs the dots [sub_in_first(p), sub_in_first(p + 1)) of every row together
 * (dsv4_hc_dots_rows_part: fn's rows read once for all the rows, where a task a row read all
 * of fn once a row, 384 KB at flash_quarter, from memory at every step). As one row's split
 * (sub_in_part): part 0 runs the hc pre dots and the norm dot of every row into the second
 * half of dots, then the rows' collapses and norms; parts 1 .. parts - 1 share the dots [hc,
 * mix] and whichever finishes the last runs the rows' Sinkhorns. Each dot the bits of
 * dsv4_hc_dots, whoever computes it and beside whichever others. */
static void sub_in_few(void *arg, int p, int tid) {
    (void)tid;
    const sub_in_job *j = arg;
    const dsv4_config *c = j->c;
    const int R = j->R, mix = dsv4_cfg_mix(c), nd = mix + 1, hc = c->hc_mult;
    if (p == 0) {
        double *dots = j->dots + (size_t)R * nd; /* (R, mix + 1): [0, hc) and [mix] */
        dsv4_hc_dots_rows_part(c, j->simd, j->h, R, sub_fn(j), NULL, mix, 0, hc, dots);
        dsv4_hc_dots_rows_part(c, j->simd, j->h, R, sub_fn(j), NULL, mix, mix, nd, dots);
        for (int i = 0; i < R; i++) {
            double *di = dots + (size_t)i * nd;
            for (int m = hc; m < mix; m++) di[m] = 0; /* finite; the collapse reads [0, hc) and [mix] */
            sub_in_split_x(j, i, di);
        }
        return;
    }
    dsv4_hc_dots_rows_part(c, j->simd, j->h, R, sub_fn(j), NULL, mix, sub_in_first(c, j->parts, p),
                           sub_in_first(c, j->parts, p + 1), j->dots);
    /* release our dots; the last part acquires everyone's and runs the Sinkhorns */
    if (atomic_fetch_sub_explicit(&j->left[0], 1, memory_order_acq_rel) != 1) return;
    for (int i = 0; i < R; i++) sub_in_split_pc(j, i, j->dots + (size_t)i * nd);
}

/* Blocked rows, first job: row t of fn widened. */
static void sub_in_widen(void *arg, int t, int tid) {
    (void)tid;
    const sub_in_job *j = arg;
    dsv4_hc_widen(j->c, sub_fn(j), t, t + 1, j->fn_f64);
}

/* Blocked rows, second job (or the only one, fn_f64 NULL: the kernel widens fn itself):
 * the dots of rows [t * block, ..) together, then each row. */
static void sub_in_block(void *arg, int t, int tid) {
    (void)tid;
    const sub_in_job *j = arg;
    const int i0 = t * j->block, n = j->R - i0 < j->block ? j->R - i0 : j->block, nd = dsv4_cfg_mix(j->c) + 1;
    const int64_t row = (int64_t)j->c->hc_mult * j->c->hidden_size;
    dsv4_hc_dots_rows(j->c, j->simd, j->h + i0 * row, n, sub_fn(j), j->fn_f64, nd - 1, j->dots + (int64_t)i0 * nd);
    const dsv4_config *c = j->c;
    const int D = c->hidden_size, hc = c->hc_mult;
    /* the block's rows finished together (their Sinkhorns side by side), then rounded */
    dsv4_hc_pre_finish_rows(c, j->simd, j->h + i0 * row, n, j->dots + (int64_t)i0 * nd, sub_base(j), sub_scale(j),
                            j->x + (size_t)i0 * D, j->post + (size_t)i0 * hc, j->comb + (size_t)i0 * hc * hc, j->ex);
    for (int i = i0; i < i0 + n; i++) j->nm->round(j->nm, DSV4_ACT_COLLAPSE, j->x + (size_t)i * D, D);
    /* the block's norms side by side (each row's sum its own chain, as dsv4_rmsnorm) */
    dsv4_rmsnorm_rows(j->simd, j->x + (size_t)i0 * D, sub_norm(j), D, (float)j->c->rms_norm_eps, n);
    for (int i = i0; i < i0 + n; i++) j->nm->round(j->nm, DSV4_ACT_NORM, j->x + (size_t)i * D, D);
}

static void sub_out_row(void *arg, int i, int tid) {
    (void)tid;
    const sub_out_job *j = arg;
    const dsv4_config *c = j->c;
    const int D = c->hidden_size, hc = c->hc_mult;
    float *hi = j->h + (size_t)i * hc * D;
    dsv4_hc_post_inplace(c, j->simd, j->y + (size_t)i * D, hi, j->post + (size_t)i * hc,
                         j->comb + (size_t)i * hc * hc);
    j->nm->round(j->nm, DSV4_ACT_STREAMS, hi, (int64_t)hc * D);
}

/* Rows from which hc_pre's blocked dots read fn widened once per call (sub_in). */
#define HC_WIDEN_MIN_ROWS 64

/* Rows up to which a batched decode step's hc_pre splits all its rows' dots by range
 * (sub_in_few) instead of a task a row (or a block). At 8 rows part 0's 8 collapses and
 * norms made the job end on one thread (Zen 5, flash_quarter, in step: idle +74 us a step,
 * the wall -19 against the blocked path's -38 with the prefetch alone). */
#define SUB_IN_FEW_MAX 7

/* Dot tasks per row of hc_pre: with fewer rows than threads (decode) one row's mix + 1
 * dots over hc*D values (24 x 16K at Flash: 1.6 MB of fn read per row) are the serial
 * part, so they are shared out, about two tasks per thread; else a row is a task. */
static int sub_in_parts(const dsv4_config *c, int R, int threads) {
    if (R < 1 || R >= threads || c->hc_mult < 1 || c->hc_mult > DSV4_HC_MAX) return 1;
    const int n = dsv4_cfg_mix(c) + 1, want = (2 * threads + R - 1) / R;
    return want < n ? want : n;
}

/* The two ends of every sub-block (spec/model.md §5.3-5.4), for all R rows of h (R, hc, D):
 * sub_in: x, post, comb = hc_pre(h; the sub-block's hc params), x = RMSNorm(x; its norm)
 * (sub 0 = attention, 1 = MoE); sub_out: h = hc_post(y, h, post, comb). Rows are spread
 * over k's threads (each row's result is its own: any split gives the same bits), and so
 * are the dots inside a row when there are fewer rows than threads. The collapse, the
 * norm output and the new streams are kept as the numeric mode nm rounds them (the exact
 * path: FP32). */
static void sub_in(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *c, const dsv4_block_w *b,
                   int sub, const float *h, int R, block_bufs *bb) {
    const int T = dsv4_kctx_threads(k);
    sub_in_job j = {c, b, sub, dsv4_kctx_simd(k), h, bb->x, bb->post, bb->comb, nm,
                    sub_in_parts(c, R, T), bb->dots, bb->left, bb->fn_f64, R, 4, NULL};
    j.ex = dsv4_kctx_exp(k); /* the exp in lanes where it equals libm's (kctx.h), else NULL */
    if (R >= 2 && R <= SUB_IN_FEW_MAX && T >= 2 && dsv4_hc_rows_blocked(c, j.simd)) {
        j.parts = sub_in_parts(c, 1, T);
        atomic_init(&bb->left[0], j.parts - 1); /* part 0 is the collapse's */
        dsv4_kctx_parallel(k, j.parts, sub_in_few, &j);
        return;
    }
    if (R >= 4 * T && dsv4_hc_rows_blocked(c, j.simd)) {
        /* rows in blocks of 4 (several tasks per thread), or 8 below. Every block reads all of fn:
         * from 64 rows widening it once (mix rows of hc*D doubles, a job of its own) costs
         * less than the conversions it saves; below, each block widens fn slab by slab
         * (Zen 5, one thread, hc*D = 4096: 16 rows 0.82x the time of widen + blocks, 8
         * rows 0.69x, 32 rows 0.93x, 64 rows 1.01x) and the widen job is gone */
        if (R < HC_WIDEN_MIN_ROWS || j.simd < DSV4_SIMD_AVX512) {
            j.fn_f64 = NULL;
            /* a batched decode step: fn comes from memory, so a thread's rows run as one
             * block of 8 (the kernel's largest: fn read once for 8 rows) when every
             * thread gets one. The avx2 kernel never takes fn widened: on Zen 3 (512 KB of
             * L2) the doubles (768 KB at flash_quarter) came from L3 for every block, the
             * floats (384 KB) stay in L2 (one thread, 512 rows: blocks of 8 rows on the
             * floats 0.66-0.77x the time of dot_f64_avx2 row by row, widened 1.0x) */
            if (R >= 8 * T) j.block = 8;
        } else {
            dsv4_kctx_parallel(k, dsv4_cfg_mix(c), sub_in_widen, &j);
        }
        dsv4_kctx_parallel(k, (R + j.block - 1) / j.block, sub_in_block, &j);
        return;
    }
    if (j.parts == 1) {
        dsv4_kctx_parallel(k, R, sub_in_row, &j);
        return;
    }
    for (int i = 0; i < R; i++) atomic_init(&bb->left[i], j.parts - 1); /* part 0 is the collapse's */
    dsv4_kctx_parallel(k, R * j.parts, sub_in_part, &j);
}

static void sub_out(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *c, const float *y,
                    float *h, int R, const float *post, const float *comb) {
    sub_out_job j = {c, dsv4_kctx_simd(k), y, h, post, comb, nm};
    dsv4_kctx_parallel(k, R, sub_out_row, &j);
}

size_t dsv4_block_scratch_bytes(const dsv4_config *c, int R) {
    dsv4_arena m = dsv4_arena_measuring();
    block_bufs bb;
    block_take(&m, c, R, &bb);
    /* the kept rows' batch (dsv4_engine_block_keep) */
    dsv4_arena_take_n(&m, R, sizeof(dsv4_batch_span));
    dsv4_arena_take_n(&m, R, sizeof(int64_t));
    dsv4_arena_take_n(&m, R, sizeof(int32_t));
    /* the choice reports: CSA selections (local attention step), experts (dsv4_engine_moe) */
    dsv4_arena_take_n(&m, (int64_t)R * c->index_topk, sizeof(int));
    dsv4_arena_take_n(&m, (int64_t)R * c->num_experts_per_tok, sizeof(int));
    return m.peak;
}

/* Compacts h (R, hc, D), post (R, hc) and comb (R, hc, hc) to the rows keep[0 .. n_keep)
 * (ascending) and describes them in *out: one span per kept row, so that the MoE's choice
 * reports name their sequences and positions. Buffers from the arena; 0 when it is too
 * small. */
static int keep_rows(dsv4_arena *a, const dsv4_config *c, const dsv4_batch *batch, const int *keep,
                     int n_keep, float *h, float *post, float *comb, dsv4_batch *out) {
    const size_t hc = (size_t)c->hc_mult, row = hc * c->hidden_size;
    dsv4_batch_span *bs = dsv4_arena_take_n(a, n_keep, sizeof *bs);
    int64_t *pos = dsv4_arena_take_n(a, n_keep, sizeof *pos);
    int32_t *tok = dsv4_arena_take_n(a, n_keep, sizeof *tok);
    if (n_keep && (!bs || !pos || !tok)) return 0;
    int si = 0;
    for (int i = 0; i < n_keep; i++) {
        const int r = keep[i];
        while (r >= batch->spans[si].row0 + batch->spans[si].n) si++;
        pos[i] = batch->pos[r];
        tok[i] = batch->tokens[r];
        bs[i] = (dsv4_batch_span){batch->spans[si].seq, pos[i], 1, i};
        if (r != i) { /* r > i */
            memcpy(h + (size_t)i * row, h + (size_t)r * row, row * sizeof(float));
            memcpy(post + (size_t)i * hc, post + (size_t)r * hc, hc * sizeof(float));
            memcpy(comb + (size_t)i * hc * hc, comb + (size_t)r * hc * hc, hc * hc * sizeof(float));
        }
    }
    *out = (dsv4_batch){n_keep, n_keep, bs, pos, tok};
    return 1;
}

/* ---- batch-1 decode: the next weights named ahead (dsv4_pool_hint) ---------------------
 * A one-row step's serial pieces (hc_pre's finish, hc_post, the query rows' finish, the
 * gaps between jobs) leave one thread idle and the memory bus quiet; each thread is told
 * the weights its share of the next product job starts with, which it prefetches while it
 * waits. Only hints: no result depends on them. */

/* hc_pre's one-row job (sub_in_part, parts tasks): thread t runs parts [t parts / T, (t + 1)
 * parts / T), whose dots read rows [sub_in_first(p), ..) of the sub-block's fn (mix, hc*D) F32:
 * 384 KB at the quarter's widths, 1.5 MB at Flash's, read from memory at every step. */
static void hint_sub_in(const dsv4_engine *e, const dsv4_block_w *b, int sub, int skip) {
    const dsv4_config *c = e->cfg;
    const int T = dsv4_kctx_threads(e->k), parts = sub_in_parts(c, 1, T), mix = dsv4_cfg_mix(c);
    if (T < 2 || parts < T) return;
    const int64_t row = (int64_t)c->hc_mult * c->hidden_size * (int64_t)sizeof(float);
    const char *fn = (const char *)(sub ? b->hc_ffn_fn : b->hc_attn_fn);
    for (int t = 0; t < T; t++) {
        const int p0 = t * parts / T, p1 = (t + 1) * parts / T;
        const int e1 = sub_in_first(c, parts, p1);
        const int m0 = sub_in_first(c, parts, p0), m1 = e1 < mix ? e1 : mix; /* the last dot reads h */
        const int64_t len = (m1 - m0) * row;
        if (len > 0) dsv4_kctx_hint(e->k, t, fn + m0 * row, len < DSV4_LIN_HINT_BYTES ? len : DSV4_LIN_HINT_BYTES, skip);
    }
}

/* The MoE's one-row job (moe_one.c) claims its items in order: the router first (the
 * caller, which starts the job, takes it), then the shared expert's W1/W3 rows. */
static void hint_moe(const dsv4_engine *e, const dsv4_block_w *b) {
    if (e->ep || dsv4_kctx_threads(e->k) < 2) return;
    const dsv4_mat *first = b->gate.rows > 0 && b->gate.w ? &b->gate : &b->sh_w1;
    const dsv4_mat *second = &b->sh_w1;
    if (!first->w || !second->w) return;
    /* weights only: the lengths run from w, the scales lie elsewhere */
    const int64_t half = first == second ? dsv4_mat_weight_bytes(second) / 2 : 0;
    const int64_t n0 = dsv4_mat_weight_bytes(first), n1 = dsv4_mat_weight_bytes(second) - half;
    /* skip 1: hc_pre's job runs first */
    dsv4_kctx_hint(e->k, 0, first->w, n0 < DSV4_LIN_HINT_BYTES ? n0 : DSV4_LIN_HINT_BYTES, 1);
    dsv4_kctx_hint(e->k, 1, (const char *)second->w + half, n1 < DSV4_LIN_HINT_BYTES ? n1 : DSV4_LIN_HINT_BYTES, 1);
}

/* Before block b's MoE (one job at one row): the next layer's projections, behind the MoE
 * and the next hc_pre; after the last layer the LM head (the caller's logits: the hidden
 * output between runs inline). */
static void hint_next(const dsv4_engine *e, const dsv4_block_w *b) {
    const int L = e->cfg->num_hidden_layers;
    if (e->ep || b < e->blocks || b >= e->blocks + L) return; /* EP's exchange, an MTP block */
    if (b + 1 < e->blocks + L) {
        hint_sub_in(e, b + 1, 0, 1);
        dsv4_attn_hint(e->k, b + 1, 1, 2);
        return;
    }
    const dsv4_lin_op head = {&e->model->head, NULL, 1, NULL};
    dsv4_lin_hint(e->k, &head, 1, DSV4_LIN_HINT_BYTES, 1);
}

int dsv4_engine_block(dsv4_engine *e, const dsv4_block_w *b, const dsv4_batch *batch,
                      const dsv4_block_step *step, float *h, dsv4_err *err) {
    return dsv4_engine_block_keep(e, b, batch, step, h, NULL, 0, err);
}

int dsv4_engine_block_keep(dsv4_engine *e, const dsv4_block_w *b, const dsv4_batch *batch,
                           const dsv4_block_step *step, float *h, const int *keep, int n_keep,
                           dsv4_err *err) {
    const dsv4_config *c = e->cfg;
    int R = batch->n_rows;
    int rc = DSV4_OK;
    const size_t mark = dsv4_arena_mark(&e->scratch);
    block_bufs bb;
    dsv4_batch kept;
    if (!block_take(&e->scratch, c, R, &bb)) {
        rc = dsv4_engine_fail_collective(e, dsv4_fail(err, DSV4_ERR_NOMEM, "block: scratch arena too small"), 0);
        goto done;
    }
    /* the first layer's projections behind its hc_pre (the others' come from the layer before) */
    if (R == 1 && b == e->blocks) dsv4_attn_hint(e->k, b, R, 1);
    for (int sub = 0; sub < 2; sub++) {
        /* x, post, comb = hc_pre(h); x = RMSNorm(x; norm) */
        sub_in(e->k, e->num, c, b, sub, h, R, &bb);
        /* y = attention(x) (every row writes the cache, the kept rows attend) or MoE(x) */
        if (sub == 1 && R == 1) hint_next(e, b);
        rc = sub == 0 ? step->attention(step->u, b, batch, keep, n_keep, bb.x, bb.y, err)
                      : dsv4_engine_moe(e, b, batch, bb.x, bb.y, err);
        if (rc) goto done;
        if (sub == 0 && keep) {
            /* only the kept rows go on (an EP rank still joins the exchange with none) */
            if (!keep_rows(&e->scratch, c, batch, keep, n_keep, h, bb.post, bb.comb, &kept)) {
                rc = dsv4_engine_fail_collective(e, dsv4_fail(err, DSV4_ERR_NOMEM, "block: scratch arena too small"), 0);
                goto done;
            }
            batch = &kept;
            R = n_keep;
        }
        if (R == 1 && sub == 0) {
            hint_sub_in(e, b, 1, 0);
            hint_moe(e, b);
        }
        /* h = hc_post(y, h, post, comb) */
        sub_out(e->k, e->num, c, bb.y, h, R, bb.post, bb.comb);
        if (e->trace && (rc = step->trace(step->u, b, batch, sub, h, err))) goto done;
    }
done:
    dsv4_arena_release(&e->scratch, mark);
    return rc;
}

/* ---- MoE, and the collectives of ranks without rows ------------------------------------- */

/* Reports the choices of rows[0 .. n_rows) (ascending; NULL: every row) to the choice
 * hook, n per row in sel (R, n), -1 padded. */
static void report_choices(const dsv4_engine *e, const dsv4_batch *batch, const int *rows, int n_rows,
                           int layer, int kind, const int *sel, int n) {
    if (!rows) n_rows = batch->n_rows;
    for (int k = 0, si = 0; k < n_rows; k++) {
        const int i = rows ? rows[k] : k;
        while (i >= batch->spans[si].row0 + batch->spans[si].n) si++;
        const int *row = sel + (size_t)i * n;
        int m = 0;
        while (m < n && row[m] >= 0) m++;
        e->choice(e->choice_user, batch->spans[si].seq, batch->pos[i], layer, kind, row, m);
    }
}

int dsv4_engine_moe(dsv4_engine *e, const dsv4_block_w *b, const dsv4_batch *batch,
                    const float *x, float *y, dsv4_err *err) {
    if (e->ep) return dsv4_ep_moe(e->ep, e->k, e->num, b, x, batch->tokens, batch->n_rows, y, &e->scratch, err);
    const int K = e->cfg->num_experts_per_tok;
    const size_t mark = dsv4_arena_mark(&e->scratch);
    int *sel = NULL; /* (R, K) with the choice hook on */
    if (e->choice && batch->n_rows && !(sel = dsv4_arena_take_n(&e->scratch, (int64_t)batch->n_rows * K, sizeof(int))))
        return dsv4_fail(err, DSV4_ERR_NOMEM, "moe choices: scratch arena too small");
    int rc = (e->moe_checked ? dsv4_moe_forward_checked : dsv4_moe_forward)(e->k, e->num, e->cfg, b, x, batch->tokens,
                                                                          batch->n_rows, y, sel, &e->scratch, err);
    if (!rc && sel) report_choices(e, batch, NULL, 0, b->layer_id, DSV4_CHOICE_EXPERTS, sel, K);
    dsv4_arena_release(&e->scratch, mark);
    return rc;
}

int dsv4_engine_idle_layers(dsv4_engine *e, int l0, int l1, int *changed, dsv4_err *err) {
    *changed = 0;
    if (!e->ep) return DSV4_OK;
    const dsv4_batch none = {0, 0, NULL, NULL, NULL};
    for (int l = l0; l < l1; l++) {
        int rc = dsv4_engine_moe(e, &e->blocks[l], &none, NULL, NULL, err);
        if (rc) {
            *changed = !dsv4_ep_failure_clean(e->ep);
            return rc;
        }
    }
    return DSV4_OK;
}

int dsv4_engine_fail_collective(dsv4_engine *e, int code, int clean) {
    if (e->ep) dsv4_ep_fail(e->ep, code, clean);
    return code;
}

/* ---- the single-process attention step ------------------------------------------------- */

/* dsv4_attention against the cache; the CSA selections of the rows that attend go to the
 * choice hook. */
static int local_attention(void *u, const dsv4_block_w *b, const dsv4_batch *batch, const int *q_rows,
                           int n_q, const float *x, float *y, dsv4_err *err) {
    dsv4_engine *e = u;
    const dsv4_config *c = e->cfg;
    const size_t mark = dsv4_arena_mark(&e->scratch);
    int *csa_sel = NULL; /* (R, index_topk) with the choice hook on a CSA layer */
    int rc = DSV4_OK;
    if (e->choice && b->ratio == 4 && batch->n_rows &&
        !(csa_sel = dsv4_arena_take_n(&e->scratch, (int64_t)batch->n_rows * c->index_topk, sizeof(int))))
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "CSA choices: scratch arena too small");
    const dsv4_cache_plan *plan = dsv4_cache_get_plan(e->cache);
    const dsv4_attn_ctx actx = {c, e->k, e->num, e->cache, &e->rope_main, &e->rope_cmp, csa_sel, &e->scratch,
                                plan->opts.row_bytes_per_value, plan->opts.idx_bytes_per_value,
                                q_rows, n_q, e->attn_stats, DSV4_INDEXER_AUTO, 0, e->idx_paths};
    if (!rc) rc = dsv4_attention(&actx, b, batch, x, y, err);
    /* the other ranks are heading for this block's MoE exchange */
    if (rc) dsv4_engine_fail_collective(e, rc, 0);
    else if (csa_sel) report_choices(e, batch, q_rows, n_q, b->layer_id, DSV4_CHOICE_CSA, csa_sel, c->index_topk);
    dsv4_arena_release(&e->scratch, mark);
    return rc;
}

/* The streams of every row after a sub-block, to the trace hook. */
static int local_trace(void *u, const dsv4_block_w *b, const dsv4_batch *batch, int sub,
                       const float *h, dsv4_err *err) {
    (void)err;
    const dsv4_engine *e = u;
    const size_t row_floats = (size_t)e->cfg->hc_mult * e->cfg->hidden_size;
    for (int si = 0; si < batch->n_spans; si++)
        for (int j = 0; j < batch->spans[si].n; j++) {
            const int i = batch->spans[si].row0 + j;
            e->trace(e->trace_user, batch->spans[si].seq, batch->pos[i], b->layer_id, sub, h + (size_t)i * row_floats);
        }
    return DSV4_OK;
}

dsv4_block_step dsv4_engine_local_step(dsv4_engine *e) {
    return (dsv4_block_step){local_attention, local_trace, e};
}
