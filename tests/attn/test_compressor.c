/* test_compressor.c — the KV compressor (spec/model.md §5.8) against the definition written
 * out again in double precision, independent of compressor.c:
 *
 *   - every window closing in [0, N) of a main CSA compressor (r = 4, overlap: A halves of
 *     window w-1 then B halves of window w, w = 0 without A), an HCA one (r = 8, no
 *     overlap) and the indexer's (r = 4, d = dI): softmax pooling per channel, RMSNorm with
 *     the compressor's weight, RoPE at the window start w*r (the rotation in double from
 *     the table's frequencies, model.md §4); max-abs and max-rel reported, max-rel
 *     <= 1e-5 asserted;
 *   - chunked schedules (spans [0,13), [13,30), [30,N) with the earlier positions from the
 *     history source, as a sequence's ring gives them) give the one-call entries bit for
 *     bit, and no window that does not close in a span is written by it;
 *   - the projections: dsv4_compress_ops' products and dsv4_compress_add_ape against
 *     a_t = x_t wkv^T, b_t = x_t wgate^T + ape[t mod r] in double.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn/attention.h"
#include "attn_test.h"
#include "kernels/kv_rows.h"
#include "test.h"

enum { D = 24, HD = 16, RD = 8, DI = 8, N = 37 };

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(void) { return attn_urand(&rng_state); }

static dsv4_config test_cfg(void) { return attn_test_cfg(D, HD, RD, DI); }

/* ---- the history source: projections of positions < s, entries written by the pool ---- */

typedef struct history {
    const float *pa, *pb; /* (N, W) every position's projections (the ring's contents) */
    int W;
    float *entries;       /* (N, d) entries by window index */
    int d;
    int written[N];       /* times window w was written */
} history;

static void hist_ring_row(void *u, const dsv4_batch_span *sp, int layer, int indexer, int64_t pos,
                          const float **a, const float **b) {
    (void)sp; (void)layer; (void)indexer;
    const history *h = u;
    *a = h->pa + pos * h->W;
    *b = h->pb + pos * h->W;
}

static void *hist_entry(void *u, const dsv4_batch_span *sp, int layer, int indexer, int64_t w) {
    (void)sp; (void)layer; (void)indexer;
    history *h = u;
    h->written[w]++;
    return h->entries + w * h->d;
}

/* ---- the definition in double ---------------------------------------------------------- */

/* Entry w of a compressor of ratio r, width d (coff = 2 iff r == 4) from the projections
 * pa, pb (N, coff*d): pooled, normalised and rotated at w*r. */
static void ref_entry(const dsv4_config *c, const dsv4_rope *rope, int r, int d, const float *pa,
                      const float *pb, const float *norm, int64_t w, double *out) {
    const int coff = r == 4 ? 2 : 1, W = coff * d;
    double p[64];
    for (int ch = 0; ch < d; ch++) {
        double av[16], bv[16];
        int n = 0;
        if (coff == 2 && w > 0) /* A series: first halves of window w-1 */
            for (int64_t t = (w - 1) * r; t < w * r; t++) av[n] = pa[t * W + ch], bv[n++] = pb[t * W + ch];
        const int off = coff == 2 ? d : 0; /* B series: second halves (all of it without overlap) */
        for (int64_t t = w * r; t < (w + 1) * r; t++) av[n] = pa[t * W + off + ch], bv[n++] = pb[t * W + off + ch];
        double m = -INFINITY, den = 0, num = 0;
        for (int j = 0; j < n; j++) m = bv[j] > m ? bv[j] : m;
        for (int j = 0; j < n; j++) den += exp(bv[j] - m), num += exp(bv[j] - m) * av[j];
        p[ch] = num / den;
    }
    double ss = 0;
    for (int ch = 0; ch < d; ch++) ss += p[ch] * p[ch];
    const double inv = 1.0 / sqrt(ss / d + c->rms_norm_eps);
    for (int ch = 0; ch < d; ch++) out[ch] = p[ch] * inv * norm[ch];
    /* interleaved rotation of the last rd channels at the window start, angle (float)t * f */
    const int rd = c->qk_rope_head_dim;
    for (int i = 0; i < rd / 2; i++) {
        const double ang = (double)((float)(w * r) * rope->freqs[i]);
        double *x = out + (d - rd) + 2 * i;
        const double x0 = x[0], x1 = x[1];
        x[0] = x0 * cos(ang) - x1 * sin(ang);
        x[1] = x0 * sin(ang) + x1 * cos(ang);
    }
}

/* ---- one compressor ------------------------------------------------------------------- */

/* Runs the compressor (indexer or main of ratio r) over spans of [0, N) cut at `cuts`
 * (n_cuts + 1 spans) into h->entries. */
static void run_spans(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, int indexer, const int *cuts,
                      int n_cuts, history *h) {
    memset(h->written, 0, sizeof h->written);
    int64_t pos[N];
    for (int t = 0; t < N; t++) pos[t] = t;
    for (int s = 0; s <= n_cuts; s++) {
        const int s0 = s ? cuts[s - 1] : 0, s1 = s < n_cuts ? cuts[s] : N;
        /* one span, its rows the positions [s0, s1) */
        const dsv4_batch_span sp = {0, s0, s1 - s0, 0};
        const dsv4_batch batch = {s1 - s0, 1, &sp, pos + s0, NULL};
        const dsv4_attn_src src = {NULL, hist_ring_row, hist_entry, h, DSV4_ROW_F32, DSV4_ROW_F32, NULL};
        dsv4_err err = {0};
        CHECK_MSG(dsv4_compress_windows(ctx, b, indexer, &batch, h->pa + (int64_t)s0 * h->W,
                                        h->pb + (int64_t)s0 * h->W, &src, &err) == 0, "%s", err.msg);
        /* exactly the windows closing in [s0, s1): (w+1)r - 1 in the span */
        const int r = indexer ? 4 : b->ratio;
        for (int w = 0; w < N / r + 1; w++) {
            const int closes = (w + 1) * r - 1, want = closes >= s0 && closes < s1;
            CHECK_MSG(h->written[w] == want, "span [%d, %d): window %d written %d times", s0, s1, w,
                      h->written[w]);
            h->written[w] = 0;
        }
    }
}

static void check_compressor(const dsv4_config *c, const dsv4_attn_ctx *ctx, int r, int indexer) {
    const int d = indexer ? DI : HD, coff = r == 4 ? 2 : 1, W = coff * d;
    float x[N * D], wkv[64 * D], wgate[64 * D], ape[8 * 64], norm[64];
    for (int i = 0; i < N * D; i++) x[i] = urand();
    for (int i = 0; i < W * D; i++) wkv[i] = 0.3f * urand(), wgate[i] = 0.3f * urand();
    for (int i = 0; i < r * W; i++) ape[i] = 0.5f * urand();
    for (int i = 0; i < d; i++) norm[i] = 1.0f + 0.25f * urand();
    dsv4_block_w b;
    memset(&b, 0, sizeof b);
    b.ratio = indexer ? 4 : r;
    dsv4_compressor_w *cw = indexer ? &b.idx_cmp : &b.cmp;
    *cw = (dsv4_compressor_w){ape, {DSV4_WF_F32, W, D, wkv, NULL, 0, 0}, {DSV4_WF_F32, W, D, wgate, NULL, 0, 0}, norm};

    /* projections through the code under test, against the formula in double */
    static float pa[N * 64], pb[N * 64];
    int64_t pos[N];
    for (int t = 0; t < N; t++) pos[t] = t;
    const dsv4_batch_span sp = {0, 0, N, 0};
    const dsv4_batch all = {N, 1, &sp, pos, NULL};
    dsv4_lin_op ops[2];
    CHECK(dsv4_compress_ops(&b, indexer, x, N, pa, pb, ops) == 2);
    dsv4_linear_batch(ctx->k, ops, 2);
    for (int t = 0; t < N; t++) dsv4_compress_add_ape_row(ctx, &b, indexer, &all, t, pb);
    double proj_err = 0;
    for (int t = 0; t < N; t++)
        for (int o = 0; o < W; o++) {
            double sa = 0, sb = 0;
            for (int i = 0; i < D; i++) sa += (double)x[t * D + i] * wkv[o * D + i], sb += (double)x[t * D + i] * wgate[o * D + i];
            sb += ape[(t % r) * W + o];
            proj_err = fmax(proj_err, fmax(fabs(pa[t * W + o] - sa), fabs(pb[t * W + o] - sb)));
        }
    CHECK_MSG(proj_err <= 1e-5, "r=%d%s: projections max-abs %.3g", r, indexer ? " indexer" : "", proj_err);

    /* one call over [0, N), against the definition */
    static float one[N * 64], chunked[N * 64];
    history h = {pa, pb, W, one, d, {0}};
    run_spans(ctx, &b, indexer, NULL, 0, &h);
    double max_abs = 0, max_ref = 0;
    for (int w = 0; w < N / r; w++) {
        double ref[64];
        ref_entry(c, ctx->rope_cmp, r, d, pa, pb, norm, w, ref);
        for (int ch = 0; ch < d; ch++) {
            max_abs = fmax(max_abs, fabs(one[w * d + ch] - ref[ch]));
            max_ref = fmax(max_ref, fabs(ref[ch]));
        }
    }
    printf("compressor r=%d%s (d=%d, %d windows): projections max-abs %.3g; entries max-abs %.3g, "
           "max-rel %.3g\n", r, indexer ? " indexer" : "", d, N / r, proj_err, max_abs, max_abs / max_ref);
    CHECK_MSG(max_abs / max_ref <= 1e-5, "r=%d%s: entries max-rel %.3g", r, indexer ? " indexer" : "",
              max_abs / max_ref);

    /* chunked: the same bits */
    memset(chunked, 0, sizeof chunked);
    h.entries = chunked;
    const int cuts[2] = {13, 30};
    run_spans(ctx, &b, indexer, cuts, 2, &h);
    CHECK_MSG(memcmp(one, chunked, sizeof(float) * (size_t)(N / r) * d) == 0,
              "r=%d%s: chunks [0,13) [13,30) [30,%d) differ from one call", r, indexer ? " indexer" : "", N);

    /* one position a call (decode): every window closes alone and its columns are pooled
     * in chunks over the context's threads; the same bits */
    memset(chunked, 0, sizeof chunked);
    int each[N - 1];
    for (int i = 0; i < N - 1; i++) each[i] = i + 1;
    run_spans(ctx, &b, indexer, each, N - 1, &h);
    CHECK_MSG(memcmp(one, chunked, sizeof(float) * (size_t)(N / r) * d) == 0,
              "r=%d%s: one position a call differs from one call", r, indexer ? " indexer" : "");
}

int main(void) {
    const dsv4_config c = test_cfg();
    dsv4_err err = {0};
    dsv4_rope main_rope, cmp_rope;
    dsv4_kctx *k;
    dsv4_arena scratch;
    CHECK(dsv4_rope_init(&main_rope, &c, 0, 64, &err) == 0);
    CHECK(dsv4_rope_init(&cmp_rope, &c, 1, 64, &err) == 0);
    CHECK(dsv4_kctx_create(2, 64, &k, &err) == 0);
    CHECK(dsv4_arena_init(&scratch, 1 << 16, &err) == 0);
    const dsv4_attn_ctx ctx = {&c, k, dsv4_numerics_exact(), NULL, &main_rope, &cmp_rope, NULL, &scratch,
                               DSV4_ROW_F32, DSV4_ROW_F32, NULL, 0, NULL, DSV4_INDEXER_AUTO, 0, NULL};
    check_compressor(&c, &ctx, 4, 0);
    check_compressor(&c, &ctx, 8, 0);
    check_compressor(&c, &ctx, 4, 1);
    dsv4_arena_free(&scratch);
    dsv4_kctx_free(k);
    dsv4_rope_free(&main_rope);
    dsv4_rope_free(&cmp_rope);
    return test_report();
}
