/* config.h — the model configuration (Hugging Face config.json of DeepSeek-V4), parsed and
 * validated once; every model dimension in the engine is read from here.
 * Field names follow config.json; spec/model.md §1 lists them with the Flash values. */
#ifndef DSV4_MODEL_CONFIG_H
#define DSV4_MODEL_CONFIG_H

#include <stdint.h>

#include "dsv4.h"

#define DSV4_MAX_LAYERS 512  /* main + MTP layers; Flash has 44 */
/* Largest hc_mult the loader accepts: the hyper-connection routines (hc/) keep their
 * hc x hc mixing state on the stack. */
#define DSV4_HC_MAX 16

typedef enum { DSV4_SCORE_SQRTSOFTPLUS, DSV4_SCORE_SIGMOID, DSV4_SCORE_SOFTMAX } dsv4_score_func;

typedef struct dsv4_config {
    int vocab_size;            /* V */
    int hidden_size;           /* D */
    int num_hidden_layers;     /* main blocks */
    int num_attention_heads;   /* H */
    int num_key_value_heads;   /* must be 1 */
    int head_dim;              /* hd */
    int qk_rope_head_dim;      /* rd */
    int q_lora_rank;
    int o_lora_rank;
    int o_groups;              /* G */
    int sliding_window;        /* win, including the current token */
    int compress_ratios[DSV4_MAX_LAYERS]; /* [num_hidden_layers + num_nextn_predict_layers] */
    double rope_theta;             /* ratio-0 layers, no YaRN */
    double compress_rope_theta;    /* ratio>0 layers, YaRN */
    int rope_yarn;                 /* rope_scaling.type == "yarn" */
    double rope_factor;
    int64_t rope_original_max_pos; /* original_max_position_embeddings; YaRN on iff > 0 */
    double rope_beta_fast, rope_beta_slow;
    int index_n_heads;         /* nI */
    int index_head_dim;        /* dI */
    int index_topk;
    int n_routed_experts;      /* E */
    int n_shared_experts;      /* must be 1 */
    int num_experts_per_tok;   /* K */
    int num_hash_layers;
    dsv4_score_func scoring_func;
    double routed_scaling_factor;
    double swiglu_limit;       /* clamp off when <= 0 */
    int moe_intermediate_size; /* I */
    int hc_mult;               /* hc */
    int hc_sinkhorn_iters;
    double hc_eps;
    double rms_norm_eps;
    int num_nextn_predict_layers; /* 0 or 1 */
    int64_t max_position_embeddings;
    int bos_token_id, eos_token_id;
    /* quantization_config (informational: formats are decided by tensor dtype) */
    int has_quant_config;
    char quant_method[16];     /* "fp8" */
    char quant_fmt[16];        /* "e4m3" */
    char quant_scale_fmt[16];  /* "ue8m0" */
    int quant_block[2];        /* [128, 128] */
    char quant_activation_scheme[16]; /* "dynamic" */
    char expert_dtype[16];     /* "fp4" when given, else "" */
    /* Non-fatal findings of dsv4_config_parse ("; "-separated, "" if none), e.g. missing
     * MTP compress_ratios entries taken as 0. The library prints nothing; callers may. */
    char warnings[512];
} dsv4_config;

/* The released DeepSeek-V4-Flash values of every optional field; required sizes are 0. */
void dsv4_config_defaults(dsv4_config *c);

/* Parses config.json text (len bytes) into cfg with the released defaults for optional
 * fields, then validates it (dsv4_config_validate). Errors name the field and value.
 * cfg is written only on success. Bounds: every size <= 2^20 (vocab <= 2^22), layers
 * <= DSV4_MAX_LAYERS - 1, so a product of any three sizes fits in int64. */
int dsv4_config_parse(const char *json, size_t len, dsv4_config *cfg, dsv4_err *err);
int dsv4_config_load(const char *path, dsv4_config *cfg, dsv4_err *err);
/* dsv4_config_load that also hands back the file's bytes (malloc'd, NUL after *text_len),
 * exactly those parsed: the weights fingerprint hashes them. */
int dsv4_config_load_text(const char *path, dsv4_config *cfg, char **text, size_t *text_len,
                          dsv4_err *err);
int dsv4_config_validate(const dsv4_config *cfg, dsv4_err *err);
/* Reads dir/generation_config.json (gen_config.c): 0 with *out (has = 0 when the file is
 * absent), or DSV4_ERR_CONFIG "generation_config.json: ..." naming what is wrong (the file
 * unreadable, a syntax error, a field's type or range; an eos_token_id outside [0, vocab)). */
int dsv4_gen_config_load(const char *dir, int vocab, dsv4_gen_config *out, dsv4_err *err);
/* The checkpoint layout this build's loader and kernels implement: a quantization_config
 * (if any) must be the release's (fp8 e4m3, ue8m0 scales per 128x128 block, dynamic
 * activations, model.md §2.3); any other would be read as if it were that one. Separate
 * from validation: a config describing another layout is well formed, only not loadable.
 * DSV4_ERR_CONFIG naming the field and its value. */
int dsv4_config_check_loadable(const dsv4_config *cfg, dsv4_err *err);
/* SHA-256 of the canonical math-relevant fields (model/fingerprint.c): every field that
 * changes a computed value, in a fixed little-endian binary layout; not token ids,
 * max_position_embeddings or the informational quantization fields. */
int dsv4_config_hash(const dsv4_config *cfg, uint8_t out[32], dsv4_err *err);
/* Writes cfg as a config.json (Hugging Face field names); malloc'd string. */
char *dsv4_config_to_json(const dsv4_config *cfg);

/* ---- derived values: the one place they are computed ---------------------------------- */
static inline int dsv4_cfg_n_total_layers(const dsv4_config *c) {
    return c->num_hidden_layers + c->num_nextn_predict_layers;
}
static inline int dsv4_cfg_ratio(const dsv4_config *c, int layer) { return c->compress_ratios[layer]; }
static inline int dsv4_cfg_is_csa(const dsv4_config *c, int layer) { return c->compress_ratios[layer] == 4; }
static inline int dsv4_cfg_coff(int ratio) { return ratio == 4 ? 2 : 1; }
static inline int dsv4_cfg_mix(const dsv4_config *c) { return (2 + c->hc_mult) * c->hc_mult; }
static inline int dsv4_cfg_nope(const dsv4_config *c) { return c->head_dim - c->qk_rope_head_dim; }

#endif
