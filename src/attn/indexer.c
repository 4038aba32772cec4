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
#include "attn/attention.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/idx_approx.h"
#include "kernels/idx_scores.h"
#include "kernels/kv_rows.h"

void dsv4_indexer_scores(const dsv4_attn_ops *ops, const float *qI, const float *wI,
                         const float *const *keys, int w0, int w1, int nI, int dI,
                         float *scores) {
    const int64_t lim = w1;
    dsv4_idx_scores_ref(ops, qI, 0, wI, 0, 1, &lim, (const void *const *)keys, DSV4_ROW_F32, w0, w1, nI, dI,
                        scores, 0);
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

/* Sorts a[0, n) ascending in place: a heapsort, because glibc's qsort may malloc a
 * buffer (arrays over 1 KiB) and the forward must not allocate. */
static void sort_ints(int *a, int n) {
    for (int end = n, root = n / 2 - 1; end > 1;) {
        int at;
        if (root >= 0) {
            at = root--;               /* heapify: sift each inner node down */
        } else {
            int t = a[0]; a[0] = a[--end]; a[end] = t; /* move the max behind the heap */
            at = 0;
        }
        for (;;) {
            int c = 2 * at + 1;
            if (c >= end) break;
            if (c + 1 < end && a[c + 1] > a[c]) c++;
            if (a[at] >= a[c]) break;
            int t = a[at]; a[at] = a[c]; a[c] = t;
            at = c;
        }
    }
}

/* The old-style selection: a heap of the topk best rooted at the worst of them, then the
 * kept indices sorted. heap (topk). Used when a score is NaN (no total order: the result
 * then depends on the visiting order, and this keeps it what it always was). */
static int select_heap(const float *scores, int n_cand, int topk, int *heap, int *sel) {
    int n = 0;
    for (int w = 0; w < n_cand; w++) {
        if (n < topk) {
            heap[n++] = w;
            if (n == topk)
                for (int i = topk / 2 - 1; i >= 0; i--) sift_down(heap, n, i, scores);
        } else if (ranks_before(scores, w, heap[0])) {
            heap[0] = w;
            sift_down(heap, n, 0, scores);
        }
    }
    for (int i = 0; i < n; i++) sel[i] = heap[i];
    sort_ints(sel, n);
    return n;
}

int dsv4_indexer_select(const float *scores, int n_cand, int topk, int *work, int *sel) {
    if (n_cand <= topk) {
        for (int w = 0; w < n_cand; w++) sel[w] = w;
        return n_cand;
    }
    if (topk <= 0) return 0;
    for (int w = 0; w < n_cand; w++)
        if (scores[w] != scores[w]) return select_heap(scores, n_cand, topk, work, sel);
    /* the topk-th largest score by the radix select (dsv4_indexer_kth_largest, as the
     * bounded path's thresholds), then every score above it and the lowest-index ties at it
     * (ranks_before's order): the selection, already ascending */
    const float v = dsv4_indexer_kth_largest(scores, n_cand, topk, work);
    int above = 0;
    for (int w = 0; w < n_cand; w++) above += scores[w] > v;
    int n = 0, ties = topk - above;
    for (int w = 0; w < n_cand; w++) {
        const int tie = scores[w] == v && ties > 0;
        if (scores[w] > v || tie) sel[n++] = w;
        ties -= tie;
    }
    return n;
}

/* x's bits as an unsigned key in x's order: negative values flipped whole, positive ones
 * with the sign bit set (-0 ranks just below +0; NaN is not given). */
static inline uint32_t order_key(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
}

/* Counts the digits ((key >> lo) & mask) of the n keys of x at idx (all n when idx is NULL)
 * into two histograms, even entries to h0 and odd to h1, so that runs of one digit do not
 * make every increment wait on the one before. */
static inline void count_digits(const float *x, const int *idx, int n, int lo, uint32_t mask, uint32_t *h0,
                                uint32_t *h1) {
    int i = 0;
    for (; i + 2 <= n; i += 2) {
        h0[(order_key(x[idx ? idx[i] : i]) >> lo) & mask]++;
        h1[(order_key(x[idx ? idx[i + 1] : i + 1]) >> lo) & mask]++;
    }
    if (i < n) h0[(order_key(x[idx ? idx[i] : i]) >> lo) & mask]++;
}

/* The digit holding rank k (from the largest) over n_hist histograms of digits 0..mask, one
 * every stride counts: from the top digit down (one must hold it: k <= the counts' sum); k
 * becomes its rank among the keys with that digit. */
static inline uint32_t rank_digit(const uint32_t *hist, int n_hist, size_t stride, uint32_t mask, int *k) {
    uint32_t d = mask, above = 0;
    for (;; d--) {
        uint32_t c = 0;
        for (int t = 0; t < n_hist; t++) c += hist[(size_t)t * stride + d];
        if (above + c >= (uint32_t)*k || d == 0) break;
        above += c;
    }
    *k -= (int)above;
    return d;
}

/* The digit (nb bits from bit lo) of the k-th largest key among the n keys of x at idx (all
 * n when idx is NULL) that share the digits above it; k becomes its rank among those with
 * that digit. */
static uint32_t radix_digit(const float *x, const int *idx, int n, int lo, int nb, int *k) {
    uint32_t h[2][2048];
    const uint32_t mask = (1u << nb) - 1;
    memset(h, 0, sizeof h);
    count_digits(x, idx, n, lo, mask, h[0], h[1]);
    return rank_digit(&h[0][0], 2, 2048, mask, k);
}

/* The k-th largest of the m entries of x listed in work (all of them sharing top digit d1;
 * k their rank there) from the second digit on; work is overwritten. */
static float kth_tail(const float *x, int *work, int m, uint32_t d1, int k) {
    const uint32_t d2 = radix_digit(x, work, m, 10, 11, &k);
    int m2 = 0;
    for (int i = 0; i < m; i++) {
        const int w = work[i];
        work[m2] = w;
        m2 += ((order_key(x[w]) >> 10) & 2047u) == d2;
    }
    const uint32_t d3 = radix_digit(x, work, m2, 0, 10, &k);
    uint32_t u = (d1 << 21) | (d2 << 10) | d3; /* back from the key to the bits */
    u = (u & 0x80000000u) ? u ^ 0x80000000u : ~u;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

float dsv4_indexer_kth_largest(const float *x, int n, int k, int *work) {
    /* 11 + 11 + 10 bits; after each digit the entries sharing the prefix, compacted into
     * work without a branch (work[m] is written for every entry, m advances on a match) */
    const uint32_t d1 = radix_digit(x, NULL, n, 21, 11, &k);
    int m = 0;
    for (int i = 0; i < n; i++) {
        work[m] = i;
        m += (order_key(x[i]) >> 21) == d1;
    }
    return kth_tail(x, work, m, d1, k);
}

/* Exact scores of all n_cand entries into fbuf, then the selection over them. */
static int select_exact(const dsv4_indexer_query *iq, int n_cand, int topk, float *fbuf, int *work, int *sel) {
    const int64_t lim = n_cand;
    dsv4_idx_scores(iq->simd, iq->ops, iq->qI, 0, iq->wI, 0, 1, &lim, iq->keys, iq->key_fmt, 0, n_cand, iq->nI,
                    iq->dI, fbuf, 0);
    return dsv4_indexer_select(fbuf, n_cand, topk, work, sel);
}

/* The lower bounds lb[w] = approx[w] - bound for w in [w0, w1); nonzero when a bound does
 * not hold for one of them (an approximate score not finite or a key norm past kmax: NaN
 * fails both tests). The first pass of dsv4_indexer_select_verified and of its parts. */
static inline int lower_bounds(const dsv4_idx_bound *b, const float *approx, const float *knorm, int w0, int w1,
                               float *lb) {
    int bad = 0;
    for (int w = w0; w < w1; w++) {
        const float a = approx[w], k = knorm[w];
        bad |= !(fabsf(a) <= FLT_MAX) | !(k <= b->kmax);
        lb[w] = a - dsv4_idx_approx_bound(b, k);
    }
    return bad;
}

/* From the nc candidates (cidx, ckeys: every entry whose upper bound reaches tau, the
 * topk-th largest lower bound, ascending) to the selection: dsv4_indexer_select_verified's
 * second half, shared with dsv4_indexer_select_cut. */
static int select_candidates(const dsv4_indexer_query *iq, const float *approx, const float *knorm,
                             const dsv4_idx_bound *bp, int nc, int n_cand, int topk, float *fbuf, int *cidx,
                             const void **ckeys, int *work, int *sel) {
    const dsv4_idx_bound b = *bp;
    if (nc == topk) { /* no entry near the boundary: the candidates are the selection */
        memcpy(sel, cidx, sizeof(int) * (size_t)nc);
        cidx[0] = -1; /* none scored exactly */
        return nc;
    }
    /* theta: the (topk + 1)-th largest upper bound among the candidates (nc > topk of them).
     * A candidate whose lower bound exceeds theta is selected whatever the exact scores:
     * at most topk upper bounds exceed theta, its own among them, so at most topk - 1 other
     * entries can score as much as it does (entries outside the candidates score below tau
     * <= theta). Only the others (the boundary's few) are scored exactly, and the rest of
     * the selection is the best of them. */
    int ns = 0, nu = 0;
    for (int k = 0; k < nc; k++) fbuf[k] = approx[cidx[k]] + dsv4_idx_approx_bound(&b, knorm[cidx[k]]);
    const float theta = dsv4_indexer_kth_largest(fbuf, nc, topk + 1, work);
    for (int k = 0; k < nc; k++) { /* sure ones into sel, the others compacted, both ascending */
        const int w = cidx[k];
        if (approx[w] - dsv4_idx_approx_bound(&b, knorm[w]) > theta) {
            sel[ns++] = w;
        } else {
            cidx[nu] = w;
            ckeys[nu++] = ckeys[k];
        }
    }
    if (nu < n_cand) cidx[nu] = -1; /* the callers' count of the entries scored exactly */
    if (ns == topk) return ns;
    const int64_t lim = nu;
    dsv4_idx_scores(iq->simd, iq->ops, iq->qI, 0, iq->wI, 0, 1, &lim, ckeys, iq->key_fmt, 0, nu, iq->nI, iq->dI,
                    fbuf, 0);
    /* the best topk - ns of them into sel after the sure ones (their ascending order makes
     * index ties in fbuf the entries' own ties), then both runs merged ascending via work */
    const int n = dsv4_indexer_select(fbuf, nu, topk - ns, work, sel + ns);
    for (int i = 0; i < n; i++) sel[ns + i] = cidx[sel[ns + i]];
    int a = 0, z = ns, m = 0;
    while (a < ns || z < ns + n) work[m++] = z == ns + n || (a < ns && sel[a] < sel[z]) ? sel[a++] : sel[z++];
    memcpy(sel, work, sizeof(int) * (size_t)m);
    return m;
}

int dsv4_indexer_select_verified(const dsv4_indexer_query *iq, const float *approx, const float *knorm, int n_cand,
                                 int topk, float *fbuf, int *cidx, const void **ckeys, int *work, int *sel) {
    if (n_cand <= topk || topk <= 0) return dsv4_indexer_select(approx, n_cand, topk, work, sel);
    const dsv4_idx_bound b = dsv4_idx_approx_query(iq->qI, iq->wI, iq->nI, iq->dI);
    if (!b.valid) return select_exact(iq, n_cand, topk, fbuf, work, sel);
    if (lower_bounds(&b, approx, knorm, 0, n_cand, fbuf)) return select_exact(iq, n_cand, topk, fbuf, work, sel);
    /* tau: the topk-th largest lower bound, by the radix select (flash_quarter's CSA rows at
     * 32K context, 8192 lower bounds: ~53 us by the sampled quickselect, ~20 by the radix; the
     * selection runs inline while the other thread waits, and a CSA layer's took 105-113 us
     * of a 3.7 ms step, 52-60 with both thresholds and the candidates below so) */
    const float tau = dsv4_indexer_kth_largest(fbuf, n_cand, topk, work);
    /* the candidates: every entry whose upper bound reaches tau, ascending (compacted without
     * a branch: cidx[nc] and ckeys[nc] are written for every entry, nc < n_cand before) */
    int nc = 0;
    for (int w = 0; w < n_cand; w++) {
        cidx[nc] = w;
        ckeys[nc] = iq->keys[w];
        nc += approx[w] + dsv4_idx_approx_bound(&b, knorm[w]) >= tau;
    }
    return select_candidates(iq, approx, knorm, &b, nc, n_cand, topk, fbuf, cidx, ckeys, work, sel);
}

/* ---- the bounded selection in parts (a decode row's, attention.c) ---------------------
 * dsv4_indexer_select_verified's passes over all n_cand entries (the lower bounds, tau's
 * first digit, the candidates) are split by ranges of entries so that a decode step's
 * threads share them: the lower bounds and a histogram of their top digits in the score
 * tasks (dsv4_indexer_bounds_part, a histogram a thread), the digit found by the caller
 * (dsv4_indexer_cut_digit), the entries of that digit and a superset of the candidates
 * listed by range (dsv4_indexer_cut_part), the rest from those lists on one thread
 * (dsv4_indexer_select_cut). Counts are integers and the lists keep the entries' order, so
 * tau, the candidates and the selection are those of dsv4_indexer_select_verified, however
 * the entries were split or which thread counted them. */

int dsv4_indexer_bounds_part(const dsv4_idx_bound *b, const float *approx, const float *knorm, int w0, int w1,
                             float *lb, uint32_t *hist) {
    const int bad = lower_bounds(b, approx, knorm, w0, w1, lb); /* apart from the histogram: it vectorizes */
    /* the top digits in two histograms, even and odd entries, as radix_digit (NaN keys too:
     * 11 bits index any of them) */
    count_digits(lb + w0, NULL, w1 - w0, 21, DSV4_INDEXER_HIST - 1, hist, hist + DSV4_INDEXER_HIST);
    return bad;
}

void dsv4_indexer_cut_digit(const uint32_t *hist, int n_hist, int topk, dsv4_indexer_cut *cut) {
    cut->k = topk;
    cut->d1 = rank_digit(hist, n_hist, DSV4_INDEXER_HIST, DSV4_INDEXER_HIST - 1, &cut->k);
}

void dsv4_indexer_cut_part(const dsv4_indexer_cut *cut, const float *approx, const float *knorm, int w0, int w1,
                           int *c, int *nc) {
    /* c: every entry whose upper bound can reach tau. tau's key has top digit d1, and the
     * keys order the floats as >= does except -0 below +0; an upper bound approx + bound is
     * never -0 (bound >= +0, and a sum with a +0 or positive term is not -0), so one that
     * reaches tau has a key at or above tau's, thus at or above d1's first */
    const uint32_t lo = cut->d1 << 21;
    int n = 0;
    for (int w = w0; w < w1; w++) {
        const float ub = approx[w] + dsv4_idx_approx_bound(&cut->b, knorm[w]);
        c[n] = w;
        n += order_key(ub) >= lo;
    }
    *nc = n;
}

int dsv4_indexer_select_cut(const dsv4_indexer_query *iq, const float *approx, const float *knorm, const float *lb,
                            const dsv4_indexer_cut *cut, int n_cand, int topk, float *fbuf, int *cidx,
                            const void **ckeys, int *work, int *sel) {
    if (n_cand <= topk || topk <= 0) return dsv4_indexer_select(approx, n_cand, topk, work, sel);
    if (!cut->b.valid || cut->bad) return select_exact(iq, n_cand, topk, fbuf, work, sel);
    /* tau from the entries of digit d1, found among the parts' lists: a lower bound of
     * digit d1 has its upper bound (never -0, never below it) at or above d1's first key */
    int m = 0;
    for (int p = 0; p < cut->n_parts; p++) {
        const int *cp = cut->c + cut->part0[p];
        for (int i = 0; i < cut->nc[p]; i++) {
            work[m] = cp[i];
            m += (order_key(lb[cp[i]]) >> 21) == cut->d1;
        }
    }
    const float tau = kth_tail(lb, work, m, cut->d1, cut->k);
    /* the candidates among the parts' supersets, ascending; then their keys */
    int nc = 0;
    for (int p = 0; p < cut->n_parts; p++) {
        const int *cp = cut->c + cut->part0[p];
        for (int i = 0; i < cut->nc[p]; i++) {
            const int w = cp[i];
            cidx[nc] = w;
            nc += approx[w] + dsv4_idx_approx_bound(&cut->b, knorm[w]) >= tau;
        }
    }
    for (int i = 0; i < nc; i++) ckeys[i] = iq->keys[cidx[i]];
    return select_candidates(iq, approx, knorm, &cut->b, nc, n_cand, topk, fbuf, cidx, ckeys, work, sel);
}

int dsv4_indexer_topk(const dsv4_attn_ops *ops, const float *qI, const float *wI,
                      const float *const *keys, int n_cand, int nI, int dI, int topk,
                      float *scores, int *work, int *sel) {
    if (n_cand > topk) dsv4_indexer_scores(ops, qI, wI, keys, 0, n_cand, nI, dI, scores);
    return dsv4_indexer_select(scores, n_cand, topk, work, sel);
}
