/* test_attention.c — one attention sub-block (spec/model.md §5.5–5.11) of each kind (SWA,
 * CSA, HCA) on random weights:
 *
 *   - against the definition written out again in double precision, independent of
 *     attention.c and attn_row.c: projections, q/kv norms, RoPE from the table's FP32
 *     angles, the compressors, the indexer's scores and top-k (ties to the lower index),
 *     window + compressed K=V rows with the sink, inverse RoPE and the grouped output
 *     projection. The CSA selections must match the reference's exactly; the outputs are
 *     reported as max-abs / max-rel (max-abs over max |y_ref|) and max-rel <= 1e-5
 *     asserted: every value is a few FP32 dot products of length <= 32 and softmaxes over
 *     <= 8 terms chained through five products, so float rounding (2^-24 relative per
 *     operation, errors growing about linearly with the chain) stays near 1e-6;
 *   - the phases split over the thread pool (dsv4_attn_pool, dsv4_attn_attend) give the
 *     serial per-row function's bits (dsv4_attn_row, row by row, then dsv4_attn_output),
 *     outputs and compressed entries, on 1 and 3 threads, with the sequence cut into calls
 *     [0, 11), [11, 12), [12, 20), then one row a call from 20 to N, that read earlier
 *     positions from a history source (the one-row calls, past TOPK entries, are decode rows
 *     whose selection runs in parts on 3 threads: dsv4_indexer_cut); with
 *     rows and keys stored in F32 and in BF16 (kernels/kv_rows.h);
 *   - a query-row subset (ctx->q_rows: runs of 3 attending rows, 2 skipped, one call
 *     with none) gives the attending rows' outputs and CSA selections bit for bit, and
 *     the same cache (window rows, compressor projections, entries and keys), while the
 *     counts (dsv4_attn_stats) show the other rows' queries were neither projected nor
 *     attended.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attention.h"
#include "attn_test.h"
#include "kernels/kv_rows.h"
#include "test.h"

enum { D = 32, H = 4, HD = 16, RD = 8, QL = 16, G = 2, OL = 8, NI = 2, DI = 8, TOPK = 3, WIN = 4, N = 29 };
enum { WMAX = 2 * HD }; /* widest compressor projection */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float urand(void) { return attn_urand(&rng_state); }

static dsv4_config test_cfg(void) {
    dsv4_config c = attn_test_cfg(D, HD, RD, DI);
    c.num_attention_heads = H;
    c.q_lora_rank = QL;
    c.o_groups = G;
    c.o_lora_rank = OL;
    c.sliding_window = WIN;
    c.index_n_heads = NI;
    c.index_topk = TOPK;
    return c;
}

/* ---- random weights of one layer ------------------------------------------------------ */

typedef struct layer {
    float wq_a[QL * D], q_norm[QL], wq_b[H * HD * QL], wkv[HD * D], kv_norm[HD], sink[H];
    float wo_a[G * OL * (H * HD / G)], wo_b[D * G * OL];
    float cmp_wkv[WMAX * D], cmp_wgate[WMAX * D], cmp_ape[8 * WMAX], cmp_norm[HD];
    float idx_wq_b[NI * DI * QL], idx_wproj[NI * D];
    float icmp_wkv[2 * DI * D], icmp_wgate[2 * DI * D], icmp_ape[4 * 2 * DI], icmp_norm[DI];
    dsv4_block_w b;
} layer;

static void fill(float *v, int n, float scale, float offset) {
    for (int i = 0; i < n; i++) v[i] = offset + scale * urand();
}

static dsv4_mat f32(const float *w, int rows, int cols) {
    return (dsv4_mat){DSV4_WF_F32, rows, cols, w, NULL, 0, 0};
}

static void make_layer(layer *L, int ratio, int id) {
    fill(L->wq_a, QL * D, 0.3f, 0);
    fill(L->q_norm, QL, 0.25f, 1);
    fill(L->wq_b, H * HD * QL, 0.4f, 0);
    fill(L->wkv, HD * D, 0.3f, 0);
    fill(L->kv_norm, HD, 0.25f, 1);
    fill(L->sink, H, 1.0f, 0);
    fill(L->wo_a, G * OL * (H * HD / G), 0.3f, 0);
    fill(L->wo_b, D * G * OL, 0.3f, 0);
    const int W = ratio == 4 ? 2 * HD : HD;
    fill(L->cmp_wkv, W * D, 0.3f, 0);
    fill(L->cmp_wgate, W * D, 0.3f, 0);
    fill(L->cmp_ape, (ratio ? ratio : 1) * W, 0.5f, 0);
    fill(L->cmp_norm, HD, 0.25f, 1);
    fill(L->idx_wq_b, NI * DI * QL, 0.5f, 0);
    fill(L->idx_wproj, NI * D, 0.5f, 0);
    fill(L->icmp_wkv, 2 * DI * D, 0.3f, 0);
    fill(L->icmp_wgate, 2 * DI * D, 0.3f, 0);
    fill(L->icmp_ape, 4 * 2 * DI, 0.5f, 0);
    fill(L->icmp_norm, DI, 0.25f, 1);
    dsv4_block_w *b = &L->b;
    memset(b, 0, sizeof *b);
    b->layer_id = id;
    b->ratio = ratio;
    b->attn_sink = L->sink;
    b->wq_a = f32(L->wq_a, QL, D);
    b->q_norm = L->q_norm;
    b->wq_b = f32(L->wq_b, H * HD, QL);
    b->wkv = f32(L->wkv, HD, D);
    b->kv_norm = L->kv_norm;
    b->wo_a = f32(L->wo_a, G * OL, H * HD / G);
    b->wo_b = f32(L->wo_b, D, G * OL);
    b->cmp = (dsv4_compressor_w){L->cmp_ape, f32(L->cmp_wkv, W, D), f32(L->cmp_wgate, W, D), L->cmp_norm};
    b->idx_wq_b = f32(L->idx_wq_b, NI * DI, QL);
    b->idx_weights_proj = f32(L->idx_wproj, NI, D);
    b->idx_cmp = (dsv4_compressor_w){L->icmp_ape, f32(L->icmp_wkv, 2 * DI, D), f32(L->icmp_wgate, 2 * DI, D),
                                     L->icmp_norm};
}

/* ---- the definition in double ---------------------------------------------------------- */

static void ref_linear(const float *w, int rows, int cols, const double *x, double *y) {
    for (int o = 0; o < rows; o++) {
        double s = 0;
        for (int i = 0; i < cols; i++) s += (double)w[o * cols + i] * x[i];
        y[o] = s;
    }
}

static void ref_rmsnorm(double *v, int n, const float *weight, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += v[i] * v[i];
    const double inv = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) v[i] = v[i] * inv * (weight ? weight[i] : 1.0);
}

/* Interleaved rotation of the last RD channels of v (n) at position t: the angle is the
 * table's FP32 (float)t * f[i] (model.md §4), the rotation itself in double. */
static void ref_rope(const dsv4_rope *rope, double *v, int n, int64_t t, int inverse) {
    for (int i = 0; i < RD / 2; i++) {
        const double ang = (inverse ? -1.0 : 1.0) * (double)((float)t * rope->freqs[i]);
        double *x = v + (n - RD) + 2 * i;
        const double x0 = x[0], x1 = x[1];
        x[0] = x0 * cos(ang) - x1 * sin(ang);
        x[1] = x0 * sin(ang) + x1 * cos(ang);
    }
}

/* Entries of one compressor (ratio r, width d, weights cw) of the positions [0, N) of x. */
static void ref_entries(const dsv4_config *c, const dsv4_rope *rope, const dsv4_compressor_w *cw, int r, int d,
                        const float *x, double *entries /* (N / r, d) */) {
    const int coff = r == 4 ? 2 : 1, W = coff * d;
    static double a[N][WMAX], bb[N][WMAX];
    for (int t = 0; t < N; t++) {
        double xt[D];
        for (int i = 0; i < D; i++) xt[i] = x[t * D + i];
        ref_linear(cw->wkv.w, W, D, xt, a[t]);
        ref_linear(cw->wgate.w, W, D, xt, bb[t]);
        for (int o = 0; o < W; o++) bb[t][o] += cw->ape[(t % r) * W + o];
    }
    for (int w = 0; w < N / r; w++) {
        double *e = entries + (size_t)w * d;
        for (int ch = 0; ch < d; ch++) {
            double av[16], bv[16];
            int n = 0;
            if (coff == 2 && w > 0) /* A series: first halves of window w-1 */
                for (int t = (w - 1) * r; t < w * r; t++) av[n] = a[t][ch], bv[n++] = bb[t][ch];
            const int off = coff == 2 ? d : 0; /* B series */
            for (int t = w * r; t < (w + 1) * r; t++) av[n] = a[t][off + ch], bv[n++] = bb[t][off + ch];
            double m = -INFINITY, den = 0, num = 0;
            for (int j = 0; j < n; j++) m = bv[j] > m ? bv[j] : m;
            for (int j = 0; j < n; j++) den += exp(bv[j] - m), num += exp(bv[j] - m) * av[j];
            e[ch] = num / den;
        }
        ref_rmsnorm(e, d, cw->norm, c->rms_norm_eps);
        ref_rope(rope, e, d, (int64_t)w * r, 0);
    }
}

/* y (N, D) of the sub-block over positions [0, N) of x, and the CSA selections sel (N, TOPK),
 * -1 padded. */
static void ref_attention(const dsv4_config *c, const dsv4_rope *rmain, const dsv4_rope *rcmp, const layer *L,
                          const float *x, double *y, int *sel) {
    const dsv4_block_w *b = &L->b;
    const int r = b->ratio;
    const dsv4_rope *rope = r ? rcmp : rmain;
    static double kv[N][HD], cmp[N][HD], idx[N][DI];
    if (r) ref_entries(c, rcmp, &b->cmp, r, HD, x, cmp[0]);
    if (r == 4) ref_entries(c, rcmp, &b->idx_cmp, 4, DI, x, idx[0]);
    for (int t = 0; t < N; t++) {
        double xt[D];
        for (int i = 0; i < D; i++) xt[i] = x[t * D + i];
        ref_linear(L->wkv, HD, D, xt, kv[t]);
        ref_rmsnorm(kv[t], HD, L->kv_norm, c->rms_norm_eps);
        ref_rope(rope, kv[t], HD, t, 0);
    }
    for (int t = 0; t < N; t++) {
        double xt[D], qr[QL], q[H * HD];
        for (int i = 0; i < D; i++) xt[i] = x[t * D + i];
        ref_linear(L->wq_a, QL, D, xt, qr);
        ref_rmsnorm(qr, QL, L->q_norm, c->rms_norm_eps);
        ref_linear(L->wq_b, H * HD, QL, qr, q);
        for (int h = 0; h < H; h++) {
            ref_rmsnorm(q + h * HD, HD, NULL, c->rms_norm_eps);
            ref_rope(rope, q + h * HD, HD, t, 0);
        }
        /* the K=V list: window rows, then the compressed entries t sees (§5.6, §5.7) */
        const double *rows[WIN + N];
        int n_kv = 0;
        for (int p = t - WIN + 1 > 0 ? t - WIN + 1 : 0; p <= t; p++) rows[n_kv++] = kv[p];
        const int n_vis = r ? (t + 1) / r : 0;
        for (int k = 0; k < TOPK; k++) sel[t * TOPK + k] = -1;
        if (r == 4) { /* §5.9: the indexer's top-k, ascending */
            double qI[NI * DI], wI[NI], score[N];
            ref_linear(L->idx_wq_b, NI * DI, QL, qr, qI);
            ref_linear(L->idx_wproj, NI, D, xt, wI);
            for (int h = 0; h < NI; h++) {
                ref_rope(rope, qI + h * DI, DI, t, 0);
                wI[h] /= sqrt((double)DI * NI);
            }
            int chosen[N] = {0}, n_sel = 0;
            for (int w = 0; w < n_vis; w++) {
                score[w] = 0;
                for (int h = 0; h < NI; h++) {
                    double dot = 0;
                    for (int i = 0; i < DI; i++) dot += qI[h * DI + i] * idx[w][i];
                    score[w] += wI[h] * (dot > 0 ? dot : 0);
                }
            }
            for (int k = 0; k < TOPK && k < n_vis; k++) { /* best remaining, lower index on ties */
                int best = -1;
                for (int w = 0; w < n_vis; w++)
                    if (!chosen[w] && (best < 0 || score[w] > score[best])) best = w;
                chosen[best] = 1;
            }
            for (int w = 0; w < n_vis; w++)
                if (chosen[w]) sel[t * TOPK + n_sel++] = w, rows[n_kv++] = cmp[w];
        } else {
            for (int w = 0; w < n_vis; w++) rows[n_kv++] = cmp[w];
        }
        /* §5.10 per head with the sink, §5.11 inverse RoPE and grouped output */
        double u[H * HD], v[G * OL];
        for (int h = 0; h < H; h++) {
            double z[WIN + N], m = L->sink[h], Z;
            for (int j = 0; j < n_kv; j++) {
                z[j] = 0;
                for (int i = 0; i < HD; i++) z[j] += q[h * HD + i] * rows[j][i];
                z[j] /= sqrt((double)HD);
                m = z[j] > m ? z[j] : m;
            }
            Z = exp(L->sink[h] - m);
            for (int j = 0; j < n_kv; j++) Z += exp(z[j] - m);
            for (int i = 0; i < HD; i++) {
                double s = 0;
                for (int j = 0; j < n_kv; j++) s += exp(z[j] - m) / Z * rows[j][i];
                u[h * HD + i] = s;
            }
            ref_rope(rope, u + h * HD, HD, t, 1);
        }
        for (int g = 0; g < G; g++) ref_linear(L->wo_a + g * OL * (H * HD / G), OL, H * HD / G, u + g * (H * HD / G), v + g * OL);
        ref_linear(L->wo_b, D, G * OL, v, y + (size_t)t * D);
    }
}

/* ---- the code under test, as calls [0, c1), [c1, c2), [c2, N) over a history ----------- */

typedef struct history {
    float kv[N][HD];                  /* window rows of earlier calls (stored format: at most F32) */
    float pa[2][N][WMAX], pb[2][N][WMAX]; /* compressor projections [main, indexer] */
    float entries[2][N][HD];          /* compressed entries, indexer keys (stored format) */
} history;

static const void *hist_win(void *u, const dsv4_batch_span *sp, int layer, int64_t pos) {
    (void)sp; (void)layer;
    return ((history *)u)->kv[pos];
}

static void hist_ring(void *u, const dsv4_batch_span *sp, int layer, int indexer, int64_t pos, const float **a,
                      const float **b) {
    (void)sp; (void)layer;
    history *h = u;
    *a = h->pa[indexer][pos];
    *b = h->pb[indexer][pos];
}

static void *hist_entry(void *u, const dsv4_batch_span *sp, int layer, int indexer, int64_t w) {
    (void)sp; (void)layer;
    return ((history *)u)->entries[indexer][w];
}

/* Positions that attend in the query-subset runs: runs of 3, then 2 skipped (11 too, so the
 * one-row call [11, 12) has none). */
static int attends(int t) { return t % 5 != 1 && t % 5 != 2; }

/* y (N, D) and, CSA, sel (N, TOPK) through the phases (serial = 0) or dsv4_attn_row, with
 * rows and keys stored in fmt (0: F32). subset: only positions attends(t) query (phases
 * only); the other rows of y and sel are left as they were. */
static void run_q(const dsv4_attn_ctx *ctx0, const layer *L, const float *x, int serial, int fmt, int subset,
                  history *h, float *y, int *sel) {
    /* then one-row calls from 20 on: decode rows past TOPK entries whose selection runs in
     * parts, with the first entry of each score task in the top TOPK at some of them */
    const int cuts[] = {0, 11, 12, 20, 21, 22, 23, 24, 25, 26, 27, 28, N}, n_cuts = sizeof cuts / sizeof cuts[0];
    const dsv4_block_w *b = &L->b;
    memset(h, 0, sizeof *h);
    for (int c = 0; c + 1 < n_cuts; c++) {
        const int s0 = cuts[c], n = cuts[c + 1] - s0;
        int64_t pos[N];
        for (int i = 0; i < n; i++) pos[i] = s0 + i;
        const dsv4_batch_span sp = {0, s0, n, 0};
        const dsv4_batch batch = {n, 1, &sp, pos, NULL};
        const dsv4_attn_src src = {hist_win, hist_ring, hist_entry, h, fmt, fmt, NULL};
        dsv4_attn_ctx ctx = *ctx0;
        ctx.csa_sel = b->ratio == 4 ? sel + (size_t)s0 * TOPK : NULL;
        ctx.row_fmt = ctx.key_fmt = fmt;
        int q_rows[N], n_q = 0;
        static float yq[N * D]; /* (n_q, D) the subset's outputs */
        for (int i = 0; subset && i < n; i++)
            if (attends(s0 + i)) q_rows[n_q++] = i;
        if (subset) {
            ctx.q_rows = q_rows;
            ctx.n_q = n_q;
        }
        const size_t mark = dsv4_arena_mark(ctx.scratch);
        dsv4_attn_work w;
        dsv4_err err = {0};
        CHECK_MSG(dsv4_attn_project(&ctx, b, &batch, x + (size_t)s0 * D, &w, &err) == 0, "%s", err.msg);
        if (!serial) {
            CHECK_MSG(dsv4_attn_pool(&ctx, b, &batch, &w, &src, &err) == 0, "%s", err.msg);
            CHECK_MSG(dsv4_attn_attend(&ctx, b, &batch, &w, &src, subset ? yq : y + (size_t)s0 * D, &err) == 0,
                      "%s", err.msg);
            for (int k = 0; k < n_q; k++)
                memcpy(y + (size_t)(s0 + q_rows[k]) * D, yq + (size_t)k * D, sizeof(float) * D);
        } else {
            float *o = dsv4_arena_take_n(ctx.scratch, (long long)n * H * HD, sizeof(float)); /* (n, H, HD) */
            CHECK(o != NULL);
            for (int i = 0; i < n; i++) {
                const dsv4_attn_query q = dsv4_attn_query_of(&ctx, b, &batch, &w, &src, 0, i);
                CHECK_MSG(dsv4_attn_row(&q, o + (size_t)i * H * HD, &err) == 0, "%s", err.msg);
            }
            CHECK_MSG(dsv4_attn_output(&ctx, b, o, n, y + (size_t)s0 * D, &err) == 0, "%s", err.msg);
        }
        /* what the cache would keep: this call's window rows and projections */
        const int W = b->ratio == 4 ? 2 * HD : HD;
        const int64_t row_bytes = dsv4_row_bytes(dsv4_row_fmt(fmt), HD, RD);
        for (int i = 0; i < n; i++) {
            if (w.kv_st) memcpy(h->kv[s0 + i], w.kv_st + i * row_bytes, (size_t)row_bytes);
            else memcpy(h->kv[s0 + i], w.kv + (size_t)i * HD, sizeof(float) * HD);
            for (int ix = 0; b->ratio && ix < (b->ratio == 4 ? 2 : 1); ix++) {
                const int Wi = ix ? 2 * DI : W;
                memcpy(h->pa[ix][s0 + i], w.pa[ix] + (size_t)i * Wi, sizeof(float) * Wi);
                memcpy(h->pb[ix][s0 + i], w.pb[ix] + (size_t)i * Wi, sizeof(float) * Wi);
            }
        }
        dsv4_arena_release(ctx.scratch, mark);
    }
}

static void run(const dsv4_attn_ctx *ctx0, const layer *L, const float *x, int serial, int fmt, history *h,
                float *y, int *sel) {
    run_q(ctx0, L, x, serial, fmt, 0, h, y, sel);
}

/* The query subset against the full run (y_full, sel_full, h_full: the same ctx and fmt). */
static void check_subset(const dsv4_attn_ctx *ctx0, const layer *L, const float *x, int fmt, const float *y_full,
                         const int *sel_full, const history *h_full, const char *kind) {
    static float y[N * D];
    static int sel[N * TOPK];
    static history h;
    dsv4_attn_stats st = {0};
    dsv4_attn_ctx ctx = *ctx0;
    ctx.stats = &st;
    for (int i = 0; i < N * D; i++) y[i] = NAN;
    for (int i = 0; i < N * TOPK; i++) sel[i] = -2;
    run_q(&ctx, L, x, 0, fmt, 1, &h, y, sel);
    int n_att = 0, y_diff = 0, sel_diff = 0, untouched = 1;
    for (int t = 0; t < N; t++) {
        const int a = attends(t);
        n_att += a;
        for (int k = 0; a && k < TOPK; k++) sel_diff += L->b.ratio == 4 && sel[t * TOPK + k] != sel_full[t * TOPK + k];
        for (int k = 0; !a && k < TOPK; k++) untouched &= sel[t * TOPK + k] == -2;
        if (a) y_diff += memcmp(y + (size_t)t * D, y_full + (size_t)t * D, sizeof(float) * D) != 0;
    }
    printf("attention %s, %d of %d rows attending: %d rows' y differ, %d selection entries differ; "
           "counted %lld rows, %lld queries, %lld attended\n", kind, n_att, N, y_diff, sel_diff,
           (long long)st.rows, (long long)st.q_rows, (long long)st.attended);
    CHECK_MSG(y_diff == 0, "%s subset: %d attending rows differ from the full run", kind, y_diff);
    CHECK_MSG(sel_diff == 0, "%s subset: %d selection entries differ", kind, sel_diff);
    CHECK_MSG(untouched, "%s subset: a skipped row wrote a CSA selection", kind);
    CHECK_MSG(memcmp(&h, h_full, sizeof h) == 0, "%s subset: the cache differs from the full run's", kind);
    CHECK_MSG(st.rows == N && st.q_rows == n_att && st.attended == n_att,
              "%s subset: counted %lld rows, %lld queries, %lld attended; want %d, %d, %d", kind,
              (long long)st.rows, (long long)st.q_rows, (long long)st.attended, N, n_att, n_att);
}

static void check_layer(const dsv4_config *c, const dsv4_attn_ctx *ctx1, const dsv4_attn_ctx *ctx3, int ratio,
                        const char *kind) {
    static layer L;
    static float x[N * D], y_par[N * D], y_par3[N * D], y_ser[N * D];
    static int sel_par[N * TOPK], sel_par3[N * TOPK], sel_ser[N * TOPK], sel_ref[N * TOPK];
    static history h_par, h_par3, h_ser;
    static double y_ref[N * D];
    make_layer(&L, ratio, 0);
    fill(x, N * D, 1.0f, 0);
    for (int i = 0; i < N * TOPK; i++) sel_par[i] = sel_par3[i] = sel_ser[i] = -1;

    run(ctx1, &L, x, 0, 0, &h_par, y_par, sel_par);
    run(ctx3, &L, x, 0, 0, &h_par3, y_par3, sel_par3);
    run(ctx1, &L, x, 1, 0, &h_ser, y_ser, sel_ser);
    ref_attention(c, ctx1->rope_main, ctx1->rope_cmp, &L, x, y_ref, sel_ref);

    double max_abs = 0, max_ref = 0;
    for (int i = 0; i < N * D; i++) {
        max_abs = fmax(max_abs, fabs(y_par[i] - y_ref[i]));
        max_ref = fmax(max_ref, fabs(y_ref[i]));
    }
    int sel_diff = 0, n_scored = 0;
    for (int t = 0; ratio == 4 && t < N; t++) {
        n_scored += (t + 1) / 4 > TOPK;
        for (int k = 0; k < TOPK; k++) sel_diff += sel_par[t * TOPK + k] != sel_ref[t * TOPK + k];
    }
    printf("attention %s (N=%d, calls [0,11) [11,12) [12,20), one row a call to %d): y max-abs %.3g, max-rel %.3g", kind, N, N,
           max_abs, max_abs / max_ref);
    if (ratio == 4) printf("; %d rows chose top-%d by score, %d selection entries differ", n_scored, TOPK, sel_diff);
    printf("\n");
    CHECK_MSG(max_abs / max_ref <= 1e-5, "%s: y max-rel %.3g against the double definition", kind, max_abs / max_ref);
    CHECK_MSG(sel_diff == 0, "%s: %d selection entries differ from the double definition", kind, sel_diff);
    CHECK_MSG(ratio != 4 || n_scored > 0, "%s: no row ran the indexer", kind);

    /* the thread-pool phases against the serial row function: the same bits */
    CHECK_MSG(memcmp(y_par, y_ser, sizeof y_par) == 0, "%s: phases and dsv4_attn_row differ", kind);
    CHECK_MSG(memcmp(y_par, y_par3, sizeof y_par) == 0, "%s: 1 and 3 threads differ", kind);
    CHECK_MSG(memcmp(h_par.entries, h_ser.entries, sizeof h_par.entries) == 0, "%s: entries differ", kind);
    CHECK_MSG(memcmp(sel_par, sel_ser, sizeof sel_par) == 0 && memcmp(sel_par, sel_par3, sizeof sel_par) == 0,
              "%s: selections differ between schedules", kind);
    check_subset(ctx3, &L, x, 0, y_par3, sel_par3, &h_par3, kind);

    /* the same with BF16 rows and keys: the steps unpack them for the kernels */
    run(ctx3, &L, x, 0, DSV4_ROW_BF16, &h_par, y_par, sel_par);
    run(ctx1, &L, x, 1, DSV4_ROW_BF16, &h_ser, y_ser, sel_ser);
    int bf16_diff = 0;
    for (int i = 0; i < N * D; i++) bf16_diff += y_par[i] != y_par3[i];
    CHECK_MSG(bf16_diff > 0, "%s: BF16 storage changed nothing (not exercised)", kind);
    CHECK_MSG(memcmp(y_par, y_ser, sizeof y_par) == 0, "%s BF16: phases and dsv4_attn_row differ", kind);
    CHECK_MSG(memcmp(h_par.entries, h_ser.entries, sizeof h_par.entries) == 0, "%s BF16: entries differ", kind);
    CHECK_MSG(memcmp(sel_par, sel_ser, sizeof sel_par) == 0, "%s BF16: selections differ", kind);
    check_subset(ctx3, &L, x, DSV4_ROW_BF16, y_par, sel_par, &h_par, kind);
}

int main(void) {
    const dsv4_config c = test_cfg();
    dsv4_err err = {0};
    dsv4_rope main_rope, cmp_rope;
    dsv4_kctx *k1, *k3;
    dsv4_arena scratch;
    CHECK(dsv4_rope_init(&main_rope, &c, 0, 64, &err) == 0);
    CHECK(dsv4_rope_init(&cmp_rope, &c, 1, 64, &err) == 0);
    CHECK(dsv4_kctx_create(1, 64, &k1, &err) == 0);
    CHECK(dsv4_kctx_create(3, 64, &k3, &err) == 0);
    CHECK(dsv4_arena_init(&scratch, 1 << 20, &err) == 0);
    dsv4_attn_ctx ctx1 = {&c, k1, dsv4_numerics_exact(), NULL, &main_rope, &cmp_rope, NULL, &scratch, 0, 0, NULL, 0,
                          NULL, DSV4_INDEXER_EXACT, 0, NULL};
    dsv4_attn_ctx ctx3 = ctx1;
    ctx3.k = k3;
    ctx3.cut_min_entries = 1; /* the one-row calls' selections in parts, as at long context */
    check_layer(&c, &ctx1, &ctx3, 0, "SWA");
    check_layer(&c, &ctx1, &ctx3, 4, "CSA");
    /* the indexer's bounded path: the same selections and bits (also against the exact one) */
    ctx1.indexer_mode = ctx3.indexer_mode = DSV4_INDEXER_BOUNDED;
    check_layer(&c, &ctx1, &ctx3, 4, "CSA, bounded indexer");
    ctx1.indexer_mode = ctx3.indexer_mode = DSV4_INDEXER_EXACT;
    check_layer(&c, &ctx1, &ctx3, 8, "HCA");
    dsv4_arena_free(&scratch);
    dsv4_kctx_free(k1);
    dsv4_kctx_free(k3);
    dsv4_rope_free(&main_rope);
    dsv4_rope_free(&cmp_rope);
    return test_report();
}
