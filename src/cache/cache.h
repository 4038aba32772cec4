/* cache.h — paged cache pools and the planner that sizes them (spec/serving.md §a).
 *
 * Pools: WIN (window KV rows, every main layer + MTP layers), CMP[r] (compressed entries,
 * one pool per distinct ratio > 0), IDX (indexer keys of CSA layers), STATE (one slot per
 * sequence holding every compressor's projection ring). WIN/CMP rows and IDX keys are stored
 * in the plan's formats (kernels/kv_rows.h: F32, BF16, FP8-split); STATE is always F32.
 * ALL geometry is computed by dsv4_cache_plan_make; nothing else recomputes a size.
 */
#ifndef DSV4_CACHE_CACHE_H
#define DSV4_CACHE_CACHE_H

#include <stdint.h>

#include "dsv4.h"
#include "model/config.h"

#define DSV4_MAX_RATIOS 8

typedef struct dsv4_cache_opts {
    int64_t max_context;   /* longest sequence (positions) */
    int max_seqs;          /* live sequences = STATE slots */
    int c_max;             /* most rows of one span */
    int d_max;             /* draft rows verified per step: 1 with MTP, else 0 */
    int block;             /* B: compressed block size; 0 = lcm of ratios */
    int win_block;         /* B_w: window page rows; 0 = 64 */
    uint64_t budget_bytes; /* bytes for all pools; 0 = exactly enough for max_seqs full sequences */
    int row_bytes_per_value;  /* WIN/CMP storage (kernels/kv_rows.h DSV4_ROW_*): 4 = F32,
                               * 2 = BF16, 1 = FP8-split; 0 = F32 */
    int idx_bytes_per_value;  /* IDX storage: 4 = F32, 2 = BF16, 3 = FP4 (DSV4_ROW_FP4; a code,
                               * not a byte count: only with idx_fp4_lossless); 0 = F32 */
    int idx_fp4_lossless;     /* 1: fidelity item F3 rounds every key to FP4, so FP4 IDX rows
                               * are lossless and allowed (check 6) */
} dsv4_cache_opts;

typedef struct dsv4_cache_plan {
    dsv4_cache_opts opts;        /* after defaults are filled in */
    int hd, dI, win;             /* row widths and window, copied from the config */
    int n_layers;                /* main + MTP layers */
    int n_main_layers;           /* layers [0, n_main_layers) follow n, the rest (MTP) m */
    int block, win_block;        /* B, B_w */
    /* per-layer placement (-1 where the layer has no such state) */
    int cmp_pool[DSV4_MAX_LAYERS];   /* index into ratios[] */
    int cmp_slot[DSV4_MAX_LAYERS];   /* layer index within its CMP pool */
    int idx_slot[DSV4_MAX_LAYERS];   /* layer index within IDX */
    int n_ratios;
    int ratios[DSV4_MAX_RATIOS];     /* distinct nonzero ratios, ascending */
    int n_cmp_layers[DSV4_MAX_RATIOS];
    int n_idx_layers;
    /* compressor rings inside a STATE slot (floats from the slot start) */
    int ring_len[DSV4_MAX_LAYERS];       /* L_r = coff*r - 1 + d_max, 0 for ratio 0 */
    int64_t ring_off[DSV4_MAX_LAYERS];   /* main compressor ring: [L_r][2*coff*hd] */
    int64_t idx_ring_off[DSV4_MAX_LAYERS]; /* indexer compressor ring: [L_r][2*2*dI], CSA only */
    int64_t slot_floats;
    /* bytes */
    int64_t win_row_bytes, cmp_row_bytes, idx_row_bytes;
    int64_t win_page_bytes;              /* B_w rows x all WIN layers */
    int64_t cmp_page_bytes[DSV4_MAX_RATIOS]; /* B/r rows x layers of that ratio */
    int64_t idx_page_bytes;              /* B/4 rows x IDX layers */
    int64_t slot_bytes;
    int w_live;                          /* most WIN pages one sequence holds during a call */
    int64_t seq_fixed_bytes;             /* F = slot + w_live x WIN page */
    int64_t block_bytes;                 /* P_B: one block in every CMP pool and IDX */
    double bytes_per_token;              /* P_B / B */
    int64_t n_blocks;                    /* N_B */
    int64_t token_capacity;              /* T_cap */
    int64_t win_pages;                   /* max_seqs x w_live */
    int blk_table_width;                 /* ceil(max_context / B) */
    int win_table_width;                 /* ceil((max_context + d_max) / B_w) */
    int64_t total_bytes;
} dsv4_cache_plan;

/* Derives the plan and runs the startup checks of serving.md §a.2; errors name the
 * quantity, its value and the bound. */
int dsv4_cache_plan_make(const dsv4_config *cfg, const dsv4_cache_opts *opts,
                         dsv4_cache_plan *plan, dsv4_err *err);

typedef struct dsv4_cache dsv4_cache;

int dsv4_cache_create(const dsv4_cache_plan *plan, dsv4_cache **out, dsv4_err *err);
void dsv4_cache_free(dsv4_cache *c);
const dsv4_cache_plan *dsv4_cache_get_plan(const dsv4_cache *c);

/* Takes a free STATE slot, clears it (projections 0, scores -inf) and empties its tables.
 * The slot index is the sequence handle. DSV4_ERR_CACHE_FULL when none is free. */
int dsv4_cache_seq_alloc(dsv4_cache *c, int *seq, dsv4_err *err);
/* Returns all pages and the slot; an unknown or freed handle is DSV4_ERR_ARG. */
int dsv4_cache_seq_release(dsv4_cache *c, int seq, dsv4_err *err);
int dsv4_cache_seq_live(const dsv4_cache *c, int seq);

/* All-or-nothing allocation for one call: for each span i (seq[i], rows [start[i],
 * start[i]+count[i])) the WIN pages the call will write and, when with_cmp, the compressed
 * blocks. On failure nothing is allocated and the message names the pool, pages needed,
 * free and total. */
int dsv4_cache_reserve(dsv4_cache *c, int n, const int *seq, const int64_t *start,
                       const int *count, int with_cmp, dsv4_err *err);
/* Frees window pages whose positions are all below keep_from - win + 1. */
void dsv4_cache_trim(dsv4_cache *c, int seq, int64_t keep_from);
/* Frees the pages (WIN and compressed blocks) whose positions all lie at or beyond n: after
 * a speculative span is cut back to length n, the pages only its rejected rows used. */
void dsv4_cache_truncate(dsv4_cache *c, int seq, int64_t n);

/* Row accessors: the stored row (win_row_bytes / cmp_row_bytes / idx_row_bytes in the plan's
 * formats; F32 floats of width hd / hd / dI when they are 4); NULL when the page is not
 * reserved. */
void *dsv4_cache_win_row(dsv4_cache *c, int seq, int layer, int64_t pos);
void *dsv4_cache_cmp_row(dsv4_cache *c, int seq, int layer, int64_t entry);
void *dsv4_cache_idx_row(dsv4_cache *c, int seq, int layer, int64_t entry);
/* dsv4_cache_idx_row's row of `entry`, and in *n_same how many keys from it on (itself
 * included) lie in the same block, rows *stride bytes apart: keys entry + i, i < *n_same, are
 * at row + i * *stride (one block-table lookup for a block's keys). NULL (and *n_same 1)
 * where dsv4_cache_idx_row gives NULL. */
void *dsv4_cache_idx_run(dsv4_cache *c, int seq, int layer, int64_t entry, int64_t *n_same, int64_t *stride);
/* Ring row of position pos: [a | b], each coff*d floats, slot pos mod L_r. */
float *dsv4_cache_ring_row(dsv4_cache *c, int seq, int layer, int indexer, int64_t pos);

/* Pages in use / total per pool, for tests and `dsv4 info`. */
typedef struct dsv4_cache_usage {
    int64_t win_used, win_total;
    int64_t blk_used, blk_total;
    int slots_used, slots_total;
} dsv4_cache_usage;
dsv4_cache_usage dsv4_cache_get_usage(const dsv4_cache *c);

/* ---- sharing: forks and snapshots (share.c; spec/serving.md §g, issue 11) -------------- */

/* A sequence's state at main length n and MTP length m, kept outside any STATE slot:
 * compressed blocks closed for every compressing layer (all windows of the block are
 * pooled, main and MTP) are shared by reference; the open block(s), the window rows of the
 * last win-1 positions of each layer and the compressor ring rows later calls read are
 * copied. Nothing a sequence writes after its length can touch a closed block, so sharing
 * is exact. A snapshot lives until dsv4_cache_snap_free or dsv4_cache_free. */
typedef struct dsv4_cache_snap dsv4_cache_snap;

/* Snapshot of live sequence seq, whose main length is n and MTP length m (m <= n; the
 * caller's counters). Takes no pool pages. */
int dsv4_cache_snap_take(dsv4_cache *c, int seq, int64_t n, int64_t m, dsv4_cache_snap **out,
                         dsv4_err *err);
/* Writes the snapshot into seq, a sequence fresh from dsv4_cache_seq_alloc (no pages):
 * maps the shared blocks, allocates and fills the copied ones and the window pages, fills
 * the rings. All-or-nothing: DSV4_ERR_CACHE_FULL (after asking the evictor for room) leaves
 * seq empty. */
int dsv4_cache_snap_restore(dsv4_cache *c, const dsv4_cache_snap *s, int seq, dsv4_err *err);
void dsv4_cache_snap_free(dsv4_cache *c, dsv4_cache_snap *s);
/* An empty snapshot of lengths (n, m) whose blocks are all private copies (zero rows), for
 * a file reader to fill through the row accessors below; it touches no pool page. */
int dsv4_cache_snap_new(dsv4_cache *c, int64_t n, int64_t m, dsv4_cache_snap **out, dsv4_err *err);
/* Rows a snapshot holds (NULL outside them): compressed entry / indexer key `entry` of a
 * layer, window row and compressor ring row ([a | b], full width) of position pos. Shared
 * blocks are read in the pools: write only into snapshots from dsv4_cache_snap_new. */
void *dsv4_cache_snap_cmp_row(const dsv4_cache *c, const dsv4_cache_snap *s, int layer, int64_t entry);
void *dsv4_cache_snap_idx_row(const dsv4_cache *c, const dsv4_cache_snap *s, int layer, int64_t entry);
void *dsv4_cache_snap_win_row(const dsv4_cache *c, const dsv4_cache_snap *s, int layer, int64_t pos);
float *dsv4_cache_snap_ring_row(const dsv4_cache *c, const dsv4_cache_snap *s, int layer,
                                int indexer, int64_t pos);
void dsv4_cache_snap_lengths(const dsv4_cache_snap *s, int64_t *n, int64_t *m);
/* Window rows / ring rows of a layer the snapshot keeps (the last ones before its length). */
int64_t dsv4_cache_snap_win_rows(const dsv4_cache_snap *s, int layer);
int64_t dsv4_cache_snap_ring_rows(const dsv4_cache_snap *s, int layer);
/* Bytes the snapshot's copies take in host memory (its shared blocks are pool pages). */
int64_t dsv4_cache_snap_host_bytes(const dsv4_cache_snap *s);
/* Blocks the snapshot shares / copies. */
int dsv4_cache_snap_blocks(const dsv4_cache_snap *s, int *n_shared, int *n_private);
/* Blocks referenced only by snapshots (no live sequence maps them): what evicting every
 * snapshot would give back. */
int64_t dsv4_cache_snap_only_blocks(const dsv4_cache *c);

/* The pools call evict(user) when a reservation is short of blocks, until enough are free
 * or it returns 0 (nothing left to evict); it must free snapshots only. */
void dsv4_cache_set_evictor(dsv4_cache *c, int (*evict)(void *user), void *user);
/* References on a block (table entries + snapshots); 0 when free. */
int dsv4_cache_blk_refs(const dsv4_cache *c, int block);

/* ---- lookups and debug aids (additive: tests and debug builds) ------------------------ */

/* Page id holding window position pos / block id holding compressed source position pos
 * of a live sequence; -1 when none is reserved (or the handle or position is invalid). */
int dsv4_cache_win_page(const dsv4_cache *c, int seq, int64_t pos);
int dsv4_cache_blk_page(const dsv4_cache *c, int seq, int64_t pos);
/* Owning sequence of a page / block id, -1 when free; for a shared block the lowest live
 * sequence mapping it, -2 when only snapshots hold it. */
int dsv4_cache_win_owner(const dsv4_cache *c, int page);
int dsv4_cache_blk_owner(const dsv4_cache *c, int block);
/* Consistency: every WIN page is either free (listed once, no owner) or owned by a live
 * sequence whose table maps it exactly once; every block's reference count equals the
 * table and snapshot entries naming it, and exactly the blocks at 0 are free.
 * DSV4_ERR_STATE with the first violation. */
int dsv4_cache_check(const dsv4_cache *c, dsv4_err *err);
/* Sentinel mode: every page and STATE slot nobody owns is filled with a NaN bit pattern
 * (DSV4_CACHE_SENTINEL) now and whenever it is freed; dsv4_cache_sentinel_check counts the
 * words of unowned storage that differ (0 = nobody wrote where they do not own) and names
 * the first in err. */
#define DSV4_CACHE_SENTINEL 0x7fc5a5a5u
void dsv4_cache_set_sentinel(dsv4_cache *c, int on);
int64_t dsv4_cache_sentinel_check(const dsv4_cache *c, dsv4_err *err);
/* Permutes the free lists (deterministically from seed) so that later reservations get
 * non-contiguous page ids: tests use it to prove rows are found through the tables. */
void dsv4_cache_shuffle_free(dsv4_cache *c, uint64_t seed);

#endif
