/* forward_cp.c — context-parallel prefill of one prompt over the ranks of the process
 * group (spec/serving.md §c; partition and exchange ranges in dist/cp.h).
 *
 * Every rank runs its two segments (one early, one late) through all main layers as two
 * spans of one local batch, each layer through dsv4_engine_block (engine/block.c) with the
 * attention step below. Per layer, all ranks make the same collectives in the same order:
 *
 *   project      local: q, kv, indexer qI/wI, compressor projections of the local rows
 *   bcast        s0 > 0: the home rank's state at s0 for this layer (window rows
 *                [s0-win+1, s0), ring rows of the §7 state, entries and keys < s0/r)
 *   exchange A   all-gather of each segment's window tail and compressor state (cp.h)
 *   pool         local: every window closing in a local segment -> its entry / key
 *   exchange B   in-place all-gather of the new entries and keys: afterwards every rank
 *                holds all entries w < (s0+n)/r of the layer
 *   attend       local: indexer top-k over all visible keys with the full index_topk,
 *                sparse attention, output projection
 *   home store   the home writes what a single-rank prefill would have left in its cache:
 *                window rows of the last win-1 positions, all new entries and keys, and
 *                the ring rows of the final compressor state
 *   MoE          dsv4_engine_moe on the local rows (expert-parallel when EP is on: every
 *                rank calls it once per layer)
 *
 * Each value is computed by the same kernel from the same inputs as in a single-rank
 * prefill, and every candidate list is gathered in the same order, so results are
 * bitwise equal to it. History reads go through a dsv4_attn_src over the exchange
 * buffers; other ranks never touch their own cache pages, so they drop nothing at the
 * end. The MTP block is not part of this call: dsv4_mtp_forward runs its rows on the
 * home rank, where the streams are.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/cp.h"
#include "dist/dist.h"
#include "engine/engine.h"
#include "engine/forward_cp.h"
#include "hc/hc.h"
#include "kernels/kv_rows.h"
#include "kernels/ops.h"
#include "util/err.h"

#ifdef DSV4_HAVE_MPI
static int64_t granule_of(const dsv4_engine *e) {
    return e->opts.cp_granule > 0 ? e->opts.cp_granule : dsv4_cp_default_granule(e->cfg);
}
#endif

int dsv4_cp_long_enough(const dsv4_engine *e, int64_t s0, int64_t n) {
#ifdef DSV4_HAVE_MPI
    const dsv4_dist *d = e->group; /* set when opts.parallel spans more than one rank */
    if (!d || !(e->opts.parallel & DSV4_PAR_CP)) return 0;
    const int64_t G = granule_of(e);
    const int64_t q = (s0 + n + G - 1) / G - s0 / G;
    return q >= 2 * (int64_t)d->size;
#else
    (void)e; (void)s0; (void)n;
    return 0;
#endif
}

int dsv4_cp_eligible(const dsv4_engine *e, const dsv4_span *spans, int n_spans) {
    return !e->dp && n_spans == 1 && spans && dsv4_cp_long_enough(e, spans[0].start, spans[0].n_tokens);
}

int dsv4_cp_pick(const dsv4_engine *e, const dsv4_span *spans, int n_spans) {
    int best = -1;
    for (int i = 0; e->dp && i < n_spans; i++)
        if (!spans[i].speculative && dsv4_cp_long_enough(e, spans[i].start, spans[i].n_tokens) &&
            (best < 0 || spans[i].n_tokens > spans[best].n_tokens))
            best = i;
    return best;
}

#ifndef DSV4_HAVE_MPI

int dsv4_forward_cp(dsv4_engine *e, const dsv4_span *spans, int n_spans, float *hidden,
                    float *streams, dsv4_err *err) {
    (void)e; (void)spans; (void)n_spans; (void)hidden; (void)streams;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "context parallelism needs an MPI build");
}

int dsv4_forward_cp_at(dsv4_engine *e, const dsv4_span *span, int home, float *hidden, float *streams,
                       dsv4_err *err) {
    (void)e; (void)span; (void)home; (void)hidden; (void)streams;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "context parallelism needs an MPI build");
}

size_t dsv4_forward_cp_scratch_bytes(const dsv4_config *c, int P, int R, int64_t max_context,
                                     size_t *outputs) {
    (void)c; (void)P; (void)R; (void)max_context;
    *outputs = 0;
    return 0;
}

#else

/* Exchange A layout of one segment for the current layer's kind. */
typedef struct cp_lay {
    int64_t tail_lo;              /* window rows [tail_lo, end) */
    int64_t st_lo[2], st_open[2]; /* state rows [st_lo, end): [0] main, [1] indexer compressor;
                                   * carry rows (first halves) below st_open */
    int64_t off;                  /* float offset of the segment's block in a_recv */
    int64_t off_st[2];            /* float offset of each state block in a_recv */
    int64_t floats;               /* size of the block */
} cp_lay;

typedef struct cp_call {
    dsv4_engine *e;
    const dsv4_config *c;
    MPI_Comm comm;
    int rank, cp, seq;            /* rank: (MPI rank - home) mod cp, the rank in the partition
                                   * (cp.h: 0 the home, owner of the first and last segment) */
    int home, me;                 /* the home's MPI rank and this one's: collectives' roots and
                                   * counts/displs are by MPI rank (M below) */
    int64_t s0, end;
    dsv4_cp_plan plan;
    /* local rows: this rank's segments in position order, as the spans of one batch */
    int R;
    dsv4_batch_span bs[2];
    int64_t *pos;                 /* (R) */
    int32_t *tok;                 /* (R) */
    dsv4_batch batch;
    /* exchange A of the current layer */
    int ratio;                    /* compress ratio of the current layer */
    cp_lay *lay;                  /* (n_seg) */
    float *a_send, *a_recv;       /* sized for the largest layer kind */
    int *counts, *displs;         /* (cp) */
    /* the home rank's state at s0 for the current layer */
    float *bc;                    /* window rows, main ring rows, indexer ring rows */
    int64_t bc_win_lo, bc_st_lo[2], bc_off_st[2], bc_floats;
    /* every entry w < end/r (hd) and indexer key w < end/4 (dI) of the current layer */
    float *cmp, *idx;
    MPI_Datatype t_hd, t_dI, t_D;
    dsv4_cp_stats *stats;         /* e->cp_stats: optional timings */
    int bad_span;                 /* a non-home rank got a bad span from the home (its ids
                                   * replaced by 0): fails the first layer's agreement */
} cp_call;

/* MPI rank of partition rank v. */
static int M(const cp_call *cx, int v) { return (v + cx->home) % cx->cp; }

/* ---- optional timings (dsv4_cp_stats) --------------------------------------------------- */

typedef struct cp_mark {
    double wall, cpu;
} cp_mark;

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static cp_mark mark(const cp_call *cx) {
    return cx->stats ? (cp_mark){MPI_Wtime(), thread_cpu()} : (cp_mark){0, 0};
}

/* Closes a collective that brought floats_in floats to this rank. */
static void comm_done(cp_call *cx, cp_mark m, int64_t floats_in) {
    if (!cx->stats) return;
    cx->stats->comm_wall_s += MPI_Wtime() - m.wall;
    cx->stats->comm_cpu_s += thread_cpu() - m.cpu;
    cx->stats->floats_in += floats_in;
}

/* Floats an all-gather with these counts (of `width` floats) brings to this rank. */
static int64_t gathered_in(const cp_call *cx, int64_t width) {
    int64_t n = 0;
    for (int r = 0; r < cx->cp; r++)
        if (r != cx->me) n += cx->counts[r];
    return n * width;
}

/* A collective started with result mrc, completed within the peer timeout (dist/dist.h). */
static int cp_done(cp_call *cx, int mrc, MPI_Request *rq, const char *what, int layer, dsv4_err *err) {
    char label[128];
    snprintf(label, sizeof label, "CP prefill: %s (layer %d)", what, layer);
    return dsv4_dist_complete(cx->e->group, mrc, rq, label, err);
}

/* Compressor ix of a layer of ratio r: present?, its ratio, overlap and entry width. */
static int cmp_of(const dsv4_config *c, int r, int ix, int *rr, int *coff, int *d) {
    if (ix == 0 && r == 0) return 0;
    if (ix == 1 && r != 4) return 0;
    *rr = ix ? 4 : r;
    *coff = dsv4_cfg_coff(*rr);
    *d = ix ? c->index_head_dim : c->head_dim;
    return 1;
}

/* Lays out exchange A for layers of ratio r: per-segment ranges and offsets, per-rank
 * counts and displacements. Returns the floats every rank receives, -1 if a count does
 * not fit an int. */
static int64_t lay_make(cp_call *cx, int r) {
    const dsv4_config *c = cx->c;
    const dsv4_cp_plan *p = &cx->plan;
    cx->ratio = r;
    for (int i = 0; i < p->n_seg; i++) {
        const dsv4_cp_seg *s = &p->seg[i];
        cp_lay *L = &cx->lay[i];
        const int last = i == p->n_seg - 1; /* the home rank's own: nobody needs it */
        L->tail_lo = last ? s->end : dsv4_cp_tail_lo(s, c->sliding_window);
        L->floats = (s->end - L->tail_lo) * c->head_dim;
        for (int ix = 0; ix < 2; ix++) {
            int rr, coff, d;
            L->st_lo[ix] = L->st_open[ix] = s->end;
            L->off_st[ix] = L->floats;
            if (last || !cmp_of(c, r, ix, &rr, &coff, &d)) continue;
            dsv4_cp_state_range(s, rr, coff, &L->st_lo[ix], &L->st_open[ix]);
            L->floats += (L->st_open[ix] - L->st_lo[ix]) * 2 * d +
                         (s->end - L->st_open[ix]) * 2 * coff * d;
        }
    }
    int64_t total = 0;
    for (int rho = 0; rho < cx->cp; rho++) {
        const cp_lay *early = &cx->lay[rho], *late = &cx->lay[2 * cx->cp - 1 - rho];
        const int64_t n = early->floats + late->floats;
        if (n > INT_MAX || total > INT_MAX) return -1;
        cx->counts[M(cx, rho)] = (int)n;
        cx->displs[M(cx, rho)] = (int)total;
        total += n;
    }
    for (int i = 0; i < p->n_seg; i++) {
        cp_lay *L = &cx->lay[i];
        const int rho = p->seg[i].owner;
        L->off = cx->displs[M(cx, rho)] + (i < cx->cp ? 0 : cx->lay[rho].floats);
        for (int ix = 0; ix < 2; ix++) L->off_st[ix] += L->off;
    }
    return total;
}

/* Broadcast layout of the home rank's state at s0 for layers of ratio r. */
static void bc_make(cp_call *cx, int r) {
    const dsv4_config *c = cx->c;
    const int64_t s0 = cx->s0;
    cx->bc_win_lo = s0 - c->sliding_window + 1 > 0 ? s0 - c->sliding_window + 1 : 0;
    int64_t n = (s0 - cx->bc_win_lo) * c->head_dim;
    for (int ix = 0; ix < 2; ix++) {
        int rr, coff, d;
        cx->bc_st_lo[ix] = s0;
        cx->bc_off_st[ix] = n;
        if (!cmp_of(c, r, ix, &rr, &coff, &d)) continue;
        cx->bc_st_lo[ix] = dsv4_cp_state_lo(s0, rr, coff);
        n += (s0 - cx->bc_st_lo[ix]) * 2 * coff * d;
    }
    cx->bc_floats = n;
}

/* ---- history source over the exchange buffers ------------------------------------------- */

static const void *cp_win_row(void *u, const dsv4_batch_span *sp, int layer, int64_t pos) {
    const cp_call *cx = u;
    const int hd = cx->c->head_dim;
    (void)sp; (void)layer;
    if (pos < cx->s0) return cx->bc + (pos - cx->bc_win_lo) * hd;
    const cp_lay *L = &cx->lay[dsv4_cp_seg_of(&cx->plan, pos)];
    /* a query's window reaches back at most win-1 positions, so it lies in the tails of
     * the segments before it (cp.h) */
    return pos >= L->tail_lo ? cx->a_recv + L->off + (pos - L->tail_lo) * hd : NULL;
}

static void cp_ring_row(void *u, const dsv4_batch_span *sp, int layer, int ix, int64_t pos,
                        const float **a, const float **b) {
    const cp_call *cx = u;
    int rr = 0, coff = 1, d = 0;
    (void)sp; (void)layer;
    cmp_of(cx->c, cx->ratio, ix, &rr, &coff, &d);
    const int64_t W = (int64_t)coff * d;
    if (pos < cx->s0) {
        const float *row = cx->bc + cx->bc_off_st[ix] + (pos - cx->bc_st_lo[ix]) * 2 * W;
        *a = row;
        *b = row + W;
        return;
    }
    const cp_lay *L = &cx->lay[dsv4_cp_seg_of(&cx->plan, pos)];
    const float *base = cx->a_recv + L->off_st[ix];
    if (pos < L->st_open[ix]) { /* carry row: first halves only, which is all anyone reads */
        *a = base + (pos - L->st_lo[ix]) * 2 * d;
        *b = *a + d;
    } else {
        *a = base + (L->st_open[ix] - L->st_lo[ix]) * 2 * d + (pos - L->st_open[ix]) * 2 * W;
        *b = *a + W;
    }
}

static void *cp_entry(void *u, const dsv4_batch_span *sp, int layer, int ix, int64_t w) {
    const cp_call *cx = u;
    (void)sp; (void)layer;
    return ix ? cx->idx + w * cx->c->index_head_dim : cx->cmp + w * cx->c->head_dim;
}

/* ---- the exchanges ---------------------------------------------------------------------- */

/* Home rank: its state at s0 for layer l into bc and the entry stores; then to everyone. */
static int bcast_state(cp_call *cx, const dsv4_block_w *b, dsv4_err *err) {
    const dsv4_config *c = cx->c;
    const int l = b->layer_id, r = b->ratio, hd = c->head_dim, dI = c->index_head_dim;
    dsv4_cache *cache = cx->e->cache;
    bc_make(cx, r);
    if (cx->rank == 0) { /* the home */
        /* the exchange buffers are F32: stored rows unpack exactly (they were rounded to
         * their format when produced, kernels/kv_rows.h) */
        const dsv4_cache_plan *pl = dsv4_cache_get_plan(cache);
        const int rf = pl->opts.row_bytes_per_value, kf = pl->opts.idx_bytes_per_value;
        const int rd = c->qk_rope_head_dim;
        for (int64_t p = cx->bc_win_lo; p < cx->s0; p++)
            dsv4_row_unpack(rf, cx->bc + (p - cx->bc_win_lo) * hd, dsv4_cache_win_row(cache, cx->seq, l, p),
                            hd, rd);
        for (int ix = 0; ix < 2; ix++) {
            int rr, coff, d;
            if (!cmp_of(c, r, ix, &rr, &coff, &d)) continue;
            const int64_t w2 = 2 * (int64_t)coff * d;
            for (int64_t p = cx->bc_st_lo[ix]; p < cx->s0; p++)
                memcpy(cx->bc + cx->bc_off_st[ix] + (p - cx->bc_st_lo[ix]) * w2,
                       dsv4_cache_ring_row(cache, cx->seq, l, ix, p), (size_t)w2 * sizeof(float));
        }
        for (int64_t w = 0; r && w < cx->s0 / r; w++)
            dsv4_row_unpack(rf, cx->cmp + w * hd, dsv4_cache_cmp_row(cache, cx->seq, l, w), hd, rd);
        for (int64_t w = 0; r == 4 && w < cx->s0 / 4; w++)
            dsv4_row_unpack(kf, cx->idx + w * dI, dsv4_cache_idx_row(cache, cx->seq, l, w), dI, 0);
    }
    const cp_mark t = mark(cx);
    MPI_Request rq;
    int rc = cp_done(cx, MPI_Ibcast(cx->bc, (int)cx->bc_floats, MPI_FLOAT, cx->home, cx->comm, &rq), &rq,
                     "state broadcast", l, err);
    if (!rc && r && cx->s0 / r > 0)
        rc = cp_done(cx, MPI_Ibcast(cx->cmp, (int)(cx->s0 / r), cx->t_hd, cx->home, cx->comm, &rq), &rq,
                     "entry broadcast", l, err);
    if (!rc && r == 4 && cx->s0 / 4 > 0)
        rc = cp_done(cx, MPI_Ibcast(cx->idx, (int)(cx->s0 / 4), cx->t_dI, cx->home, cx->comm, &rq), &rq,
                     "indexer key broadcast", l, err);
    comm_done(cx, t, cx->rank ? cx->bc_floats + (r ? cx->s0 / r * hd : 0) +
                                (r == 4 ? cx->s0 / 4 * dI : 0) : 0);
    return rc;
}

/* Exchange A: window tails and compressor state of every segment (except the last). */
static int exchange_a(cp_call *cx, const dsv4_block_w *b, const dsv4_attn_work *w, dsv4_err *err) {
    const dsv4_config *c = cx->c;
    const int hd = c->head_dim;
    float *o = cx->a_send;
    for (int k = 0; k < 2; k++) {
        const dsv4_batch_span *sp = &cx->bs[k];
        const int i = dsv4_cp_seg_of(&cx->plan, sp->start);
        const cp_lay *L = &cx->lay[i];
        const int64_t end = sp->start + sp->n;
        for (int64_t p = L->tail_lo; p < end; p++, o += hd)
            memcpy(o, w->kv + (size_t)(sp->row0 + (p - sp->start)) * hd, (size_t)hd * sizeof(float));
        for (int ix = 0; ix < 2; ix++) {
            int rr, coff, d;
            if (!cmp_of(c, b->ratio, ix, &rr, &coff, &d)) continue;
            const int64_t W = (int64_t)coff * d;
            for (int64_t p = L->st_lo[ix]; p < end; p++) {
                const size_t row = (size_t)(sp->row0 + (p - sp->start));
                const int64_t n = p < L->st_open[ix] ? d : W; /* carry: first halves */
                memcpy(o, w->pa[ix] + row * W, (size_t)n * sizeof(float));
                memcpy(o + n, w->pb[ix] + row * W, (size_t)n * sizeof(float));
                o += 2 * n;
            }
        }
    }
    const cp_mark t = mark(cx);
    MPI_Request rq;
    int rc = cp_done(cx, MPI_Iallgatherv(cx->a_send, cx->counts[cx->me], MPI_FLOAT, cx->a_recv, cx->counts,
                                         cx->displs, MPI_FLOAT, cx->comm, &rq), &rq, "exchange A", b->layer_id, err);
    comm_done(cx, t, gathered_in(cx, 1));
    return rc;
}

/* Exchange B: the entries (and keys) each segment pooled, gathered in place into the
 * stores at their index w; one all-gather for the early segments, one for the late. */
static int exchange_b(cp_call *cx, const dsv4_block_w *b, dsv4_err *err) {
    const int r = b->ratio;
    for (int ix = 0; ix < 2; ix++) {
        int rr, coff, d;
        if (!cmp_of(cx->c, r, ix, &rr, &coff, &d)) continue;
        float *store = ix ? cx->idx : cx->cmp;
        for (int late = 0; late < 2; late++) {
            for (int rho = 0; rho < cx->cp; rho++) {
                const dsv4_cp_seg *s = &cx->plan.seg[late ? 2 * cx->cp - 1 - rho : rho];
                cx->counts[M(cx, rho)] = (int)(s->end / rr - s->start / rr);
                cx->displs[M(cx, rho)] = (int)(s->start / rr);
            }
            const cp_mark t = mark(cx);
            MPI_Request rq;
            int rc = cp_done(cx, MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, store, cx->counts,
                                                 cx->displs, ix ? cx->t_dI : cx->t_hd, cx->comm, &rq),
                             &rq, "exchange B", b->layer_id, err);
            comm_done(cx, t, gathered_in(cx, d));
            if (rc) return rc;
        }
    }
    return DSV4_OK;
}

/* Home rank: what a single-rank prefill leaves in the cache for this layer. */
static void home_store(cp_call *cx, const dsv4_block_w *b, const dsv4_attn_work *w) {
    const dsv4_config *c = cx->c;
    const int l = b->layer_id, r = b->ratio, hd = c->head_dim, dI = c->index_head_dim;
    dsv4_cache *cache = cx->e->cache;
    const dsv4_cache_plan *pl = dsv4_cache_get_plan(cache);
    const int rf = pl->opts.row_bytes_per_value, kf = pl->opts.idx_bytes_per_value;
    const int rd = c->qk_rope_head_dim;
    const dsv4_batch_span *last = &cx->bs[1];  /* the last segment is the home rank's */
    const int64_t a_last = last->start, end = cx->end;
    /* window rows of the last win-1 positions: own last segment, earlier ones' tails */
    for (int64_t p = end - c->sliding_window + 1 > cx->s0 ? end - c->sliding_window + 1 : cx->s0;
         p < end; p++) {
        const float *row = p >= a_last ? w->kv + (size_t)(last->row0 + (p - a_last)) * hd
                                       : (const float *)cp_win_row(cx, NULL, l, p);
        dsv4_row_pack(rf, dsv4_cache_win_row(cache, cx->seq, l, p), row, hd, rd);
    }
    /* every entry and key this call pooled (rounded F32 rows: packing is exact) */
    for (int64_t e = r ? cx->s0 / r : 0; r && e < end / r; e++)
        dsv4_row_pack(rf, dsv4_cache_cmp_row(cache, cx->seq, l, e), cx->cmp + e * hd, hd, rd);
    for (int64_t e = cx->s0 / 4; r == 4 && e < end / 4; e++)
        dsv4_row_pack(kf, dsv4_cache_idx_row(cache, cx->seq, l, e), cx->idx + e * dI, dI, 0);
    /* rings: the rows a single-rank prefill writes, [max(s0, end-L), end), as far as they
     * are live state (model.md §7); the rest of those slots is never read */
    const int Lr = r ? dsv4_cache_get_plan(cache)->ring_len[l] : 0;
    for (int ix = 0; ix < 2; ix++) {
        int rr, coff, d;
        if (!cmp_of(c, r, ix, &rr, &coff, &d)) continue;
        const int64_t W = (int64_t)coff * d;
        for (int64_t p = end - Lr > cx->s0 ? end - Lr : cx->s0; p < end; p++) {
            float *ring = dsv4_cache_ring_row(cache, cx->seq, l, ix, p);
            if (p >= a_last) {
                const size_t row = (size_t)(last->row0 + (p - a_last));
                memcpy(ring, w->pa[ix] + row * W, (size_t)W * sizeof(float));
                memcpy(ring + W, w->pb[ix] + row * W, (size_t)W * sizeof(float));
                continue;
            }
            const cp_lay *L = &cx->lay[dsv4_cp_seg_of(&cx->plan, p)];
            if (p < L->st_lo[ix]) continue; /* not live at end */
            const float *ra, *rb;
            cp_ring_row(cx, NULL, l, ix, p, &ra, &rb);
            const int64_t n = p < L->st_open[ix] ? d : W;
            memcpy(ring, ra, (size_t)n * sizeof(float));
            memcpy(ring + W, rb, (size_t)n * sizeof(float));
        }
    }
}

/* ---- one block over the local rows ------------------------------------------------------ */

/* Before a collective: every rank learns whether any rank failed (MPI_MAX of the codes),
 * so that all of them stop at the same point instead of one waiting in an exchange. layer
 * -1: the call's start, where a failure is a refusal (nothing written yet). */
static int agree(cp_call *cx, int rc, int layer, dsv4_err *err) {
    int worst = rc;
    const cp_mark t = mark(cx);
    MPI_Request rq;
    dsv4_err cerr;
    int crc = cp_done(cx, MPI_Iallreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, cx->comm, &rq), &rq,
                      "agreement", layer, rc ? &cerr : err);
    comm_done(cx, t, 0);
    if (crc) return rc ? rc : crc;
    if (worst < 0 || worst > DSV4_ERR_NUMERIC) worst = DSV4_ERR_STATE; /* a peer's code: input */
    if (worst && !rc && layer < 0)
        return dsv4_fail(err, worst, "CP prefill: another rank refused the call (%s)", dsv4_strerror(worst));
    if (worst && !rc)
        return dsv4_fail(err, worst, "CP prefill: another rank failed (%s) at layer %d",
                         dsv4_strerror(worst), layer);
    return rc;
}

static int cp_attention(cp_call *cx, const dsv4_block_w *b, const float *x, float *y, dsv4_err *err) {
    dsv4_engine *e = cx->e;
    const int l = b->layer_id;
    const dsv4_cache_plan *plan = dsv4_cache_get_plan(e->cache);
    const dsv4_attn_ctx actx = {cx->c, e->k, e->num, e->cache, &e->rope_main, &e->rope_cmp, NULL, &e->scratch,
                                plan->opts.row_bytes_per_value, plan->opts.idx_bytes_per_value, NULL, 0, NULL,
                                DSV4_INDEXER_AUTO, 0, e->idx_paths};
    /* the exchange buffers hold F32 rows (already rounded to the cache's formats) */
    const dsv4_attn_src src = {cp_win_row, cp_ring_row, cp_entry, cx, DSV4_ROW_F32, DSV4_ROW_F32, NULL};
    const size_t scratch_mark = dsv4_arena_mark(&e->scratch);
    dsv4_attn_work w = {0};
    int rc = dsv4_attn_project(&actx, b, &cx->batch, x, &w, err);
    if (!rc && cx->bad_span)
        rc = dsv4_fail(err, DSV4_ERR_STATE, "CP prefill: rank %d sent a bad span", cx->home);
    if (!rc && lay_make(cx, b->ratio) < 0)
        rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "CP prefill: exchange A of layer %d exceeds "
                       "INT_MAX floats", l);
    rc = agree(cx, rc, l, err);
    if (!rc && cx->s0 > 0) rc = bcast_state(cx, b, err);
    if (!rc) rc = exchange_a(cx, b, &w, err);
    if (!rc) rc = agree(cx, dsv4_attn_pool(&actx, b, &cx->batch, &w, &src, err), l, err);
    if (!rc) rc = exchange_b(cx, b, err);
    /* the MoE that follows is a collective too (under EP) */
    if (!rc) rc = agree(cx, dsv4_attn_attend(&actx, b, &cx->batch, &w, &src, y, err), l, err);
    if (!rc && cx->rank == 0) home_store(cx, b, &w);
    dsv4_arena_release(&e->scratch, scratch_mark);
    return rc;
}

/* Debug trace: the streams of every row, gathered to the home rank in position order. */
static int cp_trace(cp_call *cx, int layer, int kind, const float *h, float *all, dsv4_err *err) {
    dsv4_engine *e = cx->e;
    const int hc = cx->c->hc_mult;
    for (int rho = 0; rho < cx->cp; rho++) {
        const dsv4_cp_seg *a = &cx->plan.seg[rho], *b = &cx->plan.seg[2 * cx->cp - 1 - rho];
        cx->counts[M(cx, rho)] = (int)((a->end - a->start + b->end - b->start) * hc);
        cx->displs[M(cx, rho)] = rho ? cx->displs[M(cx, rho - 1)] + cx->counts[M(cx, rho - 1)] : 0;
    }
    MPI_Request rq;
    int rc = cp_done(cx, MPI_Igatherv(h, cx->R * hc, cx->t_D, all, cx->counts, cx->displs, cx->t_D, cx->home,
                                      cx->comm, &rq), &rq, "trace gather", layer, err);
    if (rc) return rc;
    if (cx->rank != 0) return DSV4_OK;
    for (int i = 0; i < cx->plan.n_seg; i++) {
        const dsv4_cp_seg *s = &cx->plan.seg[i];
        const int rho = s->owner, early = i < cx->cp;
        int64_t at = cx->displs[M(cx, rho)] / hc;
        if (!early) at += cx->plan.seg[rho].end - cx->plan.seg[rho].start;
        for (int64_t p = s->start; p < s->end; p++, at++)
            e->trace(e->trace_user, cx->seq, p, layer, kind, all + at * hc * cx->c->hidden_size);
    }
    return DSV4_OK;
}

/* The CP attention step of dsv4_engine_block: the phases with the exchanges between them
 * (cx->batch is the block's batch); the trace gathers every rank's rows to the home rank. */
static int cp_attention_step(void *u, const dsv4_block_w *b, const dsv4_batch *batch, const int *q_rows,
                             int n_q, const float *x, float *y, dsv4_err *err) {
    (void)batch, (void)n_q;
    if (q_rows) /* every CP row is wanted: the forward runs its blocks without a subset */
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "CP prefill: no query-row subset");
    return cp_attention(u, b, x, y, err);
}

static int cp_trace_step(void *u, const dsv4_block_w *b, const dsv4_batch *batch, int sub,
                         const float *h, dsv4_err *err) {
    (void)batch;
    cp_call *cx = u;
    return cp_trace(cx, b->layer_id, sub, h, cx->e->trace_gather, err);
}

/* ---- the call's buffers, from the engine's scratch ------------------------------------- */

/* The plan's segments and exchange A's layout for P ranks. */
static int layout_take(dsv4_arena *a, int P, dsv4_cp_seg **seg, cp_call *cx) {
    *seg = dsv4_arena_take_n(a, 2LL * P, sizeof **seg);
    cx->lay = dsv4_arena_take_n(a, 2LL * P, sizeof *cx->lay);
    cx->counts = dsv4_arena_take_n(a, P, sizeof(int));
    cx->displs = dsv4_arena_take_n(a, P, sizeof(int));
    return *seg && cx->lay && cx->counts && cx->displs;
}

/* The local rows' and the exchanges' buffers (sizes in floats) and the streams h. */
static int rows_take(dsv4_arena *a, const dsv4_config *c, int R, int64_t send, int64_t recv, int64_t bc,
                     int64_t n_cmp, int64_t n_idx, cp_call *cx, float **h) {
    cx->pos = dsv4_arena_take_n(a, R, sizeof *cx->pos);
    cx->tok = dsv4_arena_take_n(a, R, sizeof *cx->tok);
    cx->a_send = dsv4_arena_take_n(a, send, sizeof(float));
    cx->a_recv = dsv4_arena_take_n(a, recv, sizeof(float));
    cx->bc = dsv4_arena_take_n(a, bc, sizeof(float));
    cx->cmp = dsv4_arena_take_n(a, n_cmp * c->head_dim, sizeof(float));
    cx->idx = dsv4_arena_take_n(a, n_idx * c->index_head_dim, sizeof(float));
    *h = dsv4_arena_take_n(a, (int64_t)R * c->hc_mult * c->hidden_size, sizeof(float)); /* (R, hc, D) */
    return cx->pos && cx->tok && cx->a_send && cx->a_recv && cx->bc && cx->cmp && cx->idx && *h;
}

/* The output gather: this rank's rows and, on the home rank, everybody's (rows of D). */
static int outputs_take(dsv4_arena *a, int home, int64_t mine_rows, int64_t all_rows, int D, float **mine,
                        float **all, float **yh) {
    *mine = dsv4_arena_take_n(a, mine_rows * D, sizeof(float));
    *all = home ? dsv4_arena_take_n(a, all_rows * D, sizeof(float)) : NULL;
    *yh = dsv4_arena_take_n(a, D, sizeof(float));
    return *mine && (!home || *all) && *yh;
}

size_t dsv4_forward_cp_scratch_bytes(const dsv4_config *c, int P, int R, int64_t max_context,
                                     size_t *outputs) {
    /* bounds over every layer kind (cp.h): a segment hands on at most win-1 window rows
     * and per compressor (coff-1) r carry rows of 2d floats and r-1 whole rows of 2 coff d;
     * the home rank's state at s0 is at most win-1 window rows and coff r ring rows */
    const int hd = c->head_dim, win1 = c->sliding_window > 1 ? c->sliding_window - 1 : 0;
    int64_t seg_floats = 0, bc = 0, n_cmp = 0, n_idx = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const int r = c->compress_ratios[l];
        int64_t sf = (int64_t)win1 * hd, bf = sf;
        for (int ix = 0; ix < 2; ix++) {
            int rr, coff, d;
            if (!cmp_of(c, r, ix, &rr, &coff, &d)) continue;
            sf += (int64_t)(coff - 1) * rr * 2 * d + (int64_t)rr * 2 * coff * d;
            bf += (int64_t)coff * rr * 2 * coff * d;
        }
        if (sf > seg_floats) seg_floats = sf;
        if (bf > bc) bc = bf;
        if (r && max_context / r > n_cmp) n_cmp = max_context / r;
        if (r == 4) n_idx = max_context / 4;
    }
    dsv4_arena m = dsv4_arena_measuring();
    cp_call cx;
    dsv4_cp_seg *seg;
    float *h, *mine, *all, *yh;
    layout_take(&m, P, &seg, &cx);
    rows_take(&m, c, R, 2 * seg_floats, 2LL * P * seg_floats, bc, n_cmp, n_idx, &cx, &h);
    dsv4_arena_take_n(&m, 3LL * R, sizeof(int32_t)); /* under DP: the span from its home */
    const size_t call = m.peak;
    /* after the layers: the rows asked for, hidden (D) and streams (hc x D) each */
    dsv4_arena_take_n(&m, 4LL * P, sizeof(int));
    outputs_take(&m, 1, (int64_t)R * (1 + c->hc_mult), (int64_t)R * (1 + c->hc_mult), c->hidden_size,
                 &mine, &all, &yh);
    *outputs = m.peak - call;
    return call;
}

/* ---- outputs ---------------------------------------------------------------------------- */

/* Local row of prompt row j on this rank, or -1. */
static int local_row(const cp_call *cx, int j) {
    const int64_t p = cx->s0 + j;
    for (int k = 0; k < 2; k++)
        if (p >= cx->bs[k].start && p < cx->bs[k].start + cx->bs[k].n)
            return cx->bs[k].row0 + (int)(p - cx->bs[k].start);
    return -1;
}

/* Hidden rows (D) then stream rows (hc x D) of the requested rows, each computed by the
 * rank that owns it and gathered in request order on the home rank. */
static int cp_outputs(cp_call *cx, const dsv4_span *sp, const float *h, float *hidden,
                      float *streams, dsv4_err *err) {
    const dsv4_config *c = cx->c;
    const int D = c->hidden_size, hc = c->hc_mult, cp = cx->cp;
    dsv4_arena *a = &cx->e->scratch;
    const size_t scratch_mark = dsv4_arena_mark(a);
    int rc = DSV4_OK;
    int *n_h = dsv4_arena_take_n(a, 4LL * cp, sizeof(int)); /* (4, cp): n_h, n_s, take_h, take_s */
    if (!n_h) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "CP outputs: scratch arena too small");
        goto done;
    }
    int *n_s = n_h + cp, *take_h = n_s + cp, *take_s = take_h + cp;
    memset(n_h, 0, 4 * (size_t)cp * sizeof(int));
    const int64_t s0 = cx->s0;
    for (int j = 0; j < sp->n_hidden; j++)
        n_h[cx->plan.seg[dsv4_cp_seg_of(&cx->plan, s0 + dsv4_wanted_row(sp->hidden_rows, sp->n_hidden, sp->n_tokens, j))].owner]++;
    for (int j = 0; j < sp->n_streams; j++)
        n_s[cx->plan.seg[dsv4_cp_seg_of(&cx->plan, s0 + dsv4_wanted_row(sp->stream_rows, sp->n_streams, sp->n_tokens, j))].owner]++;
    int64_t total = 0;
    for (int rho = 0; rho < cp; rho++) {
        const int64_t n = n_h[rho] + (int64_t)n_s[rho] * hc; /* rows of D floats */
        if (n > INT_MAX || total > INT_MAX) {
            rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "CP outputs: too many rows to gather");
            goto done;
        }
        cx->counts[M(cx, rho)] = (int)n;
        cx->displs[M(cx, rho)] = (int)total;
        total += n;
    }
    float *mine, *all, *yh;
    if (!outputs_take(a, cx->rank == 0, cx->counts[cx->me], total, D, &mine, &all, &yh)) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "CP outputs: scratch arena too small (%lld rows)", (long long)total);
        goto done;
    }
    /* own rows in request order: hidden = RMSNorm(hc_head(h); norm) (§5.13), streams as is */
    float *o = mine;
    for (int j = 0; j < sp->n_hidden; j++) {
        const int i = local_row(cx, dsv4_wanted_row(sp->hidden_rows, sp->n_hidden, sp->n_tokens, j));
        if (i < 0) continue;
        const dsv4_model *m = cx->e->model;
        dsv4_hc_head(c, h + (size_t)i * hc * D, m->hc_head_fn, m->hc_head_base, m->hc_head_scale, yh);
        dsv4_rmsnorm(yh, m->norm, D, (float)c->rms_norm_eps, o);
        cx->e->num->round(cx->e->num, DSV4_ACT_NORM, o, D);
        o += D;
    }
    for (int j = 0; j < sp->n_streams; j++) {
        const int i = local_row(cx, dsv4_wanted_row(sp->stream_rows, sp->n_streams, sp->n_tokens, j));
        if (i < 0) continue;
        memcpy(o, h + (size_t)i * hc * D, (size_t)hc * D * sizeof(float));
        o += (size_t)hc * D;
    }
    const cp_mark t = mark(cx);
    MPI_Request rq;
    rc = cp_done(cx, MPI_Igatherv(mine, cx->counts[cx->me], cx->t_D, all, cx->counts, cx->displs,
                                  cx->t_D, cx->home, cx->comm, &rq), &rq, "output gather", -1, err);
    comm_done(cx, t, cx->rank ? 0 : gathered_in(cx, D));
    if (!rc && cx->rank == 0) {
        /* rank rho's part: its hidden rows, then its stream rows, each in request order */
        for (int j = 0; j < sp->n_hidden; j++) {
            const int rho = cx->plan.seg[dsv4_cp_seg_of(&cx->plan, s0 + dsv4_wanted_row(sp->hidden_rows, sp->n_hidden, sp->n_tokens, j))].owner;
            memcpy(hidden + (size_t)j * D, all + ((size_t)cx->displs[M(cx, rho)] + take_h[rho]++) * D,
                   (size_t)D * sizeof(float));
        }
        for (int j = 0; j < sp->n_streams; j++) {
            const int rho = cx->plan.seg[dsv4_cp_seg_of(&cx->plan, s0 + dsv4_wanted_row(sp->stream_rows, sp->n_streams, sp->n_tokens, j))].owner;
            const size_t at = (size_t)cx->displs[M(cx, rho)] + n_h[rho] + (size_t)take_s[rho]++ * hc;
            memcpy(streams + (size_t)j * hc * D, all + at * D, (size_t)hc * D * sizeof(float));
        }
    }
done:
    dsv4_arena_release(a, scratch_mark);
    return rc;
}

/* ---- the call --------------------------------------------------------------------------- */

int dsv4_forward_cp(dsv4_engine *e, const dsv4_span *spans, int n_spans, float *hidden,
                    float *streams, dsv4_err *err) {
    if (n_spans != 1) return dsv4_fail(err, DSV4_ERR_ARG, "CP prefill takes one span, got %d", n_spans);
    return dsv4_forward_cp_at(e, &spans[0], 0, hidden, streams, err);
}

/* Under DP the span travels from its home, which alone has it: its tokens, then the rows
 * asked for as explicit indices (*sp's arrays then point into buf: n_tokens + n_hidden +
 * n_streams ints). */
static int bcast_span(cp_call *cx, dsv4_span *sp, int32_t *buf, dsv4_err *err) {
    const int n = sp->n_tokens, nh = sp->n_hidden, ns = sp->n_streams;
    if (cx->rank == 0) {
        memcpy(buf, sp->tokens, (size_t)n * sizeof(int32_t));
        for (int j = 0; j < nh; j++) buf[n + j] = dsv4_wanted_row(sp->hidden_rows, nh, n, j);
        for (int j = 0; j < ns; j++) buf[n + nh + j] = dsv4_wanted_row(sp->stream_rows, ns, n, j);
    }
    MPI_Request rq;
    int rc = cp_done(cx, MPI_Ibcast(buf, n + nh + ns, MPI_INT32_T, cx->home, cx->comm, &rq), &rq,
                     "span broadcast", -1, err);
    sp->tokens = buf;
    sp->hidden_rows = buf + n;
    sp->stream_rows = buf + n + nh;
    /* a peer's word: a bad id must not index the embedding or the outputs; the failure
     * waits for the first layer's agreement, where every rank stops */
    for (int j = 0; !rc && j < n + nh + ns; j++)
        if (buf[j] < 0 || buf[j] >= (j < n ? cx->c->vocab_size : n)) {
            buf[j] = 0;
            cx->bad_span = 1;
        }
    return rc;
}

int dsv4_forward_cp_at(dsv4_engine *e, const dsv4_span *span, int home, float *hidden, float *streams,
                       dsv4_err *err) {
    const dsv4_config *c = e->cfg;
    const int D = c->hidden_size, hc = c->hc_mult, hd = c->head_dim, dI = c->index_head_dim;
    dsv4_span spc = *span, *sp = &spc; /* under DP, filled by the home's broadcast */
    cp_call cxs = {0}, *cx = &cxs;
    cx->e = e;
    cx->c = c;
    cx->comm = e->group->comm;
    cx->me = e->group->rank;
    cx->cp = e->group->size;
    cx->home = home;
    cx->rank = (cx->me - home + cx->cp) % cx->cp;
    /* without DP every rank holds the sequence's handle (the home its cache); under DP only
     * the home knows the sequence: the others never touch their own of that id */
    const int owner = !e->dp || cx->rank == 0;
    cx->seq = sp->seq;
    cx->s0 = sp->start;
    cx->end = sp->start + sp->n_tokens;
    cx->t_hd = cx->t_dI = cx->t_D = MPI_DATATYPE_NULL;
    cx->stats = e->cp_stats;
    const cp_mark call_start = mark(cx);
    const size_t scratch_mark = dsv4_arena_mark(&e->scratch);
    float *h = NULL;

    /* 1. every rank plans and takes its buffers from the engine's scratch (sized at create
     *    for max_rows rows and max_context positions); the home rank reserves the
     *    sequence's pages; then all agree before the first exchange, so a refusal leaves
     *    no rank waiting */
    dsv4_cp_seg *seg;
    int rc = layout_take(&e->scratch, cx->cp, &seg, cx)
                 ? dsv4_cp_plan_into(seg, cx->cp, cx->s0, sp->n_tokens, granule_of(e), &cx->plan, err)
                 : dsv4_fail(err, DSV4_ERR_NOMEM, "CP prefill: scratch arena too small");
    if (!rc && !cx->plan.split)
        rc = dsv4_fail(err, DSV4_ERR_ARG, "CP prefill: %lld granules cannot fill %d segments",
                       (long long)cx->plan.q, 2 * cx->cp);
    int64_t max_a = 0, max_bc = 0, n_cmp = 0, n_idx = 0;
    if (!rc) {
        const dsv4_cp_seg *early = &cx->plan.seg[cx->rank];
        const dsv4_cp_seg *late = &cx->plan.seg[2 * cx->cp - 1 - cx->rank];
        cx->bs[0] = (dsv4_batch_span){sp->seq, early->start, (int)(early->end - early->start), 0};
        cx->bs[1] = (dsv4_batch_span){sp->seq, late->start, (int)(late->end - late->start), cx->bs[0].n};
        cx->R = cx->bs[0].n + cx->bs[1].n;
    }
    if (!rc) {
        /* buffer sizes: the largest layer kind of the model */
        int64_t max_send = 0;
        for (int l = 0; l < c->num_hidden_layers && !rc; l++) {
            const int r = c->compress_ratios[l];
            const int64_t a = lay_make(cx, r);
            if (a < 0) {
                rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "CP prefill: exchange A exceeds INT_MAX floats");
                break;
            }
            if (a > max_a) max_a = a;
            if (cx->counts[cx->me] > max_send) max_send = cx->counts[cx->me];
            if (cx->s0 > 0) {
                bc_make(cx, r);
                if (cx->bc_floats > max_bc) max_bc = cx->bc_floats;
            }
            if (r && cx->end / r > n_cmp) n_cmp = cx->end / r;
            if (r == 4) n_idx = cx->end / 4;
        }
        if (!rc && !rows_take(&e->scratch, c, cx->R, max_send, max_a, max_bc, n_cmp, n_idx, cx, &h))
            rc = dsv4_fail(err, DSV4_ERR_NOMEM, "CP prefill: scratch arena too small for %d rows", cx->R);
        /* the trace hook's gather on the home rank is made when the hook is set
         * (dsv4_engine_set_trace), for max_rows >= n_tokens rows */
        if (!rc && e->trace && cx->rank == 0 && !e->trace_gather)
            rc = dsv4_fail(err, DSV4_ERR_NOMEM, "CP prefill: out of memory for the trace hook's gather "
                           "(made when the hook was set)");
    }
    int32_t *span_buf = NULL; /* (n_tokens + n_hidden + n_streams) under DP */
    if (!rc && e->dp && !(span_buf = dsv4_arena_take_n(&e->scratch, (int64_t)sp->n_tokens + sp->n_hidden +
                                                       sp->n_streams, sizeof(int32_t))))
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "CP prefill: scratch arena too small for the span");
    /* under DP the home reserved its pages before the call's agreement (forward.c) */
    if (!rc && cx->rank == 0 && !e->dp) {
        const int64_t start = sp->start;
        const int count = sp->n_tokens;
        rc = dsv4_cache_reserve(e->cache, 1, &sp->seq, &start, &count, 1, err);
    }
    rc = agree(cx, rc, -1, err);
    if (!rc && e->dp) rc = bcast_span(cx, sp, span_buf, err);
    if (rc) goto done;
    MPI_Type_contiguous(hd, MPI_FLOAT, &cx->t_hd);
    MPI_Type_contiguous(dI > 0 ? dI : 1, MPI_FLOAT, &cx->t_dI);
    MPI_Type_contiguous(D, MPI_FLOAT, &cx->t_D);
    MPI_Type_commit(&cx->t_hd);
    MPI_Type_commit(&cx->t_dI);
    MPI_Type_commit(&cx->t_D);

    /* 2. local rows: positions, tokens, h = expand(embed[token]) (§5.1) */
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < cx->bs[k].n; j++) {
            const int i = cx->bs[k].row0 + j;
            cx->pos[i] = cx->bs[k].start + j;
            cx->tok[i] = sp->tokens[cx->bs[k].start + j - cx->s0];
            float *hi = h + (size_t)i * hc * D;
            dsv4_mat_row(&e->model->embed, cx->tok[i], hi);
            for (int s = 1; s < hc; s++) memcpy(hi + (size_t)s * D, hi, (size_t)D * sizeof(float));
        }
    cx->batch = (dsv4_batch){cx->R, 2, cx->bs, cx->pos, cx->tok};

    /* 3. the main layers */
    const dsv4_block_step step = {cp_attention_step, cp_trace_step, cx};
    for (int l = 0; l < c->num_hidden_layers; l++)
        if ((rc = dsv4_engine_block(e, &e->blocks[l], &cx->batch, &step, h, err))) {
            if (owner) e->seqs[sp->seq].broken = 1;
            goto done;
        }

    /* 4. outputs on the home rank; every rank that knows the sequence commits (the others
     *    hold no pages) */
    if ((rc = cp_outputs(cx, sp, h, hidden, streams, err))) {
        if (owner) e->seqs[sp->seq].broken = 1;
        goto done;
    }
    if (owner) {
        e->seqs[sp->seq].n += sp->n_tokens;
        dsv4_engine_trim(e, sp->seq);
    }
    if (cx->rank == 0) e->cp_prefills++;

done:
    if (cx->stats) {
        cx->stats->calls++;
        cx->stats->wall_s += MPI_Wtime() - call_start.wall;
        cx->stats->cpu_s += thread_cpu() - call_start.cpu;
    }
    if (cx->t_hd != MPI_DATATYPE_NULL) MPI_Type_free(&cx->t_hd);
    if (cx->t_dI != MPI_DATATYPE_NULL) MPI_Type_free(&cx->t_dI);
    if (cx->t_D != MPI_DATATYPE_NULL) MPI_Type_free(&cx->t_D);
    dsv4_arena_release(&e->scratch, scratch_mark);
    return rc;
}

#endif
