/* test_fp4l_linear.c — every product on a DSV4_WF_FP4L matrix (the lanes layout of packed FP4,
 * kernels/fp4_lanes.h) gives the bits of the same product on the natural FP4 matrix it was
 * packed from (linear_fast.h's contract, session 25). With the argument "fp4b", the same for a
 * DSV4_WF_FP4B matrix (the shuffle layout, kernels/fp4_shuf.h; session 51), packed with
 * dsv4_fp4s_pack_row: every check below, "FP4L" read as the layout under test.
 *
 * Random natural FP4 matrices (ue8m0 and F32 scales; widths 128..4096, rows not multiples of
 * 4, 8 or 16) are packed with dsv4_fp4l_pack_row. Checked:
 *   - the reference: dsv4_mat_row, dsv4_linear_ref, dsv4_mat_bytes and dsv4_mat_rows views
 *     give the natural matrix's bits;
 *   - dsv4_linear at every level this CPU and build run, every path (auto, and the GEMV,
 *     small-M and GEMM forced; a level whose kernel lacks the layout plans another path, the
 *     same bits by the contract), 1 and 2 threads, 1..40 activation rows: FP4L == FP4 bit for
 *     bit, and within the P1 gate of the reference (max|diff| <= 1e-5 max|ref| over the
 *     shape's 40 rows);
 *   - an identity input reproduces dsv4_mat_row's values (exact dequantization);
 *   - scale bytes over the whole ue8m0 range but 255 (products overflow to inf, NaN): the
 *     same bits, NaNs equal as NaNs (their sign and payload are unspecified);
 *   - a job of several FP4L products (dsv4_linear_batch: the planner's whole-matrix tasks);
 *   - the W8A8 weight quantization (w8a8.c's fast row source) of FP4L == of FP4;
 *   - a malformed FP4L matrix (width not a multiple of 128) is zeros, as the reference says. */
#include <stdint.h>
#include <time.h>

#include "kernels/codec.h"
#include "kernels/cpu.h"
#include "kernels/fp4_lanes.h"
#include "kernels/fp4_shuf.h"
#include "kernels/kctx.h"
#include "kernels/linear.h"
#include "kernels/linear_fast.h"
#include "kernels/w8a8.h"
#include "linear_fixture.h"
#include "test.h"

/* the packed layout under test: DSV4_WF_FP4L, or DSV4_WF_FP4B (argument "fp4b") */
static dsv4_wfmt packed = DSV4_WF_FP4L;
static const char *packed_name(void) { return packed == DSV4_WF_FP4B ? "FP4B" : "FP4L"; }

/* A natural FP4 matrix and its copy in the layout under test, sharing the scales. */
typedef struct {
    dsv4_mat nat, lan;
    uint8_t *wn, *wl; /* (rows, cols / 2) each */
    void *scale;      /* (rows, cols / 32) ue8m0 bytes or F32 */
} pair;

/* wide: scale bytes 0..254 (F32: 2^-30 .. 2^30) instead of a few binades near 2^-8 */
static pair make_pair(int sc, int64_t rows, int64_t cols, int wide) {
    pair p;
    memset(&p, 0, sizeof p);
    const int64_t nb = rows * cols / 2, ns = rows * (cols / 32);
    p.wn = malloc((size_t)nb);
    p.wl = malloc((size_t)nb);
    for (int64_t i = 0; i < nb; i++) p.wn[i] = (uint8_t)rnd();
    for (int64_t r = 0; r < rows; r++)
        if (packed == DSV4_WF_FP4B) dsv4_fp4s_pack_row(p.wl + r * (cols / 2), p.wn + r * (cols / 2), cols);
        else dsv4_fp4l_pack_row(p.wl + r * (cols / 2), p.wn + r * (cols / 2), cols);
    if (sc == SC_F32) {
        float *s = malloc(sizeof(float) * (size_t)ns);
        for (int64_t i = 0; i < ns; i++)
            s[i] = wide ? ldexpf(1.0f + 0.5f * urand(), (int)(rnd() % 61) - 30) : (0.6f + 0.5f * urand()) * 0.01f;
        p.scale = s;
    } else {
        uint8_t *s = malloc((size_t)ns);
        for (int64_t i = 0; i < ns; i++) s[i] = (uint8_t)(wide ? rnd() % 255 : 118 + rnd() % 8);
        p.scale = s;
    }
    p.nat = (dsv4_mat){DSV4_WF_FP4, rows, cols, p.wn, p.scale, sc == SC_F32, 0};
    p.lan = (dsv4_mat){packed, rows, cols, p.wl, p.scale, sc == SC_F32, 0};
    return p;
}

static void free_pair(pair *p) { free(p->wn); free(p->wl); free(p->scale); }

/* outputs whose bits differ; two NaNs count as equal when nan_eq */
static int64_t bits_differ_nan(const float *a, const float *b, int64_t n, int nan_eq) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) && !(nan_eq && isnan(a[i]) && isnan(b[i]))) d++;
    return d;
}

static const char *path_name(dsv4_lin_path p) {
    return p == DSV4_LIN_GEMV ? "gemv" : p == DSV4_LIN_SMALLM ? "small-M" : p == DSV4_LIN_GEMM ? "gemm" : "auto";
}

/* ---- the reference ----------------------------------------------------------------------- */

static void check_reference(void) {
    static const int64_t shapes[][2] = {{7, 128}, {13, 384}, {5, 4096}};
    for (int sc = 0; sc < 2; sc++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            pair p = make_pair(sc, rows, cols, 0);
            float *a = malloc(sizeof(float) * (size_t)cols), *b = malloc(sizeof(float) * (size_t)cols);
            int64_t bad = 0;
            for (int64_t o = 0; o < rows; o++) {
                dsv4_mat_row(&p.nat, o, a);
                dsv4_mat_row(&p.lan, o, b);
                bad += bits_differ_nan(a, b, cols, 0);
            }
            CHECK_MSG(bad == 0, "dsv4_mat_row %lldx%lld sc %d: %lld weights differ", (long long)rows, (long long)cols, sc,
                      (long long)bad);
            CHECK(dsv4_mat_bytes(&p.nat) == dsv4_mat_bytes(&p.lan));
            /* a view of rows [2, rows - 1): the same rows in both layouts */
            dsv4_mat vn, vl;
            CHECK(dsv4_mat_rows(&p.nat, 2, rows - 3, &vn) == 0 && dsv4_mat_rows(&p.lan, 2, rows - 3, &vl) == 0);
            CHECK(vl.fmt == packed && vl.rows == rows - 3);
            bad = 0;
            for (int64_t o = 0; o < rows - 3; o++) {
                dsv4_mat_row(&vn, o, a);
                dsv4_mat_row(&vl, o, b);
                bad += bits_differ_nan(a, b, cols, 0);
            }
            CHECK_MSG(bad == 0, "row views %lldx%lld: %lld weights differ", (long long)rows, (long long)cols, (long long)bad);
            const int nr = 3;
            float *x = rand_vec(nr * cols), *yn = malloc(sizeof(float) * (size_t)(nr * rows)),
                  *yl = malloc(sizeof(float) * (size_t)(nr * rows));
            dsv4_linear_ref(&p.nat, x, nr, yn, a);
            dsv4_linear_ref(&p.lan, x, nr, yl, b);
            CHECK_MSG(bits_differ_nan(yn, yl, nr * rows, 0) == 0, "dsv4_linear_ref %lldx%lld sc %d", (long long)rows,
                      (long long)cols, sc);
            free(x); free(yn); free(yl); free(a); free(b);
            free_pair(&p);
        }
}

/* ---- dsv4_linear at one level --------------------------------------------------------------- */

#define MAX_NR 40

/* forced: outputs of forcings that took other paths than auto's (the repeats are skipped) */
typedef struct { int64_t outputs, differ, off_gate, forced; double worst_rel; } tally;

/* One matrix pair against the reference at every path, thread count and row count in nrs */
static void check_shape(int level, int sc, int64_t rows, int64_t cols, const int *nrs, int n_nrs, int wide, tally *t) {
    pair p = make_pair(sc, rows, cols, wide);
    float *x = rand_vec((int64_t)MAX_NR * cols);
    float *ref = malloc(sizeof(float) * (size_t)(MAX_NR * rows)), *scr = malloc(sizeof(float) * (size_t)cols);
    float *yn = malloc(sizeof(float) * (size_t)(MAX_NR * rows)), *yl = malloc(sizeof(float) * (size_t)(MAX_NR * rows));
    dsv4_linear_ref(&p.nat, x, MAX_NR, ref, scr);
    /* the gate's scale: the largest output of all MAX_NR rows (one output alone may cancel) */
    double amax = 0;
    for (int64_t i = 0; i < (int64_t)MAX_NR * rows; i++) amax = fmax(amax, fabs(ref[i]));
    for (int th = 1; th <= 2; th++) {
        dsv4_kctx_set_simd(kc[th], level);
        unsigned done[MAX_NR + 1] = {0}; /* by row count: the (natural, lanes) path pairs run */
        for (int pi = 0; pi < 4; pi++) {
            const dsv4_lin_path path = (dsv4_lin_path)pi;
            for (int ni = 0; ni < n_nrs; ni++) {
                const int nr = nrs[ni];
                /* a forcing that takes the paths an earlier one took runs the same plans */
                const unsigned pair = 1u << (4 * forced_path_of(kc[th], path, &p.nat, nr) +
                                             forced_path_of(kc[th], path, &p.lan, nr));
                if (done[nr] & pair) continue;
                done[nr] |= pair;
                const int64_t n_out = (int64_t)nr * rows;
                for (int64_t i = 0; i < n_out; i++) yn[i] = NAN, yl[i] = -NAN; /* a kernel that skips an output fails */
                linear_forced(kc[th], path, &p.nat, x, nr, yn);
                linear_forced(kc[th], path, &p.lan, x, nr, yl);
                const int64_t d = bits_differ_nan(yn, yl, n_out, wide);
                CHECK_MSG(d == 0, "%s %s level %s, %d thread(s), %s, %lldx%lld, %d rows: %lld of %lld outputs differ",
                          sc ? "f32-scale" : "ue8m0", wide ? "wide scales" : "", dsv4_simd_name(level), th,
                          path_name(path), (long long)rows, (long long)cols, nr, (long long)d, (long long)n_out);
                t->differ += d;
                t->outputs += n_out;
                t->forced += pi ? n_out : 0;
                if (wide) continue; /* overflowing products: no gate to keep */
                double dmax = 0;
                for (int64_t i = 0; i < n_out; i++) dmax = fmax(dmax, fabs((double)yl[i] - ref[i]));
                const double rel = amax > 0 ? dmax / amax : dmax;
                t->worst_rel = fmax(t->worst_rel, rel);
                if (!(rel <= 1e-5)) {
                    t->off_gate++;
                    CHECK_MSG(0, "level %s %s %lldx%lld %d rows: max-rel %.3g against the reference",
                              dsv4_simd_name(level), path_name(path), (long long)rows, (long long)cols, nr, rel);
                }
            }
        }
    }
    free(x); free(ref); free(scr); free(yn); free(yl);
    free_pair(&p);
}

/* An identity input (row s = unit vector of column cs[s]) gives y[s, o] = W[o, cs[s]]: the
 * exact dequantized weight, at every path. */
static void check_exact(int level) {
    const int64_t rows = 37, cols = 640;
    enum { NR = 12 };
    for (int sc = 0; sc < 2; sc++) {
        pair p = make_pair(sc, rows, cols, 0);
        float *x = calloc((size_t)(NR * cols), sizeof(float)), *y = malloc(sizeof(float) * NR * rows);
        float *row = malloc(sizeof(float) * (size_t)cols);
        int64_t cs[NR];
        for (int s = 0; s < NR; s++) {
            cs[s] = s < 4 ? s * 17 : (int64_t)(rnd() % (uint64_t)cols);
            x[s * cols + cs[s]] = 1.0f;
        }
        int64_t bad = 0;
        for (int pi = 0; pi < 4; pi++) {
            dsv4_kctx_set_simd(kc[2], level);
            linear_forced(kc[2], (dsv4_lin_path)pi, &p.lan, x, NR, y);
            for (int64_t o = 0; o < rows; o++) {
                dsv4_mat_row(&p.nat, o, row);
                for (int s = 0; s < NR; s++) bad += y[s * rows + o] != row[cs[s]];
            }
        }
        CHECK_MSG(bad == 0, "level %s sc %d: %lld outputs of an identity input are not the weight", dsv4_simd_name(level),
                  sc, (long long)bad);
        free(x); free(y); free(row);
        free_pair(&p);
    }
}

/* A job of FP4L products of 1..3 rows (a batch-16 expert phase's shape): whole-matrix GEMV
 * tasks, several products a job */
static void check_job(int level) {
    enum { NOPS = 9 };
    static const int64_t rows_set[] = {64, 67, 130, 257, 96};
    for (int sc = 0; sc < 2; sc++) {
        pair p[NOPS];
        float *x[NOPS], *yn[NOPS], *yl[NOPS];
        dsv4_lin_op on[NOPS], ol[NOPS];
        for (int i = 0; i < NOPS; i++) {
            const int64_t rows = rows_set[i % 5], cols = i % 3 ? 384 : 1024;
            const int nr = 1 + i % 3;
            p[i] = make_pair(sc, rows, cols, 0);
            x[i] = rand_vec(nr * cols);
            yn[i] = malloc(sizeof(float) * (size_t)(nr * rows));
            yl[i] = malloc(sizeof(float) * (size_t)(nr * rows));
            on[i] = (dsv4_lin_op){&p[i].nat, x[i], nr, yn[i]};
            ol[i] = (dsv4_lin_op){&p[i].lan, x[i], nr, yl[i]};
            /* the planner treats both layouts alike */
            CHECK(dsv4_lin_gemv_per(&p[i].nat, nr, 1, 4096, 1 << 20) == dsv4_lin_gemv_per(&p[i].lan, nr, 1, 4096, 1 << 20));
        }
        for (int th = 1; th <= 2; th++) {
            dsv4_kctx_set_simd(kc[th], level);
            dsv4_linear_batch(kc[th], on, NOPS);
            dsv4_linear_batch(kc[th], ol, NOPS);
            for (int i = 0; i < NOPS; i++)
                CHECK_MSG(bits_differ_nan(yn[i], yl[i], on[i].n_rows * p[i].nat.rows, 0) == 0,
                          "job level %s, %d thread(s), op %d: outputs differ", dsv4_simd_name(level), th, i);
        }
        for (int i = 0; i < NOPS; i++) {
            free(x[i]); free(yn[i]); free(yl[i]);
            free_pair(&p[i]);
        }
    }
}

/* W8A8's weight quantization reads FP4L through its fast row source */
static void check_w8a8(void) {
    const int64_t rows = 19, cols = 512;
    for (int sc = 0; sc < 2; sc++) {
        pair p = make_pair(sc, rows, cols, 0);
        const int64_t sb = dsv4_w8a8_storage_bytes(rows, cols);
        void *sn = aligned_alloc(64, (size_t)((sb + 63) & ~63)), *sl = aligned_alloc(64, (size_t)((sb + 63) & ~63));
        dsv4_mat qn, ql;
        dsv4_err err;
        CHECK(dsv4_w8a8_quantize_weights(kc[2], &p.nat, sn, &qn, &err) == DSV4_OK);
        CHECK(dsv4_w8a8_quantize_weights(kc[2], &p.lan, sl, &ql, &err) == DSV4_OK);
        CHECK_MSG(memcmp(sn, sl, (size_t)sb) == 0, "w8a8 storage of %s differs from FP4's (sc %d)", packed_name(), sc);
        free(sn); free(sl);
        free_pair(&p);
    }
}

/* FP4L needs whole 128-column lines: a matrix of another width is malformed, zeros */
static void check_malformed(int level) {
    const int64_t rows = 9, cols = 96;
    uint8_t w[9 * 48];
    uint8_t s[9 * 3];
    for (size_t i = 0; i < sizeof w; i++) w[i] = (uint8_t)rnd();
    for (size_t i = 0; i < sizeof s; i++) s[i] = 120;
    const dsv4_mat m = {packed, rows, cols, w, s, 0, 0}; /* 96: a multiple of neither 128 nor 64 */
    float x[2 * 96], y[2 * 9], row[96];
    for (int i = 0; i < 2 * 96; i++) x[i] = urand();
    dsv4_kctx_set_simd(kc[2], level);
    dsv4_linear(kc[2], &m, x, 2, y);
    int zeros = 1;
    for (int i = 0; i < 2 * 9; i++) zeros &= y[i] == 0.0f;
    dsv4_mat_row(&m, 3, row);
    for (int i = 0; i < 96; i++) zeros &= row[i] == 0.0f;
    CHECK_MSG(zeros, "level %s: an %s matrix of 96 columns is not zeros", dsv4_simd_name(level), packed_name());
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "fp4b")) packed = DSV4_WF_FP4B;
    const int best = fixture_open();
    CHECK(best >= 0);
    if (best < 0) return test_report();
    check_reference();
    check_w8a8();

    int all_nr[MAX_NR], few_nr[] = {1, 2, 3, 5, 8, 9, 16, 17, 23, 33, 40};
    for (int i = 0; i < MAX_NR; i++) all_nr[i] = i + 1;
    const int n_few = (int)(sizeof few_nr / sizeof few_nr[0]);
    /* small shapes at every row count, the wide ones at the paths' edges */
    static const int64_t small[][2] = {{1, 128}, {7, 256}, {13, 512}, {29, 1024}};
    static const int64_t large[][2] = {{130, 384}, {37, 2176}, {21, 4096}, {4, 2048}};
    for (int level = 0; level <= best; level++) {
        const clock_t t0 = clock();
        tally t = {0};
        for (int sc = 0; sc < 2; sc++) {
            for (size_t i = 0; i < sizeof small / sizeof small[0]; i++)
                check_shape(level, sc, small[i][0], small[i][1], all_nr, MAX_NR, 0, &t);
            for (size_t i = 0; i < sizeof large / sizeof large[0]; i++)
                check_shape(level, sc, large[i][0], large[i][1], few_nr, n_few, 0, &t);
            check_shape(level, sc, 11, 1024, few_nr, n_few, 1, &t); /* scales over the whole range */
        }
        {   /* what each path forced becomes for FP4L at this level (a kernel lacking the layout
             * hands it to another path): the coverage, printed */
            pair p = make_pair(SC_E8M0, 64, 1024, 0);
            char line[256];
            int k = 0;
            dsv4_kctx_set_simd(kc[1], level);
            for (int pi = 0; pi < 4; pi++) {
                dsv4_kctx_set_lin_path(kc[1], (dsv4_lin_path)pi);
                k += snprintf(line + k, sizeof line - (size_t)k, " %s:", path_name((dsv4_lin_path)pi));
                for (int nr = 1; nr <= 32; nr *= 2)
                    k += snprintf(line + k, sizeof line - (size_t)k, " %d->%s", nr,
                                  path_name((dsv4_lin_path)dsv4_linear_path_of(kc[1], &p.lan, nr)));
            }
            dsv4_kctx_set_lin_path(kc[1], DSV4_LIN_AUTO);
            printf("level %s, %s 64x1024 paths (forced: rows->taken):%s\n", dsv4_simd_name(level), packed_name(), line);
            free_pair(&p);
        }
        CHECK_MSG(level == DSV4_SIMD_SCALAR || t.forced > 0, "level %s: no forced path other than auto's ran",
                  dsv4_simd_name(level));
        check_exact(level);
        check_job(level);
        check_malformed(level);
        printf("level %s, %s: %lld outputs, %lld differ from FP4's in any bit, worst max-rel against the reference "
               "%.3g (%lld over 1e-5); %.2f s cpu\n",
               dsv4_simd_name(level), packed_name(), (long long)t.outputs, (long long)t.differ, t.worst_rel, (long long)t.off_gate,
               (double)(clock() - t0) / CLOCKS_PER_SEC);
    }
    fixture_close();
    return test_report();
}
