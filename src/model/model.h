/* model.h — a loaded model: config + every weight bound by its official name.
 *
 * Matrices (dsv4_mat) point into the mmap'd checkpoint in their stored format. Small
 * vectors (norm weights, hc_*, ape, attn_sink, gate.bias) are converted to F32 once at load
 * into buffers the model owns, and tid2eid to int32. Shapes are annotated per tensor;
 * names are those of spec/model.md §2.2 (prefix "layers.L." or "mtp.0.").
 */
#ifndef DSV4_MODEL_MODEL_H
#define DSV4_MODEL_MODEL_H

#include <stdint.h>

#include "dsv4.h"
#include "kernels/linear.h"
#include "model/config.h"

/* A compressor (main: d = hd; indexer: d = dI) of a layer with ratio r, coff = 2 iff r == 4. */
typedef struct dsv4_compressor_w {
    const float *ape;   /* (r, coff*d)  compressor.ape */
    dsv4_mat wkv;       /* (coff*d, D)  compressor.wkv.weight */
    dsv4_mat wgate;     /* (coff*d, D)  compressor.wgate.weight */
    const float *norm;  /* (d)          compressor.norm.weight */
} dsv4_compressor_w;

typedef struct dsv4_block_w {
    int layer_id;              /* 0..n_layers-1 main, n_layers.. MTP */
    int ratio;                 /* compress_ratios[layer_id] */
    /* hyper-connections, mix = (2+hc)*hc */
    const float *hc_attn_fn;   /* (mix, hc*D) */
    const float *hc_attn_base; /* (mix) */
    const float *hc_attn_scale;/* (3) */
    const float *hc_ffn_fn;    /* (mix, hc*D) */
    const float *hc_ffn_base;  /* (mix) */
    const float *hc_ffn_scale; /* (3) */
    const float *attn_norm;    /* (D) */
    const float *ffn_norm;     /* (D) */
    /* attention */
    const float *attn_sink;    /* (H) */
    dsv4_mat wq_a;             /* (q_lora, D) */
    const float *q_norm;       /* (q_lora) */
    dsv4_mat wq_b;             /* (H*hd, q_lora) */
    dsv4_mat wkv;              /* (hd, D) */
    const float *kv_norm;      /* (hd) */
    dsv4_mat wo_a;             /* (G*o_lora, H*hd/G) */
    dsv4_mat wo_b;             /* (D, G*o_lora) */
    dsv4_compressor_w cmp;     /* ratio > 0: d = hd */
    /* lightning indexer, ratio == 4 */
    dsv4_mat idx_wq_b;         /* (nI*dI, q_lora)  indexer.wq_b */
    dsv4_mat idx_weights_proj; /* (nI, D)          indexer.weights_proj */
    dsv4_compressor_w idx_cmp; /* d = dI, r = 4    indexer.compressor.* */
    /* MoE */
    dsv4_mat gate;             /* (E, D)  ffn.gate.weight */
    const float *gate_bias;    /* (E)     score-routed layers, else NULL */
    const int32_t *tid2eid;    /* (V, K)  hash layers (layer_id < num_hash_layers), else NULL */
    const double *route_tab;   /* the router's score bounds on a fixed grid (dsv4_moe_bound_table),
                                * set by the engine on its copies; NULL: each row its own grid */
    dsv4_mat *w1, *w2, *w3;    /* [E] each: w1,w3 (I, D); w2 (D, I) */
    dsv4_mat sh_w1, sh_w3;     /* (I, D)  shared_experts */
    dsv4_mat sh_w2;            /* (D, I) */
    /* MTP block extras (mtp.0.) */
    dsv4_mat e_proj, h_proj;   /* (D, D) */
    const float *enorm, *hnorm, *norm; /* (D) */
    const float *hc_head_fn;   /* (hc, hc*D) */
    const float *hc_head_base; /* (hc) */
    const float *hc_head_scale;/* (1) */
} dsv4_block_w;

struct dsv4_st_set; /* safetensors files, model/safetensors.h */

struct dsv4_model {
    dsv4_config cfg;
    char *config_json;          /* config.json as read and parsed (the fingerprint hashes it) */
    size_t config_len;
    dsv4_gen_config gen;        /* generation_config.json's sampling defaults (has = 0: none) */
    dsv4_err gen_err;           /* why that file was refused (code 0: it was not) */
    struct dsv4_st_set *files;  /* mmap'd shards */
    dsv4_mat embed;             /* (V, D) embed.weight */
    dsv4_mat head;              /* (V, D) head.weight */
    const float *norm;          /* (D) norm.weight */
    const float *hc_head_fn;    /* (hc, hc*D) */
    const float *hc_head_base;  /* (hc) */
    const float *hc_head_scale; /* (1) */
    dsv4_block_w *layers;       /* [num_hidden_layers] */
    dsv4_block_w *mtp;          /* [num_nextn_predict_layers] */
    /* owned storage for converted vectors and expert tables */
    void **owned;
    int n_owned, cap_owned;
    /* load report: non-fatal findings (extra tensors, unusual scale bytes), one per line;
     * the library never prints them, `dsv4 info` does */
    char *warnings;             /* NULL when there are none */
    char *all_warnings;         /* config + binding warnings, one per line (dsv4_model_warnings) */
    int n_warnings;
    unsigned load_flags;        /* DSV4_LOAD_* used */
    /* every tensor of the inventory with its binding destination in this model, in
     * inventory order (model/inventory.h): lookup by official name */
    struct dsv4_tensor_spec *specs;
    int n_specs;
};

/* Opens dir (config.json + safetensors) and binds every tensor; see dsv4_model_open. */
int dsv4_model_load(const char *dir, struct dsv4_model **out, dsv4_err *err);

/* Load flags. HEADERS_ONLY binds matrices and checks every name, dtype and shape from the
 * safetensors headers but reads no tensor data: vectors and tid2eid stay NULL and scale
 * bytes are not scanned. For inspection (`dsv4 info`) of large checkpoints; such a model
 * cannot run. */
enum { DSV4_LOAD_HEADERS_ONLY = 1u };
int dsv4_model_load_ex(const char *dir, unsigned flags, struct dsv4_model **out, dsv4_err *err);

/* The inventory entry of an official tensor name (matrices: "<module>.weight"), whose
 * mat / vec / ids field points at the bound value in m; NULL if the config has no such
 * tensor. */
const struct dsv4_tensor_spec *dsv4_model_spec(const struct dsv4_model *m, const char *name);

/* Zeroed allocation owned (and freed) by the model; NULL when out of memory. */
void *dsv4_model_alloc(struct dsv4_model *m, size_t bytes);

/* Every tensor's pages interleaved over the memory nodes (util/numa.h; warmup.c): the
 * policy for pages read later, and the pages already mapped only here moved now. */
int dsv4_model_numa_interleave(const dsv4_model *m, dsv4_err *err);

#endif
