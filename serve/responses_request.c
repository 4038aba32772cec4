/* responses_request.c — a Responses API request turned into a chat request: its input items
 * (and previous_response_id's stored conversation) as OpenAI-style messages, its other fields
 * (tools, tool_choice, text.format, reasoning, include, metadata, the sampling fields) in the
 * chat endpoint's form, the rendered prompt in the Responses API's terms, and truncation
 * "auto" (the fewest oldest items dropped). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/responses_int.h"
#include "serve/srv.h"

/* ---- request: input items -> OpenAI-style messages --------------------------------------- */

/* The text of a content field: a string, or its text parts (input_text, output_text, the
 * text of reasoning_text / summary_text) joined by "\n\n" (the chat encoding's rule for
 * parts). NULL with a message for another part or a wrong type. */
static char *parts_text(const cJSON *c, const char *where, char *msg) {
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    if (!cJSON_IsArray(c)) { snprintf(msg, MSG, "%s must be a string or a list of parts", where); return NULL; }
    srv_buf b = {0};
    srv_buf_puts(&b, "");
    int k = 0;
    for (const cJSON *x = c->child; x; x = x->next, k++) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(x, "type");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "text");
        const char *tn = cJSON_IsString(ty) ? ty->valuestring : "";
        if ((strcmp(tn, "input_text") && strcmp(tn, "output_text") && strcmp(tn, "reasoning_text") &&
             strcmp(tn, "summary_text")) || !cJSON_IsString(t)) {
            snprintf(msg, MSG, "%s[%d]: only text parts (input_text, output_text) are supported, "
                     "each with a string 'text'", where, k);
            srv_buf_free(&b);
            return NULL;
        }
        if (k) srv_buf_puts(&b, "\n\n");
        srv_buf_puts(&b, t->valuestring);
    }
    if (b.oom) { srv_buf_free(&b); snprintf(msg, MSG, "out of memory"); return NULL; }
    return b.s;
}

const char *rs_str_field(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

size_t srv_responses_prev_bytes(srv *s, const char *body, size_t len) {
    static const char key[] = "previous_response_id";
    if (!s->rstore || !len || !memmem(body, len, key, sizeof key - 1)) return 0;
    cJSON *j = cJSON_ParseWithLength(body, len);
    const char *id = rs_str_field(j, key);
    size_t n = 0;
    if (id) {
        pthread_mutex_lock(&s->rstore->mu);
        const rs_entry *e = *rs_link(s->rstore, id);
        n = e ? e->conv_len : 0;
        pthread_mutex_unlock(&s->rstore->mu);
    }
    cJSON_Delete(j);
    return n;
}

/* ---- reasoning.encrypted_content ---------------------------------------------------------
 * OpenAI's stateless clients (store false: Codex, the Agents SDK) ask for each reasoning item's
 * encrypted_content and send the item back with it, to carry the reasoning into the next turn.
 * This server keeps no key, and the item's text is in the clear beside it anyway (content), so
 * it is an opaque wrapping, not a secret: SEAL then the text in base64. Read back, it is the
 * reasoning's text; a blob another server sealed is refused (it cannot be read). */
#define SEAL "dsv4-reasoning-v1:"

static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* text sealed (NULL: out of memory) */
char *rs_seal(const char *text) {
    const size_t n = strlen(text), sl = strlen(SEAL);
    char *o = malloc(sl + (n + 2) / 3 * 4 + 1), *w;
    if (!o) return NULL;
    memcpy(o, SEAL, sl);
    w = o + sl;
    for (size_t i = 0; i < n; i += 3) {
        const unsigned a = (unsigned char)text[i], b = i + 1 < n ? (unsigned char)text[i + 1] : 0,
                       c = i + 2 < n ? (unsigned char)text[i + 2] : 0, v = a << 16 | b << 8 | c;
        *w++ = kB64[v >> 18];
        *w++ = kB64[v >> 12 & 63];
        *w++ = i + 1 < n ? kB64[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? kB64[v & 63] : '=';
    }
    *w = 0;
    return o;
}

/* The text of a sealed blob; NULL when it is not one (or out of memory: *oom). */
static char *unseal(const char *blob, int *oom) {
    const size_t sl = strlen(SEAL);
    *oom = 0;
    if (strncmp(blob, SEAL, sl)) return NULL;
    blob += sl;
    const size_t n = strlen(blob);
    if (n % 4) return NULL;
    char *o = malloc(n / 4 * 3 + 1);
    if (!o) { *oom = 1; return NULL; }
    size_t m = 0;
    for (size_t i = 0; i < n; i += 4) {
        unsigned v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char ch = blob[i + k], *at = ch ? strchr(kB64, ch) : NULL;
            if (ch == '=' && i + 4 == n && k >= 2 && (k == 3 || blob[i + 3] == '=')) pad++, v <<= 6;
            else if (at && !pad) v = v << 6 | (unsigned)(at - kB64);
            else { free(o); return NULL; }
        }
        o[m++] = (char)(v >> 16);
        if (pad < 2) o[m++] = (char)(v >> 8 & 255);
        if (pad < 1) o[m++] = (char)(v & 255);
    }
    o[m] = 0;
    if (strlen(o) != m) { free(o); return NULL; }  /* (a NUL inside: not a text this server sealed) */
    return o;
}

/* The last message of msgs when it is an assistant's (function calls of the same turn join
 * it: the model wrote its content and its calls as one answer). */
static cJSON *last_assistant(cJSON *msgs) {
    cJSON *m = msgs->child ? msgs->child->prev : NULL;  /* cJSON keeps the last in child->prev */
    const char *r = m ? rs_str_field(m, "role") : NULL;
    return r && !strcmp(r, "assistant") ? m : NULL;
}

/* One input item appended to msgs; *reasoning: a reasoning item's text waiting for the
 * assistant message it belongs to. 0, or -1 with a message. */
static int item_message(const cJSON *x, int k, int n_prev, cJSON *msgs, char **reasoning, char *msg) {
    char where[80];
    if (k >= 0) snprintf(where, sizeof where, "input[%d]", k);
    else snprintf(where, sizeof where, "previous_response_id's conversation[%d]", k + n_prev);
    if (!cJSON_IsObject(x)) { snprintf(msg, MSG, "%s must be an object", where); return -1; }
    const cJSON *tyj = cJSON_GetObjectItemCaseSensitive(x, "type");
    if (tyj && !cJSON_IsString(tyj)) { snprintf(msg, MSG, "%s.type must be a string", where); return -1; }
    const char *ty = tyj ? tyj->valuestring : "message";
    cJSON *m = NULL;
    char *text = NULL;
    if (!strcmp(ty, "message")) {
        const char *role = rs_str_field(x, "role");
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                      strcmp(role, "developer"))) {
            snprintf(msg, MSG, "%s: a message needs role \"user\", \"assistant\", \"system\" or "
                     "\"developer\"", where);
            return -1;
        }
        snprintf(where + strlen(where), sizeof where - strlen(where), ".content");
        if (!(text = parts_text(cJSON_GetObjectItemCaseSensitive(x, "content"), where, msg))) return -1;
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", role);
        cJSON_AddStringToObject(m, "content", text);
        if (!strcmp(role, "assistant") && *reasoning) cJSON_AddStringToObject(m, "reasoning_content", *reasoning);
    } else if (!strcmp(ty, "function_call")) {
        const char *id = rs_str_field(x, "call_id"), *name = rs_str_field(x, "name"), *args = rs_str_field(x, "arguments");
        const char *st = rs_str_field(x, "status");
        if (!id || !name || !args) {
            snprintf(msg, MSG, "%s: a function_call needs string 'call_id', 'name' and 'arguments'", where);
            return -1;
        }
        if (st && !strcmp(st, "incomplete")) {
            /* a failed answer's call, cut midway: its arguments are not what the model meant */
            snprintf(msg, MSG, "%s: an incomplete function_call (its answer failed midway, its arguments "
                     "unfinished) cannot be part of a conversation; leave it out", where);
            return -1;
        }
        cJSON *a = *reasoning ? NULL : last_assistant(msgs);
        if (!a) {
            m = a = cJSON_CreateObject();
            cJSON_AddStringToObject(a, "role", "assistant");
            cJSON_AddStringToObject(a, "content", "");
            if (*reasoning) cJSON_AddStringToObject(a, "reasoning_content", *reasoning);
        }
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(a, "tool_calls");
        if (!calls) calls = cJSON_AddArrayToObject(a, "tool_calls");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON *fn = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(fn, "name", name);
        cJSON_AddStringToObject(fn, "arguments", args);
        cJSON_AddItemToArray(calls, c);
    } else if (!strcmp(ty, "function_call_output")) {
        const char *id = rs_str_field(x, "call_id");
        snprintf(where + strlen(where), sizeof where - strlen(where), ".output");
        if (!id) { snprintf(msg, MSG, "input[%d]: a function_call_output needs a string 'call_id'", k); return -1; }
        if (!(text = parts_text(cJSON_GetObjectItemCaseSensitive(x, "output"), where, msg))) return -1;
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "tool");
        cJSON_AddStringToObject(m, "tool_call_id", id);
        cJSON_AddStringToObject(m, "content", text);
    } else if (!strcmp(ty, "reasoning")) {
        /* its text (content, else its encrypted_content unsealed, else the summary) goes with
         * the assistant turn after it */
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(x, "content");
        const cJSON *sm = cJSON_GetObjectItemCaseSensitive(x, "summary");
        const cJSON *ec = cJSON_GetObjectItemCaseSensitive(x, "encrypted_content");
        const cJSON *src = cJSON_GetArraySize(c) ? c : sm;
        if (src != c && ec && !cJSON_IsNull(ec)) {
            int oom = 0;
            if (!cJSON_IsString(ec) || !(text = unseal(ec->valuestring, &oom))) {
                snprintf(msg, MSG, oom ? "out of memory" : "%s.encrypted_content was not made by this server "
                         "(it reads back only the reasoning it sealed; send the item's content instead)", where);
                return -1;
            }
            free(*reasoning);
            *reasoning = text;
            return 0;
        }
        snprintf(where + strlen(where), sizeof where - strlen(where), ".%s", src == c ? "content" : "summary");
        if (!(text = src ? parts_text(src, where, msg) : strdup(""))) return -1;
        free(*reasoning);
        *reasoning = text;
        return 0;
    } else {
        char t[41];
        srv_client_text(t, sizeof t, ty);
        snprintf(msg, MSG, "%s: item type '%s' is not supported (message, function_call, "
                 "function_call_output, reasoning)", where, t);
        return -1;
    }
    free(text);
    if (m) cJSON_AddItemToArray(msgs, m);
    free(*reasoning);
    *reasoning = NULL;
    return 0;
}

/* The conversation's items as messages, after the instructions (a system message). Its first
 * n_prev items are the stored ones: an error names the client's input[k - n_prev]. src
 * (room for the items + 1): the item that made each message (its index in conv; -1: the
 * instructions), for the chat path's errors. */
static cJSON *conv_messages(const cJSON *conv, int n_prev, const char *instructions, int *src, char *msg) {
    cJSON *msgs = cJSON_CreateArray();
    char *reasoning = NULL;
    int k = -n_prev;
    if (instructions) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", instructions);
        cJSON_AddItemToArray(msgs, m);
        src[0] = -1;
    }
    int n = instructions ? 1 : 0;  /* messages so far (a count: cJSON's is a walk) */
    for (const cJSON *x = conv->child; x; x = x->next, k++) {
        const cJSON *last = msgs->child ? msgs->child->prev : NULL;
        if (item_message(x, k, n_prev, msgs, &reasoning, msg)) {
            cJSON_Delete(msgs);
            msgs = NULL;
            break;
        }
        if (msgs->child && msgs->child->prev != last) src[n++] = k + n_prev;
    }
    free(reasoning);
    return msgs;
}

/* ---- request: the other fields in the chat endpoint's form ------------------------------- */

/* A function tool without "strict" (or null): strict when its parameters compile as a
 * strict tool's, else not. OpenAI's Responses API defaults `strict` to true (it normalizes
 * the schema into strict mode; Chat Completions stays non-strict); a schema our subset
 * cannot enforce is served best-effort instead of refused, as only an explicit
 * `strict: true` is (a 400 naming it). 0, or -1 out of memory. */
static int strict_default(cJSON *fn) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(fn, "strict");
    if (st && !cJSON_IsNull(st)) return 0;
    cJSON_DeleteItemFromObjectCaseSensitive(fn, "strict");
    cJSON *flag = cJSON_AddTrueToObject(fn, "strict");
    if (!flag) return -1;
    cJSON *one = cJSON_CreateArray(), *o = cJSON_CreateObject();
    if (!one || !o || !cJSON_AddItemToArray(one, o)) { /* (o is one's once added) */
        cJSON_Delete(one), cJSON_Delete(o);
        return -1;
    }
    char *text = NULL;
    if (cJSON_AddStringToObject(o, "type", "function") && cJSON_AddItemReferenceToObject(o, "function", fn))
        text = cJSON_PrintUnformatted(one);
    cJSON_Delete(one);
    if (!text) return -1;
    int strict = 0;
    dsv4_err err = {0};
    const int rc = dsv4_tools_check(text, strlen(text), &strict, &err);
    free(text);
    if (rc == DSV4_ERR_NOMEM) return -1;
    if (rc || !strict) flag->type = (flag->type & ~0xFF) | cJSON_False; /* in place: nothing to allocate */
    return 0;
}

/* tools [{type: "function", name, description, parameters, strict}] as chat tools. */
static int chat_tools(const cJSON *tools, cJSON *chat, char *msg) {
    if (!tools || cJSON_IsNull(tools)) return 0;
    if (!cJSON_IsArray(tools)) { snprintf(msg, MSG, "'tools' must be an array"); return -1; }
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    int k = 0;
    for (const cJSON *t = tools->child; t; t = t->next, k++) {
        const char *ty = rs_str_field(t, "type"), *name = rs_str_field(t, "name");
        if (!ty || strcmp(ty, "function")) {
            char t[41];
            srv_client_text(t, sizeof t, ty ? ty : "");
            snprintf(msg, MSG, "tools[%d]: tool type '%s' is not supported (only \"function\")", k, t);
            return -1;
        }
        if (!name) { snprintf(msg, MSG, "tools[%d] needs a string 'name'", k); return -1; }
        cJSON *o = cJSON_CreateObject();
        cJSON *fn = o && cJSON_AddStringToObject(o, "type", "function") ? cJSON_AddObjectToObject(o, "function") : NULL;
        for (const cJSON *f = t->child; fn && f; f = f->next) {
            if (!strcmp(f->string, "type")) continue;
            cJSON *d = cJSON_Duplicate(f, 1);
            if (!d || !cJSON_AddItemToObject(fn, f->string, d)) cJSON_Delete(d), fn = NULL;
        }
        if (!fn || strict_default(fn) || !cJSON_AddItemToArray(out, o)) {
            cJSON_Delete(o);
            snprintf(msg, MSG, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* {"type": "allowed_tools", "mode", "tools": [{"type": "function", "name": N}]} as the
 * chat's {"type": "allowed_tools", "allowed_tools": {"mode", "tools": [{"type": "function",
 * "function": {"name": N}}]}} (the chat path checks the mode, and the names against the
 * tools; its messages come back in these terms: kTerms) into o. */
static int chat_allowed_tools(const cJSON *tc, cJSON *o, char *msg) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(tc, "tools");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(tc, "mode");
    cJSON *at = cJSON_AddObjectToObject(o, "allowed_tools");
    cJSON *out = at ? cJSON_AddArrayToObject(at, "tools") : NULL;
    if (!out || (mode && !cJSON_AddItemToObject(at, "mode", cJSON_Duplicate(mode, 0)))) {
        snprintf(msg, MSG, "out of memory");
        return -1;
    }
    if (!cJSON_IsArray(list)) {
        snprintf(msg, MSG, "'tool_choice.tools' must be an array of {\"type\": \"function\", \"name\": ...}");
        return -1;
    }
    int k = 0;
    for (const cJSON *e = list->child; e; e = e->next, k++) {
        const char *ty = rs_str_field(e, "type"), *name = rs_str_field(e, "name");
        if (!ty || strcmp(ty, "function") || !name) {
            snprintf(msg, MSG, "'tool_choice.tools[%d]' must be {\"type\": \"function\", \"name\": ...} (only "
                     "function tools are served)", k);
            return -1;
        }
        cJSON *x = cJSON_CreateObject();
        cJSON *fn = x && cJSON_AddStringToObject(x, "type", "function") ? cJSON_AddObjectToObject(x, "function") : NULL;
        if (!fn || !cJSON_AddStringToObject(fn, "name", name) || !cJSON_AddItemToArray(out, x)) {
            cJSON_Delete(x);
            snprintf(msg, MSG, "out of memory");
            return -1;
        }
    }
    return 0;
}

static int chat_tool_choice(const cJSON *tc, cJSON *chat, char *msg) {
    if (!tc || cJSON_IsNull(tc)) return 0;
    if (cJSON_IsString(tc)) {
        cJSON_AddItemToObject(chat, "tool_choice", cJSON_Duplicate(tc, 0));
        return 0;  /* the chat endpoint checks the word */
    }
    const char *ty = rs_str_field(tc, "type"), *name = rs_str_field(tc, "name");
    if (ty && !strcmp(ty, "allowed_tools")) {
        cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice");
        if (!o || !cJSON_AddStringToObject(o, "type", "allowed_tools")) {
            snprintf(msg, MSG, "out of memory");
            return -1;
        }
        return chat_allowed_tools(tc, o, msg);
    }
    if (!ty || strcmp(ty, "function") || !name) {
        snprintf(msg, MSG, "'tool_choice' must be \"none\", \"auto\", \"required\", "
                 "{\"type\": \"function\", \"name\": ...} or {\"type\": \"allowed_tools\", \"mode\": ..., "
                 "\"tools\": [...]}");
        return -1;
    }
    cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", name);
    return 0;
}

/* The optional object field key of j and its optional member sub (a string when str, else
 * an object): *out the member, NULL when either is absent or null; -1 with a message for
 * a wrong type. */
static int member(const cJSON *j, const char *key, const char *sub, int str, const cJSON **out, char *msg) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, key);
    const cJSON *m = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, sub) : NULL;
    *out = NULL;
    if ((o && !cJSON_IsNull(o) && !cJSON_IsObject(o)) ||
        (m && !cJSON_IsNull(m) && !(str ? cJSON_IsString(m) : cJSON_IsObject(m)))) {
        snprintf(msg, MSG, "'%s' must be an object and '%s.%s' %s", key, key, sub, str ? "a string" : "an object");
        return -1;
    }
    if (m && !cJSON_IsNull(m)) *out = m;
    return 0;
}

/* text.format {type: text | json_object | json_schema (name, schema, strict, description)}
 * as the chat's response_format. */
static int chat_format(const cJSON *j, cJSON *chat, char *msg) {
    const cJSON *f;
    if (member(j, "text", "format", 0, &f, msg)) return -1;
    if (!f) return 0;
    const char *ty = rs_str_field(f, "type");
    if (!ty || (strcmp(ty, "text") && strcmp(ty, "json_object") && strcmp(ty, "json_schema"))) {
        snprintf(msg, MSG, "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
        return -1;
    }
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    cJSON_AddStringToObject(rf, "type", ty);
    if (strcmp(ty, "json_schema")) return 0;
    if (!rs_str_field(f, "name")) {
        snprintf(msg, MSG, "'text.format' of type json_schema needs a string 'name'");
        return -1;
    }
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    for (const cJSON *x = f->child; x; x = x->next)
        if (strcmp(x->string, "type")) cJSON_AddItemToObject(js, x->string, cJSON_Duplicate(x, 1));
    return 0;
}

/* reasoning.effort: none / minimal: thinking off; low, medium, high (and "max", DeepSeek's)
 * on, as the chat's reasoning_effort. */
static int chat_reasoning(const cJSON *j, cJSON *chat, char *msg) {
    const cJSON *e;
    if (member(j, "reasoning", "effort", 1, &e, msg)) return -1;
    if (!e) return 0;
    const char *v = e->valuestring;
    if (!strcmp(v, "none") || !strcmp(v, "minimal")) {
        cJSON_AddFalseToObject(chat, "thinking");
        return 0;
    }
    if (strcmp(v, "low") && strcmp(v, "medium") && strcmp(v, "high") && strcmp(v, "max")) {
        snprintf(msg, MSG, "'reasoning.effort' must be none, minimal, low, medium, high or max");
        return -1;
    }
    cJSON_AddStringToObject(chat, "reasoning_effort", v);
    return 0;
}

/* An optional field that must be a string (or an object, want_obj) when present. */
int rs_opt_type(const cJSON *j, const char *key, int want_obj, char *msg) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x) || (want_obj ? cJSON_IsObject(x) : cJSON_IsString(x))) return 0;
    snprintf(msg, MSG, "'%s' must be %s", key, want_obj ? "an object" : "a string");
    return -1;
}

/* Fields OpenAI has that this server does not serve: a 400 naming the field (*param) rather
 * than a silent change of what was asked. (An empty context_management asks nothing.) */
int rs_refused_fields(const cJSON *j, const char **param, char *msg) {
    static const char *const no[][2] = {
        {"conversation", "this server has no Conversations API (previous_response_id continues a stored response)"},
        {"prompt", "this server keeps no prompt templates (send instructions and input)"},
        {"context_management", "this server does not compact a conversation (truncation \"auto\" drops its "
                               "oldest items to fit the context)"},
        {"moderation", "this server runs no moderation model"}};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, no[i][0]);
        if (!x || cJSON_IsNull(x) || (cJSON_IsArray(x) && !x->child && !strcmp(no[i][0], "context_management")))
            continue;
        *param = no[i][0];
        snprintf(msg, MSG, "'%s' is not supported: %s", no[i][0], no[i][1]);
        return -1;
    }
    return 0;
}

/* Fields accepted and not acted on, each harmless here and echoed in the response object
 * when given: max_tool_calls (it bounds built-in tools; this server has none),
 * prompt_cache_key, prompt_cache_retention and prompt_cache_options (the prefix cache is
 * automatic: an identical prefix is reused whatever the key), safety_identifier (no usage
 * policy is enforced), service_tier (one tier: the response says "default", as OpenAI's says
 * the tier it used when one was asked), stream_options (include_obfuscation: no obfuscation field is sent). Their
 * types are checked: a 400 naming the field. */
int rs_ignored_fields(const cJSON *j, const char **param, char *msg) {
    static const char *const strs[] = {"prompt_cache_key", "prompt_cache_retention", "safety_identifier",
                                       "service_tier"};
    static const char *const objs[] = {"prompt_cache_options", "stream_options"};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (rs_opt_type(j, strs[i], 0, msg)) { *param = strs[i]; return -1; }
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
        if (rs_opt_type(j, objs[i], 1, msg)) { *param = objs[i]; return -1; }
    const char *si = rs_str_field(j, "safety_identifier");
    double mtc = 0;
    int k;
    if (si && strlen(si) > 64) {
        *param = "safety_identifier";
        snprintf(msg, MSG, "'safety_identifier' must be at most 64 characters");
        return -1;
    }
    if ((k = srv_opt_num(j, "max_tool_calls", 0, 1e9, &mtc, msg, MSG)) < 0 || (k && mtc != (double)(long long)mtc)) {
        *param = "max_tool_calls";
        snprintf(msg, MSG, "'max_tool_calls' must be a whole number");
        return -1;
    }
    return 0;
}

/* include: what the response should carry besides its default fields. This server honours
 * message.output_text.logprobs (*logprobs = 1) and reasoning.encrypted_content (*sealed = 1:
 * SEAL's wrapping, read back from an input item); a value naming a tool or an input it does
 * not have is a 400 naming the value rather than a silent answer without them. */
int rs_includes(const cJSON *j, int *logprobs, int *sealed, char *msg) {
    static const char *const absent[] = {"file_search_call.results", "web_search_call.results",
                                         "web_search_call.action.sources", "code_interpreter_call.outputs",
                                         "computer_call_output.output.image_url", "message.input_image.image_url"};
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "include");
    *logprobs = *sealed = 0;
    if (!in || cJSON_IsNull(in)) return 0;
    if (!cJSON_IsArray(in)) { snprintf(msg, MSG, "'include' must be a list of strings"); return -1; }
    int k = 0;
    for (const cJSON *x = in->child; x; x = x->next, k++) {
        if (!cJSON_IsString(x)) { snprintf(msg, MSG, "'include[%d]' must be a string", k); return -1; }
        const char *v = x->valuestring;
        char t[81];
        srv_client_text(t, sizeof t, v);
        if (!strcmp(v, "message.output_text.logprobs")) {
            *logprobs = 1;
            continue;
        }
        if (!strcmp(v, "reasoning.encrypted_content")) {
            *sealed = 1;
            continue;
        }
        for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
            if (!strcmp(v, absent[i])) {
                snprintf(msg, MSG, "'include[%d]': \"%s\" cannot be included: this server has no such "
                         "tool or input (only function tools and text)", k, t);
                return -1;
            }
        snprintf(msg, MSG, "'include[%d]': unknown value \"%s\" (this server includes "
                 "\"message.output_text.logprobs\")", k, t);
        return -1;
    }
    return 0;
}

/* metadata: at most 16 string values (OpenAI's limits: keys 64, values 512 characters). */
int rs_check_metadata(const cJSON *md, char *msg) {
    if (!md || cJSON_IsNull(md)) return 0;
    int k = 0;
    for (const cJSON *x = cJSON_IsObject(md) ? md->child : NULL; x; x = x->next, k++)
        if (!cJSON_IsString(x) || strlen(x->string) > 64 || strlen(x->valuestring) > 512) k = 99;
    if (!cJSON_IsObject(md) || k > 16) {
        snprintf(msg, MSG, "'metadata' must be an object of at most 16 strings (keys up to 64, "
                 "values up to 512 characters)");
        return -1;
    }
    return 0;
}

/* e's field key, when null, becomes v (else v is freed): OpenAI's default. */
static void default_field(cJSON *e, const char *key, cJSON *v) {
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, key))) cJSON_ReplaceItemInObjectCaseSensitive(e, key, v);
    else cJSON_Delete(v);
}

/* truncation: "disabled" (the default: an input over the context is a 400) or "auto". */
int rs_truncation(const cJSON *j, int *is_auto, char *msg) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "truncation");
    *is_auto = cJSON_IsString(t) && !strcmp(t->valuestring, "auto");
    if (!t || cJSON_IsNull(t) || *is_auto || (cJSON_IsString(t) && !strcmp(t->valuestring, "disabled"))) return 0;
    snprintf(msg, MSG, "'truncation' must be \"auto\" or \"disabled\"");
    return -1;
}

/* The response object's fields that repeat the request (null when not given; temperature and
 * top_p: the values sampled with, the model's generation config's when it gives them). */
cJSON *rs_echo_fields(const cJSON *j, const dsv4_gen_config *gc, int store, int trunc_auto, int bg) {
    static const char *const keys[] = {"instructions", "max_output_tokens", "metadata",
                                       "parallel_tool_calls", "previous_response_id", "reasoning",
                                       "temperature", "text", "tool_choice", "tools", "top_logprobs",
                                       "top_p", "user"};
    /* (ignored_fields': only when given, as OpenAI's service_tier) */
    static const char *const given[] = {"max_tool_calls", "prompt_cache_key", "prompt_cache_options",
                                        "prompt_cache_retention", "safety_identifier"};
    cJSON *e = cJSON_CreateObject();
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
        cJSON_AddItemToObject(e, keys[i], x ? cJSON_Duplicate(x, 1) : cJSON_CreateNull());
    }
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, given[i]);
        if (x && !cJSON_IsNull(x)) cJSON_AddItemToObject(e, given[i], cJSON_Duplicate(x, 1));
    }
    /* OpenAI's defaults where the request gave none */
    default_field(e, "temperature", cJSON_CreateNumber(gc->has & DSV4_GENCFG_TEMPERATURE ? gc->temperature : 1));
    default_field(e, "top_p", cJSON_CreateNumber(gc->has & DSV4_GENCFG_TOP_P ? gc->top_p : 1));
    default_field(e, "top_logprobs", cJSON_CreateNumber(0));
    default_field(e, "parallel_tool_calls", cJSON_CreateTrue());
    default_field(e, "tool_choice", cJSON_CreateString("auto"));
    default_field(e, "tools", cJSON_CreateArray());
    default_field(e, "text", cJSON_CreateObject());
    cJSON *text = cJSON_GetObjectItemCaseSensitive(e, "text");  /* (text.verbosity alone: format text) */
    if (cJSON_IsObject(text) && !cJSON_GetObjectItemCaseSensitive(text, "format"))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(text, "format"), "type", "text");
    default_field(e, "metadata", cJSON_CreateObject());
    cJSON_AddBoolToObject(e, "store", store);
    cJSON_AddBoolToObject(e, "background", bg);
    cJSON_AddStringToObject(e, "truncation", trunc_auto ? "auto" : "disabled");
    const cJSON *tier = cJSON_GetObjectItemCaseSensitive(j, "service_tier");
    if (tier && !cJSON_IsNull(tier)) cJSON_AddStringToObject(e, "service_tier", "default");
    return e;
}

/* The conversation this request continues (previous_response_id's stored items) with its
 * input appended, or NULL: *status 400 / PREV_NOT_FOUND / 500 with a message. */
cJSON *rs_conversation(srv *s, const cJSON *j, int *n_prev, int *status, char *msg) {
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "input");
    const char *prev = rs_str_field(j, "previous_response_id");
    *status = 400;
    if (rs_opt_type(j, "previous_response_id", 0, msg)) return NULL;
    if (!cJSON_IsString(in) && !cJSON_IsArray(in)) {
        snprintf(msg, MSG, "'input' must be a string or a list of items");
        return NULL;
    }
    cJSON *conv = NULL;
    if (prev) {
        int oom = 0;
        char *t = rs_get(s->rstore, prev, 1, NULL, &oom);
        if (!t) {
            char name[201];
            srv_client_text(name, sizeof name, prev);
            *status = oom == 1 ? 500 : oom ? PREV_RUNNING : PREV_NOT_FOUND;
            snprintf(msg, MSG, oom == 1 ? "out of memory" : oom ? "Previous response with id '%s' is still "
                     "in progress (a background response): wait for its end (GET polls it)" :
                     "Previous response with id '%s' not found.", name);
            return NULL;
        }
        conv = cJSON_Parse(t);
        free(t);
        *n_prev = cJSON_GetArraySize(conv);
    } else {
        conv = cJSON_CreateArray();
    }
    if (!conv) { *status = 500; snprintf(msg, MSG, "out of memory"); return NULL; }
    if (cJSON_IsString(in)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "message");
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", in->valuestring);
        cJSON_AddItemToArray(conv, m);
    } else {
        for (const cJSON *x = in->child; x; x = x->next) cJSON_AddItemToArray(conv, cJSON_Duplicate(x, 1));
    }
    return conv;
}

/* The chat request of a Responses request j (conv: its conversation; src: conv_messages').
 * NULL with a message. */
static cJSON *chat_request(srv *s, const cJSON *j, const cJSON *conv, int n_prev, int *src, char *msg) {
    static const char *const sampling[] = {"temperature", "top_p", "top_k", "min_p", "seed",
                                           "presence_penalty", "frequency_penalty", "repetition_penalty",
                                           "priority"};
    cJSON *chat = cJSON_CreateObject();
    double mo = 0;
    int k;
    if (rs_opt_type(j, "instructions", 0, msg)) goto bad;
    cJSON *msgs = conv_messages(conv, n_prev, rs_str_field(j, "instructions"), src, msg);
    if (!msgs) goto bad;
    cJSON_AddItemToObject(chat, "messages", msgs);
    if (!msgs->child) { snprintf(msg, MSG, "'input' holds no message"); goto bad; }
    if (chat_tools(cJSON_GetObjectItemCaseSensitive(j, "tools"), chat, msg)) goto bad;
    if (chat_tool_choice(cJSON_GetObjectItemCaseSensitive(j, "tool_choice"), chat, msg)) goto bad;
    const cJSON *ptc = cJSON_GetObjectItemCaseSensitive(j, "parallel_tool_calls");
    if (cJSON_IsBool(ptc)) cJSON_AddItemToObject(chat, "parallel_tool_calls", cJSON_Duplicate(ptc, 0));
    if (chat_format(j, chat, msg) || chat_reasoning(j, chat, msg)) goto bad;
    for (size_t i = 0; i < sizeof sampling / sizeof sampling[0]; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, sampling[i]);
        if (x) cJSON_AddItemToObject(chat, sampling[i], cJSON_Duplicate(x, 1));
    }
    if ((k = srv_opt_num(j, "max_output_tokens", 1, (double)s->o.max_context, &mo, msg, MSG)) < 0) goto bad;
    if (k && mo != (double)(long long)mo) { snprintf(msg, MSG, "'max_output_tokens' must be an integer"); goto bad; }
    if (k) cJSON_AddNumberToObject(chat, "max_tokens", mo);
    return chat;
bad:
    cJSON_Delete(chat);
    return NULL;
}

/* ---- request: the prompt, its terms, truncation ----------------------------------------- */

/* The chat path's field names in the Responses request's terms (a message's prefix). */
static const char *const kTerms[][2] = {
    {"'response_format.json_schema.schema'", "'text.format.schema'"},
    {"'response_format.json_schema.strict'", "'text.format.strict'"},
    {"'response_format.json_schema'", "'text.format'"},
    {"'response_format'", "'text.format'"},
    {"'tool_choice.allowed_tools.", "'tool_choice."},
    {"'tool_choice.allowed_tools'", "'tool_choice'"},
    {"'max_tokens'", "'max_output_tokens'"},
    {"'messages'", "'input'"},
};

/* msg, an error of the chat path, in the Responses request's terms: "messages[K]" becomes
 * the item that made message K (src: conv_messages'; shift 1: a system message carrying
 * text.format went in front of them), a chat field its Responses name. */
static void responses_terms(char *msg, const int *src, int n_msgs, int n_prev, int shift) {
    char t[MSG];
    const char *rest = NULL;
    int k = 0;
    t[0] = 0;
    if (!strncmp(msg, "messages[", 9)) {
        char *end;
        const long m = strtol(msg + 9, &end, 10) - shift;
        if (*end != ']' || m >= n_msgs) return;
        rest = end + 1;
        if (m < 0) snprintf(t, sizeof t, "text.format");
        else if (src[m] < 0) snprintf(t, sizeof t, "instructions");
        else if (src[m] >= n_prev) snprintf(t, sizeof t, "input[%d]", src[m] - n_prev);
        else snprintf(t, sizeof t, "previous_response_id's conversation[%d]", src[m]);
    }
    for (size_t i = 0; !rest && i < sizeof kTerms / sizeof kTerms[0]; i++)
        if (!strncmp(msg, kTerms[i][0], strlen(kTerms[i][0]))) {
            rest = msg + strlen(kTerms[i][0]);
            snprintf(t, sizeof t, "%s", kTerms[i][1]);
        }
    if (!rest) return;
    k = (int)strlen(t);
    snprintf(t + k, sizeof t - (size_t)k, "%s", rest);
    snprintf(msg, MSG, "%s", t);
}

const char *rs_item_type(const cJSON *x) {
    const char *t = rs_str_field(x, "type");
    return t ? t : "message";
}

/* A system or developer message: instructions, never dropped by truncation. */
static int instruction_item(const cJSON *x) {
    const char *r = rs_str_field(x, "role");
    return !strcmp(rs_item_type(x), "message") && r && (!strcmp(r, "system") || !strcmp(r, "developer"));
}

/* j's chat request for conv (its first n_prev items the stored ones) into *chat, rendered
 * into c (both replaced). 0, or 400 / 500 with a message in the Responses request's terms. */
int rs_render(srv *s, const cJSON *j, const cJSON *conv, int n_prev, cJSON **chat, srv_chat *c,
              char *msg) {
    cJSON_Delete(*chat);
    srv_chat_free(c);
    memset(c, 0, sizeof *c);
    int *src = malloc(((size_t)cJSON_GetArraySize(conv) + 1) * sizeof *src);
    if (!src) { *chat = NULL; snprintf(msg, MSG, "out of memory"); return 500; }
    if (!(*chat = chat_request(s, j, conv, n_prev, src, msg))) { free(src); return 400; }
    const int rc = srv_openai_chat_prompt(s, *chat, c, msg);
    if (rc) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(*chat, "messages");
        const cJSON *rf = cJSON_GetObjectItemCaseSensitive(*chat, "response_format");
        const char *fty = rs_str_field(rf, "type");
        /* srv_messages_with_format puts a system message in front unless the first is one */
        const char *r0 = rs_str_field(msgs->child, "role");
        const int shift = fty && strcmp(fty, "text") && !(r0 && (!strcmp(r0, "system") || !strcmp(r0, "developer")));
        responses_terms(msg, src, cJSON_GetArraySize(msgs), n_prev, shift);
    }
    free(src);
    return rc;
}

int rs_too_long(srv *s, const srv_chat *c, int truncated, char *msg) {
    snprintf(msg, MSG, "the input renders to %lld tokens (instructions, tools and items%s) and this "
             "server's context is %lld: no room to generate%s", (long long)c->ids.n,
             truncated ? ", the items truncation may drop dropped" : "", (long long)s->o.max_context,
             truncated ? "" : " (truncation \"auto\" drops the conversation's oldest items to fit)");
    return TOO_LONG;
}

/* conv without its first k droppable items (drop[x]: item x is droppable) into *cut, in one
 * pass; *np its stored items left of n_prev; rendered as render does. */
static int render_cut(srv *s, const cJSON *j, const cJSON *conv, int n_prev, const char *drop, int k,
                      cJSON **cut, int *np, cJSON **chat, srv_chat *c, char *msg) {
    cJSON_Delete(*cut);
    *cut = cJSON_CreateArray();
    *np = n_prev;
    int x = 0, d = 0;
    for (const cJSON *it = conv->child; *cut && it; it = it->next, x++) {
        if (drop[x] && d++ < k) {
            *np -= x < n_prev;
            continue;
        }
        cJSON *dup = cJSON_Duplicate(it, 1);
        if (!dup || !cJSON_AddItemToArray(*cut, dup)) { cJSON_Delete(dup); cJSON_Delete(*cut); *cut = NULL; }
    }
    if (!*cut) { snprintf(msg, MSG, "out of memory"); return 500; }
    return rs_render(s, j, *cut, *np, chat, c, msg);
}

typedef struct { const char *id; int d; } call_at;  /* a function_call's call_id, droppable index */

static int call_cmp(const void *a, const void *b) {
    return strcmp(((const call_at *)a)->id, ((const call_at *)b)->id);
}

/* truncation "auto" for a conversation whose prompt leaves no room: the fewest whole items
 * dropped from its start (never a system or developer message; no function_call_output kept
 * whose function_call is dropped; the last item kept) for the prompt to leave room, found by
 * bisection (dropping more never lengthens it). *conv, *n_prev, *chat and c become the cut
 * conversation's. 0, or a status with a message. Linear in the items but for the renders. */
int rs_truncate_conv(srv *s, const cJSON *j, cJSON **conv, int *n_prev, cJSON **chat, srv_chat *c,
                     char *msg) {
    const int n = cJSON_GetArraySize(*conv);
    char *drop = calloc((size_t)n + 1, 1);
    int *bad = calloc((size_t)n + 2, sizeof *bad), *cuts = malloc(((size_t)n + 1) * sizeof *cuts);
    call_at *calls = malloc(((size_t)n + 1) * sizeof *calls);
    int nd = 0, nc = 0, ncall = 0, rc = 0, x = 0, np = 0;
    cJSON *cut = NULL;
    if (!drop || !bad || !cuts || !calls) { rc = 500; snprintf(msg, MSG, "out of memory"); goto done; }
    for (const cJSON *it = (*conv)->child; it; it = it->next, x++) {
        if (instruction_item(it)) continue;
        drop[x] = 1;
        const char *id = rs_str_field(it, "call_id");
        if (id && !strcmp(rs_item_type(it), "function_call")) calls[ncall++] = (call_at){id, nd};
        nd++;
    }
    qsort(calls, (size_t)ncall, sizeof *calls, call_cmp);
    /* a cut k (drops droppable items [0, k)) splits a call at p from its output at q > p when
     * p < k <= q: bad[k] counts such pairs (a difference array) */
    x = 0;
    int d = 0;
    for (const cJSON *it = (*conv)->child; it; it = it->next, x++) {
        if (!drop[x]) continue;
        const char *id = rs_str_field(it, "call_id");
        if (id && !strcmp(rs_item_type(it), "function_call_output")) {
            const call_at key = {id, 0}, *f = bsearch(&key, calls, (size_t)ncall, sizeof *calls, call_cmp);
            if (f && f->d < d) { bad[f->d + 1]++; bad[d + 1]--; }
        }
        d++;
    }
    for (int k = 1, run = bad[0]; k < nd; k++) {
        run += bad[k];
        if (!run) cuts[nc++] = k;
    }
    int lo = 0, hi = nc - 1, best = -1, last = -1;
    while (lo <= hi) {
        const int mid = lo + (hi - lo) / 2;
        if ((rc = render_cut(s, j, *conv, *n_prev, drop, cuts[mid], &cut, &np, chat, c, msg))) goto done;
        last = mid;
        if ((int64_t)c->ids.n < s->o.max_context) { best = mid; hi = mid - 1; }
        else lo = mid + 1;
    }
    /* none fits: c holds the most cut (the last tried), or nothing could be dropped */
    if (best < 0) { rc = rs_too_long(s, c, 1, msg); goto done; }
    if (last != best && (rc = render_cut(s, j, *conv, *n_prev, drop, cuts[best], &cut, &np, chat, c, msg)))
        goto done;
    cJSON_Delete(*conv);
    *conv = cut;
    cut = NULL;
    *n_prev = np;
done:
    cJSON_Delete(cut);
    free(drop);
    free(bad);
    free(cuts);
    free(calls);
    return rc;
}
