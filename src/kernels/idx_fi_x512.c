/* idx_fi_x512.c — the integer pass on FP4 keys at the AVX-512 levels (idx_approx_impl.h):
 * the loop of idx_approx_fi.inc compiled twice (VNNI for avx512vbmi, BW for avx512) and the
 * query's AVX-512 encoder. Each function carries its own target attribute.
 */
#include "kernels/idx_approx_impl.h"

#ifdef HAVE_AVX512_APPROX
/* ---- the SIMD levels of dsv4_idx_approx_fp4_int (see fi_score_ref: the same operations) */
#define FI_UP (_MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)

/* Scale bytes sb (16 keys) to s_k / 4 = 2^(sb - 129) as floats, NaN for 255 (fi_kf). */
AP_INLINE __m512 fi_kf_x512(__m512i sb) {
    const __m512i norm = _mm512_slli_epi32(_mm512_sub_epi32(sb, _mm512_set1_epi32(2)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(1), _mm512_add_epi32(sb, _mm512_set1_epi32(20)));
    __m512i bits = _mm512_mask_blend_epi32(_mm512_cmpge_epi32_mask(sb, _mm512_set1_epi32(3)), sub, norm);
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(sb, _mm512_set1_epi32(255)),
                                 _mm512_set1_epi32(0x7fc00000));
    return _mm512_castsi512_ps(bits);
}

/* 8 scale bytes (in int32 lanes) to 2^(2 sb - 256) as doubles, NaN for 255 (fi_kf2). */
AP_INLINE __m512d fi_kf2_x512(__m256i sb) {
    const __m512i e = _mm512_cvtepu32_epi64(sb);
    __m512i bits = _mm512_slli_epi64(_mm512_add_epi64(_mm512_add_epi64(e, e), _mm512_set1_epi64(767)), 52);
    bits = _mm512_mask_mov_epi64(bits, _mm512_cmpeq_epi64_mask(e, _mm512_set1_epi64(255)),
                                 _mm512_set1_epi64(0x7ff8000000000000ll));
    return _mm512_castsi512_pd(bits);
}

#define FI_RUN_NAME fi_run_vnni
#define FI_RUN_DISPATCH dsv4_idx_fi_x512_vnni
#define FI_RUN_TARGET "avx512f,avx512dq,avx512vl,avx512bw,avx512vnni,fma"
#define FI_RUN_VNNI 1
#include "kernels/idx_approx_fi.inc"
#undef FI_RUN_NAME
#undef FI_RUN_DISPATCH
#undef FI_RUN_TARGET
#undef FI_RUN_VNNI
#define FI_RUN_NAME fi_run_bw
#define FI_RUN_DISPATCH dsv4_idx_fi_x512_bw
#define FI_RUN_TARGET "avx512f,avx512dq,avx512vl,avx512bw,fma"
#define FI_RUN_VNNI 0
#include "kernels/idx_approx_fi.inc"
#undef FI_RUN_NAME
#undef FI_RUN_DISPATCH
#undef FI_RUN_TARGET
#undef FI_RUN_VNNI

/* fi_encode vectorized, at the AVX-512 levels (F, BW: the same function for `avx512` and
 * `avx512vbmi`) and at AVX2: the same encoding byte for byte (the tests compare the buffers
 * and the levels' scores). A head's block is checked and converted 16 (8) values at a time,
 * its codes put in slot order without a byte permute: slot t < 4 of a block holds its even
 * values, t >= 4 its odd ones (fi_value), so the int32 codes are split into evens and odds
 * (vpermt2d; AVX2: vpermd within 8 values, then the saturating packs, exact for |c| <= 12,
 * interleave 128-bit lanes into that order) and narrowed to bytes; then 16 heads' slot rows
 * are transposed as dwords into qt. The scalar loop cost ~7.8 us a 16-head group at these
 * levels (session 46), against ~0.65 us for the VBMI byte-permute form this replaces. */
#define FE_FN __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma")))

FE_FN int dsv4_idx_fi_encode_x512(const float *qI, const float *wI, int nI, int dI, fi_vec *vec) {
    const int nb = dI / 32, G = (nI + 15) / 16;
    _Alignas(64) int8_t hb[16][128]; /* 16 heads' codes in slot order (slot s: bytes 4 s .. 4 s + 3) */
    memset(vec, 0, sizeof *vec * (size_t)G);
    memset(hb, 0, sizeof hb);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)), twelve = _mm512_set1_ps(12.0f);
    for (int g = 0; g < G; g++) {
        fi_vec *e = vec + g;
        const int nh = nI - 16 * g < 16 ? nI - 16 * g : 16;
        for (int l = 0; l < nh; l++) {
            const float *x = qI + (size_t)(16 * g + l) * dI;
            for (int b = 0; b < nb; b++) {
                const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
                float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(x0, absm), _mm512_and_ps(x1, absm)));
                if (!fi_amax_ok(&amax)) return 0;
                const float s = fi_scale(amax);
                const __m512 inv = _mm512_set1_ps(2.0f / s), sv = _mm512_set1_ps(s), half = _mm512_set1_ps(0.5f);
                const __m512 c0 = _mm512_mul_ps(x0, inv), c1 = _mm512_mul_ps(x1, inv);
                const __m512i i0 = _mm512_cvtps_epi32(c0), i1 = _mm512_cvtps_epi32(c1);
                const __m512 f0 = _mm512_cvtepi32_ps(i0), f1 = _mm512_cvtepi32_ps(i1);
                /* c an integer of magnitude at most 12, and c s / 2 the value itself */
                __mmask16 ok0 = _mm512_cmp_ps_mask(f0, c0, _CMP_EQ_OQ) &
                                _mm512_cmp_ps_mask(_mm512_and_ps(c0, absm), twelve, _CMP_LE_OQ) &
                                _mm512_cmp_ps_mask(_mm512_mul_ps(_mm512_mul_ps(f0, sv), half), x0, _CMP_EQ_OQ);
                __mmask16 ok1 = _mm512_cmp_ps_mask(f1, c1, _CMP_EQ_OQ) &
                                _mm512_cmp_ps_mask(_mm512_and_ps(c1, absm), twelve, _CMP_LE_OQ) &
                                _mm512_cmp_ps_mask(_mm512_mul_ps(_mm512_mul_ps(f1, sv), half), x1, _CMP_EQ_OQ);
                if ((ok0 & ok1) != 0xFFFF) return 0;
                _mm_store_si128((__m128i *)(hb[l] + 32 * b), _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(i0, ev, i1)));
                _mm_store_si128((__m128i *)(hb[l] + 32 * b + 16),
                                _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(i0, od, i1)));
                e->init[b][l] = -12 * _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
                e->qf[b][l] = s;
            }
        }
        for (int h0 = 0; h0 < 8 * nb; h0 += 16) { /* slots h0 .. h0 + 15 of the 16 heads */
            __m512 r[16];
            for (int l = 0; l < 16; l++) r[l] = _mm512_load_ps((const float *)(hb[l] + 4 * h0));
            transpose16(r);
            for (int s = h0; s < h0 + 16 && s < 8 * nb; s++) _mm512_store_ps((float *)e->qt[s], r[s - h0]);
        }
        _mm512_store_ps(e->w, _mm512_maskz_loadu_ps((__mmask16)((1u << nh) - 1u), wI + 16 * g));
        if (g + 1 < G) memset(hb, 0, sizeof hb); /* a last group's heads past nI: zero codes */
    }
    return 1;
}

#undef FI_UP
#endif
