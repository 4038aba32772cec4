/* lmhead_dp.c — the LM head of a data-parallel group sharded over the vocabulary
 * (DSV4_PAR_DP_HEAD; spec/serving.md §b, §d). Under DP every rank is the home rank of its
 * own rows; with the full head each would read all V x D weights a call for them (1.06 GB
 * in BF16 at Flash width, a whole step's worth at small batches). Here each rank reads its
 * shard [lo, hi) once for every rank's rows:
 *
 *   1. agree: every rank's status, row count and kind (logits or argmax), one gather;
 *   2. rounds of up to c = max(1, DSV4_LMHEAD_ROWS / P) rows of each rank: the rows are
 *      allgathered (rank after rank), every rank computes its shard's logits of all of them
 *      and sends each home rank the columns of its rows (a logits call) or their argmax
 *      pairs (an argmax call) in one alltoallv; the home rank places the columns or reduces
 *      the pairs in the greedy order (lmhead.h);
 *   3. agree again on the statuses, so a failure after the exchange (a peer's id outside
 *      the vocabulary, a kernel's refusal) fails the call on every rank.
 *
 * Bitwise the full head's results: each logit is the same per-column dot product
 * (dsv4_lmhead_logits_range), and the greedy order is total, so reducing shards gives the
 * full row's argmax. Every collective completes within the peer timeout. */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "dist/dist.h"
#include "engine/engine.h"
#include "engine/lmhead.h"
#include "util/err.h"

/* Rows a shard's kernel call takes: the BF16 head at exactly 8 rows takes the GEMV of the
 * LM head (linear_fast.h bf16_gemv8_min_rows); at Flash width, 2 ranks x 8 rows, the 16
 * gathered rows in one call took 87-92 ms a step, in two 8-row calls 79 ms (bench_head,
 * BENCHMARKS.md session 40 dph). */
#define DP_KERNEL_ROWS 8

/* Own rows a rank brings to one round, and the most rows a round gathers. */
static int dp_own_rows(int P) { return DSV4_LMHEAD_ROWS / P > 1 ? DSV4_LMHEAD_ROWS / P : 1; }

/* The buffers of one DP head call (P ranks, vocabulary V, hidden D, widest shard w). */
typedef struct dp_bufs {
    int32_t *share;    /* (P, 2) every rank's (rows, kind) */
    float *h;          /* (G, D) a round's rows of every rank, rank after rank (G = c P) */
    float *l;          /* (G, w) this rank's shard of their logits, then (G, 2) argmax pairs
                        * after them: the alltoallv's send buffer */
    float *recv;       /* (c, V) my rows' columns of every shard, or (P, c) pairs */
    int *cnt;          /* (6, P) allgatherv counts, displacements (floats); alltoallv send
                        * counts, displacements, receive counts, displacements (bytes) */
} dp_bufs;

static int dp_take(dsv4_arena *a, int P, int64_t V, int64_t D, int64_t w, dp_bufs *b) {
    const int64_t c = dp_own_rows(P), G = c * P;
    const int64_t recv = c * V > 2 * G ? c * V : 2 * G;
    b->share = dsv4_arena_take_n(a, 2LL * P, sizeof(int32_t));
    b->h = dsv4_arena_take_n(a, G * D, sizeof(float));
    b->l = dsv4_arena_take_n(a, G * (w + 2), sizeof(float));
    b->recv = dsv4_arena_take_n(a, recv, sizeof(float));
    b->cnt = dsv4_arena_take_n(a, 6LL * P, sizeof(int));
    return b->share && b->h && b->l && b->recv && b->cnt;
}

size_t dsv4_lmhead_dp_scratch_bytes(int64_t V, int64_t D, int P) {
    if (P < 2) return 0;
    dsv4_arena m = dsv4_arena_measuring();
    int lo, hi; /* shard 0 is the widest */
    dsv4_lm_head_shard_range((int)V, 0, P, &lo, &hi);
    dp_bufs b;
    dp_take(&m, P, V, D, hi - lo, &b);
    /* dsv4_lmhead_logits_range's FP8 superset of a kernel call's rows, up to 127 before the shard */
    const int64_t sup = hi - lo + 127 < V ? hi - lo + 127 : V;
    dsv4_arena_take_n(&m, DP_KERNEL_ROWS * sup, sizeof(float));
    return m.peak;
}

#ifdef DSV4_HAVE_MPI

/* Checks the shared (rows, kind) of every rank (the peers' word), the same on every rank. */
static int check_share(const int32_t *share, int P, const char *fn, dsv4_err *err) {
    for (int q = 0; q < P; q++)
        if (share[2 * q] < 0 || (share[2 * q + 1] != DSV4_DP_HEAD_LOGITS && share[2 * q + 1] != DSV4_DP_HEAD_ARGMAX))
            return dsv4_fail(err, DSV4_ERR_STATE, "%s: rank %d sent %d rows of kind %d", fn, q, share[2 * q],
                             share[2 * q + 1]);
    return DSV4_OK;
}

/* One round: rank q's rows [t c, t c + a_q) gathered, this rank's shard computed, results to
 * their home ranks and placed in logits / ids / values at rows [t c, t c + a_me). */
static int dp_round(dsv4_engine *e, const dp_bufs *b, int t, const float *hidden, float *logits, int32_t *ids,
                    float *values, int rc, int *comm_failed, dsv4_err *err) {
    dsv4_dist *d = e->group;
    const int P = d->size, me = d->rank, V = e->cfg->vocab_size, D = e->cfg->hidden_size;
    const int c = dp_own_rows(P), r0 = t * c;
    int lo, hi;
    dsv4_lm_head_shard_range(V, me, P, &lo, &hi);
    const int w = hi > lo ? hi - lo : 0;
    int *gc = b->cnt, *gd = gc + P, *sc = gd + P, *sd = sc + P, *rcn = sd + P, *rd = rcn + P;
    int A = 0; /* rows gathered this round */
    for (int q = 0; q < P; q++) {
        const int n = b->share[2 * q] - r0, a = n < 0 ? 0 : n < c ? n : c;
        gc[q] = a * D;
        gd[q] = A * D;
        A += a;
    }
    const int a_me = gc[me] / D, kind = b->share[2 * me + 1];
    MPI_Request rq;
    int crc = dsv4_dist_complete(d, MPI_Iallgatherv(a_me ? hidden + (int64_t)r0 * D : NULL, gc[me], MPI_FLOAT,
                                                    b->h, gc, gd, MPI_FLOAT, d->comm, &rq),
                                 &rq, "lm_head: hidden rows allgather", err);
    if (crc) return *comm_failed = 1, crc;
    /* the shard's logits (A, w), DP_KERNEL_ROWS rows a kernel call */
    for (int k0 = 0; !rc && w && k0 < A; k0 += DP_KERNEL_ROWS) {
        const int nk = A - k0 < DP_KERNEL_ROWS ? A - k0 : DP_KERNEL_ROWS;
        rc = dsv4_lmhead_logits_range(e->k, &e->scratch, &e->model->head, b->h + (int64_t)k0 * D, nk, lo, hi,
                                      b->l + (int64_t)k0 * w, err);
    }
    /* sends: rank q's rows' columns, or their argmax pairs (after the logits) */
    dsv4_argmax *pairs = (dsv4_argmax *)(void *)(b->l + (int64_t)A * w); /* (A) */
    for (int q = 0, off = 0; q < P; q++) {
        const int a = gc[q] / D;
        if (b->share[2 * q + 1] == DSV4_DP_HEAD_ARGMAX) {
            dsv4_argmax_rows(b->l + (int64_t)off * w, a, w, lo, pairs + off);
            sc[q] = a * (int)sizeof(dsv4_argmax);
            sd[q] = (int)((int64_t)A * w * (int64_t)sizeof(float) + (int64_t)off * (int64_t)sizeof(dsv4_argmax));
        } else {
            sc[q] = a * w * (int)sizeof(float);
            sd[q] = off * w * (int)sizeof(float);
        }
        off += a;
    }
    /* receives: my a_me rows from every shard */
    for (int q = 0; q < P; q++) {
        int ql, qh;
        dsv4_lm_head_shard_range(V, q, P, &ql, &qh);
        const int qw = qh > ql ? qh - ql : 0;
        rcn[q] = kind == DSV4_DP_HEAD_ARGMAX ? a_me * (int)sizeof(dsv4_argmax) : a_me * qw * (int)sizeof(float);
        rd[q] = kind == DSV4_DP_HEAD_ARGMAX ? q * a_me * (int)sizeof(dsv4_argmax) : a_me * ql * (int)sizeof(float);
    }
    crc = dsv4_dist_complete(d, MPI_Ialltoallv(b->l, sc, sd, MPI_BYTE, b->recv, rcn, rd, MPI_BYTE, d->comm, &rq),
                             &rq, "lm_head: shard results to their home ranks", err);
    if (crc) return *comm_failed = 1, crc;
    if (rc || a_me == 0) return rc;
    if (kind == DSV4_DP_HEAD_LOGITS) {
        dsv4_lmhead_place_shards(logits + (int64_t)r0 * V, V, P, b->recv, a_me);
        return DSV4_OK;
    }
    const dsv4_argmax *got = (const dsv4_argmax *)(const void *)b->recv; /* (P, a_me) */
    for (int r = 0; r < a_me; r++) {
        dsv4_argmax best = DSV4_ARGMAX_NONE;
        for (int q = 0; q < P; q++)
            if (dsv4_argmax_better(got[q * a_me + r], best)) best = got[q * a_me + r];
        /* the winners come from peers: an id outside the vocabulary is a peer's fault */
        if (best.id < 0 || best.id >= V)
            return dsv4_fail(err, DSV4_ERR_STATE, "lm_head: the shards' argmax gave token id %d for row %d, "
                             "outside [0, %d)", best.id, r0 + r, V);
        ids[r0 + r] = best.id;
        if (values) values[r0 + r] = best.v;
    }
    return DSV4_OK;
}

int dsv4_lmhead_dp(dsv4_engine *e, const float *hidden, int n_rows, int kind, float *logits, int32_t *ids,
                   float *values, dsv4_err *err) {
    dsv4_dist *d = e->group;
    const int P = d->size, V = e->cfg->vocab_size, c = dp_own_rows(P);
    const char *fn = kind == DSV4_DP_HEAD_ARGMAX ? "lm_head_argmax" : "lm_head_dist";
    const size_t mark = dsv4_arena_mark(&e->scratch);
    int lo, hi;
    dsv4_lm_head_shard_range(V, 0, P, &lo, &hi);
    dp_bufs b = {0};
    int rc = DSV4_OK;
    if (n_rows < 0 || (n_rows > 0 && (!hidden || (kind == DSV4_DP_HEAD_ARGMAX ? !ids : !logits))))
        rc = dsv4_fail(err, DSV4_ERR_ARG, "%s: bad arguments (n_rows = %d)", fn, n_rows);
    else if ((int64_t)c * (V + 2LL * P) * (int64_t)sizeof(float) > INT_MAX) /* the exchange's byte counts */
        rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "%s: a vocabulary of %d is too wide to exchange", fn, V);
    else if (!dp_take(&e->scratch, P, V, e->cfg->hidden_size, hi - lo, &b))
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "%s: scratch arena too small", fn);
    /* a rank that failed above still takes part: its status fails the call everywhere (and
     * b.share is written only when every rank succeeded) */
    const int32_t mine[2] = {rc ? 0 : n_rows, kind};
    rc = dsv4_dist_agree_share(d, rc, 2, mine, b.share, fn, err);
    if (!rc) rc = check_share(b.share, P, fn, err);
    int rounds = 0;
    for (int q = 0; !rc && q < P; q++) {
        const int t = (int)(((int64_t)b.share[2 * q] + c - 1) / c);
        if (t > rounds) rounds = t;
    }
    /* a failure from here on (a kernel's, a peer's bad id) keeps this rank in the rounds, so
     * that no collective waits for it, and is shared at the end; a failed collective is not
     * (the group is unusable, or that collective's error is the call's on every rank) */
    int comm_failed = 0;
    for (int t = 0; !comm_failed && t < rounds; t++)
        rc = dp_round(e, &b, t, hidden, logits, ids, values, rc, &comm_failed, err);
    if (rounds > 0 && !comm_failed) rc = dsv4_dist_agree(d, rc, 0, NULL, NULL, 0, fn, err);
    dsv4_arena_release(&e->scratch, mark);
    return rc;
}

#else /* !DSV4_HAVE_MPI: a single process has no group */

int dsv4_lmhead_dp(dsv4_engine *e, const float *hidden, int n_rows, int kind, float *logits, int32_t *ids,
                   float *values, dsv4_err *err) {
    (void)hidden; (void)n_rows; (void)kind; (void)logits; (void)ids; (void)values;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "lm_head: engine %p has a group without MPI", (void *)e);
}

#endif
