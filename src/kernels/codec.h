/* codec.h — scalar conversions between storage number formats and float.
 *
 * BF16/F16 halves, OCP FP8 e4m3 ("fn": bias 7, max 448, no inf, 0x7F/0xFF NaN), ue8m0
 * scale bytes (2^(b-127), built from the exponent bits) and FP4 e2m1 nibbles. Decoding is
 * exact; encoding rounds to nearest even and saturates (the FP8/FP4 generators and the
 * fidelity mode rely on that).
 */
#ifndef DSV4_KERNELS_CODEC_H
#define DSV4_KERNELS_CODEC_H

#include <stdint.h>
#include <string.h>

static inline float dsv4_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t dsv4_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float dsv4_bf16_to_f32(uint16_t h) { return dsv4_bits_to_f32((uint32_t)h << 16); }
/* Round to nearest even; NaN stays NaN. */
uint16_t dsv4_f32_to_bf16(float f);

float dsv4_f16_to_f32(uint16_t h);
uint16_t dsv4_f32_to_f16(float f);

/* ue8m0: value 2^(b-127); b = 255 is NaN. Built from bits, never a numeric cast. */
static inline float dsv4_e8m0_to_f32(uint8_t b) {
    if (b == 255) return dsv4_bits_to_f32(0x7fc00000u);
    if (b == 0) return dsv4_bits_to_f32(0x00400000u); /* 2^-127, a subnormal */
    return dsv4_bits_to_f32((uint32_t)b << 23);
}

/* e4m3fn decode table lookup and encoder (RNE, saturating to +-448). */
float dsv4_e4m3_to_f32(uint8_t b);
uint8_t dsv4_f32_to_e4m3(float f);

/* e2m1: code 0..7 = {0, .5, 1, 1.5, 2, 3, 4, 6}, 8..15 the negatives. */
float dsv4_e2m1_to_f32(uint8_t nibble);
uint8_t dsv4_f32_to_e2m1(float f);  /* RNE, saturating to +-6 */

#endif
