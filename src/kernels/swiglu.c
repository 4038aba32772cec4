/* swiglu.c — the MoE's clamped SwiGLU over rows (contract: swiglu.h).
 *
 * The AVX-512 expf. glibc's expf (2.27 on) works in double: z = x·32/ln2 split as
 * k + r (k an integer, |r| ≤ 1/2) by adding and subtracting 1.5·2^52, 2^(k/32) from a
 * 32-entry table with k/32's integer part added to the exponent bits, 2^(r/32) from a
 * cubic, one product, one rounding to float. The x86-64 libm picks its FMA build on any
 * CPU with FMA and AVX2, and in that build GCC fused the multiply-adds, the split's
 * included (z + shift and z - kd each use x·(32/ln2) unrounded). Here the same operations
 * in the same order on 8 doubles (one fma or mul or add per scalar one), so each lane
 * rounds exactly as the scalar code does. Inputs with |x| ≥ 88 (or NaN, inf) take glibc's
 * special cases there: those lanes call libm's expf itself.
 *
 * The table is 2^(i/32) rounded to nearest, minus i << 47 (the exponent bits that k's
 * integer part adds back); the coefficients are glibc's minimax cubic, scaled by 32^-j.
 */
#include "kernels/swiglu.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu.h"

void dsv4_swiglu_rows(const float *g, const float *u, const float *w, int n, int I, float limit, float *h) {
    for (int r = 0; r < n; r++) {
        const float wr = w ? w[r] : 1.0f;
        for (int i = 0; i < I; i++) {
            const int64_t at = (int64_t)r * I + i;
            float gv = g[at], uv = u[at];
            if (limit > 0.0f) {
                if (gv > limit) gv = limit;
                if (uv > limit) uv = limit;
                if (uv < -limit) uv = -limit;
            }
            /* silu; for gv << 0 expf overflows to +inf and the quotient is -0 */
            h[at] = wr * (gv / (1.0f + expf(-gv))) * uv;
        }
    }
}

/* expf's table: entry i holds the bits of 2^(i/32) rounded, less i << 47, so adding k << 47
 * (k = the rounded x * 32 / ln2) gives 2^(k/32); the math's, recomputed by
 * tests/kernels/exp_tables_math.py */
const uint64_t dsv4_expf_tab[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};

#if defined(DSV4_HAVE_AVX512) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels/attn_x512.h"
#include "util/hot.h"

typedef struct {
    __m512d t0, t1, t2, t3; /* the table, entries 8j..8j+7 */
} expf_tab;

X512_INLINE expf_tab expf_tab_load(void) {
    expf_tab t;
    t.t0 = _mm512_loadu_pd((const double *)dsv4_expf_tab);
    t.t1 = _mm512_loadu_pd((const double *)dsv4_expf_tab + 8);
    t.t2 = _mm512_loadu_pd((const double *)dsv4_expf_tab + 16);
    t.t3 = _mm512_loadu_pd((const double *)dsv4_expf_tab + 24);
    return t;
}

/* expf of 8 floats on the main path (|x| < 88); other lanes' results are garbage. */
X512_INLINE __m256 expf8_main(__m256 x, const expf_tab *tb) {
    const __m512d invln2n = _mm512_set1_pd(0x1.71547652b82fep+5), shift = _mm512_set1_pd(0x1.8p+52);
    const __m512d c0 = _mm512_set1_pd(0x1.c6af84b912394p-20), c1 = _mm512_set1_pd(0x1.ebfce50fac4f3p-13);
    const __m512d c2 = _mm512_set1_pd(0x1.62e42ff0c52d6p-6), one = _mm512_set1_pd(1.0);
    const __m512d xd = _mm512_cvtps_pd(x);
    const __m512d kds = _mm512_fmadd_pd(invln2n, xd, shift); /* k + shift, rounded */
    const __m512i ki = _mm512_castpd_si512(kds);
    const __m512d kd = _mm512_sub_pd(kds, shift);
    const __m512d r = _mm512_fmsub_pd(invln2n, xd, kd);      /* x·32/ln2 - k */
    /* tab[k % 32]: entries 0-15 and 16-31 by two 2-register permutes, bit 4 picks */
    const __m512d lo = _mm512_permutex2var_pd(tb->t0, ki, tb->t1);
    const __m512d hi = _mm512_permutex2var_pd(tb->t2, ki, tb->t3);
    const __m512d t = _mm512_mask_blend_pd(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(_mm512_castpd_si512(t), _mm512_slli_epi64(ki, 47)));
    const __m512d z = _mm512_fmadd_pd(c0, r, c1);
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(c2, r, one);
    y = _mm512_fmadd_pd(z, r2, y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

/* expf of 16 floats: the main path, then libm for the lanes with |x| ≥ 88, inf or NaN
 * (glibc's test: the top 12 bits of |x| at or past 88.0f's), except -inf: 0 in the vector.
 * -inf is common (the sampler's banned ids: a JSON constraint bans nearly a whole row), and
 * libm one lane at a time costs ~20 ns each. */
X512_INLINE __m512 expf16(__m512 x, const expf_tab *tb) {
    const __m256 lo = expf8_main(_mm512_castps512_ps256(x), tb);
    const __m256 hi = expf8_main(_mm512_extractf32x8_ps(x, 1), tb);
    __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
    __mmask16 sp = _mm512_cmpge_epu32_mask(top, _mm512_set1_epi32(0x42b));
    if (sp) {
        const __mmask16 ninf = _mm512_cmpeq_epi32_mask(_mm512_castps_si512(x), _mm512_set1_epi32((int)0xff800000u));
        y = _mm512_mask_mov_ps(y, ninf, _mm512_setzero_ps());
        sp &= (__mmask16)~ninf;
    }
    if (sp) {
        float xs[16], ys[16];
        _mm512_storeu_ps(xs, x);
        _mm512_storeu_ps(ys, y);
        for (int l = 0; l < 16; l++)
            if (sp >> l & 1) ys[l] = expf(xs[l]);
        y = _mm512_loadu_ps(ys);
    }
    return y;
}

DSV4_HOT_AT(expf_rows_x512, 0x6e0)
X512_FN static void expf_rows_x512(const float *x, long n, float *y) {
    const expf_tab tb = expf_tab_load();
    for (long i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, expf16(_mm512_maskz_loadu_ps(m, x + i), &tb));
    }
}

DSV4_HOT_AT(swiglu_rows_x512, 0xcb0)
X512_FN static void swiglu_rows_x512(const float *g, const float *u, const float *w, int n, int I, float limit,
                                     float *h) {
    const expf_tab tb = expf_tab_load();
    const __m512 lim = _mm512_set1_ps(limit), nlim = _mm512_set1_ps(-limit), one = _mm512_set1_ps(1.0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (int r = 0; r < n; r++) {
        const __m512 wr = _mm512_set1_ps(w ? w[r] : 1.0f);
        const int64_t base = (int64_t)r * I;
        for (int i = 0; i < I; i += 16) {
            const __mmask16 m = I - i >= 16 ? 0xffff : (__mmask16)((1u << (I - i)) - 1);
            __m512 gv = _mm512_maskz_loadu_ps(m, g + base + i);
            __m512 uv = _mm512_maskz_loadu_ps(m, u + base + i);
            if (limit > 0.0f) { /* the scalar tests: NaN compares false and stays */
                gv = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(gv, lim, _CMP_GT_OQ), gv, lim);
                uv = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(uv, lim, _CMP_GT_OQ), uv, lim);
                uv = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(uv, nlim, _CMP_LT_OQ), uv, nlim);
            }
            const __m512 e = expf16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(gv), sign)), &tb);
            const __m512 silu = _mm512_div_ps(gv, _mm512_add_ps(one, e));
            _mm512_mask_storeu_ps(h + base + i, m, _mm512_mul_ps(_mm512_mul_ps(wr, silu), uv));
        }
    }
}

/* libgcc's cached flags (OS support included), not dsv4_cpu_simd: these are asked per
 * call, and cpuid traps to the hypervisor in a VM (~several us each on the Zen 5 VM) */
static int have_x512(void) { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"); }
dsv4_swiglu_fn dsv4_swiglu_x512(void) { return have_x512() ? swiglu_rows_x512 : NULL; }
dsv4_expf_rows_fn dsv4_expf_x512(void) { return have_x512() ? expf_rows_x512 : NULL; }

#else
dsv4_swiglu_fn dsv4_swiglu_x512(void) { return NULL; }
dsv4_expf_rows_fn dsv4_expf_x512(void) { return NULL; }
#endif

/* Inputs where glibc's FMA expf differs from its non-FMA build (the only two of all 2^32)
 * or from expf rounded from double exp (bench/expf_exhaustive --hard): another libm's expf
 * is unlikely to match the FMA build on all of them. */
static const uint32_t expf_hard[] = {
    0x37ff7f01u, /* cr */
    0x38ad9e29u, /* cr */
    0x38efdc7du, /* cr */
    0x39312c2bu, /* cr */
    0x39776887u, /* cr */
    0x39bdcf34u, /* cr */
    0x39fdd844u, /* cr */
    0x3a3e125bu, /* cr */
    0x4202422fu, /* fma */
    0xb8ca127eu, /* cr */
    0xb921cb32u, /* cr */
    0xb964be63u, /* cr */
    0xb9a56aaeu, /* cr */
    0xb9e5a8e0u, /* cr */
    0xba260775u, /* cr */
    0xba66e005u, /* cr */
    0xbaa7083cu, /* cr */
    0xc27c65d9u, /* fma */
};

int dsv4_expf_x512_agrees(void) {
    const dsv4_expf_rows_fn fn = dsv4_expf_x512();
    if (!fn) return 0;
    enum { SPREAD = 4096, HARD = (int)(sizeof expf_hard / sizeof expf_hard[0]), N = SPREAD + HARD };
    float x[N], y[N];
    /* every 2^20th bit pattern, offset so the mantissas vary: both signs, every binade */
    for (int i = 0; i < SPREAD; i++) {
        const uint32_t b = (uint32_t)i * 0x100000u + (uint32_t)i * 0x9e37u;
        memcpy(&x[i], &b, sizeof b);
    }
    memcpy(x + SPREAD, expf_hard, sizeof expf_hard);
    fn(x, N, y);
    for (int i = 0; i < N; i++) {
        const float e = expf(x[i]);
        if (memcmp(&e, &y[i], sizeof e) != 0) return 0;
    }
    return 1;
}

dsv4_swiglu_fn dsv4_swiglu_at(int simd, int expf_agrees) {
    const dsv4_swiglu_fn v = dsv4_swiglu_x512();
    if (simd >= DSV4_SIMD_AVX512 && expf_agrees && v) return v;
    return dsv4_swiglu_rows;
}

dsv4_expf_rows_fn dsv4_expf_at(int simd, int expf_agrees) {
    return simd >= DSV4_SIMD_AVX512 && expf_agrees ? dsv4_expf_x512() : NULL;
}
