/* anthropic.c — POST /v1/messages, the Anthropic Messages API: its request turned into
 * OpenAI-style messages for the same chat encoding, its answer and stream events out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/srv.h"

#define MSG 1200

/* ---- request: Anthropic messages -> OpenAI-style messages ------------------------------- */

/* Text of a content field: a string, or the text blocks of a block list joined by "\n\n".
 * Returns NULL (message written) for other block types or wrong types. */
static char *block_text(const cJSON *c, const char *where, char *msg) {
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    if (!cJSON_IsArray(c)) { snprintf(msg, MSG, "%s must be a string or a list of blocks", where); return NULL; }
    srv_buf b = {0};
    srv_buf_puts(&b, "");
    for (const cJSON *x = c->child; x; x = x->next) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(x, "type");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "text");
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(t)) {
            snprintf(msg, MSG, "%s: only text blocks are supported here", where);
            srv_buf_free(&b);
            return NULL;
        }
        if (b.n) srv_buf_puts(&b, "\n\n");
        srv_buf_puts(&b, t->valuestring);
    }
    if (b.oom) { srv_buf_free(&b); snprintf(msg, MSG, "out of memory"); return NULL; }
    return b.s;
}

static int add_text_msg(cJSON *out, const char *role, const char *text) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", text);
    return cJSON_AddItemToArray(out, m) ? 0 : -1;
}

/* One Anthropic message appended to out as OpenAI-style messages. */
static int convert_message(const cJSON *m, int idx, cJSON *out, char *msg) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    char where[64];
    snprintf(where, sizeof where, "messages[%d].content", idx);
    if (!cJSON_IsObject(m) || !cJSON_IsString(role) ||
        (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant"))) {
        snprintf(msg, MSG, "messages[%d] needs role \"user\" or \"assistant\"", idx);
        return -1;
    }
    int user = !strcmp(role->valuestring, "user");
    if (cJSON_IsString(content)) return add_text_msg(out, role->valuestring, content->valuestring);
    if (!cJSON_IsArray(content)) { snprintf(msg, MSG, "%s must be a string or a list of blocks", where); return -1; }
    srv_buf text = {0}, reasoning = {0};
    cJSON *calls = cJSON_CreateArray();
    int rc = -1, k = 0;
    for (const cJSON *b = content->child; b; b = b->next, k++) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(b, "type");
        const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
        if (!strcmp(t, "text")) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, "text");
            if (!cJSON_IsString(x)) { snprintf(msg, MSG, "%s[%d].text must be a string", where, k); goto out; }
            if (text.n) srv_buf_puts(&text, "\n\n");
            srv_buf_puts(&text, x->valuestring);
        } else if (!strcmp(t, "thinking") && !user) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, "thinking");
            if (cJSON_IsString(x)) srv_buf_puts(&reasoning, x->valuestring);
        } else if (!strcmp(t, "redacted_thinking") && !user) {
            /* nothing to show the model */
        } else if (!strcmp(t, "tool_use") && !user) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
            const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
            if (!cJSON_IsString(name) || (input && !cJSON_IsObject(input))) {
                snprintf(msg, MSG, "%s[%d]: tool_use needs a string name and an object input", where, k);
                goto out;
            }
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "id", cJSON_IsString(id) ? id->valuestring : "");
            cJSON_AddStringToObject(c, "type", "function");
            cJSON *fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(fn, "name", name->valuestring);
            cJSON_AddItemToObject(fn, "arguments", input ? cJSON_Duplicate(input, 1) : cJSON_CreateObject());
            cJSON_AddItemToArray(calls, c);
        } else if (!strcmp(t, "tool_result") && user) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
            const cJSON *rc_ = cJSON_GetObjectItemCaseSensitive(b, "content");
            char *res = rc_ ? block_text(rc_, where, msg) : strdup("");
            if (!res) goto out;
            cJSON *tm = cJSON_CreateObject();
            cJSON_AddStringToObject(tm, "role", "tool");
            cJSON_AddStringToObject(tm, "tool_call_id", cJSON_IsString(id) ? id->valuestring : "");
            cJSON_AddStringToObject(tm, "content", res);
            free(res);
            cJSON_AddItemToArray(out, tm);
        } else {
            snprintf(msg, MSG, "%s[%d]: block type '%.40s' is not supported", where, k, t);
            goto out;
        }
    }
    if (user) {
        if (text.n) add_text_msg(out, "user", text.s);
    } else {
        cJSON *am = cJSON_CreateObject();
        cJSON_AddStringToObject(am, "role", "assistant");
        cJSON_AddStringToObject(am, "content", text.s ? text.s : "");
        if (reasoning.n) cJSON_AddStringToObject(am, "reasoning_content", reasoning.s);
        if (cJSON_GetArraySize(calls)) {
            cJSON_AddItemToObject(am, "tool_calls", calls);
            calls = NULL;
        }
        cJSON_AddItemToArray(out, am);
    }
    rc = text.oom || reasoning.oom ? -1 : 0;
    if (rc) snprintf(msg, MSG, "out of memory");
out:
    cJSON_Delete(calls);
    srv_buf_free(&text);
    srv_buf_free(&reasoning);
    return rc;
}

/* Anthropic tools [{name, description, input_schema}] as OpenAI tools. */
static cJSON *convert_tools(const cJSON *tools, char *msg) {
    cJSON *out = cJSON_CreateArray();
    int k = 0;
    for (const cJSON *t = tools->child; t; t = t->next, k++) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        if (!cJSON_IsString(name)) {
            snprintf(msg, MSG, "tools[%d] needs a string name", k);
            cJSON_Delete(out);
            return NULL;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "function");
        cJSON *fn = cJSON_AddObjectToObject(o, "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        if (cJSON_IsString(desc)) cJSON_AddStringToObject(fn, "description", desc->valuestring);
        cJSON_AddItemToObject(fn, "parameters", cJSON_IsObject(schema) ? cJSON_Duplicate(schema, 1)
                                                                       : cJSON_CreateObject());
        /* strict tool use: the input follows input_schema (srv_strict_tools) */
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "strict"))) cJSON_AddTrueToObject(fn, "strict");
        cJSON_AddItemToArray(out, o);
    }
    return out;
}

/* tool_choice: absent, or {"type": "auto" | "any" | "none"} or {"type": "tool", "name": N}.
 * Returns SRV_TC_* (*name set for "tool"), or -1 with a message. */
static int tool_choice(const cJSON *c, const char **name, char *msg) {
    if (!c || cJSON_IsNull(c)) return SRV_TC_AUTO;
    const cJSON *ty = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "type") : NULL;
    const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
    if (!strcmp(t, "auto")) return SRV_TC_AUTO;
    if (!strcmp(t, "none")) return SRV_TC_NONE;
    if (!strcmp(t, "any")) return SRV_TC_REQUIRED;
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(c, "name");
    if (!strcmp(t, "tool") && cJSON_IsString(nm)) {
        *name = nm->valuestring;
        return SRV_TC_NAMED;
    }
    snprintf(msg, MSG, "tool_choice: must be {\"type\": \"auto\" | \"any\" | \"none\"} or "
             "{\"type\": \"tool\", \"name\": ...}");
    return -1;
}

/* ---- answer ----------------------------------------------------------------------------- */

static const char *stop_reason(const srv_req *r, int n_calls) {
    if (r->finish == DSV4_FINISH_LENGTH) return "max_tokens";
    if (n_calls > 0) return "tool_use";
    return r->finish == DSV4_FINISH_STOP_STRING ? "stop_sequence" : "end_turn";
}

/* "stop_sequence": the stop string that ended the answer, null for any other ending. */
static void add_stop_sequence(cJSON *o, const srv_req *r, int n_calls) {
    if (!strcmp(stop_reason(r, n_calls), "stop_sequence") && r->stop_index >= 0 &&
        r->stop_index < r->gp.n_stop)
        cJSON_AddItemToObject(o, "stop_sequence", srv_json_str_n(r->stops[r->stop_index],
                                                                 strlen(r->stops[r->stop_index])));
    else
        cJSON_AddNullToObject(o, "stop_sequence");
}

static cJSON *usage(const srv_req *r, int start) {
    cJSON *u = cJSON_CreateObject();
    /* Anthropic counts cache reads apart: input = input_tokens + cache_read_input_tokens */
    cJSON_AddNumberToObject(u, "input_tokens", r->n_prompt - r->n_cached);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", r->n_cached);
    cJSON_AddNumberToObject(u, "output_tokens", start ? 0 : r->n_ev);
    return u;
}

static cJSON *message_head(srv *s, srv_job *j) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", s->model_name);
    return o;
}

static cJSON *tool_use_block(const srv_job *j, int i, const dsv4_tool_call *c, int with_input) {
    char id[80];
    snprintf(id, sizeof id, "toolu_%s_%d", j->id, i);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "name", c->name);
    cJSON *in = with_input ? cJSON_Parse(c->arguments) : NULL;
    cJSON_AddItemToObject(b, "input", in ? in : cJSON_CreateObject());
    return b;
}

static void messages_final(srv *s, srv_job *j, srv_buf *out, int *status) {
    srv_req *r = j->r;
    if (r->end != SRV_END_FINISHED) {
        /* an engine error, or cancelled by the shutdown's deadline */
        *status = r->end == SRV_END_ERROR ? 500 : 503;
        srv_anthropic_error(out, *status, r->errmsg[0] ? r->errmsg : "cancelled");
        return;
    }
    dsv4_parsed p;
    srv_parse_answer(j, &p);
    cJSON *o = message_head(s, j);
    cJSON *content = cJSON_AddArrayToObject(o, "content");
    if (p.reasoning) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "thinking");
        cJSON_AddStringToObject(b, "thinking", p.reasoning);
        cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToArray(content, b);
    }
    if (*p.content || !p.n_calls) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", p.content);
        cJSON_AddItemToArray(content, b);
    }
    for (int i = 0; i < p.n_calls; i++) cJSON_AddItemToArray(content, tool_use_block(j, i, &p.calls[i], 1));
    cJSON_AddStringToObject(o, "stop_reason", stop_reason(r, p.n_calls));
    add_stop_sequence(o, r, p.n_calls);
    cJSON_AddItemToObject(o, "usage", usage(r, 0));
    dsv4_parsed_free(&p);
    *status = 200;
    srv_put_json(out, o);
}

static void event(srv_buf *out, const char *type, cJSON *o) {
    cJSON *t = cJSON_CreateString(type);
    cJSON_AddItemToObject(o, "type", t);
    srv_sse(out, type, o);
}

static void block_stop(srv_job *j, srv_buf *out) {
    if (j->block < 0) return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", j->block);
    event(out, "content_block_stop", o);
    j->block = -1;
}

static void block_start(srv_job *j, srv_buf *out, cJSON *block, int part) {
    block_stop(j, out);
    j->block = j->n_blocks++;
    j->block_part = part;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", j->block);
    cJSON_AddItemToObject(o, "content_block", block);
    event(out, "content_block_start", o);
}

static void delta(srv_job *j, srv_buf *out, cJSON *d) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", j->block);
    cJSON_AddItemToObject(o, "delta", d);
    event(out, "content_block_delta", o);
}

/* Text up to `upto` as thinking / text block deltas. */
static void stream_text(srv_job *j, srv_buf *out, size_t upto, int done) {
    int part;
    size_t off, n;
    while (srv_split_next(&j->split, j->r->text, upto, done, &part, &off, &n)) {
        int thinking = part == SRV_PART_REASONING;
        if (j->block < 0 || j->block_part != part) {
            cJSON *b = cJSON_CreateObject();
            cJSON_AddStringToObject(b, "type", thinking ? "thinking" : "text");
            cJSON_AddStringToObject(b, thinking ? "thinking" : "text", "");
            block_start(j, out, b, part);
        }
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "type", thinking ? "thinking_delta" : "text_delta");
        cJSON_AddItemToObject(d, thinking ? "thinking" : "text", srv_json_str_n(j->r->text + off, n));
        delta(j, out, d);
    }
}

/* One OpenAI-shaped tool_calls delta array (tool_stream.h) as Anthropic events: a call's
 * first entry (it has an id) opens its tool_use block, argument text goes out as
 * input_json_delta fragments. Calls arrive in order and each call's arguments before the
 * next call opens, so fragments always belong to the open block; one for a block already
 * closed (possible only while completing a malformed block at the end) is dropped. */
static void calls_events(srv_job *j, srv_buf *out, cJSON *calls) {
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        const int i = cJSON_GetObjectItemCaseSensitive(c, "index")->valueint;
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        if (cJSON_GetObjectItemCaseSensitive(c, "id") && cJSON_IsString(name)) {
            const dsv4_tool_call call = {.name = name->valuestring};
            block_start(j, out, tool_use_block(j, i, &call, 0), SRV_PART_TOOLS);
            j->tool_block = i;
        }
        if (!cJSON_IsString(args) || !*args->valuestring || j->block < 0 || j->tool_block != i) continue;
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "type", "input_json_delta");
        cJSON_AddStringToObject(d, "partial_json", args->valuestring);
        delta(j, out, d);
    }
    cJSON_Delete(calls);
}

/* The tool_use events of the DSML block in the text up to `upto` (done: the answer is
 * complete). Called per token, as OpenAI's tool_calls deltas are. */
static void stream_calls(srv_job *j, srv_buf *out, size_t upto, int done) {
    cJSON *calls = srv_tool_stream_text(&j->calls, &j->split, j->r->text, upto, done, j->id);
    if (calls) calls_events(j, out, calls);
}

static void messages_stream(srv *s, srv_job *j, srv_buf *out, int *finished) {
    srv_req *r = j->r;
    if (!j->began) {
        cJSON *m = message_head(s, j);
        cJSON_AddArrayToObject(m, "content");
        cJSON_AddNullToObject(m, "stop_reason");
        cJSON_AddNullToObject(m, "stop_sequence");
        cJSON_AddItemToObject(m, "usage", usage(r, 1));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "message", m);
        event(out, "message_start", o);
        j->began = 1;
    }
    for (; j->ev_sent < r->n_ev; j->ev_sent++) {
        const srv_event *e = &r->ev[j->ev_sent];
        stream_text(j, out, e->text_off + e->text_len, 0);
        stream_calls(j, out, e->text_off + e->text_len, 0);
    }
    if (!r->end) return;
    if (r->end == SRV_END_ERROR) {
        srv_buf b = {0};
        srv_anthropic_error(&b, 500, r->errmsg);
        srv_buf_printf(out, "event: error\ndata: %s\n\n", b.s ? b.s : "{}");
        srv_buf_free(&b);
        *finished = 1;
        return;
    }
    stream_text(j, out, r->text_len, 1);
    int n_calls = 0;
    if (j->split.part == SRV_PART_TOOLS) {
        stream_calls(j, out, r->text_len, 1);
        dsv4_parsed p;
        srv_parse_answer(j, &p);
        n_calls = p.n_calls;
        if (n_calls) {
            /* what the scan did not send yet (nothing when the block was well formed) */
            cJSON *rest = srv_tool_stream_finish(&j->calls, &p, j->id);
            if (rest) calls_events(j, out, rest);
        } else if (!j->calls.n_calls) {
            /* malformed block: its raw text goes out as text, nothing is lost (stop_reason
             * says end_turn); not once a tool_use block was sent (a block cut by
             * max_tokens: the text is that call's) */
            const char *from = strstr(r->text, "<｜DSML｜tool_calls>");
            cJSON *b = cJSON_CreateObject();
            cJSON_AddStringToObject(b, "type", "text");
            cJSON_AddStringToObject(b, "text", "");
            block_start(j, out, b, SRV_PART_CONTENT);
            cJSON *d = cJSON_CreateObject();
            cJSON_AddStringToObject(d, "type", "text_delta");
            cJSON_AddStringToObject(d, "text", from ? from : "");
            delta(j, out, d);
        }
        dsv4_parsed_free(&p);
    }
    block_stop(j, out);
    cJSON *o = cJSON_CreateObject();
    cJSON *d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "stop_reason", stop_reason(r, n_calls));
    add_stop_sequence(d, r, n_calls);
    cJSON_AddItemToObject(o, "usage", usage(r, 0));
    event(out, "message_delta", o);
    event(out, "message_stop", cJSON_CreateObject());
    *finished = 1;
}

/* ---- the handler ------------------------------------------------------------------------ */

/* A request's prompt as /v1/messages renders it (system, messages, tools, tool_choice,
 * thinking, output format), shared with /v1/messages/count_tokens so that the count is the
 * usage.input_tokens of the same request. */
typedef struct prompt {
    dsv4_chat_opts co;
    dsv4_tok_ids ids;
    cJSON *tools;         /* OpenAI-style tools, or NULL (none, or tool_choice none) */
    int tc;               /* SRV_TC_* */
    const char *tc_name;  /* in the request's JSON */
    int json;             /* structured output */
    char *schema;         /* its schema's text (malloc'ed) */
} prompt;

static void prompt_free(prompt *p) {
    dsv4_tok_ids_free(&p->ids);
    cJSON_Delete(p->tools);
    free(p->schema);
}

/* Returns 0, 400 (msg written) or 500 (out of memory). */
static int build_prompt(srv *s, const cJSON *j, prompt *p, char *msg) {
    dsv4_err err = {0};
    int rc = 400;
    cJSON *msgs = cJSON_CreateArray();
    if (!msgs) { snprintf(msg, MSG, "out of memory"); return 500; }
    const cJSON *system = cJSON_GetObjectItemCaseSensitive(j, "system");
    if (system && !cJSON_IsNull(system)) {
        char *t = block_text(system, "system", msg);
        if (!t) goto out;
        add_text_msg(msgs, "system", t);
        free(t);
    }
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(j, "messages");
    if (!cJSON_IsArray(messages) || !messages->child) {
        snprintf(msg, MSG, "messages: must be a non-empty array");
        goto out;
    }
    int idx = 0;
    for (const cJSON *m = messages->child; m; m = m->next, idx++)
        if (convert_message(m, idx, msgs, msg)) goto out;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tools");
    p->tc = tool_choice(cJSON_GetObjectItemCaseSensitive(j, "tool_choice"), &p->tc_name, msg);
    if (p->tc < 0) goto out;
    if (t && !cJSON_IsNull(t) && !cJSON_IsArray(t)) { snprintf(msg, MSG, "tools: must be an array"); goto out; }
    if (cJSON_IsArray(t) && t->child && p->tc != SRV_TC_NONE)
        if (!(p->tools = convert_tools(t, msg))) goto out;
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(j, "thinking");
    if (th && !cJSON_IsNull(th)) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(th, "type");
        if (!cJSON_IsObject(th) || !cJSON_IsString(ty)) {
            snprintf(msg, MSG, "thinking: must be {\"type\": \"enabled\" | \"disabled\"}");
            goto out;
        }
        p->co.thinking = !strcmp(ty->valuestring, "enabled");
    }
    const cJSON *shown = NULL;
    p->json = srv_json_format(j, SRV_API_MESSAGES, &p->schema, &shown, msg, MSG);
    if (p->json < 0) goto out;
    if (p->json) {
        /* the model sees the schema as in an OpenAI-style request (the template's section) */
        cJSON *rf = cJSON_CreateObject(), *js = cJSON_AddObjectToObject(rf, "json_schema");
        cJSON_AddStringToObject(rf, "type", "json_schema");
        cJSON_AddStringToObject(js, "name", "output");
        cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(shown, 1));
        cJSON *m2 = srv_messages_with_format(msgs, rf);
        cJSON_Delete(rf);
        if (!m2) { snprintf(msg, MSG, "out of memory"); rc = 500; goto out; }
        cJSON_Delete(msgs);
        msgs = m2;
    }
    if (srv_chat_prompt(s, msgs, p->tools, &p->co, &p->ids, &err)) {
        snprintf(msg, MSG, "%s", err.msg);
        rc = err.code == DSV4_ERR_NOMEM ? 500 : 400;
        goto out;
    }
    rc = 0;
out:
    cJSON_Delete(msgs);
    return rc;
}

void srv_anthropic_messages(srv *s, const char *body, size_t len, srv_reply *out) {
    char msg[MSG];
    prompt p = {0};
    srv_req *r = NULL;
    int stream = 0, rc = 400;
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(j)) { snprintf(msg, MSG, "the request body is not a JSON object"); goto bad; }
    double mt;
    int k = srv_opt_num(j, "max_tokens", 1, (double)s->o.max_context, &mt, msg, MSG);
    if (k <= 0) {
        if (!k) snprintf(msg, MSG, "max_tokens: field required");
        goto bad;
    }
    if ((rc = build_prompt(s, j, &p, msg))) goto bad;
    rc = 400;
    if (srv_opt_bool(j, "stream", &stream, msg, MSG) < 0) goto bad;
    if (!(r = srv_req_new(p.ids.ids, (int)p.ids.n))) { srv_reply_error(out, SRV_API_MESSAGES, 500, "out of memory"); goto done; }
    if (srv_parse_sampling(s, j, r, "stop_sequences", msg, MSG)) goto bad;
    const char *gparam = NULL;
    if (srv_guided_refuse(j, "/v1/messages", &gparam, msg, MSG)) goto bad;
    if (srv_force_tool_call(s, r, p.tools, p.tc, p.tc_name, p.co.thinking, msg, MSG)) goto bad;
    const cJSON *tcj = cJSON_GetObjectItemCaseSensitive(j, "tool_choice");
    const int single = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tcj, "disable_parallel_tool_use"));
    /* JSON output and tools: the answer is the document or a tool_calls block (a required
     * call has no text for the format to constrain: the tools alone) */
    const int rc2 = srv_answer_constraint(r, p.tools, NULL, p.tc, p.tc_name, p.schema, p.co.thinking, single, msg, MSG);
    p.schema = NULL;
    if (rc2) goto bad;
    srv_job *job = srv_submit(s, r, SRV_API_MESSAGES, body, out);
    r = NULL;
    if (job) {
        job->stream = stream;
        job->thinking = p.co.thinking;
        job->tools = p.tools != NULL;
        srv_split_init(&job->split, p.co.thinking, p.tools != NULL);
        out->stream = messages_stream;
        out->final = messages_final;
    }
    goto done;
bad:
    srv_reply_error(out, SRV_API_MESSAGES, rc, msg);
done:
    if (r) { srv_req_release(r); srv_req_release(r); }
    prompt_free(&p);
    cJSON_Delete(j);
}

/* POST /v1/messages/count_tokens: {"input_tokens": N}, N the prompt's tokens exactly as
 * /v1/messages renders the same body (its usage.input_tokens with nothing cached). No
 * max_tokens needed; the sampling fields are not read. */
void srv_anthropic_count_tokens(srv *s, const char *body, size_t len, srv_reply *out) {
    char msg[MSG];
    prompt p = {0};
    int rc = 400;
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(j)) snprintf(msg, MSG, "the request body is not a JSON object");
    else rc = build_prompt(s, j, &p, msg);
    if (rc) {
        srv_reply_error(out, SRV_API_MESSAGES, rc, msg);
    } else {
        out->status = 200;
        srv_buf_printf(&out->body, "{\"input_tokens\":%zu}", p.ids.n);
    }
    prompt_free(&p);
    cJSON_Delete(j);
}
