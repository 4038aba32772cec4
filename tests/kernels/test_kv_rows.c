/* test_kv_rows.c — KV row storage formats (kernels/kv_rows.h) against a reference written
 * out here from serving.md §a.1 and model.md §6 F2 and F3 (FP4 keys): byte layout, unpack of every e4m3 and
 * BF16 pattern by formula, the rounding against the formulas (BF16 RNE; FP8 within half a
 * step of the block's scale), unpack(pack(x)) == round(x) bit for bit, round idempotent in
 * value, and a stored row unpacked and packed again keeps its bytes.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kv_rows.h"
#include "util/rng.h"
#include "test.h"

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* e4m3fn by formula: bias 7, 3 mantissa bits, subnormals at exponent 0, S.1111.111 NaN. */
static float e4m3_ref(uint8_t b) {
    const int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    const double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    return (float)(sign ? -v : v);
}

/* BF16 RNE by formula (finite inputs). */
static float bf16_ref(float x) {
    const double ax = fabs((double)x);
    if (ax == 0) return x;
    int e;
    frexp(ax, &e);                         /* ax in [2^(e-1), 2^e) */
    const double step = ldexp(1.0, e - 1 - 7);
    double q = nearbyint(ax / step) * step;
    return (float)(x < 0 ? -q : q);
}

/* e2m1 by formula: bias 1, 1 mantissa bit, subnormal 0.5 at exponent 0. */
static float e2m1_ref(uint8_t c) {
    const int e = (c >> 1) & 3, m = c & 1;
    const double v = e ? ldexp(1.0 + m / 2.0, e - 1) : m * 0.5;
    return (float)(c & 8 ? -v : v);
}

/* Modes 0-3 any format; 4 and 5 FP4's extremes: blocks of 32 at their own scale from
 * subnormal (2^-140) to huge (2^120), and zero blocks of +0 or -0. */
static void random_row(dsv4_rng *r, float *x, int n, int mode) {
    static const int exps[] = {-140, -130, -126, -60, 0, 60, 120};
    for (int i = 0; i < n; i++) {
        float v = (float)(2 * dsv4_rng_unit(r) - 1) * 3.0f;
        if (mode == 1) v *= ldexpf(1.0f, (int)(dsv4_rng_unit(r) * 40) - 20); /* wide range */
        if (mode == 2) v *= 1e-6f;                                             /* below the floor */
        if (mode == 3 && i % 5 == 0) v = 0.0f;
        if (mode == 4) v = ldexpf(v, exps[(i / 32 + (int)(dsv4_rng_unit(r) * 0.1)) % 7]);
        if (mode == 5) v = (i / 32) % 3 == 1 ? ((i / 32) % 2 ? -0.0f : 0.0f) : ldexpf(v, exps[(i / 32) % 7]);
        x[i] = v;
    }
}

static void check_format(int fmt, int n, int rd, const char *name) {
    dsv4_rng r;
    dsv4_rng_seed(&r, 0x5eedu + (uint64_t)fmt * 131 + (uint64_t)n);
    const int64_t nb = dsv4_row_bytes(fmt, n, rd);
    float x[1024], y[1024], z[1024];
    uint8_t p[4096], q[4096];
    int bad_rt = 0, bad_idem = 0, bad_bytes = 0, bad_ref = 0;
    double max_rel = 0;
    const int modes = fmt == DSV4_ROW_FP4 ? 6 : 4;
    for (int t = 0; t < 200; t++) {
        random_row(&r, x, n, t % modes);
        memcpy(y, x, sizeof(float) * (size_t)n);
        dsv4_row_round(fmt, y, n, rd);               /* y = round(x) */
        dsv4_row_pack(fmt, p, y, n, rd);
        dsv4_row_unpack(fmt, z, p, n, rd);
        for (int i = 0; i < n; i++) bad_rt += bits(z[i]) != bits(y[i]);
        memcpy(z, y, sizeof(float) * (size_t)n);
        dsv4_row_round(fmt, z, n, rd);
        /* idempotent up to the sign of a zero (F2's rounding turns -0 into +0; a stored row
         * is never rounded twice, so only values matter) */
        for (int i = 0; i < n; i++) bad_idem += z[i] != y[i];
        /* a row unpacked and packed again (the CP exchange, a restored file) keeps its bytes */
        dsv4_row_unpack(fmt, z, p, n, rd);
        dsv4_row_pack(fmt, q, z, n, rd);
        bad_bytes += memcmp(p, q, (size_t)nb) != 0;
        /* the rounding itself against the formulas */
        for (int i = 0; i < n; i++) {
            if (fmt == DSV4_ROW_BF16 || (fmt == DSV4_ROW_FP8 && i >= n - rd)) {
                bad_ref += bits(y[i]) != bits(bf16_ref(x[i]));
            } else if (fmt == DSV4_ROW_FP8) {
                /* an e4m3 value times the block's power-of-two scale, within half a step */
                const int b0 = i / 64 * 64;
                float amax = 1e-4f;
                for (int k = b0; k < b0 + 64; k++) amax = fmaxf(amax, fabsf(x[k]));
                const double s = ldexp(1.0, (int)ceil(log2((double)(amax * (1.0f / 448.0f)))));
                const double stored = (double)e4m3_ref(p[i]) * ldexp(1.0, (int)p[n - rd + b0 / 64] - 127);
                bad_ref += (double)y[i] != stored;
                const double err = fabs((double)y[i] - (double)x[i]);
                const double a = fabs((double)x[i]) / s; /* in e4m3 units */
                const double ulp = a < ldexp(1.0, -6) ? ldexp(1.0, -9) : ldexp(1.0, (int)floor(log2(a)) - 3);
                bad_ref += err > 0.5 * ulp * s * (1 + 1e-12);
            } else if (fmt == DSV4_ROW_FP4) {
                /* F3: an e2m1 value times the block's power-of-two scale (the nibble and the
                 * scale byte as stored), within half a step; the sign kept (-0 and a
                 * negative value that rounds to zero give -0) */
                const int b0 = i / 32 * 32, b1 = b0 + 32 < n ? b0 + 32 : n;
                float amax = 6.0f * 0x1p-126f;
                for (int k = b0; k < b1; k++) amax = fmaxf(amax, fabsf(x[k]));
                const double s = ldexp(1.0, (int)ceil(log2((double)(amax * (1.0f / 6.0f)))));
                const uint8_t nib = (uint8_t)(p[i / 2] >> (4 * (i & 1)) & 15);
                const double stored = (double)e2m1_ref(nib) * ldexp(1.0, (int)p[(n + 1) / 2 + i / 32] - 127);
                bad_ref += (double)y[i] != stored || signbit(y[i]) != signbit(x[i]);
                const double a = fabs((double)x[i]) / s; /* in e2m1 units, at most 6 */
                const double ulp = a < 2 ? 0.5 : a < 4 ? 1.0 : 2.0;
                bad_ref += fabs((double)y[i] - (double)x[i]) > 0.5 * ulp * s * (1 + 1e-12);
            }
            if (t % 4 == 0 && fabs(x[i]) > 1e-3) {  /* rows of one magnitude */
                const double rel = fabs((double)y[i] - x[i]) / fabs((double)x[i]);
                if (rel > max_rel) max_rel = rel;
            }
        }
    }
    printf("%-5s n=%d rd=%d: %lld bytes/row, rounding max-rel %.3g (|x| > 1e-3), round trip %d bad, "
           "idempotence %d bad, unpack+repack %d bad, reference %d bad\n", name, n, rd, (long long)nb, max_rel,
           bad_rt, bad_idem, bad_bytes, bad_ref);
    CHECK(bad_rt == 0 && bad_idem == 0 && bad_bytes == 0 && bad_ref == 0);
    if (fmt == DSV4_ROW_BF16) CHECK(max_rel <= 1.0 / 256);   /* 8 significant bits */
    if (fmt == DSV4_ROW_F32) CHECK(max_rel == 0);
}

int main(void) {
    /* sizes: serving.md's Flash row (hd 512, rd 64: 448 + 8 + 128 = 584 B) */
    CHECK(dsv4_row_bytes(DSV4_ROW_F32, 512, 64) == 2048);
    CHECK(dsv4_row_bytes(DSV4_ROW_BF16, 512, 64) == 1024);
    CHECK(dsv4_row_bytes(DSV4_ROW_FP8, 512, 64) == 584);
    CHECK(dsv4_row_bytes(DSV4_ROW_FP8, 128, 0) == 128 + 8);
    CHECK(dsv4_row_bytes(DSV4_ROW_FP8, 100, 4) == 0);   /* 96 nope channels: not blocks of 64 */
    CHECK(dsv4_row_bytes(5, 16, 0) == 0);
    /* FP4 keys: dI/2 nibble bytes + dI/32 scale bytes (Flash 64 + 4), a short last block */
    CHECK(dsv4_row_bytes(DSV4_ROW_FP4, 128, 0) == 68);
    CHECK(dsv4_row_bytes(DSV4_ROW_FP4, 32, 0) == 17);
    CHECK(dsv4_row_bytes(DSV4_ROW_FP4, 37, 0) == 19 + 2);
    CHECK(dsv4_row_bytes(DSV4_ROW_FP4, 128, 4) == 0);   /* no rope channels in FP4 */

    /* every e4m3 byte and a sweep of BF16 patterns unpack to their formula values */
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        uint8_t row[64 + 8];
        memset(row, (uint8_t)b, 64);
        memset(row + 64, 0, 8);
        row[64] = 127;  /* scale 2^0 */
        float x[64];
        dsv4_row_unpack(DSV4_ROW_FP8, x, row, 64, 0);
        const float ref = e4m3_ref((uint8_t)b);
        for (int i = 0; i < 64; i++) bad += isnan(ref) ? !isnan(x[i]) : bits(x[i]) != bits(ref);
    }
    for (uint32_t h = 0; h < 65536; h += 7) {
        const uint16_t v = (uint16_t)h;
        float x;
        dsv4_row_unpack(DSV4_ROW_BF16, &x, &v, 1, 0);
        bad += bits(x) != (h << 16);
    }
    CHECK_MSG(bad == 0, "%d unpacked values differ from the formula", bad);

    /* the FP8-split layout: nope bytes, scale bytes (zero-padded), BF16 rope */
    {
        float x[128 + 16];
        for (int i = 0; i < 144; i++) x[i] = (float)(i % 7) - 3.0f + (i >= 64 && i < 128 ? 0.0f : 0.5f);
        x[130] = 1.5f;
        dsv4_row_round(DSV4_ROW_FP8, x, 144, 16);
        uint8_t p[128 + 8 + 32];
        dsv4_row_pack(DSV4_ROW_FP8, p, x, 144, 16);
        CHECK(p[128] == 127 - 7 && p[129] == 127 - 7);      /* amax 3.5 / 448 = 2^-7; 3 / 448 -> 2^-7 */
        int pad_zero = 1;
        for (int i = 130; i < 136; i++) pad_zero &= p[i] == 0;
        CHECK(pad_zero);
        uint16_t h;
        memcpy(&h, p + 136 + 2 * 2, 2);
        CHECK(h == 0x3fc0);                                 /* x[130] = 1.5 in BF16 */
    }

    /* the FP4 layout: value 2i in the low nibble of byte i, then one scale byte a block */
    {
        float x[40];
        for (int i = 0; i < 40; i++) x[i] = 0.0f;
        x[0] = 1.5f; x[1] = -6.0f; x[2] = -1e-3f; x[3] = 0.5f; /* block 0: amax 6 -> scale 2^0 */
        x[32] = 0.25f; x[39] = -0.125f;                       /* block 1 (8 values): 0.25 / 6 -> 2^-4 */
        dsv4_row_round(DSV4_ROW_FP4, x, 40, 0);
        uint8_t p[20 + 2];
        dsv4_row_pack(DSV4_ROW_FP4, p, x, 40, 0);
        CHECK(p[0] == (0x3 | 0xf << 4) && p[1] == (0x8 | 0x1 << 4) && p[2] == 0);
        CHECK(p[16] == 0x6 && p[19] == 0xc << 4);             /* 0.25 = 4 x 2^-4; -0.125 = -2 x 2^-4 */
        CHECK(p[20] == 127 && p[21] == 127 - 4);
        float z[40];
        dsv4_row_unpack(DSV4_ROW_FP4, z, p, 40, 0);
        CHECK(bits(z[2]) == 0x80000000u && z[1] == -6.0f && z[39] == -0.125f); /* -1e-3 stored as -0 */
    }

    check_format(DSV4_ROW_F32, 512, 64, "f32");
    check_format(DSV4_ROW_FP4, 128, 0, "fp4");
    check_format(DSV4_ROW_FP4, 32, 0, "fp4");
    check_format(DSV4_ROW_FP4, 37, 0, "fp4");
    check_format(DSV4_ROW_BF16, 512, 64, "bf16");
    check_format(DSV4_ROW_FP8, 512, 64, "fp8");
    check_format(DSV4_ROW_FP8, 128, 0, "fp8");
    check_format(DSV4_ROW_FP8, 96, 32, "fp8");
    return test_report();
}
