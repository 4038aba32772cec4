/* test_model_cli.c — `dsv4 gen-model` and `dsv4 info` as a user runs them.
 *
 * Exit statuses (0 ok, 1 failure, 2 usage), the demo preset (layer kinds, vocab, size),
 * the tokenizer copy, and info's JSON: layer kinds, parameter total, file bytes, and the
 * per-token cache bytes by state kind against the serving.md formulas (F32 rows:
 * window hd*4 per layer, compressed hd*4/r per ratio-r layer, indexer dI*4/4 per CSA layer).
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <sys/wait.h>

#include "model/config.h"
#include "model/generate.h"
#include "model/info.h"
#include "model/model.h"
#include "model_tmp.h"
#include "test.h"

static const char *bin;

/* Runs `dsv4 <args>` (stdout to out when given, else discarded); returns the exit status. */
static int run(const char *args, char **out) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>/dev/null%s", bin, args, out ? "" : " >/dev/null");
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t cap = 1 << 16, n = 0, k;
    char *buf = malloc(cap);
    while (buf && (k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (n + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) break;
            buf = b;
        }
    }
    if (buf) buf[n] = 0;
    int st = pclose(p);
    if (out) *out = buf;
    else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static double num(const cJSON *o, const char *path) {
    char k[256];
    snprintf(k, sizeof k, "%s", path);
    const cJSON *j = o;
    for (char *tok = strtok(k, "."); tok && j; tok = strtok(NULL, "."))
        j = cJSON_GetObjectItemCaseSensitive(j, tok);
    return cJSON_IsNumber(j) ? j->valuedouble : -1.0;
}

static void usage_errors(const char *dir) {
    char a[1024];
    CHECK(run("gen-model", NULL) == 2);
    CHECK(run("gen-model --help", NULL) == 0);
    snprintf(a, sizeof a, "gen-model --preset demo --out '%s/x' --dtype fp16", dir);
    CHECK(run(a, NULL) == 2);
    snprintf(a, sizeof a, "gen-model --preset large --out '%s/x'", dir);
    CHECK(run(a, NULL) == 2);
    snprintf(a, sizeof a, "gen-model --preset demo --config c.json --out '%s/x'", dir);
    CHECK(run(a, NULL) == 2);
    snprintf(a, sizeof a, "gen-model --preset demo --out '%s/x' --seed -3", dir);
    CHECK(run(a, NULL) == 2);
    snprintf(a, sizeof a, "gen-model --preset demo --out '%s/x' --seed", dir);
    CHECK(run(a, NULL) == 2);
    CHECK(run("gen-model --preset demo --out /proc/dsv4-no/such/dir", NULL) == 1);
    snprintf(a, sizeof a, "gen-model --config /nonexistent/config.json --out '%s/x'", dir);
    CHECK(run(a, NULL) == 1);
    CHECK(run("info", NULL) == 2);
    CHECK(run("info --help", NULL) == 0);
    CHECK(run("info --model /nonexistent", NULL) == 1);
    snprintf(a, sizeof a, "info --model '%s' --bogus", dir);
    CHECK(run(a, NULL) == 2);
    snprintf(a, sizeof a, "info --model '%s' --max-seqs 0", dir);
    CHECK(run(a, NULL) == 2);
}

static void demo(const char *dir) {
    char a[2048], p[1024], tok[1024];
    test_shared("tokenizer/tokenizer.json", tok, sizeof tok);
    snprintf(a, sizeof a, "gen-model --preset demo --dtype fp8 --seed 4 --out '%s' --tokenizer '%s'", dir, tok);
    CHECK(run(a, NULL) == 0);

    size_t n1 = 0, n2 = 0;
    char *t1 = read_all(tok, &n1);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    char *t2 = read_all(p, &n2);
    CHECK(t1 && t2 && n1 == n2 && n1 > 0 && !memcmp(t1, t2, n1));
    free(t1);
    free(t2);

    struct dsv4_model *m = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_model_load(dir, &m, &err) == 0, "%s", err.msg);
    if (!m) return;
    const dsv4_config *c = &m->cfg;
    CHECK(c->vocab_size == 129280 && c->num_hidden_layers == 4 && c->num_nextn_predict_layers == 1);
    CHECK(c->compress_ratios[0] == 0 && c->compress_ratios[1] == 4 && c->compress_ratios[2] == 128 &&
          c->compress_ratios[3] == 4 && c->compress_ratios[4] == 0);
    CHECK(c->has_quant_config && !strcmp(c->expert_dtype, "fp4"));
    CHECK(m->n_warnings == 0);
    uint64_t fbytes = dsv4_st_file_size(m->files, 0);
    CHECK_MSG(fbytes < 150000000ull, "demo fp8 is %llu bytes", (unsigned long long)fbytes);
    dsv4_param_counts pc;
    CHECK(dsv4_count_params(c, &pc, &err) == 0);
    const int hd = c->head_dim, dI = c->index_head_dim;
    dsv4_model_close(m);

    char *out = NULL;
    snprintf(a, sizeof a, "info --model '%s' --json", dir);
    CHECK(run(a, &out) == 0);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK_MSG(j != NULL, "info --json output is not JSON: %.200s", out ? out : "");
    free(out);
    if (!j) return;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(j, "layers");
    const char *kinds[5] = {"SWA", "CSA", "HCA", "CSA", "SWA"};
    CHECK(cJSON_GetArraySize(layers) == 5);
    for (int l = 0; l < 5 && l < cJSON_GetArraySize(layers); l++) {
        const cJSON *e = cJSON_GetArrayItem(layers, l);
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, "kind");
        CHECK_MSG(cJSON_IsString(k) && !strcmp(k->valuestring, kinds[l]), "layer %d", l);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "mtp")) == (l == 4));
    }
    CHECK(num(j, "params.total") == (double)pc.total);
    CHECK(num(j, "params.active_main") == (double)pc.active_main);
    CHECK(num(j, "bytes.file_bytes") == (double)fbytes);
    CHECK(num(j, "bytes.by_dtype.I8.tensors") == 5 * 8 * 3);
    /* per token, F32 rows: 5 window layers; CSA layers 1, 3 and HCA layer 2; 2 indexers */
    CHECK(num(j, "cache.f32.per_token_bytes.window") == 5.0 * hd * 4);
    CHECK(num(j, "cache.f32.per_token_bytes.compressed") == 2.0 * hd * 4 / 4 + 1.0 * hd * 4 / 128);
    CHECK(num(j, "cache.f32.per_token_bytes.indexer") == 2.0 * dI * 4 / 4);
    CHECK(num(j, "cache.bf16.per_token_bytes.indexer") == 2.0 * dI * 2 / 4);
    CHECK(num(j, "cache.f32.compressor_state_bytes_per_sequence") > 0);
    CHECK(num(j, "cache.options.max_context") == 4096);
    cJSON_Delete(j);

    snprintf(a, sizeof a, "info --model '%s' --check --max-context 1000 --max-seqs 2", dir);
    CHECK(run(a, &out) == 0);
    CHECK(out && strstr(out, "layers.2   HCA ratio 128") && strstr(out, "max_context 1000"));
    free(out);
}

int main(void) {
    bin = getenv("DSV4_BIN");
    if (!bin) {
        fprintf(stderr, "DSV4_BIN is not set (run through ctest)\n");
        return 1;
    }
    char dir[256], d2[300];
    CHECK(tmp_dir(dir, sizeof dir, "cli") != NULL);
    usage_errors(dir);
    snprintf(d2, sizeof d2, "%s/demo", dir);
    demo(d2);
    tmp_rm(d2);
    tmp_rm(dir);
    return test_report();
}
