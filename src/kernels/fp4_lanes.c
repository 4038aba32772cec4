/* fp4_lanes.c — natural <-> lanes FP4 layout (see fp4_lanes.h). Load-time code, not a hot
 * path: one nibble at a time, written for clarity. */
#include "kernels/fp4_lanes.h"

#include <string.h>

/* line of 128 codes: natural bytes -> lanes bytes */
static void pack_line(uint8_t dst[64], const uint8_t src[64]) {
    memset(dst, 0, 64);
    for (int c = 0; c < DSV4_FP4L_COLS; c++) {
        const int k = c >> 4, i = c & 15;
        const uint8_t code = dsv4_fp4n_code(src, c);
        dst[i * 4 + (k >> 1)] |= (uint8_t)(code << ((k & 1) * 4));
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
