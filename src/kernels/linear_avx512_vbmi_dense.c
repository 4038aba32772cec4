/* linear_avx512_vbmi_dense.c — level avx512vbmi's small-M kernels for dense weights (BF16, F32):
 * 2..64 activation rows, each weight decoded in registers right before the FMAs that use it, no
 * panel. Called by dsv4_lin_avx512vbmi_smallm (linear_avx512_vbmi_smallm.c); entry point
 * dsv4_lin_avx512vbmi_dense (linear_avx512.h). */
#include "kernels/linear_avx512.h"
#include "util/hot.h"

#ifdef DSV4_LIN_AVX512

/* ---- small-M, BF16 and F32 weights: decoded in registers, no panel ------------------------
 * A BF16 weight is its F32 value by a zero-extend and a 16-bit shift (F32: a load), so the
 * panel path's decode pass (a store and a reload per chunk beside the FMAs) buys nothing:
 * here each register block decodes SMD_R weight rows right before the SMD_R x SMB_NX FMAs
 * that use them (24 accumulators, one x load and SMD_R decodes per SMD_R * SMB_NX FMAs, as
 * the FP8 bit decode's blocks above), in passes of up to SMB_NX activation rows over the
 * task's rows (each pass decodes the weights again: the second finds them in L2). The first
 * pass prefetches the task's weights GEMV_PF_DENSE bytes ahead, as the GEMV does. Chunks of 16
 * in ascending order, the last one's x and weights zero-padded, sm_sum4's (hsum16's) tree: the
 * bits of every other path. */
#define SMD_R SMB_R /* weight rows a register block (smb_store_sums takes SMB_R) */

/* One whole chunk (columns i .. i + 15) of R weight rows from wp (rb bytes apart) into the
 * R x NX accumulators a: each row decoded once, each x vector loaded once */
AINLINE VBMI void smd_chunk(int fmt, int R, int NX, const char *wp, int64_t rb, const float *x, int64_t n, int64_t i,
                            __m512 a[SMD_R][SMB_NX]) {
    __m512 wv[SMD_R];
    for (int r = 0; r < R; r++) {
        wv[r] = dec_dense(fmt, wp + r * rb, i, 16);
        __asm__("" : "+v"(wv[r])); /* decoded once, used NX times */
    }
    for (int s = 0; s < NX; s++) {
        __m512 xv = _mm512_loadu_ps(x + s * n + i);
        if (R > 1) __asm__("" : "+v"(xv)); /* one load per x vector */
        for (int r = 0; r < R; r++) a[r][s] = _mm512_fmadd_ps(xv, wv[r], a[r][s]);
    }
}

/* R weight rows from wp (rb bytes apart) against NX rows of x (n floats apart): y (NX, rows)
 * at the block's first output; pf: prefetch the task's stream (dist bytes ahead) */
AINLINE VBMI void smd_dense_rows(int fmt, int R, int NX, const char *wp, int64_t rb, int64_t n, const float *x,
                                 float *y, int64_t rows, int64_t pf) {
    const int esz = fmt == DSV4_WF_F32 ? 4 : 2;
    __m512 a[SMD_R][SMB_NX];
    for (int r = 0; r < R; r++)
        for (int s = 0; s < NX; s++) a[r][s] = _mm512_setzero_ps();
    const int64_t nf = n & ~(int64_t)15;
    for (int64_t i = 0; i < nf; i += 16) {
        /* the rows are adjacent: R * i * esz bytes of the block consumed, the GEMV's pf_step */
        if (pf > 0)
            for (int64_t b = 0; b < R * 16 * esz; b += 64) GEMV_PF_TOUCH(wp + pf + R * i * esz + b);
        smd_chunk(fmt, R, NX, wp, rb, x, n, i, a);
    }
    if (nf < n) { /* the zero-padded last chunk */
        const int m = (int)(n - nf);
        __m512 wv[SMD_R];
        for (int r = 0; r < R; r++) wv[r] = dec_dense(fmt, wp + r * rb, nf, m);
        for (int s = 0; s < NX; s++) {
            const __m512 xv = _mm512_maskz_loadu_ps(mask16(m), x + s * n + nf);
            for (int r = 0; r < R; r++) a[r][s] = _mm512_fmadd_ps(xv, wv[r], a[r][s]);
        }
    }
    smb_store_sums(R, NX, a, y, rows);
}

/* outputs [o0, o1), NX rows of x: blocks of SMD_R weight rows; the last 1-2 rows by the GEMV
 * (the same lanes, chunks and tree; a third of the code of their own blocks) */
AINLINE VBMI void smd_dense_nx(int fmt, int NX, const dsv4_lin_call *c, const dsv4_mat *w, const float *x, float *y,
                               int64_t o0, int64_t o1, int first) {
    const int64_t n = w->cols, rows = w->rows, rb = n * (fmt == DSV4_WF_F32 ? 4 : 2);
    const char *wb = (const char *)w->w;
    int64_t pf = 0;
    if (first) pf = pf_start(wb + o0 * rb, wb + o1 * rb, GEMV_PF_DENSE).dist;
    int64_t o = o0;
    for (; o + SMD_R <= o1; o += SMD_R) smd_dense_rows(fmt, SMD_R, NX, wb + o * rb, rb, n, x, y + o, rows, pf);
    if (o < o1) dsv4_lin_avx512_gemv(c, w, x, NX, y, o, o1);
}

/* ---- small-M BF16 at wide rows: column tiles, every pass a band at a time -------------------
 * From SMD_TILE_MIN_COLS columns a pass's x (SMB_NX rows of 8-16 KB) outgrows L1 and is read
 * again from L2 for every register block, and a task's weights (256 rows of 4-8 KB) outgrow L2
 * before its second pass (4096 x 2048 and 2048 x 4096 BF16 at 16 rows ran 0.72x the speed of
 * 8192 x 1024, BENCHMARKS.md session 24 lmh). There each band of SMD_BAND weight rows runs
 * all its passes, each tile by tile: the tile's x (SMB_NX x SMD_TILE floats, 8 KB) stays in
 * L1 across the band's blocks, each block's accumulators go to the scratch between tiles
 * (exact, the same lanes and chunk order: the same bits), and the band's weights (96-192 KB)
 * stay in L2 for its next pass. While a band runs, the next band's weights stream into L2
 * (T1) at an even pace over all its passes (without: 1.13-1.3x the time cold). */
#define SMD_TILE 256  /* columns a tile (512: 1.02-1.04x its time cold, 1024: 1.03-1.08x) */
#define SMD_BAND 24   /* weight rows a band: 8 blocks of SMD_R, 8 x 24 accumulators (12 KB) */
#define SMD_TILE_MIN_COLS 2048 /* at 1024 columns (x's 8 rows in 32 KB) the tiles ran 1.07-1.4x */
_Static_assert(SMD_BAND % SMD_R == 0 && (SMD_BAND / SMD_R) * SMD_R * SMB_NX * 16 + 16 <= LIN_SCRATCH_FLOATS,
               "a band's accumulators fit the scratch");
#define SMD_TILED(n) ((n) >= SMD_TILE_MIN_COLS && (n) % SMD_TILE == 0)

/* SMD_R weight rows from wp (rb bytes apart), columns [i0, i1) (whole chunks), against NX rows
 * of x (n floats apart): the accumulators from acc (zero at the first tile), back to acc, or
 * at the last tile summed into y (NX, rows) at the block's first output; far: the next
 * band's stream position for this block and tile (NULL: none) */
AINLINE VBMI void smd_tile_rows(int fmt, int NX, const char *wp, int64_t rb, const float *x, int64_t n, int64_t i0,
                                int64_t i1, float *acc, int first, int last, float *y, int64_t rows,
                                const char *far, int64_t far_step) {
    __m512 a[SMD_R][SMB_NX];
    for (int r = 0; r < SMD_R; r++)
        for (int s = 0; s < NX; s++) a[r][s] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + (r * SMB_NX + s) * 16);
    for (int64_t i = i0; i < i1; i += 16) {
        if (far) _mm_prefetch(far + (i - i0) / 16 * far_step, _MM_HINT_T1);
        smd_chunk(fmt, SMD_R, NX, wp, rb, x, n, i, a);
    }
    if (last) smb_store_sums(SMD_R, NX, a, y, rows);
    else
        for (int r = 0; r < SMD_R; r++)
            for (int s = 0; s < NX; s++) _mm512_store_ps(acc + (r * SMB_NX + s) * 16, a[r][s]);
}

/* one pass (NX rows of x at xr, y at yr) over the band's blocks [b0, b1), tile by tile; far:
 * the next band's first byte, far_step bytes a chunk (0: no stream) */
AINLINE VBMI void smd_tile_pass(int fmt, int NX, const dsv4_mat *w, const float *xr, float *yr, int64_t b0, int64_t b1,
                                float *acc, const char *far, int64_t far_step) {
    const int64_t n = w->cols, rows = w->rows, rb = n * (fmt == DSV4_WF_F32 ? 4 : 2);
    const char *wb = (const char *)w->w;
    const int64_t nt = n / SMD_TILE, nb = (b1 - b0) / SMD_R, cpt = SMD_TILE / 16; /* tiles, blocks, chunks a tile */
    for (int64_t t = 0; t < nt; t++)
        for (int64_t b = 0; b < nb; b++) {
            const char *f = far_step ? far + ((t * nb + b) * cpt) * far_step : NULL;
            smd_tile_rows(fmt, NX, wb + (b0 + b * SMD_R) * rb, rb, xr, n, t * SMD_TILE, (t + 1) * SMD_TILE,
                          acc + b * SMD_R * SMB_NX * 16, t == 0, t == nt - 1, yr + b0 + b * SMD_R, rows, f, far_step);
        }
}

#define SMD_TCASE(NX) \
    case NX: smd_tile_pass(DSV4_WF_BF16, NX, w, xr, yr, b0, b1, acc, far, step); break;
/* BF16 outputs [o0, o1) tiled: bands of whole blocks, every pass a band (passes of up to
 * SMB_NX rows as even as they go, as smallm_bf16's); the last 1-2 rows by the GEMV */
static VBMI __attribute__((noinline)) void smallm_bf16_tiled(const dsv4_lin_call *c, const dsv4_mat *w, const float *x,
                                                             int n_rows, float *y, int64_t o0, int64_t o1,
                                                             float *scratch) {
    const int64_t n = w->cols, rows = w->rows, rb = n * 2;
    const int passes = (n_rows + SMB_NX - 1) / SMB_NX;
    const int64_t oe = o0 + (o1 - o0) / SMD_R * SMD_R;
    float *acc = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    for (int64_t b0 = o0; b0 < oe; b0 += SMD_BAND) {
        const int64_t b1 = b0 + SMD_BAND < oe ? b0 + SMD_BAND : oe;
        /* the next band's SMD_BAND rows over this band's chunks (all passes): its bytes */
        const int64_t chunks = (int64_t)passes * (n / 16) * ((b1 - b0) / SMD_R);
        const int64_t step = SMD_BAND * rb / chunks; /* bytes a chunk, a line or less */
        for (int k = 0, s0 = 0; k < passes; k++) {
            const int nx = (n_rows - s0 + (passes - k) - 1) / (passes - k);
            const float *xr = x + (int64_t)s0 * n;
            float *yr = y + (int64_t)s0 * rows;
            const char *far = (const char *)w->w + b1 * rb + k * (chunks / passes) * step;
            switch (nx) {
                SMD_TCASE(1) SMD_TCASE(2) SMD_TCASE(3) SMD_TCASE(4) SMD_TCASE(5) SMD_TCASE(6) SMD_TCASE(7)
            default: smd_tile_pass(DSV4_WF_BF16, SMB_NX, w, xr, yr, b0, b1, acc, far, step); break;
            }
            s0 += nx;
        }
    }
    for (int s0 = 0; oe < o1 && s0 < n_rows; s0 += SMB_NX) /* passes of up to SMB_NX rows */
        dsv4_lin_avx512_gemv(c, w, x + (int64_t)s0 * n, n_rows - s0 < SMB_NX ? n_rows - s0 : SMB_NX,
                             y + (int64_t)s0 * rows, oe, o1);
}

#define SMD_CASE(F, NX) \
    case NX: smd_dense_nx(F, NX, c, w, xr, yr, o0, o1, k == 0); break;
#define SMD_FN(NAME, F)                                                                                     \
    static VBMI void NAME(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,   \
                          int64_t o0, int64_t o1) {                                                         \
        const int64_t n = w->cols, rows = w->rows;                                                          \
        const int passes = (n_rows + SMB_NX - 1) / SMB_NX;                                                  \
        for (int k = 0, s0 = 0; k < passes; k++) {                                                          \
            const int nx = (n_rows - s0 + (passes - k) - 1) / (passes - k);                                 \
            const float *xr = x + (int64_t)s0 * n;                                                          \
            float *yr = y + (int64_t)s0 * rows;                                                             \
            switch (nx) {                                                                                   \
                SMD_CASE(F, 1) SMD_CASE(F, 2) SMD_CASE(F, 3) SMD_CASE(F, 4) SMD_CASE(F, 5) SMD_CASE(F, 6)   \
                SMD_CASE(F, 7) default : smd_dense_nx(F, SMB_NX, c, w, xr, yr, o0, o1, k == 0);             \
                break;                                                                                      \
            }                                                                                               \
            s0 += nx;                                                                                       \
        }                                                                                                   \
    }
/* all n_rows rows in passes of up to SMB_NX (as even as they go: 13 = 7 + 6), one function a
 * format (its own frame and layout) */
DSV4_HOT_AT(smallm_bf16, 0x0)
SMD_FN(smallm_bf16, DSV4_WF_BF16)
SMD_FN(smallm_f32, DSV4_WF_F32)

/* BF16 from SMD_TILE_MIN_COLS columns in tiles, the rest by format */
VBMI void dsv4_lin_avx512vbmi_dense(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                                   int64_t o0, int64_t o1, float *scratch) {
    if (w->fmt == DSV4_WF_BF16 && SMD_TILED(w->cols)) smallm_bf16_tiled(c, w, x, n_rows, y, o0, o1, scratch);
    else if (w->fmt == DSV4_WF_BF16) smallm_bf16(c, w, x, n_rows, y, o0, o1);
    else smallm_f32(c, w, x, n_rows, y, o0, o1);
}

#endif
