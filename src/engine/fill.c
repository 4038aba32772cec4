/* fill.c — a sequence made long without computing it (dsv4_seq_fill_synthetic), so that a
 * benchmark can time decode steps at contexts whose prefill would take hours on a CPU.
 *
 * A decode step at position n reads, per layer: its window rows (positions n - win + 1 ..
 * n - 1), every compressed entry closed below n (HCA: all of them; CSA: the indexer's keys
 * of all, the main rows it selects) and its compressors' rings. The fill writes exactly
 * those, with pseudo-random values rounded and packed as the cache stores rows, a chunk of
 * c_max positions at a time (reserved, filled, then the window pages the step no longer
 * needs trimmed, as forward does), and sets the length. What a step then costs differs from
 * a real prefill's only where the values matter: which entries the indexer selects (and so
 * which rows it reads), not how many.
 */

#include "engine/engine.h"
#include "kernels/kv_rows.h"
#include "util/err.h"

/* splitmix64 */
static uint64_t fill_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n values uniform in [-1, 1) */
static void fill_values(uint64_t *s, float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = (float)((double)(fill_next(s) >> 11) * 0x1p-52 - 1.0);
}

/* A stored row of format fmt (width n, rd rope channels) at dst: random, rounded, packed. */
static void fill_row(uint64_t *s, float *x, int fmt, void *dst, int n, int rd) {
    fill_values(s, x, n);
    dsv4_row_round(fmt, x, n, rd);
    dsv4_row_pack(fmt, dst, x, n, rd);
}

int dsv4_seq_fill_synthetic(dsv4_engine *e, int seq, int64_t n, uint64_t seed, dsv4_err *err) {
    if (seq < 0 || seq >= e->opts.max_seqs || !e->seqs[seq].live)
        return dsv4_fail(err, DSV4_ERR_ARG, "fill: sequence %d is not live", seq);
    dsv4_seq_state *st = &e->seqs[seq];
    if (st->n || st->m || st->pending)
        return dsv4_fail(err, DSV4_ERR_ARG, "fill: sequence %d is not empty (length %lld)", seq, (long long)st->n);
    if (n < 1 || n >= e->opts.max_context)
        return dsv4_fail(err, DSV4_ERR_ARG, "fill: length %lld outside [1, max_context %lld)", (long long)n,
                         (long long)e->opts.max_context);
    if (e->opts.parallel)
        return dsv4_fail(err, DSV4_ERR_ARG, "fill: one process only (the engine runs with --parallel)");
    const dsv4_config *c = e->cfg;
    const dsv4_cache_plan *p = dsv4_cache_get_plan(e->cache);
    const int hd = c->head_dim, rd = c->qk_rope_head_dim, dI = c->index_head_dim, win = p->win;
    const int row_fmt = dsv4_row_fmt(p->opts.row_bytes_per_value), key_fmt = dsv4_row_fmt(p->opts.idx_bytes_per_value);
    /* one row's values before rounding and packing (a window or compressed row, or a key;
     * the ring rows are F32 and filled in place), from the scratch arena no call holds now */
    const size_t mark = dsv4_arena_mark(&e->scratch);
    float *x = dsv4_arena_take_n(&e->scratch, hd > dI ? hd : dI, sizeof *x);
    if (!x) return dsv4_fail(err, DSV4_ERR_NOMEM, "fill: the scratch arena has no room for a row");
    uint64_t s = seed;
    int rc = DSV4_OK;
    for (int64_t s0 = 0; s0 < n && !rc; s0 += p->opts.c_max) {
        const int cnt = (int)(n - s0 < p->opts.c_max ? n - s0 : p->opts.c_max);
        if ((rc = dsv4_cache_reserve(e->cache, 1, &seq, &s0, &cnt, 1, err))) break;
        for (int l = 0; l < p->n_main_layers && !rc; l++) {
            const int r = dsv4_cfg_ratio(c, l);
            for (int64_t t = s0 > n - win ? s0 : n - win; t < s0 + cnt; t++) { /* the window the step reads */
                void *row = dsv4_cache_win_row(e->cache, seq, l, t);
                if (!row) rc = dsv4_fail(err, DSV4_ERR_STATE, "fill: window row %lld not reserved", (long long)t);
                else fill_row(&s, x, row_fmt, row, hd, rd);
            }
            /* the entries whose windows close in the chunk: position (k + 1) r - 1 */
            for (int64_t k = r ? s0 / r : 0; r && k < (s0 + cnt) / r && !rc; k++) {
                void *row = dsv4_cache_cmp_row(e->cache, seq, l, k), *key = r == 4 ? dsv4_cache_idx_row(e->cache, seq, l, k) : NULL;
                if (!row || (r == 4 && !key)) rc = dsv4_fail(err, DSV4_ERR_STATE, "fill: entry %lld not reserved", (long long)k);
                else {
                    fill_row(&s, x, row_fmt, row, hd, rd);
                    if (key) fill_row(&s, x, key_fmt, key, dI, 0);
                }
            }
        }
        dsv4_cache_trim(e->cache, seq, s0 + cnt);
    }
    /* the compressors' rings: the last L_r positions' [a | b] rows (main, then CSA's indexer) */
    for (int l = 0; l < p->n_main_layers && !rc; l++) {
        const int r = dsv4_cfg_ratio(c, l);
        for (int64_t t = n - p->ring_len[l] > 0 ? n - p->ring_len[l] : 0; r && t < n && !rc; t++) {
            float *a = dsv4_cache_ring_row(e->cache, seq, l, 0, t), *b = r == 4 ? dsv4_cache_ring_row(e->cache, seq, l, 1, t) : NULL;
            if (!a || (r == 4 && !b)) rc = dsv4_fail(err, DSV4_ERR_STATE, "fill: no ring row %lld in layer %d", (long long)t, l);
            else {
                fill_values(&s, a, 2 * dsv4_cfg_coff(r) * hd);
                if (b) fill_values(&s, b, 2 * 2 * dI);
            }
        }
    }
    dsv4_arena_release(&e->scratch, mark);
    if (rc) {
        dsv4_cache_truncate(e->cache, seq, 0);
        return rc;
    }
    st->n = n;
    return DSV4_OK;
}
