/* prefix.h — the engine's snapshots and prefix cache (prefix.c; public API in dsv4.h). */
#ifndef DSV4_ENGINE_PREFIX_H
#define DSV4_ENGINE_PREFIX_H

#include "dsv4.h"
#include "engine/engine.h"

struct dsv4_snapshot {
    dsv4_snapshot *next, *prev;  /* the engine's list of every snapshot */
    dsv4_cache_snap *cs;
    int64_t n, m;
    int32_t *tokens;             /* (n) */
    uint64_t key;                /* chain key of tokens [0, n) */
    float *hidden;               /* (D) final hidden state of position n - 1 */
    float *streams;              /* (hc, D) last-block streams of position n - 1 */
    int cached;                  /* kept by the prefix cache (evictable), else the caller's */
    int pinned;                  /* being restored: not evictable */
    uint64_t used;               /* LRU clock of the last insert or hit */
};

typedef struct dsv4_prefix_cache {
    dsv4_engine *e;
    dsv4_snapshot *list;
    uint64_t clock;
    int limit;                   /* most cached entries */
    dsv4_prefix_stats st;        /* counters; entries and bytes are filled on demand */
    int have_weights;            /* weights fingerprint computed (KV files) */
    uint8_t weights[32];
} dsv4_prefix_cache;

/* A snapshot around cs (taken, or filled by a file reader: owned from here on, freed on
 * failure) with its n tokens and position n - 1's hidden [D] and streams [hc, D]. */
int dsv4_snapshot_wrap(dsv4_engine *e, dsv4_cache_snap *cs, const int32_t *tokens,
                       const float *hidden, const float *streams, int cached, dsv4_snapshot **out,
                       dsv4_err *err);

/* Sets up e->prefix and registers its evictor with the pools. */
int dsv4_prefix_create(dsv4_engine *e, dsv4_err *err);
/* Frees every snapshot (cached or the caller's) and e->prefix; before the pools go. */
void dsv4_prefix_destroy(dsv4_engine *e);

#endif
