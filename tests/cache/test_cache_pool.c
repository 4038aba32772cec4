/* test_cache_pool.c — paged pools on the micro config (spec/serving.md §a.3–a.4): rows map
 * through shuffled (non-contiguous) tables, exhaustion leaves everything unchanged, release
 * returns every page, trim frees exactly the dead window pages, slots come back cleared,
 * unowned storage is never written (NaN sentinel), bad handles are errors, one sequence
 * reaches position 1,048,576, and a page id's memory is populated when it is handed out
 * (Flash's geometry), no earlier. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sys/mman.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/pool_impl.h"
#include "fixtures.h"
#include "test.h"

static dsv4_config g_cfg;

/* A cache of cfg's geometry; every test but test_populate uses mk (the micro config). */
static int mk_cfg(const dsv4_config *cfg, dsv4_cache **c, int64_t max_context, int max_seqs, int d_max,
                  int win_block, uint64_t budget) {
    dsv4_cache_opts o;
    memset(&o, 0, sizeof o);
    o.max_context = max_context;
    o.max_seqs = max_seqs;
    o.d_max = d_max;
    o.win_block = win_block;
    o.budget_bytes = budget;
    dsv4_cache_plan p;
    dsv4_err e = {0};
    int rc = dsv4_cache_plan_make(cfg, &o, &p, &e);
    if (!rc) rc = dsv4_cache_create(&p, c, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    return rc;
}

static int mk(dsv4_cache **c, int64_t max_context, int max_seqs, int d_max, int win_block, uint64_t budget) {
    return mk_cfg(&g_cfg, c, max_context, max_seqs, d_max, win_block, budget);
}

/* A distinct integer-valued float per (seq, kind, layer, pos, channel): exact in F32 while
 * seq < 4, kind < 4, layer < 8, pos < 4096, channel < 16. */
static float val(int seq, int kind, int layer, int64_t pos, int ch) {
    return (float)((((((seq * 4 + kind) * 8 + layer) * 4096) + (pos % 4096)) * 16) + ch % 16);
}

static int consistent(dsv4_cache *c) {
    dsv4_err e = {0};
    int rc = dsv4_cache_check(c, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    int64_t bad = dsv4_cache_sentinel_check(c, &e);
    CHECK_MSG(bad == 0, "%lld sentinel words changed: %s", (long long)bad, e.msg);
    return rc == 0 && bad == 0;
}

/* What an engine call writes for span [s, s+C): window rows of the written range and every
 * compressed / indexer entry that closes in the span. Returns the number of rows written. */
static int write_span(dsv4_cache *c, int seq, int64_t s, int C) {
    const dsv4_cache_plan *p = dsv4_cache_get_plan(c);
    int n = 0, missing = 0;
    int64_t lo = s + C - p->win + 1 > s ? s + C - p->win + 1 : s;
    for (int l = 0; l < p->n_layers; l++) {
        for (int64_t t = lo; t < s + C; t++) {
            float *row = dsv4_cache_win_row(c, seq, l, t);
            if (!row) { missing++; continue; }
            for (int i = 0; i < p->hd; i++) row[i] = val(seq, 0, l, t, i);
            n++;
        }
        int r = g_cfg.compress_ratios[l];
        if (!r) continue;
        for (int64_t w = s / r; (w + 1) * r - 1 < s + C; w++) {
            if ((w + 1) * r - 1 < s) continue;
            float *row = dsv4_cache_cmp_row(c, seq, l, w);
            if (!row) { missing++; continue; }
            for (int i = 0; i < p->hd; i++) row[i] = val(seq, 1, l, w, i);
            n++;
            if (r == 4) {
                row = dsv4_cache_idx_row(c, seq, l, w);
                if (!row) { missing++; continue; }
                for (int i = 0; i < p->dI; i++) row[i] = val(seq, 2, l, w, i);
                n++;
            }
        }
    }
    CHECK_MSG(missing == 0, "span [%lld, %lld) of seq %d: %d rows without a page", (long long)s,
              (long long)(s + C), seq, missing);
    return n;
}

/* Every row a sequence of committed length n must still hold has its value: window rows of
 * [max(0, n-win+1), n) and all entries w < n / r. Returns mismatching rows. */
static int verify_seq(dsv4_cache *c, int seq, int64_t n) {
    const dsv4_cache_plan *p = dsv4_cache_get_plan(c);
    int bad = 0;
    for (int l = 0; l < p->n_layers; l++) {
        for (int64_t t = n - p->win + 1 > 0 ? n - p->win + 1 : 0; t < n; t++) {
            const float *row = dsv4_cache_win_row(c, seq, l, t);
            int ok = row != NULL;
            for (int i = 0; ok && i < p->hd; i++) ok = row[i] == val(seq, 0, l, t, i);
            bad += !ok;
        }
        int r = g_cfg.compress_ratios[l];
        for (int64_t w = 0; r && w < n / r; w++) {
            const float *row = dsv4_cache_cmp_row(c, seq, l, w);
            int ok = row != NULL;
            for (int i = 0; ok && i < p->hd; i++) ok = row[i] == val(seq, 1, l, w, i);
            bad += !ok;
            if (r != 4) continue;
            row = dsv4_cache_idx_row(c, seq, l, w);
            ok = row != NULL;
            for (int i = 0; ok && i < p->dI; i++) ok = row[i] == val(seq, 2, l, w, i);
            bad += !ok;
        }
    }
    return bad;
}

/* OS pages wholly inside [p, p + n) that are (want 1) or are not (want 0) resident; -1 when
 * mincore fails. */
static int64_t count_resident(const void *p, int64_t n, int want) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + pg - 1) & ~(pg - 1), hi = ((uintptr_t)p + (uintptr_t)n) & ~(pg - 1);
    if (hi <= lo) return 0;
    unsigned char *v = malloc((hi - lo) / pg);
    if (!v || mincore((void *)lo, hi - lo, v)) { free(v); return -1; }
    int64_t k = 0;
    for (uintptr_t i = 0; i < (hi - lo) / pg; i++) k += (v[i] & 1) == want;
    free(v);
    return k;
}

/* 1 when /sys/kernel/mm/transparent_hugepage/enabled selects "always" */
static int thp_is_always(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char buf[128] = {0};
    if (!f) return 0;
    const int got = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    return got && strstr(buf, "[always]") != NULL;
}

/* A page id's memory is populated when it is first handed out, in every layer, and no
 * other's: the pools stay lazily committed (Flash's geometry, pages of many OS pages). */
static void test_populate(void) {
#ifdef MADV_POPULATE_WRITE
    const long pg = sysconf(_SC_PAGESIZE);
    void *probe = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const int can = probe != MAP_FAILED && madvise(probe, (size_t)pg, MADV_POPULATE_WRITE) == 0;
    if (probe != MAP_FAILED) munmap(probe, (size_t)pg);
    if (!can) return; /* an older kernel: the pools stay lazy, nothing to check */
    /* With transparent huge pages set to "always", a first touch (or a populate) may map a
     * whole 2 MB page around it, so ids two further can be resident too: check only that
     * the pages handed out are populated. */
    const int thp_always = thp_is_always();
    dsv4_config cfg;
    fx_flash(&cfg);
    dsv4_cache *c = NULL;
    if (mk_cfg(&cfg, &c, 8192, 2, 0, 0, 0)) return;
    const dsv4_cache_plan p = *dsv4_cache_get_plan(c);
    dsv4_err e = {0};
    int seq = -1;
    const int64_t start = 0;
    const int count = 1;
    CHECK(dsv4_cache_seq_alloc(c, &seq, &e) == 0);
    CHECK(dsv4_cache_reserve(c, 1, &seq, &start, &count, 1, &e) == 0);
    const int32_t wp = (int32_t)dsv4_cache_win_page(c, seq, 0), bp = (int32_t)dsv4_cache_blk_page(c, seq, 0);
    CHECK(wp >= 0 && bp >= 0 && c->n_win_pages > wp + 4 && c->n_blocks > bp + 4);
    if (wp < 0 || bp < 0 || c->n_win_pages <= wp + 4 || c->n_blocks <= bp + 4) goto out;
    const int64_t win_bytes = c->win_rows * p.win_row_bytes;
    for (int l = 0; l < p.n_layers; l++) {
        CHECK_MSG(count_resident(dsv4_pool_win_page(c, l, wp), win_bytes, 0) == 0,
                  "layer %d: WIN page %d handed out but not populated", l, wp);
        CHECK_MSG(thp_always || count_resident(dsv4_pool_win_page(c, l, wp + 2), win_bytes, 1) == 0,
                  "layer %d: WIN page %d populated before it was handed out", l, wp + 2);
    }
    for (int i = 0; i < p.n_ratios; i++)
        for (int slot = 0; slot < p.n_cmp_layers[i]; slot++) {
            const int64_t n = c->blk_rows[i] * p.cmp_row_bytes;
            CHECK_MSG(count_resident(dsv4_pool_cmp_page(c, i, slot, bp), n, 0) == 0,
                      "CMP pool %d slot %d: block %d handed out but not populated", i, slot, bp);
            CHECK_MSG(thp_always || count_resident(dsv4_pool_cmp_page(c, i, slot, bp + 2), n, 1) == 0,
                      "CMP pool %d slot %d: block %d populated early", i, slot, bp + 2);
        }
    for (int slot = 0; slot < p.n_idx_layers; slot++)
        CHECK_MSG(count_resident(dsv4_pool_idx_page(c, slot, bp), c->idx_rows * p.idx_row_bytes, 0) == 0,
                  "IDX slot %d: block %d handed out but not populated", slot, bp);
out:
    dsv4_cache_free(c);
#endif
}

/* Several sequences advance by interleaved spans over shuffled free lists; every row
 * written is read back intact (no two rows alias), nothing unowned is written, and the
 * block tables are not contiguous (so rows really go through the tables). */
static void test_mapping_shuffled(void) {
    dsv4_cache *c;
    if (mk(&c, 400, 3, 0, 4, 0)) return;
    const dsv4_cache_plan *p = dsv4_cache_get_plan(c);
    CHECK(p->block == 8 && p->win_block == 4);
    dsv4_cache_set_sentinel(c, 1);
    dsv4_cache_shuffle_free(c, 12345);
    dsv4_err e = {0};
    int seq[3];
    int64_t n[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) CHECK(dsv4_cache_seq_alloc(c, &seq[i], &e) == 0);
    CHECK(seq[0] == 0 && seq[1] == 1 && seq[2] == 2);
    static const int sizes[] = {5, 1, 1, 17, 3, 8, 1, 2, 40, 7, 1, 1, 1, 9, 33, 4};
    for (int step = 0; step < 48; step++) {
        const int q = step % 3, C = sizes[(step * 7 + q) % 16];
        if (n[q] + C > 400) continue;
        int cnt = C;
        CHECK(dsv4_cache_reserve(c, 1, &seq[q], &n[q], &cnt, 1, &e) == 0);
        write_span(c, seq[q], n[q], C);
        n[q] += C;
        dsv4_cache_trim(c, seq[q], n[q]);
        if (step % 5 == 0) consistent(c);
    }
    for (int q = 0; q < 3; q++) CHECK_MSG(verify_seq(c, seq[q], n[q]) == 0, "seq %d", q);
    consistent(c);
    /* non-contiguous tables: some consecutive blocks are not consecutive ids */
    int jumps = 0;
    for (int64_t b = 1; b < n[0] / 8; b++)
        jumps += dsv4_cache_blk_page(c, seq[0], b * 8) != dsv4_cache_blk_page(c, seq[0], (b - 1) * 8) + 1;
    CHECK(jumps > 0);
    /* row pointers stay inside their page: consecutive rows of one page are hd apart */
    float *r0 = dsv4_cache_cmp_row(c, seq[0], 1, 0), *r1 = dsv4_cache_cmp_row(c, seq[0], 1, 1);
    CHECK(r0 && r1 && r1 - r0 == p->hd);
    dsv4_cache_free(c);
}

/* Exhaustion of either pool: DSV4_ERR_CACHE_FULL naming the pool, pages needed, free and
 * total; no table, page or row of any sequence changes; a multi-span call is all or nothing. */
static void test_exhaustion(void) {
    dsv4_cache *c0;
    if (mk(&c0, 64, 2, 0, 4, 0)) return;
    const dsv4_cache_plan *p0 = dsv4_cache_get_plan(c0);
    /* a budget admitting exactly 10 blocks: T_cap = (10 - 2) * 8 = 64 = max_context */
    const uint64_t budget = 2 * (uint64_t)p0->seq_fixed_bytes + 10 * (uint64_t)p0->block_bytes;
    dsv4_cache_free(c0);
    dsv4_cache *c;
    if (mk(&c, 64, 2, 0, 4, budget)) return;
    dsv4_cache_set_sentinel(c, 1);
    dsv4_cache_usage u = dsv4_cache_get_usage(c);
    CHECK(u.blk_total == 10 && u.win_total == 2 * 4 && u.slots_total == 2);  /* W_live 4 */
    dsv4_err e = {0};
    int a, b;
    CHECK(dsv4_cache_seq_alloc(c, &a, &e) == 0 && dsv4_cache_seq_alloc(c, &b, &e) == 0);
    int64_t s = 0;
    int C = 48;
    CHECK(dsv4_cache_reserve(c, 1, &a, &s, &C, 1, &e) == 0);   /* 6 blocks, 2 WIN pages */
    write_span(c, a, 0, 48);
    int snap_w[16], snap_b[8];
    for (int i = 0; i < 16; i++) snap_w[i] = dsv4_cache_win_page(c, a, i * 4);
    for (int i = 0; i < 8; i++) snap_b[i] = dsv4_cache_blk_page(c, a, i * 8);
    u = dsv4_cache_get_usage(c);
    CHECK(u.blk_used == 6 && u.win_used == 2);

    /* B needs 5 blocks, 4 are free */
    int64_t sb = 0;
    int cb = 40;
    CHECK(dsv4_cache_reserve(c, 1, &b, &sb, &cb, 1, &e) == DSV4_ERR_CACHE_FULL);
    CHECK_ERR(e, DSV4_ERR_CACHE_FULL, "CMP/IDX blocks: call needs 5 blocks, 4 free of 10 total");
    /* A continues one block while B asks for 4: 5 > 4, nothing happens to either */
    int sq[2] = {a, b};
    int64_t st[2] = {48, 0};
    int cn[2] = {8, 32};
    CHECK(dsv4_cache_reserve(c, 2, sq, st, cn, 1, &e) == DSV4_ERR_CACHE_FULL);
    CHECK_ERR(e, DSV4_ERR_CACHE_FULL, "needs 5 blocks, 4 free of 10 total");
    dsv4_cache_usage u2 = dsv4_cache_get_usage(c);
    CHECK(u2.blk_used == u.blk_used && u2.win_used == u.win_used);
    int same = 1;
    for (int i = 0; i < 16; i++) same &= dsv4_cache_win_page(c, a, i * 4) == snap_w[i];
    for (int i = 0; i < 8; i++) same &= dsv4_cache_blk_page(c, a, i * 8) == snap_b[i];
    CHECK(same);
    for (int64_t t = 0; t < 64; t++)
        CHECK(dsv4_cache_win_page(c, b, t) == -1 && dsv4_cache_blk_page(c, b, t) == -1);
    CHECK(verify_seq(c, a, 48) == 0);
    consistent(c);
    /* exactly what fits: 1 + 3 blocks */
    cn[1] = 24;
    CHECK(dsv4_cache_reserve(c, 2, sq, st, cn, 1, &e) == 0);
    CHECK(dsv4_cache_get_usage(c).blk_used == 10);
    write_span(c, a, 48, 8);
    write_span(c, b, 0, 24);
    CHECK(verify_seq(c, a, 56) == 0 && verify_seq(c, b, 24) == 0);
    consistent(c);

    /* WIN pool: decode steps of B without trimming accumulate pages until none is left
     * (8 pages total; A holds pages of [43, 48) and [51, 56): 4; B of [19, 24): 2) */
    int64_t t = 24;
    int one = 1, rc = 0;
    while (t < 64 && (rc = dsv4_cache_reserve(c, 1, &b, &t, &one, 0, &e)) == 0) {
        for (int l = 0; l < 5; l++) {
            float *row = dsv4_cache_win_row(c, b, l, t);
            CHECK(row != NULL);
            if (row) row[0] = 1.0f;
        }
        t++;
    }
    CHECK(rc == DSV4_ERR_CACHE_FULL);
    CHECK_ERR(e, DSV4_ERR_CACHE_FULL, "cache pool WIN: call needs 1 pages, 0 free of 8 total");
    CHECK(t == 32);  /* B's pages of positions 24..31 took the last 2 */
    CHECK(verify_seq(c, a, 56) == 0);
    consistent(c);

    /* release returns everything */
    CHECK(dsv4_cache_seq_release(c, a, &e) == 0 && dsv4_cache_seq_release(c, b, &e) == 0);
    u = dsv4_cache_get_usage(c);
    CHECK(u.win_used == 0 && u.blk_used == 0 && u.slots_used == 0);
    int owned = 0;
    for (int i = 0; i < 8; i++) owned += dsv4_cache_win_owner(c, i) != -1;
    for (int i = 0; i < 10; i++) owned += dsv4_cache_blk_owner(c, i) != -1;
    CHECK(owned == 0);
    consistent(c);
    dsv4_cache_free(c);
}

/* A sequence listed twice in one call gets each missing page once. */
static void test_duplicate_spans(void) {
    dsv4_cache *c;
    if (mk(&c, 64, 1, 0, 4, 0)) return;
    dsv4_cache_set_sentinel(c, 1);
    dsv4_err e = {0};
    int a;
    CHECK(dsv4_cache_seq_alloc(c, &a, &e) == 0);
    int sq[2] = {a, a};
    int64_t st[2] = {0, 4};
    int cn[2] = {8, 8};
    CHECK(dsv4_cache_reserve(c, 2, sq, st, cn, 1, &e) == 0);
    /* writes [3, 8) and [7, 12): WIN pages 0, 1, 2; blocks of [0, 8) and [4, 12): 0, 1 */
    dsv4_cache_usage u = dsv4_cache_get_usage(c);
    CHECK(u.win_used == 3 && u.blk_used == 2);
    consistent(c);
    dsv4_cache_free(c);
}

/* Trim frees exactly the window pages whose positions are all below keep_from - win + 1,
 * and the survivors keep their rows. */
static void test_trim(void) {
    dsv4_cache *c;
    if (mk(&c, 200, 3, 0, 4, 0)) return;
    dsv4_cache_set_sentinel(c, 1);
    const dsv4_cache_plan *p = dsv4_cache_get_plan(c);
    dsv4_err e = {0};
    int a;
    CHECK(dsv4_cache_seq_alloc(c, &a, &e) == 0);
    for (int64_t t = 0; t < 40; t++) {   /* decode 40 positions, no trim: pages 0..9 */
        int one = 1;
        CHECK(dsv4_cache_reserve(c, 1, &a, &t, &one, 1, &e) == 0);
        write_span(c, a, t, 1);
    }
    CHECK(dsv4_cache_get_usage(c).win_used == 10);
    static const int64_t keeps[] = {0, 5, 9, 10, 11, 14, 15, 22, 21, 33, 40};
    int64_t cut = 0;  /* pages below cut are gone */
    for (int k = 0; k < 11; k++) {
        const int64_t K = keeps[k];
        dsv4_cache_trim(c, a, K);
        /* page i holds [4i, 4i+3]; dead when 4i + 3 < K - win + 1 */
        while (cut < 10 && 4 * cut + 3 < K - p->win + 1) cut++;
        int wrong = 0;
        for (int64_t i = 0; i < 12; i++) {
            int want = i >= cut && i < 10;
            wrong += (dsv4_cache_win_page(c, a, 4 * i) >= 0) != want;
        }
        CHECK_MSG(wrong == 0, "keep_from %lld: %d pages wrong", (long long)K, wrong);
        CHECK(dsv4_cache_get_usage(c).win_used == 10 - cut);
        CHECK(verify_seq(c, a, 40) == 0);   /* rows of [35, 40) survive every trim */
        consistent(c);
    }
    CHECK(cut == 8);  /* keep_from 40 keeps positions >= 35: pages 8 and 9 */
    dsv4_cache_free(c);
}

/* Bad handles and spans are DSV4_ERR_ARG, never a crash; accessors return NULL. */
static void test_handles(void) {
    dsv4_cache *c;
    if (mk(&c, 64, 2, 1, 4, 0)) return;
    dsv4_cache_set_sentinel(c, 1);
    dsv4_err e = {0};
    int a;
    CHECK(dsv4_cache_seq_alloc(c, &a, &e) == 0);
    int64_t s = 0;
    int C = 16;
    CHECK(dsv4_cache_reserve(c, 1, &a, &s, &C, 1, &e) == 0);
    CHECK(dsv4_cache_seq_live(c, a));
    CHECK(dsv4_cache_seq_release(c, a, &e) == 0);
    CHECK(!dsv4_cache_seq_live(c, a));
    CHECK(dsv4_cache_seq_release(c, a, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "sequence 0 is not live");
    CHECK(dsv4_cache_seq_release(c, -1, &e) == DSV4_ERR_ARG);
    CHECK(dsv4_cache_seq_release(c, 2, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "sequence 2 is not live");
    CHECK(dsv4_cache_seq_release(NULL, 0, &e) == DSV4_ERR_ARG);
    CHECK(dsv4_cache_reserve(c, 1, &a, &s, &C, 1, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "sequence 0 is not live");
    CHECK(dsv4_cache_win_row(c, a, 0, 0) == NULL && dsv4_cache_cmp_row(c, a, 1, 0) == NULL);
    CHECK(dsv4_cache_idx_row(c, a, 1, 0) == NULL && dsv4_cache_ring_row(c, a, 1, 0, 0) == NULL);
    dsv4_cache_trim(c, a, 100);   /* no-op */
    dsv4_cache_trim(c, 77, 100);
    CHECK(dsv4_cache_get_usage(c).win_used == 0 && dsv4_cache_get_usage(c).blk_used == 0);

    CHECK(dsv4_cache_seq_alloc(c, &a, &e) == 0);
    s = -1; C = 2;
    CHECK(dsv4_cache_reserve(c, 1, &a, &s, &C, 1, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "outside [0, max_context + d_max = 65)");
    s = 60; C = 6;
    CHECK(dsv4_cache_reserve(c, 1, &a, &s, &C, 0, &e) == DSV4_ERR_ARG);
    s = 63; C = 2;   /* the draft row at max_context has a window row but no block */
    CHECK(dsv4_cache_reserve(c, 1, &a, &s, &C, 0, &e) == 0);
    CHECK(dsv4_cache_reserve(c, 1, &a, &s, &C, 1, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "beyond the block table width 8");
    s = 0; C = -1;
    CHECK(dsv4_cache_reserve(c, 1, &a, &s, &C, 1, &e) == DSV4_ERR_ARG);
    CHECK(dsv4_cache_reserve(c, -1, NULL, NULL, NULL, 1, &e) == DSV4_ERR_ARG);
    CHECK(dsv4_cache_reserve(c, 0, NULL, NULL, NULL, 1, &e) == 0);
    /* accessors out of range */
    CHECK(dsv4_cache_win_row(c, a, 99, 63) == NULL && dsv4_cache_win_row(c, a, -1, 63) == NULL);
    CHECK(dsv4_cache_win_row(c, a, 0, 63) != NULL && dsv4_cache_win_row(c, a, 0, -1) == NULL);
    CHECK(dsv4_cache_win_row(c, a, 0, 1000) == NULL && dsv4_cache_win_row(c, a, 0, 0) == NULL);
    CHECK(dsv4_cache_cmp_row(c, a, 0, 0) == NULL);  /* ratio-0 layer has no CMP rows */
    CHECK(dsv4_cache_idx_row(c, a, 2, 0) == NULL);  /* ratio-8 layer has no IDX rows */
    CHECK(dsv4_cache_cmp_row(c, a, 1, (int64_t)1 << 62) == NULL);
    consistent(c);

    /* every slot taken */
    int b;
    CHECK(dsv4_cache_seq_alloc(c, &b, &e) == 0);
    CHECK(dsv4_cache_seq_alloc(c, &b, &e) == DSV4_ERR_CACHE_FULL);
    CHECK_ERR(e, DSV4_ERR_CACHE_FULL, "no free sequence slot: max_seqs = 2");
    dsv4_cache_free(c);

    /* BF16 pools: rows are 2 bytes a value apart, a written row stays inside its bytes */
    dsv4_cache_opts o;
    memset(&o, 0, sizeof o);
    o.max_context = 64; o.max_seqs = 1; o.row_bytes_per_value = 2; o.idx_bytes_per_value = 2;
    dsv4_cache_plan p;
    CHECK(dsv4_cache_plan_make(&g_cfg, &o, &p, &e) == 0);
    CHECK(p.win_row_bytes == 2 * g_cfg.head_dim && p.idx_row_bytes == 2 * g_cfg.index_head_dim);
    dsv4_cache *cb = NULL;
    CHECK(dsv4_cache_create(&p, &cb, &e) == 0 && cb);
    if (cb) {
        dsv4_cache_set_sentinel(cb, 1);
        const int64_t s0 = 0;
        const int n = 64;
        CHECK(dsv4_cache_seq_alloc(cb, &b, &e) == 0);
        CHECK(dsv4_cache_reserve(cb, 1, &b, &s0, &n, 1, &e) == 0);
        uint8_t *r0 = dsv4_cache_win_row(cb, b, 0, 62), *r1 = dsv4_cache_win_row(cb, b, 0, 63);
        uint8_t *k0 = dsv4_cache_idx_row(cb, b, 1, 0), *k1 = dsv4_cache_idx_row(cb, b, 1, 1);
        CHECK(r0 && r1 && r1 - r0 == 2 * g_cfg.head_dim);
        CHECK(k0 && k1 && k1 - k0 == 2 * g_cfg.index_head_dim);
        memset(r1, 0x5a, (size_t)p.win_row_bytes);  /* the last row of the page */
        CHECK(dsv4_cache_sentinel_check(cb, &e) == 0);
        CHECK(dsv4_cache_seq_release(cb, b, &e) == 0);
        CHECK(dsv4_cache_sentinel_check(cb, &e) == 0);
        dsv4_cache_free(cb);
    }
    /* FP8-split rows need nope channels in blocks of 64 (this config has 8 - 4) */
    o.row_bytes_per_value = 1;
    CHECK(dsv4_cache_plan_make(&g_cfg, &o, &p, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "FP8-split rows need");
}

/* A reused slot is cleared: projections 0, scores -inf, in every ring; rings wrap at L_r. */
static void test_slot_reuse(void) {
    dsv4_cache *c;
    if (mk(&c, 64, 2, 1, 4, 0)) return;
    dsv4_cache_set_sentinel(c, 1);
    const dsv4_cache_plan *p = dsv4_cache_get_plan(c);
    dsv4_err e = {0};
    int a, b;
    CHECK(dsv4_cache_seq_alloc(c, &a, &e) == 0 && dsv4_cache_seq_alloc(c, &b, &e) == 0);
    const float *slot_lo = dsv4_cache_ring_row(c, a, 1, 0, 0);
    for (int l = 0; l < p->n_layers; l++)
        for (int ix = 0; ix < 2; ix++)
            for (int64_t t = 0; t < 20; t++) {
                float *row = dsv4_cache_ring_row(c, a, l, ix, t);
                const int r = g_cfg.compress_ratios[l];
                const int has = ix ? r == 4 : r > 0;
                CHECK(has == (row != NULL));
                if (!row) continue;
                const int w = ix ? 4 * p->dI : 2 * (r == 4 ? 2 : 1) * p->hd;
                CHECK(row == dsv4_cache_ring_row(c, a, l, ix, t + p->ring_len[l]));
                CHECK(row >= slot_lo && row + w <= slot_lo + p->slot_floats);
                for (int i = 0; i < w; i++) row[i] = 12345.0f + i;   /* a previous user */
            }
    CHECK(dsv4_cache_seq_release(c, a, &e) == 0);
    consistent(c);
    int a2;
    CHECK(dsv4_cache_seq_alloc(c, &a2, &e) == 0 && a2 == a);
    int bad = 0;
    for (int l = 0; l < p->n_layers; l++)
        for (int ix = 0; ix < 2; ix++)
            for (int64_t t = 0; t < p->ring_len[l]; t++) {
                const float *row = dsv4_cache_ring_row(c, a2, l, ix, t);
                if (!row) continue;
                const int half = ix ? 2 * p->dI : (g_cfg.compress_ratios[l] == 4 ? 2 : 1) * p->hd;
                for (int i = 0; i < half; i++) bad += row[i] != 0.0f;
                for (int i = 0; i < half; i++) bad += !(isinf(row[half + i]) && row[half + i] < 0);
            }
    CHECK(bad == 0);
    consistent(c);
    dsv4_cache_free(c);
}

/* The sentinel check can fail: a write through a stale pointer into a released page. */
static void test_sentinel_catches(void) {
    dsv4_cache *c;
    if (mk(&c, 64, 1, 0, 4, 0)) return;
    dsv4_cache_set_sentinel(c, 1);
    dsv4_err e = {0};
    int a;
    CHECK(dsv4_cache_seq_alloc(c, &a, &e) == 0);
    int64_t s = 0;
    int C = 8;
    CHECK(dsv4_cache_reserve(c, 1, &a, &s, &C, 1, &e) == 0);
    float *stale = dsv4_cache_win_row(c, a, 3, 6);
    float *stale_c = dsv4_cache_cmp_row(c, a, 2, 0);
    CHECK(stale && stale_c);
    CHECK(consistent(c));
    CHECK(dsv4_cache_seq_release(c, a, &e) == 0);
    CHECK(dsv4_cache_sentinel_check(c, &e) == 0);
    stale[1] = 1.0f;
    CHECK(dsv4_cache_sentinel_check(c, &e) == 1);
    CHECK_ERR(e, DSV4_ERR_STATE, "free WIN page 1, layer 3: 1 words written (first at row 2)");
    stale_c[0] = 2.0f;
    CHECK(dsv4_cache_sentinel_check(c, &e) == 2);
    dsv4_cache_free(c);
}

/* One sequence to position 1,048,576 through chunked prefill: table widths from
 * max_context, every block of the sequence allocated, WIN pages never above W_live. */
static void test_one_million(void) {
    dsv4_cache *c;
    const int64_t M = 1048576;
    if (mk(&c, M, 1, 0, 0, 0)) return;
    const dsv4_cache_plan *p = dsv4_cache_get_plan(c);
    CHECK(p->blk_table_width == M / 8 && p->win_table_width == M / 64);
    CHECK(p->n_blocks == M / 8 + 1);
    dsv4_err e = {0};
    int a;
    CHECK(dsv4_cache_seq_alloc(c, &a, &e) == 0);
    int64_t max_win = 0, fails = 0;
    for (int64_t s = 0; s < M; s += 2048) {
        int C = 2048;
        if (dsv4_cache_reserve(c, 1, &a, &s, &C, 1, &e)) { fails++; break; }
        float *w = dsv4_cache_cmp_row(c, a, 1, s / 4), *x = dsv4_cache_idx_row(c, a, 4, s / 4);
        float *y = dsv4_cache_win_row(c, a, 4, s + C - 1);
        if (!w || !x || !y) { fails++; break; }
        w[0] = (float)s; x[0] = (float)-s; y[0] = (float)(s + C - 1);
        int64_t used = dsv4_cache_get_usage(c).win_used;
        if (used > max_win) max_win = used;
        dsv4_cache_trim(c, a, s + C);
    }
    CHECK_MSG(fails == 0, "%s", e.msg);
    CHECK(max_win <= p->w_live);
    dsv4_cache_usage u = dsv4_cache_get_usage(c);
    CHECK(u.blk_used == M / 8 && u.blk_total == M / 8 + 1);
    const float *first = dsv4_cache_cmp_row(c, a, 1, 0), *last = dsv4_cache_cmp_row(c, a, 1, (M - 2048) / 4);
    CHECK(first && last && first[0] == 0.0f && last[0] == (float)(M - 2048));
    const float *li = dsv4_cache_idx_row(c, a, 4, (M - 2048) / 4);
    CHECK(li && li[0] == (float)-(M - 2048));
    const float *lw = dsv4_cache_win_row(c, a, 4, M - 1);
    CHECK(lw && lw[0] == (float)(M - 1));
    CHECK(dsv4_cache_cmp_row(c, a, 1, M / 4 - 1) != NULL && dsv4_cache_cmp_row(c, a, 1, M / 4) == NULL);
    CHECK(dsv4_cache_blk_page(c, a, M - 1) >= 0 && dsv4_cache_win_row(c, a, 4, M) == NULL);
    int64_t s = M;
    int one = 1;
    CHECK(dsv4_cache_reserve(c, 1, &a, &s, &one, 1, &e) == DSV4_ERR_ARG);
    CHECK(dsv4_cache_check(c, &e) == 0);
    CHECK(dsv4_cache_seq_release(c, a, &e) == 0);
    u = dsv4_cache_get_usage(c);
    CHECK(u.blk_used == 0 && u.win_used == 0);
    CHECK(dsv4_cache_check(c, &e) == 0);
    dsv4_cache_free(c);
}

int main(void) {
    fx_micro(&g_cfg);
    test_mapping_shuffled();
    test_exhaustion();
    test_duplicate_spans();
    test_trim();
    test_handles();
    test_slot_reuse();
    test_sentinel_catches();
    test_one_million();
    test_populate();
    return test_report();
}
