/* test_kv_fp4.c — FP4 indexer keys (DSV4_KV_IDX_FP4, serving.md §a.1) under fidelity F3.
 *
 *   test_kv_fp4 MODEL_DIR [N] [bounded]
 *
 * F3 rounds every indexer key to e2m1 values times a power-of-two scale per 32, exactly the
 * values FP4 rows hold, so storing the keys as FP4 must change no bit. With F3 on, against
 * the same engine with F32 or BF16 keys:
 *   - prefill P then decode steps (golden_run): final hidden, logits, MTP logits, router
 *     choices and every CSA selection, bitwise;
 *   - a prefix-cache hit (the prompt's aligned prefix restored, the rest computed) and a
 *     KV snapshot file saved and loaded by a second FP4 engine: the hidden of the prompt
 *     in one span with BF16 keys;
 * and the refusals: an engine without F3 refuses FP4 keys, naming F3, and a file written
 * with FP4 keys is refused by an engine that stores BF16 ones, naming both. Chunk schedules
 * and batches under FP4 keys are test_invariants' (fidelity mode, DSV4_TEST_KV=bf16+fp4).
 * "bounded": the model's indexer is wide enough for the bounded selection (approximate
 * scores, then the exact ones near the top-k boundary: attention.h's AUTO, nI x dI >= 1024,
 * which no golden model is), and the test asserts that CSA rows chose among more entries
 * than they keep with it on, so FP4 keys' approximate pass is compared too.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn/attention.h"
#include "cache/cache.h"
#include "engine/engine.h"
#include "golden_run.h"
#include "kernels/cpu.h"
#include "kernels/fidelity.h"
#include "kernels/idx_approx.h"
#include "kernels/kctx.h"
#include "dsv4.h"
#include "model/model.h"
#include "test.h"

/* Rows t in [t0, t1) of one span (x the CSA layers) whose indexer scores: exact and bounded
 * as AUTO chooses (dsv4_attn_indexer_bounded). */
static void rows_by_path(const dsv4_config *c, int t0, int t1, long *exact, long *bounded) {
    dsv4_attn_ctx ctx = {.cfg = c, .indexer_mode = DSV4_INDEXER_AUTO};
    int csa = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) csa += dsv4_cfg_is_csa(c, l);
    *exact = *bounded = 0;
    for (int t = t0; t < t1; t++) {
        const int64_t n_vis = dsv4_attn_visible(4, t);
        if (n_vis > c->index_topk) *(dsv4_attn_indexer_bounded(&ctx, n_vis) ? bounded : exact) += csa;
    }
}

/* The bounded path FP4 keys take at the engine's level: integer block dots from
 * DSV4_IDX_FP4_INT_MIN_SIMD up, unpacked below (the portable level, DSV4_SIMD=portable). */
static int fp4_int_level(const dsv4_engine *e) { return dsv4_kctx_simd(e->k) >= DSV4_IDX_FP4_INT_MIN_SIMD; }

/* The engine's path counts (dsv4_engine_indexer_stats) are exactly the rows [t0, t1)'s: exact
 * ones, and bounded ones on the path of keys_fp4's format (integer block dots or unpacked as the
 * level has them, or F32). */
static void check_paths(const dsv4_engine *e, const dsv4_config *c, int t0, int t1, int keys_fp4, const char *what) {
    long ex, bd;
    rows_by_path(c, t0, t1, &ex, &bd);
    const dsv4_indexer_stats s = dsv4_engine_indexer_stats(e);
    const long bi = keys_fp4 && fp4_int_level(e) ? bd : 0, bu = keys_fp4 && !fp4_int_level(e) ? bd : 0;
    printf("%s: indexer rows exact %lld, bounded f32 %lld, int %lld, unpack %lld (expected %ld exact, %ld bounded)\n",
           what, (long long)s.exact, (long long)s.bounded_f32, (long long)s.bounded_int, (long long)s.bounded_unpack,
           ex, bd);
    CHECK_MSG(s.exact == ex && s.bounded_f32 == (keys_fp4 ? 0 : bd) && s.bounded_int == bi && s.bounded_unpack == bu,
              "%s: the indexer's path counts are not the rows'", what);
}

static int same_run(const golden_out *a, const golden_out *b, int N, int D, int V, int L, int K, int topk, int mtp,
                    const char *what) {
    const int ok_h = !memcmp(a->hidden, b->hidden, sizeof(float) * (size_t)N * D);
    const int ok_l = !memcmp(a->logits, b->logits, sizeof(float) * (size_t)N * V);
    const int ok_m = !mtp || !memcmp(a->mtp, b->mtp, sizeof(float) * (size_t)(N - 1) * V);
    const int ok_r = !memcmp(a->ch.route, b->ch.route, sizeof(int) * (size_t)L * N * K);
    int ok_c = !memcmp(a->ch.csa_n, b->ch.csa_n, sizeof(int) * (size_t)L * N);
    for (size_t i = 0; ok_c && i < (size_t)L * N; i++) /* the first csa_n of each row were reported */
        ok_c = a->ch.csa_n[i] < 0 || !memcmp(a->ch.csa + i * topk, b->ch.csa + i * topk, sizeof(int) * (size_t)a->ch.csa_n[i]);
    CHECK_MSG(ok_h && ok_l && ok_m && ok_r && ok_c,
              "%s: hidden %s, logits %s, MTP logits %s, routes %s, CSA selections %s", what, ok_h ? "same" : "DIFFER",
              ok_l ? "same" : "DIFFER", ok_m ? "same" : "DIFFER", ok_r ? "same" : "DIFFER", ok_c ? "same" : "DIFFER");
    return ok_h && ok_l && ok_m && ok_r && ok_c;
}

/* One engine of kv dtype kv under F3 (1 sequence of up to N + 8 positions); NULL with a
 * message on failure. */
static dsv4_engine *make(const dsv4_model *m, int kv, int N) {
    dsv4_engine_opts eo = {.max_context = N + 8, .max_seqs = 2, .c_max = N, .fidelity = DSV4_FID_F3, .kv_dtype = kv};
    dsv4_engine *e = NULL;
    dsv4_err err = {0};
    if (dsv4_engine_create(m, &eo, &e, &err)) fprintf(stderr, "engine %s: %s\n", dsv4_kv_dtype_name(kv), err.msg);
    return e;
}

/* A prefix-cache hit on e: tokens [0, n0) in a sequence, kept in the prefix cache (and, when
 * path is given, saved as a snapshot file there), the sequence freed; then the prompt of N
 * tokens started from the cache and its rest computed: hidden rows [n0, N) into hid. */
static int hit_run(dsv4_engine *e, const int32_t *tokens, int n0, int N, float *hid, const char *path) {
    const dsv4_model_info mi = dsv4_model_get_info(dsv4_engine_model(e));
    const int D = mi.hidden_size, HC = mi.hc_mult;
    dsv4_err err = {0};
    float *h = malloc(sizeof(float) * (size_t)D), *s = malloc(sizeof(float) * (size_t)HC * D);
    int sa = 0, sb = 0, rc = !h || !s || dsv4_seq_create(e, &sa, &err);
    /* the prefix's last hidden and streams, as a snapshot keeps them */
    dsv4_span sp = {.seq = sa, .start = 0, .n_tokens = n0, .tokens = tokens, .n_hidden = 1, .n_streams = 1};
    if (!rc) rc = dsv4_forward(e, &sp, 1, h, s, &err);
    if (!rc) rc = dsv4_prefix_insert(e, sa, tokens, h, s, &err);
    if (!rc && path) {
        dsv4_snapshot *snap = NULL;
        rc = dsv4_snapshot_take(e, sa, tokens, h, s, &snap, &err);
        if (!rc) rc = dsv4_snapshot_save(e, snap, path, &err);
        if (snap) dsv4_snapshot_free(e, snap);
    }
    if (!rc) rc = dsv4_seq_free(e, sa, &err);
    int64_t got = 0;
    if (!rc) rc = dsv4_prefix_start(e, tokens, N, &sb, &got, NULL, NULL, &err);
    if (!rc && got != n0) {
        snprintf(err.msg, sizeof err.msg, "a hit of %lld tokens, not %d", (long long)got, n0);
        rc = -1;
    }
    dsv4_span rest = {.seq = sb, .start = n0, .n_tokens = N - n0, .tokens = tokens + n0, .n_hidden = N - n0};
    if (!rc) rc = dsv4_forward(e, &rest, 1, hid + (size_t)n0 * D, NULL, &err);
    if (!rc) rc = dsv4_seq_free(e, sb, &err);
    if (rc) fprintf(stderr, "prefix hit: %s\n", err.msg);
    free(h);
    free(s);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_kv_fp4 MODEL_DIR [N]\n"); return 2; }
    const int N = argc > 2 ? atoi(argv[2]) : 200, P = N - 12;
    dsv4_model *m;
    dsv4_err err = {0};
    if (dsv4_model_open(argv[1], &m, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    const dsv4_config *c = &m->cfg;
    const int D = c->hidden_size, V = c->vocab_size, L = c->num_hidden_layers, K = c->num_experts_per_tok;
    const int topk = c->index_topk, mtp = c->num_nextn_predict_layers > 0;
    int32_t *tokens = malloc(sizeof *tokens * (size_t)N);
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < N; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        tokens[i] = (int32_t)(x % (uint64_t)V);
    }

    /* the refusals at create: FP4 keys without F3 (none, or every other item) */
    const unsigned no_f3[2] = {0, DSV4_FID_OFFICIAL & ~DSV4_FID_F3};
    for (int i = 0; i < 2; i++) {
        dsv4_engine_opts eo = {.max_context = 64, .max_seqs = 1, .fidelity = no_f3[i],
                               .kv_dtype = DSV4_KV_BF16 | DSV4_KV_IDX_FP4};
        dsv4_engine *e = NULL;
        CHECK(dsv4_engine_create(m, &eo, &e, &err) == DSV4_ERR_ARG && !e);
        CHECK_ERR(err, DSV4_ERR_ARG, "kv dtype bf16+fp4: FP4 indexer keys need fidelity item F3");
    }
    { /* keys wider than the score kernels' unpacking buffer: refused, not scored wrong */
        const int dI = m->cfg.index_head_dim;
        m->cfg.index_head_dim = 16384;
        dsv4_engine_opts eo = {.max_context = 64, .max_seqs = 1, .fidelity = DSV4_FID_F3,
                               .kv_dtype = DSV4_KV_BF16 | DSV4_KV_IDX_FP4};
        dsv4_engine *e = NULL;
        CHECK(dsv4_engine_create(m, &eo, &e, &err) == DSV4_ERR_ARG && !e);
        CHECK_ERR(err, DSV4_ERR_ARG, "FP4 indexer keys of index_head_dim 16384; the score kernels unpack at most 8192");
        m->cfg.index_head_dim = dI;
    }
    int kv = 0;
    CHECK(dsv4_kv_dtype_parse("fp8+fp4", &kv, &err) == 0 && kv == (DSV4_KV_FP8 | DSV4_KV_IDX_FP4));
    CHECK(!strcmp(dsv4_kv_dtype_name(kv), "fp8+fp4"));
    CHECK(dsv4_kv_dtype_parse("fp4", &kv, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "kv dtype 'fp4': must be f32, bf16 or fp8, optionally +fp4");

    /* prefill P, then decode: FP4 keys against F32 and BF16 ones, bit for bit */
    golden_out o[4];
    memset(o, 0, sizeof o);
    const int kinds[4] = {DSV4_KV_F32, DSV4_KV_F32 | DSV4_KV_IDX_FP4, DSV4_KV_BF16, DSV4_KV_BF16 | DSV4_KV_IDX_FP4};
    for (int i = 0; i < 4; i++) {
        dsv4_engine_opts eo = {.fidelity = DSV4_FID_F3, .kv_dtype = kinds[i]};
        CHECK(golden_run(m, eo, tokens, N, P, NULL, NULL, dsv4_kv_dtype_name(kinds[i]), &o[i]) == 0);
    }
    long sel = 0;
    for (size_t i = 0; i < (size_t)L * N; i++) sel += o[1].ch.csa_n[i] == topk;
    printf("%d tokens (prefill %d): %ld (layer, token) CSA selections of %d entries\n", N, P, sel, topk);
    CHECK_MSG(sel > 0, "no CSA row chose among more than topk entries: the keys were never read");
    if (argc > 3 && !strcmp(argv[3], "bounded")) { /* AUTO's choice for the rows that chose */
        dsv4_attn_ctx ctx = {.cfg = c, .indexer_mode = DSV4_INDEXER_AUTO};
        long bounded = 0;
        for (int t = 0; t < N; t++) { /* position t sees (t + 1) / 4 entries of a CSA layer */
            const int64_t n_vis = dsv4_attn_visible(4, t);
            if (n_vis > topk && dsv4_attn_indexer_bounded(&ctx, n_vis)) bounded++;
        }
        printf("indexer %d x %d: %ld positions select with the bounded scores\n", c->index_n_heads,
               c->index_head_dim, bounded);
        CHECK_MSG(bounded > 0, "the bounded selection never ran: nI x dI = %d < %d?",
                  c->index_n_heads * c->index_head_dim, DSV4_INDEXER_BOUNDED_MIN_MACS);
        /* the integer block scores take this shape's F3 queries (dsv4_fid_index_row, the engine's
         * rounding of qI): the approximate pass above was theirs, not the unpacked keys' */
        const int nI = c->index_n_heads, dI = c->index_head_dim;
        float *q = malloc(sizeof(float) * (size_t)nI * dI), *w = malloc(sizeof(float) * (size_t)nI), sc, kn;
        uint8_t key[256] = {0};
        const void *keys[1] = {key};
        const int64_t lim = 1;
        for (int i = 0; i < nI * dI; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            q[i] = (float)(x % 2001) / 1000.0f - 1.0f;
        }
        for (int h = 0; h < nI; h++) dsv4_fid_index_row(q + (size_t)h * dI, dI), w[h] = 1.0f;
        const int simd = dsv4_cpu_simd() < dsv4_build_simd() ? dsv4_cpu_simd() : dsv4_build_simd();
        const int took = dI / 2 + dI / 32 <= (int)sizeof key &&
                         dsv4_idx_approx_fp4_int(simd, q, (size_t)nI * dI, w, (size_t)nI, 1, &lim, keys, 0, 1, nI, dI,
                                                 &sc, &kn, 1);
        CHECK_MSG(took, "the integer FP4 scores refuse F3's queries of this shape (%d x %d): keys unpacked", nI, dI);
        free(q);
        free(w);
    }
    same_run(&o[1], &o[0], N, D, V, L, K, topk, mtp, "f32+fp4 against f32 (F3)");
    same_run(&o[3], &o[2], N, D, V, L, K, topk, mtp, "bf16+fp4 against bf16 (F3)");

    /* a prefix-cache hit on FP4 and on BF16 keys, and a snapshot file with FP4 keys in a
     * fresh engine, against the prompt in one span with BF16 keys */
    dsv4_engine *e = make(m, DSV4_KV_BF16 | DSV4_KV_IDX_FP4, N), *f = make(m, DSV4_KV_BF16 | DSV4_KV_IDX_FP4, N);
    dsv4_engine *g = make(m, DSV4_KV_BF16, N);
    CHECK(e && f && g);
    const int A = e ? dsv4_engine_alignment(e) : N, n0 = (P / A) * A;
    CHECK_MSG(n0 > 0, "N = %d too short for a prefix of the alignment %d", N, A);
    char path[256];
    snprintf(path, sizeof path, "%s/test_kv_fp4_%d.kv", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    float *ref = malloc(sizeof(float) * (size_t)N * D), *hit[2] = {malloc(sizeof(float) * (size_t)N * D),
                                                                   malloc(sizeof(float) * (size_t)N * D)};
    if (e && f && g && n0 > 0) {
        int sr = 0;
        CHECK(dsv4_seq_create(g, &sr, &err) == 0);
        dsv4_span sp = {.seq = sr, .start = 0, .n_tokens = N, .tokens = tokens, .n_hidden = N};
        CHECK_MSG(dsv4_forward(g, &sp, 1, ref, NULL, &err) == 0, "%s", err.msg);
        check_paths(g, c, 0, N, 0, "BF16 keys, one span");
        CHECK(dsv4_seq_free(g, sr, &err) == 0);
        CHECK(hit_run(e, tokens, n0, N, hit[0], path) == 0);
        CHECK(hit_run(g, tokens, n0, N, hit[1], NULL) == 0);
        for (int k = 0; k < 2; k++)
            CHECK_MSG(!memcmp(hit[k] + (size_t)n0 * D, ref + (size_t)n0 * D, sizeof(float) * (size_t)(N - n0) * D),
                      "prefix-cache hit at %d of %d (%s keys): hidden differs from the one span's (BF16 keys)", n0, N,
                      k ? "BF16" : "FP4");
        /* the file: refused by BF16 keys, restored by FP4 ones */
        dsv4_snapshot *t = NULL;
        int sc = 0;
        CHECK(dsv4_snapshot_load(g, path, &t, &err) == DSV4_ERR_FORMAT && !t);
        CHECK_ERR(err, DSV4_ERR_FORMAT, "stores BF16 rows and FP4 indexer keys; this engine stores BF16 and BF16");
        CHECK_MSG(dsv4_snapshot_load(f, path, &t, &err) == 0, "%s", err.msg);
        CHECK_MSG(t && dsv4_snapshot_restore(f, t, &sc, NULL, NULL, &err) == 0, "%s", err.msg);
        dsv4_span rest = {.seq = sc, .start = n0, .n_tokens = N - n0, .tokens = tokens + n0, .n_hidden = N - n0};
        CHECK_MSG(dsv4_forward(f, &rest, 1, hit[0] + (size_t)n0 * D, NULL, &err) == 0, "%s", err.msg);
        /* and a decode step: its one row scores its entries in ranges of 32 (the attend phase's
         * smallest), more than one where it sees 33 or more: counted once */
        int32_t tok1 = tokens[0];
        dsv4_span one = {.seq = sc, .start = N, .n_tokens = 1, .tokens = &tok1, .n_hidden = 1};
        CHECK_MSG(dsv4_forward(f, &one, 1, hit[1], NULL, &err) == 0, "%s", err.msg);
        check_paths(f, c, n0, N + 1, 1, "FP4 keys, after the restored prefix and a decode step");
        CHECK_MSG(!memcmp(hit[0] + (size_t)n0 * D, ref + (size_t)n0 * D, sizeof(float) * (size_t)(N - n0) * D),
                  "snapshot file restored at %d of %d (FP4 keys): hidden differs from the one span's (BF16 keys)", n0,
                  N);
        if (t) dsv4_snapshot_free(f, t);
        printf("prefix hit and snapshot file at %d of %d tokens (alignment %d)\n", n0, N, A);
    }
    unlink(path);
    { /* a sequence filled to N without its prefill (dsv4_seq_fill_synthetic, dsv4 bench
       * --fill-contexts): its last window row and every entry's key hold values, two decode
       * steps run on it and score every entry (the path counts); the refusals */
        dsv4_engine *h = make(m, DSV4_KV_BF16 | DSV4_KV_IDX_FP4, N);
        int sq = 0, csa = -1;
        for (int l = 0; l < L && csa < 0; l++) csa = dsv4_cfg_is_csa(c, l) ? l : -1;
        CHECK(h && csa >= 0 && dsv4_seq_create(h, &sq, &err) == 0);
        if (h && csa >= 0) {
            CHECK_MSG(dsv4_seq_fill_synthetic(h, sq, N, 7, &err) == 0, "%s", err.msg);
            CHECK(dsv4_seq_length(h, sq) == N);
            const int64_t kb = dsv4_cache_get_plan(h->cache)->idx_row_bytes;
            int filled = 1;
            for (int64_t k = 0; k < dsv4_attn_visible(4, N - 1); k++) {
                const uint8_t *key = dsv4_cache_idx_row(h->cache, sq, csa, k);
                int any = 0;
                for (int64_t i = 0; key && i < kb; i++) any |= key[i];
                filled &= key && any;
            }
            const uint8_t *wr = dsv4_cache_win_row(h->cache, sq, csa, N - 1);
            CHECK_MSG(filled && wr && (wr[0] | wr[1] | wr[2] | wr[3]), "fill: a key or the last window row is empty");
            int32_t tk[2] = {tokens[0], tokens[1]};
            for (int k = 0; k < 2; k++) {
                dsv4_span one = {.seq = sq, .start = N + k, .n_tokens = 1, .tokens = tk + k, .n_hidden = 1};
                CHECK_MSG(dsv4_forward(h, &one, 1, hit[1], NULL, &err) == 0, "%s", err.msg);
            }
            long ex, bd;
            rows_by_path(c, N, N + 2, &ex, &bd);
            const dsv4_indexer_stats is = dsv4_engine_indexer_stats(h);
            const long bi = fp4_int_level(h) ? bd : 0, bu = fp4_int_level(h) ? 0 : bd;
            CHECK_MSG(is.exact == ex && is.bounded_int == bi && is.bounded_f32 == 0 && is.bounded_unpack == bu,
                      "fill: the decode steps' indexer rows %lld exact, %lld int, %lld unpacked, not %ld, %ld, %ld",
                      (long long)is.exact, (long long)is.bounded_int, (long long)is.bounded_unpack, ex, bi, bu);
            CHECK(dsv4_seq_fill_synthetic(h, sq, N, 7, &err) == DSV4_ERR_ARG); /* not empty */
            CHECK_ERR(err, DSV4_ERR_ARG, "fill: sequence 0 is not empty");
            CHECK(dsv4_seq_free(h, sq, &err) == 0 && dsv4_seq_create(h, &sq, &err) == 0);
            CHECK(dsv4_seq_fill_synthetic(h, sq, N + 8, 7, &err) == DSV4_ERR_ARG); /* past max_context */
            CHECK_ERR(err, DSV4_ERR_ARG, "outside [1, max_context");
            CHECK(dsv4_seq_fill_synthetic(h, sq, 0, 7, &err) == DSV4_ERR_ARG && dsv4_seq_length(h, sq) == 0);
            CHECK(dsv4_seq_fill_synthetic(h, sq, -1, 7, &err) == DSV4_ERR_ARG && dsv4_seq_length(h, sq) == 0);
            CHECK(dsv4_seq_fill_synthetic(h, sq + 1, 5, 7, &err) == DSV4_ERR_ARG); /* not live */
        }
        dsv4_engine_free(h);
    }
    dsv4_engine_free(e);
    dsv4_engine_free(f);
    dsv4_engine_free(g);
    free(ref); free(hit[0]); free(hit[1]);
    for (int i = 0; i < 4; i++) golden_out_free(&o[i]);
    free(tokens);
    dsv4_model_close(m);
    return test_report();
}
