/* fidelity.h — the activation roundings of fidelity mode P3 (spec/model.md §6), scalar and
 * exact. Every function works in place on one row (or one block run of a row), so results
 * depend on nothing but the row: chunked, batched and one-shot schedules stay bitwise equal.
 *
 *   F1 act-quant   per block of `block` values (128 for linear inputs, 64 for the KV nope
 *                  channels of F2): amax = max(max|x|, 1e-4),
 *                  s = 2^ceil(log2(amax * fp32(1/448))) (ue8m0),
 *                  x <- e4m3_RNE(clamp(x/s, -448, 448)) * s, saturated at +-DSV4_FID_FP8_MAX
 *                  where that product overflows (|x| >= 248 x 2^120, s = 2^120: 256 s is past
 *                  FLT_MAX; an infinite x, s = 2^127), as F3 below: idempotent there, and the
 *                  FP8 rows' codec holds its output (240 x 2^120)
 *   F3 FP4         per block of 32: amax = max(max|x|, 6 * 2^-126),
 *                  s = 2^ceil(log2(amax * fp32(1/6))), x <- e2m1_RNE(clamp(x/s, -6, 6)) * s,
 *                  saturated at +-DSV4_FID_FP4_MAX where that product overflows (|x| >= 3.5 x
 *                  2^126, s = 2^126: 4 s and 6 s are past FLT_MAX; an infinite x, s = 2^127):
 *                  the clamp's saturation carried to the largest finite value e2m1 times a
 *                  power of two holds, so the rule is idempotent and FP4 rows store its
 *                  output exactly there too (an inf would come back with another scale)
 *   BF16           round to nearest even (NaN kept a NaN)
 * A row whose width is not a multiple of the block ends with a shorter block that gets its
 * own amax and scale. Rounding is round-half-to-even in every format (the spec's assumption,
 * model.md §2.3 "Uncertain").
 */
#ifndef DSV4_KERNELS_FIDELITY_H
#define DSV4_KERNELS_FIDELITY_H

#include <stdint.h>

/* Items of fidelity mode; the same bits as DSV4_FID_* in dsv4.h. */
#define DSV4_FID_AMAX_FLOOR_FP8 1e-4f
#define DSV4_FID_AMAX_FLOOR_FP4 (6.0f * 0x1p-126f)
#define DSV4_FID_FP4_MAX 0x1.8p127f /* 6 x 2^125 = 3 x 2^126: F3's largest finite value */
#define DSV4_FID_FP8_MAX 0x1.ep127f /* 240 x 2^120 = 1.875 x 2^127: F1's largest finite value */

/* Value of e4m3_RNE(y) for |y| <= 448 (saturating beyond): the nearest e4m3 value, ties to
 * the even significand; subnormals have step 2^-9. */
float dsv4_fid_e4m3_round(float y);
/* Value of e2m1_RNE(y) for |y| <= 6 (saturating beyond): nearest of {0, .5, 1, 1.5, 2, 3, 4, 6}. */
float dsv4_fid_e2m1_round(float y);
/* The power-of-two scale 2^ceil(log2(amax * inv_max)) of one block (amax already floored),
 * at most ue8m0's largest, 2^127 (an infinite amax: no finite one reaches it with inv_max
 * 1/6 or 1/448); NaN for a NaN amax. */
float dsv4_fid_pow2_scale(float amax, float inv_max);

/* F1 rule over x[0, n) in blocks of `block` values, in place. */
void dsv4_fid_fp8_rt(float *x, int64_t n, int block);
/* F3 rule over x[0, n) in blocks of 32, in place (AVX-512 where the CPU has it: the same
 * bits as the portable loop, dsv4_fid_fp4_rt_ref, the tests' reference). */
void dsv4_fid_fp4_rt(float *x, int64_t n);
void dsv4_fid_fp4_rt_ref(float *x, int64_t n);
/* BF16 round trip of x[0, n), in place. */
void dsv4_fid_bf16(float *x, int64_t n);
static inline float dsv4_fid_bf16_1(float v) {
    union { float f; uint32_t u; } c = {v};
    if ((c.u & 0x7f800000u) == 0x7f800000u) return v; /* inf, NaN */
    c.u += 0x7fffu + ((c.u >> 16) & 1u);
    c.u &= 0xffff0000u;
    return c.f;
}

/* F2 rule for one KV row of width hd: channels [0, hd - rd) FP8 in blocks of 64, the rd
 * rope channels BF16. */
void dsv4_fid_kv_row(float *x, int hd, int rd);

/* F3 for one indexer vector of width n (a power of two): x <- H x / sqrt(n) with the
 * Sylvester-Hadamard matrix in natural order (model.md §5.9), then the FP4 rule. */
void dsv4_fid_hadamard(float *x, int n);
/* The portable butterflies alone (dsv4_fid_hadamard at AVX-512 gives their bits, 16 values a vector). */
void dsv4_fid_hadamard_ref(float *x, int n);
void dsv4_fid_index_row(float *x, int n);

#endif
