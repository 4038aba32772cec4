/* test_cp_plan.c — the context-parallel partition and exchange ranges (dist/cp.h), without
 * MPI:
 *   - default granule: smallest multiple of every ratio >= win - 1 (Flash and goldens 128);
 *   - zigzag segments over random (CP, s0, n, G): contiguous cover of the prompt, never
 *     empty, boundaries on multiples of G, owner i or 2CP-1-i, q < 2CP -> one segment;
 *   - the state a segment hands on equals, position by position, what a brute-force scan
 *     of every later window's candidates (model.md §5.8) needs: A halves only -> carry,
 *     B halves -> whole row;
 *   - window tails chain: every window row a later query reads lies in some tail;
 *   - per-layer volumes reproduce serving.md's Flash figures (N = 65,536, CP = 4).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dist/cp.h"
#include "model/config.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int64_t rnd(int64_t n) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (int64_t)((rng >> 11) % (uint64_t)n);
}

static int load(const char *name, dsv4_config *c) {
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "%s", name);
    const char *src = getenv("DSV4_SRC") ? getenv("DSV4_SRC") : ".";
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/config/%s", src, rel);
    dsv4_err err = {0};
    int rc = dsv4_config_load(path, c, &err);
    if (rc) fprintf(stderr, "%s: %s\n", path, err.msg);
    return rc;
}

/* What a later window needs of position p in [a, b): 0 nothing, 1 first halves (A series
 * of the next window only), 2 the whole row. Scans every window closing at t >= b. */
static int need(int64_t p, int64_t b, int r, int coff) {
    int what = 0;
    for (int64_t w = p / r - 1; w <= p / r + 1; w++) {
        if (w < 0 || (w + 1) * r - 1 < b) continue; /* closed before b: pooled already */
        if (p >= w * r && p < (w + 1) * r) what = 2;                     /* B (or only) series */
        if (coff == 2 && p >= (w - 1) * r && p < w * r && what < 1) what = 1; /* A series */
    }
    return what;
}

static void check_partition(void) {
    int bad = 0;
    for (int it = 0; it < 20000 && !bad; it++) {
        const int cp = 1 + (int)rnd(8);
        const int64_t G = 1 + rnd(it % 2 ? 200 : 20), s0 = rnd(3) ? rnd(1000) : 0, n = 1 + rnd(3000);
        dsv4_cp_plan p;
        dsv4_err err = {0};
        if (dsv4_cp_plan_make(cp, s0, n, G, &p, &err)) { CHECK_MSG(0, "%s", err.msg); return; }
        const int64_t q = (s0 + n + G - 1) / G - s0 / G; /* granules touched */
        const int split = cp > 1 && q >= 2 * cp;
        bad |= p.split != split || p.n_seg != (split ? 2 * cp : 1) || p.q != q;
        int64_t at = s0;
        int owned[8] = {0};
        for (int i = 0; i < p.n_seg; i++) {
            const dsv4_cp_seg *s = &p.seg[i];
            bad |= s->start != at || s->end <= s->start;
            if (i > 0) bad |= s->start % G != 0;
            bad |= s->owner != (split ? (i < cp ? i : 2 * cp - 1 - i) : 0);
            bad |= dsv4_cp_seg_of(&p, s->start) != i || dsv4_cp_seg_of(&p, s->end - 1) != i;
            owned[s->owner]++;
            at = s->end;
        }
        bad |= at != s0 + n;
        for (int r = 0; split && r < cp; r++) bad |= owned[r] != 2;
        if (bad) fprintf(stderr, "partition wrong: cp %d s0 %lld n %lld G %lld\n", cp, (long long)s0,
                         (long long)n, (long long)G);
        dsv4_cp_plan_free(&p);
    }
    CHECK(!bad);
}

static void check_state_ranges(void) {
    const int ratios[] = {4, 4, 128, 8, 16};
    int bad = 0;
    for (int it = 0; it < 4000 && !bad; it++) {
        const int r = ratios[it % 5], coff = it % 5 == 0 ? 2 : (r == 4 ? 2 : 1);
        const int64_t a = rnd(600), b = a + 1 + rnd(300);
        const dsv4_cp_seg s = {a, b, 0};
        int64_t lo, open;
        dsv4_cp_state_range(&s, r, coff, &lo, &open);
        for (int64_t p = a; p < b && !bad; p++) {
            const int want = need(p, b, r, coff);
            const int got = p < lo ? 0 : p < open ? 1 : 2;
            if (want != got) {
                fprintf(stderr, "state of [%lld, %lld) r %d coff %d: position %lld needs %d, range gives %d\n",
                        (long long)a, (long long)b, r, coff, (long long)p, want, got);
                bad = 1;
            }
        }
        /* the home rank's state at n = b, over the whole history */
        for (int64_t p = 0; p < b && !bad; p++)
            if ((need(p, b, r, coff) > 0) != (p >= dsv4_cp_state_lo(b, r, coff))) {
                fprintf(stderr, "state_lo(%lld, %d, %d) wrong at %lld\n", (long long)b, r, coff, (long long)p);
                bad = 1;
            }
    }
    CHECK(!bad);
}

/* Every window row a query of segment j reads from before its start lies in the tail of
 * the segment holding it (positions >= s0). */
static void check_tails(void) {
    int bad = 0;
    for (int it = 0; it < 3000 && !bad; it++) {
        const int cp = 2 + (int)rnd(3), win = 1 + (int)rnd(40);
        const int64_t G = 1 + rnd(30), s0 = rnd(50), n = 1 + rnd(600);
        dsv4_cp_plan p;
        if (dsv4_cp_plan_make(cp, s0, n, G, &p, NULL)) { bad = 1; break; }
        for (int j = 1; j < p.n_seg && !bad; j++)
            for (int64_t t = p.seg[j].start; t < p.seg[j].end && t < p.seg[j].start + win; t++)
                for (int64_t q = t - win + 1; q < p.seg[j].start; q++) {
                    if (q < s0) continue; /* the home rank's broadcast */
                    const dsv4_cp_seg *s = &p.seg[dsv4_cp_seg_of(&p, q)];
                    if (q < dsv4_cp_tail_lo(s, win)) { bad = 1; break; }
                }
        dsv4_cp_plan_free(&p);
    }
    CHECK(!bad);
}

static void check_granules(void) {
    dsv4_config c;
    if (load("flash.json", &c) == 0) CHECK(dsv4_cp_default_granule(&c) == 128);
    if (load("tiny.json", &c) == 0) {
        CHECK(dsv4_cp_default_granule(&c) == 128);
        c.sliding_window = 300;   /* win - 1 = 299 -> 3 x 128 */
        CHECK(dsv4_cp_default_granule(&c) == 384);
        for (int i = 0; i < c.num_hidden_layers + c.num_nextn_predict_layers; i++) c.compress_ratios[i] = 0;
        c.sliding_window = 10;    /* SWA only: win - 1 */
        CHECK(dsv4_cp_default_granule(&c) == 9);
        c.sliding_window = 1;
        CHECK(dsv4_cp_default_granule(&c) == 1);
        c.compress_ratios[2] = 4;
        c.compress_ratios[3] = 6;   /* lcm 12 */
        c.sliding_window = 20;
        CHECK(dsv4_cp_default_granule(&c) == 24);
    }
    dsv4_cp_plan p;
    dsv4_err err = {0};
    CHECK(dsv4_cp_plan_make(0, 0, 10, 4, &p, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_cp_plan_make(2, 0, 0, 4, &p, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_cp_plan_make(2, -1, 5, 4, &p, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_cp_plan_make(2, 0, 5, 0, &p, &err) == DSV4_ERR_ARG);
}

/* serving.md §c: Flash, N = 65,536, CP = 4, F32: exchange B per CSA layer 16,384 entries x
 * (512 + 128) floats = 40 MiB, per HCA layer 512 x 512 floats = 1 MiB; window tails of the
 * segments 127 rows x 2 KiB each (the last segment's stay home); CSA seeds 4 rows x
 * (2*512 + 2*128) floats per compressor pair and segment. */
static void check_flash_volumes(void) {
    dsv4_config c;
    if (load("flash.json", &c)) { CHECK(0); return; }
    dsv4_cp_plan p;
    CHECK(dsv4_cp_plan_make(4, 0, 65536, dsv4_cp_default_granule(&c), &p, NULL) == 0);
    CHECK(p.split && p.q == 512);
    for (int i = 0; i < p.n_seg; i++) CHECK(p.seg[i].end - p.seg[i].start == 8192);
    dsv4_cp_volume csa = dsv4_cp_layer_volume(&p, &c, 4), hca = dsv4_cp_layer_volume(&p, &c, 128);
    dsv4_cp_volume swa = dsv4_cp_layer_volume(&p, &c, 0);
    CHECK(csa.b * 4 == 40LL << 20);
    CHECK(hca.b * 4 == 1LL << 20);
    CHECK(swa.b == 0 && swa.bcast == 0 && csa.bcast == 0);
    CHECK(swa.a == 7LL * 127 * 512);
    CHECK(hca.a == swa.a);                               /* aligned: no HCA state travels */
    CHECK(csa.a == swa.a + 7LL * 4 * (2 * 512 + 2 * 128)); /* + CSA carry seeds */
    printf("Flash N=65536 CP=4 per layer: exchange A %.2f MiB (CSA), exchange B %.1f MiB (CSA) / "
           "%.1f MiB (HCA)\n", csa.a * 4.0 / (1 << 20), csa.b * 4.0 / (1 << 20), hca.b * 4.0 / (1 << 20));
    dsv4_cp_plan_free(&p);
    /* continuation: the broadcast carries entries and keys below s0 plus window and rings */
    CHECK(dsv4_cp_plan_make(4, 1000, 65536, 128, &p, NULL) == 0);
    csa = dsv4_cp_layer_volume(&p, &c, 4);
    /* window rows [873, 1000), main and indexer rings of positions [996, 1000), entries and
     * keys w < 250 */
    CHECK(csa.bcast == 127LL * 512 + 4 * (2 * 2 * 512) + 250LL * 512 + 4 * (2 * 2 * 128) + 250LL * 128);
    dsv4_cp_plan_free(&p);
}

int main(void) {
    check_granules();
    check_partition();
    check_state_ranges();
    check_tails();
    check_flash_volumes();
    return test_report();
}
