/* idx_scores.h — the lightning indexer's scores (spec/model.md §5.9) as one kernel over a
 * block of queries and a range of keys.
 *
 *   scores[q * ss + w] = sum over h ascending of wI[q * ws + h] * relu(qI[q, h] . keys[w])
 *
 * for q < nq and w0 <= w < min(w1, lim[q]) (each query scores the keys it can see); the sum
 * starts at +0, each term is rounded and then added, relu(d) = d > 0 ? d : +0, and the dot
 * is attn_ops.h's (8 lanes, no fused multiply-add, a fixed tree). Every level therefore
 * gives the same bits, the bits of scoring one query at a time with dsv4_attn_ops.dot_rows,
 * and nothing depends on how queries and keys are blocked or which thread runs a block.
 * Keys are read in their storage format, F32 or BF16 (kernels/kv_rows.h; BF16 widened in
 * registers, exactly): a BF16 key gives the bits of its F32 copy. FP4 keys (DSV4_ROW_FP4,
 * stored only under fidelity F3) give the bits of their F32 copies too: at the AVX-512
 * levels (whole 32-value blocks) each key pair is decoded from its bytes straight into the
 * kernel's interleaved pair, the same exact values; elsewhere they are unpacked, exactly, in
 * runs of keys into F32 on the stack (dsv4_idx_fp4_runs) and scored as F32.
 *
 * Levels: the portable one is that per-query loop over ops->dot_rows. The AVX-512 level puts
 * the 8 lanes of two keys' dots side by side in one 16-lane register: a key pair is
 * interleaved once (chunk c of key w in lanes 0-7, of key w + 1 in lanes 8-15) and then
 * used by every query of the block and every head (each query chunk broadcast to both
 * halves), 8 heads at a time for 8 independent accumulators; the 8-lane tree, relu, the
 * head weight and the head sum run on both keys at once. Half the multiply and add
 * instructions of the AVX2 dot per score, the keys read once per query block.
 */
#ifndef DSV4_KERNELS_IDX_SCORES_H
#define DSV4_KERNELS_IDX_SCORES_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attn_ops.h"

/* qI: (nq, nI, dI) at row stride qs floats; wI: (nq, nI) at row stride ws; lim: (nq) keys
 * query q sees; keys[w]: dI values each in key_fmt (DSV4_ROW_F32, DSV4_ROW_BF16 or DSV4_ROW_FP4);
 * scores: (nq, ss). simd: the kernel level
 * (kernels/cpu.h), ops: the dot kernels of the portable path (dsv4_attn_ops_for). */
void dsv4_idx_scores(int simd, const dsv4_attn_ops *ops, const float *qI, size_t qs, const float *wI, size_t ws,
                     int nq, const int64_t *lim, const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI, int dI,
                     float *scores, size_t ss);

/* FP4 keys as F32: keys [w0, wmax) (wmax: the last key any query sees) unpacked (level simd:
 * the AVX-512 one by a permute per 16 values, the same bits) in runs of
 * at most DSV4_IDX_FP4_RUN_FLOATS / dI keys into a stack buffer, and for each run and each
 * group of at most 16 queries from q0, fn(user, q0, g, glim, fkeys, c0, n) with fkeys[0, n)
 * the F32 keys c0 .. c0 + n - 1 and glim[k] = max(min(lim, w1) - c0, 0) for query q0 + k
 * (the keys it sees from c0; the callers' kernels stop at n). They run their F32 kernel on
 * keys [0, n) of the run, shifting
 * their outputs by c0: the same bits as on F32 keys, since no result depends on how keys
 * and queries are blocked. dI <= DSV4_IDX_FP4_RUN_FLOATS. */
#define DSV4_IDX_FP4_RUN_FLOATS 8192
typedef void (*dsv4_idx_run_fn)(void *user, int q0, int g, const int64_t *glim, const void *const *fkeys, int64_t c0,
                                int64_t n);
void dsv4_idx_fp4_runs(int simd, const int64_t *lim, int nq, const void *const *keys, int64_t w0, int64_t w1, int dI,
                       dsv4_idx_run_fn fn, void *user);

/* The portable level alone (the reference of the tests); F32 and BF16 keys. */
void dsv4_idx_scores_ref(const dsv4_attn_ops *ops, const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                         const int64_t *lim, const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI,
                         int dI, float *scores, size_t ss);

#endif
