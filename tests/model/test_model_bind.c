/* test_model_bind.c — binding errors and accepted variants of checkpoints.
 *
 * A tiny model is generated (bf16 and fp8), then rewritten with st_write with one thing
 * changed: a tensor dropped, a shape or dtype changed, tid2eid or scale bytes edited, an
 * extra tensor added, tensors misaligned. Each variant must fail with a message naming the
 * tensor and the problem, or load with the documented conversion or warning.
 */
#include <math.h>
#include <stdint.h>

#include "dsv4.h"
#include "engine/engine.h"
#include "kernels/codec.h"
#include "kernels/linear.h"
#include "model/config.h"
#include "model/generate.h"
#include "model/inventory.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/st_write.h"
#include "model_tmp.h"
#include "test.h"

static char base_bf16[256], base_fp8[256], work[256];

/* One edit of a copy: drop tensors, change one tensor's dtype/shape/data, add extras. */
typedef struct edit {
    const char *drop[3];
    const char *name;          /* tensor to change */
    int dtype;                 /* -1 = keep */
    int ndim;                  /* 0 = keep shape */
    int64_t shape[2];
    const void *data;          /* NULL = keep data (byte count must then match) */
    const char *extra;         /* extra U8 [4] tensor */
    int misalign;              /* a 1-byte tensor first, so every later tensor is odd */
} edit;

static const edit NO_EDIT = {.dtype = -1};

static int dropped(const edit *e, const char *name) {
    for (int i = 0; i < 3; i++)
        if (e->drop[i] && !strcmp(e->drop[i], name)) return 1;
    return 0;
}

/* Writes src with edit e applied into the work dir (config.json copied). */
static int write_variant(const char *src, const edit *e) {
    char p[512];
    dsv4_err err = {0};
    size_t n = 0;
    snprintf(p, sizeof p, "%s/config.json", src);
    char *cfg = read_all(p, &n);
    snprintf(p, sizeof p, "%s/config.json", work);
    if (!cfg || write_all(p, cfg, n)) { free(cfg); return -1; }
    free(cfg);
    dsv4_st_set *st = NULL;
    if (dsv4_st_open_dir(src, &st, &err)) return -1;
    dsv4_stw *w = dsv4_stw_new();
    static const uint8_t pad[4] = {1, 2, 3, 4};
    int rc = 0;
    if (e->misalign) {
        const int64_t one = 1;
        rc |= dsv4_stw_add(w, "aaa_pad", DSV4_ST_U8, 1, &one, pad, &err);
    }
    /* widest element first keeps every tensor aligned, as the generator does */
    for (int size = 8; size >= 1; size /= 2)
        for (int i = 0; i < dsv4_st_count(st); i++) {
            const dsv4_st_tensor *t = dsv4_st_at(st, i);
            if (dropped(e, t->name)) continue;
            int dt = t->dtype, nd = t->ndim;
            int64_t sh[DSV4_ST_MAX_DIMS];
            memcpy(sh, t->shape, sizeof sh);
            const void *data = t->data;
            if (e->name && !strcmp(e->name, t->name)) {
                if (e->dtype >= 0) dt = e->dtype;
                if (e->ndim) {
                    nd = e->ndim;
                    sh[0] = e->shape[0];
                    sh[1] = e->shape[1];
                }
                if (e->data) data = e->data;
            }
            if (dsv4_st_dtype_size((dsv4_st_dtype)dt) != size) continue;
            rc |= dsv4_stw_add(w, t->name, (dsv4_st_dtype)dt, nd, sh, data, &err);
        }
    if (e->extra) {
        const int64_t four = 4;
        rc |= dsv4_stw_add(w, e->extra, DSV4_ST_U8, 1, &four, pad, &err);
    }
    snprintf(p, sizeof p, "%s/model.safetensors", work);
    if (!rc) rc = dsv4_stw_open(w, p, &err);
    if (!rc) rc = dsv4_stw_close(w, &err);
    if (rc) fprintf(stderr, "write_variant: %s\n", err.msg);
    dsv4_stw_free(w);
    dsv4_st_close(st);
    return rc;
}

/* Loads the work dir; returns the error code (model closed unless out != NULL). */
static int load_work(dsv4_err *err, struct dsv4_model **out) {
    struct dsv4_model *m = NULL;
    int rc = dsv4_model_load(work, &m, err);
    if (out) *out = m;
    else dsv4_model_close(m);
    return rc;
}

static void expect_fail(const char *src, const edit *e, const char *what, const char *s1,
                        const char *s2) {
    CHECK_MSG(write_variant(src, e) == 0, "%s: cannot write the variant", what);
    dsv4_err err = {0};
    int rc = load_work(&err, NULL);
    CHECK_MSG(rc == DSV4_ERR_FORMAT, "%s: loaded (rc %d) but should fail", what, rc);
    printf("%-22s -> %s\n", what, err.msg);
    CHECK_MSG(strstr(err.msg, s1) != NULL, "%s: message '%s' lacks '%s'", what, err.msg, s1);
    if (s2) CHECK_MSG(strstr(err.msg, s2) != NULL, "%s: message '%s' lacks '%s'", what, err.msg, s2);
}

/* A copy of a tensor's bytes for editing. */
static void *copy_of(const char *src, const char *name, uint64_t *n) {
    dsv4_st_set *st = NULL;
    dsv4_err err = {0};
    if (dsv4_st_open_dir(src, &st, &err)) return NULL;
    const dsv4_st_tensor *t = dsv4_st_find(st, name);
    void *p = t ? malloc(t->nbytes) : NULL;
    if (p) memcpy(p, t->data, t->nbytes);
    if (n) *n = t ? t->nbytes : 0;
    dsv4_st_close(st);
    return p;
}

/* Every row of matrix `name` equal in two models. */
static int same_rows(const struct dsv4_model *a, const struct dsv4_model *b, const char *name) {
    const dsv4_tensor_spec *sa = dsv4_model_spec(a, name), *sb = dsv4_model_spec(b, name);
    if (!sa || !sb) return 0;
    const dsv4_mat *x = sa->mat, *y = sb->mat;
    if (x->rows != y->rows || x->cols != y->cols) return 0;
    float *r1 = malloc((size_t)x->cols * 4), *r2 = malloc((size_t)x->cols * 4);
    int same = 1;
    for (int64_t r = 0; r < x->rows && same; r++) {
        dsv4_mat_row(x, r, r1);
        dsv4_mat_row(y, r, r2);
        same = !memcmp(r1, r2, (size_t)x->cols * 4);
    }
    free(r1);
    free(r2);
    return same;
}

static void test_missing(void) {
    edit e = NO_EDIT;
    e.drop[0] = "layers.1.attn.wkv.weight";
    e.drop[1] = "mtp.0.hc_head_scale";
    expect_fail(base_bf16, &e, "two missing", "2 tensor(s) missing: layers.1.attn.wkv.weight, mtp.0.hc_head_scale", NULL);
    edit t = NO_EDIT;
    t.drop[0] = "layers.0.ffn.gate.tid2eid";
    expect_fail(base_bf16, &t, "missing tid2eid", "1 tensor(s) missing: layers.0.ffn.gate.tid2eid", NULL);
    edit s = NO_EDIT;
    s.drop[0] = "layers.0.attn.wq_a.scale";
    expect_fail(base_fp8, &s, "missing scale", "layers.0.attn.wq_a.scale (scale of the F8_E4M3 weight", NULL);
    edit x = NO_EDIT;
    x.drop[0] = "layers.3.ffn.experts.5.w2.scale";
    expect_fail(base_fp8, &x, "missing expert scale", "layers.3.ffn.experts.5.w2.scale (scale of the I8", NULL);
}

static void test_shapes(void) {
    /* tiny: D 128, q_lora 64, H 4 */
    edit e = NO_EDIT;
    e.name = "layers.2.attn.wq_a.weight";
    e.ndim = 2;
    e.shape[0] = 128;
    e.shape[1] = 64;
    expect_fail(base_bf16, &e, "transposed matrix",
                "1 malformed: layers.2.attn.wq_a.weight: shape [128, 64], expected [64, 128] (BF16)", NULL);
    edit v = NO_EDIT;
    v.name = "layers.0.attn.attn_sink";
    v.ndim = 2;
    v.shape[0] = 2;
    v.shape[1] = 2;
    expect_fail(base_bf16, &v, "vector as 2-D", "layers.0.attn.attn_sink: shape [2, 2], expected [4]", NULL);
    /* FP8 scale grid: wq_b [256, 64] has a [2, 1] grid */
    edit s = NO_EDIT;
    s.name = "layers.1.attn.wq_b.scale";
    s.ndim = 2;
    s.shape[0] = 1;
    s.shape[1] = 2;
    expect_fail(base_fp8, &s, "scale grid", "layers.1.attn.wq_b.scale: shape [1, 2], expected [2, 1]", NULL);
    /* packed FP4 must be [out, in/2]: an expert w1 declared unpacked */
    uint8_t *zeros = calloc(64 * 128, 1);
    edit f = NO_EDIT;
    f.name = "layers.4.ffn.experts.0.w1.weight";
    f.ndim = 2;
    f.shape[0] = 64;
    f.shape[1] = 128;
    f.data = zeros;
    expect_fail(base_fp8, &f, "unpacked fp4", "layers.4.ffn.experts.0.w1.weight: shape [64, 128], expected [64, 64]", NULL);
    free(zeros);
    /* two problems of different kinds in one message */
    edit two = e;
    two.drop[0] = "norm.weight";
    expect_fail(base_bf16, &two, "missing and malformed", "1 tensor(s) missing: norm.weight; 1 malformed: layers.2.attn.wq_a", NULL);
}

static void test_dtypes(void) {
    edit e = NO_EDIT;
    e.name = "layers.0.attn_norm.weight";
    e.dtype = DSV4_ST_I16;
    expect_fail(base_bf16, &e, "norm as I16", "layers.0.attn_norm.weight: dtype I16, expected BF16, F16 or F32", NULL);
    edit g = NO_EDIT;
    g.name = "layers.0.ffn.gate.weight";
    g.dtype = DSV4_ST_I16;
    expect_fail(base_bf16, &g, "matrix as I16", "layers.0.ffn.gate.weight: dtype I16 is not a matrix format", NULL);
    edit f8 = NO_EDIT;
    f8.name = "layers.0.attn.wkv.weight";
    f8.dtype = DSV4_ST_F8_E5M2;
    expect_fail(base_fp8, &f8, "e5m2", "dtype F8_E5M2 is not a matrix format", NULL);
    edit sc = NO_EDIT;
    sc.name = "layers.0.attn.wkv.scale";
    sc.dtype = DSV4_ST_U8;
    expect_fail(base_fp8, &sc, "scale as U8", "layers.0.attn.wkv.scale: dtype U8, expected F8_E8M0 or F32", NULL);
    edit t = NO_EDIT;
    t.name = "layers.1.ffn.gate.tid2eid";
    t.dtype = DSV4_ST_F64;
    expect_fail(base_bf16, &t, "tid2eid as F64", "layers.1.ffn.gate.tid2eid: dtype F64, expected I64 or I32", NULL);
}

static void test_tid2eid(void) {
    const char *name = "layers.2.ffn.gate.tid2eid"; /* tiny: [512, 2] I64, E = 8 */
    uint64_t nb = 0;
    int64_t *ids = copy_of(base_bf16, name, &nb);
    CHECK(ids && nb == 512 * 2 * 8);
    if (!ids) return;
    edit e = NO_EDIT;
    e.name = name;
    e.data = ids;
    int64_t keep = ids[5 * 2 + 1];
    ids[5 * 2 + 1] = ids[5 * 2];
    expect_fail(base_bf16, &e, "duplicate expert", "layers.2.ffn.gate.tid2eid: row 5 names expert", "twice");
    ids[5 * 2 + 1] = keep;
    ids[300 * 2] = 8;
    expect_fail(base_bf16, &e, "expert id = E", "row 300 entry 0 is 8, outside [0, 8)", NULL);
    ids[300 * 2] = -1;
    expect_fail(base_bf16, &e, "negative id", "row 300 entry 0 is -1, outside [0, 8)", NULL);
    free(ids);

    /* I32 is accepted and gives the same table */
    ids = copy_of(base_bf16, name, &nb);
    int32_t *i32 = malloc(512 * 2 * 4);
    for (int k = 0; k < 1024; k++) i32[k] = (int32_t)ids[k];
    edit w = NO_EDIT;
    w.name = name;
    w.dtype = DSV4_ST_I32;
    w.data = i32;
    CHECK(write_variant(base_bf16, &w) == 0);
    dsv4_err err = {0};
    struct dsv4_model *m = NULL;
    CHECK_MSG(load_work(&err, &m) == 0, "I32 tid2eid: %s", err.msg);
    if (m) {
        CHECK(!memcmp(m->layers[2].tid2eid, i32, 512 * 2 * 4));
        dsv4_model_close(m);
    }
    free(i32);
    free(ids);
}

static void test_scales(void) {
    const char *name = "layers.1.attn.wq_b.scale"; /* [2, 1] */
    uint64_t nb = 0;
    uint8_t *sc = copy_of(base_fp8, name, &nb);
    CHECK(sc && nb == 2);
    if (!sc) return;
    edit e = NO_EDIT;
    e.name = name;
    e.data = sc;
    const uint8_t orig = sc[1];
    sc[1] = 255;
    expect_fail(base_fp8, &e, "NaN scale", "layers.1.attn.wq_b.scale: scale byte 255 (NaN) at [1, 0]", NULL);
    /* unusual but valid bytes: a warning, and the load succeeds */
    sc[1] = 250;
    sc[0] = 2;
    CHECK(write_variant(base_fp8, &e) == 0);
    dsv4_err err = {0};
    struct dsv4_model *m = NULL;
    CHECK_MSG(load_work(&err, &m) == 0, "scale 250: %s", err.msg);
    if (m) {
        CHECK(m->n_warnings == 1 && m->warnings &&
              strstr(m->warnings, "layers.1.attn.wq_b.scale: 2 scale byte(s) outside [3, 246], first 2 at [0, 0]"));
        dsv4_model_close(m);
    }
    sc[0] = orig;
    free(sc);

    /* F32 scales (the official scale_dtype = fp32 option) dequantize to the same values */
    const char *fp4s = "layers.4.ffn.experts.3.w2.scale"; /* [128, 2] */
    uint8_t *u = copy_of(base_fp8, fp4s, &nb);
    CHECK(u && nb == 256);
    float *f = malloc(nb * 4);
    for (uint64_t k = 0; u && k < nb; k++) f[k] = ldexpf(1.0f, (int)u[k] - 127);
    edit g = NO_EDIT;
    g.name = fp4s;
    g.dtype = DSV4_ST_F32;
    g.data = f;
    CHECK(write_variant(base_fp8, &g) == 0);
    struct dsv4_model *a = NULL, *b = NULL;
    CHECK_MSG(load_work(&err, &b) == 0, "F32 scales: %s", err.msg);
    CHECK(dsv4_model_load(base_fp8, &a, &err) == 0);
    if (a && b) {
        CHECK(b->layers[4].w2[3].scale_is_f32 && !a->layers[4].w2[3].scale_is_f32);
        CHECK(same_rows(a, b, "layers.4.ffn.experts.3.w2.weight"));
        CHECK(b->n_warnings == 0);
    }
    dsv4_model_close(a);
    dsv4_model_close(b);
    free(f);
    free(u);
}

/* The no-NaN flag of an FP8 matrix (dsv4_mat.fp8_no_nan, which lets the one-row kernels skip
 * their NaN scan): open reads no weight byte, so the model's flags stay 0; an engine that copies
 * the weights (COPY) sets it where no weight byte is an e4m3 NaN code and clears it on the one
 * matrix of a checkpoint that holds a 0x7F; mapped weights (NATURAL) keep the scan (0). */
static int engine_flag(const struct dsv4_model *m, int layout, int layer, int wq_b) {
    dsv4_engine_opts eo = {.max_context = 16, .max_seqs = 1, .kv_dtype = DSV4_KV_F32, .fp4_layout = layout, .threads = 2};
    dsv4_engine *e = NULL;
    dsv4_err err = {0};
    if (dsv4_engine_create(m, &eo, &e, &err)) {
        fprintf(stderr, "engine: %s\n", err.msg);
        return -1;
    }
    const dsv4_mat *w = wq_b ? &e->blocks[layer].wq_b : &e->blocks[layer].wq_a;
    const int f = w->fmt == DSV4_WF_FP8 ? w->fp8_no_nan : -2;
    dsv4_engine_free(e);
    return f;
}

static void test_fp8_no_nan(void) {
    const char *wq_b = "layers.1.attn.wq_b.weight", *wq_a = "layers.1.attn.wq_a.weight";
    uint64_t nb = 0;
    uint8_t *w = copy_of(base_fp8, wq_b, &nb);
    CHECK(w && nb > 1000);
    if (!w) return;
    dsv4_err err = {0};
    struct dsv4_model *a = NULL, *b = NULL;
    CHECK_MSG(dsv4_model_load(base_fp8, &a, &err) == 0, "%s", err.msg);
    w[nb / 2 + 3] = 0x7F;
    edit e = NO_EDIT;
    e.name = wq_b;
    e.data = w;
    CHECK(write_variant(base_fp8, &e) == 0);
    CHECK_MSG(load_work(&err, &b) == 0, "a NaN code: %s", err.msg);
    if (a && b) {
        const dsv4_mat *aq = dsv4_model_spec(a, wq_b)->mat, *bq = dsv4_model_spec(b, wq_b)->mat;
        CHECK(aq->fmt == DSV4_WF_FP8 && aq->fp8_no_nan == 0 && dsv4_model_spec(a, wq_a)->mat->fp8_no_nan == 0);
        CHECK(bq->fmt == DSV4_WF_FP8 && bq->fp8_no_nan == 0);
        CHECK(engine_flag(a, DSV4_FP4_COPY, 1, 1) == 1 && engine_flag(a, DSV4_FP4_COPY, 1, 0) == 1);
        CHECK(engine_flag(b, DSV4_FP4_COPY, 1, 1) == 0 && engine_flag(b, DSV4_FP4_COPY, 1, 0) == 1);
        CHECK(engine_flag(a, DSV4_FP4_NATURAL, 1, 1) == 0 && engine_flag(a, DSV4_FP4_NATURAL, 1, 0) == 0);
    }
    dsv4_model_close(a);
    dsv4_model_close(b);
    free(w);
}

static void test_extra_and_variants(void) {
    dsv4_err err = {0};
    struct dsv4_model *m = NULL, *ref = NULL;
    CHECK(dsv4_model_load(base_bf16, &ref, &err) == 0);

    /* a clean copy loads with no warning (the variant writer itself is sound) */
    CHECK(write_variant(base_bf16, &NO_EDIT) == 0);
    CHECK(load_work(&err, &m) == 0 && m && m->n_warnings == 0);
    dsv4_model_close(m);

    /* extra tensors are listed in a warning, including a .scale next to a BF16 weight */
    edit e = NO_EDIT;
    e.extra = "layers.0.attn.bogus";
    CHECK(write_variant(base_bf16, &e) == 0);
    CHECK_MSG(load_work(&err, &m) == 0, "extra: %s", err.msg);
    if (m) {
        CHECK(m->n_warnings == 1 && m->warnings &&
              strstr(m->warnings, "1 unexpected tensor(s) ignored: layers.0.attn.bogus"));
        /* the public accessor carries it too */
        CHECK(strstr(dsv4_model_warnings(m), "layers.0.attn.bogus") != NULL);
        dsv4_model_close(m);
    }
    e.extra = "layers.0.attn.wkv.scale";
    CHECK(write_variant(base_bf16, &e) == 0);
    CHECK(load_work(&err, &m) == 0);
    if (m) {
        CHECK(m->warnings && strstr(m->warnings, "layers.0.attn.wkv.scale"));
        dsv4_model_close(m);
    }

    /* vectors may be F32 or F16, matrices F32: same values after conversion */
    uint64_t nb = 0;
    uint16_t *bf = copy_of(base_bf16, "layers.3.ffn_norm.weight", &nb); /* [128] BF16 */
    uint16_t *h = malloc(nb);
    for (uint64_t k = 0; bf && k < nb / 2; k++) h[k] = dsv4_f32_to_f16(dsv4_bf16_to_f32(bf[k]));
    edit v = NO_EDIT;
    v.name = "layers.3.ffn_norm.weight";
    v.dtype = DSV4_ST_F16;
    v.data = h;
    CHECK(write_variant(base_bf16, &v) == 0);
    CHECK_MSG(load_work(&err, &m) == 0, "F16 norm: %s", err.msg);
    if (m && ref) {
        CHECK(!memcmp(m->layers[3].ffn_norm, ref->layers[3].ffn_norm, 128 * 4));
        dsv4_model_close(m);
    }
    free(h);
    free(bf);
    bf = copy_of(base_bf16, "layers.1.attn.wkv.weight", &nb); /* [64, 128] BF16 */
    float *f = malloc(nb * 2);
    for (uint64_t k = 0; bf && k < nb / 2; k++) f[k] = dsv4_bf16_to_f32(bf[k]);
    edit d = NO_EDIT;
    d.name = "layers.1.attn.wkv.weight";
    d.dtype = DSV4_ST_F32;
    d.data = f;
    CHECK(write_variant(base_bf16, &d) == 0);
    CHECK_MSG(load_work(&err, &m) == 0, "F32 matrix: %s", err.msg);
    if (m && ref) {
        CHECK(m->layers[1].wkv.fmt == DSV4_WF_F32);
        CHECK(same_rows(m, ref, "layers.1.attn.wkv.weight"));
        dsv4_model_close(m);
    }
    free(f);
    free(bf);

    /* misaligned data (a 1-byte tensor first): copied, same values, no UB */
    edit a = NO_EDIT;
    a.misalign = 1;
    CHECK(write_variant(base_bf16, &a) == 0);
    CHECK_MSG(load_work(&err, &m) == 0, "misaligned: %s", err.msg);
    if (m && ref) {
        const dsv4_st_tensor *t = dsv4_st_find(m->files, "layers.2.attn.wo_b.weight");
        CHECK(t && ((uintptr_t)t->data & 1) && m->layers[2].wo_b.w != t->data);
        CHECK(same_rows(m, ref, "layers.2.attn.wo_b.weight"));
        CHECK(same_rows(m, ref, "embed.weight"));
        CHECK(!memcmp(m->layers[4].hc_ffn_fn, ref->layers[4].hc_ffn_fn, 24 * 512 * 4));
        CHECK(m->warnings && strstr(m->warnings, "aaa_pad"));
        dsv4_model_close(m);
    }
    dsv4_model_close(ref);
}

/* Two shards and an index: the loader binds across files. */
static void test_sharded(void) {
    char p[512];
    dsv4_err err = {0};
    CHECK(write_variant(base_fp8, &NO_EDIT) == 0); /* config.json */
    snprintf(p, sizeof p, "%s/model.safetensors", work);
    unlink(p);
    dsv4_st_set *st = NULL;
    CHECK(dsv4_st_open_dir(base_fp8, &st, &err) == 0);
    if (!st) return;
    dsv4_stw *w[2] = {dsv4_stw_new(), dsv4_stw_new()};
    const char *file[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    size_t cap = 1 << 16, len = 0;
    char *idx = malloc(cap);
    len += (size_t)snprintf(idx, cap, "{\"metadata\": {}, \"weight_map\": {");
    int first = 1;
    for (int size = 8; size >= 1; size /= 2)
        for (int i = 0; i < dsv4_st_count(st); i++) {
            const dsv4_st_tensor *t = dsv4_st_at(st, i);
            if (dsv4_st_dtype_size(t->dtype) != size) continue;
            const int f = strcmp(t->name, "layers.3") < 0 ? 0 : 1;
            CHECK(dsv4_stw_add(w[f], t->name, t->dtype, t->ndim, t->shape, t->data, &err) == 0);
            if (len + 256 > cap) idx = realloc(idx, cap *= 2);
            len += (size_t)snprintf(idx + len, cap - len, "%s\"%s\": \"%s\"", first ? "" : ", ", t->name, file[f]);
            first = 0;
        }
    len += (size_t)snprintf(idx + len, cap - len, "}}");
    for (int f = 0; f < 2; f++) {
        snprintf(p, sizeof p, "%s/%s", work, file[f]);
        CHECK(dsv4_stw_open(w[f], p, &err) == 0 && dsv4_stw_close(w[f], &err) == 0);
        dsv4_stw_free(w[f]);
    }
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", work);
    CHECK(write_all(p, idx, len) == 0);
    free(idx);
    dsv4_st_close(st);
    struct dsv4_model *m = NULL, *ref = NULL;
    CHECK_MSG(load_work(&err, &m) == 0, "sharded: %s", err.msg);
    CHECK(dsv4_model_load(base_fp8, &ref, &err) == 0);
    if (m && ref) {
        CHECK(dsv4_st_n_files(m->files) == 2 && m->n_warnings == 0);
        CHECK(same_rows(m, ref, "layers.0.attn.wq_a.weight") && same_rows(m, ref, "mtp.0.e_proj.weight"));
        CHECK(same_rows(m, ref, "layers.5.ffn.experts.7.w3.weight"));
    }
    dsv4_model_close(m);
    dsv4_model_close(ref);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", work);
    unlink(p);
    for (int f = 0; f < 2; f++) {
        snprintf(p, sizeof p, "%s/%s", work, file[f]);
        unlink(p);
    }
}

static void test_files(void) {
    dsv4_err err = {0};
    struct dsv4_model *m = NULL;
    char p[512];
    snprintf(p, sizeof p, "%s/nonexistent", work);
    CHECK(dsv4_model_load(p, &m, &err) != 0 && m == NULL);
    CHECK_MSG(strstr(err.msg, "config.json") != NULL, "%s", err.msg);
    /* config present, weights absent */
    CHECK(write_variant(base_bf16, &NO_EDIT) == 0);
    snprintf(p, sizeof p, "%s/model.safetensors", work);
    unlink(p);
    CHECK(dsv4_model_load(work, &m, &err) != 0 && m == NULL);
    CHECK_MSG(strstr(err.msg, "model.safetensors") != NULL, "%s", err.msg);
    CHECK(dsv4_model_open(NULL, &m, &err) == DSV4_ERR_ARG);
}

int main(void) {
    char path[1024];
    dsv4_config cfg;
    dsv4_err err = {0};
    if (dsv4_config_load(test_shared("oracle/configs/tiny.json", path, sizeof path), &cfg, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    CHECK(tmp_dir(base_bf16, sizeof base_bf16, "bind") && tmp_dir(base_fp8, sizeof base_fp8, "bind") &&
          tmp_dir(work, sizeof work, "bind"));
    dsv4_gen_opts ob = {.seed = 11, .dtype = DSV4_GEN_BF16}, of = {.seed = 12, .dtype = DSV4_GEN_FP8};
    CHECK(dsv4_gen_model(&cfg, &ob, base_bf16, &err) == 0);
    CHECK(dsv4_gen_model(&cfg, &of, base_fp8, &err) == 0);
    test_missing();
    test_shapes();
    test_dtypes();
    test_tid2eid();
    test_scales();
    test_fp8_no_nan();
    test_extra_and_variants();
    test_sharded();
    test_files();
    tmp_rm(base_bf16);
    tmp_rm(base_fp8);
    tmp_rm(work);
    return test_report();
}
