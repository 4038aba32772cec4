/* test_chat.c — DeepSeek-V4 chat encoding: DeepSeek's four fixtures byte for byte, then each
 * rule of the format on small hand-written conversations (expected text written from the
 * format description, not from the encoder), Python-compatible JSON, and errors. */
#include <cjson/cJSON.h>

#include "test.h"
#include "tok/chat.h"
#include "tok/pyjson.h"
#include "util/file.h"

#define BOS DSV4_CHAT_BOS
#define EOS DSV4_CHAT_EOS
#define USER DSV4_CHAT_USER
#define ASST DSV4_CHAT_ASSISTANT
#define DSML DSV4_DSML

/* Compares and, on a mismatch, shows where the texts part. */
static void check_text(const char *what, const char *got, const char *want) {
    if (!got) { CHECK_MSG(0, "%s: no output", what); return; }
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    CHECK_MSG(got[i] == 0 && want[i] == 0, "%s: differs at byte %zu:\n  got  '%.60s'\n  want '%.60s'",
              what, i, got + i, want + i);
}

/* Encodes a JSON text with the given options; returns the prompt or NULL (error printed). */
static char *enc(const char *json, dsv4_chat_opts o) {
    char *out = NULL;
    size_t len;
    dsv4_err err = {0};
    int rc = dsv4_chat_encode_json(json, strlen(json), &o, &out, &len, &err);
    if (rc) fprintf(stderr, "encode error: %s\n", err.msg);
    else CHECK(strlen(out) == len);
    return out;
}

static void expect(const char *what, const char *json, dsv4_chat_opts o, const char *want) {
    char *got = enc(json, o);
    check_text(what, got, want);
    free(got);
}

static void expect_err(const char *json, dsv4_chat_opts o, int code, const char *substr) {
    char *out = (char *)1;
    dsv4_err err = {0};
    int rc = dsv4_chat_encode_json(json, strlen(json), &o, &out, NULL, &err);
    CHECK(rc == code);
    CHECK(out == NULL);
    CHECK_ERR(err, code, substr);
}

static const dsv4_chat_opts CHAT = {0}, THINK = {.thinking = 1};

static void test_fixtures(void) {
    /* DeepSeek encodes fixtures 1-3 in thinking mode, 4 in chat mode. */
    const int thinking[5] = {0, 1, 1, 1, 0};
    for (int i = 1; i <= 4; i++) {
        char p_in[512], p_out[512], rel[64];
        snprintf(rel, sizeof rel, "tokenizer/encoding_tests/test_input_%d.json", i);
        test_shared(rel, p_in, sizeof p_in);
        snprintf(rel, sizeof rel, "tokenizer/encoding_tests/test_output_%d.txt", i);
        test_shared(rel, p_out, sizeof p_out);
        size_t in_len, want_len;
        char *in = dsv4_read_file(p_in, 0, &in_len, NULL), *want = dsv4_read_file(p_out, 0, &want_len, NULL);
        CHECK_MSG(in && want, "fixture %d unreadable (%s)", i, p_in);
        if (!in || !want) { free(in); free(want); continue; }
        dsv4_chat_opts o = {.thinking = thinking[i]};
        char *got = NULL;
        size_t got_len = 0;
        dsv4_err err = {0};
        int rc = dsv4_chat_encode_json(in, in_len, &o, &got, &got_len, &err);
        CHECK_MSG(rc == 0, "fixture %d: %s", i, err.msg);
        char what[64]; /* "fixture %d (mode in JSON)" with any int: -Wformat-truncation at -O0 */
        snprintf(what, sizeof what, "fixture %d", i);
        check_text(what, got, want);
        CHECK(got_len == want_len);

        /* The same request with the mode given inside the JSON object. */
        cJSON *root = cJSON_Parse(in);
        cJSON *obj = cJSON_IsArray(root) ? cJSON_CreateObject() : root;
        if (obj != root) cJSON_AddItemToObject(obj, "messages", root);
        cJSON_AddStringToObject(obj, "thinking_mode", thinking[i] ? "thinking" : "chat");
        char *req = cJSON_PrintUnformatted(obj);
        char *got2 = enc(req, thinking[i] ? CHAT : THINK);  /* the JSON overrides */
        snprintf(what, sizeof what, "fixture %d (mode in JSON)", i);
        check_text(what, got2, want);
        free(got2);
        free(req);
        cJSON_Delete(obj);

        /* The other mode must give a different text (the fixtures are mode-sensitive). */
        char *other = enc(in, thinking[i] ? CHAT : THINK);
        CHECK_MSG(other && strcmp(other, want) != 0, "fixture %d: mode has no effect", i);
        free(other);
        free(got);
        free(in);
        free(want);
    }
}

static void test_basic_rules(void) {
    const char *one = "[{\"role\":\"user\",\"content\":\"hi\"}]";
    expect("chat, one user turn", one, CHAT, BOS USER "hi" ASST "</think>");
    expect("thinking, one user turn", one, THINK, BOS USER "hi" ASST "<think>");
    dsv4_chat_opts nobos = {.no_bos = 1};
    expect("no BOS", one, nobos, USER "hi" ASST "</think>");

    const char *sys = "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"q\"},"
                      "{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":\"r\"}]";
    expect("chat mode never shows reasoning", sys, CHAT, BOS "S" USER "q" ASST "</think>a" EOS);
    expect("thinking, last turn keeps reasoning", sys, THINK, BOS "S" USER "q" ASST "<think>r</think>a" EOS);

    const char *two = "[{\"role\":\"user\",\"content\":\"q1\"},"
                      "{\"role\":\"assistant\",\"content\":\"a1\",\"reasoning_content\":\"r1\"},"
                      "{\"role\":\"user\",\"content\":\"q2\"}]";
    expect("thinking drops earlier reasoning", two, THINK,
           BOS USER "q1" ASST "</think>a1" EOS USER "q2" ASST "<think>");
    dsv4_chat_opts keep = {.thinking = 1, .keep_reasoning = 1};
    expect("thinking keeps reasoning on request", two, keep,
           BOS USER "q1" ASST "<think>r1</think>a1" EOS USER "q2" ASST "<think>");
    expect("drop_thinking=false in JSON",
           "{\"drop_thinking\":false,\"thinking\":true,\"messages\":"
           "[{\"role\":\"user\",\"content\":\"q1\"},"
           "{\"role\":\"assistant\",\"content\":\"a1\",\"reasoning_content\":\"r1\"},"
           "{\"role\":\"user\",\"content\":\"q2\"}]}",
           CHAT, BOS USER "q1" ASST "<think>r1</think>a1" EOS USER "q2" ASST "<think>");

    /* Consecutive user messages form one turn. */
    expect("user messages merge",
           "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]", CHAT,
           BOS USER "a\n\nb" ASST "</think>");
    /* Content given as parts. */
    expect("content parts",
           "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"},"
           "{\"type\":\"image_url\",\"image_url\":{}},{\"type\":\"text\",\"text\":\"y\"}]}]", CHAT,
           BOS USER "x\n\n[Unsupported image_url]\n\ny" ASST "</think>");
    /* latest_reminder between system and user; after a user turn the suffix still opens. */
    expect("latest_reminder",
           "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"latest_reminder\",\"content\":\"R\"},"
           "{\"role\":\"user\",\"content\":\"q\"}]", CHAT,
           BOS "S" DSV4_CHAT_REMINDER "R" USER "q" ASST "</think>");
    /* wo_eos leaves the last answer open (prefix continuation). */
    expect("wo_eos",
           "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"par\",\"wo_eos\":true}]",
           CHAT, BOS USER "q" ASST "</think>par");
    /* Developer messages are user-side turns; before the last user turn they are removed
     * in thinking mode (without tools), kept in chat mode. */
    const char *dev = "[{\"role\":\"developer\",\"content\":\"D\"},{\"role\":\"assistant\",\"content\":\"a\"},"
                      "{\"role\":\"user\",\"content\":\"q\"}]";
    expect("developer kept in chat mode", dev, CHAT,
           BOS USER "D" ASST "</think>a" EOS USER "q" ASST "</think>");
    expect("developer dropped in thinking mode", dev, THINK, BOS "a" EOS USER "q" ASST "<think>");
    /* Reasoning effort "max": an instruction before message 0, thinking mode only. */
    char *maxp = enc("{\"reasoning_effort\":\"max\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", THINK);
    CHECK(maxp && strncmp(maxp, BOS "Reasoning Effort: Absolute maximum", strlen(BOS) + 34) == 0);
    CHECK(maxp && strstr(maxp, "unchecked.\n\n" USER "q" ASST "<think>") != NULL);
    free(maxp);
    expect("effort max ignored in chat mode",
           "{\"reasoning_effort\":\"max\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", CHAT,
           BOS USER "q" ASST "</think>");
    expect("response_format",
           "[{\"role\":\"system\",\"content\":\"S\",\"response_format\":{\"type\":\"json_object\"}},"
           "{\"role\":\"user\",\"content\":\"q\"}]", CHAT,
           BOS "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
           "{\"type\": \"json_object\"}" USER "q" ASST "</think>");
}

static void test_tasks(void) {
    expect("query task", "[{\"role\":\"user\",\"content\":\"q\",\"task\":\"query\"}]", THINK,
           BOS USER "q<｜query｜>");
    expect("action task, chat", "[{\"role\":\"user\",\"content\":\"q\",\"task\":\"action\"}]", CHAT,
           BOS USER "q" ASST "</think><｜action｜>");
    expect("action task, thinking", "[{\"role\":\"user\",\"content\":\"q\",\"task\":\"action\"}]", THINK,
           BOS USER "q" ASST "<think><｜action｜>");
    /* The answer to a task has no reasoning part even in thinking mode. */
    expect("answer after a task",
           "[{\"role\":\"user\",\"content\":\"q\",\"task\":\"action\"},"
           "{\"role\":\"assistant\",\"content\":\"Search\",\"reasoning_content\":\"x\"}]", THINK,
           BOS USER "q" ASST "<think><｜action｜>Search" EOS);
    expect("title task on an answer",
           "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\",\"task\":\"title\"}]",
           CHAT, BOS USER "q" ASST "</think>a" EOS "<｜title｜>");
}

static const char TOOL_HEAD[] =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
    "invoke tools by writing a \"<" DSML "tool_calls>\" block like the following:\n\n";

static void test_tools(void) {
    /* Tools beside the messages with no system message: a new empty system message. */
    char *p = enc("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}],"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", THINK);
    CHECK(p && strncmp(p, BOS "\n\n", strlen(BOS) + 2) == 0);
    CHECK(p && strstr(p, TOOL_HEAD) == p + strlen(BOS) + 2);
    CHECK(p && strstr(p, "### Available Tool Schemas\n\n{\"name\": \"f\", \"parameters\": {}}\n\n"
                         "You MUST strictly follow the above defined tool name and parameter "
                         "schemas to invoke tool calls.\n" USER "q" ASST "<think>") != NULL);
    free(p);

    /* Tool calls: string values raw, other values as Python JSON; several calls; results
     * ordered by call id whatever order they arrive in, then a user text in the same turn. */
    const char *calls =
        "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"messages\":["
        "{\"role\":\"system\",\"content\":\"S\"},"
        "{\"role\":\"user\",\"content\":\"q\"},"
        "{\"role\":\"assistant\",\"content\":\"c\",\"reasoning_content\":\"r\",\"tool_calls\":["
        "{\"id\":\"A\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
        "\"{\\\"s\\\":\\\"x y\\\",\\\"n\\\":5,\\\"l\\\":[1,2.5],\\\"o\\\":{\\\"b\\\":true,\\\"z\\\":null}}\"}},"
        "{\"id\":\"B\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}},"
        "{\"id\":\"C\",\"type\":\"function\",\"function\":{\"name\":\"h\",\"arguments\":\"not json\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"C\",\"content\":\"rc\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"A\",\"content\":\"ra\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"B\",\"content\":\"rb\"},"
        "{\"role\":\"user\",\"content\":\"more\"}]}";
    char *t = enc(calls, THINK);
    const char *want_tail =
        USER "q" ASST "<think>r</think>c\n\n"
        "<" DSML "tool_calls>\n"
        "<" DSML "invoke name=\"f\">\n"
        "<" DSML "parameter name=\"s\" string=\"true\">x y</" DSML "parameter>\n"
        "<" DSML "parameter name=\"n\" string=\"false\">5</" DSML "parameter>\n"
        "<" DSML "parameter name=\"l\" string=\"false\">[1, 2.5]</" DSML "parameter>\n"
        "<" DSML "parameter name=\"o\" string=\"false\">{\"b\": true, \"z\": null}</" DSML "parameter>\n"
        "</" DSML "invoke>\n"
        "<" DSML "invoke name=\"g\">\n\n</" DSML "invoke>\n"
        "<" DSML "invoke name=\"h\">\n"
        "<" DSML "parameter name=\"arguments\" string=\"true\">not json</" DSML "parameter>\n"
        "</" DSML "invoke>\n"
        "</" DSML "tool_calls>" EOS
        USER "<tool_result>ra</tool_result>\n\n<tool_result>rb</tool_result>\n\n"
        "<tool_result>rc</tool_result>\n\nmore" ASST "<think>";
    const char *at = t ? strstr(t, USER "q") : NULL;
    check_text("tool calls and ordered results", at, want_tail);
    free(t);

    /* Arguments given as an object instead of JSON text encode the same way. */
    char *a = enc("[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"tool_calls\":["
                  "{\"function\":{\"name\":\"f\",\"arguments\":{\"k\":\"v\",\"n\":[]}}}]}]", CHAT);
    check_text("object arguments", a,
               BOS USER "q" ASST "</think>\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\"f\">\n"
               "<" DSML "parameter name=\"k\" string=\"true\">v</" DSML "parameter>\n"
               "<" DSML "parameter name=\"n\" string=\"false\">[]</" DSML "parameter>\n"
               "</" DSML "invoke>\n</" DSML "tool_calls>" EOS);
    free(a);

    /* With tools present nothing is dropped, even in thinking mode. */
    char *k = enc("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"messages\":["
                  "{\"role\":\"user\",\"content\":\"q1\"},"
                  "{\"role\":\"assistant\",\"content\":\"a1\",\"reasoning_content\":\"r1\"},"
                  "{\"role\":\"user\",\"content\":\"q2\"}]}", THINK);
    CHECK(k && strstr(k, USER "q1" ASST "<think>r1</think>a1" EOS USER "q2" ASST "<think>"));
    free(k);

    /* A tool result given as JSON (not text) is written as JSON. */
    expect("tool result object",
           "[{\"role\":\"tool\",\"content\":{\"t\":22}}]", CHAT,
           BOS USER "<tool_result>{\"t\": 22}</tool_result>" ASST "</think>");
}

static void test_pyjson(void) {
    struct { const char *in, *out; } cases[] = {
        {"{\"a\":1,\"b\":[true,false,null],\"c\":{}}", "{\"a\": 1, \"b\": [true, false, null], \"c\": {}}"},
        {"[0.5,-3,1e-05,0.0001,123456789012,1.5e300,-2.25e-7,1e16,0.1,100.5]",
         "[0.5, -3, 1e-05, 0.0001, 123456789012, 1.5e+300, -2.25e-07, 10000000000000000, 0.1, 100.5]"},
        {"[1.7976931348623157e308,5e-324,0.30000000000000004,-0.0]",
         "[1.7976931348623157e+308, 5e-324, 0.30000000000000004, 0]"},
        {"\"q\\\"b\\\\s\\/t\\tn\\nr\\rf\\fb\\bc\\u0001\\u001fé中😀\"",
         "\"q\\\"b\\\\s/t\\tn\\nr\\rf\\fb\\bc\\u0001\\u001fé中😀\""},
        {"[[],[[]],{\"\":\"\"}]", "[[], [[]], {\"\": \"\"}]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *v = cJSON_Parse(cases[i].in);
        CHECK_MSG(v != NULL, "case %zu does not parse", i);
        dsv4_tbuf b = {0};
        dsv4_pyjson_value(&b, v);
        char *s = dsv4_tbuf_take(&b, NULL);
        check_text("pyjson", s, cases[i].out);
        free(s);
        cJSON_Delete(v);
    }
}

static void test_errors(void) {
    expect_err("not json", CHAT, DSV4_ERR_FORMAT, "not valid JSON");
    expect_err("{\"x\":1}", CHAT, DSV4_ERR_FORMAT, "missing \"messages\"");
    expect_err("{\"messages\":{}}", CHAT, DSV4_ERR_FORMAT, "messages: expected an array");
    expect_err("[{\"role\":\"robot\",\"content\":\"x\"}]", CHAT, DSV4_ERR_FORMAT, "messages[0].role: unknown role 'robot'");
    expect_err("[{\"content\":\"x\"}]", CHAT, DSV4_ERR_FORMAT, "messages[0]: missing \"role\"");
    expect_err("[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"user\",\"task\":\"fly\"}]", CHAT,
               DSV4_ERR_FORMAT, "messages[1].task: unknown task 'fly'");
    expect_err("[{\"role\":\"developer\",\"content\":\"\"}]", CHAT, DSV4_ERR_FORMAT,
               "messages[0]: a developer message needs content");
    expect_err("[{\"role\":\"user\",\"content\":5}]", CHAT, DSV4_ERR_FORMAT, "messages[0].content");
    expect_err("[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]", CHAT, DSV4_ERR_FORMAT,
               "messages[0]: tool_calls[0] has no function.name");
    expect_err("[{\"role\":\"assistant\",\"tool_calls\":{}}]", CHAT, DSV4_ERR_FORMAT,
               "messages[0].tool_calls: expected an array");
    expect_err("[{\"role\":\"assistant\",\"reasoning_content\":7}]", CHAT, DSV4_ERR_FORMAT,
               "messages[0].reasoning_content: expected a string");
    expect_err("{\"tools\":[{\"type\":\"function\"}],\"messages\":[]}", CHAT, DSV4_ERR_FORMAT,
               "request.tools[0]: missing \"function\" object");
    expect_err("{\"thinking_mode\":\"deep\",\"messages\":[]}", CHAT, DSV4_ERR_FORMAT, "thinking_mode");
    expect_err("{\"thinking\":\"yes\",\"messages\":[]}", CHAT, DSV4_ERR_FORMAT, "thinking must be");
    expect("thinking as an API object", "{\"thinking\":{\"type\":\"enabled\"},\"messages\":"
           "[{\"role\":\"user\",\"content\":\"hi\"}]}", CHAT, BOS USER "hi" ASST "<think>");
    /* An empty response_format adds nothing (Python truthiness). */
    expect("empty response_format", "[{\"role\":\"system\",\"content\":\"S\",\"response_format\":{}}]",
           CHAT, BOS "S");
    expect_err("{\"reasoning_effort\":\"low\",\"messages\":[]}", CHAT, DSV4_ERR_FORMAT, "reasoning_effort");
    expect_err("[5]", CHAT, DSV4_ERR_FORMAT, "messages[0]: expected an object");
    /* An empty conversation is just BOS. */
    expect("empty", "[]", THINK, BOS);
}

int main(void) {
    test_fixtures();
    test_basic_rules();
    test_tasks();
    test_tools();
    test_pyjson();
    test_errors();
    return test_report();
}
