/* fp4_layout.c — the FP4 layout option (dsv4.h DSV4_FP4_*): its names, and at engine create
 * the copy of the blocks' packed FP4 matrices into the engine's huge-page memory (COPY: the
 * natural bytes) or their repack into the lanes layout (LANES, kernels/fp4_lanes.h); the
 * default (AUTO) makes the copy when the memory allows it (dsv4_fp4_auto_layout), and reads
 * the mapped bytes (NATURAL) otherwise.
 *
 * Why the copy is the default. Session 26 alternated the two on odd and even forwards of one
 * process (BENCHMARKS.md "Session 26, lead"): the mapped experts' step took 1.9 % (batch 1),
 * 4.3 % (batch 16) and 1.5 % (prefill 512) longer than the copy's, against a parity bias of
 * -1.9 / +1.7 / -0.8 % with no change; every run beside every A/A run. The 4 KB pages of the
 * page cache cost a TLB walk every 4 KB and stop the hardware prefetchers at each page end;
 * the copy's 2 MB pages do neither.
 *
 * Where the copies live. The model is immutable and shared by engines (dsv4.h), and the
 * layout is an engine option, so the repacked bytes are the engine's: one allocation per
 * block on e->owned (its expert arrays, then each repacked matrix), freed with the engine, as
 * the W8A8 copies are (w8a8_prep.c). The alternative, repacking in place in the model's
 * private mapping (copy-on-write pages), would change the model under every other engine and
 * the bytes the weights fingerprint samples; a copy leaves the model, the fingerprint and
 * every persisted cache (keyed by it) as they are, and costs the same private memory (a
 * copy-on-write page is a private page too). The scales are not moved: both layouts share
 * them. The mapped file pages, read once here, stay clean page cache the system may drop.
 *
 * Pages: a block's allocation is 2 MB aligned and asks for transparent huge pages
 * (MADV_HUGEPAGE; where the system allows it): the repack's first touch of fresh memory
 * dominates its time (on the session-25 VM 512 MB took 1.86 s on 4 KB pages, 1.25 s on 2 MB
 * pages, 0.30 s once mapped: the pack itself runs at ~1.8 GB/s a thread), and the GEMVs then
 * stream the experts with fewer TLB misses than the file's 4 KB page-cache pages give.
 *
 * NUMA: with opts.numa interleaving (resolved before this runs), each block's allocation is
 * interleaved over the nodes (mbind) before the repack first writes its pages, so the copies
 * are spread as the mapped weights are.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache/cache.h"
#include "dist/ep.h"
#include "engine/engine.h"
#include "kernels/fp4_lanes.h"
#include "util/err.h"
#include "util/machine.h"
#include "util/numa.h"

int dsv4_fp4_layout_parse(const char *s, int *layout, dsv4_err *err) {
    static const struct { const char *name; int v; } names[] = {
        {"auto", DSV4_FP4_AUTO}, {"natural", DSV4_FP4_NATURAL}, {"copy", DSV4_FP4_COPY}, {"lanes", DSV4_FP4_LANES}};
    for (size_t i = 0; s && i < sizeof names / sizeof *names; i++)
        if (!strcmp(s, names[i].name)) {
            *layout = names[i].v;
            return DSV4_OK;
        }
    return dsv4_fail(err, DSV4_ERR_ARG, "fp4 layout '%s': must be auto, natural, copy or lanes", s ? s : "(null)");
}

const char *dsv4_fp4_layout_name(int layout) {
    switch (layout) {
    case DSV4_FP4_AUTO: return "auto";
    case DSV4_FP4_NATURAL: return "natural";
    case DSV4_FP4_COPY: return "copy";
    case DSV4_FP4_LANES: return "lanes";
    default: return "?";
    }
}

void dsv4_engine_fp4_counts(const dsv4_engine *e, int64_t *lanes, int64_t *natural) {
    if (lanes) *lanes = e ? e->fp4_lanes : 0;
    if (natural) *natural = e ? e->fp4_natural : 0;
}

static int64_t round64(int64_t v) { return (v + 63) & ~(int64_t)63; }

static int is_fp4(const dsv4_mat *m) { return m->fmt == DSV4_WF_FP4 && m->w && m->rows > 0; }
/* FP4 that the lanes layout can hold: whole 128-column lines */
static int lanes_ok(const dsv4_mat *m) { return is_fp4(m) && m->cols % DSV4_FP4L_COLS == 0; }
/* what the layout moves into the engine's memory: LANES the matrices it can hold, COPY every one */
static int moved(int layout, const dsv4_mat *m) { return layout == DSV4_FP4_COPY ? is_fp4(m) : lanes_ok(m); }

/* the block's matrices other than the routed experts (out has room for 16) */
static int fixed_mats(dsv4_block_w *b, dsv4_mat **out) {
    dsv4_mat *all[] = {&b->wq_a,  &b->wq_b,        &b->wkv,         &b->wo_a,      &b->wo_b,       &b->cmp.wkv,
                       &b->cmp.wgate, &b->idx_wq_b, &b->idx_weights_proj, &b->idx_cmp.wkv, &b->idx_cmp.wgate, &b->gate,
                       &b->sh_w1, &b->sh_w3,       &b->sh_w2,       &b->e_proj,    &b->h_proj};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (is_fp4(all[i])) out[n++] = all[i];
    return n;
}

static int has_experts(const dsv4_engine *e, const dsv4_block_w *b) {
    return b->w1 && b->w2 && b->w3 && e->cfg->n_routed_experts > 0;
}

/* one matrix to repack: src (natural rows) into dst, then m rebound */
typedef struct {
    dsv4_mat *m;
    uint8_t *dst; /* (rows, cols / 2) */
} repack_item;

typedef struct {
    repack_item *items;
    int lanes; /* 1: pack into the lanes layout; 0: copy the natural bytes */
} repack_job;

static void repack_task(void *arg, int t, int tid) {
    (void)tid;
    const repack_job *j = arg;
    const repack_item *it = &j->items[t];
    const int64_t rb = it->m->cols / 2; /* bytes a row */
    const uint8_t *src = it->m->w;
    if (!j->lanes) {
        memcpy(it->dst, src, (size_t)(it->m->rows * rb));
        return;
    }
    for (int64_t r = 0; r < it->m->rows; r++) dsv4_fp4l_pack_row(it->dst + r * rb, src + r * rb, it->m->cols);
}

static int prepare_block(dsv4_engine *e, dsv4_block_w *b, int layout, int e0, int e1, dsv4_err *err) {
    const int E = e->cfg->n_routed_experts;
    dsv4_mat *fixed[32];
    const int n_fixed = fixed_mats(b, fixed);
    const int experts = has_experts(e, b);
    /* what this block repacks, and what stays natural */
    int64_t n_items = 0, bytes = 0, n_exp = 0;
    for (int i = 0; i < n_fixed; i++) {
        if (moved(layout, fixed[i])) n_items++, bytes += round64(fixed[i]->rows * fixed[i]->cols / 2);
        else e->fp4_natural++;
    }
    for (int x = 0; experts && x < E; x++) {
        const dsv4_mat *ms[3] = {&b->w1[x], &b->w3[x], &b->w2[x]};
        for (int j = 0; j < 3; j++) {
            if (!is_fp4(ms[j])) continue;
            if (x >= e0 && x < e1 && moved(layout, ms[j])) n_exp++, bytes += round64(ms[j]->rows * ms[j]->cols / 2);
            else e->fp4_natural++;
        }
    }
    n_items += n_exp;
    if (n_items == 0) return DSV4_OK;
    /* the expert arrays become the engine's own (they are the model's, or W8A8's) */
    const int64_t arr_bytes = n_exp ? round64(3 * (int64_t)E * (int64_t)sizeof(dsv4_mat)) : 0;
    const int64_t huge = 2 << 20;
    bytes = (bytes + arr_bytes + huge - 1) / huge * huge; /* whole huge pages (aligned_alloc's size rule) */
    uint8_t *mem = aligned_alloc((size_t)huge, (size_t)bytes);
    repack_item *items = malloc(sizeof *items * (size_t)n_items);
    if (!mem || !items || dsv4_engine_own(e, mem)) {
        free(mem);
        free(items);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "fp4 layout %s: out of memory for %lld bytes of layer %d's FP4 "
                         "weights", dsv4_fp4_layout_name(layout), (long long)bytes, b->layer_id);
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(mem, (size_t)bytes, MADV_HUGEPAGE); /* a hint: 4 KB pages work too */
#endif
    if (e->opts.numa == DSV4_NUMA_INTERLEAVE) {
        const int rc = dsv4_numa_interleave_range(mem, (size_t)bytes, err);
        if (rc) {
            free(items);
            return rc;
        }
    }
    int64_t at = arr_bytes, n = 0;
    if (n_exp) {
        dsv4_engine_own_expert_arrays(b, mem, E); /* arr_bytes, laid out above */
        for (int x = e0; x < e1; x++) {
            dsv4_mat *ms[3] = {&b->w1[x], &b->w3[x], &b->w2[x]};
            for (int j = 0; j < 3; j++)
                if (moved(layout, ms[j])) {
                    items[n++] = (repack_item){ms[j], mem + at};
                    at += round64(ms[j]->rows * ms[j]->cols / 2);
                }
        }
    }
    for (int i = 0; i < n_fixed; i++)
        if (moved(layout, fixed[i])) {
            items[n++] = (repack_item){fixed[i], mem + at};
            at += round64(fixed[i]->rows * fixed[i]->cols / 2);
        }
    repack_job job = {items, layout == DSV4_FP4_LANES};
    dsv4_kctx_parallel(e->k, (int)n, repack_task, &job);
    for (int64_t i = 0; i < n; i++) {
        items[i].m->w = items[i].dst;
        items[i].m->fmt = layout == DSV4_FP4_LANES ? DSV4_WF_FP4L : DSV4_WF_FP4;
    }
    if (layout == DSV4_FP4_LANES) e->fp4_lanes += n;
    else e->fp4_natural += n;
    free(items);
    return DSV4_OK;
}

int dsv4_fp4_auto_layout(int64_t copy_bytes, int64_t other_bytes, uint64_t available, uint64_t ram,
                         uint64_t locked) {
    /* a process that pins memory pins the mapped weights (--mlock): a copy would hold both */
    if (locked > 0 || copy_bytes <= 0 || available == 0) return DSV4_FP4_NATURAL;
    /* the headroom of the fit check (fit.c): 5 % of the machine, at least 1 GiB */
    const uint64_t gib = 1ull << 30, headroom = ram / 20 > gib ? ram / 20 : gib;
    /* The copy is private memory the system cannot drop, and the cache and scratch, allocated
     * but not yet touched, are not in `available` yet; the mapped pages the copy reads from
     * are (clean page cache). A model larger than memory, read through the page cache, stays
     * natural. */
    const uint64_t need = (uint64_t)copy_bytes + (uint64_t)(other_bytes > 0 ? other_bytes : 0) + headroom;
    return need <= available ? DSV4_FP4_COPY : DSV4_FP4_NATURAL;
}

/* Bytes COPY would move into the engine's memory (the FP4 matrices of every block, the routed
 * experts of this rank's range). */
static int64_t copy_bytes(const dsv4_engine *e, int n_blocks, int e0, int e1) {
    int64_t bytes = 0;
    for (int l = 0; l < n_blocks; l++) {
        dsv4_block_w *b = &e->blocks[l];
        dsv4_mat *fixed[32];
        const int n_fixed = fixed_mats(b, fixed);
        for (int i = 0; i < n_fixed; i++) bytes += round64(fixed[i]->rows * fixed[i]->cols / 2);
        for (int x = e0; has_experts(e, b) && x < e1; x++) {
            const dsv4_mat *ms[3] = {&b->w1[x], &b->w3[x], &b->w2[x]};
            for (int j = 0; j < 3; j++)
                if (is_fp4(ms[j])) bytes += round64(ms[j]->rows * ms[j]->cols / 2);
        }
    }
    return bytes;
}

int dsv4_engine_prepare_fp4(dsv4_engine *e, dsv4_err *err) {
    int *layout = &e->opts.fp4_layout;
    if (*layout != DSV4_FP4_AUTO && *layout != DSV4_FP4_NATURAL && *layout != DSV4_FP4_COPY && *layout != DSV4_FP4_LANES)
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: fp4_layout = %d; must be DSV4_FP4_AUTO, _NATURAL, _COPY or _LANES",
                         *layout);
    const dsv4_config *c = e->cfg;
    const int n_blocks = c->num_hidden_layers + c->num_nextn_predict_layers;
    int e0 = 0, e1 = c->n_routed_experts;
    if (e->ep) dsv4_ep_local_range(e->ep, &e0, &e1);
    /* AUTO: COPY when the memory allows it (see the top of this file for why); LANES stays an
     * option (session 25: its decode saves ~4.5 % of the one-row GEMV in process, no more
     * than COPY in step, and costs prefill ~4 %) */
    if (*layout == DSV4_FP4_AUTO) {
        const int64_t other = dsv4_cache_get_plan(e->cache)->total_bytes + (int64_t)dsv4_engine_scratch_bytes(e);
        *layout = dsv4_fp4_auto_layout(copy_bytes(e, n_blocks, e0, e1), other, dsv4_machine_available_bytes(),
                                       dsv4_machine_ram_bytes(), dsv4_process_locked_bytes());
    }
    e->fp4_lanes = e->fp4_natural = 0;
    if (*layout == DSV4_FP4_NATURAL) {
        for (int l = 0; l < n_blocks; l++) {
            dsv4_block_w *b = &e->blocks[l];
            dsv4_mat *fixed[32];
            e->fp4_natural += fixed_mats(b, fixed);
            for (int x = 0; has_experts(e, b) && x < c->n_routed_experts; x++)
                e->fp4_natural += is_fp4(&b->w1[x]) + is_fp4(&b->w3[x]) + is_fp4(&b->w2[x]);
        }
        return DSV4_OK;
    }
    for (int l = 0; l < n_blocks; l++) {
        const int rc = prepare_block(e, &e->blocks[l], *layout, e0, e1, err);
        if (rc) return rc;
    }
    return DSV4_OK;
}
