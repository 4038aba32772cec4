/* linear_tile.c — the GEMM tile driver shared by every kernel level of dsv4_linear.
 *
 * One task owns LIN_NB consecutive outputs and (as dsv4_linear cuts the work) up to LIN_MB
 * activation rows, LIN_MB_PANEL when the task's panel holds all its column tiles
 * (linear_fast.h), in accumulator blocks of LIN_MB rows. For each LIN_KB-column tile it
 * dequantizes the task's weight rows into a (LIN_NB, LIN_KB) tile of the panel (once for
 * all the blocks when the panel holds every tile, else once a block: a 512-row FP8 wo_b,
 * K = 2048, decoded each panel 11 times a call at LIN_MB 48, now 3 times) and runs the
 * level's micro-kernel over (micro_outs tile rows) x (micro_rows
 * activation rows) windows: tile rows outermost, so a window's weights (micro_outs x
 * LIN_KB floats) stay in L1 while the block's x rows, read once per window, come from L2;
 * the first tile starts the lanes from zero. At the end the lanes of each output are
 * reduced in the level's fixed tree. The level supplies only the arithmetic (dequantizer,
 * micro-kernels, reduction), its lanes and its window; the loops, which decide nothing
 * about the summation order, live here once.
 */
#include <string.h>

#include "kernels/linear_fast.h"
#include "util/hot.h"

DSV4_HOT_AT(dsv4_lin_gemm_tiled, 0x2b0)
void dsv4_lin_gemm_tiled(const dsv4_lin_tile_level *lv, const dsv4_lin_call *c, const dsv4_mat *w, const float *x,
                         int n_rows, float *y, int64_t o0, float *scratch) {
    const int L = lv->lanes, J = lv->micro_outs;
    const int64_t n = w->cols, rows = w->rows, ldx = c->ldx, ldy = c->ldy;
    const int nb = rows - o0 < LIN_NB ? (int)(rows - o0) : LIN_NB;
    const int nj = (nb + J - 1) / J * J; /* tile rows computed: nb rounded up to the window */
    const int nr = (nb + 15) & ~15;      /* accumulator slots the 16-output reduction reads */
    float *acc = scratch;                       /* (LIN_MB, LIN_NB, L) lane accumulators */
    float *panel = scratch + LIN_SCRATCH_ACC;   /* (LIN_PANEL_TILES, LIN_NB, LIN_KB) weights */
    const int whole = n <= LIN_PANEL_TILES * LIN_KB; /* every tile in the panel */
    /* a level whose dequant_row does not read the lanes layout gets the portable decoder's
     * values for it: the same, so the same bits */
    void (*const dequant_row)(const dsv4_lin_tables *, const dsv4_mat *, int64_t, int64_t, int, float *) =
        w->fmt == DSV4_WF_FP4L && !lv->dequant_fp4l   ? dsv4_lin_dequant_fp4l
        : w->fmt == DSV4_WF_FP4B && !lv->dequant_fp4b ? dsv4_lin_dequant_fp4b
                                                      : lv->dequant_row;
    for (int r0 = 0; r0 < n_rows; r0 += LIN_MB) {
        const int mb = n_rows - r0 < LIN_MB ? n_rows - r0 : LIN_MB;
        /* rows [0, mfull) of the block go in whole micro_rows groups: on the last column tile
         * micro_last reduces their lanes in registers; the rest through acc and reduce_row */
        const int mfull = lv->micro_last ? mb / lv->micro_rows * lv->micro_rows : 0;
        /* slots the reduction reads but no window writes: zeros, never stored */
        if (nr > nj)
            for (int s = mfull; s < mb; s++) memset(acc + ((int64_t)s * LIN_NB + nj) * L, 0, sizeof(float) * (size_t)(nr - nj) * L);
        for (int64_t k0 = 0; k0 < n; k0 += LIN_KB) {
            const int kb = n - k0 < LIN_KB ? (int)(n - k0) : LIN_KB;
            const int kpad = (kb + L - 1) / L * L; /* kb zero-padded to whole lane chunks */
            /* (LIN_NB, LIN_KB) tile of this k0; a row the tile pads to the window is zero,
             * its sums are never stored. The whole row in the panel: the same tiles for
             * every row block */
            float *wt = whole ? panel + k0 / LIN_KB * LIN_SCRATCH_WTILE : panel;
            if (r0 == 0 || !whole)
                for (int j = 0; j < nj; j++) {
                    if (j < nb) dequant_row(c->tab, w, o0 + j, k0, kb, wt + j * LIN_KB);
                    else memset(wt + j * LIN_KB, 0, sizeof(float) * (size_t)kpad);
                }
            const float *xb = x + (int64_t)r0 * ldx + k0;
            const int last = k0 + kb >= n;
            for (int j = 0; j < nj; j += J)
                for (int s = 0; s < mb; s += lv->micro_rows) {
                    const int rt = mb - s < lv->micro_rows ? mb - s : lv->micro_rows;
                    if (last && s < mfull)
                        lv->micro_last(xb + (int64_t)s * ldx, ldx, wt + j * LIN_KB, kb,
                                       acc + ((int64_t)s * LIN_NB + j) * L, k0 == 0, y + (int64_t)(r0 + s) * ldy + o0 + j,
                                       ldy, nb - j < J ? nb - j : J);
                    else
                        lv->micro[rt - 1](xb + (int64_t)s * ldx, ldx, wt + j * LIN_KB, kb,
                                          acc + ((int64_t)s * LIN_NB + j) * L, k0 == 0);
                }
        }
        for (int s = mfull; s < mb; s++)
            for (int g = 0; g < nb; g += 16)
                lv->reduce_row(acc + ((int64_t)s * LIN_NB + g) * L, nb - g < 16 ? nb - g : 16,
                               y + (int64_t)(r0 + s) * ldy + o0 + g);
    }
}
