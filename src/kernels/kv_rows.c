/* kv_rows.c — rounding, packing and unpacking of cached KV rows (kv_rows.h).
 *
 * Packing a rounded row is exact: BF16 keeps the upper half of an FP32 value that already
 * has a zero lower half; an FP8 block of a rounded row gets a scale s' in {s, s/2} of the
 * scale s it was rounded with (its amax is still above 224 s), so every value / s' is an
 * e4m3 value (at most 448, the significand unchanged) and the encoder returns it exactly.
 * FP4 likewise: a block rounded with scale s has its amax in (3 s, 6 s] before rounding,
 * so after it one of 3 s, 4 s, 6 s (or 0 when the floor set s); the scale of the rounded
 * block is s or s / 2 (amax 3 s), and every e2m1 value e times s is 2e times s / 2, still
 * e2m1 (e <= 3 there). Zero blocks get the floor's scale and code +-0 exactly.
 */
#include "kernels/kv_rows.h"

#include <math.h>
#include <string.h>

#include "kernels/codec.h"
#include "kernels/fidelity.h"
#include "util/hot.h"

#define FP8_BLOCK 64
#define FP4_BLOCK 32

static int64_t fp8_scale_bytes(int nope) { return (int64_t)(nope / FP8_BLOCK + 7) / 8 * 8; }

int64_t dsv4_row_bytes(int fmt, int n, int rd) {
    switch (fmt) {
    case DSV4_ROW_F32: return 4 * (int64_t)n;
    case DSV4_ROW_BF16: return 2 * (int64_t)n;
    case DSV4_ROW_FP8: {
        const int nope = n - rd;
        if (rd < 0 || nope < 0 || nope % FP8_BLOCK) return 0;
        return nope + fp8_scale_bytes(nope) + 2 * (int64_t)rd;
    }
    case DSV4_ROW_FP4:
        if (rd != 0 || n < 0) return 0;
        return ((int64_t)n + 1) / 2 + ((int64_t)n + FP4_BLOCK - 1) / FP4_BLOCK;
    default: return 0;
    }
}

void dsv4_row_round(int fmt, float *x, int n, int rd) {
    if (fmt == DSV4_ROW_BF16) dsv4_fid_bf16(x, n);
    else if (fmt == DSV4_ROW_FP8) dsv4_fid_kv_row(x, n, rd);
    else if (fmt == DSV4_ROW_FP4) dsv4_fid_fp4_rt(x, n);
}

/* FP4 row: nibbles of x[0, n) (rounded) into d, then the block scales. */
static void pack_fp4(uint8_t *d, const float *x, int n) {
    uint8_t *scales = d + (n + 1) / 2;
    memset(d, 0, (size_t)(n + 1) / 2);
    for (int b0 = 0; b0 < n; b0 += FP4_BLOCK) {
        const int e = n - b0 < FP4_BLOCK ? n : b0 + FP4_BLOCK;
        float amax = DSV4_FID_AMAX_FLOOR_FP4;
        for (int i = b0; i < e; i++)
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
        const float s = dsv4_fid_pow2_scale(amax, 1.0f / 6.0f);
        scales[b0 / FP4_BLOCK] = (uint8_t)(dsv4_f32_to_bits(s) >> 23); /* s normal: 2^(b-127) */
        for (int i = b0; i < e; i++) d[i / 2] |= (uint8_t)(dsv4_f32_to_e2m1(x[i] / s) << (4 * (i & 1)));
    }
}

/* e2m1 codes 0..15 as floats (codec.h's dsv4_e2m1_to_f32, in a table: the key readers
 * unpack every key they score, so this loop is on their path) */
static const float E2M1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

static void unpack_fp4(float *x, const uint8_t *src, int n) {
    const uint8_t *scales = src + (n + 1) / 2;
    for (int b0 = 0; b0 < n; b0 += FP4_BLOCK) {
        const int e = n - b0 < FP4_BLOCK ? n : b0 + FP4_BLOCK;
        const float s = dsv4_e8m0_to_f32(scales[b0 / FP4_BLOCK]);
        for (int i = b0; i < e; i++) x[i] = E2M1[(src[i / 2] >> (4 * (i & 1))) & 15] * s;
    }
}

/* BF16 halves of x[0, n) into dst (unaligned-safe). */
static void pack_bf16(uint8_t *dst, const float *x, int n) {
    for (int i = 0; i < n; i++) {
        const uint16_t h = (uint16_t)(dsv4_f32_to_bits(x[i]) >> 16); /* x is rounded */
        memcpy(dst + 2 * (size_t)i, &h, 2);
    }
}

static void unpack_bf16(float *x, const uint8_t *src, int n) {
    for (int i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * (size_t)i, 2);
        x[i] = dsv4_bits_to_f32((uint32_t)h << 16);
    }
}

DSV4_HOT_AT(dsv4_row_pack, 0x490)
void dsv4_row_pack(int fmt, void *dst, const float *x, int n, int rd) {
    uint8_t *d = dst;
    if (fmt == DSV4_ROW_F32) {
        memcpy(d, x, (size_t)n * sizeof(float));
    } else if (fmt == DSV4_ROW_BF16) {
        pack_bf16(d, x, n);
    } else if (fmt == DSV4_ROW_FP8) {
        const int nope = n - rd;
        uint8_t *scales = d + nope;  /* (nope / 64) ue8m0 bytes, zero-padded */
        memset(scales, 0, (size_t)fp8_scale_bytes(nope));
        for (int b0 = 0; b0 < nope; b0 += FP8_BLOCK) {
            float amax = DSV4_FID_AMAX_FLOOR_FP8;
            for (int i = b0; i < b0 + FP8_BLOCK; i++)
                if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
            const float s = dsv4_fid_pow2_scale(amax, 1.0f / 448.0f);
            scales[b0 / FP8_BLOCK] = (uint8_t)(dsv4_f32_to_bits(s) >> 23); /* s normal: 2^(b-127) */
            for (int i = b0; i < b0 + FP8_BLOCK; i++) d[i] = dsv4_f32_to_e4m3(x[i] / s);
        }
        pack_bf16(scales + fp8_scale_bytes(nope), x + nope, rd);
    } else if (fmt == DSV4_ROW_FP4) {
        pack_fp4(d, x, n);
    }
}

void dsv4_row_unpack(int fmt, float *x, const void *src, int n, int rd) {
    const uint8_t *s = src;
    if (fmt == DSV4_ROW_F32) {
        memcpy(x, s, (size_t)n * sizeof(float));
    } else if (fmt == DSV4_ROW_BF16) {
        unpack_bf16(x, s, n);
    } else if (fmt == DSV4_ROW_FP8) {
        const int nope = n - rd;
        const uint8_t *scales = s + nope;
        for (int b0 = 0; b0 < nope; b0 += FP8_BLOCK) {
            const float sc = dsv4_e8m0_to_f32(scales[b0 / FP8_BLOCK]);
            for (int i = b0; i < b0 + FP8_BLOCK; i++) x[i] = dsv4_e4m3_to_f32(s[i]) * sc;
        }
        unpack_bf16(x + nope, scales + fp8_scale_bytes(nope), rd);
    } else if (fmt == DSV4_ROW_FP4) {
        unpack_fp4(x, s, n);
    }
}
