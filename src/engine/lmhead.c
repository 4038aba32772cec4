/* lmhead.c — the LM head over vocabulary shards and the exact sharded greedy argmax (see
 * lmhead.h, spec/serving.md §b). */
#include "engine/lmhead.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "engine/engine.h"
#include "util/argmax.h"
#include "util/err.h"
#include "util/fpenv.h"

void dsv4_lm_head_shard_range(int vocab, int shard, int n_shards, int *lo, int *hi) {
    const int64_t per = n_shards > 0 ? ((int64_t)vocab + n_shards - 1) / n_shards : vocab;
    int64_t a = (int64_t)shard * per, b = a + per;
    if (a > vocab) a = vocab;
    if (b > vocab) b = vocab;
    *lo = (int)a;
    *hi = (int)b;
}

void dsv4_argmax_rows(const float *logits, int n_rows, int n_cols, int32_t id0, dsv4_argmax *out) {
    for (int r = 0; r < n_rows; r++) {
        const float *row = logits + (int64_t)r * n_cols;
        /* dsv4_argmax_index's order is dsv4_argmax_better's: the largest non-NaN value, ties to
         * the lowest id; a row of NaN only ranks its first NaN best */
        const int32_t j = dsv4_argmax_index(row, n_cols);
        out[r] = j >= 0 ? (dsv4_argmax){row[j], id0 + j}
                        : n_cols > 0 ? (dsv4_argmax){row[0], id0} : DSV4_ARGMAX_NONE;
    }
}

/* The buffers of a single-process head call: (rows, width) logits, (rows) argmax pairs. */
static int head_take(dsv4_arena *a, int rows, int64_t width, float **l, dsv4_argmax **best) {
    *l = dsv4_arena_take_n(a, (int64_t)rows * width, sizeof(float));
    if (best) *best = dsv4_arena_take_n(a, rows, sizeof(dsv4_argmax));
    return *l && (!best || *best);
}

/* The buffers of a group call, DSV4_LMHEAD_ROWS rows at a time (any rank's shard is at most
 * w wide). */
typedef struct group_bufs {
    float *h;           /* (rows, D) the broadcast hidden rows; the home rank reads its own */
    float *l;           /* (rows, w) this rank's shard of the logits */
    dsv4_argmax *best;  /* (rows) argmax call: the pairs */
    float *all;         /* (rows, V) logits call, home rank: the gathered shards */
    int *cnt;           /* (2, P) logits call, home rank: gather counts, then offsets */
} group_bufs;

static int group_take(dsv4_arena *a, int rows, int64_t D, int64_t w, int64_t V, int P, int home,
                      int logits, group_bufs *g) {
    memset(g, 0, sizeof *g);
    int ok = 1;
    if (!home) ok = (g->h = dsv4_arena_take_n(a, rows * D, sizeof(float))) != NULL;
    ok = (g->l = dsv4_arena_take_n(a, rows * w, sizeof(float))) != NULL && ok;
    if (!logits) {
        ok = (g->best = dsv4_arena_take_n(a, rows, sizeof(dsv4_argmax))) != NULL && ok;
    } else if (home) {
        ok = (g->all = dsv4_arena_take_n(a, rows * V, sizeof(float))) != NULL && ok;
        ok = (g->cnt = dsv4_arena_take_n(a, 2LL * P, sizeof(int))) != NULL && ok;
    }
    return ok;
}

size_t dsv4_lmhead_scratch_bytes(int64_t V, int64_t D, int P) {
    dsv4_arena m = dsv4_arena_measuring();
    float *l;
    dsv4_argmax *best;
    head_take(&m, DSV4_LMHEAD_ROWS, V, &l, &best); /* the FP8 superset is at most V wide too */
    dsv4_arena_take_n(&m, DSV4_LMHEAD_ROWS * D, sizeof(float)); /* dsv4_lmhead_local's aligned rows */
    size_t most = m.peak;
    int lo, hi; /* shard 0 is the widest */
    dsv4_lm_head_shard_range((int)V, 0, P, &lo, &hi);
    for (int call = 0; P > 1 && call < 4; call++) { /* argmax / logits, home rank or not */
        m = dsv4_arena_measuring();
        group_bufs g;
        group_take(&m, DSV4_LMHEAD_ROWS, D, hi - lo, V, P, call & 1, call >> 1, &g);
        /* dsv4_lmhead_logits_range's FP8 superset, up to 127 rows before the shard */
        head_take(&m, DSV4_LMHEAD_ROWS, hi - lo + 127 < V ? hi - lo + 127 : V, &l, NULL);
        if (m.peak > most) most = m.peak;
    }
    const size_t dp = dsv4_lmhead_dp_scratch_bytes(V, D, P);
    return dp > most ? dp : most;
}

int dsv4_lmhead_logits_range(dsv4_kctx *k, dsv4_arena *scratch, const dsv4_mat *head,
                             const float *hidden, int n_rows, int lo, int hi, float *logits,
                             dsv4_err *err) {
    if (lo < 0 || hi > head->rows || n_rows < 0)
        return dsv4_fail(err, DSV4_ERR_ARG, "lm_head: rows [%d, %d) of a %lld-row head", lo, hi,
                         (long long)head->rows);
    if (hi <= lo || n_rows == 0) return DSV4_OK;
    dsv4_mat view;
    if (dsv4_mat_rows(head, lo, hi - lo, &view) == 0) {
        dsv4_linear(k, &view, hidden, n_rows, logits);
        return DSV4_OK;
    }
    /* FP8 heads slice only at 128-row scale blocks: run the aligned superset, keep ours */
    const int a = lo / 128 * 128, w = hi - a, n = hi - lo;
    if (dsv4_mat_rows(head, a, w, &view) != 0)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "lm_head: head format %d cannot be sliced at row %d",
                         (int)head->fmt, a);
    const size_t mark = dsv4_arena_mark(scratch);
    const int chunk = n_rows < DSV4_LMHEAD_ROWS ? n_rows : DSV4_LMHEAD_ROWS;
    float *tmp; /* (chunk, hi - a) */
    if (!head_take(scratch, chunk, w, &tmp, NULL)) {
        dsv4_arena_release(scratch, mark);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "lm_head: scratch arena too small for %d rows of %d", chunk, w);
    }
    const int64_t D = head->cols;
    for (int r0 = 0; r0 < n_rows; r0 += chunk) {
        const int nr = n_rows - r0 < chunk ? n_rows - r0 : chunk;
        dsv4_linear(k, &view, hidden + r0 * D, nr, tmp);
        for (int r = 0; r < nr; r++)
            memcpy(logits + (int64_t)(r0 + r) * n, tmp + (int64_t)r * w + (lo - a), (size_t)n * sizeof(float));
    }
    dsv4_arena_release(scratch, mark);
    return DSV4_OK;
}

int dsv4_lmhead_local(dsv4_kctx *k, dsv4_arena *scratch, const dsv4_mat *head, const float *hidden, int n_rows,
                      float *logits, dsv4_err *err) {
    const int64_t D = head->cols;
    if (((uintptr_t)hidden & (DSV4_ARENA_ALIGN - 1)) == 0 || n_rows <= 0 || n_rows > DSV4_LMHEAD_ROWS) {
        dsv4_linear(k, head, hidden, n_rows, logits);
        return DSV4_OK;
    }
    const size_t mark = dsv4_arena_mark(scratch);
    float *h = dsv4_arena_take_n(scratch, (int64_t)n_rows * D, sizeof(float)); /* (n_rows, D), aligned */
    if (!h) {
        dsv4_arena_release(scratch, mark);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "lm_head: scratch arena too small for %d rows of %lld", n_rows,
                         (long long)D);
    }
    memcpy(h, hidden, sizeof(float) * (size_t)(n_rows * D));
    dsv4_linear(k, head, h, n_rows, logits);
    dsv4_arena_release(scratch, mark);
    return DSV4_OK;
}

static int lm_head_shard_body(dsv4_engine *e, const float *hidden, int n_rows, int shard, int n_shards,
                              float *logits, dsv4_err *err) {
    const int V = e->cfg->vocab_size;
    if (n_shards < 1 || shard < 0 || shard >= n_shards)
        return dsv4_fail(err, DSV4_ERR_ARG, "lm_head: shard %d of %d", shard, n_shards);
    if (n_rows < 0 || (n_rows > 0 && (!hidden || !logits)))
        return dsv4_fail(err, DSV4_ERR_ARG, "lm_head: bad arguments (n_rows = %d)", n_rows);
    int lo, hi;
    dsv4_lm_head_shard_range(V, shard, n_shards, &lo, &hi);
    return dsv4_lmhead_logits_range(e->k, &e->scratch, &e->model->head, hidden, n_rows, lo, hi, logits, err);
}

int dsv4_lm_head_shard(dsv4_engine *e, const float *hidden, int n_rows, int shard, int n_shards,
                       float *logits, dsv4_err *err) {
    const dsv4_fpenv f = dsv4_fpenv_enter(); /* util/fpenv.h */
    const int rc = lm_head_shard_body(e, hidden, n_rows, shard, n_shards, logits, err);
    dsv4_fpenv_leave(f);
    return rc;
}

#ifdef DSV4_HAVE_MPI

static int mpi_fail(dsv4_err *err, int mrc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(mrc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", mrc);
    return dsv4_fail(err, DSV4_ERR_IO, "lm_head: %s failed: %s", what, s);
}

/* A collective started with result mrc, completed within the peer timeout. */
static int done(dsv4_dist *d, int mrc, MPI_Request *rq, const char *what, dsv4_err *err) {
    char label[96];
    snprintf(label, sizeof label, "lm_head: %s", what);
    return dsv4_dist_complete(d, mrc, rq, label, err);
}

/* MPI user operator: inout[i] = the better of in[i], inout[i]. */
static void argmax_op(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const dsv4_argmax *a = in;
    dsv4_argmax *b = inout;
    for (int i = 0; i < *len; i++)
        if (dsv4_argmax_better(a[i], b[i])) b[i] = a[i];
}

int dsv4_argmax_allreduce(dsv4_dist *d, dsv4_argmax *pairs, int n_rows, dsv4_err *err) {
    if (!d || d->size < 2 || n_rows == 0) return DSV4_OK;
    MPI_Op op;
    int mrc = MPI_Op_create(argmax_op, 1, &op);
    if (mrc != MPI_SUCCESS) return mpi_fail(err, mrc, "MPI_Op_create");
    MPI_Request rq;
    int rc = done(d, MPI_Iallreduce(MPI_IN_PLACE, pairs, n_rows, MPI_FLOAT_INT, op, d->comm, &rq), &rq,
                  "argmax reduction", err);
    if (!d->broken) MPI_Op_free(&op); /* a timed-out reduction may still use it */
    return rc;
}

/* Every rank learns whether any rank failed (rc != 0) and that all ranks asked for the same
 * number of rows (a different count would make the shards' sizes disagree) before the
 * data collectives. */
static int group_agree(dsv4_dist *d, int rc, int n_rows, dsv4_err *err) {
    uint8_t dig[1][32] = {{0}};
    const int64_t n = n_rows;
    memcpy(dig[0], &n, sizeof n);
    static const char *const names[] = {"row count"};
    return dsv4_dist_agree(d, rc, 1, (const uint8_t(*)[32])dig, names, DSV4_ERR_ARG, "lm_head", err);
}

/* One chunk of n of a group call's n_total rows: every rank agrees (local_rc, n_total),
 * the home rank's hidden rows reach g->h elsewhere, and this rank's shard [lo, hi) of
 * their logits goes to g->l (n, hi - lo). */
static int shard_pass(dsv4_engine *e, const float *hidden, int n, int n_total, int local_rc,
                      const group_bufs *g, int lo, int hi, dsv4_err *err) {
    dsv4_dist *d = e->group;
    const int D = e->cfg->hidden_size;
    const float *h = d->rank == 0 ? hidden : g->h; /* (n, D) */
    int rc = group_agree(d, local_rc, n_total, err);
    MPI_Request rq;
    if (!rc && n > 0)
        rc = done(d, MPI_Ibcast((void *)h, n * D, MPI_FLOAT, 0, d->comm, &rq), &rq, "hidden row broadcast", err);
    if (!rc) rc = dsv4_lmhead_logits_range(e->k, &e->scratch, &e->model->head, h, n, lo, hi, g->l, err);
    return rc;
}

/* The arguments every rank checks, and this rank's buffers for a group call of n_rows
 * rows (their chunk size in *chunk, the shard in *lo, *hi); the failure to report if any. */
static int group_begin(dsv4_engine *e, const float *hidden, int n_rows, int logits, const void *out,
                       group_bufs *g, int *chunk, int *lo, int *hi, dsv4_err *err) {
    const dsv4_dist *d = e->group;
    const int V = e->cfg->vocab_size, home = d->rank == 0;
    memset(g, 0, sizeof *g);
    dsv4_lm_head_shard_range(V, d->rank, d->size, lo, hi);
    if (*hi < *lo) *hi = *lo;
    *chunk = n_rows < DSV4_LMHEAD_ROWS ? n_rows : DSV4_LMHEAD_ROWS;
    if (n_rows < 0 || (home && n_rows > 0 && (!hidden || !out)))
        return dsv4_fail(err, DSV4_ERR_ARG, "lm_head: bad arguments (n_rows = %d)", n_rows);
    if (!group_take(&e->scratch, *chunk, e->cfg->hidden_size, *hi - *lo, V, d->size, home, logits, g))
        return dsv4_fail(err, DSV4_ERR_NOMEM, "lm_head: scratch arena too small for %d rows", *chunk);
    return DSV4_OK;
}

static int lm_head_dist_body(dsv4_engine *e, const float *hidden, int n_rows, float *logits, dsv4_err *err) {
    if (e->dp_head) return dsv4_lmhead_dp(e, hidden, n_rows, DSV4_DP_HEAD_LOGITS, logits, NULL, NULL, err);
    /* under DP the rows are this rank's own: the full head, locally */
    if (!e->group || e->dp) return dsv4_lm_head(e, hidden, n_rows, logits, err);
    dsv4_dist *d = e->group;
    const int V = e->cfg->vocab_size, D = e->cfg->hidden_size, P = d->size, home = d->rank == 0;
    const size_t mark = dsv4_arena_mark(&e->scratch);
    group_bufs g;
    int chunk, lo, hi;
    int rc = group_begin(e, hidden, n_rows, 1, logits, &g, &chunk, &lo, &hi, err);
    /* chunk after chunk: shards computed, gathered on the home rank shard after shard, the
     * rows interleaved into logits */
    int r0 = 0;
    do {
        const int n = n_rows - r0 < chunk ? n_rows - r0 : chunk;
        if ((rc = shard_pass(e, home && n ? hidden + (int64_t)r0 * D : NULL, n, n_rows, rc, &g, lo, hi, err)))
            break;
        int *cnt = g.cnt, *dsp = g.cnt ? g.cnt + P : NULL;
        for (int q = 0; home && q < P; q++) {
            int a, b;
            dsv4_lm_head_shard_range(V, q, P, &a, &b);
            cnt[q] = n * (b > a ? b - a : 0);
            dsp[q] = q ? dsp[q - 1] + cnt[q - 1] : 0;
        }
        MPI_Request rq;
        rc = done(d, MPI_Igatherv(g.l, n * (hi - lo), MPI_FLOAT, g.all, cnt, dsp, MPI_FLOAT, 0, d->comm, &rq),
                  &rq, "logits gather", err);
        if (!rc && home) dsv4_lmhead_place_shards(logits + (int64_t)r0 * V, V, P, g.all, n);
        r0 += n;
    } while (!rc && r0 < n_rows);
    dsv4_arena_release(&e->scratch, mark);
    return rc;
}

void dsv4_lmhead_place_shards(float *logits, int V, int P, const float *blocks, int n) {
    for (int q = 0; q < P; q++) {
        int lo, hi;
        dsv4_lm_head_shard_range(V, q, P, &lo, &hi);
        const int w = hi > lo ? hi - lo : 0;
        for (int r = 0; r < n && w; r++)
            memcpy(logits + (int64_t)r * V + lo, blocks + (int64_t)n * lo + (int64_t)r * w, (size_t)w * sizeof(float));
    }
}

int dsv4_lm_head_dist(dsv4_engine *e, const float *hidden, int n_rows, float *logits,
                      dsv4_err *err) {
    const dsv4_fpenv f = dsv4_fpenv_enter(); /* util/fpenv.h */
    const int rc = lm_head_dist_body(e, hidden, n_rows, logits, err);
    dsv4_fpenv_leave(f);
    return rc;
}

/* ids, values (n_rows): the greedy pair of every row over all shards, on every rank. */
static int group_argmax(dsv4_engine *e, const float *hidden, int n_rows, int32_t *ids, float *values,
                        dsv4_err *err) {
    const int D = e->cfg->hidden_size, home = e->group->rank == 0;
    const size_t mark = dsv4_arena_mark(&e->scratch);
    group_bufs g;
    int chunk, lo, hi;
    int rc = group_begin(e, hidden, n_rows, 0, ids, &g, &chunk, &lo, &hi, err);
    int r0 = 0;
    do {
        const int n = n_rows - r0 < chunk ? n_rows - r0 : chunk;
        if ((rc = shard_pass(e, home && n ? hidden + (int64_t)r0 * D : NULL, n, n_rows, rc, &g, lo, hi, err)))
            break;
        dsv4_argmax_rows(g.l, n, hi - lo, lo, g.best);
        rc = dsv4_argmax_allreduce(e->group, g.best, n, err);
        /* the winners come from peers: an id outside the vocabulary is a peer's fault, not ours */
        for (int r = 0; !rc && r < n; r++) {
            if (g.best[r].id < 0 || g.best[r].id >= e->cfg->vocab_size) {
                rc = dsv4_fail(err, DSV4_ERR_STATE, "lm_head: the argmax over ranks gave token id %d for "
                               "row %d, outside [0, %d)", g.best[r].id, r0 + r, e->cfg->vocab_size);
                break;
            }
            ids[r0 + r] = g.best[r].id;
            if (values) values[r0 + r] = g.best[r].v;
        }
        r0 += n;
    } while (!rc && r0 < n_rows);
    dsv4_arena_release(&e->scratch, mark);
    return rc;
}

#else /* !DSV4_HAVE_MPI: a single process has no group */

int dsv4_argmax_allreduce(dsv4_dist *d, dsv4_argmax *pairs, int n_rows, dsv4_err *err) {
    (void)d; (void)pairs; (void)n_rows; (void)err;
    return DSV4_OK;
}

int dsv4_lm_head_dist(dsv4_engine *e, const float *hidden, int n_rows, float *logits,
                      dsv4_err *err) {
    return dsv4_lm_head(e, hidden, n_rows, logits, err);
}

static int group_argmax(dsv4_engine *e, const float *hidden, int n_rows, int32_t *ids, float *values,
                        dsv4_err *err) {
    (void)hidden; (void)n_rows; (void)ids; (void)values;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "lm_head: engine %p has a group without MPI", (void *)e);
}

#endif

static int lm_head_argmax_body(dsv4_engine *e, const float *hidden, int n_rows, int32_t *ids,
                               float *values, dsv4_err *err) {
    const int V = e->cfg->vocab_size;
    /* a DP group's sharded head checks its rank's arguments inside its agreement */
    if (e->dp_head) return dsv4_lmhead_dp(e, hidden, n_rows, DSV4_DP_HEAD_ARGMAX, NULL, ids, values, err);
    /* the same arguments on every rank, so a refusal here is collective too */
    if (n_rows < 0 || (n_rows > 0 && !ids))
        return dsv4_fail(err, DSV4_ERR_ARG, "lm_head: bad arguments (n_rows = %d)", n_rows);
    if (!e->group || e->dp) { /* DSV4_LMHEAD_ROWS rows at a time through the engine's scratch
                                * (under DP this rank's own rows) */
        const size_t mark = dsv4_arena_mark(&e->scratch);
        const int chunk = n_rows < DSV4_LMHEAD_ROWS ? n_rows : DSV4_LMHEAD_ROWS;
        float *l;          /* (chunk, V) */
        dsv4_argmax *best; /* (chunk) */
        int rc = n_rows == 0 || head_take(&e->scratch, chunk, V, &l, &best)
                     ? DSV4_OK : dsv4_fail(err, DSV4_ERR_NOMEM, "lm_head: scratch arena too small");
        for (int r0 = 0; !rc && r0 < n_rows; r0 += chunk) {
            const int nr = n_rows - r0 < chunk ? n_rows - r0 : chunk;
            rc = dsv4_lm_head(e, hidden + (int64_t)r0 * e->cfg->hidden_size, nr, l, err);
            if (!rc) dsv4_argmax_rows(l, nr, V, 0, best);
            for (int r = 0; !rc && r < nr; r++) {
                ids[r0 + r] = best[r].id;
                if (values) values[r0 + r] = best[r].v;
            }
        }
        dsv4_arena_release(&e->scratch, mark);
        return rc;
    }
    /* a group: every rank's shard, reduced (a local failure is reported through the
     * agreement of its first chunk) */
    return group_argmax(e, hidden, n_rows, ids, values, err);
}

int dsv4_lm_head_argmax(dsv4_engine *e, const float *hidden, int n_rows, int32_t *ids,
                        float *values, dsv4_err *err) {
    const dsv4_fpenv f = dsv4_fpenv_enter(); /* util/fpenv.h */
    const int rc = lm_head_argmax_body(e, hidden, n_rows, ids, values, err);
    dsv4_fpenv_leave(f);
    return rc;
}
