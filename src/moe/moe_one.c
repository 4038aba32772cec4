/* moe_one.c — the MoE of one row (batch-1 decode) as one pool job.
 *
 * At one row every product is a GEMV and the layer's MoE is about 1.3 MB of weights read
 * once (router, shared expert, six routed experts). Run as three jobs (router, W1/W3 +
 * SwiGLU, W2) with the routing on one thread between the first two, each job ended with
 * the threads up to a task apart and the routing left one thread idle (BENCHMARKS.md,
 * session 7: ~130 us a step). Here the job's threads claim items from one ordered list
 * instead (an atomic counter, ascending):
 *
 *   router blocks | W1/W3 + SwiGLU blocks, shared expert first | W2 blocks, same group order
 *
 * The thread that finishes the last router block routes the token and appends the routed
 * groups; their W1/W3 items wait for that (the shared expert's items, which need no
 * routing, keep the other thread busy meanwhile), and a group's W2 items wait for its
 * W1/W3 items. An item waits only for items before it, each already claimed by a thread
 * that is running it, so the job cannot deadlock, and run on one thread (or nested) the
 * list simply runs in order. Items are cut by bytes (DSV4_MOE_ONE_ITEM_BYTES of weights, the
 * W2 items half that since the job ends on them); a routed expert's matrices that this cuts
 * in one item a thread are taken whole instead (dsv4_moe_one_routed_rows), but for the last
 * T routed W2 matrices, which are cut in halves so that the threads end within half a W2.
 *
 * Each product runs on row views through dsv4_linear_here, whose outputs do not depend on
 * how the rows are cut (linear_fast.h): every value is the one the general path computes.
 */
#include <sched.h>
#include <stdatomic.h>

#include "kernels/kctx.h"
#include "kernels/linear.h"
#include "moe/moe_impl.h"
#include "util/hot.h"

/* A run of items over the rows of a product: items [first, first + count), `rows` rows each
 * (the last one fewer). */
typedef struct {
    int first, count;
    int64_t rows;
} one_span;

typedef struct {
    dsv4_kctx *k;
    const dsv4_config *cfg;
    float limit;
    dsv4_swiglu_fn swiglu; /* the kernel level's loop: the same bits at every level */
    const float *x; /* (D) the row */
    const dsv4_moe_one_route *rt;
    one_span router;
    atomic_int router_left; /* router items not finished */
    atomic_int unrouted;    /* 1 until the routing is done (then route_ok says how it went) */
    int route_ok;
    atomic_int unsliced;    /* a view could not be made */
    dsv4_moe_group gr[DSV4_MOE_ONE_MAX_GROUPS];
    int ng, n_fixed; /* groups; those known before the routing */
    one_span up[DSV4_MOE_ONE_MAX_GROUPS], down[DSV4_MOE_ONE_MAX_GROUPS];
    atomic_int up_left[DSV4_MOE_ONE_MAX_GROUPS]; /* W1/W3 items of a group not finished */
    int n_items;
    int T;           /* threads of the job (span_row0) */
    atomic_int next; /* the next item to claim */
} one_job;

/* Rows per item of w (and a matrix of the same format beside it, n_mats in all): items of
 * at most about `bytes` of weights, as even as a multiple of 4 rows allows; for FP8 a
 * multiple of 128 or else 64, so that every view starts a scale band or lies inside one.
 * A routed expert of another format than expert 0's (which cut its items) may not slice:
 * the job then says so. */
int64_t dsv4_moe_one_item_rows(const dsv4_mat *w, int n_mats, int64_t bytes, int T) {
    const int64_t rows = w->rows > 0 ? w->rows : 1, row_bytes = n_mats * dsv4_mat_bytes(w) / rows;
    int64_t r;
    if (w->fmt == DSV4_WF_FP8) {
        r = row_bytes > 0 ? bytes / row_bytes : rows;
        r = r >= 128 ? r & ~(int64_t)127 : 64;
    } else {
        int64_t items = bytes > 0 ? (rows * row_bytes + bytes - 1) / bytes : 1;
        /* a multiple of the threads, so that span_row0 gives each thread one contiguous run
         * of rows (an FP4 expert's W1/W3 came to 5 items: every item started cold) */
        if (T > 1) items = (items + T - 1) / T * T;
        r = ((rows + items - 1) / items + 3) & ~(int64_t)3;
    }
    return r < rows ? r : rows;
}

/* Rows per item of a routed expert's matrix w: whole (one item, one call a matrix) when the
 * T-thread cut above would give each thread one item of it and the K routed experts share
 * evenly among the threads, else that cut. Whole matrices put each routed expert on one
 * thread instead of half of each on every thread: at Flash-quarter's widths (FP4 W1/W3 557 KB,
 * W2 279 KB, 6 experts, 2 threads) the calls read 278 KB in runs of 64 KB, not 139 KB in runs
 * of 32 KB, and the routed products took 0.90-0.93x the time in the batch-1 step (BENCHMARKS.md,
 * session 21 b1q). The job still ends balanced: every routed item is the same size and
 * K % T == 0. Larger experts (the checkpoint's: 8.9 MB W1/W3) keep the cut, whose items a
 * thread already claims as one contiguous stretch. */
int64_t dsv4_moe_one_routed_rows(const dsv4_mat *w, int n_mats, int64_t bytes, int T, int K) {
    const int64_t r = dsv4_moe_one_item_rows(w, n_mats, bytes, T), rows = w->rows > 0 ? w->rows : 1;
    return T > 1 && K % T == 0 && (rows + r - 1) / r <= T ? rows : r;
}

static int span_add(one_span *s, int first, int64_t rows, int64_t per) {
    *s = (one_span){first, (int)((rows + per - 1) / per), per};
    return first + s->count;
}

/* The first row of item it of span s. The threads take the list's items in turn, so with
 * T threads and T | count, item i covers chunk (i % T) * count / T + i / T: thread t's
 * claims then walk one contiguous stretch of the rows, and each item's prefetch, which
 * runs on past the item's end (gemv_prefetch.h), warms that thread's next item. A claim
 * order that is not strictly in turn only costs that warm start, never a value. */
static int64_t span_row0(const one_span *s, int it, int T) {
    const int i = it - s->first;
    const int c = T > 1 && s->count % T == 0 ? (i % T) * (s->count / T) + i / T : i;
    return (int64_t)c * s->rows;
}

/* Until *a (a count of unfinished work) is 0. Waits are short (an item of the other thread:
 * microseconds); past a few thousand polls its holder may have been descheduled, so yield. */
static void wait_zero(atomic_int *a) {
    for (int i = 0; atomic_load_explicit(a, memory_order_acquire) > 0; i++) {
        if (i < 4096) {
#if defined(__x86_64__) || defined(__i386__)
            __asm__ volatile("pause");
#endif
        } else {
            sched_yield();
        }
    }
}

/* rows [r0, r0 + n) of y = x w^T, for item work; 0, or -1 when w cannot be sliced there */
static int product_rows(one_job *j, const dsv4_mat *w, const float *x, float *y, int64_t r0, int64_t n, int n_ops,
                        const dsv4_mat *w2, float *y2) {
    dsv4_mat v[2];
    if (dsv4_mat_rows(w, r0, n, &v[0]) || (n_ops > 1 && dsv4_mat_rows(w2, r0, n, &v[1]))) {
        atomic_store_explicit(&j->unsliced, 1, memory_order_relaxed);
        return -1;
    }
    const dsv4_lin_op ops[2] = {{&v[0], x, 1, y + r0}, {n_ops > 1 ? &v[1] : NULL, x, 1, n_ops > 1 ? y2 + r0 : NULL}};
    dsv4_linear_here(j->k, ops, n_ops);
    return 0;
}

/* The last router item's finisher: the routing, then the routed groups for everyone. */
static void route(one_job *j) {
    const dsv4_moe_one_route *rt = j->rt;
    const int K = j->cfg->num_experts_per_tok, D = j->cfg->hidden_size, I = j->cfg->moe_intermediate_size;
    if (dsv4_moe_route_row(j->cfg, rt->b, rt->logits, rt->token, rt->sel, rt->w, rt->s, NULL)) {
        atomic_store_explicit(&j->unrouted, 0, memory_order_release); /* route_ok stays 0 */
        return;
    }
    for (int kk = 0; kk < K; kk++) {
        const int e = rt->sel[kk];
        j->gr[j->n_fixed + kk] = (dsv4_moe_group){&rt->b->w1[e], &rt->b->w3[e], &rt->b->w2[e], j->x,
                                                  rt->w + kk, 1, rt->og + (int64_t)kk * D,
                                                  rt->gu + 2 * (int64_t)kk * I, rt->gu + (2 * (int64_t)kk + 1) * I};
    }
    j->route_ok = 1;
    atomic_store_explicit(&j->unrouted, 0, memory_order_release);
}

/* Which span of spans[0 .. n) holds item it (-1: none). */
static int find_span(const one_span *spans, int n, int it) {
    for (int g = 0; g < n; g++)
        if (it >= spans[g].first && it < spans[g].first + spans[g].count) return g;
    return -1;
}

static void run_item(one_job *j, int it) {
    const dsv4_moe_one_route *rt = j->rt;
    if (rt && it < j->router.first + j->router.count) {
        const int64_t r0 = span_row0(&j->router, it, j->T), E = j->cfg->n_routed_experts;
        product_rows(j, &rt->b->gate, j->x, rt->logits, r0, E - r0 < j->router.rows ? E - r0 : j->router.rows, 1,
                     NULL, NULL);
        if (atomic_fetch_sub_explicit(&j->router_left, 1, memory_order_acq_rel) == 1) route(j);
        return;
    }
    int g = find_span(j->up, j->ng, it);
    if (g >= 0) { /* W1/W3 rows of group g, then their SwiGLU */
        if (g >= j->n_fixed) wait_zero(&j->unrouted);
        if (g < j->n_fixed || j->route_ok) {
            const dsv4_moe_group *gp = &j->gr[g];
            const int64_t I = j->cfg->moe_intermediate_size, r0 = span_row0(&j->up[g], it, j->T);
            const int64_t n = I - r0 < j->up[g].rows ? I - r0 : j->up[g].rows;
            dsv4_mat w13;
            if (n == I && gp->u == gp->g + I && dsv4_moe_w13(gp->w1, gp->w3, &w13)) {
                /* the whole expert, W1 and W3 one matrix: one product, the gate then the up row */
                const dsv4_lin_op op = {&w13, gp->x, 1, gp->g};
                dsv4_linear_here(j->k, &op, 1);
                j->swiglu(gp->g, gp->u, gp->w, 1, (int)n, j->limit, gp->g);
            } else if (!product_rows(j, gp->w1, gp->x, gp->g, r0, n, 2, gp->w3, gp->u)) {
                j->swiglu(gp->g + r0, gp->u + r0, gp->w, 1, (int)n, j->limit, gp->g + r0);
            }
        }
        atomic_fetch_sub_explicit(&j->up_left[g], 1, memory_order_release);
        return;
    }
    g = find_span(j->down, j->ng, it);
    if (g < 0) return;
    wait_zero(&j->up_left[g]); /* after the routing too, for a routed group */
    if (g >= j->n_fixed && !j->route_ok) return;
    const dsv4_moe_group *gp = &j->gr[g];
    const int64_t D = j->cfg->hidden_size, r0 = span_row0(&j->down[g], it, j->T);
    product_rows(j, gp->w2, gp->g, gp->out, r0, D - r0 < j->down[g].rows ? D - r0 : j->down[g].rows, 1, NULL, NULL);
}

DSV4_HOT_AT(one_task, 0x20)
static void one_task(void *arg, int t, int tid) {
    (void)t, (void)tid;
    one_job *j = arg;
    for (int it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_items;) run_item(j, it);
}

int dsv4_moe_one_run(dsv4_kctx *k, const dsv4_config *cfg, const dsv4_moe_group *gr, int ng, const float *x,
                     const dsv4_moe_one_route *rt, int64_t item_bytes) {
    const int K = rt ? cfg->num_experts_per_tok : 0;
    const int64_t D = cfg->hidden_size, I = cfg->moe_intermediate_size;
    if (ng + K > DSV4_MOE_ONE_MAX_GROUPS) return -2;
    one_job j = {.k = k, .cfg = cfg, .limit = cfg->swiglu_limit > 0 ? (float)cfg->swiglu_limit : 0.0f,
                 .swiglu = dsv4_kctx_swiglu(k), .x = x, .rt = rt,
                 .ng = ng + K, .n_fixed = ng};
    for (int g = 0; g < ng; g++) j.gr[g] = gr[g];
    int n = 0;
    j.T = dsv4_kctx_threads(k);
    if (rt) {
        n = span_add(&j.router, 0, rt->b->gate.rows,
                     dsv4_moe_one_item_rows(&rt->b->gate, 1, item_bytes, j.T));
    }
    /* the routed groups' items are cut as expert 0's matrices would be; W1 and W3 share a
     * format (else the job reports an unsliced view) */
    for (int g = 0; g < j.ng; g++)
        n = span_add(&j.up[g], n, I,
                     g < ng ? dsv4_moe_one_item_rows(gr[g].w1, 2, item_bytes, j.T)
                            : dsv4_moe_one_routed_rows(&rt->b->w1[0], 2, item_bytes, j.T, K));
    for (int g = 0; g < j.ng; g++) { /* W2 items half the size: the job ends on them */
        int64_t per = g < ng ? dsv4_moe_one_item_rows(gr[g].w2, 1, item_bytes / 2, j.T)
                             : dsv4_moe_one_routed_rows(&rt->b->w2[0], 1, item_bytes / 2, j.T, K);
        /* the last T routed W2 matrices, whole, in halves: the threads end within half a W2
         * (~6 us at Flash-quarter's 279 KB) whichever core runs slower, where a whole one
         * left the other thread waiting up to a W2 (~12 us): the job's idle 31-39 -> 21-26 us
         * a step, its wall -0.8 to -12.6 (6 runs, A/A -4.8 to +4.0; BENCHMARKS.md, session 31
         * bal). Whole routed W2s before them keep their long runs (session 21 b1q). */
        if (j.T > 1 && g >= ng && g >= j.ng - j.T && per == D) per = ((D + 1) / 2 + 3) & ~(int64_t)3;
        n = span_add(&j.down[g], n, D, per);
    }
    j.n_items = n;
    atomic_init(&j.router_left, j.router.count);
    atomic_init(&j.unrouted, 1);
    atomic_init(&j.unsliced, 0);
    atomic_init(&j.next, 0);
    for (int g = 0; g < j.ng; g++) atomic_init(&j.up_left[g], j.up[g].count);
    dsv4_kctx_parallel(k, dsv4_kctx_threads(k), one_task, &j);
    if (atomic_load(&j.unsliced)) return -2;
    return rt && !j.route_ok ? -1 : 0;
}
