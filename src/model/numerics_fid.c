/* numerics_fid.c — fidelity mode P3 (spec/model.md §6) as a numeric mode.
 *
 * Roundings of activations (F2-F5) happen at the points the forward names (dsv4_act);
 * roundings around products (F1, F4, F5) depend on which weight a matrix is. F1 is decided
 * by role, not by the stored format: the release's FP8/FP4 projections quantize their
 * inputs even in a BF16 test checkpoint (the goldens), so the simulation is the official
 * graph's on any copy of the weights; wo_a, which the official conversion dequantizes to
 * BF16, and indexer weights_proj only round their output (F4). The compressor projections,
 * router gate, embedding and head stay FP32 (F4). F5's BF16 weighted intermediate is the
 * W2 input rounding (shared and routed w2), its BF16 sum DSV4_ACT_MOE_OUT.
 *
 * The roles live in a table of weight storage ranges built at create from the engine's
 * blocks, so a row-block view (wo_a's groups) has the role of the tensor it is cut from and
 * no matrix carries a role.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/fidelity.h"
#include "model/numerics.h"
#include "util/err.h"

/* Roles of a weight (bits). ACTQ: a projection the release stores FP8/FP4 (not wo_a): F1
 * quantizes its input rows, F1 or F4 round its output to BF16. BF16OUT: another BF16 linear
 * of the official graph (wo_a, indexer weights_proj): F4 rounds its output. BF16IN (expert
 * W2, with ACTQ): F5 rounds the input rows to BF16 before F1 quantizes them. BF16IN_F4: F4
 * rounds the input rows to BF16 (wo_a: the attention output; wq_b, indexer wq_b: the q_norm
 * output; MTP e_proj/h_proj: the enorm/hnorm outputs). */
enum {
    ROLE_ACTQ = 1u,
    ROLE_BF16OUT = 2u,
    ROLE_BF16IN = 4u,
    ROLE_BF16IN_F4 = 8u,
};

typedef struct {
    const char *lo, *hi; /* the weight's row storage [lo, hi) */
    unsigned role;
} role_range;

typedef struct {
    unsigned items;      /* DSV4_FID_* */
    int rd;              /* rope channels of a KV row (F2 keeps them BF16) */
    role_range *roles;   /* (n_roles) sorted by lo, disjoint */
    int n_roles;
    float *buf;          /* (cap) rounded input rows of the products in flight */
    int64_t cap;
} fid_state;

/* ---- roles -------------------------------------------------------------------------------- */

static int64_t row_storage_bytes(const dsv4_mat *m) {
    switch (m->fmt) {
    case DSV4_WF_F32: return m->rows * m->cols * 4;
    case DSV4_WF_F16:
    case DSV4_WF_BF16: return m->rows * m->cols * 2;
    case DSV4_WF_FP8:
    case DSV4_WF_I8: return m->rows * m->cols;
    case DSV4_WF_FP4:
    case DSV4_WF_FP4L:
    case DSV4_WF_FP4B: return m->rows * m->cols / 2;
    default: return 0;
    }
}

static void add_role(role_range *r, int *n, const dsv4_mat *m, unsigned role) {
    const int64_t bytes = row_storage_bytes(m);
    if (!m->w || m->rows <= 0 || bytes <= 0) return; /* absent */
    r[*n] = (role_range){m->w, (const char *)m->w + bytes, role};
    (*n)++;
}

static int by_lo(const void *a, const void *b) {
    const char *x = ((const role_range *)a)->lo, *y = ((const role_range *)b)->lo;
    return x < y ? -1 : x > y;
}

/* The roles of every block's weights (model.md §6), sorted; the same storage listed twice
 * (with the same role) is kept once. */
static int build_roles(fid_state *s, const dsv4_config *c, const dsv4_block_w *blocks, int n_blocks,
                       dsv4_err *err) {
    const int E = c->n_routed_experts;
    const int64_t max_n = (int64_t)n_blocks * (12 + 3 * (int64_t)(E > 0 ? E : 0));
    s->roles = malloc(sizeof *s->roles * (size_t)(max_n > 0 ? max_n : 1));
    if (!s->roles) return dsv4_fail(err, DSV4_ERR_NOMEM, "fidelity: out of memory for the role table");
    int n = 0;
    for (int l = 0; l < n_blocks; l++) {
        const dsv4_block_w *b = &blocks[l];
        add_role(s->roles, &n, &b->wq_a, ROLE_ACTQ);
        add_role(s->roles, &n, &b->wkv, ROLE_ACTQ);
        add_role(s->roles, &n, &b->wo_b, ROLE_ACTQ);
        add_role(s->roles, &n, &b->sh_w1, ROLE_ACTQ);
        add_role(s->roles, &n, &b->sh_w3, ROLE_ACTQ);
        add_role(s->roles, &n, &b->sh_w2, ROLE_ACTQ | ROLE_BF16IN);
        /* F4: their inputs are RMSNorm outputs (q_norm; MTP enorm, hnorm) the official
         * graph holds in BF16 */
        add_role(s->roles, &n, &b->wq_b, ROLE_ACTQ | ROLE_BF16IN_F4);
        add_role(s->roles, &n, &b->idx_wq_b, ROLE_ACTQ | ROLE_BF16IN_F4);
        add_role(s->roles, &n, &b->e_proj, ROLE_ACTQ | ROLE_BF16IN_F4);
        add_role(s->roles, &n, &b->h_proj, ROLE_ACTQ | ROLE_BF16IN_F4);
        add_role(s->roles, &n, &b->wo_a, ROLE_BF16OUT | ROLE_BF16IN_F4); /* F4: attention output in BF16 */
        add_role(s->roles, &n, &b->idx_weights_proj, ROLE_BF16OUT);
        if (!(b->w1 && b->w2 && b->w3)) continue;
        for (int x = 0; x < E; x++) {
            add_role(s->roles, &n, &b->w1[x], ROLE_ACTQ);
            add_role(s->roles, &n, &b->w3[x], ROLE_ACTQ);
            add_role(s->roles, &n, &b->w2[x], ROLE_ACTQ | ROLE_BF16IN);
        }
    }
    qsort(s->roles, (size_t)n, sizeof *s->roles, by_lo);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k > 0 && s->roles[i].lo < s->roles[k - 1].hi) {
            const role_range *p = &s->roles[k - 1], *q = &s->roles[i];
            if (p->lo == q->lo && p->hi == q->hi && p->role == q->role) continue; /* listed twice */
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "fidelity: two weights of different roles (0x%x, "
                             "0x%x) share storage; the mode cannot tell their products apart", p->role, q->role);
        }
        s->roles[k++] = s->roles[i];
    }
    s->n_roles = k;
    return DSV4_OK;
}

/* The role of the weight whose storage holds m's rows (0: none, e.g. a compressor's). */
static unsigned role_of(const fid_state *s, const dsv4_mat *m) {
    const char *p = m->w;
    int lo = 0, hi = s->n_roles; /* the last range with .lo <= p is below hi */
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (s->roles[mid].lo <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && p < s->roles[lo - 1].hi ? s->roles[lo - 1].role : 0;
}

/* ---- products ----------------------------------------------------------------------------- */

static int quant_in(unsigned fid, unsigned role) { return (role & ROLE_ACTQ) && (fid & DSV4_FID_F1); }

static int bf16_in(unsigned fid, unsigned role) {
    return ((role & ROLE_BF16IN) && (fid & DSV4_FID_F5)) || ((role & ROLE_BF16IN_F4) && (fid & DSV4_FID_F4));
}

static int round_out(unsigned fid, unsigned role) {
    return ((role & ROLE_ACTQ) && (fid & (DSV4_FID_F1 | DSV4_FID_F4))) ||
           ((role & ROLE_BF16OUT) && (fid & DSV4_FID_F4));
}

/* rows (n_rows, cols) of x into dst as the items ask: BF16 (F5 on W2, F4 on wo_a), then
 * FP8 per 128 (F1). Each row on its own: results keep dsv4_linear's batch invariance. */
static void round_rows(unsigned fid, unsigned role, const float *x, int n_rows, int64_t cols, float *dst) {
    memcpy(dst, x, sizeof(float) * (size_t)n_rows * (size_t)cols);
    for (int r = 0; r < n_rows; r++) {
        float *row = dst + (int64_t)r * cols;
        if (bf16_in(fid, role)) dsv4_fid_bf16(row, cols);
        if (quant_in(fid, role)) dsv4_fid_fp8_rt(row, cols, 128);
    }
}

/* Up to this many products go to one dsv4_linear_batch job. */
#define FID_BATCH 64

typedef struct {
    dsv4_kctx *k;
    dsv4_lin_op ops[FID_BATCH];
    int n;
    int64_t used; /* floats of the state's buffer the queued products read */
} fid_queue;

static void flush(fid_queue *q) {
    if (q->n) dsv4_linear_batch(q->k, q->ops, q->n);
    q->n = 0;
    q->used = 0;
}

static void push(fid_queue *q, dsv4_lin_op op) {
    q->ops[q->n++] = op;
    if (q->n == FID_BATCH) flush(q);
}

/* The products with their inputs rounded into the state's buffer (as many as it holds per
 * job; a product larger than the whole buffer in row slices), then the outputs rounded. */
static void fid_linear(const dsv4_numerics *nm, dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops) {
    fid_state *s = nm->state;
    const unsigned fid = s->items;
    fid_queue q = {.k = k};
    for (int i = 0; i < n_ops; i++) {
        const dsv4_lin_op *op = &ops[i];
        const unsigned role = role_of(s, op->w);
        const int64_t cols = op->w->cols, need = (int64_t)op->n_rows * cols;
        if (!(quant_in(fid, role) || bf16_in(fid, role)) || need <= 0) {
            push(&q, *op);
        } else if (need <= s->cap) {
            if (q.used + need > s->cap) flush(&q);
            float *in = s->buf + q.used; /* (n_rows, cols) */
            q.used += need;
            round_rows(fid, role, op->x, op->n_rows, cols, in);
            push(&q, (dsv4_lin_op){op->w, in, op->n_rows, op->y});
        } else {
            flush(&q);
            const int slice = (int)(s->cap / cols); /* >= 1: cap holds a row of any weight */
            for (int r0 = 0; r0 < op->n_rows; r0 += slice) {
                const int nr = op->n_rows - r0 < slice ? op->n_rows - r0 : slice;
                round_rows(fid, role, op->x + (int64_t)r0 * cols, nr, cols, s->buf);
                dsv4_linear(k, op->w, s->buf, nr, op->y + (int64_t)r0 * op->w->rows);
            }
        }
    }
    flush(&q);
    for (int i = 0; i < n_ops; i++)
        if (round_out(fid, role_of(s, ops[i].w)))
            dsv4_fid_bf16(ops[i].y, (int64_t)ops[i].n_rows * ops[i].w->rows);
}

/* ---- activations -------------------------------------------------------------------------- */

static void fid_round(const dsv4_numerics *nm, dsv4_act at, float *x, int64_t n) {
    const fid_state *s = nm->state;
    const unsigned fid = s->items;
    switch (at) {
    case DSV4_ACT_COLLAPSE:
    case DSV4_ACT_NORM:
    case DSV4_ACT_STREAMS:
    case DSV4_ACT_Q:
    case DSV4_ACT_POOLED:
    case DSV4_ACT_PROBS: /* P.V takes BF16 probabilities, Z stays the FP32 sum */
        if (fid & DSV4_FID_F4) dsv4_fid_bf16(x, n);
        break;
    case DSV4_ACT_KV:
    case DSV4_ACT_ENTRY: /* F2: nope FP8 per 64, rope BF16 (includes F4's BF16) */
        if (fid & DSV4_FID_F2) dsv4_fid_kv_row(x, (int)n, s->rd);
        else if (fid & DSV4_FID_F4) dsv4_fid_bf16(x, n);
        break;
    case DSV4_ACT_INDEX_Q:
    case DSV4_ACT_INDEX_KEY: /* F3: Hadamard rotation, then FP4 per 32 */
        if (fid & DSV4_FID_F3) dsv4_fid_index_row(x, (int)n);
        break;
    case DSV4_ACT_MOE_OUT: /* F5: the FP32 sum rounded to BF16 */
        if (fid & DSV4_FID_F5) dsv4_fid_bf16(x, n);
        break;
    }
}

/* ---- create ------------------------------------------------------------------------------- */

/* The input buffer holds this many rows of the widest weight, twice (a block's two
 * products of one input go in one job); longer products run in slices of it. */
#define FID_BUF_ROWS 512

int dsv4_numerics_fidelity_create(unsigned items, const dsv4_config *cfg, const dsv4_block_w *blocks,
                                  int n_blocks, int max_rows, dsv4_numerics **out, dsv4_err *err) {
    *out = NULL;
    const int dI = cfg->index_head_dim;
    if ((items & DSV4_FID_F3) && (dI <= 0 || (dI & (dI - 1))))
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: fidelity F3 needs a power-of-two indexer head dim "
                         "for its Hadamard rotation (index_head_dim %d)", dI);
    dsv4_numerics *nm = calloc(1, sizeof *nm);
    fid_state *s = calloc(1, sizeof *s);
    if (!nm || !s) {
        free(nm);
        free(s);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "fidelity: out of memory");
    }
    *nm = (dsv4_numerics){"fidelity", fid_linear, fid_round, s, NULL};
    s->items = items;
    s->rd = cfg->qk_rope_head_dim;
    int rc = build_roles(s, cfg, blocks, n_blocks, err);
    int64_t max_cols = 1;
    for (int l = 0; l < n_blocks; l++) {
        const dsv4_block_w *b = &blocks[l];
        const dsv4_mat *m[] = {&b->wq_a, &b->wq_b, &b->wkv, &b->wo_a, &b->wo_b, &b->idx_wq_b,
                               &b->sh_w1, &b->sh_w2, &b->sh_w3, &b->e_proj, &b->h_proj};
        for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
            if (m[i]->cols > max_cols) max_cols = m[i]->cols;
        if (b->w1 && cfg->n_routed_experts > 0) { /* experts share the shapes of expert 0 */
            if (b->w1[0].cols > max_cols) max_cols = b->w1[0].cols;
            if (b->w2[0].cols > max_cols) max_cols = b->w2[0].cols;
        }
    }
    const int rows = max_rows < FID_BUF_ROWS ? (max_rows > 0 ? max_rows : 1) : FID_BUF_ROWS;
    s->cap = 2 * (int64_t)rows * max_cols;
    if (!rc && !(s->buf = malloc(sizeof(float) * (size_t)s->cap)))
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "fidelity: out of memory for %lld input rows", (long long)s->cap);
    if (rc) {
        dsv4_numerics_free(nm);
        return rc;
    }
    *out = nm;
    return DSV4_OK;
}

void dsv4_numerics_free(dsv4_numerics *nm) {
    if (!nm || nm == dsv4_numerics_exact() || nm == dsv4_numerics_w8a8()) return;
    fid_state *s = nm->state;
    if (s) {
        free(s->roles);
        free(s->buf);
        free(s);
    }
    free(nm);
}
