/* model.c — opening a checkpoint and binding every tensor by its official name.
 *
 * The inventory (inventory.c) lists what the config implies; each entry is looked up in the
 * mmap'd safetensors set and checked: dtype, shape, the companion `.scale` of quantized
 * matrices, scale bytes, tid2eid contents. Matrices stay in the file in their stored format;
 * small vectors are converted to F32 and tid2eid to int32 into buffers the model owns.
 * All problems are collected before failing, so one error names every missing tensor (up
 * to the message size) instead of the first only. Extra tensors and unusual scale bytes are
 * warnings kept in the model.
 */
#include "model/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/codec.h"
#include "model/info.h"
#include "model/inventory.h"
#include "model/safetensors.h"
#include "util/err.h"

/* ---- owned memory ------------------------------------------------------------------ */

void *dsv4_model_alloc(struct dsv4_model *m, size_t bytes) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **o = realloc(m->owned, (size_t)cap * sizeof *o);
        if (!o) return NULL;
        m->owned = o;
        m->cap_owned = cap;
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) m->owned[m->n_owned++] = p;
    return p;
}

void dsv4_model_close(dsv4_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->warnings);
    free(m->all_warnings);
    free(m->specs);
    free(m->config_json);
    if (m->files) dsv4_st_close(m->files);
    free(m);
}

/* ---- text lists -------------------------------------------------------------------- */

typedef struct strlist { char *p; size_t n, cap; int count; int oom; } strlist;

static void sl_add(strlist *l, const char *sep, const char *fmt, ...) DSV4_PRINTF(3, 4);
static void sl_add(strlist *l, const char *sep, const char *fmt, ...) {
    char item[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(item, sizeof item, fmt, ap);
    va_end(ap);
    l->count++;
    if (l->oom) return;
    size_t k = strlen(item), s = l->n ? strlen(sep) : 0;
    if (l->n + s + k + 1 > l->cap) {
        size_t cap = l->cap ? l->cap : 256;
        while (l->n + s + k + 1 > cap) cap *= 2;
        char *p = realloc(l->p, cap);
        if (!p) { l->oom = 1; return; }
        l->p = p;
        l->cap = cap;
    }
    memcpy(l->p + l->n, sep, s);
    memcpy(l->p + l->n + s, item, k + 1);
    l->n += s + k;
}

typedef struct binder {
    struct dsv4_model *m;
    const dsv4_st_set *st;
    int headers_only;
    strlist missing;    /* names */
    strlist malformed;  /* "name: what" */
    strlist warn;       /* lines */
    int oom;
} binder;

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static int shape_is(const dsv4_st_tensor *t, int ndim, int64_t d0, int64_t d1) {
    if (t->ndim != ndim) return 0;
    return t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1);
}

static void bad_shape(binder *b, const dsv4_st_tensor *t, int ndim, int64_t d0, int64_t d1) {
    char got[128], want[128];
    int64_t w[2] = {d0, d1};
    shape_str(got, sizeof got, t->ndim, t->shape);
    shape_str(want, sizeof want, ndim, w);
    sl_add(&b->malformed, "; ", "%s: shape %s, expected %s (%s)", t->name, got, want,
           dsv4_st_dtype_name(t->dtype));
}

/* Data of a tensor as an aligned pointer: the mapping itself when its offset suits the
 * element size (always, for files written by torch or the generator), else an owned copy. */
static const void *aligned_data(binder *b, const dsv4_st_tensor *t, size_t align) {
    if (b->headers_only || ((uintptr_t)t->data % align) == 0) return t->data;
    void *p = dsv4_model_alloc(b->m, (size_t)t->nbytes);
    if (!p) { b->oom = 1; return NULL; }
    memcpy(p, t->data, (size_t)t->nbytes);
    return p;
}

/* ---- matrices ---------------------------------------------------------------------- */

/* Checks the `<module>.scale` of a quantized weight and binds it. rows x cols is the scale
 * grid the format needs. */
static void bind_scale(binder *b, const char *wname, dsv4_mat *mat, int64_t rows, int64_t cols) {
    char sname[128];
    size_t k = strlen(wname);
    /* wname ends with ".weight" (inventory names) */
    snprintf(sname, sizeof sname, "%.*s.scale", (int)(k > 7 ? k - 7 : k), wname);
    const dsv4_st_tensor *s = dsv4_st_find(b->st, sname);
    if (!s) {
        sl_add(&b->missing, ", ", "%s (scale of the %s weight %s)", sname,
               dsv4_st_dtype_name(dsv4_st_find(b->st, wname)->dtype), wname);
        return;
    }
    if (s->dtype != DSV4_ST_F8_E8M0 && s->dtype != DSV4_ST_F32) {
        sl_add(&b->malformed, "; ", "%s: dtype %s, expected F8_E8M0 or F32", sname,
               dsv4_st_dtype_name(s->dtype));
        return;
    }
    if (!shape_is(s, 2, rows, cols)) { bad_shape(b, s, 2, rows, cols); return; }
    mat->scale_is_f32 = s->dtype == DSV4_ST_F32;
    mat->scale = aligned_data(b, s, mat->scale_is_f32 ? 4 : 1);
    if (b->headers_only || !mat->scale) return;
    const int64_t n = rows * cols;
    if (mat->scale_is_f32) {
        const float *f = mat->scale;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(f[i])) {
                sl_add(&b->malformed, "; ", "%s: scale [%lld, %lld] is %g", sname,
                       (long long)(i / cols), (long long)(i % cols), (double)f[i]);
                return;
            }
        return;
    }
    const uint8_t *u = mat->scale;
    int64_t n_odd = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        if (u[i] == 255) {
            sl_add(&b->malformed, "; ", "%s: scale byte 255 (NaN) at [%lld, %lld]", sname,
                   (long long)(i / cols), (long long)(i % cols));
            return;
        }
        if (u[i] < 3 || u[i] > 246) {
            if (first < 0) first = i;
            n_odd++;
        }
    }
    /* Bytes outside [3, 246] are valid but dequantized values may overflow (above) or be
     * inexact in BF16 (below): a warning, not an error (spec/model.md §2.3). */
    if (n_odd)
        sl_add(&b->warn, "\n",
               "%s: %lld scale byte(s) outside [3, 246], first %u at [%lld, %lld]", sname,
               (long long)n_odd, u[first], (long long)(first / cols), (long long)(first % cols));
}

static void bind_mat(binder *b, const dsv4_tensor_spec *sp) {
    const dsv4_st_tensor *t = dsv4_st_find(b->st, sp->name);
    if (!t) { sl_add(&b->missing, ", ", "%s", sp->name); return; }
    const int64_t out = sp->shape[0], in = sp->shape[1];
    dsv4_mat *mat = sp->mat;
    dsv4_mat tmp;
    if (!mat) mat = &tmp;
    memset(mat, 0, sizeof *mat);
    mat->rows = out;
    mat->cols = in;
    switch (t->dtype) {
    case DSV4_ST_F32:
    case DSV4_ST_F16:
    case DSV4_ST_BF16: {
        if (!shape_is(t, 2, out, in)) { bad_shape(b, t, 2, out, in); return; }
        const int sz = t->dtype == DSV4_ST_F32 ? 4 : 2;
        mat->w = aligned_data(b, t, (size_t)sz);
        mat->fmt = t->dtype == DSV4_ST_F32 ? DSV4_WF_F32 : t->dtype == DSV4_ST_F16 ? DSV4_WF_F16 : DSV4_WF_BF16;
        return;
    }
    case DSV4_ST_F8_E4M3:
        if (!shape_is(t, 2, out, in)) { bad_shape(b, t, 2, out, in); return; }
        mat->w = t->data;
        mat->fmt = DSV4_WF_FP8;
        bind_scale(b, sp->name, mat, (out + 127) / 128, (in + 127) / 128);
        return;
    case DSV4_ST_I8:
        if (in % 32 != 0) {
            sl_add(&b->malformed, "; ", "%s: packed FP4 (I8) needs an input width that is a "
                   "multiple of 32, the config gives %lld", t->name, (long long)in);
            return;
        }
        if (!shape_is(t, 2, out, in / 2)) { bad_shape(b, t, 2, out, in / 2); return; }
        mat->w = t->data;
        mat->fmt = DSV4_WF_FP4;
        bind_scale(b, sp->name, mat, out, in / 32);
        return;
    default:
        sl_add(&b->malformed, "; ", "%s: dtype %s is not a matrix format (F32, F16, BF16, "
               "F8_E4M3 + scale, I8 packed FP4 + scale)", t->name, dsv4_st_dtype_name(t->dtype));
    }
}

/* ---- vectors and tid2eid ----------------------------------------------------------- */

static void bind_vec(binder *b, const dsv4_tensor_spec *sp) {
    const dsv4_st_tensor *t = dsv4_st_find(b->st, sp->name);
    if (!t) { sl_add(&b->missing, ", ", "%s", sp->name); return; }
    if (t->dtype != DSV4_ST_F32 && t->dtype != DSV4_ST_F16 && t->dtype != DSV4_ST_BF16) {
        sl_add(&b->malformed, "; ", "%s: dtype %s, expected BF16, F16 or F32", t->name,
               dsv4_st_dtype_name(t->dtype));
        return;
    }
    if (!shape_is(t, sp->ndim, sp->shape[0], sp->shape[1])) {
        bad_shape(b, t, sp->ndim, sp->shape[0], sp->shape[1]);
        return;
    }
    if (b->headers_only || !sp->vec) return;
    const int64_t n = dsv4_spec_numel(sp);
    float *v = dsv4_model_alloc(b->m, (size_t)n * sizeof(float));
    if (!v) { b->oom = 1; return; }
    const uint8_t *p = t->data;
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == DSV4_ST_F32) {
            memcpy(&v[i], p + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            v[i] = t->dtype == DSV4_ST_BF16 ? dsv4_bf16_to_f32(h) : dsv4_f16_to_f32(h);
        }
        if (!isfinite(v[i])) {
            sl_add(&b->malformed, "; ", "%s: element %lld is %g", t->name, (long long)i, (double)v[i]);
            return;
        }
    }
    *sp->vec = v;
}

static void bind_tid2eid(binder *b, const dsv4_tensor_spec *sp) {
    const dsv4_st_tensor *t = dsv4_st_find(b->st, sp->name);
    if (!t) { sl_add(&b->missing, ", ", "%s", sp->name); return; }
    if (t->dtype != DSV4_ST_I32 && t->dtype != DSV4_ST_I64) {
        sl_add(&b->malformed, "; ", "%s: dtype %s, expected I64 or I32", t->name,
               dsv4_st_dtype_name(t->dtype));
        return;
    }
    const int64_t V = sp->shape[0], K = sp->shape[1];
    if (!shape_is(t, 2, V, K)) { bad_shape(b, t, 2, V, K); return; }
    if (b->headers_only || !sp->ids) return;
    const int E = b->m->cfg.n_routed_experts;
    int32_t *ids = dsv4_model_alloc(b->m, (size_t)(V * K) * sizeof(int32_t));
    int64_t *seen = calloc((size_t)E, sizeof(int64_t)); /* (E) last row + 1 that named e */
    if (!ids || !seen) { free(seen); b->oom = 1; return; }
    const uint8_t *p = t->data;
    for (int64_t r = 0; r < V; r++) {
        for (int64_t k = 0; k < K; k++) {
            int64_t e;
            if (t->dtype == DSV4_ST_I64) {
                memcpy(&e, p + 8 * (r * K + k), 8);
            } else {
                int32_t e32;
                memcpy(&e32, p + 4 * (r * K + k), 4);
                e = e32;
            }
            if (e < 0 || e >= E) {
                sl_add(&b->malformed, "; ", "%s: row %lld entry %lld is %lld, outside [0, %d)",
                       t->name, (long long)r, (long long)k, (long long)e, E);
                free(seen);
                return;
            }
            if (seen[e] == r + 1) {
                sl_add(&b->malformed, "; ", "%s: row %lld names expert %lld twice (needs %lld "
                       "distinct experts)", t->name, (long long)r, (long long)e, (long long)K);
                free(seen);
                return;
            }
            seen[e] = r + 1;
            ids[r * K + k] = (int32_t)e;
        }
    }
    free(seen);
    *sp->ids = ids;
}

/* ---- extra tensors ------------------------------------------------------------------ */

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Open-addressing set of the inventory names (weights; scales are derived). */
typedef struct nameset { int *slot; uint64_t mask; const dsv4_tensor_spec *specs; } nameset;

static int ns_build(nameset *ns, const dsv4_tensor_spec *s, int n) {
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n) cap *= 2;
    ns->slot = malloc(cap * sizeof(int));
    if (!ns->slot) return -1;
    for (uint64_t i = 0; i < cap; i++) ns->slot[i] = -1;
    ns->mask = cap - 1;
    ns->specs = s;
    for (int i = 0; i < n; i++) {
        uint64_t h = name_hash(s[i].name) & ns->mask;
        while (ns->slot[h] >= 0) h = (h + 1) & ns->mask;
        ns->slot[h] = i;
    }
    return 0;
}

static const dsv4_tensor_spec *ns_find(const nameset *ns, const char *name) {
    uint64_t h = name_hash(name) & ns->mask;
    for (; ns->slot[h] >= 0; h = (h + 1) & ns->mask)
        if (!strcmp(ns->specs[ns->slot[h]].name, name)) return &ns->specs[ns->slot[h]];
    return NULL;
}

/* A file tensor is expected when the inventory names it, or when it is the `.scale` of an
 * inventory matrix stored quantized. */
static int expected(const nameset *ns, const dsv4_st_set *st, const char *name) {
    if (ns_find(ns, name)) return 1;
    size_t k = strlen(name);
    if (k > 6 && !strcmp(name + k - 6, ".scale") && k < 200) {
        char w[224];
        snprintf(w, sizeof w, "%.*s.weight", (int)(k - 6), name);
        const dsv4_tensor_spec *s = ns_find(ns, w);
        const dsv4_st_tensor *t = s ? dsv4_st_find(st, w) : NULL;
        return s && s->kind == DSV4_TK_MAT && t &&
               (t->dtype == DSV4_ST_F8_E4M3 || t->dtype == DSV4_ST_I8);
    }
    return 0;
}

/* ---- open -------------------------------------------------------------------------- */

int dsv4_model_load_ex(const char *dir, unsigned flags, struct dsv4_model **out, dsv4_err *err) {
    *out = NULL;
    struct dsv4_model *m = calloc(1, sizeof *m);
    if (!m) return dsv4_fail(err, DSV4_ERR_NOMEM, "model: out of memory");
    m->load_flags = flags;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = dsv4_config_load_text(path, &m->cfg, &m->config_json, &m->config_len, err);
    if (!rc) rc = dsv4_config_check_loadable(&m->cfg, err);
    if (rc) goto fail;
    /* beside it, the sampling defaults: a malformed file is reported when they are asked
     * for (dsv4_model_gen_config), not here */
    if (dsv4_gen_config_load(dir, m->cfg.vocab_size, &m->gen, &m->gen_err)) memset(&m->gen, 0, sizeof m->gen);
    rc = dsv4_st_open_dir(dir, &m->files, err);
    if (rc) goto fail;

    dsv4_tensor_spec *specs = NULL;
    int n = 0;
    rc = dsv4_inventory_build(&m->cfg, m, &specs, &n, err);
    if (rc) goto fail;

    binder b = {.m = m, .st = m->files, .headers_only = (flags & DSV4_LOAD_HEADERS_ONLY) != 0};
    for (int i = 0; i < n && !b.oom; i++) {
        switch (specs[i].kind) {
        case DSV4_TK_MAT: bind_mat(&b, &specs[i]); break;
        case DSV4_TK_VEC: bind_vec(&b, &specs[i]); break;
        case DSV4_TK_TID2EID: bind_tid2eid(&b, &specs[i]); break;
        }
    }
    nameset ns = {0};
    if (!b.oom && ns_build(&ns, specs, n)) b.oom = 1;
    if (!b.oom) {
        strlist extra = {0};
        for (int i = 0; i < dsv4_st_count(m->files); i++) {
            const char *name = dsv4_st_at(m->files, i)->name;
            if (!expected(&ns, m->files, name)) sl_add(&extra, ", ", "%s", name);
        }
        if (extra.count)
            sl_add(&b.warn, "\n", "%d unexpected tensor(s) ignored: %s", extra.count,
                   extra.p ? extra.p : "");
        free(extra.p);
        /* the fit check at open: weights alone beyond this machine's memory mean pages
         * are read from disk again on every token (the full check with the cache is
         * dsv4_mem_fit_model, once the engine options are known) */
        dsv4_dtype_bytes db;
        dsv4_count_bytes(m->files, &db);
        const uint64_t ram = dsv4_machine_ram_bytes();
        if (ram && db.total_bytes > ram)
            sl_add(&b.warn, "\n", "the weights (%.1f GB) exceed this machine's memory (%.1f GB): "
                   "the system will keep reading them from disk (see `dsv4 info --model`)",
                   (double)db.total_bytes / 1e9, (double)ram / 1e9);
    }
    free(ns.slot);
    m->specs = specs;
    m->n_specs = n;

    if (b.oom || b.missing.oom || b.malformed.oom || b.warn.oom) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "model %s: out of memory while binding tensors", dir);
    } else if (b.missing.count || b.malformed.count) {
        char miss[16], bad[16];
        snprintf(miss, sizeof miss, "%d", b.missing.count);
        snprintf(bad, sizeof bad, "%d", b.malformed.count);
        rc = dsv4_fail(err, DSV4_ERR_FORMAT, "model %s: %s%s%s%s%s%s%s", dir,
                       b.missing.count ? miss : "", b.missing.count ? " tensor(s) missing: " : "",
                       b.missing.count ? b.missing.p : "",
                       b.missing.count && b.malformed.count ? "; " : "",
                       b.malformed.count ? bad : "", b.malformed.count ? " malformed: " : "",
                       b.malformed.count ? b.malformed.p : "");
    }
    free(b.missing.p);
    free(b.malformed.p);
    m->warnings = b.warn.p;
    m->n_warnings = b.warn.count;
    if (rc) goto fail;
    {
        const char *cw = m->cfg.warnings, *bw = m->warnings ? m->warnings : "";
        size_t n = strlen(cw) + strlen(bw) + 2;
        m->all_warnings = malloc(n);
        if (!m->all_warnings) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "model: out of memory"); goto fail; }
        snprintf(m->all_warnings, n, "%s%s%s", cw, *cw && *bw ? "\n" : "", bw);
    }
    *out = m;
    return DSV4_OK;
fail:
    dsv4_model_close(m);
    return rc;
}

const struct dsv4_tensor_spec *dsv4_model_spec(const struct dsv4_model *m, const char *name) {
    for (int i = 0; i < m->n_specs; i++)
        if (!strcmp(m->specs[i].name, name)) return &m->specs[i];
    return NULL;
}

int dsv4_model_load(const char *dir, struct dsv4_model **out, dsv4_err *err) {
    return dsv4_model_load_ex(dir, 0, out, err);
}

int dsv4_model_open(const char *dir, dsv4_model **out, dsv4_err *err) {
    if (!dir || !out) return dsv4_fail(err, DSV4_ERR_ARG, "dsv4_model_open: NULL argument");
    return dsv4_model_load(dir, out, err);
}

dsv4_model_info dsv4_model_get_info(const dsv4_model *m) {
    dsv4_model_info i = {0};
    if (!m) return i;
    i.vocab_size = m->cfg.vocab_size;
    i.hidden_size = m->cfg.hidden_size;
    i.hc_mult = m->cfg.hc_mult;
    i.n_layers = m->cfg.num_hidden_layers;
    i.n_mtp = m->cfg.num_nextn_predict_layers;
    i.bos_token_id = m->cfg.bos_token_id;
    i.eos_token_id = m->cfg.eos_token_id;
    i.max_position_embeddings = m->cfg.max_position_embeddings;
    i.n_experts_per_tok = m->cfg.num_experts_per_tok;
    i.index_topk = m->cfg.index_topk;
    return i;
}

int dsv4_model_gen_config(const dsv4_model *m, dsv4_gen_config *out, dsv4_err *err) {
    memset(out, 0, sizeof *out);
    if (!m) return dsv4_fail(err, DSV4_ERR_ARG, "dsv4_model_gen_config: NULL model");
    if (m->gen_err.code) {
        if (err) *err = m->gen_err;
        return m->gen_err.code;
    }
    *out = m->gen;
    return DSV4_OK;
}

const char *dsv4_model_warnings(const dsv4_model *m) {
    return m && m->all_warnings ? m->all_warnings : "";
}
