/* test_rope.c — RoPE tables and rotation (spec/model.md §4).
 * Expected frequency bit patterns are the ones the spec lists for the Flash config (they
 * come from the official tables); the rest is checked against double-precision loops
 * written from the spec's formulas. */
#include <stdint.h>

#include "attn/rope.h"
#include "test.h"

static const uint32_t main_bits[32] = {
    0x3f800000, 0x3f3ff911, 0x3f0ff59a, 0x3ed7e89b, 0x3ea1e89b, 0x3e72d423, 0x3e361887, 0x3e088d77,
    0x3dcccccd, 0x3d99940d, 0x3d6655c2, 0x3d2cba15, 0x3d0186e3, 0x3cc2434f, 0x3c91ad39, 0x3c5a7bf2,
    0x3c23d70a, 0x3bf5b9b0, 0x3bb8449c, 0x3b8a2e77, 0x3b4f3e38, 0x3b1b690d, 0x3ae91528, 0x3aaec98e,
    0x3a83126f, 0x3a44948c, 0x3a136a16, 0x39dd1725, 0x39a5cb60, 0x3978a815, 0x393a7753, 0x390bd472};
static const uint32_t compress_bits[32] = {
    0x3f800000, 0x3f300a3a, 0x3ef21c1f, 0x3ea67d01, 0x3e64f92e, 0x3e1d7475, 0x3dd88cb4, 0x3d94e963,
    0x3d4ccccd, 0x3d0cd4fb, 0x3cc1b019, 0x3c8530ce, 0x3c372dbf, 0x3bfbed88, 0x3bad3d5e, 0x3b6e4237,
    0x3b147ae1, 0x3ab714e0, 0x3a5ebdb6, 0x3a0530ce, 0x399bb3af, 0x39305978, 0x38be904d, 0x383e9b5f,
    0x37a3d70c, 0x36b443d0, 0x3677eba6, 0x362a7be8, 0x35ea77ff, 0x35a13bdc, 0x355dbf30, 0x35187c4d};

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static dsv4_config flash_cfg(void) {
    dsv4_config c;
    memset(&c, 0, sizeof c);
    c.head_dim = 512;
    c.qk_rope_head_dim = 64;
    c.rope_theta = 10000;
    c.compress_rope_theta = 160000;
    c.rope_yarn = 1;
    c.rope_factor = 16;
    c.rope_original_max_pos = 65536;
    c.rope_beta_fast = 32;
    c.rope_beta_slow = 1;
    return c;
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double urand(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static void test_flash_bits(void) {
    dsv4_config c = flash_cfg();
    float f[32];
    dsv4_rope_freqs(&c, 0, f);
    int bad = 0;
    for (int i = 0; i < 32; i++)
        if (bits(f[i]) != main_bits[i]) { bad++; fprintf(stderr, "main f[%d] = %08x want %08x\n", i, bits(f[i]), main_bits[i]); }
    CHECK(bad == 0);
    dsv4_rope_freqs(&c, 1, f);
    bad = 0;
    for (int i = 0; i < 32; i++)
        if (bits(f[i]) != compress_bits[i]) { bad++; fprintf(stderr, "compress f[%d] = %08x want %08x\n", i, bits(f[i]), compress_bits[i]); }
    CHECK(bad == 0);
    /* The table's freqs are the same numbers. */
    dsv4_rope r;
    dsv4_err err;
    CHECK(dsv4_rope_init(&r, &c, 1, 4, &err) == DSV4_OK);
    CHECK(r.rd == 64 && r.n_pos == 4);
    for (int i = 0; i < 32; i++) CHECK(bits(r.freqs[i]) == compress_bits[i]);
    dsv4_rope_free(&r);
}

/* Double-precision YaRN frequencies from the spec's formulas, for configs without listed
 * bit patterns: agreement to FP32 rounding. */
static void test_freqs_vs_double(int rd, double base, int64_t orig, double factor, int compress) {
    dsv4_config c = flash_cfg();
    c.qk_rope_head_dim = rd;
    c.head_dim = 2 * rd;
    c.compress_rope_theta = base;
    c.rope_theta = base;
    c.rope_original_max_pos = orig;
    c.rope_factor = factor;
    float f[128];
    dsv4_rope_freqs(&c, compress, f);
    int yarn = compress && orig > 0;
    double low = 0, high = 0;
    if (yarn) {
        double cf = rd * log(orig / (32 * 2 * M_PI)) / (2 * log(base));
        double cs = rd * log(orig / (1 * 2 * M_PI)) / (2 * log(base));
        low = fmax(floor(cf), 0);
        high = fmin(ceil(cs), rd - 1);
        if (low == high) high += 0.001;
    }
    for (int i = 0; i < rd / 2; i++) {
        double fr = 1.0 / pow(base, (2.0 * i) / rd);
        if (yarn) {
            double ramp = fmin(fmax((i - low) / (high - low), 0), 1);
            fr = fr / factor * ramp + fr * (1 - ramp);
        }
        CHECK_MSG(fabs(f[i] - fr) <= 4e-7 * fr, "rd=%d base=%g yarn=%d f[%d] = %.9g want %.9g", rd, base, yarn, i, f[i], fr);
    }
}

/* Pair layout and sign convention on a hand example: rd = 4 of n = 6 channels, base 100
 * (f = {1, 0.1}), position 1: channels 0,1 untouched, (2,3) rotated by 1 rad, (4,5) by 0.1. */
static void test_layout(void) {
    dsv4_config c = flash_cfg();
    c.qk_rope_head_dim = 4;
    c.head_dim = 6;
    c.rope_theta = 100;
    dsv4_rope r;
    dsv4_err err;
    CHECK(dsv4_rope_init(&r, &c, 0, 8, &err) == DSV4_OK);
    float v[6] = {1, 2, 3, 4, 5, 6};
    dsv4_rope_apply(&r, v, 6, 1, 0);
    CHECK(v[0] == 1 && v[1] == 2);
    CHECK_NEAR(v[2], 3 * cos(1.0) - 4 * sin(1.0), 1e-6);
    CHECK_NEAR(v[3], 3 * sin(1.0) + 4 * cos(1.0), 1e-6);
    CHECK_NEAR(v[4], 5 * cos(0.1) - 6 * sin(0.1), 1e-6);
    CHECK_NEAR(v[5], 5 * sin(0.1) + 6 * cos(0.1), 1e-6);
    /* Inverse is the conjugate: a' = a c + b s, b' = -a s + b c. */
    float w[6] = {1, 2, 3, 4, 5, 6};
    dsv4_rope_apply(&r, w, 6, 3, 1);
    CHECK(w[0] == 1 && w[1] == 2);
    CHECK_NEAR(w[2], 3 * cos(3.0) + 4 * sin(3.0), 1e-6);
    CHECK_NEAR(w[3], -3 * sin(3.0) + 4 * cos(3.0), 1e-6);
    CHECK_NEAR(w[4], 5 * cos(0.3) + 6 * sin(0.3), 1e-6);
    CHECK_NEAR(w[5], -5 * sin(0.3) + 6 * cos(0.3), 1e-6);
    /* Position 0 is the identity. */
    float z[6] = {1, 2, 3, 4, 5, 6}, z0[6] = {1, 2, 3, 4, 5, 6};
    dsv4_rope_apply(&r, z, 6, 0, 0);
    CHECK(memcmp(z, z0, sizeof z) == 0);
    dsv4_rope_free(&r);
}

/* cos/sin of the FP32 angle (float)t·f[i], as the spec defines the table. */
static void test_table_values(void) {
    dsv4_config c = flash_cfg();
    dsv4_rope r;
    dsv4_err err;
    const int64_t n = 70000;
    CHECK(dsv4_rope_init(&r, &c, 1, n, &err) == DSV4_OK);
    double maxerr = 0, maxerr_dbl = 0;
    for (int64_t t = 0; t < n; t += 997) {
        for (int i = 0; i < 32; i++) {
            const float ang = (float)t * r.freqs[i];
            maxerr = fmax(maxerr, fabs(r.cos[t * 32 + i] - cos((double)ang)));
            maxerr = fmax(maxerr, fabs(r.sin[t * 32 + i] - sin((double)ang)));
            /* vs an angle formed in double: bounded by the FP32 angle rounding. */
            const double ad = (double)t * (double)r.freqs[i];
            maxerr_dbl = fmax(maxerr_dbl, fabs(r.cos[t * 32 + i] - cos(ad)) - (fabs(ad) * 6e-8 + 1e-7));
        }
    }
    CHECK_MSG(maxerr <= 6e-8, "table vs cos/sin of the FP32 angle: %.3g", maxerr);
    CHECK_MSG(maxerr_dbl <= 0, "table vs double angle beyond the FP32 rounding bound: %.3g", maxerr_dbl);
    dsv4_rope_free(&r);
}

static void test_inverse_and_beyond(int compress) {
    dsv4_config c = flash_cfg();
    dsv4_rope big, small;
    dsv4_err err;
    CHECK(dsv4_rope_init(&big, &c, compress, 5000, &err) == DSV4_OK);
    CHECK(dsv4_rope_init(&small, &c, compress, 16, &err) == DSV4_OK);
    const int64_t ps[] = {0, 1, 5, 15, 16, 17, 127, 128, 999, 4095, 4999, 5000, 65535, 1048575};
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
        const int64_t p = ps[pi];
        float v[80], a[80], b[80];
        for (int i = 0; i < 80; i++) v[i] = (float)urand();
        memcpy(a, v, sizeof v);
        memcpy(b, v, sizeof v);
        dsv4_rope_apply(&big, a, 80, p, 0);
        dsv4_rope_apply(&small, b, 80, p, 0);
        /* Table and on-the-fly rule agree bit for bit. */
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "table vs on-the-fly at %lld", (long long)p);
        /* The first 16 channels are not rope channels. */
        CHECK(memcmp(a, v, 16 * sizeof(float)) == 0);
        /* Rotation preserves each pair's norm. */
        for (int i = 0; i < 32; i++) {
            double n0 = hypot(v[16 + 2 * i], v[17 + 2 * i]), n1 = hypot(a[16 + 2 * i], a[17 + 2 * i]);
            CHECK_MSG(fabs(n0 - n1) <= 1e-6, "pair %d norm at %lld", i, (long long)p);
        }
        dsv4_rope_apply(&small, a, 80, p, 1);
        double maxerr = 0;
        for (int i = 0; i < 80; i++) maxerr = fmax(maxerr, fabs(a[i] - v[i]));
        CHECK_MSG(maxerr <= 1e-6, "forward+inverse at %lld: %.3g", (long long)p, maxerr);
    }
    dsv4_rope_free(&big);
    dsv4_rope_free(&small);
}

static void test_errors(void) {
    dsv4_config c = flash_cfg();
    dsv4_rope r;
    dsv4_err err;
    c.qk_rope_head_dim = 7;
    CHECK(dsv4_rope_init(&r, &c, 0, 4, &err) == DSV4_ERR_CONFIG);
    CHECK_ERR(err, DSV4_ERR_CONFIG, "qk_rope_head_dim");
    c = flash_cfg();
    CHECK(dsv4_rope_init(&r, &c, 0, -1, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_rope_init(&r, &c, 0, INT64_MAX / 4, &err) != DSV4_OK);
    CHECK(r.cos == NULL && r.sin == NULL && r.freqs == NULL);
    dsv4_rope_free(&r); /* harmless after a failed init */
    /* An empty table is legal: everything on the fly. */
    CHECK(dsv4_rope_init(&r, &c, 0, 0, &err) == DSV4_OK);
    float v[64] = {0};
    v[0] = 1;
    dsv4_rope_apply(&r, v, 64, 1, 0);
    CHECK_NEAR(v[0], cos(1.0), 1e-7);
    CHECK_NEAR(v[1], sin(1.0), 1e-7);
    dsv4_rope_free(&r);
}

int main(void) {
    test_flash_bits();
    test_freqs_vs_double(64, 160000, 65536, 16, 1);
    test_freqs_vs_double(64, 10000, 65536, 16, 0);
    test_freqs_vs_double(16, 160000, 65536, 16, 1);  /* tiny/small golden rd */
    test_freqs_vs_double(32, 160000, 65536, 16, 1);
    test_freqs_vs_double(32, 160000, 0, 16, 1);      /* YaRN off when orig = 0 */
    test_freqs_vs_double(128, 50000, 4096, 8, 1);
    test_layout();
    test_table_values();
    test_inverse_and_beyond(0);
    test_inverse_and_beyond(1);
    test_errors();
    return test_report();
}
