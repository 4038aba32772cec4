/* engine.c — creating an engine over a model: cache plan and pools, RoPE tables, kernel
 * context; sequence handles; the serving-side LM head. */
#include "engine/engine.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "dist/ep.h"
#include "engine/fidelity_prep.h"
#include "engine/lmhead.h"
#include "engine/prefix.h"
#include "engine/w8a8_prep.h"
#include "kernels/cpu.h"
#include "kernels/idx_scores.h"
#include "kernels/kv_rows.h"
#include "moe/moe.h"
#include "util/numa.h"
#include "util/sha256.h"
#include "util/err.h"
#include "util/fpenv.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* One list for everything the engine makes at create, freed in dsv4_engine_free. */
int dsv4_engine_own(dsv4_engine *e, void *p) {
    void **owned = realloc(e->owned, (size_t)(e->n_owned + 1) * sizeof(void *));
    if (!owned) return -1;
    e->owned = owned;
    e->owned[e->n_owned++] = p;
    return 0;
}

int64_t dsv4_engine_own_expert_arrays(dsv4_block_w *b, void *mem, int E) {
    dsv4_mat *arr = (dsv4_mat *)mem; /* (3, E): w1, w3, w2 */
    memcpy(arr, b->w1, sizeof(dsv4_mat) * (size_t)E);
    memcpy(arr + E, b->w3, sizeof(dsv4_mat) * (size_t)E);
    memcpy(arr + 2 * E, b->w2, sizeof(dsv4_mat) * (size_t)E);
    b->w1 = arr;
    b->w3 = arr + E;
    b->w2 = arr + 2 * E;
    return (3 * (int64_t)E * (int64_t)sizeof(dsv4_mat) + 63) & ~(int64_t)63;
}

/* 1 when every block's routed experts pass dsv4_moe_check_experts (after the weight
 * preparation: W8A8 replaces matrices in place); a model that fails keeps the per-call check,
 * which then reports the bad matrix at the first MoE call, as before. Not with EP, whose
 * ranks check their own experts per call. */
static int moe_experts_ok(const dsv4_engine *e, int n_blocks) {
    dsv4_err ignored = {0};
    if (e->ep) return 0;
    for (int l = 0; l < n_blocks; l++)
        if (dsv4_moe_check_shared(e->cfg, &e->blocks[l], &ignored) ||
            dsv4_moe_check_experts(e->cfg, &e->blocks[l], 0, e->cfg->n_routed_experts, &ignored))
            return 0;
    return 1;
}

/* wo_a runs per output group on row blocks of o_lora rows; an FP8 matrix can only be
 * sliced at multiples of its 128-row scale blocks, so otherwise the engine keeps an exact
 * F32 copy (only small test models hit this: Flash has o_lora = 1024). */
static int prepare_wo_a(dsv4_engine *e, dsv4_block_w *b, dsv4_err *err) {
    const dsv4_config *c = e->cfg;
    dsv4_mat view;
    int ok = 1;
    for (int g = 0; g < c->o_groups && ok; g++)
        ok = dsv4_mat_rows(&b->wo_a, (int64_t)g * c->o_lora_rank, c->o_lora_rank, &view) == 0;
    if (ok) return DSV4_OK;
    const int64_t rows = b->wo_a.rows, cols = b->wo_a.cols;
    float *copy = malloc((size_t)(rows * cols) * sizeof(float)); /* (G*o_lora, H*hd/G) */
    if (!copy || dsv4_engine_own(e, copy)) {
        free(copy);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "wo_a copy: out of memory");
    }
    for (int64_t o = 0; o < rows; o++) dsv4_mat_row(&b->wo_a, o, copy + o * cols);
    b->wo_a.fmt = DSV4_WF_F32;
    b->wo_a.w = copy;
    b->wo_a.scale = NULL;
    b->wo_a.scale_is_f32 = 0;
    return DSV4_OK;
}

/* The score-routed router's bounds on a fixed grid of logits, one table for every block
 * (moe/route_bound.c: 2049 libm scores once, in the engine; each row's own 33 grid scores and
 * a division per expert otherwise, ~1.5x the routing's time). */
static void prepare_route_tab(dsv4_engine *e, int n_blocks) {
    if (e->cfg->scoring_func == DSV4_SCORE_SOFTMAX) return;
    dsv4_moe_bound_table(e->cfg, e->route_tab);
    for (int l = 0; l < n_blocks; l++) e->blocks[l].route_tab = e->route_tab;
}

/* The process group (serving.md §c, §d): with opts.parallel over more than one rank, rank
 * 0 is the home rank and the others idle through non-CP spans, or with DP every rank is
 * the home rank of its own sequences; EP splits the routed experts. One rank, or no
 * parallel flags, is the single-process engine. */
static int setup_parallel(dsv4_engine *e, dsv4_err *err) {
    const dsv4_engine_opts *o = &e->opts;
    if (o->parallel & ~(DSV4_PAR_CP | DSV4_PAR_EP | DSV4_PAR_DP | DSV4_PAR_DP_HEAD))
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: unknown parallel flags 0x%x", (unsigned)o->parallel);
    /* data-parallel attention needs the MoE exchange (with CP too: a rank's long prompt
     * then runs as a CP prefill over the group, forward.c) */
    if ((o->parallel & DSV4_PAR_DP) && !(o->parallel & DSV4_PAR_EP))
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: data-parallel attention (DSV4_PAR_DP) needs "
                         "expert parallelism (DSV4_PAR_EP)");
    if ((o->parallel & DSV4_PAR_DP_HEAD) && !(o->parallel & DSV4_PAR_DP))
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: the sharded DP head (DSV4_PAR_DP_HEAD) needs "
                         "data-parallel attention (DSV4_PAR_DP)");
    if (o->ep_wave < 0) return dsv4_fail(err, DSV4_ERR_ARG, "engine: ep_wave %d < 0", o->ep_wave);
    if (!o->parallel || !o->dist || dsv4_dist_size(o->dist) < 2) return DSV4_OK;
    e->group = o->dist;
    e->rank = dsv4_dist_rank(o->dist);
    e->dp = (o->parallel & DSV4_PAR_DP) != 0;
    e->dp_head = (o->parallel & DSV4_PAR_DP_HEAD) != 0;
    e->idle = e->rank != 0 && !e->dp;
    if (e->dp) {
        const size_t n = (size_t)dsv4_dist_size(o->dist) * DSV4_DP_SHARE_N;
        if (!(e->dp_share = calloc(n, sizeof(int32_t))) || dsv4_engine_own(e, e->dp_share)) {
            free(e->dp_share);
            e->dp_share = NULL;
            return dsv4_fail(err, DSV4_ERR_NOMEM, "engine: out of memory for the DP agreement");
        }
    }
    if (!(o->parallel & DSV4_PAR_EP)) return DSV4_OK;
    /* the largest call: every sequence with a full span */
    int64_t rows = (int64_t)o->max_seqs * o->c_max;
    int wave = o->ep_wave ? o->ep_wave : (int)(rows < 256 ? rows : 256);
    return dsv4_ep_create(e->cfg, o->dist, wave, &e->ep, err);
}

int dsv4_engine_need_caches(const dsv4_engine *e, const char *what, dsv4_err *err) {
    /* a DP rank's CP prefills leave their whole caches on the home rank */
    if (!e->group || (!e->idle && (e->dp || !(e->opts.parallel & DSV4_PAR_CP)))) return DSV4_OK;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "%s: not on this rank (a follower of a group, or "
                     "context parallelism, holds no whole caches)", what);
}

void dsv4_engine_opts_resolve(dsv4_engine_opts *o) {
    if (o->max_context <= 0) o->max_context = 4096;
    if (o->max_seqs <= 0) o->max_seqs = 4;
    if (o->c_max <= 0) o->c_max = (int)(o->max_context < 2048 ? o->max_context : 2048);
    o->kv_dtype = dsv4_kv_dtype_resolve(o->kv_dtype);
    if (o->max_rows <= 0) {
        const int64_t all = (int64_t)o->max_seqs * o->c_max; /* every sequence a full span */
        o->max_rows = all < INT32_MAX ? (int)all : INT32_MAX;
    }
}

void dsv4_engine_cache_opts(const dsv4_engine_opts *o, dsv4_cache_opts *co) {
    memset(co, 0, sizeof *co);
    co->max_context = o->max_context;
    co->max_seqs = o->max_seqs;
    co->c_max = o->c_max;
    co->d_max = o->mtp ? 1 : 0;
    co->block = o->block;
    co->win_block = o->win_block;
    co->budget_bytes = o->cache_bytes;
    /* an unknown dtype gets codes the planner refuses (create names it first) */
    dsv4_err ignored;
    if (dsv4_kv_dtype_codes(o->kv_dtype, &co->row_bytes_per_value, &co->idx_bytes_per_value, &ignored))
        co->row_bytes_per_value = co->idx_bytes_per_value = -1;
    co->idx_fp4_lossless = (o->fidelity & DSV4_FID_F3) != 0; /* F3 rounds every key to FP4 */
}

typedef struct {
    dsv4_arena *arena;
    int parts;
} populate_job;

static void populate_part(void *arg, int i) {
    const populate_job *j = arg;
    dsv4_arena_populate(j->arena, i, j->parts);
}

static int engine_create_body(const dsv4_model *m, const dsv4_engine_opts *opts, dsv4_engine **out,
                              dsv4_err *err) {
    *out = NULL;
    const dsv4_config *c = &m->cfg;
    dsv4_engine *e = calloc(1, sizeof *e);
    if (!e) return dsv4_fail(err, DSV4_ERR_NOMEM, "engine: out of memory");
    e->model = m;
    e->cfg = c;
    if (opts) e->opts = *opts;
    dsv4_engine_opts *o = &e->opts;
    dsv4_engine_opts_resolve(o);
    /* In a group every step runs (or is skipped after a failure) on every rank until the
     * agreement at the end, so a rank that fails early still meets the others there. */
    const int grouped = o->parallel && o->dist && dsv4_dist_size(o->dist) > 1;
    int rc = DSV4_OK;
    if (o->mtp && c->num_nextn_predict_layers == 0)
        rc = dsv4_fail(err, DSV4_ERR_ARG, "MTP requested but the model has no MTP block "
                       "(num_nextn_predict_layers = 0)");
    int row_code, idx_code;
    if (!rc) rc = dsv4_kv_dtype_codes(o->kv_dtype, &row_code, &idx_code, err);
    if (!rc && idx_code == DSV4_ROW_FP4 && !(o->fidelity & DSV4_FID_F3))
        rc = dsv4_fail(err, DSV4_ERR_ARG,
                       "kv dtype %s: FP4 indexer keys need fidelity item F3 (--fidelity F3 or official), "
                       "which rounds every key to FP4 values; without it they would change the results",
                       dsv4_kv_dtype_name(o->kv_dtype));
    if (!rc && idx_code == DSV4_ROW_FP4 && c->index_head_dim > DSV4_IDX_FP4_RUN_FLOATS)
        rc = dsv4_fail(err, DSV4_ERR_ARG,
                       "kv dtype %s: FP4 indexer keys of index_head_dim %d; the score kernels unpack at most %d "
                       "values a key", dsv4_kv_dtype_name(o->kv_dtype), c->index_head_dim, DSV4_IDX_FP4_RUN_FLOATS);
    if (!rc) rc = setup_parallel(e, err);
    dsv4_cache_opts co;
    dsv4_engine_cache_opts(o, &co);
    dsv4_cache_plan plan;
    if (!rc) rc = dsv4_cache_plan_make(c, &co, &plan, err);
    if (!rc) rc = dsv4_cache_create(&plan, &e->cache, err);
    if (!rc) rc = dsv4_prefix_create(e, err);

    const int64_t n_pos = o->max_context + co.d_max + 1;
    if (!rc) rc = dsv4_rope_init(&e->rope_main, c, 0, n_pos, err);
    if (!rc) rc = dsv4_rope_init(&e->rope_cmp, c, 1, n_pos, err);

    int64_t max_cols = max64(c->hidden_size, c->q_lora_rank);
    max_cols = max64(max_cols, (int64_t)c->num_attention_heads * c->head_dim / c->o_groups);
    max_cols = max64(max_cols, (int64_t)c->o_groups * c->o_lora_rank);
    max_cols = max64(max_cols, c->moe_intermediate_size);
    /* a whole (hc, D) stream row: no matrix reads one today (hc runs its own dots, and
     * hc_post now works in place), but the bound costs hc * D floats per thread and keeps
     * any stream-wide matrix safe */
    max_cols = max64(max_cols, (int64_t)c->hc_mult * c->hidden_size);
    /* the workers inherit the memory policy of the thread that starts them */
    char numa_saved[DSV4_NUMA_SAVED_BYTES];
    int numa_restore = 0;
    if (!rc) rc = dsv4_engine_numa_begin(e, numa_saved, &numa_restore, err);
    if (!rc) rc = dsv4_kctx_create(o->threads, max_cols, &e->k, err);
    dsv4_engine_numa_end(numa_saved, numa_restore);
    if (!rc && o->reference) dsv4_kctx_set_simd(e->k, DSV4_SIMD_SCALAR);
    if (!rc && o->pin_threads) rc = dsv4_kctx_pin(e->k, err);

    const int n_blocks = c->num_hidden_layers + c->num_nextn_predict_layers;
    if (!rc) {
        e->blocks = calloc((size_t)n_blocks, sizeof *e->blocks);
        e->seqs = calloc((size_t)o->max_seqs, sizeof *e->seqs);
        if (!e->blocks || !e->seqs) rc = dsv4_fail(err, DSV4_ERR_NOMEM, "engine: out of memory");
    }
    for (int l = 0; l < n_blocks && !rc; l++) {
        e->blocks[l] = l < c->num_hidden_layers ? m->layers[l] : m->mtp[l - c->num_hidden_layers];
        rc = prepare_wo_a(e, &e->blocks[l], err);
    }
    if (!rc) prepare_route_tab(e, n_blocks);
    /* the numeric path: exact unless an option asks for P2 or P3 (each prepares the
     * weights its way) */
    e->num = dsv4_numerics_exact();
    if (!rc) rc = dsv4_engine_prepare_w8a8(e, err);
    /* after W8A8 (its INT8 copies need no repack), before fidelity (which knows the weights
     * by their storage) */
    if (!rc) rc = dsv4_engine_prepare_fp4(e, err);
    if (!rc) rc = dsv4_engine_prepare_fidelity(e, err);
    if (!rc) e->moe_checked = moe_experts_ok(e, n_blocks);
    /* scratch_resident: resident from here on, in huge pages (a forward that first-touched it
     * paid a fault a 4 KB page, util/arena.h), written in parts of up to 32 MB on every thread:
     * 1.6 GB of memory the host had not yet backed took 1.5 s on one thread of a 2-vCPU VM,
     * 0.8 s on two. Else lazy 4 KB pages: only what calls touch becomes resident. */
    if (!rc)
        rc = (o->scratch_resident ? dsv4_arena_init_huge : dsv4_arena_init)(&e->scratch, dsv4_engine_scratch_bytes(e), err);
    if (!rc && o->scratch_resident) {
        populate_job j = {&e->scratch, (int)(e->scratch.cap / ((size_t)32 << 20)) + 1};
        dsv4_engine_for_each(e, j.parts, populate_part, &j);
    }
    if (!rc && grouped && !(e->call_hash = dsv4_sha256_new(err))) rc = DSV4_ERR_NOMEM;
    if (grouped) {
        struct dsv4_dist *own = e->group;
        e->group = o->dist; /* also when setup_parallel refused: the others are waiting */
        rc = dsv4_engine_agree_create(e, rc, err);
        e->group = own;
    }
    if (rc) {
        dsv4_engine_free(e);
        return rc;
    }
    *out = e;
    return DSV4_OK;
}

/* under the default MXCSR too: create computes tables (RoPE, decode tables) the forwards use */
int dsv4_engine_create(const dsv4_model *m, const dsv4_engine_opts *opts, dsv4_engine **out,
                       dsv4_err *err) {
    const dsv4_fpenv f = dsv4_fpenv_enter(); /* util/fpenv.h */
    const int rc = engine_create_body(m, opts, out, err);
    dsv4_fpenv_leave(f);
    return rc;
}

void dsv4_engine_free(dsv4_engine *e) {
    if (!e) return;
    dsv4_prefix_destroy(e);
    dsv4_cache_free(e->cache);
    dsv4_rope_free(&e->rope_main);
    dsv4_rope_free(&e->rope_cmp);
    dsv4_kctx_free(e->k);
    dsv4_numerics_free(e->num_owned);
    dsv4_ep_free(e->ep);
    dsv4_arena_free(&e->scratch);
    dsv4_sha256_free(e->call_hash);
    free(e->trace_gather);
    for (int i = 0; i < e->n_owned; i++) free(e->owned[i]);
    free(e->owned);
    free(e->blocks);
    free(e->seqs);
    free(e);
}

dsv4_engine_opts dsv4_engine_get_opts(const dsv4_engine *e) { return e->opts; }
const dsv4_model *dsv4_engine_model(const dsv4_engine *e) { return e->model; }

void dsv4_engine_set_trace(dsv4_engine *e, dsv4_trace_fn fn, void *user) {
    e->trace = fn;
    e->trace_user = user;
    const int cp_home = e->group && (e->opts.parallel & DSV4_PAR_CP) && (e->group->rank == 0 || e->dp);
    if (fn && cp_home && !e->trace_gather) /* NULL: a traced CP prefill fails out of memory */
        e->trace_gather = malloc((size_t)e->opts.max_rows * e->cfg->hc_mult * e->cfg->hidden_size * sizeof(float));
    if (!fn) {
        free(e->trace_gather);
        e->trace_gather = NULL;
    }
}

void dsv4_engine_set_choice_trace(dsv4_engine *e, dsv4_choice_fn fn, void *user) {
    e->choice = fn;
    e->choice_user = user;
}

int dsv4_seq_create(dsv4_engine *e, int *seq, dsv4_err *err) {
    int rc = dsv4_cache_seq_alloc(e->cache, seq, err);
    if (rc) return rc;
    e->seqs[*seq] = (dsv4_seq_state){.live = 1, .n = 0, .m = 0};
    return DSV4_OK;
}

int dsv4_seq_free(dsv4_engine *e, int seq, dsv4_err *err) {
    if (seq < 0 || seq >= e->opts.max_seqs || !e->seqs[seq].live)
        return dsv4_fail(err, DSV4_ERR_ARG, "sequence %d is not live", seq);
    int rc = dsv4_cache_seq_release(e->cache, seq, err);
    if (rc) return rc;
    e->seqs[seq].live = 0;
    return DSV4_OK;
}

int64_t dsv4_seq_length(const dsv4_engine *e, int seq) {
    if (seq < 0 || seq >= e->opts.max_seqs || !e->seqs[seq].live) return -1;
    return e->seqs[seq].n;
}

int64_t dsv4_engine_cp_prefills(const dsv4_engine *e) { return e->cp_prefills; }

dsv4_indexer_stats dsv4_engine_indexer_stats(const dsv4_engine *e) {
    return (dsv4_indexer_stats){e->idx_paths[DSV4_IDX_PATH_EXACT], e->idx_paths[DSV4_IDX_PATH_F32],
                                e->idx_paths[DSV4_IDX_PATH_INT], e->idx_paths[DSV4_IDX_PATH_UNPACK]};
}

dsv4_cache_stats dsv4_engine_cache_stats(const dsv4_engine *e) {
    dsv4_cache_usage u = dsv4_cache_get_usage(e->cache);
    return (dsv4_cache_stats){u.win_used, u.win_total, u.blk_used, u.blk_total, u.slots_used,
                              u.slots_total};
}

typedef struct {
    void (*fn)(void *arg, int i);
    void *arg;
} for_each_job;

static void for_each_task(void *arg, int t, int tid) {
    (void)tid;
    const for_each_job *j = arg;
    j->fn(j->arg, t);
}

void dsv4_engine_for_each(dsv4_engine *e, int n, void (*fn)(void *arg, int i), void *arg) {
    if (n <= 0) return;
    for_each_job j = {fn, arg};
    dsv4_kctx_parallel(e->k, n, for_each_task, &j);
}

int64_t dsv4_seq_mtp_length(const dsv4_engine *e, int seq) {
    if (seq < 0 || seq >= e->opts.max_seqs || !e->seqs[seq].live) return -1;
    return e->seqs[seq].m;
}

int dsv4_seq_commit(dsv4_engine *e, int seq, int k, dsv4_err *err) {
    if (seq < 0 || seq >= e->opts.max_seqs || !e->seqs[seq].live)
        return dsv4_fail(err, DSV4_ERR_ARG, "commit: sequence %d is not live", seq);
    dsv4_seq_state *s = &e->seqs[seq];
    if (!s->pending)
        return dsv4_fail(err, DSV4_ERR_STATE, "commit: sequence %d has no speculative span", seq);
    if (k < 1 || k > s->pending)
        return dsv4_fail(err, DSV4_ERR_ARG, "commit: k = %d outside [1, %d] (the span's rows)", k,
                         s->pending);
    s->n += k;
    s->pending = 0;
    /* pages only the rejected rows used go back: tables as if they had never run */
    dsv4_cache_truncate(e->cache, seq, s->n);
    dsv4_engine_trim(e, seq);
    return DSV4_OK;
}

int dsv4_seq_mtp_off(dsv4_engine *e, int seq, dsv4_err *err) {
    if (seq < 0 || seq >= e->opts.max_seqs || !e->seqs[seq].live)
        return dsv4_fail(err, DSV4_ERR_ARG, "mtp_off: sequence %d is not live", seq);
    e->seqs[seq].mtp_off = 1;
    if (!e->seqs[seq].pending) dsv4_engine_trim(e, seq);
    return DSV4_OK;
}

int dsv4_seq_pending(const dsv4_engine *e, int seq) {
    if (seq < 0 || seq >= e->opts.max_seqs || !e->seqs[seq].live) return -1;
    return e->seqs[seq].pending;
}

void dsv4_engine_unreserve(dsv4_engine *e, const int *seqs, int n) {
    for (int i = 0; i < n; i++) dsv4_cache_truncate(e->cache, seqs[i], e->seqs[seqs[i]].n);
}

void dsv4_engine_trim(dsv4_engine *e, int seq) {
    const dsv4_seq_state *s = &e->seqs[seq];
    /* with MTP the MTP block's window (positions < m) lags the main one by up to a row */
    int64_t keep = e->opts.mtp && !s->mtp_off && s->m < s->n ? s->m : s->n;
    dsv4_cache_trim(e->cache, seq, keep);
}

static int lm_head_body(dsv4_engine *e, const float *hidden, int n_rows, float *logits, dsv4_err *err) {
    if (n_rows < 0 || (n_rows > 0 && (!hidden || !logits)))
        return dsv4_fail(err, DSV4_ERR_ARG, "lm_head: bad arguments (n_rows = %d)", n_rows);
    return dsv4_lmhead_local(e->k, &e->scratch, &e->model->head, hidden, n_rows, logits, err);
}

int dsv4_lm_head(dsv4_engine *e, const float *hidden, int n_rows, float *logits, dsv4_err *err) {
    const dsv4_fpenv f = dsv4_fpenv_enter(); /* util/fpenv.h */
    const int rc = lm_head_body(e, hidden, n_rows, logits, err);
    dsv4_fpenv_leave(f);
    return rc;
}
