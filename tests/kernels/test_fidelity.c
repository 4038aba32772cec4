/* test_fidelity.c — the fidelity-mode roundings (kernels/fidelity.h, spec/model.md §6) on
 * hand-checkable cases: e4m3/e2m1 ties to even, subnormals, saturation, the amax floors,
 * the power-of-two scale at exact powers of two, block tails, BF16 ties and the Hadamard
 * rotation; plus agreement with the checkpoint codecs (an independent encoder) on a sweep. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/codec.h"
#include "kernels/fidelity.h"
#include "test.h"

static int all_finite(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static void test_e4m3(void) {
    /* normals: step 2^(e-3); 1 + 1/16 is halfway between 1 and 1.125 -> even (1) */
    CHECK(dsv4_fid_e4m3_round(1.0625f) == 1.0f);
    CHECK(dsv4_fid_e4m3_round(1.1875f) == 1.25f);   /* halfway 1.125 / 1.25 -> 1.25 (even) */
    CHECK(dsv4_fid_e4m3_round(1.07f) == 1.125f);
    CHECK(dsv4_fid_e4m3_round(-3.3f) == -3.25f);
    CHECK(dsv4_fid_e4m3_round(15.5f) == 16.0f);     /* 15.5 = halfway 15 / 16 -> 16 (carry) */
    CHECK(dsv4_fid_e4m3_round(240.0f) == 240.0f);
    CHECK(dsv4_fid_e4m3_round(440.0f) == 448.0f);   /* halfway 416 / 448 at step 32 -> 448 */
    CHECK(dsv4_fid_e4m3_round(420.0f) == 416.0f);
    CHECK(dsv4_fid_e4m3_round(448.0f) == 448.0f);
    CHECK(dsv4_fid_e4m3_round(1000.0f) == 448.0f);  /* saturates */
    CHECK(dsv4_fid_e4m3_round(-1000.0f) == -448.0f);
    /* subnormals: step 2^-9 below 2^-6 */
    CHECK(dsv4_fid_e4m3_round(0x1p-9f) == 0x1p-9f);
    CHECK(dsv4_fid_e4m3_round(0x1p-10f) == 0.0f);           /* halfway 0 / 2^-9 -> 0 */
    CHECK(dsv4_fid_e4m3_round(0x1.8p-9f) == 0x1p-8f);       /* 1.5 steps -> 2 steps */
    CHECK(dsv4_fid_e4m3_round(0x1.4p-9f) == 0x1p-9f);
    CHECK(dsv4_fid_e4m3_round(7.5f * 0x1p-9f) == 0x1p-6f);  /* top subnormal rounds to min normal */
    CHECK(dsv4_fid_e4m3_round(0.0f) == 0.0f);
    CHECK(dsv4_fid_e4m3_round(NAN) == 0.0f);                /* NaN-free */
    /* the checkpoint encoder agrees on a sweep of values in range */
    int bad = 0;
    for (int i = -6000; i <= 6000; i++) {
        const float v = (float)i * 0.0731f + (float)(i % 7) * 1e-3f;
        const float a = fabsf(v) > 448.0f ? (v < 0 ? -448.0f : 448.0f) : v;
        bad += dsv4_fid_e4m3_round(a) != dsv4_e4m3_to_f32(dsv4_f32_to_e4m3(a));
        const float t = (float)i * 0x1p-14f;
        bad += dsv4_fid_e4m3_round(t) != dsv4_e4m3_to_f32(dsv4_f32_to_e4m3(t));
    }
    CHECK_MSG(bad == 0, "%d e4m3 roundings differ from the codec", bad);
}

static void test_e2m1(void) {
    CHECK(dsv4_fid_e2m1_round(0.25f) == 0.0f);   /* tie 0 / 0.5 -> 0 */
    CHECK(dsv4_fid_e2m1_round(0.26f) == 0.5f);
    CHECK(dsv4_fid_e2m1_round(0.75f) == 1.0f);   /* tie 0.5 / 1 -> 1 (even code) */
    CHECK(dsv4_fid_e2m1_round(1.25f) == 1.0f);   /* tie 1 / 1.5 -> 1 */
    CHECK(dsv4_fid_e2m1_round(1.75f) == 2.0f);   /* tie 1.5 / 2 -> 2 */
    CHECK(dsv4_fid_e2m1_round(2.5f) == 2.0f);    /* tie 2 / 3 -> 2 */
    CHECK(dsv4_fid_e2m1_round(3.5f) == 4.0f);    /* tie 3 / 4 -> 4 */
    CHECK(dsv4_fid_e2m1_round(5.0f) == 4.0f);    /* tie 4 / 6 -> 4 */
    CHECK(dsv4_fid_e2m1_round(5.01f) == 6.0f);
    CHECK(dsv4_fid_e2m1_round(-7.0f) == -6.0f);  /* saturates */
    int bad = 0;
    for (int i = -700; i <= 700; i++) {
        const float v = (float)i * 0.00917f;
        bad += dsv4_fid_e2m1_round(v) != dsv4_e2m1_to_f32(dsv4_f32_to_e2m1(v));
    }
    CHECK_MSG(bad == 0, "%d e2m1 roundings differ from the codec", bad);
}

static void test_scale(void) {
    /* amax 448 -> s = 1 exactly (ceil of log2 of 1); a hair above -> 2 */
    CHECK(dsv4_fid_pow2_scale(448.0f, 1.0f / 448.0f) == 1.0f);
    CHECK(dsv4_fid_pow2_scale(449.0f, 1.0f / 448.0f) == 2.0f);
    CHECK(dsv4_fid_pow2_scale(6.0f, 1.0f / 6.0f) == 1.0f);
    CHECK(dsv4_fid_pow2_scale(12.0f, 1.0f / 6.0f) == 2.0f);
    CHECK(dsv4_fid_pow2_scale(3.0f, 1.0f / 6.0f) == 0.5f);
    CHECK(dsv4_fid_pow2_scale(3.1f, 1.0f / 6.0f) == 1.0f);
    /* the top of the range: defined, at most ue8m0's 2^127 */
    CHECK(dsv4_fid_pow2_scale(FLT_MAX, 1.0f / 6.0f) == 0x1p126f);
    CHECK(dsv4_fid_pow2_scale(INFINITY, 1.0f / 6.0f) == 0x1p127f);
    CHECK(dsv4_fid_pow2_scale(INFINITY, 1.0f / 448.0f) == 0x1p127f);
    CHECK(isnan(dsv4_fid_pow2_scale(NAN, 1.0f / 6.0f)));
}

/* F3 at the top of the float range (rv-idx4): from 3.5 x 2^126 up (s = 2^126, where 4 s and
 * 6 s overflow) and for infinities the result saturates at DSV4_FID_FP4_MAX = 3 x 2^126 with
 * its sign; the rule is idempotent there (bit for bit), and its output is an e2m1 value times a
 * power of two, so the FP4 codec holds it. Values beside a saturated one keep the block's
 * scale (2^126), an infinite amax's block rounds at 2^127 (a NaN there is rounded to 0, as
 * anywhere). */
static void test_fp4_top(void) {
    float x[32] = {0x1.cp127f, -0x1.cp127f, 0x1.8p127f, FLT_MAX, 0x1p125f, 0x1.8p126f, 0x1.7p126f, 1.0f};
    dsv4_fid_fp4_rt(x, 32);
    CHECK(x[0] == DSV4_FID_FP4_MAX && x[1] == -DSV4_FID_FP4_MAX && x[2] == DSV4_FID_FP4_MAX &&
          x[3] == DSV4_FID_FP4_MAX); /* 3.5 s, 6 s past the clamp: not inf */
    CHECK(x[4] == 0x1p125f && x[5] == 0x1.8p126f && x[6] == 0x1.8p126f && x[7] == 0.0f); /* at s = 2^126 */
    float y[32] = {INFINITY, -INFINITY, 0x1p126f, 0x1p125f, NAN};
    dsv4_fid_fp4_rt(y, 32);
    CHECK(y[0] == DSV4_FID_FP4_MAX && y[1] == -DSV4_FID_FP4_MAX);
    CHECK(y[2] == 0x1p126f && y[3] == 0.0f && y[4] == 0.0f); /* s = 2^127: 0.5 s kept, 0.25 s to 0 */
    CHECK(all_finite(x, 32));
    for (int k = 0; k < 2; k++) { /* idempotent: the rule on its own output changes no bit */
        float *v = k ? y : x, w[32];
        memcpy(w, v, sizeof w);
        dsv4_fid_fp4_rt(w, 32);
        CHECK_MSG(!memcmp(w, v, sizeof w), "F3 on its output at the top of the range changed a bit (%d)", k);
        /* FP4 codes hold it: code times the block scale DSV4_FID_FP4_MAX gets, 2^125 */
        CHECK(dsv4_e2m1_to_f32(dsv4_f32_to_e2m1(DSV4_FID_FP4_MAX / 0x1p125f)) * 0x1p125f == DSV4_FID_FP4_MAX);
    }
}

/* F1 / F2 (FP8) at the top of the float range, as F3's above: from 248 x 2^120 up (s = 2^120,
 * where the value rounds to 256 s, past FLT_MAX) and for infinities (s = 2^127; FLT_MAX
 * beside one rounds to 2 s) the result saturates at DSV4_FID_FP8_MAX = 240 x 2^120 with its
 * sign; idempotent there, and the e4m3 codec holds it at the scale it then gets. */
static void test_fp8_top(void) {
    float x[64] = {FLT_MAX, -FLT_MAX, 0x1.fp127f, 0x1.ep127f, 0x1.dp127f, 0x1p120f, 1.0f};
    dsv4_fid_fp8_rt(x, 64, 64);
    CHECK(x[0] == DSV4_FID_FP8_MAX && x[1] == -DSV4_FID_FP8_MAX && x[2] == DSV4_FID_FP8_MAX &&
          x[3] == DSV4_FID_FP8_MAX); /* 256 s, 248 s: not inf; 240 s kept */
    CHECK(x[4] == 0x1.cp127f && x[5] == 0x1p120f && x[6] == 0.0f); /* at s = 2^120: 232 s ties to 224 s (even) */
    float y[64] = {INFINITY, -INFINITY, FLT_MAX, 0x1p118f, 0x1p117f, NAN};
    dsv4_fid_fp8_rt(y, 64, 64);
    CHECK(y[0] == DSV4_FID_FP8_MAX && y[1] == -DSV4_FID_FP8_MAX && y[2] == DSV4_FID_FP8_MAX);
    CHECK(y[3] == 0x1p118f && y[4] == 0.0f && y[5] == 0.0f); /* s = 2^127: 2^-9 s kept, 2^-10 s to 0 */
    CHECK(all_finite(x, 64) && all_finite(y, 64));
    for (int k = 0; k < 2; k++) { /* idempotent: the rule on its own output changes no bit */
        float *v = k ? y : x, w[64];
        memcpy(w, v, sizeof w);
        dsv4_fid_fp8_rt(w, 64, 64);
        CHECK_MSG(!memcmp(w, v, sizeof w), "F1 on its output at the top of the range changed a bit (%d)", k);
    }
    /* the codec holds it: e4m3 code 240 times the scale DSV4_FID_FP8_MAX gets, 2^120 */
    CHECK(dsv4_fid_pow2_scale(DSV4_FID_FP8_MAX, 1.0f / 448.0f) == 0x1p120f);
    CHECK(dsv4_e4m3_to_f32(dsv4_f32_to_e4m3(DSV4_FID_FP8_MAX / 0x1p120f)) * 0x1p120f == DSV4_FID_FP8_MAX);
}

static void test_fp8_blocks(void) {
    /* a block of 128 with amax 448: s = 1, values round in e4m3 directly */
    float x[300];
    for (int i = 0; i < 300; i++) x[i] = 0.0f;
    x[0] = 448.0f; x[1] = 1.0625f; x[2] = -3.3f;
    /* block 2 (columns 128..255): amax 896 -> s = 2; 2.125 / 2 = 1.0625 -> 1 -> 2 */
    x[128] = 896.0f; x[129] = 2.125f;
    /* tail block of 44 (256..299): amax 0.001 -> s = 2^-18 (0.001/448 = 2.23e-6 -> 2^-18
     * = 3.81e-6); 0.001 / 2^-18 = 262.1 -> step 32 -> 256 -> 256 * 2^-18 */
    x[256] = 0.001f; x[257] = -0.0005f;
    dsv4_fid_fp8_rt(x, 300, 128);
    CHECK(x[0] == 448.0f && x[1] == 1.0f && x[2] == -3.25f);
    CHECK(x[128] == 896.0f && x[129] == 2.0f);
    CHECK(x[256] == 256.0f * 0x1p-18f);
    /* -0.0005 / 2^-18 = -131.07 -> step 16 -> -128 */
    CHECK(x[257] == -128.0f * 0x1p-18f);
    CHECK(all_finite(x, 300));
    /* the amax floor: an all-zero block stays zero, a tiny block uses s = 2^ceil(log2(1e-4/448)) */
    float z[70];
    for (int i = 0; i < 70; i++) z[i] = i < 64 ? 0.0f : 1e-9f;
    dsv4_fid_fp8_rt(z, 70, 64);
    for (int i = 0; i < 64; i++) CHECK(z[i] == 0.0f);
    /* tail block (64..69): amax floored to 1e-4 -> s = 2^-22; 1e-9 / 2^-22 = 0.0042 is 2.15
     * subnormal steps of 2^-9 -> 2 steps -> 2^-8 * 2^-22 */
    CHECK(z[64] == 0x1p-30f && all_finite(z, 70));
    CHECK(dsv4_fid_pow2_scale(1e-4f, 1.0f / 448.0f) == 0x1p-22f);
    /* the same block with 64 instead of 128: the tail gets its own scale */
    float a[130], b[130];
    for (int i = 0; i < 130; i++) a[i] = b[i] = (i == 0 ? 100.0f : i < 64 ? 0.301f : 0.0003f);
    dsv4_fid_fp8_rt(a, 130, 128);
    dsv4_fid_fp8_rt(b, 130, 64);
    /* block 0 of 128 has amax 100 -> s = 2^-2, 0.301 / 0.25 = 1.204 -> 1.25 -> 0.3125 */
    CHECK(a[1] == 0.3125f && b[1] == 0.3125f);
    /* 0.0003 / 2^-2 = 0.0012 = 0.61 subnormal steps -> 1 step -> 2^-11 */
    CHECK(a[70] == 0x1p-11f);
    /* 64-block 1 (64..127) has amax 3e-4 -> s = 2^-20: 314.6 -> step 32 -> 320 */
    CHECK(b[70] == 320.0f * 0x1p-20f);
    /* the 128-block tail (128, 129) has its own amax 3e-4 too */
    CHECK(a[128] == 320.0f * 0x1p-20f && b[128] == 320.0f * 0x1p-20f);
}

static void test_fp4(void) {
    float x[40];
    for (int i = 0; i < 40; i++) x[i] = 0.0f;
    /* block 0: amax 6 -> s = 1; 2.5 -> 2, 0.25 -> 0, -0.75 -> -1 */
    x[0] = 6.0f; x[1] = 2.5f; x[2] = 0.25f; x[3] = -0.75f;
    /* tail of 8 (32..39): amax 12 -> s = 2; 5 / 2 = 2.5 -> 2 -> 4 */
    x[32] = 12.0f; x[33] = 5.0f;
    dsv4_fid_fp4_rt(x, 40);
    CHECK(x[0] == 6.0f && x[1] == 2.0f && x[2] == 0.0f && x[3] == -1.0f);
    CHECK(x[32] == 12.0f && x[33] == 4.0f);
    /* the floor 6 * 2^-126: an all-zero block stays zero, no NaN from 0/0 */
    float z[32] = {0};
    dsv4_fid_fp4_rt(z, 32);
    for (int i = 0; i < 32; i++) CHECK(z[i] == 0.0f);
    CHECK(dsv4_fid_pow2_scale(DSV4_FID_AMAX_FLOOR_FP4, 1.0f / 6.0f) == 0x1p-126f);
}

static void test_bf16(void) {
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> 1 (even); 1 + 3*2^-8 -> 1 + 2^-6 */
    CHECK(dsv4_fid_bf16_1(1.0f + 0x1p-8f) == 1.0f);
    CHECK(dsv4_fid_bf16_1(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
    CHECK(dsv4_fid_bf16_1(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
    CHECK(isinf(dsv4_fid_bf16_1(INFINITY)));
    /* agrees with the codec's encoder */
    int bad = 0;
    for (int i = -5000; i < 5000; i++) {
        const float v = (float)i * 0.01234567f;
        bad += dsv4_fid_bf16_1(v) != dsv4_bf16_to_f32(dsv4_f32_to_bf16(v));
    }
    CHECK_MSG(bad == 0, "%d BF16 roundings differ from the codec", bad);
    float r[3] = {1.0f + 0x1p-8f, 2.0f, -1.0f - 3 * 0x1p-8f};
    dsv4_fid_bf16(r, 3);
    CHECK(r[0] == 1.0f && r[1] == 2.0f && r[2] == -1.0f - 0x1p-6f);
}

static void test_kv_row(void) {
    /* hd 80, rd 16: channels 0..63 one FP8 block, 64..79 BF16 */
    float x[80];
    for (int i = 0; i < 80; i++) x[i] = 0.0f;
    x[0] = 448.0f; x[1] = 1.0625f;
    x[64] = 1.0f + 0x1p-8f + 0x1p-20f; x[65] = 1.0625f;
    dsv4_fid_kv_row(x, 80, 16);
    CHECK(x[0] == 448.0f && x[1] == 1.0f);
    CHECK(x[64] == 1.0f + 0x1p-7f && x[65] == 1.0625f); /* BF16 keeps 1.0625 */
}

static void test_hadamard(void) {
    /* H_4 / 2 of e_0 is (1,1,1,1)/2; of (1,2,3,4): (10, -2, -4, 0)/2 */
    float e[4] = {1, 0, 0, 0}, v[4] = {1, 2, 3, 4};
    dsv4_fid_hadamard(e, 4);
    dsv4_fid_hadamard(v, 4);
    for (int i = 0; i < 4; i++) CHECK(e[i] == 0.5f);
    CHECK(v[0] == 5.0f && v[1] == -1.0f && v[2] == -2.0f && v[3] == 0.0f);
    /* orthogonal: applying it twice gives the input back (up to rounding of 1/sqrt(n)) */
    float w[64], w0[64];
    for (int i = 0; i < 64; i++) w[i] = w0[i] = sinf((float)i * 0.37f);
    dsv4_fid_hadamard(w, 64);
    dsv4_fid_hadamard(w, 64);
    double md = 0;
    for (int i = 0; i < 64; i++) md = fmax(md, fabs(w[i] - w0[i]));
    CHECK_MSG(md < 1e-6, "H H x - x = %.3g", md);
    /* index row: rotation then FP4, every value is s * an e2m1 value of its block */
    float q[64];
    for (int i = 0; i < 64; i++) q[i] = cosf((float)i * 0.11f);
    dsv4_fid_index_row(q, 64);
    CHECK(all_finite(q, 64));
    int on_grid = 1;
    for (int b = 0; b < 2; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(q[32 * b + i]));
        const float s = dsv4_fid_pow2_scale(amax, 1.0f / 6.0f);
        for (int i = 0; i < 32; i++) on_grid &= dsv4_fid_e2m1_round(q[32 * b + i] / s) == q[32 * b + i] / s;
    }
    CHECK(on_grid);
}

/* model.md §8 invariant 7 at the kernel level: without the FP4 step the rotation changes
 * q . K by rounding only ((Hq/sqrt n) . (HK/sqrt n) = q . K), for n = 64 and 128 */
static void test_hadamard_cancels(void) {
    for (int n = 64; n <= 128; n *= 2) {
        float q[128], k[128], qh[128], kh[128];
        double worst = 0;
        for (int trial = 0; trial < 50; trial++) {
            double nq = 0, nk = 0, d0 = 0, d1 = 0;
            for (int i = 0; i < n; i++) {
                q[i] = qh[i] = sinf(0.7f * (float)(i + 3 * trial)) * (1.0f + 0.01f * (float)i);
                k[i] = kh[i] = cosf(1.3f * (float)i + 0.1f * (float)trial);
                nq += (double)q[i] * q[i];
                nk += (double)k[i] * k[i];
            }
            dsv4_fid_hadamard(qh, n);
            dsv4_fid_hadamard(kh, n);
            for (int i = 0; i < n; i++) { d0 += (double)q[i] * k[i]; d1 += (double)qh[i] * kh[i]; }
            worst = fmax(worst, fabs(d1 - d0) / sqrt(nq * nk));
        }
        CHECK_MSG(worst < 1e-6, "n %d: rotated dot products differ by %.3g of |q||K|", n, worst);
    }
}

/* The F3 rule's vector form (dsv4_fid_fp4_rt where the CPU has AVX-512) against the portable
 * loop (dsv4_fid_fp4_rt_ref), bit for bit: blocks of random values at scales from below the
 * subnormals to the top of the range, with exact ties of the e2m1 grid (RNE at 0.25 s, 0.75 s,
 * 2.5 s, 3.5 s, 5 s of the block's scale), zeros of both signs, NaN, infinities, the amax
 * floor's edge and a partial last block. */
static void test_fp4_vector(void) {
    static const int exps[] = {-160, -149, -140, -127, -126, -100, -10, 0, 3, 60, 100, 120, 126, 127};
    uint64_t r = 0x2545f4914f6cdd1dull;
    int diff = 0, blocks = 0;
    for (int t = 0; t < 600; t++) {
        float x[72], y[72];
        const int n = t % 7 == 3 ? 72 : t % 5 == 1 ? 40 : 64;
        const int e = exps[t % 14];
        for (int i = 0; i < n; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            const double u = (double)(r >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
            const int k = (int)(r % 23);
            float v = (float)ldexp(u * 6.0, e);
            if (k == 0) v = (float)ldexp((r & 64 ? -1 : 1) * (0.25 + 0.5 * (double)(r >> 7 & 3)), e); /* 0.25 .. 1.75 */
            if (k == 1) v = (float)ldexp((r & 64 ? -2.5 : 2.5) + (r & 128 ? 1.0 : 0.0), e);        /* 2.5, 3.5 */
            if (k == 2) v = (float)ldexp(r & 64 ? -5.0 : 5.0, e);
            if (k == 3) v = r & 64 ? -0.0f : 0.0f;
            if (k == 4 && t % 3 == 0) v = NAN;
            if (k == 5 && t % 4 == 0) v = r & 64 ? -INFINITY : INFINITY;
            if (k == 6) v = (float)ldexp(u, -149 + (int)(r >> 20 & 15)); /* subnormals */
            x[i] = y[i] = v;
        }
        if (t % 11 == 0) /* every value at the amax floor's reach */
            for (int i = 0; i < n; i++) x[i] = y[i] = (float)ldexp((double)(i % 13) - 6.0, -126);
        dsv4_fid_fp4_rt(x, n);
        dsv4_fid_fp4_rt_ref(y, n);
        diff += memcmp(x, y, sizeof(float) * (size_t)n) != 0;
        blocks += (n + 31) / 32;
    }
    CHECK_MSG(diff == 0, "F3's vector form: %d of 600 rows differ from the portable loop's bits", diff);
    printf("F3 vector form against the portable loop: %d blocks, bit for bit\n", blocks);
}

/* The rotation's vector form (dsv4_fid_hadamard where the CPU has AVX-512) against the portable
 * butterflies (dsv4_fid_hadamard_ref), bit for bit: every width from 1 to 4096 (the vector form
 * from 16), random values at scales from the subnormals to near overflow (sums past FLT_MAX:
 * infinities, then inf - inf), signed zeros, NaN of two payloads, infinities. */
static void test_hadamard_vector(void) {
    static const int exps[] = {-149, -140, -126, -60, 0, 20, 124, 127};
    uint64_t r = 0x9e3779b97f4a7c15ull;
    int diff = 0, rows = 0;
    static float x[4096], y[4096];
    for (int n = 1; n <= 4096; n *= 2)
        for (int t = 0; t < (n <= 256 ? 24 : 4); t++) {
            const int e = exps[t % 8];
            for (int i = 0; i < n; i++) {
                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                const double u = (double)(r >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
                float v = (float)ldexp(u, e);
                const int k = (int)(r % 41);
                if (k == 0) v = r & 64 ? -0.0f : 0.0f;
                if (k == 1 && t % 3 == 1) v = r & 64 ? NAN : -NAN;
                if (k == 2 && t % 4 == 2) v = r & 64 ? -INFINITY : INFINITY;
                x[i] = y[i] = v;
            }
            dsv4_fid_hadamard(x, n);
            dsv4_fid_hadamard_ref(y, n);
            diff += memcmp(x, y, sizeof(float) * (size_t)n) != 0;
            rows++;
        }
    CHECK_MSG(diff == 0, "the rotation's vector form: %d of %d rows differ from the portable butterflies' bits", diff,
              rows);
}

int main(void) {
    test_hadamard_vector();
    test_fp4_vector();
    test_hadamard_cancels();
    test_e4m3();
    test_e2m1();
    test_scale();
    test_fp8_blocks();
    test_fp4();
    test_fp4_top();
    test_fp8_top();
    test_bf16();
    test_kv_row();
    test_hadamard();
    return test_report();
}
