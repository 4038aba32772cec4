/* test_engine_api.c — the engine API's contract (spec/serving.md §a.3, §b):
 *   - every validation rule rejects bad input with DSV4_ERR_ARG/STATE and changes nothing
 *     (the sequence then runs exactly as in a fresh engine);
 *   - running out of pages fails that call with DSV4_ERR_CACHE_FULL naming the pool, and
 *     leaves the other sequences intact; out of slots likewise;
 *   - freeing twice or using a freed handle is an error, not a crash;
 *   - create reports the progress of its W8A8 weight preparation, and only of that;
 *   - the NUMA option parses, resolves to what the machine allows and changes no result;
 *   - the head's logits and greedy ids do not depend on the hidden rows' alignment (up to
 *     DSV4_LMHEAD_ROWS rows off a cache line go through an aligned copy in scratch).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "dsv4.h"
#include "engine/engine.h"
#include "model/model.h"
#include "test.h"
#include "util/numa.h"

static dsv4_model *M;
static int V, D;
static int32_t toks[512];

/* Hidden state of the last row after prefilling toks[0, n) in a fresh engine. */
static void fresh_hidden(int n, float *out) {
    dsv4_engine_opts eo = {.max_context = 512, .max_seqs = 1};
    dsv4_engine *e;
    dsv4_err err = {0};
    int s;
    CHECK(dsv4_engine_create(M, &eo, &e, &err) == 0);
    CHECK(dsv4_seq_create(e, &s, &err) == 0);
    dsv4_span sp = {.seq = s, .start = 0, .n_tokens = n, .tokens = toks, .n_hidden = 1};
    CHECK(dsv4_forward(e, &sp, 1, out, NULL, &err) == 0);
    dsv4_engine_free(e);
}

static void test_validation(void) {
    dsv4_engine_opts eo = {.max_context = 256, .max_seqs = 2, .c_max = 64};
    dsv4_engine *e;
    dsv4_err err = {0};
    CHECK(dsv4_engine_create(M, &eo, &e, &err) == 0);
    int a, b;
    CHECK(dsv4_seq_create(e, &a, &err) == 0);
    CHECK(dsv4_seq_create(e, &b, &err) == 0);
    int c;
    CHECK(dsv4_seq_create(e, &c, &err) == DSV4_ERR_CACHE_FULL);
    CHECK_ERR(err, DSV4_ERR_CACHE_FULL, "no free sequence slot");

    float *h = malloc((size_t)64 * D * sizeof(float));
    dsv4_span ok = {.seq = a, .start = 0, .n_tokens = 10, .tokens = toks, .n_hidden = 1};
    CHECK(dsv4_forward(e, &ok, 1, h, NULL, &err) == 0);
    CHECK(dsv4_seq_length(e, a) == 10);

    dsv4_span bad;
    bad = ok; bad.start = 0; /* start != n */
    CHECK(dsv4_forward(e, &bad, 1, h, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "start 0 != sequence length 10");
    bad = ok; bad.start = 10; bad.seq = 7;
    CHECK(dsv4_forward(e, &bad, 1, h, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "not live");
    int32_t bad_tok[2] = {5, V};
    bad = ok; bad.start = 10; bad.tokens = bad_tok; bad.n_tokens = 2;
    CHECK(dsv4_forward(e, &bad, 1, h, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "outside [0,");
    bad = ok; bad.start = 10; bad.n_tokens = 0;
    CHECK(dsv4_forward(e, &bad, 1, h, NULL, &err) == DSV4_ERR_ARG);
    bad = ok; bad.start = 10; bad.n_tokens = 65; /* > c_max */
    CHECK(dsv4_forward(e, &bad, 1, h, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "c_max = 64");
    int rows[1] = {10};
    bad = ok; bad.start = 10; bad.hidden_rows = rows;
    CHECK(dsv4_forward(e, &bad, 1, h, NULL, &err) == DSV4_ERR_ARG);
    bad = ok; bad.start = 10; bad.n_hidden = 1;
    CHECK(dsv4_forward(e, &bad, 1, NULL, NULL, &err) == DSV4_ERR_ARG); /* no output buffer */
    dsv4_span two[2] = {ok, ok};
    two[0].start = two[1].start = 10;
    CHECK(dsv4_forward(e, two, 2, h, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "appears in spans");
    /* the last good span is valid but a later one in the same call is not: nothing runs */
    dsv4_span mixed[2] = {ok, ok};
    mixed[0].start = 10; mixed[0].tokens = toks + 10;
    mixed[1].seq = b; mixed[1].start = 3;
    CHECK(dsv4_forward(e, mixed, 2, h, NULL, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_seq_length(e, a) == 10 && dsv4_seq_length(e, b) == 0);
    /* MTP on an engine without MTP */
    dsv4_mtp_span ms = {a, 0, 1, toks + 1, h};
    CHECK(dsv4_mtp_forward(e, &ms, 1, h, &err) == DSV4_ERR_STATE);

    /* after all those refusals sequence a continues exactly like a fresh prefill */
    ok.start = 10; ok.tokens = toks + 10; ok.n_tokens = 30;
    CHECK(dsv4_forward(e, &ok, 1, h, NULL, &err) == 0);
    float *ref = malloc((size_t)D * sizeof(float));
    fresh_hidden(40, ref);
    CHECK(memcmp(h, ref, (size_t)D * sizeof(float)) == 0);

    /* handles */
    CHECK(dsv4_seq_free(e, b, &err) == 0);
    CHECK(dsv4_seq_free(e, b, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_seq_length(e, b) == -1);
    dsv4_span freed = {.seq = b, .start = 0, .n_tokens = 1, .tokens = toks};
    CHECK(dsv4_forward(e, &freed, 1, NULL, NULL, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_seq_free(e, -1, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_lm_head(e, NULL, 1, NULL, &err) == DSV4_ERR_ARG);
    free(ref);
    free(h);
    dsv4_engine_free(e);
}

static void test_exhaustion(void) {
    /* a budget that holds 5 compressed blocks for 3 sequences of up to 256 positions, in the
     * default KV storage (the engine's own cache options) */
    dsv4_engine_opts eo = {.max_context = 256, .max_seqs = 3, .c_max = 256};
    dsv4_cache_opts co;
    dsv4_engine_cache_opts(&eo, &co);
    dsv4_cache_plan plan;
    dsv4_err err = {0};
    CHECK(dsv4_cache_plan_make(&M->cfg, &co, &plan, &err) == 0);
    eo.cache_bytes = (uint64_t)(3 * plan.seq_fixed_bytes + 5 * plan.block_bytes);
    dsv4_engine *e;
    CHECK(dsv4_engine_create(M, &eo, &e, &err) == 0);
    int s[3];
    for (int i = 0; i < 3; i++) CHECK(dsv4_seq_create(e, &s[i], &err) == 0);
    float *h = malloc((size_t)D * sizeof(float));
    dsv4_span sp = {.seq = s[0], .start = 0, .n_tokens = 200, .tokens = toks, .n_hidden = 1};
    CHECK(dsv4_forward(e, &sp, 1, h, NULL, &err) == 0); /* 2 blocks */
    sp.seq = s[1];
    CHECK(dsv4_forward(e, &sp, 1, h, NULL, &err) == 0); /* 2 blocks */
    sp.seq = s[2];
    CHECK(dsv4_forward(e, &sp, 1, h, NULL, &err) == DSV4_ERR_CACHE_FULL); /* needs 2, 1 left */
    CHECK_MSG(strstr(err.msg, "needs 2 blocks, 1 free of 5 total"), "message: %s", err.msg);
    CHECK(dsv4_seq_length(e, s[2]) == 0);
    /* a shorter prompt still fits, and the first sequences go on as if nothing happened */
    sp.n_tokens = 100;
    CHECK(dsv4_forward(e, &sp, 1, h, NULL, &err) == 0);
    sp.seq = s[0]; sp.start = 200; sp.tokens = toks + 200; sp.n_tokens = 40;
    CHECK(dsv4_forward(e, &sp, 1, h, NULL, &err) == 0);
    float *ref = malloc((size_t)D * sizeof(float));
    fresh_hidden(240, ref);
    CHECK(memcmp(h, ref, (size_t)D * sizeof(float)) == 0);
    /* freeing returns the pages: the failed prompt now fits */
    CHECK(dsv4_seq_free(e, s[1], &err) == 0);
    CHECK(dsv4_seq_free(e, s[2], &err) == 0);
    CHECK(dsv4_seq_create(e, &s[2], &err) == 0);
    sp.seq = s[2]; sp.start = 0; sp.tokens = toks; sp.n_tokens = 200;
    CHECK(dsv4_forward(e, &sp, 1, h, NULL, &err) == 0);
    fresh_hidden(200, ref);
    CHECK(memcmp(h, ref, (size_t)D * sizeof(float)) == 0);
    free(ref);
    free(h);
    dsv4_engine_free(e);
}

/* The progress calls of one engine create. */
typedef struct progress_log {
    int calls, monotonic;
    uint64_t done, total;
} progress_log;

static void log_progress(void *user, uint64_t done, uint64_t total) {
    progress_log *p = user;
    if (p->calls && (done < p->done || total != p->total)) p->monotonic = 0;
    p->calls++;
    p->done = done;
    p->total = total;
}

static progress_log create_with_progress(int w8a8) {
    progress_log p = {.monotonic = 1};
    dsv4_engine_opts eo = {.max_context = 64, .max_seqs = 1, .w8a8 = w8a8, .progress = log_progress,
                           .progress_user = &p};
    dsv4_engine *e = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_engine_create(M, &eo, &e, &err) == 0, "%s", err.msg);
    dsv4_engine_free(e);
    return p;
}

static void test_progress(void) {
    progress_log exact = create_with_progress(0), p1 = create_with_progress(1), p2 = create_with_progress(2);
    CHECK(exact.calls == 0); /* nothing slow to report */
    /* from 0 to all of it, never backwards, in several steps (a start and every block) */
    CHECK_MSG(p1.calls > 2 && p1.monotonic && p1.total > 0 && p1.done == p1.total, "%d calls, %llu of %llu",
              p1.calls, (unsigned long long)p1.done, (unsigned long long)p1.total);
    CHECK(p2.monotonic && p2.done == p2.total && p2.total > p1.total); /* level 2 converts more */
}

/* --numa: names, the decision on this machine, the same bits in every mode; the libnuma
 * calls themselves on a buffer of our own (one node here: interleaving over it). */
static void test_numa(void) {
    dsv4_err err = {0};
    int mode = -1;
    const char *names[] = {"auto", "none", "interleave"};
    for (int i = 0; i < 3; i++) {
        CHECK(dsv4_numa_parse(names[i], &mode, &err) == 0 && !strcmp(dsv4_numa_name(mode), names[i]));
    }
    CHECK(dsv4_numa_parse("interleaved", &mode, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "must be auto, none or interleave");
    CHECK(dsv4_numa_parse(NULL, &mode, &err) == DSV4_ERR_ARG);
    CHECK(!strcmp(dsv4_numa_name(9), "?"));
    const int nodes = dsv4_numa_nodes();
    CHECK(nodes >= 1);
    printf("numa: %d node(s), libnuma %s\n", nodes, dsv4_numa_supported() ? "in use" : "absent");

    float *ref = malloc((size_t)D * sizeof(float)), *got = malloc((size_t)D * sizeof(float));
    fresh_hidden(40, ref);
    for (int m = DSV4_NUMA_AUTO; m <= DSV4_NUMA_INTERLEAVE; m++) {
        dsv4_engine_opts eo = {.max_context = 512, .max_seqs = 1, .numa = m};
        dsv4_engine *e;
        int s;
        CHECK_MSG(dsv4_engine_create(M, &eo, &e, &err) == 0, "%s", err.msg);
        const int want = nodes > 1 && m != DSV4_NUMA_NONE ? DSV4_NUMA_INTERLEAVE : DSV4_NUMA_NONE;
        CHECK_MSG(dsv4_engine_get_opts(e).numa == want, "numa %s on %d node(s) resolved to %s", dsv4_numa_name(m),
                  nodes, dsv4_numa_name(dsv4_engine_get_opts(e).numa));
        CHECK(dsv4_engine_numa_nodes(e) == nodes);
        CHECK(dsv4_seq_create(e, &s, &err) == 0);
        dsv4_span sp = {.seq = s, .start = 0, .n_tokens = 40, .tokens = toks, .n_hidden = 1};
        CHECK(dsv4_forward(e, &sp, 1, got, NULL, &err) == 0);
        CHECK_MSG(!memcmp(ref, got, (size_t)D * sizeof(float)), "numa %s changes the hidden state", dsv4_numa_name(m));
        dsv4_engine_free(e);
    }
    dsv4_engine_opts bad = {.max_context = 64, .max_seqs = 1, .numa = 7};
    dsv4_engine *e = NULL;
    CHECK(dsv4_engine_create(M, &bad, &e, &err) == DSV4_ERR_ARG && !e);
    CHECK_ERR(err, DSV4_ERR_ARG, "numa = 7");
    free(ref);
    free(got);

    /* the system calls: a range's policy with its pages moved, a thread's policy and back */
    const size_t n = (size_t)1 << 20;
    unsigned char *buf = aligned_alloc(4096, n);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 131u);
    char saved[DSV4_NUMA_SAVED_BYTES];
    if (dsv4_numa_supported()) {
        CHECK_MSG(dsv4_numa_interleave_range(buf + 100, n - 200, &err) == 0, "%s", err.msg);
        CHECK_MSG(dsv4_numa_interleave_thread(saved, &err) == 0, "%s", err.msg);
        dsv4_numa_restore_thread(saved);
    } else {
        CHECK(dsv4_numa_interleave_range(buf, n, &err) == DSV4_ERR_UNSUPPORTED);
        CHECK(dsv4_numa_interleave_thread(saved, &err) == DSV4_ERR_UNSUPPORTED);
    }
    int same = 1;
    for (size_t i = 0; i < n; i++) same &= buf[i] == (unsigned char)(i * 131u);
    CHECK(same);
    free(buf);
}

/* dsv4_lm_head and dsv4_lm_head_argmax over hidden rows on a cache line and 16 bytes off
 * one, at 1, 7, 16 rows (the copy) and 37 (no copy; the argmax's chunks of 16 copy): the
 * same bits. */
static void test_head_alignment(void) {
    dsv4_engine_opts eo = {.max_context = 64, .max_seqs = 1};
    dsv4_engine *e;
    dsv4_err err = {0};
    CHECK(dsv4_engine_create(M, &eo, &e, &err) == 0);
    enum { ROWS = 37 };
    float *base = aligned_alloc(64, (size_t)(ROWS * D + 16) * sizeof(float));
    float *ref = malloc((size_t)ROWS * V * sizeof(float)), *got = malloc((size_t)ROWS * V * sizeof(float));
    int32_t ids_ref[ROWS], ids_got[ROWS];
    uint32_t r = 12345u;
    for (int i = 0; i < ROWS * D + 16; i++) {
        r = r * 1664525u + 1013904223u;
        base[i] = (float)((int)(r >> 9) % 2001 - 1000) * 1e-3f;
    }
    static const int counts[] = {1, 7, 16, ROWS};
    for (int c = 0; c < 4; c++) {
        const int n = counts[c];
        float *off = base + 4; /* 16 bytes off the line */
        memmove(off, base, (size_t)n * D * sizeof(float));
        CHECK(dsv4_lm_head(e, off, n, got, &err) == 0);
        CHECK(dsv4_lm_head_argmax(e, off, n, ids_got, NULL, &err) == 0);
        memmove(base, off, (size_t)n * D * sizeof(float));
        CHECK(dsv4_lm_head(e, base, n, ref, &err) == 0);
        CHECK(dsv4_lm_head_argmax(e, base, n, ids_ref, NULL, &err) == 0);
        CHECK_MSG(memcmp(ref, got, (size_t)n * V * sizeof(float)) == 0,
                  "%d rows: the logits of unaligned hidden rows differ from the aligned ones'", n);
        CHECK_MSG(memcmp(ids_ref, ids_got, (size_t)n * sizeof(int32_t)) == 0,
                  "%d rows: the greedy ids of unaligned hidden rows differ", n);
    }
    free(base);
    free(ref);
    free(got);
    dsv4_engine_free(e);
}

/* The routed experts are checked once at create (e->moe_checked) instead of every MoE call;
 * a model with a bad expert matrix keeps the per-call check, so its first forward still
 * fails naming the matrix, and a create after the fix checks again. */
static void test_moe_checked(void) {
    dsv4_engine_opts eo = {.max_context = 64, .max_seqs = 1};
    dsv4_engine *e;
    dsv4_err err = {0};
    int s;
    float *h = malloc((size_t)D * sizeof(float));
    dsv4_mat *w2 = &M->layers[1].w2[3];
    const int64_t cols = w2->cols;
    for (int bad = 1; bad >= 0; bad--) {
        w2->cols = bad ? cols + 1 : cols;
        CHECK(dsv4_engine_create(M, &eo, &e, &err) == 0);
        CHECK_MSG(e->moe_checked == !bad, "%s model: moe_checked %d", bad ? "a bad" : "the", e->moe_checked);
        CHECK(dsv4_seq_create(e, &s, &err) == 0);
        dsv4_span sp = {.seq = s, .start = 0, .n_tokens = 4, .tokens = toks, .n_hidden = 1};
        const int rc = dsv4_forward(e, &sp, 1, h, NULL, &err);
        CHECK_MSG(rc == (bad ? DSV4_ERR_ARG : 0), "%s model: forward %d (%s)", bad ? "a bad" : "the", rc, err.msg);
        if (bad) CHECK_ERR(err, DSV4_ERR_ARG, "experts.3.w2");
        dsv4_engine_free(e);
    }
    free(h);
}

/* dsv4_engine_for_each on a 3-thread engine: every index exactly once (the calls may
 * overlap: atomic counts), nothing for n <= 0. */
typedef struct {
    _Atomic int hits[64];
    _Atomic int calls;
} for_each_seen;

static void for_each_mark(void *arg, int i) {
    for_each_seen *f = arg;
    atomic_fetch_add(&f->calls, 1);
    if (i >= 0 && i < 64) atomic_fetch_add(&f->hits[i], 1);
}

static void test_for_each(void) {
    dsv4_engine_opts eo = {.max_context = 64, .max_seqs = 1, .threads = 3};
    dsv4_engine *e;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_engine_create(M, &eo, &e, &err) == 0, "%s", err.msg);
    const int ns[] = {0, -3, 1, 2, 17, 64};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        for_each_seen f;
        memset(&f, 0, sizeof f);
        dsv4_engine_for_each(e, ns[k], for_each_mark, &f);
        int once = 1;
        for (int i = 0; i < 64; i++) once &= atomic_load(&f.hits[i]) == (i < ns[k] ? 1 : 0);
        CHECK_MSG(once && atomic_load(&f.calls) == (ns[k] > 0 ? ns[k] : 0), "n %d: %d calls", ns[k],
                  atomic_load(&f.calls));
    }
    dsv4_engine_free(e);
}

int main(void) {
    char buf[1024];
    dsv4_err err = {0};
    if (dsv4_model_open(test_shared("golden/tiny_s0/model", buf, sizeof buf), &M, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    dsv4_model_info info = dsv4_model_get_info(M);
    V = info.vocab_size;
    D = info.hidden_size;
    for (int i = 0; i < 512; i++) toks[i] = (int32_t)((i * 7919u + 13u) % (unsigned)V);
    test_validation();
    test_exhaustion();
    test_progress();
    test_numa();
    test_head_alignment();
    test_moe_checked();
    test_for_each();
    dsv4_model_close(M);
    return test_report();
}
