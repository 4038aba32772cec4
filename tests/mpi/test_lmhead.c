/* test_lmhead.c — the vocabulary-sharded LM head (spec/serving.md §b), run under mpirun
 * with TP = the number of ranks:
 *  - shard ranges: contiguous, cover [0, V), sizes ceil(V/TP) (last short or empty);
 *  - sharded greedy argmax (per-shard best + MPI_Allreduce) against an independent
 *    first-maximum scan of the full row, on crafted rows: exact ties inside one shard and
 *    across shards, all-equal, -inf, NaN, +0/-0, FLT_MAX, maxima at the ends, V not a
 *    multiple of TP and V < TP (empty shards);
 *  - on a real model: logits gathered from the shards are bitwise the full head's, the
 *    sharded argmax equals the full argmax on rows with natural exact ties (unit hidden
 *    vectors pick one BF16 column of the head), and only the home rank's hidden is read.
 *
 *   mpirun -np TP test_lmhead MODEL_DIR
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "engine/lmhead.h"
#include "dsv4.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* Independent reference: the first index of the largest non-NaN value; 0 when all NaN. */
static int ref_argmax(const float *row, int V) {
    int best = -1;
    for (int i = 0; i < V; i++) {
        if (isnan(row[i])) continue;
        if (best < 0 || row[i] > row[best]) best = i;
    }
    return best < 0 ? 0 : best;
}

static int same_float(float a, float b) { return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b)); }

/* Rows of one crafted matrix (n_rows, V) and the shards' check. */
static void crafted(dsv4_dist *d, int V) {
    const int TP = dsv4_dist_size(d), me = dsv4_dist_rank(d);
    enum { NR = 12 };
    float *m = malloc(sizeof(float) * NR * V);
    for (int i = 0; i < NR * V; i++) m[i] = (float)(urand() * 2 - 1);
    float *r;
    int per = (V + TP - 1) / TP;
    /* 1: all equal */
    r = m + 1 * V; for (int i = 0; i < V; i++) r[i] = 0.5f;
    /* 2: the maximum twice, in the last and the first shard */
    r = m + 2 * V; r[V - 1] = 7.0f; r[V > 1 ? 1 : 0] = 7.0f;
    /* 3: twice in the last two shards (the later shard's id is higher) */
    r = m + 3 * V; if (V > per) { r[V - 1] = 9.0f; r[per] = 9.0f; }
    /* 4: all -inf */
    r = m + 4 * V; for (int i = 0; i < V; i++) r[i] = -INFINITY;
    /* 5: all NaN */
    r = m + 5 * V; for (int i = 0; i < V; i++) r[i] = NAN;
    /* 6: NaN first, the maximum at the end */
    r = m + 6 * V; r[0] = NAN; r[V - 1] = 3.0f;
    /* 7: +0 at the end and -0 earlier, the rest negative: -0 == +0, lower id wins */
    r = m + 7 * V; for (int i = 0; i < V; i++) r[i] = -1.0f - (float)i; r[V - 1] = 0.0f; r[V > 2 ? 2 : 0] = -0.0f;
    /* 8: FLT_MAX in every shard's last column */
    r = m + 8 * V; for (int q = 0; q < TP; q++) { int hi = (q + 1) * per < V ? (q + 1) * per : V; if (hi > q * per) r[hi - 1] = FLT_MAX; }
    /* 9: the same maximum twice inside my shard layout's middle shard */
    r = m + 9 * V; { int q = TP / 2, lo = q * per; if (lo + 1 < V) { r[lo] = 2.0f; r[lo + 1] = 2.0f; } }
    /* 10: +inf in two shards and NaN around */
    r = m + 10 * V; r[V / 2] = INFINITY; r[V - 1] = INFINITY; r[0] = NAN;
    /* 11: coarse values: many exact ties */
    r = m + 11 * V; for (int i = 0; i < V; i++) r[i] = (float)((int)(urand() * 4));

    int lo, hi;
    dsv4_lm_head_shard_range(V, me, TP, &lo, &hi);
    const int w = hi > lo ? hi - lo : 0;
    float *shard = malloc(sizeof(float) * NR * (w ? w : 1));
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < w; j++) shard[i * w + j] = m[i * V + lo + j];
    dsv4_argmax best[NR];
    dsv4_argmax_rows(shard, NR, w, lo, best);
    dsv4_err err = {0};
    CHECK(dsv4_argmax_allreduce(d, best, NR, &err) == 0);
    for (int i = 0; i < NR; i++) {
        const int id = ref_argmax(m + i * V, V);
        CHECK_MSG(best[i].id == id, "V %d TP %d row %d: id %d, want %d", V, TP, i, best[i].id, id);
        CHECK_MSG(same_float(best[i].v, m[i * V + id]), "V %d TP %d row %d: value %g, want %g", V, TP, i,
                  best[i].v, m[i * V + id]);
    }
    free(shard);
    free(m);
}

static void ranges(void) {
    const int Vs[] = {1, 3, 5, 512, 1023, 129280};
    for (int a = 0; a < 6; a++)
        for (int TP = 1; TP <= 9; TP++) {
            const int V = Vs[a], per = (V + TP - 1) / TP;
            int next = 0, ok = 1;
            for (int q = 0; q < TP; q++) {
                int lo, hi;
                dsv4_lm_head_shard_range(V, q, TP, &lo, &hi);
                if (hi <= lo) { ok &= lo == V && hi == V; continue; } /* empty: past the end */
                ok &= lo == next && lo == q * per && hi - lo <= per && (hi == V || hi - lo == per);
                next = hi;
            }
            CHECK_MSG(ok && next == V, "ranges V %d TP %d", V, TP);
        }
    int lo, hi;
    dsv4_lm_head_shard_range(129280, 7, 8, &lo, &hi);
    CHECK(lo == 7 * 16160 && hi == 129280); /* the spec's V/8 = 16,160 */
}

static void model(dsv4_dist *d, const char *dir) {
    const int me = dsv4_dist_rank(d);
    dsv4_err err = {0};
    dsv4_model *m = NULL;
    CHECK(dsv4_model_open(dir, &m, &err) == 0);
    if (!m) { fprintf(stderr, "%s\n", err.msg); return; }
    const dsv4_model_info info = dsv4_model_get_info(m);
    const int V = info.vocab_size, D = info.hidden_size;
    dsv4_engine_opts eo = {.max_context = 64, .max_seqs = 1, .threads = 1, .dist = d,
                           .parallel = DSV4_PAR_EP};
    dsv4_engine *e = NULL;
    CHECK(dsv4_engine_create(m, &eo, &e, &err) == 0);
    /* rows: random, zero (all logits 0), +-unit vectors (logits = one BF16 column of the
     * head, where the largest value often occurs twice: exact ties) */
    const int NR = 2 + 2 * D;
    float *h = calloc((size_t)NR * D, sizeof(float));
    for (int j = 0; j < D; j++) h[j] = (float)(urand() * 2 - 1);
    for (int j = 0; j < D; j++) {
        h[(size_t)(2 + 2 * j) * D + j] = 1.0f;
        h[(size_t)(3 + 2 * j) * D + j] = -1.0f;
    }
    float *full = malloc(sizeof(float) * NR * V), *got = malloc(sizeof(float) * NR * V);
    int32_t *ids = malloc(sizeof(int32_t) * NR);
    float *vals = malloc(sizeof(float) * NR);
    /* every rank calls; only rank 0 passes hidden rows (the others' are never read) */
    CHECK(dsv4_lm_head_dist(e, me == 0 ? h : NULL, NR, me == 0 ? got : NULL, &err) == 0);
    CHECK(dsv4_lm_head_argmax(e, me == 0 ? h : NULL, NR, ids, vals, &err) == 0);
    CHECK(dsv4_lm_head(e, h, NR, full, &err) == 0); /* local, full head */
    if (me == 0) CHECK_MSG(memcmp(full, got, sizeof(float) * NR * V) == 0, "gathered logits differ");
    int tied_rows = 0, cross_shard = 0;
    for (int i = 0; i < NR; i++) {
        const int id = ref_argmax(full + (size_t)i * V, V);
        int count = 0, last = id;
        for (int v = 0; v < V; v++)
            if (full[(size_t)i * V + v] == full[(size_t)i * V + id]) count++, last = v;
        tied_rows += count > 1;
        const int per = (V + dsv4_dist_size(d) - 1) / dsv4_dist_size(d);
        cross_shard += count > 1 && last / per != id / per;
        CHECK_MSG(ids[i] == id && vals[i] == full[(size_t)i * V + id], "row %d: id %d, want %d", i, ids[i], id);
    }
    if (me == 0) printf("model rows %d: %d with a tie at the maximum, %d across shards\n", NR, tied_rows, cross_shard);
    CHECK_MSG(tied_rows >= 3 && cross_shard >= 2, "only %d rows with an exact tie at the maximum, %d across shards",
              tied_rows, cross_shard);
    /* a shard alone, also with a count that does not divide V */
    for (int n = 1; n <= 3; n++)
        for (int q = 0; q < n; q++) {
            int lo, hi;
            dsv4_lm_head_shard_range(V, q, n, &lo, &hi);
            float *part = malloc(sizeof(float) * NR * (hi - lo));
            CHECK(dsv4_lm_head_shard(e, h, NR, q, n, part, &err) == 0);
            int same = 1;
            for (int i = 0; i < NR; i++)
                same &= memcmp(part + (size_t)i * (hi - lo), full + (size_t)i * V + lo, sizeof(float) * (hi - lo)) == 0;
            CHECK_MSG(same, "shard %d of %d differs from the full head", q, n);
            free(part);
        }
    CHECK(dsv4_lm_head_shard(e, h, NR, 3, 3, full, &err) == DSV4_ERR_ARG);
    free(h); free(full); free(got); free(ids); free(vals);
    dsv4_engine_free(e);
    dsv4_model_close(m);
}

int main(int argc, char **argv) {
    dsv4_dist *d = NULL;
    dsv4_err err = {0};
    if (dsv4_dist_init(&argc, &argv, &d, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    CHECK(dsv4_dist_size(d) >= 2);
    ranges();
    const int Vs[] = {512, 1023, 5, 3, 1, 129280};
    for (int i = 0; i < 6; i++) crafted(d, Vs[i]);
    if (argc > 1) model(d, argv[1]);
    int rc = test_report();
    dsv4_dist_finalize(d);
    return rc;
}
