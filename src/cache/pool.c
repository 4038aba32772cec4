/* pool.c — paged cache pools: WIN, CMP[r], IDX pages, STATE slots, per-sequence tables
 * (serving.md §a.3–a.4). Every size comes from the plan (plan.c).
 *
 * Page ids are handed out from free stacks. One WIN page id is a page in every layer's WIN
 * storage; one block id is a page in every CMP pool and IDX at once, so a sequence has two
 * tables: win_table[t / B_w] and blk_table[t / B] (t a source position). Reservation is
 * all-or-nothing per call: a first pass marks the missing table entries (MARK), counts
 * them, and then either turns every mark into a page or clears every mark.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache/cache.h"
#include "cache/geom.h"
#include "cache/pool_impl.h"
#include "util/err.h"
#include "util/hot.h"

/* ---- storage helpers ------------------------------------------------------------------- */

/* The sentinel as a byte pattern (its little-endian word repeated): row bytes of BF16 and
 * FP8-split rows need not be multiples of 4. */
static uint8_t sentinel_byte(int64_t i) { return (uint8_t)(DSV4_CACHE_SENTINEL >> (8 * (i & 3))); }

static void fill_sentinel(void *p, int64_t n_bytes) {
    uint8_t *b = p;
    for (int64_t i = 0; i < n_bytes; i++) b[i] = sentinel_byte(i);
}

static void sentinel_win_page(dsv4_cache *c, int32_t page) {
    for (int l = 0; l < c->plan.n_layers; l++)
        fill_sentinel(dsv4_pool_win_page(c, l, page), c->win_rows * c->plan.win_row_bytes);
}
static void sentinel_block(dsv4_cache *c, int32_t blk) {
    for (int i = 0; i < c->plan.n_ratios; i++)
        for (int s = 0; s < c->plan.n_cmp_layers[i]; s++)
            fill_sentinel(dsv4_pool_cmp_page(c, i, s, blk), c->blk_rows[i] * c->plan.cmp_row_bytes);
    for (int s = 0; s < c->plan.n_idx_layers; s++)
        fill_sentinel(dsv4_pool_idx_page(c, s, blk), c->idx_rows * c->plan.idx_row_bytes);
}

static int seq_ok(const dsv4_cache *c, int seq) {
    return c && seq >= 0 && seq < c->plan.opts.max_seqs && c->seqs[seq].live;
}

/* ---- create / free --------------------------------------------------------------------- */

static void *alloc_n(int64_t n, size_t elem, int *failed) {
    if (n <= 0) return NULL;
    if ((uint64_t)n > SIZE_MAX / elem) { *failed = 1; return NULL; }
    void *p = calloc((size_t)n, elem);  /* lazy zero pages: untouched pages cost nothing */
    if (!p) *failed = 1;
    return p;
}

int dsv4_cache_create(const dsv4_cache_plan *plan, dsv4_cache **out, dsv4_err *err) {
    if (!plan || !out) return dsv4_fail(err, DSV4_ERR_ARG, "cache create: NULL argument");
    *out = NULL;
    if (plan->opts.max_seqs < 1 || plan->n_blocks < 0 || plan->n_blocks > INT32_MAX ||
        plan->win_pages < 0 || plan->win_pages > INT32_MAX || plan->block < 1 || plan->win_block < 1)
        return dsv4_fail(err, DSV4_ERR_ARG, "cache create: plan is not from dsv4_cache_plan_make");
    dsv4_cache *c = calloc(1, sizeof *c);
    if (!c) return dsv4_fail(err, DSV4_ERR_NOMEM, "cache create: out of memory");
    c->plan = *plan;
    const dsv4_cache_plan *p = &c->plan;
    c->n_win_pages = (int32_t)p->win_pages;
    c->n_blocks = (int32_t)p->n_blocks;
    c->win_rows = p->win_block;
    for (int i = 0; i < p->n_ratios; i++) c->blk_rows[i] = p->block / p->ratios[i];
    c->idx_rows = p->block / 4;
    int failed = 0;
    const int64_t ms = p->opts.max_seqs;
    c->win = alloc_n((int64_t)p->n_layers * c->n_win_pages * c->win_rows, p->win_row_bytes, &failed);
    for (int i = 0; i < p->n_ratios; i++)
        c->cmp[i] = alloc_n((int64_t)p->n_cmp_layers[i] * c->n_blocks * c->blk_rows[i], p->cmp_row_bytes,
                            &failed);
    if (p->n_idx_layers)
        c->idx = alloc_n((int64_t)p->n_idx_layers * c->n_blocks * c->idx_rows, p->idx_row_bytes, &failed);
    c->state = alloc_n(ms * p->slot_floats, 4, &failed);
    c->win_free = alloc_n(c->n_win_pages, 4, &failed);
    c->blk_free = alloc_n(c->n_blocks, 4, &failed);
    c->win_owner = alloc_n(c->n_win_pages, 4, &failed);
    c->blk_ref = alloc_n(c->n_blocks, 4, &failed);  /* zeroed: every block free */
    c->win_warm = alloc_n(c->n_win_pages, 1, &failed);
    c->blk_warm = alloc_n(c->n_blocks, 1, &failed);
    c->win_table = alloc_n(ms * p->win_table_width, 4, &failed);
    c->blk_table = alloc_n(ms * p->blk_table_width, 4, &failed);
    c->seqs = alloc_n(ms, sizeof *c->seqs, &failed);
    if (failed) {
        dsv4_cache_free(c);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "cache create: cannot allocate %lld bytes of pools",
                         (long long)p->total_bytes);
    }
    /* Stacks pop from the top: lay them out so that page 0 is handed out first. */
    for (int32_t i = 0; i < c->n_win_pages; i++) {
        c->win_free[i] = c->n_win_pages - 1 - i;
        c->win_owner[i] = NONE;
    }
    for (int32_t i = 0; i < c->n_blocks; i++) {
        c->blk_free[i] = c->n_blocks - 1 - i;
    }
    c->n_win_free = c->n_win_pages;
    c->n_blk_free = c->n_blocks;
    for (int64_t i = 0; i < ms * p->win_table_width; i++) c->win_table[i] = NONE;
    for (int64_t i = 0; i < ms * p->blk_table_width; i++) c->blk_table[i] = NONE;
    *out = c;
    return 0;
}

void dsv4_cache_free(dsv4_cache *c) {
    if (!c) return;
    while (c->snaps) dsv4_cache_snap_free(c, c->snaps);
    free(c->win);
    for (int i = 0; i < DSV4_MAX_RATIOS; i++) free(c->cmp[i]);
    free(c->idx);
    free(c->state);
    free(c->win_free);
    free(c->blk_free);
    free(c->win_owner);
    free(c->blk_ref);
    free(c->win_warm);
    free(c->blk_warm);
    free(c->win_table);
    free(c->blk_table);
    free(c->seqs);
    free(c);
}

const dsv4_cache_plan *dsv4_cache_get_plan(const dsv4_cache *c) { return c ? &c->plan : NULL; }

/* ---- sequences ------------------------------------------------------------------------- */

/* Fresh compressor state: every candidate absent, i.e. projections 0 and scores -inf. */
static void clear_slot(dsv4_cache *c, int seq) {
    const dsv4_cache_plan *p = &c->plan;
    float *base = dsv4_pool_slot(c, seq);
    const float ninf = -INFINITY;
    for (int l = 0; l < p->n_layers; l++) {
        if (p->ring_off[l] >= 0) {
            const int64_t half = (int64_t)dsv4_cfg_coff(p->ratios[p->cmp_pool[l]]) * p->hd;
            for (int64_t t = 0; t < p->ring_len[l]; t++) {
                float *row = base + p->ring_off[l] + t * 2 * half;   /* [a | b] */
                memset(row, 0, (size_t)half * sizeof *row);
                for (int64_t i = 0; i < half; i++) row[half + i] = ninf;
            }
        }
        if (p->idx_ring_off[l] >= 0) {
            const int64_t half = 2 * (int64_t)p->dI;
            for (int64_t t = 0; t < p->ring_len[l]; t++) {
                float *row = base + p->idx_ring_off[l] + t * 2 * half;
                memset(row, 0, (size_t)half * sizeof *row);
                for (int64_t i = 0; i < half; i++) row[half + i] = ninf;
            }
        }
    }
}

int dsv4_cache_seq_alloc(dsv4_cache *c, int *seq, dsv4_err *err) {
    if (!c || !seq) return dsv4_fail(err, DSV4_ERR_ARG, "cache seq_alloc: NULL argument");
    for (int s = 0; s < c->plan.opts.max_seqs; s++) {
        if (c->seqs[s].live) continue;
        clear_slot(c, s);
        seq_state *q = &c->seqs[s];
        memset(q, 0, sizeof *q);
        q->live = 1;
        q->win_lo = c->plan.win_table_width;  /* empty range */
        *seq = s;
        return 0;
    }
    return dsv4_fail(err, DSV4_ERR_CACHE_FULL, "no free sequence slot: max_seqs = %d",
                     c->plan.opts.max_seqs);
}

static void free_win_page(dsv4_cache *c, int seq, int64_t i) {
    int32_t *t = dsv4_pool_win_tab(c, seq);
    const int32_t pg = t[i];
    t[i] = NONE;
    c->win_owner[pg] = NONE;
    c->win_free[c->n_win_free++] = pg;
    c->seqs[seq].n_win--;
    if (c->sentinel) sentinel_win_page(c, pg);
}

int dsv4_cache_seq_release(dsv4_cache *c, int seq, dsv4_err *err) {
    if (!c) return dsv4_fail(err, DSV4_ERR_ARG, "cache seq_release: NULL cache");
    if (!seq_ok(c, seq))
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "cache seq_release: sequence %d is not live (freed or never allocated; "
                         "max_seqs = %d)", seq, c->plan.opts.max_seqs);
    seq_state *q = &c->seqs[seq];
    int32_t *wt = dsv4_pool_win_tab(c, seq), *bt = dsv4_pool_blk_tab(c, seq);
    for (int64_t i = q->win_lo; i < q->win_hi; i++)
        if (wt[i] >= 0) free_win_page(c, seq, i);
    for (int64_t i = 0; i < q->blk_hi; i++) {
        const int32_t b = bt[i];
        if (b < 0) continue;
        bt[i] = NONE;
        dsv4_pool_unref_block(c, b);
    }
    memset(q, 0, sizeof *q);
    if (c->sentinel) fill_sentinel(dsv4_pool_slot(c, seq), c->plan.slot_bytes);
    return 0;
}

int dsv4_cache_seq_live(const dsv4_cache *c, int seq) { return seq_ok(c, seq); }

/* ---- page and block bookkeeping (pool_impl.h) ------------------------------------------ */

/* The pools stay lazily committed, but a page's memory is populated (MADV_POPULATE_WRITE)
 * the first time its id is handed out, for every layer at once: a decoding sequence would
 * otherwise fault in a new 4 KiB page of every layer's window every few positions inside
 * its steps, ~11 us each on a VM (a batch-16 step wrote ~64 such pages every 4th step),
 * where populating costs ~0.6 us a page and leaves ~5 us at the first write. Resident memory
 * runs ahead of the rows written by at most one page id per sequence (its WIN page and its
 * block in every layer); a reused id is warm already. A kernel without the call keeps the
 * lazy pages. */
static void populate(void *p, int64_t n_bytes) {
#ifdef MADV_POPULATE_WRITE
    const uintptr_t pg = 4096, lo = (uintptr_t)p & ~(pg - 1);
    const uintptr_t hi = ((uintptr_t)p + (uintptr_t)n_bytes + pg - 1) & ~(pg - 1);
    if (n_bytes > 0) (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)n_bytes;
#endif
}

static void warm_win(dsv4_cache *c, int32_t pg) {
    if (c->win_warm[pg]) return;
    c->win_warm[pg] = 1;
    for (int l = 0; l < c->plan.n_layers; l++)
        populate(dsv4_pool_win_page(c, l, pg), c->win_rows * c->plan.win_row_bytes);
}

static void warm_block(dsv4_cache *c, int32_t b) {
    if (c->blk_warm[b]) return;
    const dsv4_cache_plan *p = &c->plan;
    c->blk_warm[b] = 1;
    for (int i = 0; i < p->n_ratios; i++)
        for (int slot = 0; slot < p->n_cmp_layers[i]; slot++)
            populate(dsv4_pool_cmp_page(c, i, slot, b), c->blk_rows[i] * p->cmp_row_bytes);
    for (int slot = 0; slot < p->n_idx_layers; slot++)
        populate(dsv4_pool_idx_page(c, slot, b), c->idx_rows * p->idx_row_bytes);
}

void dsv4_pool_take_win(dsv4_cache *c, int seq, int64_t i) {
    seq_state *q = &c->seqs[seq];
    const int32_t pg = c->win_free[--c->n_win_free];
    warm_win(c, pg);
    dsv4_pool_win_tab(c, seq)[i] = pg;
    c->win_owner[pg] = seq;
    q->n_win++;
    if (i < q->win_lo) q->win_lo = i;
    if (i + 1 > q->win_hi) q->win_hi = i + 1;
}

int32_t dsv4_pool_pop_block(dsv4_cache *c) {
    const int32_t b = c->blk_free[--c->n_blk_free];
    warm_block(c, b);
    return b;
}

void dsv4_pool_map_block(dsv4_cache *c, int seq, int64_t i, int32_t b) {
    seq_state *q = &c->seqs[seq];
    c->blk_ref[b]++;
    dsv4_pool_blk_tab(c, seq)[i] = b;
    q->n_blk++;
    if (i + 1 > q->blk_hi) q->blk_hi = i + 1;
}

void dsv4_pool_unref_block(dsv4_cache *c, int32_t b) {
    if (--c->blk_ref[b] > 0) return;
    c->blk_free[c->n_blk_free++] = b;
    if (c->sentinel) sentinel_block(c, b);
}

void dsv4_pool_make_room(dsv4_cache *c, int64_t blocks) {
    while (c->evict && c->n_blk_free < blocks && c->evict(c->evict_user)) {
    }
}

void dsv4_cache_set_evictor(dsv4_cache *c, int (*evict)(void *user), void *user) {
    c->evict = evict;
    c->evict_user = user;
}

int dsv4_cache_blk_refs(const dsv4_cache *c, int block) {
    return c && block >= 0 && block < c->n_blocks ? c->blk_ref[block] : 0;
}

/* ---- reservation ----------------------------------------------------------------------- */

/* Table ranges a span touches: WIN pages [*w0, *w1) and blocks [*b0, *b1). */
static void span_ranges(const dsv4_cache_plan *p, int64_t s, int64_t C, int with_cmp,
                        int64_t *w0, int64_t *w1, int64_t *b0, int64_t *b1) {
    int64_t lo, hi;
    dsv4_win_write_range(s, C, p->win, &lo, &hi);
    if (lo < hi) { *w0 = lo / p->win_block; *w1 = (hi - 1) / p->win_block + 1; }
    else *w0 = *w1 = 0;
    if (with_cmp && C > 0 && p->n_ratios) { *b0 = s / p->block; *b1 = (s + C - 1) / p->block + 1; }
    else *b0 = *b1 = 0;
}

/* Sets every entry of [a, b) equal to from to to; returns how many changed. */
static int64_t swap_entries(int32_t *t, int64_t a, int64_t b, int32_t from, int32_t to) {
    int64_t n = 0;
    for (int64_t i = a; i < b; i++)
        if (t[i] == from) { t[i] = to; n++; }
    return n;
}

int dsv4_cache_reserve(dsv4_cache *c, int n, const int *seq, const int64_t *start,
                       const int *count, int with_cmp, dsv4_err *err) {
    if (!c || n < 0 || (n > 0 && (!seq || !start || !count)))
        return dsv4_fail(err, DSV4_ERR_ARG, "cache reserve: bad arguments (n = %d)", n);
    const dsv4_cache_plan *p = &c->plan;
    /* Validate every span before touching anything. */
    for (int i = 0; i < n; i++) {
        if (!seq_ok(c, seq[i]))
            return dsv4_fail(err, DSV4_ERR_ARG, "cache reserve: span %d: sequence %d is not live",
                             i, seq[i]);
        const int64_t end_lim = p->opts.max_context + p->opts.d_max;
        if (start[i] < 0 || count[i] < 0 || start[i] > end_lim - count[i])
            return dsv4_fail(err, DSV4_ERR_ARG,
                             "cache reserve: span %d of sequence %d: rows [%lld, %lld + %d) "
                             "outside [0, max_context + d_max = %lld)", i, seq[i],
                             (long long)start[i], (long long)start[i], count[i],
                             (long long)end_lim);
        int64_t w0, w1, b0, b1;
        span_ranges(p, start[i], count[i], with_cmp, &w0, &w1, &b0, &b1);
        if (w1 > p->win_table_width || b1 > p->blk_table_width)
            return dsv4_fail(err, DSV4_ERR_ARG,
                             "cache reserve: span %d of sequence %d: rows [%lld, %lld) need block "
                             "%lld, beyond the block table width %d (max_context = %lld)", i,
                             seq[i], (long long)start[i], (long long)(start[i] + count[i]),
                             (long long)(b1 - 1), p->blk_table_width,
                             (long long)p->opts.max_context);
    }
    /* Mark and count what is missing (a sequence listed twice is counted once). */
    int64_t need_w = 0, need_b = 0;
    for (int i = 0; i < n; i++) {
        int64_t w0, w1, b0, b1;
        span_ranges(p, start[i], count[i], with_cmp, &w0, &w1, &b0, &b1);
        need_w += swap_entries(dsv4_pool_win_tab(c, seq[i]), w0, w1, NONE, MARK);
        need_b += swap_entries(dsv4_pool_blk_tab(c, seq[i]), b0, b1, NONE, MARK);
    }
    /* blocks only snapshots hold can be given back (LRU, by the engine's evictor) */
    if (need_b > c->n_blk_free && need_w <= c->n_win_free) dsv4_pool_make_room(c, need_b);
    const int short_w = need_w > c->n_win_free, short_b = need_b > c->n_blk_free;
    if (short_w || short_b) {
        for (int i = 0; i < n; i++) {
            int64_t w0, w1, b0, b1;
            span_ranges(p, start[i], count[i], with_cmp, &w0, &w1, &b0, &b1);
            swap_entries(dsv4_pool_win_tab(c, seq[i]), w0, w1, MARK, NONE);
            swap_entries(dsv4_pool_blk_tab(c, seq[i]), b0, b1, MARK, NONE);
        }
        if (short_w)
            return dsv4_fail(err, DSV4_ERR_CACHE_FULL,
                             "cache pool WIN: call needs %lld pages, %d free of %d total",
                             (long long)need_w, c->n_win_free, c->n_win_pages);
        return dsv4_fail(err, DSV4_ERR_CACHE_FULL,
                         "cache pool CMP/IDX blocks: call needs %lld blocks, %d free of %d total",
                         (long long)need_b, c->n_blk_free, c->n_blocks);
    }
    /* Turn marks into pages. */
    for (int i = 0; i < n; i++) {
        int64_t w0, w1, b0, b1;
        const int s = seq[i];
        span_ranges(p, start[i], count[i], with_cmp, &w0, &w1, &b0, &b1);
        const int32_t *wt = dsv4_pool_win_tab(c, s), *bt = dsv4_pool_blk_tab(c, s);
        for (int64_t j = w0; j < w1; j++)
            if (wt[j] == MARK) dsv4_pool_take_win(c, s, j);
        for (int64_t j = b0; j < b1; j++)
            if (bt[j] == MARK) dsv4_pool_map_block(c, s, j, dsv4_pool_pop_block(c));
    }
    return 0;
}

void dsv4_cache_trim(dsv4_cache *c, int seq, int64_t keep_from) {
    if (!seq_ok(c, seq)) return;
    seq_state *q = &c->seqs[seq];
    const int32_t *wt = dsv4_pool_win_tab(c, seq);
    int64_t i = q->win_lo;
    for (; i < q->win_hi && dsv4_win_page_dead(i, keep_from, c->plan.win, c->plan.win_block); i++)
        if (wt[i] >= 0) free_win_page(c, seq, i);
    q->win_lo = i;
}

void dsv4_cache_truncate(dsv4_cache *c, int seq, int64_t n) {
    if (!seq_ok(c, seq) || n < 0) return;
    seq_state *q = &c->seqs[seq];
    const int32_t *wt = dsv4_pool_win_tab(c, seq);
    int32_t *bt = dsv4_pool_blk_tab(c, seq);
    while (q->win_hi > q->win_lo && (q->win_hi - 1) * c->plan.win_block >= n) {
        if (wt[q->win_hi - 1] >= 0) free_win_page(c, seq, q->win_hi - 1);
        q->win_hi--;
    }
    if (q->win_hi <= q->win_lo) { q->win_lo = c->plan.win_table_width; q->win_hi = 0; }
    while (q->blk_hi > 0 && (q->blk_hi - 1) * (int64_t)c->plan.block >= n) {
        const int32_t b = bt[q->blk_hi - 1];
        if (b >= 0) {
            bt[q->blk_hi - 1] = NONE;
            q->n_blk--;
            dsv4_pool_unref_block(c, b);
        }
        q->blk_hi--;
    }
}

/* ---- row accessors --------------------------------------------------------------------- */

void *dsv4_cache_win_row(dsv4_cache *c, int seq, int layer, int64_t pos) {
    if (!seq_ok(c, seq) || layer < 0 || layer >= c->plan.n_layers || pos < 0) return NULL;
    const int64_t i = pos / c->plan.win_block;
    if (i >= c->plan.win_table_width) return NULL;
    const int32_t pg = dsv4_pool_win_tab(c, seq)[i];
    if (pg < 0) return NULL;
    return dsv4_pool_win_page(c, layer, pg) + (pos % c->plan.win_block) * c->plan.win_row_bytes;
}

DSV4_HOT_AT(dsv4_cache_cmp_row, 0x390)
void *dsv4_cache_cmp_row(dsv4_cache *c, int seq, int layer, int64_t entry) {
    if (!seq_ok(c, seq) || layer < 0 || layer >= c->plan.n_layers || entry < 0) return NULL;
    const int pool = c->plan.cmp_pool[layer];
    if (pool < 0) return NULL;
    const int64_t r = c->plan.ratios[pool];
    if (entry > INT64_MAX / r) return NULL;
    const int64_t i = entry * r / c->plan.block;
    if (i >= c->plan.blk_table_width) return NULL;
    const int32_t b = dsv4_pool_blk_tab(c, seq)[i];
    if (b < 0) return NULL;
    return dsv4_pool_cmp_page(c, pool, c->plan.cmp_slot[layer], b) + (entry % c->blk_rows[pool]) * c->plan.cmp_row_bytes;
}

void *dsv4_cache_idx_row(dsv4_cache *c, int seq, int layer, int64_t entry) {
    if (!seq_ok(c, seq) || layer < 0 || layer >= c->plan.n_layers || entry < 0) return NULL;
    const int slot = c->plan.idx_slot[layer];
    if (slot < 0 || entry > INT64_MAX / 4) return NULL;
    const int64_t i = entry * 4 / c->plan.block;
    if (i >= c->plan.blk_table_width) return NULL;
    const int32_t b = dsv4_pool_blk_tab(c, seq)[i];
    if (b < 0) return NULL;
    return dsv4_pool_idx_page(c, slot, b) + (entry % c->idx_rows) * c->plan.idx_row_bytes;
}

void *dsv4_cache_idx_run(dsv4_cache *c, int seq, int layer, int64_t entry, int64_t *n_same, int64_t *stride) {
    void *row = dsv4_cache_idx_row(c, seq, layer, entry);
    *stride = c->plan.idx_row_bytes;
    *n_same = row ? c->idx_rows - entry % c->idx_rows : 1; /* a block's rows are consecutive in its page */
    return row;
}

float *dsv4_cache_ring_row(dsv4_cache *c, int seq, int layer, int indexer, int64_t pos) {
    if (!seq_ok(c, seq) || layer < 0 || layer >= c->plan.n_layers || pos < 0) return NULL;
    const dsv4_cache_plan *p = &c->plan;
    const int64_t off = indexer ? p->idx_ring_off[layer] : p->ring_off[layer];
    if (off < 0) return NULL;
    const int64_t width = indexer ? 4 * (int64_t)p->dI
                                  : 2 * (int64_t)dsv4_cfg_coff(p->ratios[p->cmp_pool[layer]]) * p->hd;
    return dsv4_pool_slot(c, seq) + off + (pos % p->ring_len[layer]) * width;
}

/* ---- usage, lookups, debug aids -------------------------------------------------------- */

dsv4_cache_usage dsv4_cache_get_usage(const dsv4_cache *c) {
    dsv4_cache_usage u;
    memset(&u, 0, sizeof u);
    if (!c) return u;
    u.win_total = c->n_win_pages;
    u.win_used = c->n_win_pages - c->n_win_free;
    u.blk_total = c->n_blocks;
    u.blk_used = c->n_blocks - c->n_blk_free;
    u.slots_total = c->plan.opts.max_seqs;
    for (int s = 0; s < u.slots_total; s++) u.slots_used += c->seqs[s].live;
    return u;
}

int dsv4_cache_win_page(const dsv4_cache *c, int seq, int64_t pos) {
    if (!seq_ok(c, seq) || pos < 0 || pos / c->plan.win_block >= c->plan.win_table_width) return NONE;
    const int32_t v = dsv4_pool_win_tab(c, seq)[pos / c->plan.win_block];
    return v >= 0 ? v : NONE;
}

int dsv4_cache_blk_page(const dsv4_cache *c, int seq, int64_t pos) {
    if (!seq_ok(c, seq) || pos < 0 || pos / c->plan.block >= c->plan.blk_table_width) return NONE;
    const int32_t v = dsv4_pool_blk_tab(c, seq)[pos / c->plan.block];
    return v >= 0 ? v : NONE;
}

int dsv4_cache_win_owner(const dsv4_cache *c, int page) {
    return c && page >= 0 && page < c->n_win_pages ? c->win_owner[page] : NONE;
}

int dsv4_cache_blk_owner(const dsv4_cache *c, int block) {
    if (!c || block < 0 || block >= c->n_blocks || c->blk_ref[block] == 0) return NONE;
    for (int s = 0; s < c->plan.opts.max_seqs; s++) {
        const seq_state *q = &c->seqs[s];
        for (int64_t i = 0; q->live && i < q->blk_hi; i++)
            if (dsv4_pool_blk_tab(c, s)[i] == block) return s;
    }
    return -2;  /* held by snapshots only */
}

/* WIN bookkeeping: free stack, owners and tables agree. */
static int check_pool(const dsv4_cache *c, const char *name, int32_t total, const int32_t *stack,
                      int32_t n_free, const int32_t *owner, const int32_t *table, int width,
                      dsv4_err *err) {
    const int ms = c->plan.opts.max_seqs;
    int rc = 0;
    uint8_t *seen = total ? calloc((size_t)total, 1) : NULL;
    if (total && !seen) return dsv4_fail(err, DSV4_ERR_NOMEM, "cache check: out of memory");
    if (n_free < 0 || n_free > total) {
        rc = dsv4_fail(err, DSV4_ERR_STATE, "cache check %s: %d free of %d", name, n_free, total);
        goto done;
    }
    for (int32_t i = 0; i < n_free; i++) {
        const int32_t pg = stack[i];
        if (pg < 0 || pg >= total || seen[pg] || owner[pg] != NONE) {
            rc = dsv4_fail(err, DSV4_ERR_STATE,
                           "cache check %s: free list entry %d = page %d is out of range, listed "
                           "twice or owned", name, i, pg);
            goto done;
        }
        seen[pg] = 1;
    }
    int64_t mapped = 0;
    for (int s = 0; s < ms; s++) {
        const seq_state *q = &c->seqs[s];
        int64_t held = 0;
        for (int64_t i = 0; i < width; i++) {
            const int32_t pg = table[(int64_t)s * width + i];
            if (pg == NONE) continue;
            if (!q->live || pg < 0 || pg >= total || seen[pg] || owner[pg] != s ||
                i < q->win_lo || i >= q->win_hi) {
                rc = dsv4_fail(err, DSV4_ERR_STATE,
                               "cache check %s: sequence %d (live %d) entry %lld = page %d is bad "
                               "(free, mapped twice, owner %d, or outside the tracked range)",
                               name, s, q->live, (long long)i, pg,
                               pg >= 0 && pg < total ? owner[pg] : -9);
                goto done;
            }
            seen[pg] = 1;
            held++;
        }
        if (held != q->n_win) {
            rc = dsv4_fail(err, DSV4_ERR_STATE, "cache check %s: sequence %d maps %lld pages, "
                           "counts %lld", name, s, (long long)held,
                           (long long)q->n_win);
            goto done;
        }
        mapped += held;
    }
    if (n_free + mapped != total) {
        for (int32_t pg = 0; pg < total; pg++)
            if (!seen[pg]) {
                rc = dsv4_fail(err, DSV4_ERR_STATE,
                               "cache check %s: free %d + allocated %lld != total %d (page %d "
                               "is neither free nor mapped, owner %d)", name, n_free,
                               (long long)mapped, total, pg, owner[pg]);
                goto done;
            }
    }
done:
    free(seen);
    return rc;
}

/* Blocks: each count equals the table entries plus snapshot entries naming the block; the
 * free stack lists exactly the blocks at count 0, once each. */
static int check_blocks(const dsv4_cache *c, dsv4_err *err) {
    const int32_t total = c->n_blocks;
    const int width = c->plan.blk_table_width;
    int rc = 0;
    int32_t *refs = total ? calloc((size_t)total, sizeof *refs) : NULL;  /* (n_blocks) */
    if (total && !refs) return dsv4_fail(err, DSV4_ERR_NOMEM, "cache check: out of memory");
    if (c->n_blk_free < 0 || c->n_blk_free > total) {
        rc = dsv4_fail(err, DSV4_ERR_STATE, "cache check CMP/IDX: %d free of %d", c->n_blk_free, total);
        goto done;
    }
    for (int32_t i = 0; i < c->n_blk_free; i++) {
        const int32_t b = c->blk_free[i];
        if (b < 0 || b >= total || refs[b] || c->blk_ref[b] != 0) {
            rc = dsv4_fail(err, DSV4_ERR_STATE, "cache check CMP/IDX: free list entry %d = block %d "
                           "is out of range, listed twice or referenced", i, b);
            goto done;
        }
        refs[b] = -1;  /* listed as free */
    }
    for (int s = 0; s < c->plan.opts.max_seqs; s++) {
        const seq_state *q = &c->seqs[s];
        int64_t held = 0;
        for (int64_t i = 0; i < width; i++) {
            const int32_t b = dsv4_pool_blk_tab(c, s)[i];
            if (b == NONE) continue;
            if (!q->live || b < 0 || b >= total || refs[b] < 0 || i >= q->blk_hi) {
                rc = dsv4_fail(err, DSV4_ERR_STATE, "cache check CMP/IDX: sequence %d (live %d) entry "
                               "%lld = block %d is bad (free, or outside the tracked range)", s,
                               q->live, (long long)i, b);
                goto done;
            }
            refs[b]++;
            held++;
        }
        if (held != q->n_blk) {
            rc = dsv4_fail(err, DSV4_ERR_STATE, "cache check CMP/IDX: sequence %d maps %lld blocks, "
                           "counts %lld", s, (long long)held, (long long)q->n_blk);
            goto done;
        }
    }
    for (const dsv4_cache_snap *sn = c->snaps; sn; sn = sn->next)
        for (int i = 0; i < sn->n_shared; i++) {
            const int32_t b = sn->shared[i];
            if (b < 0 || b >= total || refs[b] < 0) {
                rc = dsv4_fail(err, DSV4_ERR_STATE, "cache check CMP/IDX: a snapshot of length %lld "
                               "lists block %d, which is free or out of range", (long long)sn->n, b);
                goto done;
            }
            refs[b]++;
        }
    for (int32_t b = 0; b < total; b++) {
        const int32_t want = refs[b] < 0 ? 0 : refs[b];
        if (c->blk_ref[b] != want || (refs[b] == 0)) {
            rc = dsv4_fail(err, DSV4_ERR_STATE, "cache check CMP/IDX: block %d has count %d but %d "
                           "references%s", b, c->blk_ref[b], want,
                           refs[b] == 0 ? " and is not on the free list" : "");
            goto done;
        }
    }
done:
    free(refs);
    return rc;
}

int dsv4_cache_check(const dsv4_cache *c, dsv4_err *err) {
    if (!c) return dsv4_fail(err, DSV4_ERR_ARG, "cache check: NULL cache");
    int rc = check_pool(c, "WIN", c->n_win_pages, c->win_free, c->n_win_free, c->win_owner,
                        c->win_table, c->plan.win_table_width, err);
    if (rc) return rc;
    return check_blocks(c, err);
}

void dsv4_cache_set_sentinel(dsv4_cache *c, int on) {
    if (!c) return;
    c->sentinel = on != 0;
    if (!on) return;
    for (int32_t pg = 0; pg < c->n_win_pages; pg++)
        if (c->win_owner[pg] == NONE) sentinel_win_page(c, pg);
    for (int32_t b = 0; b < c->n_blocks; b++)
        if (c->blk_ref[b] == 0) sentinel_block(c, b);
    for (int s = 0; s < c->plan.opts.max_seqs; s++)
        if (!c->seqs[s].live) fill_sentinel(dsv4_pool_slot(c, s), c->plan.slot_bytes);
}

/* Counts the 4-byte words of [p, p + n_bytes) (the last one possibly shorter) that are
 * not the sentinel; notes the byte offset of the first. */
static int64_t count_bad(const void *p, int64_t n_bytes, int64_t *first) {
    const uint8_t *b = p;
    int64_t bad = 0;
    for (int64_t i = 0; i < n_bytes; i += 4) {
        int differs = 0;
        for (int64_t k = i; k < i + 4 && k < n_bytes; k++) differs |= b[k] != sentinel_byte(k);
        if (differs) {
            if (!bad) *first = i;
            bad++;
        }
    }
    return bad;
}

int64_t dsv4_cache_sentinel_check(const dsv4_cache *c, dsv4_err *err) {
    if (!c) return 0;
    const dsv4_cache_plan *p = &c->plan;
    int64_t total = 0, first = 0;
#define NOTE(b, ...) do { if ((b) && !total) dsv4_fail(err, DSV4_ERR_STATE, __VA_ARGS__); total += (b); } while (0)
    for (int32_t pg = 0; pg < c->n_win_pages; pg++) {
        if (c->win_owner[pg] != NONE) continue;
        for (int l = 0; l < p->n_layers; l++) {
            int64_t b = count_bad(dsv4_pool_win_page(c, l, pg), c->win_rows * p->win_row_bytes, &first);
            NOTE(b, "free WIN page %d, layer %d: %lld words written (first at row %lld)", pg, l,
                 (long long)b, (long long)(first / p->win_row_bytes));
        }
    }
    for (int32_t blk = 0; blk < c->n_blocks; blk++) {
        if (c->blk_ref[blk] != 0) continue;
        for (int i = 0; i < p->n_ratios; i++)
            for (int s = 0; s < p->n_cmp_layers[i]; s++) {
                int64_t b = count_bad(dsv4_pool_cmp_page(c, i, s, blk), c->blk_rows[i] * p->cmp_row_bytes, &first);
                NOTE(b, "free block %d, CMP%d layer slot %d: %lld words written (first at row %lld)",
                     blk, p->ratios[i], s, (long long)b, (long long)(first / p->cmp_row_bytes));
            }
        for (int s = 0; s < p->n_idx_layers; s++) {
            int64_t b = count_bad(dsv4_pool_idx_page(c, s, blk), c->idx_rows * p->idx_row_bytes, &first);
            NOTE(b, "free block %d, IDX layer slot %d: %lld words written (first at row %lld)", blk,
                 s, (long long)b, (long long)(first / p->idx_row_bytes));
        }
    }
    for (int s = 0; s < p->opts.max_seqs; s++) {
        if (c->seqs[s].live) continue;
        int64_t b = count_bad(dsv4_pool_slot(c, s), p->slot_bytes, &first);
        NOTE(b, "free STATE slot %d: %lld words written (first at float %lld)", s, (long long)b,
             (long long)(first / 4));
    }
#undef NOTE
    return total;
}

void dsv4_cache_shuffle_free(dsv4_cache *c, uint64_t seed) {
    if (!c) return;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int k = 0; k < 2; k++) {
        int32_t *a = k ? c->blk_free : c->win_free;
        const int32_t n = k ? c->n_blk_free : c->n_win_free;
        for (int32_t i = n - 1; i > 0; i--) {  /* Fisher-Yates with xorshift64 */
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            const int32_t j = (int32_t)(x % (uint64_t)(i + 1));
            const int32_t t = a[i]; a[i] = a[j]; a[j] = t;
        }
    }
}
