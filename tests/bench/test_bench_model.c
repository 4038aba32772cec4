/* test_bench_model.c — the cost model behind `dsv4 bench`, and the probes.
 *
 *  - step bytes of the tiny golden model (BF16) against sizes written out from the tensor
 *    table of spec/model.md §2.2 for its config;
 *  - the closed-form attention sums of the FLOP count against a loop over positions;
 *  - the routing census: experts recomputed from hc streams equal the oracle's routing,
 *    both from the oracle's own streams and from streams the engine's trace hook passes;
 *  - the probes return plausible, positive figures.
 */
#include <cjson/cJSON.h>
#include <stdint.h>

#include "bench/bench_model.h"
#include "engine/engine.h"
#include "kernels/probe.h"
#include "model/info.h"
#include "test.h"
#include "util/file.h"

static dsv4_model *model;
static dsv4_engine *eng;

/* ---- bytes ----------------------------------------------------------------------------- */

/* The bytes of layer l's non-expert tensors as the engine holds a BF16 checkpoint: matrices
 * 2 bytes per element, every vector converted to F32, one ape row per compressor. */
static int64_t hand_layer_fixed(const dsv4_config *c, int l) {
    const int64_t D = c->hidden_size, H = c->num_attention_heads, hd = c->head_dim, hc = c->hc_mult;
    const int64_t q = c->q_lora_rank, o = c->o_lora_rank, G = c->o_groups, E = c->n_routed_experts;
    const int64_t I = c->moe_intermediate_size, nI = c->index_n_heads, dI = c->index_head_dim;
    const int64_t mix = (2 + hc) * hc;
    const int r = c->compress_ratios[l];
    int64_t b = 2 * (mix * hc * D + mix + 3) * 4;                /* hc_attn_*, hc_ffn_* */
    b += 2 * D * 4 + H * 4;                                      /* attn/ffn norm, sink */
    b += q * D * 2 + q * 4 + H * hd * q * 2 + hd * D * 2 + hd * 4; /* wq_a q_norm wq_b wkv kv_norm */
    b += G * o * (H * hd / G) * 2 + D * G * o * 2;               /* wo_a, wo_b */
    if (r > 0) {
        const int64_t coff = r == 4 ? 2 : 1;
        b += coff * hd * 4 + 2 * coff * hd * D * 2 + hd * 4;     /* ape row, wkv, wgate, norm */
    }
    if (r == 4) {
        b += nI * dI * q * 2 + nI * D * 2;                       /* indexer wq_b, weights_proj */
        b += 2 * dI * 4 + 2 * 2 * dI * D * 2 + dI * 4;          /* its compressor */
    }
    b += E * D * 2 + (l >= c->num_hash_layers ? E * 4 : 0);      /* gate (+ bias) */
    b += 3 * I * D * 2;                                          /* shared expert */
    return b;
}

static void test_step_bytes(void) {
    const dsv4_config *c = &model->cfg;
    dsv4_step_weights w;
    dsv4_err err = {0};
    CHECK(dsv4_step_weights_init(eng, &w, &err) == DSV4_OK);
    const int L = c->num_hidden_layers, E = c->n_routed_experts, K = c->num_experts_per_tok;
    const int64_t D = c->hidden_size, V = c->vocab_size, hc = c->hc_mult, I = c->moe_intermediate_size;
    CHECK(w.n_layers == L && w.n_experts == E && w.top_k == K);
    CHECK(w.embed_row == D * 2);
    CHECK(w.global == V * D * 2 + D * 4 + (hc * hc * D + hc + 1) * 4);
    int bad = 0;
    for (int l = 0; l < L; l++) {
        CHECK_MSG(w.layer_fixed[l] == hand_layer_fixed(c, l), "layer %d: %lld != %lld", l,
                  (long long)w.layer_fixed[l], (long long)hand_layer_fixed(c, l));
        for (int e = 0; e < E; e++) bad += w.expert[(int64_t)l * E + e] != 3 * I * D * 2;
    }
    CHECK(bad == 0);

    /* one row, K experts per layer: the batch-1 decode step */
    uint8_t *used = calloc((size_t)L * E, 1);
    double want = (double)(w.global + w.embed_row);
    for (int l = 0; l < L; l++) {
        want += (double)hand_layer_fixed(c, l) + (double)K * 3 * I * D * 2;
        for (int k = 0; k < K; k++) used[l * E + (l + 3 * k) % E] = 1;
    }
    CHECK_NEAR(dsv4_step_weights_bytes(&w, c, 1, used), want, 0.5);
    CHECK_NEAR(dsv4_step_weights_expected(&w, c, 1), want, 1e-6 * want);
    /* three rows sharing those experts: two more embedding rows and ape rows */
    double ape = 0;
    for (int l = 0; l < L; l++) {
        const int r = c->compress_ratios[l];
        if (r > 0) ape += 2.0 * ((r == 4 ? 2 : 1) * c->head_dim * 4 + (r == 4 ? 2 * c->index_head_dim * 4 : 0));
    }
    CHECK_NEAR(dsv4_step_weights_bytes(&w, c, 3, used), want + 2.0 * w.embed_row + ape, 0.5);
    /* every expert of every layer */
    memset(used, 1, (size_t)L * E);
    CHECK_NEAR(dsv4_step_weights_bytes(&w, c, 1, used), want + (double)L * (E - K) * 3 * I * D * 2, 0.5);
    free(used);

    /* distinct experts: 1 row K; n rows never more than E or n K; grows with n */
    CHECK_NEAR(dsv4_expected_distinct_experts(256, 6, 1), 6.0, 1e-9);
    CHECK_NEAR(dsv4_expected_distinct_experts(256, 6, 16), 256.0 * (1.0 - pow(250.0 / 256.0, 16)), 1e-9);
    CHECK(dsv4_expected_distinct_experts(8, 2, 100) <= 8.0 && dsv4_expected_distinct_experts(8, 2, 100) > 7.99);
    dsv4_step_weights_free(&w);
}

/* ---- FLOPs ----------------------------------------------------------------------------- */

/* The attention FLOPs of positions [a, b), position by position. */
static double loop_attn_flops(const dsv4_config *c, int64_t a, int64_t b) {
    double f = 0;
    for (int64_t t = a; t < b; t++)
        for (int l = 0; l < c->num_hidden_layers; l++) {
            const int r = c->compress_ratios[l];
            int64_t keys = t + 1 < c->sliding_window ? t + 1 : c->sliding_window;
            if (r == 4) {
                const int64_t n_c = (t + 1) / 4;
                keys += n_c < c->index_topk ? n_c : c->index_topk;
                if (n_c > c->index_topk) f += 2.0 * c->index_n_heads * c->index_head_dim * (double)n_c;
            } else if (r > 0) {
                keys += (t + 1) / r;
            }
            f += 4.0 * c->num_attention_heads * c->head_dim * (double)keys;
        }
    return f;
}

static void test_flops(void) {
    dsv4_config c = model->cfg;
    dsv4_param_counts pc;
    CHECK(dsv4_count_params(&c, &pc, NULL) == DSV4_OK);
    const double lin = 2.0 * (double)(pc.active_main - pc.embed - pc.head);
    CHECK(lin > 0);
    CHECK_NEAR(dsv4_linear_flops_per_token(&c), lin, 0);
    CHECK_NEAR(dsv4_head_flops(&c, 3), 6.0 * c.vocab_size * c.hidden_size, 0);
    /* ranges across the window, the top-k cap and the ratio boundaries */
    const int64_t ranges[][2] = {{0, 1}, {0, 15}, {3, 17}, {0, 300}, {127, 129}, {250, 520}, {17, 18}, {1000, 1700}};
    const int topks[] = {4, 64};
    for (int ti = 0; ti < 2; ti++) {
        c.index_topk = topks[ti];
        for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
            const int64_t a = ranges[i][0], n = ranges[i][1] - a;
            const double want = lin * (double)n + loop_attn_flops(&c, a, a + n);
            CHECK_MSG(fabs(dsv4_forward_flops(&c, a, n) - want) <= 1e-9 * want,
                      "topk %d [%lld, %lld): %.17g != %.17g", c.index_topk, (long long)a, (long long)(a + n),
                      dsv4_forward_flops(&c, a, n), want);
        }
    }
    CHECK(dsv4_forward_flops(&c, 10, 0) == 0);
    /* a row at position t reads min(t+1, win) window rows and its compressed entries */
    /* and its indexer keys only where it scores them (more than topk entries): topk 64 and
     * 80 against the 75 entries of position 299 */
    c = model->cfg;
    const double row = 4.0 * c.head_dim, idx = 4.0 * c.index_head_dim;
    const int64_t t = 299;
    const int idx_topks[] = {64, 80};
    for (int ti = 0; ti < 2; ti++) {
        c.index_topk = idx_topks[ti];
        double want = 0;
        for (int l = 0; l < c.num_hidden_layers; l++) {
            const int r = c.compress_ratios[l];
            want += c.sliding_window * row;
            if (r == 4) want += (double)(75 < c.index_topk ? 75 : c.index_topk) * row + (75 > c.index_topk ? 75 * idx : 0);
            else if (r > 0) want += (double)(300 / r) * row;
        }
        CHECK_NEAR(dsv4_decode_cache_bytes(&c, t, DSV4_KV_F32), want, 0);
        CHECK_NEAR(dsv4_decode_cache_bytes(&c, t, DSV4_KV_BF16), want / 2, 0);  /* 2 bytes a value */
    }
}

/* ---- routing census -------------------------------------------------------------------- */

typedef struct {
    int L, width, n_pos;
    float *streams;   /* (n_pos, L, hc, D) */
} capture;

static void on_trace(void *user, int seq, int64_t pos, int layer, int kind, const float *st) {
    (void)seq;
    capture *cp = user;
    if (kind != 0 || pos < 0 || pos >= cp->n_pos || layer >= cp->L) return;
    memcpy(cp->streams + ((size_t)pos * cp->L + layer) * cp->width, st, (size_t)cp->width * sizeof(float));
}

/* Routes of every layer and position from streams (n, L, hc, D); compares with the oracle's
 * routing (L, n, K) in k order. Returns the number of mismatching (layer, position). */
static int route_mismatches(const float *streams, const int32_t *tokens, int n, const int32_t *want) {
    const dsv4_config *c = &model->cfg;
    const int L = c->num_hidden_layers, K = c->num_experts_per_tok, width = c->hc_mult * c->hidden_size;
    float *rows = malloc((size_t)n * width * sizeof(float));
    int *sel = malloc((size_t)n * K * sizeof(int));
    int bad = 0;
    dsv4_err err = {0};
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < n; t++)
            memcpy(rows + (size_t)t * width, streams + ((size_t)t * L + l) * width, (size_t)width * sizeof(float));
        CHECK(dsv4_route_from_streams(eng, l, rows, tokens, n, sel, &err) == DSV4_OK);
        for (int t = 0; t < n; t++)
            if (memcmp(sel + t * K, want + ((size_t)l * n + t) * K, (size_t)K * sizeof(int))) bad++;
    }
    free(rows);
    free(sel);
    return bad;
}

static void test_routing(void) {
    char dir[1024], path[1200];
    test_shared("golden/tiny_s0/run_p36_d4", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = dsv4_read_file(path, 0, NULL, NULL);
    cJSON *man = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(man != NULL);
    if (!man) return;
    const cJSON *jt = cJSON_GetObjectItem(man, "tokens");
    const int n = cJSON_GetArraySize(jt), P = cJSON_GetObjectItem(man, "prefill_len")->valueint;
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    for (int i = 0; i < n; i++) tokens[i] = cJSON_GetArrayItem(jt, i)->valueint;
    cJSON_Delete(man);
    const dsv4_config *c = &model->cfg;
    const int L = c->num_hidden_layers, K = c->num_experts_per_tok, width = c->hc_mult * c->hidden_size;

    size_t nb;
    snprintf(path, sizeof path, "%s/routing_experts.bin", dir);
    int32_t *want = (int32_t *)dsv4_read_file(path, 0, &nb, NULL);
    /* the file holds main layers first (MTP rows, if any, after them) */
    CHECK(want && nb >= (size_t)L * n * K * sizeof(int32_t));

    /* 1. the oracle's own streams after each attention sub-block */
    float *streams = malloc((size_t)n * L * width * sizeof(float));
    size_t n1, n2;
    snprintf(path, sizeof path, "%s/prefill_layer_attn_streams.bin", dir);
    char *pre = dsv4_read_file(path, 0, &n1, NULL);
    snprintf(path, sizeof path, "%s/decode_layer_attn_streams.bin", dir);
    char *dec = dsv4_read_file(path, 0, &n2, NULL);
    CHECK(pre && dec && n1 == (size_t)P * L * width * 4 && n2 == (size_t)(n - P) * L * width * 4);
    if (pre && dec && want && n1 + n2 == (size_t)n * L * width * 4) {
        memcpy(streams, pre, n1);
        memcpy((char *)streams + n1, dec, n2);
        const int bad = route_mismatches(streams, tokens, n, want);
        printf("routes from oracle streams: %d of %d (layer, position) differ\n", bad, L * n);
        CHECK(bad == 0);
        /* a census that saw wrong streams would not agree: shift positions by one */
        const int shifted = route_mismatches(streams + (size_t)L * width, tokens + 1, n - 1, want);
        CHECK(shifted > 0);
    }
    free(pre);
    free(dec);

    /* 2. streams from the engine's trace hook: prefill then single-token decode steps */
    capture cp = {L, width, n, streams};
    memset(streams, 0, (size_t)n * L * width * sizeof(float));
    dsv4_engine_set_trace(eng, on_trace, &cp);
    int seq;
    dsv4_err err = {0};
    CHECK(dsv4_seq_create(eng, &seq, &err) == DSV4_OK);
    dsv4_span sp = {seq, 0, P, tokens, 0, NULL, 0, NULL, 0};
    CHECK(dsv4_forward(eng, &sp, 1, NULL, NULL, &err) == DSV4_OK);
    for (int t = P; t < n; t++) {
        dsv4_span d = {seq, t, 1, tokens + t, 0, NULL, 0, NULL, 0};
        CHECK(dsv4_forward(eng, &d, 1, NULL, NULL, &err) == DSV4_OK);
    }
    dsv4_engine_set_trace(eng, NULL, NULL);
    CHECK(dsv4_seq_free(eng, seq, &err) == DSV4_OK);
    if (want) {
        const int bad = route_mismatches(streams, tokens, n, want);
        printf("routes from engine trace: %d of %d (layer, position) differ\n", bad, L * n);
        CHECK(bad == 0);
    }
    CHECK(dsv4_route_from_streams(eng, L, streams, tokens, 1, (int[8]){0}, &err) == DSV4_ERR_ARG);
    free(streams);
    free(want);
    free(tokens);
}

/* ---- probes ---------------------------------------------------------------------------- */

static void test_probes(void) {
    dsv4_kctx *k;
    dsv4_err err = {0};
    CHECK(dsv4_kctx_create(2, 64, &k, &err) == DSV4_OK);
    dsv4_probe_result bw, fma;
    CHECK(dsv4_probe_bandwidth(k, (size_t)8 << 20, 3, &bw, &err) == DSV4_OK);
    /* anything that reads 8 MiB moves between 0.1 and 10000 GB/s */
    CHECK(bw.best > 0.1 && bw.best < 1e4 && bw.median <= bw.best && bw.passes == 3 && bw.threads == 2);
    CHECK(dsv4_probe_fma(k, 0.01, 2, &fma, &err) == DSV4_OK);
    /* a rate, not a speed gate: a loaded machine or a sanitizer build may be very slow */
    CHECK(fma.best > 0.0 && fma.best < 1e5 && fma.median <= fma.best && fma.passes == 2);
    printf("probes: %.1f GB/s, %.1f GFLOP/s (%d)\n", bw.best, fma.best, fma.simd);
    /* the portable FMA loop on the scalar level */
    dsv4_kctx_set_simd(k, 0);
    dsv4_probe_result sc;
    CHECK(dsv4_probe_fma(k, 0.01, 2, &sc, &err) == DSV4_OK);
    CHECK(sc.simd == 0 && sc.best > 0.0 && sc.best < 1e5);
    printf("scalar FMA loop: %.1f GFLOP/s\n", sc.best);
    dsv4_kctx_free(k);
}

int main(void) {
    char dir[1024];
    dsv4_err err = {0};
    test_shared("golden/tiny_s0/model", dir, sizeof dir);
    if (dsv4_model_open(dir, &model, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    dsv4_engine_opts o = {0};
    o.kv_dtype = DSV4_KV_F32; /* routes compared with the oracle's */
    o.max_context = 64;
    o.max_seqs = 1;
    o.threads = 2;
    if (dsv4_engine_create(model, &o, &eng, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    test_step_bytes();
    test_flops();
    test_routing();
    test_probes();
    dsv4_engine_free(eng);
    dsv4_model_close(model);
    return test_report();
}
