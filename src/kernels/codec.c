/* codec.c — number-format conversions (see codec.h). */
#include "kernels/codec.h"

#include <math.h>

uint16_t dsv4_f32_to_bf16(float f) {
    uint32_t u = dsv4_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float dsv4_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    if (exp == 31) return dsv4_bits_to_f32(sign | 0x7f800000u | (man << 13));
    return dsv4_bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t dsv4_f32_to_f16(float f) {
    uint32_t u = dsv4_f32_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    float a = fabsf(f);
    if (isnan(f)) return sign | 0x7e00u;
    if (a >= 65520.0f) return sign | 0x7c00u; /* rounds to infinity */
    if (a < 6.103515625e-05f) {
        /* subnormal range: quantum 2^-24, nearbyint rounds half to even */
        return sign | (uint16_t)nearbyintf(a * 16777216.0f);
    }
    uint32_t au = dsv4_f32_to_bits(a);
    au += 0xfffu + ((au >> 13) & 1u);
    return sign | (uint16_t)(((au >> 13) - (112u << 10)) & 0x7fffu);
}

float dsv4_e4m3_to_f32(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80) << 24;
    uint32_t exp = (b >> 3) & 0xf, man = b & 7;
    if (exp == 15 && man == 7) return dsv4_bits_to_f32(sign | 0x7fc00000u);
    float v;
    if (exp == 0) v = (float)man * 0.001953125f; /* man * 2^-9 */
    else v = dsv4_bits_to_f32(((exp + 120) << 23) | (man << 20));
    return sign ? -v : v;
}

/* Largest finite e4m3 magnitude is 448 (exp 15, man 6). Encode by searching the rounding
 * of |f| onto the grid of its binade: exact and simple, and not on any hot path. */
uint8_t dsv4_f32_to_e4m3(float f) {
    if (isnan(f)) return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f) return sign | 0x7e;
    /* quantum: 2^-9 below 2^-6 (subnormals), else 2^(e-3) for a in [2^e, 2^(e+1)) */
    int e;
    frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    int ex = e - 1;
    if (ex < -6) ex = -6;
    float q = ldexpf(1.0f, ex - 3);
    float n = nearbyintf(a / q); /* RNE in the default rounding mode */
    float v = n * q;
    if (v > 448.0f) v = 448.0f;
    if (v == 0.0f) return sign;
    int ve;
    frexpf(v, &ve);
    int vex = ve - 1;
    if (vex < -6) /* subnormal */
        return sign | (uint8_t)(int)(v / 0.001953125f);
    uint8_t man = (uint8_t)(int)((v / ldexpf(1.0f, vex) - 1.0f) * 8.0f);
    return sign | (uint8_t)((vex + 7) << 3) | man;
}

static const float e2m1_values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

float dsv4_e2m1_to_f32(uint8_t nibble) {
    float v = e2m1_values[nibble & 7];
    return (nibble & 8) ? -v : v;
}

uint8_t dsv4_f32_to_e2m1(float f) {
    uint8_t sign = signbit(f) ? 8 : 0;
    float a = fabsf(f);
    if (isnan(f)) return 7; /* no NaN in e2m1: saturate */
    /* grid {0,.5,1,1.5,2,3,4,6}: midpoints decide, ties to the even code */
    uint8_t best = 0;
    for (uint8_t c = 1; c < 8; c++) {
        float lo = e2m1_values[c - 1], hi = e2m1_values[c];
        float mid = 0.5f * (lo + hi);
        if (a > mid || (a == mid && (c & 1) == 0)) best = c;
    }
    return sign | best;
}
