/* w8a8.c — P2 W8A8: weight and activation quantization, the scalar oracle, and the
 * threaded kernel (portable and AVX2) behind dsv4_linear for DSV4_WF_I8. See w8a8.h for
 * the arithmetic.
 *
 * Kernel plan for one call, in passes of up to W8_PASS_ROWS activation rows:
 *   1. quantize the pass's rows once into a call buffer (q_x zero-padded to a multiple of
 *      16 columns, and s_x): rows spread over the threads when there is enough work. The
 *      division x / s_x is the costly part (a vdivps per 8 values), so it is done once per
 *      row, not once per output block;
 *   2. output blocks (at most W8_MAX_PER outputs, a weight block sized to stay in L2) spread
 *      over the threads. A task walks the pass's rows in fours and, within each block of
 *      W8_KB columns (the four activation rows stay in L1), its outputs in threes: 4 x 3
 *      tiles, 12 int32 vector accumulators carried over between column blocks. Decode (one
 *      row) takes outputs in fours over the whole row: the weights stream from memory once.
 * Integer sums are exact, so neither the tiling nor the thread count can change a bit.
 * The AVX2 level widens weights with vpmovsxbw and multiplies with vpmaddwd against
 * activations stored pre-widened to int16 (two products per int32 lane per step; 2*127^2
 * cannot saturate); the portable level stores q_x as int8 and sums in plain C.
 * The functions of the AVX2 level carry __attribute__((target("avx2"))) so the file needs
 * no ISA flags; they run only when the kernel context's level is AVX2 (cpu.c checked the
 * CPU and the OS).
 */
#include "kernels/w8a8.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/codec.h"
#include "kernels/cpu.h"
#include "kernels/kctx.h"
#include "kernels/linear_fast.h"
#include "util/err.h"

#if defined(DSV4_HAVE_AVX2) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define W8_AVX2 1
#include <immintrin.h>
#endif

#define W8_AMAX_FLOOR 1e-4f   /* activation amax floor (serving.md §f) */
#define W8_PASS_ROWS 256      /* activation rows quantized per pass (bounds the buffer) */
#define W8_SERIAL_MACS (1 << 16) /* below this a phase runs on the caller's thread */
#define W8_TASK_WBYTES (128 * 1024) /* weight bytes of a GEMM task: stays in L2 */
#define W8_MAX_PER 64         /* most outputs of one dot task */
#define W8_KB 512             /* columns per block of a batched task (x block in L1) */

int dsv4_w8a8_check_cols(int64_t cols, const char *what, dsv4_err *err) {
    if (cols <= DSV4_W8A8_MAX_COLS) return DSV4_OK;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                     "w8a8: %s has %lld inputs; the int32 sum of 127*127 products overflows "
                     "above %d", what ? what : "matrix", (long long)cols, DSV4_W8A8_MAX_COLS);
}

static int64_t round64(int64_t v) { return (v + 63) & ~(int64_t)63; }

int64_t dsv4_w8a8_storage_bytes(int64_t rows, int64_t cols) {
    return round64(rows * cols) + rows * (int64_t)sizeof(float);
}

/* round_half_even(v / s) clamped to +-127, for finite v and finite s > 0 */
static inline int8_t quant1(float v, float s) {
    float r = rintf(v / s); /* the default rounding mode: to nearest, ties to even */
    r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
    return (int8_t)r;
}

/* max|x| over n values; *bad = 1 when one is NaN or infinite */
static float amax_row(const float *x, int64_t n, int *bad) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (!(a <= FLT_MAX)) *bad = 1;
        else if (a > m) m = a;
    }
    return m;
}

float dsv4_w8a8_quantize_row(const float *x, int64_t n, int8_t *q) {
    int bad = 0;
    float amax = amax_row(x, n, &bad);
    if (bad) {
        memset(q, 0, (size_t)n);
        return NAN;
    }
    if (amax < W8_AMAX_FLOOR) amax = W8_AMAX_FLOOR;
    const float s = amax / 127.0f;
    for (int64_t i = 0; i < n; i++) q[i] = quant1(x[i], s);
    return s;
}

#ifdef W8_AVX2
#define AVX2_FN __attribute__((target("avx2")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2")))

/* amax_row with 8 lanes (max is exact, so the order does not matter) */
AVX2_FN static float amax_avx2(const float *x, int64_t n, int *bad) {
    const int64_t n8 = n & ~(int64_t)7;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 fmax = _mm256_set1_ps(FLT_MAX);
    __m256 m = _mm256_setzero_ps(), badv = _mm256_setzero_ps();
    for (int64_t i = 0; i < n8; i += 8) {
        const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), absmask);
        badv = _mm256_or_ps(badv, _mm256_cmp_ps(a, fmax, _CMP_NLE_UQ)); /* NaN or inf */
        m = _mm256_max_ps(m, a);
    }
    float mv[8];
    _mm256_storeu_ps(mv, m);
    if (_mm256_movemask_ps(badv)) *bad = 1;
    float amax = amax_row(x + n8, n - n8, bad);
    for (int l = 0; l < 8; l++) amax = mv[l] > amax ? mv[l] : amax;
    return amax;
}

/* quant1 on 8 lanes: the same division and rounding, so the same values. Writes int16 (q16)
 * or int8 (q8), whichever is not NULL. */
AVX2_FN static void quant_avx2(const float *x, int64_t n, float s, int16_t *q16, int8_t *q8) {
    const int64_t n8 = n & ~(int64_t)7;
    const __m256 vs = _mm256_set1_ps(s), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    for (int64_t i = 0; i < n8; i += 8) {
        __m256 v = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), vs),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        const __m256i iv = _mm256_cvttps_epi32(v);
        const __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(iv), _mm256_extracti128_si256(iv, 1));
        if (q16) _mm_storeu_si128((__m128i *)(q16 + i), h);
        else _mm_storel_epi64((__m128i *)(q8 + i), _mm_packs_epi16(h, h));
    }
    for (int64_t i = n8; i < n; i++) {
        if (q16) q16[i] = quant1(x[i], s);
        else q8[i] = quant1(x[i], s);
    }
}
#endif

/* ---- weights --------------------------------------------------------------------------- */

typedef struct {
    const dsv4_mat *src;
    int8_t *q;        /* (rows, cols) */
    float *s;         /* (rows) */
    float *rowbuf;    /* (n_threads, cols) dequantized row */
    int64_t *bad;     /* (n_threads) smallest row with a non-finite weight, or -1 */
    int64_t per;      /* rows per task */
    int avx2;         /* quantize with the AVX2 helpers (same values) */
} wq_job;

static float scale_at(const dsv4_mat *m, int64_t idx) {
    if (m->scale_is_f32) return ((const float *)m->scale)[idx];
    return dsv4_e8m0_to_f32(((const uint8_t *)m->scale)[idx]);
}

/* dsv4_mat_row, faster for the packed formats (the real model's experts are FP4): the same
 * products, code value times block scale, through a table of the 16 FP4 products per
 * 32-column block, or of the 256 e4m3 values */
static void source_row(const dsv4_mat *m, int64_t o, float *out) {
    const int64_t n = m->cols;
    float tab[256];
    if (m->fmt == DSV4_WF_FP4 && n % 32 == 0) {
        const uint8_t *p = (const uint8_t *)m->w + o * (n / 2);
        float e2m1[16];
        for (int c = 0; c < 16; c++) e2m1[c] = dsv4_e2m1_to_f32((uint8_t)c);
        for (int64_t b = 0; b < n / 32; b++) {
            const float sc = scale_at(m, o * (n / 32) + b);
            for (int c = 0; c < 16; c++) tab[c] = e2m1[c] * sc;
            for (int i = 0; i < 16; i++) {
                out[b * 32 + 2 * i] = tab[p[b * 16 + i] & 15];
                out[b * 32 + 2 * i + 1] = tab[p[b * 16 + i] >> 4];
            }
        }
    } else if (m->fmt == DSV4_WF_FP4L && n % 128 == 0) {
        dsv4_lin_dequant_fp4l(NULL, m, o, 0, (int)n, out); /* the same products, a line at a time */
    } else if (m->fmt == DSV4_WF_FP4B && n % 64 == 0) {
        dsv4_lin_dequant_fp4b(NULL, m, o, 0, (int)n, out); /* the same, a 64-column chunk at a time */
    } else if (m->fmt == DSV4_WF_FP8) {
        const uint8_t *p = (const uint8_t *)m->w + o * n;
        const int64_t scols = (n + 127) / 128;
        for (int c = 0; c < 256; c++) tab[c] = dsv4_e4m3_to_f32((uint8_t)c);
        for (int64_t b = 0; b < scols; b++) {
            const float sc = scale_at(m, (o / 128) * scols + b);
            const int64_t e = (b + 1) * 128 < n ? (b + 1) * 128 : n;
            for (int64_t i = b * 128; i < e; i++) out[i] = tab[p[i]] * sc;
        }
    } else {
        dsv4_mat_row(m, o, out);
    }
}

static void quantize_weight_rows(const wq_job *j, int64_t o0, int64_t o1, int tid) {
    const int64_t n = j->src->cols;
    float *row = j->rowbuf + (int64_t)tid * n;
    for (int64_t o = o0; o < o1; o++) {
        int8_t *q = j->q + o * n;
        source_row(j->src, o, row);
        int bad = 0;
        float amax;
#ifdef W8_AVX2
        if (j->avx2) amax = amax_avx2(row, n, &bad);
        else
#endif
            amax = amax_row(row, n, &bad);
        const float s = amax / 127.0f;
        if (bad) {
            if (j->bad[tid] < 0 || o < j->bad[tid]) j->bad[tid] = o;
            memset(q, 0, (size_t)n);
            j->s[o] = 1.0f;
        } else if (s == 0.0f) {
            /* all zeros (or so tiny that amax / 127 underflows): q = 0 with s_w = 1 */
            memset(q, 0, (size_t)n);
            j->s[o] = 1.0f;
        } else {
#ifdef W8_AVX2
            if (j->avx2) quant_avx2(row, n, s, NULL, q);
            else
#endif
                for (int64_t i = 0; i < n; i++) q[i] = quant1(row[i], s);
            j->s[o] = s;
        }
    }
}

static void wq_task(void *arg, int t, int tid) {
    const wq_job *j = arg;
    const int64_t o0 = (int64_t)t * j->per;
    const int64_t o1 = o0 + j->per < j->src->rows ? o0 + j->per : j->src->rows;
    quantize_weight_rows(j, o0, o1, tid);
}

int dsv4_w8a8_quantize_weights(dsv4_kctx *k, const dsv4_mat *src, void *storage, dsv4_mat *dst,
                               dsv4_err *err) {
    const int64_t rows = src->rows, cols = src->cols;
    int rc = dsv4_w8a8_check_cols(cols, "weight matrix", err);
    if (rc) return rc;
    if (rows < 0 || cols < 0 || src->fmt == DSV4_WF_NONE || !src->w)
        return dsv4_fail(err, DSV4_ERR_ARG, "w8a8: cannot quantize an absent or empty matrix "
                         "[%lld, %lld] (format %d)", (long long)rows, (long long)cols, (int)src->fmt);
    const int nt = k ? dsv4_kctx_threads(k) : 1;
    wq_job j = {src, storage, (float *)((char *)storage + round64(rows * cols)), NULL, NULL, 16, 0};
#ifdef W8_AVX2
    j.avx2 = k && dsv4_kctx_simd(k) >= DSV4_SIMD_AVX2;
#endif
    j.rowbuf = malloc(sizeof(float) * (size_t)(cols > 0 ? cols : 1) * (size_t)nt);
    j.bad = malloc(sizeof(int64_t) * (size_t)nt);
    if (!j.rowbuf || !j.bad) {
        free(j.rowbuf);
        free(j.bad);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "w8a8: out of memory quantizing a [%lld, %lld] matrix",
                         (long long)rows, (long long)cols);
    }
    for (int t = 0; t < nt; t++) j.bad[t] = -1;
    const int64_t n_tasks = (rows + j.per - 1) / j.per;
    if (k && nt > 1 && rows * cols >= W8_SERIAL_MACS && n_tasks <= 0x7fffffff)
        dsv4_kctx_parallel(k, (int)n_tasks, wq_task, &j);
    else
        quantize_weight_rows(&j, 0, rows, 0);
    int64_t bad = -1;
    for (int t = 0; t < nt; t++)
        if (j.bad[t] >= 0 && (bad < 0 || j.bad[t] < bad)) bad = j.bad[t];
    free(j.rowbuf);
    free(j.bad);
    if (bad >= 0)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "w8a8: row %lld of a [%lld, %lld] matrix has a "
                         "non-finite weight", (long long)bad, (long long)rows, (long long)cols);
    *dst = (dsv4_mat){DSV4_WF_I8, rows, cols, j.q, j.s, 1, 0};
    return DSV4_OK;
}

/* ---- the scalar oracle ------------------------------------------------------------------ */

void dsv4_w8a8_linear_ref(const dsv4_mat *w, const float *x, int n_rows, float *y, int8_t *scratch) {
    const int64_t in = w->cols, out = w->rows;
    const int8_t *wq = w->w;
    const float *sw = w->scale;
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (int64_t)r * in;
        float sx;
        if (scratch) {
            sx = dsv4_w8a8_quantize_row(xr, in, scratch);
        } else {
            int bad = 0;
            float amax = amax_row(xr, in, &bad);
            if (amax < W8_AMAX_FLOOR) amax = W8_AMAX_FLOOR;
            sx = bad ? NAN : amax / 127.0f;
        }
        for (int64_t o = 0; o < out; o++) {
            /* int64: the same value as the kernels' int32 sum wherever that cannot overflow,
             * and still defined for a hand-made matrix wider than DSV4_W8A8_MAX_COLS */
            int64_t acc = 0;
            const int8_t *wr = wq + o * in;
            if (scratch) {
                for (int64_t i = 0; i < in; i++) acc += (int32_t)scratch[i] * wr[i];
            } else if (sx == sx) {
                for (int64_t i = 0; i < in; i++) acc += (int32_t)quant1(xr[i], sx) * wr[i];
            }
            y[(int64_t)r * out + o] = (sx * sw[o]) * (float)acc;
        }
    }
}

/* ---- the kernel ------------------------------------------------------------------------- */

typedef struct {
    const dsv4_mat *w;
    const float *x;   /* (n_rows, cols) this pass */
    int n_rows;
    float *y;         /* (n_rows, rows) this pass */
    void *xq;         /* (n_rows, kp) int16 (AVX2) or int8 (portable), zero-padded */
    float *sx;        /* (n_rows) */
    int64_t kp;       /* cols rounded up to 16 */
    int64_t per;      /* outputs per dot task */
    int qper;         /* activation rows per quantize task */
} w8_job;

/* portable level: q_x int8 */
static void quant_rows_scalar(const w8_job *j, int r0, int r1) {
    const int64_t n = j->w->cols;
    for (int r = r0; r < r1; r++) {
        int8_t *q = (int8_t *)j->xq + (int64_t)r * j->kp;
        j->sx[r] = dsv4_w8a8_quantize_row(j->x + (int64_t)r * n, n, q);
        memset(q + n, 0, (size_t)(j->kp - n));
    }
}

static void dots_scalar(const w8_job *j, int64_t o0, int64_t o1) {
    const int64_t n = j->w->cols, rows = j->w->rows;
    const int8_t *wq = j->w->w;
    const float *sw = j->w->scale;
    for (int r = 0; r < j->n_rows; r++) {
        const int8_t *xq = (const int8_t *)j->xq + (int64_t)r * j->kp;
        for (int64_t o = o0; o < o1; o++) {
            const int8_t *wr = wq + o * n;
            int32_t acc = 0;
            for (int64_t i = 0; i < n; i++) acc += (int32_t)xq[i] * wr[i];
            j->y[(int64_t)r * rows + o] = (j->sx[r] * sw[o]) * (float)acc;
        }
    }
}

#ifdef W8_AVX2
/* the AVX2 level: q_x int16, same values as dsv4_w8a8_quantize_row */
AVX2_FN static void quant_rows_avx2(const w8_job *j, int r0, int r1) {
    const int64_t n = j->w->cols;
    for (int r = r0; r < r1; r++) {
        const float *x = j->x + (int64_t)r * n;
        int16_t *q = (int16_t *)j->xq + (int64_t)r * j->kp;
        int bad = 0;
        float amax = amax_avx2(x, n, &bad);
        if (bad) {
            j->sx[r] = NAN;
            memset(q, 0, sizeof(int16_t) * (size_t)j->kp);
            continue;
        }
        if (amax < W8_AMAX_FLOOR) amax = W8_AMAX_FLOOR;
        const float s = amax / 127.0f;
        quant_avx2(x, n, s, q, NULL);
        for (int64_t i = n; i < j->kp; i++) q[i] = 0;
        j->sx[r] = s;
    }
}

AVX2_INLINE int32_t hsum_epi32(__m256i v) {
    __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xb1));
    return _mm_cvtsi128_si32(a);
}

/* the last n % 16 weights of a row, zero-padded: never reads past the matrix */
AVX2_INLINE __m256i load_w16_tail(const int8_t *w, int part) {
    int8_t buf[16] = {0};
    memcpy(buf, w, (size_t)part);
    return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)buf));
}

/* R activation rows (x, stride kp int16) times C weight rows (w, stride ldw), columns
 * [0, len): the int32 lane sums are added to acc[r * astride + c]. Instantiated once per
 * (R, C) as its own function below, so the R*C accumulators are registers (16 ymm: at
 * most 8 accumulators, C weight vectors, one x vector). */
AVX2_INLINE void tile(const int16_t *x, int64_t kp, const int8_t *w, int64_t ldw, int64_t len,
                      int R, int C, __m256i *acc_io, int astride) {
    __m256i acc[4][4], wv[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) acc[r][c] = _mm256_load_si256(acc_io + r * astride + c);
    const int64_t n16 = len & ~(int64_t)15;
    for (int64_t i = 0; i <= n16; i += 16) {
        if (i == n16) { /* the tail, or done */
            if (i == len) break;
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) wv[c] = load_w16_tail(w + c * ldw + i, (int)(len - i));
        } else {
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                wv[c] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + c * ldw + i)));
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m256i xv = _mm256_load_si256((const __m256i *)(x + r * kp + i));
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) acc[r][c] = _mm256_add_epi32(acc[r][c], _mm256_madd_epi16(wv[c], xv));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) _mm256_store_si256(acc_io + r * astride + c, acc[r][c]);
}

#define TILE_FN(R, C)                                                                          \
    __attribute__((noinline, target("avx2"))) static void tile_##R##x##C(                    \
        const int16_t *x, int64_t kp, const int8_t *w, int64_t ldw, int64_t len,             \
        __m256i *acc, int astride) {                                                          \
        tile(x, kp, w, ldw, len, R, C, acc, astride);                                         \
    }
TILE_FN(1, 1) TILE_FN(1, 2) TILE_FN(1, 3) TILE_FN(1, 4)
TILE_FN(2, 1) TILE_FN(2, 2) TILE_FN(2, 3) TILE_FN(3, 1) TILE_FN(3, 2) TILE_FN(3, 3)
TILE_FN(4, 1) TILE_FN(4, 2) TILE_FN(4, 3)

typedef void (*tile_fn)(const int16_t *, int64_t, const int8_t *, int64_t, int64_t, __m256i *, int);
static tile_fn const tiles[5][5] = {
    {0}, {0, tile_1x1, tile_1x2, tile_1x3, tile_1x4}, {0, tile_2x1, tile_2x2, tile_2x3},
    {0, tile_3x1, tile_3x2, tile_3x3}, {0, tile_4x1, tile_4x2, tile_4x3}};

/* Outputs [o0, o1) (at most W8_MAX_PER) for every row. Batches walk rows in fours and the
 * columns in blocks of W8_KB, so a row block's activations (4 x W8_KB int16) stay in L1
 * while the task's weight rows stream past from L2; the lane sums carry over between
 * column blocks (integer: the split cannot change them). Decode: one block, outputs in
 * fours. */
AVX2_FN static void dots_avx2(const w8_job *j, int64_t o0, int64_t o1) {
    const int64_t n = j->w->cols, rows = j->w->rows, kp = j->kp;
    const int8_t *wq = j->w->w;
    const float *sw = j->w->scale;
    const int CB = j->n_rows == 1 ? 4 : 3;
    const int64_t kb = j->n_rows == 1 ? (n > 0 ? n : 1) : W8_KB;
    __m256i acc[4 * W8_MAX_PER] __attribute__((aligned(32))); /* (4, W8_MAX_PER) lane sums */
    const int no = (int)(o1 - o0);
    for (int r0 = 0; r0 < j->n_rows; r0 += 4) {
        const int R = j->n_rows - r0 < 4 ? j->n_rows - r0 : 4;
        const int16_t *xq = (const int16_t *)j->xq + (int64_t)r0 * kp;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < no; c++) acc[r * W8_MAX_PER + c] = _mm256_setzero_si256();
        for (int64_t k0 = 0; k0 < n; k0 += kb) {
            const int64_t len = n - k0 < kb ? n - k0 : kb;
            for (int64_t o = o0; o < o1; o += CB) {
                const int C = o1 - o < CB ? (int)(o1 - o) : CB;
                tiles[R][C](xq + k0, kp, wq + o * n + k0, n, len, acc + (o - o0), W8_MAX_PER);
            }
        }
        for (int r = 0; r < R; r++)
            for (int c = 0; c < no; c++)
                j->y[(int64_t)(r0 + r) * rows + o0 + c] =
                    (j->sx[r0 + r] * sw[o0 + c]) * (float)hsum_epi32(acc[r * W8_MAX_PER + c]);
    }
}
#endif

/* ---- driver ----------------------------------------------------------------------------- */

typedef struct {
    w8_job job;
    int avx2;
} w8_call;

static void quant_task(void *arg, int t, int tid) {
    (void)tid;
    const w8_call *c = arg;
    const int r0 = t * c->job.qper;
    const int r1 = r0 + c->job.qper < c->job.n_rows ? r0 + c->job.qper : c->job.n_rows;
#ifdef W8_AVX2
    if (c->avx2) { quant_rows_avx2(&c->job, r0, r1); return; }
#endif
    quant_rows_scalar(&c->job, r0, r1);
}

static void dot_task(void *arg, int t, int tid) {
    (void)tid;
    const w8_call *c = arg;
    const int64_t o0 = (int64_t)t * c->job.per;
    const int64_t o1 = o0 + c->job.per < c->job.w->rows ? o0 + c->job.per : c->job.w->rows;
#ifdef W8_AVX2
    if (c->avx2) { dots_avx2(&c->job, o0, o1); return; }
#endif
    dots_scalar(&c->job, o0, o1);
}

static void run(dsv4_kctx *k, int n_tasks, int64_t macs, dsv4_task_fn fn, void *arg) {
    if (macs < W8_SERIAL_MACS || dsv4_kctx_threads(k) == 1) {
        for (int t = 0; t < n_tasks; t++) fn(arg, t, 0);
    } else {
        dsv4_kctx_parallel(k, n_tasks, fn, arg);
    }
}

/* The buffer of a pass of `pass` rows: quantized rows (kp elements of esz bytes), then
 * their scales. */
static int64_t pass_bytes(int pass, int64_t kp, int64_t esz) {
    return round64(pass * kp * esz) + round64((int64_t)pass * (int64_t)sizeof(float));
}

size_t dsv4_w8a8_call_bytes(int64_t cols) {
    return (size_t)pass_bytes(W8_PASS_ROWS, (cols + 15) & ~(int64_t)15, 2);
}

void dsv4_w8a8_linear(dsv4_kctx *k, const dsv4_mat *w, const float *x, int n_rows, float *y) {
    const int64_t rows = w->rows, n = w->cols;
    if (n_rows <= 0 || rows <= 0) return;
    if (n > DSV4_W8A8_MAX_COLS) { /* a hand-made matrix that skipped the startup check */
        dsv4_w8a8_linear_ref(w, x, n_rows, y, NULL);
        return;
    }
    w8_call c = {{0}, 0};
#ifdef W8_AVX2
    c.avx2 = dsv4_kctx_simd(k) >= DSV4_SIMD_AVX2;
#endif
    const int nt = dsv4_kctx_threads(k);
    const int64_t kp = (n + 15) & ~(int64_t)15;
    const int64_t esz = c.avx2 ? 2 : 1;
    const int pass = n_rows < W8_PASS_ROWS ? n_rows : W8_PASS_ROWS;
    const int64_t qbytes = round64(pass * kp * esz);
    const size_t bytes = (size_t)pass_bytes(pass, kp, esz);
    char *own = NULL, *buf = dsv4_kctx_w8a8_buf(k, bytes);
    if (!buf) buf = own = aligned_alloc(64, bytes); /* no reserved buffer: one for this call */
    if (!buf) { /* out of memory: the oracle needs none and gives the same bits */
        dsv4_w8a8_linear_ref(w, x, n_rows, y, NULL);
        return;
    }
    w8_job *j = &c.job;
    j->w = w;
    j->xq = buf;
    j->sx = (float *)(buf + qbytes);
    j->kp = kp;
    /* dot tasks. Decode: about 8 per thread for balance, 4..64 outputs. Batches: a weight
     * block of at most W8_TASK_WBYTES (reused from L2 for every row), at least ~4 tasks
     * per thread, a multiple of 4 outputs. */
    int64_t per;
    if (n_rows == 1) {
        per = (rows / (8 * (int64_t)nt)) & ~(int64_t)3;
        per = per < 4 ? 4 : per > W8_MAX_PER ? W8_MAX_PER : per;
    } else {
        per = (W8_TASK_WBYTES / (n > 0 ? n : 1)) & ~(int64_t)3;
        const int64_t bal = (rows / (4 * (int64_t)nt)) & ~(int64_t)3;
        if (bal < per) per = bal;
        per = per < 4 ? 4 : per > W8_MAX_PER ? W8_MAX_PER : per;
    }
    j->per = per;
    const int n_dot = (int)((rows + per - 1) / per);
    for (int r0 = 0; r0 < n_rows; r0 += pass) {
        const int nr = n_rows - r0 < pass ? n_rows - r0 : pass;
        j->x = x + (int64_t)r0 * n;
        j->y = y + (int64_t)r0 * rows;
        j->n_rows = nr;
        j->qper = (nr + 2 * nt - 1) / (2 * nt);
        const int n_quant = (nr + j->qper - 1) / j->qper;
        /* quantizing costs about as much as 32 multiply-adds per value */
        run(k, n_quant, (int64_t)nr * n * 32, quant_task, &c);
        run(k, n_dot, rows * n * nr, dot_task, &c);
    }
    free(own);
}
