/* test_fp4l_panel.c — the AVX-512 small-M and GEMM-tile kernels on FP4 in the lanes layout
 * (kernels/fp4_lanes.h) against the same kernels on the natural FP4 matrix it was packed from:
 * the same bits for every output (the layout contract), called directly (no planner), so every
 * path of the small-M kernel is reached by the row count, the task's outputs and the scales:
 * the fused blocks (ue8m0, 1..24 rows, the lanes ones 1..48 at 512 and 1024 columns, tasks of
 * whole fours and a 1-3 output tail), the panels decoded by their first row block (ue8m0, 512
 * and 1024 columns, natural 25..64 rows, lanes 49..64), the plain panels
 * (F32 scales, other widths, column tiles past 1024 columns), and the GEMM's dequantized tiles
 * at both AVX-512 levels. The lanes weights lie right before an inaccessible page (a load past a
 * row's last line faults) and, in a second copy, 8 bytes off a 64-byte line; x is misaligned
 * too. The natural products are checked against the reference (max-rel 1e-5), so that two
 * equally wrong answers do not pass. */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

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

/* bytes ending at an inaccessible page: the returned pointer + len is the page's start */
static uint8_t *guarded(size_t len, void **map, size_t *map_len) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), body = (len + pg - 1) / pg * pg;
    *map_len = body + pg;
    uint8_t *m = mmap(NULL, *map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    mprotect(m + body, pg, PROT_NONE);
    *map = m;
    return m + body - len;
}

typedef struct {
    const dsv4_lin_kernels *kn;
    const char *name;
} level;

static dsv4_lin_tables *tab;
static float *scratch; /* LIN_SCRATCH_GEMM_FLOATS, 64-byte aligned */

/* y (n_rows, rows) = x . w^T by the level's small-M kernel in tasks of `per` outputs */
static void run_smallm(const level *lv, const dsv4_mat *w, const float *x, int n_rows, float *y, int64_t per) {
    const dsv4_lin_call c = {.tab = tab, .ldx = w->cols, .ldy = w->rows};
    for (int64_t o0 = 0; o0 < w->rows; o0 += per)
        lv->kn->smallm(&c, w, x, n_rows, y, o0, o0 + per < w->rows ? o0 + per : w->rows, scratch);
}

/* the same by the level's GEMM tiles: windows of LIN_NB outputs, blocks of LIN_MB rows */
static void run_gemm(const level *lv, const dsv4_mat *w, const float *x, int n_rows, float *y) {
    const dsv4_lin_call c = {.tab = tab, .ldx = w->cols, .ldy = w->rows};
    for (int r0 = 0; r0 < n_rows; r0 += LIN_MB)
        for (int64_t o0 = 0; o0 < w->rows; o0 += LIN_NB)
            lv->kn->gemm(&c, w, x + (int64_t)r0 * w->cols, n_rows - r0 < LIN_MB ? n_rows - r0 : LIN_MB,
                         y + (int64_t)r0 * w->rows, o0, scratch);
}

static int64_t differ(const float *a, const float *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += memcmp(a + i, b + i, sizeof(float)) != 0;
    return d;
}

static double max_rel(const float *a, const float *ref, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - ref[i]);
        md = d > md ? d : md;
        mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
    }
    return mr > 0 ? md / mr : md;
}

static int64_t outputs, cases;

/* one matrix at every row count of nr_list: small-M in tasks of per outputs, or (gemm) the GEMM */
static void check_shape(const level *lv, int64_t rows, int64_t cols, int f32, const int *nr_list, int n_nr,
                        int64_t per, int gemm) {
    const int64_t nb = rows * cols / 2, ns = rows * (cols / 32);
    uint8_t *nat = malloc((size_t)nb);
    for (int64_t i = 0; i < nb; i++) nat[i] = (uint8_t)rnd();
    void *scale = f32 ? malloc(sizeof(float) * (size_t)ns) : malloc((size_t)ns);
    for (int64_t i = 0; i < ns; i++) {
        if (f32) ((float *)scale)[i] = (0.6f + 0.5f * urand()) * 0.01f; /* not powers of 2 */
        else ((uint8_t *)scale)[i] = (uint8_t)(118 + rnd() % 8);
    }
    void *map;
    size_t map_len;
    uint8_t *lg = guarded((size_t)nb, &map, &map_len); /* lanes, before the guard page */
    uint8_t *lm_buf = malloc((size_t)nb + 72), *lm = lm_buf + (64 - (uintptr_t)lm_buf % 64) % 64 + 8; /* lanes, off a line */
    CHECK(lg != NULL);
    if (!lg) return;
    for (int64_t r = 0; r < rows; r++) dsv4_fp4l_pack_row(lg + r * (cols / 2), nat + r * (cols / 2), cols);
    memcpy(lm, lg, (size_t)nb);
    const dsv4_mat wn = {DSV4_WF_FP4, rows, cols, nat, scale, f32, 0};
    const dsv4_mat wg = {DSV4_WF_FP4L, rows, cols, lg, scale, f32, 0}, wm = {DSV4_WF_FP4L, rows, cols, lm, scale, f32, 0};

    int max_nr = 0;
    for (int i = 0; i < n_nr; i++) max_nr = nr_list[i] > max_nr ? nr_list[i] : max_nr;
    float *x_buf = malloc(sizeof(float) * ((size_t)max_nr * (size_t)cols + 4)), *x = x_buf + 1; /* misaligned */
    for (int64_t i = 0; i < (int64_t)max_nr * cols; i++) x[i] = urand();
    const size_t ny = (size_t)max_nr * (size_t)rows;
    float *yn = malloc(sizeof(float) * ny), *yl = malloc(sizeof(float) * ny), *ym = malloc(sizeof(float) * ny);
    float *yr = malloc(sizeof(float) * ny), *ref_scratch = malloc(sizeof(float) * (size_t)cols);
    dsv4_linear_ref(&wn, x, max_nr, yr, ref_scratch);

    for (int i = 0; i < n_nr; i++) {
        const int nr = nr_list[i];
        const int64_t n = (int64_t)nr * rows;
        {
            const int path = gemm;
            for (int64_t k = 0; k < n; k++) yn[k] = yl[k] = ym[k] = NAN;
            if (path == 0) {
                run_smallm(lv, &wn, x, nr, yn, per);
                run_smallm(lv, &wg, x, nr, yl, per);
                run_smallm(lv, &wm, x, nr, ym, per);
            } else {
                run_gemm(lv, &wn, x, nr, yn);
                run_gemm(lv, &wg, x, nr, yl);
                run_gemm(lv, &wm, x, nr, ym);
            }
            const int64_t dl = differ(yl, yn, n), dm = differ(ym, yn, n);
            const double rel = max_rel(yn, yr, n);
            CHECK_MSG(dl == 0 && dm == 0 && rel <= 1e-5,
                      "%s %s %s %lld x %lld, %d rows, tasks of %lld: %lld / %lld outputs differ (at the guard / "
                      "off a line), natural max-rel %.3g",
                      lv->name, path ? "gemm" : "smallm", f32 ? "f32-scale" : "ue8m0", (long long)rows,
                      (long long)cols, nr, (long long)per, (long long)dl, (long long)dm, rel);
            outputs += n;
            cases++;
        }
    }
    free(yn); free(yl); free(ym); free(yr); free(ref_scratch); free(x_buf);
    free(lm_buf); munmap(map, map_len); free(scale); free(nat);
}

int main(void) {
    level levels[2];
    int nl = 0;
    if (dsv4_cpu_simd() >= DSV4_SIMD_AVX512VBMI && dsv4_lin_kernels_avx512vbmi())
        levels[nl++] = (level){dsv4_lin_kernels_avx512vbmi(), "avx512vbmi"};
    if (dsv4_cpu_simd() >= DSV4_SIMD_AVX512 && dsv4_lin_kernels_avx512())
        levels[nl++] = (level){dsv4_lin_kernels_avx512(), "avx512"};
    if (nl == 0) {
        fprintf(stderr, "SKIP: no AVX-512 level on this CPU or build\n");
        return TEST_SKIP;
    }
    tab = aligned_alloc(64, (sizeof(dsv4_lin_tables) + 63) / 64 * 64);
    dsv4_lin_tables_init(tab);
    scratch = aligned_alloc(64, sizeof(float) * LIN_SCRATCH_GEMM_FLOATS);

    /* every small-M row count: the fused blocks' 1..24 (natural: one to four balanced blocks of
     * up to 6; lanes: balanced blocks of up to 5, to 48 rows at 512 and 1024 columns), the
     * panels' 25..64 (lanes 49..64; blocks of 3, the last 4 as 2 + 2) */
    int all[64];
    for (int i = 0; i < 64; i++) all[i] = i + 1;
    static const int some[] = {1, 2, 5, 7, 12, 16, 24, 25, 31, 48, 64};
    static const int gemm_rows[] = {1, 3, 4, 5, 17, 48, 49, 100};
    static const int fused_rows[] = {5, 9, 13, 24};
    const int n_some = (int)(sizeof some / sizeof *some), n_gemm = (int)(sizeof gemm_rows / sizeof *gemm_rows);
    for (int l = 0; l < nl; l++) {
        const level *lv = &levels[l];
        for (int f32 = 0; f32 < 2; f32++) {
            if (lv->kn->smallm) {
                /* the experts' widths (the panels' decoding first block at 512 and 1024), tasks
                 * of whole fours and with a 1-3 output tail (per: a multiple of 4 or all) */
                check_shape(lv, 40, 512, f32, all, 64, 40, 0);
                check_shape(lv, 42, 1024, f32, all, 64, 20, 0);
                /* other widths: 128 (one line), 384 and 640 (not the 512 / 1024 constants), the
                 * checkpoint's 2048 and 4096 (the panels' column tiles of 1024) */
                check_shape(lv, 13, 128, f32, some, n_some, 13, 0);
                check_shape(lv, 21, 384, f32, some, n_some, 8, 0);
                check_shape(lv, 19, 640, f32, some, n_some, 12, 0);
                check_shape(lv, 10, 2048, f32, some, n_some, 10, 0);
                check_shape(lv, 9, 4096, f32, some, n_some, 4, 0);
                /* the lanes fused path runs a task in stretches of SMFL_PASS_BYTES of weights
                 * (4096 columns: 32 groups, 128 outputs), every row block over each: one task
                 * of 136 outputs runs two */
                check_shape(lv, 136, 4096, f32, fused_rows, 4, 136, 0);
            }
            /* the GEMM tiles: column tiles of LIN_KB (512) with a short last one, windows of
             * LIN_NB outputs with a partial last one, row blocks of LIN_MB */
            check_shape(lv, 53, 640, f32, gemm_rows, n_gemm, 0, 1);
            check_shape(lv, 50, 1152, f32, gemm_rows, n_gemm, 0, 1);
            check_shape(lv, 48, 128, f32, gemm_rows, n_gemm, 0, 1);
        }
    }
    printf("%lld outputs in %lld cases, FP4L against FP4\n", (long long)outputs, (long long)cases);
    free(scratch);
    free(tab);
    return test_report();
}
