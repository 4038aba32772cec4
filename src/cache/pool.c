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
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "cache/geom.h"
#include "util/err.h"

#define NONE (-1)
#define MARK (-2)  /* table entry counted by a reservation in progress */

typedef struct seq_state {
    int live;
    int64_t n_win, n_blk;     /* pages held */
    int64_t win_lo, win_hi;   /* table entries outside [win_lo, win_hi) are NONE */
    int64_t blk_hi;           /* blk_table entries >= blk_hi are NONE */
} seq_state;

struct dsv4_cache {
    dsv4_cache_plan plan;
    int32_t n_win_pages, n_blocks;
    int64_t win_rows, blk_rows[DSV4_MAX_RATIOS], idx_rows;  /* rows per page */
    float *win;                     /* (n_layers, n_win_pages, B_w, hd) */
    float *cmp[DSV4_MAX_RATIOS];    /* (n_cmp_layers[i], n_blocks, B/r_i, hd) */
    float *idx;                     /* (n_idx_layers, n_blocks, B/4, dI) */
    float *state;                   /* (max_seqs, slot_floats) */
    int32_t *win_free, n_win_free;  /* (n_win_pages) stack of free page ids */
    int32_t *blk_free, n_blk_free;  /* (n_blocks) */
    int32_t *win_owner;             /* (n_win_pages) owning sequence or NONE */
    int32_t *blk_owner;             /* (n_blocks) */
    int32_t *win_table;             /* (max_seqs, win_table_width) page id or NONE */
    int32_t *blk_table;             /* (max_seqs, blk_table_width) block id or NONE */
    seq_state *seqs;                /* (max_seqs) */
    int sentinel;
};

/* ---- storage helpers ------------------------------------------------------------------- */

static void fill_words(float *p, int64_t n, uint32_t bits) {
    for (int64_t i = 0; i < n; i++) memcpy(&p[i], &bits, 4);
}

static float *win_page_ptr(const dsv4_cache *c, int layer, int32_t page) {
    return c->win + ((int64_t)layer * c->n_win_pages + page) * c->win_rows * c->plan.hd;
}
static float *cmp_page_ptr(const dsv4_cache *c, int pool, int slot, int32_t blk) {
    return c->cmp[pool] + ((int64_t)slot * c->n_blocks + blk) * c->blk_rows[pool] * c->plan.hd;
}
static float *idx_page_ptr(const dsv4_cache *c, int slot, int32_t blk) {
    return c->idx + ((int64_t)slot * c->n_blocks + blk) * c->idx_rows * c->plan.dI;
}
static float *slot_ptr(const dsv4_cache *c, int seq) {
    return c->state + (int64_t)seq * c->plan.slot_floats;
}
static int32_t *win_tab(const dsv4_cache *c, int seq) {
    return c->win_table + (int64_t)seq * c->plan.win_table_width;
}
static int32_t *blk_tab(const dsv4_cache *c, int seq) {
    return c->blk_table + (int64_t)seq * c->plan.blk_table_width;
}

static void sentinel_win_page(dsv4_cache *c, int32_t page) {
    for (int l = 0; l < c->plan.n_layers; l++)
        fill_words(win_page_ptr(c, l, page), c->win_rows * c->plan.hd, DSV4_CACHE_SENTINEL);
}
static void sentinel_block(dsv4_cache *c, int32_t blk) {
    for (int i = 0; i < c->plan.n_ratios; i++)
        for (int s = 0; s < c->plan.n_cmp_layers[i]; s++)
            fill_words(cmp_page_ptr(c, i, s, blk), c->blk_rows[i] * c->plan.hd, DSV4_CACHE_SENTINEL);
    for (int s = 0; s < c->plan.n_idx_layers; s++)
        fill_words(idx_page_ptr(c, s, blk), c->idx_rows * c->plan.dI, DSV4_CACHE_SENTINEL);
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
    if (plan->opts.row_bytes_per_value != 4 || plan->opts.idx_bytes_per_value != 4)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "cache create: pools store F32 rows; plan has row_bytes_per_value = %d, "
                         "idx_bytes_per_value = %d (other storage is for planning only)",
                         plan->opts.row_bytes_per_value, plan->opts.idx_bytes_per_value);
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
    c->win = alloc_n((int64_t)p->n_layers * c->n_win_pages * c->win_rows * p->hd, 4, &failed);
    for (int i = 0; i < p->n_ratios; i++)
        c->cmp[i] = alloc_n((int64_t)p->n_cmp_layers[i] * c->n_blocks * c->blk_rows[i] * p->hd, 4,
                            &failed);
    if (p->n_idx_layers)
        c->idx = alloc_n((int64_t)p->n_idx_layers * c->n_blocks * c->idx_rows * p->dI, 4, &failed);
    c->state = alloc_n(ms * p->slot_floats, 4, &failed);
    c->win_free = alloc_n(c->n_win_pages, 4, &failed);
    c->blk_free = alloc_n(c->n_blocks, 4, &failed);
    c->win_owner = alloc_n(c->n_win_pages, 4, &failed);
    c->blk_owner = alloc_n(c->n_blocks, 4, &failed);
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
        c->blk_owner[i] = NONE;
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
    free(c->win);
    for (int i = 0; i < DSV4_MAX_RATIOS; i++) free(c->cmp[i]);
    free(c->idx);
    free(c->state);
    free(c->win_free);
    free(c->blk_free);
    free(c->win_owner);
    free(c->blk_owner);
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
    float *base = slot_ptr(c, seq);
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
    int32_t *t = win_tab(c, seq);
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
    int32_t *wt = win_tab(c, seq), *bt = blk_tab(c, seq);
    for (int64_t i = q->win_lo; i < q->win_hi; i++)
        if (wt[i] >= 0) free_win_page(c, seq, i);
    for (int64_t i = 0; i < q->blk_hi; i++) {
        const int32_t b = bt[i];
        if (b < 0) continue;
        bt[i] = NONE;
        c->blk_owner[b] = NONE;
        c->blk_free[c->n_blk_free++] = b;
        if (c->sentinel) sentinel_block(c, b);
    }
    memset(q, 0, sizeof *q);
    if (c->sentinel) fill_words(slot_ptr(c, seq), c->plan.slot_floats, DSV4_CACHE_SENTINEL);
    return 0;
}

int dsv4_cache_seq_live(const dsv4_cache *c, int seq) { return seq_ok(c, seq); }

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
        need_w += swap_entries(win_tab(c, seq[i]), w0, w1, NONE, MARK);
        need_b += swap_entries(blk_tab(c, seq[i]), b0, b1, NONE, MARK);
    }
    const int short_w = need_w > c->n_win_free, short_b = need_b > c->n_blk_free;
    if (short_w || short_b) {
        for (int i = 0; i < n; i++) {
            int64_t w0, w1, b0, b1;
            span_ranges(p, start[i], count[i], with_cmp, &w0, &w1, &b0, &b1);
            swap_entries(win_tab(c, seq[i]), w0, w1, MARK, NONE);
            swap_entries(blk_tab(c, seq[i]), b0, b1, MARK, NONE);
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
        seq_state *q = &c->seqs[s];
        span_ranges(p, start[i], count[i], with_cmp, &w0, &w1, &b0, &b1);
        int32_t *wt = win_tab(c, s), *bt = blk_tab(c, s);
        for (int64_t j = w0; j < w1; j++) {
            if (wt[j] != MARK) continue;
            const int32_t pg = c->win_free[--c->n_win_free];
            wt[j] = pg;
            c->win_owner[pg] = s;
            q->n_win++;
            if (j < q->win_lo) q->win_lo = j;
            if (j + 1 > q->win_hi) q->win_hi = j + 1;
        }
        for (int64_t j = b0; j < b1; j++) {
            if (bt[j] != MARK) continue;
            const int32_t b = c->blk_free[--c->n_blk_free];
            bt[j] = b;
            c->blk_owner[b] = s;
            q->n_blk++;
            if (j + 1 > q->blk_hi) q->blk_hi = j + 1;
        }
    }
    return 0;
}

void dsv4_cache_trim(dsv4_cache *c, int seq, int64_t keep_from) {
    if (!seq_ok(c, seq)) return;
    seq_state *q = &c->seqs[seq];
    const int32_t *wt = win_tab(c, seq);
    int64_t i = q->win_lo;
    for (; i < q->win_hi && dsv4_win_page_dead(i, keep_from, c->plan.win, c->plan.win_block); i++)
        if (wt[i] >= 0) free_win_page(c, seq, i);
    q->win_lo = i;
}

/* ---- row accessors --------------------------------------------------------------------- */

float *dsv4_cache_win_row(dsv4_cache *c, int seq, int layer, int64_t pos) {
    if (!seq_ok(c, seq) || layer < 0 || layer >= c->plan.n_layers || pos < 0) return NULL;
    const int64_t i = pos / c->plan.win_block;
    if (i >= c->plan.win_table_width) return NULL;
    const int32_t pg = win_tab(c, seq)[i];
    if (pg < 0) return NULL;
    return win_page_ptr(c, layer, pg) + (pos % c->plan.win_block) * c->plan.hd;
}

float *dsv4_cache_cmp_row(dsv4_cache *c, int seq, int layer, int64_t entry) {
    if (!seq_ok(c, seq) || layer < 0 || layer >= c->plan.n_layers || entry < 0) return NULL;
    const int pool = c->plan.cmp_pool[layer];
    if (pool < 0) return NULL;
    const int64_t r = c->plan.ratios[pool];
    if (entry > INT64_MAX / r) return NULL;
    const int64_t i = entry * r / c->plan.block;
    if (i >= c->plan.blk_table_width) return NULL;
    const int32_t b = blk_tab(c, seq)[i];
    if (b < 0) return NULL;
    return cmp_page_ptr(c, pool, c->plan.cmp_slot[layer], b) + (entry % c->blk_rows[pool]) * c->plan.hd;
}

float *dsv4_cache_idx_row(dsv4_cache *c, int seq, int layer, int64_t entry) {
    if (!seq_ok(c, seq) || layer < 0 || layer >= c->plan.n_layers || entry < 0) return NULL;
    const int slot = c->plan.idx_slot[layer];
    if (slot < 0 || entry > INT64_MAX / 4) return NULL;
    const int64_t i = entry * 4 / c->plan.block;
    if (i >= c->plan.blk_table_width) return NULL;
    const int32_t b = blk_tab(c, seq)[i];
    if (b < 0) return NULL;
    return idx_page_ptr(c, slot, b) + (entry % c->idx_rows) * c->plan.dI;
}

float *dsv4_cache_ring_row(dsv4_cache *c, int seq, int layer, int indexer, int64_t pos) {
    if (!seq_ok(c, seq) || layer < 0 || layer >= c->plan.n_layers || pos < 0) return NULL;
    const dsv4_cache_plan *p = &c->plan;
    const int64_t off = indexer ? p->idx_ring_off[layer] : p->ring_off[layer];
    if (off < 0) return NULL;
    const int64_t width = indexer ? 4 * (int64_t)p->dI
                                  : 2 * (int64_t)dsv4_cfg_coff(p->ratios[p->cmp_pool[layer]]) * p->hd;
    return slot_ptr(c, seq) + off + (pos % p->ring_len[layer]) * width;
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
    const int32_t v = win_tab(c, seq)[pos / c->plan.win_block];
    return v >= 0 ? v : NONE;
}

int dsv4_cache_blk_page(const dsv4_cache *c, int seq, int64_t pos) {
    if (!seq_ok(c, seq) || pos < 0 || pos / c->plan.block >= c->plan.blk_table_width) return NONE;
    const int32_t v = blk_tab(c, seq)[pos / c->plan.block];
    return v >= 0 ? v : NONE;
}

int dsv4_cache_win_owner(const dsv4_cache *c, int page) {
    return c && page >= 0 && page < c->n_win_pages ? c->win_owner[page] : NONE;
}

int dsv4_cache_blk_owner(const dsv4_cache *c, int block) {
    return c && block >= 0 && block < c->n_blocks ? c->blk_owner[block] : NONE;
}

/* One pool's bookkeeping: free stack, owners and tables agree. */
static int check_pool(const dsv4_cache *c, const char *name, int32_t total, const int32_t *stack,
                      int32_t n_free, const int32_t *owner, const int32_t *table, int width,
                      int is_win, dsv4_err *err) {
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
                (is_win && (i < q->win_lo || i >= q->win_hi)) || (!is_win && i >= q->blk_hi)) {
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
        if (held != (is_win ? q->n_win : q->n_blk)) {
            rc = dsv4_fail(err, DSV4_ERR_STATE, "cache check %s: sequence %d maps %lld pages, "
                           "counts %lld", name, s, (long long)held,
                           (long long)(is_win ? q->n_win : q->n_blk));
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

int dsv4_cache_check(const dsv4_cache *c, dsv4_err *err) {
    if (!c) return dsv4_fail(err, DSV4_ERR_ARG, "cache check: NULL cache");
    int rc = check_pool(c, "WIN", c->n_win_pages, c->win_free, c->n_win_free, c->win_owner,
                        c->win_table, c->plan.win_table_width, 1, err);
    if (rc) return rc;
    return check_pool(c, "CMP/IDX", c->n_blocks, c->blk_free, c->n_blk_free, c->blk_owner,
                      c->blk_table, c->plan.blk_table_width, 0, err);
}

void dsv4_cache_set_sentinel(dsv4_cache *c, int on) {
    if (!c) return;
    c->sentinel = on != 0;
    if (!on) return;
    for (int32_t pg = 0; pg < c->n_win_pages; pg++)
        if (c->win_owner[pg] == NONE) sentinel_win_page(c, pg);
    for (int32_t b = 0; b < c->n_blocks; b++)
        if (c->blk_owner[b] == NONE) sentinel_block(c, b);
    for (int s = 0; s < c->plan.opts.max_seqs; s++)
        if (!c->seqs[s].live) fill_words(slot_ptr(c, s), c->plan.slot_floats, DSV4_CACHE_SENTINEL);
}

/* Counts words of [p, p+n) that are not the sentinel; notes the first. */
static int64_t count_bad(const float *p, int64_t n, int64_t *first) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t w;
        memcpy(&w, &p[i], 4);
        if (w != DSV4_CACHE_SENTINEL) {
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
            int64_t b = count_bad(win_page_ptr(c, l, pg), c->win_rows * p->hd, &first);
            NOTE(b, "free WIN page %d, layer %d: %lld words written (first at row %lld)", pg, l,
                 (long long)b, (long long)(first / p->hd));
        }
    }
    for (int32_t blk = 0; blk < c->n_blocks; blk++) {
        if (c->blk_owner[blk] != NONE) continue;
        for (int i = 0; i < p->n_ratios; i++)
            for (int s = 0; s < p->n_cmp_layers[i]; s++) {
                int64_t b = count_bad(cmp_page_ptr(c, i, s, blk), c->blk_rows[i] * p->hd, &first);
                NOTE(b, "free block %d, CMP%d layer slot %d: %lld words written (first at row %lld)",
                     blk, p->ratios[i], s, (long long)b, (long long)(first / p->hd));
            }
        for (int s = 0; s < p->n_idx_layers; s++) {
            int64_t b = count_bad(idx_page_ptr(c, s, blk), c->idx_rows * p->dI, &first);
            NOTE(b, "free block %d, IDX layer slot %d: %lld words written (first at row %lld)", blk,
                 s, (long long)b, (long long)(first / p->dI));
        }
    }
    for (int s = 0; s < p->opts.max_seqs; s++) {
        if (c->seqs[s].live) continue;
        int64_t b = count_bad(slot_ptr(c, s), p->slot_floats, &first);
        NOTE(b, "free STATE slot %d: %lld words written (first at float %lld)", s, (long long)b,
             (long long)first);
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
