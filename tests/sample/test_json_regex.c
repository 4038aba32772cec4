/* test_json_regex.c — structured output's string constraints: the pattern compiler
 * (json_regex.c) against accept/reject tables written from ECMA-262's semantics (each row
 * is what `new RegExp(p, "u").test(s)` answers; tests/sample/ecma_check.js replays the
 * table through V8), the patterns outside the subset refused by name, the built-in formats,
 * and minLength / maxLength / pattern in the automaton: code points counted after
 * unescaping, and a string kept alive only while it can still close (a character begun,
 * an escape begun, a count that leaves no room).
 *   test_json_regex */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/json.h"
#include "test.h"

typedef struct row { const char *p, *s; int want; } row;

/* C escapes only for bytes (UTF-8 written out) and quotes; the pattern's own escapes are
 * doubled backslashes */
static const row ECMA[] = {
    {"abc", "xabcx", 1}, {"abc", "ab", 0}, {"", "anything", 1}, {"", "", 1},
    {"^abc$", "abc", 1}, {"^abc$", "abcd", 0}, {"^abc", "abcd", 1}, {"abc$", "xabc", 1}, {"abc$", "abcx", 0},
    {"^$", "", 1}, {"^$", "a", 0}, {"a$b", "ab", 0}, {"x^a", "xa", 0},
    {"a|b", "xbx", 1}, {"^a|b$", "ax", 1}, {"^a|b$", "xb", 1}, {"^a|b$", "xa", 0}, {"^(a|b)$", "ab", 0},
    {"^a*$", "", 1}, {"^a*$", "aaa", 1}, {"^a+$", "", 0}, {"^a?b$", "b", 1}, {"^a?b$", "aab", 0},
    {"^a{2}$", "aa", 1}, {"^a{2}$", "aaa", 0}, {"^a{2,}$", "aaaa", 1}, {"^a{2,}$", "a", 0},
    {"^a{2,3}$", "aaa", 1}, {"^a{2,3}$", "aaaa", 0}, {"^a{0}$", "", 1},
    {"^(?:ab)+$", "abab", 1}, {"^(?:ab)+$", "aba", 0}, {"^(?<y>\\d{4})-(\\d\\d)$", "2024-05", 1},
    {"^(a*)*$", "aaa", 1}, {"^(a|b)*c$", "ababc", 1}, {"(a|ab)(c|bcd)(d*)", "abcd", 1},
    {"^a*?b$", "aab", 1}, {"^a+?$", "aa", 1}, {"^a{1,2}?$", "aa", 1}, {"^a??$", "", 1},
    {"^\\d+$", "0123", 1}, {"^\\d+$", "12a", 0}, {"^\\d$", "\xd9\xa3", 0}, {"^\\D$", "a", 1}, {"^\\D$", "1", 0},
    {"^\\w+$", "a_Z9", 1}, {"^\\w$", "-", 0}, {"^\\w$", "\xc3\xa9", 0}, {"^\\W$", "\xc3\xa9", 1},
    {"^\\s$", " ", 1}, {"^\\s$", "\xc2\xa0", 1}, {"^\\s$", "\xe2\x80\xa8", 1}, {"^\\s$", "\xef\xbb\xbf", 1},
    {"^\\s$", "\v", 1}, {"^\\s$", "\xe2\x80\x8b", 0}, {"^\\S$", "\t", 0}, {"^\\S$", "x", 1},
    {"^.$", "\n", 0}, {"^.$", "\r", 0}, {"^.$", "\xe2\x80\xa9", 0}, {"^.$", "\xf0\x9f\x98\x80", 1},
    {"^.$", "\xc3\xa9", 1}, {"^..$", "\xf0\x9f\x98\x80", 0}, {"^.$", "\t", 1},
    {"^[a-c]+$", "abcab", 1}, {"^[a-c]+$", "abd", 0}, {"^[^a-c]$", "d", 1}, {"^[^a-c]$", "b", 0},
    {"^[^a-c]$", "\n", 1}, {"^[\\d.-]+$", "1.2-3", 1}, {"^[-a]$", "-", 1}, {"^[a-]$", "-", 1},
    {"^[\\]]$", "]", 1}, {"^[\\w\\s]+$", "a b", 1}, {"^[\\b]$", "\b", 1}, {"^[^]$", "\n", 1}, {"[]", "a", 0},
    {"^[^\\d\\s]$", "5", 0}, {"^[^\\d\\s]$", "x", 1}, {"^[\\D]$", "x", 1},
    {"^\\.$", ".", 1}, {"^\\.$", "a", 0}, {"^a\\+b$", "a+b", 1}, {"^\\/$", "/", 1}, {"^\\$\\^$", "$^", 1},
    {"^\\(\\)\\[\\]\\{\\}\\|\\\\$", "()[]{}|\\", 1},
    {"^\\x41\\u0042$", "AB", 1}, {"^\\ud83d\\ude00$", "\xf0\x9f\x98\x80", 1}, {"^\\t\\n\\r\\f\\v$", "\t\n\r\f\v", 1},
    {"^\\cJ$", "\n", 1}, {"^caf\xc3\xa9$", "caf\xc3\xa9", 1}, {"^[\xc3\xa0-\xc3\xbf]$", "\xc3\xa9", 1},
    {"^[\xc3\xa0-\xc3\xbf]$", "e", 0}, {"^[\\u4e00-\\u9fff]+$", "\xe4\xb8\xad\xe6\x96\x87", 1},
    {"colou?r", "my color", 1}, {"^[A-Z]{2}\\d{3}$", "AB123", 1}, {"^[A-Z]{2}\\d{3}$", "AB12", 0},
    {"^(?:\\+?1[-. ]?)?\\(?\\d{3}\\)?[-. ]?\\d{3}[-. ]?\\d{4}$", "+1 (555) 123-4567", 1},
    {"^(?:\\+?1[-. ]?)?\\(?\\d{3}\\)?[-. ]?\\d{3}[-. ]?\\d{4}$", "555-12-4567", 0},
};

/* outside the subset: the pattern, and what the message names */
static const row REFUSED[] = {
    {"(?=a)", "lookahead", 0}, {"(?!a)", "lookahead", 0}, {"(?<=a)b", "lookbehind", 0}, {"(?<!a)b", "lookbehind", 0},
    {"(a)\\1", "backreference", 0}, {"\\k<x>", "named backreference", 0}, {"\\bword", "word boundary", 0},
    {"\\B", "word boundary", 0}, {"\\p{L}", "Unicode property", 0}, {"\\P{L}", "Unicode property", 0},
    {"\\u{1F600}", "\\u{", 0}, {"\\01", "octal", 0}, {"\\q", "unknown escape", 0}, {"a**", "nothing to repeat", 0},
    {"*a", "nothing to repeat", 0}, {"(a", "unbalanced", 0}, {"a)", "unbalanced", 0}, {"[a", "unterminated", 0},
    {"[z-a]", "out of order", 0}, {"a{3,2}", "out of order", 0}, {"a{1001}", "more than 1000", 0},
    {"[\\d-z]", "range's end", 0}, {"\\ud800", "lone surrogate", 0}, {"x{2}{3}", "nothing to repeat", 0},
    {"^*", "after an assertion", 0}, {"(?x)", "unknown group", 0}, {"\\c1", "\\c", 0}, {"a\\", "backslash", 0},
    {"a.{15}", "more than 1024", 0}, {"(((a{30}){30}){30})", "more than 4096", 0}, {"\xff", "UTF-8", 0},
};

/* the DFA run over text's code points (UTF-8) */
static int dfa_matches(const json_dfa *d, const char *text) {
    const uint8_t *p = (const uint8_t *)text;
    int q = 0;
    while (*p && q >= 0) {
        uint32_t cp = *p++;
        const int n = cp < 0x80 ? 0 : cp < 0xE0 ? 1 : cp < 0xF0 ? 2 : 3;
        if (n) cp &= 0x3F >> n;
        for (int i = 0; i < n; i++) cp = cp << 6 | (*p++ & 0x3Fu);
        q = d->next[(size_t)q * (size_t)d->n_classes + (size_t)json_dfa_class(d, cp)];
    }
    return q >= 0 && d->accept[q];
}

static void test_ecma(void) {
    char why[200];
    for (size_t i = 0; i < sizeof ECMA / sizeof *ECMA; i++) {
        json_dfa d;
        if (json_regex_compile(ECMA[i].p, strlen(ECMA[i].p), &d, NULL, why, sizeof why)) {
            CHECK_MSG(0, "/%s/: %s", ECMA[i].p, why);
            continue;
        }
        CHECK_MSG(dfa_matches(&d, ECMA[i].s) == ECMA[i].want, "/%s/ on '%s': want %d", ECMA[i].p, ECMA[i].s,
                  ECMA[i].want);
        json_dfa_free(&d);
    }
    /* Annex B's literal braces and brackets (a syntax error only in Unicode mode) */
    json_dfa d;
    CHECK(json_regex_compile("^a{,3}}]$", 9, &d, NULL, why, sizeof why) == 0);
    if (d.n_states) CHECK(dfa_matches(&d, "a{,3}}]"));
    json_dfa_free(&d);
    for (size_t i = 0; i < sizeof REFUSED / sizeof *REFUSED; i++) {
        why[0] = 0;
        const int rc = json_regex_compile(REFUSED[i].p, strlen(REFUSED[i].p), &d, NULL, why, sizeof why);
        CHECK_MSG(rc != 0 && strstr(why, REFUSED[i].s), "/%s/: rc %d, '%s' lacks '%s'", REFUSED[i].p, rc, why,
                  REFUSED[i].s);
        if (!rc) json_dfa_free(&d);
    }
    /* long patterns are refused while parsing (they overflowed the stack in build(): a
     * 90 KB pattern crashed the server); mutation: no cap in node() -> SIGSEGV here */
    const size_t big = 200000;
    char *p = malloc(big + 1);
    for (int alt = 0; p && alt < 2; alt++) {
        for (size_t i = 0; i < big; i++) p[i] = alt && i % 2 ? '|' : 'a'; /* aaa... or a|a|... (100K) */
        p[big] = 0;
        why[0] = 0;
        const int rc = json_regex_compile(p, big, &d, NULL, why, sizeof why);
        CHECK_MSG(rc != 0 && strstr(why, "more than 8192 terms"), "200 KB pattern %d: rc %d '%s'", alt, rc, why);
        if (!rc) json_dfa_free(&d);
    }
    free(p);
}

static dsv4_json_schema *compile(const char *schema) {
    dsv4_json_schema *s = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_json_schema_compile(schema, strlen(schema), &s, &err) == 0, "%s: %s", schema, err.msg);
    return s;
}

static void expect(const char *schema, const char *text, int want) {
    dsv4_json_schema *s = compile(schema);
    if (!s) return;
    CHECK_MSG(dsv4_json_schema_accepts(s, text, strlen(text)) == want, "%s: %s '%s'", schema,
              want ? "should accept" : "should refuse", text);
    dsv4_json_schema_free(s);
}

/* 1 when the automaton still lives after the bytes of prefix */
static int alive(const char *schema, const char *prefix) {
    dsv4_json_schema *s = compile(schema);
    json_state *st = malloc(2 * sizeof *st);
    int cur = 0, ok = 0;
    if (s && st) {
        json_state_init(s, &st[0]);
        ok = json_state_feed(s, st, &cur, (const uint8_t *)prefix, strlen(prefix));
    }
    free(st);
    dsv4_json_schema_free(s);
    return ok;
}

static void refused(const char *schema, const char *what) {
    dsv4_json_schema *s = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_json_schema_compile(schema, strlen(schema), &s, &err) == DSV4_ERR_UNSUPPORTED && !s,
              "%s: code %d", schema, err.code);
    CHECK_MSG(strstr(err.msg, what) != NULL, "%s: message '%s' lacks '%s'", schema, err.msg, what);
    dsv4_json_schema_free(s);
}

#define LEN23 "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}"
#define AB "{\"type\":\"string\",\"pattern\":\"^a+b$\"}"

static void test_strings(void) {
    expect(LEN23, "\"a\"", 0);
    expect(LEN23, "\"ab\"", 1);
    expect(LEN23, "\"abc\"", 1);
    expect(LEN23, "\"abcd\"", 0);
    expect(LEN23, "\"\xc3\xa9\xc3\xa9\xc3\xa9\"", 1);       /* code points, not bytes */
    expect(LEN23, "\"\xf0\x9f\x98\x80\xf0\x9f\x98\x80\"", 1);
    expect(LEN23, "\"\\n\\u00e9\"", 1);                      /* after unescaping: 2 */
    expect(LEN23, "\"\\\\\\\\\\\\\\\\\"", 0);                  /* four backslashes */
    expect("{\"type\":\"string\",\"maxLength\":0}", "\"\"", 1);
    expect(AB, "\"aab\"", 1);
    expect(AB, "\"\\u0061b\"", 1);
    expect(AB, "\"a\\u0062\"", 1);
    expect(AB, "\"ba\"", 0);
    expect("{\"type\":\"string\",\"pattern\":\"b\"}", "\"abc\"", 1); /* unanchored */
    expect("{\"type\":\"string\",\"pattern\":\"b\"}", "\"ac\"", 0);
    expect("{\"type\":\"string\",\"pattern\":\"^/\\\\\\\\\\\"$\"}", "\"/\\\\\\\"\"", 1); /* / \ " escaped */
    expect("{\"pattern\":\"^x$\"}", "\"x\"", 1);              /* pattern alone: a string */
    expect("{\"pattern\":\"^x$\"}", "1", 0);
    expect("{\"type\":[\"string\",\"null\"],\"minLength\":1}", "null", 1);
    expect("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\",\"maxLength\":1}}",
           "{\"long key\":\"x\"}", 1);                      /* keys are not the values */
    expect("{\"type\":\"string\",\"pattern\":\"^(aa)*$\",\"minLength\":3}", "\"aaaa\"", 1);
    expect("{\"type\":\"string\",\"pattern\":\"^(aa)*$\",\"minLength\":3}", "\"aa\"", 0);
    /* a character or escape begun is kept only if it can finish into an allowed one */
    CHECK(!alive("{\"type\":\"string\",\"pattern\":\"^a$\"}", "\"\xc3"));
    CHECK(alive("{\"type\":\"string\",\"pattern\":\"^\xc3\xa9$\"}", "\"\xc3"));
    CHECK(!alive("{\"type\":\"string\",\"pattern\":\"^\xc3\xa9$\"}", "\"\xc4"));
    CHECK(alive("{\"type\":\"string\",\"pattern\":\"^a$\"}", "\"\\u00"));   /* \u0061 */
    CHECK(!alive("{\"type\":\"string\",\"pattern\":\"^a$\"}", "\"\\u01"));
    CHECK(!alive("{\"type\":\"string\",\"pattern\":\"^a$\"}", "\"\\n"));
    CHECK(!alive("{\"type\":\"string\",\"pattern\":\"^a$\"}", "\"\\ud8"));  /* no surrogate escapes */
    CHECK(!alive("{\"type\":\"string\",\"pattern\":\"^\xf0\x9f\x98\x80$\"}", "\"\xf0\x9f\x98\x81"));
    CHECK(!alive("{\"type\":\"string\",\"maxLength\":1}", "\"a\xc3"));      /* no room for it */
    CHECK(!alive("{\"type\":\"string\",\"maxLength\":1}", "\"a\\"));
    /* a count that leaves no room for what the pattern still needs */
    CHECK(alive("{\"type\":\"string\",\"pattern\":\"^[ab]*c$\",\"maxLength\":3}", "\"aa"));
    CHECK(!alive("{\"type\":\"string\",\"pattern\":\"^[ab]*c$\",\"maxLength\":3}", "\"aaa"));
    CHECK(!alive("{\"type\":\"string\",\"pattern\":\"^a{0,3}$\",\"minLength\":2}", "\"a\""));
    CHECK(alive("{\"type\":\"string\",\"pattern\":\"^a*$\",\"maxLength\":3}", "\"aaa"));
    CHECK(!alive("{\"type\":\"string\",\"pattern\":\"^a*$\",\"maxLength\":3}", "\"aaaa"));  /* past the table's row */
    CHECK(!alive("{\"type\":\"string\",\"format\":\"email\",\"maxLength\":6}", "\"ab@cd.ef"));
    CHECK(alive("{\"type\":\"string\",\"format\":\"email\",\"maxLength\":6}", "\"ab@c.d"));
    CHECK(!alive("{\"type\":\"string\",\"format\":\"email\",\"maxLength\":6}", "\"ab@c.de"));
    /* formats */
    static const row F[] = {
        {"date", "2024-02-29", 1}, {"date", "2024-02-30", 0}, {"date", "2024-04-31", 0}, {"date", "2024-13-01", 0},
        {"date", "24-01-01", 0}, {"time", "23:59:60Z", 1}, {"time", "10:00:00.5+05:30", 1}, {"time", "10:00:00", 0},
        {"time", "24:00:00Z", 0}, {"date-time", "2024-01-01T10:00:00Z", 1}, {"date-time", "2024-01-01t10:00:00z", 1},
        {"date-time", "2024-01-01 10:00:00Z", 0}, {"uuid", "123e4567-e89b-12d3-a456-426614174000", 1},
        {"uuid", "123e4567e89b12d3a456426614174000", 0}, {"email", "first.last+tag@mail.example.org", 1},
        {"email", "a@b", 0}, {"email", ".a@b.c", 0}, {"email", "a@-b.c", 0}, {"email", "a b@c.d", 0},
        {"hostname", "api.example.com", 1}, {"hostname", "x", 1}, {"hostname", "a_b.com", 0},
        {"hostname", "ab-.com", 0}, {"ipv4", "192.168.0.255", 1}, {"ipv4", "192.168.0.256", 0},
        {"ipv4", "1.2.3", 0}, {"ipv4", "01.2.3.4", 0}, {"duration", "P3Y6M4DT12H30M5S", 1},
        {"duration", "PT0.5S", 0}, {"duration", "P2W", 1}, {"duration", "PT36H", 1}, {"duration", "P", 0},
        {"duration", "P1YT", 0},
    };
    char schema[200], text[300];
    for (size_t i = 0; i < sizeof F / sizeof *F; i++) {
        snprintf(schema, sizeof schema, "{\"type\":\"string\",\"format\":\"%s\"}", F[i].p);
        snprintf(text, sizeof text, "\"%s\"", F[i].s);
        expect(schema, text, F[i].want);
    }
    char longhost[400] = "\"";
    for (int i = 0; i < 5; i++) strcat(longhost, i ? ".aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" :
                                                   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    expect("{\"format\":\"hostname\"}", strcat(longhost, "\""), 0);          /* 315 > 253 */
    expect("{\"format\":\"uuid\",\"pattern\":\"^0\"}", "\"0aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee\"", 1);
    expect("{\"format\":\"uuid\",\"pattern\":\"^0\"}", "\"1aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee\"", 0);

    refused("{\"type\":\"string\",\"pattern\":\"(?=x)\"}", "'pattern' uses a lookahead (?= (at #)");
    refused("{\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"uri\"}}}", "'format' \"uri\" (at #/properties/d)");
    refused("{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "minLength");
    refused("{\"type\":\"string\",\"pattern\":\"^a$\",\"minLength\":2}", "no string");
    refused("{\"type\":\"string\",\"pattern\":\"^[ab]$\",\"format\":\"date\"}", "no string");
    refused("{\"type\":\"string\",\"pattern\":\"[]\"}", "no string");
    refused("{\"type\":\"integer\",\"pattern\":\"1\"}", "string keywords without type");
    refused("{\"type\":\"string\",\"pattern\":1}", "'pattern' must be a string");
    refused("{\"type\":\"string\",\"minLength\":-1}", "minLength");
    refused("{\"type\":\"string\",\"pattern\":\"^[a-z]{0,500}x$\",\"maxLength\":100000}", "too large");
    refused("{\"enum\":[\"a\"],\"pattern\":\"a\"}", "beside 'enum'");
    refused("{\"type\":\"string\",\"pattern\":\"^a\\u0000b$\"}", "\\u0000");  /* cJSON would cut it to ^a */
    refused("{\"const\":\"a\\u0000b\"}", "\\u0000");
}

/* a schema of n string properties, each `field` (a JSON object's text), 63 to an object
 * (an object holds 64 at most) */
static char *many(int n, const char *field) {
    const size_t cap = (size_t)n * (strlen(field) + 16) + (size_t)n / 63 * 64 + 64 + 64;
    char *s = malloc(cap);
    size_t k = (size_t)snprintf(s, cap, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < n; i++) {
        if (i % 63 == 0) k += (size_t)snprintf(s + k, cap - k, "%s\"o%d\":{\"type\":\"object\",\"properties\":{",
                                               i ? "}}," : "", i / 63);
        k += (size_t)snprintf(s + k, cap - k, "%s\"p%d\":%s", i % 63 ? "," : "", i, field);
    }
    snprintf(s + k, cap - k, "}}}}");
    return s;
}

/* compiles without printing the (large) schema: the code, and the message */
static dsv4_json_schema *compile_big(const char *schema, const char *what) {
    dsv4_json_schema *s = NULL;
    dsv4_err err = {0};
    const int rc = dsv4_json_schema_compile(schema, strlen(schema), &s, &err);
    CHECK_MSG(rc == 0, "%s: %s", what, err.msg);
    return s;
}

static void refused_big(const char *schema, const char *what) {
    dsv4_json_schema *s = NULL;
    dsv4_err err = {0};
    const int rc = dsv4_json_schema_compile(schema, strlen(schema), &s, &err);
    CHECK_MSG(rc == DSV4_ERR_UNSUPPORTED && !s && strstr(err.msg, what), "rc %d '%s' lacks '%s'", rc, err.msg, what);
    dsv4_json_schema_free(s);
}

/* One schema's compile is bounded in work and bytes (it runs on the server's intake thread).
 * Each case took seconds (or a gigabyte) before the budget. Mutation: spend() never refusing
 * -> the two refusals below compile (49 s and 1.2 GB for the length tables). */
/* "^(?:\\u0100|\\u0101|...)" + tail: n alternatives of one code point each, as a schema's
 * pattern (JSON-escaped: \\\\u0100 in the text) or as the pattern itself */
static char *alternatives(int n, const char *tail, int json) {
    char *p = malloc(64 + 8 * (size_t)n);
    size_t k = (size_t)sprintf(p, "%s^(?:", json ? "{\"type\":\"string\",\"pattern\":\"" : "");
    for (int c = 0x100; c < 0x100 + n; c++) k += (size_t)sprintf(p + k, "%s%s%04x", c > 0x100 ? "|" : "", json ? "\\\\u" : "\\u", c);
    sprintf(p + k, ")%s%s", tail, json ? "\"}" : "");
    return p;
}

static void test_budget(void) {
    /* 1000 alternatives, 1000 classes: a legitimate large pattern, compiled well inside the
     * budget (5.0 s before the closure walked set words and charged them; then 197.9M of the
     * 200M units, as every DFA state paid for every class through the unanchored prefix's
     * dead ".*": 1.57M since a state keeps only NFA states that can still accept and pays
     * only for the classes it moves on). Mutation: the dead states kept -> over the budget. */
    char *p = alternatives(1000, "$", 1);
    dsv4_json_schema *s = compile_big(p, "1000 alternatives");
    if (s) CHECK(dsv4_json_schema_accepts(s, "\"\\u0101\"", 8) && !dsv4_json_schema_accepts(s, "\"a\"", 3));
    dsv4_json_schema_free(s);
    free(p);
    p = alternatives(1000, "$", 0);
    json_budget bud = {JSON_BUDGET_WORK, JSON_BUDGET_BYTES};
    json_dfa d;
    char why[200];
    CHECK_MSG(json_regex_compile(p, strlen(p), &d, &bud, why, sizeof why) == 0, "%s", why);
    /* the units a fixed pattern is charged, within a band (1.57M: the weights of the charge) */
    const int64_t used = JSON_BUDGET_WORK - bud.work;
    CHECK_MSG(used > 1000000 && used < 2500000, "1000 alternatives: %lld of %d work units", (long long)used,
              JSON_BUDGET_WORK);
    json_dfa_free(&d);
    free(p);
    /* legitimate schemas that compiled before (rv-smx6: charging a closure push 8 units
     * refused them): four strings of ".{0,1000}" (~12M units each), eight of "[\\s\\S]{0,1000}" */
    p = many(4, "{\"type\":\"string\",\"pattern\":\".{0,1000}\"}");
    dsv4_json_schema_free(compile_big(p, "4 x .{0,1000}"));
    free(p);
    p = many(8, "{\"type\":\"string\",\"pattern\":\"[\\\\s\\\\S]{0,1000}\"}");
    dsv4_json_schema_free(compile_big(p, "8 x [\\s\\S]{0,1000}"));
    free(p);
    /* length tables: 1000 x 2M-count tables (~16M units each) pass the work budget */
    p = many(1000, "{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":2000000}");
    refused_big(p, "compile budget of 200000000 work units");
    free(p);
    /* a format compiled once per schema and copied: 300 email fields fit; 4000 (28 s and
     * 151 MB before) spend the budget on their length tables and are refused */
    p = many(300, "{\"type\":\"string\",\"format\":\"email\"}");
    s = compile_big(p, "300 emails");
    if (s) CHECK(s->n_strcs == 1); /* alike: one json_strc shared by all 300 */
    dsv4_json_schema_free(s);
    free(p);
    p = many(4000, "{\"type\":\"string\",\"format\":\"email\"}");
    refused_big(p, "compile budget of 200000000 work units");
    free(p);
}

int main(void) {
    test_ecma();
    test_strings();
    test_budget();
    return test_report();
}
