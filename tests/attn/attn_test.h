/* attn_test.h — what the attention tests share: a seeded uniform generator and a config
 * with the two RoPE tables of a compressed model (YaRN on the compress table), small
 * enough for loops in double. */
#ifndef DSV4_TESTS_ATTN_TEST_H
#define DSV4_TESTS_ATTN_TEST_H

#include <stdint.h>
#include <string.h>

#include "model/config.h"

/* Uniform in [-1, 1) from an xorshift state. */
static inline float attn_urand(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 4503599627370496.0 - 1.0);
}

/* Hidden size D, head dim hd with rd rope channels, indexer head dim dI; the rest zero. */
static inline dsv4_config attn_test_cfg(int D, int hd, int rd, int dI) {
    dsv4_config c;
    memset(&c, 0, sizeof c);
    c.hidden_size = D;
    c.head_dim = hd;
    c.qk_rope_head_dim = rd;
    c.index_head_dim = dI;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000;
    c.compress_rope_theta = 160000;
    c.rope_yarn = 1;
    c.rope_factor = 16;
    c.rope_original_max_pos = 64;
    c.rope_beta_fast = 32;
    c.rope_beta_slow = 1;
    return c;
}

#endif
