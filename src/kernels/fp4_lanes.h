/* fp4_lanes.h — the lanes layout of packed FP4 (e2m1) weights.
 *
 * The checkpoint's layout ("natural") packs two codes a byte, column 2j in the low nibble of
 * byte j. Decoding 16 of them into a 16-lane vector then takes a broadcast, a variable shift and
 * a vpermps; on Zen 5 the broadcast costs a vector slot too, so a one-row GEMV spends 3 decode
 * slots a 16 weights beside its FMA (BENCHMARKS.md, session 25).
 *
 * The lanes layout stores a row in lines of 64 bytes, line L holding columns 128L .. 128L+127:
 * the little-endian 32-bit word i (0..15) of the line holds in its nibble k (bits 4k..4k+3) the
 * code of column 128L + 16k + i. A vector of the line's 16 words, shifted right by 4k, holds in
 * lane i's low 4 bits the code of column 128L + 16k + i: one immediate shift (none at k = 0) and
 * one vpermps (which reads only those 4 bits) decode 16 weights in natural column order, so x
 * needs no permutation. The bytes of a row are a permutation of its natural bytes' nibbles
 * within each 64-byte line: same size, same rows, same scales ([rows, cols / 32]; nibbles 2b and
 * 2b + 1 of a line are its scale block b, i.e. block 4L + b of the row).
 *
 * Only rows of a multiple of 128 columns have it (every FP4 matrix of the Flash checkpoint does).
 */
#ifndef DSV4_KERNELS_FP4_LANES_H
#define DSV4_KERNELS_FP4_LANES_H

#include <stdint.h>

#define DSV4_FP4L_COLS 128 /* columns a 64-byte line */

/* the e2m1 code of column c of a lanes-layout row */
static inline uint8_t dsv4_fp4l_code(const uint8_t *row, int64_t c) {
    const int64_t line = c >> 7;
    const int k = (int)((c >> 4) & 7), i = (int)(c & 15);
    const uint8_t b = row[line * 64 + i * 4 + (k >> 1)];
    return (k & 1) ? (uint8_t)(b >> 4) : (uint8_t)(b & 15);
}

/* the e2m1 code of column c of a natural-layout row */
static inline uint8_t dsv4_fp4n_code(const uint8_t *row, int64_t c) {
    const uint8_t b = row[c >> 1];
    return (c & 1) ? (uint8_t)(b >> 4) : (uint8_t)(b & 15);
}

/* One row of cols (a multiple of 128) codes, natural -> lanes and back; dst and src are
 * cols / 2 bytes each and must not overlap (a line at a time: the caller may go row by row
 * or line by line through a 64-byte buffer to repack in place). */
void dsv4_fp4l_pack_row(uint8_t *dst, const uint8_t *src, int64_t cols);
/* dsv4_fp4l_pack_row's portable form, 8 bytes at a time (what pack_row runs where there is
 * no SSE2): the reference the vector pack is tested against */
void dsv4_fp4l_pack_row_portable(uint8_t *dst, const uint8_t *src, int64_t cols);
void dsv4_fp4l_unpack_row(uint8_t *dst, const uint8_t *src, int64_t cols);

/* Every row of a (rows, cols) natural FP4 matrix at w repacked in place, a 64-byte line at a
 * time; cols % 128 == 0. */
void dsv4_fp4l_pack_inplace(uint8_t *w, int64_t rows, int64_t cols);

#endif
