/* moe.c — mixture of experts (spec/model.md §5.12).
 *
 * Router: gate logits → scores (sqrtsoftplus | sigmoid | softmax) → selection (hash table
 * on the first layers, else top-K of score + bias) → weights from the unbiased scores.
 * Experts: clamped SwiGLU, routing weight applied to the intermediate before W2.
 *
 * The forward groups rows by expert so each expert's matrices are read once per call with
 * all of its rows (one batched linear per matrix), then sums every token's K expert
 * outputs in k order and adds the shared expert last. A token's result therefore depends
 * only on its own row, never on which other rows share the call: batch invariance holds
 * as long as dsv4_linear's per-row result does not depend on n_rows. */
#include "moe/moe.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/swiglu.h"
#include "moe/moe_impl.h"
#include "util/err.h"
#include "util/hot.h"

/* Bound on the (rows, K, D) gathered-input and expert-output buffers of one pass; larger
 * calls are processed in passes of consecutive rows (Flash: 1365 rows per pass). */
#define MOE_PASS_BYTES ((int64_t)256 << 20)

/* ---- router --------------------------------------------------------------------------- */

double dsv4_moe_score(const dsv4_config *cfg, double z) {
    if (cfg->scoring_func == DSV4_SCORE_SIGMOID) return 1.0 / (1.0 + exp(-z));
    /* torch's softplus threshold: the identity above 20 (also avoids exp overflow). */
    return sqrt(z > 20.0 ? z : log1p(exp(z)));
}

/* s (E) = score_func(logits), in double (the weights are ratios of these). */
static void moe_scores(const dsv4_config *cfg, const float *logits, double *s) {
    const int E = cfg->n_routed_experts;
    switch (cfg->scoring_func) {
    case DSV4_SCORE_SOFTMAX: {
        double mx = -INFINITY, sum = 0.0;
        for (int e = 0; e < E; e++) if (logits[e] > mx) mx = logits[e];
        if (!isfinite(mx)) mx = 0.0;
        for (int e = 0; e < E; e++) { s[e] = exp((double)logits[e] - mx); sum += s[e]; }
        for (int e = 0; e < E; e++) s[e] /= sum;
        break;
    }
    default: /* sigmoid, sqrtsoftplus */
        for (int e = 0; e < E; e++) s[e] = dsv4_moe_score(cfg, logits[e]);
        break;
    }
}

/* K rounds of the first maximum of s + bias over the ids not yet taken: the reference
 * (and the answer wherever some s + bias is a NaN, which compares false both ways). */
static void topk_rounds(const double *s, const float *bias, int E, int K, int *sel) {
    for (int k = 0; k < K; k++) {
        int best = -1;
        double best_v = 0.0;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int k2 = 0; k2 < k; k2++) taken |= sel[k2] == e;
            if (taken) continue;
            const double v = s[e] + (bias ? (double)bias[e] : 0.0);
            if (best < 0 || v > best_v) { best = e; best_v = v; }
        }
        sel[k] = best;
    }
}

void dsv4_moe_topk(const double *s, const float *bias, int E, int K, int *sel) {
    /* One pass keeping the K best so far, sorted by value descending and, among equal
     * values, id ascending: the K rounds' order (strict comparisons, ids upward) without
     * their K passes over E (a prefill routes 512 rows x 256 experts a layer). */
    double top[DSV4_MOE_TOPK_MAX];
    int n = 0;
    if (K > DSV4_MOE_TOPK_MAX || K > E) {
        topk_rounds(s, bias, E, K, sel);
        return;
    }
    for (int e = 0; e < E; e++) {
        const double v = s[e] + (bias ? (double)bias[e] : 0.0);
        if (v != v) { /* NaN: the rounds' answer */
            topk_rounds(s, bias, E, K, sel);
            return;
        }
        dsv4_moe_topk_push(top, sel, &n, K, v, e);
    }
}

/* Selection and weights of one token from its gate logits (E). s: scratch (E). */
DSV4_HOT_AT(dsv4_moe_route_row, 0x750)
int dsv4_moe_route_row(const dsv4_config *cfg, const dsv4_block_w *b, const float *logits, int32_t token, int *sel,
                       float *w, double *s, dsv4_err *err) {
    const int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok;
    const int hash = b->layer_id < cfg->num_hash_layers;
    /* a hash layer's weights need only its K experts' scores where each score is its own
     * logit's (not softmax) */
    /* a router without hash: the exact scores of the experts that can be chosen, when
     * the bounds apply (route_bound.c), else of all */
    const int chosen = !hash && dsv4_moe_topk_bounded(cfg, logits, b->gate_bias, b->route_tab, s, sel);
    if (!chosen && (!hash || cfg->scoring_func == DSV4_SCORE_SOFTMAX)) moe_scores(cfg, logits, s);
    if (hash) {
        /* Hash layer: the token's stored expert list, in stored order. */
        if (!b->tid2eid)
            return dsv4_fail(err, DSV4_ERR_ARG, "moe: layer %d routes by hash but has no tid2eid",
                             b->layer_id);
        if (token < 0 || token >= cfg->vocab_size)
            return dsv4_fail(err, DSV4_ERR_ARG, "moe: layer %d: token id %d outside [0, %d)",
                             b->layer_id, (int)token, cfg->vocab_size);
        const int32_t *row = b->tid2eid + (int64_t)token * K;
        for (int k = 0; k < K; k++) {
            if (row[k] < 0 || row[k] >= E)
                return dsv4_fail(err, DSV4_ERR_ARG, "moe: layer %d: tid2eid[%d][%d] = %d outside [0, %d)",
                                 b->layer_id, (int)token, k, (int)row[k], E);
            for (int k2 = 0; k2 < k; k2++)
                if (row[k2] == row[k])
                    return dsv4_fail(err, DSV4_ERR_ARG, "moe: layer %d: tid2eid[%d] repeats expert %d",
                                     b->layer_id, (int)token, (int)row[k]);
            sel[k] = row[k];
        }
        if (cfg->scoring_func != DSV4_SCORE_SOFTMAX)
            for (int k = 0; k < K; k++) s[sel[k]] = dsv4_moe_score(cfg, logits[sel[k]]);
    } else if (!chosen) {
        dsv4_moe_topk(s, b->gate_bias, E, K, sel);
    }
    /* Weights from the unbiased scores; renormalised over the K chosen unless softmax
     * (norm_topk_prob is ignored), then times routed_scaling_factor. */
    double sum = 0.0;
    for (int k = 0; k < K; k++) sum += s[sel[k]];
    const int norm = cfg->scoring_func != DSV4_SCORE_SOFTMAX;
    for (int k = 0; k < K; k++) {
        double v = s[sel[k]];
        if (norm) v /= sum;
        w[k] = (float)(v * cfg->routed_scaling_factor);
    }
    return DSV4_OK;
}

void dsv4_moe_route(const dsv4_config *cfg, const dsv4_block_w *b, const float *x,
                    int32_t token, int *sel, float *w) {
    const int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok;
    float *row = malloc((size_t)b->gate.cols * sizeof(float));  /* (D) dequantized gate row */
    float *logits = malloc((size_t)E * sizeof(float));          /* (E) */
    double *s = malloc((size_t)E * sizeof(double));              /* (E) */
    int rc = DSV4_ERR_NOMEM;
    if (row && logits && s) {
        /* The reference linear, one row: the same sums as dsv4_linear_ref. */
        dsv4_linear_ref(&b->gate, x, 1, logits, row);
        rc = dsv4_moe_route_row(cfg, b, logits, token, sel, w, s, NULL);
    }
    if (rc != DSV4_OK)  /* no error channel here: an impossible route, visibly */
        for (int k = 0; k < K; k++) { sel[k] = -1; w[k] = 0.0f; }
    free(row);
    free(logits);
    free(s);
}

/* ---- experts -------------------------------------------------------------------------- */

int dsv4_moe_w13(const dsv4_mat *w1, const dsv4_mat *w3, dsv4_mat *w13) {
    if (!dsv4_wf_is_fp4(w1->fmt) || w3->fmt != w1->fmt || w3->cols != w1->cols || w3->scale_is_f32 != w1->scale_is_f32 ||
        !w1->w || !w1->scale || w1->rows <= 0 || w3->rows <= 0)
        return 0;
    dsv4_mat end; /* where a row after W1's last would lie (FP4 rows always slice) */
    if (dsv4_mat_rows(w1, w1->rows, 0, &end) || end.w != w3->w || end.scale != w3->scale) return 0;
    *w13 = *w1;
    w13->rows = w1->rows + w3->rows;
    return 1;
}

/* e < 0: a matrix of the block; else of routed expert e. */
static int check_mat(const dsv4_mat *m, int64_t rows, int64_t cols, const char *name, int e,
                     int layer, dsv4_err *err) {
    if (m->fmt != DSV4_WF_NONE && m->w && m->rows == rows && m->cols == cols) return DSV4_OK;
    char what[64];
    if (e < 0) snprintf(what, sizeof what, "%s", name);
    else snprintf(what, sizeof what, "experts.%d.%s", e, name);
    return dsv4_fail(err, DSV4_ERR_ARG,
                     "moe: layer %d: %s is [%lld, %lld] (format %d), expected [%lld, %lld]", layer,
                     what, (long long)m->rows, (long long)m->cols, (int)m->fmt, (long long)rows,
                     (long long)cols);
}

int dsv4_moe_check_shared(const dsv4_config *cfg, const dsv4_block_w *b, dsv4_err *err) {
    const int E = cfg->n_routed_experts, D = cfg->hidden_size, I = cfg->moe_intermediate_size;
    const int L = b->layer_id;
    if (E < 1 || cfg->num_experts_per_tok < 1 || cfg->num_experts_per_tok > E || D < 1 || I < 1)
        return dsv4_fail(err, DSV4_ERR_CONFIG, "moe: bad sizes E=%d K=%d D=%d I=%d", E,
                         cfg->num_experts_per_tok, D, I);
    if (!b->w1 || !b->w2 || !b->w3)
        return dsv4_fail(err, DSV4_ERR_ARG, "moe: layer %d has no routed expert tables", L);
    int rc;
    if ((rc = check_mat(&b->gate, E, D, "gate", -1, L, err))) return rc;
    if ((rc = check_mat(&b->sh_w1, I, D, "shared_experts.w1", -1, L, err))) return rc;
    if ((rc = check_mat(&b->sh_w3, I, D, "shared_experts.w3", -1, L, err))) return rc;
    return check_mat(&b->sh_w2, D, I, "shared_experts.w2", -1, L, err);
}

int dsv4_moe_check_experts(const dsv4_config *cfg, const dsv4_block_w *b, int e0, int e1,
                           dsv4_err *err) {
    const int D = cfg->hidden_size, I = cfg->moe_intermediate_size, L = b->layer_id;
    int rc;
    for (int e = e0; e < e1; e++) {
        if ((rc = check_mat(&b->w1[e], I, D, "w1", e, L, err))) return rc;
        if ((rc = check_mat(&b->w3[e], I, D, "w3", e, L, err))) return rc;
        if ((rc = check_mat(&b->w2[e], D, I, "w2", e, L, err))) return rc;
    }
    return DSV4_OK;
}

static int check_weights(const dsv4_config *cfg, const dsv4_block_w *b, dsv4_err *err) {
    int rc = dsv4_moe_check_shared(cfg, b, err);
    return rc ? rc : dsv4_moe_check_experts(cfg, b, 0, cfg->n_routed_experts, err);
}

/* Scratch of one pass of at most R rows. */
typedef struct moe_scratch {
    float *logits;   /* (R, E) gate logits */
    double *s;       /* (E) scores of one row */
    int *sel;        /* (R, K) selected experts, k order */
    float *w;        /* (R, K) routing weights */
    int *start;      /* (E + 1) first slot of each expert in list */
    int *list;       /* (R*K) slots s*K + k grouped by expert, rows ascending */
    int *at;         /* (R*K) position of slot s*K + k in list (list's inverse) */
    float *wg;       /* (R*K) routing weights in list order */
    float *xg;       /* (R*K, D) input rows in list order */
    float *gu;       /* (2 (R*K + R), I) gate and up projections by group: list order, then
                      * the shared expert's R rows; a group of n rows from slot p0 has its
                      * (n, I) gate rows at gu + 2 p0 I and its (n, I) up rows right after
                      * them (g then holds the intermediate), so that a one-row group's gate
                      * and up are one (2I) output row (dsv4_moe_w13) */
    float *og;       /* (R*K, D) routed expert outputs in list order */
    float *sh;       /* (R, D) shared expert output */
    dsv4_moe_group *gr; /* (E + 1) the pass's expert groups, the shared expert last */
} moe_scratch;

static int scratch_take(dsv4_arena *a, moe_scratch *m, int R, int E, int K, int D, int I) {
    const long long RK = (long long)R * K;
    m->logits = dsv4_arena_take_n(a, (long long)R * E, sizeof(float));
    m->s = dsv4_arena_take_n(a, E, sizeof(double));
    m->sel = dsv4_arena_take_n(a, RK, sizeof(int));
    m->w = dsv4_arena_take_n(a, RK, sizeof(float));
    m->start = dsv4_arena_take_n(a, E + 1LL, sizeof(int));
    m->list = dsv4_arena_take_n(a, RK, sizeof(int));
    m->at = dsv4_arena_take_n(a, RK, sizeof(int));
    m->wg = dsv4_arena_take_n(a, RK, sizeof(float));
    m->xg = dsv4_arena_take_n(a, RK * D, sizeof(float));
    m->gu = dsv4_arena_take_n(a, 2 * (RK + R) * I, sizeof(float));
    m->og = dsv4_arena_take_n(a, RK * D, sizeof(float));
    m->sh = dsv4_arena_take_n(a, (long long)R * D, sizeof(float));
    m->gr = dsv4_arena_take_n(a, E + 1LL, sizeof(dsv4_moe_group));
    return m->logits && m->s && m->sel && m->w && m->start && m->list && m->at && m->wg && m->xg &&
           m->gu && m->og && m->sh && m->gr;
}

/* Rows per pass: the two (R*K, D) buffers, gathered inputs and expert outputs, bound it. */
static int pass_rows(const dsv4_config *cfg, int S) {
    int64_t per = MOE_PASS_BYTES / (2 * (int64_t)cfg->num_experts_per_tok * cfg->hidden_size * (int64_t)sizeof(float));
    if (per < 1) per = 1;
    return per < S ? (int)per : S;
}

size_t dsv4_moe_scratch_bytes(const dsv4_config *cfg, int S) {
    dsv4_arena m = dsv4_arena_measuring();
    moe_scratch ms;
    scratch_take(&m, &ms, pass_rows(cfg, S), cfg->n_routed_experts, cfg->num_experts_per_tok,
                 cfg->hidden_size, cfg->moe_intermediate_size);
    return m.peak;
}

/* Routing of rows over the pool: each row's own arithmetic into its own sel, w; the
 * scores' scratch is the running thread's (kctx scratch, 2E floats hold E doubles). */
typedef struct route_job {
    dsv4_kctx *k;
    const dsv4_config *cfg;
    const dsv4_block_w *b;
    const float *logits;    /* (R, E) */
    const int32_t *tokens;  /* (R) or NULL */
    int *sel;               /* (R, K) */
    float *w;               /* (R, K) */
    atomic_int failed;      /* some row's route failed (its message comes from a rerun) */
} route_job;

static void route_task(void *arg, int r, int tid) {
    route_job *j = arg;
    const int E = j->cfg->n_routed_experts, K = j->cfg->num_experts_per_tok;
    double *s = (double *)(void *)dsv4_kctx_scratch(j->k, tid);
    if (dsv4_moe_route_row(j->cfg, j->b, j->logits + (int64_t)r * E, j->tokens ? j->tokens[r] : -1, j->sel + (int64_t)r * K,
                  j->w + (int64_t)r * K, s, NULL))
        atomic_store_explicit(&j->failed, 1, memory_order_relaxed);
}

int dsv4_moe_gate(dsv4_kctx *k, const dsv4_config *cfg, const dsv4_block_w *b, const float *x,
                  const int32_t *tokens, int R, int *sel, float *w, float *logits, double *s,
                  dsv4_err *err) {
    const int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok;
    dsv4_linear(k, &b->gate, x, R, logits);
    if (R > 1 && 2 * (int64_t)E <= dsv4_kctx_max_cols(k)) {
        route_job j = {k, cfg, b, logits, tokens, sel, w, 0};
        atomic_init(&j.failed, 0);
        dsv4_kctx_parallel(k, R, route_task, &j);
        if (!atomic_load(&j.failed)) return DSV4_OK;
        /* a row failed: the serial pass below finds the first and says why */
    }
    for (int r = 0; r < R; r++) {
        int rc = dsv4_moe_route_row(cfg, b, logits + (int64_t)r * E, tokens ? tokens[r] : -1,
                           sel + (int64_t)r * K, w + (int64_t)r * K, s, err);
        if (rc) return rc;
    }
    return DSV4_OK;
}

typedef struct {
    const dsv4_config *cfg;
    const dsv4_moe_group *gr;
    dsv4_swiglu_fn fn; /* the kernel level's loop: the same bits at every level */
} swiglu_job;

static void swiglu_task(void *arg, int i, int tid) {
    (void)tid;
    const swiglu_job *j = arg;
    const float limit = j->cfg->swiglu_limit > 0 ? (float)j->cfg->swiglu_limit : 0.0f;
    const dsv4_moe_group *g = &j->gr[i];
    j->fn(g->g, g->u, g->w, g->n, j->cfg->moe_intermediate_size, limit, g->g);
}

/* Groups per slice: two linears each, one dsv4_linear_batch job per phase. */
#define MOE_SLICE DSV4_MOE_ONE_MAX_GROUPS

/* The one-row job (moe_one.c) applies: the exact numerics (another mode may treat a product
 * as a whole) and one row in every group. */
static int one_row_ok(const dsv4_numerics *nm, const dsv4_moe_group *s, int ng) {
    if (nm != dsv4_numerics_exact()) return 0;
    for (int i = 0; i < ng; i++)
        if (s[i].n != 1) return 0;
    return 1;
}

/* Slices of MOE_SLICE groups: W1/W3 of the slice in one linear job, SwiGLU, W2 in another. */
static void experts_sliced(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *cfg, const dsv4_moe_group *gr,
                           int n_groups) {
    const int64_t I = cfg->moe_intermediate_size;
    for (int g0 = 0; g0 < n_groups; g0 += MOE_SLICE) {
        const int ng = n_groups - g0 < MOE_SLICE ? n_groups - g0 : MOE_SLICE;
        const dsv4_moe_group *s = gr + g0;
        /* one row in every group (batch-1 decode): everything in one job (moe_one.c) */
        if (one_row_ok(nm, s, ng) && dsv4_moe_one_run(k, cfg, s, ng, NULL, NULL, DSV4_MOE_ONE_ITEM_BYTES) == 0) continue;
        dsv4_lin_op ops[2 * MOE_SLICE];
        int64_t elems = 0;
        /* W1 and W3 of every group */
        for (int i = 0; i < ng; i++) {
            ops[2 * i] = (dsv4_lin_op){s[i].w1, s[i].x, s[i].n, s[i].g};
            ops[2 * i + 1] = (dsv4_lin_op){s[i].w3, s[i].x, s[i].n, s[i].u};
            elems += s[i].n * I;
        }
        nm->linear(nm, k, ops, 2 * ng);
        /* clamped SwiGLU times the routing weight: elementwise, so any split gives the
         * same bits; worth the pool past a few thousand values (libm's expf ~5 ns each,
         * the AVX-512 loop ~0.7 ns: a batch-16 decode slice of 32 groups holds ~17K) */
        swiglu_job sj = {cfg, s, dsv4_kctx_swiglu(k)};
        if (elems >= (1 << 11)) dsv4_kctx_parallel(k, ng, swiglu_task, &sj);
        else for (int i = 0; i < ng; i++) swiglu_task(&sj, i, 0);
        /* W2 of every group */
        for (int i = 0; i < ng; i++) ops[i] = (dsv4_lin_op){s[i].w2, s[i].g, s[i].n, s[i].out};
        nm->linear(nm, k, ops, ng);
    }
}

/* ---- a batched decode step's few-row experts: one task each ----------------------------
 * At batch 16 a layer routes ~75 experts of 1-4 rows; as slices of three jobs each (W1/W3,
 * SwiGLU, W2: 9 jobs a layer) every job ended with a thread idle up to a task, ~200 us of
 * thread time a layer (BENCHMARKS.md, session 20 s16fp4). Here each such expert is one task
 * of one job: W1 and W3 (dsv4_linear_here: one whole-matrix GEMV each, as the planner gives
 * them at batch 16), its SwiGLU, W2, on one thread; the shared expert (16 rows, small-M) is
 * the job's first task, on one thread while the other starts the routed ones (its own three
 * jobs took ~35 us a layer more than its work). The threads claim the tasks in turn, the
 * routed ones most rows first, so the job ends on the cheapest experts (~20 us of thread
 * time idle a layer). Same products, same bits. */
#define MOE_FEW_ROWS 4      /* experts of up to this many rows take a task each */
#define MOE_FEW_MAX 1024    /* groups a call may have for it (more: the sliced path) */
#define MOE_MANY_MAX 2      /* and with at most this many other groups (the shared expert) */

#define MOE_FEW_SPLIT_MAX 4 /* tail experts whose W2 is cut in halves, at most */

typedef struct {
    dsv4_kctx *k;
    const dsv4_config *cfg;
    dsv4_swiglu_fn fn; /* the kernel level's loop: the same bits at every level */
    const dsv4_moe_group *gr;
    const int *order; /* (n) group indices, most rows first */
    int n;
    atomic_int next;  /* the next item to claim (few_task's list) */
    /* the last `split` positions of order (one-row groups): their W1/W3 and SwiGLU as one
     * item each, then their W2 as two items each (rows [0, half), [half, D)), after them */
    int split, half;
    atomic_int up_done[MOE_FEW_SPLIT_MAX]; /* split group s's SwiGLU written (release) */
} few_job;

static void few_expert_up(const few_job *j, const dsv4_moe_group *g) {
    const float limit = j->cfg->swiglu_limit > 0 ? (float)j->cfg->swiglu_limit : 0.0f;
    const int I = j->cfg->moe_intermediate_size;
    dsv4_mat w13;
    if (g->n == 1 && g->u == g->g + I && dsv4_moe_w13(g->w1, g->w3, &w13)) {
        /* W1 and W3 as one product: the (2I) output row is the gate, then the up row */
        const dsv4_lin_op up = {&w13, g->x, 1, g->g};
        dsv4_linear_here(j->k, &up, 1);
    } else {
        const dsv4_lin_op up[2] = {{g->w1, g->x, g->n, g->g}, {g->w3, g->x, g->n, g->u}};
        dsv4_linear_here(j->k, up, 2);
    }
    j->fn(g->g, g->u, g->w, g->n, I, limit, g->g);
}

static void few_expert(const few_job *j, const dsv4_moe_group *g) {
    few_expert_up(j, g);
    const dsv4_lin_op down = {g->w2, g->g, g->n, g->out};
    dsv4_linear_here(j->k, &down, 1);
}

/* Rows [r0, r0 + n) of a one-row group's W2 (few_split checked that they slice). */
static void few_down_rows(const few_job *j, const dsv4_moe_group *g, int64_t r0, int64_t n) {
    dsv4_mat v;
    if (dsv4_mat_rows(g->w2, r0, n, &v)) return;
    const dsv4_lin_op down = {&v, g->g, 1, g->out + r0};
    dsv4_linear_here(j->k, &down, 1);
}

/* The job's items: the whole experts of order but the last `split`, then those one-row
 * experts' W1/W3 and SwiGLU, then their W2 in halves. A W2 half waits for its SwiGLU, whose
 * item was claimed before it (by a thread that is running it, or on one thread in order). */
DSV4_HOT_AT(few_task, 0xc50)
static void few_task(void *arg, int t, int tid) {
    (void)t, (void)tid;
    few_job *j = arg;
    const int whole = j->n - j->split, items = j->n + 2 * j->split;
    for (int i; (i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < items;) {
        if (i < whole) {
            few_expert(j, &j->gr[j->order[i]]);
        } else if (i < j->n) {
            few_expert_up(j, &j->gr[j->order[i]]);
            atomic_store_explicit(&j->up_done[i - whole], 1, memory_order_release);
        } else {
            const int s = (i - j->n) / 2, h = (i - j->n) % 2, D = j->cfg->hidden_size;
            for (long w = 0; !atomic_load_explicit(&j->up_done[s], memory_order_acquire); w++)
                if (w > 4096) sched_yield(); /* the thread running its SwiGLU may be descheduled */
            few_down_rows(j, &j->gr[j->order[whole + s]], h ? j->half : 0, h ? D - j->half : j->half);
        }
    }
}

/* The tail split of a few-row job over T threads: its last (up to T) experts, if they are
 * one-row groups whose W2 slices at half its rows. The job ends on one-row experts (most rows
 * first); with each a whole item the thread that runs out first waited up to a whole expert
 * (~40 us of thread time, ~20 us a job on average at batch 16; 80-110 us of thread time a
 * step, the one job end of batch 16 that stealing cannot shorten). The halves of a W2 give
 * the bits of the whole (linear_fast.h: outputs do not depend on how rows are cut). */
static void few_split(few_job *j) {
    const int T = dsv4_kctx_threads(j->k), D = j->cfg->hidden_size;
    j->split = 0;
    j->half = ((D + 1) / 2 + 3) & ~3;
    for (int s = 0; s < MOE_FEW_SPLIT_MAX; s++) atomic_init(&j->up_done[s], 0);
    if (T < 2 || j->half >= D) return;
    int s = 0;
    dsv4_mat v;
    while (s < T && s < MOE_FEW_SPLIT_MAX && s < j->n - 1) {
        const dsv4_moe_group *g = &j->gr[j->order[j->n - 1 - s]];
        if (g->n != 1 || dsv4_mat_rows(g->w2, 0, j->half, &v) || dsv4_mat_rows(g->w2, j->half, D - j->half, &v)) break;
        s++;
    }
    j->split = s;
}

/* The groups many (n_many, larger) and few (n_few, few-row) of gr in one job: the larger
 * first (the shared expert, on one thread while the other takes the routed ones), then the
 * few-row ones most rows first (a counting sort: equal rows keep their order). */
static void experts_few(dsv4_kctx *k, const dsv4_config *cfg, const dsv4_moe_group *gr, const int *many, int n_many,
                        const int *few, int n_few) {
    int order[MOE_MANY_MAX + MOE_FEW_MAX], at[MOE_FEW_ROWS + 2] = {0};
    for (int i = 0; i < n_many; i++) order[i] = many[i];
    for (int i = 0; i < n_few; i++) at[MOE_FEW_ROWS - gr[few[i]].n + 1]++;
    for (int r = 0; r <= MOE_FEW_ROWS; r++) at[r + 1] += at[r];
    for (int i = 0; i < n_few; i++) order[n_many + at[MOE_FEW_ROWS - gr[few[i]].n]++] = few[i];
    few_job j = {k, cfg, dsv4_kctx_swiglu(k), gr, order, n_many + n_few, 0, 0, 0, {0}};
    atomic_init(&j.next, 0);
    few_split(&j);
    dsv4_kctx_parallel(k, dsv4_kctx_threads(k), few_task, &j);
}

void dsv4_moe_experts(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *cfg,
                      const dsv4_moe_group *gr, int n_groups) {
    /* a batched decode step: few-row experts (and at most MOE_MANY_MAX others) under the
     * exact numerics, not all of one row (moe_one.c's case) */
    int few[MOE_FEW_MAX], many[MOE_MANY_MAX + 1], n_few = 0, n_many = 0, n_one = 0;
    if (nm == dsv4_numerics_exact() && n_groups > 1 && n_groups <= MOE_FEW_MAX) {
        for (int i = 0; i < n_groups && n_many <= MOE_MANY_MAX; i++) {
            if (gr[i].n >= 1 && gr[i].n <= MOE_FEW_ROWS) {
                few[n_few++] = i;
                n_one += gr[i].n == 1;
            } else {
                many[n_many++] = i;
            }
        }
    }
    if (n_few < 2 || n_many > MOE_MANY_MAX || (n_many == 0 && n_one == n_groups)) {
        experts_sliced(k, nm, cfg, gr, n_groups);
        return;
    }
    experts_few(k, cfg, gr, many, n_many, few, n_few);
}

void dsv4_moe_expert(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *cfg, const dsv4_mat *w1,
                     const dsv4_mat *w3, const dsv4_mat *w2, const float *x, const float *w,
                     int n, float *out, float *g, float *u) {
    const dsv4_moe_group gr = {w1, w3, w2, x, w, n, out, g, u};
    dsv4_moe_experts(k, nm, cfg, &gr, 1);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MOE_COMBINE_X512 1
/* dsv4_moe_combine 16 columns at a time, the sum in a register: per element the same adds
 * in the same order (o_0 + o_1 + ... + o_{K-1} + shared), so the same bits as the loop
 * below. The loop it replaces passed over y once per source row (K + 1 passes, the
 * baseline build's 4-wide vectors): a 512-token prefill's combine (512 rows, K 6, D 1024,
 * one thread) 1.7-2.9 ms a layer against 0.40-0.76 here (Zen 5; BENCHMARKS.md, "Session
 * 19, pf"), ~1 % of the prefill's thread time before. */
DSV4_HOT_AT(combine_x512, 0xd80)
__attribute__((target("avx512f"))) static void combine_x512(int D, int K, const float *rows, const int *idx,
                                                            const float *shared, float *y) {
    const float *o0 = rows + (int64_t)idx[0] * D;
    int d = 0;
    for (; d + 16 <= D; d += 16) {
        __m512 acc = _mm512_loadu_ps(o0 + d);
        for (int kk = 1; kk < K; kk++) acc = _mm512_add_ps(acc, _mm512_loadu_ps(rows + (int64_t)idx[kk] * D + d));
        _mm512_storeu_ps(y + d, _mm512_add_ps(acc, _mm512_loadu_ps(shared + d)));
    }
    if (d < D) { /* the last D % 16 columns, masked */
        const __mmask16 m = (__mmask16)((1u << (D - d)) - 1u);
        __m512 acc = _mm512_maskz_loadu_ps(m, o0 + d);
        for (int kk = 1; kk < K; kk++) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, rows + (int64_t)idx[kk] * D + d));
        _mm512_mask_storeu_ps(y + d, m, _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, shared + d)));
    }
}

/* libgcc's cached flags, not cpuid per call (a hypervisor trap in a VM; swiglu.c) */
static int combine_have_x512(void) { return __builtin_cpu_supports("avx512f"); }
#else
#define MOE_COMBINE_X512 0
#endif

void dsv4_moe_combine(int D, int K, const float *rows, const int *idx, const float *shared,
                      float *y) {
#if MOE_COMBINE_X512
    if (combine_have_x512()) {
        combine_x512(D, K, rows, idx, shared, y);
        return;
    }
#endif
    /* the reference order, a pass over y per source row (unmeasured without AVX-512, so
     * left as it was) */
    const float *o = rows + (int64_t)idx[0] * D;
    for (int d = 0; d < D; d++) y[d] = o[d];
    for (int kk = 1; kk < K; kk++) {
        o = rows + (int64_t)idx[kk] * D;
        for (int d = 0; d < D; d++) y[d] += o[d];
    }
    for (int d = 0; d < D; d++) y[d] += shared[d];
}

/* The copies around the experts, spread over the pool by rows (each row's own bytes). */
typedef struct moe_rows_job {
    const dsv4_config *cfg;
    const dsv4_numerics *nm;
    const moe_scratch *m;
    const float *x;  /* (R, D) */
    float *y;        /* (R, D) */
    int n_slots;     /* R * K */
} moe_rows_job;

/* Slots [16t, 16t + 16) of the expert list (n_slots in all): their input rows gathered. */
#define GATHER_SLOTS 16
static void gather_task(void *arg, int t, int tid) {
    (void)tid;
    const moe_rows_job *j = arg;
    const int D = j->cfg->hidden_size, K = j->cfg->num_experts_per_tok;
    for (int p = t * GATHER_SLOTS; p < (t + 1) * GATHER_SLOTS && p < j->n_slots; p++)
        memcpy(j->m->xg + (int64_t)p * D, j->x + (int64_t)(j->m->list[p] / K) * D, (size_t)D * sizeof(float));
}

/* Row r: routed outputs in k order, shared last, rounded as the numeric mode keeps it. */
static void combine_task(void *arg, int r, int tid) {
    (void)tid;
    const moe_rows_job *j = arg;
    const int D = j->cfg->hidden_size, K = j->cfg->num_experts_per_tok;
    float *yr = j->y + (int64_t)r * D;
    dsv4_moe_combine(D, K, j->m->og, j->m->at + (int64_t)r * K, j->m->sh + (int64_t)r * D, yr);
    j->nm->round(j->nm, DSV4_ACT_MOE_OUT, yr, D);
}

/* Step 2 of a pass: the (row, k) slots grouped by expert (a counting sort, so within an
 * expert the rows stay ascending), each slot's position and weight in that order. */
static void group_slots(const dsv4_config *cfg, moe_scratch *m, int R) {
    const int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok;
    memset(m->start, 0, (size_t)(E + 1) * sizeof(int));
    for (int i = 0; i < R * K; i++) m->start[m->sel[i] + 1]++;
    for (int e = 0; e < E; e++) m->start[e + 1] += m->start[e];
    for (int i = 0; i < R * K; i++) m->list[m->start[m->sel[i]]++] = i;
    for (int e = E; e > 0; e--) m->start[e] = m->start[e - 1]; /* undo the cursor advance */
    m->start[0] = 0;
    for (int p = 0; p < R * K; p++) {
        const int slot = m->list[p];
        m->at[slot] = p;
        m->wg[p] = m->w[slot];
    }
}

/* Step 3's groups: every expert with rows (at most R: experts are distinct within a row),
 * into m->gr; returns their count. The shared expert is not among them. */
static int routed_groups(const dsv4_config *cfg, const dsv4_block_w *b, moe_scratch *m) {
    const int E = cfg->n_routed_experts, D = cfg->hidden_size, I = cfg->moe_intermediate_size;
    int ng = 0;
    for (int e = 0; e < E; e++) {
        const int p0 = m->start[e], n = m->start[e + 1] - p0;
        if (n == 0) continue;
        float *g = m->gu + 2 * (int64_t)p0 * I;
        m->gr[ng++] = (dsv4_moe_group){&b->w1[e], &b->w3[e], &b->w2[e], m->xg + (int64_t)p0 * D, m->wg + p0, n,
                                       m->og + (int64_t)p0 * D, g, g + (int64_t)n * I};
    }
    return ng;
}

/* ---- a batched decode step's router beside its shared expert ----------------------------
 * The shared expert does not read the routing. As three jobs before the expert job (the
 * gate's product, the rows' routing, the gather) the router cost ~65-90 us of wall a
 * batch-16 layer, each job ending in a join; here one job of two tasks: task 0 routes every
 * row, groups the slots, gathers their rows and orders the routed experts (one thread,
 * dsv4_linear_here: the same products, so the same bits), then takes routed experts; task 1
 * runs the shared expert, waits for the routing (it finishes first: the shared expert at 16
 * rows is ~2-3x its work) and takes routed experts too. Task 0 never waits, and a thread
 * that holds both runs 0 first (the pool walks its tasks in order and steals back halves),
 * so the wait always ends. Where the routed groups do not suit the few-row job, or a row's
 * route fails, task 0 says so and the caller goes on (sliced path, or the error's rerun). */
#define MOE_FUSED_MAX_ROWS 32 /* rows of a pass that takes it (more: a prefill's, whose router is
                               * too large for one thread and whose groups are not few-row) */
/* From 2 rows on: at 2-4 rows (where the shared expert is itself a few-row group) the router
 * ran as the gate's product job, the routing job and the gather before experts_few, ~20 us
 * of joins and serial work a layer; fused, the serial gaps fell by 18 / 31 / 32 us a step
 * at batch 2 / 3 / 4, the gate's jobs' 71-86 us of wall went and the MoE job grew by 36-42
 * (Zen 5, flash_quarter, steps alternated in one process: 45-58 of 63 pairs). */

typedef struct fused_job {
    few_job few;              /* the routed experts, ordered by task 0 into order */
    int *order;               /* (MOE_FEW_MAX) few.order, written */
    const dsv4_numerics *nm;
    const dsv4_block_w *b;
    const float *x;           /* (R, D) */
    const int32_t *tokens;    /* (R) or NULL */
    int R;
    moe_scratch *m;
    const dsv4_moe_group *shared;
    int n_routed;             /* routed groups in m->gr (set by task 0) */
    atomic_int state;         /* FUSED_*: task 0's outcome, published with release */
} fused_job;

enum { FUSED_ROUTING, FUSED_FEW, FUSED_OTHER, FUSED_FAILED };

static void fused_route(fused_job *j, int tid) {
    const dsv4_config *cfg = j->few.cfg;
    const int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok, D = cfg->hidden_size, R = j->R;
    moe_scratch *m = j->m;
    const dsv4_lin_op gate = {&j->b->gate, j->x, R, m->logits};
    dsv4_linear_here(j->few.k, &gate, 1);
    for (int r = 0; r < R; r++)
        if (dsv4_moe_route_row(cfg, j->b, m->logits + (int64_t)r * E, j->tokens ? j->tokens[r] : -1,
                               m->sel + (int64_t)r * K, m->w + (int64_t)r * K, m->s, NULL)) {
            atomic_store_explicit(&j->state, FUSED_FAILED, memory_order_release);
            return;
        }
    group_slots(cfg, m, R);
    const int ng = routed_groups(cfg, j->b, m);
    j->n_routed = ng;
    /* the groups' input rows: a one-row group reads its row of x where it is (the same
     * floats as a copy: the same bits; ~3/4 of a batch-16 layer's 96 slots), the others
     * their rows gathered */
    for (int i = 0; i < ng; i++) {
        dsv4_moe_group *g = &m->gr[i];
        const int64_t p0 = (g->x - m->xg) / D;
        if (g->n == 1) {
            g->x = j->x + (int64_t)(m->list[p0] / K) * D;
            continue;
        }
        for (int64_t p = p0; p < p0 + g->n; p++)
            memcpy(m->xg + p * D, j->x + (int64_t)(m->list[p] / K) * D, (size_t)D * sizeof(float));
    }
    /* experts_few's order without the shared expert: at most MOE_MANY_MAX - 1 larger groups
     * (the shared expert is the other), first, then the few-row ones most rows first */
    int *order = j->order, n_many = 0, n_few = 0, at[MOE_FEW_ROWS + 2] = {0};
    for (int i = 0; i < ng; i++) {
        if (m->gr[i].n > MOE_FEW_ROWS) {
            if (n_many == MOE_MANY_MAX - 1) n_many = MOE_MANY_MAX; /* too many: not this job */
            else order[n_many++] = i;
        } else {
            at[MOE_FEW_ROWS - m->gr[i].n + 1]++;
            n_few++;
        }
    }
    if (n_many >= MOE_MANY_MAX || n_few < 2) {
        atomic_store_explicit(&j->state, FUSED_OTHER, memory_order_release);
        return;
    }
    for (int r = 0; r <= MOE_FEW_ROWS; r++) at[r + 1] += at[r];
    for (int i = 0; i < ng; i++)
        if (m->gr[i].n <= MOE_FEW_ROWS) order[n_many + at[MOE_FEW_ROWS - m->gr[i].n]++] = i;
    j->few.gr = m->gr;
    j->few.n = ng;
    few_split(&j->few);
    atomic_store_explicit(&j->state, FUSED_FEW, memory_order_release);
    few_task(&j->few, 0, tid);
}

static void fused_task(void *arg, int t, int tid) {
    fused_job *j = arg;
    if (t == 0) {
        fused_route(j, tid);
        return;
    }
    few_expert(&j->few, j->shared);
    int st;
    for (long i = 0; (st = atomic_load_explicit(&j->state, memory_order_acquire)) == FUSED_ROUTING; i++)
        if (i > 4096) sched_yield(); /* the routing thread may have been descheduled */
    if (st == FUSED_FEW) few_task(&j->few, 0, tid);
}

/* The router, the gather and the experts of a batched decode pass (exact numerics, more than
 * one row) as fused_job; returns 1 if it routed, 0 if a row's route failed (nothing else
 * ran but the shared expert). */
static int moe_fused(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *cfg, const dsv4_block_w *b,
                     const float *x, const int32_t *tokens, int R, moe_scratch *m, const dsv4_moe_group *shared) {
    int order[MOE_FEW_MAX];
    fused_job j = {{k, cfg, dsv4_kctx_swiglu(k), NULL, order, 0, 0, 0, 0, {0}}, order, nm, b, x, tokens, R, m, shared, 0, 0};
    atomic_init(&j.few.next, 0);
    for (int s = 0; s < MOE_FEW_SPLIT_MAX; s++) atomic_init(&j.few.up_done[s], 0);
    atomic_init(&j.state, FUSED_ROUTING);
    dsv4_kctx_parallel(k, 2, fused_task, &j);
    const int st = atomic_load_explicit(&j.state, memory_order_acquire);
    if (st == FUSED_FAILED) return 0;
    if (st == FUSED_OTHER) experts_sliced(k, nm, cfg, m->gr, j.n_routed);
    return 1;
}

/* MoE of R consecutive rows. */
static int moe_pass(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *cfg, const dsv4_block_w *b,
                    const float *x, const int32_t *tokens, int R, float *y, int *sel_out,
                    moe_scratch *m, dsv4_err *err) {
    const int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok;
    const int D = cfg->hidden_size, I = cfg->moe_intermediate_size;

    /* One row (batch-1 decode): router, routing and experts in one job (moe_one.c), the
     * shared expert's items first. */
    if (R == 1 && nm == dsv4_numerics_exact()) {
        float *shg = m->gu + 2 * (int64_t)K * I; /* after the K routed experts' gate and up rows */
        const dsv4_moe_group sh = {&b->sh_w1, &b->sh_w3, &b->sh_w2, x, NULL, 1, m->sh, shg, shg + I};
        const int32_t token = tokens ? tokens[0] : -1;
        const dsv4_moe_one_route rt = {b, token, m->logits, m->s, m->sel, m->w, m->og, m->gu};
        const int one = dsv4_moe_one_run(k, cfg, &sh, 1, x, &rt, DSV4_MOE_ONE_ITEM_BYTES);
        if (one == -1) { /* the routing failed: again, for its message */
            const int rc = dsv4_moe_route_row(cfg, b, m->logits, token, m->sel, m->w, m->s, err);
            return rc ? rc : dsv4_fail(err, DSV4_ERR_STATE, "moe: layer %d: the routing failed", b->layer_id);
        }
        if (one == 0) {
            if (sel_out) memcpy(sel_out, m->sel, (size_t)K * sizeof(int));
            for (int kk = 0; kk < K; kk++) m->at[kk] = kk; /* og holds the outputs in k order */
            dsv4_moe_combine(D, K, m->og, m->at, m->sh, y);
            nm->round(nm, DSV4_ACT_MOE_OUT, y, D);
            return DSV4_OK;
        }
        /* a weight that could not be sliced: the general path below */
    }

    moe_rows_job rj = {cfg, nm, m, x, y, R * K};
    float *shg = m->gu + 2 * (int64_t)R * K * I; /* after the routed slots' gate and up rows */
    const dsv4_moe_group shared = {&b->sh_w1, &b->sh_w3, &b->sh_w2, x, NULL, R, m->sh, shg, shg + (int64_t)R * I};
    if (nm == dsv4_numerics_exact() && R >= 2 && R <= MOE_FUSED_MAX_ROWS && E <= MOE_FEW_MAX &&
        dsv4_kctx_threads(k) > 1) {
        /* a batched decode step: the router beside the shared expert (fused_job) */
        if (!moe_fused(k, nm, cfg, b, x, tokens, R, m, &shared)) { /* a route failed: again, for its message */
            const int rc = dsv4_moe_gate(k, cfg, b, x, tokens, R, m->sel, m->w, m->logits, m->s, err);
            return rc ? rc : dsv4_fail(err, DSV4_ERR_STATE, "moe: layer %d: the routing failed", b->layer_id);
        }
        if (sel_out) memcpy(sel_out, m->sel, (size_t)R * K * sizeof(int));
    } else {
        /* 1. Route every row. */
        int rc = dsv4_moe_gate(k, cfg, b, x, tokens, R, m->sel, m->w, m->logits, m->s, err);
        if (rc) return rc;
        if (sel_out) memcpy(sel_out, m->sel, (size_t)R * K * sizeof(int));

        /* 2. Group the (row, k) slots by expert; gather each slot's input row and weight
         * in that order. */
        group_slots(cfg, m, R);
        dsv4_kctx_parallel_from(k, (R * K + GATHER_SLOTS - 1) / GATHER_SLOTS, DSV4_KCTX_ROW_COPY_MIN_TASKS,
                                gather_task, &rj);

        /* 3. Every expert with rows, and the shared expert on all rows (weight 1), in one
         * go: W1/W3, clamped SwiGLU times the routing weight, W2. */
        int ng = routed_groups(cfg, b, m);
        m->gr[ng++] = shared;
        dsv4_moe_experts(k, nm, cfg, m->gr, ng);
    }

    /* 4. Per token: routed outputs in k order, shared last. */
    dsv4_kctx_parallel_from(k, R, DSV4_KCTX_ROW_COPY_MIN_TASKS, combine_task, &rj);
    return DSV4_OK;
}

int dsv4_moe_forward_checked(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *cfg, const dsv4_block_w *b,
                             const float *x, const int32_t *tokens, int S, float *y, int *sel_out,
                             dsv4_arena *scratch, dsv4_err *err) {
    if (S < 0) return dsv4_fail(err, DSV4_ERR_ARG, "moe: row count %d < 0", S);
    int rc = dsv4_moe_check_shared(cfg, b, err);
    if (rc) return rc;
    if (S == 0) return DSV4_OK;
    const int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok;
    const int D = cfg->hidden_size, I = cfg->moe_intermediate_size;
    const int R = pass_rows(cfg, S);
    const size_t mark = dsv4_arena_mark(scratch);
    moe_scratch m;
    if (!scratch_take(scratch, &m, R, E, K, D, I)) {
        dsv4_arena_release(scratch, mark);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "moe: scratch arena too small for %d rows (E=%d K=%d "
                         "D=%d I=%d)", R, E, K, D, I);
    }
    for (int r0 = 0; r0 < S && rc == DSV4_OK; r0 += R) {
        const int n = S - r0 < R ? S - r0 : R;
        rc = moe_pass(k, nm, cfg, b, x + (int64_t)r0 * D, tokens ? tokens + r0 : NULL, n,
                      y + (int64_t)r0 * D, sel_out ? sel_out + (int64_t)r0 * K : NULL, &m, err);
    }
    dsv4_arena_release(scratch, mark);
    return rc;
}

int dsv4_moe_forward(dsv4_kctx *k, const dsv4_numerics *nm, const dsv4_config *cfg, const dsv4_block_w *b,
                     const float *x, const int32_t *tokens, int S, float *y, int *sel_out,
                     dsv4_arena *scratch, dsv4_err *err) {
    const int rc = S < 0 ? DSV4_OK : check_weights(cfg, b, err); /* a bad count first, as always */
    return rc ? rc : dsv4_moe_forward_checked(k, nm, cfg, b, x, tokens, S, y, sel_out, scratch, err);
}
