/* bench_w8a8.c — the P2 W8A8 kernel (kernels/w8a8.h) against the machine's stream
 * roofline and against dsv4_linear on the same shapes in BF16 and FP8.
 *
 *   bench_w8a8 [--threads N] [--reps N] [--scalar] [--quick]
 *
 * One JSON line each:
 *   probe "stream": read bandwidth of this run (kernels/probe.h), the GEMV roofline;
 *   "gemv": n_rows = 1 (decode), INT8 [16384, 8192] (128 MiB, 4x the L3): GB/s of INT8
 *           weight bytes (scales included), GOP/s (2 per multiply-add), fraction of the
 *           stream roofline; the same shape in BF16 and FP8 through dsv4_linear, and the
 *           INT8 speed-up over each;
 *   "gemm": 512 activation rows x [4096, 4096]: INT8 GOP/s against BF16 / FP8 GFLOP/s;
 *   "quantize": building the INT8 copy of a BF16 [4096, 4096] matrix (engine start-up),
 *           GB/s of source bytes.
 *   "engine" (with --model DIR): dsv4_forward on that model, P0 (as stored) against P2
 *           (w8a8 = 1): start-up time (the INT8 copies), prefill tokens/s of --prefill N
 *           tokens (default 256) in one span, decode tokens/s of --decode M single-token
 *           steps (default 32) after it; best of --reps.
 * Times are the best of --reps rounds (default 5); within a round the INT8, BF16 and FP8
 * calls alternate, and the *_median speed-ups are medians of the per-round ratios, which
 * hold up better than best/best on a shared machine. --scalar adds the portable level.
 */
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

/* BF16 or FP8 (ue8m0 block scales) weights around +-1 */
static dsv4_mat make_src(dsv4_wfmt f, int64_t rows, int64_t cols) {
    dsv4_mat m = {f, rows, cols, NULL, NULL, 0, 0};
    const int64_t n = rows * cols;
    if (f == DSV4_WF_BF16) {
        uint16_t *p = aligned_alloc(64, (size_t)((2 * n + 63) & ~63));
        for (int64_t i = 0; i < n; i++) p[i] = (uint16_t)((rnd() & 0x807f) | 0x3f00);
        m.w = p;
    } else {
        uint8_t *p = aligned_alloc(64, (size_t)((n + 63) & ~63));
        for (int64_t i = 0; i < n; i++) {
            uint8_t b = (uint8_t)rnd();
            p[i] = (b & 0x7f) == 0x7f ? 0x7e : b;
        }
        const int64_t ns = ((rows + 127) / 128) * ((cols + 127) / 128);
        uint8_t *s = malloc((size_t)ns);
        for (int64_t i = 0; i < ns; i++) s[i] = (uint8_t)(120 + rnd() % 6);
        m.w = p;
        m.scale = s;
    }
    return m;
}

static void free_src(dsv4_mat *m) { free((void *)m->w); free((void *)m->scale); }

static void *quantize(dsv4_kctx *k, const dsv4_mat *src, dsv4_mat *dst, double *seconds) {
    void *st = aligned_alloc(64, (size_t)((dsv4_w8a8_storage_bytes(src->rows, src->cols) + 63) & ~63));
    dsv4_err err = {0};
    const double t0 = now_s();
    if (!st || dsv4_w8a8_quantize_weights(k, src, st, dst, &err)) {
        fprintf(stderr, "bench_w8a8: quantize: %s\n", err.msg);
        exit(1);
    }
    if (seconds) *seconds = now_s() - t0;
    return st;
}

/* ---- engine ---- */

typedef struct {
    double start_s, prefill_tps, decode_tps;
} engine_fig;

static int engine_run(const dsv4_model *m, int w8a8, int threads, int P, int M, int reps, engine_fig *f) {
    const dsv4_model_info info = dsv4_model_get_info(m);
    dsv4_err err = {0};
    dsv4_engine_opts eo = {0};
    eo.max_context = P + M + 8;
    eo.max_seqs = 1;
    eo.c_max = P;
    eo.threads = threads;
    eo.w8a8 = w8a8;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(P + M));
    for (int i = 0; i < P + M; i++) tok[i] = (int32_t)(rnd() % (uint64_t)info.vocab_size);
    float *hid = malloc(sizeof(float) * (size_t)info.hidden_size);
    dsv4_engine *e;
    double t0 = now_s();
    if (dsv4_engine_create(m, &eo, &e, &err)) { fprintf(stderr, "bench_w8a8: %s\n", err.msg); return -1; }
    f->start_s = now_s() - t0;
    f->prefill_tps = f->decode_tps = 0;
    for (int r = 0; r < reps; r++) {
        int seq;
        if (dsv4_seq_create(e, &seq, &err)) break;
        dsv4_span sp = {seq, 0, P, tok, 1, NULL, 0, NULL, 0};
        t0 = now_s();
        if (dsv4_forward(e, &sp, 1, hid, NULL, &err)) break;
        const double tp = now_s() - t0;
        t0 = now_s();
        for (int i = 0; i < M; i++) {
            dsv4_span d = {seq, P + i, 1, tok + P + i, 1, NULL, 0, NULL, 0};
            if (dsv4_forward(e, &d, 1, hid, NULL, &err)) break;
        }
        const double td = now_s() - t0;
        if (P / tp > f->prefill_tps) f->prefill_tps = P / tp;
        if (M / td > f->decode_tps) f->decode_tps = M / td;
        dsv4_seq_free(e, seq, &err);
    }
    if (err.code) fprintf(stderr, "bench_w8a8: %s\n", err.msg);
    dsv4_engine_free(e);
    free(tok);
    free(hid);
    return err.code ? -1 : 0;
}

/* Rounds of one call each of m[0] (INT8, at SIMD level i8_level), m[1] (BF16) and m[2]
 * (FP8, both at the best level), interleaved so the three see the same machine load:
 * best time of each, and the median over rounds of t_BF16 / t_INT8 and t_FP8 / t_INT8. */
static void time3(dsv4_kctx *k, const dsv4_mat *m[3], int i8_level, int best_level, const float *x,
                  int n_rows, float *y, int reps, double best[3], double med[2]) {
    double *ratio = malloc(sizeof(double) * 2 * (size_t)reps);
    best[0] = best[1] = best[2] = 1e30;
    for (int r = -1; r < reps; r++) { /* round -1 warms pages and the pool */
        double t[3];
        for (int i = 0; i < 3; i++) {
            dsv4_kctx_set_simd(k, i == 0 ? i8_level : best_level);
            const double t0 = now_s();
            dsv4_num_linear(i == 0 ? dsv4_numerics_w8a8() : dsv4_numerics_exact(), k, m[i], x, n_rows, y);
            t[i] = now_s() - t0;
            if (r >= 0 && t[i] < best[i]) best[i] = t[i];
        }
        if (r >= 0) {
            ratio[r] = t[1] / t[0];
            ratio[reps + r] = t[2] / t[0];
        }
    }
    dsv4_kctx_set_simd(k, best_level);
    qsort(ratio, (size_t)reps, sizeof(double), cmp_double);
    qsort(ratio + reps, (size_t)reps, sizeof(double), cmp_double);
    med[0] = ratio[reps / 2];
    med[1] = ratio[reps + reps / 2];
    free(ratio);
}

int main(int argc, char **argv) {
    int threads = 0, reps = 5, scalar = 0, quick = 0, prefill = 256, decode = 32;
    const char *model_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model_dir = argv[++i];
        else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) prefill = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--decode") && i + 1 < argc) decode = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scalar")) scalar = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else {
            fprintf(stderr, "usage: bench_w8a8 [--threads N] [--reps N] [--scalar] [--quick] [--model DIR "
                            "[--prefill N] [--decode M]]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (prefill < 1 || decode < 1) { fprintf(stderr, "bench_w8a8: --prefill and --decode must be >= 1\n"); return 2; }
    dsv4_err err = {0};
    dsv4_kctx *k;
    if (dsv4_kctx_create(threads, 16384, &k, &err)) { fprintf(stderr, "bench_w8a8: %s\n", err.msg); return 1; }
    const int nt = dsv4_kctx_threads(k), best_level = dsv4_kctx_simd(k);

    dsv4_probe_result bw;
    if (dsv4_probe_bandwidth(k, quick ? (64u << 20) : 0, 0, &bw, &err)) {
        fprintf(stderr, "bench_w8a8: %s\n", err.msg);
        return 1;
    }
    printf("{\"bench\":\"w8a8\",\"probe\":\"stream\",\"threads\":%d,\"gbps\":%.2f,\"gbps_median\":%.2f}\n",
           nt, bw.best, bw.median);

    /* ---- GEMV ---- */
    const int64_t vr = quick ? 4096 : 16384, vc = quick ? 4096 : 8192;
    float *x = malloc(sizeof(float) * 512 * 8192), *y = malloc(sizeof(float) * 512 * 16384);
    for (int64_t i = 0; i < 512 * 8192; i++) x[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 1e-3f;
    {
        dsv4_mat bf = make_src(DSV4_WF_BF16, vr, vc), f8 = make_src(DSV4_WF_FP8, vr, vc), q;
        void *st = quantize(k, &bf, &q, NULL);
        const dsv4_mat *m3[3] = {&q, &bf, &f8};
        for (int level = best_level; level >= 0; level--) {
            if (level < best_level && !scalar) break;
            double tb[3], med[2];
            time3(k, m3, level, best_level, x, 1, y, reps, tb, med);
            const double t = tb[0], t_bf = tb[1], t_f8 = tb[2];
            const double gb = (double)dsv4_mat_bytes(&q) / t * 1e-9;
            printf("{\"bench\":\"w8a8\",\"case\":\"gemv\",\"level\":\"%s\",\"threads\":%d,\"rows\":%lld,"
                   "\"cols\":%lld,\"ms\":%.3f,\"int8_gbps\":%.2f,\"gops\":%.2f,\"of_stream\":%.3f,"
                   "\"bf16_ms\":%.3f,\"bf16_gbps\":%.2f,\"fp8_ms\":%.3f,\"fp8_gbps\":%.2f,"
                   "\"speedup_vs_bf16\":%.2f,\"speedup_vs_fp8\":%.2f,\"speedup_vs_bf16_median\":%.2f,"
                   "\"speedup_vs_fp8_median\":%.2f}\n",
                   dsv4_simd_name(level), nt, (long long)vr, (long long)vc, t * 1e3, gb,
                   2.0 * (double)vr * (double)vc / t * 1e-9, gb / bw.best, t_bf * 1e3,
                   (double)dsv4_mat_bytes(&bf) / t_bf * 1e-9, t_f8 * 1e3,
                   (double)dsv4_mat_bytes(&f8) / t_f8 * 1e-9, t_bf / t, t_f8 / t, med[0], med[1]);
        }
        dsv4_kctx_set_simd(k, best_level);
        free(st);
        free_src(&bf);
        free_src(&f8);
    }

    /* ---- GEMM ---- */
    {
        const int M = quick ? 128 : 512;
        const int64_t n = 4096;
        dsv4_mat bf = make_src(DSV4_WF_BF16, n, n), f8 = make_src(DSV4_WF_FP8, n, n), q;
        double tq;
        void *st = quantize(k, &bf, &q, &tq);
        const int r = reps < 3 ? reps : 3;
        const double ops = 2.0 * M * (double)n * (double)n;
        const dsv4_mat *m3[3] = {&q, &bf, &f8};
        for (int level = best_level; level >= 0; level--) {
            if (level < best_level && !scalar) break;
            double tb[3], med[2];
            time3(k, m3, level, best_level, x, M, y, r, tb, med);
            const double t = tb[0], t_bf = tb[1], t_f8 = tb[2];
            printf("{\"bench\":\"w8a8\",\"case\":\"gemm\",\"level\":\"%s\",\"threads\":%d,\"m\":%d,\"n\":%lld,"
                   "\"k\":%lld,\"ms\":%.2f,\"gops\":%.2f,\"bf16_gflops\":%.2f,\"fp8_gflops\":%.2f,"
                   "\"speedup_vs_bf16\":%.2f,\"speedup_vs_fp8\":%.2f,\"speedup_vs_bf16_median\":%.2f,"
                   "\"speedup_vs_fp8_median\":%.2f}\n",
                   dsv4_simd_name(level), nt, M, (long long)n, (long long)n, t * 1e3, ops / t * 1e-9,
                   ops / t_bf * 1e-9, ops / t_f8 * 1e-9, t_bf / t, t_f8 / t, med[0], med[1]);
        }
        dsv4_kctx_set_simd(k, best_level);
        printf("{\"bench\":\"w8a8\",\"case\":\"quantize\",\"threads\":%d,\"src\":\"bf16\",\"rows\":%lld,"
               "\"cols\":%lld,\"ms\":%.2f,\"src_gbps\":%.2f}\n",
               nt, (long long)n, (long long)n, tq * 1e3, (double)dsv4_mat_bytes(&bf) / tq * 1e-9);
        free(st);
        free_src(&bf);
        free_src(&f8);
    }
    free(x);
    free(y);
    dsv4_kctx_free(k);

    if (model_dir) {
        dsv4_model *m;
        if (dsv4_model_open(model_dir, &m, &err)) { fprintf(stderr, "bench_w8a8: %s\n", err.msg); return 1; }
        engine_fig f0, f2;
        const int r = reps < 3 ? reps : 3;
        if (engine_run(m, 0, threads, prefill, decode, r, &f0) || engine_run(m, 1, threads, prefill, decode, r, &f2)) {
            dsv4_model_close(m);
            return 1;
        }
        printf("{\"bench\":\"w8a8\",\"case\":\"engine\",\"threads\":%d,\"prefill\":%d,\"decode\":%d,"
               "\"p0_start_s\":%.2f,\"p2_start_s\":%.2f,\"p0_prefill_tps\":%.1f,\"p2_prefill_tps\":%.1f,"
               "\"p0_decode_tps\":%.2f,\"p2_decode_tps\":%.2f,\"prefill_speedup\":%.2f,\"decode_speedup\":%.2f}\n",
               nt, prefill, decode, f0.start_s, f2.start_s, f0.prefill_tps, f2.prefill_tps, f0.decode_tps,
               f2.decode_tps, f2.prefill_tps / f0.prefill_tps, f2.decode_tps / f0.decode_tps);
        dsv4_model_close(m);
    }
    return 0;
}
