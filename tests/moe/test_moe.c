/* test_moe.c — router and MoE forward (spec/model.md §5.12, pitfalls 19-22) against a
 * double-precision reference written from the spec's formulas, on small fake blocks whose
 * matrices the test allocates (F32, some BF16). Also: crafted router ties (lower id wins),
 * the softplus threshold, hash routing in stored order, argument errors, and batch
 * invariance (a row's output is bitwise the same alone, in a batch, in any order). */
#include <stdint.h>

#include "kernels/cpu.h"
#include "kernels/kctx.h"
#include "moe/moe.h"
#include "moe/moe_impl.h"
#include "test.h"

/* ---- helpers ------------------------------------------------------------------------- */

static uint64_t rng_state = 0xda3e39cb94b95bdbull;
static uint64_t rng_next(void) { /* 53 random bits */
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state >> 11;
}

static double urand(void) { return (double)rng_next() / 9007199254740992.0 * 2.0 - 1.0; } /* uniform [-1, 1) */

static void *allocs[4096];
static int n_allocs;
static void *talloc(size_t n) {
    void *p = calloc(1, n);
    if (!p) { fprintf(stderr, "test out of memory\n"); exit(2); }
    allocs[n_allocs++] = p;
    return p;
}
static void tfree_all(void) { while (n_allocs) free(allocs[--n_allocs]); }

static float bf16_value(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

/* A (rows, cols) matrix with random values times scale, stored F32 or BF16 (truncated);
 * returns the exact values the stored form decodes to, for the reference. */
static const float *new_mat(dsv4_mat *m, int rows, int cols, double scale, int bf16) {
    float *dense = talloc(sizeof(float) * rows * cols);
    m->rows = rows;
    m->cols = cols;
    m->scale = NULL;
    m->scale_is_f32 = 0;
    if (bf16) {
        uint16_t *w = talloc(sizeof(uint16_t) * rows * cols);
        for (int i = 0; i < rows * cols; i++) {
            float f = (float)(urand() * scale);
            uint32_t u;
            memcpy(&u, &f, 4);
            w[i] = (uint16_t)(u >> 16);
            dense[i] = bf16_value(w[i]);
        }
        m->fmt = DSV4_WF_BF16;
        m->w = w;
    } else {
        for (int i = 0; i < rows * cols; i++) dense[i] = (float)(urand() * scale);
        m->fmt = DSV4_WF_F32;
        m->w = dense;
    }
    return dense;
}

typedef struct fake {
    dsv4_config cfg;
    dsv4_block_w b;
    const float *gate, *w1[16], *w2[16], *w3[16], *s1, *s2, *s3; /* decoded values */
    float *bias;
    int32_t *tid2eid;
} fake;

typedef struct moe_case {
    const char *name;
    int D, I, E, K, V;
    int layer_id, n_hash;
    dsv4_score_func score;
    double limit, rsf;
    int gate_bf16, w2_bf16, with_bias;
} moe_case;

static void make_fake(fake *f, const moe_case *t) {
    memset(f, 0, sizeof *f);
    dsv4_config *c = &f->cfg;
    c->hidden_size = t->D;
    c->moe_intermediate_size = t->I;
    c->n_routed_experts = t->E;
    c->num_experts_per_tok = t->K;
    c->vocab_size = t->V;
    c->num_hash_layers = t->n_hash;
    c->scoring_func = t->score;
    c->swiglu_limit = t->limit;
    c->routed_scaling_factor = t->rsf;
    c->n_shared_experts = 1;
    dsv4_block_w *b = &f->b;
    b->layer_id = t->layer_id;
    const double sd = 1.0 / sqrt(t->D), si = 1.0 / sqrt(t->I);
    f->gate = new_mat(&b->gate, t->E, t->D, 2.0 * sd, t->gate_bf16);
    b->w1 = talloc(sizeof(dsv4_mat) * t->E);
    b->w2 = talloc(sizeof(dsv4_mat) * t->E);
    b->w3 = talloc(sizeof(dsv4_mat) * t->E);
    for (int e = 0; e < t->E; e++) {
        f->w1[e] = new_mat(&b->w1[e], t->I, t->D, 2.0 * sd, 0);
        f->w3[e] = new_mat(&b->w3[e], t->I, t->D, 2.0 * sd, 0);
        f->w2[e] = new_mat(&b->w2[e], t->D, t->I, 2.0 * si, t->w2_bf16 && (e % 2));
    }
    f->s1 = new_mat(&b->sh_w1, t->I, t->D, 2.0 * sd, 0);
    f->s3 = new_mat(&b->sh_w3, t->I, t->D, 2.0 * sd, 0);
    f->s2 = new_mat(&b->sh_w2, t->D, t->I, 2.0 * si, t->w2_bf16);
    if (t->layer_id < t->n_hash) {
        /* K distinct experts per token, in a random stored order. */
        f->tid2eid = talloc(sizeof(int32_t) * t->V * t->K);
        for (int v = 0; v < t->V; v++) {
            int perm[16];
            for (int e = 0; e < t->E; e++) perm[e] = e;
            for (int e = t->E - 1; e > 0; e--) {
                int j = (int)((urand() + 1) / 2 * (e + 1)) % (e + 1), tmp = perm[e];
                perm[e] = perm[j];
                perm[j] = tmp;
            }
            for (int k = 0; k < t->K; k++) f->tid2eid[v * t->K + k] = perm[k];
        }
        b->tid2eid = f->tid2eid;
    } else if (t->with_bias) {
        f->bias = talloc(sizeof(float) * t->E);
        for (int e = 0; e < t->E; e++) f->bias[e] = (float)(0.3 * urand());
        b->gate_bias = f->bias;
    }
}

/* ---- reference ----------------------------------------------------------------------- */

static double ref_score(dsv4_score_func fn, const double *logits, int E, int e) {
    if (fn == DSV4_SCORE_SIGMOID) return 1.0 / (1.0 + exp(-logits[e]));
    if (fn == DSV4_SCORE_SOFTMAX) {
        double mx = logits[0], sum = 0;
        for (int i = 1; i < E; i++) mx = fmax(mx, logits[i]);
        for (int i = 0; i < E; i++) sum += exp(logits[i] - mx);
        return exp(logits[e] - mx) / sum;
    }
    const double z = logits[e];
    return sqrt(z > 20 ? z : log(1.0 + exp(z)));
}

/* Selection, weights, and the smallest gap at the top-K boundary (score layers). */
static double ref_route(const fake *f, const float *x, int32_t tok, int *sel, double *w) {
    const dsv4_config *c = &f->cfg;
    const int E = c->n_routed_experts, K = c->num_experts_per_tok, D = c->hidden_size;
    double logits[64], s[64], v[64] = {0};
    for (int e = 0; e < E; e++) {
        double acc = 0;
        for (int i = 0; i < D; i++) acc += (double)f->gate[e * D + i] * x[i];
        logits[e] = acc;
    }
    for (int e = 0; e < E; e++) s[e] = ref_score(c->scoring_func, logits, E, e);
    double gap = INFINITY;
    if (f->b.layer_id < c->num_hash_layers) {
        for (int k = 0; k < K; k++) sel[k] = f->tid2eid[tok * K + k];
    } else {
        /* insertion order by (value descending, id ascending) */
        int order[64] = {0};
        for (int e = 0; e < E; e++) {
            v[e] = s[e] + (f->b.gate_bias ? f->b.gate_bias[e] : 0.0);
            int p = e;
            while (p > 0 && v[order[p - 1]] < v[e]) { order[p] = order[p - 1]; p--; }
            order[p] = e;
        }
        for (int k = 0; k < K; k++) sel[k] = order[k];
        if (K < E) gap = v[order[K - 1]] - v[order[K]];
    }
    double sum = 0;
    for (int k = 0; k < K; k++) sum += s[sel[k]];
    for (int k = 0; k < K; k++)
        w[k] = (c->scoring_func == DSV4_SCORE_SOFTMAX ? s[sel[k]] : s[sel[k]] / sum) * c->routed_scaling_factor;
    return gap;
}

static int clamps_fired;

/* out += expert(x, weight) */
static void ref_expert(const fake *f, const float *W1, const float *W3, const float *W2,
                       const float *x, double weight, double *out) {
    const int D = f->cfg.hidden_size, I = f->cfg.moe_intermediate_size;
    const double L = f->cfg.swiglu_limit;
    double h[256];
    for (int i = 0; i < I; i++) {
        double g = 0, u = 0;
        for (int d = 0; d < D; d++) { g += (double)W1[i * D + d] * x[d]; u += (double)W3[i * D + d] * x[d]; }
        if (L > 0) {
            if (g > L) { g = L; clamps_fired++; }
            if (u > L) { u = L; clamps_fired++; }
            if (u < -L) { u = -L; clamps_fired++; }
        }
        h[i] = weight * (g / (1 + exp(-g))) * u;
    }
    for (int d = 0; d < D; d++) {
        double acc = 0;
        for (int i = 0; i < I; i++) acc += (double)W2[d * I + i] * h[i];
        out[d] += acc;
    }
}

static void ref_moe(const fake *f, const float *x, int32_t tok, int *sel, double *y, double *gap) {
    const int D = f->cfg.hidden_size, K = f->cfg.num_experts_per_tok;
    double w[64];
    *gap = ref_route(f, x, tok, sel, w);
    for (int d = 0; d < D; d++) y[d] = 0;
    for (int k = 0; k < K; k++) ref_expert(f, f->w1[sel[k]], f->w3[sel[k]], f->w2[sel[k]], x, w[k], y);
    ref_expert(f, f->s1, f->s3, f->s2, x, 1.0, y);
}

/* ---- tests --------------------------------------------------------------------------- */

static dsv4_kctx *kctx;

/* dsv4_moe_forward on an arena of exactly dsv4_moe_scratch_bytes (so the sizing is tested
 * too: one byte short and the call would fail). */
static int moe_fwd(const dsv4_config *cfg, const dsv4_block_w *b, const float *x,
                   const int32_t *tok, int S, float *y, int *sel, dsv4_err *err) {
    dsv4_arena a;
    if (dsv4_arena_init(&a, dsv4_moe_scratch_bytes(cfg, S > 0 ? S : 0), err)) return err->code;
    /* NaN everywhere: a value the call leaves out cannot be a previous call's (a freed
     * arena's bytes come back from malloc) */
    if (a.base) memset(a.base, 0xff, a.cap);
    int rc = dsv4_moe_forward(kctx, dsv4_numerics_exact(), cfg, b, x, tok, S, y, sel, &a, err);
    dsv4_arena_free(&a);
    return rc;
}

static void run_case(const moe_case *t, int S) {
    fake f;
    make_fake(&f, t);
    const int D = t->D, K = t->K;
    float *x = talloc(sizeof(float) * S * D), *y = talloc(sizeof(float) * S * D);
    float *y1 = talloc(sizeof(float) * D), *yr = talloc(sizeof(float) * S * D);
    float *xr = talloc(sizeof(float) * S * D);
    int32_t *tok = talloc(sizeof(int32_t) * S), *tokr = talloc(sizeof(int32_t) * S);
    int *sel = talloc(sizeof(int) * S * K), *sel1 = talloc(sizeof(int) * K), *selr = talloc(sizeof(int) * S * K);
    for (int i = 0; i < S * D; i++) x[i] = (float)(1.5 * urand());
    for (int s = 0; s < S; s++) tok[s] = (int32_t)((urand() + 1) / 2 * t->V) % t->V;
    dsv4_err err;
    memset(&err, 0, sizeof err);
    int rc = moe_fwd(&f.cfg, &f.b, x, tok, S, y, sel, &err);
    CHECK_MSG(rc == DSV4_OK, "%s: forward failed: %s", t->name, err.msg);
    if (rc) return;

    /* vs the double reference */
    clamps_fired = 0;
    double maxerr = 0, maxref = 0;
    int sel_bad = 0, close = 0;
    for (int s = 0; s < S; s++) {
        int rsel[64];
        double ry[256], gap;
        ref_moe(&f, x + s * D, tok[s], rsel, ry, &gap);
        if (gap < 1e-5) { close++; continue; } /* too near a tie to demand the same choice */
        for (int k = 0; k < K; k++) sel_bad += rsel[k] != sel[s * K + k];
        for (int d = 0; d < D; d++) {
            maxerr = fmax(maxerr, fabs(y[s * D + d] - ry[d]));
            maxref = fmax(maxref, fabs(ry[d]));
        }
    }
    CHECK_MSG(close <= S / 4, "%s: %d of %d rows near a routing tie", t->name, close, S);
    CHECK_MSG(sel_bad == 0, "%s: %d selections differ from the reference", t->name, sel_bad);
    CHECK_MSG(maxerr <= 2e-6 * maxref, "%s: max err %.3g of %.3g", t->name, maxerr, maxref);
    if (t->limit > 0) CHECK_MSG(clamps_fired > 0, "%s: the clamp never fired", t->name);

    /* dsv4_moe_route agrees with the forward's routing */
    for (int s = 0; s < S; s++) {
        int rsel[64];
        double rw[64];
        float w[64];
        ref_route(&f, x + s * D, tok[s], rsel, rw);
        dsv4_moe_route(&f.cfg, &f.b, x + s * D, tok[s], sel1, w);
        CHECK(memcmp(sel1, sel + s * K, sizeof(int) * K) == 0);
        for (int k = 0; k < K; k++)
            CHECK_MSG(fabs(w[k] - rw[k]) <= 1e-6 * fabs(rw[k]) + 1e-9, "%s: weight %d: %.9g vs %.9g", t->name, k, w[k], rw[k]);
    }

    /* Batch invariance: each row alone, and the rows reversed, give the same bits. */
    int bad = 0;
    for (int s = 0; s < S; s++) {
        rc = moe_fwd(&f.cfg, &f.b, x + s * D, tok + s, 1, y1, sel1, &err);
        CHECK(rc == DSV4_OK);
        bad += memcmp(y1, y + s * D, sizeof(float) * D) != 0 || memcmp(sel1, sel + s * K, sizeof(int) * K) != 0;
    }
    CHECK_MSG(bad == 0, "%s: %d rows differ when run alone", t->name, bad);
    for (int s = 0; s < S; s++) {
        memcpy(xr + (S - 1 - s) * D, x + s * D, sizeof(float) * D);
        tokr[S - 1 - s] = tok[s];
    }
    rc = moe_fwd(&f.cfg, &f.b, xr, tokr, S, yr, selr, &err);
    CHECK(rc == DSV4_OK);
    bad = 0;
    for (int s = 0; s < S; s++) bad += memcmp(yr + (S - 1 - s) * D, y + s * D, sizeof(float) * D) != 0;
    CHECK_MSG(bad == 0, "%s: %d rows differ in reversed order", t->name, bad);
    /* sel_out is optional */
    rc = moe_fwd(&f.cfg, &f.b, x, tok, S, yr, NULL, &err);
    CHECK(rc == DSV4_OK && memcmp(yr, y, sizeof(float) * S * D) == 0);
    tfree_all();
}

/* x = unit vector 0, gate column 0 = vals: the logits are exactly vals. */
static void craft_logits(fake *f, const float *vals, float *x) {
    const int E = f->cfg.n_routed_experts, D = f->cfg.hidden_size;
    float *g = talloc(sizeof(float) * E * D);
    for (int e = 0; e < E; e++) {
        for (int i = 0; i < D; i++) g[e * D + i] = (float)urand();
        g[e * D] = vals[e];
    }
    f->b.gate.fmt = DSV4_WF_F32;
    f->b.gate.w = g;
    f->gate = g;
    memset(x, 0, sizeof(float) * D);
    x[0] = 1.0f;
}

static void test_ties(void) {
    const moe_case t = {"ties", 16, 8, 8, 3, 10, 5, 3, DSV4_SCORE_SQRTSOFTPLUS, 0, 1.5, 0, 0, 0};
    fake f;
    make_fake(&f, &t);
    float x[16], w[8];
    int sel[8];
    const float vals[8] = {0.5f, 2.0f, 1.0f, 2.0f, 1.0f, -1.0f, 2.0f, 0.3f};
    craft_logits(&f, vals, x);
    /* No bias: three-way tie at 2.0 among experts 1, 3, 6 → ascending ids. */
    dsv4_moe_route(&f.cfg, &f.b, x, 0, sel, w);
    CHECK(sel[0] == 1 && sel[1] == 3 && sel[2] == 6);
    for (int k = 0; k < 3; k++) CHECK_NEAR(w[k], 0.5, 1e-6); /* equal scores, normalised, x1.5 */
    f.cfg.num_experts_per_tok = 2;
    dsv4_moe_route(&f.cfg, &f.b, x, 0, sel, w);
    CHECK(sel[0] == 1 && sel[1] == 3);
    f.cfg.num_experts_per_tok = 3;
    /* With bias: s+bias ties between experts 2 and 4 (same logit, same bias) on top; the
     * weights still come from the unbiased scores. */
    float bias[8] = {0, -5, 3, -5, 3, 0, -5, 0};
    f.b.gate_bias = bias;
    dsv4_moe_route(&f.cfg, &f.b, x, 0, sel, w);
    CHECK(sel[0] == 2 && sel[1] == 4 && sel[2] == 0);
    const double s1 = sqrt(log1p(exp(1.0))), s05 = sqrt(log1p(exp(0.5)));
    CHECK_NEAR(w[0], 1.5 * s1 / (2 * s1 + s05), 1e-6);
    CHECK_NEAR(w[1], 1.5 * s1 / (2 * s1 + s05), 1e-6);
    CHECK_NEAR(w[2], 1.5 * s05 / (2 * s1 + s05), 1e-6);
    /* Descending order, not id order: bias lifts expert 7 above all. */
    bias[7] = 10;
    dsv4_moe_route(&f.cfg, &f.b, x, 0, sel, w);
    CHECK(sel[0] == 7 && sel[1] == 2 && sel[2] == 4);
    /* The forward routes the same way and sums in that k order. */
    float y[16];
    int fsel[3];
    dsv4_err err;
    int32_t tok = 0;
    CHECK(moe_fwd(&f.cfg, &f.b, x, &tok, 1, y, fsel, &err) == DSV4_OK);
    CHECK(fsel[0] == 7 && fsel[1] == 2 && fsel[2] == 4);
    int rsel[8];
    double ry[16], gap;
    ref_moe(&f, x, 0, rsel, ry, &gap);
    for (int d = 0; d < 16; d++) CHECK_NEAR(y[d], ry[d], 1e-5);

    /* Softplus threshold: a logit of 800 would overflow exp; s = sqrt(800). */
    const float big[8] = {800.0f, 0, 0, 0, 0, 0, 0, 0.1f};
    craft_logits(&f, big, x);
    f.b.gate_bias = NULL;
    dsv4_moe_route(&f.cfg, &f.b, x, 0, sel, w);
    const double s0 = sqrt(log1p(exp(0.0))), s800 = sqrt(800.0), s01 = sqrt(log1p(exp(0.1)));
    CHECK(sel[0] == 0 && sel[1] == 7 && sel[2] == 1);
    CHECK_NEAR(w[0], 1.5 * s800 / (s800 + s01 + s0), 1e-6);
    CHECK_NEAR(w[1], 1.5 * s01 / (s800 + s01 + s0), 1e-6);

    /* Sigmoid and softmax on crafted logits: softmax weights are not renormalised. */
    f.cfg.scoring_func = DSV4_SCORE_SOFTMAX;
    craft_logits(&f, vals, x);
    dsv4_moe_route(&f.cfg, &f.b, x, 0, sel, w);
    double Z = 0;
    for (int e = 0; e < 8; e++) Z += exp(vals[e]);
    CHECK(sel[0] == 1 && sel[1] == 3 && sel[2] == 6);
    CHECK_NEAR(w[0], 1.5 * exp(2.0) / Z, 1e-6);
    f.cfg.scoring_func = DSV4_SCORE_SIGMOID;
    dsv4_moe_route(&f.cfg, &f.b, x, 0, sel, w);
    CHECK_NEAR(w[0], 0.5, 1e-6);
    tfree_all();
}

/* The top-K selection against K rounds of the first maximum (the definition): values
 * from a small set (many ties, -0 against +0, infinities), with and without bias, now and
 * then a NaN, K from 1 to E. */
static void ref_topk(const double *s, const float *bias, int E, int K, int *sel) {
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

static void test_topk(void) {
    const double pick[] = {0.5, 1.0, 1.0, 2.0, -0.0, 0.0, 3.25, INFINITY, -INFINITY, 0.125};
    const int n_pick = (int)(sizeof pick / sizeof pick[0]);
    double s[64];
    float bias[64];
    int sel[64], rsel[64], bad = 0;
    for (int it = 0; it < 4000; it++) {
        const int E = 1 + (int)(rng_next() % 64), K = 1 + (int)(rng_next() % (uint64_t)E);
        const int with_bias = it % 3 != 0, with_nan = it % 17 == 0;
        for (int e = 0; e < E; e++) {
            s[e] = it % 2 ? pick[rng_next() % (uint64_t)n_pick] : urand();
            bias[e] = (float)pick[rng_next() % 4] - 1.0f;
        }
        if (with_nan) s[rng_next() % (uint64_t)E] = NAN;
        dsv4_moe_topk(s, with_bias ? bias : NULL, E, K, sel);
        ref_topk(s, with_bias ? bias : NULL, E, K, rsel);
        bad += memcmp(sel, rsel, sizeof(int) * (size_t)K) != 0;
    }
    CHECK(bad == 0);
    /* Flash's shape: 256 experts, 6 chosen, many rows */
    for (int it = 0; it < 200; it++) {
        double s256[256];
        float b256[256];
        for (int e = 0; e < 256; e++) {
            s256[e] = it % 2 ? pick[rng_next() % (uint64_t)n_pick] : urand();
            b256[e] = (float)(0.01 * urand());
        }
        dsv4_moe_topk(s256, b256, 256, 6, sel);
        ref_topk(s256, b256, 256, 6, rsel);
        bad += memcmp(sel, rsel, sizeof(int) * 6) != 0;
    }
    CHECK(bad == 0);
}

/* Flash's router through dsv4_moe_route_row, which takes the bounded selection where it
 * applies (route_bound.c), against every expert's score, dsv4_moe_topk and the same
 * weights: the experts, their order and the weights' bits. Logits with ties, spans tiny
 * and wide, across softplus's threshold at 20; also the inputs that fall back (all
 * equal, NaN, infinities in the logits or the bias) and sigmoid. */
static void test_route_bounded(void) {
    static dsv4_config c;
    static dsv4_block_w b;
    static float logits[300], bias[300];
    static double s[300], sr[300], tabs[2][2 * DSV4_MOE_TAB_N], poison[2 * DSV4_MOE_TAB_N];
    int sel[8], rsel[8], bad = 0, n = 0, expect = 0, n_tab = 0, expect_tab = 0;
    float w[8];
    c.num_hash_layers = 0;
    c.routed_scaling_factor = 2.5;
    b.layer_id = 3;
    c.scoring_func = DSV4_SCORE_SQRTSOFTPLUS;
    dsv4_moe_bound_table(&c, tabs[0]);
    c.scoring_func = DSV4_SCORE_SIGMOID;
    dsv4_moe_bound_table(&c, tabs[1]);
    for (int j = 0; j < 2 * DSV4_MOE_TAB_N; j++) poison[j] = j % 2 ? -1e300 : 1e300; /* no candidate at all */
    const int Es[] = {64, 256, 300}, Ks[] = {1, 6, 8};
    for (int it = 0; it < 6000; it++) {
        const int E = Es[it % 3], K = Ks[(it / 3) % 3], kind = (it / 9) % 12;
        c.n_routed_experts = E;
        c.num_experts_per_tok = K;
        c.scoring_func = it % 5 == 4 ? DSV4_SCORE_SIGMOID : DSV4_SCORE_SQRTSOFTPLUS;
        for (int e = 0; e < E; e++) {
            const double u = urand();
            switch (kind) {
            case 9: logits[e] = (float)((int)(64 * u) - 32) / 4; break;      /* on the fixed grid */
            case 10: logits[e] = (float)((u - 0.5) * 1e-5); break;           /* around 0, tiny */
            case 11: logits[e] = (float)(64 * u - 32 - (e == 3)); break;     /* to the fixed grid's ends */
            case 0: logits[e] = (float)(3 * u); break;                       /* spread */
            case 1: logits[e] = (float)(int)(4 * u) * 0.5f; break;           /* many ties */
            case 2: logits[e] = (float)(20 + 0.2 * u); break;                /* across 20 */
            case 3: logits[e] = (float)(1 + 1e-6 * u); break;                /* a tiny span */
            case 4: logits[e] = (float)(40 * u); break;                      /* wide */
            case 5: logits[e] = 0.25f; break;                                /* all equal */
            case 6: logits[e] = e == 7 ? NAN : (float)u; break;
            case 7: logits[e] = e == 9 ? (it % 2 ? INFINITY : -INFINITY) : (float)u; break;
            default: logits[e] = (float)(u * u * u * 8); break;              /* skewed */
            }
            bias[e] = (float)(kind == 1 ? (int)(3 * urand()) * 0.125 : 0.05 * urand());
        }
        /* a NaN or infinite bias now and then: the rounds' answer, not the bounds' */
        const int bad_bias = it % 31 == 5;
        if (bad_bias) bias[(it / 31) % E] = it % 2 ? NAN : (it % 3 ? INFINITY : -INFINITY);
        b.gate_bias = it % 4 == 3 ? NULL : bias;
        /* the model's fixed grid on every other row (else each row's own) */
        b.route_tab = (it / 2) % 2 ? tabs[c.scoring_func == DSV4_SCORE_SIGMOID] : NULL;
        const int applies = kind != 5 && kind != 6 && kind != 7 && !(bad_bias && b.gate_bias);
        expect += applies;
        CHECK(dsv4_moe_route_row(&c, &b, logits, 0, sel, w, s, NULL) == DSV4_OK);
        n += dsv4_moe_topk_bounded(&c, logits, b.gate_bias, b.route_tab, sr, rsel);
        if (b.route_tab && applies) { /* the fixed grid's path runs where every logit is in its span */
            float lo = logits[0], hi = logits[0];
            for (int e = 0; e < E; e++) lo = logits[e] < lo ? logits[e] : lo, hi = logits[e] > hi ? logits[e] : hi;
            expect_tab += lo >= -DSV4_MOE_TAB_ZMAX && hi < DSV4_MOE_TAB_ZMAX;
            n_tab += !dsv4_moe_topk_bounded(&c, logits, b.gate_bias, poison, sr, rsel);
        }
        for (int e = 0; e < E; e++) sr[e] = dsv4_moe_score(&c, logits[e]);
        dsv4_moe_topk(sr, b.gate_bias, E, K, rsel);
        double sum = 0.0;
        for (int k = 0; k < K; k++) sum += sr[rsel[k]];
        for (int k = 0; k < K; k++) {
            const float rw = (float)(sr[rsel[k]] / sum * c.routed_scaling_factor);
            bad += sel[k] != rsel[k] || memcmp(&w[k], &rw, sizeof rw) != 0;
        }
    }
    CHECK(bad == 0);
    CHECK(n == expect); /* the bounded path ran exactly where it applies */
    CHECK(n_tab == expect_tab && expect_tab > 1000); /* ... on the fixed grid where its span holds the row */
}

/* The fixed grid's interval of a logit: z_j <= z < z_j+1 (z_j = j / STEP - ZMAX) for logits
 * across the span, negative and positive, tiny, on the grid's points and a float below them. */
static void test_route_tab_at(void) {
    int bad = 0;
    for (int it = 0; it < 200000; it++) {
        const double u = 0.5 * (urand() + 1.0); /* [0, 1) */
        float z;
        switch (it % 4) {
        case 0: z = (float)(63.99 * u - 32); break; /* below 32 after rounding */
        case 1: z = (float)((u - 0.5) * 1e-6); break;
        case 2: z = (float)((int)(2048 * u) % 2048 - 1024) / DSV4_MOE_TAB_STEP; break;
        default: z = nextafterf((float)((int)(2048 * u) % 2048 - 1023) / DSV4_MOE_TAB_STEP, -INFINITY); break;
        }
        const int j = dsv4_moe_tab_at(z);
        const double zj = (double)j / DSV4_MOE_TAB_STEP - DSV4_MOE_TAB_ZMAX;
        bad += !(j >= 0 && j <= DSV4_MOE_TAB_N - 2 && zj <= z && z < zj + 1.0 / DSV4_MOE_TAB_STEP);
    }
    CHECK(bad == 0);
    CHECK(dsv4_moe_tab_at(-DSV4_MOE_TAB_ZMAX) == 0 && dsv4_moe_tab_at(nextafterf(DSV4_MOE_TAB_ZMAX, 0)) == DSV4_MOE_TAB_N - 2);
    CHECK(dsv4_moe_tab_at(NAN) >= 0 && dsv4_moe_tab_at(1e30f) <= DSV4_MOE_TAB_N - 2 && dsv4_moe_tab_at(-1e30f) == 0);
}

static void test_hash_and_errors(void) {
    const moe_case t = {"hash", 16, 8, 6, 2, 12, 1, 3, DSV4_SCORE_SQRTSOFTPLUS, 1.0, 1.5, 1, 0, 0};
    fake f;
    make_fake(&f, &t);
    float x[16 * 3], y[16 * 3], w[4];
    int sel[8];
    for (int i = 0; i < 48; i++) x[i] = (float)urand();
    /* Stored order, even when it is not by score. */
    f.tid2eid[5 * 2 + 0] = 4;
    f.tid2eid[5 * 2 + 1] = 0;
    dsv4_moe_route(&f.cfg, &f.b, x, 5, sel, w);
    CHECK(sel[0] == 4 && sel[1] == 0);
    dsv4_err err;
    int32_t toks[3] = {5, 11, 0};
    int fsel[6];
    CHECK(moe_fwd(&f.cfg, &f.b, x, toks, 3, y, fsel, &err) == DSV4_OK);
    CHECK(fsel[0] == 4 && fsel[1] == 0);
    CHECK(fsel[2] == f.tid2eid[22] && fsel[3] == f.tid2eid[23]);

    /* Errors: clear codes and messages naming the thing, no crash. */
    toks[1] = 12;
    CHECK(moe_fwd(&f.cfg, &f.b, x, toks, 3, y, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "token id 12");
    toks[1] = -1;
    CHECK(moe_fwd(&f.cfg, &f.b, x, toks, 3, y, NULL, &err) == DSV4_ERR_ARG);
    toks[1] = 11;
    CHECK(moe_fwd(&f.cfg, &f.b, x, NULL, 3, y, NULL, &err) == DSV4_ERR_ARG);
    f.tid2eid[0] = 6;
    toks[0] = 0;
    CHECK(moe_fwd(&f.cfg, &f.b, x, toks, 1, y, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "tid2eid[0][0] = 6");
    dsv4_moe_route(&f.cfg, &f.b, x, 0, sel, w);
    CHECK(sel[0] == -1 && w[0] == 0.0f);
    f.tid2eid[0] = f.tid2eid[1];
    CHECK(moe_fwd(&f.cfg, &f.b, x, toks, 1, y, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "repeats expert");
    f.b.tid2eid = NULL;
    CHECK(moe_fwd(&f.cfg, &f.b, x, toks, 1, y, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "tid2eid");
    f.b.tid2eid = f.tid2eid;
    f.b.w2[3].cols = 9;
    CHECK(moe_fwd(&f.cfg, &f.b, x, toks, 1, y, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "experts.3.w2");
    f.b.w2[3].cols = 8;
    f.b.sh_w1.fmt = DSV4_WF_NONE;
    CHECK(moe_fwd(&f.cfg, &f.b, x, toks, 1, y, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "shared_experts.w1");
    f.b.sh_w1.fmt = DSV4_WF_F32;
    CHECK(moe_fwd(&f.cfg, &f.b, x, toks, -1, y, NULL, &err) == DSV4_ERR_ARG);
    CHECK(moe_fwd(&f.cfg, &f.b, x, toks, 0, y, NULL, &err) == DSV4_OK);
    tfree_all();
}

/* The one-row job (moe_one.c) on 3 and 2 threads, its products cut into many small items (the
 * router, W1/W3 and W2 in 4-row pieces), into a few, or whole (on 2 threads, K = 4, the
 * routed experts' matrices one item each: one expert a thread, the last 2 W2s in halves):
 * every row's output and selection are bitwise the general path's (the row inside a batch;
 * og starts NaN, so a half never written shows: mutation "a half item 4 rows short" fails 6
 * of the 36 runs, none without the halves). A routing that fails
 * is reported (the items waiting for it do not hang), and by dsv4_moe_forward as an error. */
static void test_one_row_job(void) {
    const moe_case t = {"one-row job", 48, 40, 16, 4, 40, 5, 2, DSV4_SCORE_SQRTSOFTPLUS, 0.5, 1.5, 0, 1, 1};
    fake f;
    make_fake(&f, &t);
    enum { S = 6 };
    const int D = t.D, I = t.I, E = t.E, K = t.K;
    float *x = talloc(sizeof(float) * S * D), *y = talloc(sizeof(float) * S * D), *y1 = talloc(sizeof(float) * D);
    float *logits = talloc(sizeof(float) * E), *og = talloc(sizeof(float) * K * D), *sh = talloc(sizeof(float) * D);
    float *gu = talloc(sizeof(float) * 2 * (K + 1) * I), wk[16]; /* (K + 1, 2, I): the shared expert's last */
    double *s = talloc(sizeof(double) * E);
    int32_t tok[S];
    int sel[S * 16], sel1[16], idx[16];
    for (int i = 0; i < S * D; i++) x[i] = (float)(1.5 * urand());
    for (int r = 0; r < S; r++) tok[r] = r;
    for (int kk = 0; kk < K; kk++) idx[kk] = kk;
    dsv4_err err;
    CHECK(moe_fwd(&f.cfg, &f.b, x, tok, S, y, sel, &err) == DSV4_OK); /* the general path, 1 thread */
    dsv4_kctx *k1 = kctx, *k3, *k2;
    CHECK(dsv4_kctx_create(3, 256, &k3, &err) == DSV4_OK);
    CHECK(dsv4_kctx_create(2, 256, &k2, &err) == DSV4_OK);
    CHECK(dsv4_moe_one_routed_rows(&f.b.w1[0], 2, DSV4_MOE_ONE_ITEM_BYTES, 2, K) == I); /* whole on k2 */
    CHECK(dsv4_moe_one_routed_rows(&f.b.w1[0], 2, DSV4_MOE_ONE_ITEM_BYTES, 3, K) < I);  /* cut on k3 */
    const int64_t bytes[3] = {256, 4096, DSV4_MOE_ONE_ITEM_BYTES};
    int bad = 0, failed = 0;
    for (int r = 0; r < S; r++)
        for (int bi = 0; bi < 6; bi++) {
            const dsv4_moe_group shg = {&f.b.sh_w1, &f.b.sh_w3, &f.b.sh_w2, x + r * D, NULL, 1, sh, gu + 2 * K * I,
                                        gu + (2 * K + 1) * I};
            const dsv4_moe_one_route rt = {&f.b, tok[r], logits, s, sel1, wk, og, gu};
            memset(og, 0xff, sizeof(float) * K * D); /* NaN: a part never written shows */
            failed += dsv4_moe_one_run(bi < 3 ? k3 : k2, &f.cfg, &shg, 1, x + r * D, &rt, bytes[bi % 3]) != 0;
            dsv4_moe_combine(D, K, og, idx, sh, y1);
            bad += memcmp(y1, y + r * D, sizeof(float) * D) != 0 || memcmp(sel1, sel + r * K, sizeof(int) * K) != 0;
        }
    CHECK_MSG(failed == 0 && bad == 0, "one-row job: %d runs failed, %d of %d differ from the general path", failed, bad,
              6 * S);
    /* dsv4_moe_forward of one row on 3 threads takes the job */
    kctx = k3;
    bad = 0;
    for (int r = 0; r < S; r++) {
        CHECK(moe_fwd(&f.cfg, &f.b, x + r * D, tok + r, 1, y1, sel1, &err) == DSV4_OK);
        bad += memcmp(y1, y + r * D, sizeof(float) * D) != 0 || memcmp(sel1, sel + r * K, sizeof(int) * K) != 0;
    }
    CHECK_MSG(bad == 0, "one-row forward on 3 threads: %d of %d rows differ", bad, S);
    /* a hash layer without its table: the routing fails inside the job */
    f.b.layer_id = 0;
    const dsv4_moe_group shg = {&f.b.sh_w1, &f.b.sh_w3, &f.b.sh_w2, x, NULL, 1, sh, gu + 2 * K * I, gu + (2 * K + 1) * I};
    const dsv4_moe_one_route rt = {&f.b, tok[0], logits, s, sel1, wk, og, gu};
    CHECK(dsv4_moe_one_run(k3, &f.cfg, &shg, 1, x, &rt, 256) == -1);
    CHECK(moe_fwd(&f.cfg, &f.b, x, tok, 1, y1, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "routes by hash but has no tid2eid");
    kctx = k1;
    dsv4_kctx_free(k3);
    dsv4_kctx_free(k2);
    tfree_all();
}

/* dsv4_moe_combine (16 columns a register on AVX-512) against its contract's order, bit for
 * bit: y = ((o_idx[0] + o_idx[1]) + ...) + shared per element, at widths around 16 (the
 * masked tail) and the checkpoints' 1024 and 4096, K 1-8; sources of mixed magnitudes so
 * that another order rounds differently; the floats past y[D] stay untouched. */
static void test_combine(void) {
    const int Ds[] = {1, 7, 15, 16, 17, 24, 33, 1024, 1029, 4096};
    enum { RMAX = 12, GUARD = 16 };
    int bad = 0, guard_bad = 0, cases = 0;
    for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++)
        for (int K = 1; K <= 8; K++) {
            const int D = Ds[di];
            float *rows = talloc(sizeof(float) * RMAX * D), *sh = talloc(sizeof(float) * D);
            float *y = talloc(sizeof(float) * (D + GUARD)), *ref = talloc(sizeof(float) * D);
            for (int i = 0; i < RMAX * D; i++) rows[i] = (float)(urand() * (i % 3 == 0 ? 1e6 : i % 3 == 1 ? 1.0 : 1e-6));
            for (int i = 0; i < D; i++) sh[i] = (float)(urand() * 1e3);
            int idx[8];
            for (int kk = 0; kk < K; kk++) idx[kk] = (kk * 5 + 3) % RMAX; /* distinct, out of order */
            for (int i = 0; i < D + GUARD; i++) y[i] = -7.0f;
            for (int d = 0; d < D; d++) {
                float a = rows[(int64_t)idx[0] * D + d];
                for (int kk = 1; kk < K; kk++) a += rows[(int64_t)idx[kk] * D + d];
                ref[d] = a + sh[d];
            }
            dsv4_moe_combine(D, K, rows, idx, sh, y);
            bad += memcmp(y, ref, sizeof(float) * D) != 0;
            for (int i = D; i < D + GUARD; i++) guard_bad += y[i] != -7.0f;
            cases++;
        }
    CHECK_MSG(bad == 0 && guard_bad == 0, "combine: %d of %d cases differ from the k-order sums, %d guard floats written",
              bad, cases, guard_bad);
    tfree_all();
}

/* moe_one's cut at the shipped item size: with Flash-quarter's shapes (D 1024, I 512, E 256)
 * on 2 threads every product is two items, one contiguous half a thread (the batch-1 step's
 * long runs; 128 KB items cut an FP4 expert in 6 + 6). Shapes only: no weights are read. */
static void test_one_row_items(void) {
    const int64_t B = DSV4_MOE_ONE_ITEM_BYTES;
    const dsv4_mat w13 = {DSV4_WF_FP4, 512, 1024, NULL, NULL, 0, 0}, w2 = {DSV4_WF_FP4, 1024, 512, NULL, NULL, 0, 0};
    const dsv4_mat s13 = {DSV4_WF_FP8, 512, 1024, NULL, NULL, 0, 0}, s2 = {DSV4_WF_FP8, 1024, 512, NULL, NULL, 0, 0};
    const dsv4_mat gate = {DSV4_WF_BF16, 256, 1024, NULL, NULL, 0, 0};
    CHECK(dsv4_moe_one_item_rows(&w13, 2, B, 2) == 256);
    CHECK(dsv4_moe_one_item_rows(&w2, 1, B / 2, 2) == 512);
    CHECK(dsv4_moe_one_item_rows(&s13, 2, B, 2) == 256);
    CHECK(dsv4_moe_one_item_rows(&s2, 1, B / 2, 2) == 512);
    CHECK(dsv4_moe_one_item_rows(&gate, 1, B, 2) == 128);
    /* the cut itself: a multiple of the threads, 4-row multiples; FP8 whole bands */
    CHECK(dsv4_moe_one_item_rows(&w13, 2, 128 << 10, 2) == 88);
    CHECK(dsv4_moe_one_item_rows(&w13, 2, 128 << 10, 3) == 88);
    CHECK(dsv4_moe_one_item_rows(&s13, 2, 128 << 10, 2) == 64);
    CHECK(dsv4_moe_one_item_rows(&s2, 1, 1 << 20, 2) == 1024);
    /* a routed expert's matrices whole (one expert a thread) where that cut is one item a
     * thread and the threads divide K; else the cut. The checkpoint's experts (I 2048, D
     * 4096) keep it. */
    CHECK(dsv4_moe_one_routed_rows(&w13, 2, B, 2, 6) == 512);
    CHECK(dsv4_moe_one_routed_rows(&w2, 1, B / 2, 2, 6) == 1024);
    CHECK(dsv4_moe_one_routed_rows(&w13, 2, B, 3, 6) == 512);
    CHECK(dsv4_moe_one_routed_rows(&w13, 2, B, 4, 6) == 128); /* 6 experts on 4 threads */
    CHECK(dsv4_moe_one_routed_rows(&w13, 2, B, 4, 8) == 512);
    CHECK(dsv4_moe_one_routed_rows(&w13, 2, 128 << 10, 2, 6) == 88);
    CHECK(dsv4_moe_one_routed_rows(&w13, 2, B, 1, 6) == 256); /* one thread: the cut */
    const dsv4_mat f13 = {DSV4_WF_FP4, 2048, 4096, NULL, NULL, 0, 0}, f2 = {DSV4_WF_FP4, 4096, 2048, NULL, NULL, 0, 0};
    CHECK(dsv4_moe_one_routed_rows(&f13, 2, B, 2, 6) == dsv4_moe_one_item_rows(&f13, 2, B, 2));
    CHECK(dsv4_moe_one_routed_rows(&f2, 1, B / 2, 2, 6) == dsv4_moe_one_item_rows(&f2, 1, B / 2, 2));
    CHECK(dsv4_moe_one_item_rows(&f13, 2, B, 2) < 2048);
}

/* dsv4_moe_experts' few-row job (a batched decode step's experts of 1-4 rows, one task each,
 * most rows first) against each group alone (dsv4_moe_expert), bit for bit, on 1 and 3
 * threads: few-row groups alone, beside one and two larger groups (the shared expert's
 * place), beside three (the sliced path for all), and all of one row (the one-row job).
 * Outputs start as NaN, so a group left out shows. */
static void test_few_row_job(void) {
    const moe_case t = {"few-row job", 48, 40, 16, 4, 40, 5, 2, DSV4_SCORE_SQRTSOFTPLUS, 0.5, 1.5, 0, 1, 1};
    fake f;
    make_fake(&f, &t);
    enum { NG = 12, RMAX = 16, NC = 5 };
    static const int rows[NC][NG] = {{1, 2, 3, 4, 1, 1, 2, 1, 3, 1, 4, 2},  {1, 2, 3, 4, 1, 16, 2, 1, 3, 1, 4, 2},
                                     {5, 2, 3, 4, 1, 1, 2, 1, 3, 1, 4, 9},  {5, 2, 3, 6, 1, 1, 2, 1, 3, 1, 4, 9},
                                     {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}};
    const int D = t.D, I = t.I, E = t.E;
    float *x = talloc(sizeof(float) * NG * RMAX * D), *w = talloc(sizeof(float) * NG * RMAX);
    float *out = talloc(sizeof(float) * NG * RMAX * D), *ref = talloc(sizeof(float) * NG * RMAX * D);
    float *g = talloc(sizeof(float) * NG * RMAX * I), *u = talloc(sizeof(float) * NG * RMAX * I);
    for (int i = 0; i < NG * RMAX * D; i++) x[i] = (float)(1.5 * urand());
    for (int i = 0; i < NG * RMAX; i++) w[i] = (float)(0.5 + 0.5 * urand());
    dsv4_err err;
    dsv4_kctx *k3;
    CHECK(dsv4_kctx_create(3, 256, &k3, &err) == DSV4_OK);
    int bad = 0, cases = 0;
    for (int c = 0; c < NC; c++) {
        dsv4_moe_group gr[NG];
        for (int i = 0; i < NG; i++) {
            const int e = (5 * i + c) % E, off = i * RMAX;
            const int shared = rows[c][i] == 16; /* the shared expert: weight 1 */
            gr[i] = (dsv4_moe_group){shared ? &f.b.sh_w1 : &f.b.w1[e], shared ? &f.b.sh_w3 : &f.b.w3[e],
                                     shared ? &f.b.sh_w2 : &f.b.w2[e], x + (int64_t)off * D, shared ? NULL : w + off,
                                     rows[c][i], ref + (int64_t)off * D, g + (int64_t)off * I, u + (int64_t)off * I};
        }
        memset(ref, 0xff, sizeof(float) * NG * RMAX * D);
        for (int i = 0; i < NG; i++) /* each alone */
            dsv4_moe_expert(kctx, dsv4_numerics_exact(), &f.cfg, gr[i].w1, gr[i].w3, gr[i].w2, gr[i].x, gr[i].w,
                            gr[i].n, gr[i].out, gr[i].g, gr[i].u);
        for (int i = 0; i < NG; i++) gr[i].out = out + (int64_t)i * RMAX * D;
        for (int th = 0; th < 2; th++) {
            memset(out, 0xff, sizeof(float) * NG * RMAX * D);
            dsv4_moe_experts(th ? k3 : kctx, dsv4_numerics_exact(), &f.cfg, gr, NG);
            for (int i = 0; i < NG; i++)
                bad += memcmp(out + (int64_t)i * RMAX * D, ref + (int64_t)i * RMAX * D, sizeof(float) * rows[c][i] * D) != 0;
            cases += NG;
        }
    }
    CHECK_MSG(bad == 0, "few-row job: %d of %d groups differ from the group alone", bad, cases);
    dsv4_kctx_free(k3);
    tfree_all();
}

/* A batched decode pass (2..32 rows, exact numerics, 2 and 3 threads) routes beside the shared
 * expert in one job (moe.c fused_job): the same bits and selections as on one thread, where the
 * router, gather and experts are separate jobs. 16 experts of K 2: mostly few-row groups (the
 * few-row job); 8 of K 3: larger groups (the sliced path after the job); 1 and 33 rows: the
 * other paths. A row whose route fails (a token outside the hash table) fails the call with
 * the one-thread error. */
static void test_fused_router(void) {
    const moe_case cs[] = {
        {"fused few", 24, 12, 16, 2, 40, 5, 2, DSV4_SCORE_SQRTSOFTPLUS, 0.5, 1.5, 0, 1, 1},
        {"fused sliced", 24, 12, 8, 3, 40, 5, 2, DSV4_SCORE_SIGMOID, 2.0, 2.5, 1, 0, 1},
        {"fused hash", 16, 8, 16, 2, 12, 1, 3, DSV4_SCORE_SQRTSOFTPLUS, 1.0, 1.5, 1, 0, 0},
    };
    static const int rows[] = {1, 2, 3, 4, 5, 6, 9, 16, 32, 33};
    dsv4_err err;
    dsv4_kctx *kt[2], *k1 = kctx;
    CHECK(dsv4_kctx_create(2, 256, &kt[0], &err) == DSV4_OK);
    CHECK(dsv4_kctx_create(3, 256, &kt[1], &err) == DSV4_OK);
    int bad = 0, n = 0;
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        fake f;
        make_fake(&f, &cs[c]);
        const int D = cs[c].D, K = cs[c].K, SM = 33;
        float *x = talloc(sizeof(float) * SM * D), *y1 = talloc(sizeof(float) * SM * D), *y = talloc(sizeof(float) * SM * D);
        int32_t *tok = talloc(sizeof(int32_t) * SM);
        int *sel1 = talloc(sizeof(int) * SM * K), *sel = talloc(sizeof(int) * SM * K);
        for (int i = 0; i < SM * D; i++) x[i] = (float)(1.5 * urand());
        for (int s = 0; s < SM; s++) tok[s] = (int32_t)((urand() + 1) / 2 * cs[c].V) % cs[c].V;
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            const int S = rows[r];
            kctx = k1;
            CHECK(moe_fwd(&f.cfg, &f.b, x, tok, S, y1, sel1, &err) == DSV4_OK);
            for (int t = 0; t < 2; t++) {
                kctx = kt[t];
                memset(y, 0xff, sizeof(float) * SM * D);
                const int rc = moe_fwd(&f.cfg, &f.b, x, tok, S, y, sel, &err);
                CHECK_MSG(rc == DSV4_OK, "%s: %d rows, %d threads: %s", cs[c].name, S, t + 2, err.msg);
                bad += memcmp(y, y1, sizeof(float) * S * D) != 0 || memcmp(sel, sel1, sizeof(int) * S * K) != 0;
                n++;
            }
        }
        if (cs[c].layer_id < cs[c].n_hash) { /* a token outside the table: the call fails as on one thread */
            tok[1] = 12;
            for (int t = 0; t < 2; t++)
                for (int S = 3; S <= 16; S += 13) {
                    kctx = kt[t];
                    CHECK(moe_fwd(&f.cfg, &f.b, x, tok, S, y, NULL, &err) == DSV4_ERR_ARG);
                    CHECK_ERR(err, DSV4_ERR_ARG, "token id 12");
                }
        }
        tfree_all();
    }
    kctx = k1;
    CHECK_MSG(bad == 0, "fused router: %d of %d calls differ from one thread", bad, n);
    dsv4_kctx_free(kt[0]);
    dsv4_kctx_free(kt[1]);
}

/* An expert's W1 and W3 as one matrix (moe.h dsv4_moe_w13, the engine's copy's layout): FP4
 * experts whose W1 and W3 lie one after the other (weights and scales) against the same bytes
 * apart, at 1, 2, 3 and 16 rows on 1 and 2 threads, at every kernel level this CPU and build
 * run: the same bits and selections (one-row experts fused take one product for both). The
 * predicate says 1 for the adjacent pair (with 2I rows) and 0 for the apart one, for W1 and W3
 * swapped, and for scales apart. */
static uint8_t *aligned64(size_t n) { return (uint8_t *)(((uintptr_t)talloc(n + 64) + 63) & ~(uintptr_t)63); }

static void test_w13_fused(void) {
    const moe_case t = {"w13", 512, 64, 16, 2, 40, 5, 2, DSV4_SCORE_SQRTSOFTPLUS, 0.5, 1.5, 0, 0, 0};
    fake f;
    make_fake(&f, &t); /* its router and shared expert; 64 FP4 routed experts instead of its 16 */
    const int D = t.D, I = t.I, E = 64, K = t.K;
    f.cfg.n_routed_experts = E;
    new_mat(&f.b.gate, E, D, 2.0 / sqrt(D), 0);
    const int64_t wb = (int64_t)I * D / 2, sb = (int64_t)I * D / 32; /* a matrix's weight and scale bytes */
    dsv4_block_w fb = f.b, ab = f.b; /* W1|W3 fused, apart */
    fb.w1 = talloc(sizeof(dsv4_mat) * E), fb.w3 = talloc(sizeof(dsv4_mat) * E), fb.w2 = talloc(sizeof(dsv4_mat) * E);
    ab.w1 = talloc(sizeof(dsv4_mat) * E), ab.w3 = talloc(sizeof(dsv4_mat) * E), ab.w2 = fb.w2;
    int fused_ok = 1, apart_ok = 1;
    for (int e = 0; e < E; e++) {
        uint8_t *w = aligned64(2 * wb), *sc = aligned64(2 * sb), *wa = aligned64(2 * wb + 64), *sa = aligned64(2 * sb + 64);
        for (int64_t i = 0; i < 2 * wb; i++) w[i] = (uint8_t)rng_next();
        for (int64_t i = 0; i < 2 * sb; i++) sc[i] = (uint8_t)(122 + rng_next() % 8);
        memcpy(wa, w, wb), memcpy(wa + wb + 64, w + wb, wb);
        memcpy(sa, sc, sb), memcpy(sa + sb + 64, sc + sb, sb);
        fb.w1[e] = (dsv4_mat){DSV4_WF_FP4, I, D, w, sc, 0, 0};
        fb.w3[e] = (dsv4_mat){DSV4_WF_FP4, I, D, w + wb, sc + sb, 0, 0};
        ab.w1[e] = (dsv4_mat){DSV4_WF_FP4, I, D, wa, sa, 0, 0};
        ab.w3[e] = (dsv4_mat){DSV4_WF_FP4, I, D, wa + wb + 64, sa + sb + 64, 0, 0};
        uint8_t *w2 = aligned64(wb), *s2 = aligned64(sb);
        for (int64_t i = 0; i < wb; i++) w2[i] = (uint8_t)rng_next();
        for (int64_t i = 0; i < sb; i++) s2[i] = (uint8_t)(122 + rng_next() % 8);
        fb.w2[e] = (dsv4_mat){DSV4_WF_FP4, D, I, w2, s2, 0, 0};
        dsv4_mat v;
        fused_ok &= dsv4_moe_w13(&fb.w1[e], &fb.w3[e], &v) == 1 && v.rows == 2 * I && v.w == w && v.scale == sc;
        apart_ok &= !dsv4_moe_w13(&ab.w1[e], &ab.w3[e], &v) && !dsv4_moe_w13(&fb.w3[e], &fb.w1[e], &v);
        dsv4_mat sx = fb.w3[e];
        sx.scale = sa + sb + 64; /* weights adjacent, scales not */
        apart_ok &= !dsv4_moe_w13(&fb.w1[e], &sx, &v);
    }
    CHECK_MSG(fused_ok && apart_ok, "dsv4_moe_w13: adjacent pairs %s, apart ones %s", fused_ok ? "fused" : "NOT fused",
              apart_ok ? "not fused" : "FUSED");
    enum { SM = 16 };
    float *x = talloc(sizeof(float) * SM * D), *ya = talloc(sizeof(float) * SM * D), *yf = talloc(sizeof(float) * SM * D);
    int32_t tok[SM];
    int sela[SM * 2], self[SM * 2];
    for (int i = 0; i < SM * D; i++) x[i] = (float)(1.5 * urand());
    for (int r = 0; r < SM; r++) tok[r] = r;
    dsv4_err err;
    dsv4_kctx *k1 = kctx, *k2;
    const int level0 = dsv4_kctx_simd(k1);
    CHECK(dsv4_kctx_create(2, 256, &k2, &err) == DSV4_OK);
    static const int rows[] = {1, 2, 3, 16};
    int bad = 0, nonfinite = 0, n = 0;
    for (int level = 0; level <= DSV4_SIMD_MAX; level++) {
        if (dsv4_kctx_set_simd(k1, level) != level || dsv4_kctx_set_simd(k2, level) != level) continue; /* not here */
        for (int th = 0; th < 2; th++)
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
                const int S = rows[ri];
                kctx = th ? k2 : k1;
                int rc = moe_fwd(&f.cfg, &ab, x, tok, S, ya, sela, &err);
                rc |= moe_fwd(&f.cfg, &fb, x, tok, S, yf, self, &err);
                CHECK_MSG(rc == DSV4_OK, "w13: level %d, %d rows: %s", level, S, err.msg);
                bad += memcmp(ya, yf, sizeof(float) * S * D) != 0 || memcmp(sela, self, sizeof(int) * S * K) != 0;
                for (int i = 0; i < S * D; i++) nonfinite += !isfinite(yf[i]);
                n++;
            }
    }
    kctx = k1;
    dsv4_kctx_set_simd(k1, level0);
    CHECK_MSG(bad == 0 && nonfinite == 0 && n >= 8, "w13: %d of %d calls differ fused against apart (%d values not finite)",
              bad, n, nonfinite);
    dsv4_kctx_free(k2);
    tfree_all();
}

int main(void) {
    dsv4_err err;
    if (dsv4_kctx_create(1, 256, &kctx, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    /* name, D, I, E, K, V, layer, n_hash, score, limit, rsf, gate_bf16, w2_bf16, bias */
    const moe_case cases[] = {
        {"sqrtsoftplus+bias+clamp", 24, 12, 8, 3, 40, 5, 2, DSV4_SCORE_SQRTSOFTPLUS, 0.5, 1.5, 0, 0, 1},
        {"sqrtsoftplus, bf16 gate and w2, no clamp", 32, 16, 8, 2, 40, 4, 2, DSV4_SCORE_SQRTSOFTPLUS, 0, 1.5, 1, 1, 1},
        {"sigmoid", 24, 12, 8, 3, 40, 3, 2, DSV4_SCORE_SIGMOID, 2.0, 2.5, 0, 0, 1},
        {"softmax, no bias", 24, 12, 6, 2, 40, 3, 2, DSV4_SCORE_SOFTMAX, 0.7, 1.0, 1, 0, 0},
        {"hash sqrtsoftplus", 24, 12, 8, 3, 40, 0, 3, DSV4_SCORE_SQRTSOFTPLUS, 0.5, 1.5, 1, 0, 0},
        {"hash softmax, K=E", 16, 8, 4, 4, 20, 2, 3, DSV4_SCORE_SOFTMAX, 0, 1.5, 0, 1, 0},
        {"K=E score", 16, 8, 5, 5, 20, 3, 3, DSV4_SCORE_SIGMOID, 0.5, 1.5, 0, 0, 1},
        /* a row alone runs W1, W3 and the SwiGLU as one job in blocks of 128 intermediate
         * values: two blocks, the second partial, against the batch's two-phase path */
        {"wide intermediate", 24, 200, 8, 3, 40, 5, 2, DSV4_SCORE_SQRTSOFTPLUS, 0.5, 1.5, 0, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], 37);
    test_ties();
    test_topk();
    test_route_bounded();
    test_route_tab_at();
    test_hash_and_errors();
    test_one_row_job();
    test_one_row_items();
    test_few_row_job();
    test_fused_router();
    test_w13_fused();
    test_combine();
    dsv4_kctx_free(kctx);
    return test_report();
}
