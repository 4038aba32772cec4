/* fit.c — will this model and these engine options fit in this machine's memory? (see
 * dsv4_mem_fit in dsv4.h). The cache and scratch figures come from the cache planner and
 * the scratch plan with the options the engine itself would resolve, so they are the
 * sizes engine create allocates. */
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "engine/engine.h"
#include "model/config.h"
#include "model/info.h"
#include "model/model.h"

#define GIB (1ull << 30)
#define MAX_EP_RANKS 64

static int fit(const dsv4_config *c, uint64_t weights, uint64_t routed, const dsv4_engine_opts *opts,
               uint64_t ram, dsv4_mem_fit *out, dsv4_err *err) {
    memset(out, 0, sizeof *out);
    dsv4_engine_opts o = opts ? *opts : (dsv4_engine_opts){0};
    dsv4_engine_opts_resolve(&o);
    dsv4_cache_opts co;
    dsv4_engine_cache_opts(&o, &co);
    dsv4_cache_plan plan;
    int rc = dsv4_cache_plan_make(c, &co, &plan, err);
    if (rc) return rc;
    out->weights_bytes = weights;
    out->routed_bytes = routed;
    out->cache_bytes = (uint64_t)plan.total_bytes;
    /* the arena engine create makes, from the same plan (engine/scratch.c) */
    out->scratch_bytes = dsv4_scratch_plan_bytes(c, &o, o.threads > 0 ? o.threads : dsv4_available_cores());
    out->need_bytes = weights + out->cache_bytes + out->scratch_bytes;
    out->ram_bytes = ram;
    out->headroom_bytes = ram / 20 > GIB ? ram / 20 : GIB;
    if (!ram) return DSV4_OK; /* unknown memory: no verdict */
    out->fits = out->need_bytes + out->headroom_bytes <= ram;
    if (out->fits) return DSV4_OK;
    for (int k = 2; k <= MAX_EP_RANKS; k++) {
        /* the home rank is the fullest: dense weights, its experts and the cache */
        uint64_t rank = (weights - routed) + (routed + (uint64_t)k - 1) / (uint64_t)k + out->cache_bytes +
                        out->scratch_bytes;
        if (rank + out->headroom_bytes <= ram) {
            out->ep_ranks = k;
            out->ep_rank_bytes = rank;
            break;
        }
    }
    return DSV4_OK;
}

int dsv4_mem_fit_config(const char *config_json, const dsv4_engine_opts *opts,
                        dsv4_mem_fit *out, dsv4_err *err) {
    dsv4_config c;
    int rc = dsv4_config_load(config_json, &c, err);
    if (rc) return rc;
    dsv4_dtype_bytes db;
    uint64_t routed;
    if ((rc = dsv4_count_release_bytes(&c, &db, &routed, err))) return rc;
    return fit(&c, db.total_bytes, routed, opts, dsv4_machine_ram_bytes(), out, err);
}

int dsv4_mem_fit_model(const dsv4_model *m, const dsv4_engine_opts *opts, dsv4_mem_fit *out,
                       dsv4_err *err) {
    dsv4_dtype_bytes db;
    dsv4_count_bytes(m->files, &db);
    return fit(&m->cfg, db.total_bytes, dsv4_count_routed_bytes(m->files), opts,
               dsv4_machine_ram_bytes(), out, err);
}
