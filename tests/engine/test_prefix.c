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
 *   5. bad calls are refused with a message: unaligned length, MTP not caught up.
 *
 *   test_prefix MODEL_DIR [reference]
 */
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
    run_t ra, rb, rc_;
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
    run_init(&rc_, e, sc, mtp, tokens, N);
    run_resume(&rc_, P, h, s);
    run_chunk(&rc_, tail - 5);
    run_chunk(&rc_, 5);
    run_decode(&rc_, dec);
    CHECK_MSG(logs_equal(&base, &rc_.log), "continuation after freeing the others differs");
    dsv4_prefix_stats st = dsv4_prefix_get_stats(e);
    CHECK(st.hits == 2 && st.misses == 1 && st.reused_tokens == 2 * P && st.entries == 2);
    CHECK(st.host_bytes > 0);

    /* a prompt diverging inside the second block hits the first-block entry only */
    int32_t *other = malloc((size_t)N * sizeof *other);
    memcpy(other, tokens, (size_t)N * sizeof *other);
    other[A + 3] = other[A + 3] == 2 ? 3 : 2;
    int sd;
    CHECK(dsv4_prefix_start(e, other, N, &sd, &got, h, s, &err) == 0 && got == A);
    CHECK(dsv4_prefix_start(e, tokens, A - 1, &sd, &got, NULL, NULL, &err) == 0 && got == 0);

    /* 5: refusals */
    CHECK(dsv4_prefix_insert(e, sc, tokens, rc_.last_h, rc_.last_s, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "not a positive multiple of the alignment");
    check_cache(e, "at the end");

    run_free(&ra); run_free(&rb); run_free(&rc_); run_free(&rf);
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

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_prefix MODEL_DIR [reference]\n"); return 2; }
    REFERENCE = argc > 2 && !strcmp(argv[2], "reference");
    dsv4_model *m;
    dsv4_err err = {0};
    if (dsv4_model_open(argv[1], &m, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    dsv4_model_info info = dsv4_model_get_info(m);
    D = info.hidden_size; HC = info.hc_mult; V = info.vocab_size; HAS_MTP = info.n_mtp > 0;
    dsv4_engine *probe = mk_engine(m, 0, 64, 1, 0);
    A = probe ? dsv4_engine_alignment(probe) : 128;
    dsv4_engine_free(probe);
    test_hit_exact(m, 0);
    if (HAS_MTP) test_hit_exact(m, 1);
    test_pressure(m);
    dsv4_model_close(m);
    return test_report();
}
