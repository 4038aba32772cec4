/* test_model_inventory.c — the tensor inventory and parameter counts against the release.
 *
 * Expected numbers are the census of the released DeepSeek-V4-Flash checkpoint quoted in
 * spec/model.md §1/§2 (tensor counts by kind, 284.33 B + 6.61 B parameters, the index's
 * total_size), not values taken from the code.
 */
#include <stdint.h>

#include "model/config.h"
#include "model/generate.h"
#include "model/info.h"
#include "model/inventory.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model_tmp.h"
#include "test.h"

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static const dsv4_tensor_spec *find(const dsv4_tensor_spec *s, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s[i].name, name)) return &s[i];
    return NULL;
}

static void check_shape(const dsv4_tensor_spec *s, int n, const char *name, int64_t d0, int64_t d1) {
    const dsv4_tensor_spec *t = find(s, n, name);
    CHECK_MSG(t && t->shape[0] == d0 && t->shape[1] == d1 && t->ndim == (d1 ? 2 : 1),
              "%s: [%lld, %lld], want [%lld, %lld]", name, t ? (long long)t->shape[0] : -1LL,
              t ? (long long)t->shape[1] : -1LL, (long long)d0, (long long)d1);
}

static void flash(void) {
    char path[1024];
    dsv4_config cfg;
    dsv4_err err = {0};
    int rc = dsv4_config_load(test_shared("oracle/configs/deepseek_v4_flash_reference.json", path, sizeof path), &cfg, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    dsv4_tensor_spec *s = NULL;
    int n = 0;
    CHECK(dsv4_inventory_build(&cfg, NULL, &s, &n, &err) == 0);

    /* census under the release layout: a quantized matrix adds a .scale tensor */
    int64_t weight = 0, scale = 0, sc_routed = 0, sc_attn = 0, sc_indexer = 0, sc_shared = 0, sc_mtp = 0;
    int64_t ape = 0, sink = 0, hc6[6] = {0}, bias = 0, tid = 0, hc_head = 0;
    const char *hc_names[6] = {".hc_attn_fn", ".hc_attn_base", ".hc_attn_scale", ".hc_ffn_fn", ".hc_ffn_base", ".hc_ffn_scale"};
    uint64_t bytes = 0; /* data bytes in the release dtypes */
    for (int i = 0; i < n; i++) {
        const char *nm = s[i].name;
        const int64_t k = dsv4_spec_numel(&s[i]);
        if (ends_with(nm, ".weight")) weight++;
        if (s[i].kind == DSV4_TK_MAT && s[i].rel != DSV4_REL_BF16) {
            scale++;
            if (s[i].rel == DSV4_REL_FP4) {
                sc_routed++;
                bytes += (uint64_t)(k / 2 + s[i].shape[0] * (s[i].shape[1] / 32));
            } else {
                if (strstr(nm, ".attn.indexer.")) sc_indexer++;
                if (strstr(nm, ".attn.")) sc_attn++;
                else if (strstr(nm, ".shared_experts.")) sc_shared++;
                else if (strstr(nm, "_proj")) sc_mtp++;
                bytes += (uint64_t)(k + ((s[i].shape[0] + 127) / 128) * ((s[i].shape[1] + 127) / 128));
            }
        } else if (s[i].kind == DSV4_TK_TID2EID) {
            bytes += (uint64_t)k * 8;
        } else {
            bytes += (uint64_t)k * (dsv4_init_is_f32(s[i].init) ? 4 : 2);
        }
        if (ends_with(nm, ".ape")) ape++;
        if (ends_with(nm, ".attn_sink")) sink++;
        for (int h = 0; h < 6; h++) hc6[h] += ends_with(nm, hc_names[h]);
        if (ends_with(nm, ".gate.bias")) bias++;
        if (ends_with(nm, ".tid2eid")) tid++;
        if (strstr(nm, "hc_head_")) hc_head++;
    }
    CHECK_MSG(n + scale == 69187, "%lld tensors", (long long)(n + scale));
    CHECK(weight == 34600);
    CHECK(scale == 34167);
    CHECK(sc_routed == 33792 && sc_attn == 241 && sc_indexer == 21 && sc_shared == 132 && sc_mtp == 2);
    CHECK(ape == 62 && sink == 44 && bias == 41 && tid == 3 && hc_head == 6);
    for (int h = 0; h < 6; h++) CHECK(hc6[h] == 44);
    /* model.safetensors.index.json metadata.total_size of the release */
    CHECK_MSG(bytes == 159609485896ull, "release bytes %llu", (unsigned long long)bytes);

    /* shapes from the spec/model.md §2.2 table */
    check_shape(s, n, "embed.weight", 129280, 4096);
    check_shape(s, n, "hc_head_fn", 4, 16384);
    check_shape(s, n, "layers.0.hc_attn_fn", 24, 16384);
    check_shape(s, n, "layers.0.hc_ffn_scale", 3, 0);
    check_shape(s, n, "layers.7.attn.wq_b.weight", 32768, 1024);
    check_shape(s, n, "layers.7.attn.wo_a.weight", 8192, 4096);
    check_shape(s, n, "layers.7.attn.wo_b.weight", 4096, 8192);
    check_shape(s, n, "layers.2.attn.compressor.ape", 4, 1024);
    check_shape(s, n, "layers.3.attn.compressor.ape", 128, 512);
    check_shape(s, n, "layers.42.attn.indexer.wq_b.weight", 8192, 1024);
    check_shape(s, n, "layers.42.attn.indexer.compressor.ape", 4, 256);
    check_shape(s, n, "layers.42.attn.indexer.compressor.norm.weight", 128, 0);
    check_shape(s, n, "layers.2.ffn.gate.tid2eid", 129280, 6);
    check_shape(s, n, "layers.9.ffn.experts.255.w1.weight", 2048, 4096); /* stored [2048, 2048] I8 */
    check_shape(s, n, "layers.9.ffn.experts.0.w2.weight", 4096, 2048);
    check_shape(s, n, "mtp.0.e_proj.weight", 4096, 4096);
    check_shape(s, n, "mtp.0.ffn.gate.bias", 256, 0);
    CHECK(find(s, n, "layers.3.ffn.gate.tid2eid") == NULL && find(s, n, "layers.2.ffn.gate.bias") == NULL);
    CHECK(find(s, n, "layers.3.attn.indexer.wq_b.weight") == NULL && find(s, n, "layers.1.attn.compressor.ape") == NULL);
    CHECK(find(s, n, "mtp.0.attn.compressor.ape") == NULL && find(s, n, "mtp.0.ffn.gate.tid2eid") == NULL);
    free(s);

    /* parameters: 284.33 B main + 6.61 B MTP */
    dsv4_param_counts pc;
    CHECK(dsv4_count_params(&cfg, &pc, &err) == 0);
    CHECK_NEAR((double)pc.main / 1e9, 284.33, 0.005);
    CHECK_NEAR((double)pc.mtp / 1e9, 6.61, 0.005);
    CHECK(pc.total == pc.main + pc.mtp);
    CHECK(pc.embed == 129280LL * 4096 && pc.head == 129280LL * 4096);
    /* an expert is 3 x 2048 x 4096; 256 per layer; 6 of them active */
    const int64_t expert = 3LL * 2048 * 4096;
    CHECK(pc.routed_main == 43 * 256 * expert && pc.routed_mtp == 256 * expert);
    CHECK(pc.active_main == pc.main - 43 * 250 * expert);
    CHECK(pc.active_mtp == pc.mtp - 250 * expert);
    printf("Flash: %lld params (%lld main, %lld MTP), %lld active per token in the main model\n",
           (long long)pc.total, (long long)pc.main, (long long)pc.mtp, (long long)pc.active_main);

    CHECK(dsv4_layer_kind_of(0) == DSV4_LAYER_SWA && dsv4_layer_kind_of(4) == DSV4_LAYER_CSA);
    CHECK(dsv4_layer_kind_of(128) == DSV4_LAYER_HCA && dsv4_layer_kind_of(16) == DSV4_LAYER_HCA);
    CHECK(!strcmp(dsv4_layer_kind_name(DSV4_LAYER_HCA), "HCA"));
}

/* Byte counts of a generated model add up to its file. */
static void bytes_of_generated(void) {
    char path[1024], dir[256];
    dsv4_config cfg;
    dsv4_err err = {0};
    if (dsv4_config_load(test_shared("oracle/configs/tiny.json", path, sizeof path), &cfg, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    CHECK(tmp_dir(dir, sizeof dir, "inv") != NULL);
    dsv4_gen_opts o = {.seed = 5, .dtype = DSV4_GEN_FP8};
    CHECK(dsv4_gen_model(&cfg, &o, dir, &err) == 0);
    struct dsv4_model *m = NULL;
    CHECK(dsv4_model_load_ex(dir, DSV4_LOAD_HEADERS_ONLY, &m, &err) == 0);
    if (m) {
        dsv4_dtype_bytes db;
        dsv4_count_bytes(m->files, &db);
        uint64_t fsize = 0;
        CHECK(dsv4_gen_file_size(&cfg, &o, &fsize, &err) == 0);
        CHECK(db.file_bytes == fsize && db.n_files == 1);
        CHECK(db.total_bytes < fsize && db.total_bytes > fsize - 65536);
        /* tiny: 6 + 1 blocks x 8 experts x 3 packed FP4 matrices, each with a scale */
        CHECK(db.tensors[DSV4_ST_I8] == 7 * 8 * 3);
        CHECK(db.bytes[DSV4_ST_I8] == 7 * 8 * 3 * (64 * 128 / 2));
        CHECK(db.tensors[DSV4_ST_I64] == 3 && db.bytes[DSV4_ST_I64] == 3 * 512 * 2 * 8);
        int64_t sum = 0;
        for (int t = 0; t < DSV4_ST_N_DTYPES; t++) sum += db.tensors[t];
        CHECK(sum == db.total_tensors && db.total_tensors == dsv4_st_count(m->files));
        /* the headers-only model has no vectors but all matrices */
        CHECK(m->layers[0].attn_norm == NULL && m->layers[5].w2[7].fmt == DSV4_WF_FP4);
        dsv4_model_close(m);
    }
    tmp_rm(dir);
}

int main(void) {
    flash();
    bytes_of_generated();
    return test_report();
}
