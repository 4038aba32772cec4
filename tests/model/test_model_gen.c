/* test_model_gen.c — generator -> loader round trip, and the golden checkpoints load.
 *
 * For every tensor of generated bf16 and fp8 models the loaded, dequantized values
 * (dsv4_mat_row through the codec tables) must equal bit for bit the values the generator
 * intended (computed arithmetically when it chose each code). Independent sanity checks:
 * magnitudes like the oracle's models, FP8 block scales that differ between blocks (so a
 * wrong scale index would show), determinism by seed. The golden models must load with
 * every tensor bound to the file data of its own name.
 */
#include <math.h>
#include <stdint.h>

#include "kernels/codec.h"
#include "kernels/linear.h"
#include "model/config.h"
#include "model/generate.h"
#include "model/inventory.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model_tmp.h"
#include "test.h"

static int load_cfg(const char *rel, dsv4_config *cfg) {
    char path[1024];
    dsv4_err err = {0};
    int rc = dsv4_config_load(test_shared(rel, path, sizeof path), cfg, &err);
    CHECK_MSG(rc == 0, "%s: %s", path, err.msg);
    return rc;
}

/* Expected weight format of a matrix under a generator dtype. */
static dsv4_wfmt want_fmt(const dsv4_tensor_spec *s, dsv4_gen_dtype g) {
    if (g == DSV4_GEN_BF16) return DSV4_WF_BF16;
    return s->rel == DSV4_REL_FP8 ? DSV4_WF_FP8 : s->rel == DSV4_REL_FP4 ? DSV4_WF_FP4 : DSV4_WF_BF16;
}

/* Round trip of one config in one format. */
static void roundtrip(const char *cfg_rel, dsv4_gen_dtype g, uint64_t seed) {
    dsv4_config cfg;
    if (load_cfg(cfg_rel, &cfg)) return;
    char dir[256];
    CHECK(tmp_dir(dir, sizeof dir, "gen") != NULL);
    dsv4_gen_opts o = {.seed = seed, .dtype = g};
    dsv4_err err = {0};
    int rc = dsv4_gen_model(&cfg, &o, dir, &err);
    CHECK_MSG(rc == 0, "gen: %s", err.msg);
    struct dsv4_model *m = NULL;
    rc = rc ? rc : dsv4_model_load(dir, &m, &err);
    CHECK_MSG(rc == 0, "load: %s", err.msg);
    if (rc) { tmp_rm(dir); return; }
    CHECK_MSG(m->n_warnings == 0, "warnings: %s", m->warnings);
    /* the written config carries the quantization fields of the format */
    CHECK(m->cfg.has_quant_config == (g == DSV4_GEN_FP8));
    CHECK(!strcmp(m->cfg.expert_dtype, g == DSV4_GEN_FP8 ? "fp4" : ""));

    int n_mat = 0, n_vec = 0, n_ids = 0, bad = 0, varied_scales = 0;
    float *row = NULL;
    for (int i = 0; i < m->n_specs; i++) {
        const dsv4_tensor_spec *s = &m->specs[i];
        float *vals = NULL;
        int32_t *ids = NULL;
        int64_t n = 0;
        rc = dsv4_gen_expected(&cfg, &o, s->name, &vals, &ids, &n, &err);
        CHECK_MSG(rc == 0, "expected %s: %s", s->name, err.msg);
        if (rc) continue;
        CHECK(n == dsv4_spec_numel(s));
        if (s->kind == DSV4_TK_MAT) {
            const dsv4_mat *w = s->mat;
            n_mat++;
            CHECK_MSG(w->fmt == want_fmt(s, g), "%s: format %d, want %d", s->name, w->fmt, want_fmt(s, g));
            CHECK(w->rows == s->shape[0] && w->cols == s->shape[1]);
            row = realloc(row, (size_t)w->cols * sizeof(float));
            int64_t diff = 0;
            double ss = 0;
            for (int64_t r = 0; r < w->rows; r++) {
                dsv4_mat_row(w, r, row);
                for (int64_t c = 0; c < w->cols; c++) ss += (double)row[c] * row[c];
                if (memcmp(row, vals + r * w->cols, (size_t)w->cols * sizeof(float))) diff++;
            }
            if (diff) bad++;
            CHECK_MSG(diff == 0, "%s: %lld of %lld rows differ from the generator's values", s->name,
                      (long long)diff, (long long)w->rows);
            /* magnitudes: embed N(0,1), every other matrix N(0, 1/in); FP4 is coarse */
            const double want = s->init == DSV4_INIT_EMBED ? 1.0 : 1.0 / sqrt((double)w->cols);
            const double rms = sqrt(ss / (double)n);
            if (n >= 4096)
                CHECK_MSG(fabs(rms / want - 1.0) < (w->fmt == DSV4_WF_FP4 ? 0.15 : 0.05),
                          "%s: rms %g, want about %g", s->name, rms, want);
            if (w->fmt == DSV4_WF_FP8 && !w->scale_is_f32) {
                const int64_t ns = ((w->rows + 127) / 128) * ((w->cols + 127) / 128);
                const uint8_t *sc = w->scale;
                for (int64_t k = 1; k < ns; k++)
                    if (sc[k] != sc[0]) { varied_scales++; break; }
                for (int64_t k = 0; k < ns; k++) CHECK(sc[k] >= 3 && sc[k] <= 246);
            }
        } else if (s->kind == DSV4_TK_VEC) {
            n_vec++;
            const float *v = *s->vec;
            CHECK_MSG(v && !memcmp(v, vals, (size_t)n * sizeof(float)), "%s differs", s->name);
            if (v && s->init == DSV4_INIT_HC_SCALE)
                for (int64_t k = 0; k < n; k++) CHECK(v[k] >= 0.5f && v[k] <= 1.5f);
            if (v && s->init == DSV4_INIT_NORM && n >= 128) {
                double mean = 0;
                for (int64_t k = 0; k < n; k++) mean += v[k];
                CHECK_NEAR(mean / (double)n, 1.0, 0.05);
            }
        } else {
            n_ids++;
            const int32_t *t = *s->ids;
            CHECK_MSG(t && !memcmp(t, ids, (size_t)n * sizeof(int32_t)), "%s differs", s->name);
            /* K distinct experts in [0, E) per row, independently of the loader's check */
            const int64_t K = s->shape[1];
            int64_t rows_bad = 0;
            for (int64_t r = 0; t && r < s->shape[0]; r++)
                for (int64_t a = 0; a < K; a++) {
                    if (t[r * K + a] < 0 || t[r * K + a] >= cfg.n_routed_experts) rows_bad++;
                    for (int64_t b = a + 1; b < K; b++) rows_bad += t[r * K + a] == t[r * K + b];
                }
            CHECK(rows_bad == 0);
        }
        free(vals);
        free(ids);
    }
    free(row);
    CHECK(n_mat > 0 && n_vec > 0 && n_ids == cfg.num_hash_layers);
    CHECK_MSG(bad == 0, "%d matrices differ", bad);
    if (g == DSV4_GEN_FP8) CHECK_MSG(varied_scales > 0, "no FP8 matrix has two different block scales");
    printf("%s %s: %d matrices, %d vectors, %d tid2eid round trip exactly\n", cfg_rel,
           g == DSV4_GEN_FP8 ? "fp8" : "bf16", n_mat, n_vec, n_ids);
    dsv4_model_close(m);
    tmp_rm(dir);
}

/* Same seed, same bytes; another seed, other bytes. */
static void determinism(void) {
    dsv4_config cfg;
    if (load_cfg("oracle/configs/tiny.json", &cfg)) return;
    char d1[256], d2[256], d3[256];
    CHECK(tmp_dir(d1, sizeof d1, "det") && tmp_dir(d2, sizeof d2, "det") && tmp_dir(d3, sizeof d3, "det"));
    dsv4_err err = {0};
    dsv4_gen_opts a = {.seed = 7, .dtype = DSV4_GEN_FP8}, b = {.seed = 8, .dtype = DSV4_GEN_FP8};
    CHECK(dsv4_gen_model(&cfg, &a, d1, &err) == 0);
    CHECK(dsv4_gen_model(&cfg, &a, d2, &err) == 0);
    CHECK(dsv4_gen_model(&cfg, &b, d3, &err) == 0);
    char p[512];
    size_t n1 = 0, n2 = 0, n3 = 0;
    snprintf(p, sizeof p, "%s/model.safetensors", d1);
    char *f1 = read_all(p, &n1);
    snprintf(p, sizeof p, "%s/model.safetensors", d2);
    char *f2 = read_all(p, &n2);
    snprintf(p, sizeof p, "%s/model.safetensors", d3);
    char *f3 = read_all(p, &n3);
    CHECK(f1 && f2 && f3 && n1 > 0);
    uint64_t predicted = 0;
    CHECK(dsv4_gen_file_size(&cfg, &a, &predicted, &err) == 0 && predicted == n1);
    CHECK(f1 && f2 && n1 == n2 && !memcmp(f1, f2, n1));
    CHECK(f1 && f3 && n1 == n3 && memcmp(f1, f3, n1) != 0);
    free(f1);
    free(f2);
    free(f3);
    tmp_rm(d1);
    tmp_rm(d2);
    tmp_rm(d3);
}

/* A golden checkpoint loads cleanly and every entry is bound to its own file tensor. */
static void golden(const char *rel) {
    char dir[1024];
    test_shared(rel, dir, sizeof dir);
    struct dsv4_model *m = NULL;
    dsv4_err err = {0};
    int rc = dsv4_model_load(dir, &m, &err);
    CHECK_MSG(rc == 0, "%s: %s", dir, err.msg);
    if (rc) return;
    CHECK_MSG(m->n_warnings == 0, "%s: %s", dir, m->warnings);
    const int hidden = m->cfg.hidden_size;
    int bound = 0;
    for (int i = 0; i < m->n_specs; i++) {
        const dsv4_tensor_spec *s = &m->specs[i];
        const dsv4_st_tensor *t = dsv4_st_find(m->files, s->name);
        CHECK_MSG(t != NULL, "%s not in the file", s->name);
        if (!t) continue;
        if (s->kind == DSV4_TK_MAT) {
            CHECK_MSG(s->mat->w == t->data && s->mat->fmt == DSV4_WF_BF16, "%s", s->name);
        } else if (s->kind == DSV4_TK_VEC) {
            const float *v = *s->vec;
            int same = v != NULL;
            for (int64_t k = 0; same && k < dsv4_spec_numel(s); k++) {
                float f;
                if (t->dtype == DSV4_ST_F32) memcpy(&f, t->data + 4 * k, 4);
                else {
                    uint16_t h;
                    memcpy(&h, t->data + 2 * k, 2);
                    f = dsv4_bits_to_f32((uint32_t)h << 16); /* golden vectors are BF16 or F32 */
                }
                same = !memcmp(&f, &v[k], 4);
            }
            CHECK_MSG(same, "%s: converted values differ from the file", s->name);
        } else {
            const int32_t *ids = *s->ids;
            int same = ids != NULL && t->dtype == DSV4_ST_I64;
            for (int64_t k = 0; same && k < dsv4_spec_numel(s); k++) {
                int64_t e;
                memcpy(&e, t->data + 8 * k, 8);
                same = e == ids[k];
            }
            CHECK_MSG(same, "%s: ids differ from the file", s->name);
        }
        bound++;
    }
    /* every file tensor is an inventory entry (BF16 checkpoints have no scales) */
    CHECK(bound == dsv4_st_count(m->files));
    CHECK(m->layers[0].tid2eid && !m->layers[0].gate_bias);
    CHECK(!m->layers[3].tid2eid && m->layers[3].gate_bias);
    CHECK(m->mtp[0].e_proj.w && m->mtp[0].hc_head_fn && m->mtp[0].layer_id == m->cfg.num_hidden_layers);
    CHECK(m->layers[2].idx_cmp.ape && !m->layers[3].idx_cmp.ape && m->layers[3].cmp.ape);
    dsv4_model_info info = dsv4_model_get_info(m);
    CHECK(info.vocab_size == m->cfg.vocab_size && info.n_layers == m->cfg.num_hidden_layers && info.n_mtp == 1);
    printf("%s: %d tensors bound\n", rel, bound);
    dsv4_model_close(m);

    /* headers only: every matrix bound, no data read */
    rc = dsv4_model_load_ex(dir, DSV4_LOAD_HEADERS_ONLY, &m, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK(m->layers[1].wq_a.w != NULL && m->layers[1].attn_norm == NULL && m->layers[0].tid2eid == NULL);
        dsv4_model_close(m);
    }
    /* the public API */
    dsv4_model *pm = NULL;
    CHECK(dsv4_model_open(dir, &pm, &err) == 0);
    CHECK(pm && dsv4_model_get_info(pm).hidden_size == hidden);
    dsv4_model_close(pm);
}

int main(void) {
    roundtrip("oracle/configs/tiny.json", DSV4_GEN_BF16, 1);
    roundtrip("oracle/configs/tiny.json", DSV4_GEN_FP8, 2);
    roundtrip("oracle/configs/small_w128.json", DSV4_GEN_FP8, 3);
    determinism();
    golden("golden/tiny_s0/model");
    golden("golden/small_s1/model");
    return test_report();
}
