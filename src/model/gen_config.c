/* gen_config.c — a checkpoint's generation_config.json: the sampling defaults its creator
 * recommends (Hugging Face's GenerationConfig file). Only the fields vLLM's
 * `--generation-config auto` takes as request defaults are read (temperature, top_p, top_k,
 * min_p, repetition_penalty, max_new_tokens), and eos_token_id, the ids on which
 * transformers and vLLM end generation; the others (do_sample, bos_token_id,
 * transformers_version, ...) are ignored, as there. Each field read is checked for its
 * type and its range (those of the request fields it stands in for), and every error names
 * the file, the field and the value. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/config.h"
#include "util/err.h"
#include "util/file.h"
#include "util/json.h"

#define GEN_MAX_FILE (1 << 20)  /* a generation_config.json is a few hundred bytes */

typedef struct {
    const char *key;
    unsigned bit;
    double lo, hi;
    int lo_open;   /* (lo, hi]: lo itself is refused */
    int integer;
    double hf;     /* transformers' GenerationConfig default (NAN: none): a value equal to it is
                    * not taken, as vLLM reads the file through to_diff_dict(), which drops it
                    * (a top_k of 50 there leaves top_k unlimited) */
} gen_field;

static const gen_field FIELDS[] = {
    {"temperature", DSV4_GENCFG_TEMPERATURE, 0, 2, 0, 0, 1},
    {"top_p", DSV4_GENCFG_TOP_P, 0, 1, 1, 0, 1},
    {"top_k", DSV4_GENCFG_TOP_K, -1, 1e9, 0, 1, 50},
    {"min_p", DSV4_GENCFG_MIN_P, 0, 1, 0, 0, NAN},
    {"repetition_penalty", DSV4_GENCFG_REPETITION_PENALTY, 0, 10, 1, 0, 1},
    {"max_new_tokens", DSV4_GENCFG_MAX_NEW_TOKENS, 1, INT_MAX, 0, 1, NAN},
};

static void store(dsv4_gen_config *g, unsigned bit, double v) {
    switch (bit) {
    case DSV4_GENCFG_TEMPERATURE: g->temperature = v; break;
    case DSV4_GENCFG_TOP_P: g->top_p = v; break;
    case DSV4_GENCFG_TOP_K: g->top_k = (int)v; break;
    case DSV4_GENCFG_MIN_P: g->min_p = v; break;
    case DSV4_GENCFG_REPETITION_PENALTY: g->repetition_penalty = v; break;
    default: g->max_new_tokens = (int)v; break;
    }
    g->has |= bit;
}

/* key given more than once: readers disagree on which one wins (cJSON the first, Python the
 * last) */
static int duplicate(const char *path, const cJSON *root, const char *key, dsv4_err *err) {
    int seen = 0;
    for (const cJSON *x = root->child; x; x = x->next) seen += x->string && !strcmp(x->string, key);
    return seen > 1 ? dsv4_fail(err, DSV4_ERR_CONFIG, "%s: duplicate key \"%s\"", path, key) : 0;
}

/* eos_token_id: an id or a list of ids (transformers takes both; an empty list or null: none),
 * each a token of the vocabulary. */
static int parse_eos(const char *path, const cJSON *root, int vocab, dsv4_gen_config *g, dsv4_err *err) {
    static const char key[] = "eos_token_id";
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (duplicate(path, root, key, err)) return DSV4_ERR_CONFIG;
    if (!j || cJSON_IsNull(j)) return 0;
    const int list = cJSON_IsArray(j);
    if (!list && !cJSON_IsNumber(j))
        return dsv4_fail(err, DSV4_ERR_CONFIG, "%s: %s is %s, must be a token id or a list of them", path, key,
                         dsv4_json_kind(j));
    if (list && cJSON_GetArraySize(j) > DSV4_GENCFG_MAX_EOS)
        return dsv4_fail(err, DSV4_ERR_CONFIG, "%s: %s lists %d ids, at most %d are read", path, key,
                         cJSON_GetArraySize(j), DSV4_GENCFG_MAX_EOS);
    int n = 0;
    char at[32] = "";
    for (const cJSON *x = list ? j->child : j; x; x = list ? x->next : NULL) {
        if (list) snprintf(at, sizeof at, "[%d]", n);
        if (!cJSON_IsNumber(x))
            return dsv4_fail(err, DSV4_ERR_CONFIG, "%s: %s%s is %s, must be a token id", path, key, at,
                             dsv4_json_kind(x));
        const double v = x->valuedouble;
        if (!isfinite(v) || floor(v) != v || v < 0 || v >= vocab)
            return dsv4_fail(err, DSV4_ERR_CONFIG, "%s: %s%s = %.17g, must be a token id in [0, %d)", path, key,
                             at, v, vocab);
        g->eos_token_id[n++] = (int32_t)v;
    }
    g->n_eos = n;
    if (n) g->has |= DSV4_GENCFG_EOS_TOKEN_ID;
    return 0;
}

static int parse(const char *path, const cJSON *root, int vocab, dsv4_gen_config *g, dsv4_err *err) {
    if (!cJSON_IsObject(root))
        return dsv4_fail(err, DSV4_ERR_CONFIG, "%s: the file is %s, must be a JSON object", path, dsv4_json_kind(root));
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        const gen_field *f = &FIELDS[i];
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, f->key);
        if (duplicate(path, root, f->key, err)) return DSV4_ERR_CONFIG;
        if (!j || cJSON_IsNull(j)) continue;  /* null: not given, as vLLM reads it */
        if (!cJSON_IsNumber(j))
            return dsv4_fail(err, DSV4_ERR_CONFIG, "%s: %s is %s, must be a number", path, f->key, dsv4_json_kind(j));
        const double v = j->valuedouble;
        if (!isfinite(v) || v < f->lo || v > f->hi || (f->lo_open && v == f->lo))
            return dsv4_fail(err, DSV4_ERR_CONFIG, "%s: %s = %.17g, must be in %c%.17g, %.17g]", path, f->key, v,
                             f->lo_open ? '(' : '[', f->lo, f->hi);
        if (f->integer && floor(v) != v)
            return dsv4_fail(err, DSV4_ERR_CONFIG, "%s: %s = %.17g, must be an integer", path, f->key, v);
        if (v != f->hf) store(g, f->bit, v);
    }
    return parse_eos(path, root, vocab, g, err);
}

int dsv4_gen_config_load(const char *dir, int vocab, dsv4_gen_config *out, dsv4_err *err) {
    memset(out, 0, sizeof *out);
    char path[4200];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return 0;  /* none: no defaults */
    size_t len = 0;
    char *text = dsv4_read_regular_file(path, GEN_MAX_FILE, &len, err);
    if (!text) {
        if (err) err->code = DSV4_ERR_CONFIG;
        return DSV4_ERR_CONFIG;
    }
    size_t off = 0;
    int trailing, rc;
    cJSON *root = dsv4_json_parse_whole(text, len, &off, &trailing);
    if (!root) {
        rc = dsv4_fail(err, DSV4_ERR_CONFIG, "%s: JSON syntax error at byte %zu", path, off);
    } else {
        dsv4_gen_config g = {0};
        rc = parse(path, root, vocab, &g, err);
        if (!rc) *out = g;
    }
    cJSON_Delete(root);
    free(text);
    return rc;
}
