/* fp4_shuf.c — natural <-> shuffle FP4 layout (see fp4_shuf.h) and its scale tables.
 * Load-time code. */
#include "kernels/fp4_shuf.h"

#include <string.h>

#include "kernels/codec.h"

/* Natural bytes 4v .. 4v + 3 of a chunk's block A (16v .. of block B: bytes 16 + 4v ..) hold,
 * as a little-endian 32-bit value, the block's columns 8v + j in nibble j; column 8v + j goes to
 * byte dsv4_fp4s_byte(8v + j): the low nibble from A, the high from B. */
static void pack_chunk(uint8_t dst[32], const uint8_t src[32]) {
    for (int v = 0; v < 4; v++) {
        uint32_t a = 0, b = 0;
        for (int i = 3; i >= 0; i--) {
            a = a << 8 | src[4 * v + i];
            b = b << 8 | src[16 + 4 * v + i];
        }
        for (int j = 0; j < 8; j++, a >>= 4, b >>= 4)
            dst[dsv4_fp4s_byte(8 * v + j)] = (uint8_t)((a & 15) | (b & 15) << 4);
    }
}

static void unpack_chunk(uint8_t dst[32], const uint8_t src[32]) {
    memset(dst, 0, 32);
    for (int c = 0; c < DSV4_FP4S_COLS; c++) dst[c >> 1] |= (uint8_t)(dsv4_fp4s_code(src, c) << ((c & 1) * 4));
}

void dsv4_fp4s_pack_row(uint8_t *dst, const uint8_t *src, int64_t cols) {
    for (int64_t k = 0; k < cols / DSV4_FP4S_COLS; k++) pack_chunk(dst + k * 32, src + k * 32);
}

void dsv4_fp4s_unpack_row(uint8_t *dst, const uint8_t *src, int64_t cols) {
    for (int64_t k = 0; k < cols / DSV4_FP4S_COLS; k++) unpack_chunk(dst + k * 32, src + k * 32);
}

/* the F32 bits of e2m1 code k times ue8m0 byte b as the AVX2 decoders form them: magnitude
 * times scale, then the code's sign (the lanes table's xor, linear_avx2.h) */
static uint32_t code_bits(uint8_t b, int k) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return dsv4_f32_to_bits(mag[k & 7] * dsv4_e8m0_to_f32(b)) ^ (uint32_t)(k >> 3) << 31;
}

int dsv4_fp4s_scale_ok(uint8_t b) {
    if (b == 255) return 0; /* NaN: the levels' NaN signs need not agree */
    for (int k = 0; k < 16; k++)
        if (code_bits(b, k) & 0xffffu) return 0;
    return 1;
}

void dsv4_fp4s_tables(uint8_t b, uint8_t lo[16], uint8_t hi[16]) {
    for (int k = 0; k < 16; k++) {
        const uint32_t u = code_bits(b, k);
        lo[k] = (uint8_t)(u >> 16);
        hi[k] = (uint8_t)(u >> 24);
    }
}
