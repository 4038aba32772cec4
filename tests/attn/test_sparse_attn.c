/* test_sparse_attn.c — sparse attention with sink and the lightning indexer top-k
 * (spec/model.md §5.9-5.10) against double-precision formulas, and the properties the
 * engine's bitwise invariants rest on: a head's output is the same whatever group of heads
 * computes it, indexer scores are the same however the entries are split into ranges, and
 * the portable, AVX2 and AVX-512 kernels give identical bits (the softmax's expf per value
 * or the AVX-512 array expf alike), and rows read as BF16 give the bits of their F32 copies.
 * Ties in the top-k go to the lower entry index. */
#include <stdint.h>

#include "attn/attention.h"
#include "kernels/cpu.h"
#include "kernels/kv_rows.h"
#include "kernels/ops.h"
#include "test.h"

static uint64_t rng_state = 0x853c49e6748fea9bull;
static double urand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* portable, AVX2, AVX-512: those this CPU and build run */
static int levels(const dsv4_attn_ops **ops) {
    int n = 0;
    const int best = dsv4_cpu_simd() < dsv4_build_simd() ? dsv4_cpu_simd() : dsv4_build_simd();
    ops[n++] = dsv4_attn_ops_for(DSV4_SIMD_SCALAR);
    for (int level = DSV4_SIMD_AVX2; level <= DSV4_SIMD_AVX512 && level <= best; level++)
        if (dsv4_attn_ops_for(level) != ops[n - 1]) ops[n++] = dsv4_attn_ops_for(level);
    return n;
}

static void test_attn(int H, int hd, int n_kv) {
    const dsv4_attn_ops *ops[3];
    const int nl = levels(ops);
    float *q = malloc(sizeof(float) * H * hd), *kv = malloc(sizeof(float) * n_kv * hd);
    float *sink = malloc(sizeof(float) * H), *probs = malloc(sizeof(float) * H * n_kv + 4);
    float *o = malloc(sizeof(float) * H * hd), *o2 = malloc(sizeof(float) * H * hd);
    const float **rows = malloc(sizeof(float *) * n_kv + 8);
    double *z = malloc(sizeof(double) * n_kv + 8);
    for (int i = 0; i < H * hd; i++) q[i] = (float)(urand() * 2.0);
    for (int i = 0; i < n_kv * hd; i++) kv[i] = (float)urand();
    for (int h = 0; h < H; h++) sink[h] = (float)(urand() * 3.0);
    /* rows in a scrambled order, as the cache hands them out */
    for (int j = 0; j < n_kv; j++) rows[j] = kv + (size_t)((j * 7 + 3) % n_kv) * hd;
    const float scale = 1.0f / sqrtf((float)hd);

    dsv4_sparse_attn_row(ops[0], q, rows, n_kv, H, hd, sink, scale, o, probs);
    /* double reference: softmax over the n_kv scores and the sink, weighting the rows */
    double maxerr = 0;
    for (int h = 0; h < H; h++) {
        double m = sink[h], Z = 0;
        for (int j = 0; j < n_kv; j++) {
            double d = 0;
            for (int c = 0; c < hd; c++) d += (double)q[h * hd + c] * rows[j][c];
            z[j] = d * scale;
            if (z[j] > m) m = z[j];
        }
        Z = exp(sink[h] - m);
        for (int j = 0; j < n_kv; j++) Z += exp(z[j] - m);
        for (int c = 0; c < hd; c++) {
            double ref = 0;
            for (int j = 0; j < n_kv; j++) ref += exp(z[j] - m) / Z * rows[j][c];
            maxerr = fmax(maxerr, fabs(o[h * hd + c] - ref));
        }
    }
    CHECK_MSG(maxerr < 2e-6, "attention H=%d hd=%d n_kv=%d: max err %.3g", H, hd, n_kv, maxerr);

    /* any grouping of heads, on any level, gives the same bits */
    for (int l = 0; l < nl; l++)
        for (int gh = 1; gh <= H; gh += (gh < 3 ? 1 : 4)) {
            for (int h0 = 0; h0 < H; h0 += gh) {
                const int nh = H - h0 < gh ? H - h0 : gh;
                dsv4_sparse_attn_heads(ops[l], q + (size_t)h0 * hd, (const void *const *)rows, DSV4_ROW_F32,
                                       n_kv, nh, hd, sink + h0, scale, o2 + (size_t)h0 * hd, probs,
                                       dsv4_numerics_exact(), (gh + l) & 1 ? dsv4_expf_x512() : NULL);
            }
            CHECK_MSG(memcmp(o, o2, sizeof(float) * H * hd) == 0,
                      "attention H=%d hd=%d n_kv=%d: level %d, %d heads per group differ", H, hd,
                      n_kv, l, gh);
        }

    /* the heads straight into a group-major layout (the output projection's input: hg heads
     * a group, row 1 of 3, the groups gs apart), from any first head and group of heads:
     * each head the bits of its row-major output */
    for (int l = 0; l < nl; l++)
        for (int hg = 1; hg <= H; hg = hg < 3 ? hg + 1 : 2 * hg)
            for (int gh = 1; gh <= H; gh += (gh < 3 ? 1 : 5)) {
                const int G = (H + hg - 1) / hg;
                const int64_t gs = (int64_t)3 * hg * hd;
                float *og = malloc(sizeof(float) * (size_t)(G * gs));
                for (int64_t i = 0; i < G * gs; i++) og[i] = NAN;
                float *base = og + (size_t)hg * hd;
                for (int h0 = 0; h0 < H; h0 += gh) {
                    const int nh = H - h0 < gh ? H - h0 : gh;
                    dsv4_sparse_attn_heads_to(ops[l], q + (size_t)h0 * hd, (const void *const *)rows, DSV4_ROW_F32,
                                              n_kv, nh, hd, sink + h0, scale, base, h0, hg, gs, probs,
                                              dsv4_numerics_exact(), (gh + l) & 1 ? dsv4_expf_x512() : NULL);
                }
                int same = 1;
                for (int h = 0; h < H; h++)
                    same &= memcmp(base + (h / hg) * gs + (int64_t)(h % hg) * hd, o + (size_t)h * hd,
                                   sizeof(float) * hd) == 0;
                CHECK_MSG(same, "attention H=%d hd=%d n_kv=%d: level %d, %d heads a group, %d per call: the "
                          "group-major layout differs", H, hd, n_kv, l, hg, gh);
                free(og);
            }

    /* the rows rounded to BF16: read as stored (2 bytes a value) they give the bits of
     * their F32 copies, on every level */
    uint8_t *packed = malloc((size_t)n_kv * hd * 2 + 2);
    const void **brows = malloc(sizeof(void *) * n_kv + 8);
    for (int j = 0; j < n_kv; j++) {
        float *x = kv + (size_t)j * hd;
        dsv4_row_round(DSV4_ROW_BF16, x, hd, 0);
        dsv4_row_pack(DSV4_ROW_BF16, packed + 2 + (size_t)j * hd * 2, x, hd, 0); /* 2-byte offset */
    }
    for (int j = 0; j < n_kv; j++) brows[j] = packed + 2 + (size_t)((j * 7 + 3) % n_kv) * hd * 2;
    dsv4_sparse_attn_row(ops[0], q, rows, n_kv, H, hd, sink, scale, o, probs);
    for (int l = 0; l < nl; l++) {
        dsv4_sparse_attn_heads(ops[l], q, brows, DSV4_ROW_BF16, n_kv, H, hd, sink, scale, o2, probs,
                               dsv4_numerics_exact(), l == nl - 1 ? dsv4_expf_x512() : NULL);
        CHECK_MSG(memcmp(o, o2, sizeof(float) * H * hd) == 0,
                  "attention H=%d hd=%d n_kv=%d: level %d, BF16 rows differ from their F32 copies", H, hd, n_kv, l);
    }
    free(packed); free(brows);
    free(q); free(kv); free(sink); free(probs); free(o); free(o2); free(rows); free(z);
}

/* Reference selection: a full sort of all scores, higher first, then lower index. */
/* The contract's softmax written out plainly in FP32 (z_j = dot * scale, a running max with
 * the sink, expf(z - m), the sum in j order, then one reciprocal), with zero rows of both
 * signs that make the largest score a zero, duplicate rows (ties) and a sink above or below
 * every score: the kernels give its bits exactly, with libm's expf or the array expf. */
static void test_softmax_bits(int H, int hd, int n_kv, float sink_bias, int mixed) {
    const dsv4_attn_ops *ops[3];
    const int nl = levels(ops);
    float *q = malloc(sizeof(float) * H * hd), *kv = malloc(sizeof(float) * n_kv * hd);
    float *sink = malloc(sizeof(float) * H), *probs = malloc(sizeof(float) * H * n_kv + 4);
    float *o = malloc(sizeof(float) * H * hd), *ref = malloc(sizeof(float) * H * hd);
    float *z = malloc(sizeof(float) * n_kv + 4);
    const float **rows = malloc(sizeof(float *) * n_kv + 8);
    for (int i = 0; i < H * hd; i++) /* positive, or of either sign (positive scores too) */
        q[i] = (float)(mixed ? urand() : 0.25 + urand() * 0.2);
    for (int j = 0; j < n_kv; j++)
        for (int c = 0; c < hd; c++) {
            float v = (float)(-0.5 - urand() * 0.4); /* a positive q scores < 0 ... */
            if (j % 5 == 1) v = 0.0f;                /* ... but these rows score +0 */
            if (j % 5 == 3) v = -0.0f;               /* and these -0 */
            if (j % 7 == 6) v = kv[(size_t)(j - 1) * hd + c]; /* a tie with the row before */
            kv[(size_t)j * hd + c] = v;
        }
    for (int h = 0; h < H; h++) sink[h] = sink_bias + (float)urand();
    for (int j = 0; j < n_kv; j++) rows[j] = kv + (size_t)j * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < H; h++) {
        float m = sink[h];
        for (int j = 0; j < n_kv; j++) {
            z[j] = dsv4_dot(q + (size_t)h * hd, rows[j], hd) * scale;
            if (z[j] > m) m = z[j];
        }
        float Z = expf(sink[h] - m);
        for (int j = 0; j < n_kv; j++) {
            z[j] = expf(z[j] - m);
            Z += z[j];
        }
        const float inv = 1.0f / Z;
        float *r = ref + (size_t)h * hd;
        for (int c = 0; c < hd; c++) r[c] = 0.0f;
        for (int j = 0; j < n_kv; j++) {
            const float p = z[j] * inv;
            for (int c = 0; c < hd; c++) r[c] = r[c] + p * rows[j][c];
        }
    }
    for (int l = 0; l < nl; l++)
        for (int x = 0; x < 2; x++) {
            dsv4_sparse_attn_heads(ops[l], q, (const void *const *)rows, DSV4_ROW_F32, n_kv, H, hd, sink, scale, o,
                                   probs, dsv4_numerics_exact(), x ? dsv4_expf_x512() : NULL);
            CHECK_MSG(memcmp(o, ref, sizeof(float) * H * hd) == 0,
                      "softmax H=%d hd=%d n_kv=%d sink %+g: level %d (array expf %d) differs from the plain formula",
                      H, hd, n_kv, sink_bias, l, x);
        }
    free(q); free(kv); free(sink); free(probs); free(o); free(ref); free(z); free(rows);
}

static const float *cmp_scores;
static int cmp_rank(const void *a, const void *b) {
    const int i = *(const int *)a, j = *(const int *)b;
    if (cmp_scores[i] != cmp_scores[j]) return cmp_scores[i] > cmp_scores[j] ? -1 : 1;
    return (i > j) - (i < j);
}
static int cmp_int(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The selection as it was before quickselect (heap of the best, rooted at the worst,
 * then sorted), kept here verbatim as the oracle: the new one must choose the same. */
static int old_ranks_before(const float *score, int i, int j) {
    return score[i] > score[j] || (score[i] == score[j] && i < j);
}
static void old_sift_down(int *heap, int n, int at, const float *score) {
    for (;;) {
        int l = 2 * at + 1, r = l + 1, worst = at;
        if (l < n && old_ranks_before(score, heap[worst], heap[l])) worst = l;
        if (r < n && old_ranks_before(score, heap[worst], heap[r])) worst = r;
        if (worst == at) return;
        int t = heap[at]; heap[at] = heap[worst]; heap[worst] = t;
        at = worst;
    }
}
static int old_select(const float *scores, int n_cand, int topk, int *order, int *sel) {
    if (n_cand <= topk) {
        for (int w = 0; w < n_cand; w++) sel[w] = w;
        return n_cand;
    }
    int n = 0;
    for (int w = 0; w < n_cand; w++) {
        if (n < topk) {
            order[n++] = w;
            if (n == topk)
                for (int i = topk / 2 - 1; i >= 0; i--) old_sift_down(order, n, i, scores);
        } else if (old_ranks_before(scores, w, order[0])) {
            order[0] = w;
            old_sift_down(order, n, 0, scores);
        }
    }
    for (int i = 0; i < n; i++) sel[i] = order[i];
    qsort(sel, (size_t)n, sizeof(int), cmp_int);
    return n;
}

/* n_cand entries; with `negative`, every third key is the negated mean query direction so
 * many scores are exactly 0 (relu) and the tie rule decides. */
static void test_indexer(int nI, int dI, int n_cand, int topk, int negative) {
    const dsv4_attn_ops *ops[3];
    const int nl = levels(ops);
    float *qI = malloc(sizeof(float) * nI * dI), *wI = malloc(sizeof(float) * nI);
    float *kbuf = malloc(sizeof(float) * n_cand * dI), *scores = malloc(sizeof(float) * n_cand);
    float *s2 = malloc(sizeof(float) * n_cand);
    const float **keys = malloc(sizeof(float *) * n_cand);
    int *order = malloc(sizeof(int) * n_cand), *sel = malloc(sizeof(int) * topk);
    int *ref = malloc(sizeof(int) * (2 * n_cand + topk));
    for (int i = 0; i < nI * dI; i++) qI[i] = (float)(0.5 + urand()); /* positive mean */
    for (int h = 0; h < nI; h++) wI[h] = (float)(0.2 + urand() * 0.1);
    for (int w = 0; w < n_cand; w++) {
        for (int c = 0; c < dI; c++)
            kbuf[(size_t)w * dI + c] = negative && w % 3 == 1 ? (float)(-1.0 - urand() * 0.1)
                                                               : (float)urand();
        keys[w] = kbuf + (size_t)w * dI;
    }
    const int n = dsv4_indexer_topk(ops[0], qI, wI, keys, n_cand, nI, dI, topk, scores, order, sel);
    CHECK(n == (n_cand < topk ? n_cand : topk));
    if (n_cand > topk) {
        /* scores against the formula in double */
        double maxerr = 0;
        int zeros = 0;
        for (int w = 0; w < n_cand; w++) {
            double s = 0, mag = 0;
            for (int h = 0; h < nI; h++) {
                double d = 0;
                for (int c = 0; c < dI; c++) d += (double)qI[h * dI + c] * keys[w][c];
                s += wI[h] * (d > 0 ? d : 0);
                mag += fabs(wI[h] * d);
            }
            maxerr = fmax(maxerr, fabs(scores[w] - s) / (mag + 1e-30));
            zeros += scores[w] == 0.0f;
        }
        CHECK_MSG(maxerr < 1e-5, "indexer scores nI=%d dI=%d: rel err %.3g", nI, dI, maxerr);
        if (negative) CHECK_MSG(zeros >= n_cand / 3, "only %d zero scores", zeros);
        /* the selection is the top of a full sort, ascending */
        for (int w = 0; w < n_cand; w++) ref[w] = w;
        cmp_scores = scores;
        qsort(ref, (size_t)n_cand, sizeof(int), cmp_rank);
        qsort(ref, (size_t)topk, sizeof(int), cmp_int);
        CHECK_MSG(memcmp(ref, sel, sizeof(int) * topk) == 0, "indexer n_cand=%d topk=%d: selection",
                  n_cand, topk);
        CHECK(old_select(scores, n_cand, topk, ref, ref + topk) == topk &&
              memcmp(ref + topk, sel, sizeof(int) * topk) == 0);
        /* scores in ranges, on every level: the same bits */
        for (int l = 0; l < nl; l++)
            for (int chunk = 1; chunk <= n_cand; chunk = chunk * 3 + 1) {
                memset(s2, 0, sizeof(float) * n_cand);
                for (int w0 = 0; w0 < n_cand; w0 += chunk)
                    dsv4_indexer_scores(ops[l], qI, wI, keys, w0,
                                        n_cand - w0 < chunk ? n_cand : w0 + chunk, nI, dI, s2);
                CHECK_MSG(memcmp(scores, s2, sizeof(float) * n_cand) == 0,
                          "indexer level %d, ranges of %d: scores differ", l, chunk);
            }
    } else {
        for (int k = 0; k < n; k++) CHECK(sel[k] == k);
    }
    free(qI); free(wI); free(kbuf); free(scores); free(s2); free(keys); free(order); free(sel);
    free(ref);
}

/* Score patterns that stress a quickselect (sorted, reversed, constant, few distinct
 * values, signed zeros, NaN) against the old heap selection. */
static void test_select_patterns(void) {
    enum { N = 3000 };
    static float sc[N];
    static int work[N], sel[N], sel_old[N], heap[N];
    const int ks[] = {1, 2, 7, 512, 1499, 2999};
    for (int pat = 0; pat < 8; pat++)
        for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
            const int k = ks[t];
            for (int w = 0; w < N; w++) {
                switch (pat) {
                case 0: sc[w] = (float)urand(); break;
                case 1: sc[w] = (float)w; break;                  /* ascending */
                case 2: sc[w] = (float)(N - w); break;            /* descending */
                case 3: sc[w] = 0.0f; break;                      /* all tied */
                case 4: sc[w] = (float)(w % 3); break;            /* three values */
                case 5: sc[w] = w % 2 ? -0.0f : 0.0f; break;      /* signed zeros tie */
                case 6: sc[w] = (float)((w * 7919) % 11) - 5.0f; break;
                default: sc[w] = w % 97 == 5 ? NAN : (float)urand(); break; /* NaN: old rule */
                }
            }
            const int n = dsv4_indexer_select(sc, N, k, work, sel);
            const int n_old = old_select(sc, N, k, heap, sel_old);
            CHECK_MSG(n == n_old && memcmp(sel, sel_old, sizeof(int) * n) == 0,
                      "selection pattern %d k=%d differs from the heap selection", pat, k);
            int asc = 1;
            for (int i = 1; i < n; i++) asc &= sel[i - 1] < sel[i];
            CHECK(asc);
        }
}

/* Long rows (the sampled-threshold candidates of dsv4_indexer_select, n >= 8 topk):
 * the same selection as the heap, for orders and ties that defeat a sample (high scores
 * bunched at one end, between the sampled positions, or all tied at the threshold). */
static void test_select_long(void) {
    enum { N = 40000 };
    static float sc[N];
    static int work[N], sel[N], sel_old[N], heap[N];
    const int ns[] = {4096, 33333, N}, ks[] = {1, 64, 512, 4999};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (int pat = 0; pat < 7; pat++)
            for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
                const int n = ns[a], k = ks[t];
                for (int w = 0; w < n; w++) {
                    switch (pat) {
                    case 0: sc[w] = (float)urand(); break;
                    case 1: sc[w] = (float)w; break;                          /* best at the end */
                    case 2: sc[w] = (float)(n - w); break;                    /* best at the start */
                    case 3: sc[w] = w % 1024 == 3 ? 2.0f : (float)urand(); break; /* off the sample grid */
                    case 4: sc[w] = w % 5 ? 0.0f : (float)(1.0 + urand()); break; /* relu zeros */
                    case 5: sc[w] = (float)(w % 7); break;                    /* 7 values, wide ties */
                    default: sc[w] = w > n - 600 ? 5.0f : (float)urand(); break; /* a recent block */
                    }
                }
                const int got = dsv4_indexer_select(sc, n, k, work, sel);
                const int want = old_select(sc, n, k, heap, sel_old);
                CHECK_MSG(got == want && memcmp(sel, sel_old, sizeof(int) * (size_t)want) == 0,
                          "long selection n=%d pattern %d k=%d differs from the heap selection", n, pat, k);
            }
}

/* Exact ties: equal scores go to the lower index, whatever positions they sit at. */
static void test_ties(void) {
    float scores[10] = {1, 3, 3, 0, 3, 0, 2, 3, 0, 0};
    int order[10], sel[10];
    CHECK(dsv4_indexer_select(scores, 10, 4, order, sel) == 4);
    const int want[4] = {1, 2, 4, 7};
    CHECK(memcmp(sel, want, sizeof want) == 0);
    float zeros[8] = {0};
    CHECK(dsv4_indexer_select(zeros, 8, 3, order, sel) == 3);
    CHECK(sel[0] == 0 && sel[1] == 1 && sel[2] == 2);
}

int main(void) {
    test_attn(1, 8, 1);
    test_attn(3, 17, 5);
    test_attn(16, 64, 37);
    test_attn(13, 130, 200);
    test_attn(16, 512, 70);
    test_softmax_bits(16, 64, 37, -3.0f, 0); /* the max is a zero score */
    test_softmax_bits(5, 40, 200, 3.0f, 0);  /* the sink above every score */
    test_softmax_bits(16, 512, 70, -40.0f, 1); /* a positive score */
    test_softmax_bits(13, 130, 200, -40.0f, 1);
    test_indexer(4, 16, 10, 16, 0);    /* fewer candidates than topk: all, no scoring */
    test_indexer(16, 128, 300, 64, 0);
    test_indexer(5, 33, 257, 100, 1);  /* odd sizes, many exact zeros */
    test_indexer(16, 128, 1000, 512, 1);
    test_ties();
    test_select_long();
    test_select_patterns();
    return test_report();
}
