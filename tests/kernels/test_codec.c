/* test_codec.c — number codecs against formulas written here from spec/model.md §2.3 and
 * the IEEE/OCP definitions: exhaustive decoders, round trips, and encoders checked against
 * a brute-force nearest-value search (ties to the even code, saturation). */
#include <stdint.h>

#include "kernels/codec.h"
#include "test.h"

static uint64_t rng_state = 0x853c49e6748fea9bull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}

static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* same float, or both NaN */
static int same(float a, double b) { return (isnan(a) && isnan(b)) || (double)a == b; }

/* OCP e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; exp 15 + man 7 is NaN; no inf. */
static double e4m3_formula(int b) {
    const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    const double mag = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -mag : mag;
}

/* e2m1: 1 sign, 2 exponent (bias 1), 1 mantissa. */
static double e2m1_formula(int c) {
    const int s = c >> 3, e = (c >> 1) & 3, m = c & 1;
    const double mag = e == 0 ? m * 0.5 : ldexp(1.0 + m / 2.0, e - 1);
    return s ? -mag : mag;
}

/* IEEE binary16. */
static double f16_formula(int h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double mag;
    if (e == 31) mag = m ? NAN : INFINITY;
    else if (e == 0) mag = ldexp(m, -24);
    else mag = ldexp(1.0 + m / 1024.0, e - 15);
    return s ? -mag : mag;
}

static void test_decoders(void) {
    int bad = 0;
    for (int b = 0; b < 256; b++) bad += !same(dsv4_e4m3_to_f32((uint8_t)b), e4m3_formula(b));
    CHECK_MSG(bad == 0, "e4m3: %d of 256 codes decode wrong", bad);
    CHECK(dsv4_e4m3_to_f32(0x7e) == 448.0f && dsv4_e4m3_to_f32(0x01) == 0.001953125f);
    CHECK(isnan(dsv4_e4m3_to_f32(0x7f)) && isnan(dsv4_e4m3_to_f32(0xff)));
    CHECK(signbit(dsv4_e4m3_to_f32(0x80)) && dsv4_e4m3_to_f32(0x80) == 0.0f);

    bad = 0;
    for (int b = 0; b < 255; b++) bad += dsv4_e8m0_to_f32((uint8_t)b) != (float)ldexp(1.0, b - 127);
    CHECK_MSG(bad == 0, "e8m0: %d of 255 scale bytes decode wrong", bad);
    CHECK(isnan(dsv4_e8m0_to_f32(255)));
    CHECK(dsv4_e8m0_to_f32(127) == 1.0f && dsv4_e8m0_to_f32(0) > 0.0f);

    bad = 0;
    for (int c = 0; c < 16; c++) bad += !same(dsv4_e2m1_to_f32((uint8_t)c), e2m1_formula(c));
    CHECK_MSG(bad == 0, "e2m1: %d of 16 codes decode wrong", bad);
    CHECK(dsv4_e2m1_to_f32(7) == 6.0f && dsv4_e2m1_to_f32(0xf) == -6.0f && signbit(dsv4_e2m1_to_f32(8)));
    CHECK(dsv4_e2m1_to_f32(0x12) == 1.0f); /* only the low nibble counts */

    bad = 0;
    for (int h = 0; h < 65536; h++) bad += !same(dsv4_f16_to_f32((uint16_t)h), f16_formula(h));
    CHECK_MSG(bad == 0, "f16: %d of 65536 decode wrong", bad);

    bad = 0;
    for (int h = 0; h < 65536; h++) bad += f_bits(dsv4_bf16_to_f32((uint16_t)h)) != (uint32_t)h << 16;
    CHECK_MSG(bad == 0, "bf16: %d of 65536 decode wrong", bad);
}

static void test_round_trips(void) {
    int bad = 0;
    for (int h = 0; h < 65536; h++) {
        const float f = dsv4_bf16_to_f32((uint16_t)h);
        const uint16_t back = dsv4_f32_to_bf16(f);
        bad += isnan(f) ? !isnan(dsv4_bf16_to_f32(back)) : back != h;
    }
    CHECK_MSG(bad == 0, "bf16 round trip: %d failures", bad);
    bad = 0;
    for (int h = 0; h < 65536; h++) {
        const float f = dsv4_f16_to_f32((uint16_t)h);
        const uint16_t back = dsv4_f32_to_f16(f);
        bad += isnan(f) ? !isnan(dsv4_f16_to_f32(back)) : back != h;
    }
    CHECK_MSG(bad == 0, "f16 round trip: %d failures", bad);
    bad = 0;
    for (int b = 0; b < 256; b++) {
        if ((b & 0x7f) == 0x7f) continue;
        bad += dsv4_f32_to_e4m3(dsv4_e4m3_to_f32((uint8_t)b)) != b;
    }
    CHECK_MSG(bad == 0, "e4m3 round trip: %d failures", bad);
    bad = 0;
    for (int c = 0; c < 16; c++) bad += dsv4_f32_to_e2m1(dsv4_e2m1_to_f32((uint8_t)c)) != c;
    CHECK_MSG(bad == 0, "e2m1 round trip: %d failures", bad);
}

/* Brute-force encoder for a small format: nearest of the finite codes (positive codes
 * 0 .. n_pos-1 in increasing value, sign bit sbit), ties to the even code, saturating. */
static int nearest_code(double v, const double *pos, int n_pos, int sbit) {
    const int neg = signbit(v);
    const double a = fabs(v);
    int best = 0;
    for (int c = 1; c < n_pos; c++) {
        const double db = fabs(a - pos[best]), dc = fabs(a - pos[c]);
        if (dc < db || (dc == db && (c & 1) == 0)) best = c;
    }
    return neg ? best | sbit : best;
}

/* Values to encode: random floats over a wide exponent range, every midpoint between
 * neighbouring codes and one float either side of it. */
static void encoder_cases(const double *pos, int n_pos, float *out, int *n_out, int cap) {
    int n = 0;
    for (int c = 0; c + 1 < n_pos; c++) {
        const float mid = (float)((pos[c] + pos[c + 1]) / 2); /* exact: a few significant bits */
        out[n++] = mid;
        out[n++] = nextafterf(mid, 0.0f);
        out[n++] = nextafterf(mid, INFINITY);
        out[n++] = -mid;
    }
    while (n < cap) {
        const float f = bits_f((uint32_t)rnd());
        if (isnan(f) || isinf(f)) continue;
        const int e = (int)(rnd() % 40) - 30; /* magnitudes 2^-30 .. 2^10 */
        out[n++] = ldexpf(frexpf(f, &(int){0}), e);
    }
    *n_out = n;
}

static void test_e4m3_encoder(void) {
    double pos[127];
    for (int c = 0; c < 127; c++) pos[c] = e4m3_formula(c); /* 0 .. 448, increasing */
    static float cases[20000];
    int n;
    encoder_cases(pos, 127, cases, &n, 20000);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t got = dsv4_f32_to_e4m3(cases[i]), want = (uint8_t)nearest_code(cases[i], pos, 127, 0x80);
        if (got != want && bad++ < 5) fprintf(stderr, "e4m3(%.9g) = 0x%02x, want 0x%02x\n", cases[i], got, want);
    }
    CHECK_MSG(bad == 0, "e4m3 encoder: %d of %d wrong", bad, n);
    /* saturation and specials */
    CHECK(dsv4_f32_to_e4m3(448.0f) == 0x7e && dsv4_f32_to_e4m3(470.0f) == 0x7e && dsv4_f32_to_e4m3(1e30f) == 0x7e);
    CHECK(dsv4_f32_to_e4m3(INFINITY) == 0x7e && dsv4_f32_to_e4m3(-INFINITY) == 0xfe);
    CHECK((dsv4_f32_to_e4m3(NAN) & 0x7f) == 0x7f);
    CHECK(dsv4_f32_to_e4m3(-0.0f) == 0x80 && dsv4_f32_to_e4m3(0.0f) == 0x00);
    CHECK(dsv4_f32_to_e4m3(ldexpf(1.0f, -10)) == 0x00);             /* half the least subnormal: tie to 0 */
    CHECK(dsv4_f32_to_e4m3(ldexpf(3.0f, -10)) == 0x02);             /* 1.5 quanta: tie to even 2 */
    CHECK(dsv4_f32_to_e4m3(nextafterf(ldexpf(1.0f, -10), 1)) == 0x01);
}

static void test_e2m1_encoder(void) {
    double pos[8];
    for (int c = 0; c < 8; c++) pos[c] = e2m1_formula(c);
    static float cases[4000];
    int n;
    encoder_cases(pos, 8, cases, &n, 4000);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t got = dsv4_f32_to_e2m1(cases[i]), want = (uint8_t)nearest_code(cases[i], pos, 8, 8);
        if (got != want && bad++ < 5) fprintf(stderr, "e2m1(%.9g) = %d, want %d\n", cases[i], got, want);
    }
    CHECK_MSG(bad == 0, "e2m1 encoder: %d of %d wrong", bad, n);
    CHECK(dsv4_f32_to_e2m1(5.0f) == 6 && dsv4_f32_to_e2m1(1.25f) == 2 && dsv4_f32_to_e2m1(0.25f) == 0);
    CHECK(dsv4_f32_to_e2m1(100.0f) == 7 && dsv4_f32_to_e2m1(-INFINITY) == 15);
}

/* Halves: nearest by binary search over the increasing positive finite codes. */
static int nearest_half(float f, double (*dec)(int), int max_code, double overflow_at) {
    const double a = fabs((double)f);
    const int sign = signbit(f) ? 0x8000 : 0;
    if (a >= overflow_at) return sign | (max_code + 1); /* the infinity code follows max finite */
    int lo = 0, hi = max_code;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (dec(mid) <= a) lo = mid;
        else hi = mid;
    }
    const double dl = a - dec(lo), dh = dec(hi) - a;
    int c = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
    if (dec(hi) <= a) c = hi;
    return sign | c;
}

static double bf16_formula(int h) { return (double)bits_f((uint32_t)h << 16); }

static void test_half_encoders(void) {
    int bad16 = 0, badb = 0, n = 0;
    const double f16_over = 65520.0;                          /* 65504 + half an ulp (16) */
    const double bf16_over = ldexp(1.0, 128) - ldexp(1.0, 119); /* max bf16 + half an ulp */
    for (int i = 0; i < 300000; i++) {
        float f;
        if (i < 0x7bff) { /* every f16 midpoint */
            f = (float)((f16_formula(i) + f16_formula(i + 1)) / 2);
        } else if (i < 0x7bff + 0x7f7f) { /* every bf16 midpoint */
            const int h = i - 0x7bff;
            f = bits_f(((uint32_t)h << 16) + 0x8000u);
        } else {
            f = bits_f((uint32_t)rnd());
            if (isnan(f)) continue;
            if (i & 1) f = ldexpf(frexpf(f, &(int){0}), (int)(rnd() % 60) - 35);
        }
        if (i & 2) f = -f;
        n++;
        const int w16 = nearest_half(f, f16_formula, 0x7bff, f16_over);
        const int wb = nearest_half(f, bf16_formula, 0x7f7f, bf16_over);
        if (dsv4_f32_to_f16(f) != w16 && bad16++ < 5)
            fprintf(stderr, "f16(%.9g) = 0x%04x, want 0x%04x\n", f, dsv4_f32_to_f16(f), w16);
        if (dsv4_f32_to_bf16(f) != wb && badb++ < 5)
            fprintf(stderr, "bf16(%.9g) = 0x%04x, want 0x%04x\n", f, dsv4_f32_to_bf16(f), wb);
    }
    CHECK_MSG(bad16 == 0, "f16 encoder: %d of %d wrong", bad16, n);
    CHECK_MSG(badb == 0, "bf16 encoder: %d of %d wrong", badb, n);
    CHECK(dsv4_f32_to_f16(65519.99f) == 0x7bff && dsv4_f32_to_f16(65520.0f) == 0x7c00);
    CHECK(dsv4_f32_to_f16(-INFINITY) == 0xfc00 && isnan(dsv4_f16_to_f32(dsv4_f32_to_f16(NAN))));
    CHECK(dsv4_f32_to_bf16(INFINITY) == 0x7f80 && isnan(dsv4_bf16_to_f32(dsv4_f32_to_bf16(NAN))));
    /* a signalling NaN whose payload sits only in the low 16 bits must stay NaN */
    CHECK(isnan(dsv4_bf16_to_f32(dsv4_f32_to_bf16(bits_f(0x7f800001u)))));
    CHECK(dsv4_f32_to_bf16(bits_f(0x3f808000u)) == 0x3f80 && dsv4_f32_to_bf16(bits_f(0x3f818000u)) == 0x3f82);
}

int main(void) {
    test_decoders();
    test_round_trips();
    test_e4m3_encoder();
    test_e2m1_encoder();
    test_half_encoders();
    return test_report();
}
