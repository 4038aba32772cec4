/* fp4_lanes.c — natural <-> lanes FP4 layout (see fp4_lanes.h). Load-time code: the unpack
 * one nibble at a time, written for clarity; the pack, which the engine runs over every FP4
 * weight at create with --weights-memory lanes (~150 GB in Flash), 8 bytes at a time. */
#include "kernels/fp4_lanes.h"

#include <string.h>

/* the little-endian 64-bit value of p[0..8) */
static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--) v = v << 8 | p[b];
    return v;
}

/* line of 128 codes: natural bytes -> lanes bytes. Natural bytes 8k .. 8k+7 hold, as a
 * little-endian 64-bit value, column 16k + i in nibble i; lanes word i byte p holds columns
 * 16(2p) + i (low nibble) and 16(2p+1) + i (high). So for each p the two values a (k = 2p)
 * and c (k = 2p + 1) give byte p of every word: of word 2j the bytes j of
 * (a & M) | (c & M) << 4, of word 2j + 1 the bytes j of (a >> 4 & M) | (c & ~M), M selecting
 * low nibbles. The same bytes as the definition, one nibble at a time (test_fp4_lanes). */
static void pack_line(uint8_t dst[64], const uint8_t src[64]) {
    const uint64_t M = 0x0F0F0F0F0F0F0F0Full;
    for (int p = 0; p < 4; p++) {
        const uint64_t a = le64(src + 16 * p), c = le64(src + 16 * p + 8);
        const uint64_t even = (a & M) | (c & M) << 4, odd = (a >> 4 & M) | (c & ~M);
        for (int j = 0; j < 8; j++) {
            dst[8 * j + p] = (uint8_t)(even >> 8 * j);
            dst[8 * j + 4 + p] = (uint8_t)(odd >> 8 * j);
        }
    }
}

static void unpack_line(uint8_t dst[64], const uint8_t src[64]) {
    memset(dst, 0, 64);
    for (int c = 0; c < DSV4_FP4L_COLS; c++)
        dst[c >> 1] |= (uint8_t)(dsv4_fp4l_code(src, c) << ((c & 1) * 4));
}

void dsv4_fp4l_pack_row(uint8_t *dst, const uint8_t *src, int64_t cols) {
    for (int64_t l = 0; l < cols / DSV4_FP4L_COLS; l++) pack_line(dst + l * 64, src + l * 64);
}

void dsv4_fp4l_unpack_row(uint8_t *dst, const uint8_t *src, int64_t cols) {
    for (int64_t l = 0; l < cols / DSV4_FP4L_COLS; l++) unpack_line(dst + l * 64, src + l * 64);
}

void dsv4_fp4l_pack_inplace(uint8_t *w, int64_t rows, int64_t cols) {
    const int64_t lines = rows * (cols / DSV4_FP4L_COLS); /* rows are whole lines: contiguous */
    uint8_t tmp[64];
    for (int64_t l = 0; l < lines; l++) {
        memcpy(tmp, w + l * 64, 64);
        pack_line(w + l * 64, tmp);
    }
}
