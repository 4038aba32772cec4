/* idx_approx_impl.h — what the approximate indexer pass's files share (contract: idx_approx.h):
 * idx_approx.c (the bound, the portable level, the dispatch), idx_approx_x512.c (the F32 / BF16
 * kernels at AVX-512), and the FP4 keys' integer pass, idx_fi.c (its portable level and entry
 * points), idx_fi_x512.c (AVX-512 BW and VNNI, the AVX-512 query encoder) and idx_fi_avx2.c
 * (AVX2), and the AVX2 F32 / BF16 kernels, idx_approx_avx2.c. Internal to src/kernels.
 */
#ifndef DSV4_KERNELS_IDX_APPROX_IMPL_H
#define DSV4_KERNELS_IDX_APPROX_IMPL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/codec.h"
#include "kernels/fidelity.h"
#include "kernels/idx_approx.h"
#include "kernels/kv_rows.h"
#include "util/lines.h"
#include "util/prefetch.h"

/* The factor eps of dsv4_idx_approx_query's scale (scale = eps Q rounded up; idx_approx.c). */
double dsv4_idx_approx_eps(int nI, int dI);

/* v as a float at or above it */
static inline float idx_up(double v) {
    float f = (float)v;
    return (double)f < v ? nextafterf(f, INFINITY) : f;
}

/* ---- FP4 keys scored from their bytes (dsv4_idx_approx_fp4_int) ------------------------
 * Under F3 a 32-value block of a query head and of a key are c_i s_q / 2 and c'_i s_k / 2
 * with c, c' integers in [-12, 12] (e2m1 values times 2) and s_q, s_k powers of two, so the
 * block's dot is the integer I_b = sum c_i c'_i (|I_b| <= 4608) times s_q s_k / 4, exactly.
 * A head's dot is then d = sum over its blocks of (I_b s_q) (s_k / 4): I_b s_q is exact (a
 * 13-bit integer times a normal power of two at most 2^100), the products by s_k / 4 and
 * their sum are a float inner product of nb = dI / 32 terms (the first a multiply, then
 * fused multiply-adds, blocks ascending), whose error is at most gamma_nb times sum_b |I_b
 * s_q s_k / 4| <= gamma_nb sum_i |q_i K_i| <= gamma_dI ||q|| ||K||: within the bound's
 * allowance for a head dot (idx_approx.h), and gradual underflow adds at most 2^-150 per
 * rounding, 2 nb of them against the 2 dI the bound's add term allows. The rest (relu, the
 * weights, the head sum) is the few-query kernel's. Both levels below compute exactly the
 * same float operations in the same order (the heads of a query in 16 lanes, group g of 16
 * heads added by a fused multiply-add after the first group's multiply, then the lanes by
 * hsum16's tree), so their scores and norms are the same bits.
 *
 * The query is encoded once (dsv4_idx_fp4q_encode; the engine once a row, the one-call form
 * dsv4_idx_approx_fp4_int once a call): each head's block gets F3's scale of its amax
 * and every value must be c s / 2 exactly with an integer |c| <= 12, else nothing is
 * scored (the caller unpacks the keys instead). Key values c' come from their nibbles by a
 * table, offset by 12 (unsigned bytes for vpdpbusd / vpmaddubsw; the offset's 12 sum c is
 * taken off in advance, fi_vec.init). Codes are held in the order the SIMD key expansion
 * leaves them: a key's nibble bytes widened by one shuffle each for the low and the high
 * nibbles, so 4-byte slot t of block b holds values 32 b + 8 (t % 4) + 2 i + t / 4 (i < 4).
 * The block dot is an integer, so how a level sums it does not matter: vpdpbusd (VNNI),
 * vpmaddubsw pairs (|k c| <= 24 x 12: no saturation) summed in int16 over a block's 8 slots
 * (|sum| <= 16 x 288 = 4608) then vpmaddwd (AVX-512 BW, AVX2), or the portable loop. */

#define FI_NB 4              /* blocks of 32 values a head at most (dI <= 128) */
#define FI_V 4               /* head vectors of 16 (queries x ceil(nI / 16)) a pass at most */
#define FI_SLOTS (8 * FI_NB) /* 4-byte slots a head */

/* 16 heads of one query (group g: heads 16 g + l), the unit of an encoding */
typedef struct {
    _Alignas(64) int8_t qt[FI_SLOTS][64]; /* slot, lane l: 4 codes */
    _Alignas(64) int32_t init[FI_NB][16]; /* -12 x the block's codes summed (the keys' offset) */
    _Alignas(64) float qf[FI_NB][16];     /* the block's scale s_q; 0 past nI */
    _Alignas(64) float w[16];             /* the heads' weights; 0 past nI */
} fi_vec;
_Static_assert(sizeof(fi_vec) == DSV4_IDX_FP4Q_VEC_BYTES, "DSV4_IDX_FP4Q_VEC_BYTES is fi_vec's size");

/* The value slot s's byte i holds. */
static inline int fi_value(int s, int i) { return 32 * (s / 8) + 8 * (s % 4) + 2 * i + (s % 8) / 4; }

static inline int fi_shape(int nI, int dI) { return dI >= 32 && dI % 32 == 0 && dI <= 32 * FI_NB && nI >= 1 && nI <= 16 * FI_V; }

/* A key's block scale over 4, 2^(sb - 129), and its square over... the square of a value's
 * scale s_k / 2, 2^(2 sb - 256), in double; NaN for byte 255 (as dsv4_e8m0_to_f32). */
static inline float fi_kf(uint8_t sb) {
    return sb == 255 ? NAN : dsv4_bits_to_f32(sb >= 3 ? (uint32_t)(sb - 2) << 23 : 1u << (sb + 20));
}
static inline double fi_kf2(uint8_t sb) {
    const uint64_t u = sb == 255 ? 0x7ff8000000000000ull : (uint64_t)(2 * sb + 767) << 52;
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* The norm from the blocks' squared codes, as every level computes it: in double, blocks
 * ascending, the root rounded up to float. */
static inline float fi_norm(const int32_t *c2, const uint8_t *sb, int nb) {
    double n2 = 0.0;
    for (int b = 0; b < nb; b++) n2 = b ? n2 + (double)c2[b] * fi_kf2(sb[b]) : (double)c2[b] * fi_kf2(sb[b]);
    return idx_up(sqrt(n2));
}

/* F3's scale of a block, 2^ceil(log2(amax * fp32(1/6))), for amax in [6 x 2^-126, 2^100]
 * (the product is then normal): dsv4_fid_pow2_scale by the exponent bits. */
static inline float fi_scale(float amax) {
    const uint32_t u = dsv4_f32_to_bits(amax * (1.0f / 6.0f));
    return dsv4_bits_to_f32((u & 0x7f800000u) + ((u & 0x7fffffu) ? 0x800000u : 0u));
}

/* A block's amax floored as fi_encode floors it; 0 (refuse) past 2^100 or NaN. A NaN the max
 * instructions lose is caught by the value checks (its code is not an integer). */
static inline int fi_amax_ok(float *amax) {
    *amax = *amax > DSV4_FID_AMAX_FLOOR_FP4 ? *amax : DSV4_FID_AMAX_FLOOR_FP4;
    return *amax <= 0x1p100f;
}

#if defined(DSV4_HAVE_AVX512) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX512_APPROX 1
#include <immintrin.h>

#define AP_FN __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma")))
#define AP_INLINE static inline __attribute__((always_inline, target("avx512f,avx512dq,avx512vl,avx512bw,fma")))

/* The widest key a panel on the stack holds: (256, 16) floats, 16 KB a panel, two panels (Flash: dI = 128). */
#define AP_MAX_DI 256

/* r[j] = row j of a 16 x 16 block in, column j out: unpack pairs, then 4 x 4 blocks within
 * each 128-bit lane, then the lanes across the four 4-row groups. */
AP_INLINE void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);     /* per lane: a0 b0 a1 b1 */
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]); /* a2 b2 a3 b3 */
    }
    for (int g = 0; g < 4; g++) { /* rows 4g..4g+3: u[4g + b] holds column 4L + b in lane L */
        r[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        r[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        r[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        r[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int b = 0; b < 4; b++) { /* column 4L + b: lane L of r[b], r[4 + b], r[8 + b], r[12 + b] */
        const __m512 a0 = _mm512_shuffle_f32x4(r[b], r[4 + b], 0x88), a1 = _mm512_shuffle_f32x4(r[b], r[4 + b], 0xDD);
        const __m512 c0 = _mm512_shuffle_f32x4(r[8 + b], r[12 + b], 0x88),
                     c1 = _mm512_shuffle_f32x4(r[8 + b], r[12 + b], 0xDD);
        t[b] = _mm512_shuffle_f32x4(a0, c0, 0x88);      /* lane 0 */
        t[8 + b] = _mm512_shuffle_f32x4(a0, c0, 0xDD);  /* lane 2 */
        t[4 + b] = _mm512_shuffle_f32x4(a1, c1, 0x88);  /* lane 1 */
        t[12 + b] = _mm512_shuffle_f32x4(a1, c1, 0xDD); /* lane 3 */
    }
    for (int j = 0; j < 16; j++) r[j] = t[j];
}

#define FQ_RU (_MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)

/* v[j] reduced: lane j of the result is the sum of v[j]'s 16 lanes (any order; ru: every add
 * rounded upward). Four levels of adjacent pairs (256-bit halves, 128-bit lanes, 64-bit
 * pairs, floats); the last permute puts vector j's sum in lane j. */
AP_INLINE __m512 hsum16(__m512 v[16], const int ru) {
#define FQ_ADD(a, b) (ru ? _mm512_add_round_ps((a), (b), FQ_RU) : _mm512_add_ps((a), (b)))
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; i++) /* lanes 0-7: v[2i]'s halves summed, 8-15: v[2i+1]'s */
        a[i] = FQ_ADD(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                      _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++) /* 128-bit lanes: a[2i] (v 4i, 4i+1), a[2i+1] (v 4i+2, 4i+3) */
        b[i] = FQ_ADD(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88),
                      _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++) /* 64-bit pairs within each 128-bit lane */
        c[i] = FQ_ADD(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(b[2 * i]), _mm512_castps_pd(b[2 * i + 1]))),
                      _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(b[2 * i]), _mm512_castps_pd(b[2 * i + 1]))));
    const __m512 r = FQ_ADD(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
#undef FQ_ADD
    /* the levels leave vector j's sum in lane 4 (j % 4) + j / 4 (worked through lane by lane;
     * the tests compare every level's scores with the portable loop's) */
    const __m512i perm = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(perm, r);
}

/* Keys [w, w + 16)'s scores (query qn's 16 key vectors at tq + 16 qn, summed by hsum16) and
 * norms kn, stored for the keys each query sees (below min(lim, w1)). */
AP_INLINE void fq_store(__m512 *tq, __m512 kn, int nq, const int64_t *lim, int64_t w, int64_t w1, float *scores,
                        float *knorm, size_t ss) {
    for (int qn = 0; qn < nq; qn++) {
        const int64_t e = lim[qn] < w1 ? lim[qn] : w1;
        if (w >= e) continue;
        const int64_t v = e - w < 16 ? e - w : 16;
        const __mmask16 m = (__mmask16)(v >= 16 ? 0xFFFFu : (1u << v) - 1u);
        _mm512_mask_storeu_ps(scores + (size_t)qn * ss + w, m, hsum16(tq + qn * 16, 0));
        _mm512_mask_storeu_ps(knorm + (size_t)qn * ss + w, m, kn);
    }
}

/* Keys [w, w + n) prefetched into L1, every line of their rows: issued before the current
 * keys' FMAs, so the next panels' loads find them there. Without it the panel loads waited
 * on the cache for ~a fifth of the kernel's time at 32K entries (perf, session 28). */
AP_INLINE void prefetch_keys(const void *const *keys, int fmt, int64_t w, int n, int dI) {
    const int64_t bytes = dsv4_row_bytes(fmt, dI, 0);
    for (int j = 0; j < n; j++) {
        const char *l = dsv4_line_of(keys[w + j]);
        for (int64_t k = 0, m = dsv4_lines_in(keys[w + j], bytes); k < m; k++) DSV4_PREFETCH(l + 64 * k, 0, 3);
    }
}

/* The AVX-512 F32 / BF16 kernels (idx_approx_x512.c): as dsv4_idx_approx_kernel for F32 and
 * BF16 keys; 0, having scored nothing, where dI is past the panels' reach (AP_MAX_DI). */
int dsv4_idx_approx_x512(int simd, int kernel, const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                         const int64_t *lim, const void *const *keys, int fmt, int64_t w0, int64_t w1, int nI, int dI,
                         float *scores, float *knorm, size_t ss);

/* The BF16-dot key-panel kernel (idx_approx_bf16.c) for BF16 keys: as the key-panel kernel,
 * knorm the keys' norms times the query's factor (idx_approx.h); 0, having scored nothing, where the
 * shape is past its buffers; a query whose BF16 rounding would loosen the bound too much (or
 * not finite) is scored by the F32 key-panel kernel instead. */
int dsv4_idx_approx_bf16(const float *qI, size_t qs, const float *wI, size_t ws, int nq, const int64_t *lim,
                         const void *const *keys, int64_t w0, int64_t w1, int nI, int dI, float *scores, float *knorm,
                         size_t ss);

/* The integer pass's SIMD levels over V vectors vp (idx_fi_x512.c: VNNI and BW; idx_fi_avx2.c),
 * the same bits as fi_score_ref, and the query encoders (the portable fi_encode's bytes). */
void dsv4_idx_fi_x512_vnni(const fi_vec *const *vp, int V, int G, int nb, int nq, const int64_t *lim,
                           const void *const *keys, int64_t w0, int64_t wmax, int64_t w1, float *scores, float *knorm,
                           size_t ss);
void dsv4_idx_fi_x512_bw(const fi_vec *const *vp, int V, int G, int nb, int nq, const int64_t *lim,
                         const void *const *keys, int64_t w0, int64_t wmax, int64_t w1, float *scores, float *knorm,
                         size_t ss);
void dsv4_idx_fi_avx2(const fi_vec *const *vp, int V, int G, int nb, int nq, const int64_t *lim,
                      const void *const *keys, int64_t w0, int64_t wmax, int64_t w1, float *scores, float *knorm,
                      size_t ss);
int dsv4_idx_fi_encode_x512(const float *qI, const float *wI, int nI, int dI, fi_vec *vec);
int dsv4_idx_fi_encode_avx2(const float *qI, const float *wI, int nI, int dI, fi_vec *vec);
#endif

#if defined(DSV4_HAVE_AVX2) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_APPROX 1
#include <immintrin.h>

/* The AVX2 F32 / BF16 kernels (idx_approx_avx2.c): as dsv4_idx_approx_kernel for F32 and BF16
 * keys at the avx2 level; 0, having scored nothing, where dI is past their buffers. */
int dsv4_idx_approx_avx2(int kernel, const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                         const int64_t *lim, const void *const *keys, int fmt, int64_t w0, int64_t w1, int nI, int dI,
                         float *scores, float *knorm, size_t ss);
#endif

#endif
