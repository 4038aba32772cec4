/* test_fp4_lanes.c — the lanes FP4 layout against its definition in fp4_lanes.h, written out
 * here again: word i of line L, nibble k, is column 128L + 16k + i. Round trips, in-place
 * repack, and the decode the kernels rely on (a right shift by 4k of a line's words gives the
 * codes of columns 16k .. 16k+15 in lane order). */
#include <stdint.h>

#include "kernels/fp4_lanes.h"
#include "test.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}

int main(void) {
    enum { COLS = 384, ROWS = 5, RB = COLS / 2 };
    static uint8_t nat[ROWS * RB], lanes[ROWS * RB], back[ROWS * RB], inplace[ROWS * RB];
    for (int i = 0; i < ROWS * RB; i++) nat[i] = (uint8_t)rnd();

    for (int r = 0; r < ROWS; r++) dsv4_fp4l_pack_row(lanes + r * RB, nat + r * RB, COLS);
    /* the definition, from the 32-bit words of each line */
    int bad = 0;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) {
            const uint8_t *line = lanes + r * RB + (c / 128) * 64;
            const int k = (c % 128) / 16, i = c % 16;
            const uint32_t word = (uint32_t)line[4 * i] | (uint32_t)line[4 * i + 1] << 8 |
                                  (uint32_t)line[4 * i + 2] << 16 | (uint32_t)line[4 * i + 3] << 24;
            const int want = (nat[r * RB + c / 2] >> ((c & 1) * 4)) & 15;
            bad += (int)((word >> (4 * k)) & 15) != want;
            bad += dsv4_fp4l_code(lanes + r * RB, c) != want;
            bad += dsv4_fp4n_code(nat + r * RB, c) != want;
        }
    CHECK_MSG(bad == 0, "%d codes differ from the definition", bad);

    for (int r = 0; r < ROWS; r++) dsv4_fp4l_unpack_row(back + r * RB, lanes + r * RB, COLS);
    CHECK(memcmp(back, nat, sizeof nat) == 0);

    memcpy(inplace, nat, sizeof nat);
    dsv4_fp4l_pack_inplace(inplace, ROWS, COLS);
    CHECK(memcmp(inplace, lanes, sizeof lanes) == 0);

    /* the portable pack (the reference, and the form without SSE2) gives the same bytes */
    static uint8_t lanes_p[ROWS * RB];
    for (int r = 0; r < ROWS; r++) dsv4_fp4l_pack_row_portable(lanes_p + r * RB, nat + r * RB, COLS);
    CHECK(memcmp(lanes_p, lanes, sizeof lanes) == 0);

    /* a permutation, not the identity: some line differs from its natural bytes */
    CHECK(memcmp(lanes, nat, sizeof nat) != 0);

    printf("%d passed, %d failed\n", test_passed_, test_failed_);
    return test_failed_ != 0;
}
