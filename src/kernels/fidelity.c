/* fidelity.c — scalar, exact roundings of fidelity mode P3 (spec/model.md §6).
 *
 * All the arithmetic is exact except the final rounding to the target format: dividing
 * and multiplying by a power-of-two scale is exact (results far from the float limits),
 * and the RNE step works on an integer significand with nearbyintf in the default
 * rounding mode (round-half-even).
 */
#include "kernels/fidelity.h"

#include <math.h>

#include "util/hot.h"

/* Rounds |y| to the nearest multiple of the step of its binade (2^(e - mbits) for
 * |y| in [2^e, 2^(e+1)), e >= emin; 2^(emin - mbits) below 2^emin: the subnormals), ties
 * to even, then saturates at vmax. */
static float round_minifloat(float y, int emin, int mbits, float vmax) {
    if (y != y) return 0.0f; /* NaN never reaches here from a finite row; stay NaN-free */
    float a = fabsf(y);
    if (a > vmax) a = vmax;
    int e;
    (void)frexpf(a, &e);   /* a = m 2^e, m in [0.5, 1): binade exponent e - 1 */
    e -= 1;
    if (a == 0.0f || e < emin) e = emin;
    const float step = ldexpf(1.0f, e - mbits);
    float q = nearbyintf(a / step) * step; /* may carry into the next binade: still exact */
    if (q > vmax) q = vmax;
    return signbit(y) ? -q : q; /* -0 stays -0: rounding a rounded value changes no bit */
}

float dsv4_fid_e4m3_round(float y) { return round_minifloat(y, -6, 3, 448.0f); }
float dsv4_fid_e2m1_round(float y) { return round_minifloat(y, 0, 1, 6.0f); }

float dsv4_fid_pow2_scale(float amax, float inv_max) {
    const float v = amax * inv_max; /* one FP32 multiply, as the official kernel */
    if (v != v) return v;
    if (!(v <= 0x1p126f)) return 0x1p127f; /* ue8m0's largest: only an infinite amax gets here */
    int e;
    const float m = frexpf(v, &e); /* v = m 2^e, m in [0.5, 1): ceil(log2 v) = e, or e-1 at m = 0.5 */
    return ldexpf(1.0f, m == 0.5f ? e - 1 : e);
}

/* One block: floor amax, scale, clamp, round, unscale, and a product past FLT_MAX saturated at
 * sat (the format's largest finite value times a power of two). */
static void block_rt(float *x, int n, float floor_, float vmax, float inv_max, float (*rnd)(float), float sat) {
    float amax = floor_;
    for (int i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (a > amax) amax = a; /* a NaN compares false: ignored */
    }
    const float s = dsv4_fid_pow2_scale(amax, inv_max);
    for (int i = 0; i < n; i++) {
        float v = x[i] / s;
        v = v > vmax ? vmax : v < -vmax ? -vmax : v;
        x[i] = rnd(v) * s;
        if (fabsf(x[i]) > sat) x[i] = copysignf(sat, x[i]); /* a NaN never gets here: rnd made it 0 */
    }
}

void dsv4_fid_fp8_rt(float *x, int64_t n, int block) {
    for (int64_t b0 = 0; b0 < n; b0 += block) {
        const int m = n - b0 < block ? (int)(n - b0) : block;
        block_rt(x + b0, m, DSV4_FID_AMAX_FLOOR_FP8, 448.0f, 1.0f / 448.0f, dsv4_fid_e4m3_round, DSV4_FID_FP8_MAX);
    }
}

void dsv4_fid_fp4_rt_ref(float *x, int64_t n) {
    for (int64_t b0 = 0; b0 < n; b0 += 32) {
        const int m = n - b0 < 32 ? (int)(n - b0) : 32;
        block_rt(x + b0, m, DSV4_FID_AMAX_FLOOR_FP4, 6.0f, 1.0f / 6.0f, dsv4_fid_e2m1_round, DSV4_FID_FP4_MAX);
    }
}

#if defined(DSV4_HAVE_AVX512) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define FID_X512 __attribute__((target("avx512f,avx512dq")))

/* block_rt's F3 steps on 16 values (s the block's scale): the same IEEE operations, so the
 * same bits. The clamp by compares (a NaN stays NaN, as the ternaries leave it); the e2m1
 * round as round_minifloat: the binade's exponent by vgetexpps (floor(log2 a), -inf at 0)
 * raised to emin 0, the step 2^(e - 1) by vscalefps, a / step rounded half to even
 * (vrndscaleps, as nearbyintf in the default mode) times the step, at most 6, the input's
 * sign (a NaN gives +0); then times s, saturated past sat with the sign. */
FID_X512 static __m512 fp4_rt16(__m512 x, __m512 s) {
    const __m512 six = _mm512_set1_ps(6.0f), msix = _mm512_set1_ps(-6.0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512 v = _mm512_div_ps(x, s);
    v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, six, _CMP_GT_OQ), six);
    v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, msix, _CMP_LT_OQ), msix);
    const __m512 a = _mm512_abs_ps(v); /* at most 6, or NaN */
    const __m512 e = _mm512_max_ps(_mm512_getexp_ps(a), _mm512_setzero_ps());
    const __m512 step = _mm512_scalef_ps(_mm512_set1_ps(1.0f), _mm512_sub_ps(e, _mm512_set1_ps(1.0f)));
    __m512 q = _mm512_mul_ps(
        _mm512_roundscale_ps(_mm512_div_ps(a, step), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), step);
    q = _mm512_min_ps(q, six);
    q = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(q), _mm512_and_si512(_mm512_castps_si512(v), sign)));
    q = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), q); /* NaN: +0 */
    __m512 r = _mm512_mul_ps(q, s);
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(r), _mm512_set1_ps(DSV4_FID_FP4_MAX), _CMP_GT_OQ);
    const __m512i satv = _mm512_or_si512(_mm512_castps_si512(_mm512_set1_ps(DSV4_FID_FP4_MAX)),
                                         _mm512_and_si512(_mm512_castps_si512(r), sign));
    return _mm512_mask_mov_ps(r, big, _mm512_castsi512_ps(satv));
}

/* Whole blocks of 32 (the amax with NaN ignored, as block_rt: vmaxps keeps its second
 * operand where the first is NaN); a partial last block by block_rt. */
FID_X512 static void fp4_rt_x512(float *x, int64_t n) {
    int64_t b0 = 0;
    for (; b0 + 32 <= n; b0 += 32) {
        const __m512 x0 = _mm512_loadu_ps(x + b0), x1 = _mm512_loadu_ps(x + b0 + 16);
        __m512 m = _mm512_set1_ps(DSV4_FID_AMAX_FLOOR_FP4);
        m = _mm512_max_ps(_mm512_abs_ps(x0), m);
        m = _mm512_max_ps(_mm512_abs_ps(x1), m);
        const __m512 s = _mm512_set1_ps(dsv4_fid_pow2_scale(_mm512_reduce_max_ps(m), 1.0f / 6.0f));
        _mm512_storeu_ps(x + b0, fp4_rt16(x0, s));
        _mm512_storeu_ps(x + b0 + 16, fp4_rt16(x1, s));
    }
    if (b0 < n) dsv4_fid_fp4_rt_ref(x + b0, n - b0);
}

/* libgcc's cached flags, as exp_f64.c (cpuid traps in a VM) */
static int fid_have_x512(void) { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"); }

void dsv4_fid_fp4_rt(float *x, int64_t n) {
    if (fid_have_x512()) fp4_rt_x512(x, n);
    else dsv4_fid_fp4_rt_ref(x, n);
}

/* v with each lane's value moved to lane ^ len (len 1, 2, 4, 8) */
FID_X512 static __m512 hd_swap(__m512 v, int len) {
    switch (len) {
    case 1: return _mm512_shuffle_ps(v, v, 0xB1);
    case 2: return _mm512_shuffle_ps(v, v, 0x4E);
    case 4: return _mm512_shuffle_f32x4(v, v, 0xB1);
    default: return _mm512_shuffle_f32x4(v, v, 0x4E);
    }
}

/* dsv4_fid_hadamard_ref's butterflies on 16-value vectors, each value's the same IEEE
 * operation on the same operands in the same order (a + b, a - b with a the lower index's),
 * so the same bits: stages len < 16 within a vector (the partner by a shuffle; the upper
 * lanes of each pair take partner - self, the lower self + partner), the others across
 * vectors, then the scale. n a power of two, 16 .. 4096. */
FID_X512 static void hadamard_x512(float *x, int n) {
    __m512 v[256];
    const int nv = n / 16;
    for (int k = 0; k < nv; k++) v[k] = _mm512_loadu_ps(x + 16 * k);
    for (int len = 1; len < 16; len *= 2) {
        __mmask16 up = 0; /* lanes with bit len set: the pair's upper value */
        for (int l = 0; l < 16; l++) up |= (__mmask16)((l & len ? 1u : 0u) << l);
        for (int k = 0; k < nv; k++) {
            const __m512 p = hd_swap(v[k], len);
            v[k] = _mm512_mask_sub_ps(_mm512_add_ps(v[k], p), up, p, v[k]);
        }
    }
    for (int m = 1; m < nv; m *= 2)
        for (int k0 = 0; k0 < nv; k0 += 2 * m)
            for (int k = k0; k < k0 + m; k++) {
                const __m512 a = v[k], b = v[k + m];
                v[k] = _mm512_add_ps(a, b);
                v[k + m] = _mm512_sub_ps(a, b);
            }
    const __m512 s = _mm512_set1_ps((float)(1.0 / sqrt((double)n)));
    for (int k = 0; k < nv; k++) _mm512_storeu_ps(x + 16 * k, _mm512_mul_ps(v[k], s));
}

void dsv4_fid_hadamard(float *x, int n) {
    if (n >= 16 && n <= 4096 && fid_have_x512()) hadamard_x512(x, n);
    else dsv4_fid_hadamard_ref(x, n);
}
#else
void dsv4_fid_fp4_rt(float *x, int64_t n) { dsv4_fid_fp4_rt_ref(x, n); }
void dsv4_fid_hadamard(float *x, int n) { dsv4_fid_hadamard_ref(x, n); }
#endif

DSV4_HOT_AT(dsv4_fid_bf16, 0xbf0)
void dsv4_fid_bf16(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = dsv4_fid_bf16_1(x[i]);
}

void dsv4_fid_kv_row(float *x, int hd, int rd) {
    dsv4_fid_fp8_rt(x, hd - rd, 64);
    dsv4_fid_bf16(x + (hd - rd), rd);
}

void dsv4_fid_hadamard_ref(float *x, int n) {
    for (int len = 1; len < n; len *= 2)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                const float a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
    const float s = (float)(1.0 / sqrt((double)n));
    for (int i = 0; i < n; i++) x[i] *= s;
}

void dsv4_fid_index_row(float *x, int n) {
    dsv4_fid_hadamard(x, n);
    dsv4_fid_fp4_rt(x, n);
}
