/* test_ep.c — the expert-parallel MoE exchange (spec/serving.md §d) against the
 * single-rank dsv4_moe_forward, run under mpirun with EP = the number of ranks. Every MoE
 * block of the model (hash and score layers, the MTP block), every rank with its own rows:
 *  - random rows, uneven counts per rank (one rank with none), small waves so ranks run
 *    different numbers of waves locally: results bitwise equal to the local forward;
 *  - the EP block has the other ranks' experts poisoned (no weights): a rank that read
 *    one would crash, so each rank provably reads only its own;
 *  - adversarial routing: gate bias (score layers) or tid2eid (hash layers) sending every
 *    route it can to one rank, every rank with exactly T_w rows: that rank receives
 *    exactly the preallocated bound EP * T_w * min(K, E_loc), results still bitwise equal;
 *  - failures: E % EP != 0 refused at creation; a rank that reports a failure before a
 *    sub-block (dsv4_ep_fail), or fails inside one (bad token id on a hash layer), makes
 *    every rank return an error at that sub-block, and the next sub-block runs normally.
 *
 *   mpirun -np EP test_ep MODEL_DIR
 */
#include <stdint.h>

#include "dist/ep.h"
#include "dsv4.h"
#include "kernels/kctx.h"
#include "model/model.h"
#include "moe/moe.h"
#include "test.h"

static uint64_t rng;
static double urand(void) { /* [-1, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

typedef struct ctx {
    dsv4_dist *d;
    int rank, size;
    const dsv4_config *cfg;
    dsv4_kctx *k;
    dsv4_arena *routes; /* dsv4_ep_moe's scratch */
} ctx;

/* A copy of b whose routed experts outside [e0, e1) have no weights at all. */
typedef struct poisoned {
    dsv4_block_w b;
    dsv4_mat *w1, *w2, *w3;
} poisoned;

static void poison(const ctx *c, const dsv4_block_w *b, int e0, int e1, poisoned *p) {
    const int E = c->cfg->n_routed_experts;
    p->b = *b;
    p->w1 = calloc((size_t)E, sizeof(dsv4_mat));
    p->w2 = calloc((size_t)E, sizeof(dsv4_mat));
    p->w3 = calloc((size_t)E, sizeof(dsv4_mat));
    for (int e = e0; e < e1; e++) { p->w1[e] = b->w1[e]; p->w2[e] = b->w2[e]; p->w3[e] = b->w3[e]; }
    p->b.w1 = p->w1; p->b.w2 = p->w2; p->b.w3 = p->w3;
}

static void unpoison(poisoned *p) { free(p->w1); free(p->w2); free(p->w3); }

/* Runs EP on R rows of this rank and compares with the local forward on the real block
 * ref (same routing tables as b). */
static void compare(const ctx *c, dsv4_ep *ep, const dsv4_block_w *b, const dsv4_block_w *ref,
                    int R, const char *what) {
    const int D = c->cfg->hidden_size, V = c->cfg->vocab_size;
    float *x = R ? malloc(sizeof(float) * R * D) : NULL;
    float *y = R ? malloc(sizeof(float) * R * D) : NULL, *yr = R ? malloc(sizeof(float) * R * D) : NULL;
    int32_t *tok = R ? malloc(sizeof(int32_t) * R) : NULL;
    for (int i = 0; i < R * D; i++) x[i] = (float)(urand() * 1.5);
    for (int i = 0; i < R; i++) tok[i] = (int32_t)((urand() + 1.0) * 0.5 * V) % V;
    dsv4_err err = {0};
    int rc = dsv4_ep_moe(ep, c->k, dsv4_numerics_exact(), b, x, tok, R, y, c->routes, &err);
    CHECK_MSG(rc == 0, "%s layer %d rank %d: %s", what, b->layer_id, c->rank, err.msg);
    if (R) {
        dsv4_arena a;
        CHECK(dsv4_arena_init(&a, dsv4_moe_scratch_bytes(c->cfg, R), &err) == 0);
        CHECK(dsv4_moe_forward(c->k, dsv4_numerics_exact(), c->cfg, ref, x, tok, R, yr, NULL, &a, &err) == 0);
        dsv4_arena_free(&a);
        CHECK_MSG(rc == 0 && memcmp(y, yr, sizeof(float) * R * D) == 0,
                  "%s layer %d rank %d: EP result differs from the local forward", what, b->layer_id, c->rank);
    }
    free(x); free(y); free(yr); free(tok);
}

/* Routing tables that send every route they can to rank `target`. */
typedef struct adversary {
    dsv4_block_w b;
    float *bias;      /* (E) */
    int32_t *tid2eid; /* (V, K) */
} adversary;

static void adversarial(const ctx *c, const dsv4_block_w *b, int target, adversary *a) {
    const int E = c->cfg->n_routed_experts, K = c->cfg->num_experts_per_tok, V = c->cfg->vocab_size;
    const int E_loc = E / c->size;
    a->b = *b;
    a->bias = malloc(sizeof(float) * E);
    a->tid2eid = malloc(sizeof(int32_t) * V * K);
    for (int e = 0; e < E; e++)
        a->bias[e] = (b->gate_bias ? b->gate_bias[e] : 0.0f) + (e / E_loc == target ? 1000.0f : 0.0f);
    for (int t = 0; t < V; t++)
        for (int k = 0; k < K; k++) {
            int e;
            if (k < E_loc) e = target * E_loc + (t + k) % E_loc;  /* the target's experts first */
            else e = ((target + 1) * E_loc + (k - E_loc)) % E;     /* then distinct others */
            a->tid2eid[t * K + k] = e;
        }
    if (b->gate_bias) a->b.gate_bias = a->bias;
    if (b->tid2eid) a->b.tid2eid = a->tid2eid;
}

static void failures(const ctx *c, dsv4_ep *ep, const dsv4_block_w *hash_b, const dsv4_block_w *b) {
    const int D = c->cfg->hidden_size;
    dsv4_err err = {0};
    float x[4 * 512], y[4 * 512];
    int32_t tok[4] = {1, 2, 3, 4};
    for (int i = 0; i < 4 * D && i < 4 * 512; i++) x[i] = (float)urand();
    /* E % EP != 0 */
    dsv4_config bad = *c->cfg;
    bad.n_routed_experts = 2 * c->size + 1;
    dsv4_ep *none = NULL;
    CHECK(dsv4_ep_create(&bad, c->d, 4, &none, &err) == DSV4_ERR_CONFIG && none == NULL);
    CHECK(strstr(err.msg, "do not divide") != NULL);
    /* a failure reported before the sub-block, dirty then clean */
    for (int clean = 0; clean < 2; clean++) {
        if (c->rank == 1) {
            dsv4_ep_fail(ep, DSV4_ERR_CACHE_FULL, clean);
        } else {
            int rc = dsv4_ep_moe(ep, c->k, dsv4_numerics_exact(), b, x, tok, 4, y, c->routes, &err);
            CHECK_ERR(err, DSV4_ERR_CACHE_FULL, "rank 1 failed");
            CHECK(rc == DSV4_ERR_CACHE_FULL && dsv4_ep_failure_clean(ep) == clean);
        }
    }
    /* a failure inside: a token id out of range on a hash layer, on the last rank only */
    if (hash_b) {
        int32_t t2[4] = {1, 2, c->rank == c->size - 1 ? c->cfg->vocab_size : 3, 4};
        int rc = dsv4_ep_moe(ep, c->k, dsv4_numerics_exact(), hash_b, x, t2, 4, y, c->routes, &err);
        CHECK(rc == DSV4_ERR_ARG);
        if (c->rank == c->size - 1) CHECK_ERR(err, DSV4_ERR_ARG, "token id");
        else CHECK_ERR(err, DSV4_ERR_ARG, "failed at the MoE");
    }
    /* the group is still in step */
    compare(c, ep, b, b, 3, "after failures");
}

int main(int argc, char **argv) {
    ctx c = {0};
    dsv4_err err = {0};
    if (dsv4_dist_init(&argc, &argv, &c.d, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    c.rank = dsv4_dist_rank(c.d);
    c.size = dsv4_dist_size(c.d);
    rng = 0x2545f4914f6cdd1dull + 7919u * (uint64_t)c.rank;
    dsv4_model *m = NULL;
    if (argc < 2 || dsv4_model_open(argv[1], &m, &err)) {
        fprintf(stderr, "usage: test_ep MODEL_DIR (%s)\n", err.msg);
        dsv4_dist_abort(c.d, 1);
        return 1;
    }
    c.cfg = &m->cfg;
    const dsv4_config *cfg = c.cfg;
    const int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok, EP = c.size;
    CHECK(dsv4_kctx_create(1, 4096, &c.k, &err) == 0);
    dsv4_arena routes;
    CHECK(dsv4_arena_init(&routes, dsv4_ep_scratch_bytes(cfg, 1 << 12), &err) == 0);
    c.routes = &routes;
    printf("rank %d/%d: E %d K %d D %d layers %d + %d MTP\n", c.rank, EP, E, K, cfg->hidden_size,
           cfg->num_hidden_layers, cfg->num_nextn_predict_layers);

    const int n_blocks = cfg->num_hidden_layers + cfg->num_nextn_predict_layers;
    const int waves[2] = {5, 64};
    for (int wi = 0; wi < 2; wi++) {
        const int T = waves[wi];
        dsv4_ep *ep = NULL;
        CHECK(dsv4_ep_create(cfg, c.d, T, &ep, &err) == 0);
        if (!ep) { fprintf(stderr, "%s\n", err.msg); break; }
        int e0, e1;
        dsv4_ep_local_range(ep, &e0, &e1);
        CHECK(e0 == c.rank * (E / EP) && e1 == e0 + E / EP);
        const int reach = K < E / EP ? K : E / EP;
        CHECK(dsv4_ep_get_stats(ep).recv_capacity == (int64_t)EP * T * reach);
        for (int l = 0; l < n_blocks; l++) {
            const dsv4_block_w *b = l < cfg->num_hidden_layers ? &m->layers[l] : &m->mtp[0];
            poisoned p;
            poison(&c, b, e0, e1, &p);
            /* uneven rows, rank 1 none: 23 rows are 5 waves of 5 against 2 for 7 */
            const int R = c.rank == 1 ? 0 : 23 - 16 * (c.rank % 2 == 0 && c.rank > 0) + 9 * (l % 2);
            compare(&c, ep, &p.b, b, R, "random");
            /* adversarial: all routes it can to one rank, every rank with T rows */
            for (int target = 0; target < EP; target += EP - 1) {
                adversary a;
                adversarial(&c, b, target, &a);
                poisoned pa;
                poison(&c, &a.b, e0, e1, &pa);
                dsv4_ep_reset_stats(ep);
                compare(&c, ep, &pa.b, &a.b, T, "adversarial");
                const dsv4_ep_stats st = dsv4_ep_get_stats(ep);
                if (c.rank == target)
                    CHECK_MSG(st.max_recv_rows == st.recv_capacity,
                              "layer %d: target rank received %lld rows, bound %lld", b->layer_id,
                              (long long)st.max_recv_rows, (long long)st.recv_capacity);
                CHECK(st.waves == 1 && st.rows_sent == (int64_t)T * K);
                unpoison(&pa);
                free(a.bias);
                free(a.tid2eid);
            }
            unpoison(&p);
        }
        if (wi == 0)
            failures(&c, ep, cfg->num_hash_layers > 0 ? &m->layers[0] : NULL,
                     &m->layers[cfg->num_hidden_layers - 1]);
        dsv4_ep_free(ep);
    }
    dsv4_kctx_free(c.k);
    dsv4_arena_free(&routes);
    dsv4_model_close(m);
    int rc = test_report();
    dsv4_dist_finalize(c.d);
    return rc;
}
