/* linear_avx2_smallm.c — level avx2's small-M kernel: a few activation rows (a batched decode
 * step's dense projections and shared expert, at the rows avx2_kernels' smallm_min_rows give),
 * each weight decoded once per call.
 *
 * The GEMV (linear_avx2.c) decodes a weight in registers for at most 4 activation rows, so 16
 * rows decode every weight four times; the GEMM (linear_avx2_gemm.c) decodes once but into a
 * (48, 512) tile of 96 KB that, with a 16-row block of x (32 KB at 512 columns), does not stay
 * in Zen 3's 32 KB L1, and its 16 rows go as 3-row micro-kernels and a 1-row one. Here a task's
 * weight rows go in panels of SM2_NW = 4: the panel is decoded once by the decoders of
 * linear_avx2.h (the GEMM's dequant_row values: exact, zero-padded to whole 8-column chunks)
 * into per-thread F32 scratch (4, ld), 16 KB at 1024 columns, which stays in L1, and every
 * activation row runs against it in blocks of 3 (the last 4 as 2 + 2): 4 x 3 accumulators,
 * 3 x rows and a weight in the 16 registers, over all the columns in chunks of 8 in ascending
 * order, the last chunk's x zero-padded, then hsum8's tree: linear_fast.h's lanes and order, so
 * every output has the GEMV's and the GEMM's bits, whichever rows share the call.
 *
 * The decode of a panel waits on its weights, which a decode step reads cold from memory and
 * the hardware prefetcher, stopped at every 4 KB page and idle during the register blocks,
 * does not bring in time: the next panel's codes are prefetched, spread over the current
 * panel's register blocks (Zen 3, 16 rows, 2 threads, cold: 0.64-1.06x the time, most shapes
 * 0.75-0.9x; BENCHMARKS.md, session 51 b16).
 *
 * Built with -mavx2 -mfma -mf16c (top CMakeLists.txt). Entry point dsv4_lin_avx2_smallm
 * (linear_avx2.h). */
#include "kernels/linear_avx2.h"

#ifdef DSV4_LIN_AVX2

#define SM2_NW 4 /* weight rows a panel */
#define SM2_MR 3 /* activation rows of the largest register block */

/* Row o's columns [0, n) decoded into dst (zero-padded to a multiple of 8, 32-byte aligned):
 * the GEMM tiles' decoder itself, so both paths hold the same values */
static void sm2_decode_row(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, float *dst) {
    dsv4_lin_avx2_dequant_row(tab, w, o, 0, (int)w->cols, dst);
}

/* hsum8 of a0..a3 (lane j = hsum8(aj)): the same adds of the same pairs in the same tree
 * (linear_fast.h), four outputs at a time: 13 shuffles and adds instead of 4 x 6. With
 * p_k = l_k + l_(k+4), hsum8 is (p0 + p2) + (p1 + p3). */
AINLINE __m128 sm2_hsum8x4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    /* [p(a0) | p(a1)] and [p(a2) | p(a3)] */
    const __m256 u01 = _mm256_add_ps(_mm256_permute2f128_ps(a0, a1, 0x20), _mm256_permute2f128_ps(a0, a1, 0x31));
    const __m256 u23 = _mm256_add_ps(_mm256_permute2f128_ps(a2, a3, 0x20), _mm256_permute2f128_ps(a2, a3, 0x31));
    /* q: [a0: p0+p2, p1+p3, a2: p0+p2, p1+p3 | the same of a1, a3] */
    const __m256 q = _mm256_add_ps(_mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(3, 2, 3, 2)));
    /* r: [y0, y2, y0, y2 | y1, y3, y1, y3] */
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(q, q, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(q, q, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm_unpacklo_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
}

/* MR activation rows (x, stride n) against the SM2_NW panel rows (stride ld): y (MR, rows) at
 * the panel's first output, nb (<= SM2_NW) of them stored a row. Per 8 columns SM2_NW panel
 * loads (L1) and MR x loads feed SM2_NW * MR FMAs. */
AINLINE void sm2_rows(int MR, const float *x, int64_t n, const float *panel, int64_t ld, float *y, int64_t rows,
                      int nb) {
    __m256 a[SM2_MR][SM2_NW];
    for (int s = 0; s < MR; s++)
        for (int j = 0; j < SM2_NW; j++) a[s][j] = _mm256_setzero_ps();
    const int64_t nf = n & ~(int64_t)7;
    for (int64_t i = 0; i < nf; i += 8) {
        __m256 xv[SM2_MR];
        for (int s = 0; s < MR; s++) xv[s] = _mm256_loadu_ps(x + s * n + i);
        for (int j = 0; j < SM2_NW; j++) {
            __m256 wv = _mm256_load_ps(panel + j * ld + i);
            /* one load per weight vector, used MR times (not folded into every FMA) */
            __asm__("" : "+x"(wv));
            for (int s = 0; s < MR; s++) a[s][j] = _mm256_fmadd_ps(xv[s], wv, a[s][j]);
        }
    }
    if (nf < n) { /* the last chunk: x zero-padded, the panel's padding is zero */
        const __m256i m = mask_first((int)(n - nf));
        __m256 xv[SM2_MR];
        for (int s = 0; s < MR; s++) xv[s] = _mm256_maskload_ps(x + s * n + nf, m);
        for (int j = 0; j < SM2_NW; j++) {
            const __m256 wv = _mm256_load_ps(panel + j * ld + nf);
            for (int s = 0; s < MR; s++) a[s][j] = _mm256_fmadd_ps(xv[s], wv, a[s][j]);
        }
    }
    for (int s = 0; s < MR; s++) {
        const __m128 v = sm2_hsum8x4(a[s][0], a[s][1], a[s][2], a[s][3]);
        if (nb == SM2_NW) {
            _mm_storeu_ps(y + s * rows, v);
        } else {
            float t[4];
            _mm_storeu_ps(t, v);
            for (int j = 0; j < nb; j++) y[s * rows + j] = t[j];
        }
    }
}

/* Rows of the next register block when `left` rows remain: blocks of 3, the last 4 as 2 + 2
 * (a 1-row block runs 4 FMAs on 5 loads, each accumulator a dependent chain). Which rows
 * share a block never changes a bit. */
static inline int sm2_block_rows(int left) { return left == 4 ? 2 : left < SM2_MR ? left : SM2_MR; }

/* bytes of one weight row's codes (rows are contiguous in every format the kernel takes) */
static inline int64_t sm2_row_bytes(const dsv4_mat *w) {
    switch (w->fmt) {
    case DSV4_WF_F32: return w->cols * 4;
    case DSV4_WF_F16:
    case DSV4_WF_BF16: return w->cols * 2;
    case DSV4_WF_FP8: return w->cols;
    default: return w->cols / 2; /* FP4, FP4L */
    }
}

#ifndef SM2_PF_HINT
#define SM2_PF_HINT _MM_HINT_T0
#endif

/* the level's small-M (dsv4_lin_kernels.smallm): outputs [o0, o1) of all n_rows rows, panels
 * of SM2_NW weight rows in scratch (SM2_NW x cols rounded up to 8, <= LIN_SCRATCH_FLOATS: the
 * driver checks LIN_SMALLM_NB's larger panel) */
void dsv4_lin_avx2_smallm(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                          int64_t o0, int64_t o1, float *scratch) {
    const int64_t n = w->cols, rows = w->rows, ld = (n + 15) & ~(int64_t)15;
    float *panel = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63); /* (SM2_NW, ld) */
    const int64_t rb = sm2_row_bytes(w), lines = (SM2_NW * rb + 63) / 64;
    int nblk = 0; /* register blocks a panel */
    for (int s0 = 0; s0 < n_rows; s0 += sm2_block_rows(n_rows - s0)) nblk++;
    for (int64_t o = o0; o < o1; o += SM2_NW) {
        const int nb = o1 - o < SM2_NW ? (int)(o1 - o) : SM2_NW;
        for (int j = 0; j < nb; j++) sm2_decode_row(c->tab, w, o + j, panel + j * ld);
        for (int j = nb; j < SM2_NW; j++) memset(panel + j * ld, 0, sizeof(float) * (size_t)ld);
        /* the next panel's codes, spread over this panel's register blocks; past o1 the next
         * task's rows (a prefetch never faults; the address formed as an integer) */
        const uintptr_t nx = (uintptr_t)w->w + (uintptr_t)((o + SM2_NW) * rb);
        for (int s0 = 0, mr, b = 0; s0 < n_rows; s0 += mr, b++) {
            for (int64_t l = b * lines / nblk, le = (b + 1) * lines / nblk; l < le; l++)
                _mm_prefetch((const char *)(nx + (uintptr_t)(l * 64)), SM2_PF_HINT);
            mr = sm2_block_rows(n_rows - s0);
            const float *xs = x + (int64_t)s0 * n;
            float *ys = y + (int64_t)s0 * rows + o;
            if (mr == 3) sm2_rows(3, xs, n, panel, ld, ys, rows, nb);
            else if (mr == 2) sm2_rows(2, xs, n, panel, ld, ys, rows, nb);
            else sm2_rows(1, xs, n, panel, ld, ys, rows, nb);
        }
    }
}

#endif
