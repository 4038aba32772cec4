/* generate.c — seeded random checkpoints (see generate.h).
 *
 * Random numbers: xoshiro256** seeded through splitmix64 from (seed, FNV-1a of the tensor
 * name). A "normal" draw is the Irwin-Hall sum of the four 16-bit quarters of one 64-bit
 * output, rescaled to unit variance: cheap (one generator step per weight, so a 1 GB
 * checkpoint takes seconds), symmetric, bounded by 3.46 sigma, and close enough to a
 * Gaussian for test weights.
 *
 * Quantization computes each code and its value together with plain arithmetic (rounding
 * on the float's bit pattern, a threshold ladder for FP4) rather than through the codec
 * tables, so the round trip test compares two independent derivations of the same number.
 */
#include "model/generate.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h> /* unlink */

#include "kernels/codec.h"
#include "model/inventory.h"
#include "model/safetensors.h"
#include "model/st_write.h"
#include "util/err.h"
#include "util/file_write.h"
#include "util/rng.h"

/* ---- random numbers ---------------------------------------------------------------- */

typedef dsv4_rng rng;

static void rng_seed(rng *r, uint64_t seed, const char *name, uint64_t stream) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    uint64_t x = seed ^ h ^ (stream * 0xd1b54a32d192ed03ull);
    dsv4_rng_seed(r, x);
}

static inline uint64_t rng_next(rng *r) { return dsv4_rng_next(r); }

/* Zero mean, unit variance, |x| <= 3.47 (sum of four uniform 16-bit quarters). */
static inline float rng_normal(rng *r) {
    const uint64_t u = rng_next(r);
    const int64_t s = (int64_t)(u & 0xffff) + (int64_t)((u >> 16) & 0xffff) +
                      (int64_t)((u >> 32) & 0xffff) + (int64_t)(u >> 48);
    /* mean 4 * 65535/2; variance 4 * (65536^2 - 1)/12 */
    return (float)((double)(s - 131070) * (1.0 / 37837.2266));
}

static inline double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53; }

static inline uint64_t rng_below(rng *r, uint64_t n) {
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

/* ---- quantizers ---------------------------------------------------------------------- */

/* Smallest k with 2^k >= v (v > 0). */
static int ceil_log2(float v) {
    int e;
    float m = frexpf(v, &e); /* v = m * 2^e, m in [0.5, 1) */
    return m == 0.5f ? e - 1 : e;
}

/* 2^e as a float, for normal exponents (-126 <= e <= 127): exact scaling by multiplication. */
static inline float pow2f(int e) { return dsv4_bits_to_f32((uint32_t)(e + 127) << 23); }

/* e4m3fn code and value of the rounding (to nearest even) of y, |y| <= 448. Normal range:
 * round the float's mantissa to 3 bits on its bit pattern (a carry moves into the exponent
 * by itself); below 2^-6 the quantum is fixed at 2^-9. */
static inline uint8_t quant_e4m3(float y, float *val) {
    const uint32_t sign = dsv4_f32_to_bits(y) & 0x80000000u;
    const float a = fabsf(y);
    uint8_t code;
    float v;
    if (a < 0.015625f) { /* subnormal e4m3: n * 2^-9, n = 0..8 (8 is the smallest normal) */
        const float n = rintf(a * 512.0f);
        v = n * 0.001953125f;
        code = (uint8_t)n;
    } else {
        uint32_t u = dsv4_f32_to_bits(a);
        u = (u + 0x7ffffu + ((u >> 20) & 1u)) & ~0xfffffu;
        if (u > 0x43e00000u) u = 0x43e00000u; /* saturate at 448 */
        v = dsv4_bits_to_f32(u);
        code = (uint8_t)((((u >> 23) - 120u) << 3) | ((u >> 20) & 7u)); /* E + 7 = exp - 120 */
    }
    const uint32_t neg = code ? sign : 0u; /* no -0 */
    *val = dsv4_bits_to_f32(dsv4_f32_to_bits(v) | neg);
    return (uint8_t)(code | (neg >> 24));
}

/* BF16 bits of x, rounded to nearest even (finite inputs only). */
static inline uint16_t to_bf16(float x) {
    const uint32_t u = dsv4_f32_to_bits(x);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* e2m1 code of the nearest grid value to y, |y| <= 6 (ties to the smaller magnitude).
 * Branch-free: the signs of random weights are unpredictable. */
static const float fp4_grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
static inline uint8_t quant_e2m1(float y, float *val) {
    const float a = fabsf(y);
    const int idx = (a > 0.25f) + (a > 0.75f) + (a > 1.25f) + (a > 1.75f) + (a > 2.5f) +
                    (a > 3.5f) + (a > 5.0f);
    const uint32_t neg = (dsv4_f32_to_bits(y) >> 31) & (uint32_t)(idx != 0); /* no -0 */
    *val = dsv4_bits_to_f32(dsv4_f32_to_bits(fp4_grid[idx]) | (neg << 31));
    return (uint8_t)(idx | (int)(neg << 3));
}

static inline float maxf(float a, float b) { return a > b ? a : b; }

/* ---- formats ------------------------------------------------------------------------- */

/* Stored dtype of an inventory entry under a generator format. */
static dsv4_st_dtype stored_dtype(const dsv4_tensor_spec *s, dsv4_gen_dtype g) {
    if (s->kind == DSV4_TK_TID2EID) return DSV4_ST_I64;
    if (s->kind == DSV4_TK_VEC) return dsv4_init_is_f32(s->init) ? DSV4_ST_F32 : DSV4_ST_BF16;
    if (g == DSV4_GEN_FP8 && s->rel == DSV4_REL_FP8) return DSV4_ST_F8_E4M3;
    if (g == DSV4_GEN_FP8 && s->rel == DSV4_REL_FP4) return DSV4_ST_I8;
    return DSV4_ST_BF16;
}

/* Standard deviation of a normally initialized entry; 0 for the others. */
static float init_sigma(const dsv4_tensor_spec *s) {
    switch (s->init) {
    case DSV4_INIT_EMBED:
    case DSV4_INIT_SINK: return 1.0f;
    case DSV4_INIT_LINEAR:
    case DSV4_INIT_HC_FN: return (float)(1.0 / sqrt((double)s->shape[1]));
    case DSV4_INIT_NORM:
    case DSV4_INIT_GATE_BIAS: return 0.1f;
    case DSV4_INIT_APE:
    case DSV4_INIT_HC_BASE: return 0.5f;
    default: return 0.0f;
    }
}

/* Where generated data goes: the file (bytes) and/or the intended values. */
typedef struct sink {
    dsv4_stw *w;
    float *vals;     /* (numel) intended values, or NULL */
    int32_t *ids;    /* (V, K) tid2eid, or NULL */
    dsv4_err *err;
} sink;

static int put(sink *k, const void *p, uint64_t n) {
    return k->w ? dsv4_stw_write(k->w, p, n, k->err) : DSV4_OK;
}

#define STRIP_BYTES (4u << 20) /* dense rows generated per write */

static int gen_dense(const dsv4_tensor_spec *s, dsv4_st_dtype dt, rng *r, sink *k) {
    const int64_t n = dsv4_spec_numel(s);
    const float sig = init_sigma(s);
    const int isz = dt == DSV4_ST_F32 ? 4 : 2;
    const int64_t chunk = STRIP_BYTES / isz;
    uint8_t *buf = malloc((size_t)(n < chunk ? n : chunk) * (size_t)isz);
    if (!buf) return dsv4_fail(k->err, DSV4_ERR_NOMEM, "gen-model: out of memory");
    int rc = DSV4_OK;
    for (int64_t i0 = 0; i0 < n && !rc; i0 += chunk) {
        const int64_t m = n - i0 < chunk ? n - i0 : chunk;
        for (int64_t i = 0; i < m; i++) {
            float x;
            if (s->init == DSV4_INIT_HC_SCALE) x = (float)(0.5 + rng_uniform(r));
            else if (s->init == DSV4_INIT_NORM) x = 1.0f + sig * rng_normal(r);
            else x = sig * rng_normal(r);
            float v = x;
            if (dt == DSV4_ST_BF16) {
                const uint16_t h = to_bf16(x);
                memcpy(buf + 2 * i, &h, 2);
                v = dsv4_bf16_to_f32(h);
            } else {
                memcpy(buf + 4 * i, &x, 4);
            }
            if (k->vals) k->vals[i0 + i] = v;
        }
        rc = put(k, buf, (uint64_t)(m * isz));
    }
    free(buf);
    return rc;
}

/* FP8: strips of 128 rows; each 128x128 block gets 2^(ceil(log2(amax/448)) + j), j a
 * random 0 or 1 from a second stream, so neighbouring blocks often differ in scale. */
static int gen_fp8(const dsv4_tensor_spec *s, rng *r, rng *rj, sink *k) {
    const int64_t out = s->shape[0], in = s->shape[1];
    const int64_t sr = (out + 127) / 128, sc = (in + 127) / 128;
    const float sig = init_sigma(s);
    float *x = malloc((size_t)(128 * in) * sizeof(float));   /* (128, in) strip */
    uint8_t *q = malloc((size_t)(128 * in));                  /* (128, in) codes */
    uint8_t *scale = malloc((size_t)(sr * sc));               /* (sr, sc) ue8m0 */
    int rc = DSV4_OK;
    if (!x || !q || !scale) rc = dsv4_fail(k->err, DSV4_ERR_NOMEM, "gen-model: out of memory");
    for (int64_t b0 = 0; b0 < sr && !rc; b0++) {
        const int64_t r0 = b0 * 128, nr = out - r0 < 128 ? out - r0 : 128;
        for (int64_t i = 0; i < nr * in; i++) x[i] = sig * rng_normal(r);
        for (int64_t c0 = 0; c0 < sc; c0++) {
            const int64_t cb = c0 * 128, nc = in - cb < 128 ? in - cb : 128;
            float amax = 0.0f;
            for (int64_t i = 0; i < nr; i++)
                for (int64_t j = 0; j < nc; j++) amax = maxf(amax, fabsf(x[i * in + cb + j]));
            int e = amax > 0.0f ? ceil_log2(amax / 448.0f) : 0;
            e += (int)(rng_next(rj) >> 63);
            if (e < -125) e = -125; /* keeps 2^e and 2^-e normal floats */
            if (e > 125) e = 125;
            scale[b0 * sc + c0] = (uint8_t)(127 + e);
            const float inv = pow2f(-e), s2 = pow2f(e);
            for (int64_t i = 0; i < nr; i++)
                for (int64_t j = 0; j < nc; j++) {
                    const int64_t at = i * in + cb + j;
                    float v;
                    q[at] = quant_e4m3(x[at] * inv, &v);
                    if (k->vals) k->vals[(r0 + i) * in + cb + j] = v * s2;
                }
        }
        rc = put(k, q, (uint64_t)(nr * in));
    }
    if (!rc) rc = put(k, scale, (uint64_t)(sr * sc));
    free(x);
    free(q);
    free(scale);
    return rc;
}

/* Packed FP4: per row, each group of 32 gets 2^ceil(log2(amax/6)); byte j of a row holds
 * element 2j in its low nibble. */
static int gen_fp4(const dsv4_tensor_spec *s, rng *r, sink *k) {
    const int64_t out = s->shape[0], in = s->shape[1];
    if (in % 32)
        return dsv4_fail(k->err, DSV4_ERR_CONFIG, "gen-model: %s: packed FP4 needs an input "
                         "width that is a multiple of 32, not %lld", s->name, (long long)in);
    const float sig = init_sigma(s);
    const int64_t rows = 256 > out ? out : 256; /* rows per write */
    float x[32];
    uint8_t *q = malloc((size_t)(rows * in / 2));       /* (rows, in/2) */
    uint8_t *scale = malloc((size_t)(out * (in / 32))); /* (out, in/32) ue8m0 */
    int rc = DSV4_OK;
    if (!q || !scale) rc = dsv4_fail(k->err, DSV4_ERR_NOMEM, "gen-model: out of memory");
    for (int64_t o0 = 0; o0 < out && !rc; o0 += rows) {
        const int64_t nr = out - o0 < rows ? out - o0 : rows;
        for (int64_t o = o0; o < o0 + nr; o++) {
            uint8_t *qr = q + (o - o0) * (in / 2);
            for (int64_t g = 0; g < in / 32; g++) {
                float amax = 0.0f;
                for (int i = 0; i < 32; i++) {
                    x[i] = sig * rng_normal(r);
                    amax = maxf(amax, fabsf(x[i]));
                }
                int e = amax > 0.0f ? ceil_log2(amax / 6.0f) : 0;
                if (e < -125) e = -125;
                if (e > 125) e = 125;
                scale[o * (in / 32) + g] = (uint8_t)(127 + e);
                const float inv = pow2f(-e), s2 = pow2f(e);
                for (int i = 0; i < 32; i += 2) {
                    float v0, v1;
                    const uint8_t c0 = quant_e2m1(x[i] * inv, &v0);
                    const uint8_t c1 = quant_e2m1(x[i + 1] * inv, &v1);
                    qr[g * 16 + i / 2] = (uint8_t)(c0 | (c1 << 4));
                    if (k->vals) {
                        k->vals[o * in + g * 32 + i] = v0 * s2;
                        k->vals[o * in + g * 32 + i + 1] = v1 * s2;
                    }
                }
            }
        }
        rc = put(k, q, (uint64_t)(nr * in / 2));
    }
    if (!rc) rc = put(k, scale, (uint64_t)(out * (in / 32)));
    free(q);
    free(scale);
    return rc;
}

/* tid2eid: each row is K distinct experts (a partial Fisher-Yates shuffle of a running
 * permutation), stored I64. */
static int gen_tid2eid(const dsv4_config *c, const dsv4_tensor_spec *s, rng *r, sink *k) {
    const int64_t V = s->shape[0], K = s->shape[1], E = c->n_routed_experts;
    if (K > E)
        return dsv4_fail(k->err, DSV4_ERR_CONFIG, "gen-model: %lld experts per token exceed %lld experts",
                         (long long)K, (long long)E);
    const int64_t rows = 8192;
    int64_t *perm = malloc((size_t)E * sizeof(int64_t));      /* (E) */
    int64_t *buf = malloc((size_t)(rows * K) * sizeof(int64_t)); /* (rows, K) */
    int rc = DSV4_OK;
    if (!perm || !buf) rc = dsv4_fail(k->err, DSV4_ERR_NOMEM, "gen-model: out of memory");
    for (int64_t e = 0; perm && e < E; e++) perm[e] = e;
    for (int64_t v0 = 0; v0 < V && !rc; v0 += rows) {
        const int64_t nr = V - v0 < rows ? V - v0 : rows;
        for (int64_t v = 0; v < nr; v++)
            for (int64_t i = 0; i < K; i++) {
                const int64_t j = i + (int64_t)rng_below(r, (uint64_t)(E - i));
                const int64_t t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
                buf[v * K + i] = perm[i];
                if (k->ids) k->ids[(v0 + v) * K + i] = (int32_t)perm[i];
            }
        rc = put(k, buf, (uint64_t)(nr * K) * 8); /* little-endian host */
    }
    free(perm);
    free(buf);
    return rc;
}

static int gen_tensor(const dsv4_config *c, const dsv4_gen_opts *o, const dsv4_tensor_spec *s,
                      sink *k) {
    rng r, rj;
    rng_seed(&r, o->seed, s->name, 0);
    rng_seed(&rj, o->seed, s->name, 1);
    const dsv4_st_dtype dt = stored_dtype(s, o->dtype);
    switch (dt) {
    case DSV4_ST_I64: return gen_tid2eid(c, s, &r, k);
    case DSV4_ST_F8_E4M3: return gen_fp8(s, &r, &rj, k);
    case DSV4_ST_I8: return gen_fp4(s, &r, k);
    default: return gen_dense(s, dt, &r, k);
    }
}

/* ---- file layout --------------------------------------------------------------------- */

/* Declares every tensor, widest element type first so each stays aligned with no gaps in
 * the data area; a quantized weight is followed by its scale. Returns the order used. */
static int declare(dsv4_stw *w, const dsv4_tensor_spec *specs, int n, dsv4_gen_dtype g,
                   int *order, dsv4_err *err) {
    int k = 0;
    for (int size = 8; size >= 1; size /= 2)
        for (int i = 0; i < n; i++) {
            const dsv4_tensor_spec *s = &specs[i];
            const dsv4_st_dtype dt = stored_dtype(s, g);
            if (dsv4_st_dtype_size(dt) != size) continue;
            int64_t shape[2] = {s->shape[0], s->shape[1]};
            if (dt == DSV4_ST_I8) shape[1] /= 2;
            int rc = dsv4_stw_add(w, s->name, dt, s->ndim, shape, NULL, err);
            if (rc) return rc;
            if (dt == DSV4_ST_F8_E4M3 || dt == DSV4_ST_I8) {
                char sname[128];
                snprintf(sname, sizeof sname, "%.*s.scale", (int)strlen(s->name) - 7, s->name);
                const int64_t ss[2] = {
                    dt == DSV4_ST_I8 ? s->shape[0] : (s->shape[0] + 127) / 128,
                    dt == DSV4_ST_I8 ? s->shape[1] / 32 : (s->shape[1] + 127) / 128};
                rc = dsv4_stw_add(w, sname, DSV4_ST_F8_E8M0, 2, ss, NULL, err);
                if (rc) return rc;
            }
            order[k++] = i;
        }
    return DSV4_OK;
}

void dsv4_gen_set_quant(dsv4_config *c, dsv4_gen_dtype dtype) {
    if (dtype == DSV4_GEN_FP8) {
        c->has_quant_config = 1;
        snprintf(c->quant_method, sizeof c->quant_method, "fp8");
        snprintf(c->quant_fmt, sizeof c->quant_fmt, "e4m3");
        snprintf(c->quant_scale_fmt, sizeof c->quant_scale_fmt, "ue8m0");
        c->quant_block[0] = c->quant_block[1] = 128;
        snprintf(c->quant_activation_scheme, sizeof c->quant_activation_scheme, "dynamic");
        snprintf(c->expert_dtype, sizeof c->expert_dtype, "fp4");
    } else {
        c->has_quant_config = 0;
        c->quant_method[0] = c->quant_fmt[0] = c->quant_scale_fmt[0] = 0;
        c->quant_block[0] = c->quant_block[1] = 0;
        c->quant_activation_scheme[0] = 0;
        c->expert_dtype[0] = 0;
    }
}

void dsv4_gen_demo_config(dsv4_config *c) {
    dsv4_config_defaults(c); /* the release's constants; small sizes below */
    c->vocab_size = 129280;
    c->hidden_size = 256;
    c->num_hidden_layers = 4;
    c->num_attention_heads = 4;
    c->head_dim = 128;
    c->qk_rope_head_dim = 64;   /* nope 64: fidelity-mode FP8 KV blocks fit */
    c->q_lora_rank = 128;
    c->o_lora_rank = 64;
    c->o_groups = 2;
    c->sliding_window = 128;
    const int ratios[5] = {0, 4, 128, 4, 0}; /* SWA, CSA, HCA, CSA; MTP SWA */
    memcpy(c->compress_ratios, ratios, sizeof ratios);
    c->index_n_heads = 4;
    c->index_head_dim = 64;
    c->index_topk = 16;
    c->n_routed_experts = 8;
    c->num_experts_per_tok = 2;
    c->num_hash_layers = 1;
    c->moe_intermediate_size = 128; /* every FP8/FP4 input width a multiple of 128 */
}

/* ---- entry points -------------------------------------------------------------------- */

static int check_cfg(const dsv4_config *cfg, dsv4_err *err) {
    int rc = dsv4_config_validate(cfg, err);
    if (rc) dsv4_err_prefix(err, "gen-model");
    return rc;
}

static int build_writer(const dsv4_config *cfg, const dsv4_gen_opts *o, dsv4_stw **wout,
                        dsv4_tensor_spec **specs, int **order, int *n, dsv4_err *err) {
    *wout = NULL;
    *order = NULL;
    int rc = dsv4_inventory_build(cfg, NULL, specs, n, err);
    if (rc) return rc;
    *order = malloc((size_t)*n * sizeof(int));
    dsv4_stw *w = dsv4_stw_new();
    if (!*order || !w) {
        dsv4_stw_free(w);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "gen-model: out of memory");
    }
    *wout = w;
    rc = dsv4_stw_meta(w, "format", "pt", err);
    if (!rc) rc = dsv4_stw_meta(w, "generator", o->dtype == DSV4_GEN_FP8 ? "dsv4 gen-model fp8" : "dsv4 gen-model bf16", err);
    if (!rc) rc = declare(w, *specs, *n, o->dtype, *order, err);
    return rc;
}

int dsv4_gen_file_size(const dsv4_config *cfg, const dsv4_gen_opts *o, uint64_t *bytes,
                       dsv4_err *err) {
    dsv4_stw *w = NULL;
    dsv4_tensor_spec *specs = NULL;
    int *order = NULL, n = 0;
    int rc = check_cfg(cfg, err);
    if (!rc) rc = build_writer(cfg, o, &w, &specs, &order, &n, err);
    *bytes = rc ? 0 : dsv4_stw_file_size(w);
    if (!rc && !*bytes) rc = dsv4_fail(err, DSV4_ERR_NOMEM, "gen-model: out of memory");
    dsv4_stw_free(w);
    free(specs);
    free(order);
    return rc;
}

int dsv4_gen_model(const dsv4_config *cfg_in, const dsv4_gen_opts *o, const char *dir,
                   dsv4_err *err) {
    dsv4_config cfg = *cfg_in;
    dsv4_gen_set_quant(&cfg, o->dtype);
    int rc = check_cfg(&cfg, err);
    if (rc) return rc;
    /* like mkdir -p: parents too */
    char sub[4096];
    if (snprintf(sub, sizeof sub, "%s", dir) >= (int)sizeof sub)
        return dsv4_fail(err, DSV4_ERR_ARG, "gen-model: directory name too long");
    for (char *p = sub + 1;; p++) {
        if (*p && *p != '/') continue;
        char c = *p;
        *p = 0;
        if (mkdir(sub, 0777) && errno != EEXIST)
            return dsv4_fail(err, DSV4_ERR_IO, "gen-model: cannot create directory %s: %s", sub,
                             strerror(errno));
        *p = c;
        if (!c) break;
    }

    char path[4096], tmp[4200];
    /* config.json */
    char *json = dsv4_config_to_json(&cfg);
    if (!json) return dsv4_fail(err, DSV4_ERR_NOMEM, "gen-model: out of memory");
    snprintf(path, sizeof path, "%s/config.json", dir);
    rc = dsv4_write_file_atomic(path, json, strlen(json), err);
    free(json);
    if (rc) return rc;

    /* model.safetensors, written under a temporary name and renamed when complete */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.partial", path);
    dsv4_stw *w = NULL;
    dsv4_tensor_spec *specs = NULL;
    int *order = NULL, n = 0;
    rc = build_writer(&cfg, o, &w, &specs, &order, &n, err);
    if (!rc) rc = dsv4_stw_open(w, tmp, err);
    sink k = {.w = w, .err = err};
    for (int i = 0; i < n && !rc; i++) rc = gen_tensor(&cfg, o, &specs[order[i]], &k);
    if (!rc) rc = dsv4_stw_close(w, err);
    if (!rc && rename(tmp, path))
        rc = dsv4_fail(err, DSV4_ERR_IO, "gen-model: cannot rename %s: %s", tmp, strerror(errno));
    if (!rc && dsv4_sync_parent_dir(path))
        rc = dsv4_fail(err, DSV4_ERR_IO, "gen-model: cannot fsync the directory of %s: %s", path, strerror(errno));
    if (rc && w) unlink(tmp);
    dsv4_stw_free(w);
    free(specs);
    free(order);
    return rc;
}

int dsv4_gen_expected(const dsv4_config *cfg, const dsv4_gen_opts *o, const char *name,
                      float **vals, int32_t **ids, int64_t *n, dsv4_err *err) {
    *vals = NULL;
    *ids = NULL;
    *n = 0;
    dsv4_tensor_spec *specs = NULL;
    int ns = 0;
    int rc = dsv4_inventory_build(cfg, NULL, &specs, &ns, err);
    if (rc) return rc;
    const dsv4_tensor_spec *s = NULL;
    for (int i = 0; i < ns && !s; i++)
        if (!strcmp(specs[i].name, name)) s = &specs[i];
    if (!s) {
        free(specs);
        return dsv4_fail(err, DSV4_ERR_ARG, "gen-model: no tensor named '%s' in this config", name);
    }
    const int64_t numel = dsv4_spec_numel(s);
    sink k = {.err = err};
    if (s->kind == DSV4_TK_TID2EID) k.ids = malloc((size_t)numel * sizeof(int32_t));
    else k.vals = malloc((size_t)numel * sizeof(float));
    if (!k.ids && !k.vals) rc = dsv4_fail(err, DSV4_ERR_NOMEM, "gen-model: out of memory");
    if (!rc) rc = gen_tensor(cfg, o, s, &k);
    free(specs);
    if (rc) {
        free(k.vals);
        free(k.ids);
        return rc;
    }
    *vals = k.vals;
    *ids = k.ids;
    *n = numel;
    return DSV4_OK;
}
