/* indexer.c — lightning indexer top-k (spec/model.md §5.9).
 *
 * score[w] = sum_h wI[h] * relu(qI[h] . K_w); the index_topk best entries are kept, ties
 * going to the lower index (relu makes exact zeros common, so the rule matters), and the
 * selection is returned in ascending entry order, the order attention uses them in.
 *
 * Scoring and selection are separate so that a caller can score ranges of entries on
 * different threads: each score depends only on its entry (dots in the fixed order of
 * attn_ops.h, heads summed in ascending h), and the selection runs once over all scores,
 * so the choice is the same however the scoring was split.
 */
#include <stdlib.h>

#include "attn/attention.h"

/* Heads whose dots one dotn call computes (indexer heads are few; bounds the stack). */
#define IDX_HEAD_CHUNK 32

void dsv4_indexer_scores(const dsv4_attn_ops *ops, const float *qI, const float *wI,
                         const float *const *keys, int w0, int w1, int nI, int dI,
                         float *scores) {
    float dot[IDX_HEAD_CHUNK];
    for (int w = w0; w < w1; w++) {
        float s = 0.0f;
        for (int h0 = 0; h0 < nI; h0 += IDX_HEAD_CHUNK) {
            const int nh = nI - h0 < IDX_HEAD_CHUNK ? nI - h0 : IDX_HEAD_CHUNK;
            ops->dotn(qI + (size_t)h0 * dI, (size_t)dI, nh, keys[w], dI, dot, 1);
            for (int h = 0; h < nh; h++) s += wI[h0 + h] * (dot[h] > 0.0f ? dot[h] : 0.0f);
        }
        scores[w] = s;
    }
}

/* True when entry i ranks before entry j: higher score, then lower index. */
static int ranks_before(const float *score, int i, int j) {
    return score[i] > score[j] || (score[i] == score[j] && i < j);
}

/* Sift-down in a heap whose root is the WORST kept entry. */
static void sift_down(int *heap, int n, int at, const float *score) {
    for (;;) {
        int l = 2 * at + 1, r = l + 1, worst = at;
        if (l < n && ranks_before(score, heap[worst], heap[l])) worst = l;
        if (r < n && ranks_before(score, heap[worst], heap[r])) worst = r;
        if (worst == at) return;
        int t = heap[at]; heap[at] = heap[worst]; heap[worst] = t;
        at = worst;
    }
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int dsv4_indexer_select(const float *scores, int n_cand, int topk, int *order, int *sel) {
    if (n_cand <= topk) {
        for (int w = 0; w < n_cand; w++) sel[w] = w;
        return n_cand;
    }
    /* keep the topk best in a heap rooted at the worst of them */
    int n = 0;
    for (int w = 0; w < n_cand; w++) {
        if (n < topk) {
            order[n++] = w;
            if (n == topk)
                for (int i = topk / 2 - 1; i >= 0; i--) sift_down(order, n, i, scores);
        } else if (ranks_before(scores, w, order[0])) {
            order[0] = w;
            sift_down(order, n, 0, scores);
        }
    }
    for (int i = 0; i < n; i++) sel[i] = order[i];
    qsort(sel, (size_t)n, sizeof(int), cmp_int);
    return n;
}

int dsv4_indexer_topk(const dsv4_attn_ops *ops, const float *qI, const float *wI,
                      const float *const *keys, int n_cand, int nI, int dI, int topk,
                      float *scores, int *order, int *sel) {
    if (n_cand > topk) dsv4_indexer_scores(ops, qI, wI, keys, 0, n_cand, nI, dI, scores);
    return dsv4_indexer_select(scores, n_cand, topk, order, sel);
}
