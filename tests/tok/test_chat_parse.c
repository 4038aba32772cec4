/* test_chat_parse.c — splitting generated text into reasoning, content and DSML tool calls:
 * well-formed answers, answers cut short at every byte, malformed markup (each with its
 * error), seeded random corruption (must never crash or read out of bounds), and the round
 * trip encode(tool calls) -> parse -> same arguments. */
#include <cjson/cJSON.h>
#include <stdint.h>

#include "test.h"
#include "tok/chat.h"
#include "tok/dsml.h"

#define EOS DSV4_CHAT_EOS
#define DSML DSV4_DSML
#define P(name, flag, v) "<" DSML "parameter name=\"" name "\" string=\"" flag "\">" v "</" DSML "parameter>"
#define INV(name, body) "<" DSML "invoke name=\"" name "\">\n" body "</" DSML "invoke>\n"
#define BLOCK(body) "<" DSML "tool_calls>\n" body "</" DSML "tool_calls>"

static int parse(const char *text, int thinking, dsv4_parsed *p, dsv4_err *err) {
    return dsv4_dsml_parse(text, strlen(text), thinking, p, err);
}

/* Same JSON value (parsed both sides). */
static int json_eq(const char *a, const char *b) {
    cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
    int eq = x && y && cJSON_Compare(x, y, 1);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return eq;
}

static const char WELL[] =
    "Need weather and a sum.</think>Let me check.\n\n"
    BLOCK(INV("get_weather", P("city", "true", "Paris \"Left\" Bank\nline2") "\n"
                             P("days", "false", "3") "\n"
                             P("opts", "false", "{\"units\": [\"C\", 1.5], \"x\": null}") "\n")
          INV("noop", "")
          INV("add", P("a", "false", "-2") "\n" P("b", "false", "true") "\n"))
    EOS;

static void test_well_formed(void) {
    dsv4_parsed p;
    dsv4_err err = {0};
    CHECK(parse(WELL, 1, &p, &err) == 0);
    CHECK(p.reasoning && strcmp(p.reasoning, "Need weather and a sum.") == 0);
    CHECK(strcmp(p.content, "Let me check.") == 0);
    CHECK(p.ended == 1 && p.truncated == 0);
    CHECK(p.n_calls == 3);
    if (p.n_calls == 3) {
        CHECK(strcmp(p.calls[0].name, "get_weather") == 0);
        CHECK(json_eq(p.calls[0].arguments,
                      "{\"city\":\"Paris \\\"Left\\\" Bank\\nline2\",\"days\":3,"
                      "\"opts\":{\"units\":[\"C\",1.5],\"x\":null}}"));
        /* Arguments are written like Python's json.dumps, keys in parameter order. */
        CHECK(strcmp(p.calls[0].arguments,
                     "{\"city\": \"Paris \\\"Left\\\" Bank\\nline2\", \"days\": 3, "
                     "\"opts\": {\"units\": [\"C\", 1.5], \"x\": null}}") == 0);
        CHECK(strcmp(p.calls[1].name, "noop") == 0 && strcmp(p.calls[1].arguments, "{}") == 0);
        CHECK(strcmp(p.calls[2].arguments, "{\"a\": -2, \"b\": true}") == 0);
    }
    cJSON *j = dsv4_parsed_to_json(&p);
    CHECK(j != NULL);
    cJSON *tc = cJSON_GetObjectItem(j, "tool_calls");
    CHECK(cJSON_GetArraySize(tc) == 3);
    CHECK(strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(tc, 2), "function"), "name")->valuestring, "add") == 0);
    CHECK(strcmp(cJSON_GetObjectItem(j, "reasoning_content")->valuestring, "Need weather and a sum.") == 0);
    cJSON_Delete(j);
    dsv4_parsed_free(&p);

    /* Chat mode: content only, no reasoning; no EOS = not ended but not truncated. */
    CHECK(parse("Hello there.", 0, &p, &err) == 0);
    CHECK(p.reasoning == NULL && strcmp(p.content, "Hello there.") == 0 && p.n_calls == 0);
    CHECK(p.ended == 0 && p.truncated == 0);
    dsv4_parsed_free(&p);
    CHECK(parse("Hi." EOS, 0, &p, &err) == 0 && p.ended && strcmp(p.content, "Hi.") == 0);
    dsv4_parsed_free(&p);
    /* Thinking mode with empty reasoning and a tool call right after </think>. */
    CHECK(parse("</think>\n\n" BLOCK(INV("f", P("k", "true", "") "\n")) EOS, 1, &p, &err) == 0);
    CHECK(strcmp(p.reasoning, "") == 0 && strcmp(p.content, "") == 0 && p.n_calls == 1);
    CHECK(p.n_calls == 1 && strcmp(p.calls[0].arguments, "{\"k\": \"\"}") == 0);
    dsv4_parsed_free(&p);
    /* A string="false" value that is not JSON is kept as a string. */
    CHECK(parse(BLOCK(INV("f", P("k", "false", "not json") "\n")) EOS, 0, &p, &err) == 0);
    CHECK(p.n_calls == 1 && strcmp(p.calls[0].arguments, "{\"k\": \"not json\"}") == 0);
    dsv4_parsed_free(&p);
    /* ... and so is one with a NUL in it ("3\0" would otherwise pass as the JSON 3 and cut
     * the arguments short at the NUL) */
    static const char nul[] = BLOCK(INV("f", P("k", "false", "3\0") "\n")) EOS;
    CHECK(dsv4_dsml_parse(nul, sizeof nul - 1, 0, &p, &err) == 0);
    CHECK_MSG(p.n_calls == 1 && strcmp(p.calls[0].arguments, "{\"k\": \"3\\u0000\"}") == 0, "arguments %s",
              p.n_calls == 1 ? p.calls[0].arguments : "(no call)");
    dsv4_parsed_free(&p);
    /* Empty text. */
    CHECK(parse("", 0, &p, &err) == 0 && strcmp(p.content, "") == 0);
    dsv4_parsed_free(&p);
    CHECK(dsv4_dsml_parse(NULL, 5, 1, &p, &err) == 0 && p.truncated && strcmp(p.reasoning, "") == 0);
    dsv4_parsed_free(&p);
}

/* Every proper prefix of a well-formed answer is a valid beginning: no error, and what it
 * reports is consistent with the full parse. */
static void test_truncation(void) {
    dsv4_parsed full;
    dsv4_err err = {0};
    parse(WELL, 1, &full, &err);
    size_t n = strlen(WELL) - strlen(EOS);
    int bad = 0, saw_trunc = 0;
    for (size_t cut = 0; cut <= n; cut++) {
        dsv4_parsed p;
        int rc = dsv4_dsml_parse(WELL, cut, 1, &p, &err);
        if (rc != 0) { if (!bad++) fprintf(stderr, "cut %zu: %s\n", cut, err.msg); }
        else {
            saw_trunc += p.truncated;
            /* Complete calls seen so far are a prefix of the full list, equal to it. */
            if (p.n_calls > full.n_calls) bad++;
            for (int i = 0; i < p.n_calls && i < full.n_calls; i++)
                if (strcmp(p.calls[i].arguments, full.calls[i].arguments) != 0) bad++;
            /* Content never shows markup. */
            if (strstr(p.content, DSML)) { if (!bad++) fprintf(stderr, "cut %zu: markup in content '%s'\n", cut, p.content); }
            if (p.ended) bad++;
        }
        dsv4_parsed_free(&p);
    }
    CHECK_MSG(bad == 0, "%d bad prefixes", bad);
    CHECK(saw_trunc > 100);
    /* The whole body without EOS is complete, not truncated. */
    dsv4_parsed p;
    CHECK(dsv4_dsml_parse(WELL, n, 1, &p, &err) == 0 && !p.truncated && p.n_calls == 3 && !p.ended);
    dsv4_parsed_free(&p);
    /* Cut inside the reasoning: truncated, all of it reasoning. */
    CHECK(parse("still thinking", 1, &p, &err) == 0 && p.truncated && strcmp(p.reasoning, "still thinking") == 0);
    dsv4_parsed_free(&p);
    /* Cut inside a parameter: the finished call is kept, the open one is not. */
    CHECK(parse("x\n\n" "<" DSML "tool_calls>\n" INV("a", "") "<" DSML "invoke name=\"b\">\n"
                P("k", "true", "v") "\n<" DSML "parameter name=\"z\" string=\"true\">par", 0, &p, &err) == 0);
    CHECK(p.truncated && p.n_calls == 1 && strcmp(p.content, "x") == 0);
    dsv4_parsed_free(&p);
    dsv4_parsed_free(&full);
}

/* Malformed text: an error naming the problem, the raw text kept in the content. */
static void expect_bad(const char *text, int thinking, const char *why) {
    dsv4_parsed p;
    dsv4_err err = {0};
    int rc = parse(text, thinking, &p, &err);
    CHECK_MSG(rc == DSV4_ERR_FORMAT, "'%s' parsed (rc %d)", why, rc);
    CHECK_ERR(err, DSV4_ERR_FORMAT, why);
    CHECK(p.n_calls == 0 && p.content != NULL && !p.truncated);
    dsv4_parsed_free(&p);
}

static void test_malformed(void) {
    expect_bad("thinking forever" EOS, 1, "reasoning not closed by </think>");
    expect_bad("a\n\n" BLOCK(INV("f", P("k", "true", "1") "\n" P("k", "true", "2") "\n")) EOS, 0,
               "duplicate parameter name");
    expect_bad(BLOCK(INV("f", P("k", "maybe", "1") "\n")) EOS, 0, "string= must be");
    expect_bad(BLOCK(INV("f", "")) "trailing words" EOS, 0, "text after the tool_calls block");
    expect_bad("a <" DSML "invoke name=\"f\">" EOS, 0, "stray DSML markup");
    expect_bad("ok" EOS "more", 0, "text after EOS");
    expect_bad("<" DSML "tool_calls>\n<" DSML "invoke name=\"f\">\n" EOS, 0, "unterminated invoke");
    expect_bad("<" DSML "tool_calls>\n" EOS, 0, "unterminated tool_calls block");
    expect_bad("<" DSML "tool_calls>\nhello\n</" DSML "tool_calls>" EOS, 0,
               "expected <｜DSML｜invoke or </｜DSML｜tool_calls>");
    expect_bad(BLOCK(INV("f", "junk\n")) EOS, 0, "expected <｜DSML｜parameter or </｜DSML｜invoke>");
    expect_bad(BLOCK("<" DSML "invoke nom=\"f\">\n</" DSML "invoke>\n") EOS, 0, "expected name=");
    expect_bad(BLOCK(INV("f", "<" DSML "parameter name=\"k\">v</" DSML "parameter>\n")) EOS, 0,
               "expected string=");

    /* No generated text is lost: the content holds everything after the reasoning. */
    const char *t = "r</think>before\n\n" BLOCK(INV("f", P("k", "true", "1") "\n" P("k", "true", "2") "\n")) EOS;
    dsv4_parsed p;
    dsv4_err err = {0};
    CHECK(parse(t, 1, &p, &err) == DSV4_ERR_FORMAT);
    CHECK(strcmp(p.reasoning, "r") == 0);
    size_t body = strlen(t) - strlen("r</think>") - strlen(EOS);
    CHECK(strlen(p.content) == body && memcmp(p.content, t + strlen("r</think>"), body) == 0);
    dsv4_parsed_free(&p);
}

/* Seeded corruption of a valid answer: flips, deletions and insertions of markup pieces.
 * The parser must return 0 or DSV4_ERR_FORMAT, and keep its promises, every time. */
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void test_corruption(void) {
    static const char *pieces[] = {"<" DSML "tool_calls>", "</" DSML "tool_calls>", "<" DSML "invoke",
                                   "</" DSML "invoke>", "<" DSML "parameter", "</" DSML "parameter>",
                                   "\">", "\"", "</think>", EOS, "\n", "string=\"false\">", DSML};
    size_t n0 = strlen(WELL);
    char *buf = malloc(n0 + 256);
    int bad = 0, n_ok = 0, n_err = 0;
    for (int iter = 0; iter < 4000; iter++) {
        memcpy(buf, WELL, n0);
        size_t n = n0;
        int edits = 1 + (int)(rnd() % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = rnd() % (n + 1);
            switch (rnd() % 4) {
            case 0: if (at < n) buf[at] = (char)(rnd() & 0xFF); break;
            case 1: { size_t k = rnd() % 16; if (at + k > n) k = n - at; memmove(buf + at, buf + at + k, n - at - k); n -= k; break; }
            case 2: { const char *s = pieces[rnd() % (sizeof pieces / sizeof *pieces)]; size_t k = strlen(s);
                      if (n + k < n0 + 256) { memmove(buf + at + k, buf + at, n - at); memcpy(buf + at, s, k); n += k; } break; }
            case 3: n = at; break;  /* cut */
            }
        }
        /* Parse from an exact-size heap copy so ASan sees any overread. */
        char *t = malloc(n ? n : 1);
        memcpy(t, buf, n);
        dsv4_parsed p;
        dsv4_err err = {0};
        int rc = dsv4_dsml_parse(t, n, iter & 1, &p, &err);
        if (rc == 0) n_ok++;
        else if (rc == DSV4_ERR_FORMAT) { n_err++; if (p.n_calls || !err.msg[0]) bad++; }
        else bad++;
        if (!p.content) bad++;
        for (int i = 0; i < p.n_calls; i++) {
            cJSON *a = cJSON_Parse(p.calls[i].arguments);  /* arguments are always valid JSON */
            if (!cJSON_IsObject(a)) bad++;
            cJSON_Delete(a);
        }
        dsv4_parsed_free(&p);
        free(t);
    }
    free(buf);
    CHECK_MSG(bad == 0, "%d broken results", bad);
    CHECK(n_ok > 100 && n_err > 100);  /* both outcomes were exercised */
}

/* encode(message with tool calls) -> the generated part -> parse: same arguments, and the
 * parsed message encodes back to the same text. */
static void test_round_trip(void) {
    const char *msgs =
        "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"reasoning_content\":\"think\","
        "\"content\":\"c\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"arguments\":\"{\\\"s\\\": \\\"a<b>\\\\n\\\\\\\"q\\\\\\\"\\\", \\\"n\\\": 1.25, \\\"l\\\": [1, {\\\"x\\\": \\\"中\\\"}], \\\"t\\\": false}\"}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]}]";
    cJSON *m = cJSON_Parse(msgs);
    CHECK(m != NULL);
    dsv4_chat_opts o = {.thinking = 1};
    char *text = NULL;
    dsv4_err err = {0};
    CHECK(dsv4_chat_encode(m, NULL, &o, &text, NULL, &err) == 0);
    const char *gen = text ? strstr(text, "<think>") : NULL;
    CHECK(gen != NULL);
    if (!gen) { cJSON_Delete(m); free(text); return; }
    gen += strlen("<think>");
    dsv4_parsed p;
    CHECK(parse(gen, 1, &p, &err) == 0);
    CHECK(strcmp(p.reasoning, "think") == 0 && strcmp(p.content, "c") == 0 && p.n_calls == 2 && p.ended);
    const char *args = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(
        cJSON_GetObjectItem(cJSON_GetArrayItem(m, 1), "tool_calls"), 0), "function"), "arguments")->valuestring;
    CHECK(p.n_calls == 2 && strcmp(p.calls[0].arguments, args) == 0);  /* byte-identical */

    /* parsed -> message JSON -> encode again = the same prompt. */
    cJSON *again = cJSON_CreateArray();
    cJSON_AddItemToArray(again, cJSON_Duplicate(cJSON_GetArrayItem(m, 0), 1));
    cJSON_AddItemToArray(again, dsv4_parsed_to_json(&p));
    char *text2 = NULL;
    CHECK(dsv4_chat_encode(again, NULL, &o, &text2, NULL, &err) == 0);
    CHECK(text2 && strcmp(text, text2) == 0);
    free(text2);
    cJSON_Delete(again);
    dsv4_parsed_free(&p);
    free(text);
    cJSON_Delete(m);
}

/* The official fixture 1 checks: parse both answers out of the expected prompt. */
static void test_fixture_answers(void) {
    char path[512];
    test_shared("tokenizer/encoding_tests/test_output_1.txt", path, sizeof path);
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "cannot read %s", path);
    if (!f) return;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *marker = DSV4_CHAT_ASSISTANT "<think>";
    char *first = strstr(buf, marker), *last = NULL;
    for (char *q = first; q; q = strstr(q + 1, marker)) last = q;
    CHECK(first && last && first != last);
    if (!first || !last) return;
    first += strlen(marker);
    char *first_end = strstr(first, DSV4_CHAT_USER);
    dsv4_parsed p;
    dsv4_err err = {0};
    CHECK(dsv4_dsml_parse(first, (size_t)(first_end - first), 1, &p, &err) == 0);
    CHECK(strcmp(p.reasoning, "The user wants to know the weather in Beijing. I should use the get_weather tool.") == 0);
    CHECK(strcmp(p.content, "") == 0 && p.n_calls == 1);
    CHECK(p.n_calls == 1 && strcmp(p.calls[0].name, "get_weather") == 0 &&
          json_eq(p.calls[0].arguments, "{\"location\": \"Beijing\", \"unit\": \"celsius\"}"));
    dsv4_parsed_free(&p);
    last += strlen(marker);
    CHECK(parse(last, 1, &p, &err) == 0);
    CHECK(strcmp(p.reasoning, "Got the weather data. Let me format a nice response.") == 0);
    CHECK(strstr(p.content, "22°C") != NULL && p.n_calls == 0 && p.ended);
    dsv4_parsed_free(&p);
}

/* DSV4_DSML_TEXT_ONLY (a request without tools): DSML is not read, the text after the
 * reasoning is the content byte for byte, no tool calls; the EOS and reasoning rules stay. */
static void test_text_only(void) {
    dsv4_parsed p;
    dsv4_err err = {0};
    const char *after = strstr(WELL, "</think>") + strlen("</think>");
    const size_t body = strlen(after) - strlen(EOS); /* up to EOS */
    CHECK(dsv4_dsml_parse_opts(WELL, strlen(WELL), 1, DSV4_DSML_TEXT_ONLY, &p, &err) == 0);
    CHECK(p.n_calls == 0 && p.calls == NULL && p.ended && !p.truncated);
    CHECK(p.reasoning && strcmp(p.reasoning, "Need weather and a sum.") == 0);
    CHECK(p.content && strlen(p.content) == body && memcmp(p.content, after, body) == 0);
    dsv4_parsed_free(&p);
    /* stray or half-written markup is text too */
    static const char stray[] = "a <" DSML "invoke b <" DSML "tool_ca";
    CHECK(dsv4_dsml_parse_opts(stray, strlen(stray), 0, DSV4_DSML_TEXT_ONLY, &p, &err) == 0);
    CHECK(strcmp(p.content, stray) == 0 && !p.truncated && !p.ended);
    dsv4_parsed_free(&p);
    CHECK(parse(stray, 0, &p, &err) == DSV4_ERR_FORMAT); /* the default reads it */
    dsv4_parsed_free(&p);
    /* unclosed reasoning before EOS is still an error */
    static const char open_think[] = "thinking" EOS;
    CHECK(dsv4_dsml_parse_opts(open_think, strlen(open_think), 1, DSV4_DSML_TEXT_ONLY, &p, &err) == DSV4_ERR_FORMAT);
    dsv4_parsed_free(&p);
}

int main(void) {
    test_well_formed();
    test_text_only();
    test_truncation();
    test_malformed();
    test_corruption();
    test_round_trip();
    test_fixture_answers();
    return test_report();
}
