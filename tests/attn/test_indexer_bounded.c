/* test_indexer_bounded.c — dsv4_indexer_select_verified (attn/indexer.c) picks exactly the
 * entries dsv4_indexer_select picks from the exact scores, at every kernel level, for F32,
 * BF16 and FP4 keys (F3-rounded with their queries; their exact scores, from the bytes, must
 * be the bits of their F32 copies' at the portable level), on rows built to stress the
 * boundary: random keys; near-copies of one key (F32: scores a few ulps apart, all of them near the boundary, where the approximate
 * order is not the exact one; BF16 rounds most of them to copies); exact duplicates (ties, which the lower index wins); keys whose every head dot is
 * negative (relu zeros at the boundary); approximate scores moved by 0.95 of their bound
 * against the exact order (the worst the kernel's contract allows); a NaN or infinite key, a NaN head weight and keys
 * too large for the bound (each falls back to exact scores). It also counts how many
 * entries the bounded path rescored, which must stay a small part of topk for random keys
 * (else the bound is too loose to save anything: the entries whose bounds settle them are
 * not rescored) and cover the boundary for near copies. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn/attention.h"
#include "kernels/cpu.h"
#include "kernels/idx_approx.h"
#include "kernels/idx_scores.h"
#include "kernels/kv_rows.h"
#include "test.h"

static uint64_t rng = 0x13198a2e03707344ull;
static double urand(void) { /* uniform [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

enum { RANDOM, NEAR_COPIES, DUPLICATES, RELU_ZEROS, NAN_KEY, INF_KEY, NAN_WEIGHT, HUGE_KEYS, ADVERSARY, SPREAD,
       MIXED_Q, TINY_KEYS };
static const char *const kinds[] = {"random",       "near copies", "duplicates", "relu zeros", "NaN key",
                                    "infinite key", "NaN weight",  "huge keys",  "adversary",  "spread",
                                    "mixed-scale query", "tiny keys"};

/* The approximate kernel check() runs (dsv4_idx_approx_kernel): AUTO, or the BF16-dot one. */
static int KERNEL = DSV4_IDX_APPROX_AUTO;

/* The same selection in parts (dsv4_indexer_select_cut, as attention.c splits a decode
 * row's) for three splits: the bounds in ranges of 1, 37 and all entries, counted into 1, 2
 * and 3 histograms (ranges dealt round-robin, as threads take score tasks), the lists in 1,
 * 3 and 7 parts of uneven lengths (some empty): the entries and, where the bound holds, the
 * very entries rescored (cidx) must be select_verified's. */
static void check_cut(const dsv4_indexer_query *iq, const float *approx, const float *knorm, int n, int topk,
                      const int *sel_ref, int n_ref, const int *cidx_ref, int rescored_ref, const char *kind) {
    static const int chunk[3] = {1, 37, 1 << 30}, n_hist[3] = {1, 2, 3}, n_parts[3] = {1, 3, 7};
    uint32_t *hist = malloc(sizeof(uint32_t) * 6 * DSV4_INDEXER_HIST);
    float *lb = malloc(sizeof(float) * n), *fbuf = malloc(sizeof(float) * n);
    int *c = malloc(sizeof(int) * n), *work = malloc(sizeof(int) * n);
    int *cidx = malloc(sizeof(int) * n), *sel = malloc(sizeof(int) * topk);
    const void **ckeys = malloc(sizeof(void *) * n);
    for (int s = 0; s < 3; s++) {
        dsv4_indexer_cut cut = {0};
        int part0[8], cnt[7];
        cut.b = dsv4_idx_approx_query(iq->qI, iq->wI, iq->nI, iq->dI);
        memset(hist, 0, sizeof(uint32_t) * 6 * DSV4_INDEXER_HIST);
        for (int w0 = 0, t = 0; cut.b.valid && w0 < n; w0 += chunk[s], t++)
            cut.bad |= dsv4_indexer_bounds_part(&cut.b, approx, knorm, w0, n - w0 < chunk[s] ? n : w0 + chunk[s], lb,
                                                hist + (size_t)(t % n_hist[s]) * 2 * DSV4_INDEXER_HIST);
        const int np = n_parts[s];
        for (int p = 0; p <= np; p++) part0[p] = (int)((int64_t)n * p * p / (np * np)); /* uneven, ascending */
        if (np == 7) part0[2] = part0[1]; /* an empty part */
        cut.n_parts = np, cut.part0 = part0, cut.nc = cnt, cut.c = c;
        if (cut.b.valid && !cut.bad) {
            dsv4_indexer_cut_digit(hist, 2 * n_hist[s], topk, &cut);
            for (int p = 0; p < np; p++)
                dsv4_indexer_cut_part(&cut, approx, knorm, part0[p], part0[p + 1], c + part0[p], cnt + p);
        }
        for (int i = 0; i < n; i++) cidx[i] = -1;
        const int n_got = dsv4_indexer_select_cut(iq, approx, knorm, lb, &cut, n, topk, fbuf, cidx, ckeys, work, sel);
        CHECK_MSG(n_got == n_ref && memcmp(sel, sel_ref, sizeof(int) * (size_t)n_ref) == 0,
                  "level %d fmt %d %s nI %d dI %d n %d topk %d, split %d: the selection in parts differs", iq->simd,
                  iq->key_fmt, kind, iq->nI, iq->dI, n, topk, s);
        int rescored = 0;
        while (rescored < n && cidx[rescored] >= 0) rescored++;
        CHECK_MSG(!cut.b.valid || cut.bad ||
                      (rescored == rescored_ref && memcmp(cidx, cidx_ref, sizeof(int) * (size_t)rescored) == 0),
                  "level %d fmt %d %s n %d topk %d, split %d: %d entries rescored in parts, %d whole", iq->simd,
                  iq->key_fmt, kind, n, topk, s, rescored, rescored_ref);
    }
    free(hist); free(lb); free(fbuf); free(c); free(work); free(cidx); free(sel); free(ckeys);
}

/* dsv4_indexer_cut_part's lists hold every entry whose upper bound reaches tau at the edges of
 * tau's digit: tau the lowest value of its digit (1.0f: the low 21 bits of its key zero) with
 * entries equal to it, and tau +0 with -0 entries (equal as floats, their keys on either side
 * of the digit's edge; their upper bounds -0 + 0 are +0). A zero bound (scale and add 0)
 * makes the upper bounds the scores. */
static void check_cut_edges(void) {
    enum { N = 64, K = 16 };
    for (int edge = 0; edge < 2; edge++) {
        float approx[N], knorm[N], lb[N];
        uint32_t hist[2 * DSV4_INDEXER_HIST] = {0};
        for (int w = 0; w < N; w++) {
            const int r = (w * 37) % N; /* a shuffle of the ranks */
            approx[w] = r < K - 1 ? 3.0f : r < K + 2 ? (edge ? (r % 2 ? -0.0f : 0.0f) : 1.0f) : -0.5f;
            if (edge && r == K - 1) approx[w] = 0.0f; /* the K-th largest a +0 */
            knorm[w] = 1.0f;
        }
        dsv4_indexer_cut cut = {0};
        cut.b = (dsv4_idx_bound){.valid = 1, .scale = 0.0f, .add = 0.0f, .kmax = INFINITY};
        const int bad = dsv4_indexer_bounds_part(&cut.b, approx, knorm, 0, N, lb, hist);
        dsv4_indexer_cut_digit(hist, 2, K, &cut);
        int c[N], nc, work[N];
        dsv4_indexer_cut_part(&cut, approx, knorm, 0, N, c, &nc);
        const float tau = dsv4_indexer_kth_largest(lb, N, K, work);
        int missing = 0;
        for (int w = 0, i = 0; w < N; w++) {
            while (i < nc && c[i] < w) i++;
            missing += approx[w] >= tau && !(i < nc && c[i] == w);
        }
        CHECK_MSG(!bad && missing == 0, "tau %g (%s): %d entries reaching it left out of the candidates' lists",
                  (double)tau, edge ? "+0 beside -0" : "its digit's lowest value", missing);
    }
}

/* Returns how many entries the bounded path scored exactly (fbuf's use, from cidx). */
static int check(int level, int fmt, int kind, int nI, int dI, int n, int topk) {
    const dsv4_attn_ops *ops = dsv4_attn_ops_for(DSV4_SIMD_SCALAR);
    float *qI = malloc(sizeof(float) * nI * dI), *wI = malloc(sizeof(float) * nI);
    float *kb = malloc(sizeof(float) * (size_t)n * dI);
    uint8_t *packed = malloc((size_t)n * 2 * dI);
    const void **keys = malloc(sizeof(void *) * n), **ckeys = malloc(sizeof(void *) * n);
    float *exact = malloc(sizeof(float) * n), *approx = malloc(sizeof(float) * n);
    float *knorm = malloc(sizeof(float) * n), *fbuf = malloc(sizeof(float) * n);
    int *work = malloc(sizeof(int) * n), *cidx = malloc(sizeof(int) * n);
    int *sel_ref = malloc(sizeof(int) * topk), *sel = malloc(sizeof(int) * topk);
    for (int i = 0; i < nI * dI; i++) qI[i] = (float)urand();
    if (kind == MIXED_Q) /* heads at scales 2^-150 .. 2^40, a few values below the normals in each */
        for (int i = 0; i < nI * dI; i++) qI[i] = ldexpf(qI[i], i % 11 == 3 ? -135 : -150 + 38 * ((i / dI) % 6));
    if (fmt == DSV4_ROW_FP4) /* F3 rounds the queries too: the approximate pass by integer block dots */
        for (int h = 0; h < nI; h++) dsv4_row_round(fmt, qI + (size_t)h * dI, dI, 0);
    for (int h = 0; h < nI; h++) wI[h] = (float)(0.05 + fabs(urand()));
    if (kind == NAN_WEIGHT) wI[nI / 2] = NAN;
    for (int w = 0; w < n; w++) {
        float *k = kb + (size_t)w * dI;
        for (int c = 0; c < dI; c++) k[c] = (float)urand();
        if ((kind == NEAR_COPIES || kind == ADVERSARY) && w) /* a few ulps off key 0 in a few values: every score near the boundary */
            for (int c = 0; c < dI; c++) {
                const double r = urand();
                k[c] = r > 0.8 ? nextafterf(kb[c], INFINITY) : r < -0.8 ? nextafterf(kb[c], -INFINITY) : kb[c];
            }
        if (kind == TINY_KEYS && w % 2) /* every other key below the normals (BF16: read as 0 by vdpbf16ps) */
            for (int c = 0; c < dI; c++) k[c] *= 1e-39f;
        if (kind == DUPLICATES && w % 3) memcpy(k, k - (w % 3) * dI, sizeof(float) * dI);
        if (kind == RELU_ZEROS && w % 2) /* minus the sum of the query's heads, scaled: every dot < 0 */
            for (int c = 0; c < dI; c++) {
                double s = 0;
                for (int h = 0; h < nI; h++) s += qI[h * dI + c];
                k[c] = (float)(-s * (1.0 + 0.5 * fabs(urand())));
            }
        if (kind == HUGE_KEYS) k[0] = 1e36f;
        if (fmt != DSV4_ROW_F32) dsv4_row_round(fmt, k, dI, 0);
    }
    if (kind == SPREAD) { /* key w = c_w key 0: scores c_w s_0, adjacent ones ~half a bound apart, in a shuffled
                           * order, so that bounds settle some entries and not others */
        double s0 = 0, n0 = 0;
        for (int h = 0; h < nI; h++) {
            double d = 0;
            for (int c = 0; c < dI; c++) d += (double)qI[h * dI + c] * kb[c];
            s0 += wI[h] * (d > 0 ? d : 0);
        }
        for (int c = 0; c < dI; c++) n0 += (double)kb[c] * kb[c];
        const dsv4_idx_bound b = dsv4_idx_approx_query(qI, wI, nI, dI);
        const double delta = s0 > 0 ? 0.5 * b.scale * sqrt(n0) / s0 : 1e-3;
        for (int w = 1; w < n; w++) {
            const double c_w = 1.0 + (double)((w * 7919) % n) * delta; /* 7919 is prime: a permutation of 0..n-1 */
            for (int c = 0; c < dI; c++) kb[(size_t)w * dI + c] = (float)(c_w * kb[c]);
            if (fmt != DSV4_ROW_F32) dsv4_row_round(fmt, kb + (size_t)w * dI, dI, 0);
        }
    }
    if (kind == NAN_KEY) kb[(size_t)(n / 2) * dI + 1] = NAN;
    if (kind == INF_KEY) kb[(size_t)(n / 3) * dI] = INFINITY;
    for (int w = 0; w < n; w++) {
        keys[w] = kb + (size_t)w * dI;
        if (fmt != DSV4_ROW_F32) { /* kb then holds the stored values (FP4: a NaN or inf takes its block) */
            dsv4_row_pack(fmt, packed + (size_t)w * 2 * dI, kb + (size_t)w * dI, dI, 0);
            dsv4_row_unpack(fmt, kb + (size_t)w * dI, packed + (size_t)w * 2 * dI, dI, 0);
            keys[w] = packed + (size_t)w * 2 * dI;
        }
    }
    const int64_t lim = n;
    dsv4_idx_scores(level, ops, qI, 0, wI, 0, 1, &lim, keys, fmt, 0, n, nI, dI, exact, 0);
    if (fmt == DSV4_ROW_FP4) { /* the exact scores of FP4 keys (from their bytes at the AVX-512 levels): the
                                * bits of their F32 copies' at the portable level, the reference */
        const void **fk = malloc(sizeof(void *) * n);
        float *e32 = malloc(sizeof(float) * n);
        for (int w = 0; w < n; w++) fk[w] = kb + (size_t)w * dI;
        dsv4_idx_scores(DSV4_SIMD_SCALAR, ops, qI, 0, wI, 0, 1, &lim, fk, DSV4_ROW_F32, 0, n, nI, dI, e32, 0);
        CHECK_MSG(!memcmp(e32, exact, sizeof(float) * n), "level %d FP4 %s nI %d dI %d n %d: exact scores differ "
                  "from the F32 copies'", level, kinds[kind], nI, dI, n);
        free(fk), free(e32);
    }
    const int n_ref = dsv4_indexer_select(exact, n, topk, work, sel_ref);
    dsv4_idx_approx_kernel(level, KERNEL, qI, 0, wI, 0, 1, &lim, keys, fmt, 0, n, nI, dI, approx, knorm, 0);
    const dsv4_indexer_query iq = {level, ops, qI, wI, nI, dI, keys, fmt};
    if (kind == ADVERSARY || kind == SPREAD) { /* the worst errors the bound allows: the exact top-k scored low, the rest high */
        const dsv4_idx_bound b = dsv4_idx_approx_query(qI, wI, nI, dI);
        for (int w = 0, i = 0; w < n; w++) {
            const int in = i < n_ref && sel_ref[i] == w;
            i += in;
            approx[w] = exact[w] + (in ? -0.95f : 0.95f) * dsv4_idx_approx_bound(&b, knorm[w]);
        }
    }
    for (int i = 0; i < n; i++) cidx[i] = -1;
    const int n_got = dsv4_indexer_select_verified(&iq, approx, knorm, n, topk, fbuf, cidx, ckeys, work, sel);
    CHECK_MSG(n_got == n_ref && memcmp(sel, sel_ref, sizeof(int) * (size_t)n_ref) == 0,
              "level %d fmt %d %s nI %d dI %d n %d topk %d: the selections differ", level, fmt, kinds[kind], nI, dI,
              n, topk);
    int rescored = 0;
    while (rescored < n && cidx[rescored] >= 0) rescored++;
    check_cut(&iq, approx, knorm, n, topk, sel_ref, n_ref, cidx, rescored, kinds[kind]);
    free(qI); free(wI); free(kb); free(packed); free(keys); free(ckeys); free(exact); free(approx); free(knorm);
    free(fbuf); free(work); free(cidx); free(sel_ref); free(sel);
    return rescored;
}

/* The BF16-dot kernel's bound at the k-th place (rv-idx8): one head of weight 1, m keys A
 * along the query's BF16 residual r (approximate scores E ~ ||r|| low) and m keys B against it
 * (E high), each with some of q, B's approximate scores 1.6 E above A's but their exact ones
 * below: top m is every A. A bound under ~0.78 of the kernel's would be sure of the B keys and
 * select them (the residual's norm from half its values fails here); the kernel's (~1.01 E
 * ||K||, ||K|| ~1.03) makes both candidates, rescored. */
static void check_bf16_residual(int level, int dI, int m) {
    const int nI = 4, n = 2 * m;
    const dsv4_attn_ops *ops = dsv4_attn_ops_for(DSV4_SIMD_SCALAR);
    float *qI = malloc(sizeof(float) * nI * dI), *wI = calloc(nI, sizeof(float)), *qh = malloc(sizeof(float) * dI);
    float *ka = malloc(sizeof(float) * dI), *kb = malloc(sizeof(float) * dI);
    uint16_t *packed = malloc(sizeof(uint16_t) * (size_t)n * dI);
    const void **keys = malloc(sizeof(void *) * n), **ckeys = malloc(sizeof(void *) * n);
    float *exact = malloc(sizeof(float) * n), *approx = malloc(sizeof(float) * n), *knorm = malloc(sizeof(float) * n);
    float *fbuf = malloc(sizeof(float) * n);
    int *work = malloc(sizeof(int) * n), *cidx = malloc(sizeof(int) * n), *sel = malloc(sizeof(int) * m);
    int *sel_ref = malloc(sizeof(int) * m);
    for (int i = 0; i < nI * dI; i++) qI[i] = (float)urand();
    wI[1] = 1.0f;
    const float *q = qI + dI; /* head 1 */
    for (int c = 0; c < dI; c++) qh[c] = q[c];
    dsv4_row_round(DSV4_ROW_BF16, qh, dI, 0);
    double rn = 0, qn = 0, qr = 0;
    for (int c = 0; c < dI; c++) {
        const double r = (double)q[c] - qh[c];
        rn += r * r, qn += (double)qh[c] * qh[c], qr += qh[c] * r;
    }
    rn = sqrt(rn), qn = sqrt(qn);
    /* A = r / ||r|| + beta qh / ||qh|| (r . A ~ +||r||), B = -r / ||r|| + alpha qh / ||qh|| (~ -||r||); with
     * cr = qh . r / ||r||, A's approximate dot cr + beta ||qh|| > 0, B's -cr + alpha ||qh|| that plus 1.6 ||r|| */
    const double cr = qr / rn, beta = (fabs(cr) + 0.1 * qn) / qn, da = cr + beta * qn;
    const double alpha = (da + 1.6 * rn + cr) / qn;
    for (int c = 0; c < dI; c++) {
        const double r = (double)q[c] - qh[c];
        ka[c] = (float)(r / rn + beta * qh[c] / qn);
        kb[c] = (float)(-r / rn + alpha * qh[c] / qn);
    }
    dsv4_row_round(DSV4_ROW_BF16, ka, dI, 0);
    dsv4_row_round(DSV4_ROW_BF16, kb, dI, 0);
    for (int w = 0; w < n; w++) {
        dsv4_row_pack(DSV4_ROW_BF16, packed + (size_t)w * dI, w % 2 ? kb : ka, dI, 0);
        keys[w] = packed + (size_t)w * dI;
    }
    const int64_t lim = n;
    dsv4_idx_scores(level, ops, qI, 0, wI, 0, 1, &lim, keys, DSV4_ROW_BF16, 0, n, nI, dI, exact, 0);
    dsv4_idx_approx_kernel(level, DSV4_IDX_APPROX_BF16, qI, 0, wI, 0, 1, &lim, keys, DSV4_ROW_BF16, 0, n, nI, dI,
                           approx, knorm, 0);
    CHECK_MSG(exact[0] > exact[1] && approx[1] > approx[0], "dI %d: the rows are not built as meant (exact %g %g, "
              "approximate %g %g)", dI, (double)exact[0], (double)exact[1], (double)approx[0], (double)approx[1]);
    const int n_ref = dsv4_indexer_select(exact, n, m, work, sel_ref);
    const dsv4_indexer_query iq = {level, ops, qI, wI, nI, dI, keys, DSV4_ROW_BF16};
    const int n_got = dsv4_indexer_select_verified(&iq, approx, knorm, n, m, fbuf, cidx, ckeys, work, sel);
    CHECK_MSG(n_got == n_ref && memcmp(sel, sel_ref, sizeof(int) * (size_t)n_ref) == 0,
              "BF16 dots, residual-aligned keys at the k-th place, dI %d: the selections differ", dI);
    free(qI); free(wI); free(qh); free(ka); free(kb); free(packed); free(keys); free(ckeys); free(exact); free(approx);
    free(knorm); free(fbuf); free(work); free(cidx); free(sel); free(sel_ref);
}

/* AUTO's choice (attention.h): a flash_quarter CSA row bounds its scores from topk entries up
 * (a 4K-context row's 1088 among them), an indexer of fewer MACs a score than the minimum never. */
static void check_auto(void) {
    dsv4_config cfg = {0};
    cfg.index_n_heads = 16, cfg.index_head_dim = 128, cfg.index_topk = 512;
    dsv4_attn_ctx ctx = {0};
    ctx.cfg = &cfg, ctx.indexer_mode = DSV4_INDEXER_AUTO;
    CHECK_MSG(dsv4_attn_indexer_bounded(&ctx, 513) && dsv4_attn_indexer_bounded(&ctx, 1088) &&
                  dsv4_attn_indexer_bounded(&ctx, 8192),
              "AUTO: a flash_quarter CSA row past topk entries takes exact scores");
    cfg.index_n_heads = 4; /* 512 MACs a score */
    CHECK_MSG(!dsv4_attn_indexer_bounded(&ctx, 8192), "AUTO: bounds an indexer under the MACs' minimum");
}

int main(void) {
    check_auto();
    check_cut_edges();
    const int best = dsv4_cpu_simd() < dsv4_build_simd() ? dsv4_cpu_simd() : dsv4_build_simd();
    printf("kernel level: %s\n", dsv4_simd_name(best));
    for (int level = 0; level <= best; level++)
        for (int fmt = DSV4_ROW_BF16; fmt <= DSV4_ROW_F32; fmt += 2) {
            for (int kind = RANDOM; kind <= HUGE_KEYS; kind++) {
                check(level, fmt, kind, 2, 8, 300, 7);
                check(level, fmt, kind, 5, 37, 257, 16);
            }
            const int r = check(level, fmt, RANDOM, 16, 128, 2048, 64); /* flash_quarter's shape */
            const int c = check(level, fmt, NEAR_COPIES, 16, 128, 2048, 64);
            check(level, fmt, DUPLICATES, 16, 128, 2048, 64);
            check(level, fmt, RELU_ZEROS, 16, 128, 2048, 64);
            check(level, fmt, ADVERSARY, 16, 128, 2048, 64);
            check(level, fmt, SPREAD, 16, 128, 2048, 64);
            check(level, fmt, SPREAD, 5, 37, 257, 16);
            /* CSA rows at 2K-4K context (flash_quarter: 513-1088 entries, top 512), which AUTO
             * bounds too: the boundary among nearly all the entries */
            for (int kind = RANDOM; kind <= SPREAD; kind++)
                if (kind < NAN_KEY || kind > HUGE_KEYS) {
                    check(level, fmt, kind, 16, 128, 513, 512);
                    check(level, fmt, kind, 16, 128, 1088, 512);
                }
            /* a CSA row at 32K context (8192 entries, top 512): the thresholds' radix select at length */
            check(level, fmt, RANDOM, 16, 128, 8192, 512);
            check(level, fmt, SPREAD, 16, 128, 8192, 512);
            /* Flash's indexer (64 heads) at decode: one query, top 512 of a few thousand, through
             * the few-query kernel at the AVX-512 level */
            check(level, fmt, RANDOM, 64, 128, 3000, 512);
            check(level, fmt, NEAR_COPIES, 64, 128, 1500, 512);
            check(level, fmt, ADVERSARY, 64, 128, 1500, 512);
            check(level, fmt, RELU_ZEROS, 64, 128, 1500, 512);
            printf("level %d fmt %d, 2048 entries, top 64: %d rescored (random keys), %d (near copies)\n", level,
                   fmt, r, c);
            /* random keys: nearly every one of the top 64 is in by its bounds alone */
            CHECK_MSG(r >= 0 && r <= 32, "random keys: %d entries rescored for the top 64", r);
            CHECK_MSG(fmt != DSV4_ROW_F32 || c > 1024, "near copies: only %d rescored, the boundary was not exercised",
                      c);
        }
    /* the BF16-dot approximate kernel (where this CPU has it: the engine's prefill blocks on
     * BF16 keys), its bound ~20-40x the F32 kernel's on every kind of row, and queries of mixed
     * scales, keys below the normals */
    if (dsv4_idx_approx_bf16_ok(best)) {
        KERNEL = DSV4_IDX_APPROX_BF16;
        for (int kind = RANDOM; kind <= TINY_KEYS; kind++) {
            check(best, DSV4_ROW_BF16, kind, 5, 37, 257, 16);
            if (kind < NAN_KEY || kind > HUGE_KEYS) check(best, DSV4_ROW_BF16, kind, 16, 128, 1088, 512);
        }
        const int r = check(best, DSV4_ROW_BF16, RANDOM, 16, 128, 2048, 64);
        check(best, DSV4_ROW_BF16, SPREAD, 16, 128, 8192, 512);
        check(best, DSV4_ROW_BF16, ADVERSARY, 64, 128, 1500, 512);
        check(best, DSV4_ROW_BF16, MIXED_Q, 64, 128, 600, 256);
        check(best, DSV4_ROW_BF16, TINY_KEYS, 16, 128, 2048, 512);
        check_bf16_residual(best, 128, 40);
        check_bf16_residual(best, 37, 24);
        printf("BF16 dots, 2048 entries, top 64: %d rescored (random keys)\n", r);
        CHECK_MSG(r >= 0 && r <= 512, "BF16 dots, random keys: %d entries rescored for the top 64", r);
        KERNEL = DSV4_IDX_APPROX_AUTO;
    } else {
        printf("SKIPPED: the BF16-dot kernel (not at this level or CPU)\n");
    }
    /* FP4 keys (F3-rounded, as their queries): the exact rescoring from the keys' bytes, at the
     * AVX-512 levels only (below them FP4 keys are unpacked into the F32 path tested above, and
     * test_idx_scores compares that path at every level); a few rows of each kind at
     * flash_quarter's and Flash's shapes (the whole set above would add ~15 s sanitized) */
    for (int level = DSV4_SIMD_AVX512; level <= best; level++) {
        for (int kind = RANDOM; kind <= SPREAD; kind++) check(level, DSV4_ROW_FP4, kind, 16, 128, 300, 16);
        const int r = check(level, DSV4_ROW_FP4, RANDOM, 16, 128, 2048, 64);
        check(level, DSV4_ROW_FP4, NEAR_COPIES, 16, 128, 1088, 512);
        check(level, DSV4_ROW_FP4, SPREAD, 16, 128, 1088, 512);
        check(level, DSV4_ROW_FP4, ADVERSARY, 64, 128, 600, 256);
        CHECK_MSG(r >= 0 && r <= 32, "FP4, random keys: %d entries rescored for the top 64", r);
    }
    return test_report();
}
