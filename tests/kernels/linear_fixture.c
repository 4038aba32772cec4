/* linear_fixture.c — the dsv4_linear tests' shared fixture (linear_fixture.h). */
#include "linear_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/codec.h"
#include "kernels/cpu.h"

dsv4_kctx *kc[4];

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

int fixture_open(void) {
    dsv4_err err;
    for (int th = 1; th <= 3; th++)
        if (dsv4_kctx_create(th, 64, &kc[th], &err) != DSV4_OK) {
            fprintf(stderr, "kernel context on %d threads: %s\n", th, err.msg);
            return -1;
        }
    if (dsv4_kctx_threads(kc[3]) != 3) return -1;
    const int best = dsv4_kctx_set_simd(kc[1], 99);
    printf("kernel level: %s (cpu %s, build %s)\n", dsv4_simd_name(best), dsv4_simd_name(dsv4_cpu_simd()),
           dsv4_simd_name(dsv4_build_simd()));
    for (int level = best + 1; level <= DSV4_SIMD_MAX; level++)
        printf("SKIPPED: level %s (this %s lacks it)\n", dsv4_simd_name(level),
               (int)dsv4_cpu_simd() < level ? "CPU" : "build");
    if (dsv4_kctx_set_simd(kc[1], DSV4_SIMD_SCALAR) != DSV4_SIMD_SCALAR) return -1;
    return best;
}

void fixture_close(void) {
    for (int th = 1; th <= 3; th++) dsv4_kctx_free(kc[th]);
}

uint64_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}
float urand(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }


const char *fmt_name(dsv4_wfmt f, int sc) {
    switch (f) {
    case DSV4_WF_F32: return "f32";
    case DSV4_WF_F16: return "f16";
    case DSV4_WF_BF16: return "bf16";
    case DSV4_WF_FP8: return sc == SC_F32 ? "fp8/f32-scale" : "fp8";
    case DSV4_WF_FP4: return sc == SC_F32 ? "fp4/f32-scale" : "fp4";
    default: return "?";
    }
}

tmat make_mat(dsv4_wfmt f, int sc, int64_t rows, int64_t cols) {
    tmat t = {0};
    t.m.fmt = f;
    t.m.rows = rows;
    t.m.cols = cols;
    t.m.scale_is_f32 = sc == SC_F32;
    const int64_t n = rows * cols;
    int64_t ns = 0;
    switch (f) {
    case DSV4_WF_F32: {
        float *p = malloc(sizeof(float) * n);
        for (int64_t i = 0; i < n; i++) p[i] = urand();
        t.w = p;
        break;
    }
    case DSV4_WF_F16:
    case DSV4_WF_BF16: {
        uint16_t *p = malloc(2 * n);
        for (int64_t i = 0; i < n; i++) {
            float v = 2.0f * urand();
            p[i] = f == DSV4_WF_F16 ? dsv4_f32_to_f16(v) : dsv4_f32_to_bf16(v);
        }
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
        t.w = p;
        ns = ((rows + 127) / 128) * ((cols + 127) / 128);
        break;
    }
    case DSV4_WF_FP4: {
        uint8_t *p = malloc(n / 2);
        for (int64_t i = 0; i < n / 2; i++) p[i] = (uint8_t)rnd();
        t.w = p;
        ns = rows * (cols / 32);
        break;
    }
    default: break;
    }
    if (ns) {
        if (sc == SC_F32) {
            float *s = malloc(sizeof(float) * ns);
            for (int64_t i = 0; i < ns; i++) s[i] = (0.6f + 0.5f * urand()) * 0.01f; /* not powers of 2 */
            t.scale = s;
        } else {
            uint8_t *s = malloc(ns);
            for (int64_t i = 0; i < ns; i++) s[i] = (uint8_t)(118 + rnd() % 8);
            t.scale = s;
        }
    }
    t.m.w = t.w;
    t.m.scale = t.scale;
    return t;
}

void free_mat(tmat *t) { free(t->w); free(t->scale); }

float *rand_vec(int64_t n) {
    float *v = malloc(sizeof(float) * (n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = urand();
    return v;
}

int same_bits(const float *a, const float *b, int64_t n) { return memcmp(a, b, sizeof(float) * n) == 0; }

int64_t bits_differ(const float *y, const float *y2, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += memcmp(&y[i], &y2[i], sizeof(float)) != 0;
    return d;
}

void linear_forced(dsv4_kctx *k, dsv4_lin_path path, const dsv4_mat *m, const float *x, int nr, float *y) {
    dsv4_kctx_set_lin_path(k, path);
    dsv4_linear(k, m, x, nr, y);
    dsv4_kctx_set_lin_path(k, DSV4_LIN_AUTO);
}

dsv4_lin_path forced_path_of(dsv4_kctx *k, dsv4_lin_path path, const dsv4_mat *m, int nr) {
    dsv4_kctx_set_lin_path(k, path);
    const dsv4_lin_path taken = (dsv4_lin_path)dsv4_linear_path_of(k, m, nr);
    dsv4_kctx_set_lin_path(k, DSV4_LIN_AUTO);
    return taken;
}

int64_t forced_differs(dsv4_kctx *k, dsv4_lin_path path, const dsv4_mat *m, const float *x, int nr,
                              const float *yref, float *y) {
    linear_forced(k, path, m, x, nr, y);
    return bits_differ(yref, y, (int64_t)nr * m->rows);
}

