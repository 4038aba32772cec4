/* test_config.c — config.json parsing and validation.
 *
 * Expected values come from spec/model.md §1 (the Flash / tiny / small columns), not from
 * the parser. Invalid configs are the released Flash config.json with one key changed, so
 * each test isolates one rule and asserts its own message. */
#include <cjson/cJSON.h>
#include <stdint.h>

#include "model/config.h"
#include "test.h"

static char flash_text[1 << 16];

static int load_flash_text(void) {
    char path[1024];
    FILE *f = fopen(test_shared("oracle/configs/deepseek_v4_flash_reference.json", path, sizeof path), "rb");
    size_t n = f ? fread(flash_text, 1, sizeof flash_text - 1, f) : 0;
    if (f) fclose(f);
    flash_text[n] = 0;
    CHECK_MSG(n > 100, "cannot read %s", path);
    return n > 100;
}

/* Sets key (a top-level key, or "outer.inner") of json to the JSON text val, kept
 * verbatim (so "1e999" or "-0.0" reach the parser as written); val NULL deletes the key.
 * Returns a malloc'd JSON text. */
static char *modify(const char *json, const char *key, const char *val) {
    static const char MARK[] = "\"@@VALUE@@\"";
    cJSON *root = cJSON_Parse(json);
    if (!root) return NULL;
    cJSON *obj = root;
    char k[128];
    snprintf(k, sizeof k, "%s", key);
    char *dot = strchr(k, '.');
    if (dot) {
        *dot = 0;
        obj = cJSON_GetObjectItemCaseSensitive(root, k);
        memmove(k, dot + 1, strlen(dot + 1) + 1);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(obj, k);
    if (val) cJSON_AddStringToObject(obj, k, "@@VALUE@@");
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char *at = val ? strstr(txt, MARK) : NULL;
    if (!at) return txt;
    char *out = malloc(strlen(txt) + strlen(val) + 1);
    sprintf(out, "%.*s%s%s", (int)(at - txt), txt, val, at + strlen(MARK));
    free(txt);
    return out;
}

static int parse_str(const char *json, dsv4_config *c, dsv4_err *e) {
    memset(c, 0, sizeof *c);
    memset(e, 0, sizeof *e);
    return dsv4_config_parse(json, strlen(json), c, e);
}

/* Parses Flash with key set to val (NULL: removed). */
static int parse_mod(const char *key, const char *val, dsv4_config *c, dsv4_err *e) {
    char *txt = modify(flash_text, key, val);
    if (!txt) return -1;
    int rc = parse_str(txt, c, e);
    free(txt);
    return rc;
}

/* The Flash config with one key changed must fail with a message containing want. */
#define EXPECT_BAD(key, val, want) do { \
    dsv4_config c_; dsv4_err e_; \
    int rc_ = parse_mod(key, val, &c_, &e_); \
    CHECK_MSG(rc_ == DSV4_ERR_CONFIG, "%s = %s: rc %d", key, val ? val : "(removed)", rc_); \
    CHECK_ERR(e_, DSV4_ERR_CONFIG, want); \
} while (0)

#define EXPECT_OK(key, val, c) do { \
    dsv4_err e_; \
    int rc_ = parse_mod(key, val, c, &e_); \
    CHECK_MSG(rc_ == 0, "%s = %s: %s", key, val ? val : "(removed)", e_.msg); \
} while (0)

static void check_flash_values(const dsv4_config *c) {
    CHECK(c->vocab_size == 129280);
    CHECK(c->hidden_size == 4096);
    CHECK(c->num_hidden_layers == 43);
    CHECK(c->num_attention_heads == 64);
    CHECK(c->num_key_value_heads == 1);
    CHECK(c->head_dim == 512);
    CHECK(c->qk_rope_head_dim == 64);
    CHECK(c->q_lora_rank == 1024);
    CHECK(c->o_lora_rank == 1024);
    CHECK(c->o_groups == 8);
    CHECK(c->sliding_window == 128);
    CHECK(c->rope_theta == 10000.0);
    CHECK(c->compress_rope_theta == 160000.0);
    CHECK(c->rope_yarn == 1);
    CHECK(c->rope_factor == 16.0);
    CHECK(c->rope_original_max_pos == 65536);
    CHECK(c->rope_beta_fast == 32.0 && c->rope_beta_slow == 1.0);
    CHECK(c->index_n_heads == 64 && c->index_head_dim == 128 && c->index_topk == 512);
    CHECK(c->n_routed_experts == 256 && c->n_shared_experts == 1 && c->num_experts_per_tok == 6);
    CHECK(c->num_hash_layers == 3);
    CHECK(c->scoring_func == DSV4_SCORE_SQRTSOFTPLUS);
    CHECK(c->routed_scaling_factor == 1.5);
    CHECK(c->swiglu_limit == 10.0);
    CHECK(c->moe_intermediate_size == 2048);
    CHECK(c->hc_mult == 4 && c->hc_sinkhorn_iters == 20);
    CHECK(c->hc_eps == 1e-6 && c->rms_norm_eps == 1e-6);
    CHECK(c->num_nextn_predict_layers == 1);
    CHECK(c->max_position_embeddings == 1048576);
    CHECK(c->bos_token_id == 0 && c->eos_token_id == 1);
    /* layers 0,1: 0; 2..42 alternate 4 (even) / 128 (odd); MTP layer 43: 0 */
    CHECK(dsv4_cfg_n_total_layers(c) == 44);
    int bad = 0, csa = 0, hca = 0;
    for (int l = 0; l < 44; l++) {
        int want = (l < 2 || l == 43) ? 0 : (l % 2 == 0 ? 4 : 128);
        bad += c->compress_ratios[l] != want;
        csa += dsv4_cfg_is_csa(c, l);
        hca += c->compress_ratios[l] > 0 && !dsv4_cfg_is_csa(c, l);
    }
    CHECK(bad == 0);
    CHECK(csa == 21 && hca == 20);
    CHECK(dsv4_cfg_nope(c) == 448 && dsv4_cfg_mix(c) == 24);
}

static void test_flash_reference(void) {
    char path[1024];
    dsv4_config c;
    dsv4_err e = {0};
    int rc = dsv4_config_load(test_shared("oracle/configs/deepseek_v4_flash_reference.json", path, sizeof path), &c, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc) return;
    check_flash_values(&c);
    CHECK(c.has_quant_config == 1);
    CHECK(strcmp(c.quant_method, "fp8") == 0 && strcmp(c.quant_fmt, "e4m3") == 0);
    CHECK(strcmp(c.quant_scale_fmt, "ue8m0") == 0 && strcmp(c.quant_activation_scheme, "dynamic") == 0);
    CHECK(c.quant_block[0] == 128 && c.quant_block[1] == 128);
    CHECK(strcmp(c.expert_dtype, "fp4") == 0);
    CHECK(c.warnings[0] == 0);
}

static void test_golden_tiny(void) {
    char path[1024];
    dsv4_config c;
    dsv4_err e = {0};
    int rc = dsv4_config_load(test_shared("golden/tiny_s0/model/config.json", path, sizeof path), &c, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc) return;
    CHECK(c.vocab_size == 512 && c.hidden_size == 128 && c.num_hidden_layers == 6);
    CHECK(c.num_attention_heads == 4 && c.head_dim == 64 && c.qk_rope_head_dim == 16);
    CHECK(c.q_lora_rank == 64 && c.o_lora_rank == 32 && c.o_groups == 2 && c.sliding_window == 16);
    const int ratios[7] = {0, 0, 4, 128, 4, 128, 0};
    CHECK(dsv4_cfg_n_total_layers(&c) == 7);
    for (int l = 0; l < 7; l++) CHECK_MSG(c.compress_ratios[l] == ratios[l], "layer %d", l);
    CHECK(c.index_n_heads == 8 && c.index_head_dim == 32 && c.index_topk == 4);
    CHECK(c.n_routed_experts == 8 && c.num_experts_per_tok == 2 && c.num_hash_layers == 3);
    CHECK(c.swiglu_limit == 2.0 && c.moe_intermediate_size == 64 && c.hc_mult == 4);
    CHECK(c.rope_yarn && c.rope_factor == 16.0 && c.rope_original_max_pos == 65536);
    CHECK(c.has_quant_config == 0 && c.expert_dtype[0] == 0);
}

static void test_golden_small(void) {
    char path[1024];
    dsv4_config c;
    dsv4_err e = {0};
    int rc = dsv4_config_load(test_shared("golden/small_s1/model/config.json", path, sizeof path), &c, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc) return;
    CHECK(c.vocab_size == 1024 && c.hidden_size == 192 && c.num_hidden_layers == 7);
    CHECK(c.num_attention_heads == 4 && c.head_dim == 128 && c.qk_rope_head_dim == 32);
    CHECK(c.q_lora_rank == 96 && c.o_lora_rank == 64 && c.o_groups == 2 && c.sliding_window == 128);
    const int ratios[8] = {0, 0, 4, 128, 4, 128, 4, 0};
    CHECK(dsv4_cfg_n_total_layers(&c) == 8);
    for (int l = 0; l < 8; l++) CHECK_MSG(c.compress_ratios[l] == ratios[l], "layer %d", l);
    CHECK(c.index_n_heads == 8 && c.index_head_dim == 64 && c.index_topk == 8);
    CHECK(c.n_routed_experts == 8 && c.num_experts_per_tok == 3 && c.swiglu_limit == 10.0);
}

static const char *REQUIRED[] = {
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
    "q_lora_rank", "o_lora_rank", "o_groups", "sliding_window", "compress_ratios",
    "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
};

/* Only the required keys: every other field takes the released Flash value. */
static void test_defaults(void) {
    cJSON *src = cJSON_Parse(flash_text), *min = cJSON_CreateObject();
    for (size_t i = 0; i < sizeof REQUIRED / sizeof *REQUIRED; i++)
        cJSON_AddItemToObject(min, REQUIRED[i], cJSON_Duplicate(cJSON_GetObjectItem(src, REQUIRED[i]), 1));
    char *txt = cJSON_PrintUnformatted(min);
    dsv4_config c;
    dsv4_err e;
    int rc = parse_str(txt, &c, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (!rc) {
        check_flash_values(&c);
        CHECK(c.has_quant_config == 0 && c.expert_dtype[0] == 0);
    }
    free(txt);
    cJSON_Delete(min);
    cJSON_Delete(src);

    char want[128];
    for (size_t i = 0; i < sizeof REQUIRED / sizeof *REQUIRED; i++) {
        snprintf(want, sizeof want, "config.json: %s is missing", REQUIRED[i]);
        EXPECT_BAD(REQUIRED[i], NULL, want);
        EXPECT_BAD(REQUIRED[i], "null", want); /* null means "not given" */
    }
}

static void test_rope_scaling(void) {
    dsv4_config c;
    EXPECT_OK("rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":8,\"original_max_position_embeddings\":4096,"
                              "\"beta_fast\":16,\"beta_slow\":2}", &c);
    CHECK(c.rope_yarn && c.rope_factor == 8 && c.rope_original_max_pos == 4096);
    CHECK(c.rope_beta_fast == 16 && c.rope_beta_slow == 2);
    EXPECT_OK("rope_scaling", "{\"type\":\"yarn\",\"rope_type\":\"yarn\",\"factor\":4}", &c);
    CHECK(c.rope_yarn && c.rope_factor == 4 && c.rope_original_max_pos == 65536); /* rest: defaults */
    EXPECT_OK("rope_scaling", "null", &c);
    CHECK(!c.rope_yarn && c.rope_factor == 1 && c.rope_original_max_pos == 0);
    EXPECT_OK("rope_scaling", "{\"type\":\"default\"}", &c);
    CHECK(!c.rope_yarn && c.rope_original_max_pos == 0);
    EXPECT_OK("rope_scaling", NULL, &c); /* absent: the release's YaRN */
    CHECK(c.rope_yarn && c.rope_factor == 16 && c.rope_original_max_pos == 65536);
    EXPECT_BAD("rope_scaling", "{\"type\":\"linear\",\"factor\":2}",
               "config.json: rope_scaling.type = \"linear\" is not supported");
    EXPECT_BAD("rope_scaling", "{\"rope_type\":\"dynamic\"}", "config.json: rope_scaling.rope_type = \"dynamic\"");
    EXPECT_BAD("rope_scaling", "{\"type\":\"yarn\",\"rope_type\":\"default\"}",
               "config.json: rope_scaling.type = \"yarn\" but rope_scaling.rope_type = \"default\"");
    EXPECT_BAD("rope_scaling", "{\"factor\":2}", "config.json: rope_scaling.type is missing");
    EXPECT_BAD("rope_scaling", "5", "config.json: rope_scaling is a number, must be an object or null");
    EXPECT_BAD("rope_scaling.factor", "0", "config.json: rope_scaling.factor = 0, must be > 0");
    EXPECT_BAD("rope_scaling.factor", "\"16\"", "config.json: rope_scaling.factor is a string, must be a number");
    EXPECT_BAD("rope_scaling.original_max_position_embeddings", "-1",
               "config.json: rope_scaling.original_max_position_embeddings = -1, must be >= 0");
    EXPECT_BAD("rope_scaling.original_max_position_embeddings", "65536.5",
               "config.json: rope_scaling.original_max_position_embeddings = 65536.5, must be an integer");
    EXPECT_BAD("rope_scaling.type", "7", "config.json: rope_scaling.type is a number, must be a string");
}

static void test_rotary_dims(void) {
    dsv4_config c;
    char *t1 = modify(flash_text, "qk_rope_head_dim", NULL);
    char *t2 = modify(t1, "partial_rotary_factor", "0.25");
    dsv4_err e;
    CHECK_MSG(parse_str(t1, &c, &e) == 0 && c.qk_rope_head_dim == 64, "%s", e.msg); /* 512 * 64/512 */
    CHECK_MSG(parse_str(t2, &c, &e) == 0 && c.qk_rope_head_dim == 128, "%s", e.msg);
    char *t3 = modify(t1, "partial_rotary_factor", "1.5");
    CHECK(parse_str(t3, &c, &e) == DSV4_ERR_CONFIG);
    CHECK_ERR(e, DSV4_ERR_CONFIG, "config.json: partial_rotary_factor = 1.5, must be in (0, 1]");
    free(t1), free(t2), free(t3);
}

static void test_compress_ratios(void) {
    dsv4_config c;
    /* 46 entries (third-party copies): the first 44 are used. */
    EXPECT_OK("compress_ratios",
              "[0,0,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,"
              "4,128,4,128,4,128,4,128,4,128,4,128,4,0,4,4]", &c);
    CHECK(c.compress_ratios[42] == 4 && c.compress_ratios[43] == 0);
    CHECK_MSG(strstr(c.warnings, "46 entries") != NULL, "warnings '%s'", c.warnings);
    /* 43 entries: the MTP entry is missing, taken as 0 with a warning. */
    EXPECT_OK("compress_ratios",
              "[0,0,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,"
              "4,128,4,128,4,128,4,128,4,128,4,128,4]", &c);
    CHECK(c.compress_ratios[42] == 4 && c.compress_ratios[43] == 0);
    CHECK_MSG(strstr(c.warnings, "missing MTP entries taken as 0") != NULL, "warnings '%s'", c.warnings);
    /* fewer than the main layers: an error */
    EXPECT_BAD("compress_ratios", "[0,0,4,128]",
               "config.json: compress_ratios has 4 entries, fewer than num_hidden_layers = 43");
    EXPECT_BAD("compress_ratios", "{}", "config.json: compress_ratios is an object, must be an array");
    EXPECT_BAD("compress_ratios",
               "[0,0,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,"
               "4,128,4,128,4,128,4,128,4,128,4,128,4,\"0\"]",
               "config.json: compress_ratios[43] is a string, must be a number");
    EXPECT_BAD("compress_ratios",
               "[0,0,4,128,4,-128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,"
               "4,128,4,128,4,128,4,128,4,128,4,128,4,0]",
               "config.json: compress_ratios[5] = -128, must be >= 0");
    /* no MTP block: entry 43 is an extra, noted but unused */
    EXPECT_OK("num_nextn_predict_layers", "0", &c);
    CHECK(dsv4_cfg_n_total_layers(&c) == 43 && c.compress_ratios[43] == 0);
    CHECK_MSG(strstr(c.warnings, "only the first 43") != NULL, "warnings '%s'", c.warnings);
}

/* One test per load-time rule of spec/model.md §1, each with its message. */
static void test_validation_rules(void) {
    EXPECT_BAD("num_key_value_heads", "2", "config.json: num_key_value_heads = 2, must be 1");
    EXPECT_BAD("n_shared_experts", "2", "config.json: n_shared_experts = 2, must be 1");
    EXPECT_BAD("n_shared_experts", "0", "config.json: n_shared_experts = 0, must be 1");
    EXPECT_BAD("hidden_act", "\"gelu\"", "config.json: hidden_act = \"gelu\", must be \"silu\"");
    EXPECT_BAD("tie_word_embeddings", "true", "config.json: tie_word_embeddings = true, must be false");
    EXPECT_BAD("scoring_func", "\"relu\"", "config.json: scoring_func = \"relu\" is unknown");
    EXPECT_BAD("o_groups", "7", "config.json: o_groups = 7 does not divide num_attention_heads * head_dim = 32768");
    EXPECT_BAD("qk_rope_head_dim", "63", "config.json: qk_rope_head_dim = 63, must be even");
    EXPECT_BAD("qk_rope_head_dim", "514", "config.json: qk_rope_head_dim = 514, must be <= head_dim = 512");
    EXPECT_BAD("num_experts_per_tok", "257", "config.json: num_experts_per_tok = 257, must be <= n_routed_experts = 256");
    EXPECT_BAD("num_hash_layers", "44", "config.json: num_hash_layers = 44, must be <= num_hidden_layers = 43");
    EXPECT_BAD("num_hash_layers", "-1", "config.json: num_hash_layers = -1, must be >= 0");
    EXPECT_BAD("sliding_window", "0", "config.json: sliding_window = 0, must be >= 1");
    EXPECT_BAD("hc_mult", "0", "config.json: hc_mult = 0, must be >= 1");
    EXPECT_BAD("hc_mult", "17", "config.json: hc_mult = 17, must be <= 16");
    EXPECT_BAD("hc_sinkhorn_iters", "0", "config.json: hc_sinkhorn_iters = 0, must be >= 1");
    EXPECT_BAD("index_n_heads", "0", "config.json: index_n_heads = 0, must be > 0 for CSA layers (compress_ratios[2] = 4)");
    EXPECT_BAD("index_topk", "0", "config.json: index_topk = 0, must be > 0 for CSA layers");
    EXPECT_BAD("index_head_dim", "32", "config.json: index_head_dim = 32, must be >= qk_rope_head_dim = 64 for CSA layers");
    EXPECT_BAD("num_nextn_predict_layers", "2", "config.json: num_nextn_predict_layers = 2, must be 0 or 1");
    EXPECT_BAD("num_nextn_predict_layers", "-1", "config.json: num_nextn_predict_layers = -1, must be 0 or 1");
    EXPECT_BAD("num_hidden_layers", "512", "config.json: num_hidden_layers = 512, must be <= 511");
    EXPECT_BAD("model_type", "\"llama\"", "config.json: model_type = \"llama\", must be \"deepseek_v4\"");

    /* Without CSA layers the indexer sizes do not matter. */
    dsv4_config c;
    char *t = modify(flash_text, "compress_ratios",
                     "[0,0,0,128,0,128,0,128,0,128,0,128,0,128,0,128,0,128,0,128,0,128,0,128,0,128,0,128,0,128,"
                     "0,128,0,128,0,128,0,128,0,128,0,128,0,0]");
    char *t2 = modify(t, "index_n_heads", "0");
    char *t3 = modify(t2, "index_head_dim", "0");
    dsv4_err e;
    CHECK_MSG(parse_str(t3, &c, &e) == 0 && c.index_n_heads == 0, "%s", e.msg);
    free(t), free(t2), free(t3);

    /* Positive sizes. */
    static const char *sizes[] = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                  "head_dim", "q_lora_rank", "o_lora_rank", "o_groups", "n_routed_experts",
                                  "num_experts_per_tok", "moe_intermediate_size"};
    char want[160];
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        snprintf(want, sizeof want, "config.json: %s = 0, must be >= 1", sizes[i]);
        EXPECT_BAD(sizes[i], "0", want);
        snprintf(want, sizeof want, "config.json: %s = -5, must be >= 1", sizes[i]);
        EXPECT_BAD(sizes[i], "-5", want);
    }
    EXPECT_BAD("qk_rope_head_dim", "0", "config.json: qk_rope_head_dim = 0, must be >= 1");
    /* Bounded sizes, so products fit in 64 bits. */
    EXPECT_BAD("hidden_size", "2097152", "config.json: hidden_size = 2097152, must be <= 1048576");
    EXPECT_BAD("vocab_size", "8388608", "config.json: vocab_size = 8388608, must be <= 4194304");
    EXPECT_BAD("index_topk", "2000000", "config.json: index_topk = 2000000, must be <= 1048576");
    EXPECT_BAD("compress_ratios",
               "[0,0,4,128,4,99999999,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,"
               "4,128,4,128,4,128,4,128,4,128,4,128,4,0]",
               "config.json: compress_ratios[5] = 99999999, must be <= 1048576");
    {
        char *t1 = modify(flash_text, "moe_intermediate_size", "1048576");
        char *t2 = modify(t1, "n_routed_experts", "65536");
        CHECK(parse_str(t2, &c, &e) == DSV4_ERR_CONFIG);
        CHECK_ERR(e, DSV4_ERR_CONFIG, "config.json: model too large: about ");
        CHECK_ERR(e, DSV4_ERR_CONFIG, "parameters (limit 1.13e+15)");
        free(t1), free(t2);
    }
    EXPECT_BAD("max_position_embeddings", "0", "config.json: max_position_embeddings = 0, must be >= 1");
    EXPECT_BAD("max_position_embeddings", "1e15", "config.json: max_position_embeddings = 1000000000000000, must be <= 1099511627776");

    /* Real-valued fields. */
    EXPECT_BAD("rope_theta", "0", "config.json: rope_theta = 0, must be > 0");
    EXPECT_BAD("rope_theta", "1e999", "config.json: rope_theta = inf, must be > 0");
    EXPECT_BAD("compress_rope_theta", "-1", "config.json: compress_rope_theta = -1, must be > 0");
    EXPECT_BAD("routed_scaling_factor", "0", "config.json: routed_scaling_factor = 0, must be > 0");
    EXPECT_BAD("rms_norm_eps", "0", "config.json: rms_norm_eps = 0, must be > 0");
    EXPECT_BAD("hc_eps", "-1e-6", "config.json: hc_eps = -1e-06, must be >= 0");
    EXPECT_BAD("swiglu_limit", "-1e999", "config.json: swiglu_limit = -inf, must be finite");
    EXPECT_OK("swiglu_limit", "0", &c); /* clamp off */
    CHECK(c.swiglu_limit == 0);

    /* Token ids. */
    EXPECT_BAD("bos_token_id", "129280", "config.json: bos_token_id = 129280, must be <= 129279");
    EXPECT_BAD("eos_token_id", "-2", "config.json: eos_token_id = -2, must be >= -1");
    EXPECT_OK("bos_token_id", "null", &c);
    CHECK(c.bos_token_id == -1 && c.eos_token_id == 1);

    /* quantization_config */
    EXPECT_BAD("quantization_config.weight_block_size", "[0,128]",
               "config.json: quantization_config.weight_block_size[0] = 0, must be >= 1");
    EXPECT_BAD("quantization_config.weight_block_size", "[128]",
               "config.json: quantization_config.weight_block_size must be an array of 2 integers");
    EXPECT_BAD("quantization_config", "[]", "config.json: quantization_config is an array, must be an object");
    EXPECT_BAD("quantization_config.fmt", "1", "config.json: quantization_config.fmt is a number, must be a string");
    /* a layout the loader does not implement parses (it is well formed) but is refused for
     * loading, never read as the release's */
    const char *why = "is not supported: this build reads fp8 (e4m3) weights with ue8m0 scales per "
                      "128x128 block and dynamic activations";
    char msg[256];
    const char *const unsupported[][3] = {
        {"quantization_config.quant_method", "\"awq\"", "quantization_config.quant_method = \"awq\""},
        {"quantization_config.fmt", "\"e5m2\"", "quantization_config.fmt = \"e5m2\""},
        {"quantization_config.scale_fmt", "\"fp32\"", "quantization_config.scale_fmt = \"fp32\""},
        {"quantization_config.activation_scheme", "\"static\"", "quantization_config.activation_scheme = \"static\""},
        {"quantization_config.weight_block_size", "[64,128]", "quantization_config.weight_block_size = [64, 128]"},
        {"quantization_config.weight_block_size", "[128,256]", "quantization_config.weight_block_size = [128, 256]"},
    };
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        EXPECT_OK(unsupported[i][0], unsupported[i][1], &c);
        snprintf(msg, sizeof msg, "config.json: %s %s", unsupported[i][2], why);
        CHECK(dsv4_config_check_loadable(&c, &e) == DSV4_ERR_CONFIG);
        CHECK_ERR(e, DSV4_ERR_CONFIG, msg);
    }
    EXPECT_OK("quantization_config", NULL, &c); /* the release's layout, or none, loads */
    CHECK_MSG(dsv4_config_check_loadable(&c, &e) == 0, "%s", e.msg);
    EXPECT_OK("quantization_config", "{\"quant_method\":\"fp8\"}", &c); /* other keys: release values */
    CHECK(c.has_quant_config && c.quant_block[0] == 128 && strcmp(c.quant_scale_fmt, "ue8m0") == 0);
    EXPECT_OK("quantization_config", "null", &c);
    CHECK(!c.has_quant_config);
}

/* JSON of the wrong type, or not JSON at all. */
static void test_json_types(void) {
    EXPECT_BAD("hidden_size", "\"4096\"", "config.json: hidden_size is a string, must be a number");
    EXPECT_BAD("hidden_size", "4096.5", "config.json: hidden_size = 4096.5, must be an integer");
    EXPECT_BAD("hidden_size", "1e20", "config.json: hidden_size = 1e+20, out of range");
    EXPECT_BAD("hidden_size", "true", "config.json: hidden_size is a boolean, must be a number");
    EXPECT_BAD("num_key_value_heads", "[1]", "config.json: num_key_value_heads is an array, must be a number");
    EXPECT_BAD("rope_theta", "{}", "config.json: rope_theta is an object, must be a number");
    EXPECT_BAD("tie_word_embeddings", "0", "config.json: tie_word_embeddings is a number, must be true or false");
    EXPECT_BAD("norm_topk_prob", "\"yes\"", "config.json: norm_topk_prob is a string, must be true or false");
    EXPECT_BAD("scoring_func", "1", "config.json: scoring_func is a number, must be a string");
    EXPECT_BAD("expert_dtype", "\"a-very-long-expert-dtype-name\"",
               "config.json: expert_dtype = \"a-very-long-expert-dtype-name\" is too long (at most 15 characters)");
    EXPECT_BAD("bos_token_id", "\"<s>\"", "config.json: bos_token_id is a string, must be a number");

    dsv4_config c;
    dsv4_err e;
    EXPECT_OK("hidden_act", "null", &c); /* null: not given */
    CHECK(parse_str("[1, 2]", &c, &e) == DSV4_ERR_CONFIG);
    CHECK_ERR(e, DSV4_ERR_CONFIG, "config.json: top level is an array, must be an object");
    CHECK(parse_str("{\n  \"vocab_size\": 12,\n  \"hidden_size\": }", &c, &e) == DSV4_ERR_CONFIG);
    CHECK_ERR(e, DSV4_ERR_CONFIG, "config.json: JSON syntax error at byte 39 (line 3)");
    CHECK(parse_str("", &c, &e) == DSV4_ERR_CONFIG);
    CHECK_ERR(e, DSV4_ERR_CONFIG, "config.json: JSON syntax error at byte 0");
    char *t = malloc(strlen(flash_text) + 8);
    sprintf(t, "%s {}", flash_text);
    CHECK(parse_str(t, &c, &e) == DSV4_ERR_CONFIG);
    CHECK_ERR(e, DSV4_ERR_CONFIG, "text after the object");
    sprintf(t, "%s \n", flash_text);
    CHECK_MSG(parse_str(t, &c, &e) == 0, "%s", e.msg);
    free(t);
    /* duplicate keys: readers disagree on which wins */
    const char *brace = strchr(flash_text, '{');
    t = malloc(strlen(flash_text) + 64);
    sprintf(t, "{\"hidden_size\": 2048, %s", brace + 1);
    CHECK(parse_str(t, &c, &e) == DSV4_ERR_CONFIG);
    CHECK_ERR(e, DSV4_ERR_CONFIG, "config.json: duplicate key \"hidden_size\"");
    free(t);
    /* the text need not be NUL-terminated: parse exactly len bytes */
    size_t n = strlen(flash_text);
    char *exact = malloc(n);
    memcpy(exact, flash_text, n);
    CHECK(dsv4_config_parse(exact, n, &c, &e) == 0);
    CHECK(dsv4_config_parse(exact, n - 2, &c, &e) == DSV4_ERR_CONFIG); /* cut inside the object */
    free(exact);
}

static void roundtrip(const char *what, const char *json) {
    dsv4_config a, b;
    dsv4_err e;
    int rc = parse_str(json, &a, &e);
    CHECK_MSG(rc == 0, "%s: %s", what, e.msg);
    if (rc) return;
    char *out = dsv4_config_to_json(&a);
    CHECK(out != NULL);
    if (!out) return;
    rc = parse_str(out, &b, &e);
    CHECK_MSG(rc == 0, "%s: reparse: %s\n%s", what, e.msg, out);
    memset(a.warnings, 0, sizeof a.warnings); /* the written list is complete */
    CHECK_MSG(rc == 0 && memcmp(&a, &b, sizeof a) == 0, "%s: round trip differs\n%s", what, out);
    CHECK(b.warnings[0] == 0);
    CHECK(!!strstr(out, "\"quantization_config\"") == a.has_quant_config);
    free(out);
}

/* The text after "key": in a written config (cJSON_Print puts a tab there). */
static const char *written_value(const char *out, const char *key, char *buf, size_t n) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(out, pat);
    if (!p) return "";
    p += strlen(pat);
    while (*p == ' ' || *p == '\t') p++;
    size_t k = strcspn(p, ",\n}");
    snprintf(buf, n, "%.*s", (int)(k < n ? k : n - 1), p);
    return buf;
}

/* Issue 16 item 7: float fields stay floats when integral ("swiglu_limit": 10.0, not 10);
 * the rope bases stay integers, as the release's config.json has them. */
static void test_number_forms(void) {
    dsv4_config c;
    dsv4_err e;
    CHECK(parse_str(flash_text, &c, &e) == 0);
    c.swiglu_limit = 10.0, c.routed_scaling_factor = 2.0, c.rms_norm_eps = 1e-6, c.rope_theta = 10000.0;
    char *out = dsv4_config_to_json(&c), v[64];
    CHECK(out != NULL);
    if (!out) return;
    CHECK_MSG(strcmp(written_value(out, "swiglu_limit", v, sizeof v), "10.0") == 0, "swiglu_limit written as '%s'", v);
    CHECK_MSG(strcmp(written_value(out, "routed_scaling_factor", v, sizeof v), "2.0") == 0, "written as '%s'", v);
    CHECK_MSG(strcmp(written_value(out, "rms_norm_eps", v, sizeof v), "1e-06") == 0, "written as '%s'", v);
    CHECK_MSG(strcmp(written_value(out, "rope_theta", v, sizeof v), "10000") == 0, "rope_theta written as '%s'", v);
    CHECK_MSG(strcmp(written_value(out, "hidden_size", v, sizeof v), "4096") == 0, "hidden_size written as '%s'", v);
    free(out);
}

static void test_roundtrip(void) {
    roundtrip("flash", flash_text);
    char path[1024], *txt;
    const char *golden[2] = {"golden/tiny_s0/model/config.json", "golden/small_s1/model/config.json"};
    for (int g = 0; g < 2; g++) {
        FILE *f = fopen(test_shared(golden[g], path, sizeof path), "rb");
        static char buf[1 << 16];
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f) fclose(f);
        buf[n] = 0;
        roundtrip(golden[g], buf);
    }
    struct { const char *key, *val; } variants[] = {
        {"rope_scaling", "null"},
        {"scoring_func", "\"sigmoid\""},
        {"scoring_func", "\"softmax\""},
        {"num_nextn_predict_layers", "0"},
        {"bos_token_id", "null"},
        {"quantization_config", NULL},
        {"expert_dtype", NULL},
        {"swiglu_limit", "-0.0"},
        {"rms_norm_eps", "1.2345678901234567e-7"},
        {"routed_scaling_factor", "0.30000000000000004"}, /* "0.3" is an ulp off */
        {"max_position_embeddings", "1099511627776"},
        {"rope_scaling", "{\"type\":\"yarn\",\"factor\":2.5,\"original_max_position_embeddings\":0}"},
        {"compress_ratios", "[0,0,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,"
                            "4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4]"},
    };
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        txt = modify(flash_text, variants[i].key, variants[i].val);
        roundtrip(variants[i].key, txt);
        free(txt);
    }
}

/* Every field away from its default, so a field the parser or writer drops shows up. */
static const char *ODD_CONFIG =
    "{\"model_type\": \"deepseek_v4\", \"vocab_size\": 1000, \"hidden_size\": 96, \"num_hidden_layers\": 4,"
    " \"num_attention_heads\": 6, \"num_key_value_heads\": 1, \"head_dim\": 40, \"qk_rope_head_dim\": 8,"
    " \"q_lora_rank\": 48, \"o_lora_rank\": 24, \"o_groups\": 3, \"sliding_window\": 7,"
    " \"compress_ratios\": [4, 0, 16, 4, 0], \"rope_theta\": 5000.5, \"compress_rope_theta\": 12345.25,"
    " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 3.5, \"original_max_position_embeddings\": 2048,"
    " \"beta_fast\": 24, \"beta_slow\": 0.5}, \"index_n_heads\": 5, \"index_head_dim\": 12, \"index_topk\": 9,"
    " \"n_routed_experts\": 10, \"n_shared_experts\": 1, \"num_experts_per_tok\": 4, \"num_hash_layers\": 2,"
    " \"scoring_func\": \"softmax\", \"routed_scaling_factor\": 2.25, \"swiglu_limit\": 7.5,"
    " \"moe_intermediate_size\": 56, \"hc_mult\": 3, \"hc_sinkhorn_iters\": 11, \"hc_eps\": 3e-5,"
    " \"rms_norm_eps\": 2e-5, \"num_nextn_predict_layers\": 1, \"max_position_embeddings\": 8192,"
    " \"bos_token_id\": 5, \"eos_token_id\": 7, \"expert_dtype\": \"fp8\", \"quantization_config\":"
    " {\"quant_method\": \"fp8x\", \"fmt\": \"e5m2\", \"scale_fmt\": \"f32\", \"weight_block_size\": [64, 32],"
    " \"activation_scheme\": \"static\"}}";

static void test_every_field(void) {
    dsv4_config c;
    dsv4_err e;
    int rc = parse_str(ODD_CONFIG, &c, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc) return;
    CHECK(c.vocab_size == 1000 && c.hidden_size == 96 && c.num_hidden_layers == 4);
    CHECK(c.num_attention_heads == 6 && c.head_dim == 40 && c.qk_rope_head_dim == 8);
    CHECK(c.q_lora_rank == 48 && c.o_lora_rank == 24 && c.o_groups == 3 && c.sliding_window == 7);
    CHECK(c.compress_ratios[0] == 4 && c.compress_ratios[1] == 0 && c.compress_ratios[2] == 16);
    CHECK(c.compress_ratios[3] == 4 && c.compress_ratios[4] == 0);
    CHECK(c.rope_theta == 5000.5 && c.compress_rope_theta == 12345.25);
    CHECK(c.rope_yarn && c.rope_factor == 3.5 && c.rope_original_max_pos == 2048);
    CHECK(c.rope_beta_fast == 24 && c.rope_beta_slow == 0.5);
    CHECK(c.index_n_heads == 5 && c.index_head_dim == 12 && c.index_topk == 9);
    CHECK(c.n_routed_experts == 10 && c.num_experts_per_tok == 4 && c.num_hash_layers == 2);
    CHECK(c.scoring_func == DSV4_SCORE_SOFTMAX && c.routed_scaling_factor == 2.25 && c.swiglu_limit == 7.5);
    CHECK(c.moe_intermediate_size == 56 && c.hc_mult == 3 && c.hc_sinkhorn_iters == 11);
    CHECK(c.hc_eps == 3e-5 && c.rms_norm_eps == 2e-5 && c.num_nextn_predict_layers == 1);
    CHECK(c.max_position_embeddings == 8192 && c.bos_token_id == 5 && c.eos_token_id == 7);
    CHECK(strcmp(c.expert_dtype, "fp8") == 0 && c.has_quant_config);
    CHECK(strcmp(c.quant_method, "fp8x") == 0 && strcmp(c.quant_fmt, "e5m2") == 0);
    CHECK(strcmp(c.quant_scale_fmt, "f32") == 0 && strcmp(c.quant_activation_scheme, "static") == 0);
    CHECK(c.quant_block[0] == 64 && c.quant_block[1] == 32);
    CHECK(c.warnings[0] == 0);
    roundtrip("every field", ODD_CONFIG);
}

static void test_validate_struct(void) {
    dsv4_config c;
    dsv4_err e;
    CHECK(parse_str(flash_text, &c, &e) == 0);
    CHECK(dsv4_config_validate(&c, &e) == 0);
    dsv4_config d = c;
    d.scoring_func = (dsv4_score_func)7;
    CHECK(dsv4_config_validate(&d, &e) == DSV4_ERR_CONFIG);
    CHECK_ERR(e, DSV4_ERR_CONFIG, "config.json: scoring_func = 7 is unknown");
    d = c;
    d.rope_theta = NAN;
    CHECK(dsv4_config_validate(&d, &e) == DSV4_ERR_CONFIG);
    CHECK_ERR(e, DSV4_ERR_CONFIG, "config.json: rope_theta = nan");
    d = c;
    memset(d.expert_dtype, 'x', sizeof d.expert_dtype);
    CHECK(dsv4_config_validate(&d, &e) == DSV4_ERR_CONFIG);
    CHECK_ERR(e, DSV4_ERR_CONFIG, "not NUL-terminated");
    CHECK(dsv4_config_validate(NULL, &e) == DSV4_ERR_ARG);
    CHECK(dsv4_config_parse(NULL, 0, &c, &e) == DSV4_ERR_ARG);
    CHECK(dsv4_config_to_json(NULL) == NULL);
    /* errors with a NULL dsv4_err are still reported by the return value */
    char *t = modify(flash_text, "hidden_size", "\"x\"");
    CHECK(dsv4_config_parse(t, strlen(t), &c, NULL) == DSV4_ERR_CONFIG);
    free(t);
}

static void test_load_errors(void) {
    dsv4_config c;
    dsv4_err e = {0};
    CHECK(dsv4_config_load("/nonexistent/dir/config.json", &c, &e) == DSV4_ERR_IO);
    CHECK_ERR(e, DSV4_ERR_IO, "/nonexistent/dir/config.json: cannot open");
}

int main(void) {
    if (!load_flash_text()) return test_report(); /* every case below starts from it */
    test_flash_reference();
    test_golden_tiny();
    test_golden_small();
    test_defaults();
    test_rope_scaling();
    test_rotary_dims();
    test_compress_ratios();
    test_validation_rules();
    test_json_types();
    test_roundtrip();
    test_number_forms();
    test_every_field();
    test_validate_struct();
    test_load_errors();
    return test_report();
}
