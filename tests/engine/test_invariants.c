/* test_invariants.c — spec/model.md §8 invariants through the paged engine:
 *   1. prefill(N) == prefill(P) + single-token decodes, P across compressor boundaries;
 *   2. chunked prefill with any chunk schedule == one-shot prefill;
 *   3. a ragged batch of sequences == each sequence alone;
 *   5. MTP results do not depend on how main and MTP calls are split;
 *   6. a sequence in a reused slot == a fresh engine; the same run twice gives the same bits.
 * Compared on every position: final hidden, last-block streams and MTP hidden, bitwise: the
 * linear kernels promise results independent of the number of rows in a call, so this holds
 * for the SIMD path as well as for the portable scalar one (`reference`, engine option).
 *
 *   test_invariants MODEL_DIR [N [reference|fidelity]]
 *
 * `fidelity` runs fidelity mode P3 with every item on (spec/model.md §6; its roundings are
 * per row or per entry, so the invariants hold bitwise there too) over a few schedules of
 * each kind, after checking that its one-shot result differs from P0's (the mode is live).
 * With FP4 indexer keys (DSV4_TEST_KV=...+fp4, F3 only) P0's run stores the keys as the
 * rows, and the one-shot run with them so must give the FP4 run's bits.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "kv_env.h"
#include "test.h"

typedef struct outputs {
    float *hidden;   /* (N, D) */
    float *streams;  /* (N, hc, D) */
    float *mtp;      /* (N-1, D) */
} outputs;

static int V, D, HC, N, REFERENCE;
static int THREADS; /* dsv4_engine_opts.threads of run_one's engines (0: every core) */
static unsigned FIDELITY; /* dsv4_engine_opts.fidelity of every engine */
static int32_t *tokens;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static void outputs_alloc(outputs *o) {
    o->hidden = calloc((size_t)N * D, sizeof(float));
    o->streams = calloc((size_t)N * HC * D, sizeof(float));
    o->mtp = calloc((size_t)N * D, sizeof(float));
}
static void outputs_free(outputs *o) { free(o->hidden); free(o->streams); free(o->mtp); }

/* A sequence being driven through a schedule of main chunk sizes; MTP rows run after each
 * main call, in pieces of at most mtp_chunk rows (0 = all that are ready). */
typedef struct driver {
    int seq;
    const int *chunks;
    int n_chunks, next_chunk;
    int64_t done, mtp_done;
    int mtp_chunk;
    outputs *out;
} driver;

static int driver_span(driver *d, dsv4_span *sp) {
    if (d->done >= N) return 0;
    int c = d->next_chunk < d->n_chunks ? d->chunks[d->next_chunk] : 1;
    if (c > N - d->done) c = (int)(N - d->done);
    *sp = (dsv4_span){.seq = d->seq, .start = d->done, .n_tokens = c, .tokens = tokens + d->done,
                      .n_hidden = c, .n_streams = c};
    return 1;
}

static int driver_mtp(dsv4_engine *e, driver *d, dsv4_err *err) {
    int64_t ready = d->done < N - 1 ? d->done : N - 1;
    while (d->mtp_done < ready) {
        int n = (int)(ready - d->mtp_done);
        if (d->mtp_chunk && n > d->mtp_chunk) n = d->mtp_chunk;
        dsv4_mtp_span ms = {d->seq, d->mtp_done, n, tokens + d->mtp_done + 1,
                            d->out->streams + (size_t)d->mtp_done * HC * D};
        int rc = dsv4_mtp_forward(e, &ms, 1, d->out->mtp + (size_t)d->mtp_done * D, err);
        if (rc) return rc;
        d->mtp_done += n;
    }
    return 0;
}

/* Runs all drivers together (one span each per call) until every one is done. */
static int run_drivers(dsv4_engine *e, driver *ds, int n, dsv4_err *err) {
    dsv4_span spans[8];
    driver *who[8];
    float *hid = malloc((size_t)n * N * D * sizeof(float));
    float *str = malloc((size_t)n * N * HC * D * sizeof(float));
    int rc = 0;
    for (;;) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (driver_span(&ds[i], &spans[k])) who[k++] = &ds[i];
        if (!k) break;
        if ((rc = dsv4_forward(e, spans, k, hid, str, err))) break;
        int row = 0;
        for (int j = 0; j < k; j++) {
            driver *d = who[j];
            int c = spans[j].n_tokens;
            memcpy(d->out->hidden + (size_t)d->done * D, hid + (size_t)row * D, (size_t)c * D * sizeof(float));
            memcpy(d->out->streams + (size_t)d->done * HC * D, str + (size_t)row * HC * D,
                   (size_t)c * HC * D * sizeof(float));
            row += c;
            d->done += c;
            d->next_chunk++;
            if ((rc = driver_mtp(e, d, err))) break;
        }
        if (rc) break;
    }
    free(hid); free(str);
    return rc;
}

static int KEYS_AS_ROWS; /* 1: run_one drops DSV4_KV_IDX_FP4 from DSV4_TEST_KV (keys as the rows) */

static int run_one(dsv4_model *m, const int *chunks, int n_chunks, int mtp_chunk, outputs *o) {
    /* FP4 keys need F3: P0's run, and the comparison with the rows' key format, drop them */
    int kv = test_kv_dtype();
    if (KEYS_AS_ROWS || !(FIDELITY & DSV4_FID_F3)) kv &= ~DSV4_KV_IDX_FP4;
    dsv4_engine_opts eo = {.max_context = N, .max_seqs = 4, .mtp = 1, .reference = REFERENCE,
                           .fidelity = FIDELITY, .kv_dtype = kv, .threads = THREADS};
    dsv4_engine *e;
    dsv4_err err = {0};
    if (dsv4_engine_create(m, &eo, &e, &err)) { fprintf(stderr, "%s\n", err.msg); return -1; }
    driver d = {0};
    d.chunks = chunks; d.n_chunks = n_chunks; d.mtp_chunk = mtp_chunk; d.out = o;
    int rc = dsv4_seq_create(e, &d.seq, &err);
    if (!rc) rc = run_drivers(e, &d, 1, &err);
    if (rc) fprintf(stderr, "run failed: %s\n", err.msg);
    dsv4_engine_free(e);
    return rc;
}

static int same(const outputs *a, const outputs *b, const char *what) {
    int ok = !memcmp(a->hidden, b->hidden, (size_t)N * D * sizeof(float)) &&
             !memcmp(a->streams, b->streams, (size_t)N * HC * D * sizeof(float)) &&
             !memcmp(a->mtp, b->mtp, (size_t)(N - 1) * D * sizeof(float));
    if (!ok) {
        for (int t = 0; t < N; t++)
            if (memcmp(a->hidden + (size_t)t * D, b->hidden + (size_t)t * D, (size_t)D * sizeof(float))) {
                fprintf(stderr, "%s: hidden first differs at position %d\n", what, t);
                break;
            }
    }
    CHECK_MSG(ok, "%s differs from the one-shot prefill", what);
    return ok;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_invariants MODEL_DIR [N [reference|fidelity]]\n"); return 2; }
    dsv4_model *m;
    dsv4_err err = {0};
    if (dsv4_model_open(argv[1], &m, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    dsv4_model_info info = dsv4_model_get_info(m);
    V = info.vocab_size; D = info.hidden_size; HC = info.hc_mult;
    N = argc > 2 ? atoi(argv[2]) : 300;
    REFERENCE = argc > 3 && !strcmp(argv[3], "reference");
    const int fidelity = argc > 3 && !strcmp(argv[3], "fidelity");
    tokens = malloc((size_t)N * sizeof *tokens);
    for (int i = 0; i < N; i++) tokens[i] = (int32_t)(rnd() % (uint32_t)V);

    outputs ref, o;
    outputs_alloc(&ref);
    outputs_alloc(&o);
    int whole[1] = {N};
    if (fidelity) { /* P3 must differ from P0, else the schedules below test nothing new */
        CHECK(run_one(m, whole, 1, 0, &ref) == 0);
        FIDELITY = DSV4_FID_OFFICIAL;
        CHECK(run_one(m, whole, 1, 0, &o) == 0);
        CHECK_MSG(memcmp(o.hidden, ref.hidden, (size_t)N * D * sizeof(float)) != 0,
                  "fidelity official gives P0's hidden states");
    }
    CHECK(run_one(m, whole, 1, 0, &ref) == 0);
    if (fidelity && (test_kv_dtype() & DSV4_KV_IDX_FP4)) { /* F3's keys are FP4 values: no bit moves */
        KEYS_AS_ROWS = 1;
        CHECK(run_one(m, whole, 1, 0, &o) == 0);
        same(&o, &ref, "the run with the rows' key format instead of FP4 keys");
        KEYS_AS_ROWS = 0;
    }

    /* the same run twice */
    CHECK(run_one(m, whole, 1, 0, &o) == 0);
    same(&o, &ref, "second identical run");

    /* 1. prefill(P) + decodes */
    const int splits[] = {1, 2, 3, 4, 5, 15, 16, 17, 127, 128, 129, 255, 256, 257};
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        int P = splits[i];
        if (P >= N || (fidelity && P != 3 && P != 17 && P != 129)) continue;
        int sched[1] = {P};
        CHECK(run_one(m, sched, 1, 1, &o) == 0);
        char what[64];
        snprintf(what, sizeof what, "prefill %d + decode", P);
        same(&o, &ref, what);
    }
    /* 2. chunk schedules (fixed sizes, then random ones) */
    const int sizes[] = {1, 3, 4, 5, 7, 100, 127, 128, 129, 200};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (fidelity && sizes[i] != 5 && sizes[i] != 128) continue;
        int *sched = malloc((size_t)N * sizeof(int));
        for (int j = 0; j < N; j++) sched[j] = sizes[i];
        CHECK(run_one(m, sched, N, sizes[i] == 1 ? 0 : 3, &o) == 0);
        char what[64];
        snprintf(what, sizeof what, "chunks of %d", sizes[i]);
        same(&o, &ref, what);
        free(sched);
    }
    for (int r = 0; r < (fidelity ? 1 : 3); r++) {
        int *sched = malloc((size_t)N * sizeof(int));
        for (int j = 0; j < N; j++) sched[j] = 1 + (int)(rnd() % 40);
        CHECK(run_one(m, sched, N, (int)(rnd() % 5), &o) == 0);
        same(&o, &ref, "random chunk schedule");
        free(sched);
    }

    /* 2b. calls of 2-7 rows (a batched decode step's sizes: hc_pre's dots split by range over all
     * the rows, the rows job's odd row in halves of its heads, the router beside the shared
     * expert) on 1, 3 and 4 threads: the bits of the one-shot prefill on the default threads */
    if (!fidelity)
        for (int t = 1; t <= 4; t++) {
            if (t == 2) continue;
            THREADS = t;
            const int few[] = {2, 3, 5, 6, 7};
            for (size_t i = 0; i < sizeof few / sizeof few[0]; i++) {
                if (t == 1 && few[i] != 3) continue; /* one thread: every path's serial form */
                int *sched = malloc((size_t)N * sizeof(int));
                for (int j = 0; j < N; j++) sched[j] = few[i];
                CHECK(run_one(m, sched, N, 0, &o) == 0);
                char what[64];
                snprintf(what, sizeof what, "chunks of %d on %d threads", few[i], t);
                same(&o, &ref, what);
                free(sched);
            }
            THREADS = 0;
        }

    /* 3 + 6. a ragged batch in an engine whose slots were used before: three sequences with
     * different schedules run together; the middle one must match the reference */
    {
        dsv4_engine_opts eo = {.max_context = N, .max_seqs = 4, .mtp = 1, .reference = REFERENCE,
                           .fidelity = FIDELITY, .kv_dtype = test_kv_dtype()};
        dsv4_engine *e;
        CHECK(dsv4_engine_create(m, &eo, &e, &err) == 0);
        /* dirty every slot first */
        int junk[4];
        for (int i = 0; i < 4; i++) CHECK(dsv4_seq_create(e, &junk[i], &err) == 0);
        for (int i = 0; i < 4; i++) {
            dsv4_span sp = {.seq = junk[i], .start = 0, .n_tokens = 1 + (37 + 50 * i) % (N - 4), .tokens = tokens + i};
            CHECK(dsv4_forward(e, &sp, 1, NULL, NULL, &err) == 0);
        }
        for (int i = 0; i < 4; i++) CHECK(dsv4_seq_free(e, junk[i], &err) == 0);
        outputs other[2];
        outputs_alloc(&other[0]);
        outputs_alloc(&other[1]);
        int c_a[64], c_b[64], c_c[64];
        for (int j = 0; j < 64; j++) { c_a[j] = 1; c_b[j] = 13 + j % 3; c_c[j] = 50; }
        driver ds[3] = {
            {.chunks = c_a, .n_chunks = 64, .mtp_chunk = 0, .out = &other[0]},
            {.chunks = c_b, .n_chunks = 64, .mtp_chunk = 2, .out = &o},
            {.chunks = c_c, .n_chunks = 64, .mtp_chunk = 0, .out = &other[1]},
        };
        for (int i = 0; i < 3; i++) CHECK(dsv4_seq_create(e, &ds[i].seq, &err) == 0);
        CHECK(run_drivers(e, ds, 3, &err) == 0);
        same(&o, &ref, "sequence in a ragged batch with reused slots");
        same(&other[0], &ref, "decode-only sequence in the batch");
        same(&other[1], &ref, "chunk-50 sequence in the batch");
        outputs_free(&other[0]);
        outputs_free(&other[1]);
        dsv4_engine_free(e);
    }
    outputs_free(&ref);
    outputs_free(&o);
    free(tokens);
    dsv4_model_close(m);
    return test_report();
}
