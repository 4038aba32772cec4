/* config.c — config.json of DeepSeek-V4 -> dsv4_config, validation, and back to JSON.
 *
 * Parsing reads every known field with its JSON type checked (an absent optional field
 * takes the released Flash value, spec/model.md §1), then hands the whole struct to
 * dsv4_config_validate, so a config assembled in code is held to the same rules as one read
 * from disk. Unknown keys are ignored: HF configs carry many informational ones. Every error
 * names the field and the offending value, e.g. "config.json: num_key_value_heads = 2,
 * must be 1".
 */
#include "model/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/file.h"
#include "util/json.h"

#define PFX "config.json: "

/* Bounds that keep every product of three sizes inside int64 (2^22 * 2^20 * 2^20 = 2^62)
 * and the whole model below 2^50 elements, so no size computation downstream can
 * overflow. Flash is far inside: V = 129280, largest other size 32768 (H*hd). */
#define CFG_MAX_DIM (1 << 20)
#define CFG_MAX_VOCAB (1 << 22)
#define CFG_MAX_HC DSV4_HC_MAX
#define CFG_MAX_POS ((int64_t)1 << 40)
#define CFG_MAX_PARAMS 1125899906842624.0 /* 2^50 */
#define CFG_MAX_FILE (16 << 20)           /* a config.json is a few KiB */

/* ---- the released values for optional fields ------------------------------------------ */

void dsv4_config_defaults(dsv4_config *c) {
    memset(c, 0, sizeof *c);
    c->num_key_value_heads = 1;
    c->qk_rope_head_dim = 64; /* replaced by partial_rotary_factor * head_dim when absent */
    c->rope_theta = 10000.0;
    c->compress_rope_theta = 160000.0;
    c->rope_yarn = 1;
    c->rope_factor = 16.0;
    c->rope_original_max_pos = 65536;
    c->rope_beta_fast = 32.0;
    c->rope_beta_slow = 1.0;
    c->index_n_heads = 64;
    c->index_head_dim = 128;
    c->index_topk = 512;
    c->n_shared_experts = 1;
    c->num_hash_layers = 3;
    c->scoring_func = DSV4_SCORE_SQRTSOFTPLUS;
    c->routed_scaling_factor = 1.5;
    c->swiglu_limit = 10.0;
    c->hc_mult = 4;
    c->hc_sinkhorn_iters = 20;
    c->hc_eps = 1e-6;
    c->rms_norm_eps = 1e-6;
    c->num_nextn_predict_layers = 1;
    c->max_position_embeddings = 1048576;
    c->bos_token_id = 0;
    c->eos_token_id = 1;
}

/* quantization_config of the release, used for keys missing inside a present object. */
static void flash_quant_defaults(dsv4_config *c) {
    c->has_quant_config = 1;
    snprintf(c->quant_method, sizeof c->quant_method, "fp8");
    snprintf(c->quant_fmt, sizeof c->quant_fmt, "e4m3");
    snprintf(c->quant_scale_fmt, sizeof c->quant_scale_fmt, "ue8m0");
    c->quant_block[0] = c->quant_block[1] = 128;
    snprintf(c->quant_activation_scheme, sizeof c->quant_activation_scheme, "dynamic");
}

static const char *score_name(dsv4_score_func f) {
    switch (f) {
    case DSV4_SCORE_SQRTSOFTPLUS: return "sqrtsoftplus";
    case DSV4_SCORE_SIGMOID: return "sigmoid";
    case DSV4_SCORE_SOFTMAX: return "softmax";
    }
    return NULL;
}

/* ---- typed readers: each checks the JSON type and names the field on failure ---------- */

static int want_number(const cJSON *j, const char *name, dsv4_err *err) {
    if (!cJSON_IsNumber(j))
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "%s is %s, must be a number", name, dsv4_json_kind(j));
    return 0;
}

/* An integer within [lo, hi]; the bounds only keep the conversion defined, the meaning of
 * the value is checked by dsv4_config_validate. */
static int read_int64(const cJSON *j, const char *name, int64_t lo, int64_t hi, int64_t *out,
                      dsv4_err *err) {
    int rc = want_number(j, name, err);
    if (rc) return rc;
    double v = j->valuedouble;
    if (!isfinite(v) || v < (double)lo || v > (double)hi)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "%s = %.17g, out of range", name, v);
    if (floor(v) != v)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "%s = %.17g, must be an integer", name, v);
    *out = (int64_t)v;
    return 0;
}

static int read_int(const cJSON *j, const char *name, int *out, dsv4_err *err) {
    int64_t v = 0;
    int rc = read_int64(j, name, INT_MIN, INT_MAX, &v, err);
    if (rc) return rc;
    *out = (int)v;
    return 0;
}

static int read_double(const cJSON *j, const char *name, double *out, dsv4_err *err) {
    int rc = want_number(j, name, err);
    if (rc) return rc;
    /* -0 would print as "0" and break the to_json round trip; the sign means nothing here. */
    *out = j->valuedouble == 0 ? 0.0 : j->valuedouble;
    return 0;
}

static int read_bool(const cJSON *j, const char *name, int *out, dsv4_err *err) {
    if (!cJSON_IsBool(j))
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "%s is %s, must be true or false", name, dsv4_json_kind(j));
    *out = cJSON_IsTrue(j);
    return 0;
}

/* A string that must fit dst (cap bytes incl. the NUL). */
static int read_str(const cJSON *j, const char *name, char *dst, size_t cap, dsv4_err *err) {
    if (!cJSON_IsString(j) || !j->valuestring)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "%s is %s, must be a string", name, dsv4_json_kind(j));
    size_t n = strlen(j->valuestring);
    if (n >= cap)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "%s = \"%.40s%s\" is too long (at most %zu characters)",
                         name, j->valuestring, n > 40 ? "..." : "", cap - 1);
    memcpy(dst, j->valuestring, n + 1);
    return 0;
}

/* The member, or NULL when absent or JSON null (both mean "not given" for optional keys). */
static const cJSON *member(const cJSON *obj, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    return (j && !cJSON_IsNull(j)) ? j : NULL;
}

static int missing(const char *key, dsv4_err *err) {
    return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "%s is missing", key);
}

static int str_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* JSON allows repeated keys and readers disagree on which one wins; refuse them. */
static int check_dup_keys(const cJSON *obj, const char *where, dsv4_err *err) {
    size_t n = 0;
    for (const cJSON *j = obj->child; j; j = j->next) n++;
    if (n < 2) return 0;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) return dsv4_fail(err, DSV4_ERR_NOMEM, PFX "out of memory");
    size_t k = 0;
    for (const cJSON *j = obj->child; j; j = j->next) keys[k++] = j->string ? j->string : "";
    qsort(keys, n, sizeof *keys, str_cmp);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            rc = dsv4_fail(err, DSV4_ERR_CONFIG, PFX "duplicate key \"%.200s\"%s%s", keys[i],
                           where[0] ? " in " : "", where);
    free(keys);
    return rc;
}

static void add_warning(dsv4_config *c, const char *fmt, ...) DSV4_PRINTF(2, 3);
static void add_warning(dsv4_config *c, const char *fmt, ...) {
    size_t used = strlen(c->warnings);
    if (used && used + 2 < sizeof c->warnings) {
        memcpy(c->warnings + used, "; ", 3);
        used += 2;
    }
    if (used + 1 >= sizeof c->warnings) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->warnings + used, sizeof c->warnings - used, fmt, ap);
    va_end(ap);
}

/* ---- the fields --------------------------------------------------------------------- */

typedef struct {
    const char *key;
    size_t off;
    int required;
} int_field;

#define F(key, field, req) { key, offsetof(dsv4_config, field), req }
static const int_field INT_FIELDS[] = {
    F("vocab_size", vocab_size, 1),
    F("hidden_size", hidden_size, 1),
    F("num_hidden_layers", num_hidden_layers, 1),
    F("num_attention_heads", num_attention_heads, 1),
    F("num_key_value_heads", num_key_value_heads, 0),
    F("head_dim", head_dim, 1),
    F("q_lora_rank", q_lora_rank, 1),
    F("o_lora_rank", o_lora_rank, 1),
    F("o_groups", o_groups, 1),
    F("sliding_window", sliding_window, 1),
    F("index_n_heads", index_n_heads, 0),
    F("index_head_dim", index_head_dim, 0),
    F("index_topk", index_topk, 0),
    F("n_routed_experts", n_routed_experts, 1),
    F("n_shared_experts", n_shared_experts, 0),
    F("num_experts_per_tok", num_experts_per_tok, 1),
    F("num_hash_layers", num_hash_layers, 0),
    F("moe_intermediate_size", moe_intermediate_size, 1),
    F("hc_mult", hc_mult, 0),
    F("hc_sinkhorn_iters", hc_sinkhorn_iters, 0),
    F("num_nextn_predict_layers", num_nextn_predict_layers, 0),
};

typedef struct {
    const char *key;
    size_t off;
    int float_form; /* written with a fraction or exponent even when integral ("10.0"), as
                     * the release's config.json has it: tools that type a field by its
                     * first value refuse an integer there. The rope bases are integers. */
} dbl_field;

#define D(key, field, fl) { key, offsetof(dsv4_config, field), fl }
static const dbl_field DBL_FIELDS[] = {
    D("rope_theta", rope_theta, 0),
    D("compress_rope_theta", compress_rope_theta, 0),
    D("routed_scaling_factor", routed_scaling_factor, 1),
    D("swiglu_limit", swiglu_limit, 1),
    D("hc_eps", hc_eps, 1),
    D("rms_norm_eps", rms_norm_eps, 1),
};
#undef D
#undef F

#define INT_AT(c, off) ((int *)((char *)(c) + (off)))
#define DBL_AT(c, off) ((double *)((char *)(c) + (off)))

static int check_int_range(const char *name, int64_t v, int64_t lo, int64_t hi, dsv4_err *err) {
    if (v < lo)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "%s = %lld, must be >= %lld", name, (long long)v, (long long)lo);
    if (v > hi)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "%s = %lld, must be <= %lld", name, (long long)v, (long long)hi);
    return 0;
}

static int check_mtp(const dsv4_config *c, dsv4_err *err) {
    if (c->num_nextn_predict_layers < 0 || c->num_nextn_predict_layers > 1)
        return dsv4_fail(err, DSV4_ERR_CONFIG,
                         PFX "num_nextn_predict_layers = %d, must be 0 or 1 (chaining several MTP blocks is not defined)",
                         c->num_nextn_predict_layers);
    return 0;
}

static int parse_rope_scaling(const cJSON *root, dsv4_config *c, dsv4_err *err) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (!rs) return 0; /* absent: the released YaRN settings (dsv4_config_defaults) */
    int yarn = 0;
    if (cJSON_IsObject(rs)) {
        int rc = check_dup_keys(rs, "rope_scaling", err);
        if (rc) return rc;
        const cJSON *t = member(rs, "type"), *rt = member(rs, "rope_type");
        char type[32] = "", rtype[32] = "";
        if (t && (rc = read_str(t, "rope_scaling.type", type, sizeof type, err))) return rc;
        if (rt && (rc = read_str(rt, "rope_scaling.rope_type", rtype, sizeof rtype, err))) return rc;
        if (!t && !rt) return missing("rope_scaling.type", err);
        if (t && rt && strcmp(type, rtype) != 0)
            return dsv4_fail(err, DSV4_ERR_CONFIG,
                             PFX "rope_scaling.type = \"%s\" but rope_scaling.rope_type = \"%s\"", type, rtype);
        const char *ty = t ? type : rtype;
        if (strcmp(ty, "yarn") == 0) {
            yarn = 1;
            const cJSON *j;
            if ((j = member(rs, "factor")) && (rc = read_double(j, "rope_scaling.factor", &c->rope_factor, err)))
                return rc;
            if ((j = member(rs, "original_max_position_embeddings")) &&
                (rc = read_int64(j, "rope_scaling.original_max_position_embeddings", INT64_MIN / 2,
                                 INT64_MAX / 2, &c->rope_original_max_pos, err)))
                return rc;
            if ((j = member(rs, "beta_fast")) && (rc = read_double(j, "rope_scaling.beta_fast", &c->rope_beta_fast, err)))
                return rc;
            if ((j = member(rs, "beta_slow")) && (rc = read_double(j, "rope_scaling.beta_slow", &c->rope_beta_slow, err)))
                return rc;
        } else if (strcmp(ty, "default") != 0 && strcmp(ty, "none") != 0) {
            return dsv4_fail(err, DSV4_ERR_CONFIG,
                             PFX "rope_scaling.%s = \"%s\" is not supported (\"yarn\" or \"default\")",
                             t ? "type" : "rope_type", ty);
        }
    } else if (!cJSON_IsNull(rs)) {
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "rope_scaling is %s, must be an object or null", dsv4_json_kind(rs));
    }
    if (!yarn) { /* explicit null / "default": plain RoPE on every layer */
        c->rope_yarn = 0;
        c->rope_factor = 1.0;
        c->rope_original_max_pos = 0;
        c->rope_beta_fast = 32.0;
        c->rope_beta_slow = 1.0;
    }
    return 0;
}

static int parse_quant(const cJSON *root, dsv4_config *c, dsv4_err *err) {
    const cJSON *q = member(root, "quantization_config");
    if (!q) return 0;
    if (!cJSON_IsObject(q))
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "quantization_config is %s, must be an object", dsv4_json_kind(q));
    int rc = check_dup_keys(q, "quantization_config", err);
    if (rc) return rc;
    flash_quant_defaults(c);
    const cJSON *j;
    if ((j = member(q, "quant_method")) &&
        (rc = read_str(j, "quantization_config.quant_method", c->quant_method, sizeof c->quant_method, err)))
        return rc;
    if ((j = member(q, "fmt")) && (rc = read_str(j, "quantization_config.fmt", c->quant_fmt, sizeof c->quant_fmt, err)))
        return rc;
    if ((j = member(q, "scale_fmt")) &&
        (rc = read_str(j, "quantization_config.scale_fmt", c->quant_scale_fmt, sizeof c->quant_scale_fmt, err)))
        return rc;
    if ((j = member(q, "activation_scheme")) &&
        (rc = read_str(j, "quantization_config.activation_scheme", c->quant_activation_scheme,
                       sizeof c->quant_activation_scheme, err)))
        return rc;
    if ((j = member(q, "weight_block_size"))) {
        if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2)
            return dsv4_fail(err, DSV4_ERR_CONFIG,
                             PFX "quantization_config.weight_block_size must be an array of 2 integers");
        if ((rc = read_int(j->child, "quantization_config.weight_block_size[0]", &c->quant_block[0], err)) ||
            (rc = read_int(j->child->next, "quantization_config.weight_block_size[1]", &c->quant_block[1], err)))
            return rc;
    }
    return 0;
}

int dsv4_config_check_loadable(const dsv4_config *c, dsv4_err *err) {
    if (!c->has_quant_config) return 0;
    static const char SUPPORTED[] = " is not supported: this build reads fp8 (e4m3) weights with "
                                    "ue8m0 scales per 128x128 block and dynamic activations";
    const struct { const char *key, *val, *want; } fields[] = {
        {"quant_method", c->quant_method, "fp8"},
        {"fmt", c->quant_fmt, "e4m3"},
        {"scale_fmt", c->quant_scale_fmt, "ue8m0"},
        {"activation_scheme", c->quant_activation_scheme, "dynamic"},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (strcmp(fields[i].val, fields[i].want))
            return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "quantization_config.%s = \"%s\"%s", fields[i].key,
                             fields[i].val, SUPPORTED);
    if (c->quant_block[0] != 128 || c->quant_block[1] != 128)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "quantization_config.weight_block_size = [%d, %d]%s",
                         c->quant_block[0], c->quant_block[1], SUPPORTED);
    return 0;
}

static int parse_ratios(const cJSON *root, dsv4_config *c, dsv4_err *err) {
    const cJSON *r = member(root, "compress_ratios");
    if (!r) return missing("compress_ratios", err);
    if (!cJSON_IsArray(r))
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "compress_ratios is %s, must be an array", dsv4_json_kind(r));
    int L = c->num_hidden_layers, total = dsv4_cfg_n_total_layers(c);
    int n = 0;
    char name[40];
    for (const cJSON *j = r->child; j; j = j->next, n++) {
        if (n >= total) continue; /* counted, not used */
        snprintf(name, sizeof name, "compress_ratios[%d]", n);
        int rc = read_int(j, name, &c->compress_ratios[n], err);
        if (rc) return rc;
    }
    if (n < L)
        return dsv4_fail(err, DSV4_ERR_CONFIG,
                         PFX "compress_ratios has %d entries, fewer than num_hidden_layers = %d", n, L);
    if (n < total)
        add_warning(c, "compress_ratios has %d entries for %d main + %d MTP layers; missing MTP entries taken as 0",
                    n, L, c->num_nextn_predict_layers);
    else if (n > total)
        add_warning(c, "compress_ratios has %d entries; only the first %d (main + MTP layers) are used", n, total);
    return 0;
}

static int parse_tree(const cJSON *root, dsv4_config *c, dsv4_err *err) {
    int rc;
    const cJSON *j;
    if (!cJSON_IsObject(root))
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "top level is %s, must be an object", dsv4_json_kind(root));
    if ((rc = check_dup_keys(root, "", err))) return rc;
    dsv4_config_defaults(c);

    char s[64];
    if ((j = member(root, "model_type"))) {
        if ((rc = read_str(j, "model_type", s, sizeof s, err))) return rc;
        if (strcmp(s, "deepseek_v4") != 0)
            return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "model_type = \"%s\", must be \"deepseek_v4\"", s);
    }
    for (size_t i = 0; i < sizeof INT_FIELDS / sizeof INT_FIELDS[0]; i++) {
        const int_field *f = &INT_FIELDS[i];
        if (!(j = member(root, f->key))) {
            if (f->required) return missing(f->key, err);
            continue;
        }
        if ((rc = read_int(j, f->key, INT_AT(c, f->off), err))) return rc;
    }
    for (size_t i = 0; i < sizeof DBL_FIELDS / sizeof DBL_FIELDS[0]; i++)
        if ((j = member(root, DBL_FIELDS[i].key)) &&
            (rc = read_double(j, DBL_FIELDS[i].key, DBL_AT(c, DBL_FIELDS[i].off), err)))
            return rc;

    /* rd: qk_rope_head_dim, else the transformers-style partial_rotary_factor * head_dim
     * (the release's 64/512 when neither is given). */
    if ((j = member(root, "qk_rope_head_dim"))) {
        if ((rc = read_int(j, "qk_rope_head_dim", &c->qk_rope_head_dim, err))) return rc;
    } else {
        double prf = 64.0 / 512.0;
        if ((j = member(root, "partial_rotary_factor"))) {
            if ((rc = read_double(j, "partial_rotary_factor", &prf, err))) return rc;
            if (!(prf > 0 && prf <= 1))
                return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "partial_rotary_factor = %.9g, must be in (0, 1]", prf);
        }
        c->qk_rope_head_dim = (int)floor(prf * c->head_dim);
    }

    if ((j = member(root, "max_position_embeddings")) &&
        (rc = read_int64(j, "max_position_embeddings", INT64_MIN / 2, INT64_MAX / 2, &c->max_position_embeddings, err)))
        return rc;
    /* Token ids: JSON null means "none" in HF configs; -1 here. */
    const char *tok_keys[2] = {"bos_token_id", "eos_token_id"};
    int *tok_dst[2] = {&c->bos_token_id, &c->eos_token_id};
    for (int t = 0; t < 2; t++) {
        const cJSON *tj = cJSON_GetObjectItemCaseSensitive(root, tok_keys[t]);
        if (!tj) continue;
        if (cJSON_IsNull(tj)) *tok_dst[t] = -1;
        else if ((rc = read_int(tj, tok_keys[t], tok_dst[t], err))) return rc;
    }

    if ((j = member(root, "scoring_func"))) {
        if ((rc = read_str(j, "scoring_func", s, sizeof s, err))) return rc;
        int found = 0;
        for (int f = DSV4_SCORE_SQRTSOFTPLUS; f <= DSV4_SCORE_SOFTMAX; f++)
            if (strcmp(s, score_name((dsv4_score_func)f)) == 0) c->scoring_func = (dsv4_score_func)f, found = 1;
        if (!found)
            return dsv4_fail(err, DSV4_ERR_CONFIG,
                             PFX "scoring_func = \"%s\" is unknown (sqrtsoftplus, sigmoid or softmax)", s);
    }
    if ((j = member(root, "hidden_act"))) {
        if ((rc = read_str(j, "hidden_act", s, sizeof s, err))) return rc;
        if (strcmp(s, "silu") != 0)
            return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "hidden_act = \"%s\", must be \"silu\"", s);
    }
    if ((j = member(root, "tie_word_embeddings"))) {
        int tie = 0;
        if ((rc = read_bool(j, "tie_word_embeddings", &tie, err))) return rc;
        if (tie) return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "tie_word_embeddings = true, must be false");
    }
    /* Informational keys: only their types are checked. */
    int b = 0;
    if ((j = member(root, "norm_topk_prob")) && (rc = read_bool(j, "norm_topk_prob", &b, err))) return rc;
    if ((j = member(root, "topk_method")) && (rc = read_str(j, "topk_method", s, sizeof s, err))) return rc;
    if ((j = member(root, "expert_dtype")) &&
        (rc = read_str(j, "expert_dtype", c->expert_dtype, sizeof c->expert_dtype, err)))
        return rc;

    if ((rc = parse_rope_scaling(root, c, err))) return rc;
    if ((rc = parse_quant(root, c, err))) return rc;

    /* The layer counts index compress_ratios[], so they are checked before it is read. */
    if ((rc = check_int_range("num_hidden_layers", c->num_hidden_layers, 1, DSV4_MAX_LAYERS - 1, err)) ||
        (rc = check_mtp(c, err)))
        return rc;
    return parse_ratios(root, c, err);
}

static size_t line_of(const char *s, size_t off) {
    size_t line = 1;
    for (size_t i = 0; i < off; i++) line += s[i] == '\n';
    return line;
}

int dsv4_config_parse(const char *json, size_t len, dsv4_config *cfg, dsv4_err *err) {
    if (!json || !cfg) return dsv4_fail(err, DSV4_ERR_ARG, "dsv4_config_parse: NULL argument");
    /* A NUL-terminated private copy: cJSON then cannot read past the text, whatever the
     * caller's buffer holds after it. */
    char *text = malloc(len + 1);
    if (!text) return dsv4_fail(err, DSV4_ERR_NOMEM, PFX "out of memory (%zu bytes)", len);
    memcpy(text, json, len);
    text[len] = 0;
    size_t off = 0;
    int trailing = 0, rc;
    cJSON *root = dsv4_json_parse_whole(text, len, &off, &trailing);
    if (!root) {
        /* anything but blanks after the top-level value is an error, as in any JSON reader */
        rc = dsv4_fail(err, DSV4_ERR_CONFIG, PFX "JSON syntax error at byte %zu (line %zu)%s", off, line_of(text, off),
                       trailing ? ": text after the object" : "");
    } else {
        dsv4_config *c = malloc(sizeof *c);
        if (!c) {
            rc = dsv4_fail(err, DSV4_ERR_NOMEM, PFX "out of memory");
        } else {
            rc = parse_tree(root, c, err);
            if (!rc) rc = dsv4_config_validate(c, err);
            if (!rc) memcpy(cfg, c, sizeof *c); /* padding too: memcmp-comparable */
            free(c);
        }
    }
    cJSON_Delete(root);
    free(text);
    return rc;
}

int dsv4_config_load_text(const char *path, dsv4_config *cfg, char **text, size_t *text_len,
                          dsv4_err *err) {
    if (!path) return dsv4_fail(err, DSV4_ERR_ARG, "dsv4_config_load: NULL path");
    size_t len;
    char *buf = dsv4_read_regular_file(path, CFG_MAX_FILE, &len, err);
    if (!buf) {
        if (err && err->code == DSV4_ERR_FORMAT) err->code = DSV4_ERR_CONFIG; /* too large */
        return err ? err->code : DSV4_ERR_IO;
    }
    int rc = dsv4_config_parse(buf, len, cfg, err);
    if (!rc && text) {
        *text = buf;
        *text_len = len;
    } else {
        free(buf);
    }
    return rc;
}

int dsv4_config_load(const char *path, dsv4_config *cfg, dsv4_err *err) {
    return dsv4_config_load_text(path, cfg, NULL, NULL, err);
}

/* ---- validation ----------------------------------------------------------------------- */

typedef struct {
    const char *key;
    size_t off;
    int lo, hi;
} int_range;

#define R(key, field, lo, hi) { key, offsetof(dsv4_config, field), lo, hi }
static const int_range INT_RANGES[] = {
    R("vocab_size", vocab_size, 1, CFG_MAX_VOCAB),
    R("hidden_size", hidden_size, 1, CFG_MAX_DIM),
    R("num_hidden_layers", num_hidden_layers, 1, DSV4_MAX_LAYERS - 1),
    R("num_attention_heads", num_attention_heads, 1, CFG_MAX_DIM),
    R("head_dim", head_dim, 1, CFG_MAX_DIM),
    R("qk_rope_head_dim", qk_rope_head_dim, 1, CFG_MAX_DIM),
    R("q_lora_rank", q_lora_rank, 1, CFG_MAX_DIM),
    R("o_lora_rank", o_lora_rank, 1, CFG_MAX_DIM),
    R("o_groups", o_groups, 1, CFG_MAX_DIM),
    R("sliding_window", sliding_window, 1, CFG_MAX_DIM),
    R("index_n_heads", index_n_heads, 0, CFG_MAX_DIM),
    R("index_head_dim", index_head_dim, 0, CFG_MAX_DIM),
    R("index_topk", index_topk, 0, CFG_MAX_DIM),
    R("n_routed_experts", n_routed_experts, 1, CFG_MAX_DIM),
    R("num_experts_per_tok", num_experts_per_tok, 1, CFG_MAX_DIM),
    R("num_hash_layers", num_hash_layers, 0, DSV4_MAX_LAYERS - 1),
    R("moe_intermediate_size", moe_intermediate_size, 1, CFG_MAX_DIM),
    R("hc_mult", hc_mult, 1, CFG_MAX_HC),
    R("hc_sinkhorn_iters", hc_sinkhorn_iters, 1, CFG_MAX_DIM),
};
#undef R

/* Elements of every tensor of the model (an over-estimate is fine): only used to keep all
 * byte counts far from int64 overflow. Doubles cannot overflow here: each size <= 2^22. */
static double param_estimate(const dsv4_config *c) {
    double V = c->vocab_size, D = c->hidden_size, H = c->num_attention_heads, hd = c->head_dim;
    double q = c->q_lora_rank, o = c->o_lora_rank, G = c->o_groups, E = c->n_routed_experts;
    double I = c->moe_intermediate_size, hc = c->hc_mult, K = c->num_experts_per_tok;
    double nI = c->index_n_heads, dI = c->index_head_dim, mix = (2 + hc) * hc;
    double total = 2 * V * D + D + 3 * (hc * hc * D + hc + 1);
    for (int l = 0; l < dsv4_cfg_n_total_layers(c); l++) {
        double r = c->compress_ratios[l], coff = dsv4_cfg_coff(c->compress_ratios[l]);
        double attn = D * q + q + q * H * hd + D * hd + hd + H * hd * o + G * o * D + H;
        if (r > 0) attn += 2 * coff * hd * D + r * coff * hd + hd;
        if (r == 4) attn += q * nI * dI + D * nI + 2 * (2 * dI * D + 4 * 2 * dI + dI);
        double ffn = E * D + E + (E + 1) * 3 * I * D + (l < c->num_hash_layers ? V * K : 0);
        double hcp = 2 * (mix * hc * D + mix + 3) + 2 * D;
        total += attn + ffn + hcp + 4 * D * D; /* MTP projections, counted for every layer */
    }
    return total;
}

static int bad_double(const char *name, double v, const char *rule, dsv4_err *err) {
    return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "%s = %.9g, must be %s", name, v, rule);
}

static int has_nul(const char *s, size_t cap) { return memchr(s, 0, cap) != NULL; }

int dsv4_config_validate(const dsv4_config *c, dsv4_err *err) {
    if (!c) return dsv4_fail(err, DSV4_ERR_ARG, "dsv4_config_validate: NULL config");
    int rc;
    /* The fixed rules of the architecture first: they say the most about a foreign config. */
    if (c->num_key_value_heads != 1)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "num_key_value_heads = %d, must be 1 (one shared K=V row)",
                         c->num_key_value_heads);
    if (c->n_shared_experts != 1)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "n_shared_experts = %d, must be 1", c->n_shared_experts);
    if ((unsigned)c->scoring_func > DSV4_SCORE_SOFTMAX)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "scoring_func = %d is unknown", (int)c->scoring_func);
    if ((rc = check_mtp(c, err))) return rc;
    for (size_t i = 0; i < sizeof INT_RANGES / sizeof INT_RANGES[0]; i++) {
        const int_range *r = &INT_RANGES[i];
        if ((rc = check_int_range(r->key, *(const int *)((const char *)c + r->off), r->lo, r->hi, err))) return rc;
    }
    if (((int64_t)c->num_attention_heads * c->head_dim) % c->o_groups != 0)
        return dsv4_fail(err, DSV4_ERR_CONFIG,
                         PFX "o_groups = %d does not divide num_attention_heads * head_dim = %lld", c->o_groups,
                         (long long)c->num_attention_heads * c->head_dim);
    if (c->qk_rope_head_dim % 2 != 0)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "qk_rope_head_dim = %d, must be even", c->qk_rope_head_dim);
    if (c->qk_rope_head_dim > c->head_dim)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "qk_rope_head_dim = %d, must be <= head_dim = %d",
                         c->qk_rope_head_dim, c->head_dim);
    if (c->num_experts_per_tok > c->n_routed_experts)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "num_experts_per_tok = %d, must be <= n_routed_experts = %d",
                         c->num_experts_per_tok, c->n_routed_experts);
    if (c->num_hash_layers > c->num_hidden_layers)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "num_hash_layers = %d, must be <= num_hidden_layers = %d",
                         c->num_hash_layers, c->num_hidden_layers);

    int total = dsv4_cfg_n_total_layers(c), first_csa = -1;
    char name[40];
    for (int l = 0; l < total; l++) {
        snprintf(name, sizeof name, "compress_ratios[%d]", l);
        if ((rc = check_int_range(name, c->compress_ratios[l], 0, CFG_MAX_DIM, err))) return rc;
        if (c->compress_ratios[l] == 4 && first_csa < 0) first_csa = l;
    }
    if (first_csa >= 0) { /* the lightning indexer exists only on CSA layers */
        if (c->index_n_heads <= 0)
            return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "index_n_heads = %d, must be > 0 for CSA layers (compress_ratios[%d] = 4)",
                             c->index_n_heads, first_csa);
        if (c->index_topk <= 0)
            return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "index_topk = %d, must be > 0 for CSA layers (compress_ratios[%d] = 4)",
                             c->index_topk, first_csa);
        if (c->index_head_dim < c->qk_rope_head_dim)
            return dsv4_fail(err, DSV4_ERR_CONFIG,
                             PFX "index_head_dim = %d, must be >= qk_rope_head_dim = %d for CSA layers (compress_ratios[%d] = 4)",
                             c->index_head_dim, c->qk_rope_head_dim, first_csa);
    }

    if (!(isfinite(c->rope_theta) && c->rope_theta > 0)) return bad_double("rope_theta", c->rope_theta, "> 0", err);
    if (!(isfinite(c->compress_rope_theta) && c->compress_rope_theta > 0))
        return bad_double("compress_rope_theta", c->compress_rope_theta, "> 0", err);
    if (!(isfinite(c->rope_factor) && c->rope_factor > 0))
        return bad_double("rope_scaling.factor", c->rope_factor, "> 0", err);
    if (!isfinite(c->rope_beta_fast)) return bad_double("rope_scaling.beta_fast", c->rope_beta_fast, "finite", err);
    if (!isfinite(c->rope_beta_slow)) return bad_double("rope_scaling.beta_slow", c->rope_beta_slow, "finite", err);
    if ((rc = check_int_range("rope_scaling.original_max_position_embeddings", c->rope_original_max_pos, 0,
                              CFG_MAX_POS, err)))
        return rc;
    if (!(isfinite(c->routed_scaling_factor) && c->routed_scaling_factor > 0))
        return bad_double("routed_scaling_factor", c->routed_scaling_factor, "> 0", err);
    if (!isfinite(c->swiglu_limit)) return bad_double("swiglu_limit", c->swiglu_limit, "finite (<= 0 turns the clamp off)", err);
    if (!(isfinite(c->hc_eps) && c->hc_eps >= 0)) return bad_double("hc_eps", c->hc_eps, ">= 0", err);
    if (!(isfinite(c->rms_norm_eps) && c->rms_norm_eps > 0))
        return bad_double("rms_norm_eps", c->rms_norm_eps, "> 0", err);
    if ((rc = check_int_range("max_position_embeddings", c->max_position_embeddings, 1, CFG_MAX_POS, err)) ||
        (rc = check_int_range("bos_token_id", c->bos_token_id, -1, c->vocab_size - 1, err)) ||
        (rc = check_int_range("eos_token_id", c->eos_token_id, -1, c->vocab_size - 1, err)))
        return rc;

    if (c->has_quant_config &&
        ((rc = check_int_range("quantization_config.weight_block_size[0]", c->quant_block[0], 1, CFG_MAX_DIM, err)) ||
         (rc = check_int_range("quantization_config.weight_block_size[1]", c->quant_block[1], 1, CFG_MAX_DIM, err))))
        return rc;
    if (!has_nul(c->quant_method, sizeof c->quant_method) || !has_nul(c->quant_fmt, sizeof c->quant_fmt) ||
        !has_nul(c->quant_scale_fmt, sizeof c->quant_scale_fmt) ||
        !has_nul(c->quant_activation_scheme, sizeof c->quant_activation_scheme) ||
        !has_nul(c->expert_dtype, sizeof c->expert_dtype) || !has_nul(c->warnings, sizeof c->warnings))
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "a string field is not NUL-terminated");

    double params = param_estimate(c);
    if (params > CFG_MAX_PARAMS)
        return dsv4_fail(err, DSV4_ERR_CONFIG, PFX "model too large: about %.3g parameters (limit %.3g)", params,
                         CFG_MAX_PARAMS);
    return 0;
}

/* ---- back to JSON ------------------------------------------------------------------- */

/* Numbers are written by us, not by cJSON: cJSON keeps a 15-digit form when it is within an
 * epsilon of the value, which can be an ulp off. Here the shortest form that reads back
 * bit-exactly is used, so parse(to_json(c)) == c. Only finite values reach this (validate). */
static cJSON *number_form(double v, int float_form) {
    char buf[40];
    if (!isfinite(v)) return cJSON_CreateNull();
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (float_form && !strpbrk(buf, ".e")) strcat(buf, ".0"); /* "10" -> "10.0", same value */
    return cJSON_CreateRaw(buf);
}
static cJSON *exact_number(double v) { return number_form(v, 0); }

static int add_num(cJSON *o, const char *key, double v) {
    cJSON *n = exact_number(v);
    if (n && cJSON_AddItemToObject(o, key, n)) return 1;
    cJSON_Delete(n);
    return 0;
}
static int add_str(cJSON *o, const char *key, const char *v) { return cJSON_AddStringToObject(o, key, v) != NULL; }

char *dsv4_config_to_json(const dsv4_config *c) {
    if (!c) return NULL;
    cJSON *o = cJSON_CreateObject(), *arr = NULL;
    int ok = o != NULL;
    if (ok) {
        cJSON *a = cJSON_AddArrayToObject(o, "architectures");
        ok = a && cJSON_AddItemToArray(a, cJSON_CreateString("DeepseekV4ForCausalLM"));
    }
    ok = ok && add_str(o, "model_type", "deepseek_v4");
    for (size_t i = 0; ok && i < sizeof INT_FIELDS / sizeof INT_FIELDS[0]; i++)
        ok = add_num(o, INT_FIELDS[i].key, *(const int *)((const char *)c + INT_FIELDS[i].off));
    ok = ok && add_num(o, "qk_rope_head_dim", c->qk_rope_head_dim);
    for (size_t i = 0; ok && i < sizeof DBL_FIELDS / sizeof DBL_FIELDS[0]; i++)
        if (ok) {
            cJSON *n = number_form(*(const double *)((const char *)c + DBL_FIELDS[i].off), DBL_FIELDS[i].float_form);
            ok = n && cJSON_AddItemToObject(o, DBL_FIELDS[i].key, n);
            if (!ok) cJSON_Delete(n);
        }
    if (ok) ok = (arr = cJSON_AddArrayToObject(o, "compress_ratios")) != NULL;
    int total = dsv4_cfg_n_total_layers(c);
    for (int l = 0; ok && l < total && l < DSV4_MAX_LAYERS; l++)
        ok = cJSON_AddItemToArray(arr, exact_number(c->compress_ratios[l]));
    if (ok) {
        if (c->rope_yarn) {
            cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");
            ok = rs && add_str(rs, "type", "yarn") && add_num(rs, "factor", c->rope_factor) &&
                 add_num(rs, "original_max_position_embeddings", (double)c->rope_original_max_pos) &&
                 add_num(rs, "beta_fast", c->rope_beta_fast) && add_num(rs, "beta_slow", c->rope_beta_slow);
        } else {
            ok = cJSON_AddNullToObject(o, "rope_scaling") != NULL;
        }
    }
    const char *score = score_name(c->scoring_func);
    ok = ok && add_str(o, "scoring_func", score ? score : "unknown") && add_str(o, "topk_method", "noaux_tc") &&
         cJSON_AddTrueToObject(o, "norm_topk_prob") && add_str(o, "hidden_act", "silu") &&
         cJSON_AddFalseToObject(o, "tie_word_embeddings") &&
         add_num(o, "max_position_embeddings", (double)c->max_position_embeddings);
    const char *tok_keys[2] = {"bos_token_id", "eos_token_id"};
    int toks[2] = {c->bos_token_id, c->eos_token_id};
    for (int t = 0; ok && t < 2; t++)
        ok = toks[t] < 0 ? cJSON_AddNullToObject(o, tok_keys[t]) != NULL : add_num(o, tok_keys[t], toks[t]);
    if (ok && c->expert_dtype[0]) ok = add_str(o, "expert_dtype", c->expert_dtype);
    if (ok && c->has_quant_config) {
        cJSON *q = cJSON_AddObjectToObject(o, "quantization_config");
        cJSON *blk = cJSON_CreateArray();
        if (blk && !(cJSON_AddItemToArray(blk, exact_number(c->quant_block[0])) &&
                     cJSON_AddItemToArray(blk, exact_number(c->quant_block[1])))) {
            cJSON_Delete(blk);
            blk = NULL;
        }
        ok = q && blk && add_str(q, "activation_scheme", c->quant_activation_scheme) &&
             add_str(q, "fmt", c->quant_fmt) && add_str(q, "quant_method", c->quant_method) &&
             add_str(q, "scale_fmt", c->quant_scale_fmt);
        if (ok) ok = cJSON_AddItemToObject(q, "weight_block_size", blk);
        else cJSON_Delete(blk);
    }
    ok = ok && add_str(o, "torch_dtype", "bfloat16");
    char *out = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    return out;
}
