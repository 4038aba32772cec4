/* test_cache_plan.c — the planner against the serving.md §a.2 reference table (Flash, BF16
 * rows), the golden configs' layouts, the 1M-position geometry, and each startup check
 * firing with its message on crafted bad options. */
#include <stdint.h>

#include "cache/cache.h"
#include "cache/geom.h"
#include "fixtures.h"
#include "test.h"

static dsv4_cache_opts flash_opts(void) {
    dsv4_cache_opts o;
    memset(&o, 0, sizeof o);
    o.max_context = 131072;
    o.max_seqs = 64;
    o.c_max = 2048;
    o.d_max = 1;
    o.budget_bytes = 64ull << 30;
    o.row_bytes_per_value = 2;
    o.idx_bytes_per_value = 2;
    return o;
}

/* STATE slot floats from the spec's formula, summed layer by layer from the config. */
static int64_t spec_slot_floats(const dsv4_config *c, int d_max) {
    int64_t f = 0;
    for (int l = 0; l < c->num_hidden_layers + c->num_nextn_predict_layers; l++) {
        int r = c->compress_ratios[l];
        if (r == 4) f += (int64_t)(2 * 4 - 1 + d_max) * (2 * 2 * c->head_dim + 2 * 2 * c->index_head_dim);
        else if (r > 0) f += (int64_t)(r - 1 + d_max) * (2 * c->head_dim);
    }
    return f;
}

/* The STATE rings tile the slot: disjoint, in bounds, and together exactly slot_floats. */
static void check_ring_tiling(const dsv4_config *c, const dsv4_cache_plan *p) {
    int64_t covered = 0;
    int64_t lo[2 * DSV4_MAX_LAYERS], hi[2 * DSV4_MAX_LAYERS];
    int n = 0;
    for (int l = 0; l < p->n_layers; l++) {
        int r = c->compress_ratios[l];
        CHECK(p->ring_len[l] == (r ? (r == 4 ? 8 : r) - 1 + p->opts.d_max : 0));
        CHECK((p->ring_off[l] >= 0) == (r > 0));
        CHECK((p->idx_ring_off[l] >= 0) == (r == 4));
        if (r > 0) {
            lo[n] = p->ring_off[l];
            hi[n] = lo[n] + (int64_t)p->ring_len[l] * 2 * (r == 4 ? 2 : 1) * p->hd;
            covered += hi[n] - lo[n];
            n++;
        }
        if (r == 4) {
            lo[n] = p->idx_ring_off[l];
            hi[n] = lo[n] + (int64_t)p->ring_len[l] * 4 * p->dI;
            covered += hi[n] - lo[n];
            n++;
        }
    }
    int overlap = 0, oob = 0;
    for (int i = 0; i < n; i++) {
        if (lo[i] < 0 || hi[i] > p->slot_floats) oob++;
        for (int j = i + 1; j < n; j++)
            if (lo[i] < hi[j] && lo[j] < hi[i]) overlap++;
    }
    CHECK(overlap == 0);
    CHECK(oob == 0);
    CHECK(covered == p->slot_floats);
}

static void test_flash_table(void) {
    dsv4_config c;
    fx_flash(&c);
    dsv4_cache_opts o = flash_opts();
    dsv4_cache_plan p;
    dsv4_err e = {0};
    int rc = dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    /* serving.md §a.2 table */
    CHECK(p.block == 128 && p.win_block == 64);
    CHECK(p.n_layers == 44);
    CHECK(p.win_page_bytes == 2883584);
    CHECK(p.w_live == 6);
    CHECK(p.slot_bytes == 12206080);
    CHECK(p.n_ratios == 2 && p.ratios[0] == 4 && p.ratios[1] == 128);
    CHECK(p.cmp_page_bytes[0] == 688128);
    CHECK(p.cmp_page_bytes[1] == 20480);
    CHECK(p.idx_page_bytes == 172032);
    CHECK(p.block_bytes == 688128 + 20480 + 172032);
    CHECK_NEAR(p.bytes_per_token, 6880.0, 0);
    CHECK(p.seq_fixed_bytes == 29507584);
    CHECK(p.n_blocks == 75889);
    CHECK(p.token_capacity == 9705600);
    /* derived by the spec's definitions */
    CHECK(p.n_cmp_layers[0] == 21 && p.n_cmp_layers[1] == 20 && p.n_idx_layers == 21);
    CHECK(p.win_pages == 64 * 6);
    CHECK(p.blk_table_width == 1024);
    CHECK(p.win_table_width == 2049);        /* ceil(131073 / 64) */
    CHECK(p.total_bytes <= (int64_t)(64ull << 30));
    CHECK(p.total_bytes == 64 * 29507584LL + 75889LL * 880640);
    CHECK(p.opts.budget_bytes == 64ull << 30);
    CHECK(p.slot_floats * 4 == p.slot_bytes);
    CHECK(p.slot_floats == spec_slot_floats(&c, 1));
    /* placement: layer 2 is the first CSA layer, 3 the first HCA, 43 (MTP) is SWA */
    CHECK(p.cmp_pool[2] == 0 && p.cmp_slot[2] == 0 && p.idx_slot[2] == 0);
    CHECK(p.cmp_pool[3] == 1 && p.cmp_slot[3] == 0 && p.idx_slot[3] == -1);
    CHECK(p.cmp_pool[42] == 0 && p.cmp_slot[42] == 20 && p.idx_slot[42] == 20);
    CHECK(p.cmp_pool[41] == 1 && p.cmp_slot[41] == 19);
    CHECK(p.cmp_pool[0] == -1 && p.cmp_pool[1] == -1 && p.cmp_pool[43] == -1);
    CHECK(p.idx_slot[43] == -1 && p.ring_len[43] == 0);
    CHECK(p.ring_len[2] == 8 && p.ring_len[3] == 128);
    check_ring_tiling(&c, &p);

    /* decode only (C_max = 1 + D_max = 2): W_live 4 */
    o = flash_opts();
    o.c_max = 2;
    rc = dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(p.w_live == 4);

    /* D_max = 0: STATE slot 11,909,120 B, rings 7 / 127 */
    o = flash_opts();
    o.d_max = 0;
    rc = dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(p.slot_bytes == 11909120);
    CHECK(p.ring_len[2] == 7 && p.ring_len[3] == 127);
    CHECK(p.win_table_width == 2048);

    /* per token: F32 13,760; FP8-split + BF16 IDX 4,501.25 */
    o = flash_opts();
    o.row_bytes_per_value = 4;
    o.idx_bytes_per_value = 4;
    rc = dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK_NEAR(p.bytes_per_token, 13760.0, 0);
    CHECK(p.win_row_bytes == 2048 && p.idx_row_bytes == 512);
    o = flash_opts();
    o.row_bytes_per_value = 1;
    rc = dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(p.cmp_row_bytes == 584);          /* 448 + 8 + 128 */
    CHECK_NEAR(p.bytes_per_token, 4501.25, 0);

    /* budget 0: exactly enough for every sequence at full length */
    o = flash_opts();
    o.budget_bytes = 0;
    rc = dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(p.token_capacity >= 64LL * 131072);
    CHECK(p.token_capacity < 64LL * 131072 + 128);
    CHECK(p.opts.budget_bytes == (uint64_t)p.total_bytes);
}

/* One 1,048,576-token Flash sequence: 7.21 GB of CMP + IDX in BF16 (serving.md §a.2). */
static void test_flash_1m(void) {
    dsv4_config c;
    fx_flash(&c);
    dsv4_cache_opts o = flash_opts();
    o.max_context = 1048576;
    o.max_seqs = 1;
    o.budget_bytes = 0;
    o.d_max = 0;  /* max_context + d_max must fit max_position_embeddings = 1,048,576 */
    dsv4_cache_plan p;
    dsv4_err e = {0};
    int rc = dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(p.blk_table_width == 8192);
    CHECK(p.win_table_width == 16384);
    const int64_t seq_bytes = (int64_t)p.blk_table_width * p.block_bytes;
    CHECK(seq_bytes == 1048576LL * 6880);
    CHECK_NEAR(seq_bytes / 1e9, 7.21, 0.005);
    CHECK(p.n_blocks == 8193 && p.token_capacity == 1048576);
    CHECK(p.total_bytes == p.seq_fixed_bytes + 8193LL * 880640);

    /* with MTP the last position must leave room for the draft */
    o.d_max = 1;
    rc = dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "max_context + d_max = 1048576 + 1 exceeds max_position_embeddings = 1048576");
    CHECK(rc == DSV4_ERR_ARG);
    o.max_context = 1048575;
    rc = dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(p.win_table_width == 16384 && p.blk_table_width == 8192);
}

static void test_golden_layouts(void) {
    dsv4_config cs[2];
    fx_tiny(&cs[0]);
    fx_small(&cs[1]);
    for (int k = 0; k < 2; k++) {
        const dsv4_config *c = &cs[k];
        dsv4_cache_opts o;
        memset(&o, 0, sizeof o);
        o.max_context = 4096;
        o.max_seqs = 3;
        o.d_max = 1;
        dsv4_cache_plan p;
        dsv4_err e = {0};
        int rc = dsv4_cache_plan_make(c, &o, &p, &e);
        CHECK_MSG(rc == 0, "%s", e.msg);
        /* defaults filled in */
        CHECK(p.opts.block == 128 && p.opts.win_block == 64 && p.opts.c_max == 2048);
        CHECK(p.opts.row_bytes_per_value == 4 && p.opts.idx_bytes_per_value == 4);
        const int nl = c->num_hidden_layers + 1;
        CHECK(p.n_layers == nl);
        CHECK(p.hd == c->head_dim && p.dI == c->index_head_dim && p.win == c->sliding_window);
        int n4 = 0, n128 = 0;
        for (int l = 0; l < nl; l++) {
            int r = c->compress_ratios[l];
            if (r == 4) { CHECK(p.cmp_pool[l] == 0 && p.cmp_slot[l] == n4 && p.idx_slot[l] == n4); n4++; }
            else if (r == 128) { CHECK(p.cmp_pool[l] == 1 && p.cmp_slot[l] == n128 && p.idx_slot[l] == -1); n128++; }
            else CHECK(p.cmp_pool[l] == -1 && p.idx_slot[l] == -1);
        }
        CHECK(p.n_cmp_layers[0] == n4 && p.n_cmp_layers[1] == n128 && p.n_idx_layers == n4);
        CHECK(p.win_page_bytes == 64LL * 4 * c->head_dim * nl);
        CHECK(p.cmp_page_bytes[0] == 32LL * 4 * c->head_dim * n4);
        CHECK(p.cmp_page_bytes[1] == 1LL * 4 * c->head_dim * n128);
        CHECK(p.idx_page_bytes == 32LL * 4 * c->index_head_dim * n4);
        CHECK(p.slot_floats == spec_slot_floats(c, 1));
        check_ring_tiling(c, &p);
        /* closed form for win <= B_w: history and tail each span at most 2 pages */
        CHECK(p.w_live == (c->sliding_window <= 64 ? 4 : 6));
        CHECK(p.n_blocks == 3 + 3 * 4096 / 128);
        CHECK(p.token_capacity == 3 * 4096);
    }
}

/* An MTP layer with a nonzero ratio gets CMP/IDX rows and rings like a main layer; a
 * config without compressed layers has no block pools. */
static void test_general_layers(void) {
    dsv4_config c;
    fx_micro(&c);
    dsv4_cache_opts o;
    memset(&o, 0, sizeof o);
    o.max_context = 100;
    o.max_seqs = 2;
    o.d_max = 1;
    dsv4_cache_plan p;
    dsv4_err e = {0};
    int rc = dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(p.block == 8);                     /* lcm(4, 8) */
    CHECK(p.n_ratios == 2 && p.ratios[0] == 4 && p.ratios[1] == 8);
    CHECK(p.cmp_pool[4] == 0 && p.cmp_slot[4] == 2 && p.idx_slot[4] == 2 && p.ring_len[4] == 8);
    CHECK(p.ring_len[2] == 8);               /* ratio 8, no overlap: 8 - 1 + 1 */
    check_ring_tiling(&c, &p);
    CHECK(p.blk_table_width == 13 && p.win_table_width == 2);  /* ceil(100/8), ceil(101/64) */

    /* lcm of unusual ratios */
    c.compress_ratios[2] = 6;
    rc = dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(p.block == 12 && p.n_ratios == 2 && p.ratios[1] == 6);

    /* no compressed layers at all */
    for (int l = 0; l < 5; l++) c.compress_ratios[l] = 0;
    rc = dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(p.n_ratios == 0 && p.block_bytes == 0 && p.n_blocks == 0 && p.blk_table_width == 0);
    CHECK(p.slot_floats == 0 && p.n_idx_layers == 0);
    CHECK(p.total_bytes == 2 * p.seq_fixed_bytes);
}

/* Each startup check fires, with a message naming the quantity, its value and the bound. */
static void test_checks_fire(void) {
    dsv4_config c;
    fx_flash(&c);
    dsv4_cache_plan p;
    dsv4_err e;
    dsv4_cache_opts o;

    /* check 1 */
    o = flash_opts(); o.block = 96;
    CHECK(dsv4_cache_plan_make(&c, &o, &p, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "block B = 96 is not a multiple of compress ratio 128");
    o = flash_opts(); o.block = 130;
    dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "block B = 130 is not a multiple of compress ratio 4");
    o = flash_opts(); o.c_max = 1;
    dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "c_max = 1 is below 1 + d_max = 2");
    o = flash_opts(); o.max_context = 1048576;
    dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "exceeds max_position_embeddings = 1048576");

    /* check 2: the enumeration against a closed form one too small, and the free-behind
     * rule applied at n instead of min(n, m) while the MTP layer reads one position further
     * back */
    int wl = -1;
    int bound = dsv4_cache_w_live_bound(128, 64, 1);
    CHECK(bound == 6);
    CHECK(dsv4_cache_check_w_live(128, 64, 2048, 1, 1, bound, &wl, &e) == 0 && wl == 6);
    CHECK(dsv4_cache_check_w_live(128, 64, 2048, 1, 1, bound - 1, &wl, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "enumerated W_live = 6");
    CHECK_ERR(e, DSV4_ERR_ARG, "exceeds the closed-form bound 5");
    CHECK(dsv4_cache_check_w_live(128, 64, 2048, 1, 0, bound, &wl, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "free-behind rule frees WIN page");

    /* check 3: a ring one row short (the spec's D_max slack dropped) */
    CHECK(dsv4_cache_check_ring(4, 2, 8, 2048, 1, &e) == 0);
    CHECK(dsv4_cache_check_ring(128, 1, 128, 2048, 1, &e) == 0);
    CHECK(dsv4_cache_check_ring(4, 2, 7, 2048, 1, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "ratio 4 (coff 2) has length 7, below the bound coff*r - 1 + d_max = 8");
    CHECK(dsv4_cache_check_ring(128, 1, 127, 2048, 1, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "ratio 128 (coff 1) has length 127, below the bound");
    CHECK(dsv4_cache_check_ring(4, 2, 6, 2048, 0, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "that the next call reads");

    /* check 4: 2 GiB admits N_B = floor((2^31 - 64 F) / P_B) = 294 blocks, i.e.
     * T_cap = (294 - 64) * 128 = 29,440 tokens (F, P_B from the spec table) */
    o = flash_opts(); o.budget_bytes = 2ull << 30;
    CHECK(dsv4_cache_plan_make(&c, &o, &p, &e) == DSV4_ERR_ARG);
    CHECK_ERR(e, DSV4_ERR_ARG, "cache budget 2147483648 bytes admits T_cap = 29440 tokens per pool set; max_context is 131072");
    o = flash_opts(); o.budget_bytes = 1ull << 30;   /* below 64 F = 1,888,485,376 */
    dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "cache budget 1073741824 bytes is below the per-sequence fixed bytes max_seqs x F = 64 x 29507584 = 1888485376");
    o = flash_opts(); o.budget_bytes = 3ull << 30;   /* fits T_cap: passes */
    CHECK(dsv4_cache_plan_make(&c, &o, &p, &e) == 0);

    /* check 5: int32 page ids, 64-bit products */
    o = flash_opts(); o.max_seqs = 300000; o.budget_bytes = 0; o.max_context = 1048575;
    dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "exceeds the int32 page id bound 2147483647");
    {
        dsv4_config big;
        fx_flash(&big);
        big.max_position_embeddings = INT64_MAX;
        o = flash_opts(); o.budget_bytes = 0; o.max_context = INT64_MAX / 4; o.max_seqs = 1000;
        CHECK(dsv4_cache_plan_make(&big, &o, &p, &e) == DSV4_ERR_ARG);
        CHECK_ERR(e, DSV4_ERR_ARG, "max_seqs x max_context overflows 64 bits");
    }
    o = flash_opts(); o.budget_bytes = (uint64_t)INT64_MAX + 1;
    dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "budget 9223372036854775808 bytes exceeds");

    /* check 6 */
    dsv4_config t;
    fx_tiny(&t);
    o = flash_opts(); o.max_context = 4096; o.budget_bytes = 0; o.row_bytes_per_value = 1;
    dsv4_cache_plan_make(&t, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "FP8-split rows need (head_dim - qk_rope_head_dim) % 64 == 0; nope = 64 - 16 = 48");
    o.row_bytes_per_value = 2; o.idx_bytes_per_value = 3;
    dsv4_cache_plan_make(&t, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "FP4 IDX rows (idx_bytes_per_value = 3, 16 + 1 bytes");
    CHECK_ERR(e, DSV4_ERR_ARG, "need fidelity item F3");
    o.idx_fp4_lossless = 1; /* under F3: dI/2 nibble bytes + dI/32 scale bytes */
    CHECK(dsv4_cache_plan_make(&t, &o, &p, &e) == 0 && p.idx_row_bytes == 16 + 1);
    o.idx_bytes_per_value = 1; /* no FP8 IDX rows */
    dsv4_cache_plan_make(&t, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "idx_bytes_per_value = 1; must be 4 (F32), 2 (BF16) or 3 (FP4)");

    /* plain option ranges */
    o = flash_opts(); o.max_seqs = 0;
    dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "max_seqs = 0");
    o = flash_opts(); o.max_context = 0;
    dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "max_context = 0");
    o = flash_opts(); o.row_bytes_per_value = 3;
    dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "row_bytes_per_value = 3");
    o = flash_opts(); o.win_block = -4;
    dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "win_block B_w = -4");
    o = flash_opts(); o.d_max = -1;
    dsv4_cache_plan_make(&c, &o, &p, &e);
    CHECK_ERR(e, DSV4_ERR_ARG, "d_max = -1");
    {
        dsv4_config bad;
        fx_flash(&bad);
        bad.compress_ratios[5] = -4;
        o = flash_opts();
        CHECK(dsv4_cache_plan_make(&bad, &o, &p, &e) == DSV4_ERR_CONFIG);
        CHECK_ERR(e, DSV4_ERR_CONFIG, "compress_ratios[5] = -4");
    }
    CHECK(dsv4_cache_plan_make(NULL, &o, &p, &e) == DSV4_ERR_ARG);
}

int main(void) {
    test_flash_table();
    test_flash_1m();
    test_golden_layouts();
    test_general_layers();
    test_checks_fire();
    return test_report();
}
