/* test_fp4_layout.c — dsv4_engine_opts.fp4_layout (dsv4.h DSV4_FP4_*) through the public API:
 *   - the option's names and its parse errors;
 *   - an engine with LANES repacks exactly the FP4 matrices whose width is a multiple of 128
 *     (dsv4_engine_fp4_counts against the model's census, model/info.h), the others stay
 *     natural; NATURAL reads the model's bytes; COPY reads every FP4 matrix from the engine's
 *     own copy in the natural layout, and COPY and LANES the other weights (dense matrices and
 *     their scales, the experts' scales, hc's mixing matrices) from the engine's copy too; AUTO does NATURAL or
 *     the copy, as dsv4_fp4_auto_layout says for this machine's memory, the copy as LANES from
 *     avx512vbmi up and at avx2 (dsv4_fp4_copy_layout) (its rule checked on its own, case by case); get_opts says
 *     what was done;
 *   - hidden states, logits and the MTP block's hidden states of a prefill + decodes are the same bits in every
 *     layout, at every kernel level this CPU and build run (DSV4_SIMD);
 *   - the weights fingerprint is the same before and after a LANES engine (the model is not
 *     touched: the copies are the engine's);
 *   - an unknown fp4_layout value fails create with DSV4_ERR_ARG.
 *
 *   test_fp4_layout MODEL_DIR   (a checkpoint written with gen-model --dtype fp8: FP4 experts)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "engine/engine.h"
#include "kernels/cpu.h"
#include "model/info.h"
#include "model/model.h"
#include "moe/moe.h"
#include "test.h"

enum { N = 60, P = 52 };

typedef struct {
    float *hidden, *logits, *mtp; /* (N, D), (N, V), (N - 1, D) MTP hidden */
    float *streams;               /* (N, hc, D) last-block streams, the MTP block's input */
    int64_t lanes, natural;
    int layout; /* get_opts().fp4_layout */
    int64_t own_fp4; /* the engine's FP4 matrices (either layout) whose bytes are not the model's */
    int64_t own_other, other_total; /* own_other() */
    int64_t w13, experts; /* routed experts whose W1 and W3 are one matrix (dsv4_moe_w13); all of them */
} run_out;

/* FP4 matrices of the engine's blocks stored outside the model's mapped bytes */
static int64_t own_fp4(const dsv4_engine *e, const dsv4_model *m) {
    const dsv4_config *c = &m->cfg;
    int64_t n = 0;
    for (int l = 0; l < c->num_hidden_layers + c->num_nextn_predict_layers; l++) {
        const dsv4_block_w *eb = &e->blocks[l], *mb = l < c->num_hidden_layers ? &m->layers[l] : &m->mtp[l - c->num_hidden_layers];
        for (int x = 0; eb->w1 && x < c->n_routed_experts; x++) {
            const dsv4_mat *em[3] = {&eb->w1[x], &eb->w3[x], &eb->w2[x]}, *mm[3] = {&mb->w1[x], &mb->w3[x], &mb->w2[x]};
            for (int j = 0; j < 3; j++) n += dsv4_wf_is_fp4(em[j]->fmt) && em[j]->w != mm[j]->w;
        }
    }
    return n;
}

/* routed experts of the engine's blocks whose W1 and W3 are one matrix in memory, each checked
 * against its own bytes: W1's weights then W3's, W1's scales then W3's (the copy's layout) */
static int64_t w13_experts(const dsv4_engine *e, int64_t *total) {
    const dsv4_config *c = e->cfg;
    int64_t n = 0, t = 0;
    for (int l = 0; l < c->num_hidden_layers + c->num_nextn_predict_layers; l++) {
        const dsv4_block_w *b = &e->blocks[l];
        for (int x = 0; b->w1 && x < c->n_routed_experts; x++, t++) {
            dsv4_mat v;
            const dsv4_mat *w1 = &b->w1[x], *w3 = &b->w3[x];
            const int64_t wb = w1->rows * w1->cols / 2, sb = w1->rows * (w1->cols / 32);
            n += dsv4_moe_w13(w1, w3, &v) && v.rows == w1->rows + w3->rows && (const uint8_t *)w3->w == (const uint8_t *)w1->w + wb &&
                 (const uint8_t *)w3->scale == (const uint8_t *)w1->scale + sb && v.w == w1->w && v.scale == w1->scale;
        }
    }
    *total = t;
    return n;
}

/* the other weights of the engine's blocks read outside the model's mapped bytes: the dense
 * matrices' weights and scales, the experts' scales, hc's mixing matrices */
static int64_t own_other(const dsv4_engine *e, const dsv4_model *m, int64_t *total) {
    const dsv4_config *c = &m->cfg;
    int64_t n = 0, t = 0;
    for (int l = 0; l < c->num_hidden_layers + c->num_nextn_predict_layers; l++) {
        const dsv4_block_w *eb = &e->blocks[l], *mb = l < c->num_hidden_layers ? &m->layers[l] : &m->mtp[l - c->num_hidden_layers];
        const dsv4_mat *em[] = {&eb->wq_a, &eb->wq_b, &eb->wkv, &eb->wo_b, &eb->gate, &eb->sh_w1, &eb->sh_w2};
        const dsv4_mat *mm[] = {&mb->wq_a, &mb->wq_b, &mb->wkv, &mb->wo_b, &mb->gate, &mb->sh_w1, &mb->sh_w2};
        for (size_t i = 0; i < sizeof em / sizeof *em; i++) {
            n += (em[i]->w && em[i]->w != mm[i]->w) + (em[i]->scale && em[i]->scale != mm[i]->scale);
            t += (em[i]->w != NULL) + (em[i]->scale != NULL);
        }
        for (int x = 0; eb->w1 && x < c->n_routed_experts; x++) n += eb->w1[x].scale != mb->w1[x].scale, t++;
        n += (eb->hc_attn_fn != mb->hc_attn_fn) + (eb->hc_ffn_fn != mb->hc_ffn_fn);
        t += 2;
    }
    *total = t;
    return n;
}

/* a prefill of P tokens, then N - P one-token decodes; the MTP block over the same rows */
static int run(const dsv4_model *m, int layout, const int32_t *toks, run_out *o) {
    const dsv4_model_info info = dsv4_model_get_info(m);
    dsv4_engine_opts eo = {.max_context = N + 2, .max_seqs = 1, .kv_dtype = DSV4_KV_F32, .fp4_layout = layout,
                           .mtp = info.n_mtp > 0, .threads = 2};
    dsv4_engine *e;
    dsv4_err err = {0};
    int s, rc = dsv4_engine_create(m, &eo, &e, &err);
    if (rc) {
        fprintf(stderr, "create: %s\n", err.msg);
        return rc;
    }
    dsv4_engine_fp4_counts(e, &o->lanes, &o->natural);
    o->layout = dsv4_engine_get_opts(e).fp4_layout;
    o->own_fp4 = own_fp4(e, m);
    o->own_other = own_other(e, m, &o->other_total);
    o->w13 = w13_experts(e, &o->experts);
    rc = dsv4_seq_create(e, &s, &err);
    const int D = info.hidden_size, V = info.vocab_size;
    for (int t = 0; !rc && t < N; t += t < P ? P : 1) {
        const int n = t < P ? P : 1;
        dsv4_span sp = {.seq = s, .start = t, .n_tokens = n, .tokens = toks + t, .n_hidden = n, .n_streams = n};
        rc = dsv4_forward(e, &sp, 1, o->hidden + (size_t)t * D, o->streams + (size_t)t * info.hc_mult * D, &err);
        if (!rc) rc = dsv4_lm_head(e, o->hidden + (size_t)t * D, n, o->logits + (size_t)t * V, &err);
    }
    if (!rc && info.n_mtp) {
        /* MTP row t: the streams of position t with token t + 1 */
        dsv4_mtp_span ms = {.seq = s, .start = 0, .n = N - 1, .next_tokens = toks + 1, .streams = o->streams};
        rc = dsv4_mtp_forward(e, &ms, 1, o->mtp, &err);
    }
    if (rc) fprintf(stderr, "run: %s\n", err.msg);
    dsv4_engine_free(e);
    return rc;
}

static int64_t bits_differ(const float *a, const float *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += memcmp(a + i, b + i, sizeof(float)) != 0;
    return d;
}

/* AUTO's rule: copy when the copy, the cache and scratch and the headroom (5 % of RAM, at
 * least 1 GiB) fit in the available memory and nothing is locked; the copy in lanes from
 * avx512vbmi up */
static void check_auto_rule(void) {
    const uint64_t G = 1ull << 30, M = 1ull << 20;
    /* 16 GiB machine: headroom 1 GiB */
    CHECK(dsv4_fp4_auto_layout(768 * M, 256 * M, 8 * G, 16 * G, 0) == DSV4_FP4_COPY);
    CHECK(dsv4_fp4_auto_layout(7 * G - 256 * M, 256 * M, 8 * G, 16 * G, 0) == DSV4_FP4_COPY); /* exactly fits */
    CHECK(dsv4_fp4_auto_layout(7 * G - 256 * M + 1, 256 * M, 8 * G, 16 * G, 0) == DSV4_FP4_NATURAL);
    CHECK(dsv4_fp4_auto_layout(6 * G, 2 * G, 8 * G, 16 * G, 0) == DSV4_FP4_NATURAL); /* cache + scratch count */
    /* 1 TiB machine: headroom 5 % (51.2 GiB) */
    CHECK(dsv4_fp4_auto_layout(150 * G, 10 * G, 220 * G, 1024 * G, 0) == DSV4_FP4_COPY);
    CHECK(dsv4_fp4_auto_layout(150 * G, 10 * G, 200 * G, 1024 * G, 0) == DSV4_FP4_NATURAL);
    /* a model larger than the memory, read through the page cache */
    CHECK(dsv4_fp4_auto_layout(150 * G, 1 * G, 100 * G, 128 * G, 0) == DSV4_FP4_NATURAL);
    /* locked memory (--mlock), nothing to copy, unknown memory */
    CHECK(dsv4_fp4_auto_layout(768 * M, 0, 8 * G, 16 * G, 4096) == DSV4_FP4_NATURAL);
    CHECK(dsv4_fp4_auto_layout(0, 0, 8 * G, 16 * G, 0) == DSV4_FP4_NATURAL);
    CHECK(dsv4_fp4_auto_layout(768 * M, 0, 0, 16 * G, 0) == DSV4_FP4_NATURAL);
    /* the copy's layout by kernel level: lanes at avx2 and from avx512vbmi up */
    CHECK(dsv4_fp4_copy_layout(DSV4_SIMD_SCALAR) == DSV4_FP4_COPY);
    CHECK(dsv4_fp4_copy_layout(DSV4_SIMD_AVX2) == DSV4_FP4_SHUFFLE);
    CHECK(dsv4_fp4_copy_layout(DSV4_SIMD_AVX512) == DSV4_FP4_COPY);
    CHECK(dsv4_fp4_copy_layout(DSV4_SIMD_AVX512VBMI) == DSV4_FP4_LANES);
}

static void check_parse(void) {
    dsv4_err err = {0};
    int v = -1;
    CHECK(dsv4_fp4_layout_parse("auto", &v, &err) == DSV4_OK && v == DSV4_FP4_AUTO);
    CHECK(dsv4_fp4_layout_parse("mapped", &v, &err) == DSV4_OK && v == DSV4_FP4_NATURAL);
    v = -1; /* the old name still parses */
    CHECK(dsv4_fp4_layout_parse("natural", &v, &err) == DSV4_OK && v == DSV4_FP4_NATURAL);
    CHECK(dsv4_fp4_layout_parse("lanes", &v, &err) == DSV4_OK && v == DSV4_FP4_LANES);
    CHECK(dsv4_fp4_layout_parse("copy", &v, &err) == DSV4_OK && v == DSV4_FP4_COPY);
    CHECK(dsv4_fp4_layout_parse("shuffle", &v, &err) == DSV4_OK && v == DSV4_FP4_SHUFFLE);
    CHECK(dsv4_fp4_layout_parse("Lanes", &v, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "must be auto, mapped, copy, lanes or shuffle");
    CHECK(dsv4_fp4_layout_parse(NULL, &v, &err) == DSV4_ERR_ARG);
    CHECK(!strcmp(dsv4_fp4_layout_name(DSV4_FP4_LANES), "lanes") && !strcmp(dsv4_fp4_layout_name(DSV4_FP4_COPY), "copy") &&
          !strcmp(dsv4_fp4_layout_name(DSV4_FP4_NATURAL), "mapped") &&
          !strcmp(dsv4_fp4_layout_name(DSV4_FP4_SHUFFLE), "shuffle") && !strcmp(dsv4_fp4_layout_name(7), "?"));
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_fp4_layout MODEL_DIR\n");
        return 2;
    }
    check_parse();
    check_auto_rule();
    dsv4_model *m;
    dsv4_err err = {0};
    if (dsv4_model_open(argv[1], &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    dsv4_fp4_census census;
    dsv4_model_fp4_census(m, &census);
    printf("model %s: %lld FP4 matrices, %lld can take the lanes layout%s%s\n", argv[1], (long long)census.fp4,
           (long long)census.lanes_ok, census.first_natural[0] ? "; first natural: " : "", census.first_natural);
    CHECK_MSG(census.lanes_ok > 0, "the checkpoint has no FP4 matrix the lanes layout can hold");
    uint8_t fp_before[32], fp_after[32];
    CHECK(dsv4_model_fingerprint(m, 0, fp_before, &err) == DSV4_OK);

    const dsv4_model_info info = dsv4_model_get_info(m);
    const int D = info.hidden_size, V = info.vocab_size;
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = (int32_t)((i * 2654435761u) % (unsigned)V);
    enum { NL = 5 };
    run_out r[NL];
    for (int i = 0; i < NL; i++) {
        r[i].hidden = malloc(sizeof(float) * (size_t)N * D);
        r[i].logits = malloc(sizeof(float) * (size_t)N * V);
        r[i].mtp = malloc(sizeof(float) * (size_t)N * D);
        r[i].streams = malloc(sizeof(float) * (size_t)N * info.hc_mult * D);
    }
    const int best = (int)(dsv4_cpu_simd() < dsv4_build_simd() ? dsv4_cpu_simd() : dsv4_build_simd());
    const int layouts[NL] = {DSV4_FP4_NATURAL, DSV4_FP4_LANES, DSV4_FP4_AUTO, DSV4_FP4_COPY, DSV4_FP4_SHUFFLE};
    for (int level = 0; level <= best; level++) {
        setenv("DSV4_SIMD", dsv4_simd_name((dsv4_simd)level), 1);
        int ok = 1;
        for (int i = 0; i < NL; i++) ok &= run(m, layouts[i], toks, &r[i]) == 0;
        CHECK_MSG(ok, "level %s: a run failed", dsv4_simd_name((dsv4_simd)level));
        if (!ok) continue;
        CHECK(r[0].layout == DSV4_FP4_NATURAL && r[1].layout == DSV4_FP4_LANES && r[3].layout == DSV4_FP4_COPY &&
              r[4].layout == DSV4_FP4_SHUFFLE);
        /* AUTO: what the rule said for the memory at its create (a tiny model: the copy, unless
         * this machine has under ~1 GiB to spare), in lanes as dsv4_fp4_copy_layout says */
        const int auto_copy = dsv4_fp4_copy_layout(level);
        CHECK_MSG(r[2].layout == auto_copy || r[2].layout == DSV4_FP4_NATURAL, "level %s: auto became %s",
                  dsv4_simd_name((dsv4_simd)level), dsv4_fp4_layout_name(r[2].layout));
        const run_out *ra = r[2].layout == DSV4_FP4_LANES     ? &r[1]
                            : r[2].layout == DSV4_FP4_SHUFFLE ? &r[4]
                                                              : &r[3]; /* what auto's copy must equal */
        CHECK(r[0].lanes == 0 && r[0].natural == census.fp4);
        CHECK(r[2].layout == DSV4_FP4_NATURAL ? r[2].lanes == 0 && r[2].natural == census.fp4
                                              : r[2].lanes == ra->lanes && r[2].natural == ra->natural);
        CHECK(r[3].lanes == 0 && r[3].natural == census.fp4);
        /* where the bytes are: the model's (natural), the engine's (copy: every routed expert;
         * lanes: those it repacked; auto: as the layout it became) */
        CHECK_MSG(r[0].own_fp4 == 0 && r[3].own_fp4 > 0 && r[3].own_fp4 >= r[1].own_fp4 && r[1].own_fp4 > 0,
                  "experts in the engine's memory: natural %lld, copy %lld, lanes %lld", (long long)r[0].own_fp4,
                  (long long)r[3].own_fp4, (long long)r[1].own_fp4);
        /* the other weights: the model's in natural, the engine's in copy and lanes */
        CHECK_MSG(r[0].own_other == 0 && r[3].own_other == r[3].other_total && r[1].own_other == r[3].own_other &&
                      r[2].own_other == (r[2].layout != DSV4_FP4_NATURAL ? ra->own_other : 0),
                  "other weights in the engine's memory: natural %lld, lanes %lld, auto %lld, copy %lld",
                  (long long)r[0].own_other, (long long)r[1].own_other, (long long)r[2].own_other,
                  (long long)r[3].own_other);
        CHECK_MSG(r[2].own_fp4 == (r[2].layout != DSV4_FP4_NATURAL ? ra->own_fp4 : 0),
                  "auto (%s) has %lld experts in the engine's memory, its layout's engine %lld",
                  dsv4_fp4_layout_name(r[2].layout), (long long)r[2].own_fp4, (long long)ra->own_fp4);
        printf("level %s: auto became %s here\n", dsv4_simd_name((dsv4_simd)level), dsv4_fp4_layout_name(r[2].layout));
        /* copy and lanes: every routed expert's W1 and W3 one matrix (the bits below then show
         * that the MoE's one product for both is the two products' values) */
        CHECK_MSG(r[3].experts > 0 && r[3].w13 == r[3].experts && r[1].w13 == r[1].experts,
                  "W1 and W3 one matrix: copy %lld of %lld experts, lanes %lld of %lld", (long long)r[3].w13,
                  (long long)r[3].experts, (long long)r[1].w13, (long long)r[1].experts);
        if (level == 0) printf("W1|W3 one matrix: natural %lld, copy %lld, lanes %lld of %lld experts\n", (long long)r[0].w13,
                               (long long)r[3].w13, (long long)r[1].w13, (long long)r[3].experts);
        /* shuffle: repacks every matrix lanes does (widths of 128 columns are widths of 64; the
         * generated scales are ue8m0 bytes below 255) and those of 64-column multiples besides */
        CHECK_MSG(r[4].lanes >= r[1].lanes && r[4].lanes + r[4].natural == census.fp4 && r[4].own_fp4 >= r[1].own_fp4 &&
                      r[4].own_other == r[3].own_other && r[4].w13 == r[4].experts,
                  "shuffle engine: %lld repacked, %lld natural (lanes: %lld repacked)", (long long)r[4].lanes,
                  (long long)r[4].natural, (long long)r[1].lanes);
        CHECK_MSG(r[1].lanes == census.lanes_ok && r[1].natural == census.fp4 - census.lanes_ok,
                  "lanes engine: %lld repacked, %lld natural; census %lld of %lld", (long long)r[1].lanes,
                  (long long)r[1].natural, (long long)census.lanes_ok, (long long)census.fp4);
        for (int i = 1; i < NL; i++) {
            const int64_t dh = bits_differ(r[i].hidden, r[0].hidden, (int64_t)N * D);
            const int64_t dl = bits_differ(r[i].logits, r[0].logits, (int64_t)N * V);
            const int64_t dm = info.n_mtp ? bits_differ(r[i].mtp, r[0].mtp, (int64_t)(N - 1) * D) : 0;
            CHECK_MSG(dh == 0 && dl == 0 && dm == 0,
                      "level %s, %s against natural: %lld hidden, %lld logits, %lld MTP hidden differ in bits",
                      dsv4_simd_name((dsv4_simd)level), dsv4_fp4_layout_name(layouts[i]), (long long)dh,
                      (long long)dl, (long long)dm);
        }
        printf("level %s: lanes (%lld repacked, %lld natural), copy (%lld experts copied) and auto give natural's "
               "bits: %d x %d hidden, "
               "%d x %d logits%s\n", dsv4_simd_name((dsv4_simd)level), (long long)r[1].lanes,
               (long long)r[1].natural, (long long)r[3].own_fp4, N, D, N, V, info.n_mtp ? ", MTP hidden" : "");
    }
    unsetenv("DSV4_SIMD");
    CHECK(dsv4_model_fingerprint(m, 0, fp_after, &err) == DSV4_OK);
    CHECK_MSG(!memcmp(fp_before, fp_after, 32), "the weights fingerprint changed after a lanes engine");

    dsv4_engine_opts bad = {.max_context = 64, .max_seqs = 1, .fp4_layout = 7};
    dsv4_engine *e = NULL;
    CHECK(dsv4_engine_create(m, &bad, &e, &err) == DSV4_ERR_ARG && e == NULL);
    CHECK_ERR(err, DSV4_ERR_ARG, "fp4_layout = 7");

    for (int i = 0; i < NL; i++) {
        free(r[i].hidden);
        free(r[i].logits);
        free(r[i].mtp);
        free(r[i].streams);
    }
    dsv4_model_close(m);
    return test_report();
}
