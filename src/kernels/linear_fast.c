/* linear_fast.c — dsv4_linear: splitting the work into tasks, and the portable level.
 *
 * See linear_fast.h for the arithmetic contract. The portable level is the GEMM tiling
 * written in plain C (it also serves n_rows == 1); the x86 levels add an in-register
 * GEMV for a few activation rows (decode, batched decode, MTP verification), where the
 * weight stream and its decoding are the whole cost, and level avx512vbmi a small-M kernel
 * for 8..32 rows (up to 64 when x is small enough to stay in L2: a prefill's routed
 * experts) that decodes each weight once per call.
 */
#include "kernels/linear_fast.h"

#include <string.h>

#include "kernels/codec.h"
#include "kernels/cpu.h"
#include "kernels/fp4_lanes.h"
#include "kernels/fp4_shuf.h"
#include "kernels/kctx.h"
#include "util/hot.h"

/* Below this many multiply-adds a call runs on the caller's thread: waking the pool
 * costs more than the work. */
#define LIN_SERIAL_MACS (1 << 16)

static float scale_at(const dsv4_mat *w, int64_t idx) {
    if (w->scale_is_f32) return ((const float *)w->scale)[idx];
    return dsv4_e8m0_to_f32(((const uint8_t *)w->scale)[idx]);
}

void dsv4_lin_dequant8(const dsv4_mat *w, int64_t o, int64_t i, float out[8]) {
    const int64_t n = w->cols;
    const int m = n - i < 8 ? (int)(n - i) : 8;
    for (int l = m; l < 8; l++) out[l] = 0.0f;
    switch (w->fmt) {
    case DSV4_WF_F32: {
        const float *p = (const float *)w->w + o * n + i;
        for (int l = 0; l < m; l++) out[l] = p[l];
        break;
    }
    case DSV4_WF_F16: {
        const uint16_t *p = (const uint16_t *)w->w + o * n + i;
        for (int l = 0; l < m; l++) out[l] = dsv4_f16_to_f32(p[l]);
        break;
    }
    case DSV4_WF_BF16: {
        const uint16_t *p = (const uint16_t *)w->w + o * n + i;
        for (int l = 0; l < m; l++) out[l] = dsv4_bf16_to_f32(p[l]);
        break;
    }
    case DSV4_WF_FP8: {
        /* a chunk never straddles a 128-column scale block */
        const uint8_t *p = (const uint8_t *)w->w + o * n + i;
        const float s = scale_at(w, (o / 128) * ((n + 127) / 128) + i / 128);
        for (int l = 0; l < m; l++) out[l] = dsv4_e4m3_to_f32(p[l]) * s;
        break;
    }
    case DSV4_WF_FP4: {
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2);
        const float s = scale_at(w, o * (n / 32) + i / 32);
        for (int l = 0; l < m; l++) {
            const int64_t c = i + l;
            const uint8_t b = p[c / 2];
            out[l] = dsv4_e2m1_to_f32((c & 1) ? (uint8_t)(b >> 4) : (uint8_t)(b & 15)) * s;
        }
        break;
    }
    case DSV4_WF_FP4L: { /* cols % 128 == 0 (lin_trivial) */
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2);
        const float s = scale_at(w, o * (n / 32) + i / 32);
        for (int l = 0; l < m; l++) out[l] = dsv4_e2m1_to_f32(dsv4_fp4l_code(p, i + l)) * s;
        break;
    }
    case DSV4_WF_FP4B: { /* cols % 64 == 0 (lin_trivial) */
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2);
        const float s = scale_at(w, o * (n / 32) + i / 32);
        for (int l = 0; l < m; l++) out[l] = dsv4_e2m1_to_f32(dsv4_fp4s_code(p, i + l)) * s;
        break;
    }
    default: /* dsv4_mat_row gives zeros for an absent matrix */
        for (int l = 0; l < m; l++) out[l] = 0.0f;
    }
}

void dsv4_lin_ue8m0_range(const dsv4_mat *w, int *bmin, int *bmax) {
    const int64_t ns = ((w->rows + 127) / 128) * ((w->cols + 127) / 128);
    const uint8_t *s = w->scale;
    int lo = 255, hi = 0;
    for (int64_t i = 0; i < ns; i++) {
        lo = s[i] < lo ? s[i] : lo;
        hi = s[i] > hi ? s[i] : hi;
    }
    *bmin = lo;
    *bmax = hi;
}

void dsv4_lin_tables_init(dsv4_lin_tables *t) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (int b = 0; b < 256; b++)
        for (uint32_t k = 0; k < 8; k++)
            t->fp4[b][k] = dsv4_f32_to_bits(mag[k] * dsv4_e8m0_to_f32((uint8_t)b)) ^ (k << 28);
    for (int b = 0; b < 256; b++)
        for (int k = 0; k < 16; k++) t->fp4x16[b][k] = dsv4_e2m1_to_f32((uint8_t)k) * dsv4_e8m0_to_f32((uint8_t)b);
    for (int b = 0; b < 256; b++) t->e4m3[b] = dsv4_e4m3_to_f32((uint8_t)b);
    for (int b = 0; b < 256; b++) dsv4_fp4s_tables((uint8_t)b, t->fp4s[b], t->fp4s[b] + 16);
    for (int m = 0; m < 128; m++) {
        const uint32_t bits = dsv4_f32_to_bits(t->e4m3[m]); /* the low 16 bits are zero */
        t->e4m3_bf16_hi[m] = (uint8_t)(bits >> 24);
        t->e4m3_bf16_lo[m] = (uint8_t)(bits >> 16);
    }
#if defined(__x86_64__) || defined(__i386__)
    t->subnormal_fma_fast = __builtin_cpu_is("amd"); /* libgcc's cached cpuid, read once here */
#else
    t->subnormal_fma_fast = 0;
#endif
}

/* The 16 signed e2m1 values (dsv4_e2m1_to_f32 of each code) */
static const float e2m1_tab[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

void dsv4_lin_dequant_fp4l(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, int64_t k0, int kb,
                           float *dst) {
    (void)tab;
    const int64_t n = w->cols;
    const uint8_t *p = (const uint8_t *)w->w + o * (n / 2) + k0 / 2; /* k0 % 128 == 0: a line start */
    const int64_t sb = o * (n / 32) + k0 / 32;
    for (int c0 = 0; c0 < kb; c0 += DSV4_FP4L_COLS) {
        const uint8_t *line = p + c0 / 2;
        float s[4]; /* the line's 4 scale blocks */
        for (int b = 0; b < 4; b++) s[b] = scale_at(w, sb + c0 / 32 + b);
        /* word i, nibble k: column 16k + i of the line (fp4_lanes.h) */
        for (int i = 0; i < 16; i++) {
            uint32_t v = (uint32_t)line[4 * i] | (uint32_t)line[4 * i + 1] << 8 | (uint32_t)line[4 * i + 2] << 16 |
                         (uint32_t)line[4 * i + 3] << 24;
            for (int k = 0; k < 8; k++, v >>= 4) dst[c0 + 16 * k + i] = e2m1_tab[v & 15] * s[k >> 1];
        }
    }
}

void dsv4_lin_dequant_fp4b(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, int64_t k0, int kb,
                           float *dst) {
    (void)tab;
    const int64_t n = w->cols;
    const uint8_t *p = (const uint8_t *)w->w + o * (n / 2) + k0 / 2; /* k0 % 64 == 0: a chunk start */
    const int64_t sb = o * (n / 32) + k0 / 32;
    for (int c0 = 0; c0 < kb; c0 += DSV4_FP4S_COLS) {
        const uint8_t *chunk = p + c0 / 2;
        const float sa = scale_at(w, sb + c0 / 32), sbb = scale_at(w, sb + c0 / 32 + 1); /* blocks A, B */
        for (int k = 0; k < 32; k++) { /* fp4_shuf.h: column k of A low, of B high */
            const uint8_t b = chunk[dsv4_fp4s_byte(k)];
            dst[c0 + k] = e2m1_tab[b & 15] * sa;
            dst[c0 + 32 + k] = e2m1_tab[b >> 4] * sbb;
        }
    }
}

/* ---- portable level ------------------------------------------------------------------ */

static float reduce8(const float *a) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* Row o, columns [k0, k0 + kb), exactly dequantized into dst, zero-padded to a multiple
 * of 8 (the same values as dsv4_lin_dequant8, with table lookups for FP8 and FP4). */
static void dequant_tile_row(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, int64_t k0, int kb,
                             float *dst) {
    const int64_t n = w->cols;
    for (int l = kb; l < ((kb + 7) & ~7); l++) dst[l] = 0.0f;
    switch (w->fmt) {
    case DSV4_WF_FP8: {
        const uint8_t *p = (const uint8_t *)w->w + o * n + k0;
        const int64_t sb = (o / 128) * ((n + 127) / 128) + k0 / 128; /* k0 % 128 == 0 */
        for (int c0 = 0; c0 < kb; c0 += 128) {
            const float s = scale_at(w, sb + c0 / 128);
            const int c1 = c0 + 128 < kb ? c0 + 128 : kb;
            for (int i = c0; i < c1; i++) dst[i] = tab->e4m3[p[i]] * s;
        }
        break;
    }
    case DSV4_WF_FP4: { /* k0 and cols are multiples of 32 here (else dsv4_lin_dequant8) */
        if (n % 32 != 0) goto generic;
        const float *e2m1 = e2m1_tab;
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2) + k0 / 2;
        const int64_t sb = o * (n / 32) + k0 / 32;
        for (int c0 = 0; c0 < kb; c0 += 32) {
            const float s = scale_at(w, sb + c0 / 32);
            for (int i = c0; i < c0 + 32; i += 2) {
                const uint8_t b = p[i / 2];
                dst[i] = e2m1[b & 15] * s;
                dst[i + 1] = e2m1[b >> 4] * s;
            }
        }
        break;
    }
    case DSV4_WF_FP4L: dsv4_lin_dequant_fp4l(tab, w, o, k0, kb, dst); break;
    case DSV4_WF_FP4B: dsv4_lin_dequant_fp4b(tab, w, o, k0, kb, dst); break;
    case DSV4_WF_F32: memcpy(dst, (const float *)w->w + o * n + k0, sizeof(float) * (size_t)kb); break;
    case DSV4_WF_BF16: {
        const uint16_t *p = (const uint16_t *)w->w + o * n + k0;
        for (int i = 0; i < kb; i++) dst[i] = dsv4_bf16_to_f32(p[i]);
        break;
    }
    default:
    generic:
        for (int c = 0; c < kb; c += 8) dsv4_lin_dequant8(w, o, k0 + c, dst + c);
    }
}

/* One activation row x 4 tile rows (dsv4_lin_tile_level.micro). */
static void micro_scalar(const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init) {
    (void)ldx;
    const int nfull = kb / 8, tail = kb % 8;
    for (int j = 0; j < 4; j++) {
        /* the lanes in a local array: no aliasing with x or the tile, so the compiler
         * keeps them in registers and vectorizes the chunk loop */
        float *ap = acc + (int64_t)j * 8, a[8];
        if (init) memset(a, 0, sizeof a);
        else memcpy(a, ap, sizeof a);
        const float *wr = wt + j * LIN_KB;
        for (int c = 0; c < nfull; c++)
            for (int l = 0; l < 8; l++) a[l] += x[8 * c + l] * wr[8 * c + l];
        if (tail) {
            /* padded lanes add 0 * 0, exactly like the AVX2 masked chunk */
            for (int l = 0; l < 8; l++) {
                const float xv = l < tail ? x[8 * nfull + l] : 0.0f;
                a[l] += xv * wr[8 * nfull + l];
            }
        }
        memcpy(ap, a, sizeof a);
    }
}

static void reduce_row_scalar(const float *acc, int nb, float *y) {
    for (int j = 0; j < nb; j++) y[j] = reduce8(acc + 8 * j);
}

static const dsv4_lin_tile_level scalar_tiles = {8,    1, 4, dequant_tile_row, {micro_scalar, NULL, NULL, NULL},
                                                 reduce_row_scalar, NULL, 1, 1 /* dequant_tile_row reads FP4B */};

static void gemm_scalar(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y, int64_t o0,
                        float *scratch) {
    dsv4_lin_gemm_tiled(&scalar_tiles, c, w, x, n_rows, y, o0, scratch);
}

static const dsv4_lin_kernels scalar_kernels = {0, 0, 0, NULL, gemm_scalar, NULL, {0}, NULL, 0, 0, 0, 0, 0, 0};

const dsv4_lin_kernels *dsv4_lin_kernels_scalar(void) { return &scalar_kernels; }

/* ---- driver --------------------------------------------------------------------------- */

/* One product of a job, planned: which kernels, GEMV or GEMM, how many outputs a task
 * takes. The plan never changes a result (linear_fast.h), only how the work is cut. */
typedef struct {
    const dsv4_lin_kernels *kn;
    const dsv4_mat *w;
    const float *x;
    int n_rows;
    float *y;
    int gemv;
    int smallm;    /* the small-M kernel instead of gemv / gemm */
    int64_t per;   /* outputs per task */
    int row_blocks; /* GEMM: tasks per output block, each taking rows_per activation rows */
    int rows_per;
    int n_tasks;
    int task0;     /* first task of this op in the job */
    int prescale_task; /* call.fp8_prescale is decided by each task (lin_task_call) */
    dsv4_lin_call call;
} lin_plan;

typedef struct {
    dsv4_kctx *k;
    lin_plan *ops;
    int n_ops;
    /* tail split (lin_plan_tail): each of the T threads' ranges of the n planned tasks
     * (threads.c: [i n / T, (i + 1) n / T)) ends in its last task cut in tail_m pieces of
     * halving size (1/2, 1/4, ..., the last two equal); 0: none */
    int tail_m, tail_t, tail_n;
} lin_job;

/* Job task t (of n + (tail_m - 1) T) as planned task *pt and piece index (-1: whole). */
static inline void lin_tail_map(const lin_job *j, int t, int *pt, int *piece) {
    const int m1 = j->tail_m - 1, T = j->tail_t, n = j->tail_n;
    int i = (int)((int64_t)t * T / (n + m1 * T));
    /* thread i's range starts at floor(i n / T) + i m1 */
    while (i + 1 < T && t >= (int)((int64_t)(i + 1) * n / T) + (i + 1) * m1) i++;
    while (i > 0 && t < (int)((int64_t)i * n / T) + i * m1) i--;
    const int a = (int)((int64_t)i * n / T), b = (int)((int64_t)(i + 1) * n / T);
    const int local = t - a - i * m1;
    if (local < b - a - 1) *pt = a + local, *piece = -1;
    else *pt = b - 1, *piece = local - (b - a - 1);
}

/* Zero-work cases and the formats the tiled kernels do not take, x and y rows ldx and ldy
 * floats apart. Returns 1 when the op is finished here. */
static int lin_trivial(dsv4_kctx *k, const dsv4_lin_op *op, int64_t ldx, int64_t ldy) {
    const dsv4_mat *w = op->w;
    if (op->n_rows <= 0 || w->rows <= 0) return 1;
    const int dense = ldx == w->cols && ldy == w->rows;
    if (w->fmt == DSV4_WF_I8) { /* no tiled kernel: the reference product (P2's INT8
                                 * activations are the w8a8 numeric mode's, model/numerics.h) */
        float *scratch = dsv4_kctx_scratch(k, dsv4_kctx_tid(k));
        if (dense) dsv4_linear_ref(w, op->x, op->n_rows, op->y, scratch);
        else
            for (int s = 0; s < op->n_rows; s++) dsv4_linear_ref(w, op->x + s * ldx, 1, op->y + s * ldy, scratch);
        return 1;
    }
    /* FP4L rows are whole 128-column lines (fp4_lanes.h), FP4B rows whole 64-column chunks
     * (fp4_shuf.h); another width is malformed */
    const int known = w->fmt == DSV4_WF_F32 || w->fmt == DSV4_WF_F16 || w->fmt == DSV4_WF_BF16 ||
                      w->fmt == DSV4_WF_FP8 || w->fmt == DSV4_WF_FP4 ||
                      (w->fmt == DSV4_WF_FP4L && w->cols % DSV4_FP4L_COLS == 0) ||
                      (w->fmt == DSV4_WF_FP4B && w->cols % DSV4_FP4S_COLS == 0);
    if (w->cols <= 0 || !known) { /* empty sum, or an absent matrix: zeros, as the reference */
        for (int s = 0; s < op->n_rows; s++) memset(op->y + s * ldy, 0, sizeof(float) * (size_t)w->rows);
        return 1;
    }
    return 0;
}

/* The level's kernels for w on k and the path of n_rows rows (dense: x and y rows dense) */
static dsv4_lin_path lin_pick(dsv4_kctx *k, const dsv4_mat *w, int n_rows, int dense, const dsv4_lin_kernels **kn_out) {
    const int64_t n = w->cols;
    const dsv4_lin_kernels *kn = dsv4_lin_kernels_scalar();
    /* the x86 FP4 decoders walk whole 32-column scale blocks */
    const int level = dsv4_kctx_simd(k), fp4_ok = !dsv4_wf_is_fp4(w->fmt) || n % 32 == 0;
    if (level >= DSV4_SIMD_AVX512VBMI && dsv4_lin_kernels_avx512vbmi() && fp4_ok)
        kn = dsv4_lin_kernels_avx512vbmi();
    else if (level >= DSV4_SIMD_AVX512 && dsv4_lin_kernels_avx512() && fp4_ok)
        kn = dsv4_lin_kernels_avx512();
    else if (level >= DSV4_SIMD_AVX2 && dsv4_lin_kernels_avx2() && fp4_ok)
        kn = dsv4_lin_kernels_avx2();
    *kn_out = kn;
    const int64_t panel = LIN_SMALLM_NB * ((n + 15) & ~(int64_t)15) + 16; /* floats, aligned */
    const int sm_min = w->fmt <= DSV4_WF_FP4B ? kn->smallm_min_rows[w->fmt] : 0;
    /* smallm_min_rows 0: the level's small-M kernel does not take the format (nor when forced) */
    const int can_smallm = kn->smallm && sm_min > 0 && n_rows <= LIN_SMALLM_MAX_ROWS && panel <= LIN_SCRATCH_FLOATS;
    /* a level whose gemv does not read FP4L (FP4B) takes the GEMM for it: the same bits */
    const int can_gemv = kn->gemv && n_rows <= LIN_GEMV_MAX_ROWS && (w->fmt != DSV4_WF_FP4L || kn->gemv_fp4l) &&
                         (w->fmt != DSV4_WF_FP4B || (kn->gemv_fp4b && !w->scale_is_f32));
    const dsv4_lin_path force = dense ? dsv4_kctx_lin_path(k) : DSV4_LIN_GEMM;
    if (force == DSV4_LIN_SMALLM && can_smallm) return DSV4_LIN_SMALLM;
    if (force == DSV4_LIN_GEMV && can_gemv) return DSV4_LIN_GEMV;
    if (force == DSV4_LIN_GEMM) return DSV4_LIN_GEMM;
    if (kn->bf16_gemv8_min_rows && w->fmt == DSV4_WF_BF16 && n_rows == 8 && w->rows >= kn->bf16_gemv8_min_rows &&
        can_gemv)
        return DSV4_LIN_GEMV;
    if (can_smallm && n_rows >= sm_min && (n_rows <= 32 || n_rows * n <= LIN_SMALLM_BIG_X_FLOATS))
        return DSV4_LIN_SMALLM;
    if (can_smallm && kn->fp8_few_smallm && w->fmt == DSV4_WF_FP8 && !w->scale_is_f32 && n_rows >= 2 &&
        dsv4_kctx_lin_tables(k)->subnormal_fma_fast &&
        !(n >= kn->fp8_few_gemv_cols && n_rows <= kn->fp8_few_gemv_rows))
        return DSV4_LIN_SMALLM;
    if (can_gemv && n_rows <= (w->fmt == DSV4_WF_FP8 ? kn->gemv_max_rows_fp8 : kn->gemv_max_rows))
        return DSV4_LIN_GEMV;
    return DSV4_LIN_GEMM;
}

int dsv4_linear_path_of(struct dsv4_kctx *k, const dsv4_mat *w, int n_rows) {
    const dsv4_lin_kernels *kn;
    return lin_pick(k, w, n_rows, 1, &kn);
}

/* dsv4_lin_gemv_per with a one-row task's byte cap task_bytes (LIN_GEMV1_TASK_BYTES, or half
 * of it where the planner evens a job's tasks out over the threads) */
static int64_t gemv_per(const dsv4_mat *w, int n_rows, int gemv, int64_t target_macs, int64_t whole_elems,
                        int64_t task_bytes) {
    const int64_t rows = w->rows, n = w->cols;
    if (target_macs == 0) return rows; /* the kernels take any count of outputs from a multiple of 4 */
    /* FP4 GEMV: a whole matrix within the job's share is one task, so that it reads its rows
     * as far runs (gemv_prefetch.h pf_fp4_runs); tasks of 256 rows restarted them half way
     * (batch-16 routed experts, 1-3 rows each: 0.96-0.98x the step's time, in step, BENCHMARKS.md
     * session 17 fp4g) */
    if (gemv && dsv4_wf_is_fp4(w->fmt) && rows * n <= whole_elems) return rows;
    int64_t per = target_macs / (n * n_rows);
    per &= ~(int64_t)3;
    int64_t cap = LIN_GEMV_NB;
    if (gemv && n_rows == 1) { /* far runs of up to task_bytes / 4 each */
        const int64_t row_bytes = dsv4_mat_bytes(w) / rows;
        const int64_t by_bytes = task_bytes / (row_bytes > 0 ? row_bytes : 1) & ~(int64_t)3;
        cap = by_bytes > cap ? by_bytes : cap;
    }
    return per < 4 ? 4 : per > cap ? cap : per;
}

int64_t dsv4_lin_gemv_per(const dsv4_mat *w, int n_rows, int gemv, int64_t target_macs, int64_t whole_elems) {
    return gemv_per(w, n_rows, gemv, target_macs, whole_elems, LIN_GEMV1_TASK_BYTES);
}

/* target_macs: the multiply-adds a GEMV task should carry (the job's total over about 8
 * tasks per thread, so that threads finish together; 0: one task for all outputs);
 * whole_elems: see dsv4_lin_gemv_per. x and y rows ldx and ldy floats apart: only the GEMM
 * takes rows that are not dense, so a strided op is planned as a GEMM. */
DSV4_HOT_AT(lin_plan_op, 0x2a0)
static void lin_plan_op(dsv4_kctx *k, const dsv4_lin_op *op, int64_t target_macs, int64_t whole_elems, int64_t ldx,
                        int64_t ldy, int64_t task_bytes, lin_plan *pl) {
    const dsv4_mat *w = op->w;
    const int64_t rows = w->rows, n = w->cols;
    memset(pl, 0, sizeof *pl);
    const dsv4_lin_path path = lin_pick(k, w, op->n_rows, ldx == n && ldy == rows, &pl->kn);
    const dsv4_lin_kernels *kn = pl->kn;
    pl->w = w;
    pl->x = op->x;
    pl->n_rows = op->n_rows;
    pl->y = op->y;
    pl->smallm = path == DSV4_LIN_SMALLM;
    pl->gemv = path == DSV4_LIN_GEMV;
    /* GEMV and small-M: 4..LIN_GEMV_NB outputs per task (a multiple of 4: the kernels take
     * rows in fours) or the whole matrix; the split never changes a result */
    pl->per = pl->gemv || pl->smallm ? gemv_per(w, op->n_rows, pl->gemv, target_macs, whole_elems, task_bytes) : LIN_NB;
    pl->call.tab = dsv4_kctx_lin_tables(k);
    /* a plan number only where a kernel keys the thread's scratch by it (small-M's FP8 x
     * scaled per band, dsv4_lin_xs_key); 0 elsewhere (no key). The counter is one line that
     * both threads bump, and every one-row plan bumped it (the MoE items' too): ~3.6 + 2.5
     * us of a batch-1 step's thread time in the fetch-add (BENCHMARKS.md, session 29 idle29) */
    pl->call.job = pl->smallm ? dsv4_kctx_lin_job(k) : 0;
    pl->call.ldx = ldx;
    pl->call.ldy = ldy;
    /* GEMM: row blocks of at most LIN_MB rows, as even as whole fours allow (more tasks for
     * the small matrices, none of only a few rows); consecutive tasks share their weights */
    pl->row_blocks = 1;
    pl->rows_per = op->n_rows;
    if (!pl->gemv && !pl->smallm) {
        /* the whole row in the task's panel: dequantized once a task */
        const int mb = n <= LIN_PANEL_TILES * LIN_KB ? LIN_MB_PANEL : LIN_MB;
        pl->row_blocks = (op->n_rows + mb - 1) / mb;
        const int even = (op->n_rows + pl->row_blocks - 1) / pl->row_blocks;
        pl->rows_per = (even + 3) & ~3;
        if (pl->rows_per > mb) pl->rows_per = mb;
        pl->row_blocks = (op->n_rows + pl->rows_per - 1) / pl->rows_per;
    }
    pl->n_tasks = (int)((rows + pl->per - 1) / pl->per) * pl->row_blocks;
    /* The FP8 GEMV's prescale test (no x: a hint's plan) reads the scale grid and x, cold
     * here: ~0.3 us an op on the caller while the other threads wait, 16.5 us of a batch-1
     * step (wo_a alone 8 ops a layer; BENCHMARKS.md, session 29 idle29). A one-row op of at
     * most one task a thread leaves it to its tasks (lin_task_call), in parallel and where
     * the GEMV reads the same lines next; more tasks would repeat it. */
    if (pl->gemv && kn->fp8_prescale && w->fmt == DSV4_WF_FP8 && op->x) {
        if (op->n_rows == 1 && pl->n_tasks <= dsv4_kctx_threads(k)) pl->prescale_task = 1;
        else pl->call.fp8_prescale = kn->fp8_prescale(w, op->x, op->n_rows);
    }
}

/* p's call for its task of outputs [o0, o1): with prescale_task, fp8_prescale is the test on
 * the scale bands these rows read (the view of rows o0/128*128 .. the end of o1 - 1's band,
 * which starts a band and so always slices; the whole matrix should it not): exactness for
 * them is all the flag claims, and either path gives the same bits. */
static const dsv4_lin_call *lin_task_call(const lin_plan *p, int64_t o0, int64_t o1, dsv4_lin_call *lc) {
    if (!p->prescale_task) return &p->call;
    const int64_t r0 = o0 / 128 * 128, r1 = ((o1 - 1) / 128 + 1) * 128;
    dsv4_mat v;
    const int sliced = dsv4_mat_rows(p->w, r0, (r1 < p->w->rows ? r1 : p->w->rows) - r0, &v) == 0;
    *lc = p->call;
    lc->fp8_prescale = p->kn->fp8_prescale(sliced ? &v : p->w, p->x, p->n_rows);
    return lc;
}

DSV4_HOT_AT(lin_task, 0xe0)
static void lin_task(void *arg, int t, int tid) {
    const lin_job *j = arg;
    int piece = -1;
    if (j->tail_m) lin_tail_map(j, t, &t, &piece);
    int i = 0;
    while (i + 1 < j->n_ops && t >= j->ops[i + 1].task0) i++;
    const lin_plan *p = &j->ops[i];
    int64_t o0 = (int64_t)((t - p->task0) / p->row_blocks) * p->per;
    /* what the scratch holds from another plan is not this one's (dsv4_lin_xs_key) */
    dsv4_lin_xs_key *key = (dsv4_lin_xs_key *)(dsv4_kctx_lin_scratch(j->k, tid) - LIN_SCRATCH_KEY_FLOATS);
    if (key->job != p->call.job) key->job = 0;
    if (p->smallm) {
        const int64_t o1 = o0 + p->per < p->w->rows ? o0 + p->per : p->w->rows;
        p->kn->smallm(&p->call, p->w, p->x, p->n_rows, p->y, o0, o1, dsv4_kctx_lin_scratch(j->k, tid));
    } else if (p->gemv) {
        int64_t o1 = o0 + p->per < p->w->rows ? o0 + p->per : p->w->rows;
        if (piece >= 0) { /* piece k of m: groups of 4 rows [G - G >> k, G - G >> (k + 1)), the last to G */
            const int64_t G = (o1 - o0 + 3) / 4, a = G - (G >> piece);
            const int64_t b = piece + 1 < j->tail_m ? G - (G >> (piece + 1)) : G;
            const int64_t e = o0 + b * 4 < o1 ? o0 + b * 4 : o1;
            o0 = o0 + a * 4 < o1 ? o0 + a * 4 : o1;
            o1 = e;
            if (o0 >= o1) return; /* a piece of a task of fewer groups than pieces */
        }
        /* passes of up to gemv_rows rows over the task's weights: the second pass finds
         * them in cache */
        const int pass = p->kn->gemv_rows;
        dsv4_lin_call lc;
        const dsv4_lin_call *c = lin_task_call(p, o0, o1, &lc);
        for (int s0 = 0; s0 < p->n_rows; s0 += pass) {
            const int ns = p->n_rows - s0 < pass ? p->n_rows - s0 : pass;
            p->kn->gemv(c, p->w, p->x + (int64_t)s0 * p->w->cols, ns, p->y + (int64_t)s0 * p->w->rows, o0, o1);
        }
    } else {
        const int r0 = (t - p->task0) % p->row_blocks * p->rows_per;
        const int nr = p->n_rows - r0 < p->rows_per ? p->n_rows - r0 : p->rows_per;
        p->kn->gemm(&p->call, p->w, p->x + (int64_t)r0 * p->call.ldx, nr, p->y + (int64_t)r0 * p->call.ldy, o0,
                    dsv4_kctx_lin_scratch(j->k, tid));
    }
}

_Static_assert(DSV4_LIN_STRIDED_MIN_ROWS > LIN_SMALLM_MAX_ROWS && DSV4_LIN_STRIDED_MIN_ROWS > LIN_GEMV_MAX_ROWS,
               "from DSV4_LIN_STRIDED_MIN_ROWS rows every plan is a GEMM");

/* The smallest piece of a tail split (lin_plan_tail): the thread that finishes a job first
 * waits at most about this much of the other's stream. */
#define LIN_GEMV1_PIECE_BYTES (128 * 1024)

/* Tail split of a one-row GEMV job (plan[0..n), n_tasks tasks on T threads): returns how
 * many pieces of halving size (1/2, 1/4, ..., the last two equal) the last task of each
 * thread's range is cut in, or 0 for none: the largest such task in pieces of at least
 * LIN_GEMV1_PIECE_BYTES (a smaller last task, the end of a product, in as many pieces:
 * each thread's range must grow by the same count, threads.c splits by count).
 * threads.c runs each thread's range front to back and lets a thread with nothing left take
 * the back half of another's unclaimed tasks, but a running task cannot be split: with 2
 * tasks of 512 KB a thread (wo_b 1024 x 2048, wq_b 8192 x 256, FP8) the faster thread waited
 * up to a task's time at the job's end whenever the other ran slower, as the host runs one
 * vCPU 25-35 % slower than the other for a whole process at times. With the last task in
 * pieces the faster thread steals the other's small last pieces and the two end within about
 * a piece, whichever core is slower; the front keeps its long far runs. The split never
 * changes a result. */
static int lin_plan_tail(const lin_plan *plan, int n, int n_tasks, int T) {
    if (T < 2 || n_tasks < T) return 0;
    for (int i = 0; i < n; i++)
        if (!plan[i].gemv || plan[i].n_rows != 1 || plan[i].row_blocks != 1) return 0;
    int64_t most = 0; /* the largest last task of a thread's range, bytes: the longest wait */
    for (int i = 0; i < T; i++) {
        const int t = (int)((int64_t)(i + 1) * n_tasks / T) - 1;
        int o = 0;
        while (o + 1 < n && t >= plan[o + 1].task0) o++;
        const lin_plan *p = &plan[o];
        const int64_t o0 = (int64_t)(t - p->task0) * p->per, o1 = o0 + p->per < p->w->rows ? o0 + p->per : p->w->rows;
        const int64_t bytes = (o1 - o0) * (dsv4_mat_bytes(p->w) / p->w->rows);
        if (bytes > most) most = bytes;
    }
    int m = 1;
    while (m < 8 && (most >> m) >= LIN_GEMV1_PIECE_BYTES) m++;
    return m >= 2 ? m : 0;
}

/* The tail split of job j of n_tasks planned tasks and macs multiply-adds, where it pays (a
 * job that runs on the caller alone has no end to even out): returns the job's tasks. */
static int lin_job_tail(lin_job *j, int n_tasks, int64_t macs) {
    const int T = dsv4_kctx_threads(j->k), m = macs >= LIN_SERIAL_MACS ? lin_plan_tail(j->ops, j->n_ops, n_tasks, T) : 0;
    if (!m) return n_tasks;
    j->tail_m = m, j->tail_t = T, j->tail_n = n_tasks;
    return n_tasks + (m - 1) * T;
}

/* Up to this many products are planned on the stack; longer lists go in slices. */
#define LIN_BATCH_MAX 64

/* Plans ops[0..nb) (nb <= LIN_BATCH_MAX; ldx, ldy 0: each op's dense rows) into plan; returns
 * the plans made (trivial products are done here and get none), their tasks in *n_tasks and
 * their multiply-adds in *macs. */
static int lin_plan_job(dsv4_kctx *k, const dsv4_lin_op *ops, int nb, int64_t ldx, int64_t ldy, lin_plan *plan,
                        int *n_tasks, int64_t *macs_out) {
    int64_t macs = 0, elems = 0;
    for (int i = 0; i < nb; i++)
        if (ops[i].n_rows > 0) {
            macs += ops[i].w->rows * ops[i].w->cols * ops[i].n_rows;
            elems += ops[i].w->rows * ops[i].w->cols;
        }
    /* about 8 tasks a thread, so that threads finish together; a job of one-row products
     * (batch-1 decode) 2: its GEMV reads each task's rows as 4 sequential runs
     * (linear_avx512.c gemv1_dense), which the hardware prefetchers follow better the
     * longer they are (256-1024 KB matrices at 2 threads: 0.73-0.90x the time of 8 a
     * thread, BENCHMARKS.md session 11 "cold"); a late thread's tasks are still stolen
     * by halves (threads.c) */
    const int threads = dsv4_kctx_threads(k);
    int one_row = 1;
    for (int i = 0; i < nb; i++) one_row &= ops[i].n_rows <= 1;
    const int64_t target = macs / ((one_row ? 2 : 8) * (int64_t)threads);
    const int64_t whole = elems / (2 * (int64_t)threads); /* at least 2 such matrices a thread */
    int n = 0;
    *n_tasks = 0;
    for (int i = 0; i < nb; i++) {
        const int64_t lx = ldx ? ldx : ops[i].w->cols, ly = ldy ? ldy : ops[i].w->rows;
        if (lin_trivial(k, &ops[i], lx, ly)) continue;
        lin_plan_op(k, &ops[i], target, whole, lx, ly, LIN_GEMV1_TASK_BYTES, &plan[n]);
        plan[n].task0 = *n_tasks;
        *n_tasks += plan[n].n_tasks;
        n++;
    }
    /* A one-row job of fewer than 4 tasks a thread that do not divide evenly over the threads
     * is planned again with tasks of half the bytes (LIN_GEMV1_TASK_BYTES / 2; with more
     * tasks the one left over is a small part of the job: the Flash checkpoint's wq_b, 65
     * tasks, keeps its 512 KB runs): stealing (threads.c) moves whole
     * tasks, so 5 tasks of 512 KB on 2 threads left one thread idle for a task's time, 11-18
     * us of batch 1's CSA wq_b + indexer wq_b job; as 10 of 256 KB it took 1.6-6.2 us less
     * a call in 20 of 20 (two holds), though 2-3 us more in 6 of 6 of a noisier one where
     * the threads ran at different speeds (BENCHMARKS.md session 22 b1g, session 23 b1p).
     * The split never changes a result. */
    if (one_row && threads > 1 && *n_tasks % threads && *n_tasks < 4 * threads) {
        *n_tasks = 0;
        for (int j = 0; j < n; j++) {
            const dsv4_lin_op op = {plan[j].w, plan[j].x, plan[j].n_rows, plan[j].y};
            lin_plan_op(k, &op, target, whole, plan[j].call.ldx, plan[j].call.ldy, LIN_GEMV1_TASK_BYTES / 2, &plan[j]);
            plan[j].task0 = *n_tasks;
            *n_tasks += plan[j].n_tasks;
        }
    }
    *macs_out = macs;
    return n;
}

/* ldx, ldy 0: each op's dense rows (dsv4_linear_batch) */
void dsv4_linear_batch_strided(dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops, int64_t ldx, int64_t ldy) {
    for (int b0 = 0; b0 < n_ops; b0 += LIN_BATCH_MAX) {
        const int nb = n_ops - b0 < LIN_BATCH_MAX ? n_ops - b0 : LIN_BATCH_MAX;
        lin_plan plan[LIN_BATCH_MAX];
        int n_tasks;
        int64_t macs;
        const int n = lin_plan_job(k, ops + b0, nb, ldx, ldy, plan, &n_tasks, &macs);
        if (n == 0) continue;
        lin_job job = {k, plan, n, 0, 0, 0};
        n_tasks = lin_job_tail(&job, n_tasks, macs);
        if (macs < LIN_SERIAL_MACS) {
            const int tid = dsv4_kctx_tid(k); /* not 0 when called from a task on a worker */
            for (int t = 0; t < n_tasks; t++) lin_task(&job, t, tid);
        } else {
            dsv4_kctx_parallel(k, n_tasks, lin_task, &job);
        }
    }
}

int dsv4_lin_job_tasks(dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops) {
    lin_plan plan[LIN_BATCH_MAX];
    int n_tasks = 0;
    int64_t macs;
    if (n_ops < 1 || n_ops > LIN_BATCH_MAX) return 0;
    const int n = lin_plan_job(k, ops, n_ops, 0, 0, plan, &n_tasks, &macs);
    lin_job job = {k, plan, n, 0, 0, 0};
    return n ? lin_job_tail(&job, n_tasks, macs) : 0;
}

void dsv4_linear_batch(dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops) { dsv4_linear_batch_strided(k, ops, n_ops, 0, 0); }

DSV4_HOT_AT(dsv4_linear_here, 0x10)
void dsv4_linear_here(dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops) {
    const int tid = dsv4_kctx_tid(k);
    for (int i = 0; i < n_ops; i++) {
        const int64_t lx = ops[i].w->cols, ly = ops[i].w->rows; /* dense rows */
        if (lin_trivial(k, &ops[i], lx, ly)) continue;
        lin_plan plan;
        lin_plan_op(k, &ops[i], 0, 0, lx, ly, LIN_GEMV1_TASK_BYTES, &plan);
        lin_job job = {k, &plan, 1, 0, 0, 0};
        for (int t = 0; t < plan.n_tasks; t++) lin_task(&job, t, tid);
    }
}

DSV4_HOT_AT(dsv4_linear, 0x280)
void dsv4_linear(dsv4_kctx *k, const dsv4_mat *w, const float *x, int n_rows, float *y) {
    const dsv4_lin_op op = {w, x, n_rows, y};
    dsv4_linear_batch(k, &op, 1);
}

/* Bytes of one output row of w's weights (scales apart), or 0 for a format not hinted
 * (W8A8's INT8 products, absent matrices). */
static int64_t hint_row_bytes(const dsv4_mat *w) {
    return w->fmt == DSV4_WF_I8 || w->rows <= 0 ? 0 : dsv4_mat_weight_bytes(w) / w->rows;
}

void dsv4_lin_hint(dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops, int64_t bytes, int skip) {
    const int T = dsv4_kctx_threads(k);
    if (T < 2 || n_ops < 1 || n_ops > LIN_BATCH_MAX || bytes <= 0) return;
    for (int i = 0; i < n_ops; i++) /* one-row products of planned formats only: nothing runs here */
        if (ops[i].n_rows != 1 || !ops[i].w->w || ops[i].w->rows <= 0 || ops[i].w->cols <= 0 || !hint_row_bytes(ops[i].w) ||
            (dsv4_wf_is_fp4(ops[i].w->fmt) && ops[i].w->cols % DSV4_FP4L_COLS))
            return;
    lin_plan plan[LIN_BATCH_MAX];
    int n_tasks;
    int64_t macs;
    const int n = lin_plan_job(k, ops, n_ops, 0, 0, plan, &n_tasks, &macs);
    if (n == 0 || macs < LIN_SERIAL_MACS) return;
    /* thread i starts on task n_tasks i / T (threads.c): its first product from there */
    for (int tid = 0; tid < T; tid++) {
        const int t0 = (int)((int64_t)n_tasks * tid / T), t1 = (int)((int64_t)n_tasks * (tid + 1) / T);
        if (t0 >= t1) continue;
        int j = 0;
        while (j + 1 < n && t0 >= plan[j + 1].task0) j++;
        const lin_plan *p = &plan[j];
        const int te = j + 1 < n && plan[j + 1].task0 < t1 ? plan[j + 1].task0 : t1;
        const int64_t o0 = (int64_t)((t0 - p->task0) / p->row_blocks) * p->per;
        int64_t o1 = (int64_t)((te - p->task0 + p->row_blocks - 1) / p->row_blocks) * p->per;
        if (o1 > p->w->rows) o1 = p->w->rows;
        const int64_t rb = hint_row_bytes(p->w), len = (o1 - o0) * rb;
        dsv4_kctx_hint(k, tid, (const char *)p->w->w + o0 * rb, len < bytes ? len : bytes, skip);
    }
}
