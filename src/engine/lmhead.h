/* lmhead.h — vocabulary-sharded LM head and the exact sharded greedy argmax
 * (spec/serving.md §b). The public calls are in dsv4.h (dsv4_lm_head_shard, _dist,
 * _argmax); these are the pieces they are made of, exposed for tests.
 *
 * Greedy order: a value ranks above another when it is larger; equal values rank by the
 * lower token id; NaN ranks below every number (and among NaNs the lower id wins). This is
 * a total order on (value, id), so the reduction over shards is associative and
 * commutative and equals the argmax of the full row, whatever the sharding. */
#ifndef DSV4_ENGINE_LMHEAD_H
#define DSV4_ENGINE_LMHEAD_H

#include <stdint.h>

#include "dsv4.h"
#include "kernels/kctx.h"
#include "kernels/linear.h"
#include "util/arena.h"

/* Same layout as MPI_FLOAT_INT (struct { float; int; }). */
typedef struct dsv4_argmax {
    float v;
    int32_t id;
} dsv4_argmax;

/* The pair that loses to every real pair (an empty shard's contribution). */
#define DSV4_ARGMAX_NONE ((dsv4_argmax){__builtin_nanf(""), INT32_MAX})

/* 1 when a ranks above b in the greedy order. */
static inline int dsv4_argmax_better(dsv4_argmax a, dsv4_argmax b) {
    const int an = a.v != a.v, bn = b.v != b.v;
    if (an != bn) return bn;
    if (!an && a.v != b.v) return a.v > b.v;
    return a.id < b.id;
}

/* out[r] = best (value, id0 + column) of row r of logits (n_rows, n_cols); n_cols == 0
 * gives DSV4_ARGMAX_NONE. */
void dsv4_argmax_rows(const float *logits, int n_rows, int n_cols, int32_t id0, dsv4_argmax *out);

/* pairs (n_rows) <- the best over all ranks of d, element-wise (MPI_Allreduce with a user
 * operator). Collective. Without MPI / one rank: unchanged. */
int dsv4_argmax_allreduce(dsv4_dist *d, dsv4_argmax *pairs, int n_rows, dsv4_err *err);

/* logits (n_rows, hi - lo) = hidden (n_rows, D) . head[lo:hi]^T, each value as the full
 * product computes it (dsv4_linear's values depend on neither the batch nor the slice).
 * An FP8 head sliced off its 128-row scale blocks runs the aligned superset through a
 * buffer of DSV4_LMHEAD_ROWS rows taken from scratch. */
int dsv4_lmhead_logits_range(dsv4_kctx *k, dsv4_arena *scratch, const dsv4_mat *head,
                             const float *hidden, int n_rows, int lo, int hi, float *logits,
                             dsv4_err *err);

/* logits (n_rows, V) = hidden (n_rows, D) . head^T on this process, the values of
 * dsv4_linear. Up to DSV4_LMHEAD_ROWS hidden rows (a decode step's) off a 64-byte line (a
 * caller's malloc: 16 bytes off one) are copied into scratch first: the GEMV loads x 64
 * bytes at a time for every pair of weight rows, and a split line on each load took the
 * BF16 head at 16 rows 1.27x the time hot (BENCHMARKS.md, session 19 b16). More rows take
 * the tile GEMM, which packs x itself. */
int dsv4_lmhead_local(dsv4_kctx *k, dsv4_arena *scratch, const dsv4_mat *head, const float *hidden, int n_rows,
                      float *logits, dsv4_err *err);

/* Rows a head call buffers at a time (the unaligned FP8 slice, the greedy argmax's logits,
 * a group's broadcast, shards and gather), and the scratch bytes that takes for vocabulary
 * V, hidden size D and a group of P ranks (1: none; engine/scratch.c sizes the engine's
 * arena for it). */
#define DSV4_LMHEAD_ROWS 16
size_t dsv4_lmhead_scratch_bytes(int64_t V, int64_t D, int P);

/* A DP group's head with DSV4_PAR_DP_HEAD (lmhead_dp.c): collective over e->group, every
 * rank its own n_rows (zero allowed) and either kind; kind DSV4_DP_HEAD_LOGITS fills logits
 * (n_rows, V), DSV4_DP_HEAD_ARGMAX ids (n_rows) and values (n_rows, may be NULL), bitwise
 * the full head's. Each rank computes its vocabulary shard for every rank's rows. */
enum { DSV4_DP_HEAD_LOGITS = 0, DSV4_DP_HEAD_ARGMAX = 1 };
int dsv4_lmhead_dp(dsv4_engine *e, const float *hidden, int n_rows, int kind, float *logits, int32_t *ids,
                   float *values, dsv4_err *err);
/* Rows [0, n) of logits (V columns) from P vocabulary shards' blocks laid shard after shard
 * (shard q's (n, width) block at blocks + n * lo_q, dsv4_lm_head_shard_range's [lo_q, hi_q)). */
void dsv4_lmhead_place_shards(float *logits, int V, int P, const float *blocks, int n);
/* Its scratch bytes for a group of P ranks (0 for one). */
size_t dsv4_lmhead_dp_scratch_bytes(int64_t V, int64_t D, int P);

#endif
