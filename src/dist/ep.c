/* ep.c — expert-parallel MoE: dispatch, expert compute on the owner, combine (see ep.h,
 * spec/serving.md §d). */
#include "dist/ep.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "moe/moe.h"
#include "util/err.h"

/* The routes of R rows: sel, w (R, K) each. */
static int routes_take(dsv4_arena *a, int R, int K, int **sel, float **w) {
    *sel = dsv4_arena_take_n(a, (long long)R * K, sizeof(int));
    *w = dsv4_arena_take_n(a, (long long)R * K, sizeof(float));
    return *sel && *w;
}

size_t dsv4_ep_scratch_bytes(const dsv4_config *cfg, int R) {
    dsv4_arena m = dsv4_arena_measuring();
    int *sel;
    float *w;
    routes_take(&m, R, cfg->num_experts_per_tok, &sel, &w);
    return m.peak;
}

#ifdef DSV4_HAVE_MPI

/* One dispatched row: the ffn_norm output x_t (D floats) followed by its metadata. */
typedef struct ep_meta {
    int32_t t;      /* row within the source's wave */
    int32_t k;      /* route index, k order */
    int32_t le;     /* local expert on the destination */
    float w;        /* routing weight w[t][k] */
} ep_meta;
#define EP_META_FLOATS 4 /* sizeof(ep_meta) / sizeof(float) */

/* The opening exchange of a sub-block (one MPI_Alltoall of OPEN_INTS ints per rank pair)
 * carries what every rank must agree on together with wave 0's row count for the pair:
 * {rows of wave 0 for the receiver, the sender's wave count, failing rank + 1 or 0,
 *  error code | clean << 8}. A sub-block with one wave thus costs three collectives. */
enum { OPEN_COUNT, OPEN_WAVES, OPEN_FAIL, OPEN_INFO, OPEN_INTS };

struct dsv4_ep {
    const dsv4_config *cfg;
    dsv4_dist *dist;
    int rank, size;
    int E, E_loc, K, D, I;
    int wave;                /* T_w: rows per rank per wave */
    int send_cap;            /* T_w * K */
    int recv_cap;            /* EP * T_w * min(K, E_loc) */
    int group_cap;           /* EP * T_w: most rows of one local expert in a wave */
    MPI_Datatype row_t;      /* one dispatched row: (D + 4) * 4 bytes */
    MPI_Datatype out_t;      /* one result row: D floats */
    float *send;             /* (send_cap, D + 4) rows packed by destination, (t, k) order */
    int *slot;               /* (send_cap) send row of route (t, k) of the wave: slot[t*K + k] */
    float *recv;             /* (recv_cap, D + 4) received rows: source rank, then arrival */
    float *rout;             /* (recv_cap, D) the owner's results, in received order */
    float *ret;              /* (send_cap, D) results back at the source, in send order */
    int *order;              /* (recv_cap) received rows grouped by local expert (stable) */
    int *estart;             /* (E_loc + 1) first entry of each local expert in order */
    float *xg;               /* (group_cap, D) one local expert's gathered rows */
    float *wg;               /* (group_cap) their routing weights */
    float *og;               /* (group_cap, D) their outputs */
    float *g, *u;            /* (group_cap, I) gate / up projections */
    float *sh;               /* (wave, D) shared expert of the wave's own rows */
    float *logits;           /* (wave, E) gate logits */
    double *s;               /* (E) scores of one row */
    int *scnt, *sdsp;        /* (EP) rows sent to each rank, offsets */
    int *rcnt, *rdsp;        /* (EP) rows received from each rank, offsets */
    int *cur;                /* (EP) packing cursors */
    int *open_s, *open_r;    /* (EP, 4) the opening exchange, sent / received per rank */
    int last_clean;          /* the last reported failure changed no state */
    dsv4_ep_stats stats;
};

/* Completes a collective started with result mrc within the peer timeout (dist/dist.h). */
static int ep_done(dsv4_ep *ep, int mrc, MPI_Request *rq, const char *what, int layer, dsv4_err *err) {
    char label[160];
    snprintf(label, sizeof label, "expert parallel: %s in the MoE of layer %d", what, layer);
    const double t0 = MPI_Wtime();
    int rc = dsv4_dist_complete(ep->dist, mrc, rq, label, err);
    ep->stats.comm_s += MPI_Wtime() - t0;
    return rc;
}

int dsv4_ep_create(const dsv4_config *cfg, dsv4_dist *d, int wave, dsv4_ep **out,
                   dsv4_err *err) {
    *out = NULL;
    const int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok;
    if (!d || d->size < 2)
        return dsv4_fail(err, DSV4_ERR_ARG, "expert parallel: needs a process group of 2 or more ranks");
    const int EP = d->size;
    if (E % EP != 0)
        return dsv4_fail(err, DSV4_ERR_CONFIG,
                         "expert parallel: %d routed experts do not divide over %d ranks "
                         "(n_routed_experts %% EP must be 0)", E, EP);
    if (wave < 1) return dsv4_fail(err, DSV4_ERR_ARG, "expert parallel: wave size %d < 1", wave);
    const int E_loc = E / EP;
    const int reach = K < E_loc ? K : E_loc;
    const int64_t recv_cap = (int64_t)EP * wave * reach, send_cap = (int64_t)wave * K;
    const int64_t group_cap = (int64_t)EP * wave;
    if (recv_cap > INT_MAX / 2 || send_cap > INT_MAX / 2)
        return dsv4_fail(err, DSV4_ERR_ARG, "expert parallel: wave size %d too large for %d ranks",
                         wave, EP);
    dsv4_ep *ep = calloc(1, sizeof *ep);
    if (!ep) return dsv4_fail(err, DSV4_ERR_NOMEM, "expert parallel: out of memory");
    ep->cfg = cfg;
    ep->dist = d;
    ep->rank = d->rank;
    ep->size = EP;
    ep->E = E;
    ep->E_loc = E_loc;
    ep->K = K;
    ep->D = cfg->hidden_size;
    ep->I = cfg->moe_intermediate_size;
    ep->wave = wave;
    ep->send_cap = (int)send_cap;
    ep->recv_cap = (int)recv_cap;
    ep->group_cap = (int)group_cap;
    ep->row_t = ep->out_t = MPI_DATATYPE_NULL;
    const size_t D = (size_t)ep->D, I = (size_t)ep->I, RW = D + EP_META_FLOATS;
    ep->send = malloc((size_t)send_cap * RW * sizeof(float));
    ep->slot = malloc((size_t)send_cap * sizeof(int));
    ep->recv = malloc((size_t)recv_cap * RW * sizeof(float));
    ep->rout = malloc((size_t)recv_cap * D * sizeof(float));
    ep->ret = malloc((size_t)send_cap * D * sizeof(float));
    ep->order = malloc((size_t)recv_cap * sizeof(int));
    ep->estart = malloc((size_t)(E_loc + 1) * sizeof(int));
    ep->xg = malloc((size_t)group_cap * D * sizeof(float));
    ep->wg = malloc((size_t)group_cap * sizeof(float));
    ep->og = malloc((size_t)group_cap * D * sizeof(float));
    ep->g = malloc((size_t)group_cap * I * sizeof(float));
    ep->u = malloc((size_t)group_cap * I * sizeof(float));
    ep->sh = malloc((size_t)wave * D * sizeof(float));
    ep->logits = malloc((size_t)wave * E * sizeof(float));
    ep->s = malloc((size_t)E * sizeof(double));
    ep->scnt = malloc((size_t)EP * (5 + 2 * OPEN_INTS) * sizeof(int));
    if (!ep->send || !ep->slot || !ep->recv || !ep->rout || !ep->ret || !ep->order || !ep->estart ||
        !ep->xg || !ep->wg || !ep->og || !ep->g || !ep->u || !ep->sh || !ep->logits || !ep->s ||
        !ep->scnt) {
        dsv4_ep_free(ep);
        return dsv4_fail(err, DSV4_ERR_NOMEM,
                         "expert parallel: out of memory for the exchange buffers (wave %d, "
                         "%d receive rows of %zu floats)", wave, (int)recv_cap, RW);
    }
    ep->sdsp = ep->scnt + EP;
    ep->rcnt = ep->scnt + 2 * EP;
    ep->rdsp = ep->scnt + 3 * EP;
    ep->cur = ep->scnt + 4 * EP;
    ep->open_s = ep->scnt + 5 * EP;
    ep->open_r = ep->open_s + OPEN_INTS * EP;
    if (MPI_Type_contiguous((int)(RW * sizeof(float)), MPI_BYTE, &ep->row_t) != MPI_SUCCESS ||
        MPI_Type_commit(&ep->row_t) != MPI_SUCCESS ||
        MPI_Type_contiguous((int)D, MPI_FLOAT, &ep->out_t) != MPI_SUCCESS ||
        MPI_Type_commit(&ep->out_t) != MPI_SUCCESS) {
        dsv4_ep_free(ep);
        return dsv4_fail(err, DSV4_ERR_IO, "expert parallel: cannot create the MPI row types");
    }
    ep->stats.recv_capacity = recv_cap;
    *out = ep;
    return DSV4_OK;
}

void dsv4_ep_free(dsv4_ep *ep) {
    if (!ep) return;
    if (ep->row_t != MPI_DATATYPE_NULL) MPI_Type_free(&ep->row_t);
    if (ep->out_t != MPI_DATATYPE_NULL) MPI_Type_free(&ep->out_t);
    free(ep->send); free(ep->slot); free(ep->recv); free(ep->rout); free(ep->ret);
    free(ep->order); free(ep->estart); free(ep->xg); free(ep->wg); free(ep->og); free(ep->g);
    free(ep->u); free(ep->sh); free(ep->logits); free(ep->s); free(ep->scnt);
    free(ep);
}

void dsv4_ep_local_range(const dsv4_ep *ep, int *e0, int *e1) {
    *e0 = ep->rank * ep->E_loc;
    *e1 = *e0 + ep->E_loc;
}

int dsv4_ep_wave(const dsv4_ep *ep) { return ep->wave; }

static double now(void) { return MPI_Wtime(); }

/* Most rows one rank can send another in a wave: a token's K experts are distinct, so at
 * most min(K, E_loc) of its routes reach one rank. */
static int pair_cap(const dsv4_ep *ep) { return ep->wave * (ep->K < ep->E_loc ? ep->K : ep->E_loc); }

/* The opening exchange: open_s (EP, OPEN_INTS) -> open_r; the wave count and any failure
 * are then the maximum over the received rows, the same on every rank. What peers send is
 * checked like input: counts within the pair bound, waves >= 0, a failing rank that is one. */
static int open_exchange(dsv4_ep *ep, int layer, int *waves, int *fail, int *info, dsv4_err *err) {
    MPI_Request rq;
    *waves = *fail = *info = 0;
    int rc = ep_done(ep, MPI_Ialltoall(ep->open_s, OPEN_INTS, MPI_INT, ep->open_r, OPEN_INTS, MPI_INT,
                                       ep->dist->comm, &rq), &rq, "opening exchange", layer, err);
    for (int r = 0; r < ep->size && !rc; r++) {
        const int *o = ep->open_r + r * OPEN_INTS;
        if (o[OPEN_COUNT] < 0 || o[OPEN_COUNT] > pair_cap(ep) || o[OPEN_WAVES] < 0 ||
            o[OPEN_FAIL] < 0 || o[OPEN_FAIL] > ep->size)
            rc = dsv4_fail(err, DSV4_ERR_STATE, "expert parallel: rank %d sent an invalid opening "
                           "(rows %d of at most %d, waves %d, failing rank %d) in the MoE of layer %d",
                           r, o[OPEN_COUNT], pair_cap(ep), o[OPEN_WAVES], o[OPEN_FAIL] - 1, layer);
        else if (o[OPEN_WAVES] > *waves) *waves = o[OPEN_WAVES];
        if (!rc && o[OPEN_FAIL] > *fail) { *fail = o[OPEN_FAIL]; *info = o[OPEN_INFO]; }
    }
    return rc;
}

void dsv4_ep_fail(dsv4_ep *ep, int code, int clean) {
    for (int r = 0; r < ep->size; r++) {
        int *o = ep->open_s + r * OPEN_INTS;
        o[OPEN_COUNT] = o[OPEN_WAVES] = 0;
        o[OPEN_FAIL] = ep->rank + 1;
        o[OPEN_INFO] = (code & 0xff) | (clean ? 1 << 8 : 0);
    }
    int waves, fail, info;
    dsv4_err ignored;
    (void)open_exchange(ep, -1, &waves, &fail, &info, &ignored);
}

int dsv4_ep_failure_clean(const dsv4_ep *ep) { return ep->last_clean; }

dsv4_ep_stats dsv4_ep_get_stats(const dsv4_ep *ep) { return ep->stats; }

void dsv4_ep_reset_stats(dsv4_ep *ep) {
    const int64_t cap = ep->stats.recv_capacity;
    memset(&ep->stats, 0, sizeof ep->stats);
    ep->stats.recv_capacity = cap;
}

/* Owner side of one wave: received rows [0, n) grouped by local expert (counting sort,
 * so source rank then arrival order is kept), each group through its expert, results
 * scattered back to received order in rout. */
static int compute_received(dsv4_ep *ep, dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_block_w *b, int n,
                            dsv4_err *err) {
    const int D = ep->D, RW = D + EP_META_FLOATS, E_loc = ep->E_loc;
    int e0, e1;
    dsv4_ep_local_range(ep, &e0, &e1);
    memset(ep->estart, 0, (size_t)(E_loc + 1) * sizeof(int));
    for (int i = 0; i < n; i++) {
        ep_meta m;
        memcpy(&m, ep->recv + (int64_t)i * RW + D, sizeof m);
        if (m.le < 0 || m.le >= E_loc) {
            int src = 0; /* the sender, for the message */
            while (src + 1 < ep->size && ep->rdsp[src + 1] <= i) src++;
            return dsv4_fail(err, DSV4_ERR_STATE, "expert parallel: rank %d sent row %d for local "
                             "expert %d of %d in the MoE of layer %d", src, i, m.le, E_loc, b->layer_id);
        }
        ep->estart[m.le + 1]++;
    }
    for (int e = 0; e < E_loc; e++) ep->estart[e + 1] += ep->estart[e];
    for (int i = 0; i < n; i++) {
        ep_meta m;
        memcpy(&m, ep->recv + (int64_t)i * RW + D, sizeof m);
        ep->order[ep->estart[m.le]++] = i;
    }
    for (int e = E_loc; e > 0; e--) ep->estart[e] = ep->estart[e - 1]; /* undo the cursors */
    ep->estart[0] = 0;
    for (int le = 0; le < E_loc; le++) {
        const int cnt = ep->estart[le + 1] - ep->estart[le];
        if (cnt == 0) continue;
        const int *rows = ep->order + ep->estart[le];
        for (int j = 0; j < cnt; j++) {
            const float *src = ep->recv + (int64_t)rows[j] * RW;
            ep_meta m;
            memcpy(&m, src + D, sizeof m);
            memcpy(ep->xg + (int64_t)j * D, src, (size_t)D * sizeof(float));
            ep->wg[j] = m.w;
        }
        const int e = e0 + le;
        dsv4_moe_expert(k, nm, ep->cfg, &b->w1[e], &b->w3[e], &b->w2[e], ep->xg, ep->wg, cnt, ep->og,
                        ep->g, ep->u);
        for (int j = 0; j < cnt; j++)
            memcpy(ep->rout + (int64_t)rows[j] * D, ep->og + (int64_t)j * D, (size_t)D * sizeof(float));
    }
    return DSV4_OK;
}

/* Rows per destination of one wave (sel (n, K)) into scnt. */
static void count_routes(dsv4_ep *ep, const int *sel, int n) {
    memset(ep->scnt, 0, (size_t)ep->size * sizeof(int));
    for (int i = 0; i < n * ep->K; i++) ep->scnt[sel[i] / ep->E_loc]++;
}

/* One wave: rows [0, n) of x / sel / w (n may be 0), results into y. Wave 0's counts
 * came with the opening exchange (counted = 1), later waves exchange them here. */
static int run_wave(dsv4_ep *ep, dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_block_w *b, const float *x,
                    const int *sel, const float *w, int n, float *y, int counted, dsv4_err *err) {
    const int EP = ep->size, K = ep->K, D = ep->D, RW = D + EP_META_FLOATS, E_loc = ep->E_loc;
    MPI_Comm comm = ep->dist->comm;
    double t0;
    /* counts and packing by destination, (t, k) order within each */
    count_routes(ep, sel, n);
    int total_send = 0;
    for (int r = 0; r < EP; r++) {
        ep->sdsp[r] = ep->cur[r] = total_send;
        total_send += ep->scnt[r];
    }
    for (int t = 0; t < n; t++)
        for (int kk = 0; kk < K; kk++) {
            const int e = sel[t * K + kk], dst = e / E_loc, p = ep->cur[dst]++;
            float *row = ep->send + (int64_t)p * RW;
            memcpy(row, x + (int64_t)t * D, (size_t)D * sizeof(float));
            const ep_meta m = {t, kk, e % E_loc, w[t * K + kk]};
            memcpy(row + D, &m, sizeof m);
            ep->slot[t * K + kk] = p;
        }
    MPI_Request rq;
    int rc;
    if (counted) {
        for (int r = 0; r < EP; r++) ep->rcnt[r] = ep->open_r[r * OPEN_INTS + OPEN_COUNT];
    } else if ((rc = ep_done(ep, MPI_Ialltoall(ep->scnt, 1, MPI_INT, ep->rcnt, 1, MPI_INT, comm, &rq), &rq,
                             "count exchange", b->layer_id, err))) {
        return rc;
    }
    /* peers' counts are input: each within the pair bound, so the sum fits recv_cap */
    int total_recv = 0;
    for (int r = 0; r < EP; r++) {
        if (ep->rcnt[r] < 0 || ep->rcnt[r] > pair_cap(ep))
            return dsv4_fail(err, DSV4_ERR_STATE, "expert parallel: rank %d announced %d rows in the "
                             "MoE of layer %d, outside [0, %d]", r, ep->rcnt[r], b->layer_id, pair_cap(ep));
        ep->rdsp[r] = total_recv;
        total_recv += ep->rcnt[r];
    }
    if ((rc = ep_done(ep, MPI_Ialltoallv(ep->send, ep->scnt, ep->sdsp, ep->row_t, ep->recv, ep->rcnt,
                                         ep->rdsp, ep->row_t, comm, &rq), &rq, "dispatch", b->layer_id, err)))
        return rc;

    t0 = now();
    rc = compute_received(ep, k, nm, b, total_recv, err);
    ep->stats.expert_s += now() - t0;
    if (rc) return rc;

    if ((rc = ep_done(ep, MPI_Ialltoallv(ep->rout, ep->rcnt, ep->rdsp, ep->out_t, ep->ret, ep->scnt,
                                         ep->sdsp, ep->out_t, comm, &rq), &rq, "combine", b->layer_id, err)))
        return rc;

    /* shared expert on the own rows, then per token: k order, shared last */
    if (n > 0) {
        t0 = now();
        dsv4_moe_expert(k, nm, ep->cfg, &b->sh_w1, &b->sh_w3, &b->sh_w2, x, NULL, n, ep->sh, ep->g, ep->u);
        for (int t = 0; t < n; t++)
            dsv4_moe_combine(D, K, ep->ret, ep->slot + t * K, ep->sh + (int64_t)t * D,
                             y + (int64_t)t * D);
        nm->round(nm, DSV4_ACT_MOE_OUT, y, (int64_t)n * D); /* as moe.c */
        ep->stats.expert_s += now() - t0;
    }
    dsv4_ep_stats *st = &ep->stats;
    st->waves++;
    st->rows_sent += total_send;
    st->rows_recv += total_recv;
    st->bytes_sent += (int64_t)total_send * RW * 4 + (int64_t)total_recv * D * 4;
    st->bytes_recv += (int64_t)total_recv * RW * 4 + (int64_t)total_send * D * 4;
    if (total_recv > st->max_recv_rows) st->max_recv_rows = total_recv;
    return DSV4_OK;
}

int dsv4_ep_moe(dsv4_ep *ep, dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_block_w *b, const float *x,
                const int32_t *tokens, int R, float *y, dsv4_arena *scratch, dsv4_err *err) {
    const int K = ep->K, D = ep->D, T = ep->wave;
    const size_t mark = dsv4_arena_mark(scratch);
    int *sel = NULL;
    float *w = NULL;
    /* 1. everything that can fail locally happens before the first collective */
    int e0, e1, rc;
    dsv4_ep_local_range(ep, &e0, &e1);
    if (R < 0) rc = dsv4_fail(err, DSV4_ERR_ARG, "moe: row count %d < 0", R);
    else if (R > 0 && (!x || !y)) rc = dsv4_fail(err, DSV4_ERR_ARG, "moe: %d rows without buffers", R);
    else rc = dsv4_moe_check_shared(ep->cfg, b, err);
    if (!rc) rc = dsv4_moe_check_experts(ep->cfg, b, e0, e1, err);
    if (!rc && R > 0 && !routes_take(scratch, R, K, &sel, &w))
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "moe: scratch arena too small for %d rows", R);
    for (int r0 = 0; !rc && r0 < R; r0 += T) {
        const int n = R - r0 < T ? R - r0 : T;
        rc = dsv4_moe_gate(k, ep->cfg, b, x + (int64_t)r0 * D, tokens ? tokens + r0 : NULL, n,
                           sel + (int64_t)r0 * K, w + (int64_t)r0 * K, ep->logits, ep->s, err);
    }
    /* 2. the opening exchange: wave 0's counts, the wave count, any failure */
    const int waves = R > 0 ? (R + T - 1) / T : 0;
    const int n0 = R < T ? R : T;
    if (!rc) count_routes(ep, sel, n0);
    for (int r = 0; r < ep->size; r++) {
        int *o = ep->open_s + r * OPEN_INTS;
        o[OPEN_COUNT] = rc ? 0 : ep->scnt[r];
        o[OPEN_WAVES] = rc ? 0 : waves;
        o[OPEN_FAIL] = rc ? ep->rank + 1 : 0;
        o[OPEN_INFO] = rc ? (rc & 0xff) : 0;
    }
    int all_waves, fail, info;
    dsv4_err oerr;
    int orc = open_exchange(ep, b->layer_id, &all_waves, &fail, &info, rc ? &oerr : err);
    if (orc) {
        dsv4_arena_release(scratch, mark);
        return rc ? rc : orc;
    }
    ep->stats.calls++;
    if (fail > 0) {
        dsv4_arena_release(scratch, mark);
        ep->last_clean = (info >> 8) & 1;
        if (rc) return rc;
        const int code = info & 0xff;
        return dsv4_fail(err, code ? code : DSV4_ERR_STATE,
                         "expert parallel: rank %d failed at the MoE of layer %d (%s); this "
                         "rank stops there too", fail - 1, b->layer_id, dsv4_strerror(code));
    }
    /* 3. the waves; ranks out of rows take part with none */
    for (int wv = 0; wv < all_waves && !rc; wv++) {
        const int r0 = wv * T;
        const int n = r0 >= R ? 0 : (R - r0 < T ? R - r0 : T);
        rc = run_wave(ep, k, nm, b, n ? x + (int64_t)r0 * D : NULL, n ? sel + (int64_t)r0 * K : NULL,
                      n ? w + (int64_t)r0 * K : NULL, n, n ? y + (int64_t)r0 * D : NULL, wv == 0, err);
    }
    dsv4_arena_release(scratch, mark);
    return rc;
}

#else /* !DSV4_HAVE_MPI */

struct dsv4_ep { int unused; };

int dsv4_ep_create(const dsv4_config *cfg, dsv4_dist *d, int wave, dsv4_ep **out,
                   dsv4_err *err) {
    (void)cfg; (void)d; (void)wave;
    *out = NULL;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "expert parallel: this build has no MPI (DSV4_MPI=OFF)");
}
void dsv4_ep_free(dsv4_ep *ep) { (void)ep; }
void dsv4_ep_local_range(const dsv4_ep *ep, int *e0, int *e1) { (void)ep; *e0 = *e1 = 0; }
int dsv4_ep_wave(const dsv4_ep *ep) { (void)ep; return 0; }
int dsv4_ep_moe(dsv4_ep *ep, dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_block_w *b, const float *x,
                const int32_t *tokens, int R, float *y, dsv4_arena *scratch, dsv4_err *err) {
    (void)ep; (void)k; (void)nm; (void)b; (void)x; (void)tokens; (void)R; (void)y; (void)scratch;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "expert parallel: this build has no MPI");
}
void dsv4_ep_fail(dsv4_ep *ep, int code, int clean) { (void)ep; (void)code; (void)clean; }
int dsv4_ep_failure_clean(const dsv4_ep *ep) { (void)ep; return 0; }
dsv4_ep_stats dsv4_ep_get_stats(const dsv4_ep *ep) { (void)ep; dsv4_ep_stats s = {0}; return s; }
void dsv4_ep_reset_stats(dsv4_ep *ep) { (void)ep; }

#endif
