/* attn_ops_x512.c — the AVX-512 level of the attention kernels (contract: attn_ops.h): the
 * scores of a query row's heads against K=V rows and the probability-weighted value sum.
 *
 * Scores. A dot's 8 lanes (attn_ops.h) fill half a 16-lane register, so two dots share
 * one. The query heads are packed in pairs once per call (chunk c of head 2g in lanes
 * 0-7, of head 2g + 1 in lanes 8-15, chunk-major, zero-padded), and each key chunk is
 * loaded once into both halves: an F32 chunk is a single broadcast load (no shuffle
 * uop), a BF16 chunk a 16-byte broadcast load and one byte shuffle that widens it to FP32
 * in both halves. Up to 8 pairs (16 heads) x 2 key rows of accumulators stay in registers
 * over the whole head dimension; per key chunk that is 8 pair loads (each pair held in a
 * register for both rows), 2 key loads and 32 multiply/add uops, so the FP pipes, not the
 * loads or the shuffles, set the pace. Rows too wide for the packed buffer, or calls with
 * too few rows to repay the packing, run the previous layout (two key rows side by side,
 * each query chunk broadcast).
 *
 * Value sum. 8 heads x 32 columns of accumulators over all rows. A BF16 row's 32 values
 * are widened by two word unpacks against zero (one shuffle uop per 16 values instead of
 * a widening and a shift); the unpacks interleave the columns (lanes hold columns 0-3,
 * 8-11, .. and 4-7, 12-15, ..), which changes nothing per column, and the stores put them
 * back in order. The products and sums are the axpy loop's in ascending row order.
 *
 * The functions carry __attribute__((target(...))) without "fma" (attn_x512.h), so this
 * file needs no ISA flags and the library calls them only after cpu.c detection.
 */
#include "kernels/attn_ops.h"

#if defined(DSV4_HAVE_AVX512) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <math.h>
#include <string.h>

#include "kernels/attn_x512.h"
#include "util/hot.h"

/* ---- scores, previous layout (two key rows per register) -------------------------------- */

/* G dots of q rows (stride qs) against rows a (lanes 0-7) and b (lanes 8-15) at once, into
 * out[g * os] and out[g * os + 1] (b's only when two). Each half is the AVX2 dot's
 * register: the same products and sums in the same order, the tail zero-padded. */
X512_INLINE void pair_group(const float *q, size_t qs, const void *a, const void *b, int fmt, int n,
                            float *out, size_t os, int two, const int G) {
    __m512 acc[8];
    for (int g = 0; g < G; g++) acc[g] = _mm512_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m512 kv = x512_pair8(a, b, fmt, i, 0xff);
        for (int g = 0; g < G; g++)
            acc[g] = _mm512_add_ps(acc[g], _mm512_mul_ps(_mm512_broadcast_f32x8(_mm256_loadu_ps(q + g * qs + i)), kv));
    }
    if (i < n) {
        const __mmask8 m = (__mmask8)((1u << (n - i)) - 1);
        const __m512 kv = x512_pair8(a, b, fmt, i, m);
        for (int g = 0; g < G; g++)
            acc[g] = _mm512_add_ps(acc[g],
                                   _mm512_mul_ps(_mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(m, q + g * qs + i)), kv));
    }
    for (int g = 0; g < G; g++) {
        const __m512 t = x512_tree8x2(acc[g]);
        out[g * os] = _mm512_cvtss_f32(t);
        if (two) out[g * os + 1] = x512_lane8(t);
    }
}

X512_INLINE void dot_rows_pairs(const float *q, size_t qs, int nq, const void *const *rows, const int fmt,
                                int n_rows, int n, float *out, size_t os) {
    for (int j = 0; j < n_rows; j += 2) {
        const int two = j + 1 < n_rows;
        const void *a = rows[j], *b = two ? rows[j + 1] : rows[j]; /* a lone last row twice */
        /* the pair after next on its way while this one and the next are scored */
        if (j + 4 < n_rows) x512_prefetch_row(rows[j + 4], fmt, n);
        if (j + 5 < n_rows) x512_prefetch_row(rows[j + 5], fmt, n);
        int h = 0;
        for (; h + 8 <= nq; h += 8) pair_group(q + h * qs, qs, a, b, fmt, n, out + h * os + j, os, two, 8);
        if (h + 4 <= nq) {
            pair_group(q + h * qs, qs, a, b, fmt, n, out + h * os + j, os, two, 4);
            h += 4;
        }
        for (; h < nq; h++) pair_group(q + h * qs, qs, a, b, fmt, n, out + h * os + j, os, two, 1);
    }
}

/* ---- scores, packed head pairs ---------------------------------------------------------- */

/* The packed heads' buffer (floats; 32 KiB, on the calling thread's stack) and the most
 * pairs one pass keeps in registers. */
#define QP_FLOATS 8192
#define QP_MAX 8
/* Fewer rows than this run the previous layout (the packing is n * nq moves). */
#define QP_MIN_ROWS 8

/* Chunk c of a row in fmt in both 8-lane halves: [x(8c .. 8c+8), x(8c .. 8c+8)], lanes past
 * n zero (and not read): m masks the chunk's values, full when m is 0xff. */
X512_INLINE __m512 key_chunk2(const void *row, const int fmt, int c, __mmask8 m) {
    if (fmt == DSV4_ROW_BF16) {
        /* every 128-bit lane holds the chunk's 8 words; the shuffle puts words 0-3 (lanes
         * 0, 2) or 4-7 (lanes 1, 3) into the upper halves of the dwords, zero below */
        const __m512i ctl = _mm512_set_epi8(
            15, 14, -1, -1, 13, 12, -1, -1, 11, 10, -1, -1, 9, 8, -1, -1,
            7, 6, -1, -1, 5, 4, -1, -1, 3, 2, -1, -1, 1, 0, -1, -1,
            15, 14, -1, -1, 13, 12, -1, -1, 11, 10, -1, -1, 9, 8, -1, -1,
            7, 6, -1, -1, 5, 4, -1, -1, 3, 2, -1, -1, 1, 0, -1, -1);
        const uint16_t *p = (const uint16_t *)row + 8 * (int64_t)c;
        const __m512i w = m == 0xff ? _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p))
                                    : _mm512_broadcast_i32x4(_mm_maskz_loadu_epi16(m, p));
        return _mm512_castsi512_ps(_mm512_shuffle_epi8(w, ctl));
    }
    const float *p = (const float *)row + 8 * (int64_t)c;
    return m == 0xff ? _mm512_broadcast_f32x8(_mm256_loadu_ps(p)) : _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(m, p));
}

/* P head pairs (packed qp, nch chunks of n values) against R key rows from rows[0]: the dot
 * of head 2g (2g + 1) with row r goes to out[2g * os + r] (out[(2g + 1) * os + r]) for the
 * heads below nh. Per pair and row, each half is the 8-lane dot of the contract: the same
 * products, summed in chunk order, then the 8-lane tree. */
X512_INLINE void pairs_rows(const float *qp, int nch, int n, const void *const *rows, const int fmt, float *out,
                            size_t os, int nh, const int P, const int R) {
    __m512 acc[QP_MAX][2];
    for (int g = 0; g < P; g++)
        for (int r = 0; r < R; r++) acc[g][r] = _mm512_setzero_ps();
    const int full = n / 8;
    for (int c = 0; c < full; c++) {
        __m512 k[2];
        for (int r = 0; r < R; r++) k[r] = key_chunk2(rows[r], fmt, c, 0xff);
        const float *qc = qp + (size_t)c * P * 16;
        for (int g = 0; g < P; g++) {
            __m512 qv = _mm512_load_ps(qc + 16 * g);
            /* one load for all R rows: GCC would fold it into each multiply, and at 2 rows
             * the loop's 16 + 2 loads a chunk, not its 32 FP uops, set the pace */
            __asm__("" : "+v"(qv));
            for (int r = 0; r < R; r++) acc[g][r] = _mm512_add_ps(acc[g][r], _mm512_mul_ps(qv, k[r]));
        }
    }
    if (full < nch) { /* the tail: values past n are zero in qp and not read from the rows */
        const __mmask8 m = (__mmask8)((1u << (n - 8 * full)) - 1);
        __m512 k[2];
        for (int r = 0; r < R; r++) k[r] = key_chunk2(rows[r], fmt, full, m);
        const float *qc = qp + (size_t)full * P * 16;
        for (int g = 0; g < P; g++) {
            const __m512 qv = _mm512_load_ps(qc + 16 * g);
            for (int r = 0; r < R; r++) acc[g][r] = _mm512_add_ps(acc[g][r], _mm512_mul_ps(qv, k[r]));
        }
    }
    for (int g = 0; g < P; g++)
        for (int r = 0; r < R; r++) {
            const __m512 t = x512_tree8x2(acc[g][r]);
            out[(size_t)(2 * g) * os + r] = _mm512_cvtss_f32(t);
            if (2 * g + 1 < nh) out[(size_t)(2 * g + 1) * os + r] = x512_lane8(t);
        }
}

/* qp <- heads [0, nh) of q (stride qs) as ceil(nh / 2) pairs, chunk-major: qp[(c * P + g) *
 * 16 + l] = q[2g + l / 8][8c + l % 8], zero past n and for a missing odd head (P pairs per
 * chunk, nch chunks). */
X512_INLINE void pack_pairs(const float *q, size_t qs, int nh, int n, int nch, float *qp, const int P) {
    for (int g = 0; g < P; g++)
        for (int half = 0; half < 2; half++) {
            const int h = 2 * g + half;
            const float *qh = q + (size_t)h * qs;
            for (int c = 0; c < nch; c++) {
                float *d = qp + ((size_t)c * P + g) * 16 + 8 * half;
                const int w = h < nh ? (n - 8 * c < 8 ? n - 8 * c : 8) : 0;
                _mm256_storeu_ps(d, _mm256_maskz_loadu_ps((__mmask8)((1u << w) - 1), qh + 8 * c));
            }
        }
}

/* Heads [0, nh) in passes of P pairs against all rows, two rows at a time. */
X512_INLINE void pairs_pass(const float *q, size_t qs, int nh, const void *const *rows, const int fmt,
                            int n_rows, int n, float *out, size_t os, float *qp, const int P) {
    const int nch = (n + 7) / 8;
    pack_pairs(q, qs, nh, n, nch, qp, P);
    int j = 0;
    for (; j + 2 <= n_rows; j += 2) {
        /* two rows further on toward L1 while these are scored (scattered rows of 1-2 KB
         * are too short for the hardware prefetcher) */
        if (j + 4 < n_rows) x512_prefetch_row(rows[j + 4], fmt, n);
        if (j + 5 < n_rows) x512_prefetch_row(rows[j + 5], fmt, n);
        pairs_rows(qp, nch, n, rows + j, fmt, out + j, os, nh, P, 2);
    }
    if (j < n_rows) pairs_rows(qp, nch, n, rows + j, fmt, out + j, os, nh, P, 1);
}

X512_INLINE void dot_rows_fmt(const float *q, size_t qs, int nq, const void *const *rows, const int fmt,
                              int n_rows, int n, float *out, size_t os) {
    const int nch = (n + 7) / 8;
    const int fit = nch > 0 ? QP_FLOATS / (16 * nch) : QP_MAX; /* pairs the buffer holds */
    if (n_rows < QP_MIN_ROWS || fit < 1 || n < 1) {
        dot_rows_pairs(q, qs, nq, rows, fmt, n_rows, n, out, os);
        return;
    }
    float qp[QP_FLOATS] __attribute__((aligned(64))); /* (nch, P, 16) */
    const int per_pass = 2 * (fit < QP_MAX ? fit : QP_MAX); /* heads */
    for (int h0 = 0; h0 < nq; h0 += per_pass) {
        const int nh = nq - h0 < per_pass ? nq - h0 : per_pass, P = (nh + 1) / 2;
        const float *qh = q + (size_t)h0 * qs;
        float *oh = out + (size_t)h0 * os;
        /* P as a constant: the accumulators stay in registers */
        switch (P) {
        case 8: pairs_pass(qh, qs, nh, rows, fmt, n_rows, n, oh, os, qp, 8); break;
        case 7: pairs_pass(qh, qs, nh, rows, fmt, n_rows, n, oh, os, qp, 7); break;
        case 6: pairs_pass(qh, qs, nh, rows, fmt, n_rows, n, oh, os, qp, 6); break;
        case 5: pairs_pass(qh, qs, nh, rows, fmt, n_rows, n, oh, os, qp, 5); break;
        case 4: pairs_pass(qh, qs, nh, rows, fmt, n_rows, n, oh, os, qp, 4); break;
        case 3: pairs_pass(qh, qs, nh, rows, fmt, n_rows, n, oh, os, qp, 3); break;
        case 2: pairs_pass(qh, qs, nh, rows, fmt, n_rows, n, oh, os, qp, 2); break;
        default: pairs_pass(qh, qs, nh, rows, fmt, n_rows, n, oh, os, qp, 1); break;
        }
    }
}

DSV4_HOT_AT(dsv4_attn_dot_rows_x512, 0xd20)
X512_FN void dsv4_attn_dot_rows_x512(const float *q, size_t qs, int nq, const void *const *rows, int fmt,
                                     int n_rows, int n, float *out, size_t os) {
    if (fmt == DSV4_ROW_BF16) dot_rows_fmt(q, qs, nq, rows, DSV4_ROW_BF16, n_rows, n, out, os);
    else dot_rows_fmt(q, qs, nq, rows, DSV4_ROW_F32, n_rows, n, out, os);
}

/* ---- value sum --------------------------------------------------------------------------- */

/* HB heads x CW 16-column chunks from column c (the last chunk masked by m when masked),
 * accumulated in registers over all rows (the tail path: fewer than 32 columns left). */
X512_INLINE void wsum_block16(float *o, size_t os, const float *p, size_t ps, const void *const *rows, int fmt,
                              int n_rows, int c, __mmask16 m, const int HB, const int CW, const int masked) {
    __m512 acc[4][4];
    for (int h = 0; h < HB; h++)
        for (int k = 0; k < CW; k++) acc[h][k] = _mm512_setzero_ps();
    for (int j = 0; j < n_rows; j++) {
        __m512 xv[4];
        if (j + 4 < n_rows) /* this block's columns of a row further on */
            for (int k = 0; k < CW; k++)
                _mm_prefetch((const char *)rows[j + 4] + (size_t)(c + 16 * k) * (fmt == DSV4_ROW_BF16 ? 2 : 4), _MM_HINT_T0);
        for (int k = 0; k < CW; k++)
            xv[k] = x512_row16(rows[j], fmt, c + 16 * k, masked && k == CW - 1 ? m : (__mmask16)0xffff);
        for (int h = 0; h < HB; h++) {
            const __m512 pv = _mm512_set1_ps(p[h * ps + j]);
            for (int k = 0; k < CW; k++) acc[h][k] = _mm512_add_ps(acc[h][k], _mm512_mul_ps(pv, xv[k]));
        }
    }
    for (int h = 0; h < HB; h++)
        for (int k = 0; k < CW; k++)
            _mm512_mask_storeu_ps(o + h * os + c + 16 * k, masked && k == CW - 1 ? m : (__mmask16)0xffff, acc[h][k]);
}

/* HB heads x columns [c, c + 32) over all rows. BF16: x(lo) holds columns c + {0-3, 8-11,
 * 16-19, 24-27}, x(hi) c + {4-7, 12-15, 20-23, 28-31} (the unpacks' order), put back in
 * order by the stores. */
X512_INLINE void wsum_block32(float *o, size_t os, const float *p, size_t ps, const void *const *rows, const int fmt,
                              int n_rows, int c, const int HB) {
    __m512 acc[8][2];
    for (int h = 0; h < HB; h++) acc[h][0] = acc[h][1] = _mm512_setzero_ps();
    const __m512i zero = _mm512_setzero_si512();
    const int bytes = fmt == DSV4_ROW_BF16 ? 2 : 4;
    for (int j = 0; j < n_rows; j++) {
        if (j + 4 < n_rows) { /* this block's columns of a row further on */
            const char *ahead = (const char *)rows[j + 4] + (size_t)c * bytes;
            _mm_prefetch(ahead, _MM_HINT_T0);
            if (fmt != DSV4_ROW_BF16) _mm_prefetch(ahead + 64, _MM_HINT_T0);
        }
        __m512 lo, hi;
        if (fmt == DSV4_ROW_BF16) {
            const __m512i x = _mm512_loadu_si512((const uint16_t *)rows[j] + c);
            lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, x));
            hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, x));
        } else {
            lo = _mm512_loadu_ps((const float *)rows[j] + c);
            hi = _mm512_loadu_ps((const float *)rows[j] + c + 16);
        }
        for (int h = 0; h < HB; h++) {
            const __m512 pv = _mm512_set1_ps(p[h * ps + j]);
            acc[h][0] = _mm512_add_ps(acc[h][0], _mm512_mul_ps(pv, lo));
            acc[h][1] = _mm512_add_ps(acc[h][1], _mm512_mul_ps(pv, hi));
        }
    }
    const __m512i first = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
    const __m512i second = _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8);
    for (int h = 0; h < HB; h++) {
        float *oh = o + h * os + c;
        if (fmt == DSV4_ROW_BF16) {
            _mm512_storeu_ps(oh, _mm512_permutex2var_ps(acc[h][0], first, acc[h][1]));
            _mm512_storeu_ps(oh + 16, _mm512_permutex2var_ps(acc[h][0], second, acc[h][1]));
        } else {
            _mm512_storeu_ps(oh, acc[h][0]);
            _mm512_storeu_ps(oh + 16, acc[h][1]);
        }
    }
}

X512_INLINE void wsum_fmt(float *o, size_t os, int nh, const float *p, size_t ps, const void *const *rows,
                          const int fmt, int n_rows, int n) {
    int c = 0;
    for (; c + 32 <= n; c += 32) { /* full 32-column blocks */
        int h = 0;
        for (; h + 8 <= nh; h += 8) wsum_block32(o + h * os, os, p + h * ps, ps, rows, fmt, n_rows, c, 8);
        if (h + 4 <= nh) {
            wsum_block32(o + h * os, os, p + h * ps, ps, rows, fmt, n_rows, c, 4);
            h += 4;
        }
        for (; h < nh; h++) wsum_block32(o + h * os, os, p + h * ps, ps, rows, fmt, n_rows, c, 1);
    }
    for (; c < n; c += 16) { /* the last 1..31 columns, 16 at a time, the last chunk masked */
        const int w = n - c < 16 ? n - c : 16;
        const __mmask16 m = (__mmask16)((1u << w) - 1);
        int h = 0;
        for (; h + 4 <= nh; h += 4) wsum_block16(o + h * os, os, p + h * ps, ps, rows, fmt, n_rows, c, m, 4, 1, 1);
        for (; h < nh; h++) wsum_block16(o + h * os, os, p + h * ps, ps, rows, fmt, n_rows, c, m, 1, 1, 1);
    }
}

DSV4_HOT_AT(dsv4_attn_wsum_x512, 0x6d0)
X512_FN void dsv4_attn_wsum_x512(float *o, size_t os, int nh, const float *p, size_t ps, const void *const *rows,
                                 int fmt, int n_rows, int n) {
    if (fmt == DSV4_ROW_BF16) wsum_fmt(o, os, nh, p, ps, rows, DSV4_ROW_BF16, n_rows, n);
    else wsum_fmt(o, os, nh, p, ps, rows, DSV4_ROW_F32, n_rows, n);
}

/* ---- softmax ----------------------------------------------------------------------------- */

/* r[k] <- column k of the 16 x 16 block r (r[i] lane k = row i, column k in; r[k] lane i
 * out): unpacks, then in-lane shuffles, then two rounds of 128-bit lane shuffles. */
X512_INLINE void transpose16(__m512 r[16]) {
    __m512 t[16], u[16], v[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]); /* per 128-bit lane q: a(4q) b(4q) a(4q+1) b(4q+1) */
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* u[i + c] lane q: rows i..i+3 of column 4q + c */
        u[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int h = 0; h < 16; h += 8) /* v[h + c]: columns c, c + 8 of rows h..h+7; v[h + 4 + c]: c + 4, c + 12 */
        for (int c = 0; c < 4; c++) {
            v[h + c] = _mm512_shuffle_f32x4(u[h + c], u[h + 4 + c], 0x88);
            v[h + 4 + c] = _mm512_shuffle_f32x4(u[h + c], u[h + 4 + c], 0xdd);
        }
    for (int c = 0; c < 8; c++) {
        r[c] = _mm512_shuffle_f32x4(v[c], v[8 + c], 0x88);     /* columns 0-3, 4-7 */
        r[c + 8] = _mm512_shuffle_f32x4(v[c], v[8 + c], 0xdd); /* columns 8-11, 12-15 */
    }
}

/* Z[l] += p[l * n + j] for j = 0, 1, .. n-1 in order, heads l < G (<= 16) in lanes: blocks
 * of 16 values of every head transposed so that each j's values of all heads are one add.
 * Lanes past G add zeros (not read), as do values past n (not added: the block stops). */
X512_INLINE __m512 softmax_sums(const float *p, int n, int G, __m512 Z) {
    for (int j0 = 0; j0 < n; j0 += 16) {
        const int w = n - j0 < 16 ? n - j0 : 16;
        const __mmask16 m = x512_mask16(w);
        __m512 r[16];
        for (int l = 0; l < 16; l++) r[l] = l < G ? _mm512_maskz_loadu_ps(m, p + (size_t)l * n + j0) : _mm512_setzero_ps();
        transpose16(r);
        for (int k = 0; k < w; k++) Z = _mm512_add_ps(Z, r[k]);
    }
    return Z;
}

/* The softmax of sparse_attn.c for heads in groups of 16: per head the largest raw score
 * by vector maxima (max(x, acc) is x > acc ? x : acc, NaNs never win; the lanes' order only
 * picks among zeros of either sign, which z - m does not tell apart), z - m and the
 * exponentials in lanes (the sinks' terms too: ex gives libm's expf bits), then the sums
 * and the normalisation. */
DSV4_HOT_AT(dsv4_attn_softmax_x512, 0x9f0)
X512_FN void dsv4_attn_softmax_x512(float *p, int n, int nh, const float *sink, float scale, dsv4_expf_rows_fn ex) {
    const __m512 sc = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    for (int h0 = 0; h0 < nh; h0 += 16) {
        const int G = nh - h0 < 16 ? nh - h0 : 16;
        float Z[16] = {0}, m[16], d[16];
        for (int l = 0; l < G; l++) {
            float *ph = p + (size_t)(h0 + l) * n;
            __m512 mx = ninf;
            for (int j = 0; j < n; j += 16) {
                const __mmask16 k = x512_mask16(n - j);
                mx = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, k, ph + j), mx);
            }
            const float mz = _mm512_reduce_max_ps(mx) * scale;
            m[l] = mz > sink[h0 + l] ? mz : sink[h0 + l];
            d[l] = sink[h0 + l] - m[l];
            const __m512 mv = _mm512_set1_ps(m[l]);
            for (int j = 0; j < n; j += 16) { /* z rounded before the difference */
                const __mmask16 k = x512_mask16(n - j);
                _mm512_mask_storeu_ps(ph + j, k, _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, ph + j), sc), mv));
            }
            ex(ph, n, ph);
        }
        ex(d, G, Z); /* the sinks' terms expf(sink - m), all heads in one call */
        float *pg = p + (size_t)h0 * n;
        _mm512_storeu_ps(Z, softmax_sums(pg, n, G, _mm512_loadu_ps(Z)));
        for (int l = 0; l < G; l++) {
            float *ph = pg + (size_t)l * n;
            const __m512 inv = _mm512_set1_ps(1.0f / Z[l]);
            for (int j = 0; j < n; j += 16) {
                const __mmask16 k = x512_mask16(n - j);
                _mm512_mask_storeu_ps(ph + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, ph + j), inv));
            }
        }
    }
}

#endif
