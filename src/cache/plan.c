/* plan.c — the cache planner: every pool size, ring offset and table width, derived once
 * from (config, options), plus the six startup checks of serving.md §a.2.
 *
 * Nothing outside this file computes a cache size. The pools (pool.c) only read the plan.
 *
 * Storage codes (opts.row_bytes_per_value for WIN/CMP rows, idx_bytes_per_value for IDX;
 * kernels/kv_rows.h DSV4_ROW_*): 4 = F32, 2 = BF16, 1 = FP8-split (WIN/CMP: e4m3 nope
 *   channels + one ue8m0 byte per 64 nope channels padded to 8 + BF16 rope channels; the
 *   bytes are dsv4_row_bytes'), 3 = FP4 (IDX only: ceil(dI/2) bytes of e2m1 nibbles +
 *   ceil(dI/32) ue8m0 bytes; lossless only under fidelity item F3, so check 6 refuses it
 *   unless opts.idx_fp4_lossless says F3 is on).
 */
#include <stdint.h>
#include <string.h>

#include "cache/cache.h"
#include "cache/geom.h"
#include "util/err.h"
#include "util/hot.h"

/* ---- 64-bit arithmetic with overflow checks (check 5) --------------------------------- */

/* a*b for non-negative operands; 0 on overflow of int64. */
static int mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return 0;
    if (a != 0 && b > INT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static int add_ok(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0 || a > INT64_MAX - b) return 0;
    *out = a + b;
    return 1;
}

/* Product of up to four factors; names the quantity on overflow. */
static int mul4(int64_t a, int64_t b, int64_t c, int64_t d, int64_t *out, const char *what,
                dsv4_err *err) {
    int64_t x, y, z;
    if (!mul_ok(a, b, &x) || !mul_ok(x, c, &y) || !mul_ok(y, d, &z))
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "cache plan: %s overflows 64 bits (%lld x %lld x %lld x %lld)", what,
                         (long long)a, (long long)b, (long long)c, (long long)d);
    *out = z;
    return 0;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) { int64_t t = a % b; a = b; b = t; }
    return a;
}

static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/* ---- check 2: W_live ------------------------------------------------------------------- */

int dsv4_cache_w_live_bound(int win, int win_block, int delta) {
    int64_t L = (int64_t)win - 1 + delta; /* history and tail lengths, in positions */
    if (L <= 0) return 0;
    int64_t one = (L + win_block - 2) / win_block + 1;
    return (int)(2 * one);
}

/* Page intervals [a, b] (inclusive, a > b = empty); counts their union. */
static int64_t union_pages(int64_t iv[][2], int n) {
    /* insertion sort by start: n <= 3 */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && iv[j][0] < iv[j - 1][0]; j--) {
            int64_t t0 = iv[j][0], t1 = iv[j][1];
            iv[j][0] = iv[j - 1][0]; iv[j][1] = iv[j - 1][1];
            iv[j - 1][0] = t0; iv[j - 1][1] = t1;
        }
    int64_t total = 0, end = INT64_MIN;
    for (int i = 0; i < n; i++) {
        if (iv[i][0] > iv[i][1]) continue;
        int64_t a = iv[i][0] > end ? iv[i][0] : end + 1;
        if (iv[i][1] >= a) total += iv[i][1] - a + 1;
        if (iv[i][1] > end) end = iv[i][1];
    }
    return total;
}

/* Pages covering positions [lo, hi) into iv (empty interval when lo >= hi). */
static void pages_of(int64_t lo, int64_t hi, int bw, int64_t iv[2]) {
    if (lo >= hi) { iv[0] = 1; iv[1] = 0; return; }
    iv[0] = dsv4_floordiv(lo, bw);
    iv[1] = dsv4_floordiv(hi - 1, bw);
}

int dsv4_cache_check_w_live(int win, int win_block, int c_max, int delta, int keep_lag,
                            int bound, int *w_live, dsv4_err *err) {
    const int bw = win_block;
    /* A base start far enough from 0 that the history never clips: clipping only lowers
     * the count, and every residue s mod B_w is reached from it. */
    const int64_t base = ((int64_t)win + delta + bw) / bw * bw + bw;
    /* Once C >= win + B_w - 1 + delta the written tail starts past the history's last page,
     * and from there the count depends only on (s + C) mod B_w: sizes up to
     * win + 2 B_w + delta cover every case. (The spec's "win + B_w + 1" sizes are not
     * enough when win < B_w: tiny, win 16 with B_w 64, holds 4 pages at C = 121 and would be
     * planned with 3.) */
    const int64_t c_hi = (int64_t)win + 2 * bw + delta + 1;
    const int64_t c_lim = c_max < c_hi ? c_max : c_hi;
    int64_t best = 0;
    for (int j = 0; j < bw; j++) {
        const int64_t s = base + j;
        const int64_t keep_from = s - keep_lag;  /* min(n, m) at the last commit */
        for (int64_t C = 1; C <= c_lim; C++) {
            int64_t iv[3][2], lo, hi;
            pages_of(s - win + 1 - delta, s, bw, iv[0]);   /* history read from WIN */
            dsv4_win_write_range(s, C, win, &lo, &hi);     /* main call's writes */
            pages_of(lo, hi, bw, iv[1]);
            if (delta) {                                   /* MTP call, one position behind */
                dsv4_win_write_range(s - delta, C, win, &lo, &hi);
                pages_of(lo, hi, bw, iv[2]);
            } else {
                iv[2][0] = 1; iv[2][1] = 0;
            }
            /* Free-behind: no page the call reads may be dead after the last commit. */
            for (int64_t p = iv[0][0]; p <= iv[0][1]; p++)
                if (dsv4_win_page_dead(p, keep_from, win, bw))
                    return dsv4_fail(err, DSV4_ERR_ARG,
                                     "cache plan: free-behind rule frees WIN page %lld (positions "
                                     "%lld..%lld) that a call at s = %lld reads (history from %lld, "
                                     "win = %d, B_w = %d, keep_from = %lld)",
                                     (long long)p, (long long)(p * bw), (long long)(p * bw + bw - 1),
                                     (long long)s, (long long)(s - win + 1 - delta), win, bw,
                                     (long long)keep_from);
            int64_t held = union_pages(iv, 3);
            if (held > best) best = held;
            if (held > bound)
                return dsv4_fail(err, DSV4_ERR_ARG,
                                 "cache plan: enumerated W_live = %lld (s mod B_w = %d, C = %lld) "
                                 "exceeds the closed-form bound %d (win = %d, B_w = %d, delta = %d)",
                                 (long long)held, j, (long long)C, bound, win, bw, delta);
        }
    }
    *w_live = (int)best;
    return 0;
}

/* ---- check 3: ring safety -------------------------------------------------------------- */

DSV4_HOT_AT(dsv4_cache_check_ring, 0x710)
int dsv4_cache_check_ring(int r, int coff, int ring_len, int c_max, int d_max, dsv4_err *err) {
    const int64_t L = ring_len;
    if (L < 1)
        return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: ring length %d for ratio %d must be >= 1",
                         ring_len, r);
    const int64_t c_lim = c_max < L + (int64_t)coff * r ? c_max : L + (int64_t)coff * r;
    /* The spec walks L*r consecutive starts (every s mod L with every s mod r). The test
     * below depends on s only through s mod r (reads are relative to s and to multiples of
     * r; slot clashes depend on position differences), so when that walk would be long a
     * single period of r is just as exhaustive. */
    int64_t period = L * r;
    if (period > ((int64_t)1 << 26) / c_lim) period = r;
    /* Starts far from 0 so that no read range clips (clipping only removes reads). */
    const int64_t s0 = ((int64_t)coff * r / period + 2) * period;
    for (int64_t s = s0; s < s0 + period; s++) {
        for (int64_t C = 1; C <= c_lim; C++) {
            const int64_t wlo = s + C - L > s ? s + C - L : s, whi = s + C; /* ring writes */
            const int64_t k_first = C <= 1 + d_max ? 1 : C;  /* speculative: any k */
            for (int64_t k = k_first; k <= C; k++) {
                /* positions the next call reads from the ring */
                int64_t lo = (s + k) / r * r - (int64_t)(coff - 1) * r, hi = s + k;
                if (lo < 0) lo = 0;
                if (lo >= hi) continue;
                int64_t bad = -1;
                /* New positions must have been written (only the last L rows are). */
                if (hi > s && (lo > s ? lo : s) < wlo) bad = lo > s ? lo : s;
                /* Old positions p in [lo, min(hi, s)) must keep their slot: no write q with
                 * q - p a multiple of L. q - p spans [dmin, dmax], all > 0. */
                const int64_t ohi = hi < s ? hi : s;
                if (bad < 0 && lo < ohi) {
                    const int64_t dmin = wlo - (ohi - 1), dmax = whi - 1 - lo;
                    const int64_t m = dmax / L * L;  /* largest multiple of L <= dmax */
                    if (m >= dmin) {
                        /* a clobbered p: p in [lo, ohi) with p + m in [wlo, whi) */
                        bad = wlo - m > lo ? wlo - m : lo;
                    }
                }
                if (bad >= 0)
                    return dsv4_fail(err, DSV4_ERR_ARG,
                                     "cache plan: compressor ring of ratio %d (coff %d) has length "
                                     "%d, below the bound coff*r - 1 + d_max = %d: span start "
                                     "s = %lld, C = %lld, accepted k = %lld loses position %lld "
                                     "(slot %lld) that the next call reads",
                                     r, coff, ring_len, coff * r - 1 + d_max, (long long)s,
                                     (long long)C, (long long)k, (long long)bad,
                                     (long long)(bad % L));
            }
        }
    }
    return 0;
}

/* ---- row bytes and check 6 ------------------------------------------------------------- */

static int win_cmp_row_bytes(const dsv4_config *cfg, int code, int64_t *out, dsv4_err *err) {
    const int64_t hd = cfg->head_dim, rd = cfg->qk_rope_head_dim, nope = hd - rd;
    switch (code) {
    case 4: *out = 4 * hd; return 0;
    case 2: *out = 2 * hd; return 0;
    case 1:
        if (nope % 64 != 0)
            return dsv4_fail(err, DSV4_ERR_ARG,
                             "cache plan: FP8-split rows need (head_dim - qk_rope_head_dim) %% 64 "
                             "== 0; nope = %lld - %lld = %lld, remainder %lld",
                             (long long)hd, (long long)rd, (long long)nope, (long long)(nope % 64));
        /* e4m3 nope + ue8m0 scale bytes padded to 8 + BF16 rope */
        *out = nope + (nope / 64 + 7) / 8 * 8 + 2 * rd;
        return 0;
    default:
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "cache plan: row_bytes_per_value = %d; must be 4 (F32), 2 (BF16) or "
                         "1 (FP8-split)", code);
    }
}

static int idx_row_bytes(const dsv4_config *cfg, int code, int fp4_ok, int64_t *out, dsv4_err *err) {
    const int64_t dI = cfg->index_head_dim;
    switch (code) {
    case 4: *out = 4 * dI; return 0;
    case 2: *out = 2 * dI; return 0;
    case 3: /* FP4: dsv4_row_bytes' nibbles + block scales */
        if (!fp4_ok)
            return dsv4_fail(err, DSV4_ERR_ARG,
                             "cache plan: FP4 IDX rows (idx_bytes_per_value = 3, %lld + %lld bytes "
                             "per row) need fidelity item F3, which is not enabled",
                             (long long)((dI + 1) / 2), (long long)((dI + 31) / 32));
        *out = (dI + 1) / 2 + (dI + 31) / 32;
        return 0;
    default:
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "cache plan: idx_bytes_per_value = %d; must be 4 (F32), 2 (BF16) or "
                         "3 (FP4)", code);
    }
}

/* ---- the planner ----------------------------------------------------------------------- */

int dsv4_cache_plan_make(const dsv4_config *cfg, const dsv4_cache_opts *opts_in,
                         dsv4_cache_plan *plan, dsv4_err *err) {
    if (!cfg || !opts_in || !plan)
        return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: NULL argument");
    dsv4_cache_plan p;
    memset(&p, 0, sizeof p);
    dsv4_cache_opts o = *opts_in;

    /* -- the config fields the cache depends on (the parser validates the rest) -- */
    const int n_layers = dsv4_cfg_n_total_layers(cfg);
    if (cfg->num_hidden_layers < 1 || cfg->num_nextn_predict_layers < 0 || n_layers > DSV4_MAX_LAYERS)
        return dsv4_fail(err, DSV4_ERR_CONFIG,
                         "cache plan: %d main + %d MTP layers; need 1..%d in total",
                         cfg->num_hidden_layers, cfg->num_nextn_predict_layers, DSV4_MAX_LAYERS);
    if (cfg->head_dim < 1 || cfg->qk_rope_head_dim < 0 || cfg->qk_rope_head_dim > cfg->head_dim)
        return dsv4_fail(err, DSV4_ERR_CONFIG, "cache plan: head_dim = %d, qk_rope_head_dim = %d",
                         cfg->head_dim, cfg->qk_rope_head_dim);
    if (cfg->sliding_window < 1)
        return dsv4_fail(err, DSV4_ERR_CONFIG, "cache plan: sliding_window = %d; must be >= 1",
                         cfg->sliding_window);
    int any_csa = 0;
    for (int l = 0; l < n_layers; l++) {
        if (cfg->compress_ratios[l] < 0 || cfg->compress_ratios[l] > 65536)
            return dsv4_fail(err, DSV4_ERR_CONFIG,
                             "cache plan: compress_ratios[%d] = %d; must be 0..65536",
                             l, cfg->compress_ratios[l]);
        any_csa |= dsv4_cfg_is_csa(cfg, l);
    }
    if (any_csa && cfg->index_head_dim < 1)
        return dsv4_fail(err, DSV4_ERR_CONFIG,
                         "cache plan: index_head_dim = %d; CSA layers need >= 1", cfg->index_head_dim);

    /* -- distinct nonzero ratios, ascending -- */
    for (int l = 0; l < n_layers; l++) {
        int r = cfg->compress_ratios[l], i = 0;
        if (r == 0) continue;
        while (i < p.n_ratios && p.ratios[i] < r) i++;
        if (i < p.n_ratios && p.ratios[i] == r) continue;
        if (p.n_ratios == DSV4_MAX_RATIOS)
            return dsv4_fail(err, DSV4_ERR_CONFIG,
                             "cache plan: more than %d distinct compress ratios", DSV4_MAX_RATIOS);
        memmove(&p.ratios[i + 1], &p.ratios[i], (size_t)(p.n_ratios - i) * sizeof p.ratios[0]);
        p.ratios[i] = r;
        p.n_ratios++;
    }

    /* -- option defaults -- */
    if (o.block == 0) {
        int64_t l = 1;
        for (int i = 0; i < p.n_ratios; i++) {
            l = l / gcd64(l, p.ratios[i]) * p.ratios[i];
            if (l > INT32_MAX)
                return dsv4_fail(err, DSV4_ERR_ARG,
                                 "cache plan: lcm of compress ratios exceeds %d", INT32_MAX);
        }
        /* No compressed layers: B sizes nothing; keep the Flash value for readability. */
        o.block = p.n_ratios ? (int)l : 128;
    }
    if (o.win_block == 0) o.win_block = 64;
    if (o.c_max == 0) o.c_max = 2048;
    if (o.row_bytes_per_value == 0) o.row_bytes_per_value = 4;
    if (o.idx_bytes_per_value == 0) o.idx_bytes_per_value = 4;

    /* -- plain option ranges -- */
    if (o.max_context < 1)
        return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: max_context = %lld; must be >= 1",
                         (long long)o.max_context);
    if (o.max_seqs < 1)
        return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: max_seqs = %d; must be >= 1", o.max_seqs);
    if (o.d_max < 0)
        return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: d_max = %d; must be >= 0", o.d_max);
    if (o.block < 1)
        return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: block B = %d; must be >= 1", o.block);
    if (o.win_block < 1 || o.win_block > 4096)  /* check 2 enumerates B_w cases */
        return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: win_block B_w = %d; must be 1..4096",
                         o.win_block);
    if (o.c_max < 1)
        return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: c_max = %d; must be >= 1", o.c_max);

    /* -- check 1 -- */
    for (int i = 0; i < p.n_ratios; i++)
        if (o.block % p.ratios[i] != 0)
            return dsv4_fail(err, DSV4_ERR_ARG,
                             "cache plan: block B = %d is not a multiple of compress ratio %d "
                             "(a window would straddle two blocks)", o.block, p.ratios[i]);
    if (o.c_max < 1 + o.d_max)
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "cache plan: c_max = %d is below 1 + d_max = %d (a speculative span "
                         "would not fit)", o.c_max, 1 + o.d_max);
    if (o.max_context > INT64_MAX - o.d_max ||
        o.max_context + o.d_max > cfg->max_position_embeddings)
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "cache plan: max_context + d_max = %lld + %d exceeds "
                         "max_position_embeddings = %lld (the RoPE tables' range)",
                         (long long)o.max_context, o.d_max, (long long)cfg->max_position_embeddings);

    p.hd = cfg->head_dim;
    p.dI = cfg->index_head_dim;
    p.win = cfg->sliding_window;
    p.n_layers = n_layers;
    p.n_main_layers = cfg->num_hidden_layers;
    p.block = o.block;
    p.win_block = o.win_block;

    /* -- check 6 and row bytes -- */
    int rc;
    if ((rc = win_cmp_row_bytes(cfg, o.row_bytes_per_value, &p.win_row_bytes, err))) return rc;
    p.cmp_row_bytes = p.win_row_bytes;
    if (any_csa) {
        if ((rc = idx_row_bytes(cfg, o.idx_bytes_per_value, o.idx_fp4_lossless, &p.idx_row_bytes, err))) return rc;
    } else if (o.idx_bytes_per_value < 2 || o.idx_bytes_per_value > 4) {
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "cache plan: idx_bytes_per_value = %d; must be 4 (F32), 2 (BF16) or "
                         "3 (FP4)", o.idx_bytes_per_value);
    }

    /* -- layer placement and STATE rings (floats from the slot start) -- */
    int64_t off = 0;
    for (int l = 0; l < DSV4_MAX_LAYERS; l++) {
        p.cmp_pool[l] = p.cmp_slot[l] = p.idx_slot[l] = -1;
        p.ring_off[l] = p.idx_ring_off[l] = -1;
    }
    for (int l = 0; l < n_layers; l++) {
        const int r = cfg->compress_ratios[l];
        if (r == 0) continue;
        int i = 0;
        while (p.ratios[i] != r) i++;
        p.cmp_pool[l] = i;
        p.cmp_slot[l] = p.n_cmp_layers[i]++;
        const int coff = dsv4_cfg_coff(r);
        const int64_t L = (int64_t)coff * r - 1 + o.d_max;
        if (L > INT32_MAX)
            return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: ring length %lld of layer %d overflows",
                             (long long)L, l);
        p.ring_len[l] = (int)L;
        int64_t fl;
        p.ring_off[l] = off;                                   /* [L][2*coff*hd] */
        if ((rc = mul4(L, 2 * coff, p.hd, 1, &fl, "STATE ring", err))) return rc;
        if (!add_ok(off, fl, &off))
            return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: STATE slot size overflows 64 bits");
        if (dsv4_cfg_is_csa(cfg, l)) {
            p.idx_slot[l] = p.n_idx_layers++;
            p.idx_ring_off[l] = off;                           /* [L][2*2*dI] */
            if ((rc = mul4(L, 4, p.dI, 1, &fl, "STATE indexer ring", err))) return rc;
            if (!add_ok(off, fl, &off))
                return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: STATE slot size overflows 64 bits");
        }
    }
    p.slot_floats = off;
    if ((rc = mul4(off, 4, 1, 1, &p.slot_bytes, "STATE slot bytes", err))) return rc;

    /* -- page bytes: rows per page x row bytes x layers of the kind -- */
    if ((rc = mul4(p.win_block, p.win_row_bytes, n_layers, 1, &p.win_page_bytes, "WIN page bytes",
                   err))) return rc;
    p.block_bytes = 0;
    for (int i = 0; i < p.n_ratios; i++) {
        if ((rc = mul4(p.block / p.ratios[i], p.cmp_row_bytes, p.n_cmp_layers[i], 1,
                       &p.cmp_page_bytes[i], "CMP page bytes", err))) return rc;
        if (!add_ok(p.block_bytes, p.cmp_page_bytes[i], &p.block_bytes))
            return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: block bytes overflow 64 bits");
    }
    if (p.n_idx_layers) {
        if ((rc = mul4(p.block / 4, p.idx_row_bytes, p.n_idx_layers, 1, &p.idx_page_bytes,
                       "IDX page bytes", err))) return rc;
        if (!add_ok(p.block_bytes, p.idx_page_bytes, &p.block_bytes))
            return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: block bytes overflow 64 bits");
    }
    p.bytes_per_token = (double)p.block_bytes / p.block;

    /* -- check 2: W_live by enumeration against the closed form -- */
    const int delta = o.d_max > 0;  /* the MTP cache may lag the main cache by one */
    if ((rc = dsv4_cache_check_w_live(p.win, p.win_block, o.c_max, delta, delta,
                                      dsv4_cache_w_live_bound(p.win, p.win_block, delta),
                                      &p.w_live, err))) return rc;

    /* -- check 3: ring safety, once per distinct compressor geometry -- */
    for (int i = 0; i < p.n_ratios; i++) {
        const int r = p.ratios[i], coff = dsv4_cfg_coff(r);
        if ((rc = dsv4_cache_check_ring(r, coff, coff * r - 1 + o.d_max, o.c_max, o.d_max, err)))
            return rc;
    }

    /* -- budget, blocks, capacity -- */
    int64_t fixed, fixed_all, win_all;
    if ((rc = mul4(p.w_live, p.win_page_bytes, 1, 1, &win_all, "W_live x WIN page", err))) return rc;
    if (!add_ok(p.slot_bytes, win_all, &fixed))
        return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: per-sequence bytes overflow 64 bits");
    p.seq_fixed_bytes = fixed;
    if ((rc = mul4(o.max_seqs, fixed, 1, 1, &fixed_all, "max_seqs x per-sequence bytes", err)))
        return rc;
    p.win_pages = (int64_t)o.max_seqs * p.w_live;

    if (o.budget_bytes > (uint64_t)INT64_MAX)
        return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: budget %llu bytes exceeds %lld",
                         (unsigned long long)o.budget_bytes, (long long)INT64_MAX);
    if (p.block_bytes == 0) {
        /* No compressed layers: nothing is position-blocked; every sequence fits. */
        p.n_blocks = 0;
        if ((rc = mul4(o.max_seqs, o.max_context, 1, 1, &p.token_capacity, "token capacity", err)))
            return rc;
        if (o.budget_bytes && (int64_t)o.budget_bytes < fixed_all)
            return dsv4_fail(err, DSV4_ERR_ARG,
                             "cache plan: cache budget %llu bytes is below max_seqs x F = %d x "
                             "%lld = %lld bytes", (unsigned long long)o.budget_bytes, o.max_seqs,
                             (long long)fixed, (long long)fixed_all);
    } else if (o.budget_bytes == 0) {
        /* Exactly enough for max_seqs full-length sequences under the T_cap accounting:
         * N_B = max_seqs + ceil(max_seqs * max_context / B), so T_cap >= max_seqs * max_context. */
        int64_t toks;
        if ((rc = mul4(o.max_seqs, o.max_context, 1, 1, &toks, "max_seqs x max_context", err)))
            return rc;
        p.n_blocks = o.max_seqs + ceil_div(toks, p.block);
    } else {
        if ((int64_t)o.budget_bytes < fixed_all)
            return dsv4_fail(err, DSV4_ERR_ARG,
                             "cache budget %llu bytes is below the per-sequence fixed bytes "
                             "max_seqs x F = %d x %lld = %lld",
                             (unsigned long long)o.budget_bytes, o.max_seqs, (long long)fixed,
                             (long long)fixed_all);
        p.n_blocks = ((int64_t)o.budget_bytes - fixed_all) / p.block_bytes;
    }
    if (p.block_bytes) {
        int64_t t = 0;
        if (p.n_blocks > o.max_seqs &&
            (rc = mul4(p.n_blocks - o.max_seqs, p.block, 1, 1, &t, "token capacity", err)))
            return rc;
        p.token_capacity = t;
    }

    /* -- check 4 -- */
    if (p.token_capacity < o.max_context)
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "cache budget %llu bytes admits T_cap = %lld tokens per pool set; "
                         "max_context is %lld (N_B = %lld blocks of %lld bytes, max_seqs = %d, "
                         "F = %lld bytes)",
                         (unsigned long long)o.budget_bytes, (long long)p.token_capacity,
                         (long long)o.max_context, (long long)p.n_blocks,
                         (long long)p.block_bytes, o.max_seqs, (long long)fixed);

    /* -- check 5: page counts fit int32, totals in 64 bits and within the budget -- */
    if (p.n_blocks > INT32_MAX)
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "cache plan: N_B = %lld blocks exceeds the int32 page id bound %d",
                         (long long)p.n_blocks, INT32_MAX);
    if (p.win_pages > INT32_MAX)
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "cache plan: WIN pages max_seqs x W_live = %lld exceed the int32 page id "
                         "bound %d", (long long)p.win_pages, INT32_MAX);
    int64_t tw = ceil_div(o.max_context, p.block), tww = ceil_div(o.max_context + o.d_max, p.win_block);
    if (tw > INT32_MAX || tww > INT32_MAX)
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "cache plan: table widths %lld / %lld exceed the int32 bound %d",
                         (long long)tw, (long long)tww, INT32_MAX);
    p.blk_table_width = p.n_ratios ? (int)tw : 0;  /* no compressed pools, no block table */
    p.win_table_width = (int)tww;
    int64_t blk_all, total;
    if ((rc = mul4(p.n_blocks, p.block_bytes, 1, 1, &blk_all, "N_B x block bytes", err))) return rc;
    if (!add_ok(fixed_all, blk_all, &total))
        return dsv4_fail(err, DSV4_ERR_ARG, "cache plan: pool total overflows 64 bits");
    p.total_bytes = total;
    if (o.budget_bytes == 0)
        o.budget_bytes = (uint64_t)total;
    else if ((uint64_t)total > o.budget_bytes)
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "cache plan: pool total %lld bytes exceeds the budget %llu bytes",
                         (long long)total, (unsigned long long)o.budget_bytes);
    p.opts = o;
    *plan = p;
    return 0;
}
