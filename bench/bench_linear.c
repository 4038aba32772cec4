/* bench_linear.c — dsv4_linear throughput against this machine's own roofline.
 *
 *   bench_linear [--threads N] [--reps N] [--scalar] [--quick] [--decode] [--gemm] [--experts] [--rows N,..]
 *                [--hot] [--shape S] [--moe] [--fmt F] [--path P]
 *
 * Measured in the same run, one JSON line each, the probes being the library's
 * (kernels/probe.h, the same ones `dsv4 bench` uses):
 *   probe "stream": read-only streaming sum over 512 MB (all threads) -> GB/s roofline;
 *   probe "fma": 12 independent FMA chains per thread, in registers -> GFLOP/s peak;
 *   "gemv": n_rows = 1 (decode) and 2 (decode + MTP draft) per format on a matrix of
 *           >= 128 MB (4x the L3), GB/s of weight bytes (with scales) and the fraction of
 *           the stream roofline;
 *   "gemv_experts": 16 distinct FP4 2048x4096 matrices in turn (a decode step's routed
 *           experts: per-call overhead included), in the checkpoint's layout ("fp4") and the
 *           lanes layout ("fp4l", kernels/fp4_lanes.h: random codes either way);
 *   "gemm": 512 rows x 4096x4096 per format, GFLOP/s and the fraction of the FMA peak;
 *   "gemv_decode": the bench model's decode-step matrices (256 KB .. 16 MB: wq_a, wkv,
 *           wq_b, wo_b, the experts' w1/w3 and w2, router, head), each shape in FP8, FP4
 *           (both layouts: "fp4", "fp4l") and BF16, n_rows 1 and 2 (--rows: other counts, e.g. a batched decode step's;
 *           "gflops" for the compute side). Enough distinct copies of the matrix to fill 96 MB
 *           are called in turn, so every call streams its weights from DRAM (on the VMs
 *           measured here the L3 reported is larger, but reads from 96 MiB up already run
 *           at DRAM speed: BENCHMARKS.md, the probe's buffer-size sweep)
 *           like a decode step does; per-call pool overhead included. Besides the best
 *           sweep, the median of the single calls' times ("us_call_median"), the steadier
 *           figure on a busy machine. --decode runs only the probes and these cases,
 *           --gemm only the probes and the "gemm" cases. --hot: a sweep's 96 MB come
 *           from at most 1 MB of copies called in turn, so the weights are in the cores' L2
 *           ("cache":"hot"): the kernel's own speed, against which the DRAM figure shows
 *           what the memory side costs.
 *           --shape S: only the shapes whose name contains S. The Flash checkpoint's
 *           widths (flash.wq_a, flash.wkv, flash.w13, flash.w2, flash.wq_b, flash.wo_b)
 *           run only when S names them, e.g. --shape flash. --fmt F: only format F (fp8,
 *           fp4, fp4l, fp4b, bf16; with --moe: the routed experts' layout, fp4 by default). --path P: every call through path P (gemv, smallm, gemm;
 *           dsv4_kctx_set_lin_path; a path the level lacks for the case falls back as there).
 *   "experts" (--experts, only the probes and these): a prefill's routed experts, the FP4
 *           w13 (512x1024) and w2 (1024x512) shapes at each --rows count, through every
 *           path dsv4_linear has for it (auto, gemv, smallm, gemm; dsv4_kctx_set_lin_path):
 *           384 distinct matrices (~100 MB, streamed like a layer's experts) in jobs of 32
 *           (dsv4_linear_batch, as src/moe hands them over); GFLOP/s and the fraction of
 *           an FMA probe pass run right before each round.
 *   "moe" (--moe, only the probes and these): a decode step's expert phase for batch S
 *           (each --rows count), dsv4_moe_experts over random routings: GB/s of the
 *           distinct experts' bytes against a stream probe pass before each round.
 * Times are the best of --reps runs (default 5). GEMV rounds alternate with a stream pass,
 * so on a shared machine the ratio compares like with like: "of_stream" is best/best and
 * "of_stream_median" the median of the per-round ratios. --scalar adds the portable level. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "dsv4_internal.h"


static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng;
}

static void fill_bytes(void *p, size_t n) {
    uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = rnd();
        memcpy(b + i, &v, 8);
    }
    for (; i < n; i++) b[i] = (uint8_t)rnd();
}

static const char *fmt_name(dsv4_wfmt f) {
    static const char *names[] = {"none", "f32", "f16", "bf16", "fp8", "fp4", "i8", "fp4l", "fp4b"};
    return names[f];
}

/* --nan-scan: FP8 matrices without the loader's no-NaN flag (dsv4_mat.fp8_no_nan), so the
 * one-row bit decode scans its bytes for NaN codes as it did before session 48 */
static int nan_scan;

/* Random weights: valid values for every format (no NaN/inf codes), ue8m0 scales; FP8 with
 * the no-NaN flag the loader would find. */
static dsv4_mat make_mat(dsv4_wfmt f, int64_t rows, int64_t cols) {
    dsv4_mat m = {f, rows, cols, NULL, NULL, 0, 0};
    const int64_t n = rows * cols;
    size_t wbytes = 0, sbytes = 0;
    switch (f) {
    case DSV4_WF_F32: wbytes = (size_t)n * 4; break;
    case DSV4_WF_F16:
    case DSV4_WF_BF16: wbytes = (size_t)n * 2; break;
    case DSV4_WF_FP8: wbytes = (size_t)n; sbytes = (size_t)(((rows + 127) / 128) * ((cols + 127) / 128)); break;
    case DSV4_WF_FP4:
    case DSV4_WF_FP4L:
    case DSV4_WF_FP4B: wbytes = (size_t)n / 2; sbytes = (size_t)(rows * (cols / 32)); break; /* random codes: any layout */
    default: break;
    }
    void *w = aligned_alloc(64, (wbytes + 63) & ~(size_t)63);
    if (f == DSV4_WF_F32) {
        float *p = w;
        for (int64_t i = 0; i < n; i++) p[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 1e-3f;
    } else if (f == DSV4_WF_F16 || f == DSV4_WF_BF16) {
        uint16_t *p = w;
        for (int64_t i = 0; i < n; i++) p[i] = (uint16_t)((rnd() & 0x83ff) | (f == DSV4_WF_F16 ? 0x3800 : 0x3f00));
    } else {
        fill_bytes(w, wbytes);
        if (f == DSV4_WF_FP8) /* no NaN codes */
            for (size_t i = 0; i < wbytes; i++) if ((((uint8_t *)w)[i] & 0x7f) == 0x7f) ((uint8_t *)w)[i] = 0x7e;
    }
    if (sbytes) {
        uint8_t *s = malloc(sbytes);
        for (size_t i = 0; i < sbytes; i++) s[i] = (uint8_t)(118 + rnd() % 8);
        m.scale = s;
    }
    m.w = w;
    m.fp8_no_nan = f == DSV4_WF_FP8 && !nan_scan;
    return m;
}

static void free_mat(dsv4_mat *m) {
    free((void *)m->w);
    free((void *)m->scale);
}

/* ---- probes ------------------------------------------------------------------------------ */

/* Rounds of (probe pass, measured call) back to back: on a shared machine both see the same
 * conditions. Kept: the best call time, the best probe, and each round's ratio of the
 * call's rate (work / time, in G units) to its probe, whose median goes next to best/best. */
typedef struct {
    double best_t, best_probe, ratio[64];
    int n;
} rounds;

static rounds rounds_start(void) { return (rounds){.best_t = 1e9}; }

static void rounds_add(rounds *r, double dt, double probe, double work) {
    if (dt < r->best_t) r->best_t = dt;
    if (probe > r->best_probe) r->best_probe = probe;
    if (r->n < 64) r->ratio[r->n++] = (work / dt / 1e9) / probe;
}

static double rounds_median(rounds *r) {
    qsort(r->ratio, (size_t)r->n, sizeof(double), cmp_double);
    return r->n ? r->ratio[r->n / 2] : 0.0;
}

/* ---- decode-shaped GEMV ---------------------------------------------------------------- */

typedef struct {
    const char *name; /* the bench model's matrix (config flash_quarter: hidden 1024) */
    int64_t rows, cols;
} decode_shape;

static void bench_decode(dsv4_kctx *k, dsv4_probe *probe, int reps, int threads, const int *nrows, int n_nrows,
                         int hot, const char *only, const char *fmt_only, int path) {
    static const decode_shape shapes[] = {
        {"wq_a", 256, 1024},        /* q LoRA down */
        {"wkv|w13", 512, 1024},     /* kv projection; the experts' w1 / w3 */
        {"w2", 1024, 512},          /* the experts' w2 */
        {"wq_b", 8192, 256},        /* q LoRA up: many short rows */
        {"wo_b", 1024, 2048},       /* output LoRA up */
        {"router", 256, 1024},      /* the router (BF16 in the model) */
        {"head", 8192, 1024},       /* the LM head (BF16 in the model) */
        /* the Flash checkpoint's widths (hidden 4096, experts 2048, q / o LoRA 1024): run only
         * when --shape names them ("flash."), since kernels tuned on the bench model's
         * widths need not win at these */
        {"flash.wq_a", 1024, 4096}, /* q LoRA down */
        {"flash.wkv", 512, 4096},   /* kv projection */
        {"flash.w13", 2048, 4096},  /* the experts' w1 / w3 */
        {"flash.w2", 4096, 2048},   /* the experts' w2 */
        {"flash.wq_b", 32768, 1024},/* q LoRA up */
        {"flash.wo_b", 4096, 8192}, /* output LoRA up */
    };
    /* FP4 in every layout, one after the other (lanes: kernels/fp4_lanes.h; fp4b, the shuffle
     * layout: kernels/fp4_shuf.h) */
    const dsv4_wfmt fmts[5] = {DSV4_WF_FP8, DSV4_WF_FP4, DSV4_WF_FP4L, DSV4_WF_FP4B, DSV4_WF_BF16};
    /* a sweep reads 96 MB of weights; cold: that many distinct copies, past the usable L3,
     * so each call streams from DRAM; hot: copies of at most 1 MB in all, called in turn,
     * so each call finds its weights in the L2 of the cores */
    const int64_t sweep_bytes = (int64_t)96 << 20, hot_bytes = (int64_t)1 << 20;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const decode_shape *sh = &shapes[si];
        if (only && !strstr(sh->name, only)) continue;
        if (!strncmp(sh->name, "flash.", 6) && !(only && strstr(only, "flash."))) continue;
        for (int fi = 0; fi < 5; fi++) {
            const dsv4_wfmt f = fmts[fi];
            if (fmt_only && strcmp(fmt_name(f), fmt_only)) continue;
            dsv4_mat m0 = make_mat(f, sh->rows, sh->cols);
            const int64_t mb = dsv4_mat_bytes(&m0);
            int nc = (int)((sweep_bytes + mb - 1) / mb); /* calls a sweep */
            nc = nc < 4 ? 4 : nc;
            int nm = hot ? (int)(hot_bytes / mb) : nc; /* distinct copies */
            nm = nm < 1 ? 1 : nm > nc ? nc : nm;
            dsv4_mat *ms = malloc(sizeof(dsv4_mat) * (size_t)nm);
            ms[0] = m0;
            for (int i = 1; i < nm; i++) ms[i] = make_mat(f, sh->rows, sh->cols);
            int mx = 1;
            for (int q = 0; q < n_nrows; q++) mx = nrows[q] > mx ? nrows[q] : mx;
            float *x = malloc(sizeof(float) * (size_t)mx * (size_t)sh->cols);
            float *y = malloc(sizeof(float) * (size_t)mx * (size_t)sh->rows);
            for (int64_t i = 0; i < mx * sh->cols; i++) x[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 1e-3f;
            for (int q = 0; q < n_nrows; q++) {
                const int nx = nrows[q];
                const double bytes = (double)nc * (double)mb;
                rounds rd = rounds_start();
                int n_call = 0;
                dsv4_kctx_set_lin_path(k, (dsv4_lin_path)path); /* --path (AUTO unless given) */
                /* every call's own time too: its median shrugs off the preemptions of a
                 * shared machine that a whole sweep of calls rarely escapes */
                double *call_t = malloc(sizeof(double) * (size_t)nc * (size_t)reps);
                for (int r = 0; r < reps + 1; r++) {
                    const double sg = dsv4_probe_stream(probe);
                    const double t0 = now_s();
                    double tc = t0;
                    for (int i = 0; i < nc; i++) {
                        dsv4_linear(k, &ms[i % nm], x, nx, y);
                        const double t1 = now_s();
                        if (r > 0) call_t[n_call++] = t1 - tc;
                        tc = t1;
                    }
                    if (r > 0) rounds_add(&rd, tc - t0, sg, bytes); /* round 0: warm-up */
                }
                const double median = rounds_median(&rd), best_t = rd.best_t, sbw = rd.best_probe;
                dsv4_kctx_set_lin_path(k, DSV4_LIN_AUTO);
                qsort(call_t, (size_t)n_call, sizeof(double), cmp_double);
                const double med_call = call_t[n_call / 2];
                free(call_t);
                const double gbps = bytes / best_t / 1e9;
                printf("{\"bench\":\"gemv_decode\",\"cache\":\"%s\",\"shape\":\"%s\",\"fmt\":\"%s\",\"n_rows\":%d,\"rows\":%lld,"
                       "\"cols\":%lld,\"kb\":%lld,\"mats\":%d,\"calls\":%d,\"threads\":%d,\"us_per_call\":%.2f,\"gbps\":%.2f,"
                       "\"stream_gbps\":%.2f,\"of_stream\":%.3f,\"of_stream_median\":%.3f,\"us_call_median\":%.2f,"
                       "\"gbps_call_median\":%.2f,\"gflops\":%.2f}\n",
                       hot ? "hot" : "cold", sh->name, fmt_name(f), nx, (long long)sh->rows, (long long)sh->cols, (long long)(mb >> 10), nm,
                       nc, threads, best_t / nc * 1e6, gbps, sbw, gbps / sbw, median, med_call * 1e6,
                       (double)mb / med_call / 1e9, 2.0 * nx * sh->rows * sh->cols * nc / best_t / 1e9);
                fflush(stdout);
            }
            free(x);
            free(y);
            for (int i = 0; i < nm; i++) free_mat(&ms[i]);
            free(ms);
        }
    }
}

/* ---- a prefill's routed experts, per path ------------------------------------------------ */

static void bench_experts(dsv4_kctx *k, dsv4_probe *probe, int reps, int threads, const int *nrows, int n_nrows) {
    static const decode_shape shapes[] = {{"w13", 512, 1024}, {"w2", 1024, 512}};
    static const char *path_name[] = {"auto", "gemv", "smallm", "gemm"};
    enum { NM = 384, JOB = 32 };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const decode_shape *sh = &shapes[si];
        dsv4_mat *ms = malloc(sizeof(dsv4_mat) * NM);
        for (int i = 0; i < NM; i++) ms[i] = make_mat(DSV4_WF_FP4, sh->rows, sh->cols);
        int mx = 1;
        for (int q = 0; q < n_nrows; q++) mx = nrows[q] > mx ? nrows[q] : mx;
        float *x = malloc(sizeof(float) * (size_t)mx * (size_t)sh->cols); /* (mx, cols), shared by the ops */
        float *y = malloc(sizeof(float) * (size_t)JOB * (size_t)mx * (size_t)sh->rows); /* (JOB, mx, rows) */
        for (int64_t i = 0; i < mx * sh->cols; i++) x[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 1e-3f;
        for (int q = 0; q < n_nrows; q++) {
            const int nx = nrows[q];
            for (int path = DSV4_LIN_AUTO; path <= DSV4_LIN_GEMM; path++) {
                if (path == DSV4_LIN_GEMV && nx > LIN_GEMV_MAX_ROWS) continue;
                if (path == DSV4_LIN_SMALLM && nx > LIN_SMALLM_MAX_ROWS) continue;
                dsv4_kctx_set_lin_path(k, (dsv4_lin_path)path);
                const double flop = 2.0 * nx * sh->rows * sh->cols * NM;
                rounds rd = rounds_start();
                for (int r = 0; r < reps + 1; r++) {
                    const double pk = dsv4_probe_fma_pass(probe);
                    const double t0 = now_s();
                    for (int j0 = 0; j0 < NM; j0 += JOB) {
                        dsv4_lin_op ops[JOB];
                        for (int j = 0; j < JOB; j++)
                            ops[j] = (dsv4_lin_op){&ms[j0 + j], x, nx, y + (int64_t)j * nx * sh->rows};
                        dsv4_linear_batch(k, ops, JOB);
                    }
                    if (r > 0) rounds_add(&rd, now_s() - t0, pk, flop); /* round 0: warm-up */
                }
                const double median = rounds_median(&rd);
                printf("{\"bench\":\"experts\",\"shape\":\"%s\",\"fmt\":\"fp4\",\"n_rows\":%d,\"path\":\"%s\","
                       "\"rows\":%lld,\"cols\":%lld,\"mats\":%d,\"threads\":%d,\"us_per_mat\":%.2f,\"gflops\":%.1f,"
                       "\"fma_gflops\":%.1f,\"of_fma_peak\":%.3f,\"of_fma_peak_median\":%.3f}\n",
                       sh->name, nx, path_name[path], (long long)sh->rows, (long long)sh->cols, NM, threads,
                       rd.best_t / NM * 1e6, flop / rd.best_t / 1e9, rd.best_probe,
                       flop / rd.best_t / 1e9 / rd.best_probe, median);
                fflush(stdout);
            }
        }
        dsv4_kctx_set_lin_path(k, DSV4_LIN_AUTO);
        free(x);
        free(y);
        for (int i = 0; i < NM; i++) free_mat(&ms[i]);
        free(ms);
    }
}

/* ---- a decode step's expert phase (--moe) ---------------------------------------------------
 * dsv4_moe_experts as moe_pass calls it for S rows: each row picks K = 6 distinct experts of
 * E = 256 at random (uniform, as the bench model's router roughly does), rows grouped by
 * expert, the shared expert on all S rows last; the bench model's formats: routed experts
 * FP4 (w1/w3 512x1024, w2 1024x512, ue8m0 scales), the shared expert FP8 (128x128 blocks,
 * as the Flash checkpoint stores it). 4 layers of experts (~840 MB) called in turn, so
 * every call streams its experts from DRAM. Reports ms per call and the GB/s of the
 * distinct experts' bytes (the shared expert's included) against a stream probe pass
 * run before each round. */
static void bench_moe(dsv4_kctx *k, dsv4_probe *probe, int reps, int threads, const int *batches, int n_batches,
                      dsv4_wfmt routed) {
    enum { E = 256, K = 6, D = 1024, I = 512, LAYERS = 4, CALLS = 48 };
    dsv4_config cfg;
    dsv4_config_defaults(&cfg);
    cfg.hidden_size = D, cfg.moe_intermediate_size = I, cfg.swiglu_limit = 10.0;
    dsv4_mat(*w)[3] = malloc(sizeof(*w) * (size_t)(LAYERS * E + LAYERS)); /* routed, then shared per layer */
    for (int i = 0; i < LAYERS * (E + 1); i++) {
        const dsv4_wfmt f = i < LAYERS * E ? routed : DSV4_WF_FP8; /* routed (--fmt fp4l / fp4b: that layout), shared */
        w[i][0] = make_mat(f, I, D);
        w[i][1] = make_mat(f, I, D);
        w[i][2] = make_mat(f, D, I);
    }
    const int64_t ebytes = 3 * dsv4_mat_bytes(&w[0][0]); /* a routed expert */
    const int64_t sbytes = 3 * dsv4_mat_bytes(&w[LAYERS * E][0]); /* the shared expert */
    for (int bi = 0; bi < n_batches; bi++) {
        const int S = batches[bi], RK = S * K;
        float *x = malloc(sizeof(float) * (size_t)S * D), *xg = malloc(sizeof(float) * (size_t)RK * D);
        float *wg = malloc(sizeof(float) * (size_t)RK), *og = malloc(sizeof(float) * (size_t)(RK + S) * D);
        float *g = malloc(sizeof(float) * (size_t)(RK + S) * I), *u = malloc(sizeof(float) * (size_t)(RK + S) * I);
        for (int64_t i = 0; i < (int64_t)S * D; i++) x[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 1e-3f;
        for (int i = 0; i < RK; i++) wg[i] = 0.25f;
        /* CALLS routings drawn up front: the groups of call c, and its distinct experts */
        dsv4_moe_group *gr = malloc(sizeof(dsv4_moe_group) * (size_t)CALLS * (E + 1));
        int *ng = malloc(sizeof(int) * CALLS);
        double experts = 0;
        for (int c = 0; c < CALLS; c++) {
            const int layer = c % LAYERS;
            int cnt[E] = {0};
            for (int r = 0; r < S; r++)
                for (int kk = 0; kk < K; kk++) {
                    int e;
                    do e = (int)(rnd() % E); while (cnt[e] > 0 && cnt[e] >> 16 == r + 1); /* distinct in a row */
                    cnt[e] = ((r + 1) << 16) | ((cnt[e] & 0xFFFF) + 1);
                }
            int n = 0, p0 = 0;
            for (int e = 0; e < E; e++) {
                const int rows_e = cnt[e] & 0xFFFF;
                if (!rows_e) continue;
                dsv4_mat *m = w[layer * E + e];
                gr[c * (E + 1) + n++] = (dsv4_moe_group){&m[0], &m[1], &m[2], xg + (int64_t)p0 * D, wg + p0, rows_e,
                                                         og + (int64_t)p0 * D, g + (int64_t)p0 * I, u + (int64_t)p0 * I};
                p0 += rows_e;
            }
            experts += n;
            dsv4_mat *sh = w[LAYERS * E + layer];
            gr[c * (E + 1) + n++] = (dsv4_moe_group){&sh[0], &sh[1], &sh[2], x, NULL, S, og + (int64_t)RK * D,
                                                     g + (int64_t)RK * I, u + (int64_t)RK * I};
            ng[c] = n;
        }
        for (int64_t i = 0; i < (int64_t)RK * D; i++) xg[i] = x[i % ((int64_t)S * D)];
        experts /= CALLS;
        const double bytes = experts * (double)ebytes + (double)sbytes; /* per call */
        rounds rd = rounds_start();
        for (int r = 0; r < reps + 1; r++) {
            const double sg = dsv4_probe_stream(probe);
            const double t0 = now_s();
            for (int c = 0; c < CALLS; c++) dsv4_moe_experts(k, dsv4_numerics_exact(), &cfg, gr + c * (E + 1), ng[c]);
            if (r > 0) rounds_add(&rd, now_s() - t0, sg, bytes * CALLS); /* round 0: warm-up */
        }
        const double median = rounds_median(&rd);
        printf("{\"bench\":\"moe\",\"fmt\":\"%s\",\"batch\":%d,\"experts\":%.1f,\"threads\":%d,\"ms_per_call\":%.3f,"
               "\"mb_per_call\":%.1f,\"gbps\":%.2f,\"stream_gbps\":%.2f,\"of_stream\":%.3f,\"of_stream_median\":%.3f}\n",
               fmt_name(routed), S, experts, threads, rd.best_t / CALLS * 1e3, bytes / 1e6, bytes * CALLS / rd.best_t / 1e9, rd.best_probe,
               bytes * CALLS / rd.best_t / 1e9 / rd.best_probe, median);
        fflush(stdout);
        free(x), free(xg), free(wg), free(og), free(g), free(u), free(gr), free(ng);
    }
    for (int i = 0; i < LAYERS * (E + 1); i++)
        for (int j = 0; j < 3; j++) free_mat(&w[i][j]);
    free(w);
}

/* ---- main ---------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    int threads = 0, reps = 5, scalar = 0, quick = 0, decode_only = 0, gemm_only = 0, experts_only = 0, hot = 0;
    int moe_only = 0;
    const char *only = NULL; /* --shape */
    const char *fmt_only = NULL; /* --fmt: only this weight format in the decode shapes */
    int path = DSV4_LIN_AUTO;    /* --path: the decode shapes' dsv4_linear path (auto, gemv, smallm, gemm) */
    int nrows[16] = {1, 2}, n_nrows = 2; /* --rows: activation rows of the decode shapes */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scalar")) scalar = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--decode")) decode_only = 1;
        else if (!strcmp(argv[i], "--gemm")) gemm_only = 1;
        else if (!strcmp(argv[i], "--experts")) experts_only = 1;
        else if (!strcmp(argv[i], "--hot")) hot = 1;
        else if (!strcmp(argv[i], "--nan-scan")) nan_scan = 1;
        else if (!strcmp(argv[i], "--moe")) moe_only = 1;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--fmt") && i + 1 < argc) fmt_only = argv[++i];
        else if (!strcmp(argv[i], "--path") && i + 1 < argc) {
            const char *v = argv[++i];
            path = !strcmp(v, "gemv") ? DSV4_LIN_GEMV : !strcmp(v, "smallm") ? DSV4_LIN_SMALLM : !strcmp(v, "gemm") ? DSV4_LIN_GEMM : DSV4_LIN_AUTO;
        }
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) {
            n_nrows = 0;
            for (char *t = strtok(argv[++i], ","); t && n_nrows < 16; t = strtok(NULL, ",")) {
                const int v = atoi(t);
                if (v < 1 || v > 256) {
                    fprintf(stderr, "bench_linear: --rows takes row counts 1..256\n");
                    return 2;
                }
                nrows[n_nrows++] = v;
            }
            if (n_nrows == 0) return 2;
        } else {
            fprintf(stderr, "usage: bench_linear [--threads N] [--reps N] [--scalar] [--quick] [--decode] [--gemm] [--experts] [--moe] [--rows N,..] [--hot] [--nan-scan] [--shape S] [--fmt F] [--path P]\n");
            return 2;
        }
    }
    dsv4_kctx *k;
    dsv4_err err;
    if (dsv4_kctx_create(threads, 4096, &k, &err)) {
        fprintf(stderr, "bench_linear: %s\n", err.msg);
        return 1;
    }
    threads = dsv4_kctx_threads(k);
    const int best = dsv4_kctx_simd(k);
    /* the library's probes (kernels/probe.h), prepared once and run pass by pass between
     * the kernel runs below: a 512 MB stream (128 MB with --quick) and ~20 ms FMA passes */
    const size_t sbytes = quick ? (size_t)128 << 20 : (size_t)512 << 20;
    dsv4_probe *probe;
    if (dsv4_probe_create(k, sbytes, 0.02, &probe, &err)) {
        fprintf(stderr, "bench_linear: %s\n", err.msg);
        return 1;
    }
    double bw = 0, peak = 0;
    for (int r = 0; r < reps; r++) {
        const double g = dsv4_probe_stream(probe), f = dsv4_probe_fma_pass(probe);
        if (g > bw) bw = g;
        if (f > peak) peak = f;
    }
    printf("{\"bench\":\"probe_stream\",\"threads\":%d,\"bytes\":%zu,\"gbps\":%.2f}\n", threads, sbytes, bw);
    printf("{\"bench\":\"probe_fma\",\"threads\":%d,\"simd\":\"%s\",\"gflops\":%.1f}\n", threads,
           dsv4_simd_name(dsv4_probe_simd(probe)), peak);

    if (experts_only || moe_only) {
        if (experts_only) bench_experts(k, probe, reps, threads, nrows, n_nrows);
        if (moe_only)
            bench_moe(k, probe, reps, threads, nrows, n_nrows,
                      fmt_only && !strcmp(fmt_only, "fp4l")   ? DSV4_WF_FP4L
                      : fmt_only && !strcmp(fmt_only, "fp4b") ? DSV4_WF_FP4B
                                                              : DSV4_WF_FP4);
        dsv4_probe_free(probe);
        dsv4_kctx_free(k);
        return 0;
    }
    if (!gemm_only) bench_decode(k, probe, reps, threads, nrows, n_nrows, hot, only, fmt_only, path);
    if (decode_only) {
        dsv4_probe_free(probe);
        dsv4_kctx_free(k);
        return 0;
    }

    /* GEMV on matrices of >= 128 MB of weights */
    const dsv4_wfmt fmts[5] = {DSV4_WF_F32, DSV4_WF_F16, DSV4_WF_BF16, DSV4_WF_FP8, DSV4_WF_FP4};
    const int64_t gemv_shape[6][2] = {{0, 0}, {8192, 4096}, {8192, 8192}, {8192, 8192}, {16384, 8192}, {16384, 16384}};
    for (int level = best; level >= 0 && !gemm_only; level--) {
        if (level != best && !scalar) break;
        dsv4_kctx_set_simd(k, level);
        for (int fi = 0; fi < 5; fi++) {
            const dsv4_wfmt f = fmts[fi];
            int64_t rows = gemv_shape[f][0], cols = gemv_shape[f][1];
            if (quick) rows /= 2;
            dsv4_mat m = make_mat(f, rows, cols);
            /* n_rows 1 (decode) and 2 (decode with an MTP draft to verify) */
            float *x = malloc(sizeof(float) * 2 * cols), *y = malloc(sizeof(float) * 2 * rows);
            for (int64_t i = 0; i < 2 * cols; i++) x[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 1e-3f;
            for (int nx = 1; nx <= 2; nx++) {
                const int nr = level == DSV4_SIMD_SCALAR ? 2 : reps + 1;
                const double bytes = (double)dsv4_mat_bytes(&m);
                rounds rd = rounds_start();
                for (int r = 0; r < nr; r++) {
                    const double sg = dsv4_probe_stream(probe);
                    double t0 = now_s();
                    dsv4_linear(k, &m, x, nx, y);
                    if (r > 0) rounds_add(&rd, now_s() - t0, sg, bytes); /* round 0: warm-up */
                }
                const double median = rounds_median(&rd), best_t = rd.best_t, sbw = rd.best_probe;
                const double gbps = bytes / best_t / 1e9;
                printf("{\"bench\":\"gemv\",\"simd\":\"%s\",\"fmt\":\"%s\",\"n_rows\":%d,\"rows\":%lld,"
                       "\"cols\":%lld,\"threads\":%d,\"ms\":%.3f,\"gbps\":%.2f,\"gelem_s\":%.2f,"
                       "\"stream_gbps\":%.2f,\"of_stream\":%.3f,\"of_stream_median\":%.3f}\n",
                       dsv4_simd_name(level), fmt_name(f), nx, (long long)rows, (long long)cols, threads,
                       best_t * 1e3, gbps, (double)rows * cols / best_t / 1e9, sbw, gbps / sbw, median);
                fflush(stdout);
            }
            free(x);
            free(y);
            free_mat(&m);
        }
    }
    dsv4_kctx_set_simd(k, best);

    /* a decode step's routed experts: many mid-size FP4 matrices, each called once; both layouts */
    for (int lanes = 0; lanes < 3 && !gemm_only; lanes++) {
        enum { NE = 16 };
        const dsv4_wfmt ef = lanes == 2 ? DSV4_WF_FP4B : lanes ? DSV4_WF_FP4L : DSV4_WF_FP4;
        dsv4_mat e[NE];
        for (int i = 0; i < NE; i++) e[i] = make_mat(ef, 2048, 4096);
        float *x = malloc(sizeof(float) * 4096), *y = malloc(sizeof(float) * 2048);
        for (int i = 0; i < 4096; i++) x[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 1e-3f;
        const double bytes = (double)NE * dsv4_mat_bytes(&e[0]);
        rounds rd = rounds_start();
        for (int r = 0; r < reps + 1; r++) {
            const double sg = dsv4_probe_stream(probe);
            double t0 = now_s();
            for (int i = 0; i < NE; i++) dsv4_linear(k, &e[i], x, 1, y);
            if (r > 0) rounds_add(&rd, now_s() - t0, sg, bytes); /* round 0: warm-up */
        }
        const double median = rounds_median(&rd), best_t = rd.best_t, sbw = rd.best_probe;
        const double gbps = bytes / best_t / 1e9;
        printf("{\"bench\":\"gemv_experts\",\"simd\":\"%s\",\"fmt\":\"%s\",\"rows\":2048,\"cols\":4096,\"mats\":%d,"
               "\"threads\":%d,\"us_per_call\":%.1f,\"gbps\":%.2f,\"stream_gbps\":%.2f,\"of_stream\":%.3f,"
               "\"of_stream_median\":%.3f}\n",
               dsv4_simd_name(best), fmt_name(ef), NE, threads, best_t / NE * 1e6, gbps, sbw, gbps / sbw, median);
        for (int i = 0; i < NE; i++) free_mat(&e[i]);
        free(x);
        free(y);
    }

    /* GEMM: 512 rows (a prefill chunk) x 4096 x 4096 */
    {
        const int n_rows = quick ? 128 : 512;
        const int64_t rows = 4096, cols = 4096;
        float *x = malloc(sizeof(float) * n_rows * cols), *y = malloc(sizeof(float) * n_rows * rows);
        for (int64_t i = 0; i < n_rows * cols; i++) x[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 1e-3f;
        for (int level = best; level >= 0; level--) {
            if (level != best && !scalar) break;
            dsv4_kctx_set_simd(k, level);
            for (int fi = 0; fi < 5; fi++) {
                const dsv4_wfmt f = fmts[fi];
                dsv4_mat m = make_mat(f, rows, cols);
                const double flop = 2.0 * n_rows * rows * cols;
                rounds rd = rounds_start();
                const int nr = level == DSV4_SIMD_SCALAR ? 1 : (reps < 5 ? reps : 5);
                for (int r = 0; r < nr; r++) {
                    const double pg = dsv4_probe_fma_pass(probe);
                    double t0 = now_s();
                    dsv4_linear(k, &m, x, n_rows, y);
                    rounds_add(&rd, now_s() - t0, pg, flop);
                }
                const double median = rounds_median(&rd), best_t = rd.best_t, pk = rd.best_probe;
                const double gflops = flop / best_t / 1e9;
                printf("{\"bench\":\"gemm\",\"simd\":\"%s\",\"fmt\":\"%s\",\"n_rows\":%d,\"rows\":%lld,\"cols\":%lld,"
                       "\"threads\":%d,\"ms\":%.1f,\"gflops\":%.1f,\"fma_gflops\":%.1f,\"of_fma_peak\":%.3f,"
                       "\"of_fma_peak_median\":%.3f}\n",
                       dsv4_simd_name(level), fmt_name(f), n_rows, (long long)rows, (long long)cols, threads,
                       best_t * 1e3, gflops, pk, pk > 0 ? gflops / pk : 0.0, median);
                fflush(stdout);
                free_mat(&m);
            }
        }
        free(x);
        free(y);
    }
    dsv4_probe_free(probe);
    dsv4_kctx_free(k);
    return 0;
}
