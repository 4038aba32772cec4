/* test_w8a8.c — the P2 W8A8 kernels (kernels/w8a8.h).
 *
 *   - the quantizers against the definition: hand-worked rows (ties to even, the 1e-4
 *     amax floor, the clamp), weight rows within s_w / 2 of their source with s_w = amax/127;
 *   - the threaded kernel (AVX2 when the CPU has it, and the portable level forced) against
 *     the scalar oracle bit for bit: rows 1/7/129, cols 32/100/1056, n_rows 1/3/17, F32,
 *     BF16, FP8 and FP4 sources, all-zero weight and activation rows, tiny rows (the amax
 *     floor), 1/2/3 threads, more rows than one quantization pass;
 *   - the oracle against an independent double-precision evaluation of the formula;
 *   - NaN/inf activation rows give NaN outputs only in their row;
 *   - the int32 overflow check: the bound is tight, a sum at the bound is exact, wider
 *     matrices are refused;
 *   - the DSV4_WF_I8 format through dsv4_mat_row / dsv4_mat_rows / dsv4_mat_bytes /
 *     dsv4_linear_ref (the dequantized product) and the w8a8 numeric mode (P2's).
 */
#include <math.h>
#include <stdint.h>

#include "kernels/codec.h"
#include "kernels/cpu.h"
#include "kernels/kctx.h"
#include "kernels/linear.h"
#include "kernels/w8a8.h"
#include "model/numerics.h"
#include "test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}
static float urand(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

typedef struct {
    dsv4_mat m;
    void *w, *scale;
} tmat;

static const char *fmt_name(dsv4_wfmt f) {
    switch (f) {
    case DSV4_WF_F32: return "f32";
    case DSV4_WF_BF16: return "bf16";
    case DSV4_WF_FP8: return "fp8";
    case DSV4_WF_FP4: return "fp4";
    default: return "?";
    }
}

/* Random source weights in format f; row `zero` (if >= 0) stored as all zeros. */
static tmat make_src(dsv4_wfmt f, int64_t rows, int64_t cols, int64_t zero) {
    tmat t = {0};
    t.m.fmt = f;
    t.m.rows = rows;
    t.m.cols = cols;
    const int64_t n = rows * cols;
    switch (f) {
    case DSV4_WF_F32: {
        float *p = malloc(sizeof(float) * n);
        for (int64_t i = 0; i < n; i++) p[i] = urand() * (1.0f + (float)(i / cols % 5));
        if (zero >= 0) memset(p + zero * cols, 0, sizeof(float) * cols);
        t.w = p;
        break;
    }
    case DSV4_WF_BF16: {
        uint16_t *p = malloc(2 * n);
        for (int64_t i = 0; i < n; i++) p[i] = dsv4_f32_to_bf16(0.05f * urand());
        if (zero >= 0) memset(p + zero * cols, 0, 2 * cols);
        t.w = p;
        break;
    }
    case DSV4_WF_FP8: {
        uint8_t *p = malloc(n);
        for (int64_t i = 0; i < n; i++) {
            uint8_t b;
            do b = (uint8_t)rnd(); while ((b & 0x7f) == 0x7f);
            p[i] = b;
        }
        if (zero >= 0) memset(p + zero * cols, 0, cols);
        const int64_t ns = ((rows + 127) / 128) * ((cols + 127) / 128);
        uint8_t *s = malloc(ns);
        for (int64_t i = 0; i < ns; i++) s[i] = (uint8_t)(120 + rnd() % 6);
        t.w = p;
        t.scale = s;
        break;
    }
    case DSV4_WF_FP4: {
        uint8_t *p = malloc(n / 2);
        for (int64_t i = 0; i < n / 2; i++) p[i] = (uint8_t)rnd();
        if (zero >= 0) memset(p + zero * cols / 2, 0x88, cols / 2); /* -0 nibbles */
        const int64_t ns = rows * (cols / 32);
        uint8_t *s = malloc(ns);
        for (int64_t i = 0; i < ns; i++) s[i] = (uint8_t)(118 + rnd() % 8);
        t.w = p;
        t.scale = s;
        break;
    }
    default: break;
    }
    t.m.w = t.w;
    t.m.scale = t.scale;
    return t;
}

static void free_tmat(tmat *t) { free(t->w); free(t->scale); }

/* the same FP8/FP4 matrix with its ue8m0 scales stored as F32 (times 1.5: not powers of two) */
static void scales_to_f32(tmat *t) {
    const int64_t ns = t->m.fmt == DSV4_WF_FP8 ? ((t->m.rows + 127) / 128) * ((t->m.cols + 127) / 128)
                                               : t->m.rows * (t->m.cols / 32);
    float *f = malloc(sizeof(float) * ns);
    for (int64_t i = 0; i < ns; i++) f[i] = 1.5f * dsv4_e8m0_to_f32(((uint8_t *)t->scale)[i]);
    free(t->scale);
    t->scale = f;
    t->m.scale = f;
    t->m.scale_is_f32 = 1;
}

/* An INT8 copy with owned storage. */
typedef struct {
    dsv4_mat m;
    void *storage;
} qmat;

static qmat quantize(dsv4_kctx *k, const dsv4_mat *src) {
    qmat q = {0};
    int64_t bytes = dsv4_w8a8_storage_bytes(src->rows, src->cols);
    q.storage = aligned_alloc(64, (size_t)((bytes + 63) & ~63));
    dsv4_err err = {0};
    int rc = dsv4_w8a8_quantize_weights(k, src, q.storage, &q.m, &err);
    CHECK_MSG(rc == 0, "quantize: %s", err.msg);
    return q;
}

/* Activations: row r scaled by 10^(r%5 - 2); row 1 (if any) all zeros, row 2 (if any)
 * tiny so the 1e-4 amax floor applies. */
static float *make_x(int n_rows, int64_t cols) {
    float *x = malloc(sizeof(float) * (size_t)(n_rows * cols));
    for (int r = 0; r < n_rows; r++) {
        const float sc = powf(10.0f, (float)(r % 5 - 2));
        for (int64_t i = 0; i < cols; i++) x[r * cols + i] = sc * urand();
        if (r == 1) memset(x + r * cols, 0, sizeof(float) * cols);
        if (r == 2)
            for (int64_t i = 0; i < cols; i++) x[r * cols + i] = 3e-5f * urand();
    }
    return x;
}

/* ---- the quantizers against the definition ---------------------------------------------- */

static void test_quantize_row(void) {
    /* amax 127 -> s_x = 1: q = round_half_even(x) */
    const float x[] = {127.0f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, -126.4f, 0.49f};
    const int8_t want[] = {127, 2, 4, -2, 0, 0, 2, -126, 0};
    int8_t q[9];
    float s = dsv4_w8a8_quantize_row(x, 9, q);
    CHECK(s == 1.0f);
    CHECK(memcmp(q, want, sizeof want) == 0);
    /* below the floor: amax = 1e-4, s = 1e-4 / 127 */
    const float tiny[] = {1e-6f, -2e-5f, 0.0f};
    s = dsv4_w8a8_quantize_row(tiny, 3, q);
    CHECK(s == 1e-4f / 127.0f);
    CHECK(q[0] == (int8_t)lrint(1e-6 / (1e-4 / 127)) && q[1] == (int8_t)lrint(-2e-5 / (1e-4 / 127)) && q[2] == 0);
    CHECK(q[0] == 1 && q[1] == -25);
    /* all zeros */
    const float z[4] = {0};
    s = dsv4_w8a8_quantize_row(z, 4, q);
    CHECK(s == 1e-4f / 127.0f && q[0] == 0 && q[3] == 0);
    /* |q| <= 127 and the largest element maps to +-127; every q within 1/2 of x / s */
    float r[1000];
    int8_t qr[1000];
    for (int i = 0; i < 1000; i++) r[i] = 3.0f * urand();
    r[517] = -5.0f;
    s = dsv4_w8a8_quantize_row(r, 1000, qr);
    CHECK(s == 5.0f / 127.0f);
    CHECK(qr[517] == -127);
    int ok = 1;
    for (int i = 0; i < 1000; i++) ok &= fabs((double)qr[i] - (double)r[i] / (double)s) <= 0.5 + 1e-5;
    CHECK(ok);
    /* non-finite -> NaN scale, zeros */
    r[3] = NAN;
    s = dsv4_w8a8_quantize_row(r, 1000, qr);
    CHECK(isnan(s) && qr[517] == 0);
    r[3] = -INFINITY;
    s = dsv4_w8a8_quantize_row(r, 1000, qr);
    CHECK(isnan(s));
}

static int n_ctx;
static dsv4_kctx *ctx[6];
static const char *ctx_name[6];

static void test_quantize_weights(dsv4_kctx *k3) {
    const dsv4_wfmt fmts[] = {DSV4_WF_F32, DSV4_WF_BF16, DSV4_WF_FP8, DSV4_WF_FP4};
    for (int f = 0; f < 6; f++) { /* 4, 5: FP8, FP4 with F32 scales */
        const int64_t rows = 200, cols = 1056;
        tmat t = make_src(fmts[f < 4 ? f : f - 2], rows, cols, 7);
        if (f >= 4) scales_to_f32(&t);
        qmat q1 = quantize(NULL, &t.m);
        CHECK(q1.m.fmt == DSV4_WF_I8 && q1.m.rows == rows && q1.m.cols == cols && q1.m.scale_is_f32);
        for (int c = 0; c < n_ctx; c++) { /* every level and thread count: the same bytes */
            qmat qc = quantize(ctx[c], &t.m);
            CHECK_MSG(memcmp(q1.storage, qc.storage, (size_t)dsv4_w8a8_storage_bytes(rows, cols)) == 0,
                      "%s: quantization with %s differs", fmt_name(t.m.fmt), ctx_name[c]);
            free(qc.storage);
        }
        CHECK(dsv4_mat_bytes(&q1.m) == rows * cols + rows * 4);
        float *src = malloc(sizeof(float) * cols), *deq = malloc(sizeof(float) * cols);
        int ok = 1;
        for (int64_t o = 0; o < rows; o++) {
            dsv4_mat_row(&t.m, o, src);
            dsv4_mat_row(&q1.m, o, deq);
            const float sw = ((const float *)q1.m.scale)[o];
            const int8_t *qo = (const int8_t *)q1.m.w + o * cols;
            double amax = 0;
            int qmax = 0;
            for (int64_t i = 0; i < cols; i++) {
                amax = fmax(amax, fabs(src[i]));
                qmax = abs(qo[i]) > qmax ? abs(qo[i]) : qmax;
                ok &= deq[i] == (float)qo[i] * sw;
            }
            if (o == 7) {
                ok &= amax == 0 && sw == 1.0f && qmax == 0;
                continue;
            }
            ok &= sw == (float)amax / 127.0f && qmax == 127;
            for (int64_t i = 0; i < cols; i++) {
                ok &= fabs((double)deq[i] - src[i]) <= 0.5 * sw * (1 + 1e-5);
                /* exactly the definition applied to the exact source value */
                const float r = nearbyintf(src[i] / sw);
                ok &= qo[i] == (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
            }
        }
        CHECK_MSG(ok, "%s%s: INT8 rows are not the quantized source rows", fmt_name(t.m.fmt),
                  t.m.scale_is_f32 ? " (F32 scales)" : "");
        /* row views */
        dsv4_mat v;
        CHECK(dsv4_mat_rows(&q1.m, 64, 16, &v) == 0);
        dsv4_mat_row(&v, 3, deq);
        dsv4_mat_row(&q1.m, 67, src);
        CHECK(memcmp(src, deq, sizeof(float) * cols) == 0);
        free(src);
        free(deq);
        free(q1.storage);
        free_tmat(&t);
    }
    /* non-finite weights are refused, naming the first bad row */
    const int64_t rows = 40, cols = 64;
    tmat t = make_src(DSV4_WF_F32, rows, cols, -1);
    ((float *)t.w)[9 * cols + 3] = INFINITY;
    ((float *)t.w)[5 * cols + 60] = NAN;
    void *st = aligned_alloc(64, (size_t)((dsv4_w8a8_storage_bytes(rows, cols) + 63) & ~63));
    dsv4_mat dst;
    dsv4_err err = {0};
    CHECK(dsv4_w8a8_quantize_weights(k3, &t.m, st, &dst, &err) == DSV4_ERR_FORMAT);
    CHECK_ERR(err, DSV4_ERR_FORMAT, "row 5 ");
    dsv4_mat none = {0};
    CHECK(dsv4_w8a8_quantize_weights(NULL, &none, st, &dst, &err) == DSV4_ERR_ARG);
    free(st);
    free_tmat(&t);
}

/* ---- the oracle against an independent evaluation --------------------------------------- */

static void test_ref_formula(void) {
    const int64_t rows = 9, cols = 77;
    const int n_rows = 4;
    tmat t = make_src(DSV4_WF_F32, rows, cols, 2);
    qmat q = quantize(NULL, &t.m);
    float *x = make_x(n_rows, cols), *y = malloc(sizeof(float) * n_rows * rows);
    int8_t scratch[77];
    dsv4_w8a8_linear_ref(&q.m, x, n_rows, y, scratch);
    int ok = 1;
    for (int r = 0; r < n_rows; r++) {
        /* double precision, the definition written out again */
        double amax = 1e-4;
        for (int64_t i = 0; i < cols; i++) amax = fmax(amax, fabs(x[r * cols + i]));
        const float sx = (float)amax / 127.0f;
        for (int64_t o = 0; o < rows; o++) {
            const float *src = (const float *)t.w + o * cols;
            double wmax = 0;
            for (int64_t i = 0; i < cols; i++) wmax = fmax(wmax, fabs(src[i]));
            const float sw = wmax > 0 ? (float)wmax / 127.0f : 1.0f;
            double dot = 0;
            for (int64_t i = 0; i < cols; i++) {
                double qx = nearbyint((double)(x[r * cols + i] / sx));
                double qw = wmax > 0 ? nearbyint((double)(src[i] / sw)) : 0;
                dot += fmin(127, fmax(-127, qx)) * fmin(127, fmax(-127, qw));
            }
            const double want = (double)(sx * sw) * dot;
            ok &= fabs(y[r * rows + o] - want) <= 1e-6 * fabs(want) + 1e-30;
        }
    }
    CHECK_MSG(ok, "the oracle disagrees with the formula");
    /* without scratch: same bits */
    float *y2 = malloc(sizeof(float) * n_rows * rows);
    dsv4_w8a8_linear_ref(&q.m, x, n_rows, y2, NULL);
    CHECK(memcmp(y, y2, sizeof(float) * n_rows * rows) == 0);
    /* dsv4_linear_ref on an I8 matrix is the plain product with the dequantized weights
     * (q * s_w), the same sums as on an F32 copy of them: the INT8 activations are the
     * w8a8 numeric mode's, not the format's */
    float fscr[77], *deq = malloc(sizeof(float) * rows * cols);
    for (int64_t o = 0; o < rows; o++) dsv4_mat_row(&q.m, o, deq + o * cols);
    const dsv4_mat fm = {DSV4_WF_F32, rows, cols, deq, NULL, 0, 0};
    float *y3 = malloc(sizeof(float) * n_rows * rows);
    dsv4_linear_ref(&q.m, x, n_rows, y2, fscr);
    dsv4_linear_ref(&fm, x, n_rows, y3, fscr);
    CHECK(memcmp(y2, y3, sizeof(float) * n_rows * rows) == 0);
    CHECK(memcmp(y, y2, sizeof(float) * n_rows * rows) != 0); /* and it is not P2's */
    free(deq); free(y3);
    free(x); free(y); free(y2); free(q.storage); free_tmat(&t);
}

/* ---- the kernel against the oracle ------------------------------------------------------ */

static int same_bits(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) return 0;
    return 1;
}

static void check_kernel(const dsv4_mat *w, const float *x, int n_rows, const char *what) {
    const size_t ny = (size_t)n_rows * (size_t)w->rows;
    float *ref = malloc(sizeof(float) * ny), *y = malloc(sizeof(float) * ny);
    int8_t *scr = malloc((size_t)w->cols);
    dsv4_w8a8_linear_ref(w, x, n_rows, ref, scr);
    for (int c = 0; c < n_ctx; c++) {
        memset(y, 0xff, sizeof(float) * ny);
        dsv4_w8a8_linear(ctx[c], w, x, n_rows, y);
        CHECK_MSG(same_bits(y, ref, ny), "%s, %s: kernel differs from the oracle", what, ctx_name[c]);
        memset(y, 0xff, sizeof(float) * ny);
        dsv4_num_linear(dsv4_numerics_w8a8(), ctx[c], w, x, n_rows, y);
        CHECK_MSG(same_bits(y, ref, ny), "%s, %s: the w8a8 numeric mode differs from the oracle", what,
                  ctx_name[c]);
    }
    free(ref); free(y); free(scr);
}

static void test_kernel_shapes(void) {
    const dsv4_wfmt fmts[] = {DSV4_WF_F32, DSV4_WF_BF16, DSV4_WF_FP8, DSV4_WF_FP4};
    const int64_t rows_[] = {1, 7, 129}, cols_[] = {32, 100, 1056};
    const int nr_[] = {1, 3, 17};
    char what[128];
    for (int f = 0; f < 4; f++)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                if (fmts[f] == DSV4_WF_FP4 && cols_[b] % 32) continue;
                tmat t = make_src(fmts[f], rows_[a], cols_[b], rows_[a] > 1 ? rows_[a] / 2 : -1);
                qmat q = quantize(NULL, &t.m);
                for (int c = 0; c < 3; c++) {
                    float *x = make_x(nr_[c], cols_[b]);
                    snprintf(what, sizeof what, "%s [%lld, %lld] x %d rows", fmt_name(fmts[f]),
                             (long long)rows_[a], (long long)cols_[b], nr_[c]);
                    check_kernel(&q.m, x, nr_[c], what);
                    free(x);
                }
                free(q.storage);
                free_tmat(&t);
            }
    /* large enough to run threaded, more rows than one quantization pass (256) */
    tmat t = make_src(DSV4_WF_BF16, 301, 1000, 5);
    qmat q = quantize(NULL, &t.m);
    float *x = make_x(300, 1000);
    check_kernel(&q.m, x, 300, "bf16 [301, 1000] x 300 rows");
    /* a row alone equals the same row in the batch */
    float *y1 = malloc(sizeof(float) * 301), *yb = malloc(sizeof(float) * 301 * 300);
    dsv4_w8a8_linear(ctx[0], &q.m, x, 300, yb);
    dsv4_w8a8_linear(ctx[0], &q.m, x + 283 * 1000, 1, y1);
    CHECK(memcmp(y1, yb + 283 * 301, sizeof(float) * 301) == 0);
    /* non-finite activations: NaN in their row only */
    x[4 * 1000 + 17] = NAN;
    x[9 * 1000 + 999] = INFINITY;
    check_kernel(&q.m, x, 12, "bf16 with NaN/inf rows");
    dsv4_w8a8_linear(ctx[0], &q.m, x, 12, yb);
    int ok = 1;
    for (int r = 0; r < 12; r++)
        for (int o = 0; o < 301; o++) ok &= (r == 4 || r == 9) == (isnan(yb[r * 301 + o]) != 0);
    CHECK_MSG(ok, "NaN outputs outside the non-finite rows, or finite ones inside");
    free(y1); free(yb); free(x); free(q.storage); free_tmat(&t);
}

/* P2 is an approximation of the F32 product: rel-L2 of a random GEMM around 1e-2 / 2 */
static void test_vs_f32(void) {
    const int64_t rows = 256, cols = 1024;
    const int n_rows = 8;
    tmat t = make_src(DSV4_WF_BF16, rows, cols, -1);
    qmat q = quantize(NULL, &t.m);
    float *x = malloc(sizeof(float) * n_rows * cols);
    for (int64_t i = 0; i < n_rows * cols; i++) x[i] = urand();
    float *yq = malloc(sizeof(float) * n_rows * rows), *yf = malloc(sizeof(float) * n_rows * rows);
    float *scr = malloc(sizeof(float) * cols);
    dsv4_linear_ref(&t.m, x, n_rows, yf, scr);
    dsv4_w8a8_linear(ctx[0], &q.m, x, n_rows, yq);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n_rows * rows; i++) {
        num += ((double)yq[i] - yf[i]) * ((double)yq[i] - yf[i]);
        den += (double)yf[i] * yf[i];
    }
    const double rel = sqrt(num / den);
    printf("random bf16 [256, 1024] x uniform activations: P2 vs F32 rel-L2 %.3e\n", rel);
    CHECK(rel < 1e-2 && rel > 1e-4); /* uniform values: ~ 2 * (1/sqrt(12)) / 127 */
    free(x); free(yq); free(yf); free(scr); free(q.storage); free_tmat(&t);
}

/* ---- the int32 overflow check ----------------------------------------------------------- */

static void test_overflow_bound(void) {
    CHECK((int64_t)127 * 127 * DSV4_W8A8_MAX_COLS <= INT32_MAX);
    CHECK((int64_t)127 * 127 * (DSV4_W8A8_MAX_COLS + 1) > INT32_MAX);
    dsv4_err err = {0};
    CHECK(dsv4_w8a8_check_cols(DSV4_W8A8_MAX_COLS, "wq_b", &err) == DSV4_OK);
    CHECK(dsv4_w8a8_check_cols(DSV4_W8A8_MAX_COLS + 1, "wq_b", &err) == DSV4_ERR_UNSUPPORTED);
    CHECK_ERR(err, DSV4_ERR_UNSUPPORTED, "133145");
    CHECK_ERR(err, DSV4_ERR_UNSUPPORTED, "wq_b");
    /* quantizing refuses before reading anything */
    uint8_t dummy[64];
    dsv4_mat wide = {DSV4_WF_F32, 1, DSV4_W8A8_MAX_COLS + 1, dummy, NULL, 0, 0};
    dsv4_mat dst;
    err = (dsv4_err){0};
    CHECK(dsv4_w8a8_quantize_weights(NULL, &wide, dummy, &dst, &err) == DSV4_ERR_UNSUPPORTED);
    /* a sum at the bound, both signs: every kernel level equals the (int64) oracle */
    const int64_t n = DSV4_W8A8_MAX_COLS;
    int8_t *w = malloc((size_t)(2 * n));
    float s[2] = {1.0f, 1.0f}, *x = malloc(sizeof(float) * n), y[2], ref[2];
    for (int64_t i = 0; i < n; i++) { w[i] = 127; w[n + i] = -127; x[i] = 1.0f; }
    dsv4_mat m = {DSV4_WF_I8, 2, n, w, s, 1, 0};
    dsv4_w8a8_linear_ref(&m, x, 1, ref, NULL);
    CHECK(ref[0] == (1.0f / 127.0f) * (float)(int64_t)(16129 * n));
    CHECK(ref[1] == -ref[0]);
    for (int c = 0; c < n_ctx; c++) {
        dsv4_w8a8_linear(ctx[c], &m, x, 1, y);
        CHECK_MSG(y[0] == ref[0] && y[1] == ref[1], "%s: sum at the int32 bound: %g %g, want %g %g",
                  ctx_name[c], y[0], y[1], ref[0], ref[1]);
    }
    free(w); free(x);
}

int main(void) {
    dsv4_err err = {0};
    const int threads[3] = {1, 2, 3};
    for (int t = 0; t < 3; t++)
        for (int level = 1; level >= 0; level--) {
            if (level == 1 && dsv4_cpu_simd() < DSV4_SIMD_AVX2) continue;
            dsv4_kctx *k;
            if (dsv4_kctx_create(threads[t], 2048, &k, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            dsv4_kctx_set_simd(k, level ? DSV4_SIMD_AVX2 : DSV4_SIMD_SCALAR);
            static char names[6][32];
            snprintf(names[n_ctx], sizeof names[0], "%s, %d thread(s)", dsv4_simd_name(dsv4_kctx_simd(k)), threads[t]);
            ctx_name[n_ctx] = names[n_ctx];
            ctx[n_ctx++] = k;
        }
    printf("kernel levels tested: %s ... %s\n", ctx_name[0], ctx_name[n_ctx - 1]);
    test_quantize_row();
    test_quantize_weights(ctx[n_ctx - 1]);
    test_quantize_weights(ctx[0]);
    test_ref_formula();
    test_kernel_shapes();
    test_vs_f32();
    test_overflow_bound();
    for (int c = 0; c < n_ctx; c++) dsv4_kctx_free(ctx[c]);
    return test_report();
}
