/* inventory.c — the official tensor list of a config (spec/model.md §2.2). */
#include "model/inventory.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
#include "util/err.h"

typedef struct inv {
    dsv4_tensor_spec *s;
    int n, cap;
    int oom;
    struct dsv4_model *m;
} inv;

static dsv4_tensor_spec *add(inv *v, dsv4_tkind kind, dsv4_tinit init, dsv4_release_fmt rel,
                             int layer, int64_t d0, int64_t d1, const char *fmt, ...)
    DSV4_PRINTF(8, 9);
static dsv4_tensor_spec *add(inv *v, dsv4_tkind kind, dsv4_tinit init, dsv4_release_fmt rel,
                             int layer, int64_t d0, int64_t d1, const char *fmt, ...) {
    if (v->oom) return NULL;
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 512;
        dsv4_tensor_spec *s = realloc(v->s, (size_t)cap * sizeof *s);
        if (!s) { v->oom = 1; return NULL; }
        v->s = s;
        v->cap = cap;
    }
    dsv4_tensor_spec *t = &v->s[v->n++];
    *t = (dsv4_tensor_spec){0};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->kind = kind;
    t->init = init;
    t->rel = rel;
    t->layer = layer;
    t->expert = -1;
    t->ndim = d1 > 0 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1 > 0 ? d1 : 0;
    return t;
}

/* Matrix `<p>.weight` [out, in]; expert = routed expert index or -1. */
static void mat_e(inv *v, dsv4_mat *dst, dsv4_tinit init, dsv4_release_fmt rel, int layer,
                  int64_t out, int64_t in, const char *p, int expert) {
    dsv4_tensor_spec *t = add(v, DSV4_TK_MAT, init, rel, layer, out, in, "%s.weight", p);
    if (t) {
        t->mat = dst;
        t->expert = expert;
    }
}

static void mat(inv *v, dsv4_mat *dst, dsv4_tinit init, dsv4_release_fmt rel, int layer,
                int64_t out, int64_t in, const char *p) {
    mat_e(v, dst, init, rel, layer, out, in, p, -1);
}

static void vec(inv *v, const float **dst, dsv4_tinit init, int layer, int64_t d0, int64_t d1,
                const char *name) {
    dsv4_tensor_spec *t = add(v, DSV4_TK_VEC, init, DSV4_REL_BF16, layer, d0, d1, "%s", name);
    if (t) t->vec = dst;
}

#define NAME(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)

static void compressor(inv *v, dsv4_compressor_w *c, int layer, const char *p, int ratio,
                       int64_t d, int64_t D) {
    char nm[96];
    const int64_t coff = dsv4_cfg_coff(ratio);
    vec(v, c ? &c->ape : NULL, DSV4_INIT_APE, layer, ratio, coff * d, NAME("%s.ape", p));
    mat(v, c ? &c->wkv : NULL, DSV4_INIT_LINEAR, DSV4_REL_BF16, layer, coff * d, D, NAME("%s.wkv", p));
    mat(v, c ? &c->wgate : NULL, DSV4_INIT_LINEAR, DSV4_REL_BF16, layer, coff * d, D, NAME("%s.wgate", p));
    vec(v, c ? &c->norm : NULL, DSV4_INIT_NORM, layer, d, 0, NAME("%s.norm.weight", p));
}

/* One block (main layer or MTP) under prefix p ("layers.L" / "mtp.j"). */
static void block(inv *v, const dsv4_config *c, dsv4_block_w *b, int layer, const char *p) {
    char nm[96];
    const int64_t D = c->hidden_size, hc = c->hc_mult, mix = dsv4_cfg_mix(c);
    const int64_t H = c->num_attention_heads, hd = c->head_dim, G = c->o_groups;
    const int64_t E = c->n_routed_experts, I = c->moe_intermediate_size;
    const int ratio = c->compress_ratios[layer];
#define B(field) (b ? &b->field : NULL)
    if (b) {
        b->layer_id = layer;
        b->ratio = ratio;
    }
    vec(v, B(attn_norm), DSV4_INIT_NORM, layer, D, 0, NAME("%s.attn_norm.weight", p));
    vec(v, B(ffn_norm), DSV4_INIT_NORM, layer, D, 0, NAME("%s.ffn_norm.weight", p));
    vec(v, B(hc_attn_fn), DSV4_INIT_HC_FN, layer, mix, hc * D, NAME("%s.hc_attn_fn", p));
    vec(v, B(hc_attn_base), DSV4_INIT_HC_BASE, layer, mix, 0, NAME("%s.hc_attn_base", p));
    vec(v, B(hc_attn_scale), DSV4_INIT_HC_SCALE, layer, 3, 0, NAME("%s.hc_attn_scale", p));
    vec(v, B(hc_ffn_fn), DSV4_INIT_HC_FN, layer, mix, hc * D, NAME("%s.hc_ffn_fn", p));
    vec(v, B(hc_ffn_base), DSV4_INIT_HC_BASE, layer, mix, 0, NAME("%s.hc_ffn_base", p));
    vec(v, B(hc_ffn_scale), DSV4_INIT_HC_SCALE, layer, 3, 0, NAME("%s.hc_ffn_scale", p));

    vec(v, B(attn_sink), DSV4_INIT_SINK, layer, H, 0, NAME("%s.attn.attn_sink", p));
    mat(v, B(wq_a), DSV4_INIT_LINEAR, DSV4_REL_FP8, layer, c->q_lora_rank, D, NAME("%s.attn.wq_a", p));
    vec(v, B(q_norm), DSV4_INIT_NORM, layer, c->q_lora_rank, 0, NAME("%s.attn.q_norm.weight", p));
    mat(v, B(wq_b), DSV4_INIT_LINEAR, DSV4_REL_FP8, layer, H * hd, c->q_lora_rank, NAME("%s.attn.wq_b", p));
    mat(v, B(wkv), DSV4_INIT_LINEAR, DSV4_REL_FP8, layer, hd, D, NAME("%s.attn.wkv", p));
    vec(v, B(kv_norm), DSV4_INIT_NORM, layer, hd, 0, NAME("%s.attn.kv_norm.weight", p));
    mat(v, B(wo_a), DSV4_INIT_LINEAR, DSV4_REL_FP8, layer, G * c->o_lora_rank, H * hd / G,
        NAME("%s.attn.wo_a", p));
    mat(v, B(wo_b), DSV4_INIT_LINEAR, DSV4_REL_FP8, layer, D, G * c->o_lora_rank, NAME("%s.attn.wo_b", p));
    if (ratio > 0) {
        char cp[96];
        snprintf(cp, sizeof cp, "%s.attn.compressor", p);
        compressor(v, B(cmp), layer, cp, ratio, hd, D);
    }
    if (ratio == 4) {
        const int64_t nI = c->index_n_heads, dI = c->index_head_dim;
        mat(v, B(idx_wq_b), DSV4_INIT_LINEAR, DSV4_REL_FP8, layer, nI * dI, c->q_lora_rank,
            NAME("%s.attn.indexer.wq_b", p));
        mat(v, B(idx_weights_proj), DSV4_INIT_LINEAR, DSV4_REL_BF16, layer, nI, D,
            NAME("%s.attn.indexer.weights_proj", p));
        char cp[96];
        snprintf(cp, sizeof cp, "%s.attn.indexer.compressor", p);
        compressor(v, B(idx_cmp), layer, cp, 4, dI, D);
    }

    mat(v, B(gate), DSV4_INIT_LINEAR, DSV4_REL_BF16, layer, E, D, NAME("%s.ffn.gate", p));
    if (layer < c->num_hash_layers) {
        dsv4_tensor_spec *t = add(v, DSV4_TK_TID2EID, DSV4_INIT_TID2EID, DSV4_REL_BF16, layer,
                                  c->vocab_size, c->num_experts_per_tok, "%s.ffn.gate.tid2eid", p);
        if (t) t->ids = B(tid2eid);
    } else {
        vec(v, B(gate_bias), DSV4_INIT_GATE_BIAS, layer, E, 0, NAME("%s.ffn.gate.bias", p));
    }
    if (b) {
        b->w1 = dsv4_model_alloc(v->m, (size_t)E * sizeof(dsv4_mat));
        b->w2 = dsv4_model_alloc(v->m, (size_t)E * sizeof(dsv4_mat));
        b->w3 = dsv4_model_alloc(v->m, (size_t)E * sizeof(dsv4_mat));
        if (!b->w1 || !b->w2 || !b->w3) { v->oom = 1; return; }
    }
    for (int64_t e = 0; e < E; e++) {
        mat_e(v, b ? &b->w1[e] : NULL, DSV4_INIT_LINEAR, DSV4_REL_FP4, layer, I, D,
              NAME("%s.ffn.experts.%lld.w1", p, (long long)e), (int)e);
        mat_e(v, b ? &b->w2[e] : NULL, DSV4_INIT_LINEAR, DSV4_REL_FP4, layer, D, I,
              NAME("%s.ffn.experts.%lld.w2", p, (long long)e), (int)e);
        mat_e(v, b ? &b->w3[e] : NULL, DSV4_INIT_LINEAR, DSV4_REL_FP4, layer, I, D,
              NAME("%s.ffn.experts.%lld.w3", p, (long long)e), (int)e);
        if (v->oom) return;
    }
    mat(v, B(sh_w1), DSV4_INIT_LINEAR, DSV4_REL_FP8, layer, I, D, NAME("%s.ffn.shared_experts.w1", p));
    mat(v, B(sh_w2), DSV4_INIT_LINEAR, DSV4_REL_FP8, layer, D, I, NAME("%s.ffn.shared_experts.w2", p));
    mat(v, B(sh_w3), DSV4_INIT_LINEAR, DSV4_REL_FP8, layer, I, D, NAME("%s.ffn.shared_experts.w3", p));
#undef B
}

int dsv4_inventory_build(const dsv4_config *c, struct dsv4_model *m, dsv4_tensor_spec **out,
                         int *n_out, dsv4_err *err) {
    inv v = {.m = m};
    char nm[96];
    const int L = c->num_hidden_layers, n_mtp = c->num_nextn_predict_layers;
    const int64_t V = c->vocab_size, D = c->hidden_size, hc = c->hc_mult;
    *out = NULL;
    *n_out = 0;
    if (m) {
        m->layers = dsv4_model_alloc(m, (size_t)(L > 0 ? L : 1) * sizeof(dsv4_block_w));
        m->mtp = dsv4_model_alloc(m, (size_t)(n_mtp > 0 ? n_mtp : 1) * sizeof(dsv4_block_w));
        if (!m->layers || !m->mtp) return dsv4_fail(err, DSV4_ERR_NOMEM, "model: out of memory");
    }
    mat(&v, m ? &m->embed : NULL, DSV4_INIT_EMBED, DSV4_REL_BF16, -1, V, D, "embed");
    for (int l = 0; l < L && !v.oom; l++) block(&v, c, m ? &m->layers[l] : NULL, l, NAME("layers.%d", l));
    vec(&v, m ? &m->norm : NULL, DSV4_INIT_NORM, -1, D, 0, "norm.weight");
    mat(&v, m ? &m->head : NULL, DSV4_INIT_LINEAR, DSV4_REL_BF16, -1, V, D, "head");
    vec(&v, m ? &m->hc_head_fn : NULL, DSV4_INIT_HC_FN, -1, hc, hc * D, "hc_head_fn");
    vec(&v, m ? &m->hc_head_base : NULL, DSV4_INIT_HC_BASE, -1, hc, 0, "hc_head_base");
    vec(&v, m ? &m->hc_head_scale : NULL, DSV4_INIT_HC_SCALE, -1, 1, 0, "hc_head_scale");
    for (int j = 0; j < n_mtp && !v.oom; j++) {
        dsv4_block_w *b = m ? &m->mtp[j] : NULL;
        char p[32];
        snprintf(p, sizeof p, "mtp.%d", j);
        const int layer = L + j;
        block(&v, c, b, layer, p);
#define B(field) (b ? &b->field : NULL)
        mat(&v, B(e_proj), DSV4_INIT_LINEAR, DSV4_REL_FP8, layer, D, D, NAME("%s.e_proj", p));
        mat(&v, B(h_proj), DSV4_INIT_LINEAR, DSV4_REL_FP8, layer, D, D, NAME("%s.h_proj", p));
        vec(&v, B(enorm), DSV4_INIT_NORM, layer, D, 0, NAME("%s.enorm.weight", p));
        vec(&v, B(hnorm), DSV4_INIT_NORM, layer, D, 0, NAME("%s.hnorm.weight", p));
        vec(&v, B(norm), DSV4_INIT_NORM, layer, D, 0, NAME("%s.norm.weight", p));
        vec(&v, B(hc_head_fn), DSV4_INIT_HC_FN, layer, hc, hc * D, NAME("%s.hc_head_fn", p));
        vec(&v, B(hc_head_base), DSV4_INIT_HC_BASE, layer, hc, 0, NAME("%s.hc_head_base", p));
        vec(&v, B(hc_head_scale), DSV4_INIT_HC_SCALE, layer, 1, 0, NAME("%s.hc_head_scale", p));
#undef B
    }
    if (v.oom) {
        free(v.s);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "model: out of memory building the tensor list");
    }
    *out = v.s;
    *n_out = v.n;
    return DSV4_OK;
}
