/* test_ep_engine.c — the engine under expert parallelism, SPMD through the public API
 * (spec/serving.md §b, §d), against a single-process engine run by rank 0:
 *  - three sequences, mixed calls (batched prefills of different lengths, a chunk next to
 *    decode rows, decode steps), MTP spans, small exchange waves: the home rank's hidden
 *    states, streams and MTP hidden states are bitwise the single-process ones; non-home
 *    ranks hold no rows and mirror the sequence lengths;
 *  - the same with adversarial routing (every route it can to the last rank, so nearly all
 *    rows leave the home rank);
 *  - the greedy argmax over the vocabulary-sharded head equals the local one;
 *  - failures without hangs: bad input on every rank (all refuse, nothing changes); the
 *    home rank's cache running full mid-run (it alone reserves pages): every rank returns
 *    the error at the first MoE exchange, no sequence changes anywhere, later calls work.
 *
 *   mpirun -np EP test_ep_engine MODEL_DIR
 */
#include "ep_fixture.h"

enum { NSEQ = 3, MAXC = 256 };

typedef struct world {
    ep_world g;
    int32_t tok[NSEQ][MAXC];
} world;

/* Both engines of one scenario; loc exists on rank 0 only. */
typedef struct pair {
    dsv4_engine *ep, *loc;
    int hs[NSEQ], hl[NSEQ];
    float *bias;      /* adversarial gate bias (E), or NULL */
    int32_t *table;   /* adversarial tid2eid (V, K), or NULL */
} pair;

static uint64_t rng = 0x853c49e6748fea9bull; /* the same on every rank: SPMD inputs */
static uint32_t urand32(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* Every rank: the EP engine; rank 0: also the local one, then the outputs compared. */
static int both_forward(world *w, pair *p, dsv4_span *sp, int n, const char *what) {
    int rows_h = 0, rows_s = 0;
    for (int i = 0; i < n; i++) { rows_h += sp[i].n_hidden; rows_s += sp[i].n_streams; }
    const size_t nh = (size_t)rows_h * w->g.D, ns = (size_t)rows_s * w->g.hc * w->g.D;
    float *h1 = calloc(nh + 1, sizeof(float)), *s1 = calloc(ns + 1, sizeof(float));
    float *h2 = calloc(nh + 1, sizeof(float)), *s2 = calloc(ns + 1, sizeof(float));
    dsv4_span loc[NSEQ];
    dsv4_err err = {0};
    int rc = dsv4_forward(p->ep, sp, n, h1, s1, &err);
    /* every rank must have the same verdict */
    int lo, hi;
    MPI_Allreduce(&rc, &lo, 1, MPI_INT, MPI_MIN, w->g.d->comm);
    MPI_Allreduce(&rc, &hi, 1, MPI_INT, MPI_MAX, w->g.d->comm);
    CHECK_MSG(lo == hi, "%s: ranks disagree on the result (%d..%d; rank %d: %s)", what, lo, hi, w->g.rank, err.msg);
    if (w->g.rank == 0) {
        for (int i = 0; i < n; i++) {
            loc[i] = sp[i];
            for (int j = 0; j < NSEQ; j++) if (sp[i].seq == p->hs[j]) loc[i].seq = p->hl[j];
        }
        dsv4_err err2 = {0};
        CHECK_MSG(dsv4_forward(p->loc, loc, n, h2, s2, &err2) == rc, "%s: local engine gave '%s', EP '%s'",
                  what, err2.msg, err.msg);
        CHECK_MSG(memcmp(h1, h2, nh * sizeof(float)) == 0, "%s: hidden rows differ", what);
        CHECK_MSG(memcmp(s1, s2, ns * sizeof(float)) == 0, "%s: streams differ", what);
    }
    if (rows_h && rc == 0) {
        /* greedy over the sharded head (collective) vs the local head */
        int32_t *ids = malloc(sizeof(int32_t) * rows_h), *ids2 = malloc(sizeof(int32_t) * rows_h);
        CHECK(dsv4_lm_head_argmax(p->ep, h1, rows_h, ids, NULL, &err) == 0);
        if (w->g.rank == 0) {
            CHECK(dsv4_lm_head_argmax(p->loc, h2, rows_h, ids2, NULL, &err) == 0);
            CHECK_MSG(memcmp(ids, ids2, sizeof(int32_t) * rows_h) == 0, "%s: greedy ids differ", what);
        }
        free(ids); free(ids2);
    }
    free(h1); free(s1); free(h2); free(s2);
    return rc;
}

/* MTP rows [start, start + n) of sequence i, streams from the local engine (rank 0). */
static void both_mtp(world *w, pair *p, int i, int64_t start, int n, const float *streams, const char *what) {
    float *h1 = calloc((size_t)n * w->g.D, sizeof(float)), *h2 = calloc((size_t)n * w->g.D, sizeof(float));
    dsv4_mtp_span sp = {p->hs[i], start, n, w->tok[i] + start + 1, streams};
    dsv4_err err = {0};
    CHECK_MSG(dsv4_mtp_forward(p->ep, &sp, 1, h1, &err) == 0, "%s: %s", what, err.msg);
    if (w->g.rank == 0) {
        sp.seq = p->hl[i];
        CHECK(dsv4_mtp_forward(p->loc, &sp, 1, h2, &err) == 0);
        CHECK_MSG(memcmp(h1, h2, (size_t)n * w->g.D * sizeof(float)) == 0, "%s: MTP hidden differs", what);
    }
    free(h1); free(h2);
}

static void lengths_agree(world *w, pair *p, const char *what) {
    for (int i = 0; i < NSEQ; i++) {
        const int64_t n = dsv4_seq_length(p->ep, p->hs[i]), m = dsv4_seq_mtp_length(p->ep, p->hs[i]);
        const int64_t broken = n >= 0 && p->ep->seqs[p->hs[i]].broken;
        int64_t mine[3] = {n, m, broken}, lo[3], hi[3];
        MPI_Allreduce(mine, lo, 3, MPI_INT64_T, MPI_MIN, w->g.d->comm);
        MPI_Allreduce(mine, hi, 3, MPI_INT64_T, MPI_MAX, w->g.d->comm);
        CHECK_MSG(lo[0] == hi[0] && lo[1] == hi[1] && lo[2] == hi[2] && hi[2] == 0,
                  "%s: ranks disagree on sequence %d (or it broke)", what, i);
        if (w->g.rank == 0)
            CHECK(n == dsv4_seq_length(p->loc, p->hl[i]) && m == dsv4_seq_mtp_length(p->loc, p->hl[i]));
    }
}

static void make_pair(world *w, pair *p, uint64_t cache_bytes, int adversarial) {
    dsv4_engine_opts o = {.max_context = MAXC, .max_seqs = NSEQ, .c_max = 64, .mtp = 1,
                          .threads = 1, .cache_bytes = cache_bytes};
    dsv4_err err = {0};
    memset(p, 0, sizeof *p);
    dsv4_engine_opts oe = o;
    oe.dist = w->g.d;
    oe.parallel = DSV4_PAR_EP;
    oe.ep_wave = 7;
    CHECK(dsv4_engine_create(w->g.m, &oe, &p->ep, &err) == 0);
    CHECK(p->ep && p->ep->idle == (w->g.rank != 0) && p->ep->ep != NULL);
    if (w->g.rank == 0) CHECK(dsv4_engine_create(w->g.m, &o, &p->loc, &err) == 0);
    CHECK(dsv4_seq_create(p->ep, &p->hs[0], &err) == 0);
    /* a follower holds no caches: a snapshot's load refuses there; a fork is the lengths
     * alone, in the slot the home rank's fork takes (script() runs one at an unaligned length) */
    int copy = -1;
    CHECK_MSG(dsv4_seq_fork(p->ep, p->hs[0], &copy, &err) == 0, "fork on rank %d: %s", w->g.rank, err.msg);
    CHECK(copy == p->hs[0] + 1 && dsv4_seq_length(p->ep, copy) == 0);
    CHECK(dsv4_seq_free(p->ep, copy, &err) == 0);
    if (w->g.rank != 0) {
        dsv4_snapshot *snap = NULL;
        CHECK(dsv4_snapshot_load(p->ep, "/nonexistent.kv", &snap, &err) == DSV4_ERR_UNSUPPORTED && !snap);
    }
    for (int i = 0; i < NSEQ; i++) {
        if (i) CHECK(dsv4_seq_create(p->ep, &p->hs[i], &err) == 0);
        if (p->loc) CHECK(dsv4_seq_create(p->loc, &p->hl[i], &err) == 0);
    }
    if (!adversarial) return;
    dsv4_engine *es[2] = {p->ep, p->loc};
    ep_fixture_adversarial(w->g.m, w->g.size, es, 2, &p->bias, &p->table);
}

static void free_pair(pair *p) {
    dsv4_engine_free(p->ep);
    dsv4_engine_free(p->loc);
    free(p->bias);
    free(p->table);
}

/* The mixed script. */
static void script(world *w, int adversarial) {
    int ok;
    const char *what = adversarial ? "adversarial" : "mixed";
    pair p;
    make_pair(w, &p, 0, adversarial);
    const int hcD = w->g.hc * w->g.D;
    float *streams = calloc((size_t)NSEQ * MAXC * hcD, sizeof(float)); /* (NSEQ, MAXC, hc, D), rank 0 */
    dsv4_err err = {0};
    /* call 1: two prefills, A wants every row's hidden and streams, B its last row */
    dsv4_span sp[NSEQ] = {
        {.seq = p.hs[0], .start = 0, .n_tokens = 40, .tokens = w->tok[0], .n_hidden = 40, .n_streams = 40},
        {.seq = p.hs[1], .start = 0, .n_tokens = 17, .tokens = w->tok[1], .n_hidden = 1, .n_streams = 0},
    };
    ok = both_forward(w, &p, sp, 2, what) == 0;
    /* streams of A for the MTP, from the local engine (rank 0 only; others pass zeros) */
    if (w->g.rank == 0) {
        dsv4_engine_opts o = {.max_context = MAXC, .max_seqs = 1, .mtp = 1, .threads = 1};
        dsv4_engine *e2;
        int s;
        CHECK(dsv4_engine_create(w->g.m, &o, &e2, &err) == 0 && dsv4_seq_create(e2, &s, &err) == 0);
        dsv4_span a = {.seq = s, .start = 0, .n_tokens = 60, .tokens = w->tok[0], .n_streams = 60};
        CHECK(dsv4_forward(e2, &a, 1, NULL, streams, &err) == 0);
        dsv4_engine_free(e2);
    }
    both_mtp(w, &p, 0, 0, 39, streams, what);
    /* call 2: A decodes one row next to B's next chunk and C's prefill */
    dsv4_span sp2[NSEQ] = {
        {.seq = p.hs[1], .start = 17, .n_tokens = 30, .tokens = w->tok[1] + 17, .n_hidden = 2, .n_streams = 3},
        {.seq = p.hs[0], .start = 40, .n_tokens = 1, .tokens = w->tok[0] + 40, .n_hidden = 1, .n_streams = 1},
        {.seq = p.hs[2], .start = 0, .n_tokens = 5, .tokens = w->tok[2], .n_hidden = 5, .n_streams = 0},
    };
    ok &= both_forward(w, &p, sp2, 3, what) == 0;
    both_mtp(w, &p, 0, 39, 2, streams + (size_t)39 * hcD, what);
    /* decode steps of all three; then C's slot holds a fork of A at its unaligned length
     * (the home rank copies A's state, a follower its lengths) and the steps go on: the
     * fork's rows are the local fork's, bitwise */
    int64_t at[NSEQ] = {41, 47, 5};
    const int32_t *toks[NSEQ] = {w->tok[0], w->tok[1], w->tok[2]};
    for (int step = 0; step < 8; step++) {
        if (step == 6) {
            CHECK(dsv4_seq_free(p.ep, p.hs[2], &err) == 0);
            CHECK_MSG(dsv4_seq_fork(p.ep, p.hs[0], &p.hs[2], &err) == 0, "%s: fork: %s", what, err.msg);
            if (p.loc) {
                CHECK(dsv4_seq_free(p.loc, p.hl[2], &err) == 0);
                CHECK(dsv4_seq_fork(p.loc, p.hl[0], &p.hl[2], &err) == 0);
            }
            at[2] = at[0];
            toks[2] = w->tok[0];
        }
        dsv4_span d[NSEQ];
        for (int i = 0; i < NSEQ; i++)
            d[i] = (dsv4_span){.seq = p.hs[i], .start = at[i], .n_tokens = 1, .tokens = toks[i] + at[i],
                               .n_hidden = 1, .n_streams = 1};
        ok &= both_forward(w, &p, d, NSEQ, what) == 0;
        for (int i = 0; i < NSEQ; i++) at[i]++;
    }
    CHECK_MSG(ok, "%s: a call failed", what);
    lengths_agree(w, &p, what);
    free(streams);
    free_pair(&p);
}

/* Failures: identical bad input, then the home rank's cache running full. */
static void failures(world *w) {
    dsv4_err err = {0};
    pair p;
    make_pair(w, &p, 0, 0);
    const uint64_t budget = ep_fixture_min_budget(p.ep, NULL, (dsv4_engine_opts){0});
    free_pair(&p);
    make_pair(w, &p, budget, 0);

    int32_t bad[3] = {1, w->g.V, 2};
    dsv4_span sp = {.seq = p.hs[0], .start = 0, .n_tokens = 3, .tokens = bad, .n_hidden = 1};
    float *h = calloc((size_t)64 * w->g.D, sizeof(float));
    CHECK(dsv4_forward(p.ep, &sp, 1, h, NULL, &err) == DSV4_ERR_ARG && strstr(err.msg, "token id"));
    lengths_agree(w, &p, "bad input");

    /* prefill the sequences chunk by chunk until the home rank's pool is full */
    int rc = 0, full_seq = -1;
    int64_t len[NSEQ] = {0, 0, 0};
    for (int i = 0; i < NSEQ && !rc; i++)
        for (int k = 0; k < MAXC / 64 && !rc; k++) {
            dsv4_span c = {.seq = p.hs[i], .start = len[i], .n_tokens = 64, .tokens = w->tok[i] + len[i],
                           .n_hidden = 1};
            rc = both_forward(w, &p, &c, 1, "fill");
            if (!rc) len[i] += 64;
            else full_seq = i;
        }
    CHECK_MSG(rc == DSV4_ERR_CACHE_FULL && full_seq > 0, "the pool never ran full (rc %d)", rc);
    lengths_agree(w, &p, "cache full");
    if (full_seq > 0) {
        CHECK(dsv4_seq_length(p.ep, p.hs[full_seq]) == len[full_seq]);
        /* nothing broke: free sequence 0 everywhere, the refused call runs, then decode */
        CHECK(dsv4_seq_free(p.ep, p.hs[0], &err) == 0);
        if (p.loc) CHECK(dsv4_seq_free(p.loc, p.hl[0], &err) == 0);
        const int64_t at = len[full_seq];
        dsv4_span c = {.seq = p.hs[full_seq], .start = at, .n_tokens = 64, .tokens = w->tok[full_seq] + at,
                       .n_hidden = 1};
        CHECK(both_forward(w, &p, &c, 1, "after cache full") == 0);
        dsv4_span d = {.seq = p.hs[full_seq], .start = at + 64, .n_tokens = 1,
                       .tokens = w->tok[full_seq] + at + 64, .n_hidden = 1};
        CHECK(both_forward(w, &p, &d, 1, "after cache full") == 0);
        lengths_agree(w, &p, "after cache full");
    }
    free(h);
    free_pair(&p);
}

int main(int argc, char **argv) {
    world w;
    if (ep_world_open(&argc, &argv, "test_ep_engine", &w.g)) return 1;
    for (int i = 0; i < NSEQ; i++)
        for (int j = 0; j < MAXC; j++) w.tok[i][j] = (int32_t)(urand32() % (uint32_t)w.g.V);
    script(&w, 0);
    script(&w, 1);
    failures(&w);
    return ep_world_close(&w.g);
}
