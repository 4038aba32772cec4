/* linear_tile.c — the GEMM tile driver shared by every kernel level of dsv4_linear.
 *
 * One task owns LIN_NB consecutive outputs (linear_fast.h). For each block of up to LIN_MB
 * activation rows it clears the lane accumulators, then for each LIN_KB-column tile
 * dequantizes the task's weight rows once into the (LIN_NB, LIN_KB) tile and runs the
 * level's micro-kernel over (rows of the block) x (4 tile rows) windows; at the end the
 * lanes of each output are reduced in the level's fixed tree. The level supplies only the
 * arithmetic (dequantizer, micro-kernels, reduction) and its lane count; the loops, which
 * decide nothing about the summation order, live here once.
 */
#include <string.h>

#include "kernels/linear_fast.h"

void dsv4_lin_gemm_tiled(const dsv4_lin_tile_level *lv, const dsv4_lin_call *c, const dsv4_mat *w, const float *x,
                         int n_rows, float *y, int64_t o0, float *scratch) {
    const int L = lv->lanes;
    const int64_t n = w->cols, rows = w->rows;
    const int nb = rows - o0 < LIN_NB ? (int)(rows - o0) : LIN_NB;
    const int nj = (nb + 3) & ~3; /* tile rows computed: nb rounded up to the kernels' 4 */
    float *wt = scratch;                      /* (LIN_NB, LIN_KB) dequantized weight tile */
    float *acc = scratch + LIN_SCRATCH_WTILE; /* (LIN_MB, LIN_NB, L) lane accumulators */
    for (int r0 = 0; r0 < n_rows; r0 += LIN_MB) {
        const int mb = n_rows - r0 < LIN_MB ? n_rows - r0 : LIN_MB;
        memset(acc, 0, sizeof(float) * (size_t)mb * LIN_NB * (size_t)L);
        for (int64_t k0 = 0; k0 < n; k0 += LIN_KB) {
            const int kb = n - k0 < LIN_KB ? (int)(n - k0) : LIN_KB;
            const int kpad = (kb + L - 1) / L * L; /* kb zero-padded to whole lane chunks */
            /* a row the tile pads to the kernels' width is zero; its sums are never stored */
            for (int j = 0; j < nj; j++) {
                if (j < nb) lv->dequant_row(c->tab, w, o0 + j, k0, kb, wt + j * LIN_KB);
                else memset(wt + j * LIN_KB, 0, sizeof(float) * (size_t)kpad);
            }
            const float *xb = x + (int64_t)r0 * n + k0;
            for (int s = 0; s < mb; s += lv->micro_rows) {
                const int rt = mb - s < lv->micro_rows ? mb - s : lv->micro_rows;
                for (int j = 0; j < nj; j += 4)
                    lv->micro[rt - 1](xb + (int64_t)s * n, n, wt + j * LIN_KB, kb,
                                      acc + ((int64_t)s * LIN_NB + j) * L);
            }
        }
        for (int s = 0; s < mb; s++) lv->reduce_row(acc + (int64_t)s * LIN_NB * L, nb, y + (int64_t)(r0 + s) * rows + o0);
    }
}
