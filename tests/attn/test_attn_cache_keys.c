/* test_attn_cache_keys.c — dsv4_attn_src_keys over the cache's source (attn/attention.c), the
 * attend phase's indexer key pointers by the cache's runs (dsv4_cache_idx_run: one
 * block-table lookup per block, then the block's rows at its stride), equals
 * dsv4_cache_idx_row key by key, and so does a source without runs: three sequences reserved
 * in interleaved calls of odd sizes from a shuffled free list (so consecutive blocks of a
 * sequence are not consecutive ids), every CSA layer, ranges starting and ending inside,
 * at and across block edges; for a config whose block holds 2 keys (micro: block 8) and one
 * whose block holds 32 (flash_quarter's layers: block 128 = lcm(4, 128)). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attention.h"
#include "cache/cache.h"
#include "cache/fixtures.h"
#include "test.h"

static void cfg_base(dsv4_config *c, int layers, const int *ratios, int hd, int rd, int win, int nI, int dI) {
    fx_base(c); /* the cache tests' plausible rest */
    c->vocab_size = 64;
    c->hidden_size = 16;
    c->num_hidden_layers = layers;
    c->num_attention_heads = 2;
    c->head_dim = hd;
    c->qk_rope_head_dim = rd;
    c->sliding_window = win;
    c->index_n_heads = 2;
    c->index_head_dim = dI;
    c->index_topk = 2;
    memcpy(c->compress_ratios, ratios, sizeof(int) * (size_t)(layers + 1));
}

static void check_cfg(const dsv4_config *cfg, int64_t max_context, const char *name) {
    dsv4_cache_opts o;
    memset(&o, 0, sizeof o);
    o.max_context = max_context;
    o.max_seqs = 3;
    dsv4_cache_plan p;
    dsv4_cache *c = NULL;
    dsv4_err e = {0};
    int rc = dsv4_cache_plan_make(cfg, &o, &p, &e);
    if (!rc) rc = dsv4_cache_create(&p, &c, &e);
    CHECK_MSG(rc == 0, "%s: %s", name, e.msg);
    if (rc) return;
    dsv4_cache_shuffle_free(c, 777);
    int seq[3];
    int64_t n[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) CHECK(dsv4_cache_seq_alloc(c, &seq[i], &e) == 0);
    static const int sizes[] = {5, 1, 17, 3, 130, 8, 1, 2, 40, 7, 257, 9, 33, 4};
    for (int step = 0; step < 60; step++) {
        const int q = step % 3;
        int cnt = sizes[(step * 5 + q) % 14];
        if (n[q] + cnt > max_context) continue;
        const int got = dsv4_cache_reserve(c, 1, &seq[q], &n[q], &cnt, 1, &e);
        CHECK_MSG(got == 0, "%s: %s", name, e.msg);
        if (got) break;
        n[q] += cnt;
        dsv4_cache_trim(c, seq[q], n[q]); /* the window pages behind the last win rows go back */
    }
    const int64_t per = dsv4_cache_get_plan(c)->block / 4;
    const void **keys = malloc(sizeof(void *) * (size_t)(max_context / 4 + 1));
    int checked = 0, checked_runs = 0, bad = 0, jumps = 0;
    for (int q = 0; q < 3; q++) {
        const int64_t e_n = n[q] / 4; /* keys whose window closed */
        for (int64_t b = 1; b * per < e_n; b++)
            jumps += dsv4_cache_idx_row(c, seq[q], 1, b * per) !=
                     (uint8_t *)dsv4_cache_idx_row(c, seq[q], 1, b * per - 1) + dsv4_cache_get_plan(c)->idx_row_bytes;
        for (int layer = 0; layer < cfg->num_hidden_layers; layer++) {
            if (cfg->compress_ratios[layer] != 4) continue;
            const int64_t r0[] = {0, 1, per - 1, per, per + 1, 3 * per - 1};
            for (size_t a = 0; a < sizeof r0 / sizeof r0[0]; a++)
                for (int64_t len = 1; r0[a] + len <= e_n; len = len * 3 + 1) {
                    const int64_t k0 = r0[a], k1 = k0 + len;
                    for (int64_t k = 0; k <= max_context / 4; k++) keys[k] = (const void *)&keys;
                    dsv4_attn_src src = dsv4_attn_src_cache(c);
                    const dsv4_batch_span sp = {seq[q], 0, 1, 0};
                    if (len % 2) src.key_run = NULL; /* key by key, the other path */
                    else checked_runs++;
                    dsv4_attn_src_keys(&src, &sp, layer, k0, k1, keys);
                    for (int64_t k = k0; k < k1; k++) bad += keys[k] != dsv4_cache_idx_row(c, seq[q], layer, k);
                    bad += k0 > 0 && keys[k0 - 1] != (const void *)&keys; /* nothing outside the range */
                    bad += keys[k1] != (const void *)&keys;
                    checked++;
                }
        }
    }
    CHECK_MSG(bad == 0, "%s: %d pointers differ from dsv4_cache_idx_row (%d ranges)", name, bad, checked);
    CHECK_MSG(checked > 20 && checked_runs > 10 && jumps > 0, "%s: %d ranges, %d block jumps: the layout was not exercised", name, checked,
              jumps);
    free(keys);
    dsv4_cache_free(c);
}

int main(void) {
    dsv4_config cfg;
    static const int micro[5] = {0, 4, 8, 4, 4}; /* block 8: 2 keys a block */
    cfg_base(&cfg, 4, micro, 8, 4, 6, 2, 4);
    check_cfg(&cfg, 1200, "micro");
    static const int quarter[5] = {0, 4, 128, 4, 0}; /* flash_quarter's ratios: block 128, 32 keys a block */
    cfg_base(&cfg, 4, quarter, 64, 16, 16, 2, 16);
    check_cfg(&cfg, 4096, "quarter");
    return test_report();
}
