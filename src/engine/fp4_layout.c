/* fp4_layout.c — the weights' layout option (dsv4.h DSV4_FP4_*; named for the FP4 experts,
 * which it first moved): its names, and at engine create the copy of every block's weights
 * into the engine's huge-page memory (COPY: the checkpoint's bytes; LANES: the same, with the
 * packed FP4 matrices repacked into the lanes layout, kernels/fp4_lanes.h). The default
 * (AUTO) makes the copy when the memory allows it (dsv4_fp4_auto_layout), in the lanes layout
 * where the kernel level is avx512vbmi or avx2 (dsv4_fp4_copy_layout), and reads the mapped bytes
 * (NATURAL) otherwise.
 *
 * What is copied: each block's weight matrices (the dense FP8 / BF16 / F32 ones, the routed
 * experts of this rank's range), their scales, and hc's two mixing matrices: every weight a
 * step reads in full. Not the embedding (a row a token), the norms and biases (a few KB), the
 * LM head (the model's, read by the serving side), nor W8A8's INT8 copies (already the
 * engine's).
 *
 * Why the copy is the default. Session 26 alternated mapped and copied weights on odd and
 * even forwards of one process (BENCHMARKS.md "Session 26, lead" and "x26"). The FP4 experts
 * alone: the mapped experts' forward took 1.9 % (batch 1), 4.3 % (batch 16) and 1.5 %
 * (prefill 512) longer than the copy's, against a parity bias of -1.9 / +1.7 / -0.8 % with no
 * change. Every other weight on top of that: the mapped forward took a further ~5-8 % at
 * batch 1 and ~1.5-2.5 % at batch 16 (two independent sets of runs; ranges apart from their
 * A/A runs). The page cache's 4 KB pages cost a TLB walk every 4 KB and stop the hardware
 * prefetchers at each page's end; the copy's 2 MB pages do neither.
 *
 * Why that copy is LANES on avx512vbmi. The lanes layout's decode (one shift and one vpermps a
 * 16 weights, the line's words in natural column order) gives the same bits as the natural
 * layout's on every path. Session 30 (BENCHMARKS.md, "Session 30, lanes" and "fp4k") made its
 * small-M blocks and one-row GEMV at least as fast as the natural ones on Zen 5: a 512-token
 * prefill's routed experts 0.96x the time in process, prefill pairs against COPY 1.016 (8 of
 * 12 above 1; paired fractions 1.027). And on avx2: there every FP4 kernel's lanes decode saves
 * the natural one's broadcast and variable shift per 8 weights (one 32-byte load a 64), and on
 * Zen 3 (session 50, flash_quarter, 2 threads, two alternated pairs of dsv4 bench, prompt 512,
 * 16 steps) LANES against COPY took 0.69-0.75x the prefill's time, 0.77-0.86x batch 1's step and
 * 0.75-0.91x batch 16's; a reviewer's one pair read 0.91x and 1.21x (batch 1 slower), and the
 * session's four gate pairs (with hc_post in AVX2 too) moved the medians by +7 % (prefill), +21 %
 * (batch 1) and +11 % (batch 16): ahead on balance, on a VM whose speed moves 1.6x between
 * processes. Level avx512 (no VBMI) was not measured on lanes, so the copy stays natural there.
 *
 * Why SHUFFLE at avx2 (session 51, f4b). The shuffle layout (kernels/fp4_shuf.h) lets the AVX2
 * kernels decode 32 weights with two vpshufb lookups in BF16 byte tables, ~13 shuffle/shift uops a
 * 64 weights where the lanes decode takes ~32 (linear_avx2.h). Zen 3, bench_linear, same binary,
 * alternated: the one-row GEMV hot in L2 on one thread 6.3-7.0 GB/s against lanes' 3.0-3.7; the
 * expert phase on 2 threads (--moe) 0.43-0.46 of the stream probe at batch 1 (lanes 0.31-0.32) and
 * 0.40 at batch 16 (lanes 0.28-0.29). Matrices it cannot hold (widths not a multiple of 64, F32
 * scales, a NaN scale byte) take the lanes layout (or stay natural) as under LANES.
 *
 * Where the copies live. The model is immutable and shared by engines (dsv4.h), and the
 * layout is an engine option, so the repacked bytes are the engine's: one allocation per
 * block on e->owned (its expert arrays, then each repacked matrix), freed with the engine, as
 * the W8A8 copies are (w8a8_prep.c). The alternative, repacking in place in the model's
 * private mapping (copy-on-write pages), would change the model under every other engine and
 * the bytes the weights fingerprint samples; a copy leaves the model, the fingerprint and
 * every persisted cache (keyed by it) as they are, and costs the same private memory (a
 * copy-on-write page is a private page too). The mapped file pages, read once here, stay
 * clean page cache the system may drop.
 *
 * Pages: a block's allocation is 2 MB aligned and asks for transparent huge pages
 * (MADV_HUGEPAGE; where the system allows it): the repack's first touch of fresh memory
 * dominates its time (on the session-25 VM 512 MB took 1.86 s on 4 KB pages, 1.25 s on 2 MB
 * pages, 0.30 s once mapped: the pack itself runs at ~1.8 GB/s a thread), and the GEMVs then
 * stream the experts with fewer TLB misses than the file's 4 KB page-cache pages give.
 *
 * FP8 matrices: the copy also finds each one's no-NaN flag (dsv4_mat.fp8_no_nan: no byte is an
 * e4m3 NaN code, so the one-row bit decode may skip its NaN scan), on the bytes it has just
 * read, in parallel. Open reads no weight byte (--no-warmup stays lazy), and mapped weights keep
 * the scan: found at open it cost a serial read of every FP8 byte (~6 GB on Flash) before the
 * parallel warm-up, with or without it (rv-idx8, session 48).
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
#include "kernels/cpu.h"
#include "kernels/fp4_lanes.h"
#include "kernels/fp4_shuf.h"
#include "kernels/linear.h"
#include "util/err.h"
#include "util/machine.h"
#include "util/numa.h"

int dsv4_fp4_layout_parse(const char *s, int *layout, dsv4_err *err) {
    static const struct { const char *name; int v; } names[] = {
        {"auto", DSV4_FP4_AUTO},   {"mapped", DSV4_FP4_NATURAL}, {"natural", DSV4_FP4_NATURAL} /* the old name */,
        {"copy", DSV4_FP4_COPY}, {"lanes", DSV4_FP4_LANES},  {"shuffle", DSV4_FP4_SHUFFLE}};
    for (size_t i = 0; s && i < sizeof names / sizeof *names; i++)
        if (!strcmp(s, names[i].name)) {
            *layout = names[i].v;
            return DSV4_OK;
        }
    return dsv4_fail(err, DSV4_ERR_ARG, "weights memory '%s': must be auto, mapped, copy, lanes or shuffle",
                     s ? s : "(null)");
}

const char *dsv4_fp4_layout_name(int layout) {
    switch (layout) {
    case DSV4_FP4_AUTO: return "auto";
    case DSV4_FP4_NATURAL: return "mapped";
    case DSV4_FP4_COPY: return "copy";
    case DSV4_FP4_LANES: return "lanes";
    case DSV4_FP4_SHUFFLE: return "shuffle";
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

/* FP4 that the shuffle layout can hold: whole 64-column chunks and ue8m0 scales every one of
 * which dsv4_fp4s_scale_ok (all but 255, the NaN scale: the bytes it refuses, found once, are
 * looked for with memchr, ~9 GB of scales in Flash) */
static int shuf_ok(const dsv4_mat *m) {
    if (!is_fp4(m) || m->cols % DSV4_FP4S_COLS || m->scale_is_f32 || !m->scale) return 0;
    const size_t n = (size_t)(m->rows * (m->cols / 32));
    for (int b = 0; b < 256; b++)
        if (!dsv4_fp4s_scale_ok((uint8_t)b) && memchr(m->scale, b, n)) return 0;
    return 1;
}

/* The block's weight matrices other than the routed experts; returns their count (out has
 * room for BLOCK_MATS). */
#define BLOCK_MATS 17
static int block_mats(dsv4_block_w *b, dsv4_mat **out) {
    dsv4_mat *all[BLOCK_MATS] = {&b->wq_a,  &b->wq_b,  &b->wkv,   &b->wo_a,   &b->wo_b,    &b->cmp.wkv,
                                 &b->cmp.wgate, &b->idx_wq_b, &b->idx_weights_proj, &b->idx_cmp.wkv,
                                 &b->idx_cmp.wgate, &b->gate, &b->sh_w1, &b->sh_w3, &b->sh_w2, &b->e_proj, &b->h_proj};
    memcpy(out, all, sizeof all);
    return BLOCK_MATS;
}

static int has_experts(const dsv4_engine *e, const dsv4_block_w *b) {
    return b->w1 && b->w2 && b->w3 && e->cfg->n_routed_experts > 0;
}

/* The block's packed FP4 matrices, routed experts included (every rank's). */
static int64_t block_fp4(const dsv4_engine *e, dsv4_block_w *b) {
    dsv4_mat *mats[BLOCK_MATS];
    int64_t n = 0;
    for (int i = block_mats(b, mats); i-- > 0;) n += is_fp4(mats[i]);
    for (int x = 0; has_experts(e, b) && x < e->cfg->n_routed_experts; x++)
        n += is_fp4(&b->w1[x]) + is_fp4(&b->w3[x]) + is_fp4(&b->w2[x]);
    return n;
}

/* The bytes of a matrix's weights and of its scales (dsv4_mat_bytes, split); 0, 0 for what the
 * copy leaves where it is (I8: W8A8's own copies; absent matrices). */
static void mat_parts(const dsv4_mat *m, int64_t *wb, int64_t *sb) {
    *wb = *sb = 0;
    if (!m->w || m->rows <= 0 || m->fmt == DSV4_WF_I8) return;
    *sb = m->scale ? dsv4_mat_scale_bytes(m) : 0;
    *wb = dsv4_mat_weight_bytes(m);
}

/* One piece of the engine's copy: n bytes from src into dst, then the pointer that read src
 * rebound to dst. A FP4 matrix's weights in the lanes layout are packed on the way (pack). */
typedef struct {
    const void *src;
    uint8_t *dst;
    int64_t n;
    const void **bind;   /* a matrix's w or scale */
    const float **bindf; /* or one of hc's mixing matrices */
    dsv4_mat *pack;      /* LANES, SHUFFLE: the FP4 matrix whose weights these are, else NULL */
    dsv4_wfmt pack_fmt;  /* ... and its layout: DSV4_WF_FP4L or DSV4_WF_FP4B */
    dsv4_mat *fp8;       /* the FP8 matrix whose weights these are, else NULL: its no-NaN flag */
} copy_item;

static void copy_task(void *arg, int t, int tid) {
    (void)tid;
    const copy_item *it = &((const copy_item *)arg)[t];
    if (!it->pack) {
        memcpy(it->dst, it->src, (size_t)it->n);
        /* the bytes were just read: the one-row kernels' NaN scan is found here once (not at
         * open, which reads no weight byte: --no-warmup stays lazy, and the copy is parallel) */
        if (it->fp8) it->fp8->fp8_no_nan = dsv4_fp8_no_nan(it->dst, it->n);
        return;
    }
    const int64_t rb = it->pack->cols / 2; /* bytes a row */
    const uint8_t *src = it->src;
    for (int64_t r = 0; r < it->pack->rows; r++)
        if (it->pack_fmt == DSV4_WF_FP4B) dsv4_fp4s_pack_row(it->dst + r * rb, src + r * rb, it->pack->cols);
        else dsv4_fp4l_pack_row(it->dst + r * rb, src + r * rb, it->pack->cols);
}

/* A block's copy plan: counted first (items NULL: n and bytes only), then filled. */
typedef struct {
    copy_item *items;
    int64_t n, bytes;
    uint8_t *mem;
    int layout;
    int64_t lanes, fp4; /* FP4 matrices repacked (lanes or shuffle) / copied natural */
} copy_plan;

static void plan_add(copy_plan *p, const void *src, int64_t n, const void **bind, const float **bindf, dsv4_mat *pack,
                     dsv4_wfmt pack_fmt, dsv4_mat *fp8) {
    if (!src || n <= 0) return;
    if (p->items) p->items[p->n] = (copy_item){src, p->mem + p->bytes, n, bind, bindf, pack, pack_fmt, fp8};
    p->n++;
    p->bytes += round64(n);
}

/* a matrix's weights; FP4 weights repacked when the layout is LANES or SHUFFLE and can hold
 * them (SHUFFLE: the shuffle layout where it can, else the lanes layout) */
static void plan_weights(copy_plan *p, dsv4_mat *m) {
    int64_t wb, sb;
    mat_parts(m, &wb, &sb);
    if (!wb) return;
    const int shuf = p->layout == DSV4_FP4_SHUFFLE && shuf_ok(m);
    const int pack = shuf || ((p->layout == DSV4_FP4_LANES || p->layout == DSV4_FP4_SHUFFLE) && lanes_ok(m));
    plan_add(p, m->w, wb, &m->w, NULL, pack ? m : NULL, shuf ? DSV4_WF_FP4B : DSV4_WF_FP4L,
             m->fmt == DSV4_WF_FP8 ? m : NULL);
    if (is_fp4(m)) pack ? p->lanes++ : p->fp4++;
}

/* ... and its scales */
static void plan_scales(copy_plan *p, dsv4_mat *m) {
    int64_t wb, sb;
    mat_parts(m, &wb, &sb);
    if (wb) plan_add(p, m->scale, sb, &m->scale, NULL, NULL, DSV4_WF_NONE, NULL);
}

static void plan_mat(copy_plan *p, dsv4_mat *m) {
    plan_weights(p, m);
    plan_scales(p, m);
}

/* A routed expert: W1's weights, W3's, W1's scales, W3's, then W2 (weights, scales). W1 and W3
 * so are one matrix of 2I rows (moe.h dsv4_moe_w13; a piece of a whole number of 64-byte lines
 * ends where the next starts), which the MoE's one-row experts read as one product: one matrix
 * start, one x permute and one stream where there were two (session 26's x26 measured the
 * start of a one-row expert matrix at 0.7-2.1 us, ~1/4 of its time). */
static void plan_expert(copy_plan *p, dsv4_mat *w1, dsv4_mat *w3, dsv4_mat *w2) {
    plan_weights(p, w1);
    plan_weights(p, w3);
    plan_scales(p, w1);
    plan_scales(p, w3);
    plan_mat(p, w2);
}

/* Everything of block b the copy moves: every weight matrix (the routed experts of [e0, e1)),
 * their scales, and hc's two mixing matrices (the only other weights read in full every step). */
static void plan_block(const dsv4_engine *e, dsv4_block_w *b, int e0, int e1, copy_plan *p) {
    dsv4_mat *mats[BLOCK_MATS];
    for (int i = 0, n = block_mats(b, mats); i < n; i++) plan_mat(p, mats[i]);
    for (int x = e0; has_experts(e, b) && x < e1; x++) plan_expert(p, &b->w1[x], &b->w3[x], &b->w2[x]);
    const int64_t fn = (int64_t)dsv4_cfg_mix(e->cfg) * e->cfg->hc_mult * e->cfg->hidden_size * (int64_t)sizeof(float);
    plan_add(p, b->hc_attn_fn, fn, NULL, &b->hc_attn_fn, NULL, DSV4_WF_NONE, NULL);
    plan_add(p, b->hc_ffn_fn, fn, NULL, &b->hc_ffn_fn, NULL, DSV4_WF_NONE, NULL);
}

static int prepare_block(dsv4_engine *e, dsv4_block_w *b, int layout, int e0, int e1, dsv4_err *err) {
    const int E = e->cfg->n_routed_experts;
    const int experts = has_experts(e, b);
    /* the expert arrays become the engine's own (they are the model's, or W8A8's): first in
     * the block's memory, so that the plan below points at the engine's matrices */
    const int64_t arr_bytes = experts ? round64(3 * (int64_t)E * (int64_t)sizeof(dsv4_mat)) : 0;
    copy_plan p = {.layout = layout};
    plan_block(e, b, e0, e1, &p); /* count (on the model's arrays: the same sizes) */
    /* FP4 matrices outside the copy (other ranks' experts) stay natural */
    e->fp4_natural += block_fp4(e, b) - (p.lanes + p.fp4);
    if (p.n == 0) return DSV4_OK;
    const int64_t huge = 2 << 20, n_items = p.n;
    const int64_t bytes = (arr_bytes + p.bytes + huge - 1) / huge * huge; /* whole huge pages (aligned_alloc's size rule) */
    uint8_t *mem = aligned_alloc((size_t)huge, (size_t)bytes);
    copy_item *items = malloc(sizeof *items * (size_t)n_items);
    if (!mem || !items || dsv4_engine_own(e, mem)) {
        free(mem);
        free(items);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "weights memory %s: out of memory for %lld bytes of layer %d's weights",
                         dsv4_fp4_layout_name(layout), (long long)bytes, b->layer_id);
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
    if (experts) dsv4_engine_own_expert_arrays(b, mem, E); /* arr_bytes, laid out above */
    p = (copy_plan){.items = items, .mem = mem + arr_bytes, .layout = layout};
    plan_block(e, b, e0, e1, &p); /* fill, on the engine's arrays */
    dsv4_kctx_parallel(e->k, (int)p.n, copy_task, items);
    for (int64_t i = 0; i < p.n; i++) {
        copy_item *it = &items[i];
        if (it->bind) *it->bind = it->dst;
        if (it->bindf) *it->bindf = (const float *)it->dst;
        if (it->pack) it->pack->fmt = it->pack_fmt;
    }
    e->fp4_lanes += p.lanes;
    e->fp4_natural += p.fp4;
    free(items);
    return DSV4_OK;
}

int dsv4_fp4_copy_layout(int simd) {
    if (simd == DSV4_SIMD_AVX2) return DSV4_FP4_SHUFFLE; /* see the top of this file, session 51 */
    return simd >= DSV4_SIMD_AVX512VBMI ? DSV4_FP4_LANES : DSV4_FP4_COPY;
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

/* Bytes COPY would move into the engine's memory (plan_block's, every block). */
static int64_t copy_bytes(const dsv4_engine *e, int n_blocks, int e0, int e1) {
    int64_t bytes = 0;
    for (int l = 0; l < n_blocks; l++) {
        copy_plan p = {.layout = DSV4_FP4_COPY};
        plan_block(e, &e->blocks[l], e0, e1, &p);
        bytes += p.bytes;
    }
    return bytes;
}

int dsv4_engine_prepare_fp4(dsv4_engine *e, dsv4_err *err) {
    int *layout = &e->opts.fp4_layout;
    if (*layout != DSV4_FP4_AUTO && *layout != DSV4_FP4_NATURAL && *layout != DSV4_FP4_COPY && *layout != DSV4_FP4_LANES &&
        *layout != DSV4_FP4_SHUFFLE)
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "engine: fp4_layout = %d; must be DSV4_FP4_AUTO, _NATURAL, _COPY, _LANES or _SHUFFLE", *layout);
    const dsv4_config *c = e->cfg;
    const int n_blocks = c->num_hidden_layers + c->num_nextn_predict_layers;
    int e0 = 0, e1 = c->n_routed_experts;
    if (e->ep) dsv4_ep_local_range(e->ep, &e0, &e1);
    /* AUTO: the copy when the memory allows it, in the layout the kernel level reads best (see
     * the top of this file for why) */
    if (*layout == DSV4_FP4_AUTO) {
        const int64_t other = dsv4_cache_get_plan(e->cache)->total_bytes + (int64_t)dsv4_engine_scratch_bytes(e);
        *layout = dsv4_fp4_auto_layout(copy_bytes(e, n_blocks, e0, e1), other, dsv4_machine_available_bytes(),
                                       dsv4_machine_ram_bytes(), dsv4_process_locked_bytes());
        if (*layout == DSV4_FP4_COPY) *layout = dsv4_fp4_copy_layout(dsv4_kctx_simd(e->k));
    }
    e->fp4_lanes = e->fp4_natural = 0;
    if (*layout == DSV4_FP4_NATURAL) {
        for (int l = 0; l < n_blocks; l++) e->fp4_natural += block_fp4(e, &e->blocks[l]);
        return DSV4_OK;
    }
    for (int l = 0; l < n_blocks; l++) {
        const int rc = prepare_block(e, &e->blocks[l], *layout, e0, e1, err);
        if (rc) return rc;
    }
    return DSV4_OK;
}
