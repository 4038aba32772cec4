/* fixtures.h — hand-filled configs for the cache tests: Flash (spec/model.md §1 table), the
 * golden tiny and small configs (shared/golden/{tiny_s0,small_s1}/model/config.json), and a
 * "micro" config whose pages hold only a few rows, so that every paging edge is reached
 * with small numbers. Only the fields the planner reads matter; the rest stay plausible. */
#ifndef DSV4_TESTS_CACHE_FIXTURES_H
#define DSV4_TESTS_CACHE_FIXTURES_H

#include <string.h>

#include "model/config.h"

static inline void fx_base(dsv4_config *c) {
    memset(c, 0, sizeof *c);
    c->num_key_value_heads = 1;
    c->n_shared_experts = 1;
    c->rope_theta = 10000;
    c->compress_rope_theta = 160000;
    c->max_position_embeddings = 1048576;
    c->hc_mult = 4;
    c->hc_sinkhorn_iters = 20;
    c->rms_norm_eps = 1e-6;
    c->num_nextn_predict_layers = 1;
}

/* DeepSeek-V4-Flash: 43 main layers + 1 MTP, ratios 0,0 then 4/128 alternating from layer 2
 * (4 on even layers) up to layer 42, MTP entry 0. */
static inline void fx_flash(dsv4_config *c) {
    fx_base(c);
    c->vocab_size = 129280;
    c->hidden_size = 4096;
    c->num_hidden_layers = 43;
    c->num_attention_heads = 64;
    c->head_dim = 512;
    c->qk_rope_head_dim = 64;
    c->sliding_window = 128;
    c->index_n_heads = 64;
    c->index_head_dim = 128;
    c->index_topk = 512;
    for (int l = 0; l < 44; l++) c->compress_ratios[l] = (l < 2 || l == 43) ? 0 : (l % 2 == 0 ? 4 : 128);
}

static inline void fx_tiny(dsv4_config *c) {
    static const int r[7] = {0, 0, 4, 128, 4, 128, 0};
    fx_base(c);
    c->vocab_size = 512;
    c->hidden_size = 128;
    c->num_hidden_layers = 6;
    c->num_attention_heads = 4;
    c->head_dim = 64;
    c->qk_rope_head_dim = 16;
    c->sliding_window = 16;
    c->index_n_heads = 8;
    c->index_head_dim = 32;
    c->index_topk = 4;
    memcpy(c->compress_ratios, r, sizeof r);
}

static inline void fx_small(dsv4_config *c) {
    static const int r[8] = {0, 0, 4, 128, 4, 128, 4, 0};
    fx_base(c);
    c->vocab_size = 1024;
    c->hidden_size = 192;
    c->num_hidden_layers = 7;
    c->num_attention_heads = 4;
    c->head_dim = 128;
    c->qk_rope_head_dim = 32;
    c->sliding_window = 128;
    c->index_n_heads = 8;
    c->index_head_dim = 64;
    c->index_topk = 8;
    memcpy(c->compress_ratios, r, sizeof r);
}

/* Micro: 4 main layers (ratios 0, 4, 8, 4) + an MTP layer of ratio 4 (Flash's is 0: the
 * planner must treat the MTP layer like any other), hd 8, dI 4, win 6. B = lcm = 8, so a
 * block holds 2 CMP4 rows, 1 CMP8 row and 2 IDX rows. */
static inline void fx_micro(dsv4_config *c) {
    static const int r[5] = {0, 4, 8, 4, 4};
    fx_base(c);
    c->vocab_size = 64;
    c->hidden_size = 16;
    c->num_hidden_layers = 4;
    c->num_attention_heads = 2;
    c->head_dim = 8;
    c->qk_rope_head_dim = 4;
    c->sliding_window = 6;
    c->index_n_heads = 2;
    c->index_head_dim = 4;
    c->index_topk = 2;
    memcpy(c->compress_ratios, r, sizeof r);
}

#endif
