/* idx_approx.h — fast approximate lightning-indexer scores with a proven error bound, so that
 * the exact top-k can be found while scoring exactly only the entries near its boundary.
 *
 * The indexer's scores (idx_scores.h) serve only to select the index_topk best entries, and
 * that selection must be the exact path's, bit for bit. This kernel computes the same
 * formula in any summation order, with fused multiply-adds and 16 keys side by side, and
 * beside each score the key's norm ||K_w||. For every query and key
 *
 *   |exact(w) - approx(w)| <= eps * Q * ||K_w|| + alpha     (dsv4_idx_approx_bound)
 *
 * with Q = sum_h |wI[h]| * ||qI[h]|| of the query: the head dots and the weighted head sum
 * are inner products of finite floats whose rounding error is at most gamma_n = n u /
 * (1 - n u) times the sum of the magnitudes of their terms (u = 2^-24, any order, fused or
 * not; Higham, Accuracy and Stability of Numerical Algorithms, 3.1), Cauchy-Schwarz bounds
 * sum_i |q_i K_i| by ||q|| ||K||, relu is 1-Lipschitz, and eps holds twice what that adds
 * up to (the rounding of the norms and of the bound itself included).
 * The bound is valid only when every input is finite and the scores do not overflow:
 * dsv4_indexer_select_verified (attn/indexer.c) checks that and otherwise scores exactly.
 *
 * Scores and norms are written for q < nq and w0 <= w < min(w1, lim[q]), as idx_scores.h
 * writes scores; knorm has the layout of scores (the norm repeated for every query), so
 * that a caller can give each query block its own rows and no two tasks write the same
 * float (the BF16-dot kernel writes a larger weight in its place: see the kernel enum).
 * Levels: a portable loop (also the tests' second opinion) and AVX-512 + FMA, which
 * transposes 32 keys into two (dI, 16) panels once per query block (prefetching the next
 * 32 keys' rows meanwhile) and runs every head of every query against both with broadcast
 * FMAs, each query value broadcast once for 32 keys: no reductions, twice the work per
 * instruction of the exact kernel; and AVX2 + FMA (idx_approx_avx2.c), its form in 8 lanes:
 * 8 keys a (dI, 8) panel, 3 panels a pass, for dI <= 256 (wider: the portable loop).
 */
#ifndef DSV4_KERNELS_IDX_APPROX_H
#define DSV4_KERNELS_IDX_APPROX_H

#include <stddef.h>
#include <stdint.h>

/* Arguments as dsv4_idx_scores (idx_scores.h), plus knorm (nq, ss). Returns 1 when it scored
 * FP4 keys by integer block dots (dsv4_idx_approx_fp4_int), else 0. */
int dsv4_idx_approx(int simd, const float *qI, size_t qs, const float *wI, size_t ws, int nq, const int64_t *lim,
                    const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI, int dI, float *scores,
                    float *knorm, size_t ss);

/* Which AVX-512 kernel (bench_indexer's old against new, the tests' both kernels at every nq):
 * AUTO as dsv4_idx_approx chooses, PANEL the key-panel kernel, FEW the heads-in-lanes kernel
 * where it fits (at most 4 vectors of 16 heads in all: nq x ceil(nI / 16) <= 4), else PANEL.
 * AUTO takes FEW for nq <= DSV4_IDX_APPROX_FEW_MAX_NQ. Other levels ignore it. FP4 keys: AUTO
 * scores them by integer block dots (dsv4_idx_approx_fp4_int) from DSV4_IDX_FP4_INT_MIN_SIMD
 * up, where the query allows; PANEL and FEW unpack them to F32 first (as the portable level
 * does); INT takes the integer dots at any level (the portable level's is the tests' second
 * opinion). F32 and BF16 keys read INT as AUTO. BF16 keys: where the key-panel kernel runs
 * (PANEL's calls of AUTO) at avx512vbmi on a CPU with AVX512_BF16, AUTO takes the BF16-dot
 * kernel (idx_approx_bf16.c: the query rounded to BF16, vdpbf16ps), whose knorm is the norm
 * times a factor of the query's rounding plus a term (both >= 1 / >= 0: every score stays
 * within dsv4_idx_approx_bound of the exact one; a query that would loosen the bound too
 * much goes the F32 kernel's way); BF16 forces it where the level, CPU and keys allow, else
 * as PANEL; PANEL is the F32 kernel. */
enum { DSV4_IDX_APPROX_AUTO, DSV4_IDX_APPROX_PANEL, DSV4_IDX_APPROX_FEW, DSV4_IDX_APPROX_INT, DSV4_IDX_APPROX_BF16 };
#define DSV4_IDX_APPROX_FEW_MAX_NQ 4
/* Whether the BF16-dot kernel runs at this level on this CPU (avx512vbmi and AVX512_BF16). */
int dsv4_idx_approx_bf16_ok(int simd);
int dsv4_idx_approx_kernel(int simd, int kernel, const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                           const int64_t *lim, const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI,
                           int dI, float *scores, float *knorm, size_t ss); /* returns as dsv4_idx_approx */

/* FP4 keys (DSV4_ROW_FP4) scored from their bytes, under fidelity F3: a 32-value block of a
 * query head and a key are e2m1 codes times power-of-two scales, so their dot is an exact
 * integer I_b (|I_b| <= 32 x 12 x 12) times s_q s_k / 4; a head's dot is its blocks' terms
 * summed in float (not the exact kernel's order: the bound above covers it, with fewer
 * roundings, idx_approx_impl.h), the rest as the F32 kernels. Scores and norms as
 * dsv4_idx_approx; every level gives the same bits: portable, AVX2 and AVX-512 BW
 * (vpmaddubsw + vpmaddwd), AVX-512 VBMI + VNNI (vpdpbusd). Returns 1 when it scored; 0,
 * having scored nothing that counts, when the shape is not
 * covered (dI a multiple of 32 up to 128, nI <= 64) or a query value is not c s / 2 with an
 * integer |c| <= 12 and s its block's F3 scale (at most 2^100): a query F3 did not round. */
int dsv4_idx_approx_fp4_int(int simd, const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                            const int64_t *lim, const void *const *keys, int64_t w0, int64_t w1, int nI, int dI,
                            float *scores, float *knorm, size_t ss);

/* The same in two steps, so that a caller encodes each query once however many ranges of keys
 * it scores: dsv4_idx_fp4q_encode writes one query (qI (nI, dI), wI (nI)) into enc
 * (dsv4_idx_fp4q_bytes(nI) bytes, 64-byte aligned; every level writes the same bytes: the
 * portable loop, AVX2, AVX-512) and returns 1, or 0 where
 * dsv4_idx_approx_fp4_int would (the shape, or a value F3 did not round: enc then holds
 * nothing usable); dsv4_idx_approx_fp4_enc scores the nq queries enc[q] (each one
 * encoded at any level) as dsv4_idx_approx_fp4_int would, the same bits. */
#define DSV4_IDX_FP4Q_VEC_BYTES 2624 /* a 16-head group's codes, offsets, scales and weights */
static inline size_t dsv4_idx_fp4q_bytes(int nI) { return (size_t)((nI + 15) / 16) * DSV4_IDX_FP4Q_VEC_BYTES; }
int dsv4_idx_fp4q_encode(int simd, const float *qI, const float *wI, int nI, int dI, void *enc);
int dsv4_idx_approx_fp4_enc(int simd, const void *const *enc, int nq, const int64_t *lim, const void *const *keys,
                            int64_t w0, int64_t w1, int nI, int dI, float *scores, float *knorm, size_t ss);

/* The lowest level at which AUTO scores FP4 keys by integer block dots (below it they are
 * unpacked): 1, AVX2 (every SIMD level beats its unpack path: BENCHMARKS.md, session 46). */
#define DSV4_IDX_FP4_INT_MIN_SIMD 1

/* The portable level alone. */
void dsv4_idx_approx_ref(const float *qI, size_t qs, const float *wI, size_t ws, int nq, const int64_t *lim,
                         const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI, int dI, float *scores,
                         float *knorm, size_t ss);

/* The bound's terms for one query: |exact(w) - approx(w)| <= scale * ||K_w|| + add, in
 * float arithmetic as written (each term rounded up by enough that the float sums
 * approx -/+ (scale * knorm + add) stay below / above the exact score), and valid for every
 * key with knorm <= kmax (no product, partial dot or score can come near overflow). */
typedef struct dsv4_idx_bound {
    int valid;   /* 0: an input is not finite; score exactly */
    float scale; /* (twice the rounding analysis' factor) * sum_h |wI[h]| * ||qI[h]|| */
    float add;   /* the absolute error gradual underflow may add */
    float kmax;  /* the largest key norm the bound covers */
} dsv4_idx_bound;

/* The terms for one query: qI (nI, dI), wI (nI). */
dsv4_idx_bound dsv4_idx_approx_query(const float *qI, const float *wI, int nI, int dI);

/* The bound for a key of norm knorm (as the kernel wrote it). */
static inline float dsv4_idx_approx_bound(const dsv4_idx_bound *b, float knorm) { return b->scale * knorm + b->add; }

#endif
