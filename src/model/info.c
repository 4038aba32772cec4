/* info.c — parameter and byte counts for `dsv4 info` (see info.h). */
#include "model/info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp4_lanes.h"
#include "model/inventory.h"
#include "model/model.h"
#include "model/safetensors.h"

const char *dsv4_layer_kind_name(dsv4_layer_kind k) {
    switch (k) {
    case DSV4_LAYER_SWA: return "SWA";
    case DSV4_LAYER_CSA: return "CSA";
    default: return "HCA";
    }
}

int dsv4_count_params(const dsv4_config *c, dsv4_param_counts *pc, dsv4_err *err) {
    memset(pc, 0, sizeof *pc);
    dsv4_tensor_spec *s = NULL;
    int n = 0;
    int rc = dsv4_inventory_build(c, NULL, &s, &n, err);
    if (rc) return rc;
    const int L = c->num_hidden_layers;
    const int E = c->n_routed_experts, K = c->num_experts_per_tok;
    int64_t routed[DSV4_MAX_LAYERS] = {0}; /* routed-expert elements per layer */
    for (int i = 0; i < n; i++) {
        /* tid2eid is an index table, not a parameter */
        if (s[i].kind == DSV4_TK_TID2EID) continue;
        const int64_t k = dsv4_spec_numel(&s[i]);
        const int l = s[i].layer;
        if (l >= L) pc->mtp += k;
        else pc->main += k;
        if (l >= 0) pc->layer[l] += k;
        if (s[i].expert >= 0) routed[l] += k;
        if (!strcmp(s[i].name, "embed.weight")) pc->embed = k;
        if (!strcmp(s[i].name, "head.weight")) pc->head = k;
    }
    free(s);
    pc->active_main = pc->main;
    pc->active_mtp = pc->mtp;
    for (int l = 0; l < dsv4_cfg_n_total_layers(c); l++) {
        /* every expert has the same size, so K of E of them are active */
        const int64_t unused = E > 0 ? routed[l] / E * (E - K) : 0;
        pc->layer_active[l] = pc->layer[l] - unused;
        if (l >= L) {
            pc->routed_mtp += routed[l];
            pc->active_mtp -= unused;
        } else {
            pc->routed_main += routed[l];
            pc->active_main -= unused;
        }
    }
    pc->total = pc->main + pc->mtp;
    return DSV4_OK;
}

void dsv4_count_bytes(const dsv4_st_set *st, dsv4_dtype_bytes *out) {
    memset(out, 0, sizeof *out);
    const int n = dsv4_st_count(st);
    for (int i = 0; i < n; i++) {
        const dsv4_st_tensor *t = dsv4_st_at(st, i);
        if ((int)t->dtype < 0 || t->dtype >= DSV4_ST_N_DTYPES) continue;
        out->bytes[t->dtype] += t->nbytes;
        out->tensors[t->dtype]++;
        out->total_bytes += t->nbytes;
        out->total_tensors++;
    }
    out->n_files = dsv4_st_n_files(st);
    for (int f = 0; f < out->n_files; f++) out->file_bytes += dsv4_st_file_size(st, f);
}

uint64_t dsv4_count_routed_bytes(const dsv4_st_set *st) {
    uint64_t routed = 0;
    const int n = dsv4_st_count(st);
    for (int i = 0; i < n; i++) {
        const dsv4_st_tensor *t = dsv4_st_at(st, i);
        if (strstr(t->name, ".ffn.experts.")) routed += t->nbytes;
    }
    return routed;
}

static void add_bytes(dsv4_dtype_bytes *out, dsv4_st_dtype t, uint64_t bytes) {
    out->bytes[t] += bytes;
    out->tensors[t]++;
    out->total_bytes += bytes;
    out->total_tensors++;
}

int dsv4_count_release_bytes(const dsv4_config *cfg, dsv4_dtype_bytes *out,
                             uint64_t *routed_bytes, dsv4_err *err) {
    memset(out, 0, sizeof *out);
    *routed_bytes = 0;
    dsv4_tensor_spec *specs = NULL;
    int n = 0;
    int rc = dsv4_inventory_build(cfg, NULL, &specs, &n, err);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        const dsv4_tensor_spec *s = &specs[i];
        const uint64_t numel = (uint64_t)dsv4_spec_numel(s);
        const uint64_t before = out->total_bytes;
        if (s->kind == DSV4_TK_TID2EID) {
            add_bytes(out, DSV4_ST_I64, numel * 8);
        } else if (s->kind == DSV4_TK_VEC) {
            const int f32 = dsv4_init_is_f32(s->init);
            add_bytes(out, f32 ? DSV4_ST_F32 : DSV4_ST_BF16, numel * (f32 ? 4 : 2));
        } else if (s->rel == DSV4_REL_FP8) {
            add_bytes(out, DSV4_ST_F8_E4M3, numel);
            add_bytes(out, DSV4_ST_F8_E8M0,
                      (uint64_t)((s->shape[0] + 127) / 128) * (uint64_t)((s->shape[1] + 127) / 128));
        } else if (s->rel == DSV4_REL_FP4) {
            add_bytes(out, DSV4_ST_I8, numel / 2);           /* two e2m1 values a byte */
            add_bytes(out, DSV4_ST_F8_E8M0, numel / 32);     /* one scale per 32 */
        } else {
            add_bytes(out, DSV4_ST_BF16, numel * 2);
        }
        if (s->expert >= 0) *routed_bytes += out->total_bytes - before;
    }
    free(specs);
    return DSV4_OK;
}

void dsv4_model_fp4_census(const struct dsv4_model *m, dsv4_fp4_census *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < m->n_specs; i++) {
        const dsv4_tensor_spec *sp = &m->specs[i];
        const dsv4_st_tensor *t = sp->kind == DSV4_TK_MAT ? dsv4_st_find(m->files, sp->name) : NULL;
        if (!t || t->dtype != DSV4_ST_I8) continue; /* packed FP4 is stored I8 */
        out->fp4++;
        if (sp->shape[1] % DSV4_FP4L_COLS == 0) out->lanes_ok++;
        else if (!out->first_natural[0]) snprintf(out->first_natural, sizeof out->first_natural, "%s", sp->name);
    }
}
