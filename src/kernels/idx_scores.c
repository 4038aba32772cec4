/* idx_scores.c — lightning-indexer scores of a query block (contract: idx_scores.h).
 *
 * The AVX-512 functions carry __attribute__((target(...))) without "fma" (multiply and add
 * stay two roundings; C11 mode also keeps GCC from contracting them), so this file needs
 * no ISA flags and runs them only at the level cpu.c detected.
 */
#include "kernels/idx_scores.h"

#include "kernels/codec.h"
#include "kernels/cpu.h"
#include "kernels/kv_rows.h"

/* Heads whose dots one dot_rows call computes (bounds the stack). */
#define IDX_HEAD_CHUNK 32

void dsv4_idx_scores_ref(const dsv4_attn_ops *ops, const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                         const int64_t *lim, const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI,
                         int dI, float *scores, size_t ss) {
    float dot[IDX_HEAD_CHUNK];
    for (int q = 0; q < nq; q++) {
        const float *qq = qI + (size_t)q * qs, *wq = wI + (size_t)q * ws;
        const int64_t end = lim[q] < w1 ? lim[q] : w1;
        for (int64_t w = w0; w < end; w++) {
            float s = 0.0f;
            for (int h0 = 0; h0 < nI; h0 += IDX_HEAD_CHUNK) {
                const int nh = nI - h0 < IDX_HEAD_CHUNK ? nI - h0 : IDX_HEAD_CHUNK;
                ops->dot_rows(qq + (size_t)h0 * dI, (size_t)dI, nh, keys + w, key_fmt, 1, dI, dot, 1);
                for (int h = 0; h < nh; h++) s += wq[h0 + h] * (dot[h] > 0.0f ? dot[h] : 0.0f);
            }
            scores[(size_t)q * ss + w] = s;
        }
    }
}

#if defined(DSV4_HAVE_AVX512) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX512_IDX 1
#include "kernels/attn_x512.h"

/* The widest key the interleaved pair buffer holds (Flash: dI = 128). */
#define IDX_MAX_DI 1024

/* G heads from h0 of query qq against the interleaved key pair kp (nc chunks, the last one
 * masked by tm when dI % 8 != 0), added into the score pair s in ascending head order. */
X512_INLINE __m512 pair_heads(const float *qq, const float *wq, int h0, int dI, const float *kp, int nc,
                              __mmask8 tm, __m512 s, const int G) {
    __m512 acc[8];
    for (int g = 0; g < G; g++) acc[g] = _mm512_setzero_ps();
    const int full = tm == 0xff ? nc : nc - 1;
    for (int c = 0; c < full; c++) {
        const __m512 kv = _mm512_load_ps(kp + 16 * c);
        for (int g = 0; g < G; g++) {
            const __m512 qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(qq + (size_t)(h0 + g) * dI + 8 * c));
            acc[g] = _mm512_add_ps(acc[g], _mm512_mul_ps(qv, kv));
        }
    }
    if (full < nc) { /* the zero-padded last chunk: 0 * 0 adds +0, as in the 8-lane dot */
        const __m512 kv = _mm512_load_ps(kp + 16 * full);
        for (int g = 0; g < G; g++) {
            const __m512 qv = _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(tm, qq + (size_t)(h0 + g) * dI + 8 * full));
            acc[g] = _mm512_add_ps(acc[g], _mm512_mul_ps(qv, kv));
        }
    }
    const __m512 zero = _mm512_setzero_ps();
    for (int g = 0; g < G; g++) {
        /* max(d, +0) is d > 0 ? d : +0 for every d, -0 and NaN included */
        const __m512 r = _mm512_max_ps(x512_tree8x2(acc[g]), zero);
        s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_set1_ps(wq[h0 + g]), r));
    }
    return s;
}

/* FP4 keys a and b (dI % 32 == 0) into the interleaved pair kp (chunk c of a in lanes 0-7, of
 * b in lanes 8-15) straight from their bytes: 16 values of a key (8 bytes) widened as
 * unpack_fp4_x512 widens them, the e2m1 table permuted and multiplied by the block's scale
 * (the same exact products as dsv4_row_unpack), and the two keys' 16 values interleaved into
 * two chunks by 128-bit lane shuffles. The kernel then reads kp as it reads F32 keys' pairs:
 * the same bits as scoring their F32 copies, without the copies. */
X512_INLINE void fp4_pair_x512(float *kp, const uint8_t *a, const uint8_t *b, int dI) {
    const __m512 tab = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                      -2.0f, -3.0f, -4.0f, -6.0f);
    const __m512i lo4 = _mm512_set1_epi64(15);
    for (int bk = 0; bk < dI / 32; bk++) {
        const __m512 sa = _mm512_set1_ps(dsv4_e8m0_to_f32(a[dI / 2 + bk]));
        const __m512 sb = _mm512_set1_ps(dsv4_e8m0_to_f32(b[dI / 2 + bk]));
        for (int h = 0; h < 2; h++) {
            const __m512i ya = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(a + 16 * bk + 8 * h)));
            const __m512i yb = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(b + 16 * bk + 8 * h)));
            const __m512i za = _mm512_or_si512(_mm512_and_si512(ya, lo4), _mm512_slli_epi64(_mm512_srli_epi64(ya, 4), 32));
            const __m512i zb = _mm512_or_si512(_mm512_and_si512(yb, lo4), _mm512_slli_epi64(_mm512_srli_epi64(yb, 4), 32));
            const __m512 va = _mm512_mul_ps(_mm512_permutexvar_ps(za, tab), sa); /* values 32 bk + 16 h .. + 15 */
            const __m512 vb = _mm512_mul_ps(_mm512_permutexvar_ps(zb, tab), sb);
            float *c = kp + 16 * (4 * bk + 2 * h);
            _mm512_store_ps(c, _mm512_shuffle_f32x4(va, vb, 0x44));      /* chunk 4 bk + 2 h */
            _mm512_store_ps(c + 16, _mm512_shuffle_f32x4(va, vb, 0xEE)); /* chunk 4 bk + 2 h + 1 */
        }
    }
}

X512_INLINE void idx_scores_fmt(const float *qI, size_t qs, const float *wI, size_t ws, int nq, const int64_t *lim,
                                const void *const *keys, const int fmt, int64_t w0, int64_t w1, int nI, int dI,
                                float *scores, size_t ss) {
    _Alignas(64) float kp[2 * IDX_MAX_DI]; /* (chunks, 2 keys, 8) the interleaved pair */
    const int nc = (dI + 7) / 8;
    const __mmask8 tm = (dI % 8) ? (__mmask8)((1u << (dI % 8)) - 1) : 0xff;
    int64_t wmax = w0; /* the keys any query of the block sees */
    for (int q = 0; q < nq; q++) {
        const int64_t e = lim[q] < w1 ? lim[q] : w1;
        wmax = e > wmax ? e : wmax;
    }
    for (int64_t w = w0; w < wmax; w += 2) {
        const int two = w + 1 < wmax;
        if (fmt == DSV4_ROW_FP4) fp4_pair_x512(kp, keys[w], keys[two ? w + 1 : w], dI);
        else
            for (int c = 0; c < nc; c++) {
                const __mmask8 m = c == nc - 1 ? tm : 0xff;
                _mm512_store_ps(kp + 16 * c, x512_pair8(keys[w], keys[two ? w + 1 : w], fmt, 8 * c, m));
            }
        for (int q = 0; q < nq; q++) {
            const int64_t e = lim[q] < w1 ? lim[q] : w1;
            if (w >= e) continue;
            const float *qq = qI + (size_t)q * qs, *wq = wI + (size_t)q * ws;
            __m512 s = _mm512_setzero_ps();
            int h = 0;
            for (; h + 8 <= nI; h += 8) s = pair_heads(qq, wq, h, dI, kp, nc, tm, s, 8);
            if (h + 4 <= nI) {
                s = pair_heads(qq, wq, h, dI, kp, nc, tm, s, 4);
                h += 4;
            }
            for (; h < nI; h++) s = pair_heads(qq, wq, h, dI, kp, nc, tm, s, 1);
            float *sq = scores + (size_t)q * ss;
            sq[w] = _mm512_cvtss_f32(s);
            if (w + 1 < e) sq[w + 1] = x512_lane8(s);
        }
    }
}

X512_FN static void idx_scores_avx512(const float *qI, size_t qs, const float *wI, size_t ws, int nq,
                                      const int64_t *lim, const void *const *keys, int fmt, int64_t w0, int64_t w1,
                                      int nI, int dI, float *scores, size_t ss) {
    if (fmt == DSV4_ROW_BF16) idx_scores_fmt(qI, qs, wI, ws, nq, lim, keys, DSV4_ROW_BF16, w0, w1, nI, dI, scores, ss);
    else if (fmt == DSV4_ROW_FP4) idx_scores_fmt(qI, qs, wI, ws, nq, lim, keys, DSV4_ROW_FP4, w0, w1, nI, dI, scores, ss);
    else idx_scores_fmt(qI, qs, wI, ws, nq, lim, keys, DSV4_ROW_F32, w0, w1, nI, dI, scores, ss);
}
#endif

/* ---- FP4 keys ---------------------------------------------------------------------------- */

#define FP4_RUN_MAX 64   /* keys per run (the buffer holds fewer when dI > 128) */
#define FP4_QGROUP 16    /* queries per call on one run */

#ifdef HAVE_AVX512_IDX
/* An FP4 key of dI values (dI % 32 == 0: whole blocks) into x, as dsv4_row_unpack: the two
 * nibbles of each byte widened into a 64-bit lane (low nibble in its low dword, high in its
 * high dword: the values' order), the 16 e2m1 values by one permute, times the block's
 * scale (the same exact product as the scalar loop). */
X512_FN static void unpack_fp4_x512(float *x, const uint8_t *src, int dI) {
    const __m512 tab = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                      -2.0f, -3.0f, -4.0f, -6.0f);
    const __m512i lo4 = _mm512_set1_epi64(15);
    const uint8_t *scales = src + dI / 2;
    for (int b = 0; b < dI / 32; b++) {
        const __m512 s = _mm512_set1_ps(dsv4_e8m0_to_f32(scales[b]));
        for (int h = 0; h < 2; h++) {
            const __m512i y = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(src + 16 * b + 8 * h)));
            const __m512i z = _mm512_or_si512(_mm512_and_si512(y, lo4), _mm512_slli_epi64(_mm512_srli_epi64(y, 4), 32));
            _mm512_store_ps(x + 32 * b + 16 * h, _mm512_mul_ps(_mm512_permutexvar_ps(z, tab), s));
        }
    }
}
#endif

/* Key w of the run into x (64-byte aligned). */
static void unpack_key(int simd, float *x, const void *key, int dI) {
#ifdef HAVE_AVX512_IDX
    if (simd >= DSV4_SIMD_AVX512 && dI % 32 == 0) {
        unpack_fp4_x512(x, key, dI);
        return;
    }
#endif
    (void)simd;
    dsv4_row_unpack(DSV4_ROW_FP4, x, key, dI, 0);
}

void dsv4_idx_fp4_runs(int simd, const int64_t *lim, int nq, const void *const *keys, int64_t w0, int64_t w1, int dI,
                       dsv4_idx_run_fn fn, void *user) {
    _Alignas(64) float buf[DSV4_IDX_FP4_RUN_FLOATS];
    const void *fk[FP4_RUN_MAX];
    int64_t glim[FP4_QGROUP];
    int run = DSV4_IDX_FP4_RUN_FLOATS / (dI > 0 ? dI : 1); /* >= 1: engine create refuses wider FP4 keys */
    if (run > FP4_RUN_MAX) run = FP4_RUN_MAX;
    int64_t wmax = w0;
    for (int q = 0; q < nq; q++) {
        const int64_t e = lim[q] < w1 ? lim[q] : w1;
        wmax = e > wmax ? e : wmax;
    }
    for (int64_t c0 = w0; c0 < wmax && run > 0; c0 += run) {
        const int64_t n = wmax - c0 < run ? wmax - c0 : run;
        for (int64_t j = 0; j < n; j++) {
            unpack_key(simd, buf + j * dI, keys[c0 + j], dI);
            fk[j] = buf + j * dI;
        }
        for (int q0 = 0; q0 < nq; q0 += FP4_QGROUP) {
            const int g = nq - q0 < FP4_QGROUP ? nq - q0 : FP4_QGROUP;
            for (int k = 0; k < g; k++) {
                const int64_t e = (lim[q0 + k] < w1 ? lim[q0 + k] : w1) - c0;
                glim[k] = e < 0 ? 0 : e; /* the kernels stop at the run's end themselves */
            }
            fn(user, q0, g, glim, fk, c0, n);
        }
    }
}

typedef struct {
    int simd;
    const dsv4_attn_ops *ops;
    const float *qI, *wI;
    size_t qs, ws, ss;
    int nI, dI;
    float *scores;
} fp4_scores_job;

static void fp4_scores_run(void *user, int q0, int g, const int64_t *glim, const void *const *fkeys, int64_t c0,
                           int64_t n) {
    const fp4_scores_job *j = user;
    dsv4_idx_scores(j->simd, j->ops, j->qI + (size_t)q0 * j->qs, j->qs, j->wI + (size_t)q0 * j->ws, j->ws, g, glim,
                    fkeys, DSV4_ROW_F32, 0, n, j->nI, j->dI, j->scores + (size_t)q0 * j->ss + c0, j->ss);
}

void dsv4_idx_scores(int simd, const dsv4_attn_ops *ops, const float *qI, size_t qs, const float *wI, size_t ws,
                     int nq, const int64_t *lim, const void *const *keys, int key_fmt, int64_t w0, int64_t w1, int nI,
                     int dI, float *scores, size_t ss) {
    if (key_fmt == DSV4_ROW_FP4) {
#ifdef HAVE_AVX512_IDX
        if (simd >= DSV4_SIMD_AVX512 && dI % 32 == 0 && dI >= 32 && dI <= IDX_MAX_DI) { /* from the bytes */
            idx_scores_avx512(qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores, ss);
            return;
        }
#endif
        fp4_scores_job j = {simd, ops, qI, wI, qs, ws, ss, nI, dI, scores};
        dsv4_idx_fp4_runs(simd, lim, nq, keys, w0, w1, dI, fp4_scores_run, &j);
        return;
    }
#ifdef HAVE_AVX512_IDX
    if (simd >= DSV4_SIMD_AVX512 && dI >= 1 && dI <= IDX_MAX_DI) {
        idx_scores_avx512(qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores, ss);
        return;
    }
#endif
    (void)simd;
    dsv4_idx_scores_ref(ops, qI, qs, wI, ws, nq, lim, keys, key_fmt, w0, w1, nI, dI, scores, ss);
}
