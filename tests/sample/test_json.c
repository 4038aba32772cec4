/* test_json.c — structured output: the schema subset's accepted and refused texts, schemas
 * refused with the keyword named, and the vocabulary mask (json_vocab.c's trie walk with the
 * in-string shortcut) equal to a brute-force mask (every id's bytes through the automaton)
 * on states reached by random walks over the real tokenizer; the mask and the state's
 * advance allocate nothing (the library's allocator calls are counted through
 * -Wl,--wrap, as in test_no_alloc).
 *   test_json    (needs shared/tokenizer/tokenizer.json for the mask part) */
#include <stdatomic.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/json.h"
#include "test.h"

static atomic_int counting;
static atomic_long n_calls;
static void count(void) { if (atomic_load(&counting)) atomic_fetch_add(&n_calls, 1); }
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n) { count(); return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { count(); return __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { count(); return __real_realloc(p, n); }
void __wrap_free(void *p) { if (p) count(); __real_free(p); }

static dsv4_json_schema *compile(const char *schema) {
    dsv4_json_schema *s = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_json_schema_compile(schema, strlen(schema), &s, &err) == 0, "%s: %s", schema, err.msg);
    return s;
}

static void expect(const dsv4_json_schema *s, const char *text, int want) {
    CHECK_MSG(dsv4_json_schema_accepts(s, text, strlen(text)) == want, "%s '%s'",
              want ? "should accept" : "should refuse", text);
}

#define PERSON "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}," \
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",1,12]},\"minItems\":1,\"maxItems\":3}," \
    "\"ok\":{\"type\":[\"boolean\",\"null\"]},\"w\":{\"type\":\"number\"}},\"required\":[\"name\",\"tags\"]," \
    "\"additionalProperties\":false,\"title\":\"P\"}"
#define TREE "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"}," \
    "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}}," \
    "\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"object\",\"properties\":{\"v\":{\"const\":\"leaf\"}}," \
    "\"required\":[\"v\"]},{\"type\":\"null\"}]}"
#define OBJ "{\"type\":\"object\"}"
#define STRS "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}," \
    "\"d\":{\"type\":\"string\",\"format\":\"date-time\"},\"e\":{\"type\":\"string\",\"format\":\"email\"}," \
    "\"n\":{\"type\":\"string\",\"minLength\":3,\"maxLength\":5},\"t\":{\"type\":\"string\",\"pattern\":\"\xc3\xa9|\xe4\xb8\xad\"," \
    "\"maxLength\":4},\"w\":{\"type\":\"string\",\"pattern\":\"^\\\\w+( \\\\w+)*$\",\"maxLength\":24}}," \
    "\"required\":[\"id\",\"d\",\"e\",\"n\",\"t\",\"w\"]}"
/* bounded numbers (test_json_number checks their texts exhaustively; here their masks) */
#define NUMS "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\"," \
    "\"minimum\":0,\"maximum\":150},\"score\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}," \
    "\"step\":{\"type\":\"integer\",\"multipleOf\":5,\"exclusiveMaximum\":100},\"t\":{\"type\":\"number\"," \
    "\"minimum\":-2.5,\"maximum\":-0.25}},\"required\":[\"age\",\"score\",\"step\",\"t\"]},\"minItems\":1}"
/* a class of every code point but the surrogates (as pattern text inside JSON): its
 * negation holds only surrogates, which a JSON string cannot hold */
#define NOT_SURROGATES "\\\\x00-\\\\uD7FF\\\\uE000-\\\\uFFFF\\\\uD800\\\\uDC00-\\\\uDBFF\\\\uDFFF"

/* Pydantic v2's shape: a nested enum $ref with a description, an Optional field (anyOf + default
 * null), bounds (ge/le/gt/lt), a discriminated union (oneOf + discriminator over $refs whose
 * Literal is const + enum), and zod's .and() (allOf of two objects) */
#define PYD "{\"$defs\":{\"Color\":{\"enum\":[\"red\",\"green\"],\"title\":\"Color\",\"type\":\"string\"}," \
    "\"Cat\":{\"properties\":{\"pet_type\":{\"const\":\"cat\",\"enum\":[\"cat\"],\"title\":\"Pet Type\",\"type\":" \
    "\"string\"},\"meows\":{\"maximum\":10,\"minimum\":0,\"title\":\"Meows\",\"type\":\"integer\"}},\"required\":" \
    "[\"pet_type\",\"meows\"],\"title\":\"Cat\",\"type\":\"object\"},\"Dog\":{\"properties\":{\"pet_type\":" \
    "{\"const\":\"dog\",\"title\":\"Pet Type\",\"type\":\"string\"},\"barks\":{\"exclusiveMaximum\":5," \
    "\"exclusiveMinimum\":0,\"title\":\"Barks\",\"type\":\"number\"}},\"required\":[\"pet_type\",\"barks\"]," \
    "\"title\":\"Dog\",\"type\":\"object\"}},\"properties\":{\"qty\":{\"maximum\":99,\"minimum\":1,\"title\":" \
    "\"Qty\",\"type\":\"integer\"},\"color\":{\"$ref\":\"#/$defs/Color\",\"description\":\"the color\"}," \
    "\"note\":{\"anyOf\":[{\"maxLength\":8,\"type\":\"string\"},{\"type\":\"null\"}],\"default\":null," \
    "\"title\":\"Note\"},\"pet\":{\"discriminator\":{\"mapping\":{\"cat\":\"#/$defs/Cat\",\"dog\":" \
    "\"#/$defs/Dog\"},\"propertyName\":\"pet_type\"},\"oneOf\":[{\"$ref\":\"#/$defs/Cat\"},{\"$ref\":" \
    "\"#/$defs/Dog\"}],\"title\":\"Pet\"}},\"required\":[\"qty\",\"color\",\"pet\"],\"title\":\"Order\"," \
    "\"type\":\"object\"}"
#define AND "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":0}," \
    "\"b\":{\"type\":\"string\"}},\"required\":[\"a\"],\"additionalProperties\":false},{\"type\":\"object\"," \
    "\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":5},\"c\":{\"$ref\":\"#/allOf/0/properties/b\"}}," \
    "\"required\":[\"c\"],\"additionalProperties\":false}],\"description\":\"zod .and()\"}"
#define PAIR "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}"

static void test_accepts(void) {
    dsv4_json_schema *p = compile(PERSON);
    expect(p, "{\"name\":\"x\",\"tags\":[\"a\"]}", 1);
    expect(p, " {\"name\": \"\xc3\xa9\\u00e9\\n\\\"\", \"age\": -12, \"tags\": [1, 12, \"b\"], \"ok\": null}\n", 1);
    expect(p, "{\"name\":\"x\",\"tags\":[\"a\"],\"ok\":true,\"w\":-0.5e+3}", 1);
    expect(p, "{\"tags\":[\"a\"],\"name\":\"x\"}", 0);        /* properties in order */
    expect(p, "{\"name\":\"x\"}", 0);                         /* required */
    expect(p, "{\"name\":\"x\",\"tags\":[]}", 0);             /* minItems */
    expect(p, "{\"name\":\"x\",\"tags\":[1,1,1,1]}", 0);      /* maxItems */
    expect(p, "{\"name\":\"x\",\"tags\":[\"a\"],\"zz\":1}", 0); /* no additional properties */
    expect(p, "{\"name\":\"x\",\"age\":1.5,\"tags\":[1]}", 0); /* integer */
    expect(p, "{\"name\":\"x\",\"age\":012,\"tags\":[1]}", 0); /* leading zero */
    expect(p, "{\"name\":\"x\",\"tags\":[13]}", 0);           /* enum */
    expect(p, "{\"name\":\"x\",\"tags\":[123]}", 0);
    expect(p, "{\"name\":\"x\",\"tags\":[\"a\"],\"ok\":\"yes\"}", 0); /* type array */
    expect(p, "{\"name\":\"x\",\"tags\":[\"a\"]", 0);         /* incomplete */
    expect(p, "{\"name\":\"\x01\",\"tags\":[\"a\"]}", 0);     /* control byte in a string */
    expect(p, "{\"name\":\"\xc0\xaf\",\"tags\":[\"a\"]}", 0); /* overlong UTF-8 */
    expect(p, "{\"name\":\"\xed\xa0\x80\",\"tags\":[\"a\"]}", 0); /* a surrogate in UTF-8 */
    expect(p, "{\"name\":\"\\x\",\"tags\":[\"a\"]}", 0);      /* bad escape */
    dsv4_json_schema_free(p);

    dsv4_json_schema *t = compile(TREE);
    expect(t, "{\"v\":1.5e3,\"kids\":[{\"v\":2},{\"v\":-0.5,\"kids\":[]}]}", 1);
    expect(t, "{\"v\":\"leaf\"}", 1);
    expect(t, "null", 1);
    expect(t, "{\"v\":\"x\"}", 0);
    expect(t, "{\"kids\":[]}", 0);
    expect(t, "{\"v\":1,\"kids\":[{\"v\":\"leaf\"}]}", 0);    /* kids are nodes */
    dsv4_json_schema_free(t);

    dsv4_json_schema *o = compile(OBJ);
    expect(o, "{\"a\":[1,{\"b\":null}],\"c\":\"\\ud83d\\ude00\",\"a\":true}", 1);
    expect(o, "{}", 1);
    expect(o, "[1]", 0);
    expect(o, "{\"a\":1,}", 0);
    expect(o, "{a:1}", 0);
    char ws[80] = "{";
    memset(ws + 1, ' ', 32);
    strcpy(ws + 33, "}");
    expect(o, ws, 1);                                         /* 32 whitespace bytes */
    memset(ws + 1, ' ', 33);
    strcpy(ws + 34, "}");
    expect(o, ws, 0);                                         /* 33: over the bound */
    char deep[128];
    for (int levels = 20; levels <= 40; levels += 20) {
        strcpy(deep, "{\"a\":");
        for (int i = 0; i < levels; i++) strcat(deep, "[");
        for (int i = 0; i < levels; i++) strcat(deep, "]");
        expect(o, strcat(deep, "}"), levels == 20);           /* nesting bounded */
    }
    dsv4_json_schema_free(o);

    dsv4_json_schema *q = compile(PAIR);
    expect(q, "[\"a\",1]", 1);
    expect(q, "[\"a\"]", 1);
    expect(q, "[]", 1);
    expect(q, "[\"a\",1,2]", 0);
    expect(q, "[1]", 0);
    dsv4_json_schema_free(q);

    dsv4_json_schema *e = compile("{\"enum\":[1,12,{\"a\":[1,2]}]}");
    expect(e, "1", 1);
    expect(e, "12 ", 1);
    expect(e, "{\"a\":[1,2]}", 1);
    expect(e, "{\"a\": [1,2]}", 0);                           /* literals: compact form only */
    expect(e, "123", 0);
    expect(e, "2", 0);
    dsv4_json_schema_free(e);

    dsv4_json_schema *m = compile("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}");
    expect(m, "{\"x\":1,\"y\":2}", 1);
    expect(m, "{\"x\":\"1\"}", 0);
    dsv4_json_schema_free(m);
}

/* combinators and the siblings real generators write (PYD, AND above): allOf joins properties in
 * order and required, a property in both is the allOf of its schemas (number and integer:
 * integer; minimum 0 and 5: 5); a JSON pointer $ref; oneOf is anyOf (a value in two branches
 * is accepted, as json.h says); a pattern branch only surrogates could take is never taken */
#define V1REF "{\"allOf\":[{\"$ref\":\"#/definitions/P\"}],\"description\":\"v1\",\"definitions\":" \
    "{\"P\":{\"type\":\"integer\",\"exclusiveMinimum\":0}}}"
#define SURR "{\"type\":\"string\",\"pattern\":\"^(?:a|[^" NOT_SURROGATES "])b$\"}"
#define BIG "{\"type\":\"number\",\"maximum\":999999999999999,\"minimum\":-0.00000000000001}"
#define ONEOF "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\",\"maximum\":2}]}"

static const struct { const char *schema, *text; int ok; } COMBINED[] = {
    {PYD, "{\"qty\":1,\"color\":\"red\",\"pet\":{\"pet_type\":\"cat\",\"meows\":10}}", 1},
    {PYD, "{\"qty\":99,\"color\":\"green\",\"note\":null,\"pet\":{\"pet_type\":\"dog\",\"barks\":4.5}}", 1},
    {PYD, "{\"qty\":5,\"color\":\"red\",\"note\":\"12345678\",\"pet\":{\"pet_type\":\"dog\",\"barks\":0.01}}", 1},
    {PYD, "{\"qty\":0,\"color\":\"red\",\"pet\":{\"pet_type\":\"cat\",\"meows\":1}}", 0}, /* ge=1 */
    {PYD, "{\"qty\":1,\"color\":\"blue\",\"pet\":{\"pet_type\":\"cat\",\"meows\":1}}", 0}, /* the enum */
    {PYD, "{\"qty\":1,\"color\":\"red\",\"note\":\"123456789\",\"pet\":{\"pet_type\":\"cat\",\"meows\":1}}", 0},
    {PYD, "{\"qty\":1,\"color\":\"red\",\"pet\":{\"pet_type\":\"cat\",\"barks\":1}}", 0}, /* branches */
    {PYD, "{\"qty\":1,\"color\":\"red\",\"pet\":{\"pet_type\":\"dog\",\"barks\":5}}", 0}, /* lt=5 */
    {PYD, "{\"qty\":1,\"color\":\"red\",\"pet\":{\"pet_type\":\"dog\",\"meows\":1}}", 0},
    {AND, "{\"a\":5,\"c\":\"x\"}", 1},
    {AND, "{\"a\":7,\"b\":\"y\",\"c\":\"x\"}", 1},
    {AND, "{\"a\":4,\"c\":\"x\"}", 0},
    {AND, "{\"a\":5.5,\"c\":\"x\"}", 0},
    {AND, "{\"a\":5}", 0},
    {AND, "{\"c\":\"x\"}", 0},
    {AND, "{\"a\":5,\"c\":1}", 0},
    {V1REF, "3", 1},
    {V1REF, "0", 0},
    {SURR, "\"ab\"", 1},
    {SURR, "\"b\"", 0},
    {BIG, "999999999999999", 1},                                   /* 15 digits: exact */
    {BIG, "1000000000000000", 0},
    {BIG, "-0.00000000000001", 1},
    {BIG, "-0.000000000000011", 0},
    {ONEOF, "1", 1},
    {ONEOF, "2.5", 0},
    {ONEOF, "7", 1},
};

static void test_combinators(void) {
    for (size_t i = 0; i < sizeof COMBINED / sizeof *COMBINED; i++) {
        dsv4_json_schema *s = compile(COMBINED[i].schema);
        if (s) expect(s, COMBINED[i].text, COMBINED[i].ok);
        dsv4_json_schema_free(s);
    }    /* identical bounded numbers share one DFA (512 of them compiled 512 times took seconds) */
    dsv4_json_schema *d = compile("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\",\"multipleOf\":7},"
                                  "{\"type\":\"integer\",\"multipleOf\":7},{\"type\":\"number\",\"multipleOf\":7},"
                                  "{\"type\":\"integer\",\"multipleOf\":7}]}");
    CHECK_MSG(d && d->n_nums == 2, "%d number DFAs for 2 distinct specs", d ? d->n_nums : -1);
    if (d) expect(d, "[14,-7,3.5,0]", 0), expect(d, "[14,-7,3.50,0]", 0), expect(d, "[14,-7,35,21]", 1);
    dsv4_json_schema_free(d);
}

static void refused(const char *schema, int code, const char *what) {
    dsv4_json_schema *s = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_json_schema_compile(schema, strlen(schema), &s, &err) == code && s == NULL,
              "%s: code %d", schema, err.code);
    CHECK_MSG(strstr(err.msg, what) != NULL, "%s: message '%s' lacks '%s'", schema, err.msg, what);
}

/* refused by name (DSV4_ERR_UNSUPPORTED): the combinators' misuse, then bounded numbers'
 * (test_json_number): empty ranges, bounds out of range, misuse */
static const struct { const char *schema, *what; } REFUSED[] = {
    {"{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "nothing in common"},
    {"{\"allOf\":[{\"type\":\"string\",\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", "set \"pattern\" differently"},
    {"{\"allOf\":[false]}", "an 'allOf' subschema must be an object or true"},
    {"{\"allOf\":[]}", "'allOf' must be a non-empty array"},
    {"{\"allOf\":[{\"not\":{}}]}", "\"not\""},
    {"{\"allOf\":[{\"$ref\":\"#\"}]}", "allOf nested too deep"},
    {"{\"oneOf\":[{\"type\":\"string\"}],\"anyOf\":[{}]}", "\"oneOf\" beside"},
    {"{\"const\":\"a\",\"enum\":[\"b\"]}", "'const' is not one of the 'enum' values"},
    {"{\"$ref\":\"#/properties/x\"}", "does not point into this schema"},
    {"{\"type\":\"string\",\"pattern\":\"^[^" NOT_SURROGATES "]$\"}", "leaves no string"},
    /* bounded numbers */
    {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "leaves no number"},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":1,\"exclusiveMaximum\":2}", "leaves no number"},
    {"{\"type\":\"integer\",\"minimum\":0.2,\"maximum\":0.8}", "leaves no number"},
    {"{\"type\":\"number\",\"exclusiveMinimum\":1,\"maximum\":1}", "leaves no number"},
    {"{\"type\":\"integer\",\"minimum\":1,\"maximum\":4,\"multipleOf\":5}", "leaves no number"},
    {"{\"type\":\"number\",\"minimum\":1e300}", "'minimum' is outside the supported range"},
    {"{\"type\":\"number\",\"maximum\":1e-50}", "'maximum' is outside the supported range"},
    {"{\"type\":\"number\",\"maximum\":1e999}", "'maximum' is outside the supported range"},
    {"{\"type\":\"integer\",\"minimum\":9007199254740993}", "'minimum' has more than 15 significant digits"},
    {"{\"type\":\"number\",\"maximum\":0.12345678901234567890}", "'maximum' has more than 15 significant digits"},
    {"{\"type\":\"integer\",\"multipleOf\":0}", "'multipleOf' must be greater than 0"},
    {"{\"type\":\"integer\",\"multipleOf\":-2}", "'multipleOf' must be greater than 0"},
    {"{\"type\":\"number\",\"multipleOf\":1e-7}", "'multipleOf' must be a positive number of at most 6 digits"},
    {"{\"type\":\"integer\",\"multipleOf\":99991}", "more than 32000 automaton states"},
    {"{\"type\":\"integer\",\"minimum\":\"0\"}", "'minimum' must be a number"},
    {"{\"type\":\"string\",\"minimum\":0}", "number keywords without type"},
    {"{\"type\":\"integer\",\"exclusiveMaximum\":true}", "'exclusiveMaximum': true without"},
    {"{\"enum\":[1,2],\"minimum\":0}", "\"minimum\" beside 'enum'"},
};

static void test_refused(void) {
    refused("{\"type\":\"string\",\"pattern\":\"(?<=a)\"}", DSV4_ERR_UNSUPPORTED, "'pattern' uses a lookbehind");
    refused("{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"iri\"}}}",
            DSV4_ERR_UNSUPPORTED, "'format' \"iri\" (at #/properties/d)");
    refused("{\"type\":\"string\",\"contentEncoding\":\"base64\"}", DSV4_ERR_UNSUPPORTED, "\"contentEncoding\"");
    for (size_t i = 0; i < sizeof REFUSED / sizeof *REFUSED; i++)
        refused(REFUSED[i].schema, DSV4_ERR_UNSUPPORTED, REFUSED[i].what);
    refused("{\"properties\":{\"a\":{}},\"additionalProperties\":true}", DSV4_ERR_UNSUPPORTED,
            "additionalProperties");
    refused("{\"properties\":{\"a\":{}},\"required\":[\"b\"]}", DSV4_ERR_UNSUPPORTED, "\"b\"");
    refused("{\"$ref\":\"#/x\"}", DSV4_ERR_UNSUPPORTED, "$ref");
    refused("{\"$ref\":\"#\"}", DSV4_ERR_UNSUPPORTED, "cycle");
    refused("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", DSV4_ERR_UNSUPPORTED, "minItems");
    refused("{\"type\":\"foo\"}", DSV4_ERR_UNSUPPORTED, "\"foo\"");
    refused("{\"type\":\"string\",\"enum\":[1]}", DSV4_ERR_UNSUPPORTED, "enum");
    refused("{\"anyOf\":[{}],\"type\":\"string\"}", DSV4_ERR_UNSUPPORTED, "\"type\" beside 'anyOf'");
    refused("{\"type\":", DSV4_ERR_FORMAT, "not valid JSON");
    refused("{\"type\":\"object\"} x", DSV4_ERR_FORMAT, "not valid JSON");      /* trailing bytes */
    refused("{\"type\":\"array\",\"prefixItems\":[],\"items\":false,\"minItems\":1}", DSV4_ERR_UNSUPPORTED,
            "minItems");                                                     /* fuzz_json_schema's find */
    refused("false", DSV4_ERR_UNSUPPORTED, "schema");
    refused("{\"$defs\":{\"a\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/a\"},\"minItems\":1}},"
            "\"$ref\":\"#/$defs/a\"}", DSV4_ERR_UNSUPPORTED, "no finite JSON value");
}

/* ---- how many readings an anyOf may leave open (json_reads.c) ---- */

/* an anyOf of n object branches, all alive through "a" (a string), told apart only by "k"
 * (const i) after it; into buf */
static const char *union_of(char *buf, size_t cap, int n, const char *at) {
    size_t o = (size_t)snprintf(buf, cap, "{\"type\":\"object\",\"properties\":{\"u\":{\"%s\":[", at);
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},"
                              "\"k\":{\"const\":%d}},\"required\":[\"a\",\"k\"],\"additionalProperties\":false}",
                              i ? "," : "", i);
    snprintf(buf + o, cap - o, "]}},\"required\":[\"u\"]}");
    return buf;
}

#define EXPR(tag) "{\"$defs\":{\"e\":{\"anyOf\":[" \
    "{\"type\":\"object\",\"properties\":{" tag("add") ",\"l\":{\"$ref\":\"#/$defs/e\"},\"r\":{\"$ref\":\"#/$defs/e\"}},\"required\":[\"op\",\"l\",\"r\"]}," \
    "{\"type\":\"object\",\"properties\":{" tag("mul") ",\"l\":{\"$ref\":\"#/$defs/e\"},\"r\":{\"$ref\":\"#/$defs/e\"}},\"required\":[\"op\",\"l\",\"r\"]}," \
    "{\"type\":\"object\",\"properties\":{" tag("num") ",\"v\":{\"type\":\"number\"}},\"required\":[\"op\",\"v\"]}]}}," \
    "\"$ref\":\"#/$defs/e\"}"
#define OP_CONST(x) "\"op\":{\"const\":\"" x "\"}"
#define OP_ENUM(x) "\"op\":{\"enum\":[\"" x "\",\"any\"]}"

/* doc through states allocated at the schema's own capacity (json_state_size(max_stacks),
 * as the vocabulary walks keep them): accepted exactly when ok (under ASan, a step past the
 * capacity would be a heap overflow; past max_stacks the step fails whole) */
static void expect_small(const dsv4_json_schema *s, const char *doc, int ok) {
    json_state *a = malloc(json_state_size(s->max_stacks)), *b = malloc(json_state_size(s->max_stacks));
    int alive = a && b;
    if (a) json_state_init(s, a);
    for (const char *c = doc; *c && alive; c++) {
        alive = json_state_step(s, a, (uint8_t)*c, b);
        json_state *t = a;
        a = b, b = t;
    }
    CHECK_MSG((alive && json_state_accepting(s, a)) == ok, "%s: %s at capacity %d", doc, ok ? "refused" : "accepted",
              s->max_stacks);
    free(a), free(b);
}

/* json_grow refuses a size whose doubling would overflow (an int, then size_t bytes) */
static void test_grow(void) {
    int *p = NULL, cap = 0;
    CHECK(json_grow((void **)&p, &cap, 100, sizeof *p) == 0 && p && cap == 128);
    CHECK(json_grow((void **)&p, &cap, INT_MAX / 2 + 1, sizeof *p) == -1 && cap == 128);
    CHECK(json_grow((void **)&p, &cap, INT_MAX, sizeof *p) == -1 && cap == 128);
    free(p);
}

static void test_readings(void) {
    char buf[8192];
    /* 12 branches: each document fits one branch alone, and every reading is kept to the
     * end (JSON_MAX_STACKS 8 dropped 4 of them at the '{': those documents were refused),
     * also by states of the schema's own capacity (14 stacks: 12 readings and 2 expanding) */
    dsv4_json_schema *s = compile(union_of(buf, sizeof buf, 12, "oneOf"));
    CHECK_MSG(s && s->max_stacks == 14, "12 branches: %d stacks", s ? s->max_stacks : -1);
    for (int k = 0; s && k <= 12; k++) {
        char doc[64];
        snprintf(doc, sizeof doc, "{\"u\":{\"a\":\"x\",\"k\":%d}}", k);
        expect(s, doc, k < 12);
        expect_small(s, doc, k < 12);
    }
    dsv4_json_schema_free(s);
    /* no union: 2 stacks (the reading and one expanding), 1.7 KB a state instead of 24.7 */
    s = compile(PERSON);
    CHECK_MSG(s && s->max_stacks == 2, "no union: %d stacks", s ? s->max_stacks : -1);
    if (s) expect_small(s, "{\"name\":\"a\",\"age\":3,\"tags\":[\"b\",12]}", 1);
    dsv4_json_schema_free(s);
    s = compile(union_of(buf, sizeof buf, JSON_MAX_STACKS - 2, "anyOf")); /* the most that fit */
    if (s) expect(s, "{\"u\":{\"a\":\"\",\"k\":29}}", JSON_MAX_STACKS - 2 > 29);
    dsv4_json_schema_free(s);
    /* one more is refused at compile, naming the anyOf */
    refused(union_of(buf, sizeof buf, JSON_MAX_STACKS - 1, "anyOf"), DSV4_ERR_UNSUPPORTED,
            "'anyOf'/'oneOf' at #/properties/u/anyOf can leave more branches open at once than the automaton "
            "keeps: at most 30 branches can be open at once");
    /* a discriminated recursive union (an expression tree: "op" first, a const) has 3 readings
     * at most; the same with "op" an enum that every branch shares ("any") multiplies its
     * readings by 2 a level: refused */
    s = compile(EXPR(OP_CONST));
    if (s) {
        expect(s, "{\"op\":\"add\",\"l\":{\"op\":\"num\",\"v\":1},\"r\":{\"op\":\"mul\",\"l\":{\"op\":\"num\",\"v\":2},"
                  "\"r\":{\"op\":\"num\",\"v\":3}}}", 1);
        expect(s, "{\"op\":\"add\",\"l\":{\"op\":\"num\",\"v\":1}}", 0);
    }
    dsv4_json_schema_free(s);
    refused(EXPR(OP_ENUM), DSV4_ERR_UNSUPPORTED, "'anyOf'/'oneOf' at #/$defs/e/anyOf");
}

/* ---- the mask against brute force over the real vocabulary ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* a random allowed id: half the time any, half the time a short one (to leave strings
 * and reach structure) */
static int32_t pick(const dsv4_tokenizer *tok, const uint64_t *bits, int V) {
    int n = 0, ns = 0;
    for (int v = 0; v < V; v++)
        if (bits[v >> 6] >> (v & 63) & 1) {
            size_t len;
            dsv4_tok_id_bytes(tok, v, &len);
            n++, ns += len <= 2;
        }
    if (!n) return -1;
    const int shortp = ns && (next_rand() & 1);
    int k = (int)(next_rand() % (uint64_t)(shortp ? ns : n));
    for (int v = 0; v < V; v++)
        if (bits[v >> 6] >> (v & 63) & 1) {
            size_t len;
            dsv4_tok_id_bytes(tok, v, &len);
            if ((!shortp || len <= 2) && k-- == 0) return v;
        }
    return -1;
}

static void test_mask(const dsv4_tokenizer *tok, const json_vocab *jv, const char *schema, int steps, int every) {
    dsv4_json_schema *s = compile(schema);
    if (!s) return;
    json_walk w;
    CHECK(json_walk_init(&w, jv, JSON_MAX_STACKS) == 0);
    json_state *st = malloc(2 * sizeof *st);
    uint64_t *bits = malloc((size_t)jv->words * sizeof *bits), *brute = malloc((size_t)jv->words * sizeof *bits);
    json_state_init(s, &st[0]);
    int cur = 0, compared = 0;
    for (int i = 0; i < steps; i++) {
        atomic_store(&counting, 1);
        json_mask(s, jv, &w, &st[cur], bits);
        atomic_store(&counting, 0);
        if (i % every == 0) {
            json_mask_brute(s, tok, &st[cur], brute, jv->words);
            int diff = 0;
            for (int k = 0; k < jv->words; k++) diff += __builtin_popcountll(bits[k] ^ brute[k]);
            CHECK_MSG(diff == 0, "%s: step %d: the mask differs from brute force in %d ids", schema, i, diff);
            compared++;
        }
        const int32_t t = pick(tok, bits, jv->V);
        if (t < 0) {
            CHECK_MSG(json_state_accepting(s, &st[cur]), "%s: step %d: nothing allowed, not complete", schema, i);
            break;
        }
        size_t len;
        const char *b = dsv4_tok_id_bytes(tok, t, &len);
        atomic_store(&counting, 1);
        for (size_t k = 0; k < len; k++, cur ^= 1) CHECK(json_state_step(s, &st[cur], (uint8_t)b[k], &st[cur ^ 1]));
        atomic_store(&counting, 0);
    }
    CHECK(compared > 0);
    CHECK_MSG(atomic_load(&n_calls) == 0, "%ld allocator calls in mask/step", atomic_load(&n_calls));
    json_walk_free(&w);
    free(st), free(bits), free(brute);
    dsv4_json_schema_free(s);
}

/* The mask against brute force after each prefix of text whose length is in at[n]: a string
 * schema met twice (the walk's cache keyed without the count must hold for the second
 * string too). */
static void test_mask_at(const dsv4_tokenizer *tok, const json_vocab *jv, const char *schema, const char *text,
                         const int *at, int n) {
    dsv4_json_schema *s = compile(schema);
    json_walk w;
    json_state *st = malloc(2 * sizeof *st);
    uint64_t *bits = malloc((size_t)jv->words * sizeof *bits), *brute = malloc((size_t)jv->words * sizeof *bits);
    if (!s || !st || !bits || !brute || json_walk_init(&w, jv, JSON_MAX_STACKS)) return;
    json_state_init(s, &st[0]);
    int cur = 0, done = 0;
    for (int i = 0; i < n; i++) {
        CHECK(json_state_feed(s, st, &cur, (const uint8_t *)text + done, (size_t)(at[i] - done)));
        done = at[i];
        json_mask(s, jv, &w, &st[cur], bits);
        json_mask_brute(s, tok, &st[cur], brute, jv->words);
        int diff = 0;
        for (int k = 0; k < jv->words; k++) diff += __builtin_popcountll(bits[k] ^ brute[k]);
        CHECK_MSG(diff == 0, "%s: after %d bytes: the mask differs from brute force in %d ids", schema, at[i], diff);
    }
    json_walk_free(&w);
    free(st), free(bits), free(brute);
    dsv4_json_schema_free(s);
}

/* Readings alive inside strings of different kinds at once: the mask is the OR of each
 * distinct string frame's (json_mask's mask_strings), against brute force. Constrained ones
 * alone (two alike with maxLength 5 that share one json_strc, two patterns; no mask holds
 * another's) at a string's start, within the lengths, where maxLength ends, inside a 2-byte
 * UTF-8 character and past it; then with a plain string among them. */
#define STR_BRANCH(S, K) "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"" S "},\"k\":" \
    "{\"const\":" K "}},\"required\":[\"a\",\"k\"]}"
#define STR_CONSTRAINED STR_BRANCH(",\"maxLength\":5", "1") "," STR_BRANCH(",\"maxLength\":5", "2") "," \
    STR_BRANCH(",\"pattern\":\"^[a-z ]+$\",\"maxLength\":60", "3") "," \
    STR_BRANCH(",\"pattern\":\"^[^0-9]*$\",\"minLength\":3", "4")
static void test_strings_union(const dsv4_tokenizer *tok, const json_vocab *jv) {
    static const char schema[] = "{\"anyOf\":[" STR_CONSTRAINED "]}";
    static const char mixed[] = "{\"anyOf\":[" STR_CONSTRAINED "," STR_BRANCH("", "0") "]}";
    dsv4_json_schema *s = compile(schema);
    CHECK_MSG(s && s->n_strcs == 3, "the two maxLength 5 strings share one json_strc: %d", s ? s->n_strcs : -1);
    dsv4_json_schema_free(s);
    static const int at[] = {6, 7, 8, 10, 11, 12, 13, 15};
    test_mask_at(tok, jv, schema, "{\"a\":\"ab cd\xc3\xa9xy", at, 8);
    test_mask_at(tok, jv, mixed, "{\"a\":\"ab cd\xc3\xa9xy", at, 3);
}

/* Constrained strings that each need a walk in the same step share one walk of the trie
 * (json_cstr_walk_any): counting patterns that end at different lengths, the first one (the
 * walk's first frame) ending first so that the next takes over inside the tokens. Then
 * beside them a literal that goes on with "," where no string can (the readings outside
 * strings are walked alone: ids that only they take). The mask against brute force at the
 * string's start, inside it, around and past the ends. */
static void test_strings_walk_any(const dsv4_tokenizer *tok, const json_vocab *jv) {
    static const char schema[] = "{\"anyOf\":[" STR_BRANCH(",\"pattern\":\"^.{0,6}$\"", "1") ","
        STR_BRANCH(",\"pattern\":\"^[a-z ]{0,9}$\"", "2") "," STR_BRANCH(",\"pattern\":\"^.{0,12}$\"", "3") "]}";
    static const int at[] = {6, 12, 14, 18};
    test_mask_at(tok, jv, schema, "{\"a\":\"ab cdefghijkl", at, 4);
    static const char lit[] = "{\"anyOf\":[" STR_BRANCH(",\"pattern\":\"^.{0,6}$\"", "1") ","
        STR_BRANCH(",\"pattern\":\"^[a-z ]{0,12}$\"", "2") ","
        "{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[\"ab cde, fgh\"]},\"k\":{\"const\":4}},"
        "\"required\":[\"a\",\"k\"]}]}";
    static const int lit_at[] = {6, 12};
    test_mask_at(tok, jv, lit, "{\"a\":\"ab cde, fgh", lit_at, 2);
}

/* The shared walk brings a string along the path a code point at a time (the bytes inside a
 * character folded in, one DFA step at its last): rv-smx4's patterns, every string taking any
 * three characters and then only its own (ASCII, 2-byte, 3-byte, a 3-byte range after two),
 * so that at a CJK token's later characters the first string dies and the others are brought
 * along multi-byte characters. The mask against brute force at the string's start, after a
 * character, inside one (the frames start mid-character), and after three. */
#define CHAR_AFTER(N, C, K) STR_BRANCH(",\"pattern\":\"^(.{0," N "}|.{" N "}" C ".*)$\"", K)
static void test_strings_walk_utf8(const dsv4_tokenizer *tok, const json_vocab *jv) {
    static const char schema[] = "{\"anyOf\":[" CHAR_AFTER("3", "x", "1") "," CHAR_AFTER("3", "\xc3\xa9", "2") ","
        CHAR_AFTER("3", "\xe8\x83\xbd", "3") "," CHAR_AFTER("2", "[\xe3\x81\xae-\xe3\x82\x93]", "4") "]}";
    static const int at[] = {6, 9, 10, 11, 15};
    test_mask_at(tok, jv, schema, "{\"a\":\"\xe4\xba\xba\xe5\xb7\xa5\xe6\x99\xba\xe8\x83\xbdxyz", at, 5);
    /* "^YI ONE$" dies inside the token "YI ONE GE" (U+4EE5 U+4E00 U+4E2A) where "^YI" is
     * brought along it (through ONE, whose middle byte's frame it skips), then the walk comes
     * back to "YI XIA" (U+4E0B: a sibling of ONE's last byte): the second string goes on from
     * its frame at the boundary before ONE, not from a middle-byte frame of another path's.
     * Either order of the two. */
#define YI "\xe4\xbb\xa5"
    static const char two[] = "{\"anyOf\":[" STR_BRANCH(",\"pattern\":\"^" YI "\xe4\xb8\x80$\"", "1") ","
        STR_BRANCH(",\"pattern\":\"^" YI "\"", "2") "]}";
    static const char owt[] = "{\"anyOf\":[" STR_BRANCH(",\"pattern\":\"^" YI "\"", "2") ","
        STR_BRANCH(",\"pattern\":\"^" YI "\xe4\xb8\x80$\"", "1") "]}";
#undef YI
    test_mask_at(tok, jv, two, "{\"a\":\"", at, 1);
    test_mask_at(tok, jv, owt, "{\"a\":\"", at, 1);
}

/* Alive means completable: along a text that nests as deep as the schema lets it, every
 * state the automaton keeps has a token to go on with or is complete (the depth bound is
 * checked before an object, array, property or item starts, not found too late). */
/* some allowed id has a byte that is not whitespace (whitespace alone, in bounded runs,
 * can only postpone a dead end) */
static int goes_on(const dsv4_tokenizer *tok, const uint64_t *bits, int V) {
    for (int v = 0; v < V; v++)
        if (bits[v >> 6] >> (v & 63) & 1) {
            size_t len;
            const char *b = dsv4_tok_id_bytes(tok, v, &len);
            for (size_t i = 0; i < len; i++)
                if (!strchr(" \t\n\r", b[i])) return 1;
        }
    return 0;
}

static void test_deep(const dsv4_tokenizer *tok, const json_vocab *jv, const char *schema, const char *unit, int times) {
    dsv4_json_schema *s = compile(schema);
    json_walk w;
    json_state *st = malloc(2 * sizeof *st);
    uint64_t *bits = malloc((size_t)jv->words * sizeof *bits);
    if (!s || !st || !bits || json_walk_init(&w, jv, JSON_MAX_STACKS)) return;
    json_state_init(s, &st[0]);
    int cur = 0, alive = 1, steps = 0;
    for (int r = 0; r < times && alive; r++)
        for (const char *c = unit; *c && alive; c++, cur ^= 1, steps++) {
            json_mask(s, jv, &w, &st[cur], bits);
            CHECK_MSG(goes_on(tok, bits, jv->V) || json_state_accepting(s, &st[cur]),
                      "%s: a dead end (whitespace at most) after %d bytes", schema, steps);
            alive = json_state_step(s, &st[cur], (uint8_t)*c, &st[cur ^ 1]);
        }
    CHECK_MSG(!alive, "%s: the nesting was not bounded", schema);
    json_walk_free(&w);
    free(st), free(bits);
    dsv4_json_schema_free(s);
}

/* json_strc.acc against the step it stands for: from every DFA state q and count n of the
 * string, a byte that steps a frame (q, n) alive between characters has its bit set (the walks
 * skip a byte whose bit is clear, and their step memo can hide a missing bit from the mask
 * tests: rv-smx5's mutation, '~' and DEL left out, passed them) */
static void test_byte_sets(const char *schema) {
    dsv4_json_schema *s = compile(schema);
    json_state *st = malloc(2 * sizeof *st);
    json_frame top;
    if (!s || !st) return;
    json_state_init(s, &st[0]);
    CHECK(json_state_step(s, &st[0], '"', &st[1]) && json_state_in_cstr(&st[1], &top));
    const json_strc *sc = &s->strcs[s->nodes[top.node].strc];
    CHECK_MSG(sc->acc != NULL, "%s: no byte sets", schema);
    int missing = 0, alive = 0;
    for (int q = 0; sc->acc && q < sc->dfa.n_states; q++)
        for (int n = 0; n <= sc->cap && n < 80; n++)
            for (int c = 0x20; c < 0xF5; c++) {
                json_frame f = top;
                f.q = (uint32_t)q, f.b = (uint64_t)n, f.a = 0;
                if (c == '"' || c == '\\' || !json_cstr_step(s, &f, (uint8_t)c)) continue;
                alive++;
                missing += !(sc->acc[(size_t)q * 4 + (size_t)(c >> 6)] >> (c & 63) & 1);
            }
    CHECK_MSG(missing == 0 && alive > 0, "%s: %d of %d live steps have no bit", schema, missing, alive);
    free(st);
    dsv4_json_schema_free(s);
}

int main(void) {
    test_byte_sets("{\"type\":\"string\",\"pattern\":\"^(.{0,3}|.{3}o.*)$\"}");
    test_byte_sets("{\"type\":\"string\",\"pattern\":\"^[^0-9]*$\",\"minLength\":3,\"maxLength\":20}");
    test_byte_sets("{\"type\":\"string\",\"pattern\":\"\xc3\xa9|\xe4\xb8\xad\",\"maxLength\":4}");
    test_byte_sets("{\"type\":\"string\",\"format\":\"email\"}");
    test_byte_sets("{\"type\":\"string\",\"pattern\":\"^\\\\w+( \\\\w+)*$\",\"maxLength\":24}");
    test_accepts();
    test_refused();
    test_combinators();
    test_readings();
    test_grow();
    test_require_shared();
    char path[512];
    dsv4_tokenizer *tok = NULL;
    dsv4_err err = {0};
    if (dsv4_tokenizer_load(test_shared("tokenizer/tokenizer.json", path, sizeof path), &tok, &err)) {
        fprintf(stderr, "tokenizer: %s\n", err.msg);
        return 1;
    }
    json_vocab *jv = json_vocab_build(tok);
    CHECK(jv != NULL);
    if (jv) {
        printf("vocab %d ids: trie %d nodes, string-special trie %d nodes, longest %d bytes\n", jv->V, jv->n_all,
               jv->n_spec, jv->max_len);
        test_mask(tok, jv, PERSON, 40, 5);
        test_mask(tok, jv, TREE, 40, 5);
        test_mask(tok, jv, OBJ, 40, 5);
        test_mask(tok, jv, PYD, 40, 4);
        /* 12 readings inside the same string (the in-string bitset serves them all), then at
         * the key that tells them apart */
        char ubuf[8192];
        static const int u_at[] = {13, 22};
        test_mask_at(tok, jv, union_of(ubuf, sizeof ubuf, 12, "anyOf"), "{\"u\":{\"a\":\"x y\\n\",\"k\":1", u_at, 2);
        test_strings_union(tok, jv);
        test_strings_walk_any(tok, jv);
        test_strings_walk_utf8(tok, jv);
        /* bounded numbers: the mask after each byte of a document's numbers, and random walks */
        static const char nums_doc[] = "[{\"age\":150,\"score\":0.75,\"step\":95,\"t\":-1.125},{\"age\":7,\"score\":1,";
        int nums_at[64], n_at = 0, k = 0;
        for (int i = 1; nums_doc[i - 1] && n_at < 64; i++) /* every other byte of a number, and each one's start */
            if (nums_doc[i - 1] == ':' || (strchr("-0123456789.", nums_doc[i - 1]) && k++ % 2)) nums_at[n_at++] = i;
        test_mask_at(tok, jv, NUMS, nums_doc, nums_at, n_at);
        for (int r = 0; r < 2; r++)
            test_mask(tok, jv, "{\"type\":\"number\",\"exclusiveMinimum\":-2.5,\"maximum\":1000,\"multipleOf\":0.125}", 10, 2);
        for (int r = 0; r < 3; r++) test_mask(tok, jv, STRS, 60, 3); /* constrained strings: the whole trie walked */
        /* the cached masks: with max (ids longer than the room stepped one by one), without */
        test_mask(tok, jv, "{\"type\":\"string\",\"pattern\":\"^[a-z ]+$\",\"maxLength\":60}", 30, 2);
        test_mask(tok, jv, "{\"type\":\"string\",\"minLength\":40}", 20, 2);
        static const int at[] = {3, 42, 46, 47};
        test_mask_at(tok, jv, "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^[a-z ]+$\","
                     "\"maxLength\":60}}", "[\"abcdefghijabcdefghijabcdefghijabcdefghij\",\"ab", at, 4);
        test_mask(tok, jv, "{\"type\":\"string\",\"pattern\":\"^[^0-9]*$\",\"minLength\":10}", 20, 2);
        test_mask(tok, jv, "{\"enum\":[\"red\",\"green\",\"gr\\u00fcn\",12,1]}", 6, 1);
        test_deep(tok, jv, "{\"type\":\"object\",\"properties\":{\"k\":{\"$ref\":\"#\"},\"v\":{\"type\":\"integer\"}},"
                  "\"required\":[\"v\"]}", "{\"k\":", 40);
        test_deep(tok, jv, "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"minItems\":1}}", "[[", 40);
        test_deep(tok, jv, "{\"type\":\"object\"}", "{\"a\":[", 40);
    }
    json_vocab_free(jv);
    dsv4_tokenizer_free(tok);
    return test_report();
}
