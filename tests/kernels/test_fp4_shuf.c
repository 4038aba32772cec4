/* test_fp4_shuf.c — the shuffle FP4 layout (DSV4_WF_FP4B) against its definition in fp4_shuf.h,
 * written out here again: byte p of a 32-byte chunk holds column f(p) of block A (low nibble)
 * and of block B (high), f(p) = 8 (2u + e) + 4h + t with h = p >> 4, u = p >> 3 & 1,
 * t = p >> 1 & 3, e = p & 1. Round trips; the decode the AVX2 kernel relies on (vpshufb of
 * the nibbles in the BF16 byte tables, byte unpacks, shift / mask of the words gives columns
 * 0-7, 8-15, 16-23, 24-31 of each block, in lane order), simulated here in scalar code; and
 * the scale rule: which ue8m0 bytes have every value exact in BF16, with the tables' bits
 * those of the reference product e2m1 * scale. */
#include <stdint.h>

#include "kernels/codec.h"
#include "kernels/fp4_shuf.h"
#include "test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}

/* the AVX2 decode of one chunk, one 128-bit lane h at a time, as the instructions do it:
 * out[64] the F32 bits of the chunk's columns in the order the 8 vectors come out */
static void decode_sim(const uint8_t chunk[32], const uint8_t lo[2][16], const uint8_t hi[2][16], uint32_t out[64]) {
    for (int blk = 0; blk < 2; blk++) { /* A: low nibbles, B: high (vpsrlw 4 + vpand) */
        uint8_t l[32], h[32];
        for (int p = 0; p < 32; p++) {
            const int idx = blk ? chunk[p] >> 4 : chunk[p] & 15; /* vpshufb: bit 7 clear */
            l[p] = lo[blk][idx];
            h[p] = hi[blk][idx];
        }
        for (int u = 0; u < 2; u++) { /* vpunpcklbw (u 0) / vpunpckhbw (u 1), per 128-bit lane */
            uint16_t wd[16];
            for (int lane = 0; lane < 2; lane++)
                for (int i = 0; i < 8; i++)
                    wd[8 * lane + i] = (uint16_t)(l[16 * lane + 8 * u + i] | h[16 * lane + 8 * u + i] << 8);
            for (int e = 0; e < 2; e++) /* e 0: vpslld 16 (the low words), 1: vpand 0xffff0000 */
                for (int d = 0; d < 8; d++) out[32 * blk + 8 * (2 * u + e) + d] = (uint32_t)wd[2 * d + e] << 16;
        }
    }
}

int main(void) {
    enum { COLS = 320, ROWS = 3, RB = COLS / 2 };
    static uint8_t nat[ROWS * RB], sh[ROWS * RB], back[ROWS * RB];
    for (int i = 0; i < ROWS * RB; i++) nat[i] = (uint8_t)rnd();
    for (int r = 0; r < ROWS; r++) dsv4_fp4s_pack_row(sh + r * RB, nat + r * RB, COLS);

    int bad = 0;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) {
            const int want = (nat[r * RB + c / 2] >> ((c & 1) * 4)) & 15;
            bad += dsv4_fp4s_code(sh + r * RB, c) != want;
        }
    /* the definition, from f(p) */
    for (int r = 0; r < ROWS; r++)
        for (int ch = 0; ch < COLS / 64; ch++)
            for (int p = 0; p < 32; p++) {
                const int h = p >> 4, u = p >> 3 & 1, t = p >> 1 & 3, e = p & 1, f = 8 * (2 * u + e) + 4 * h + t;
                const uint8_t b = sh[r * RB + 32 * ch + p];
                const int ca = 64 * ch + f, cb = ca + 32;
                bad += (b & 15) != ((nat[r * RB + ca / 2] >> ((ca & 1) * 4)) & 15);
                bad += (b >> 4) != ((nat[r * RB + cb / 2] >> ((cb & 1) * 4)) & 15);
                bad += dsv4_fp4s_byte(f) != p;
            }
    CHECK_MSG(bad == 0, "%d codes differ from the definition", bad);
    for (int r = 0; r < ROWS; r++) dsv4_fp4s_unpack_row(back + r * RB, sh + r * RB, COLS);
    CHECK(memcmp(back, nat, sizeof nat) == 0);
    CHECK(memcmp(sh, nat, sizeof nat) != 0); /* a permutation, not the identity */

    /* the scale rule and the tables: every byte but the NaN scale, and the tables' values are
     * the reference products' bits (e2m1 * scale, -0.0 for code 8) */
    int ok = 0, tab_bad = 0;
    for (int b = 0; b < 256; b++) {
        const int is_ok = dsv4_fp4s_scale_ok((uint8_t)b);
        ok += is_ok;
        if (!is_ok) continue;
        uint8_t lo[16], hi[16];
        dsv4_fp4s_tables((uint8_t)b, lo, hi);
        for (int k = 0; k < 16; k++) {
            const uint32_t ref = dsv4_f32_to_bits(dsv4_e2m1_to_f32((uint8_t)k) * dsv4_e8m0_to_f32((uint8_t)b));
            tab_bad += (ref & 0xffffu) != 0 || ((uint32_t)lo[k] << 16 | (uint32_t)hi[k] << 24) != ref;
        }
    }
    CHECK_MSG(ok == 255 && !dsv4_fp4s_scale_ok(255), "%d scale bytes take the layout (want 0..254)", ok);
    CHECK_MSG(tab_bad == 0, "%d table entries differ from e2m1 * scale", tab_bad);
    { /* the edges: 2^-127 (byte 0, a subnormal scale) gives subnormal products 0.5 * 2^-127 =
       * 0x00200000 and -1.5 * 2^-127 = 0x80600000, a normal -6 * 2^-127 = 0x81400000, and code 8
       * -0.0; 2^127 (byte 254) overflows 4 and 6 to inf */
        uint8_t lo[16], hi[16];
        dsv4_fp4s_tables(0, lo, hi);
        CHECK(lo[1] == 0x20 && hi[1] == 0x00 && lo[11] == 0x60 && hi[11] == 0x80 && lo[15] == 0x40 && hi[15] == 0x81 &&
              lo[8] == 0 && hi[8] == 0x80);
        dsv4_fp4s_tables(254, lo, hi);
        CHECK(lo[7] == 0x80 && hi[7] == 0x7f && lo[14] == 0x80 && hi[14] == 0xff); /* +inf, -inf */
    }

    /* the simulated AVX2 decode gives each column's value in natural order */
    int dec_bad = 0;
    for (int r = 0; r < ROWS; r++)
        for (int ch = 0; ch < COLS / 64; ch++) {
            const uint8_t sa = (uint8_t)(100 + rnd() % 40), sb = (uint8_t)(100 + rnd() % 40);
            uint8_t lo[2][16], hi[2][16];
            dsv4_fp4s_tables(sa, lo[0], hi[0]);
            dsv4_fp4s_tables(sb, lo[1], hi[1]);
            uint32_t out[64];
            decode_sim(sh + r * RB + 32 * ch, lo, hi, out);
            for (int c = 0; c < 64; c++) {
                const int cc = 64 * ch + c, code = (nat[r * RB + cc / 2] >> ((cc & 1) * 4)) & 15;
                const float want = dsv4_e2m1_to_f32((uint8_t)code) * dsv4_e8m0_to_f32(c < 32 ? sa : sb);
                dec_bad += out[c] != dsv4_f32_to_bits(want);
            }
        }
    CHECK_MSG(dec_bad == 0, "%d decoded weights differ", dec_bad);

    printf("%d passed, %d failed\n", test_passed_, test_failed_);
    return test_failed_ != 0;
}
