/* test_fp4l_gemv.c — level avx512's FP4 GEMV on the lanes layout (DSV4_WF_FP4L) against the
 * same GEMV on the natural FP4 matrix it was packed from, bit for bit, calling the kernels
 * directly (below the planner, so every case of the kernel is reached whatever the planner
 * picks): 1..8 activation rows; whole matrices (far runs from 16 rows a run at up to 4 rows,
 * 2 rows of each run at 1-2 rows on 512 and 1024 columns, odd rows a run, the rows after the
 * runs) and parts of one (adjacent rows, tasks of any length from a multiple of 4, the rows
 * after the last block of R); ue8m0 and F32 scales; 128 .. 2048 columns; x at any float
 * offset from a 64-byte line. The outputs outside the task stay untouched. Level avx512vbmi's
 * GEMV (which hands FP4 to level avx512's) too. Skipped on a CPU or build without AVX-512. */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cpu.h"
#include "kernels/fp4_lanes.h"
#include "kernels/linear.h"
#include "kernels/linear_fast.h"
#include "test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}
static float urand(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

typedef struct {
    dsv4_mat nat, lanes; /* the same weights and scales, natural and lanes bytes */
    uint8_t *wn, *wl;    /* [rows, cols / 2] each */
    void *sc;            /* [rows, cols / 32]: ue8m0 bytes or F32 */
} pair_mat;

static pair_mat make(int64_t rows, int64_t cols, int f32) {
    pair_mat p;
    const int64_t nb = rows * cols / 2, ns = rows * (cols / 32);
    p.wn = malloc((size_t)nb);
    p.wl = malloc((size_t)nb);
    p.sc = malloc((size_t)ns * (f32 ? 4 : 1));
    for (int64_t i = 0; i < nb; i++) p.wn[i] = (uint8_t)rnd();
    for (int64_t r = 0; r < rows; r++) dsv4_fp4l_pack_row(p.wl + r * (cols / 2), p.wn + r * (cols / 2), cols);
    for (int64_t i = 0; i < ns; i++) {
        if (f32) ((float *)p.sc)[i] = (1.0f + 0.5f * urand()) * (float)(1 << (rnd() % 8)) / 64.0f;
        else ((uint8_t *)p.sc)[i] = (uint8_t)(120 + rnd() % 14); /* 2^-7 .. 2^6 */
    }
    p.nat = (dsv4_mat){DSV4_WF_FP4, rows, cols, p.wn, p.sc, f32, 0};
    p.lanes = p.nat;
    p.lanes.fmt = DSV4_WF_FP4L;
    p.lanes.w = p.wl;
    return p;
}

static void drop(pair_mat *p) {
    free(p->wn);
    free(p->wl);
    free(p->sc);
}

/* outputs [o0, o1) of nx rows through kn's GEMV, natural against lanes; returns the outputs
 * that differ in any bit (or were written outside the task, or stayed unwritten) */
static int64_t one(const dsv4_lin_kernels *kn, const dsv4_lin_call *c, const pair_mat *p, const float *x, int nx,
                   int64_t o0, int64_t o1) {
    const int64_t rows = p->nat.rows;
    float *yn = malloc(sizeof(float) * (size_t)(nx * rows)), *yl = malloc(sizeof(float) * (size_t)(nx * rows));
    for (int64_t i = 0; i < nx * rows; i++) yn[i] = yl[i] = NAN;
    kn->gemv(c, &p->nat, x, nx, yn, o0, o1);
    kn->gemv(c, &p->lanes, x, nx, yl, o0, o1);
    int64_t bad = 0;
    for (int s = 0; s < nx; s++)
        for (int64_t o = 0; o < rows; o++) {
            const float a = yn[s * rows + o], b = yl[s * rows + o];
            const int in = o >= o0 && o < o1;
            if (in) bad += memcmp(&a, &b, 4) != 0 || isnan(b);
            else bad += !isnan(b);
        }
    free(yn);
    free(yl);
    return bad;
}

int main(void) {
    if (dsv4_cpu_simd() < DSV4_SIMD_AVX512 || !dsv4_lin_kernels_avx512()) {
        printf("no AVX-512 (CPU or build): skipped\n");
        return test_report();
    }
    static dsv4_lin_tables tab;
    dsv4_lin_tables_init(&tab);
    const dsv4_lin_call call = {.tab = &tab};
    const dsv4_lin_kernels *kns[2] = {dsv4_lin_kernels_avx512(),
                                      dsv4_cpu_simd() >= DSV4_SIMD_AVX512VBMI ? dsv4_lin_kernels_avx512vbmi() : NULL};
    /* rows: 64 and 256 give far runs at every R (16 rows a run from 64 rows at R 4), 67 and
     * 130 odd runs and rows after them, 5 and 13 only adjacent rows and tails */
    static const int64_t shapes[][2] = {{64, 512}, {67, 1024}, {130, 512}, {256, 1024}, {5, 128},
                                        {13, 384}, {72, 2048}, {64, 256}, {66, 640}};
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    float *xbuf = aligned_alloc(64, sizeof(float) * (8 * 2048 + 64));
    int64_t total = 0, bad = 0;
    for (int si = 0; si < nshapes; si++)
        for (int f32 = 0; f32 < 2; f32++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            pair_mat p = make(rows, cols, f32);
            for (int nx = 1; nx <= 8; nx++) {
                const float *x = xbuf + (nx % 4) * 4; /* 0, 16, 32, 48 bytes past a line */
                for (int64_t i = 0; i < nx * cols; i++) xbuf[(nx % 4) * 4 + i] = urand();
                /* the whole matrix, then tasks [o0, o1): o0 a multiple of 4 (the driver's) */
                const int64_t tasks[][2] = {{0, rows}, {0, rows - 1}, {4, rows}, {rows > 8 ? 8 : 0, rows},
                                            {0, rows < 4 ? rows : 4}, {rows >= 12 ? 4 : 0, rows >= 12 ? 11 : 1}};
                for (int ti = 0; ti < 6; ti++) {
                    const int64_t o0 = tasks[ti][0], o1 = tasks[ti][1];
                    if (o0 >= o1 || o1 > rows) continue;
                    for (int ki = 0; ki < 2; ki++) {
                        if (!kns[ki]) continue;
                        const int64_t b = one(kns[ki], &call, &p, x, nx, o0, o1);
                        CHECK_MSG(b == 0, "level %s, %lld x %lld %s scales, %d rows, outputs [%lld, %lld): %lld differ",
                                  ki ? "avx512vbmi" : "avx512", (long long)rows, (long long)cols,
                                  f32 ? "F32" : "ue8m0", nx, (long long)o0, (long long)o1, (long long)b);
                        bad += b;
                        total += nx * (o1 - o0);
                    }
                }
            }
            drop(&p);
        }
    free(xbuf);
    printf("FP4L GEMV against the natural FP4 GEMV: %lld outputs, %lld differ in any bit\n", (long long)total,
           (long long)bad);
    return test_report();
}
