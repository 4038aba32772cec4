/* test_gen_json.c — structured output inside dsv4_gen (include/dsv4_text.h only), driven
 * with made-up logits rows over the real vocabulary (no forward: the mask is what is
 * tested):
 *   - end of sequence, however likely, waits until the value is complete, then ends it;
 *   - a likely token that cannot continue the value is never drawn: over random rows
 *     (greedy and seeded) every text is a valid value when it ends, and the tokens depend
 *     only on the rows (two runs give the same ids);
 *   - thinking: the reasoning is free; the constraint starts right after "</think>";
 *   - a schema outside the subset is refused at create, naming the keyword;
 *   - strict tools in auto mode: free text, then a block whose arguments obey the schema.
 *   test_gen_json MODEL_DIR (with tokenizer.json)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4_text.h"
#include "test.h"

static dsv4_model *M;
static dsv4_tokenizer *T;
static int V;
static int32_t EOS;
static float *row; /* (V) */
static int32_t single[128]; /* the id of each ASCII byte alone */

#define PERSON "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}," \
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",1,12]},\"maxItems\":3}},\"required\":[\"name\"]}"

static int32_t one_id(const char *text) {
    dsv4_tok_ids ids = {0};
    dsv4_err err = {0};
    int32_t id = -1;
    if (!dsv4_tokenize(T, text, strlen(text), &ids, &err) && ids.n == 1) id = ids.ids[0];
    dsv4_tok_ids_free(&ids);
    CHECK_MSG(id >= 0, "'%s' is not one token", text);
    return id;
}

/* A row whose best id is `best` (then `second`, if >= 0); the others 0. */
static const float *prefer(int32_t best, int32_t second) {
    for (int v = 0; v < V; v++) row[v] = 0;
    row[best] = 30;
    if (second >= 0) row[second] = 20;
    return row;
}

static dsv4_gen *new_gen(const char *schema, int think, uint64_t seed) {
    dsv4_gen_params p = {.json_schema = schema, .json_after_think = think};
    p.sample.seed = seed;
    p.sample.temperature = seed ? 1.0f : 0.0f;
    dsv4_gen *g = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_gen_create(M, T, &p, &g, &err) == 0, "%s", err.msg);
    return g;
}

static int32_t step(dsv4_gen *g, const float *r, char *text, size_t cap, int *finish) {
    dsv4_gen_token t;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_gen_next(g, r, &t, &err) == 0, "%s", err.msg);
    size_t n = strlen(text);
    if (n + t.text_len < cap) memcpy(text + n, t.text, t.text_len), text[n + t.text_len] = 0;
    *finish = t.finish;
    return t.token;
}

static void test_eos_waits(void) {
    dsv4_gen *g = new_gen("{\"type\":\"object\"}", 0, 0);
    char text[256] = "";
    int fin;
    /* EOS first, "abc" second: neither may start an object; the mask picks something else */
    int32_t t = step(g, prefer(EOS, one_id("abc")), text, sizeof text, &fin);
    CHECK(t != EOS && t != one_id("abc") && fin == 0);
    dsv4_gen_free(g);

    g = new_gen("{\"type\":\"object\"}", 0, 0);
    text[0] = 0;
    const char *parts[] = {"{\"", "a", "\":", "1", "}"};
    for (int i = 0; i < 5; i++) {
        t = step(g, prefer(EOS, one_id(parts[i])), text, sizeof text, &fin);
        CHECK_MSG(t == one_id(parts[i]), "part %d: got %d", i, t);
    }
    t = step(g, prefer(EOS, -1), text, sizeof text, &fin);
    CHECK(t == EOS && fin == DSV4_FINISH_STOP_TOKEN);
    CHECK_MSG(!strcmp(text, "{\"a\":1}"), "%s", text);
    dsv4_gen_free(g);
}

static uint64_t rng = 88172645463325252ull;
static float urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) / (float)(1 << 24);
}

/* Random rows with EOS always likely: the run ends as soon as the value is complete. */
static void random_run(const char *schema, uint64_t seed, int32_t *ids, int *n, char *text, size_t cap) {
    dsv4_gen *g = new_gen(schema, 0, seed);
    text[0] = 0;
    int fin = 0;
    *n = 0;
    while (!fin && *n < 600) {
        /* a peaked row (so seeded draws follow it too): a few random ids and the ASCII
         * bytes likely, structure comes */
        for (int v = 0; v < V; v++) row[v] = -20;
        for (int k = 0; k < 64; k++) row[(int)(urand() * (float)(V - 1))] = 8 * urand();
        for (int k = 0; k < 128; k++) row[single[k]] = 4 + 4 * urand();
        row[EOS] = 9;
        if (urand() < 0.1f) row[single['"']] = 10;         /* and strings end */
        ids[(*n)++] = step(g, row, text, cap, &fin);
    }
    CHECK_MSG(fin == DSV4_FINISH_STOP_TOKEN, "%s: no end in %d tokens: %s", schema, *n, text);
    dsv4_json_schema *s = NULL;
    dsv4_err err = {0};
    CHECK(dsv4_json_schema_compile(schema, strlen(schema), &s, &err) == 0);
    CHECK_MSG(dsv4_json_schema_accepts(s, text, strlen(text)) == 1, "%s: not a value: %s", schema, text);
    dsv4_json_schema_free(s);
    dsv4_gen_free(g);
}

static void test_random(void) {
    static int32_t a[600], b[600];
    static char ta[1 << 14], tb[1 << 14];
    const char *schemas[] = {PERSON, "{\"type\":\"object\"}", "{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"maxItems\":4}"};
    for (int k = 0; k < 3; k++)
        for (uint64_t seed = 0; seed < 2; seed++) {
            int na, nb;
            const uint64_t r0 = rng;
            random_run(schemas[k], seed * 7, a, &na, ta, sizeof ta);
            rng = r0; /* the same rows again */
            random_run(schemas[k], seed * 7, b, &nb, tb, sizeof tb);
            CHECK(na == nb && !memcmp(a, b, sizeof *a * (size_t)na));
        }
}

static void test_think(void) {
    dsv4_gen *g = new_gen("{\"type\":\"object\"}", 1, 0);
    char text[256] = "";
    int fin;
    /* reasoning: free, EOS included as a token like any other is not tested: "abc" goes */
    CHECK(step(g, prefer(one_id("abc"), -1), text, sizeof text, &fin) == one_id("abc"));
    dsv4_tok_ids ids = {0};
    dsv4_err err = {0};
    CHECK(dsv4_tokenize(T, " </think>", 9, &ids, &err) == 0);
    for (size_t i = 0; i < ids.n; i++) CHECK(step(g, prefer(ids.ids[i], -1), text, sizeof text, &fin) == ids.ids[i]);
    dsv4_tok_ids_free(&ids);
    /* the value now: "abc" and EOS are refused */
    int32_t t = step(g, prefer(one_id("abc"), EOS), text, sizeof text, &fin);
    CHECK(t != one_id("abc") && t != EOS);
    dsv4_gen_free(g);
}

/* The only way the mask can leave nothing: the request's logit_bias bans every id the value
 * can go on with (here every id that starts with '"', after "\"a" under pattern ^a$): the
 * step fails with that reason, no crash. */
static void test_banned(void) {
    const int n_tok = dsv4_tok_vocab_size(T);
    int32_t *ban = malloc((size_t)n_tok * sizeof *ban);
    float *bias = malloc((size_t)n_tok * sizeof *bias);
    int n = 0;
    for (int32_t id = 0; ban && bias && id < n_tok && id < V; id++) {
        size_t len = 0;
        const char *b = dsv4_tok_id_bytes(T, id, &len);
        if (b && len && b[0] == '"') ban[n] = id, bias[n++] = -INFINITY;
    }
    dsv4_gen_params p = {.json_schema = "{\"type\":\"string\",\"pattern\":\"^a$\"}", .bias_ids = ban, .bias = bias,
                         .n_bias = n};
    dsv4_gen *g = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_gen_create(M, T, &p, &g, &err) == 0, "%s", err.msg);
    if (g) {
        dsv4_gen_token t;
        char text[64] = "";
        int fin;
        CHECK(step(g, prefer(one_id(" \""), -1), text, sizeof text, &fin) == one_id(" \"")); /* not banned */
        CHECK(step(g, prefer(single['a'], -1), text, sizeof text, &fin) == single['a']);
        CHECK(dsv4_gen_next(g, prefer(single['"'], EOS), &t, &err) != 0);
        CHECK_ERR(err, DSV4_ERR_ARG, "the output constraint (the JSON schema) allows no token here that logit_bias");
    }
    dsv4_gen_free(g);
    free(ban), free(bias);
}

static void test_refused(void) {
    dsv4_gen_params p = {.json_schema = "{\"type\":\"string\",\"format\":\"iri-reference\"}"};
    dsv4_gen *g = NULL;
    dsv4_err err = {0};
    CHECK(dsv4_gen_create(M, T, &p, &g, &err) == DSV4_ERR_UNSUPPORTED && g == NULL);
    CHECK_ERR(err, DSV4_ERR_UNSUPPORTED, "'format' \"iri-reference\"");
}

/* Strict tools in auto mode (dsv4_gen_params.tools, DSV4_TOOLS_AUTO): free text is free
 * (a token no block could start with is drawn), the forced opener starts the block, and
 * from there random rows that favour bytes a value cannot take (digits out of range, words)
 * still end in a block whose calls' arguments are values of the tool's schema. */
#define LEVEL_PROPS(a, b) "{\"type\":\"object\",\"properties\":{" a "," b "},\"required\":[\"level\",\"mode\"]," \
    "\"additionalProperties\":false}"
#define LEVEL "\"level\":{\"type\":\"integer\",\"minimum\":2,\"maximum\":7}"
#define MODE "\"mode\":{\"enum\":[\"low\",\"high\"]}"

static int args_ok(const char *args) {
    /* the block takes the parameters in any order: either order of the schema's */
    int ok = 0;
    const char *schemas[2] = {LEVEL_PROPS(LEVEL, MODE), LEVEL_PROPS(MODE, LEVEL)};
    for (int k = 0; k < 2 && !ok; k++) {
        dsv4_json_schema *s = NULL;
        dsv4_err err = {0};
        if (dsv4_json_schema_compile(schemas[k], strlen(schemas[k]), &s, &err) == 0)
            ok = dsv4_json_schema_accepts(s, args, strlen(args)) == 1;
        dsv4_json_schema_free(s);
    }
    return ok;
}

static void test_tools_auto(void) {
    static const char tools[] = "[{\"type\":\"function\",\"function\":{\"name\":\"set_level\",\"strict\":true,"
                                "\"parameters\":" LEVEL_PROPS(LEVEL, MODE) "}}]";
    for (int run = 0; run < 3; run++) {
        dsv4_gen_params p = {.tools = tools, .tools_mode = DSV4_TOOLS_AUTO};
        dsv4_gen *g = NULL;
        dsv4_err err = {0};
        CHECK_MSG(dsv4_gen_create(M, T, &p, &g, &err) == 0, "%s", err.msg);
        if (!g) return;
        static char text[1 << 14];
        text[0] = 0;
        int fin = 0;
        /* free text: words no block starts with */
        CHECK(step(g, prefer(one_id("abc"), EOS), text, sizeof text, &fin) == one_id("abc"));
        CHECK(step(g, prefer(one_id(" {"), -1), text, sizeof text, &fin) == one_id(" {"));
        /* the opener, token by token */
        dsv4_tok_ids ids = {0};
        static const char open[] = "\n\n<" DSV4_DSML "tool_calls>";
        CHECK(dsv4_tokenize(T, open, strlen(open), &ids, &err) == 0);
        for (size_t i = 0; i < ids.n; i++)
            CHECK_MSG(step(g, prefer(ids.ids[i], -1), text, sizeof text, &fin) == ids.ids[i], "opener token %zu", i);
        dsv4_tok_ids_free(&ids);
        /* the block: bytes a value cannot take are likely, EOS always */
        int n = 0;
        while (!fin && n++ < 500) {
            for (int v = 0; v < V; v++) row[v] = -20;
            for (int k = 0; k < 64; k++) row[(int)(urand() * (float)(V - 1))] = 8 * urand();
            for (int k = 0; k < 128; k++) row[single[k]] = 4 + 4 * urand();
            row[single['0' + run]] = row[single['8' + run % 2]] = 9.5f; /* 0, 1, 2 (2 is in range), 8, 9 */
            row[one_id("abc")] = 9.5f;
            row[EOS] = 9;
            step(g, row, text, sizeof text, &fin);
        }
        CHECK_MSG(fin == DSV4_FINISH_STOP_TOKEN, "no end in %d tokens: %s", n, text);
        dsv4_parsed pr = {0};
        CHECK_MSG(dsv4_dsml_parse(text, strlen(text), 0, &pr, &err) == 0, "%s: %s", err.msg, text);
        CHECK_MSG(!strncmp(pr.content, "abc {", 5), "content '%s'", pr.content);
        CHECK_MSG(pr.n_calls >= 1, "no call: %s", text);
        for (int c = 0; c < pr.n_calls; c++) {
            CHECK(!strcmp(pr.calls[c].name, "set_level"));
            CHECK_MSG(args_ok(pr.calls[c].arguments), "arguments %s", pr.calls[c].arguments);
        }
        dsv4_parsed_free(&pr);
        dsv4_gen_free(g);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_gen_json MODEL_DIR\n"); return 2; }
    char path[4200];
    dsv4_err err = {0};
    snprintf(path, sizeof path, "%s/tokenizer.json", argv[1]);
    if (dsv4_model_open(argv[1], &M, &err) || dsv4_tokenizer_load(path, &T, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const dsv4_model_info info = dsv4_model_get_info(M);
    V = info.vocab_size;
    EOS = info.eos_token_id;
    row = malloc((size_t)V * sizeof *row);
    for (int c = 1; c < 128; c++) {
        char b[2] = {(char)c, 0};
        single[c] = one_id(b);
    }
    single[0] = single[' '];
    test_eos_waits();
    test_random();
    test_think();
    test_refused();
    test_banned();
    test_tools_auto();
    free(row);
    dsv4_tokenizer_free(T);
    dsv4_model_close(M);
    return test_report();
}
