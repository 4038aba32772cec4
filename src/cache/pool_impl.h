/* pool_impl.h — the pools' private layout, shared by pool.c (allocation, tables) and
 * share.c (forks and snapshots that share closed compressed blocks). Internal to src/cache.
 *
 * Compressed blocks are reference counted: every block-table entry and every snapshot that
 * lists a block holds one reference; a block returns to the free stack when its count
 * reaches 0. WIN pages and STATE slots are never shared (one owner each).
 */
#ifndef DSV4_CACHE_POOL_IMPL_H
#define DSV4_CACHE_POOL_IMPL_H

#include <stdint.h>

#include "cache/cache.h"

#define NONE (-1)
#define MARK (-2)  /* table entry counted by a reservation in progress */

typedef struct seq_state {
    int live;
    int64_t n_win, n_blk;     /* pages held */
    int64_t win_lo, win_hi;   /* table entries outside [win_lo, win_hi) are NONE */
    int64_t blk_hi;           /* blk_table entries >= blk_hi are NONE */
} seq_state;

/* A sequence's state at main length n and MTP length m (share.c). Blocks closed for every
 * layer that compresses are shared by reference; the rest is copied out of the pools. */
struct dsv4_cache_snap {
    dsv4_cache_snap *next, *prev;        /* the cache's list of live snapshots */
    int64_t n, m;
    int64_t len[DSV4_MAX_LAYERS];        /* positions layer l has consumed: n, or m for MTP */
    int n_shared;                        /* block-table entries [0, n_shared) ... */
    int32_t *shared;                     /* ... (n_shared) block ids, one reference each */
    int n_private;                       /* entries [n_shared, n_shared + n_private) ... */
    uint8_t *priv;                       /* ... copied: (n_private, block_bytes) as in the pools */
    int64_t win_n[DSV4_MAX_LAYERS];      /* window rows of layer l: positions [len - win_n, len) */
    uint8_t *win;                        /* (sum win_n, win_row_bytes), layer after layer */
    int64_t ring_n[DSV4_MAX_LAYERS];     /* compressor ring rows: positions [len - ring_n, len) */
    float *ring;                         /* per layer: main ring rows, then indexer ring rows */
    int64_t ring_floats, win_bytes;
    int64_t host_bytes;                  /* what the copies take outside the pools */
};

struct dsv4_cache {
    dsv4_cache_plan plan;
    int32_t n_win_pages, n_blocks;
    int64_t win_rows, blk_rows[DSV4_MAX_RATIOS], idx_rows;  /* rows per page */
    /* rows in the plan's storage formats (kernels/kv_rows.h), win_row_bytes etc. each */
    uint8_t *win;                   /* (n_layers, n_win_pages, B_w, win_row_bytes) */
    uint8_t *cmp[DSV4_MAX_RATIOS];  /* (n_cmp_layers[i], n_blocks, B/r_i, cmp_row_bytes) */
    uint8_t *idx;                   /* (n_idx_layers, n_blocks, B/4, idx_row_bytes) */
    float *state;                   /* (max_seqs, slot_floats) */
    int32_t *win_free, n_win_free;  /* (n_win_pages) stack of free page ids */
    int32_t *blk_free, n_blk_free;  /* (n_blocks) */
    int32_t *win_owner;             /* (n_win_pages) owning sequence or NONE */
    int32_t *blk_ref;               /* (n_blocks) references: table entries + snapshots */
    uint8_t *win_warm, *blk_warm;   /* (n_win_pages), (n_blocks): 1 once handed out (populated) */
    int32_t *win_table;             /* (max_seqs, win_table_width) page id or NONE */
    int32_t *blk_table;             /* (max_seqs, blk_table_width) block id or NONE */
    seq_state *seqs;                /* (max_seqs) */
    int sentinel;
    dsv4_cache_snap *snaps;         /* every live snapshot (their block references) */
    int (*evict)(void *user);       /* frees one unreferenced snapshot; 0 when none is left */
    void *evict_user;
};


/* ---- helpers shared by pool.c and share.c ---------------------------------------------- */

static inline uint8_t *dsv4_pool_win_page(const dsv4_cache *c, int layer, int32_t page) {
    return c->win + ((int64_t)layer * c->n_win_pages + page) * c->win_rows * c->plan.win_row_bytes;
}
static inline uint8_t *dsv4_pool_cmp_page(const dsv4_cache *c, int pool, int slot, int32_t blk) {
    return c->cmp[pool] + ((int64_t)slot * c->n_blocks + blk) * c->blk_rows[pool] * c->plan.cmp_row_bytes;
}
static inline uint8_t *dsv4_pool_idx_page(const dsv4_cache *c, int slot, int32_t blk) {
    return c->idx + ((int64_t)slot * c->n_blocks + blk) * c->idx_rows * c->plan.idx_row_bytes;
}
static inline float *dsv4_pool_slot(const dsv4_cache *c, int seq) {
    return c->state + (int64_t)seq * c->plan.slot_floats;
}
static inline int32_t *dsv4_pool_win_tab(const dsv4_cache *c, int seq) {
    return c->win_table + (int64_t)seq * c->plan.win_table_width;
}
static inline int32_t *dsv4_pool_blk_tab(const dsv4_cache *c, int seq) {
    return c->blk_table + (int64_t)seq * c->plan.blk_table_width;
}

/* Takes a free WIN page for table entry i of seq (the caller checked one is free). */
void dsv4_pool_take_win(dsv4_cache *c, int seq, int64_t i);
/* Maps block b at table entry i of seq: a free block (ref 0) is popped from the free
 * stack, a shared one gains a reference. */
void dsv4_pool_map_block(dsv4_cache *c, int seq, int64_t i, int32_t b);
/* Pops a free block id (the caller checked one is free); its count becomes 0 until mapped. */
int32_t dsv4_pool_pop_block(dsv4_cache *c);
/* Drops one reference; at 0 the block returns to the free stack. */
void dsv4_pool_unref_block(dsv4_cache *c, int32_t b);
/* Lets the evictor free snapshots until `blocks` blocks are free or none is left. */
void dsv4_pool_make_room(dsv4_cache *c, int64_t blocks);

#endif
