/* test_tool_match.c — strict tool calls (tool_match.h) over the real tokenizer:
 *   - random walks over the allowed tokens (tm_mask) from the start of a required block,
 *     and from the opener in free text: each walk ends (the mask never empties before the
 *     block is closed) in text that dsv4_dsml_parse reads as calls of the tools whose
 *     arguments are values of their parameters schema (keys in any order: reordered to
 *     the schema's before dsv4_json_schema_accepts); the mask equals brute force (every
 *     id's bytes through the automaton) at some states;
 *   - fixed texts: the rules one by one (names, each parameter once, the required ones,
 *     string="true" only where a string fits, "</｜DSML｜parameter>" only as the end,
 *     one call with single, a free tool);
 *   - refusals name the strict tool; a tool that is not strict is not compiled.
 *   test_tool_match    (needs shared/tokenizer/tokenizer.json) */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "sample/tool_match.h"
#include "test.h"

#define DS "｜DSML｜"
#define WEATHER "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"strict\":true,\"parameters\":" \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12}," \
    "\"unit\":{\"enum\":[\"c\",\"f\"]},\"days\":{\"type\":\"integer\"}," \
    "\"where\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":\"number\"},\"tag\":{\"type\":\"string\",\"maxLength\":4}}," \
    "\"required\":[\"lat\"],\"additionalProperties\":false},\"note\":{\"type\":[\"string\",\"null\"],\"maxLength\":6}," \
    "\"memo\":{\"type\":\"string\"},\"meta\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"}}}}," \
    "\"required\":[\"city\",\"unit\",\"days\",\"where\"],\"additionalProperties\":false}}}"
#define CLOCK "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"strict\":true,\"parameters\":" \
    "{\"type\":\"object\",\"properties\":{\"zone\":{\"enum\":[\"utc\",\"cet\"]},\"label\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":10}}," \
    "\"required\":[],\"additionalProperties\":false}}}"
#define FREE "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\"," \
    "\"properties\":{\"q\":{\"type\":\"string\",\"pattern\":\"(?=x)\"}}}}}"

static const dsv4_tokenizer *T;
static const json_vocab *JV;

static tm_tools *compile(const char *tools, int mode, int single) {
    tm_tools *t = NULL;
    dsv4_err err = {0};
    CHECK_MSG(tm_compile(tools, strlen(tools), mode, single, &t, &err) == 0, "%s", err.msg);
    return t;
}

/* 1 when text (bytes) runs through the automaton from the start, and it then accepts
 * (want_end) or is merely alive */
static int runs(const tm_tools *t, const char *text, int want_end) {
    tm_state *st = malloc(2 * sizeof *st);
    tm_state_init(t, &st[0]);
    int cur = 0;
    int ok = tm_state_feed(t, st, &cur, (const uint8_t *)text, strlen(text));
    if (ok && want_end) ok = tm_state_accepting(t, &st[cur]);
    free(st);
    return ok;
}

static void test_rules(void) {
    tm_tools *t = compile("[" WEATHER "," CLOCK "," FREE "]", TM_REQUIRED, 0);
    if (!t) return;
    CHECK(tm_any_strict(t));
    const char *open = "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"";
    const char *w = "get_weather\">\n";
    char buf[2048];
#define CALL(body) (snprintf(buf, sizeof buf, "%s%s%s</" DS "invoke>\n</" DS "tool_calls>", open, w, body), buf)
#define PART(body) (snprintf(buf, sizeof buf, "%s%s%s", open, w, body), buf)
#define PO(k, s, v) "<" DS "parameter name=\"" k "\" string=\"" s "\">" v
#define P(k, s, v) PO(k, s, v) "</" DS "parameter>\n"
    const char *where = P("where", "false", "{\"lat\": 1.5}");
    char full[1024];
    snprintf(full, sizeof full, P("days", "false", "3") P("city", "true", "Oslo \"x\"\n") "%s" P("unit", "true", "c"), where);
    CHECK(runs(t, CALL(full), 1));
    /* a required parameter missing: </invoke> cannot come */
    snprintf(full, sizeof full, P("days", "false", "3") P("city", "true", "Oslo") "%s", where);
    CHECK(runs(t, PART(full), 0));
    CHECK(!runs(t, CALL(full), 0));
    /* a parameter twice, an undeclared one, an enum value outside, a string as an integer */
    CHECK(!runs(t, PART(P("days", "false", "3") P("days", "false", "4")), 0));
    CHECK(!runs(t, PART(P("dayz", "false", "3")), 0));
    CHECK(!runs(t, PART(P("unit", "true", "k")), 0));
    CHECK(!runs(t, PART(P("days", "true", "3")), 0));
    CHECK(!runs(t, PART(P("city", "false", "\"Oslo\"")), 0)); /* strings only: string="true" */
    CHECK(!runs(t, PART(P("city", "true", "Oslo-Oslo-Oslo")), 0)); /* maxLength 12 */
    /* JSON values compact: one space at a time between tokens, any inside strings */
    CHECK(runs(t, PART(P("where", "false", "{\"lat\": 1, \"tag\": \"a  b\"}") "<"), 0));
    CHECK(runs(t, PART(PO("where", "false", "{\"lat\": 1")), 0));
    CHECK(!runs(t, PART(PO("where", "false", "{\"lat\":  1")), 0));
    CHECK(!runs(t, PART(PO("where", "false", "{\n")), 0));
    /* the closing tag inside an unfinished value: not an end */
    CHECK(!runs(t, PART(P("note", "false", "\"ab")), 0));
    CHECK(!runs(t, PART(P("where", "false", "{\"lat\": 1, \"tag\": \"a")), 0));
    CHECK(runs(t, PART(P("note", "false", "\"ab\"")), 0));
    snprintf(full, sizeof full, "%sget_time\">\n" P("label", "true", "a"), open);
    CHECK(!runs(t, full, 0)); /* minLength 2 */
    snprintf(full, sizeof full, "%sget_time\">\n" P("label", "true", "ab"), open);
    CHECK(runs(t, full, 0));
    /* both kinds where the schema takes a string or null */
    CHECK(runs(t, PART(P("note", "true", "hi") "<"), 0));
    CHECK(runs(t, PART(P("note", "false", "null") "<"), 0));
    /* the closing tag inside a value ends it; a prefix of it that goes on is text */
    CHECK(runs(t, PART(P("city", "true", "a</" DS "x") "<"), 0));
    CHECK(!runs(t, PART(P("city", "true", "ab</" DS "xyz")), 0)); /* its 13 characters: maxLength 12 */
    /* a tool that is not one of them; two calls; the tool without required parameters */
    snprintf(buf, sizeof buf, "%sget_wind\">", open);
    CHECK(!runs(t, buf, 0));
    snprintf(buf, sizeof buf, "%sget_time\">\n</" DS "invoke>\n<" DS "invoke name=\"get_time\">\n"
             P("zone", "true", "utc") "</" DS "invoke>\n</" DS "tool_calls>", open);
    CHECK(runs(t, buf, 1));
    CHECK(!runs(t, "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"get_time\">\n</" DS "invoke>\n</" DS "tool_calls>\n", 0));
    /* the free tool: any names and values (its schema is not compiled: the lookahead) */
    snprintf(buf, sizeof buf, "%ssearch\">\n" P("anything", "true", "x<y") P("n", "false", "[1, {\"a\": null}]")
             "</" DS "invoke>\n</" DS "tool_calls>", open);
    CHECK(runs(t, buf, 1));
    CHECK(!runs(t, "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"search\">\n" P("n", "false", "[1,") "</", 0));
    tm_free(t);
    /* single: one call */
    t = compile("[" CLOCK "]", TM_REQUIRED, 1);
    CHECK(runs(t, "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"get_time\">\n</" DS "invoke>\n</" DS "tool_calls>", 1));
    CHECK(!runs(t, "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"get_time\">\n</" DS "invoke>\n<" DS "invoke", 0));
    tm_free(t);
    /* auto: free text, then the block */
    t = compile("[" CLOCK "]", TM_AUTO, 0);
    CHECK(runs(t, "Hello <b> there", 1));
    CHECK(runs(t, "Hi.\n\n<" DS "tool_calls>\n<" DS "invoke name=\"get_time\">\n</" DS "invoke>\n</" DS "tool_calls>", 1));
    CHECK(!runs(t, "Hi.\n\n<" DS "tool_calls>\n<" DS "invoke name=\"get_tim\">", 0));
    CHECK(!runs(t, "Hi <" DS "tool", 1)); /* the text may not end inside the opener */
    tm_free(t);
#undef CALL
#undef PART
#undef P
#undef PO
}

static void refused(const char *tools, const char *what) {
    tm_tools *t = NULL;
    dsv4_err err = {0};
    CHECK_MSG(tm_compile(tools, strlen(tools), TM_REQUIRED, 0, &t, &err) != 0 && strstr(err.msg, what),
              "%s: '%s' (want '%s')", tools, err.msg, what);
    tm_free(t);
}

static void test_refused(void) {
    refused("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,\"parameters\":{\"type\":\"object\","
            "\"properties\":{\"q\":{\"type\":\"string\",\"pattern\":\"(?=x)\"}}}}}]", "strict tool 'f'");
    refused("[{\"type\":\"function\",\"function\":{\"name\":\"g\",\"strict\":true,\"parameters\":{\"type\":\"string\"}}}]",
            "strict tool 'g': parameters must be an object");
    refused("[{\"type\":\"function\",\"function\":{\"name\":\"h\",\"strict\":true,\"parameters\":{\"type\":\"object\","
            "\"properties\":{\"a<b\":{}}}}}]", "strict tool 'h': property name");
    refused("[{\"type\":\"function\",\"function\":{\"name\":\"a\\\"b\"}}]", "cannot be written");
    refused("[" CLOCK "," CLOCK "]", "two tools");
    refused("{}", "array");
    /* a value that would have to hold the closing tag: refused at compile, by its path (a
     * const, an enum value inside an object, a nested property name, a pattern that needs it
     * anchored or not) */
#define TAGGED(props) "[{\"type\":\"function\",\"function\":{\"name\":\"c\",\"strict\":true,\"parameters\":" \
    "{\"type\":\"object\",\"properties\":" props ",\"additionalProperties\":false}}}]"
    refused(TAGGED("{\"v\":{\"const\":\"</" DS "parameter>\"}}"),
            "strict tool 'c': parameters: json_schema: the 'const' value holds \"</" DS "parameter>\"");
    refused(TAGGED("{\"v\":{\"enum\":[1,{\"a\":\"x</" DS "parameter>\"}]}}"), "an 'enum' value holds");
    refused(TAGGED("{\"v\":{\"type\":\"object\",\"properties\":{\"</" DS "parameter>\":{}}}}"),
            "a property name holds \"</" DS "parameter>\" (a tool call's value cannot: it ends the parameter) (at "
            "#/properties/v)");
    refused(TAGGED("{\"v\":{\"type\":\"string\",\"pattern\":\"^</" DS "parameter>$\"}}"),
            "'pattern' can only be met by a string that holds \"</" DS "parameter>\"");
    refused(TAGGED("{\"v\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"x</" DS "parameter>\"}}}"),
            "(at #/properties/v/items)");
    tm_tools *t = compile("[" FREE "]", TM_REQUIRED, 0);
    CHECK(t && !tm_any_strict(t));
    tm_free(t);
    /* a pattern that needs the tag on one branch only: that branch is cut (it would be a dead
     * end, the mask empty, mid-value), the other stays; a plain string may hold it where the
     * value may end (it ends there) */
    t = compile(TAGGED("{\"v\":{\"type\":\"string\",\"pattern\":\"^(ab|b</" DS "parameter>x)$\"},"
                       "\"w\":{\"type\":\"string\"}}"), TM_REQUIRED, 0);
    if (t) {
#define OPEN_C "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"c\">\n<" DS "parameter name="
        CHECK(runs(t, OPEN_C "\"v\" string=\"true\">ab</" DS "parameter>\n</" DS "invoke>\n</" DS "tool_calls>", 1));
        CHECK(runs(t, OPEN_C "\"v\" string=\"true\">a", 0));
        CHECK(!runs(t, OPEN_C "\"v\" string=\"true\">b", 0));
        CHECK(runs(t, OPEN_C "\"w\" string=\"true\">b</" DS "parameter>\n</" DS "invoke>\n</" DS "tool_calls>", 1));
#undef OPEN_C
    }
    tm_free(t);
#undef TAGGED
}

/* ---- random walks ---- */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double mask_s, pick_s, cat_s[3]; /* where the time goes (printed, not asserted) */
static long n_masks, cat_n[3];
static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec; }
static uint64_t next_rand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static const char CLOSE[] = "</" DS "parameter>";
static int32_t *closers, *structs; /* ids whose bytes occur in CLOSE; ids with a '"', '}', ']' or ',' */
static int n_closers, n_structs;

static void lists(void) {
    closers = malloc((size_t)JV->V * sizeof *closers);
    structs = malloc((size_t)JV->V * sizeof *structs);
    for (int v = 0; v < JV->V; v++) {
        size_t len;
        const char *b = dsv4_tok_id_bytes(T, v, &len);
        if (!b || !len || dsv4_tok_is_added(T, v)) continue;
        int in = 0, st = 0;
        for (size_t o = 0; o + len < sizeof CLOSE && !in; o++) in = !memcmp(b, CLOSE + o, len);
        for (size_t i = 0; i < len && !st; i++) st = strchr("\"}],", b[i]) != NULL && b[i];
        if (in) closers[n_closers++] = v;
        if (st) structs[n_structs++] = v;
    }
}

static int allowed(const uint64_t *bits, int32_t v) { return bits[v >> 6] >> (v & 63) & 1; }

static int is_close(const tm_state *st, int32_t v) {
    size_t len;
    const char *b = dsv4_tok_id_bytes(T, v, &len);
    return st->k + len <= sizeof CLOSE - 1 && !memcmp(b, CLOSE + st->k, len);
}

/* a random one of list[n] that is allowed and passes f (NULL: any); -1 if none */
static int32_t pick_in(const tm_state *st, const uint64_t *bits, const int32_t *list, int n,
                       int (*f)(const tm_state *, int32_t)) {
    int m = 0;
    for (int i = 0; i < n; i++) m += allowed(bits, list[i]) && (!f || f(st, list[i]));
    if (!m) return -1;
    int k = (int)(next_rand() % (uint64_t)m);
    for (int i = 0; i < n; i++)
        if (allowed(bits, list[i]) && (!f || f(st, list[i])) && k-- == 0) return list[i];
    return -1;
}

/* a random allowed id; in a value, mostly one that heads for its end (a '<' where the
 * value may end, the next bytes of the closing tag; else a '"', '}', ']' or ','), so that
 * walks finish */
static int32_t pick(const tm_state *st, const uint64_t *bits) {
    if (st->phase == TP_VALUE && next_rand() % 8) {
        int32_t id = pick_in(st, bits, closers, n_closers, is_close);
        if (id < 0 && next_rand() % 2) id = pick_in(st, bits, structs, n_structs, NULL);
        if (id >= 0) return id;
    }
    int n = 0;
    for (int w = 0; w < JV->words; w++) n += __builtin_popcountll(bits[w]);
    if (!n) return -1;
    int k = (int)(next_rand() % (uint64_t)n);
    for (int w = 0; w < JV->words; w++) {
        const int c = __builtin_popcountll(bits[w]);
        if (k >= c) { k -= c; continue; }
        uint64_t x = bits[w];
        while (k--) x &= x - 1;
        return w * 64 + __builtin_ctzll(x);
    }
    return -1;
}

/* the arguments (JSON text) valid under the tool's parameters: keys in the schema's order */
static int valid_args(const tm_tools *t, const char *tools, const char *name, const char *args) {
    cJSON *all = cJSON_Parse(tools), *a = cJSON_Parse(args);
    int ok = 0;
    for (cJSON *x = all ? all->child : NULL; x; x = x->next) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(x, "function");
        if (strcmp(cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring, name)) continue;
        cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
        cJSON *ordered = cJSON_CreateObject();
        int n = 0;
        for (cJSON *p = props ? props->child : NULL; p; p = p->next) {
            cJSON *v = cJSON_GetObjectItemCaseSensitive(a, p->string);
            if (v) cJSON_AddItemToObject(ordered, p->string, cJSON_Duplicate(v, 1)), n++;
        }
        char *text = cJSON_PrintUnformatted(ordered), *ptext = cJSON_PrintUnformatted(params);
        dsv4_json_schema *s = NULL;
        dsv4_err err = {0};
        ok = cJSON_IsObject(a) && n == cJSON_GetArraySize(a) &&
             dsv4_json_schema_compile(ptext, strlen(ptext), &s, &err) == 0 &&
             dsv4_json_schema_accepts(s, text, strlen(text)) == 1;
        dsv4_json_schema_free(s);
        free(text), free(ptext);
        cJSON_Delete(ordered);
    }
    (void)t;
    cJSON_Delete(all), cJSON_Delete(a);
    return ok;
}

static void brute(const tm_tools *t, const tm_state *st, uint64_t *bits, tm_state *a) {
    memset(bits, 0, (size_t)JV->words * sizeof *bits);
    for (int id = 0; id < JV->V; id++) {
        size_t len = 0;
        const char *b = dsv4_tok_id_bytes(T, id, &len);
        if (!b || !len || dsv4_tok_is_added(T, id)) continue;
        /* the state's live part (a whole tm_state is ~25 KB: 129K copies of it were most of
         * this test's time) */
        tm_state_copy(&a[0], st);
        int cur = 0;
        if (tm_state_feed(t, a, &cur, (const uint8_t *)b, len)) bits[id >> 6] |= 1ull << (id & 63);
    }
}

/* walks from text `start` (fed first); returns 1 when a walk closed the block */
static int walk(const char *tools, int mode, int single, const char *start, int check_brute) {
    tm_tools *t = compile(tools, mode, single);
    if (!t) return 0;
    tm_walk w;
    CHECK(tm_walk_init(&w, JV, T, JSON_MAX_STACKS) == 0);
    if (check_brute) printf("ids holding the whole closing tag: %d\n", w.n_close);
    tm_state *st = malloc(4 * sizeof *st);
    uint64_t *bits = malloc((size_t)JV->words * sizeof *bits), *bb = malloc((size_t)JV->words * sizeof *bits);
    char text[8192];
    size_t n = strlen(start);
    memcpy(text, start, n);
    tm_state_init(t, &st[0]);
    int cur = 0, done = 0, n_plain = 0, n_brute = 0;
    CHECK(tm_state_feed(t, st, &cur, (const uint8_t *)start, n));
    if (check_brute) {
        /* from inside strings too: a raw one, a JSON one, each near a '<', and in the closing
         * tag (">" would end the JSON value inside its string: refused) */
        static const char *const at[] = {"<" DS "parameter name=\"memo\" string=\"true\">a <b> </",
                                         "<" DS "parameter name=\"meta\" string=\"false\">{\"k\": \"x</" DS,
                                         "<" DS "parameter name=\"meta\" string=\"false\">{\"k\": \"x</" DS "parameter"};
        for (int i = 0; i < 3; i++) {
            for (int cut = 0; cut < 3; cut++) { /* the state, then 2 and 4 bytes back */
                static const char *const head = "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"get_weather\">\n";
                tm_state *b = malloc(2 * sizeof *b);
                tm_state_init(t, &b[0]);
                int cb = 0;
                const int len = (int)strlen(at[i]) - 2 * cut;
                CHECK(tm_state_feed(t, b, &cb, (const uint8_t *)head, strlen(head)) &&
                      tm_state_feed(t, b, &cb, (const uint8_t *)at[i], (size_t)len));
                tm_mask(t, JV, &w, &b[cb], bits, T);
                brute(t, &b[cb], bb, st + 2);
                int diff = 0;
                for (int k = 0; k < JV->words; k++) diff += __builtin_popcountll(bits[k] ^ bb[k]);
                CHECK_MSG(diff == 0, "'%.*s': the mask differs from brute force in %d ids", len, at[i], diff);
                free(b);
            }
        }
    }
    for (int step = 0; step < 800 && !done; step++) {
        double t0 = now();
        tm_mask(t, JV, &w, &st[cur], bits, T);
        const double dt = now() - t0;
        mask_s += dt, n_masks++;
        int u;
        json_frame fr;
        const int plain = st[cur].phase == TP_VALUE && st[cur].k == 0 && json_state_in_string(&st[cur].js, &u);
        const int cat = plain ? 0 : st[cur].phase == TP_VALUE && json_state_in_cstr(&st[cur].js, &fr) ? 1 : 2;
        cat_s[cat] += dt, cat_n[cat]++;
        if (check_brute && ((step % 12 == 3 && n_brute++ < 6) || (plain && n_plain++ < 4))) {
            brute(t, &st[cur], bb, st + 2);
            int diff = 0;
            for (int k = 0; k < JV->words; k++) diff += __builtin_popcountll(bits[k] ^ bb[k]);
            CHECK_MSG(diff == 0, "step %d: the mask differs from brute force in %d ids", step, diff);
        }
        t0 = now();
        const int32_t id = pick(&st[cur], bits);
        pick_s += now() - t0;
        if (id < 0) {
            CHECK_MSG(tm_state_accepting(t, &st[cur]), "step %d: nothing allowed before the block closed: '%.*s'",
                      step, (int)n, text);
            done = 1;
            break;
        }
        size_t len;
        const char *b = dsv4_tok_id_bytes(T, id, &len);
        if (n + len >= sizeof text) break;
        memcpy(text + n, b, len);
        n += len;
        CHECK(tm_state_feed(t, st, &cur, (const uint8_t *)b, len));
    }
    if (!done) printf("walk not closed: ...%.*s\n", (int)(n < 300 ? n : 300), text + (n < 300 ? 0 : n - 300));
    if (done) {
        dsv4_parsed p;
        dsv4_err err = {0};
        CHECK_MSG(dsv4_dsml_parse(text, n, 0, &p, &err) == 0 && !p.truncated, "'%.*s': %s", (int)n, text, err.msg);
        CHECK(p.n_calls >= 1 && (!single || p.n_calls == 1));
        for (int i = 0; i < p.n_calls; i++)
            CHECK_MSG(valid_args(t, tools, p.calls[i].name, p.calls[i].arguments), "%s(%s) not valid: '%.*s'",
                      p.calls[i].name, p.calls[i].arguments, (int)n, text);
        dsv4_parsed_free(&p);
    }
    tm_walk_free(&w);
    free(st), free(bits), free(bb);
    tm_free(t);
    return done;
}

/* tm_mask's fast paths (the value's JSON mask for the neutral ids, a free name's neutral
 * ids) against tm_mask_walk (the whole trie stepped with the whole state) at states where
 * each part decides: a raw constrained string (its room nearly gone, a '<' pending, the
 * tag half written, a pattern that takes '<'); a union's readings in their strings (after
 * a space: no id may open with another, nor hold "  ") and between its tokens; a literal
 * and a string read at once; numbers; a free tool's name and values; a second tool whose
 * pattern has the first's cache key but not its masks ([a-y] against [a-z], its strings in
 * the same order: the cache is per schema). */
#define FAST_TOOLS "[" \
    "{\"type\":\"function\",\"function\":{\"name\":\"a\",\"strict\":true,\"parameters\":{\"type\":\"object\"," \
    "\"properties\":{\"note\":{\"type\":\"string\",\"maxLength\":12},\"code\":{\"type\":\"string\",\"pattern\":" \
    "\"^[a-z]+$\"},\"tag\":{\"type\":\"string\",\"pattern\":\"^[a-z<]+$\"},\"item\":{\"oneOf\":[" UNION_BRANCH("0", "8") "," UNION_BRANCH("1", "9") "," \
    UNION_BRANCH("2", "10") "]},\"either\":{\"anyOf\":[{\"enum\":[\"alpha beta\"]},{\"type\":\"string\"," \
    "\"maxLength\":20},{\"type\":\"integer\",\"minimum\":3}]}},\"required\":[],\"additionalProperties\":false}}}," \
    "{\"type\":\"function\",\"function\":{\"name\":\"b\",\"strict\":true,\"parameters\":{\"type\":\"object\"," \
    "\"properties\":{\"note\":{\"type\":\"string\",\"maxLength\":12},\"code\":{\"type\":\"string\"," \
    "\"pattern\":\"^[a-y]+$\"}},\"required\":[]," \
    "\"additionalProperties\":false}}}," \
    "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]"
#define UNION_BRANCH(k, max) "{\"type\":\"object\",\"properties\":{\"note\":{\"type\":\"string\",\"maxLength\":" \
    max "},\"k\":{\"const\":" k "}},\"required\":[\"note\",\"k\"],\"additionalProperties\":false}"
#define INV(name) "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"" name "\">\n"
#define PAR(name, str) "<" DS "parameter name=\"" name "\" string=\"" str "\">"

/* tm_mask at st equals tm_mask_walk's, and allows something (text[0..len): where st is) */
static void same_as_walk(const tm_tools *t, tm_walk *w, const tm_state *st, uint64_t *fast, uint64_t *ref,
                         const char *text, int len) {
    tm_mask(t, JV, w, st, fast, T);
    tm_mask_walk(t, JV, w, st, ref);
    int diff = 0, n = 0;
    for (int k = 0; k < JV->words; k++) {
        diff += __builtin_popcountll(fast[k] ^ ref[k]);
        n += __builtin_popcountll(ref[k]);
    }
    CHECK_MSG(diff == 0, "'%.*s': the mask differs from the whole walk's in %d ids", len, text, diff);
    CHECK_MSG(n > 0, "'%.*s': nothing allowed", len, text);
}

static void test_fast(void) {
    tm_tools *t = compile(FAST_TOOLS, TM_REQUIRED, 0);
    if (!t) return;
    static const char *const at[] = {
        INV("a") PAR("note", "true") "ab cd",
        INV("a") PAR("note", "true") "abcdefghij",
        INV("a") PAR("note", "true") "ab \"q\" <",
        INV("a") PAR("note", "true") "ab</" DS "param",
        INV("a") PAR("tag", "true") "ab<",
        INV("a") PAR("code", "true") "ab",
        INV("a") PAR("item", "false") "{\"note\": \"ab ",
        INV("a") PAR("item", "false") "{\"note\": \"abc\", ",
        INV("a") PAR("item", "false") "{\"note\": \"abcdefgh",
        INV("a") PAR("either", "false") "\"alpha ",
        INV("a") PAR("either", "false") "\"alpha b",
        INV("a") PAR("either", "false") "1",
        INV("f") "<" DS "parameter name=\"x y",
        INV("f") PAR("x", "false") "{\"k\": [1, ",
        INV("a") PAR("code", "true") "a</" DS "parameter>\n</" DS "invoke>\n<" DS "invoke name=\"b\">\n"
            PAR("code", "true") "ab",
    };
    tm_walk w;
    CHECK(tm_walk_init(&w, JV, T, tm_max_stacks(t)) == 0);
    tm_state *st = malloc(2 * sizeof *st);
    uint64_t *fast = malloc((size_t)JV->words * sizeof *fast), *ref = malloc((size_t)JV->words * sizeof *ref);
    for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
        for (int cut = 0; cut < 2; cut++) { /* the state, and one byte back */
            const size_t len = strlen(at[i]) - (size_t)cut;
            tm_state_init(t, &st[0]);
            int cur = 0;
            CHECK_MSG(tm_state_feed(t, st, &cur, (const uint8_t *)at[i], len), "'%.*s' refused", (int)len, at[i]);
            same_as_walk(t, &w, &st[cur], fast, ref, at[i], (int)len);
        }
    }
    tm_walk_free(&w);
    free(st), free(fast), free(ref);
    tm_free(t);
}

/* Whitespace that is text, not the space between tokens, has no "one at a time" rule
 * (rv-tmx 1-2): inside an enum's or a const's string, an object key, a string read as
 * both a pattern's and a plain one (anyOf). At each state the mask allows something and
 * equals the whole walk's; the values complete; the rule still holds between tokens. */
#define TEXT_WS_TOOLS "[{\"type\":\"function\",\"function\":{\"name\":\"e\",\"strict\":true,\"parameters\":" \
    "{\"type\":\"object\",\"properties\":{\"m\":{\"enum\":[\"one  two\",3]},\"c\":{\"const\":{\"k\":\"p  q\"}}," \
    "\"o\":{\"type\":\"object\",\"properties\":{\"a  b\":{\"type\":\"integer\"}},\"required\":[\"a  b\"]," \
    "\"additionalProperties\":false},\"u\":{\"anyOf\":[{\"type\":\"string\",\"pattern\":\"^[a-z ]+$\"}," \
    "{\"type\":\"string\"},{\"type\":\"integer\"}]}},\"required\":[\"m\"],\"additionalProperties\":false}}}]"

static void test_text_ws(void) {
    tm_tools *t = compile(TEXT_WS_TOOLS, TM_REQUIRED, 0);
    if (!t) return;
#define END "</" DS "parameter>\n"
    static const char *const at[] = {
        INV("e") PAR("m", "false") "\"one ",  INV("e") PAR("m", "false") "\"one  t",
        INV("e") PAR("c", "false") "{\"k\":\"p ", INV("e") PAR("c", "false") "{\"k\":\"p  q",
        INV("e") PAR("o", "false") "{\"a ",   INV("e") PAR("o", "false") "{\"a  b\": ",
        INV("e") PAR("u", "false") "\"ab ",   INV("e") PAR("u", "false") "\"ab  c",
    };
    tm_walk w;
    CHECK(tm_walk_init(&w, JV, T, tm_max_stacks(t)) == 0);
    tm_state *st = malloc(2 * sizeof *st);
    uint64_t *fast = malloc((size_t)JV->words * sizeof *fast), *ref = malloc((size_t)JV->words * sizeof *ref);
    for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
        const size_t len = strlen(at[i]);
        tm_state_init(t, &st[0]);
        int cur = 0;
        CHECK_MSG(tm_state_feed(t, st, &cur, (const uint8_t *)at[i], len), "'%s' refused", at[i]);
        same_as_walk(t, &w, &st[cur], fast, ref, at[i], (int)len);
    }
    CHECK(runs(t, INV("e") PAR("m", "false") "\"one  two\"" END PAR("c", "false") "{\"k\":\"p  q\"}" END
               PAR("o", "false") "{\"a  b\": 1}" END PAR("u", "false") "\"ab  cd\"" END
               "</" DS "invoke>\n</" DS "tool_calls>", 1));
    CHECK(runs(t, INV("e") PAR("u", "true") "ab  cd" END, 0));
    CHECK(!runs(t, INV("e") PAR("o", "false") "{\"a  b\":  1", 0)); /* between tokens: one space */
    CHECK(!runs(t, INV("e") PAR("u", "false") "  \"ab", 0));
#undef END
    tm_walk_free(&w);
    free(st), free(fast), free(ref);
    tm_free(t);
}

/* JSON output beside tools (tm_set_doc): the text is the document or the block, read at
 * once while the bytes allow both; no "<｜DSML｜" in the document; EOS once it is complete;
 * the mask equals the whole walk's in the document (its tag begun too) and where both are
 * read. Only AUTO tools take a document. */
#define DOC "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},\"msg\":{\"type\":\"string\"," \
    "\"maxLength\":20}},\"required\":[\"ok\"],\"additionalProperties\":false}"

static int doc_runs(const tm_tools *t, const char *text) { /* 2: complete, 1: alive, 0: refused */
    tm_state *st = malloc(2 * sizeof *st);
    tm_state_init(t, &st[0]);
    int cur = 0;
    int r = tm_state_feed(t, st, &cur, (const uint8_t *)text, strlen(text));
    if (r && tm_state_accepting(t, &st[cur])) r = 2;
    free(st);
    return r;
}

static void test_doc(void) {
    tm_tools *req = compile("[" WEATHER "]", TM_REQUIRED, 0);
    dsv4_err err = {0};
    CHECK(req && tm_set_doc(req, DOC, strlen(DOC), &err) == DSV4_ERR_ARG);
    tm_free(req);
    tm_tools *t = compile(FAST_TOOLS, TM_AUTO, 1);
    if (!t) return;
    CHECK(tm_set_doc(t, DOC, strlen(DOC), &err) == 0);
    static const struct { const char *text; int want; } rules[] = {
        {"{\"ok\": true}", 2},
        {"\n\n{\"ok\": false, \"msg\": \"hi there\"}\n", 2},
        {"{\"ok\": true", 1},
        {"Sure: {\"ok\": true}", 0},
        {"\n<", 0},
        {"\n\n<", 1},
        {"\n\n{", 1},
        {"{\"ok\": true, \"msg\": \"a <" DS "tool", 0},
        {"{\"ok\": true, \"msg\": \"a <" DS, 0},
        {"{\"ok\": true, \"msg\": \"a <｜DSM", 1},
        {"{\"ok\": true, \"msg\": \"a <｜DSM\"}", 2},
        {INV("a") PAR("note", "true") "hi</" DS "parameter>\n</" DS "invoke>\n</" DS "tool_calls>", 2},
        {INV("a") PAR("note", "true") "hi</" DS "parameter>\n</" DS "invoke>\n<" DS "invoke", 0}, /* single */
        {INV("a") PAR("note", "true") "hi</" DS "parameter>\n</" DS "invoke>\n</" DS "tool_calls>{", 0},
    };
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++)
        CHECK_MSG(doc_runs(t, rules[i].text) == rules[i].want, "'%s': %d, want %d", rules[i].text,
                  doc_runs(t, rules[i].text), rules[i].want);
    static const char *const at[] = {"", "\n", "\n\n", "\n\n<", "{\"ok\": tr", "{\"ok\": true, \"msg\": \"a b",
                                     "{\"ok\": true, \"msg\": \"a <｜DS", "{\"ok\": true, \"msg\": \"a <｜DSML",
                                     "{\"ok\": true, \"msg\": \"abcdefghijklmnopq",
                                     "{\"ok\": true}"};
    tm_walk w;
    CHECK(tm_walk_init(&w, JV, T, tm_max_stacks(t)) == 0);
    tm_state *st = malloc(2 * sizeof *st);
    uint64_t *fast = malloc((size_t)JV->words * sizeof *fast), *ref = malloc((size_t)JV->words * sizeof *ref);
    for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
        tm_state_init(t, &st[0]);
        int cur = 0;
        CHECK_MSG(tm_state_feed(t, st, &cur, (const uint8_t *)at[i], strlen(at[i])), "'%s' refused", at[i]);
        same_as_walk(t, &w, &st[cur], fast, ref, at[i], (int)strlen(at[i]));
    }
    tm_walk_free(&w);
    free(st), free(fast), free(ref);
    tm_free(t);
}

int main(void) {
    test_require_shared();
    dsv4_tokenizer *tok = NULL;
    dsv4_err err = {0};
    char path[512];
    const char *file = test_shared("tokenizer/tokenizer.json", path, sizeof path);
    CHECK_MSG(dsv4_tokenizer_load(file, &tok, &err) == 0, "tokenizer: %s", err.msg);
    if (!tok) return test_report();
    T = tok;
    json_vocab *jv = json_vocab_build(tok);
    JV = jv;
    CHECK(jv != NULL);
    test_rules();
    test_refused();
    if (jv) test_fast();
    if (jv) test_text_ws();
    if (jv) test_doc();
    if (jv) {
        lists();
        int done = 0;
        done += walk("[" WEATHER "," CLOCK "]", TM_REQUIRED, 0, "", 1);
        for (int i = 0; i < 2; i++) done += walk("[" WEATHER "," CLOCK "]", TM_REQUIRED, i & 1, "", 0);
        done += walk("[" WEATHER "]", TM_AUTO, 1, "Let me check.\n\n<" DS "tool_calls>", 0);
        CHECK_MSG(done >= 3, "%d of 4 walks closed the block", done);
        printf("walks: %ld masks, %.3f ms each (in plain strings %ld, %.3f ms; in constrained strings %ld, %.3f ms; "
               "elsewhere %ld, %.3f ms); picks %.3f s\n", n_masks, 1e3 * mask_s / (double)n_masks,
               cat_n[0], cat_n[0] ? 1e3 * cat_s[0] / (double)cat_n[0] : 0, cat_n[1], cat_n[1] ? 1e3 * cat_s[1] / (double)cat_n[1] : 0,
               cat_n[2], cat_n[2] ? 1e3 * cat_s[2] / (double)cat_n[2] : 0, pick_s);
    }
    free(closers), free(structs);
    json_vocab_free(jv);
    dsv4_tokenizer_free(tok);
    return test_report();
}
