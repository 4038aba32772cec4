/* fp4_shuf.h — the shuffle layout of packed FP4 (e2m1) weights (DSV4_WF_FP4B), for the AVX2
 * decoder that looks codes up with vpshufb.
 *
 * Why. e2m1 magnitudes (0, 0.5, 1, 1.5, 2, 3, 4, 6) have at most one mantissa bit, so every
 * product code * 2^e of a ue8m0 scale is exactly a BF16 value: its F32 bits are (bf16 << 16).
 * A scale block's 16 values then split into two 16-byte tables (the low and the high byte of
 * each BF16), and vpshufb looks 32 codes up in each at once. Unpacking the two looked-up bytes
 * (vpunpck{l,h}bw) gives BF16 words; a dword's low word becomes an F32 by a left shift of 16,
 * its high word by masking the low one away. Zen 3 (session 51, f4b): ~13 shuffle/shift uops a
 * 64 weights instead of the lanes decode's ~32 (linear_avx2.h).
 *
 * The layout. A row is a sequence of 32-byte chunks, chunk C holding columns 64C .. 64C + 63:
 * block A = its first 32 columns (scale block 2C), block B = the next 32 (block 2C + 1). Byte p
 * (0..31) of the chunk holds in its low nibble the code of column 64C + f(p) (block A) and in
 * its high nibble the code of column 64C + 32 + f(p) (block B), where, with h = p >> 4 (the
 * 128-bit lane), u = (p >> 3) & 1 (vpunpcklbw or vpunpckhbw), t = (p >> 1) & 3 (the dword in
 * the lane) and e = p & 1 (low or high word of the dword):
 *     f(p) = 8 (2u + e) + 4h + t.
 * So the decode's four F32 vectors of a block, (u, e) = (0, 0), (0, 1), (1, 0), (1, 1), hold
 * columns 0-7, 8-15, 16-23, 24-31 of the block in lane order, as the summation contract wants
 * (linear_fast.h: lane l sums columns 8c + l in ascending c), and x needs no permutation.
 * The bytes of a row are a permutation of its natural nibbles within each 32-byte chunk: same
 * size, same rows, same scales ([rows, cols / 32]). Only rows of a multiple of 64 columns have it.
 *
 * Which scales. The layout is the engine's choice per matrix (engine/fp4_layout.c), for ue8m0
 * scales whose every value is exact in BF16 (dsv4_fp4s_scale_ok); the format itself reads any
 * scale (the portable decoders multiply as for the natural layout).
 */
#ifndef DSV4_KERNELS_FP4_SHUF_H
#define DSV4_KERNELS_FP4_SHUF_H

#include <stdint.h>

#define DSV4_FP4S_COLS 64 /* columns a 32-byte chunk */

/* the chunk byte that holds column k (0..31) of a block: the inverse of f above */
static inline int dsv4_fp4s_byte(int k) {
    const int v = k >> 3, j = k & 7; /* vector (2u + e), lane (4h + t) */
    return 16 * (j >> 2) + 8 * (v >> 1) + 2 * (j & 3) + (v & 1);
}

/* the e2m1 code of column c of a shuffle-layout row */
static inline uint8_t dsv4_fp4s_code(const uint8_t *row, int64_t c) {
    const uint8_t b = row[(c >> 6) * 32 + dsv4_fp4s_byte((int)(c & 31))];
    return (c & 32) ? (uint8_t)(b >> 4) : (uint8_t)(b & 15);
}

/* One row of cols (a multiple of 64) codes, natural -> shuffle and back; dst and src are
 * cols / 2 bytes each and must not overlap. */
void dsv4_fp4s_pack_row(uint8_t *dst, const uint8_t *src, int64_t cols);
void dsv4_fp4s_unpack_row(uint8_t *dst, const uint8_t *src, int64_t cols);

/* 1 when ue8m0 scale byte b takes the shuffle layout's decode: b is not the NaN scale (255)
 * and each of the 16 values e2m1(k) * 2^(b - 127) has its F32 bits' low 16 bits zero (every
 * other byte: the smallest, 0.5 * 2^-127 = 2^-128, is still 0x00200000). */
int dsv4_fp4s_scale_ok(uint8_t b);

/* The decode tables of ue8m0 byte b: lo[k] and hi[k] the low and high byte of the BF16 value
 * of e2m1 code k times 2^(b - 127) (bits(mag * scale) ^ sign << 31, as the AVX2 lanes table),
 * k = 0..15; meaningful where dsv4_fp4s_scale_ok(b). */
void dsv4_fp4s_tables(uint8_t b, uint8_t lo[16], uint8_t hi[16]);

#endif
