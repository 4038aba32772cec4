/* test_hc.c — hyper-connections (spec/model.md §5.3, §5.4, §5.13, pitfalls 1-4) against
 * double-precision loops written from the spec's formulas. Large eps variants make a
 * misplaced eps visible above FP32 noise. */
#include <stdint.h>

#include "hc/hc.h"
#include "kernels/cpu.h"
#include "test.h"

static uint64_t rng_state = 0x853c49e6748fea9bull;
static double urand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static double sigm(double z) { return 1.0 / (1.0 + exp(-z)); }

/* the exp in lanes (kernels/exp_f64.h) where it agrees with this libm, else NULL (libm's) */
static dsv4_exp_rows_fn lanes_exp(void) {
    static int agrees = -1;
    if (agrees < 0) agrees = dsv4_exp_x512_agrees();
    return agrees ? dsv4_exp_x512() : NULL;
}

/* Reference hc_pre: mixes, pre, post, Sinkhorn-normalised comb, collapsed x. */
static void ref_pre(int hc, int D, int iters, double eps, double hc_eps, const float *h,
                    const float *fn, const float *base, const float *scale, double *x,
                    double *post, double *C) {
    const int n = hc * D, mix = (2 + hc) * hc;
    double ms = 0;
    for (int i = 0; i < n; i++) ms += (double)h[i] * h[i];
    const double rs = sqrt(ms / n + eps);
    double mixes[(2 + 16) * 16], pre[16];
    for (int m = 0; m < mix; m++) {
        double acc = 0;
        for (int i = 0; i < n; i++) acc += (double)fn[m * n + i] * h[i];
        mixes[m] = acc / rs;
    }
    for (int j = 0; j < hc; j++) {
        pre[j] = sigm(mixes[j] * scale[0] + base[j]) + hc_eps;
        post[j] = 2 * sigm(mixes[hc + j] * scale[1] + base[hc + j]);
    }
    for (int j = 0; j < hc; j++) {
        double mx = -1e300, sum = 0;
        for (int k = 0; k < hc; k++) {
            C[j * hc + k] = mixes[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
            mx = fmax(mx, C[j * hc + k]);
        }
        for (int k = 0; k < hc; k++) sum += exp(C[j * hc + k] - mx);
        for (int k = 0; k < hc; k++) C[j * hc + k] = exp(C[j * hc + k] - mx) / sum + hc_eps;
    }
    for (int round = 0; round < iters; round++) {
        if (round > 0)
            for (int j = 0; j < hc; j++) {
                double s = 0;
                for (int k = 0; k < hc; k++) s += C[j * hc + k];
                for (int k = 0; k < hc; k++) C[j * hc + k] /= s + hc_eps;
            }
        for (int k = 0; k < hc; k++) {
            double s = 0;
            for (int j = 0; j < hc; j++) s += C[j * hc + k];
            for (int j = 0; j < hc; j++) C[j * hc + k] /= s + hc_eps;
        }
    }
    for (int d = 0; d < D; d++) {
        x[d] = 0;
        for (int j = 0; j < hc; j++) x[d] += pre[j] * h[j * D + d];
    }
}

typedef struct { int hc, D, iters; double eps, hc_eps; } hc_case;

static dsv4_config make_cfg(const hc_case *t) {
    dsv4_config c;
    memset(&c, 0, sizeof c);
    c.hc_mult = t->hc;
    c.hidden_size = t->D;
    c.hc_sinkhorn_iters = t->iters;
    c.rms_norm_eps = t->eps;
    c.hc_eps = t->hc_eps;
    return c;
}

static void run_case(const hc_case *t) {
    const int hc = t->hc, D = t->D, n = hc * D, mix = (2 + hc) * hc;
    dsv4_config c = make_cfg(t);
    float *h = malloc(sizeof(float) * n), *fn = malloc(sizeof(float) * mix * n);
    float *hfn = malloc(sizeof(float) * hc * n);
    float base[(2 + 16) * 16], scale[3], hbase[16], hscale[1];
    float x[512], post[16], comb[256], y[512], hout[4096];
    double rx[512], rpost[16], rC[256];
    for (int i = 0; i < n; i++) h[i] = (float)(2 * urand());
    for (int i = 0; i < mix * n; i++) fn[i] = (float)(urand() * 1.7 / sqrt(n));
    for (int i = 0; i < hc * n; i++) hfn[i] = (float)(urand() * 1.7 / sqrt(n));
    for (int i = 0; i < mix; i++) base[i] = (float)(urand() * (i >= 2 * hc ? 2.0 : 0.8));
    for (int i = 0; i < 3; i++) scale[i] = (float)(1.0 + 0.5 * urand());
    for (int i = 0; i < hc; i++) hbase[i] = (float)(0.8 * urand());
    hscale[0] = 1.3f;

    dsv4_hc_pre(&c, h, fn, base, scale, x, post, comb);
    ref_pre(hc, D, t->iters, t->eps, t->hc_eps, h, fn, base, scale, rx, rpost, rC);
    double ex = 0, mx = 0, ep = 0, ec = 0;
    for (int d = 0; d < D; d++) { ex = fmax(ex, fabs(x[d] - rx[d])); mx = fmax(mx, fabs(rx[d])); }
    for (int j = 0; j < hc; j++) ep = fmax(ep, fabs(post[j] - rpost[j]));
    for (int i = 0; i < hc * hc; i++) ec = fmax(ec, fabs(comb[i] - rC[i]));
    CHECK_MSG(ex <= 1e-6 * mx, "hc=%d D=%d iters=%d: x err %.3g of %.3g", hc, D, t->iters, ex, mx);
    CHECK_MSG(ep <= 1e-6, "hc=%d iters=%d: post err %.3g", hc, t->iters, ep);
    CHECK_MSG(ec <= 1e-6, "hc=%d iters=%d: comb err %.3g", hc, t->iters, ec);
    /* The final state is column-normalised: each column sums to S/(S+hc_eps). */
    for (int k = 0; k < hc; k++) {
        double s = 0;
        for (int j = 0; j < hc; j++) s += comb[j * hc + k];
        CHECK_MSG(fabs(s - 1) <= hc * t->hc_eps + 1e-6, "column %d sums to %.9g", k, s);
    }
    /* post in (0, 2), no eps. */
    for (int j = 0; j < hc; j++) CHECK(post[j] > 0 && post[j] < 2);

    /* hc_post: out[k] = post[k]·y + Σ_j C[j][k]·h[j] (first index of C). The comb is
     * perturbed to be clearly asymmetric so a transposed use would fail. */
    for (int d = 0; d < D; d++) y[d] = (float)urand();
    for (int i = 0; i < hc * hc; i++) comb[i] = (float)(0.5 + 0.3 * urand() + (i % hc > i / hc ? 0.4 : 0.0));
    double asym = 0;
    for (int j = 0; j < hc; j++)
        for (int k = 0; k < hc; k++) asym = fmax(asym, fabs(comb[j * hc + k] - comb[k * hc + j]));
    if (hc > 1) CHECK(asym > 0.05);
    dsv4_hc_post(&c, y, h, post, comb, hout);
    double eo = 0, mo = 0;
    for (int k = 0; k < hc; k++)
        for (int d = 0; d < D; d++) {
            double r = (double)post[k] * y[d];
            for (int j = 0; j < hc; j++) r += (double)comb[j * hc + k] * h[j * D + d];
            eo = fmax(eo, fabs(hout[k * D + d] - r));
            mo = fmax(mo, fabs(r));
        }
    CHECK_MSG(eo <= 1e-6 * mo, "hc_post err %.3g of %.3g", eo, mo);

    /* hc_head: sigmoid(mixes·scale[0] + base) + hc_eps, no Sinkhorn. */
    dsv4_hc_head(&c, h, hfn, hbase, hscale, y);
    double ms = 0;
    for (int i = 0; i < n; i++) ms += (double)h[i] * h[i];
    const double rs = sqrt(ms / n + t->eps);
    double pre[16];
    for (int j = 0; j < hc; j++) {
        double acc = 0;
        for (int i = 0; i < n; i++) acc += (double)hfn[j * n + i] * h[i];
        pre[j] = sigm(acc / rs * hscale[0] + hbase[j]) + t->hc_eps;
    }
    double eh = 0, mh = 0;
    for (int d = 0; d < D; d++) {
        double r = 0;
        for (int j = 0; j < hc; j++) r += pre[j] * h[j * D + d];
        eh = fmax(eh, fabs(y[d] - r));
        mh = fmax(mh, fabs(r));
    }
    CHECK_MSG(eh <= 1e-6 * mh, "hc_head err %.3g of %.3g", eh, mh);
    free(h); free(fn); free(hfn);
}

/* The _at entry points at every level the CPU runs, and hc_pre's dots split in every way,
 * against the plain (reference) functions: the same bits. h holds values whose sums
 * cancel to zero in some columns (the sign of a zero collapse) and one stream of huge
 * values (rounding in every add). */
static void run_levels(const hc_case *t) {
    const int hc = t->hc, D = t->D, n = hc * D, mix = (2 + hc) * hc;
    dsv4_config c = make_cfg(t);
    float *h = malloc(sizeof(float) * n), *fn = malloc(sizeof(float) * mix * n), *y = malloc(sizeof(float) * D);
    float *hr = malloc(sizeof(float) * n), *hl = malloc(sizeof(float) * n);
    float *x0 = malloc(sizeof(float) * D), *x1 = malloc(sizeof(float) * D);
    float base[(2 + 16) * 16], scale[3], post0[16], post1[16], comb0[256], comb1[256];
    double dots[(2 + 16) * 16 + 1];
    for (int i = 0; i < n; i++) h[i] = (float)(2 * urand());
    for (int d = 0; d < D; d += 5) /* stream 1 = -stream 0 in these columns */
        if (hc > 1) h[D + d] = -h[d];
    if (hc > 2)
        for (int d = 0; d < D; d++) h[2 * D + d] *= 3e7f;
    for (int i = 0; i < mix * n; i++) fn[i] = (float)(urand() * 1.7 / sqrt(n));
    for (int i = 0; i < mix; i++) base[i] = (float)(urand() * (i >= 2 * hc ? 2.0 : 0.8));
    for (int i = 0; i < 3; i++) scale[i] = (float)(1.0 + 0.5 * urand());
    for (int d = 0; d < D; d++) y[d] = (float)urand();
    const int cpu = dsv4_cpu_simd();
    dsv4_hc_pre(&c, h, fn, base, scale, x0, post0, comb0);
    dsv4_hc_post(&c, y, h, post0, comb0, hr);
    for (int level = 0; level <= cpu; level++) {
        dsv4_hc_pre_at(&c, level, h, fn, base, scale, x1, post1, comb1);
        CHECK_MSG(!memcmp(x0, x1, sizeof(float) * D) && !memcmp(post0, post1, sizeof(float) * hc) &&
                  !memcmp(comb0, comb1, sizeof(float) * hc * hc), "hc=%d D=%d level %d: hc_pre differs", hc, D, level);
        /* the dots in parts [p n / P, (p + 1) n / P), last part first */
        for (int parts = 1; parts <= mix + 1; parts += parts < 4 ? 1 : 7) {
            memset(dots, 0, sizeof dots);
            for (int p = parts - 1; p >= 0; p--)
                dsv4_hc_dots(&c, level, h, fn, mix, p * (mix + 1) / parts, (p + 1) * (mix + 1) / parts, dots);
            for (int e = 0; e < 2; e++) { /* libm's exp, then the lanes' (when it agrees with libm) */
                dsv4_hc_pre_finish(&c, level, h, dots, base, scale, x1, post1, comb1, e ? lanes_exp() : NULL);
                CHECK_MSG(!memcmp(x0, x1, sizeof(float) * D) && !memcmp(post0, post1, sizeof(float) * hc) &&
                              !memcmp(comb0, comb1, sizeof(float) * hc * hc),
                          "hc=%d D=%d level %d: hc_pre from %d parts differs%s", hc, D, level, parts,
                          e ? " (exp in lanes)" : "");
            }
        }
        /* the finish's two halves (one row split over threads), each from only the dots it
         * uses, the others zero: x from [0, hc) and the norm dot, post and comb from [hc, mix] */
        for (int e = 0; e < 2; e++) {
            double dx[(2 + 16) * 16 + 1] = {0}, dp[(2 + 16) * 16 + 1] = {0};
            memcpy(dx, dots, sizeof(double) * hc);
            dx[mix] = dots[mix];
            memcpy(dp + hc, dots + hc, sizeof(double) * (mix + 1 - hc));
            memset(x1, 0xff, sizeof(float) * D);
            memset(post1, 0xff, sizeof(float) * hc);
            memset(comb1, 0xff, sizeof(float) * hc * hc);
            dsv4_hc_pre_finish_x(&c, level, h, dx, base, scale, x1, e ? lanes_exp() : NULL);
            dsv4_hc_pre_finish_pc(&c, level, dp, base, scale, post1, comb1, e ? lanes_exp() : NULL);
            CHECK_MSG(!memcmp(x0, x1, sizeof(float) * D), "hc=%d D=%d level %d: hc_pre's x half differs%s", hc, D,
                      level, e ? " (exp in lanes)" : "");
            CHECK_MSG(!memcmp(post0, post1, sizeof(float) * hc) && !memcmp(comb0, comb1, sizeof(float) * hc * hc),
                      "hc=%d D=%d level %d: hc_pre's post/comb half differs%s", hc, D, level, e ? " (exp in lanes)" : "");
        }
        memcpy(hl, h, sizeof(float) * n);
        dsv4_hc_post_inplace(&c, level, y, hl, post0, comb0);
        CHECK_MSG(!memcmp(hr, hl, sizeof(float) * n), "hc=%d D=%d level %d: hc_post in place differs", hc, D, level);
        dsv4_hc_head(&c, h, fn, base, scale, x0);
        dsv4_hc_head_at(&c, level, h, fn, base, scale, x1);
        CHECK_MSG(!memcmp(x0, x1, sizeof(float) * D), "hc=%d D=%d level %d: hc_head differs", hc, D, level);
        dsv4_hc_pre(&c, h, fn, base, scale, x0, post0, comb0); /* x0 back to hc_pre's */
    }
    free(h); free(fn); free(y); free(hr); free(hl); free(x0); free(x1);
}

/* hc_pre's dots of 1..13 rows at once (dsv4_hc_dots_rows: blocks of 8, of 4 and the rest; fn
 * widened or as floats) at every level, against dsv4_hc_dots row by row at the portable
 * level: the same bits. Rows hold huge and cancelling values as in run_levels, and the
 * widths leave tails past the sixteens. */
static void run_rows(const hc_case *t) {
    const int hc = t->hc, D = t->D, n = hc * D, mix = (2 + hc) * hc, R = 13, nd = mix + 1;
    dsv4_config c = make_cfg(t);
    float *h = malloc(sizeof(float) * R * n), *fn = malloc(sizeof(float) * mix * n);
    double *fn_f64 = malloc(sizeof(double) * mix * n);
    double *want = malloc(sizeof(double) * R * nd), *got = malloc(sizeof(double) * R * nd);
    for (int i = 0; i < R * n; i++) h[i] = (float)(2 * urand());
    for (int i = 0; i < n; i += 3) h[n + i] = -h[i];             /* row 1 = -row 0 in places */
    for (int i = 0; i < n; i += 2) h[2 * n + i] *= 3e7f;         /* row 2: rounding in every add */
    for (int i = 0; i < mix * n; i++) fn[i] = (float)(urand() * 1.7 / sqrt(n));
    for (int i = 0; i < R; i++) dsv4_hc_dots(&c, DSV4_SIMD_SCALAR, h + (size_t)i * n, fn, mix, 0, nd, want + i * nd);
    /* widened in two uneven parts, the later first */
    dsv4_hc_widen(&c, fn, mix / 3, mix, fn_f64);
    dsv4_hc_widen(&c, fn, 0, mix / 3, fn_f64);
    int blocked = 0;
    for (int level = 0; level <= (int)dsv4_cpu_simd(); level++) {
        blocked |= dsv4_hc_rows_blocked(&c, level);
        for (int rows = 1; rows <= R; rows++)
            for (int w = 0; w < 2; w++) {
                memset(got, 0xff, sizeof(double) * R * nd);
                dsv4_hc_dots_rows(&c, level, h, rows, fn, w ? fn_f64 : NULL, mix, got);
                CHECK_MSG(!memcmp(want, got, sizeof(double) * rows * nd), "hc=%d D=%d level %d: dots of %d rows%s differ",
                          hc, D, level, rows, w ? " (fn widened)" : " (fn as floats)");
            }
    }
    /* the same dots by ranges (dsv4_hc_dots_rows_part: a batched decode step's few rows split
     * over threads by dot, block.c sub_in_few): the norm dot first, then the pre dots, then the
     * rest; two halves cut at an odd dot (the kernel pairs fn rows from the range's start); each
     * dot alone. Every cut gives each dot the bits of the whole, and writes nothing else. */
    const int odd = mix / 2 + 1;
    const int cuts[3][8] = {{mix, nd, 0, hc, hc, mix, -1}, {0, odd, odd, nd, -1}, {-1}};
    for (int level = 0; level <= (int)dsv4_cpu_simd(); level++)
        for (int rows = 1; rows <= R; rows++)
            for (int w = 0; w < 2; w++)
                for (int k = 0; k < 3; k++) {
                    memset(got, 0xff, sizeof(double) * R * nd);
                    if (k < 2)
                        for (int q = 0; cuts[k][q] >= 0; q += 2)
                            dsv4_hc_dots_rows_part(&c, level, h, rows, fn, w ? fn_f64 : NULL, mix, cuts[k][q],
                                                   cuts[k][q + 1], got);
                    else
                        for (int m = nd - 1; m >= 0; m--)
                            dsv4_hc_dots_rows_part(&c, level, h, rows, fn, w ? fn_f64 : NULL, mix, m, m + 1, got);
                    CHECK_MSG(!memcmp(want, got, sizeof(double) * rows * nd),
                              "hc=%d D=%d level %d: dots of %d rows in parts (cut %d)%s differ", hc, D, level, rows, k,
                              w ? " (fn widened)" : " (fn as floats)");
                    /* past the rows: untouched */
                    const unsigned char *tail = (const unsigned char *)(got + rows * nd);
                    int clean = 1;
                    for (size_t b = 0; b < sizeof(double) * (size_t)(R - rows) * nd; b++) clean &= tail[b] == 0xff;
                    CHECK_MSG(clean, "hc=%d D=%d level %d: dots of %d rows in parts wrote past the rows", hc, D, level,
                              rows);
                }
    /* hc <= 4 and an AVX2 CPU: a blocked kernel ran */
    if (hc <= 4 && dsv4_cpu_simd() >= DSV4_SIMD_AVX2) CHECK_MSG(blocked, "hc=%d: the blocked kernel never ran", hc);
    free(h); free(fn); free(fn_f64); free(want); free(got);
}

/* hc_pre's finish of 1..13 rows at once (dsv4_hc_pre_finish_rows: the Sinkhorns of up to 8
 * rows side by side, then the rest) at every level, against dsv4_hc_pre_finish row by row at
 * the portable level: the same bits of x, post and comb. The bases spread the logits so that
 * every row's matrix differs and the Sinkhorn moves it; row 2 holds huge values. */
static void run_finish_rows(const hc_case *t) {
    const int hc = t->hc, D = t->D, n = hc * D, mix = (2 + hc) * hc, R = 13, nd = mix + 1;
    dsv4_config c = make_cfg(t);
    float *h = malloc(sizeof(float) * R * n), *fn = malloc(sizeof(float) * mix * n);
    float *x0 = malloc(sizeof(float) * R * D), *x1 = malloc(sizeof(float) * R * D);
    float *post0 = malloc(sizeof(float) * R * hc), *post1 = malloc(sizeof(float) * R * hc);
    float *comb0 = malloc(sizeof(float) * R * hc * hc), *comb1 = malloc(sizeof(float) * R * hc * hc);
    double *dots = malloc(sizeof(double) * R * nd);
    float base[(2 + 16) * 16], scale[3];
    for (int i = 0; i < R * n; i++) h[i] = (float)(2 * urand());
    for (int i = 0; i < n; i += 2) h[2 * n + i] *= 3e7f;
    for (int i = 0; i < mix * n; i++) fn[i] = (float)(urand() * 3.0 / sqrt(n));
    for (int i = 0; i < mix; i++) base[i] = (float)(urand() * (i >= 2 * hc ? 3.0 : 0.8));
    for (int i = 0; i < 3; i++) scale[i] = (float)(1.0 + 0.5 * urand());
    for (int i = 0; i < R; i++) dsv4_hc_dots(&c, DSV4_SIMD_SCALAR, h + (size_t)i * n, fn, mix, 0, nd, dots + i * nd);
    for (int i = 0; i < R; i++)
        dsv4_hc_pre_finish(&c, DSV4_SIMD_SCALAR, h + (size_t)i * n, dots + i * nd, base, scale, x0 + (size_t)i * D,
                           post0 + i * hc, comb0 + i * hc * hc, NULL);
    /* the rows' combs differ (each lane must keep its own row) */
    if (hc > 1) CHECK_MSG(memcmp(comb0, comb0 + hc * hc, sizeof(float) * hc * hc), "hc=%d: rows 0 and 1 alike", hc);
    for (int level = 0; level <= (int)dsv4_cpu_simd(); level++)
        for (int rows = 1; rows <= R; rows++)
            for (int e = 0; e < 2; e++) { /* libm's exp, then the lanes' */
                memset(x1, 0xff, sizeof(float) * R * D);
                memset(post1, 0xff, sizeof(float) * R * hc);
                memset(comb1, 0xff, sizeof(float) * R * hc * hc);
                dsv4_hc_pre_finish_rows(&c, level, h, rows, dots, base, scale, x1, post1, comb1, e ? lanes_exp() : NULL);
                CHECK_MSG(!memcmp(x0, x1, sizeof(float) * rows * D) && !memcmp(post0, post1, sizeof(float) * rows * hc) &&
                              !memcmp(comb0, comb1, sizeof(float) * rows * hc * hc),
                          "hc=%d D=%d iters=%d level %d: finish of %d rows differs%s", hc, D, t->iters, level, rows,
                          e ? " (exp in lanes)" : "");
            }
    free(h); free(fn); free(x0); free(x1); free(post0); free(post1); free(comb0); free(comb1); free(dots);
}

/* The collapse rounds each product pre[j] * h[j] to double before adding it; a fused
 * multiply-add would not, and with random data the difference almost never survives the
 * final rounding to float. Here it does: with h = (1, 1 - 2^-24) and pre = (1, p), p a
 * double near 2^-24 (1 + 2^-29) / (1 - 2^-24) whose exact product is 2^-24 + 2^-53 + d,
 * 0 < d < 2^-77: rounded, 1 + product is a double tie that goes to 1 + 2^-24 and then a
 * float tie that goes to 1; fused, it rounds up twice, to 1 + 2^-23. The test first finds
 * p with fma() (so the case proves its own power), then asks every level for the rounded
 * answer, in the SIMD chunks and the scalar tail, beside extra streams of zeros. */
static void test_collapse_rounding(void) {
    const float h1 = 1.0f - 0x1p-24f;
    const double p = 0x1p-24 * (1.0 + 0x1p-29) / (1.0 - 0x1p-24);
    double pick = 0.0;
    for (int s = -4; s <= 4 && pick == 0.0; s++) { /* p and its neighbours, s steps away */
        double q = p;
        for (int i = 0; i < (s < 0 ? -s : s); i++) q = nextafter(q, s < 0 ? 0.0 : 1.0);
        const float plain = (float)(1.0 + q * (double)h1), fused = (float)fma(q, (double)h1, 1.0);
        if (plain == 1.0f && fused == 1.0f + 0x1p-23f) pick = q;
    }
    CHECK_MSG(pick != 0.0, "no pre[1] separates rounded from fused products");
    enum { D = 21, HC = 4 };
    float h[HC * D] = {0}, x[D];
    const double pre[HC] = {1.0, pick, 0.75, -2.0};
    for (int d = 0; d < D; d++) {
        h[d] = 1.0f;
        h[D + d] = h1;
    }
    for (int level = 0; level <= (int)dsv4_cpu_simd(); level++) {
        for (int hc = 2; hc <= HC; hc++) {
            memset(x, 0xff, sizeof x);
            dsv4_hc_collapse_at(level, hc, D, h, pre, x);
            for (int d = 0; d < D; d++)
                CHECK_MSG(x[d] == 1.0f, "level %d hc=%d column %d: collapse %.9g, want 1 (a fused product?)", level,
                          hc, d, x[d]);
        }
    }
}

/* Hand example, hc = 2, D = 1: fn = 0 makes every mix 0, so the logits are the bases.
 * pre = σ(base) + eps; post = 2σ(base); comb from the Sinkhorn of softmax(base rows). */
static void test_hand(void) {
    hc_case t = {2, 1, 1, 1e-6, 0.0};
    dsv4_config c = make_cfg(&t);
    float h[2] = {3.0f, -1.0f}, fn[8 * 2] = {0}, base[8] = {0, 1, 0.5f, -0.5f, 0, 0, 0, 0};
    float scale[3] = {1, 1, 1}, x[1], post[2], comb[4];
    base[4] = (float)log(3.0); /* row 0 logits (log 3, 0): softmax (3/4, 1/4) */
    base[5] = 0;
    base[6] = 0;               /* row 1 logits (0, log 3): softmax (1/4, 3/4) */
    base[7] = (float)log(3.0);
    dsv4_hc_pre(&c, h, fn, base, scale, x, post, comb);
    CHECK_NEAR(x[0], 3 * sigm(0) - 1 * sigm(1), 1e-6);
    CHECK_NEAR(post[0], 2 * sigm(0.5), 1e-6);
    CHECK_NEAR(post[1], 2 * sigm(-0.5), 1e-6);
    /* columns already sum to 1: comb stays the softmax */
    CHECK_NEAR(comb[0], 0.75, 1e-6);
    CHECK_NEAR(comb[1], 0.25, 1e-6);
    CHECK_NEAR(comb[2], 0.25, 1e-6);
    CHECK_NEAR(comb[3], 0.75, 1e-6);
}

int main(void) {
    const hc_case cases[] = {
        {4, 48, 20, 1e-6, 1e-6},
        {4, 48, 20, 1e-3, 1e-2},  /* eps large enough to see where it goes */
        {4, 37, 1, 1e-6, 1e-2},
        {4, 64, 3, 1e-2, 1e-2},
        {2, 33, 20, 1e-6, 1e-6},
        {2, 16, 2, 1e-3, 5e-2},
        {1, 8, 5, 1e-6, 1e-3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    const hc_case levels[] = {
        {4, 1024, 20, 1e-6, 1e-6}, {4, 37, 20, 1e-6, 1e-6}, {3, 71, 5, 1e-6, 1e-3},
        {16, 24, 3, 1e-6, 1e-6}, {2, 7, 20, 1e-6, 1e-6}, {1, 17, 1, 1e-6, 1e-6},
    };
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) run_levels(&levels[i]);
    const hc_case rows[] = {{4, 1024, 20, 1e-6, 1e-6}, {4, 37, 20, 1e-6, 1e-6}, {3, 71, 5, 1e-6, 1e-3},
                            {4, 100, 1, 1e-6, 1e-6}, {2, 7, 20, 1e-6, 1e-6}, {16, 24, 3, 1e-6, 1e-6}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) run_rows(&rows[i]);
    const hc_case fin[] = {{4, 64, 20, 1e-6, 1e-6}, {4, 37, 3, 1e-6, 1e-2}, {3, 40, 20, 1e-6, 1e-3},
                           {2, 24, 20, 1e-6, 1e-6}, {1, 17, 5, 1e-6, 1e-6}, {16, 24, 3, 1e-6, 1e-6},
                           {4, 16, 0, 1e-6, 1e-6}};
    for (size_t i = 0; i < sizeof fin / sizeof fin[0]; i++) run_finish_rows(&fin[i]);
    printf("hc levels checked: portable .. %d (this CPU); exp in lanes %s\n", (int)dsv4_cpu_simd(),
           lanes_exp() ? "checked" : "not available (libm only)");
    test_hand();
    test_collapse_rounding();
    return test_report();
}
