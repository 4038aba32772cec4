/* test_cache_rules.c — checks 2 and 3 of serving.md §a.2 against independent brute force:
 *  - ring safety: a slot-by-slot simulation of the spec's definition, compared verdict for
 *    verdict with dsv4_cache_check_ring over a grid of ratios, ring lengths, C_max, D_max,
 *    plus random multi-call walks that read exactly the candidates pooling reads;
 *  - W_live: distinct pages counted position by position over a wider range of span sizes
 *    than the planner enumerates, compared with the planner's value;
 *  - an engine-like random walk (prefill chunks, speculative spans, MTP calls one position
 *    behind, trim at min(n, m)) through real pools sized max_seqs x W_live: every read row
 *    is mapped, no reservation fails, no sequence holds more than W_live pages. */
#include <stdint.h>

#include "cache/cache.h"
#include "cache/geom.h"
#include "fixtures.h"
#include "test.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static int64_t rnd_in(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

static int64_t floordiv_(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ---- ring safety ----------------------------------------------------------------------- */

/* The spec's definition, slot by slot: 1 when every case keeps what the next call reads. */
static int ring_brute(int r, int coff, int L, int c_max, int d_max) {
    int64_t tag[64];
    const int64_t c_lim = c_max < L + coff * r ? c_max : L + coff * r;
    for (int64_t s = 0; s < 3 * (int64_t)L * r + 2 * coff * r; s++)
        for (int64_t C = 1; C <= c_lim; C++)
            for (int64_t k = C <= 1 + d_max ? 1 : C; k <= C; k++) {
                for (int i = 0; i < L; i++) tag[i] = -1;
                for (int64_t p = max64(0, s / r * r - (coff - 1) * r); p < s; p++) tag[p % L] = p;
                for (int64_t q = max64(s, s + C - L); q < s + C; q++) tag[q % L] = q;
                for (int64_t p = max64(0, (s + k) / r * r - (coff - 1) * r); p < s + k; p++)
                    if (tag[p % L] != p) return 0;
            }
    return 1;
}

/* Calls on one sequence from position 0 with a cleared ring; pooling reads every candidate
 * position < s of every window closing in the span. 1 when no read finds a wrong position. */
static int ring_walk(int r, int coff, int L, int c_max, int d_max, int steps) {
    int64_t tag[64];
    for (int i = 0; i < L; i++) tag[i] = -1;
    int64_t n = 0;
    for (int it = 0; it < steps; it++) {
        const int spec = d_max > 0 && rnd() % 2;
        const int64_t C = spec ? rnd_in(1, 1 + d_max) : rnd_in(1, c_max);
        const int64_t k = spec ? rnd_in(1, C) : C;
        const int64_t s = n;
        for (int64_t w = s / r; w < (s + C) / r; w++)           /* windows closing in the span */
            for (int64_t p = max64(0, (w - coff + 1) * r); p < (w + 1) * r && p < s; p++)
                if (tag[p % L] != p) return 0;
        for (int64_t q = max64(s, s + C - L); q < s + C; q++) tag[q % L] = q;  /* after pooling */
        n = s + k;
    }
    return 1;
}

static void test_ring(void) {
    static const int ratios[] = {1, 2, 3, 4, 5, 8};
    int cases = 0, disagree = 0, spec_fail = 0, short_pass = 0, walk_fail = 0;
    for (int ri = 0; ri < 6; ri++)
        for (int coff = 1; coff <= 2; coff++)
            for (int d_max = 0; d_max <= 2; d_max++) {
                const int r = ratios[ri], spec_L = coff * r - 1 + d_max;
                const int cms[4] = {1 + d_max, 3 + d_max, 7, 100};
                for (int ci = 0; ci < 4; ci++) {
                    const int c_max = cms[ci];
                    if (c_max < 1 + d_max) continue;
                    for (int L = spec_L - 3; L <= spec_L + 3; L++) {
                        if (L < 1 || L > 64) continue;
                        dsv4_err e = {0};
                        const int got = dsv4_cache_check_ring(r, coff, L, c_max, d_max, &e) == 0;
                        const int want = ring_brute(r, coff, L, c_max, d_max);
                        cases++;
                        if (got != want) {
                            disagree++;
                            fprintf(stderr, "ring r=%d coff=%d L=%d c_max=%d d_max=%d: check %d, brute %d (%s)\n",
                                    r, coff, L, c_max, d_max, got, want, e.msg);
                        }
                        if (L == spec_L && !want) spec_fail++;
                        /* a ring one row short fails once spans can be long enough to need
                         * it (r = 1 carries nothing: every position closes its window) */
                        if (r > 1 && L == spec_L - 1 && want && c_max >= coff * r + d_max) short_pass++;
                        if (want && !ring_walk(r, coff, L, c_max, d_max, 400)) walk_fail++;
                    }
                }
            }
    printf("ring: %d geometries\n", cases);
    CHECK(cases > 300);
    CHECK(disagree == 0);
    CHECK(spec_fail == 0);     /* L_r = coff*r - 1 + D_max is always safe */
    CHECK(short_pass == 0);    /* and shorter is not */
    CHECK(walk_fail == 0);
    /* the walk can fail: a ring one row short of the Flash CSA length with MTP */
    int lost = 0;
    for (int i = 0; i < 20 && !lost; i++) lost = !ring_walk(4, 2, 7, 16, 1, 400);
    CHECK(lost);
}

/* ---- W_live ---------------------------------------------------------------------------- */

/* Distinct pages held during a call, position by position, over span sizes up to
 * 3 (win + B_w) + 8: history [s-win+1-delta, s), the main call's written rows, and with MTP
 * the MTP call's (the same span one position behind). */
static int w_live_brute(int win, int bw, int c_max, int delta) {
    int best = 0;
    const int64_t base = 16 * (int64_t)(win + bw), c_top = 3 * (int64_t)(win + bw) + 8;
    static unsigned char seen[4096];
    for (int64_t s = base; s < base + bw; s++)
        for (int64_t C = 1; C <= c_max && C <= c_top; C++) {
            const int64_t p0 = floordiv_(s - win - 2, bw);
            memset(seen, 0, sizeof seen);
            int n = 0;
#define ADD(t) do { int64_t i_ = floordiv_((t), bw) - p0; if (!seen[i_]) { seen[i_] = 1; n++; } } while (0)
            for (int64_t t = s - win + 1 - delta; t < s; t++) ADD(t);
            for (int64_t t = max64(s, s + C - win + 1); t < s + C; t++) ADD(t);
            if (delta)
                for (int64_t t = max64(s - 1, s + C - win); t < s + C - 1; t++) ADD(t);
#undef ADD
            if (n > best) best = n;
        }
    return best;
}

static void test_w_live(void) {
    static const int wins[] = {1, 2, 3, 5, 6, 7, 16, 31, 128};
    static const int bws[] = {1, 2, 3, 4, 5, 8, 16, 64};
    static const int cms[] = {2, 3, 9, 64, 2048};
    int cases = 0, wrong = 0, over = 0;
    for (int wi = 0; wi < 9; wi++)
        for (int bi = 0; bi < 8; bi++)
            for (int delta = 0; delta <= 1; delta++)
                for (int ci = 0; ci < 5; ci++) {
                    const int win = wins[wi], bw = bws[bi], c_max = cms[ci];
                    if (win + bw > 150) continue;   /* keep the brute force's bitmap small */
                    const int bound = dsv4_cache_w_live_bound(win, bw, delta);
                    int got = -1;
                    dsv4_err e = {0};
                    int rc = dsv4_cache_check_w_live(win, bw, c_max, delta, delta, bound, &got, &e);
                    const int want = w_live_brute(win, bw, c_max, delta);
                    cases++;
                    if (rc || got != want) {
                        wrong++;
                        fprintf(stderr, "W_live win=%d B_w=%d c_max=%d delta=%d: got %d (rc %d %s), brute %d\n",
                                win, bw, c_max, delta, got, rc, e.msg, want);
                    }
                    if (want > bound) over++;
                    /* the spec's closed form, tail of win-1 positions */
                    if (win > 1) {
                        const int spec = ((win + delta + bw - 3) / bw + 1) + ((win + bw - 3) / bw + 1);
                        if (!delta || win % bw != 2 % bw) CHECK(spec == bound);
                        else CHECK(spec + 1 == bound);
                    }
                }
    printf("W_live: %d geometries\n", cases);
    CHECK(cases > 500);
    CHECK(wrong == 0);
    CHECK(over == 0);
    /* Flash and the golden configs, from the brute force: 6 / 4 pages (C_max 2048 / 2) */
    CHECK(w_live_brute(128, 64, 2048, 1) == 6 && w_live_brute(128, 64, 2, 1) == 4);
    CHECK(w_live_brute(16, 64, 2048, 1) == 4);
    /* with MTP and win % B_w == 2 the MTP call's write reaches one page further than the
     * spec's closed form (5 for win 6, B_w 4) allows */
    CHECK(w_live_brute(6, 4, 64, 1) == 6 && dsv4_cache_w_live_bound(6, 4, 1) == 6);
}

/* ---- engine-like walk through real pools ----------------------------------------------- */

static int held_pages(dsv4_cache *c, int seq, int64_t upto, int bw) {
    int n = 0;
    for (int64_t t = 0; t < upto; t += bw) n += dsv4_cache_win_page(c, seq, t) >= 0;
    return n;
}

static int rows_mapped(dsv4_cache *c, int seq, int64_t lo, int64_t hi) {
    for (int64_t t = lo < 0 ? 0 : lo; t < hi; t++)
        if (dsv4_cache_win_page(c, seq, t) < 0) return 0;
    return 1;
}

/* Returns the largest number of WIN pages one sequence held. */
static int engine_walk(int win, int bw, int c_max, int d_max, int steps, int *failures) {
    dsv4_config cfg;
    fx_micro(&cfg);
    cfg.sliding_window = win;
    dsv4_cache_opts o;
    memset(&o, 0, sizeof o);
    o.max_context = 600;
    o.max_seqs = 3;
    o.c_max = c_max;
    o.d_max = d_max;
    o.win_block = bw;
    dsv4_cache_plan p;
    dsv4_cache *c = NULL;
    dsv4_err e = {0};
    if (dsv4_cache_plan_make(&cfg, &o, &p, &e) || dsv4_cache_create(&p, &c, &e)) {
        CHECK_MSG(0, "%s", e.msg);
        (*failures)++;
        return 0;
    }
    int seq[3];
    int64_t n[3] = {0}, m[3] = {0};
    for (int i = 0; i < 3; i++) dsv4_cache_seq_alloc(c, &seq[i], &e);
    const int mtp = d_max > 0;
    int most = 0;
#define HELD(i) do { int h_ = held_pages(c, seq[i], o.max_context + d_max, bw); if (h_ > most) most = h_; \
                     if (h_ > p.w_live) (*failures)++; } while (0)
    for (int it = 0; it < steps; it++) {
        const int i = (int)(rnd() % 3);
        const int64_t s = n[i];
        const int spec = mtp && s > 0 && rnd() % 2;
        int C = spec ? (int)rnd_in(1, 1 + d_max) : (int)rnd_in(1, c_max);
        if (s + C > o.max_context) {   /* sequence done: start over in a fresh slot */
            dsv4_cache_seq_release(c, seq[i], &e);
            dsv4_cache_seq_alloc(c, &seq[i], &e);
            n[i] = m[i] = 0;
            continue;
        }
        const int64_t k = spec ? rnd_in(1, C) : C;
        /* main call: reads its history (and the MTP layer's, one behind); writes its tail */
        if (!rows_mapped(c, seq[i], s - win + 1, s) || !rows_mapped(c, seq[i], m[i] - win + 1, m[i]))
            (*failures)++;
        if (dsv4_cache_reserve(c, 1, &seq[i], &n[i], &C, 1, &e)) { (*failures)++; break; }
        HELD(i);
        n[i] = s + k;
        dsv4_cache_trim(c, seq[i], mtp && m[i] < n[i] ? m[i] : n[i]);
        if (!mtp) continue;
        /* MTP call: rows m .. n-1 (a prefill chunk may stop one short: x_n not sampled) */
        int64_t end = spec || rnd() % 2 ? n[i] : n[i] - 1;
        if (end <= m[i]) continue;
        int Cm = (int)(end - m[i]);
        if (!rows_mapped(c, seq[i], m[i] - win + 1, m[i])) (*failures)++;
        if (dsv4_cache_reserve(c, 1, &seq[i], &m[i], &Cm, 0, &e)) { (*failures)++; break; }
        HELD(i);
        m[i] = end;
        dsv4_cache_trim(c, seq[i], m[i] < n[i] ? m[i] : n[i]);
    }
#undef HELD
    if (dsv4_cache_check(c, &e)) { CHECK_MSG(0, "%s", e.msg); (*failures)++; }
    dsv4_cache_free(c);
    return most;
}

static void test_engine_walk(void) {
    static const int geo[][2] = {{6, 4}, {16, 16}, {16, 64}, {5, 2}, {7, 3}, {2, 1}, {1, 4}, {128, 64}};
    static const int cms[] = {2, 5, 40, 300};
    for (int g = 0; g < 8; g++)
        for (int ci = 0; ci < 4; ci++)
            for (int d_max = 0; d_max <= 1; d_max++) {
                int failures = 0;
                int most = engine_walk(geo[g][0], geo[g][1], cms[ci], d_max, 3000, &failures);
                CHECK_MSG(failures == 0, "win %d B_w %d c_max %d d_max %d: %d failures", geo[g][0],
                          geo[g][1], cms[ci], d_max, failures);
                if (geo[g][0] == 6 && geo[g][1] == 4 && cms[ci] == 40 && d_max == 1)
                    CHECK_MSG(most == 6, "most %d", most);  /* beyond the spec's 5 */
            }
}

int main(void) {
    test_ring();
    test_w_live();
    test_engine_walk();
    return test_report();
}
