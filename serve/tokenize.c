/* tokenize.c — POST /tokenize and /detokenize in vLLM's shapes: a client that builds
 * prompts of an exact length, or counts a conversation's tokens before sending it, asks the
 * server's own tokenizer and template rather than guessing. No engine work: these answer
 * on the spot (the tokenizer is rank 0's under --parallel ep, as the HTTP side is).
 *
 *   /tokenize   {"prompt": S, "add_special_tokens": true}             (a raw prompt, as
 *               /v1/completions reads it: BOS, then S with its control-token strings live)
 *               {"messages": [...], "tools": [...], "tool_choice", "response_format",
 *                "add_generation_prompt": true,
 *                "thinking" / "reasoning_effort" / "chat_template_kwargs"}  (a chat, as
 *               /v1/chat/completions renders it: the count is its usage.prompt_tokens)
 *               + "return_token_strs": false
 *            -> {"count": N, "max_model_len": M, "tokens": [...], "token_strs": null | [...]}
 *   /detokenize {"tokens": [...]} -> {"prompt": S}
 * Errors are OpenAI's shape, 400 for bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/srv.h"

#define MSG 1200

/* A chat's ids. add_generation_prompt false leaves out the assistant turn's opening
 * ("<｜Assistant｜>" and the think tag) the template puts after a final user turn. */
static int chat_ids(srv *s, const cJSON *j, dsv4_tok_ids *ids, char *msg) {
    int gen = 1, cont = 0;
    if (srv_opt_bool(j, "add_generation_prompt", &gen, msg, MSG) < 0) return 400;
    if (srv_opt_bool(j, "continue_final_message", &cont, msg, MSG) < 0) return 400;
    if (cont) {
        snprintf(msg, MSG, "'continue_final_message' is not supported");
        return 400;
    }
    srv_chat c = {0};
    const int rc = srv_openai_chat_prompt(s, j, &c, msg);
    const dsv4_chat_opts co = c.co;
    *ids = c.ids;   /* taken */
    c.ids = (dsv4_tok_ids){0};
    srv_chat_free(&c);
    if (rc) return rc;
    dsv4_err err = {0};
    if (gen) return 0;
    dsv4_tok_ids open = {0};
    const char *t = co.thinking ? DSV4_CHAT_ASSISTANT DSV4_CHAT_THINK_OPEN
                                : DSV4_CHAT_ASSISTANT DSV4_CHAT_THINK_CLOSE;
    if (dsv4_tokenize(s->tok, t, strlen(t), &open, &err)) {
        snprintf(msg, MSG, "%s", err.msg);
        return 500;
    }
    if (open.n <= ids->n &&
        !memcmp(ids->ids + ids->n - open.n, open.ids, open.n * sizeof *open.ids))
        ids->n -= open.n;
    dsv4_tok_ids_free(&open);
    return 0;
}

/* A raw prompt's ids: BOS (add_special_tokens, default on), then the text as
 * /v1/completions tokenizes it. */
static int prompt_ids(srv *s, const cJSON *j, const cJSON *p, dsv4_tok_ids *ids, char *msg) {
    int special = 1;
    if (srv_opt_bool(j, "add_special_tokens", &special, msg, MSG) < 0) return 400;
    if (!cJSON_IsString(p)) {
        snprintf(msg, MSG, "'prompt' must be a string");
        return 400;
    }
    dsv4_err err = {0};
    if (special) {  /* BOS, as /v1/completions puts it in front of a text prompt */
        int32_t *t = realloc(ids->ids, (ids->n + 1) * sizeof *t);
        if (!t) { snprintf(msg, MSG, "out of memory"); return 500; }
        ids->ids = t;
        ids->cap = ids->n + 1;
        ids->ids[ids->n++] = s->bos;
    }
    if (dsv4_tokenize(s->tok, p->valuestring, strlen(p->valuestring), ids, &err)) {
        snprintf(msg, MSG, "prompt: %s", err.msg);
        return err.code == DSV4_ERR_NOMEM ? 500 : 400;
    }
    return 0;
}

void srv_tokenize(srv *s, const char *body, size_t len, srv_reply *out) {
    char msg[MSG];
    dsv4_tok_ids ids = {0};
    int rc = 400, strs = 0;
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(j)) {
        snprintf(msg, MSG, "the request body is not a JSON object");
        goto out;
    }
    if (srv_opt_bool(j, "return_token_strs", &strs, msg, MSG) < 0) goto out;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "messages");
    if (p && m) {
        snprintf(msg, MSG, "give either 'prompt' or 'messages', not both");
        goto out;
    }
    if (!p && !m) {
        snprintf(msg, MSG, "'prompt' (a string) or 'messages' (a chat) is required");
        goto out;
    }
    if ((rc = m ? chat_ids(s, j, &ids, msg) : prompt_ids(s, j, p, &ids, msg))) goto out;
    /* written straight out, not through a cJSON tree: an 8 MB prompt's ~1.2M ids and their
     * strings took ~26 MB of text and a tree of ~2.4M items (571 MB RSS) that way */
    srv_buf *b = &out->body;
    srv_buf_printf(b, "{\"count\":%zu,\"max_model_len\":%lld,\"tokens\":[", ids.n, (long long)s->o.max_context);
    for (size_t i = 0; i < ids.n; i++) {
        char num[16];
        const int k = snprintf(num, sizeof num, i ? ",%d" : "%d", (int)ids.ids[i]);
        srv_buf_put(b, num, (size_t)k);
    }
    srv_buf_puts(b, "],\"token_strs\":");
    if (strs) {
        for (size_t i = 0; i < ids.n; i++) {
            const char *t = dsv4_tok_id_to_token(s->tok, ids.ids[i]);
            srv_buf_put(b, i ? "," : "[", 1);
            srv_buf_json_str(b, t ? t : "", t ? strlen(t) : 0);
        }
        srv_buf_puts(b, ids.n ? "]}" : "[]}");
    } else {
        srv_buf_puts(b, "null}");
    }
    out->status = 200;
out:
    if (rc) srv_reply_error(out, SRV_API_CHAT, rc, msg);
    dsv4_tok_ids_free(&ids);
    cJSON_Delete(j);
}

void srv_detokenize(srv *s, const char *body, size_t len, srv_reply *out) {
    char msg[MSG];
    int32_t *ids = NULL;
    char *text = NULL;
    size_t n = 0, tn = 0;
    cJSON *j = cJSON_ParseWithLength(body, len);
    const cJSON *t = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "tokens") : NULL;
    if (!cJSON_IsArray(t)) {
        snprintf(msg, MSG, cJSON_IsObject(j) ? "'tokens' must be an array of token ids"
                                             : "the request body is not a JSON object");
        goto bad;
    }
    const int cnt = cJSON_GetArraySize(t);
    if (cnt && !(ids = malloc((size_t)cnt * sizeof *ids))) {
        srv_reply_error(out, SRV_API_CHAT, 500, "out of memory");
        goto done;
    }
    for (const cJSON *x = t->child; x; x = x->next, n++)
        if (srv_token_id(s, x, &ids[n])) {
            snprintf(msg, MSG, "tokens[%zu] is not a token id in [0, %d)", n, s->V);
            goto bad;
        }
    dsv4_err err = {0};
    if (dsv4_detokenize(s->tok, ids, n, 0, &text, &tn, &err)) {
        snprintf(msg, MSG, "%s", err.msg);
        goto bad;
    }
    /* ids may end inside a character: its bytes come back repaired (U+FFFD) */
    srv_buf b = {0};
    srv_buf_put_utf8(&b, text, tn);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "prompt", srv_json_str_n(b.s ? b.s : "", b.n));
    srv_buf_free(&b);
    out->status = 200;
    srv_put_json(&out->body, o);
    goto done;
bad:
    srv_reply_error(out, SRV_API_CHAT, 400, msg);
done:
    free(ids);
    free(text);
    cJSON_Delete(j);
}
