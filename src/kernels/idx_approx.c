/* idx_approx.c — approximate indexer scores and their error bound (contract: idx_approx.h).
 *
 * The AVX-512 function carries its own target attribute (with "fma": any rounding is
 * allowed here, the bound covers it), so this file needs no ISA flags and runs it only at
 * the level cpu.c detected.
 */
#include "kernels/idx_approx.h"

#include <math.h>
#include <string.h>

#include "kernels/codec.h"
#include "kernels/cpu.h"
#include "kernels/fidelity.h"
#include "kernels/idx_scores.h"
#include "kernels/kv_rows.h"
#include "util/lines.h"
#include "util/prefetch.h"

/* gamma_n = n u / (1 - n u), u = 2^-24: the relative error bound of an n-term inner product */
static double gamma_n(int n) { return n * 0x1p-24 / (1.0 - n * 0x1p-24); }

/* v as a float at or above it */
static float up(double v) {
    float f = (float)v;
    return (double)f < v ? nextafterf(f, INFINITY) : f;
}

dsv4_idx_bound dsv4_idx_approx_query(const float *qI, const float *wI, int nI, int dI) {
    dsv4_idx_bound b = {0};
    const double u = 0x1p-24, gd = gamma_n(dI), gh = gamma_n(nI);
    double q = 0.0, qmax = 0.0, sumw = 0.0;
    for (int h = 0; h < nI; h++) {
        double n2 = 0.0; /* squares of floats are exact in double; the sum loses < 1e-13 */
        for (int i = 0; i < dI; i++) n2 += (double)qI[(size_t)h * dI + i] * qI[(size_t)h * dI + i];
        const double nq = sqrt(n2) * (1.0 + 1e-12);
        q += fabs((double)wI[h]) * nq;
        sumw += fabs((double)wI[h]);
        qmax = nq > qmax ? nq : qmax;
    }
    if (!isfinite(q) || !isfinite(sumw)) return b;
    q *= 1.0 + 1e-12;
    /* each head dot: exact and approx within gd * ||q_h|| ||K|| of the true value; the head
     * sums within gh * sum_h |w_h| |relu_h| of theirs, |relu_h| <= (1 + gd) ||q_h|| ||K||
     * (the kernels' ||K||: rounded up, or summed in double and the root rounded up to float, which
     * can be a double ulp, 2^-53 relative, low: the factor 2 covers it); twice that for
     * safety, then 8u * Q for the float sums approx -/+ bound themselves (|approx| <= Q
     * ||K||), each term rounded up */
    const double eps = 2.0 * (2.0 * gd + 2.0 * gh * (1.0 + gd)) + 8.0 * u;
    b.scale = up(eps * q * (1.0 + 8.0 * u));
    /* gradual underflow: at most 2^-150 more per rounding, 2 dI per dot (both paths), 2 nI
     * per head sum, and the bound's own float sums; twice */
    b.add = up(2.0 * (sumw * 4.0 * dI + 4.0 * nI + 8.0) * 0x1p-150);
    /* keys up to kmax keep Q ||K|| and every dot's terms below 2^120 */
    const double m = q > qmax ? q : qmax;
    b.kmax = m > 0x1p-7 ? (float)(0x1p120 / m) : 0x1p127f;
    b.valid = isfinite(b.scale) && b.kmax > 0.0f;
    return b;
}

/* Key w's values as F32 (fmt F32 or BF16). */
static float key_at(const void *row, int fmt, int i) {
    if (fmt == DSV4_ROW_BF16) {
        const uint32_t u = (uint32_t)((const uint16_t *)row)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    return ((const float *)row)[i];
}

void dsv4_idx_approx_ref(const float *qI, size_t qs, const float *wI, size_t ws, int nq, const int64_t *lim,
                         const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI, int dI, float *scores,
                         float *knorm, size_t ss) {
    for (int q = 0; q < nq; q++) {
        const float *qq = qI + (size_t)q * qs, *wq = wI + (size_t)q * ws;
        const int64_t end = lim[q] < w1 ? lim[q] : w1;
        for (int64_t w = w0; w < end; w++) {
            float s = 0.0f;
            double n2 = 0.0; /* in double: no float square overflows or underflows there */
            for (int i = 0; i < dI; i++) n2 += (double)key_at(keys[w], key_fmt, i) * key_at(keys[w], key_fmt, i);
            for (int h = 0; h < nI; h++) {
                float d = 0.0f;
                for (int i = 0; i < dI; i++) d += qq[(size_t)h * dI + i] * key_at(keys[w], key_fmt, i);
                s += wq[h] * (d > 0.0f ? d : 0.0f);
            }
            scores[(size_t)q * ss + w] = s;
            knorm[(size_t)q * ss + w] = up(sqrt(n2));
        }
    }
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

/* e2m1 codes times 2 */
static const int8_t FI_X2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

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

static int fi_shape(int nI, int dI) { return dI >= 32 && dI % 32 == 0 && dI <= 32 * FI_NB && nI >= 1 && nI <= 16 * FI_V; }

/* One query (nI heads of dI) into vec[0, ceil(nI / 16)); 0 when a value is not c s / 2 as
 * above (not F3's rounding; NaN, infinite, or a block's amax past 2^100). */
static int fi_encode(const float *qI, const float *wI, int nI, int dI, fi_vec *vec) {
    const int nb = dI / 32;
    memset(vec, 0, sizeof *vec * (size_t)((nI + 15) / 16));
    for (int h = 0; h < nI; h++) {
        fi_vec *e = vec + h / 16;
        const int l = h % 16;
        e->w[l] = wI[h];
        for (int b = 0; b < nb; b++) {
            const float *x = qI + (size_t)h * dI;
            float amax = DSV4_FID_AMAX_FLOOR_FP4;
            for (int i = 32 * b; i < 32 * b + 32; i++) amax = !(fabsf(x[i]) <= amax) ? fabsf(x[i]) : amax;
            if (!(amax <= 0x1p100f)) return 0; /* NaN too */
            const float s = dsv4_fid_pow2_scale(amax, 1.0f / 6.0f), inv = 2.0f / s;
            int sum = 0;
            for (int t = 0; t < 8; t++)
                for (int i = 0; i < 4; i++) {
                    const float xv = x[fi_value(8 * b + t, i)], c = xv * inv;
                    if (!(fabsf(c) <= 12.0f) || c != nearbyintf(c) || c * s * 0.5f != xv) return 0;
                    e->qt[8 * b + t][4 * l + i] = (int8_t)c;
                    sum += (int)c;
                }
            e->init[b][l] = -12 * sum;
            e->qf[b][l] = s;
        }
    }
    return 1;
}

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

/* The 16 lanes summed as hsum16 sums each vector (its levels: halves, 128-bit lanes, 64-bit
 * pairs, neighbours). */
static inline float fi_tree16(const float *x) {
    float y[8], z[4];
    for (int k = 0; k < 8; k++) y[k] = x[k] + x[k + 8];
    for (int k = 0; k < 4; k++) z[k] = y[k] + y[k + 4];
    return (z[0] + z[2]) + (z[1] + z[3]);
}

/* Block b's squared codes of a key row (nb blocks: the nibbles, then the scale bytes) */
static inline int32_t fi_c2(const uint8_t *row, int b) {
    int32_t c2 = 0;
    for (int i = 32 * b; i < 32 * b + 32; i++) {
        const int c = FI_X2[(row[i / 2] >> (4 * (i & 1))) & 15];
        c2 += c * c;
    }
    return c2;
}

/* The norm from the blocks' squared codes, as every level computes it: in double, blocks
 * ascending, the root rounded up to float. */
static inline float fi_norm(const int32_t *c2, const uint8_t *sb, int nb) {
    double n2 = 0.0;
    for (int b = 0; b < nb; b++) n2 = b ? n2 + (double)c2[b] * fi_kf2(sb[b]) : (double)c2[b] * fi_kf2(sb[b]);
    return up(sqrt(n2));
}

/* The portable level: the query of G vectors vp[0, G) against the key row (nb blocks). */
static void fi_score_ref(const fi_vec *const *vp, int G, int nb, const uint8_t *row, float *score, float *knorm) {
    float kf[FI_NB], lanes[16];
    int32_t c2[FI_NB];
    for (int b = 0; b < nb; b++) {
        c2[b] = fi_c2(row, b);
        kf[b] = fi_kf(row[16 * nb + b]);
    }
    for (int g = 0; g < G; g++) {
        const fi_vec *e = vp[g];
        for (int l = 0; l < 16; l++) {
            float d = 0.0f;
            for (int b = 0; b < nb; b++) {
                int32_t I = e->init[b][l];
                for (int t = 0; t < 8; t++)
                    for (int i = 0; i < 4; i++) {
                        const int n = fi_value(8 * b + t, i);
                        I += (FI_X2[(row[n / 2] >> (4 * (n & 1))) & 15] + 12) * e->qt[8 * b + t][4 * l + i];
                    }
                const float tt = (float)I * e->qf[b][l];
                d = b ? fmaf(tt, kf[b], d) : tt * kf[b];
            }
            const float r = d > 0.0f ? d : 0.0f;
            lanes[l] = g ? fmaf(e->w[l], r, lanes[l]) : e->w[l] * r;
        }
    }
    *score = fi_tree16(lanes);
    *knorm = fi_norm(c2, row + 16 * nb, nb);
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

/* Keys [w, w + nk) (nk <= 16) into panel (dI, 16): panel[d * 16 + j] = key w + j at d, zero
 * for j >= nk; returns their norms, summed in double (no float square overflows or
 * underflows there) and rounded up to float. */
AP_INLINE __m512 load_panel(const void *const *keys, int fmt, int64_t w, int nk, int dI, float *panel) {
    __m512d n2lo = _mm512_setzero_pd(), n2hi = _mm512_setzero_pd();
    for (int c = 0; c < dI; c += 16) {
        const int m = dI - c < 16 ? dI - c : 16;
        const __mmask16 mk = (__mmask16)((1u << m) - 1u);
        __m512 r[16];
        for (int j = 0; j < 16; j++) {
            if (j >= nk) r[j] = _mm512_setzero_ps();
            else if (fmt == DSV4_ROW_BF16)
                r[j] = _mm512_castsi512_ps(_mm512_slli_epi32(
                    _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)keys[w + j] + c)), 16));
            else r[j] = _mm512_maskz_loadu_ps(mk, (const float *)keys[w + j] + c);
        }
        transpose16(r);
        for (int i = 0; i < m; i++) {
            _mm512_store_ps(panel + (size_t)(c + i) * 16, r[i]);
            const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(r[i]));
            const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(r[i], 1));
            n2lo = _mm512_fmadd_pd(lo, lo, n2lo);
            n2hi = _mm512_fmadd_pd(hi, hi, n2hi);
        }
    }
#define AP_UP (_MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC) /* a constant even at -O0 */
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvt_roundpd_ps(_mm512_sqrt_pd(n2lo), AP_UP)),
                              _mm512_cvt_roundpd_ps(_mm512_sqrt_pd(n2hi), AP_UP), 1);
#undef AP_UP
}

/* s0 += sum over G heads from h0 of wq[h] * relu(qq[h] . p0) for panel p0's 16 keys, s1 the
 * same for p1's. Each q value is broadcast once for 32 keys, so the loop issues 2 G FMAs per
 * 2 panel loads and G broadcasts: hot ~0.93-0.97 of the FMA peak against ~0.7-0.85 for one
 * panel (G = 8, 128-wide keys; session 28's harness, BENCHMARKS.md). */
AP_INLINE void heads_g2(const float *qq, const float *wq, int h0, int dI, const float *p0, const float *p1, __m512 *s0,
                        __m512 *s1, const int G) {
    __m512 a[8], b[8];
    for (int g = 0; g < G; g++) a[g] = b[g] = _mm512_setzero_ps();
    for (int d = 0; d < dI; d++) {
        const __m512 k0 = _mm512_load_ps(p0 + (size_t)d * 16), k1 = _mm512_load_ps(p1 + (size_t)d * 16);
        for (int g = 0; g < G; g++) {
            const __m512 q = _mm512_set1_ps(qq[(size_t)(h0 + g) * dI + d]);
            a[g] = _mm512_fmadd_ps(q, k0, a[g]);
            b[g] = _mm512_fmadd_ps(q, k1, b[g]);
        }
    }
    for (int g = 0; g < G; g++) {
        const __m512 wg = _mm512_set1_ps(wq[h0 + g]);
        *s0 = _mm512_fmadd_ps(wg, _mm512_max_ps(a[g], _mm512_setzero_ps()), *s0);
        *s1 = _mm512_fmadd_ps(wg, _mm512_max_ps(b[g], _mm512_setzero_ps()), *s1);
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

/* ---- few queries: heads in lanes -------------------------------------------------------
 * At decode a span has one query, and approx_avx512's 32-key transposes (widening, 16x16
 * shuffles, panel stores, double norms) serve only one query's heads: ~169 cycles a key in
 * the lead's decode profile at 35.8K context against the 64 of its FMAs. Here the query is
 * transposed instead, once a call, to (dI, V x 16) with V = nq x ceil(nI / 16) vectors of 16
 * heads (zero rows past nI, zero weights: a padded head adds exactly 0), each key row is
 * widened once into an F32 scratch row (BF16; F32 rows are read in place), and for each d one
 * load of q's column serves J keys' broadcast values (an embedded-broadcast operand: a load,
 * no shuffle), V x J accumulators in flight. relu and the weights in lanes, then one
 * transpose-add of 16 keys' vectors gives 16 scores. No key transpose, no panel stores.
 * The norms: squares summed in float with every rounding upward (embedded rounding) and the
 * root rounded up, so each norm is at or above ||K|| with no error analysis (a sum of
 * nonnegative terms rounded up never falls below the exact sum; squares below the
 * subnormals count as up to 2^-149 each, so a tiny key's norm may read up to ~2^-70); a key
 * whose squares overflow float is summed again in double. */

/* The q transpose on the stack: V x 16 lanes x dI floats (32 KB: Flash's 64 heads x 128). */
#define FQ_QT_FLOATS 8192
/* The widest key (Flash: 128), and the widened rows' stride: a constant, so that the 16 keys'
 * broadcasts address one base register plus displacements (pointers kept in vector registers
 * cost a move each), one line more than a row so the rows spread over the L1 sets. */
#define FQ_MAX_DI 128
#define FQ_KS 144
/* Keys prefetched one block ahead (two and three blocks measured the same with the keys out of
 * cache: 1.33-1.38x the panel kernel at 32K entries, bench_indexer --kernels --cold). The next
 * block's 64-80 lines go out one a d of the dots, not in a burst before them: a burst fills the
 * core's miss buffers and the prefetches wait there (a 4K batch-16 step's perf: 23 % of this
 * kernel's samples on the instruction after the burst); spread, 90.3 -> 72.7 cycles a key in
 * step (session 36 iscore, blocks of steps alternated in one process). */
#define FQ_PF 16
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

/* Where value d of a key sits in a widened row (and q's column d in qT): BF16 rows widen 32
 * values at once without a shuffle, the even ones by a shift and the odd ones by a mask, so
 * each 32 positions hold a chunk's 16 even values, then its 16 odd ones (the dot's order
 * changes; the bound covers any order). F32 rows keep their order. */
static inline int fq_pos(int bf16, int d) { return bf16 ? (d & ~31) + (d & 1) * 16 + ((d & 31) >> 1) : d; }

/* The positions a widened row spans: dI rounded up to the chunk (32 BF16, 16 F32 values). */
static inline int fq_span(int bf16, int dI) { return bf16 ? (dI + 31) & ~31 : (dI + 15) & ~15; }

/* q's heads transposed: qT[pos(d) * V * 16 + v * 16 + l] = head 16 g + l of query qn (v = qn G
 * + g) at d, zero past nI and at positions of no d; wv[v] the heads' weights, zero past nI. */
AP_INLINE void fq_transpose_q(const float *qI, size_t qs, const float *wI, size_t ws, int nq, int nI, int dI, int G,
                             int bf16, float *qT, __m512 *wv) {
    const int V = nq * G, P = fq_span(bf16, dI);
    if (P != dI) memset(qT, 0, sizeof(float) * (size_t)P * V * 16);
    for (int qn = 0; qn < nq; qn++)
        for (int g = 0; g < G; g++) {
            const int v = qn * G + g, nh = nI - 16 * g < 16 ? nI - 16 * g : 16;
            const __mmask16 hm = (__mmask16)((1u << nh) - 1u);
            wv[v] = _mm512_maskz_loadu_ps(hm, wI + (size_t)qn * ws + 16 * g);
            for (int c = 0; c < dI; c += 16) {
                const int m = dI - c < 16 ? dI - c : 16;
                const __mmask16 mk = (__mmask16)((1u << m) - 1u);
                __m512 r[16];
                for (int l = 0; l < 16; l++)
                    r[l] = l < nh ? _mm512_maskz_loadu_ps(mk, qI + (size_t)qn * qs + (size_t)(16 * g + l) * dI + c)
                                  : _mm512_setzero_ps();
                transpose16(r);
                for (int i = 0; i < m; i++) _mm512_store_ps(qT + ((size_t)fq_pos(bf16, c + i) * V + v) * 16, r[i]);
            }
        }
}

/* One prefetched line of the next block's keys (a test redefines it to record the lines). */
#ifndef FQ_PF_TOUCH
#define FQ_PF_TOUCH(a) _mm_prefetch((const char *)(a), _MM_HINT_T0)
#endif

/* J keys' accumulators against V head vectors: acc[v * J + j] += qT[p][v] * kf[j][p] for p < P
 * (kf rows FQ_KS apart); the npf lines at pf prefetched, one a d (the rest after the loop). */
AP_INLINE void fq_dots(const float *qT, const float *kf, int dI, const int V, const int J, __m512 *acc,
                       const char *const *pf, int npf) {
    for (int i = 0; i < V * J; i++) acc[i] = _mm512_setzero_ps();
    for (int d = 0; d < dI; d++) {
        if (d < npf) FQ_PF_TOUCH(pf[d]);
        __m512 qv[4];
        for (int v = 0; v < V; v++) qv[v] = _mm512_load_ps(qT + ((size_t)d * V + v) * 16);
        for (int j = 0; j < J; j++) {
            const __m512 kb = _mm512_set1_ps(kf[j * FQ_KS + d]);
            for (int v = 0; v < V; v++) acc[v * J + j] = _mm512_fmadd_ps(qv[v], kb, acc[v * J + j]);
        }
    }
    for (int d = dI; d < npf; d++) FQ_PF_TOUCH(pf[d]);
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

AP_INLINE void fq_run(const float *qT, const __m512 *wv, size_t ss, int nq, const int64_t *lim,
                      const void *const *keys, int fmt, int64_t w0, int64_t wmax, int64_t w1, int dI, int G,
                      float *scores, float *knorm, const int V, const int J) {
    _Alignas(64) float kf[16 * FQ_KS]; /* (16, FQ_KS) the block's keys as F32 at fq_pos, zeros in the span */
    const int P = fq_span(fmt == DSV4_ROW_BF16, dI);
    const int64_t row_bytes = dsv4_row_bytes(fmt, dI, 0);
    const char *pf[16 * (FQ_MAX_DI * 4 / 64 + 1)]; /* the next block's lines, issued one a d by the dots */
    for (int64_t w = w0; w < wmax; w += 16) {
        const int nk = wmax - w < 16 ? (int)(wmax - w) : 16;
        int npf = 0;
        for (int64_t k = w + FQ_PF; k < w + FQ_PF + 16 && k < wmax; k++) {
            const char *l = dsv4_line_of(keys[k]);
            for (int64_t i = 0, m = dsv4_lines_in(keys[k], row_bytes); i < m; i++) pf[npf++] = l + 64 * i;
        }
        __m512 n2[16];
        for (int j = 0; j < 16; j++) {
            __m512 acc = _mm512_setzero_ps();
            float *kr = kf + j * FQ_KS;
            if (j < nk && fmt == DSV4_ROW_BF16) {
                const uint16_t *row = keys[w + j];
                for (int c = 0; c < P; c += 32) {
                    const __mmask32 mk = dI - c >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << (dI - c)) - 1u);
                    const __m512i x = _mm512_maskz_loadu_epi16(mk, row + c);
                    const __m512 ev = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
                    const __m512 od = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0xFFFF0000u)));
                    _mm512_store_ps(kr + c, ev);
                    _mm512_store_ps(kr + c + 16, od);
                    acc = _mm512_fmadd_round_ps(ev, ev, acc, FQ_RU);
                    acc = _mm512_fmadd_round_ps(od, od, acc, FQ_RU);
                }
            } else if (j < nk) {
                for (int c = 0; c < P; c += 16) {
                    const __mmask16 mk = dI - c >= 16 ? (__mmask16)0xFFFFu : (__mmask16)((1u << (dI - c)) - 1u);
                    const __m512 r = _mm512_maskz_loadu_ps(mk, (const float *)keys[w + j] + c);
                    _mm512_store_ps(kr + c, r);
                    acc = _mm512_fmadd_round_ps(r, r, acc, FQ_RU);
                }
            } else { /* past the range (the last block): zeros, dotted but not stored */
                for (int c = 0; c < P; c += 16) _mm512_store_ps(kr + c, _mm512_setzero_ps());
            }
            n2[j] = acc;
        }
        __m512 kn = _mm512_sqrt_round_ps(hsum16(n2, 1), FQ_RU);
        const __mmask16 big = _mm512_cmp_ps_mask(kn, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ) & (__mmask16)((1u << nk) - 1u);
        if (big) { /* squares past FLT_MAX (|K_i| > ~1.8e19): those norms in double, as the panel kernel */
            _Alignas(64) float t[16];
            _mm512_store_ps(t, kn);
            for (int j = 0; j < nk; j++)
                if (big >> j & 1) {
                    double s2 = 0.0;
                    for (int i = 0; i < P; i++) s2 += (double)kf[j * FQ_KS + i] * kf[j * FQ_KS + i];
                    t[j] = up(sqrt(s2));
                }
            kn = _mm512_load_ps(t);
        }
        /* per query: tq[qn][j] = sum over its groups of w * relu(dots), lanes = heads */
        __m512 tq[4 * 16];
        for (int j0 = 0; j0 < 16; j0 += J) {
            __m512 acc[16];
            /* pass j0 / J of 16 / J issues its share of the lines */
            const int p0 = npf * j0 / 16, p1 = npf * (j0 + J) / 16;
            fq_dots(qT, kf + j0 * FQ_KS, P, V, J, acc, pf + p0, p1 - p0);
            for (int v = 0; v < V; v++) { /* query v / G, its group v % G */
                __m512 *t = tq + (v / G) * 16 + j0;
                for (int j = 0; j < J; j++) {
                    const __m512 r = _mm512_max_ps(acc[v * J + j], _mm512_setzero_ps());
                    t[j] = v % G ? _mm512_fmadd_ps(wv[v], r, t[j]) : _mm512_mul_ps(wv[v], r);
                }
            }
        }
        fq_store(tq, kn, nq, lim, w, w1, scores, knorm, ss);
    }
}

/* V head vectors in all (nq x ceil(nI / 16), at most 4), J keys a pass: V J <= 16 accumulators. */
AP_FN static void approx_few_avx512(const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                                    const int64_t *lim, const void *const *keys, int fmt, int64_t w0, int64_t w1,
                                    int nI, int dI, float *scores, float *knorm, size_t ss) {
    _Alignas(64) float qT[FQ_QT_FLOATS]; /* (dI, V, 16) */
    __m512 wv[4];
    const int G = (nI + 15) / 16, V = nq * G;
    int64_t wmax = w0;
    for (int q = 0; q < nq; q++) {
        const int64_t e = lim[q] < w1 ? lim[q] : w1;
        wmax = e > wmax ? e : wmax;
    }
    if (wmax <= w0) return;
    fq_transpose_q(qI, qs, wI, ws, nq, nI, dI, G, fmt == DSV4_ROW_BF16, qT, wv);
    if (V == 1) fq_run(qT, wv, ss, nq, lim, keys, fmt, w0, wmax, w1, dI, G, scores, knorm, 1, 16);
    else if (V == 2) fq_run(qT, wv, ss, nq, lim, keys, fmt, w0, wmax, w1, dI, G, scores, knorm, 2, 8);
    else if (V == 3) fq_run(qT, wv, ss, nq, lim, keys, fmt, w0, wmax, w1, dI, G, scores, knorm, 3, 4);
    else fq_run(qT, wv, ss, nq, lim, keys, fmt, w0, wmax, w1, dI, G, scores, knorm, 4, 4);
}

/* Whether the few-query kernel takes this call: at most 4 head vectors, q's transpose on the stack. */
static int few_fits(int nq, int nI, int dI) {
    const int V = nq * ((nI + 15) / 16);
    return nq >= 1 && V <= 4 && dI >= 1 && dI <= FQ_MAX_DI && (size_t)V * 16 * dI <= FQ_QT_FLOATS;
}

AP_FN static void approx_avx512(const float *qI, size_t qs, const float *wI, size_t ws, int nq, const int64_t *lim,
                                const void *const *keys, int fmt, int64_t w0, int64_t w1, int nI, int dI,
                                float *scores, float *knorm, size_t ss) {
    _Alignas(64) float panel[2][AP_MAX_DI * 16]; /* two (dI, 16) panels: keys [w, w + 16), [w + 16, w + 32) */
    int64_t wmax = w0;                            /* the keys any query of the block sees */
    for (int q = 0; q < nq; q++) {
        const int64_t e = lim[q] < w1 ? lim[q] : w1;
        wmax = e > wmax ? e : wmax;
    }
    for (int64_t w = w0; w < wmax; w += 32) {
        const int nk = wmax - w < 32 ? (int)(wmax - w) : 32; /* keys of this pass; a second panel from 17 */
        const int nk0 = nk < 16 ? nk : 16, nk1 = nk - nk0;
        const int64_t wn = w + 32;
        if (wn < wmax) prefetch_keys(keys, fmt, wn, wmax - wn < 32 ? (int)(wmax - wn) : 32, dI);
        const __m512 kn0 = load_panel(keys, fmt, w, nk0, dI, panel[0]);
        const __m512 kn1 = load_panel(keys, fmt, w + 16, nk1, dI, panel[1]); /* zeros when nk1 is 0 */
        for (int q = 0; q < nq; q++) {
            const int64_t e = lim[q] < w1 ? lim[q] : w1;
            if (w >= e) continue;
            const float *qq = qI + (size_t)q * qs, *wq = wI + (size_t)q * ws;
            __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
            int h = 0; /* both panels, whatever q sees: the stores below keep only its keys */
            for (; h + 8 <= nI; h += 8) heads_g2(qq, wq, h, dI, panel[0], panel[1], &s0, &s1, 8);
            if (h + 4 <= nI) {
                heads_g2(qq, wq, h, dI, panel[0], panel[1], &s0, &s1, 4);
                h += 4;
            }
            for (; h < nI; h++) heads_g2(qq, wq, h, dI, panel[0], panel[1], &s0, &s1, 1);
            const int64_t v0 = e - w < 16 ? e - w : 16, v1 = e - w - 16; /* keys of each panel q sees */
            const __mmask16 m0 = (__mmask16)(v0 >= 16 ? 0xFFFFu : (1u << v0) - 1u);
            _mm512_mask_storeu_ps(scores + (size_t)q * ss + w, m0, s0);
            _mm512_mask_storeu_ps(knorm + (size_t)q * ss + w, m0, kn0);
            if (v1 > 0) {
                const __mmask16 m1 = (__mmask16)(v1 >= 16 ? 0xFFFFu : (1u << v1) - 1u);
                _mm512_mask_storeu_ps(scores + (size_t)q * ss + w + 16, m1, s1);
                _mm512_mask_storeu_ps(knorm + (size_t)q * ss + w + 16, m1, kn1);
            }
        }
    }
}
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
#define FI_RUN_DISPATCH fi_x512_vnni
#define FI_RUN_TARGET "avx512f,avx512dq,avx512vl,avx512bw,avx512vnni,fma"
#define FI_RUN_VNNI 1
#include "kernels/idx_approx_fi.inc"
#undef FI_RUN_NAME
#undef FI_RUN_DISPATCH
#undef FI_RUN_TARGET
#undef FI_RUN_VNNI
#define FI_RUN_NAME fi_run_bw
#define FI_RUN_DISPATCH fi_x512_bw
#define FI_RUN_TARGET "avx512f,avx512dq,avx512vl,avx512bw,fma"
#define FI_RUN_VNNI 0
#include "kernels/idx_approx_fi.inc"
#undef FI_RUN_NAME
#undef FI_RUN_DISPATCH
#undef FI_RUN_TARGET
#undef FI_RUN_VNNI

/* ---- the AVX2 level: the same integer block dots (vpmaddubsw pairs summed in int16 over a
 * block's 8 slots, then vpmaddwd), 8 heads a vector (a 16-head vector's two halves), the
 * float operations of fi_score_ref lane by lane and its tree (f2_tree8); the keys' squared
 * codes per block by vpmaddubsw, their norms (fi_norm) and scales one key at a time. */
#define F2_FN __attribute__((target("avx2,fma")))
#define F2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

/* 8 keys' vectors y[j] (lane k: a query's heads k and k + 8 summed, fi_tree16's first level)
 * to their scores, lane j key j's: fi_tree16's other levels. */
F2_INLINE __m256 f2_tree8(const __m256 *y) {
    __m256 z[4], p[2];
    for (int j = 0; j < 4; j++) /* lanes 0-3: key j's y[k] + y[k + 4], lanes 4-7: key j + 4's */
        z[j] = _mm256_add_ps(_mm256_permute2f128_ps(y[j], y[j + 4], 0x20), _mm256_permute2f128_ps(y[j], y[j + 4], 0x31));
    for (int i = 0; i < 2; i++) { /* per 128-bit lane: key 2i's z0 + z2, z1 + z3, then key 2i + 1's */
        const __m256d a = _mm256_castps_pd(z[2 * i]), b = _mm256_castps_pd(z[2 * i + 1]);
        p[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    }
    return _mm256_add_ps(_mm256_shuffle_ps(p[0], p[1], 0x88), _mm256_shuffle_ps(p[0], p[1], 0xDD));
}

F2_INLINE void fi_run_avx2(const fi_vec *const *vp, int G, int nb, int nq, const int64_t *lim,
                           const void *const *keys, int64_t w0, int64_t wmax, int64_t w1, float *scores,
                           float *knorm, size_t ss, const int V, const int J) {
    _Alignas(32) uint8_t kq[16][128]; /* as the AVX-512 levels' */
    _Alignas(32) float kf[FI_NB][16], kn[16];
    const __m256i tabu = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m256i taba = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12));
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const int64_t row_bytes = 17 * nb;
    for (int64_t w = w0; w < wmax; w += 16) {
        const int nk = wmax - w < 16 ? (int)(wmax - w) : 16;
        for (int j = 0; j < 16; j++) {
            if (j >= nk) { /* past the range: zero codes, dotted but not kept */
                memset(kq[j], 12, sizeof kq[j]);
                for (int b = 0; b < nb; b++) kf[b][j] = 0.0f;
                kn[j] = 0.0f;
                continue;
            }
            const uint8_t *row = keys[w + j];
            if (w + 16 + j < wmax) {
                const char *nr = keys[w + 16 + j];
                _mm_prefetch(nr, _MM_HINT_T0);
                _mm_prefetch(nr + row_bytes - 1, _MM_HINT_T0);
            }
            int32_t c2[FI_NB];
            for (int h = 0; 32 * h < 16 * nb; h++) { /* row bytes 32 h ..: blocks 2 h and 2 h + 1 */
                const __m256i x = 16 * nb - 32 * h >= 32 ? _mm256_loadu_si256((const __m256i *)(row + 32 * h))
                                                         : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(row + 32 * h)));
                const __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
                _mm256_store_si256((__m256i *)(kq[j] + 32 * h), _mm256_shuffle_epi8(tabu, lo));
                _mm256_store_si256((__m256i *)(kq[j] + 64 + 32 * h), _mm256_shuffle_epi8(tabu, hi));
                const __m256i al = _mm256_shuffle_epi8(taba, lo), ah = _mm256_shuffle_epi8(taba, hi);
                const __m256i s = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(al, al), _mm256_maddubs_epi16(ah, ah)), ones);
                _Alignas(32) int32_t d[8];
                _mm256_store_si256((__m256i *)d, s);
                c2[2 * h] = d[0] + d[1] + d[2] + d[3];
                if (2 * h + 1 < nb) c2[2 * h + 1] = d[4] + d[5] + d[6] + d[7];
            }
            for (int b = 0; b < nb; b++) kf[b][j] = fi_kf(row[16 * nb + b]);
            kn[j] = fi_norm(c2, row + 16 * nb, nb);
        }
        __m256 tq[FI_V * 16 * 2]; /* query qn, key j, half: tq[(16 qn + j) 2 + half] */
        for (int j0 = 0; j0 < 16; j0 += J) {
            __m256 dsum[8]; /* [u J + j], u = 2 v + half; nb >= 1: block 0 sets them */
            for (int i = 0; i < 2 * V * J; i++) dsum[i] = _mm256_setzero_ps();
            for (int b = 0; b < nb; b++) {
                __m256i acc[8];
                for (int i = 0; i < 2 * V * J; i++) acc[i] = _mm256_setzero_si256();
                for (int t = 0; t < 8; t++) {
                    const int off = (t < 4 ? 0 : 64) + 16 * b + 4 * (t & 3);
                    for (int j = 0; j < J; j++) {
                        int32_t kd;
                        memcpy(&kd, kq[j0 + j] + off, 4);
                        const __m256i kb = _mm256_set1_epi32(kd);
                        for (int u = 0; u < 2 * V; u++) {
                            const __m256i qv = _mm256_load_si256((const __m256i *)(vp[u / 2]->qt[8 * b + t] + 32 * (u % 2)));
                            acc[u * J + j] = _mm256_add_epi16(acc[u * J + j], _mm256_maddubs_epi16(kb, qv));
                        }
                    }
                }
                for (int u = 0; u < 2 * V; u++) {
                    const __m256 qf = _mm256_load_ps(vp[u / 2]->qf[b] + 8 * (u % 2));
                    const __m256i in = _mm256_load_si256((const __m256i *)(vp[u / 2]->init[b] + 8 * (u % 2)));
                    for (int j = 0; j < J; j++) {
                        const __m256i I = _mm256_add_epi32(in, _mm256_madd_epi16(acc[u * J + j], ones));
                        const __m256 tt = _mm256_mul_ps(_mm256_cvtepi32_ps(I), qf);
                        const __m256 kb = _mm256_set1_ps(kf[b][j0 + j]);
                        dsum[u * J + j] = b ? _mm256_fmadd_ps(tt, kb, dsum[u * J + j]) : _mm256_mul_ps(tt, kb);
                    }
                }
            }
            for (int u = 0; u < 2 * V; u++) {
                const int v = u / 2;
                const __m256 wv = _mm256_load_ps(vp[v]->w + 8 * (u % 2));
                for (int j = 0; j < J; j++) {
                    const __m256 r = _mm256_max_ps(dsum[u * J + j], _mm256_setzero_ps());
                    __m256 *t = tq + (16 * (v / G) + j0 + j) * 2 + u % 2;
                    *t = v % G ? _mm256_fmadd_ps(wv, r, *t) : _mm256_mul_ps(wv, r);
                }
            }
        }
        for (int qn = 0; qn < nq; qn++) {
            const int64_t e = lim[qn] < w1 ? lim[qn] : w1;
            for (int k8 = 0; k8 < 16 && w + k8 < e; k8 += 8) {
                __m256 y[8];
                for (int j = 0; j < 8; j++) y[j] = _mm256_add_ps(tq[(16 * qn + k8 + j) * 2], tq[(16 * qn + k8 + j) * 2 + 1]);
                _Alignas(32) float sc[8];
                _mm256_store_ps(sc, f2_tree8(y));
                const int64_t n = e - w - k8 < 8 ? e - w - k8 : 8;
                memcpy(scores + (size_t)qn * ss + w + k8, sc, sizeof(float) * (size_t)n);
                memcpy(knorm + (size_t)qn * ss + w + k8, kn + k8, sizeof(float) * (size_t)n);
            }
        }
    }
}

F2_FN static void fi_avx2(const fi_vec *const *vp, int V, int G, int nb, int nq, const int64_t *lim,
                          const void *const *keys, int64_t w0, int64_t wmax, int64_t w1, float *scores, float *knorm,
                          size_t ss) {
    if (V == 1) fi_run_avx2(vp, G, nb, nq, lim, keys, w0, wmax, w1, scores, knorm, ss, 1, 2);
    else fi_run_avx2(vp, G, nb, nq, lim, keys, w0, wmax, w1, scores, knorm, ss, V, 1);
}

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

FE_FN static int fi_encode_x512(const float *qI, const float *wI, int nI, int dI, fi_vec *vec) {
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

/* r[j] = row j of an 8 x 8 block of dwords in, column j out: dword pairs of two rows, then
 * qword pairs (four rows' column j in each 128-bit lane: columns j and j + 4), then lanes. */
F2_INLINE void f2_transpose8(__m256i r[8]) {
    __m256i p[8], q[8];
    for (int i = 0; i < 8; i += 2) {
        p[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        p[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int h = 0; h < 8; h += 4) /* rows h .. h + 3: q[h + j] holds columns j, j + 4 */
        for (int k = 0; k < 2; k++) {
            q[h + 2 * k] = _mm256_unpacklo_epi64(p[h + k], p[h + k + 2]);
            q[h + 2 * k + 1] = _mm256_unpackhi_epi64(p[h + k], p[h + k + 2]);
        }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2x128_si256(q[c], q[4 + c], 0x20);
        r[c + 4] = _mm256_permute2x128_si256(q[c], q[4 + c], 0x31);
    }
}

F2_FN static int fi_encode_avx2(const float *qI, const float *wI, int nI, int dI, fi_vec *vec) {
    const int nb = dI / 32, G = (nI + 15) / 16;
    _Alignas(32) int8_t hb[16 * FI_V][128]; /* every head's codes in slot order, zero past nI */
    memset(vec, 0, sizeof *vec * (size_t)G);
    memset(hb, 0, sizeof hb[0] * 16 * (size_t)G);
    const __m256i eo = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7); /* evens to the low lane, odds to the high */
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), twelve = _mm256_set1_ps(12.0f);
    const __m256 half = _mm256_set1_ps(0.5f);
    for (int h = 0; h < nI; h++) { /* head h: lane h % 16 of group h / 16 */
        fi_vec *e = vec + h / 16;
        for (int b = 0; b < nb; b++) {
            const float *x = qI + (size_t)h * dI + 32 * b;
            __m256 xv[4], m = _mm256_setzero_ps();
            for (int k = 0; k < 4; k++) {
                xv[k] = _mm256_loadu_ps(x + 8 * k);
                m = _mm256_max_ps(m, _mm256_and_ps(xv[k], absm));
            }
            const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            float amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
            if (!fi_amax_ok(&amax)) return 0;
            const float s = fi_scale(amax);
            const __m256 inv = _mm256_set1_ps(2.0f / s), sv = _mm256_set1_ps(s);
            __m256i iv[4], sum = _mm256_setzero_si256();
            int ok = 0xFF;
            for (int k = 0; k < 4; k++) {
                const __m256 c = _mm256_mul_ps(xv[k], inv);
                iv[k] = _mm256_cvtps_epi32(c);
                const __m256 f = _mm256_cvtepi32_ps(iv[k]);
                const __m256 good = _mm256_and_ps(
                    _mm256_and_ps(_mm256_cmp_ps(f, c, _CMP_EQ_OQ), _mm256_cmp_ps(_mm256_and_ps(c, absm), twelve, _CMP_LE_OQ)),
                    _mm256_cmp_ps(_mm256_mul_ps(_mm256_mul_ps(f, sv), half), xv[k], _CMP_EQ_OQ));
                ok &= _mm256_movemask_ps(good);
                sum = _mm256_add_epi32(sum, iv[k]);
                iv[k] = _mm256_permutevar8x32_epi32(iv[k], eo);
            }
            if (ok != 0xFF) return 0;
            /* lane 0: evens 0-14 | 16-30 as int16, then bytes; lane 1 the odds: slot order */
            const __m256i a = _mm256_packs_epi32(iv[0], iv[1]), c = _mm256_packs_epi32(iv[2], iv[3]);
            _mm256_store_si256((__m256i *)(hb[h] + 32 * b), _mm256_packs_epi16(a, c));
            const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
            const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
            e->init[b][h % 16] = -12 * _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xB1)));
            e->qf[b][h % 16] = s;
        }
        e->w[h % 16] = wI[h];
    }
    for (int h0 = 0; h0 < 16 * G; h0 += 8) /* slots s0 .. s0 + 7 of heads h0 .. h0 + 7 */
        for (int s0 = 0; s0 < 8 * nb; s0 += 8) {
            __m256i r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_load_si256((const __m256i *)(hb[h0 + i] + 4 * s0));
            f2_transpose8(r);
            for (int j = 0; j < 8; j++)
                _mm256_storeu_si256((__m256i *)(vec[h0 / 16].qt[s0 + j] + 4 * (h0 % 16)), r[j]);
        }
    return 1;
}
#undef FI_UP
#endif

typedef struct {
    int simd, kernel;
    const float *qI, *wI;
    size_t qs, ws, ss;
    int nI, dI;
    float *scores, *knorm;
} fp4_approx_job;

static void fp4_approx_run(void *user, int q0, int g, const int64_t *glim, const void *const *fkeys, int64_t c0,
                           int64_t n) {
    const fp4_approx_job *j = user;
    const size_t at = (size_t)q0 * j->ss + (size_t)c0;
    dsv4_idx_approx_kernel(j->simd, j->kernel, j->qI + (size_t)q0 * j->qs, j->qs, j->wI + (size_t)q0 * j->ws, j->ws,
                           g, glim, fkeys, DSV4_ROW_F32, 0, n, j->nI, j->dI, j->scores + at, j->knorm + at, j->ss);
}

int dsv4_idx_fp4q_encode(int simd, const float *qI, const float *wI, int nI, int dI, void *enc) {
    if (!fi_shape(nI, dI)) return 0;
#ifdef HAVE_AVX512_APPROX
    if (simd >= DSV4_SIMD_AVX512) return fi_encode_x512(qI, wI, nI, dI, enc);
    if (simd >= DSV4_SIMD_AVX2) return fi_encode_avx2(qI, wI, nI, dI, enc);
#endif
    (void)simd;
    return fi_encode(qI, wI, nI, dI, enc);
}

int dsv4_idx_approx_fp4_enc(int simd, const void *const *enc, int nq, const int64_t *lim, const void *const *keys,
                            int64_t w0, int64_t w1, int nI, int dI, float *scores, float *knorm, size_t ss) {
    if (!fi_shape(nI, dI) || nq < 1) return 0;
    const int G = (nI + 15) / 16, nb = dI / 32, qg = FI_V / G; /* queries a pass */
    for (int q0 = 0; q0 < nq; q0 += qg) {
        const int n = nq - q0 < qg ? nq - q0 : qg, V = n * G;
        const fi_vec *vp[FI_V];
        for (int v = 0; v < V; v++) vp[v] = (const fi_vec *)enc[q0 + v / G] + v % G;
        int64_t wmax = w0; /* the keys any query of the pass sees */
        for (int q = q0; q < q0 + n; q++) {
            const int64_t end = lim[q] < w1 ? lim[q] : w1;
            wmax = end > wmax ? end : wmax;
        }
        if (wmax <= w0) continue;
        float *sc = scores + (size_t)q0 * ss, *kn = knorm + (size_t)q0 * ss;
#ifdef HAVE_AVX512_APPROX
        if (simd >= DSV4_SIMD_AVX512VBMI) {
            fi_x512_vnni(vp, V, G, nb, n, lim + q0, keys, w0, wmax, w1, sc, kn, ss);
            continue;
        }
        if (simd >= DSV4_SIMD_AVX512) {
            fi_x512_bw(vp, V, G, nb, n, lim + q0, keys, w0, wmax, w1, sc, kn, ss);
            continue;
        }
        if (simd >= DSV4_SIMD_AVX2) {
            fi_avx2(vp, V, G, nb, n, lim + q0, keys, w0, wmax, w1, sc, kn, ss);
            continue;
        }
#endif
        for (int q = 0; q < n; q++) {
            const int64_t end = lim[q0 + q] < w1 ? lim[q0 + q] : w1;
            for (int64_t w = w0; w < end; w++)
                fi_score_ref(vp + q * G, G, nb, keys[w], sc + (size_t)q * ss + w, kn + (size_t)q * ss + w);
        }
    }
    return 1;
}

int dsv4_idx_approx_fp4_int(int simd, const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                            const int64_t *lim, const void *const *keys, int64_t w0, int64_t w1, int nI, int dI,
                            float *scores, float *knorm, size_t ss) {
    if (!fi_shape(nI, dI) || nq < 1) return 0;
    fi_vec buf[FI_V];
    const int G = (nI + 15) / 16, qg = FI_V / G;
    for (int q0 = 0; q0 < nq; q0 += qg) {
        const int n = nq - q0 < qg ? nq - q0 : qg;
        const void *enc[FI_V];
        for (int q = 0; q < n; q++) {
            enc[q] = buf + q * G;
            if (!dsv4_idx_fp4q_encode(simd, qI + (size_t)(q0 + q) * qs, wI + (size_t)(q0 + q) * ws, nI, dI, buf + q * G))
                return 0;
        }
        dsv4_idx_approx_fp4_enc(simd, enc, n, lim + q0, keys, w0, w1, nI, dI, scores + (size_t)q0 * ss,
                                knorm + (size_t)q0 * ss, ss);
    }
    return 1;
}

int dsv4_idx_approx_kernel(int simd, int kernel, const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                           const int64_t *lim, const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI,
                           int dI, float *scores, float *knorm, size_t ss) {
    if (key_fmt == DSV4_ROW_FP4) { /* integer block dots from the bytes, or unpacked in runs (idx_scores.h) */
        const int want_int = kernel == DSV4_IDX_APPROX_INT || (kernel == DSV4_IDX_APPROX_AUTO && simd >= DSV4_IDX_FP4_INT_MIN_SIMD);
        if (want_int && dsv4_idx_approx_fp4_int(simd, qI, qs, wI, ws, nq, lim, keys, w0, w1, nI, dI, scores, knorm, ss))
            return 1;
        fp4_approx_job j = {simd, kernel, qI, wI, qs, ws, ss, nI, dI, scores, knorm};
        dsv4_idx_fp4_runs(simd, lim, nq, keys, w0, w1, dI, fp4_approx_run, &j);
        return 0;
    }
#ifdef HAVE_AVX512_APPROX
    if (simd >= DSV4_SIMD_AVX512 && dI >= 1 && dI <= AP_MAX_DI) {
        if (kernel != DSV4_IDX_APPROX_PANEL && few_fits(nq, nI, dI) &&
            (kernel == DSV4_IDX_APPROX_FEW || nq <= DSV4_IDX_APPROX_FEW_MAX_NQ))
            approx_few_avx512(qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores, knorm, ss);
        else approx_avx512(qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores, knorm, ss);
        return 0;
    }
#endif
    (void)simd, (void)kernel;
    dsv4_idx_approx_ref(qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores, knorm, ss);
    return 0;
}

int dsv4_idx_approx(int simd, const float *qI, size_t qs, const float *wI, size_t ws, int nq, const int64_t *lim,
                    const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI, int dI, float *scores,
                    float *knorm, size_t ss) {
    return dsv4_idx_approx_kernel(simd, DSV4_IDX_APPROX_AUTO, qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores,
                           knorm, ss);
}
