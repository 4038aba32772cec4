/* test_no_alloc.c — the forward allocates nothing: every buffer of dsv4_forward,
 * dsv4_mtp_forward and dsv4_lm_head comes from the scratch arena made at create
 * (util/arena.h), so out of memory can only happen there.
 *
 * The library's calls to malloc, calloc, realloc, aligned_alloc, posix_memalign and free
 * are routed through counters here (linked with -Wl,--wrap=...); the counters run from the
 * first forward call to the last head call of a schedule with prefill chunks, single-token
 * decodes, ragged batches of both, MTP rows and LM head rows, then the greedy argmax and
 * three vocabulary shards of the head over 40 rows (more than DSV4_LMHEAD_ROWS), and must
 * stay at zero; the argmax and the shards also agree with the full head's logits. Run on
 * tiny_s0 in every numeric mode and on its FP8 copy (native FP8 projections; its head is
 * BF16, so the FP8 head's off-block shard path is not reached here).
 *
 * Under mpirun, modes ep and cp run the same schedule on every rank of an expert-parallel
 * or context-parallel engine (cp: granule 4, so the one-sequence prefills split over the
 * ranks; dpcp: data-parallel attention with CP, every rank its own sequences, so the long
 * chunks of every rank run as CP prefills homed on it, several a call), plus the group head
 * calls (dsv4_lm_head_dist, the sharded argmax): the exchange
 * buffers, the sharded head's broadcast, shards and gather and the rank agreements come
 * from memory made at create too (what Open MPI allocates inside its own library is not
 * counted: only the calls this binary and libdsv4 make are wrapped).
 *
 *   test_no_alloc MODEL_DIR [exact|reference|w8a8|fidelity|ep|cp|dpcp]   (fidelity: every P3 item)
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "test.h"

static atomic_int counting;
static atomic_long n_calls;

static void count(void) {
    if (atomic_load(&counting)) atomic_fetch_add(&n_calls, 1);
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n) { count(); return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { count(); return __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { count(); return __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { count(); return __real_aligned_alloc(a, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { count(); return __real_posix_memalign(p, a, n); }
void __wrap_free(void *p) { if (p) count(); __real_free(p); } /* free(NULL) is a no-op */

enum { N_SEQ = 3, N_TOK = 96 };

static int D, HC, V;
static dsv4_dist *group; /* modes ep and cp */
static int32_t tokens[N_SEQ][N_TOK];

typedef struct seq_run {
    int seq;
    int64_t done;
} seq_run;

/* Buffers for the largest call of the schedule, made before counting starts. */
static float *hidden, *streams, *logits, *mtp_hidden, *shard;
static int32_t *ids;

enum { HEAD_ROWS = 40 };

/* dsv4_lm_head_argmax and dsv4_lm_head_shard over HEAD_ROWS rows of hidden: logits gets
 * the full head's, shard q's (HEAD_ROWS, width of q) at shard + q * HEAD_ROWS * V
 * (compared after counting). */
static float *dist_logits; /* (HEAD_ROWS, V) dsv4_lm_head_dist's, home rank */

static int head_calls(dsv4_engine *e, dsv4_err *err) {
    int rc = dsv4_lm_head(e, hidden, HEAD_ROWS, logits, err);
    if (!rc && group) rc = dsv4_lm_head_dist(e, hidden, HEAD_ROWS, dist_logits, err);
    if (!rc) rc = dsv4_lm_head_argmax(e, hidden, HEAD_ROWS, ids, NULL, err);
    for (int q = 0; q < 3 && !rc; q++)
        rc = dsv4_lm_head_shard(e, hidden, HEAD_ROWS, q, 3, shard + (size_t)q * HEAD_ROWS * V, err);
    return rc;
}

/* The argmax and the shards against the full logits. */
static void check_head(const char *mode) {
    int bad_ids = 0, bad_shards = 0;
    for (int r = 0; r < HEAD_ROWS; r++) {
        const float *row = logits + (size_t)r * V;
        int best = 0;
        for (int v = 1; v < V; v++) if (row[v] > row[best]) best = v;
        bad_ids += ids[r] != best;
    }
    const int per = (V + 2) / 3;
    for (int q = 0; q < 3; q++) {
        const int lo = q * per, hi = lo + per < V ? lo + per : V;
        for (int r = 0; r < HEAD_ROWS; r++)
            bad_shards += memcmp(shard + (size_t)q * HEAD_ROWS * V + (size_t)r * (hi - lo), logits + (size_t)r * V + lo,
                                 sizeof(float) * (size_t)(hi - lo)) != 0;
    }
    if (group)
        CHECK_MSG(memcmp(dist_logits, logits, sizeof(float) * (size_t)HEAD_ROWS * V) == 0,
                  "%s: dsv4_lm_head_dist's logits differ from the local head's", mode);
    CHECK_MSG(bad_ids == 0, "%s: dsv4_lm_head_argmax differs from the logits' argmax in %d rows", mode, bad_ids);
    CHECK_MSG(bad_shards == 0, "%s: %d shard rows differ from the full head's", mode, bad_shards);
}

/* One call of spans (seq i gets n[i] rows, 0 = not in the call), then MTP over every row
 * that is ready, then the head over every hidden row. */
static int step(dsv4_engine *e, seq_run *s, const int *n, dsv4_err *err) {
    dsv4_span sp[N_SEQ];
    int k = 0, rows = 0;
    for (int i = 0; i < N_SEQ; i++)
        if (n[i]) {
            sp[k++] = (dsv4_span){.seq = s[i].seq, .start = s[i].done, .n_tokens = n[i],
                                  .tokens = tokens[i] + s[i].done, .n_hidden = n[i], .n_streams = n[i]};
            rows += n[i];
        }
    int rc = dsv4_forward(e, sp, k, hidden, streams, err);
    if (rc) return rc;
    if ((rc = dsv4_lm_head(e, hidden, rows, logits, err))) return rc;
    /* MTP position t reads the streams of t and the token at t + 1: every position of
     * this call but the sequence's last one (MTP keeps pace, so it starts at done) */
    dsv4_mtp_span ms[N_SEQ];
    int km = 0, row = 0;
    for (int i = 0; i < N_SEQ; i++) {
        if (!n[i]) continue;
        const int64_t end = s[i].done + n[i] < N_TOK - 1 ? s[i].done + n[i] : N_TOK - 1;
        if (end > s[i].done)
            ms[km++] = (dsv4_mtp_span){s[i].seq, s[i].done, (int)(end - s[i].done),
                                       tokens[i] + s[i].done + 1, streams + (size_t)row * HC * D};
        row += n[i];
        s[i].done += n[i];
    }
    if (km && (rc = dsv4_mtp_forward(e, ms, km, mtp_hidden, err))) return rc;
    int mrows = 0;
    for (int j = 0; j < km; j++) mrows += ms[j].n;
    if (mrows && (rc = dsv4_lm_head(e, mtp_hidden, mrows, logits, err))) return rc;
    return DSV4_OK;
}

static void run_schedule(dsv4_model *m, const char *mode) {
    dsv4_engine_opts eo = {.max_context = N_TOK, .max_seqs = N_SEQ, .c_max = 40, .mtp = 1,
                           .threads = 2, .reference = !strcmp(mode, "reference"),
                           .w8a8 = !strcmp(mode, "w8a8"),
                           .fidelity = !strcmp(mode, "fidelity") ? DSV4_FID_OFFICIAL : 0,
                           .dist = group, .parallel = !group ? 0 : !strcmp(mode, "ep") ? DSV4_PAR_EP
                                               : !strcmp(mode, "dpcp") ? DSV4_PAR_EP | DSV4_PAR_DP | DSV4_PAR_CP
                                               : DSV4_PAR_CP,
                           .cp_granule = 4};
    dsv4_engine *e;
    dsv4_err err = {0};
    atomic_store(&n_calls, 0);
    atomic_store(&counting, 1);
    int rc = dsv4_engine_create(m, &eo, &e, &err);
    atomic_store(&counting, 0);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    /* the counters see the library's allocations: create makes the arena, caches, ... */
    CHECK_MSG(atomic_load(&n_calls) > 0, "no allocation counted in dsv4_engine_create");
    seq_run s[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        s[i] = (seq_run){0};
        CHECK(dsv4_seq_create(e, &s[i].seq, &err) == 0);
    }
    /* rows per call: prefill chunks across compressor windows (4, 128) and the window
     * (16), alone and ragged together with decodes; then batched decodes */
    static const int sched[][N_SEQ] = {
        {40, 0, 0}, {17, 0, 0}, {1, 0, 0}, {1, 0, 0}, {0, 23, 0}, {1, 9, 40},
        {1, 1, 5}, {2, 1, 1}, {1, 1, 1}, {0, 30, 1}, {1, 1, 0}, {3, 1, 1},
    };
    atomic_store(&n_calls, 0);
    atomic_store(&counting, 1);
    for (size_t c = 0; c < sizeof sched / sizeof sched[0] && !rc; c++) rc = step(e, s, sched[c], &err);
    for (int d = 0; d < 24 && !rc; d++) { /* decode steps, all three sequences */
        const int one[N_SEQ] = {s[0].done < N_TOK, s[1].done < N_TOK, s[2].done < N_TOK};
        if (one[0] + one[1] + one[2]) rc = step(e, s, one, &err);
    }
    if (!rc) rc = head_calls(e, &err);
    atomic_store(&counting, 0);
    if (!rc && dsv4_dist_rank(group) == 0) check_head(mode); /* the outputs live on the home rank */
    CHECK_MSG(rc == 0, "%s: %s", mode, err.msg);
    CHECK_MSG(atomic_load(&n_calls) == 0, "%s: %ld allocator calls during forward/MTP/head",
              mode, atomic_load(&n_calls));
    for (int i = 0; i < N_SEQ; i++) CHECK(dsv4_seq_length(e, s[i].seq) > 40);
    printf("%s: %ld allocator calls in %lld + %lld + %lld positions\n", mode,
           atomic_load(&n_calls), (long long)s[0].done, (long long)s[1].done, (long long)s[2].done);
    dsv4_engine_free(e);
}

/* A call over max_rows is refused before anything changes; one at the cap runs. */
static void test_max_rows(dsv4_model *m) {
    dsv4_engine_opts eo = {.max_context = 64, .max_seqs = 2, .c_max = 16, .max_rows = 20, .threads = 1};
    dsv4_engine *e;
    dsv4_err err = {0};
    CHECK(dsv4_engine_create(m, &eo, &e, &err) == 0);
    int a, b;
    CHECK(dsv4_seq_create(e, &a, &err) == 0 && dsv4_seq_create(e, &b, &err) == 0);
    dsv4_span sp[2] = {{.seq = a, .start = 0, .n_tokens = 16, .tokens = tokens[0], .n_hidden = 1},
                       {.seq = b, .start = 0, .n_tokens = 5, .tokens = tokens[1], .n_hidden = 1}};
    CHECK(dsv4_forward(e, sp, 2, hidden, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "exceed max_rows = 20");
    CHECK(dsv4_seq_length(e, a) == 0 && dsv4_seq_length(e, b) == 0);
    sp[1].n_tokens = 4;
    CHECK(dsv4_forward(e, sp, 2, hidden, NULL, &err) == 0);
    CHECK(dsv4_seq_length(e, a) == 16 && dsv4_seq_length(e, b) == 4);
    dsv4_engine_free(e);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_no_alloc MODEL_DIR [exact|reference|w8a8|fidelity]\n"); return 2; }
    const char *mode = argc > 2 ? argv[2] : "exact";
    dsv4_model *m;
    dsv4_err err = {0};
    if (!strcmp(mode, "ep") || !strcmp(mode, "cp") || !strcmp(mode, "dpcp")) {
        if (dsv4_dist_init(&argc, &argv, &group, &err) || dsv4_dist_size(group) < 2) {
            fprintf(stderr, "test_no_alloc %s: needs an MPI build and mpirun -np 2 or more (%s)\n", mode, err.msg);
            return 1;
        }
    }
    if (dsv4_model_open(argv[1], &m, &err)) {
        fprintf(stderr, "SKIP: cannot open %s: %s\n", argv[1], err.msg);
        return 77;
    }
    const dsv4_model_info info = dsv4_model_get_info(m);
    D = info.hidden_size;
    HC = info.hc_mult;
    V = info.vocab_size;
    uint32_t r = 12345;
    for (int i = 0; i < N_SEQ; i++)
        for (int t = 0; t < N_TOK; t++) { r = r * 1103515245u + 12345u; tokens[i][t] = (int32_t)((r >> 8) % (uint32_t)V); }
    const size_t rows = (size_t)N_SEQ * N_TOK;
    hidden = calloc(rows * D, sizeof(float)); /* zero: other ranks read theirs unwritten */
    streams = calloc(rows * HC * D, sizeof(float));
    mtp_hidden = calloc(rows * D, sizeof(float));
    logits = malloc(rows * V * sizeof(float));
    shard = malloc((size_t)3 * HEAD_ROWS * V * sizeof(float));
    ids = malloc(HEAD_ROWS * sizeof(int32_t));
    dist_logits = malloc((size_t)HEAD_ROWS * V * sizeof(float));
    run_schedule(m, mode);
    if (!strcmp(mode, "exact")) test_max_rows(m);
    free(hidden); free(streams); free(mtp_hidden); free(logits); free(shard); free(ids); free(dist_logits);
    dsv4_model_close(m);
    const int rc = test_report();
    dsv4_dist_finalize(group);
    return rc;
}
