/* ep_fixture.h — what the engine tests under expert parallelism share (test_ep_engine.c,
 * test_dp_engine.c): the group and the model from the command line, adversarial routing, the
 * smallest cache budget the planner admits. */
#ifndef DSV4_TESTS_MPI_EP_FIXTURE_H
#define DSV4_TESTS_MPI_EP_FIXTURE_H

#include <stdint.h>

#include "cache/cache.h"
#include "dist/dist.h"
#include "dsv4.h"
#include "engine/engine.h"
#include "test.h"

/* A test's group and model. */
typedef struct ep_world {
    dsv4_dist *d;
    int rank, size;
    dsv4_model *m;
    int V, D, hc, L; /* vocabulary, hidden size, streams, layers */
} ep_world;

/* MPI and the model of argv[1]; on a bad command line every rank ends (usage names prog). */
static inline int ep_world_open(int *argc, char ***argv, const char *prog, ep_world *g) {
    dsv4_err err = {0};
    memset(g, 0, sizeof *g);
    if (dsv4_dist_init(argc, argv, &g->d, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    g->rank = dsv4_dist_rank(g->d);
    g->size = dsv4_dist_size(g->d);
    if (*argc < 2 || dsv4_model_open((*argv)[1], &g->m, &err)) {
        fprintf(stderr, "usage: %s MODEL_DIR (%s)\n", prog, err.msg);
        dsv4_dist_abort(g->d, 1);
        return 1;
    }
    const dsv4_model_info info = dsv4_model_get_info(g->m);
    g->V = info.vocab_size; g->D = info.hidden_size; g->hc = info.hc_mult; g->L = info.n_layers;
    return 0;
}

/* The verdict (test_report's exit status) after the model and MPI are closed. */
static inline int ep_world_close(ep_world *g) {
    dsv4_model_close(g->m);
    const int rc = test_report();
    dsv4_dist_finalize(g->d);
    return rc;
}

/* Every route it can to the last of `size` ranks, in engines es[0 .. n) (NULL entries
 * skipped; their blocks are shallow copies, so the model is untouched): a gate bias (E) and
 * a tid2eid table (V, K) that the caller frees after the engines. */
static inline void ep_fixture_adversarial(const dsv4_model *m, int size, dsv4_engine **es, int n,
                                          float **bias_out, int32_t **table_out) {
    const dsv4_config *c = &m->cfg;
    const int E = c->n_routed_experts, K = c->num_experts_per_tok, E_loc = E / size, target = size - 1;
    float *bias = *bias_out = malloc(sizeof(float) * E);
    int32_t *table = *table_out = malloc(sizeof(int32_t) * c->vocab_size * K);
    for (int e = 0; e < E; e++) bias[e] = e / E_loc == target ? 1000.0f : 0.0f;
    for (int t = 0; t < c->vocab_size; t++)
        for (int k = 0; k < K; k++)
            table[t * K + k] = k < E_loc ? target * E_loc + (t + k) % E_loc : ((target + 1) * E_loc + k - E_loc) % E;
    for (int l = 0; l < c->num_hidden_layers + c->num_nextn_predict_layers; l++)
        for (int j = 0; j < n; j++) {
            if (!es[j]) continue;
            if (es[j]->blocks[l].gate_bias) es[j]->blocks[l].gate_bias = bias;
            if (es[j]->blocks[l].tid2eid) es[j]->blocks[l].tid2eid = table;
        }
}

/* The smallest compressed-pool budget a planner admits: max_context positions in all (of
 * e's plan, or of the plan an engine with options o would make for m when e is NULL). */
static inline uint64_t ep_fixture_min_budget(const dsv4_engine *e, const dsv4_model *m, dsv4_engine_opts o) {
    dsv4_cache_plan own;
    const dsv4_cache_plan *plan = &own;
    if (e) {
        plan = dsv4_cache_get_plan(e->cache);
    } else {
        dsv4_cache_opts co;
        dsv4_err err = {0};
        dsv4_engine_opts_resolve(&o);
        dsv4_engine_cache_opts(&o, &co);
        CHECK_MSG(dsv4_cache_plan_make(&m->cfg, &co, &own, &err) == 0, "plan: %s", err.msg);
    }
    const int64_t spare = (plan->opts.max_context + plan->block - 1) / plan->block;
    return (uint64_t)(plan->opts.max_seqs * plan->seq_fixed_bytes + (plan->opts.max_seqs + spare) * plan->block_bytes);
}

#endif
