/* test_dp_head.c — the LM head of a data-parallel group sharded over the vocabulary
 * (DSV4_PAR_EP | DSV4_PAR_DP | DSV4_PAR_DP_HEAD, engine/lmhead_dp.c), SPMD through the
 * public API, against a single-process engine on every rank:
 *  - row counts per rank that differ: none anywhere, one each, r + 1, every row on the last
 *    rank (several rounds), none on rank 0, 16 + 3r (rounds of unequal ranks); in each,
 *    ranks calling _dist next to ranks calling _argmax, then each the other kind: every
 *    rank's logits, ids and values bitwise the local head's. The rows hold exact ties
 *    (unit vectors pick one BF16 column of the head; a zero row ties every id), and every
 *    other call's rows start off a 64-byte line;
 *  - a refusal on one rank (a negative row count, missing ids) fails the call on every
 *    rank with that rank's message, and the next call works; the flag without DP is
 *    refused at create on every rank;
 *  - --stopped forward|head (peer timeout 3 s): rank 1 stalls inside a forward (its trace
 *    hook sleeps after the last layer's attention, the others wait in that layer's MoE
 *    exchange) or never makes a head call: the other ranks fail within bounded time naming
 *    rank 1, and the next call fails at once (the group is unusable); the job then ends.
 *
 *   mpirun -np N test_dp_head MODEL_DIR [--stopped forward|head]   (N divides the experts)
 */
#include <unistd.h>

#include "ep_fixture.h"

enum { MAXR = 48, N_PATTERNS = 7 };

static uint64_t rng;
static float frand(void) { /* [-0.5, 0.5) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)(rng >> 40) / (float)(1 << 24) - 0.5f;
}

/* Rows of rank r (of K) in pattern p. */
static int rows_of(int p, int r, int K) {
    switch (p) {
    case 0: return 0;
    case 1: return 1;
    case 2: return r + 1;
    case 3: return r == K - 1 ? 37 : 0;
    case 4: return r == 0 ? 0 : 2 * r + 3;
    case 5: return 16 + 3 * r;
    default: return r == 0 ? 9 : 0;
    }
}

/* Every rank reaches the same verdict. */
static void same_verdict(const ep_world *g, int rc, const char *what, const dsv4_err *err) {
    int lo, hi;
    MPI_Allreduce(&rc, &lo, 1, MPI_INT, MPI_MIN, g->d->comm);
    MPI_Allreduce(&rc, &hi, 1, MPI_INT, MPI_MAX, g->d->comm);
    CHECK_MSG(lo == hi, "%s: ranks disagree on the result (%d..%d; rank %d: %s)", what, lo, hi, g->rank, err->msg);
}

static dsv4_engine_opts opts(const ep_world *g, int parallel) {
    return (dsv4_engine_opts){.max_context = 64, .max_seqs = 2, .c_max = 16, .threads = 1, .dist = g->d,
                              .parallel = parallel};
}

/* n rows of D: random, every third a unit vector (one head column: exact ties), row 3 zero. */
static void fill_rows(float *h, int n, int D, int call) {
    for (int i = 0; i < n; i++) {
        float *row = h + (size_t)i * D;
        if (i % 3 == 1) {
            memset(row, 0, sizeof(float) * D);
            row[(i * 7 + call) % D] = 1.0f;
        } else if (i == 3) { /* every logit 0: the lowest id over all shards */
            memset(row, 0, sizeof(float) * D);
        } else {
            for (int j = 0; j < D; j++) row[j] = frand() * 0.2f;
        }
    }
}

/* One call of `kind` on n of this rank's rows, checked against the local engine. */
static void one_call(const ep_world *g, dsv4_engine *grp, dsv4_engine *loc, int n, int kind, int call, float *hbuf,
                     const char *what) {
    const int V = g->V, D = g->D;
    float *h = hbuf + (call & 1); /* every other call off a 64-byte line */
    fill_rows(h, n, D, call);
    float *lg = malloc(sizeof(float) * ((size_t)n * V + 1)), *ref = malloc(sizeof(float) * ((size_t)n * V + 1));
    int32_t ids[MAXR], ref_ids[MAXR];
    float vals[MAXR], ref_vals[MAXR];
    dsv4_err err = {0}, err2 = {0};
    const int rc = kind ? dsv4_lm_head_argmax(grp, h, n, ids, vals, &err) : dsv4_lm_head_dist(grp, h, n, lg, &err);
    same_verdict(g, rc, what, &err);
    CHECK_MSG(rc == 0, "%s: rank %d: %s", what, g->rank, err.msg);
    if (rc == 0 && n > 0) {
        if (kind) {
            CHECK(dsv4_lm_head_argmax(loc, h, n, ref_ids, ref_vals, &err2) == 0);
            CHECK_MSG(memcmp(ids, ref_ids, sizeof(int32_t) * n) == 0 && memcmp(vals, ref_vals, sizeof(float) * n) == 0,
                      "%s: rank %d: greedy ids or values differ (row 0: %d vs %d)", what, g->rank, ids[0], ref_ids[0]);
        } else {
            CHECK(dsv4_lm_head(loc, h, n, ref, &err2) == 0);
            CHECK_MSG(memcmp(lg, ref, sizeof(float) * n * V) == 0, "%s: rank %d: logits differ", what, g->rank);
        }
    }
    free(lg);
    free(ref);
}

static void patterns(const ep_world *g, dsv4_engine *grp, dsv4_engine *loc) {
    float *hbuf = aligned_alloc(64, (sizeof(float) * (MAXR + 1) * g->D + 63) / 64 * 64);
    int call = 0;
    for (int p = 0; p < N_PATTERNS; p++) {
        const int n = rows_of(p, g->rank, g->size);
        char what[64];
        for (int k = 0; k < 2; k++, call++) { /* first mixed kinds, then each rank the other */
            const int kind = (g->rank + p + k) & 1;
            snprintf(what, sizeof what, "pattern %d, call %d (%s)", p, k, kind ? "argmax" : "dist");
            one_call(g, grp, loc, n, kind, call, hbuf, what);
        }
    }
    free(hbuf);
}

/* A refusal on one rank is every rank's, with its message; the next call works. */
static void refusals(const ep_world *g, dsv4_engine *grp, dsv4_engine *loc) {
    const int last = g->size - 1;
    float *h = aligned_alloc(64, (sizeof(float) * 5 * g->D + 63) / 64 * 64);
    float *lg = malloc(sizeof(float) * 4 * g->V);
    int32_t ids[4];
    fill_rows(h, 4, g->D, 0);
    dsv4_err err = {0};
    int rc = dsv4_lm_head_dist(grp, h, g->rank == last ? -1 : 2, lg, &err);
    same_verdict(g, rc, "negative rows", &err);
    CHECK_MSG(rc == DSV4_ERR_ARG && strstr(err.msg, "bad arguments (n_rows = -1)") &&
              (g->rank == last || strstr(err.msg, "failed")), "rank %d: rc %d '%s'", g->rank, rc, err.msg);
    if (g->rank == 0) printf("rank %d's negative row count, rank 0 reads: %s\n", last, err.msg);
    rc = dsv4_lm_head_argmax(grp, h, 2, g->rank == 0 ? NULL : ids, NULL, &err);
    same_verdict(g, rc, "missing ids", &err);
    CHECK_MSG(rc == DSV4_ERR_ARG && strstr(err.msg, "lm_head_argmax"), "rank %d: rc %d '%s'", g->rank, rc, err.msg);
    one_call(g, grp, loc, 3, g->rank & 1, 0, h, "after the refusals");
    free(h);
    free(lg);
    /* the sharded head needs DP, on every rank at create */
    dsv4_engine_opts o = opts(g, DSV4_PAR_EP | DSV4_PAR_DP_HEAD);
    dsv4_engine *e = NULL;
    CHECK(dsv4_engine_create(g->m, &o, &e, &err) == DSV4_ERR_ARG && !e);
    CHECK_MSG(strstr(err.msg, "DSV4_PAR_DP_HEAD") || strstr(err.msg, "rank"), "create: %s", err.msg);
}

/* ---- a stalled rank ------------------------------------------------------------------ */

static int g_stall_layer = -1; /* rank 1's trace sleeps after this layer's attention */

static void stall_trace(void *user, int seq, int64_t pos, int layer, int kind, const float *streams) {
    (void)user; (void)seq; (void)pos; (void)streams;
    if (layer == g_stall_layer && kind == 0) sleep(60); /* ended by the others' abort long before */
}

static void stopped(const ep_world *g, int in_head) {
    dsv4_err err = {0};
    CHECK(dsv4_dist_set_timeout(g->d, 3.0, &err) == 0);
    dsv4_engine_opts o = opts(g, DSV4_PAR_EP | DSV4_PAR_DP | DSV4_PAR_DP_HEAD);
    dsv4_engine *e = NULL;
    CHECK_MSG(dsv4_engine_create(g->m, &o, &e, &err) == 0, "create: %s", err.msg);
    if (!e) dsv4_dist_abort(g->d, 1);
    int seq = -1;
    CHECK(dsv4_seq_create(e, &seq, &err) == 0);
    float *hid = calloc((size_t)g->D * 4, sizeof(float)), *lg = malloc(sizeof(float) * g->V);
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int i = 0; i < 8; i++) tok[i] = (tok[i] * (g->rank + 3)) % g->V;
    /* a healthy step on every rank: prefill, the head */
    dsv4_span sp = {.seq = seq, .start = 0, .n_tokens = 4, .tokens = tok, .n_hidden = 1};
    int rc = dsv4_forward(e, &sp, 1, hid, NULL, &err);
    if (!rc) rc = dsv4_lm_head_dist(e, hid, 1, lg, &err);
    CHECK_MSG(rc == 0, "healthy step: %s", err.msg);
    /* the next step: rank 1 stalls inside the forward (after the last layer's attention),
     * or before the head call */
    sp = (dsv4_span){.seq = seq, .start = 4, .n_tokens = 1, .tokens = tok + 4, .n_hidden = 1};
    if (g->rank == 1) {
        if (!in_head) {
            g_stall_layer = g->L - 1;
            dsv4_engine_set_trace(e, stall_trace, NULL);
        }
        rc = dsv4_forward(e, &sp, 1, hid, NULL, &err);
        sleep(60);
        return;
    }
    const double t0 = MPI_Wtime();
    rc = dsv4_forward(e, &sp, 1, hid, NULL, &err);
    if (in_head) {
        CHECK_MSG(rc == 0, "rank %d: forward before the stalled head: %s", g->rank, err.msg);
        rc = dsv4_lm_head_dist(e, hid, 1, lg, &err);
    }
    const double waited = MPI_Wtime() - t0;
    CHECK_MSG(rc == DSV4_ERR_IO && strstr(err.msg, "no answer from rank 1") && strstr(err.msg, "peer timeout of 3 s"),
              "rank %d: rc %d msg '%s'", g->rank, rc, err.msg);
    CHECK_MSG(!strstr(err.msg, "ranks"), "rank %d named more than rank 1: %s", g->rank, err.msg);
    CHECK_MSG(waited >= 3.0 && waited < 20.0, "rank %d waited %.2f s", g->rank, waited);
    printf("rank %d: %s (after %.2f s)\n", g->rank, err.msg, waited);
    /* the group is unusable now: the next head call fails at once */
    rc = dsv4_lm_head_dist(e, hid, 1, lg, &err);
    CHECK_MSG(rc == DSV4_ERR_STATE && strstr(err.msg, "unusable"), "rank %d: after: rc %d '%s'", g->rank, rc, err.msg);
    const int failed = test_failed_;
    printf("rank %d: stopped-rank test (%s) %s\n", g->rank, in_head ? "head" : "forward", failed ? "FAILED" : "passed");
    fflush(stdout);
    if (g->rank == 0) {
        sleep(1); /* let the other ranks print */
        dsv4_dist_abort(g->d, failed ? 3 : 2);
    }
    sleep(30);
}

int main(int argc, char **argv) {
    ep_world g;
    if (ep_world_open(&argc, &argv, "test_dp_head", &g)) return 1;
    rng = 0x853c49e6748fea9bull + 0x9e3779b97f4a7c15ull * (uint64_t)(g.rank + 1); /* other rows per rank */
    if (argc > 3 && !strcmp(argv[2], "--stopped")) {
        stopped(&g, !strcmp(argv[3], "head"));
        return 1; /* not reached on a passing run: rank 0 aborts the job */
    }
    dsv4_engine_opts o = opts(&g, DSV4_PAR_EP | DSV4_PAR_DP | DSV4_PAR_DP_HEAD), ol = o;
    ol.dist = NULL;
    ol.parallel = 0;
    dsv4_engine *grp = NULL, *loc = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_engine_create(g.m, &o, &grp, &err) == 0, "create: %s", err.msg);
    CHECK(dsv4_engine_create(g.m, &ol, &loc, &err) == 0);
    if (grp && loc) {
        patterns(&g, grp, loc);
        refusals(&g, grp, loc);
    }
    dsv4_engine_free(grp);
    dsv4_engine_free(loc);
    return ep_world_close(&g);
}
