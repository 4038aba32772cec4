/* test_speculative.c — speculative spans and dsv4_seq_commit (spec/serving.md §b, §e):
 *   - the API rules: at most 1 + D_max rows, nothing else runs on the sequence until the
 *     commit, k in [1, C], a commit needs a pending span, freeing a pending sequence is fine;
 *   - rollback: engine A verifies two rows per step ([x_n, draft]) and commits 1 or 2, with
 *     the draft wrong exactly when it lands on positions = -1 or 0 mod 4 (so also mod 128
 *     and on the first and last rows of window pages, B_w = 4 or 16) plus at random; engine B
 *     runs the same true tokens one plain row at a time, never seeing a draft. After every
 *     step: the rows of A equal B's bitwise (final hidden, last-block streams, MTP hidden),
 *     and A's cache equals B's wherever a later call reads: window rows of the live window
 *     (every layer, MTP included), every compressed entry and indexer key closed by a
 *     committed position, every compressor ring row a later call reads, and which table
 *     entries hold pages (page counts per pool included). A also decodes a second sequence
 *     in the same calls, so the verify spans are batched.
 *
 *   test_speculative MODEL_DIR N_TOKENS [reference]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "dsv4.h"
#include "engine/engine.h"
#include "kv_env.h"
#include "test.h"

static dsv4_model *M;
static int V, D, HC, N, REFERENCE;
static int32_t *truth;  /* (N + 1) the committed tokens */
static int32_t *other;  /* (N + 1) tokens of A's companion sequence */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static dsv4_engine *make_engine(int mtp, int win_block) {
    dsv4_engine_opts eo = {.max_context = N + 1, .max_seqs = 2, .c_max = 256, .mtp = mtp,
                           .win_block = win_block, .reference = REFERENCE, .kv_dtype = test_kv_dtype()};
    dsv4_engine *e = NULL;
    dsv4_err err = {0};
    if (dsv4_engine_create(M, &eo, &e, &err)) fprintf(stderr, "engine: %s\n", err.msg);
    return e;
}

static void test_rules(void) {
    dsv4_err err = {0};
    dsv4_engine *e = make_engine(1, 0);
    int s, t;
    CHECK(dsv4_seq_create(e, &s, &err) == 0);
    CHECK(dsv4_seq_create(e, &t, &err) == 0);
    float *h = malloc((size_t)4 * D * sizeof(float));
    float *st = malloc((size_t)10 * HC * D * sizeof(float));
    dsv4_span p = {.seq = s, .start = 0, .n_tokens = 10, .tokens = truth, .n_hidden = 1};
    CHECK(dsv4_forward(e, &p, 1, h, NULL, &err) == 0);

    CHECK(dsv4_seq_commit(e, s, 1, &err) == DSV4_ERR_STATE);
    CHECK_ERR(err, DSV4_ERR_STATE, "no speculative span");
    dsv4_span v = {.seq = s, .start = 10, .n_tokens = 3, .tokens = truth + 10, .n_hidden = 2,
                   .speculative = 1};
    CHECK(dsv4_forward(e, &v, 1, h, NULL, &err) == DSV4_ERR_ARG);  /* 3 > 1 + D_max */
    CHECK_ERR(err, DSV4_ERR_ARG, "exceeds 1 + D_max = 2");
    v.n_tokens = 2;
    CHECK(dsv4_forward(e, &v, 1, h, NULL, &err) == 0);
    CHECK(dsv4_seq_length(e, s) == 10 && dsv4_seq_pending(e, s) == 2);
    /* nothing else runs on s until the commit; other sequences are not affected */
    dsv4_span again = {.seq = s, .start = 10, .n_tokens = 1, .tokens = truth + 10};
    CHECK(dsv4_forward(e, &again, 1, NULL, NULL, &err) == DSV4_ERR_STATE);
    CHECK_ERR(err, DSV4_ERR_STATE, "awaiting dsv4_seq_commit");
    dsv4_mtp_span ms = {s, 0, 1, truth + 1, st};
    CHECK(dsv4_mtp_forward(e, &ms, 1, h, &err) == DSV4_ERR_STATE);
    int f;
    CHECK(dsv4_seq_fork(e, s, &f, &err) == DSV4_ERR_STATE);
    CHECK_ERR(err, DSV4_ERR_STATE, "awaiting dsv4_seq_commit");
    dsv4_span q = {.seq = t, .start = 0, .n_tokens = 3, .tokens = truth, .n_hidden = 1};
    CHECK(dsv4_forward(e, &q, 1, h, NULL, &err) == 0);
    CHECK(dsv4_seq_commit(e, s, 0, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_seq_commit(e, s, 3, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "outside [1, 2]");
    CHECK(dsv4_seq_pending(e, s) == 2);
    CHECK(dsv4_seq_commit(e, s, 1, &err) == 0);
    CHECK(dsv4_seq_length(e, s) == 11 && dsv4_seq_pending(e, s) == 0);
    CHECK(dsv4_seq_commit(e, s, 1, &err) == DSV4_ERR_STATE);
    /* a pending sequence can be freed; the slot comes back clean */
    v.start = 11; v.tokens = truth + 11;
    CHECK(dsv4_forward(e, &v, 1, h, NULL, &err) == 0);
    CHECK(dsv4_seq_free(e, s, &err) == 0);
    CHECK(dsv4_seq_pending(e, s) == -1);
    CHECK(dsv4_cache_check(e->cache, &err) == 0);
    CHECK(dsv4_seq_create(e, &s, &err) == 0 && dsv4_seq_pending(e, s) == 0);
    dsv4_engine_free(e);

    /* without MTP caches D_max = 0: only one-row speculative spans */
    e = make_engine(0, 0);
    CHECK(dsv4_seq_create(e, &s, &err) == 0);
    p.seq = s;
    CHECK(dsv4_forward(e, &p, 1, h, NULL, &err) == 0);
    v.seq = s; v.start = 10; v.tokens = truth + 10; v.n_tokens = 2;
    CHECK(dsv4_forward(e, &v, 1, h, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "needs an engine with MTP caches");
    v.n_tokens = 1; v.n_hidden = 1;
    CHECK(dsv4_forward(e, &v, 1, h, NULL, &err) == 0);
    CHECK(dsv4_seq_commit(e, s, 1, &err) == 0 && dsv4_seq_length(e, s) == 11);
    dsv4_engine_free(e);

    /* a sequence set to run without MTP rows: mtp_forward refuses it */
    e = make_engine(1, 0);
    CHECK(dsv4_seq_create(e, &s, &err) == 0);
    p.seq = s; p.n_streams = 10;
    CHECK(dsv4_forward(e, &p, 1, h, st, &err) == 0);
    CHECK(dsv4_seq_mtp_off(e, s, &err) == 0);
    dsv4_mtp_span off = {s, 0, 1, truth + 1, st};
    CHECK(dsv4_mtp_forward(e, &off, 1, h, &err) == DSV4_ERR_STATE);
    CHECK_ERR(err, DSV4_ERR_STATE, "runs without MTP");
    dsv4_engine_free(e);
    free(h);
    free(st);
}

/* A's cache equals B's on everything a later call reads, at committed length n = m. */
static int same_cache(dsv4_engine *a, int sa, dsv4_engine *b, int sb, int64_t n) {
    const dsv4_cache_plan *p = dsv4_cache_get_plan(a->cache);
    int bad = 0;
    /* which table entries hold pages, and how many pages are held */
    for (int64_t pos = 0; pos < n + 2 * p->block; pos++) {
        bad |= (dsv4_cache_win_page(a->cache, sa, pos) < 0) != (dsv4_cache_win_page(b->cache, sb, pos) < 0);
        bad |= (dsv4_cache_blk_page(a->cache, sa, pos) < 0) != (dsv4_cache_blk_page(b->cache, sb, pos) < 0);
    }
    if (bad) fprintf(stderr, "n = %lld: tables map different entries\n", (long long)n);
    for (int l = 0; l < p->n_layers; l++) {
        /* window rows of the live window */
        for (int64_t pos = n - p->win + 1 > 0 ? n - p->win + 1 : 0; pos < n; pos++) {
            const float *x = dsv4_cache_win_row(a->cache, sa, l, pos), *y = dsv4_cache_win_row(b->cache, sb, l, pos);
            if (!x || !y || memcmp(x, y, (size_t)p->win_row_bytes)) {
                if (!bad) fprintf(stderr, "n = %lld: window row %lld of layer %d differs\n", (long long)n, (long long)pos, l);
                bad = 1;
            }
        }
        if (p->cmp_pool[l] < 0) continue;
        const int r = p->ratios[p->cmp_pool[l]], coff = dsv4_cfg_coff(r);
        for (int64_t w = 0; w < n / r; w++) {
            const float *x = dsv4_cache_cmp_row(a->cache, sa, l, w), *y = dsv4_cache_cmp_row(b->cache, sb, l, w);
            int diff = !x || !y || memcmp(x, y, (size_t)p->cmp_row_bytes);
            if (p->idx_slot[l] >= 0) {
                x = dsv4_cache_idx_row(a->cache, sa, l, w);
                y = dsv4_cache_idx_row(b->cache, sb, l, w);
                diff |= !x || !y || memcmp(x, y, (size_t)p->idx_row_bytes);
            }
            if (diff && !bad) fprintf(stderr, "n = %lld: entry %lld of layer %d differs\n", (long long)n, (long long)w, l);
            bad |= diff;
        }
        /* ring rows a later call reads: r*floor(n/r) - (coff-1)*r <= pos < n */
        for (int64_t pos = r * (n / r) - (int64_t)(coff - 1) * r; pos < n; pos++) {
            if (pos < 0) continue;
            for (int ix = 0; ix < (p->idx_ring_off[l] >= 0 ? 2 : 1); ix++) {
                const int64_t width = ix ? 4 * (int64_t)p->dI : 2 * (int64_t)coff * p->hd;
                const float *x = dsv4_cache_ring_row(a->cache, sa, l, ix, pos);
                const float *y = dsv4_cache_ring_row(b->cache, sb, l, ix, pos);
                int diff = !x || !y || memcmp(x, y, (size_t)width * sizeof(float));
                if (diff && !bad) fprintf(stderr, "n = %lld: ring row %lld (indexer %d) of layer %d differs\n", (long long)n, (long long)pos, ix, l);
                bad |= diff;
            }
        }
    }
    return !bad;
}

/* Row r of A's outputs vs B's at the same position, bitwise. */
static int same_rows(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* One run: reject_mode 0 = wrong drafts exactly at positions = -1, 0 mod 4; 1 = also at
 * random (half the other steps). Returns the number of rejections. */
static int run_rollback(int win_block, int reject_mode, int P) {
    dsv4_err err = {0};
    dsv4_engine *a = make_engine(1, win_block), *b = make_engine(1, win_block);
    int sa, so, sb;
    CHECK(dsv4_seq_create(a, &sa, &err) == 0);
    CHECK(dsv4_seq_create(a, &so, &err) == 0);
    CHECK(dsv4_seq_create(b, &sb, &err) == 0);
    float *ha = malloc((size_t)(P + 3) * D * sizeof(float)), *hb = malloc((size_t)(P + 3) * D * sizeof(float));
    float *sta = malloc((size_t)(2 * P + 3) * HC * D * sizeof(float)), *stb = malloc((size_t)(P + 3) * HC * D * sizeof(float));
    float *ma = malloc((size_t)(2 * P + 3) * D * sizeof(float)), *mb = malloc((size_t)(P + 3) * D * sizeof(float));

    /* prefill P in both (A's companion too), MTP rows 0..P-1 */
    dsv4_span pa[2] = {{.seq = sa, .start = 0, .n_tokens = P, .tokens = truth, .n_hidden = 1, .n_streams = P},
                       {.seq = so, .start = 0, .n_tokens = P, .tokens = other, .n_streams = P}};
    dsv4_span pb = pa[0];
    pb.seq = sb;
    CHECK(dsv4_forward(a, pa, 2, ha, sta, &err) == 0);
    CHECK(dsv4_forward(b, &pb, 1, hb, stb, &err) == 0);
    /* the companion's MTP rows keep its window trimmed (the MTP cache lags by at most one) */
    dsv4_mtp_span qa[2] = {{sa, 0, P, truth + 1, sta}, {so, 0, P, other + 1, sta + (size_t)P * HC * D}};
    dsv4_mtp_span qb = {sb, 0, P, truth + 1, stb};
    CHECK(dsv4_mtp_forward(a, qa, 2, ma, &err) == 0);
    CHECK(dsv4_mtp_forward(b, &qb, 1, mb, &err) == 0);
    CHECK(same_rows(ma, mb, (size_t)P * D));

    int rejections = 0, steps = 0, fails = 0;
    int64_t n = P, no = P;
    while (n + 2 <= N && fails < 5) {
        const int64_t d_pos = n + 1;  /* where the draft lands */
        int reject = d_pos % 4 == 3 || d_pos % 4 == 0 || (reject_mode && (rnd() & 1));
        int32_t row[2] = {truth[n], truth[n + 1]};
        if (reject) row[1] = (int32_t)((truth[n + 1] + 1 + rnd() % (unsigned)(V - 1)) % (unsigned)V);
        /* A: verify [x_n, draft] batched with the companion's one-row decode */
        dsv4_span va[2] = {{.seq = sa, .start = n, .n_tokens = 2, .tokens = row, .n_hidden = 2,
                            .n_streams = 2, .speculative = 1},
                           {.seq = so, .start = no, .n_tokens = 1, .tokens = other + no, .n_streams = 1}};
        CHECK_MSG(dsv4_forward(a, va, 2, ha, sta, &err) == 0, "%s", err.msg);
        const int k = reject ? 1 : 2;
        CHECK_MSG(dsv4_seq_commit(a, sa, k, &err) == 0, "%s", err.msg);
        /* B: the committed rows, one plain row at a time */
        for (int j = 0; j < k; j++) {
            dsv4_span vb = {.seq = sb, .start = n + j, .n_tokens = 1, .tokens = truth + n + j,
                            .n_hidden = 1, .n_streams = 1};
            CHECK(dsv4_forward(b, &vb, 1, hb + (size_t)j * D, stb + (size_t)j * HC * D, &err) == 0);
            dsv4_mtp_span mq = {sb, n + j, 1, truth + n + j + 1, stb + (size_t)j * HC * D};
            CHECK(dsv4_mtp_forward(b, &mq, 1, mb + (size_t)j * D, &err) == 0);
        }
        /* A's MTP rows n .. n+k-1 from its verify streams, and the companion's */
        dsv4_mtp_span mq[2] = {{sa, n, k, truth + n + 1, sta}, {so, no, 1, other + no + 1, sta + (size_t)2 * HC * D}};
        CHECK_MSG(dsv4_mtp_forward(a, mq, 2, ma, &err) == 0, "%s", err.msg);
        no++;
        n += k;
        int ok = same_rows(ha, hb, (size_t)k * D) && same_rows(sta, stb, (size_t)k * HC * D) &&
                 same_rows(ma, mb, (size_t)k * D);
        CHECK_MSG(ok, "win_block %d: outputs differ at positions %lld..%lld (draft %s)", win_block,
                  (long long)(n - k), (long long)(n - 1), reject ? "rejected" : "accepted");
        int cache_ok = dsv4_seq_length(a, sa) == n && dsv4_seq_mtp_length(a, sa) == n &&
                       same_cache(a, sa, b, sb, n);
        CHECK_MSG(cache_ok, "win_block %d: cache differs after the step to n = %lld", win_block, (long long)n);
        fails += !ok || !cache_ok;
        rejections += reject;
        steps++;
    }
    CHECK(dsv4_cache_check(a->cache, &err) == 0);
    printf("win_block %d, mode %d: %d steps from %d to %lld, %d rejections\n", win_block,
           reject_mode, steps, P, (long long)n, rejections);
    free(ha); free(hb); free(sta); free(stb); free(ma); free(mb);
    dsv4_engine_free(a);
    dsv4_engine_free(b);
    return rejections;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_speculative MODEL_DIR N_TOKENS [reference]\n");
        return 2;
    }
    dsv4_err err = {0};
    if (dsv4_model_open(argv[1], &M, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    N = atoi(argv[2]);
    REFERENCE = argc > 3 && !strcmp(argv[3], "reference");
    dsv4_model_info info = dsv4_model_get_info(M);
    V = info.vocab_size;
    D = info.hidden_size;
    HC = info.hc_mult;
    if (info.n_mtp < 1 || N < 140) {
        fprintf(stderr, "needs a model with an MTP block and N >= 140\n");
        return 1;
    }
    truth = malloc((size_t)(N + 1) * sizeof *truth);
    other = malloc((size_t)(N + 1) * sizeof *other);
    for (int i = 0; i <= N; i++) {
        truth[i] = (int32_t)(2 + rnd() % (unsigned)(V - 2));
        other[i] = (int32_t)(2 + rnd() % (unsigned)(V - 2));
    }
    test_rules();
    /* B_w = 4: every rejection at -1/0 mod 4 is on a window page's last or first row */
    CHECK(run_rollback(4, 0, 100) > 0);
    CHECK(run_rollback(16, 1, 5) > 0);
    free(truth);
    free(other);
    dsv4_model_close(M);
    return test_report();
}
