/* test_chat_multiturn.c — the conversation object: each dsv4_chat_next hands out exactly
 * the text not yet fed, and what was fed always equals the stateless encoding of the same
 * messages (checked against dsv4_chat_encode), or a reset is reported where the format
 * rewrites history (thinking mode dropping earlier reasoning). */
#include <cjson/cJSON.h>

#include "test.h"
#include "tok/chat.h"

#define BOS DSV4_CHAT_BOS
#define EOS DSV4_CHAT_EOS
#define USER DSV4_CHAT_USER
#define ASST DSV4_CHAT_ASSISTANT
#define DSML DSV4_DSML

static dsv4_err err;

/* Runs dsv4_chat_next and compares the suffix; returns the reset flag. */
static int next_is(dsv4_chat *c, const char *want) {
    char *t = NULL;
    size_t n = 0;
    int reset = -1;
    int rc = dsv4_chat_next(c, &t, &n, &reset, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK_MSG(t && strcmp(t, want) == 0, "suffix\n  got  '%s'\n  want '%s'", t ? t : "(null)", want);
    CHECK(t && strlen(t) == n);
    free(t);
    return reset;
}

/* The whole conversation equals the stateless encoding of the given messages. */
static void same_as_stateless(dsv4_chat *c, const char *messages_json, const cJSON *tools,
                              dsv4_chat_opts o) {
    char *a = NULL, *b = NULL;
    CHECK(dsv4_chat_render(c, &a, NULL, &err) == 0);
    cJSON *m = cJSON_Parse(messages_json);
    CHECK(m != NULL);
    CHECK_MSG(dsv4_chat_encode(m, tools, &o, &b, NULL, &err) == 0, "%s", err.msg);
    CHECK_MSG(a && b && strcmp(a, b) == 0, "conversation differs from stateless encoding:\n  %s\n  %s",
              a ? a : "", b ? b : "");
    cJSON_Delete(m);
    free(a);
    free(b);
}

static void test_chat_mode(void) {
    dsv4_chat_opts o = {0};
    dsv4_chat *c;
    CHECK(dsv4_chat_create(&o, &c, &err) == 0);
    dsv4_chat_add(c, "system", "S", &err);
    dsv4_chat_add(c, "user", "q1", &err);
    CHECK(next_is(c, BOS "S" USER "q1" ASST "</think>") == 0);
    CHECK(dsv4_chat_gen_thinking(c) == 0);
    /* Generation stopped on EOS without feeding it: the next suffix starts with EOS. */
    dsv4_parsed p;
    CHECK(dsv4_chat_add_generated(c, "Hello", 5, &p, &err) == 0);
    CHECK(strcmp(p.content, "Hello") == 0 && p.reasoning == NULL);
    dsv4_parsed_free(&p);
    dsv4_chat_add(c, "user", "q2", &err);
    CHECK(next_is(c, EOS USER "q2" ASST "</think>") == 0);
    /* This time the EOS was fed as part of the answer. */
    CHECK(dsv4_chat_add_generated(c, "World" EOS, strlen("World" EOS), NULL, &err) == 0);
    dsv4_chat_add(c, "user", "q3", &err);
    CHECK(next_is(c, USER "q3" ASST "</think>") == 0);
    same_as_stateless(c,
        "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"q1\"},"
        "{\"role\":\"assistant\",\"content\":\"Hello\"},{\"role\":\"user\",\"content\":\"q2\"},"
        "{\"role\":\"assistant\",\"content\":\"World\"},{\"role\":\"user\",\"content\":\"q3\"}]", NULL, o);
    CHECK(dsv4_chat_n_messages(c) == 6);
    /* Nothing new: an empty suffix. */
    CHECK(next_is(c, "") == 0);
    dsv4_chat_free(c);
}

static void test_thinking_drop(void) {
    dsv4_chat_opts o = {.thinking = 1};
    dsv4_chat *c;
    dsv4_chat_create(&o, &c, &err);
    dsv4_chat_add(c, "user", "q1", &err);
    CHECK(next_is(c, BOS USER "q1" ASST "<think>") == 0);
    CHECK(dsv4_chat_gen_thinking(c) == 1);
    dsv4_parsed p;
    CHECK(dsv4_chat_add_generated(c, "r1</think>a1", strlen("r1</think>a1"), &p, &err) == 0);
    CHECK(strcmp(p.reasoning, "r1") == 0 && strcmp(p.content, "a1") == 0);
    dsv4_parsed_free(&p);
    dsv4_chat_add(c, "user", "q2", &err);
    /* The new turn drops r1 from history: the text is no longer an extension. */
    CHECK(next_is(c, BOS USER "q1" ASST "</think>a1" EOS USER "q2" ASST "<think>") == 1);
    same_as_stateless(c, "[{\"role\":\"user\",\"content\":\"q1\"},"
                         "{\"role\":\"assistant\",\"content\":\"a1\",\"reasoning_content\":\"r1\"},"
                         "{\"role\":\"user\",\"content\":\"q2\"}]", NULL, o);
    /* From the reset on, increments work again. */
    CHECK(dsv4_chat_add_generated(c, "r2</think>a2", strlen("r2</think>a2"), NULL, &err) == 0);
    CHECK(next_is(c, EOS) == 0);  /* the answer is complete: only its EOS is missing */
    dsv4_chat_free(c);
}

static void test_thinking_keep(void) {
    dsv4_chat_opts o = {.thinking = 1, .keep_reasoning = 1};
    dsv4_chat *c;
    dsv4_chat_create(&o, &c, &err);
    dsv4_chat_add(c, "user", "q1", &err);
    CHECK(next_is(c, BOS USER "q1" ASST "<think>") == 0);
    dsv4_chat_add_generated(c, "r1</think>a1", strlen("r1</think>a1"), NULL, &err);
    dsv4_chat_add(c, "user", "q2", &err);
    CHECK(next_is(c, EOS USER "q2" ASST "<think>") == 0);
    same_as_stateless(c, "[{\"role\":\"user\",\"content\":\"q1\"},"
                         "{\"role\":\"assistant\",\"content\":\"a1\",\"reasoning_content\":\"r1\"},"
                         "{\"role\":\"user\",\"content\":\"q2\"}]", NULL, o);
    dsv4_chat_free(c);
}

static void test_tools_loop(void) {
    dsv4_chat_opts o = {.thinking = 1};
    dsv4_chat *c;
    dsv4_chat_create(&o, &c, &err);
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                               "\"parameters\":{\"type\":\"object\"}}}]");
    CHECK(dsv4_chat_set_tools(c, tools, &err) == 0);
    dsv4_chat_add(c, "system", "S", &err);
    dsv4_chat_add(c, "user", "weather?", &err);
    char *t;
    int reset;
    CHECK(dsv4_chat_next(c, &t, NULL, &reset, &err) == 0 && reset == 0);
    CHECK(strstr(t, "S\n\n## Tools\n\n") != NULL);
    CHECK(strstr(t, USER "weather?" ASST "<think>") != NULL);
    free(t);
    /* The model calls a tool; its array value is written without spaces, which a fresh
     * encoding would print as "[1, 2]": the conversation keeps the generated bytes. */
    const char *gen = "need data</think>\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\"get_weather\">\n"
                      "<" DSML "parameter name=\"city\" string=\"true\">Paris</" DSML "parameter>\n"
                      "<" DSML "parameter name=\"days\" string=\"false\">[1,2]</" DSML "parameter>\n"
                      "</" DSML "invoke>\n</" DSML "tool_calls>";
    dsv4_parsed p;
    CHECK(dsv4_chat_add_generated(c, gen, strlen(gen), &p, &err) == 0);
    CHECK(p.n_calls == 1 && strcmp(p.calls[0].arguments, "{\"city\": \"Paris\", \"days\": [1,2]}") == 0);
    dsv4_parsed_free(&p);
    cJSON *res = cJSON_Parse("{\"role\":\"tool\",\"tool_call_id\":\"x\",\"content\":\"sunny\"}");
    CHECK(dsv4_chat_add_json(c, res, &err) == 0);
    cJSON_Delete(res);
    CHECK(next_is(c, EOS USER "<tool_result>sunny</tool_result>" ASST "<think>") == 0);
    CHECK(dsv4_chat_add_generated(c, "ok</think>Sunny." EOS, strlen("ok</think>Sunny." EOS), NULL, &err) == 0);
    dsv4_chat_add(c, "user", "thanks", &err);
    /* Tools present: reasoning is kept, so the next turn is still an extension. */
    CHECK(next_is(c, USER "thanks" ASST "<think>") == 0);
    char *all;
    CHECK(dsv4_chat_render(c, &all, NULL, &err) == 0);
    CHECK(strstr(all, "string=\"false\">[1,2]<") != NULL);
    free(all);
    /* With canonical spacing the conversation equals the stateless encoding. */
    dsv4_chat *d;
    dsv4_chat_create(&o, &d, &err);
    dsv4_chat_set_tools(d, tools, &err);
    dsv4_chat_add(d, "system", "S", &err);
    dsv4_chat_add(d, "user", "weather?", &err);
    free((dsv4_chat_next(d, &t, NULL, NULL, &err), t));
    const char *gen2 = "need data</think>\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\"get_weather\">\n"
                       "<" DSML "parameter name=\"days\" string=\"false\">[1, 2]</" DSML "parameter>\n"
                       "</" DSML "invoke>\n</" DSML "tool_calls>";
    dsv4_chat_add_generated(d, gen2, strlen(gen2), NULL, &err);
    dsv4_chat_add(d, "tool", "sunny", &err);
    same_as_stateless(d,
        "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"need data\",\"tool_calls\":"
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"days\\\": [1, 2]}\"}}]},"
        "{\"role\":\"tool\",\"content\":\"sunny\"}]", tools, o);
    dsv4_chat_free(d);
    cJSON_Delete(tools);
    dsv4_chat_free(c);
}

static void test_odd_turns(void) {
    dsv4_chat_opts o = {.thinking = 1};
    dsv4_chat *c;
    dsv4_chat_create(&o, &c, &err);
    /* A task prompt does not open reasoning: the answer parses in chat mode. */
    cJSON *m = cJSON_Parse("{\"role\":\"user\",\"content\":\"q\",\"task\":\"action\"}");
    dsv4_chat_add_json(c, m, &err);
    cJSON_Delete(m);
    CHECK(next_is(c, BOS USER "q" ASST "<think><｜action｜>") == 0);
    CHECK(dsv4_chat_gen_thinking(c) == 0);
    dsv4_parsed p;
    CHECK(dsv4_chat_add_generated(c, "Search", 6, &p, &err) == 0);
    CHECK(p.reasoning == NULL && strcmp(p.content, "Search") == 0);
    dsv4_parsed_free(&p);
    /* A malformed answer is reported, recorded verbatim, and the conversation goes on. */
    dsv4_chat_add(c, "user", "q2", &err);
    char *t;
    free((dsv4_chat_next(c, &t, NULL, NULL, &err), t));
    const char *bad = "r</think>x <" DSML "invoke name=\"f\">";
    CHECK(dsv4_chat_add_generated(c, bad, strlen(bad), &p, &err) == DSV4_ERR_FORMAT);
    CHECK_ERR(err, DSV4_ERR_FORMAT, "stray DSML markup");
    CHECK(strcmp(p.content, "x <" DSML "invoke name=\"f\">") == 0);
    dsv4_parsed_free(&p);
    CHECK(next_is(c, EOS) == 0);
    /* Bad input: errors, no crash. */
    CHECK(dsv4_chat_add(c, NULL, "x", &err) == DSV4_ERR_ARG);
    CHECK(dsv4_chat_add(c, "wizard", "x", &err) == 0);  /* checked when encoded */
    int reset;
    CHECK(dsv4_chat_next(c, &t, NULL, &reset, &err) == DSV4_ERR_FORMAT && t == NULL);
    CHECK_ERR(err, DSV4_ERR_FORMAT, "unknown role 'wizard'");
    CHECK(dsv4_chat_set_tools(c, cJSON_GetObjectItem(NULL, "x"), &err) == 0);
    dsv4_chat_free(c);
}

/* Generated text may hold any byte: a NUL in an answer (the byte-level vocabulary has a
 * token for it) is kept, so the next turn still extends what the sequence holds (found by
 * fuzz_chat: the answer was cut at the NUL and every later turn reset the sequence). An
 * answer before any message is refused. */
static void test_answer_bytes(void) {
    dsv4_chat_opts o = {0};
    dsv4_chat *c;
    CHECK(dsv4_chat_create(&o, &c, &err) == 0);
    CHECK(dsv4_chat_add_generated(c, "x", 1, NULL, &err) == DSV4_ERR_STATE);
    CHECK_ERR(err, DSV4_ERR_STATE, "an answer needs a prompt");
    dsv4_chat_add(c, "user", "q1", &err);
    CHECK(next_is(c, BOS USER "q1" ASST "</think>") == 0);
    static const char answer[] = "a\0b";
    CHECK(dsv4_chat_add_generated(c, answer, 3, NULL, &err) == 0);
    dsv4_chat_add(c, "user", "q2", &err);
    CHECK(next_is(c, EOS USER "q2" ASST "</think>") == 0);
    char *all = NULL;
    size_t n = 0;
    static const char want[] = BOS USER "q1" ASST "</think>a\0b" EOS USER "q2" ASST "</think>";
    CHECK(dsv4_chat_render(c, &all, &n, &err) == 0);
    CHECK_MSG(all && n == sizeof want - 1 && memcmp(all, want, n) == 0, "render of %zu bytes", n);
    free(all);
    dsv4_chat_free(c);
}

int main(void) {
    test_chat_mode();
    test_answer_bytes();
    test_thinking_drop();
    test_thinking_keep();
    test_tools_loop();
    test_odd_turns();
    return test_report();
}
