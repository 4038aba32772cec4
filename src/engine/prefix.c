/* prefix.c — snapshots at compression-aligned lengths, forks, and the prefix cache
 * (spec/serving.md §g; issue 11). The pools do the sharing (cache/share.c); this file adds
 * what a snapshot means to the engine (lengths n and m, tokens, the last hidden state and
 * streams) and keeps the cache's entries: found by a hash chain over aligned token blocks,
 * confirmed token by token, dropped least recently used first.
 */
#include "engine/prefix.h"

#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "util/err.h"

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

int dsv4_engine_alignment(const dsv4_engine *e) {
    const dsv4_cache_plan *p = dsv4_cache_get_plan(e->cache);
    int64_t a = 1;
    for (int i = 0; i < p->n_ratios; i++) a = a / gcd64(a, p->ratios[i]) * p->ratios[i];
    return (int)a;
}

/* Key of block i of the chain: FNV-1a over the previous key's bytes and the block's tokens.
 * Equal keys are only candidates; a match is confirmed on the tokens themselves. */
static uint64_t chain_step(uint64_t prev, const int32_t *tok, int64_t count) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 8; i++) h = (h ^ ((prev >> (8 * i)) & 0xff)) * 0x100000001b3ull;
    for (int64_t t = 0; t < count; t++) {
        const uint32_t v = (uint32_t)tok[t];
        for (int i = 0; i < 4; i++) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
    }
    return h;
}

static uint64_t chain_key(const int32_t *tok, int64_t n, int A) {
    uint64_t k = 0;
    for (int64_t i = 0; i < n / A; i++) k = chain_step(k, tok + i * A, A);
    return k;
}

/* ---- snapshots ---------------------------------------------------------------------------- */

static void snapshot_unlink(dsv4_prefix_cache *pc, dsv4_snapshot *s) {
    if (s->prev) s->prev->next = s->next;
    else pc->list = s->next;
    if (s->next) s->next->prev = s->prev;
}

static void snapshot_destroy(dsv4_engine *e, dsv4_snapshot *s) {
    snapshot_unlink(e->prefix, s);
    dsv4_cache_snap_free(e->cache, s->cs);
    free(s->tokens); free(s->hidden); free(s->streams); free(s);
}

/* Validates and takes a snapshot of seq; links it into the engine's list. */
static int snapshot_make(dsv4_engine *e, int seq, const int32_t *tokens, const float *hidden,
                         const float *streams, int cached, dsv4_snapshot **out, dsv4_err *err) {
    const dsv4_config *c = e->cfg;
    const int A = dsv4_engine_alignment(e);
    *out = NULL;
    int rc = dsv4_engine_need_caches(e, "snapshot", err);
    if (rc) return rc;
    if (seq < 0 || seq >= e->opts.max_seqs || !e->seqs[seq].live)
        return dsv4_fail(err, DSV4_ERR_ARG, "snapshot: sequence %d is not live", seq);
    const dsv4_seq_state *q = &e->seqs[seq];
    if (q->broken)
        return dsv4_fail(err, DSV4_ERR_STATE, "snapshot: sequence %d lost its state in a failed "
                         "call", seq);
    if (q->pending)
        return dsv4_fail(err, DSV4_ERR_STATE, "snapshot: sequence %d has a speculative span "
                         "awaiting dsv4_seq_commit", seq);
    if (q->n < 1 || q->n % A)
        return dsv4_fail(err, DSV4_ERR_ARG, "snapshot: sequence %d has length %lld, not a positive "
                         "multiple of the alignment %d (lcm of the compress ratios)", seq,
                         (long long)q->n, A);
    if (e->opts.mtp ? q->m != q->n - 1 : q->m != 0)
        return dsv4_fail(err, DSV4_ERR_STATE, "snapshot: sequence %d has MTP length %lld; a "
                         "snapshot at n = %lld needs m = %lld", seq, (long long)q->m,
                         (long long)q->n, (long long)(e->opts.mtp ? q->n - 1 : 0));
    if (!tokens || !hidden || !streams)
        return dsv4_fail(err, DSV4_ERR_ARG, "snapshot: tokens, hidden and streams are required");
    for (int64_t t = 0; t < q->n; t++)
        if (tokens[t] < 0 || tokens[t] >= c->vocab_size)
            return dsv4_fail(err, DSV4_ERR_ARG, "snapshot: token id %d at %lld is outside [0, %d)",
                             tokens[t], (long long)t, c->vocab_size);
    dsv4_cache_snap *cs;
    if ((rc = dsv4_cache_snap_take(e->cache, seq, q->n, q->m, &cs, err))) return rc;
    return dsv4_snapshot_wrap(e, cs, tokens, hidden, streams, cached, out, err);
}

int dsv4_snapshot_wrap(dsv4_engine *e, dsv4_cache_snap *cs, const int32_t *tokens,
                       const float *hidden, const float *streams, int cached, dsv4_snapshot **out,
                       dsv4_err *err) {
    const int D = e->cfg->hidden_size, hc = e->cfg->hc_mult;
    dsv4_snapshot *s = calloc(1, sizeof *s);
    if (s) {
        dsv4_cache_snap_lengths(cs, &s->n, &s->m);
        s->tokens = malloc((size_t)s->n * sizeof *s->tokens);
        s->hidden = malloc((size_t)D * sizeof(float));
        s->streams = malloc((size_t)hc * D * sizeof(float));
    }
    if (!s || !s->tokens || !s->hidden || !s->streams) {
        if (s) { free(s->tokens); free(s->hidden); free(s->streams); free(s); }
        dsv4_cache_snap_free(e->cache, cs);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "snapshot: out of memory");
    }
    s->cs = cs;
    memcpy(s->tokens, tokens, (size_t)s->n * sizeof *s->tokens);
    memcpy(s->hidden, hidden, (size_t)D * sizeof(float));
    memcpy(s->streams, streams, (size_t)hc * D * sizeof(float));
    s->key = chain_key(tokens, s->n, dsv4_engine_alignment(e));
    s->cached = cached;
    s->used = ++e->prefix->clock;
    s->next = e->prefix->list;
    if (s->next) s->next->prev = s;
    e->prefix->list = s;
    *out = s;
    return DSV4_OK;
}

int dsv4_snapshot_take(dsv4_engine *e, int seq, const int32_t *tokens, const float *hidden,
                       const float *streams, dsv4_snapshot **out, dsv4_err *err) {
    if (!out) return dsv4_fail(err, DSV4_ERR_ARG, "snapshot: NULL output");
    return snapshot_make(e, seq, tokens, hidden, streams, 0, out, err);
}

int dsv4_snapshot_restore(dsv4_engine *e, const dsv4_snapshot *s, int *seq, float *hidden,
                          float *streams, dsv4_err *err) {
    if (!s || !seq) return dsv4_fail(err, DSV4_ERR_ARG, "snapshot restore: NULL argument");
    int rc = dsv4_engine_need_caches(e, "snapshot restore", err);
    if (rc || (rc = dsv4_seq_create(e, seq, err))) return rc;
    if ((rc = dsv4_cache_snap_restore(e->cache, s->cs, *seq, err))) {
        dsv4_seq_free(e, *seq, NULL);
        *seq = -1;
        return rc;
    }
    e->seqs[*seq].n = s->n;
    e->seqs[*seq].m = s->m;
    const int D = e->cfg->hidden_size, hc = e->cfg->hc_mult;
    if (hidden) memcpy(hidden, s->hidden, (size_t)D * sizeof(float));
    if (streams) memcpy(streams, s->streams, (size_t)hc * D * sizeof(float));
    return DSV4_OK;
}

int dsv4_seq_mirror(dsv4_engine *e, int64_t n, int *seq, dsv4_err *err) {
    if (!seq) return dsv4_fail(err, DSV4_ERR_ARG, "seq mirror: NULL output");
    *seq = -1;
    if (!e->idle)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "seq mirror: only on a follower rank of a "
                         "group (this rank holds caches: restore the snapshot instead)");
    const int A = dsv4_engine_alignment(e);
    if (n < 1 || n % A || n > e->opts.max_context)
        return dsv4_fail(err, DSV4_ERR_ARG, "seq mirror: length %lld is not a positive multiple of "
                         "the alignment %d within max_context %lld", (long long)n, A,
                         (long long)e->opts.max_context);
    int rc = dsv4_seq_create(e, seq, err);
    if (rc) return rc;
    /* a snapshot's lengths (snapshot_make): m = n - 1 with MTP caches, else 0 */
    e->seqs[*seq].n = n;
    e->seqs[*seq].m = e->opts.mtp ? n - 1 : 0;
    return DSV4_OK;
}

void dsv4_snapshot_free(dsv4_engine *e, dsv4_snapshot *s) {
    if (e && s) snapshot_destroy(e, s);
}

int64_t dsv4_snapshot_length(const dsv4_snapshot *s) { return s ? s->n : -1; }
const int32_t *dsv4_snapshot_tokens(const dsv4_snapshot *s) { return s ? s->tokens : NULL; }

int dsv4_seq_fork(dsv4_engine *e, int src, int *dst, dsv4_err *err) {
    if (!dst) return dsv4_fail(err, DSV4_ERR_ARG, "fork: NULL output");
    *dst = -1;
    /* a follower holds no caches: its fork is the lengths alone (as dsv4_seq_mirror's) */
    int rc = e->idle ? DSV4_OK : dsv4_engine_need_caches(e, "fork", err);
    if (rc) return rc;
    if (src < 0 || src >= e->opts.max_seqs || !e->seqs[src].live)
        return dsv4_fail(err, DSV4_ERR_ARG, "fork: sequence %d is not live", src);
    const dsv4_seq_state q = e->seqs[src];
    if (q.broken)
        return dsv4_fail(err, DSV4_ERR_STATE, "fork: sequence %d lost its state in a failed call", src);
    if (q.pending)
        return dsv4_fail(err, DSV4_ERR_STATE, "fork: sequence %d has a speculative span awaiting "
                         "dsv4_seq_commit", src);
    if (e->idle) {
        if ((rc = dsv4_seq_create(e, dst, err))) return rc;
        e->seqs[*dst].n = q.n;
        e->seqs[*dst].m = q.m;
        return DSV4_OK;
    }
    dsv4_cache_snap *cs;
    if ((rc = dsv4_cache_snap_take(e->cache, src, q.n, q.m < q.n ? q.m : q.n, &cs, err))) return rc;
    if (!(rc = dsv4_seq_create(e, dst, err))) {
        if ((rc = dsv4_cache_snap_restore(e->cache, cs, *dst, err))) {
            dsv4_seq_free(e, *dst, NULL);
            *dst = -1;
        } else {
            e->seqs[*dst].n = q.n;
            e->seqs[*dst].m = q.m;
        }
    }
    dsv4_cache_snap_free(e->cache, cs);
    return rc;
}

/* ---- the prefix cache --------------------------------------------------------------------- */

/* Drops the least recently used cached entry that is not being restored; 0 when none. */
static int evict_one(void *user) {
    dsv4_prefix_cache *pc = user;
    dsv4_snapshot *lru = NULL;
    for (dsv4_snapshot *s = pc->list; s; s = s->next)
        if (s->cached && !s->pinned && (!lru || s->used < lru->used)) lru = s;
    if (!lru) return 0;
    snapshot_destroy(pc->e, lru);
    pc->st.evictions++;
    return 1;
}

int dsv4_prefix_create(dsv4_engine *e, dsv4_err *err) {
    dsv4_prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return dsv4_fail(err, DSV4_ERR_NOMEM, "prefix cache: out of memory");
    pc->e = e;
    pc->limit = e->opts.prefix_entries > 0 ? e->opts.prefix_entries : 64;
    e->prefix = pc;
    dsv4_cache_set_evictor(e->cache, evict_one, pc);
    return DSV4_OK;
}

void dsv4_prefix_destroy(dsv4_engine *e) {
    if (!e->prefix) return;
    while (e->prefix->list) snapshot_destroy(e, e->prefix->list);
    if (e->cache) dsv4_cache_set_evictor(e->cache, NULL, NULL);
    free(e->prefix);
    e->prefix = NULL;
}

static int64_t cached_entries(const dsv4_prefix_cache *pc) {
    int64_t n = 0;
    for (const dsv4_snapshot *s = pc->list; s; s = s->next) n += s->cached;
    return n;
}

int dsv4_prefix_insert(dsv4_engine *e, int seq, const int32_t *tokens, const float *hidden,
                       const float *streams, dsv4_err *err) {
    dsv4_prefix_cache *pc = e->prefix;
    const int64_t n = dsv4_seq_length(e, seq);
    if (tokens && n > 0 && n % dsv4_engine_alignment(e) == 0) {
        const uint64_t key = chain_key(tokens, n, dsv4_engine_alignment(e));
        for (dsv4_snapshot *s = pc->list; s; s = s->next)
            if (s->cached && s->n == n && s->key == key &&
                !memcmp(s->tokens, tokens, (size_t)n * sizeof *tokens)) {
                s->used = ++pc->clock;
                return DSV4_OK;
            }
    }
    dsv4_snapshot *s;
    int rc = snapshot_make(e, seq, tokens, hidden, streams, 1, &s, err);
    if (rc) return rc;
    pc->st.inserts++;
    while (cached_entries(pc) > pc->limit && evict_one(pc)) {
    }
    return DSV4_OK;
}

int dsv4_prefix_adopt(dsv4_engine *e, dsv4_snapshot *snap, dsv4_err *err) {
    dsv4_prefix_cache *pc = e->prefix;
    if (!snap) return dsv4_fail(err, DSV4_ERR_ARG, "prefix adopt: NULL snapshot");
    for (dsv4_snapshot *s = pc->list; s; s = s->next)
        if (s != snap && s->cached && s->n == snap->n && s->key == snap->key &&
            !memcmp(s->tokens, snap->tokens, (size_t)snap->n * sizeof *snap->tokens)) {
            s->used = ++pc->clock;
            snapshot_destroy(e, snap);
            return DSV4_OK;
        }
    snap->cached = 1;
    snap->used = ++pc->clock;
    pc->st.inserts++;
    while (cached_entries(pc) > pc->limit && evict_one(pc)) {
    }
    return DSV4_OK;
}

int dsv4_prefix_start(dsv4_engine *e, const int32_t *tokens, int64_t n_tokens, int *seq,
                      int64_t *n_cached, float *hidden, float *streams, dsv4_err *err) {
    dsv4_prefix_cache *pc = e->prefix;
    if (!seq || !n_cached || n_tokens < 0 || (n_tokens > 0 && !tokens))
        return dsv4_fail(err, DSV4_ERR_ARG, "prefix start: bad arguments (n_tokens = %lld)",
                         (long long)n_tokens);
    *seq = -1;
    *n_cached = 0;
    const int A = dsv4_engine_alignment(e);
    const int64_t nb = n_tokens / A;
    dsv4_snapshot *best = NULL;
    if (nb > 0 && pc->list) {
        uint64_t *keys = malloc((size_t)nb * sizeof *keys);  /* (nb) chain keys of the prompt */
        if (!keys) return dsv4_fail(err, DSV4_ERR_NOMEM, "prefix start: out of memory");
        for (int64_t i = 0; i < nb; i++) keys[i] = chain_step(i ? keys[i - 1] : 0, tokens + i * A, A);
        for (dsv4_snapshot *s = pc->list; s; s = s->next)
            if (s->cached && s->n <= n_tokens && (!best || s->n > best->n) &&
                s->key == keys[s->n / A - 1] &&
                !memcmp(s->tokens, tokens, (size_t)s->n * sizeof *tokens))
                best = s;
        free(keys);
    }
    if (best) {
        best->pinned = 1;  /* the restore may ask the evictor for room */
        dsv4_err e2;
        int rc = dsv4_snapshot_restore(e, best, seq, hidden, streams, &e2);
        best->pinned = 0;
        if (!rc) {
            best->used = ++pc->clock;
            pc->st.hits++;
            pc->st.reused_tokens += best->n;
            *n_cached = best->n;
            return DSV4_OK;
        }
        if (rc != DSV4_ERR_CACHE_FULL) {
            if (err) *err = e2;
            return rc;
        }
        /* no room for the copies: serve it cold, as with an empty cache */
    }
    pc->st.misses++;
    return dsv4_seq_create(e, seq, err);
}

int64_t dsv4_prefix_keys(const dsv4_engine *e, uint64_t *keys, int64_t cap) {
    int64_t n = 0;
    for (const dsv4_snapshot *s = e->prefix ? e->prefix->list : NULL; s; s = s->next)
        if (s->cached) {
            if (n < cap) keys[n] = s->key;
            n++;
        }
    return n;
}

dsv4_prefix_stats dsv4_prefix_get_stats(const dsv4_engine *e) {
    dsv4_prefix_stats st = e->prefix->st;
    st.entries = cached_entries(e->prefix);
    st.host_bytes = 0;
    const int64_t row = ((int64_t)e->cfg->hc_mult + 1) * e->cfg->hidden_size * 4;
    for (const dsv4_snapshot *s = e->prefix->list; s; s = s->next)
        if (s->cached) st.host_bytes += (int64_t)sizeof *s + dsv4_cache_snap_host_bytes(s->cs) + 4 * s->n + row;
    st.pool_bytes = dsv4_cache_snap_only_blocks(e->cache) * dsv4_cache_get_plan(e->cache)->block_bytes;
    return st;
}
