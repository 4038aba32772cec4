/* w8a8_prep.c — the engine's INT8 copies for P2 W8A8 (spec/serving.md §f).
 *
 * e->blocks[l] are shallow copies of the model's blocks, so a converted matrix just
 * replaces the dsv4_mat there; the routed experts are arrays shared with the model, so the
 * engine gives each converted block its own w1/w2/w3 arrays. All of one block's storage
 * (INT8 rows, scales, expert arrays) is one allocation on e->owned, so the prep adds one
 * entry per block however many experts there are. Rows are quantized on the engine's
 * threads (the real model's routed experts are most of its weights).
 */
#include "engine/w8a8_prep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/ep.h"
#include "kernels/w8a8.h"
#include "util/err.h"

typedef struct {
    dsv4_mat *m;       /* in e->blocks[l] (or its expert arrays): replaced in place */
    char name[96];     /* official tensor name, for messages */
} conv_item;

static int64_t round64(int64_t v) { return (v + 63) & ~(int64_t)63; }

static int present(const dsv4_mat *m) { return m->fmt != DSV4_WF_NONE && m->w && m->rows > 0; }

/* adds m to the list when present (items has room: the caller counted) */
static void add(conv_item *items, int *n, dsv4_mat *m, const char *prefix, const char *name) {
    if (!present(m)) return;
    items[*n].m = m;
    snprintf(items[*n].name, sizeof items[*n].name, "%s.%s", prefix, name);
    (*n)++;
}

/* Progress over the whole preparation: INT8 bytes written of all blocks'. */
typedef struct prep_progress {
    dsv4_progress_fn fn;
    void *user;
    uint64_t done, total;
} prep_progress;

static void block_prefix(const dsv4_config *c, const dsv4_block_w *b, char *prefix, size_t n) {
    if (b->layer_id >= c->num_hidden_layers) snprintf(prefix, n, "mtp.%d", b->layer_id - c->num_hidden_layers);
    else snprintf(prefix, n, "layers.%d", b->layer_id);
}

/* The block's matrices other than routed experts that the level converts; items has room
 * for 12. Returns their count. */
static int collect_fixed(const dsv4_engine *e, dsv4_block_w *b, const char *prefix, conv_item *items) {
    int n = 0;
    add(items, &n, &b->wq_b, prefix, "attn.wq_b");
    add(items, &n, &b->wo_b, prefix, "attn.wo_b");
    add(items, &n, &b->idx_wq_b, prefix, "attn.indexer.wq_b");
    add(items, &n, &b->sh_w1, prefix, "ffn.shared_experts.w1");
    add(items, &n, &b->sh_w3, prefix, "ffn.shared_experts.w3");
    add(items, &n, &b->sh_w2, prefix, "ffn.shared_experts.w2");
    if (b->layer_id >= e->cfg->num_hidden_layers) {
        add(items, &n, &b->e_proj, prefix, "e_proj");
        add(items, &n, &b->h_proj, prefix, "h_proj");
    }
    if (e->opts.w8a8 >= 2) {
        add(items, &n, &b->wq_a, prefix, "attn.wq_a");
        add(items, &n, &b->wkv, prefix, "attn.wkv");
        add(items, &n, &b->wo_a, prefix, "attn.wo_a");
    }
    return n;
}

static int has_experts(const dsv4_engine *e, const dsv4_block_w *b) {
    return b->w1 && b->w2 && b->w3 && e->cfg->n_routed_experts > 0;
}

/* Bytes of the block's one allocation: expert arrays (3 x E mats), then each converted
 * matrix's INT8 storage (the fixed ones, then experts [e0, e1)). */
static int64_t block_bytes(const dsv4_engine *e, const dsv4_block_w *b, const conv_item *fixed, int n_fixed,
                           int e0, int e1) {
    const int E = e->cfg->n_routed_experts;
    int64_t bytes = has_experts(e, b) ? round64(3 * (int64_t)E * (int64_t)sizeof(dsv4_mat)) : 0;
    for (int i = 0; i < n_fixed; i++) bytes += round64(dsv4_w8a8_storage_bytes(fixed[i].m->rows, fixed[i].m->cols));
    if (has_experts(e, b))
        for (int x = e0; x < e1; x++) {
            if (present(&b->w1[x])) bytes += round64(dsv4_w8a8_storage_bytes(b->w1[x].rows, b->w1[x].cols));
            if (present(&b->w3[x])) bytes += round64(dsv4_w8a8_storage_bytes(b->w3[x].rows, b->w3[x].cols));
            if (present(&b->w2[x])) bytes += round64(dsv4_w8a8_storage_bytes(b->w2[x].rows, b->w2[x].cols));
        }
    return bytes;
}

static int prepare_block(dsv4_engine *e, dsv4_block_w *b, int e0, int e1, prep_progress *pp, dsv4_err *err) {
    const dsv4_config *c = e->cfg;
    const int E = c->n_routed_experts;
    char prefix[32];
    block_prefix(c, b, prefix, sizeof prefix);

    /* the block's expert arrays become the engine's own (filled below, before any pointer
     * into them is taken) */
    const int experts = has_experts(e, b);
    const int64_t n_max = 12 + (experts ? 3 * (int64_t)(e1 - e0) : 0);
    conv_item *items = malloc(sizeof *items * (size_t)n_max);
    if (!items) return dsv4_fail(err, DSV4_ERR_NOMEM, "w8a8 %s: out of memory", prefix);
    const int n_fixed = collect_fixed(e, b, prefix, items);
    int n = n_fixed;

    const int64_t bytes = block_bytes(e, b, items, n_fixed, e0, e1);
    char *mem = bytes > 0 ? aligned_alloc(64, (size_t)bytes) : NULL;
    if (bytes > 0 && (!mem || dsv4_engine_own(e, mem))) {
        free(mem);
        free(items);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "w8a8 %s: out of memory for %lld bytes of INT8 weights",
                         prefix, (long long)bytes);
    }
    int64_t at = 0;
    if (experts) {
        at = dsv4_engine_own_expert_arrays(b, mem, E);
        for (int x = e0; x < e1; x++) {
            char nm[48];
            snprintf(nm, sizeof nm, "ffn.experts.%d.w1", x);
            add(items, &n, &b->w1[x], prefix, nm);
            snprintf(nm, sizeof nm, "ffn.experts.%d.w3", x);
            add(items, &n, &b->w3[x], prefix, nm);
            snprintf(nm, sizeof nm, "ffn.experts.%d.w2", x);
            add(items, &n, &b->w2[x], prefix, nm);
        }
    }
    pp->done += (uint64_t)at;
    int rc = DSV4_OK;
    for (int i = 0; i < n && !rc; i++) {
        dsv4_mat *m = items[i].m;
        dsv4_mat q;
        const int64_t sz = round64(dsv4_w8a8_storage_bytes(m->rows, m->cols));
        if ((rc = dsv4_w8a8_quantize_weights(e->k, m, mem + at, &q, err)))
            dsv4_err_prefix(err, "%s", items[i].name);
        else
            *m = q;
        at += sz;
        pp->done += (uint64_t)sz;
        /* every 64 matrices (a Flash block has 768 experts' matrices) and at the block's end */
        if (pp->fn && !rc && ((i + 1) % 64 == 0 || i + 1 == n)) pp->fn(pp->user, pp->done, pp->total);
    }
    free(items);
    return rc;
}

int dsv4_engine_prepare_w8a8(dsv4_engine *e, dsv4_err *err) {
    const int level = e->opts.w8a8;
    if (level == 0) return DSV4_OK;
    if (level < 0 || level > 2)
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: w8a8 %d (0 = off, 1 = P2 matrices, 2 = also "
                         "wq_a, wkv, wo_a)", level);
    const dsv4_config *c = e->cfg;
    int e0 = 0, e1 = c->n_routed_experts;
    if (e->ep) dsv4_ep_local_range(e->ep, &e0, &e1);
    int rc = dsv4_kctx_reserve_w8a8(e->k, err); /* the forward's INT8 activations */
    if (rc) return rc;
    const int n_blocks = c->num_hidden_layers + c->num_nextn_predict_layers;
    prep_progress pp = {.fn = e->opts.progress, .user = e->opts.progress_user};
    for (int l = 0; pp.fn && l < n_blocks; l++) {
        conv_item fixed[12];
        char prefix[32];
        block_prefix(c, &e->blocks[l], prefix, sizeof prefix);
        const int n_fixed = collect_fixed(e, &e->blocks[l], prefix, fixed);
        pp.total += (uint64_t)block_bytes(e, &e->blocks[l], fixed, n_fixed, e0, e1);
    }
    if (pp.fn) pp.fn(pp.user, 0, pp.total);
    for (int l = 0; l < n_blocks; l++)
        if ((rc = prepare_block(e, &e->blocks[l], e0, e1, &pp, err))) return rc;
    e->num = dsv4_numerics_w8a8(); /* the INT8 matrices' products quantize their inputs */
    return DSV4_OK;
}
