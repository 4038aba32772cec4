/* test_prefix.c — forks, snapshots and the prefix cache (spec/serving.md §g, issue 11):
 *   1. a continuation after a prefix-cache hit equals the uninterrupted run, bitwise
 *      (hidden, streams, MTP hidden, logits and greedy tokens), MTP off and on;
 *   2. sharing is real: the hit's block table names the same physical blocks as the
 *      sequence the prefix came from for every closed block, and freeing either leaves the
 *      other's results unchanged (the pools run in sentinel mode: a freed block is filled
 *      with NaNs, so a block freed while still in use would show);
 *   3. a fork at an unaligned length (mid-window, open block) continues like its source;
 *   4. eviction under pressure: a pool sized for one full sequence serves a stream of
 *      requests with distinct prefixes, each inserting snapshots, without a failed call;
 *   5. bad calls are refused with a message: unaligned length, MTP not caught up, a
 *      follower's mirror of a restore on a rank that holds caches;
 *   6. dsv4_spec_resume: MTP speculative decoding picks up a restored sequence exactly.
 *
 *   test_prefix MODEL_DIR [reference]
 */
#include "dsv4_text.h"
#include "prefix_run.h"

/* 1, 2, 3: prefix of 2A tokens, a tail of `tail` tokens, then `dec` decode steps. */
static void test_hit_exact(const dsv4_model *m, int mtp) {
    const int P = 2 * A, tail = 37, dec = 5;
    const int64_t N = P + tail;
    int32_t *tokens = malloc((size_t)N * sizeof *tokens);
    for (int64_t i = 0; i < N; i++) tokens[i] = rnd_token();
    dsv4_engine *e = mk_engine(m, mtp, N + 64, 4, 0);
    if (!e) { free(tokens); return; }
    dsv4_err err = {0};

    /* the uninterrupted run, which leaves its prefix in the cache on the way */
    int sa, sb, sc;
    int64_t got;
    CHECK(dsv4_prefix_start(e, tokens, N, &sa, &got, NULL, NULL, &err) == 0 && got == 0);
    run_t ra, rb;
    run_init(&ra, e, sa, mtp, tokens, N);
    run_chunk(&ra, A);
    CHECK_MSG(dsv4_prefix_insert(e, sa, tokens, ra.last_h, ra.last_s, &err) == 0, "%s", err.msg);
    run_chunk(&ra, A);
    CHECK_MSG(dsv4_prefix_insert(e, sa, tokens, ra.last_h, ra.last_s, &err) == 0, "%s", err.msg);
    float *h_at_p = malloc((size_t)D * sizeof(float)), *s_at_p = malloc((size_t)HC * D * sizeof(float));
    memcpy(h_at_p, ra.last_h, (size_t)D * sizeof(float));
    memcpy(s_at_p, ra.last_s, (size_t)HC * D * sizeof(float));
    const size_t mark = ra.log.n;  /* the continuation starts here */
    run_chunk(&ra, tail - 5);      /* the log's layout follows the chunks: same ones below */
    run_chunk(&ra, 5);
    run_decode(&ra, dec);
    log_t base = {0};
    log_add(&base, ra.log.buf + mark, ra.log.n - mark);
    check_cache(e, "after the uninterrupted run");

    /* a hit: the longest cached prefix (2A, not A), its last hidden and streams */
    float *h = malloc((size_t)D * sizeof(float)), *s = malloc((size_t)HC * D * sizeof(float));
    CHECK_MSG(dsv4_prefix_start(e, tokens, N, &sb, &got, h, s, &err) == 0, "%s", err.msg);
    CHECK(got == P);
    CHECK(dsv4_seq_length(e, sb) == P && dsv4_seq_mtp_length(e, sb) == (mtp ? P - 1 : 0));
    CHECK(!memcmp(h, h_at_p, (size_t)D * sizeof(float)) && !memcmp(s, s_at_p, (size_t)HC * D * sizeof(float)));
    /* sharing: every closed block is the same physical block in both tables */
    const dsv4_cache_plan *pl = dsv4_cache_get_plan(e->cache);
    const int closed = (int)((mtp && pl->ring_off[pl->n_main_layers] >= 0 ? P - 1 : P) / pl->block);
    /* (an MTP compressor has consumed only P - 1 positions: its last block stays open) */
    int same = 0, shared_refs = 1;
    for (int b = 0; b < closed; b++) {
        const int pa = dsv4_cache_blk_page(e->cache, sa, (int64_t)b * pl->block);
        same += pa >= 0 && pa == dsv4_cache_blk_page(e->cache, sb, (int64_t)b * pl->block);
        shared_refs &= dsv4_cache_blk_refs(e->cache, pa) >= 3;  /* sa, sb, the cached 2A entry */
    }
    CHECK_MSG(closed >= 1 && same == closed && shared_refs, "closed %d, same %d", closed, same);
    /* the open block (MTP compressor still inside it) is a private copy */
    if (closed * pl->block < P)
        CHECK(dsv4_cache_blk_page(e->cache, sa, P - 1) != dsv4_cache_blk_page(e->cache, sb, P - 1));
    check_cache(e, "after the hit");

    /* free the source: the hit's continuation is still the uninterrupted one */
    CHECK(dsv4_seq_free(e, sa, &err) == 0);
    run_init(&rb, e, sb, mtp, tokens, N);
    run_resume(&rb, P, h, s);
    run_chunk(&rb, tail - 5);
    /* 3: a fork mid-window (unaligned length, open block) continues like its source */
    int sf;
    CHECK_MSG(dsv4_seq_fork(e, sb, &sf, &err) == 0, "fork: %s", err.msg);
    run_t rf;
    run_init(&rf, e, sf, mtp, rb.tok, N);
    run_resume(&rf, rb.n, rb.last_h, rb.last_s);
    log_add(&rf.log, rb.log.buf, rb.log.n);
    run_chunk(&rb, 5);
    run_decode(&rb, dec);
    CHECK_MSG(logs_equal(&base, &rb.log), "continuation after a hit differs (%zu vs %zu floats)",
              base.n, rb.log.n);
    run_chunk(&rf, 5);
    run_decode(&rf, dec);
    CHECK_MSG(logs_equal(&base, &rf.log), "continuation of a fork differs");
    CHECK(!memcmp(rb.tok, ra.tok, (size_t)(N + dec) * sizeof *ra.tok));

    /* a second hit, after the other users of the blocks are gone */
    CHECK(dsv4_seq_free(e, sb, &err) == 0 && dsv4_seq_free(e, sf, &err) == 0);
    check_cache(e, "after freeing");
    CHECK(dsv4_prefix_start(e, tokens, N, &sc, &got, h, s, &err) == 0 && got == P);
    const int chunks[2] = {tail - 5, 5};
    CHECK_MSG(continues_like(e, sc, mtp, tokens, N, P, h, s, chunks, 2, dec, &base, ra.tok),
              "continuation after freeing the others differs");
    dsv4_prefix_stats st = dsv4_prefix_get_stats(e);
    CHECK(st.hits == 2 && st.misses == 1 && st.reused_tokens == 2 * P && st.entries == 2);
    CHECK(st.host_bytes > 0);
    /* the entries' keys: as many as entries, at most cap written, distinct */
    uint64_t keys[3] = {0, 0, 7};
    CHECK(dsv4_prefix_keys(e, keys, 1) == 2 && keys[0] && !keys[1]);
    CHECK(dsv4_prefix_keys(e, keys, 3) == 2 && keys[1] && keys[0] != keys[1] && keys[2] == 7);

    /* a prompt diverging inside the second block hits the first-block entry only */
    int32_t *other = malloc((size_t)N * sizeof *other);
    memcpy(other, tokens, (size_t)N * sizeof *other);
    other[A + 3] = other[A + 3] == 2 ? 3 : 2;
    int sd;
    CHECK(dsv4_prefix_start(e, other, N, &sd, &got, h, s, &err) == 0 && got == A);
    CHECK(dsv4_prefix_start(e, tokens, A - 1, &sd, &got, NULL, NULL, &err) == 0 && got == 0);

    /* 5: refusals */
    CHECK(dsv4_prefix_insert(e, sc, tokens, h, s, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "not a positive multiple of the alignment");
    /* a rank that holds caches restores snapshots: mirroring is a follower's (step_msg.h) */
    int sm = 0;
    CHECK(dsv4_seq_mirror(e, A, &sm, &err) == DSV4_ERR_UNSUPPORTED && sm == -1);
    CHECK_ERR(err, DSV4_ERR_UNSUPPORTED, "only on a follower rank");
    check_cache(e, "at the end");

    run_free(&ra); run_free(&rb); run_free(&rf);
    free(base.buf); free(h); free(s); free(h_at_p); free(s_at_p); free(other); free(tokens);
    dsv4_engine_free(e);
}

/* 4: a pool with blocks for one full sequence; every request has a new prefix of 2A tokens,
 * inserts it at A and 2A and continues past it. Evictions make room; nothing fails. */
static void test_pressure(const dsv4_model *m) {
    const int64_t ctx = 3 * A + 16;
    dsv4_engine *probe = mk_engine(m, 0, ctx, 1, 0);
    if (!probe) return;
    const dsv4_cache_plan *pl = dsv4_cache_get_plan(probe->cache);
    const int64_t blocks = (ctx + pl->block - 1) / pl->block + 1;  /* T_cap >= max_context */
    const uint64_t budget = (uint64_t)(pl->seq_fixed_bytes + blocks * pl->block_bytes);
    dsv4_engine_free(probe);
    dsv4_engine *e = mk_engine(m, 0, ctx, 1, budget);
    if (!e) return;
    dsv4_err err = {0};
    int failed = 0;
    int32_t *tokens = malloc((size_t)ctx * sizeof *tokens);
    for (int req = 0; req < 6; req++) {
        for (int64_t i = 0; i < ctx; i++) tokens[i] = rnd_token();
        int sq;
        int64_t got;
        if (dsv4_prefix_start(e, tokens, ctx, &sq, &got, NULL, NULL, &err)) { failed++; continue; }
        run_t r;
        run_init(&r, e, sq, 0, tokens, ctx);
        failed += run_chunk(&r, A) != 0;
        failed += dsv4_prefix_insert(e, sq, tokens, r.last_h, r.last_s, &err) != 0;
        failed += run_chunk(&r, A) != 0;
        failed += dsv4_prefix_insert(e, sq, tokens, r.last_h, r.last_s, &err) != 0;
        failed += run_chunk(&r, (int)(ctx - 2 * A)) != 0;  /* to max_context: every block */
        failed += dsv4_seq_free(e, sq, &err) != 0;
        run_free(&r);
        check_cache(e, "pressure");
    }
    dsv4_prefix_stats st = dsv4_prefix_get_stats(e);
    CHECK_MSG(failed == 0, "%d failed calls: %s", failed, err.msg);
    CHECK_MSG(st.evictions > 0 && st.inserts == 12, "evictions %lld, inserts %lld",
              (long long)st.evictions, (long long)st.inserts);
    /* the most recent prefix survived and is a hit */
    int sq;
    int64_t got;
    CHECK(dsv4_prefix_start(e, tokens, ctx, &sq, &got, NULL, NULL, &err) == 0 && got == 2 * A);
    dsv4_engine_free(e);
    free(tokens);
}

/* Runs tokens [n, n + c) of seq (every row's streams reported to sp) and then the MTP rows
 * sp hands out; mh (rows, D) receives their MTP hidden states, *ms_out the span's start and
 * first next-token, first_s (hc, D) its first streams row. Returns the MTP rows. */
static int spec_chunk(dsv4_engine *e, dsv4_spec *sp, int seq, const int32_t *tokens, int64_t n,
                      int c, float *mh, dsv4_mtp_span *ms_out, float *first_s) {
    dsv4_err err = {0};
    float *h = malloc((size_t)D * sizeof(float));            /* (1, D) */
    float *st = malloc((size_t)c * HC * D * sizeof(float));  /* (c, hc, D) */
    dsv4_span span = {.seq = seq, .start = n, .n_tokens = c, .tokens = tokens + n, .n_hidden = 1,
                      .n_streams = c};
    CHECK_MSG(dsv4_forward(e, &span, 1, h, st, &err) == 0, "forward: %s", err.msg);
    CHECK_MSG(dsv4_spec_fed(sp, tokens + n, c, st, &err) == 0, "fed: %s", err.msg);
    dsv4_mtp_span ms;
    int drafts;
    dsv4_spec_mtp_span(sp, &ms, &drafts);
    *ms_out = ms;  /* its pointers are only valid until mtp_done */
    if (ms.n) memcpy(first_s, ms.streams, (size_t)HC * D * sizeof(float));
    if (ms.n) CHECK_MSG(dsv4_mtp_forward(e, &ms, 1, mh, &err) == 0, "mtp: %s", err.msg);
    dsv4_spec_mtp_done(sp, -1);
    free(h); free(st);
    return ms.n;
}

/* 6: dsv4_spec_resume — an MTP spec on a sequence restored from the prefix cache hands out
 * the MTP rows an uninterrupted one does (row n - 1 first, from the restored streams), and
 * they give bitwise the same MTP hidden states. */
static void test_spec_resume(const dsv4_model *m) {
    const int P = A, tail = 9;
    const int64_t N = P + tail;
    int32_t *tokens = malloc((size_t)N * sizeof *tokens);
    for (int64_t i = 0; i < N; i++) tokens[i] = rnd_token();
    dsv4_engine *e = mk_engine(m, 1, N + 8, 3, 0);
    if (!e) { free(tokens); return; }
    dsv4_err err = {0};
    float *ha = malloc((size_t)N * D * sizeof(float)), *hb = malloc((size_t)N * D * sizeof(float));
    float *last_h = malloc((size_t)D * sizeof(float)), *last_s = malloc((size_t)HC * D * sizeof(float));
    float *first_s = malloc((size_t)HC * D * sizeof(float));

    /* uninterrupted: [0, P) (then kept in the cache at m = P - 1), then the tail */
    int sa, sb;
    dsv4_spec *spa = NULL, *spb = NULL;
    CHECK(dsv4_seq_create(e, &sa, &err) == 0 && dsv4_spec_create(e, sa, &spa, &err) == 0);
    {
        float *st = malloc((size_t)P * HC * D * sizeof(float));
        float *h = malloc((size_t)D * sizeof(float));
        dsv4_span span = {.seq = sa, .start = 0, .n_tokens = P, .tokens = tokens, .n_hidden = 1, .n_streams = P};
        CHECK(dsv4_forward(e, &span, 1, h, st, &err) == 0);
        CHECK(dsv4_spec_fed(spa, tokens, P, st, &err) == 0);
        dsv4_mtp_span ms;
        int drafts;
        dsv4_spec_mtp_span(spa, &ms, &drafts);
        CHECK(ms.n == P - 1 && dsv4_mtp_forward(e, &ms, 1, ha, &err) == 0);
        dsv4_spec_mtp_done(spa, -1);
        CHECK_MSG(dsv4_prefix_insert(e, sa, tokens, h, st + (size_t)(P - 1) * HC * D, &err) == 0, "%s", err.msg);
        free(st); free(h);
    }
    dsv4_mtp_span msa, msb;
    const int ra = spec_chunk(e, spa, sa, tokens, P, tail, ha, &msa, first_s);

    /* restored at P: a fresh spec refuses it (m = P - 1), a resumed one goes on */
    int64_t got;
    CHECK(dsv4_prefix_start(e, tokens, N, &sb, &got, last_h, last_s, &err) == 0 && got == P);
    CHECK(dsv4_spec_create(e, sb, &spb, &err) == DSV4_ERR_STATE && !spb);
    CHECK_MSG(dsv4_spec_resume(e, sb, last_s, &spb, &err) == 0, "resume: %s", err.msg);
    const int rb = spb ? spec_chunk(e, spb, sb, tokens, P, tail, hb, &msb, first_s) : 0;
    CHECK_MSG(ra == tail && rb == tail, "MTP rows %d and %d, expected %d", ra, rb, tail);
    if (rb == tail) {
        CHECK(msa.start == P - 1 && msb.start == P - 1);
        CHECK(!memcmp(first_s, last_s, (size_t)HC * D * sizeof(float)));
        CHECK_MSG(!memcmp(ha, hb, (size_t)tail * D * sizeof(float)), "MTP hidden after a resume differs");
    }
    /* refusals: an empty sequence, NULL streams */
    int sc;
    dsv4_spec *spc = NULL;
    CHECK(dsv4_seq_create(e, &sc, &err) == 0);
    CHECK(dsv4_spec_resume(e, sc, last_s, &spc, &err) == DSV4_ERR_ARG && !spc);
    CHECK(dsv4_spec_resume(e, sb, NULL, &spc, &err) == DSV4_ERR_ARG && !spc);
    dsv4_spec_free(spa); dsv4_spec_free(spb);
    free(ha); free(hb); free(last_h); free(last_s); free(first_s); free(tokens);
    dsv4_engine_free(e);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_prefix MODEL_DIR [reference]\n"); return 2; }
    dsv4_model *m = prefix_run_open(argv[1], argc > 2 && !strcmp(argv[2], "reference"));
    if (!m) return 1;
    test_hit_exact(m, 0);
    if (HAS_MTP) test_hit_exact(m, 1);
    test_pressure(m);
    if (HAS_MTP) test_spec_resume(m);
    dsv4_model_close(m);
    return test_report();
}
