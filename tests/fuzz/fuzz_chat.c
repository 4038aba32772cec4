/* fuzz_chat.c — libFuzzer target: the chat encoder and the DSML parser.
 *
 * Input: one flags byte (bit 0 thinking, 1 keep reasoning, 2 effort max, 3 no BOS), then a
 * chat request as JSON (an array of messages, or an object with "messages", "tools", ...),
 * optionally a NUL byte and a model answer; without the NUL the JSON text is also the answer.
 *
 * What must hold:
 *  - dsv4_chat_encode_json: an error has a message; a result is NUL-terminated at its length;
 *  - dsv4_dsml_parse (both modes): *out is always filled (content never NULL), every tool
 *    call has a name and arguments that are a JSON object, dsv4_parsed_to_json works;
 *  - the conversation object: the texts dsv4_chat_next hands out since the last reset,
 *    answers recorded with dsv4_chat_add_generated included, are exactly what
 *    dsv4_chat_render gives for the whole conversation, and there is no reset where
 *    dsv4_chat promises a suffix (chat mode, kept reasoning, or tools present). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dsv4_text.h"

/* Whether the encoder takes tools from message m: it reads "tools" only on system and
 * developer messages, and only a non-empty array counts (chat.c, opt_array). Tools on any
 * other message are ignored there, so a thinking conversation may then drop reasoning. */
static int message_tools(const cJSON *m) {
    const cJSON *role = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
    const cJSON *tools = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "tools") : NULL;
    return cJSON_IsString(role) &&
           (!strcmp(role->valuestring, "system") || !strcmp(role->valuestring, "developer")) &&
           cJSON_IsArray(tools) && tools->child;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_parse(const char *text, size_t n, int thinking) {
    dsv4_err err = {0};
    dsv4_parsed p;
    int rc = dsv4_dsml_parse(text, n, thinking, &p, &err);
    if (rc && (!err.msg[0] || rc != err.code)) __builtin_trap();
    if (rc == DSV4_ERR_NOMEM) return;
    if (!p.content || p.n_calls < 0 || (p.n_calls && !p.calls)) __builtin_trap();
    if (!thinking && p.reasoning) __builtin_trap();
    for (int i = 0; i < p.n_calls; i++) {
        if (!p.calls[i].name || !p.calls[i].arguments) __builtin_trap();
        cJSON *args = cJSON_Parse(p.calls[i].arguments);
        if (!cJSON_IsObject(args)) __builtin_trap();
        cJSON_Delete(args);
    }
    cJSON *msg = dsv4_parsed_to_json(&p);
    if (!msg) __builtin_trap();
    cJSON_Delete(msg);
    dsv4_parsed_free(&p);
}

/* acc (the text fed since the last reset) += the next part; it must equal the render. */
static int next_matches(dsv4_chat *c, int may_reset, char **acc, size_t *acc_n) {
    dsv4_err err = {0};
    char *part, *all;
    size_t n, all_n;
    int reset;
    if (dsv4_chat_next(c, &part, &n, &reset, &err)) {
        if (!err.msg[0]) __builtin_trap();
        return -1;
    }
    if (reset && !may_reset) __builtin_trap();
    if (reset) *acc_n = 0;
    char *grown = realloc(*acc, *acc_n + n + 1);
    if (!grown) __builtin_trap();
    memcpy(grown + *acc_n, part, n);
    *acc = grown;
    *acc_n += n;
    free(part);
    if (dsv4_chat_render(c, &all, &all_n, &err)) __builtin_trap(); /* next just encoded it */
    if (all_n != *acc_n || memcmp(all, *acc, all_n)) __builtin_trap();
    free(all);
    return 0;
}

static void check_conversation(const cJSON *messages, const cJSON *tools, const dsv4_chat_opts *o,
                               int has_tools, const char *answer, size_t answer_n) {
    const int may_reset = o->thinking && !o->keep_reasoning && !has_tools;
    dsv4_err err = {0};
    dsv4_chat *c;
    if (dsv4_chat_create(o, &c, &err)) __builtin_trap();
    char *acc = NULL;
    size_t acc_n = 0;
    const cJSON *m;
    if (tools && dsv4_chat_set_tools(c, tools, &err)) goto done;
    cJSON_ArrayForEach(m, messages)
        if (dsv4_chat_add_json(c, m, &err)) goto done;
    if (next_matches(c, 0, &acc, &acc_n)) goto done;
    /* the answer is recorded verbatim (parse errors included) and counts as fed */
    int rc = dsv4_chat_add_generated(c, answer, answer_n, NULL, &err);
    if (rc && rc != DSV4_ERR_FORMAT) goto done;
    char *grown = realloc(acc, acc_n + answer_n + 1);
    if (!grown) __builtin_trap();
    memcpy(grown + acc_n, answer, answer_n);
    acc = grown;
    acc_n += answer_n;
    if (dsv4_chat_add(c, "user", "and then?", &err)) __builtin_trap();
    next_matches(c, may_reset, &acc, &acc_n);
done:
    free(acc);
    dsv4_chat_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const unsigned flags = data[0];
    const char *json = (const char *)data + 1;
    const char *nul = memchr(json, 0, size - 1);
    const size_t json_n = nul ? (size_t)(nul - json) : size - 1;
    const char *answer = nul ? nul + 1 : json;
    const size_t answer_n = nul ? size - 1 - json_n - 1 : json_n;
    const dsv4_chat_opts o = {.thinking = flags & 1, .keep_reasoning = (flags >> 1) & 1,
                              .effort_max = (flags >> 2) & 1, .no_bos = (flags >> 3) & 1};

    dsv4_err err = {0};
    char *out = NULL;
    size_t n = 0;
    if (dsv4_chat_encode_json(json, json_n, &o, &out, &n, &err)) {
        if (out || !err.msg[0]) __builtin_trap();
    } else if (!out || strlen(out) != n) {
        __builtin_trap();
    }
    free(out);

    check_parse(answer, answer_n, 0);
    check_parse(answer, answer_n, 1);

    cJSON *root = cJSON_ParseWithLength(json, json_n);
    const cJSON *messages = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "messages") : root;
    const cJSON *tools = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "tools") : NULL;
    int has_tools = cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0;
    if (cJSON_IsArray(messages)) {
        const cJSON *m;
        cJSON_ArrayForEach(m, messages) has_tools |= message_tools(m);
        check_conversation(messages, tools, &o, has_tools, answer, answer_n);
    }
    cJSON_Delete(root);
    return 0;
}
