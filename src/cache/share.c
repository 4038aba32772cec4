/* share.c — snapshots of a sequence's cache that share closed compressed blocks
 * (spec/serving.md §g; issue 11). A fork is a snapshot restored at once.
 *
 * What a later call reads of a sequence at length len (serving.md §a.4):
 *   - compressed entries and indexer keys 0 … len/r − 1: in blocks [0, ceil(len/B)); a block
 *     b with (b+1)·B <= len holds only closed entries, which nobody writes again (new
 *     entries go to blocks >= len/B), so it is shared by reference. The MTP layer consumes
 *     positions up to m <= n, so when it compresses and runs (d_max = 1) the bound is
 *     min(n, m).
 *   - window rows of positions [len − min(len, win − 1), len), per layer;
 *   - compressor ring rows of positions p >= r·⌊len/r⌋ − (coff − 1)·r (the A candidates of
 *     the next window and the open window's own rows): the last len mod r + (coff − 1)·r
 *     positions. At a compression-aligned len that is 4 rows per CSA compressor, 0 per HCA.
 * Everything else in a STATE slot is never read before it is rewritten.
 */
#include <stdlib.h>
#include <string.h>

#include "cache/geom.h"
#include "cache/pool_impl.h"
#include "util/err.h"

/* Bytes of one block across every CMP pool and IDX (P_B), in the order copy_block uses. */
static int64_t block_bytes(const dsv4_cache *c) { return c->plan.block_bytes; }

/* Copies block blk between the pools and buf (to_pools: buf -> pools), rows as stored. */
static void copy_block(dsv4_cache *c, int32_t blk, uint8_t *buf, int to_pools) {
    const dsv4_cache_plan *p = &c->plan;
    for (int i = 0; i < p->n_ratios; i++)
        for (int s = 0; s < p->n_cmp_layers[i]; s++) {
            const size_t n = (size_t)(c->blk_rows[i] * p->cmp_row_bytes);
            uint8_t *pg = dsv4_pool_cmp_page(c, i, s, blk);
            memcpy(to_pools ? pg : buf, to_pools ? buf : pg, n);
            buf += n;
        }
    for (int s = 0; s < p->n_idx_layers; s++) {
        const size_t n = (size_t)(c->idx_rows * p->idx_row_bytes);
        uint8_t *pg = dsv4_pool_idx_page(c, s, blk);
        memcpy(to_pools ? pg : buf, to_pools ? buf : pg, n);
        buf += n;
    }
}

/* Ring rows later calls read at length len (see the top of this file). */
static int64_t ring_need(const dsv4_cache_plan *p, int layer, int64_t len) {
    const int r = p->ratios[p->cmp_pool[layer]];
    return dsv4_ring_rows_read(r, dsv4_cfg_coff(r), len);
}
static int64_t ring_width(const dsv4_cache_plan *p, int layer, int indexer) {
    return indexer ? 4 * (int64_t)p->dI
                   : 2 * (int64_t)dsv4_cfg_coff(p->ratios[p->cmp_pool[layer]]) * p->hd;
}

/* Copies the ring rows of the snapshot to (to_slot) or from seq's STATE slot. */
static void copy_rings(dsv4_cache *c, int seq, const dsv4_cache_snap *s, int to_slot) {
    const dsv4_cache_plan *p = &c->plan;
    float *buf = s->ring;  /* (ring_floats) */
    for (int l = 0; l < p->n_layers; l++)
        for (int ix = 0; ix < 2 && p->ring_off[l] >= 0; ix++) {
            if (ix && p->idx_ring_off[l] < 0) continue;
            const int64_t w = ring_width(p, l, ix);
            for (int64_t pos = s->len[l] - s->ring_n[l]; pos < s->len[l]; pos++, buf += w) {
                float *row = dsv4_cache_ring_row(c, seq, l, ix, pos);
                memcpy(to_slot ? row : buf, to_slot ? buf : row, (size_t)w * sizeof(float));
            }
        }
}

/* Copies the window rows of the snapshot to (to_pages) or from seq's WIN pages; the pages
 * exist (checked or allocated by the caller). */
static void copy_windows(dsv4_cache *c, int seq, const dsv4_cache_snap *s, int to_pages) {
    const dsv4_cache_plan *p = &c->plan;
    uint8_t *buf = s->win;  /* (win_bytes) */
    for (int l = 0; l < p->n_layers; l++)
        for (int64_t pos = s->len[l] - s->win_n[l]; pos < s->len[l]; pos++, buf += p->win_row_bytes) {
            uint8_t *row = dsv4_cache_win_row(c, seq, l, pos);
            memcpy(to_pages ? row : buf, to_pages ? buf : row, (size_t)p->win_row_bytes);
        }
}

/* WIN table entries [*w0, *w1) that hold the snapshot's window rows. */
static void win_entries(const dsv4_cache_plan *p, const dsv4_cache_snap *s, int64_t *w0, int64_t *w1) {
    int64_t lo = INT64_MAX, hi = 0;
    for (int l = 0; l < p->n_layers; l++) {
        if (!s->win_n[l]) continue;
        if (s->len[l] - s->win_n[l] < lo) lo = s->len[l] - s->win_n[l];
        if (s->len[l] > hi) hi = s->len[l];
    }
    if (lo >= hi) { *w0 = *w1 = 0; return; }
    *w0 = lo / p->win_block;
    *w1 = (hi - 1) / p->win_block + 1;
}

static void unlink_snap(dsv4_cache *c, dsv4_cache_snap *s) {
    if (s->prev) s->prev->next = s->next;
    else if (c->snaps == s) c->snaps = s->next;
    if (s->next) s->next->prev = s->prev;
    s->next = s->prev = NULL;
}

/* A snapshot of lengths (n, m) sized for its rows; with share, the closed blocks are to be
 * shared (the caller fills s->shared), else every block is a private copy; buffers zeroed. */
static int snap_alloc(dsv4_cache *c, int64_t n, int64_t m, int share, dsv4_cache_snap **out,
                      dsv4_err *err) {
    const dsv4_cache_plan *p = &c->plan;
    *out = NULL;
    if (n < 0 || m < 0 || m > n || n > p->opts.max_context)
        return dsv4_fail(err, DSV4_ERR_ARG, "cache snapshot: lengths n = %lld, m = %lld are not "
                         "0 <= m <= n <= max_context = %lld", (long long)n, (long long)m,
                         (long long)p->opts.max_context);
    dsv4_cache_snap *s = calloc(1, sizeof *s);
    if (!s) return dsv4_fail(err, DSV4_ERR_NOMEM, "cache snapshot: out of memory");
    s->n = n;
    s->m = m;
    int64_t closed = n;  /* positions every compressing layer has consumed */
    for (int l = 0; l < p->n_layers; l++) {
        s->len[l] = l < p->n_main_layers ? n : m;
        s->win_n[l] = dsv4_win_rows_read(p->win, s->len[l]);
        s->win_bytes += s->win_n[l] * p->win_row_bytes;
        if (p->ring_off[l] < 0) continue;
        /* an MTP layer writes only when the engine runs MTP (d_max = 1) */
        if ((l < p->n_main_layers || p->opts.d_max > 0) && s->len[l] < closed) closed = s->len[l];
        s->ring_n[l] = ring_need(p, l, s->len[l]);
        s->ring_floats += s->ring_n[l] * ring_width(p, l, 0);
        if (p->idx_ring_off[l] >= 0) s->ring_floats += s->ring_n[l] * ring_width(p, l, 1);
    }
    const int64_t end = p->n_ratios ? (n + p->block - 1) / p->block : 0;  /* blocks in use */
    s->n_shared = share && p->n_ratios ? (int)(closed / p->block) : 0;
    s->n_private = (int)(end - s->n_shared);
    const int64_t bb = block_bytes(c);
    s->shared = s->n_shared ? malloc((size_t)s->n_shared * sizeof *s->shared) : NULL;
    s->priv = s->n_private ? calloc((size_t)s->n_private, (size_t)bb) : NULL;
    s->win = s->win_bytes ? calloc((size_t)s->win_bytes, 1) : NULL;
    s->ring = s->ring_floats ? calloc((size_t)s->ring_floats, sizeof(float)) : NULL;
    if ((s->n_shared && !s->shared) || (s->n_private && !s->priv) || (s->win_bytes && !s->win) ||
        (s->ring_floats && !s->ring)) {
        free(s->shared); free(s->priv); free(s->win); free(s->ring); free(s);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "cache snapshot: out of memory");
    }
    s->host_bytes = (int64_t)sizeof *s + 4 * (s->n_shared + s->ring_floats) + s->n_private * bb + s->win_bytes;
    *out = s;
    return DSV4_OK;
}

static void link_snap(dsv4_cache *c, dsv4_cache_snap *s) {
    s->next = c->snaps;
    if (c->snaps) c->snaps->prev = s;
    c->snaps = s;
}

int dsv4_cache_snap_take(dsv4_cache *c, int seq, int64_t n, int64_t m, dsv4_cache_snap **out,
                         dsv4_err *err) {
    if (!c || !out) return dsv4_fail(err, DSV4_ERR_ARG, "cache snapshot: NULL argument");
    *out = NULL;
    const dsv4_cache_plan *p = &c->plan;
    if (!dsv4_cache_seq_live(c, seq))
        return dsv4_fail(err, DSV4_ERR_ARG, "cache snapshot: sequence %d is not live", seq);
    dsv4_cache_snap *s;
    int rc = snap_alloc(c, n, m, 1, &s, err);
    if (rc) return rc;
    /* every page the snapshot reads must exist */
    const int32_t *bt = dsv4_pool_blk_tab(c, seq);
    for (int64_t i = 0; i < s->n_shared + s->n_private && !rc; i++)
        if (bt[i] < 0)
            rc = dsv4_fail(err, DSV4_ERR_STATE, "cache snapshot: sequence %d has no block for "
                           "positions [%lld, %lld) below its length %lld", seq,
                           (long long)(i * p->block), (long long)((i + 1) * p->block), (long long)n);
    for (int l = 0; l < p->n_layers && !rc; l++)
        for (int64_t pos = s->len[l] - s->win_n[l]; pos < s->len[l] && !rc; pos++)
            if (!dsv4_cache_win_row(c, seq, l, pos))
                rc = dsv4_fail(err, DSV4_ERR_STATE, "cache snapshot: sequence %d has no window page "
                               "for position %lld", seq, (long long)pos);
    if (rc) {
        s->n_shared = 0;  /* no references taken yet */
        dsv4_cache_snap_free(c, s);
        return rc;
    }
    const int64_t bb = block_bytes(c);
    for (int i = 0; i < s->n_shared; i++) {
        s->shared[i] = bt[i];
        c->blk_ref[bt[i]]++;
    }
    for (int i = 0; i < s->n_private; i++) copy_block(c, bt[s->n_shared + i], s->priv + i * bb, 0);
    copy_windows(c, seq, s, 0);
    copy_rings(c, seq, s, 0);
    link_snap(c, s);
    *out = s;
    return DSV4_OK;
}

int dsv4_cache_snap_new(dsv4_cache *c, int64_t n, int64_t m, dsv4_cache_snap **out, dsv4_err *err) {
    if (!c || !out) return dsv4_fail(err, DSV4_ERR_ARG, "cache snapshot: NULL argument");
    int rc = snap_alloc(c, n, m, 0, out, err);
    if (!rc) link_snap(c, *out);
    return rc;
}

/* ---- rows of a snapshot ------------------------------------------------------------------ */

/* Row `row` of the page (pool i or IDX when i < 0, layer slot `slot`) of block-table entry
 * b: in the pools when shared, else in the private copy. */
static void *snap_block_row(const dsv4_cache *c, const dsv4_cache_snap *s, int64_t b, int i,
                            int slot, int64_t row) {
    const dsv4_cache_plan *p = &c->plan;
    if (b < s->n_shared)
        return i >= 0 ? dsv4_pool_cmp_page(c, i, slot, s->shared[b]) + row * p->cmp_row_bytes
                      : dsv4_pool_idx_page(c, slot, s->shared[b]) + row * p->idx_row_bytes;
    uint8_t *base = s->priv + (b - s->n_shared) * block_bytes(c);  /* copy_block's order */
    for (int j = 0; j < p->n_ratios; j++) {
        if (j == i) return base + ((int64_t)slot * c->blk_rows[j] + row) * p->cmp_row_bytes;
        base += (int64_t)p->n_cmp_layers[j] * c->blk_rows[j] * p->cmp_row_bytes;
    }
    return base + ((int64_t)slot * c->idx_rows + row) * p->idx_row_bytes;
}

void *dsv4_cache_snap_cmp_row(const dsv4_cache *c, const dsv4_cache_snap *s, int layer, int64_t entry) {
    const dsv4_cache_plan *p = &c->plan;
    if (layer < 0 || layer >= p->n_layers || p->cmp_pool[layer] < 0 || entry < 0) return NULL;
    const int i = p->cmp_pool[layer];
    const int64_t b = entry * p->ratios[i] / p->block;
    if (b >= s->n_shared + s->n_private) return NULL;
    return snap_block_row(c, s, b, i, p->cmp_slot[layer], entry % c->blk_rows[i]);
}

void *dsv4_cache_snap_idx_row(const dsv4_cache *c, const dsv4_cache_snap *s, int layer, int64_t entry) {
    const dsv4_cache_plan *p = &c->plan;
    if (layer < 0 || layer >= p->n_layers || p->idx_slot[layer] < 0 || entry < 0) return NULL;
    const int64_t b = entry * 4 / p->block;
    if (b >= s->n_shared + s->n_private) return NULL;
    return snap_block_row(c, s, b, -1, p->idx_slot[layer], entry % c->idx_rows);
}

void *dsv4_cache_snap_win_row(const dsv4_cache *c, const dsv4_cache_snap *s, int layer, int64_t pos) {
    const dsv4_cache_plan *p = &c->plan;
    if (layer < 0 || layer >= p->n_layers || pos < s->len[layer] - s->win_n[layer] || pos >= s->len[layer])
        return NULL;
    uint8_t *row = s->win;
    for (int l = 0; l < layer; l++) row += s->win_n[l] * p->win_row_bytes;
    return row + (pos - (s->len[layer] - s->win_n[layer])) * p->win_row_bytes;
}

float *dsv4_cache_snap_ring_row(const dsv4_cache *c, const dsv4_cache_snap *s, int layer,
                                int indexer, int64_t pos) {
    const dsv4_cache_plan *p = &c->plan;
    if (layer < 0 || layer >= p->n_layers || p->ring_off[layer] < 0 ||
        (indexer && p->idx_ring_off[layer] < 0) || pos < s->len[layer] - s->ring_n[layer] ||
        pos >= s->len[layer])
        return NULL;
    float *row = s->ring;
    for (int l = 0; l <= layer; l++)
        for (int ix = 0; ix < 2 && p->ring_off[l] >= 0; ix++) {
            if (ix && p->idx_ring_off[l] < 0) continue;
            if (l == layer && ix == indexer)
                return row + (pos - (s->len[l] - s->ring_n[l])) * ring_width(p, l, ix);
            row += s->ring_n[l] * ring_width(p, l, ix);
        }
    return NULL;
}

void dsv4_cache_snap_lengths(const dsv4_cache_snap *s, int64_t *n, int64_t *m) {
    *n = s->n;
    *m = s->m;
}

int64_t dsv4_cache_snap_ring_rows(const dsv4_cache_snap *s, int layer) {
    return layer >= 0 && layer < DSV4_MAX_LAYERS ? s->ring_n[layer] : 0;
}

int64_t dsv4_cache_snap_win_rows(const dsv4_cache_snap *s, int layer) {
    return layer >= 0 && layer < DSV4_MAX_LAYERS ? s->win_n[layer] : 0;
}

int dsv4_cache_snap_restore(dsv4_cache *c, const dsv4_cache_snap *s, int seq, dsv4_err *err) {
    if (!c || !s) return dsv4_fail(err, DSV4_ERR_ARG, "cache restore: NULL argument");
    const dsv4_cache_plan *p = &c->plan;
    if (!dsv4_cache_seq_live(c, seq))
        return dsv4_fail(err, DSV4_ERR_ARG, "cache restore: sequence %d is not live", seq);
    seq_state *q = &c->seqs[seq];
    if (q->n_win || q->n_blk)
        return dsv4_fail(err, DSV4_ERR_STATE, "cache restore: sequence %d already holds pages", seq);
    int64_t w0, w1;
    win_entries(p, s, &w0, &w1);
    if (w1 > p->win_table_width || s->n_shared + s->n_private > p->blk_table_width)
        return dsv4_fail(err, DSV4_ERR_ARG, "cache restore: a snapshot of length %lld does not fit "
                         "the tables (max_context %lld)", (long long)s->n,
                         (long long)p->opts.max_context);
    if (w1 - w0 > c->n_win_free)
        return dsv4_fail(err, DSV4_ERR_CACHE_FULL, "cache pool WIN: restore needs %lld pages, %d "
                         "free of %d total", (long long)(w1 - w0), c->n_win_free, c->n_win_pages);
    if (s->n_private > c->n_blk_free) dsv4_pool_make_room(c, s->n_private);
    if (s->n_private > c->n_blk_free)
        return dsv4_fail(err, DSV4_ERR_CACHE_FULL, "cache pool CMP/IDX blocks: restore needs %d "
                         "blocks, %d free of %d total", s->n_private, c->n_blk_free, c->n_blocks);
    const int64_t bb = block_bytes(c);
    for (int i = 0; i < s->n_shared; i++) dsv4_pool_map_block(c, seq, i, s->shared[i]);
    for (int i = 0; i < s->n_private; i++) {
        const int32_t b = dsv4_pool_pop_block(c);
        dsv4_pool_map_block(c, seq, s->n_shared + i, b);
        copy_block(c, b, s->priv + i * bb, 1);
    }
    for (int64_t i = w0; i < w1; i++) dsv4_pool_take_win(c, seq, i);
    copy_windows(c, seq, s, 1);
    copy_rings(c, seq, s, 1);
    return DSV4_OK;
}

void dsv4_cache_snap_free(dsv4_cache *c, dsv4_cache_snap *s) {
    if (!c || !s) return;
    unlink_snap(c, s);
    for (int i = 0; i < s->n_shared; i++) dsv4_pool_unref_block(c, s->shared[i]);
    free(s->shared); free(s->priv); free(s->win); free(s->ring); free(s);
}

int64_t dsv4_cache_snap_host_bytes(const dsv4_cache_snap *s) { return s ? s->host_bytes : 0; }

int dsv4_cache_snap_blocks(const dsv4_cache_snap *s, int *n_shared, int *n_private) {
    *n_shared = s ? s->n_shared : 0;
    *n_private = s ? s->n_private : 0;
    return *n_shared + *n_private;
}

int64_t dsv4_cache_snap_only_blocks(const dsv4_cache *c) {
    if (!c || !c->n_blocks) return 0;
    uint8_t *mapped = calloc((size_t)c->n_blocks, 1);  /* (n_blocks) some live table maps it */
    if (!mapped) return -1;
    for (int s = 0; s < c->plan.opts.max_seqs; s++)
        for (int64_t i = 0; c->seqs[s].live && i < c->seqs[s].blk_hi; i++) {
            const int32_t b = dsv4_pool_blk_tab(c, s)[i];
            if (b >= 0) mapped[b] = 1;
        }
    int64_t n = 0;
    for (int32_t b = 0; b < c->n_blocks; b++) n += c->blk_ref[b] > 0 && !mapped[b];
    free(mapped);
    return n;
}
